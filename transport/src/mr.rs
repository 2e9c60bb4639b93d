//! Protection domains and memory regions (IBA 3.5.3-3.5.5, 10.6; seed 003;
//! features MP-01..MP-05).
//!
//! An [`MrTable`] is the engine's MR context table (Mellanox "Mkey context",
//! HiSilicon "MPT", seed 003) plus its translation tables (the MTT): for each MR its
//! PD, start IOVA, length, access rights and the physical address of every page it
//! spans. The engine asks it three kinds of questions:
//!
//! - verbs: allocate / deallocate a PD, register / reregister / deregister an MR;
//! - checks on the data path: may this L_Key (a WQE's SGE) or this R_Key (a RETH or
//!   AtomicETH) touch `[va, va + len)` with these rights, from a QP of this PD? A
//!   yes is a [`MrRange`] or an [`AtomicTarget`], a no is an [`AccessError`] with
//!   one variant per reason so that each reason can be counted;
//! - translation: copy between a byte slice and a checked range, page by page,
//!   through the caller's [`Memory`], or gather / scatter over an SGE list.
//!
//! Keys (MP-02, IBA 3.5.3, seed 003 "Memory Key"): L_Key = R_Key =
//! `(index << 8) | key_byte`, a 24-bit index into the table and an 8-bit key that
//! changes each time an index is reused, so that a key kept after deregistration
//! fails instead of reaching the next MR at that index. Index 0 is never used: key 0
//! (a zeroed SGE) is never valid.
//!
//! Nothing here panics on any input: every length, address and index from a WQE or
//! a packet is checked with overflow-safe arithmetic first (design.md §9).

use std::collections::{BTreeMap, VecDeque};

use crate::memory::{MemError, Memory};
use crate::verbs::{Access, Handle, MwBind, MwType, Sge, VerbError, WcStatus};
use crate::wire::NakCode;

/// Largest number of MRs: the key index has 24 bits and index 0 is reserved.
pub const MAX_MR_INDEX: u32 = (1 << 24) - 1;
/// Smallest page size of a translation table (any page of a guest).
pub const MIN_PAGE_SIZE: u64 = 4 << 10;
/// Largest page size of a translation table (a 1 GiB huge page).
pub const MAX_PAGE_SIZE: u64 = 1 << 30;

/// Access bits this engine implements; any other bit in a registration is refused.
/// FLUSH_PERSISTENT is not among them: the memory the engine is given is not
/// known to be non-volatile, so a FLUSH cannot promise persistence (IBA 1.5 MPE).
const SUPPORTED_ACCESS: u32 = Access::LOCAL_WRITE.0
    | Access::REMOTE_WRITE.0
    | Access::REMOTE_READ.0
    | Access::REMOTE_ATOMIC.0
    | Access::MW_BIND.0
    | Access::FLUSH_GLOBAL.0;

/// The index part of a memory key (MP-02).
pub const fn key_index(key: u32) -> u32 {
    key >> 8
}

/// The 8-bit key part of a memory key (MP-02).
pub const fn key_byte(key: u32) -> u8 {
    key as u8
}

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
    /// request arrived at (IBA 10.6.7.2.4, type 2B: QP and PD; MP-07).
    #[error("memory window is bound to another queue pair")]
    WindowWrongQp,
    /// A FLUSH whose placement type the MR's access does not allow
    /// (`FLUSH_GLOBAL` / `FLUSH_PERSISTENT`; IBA 1.5 MPE).
    #[error("region lacks the flush access the placement type needs")]
    NoFlush,
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
    /// A translated physical address is outside the caller's memory (design.md §9):
    /// the MR was registered over pages the caller does not map.
    #[error(transparent)]
    Mem(#[from] MemError),
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

/// A memory region's translation: where its bytes live (MP-03).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Translation {
    /// Virtual address of the first byte (any alignment).
    pub iova: u64,
    /// Bytes; 0 is allowed (then `pages` is empty).
    pub length: u64,
    /// A power of two in `MIN_PAGE_SIZE..=MAX_PAGE_SIZE`.
    pub page_size: u64,
    /// Physical address of each page spanned by `[iova, iova + length)`, each
    /// aligned to `page_size`; `iova`'s offset in its page is its offset in
    /// `pages[0]`.
    pub pages: Vec<u64>,
}

/// What a reregistration changes (`ibv_rereg_mr` flags: CHANGE_TRANSLATION,
/// CHANGE_PD, CHANGE_ACCESS); `None` keeps the current value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Rereg {
    pub pd: Option<Handle>,
    pub access: Option<Access>,
    pub translation: Option<Translation>,
}

/// A registered memory region: one MR context entry and its page list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mr {
    key: u32,
    pd: Handle,
    access: Access,
    iova: u64,
    length: u64,
    page_shift: u32,
    pages: Vec<u64>,
    /// A DMA MR (`get_dma_mr`): virtual = physical over the whole address space,
    /// no page list; the caller's memory checks every access.
    identity: bool,
    /// Memory windows bound to it (MP-06, MP-07): while any is, the MR cannot
    /// be deregistered or reregistered (IBA 10.6.7; seed 003 "如果一个 MR 还有被
    /// 绑定的 MW,那么这个 MR 不能被取消注册").
    windows: u32,
}

impl Mr {
    /// Memory windows bound to this MR.
    pub fn windows(&self) -> u32 {
        self.windows
    }

    /// Its L_Key, which is also its R_Key.
    pub fn key(&self) -> u32 {
        self.key
    }

    pub fn pd(&self) -> Handle {
        self.pd
    }

    pub fn access(&self) -> Access {
        self.access
    }

    pub fn iova(&self) -> u64 {
        self.iova
    }

    pub fn length(&self) -> u64 {
        self.length
    }

    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// Whether this is a DMA MR (virtual address = physical address).
    pub fn is_identity(&self) -> bool {
        self.identity
    }

    /// Whether `[va, va + len)` lies inside the MR, without overflow (MP-04;
    /// IBA 9.3.3.2: the responder checks that the data does not cross the MR's start
    /// and end). A zero-length range may sit at either end.
    pub fn contains(&self, va: u64, len: u64) -> bool {
        match va.checked_sub(self.iova) {
            Some(off) => off <= self.length && len <= self.length - off,
            None => false,
        }
    }

    /// The physical segments of `[va, va + len)`, which must lie inside the MR
    /// (else the iterator ends early). Seed 003: `offset = va - start_va`, page
    /// `offset / page_size`, `pa = page[index] + offset % page_size`, where the
    /// offset counts from the start of the first page (the IOVA's page).
    fn segments(&self, va: u64, len: u64) -> Segments<'_> {
        let mask = self.page_size() - 1;
        // rel = va - (iova & !mask); cannot overflow when va >= iova.
        let rel = va
            .checked_sub(self.iova)
            .and_then(|off| off.checked_add(self.iova & mask));
        if self.identity {
            // `contains` was checked: [va, va + len) does not wrap.
            return Segments {
                pages: &[],
                page_shift: 0,
                rel: va,
                left: len,
                identity: true,
            };
        }
        Segments {
            identity: false,
            pages: &self.pages,
            page_shift: self.page_shift,
            rel: rel.unwrap_or(0),
            left: if rel.is_some() { len } else { 0 },
        }
    }
}

/// Iterator over the physical `(address, length)` pieces of a virtual range of an
/// MR, one per page touched (MP-03).
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    pages: &'a [u64],
    page_shift: u32,
    /// Offset of the next byte from the start of the MR's first page.
    rel: u64,
    left: u64,
    /// A DMA MR: one segment, at the virtual address itself.
    identity: bool,
}

impl Iterator for Segments<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if self.left == 0 {
            return None;
        }
        if self.identity {
            let n = std::mem::take(&mut self.left);
            return Some((self.rel, n));
        }
        let page_size = 1u64 << self.page_shift;
        let off = self.rel & (page_size - 1);
        let idx = usize::try_from(self.rel >> self.page_shift).ok()?;
        let Some(&page) = self.pages.get(idx) else {
            // Outside the page list: only reachable through a range that was not
            // checked; end rather than guess.
            self.left = 0;
            return None;
        };
        let n = self.left.min(page_size - off);
        self.rel = self.rel.saturating_add(n);
        self.left -= n;
        // `page` is page aligned and `page + page_size` does not overflow
        // (checked at registration), so neither does `page + off + n`.
        Some((page + off, n))
    }
}

/// A range of an MR that passed a data-path check: proof that `[va, va + len)` may
/// be touched as asked. It borrows the table, so the MR cannot be deregistered or
/// reregistered while it is held.
#[derive(Debug, Clone, Copy)]
pub struct MrRange<'a> {
    mr: &'a Mr,
    va: u64,
    len: u64,
}

impl<'a> MrRange<'a> {
    pub fn mr(&self) -> &'a Mr {
        self.mr
    }

    pub fn va(&self) -> u64 {
        self.va
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The physical segments of the whole range (MP-03).
    pub fn segments(&self) -> Segments<'a> {
        self.mr.segments(self.va, self.len)
    }

    /// Reads `buf.len()` bytes from the start of the range, page by page.
    pub fn read(&self, mem: &dyn Memory, buf: &mut [u8]) -> Result<(), CopyError> {
        let mut rest = buf;
        for (pa, n) in self.prefix(rest.len())? {
            let (head, tail) = rest.split_at_mut(seg_len(n, rest.len())?);
            let mut at = pa;
            for chunk in head.chunks_mut(COPY_CHUNK) {
                mem.read(at, chunk)?;
                at += chunk.len() as u64;
            }
            rest = tail;
        }
        finished(rest.len())
    }

    /// Writes `data` at the start of the range, page by page.
    pub fn write(&self, mem: &mut dyn Memory, data: &[u8]) -> Result<(), CopyError> {
        let mut rest = data;
        for (pa, n) in self.prefix(data.len())? {
            let (head, tail) = rest.split_at(seg_len(n, rest.len())?);
            let mut at = pa;
            for chunk in head.chunks(COPY_CHUNK) {
                mem.write(at, chunk)?;
                at += chunk.len() as u64;
            }
            rest = tail;
        }
        finished(rest.len())
    }

    /// The segments of the first `n` bytes of the range.
    fn prefix(&self, n: usize) -> Result<Segments<'a>, CopyError> {
        let n = u64::try_from(n).map_err(|_| CopyError::Length)?;
        if n > self.len {
            return Err(CopyError::Length);
        }
        Ok(self.mr.segments(self.va, n))
    }
}

/// Largest single [`Memory`] access of [`MrRange::read`] and [`MrRange::write`]:
/// above ~2 KiB glibc's memcpy switches to `rep movsb`, much slower when source
/// and destination are not mutually aligned, the usual case for a payload (as in
/// `wire::packet`; engine benchmark, one thread ~1.2x). A segment stays within one
/// page, so `pa + chunk` cannot overflow (checked at registration).
const COPY_CHUNK: usize = 1024;

/// A segment's length as a slice length no longer than `max`.
fn seg_len(n: u64, max: usize) -> Result<usize, CopyError> {
    match usize::try_from(n) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(CopyError::Length),
    }
}

/// Segments that ended before the buffer did (never for a checked range).
fn finished(left: usize) -> Result<(), CopyError> {
    if left == 0 {
        Ok(())
    } else {
        Err(CopyError::Length)
    }
}

/// The physical address of an 8-byte word that passed [`MrTable::check_atomic`]:
/// an aligned word never crosses a page (pages are at least 4 KiB), so it is one
/// physical address (OP-07, OP-13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicTarget {
    pa: u64,
}

impl AtomicTarget {
    /// The physical address of the word (8-byte aligned).
    pub fn pa(&self) -> u64 {
        self.pa
    }

