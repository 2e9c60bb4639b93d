//! The data-path checks of an [`MrTable`] (MP-01, MP-02, MP-04, MP-05): may this
//! L_Key or R_Key touch this range with these rights from a QP of this PD; a
//! yes is an [`MrRange`] or an [`AtomicTarget`], a no an [`AccessError`] with one
//! variant per reason. Gather and scatter over an SGE list check every piece
//! before they touch memory.

use crate::memory::{Dst, MemError, Memory, Src};
use crate::verbs::{Access, Handle, MwType, Sge, WcStatus};
use crate::wire::NakCode;

use super::region::{finished, seg_len};
use super::{key_index, AtomicTarget, Mr, MrRange, MrTable};

/// Why a data-path access was refused. Every variant is a protection failure the
/// caller counts: for a local access (an SGE) the WQE completes with
/// [`WcStatus::LocProtErr`] (IBA 10.10.3 Table 81/82, MP-05); for a remote access
/// (R_Key) the responder NAKs Remote Access Error, except [`MisalignedAtomic`],
/// which is NAK Invalid Request (OP-07). See [`AccessError::local_status`] and
/// [`AccessError::remote_nak`].
///
/// [`MisalignedAtomic`]: AccessError::MisalignedAtomic
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AccessError {
    /// The key's index names no registered MR (MP-02).
    #[error("key index names no memory region")]
    NoSuchKey,
    /// The index names an MR but the key byte is not its current one: a stale key
    /// (MP-02).
    #[error("key byte does not match the memory region's current key")]
    KeyMismatch,
    /// The MR belongs to another PD than the QP (or SRQ) using it (MP-01).
    #[error("memory region belongs to another protection domain")]
    PdMismatch,
    /// `[va, va + len)` is not inside the MR, or wraps around (MP-04).
    #[error("access is outside the memory region")]
    OutOfBounds,
    /// A local write (receive, RDMA READ response, atomic result) into an MR
    /// without LOCAL_WRITE (MP-04).
    #[error("memory region does not allow local write")]
    NoLocalWrite,
    /// RDMA READ on an MR without REMOTE_READ (MP-04).
    #[error("memory region does not allow remote read")]
    NoRemoteRead,
    /// RDMA WRITE on an MR without REMOTE_WRITE (MP-04).
    #[error("memory region does not allow remote write")]
    NoRemoteWrite,
    /// ATOMIC on an MR without REMOTE_ATOMIC (MP-04).
    #[error("memory region does not allow remote atomic")]
    NoRemoteAtomic,
    /// ATOMIC at a VA whose low 3 bits are not zero (IBA 9.4.5, OP-07).
    #[error("atomic operation at a virtual address that is not 8-byte aligned")]
    MisalignedAtomic,
    /// The key names a memory window that is not bound (free, or a type 1
    /// window unbound by a zero-length bind; MP-06, MP-07).
    #[error("memory window is not bound")]
    WindowNotBound,
    /// The key names a type 2 window bound to another QP than the one the
    /// request arrived at (IBA 10.6.7.2.4: type 2A its QP, type 2B its QP and
    /// PD; MP-07).
    #[error("memory window is bound to another queue pair")]
    WindowWrongQp,
    /// A FLUSH whose placement type the MR's access does not allow
    /// (`FLUSH_GLOBAL` / `FLUSH_PERSISTENT`; IBA 1.5 MPE).
    #[error("region lacks the flush access the placement type needs")]
    NoFlush,
    /// The key is the current key of a fast-registration MR that is free: not
    /// registered yet, or invalidated by LOCAL_INV or SEND with Invalidate
    /// (MP-08, o9-5.2.2).
    #[error("memory region is invalidated")]
    Invalidated,
    /// A page of an ODP MR the guest could not fault in (ODP_FAULT_FAIL,
    /// issue 29): an access error until the page is mapped. A page that is
    /// merely not present is no access error but a [`CopyError::PageFault`].
    #[error("on-demand paging could not fault the page in")]
    OdpFailed,
}

impl AccessError {
    /// The completion status of a WQE whose SGE failed this check: Local Protection
    /// Error (IBA 10.10.3 Tables 81, 82; seed 003 "常见 Completion Error").
    pub const fn local_status(self) -> WcStatus {
        WcStatus::LocProtErr
    }

    /// The NAK a responder sends for a request whose R_Key failed this check:
    /// Remote Access Error (IBA 9.3.3.2: "any violation ... NAK"), but Invalid
    /// Request for a misaligned atomic (OP-07).
    pub const fn remote_nak(self) -> NakCode {
        match self {
            AccessError::MisalignedAtomic => NakCode::InvalidRequest,
            _ => NakCode::RemoteAccessError,
        }
    }
}

