//! The engine's view of memory protection: the checks of [`crate::mr`] turned into
//! completion statuses and NAK codes (MP-04, MP-05, RL-12).

use crate::memory::{Dst, Memory, Src};
use crate::mr::{AccessError, CopyError, MrTable, OdpFault, RemoteAccess};
use crate::verbs::{Handle, WcStatus};
use crate::wire::ext::NakCode;

/// Why a remote request could not touch memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RemoteErr {
    /// The R_Key check failed (key, PD, bounds, rights, alignment).
    Access(AccessError),
    /// The MR's pages are outside the caller's memory.
    Memory,
    /// A page of an ODP MR is not present (issue 29): no access error; the
    /// responder RNR NAKs (or holds its READ response) and raises the fault.
    PageFault(OdpFault),
}

impl RemoteErr {
    /// The NAK for this failure: Remote Access Error, Invalid Request for a
    /// misaligned atomic (OP-07), Remote Operational Error when memory itself failed.
    pub fn nak(self) -> NakCode {
        match self {
            RemoteErr::Access(a) => a.remote_nak(),
            RemoteErr::Memory => NakCode::RemoteOperationalError,
            // Never NAKed as an error: callers RNR NAK first (`odp`); this
            // is what a caller that cannot wait answers.
            RemoteErr::PageFault(_) => NakCode::RemoteOperationalError,
        }
    }
}

impl From<RemoteErr> for super::counters::NakReason {
    fn from(e: RemoteErr) -> Self {
        use super::counters::NakReason as R;
        match e {
            RemoteErr::Memory | RemoteErr::PageFault(_) => R::MemoryFault,
            RemoteErr::Access(a) => match a {
                AccessError::NoSuchKey => R::NoSuchKey,
                AccessError::KeyMismatch => R::KeyMismatch,
                AccessError::PdMismatch => R::PdMismatch,
                AccessError::OutOfBounds => R::OutOfBounds,
                AccessError::NoLocalWrite | AccessError::NoRemoteWrite => R::NoRemoteWrite,
                AccessError::NoRemoteRead => R::NoRemoteRead,
                AccessError::NoRemoteAtomic => R::NoRemoteAtomic,
                AccessError::MisalignedAtomic => R::MisalignedAtomic,
                AccessError::WindowNotBound => R::WindowNotBound,
                AccessError::WindowWrongQp => R::WindowWrongQp,
                AccessError::NoFlush => R::NoFlush,
                AccessError::Invalidated => R::RegionInvalidated,
                AccessError::OdpFailed => R::OdpFailed,
            },
        }
    }
}

impl From<CopyError> for RemoteErr {
    fn from(e: CopyError) -> RemoteErr {
        match e {
            CopyError::Access(a) => RemoteErr::Access(a),
            CopyError::Length => RemoteErr::Access(AccessError::OutOfBounds),
            CopyError::Mem(_) => RemoteErr::Memory,
            CopyError::PageFault(f) => RemoteErr::PageFault(f),
        }
    }
}

/// The completion status of a local copy failure (MP-05): a key or rights problem
/// is a Local Protection Error, a buffer too small a Local Length Error.
pub(crate) fn local_status(e: CopyError) -> WcStatus {
    match e {
        CopyError::Access(a) => a.local_status(),
        CopyError::Length => WcStatus::LocLenErr,
        CopyError::Mem(_) => WcStatus::LocProtErr,
        // Only where the caller cannot wait for the page (`odp`).
        CopyError::PageFault(_) => WcStatus::LocProtErr,
    }
}

pub(crate) fn remote_check(
    mrs: &MrTable,
    pd: Handle,
    qpn: u32,
    rkey: u32,
    va: u64,
    len: u64,
    need: RemoteAccess,
) -> Result<(), RemoteErr> {
    mrs.check_remote_at(pd, Some(qpn), rkey, va, len, need)
        .map(|_| ())
        .map_err(RemoteErr::Access)
}

pub(crate) fn remote_write(
    mrs: &MrTable,
    mem: &mut dyn Memory,
    pd: Handle,
    qpn: u32,
    rkey: u32,
    va: u64,
    data: Src<'_>,
) -> Result<(), RemoteErr> {
    let r = mrs
        .check_remote_at(
            pd,
            Some(qpn),
            rkey,
            va,
            data.len() as u64,
            RemoteAccess::Write,
        )
        .map_err(RemoteErr::Access)?;
    r.write(mem, data).map_err(RemoteErr::from)
}

pub(crate) fn remote_read(
    mrs: &MrTable,
    mem: &dyn Memory,
    pd: Handle,
    qpn: u32,
    rkey: u32,
    va: u64,
    buf: Dst<'_>,
) -> Result<(), RemoteErr> {
    let r = mrs
        .check_remote_at(
            pd,
            Some(qpn),
            rkey,
            va,
            buf.len() as u64,
            RemoteAccess::Read,
        )
        .map_err(RemoteErr::Access)?;
    r.read(mem, buf).map_err(RemoteErr::from)
}

/// Executes an atomic once (OP-07, OP-13); returns the original value.
#[allow(clippy::too_many_arguments)]
pub(crate) fn remote_atomic(
    mrs: &MrTable,
    mem: &mut dyn Memory,
    pd: Handle,
    qpn: u32,
    rkey: u32,
    va: u64,
    cmp_swap: bool,
    compare: u64,
    swap_add: u64,
) -> Result<u64, RemoteErr> {
    let t = mrs
        .check_atomic_at(pd, Some(qpn), rkey, va)
        .map_err(RemoteErr::Access)?;
    if let Some(f) = t.odp_fault() {
        return Err(RemoteErr::PageFault(f));
    }
    let r = if cmp_swap {
        t.compare_swap(mem, compare, swap_add)
    } else {
        t.fetch_add(mem, swap_add)
    };
    r.map_err(|_| RemoteErr::Memory)
}

/// Executes an ATOMIC WRITE once (IBA 1.5 MPE): one aligned 8-byte store.
pub(crate) fn remote_atomic_write(
    mrs: &MrTable,
    mem: &mut dyn Memory,
    pd: Handle,
    qpn: u32,
    rkey: u32,
    va: u64,
    value: u64,
) -> Result<(), RemoteErr> {
    let t = mrs
        .check_atomic_write_at(pd, Some(qpn), rkey, va)
        .map_err(RemoteErr::Access)?;
    if let Some(f) = t.odp_fault() {
        return Err(RemoteErr::PageFault(f));
    }
    t.store(mem, value).map_err(|_| RemoteErr::Memory)
}