    /// CmpSwap (IBA 9.4.5): returns the original value.
    pub fn compare_swap(
        &self,
        mem: &mut dyn Memory,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemError> {
        mem.compare_swap(self.pa, compare, swap)
    }

    /// FetchAdd (IBA 9.4.5): returns the original value.
    pub fn fetch_add(&self, mem: &mut dyn Memory, add: u64) -> Result<u64, MemError> {
        mem.fetch_add(self.pa, add)
    }

    /// ATOMIC WRITE (IBA 1.5 MPE): one single-copy-atomic 8-byte store.
    pub fn store(&self, mem: &mut dyn Memory, value: u64) -> Result<(), MemError> {
        mem.atomic_write(self.pa, value)
    }
}

/// Sum of the SGE lengths, `None` on overflow.
pub fn sge_total_len(sges: &[Sge]) -> Option<u64> {
    sges.iter()
        .try_fold(0u64, |acc, s| acc.checked_add(u64::from(s.length)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Pd {
    /// MRs registered in the PD.
    mrs: u32,
    /// Other users (QPs, SRQs, later MWs) the engine registered with `pd_ref`.
    refs: u32,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    /// Key byte of the last registration at this index (MP-02), or the current
    /// key byte of the window here.
    key_byte: u8,
    mr: Option<Mr>,
    /// A memory window shares the key space with MRs (MP-06, MP-07): an index
    /// holds an MR or a window, never both.
    mw: Option<Mw>,
}

/// A memory window (IBA 10.6.7, seed 003 "Memory Window"; MP-06 type 1,
/// MP-07 type 2B): an R_Key onto a range of an MR, with its own remote rights.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mw {
    key: u32,
    pd: Handle,
    ty: MwType,
    bound: Option<MwBinding>,
}

/// What a bound window grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBinding {
    /// The MR's key (the bind's L_Key).
    pub mr_key: u32,
    pub va: u64,
    pub length: u64,
    /// Remote rights (REMOTE_READ / REMOTE_WRITE / REMOTE_ATOMIC).
    pub access: Access,
    /// Type 2: the QP the window is bound to (IBA 10.6.7.2.4); type 1: none.
    pub qpn: Option<u32>,
}

impl Mw {
    /// Its current R_Key.
    pub fn key(&self) -> u32 {
        self.key
    }

    pub fn pd(&self) -> Handle {
        self.pd
    }

    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The binding, or `None` while the window is free (type 2) or unbound.
    pub fn binding(&self) -> Option<&MwBinding> {
        self.bound.as_ref()
    }
}

/// Why a BIND_MW or LOCAL_INV work request failed (MP-06, MP-07). A failed bind
/// completes with Memory Window Bind Error (IBA 10.8.3, Table 81 / `IBV_WC_MW_BIND_ERR`);
/// a failed local invalidate with Local Protection Error (see [`MwError::status`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MwError {
    /// The key names no window, or not its current key.
    #[error("no memory window with this key")]
    NoSuchWindow,
    /// The window (or MR) belongs to another PD than the QP (C10-72).
    #[error("memory window or region of another protection domain")]
    PdMismatch,
    /// Type 2 bind of a window that is not free, or of another QP's window.
    #[error("type 2 memory window is not in the free state")]
    NotFree,
    /// The new R_Key changes the window's index (only the key byte may change).
    #[error("new R_Key names another index")]
    BadNewKey,
    /// The MR named by the bind's L_Key does not exist.
    #[error("no memory region with this key")]
    NoSuchMr,
    /// The MR was not registered with MW_BIND.
    #[error("memory region does not allow binding")]
    NoBindRight,
    /// `[addr, addr + length)` is not inside the MR.
    #[error("window is outside the memory region")]
    OutOfBounds,
    /// REMOTE_WRITE or REMOTE_ATOMIC on a window of an MR without LOCAL_WRITE
    /// (IBA 10.6.7.2; seed 003 "MR/MW 的权限配置").
    #[error("remote write or atomic window on a memory region without local write")]
    NoLocalWrite,
    /// An access bit a window cannot grant (local or bind rights, zero based).
    #[error("unsupported window access rights")]
    BadAccess,
    /// Type 2 windows do not support zero-length binds (seed 003 table).
    #[error("zero-length bind of a type 2 window")]
    ZeroLength,
    /// Invalidate of a type 1 window (seed 003: type 1 keys cannot be
    /// invalidated), of an MR key, or of a window that is not bound.
    #[error("key cannot be invalidated")]
    NotInvalidatable,
    /// Invalidate of a type 2 window bound to another QP.
    #[error("memory window is bound to another queue pair")]
    WrongQp,
    /// More bind references on an MR than the counter holds.
    #[error("too many windows")]
    TooMany,
}

impl MwError {
    /// The completion status of the work request that failed: a bind fails with
    /// MW_BIND_ERR, a local invalidate with LOC_PROT_ERR (rxe reports
    /// invalidation errors as protection errors too).
    pub const fn status(self, bind: bool) -> WcStatus {
        if bind {
            WcStatus::MwBindErr
        } else {
            WcStatus::LocProtErr
        }
    }
}

/// The PD and MR tables of one device (MP-01..MP-05).
#[derive(Debug, Clone)]
pub struct MrTable {
    max_pd: u32,
    max_mr: u32,
    pds: BTreeMap<Handle, Pd>,
    /// Next PD handle to try; handles are not reused soon after deallocation.
    next_pd: Handle,
    /// `slots[i]` is key index `i + 1`; grows up to `max_mr`.
    slots: Vec<Slot>,
    /// Free indices, oldest first: an index is reused as late as possible.
    free: VecDeque<u32>,
    live_mrs: u32,
    /// Memory windows allocated (they take key indices too).
    live_mws: u32,
}

impl MrTable {
    /// Room for `max_pd` PDs and `max_mr` MRs (`max_mr` is capped at
    /// [`MAX_MR_INDEX`]).
    pub fn new(max_pd: u32, max_mr: u32) -> MrTable {
        MrTable {
            max_pd,
            max_mr: max_mr.min(MAX_MR_INDEX),
            pds: BTreeMap::new(),
            next_pd: 1,
            slots: Vec::new(),
            free: VecDeque::new(),
            live_mrs: 0,
            live_mws: 0,
        }
    }

    // ---- protection domains (MP-01; IBA 10.2.3, 10.6.3.5) ----

    /// Allocate Protection Domain. Handles are nonzero.
    pub fn alloc_pd(&mut self) -> Result<Handle, VerbError> {
        if self.pds.len() >= self.max_pd as usize {
            return Err(VerbError::InsufficientResources);
        }
        // Fewer than max_pd <= u32::MAX handles are in use, so a free nonzero one
        // turns up within `pds.len() + 2` tries.
        let mut h = self.next_pd;
        while h == 0 || self.pds.contains_key(&h) {
            h = h.wrapping_add(1);
        }
        self.next_pd = h.wrapping_add(1);
        self.pds.insert(h, Pd::default());
        Ok(h)
    }

    /// Deallocate Protection Domain: refused with `Busy` while an MR is registered
    /// in it or a QP/SRQ holds a reference (IBA 10.6.3.5, 11.2.1.5).
    pub fn dealloc_pd(&mut self, pd: Handle) -> Result<(), VerbError> {
        let p = self.pds.get(&pd).ok_or(VerbError::InvalidPd)?;
        if p.mrs != 0 || p.refs != 0 {
            return Err(VerbError::Busy);
        }
        self.pds.remove(&pd);
        Ok(())
    }

    pub fn pd_exists(&self, pd: Handle) -> bool {
        self.pds.contains_key(&pd)
    }

    /// Records a user of `pd` (a QP or SRQ created in it).
    pub fn pd_ref(&mut self, pd: Handle) -> Result<(), VerbError> {
        let p = self.pds.get_mut(&pd).ok_or(VerbError::InvalidPd)?;
        p.refs = p
            .refs
            .checked_add(1)
            .ok_or(VerbError::InsufficientResources)?;
        Ok(())
    }

    /// Drops a user recorded by [`pd_ref`](Self::pd_ref); `InvalidHandle` if there
    /// is none (an unbalanced call).
    pub fn pd_unref(&mut self, pd: Handle) -> Result<(), VerbError> {
        let p = self.pds.get_mut(&pd).ok_or(VerbError::InvalidPd)?;
        p.refs = p.refs.checked_sub(1).ok_or(VerbError::InvalidHandle)?;
        Ok(())
    }

    /// Number of PDs allocated.
    pub fn pd_count(&self) -> usize {
        self.pds.len()
    }

    // ---- memory regions (MP-02, MP-03) ----

    /// Register Memory Region: returns the key, both L_Key and R_Key (MP-02).
    ///
    /// Refused, with nothing changed: `InvalidPd` for an unknown PD;
    /// `NotSupported` for an access bit this engine does not implement;
    /// `InvalidAttr` for remote write or remote atomic without local write
    /// (MP-04), a page size that is not a power of two in 4 KiB..=1 GiB, an
    /// `iova + length` past 2^64 - 1, a page that is not page aligned or ends past
    /// 2^64, or a page list that does not hold exactly the pages spanned
    /// (MP-03); `InsufficientResources` when `max_mr` MRs are registered.
    pub fn reg_mr(
        &mut self,
        pd: Handle,
        iova: u64,
        length: u64,
        access: Access,
        page_size: u64,
        pages: Vec<u64>,
    ) -> Result<u32, VerbError> {
        let t = Translation {
            iova,
            length,
            page_size,
            pages,
        };
        let page_shift = check_pd_access_translation(self, pd, access, &t)?;
        if self.live_mrs + self.live_mws >= self.max_mr {
            return Err(VerbError::InsufficientResources);
        }
        let index = self.take_index().ok_or(VerbError::InsufficientResources)?;
        let slot = self
            .slot_mut(index)
            .ok_or(VerbError::InsufficientResources)?;
        // MP-02: a new key byte for every registration at this index.
        slot.key_byte = slot.key_byte.wrapping_add(1);
        let key = (index << 8) | u32::from(slot.key_byte);
        slot.mr = Some(Mr {
            key,
            pd,
            access,
            iova: t.iova,
            length: t.length,
            page_shift,
            pages: t.pages,
            identity: false,
            windows: 0,
        });
        self.live_mrs += 1;
        if let Some(p) = self.pds.get_mut(&pd) {
            p.mrs += 1;
        }
        Ok(key)
    }

    /// Register a DMA MR (`ib_get_dma_mr`, a kernel consumer's L_Key for its own
    /// buffers): virtual address = physical address over the whole address space
    /// (IOVA 0, length 2^64 - 1), no page list; the caller's [`Memory`] refuses
    /// whatever it does not map (design.md §9). Checks as [`reg_mr`](Self::reg_mr)
    /// for the PD and access rights.
    pub fn reg_dma_mr(&mut self, pd: Handle, access: Access) -> Result<u32, VerbError> {
        check_pd_access(self, pd, access)?;
        if self.live_mrs + self.live_mws >= self.max_mr {
            return Err(VerbError::InsufficientResources);
        }
        let index = self.take_index().ok_or(VerbError::InsufficientResources)?;
        let slot = self
            .slot_mut(index)
            .ok_or(VerbError::InsufficientResources)?;
        slot.key_byte = slot.key_byte.wrapping_add(1);
        let key = (index << 8) | u32::from(slot.key_byte);
        slot.mr = Some(Mr {
            key,
            pd,
            access,
            iova: 0,
            length: u64::MAX,
            page_shift: MIN_PAGE_SIZE.trailing_zeros(),
            pages: Vec::new(),
            identity: true,
            windows: 0,
        });
        self.live_mrs += 1;
        if let Some(p) = self.pds.get_mut(&pd) {
            p.mrs += 1;
        }
        Ok(key)
    }