/// Why a copy through an MR or an SGE list failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum CopyError {
    /// An SGE failed its local access check (MP-04): Local Protection Error.
    #[error(transparent)]
    Access(#[from] AccessError),
    /// The bytes asked for run past the end of the checked range or of the SGE
    /// list: for a receive WQE too small for the message, Local Length Error
    /// (IBA 10.10.3 Table 82, MP-05).
    #[error("access runs past the end of the range or scatter/gather list")]
    Length,
    /// A translated physical address is outside the caller's memory (ARCHITECTURE.md §9):
    /// the MR was registered over pages the caller does not map.
    #[error(transparent)]
    Mem(#[from] MemError),
    /// A page of an ODP MR is not present (issue 29): no byte was copied; the
    /// engine raises the fault and waits for the page. Never a protection
    /// failure.
    #[error("page fault: {0:?}")]
    PageFault(super::OdpFault),
}

/// A local access to an SGE (MP-04).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocalAccess {
    /// The HCA reads (a send's gather list): always allowed.
    Read,
    /// The HCA writes (a receive's scatter list, READ response, atomic result):
    /// needs LOCAL_WRITE.
    Write,
}

/// A remote access through an R_Key (MP-04). Atomics go through
/// [`MrTable::check_atomic`], which also checks alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteAccess {
    /// RDMA READ: needs REMOTE_READ.
    Read,
    /// RDMA WRITE: needs REMOTE_WRITE.
    Write,
}

/// Sum of the SGE lengths, `None` on overflow.
pub fn sge_total_len(sges: &[Sge]) -> Option<u64> {
    sges.iter()
        .try_fold(0u64, |acc, s| acc.checked_add(u64::from(s.length)))
}

impl MrTable {
    // ---- R_Key resolution (MP-02, MP-06, MP-07) ----

    /// R_Key resolution of a remote access arriving at QP `qpn` (when known)
    /// in `pd`: an MR, or a bound window (MP-06, MP-07) whose PD is the QP's,
    /// whose QP is this one (type 2A: the QP alone, checked first; type 2B:
    /// the PD and the QP), and whose range holds `[va, va + len)`;
    /// then the access goes through the window's MR. Returns the MR and the
    /// rights the key grants.
    pub(super) fn lookup_remote(
        &self,
        pd: Handle,
        qpn: Option<u32>,
        key: u32,
        va: u64,
        len: u64,
    ) -> Result<(&Mr, Access), AccessError> {
        if let Some(mw) = self.mw_at(key_index(key)) {
            if mw.key != key {
                return Err(AccessError::KeyMismatch);
            }
            // Type 2A is associated with its QP alone (seed 003 "Type 2A":
            // the R_Key and the right QPN); its PD is that QP's by the bind.
            if mw.ty != MwType::Type2A && mw.pd != pd {
                return Err(AccessError::PdMismatch);
            }
            let b = mw.bound.as_ref().ok_or(AccessError::WindowNotBound)?;
            if b.qpn.is_some() && b.qpn != qpn {
                return Err(AccessError::WindowWrongQp);
            }
            let inside = match va.checked_sub(b.va) {
                Some(off) => off <= b.length && len <= b.length - off,
                None => false,
            };
            if !inside {
                return Err(AccessError::OutOfBounds);
            }
            // The bind checked the MR's PD and bounds; it cannot go while bound.
            let mr = self.lookup_in_pd(pd, b.mr_key, va, len)?;
            return Ok((mr, b.access));
        }
        let mr = self.lookup_in_pd(pd, key, va, len)?;
        Ok((mr, mr.access))
    }

    // ---- data-path checks (MP-01, MP-02, MP-04, MP-05) ----

