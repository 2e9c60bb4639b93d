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
//! (a zeroed SGE) is never valid. A freed index waits behind [`KEY_QUARANTINE`]
//! others, also at a full table, so a stale key comes back only after 256 x
//! 1024 registrations, and then reaches only an MR of the same PD
//! (ARCHITECTURE.md §9 "Key reuse").
//!
//! Nothing here panics on any input: every length, address and index from a WQE or
//! a packet is checked with overflow-safe arithmetic first (ARCHITECTURE.md §9).
//!
//! The code is split along those questions: this file holds the table itself,
//! the PDs, MR registration and key allocation; `region.rs` a registered MR, its
//! translation and the copies through a checked range; `window.rs` memory
//! windows (MP-06, MP-07); `check.rs` the data-path checks and gather / scatter.
//!
//! [`Memory`]: crate::memory::Memory

use std::collections::{BTreeMap, VecDeque};

use crate::budget::Budget;
use crate::verbs::{Access, Handle, VerbError};

/// What an MR with `pages` translation entries costs the engine's budget (its
/// context and page list; `budget`).
pub fn mr_bytes(pages: u64) -> u64 {
    (std::mem::size_of::<Mr>() as u64).saturating_add(pages.saturating_mul(8))
}

mod check;
mod fast;
mod odp;
mod region;
mod window;

pub use check::{sge_total_len, AccessError, CopyError, LocalAccess, RemoteAccess};
pub use fast::{FastMr, FastRegError, MAX_FAST_REG_PAGES};
pub use odp::{
    OdpFault, OdpPages, MAX_FAILED_RANGES, MAX_FAULT_PAGES, ODP_ENTRY_BYTES, ODP_PAGE_SHIFT,
    ODP_PAGE_SIZE,
};
pub use region::{AtomicTarget, Mr, MrRange, Rereg, Segments, Translation};
pub use window::{Mw, MwBinding, MwError};

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
    /// Where registered MRs and their page lists are charged (an engine's
    /// budget, ARCHITECTURE.md §9); none for a table on its own.
    budget: Option<Budget>,
    /// Present pages of all ODP MRs, and their cap (`odp`).
    odp_entries: u64,
    max_odp_entries: u64,
}

/// Default cap of present ODP pages over all MRs: 4 GiB of 4 KiB pages.
pub const DEFAULT_MAX_ODP_ENTRIES: u64 = 1 << 20;