    /// Reregister Memory Region: changes the PD, the access rights and/or the
    /// translation of the MR named by `key`, all or nothing, with the checks of
    /// [`reg_mr`](Self::reg_mr) on the result.
    ///
    /// Our choice: the keys stay the same. The verb hands back an L_Key and an
    /// R_Key, which an HCA may keep or change; keeping them (as Linux rxe does for
    /// PD and access changes) means the guest driver never has to update its
    /// `ibv_mr`. The cost is that an R_Key already given to a peer stays valid and,
    /// after a translation change, reaches the new pages: a consumer that wants
    /// outstanding keys to fail deregisters and registers instead, which changes
    /// the key byte (MP-02). Returns the key.
    pub fn rereg_mr(&mut self, key: u32, change: Rereg) -> Result<u32, VerbError> {
        let mr = self.lookup(key).map_err(|_| VerbError::InvalidHandle)?;
        if mr.windows != 0 {
            // Windows bound to it keep its translation and rights (MP-06).
            return Err(VerbError::Busy);
        }
        let old_pd = mr.pd;
        let pd = change.pd.unwrap_or(old_pd);
        let access = change.access.unwrap_or(mr.access);
        let mut page_shift = mr.page_shift;
        if let Some(t) = &change.translation {
            page_shift = check_pd_access_translation(self, pd, access, t)?;
        } else {
            // The current translation is valid; check the new PD and rights.
            check_pd_access(self, pd, access)?;
        }
        // Every check passed: commit.
        let slot = self
            .slot_mut(key_index(key))
            .ok_or(VerbError::InvalidHandle)?;
        let mr = slot.mr.as_mut().ok_or(VerbError::InvalidHandle)?;
        mr.pd = pd;
        mr.access = access;
        if let Some(t) = change.translation {
            mr.identity = false;
            mr.iova = t.iova;
            mr.length = t.length;
            mr.page_shift = page_shift;
            mr.pages = t.pages;
        }
        if pd != old_pd {
            if let Some(p) = self.pds.get_mut(&old_pd) {
                p.mrs -= 1;
            }
            if let Some(p) = self.pds.get_mut(&pd) {
                p.mrs += 1;
            }
        }
        Ok(key)
    }

    /// Deregister Memory Region: `InvalidHandle` unless `key` is the current key
    /// of a registered MR. The index is reused later with another key byte.
    pub fn dereg_mr(&mut self, key: u32) -> Result<(), VerbError> {
        let mr = self.lookup(key).map_err(|_| VerbError::InvalidHandle)?;
        if mr.windows != 0 {
            // Seed 003: an MR with windows bound cannot be deregistered (rxe
            // answers EINVAL; Busy here, nothing changes).
            return Err(VerbError::Busy);
        }
        let index = key_index(key);
        let slot = self.slot_mut(index).ok_or(VerbError::InvalidHandle)?;
        let mr = slot.mr.take().ok_or(VerbError::InvalidHandle)?;
        if let Some(p) = self.pds.get_mut(&mr.pd) {
            p.mrs -= 1;
        }
        self.live_mrs -= 1;
        self.free.push_back(index);
        Ok(())
    }

    /// The MR whose current key is `key`.
    pub fn mr(&self, key: u32) -> Option<&Mr> {
        self.lookup(key).ok()
    }

    /// The MR registered at key index `index` (`key >> 8`), whatever its key
    /// byte: for a device's context-table view by index, not for access checks.
    pub fn mr_at(&self, index: u32) -> Option<&Mr> {
        let i = index.checked_sub(1)?;
        self.slots.get(usize::try_from(i).ok()?)?.mr.as_ref()
    }

    /// Number of MRs registered.
    pub fn mr_count(&self) -> u32 {
        self.live_mrs
    }

    // ---- memory windows (MP-06 type 1, MP-07 type 2B; IBA 10.6.7, seed 003) ----

    /// Allocate Memory Window: a window of type `ty` in `pd`, unbound (type 2:
    /// free state), not usable remotely (seed 003 "此时 MW 没有绑定到 MR 上").
    /// It takes a key index of the MR key space and counts as a user of the PD
    /// (Deallocate PD is `Busy` while it exists). Returns its R_Key.
    pub fn alloc_mw(&mut self, pd: Handle, ty: MwType) -> Result<u32, VerbError> {
        if !self.pd_exists(pd) {
            return Err(VerbError::InvalidPd);
        }
        if self.live_mrs + self.live_mws >= self.max_mr {
            return Err(VerbError::InsufficientResources);
        }
        self.pd_ref(pd)?;
        let Some(index) = self.take_index() else {
            let _ = self.pd_unref(pd);
            return Err(VerbError::InsufficientResources);
        };
        let Some(slot) = self.slot_mut(index) else {
            let _ = self.pd_unref(pd);
            return Err(VerbError::InsufficientResources);
        };
        slot.key_byte = slot.key_byte.wrapping_add(1);
        let key = (index << 8) | u32::from(slot.key_byte);
        slot.mw = Some(Mw {
            key,
            pd,
            ty,
            bound: None,
        });
        self.live_mws += 1;
        Ok(key)
    }

    /// Deallocate Memory Window named by the index of `rkey` (any key byte: the
    /// window's owner, the guest kernel, knows only the key ALLOC_MW gave, and
    /// binds in user space change the key byte; mlx5 and rxe name windows by
    /// index too). A bound window is unbound first (its MR may then be
    /// deregistered). `InvalidHandle` unless a window lives at that index.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), VerbError> {
        let index = key_index(rkey);
        let slot = self.slot_mut(index).ok_or(VerbError::InvalidHandle)?;
        match &slot.mw {
            Some(_) => {}
            None => return Err(VerbError::InvalidHandle),
        }
        let Some(mw) = slot.mw.take() else {
            return Err(VerbError::InvalidHandle);
        };
        if let Some(b) = mw.bound {
            self.drop_window_ref(b.mr_key);
        }
        let _ = self.pd_unref(mw.pd);
        self.live_mws -= 1;
        self.free.push_back(index);
        Ok(())
    }

    /// The window whose current R_Key is `rkey`.
    pub fn mw(&self, rkey: u32) -> Option<&Mw> {
        self.mw_at(key_index(rkey)).filter(|m| m.key == rkey)
    }

    /// The window at key index `index`, whatever its key byte.
    pub fn mw_at(&self, index: u32) -> Option<&Mw> {
        let i = index.checked_sub(1)?;
        self.slots.get(usize::try_from(i).ok()?)?.mw.as_ref()
    }

    /// Number of windows allocated.
    pub fn mw_count(&self) -> u32 {
        self.live_mws
    }

    /// Executes a BIND_MW work request of QP `qpn` in `pd` (IBA 10.6.7.2; seed
    /// 003 "Bind"). Checks, all before anything changes:
    /// - the window exists under `mw_rkey` and is in the QP's PD (C10-72);
    /// - `new_rkey` keeps the window's index (only the 8-bit key changes);
    /// - type 2: the window is free (a new R_Key needs an invalidate first) and
    ///   the length is not zero (seed 003: type 2 has no zero-length bind); it
    ///   becomes associated with this QP and PD (type 2B);
    /// - type 1 with length 0: unbind, the window keeps no access (seed 003);
    /// - the rights are remote ones only (no zero-based windows);
    /// - the MR exists under `mr_lkey`, in the same PD, with MW_BIND, holds
    ///   `[addr, addr + length)`, and has LOCAL_WRITE if the window grants
    ///   REMOTE_WRITE or REMOTE_ATOMIC (seed 003 "MR 与 MW 的权限关系").
    pub fn bind_mw(&mut self, pd: Handle, qpn: u32, b: &MwBind) -> Result<(), MwError> {
        let index = key_index(b.mw_rkey);
        let mw = self.mw(b.mw_rkey).ok_or(MwError::NoSuchWindow)?;
        if mw.pd != pd {
            return Err(MwError::PdMismatch);
        }
        if key_index(b.new_rkey) != index {
            return Err(MwError::BadNewKey);
        }
        let ty = mw.ty;
        let old = mw.bound.map(|x| x.mr_key);
        if ty == MwType::Type2 {
            if mw.bound.is_some() {
                return Err(MwError::NotFree);
            }
            if b.length == 0 {
                return Err(MwError::ZeroLength);
            }
        }
        let remote = Access::REMOTE_READ.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0;
        // LOCAL_WRITE in a bind's rights means nothing for a window: ignored
        // (as ibverbs consumers pass the MR's flags); anything else is refused.
        if b.access.0 & !(remote | Access::LOCAL_WRITE.0) != 0 {
            return Err(MwError::BadAccess);
        }
        let access = Access(b.access.0 & remote);
        if ty == MwType::Type1 && b.length == 0 {
            // Type 1 unbind: a new R_Key, no binding.
            if let Some(k) = old {
                self.drop_window_ref(k);
            }
            self.set_window(index, b.new_rkey, None);
            return Ok(());
        }
        let mr = self.lookup(b.mr_lkey).map_err(|_| MwError::NoSuchMr)?;
        if mr.pd != pd {
            return Err(MwError::PdMismatch);
        }
        if !mr.access.contains(Access::MW_BIND) {
            return Err(MwError::NoBindRight);
        }
        if !mr.contains(b.addr, b.length) {
            return Err(MwError::OutOfBounds);
        }
        let writes =
            access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
        if writes && !mr.access.contains(Access::LOCAL_WRITE) {
            return Err(MwError::NoLocalWrite);
        }
        if mr.key != old.unwrap_or(0) && mr.windows == u32::MAX {
            return Err(MwError::TooMany);
        }
        // Commit: a type 1 rebind moves the window off its old MR.
        if let Some(k) = old {
            self.drop_window_ref(k);
        }
        if let Some(m) = self
            .slot_mut(key_index(b.mr_lkey))
            .and_then(|s| s.mr.as_mut())
        {
            m.windows += 1;
        }
        let binding = MwBinding {
            mr_key: b.mr_lkey,
            va: b.addr,
            length: b.length,
            access,
            qpn: (ty == MwType::Type2).then_some(qpn),
        };
        self.set_window(index, b.new_rkey, Some(binding));
        Ok(())
    }

    /// Invalidates R_Key `rkey` for QP `qpn` in `pd`: a LOCAL_INV work request
    /// (seed 003 "Local Invalidate") or a received SEND with Invalidate (IBA
    /// 9.4.1.1.3, o9-5.2.2; OP-03). Valid only for a type 2 window under its
    /// current key, in the QP's PD, bound to this QP (type 2B: PD and QP), which
    /// goes to the free state: the key no longer grants access, the window keeps
    /// its index and key until the next bind. A free type 2 window of the same
    /// PD is left as it is (o9-5.2.2 note: invalidating a free key changes
    /// nothing). An MR key (o9-5.2.2 3), a type 1 window (6), a stale key (1)
    /// or another PD's or QP's window (5, 8, 9) is refused.
    pub fn invalidate(&mut self, pd: Handle, qpn: u32, rkey: u32) -> Result<(), MwError> {
        let index = key_index(rkey);
        if self.lookup(rkey).is_ok() {
            return Err(MwError::NotInvalidatable);
        }
        let mw = self.mw(rkey).ok_or(MwError::NoSuchWindow)?;
        if mw.ty == MwType::Type1 {
            return Err(MwError::NotInvalidatable);
        }
        if mw.pd != pd {
            return Err(MwError::PdMismatch);
        }
        let Some(b) = mw.bound else {
            return Ok(());
        };
        if b.qpn != Some(qpn) {
            return Err(MwError::WrongQp);
        }
        self.drop_window_ref(b.mr_key);
        self.set_window(index, rkey, None);
        Ok(())
    }

    /// Invalidates every type 2 window bound to QP `qpn` (the QP is destroyed:
    /// type 2B windows do not keep it alive, seed 003, and must not reach a
    /// later QP with the same number). Returns how many.
    pub fn unbind_qp_windows(&mut self, qpn: u32) -> u32 {
        let keys: Vec<(u32, u32)> = self
            .slots
            .iter()
            .filter_map(|s| s.mw.as_ref())
            .filter_map(|m| match m.bound {
                Some(b) if b.qpn == Some(qpn) => Some((m.key, b.mr_key)),
                _ => None,
            })
            .collect();
        for &(key, mr_key) in &keys {
            self.drop_window_ref(mr_key);
            self.set_window(key_index(key), key, None);
        }
        keys.len() as u32
    }