    /// May a WQE of a QP in `pd` touch `[va, va + len)` through L_Key `lkey`?
    /// Checks, in order: the key (MP-02), the PD (MP-01), the bounds and the
    /// rights (MP-04): local read is always allowed, local write needs
    /// LOCAL_WRITE. For a receive WQE of an SRQ, `pd` is the SRQ's PD (seed 003,
    /// "SRQ PD"). Any failure completes the WQE with Local Protection Error.
    pub fn check_local(
        &self,
        pd: Handle,
        lkey: u32,
        va: u64,
        len: u64,
        need: LocalAccess,
    ) -> Result<MrRange<'_>, AccessError> {
        let mr = self.lookup_in_pd(pd, lkey, va, len)?;
        if need == LocalAccess::Write && !mr.access.contains(Access::LOCAL_WRITE) {
            return Err(AccessError::NoLocalWrite);
        }
        mr.odp_check(va, len)?;
        Ok(MrRange { mr, va, len })
    }

    /// May a request arriving at a QP in `pd` touch `[va, va + len)` through
    /// R_Key `rkey`? IBA 9.3.3.2: the responder validates the R_Key, the access
    /// rights and the virtual address, and checks bounds; the failure is NAK
    /// Remote Access Error. (Whether a zero-length RDMA checks its R_Key at all is
    /// the responder's decision; this always checks.)
    pub fn check_remote(
        &self,
        pd: Handle,
        rkey: u32,
        va: u64,
        len: u64,
        need: RemoteAccess,
    ) -> Result<MrRange<'_>, AccessError> {
        self.check_remote_at(pd, None, rkey, va, len, need)
    }

    /// [`check_remote`](Self::check_remote) for a request arriving at QP `qpn`:
    /// the R_Key may also name a bound memory window (MP-06, MP-07), checked
    /// for its PD (not type 2A), its QP (type 2A, 2B), its range and its own rights, then
    /// translated through its MR.
    pub fn check_remote_at(
        &self,
        pd: Handle,
        qpn: Option<u32>,
        rkey: u32,
        va: u64,
        len: u64,
        need: RemoteAccess,
    ) -> Result<MrRange<'_>, AccessError> {
        let (mr, rights) = self.lookup_remote(pd, qpn, rkey, va, len)?;
        let (right, err) = match need {
            RemoteAccess::Read => (Access::REMOTE_READ, AccessError::NoRemoteRead),
            RemoteAccess::Write => (Access::REMOTE_WRITE, AccessError::NoRemoteWrite),
        };
        if !rights.contains(right) {
            return Err(err);
        }
        mr.odp_check(va, len)?;
        Ok(MrRange { mr, va, len })
    }

    /// May an ATOMIC arriving at a QP in `pd` operate on the 8-byte word at `va`
    /// through R_Key `rkey`? The VA must be naturally aligned (IBA 9.4.5: "the low
    /// 3 bits of the virtual address must be zero"), checked first as a property
    /// of the request itself: NAK Invalid Request (OP-07). Then key, PD, bounds
    /// (the R_Key range must wholly contain the word) and REMOTE_ATOMIC: NAK
    /// Remote Access Error.
    pub fn check_atomic(
        &self,
        pd: Handle,
        rkey: u32,
        va: u64,
    ) -> Result<AtomicTarget, AccessError> {
        self.check_atomic_at(pd, None, rkey, va)
    }

    /// [`check_atomic`](Self::check_atomic) for a request arriving at QP `qpn`,
    /// through an MR or a bound window (MP-06, MP-07).
    pub fn check_atomic_at(
        &self,
        pd: Handle,
        qpn: Option<u32>,
        rkey: u32,
        va: u64,
    ) -> Result<AtomicTarget, AccessError> {
        self.word_target(
            pd,
            qpn,
            rkey,
            va,
            Access::REMOTE_ATOMIC,
            AccessError::NoRemoteAtomic,
        )
    }

    /// The 8-byte word at `va` through `rkey`, for a request that needs
    /// `right` (else `denied`): aligned first (a property of the request:
    /// Invalid Request), then key, PD, bounds and the right.
    fn word_target(
        &self,
        pd: Handle,
        qpn: Option<u32>,
        rkey: u32,
        va: u64,
        right: Access,
        denied: AccessError,
    ) -> Result<AtomicTarget, AccessError> {
        if !va.is_multiple_of(8) {
            return Err(AccessError::MisalignedAtomic);
        }
        let (mr, rights) = self.lookup_remote(pd, qpn, rkey, va, 8)?;
        if !rights.contains(right) {
            return Err(denied);
        }
        mr.odp_check(va, 8)?;
        if let Some(f) = mr.odp_fault(va, 8, true) {
            // Issue 29: not present is no access error; nothing runs.
            return Ok(AtomicTarget {
                pa: 0,
                fault: Some(f),
            });
        }
        // One segment: the word is aligned and pages are >= 4 KiB.
        match mr.segments(va, 8).next() {
            Some((pa, 8)) => Ok(AtomicTarget { pa, fault: None }),
            _ => Err(AccessError::OutOfBounds),
        }
    }

    /// May an ATOMIC WRITE (IBA 1.5 MPE) arriving at QP `qpn` store the 8-byte
    /// word at `va` through `rkey`? Aligned as an atomic (else Invalid Request),
    /// then key, PD, bounds and REMOTE_WRITE (as Linux rxe: it is a WRITE that
    /// must not tear), else Remote Access Error.
    pub fn check_atomic_write_at(
        &self,
        pd: Handle,
        qpn: Option<u32>,
        rkey: u32,
        va: u64,
    ) -> Result<AtomicTarget, AccessError> {
        self.word_target(
            pd,
            qpn,
            rkey,
            va,
            Access::REMOTE_WRITE,
            AccessError::NoRemoteWrite,
        )
    }

    /// May a FLUSH (IBA 1.5 MPE) arriving at QP `qpn` name `rkey` with these
    /// placement type bits? Key, PD, the rights `need` (FLUSH_GLOBAL and/or
    /// FLUSH_PERSISTENT) and, for a range flush (`whole_region` false), the
    /// bounds of `[va, va + len)`; a flush of the whole region ignores the
    /// request's VA and length.
    pub fn check_flush_at(
        &self,
        pd: Handle,
        qpn: Option<u32>,
        rkey: u32,
        range: Option<(u64, u64)>,
        need: Access,
    ) -> Result<(), AccessError> {
        let (va, len) = match range {
            Some(r) => r,
            None => {
                let start = match self.mw_at(key_index(rkey)) {
                    Some(mw) => mw.bound.as_ref().map(|b| b.va),
                    None => self.lookup(rkey).ok().map(|m| m.iova),
                };
                (start.unwrap_or(0), 0)
            }
        };
        let (_, rights) = self.lookup_remote(pd, qpn, rkey, va, len)?;
        if !rights.contains(need) {
            return Err(AccessError::NoFlush);
        }
        Ok(())
    }

    // ---- gather / scatter over SGE lists (MP-03, MP-04, MP-05) ----

    /// Checks every non-empty SGE of a WQE with [`check_local`](Self::check_local)
    /// and returns the list's total length. Zero-length SGEs carry no data and are
    /// not checked (as Linux rxe). A total past 2^64 - 1 is `Length`.
    pub fn check_sges(
        &self,
        pd: Handle,
        sges: &[Sge],
        need: LocalAccess,
    ) -> Result<u64, CopyError> {
        for s in sges.iter().filter(|s| s.length != 0) {
            self.check_local(pd, s.lkey, s.addr, u64::from(s.length), need)?;
        }
        sge_total_len(sges).ok_or(CopyError::Length)
    }

    /// Copies bytes `[offset, offset + buf.len())` of the concatenation of the
    /// SGEs into `buf` (a send's gather list into a packet payload). Each SGE
    /// touched is checked for local read first; nothing is read unless all pass.
    pub fn gather<'d>(
        &self,
        mem: &dyn Memory,
        pd: Handle,
        sges: &[Sge],
        offset: u64,
        buf: impl Into<Dst<'d>>,
    ) -> Result<(), CopyError> {
        let buf = buf.into();
        if let Some(r) = self.one_sge_range(pd, sges, offset, buf.len(), LocalAccess::Read) {
            return r?.read(mem, buf);
        }
        self.check_sge_span(pd, sges, offset, buf.len(), LocalAccess::Read)?;
        let mut rest = buf;
        for piece in self.sge_ranges(pd, sges, offset, rest.len(), LocalAccess::Read) {
            let r = piece?;
            let at = seg_len(r.len, rest.len())?;
            let (head, tail) = rest.split_at(at).ok_or(CopyError::Length)?;
            r.read(mem, head)?;
            rest = tail;
        }
        finished(rest.len())
    }

    /// Copies `data` into bytes `[offset, offset + data.len())` of the
    /// concatenation of the SGEs (an incoming payload into a receive WQE at its
    /// running offset, or a READ response into the requester's scatter list). Each
    /// SGE touched is checked for local write first; nothing is written unless all
    /// pass. Past the end of the list is `Length` (Local Length Error, MP-05).
    pub fn scatter<'d>(
        &self,
        mem: &mut dyn Memory,
        pd: Handle,
        sges: &[Sge],
        offset: u64,
        data: impl Into<Src<'d>>,
    ) -> Result<(), CopyError> {
        let data = data.into();
        if let Some(r) = self.one_sge_range(pd, sges, offset, data.len(), LocalAccess::Write) {
            return r?.write(mem, data);
        }
        self.check_sge_span(pd, sges, offset, data.len(), LocalAccess::Write)?;
        let mut rest = data;
        for piece in self.sge_ranges(pd, sges, offset, rest.len(), LocalAccess::Write) {
            let r = piece?;
            let at = seg_len(r.len, rest.len())?;
            let (head, tail) = rest.split_at(at).ok_or(CopyError::Length)?;
            r.write(mem, head)?;
            rest = tail;
        }
        finished(rest.len())
    }

    /// The usual case of gather/scatter, a non-empty span inside a one-SGE list:
    /// its single checked piece (the same checks, in the same order, as
    /// [`Self::check_sge_span`] makes), or `None` for any other list or span,
    /// which takes the general path.
    fn one_sge_range(
        &self,
        pd: Handle,
        sges: &[Sge],
        offset: u64,
        n: usize,
        need: LocalAccess,
    ) -> Option<Result<MrRange<'_>, CopyError>> {
        let [s] = sges else { return None };
        let n = u64::try_from(n).ok().filter(|&n| n > 0)?;
        let end = offset.checked_add(n)?;
        if end > u64::from(s.length) {
            return Some(Err(CopyError::Length));
        }
        // offset < end <= length <= u32::MAX, so only a huge `addr` overflows.
        Some(match s.addr.checked_add(offset) {
            Some(va) => self
                .check_local(pd, s.lkey, va, n, need)
                .map_err(CopyError::Access),
            None => Err(CopyError::Access(AccessError::OutOfBounds)),
        })
    }

    /// First pass of gather/scatter: checks every piece and that the list is long
    /// enough, touching no memory.
    fn check_sge_span(
        &self,
        pd: Handle,
        sges: &[Sge],
        offset: u64,
        n: usize,
        need: LocalAccess,
    ) -> Result<(), CopyError> {
        let n64 = u64::try_from(n).map_err(|_| CopyError::Length)?;
        let end = offset.checked_add(n64).ok_or(CopyError::Length)?;
        if end > sge_total_len(sges).ok_or(CopyError::Length)? {
            return Err(CopyError::Length);
        }
        let mut covered = 0u64;
        for piece in self.sge_ranges(pd, sges, offset, n, need) {
            let r = piece?;
            // Issue 29: every ODP page present before any byte moves.
            if let Some(f) = r.odp_fault(r.len, need == LocalAccess::Write) {
                return Err(CopyError::PageFault(f));
            }
            covered += r.len;
        }
        if covered == n64 {
            Ok(())
        } else {
            Err(CopyError::Length)
        }
    }

    /// The checked piece of each SGE overlapping `[offset, offset + n)` of the
    /// list, in order.
    fn sge_ranges<'s>(
        &'s self,
        pd: Handle,
        sges: &'s [Sge],
        offset: u64,
        n: usize,
        need: LocalAccess,
    ) -> impl Iterator<Item = Result<MrRange<'s>, AccessError>> + 's {
        let mut skip = offset;
        let mut left = n as u64;
        sges.iter().filter_map(move |s| {
            let len = u64::from(s.length);
            if skip >= len {
                skip -= len;
                return None;
            }
            if left == 0 {
                return None;
            }
            let take = (len - skip).min(left);
            // skip < len <= u32::MAX, so only a huge `addr` can overflow here.
            let r = match s.addr.checked_add(skip) {
                Some(va) => self.check_local(pd, s.lkey, va, take, need),
                None => Err(AccessError::OutOfBounds),
            };
            skip = 0;
            left -= take;
            Some(r)
        })
    }

    // ---- internals ----

    /// The MR whose current key is `key` (MP-02).
    pub(super) fn lookup(&self, key: u32) -> Result<&Mr, AccessError> {
        let index = key_index(key);
        let slot = index
            .checked_sub(1)
            .and_then(|i| self.slots.get(i as usize))
            .ok_or(AccessError::NoSuchKey)?;
        let mr = slot.mr.as_ref().ok_or(AccessError::NoSuchKey)?;
        if mr.key != key {
            return Err(AccessError::KeyMismatch);
        }
        if mr.fast.is_some_and(|f| !f.valid) {
            return Err(AccessError::Invalidated);
        }
        Ok(mr)
    }

    /// Key, PD and bounds checks shared by every data-path access.
    pub(super) fn lookup_in_pd(
        &self,
        pd: Handle,
        key: u32,
        va: u64,
        len: u64,
    ) -> Result<&Mr, AccessError> {
        let mr = self.lookup(key)?;
        // MP-01; seed 002: keys are valid only on QPs of the PD they were
        // registered in.
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        // MP-04; IBA 9.3.3.2 bounds check.
        if !mr.contains(va, len) {
            return Err(AccessError::OutOfBounds);
        }
        Ok(mr)
    }
}