/// The host bytes an MR with `pages` translation entries holds.
fn mr_weight(pages: usize) -> u64 {
    mr_bytes(pages as u64)
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
            budget: None,
            odp_entries: 0,
            max_odp_entries: DEFAULT_MAX_ODP_ENTRIES,
        }
    }

    /// Charges registered MRs and their page lists to `budget` from now on:
    /// a registration that would go over it is refused with
    /// `InsufficientResources` (ARCHITECTURE.md §9).
    pub fn set_budget(&mut self, budget: &Budget) {
        self.budget = Some(budget.clone());
    }

    /// Whether `bytes` more may be charged; a no is counted by the budget.
    fn admit(&self, bytes: u64) -> Result<(), VerbError> {
        match &self.budget {
            Some(b) if !b.admit(bytes) => Err(VerbError::InsufficientResources),
            _ => Ok(()),
        }
    }

    fn charge(&self, add: u64, remove: u64) {
        if let Some(b) = &self.budget {
            b.charge(add);
            b.release(remove);
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
        let weight = mr_weight(t.pages.len());
        self.install_mr(pd, weight, |key| Mr {
            key,
            pd,
            access,
            iova: t.iova,
            length: t.length,
            page_shift,
            pages: t.pages,
            linear: None,
            windows: 0,
            fast: None,
            odp: None,
        })
    }

    /// Register a DMA MR (`ib_get_dma_mr`, a kernel consumer's L_Key for its own
    /// buffers): virtual address = physical address over the whole address space
    /// (IOVA 0, length 2^64 - 1), no page list; the caller's [`Memory`] refuses
    /// whatever it does not map (ARCHITECTURE.md §9). Checks as [`reg_mr`](Self::reg_mr)
    /// for the PD and access rights.
    ///
    /// [`Memory`]: crate::memory::Memory
    pub fn reg_dma_mr(&mut self, pd: Handle, access: Access) -> Result<u32, VerbError> {
        self.reg_linear_mr(pd, 0, u64::MAX, access, 0)
    }

    /// Register an MR with a linear translation: `[iova, iova + length)` at
    /// the physical `[pa, pa + length)`, no page list (a device-memory MR:
    /// `pa` is where the DM bytes it covers are in the caller's [`Memory`],
    /// and the MR's bounds are theirs). Checks as [`reg_mr`](Self::reg_mr)
    /// for the PD and access rights; `InvalidAttr` when either range passes
    /// 2^64 - 1.
    ///
    /// [`Memory`]: crate::memory::Memory
    pub fn reg_linear_mr(
        &mut self,
        pd: Handle,
        iova: u64,
        length: u64,
        access: Access,
        pa: u64,
    ) -> Result<u32, VerbError> {
        check_pd_access(self, pd, access)?;
        if iova.checked_add(length).is_none() || pa.checked_add(length).is_none() {
            return Err(VerbError::InvalidAttr);
        }
        self.install_mr(pd, mr_weight(0), |key| {
            Mr::pageless(key, pd, access, (iova, length), Some(pa), None)
        })
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
        if mr.fast.is_some() {
            // MP-08: a fast-registration MR changes by REG_MR work requests.
            return Err(VerbError::InvalidHandle);
        }
        if mr.odp.is_some() {
            // Issue 29: an ODP MR's pages change by MAP / UNMAP.
            return Err(VerbError::NotSupported);
        }
        let old_pd = mr.pd;
        let old_pages = mr.pages.len();
        let pd = change.pd.unwrap_or(old_pd);
        let access = change.access.unwrap_or(mr.access);
        let mut page_shift = mr.page_shift;
        if let Some(t) = &change.translation {
            page_shift = check_pd_access_translation(self, pd, access, t)?;
        } else {
            // The current translation is valid; check the new PD and rights.
            check_pd_access(self, pd, access)?;
        }
        let new_pages = change
            .translation
            .as_ref()
            .map_or(old_pages, |t| t.pages.len());
        let (old_w, new_w) = (mr_weight(old_pages), mr_weight(new_pages));
        self.admit(new_w.saturating_sub(old_w))?;
        // Every check passed: commit.
        let slot = self
            .slot_mut(key_index(key))
            .ok_or(VerbError::InvalidHandle)?;
        let mr = slot.mr.as_mut().ok_or(VerbError::InvalidHandle)?;
        mr.pd = pd;
        mr.access = access;
        if let Some(t) = change.translation {
            mr.linear = None;
            mr.iova = t.iova;
            mr.length = t.length;
            mr.page_shift = page_shift;
            mr.pages = t.pages;
        }
        self.charge(new_w, old_w);
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
    /// of a registered MR, or names the index of a fast-registration MR (any
    /// key byte, any state: MP-08, its owner's idea of the key byte may predate
    /// a REG_MR that failed). The index is reused later with another key byte.
    pub fn dereg_mr(&mut self, key: u32) -> Result<(), VerbError> {
        let key = self.fast_mr_at(key).map_or(key, |m| m.key);
        let mr = self
            .mr_at(key_index(key))
            .filter(|m| m.key == key)
            .ok_or(VerbError::InvalidHandle)?;
        if mr.windows != 0 {
            // Seed 003: an MR with windows bound cannot be deregistered (rxe
            // answers EINVAL; Busy here, nothing changes).
            return Err(VerbError::Busy);
        }
        let index = key_index(key);
        let slot = self.slot_mut(index).ok_or(VerbError::InvalidHandle)?;
        let mr = slot.mr.take().ok_or(VerbError::InvalidHandle)?;
        self.charge(0, mr_weight(fast::charged_pages(&mr)));
        let odp = odp::odp_entries_of(&mr);
        self.odp_entries -= odp;
        self.charge(0, odp * ODP_ENTRY_BYTES);
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

    // ---- internals ----

    /// Puts a new MR in a free index, for every kind of registration: the
    /// table's limit and the budget (`weight` bytes) first, then a new key
    /// byte at the index (MP-02) and the MR `make` builds for its key, which
    /// is returned. Nothing changes when it fails.
    fn install_mr(
        &mut self,
        pd: Handle,
        weight: u64,
        make: impl FnOnce(u32) -> Mr,
    ) -> Result<u32, VerbError> {
        if self.live_mrs + self.live_mws >= self.max_mr {
            return Err(VerbError::InsufficientResources);
        }
        self.admit(weight)?;
        let index = self.take_index().ok_or(VerbError::InsufficientResources)?;
        let slot = self
            .slot_mut(index)
            .ok_or(VerbError::InsufficientResources)?;
        // MP-02: a new key byte for every registration at this index.
        slot.key_byte = slot.key_byte.wrapping_add(1);
        let key = (index << 8) | u32::from(slot.key_byte);
        slot.mr = Some(make(key));
        self.charge(weight, 0);
        self.live_mrs += 1;
        if let Some(p) = self.pds.get_mut(&pd) {
            p.mrs += 1;
        }
        Ok(key)
    }

    fn slot_mut(&mut self, index: u32) -> Option<&mut Slot> {
        let i = index.checked_sub(1)? as usize;
        self.slots.get_mut(i)
    }

    /// A free key index. A freed index waits behind [`KEY_QUARANTINE`] others
    /// (FIFO): an index's 8-bit key byte comes back to a stale key's value
    /// only after 256 reuses of the index (MP-02), so a register/deregister
    /// loop must not reuse one index at once — with the quarantine a stale key
    /// revives only after 256 x 1024 registrations. The quarantine holds at a
    /// full table too: indices go [`KEY_QUARANTINE`] past `max_mr`
    /// ([`MrTable::index_limit`]) while the live count stays capped at
    /// `max_mr` by the callers, so at least that many freed indices always
    /// wait (issue 13).
    fn take_index(&mut self) -> Option<u32> {
        let next = u32::try_from(self.slots.len())
            .ok()?
            .checked_add(1)
            .filter(|&n| n <= self.index_limit());
        match next {
            Some(n) if self.free.len() < KEY_QUARANTINE => {
                self.slots.push(Slot::default());
                Some(n)
            }
            _ => self.free.pop_front(),
        }
    }

    /// The highest key index the table hands out: `max_mr` and the
    /// quarantine's [`KEY_QUARANTINE`] beyond it (within the 24 bits).
    fn index_limit(&self) -> u32 {
        self.max_mr
            .saturating_add(KEY_QUARANTINE as u32)
            .min(MAX_MR_INDEX)
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
mod tests;

#[cfg(test)]
mod linear_tests;