    fn drop_window_ref(&mut self, mr_key: u32) {
        if let Some(m) = self
            .slot_mut(key_index(mr_key))
            .and_then(|s| s.mr.as_mut())
            .filter(|m| m.key == mr_key)
        {
            m.windows = m.windows.saturating_sub(1);
        }
    }

    fn set_window(&mut self, index: u32, key: u32, bound: Option<MwBinding>) {
        if let Some(slot) = self.slot_mut(index) {
            slot.key_byte = key_byte(key);
            if let Some(mw) = slot.mw.as_mut() {
                mw.key = key;
                mw.bound = bound;
            }
        }
    }

    /// R_Key resolution of a remote access arriving at QP `qpn` (when known)
    /// in `pd`: an MR, or a bound window (MP-06, MP-07) whose PD is the QP's,
    /// whose QP is this one (type 2B), and whose range holds `[va, va + len)`;
    /// then the access goes through the window's MR. Returns the MR and the
    /// rights the key grants.
    fn lookup_remote(
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
            if mw.pd != pd {
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
    /// for its PD, its QP (type 2B), its range and its own rights, then
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
        // One segment: the word is aligned and pages are >= 4 KiB.
        match mr.segments(va, 8).next() {
            Some((pa, 8)) => Ok(AtomicTarget { pa }),
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
    pub fn gather(
        &self,
        mem: &dyn Memory,
        pd: Handle,
        sges: &[Sge],
        offset: u64,
        buf: &mut [u8],
    ) -> Result<(), CopyError> {
        if let Some(r) = self.one_sge_range(pd, sges, offset, buf.len(), LocalAccess::Read) {
            return r?.read(mem, buf);
        }
        self.check_sge_span(pd, sges, offset, buf.len(), LocalAccess::Read)?;
        let mut rest = buf;
        for piece in self.sge_ranges(pd, sges, offset, rest.len(), LocalAccess::Read) {
            let r = piece?;
            let (head, tail) = rest.split_at_mut(seg_len(r.len, rest.len())?);
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
    pub fn scatter(
        &self,
        mem: &mut dyn Memory,
        pd: Handle,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
    ) -> Result<(), CopyError> {
        if let Some(r) = self.one_sge_range(pd, sges, offset, data.len(), LocalAccess::Write) {
            return r?.write(mem, data);
        }
        self.check_sge_span(pd, sges, offset, data.len(), LocalAccess::Write)?;
        let mut rest = data;
        for piece in self.sge_ranges(pd, sges, offset, rest.len(), LocalAccess::Write) {
            let r = piece?;
            let (head, tail) = rest.split_at(seg_len(r.len, rest.len())?);
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
            covered += piece?.len;
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
    fn lookup(&self, key: u32) -> Result<&Mr, AccessError> {
        let index = key_index(key);
        let slot = index
            .checked_sub(1)
            .and_then(|i| self.slots.get(i as usize))
            .ok_or(AccessError::NoSuchKey)?;
        let mr = slot.mr.as_ref().ok_or(AccessError::NoSuchKey)?;
        if mr.key != key {
            return Err(AccessError::KeyMismatch);
        }
        Ok(mr)
    }

    /// Key, PD and bounds checks shared by every data-path access.
    fn lookup_in_pd(&self, pd: Handle, key: u32, va: u64, len: u64) -> Result<&Mr, AccessError> {
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

    fn slot_mut(&mut self, index: u32) -> Option<&mut Slot> {
        let i = index.checked_sub(1)? as usize;
        self.slots.get_mut(i)
    }

    /// A free key index. A freed index waits behind [`KEY_QUARANTINE`] others
    /// while the table can still grow: an index's 8-bit key byte comes back to
    /// a stale key's value only after 256 reuses of the index (MP-02), so a
    /// register/deregister loop must not reuse one index at once — with the
    /// quarantine a stale key revives only after 256 x 1024 registrations. A
    /// full table reuses the longest-free index.
    fn take_index(&mut self) -> Option<u32> {
        let next = u32::try_from(self.slots.len())
            .ok()?
            .checked_add(1)
            .filter(|&n| n <= self.max_mr);
        match next {
            Some(n) if self.free.len() < KEY_QUARANTINE => {
                self.slots.push(Slot::default());
                Some(n)
            }
            _ => self.free.pop_front(),
        }
    }
}

/// Freed key indices that wait before one is reused, while the table can grow.
pub const KEY_QUARANTINE: usize = 1024;

/// Registration checks on the PD and rights (MP-01, MP-04).
fn check_pd_access(t: &MrTable, pd: Handle, access: Access) -> Result<(), VerbError> {
    if !t.pd_exists(pd) {
        return Err(VerbError::InvalidPd);
    }
    if access.0 & !SUPPORTED_ACCESS != 0 {
        return Err(VerbError::NotSupported);
    }
    // IBA 10.6.3.1; seed 003 "MR/MW 的权限配置": an MR given Remote Write or Remote
    // Atomic must also be given Local Write (MP-04).
    let remote_w = access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
    if remote_w && !access.contains(Access::LOCAL_WRITE) {
        return Err(VerbError::InvalidAttr);
    }
    Ok(())
}

/// All registration checks; returns log2 of the page size.
fn check_pd_access_translation(
    table: &MrTable,
    pd: Handle,
    access: Access,
    t: &Translation,
) -> Result<u32, VerbError> {
    check_pd_access(table, pd, access)?;
    check_translation(t)
}

/// MP-03: the page list covers exactly the pages of `[iova, iova + length)`.
fn check_translation(t: &Translation) -> Result<u32, VerbError> {
    let ps = t.page_size;
    if !ps.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&ps) {
        return Err(VerbError::InvalidAttr);
    }
    let mask = ps - 1;
    // The last byte must be addressable: iova + length <= 2^64 - 1.
    let end = t.iova.checked_add(t.length).ok_or(VerbError::InvalidAttr)?;
    let spanned = if t.length == 0 {
        0
    } else {
        // (iova & mask) + length <= end: no overflow.
        ((t.iova & mask) + (end - t.iova)).div_ceil(ps)
    };
    if t.pages.len() as u64 != spanned {
        return Err(VerbError::InvalidAttr);
    }
    let page_ok = |&p: &u64| p & mask == 0 && p.checked_add(ps).is_some();
    if !t.pages.iter().all(page_ok) {
        return Err(VerbError::InvalidAttr);
    }
    Ok(ps.trailing_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::VecMemory;
    use proptest::prelude::*;

    const PS: u64 = 4096;
    const RW: Access =
        Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
    const ALL: Access = Access(RW.0 | Access::REMOTE_ATOMIC.0);

    fn table() -> (MrTable, Handle) {
        let mut t = MrTable::new(4, 8);
        let pd = t.alloc_pd().unwrap();
        (t, pd)
    }

    /// An MR of `len` bytes at `iova` over consecutive 4 KiB pages from `pa`.
    fn reg(t: &mut MrTable, pd: Handle, iova: u64, len: u64, access: Access, pa: u64) -> u32 {
        let n = if len == 0 {
            0
        } else {
            ((iova % PS) + len).div_ceil(PS)
        };
        let pages = (0..n).map(|i| pa + i * PS).collect();
        t.reg_mr(pd, iova, len, access, PS, pages).unwrap()
    }

    // ---- MP-06, MP-07: memory windows ----

    const BIND: Access = Access(ALL.0 | Access::MW_BIND.0);

    fn bind(mw: u32, new: u32, mr: u32, addr: u64, length: u64, access: Access) -> MwBind {
        MwBind {
            mw_rkey: mw,
            new_rkey: new,
            mr_lkey: mr,
            addr,
            length,
            access,
        }
    }

    fn bumped(k: u32) -> u32 {
        (k & !0xff) | (k.wrapping_add(1) & 0xff)
    }

    #[test]
    fn mp_06_alloc_mw_takes_a_key_index_and_a_pd_reference() {
        let mut t = MrTable::new(4, 3);
        let pd = t.alloc_pd().unwrap();
        assert_eq!(t.alloc_mw(99, MwType::Type1), Err(VerbError::InvalidPd));
        let w = t.alloc_mw(pd, MwType::Type1).unwrap();
        let k = reg(&mut t, pd, 0x1000, 0x1000, BIND, 0x10_0000);
        assert_ne!(key_index(w), key_index(k));
        let w2 = t.alloc_mw(pd, MwType::Type2).unwrap();
        // Windows and MRs share max_mr.
        assert_eq!(
            t.alloc_mw(pd, MwType::Type2),
            Err(VerbError::InsufficientResources)
        );
        assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
        // A window key is no L_Key, an MR key no window.
        assert_eq!(
            t.check_local(pd, w, 0x1000, 1, LocalAccess::Read).err(),
            Some(AccessError::NoSuchKey)
        );
        assert_eq!(t.dealloc_mw(k), Err(VerbError::InvalidHandle));
        // Named by index: another key byte of the same window frees it.
        t.dealloc_mw(bumped(w)).unwrap();
        assert_eq!(t.dealloc_mw(w), Err(VerbError::InvalidHandle));
        t.dealloc_mw(w2).unwrap();
        t.dereg_mr(k).unwrap();
        t.dealloc_pd(pd).unwrap();
    }

    #[test]
    fn mp_06_mp_07_bind_rules() {
        let (mut t, pd) = table();
        let pd2 = t.alloc_pd().unwrap();
        let k = reg(&mut t, pd, 0x1000, 0x2000, BIND, 0x10_0000);
        let nobind = reg(&mut t, pd, 0x1000, 0x2000, ALL, 0x20_0000);
        let ro = reg(
            &mut t,
            pd,
            0x1000,
            0x2000,
            Access(Access::MW_BIND.0),
            0x30_0000,
        );
        let other = reg(&mut t, pd2, 0x1000, 0x2000, BIND, 0x40_0000);
        let w = t.alloc_mw(pd, MwType::Type2).unwrap();
        let n = bumped(w);
        let wr = Access::REMOTE_WRITE;
        let cases = [
            (bind(w + 0x100, n, k, 0x1000, 16, wr), MwError::NoSuchWindow),
            (bind(w, n + 0x100, k, 0x1000, 16, wr), MwError::BadNewKey),
            (bind(w, n, 0x7700, 0x1000, 16, wr), MwError::NoSuchMr),
            (bind(w, n, nobind, 0x1000, 16, wr), MwError::NoBindRight),
            (bind(w, n, other, 0x1000, 16, wr), MwError::PdMismatch),
            (bind(w, n, k, 0x2ff8, 16, wr), MwError::OutOfBounds),
            (bind(w, n, k, u64::MAX, 2, wr), MwError::OutOfBounds),
            (bind(w, n, ro, 0x1000, 16, wr), MwError::NoLocalWrite),
            (
                bind(w, n, ro, 0x1000, 16, Access::REMOTE_ATOMIC),
                MwError::NoLocalWrite,
            ),
            (
                bind(w, n, k, 0x1000, 16, Access(1 << 5)),
                MwError::BadAccess,
            ),
            (bind(w, n, k, 0x1000, 0, wr), MwError::ZeroLength),
        ];
        for (b, e) in cases {
            assert_eq!(t.bind_mw(pd, 5, &b), Err(e), "{b:?}");
        }
        assert_eq!(
            t.bind_mw(pd2, 5, &bind(w, n, k, 0x1000, 16, wr)),
            Err(MwError::PdMismatch)
        );
        // Nothing changed.
        assert_eq!(t.mw(w).unwrap().binding(), None);
        assert_eq!(t.mr(k).unwrap().windows(), 0);
        // A read-only window on an MR without LOCAL_WRITE is fine.
        t.bind_mw(pd, 5, &bind(w, n, ro, 0x1000, 16, Access::REMOTE_READ))
            .unwrap();
        assert!(t.mw(w).is_none());
        assert_eq!(t.mw(n).unwrap().binding().unwrap().qpn, Some(5));
        // Type 2: not free any more, a second bind fails (invalidate first).
        assert_eq!(
            t.bind_mw(pd, 5, &bind(n, bumped(n), k, 0x1000, 16, wr)),
            Err(MwError::NotFree)
        );
        assert_eq!(t.dereg_mr(ro), Err(VerbError::Busy));
        assert_eq!(t.rereg_mr(ro, Rereg::default()), Err(VerbError::Busy));
        // DEALLOC_MW of a bound window unbinds it.
        t.dealloc_mw(n).unwrap();
        t.dereg_mr(ro).unwrap();
    }

    #[test]
    fn mp_06_mp_07_remote_access_through_windows() {
        let (mut t, pd) = table();
        let pd2 = t.alloc_pd().unwrap();
        let mut mem = VecMemory::new(0x10_0000, 0x4000);
        let k = reg(&mut t, pd, 0x1000, 0x2000, BIND, 0x10_0000);
        let w2 = t.alloc_mw(pd, MwType::Type2).unwrap();
        let w1 = t.alloc_mw(pd, MwType::Type1).unwrap();
        let (n2, n1) = (bumped(w2), bumped(w1));
        // Free window: no access.
        assert_eq!(
            t.check_remote_at(pd, Some(5), w2, 0x1800, 8, RemoteAccess::Read)
                .err(),
            Some(AccessError::WindowNotBound)
        );
        t.bind_mw(pd, 5, &bind(w2, n2, k, 0x1800, 0x100, Access::REMOTE_WRITE))
            .unwrap();
        t.bind_mw(
            pd,
            6,
            &bind(w1, n1, k, 0x2000, 0x100, Access::REMOTE_ATOMIC),
        )
        .unwrap();
        assert_eq!(t.mr(k).unwrap().windows(), 2);
        // Type 2B: its QP and PD only.
        let r = t
            .check_remote_at(pd, Some(5), n2, 0x1810, 4, RemoteAccess::Write)
            .unwrap();
        r.write(&mut mem, b"abcd").unwrap();
        assert_eq!(&mem.bytes[0x810..0x814], b"abcd");
        fn at(
            t: &MrTable,
            pd: Handle,
            q: Option<u32>,
            key: u32,
            va: u64,
            len: u64,
            need: RemoteAccess,
        ) -> Option<AccessError> {
            t.check_remote_at(pd, q, key, va, len, need).err()
        }
        assert_eq!(
            at(&t, pd, Some(6), n2, 0x1810, 4, RemoteAccess::Write),
            Some(AccessError::WindowWrongQp)
        );
        assert_eq!(
            at(&t, pd2, Some(5), n2, 0x1810, 4, RemoteAccess::Write),
            Some(AccessError::PdMismatch)
        );
        assert_eq!(
            at(&t, pd, Some(5), w2, 0x1810, 4, RemoteAccess::Write),
            Some(AccessError::KeyMismatch)
        );
        assert_eq!(
            at(&t, pd, Some(5), n2, 0x1810, 4, RemoteAccess::Read),
            Some(AccessError::NoRemoteRead)
        );
        assert_eq!(
            at(&t, pd, Some(5), n2, 0x18fe, 4, RemoteAccess::Write),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            at(&t, pd, Some(5), n2, 0x17fe, 4, RemoteAccess::Write),
            Some(AccessError::OutOfBounds)
        );
        // Type 1: any QP of the PD; its own rights (atomic only here).
        assert!(t.check_atomic_at(pd, Some(9), n1, 0x2008).is_ok());
        assert_eq!(
            t.check_atomic_at(pd, Some(9), n1, 0x2100).err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            at(&t, pd, Some(9), n1, 0x2000, 8, RemoteAccess::Write),
            Some(AccessError::NoRemoteWrite)
        );
        // Type 1 rebind moves the window; zero length unbinds it.
        let m1 = bumped(n1);
        t.bind_mw(pd, 9, &bind(n1, m1, k, 0x1000, 0x10, Access::REMOTE_READ))
            .unwrap();
        assert_eq!(
            at(&t, pd, Some(9), n1, 0x2000, 8, RemoteAccess::Read),
            Some(AccessError::KeyMismatch)
        );
        assert!(t
            .check_remote_at(pd, None, m1, 0x1000, 8, RemoteAccess::Read)
            .is_ok());
        let u1 = bumped(m1);
        t.bind_mw(pd, 9, &bind(m1, u1, 0, 0, 0, Access(0))).unwrap();
        assert_eq!(t.mr(k).unwrap().windows(), 1);
        assert_eq!(
            at(&t, pd, None, u1, 0x1000, 0, RemoteAccess::Read),
            Some(AccessError::WindowNotBound)
        );
    }

    #[test]
    fn mp_07_o9_5_2_2_invalidate_rules() {
        let (mut t, pd) = table();
        let pd2 = t.alloc_pd().unwrap();
        let k = reg(&mut t, pd, 0x1000, 0x2000, BIND, 0x10_0000);
        let w2 = t.alloc_mw(pd, MwType::Type2).unwrap();
        let w1 = t.alloc_mw(pd, MwType::Type1).unwrap();
        let (n2, n1) = (bumped(w2), bumped(w1));
        t.bind_mw(pd, 5, &bind(w2, n2, k, 0x1000, 0x100, Access::REMOTE_READ))
            .unwrap();
        t.bind_mw(pd, 5, &bind(w1, n1, k, 0x1000, 0x100, Access::REMOTE_READ))
            .unwrap();
        // 3) an MR key, 6) a type 1 window, 1) a stale key, 5/8) another PD or
        // QP: refused, nothing changes.
        assert_eq!(t.invalidate(pd, 5, k), Err(MwError::NotInvalidatable));
        assert_eq!(t.invalidate(pd, 5, n1), Err(MwError::NotInvalidatable));
        assert_eq!(t.invalidate(pd, 5, w2), Err(MwError::NoSuchWindow));
        assert_eq!(t.invalidate(pd2, 5, n2), Err(MwError::PdMismatch));
        assert_eq!(t.invalidate(pd, 6, n2), Err(MwError::WrongQp));
        assert!(t.mw(n2).unwrap().binding().is_some());
        assert_eq!(MwError::WrongQp.status(false), WcStatus::LocProtErr);
        assert_eq!(MwError::NotFree.status(true), WcStatus::MwBindErr);
        t.invalidate(pd, 5, n2).unwrap();
        assert!(t.mw(n2).unwrap().binding().is_none());
        assert_eq!(t.mr(k).unwrap().windows(), 1);
        // Free, same PD: nothing to do (o9-5.2.2 note); another PD: 9).
        t.invalidate(pd, 7, n2).unwrap();
        assert_eq!(t.invalidate(pd2, 7, n2), Err(MwError::PdMismatch));
        // A free type 2 window is bound again with a new key.
        let m2 = bumped(n2);
        t.bind_mw(pd, 7, &bind(n2, m2, k, 0x1000, 0x10, Access::REMOTE_READ))
            .unwrap();
        assert_eq!(t.unbind_qp_windows(7), 1);
        assert_eq!(t.unbind_qp_windows(5), 0);
        assert_eq!(t.mr(k).unwrap().windows(), 1);
    }

    // ---- MP-01: protection domains ----

    #[test]
    fn mp_01_pd_alloc_dealloc_and_capacity() {
        let mut t = MrTable::new(2, 8);
        let a = t.alloc_pd().unwrap();
        let b = t.alloc_pd().unwrap();
        assert_ne!(a, 0);
        assert_ne!(a, b);
        assert_eq!(t.alloc_pd(), Err(VerbError::InsufficientResources));
        assert!(t.pd_exists(a));
        t.dealloc_pd(a).unwrap();
        assert!(!t.pd_exists(a));
        assert_eq!(t.dealloc_pd(a), Err(VerbError::InvalidPd));
        let c = t.alloc_pd().unwrap();
        assert_ne!(c, a, "a handle is not reused at once");
        assert_eq!(t.pd_count(), 2);
    }

    #[test]
    fn mp_01_dealloc_pd_with_mr_or_user_is_busy() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0x1000, 16, Access::default(), 0);
        assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
        t.dereg_mr(k).unwrap();
        t.pd_ref(pd).unwrap();
        t.pd_ref(pd).unwrap();
        assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
        t.pd_unref(pd).unwrap();
        assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
        t.pd_unref(pd).unwrap();
        assert_eq!(t.pd_unref(pd), Err(VerbError::InvalidHandle), "unbalanced");
        t.dealloc_pd(pd).unwrap();
        assert_eq!(t.pd_ref(pd), Err(VerbError::InvalidPd));
        assert_eq!(t.pd_unref(pd), Err(VerbError::InvalidPd));
    }

    #[test]
    fn mr_at_finds_the_mr_of_a_key_index_whatever_its_key_byte() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0x1000, 16, Access::default(), 0);
        assert_eq!(t.mr_at(key_index(k)).map(Mr::key), Some(k));
        assert!(t.mr_at(0).is_none());
        assert!(t.mr_at(key_index(k) + 1).is_none());
        assert!(t.mr_at(u32::MAX).is_none());
        t.dereg_mr(k).unwrap();
        assert!(t.mr_at(key_index(k)).is_none());
    }

    #[test]
    fn mp_01_reg_mr_on_unknown_pd_is_invalid_pd() {
        let (mut t, pd) = table();
        assert_eq!(
            t.reg_mr(pd + 1, 0, 0, Access::default(), PS, vec![]),
            Err(VerbError::InvalidPd)
        );
        assert_eq!(t.mr_count(), 0);
    }

    #[test]
    fn mp_01_key_of_another_pd_is_rejected() {
        let (mut t, pd) = table();
        let other = t.alloc_pd().unwrap();
        let k = reg(&mut t, pd, 0x1000, 64, ALL, 0);
        assert!(t.check_local(pd, k, 0x1000, 8, LocalAccess::Read).is_ok());
        let e = t.check_local(other, k, 0x1000, 8, LocalAccess::Read);
        assert_eq!(e.unwrap_err(), AccessError::PdMismatch);
        let e = t.check_remote(other, k, 0x1000, 8, RemoteAccess::Write);
        assert_eq!(e.unwrap_err(), AccessError::PdMismatch);
        assert_eq!(
            t.check_atomic(other, k, 0x1000),
            Err(AccessError::PdMismatch)
        );
    }

    // ---- MP-02: keys ----

    #[test]
    fn mp_02_key_is_index_and_key_byte() {
        let (mut t, pd) = table();
        let a = reg(&mut t, pd, 0, 1, Access::default(), 0);
        let b = reg(&mut t, pd, 0, 1, Access::default(), 0);
        assert_eq!(key_index(a), 1, "index 0 is reserved");
        assert_eq!(key_index(b), 2);
        assert_eq!(a & 0xff, u32::from(key_byte(a)));
        assert_eq!(t.mr(a).unwrap().key(), a);
        assert_eq!(t.mr(0), None);
    }

    /// MP-02: a register/deregister loop on one MR never hands out a key it
    /// handed out before within 256 x KEY_QUARANTINE registrations (without the
    /// quarantine the same index came back at once and its 8-bit key byte
    /// repeated after 256 loops, reviving a stale R_Key).
    #[test]
    fn mp_02_reregistering_in_a_loop_does_not_revive_a_stale_key() {
        let mut t = MrTable::new(1, 1 << 16);
        let pd = t.alloc_pd().unwrap();
        let mut seen = std::collections::HashSet::new();
        for i in 0..100_000 {
            let k = reg(&mut t, pd, 0x1000, 64, ALL, 0);
            assert!(seen.insert(k), "key {k:#x} handed out twice (loop {i})");
            t.dereg_mr(k).unwrap();
        }
        assert!(
            t.slots.len() <= KEY_QUARANTINE + 1,
            "the table grew only by the quarantine"
        );
    }

    #[test]
    fn mp_02_stale_key_byte_is_rejected() {
        let mut t = MrTable::new(1, 1);
        let pd = t.alloc_pd().unwrap();
        let old = reg(&mut t, pd, 0x1000, 64, ALL, 0);
        t.dereg_mr(old).unwrap();
        assert_eq!(
            t.check_local(pd, old, 0x1000, 1, LocalAccess::Read)
                .unwrap_err(),
            AccessError::NoSuchKey
        );
        let new = reg(&mut t, pd, 0x1000, 64, ALL, 0);
        assert_eq!(
            key_index(new),
            key_index(old),
            "capacity 1 reuses the index"
        );
        assert_ne!(key_byte(new), key_byte(old));
        for e in [
            t.check_local(pd, old, 0x1000, 1, LocalAccess::Read).err(),
            t.check_remote(pd, old, 0x1000, 1, RemoteAccess::Read).err(),
            t.check_atomic(pd, old, 0x1000).err(),
        ] {
            assert_eq!(e, Some(AccessError::KeyMismatch));
        }
        assert_eq!(t.dereg_mr(old), Err(VerbError::InvalidHandle));
        assert!(t.check_local(pd, new, 0x1000, 1, LocalAccess::Read).is_ok());
    }

    #[test]
    fn mp_02_key_byte_cycles_through_all_256_values() {
        let mut t = MrTable::new(1, 1);
        let pd = t.alloc_pd().unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..256 {
            let k = reg(&mut t, pd, 0, 0, Access::default(), 0);
            assert!(seen.insert(key_byte(k)));
            t.dereg_mr(k).unwrap();
        }
    }

    #[test]
    fn mp_02_unknown_index_is_rejected() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0, 8, Access::default(), 0);
        for bad in [0, 0xff, k + (1 << 8), u32::MAX, (9 << 8) | 1] {
            assert_eq!(
                t.check_local(pd, bad, 0, 1, LocalAccess::Read).unwrap_err(),
                AccessError::NoSuchKey,
                "{bad:#x}"
            );
        }
    }

    // ---- MP-03: registration and translation ----

    #[test]
    fn mp_03_page_list_must_cover_exactly_the_span() {
        let (mut t, pd) = table();
        let a = Access::default();
        // [0xff0, 0x1010) spans two 4 KiB pages.
        assert!(t
            .reg_mr(pd, 0xff0, 0x20, a, PS, vec![0x5000, 0x9000])
            .is_ok());
        let bad: [Vec<u64>; 3] = [vec![0x5000], vec![0x5000, 0x9000, 0xa000], vec![]];
        for pages in bad {
            assert_eq!(
                t.reg_mr(pd, 0xff0, 0x20, a, PS, pages),
                Err(VerbError::InvalidAttr)
            );
        }
        // Exactly one page, ending on its last byte.
        assert!(t.reg_mr(pd, 0x1001, 0xfff, a, PS, vec![0]).is_ok());
        assert_eq!(
            t.reg_mr(pd, 0x1001, 0x1000, a, PS, vec![0]),
            Err(VerbError::InvalidAttr)
        );
    }

    #[test]
    fn mp_03_page_size_and_alignment_are_checked() {
        let (mut t, pd) = table();
        let a = Access::default();
        for ps in [0, 1, 2048, 4095, 6144, 1 << 31, u64::MAX] {
            assert_eq!(
                t.reg_mr(pd, 0, 1, a, ps, vec![0]),
                Err(VerbError::InvalidAttr),
                "{ps}"
            );
        }
        for ps in [4096, 1 << 21, 1 << 30] {
            assert!(t.reg_mr(pd, ps - 1, 2, a, ps, vec![0, ps]).is_ok(), "{ps}");
        }
        assert_eq!(
            t.reg_mr(pd, 0, 1, a, PS, vec![0x800]),
            Err(VerbError::InvalidAttr)
        );
        // A page whose end is past 2^64.
        let top = u64::MAX - PS + 1;
        assert_eq!(
            t.reg_mr(pd, 0, 1, a, PS, vec![top]),
            Err(VerbError::InvalidAttr)
        );
        assert!(t.reg_mr(pd, 0, 1, a, PS, vec![top - PS]).is_ok());
    }

    #[test]
    fn mp_03_zero_length_mr() {
        let (mut t, pd) = table();
        let k = t.reg_mr(pd, 0x1234, 0, RW, PS, vec![]).unwrap();
        assert_eq!(
            t.reg_mr(pd, 0x1234, 0, RW, PS, vec![0]),
            Err(VerbError::InvalidAttr)
        );
        let r = t
            .check_remote(pd, k, 0x1234, 0, RemoteAccess::Write)
            .unwrap();
        assert!(r.is_empty());
        assert_eq!(r.segments().count(), 0);
        let mut mem = VecMemory::new(0, 16);
        r.write(&mut mem, &[]).unwrap();
        assert_eq!(r.write(&mut mem, &[1]), Err(CopyError::Length));
        assert_eq!(
            t.check_remote(pd, k, 0x1234, 1, RemoteAccess::Write)
                .unwrap_err(),
            AccessError::OutOfBounds
        );
        assert_eq!(
            t.check_remote(pd, k, 0x1235, 0, RemoteAccess::Write)
                .unwrap_err(),
            AccessError::OutOfBounds
        );
    }

    #[test]
    fn mp_03_iova_plus_length_overflow_is_invalid() {
        let (mut t, pd) = table();
        let a = Access::default();
        assert_eq!(
            t.reg_mr(pd, u64::MAX, 1, a, PS, vec![0]),
            Err(VerbError::InvalidAttr)
        );
        assert_eq!(
            t.reg_mr(pd, 1, u64::MAX, a, PS, vec![]),
            Err(VerbError::InvalidAttr)
        );
        // The last byte below 2^64 is addressable: [2^64 - 2, 2^64 - 1).
        let k = t.reg_mr(pd, u64::MAX - 1, 1, a, PS, vec![0x3000]).unwrap();
        let r = t
            .check_local(pd, k, u64::MAX - 1, 1, LocalAccess::Read)
            .unwrap();
        assert_eq!(r.segments().collect::<Vec<_>>(), vec![(0x3ffe, 1)]);
        // A whole-address-space length asks for 2^52 pages: refused, no allocation.
        assert_eq!(
            t.reg_mr(pd, 0, u64::MAX, a, PS, vec![0]),
            Err(VerbError::InvalidAttr)
        );
    }

    #[test]
    fn mp_03_mr_capacity_is_bounded() {
        let mut t = MrTable::new(1, 3);
        let pd = t.alloc_pd().unwrap();
        let keys: Vec<u32> = (0..3)
            .map(|_| reg(&mut t, pd, 0, 1, Access::default(), 0))
            .collect();
        assert_eq!(
            t.reg_mr(pd, 0, 1, Access::default(), PS, vec![0]),
            Err(VerbError::InsufficientResources)
        );
        assert_eq!(t.mr_count(), 3);
        t.dereg_mr(keys[1]).unwrap();
        let k = reg(&mut t, pd, 0, 1, Access::default(), 0);
        assert_eq!(key_index(k), key_index(keys[1]));
        assert_eq!(MrTable::new(1, u32::MAX).max_mr, MAX_MR_INDEX);
    }

    #[test]
    fn mp_03_freed_indices_are_reused_oldest_first() {
        let mut t = MrTable::new(1, 3);
        let pd = t.alloc_pd().unwrap();
        let k: Vec<u32> = (0..3)
            .map(|_| reg(&mut t, pd, 0, 1, Access::default(), 0))
            .collect();
        t.dereg_mr(k[2]).unwrap();
        t.dereg_mr(k[0]).unwrap();
        assert_eq!(key_index(reg(&mut t, pd, 0, 1, Access::default(), 0)), 3);
        assert_eq!(key_index(reg(&mut t, pd, 0, 1, Access::default(), 0)), 1);
    }

    #[test]
    fn mp_03_dereg_unknown_key_is_invalid_handle() {
        let (mut t, pd) = table();
        assert_eq!(t.dereg_mr(0), Err(VerbError::InvalidHandle));
        assert_eq!(t.dereg_mr(0x100), Err(VerbError::InvalidHandle));
        let k = reg(&mut t, pd, 0, 1, Access::default(), 0);
        assert_eq!(t.dereg_mr(k ^ 1), Err(VerbError::InvalidHandle));
        t.dereg_mr(k).unwrap();
        assert_eq!(t.dereg_mr(k), Err(VerbError::InvalidHandle));
        assert_eq!(t.mr_count(), 0);
        t.dealloc_pd(pd).unwrap();
    }

    #[test]
    fn mp_03_rereg_changes_access_pd_and_translation_keeping_the_key() {
        let (mut t, pd) = table();
        let pd2 = t.alloc_pd().unwrap();
        let k = reg(&mut t, pd, 0x1000, 0x100, Access::default(), 0x4000);
        assert_eq!(
            t.check_remote(pd, k, 0x1000, 1, RemoteAccess::Read)
                .unwrap_err(),
            AccessError::NoRemoteRead
        );
        let ch = Rereg {
            access: Some(RW),
            ..Rereg::default()
        };
        assert_eq!(t.rereg_mr(k, ch), Ok(k));
        assert!(t.check_remote(pd, k, 0x1000, 1, RemoteAccess::Read).is_ok());

        let ch = Rereg {
            pd: Some(pd2),
            ..Rereg::default()
        };
        assert_eq!(t.rereg_mr(k, ch), Ok(k));
        assert_eq!(
            t.check_local(pd, k, 0x1000, 1, LocalAccess::Read)
                .unwrap_err(),
            AccessError::PdMismatch
        );
        t.dealloc_pd(pd).unwrap();
        assert_eq!(t.dealloc_pd(pd2), Err(VerbError::Busy));

        let ch = Rereg {
            translation: Some(Translation {
                iova: 0x7ff8,
                length: 16,
                page_size: PS,
                pages: vec![0x9000, 0x2000],
            }),
            ..Rereg::default()
        };
        assert_eq!(t.rereg_mr(k, ch), Ok(k));
        let r = t
            .check_local(pd2, k, 0x7ffc, 8, LocalAccess::Write)
            .unwrap();
        assert_eq!(
            r.segments().collect::<Vec<_>>(),
            vec![(0x9ffc, 4), (0x2000, 4)]
        );
        assert_eq!(
            t.check_local(pd2, k, 0x1000, 1, LocalAccess::Read)
                .unwrap_err(),
            AccessError::OutOfBounds
        );
    }

    #[test]
    fn mp_03_failed_rereg_changes_nothing() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0x1000, 0x100, RW, 0x4000);
        let before = t.mr(k).unwrap().clone();
        let bad = [
            Rereg {
                pd: Some(99),
                access: Some(Access::default()),
                ..Rereg::default()
            },
            Rereg {
                access: Some(Access::REMOTE_WRITE),
                ..Rereg::default()
            },
            Rereg {
                access: Some(Access::default()),
                translation: Some(Translation {
                    iova: 0,
                    length: 1,
                    page_size: PS,
                    pages: vec![1],
                }),
                ..Rereg::default()
            },
        ];
        let want = [
            VerbError::InvalidPd,
            VerbError::InvalidAttr,
            VerbError::InvalidAttr,
        ];
        for (ch, e) in bad.into_iter().zip(want) {
            assert_eq!(t.rereg_mr(k, ch), Err(e));
            assert_eq!(t.mr(k), Some(&before));
        }
        assert_eq!(
            t.rereg_mr(k ^ 0x80, Rereg::default()),
            Err(VerbError::InvalidHandle)
        );
    }

    #[test]
    fn mp_03_translation_crosses_pages_at_odd_alignment() {
        let (mut t, pd) = table();
        // [0x10_0ffd, 0x10_3000) spans three pages, out of order in physical memory.
        let pages = vec![0x3000, 0x1000, 0x2000];
        let k = t.reg_mr(pd, 0x10_0ffd, 0x2003, RW, PS, pages).unwrap();
        let r = t
            .check_local(pd, k, 0x10_0ffe, 0x2001, LocalAccess::Write)
            .unwrap();
        assert_eq!(
            r.segments().collect::<Vec<_>>(),
            vec![(0x3ffe, 2), (0x1000, 0x1000), (0x2000, 0xfff)]
        );
        let mut mem = VecMemory::new(0x1000, 0x3000);
        let data: Vec<u8> = (0..0x2001u32).map(|i| (i * 7 + 3) as u8).collect();
        r.write(&mut mem, &data).unwrap();
        assert_eq!(&mem.bytes[0x2ffe..0x3000], &data[..2]);
        assert_eq!(&mem.bytes[..0x1000], &data[2..0x1002]);
        assert_eq!(&mem.bytes[0x1000..0x1fff], &data[0x1002..]);
        let mut back = vec![0; 0x2001];
        r.read(&mem, &mut back).unwrap();
        assert_eq!(back, data);
        let mut short = vec![0; 5];
        r.read(&mem, &mut short).unwrap();
        assert_eq!(short, data[..5]);
        let mut long = vec![0; 0x2002];
        assert_eq!(r.read(&mem, &mut long), Err(CopyError::Length));
    }

    #[test]
    fn mp_03_page_outside_memory_is_mem_error() {
        let (mut t, pd) = table();
        let k = t
            .reg_mr(pd, 0xff8, 16, RW | ALL, PS, vec![0x1000, 0x8000])
            .unwrap();
        let mut mem = VecMemory::new(0x1000, 0x1000);
        let r = t.check_local(pd, k, 0xff8, 16, LocalAccess::Write).unwrap();
        assert_eq!(
            r.write(&mut mem, &[1; 16]),
            Err(CopyError::Mem(MemError {
                addr: 0x8000,
                len: 8
            }))
        );
        let a = t.check_atomic(pd, k, 0x1000).unwrap();
        assert_eq!(a.pa(), 0x8000);
        assert_eq!(
            a.fetch_add(&mut mem, 1),
            Err(MemError {
                addr: 0x8000,
                len: 8
            })
        );
    }

    // ---- MP-04: rights and bounds ----

    #[test]
    fn mp_04_remote_write_or_atomic_requires_local_write() {
        let (mut t, pd) = table();
        for a in [
            Access::REMOTE_WRITE,
            Access::REMOTE_ATOMIC,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        ] {
            assert_eq!(
                t.reg_mr(pd, 0, 1, a, PS, vec![0]),
                Err(VerbError::InvalidAttr)
            );
            assert!(t
                .reg_mr(pd, 0, 1, a | Access::LOCAL_WRITE, PS, vec![0])
                .is_ok());
        }
        // Remote read alone needs nothing else.
        assert!(t.reg_mr(pd, 0, 1, Access::REMOTE_READ, PS, vec![0]).is_ok());
        assert_eq!(
            t.reg_mr(pd, 0, 1, Access(1 << 5), PS, vec![0]),
            Err(VerbError::NotSupported)
        );
    }

    #[test]
    fn mp_04_local_read_always_local_write_needs_flag() {
        let (mut t, pd) = table();
        let ro = reg(&mut t, pd, 0x1000, 64, Access::default(), 0);
        let rw = reg(&mut t, pd, 0x1000, 64, Access::LOCAL_WRITE, 0);
        assert!(t.check_local(pd, ro, 0x1000, 64, LocalAccess::Read).is_ok());
        assert_eq!(
            t.check_local(pd, ro, 0x1000, 64, LocalAccess::Write)
                .unwrap_err(),
            AccessError::NoLocalWrite
        );
        assert!(t
            .check_local(pd, rw, 0x1000, 64, LocalAccess::Write)
            .is_ok());
        assert_eq!(
            AccessError::NoLocalWrite.local_status(),
            WcStatus::LocProtErr
        );
    }

    #[test]
    fn mp_04_remote_rights_are_checked_per_operation() {
        let (mut t, pd) = table();
        let none = reg(&mut t, pd, 0x1000, 64, Access::LOCAL_WRITE, 0);
        let read = reg(&mut t, pd, 0x1000, 64, Access::REMOTE_READ, 0);
        let write = reg(
            &mut t,
            pd,
            0x1000,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            0,
        );
        let atomic = reg(
            &mut t,
            pd,
            0x1000,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_ATOMIC,
            0,
        );
        let rd = |k| t.check_remote(pd, k, 0x1000, 8, RemoteAccess::Read).err();
        let wr = |k| t.check_remote(pd, k, 0x1000, 8, RemoteAccess::Write).err();
        let at = |k| t.check_atomic(pd, k, 0x1000).err();
        assert_eq!(rd(none), Some(AccessError::NoRemoteRead));
        assert_eq!(wr(none), Some(AccessError::NoRemoteWrite));
        assert_eq!(at(none), Some(AccessError::NoRemoteAtomic));
        assert_eq!(
            (rd(read), wr(read), at(read).is_some()),
            (None, Some(AccessError::NoRemoteWrite), true)
        );
        assert_eq!(
            (rd(write).is_some(), wr(write), at(write).is_some()),
            (true, None, true)
        );
        assert_eq!(
            (rd(atomic).is_some(), wr(atomic).is_some(), at(atomic)),
            (true, true, None)
        );
        assert_eq!(
            AccessError::NoRemoteWrite.remote_nak(),
            NakCode::RemoteAccessError
        );
    }

    #[test]
    fn mp_04_bounds_are_checked_without_overflow() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0x1000, 0x100, ALL, 0);
        let chk = |va, len| t.check_remote(pd, k, va, len, RemoteAccess::Read).err();
        assert_eq!(chk(0x1000, 0x100), None);
        assert_eq!(chk(0x10ff, 1), None);
        assert_eq!(chk(0x1100, 0), None);
        assert_eq!(chk(0xfff, 1), Some(AccessError::OutOfBounds));
        assert_eq!(chk(0x1000, 0x101), Some(AccessError::OutOfBounds));
        assert_eq!(chk(0x1100, 1), Some(AccessError::OutOfBounds));
        assert_eq!(chk(0x1001, u64::MAX), Some(AccessError::OutOfBounds));
        assert_eq!(chk(u64::MAX, u64::MAX), Some(AccessError::OutOfBounds));
        assert_eq!(chk(0, u64::MAX), Some(AccessError::OutOfBounds));
        assert_eq!(t.check_atomic(pd, k, 0x10f8).err(), None);
        assert_eq!(
            t.check_atomic(pd, k, 0x1100).err(),
            Some(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check_atomic(pd, k, u64::MAX - 7).err(),
            Some(AccessError::OutOfBounds)
        );
    }

    #[test]
    fn op_07_misaligned_atomic_is_invalid_request() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0x1003, 0x100, ALL, 0x2000);
        for va in [0x1004, 0x1009, 0x100f] {
            let e = t.check_atomic(pd, k, va).unwrap_err();
            assert_eq!(e, AccessError::MisalignedAtomic);
            assert_eq!(e.remote_nak(), NakCode::InvalidRequest);
        }
        // Aligned VA inside an MR whose IOVA is not aligned: aligned PA.
        let a = t.check_atomic(pd, k, 0x1008).unwrap();
        assert_eq!(a.pa(), 0x2008);
        // The word must lie wholly inside the MR.
        assert_eq!(t.check_atomic(pd, k, 0x1000), Err(AccessError::OutOfBounds));
        assert_eq!(t.check_atomic(pd, k, 0x1100), Err(AccessError::OutOfBounds));
    }

    #[test]
    fn op_07_atomics_go_to_the_translated_word() {
        let (mut t, pd) = table();
        let k = t
            .reg_mr(pd, 0x7000, 0x2000, ALL, PS, vec![0x2000, 0x1000])
            .unwrap();
        let mut mem = VecMemory::new(0x1000, 0x2000);
        let a = t.check_atomic(pd, k, 0x8010).unwrap();
        assert_eq!(a.pa(), 0x1010);
        assert_eq!(a.fetch_add(&mut mem, 5).unwrap(), 0);
        assert_eq!(a.compare_swap(&mut mem, 5, 9).unwrap(), 5);
        assert_eq!(a.compare_swap(&mut mem, 5, 1).unwrap(), 9);
        assert_eq!(&mem.bytes[0x10..0x18], &9u64.to_le_bytes());
    }

    // ---- MP-05: gather / scatter over SGE lists ----

    fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
        Sge { addr, length, lkey }
    }

    #[test]
    fn mp_05_sge_total_len_is_overflow_safe() {
        assert_eq!(sge_total_len(&[]), Some(0));
        assert_eq!(
            sge_total_len(&[sge(0, u32::MAX, 0), sge(0, 1, 0)]),
            Some(1 << 32)
        );
        let (t, pd) = table();
        assert_eq!(t.check_sges(pd, &[sge(0, 0, 0)], LocalAccess::Write), Ok(0));
    }

    #[test]
    fn mp_05_gather_and_scatter_at_running_offsets() {
        let (mut t, pd) = table();
        let a = t
            .reg_mr(pd, 0x1ffe, 0x10, RW, PS, vec![0x3000, 0x1000])
            .unwrap();
        let b = t.reg_mr(pd, 0x500, 0x10, RW, PS, vec![0x2000]).unwrap();
        let sges = [
            sge(0x1ffe, 5, a),
            sge(0x1234, 0, 0xdead),
            sge(0x508, 6, b),
            sge(0x2003, 3, a),
        ];
        assert_eq!(t.check_sges(pd, &sges, LocalAccess::Write), Ok(14));
        let mut mem = VecMemory::new(0x1000, 0x3000);
        let data: Vec<u8> = (1..=14).collect();
        // Place the message in three packets of 4, 4 and 6 bytes.
        t.scatter(&mut mem, pd, &sges, 0, &data[..4]).unwrap();
        t.scatter(&mut mem, pd, &sges, 4, &data[4..8]).unwrap();
        t.scatter(&mut mem, pd, &sges, 8, &data[8..]).unwrap();
        assert_eq!(&mem.bytes[0x2ffe..0x3000], &[1, 2]);
        assert_eq!(&mem.bytes[0..3], &[3, 4, 5]);
        assert_eq!(&mem.bytes[0x1508..0x150e], &[6, 7, 8, 9, 10, 11]);
        assert_eq!(&mem.bytes[3..6], &[12, 13, 14]);
        for (off, n) in [(0, 14), (3, 7), (13, 1), (14, 0), (5, 0)] {
            let mut out = vec![0; n];
            t.gather(&mem, pd, &sges, off as u64, &mut out).unwrap();
            assert_eq!(out, data[off..off + n], "{off}+{n}");
        }
    }

    #[test]
    fn mp_05_scatter_past_the_list_is_length_error_and_writes_nothing() {
        let (mut t, pd) = table();
        let k = reg(&mut t, pd, 0x1000, 8, RW, 0x1000);
        let sges = [sge(0x1000, 8, k)];
        let mut mem = VecMemory::new(0x1000, 0x1000);
        assert_eq!(
            t.scatter(&mut mem, pd, &sges, 4, &[9; 5]),
            Err(CopyError::Length)
        );
        assert_eq!(
            t.scatter(&mut mem, pd, &sges, u64::MAX, &[9]),
            Err(CopyError::Length)
        );
        assert_eq!(
            t.gather(&mem, pd, &sges, 9, &mut []),
            Err(CopyError::Length)
        );
        assert_eq!(t.gather(&mem, pd, &sges, 8, &mut []), Ok(()));
        assert!(mem.bytes.iter().all(|&b| b == 0));
        t.scatter(&mut mem, pd, &sges, 4, &[9; 4]).unwrap();
        assert_eq!(&mem.bytes[..8], &[0, 0, 0, 0, 9, 9, 9, 9]);
    }

    #[test]
    fn mp_05_bad_sge_is_local_protection_error_before_any_write() {
        let (mut t, pd) = table();
        let other = t.alloc_pd().unwrap();
        let good = reg(&mut t, pd, 0x1000, 8, RW, 0x1000);
        let ro = reg(&mut t, pd, 0x1000, 8, Access::default(), 0x1000);
        let foreign = reg(&mut t, other, 0x1000, 8, RW, 0x1000);
        let mut mem = VecMemory::new(0x1000, 0x1000);
        let cases = [
            (sge(0x1000, 8, ro), AccessError::NoLocalWrite),
            (sge(0x1000, 8, foreign), AccessError::PdMismatch),
            (sge(0x1001, 8, good), AccessError::OutOfBounds),
            (sge(u64::MAX, 8, good), AccessError::OutOfBounds),
            (sge(0x1000, 8, good ^ 0x40), AccessError::KeyMismatch),
            (sge(0x1000, 8, 0), AccessError::NoSuchKey),
        ];
        for (bad, why) in cases {
            let sges = [sge(0x1000, 8, good), bad];
            assert_eq!(
                t.scatter(&mut mem, pd, &sges, 0, &[7; 16]),
                Err(CopyError::Access(why))
            );
            assert_eq!(
                t.check_sges(pd, &sges, LocalAccess::Write),
                Err(CopyError::Access(why))
            );
            assert!(mem.bytes.iter().all(|&b| b == 0), "{why:?}");
            // The bad SGE is not touched by a copy that ends before it.
            t.scatter(&mut mem, pd, &sges, 0, &[0; 8]).unwrap();
        }
        // Gather needs only local read.
        let mut out = [0; 8];
        t.gather(&mem, pd, &[sge(0x1000, 8, ro)], 0, &mut out)
            .unwrap();
    }

    // ---- properties ----

    /// An MR over shuffled pages of a small memory, with random bytes, and its flat
    /// virtual view built byte by byte.
    fn fixture(
        iova: u64,
        len: u64,
        shift: u32,
        perm: &[usize],
        seed: u8,
    ) -> (MrTable, Handle, u32, VecMemory, Vec<u8>) {
        let ps = 1u64 << shift;
        let n = if len == 0 {
            0
        } else {
            ((iova % ps) + len).div_ceil(ps)
        } as usize;
        let base = 0x10_0000u64;
        let pages: Vec<u64> = (0..n).map(|i| base + perm[i] as u64 * ps).collect();
        let mut mem = VecMemory::new(base, perm.len() << shift);
        for (i, b) in mem.bytes.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        let mut t = MrTable::new(1, 4);
        let pd = t.alloc_pd().unwrap();
        let k = t.reg_mr(pd, iova, len, ALL, ps, pages.clone()).unwrap();
        let flat = flat_view(&mem, iova, len, ps, &pages);
        (t, pd, k, mem, flat)
    }

    fn flat_view(mem: &VecMemory, iova: u64, len: u64, ps: u64, pages: &[u64]) -> Vec<u8> {
        (0..len)
            .map(|i| {
                let v = iova % ps + i;
                let pa = pages[(v / ps) as usize] + v % ps;
                mem.bytes[(pa - mem.base) as usize]
            })
            .collect()
    }

    proptest! {
        #[test]
        fn mp_03_translation_matches_flat_reference(
            iova in prop_oneof![0u64..0x3_0000, (u64::MAX - 0x3_0000)..u64::MAX - 0x8000],
            len in 0u64..0x5000,
            shift in 12u32..14,
            perm in Just((0..8usize).collect::<Vec<_>>()).prop_shuffle(),
            a in 0u64..0x5000,
            b in 0u64..0x5000,
            seed: u8,
        ) {
            let (t, pd, k, mut mem, mut flat) = fixture(iova, len, shift, &perm, seed);
            let (lo, hi) = (a.min(b) % (len + 1), a.max(b) % (len + 1));
            let (lo, hi) = (lo.min(hi), lo.max(hi));
            let n = (hi - lo) as usize;
            let r = t.check_local(pd, k, iova + lo, hi - lo, LocalAccess::Write).unwrap();
            // The segments are contiguous in VA and stay inside pages.
            let total: u64 = r.segments().map(|(_, l)| l).sum();
            prop_assert_eq!(total, hi - lo);
            for (pa, l) in r.segments() {
                prop_assert!(l > 0 && (pa % (1 << shift)) + l <= 1 << shift);
            }
            let mut out = vec![0; n];
            r.read(&mem, &mut out).unwrap();
            prop_assert_eq!(&out[..], &flat[lo as usize..hi as usize]);
            let data: Vec<u8> = (0..n).map(|i| (i as u8) ^ seed ^ 0x5a).collect();
            r.write(&mut mem, &data).unwrap();
            flat[lo as usize..hi as usize].copy_from_slice(&data);
            let pages = t.mr(k).unwrap().pages().to_vec();
            prop_assert_eq!(flat_view(&mem, iova, len, 1 << shift, &pages), flat);
        }

        #[test]
        fn mp_05_gather_scatter_match_concatenated_reference(
            cuts in proptest::collection::vec((0u64..0x2400, 0u32..0x900), 0..6),
            off in 0u64..0x3000,
            n in 0usize..0x2000,
            seed: u8,
        ) {
            let (t, pd, k, mut mem, mut flat) =
                fixture(0x7ff, 0x2400, 12, &[3, 0, 2, 1, 4, 5, 6, 7], seed);
            let sges: Vec<Sge> = cuts
                .iter()
                .map(|&(start, l)| sge(0x7ff + start, l.min((0x2400 - start) as u32), k))
                .collect();
            // The reference: the SGEs' bytes concatenated.
            let concat = |flat: &[u8]| -> Vec<u8> {
                sges.iter()
                    .flat_map(|s| flat[(s.addr - 0x7ff) as usize..][..s.length as usize].to_vec())
                    .collect()
            };
            let total = sge_total_len(&sges).unwrap();
            let mut out = vec![0; n];
            let fits = off + n as u64 <= total;
            let res = t.gather(&mem, pd, &sges, off, &mut out);
            if fits {
                prop_assert_eq!(res, Ok(()));
                prop_assert_eq!(&out[..], &concat(&flat)[off as usize..][..n]);
            } else {
                prop_assert_eq!(res, Err(CopyError::Length));
            }
            let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect();
            let res = t.scatter(&mut mem, pd, &sges, off, &data);
            if fits {
                prop_assert_eq!(res, Ok(()));
                // Apply the same placement to the flat view, SGE by SGE.
                let mut pos = 0u64;
                for s in &sges {
                    for j in 0..u64::from(s.length) {
                        if pos >= off && pos < off + n as u64 {
                            flat[(s.addr - 0x7ff + j) as usize] = data[(pos - off) as usize];
                        }
                        pos += 1;
                    }
                }
            } else {
                prop_assert_eq!(res, Err(CopyError::Length));
            }
            let pages = t.mr(k).unwrap().pages().to_vec();
            prop_assert_eq!(flat_view(&mem, 0x7ff, 0x2400, PS, &pages), flat);
        }

        #[test]
        fn mp_04_checks_never_panic(
            regs in proptest::collection::vec(
                (any::<u64>(), prop_oneof![any::<u64>(), 0u64..0x3000], any::<u32>(),
                 prop_oneof![Just(4096u64), any::<u64>()],
                 proptest::collection::vec(any::<u64>(), 0..4)),
                0..6),
            ops in proptest::collection::vec(
                (0u8..8, any::<u32>(), any::<u64>(), any::<u64>(), 1u32..4), 0..32),
        ) {
            let mut t = MrTable::new(3, 4);
            let pds: Vec<Handle> = (0..3).map(|_| t.alloc_pd().unwrap()).collect();
            let mut keys = vec![0u32];
            let mut mem = VecMemory::new(0, 0x4000);
            for (i, (iova, len, access, ps, pages)) in regs.into_iter().enumerate() {
                // Half the time, a page list that fits, to reach the data path.
                let pages = if i % 2 == 0 && len < 0x3000 {
                    let n = if len == 0 { 0 } else { ((iova % 4096) + len).div_ceil(4096) };
                    (0..n).map(|j| (j % 4) * 4096).collect()
                } else {
                    pages
                };
                let access = Access(access & 0x1f);
                if let Ok(k) = t.reg_mr(pds[i % 3], iova, len, access, ps, pages) {
                    keys.push(k);
                }
            }
            for (op, key, va, len, pd) in ops {
                let key = if key % 2 == 0 { keys[key as usize % keys.len()] } else { key };
                let pd = pd as Handle;
                match op {
                    0 => {
                        let r = t.check_local(pd, key, va, len, LocalAccess::Write);
                        let _ = r.map(|r| r.segments().count());
                    }
                    1 => { let _ = t.check_remote(pd, key, va, len, RemoteAccess::Read); }
                    2 => { let _ = t.check_remote(pd, key, va, len, RemoteAccess::Write); }
                    3 => {
                        if let Ok(a) = t.check_atomic(pd, key, va) {
                            let _ = a.fetch_add(&mut mem, 1);
                        }
                    }
                    4 => {
                        let sges = [sge(va, len as u32, key), sge(len, va as u32 & 0xfff, key)];
                        let mut out = vec![0; (len % 0x2000) as usize];
                        let _ = t.gather(&mem, pd, &sges, va % 0x3000, &mut out);
                        let _ = t.scatter(&mut mem, pd, &sges, len, &out);
                        let _ = t.check_sges(pd, &sges, LocalAccess::Read);
                    }
                    5 => {
                        let len = len % 0x1_0000;
                        if let Ok(r) = t.check_local(pd, key, va, len, LocalAccess::Read) {
                            let mut out = vec![0; r.len() as usize];
                            let _ = r.read(&mem, &mut out);
                        }
                    }
                    6 => {
                        let access = Some(Access(len as u32 & 0x1f));
                        let ch = Rereg { pd: Some(pd), access, translation: None };
                        let _ = t.rereg_mr(key, ch);
                    }
                    _ => { let _ = t.dereg_mr(key); }
                }
            }
        }
    }
}

#[cfg(test)]
mod dma_mr_tests {
    use super::*;
    use crate::memory::VecMemory;

    /// A DMA MR (get_dma_mr): virtual = physical over the whole address space;
    /// the memory, not the MR, refuses what is not mapped. Deregistration and a
    /// translation change end the identity mapping.
    #[test]
    fn mp_02_dma_mr_is_an_identity_mapping_checked_by_memory() {
        let mut t = MrTable::new(4, 8);
        let pd = t.alloc_pd().unwrap();
        let key = t.reg_dma_mr(pd, Access::LOCAL_WRITE).unwrap();
        let mr = t.mr(key).unwrap();
        assert!(mr.is_identity());
        assert_eq!((mr.iova(), mr.length()), (0, u64::MAX));
        let mut mem = VecMemory::new(0x10_0000, 0x4000);
        mem.write(0x10_1ffe, b"abcd").unwrap();
        let sge = Sge {
            addr: 0x10_1ffe,
            length: 4,
            lkey: key,
        };
        let mut buf = [0u8; 4];
        t.gather(&mem, pd, &[sge], 0, &mut buf).unwrap();
        assert_eq!(&buf, b"abcd");
        // Outside the memory: an error, not a read elsewhere.
        let far = Sge {
            addr: 0x90_0000,
            ..sge
        };
        assert!(t.gather(&mem, pd, &[far], 0, &mut buf).is_err());
        // Past 2^64: refused by the bounds check.
        let wrap = Sge {
            addr: u64::MAX - 1,
            ..sge
        };
        assert!(t.gather(&mem, pd, &[wrap], 0, &mut buf).is_err());
        // Other PD: refused.
        let pd2 = t.alloc_pd().unwrap();
        assert!(t.gather(&mem, pd2, &[sge], 0, &mut buf).is_err());
        // Remote write without local write: refused as for any MR (MP-04).
        assert_eq!(
            t.reg_dma_mr(pd, Access::REMOTE_WRITE),
            Err(VerbError::InvalidAttr)
        );
        t.dereg_mr(key).unwrap();
        assert!(t.gather(&mem, pd, &[sge], 0, &mut buf).is_err());
    }
}
