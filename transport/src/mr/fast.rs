//! Fast-registration memory regions (MP-08; IBA base memory management
//! extensions, the kernel's `ib_alloc_mr(IB_MR_TYPE_MEM_REG)` / `IB_WR_REG_MR` /
//! `IB_WR_LOCAL_INV`): an MR allocated with room for a number of pages and no
//! translation, invalid (the "free" state) until a REG_MR work request, executed
//! in order on a send queue, gives it a translation, rights and a key byte of
//! the consumer's choosing; a local invalidate (LOCAL_INV) or a remote one (SEND
//! with Invalidate, o9-5.2.2) makes it free again. While it is free every access
//! through it fails ([`AccessError::Invalidated`]).
//!
//! An MR registered by REG_MR (the command) is not one of these: it cannot be
//! invalidated (o9-5.2.2 3) nor fast-registered.
//!
//! [`AccessError::Invalidated`]: super::AccessError::Invalidated

use crate::memory::Memory;
use crate::verbs::{Access, FastReg, Handle, VerbError, WcStatus};

use super::{
    check_translation, key_byte, key_index, mr_weight, Mr, MrTable, MwError, Translation,
    MAX_PAGE_SIZE, MIN_PAGE_SIZE, SUPPORTED_ACCESS,
};

/// Largest page list of a fast-registration MR (QUERY_DEVICE's
/// `max_fast_reg_page_list_len`): 4096 pages, 16 MiB of 4 KiB pages, a 32 KiB
/// list read per REG_MR (rxe offers 512; nvme-rdma uses up to 256 + 1).
pub const MAX_FAST_REG_PAGES: u32 = 4096;

/// The state of a fast-registration MR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FastMr {
    /// Pages its translation may have (the allocation's `max_num_sg`).
    pub max_pages: u32,
    /// Registered (REG_MR done, not invalidated since).
    pub valid: bool,
}

/// Why a REG_MR work request failed (MP-08). Protection failures complete with
/// Local Protection Error, a malformed registration with Local QP Operation
/// Error (see [`FastRegError::status`]); the QP then fails as on any local error
/// (QS-06).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FastRegError {
    /// The key's index names no fast-registration MR.
    #[error("key index names no fast-registration memory region")]
    NoSuchMr,
    /// The MR belongs to another PD than the QP (MP-01).
    #[error("memory region of another protection domain")]
    PdMismatch,
    /// The MR is valid: it must be invalidated before it is registered again
    /// (the free-state rule of fast registration; rxe refuses it too).
    #[error("memory region is valid (not in the free state)")]
    NotFree,
    /// An access bit this engine does not implement, or remote write / atomic
    /// without local write (MP-04).
    #[error("bad access rights")]
    BadAccess,
    /// More pages than the MR was allocated with.
    #[error("page list longer than the memory region's maximum")]
    TooManyPages,
    /// The page list is not in the caller's memory.
    #[error("page list is not readable")]
    PageList,
    /// Page size, iova + length or the pages themselves fail the MP-03 checks.
    #[error("bad translation")]
    BadTranslation,
}

impl FastRegError {
    /// The completion status of the REG_MR that failed.
    pub const fn status(self) -> WcStatus {
        match self {
            FastRegError::NoSuchMr
            | FastRegError::PdMismatch
            | FastRegError::NotFree
            | FastRegError::BadAccess => WcStatus::LocProtErr,
            FastRegError::TooManyPages | FastRegError::PageList | FastRegError::BadTranslation => {
                WcStatus::LocQpOpErr
            }
        }
    }
}

impl MrTable {
    /// Allocate a fast-registration MR in `pd` with room for `max_pages`
    /// pages (1..=[`MAX_FAST_REG_PAGES`]): free (invalid), no translation. Its
    /// page list is charged to the budget now, at its largest, so that REG_MR
    /// never allocates (ARCHITECTURE.md §9). Returns its key; REG_MR keeps the
    /// index and sets the key byte.
    pub fn alloc_fast_mr(&mut self, pd: Handle, max_pages: u32) -> Result<u32, VerbError> {
        if !self.pd_exists(pd) {
            return Err(VerbError::InvalidPd);
        }
        if max_pages == 0 || max_pages > MAX_FAST_REG_PAGES {
            return Err(VerbError::InvalidAttr);
        }
        self.install_mr(pd, mr_weight(max_pages as usize), |key| Mr {
            key,
            pd,
            access: Access::default(),
            iova: 0,
            length: 0,
            page_shift: MIN_PAGE_SIZE.trailing_zeros(),
            pages: Vec::with_capacity(max_pages as usize),
            identity: false,
            windows: 0,
            odp: None,
            fast: Some(FastMr {
                max_pages,
                valid: false,
            }),
        })
    }

    /// The fast-registration MR at the index of `key`, whatever its key byte
    /// and state (for deregistration by the owner, whose idea of the key byte
    /// may be older than a REG_MR that failed).
    pub fn fast_mr_at(&self, key: u32) -> Option<&Mr> {
        self.mr_at(key_index(key)).filter(|m| m.fast.is_some())
    }

    /// Executes a REG_MR work request of a QP in `pd` (MP-08). Checks, all
    /// before anything changes: the index of `r.key` names a fast-registration
    /// MR, in the QP's PD, in the free state; the rights are ones this engine
    /// implements, remote write and atomic with local write (MP-04); at most
    /// the MR's `max_pages` pages, read from `r.page_list` in `mem`, that
    /// cover exactly `[iova, iova + length)` (MP-03). Then the MR is valid
    /// under `r.key`: its old key fails from now on.
    pub fn fast_reg(
        &mut self,
        pd: Handle,
        r: &FastReg,
        mem: &dyn Memory,
    ) -> Result<(), FastRegError> {
        let index = key_index(r.key);
        let mr = self.fast_mr_at(r.key).ok_or(FastRegError::NoSuchMr)?;
        let fast = mr.fast.ok_or(FastRegError::NoSuchMr)?;
        if mr.pd != pd {
            return Err(FastRegError::PdMismatch);
        }
        if fast.valid {
            return Err(FastRegError::NotFree);
        }
        let a = r.access;
        let remote_w = a.contains(Access::REMOTE_WRITE) || a.contains(Access::REMOTE_ATOMIC);
        if a.0 & !SUPPORTED_ACCESS != 0 || (remote_w && !a.contains(Access::LOCAL_WRITE)) {
            return Err(FastRegError::BadAccess);
        }
        if r.npages > fast.max_pages {
            return Err(FastRegError::TooManyPages);
        }
        let shift = u32::from(r.page_shift);
        if !(MIN_PAGE_SIZE.trailing_zeros()..=MAX_PAGE_SIZE.trailing_zeros()).contains(&shift) {
            return Err(FastRegError::BadTranslation);
        }
        // The MR's own page vector (its capacity was charged at allocation)
        // takes the list; it goes back empty if a check fails.
        let slot = self.slot_mut(index).ok_or(FastRegError::NoSuchMr)?;
        let mr = slot.mr.as_mut().ok_or(FastRegError::NoSuchMr)?;
        let mut pages = std::mem::take(&mut mr.pages);
        pages.clear();
        let read = read_page_list(mem, r.page_list, r.npages, &mut pages);
        let t = Translation {
            iova: r.iova,
            length: r.length,
            page_size: 1 << shift,
            pages,
        };
        let checked = match read {
            Ok(()) => check_translation(&t).map_err(|_| FastRegError::BadTranslation),
            Err(e) => Err(e),
        };
        let mut pages = t.pages;
        if let Err(e) = checked {
            pages.clear();
            mr.pages = pages;
            return Err(e);
        }
        mr.pages = pages;
        mr.key = r.key;
        mr.access = a;
        mr.iova = r.iova;
        mr.length = r.length;
        mr.page_shift = shift;
        mr.fast = Some(FastMr {
            valid: true,
            ..fast
        });
        slot.key_byte = key_byte(r.key);
        Ok(())
    }

    /// A local or remote invalidate of `rkey` when its index holds a
    /// fast-registration MR (MP-08; o9-5.2.2): `None` when it holds none (the
    /// caller goes on with windows). The key must be the MR's current one (1),
    /// the MR in the QP's PD (5), with no window bound to it (its windows keep
    /// its translation, MP-06); a valid MR goes free, a free one stays free
    /// (o9-5.2.2 note: invalidating a free key changes nothing).
    pub(super) fn invalidate_fast_mr(
        &mut self,
        pd: Handle,
        rkey: u32,
    ) -> Option<Result<(), MwError>> {
        let mr = self.fast_mr_at(rkey)?;
        if mr.key != rkey {
            return Some(Err(MwError::StaleKey));
        }
        if mr.pd != pd {
            return Some(Err(MwError::PdMismatch));
        }
        if mr.windows != 0 {
            return Some(Err(MwError::MrHasWindows));
        }
        let mr = self.slot_mut(key_index(rkey))?.mr.as_mut()?;
        if let Some(f) = mr.fast.as_mut() {
            f.valid = false;
        }
        Some(Ok(()))
    }
}

/// The pages an MR's budget charge counts: a fast-registration MR's room
/// (charged whole at allocation), any other MR's page list.
pub(super) fn charged_pages(mr: &Mr) -> usize {
    mr.fast.map_or(mr.pages.len(), |f| f.max_pages as usize)
}

/// Reads `n` little-endian page addresses at `addr` into `pages` (empty, with
/// room for them): one read of the whole list, in pieces of at most 512 entries
/// so that no buffer beyond the MR's own vector is needed.
fn read_page_list(
    mem: &dyn Memory,
    addr: u64,
    n: u32,
    pages: &mut Vec<u64>,
) -> Result<(), FastRegError> {
    let mut buf = [0u8; 4096];
    let mut at = addr;
    let mut left = n as usize;
    while left > 0 {
        let k = left.min(buf.len() / 8);
        let chunk = &mut buf[..k * 8];
        mem.read(at, chunk).map_err(|_| FastRegError::PageList)?;
        pages.extend(
            chunk
                .chunks_exact(8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        );
        at = at
            .checked_add(chunk.len() as u64)
            .ok_or(FastRegError::PageList)?;
        left -= k;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;
    use crate::memory::VecMemory;
    use crate::verbs::{MwBind, MwType};

    const BASE: u64 = 0x10_0000;
    const LIST: u64 = BASE + 0x8000;
    const RW: Access =
        Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

    /// Two pages at BASE and BASE + 0x3000, listed at LIST.
    fn mem() -> VecMemory {
        let mut m = VecMemory::new(BASE, 0x10000);
        m.write(LIST, &BASE.to_le_bytes()).unwrap();
        m.write(LIST + 8, &(BASE + 0x3000).to_le_bytes()).unwrap();
        m
    }

    fn reg(key: u32, access: Access) -> FastReg {
        FastReg {
            key,
            access,
            iova: 0x5000_0100,
            length: 0x1000,
            page_shift: 12,
            page_list: LIST,
            npages: 2,
        }
    }

    fn next(key: u32) -> u32 {
        (key & !0xff) | (key.wrapping_add(1) & 0xff)
    }

    #[test]
    fn mp_08_alloc_bounds_budget_and_dereg_by_index() {
        let mut t = MrTable::new(4, 8);
        let b = Budget::new(1 << 20);
        t.set_budget(&b);
        let pd = t.alloc_pd().unwrap();
        assert_eq!(t.alloc_fast_mr(pd, 0), Err(VerbError::InvalidAttr));
        assert_eq!(
            t.alloc_fast_mr(pd, MAX_FAST_REG_PAGES + 1),
            Err(VerbError::InvalidAttr)
        );
        assert_eq!(t.alloc_fast_mr(pd + 9, 4), Err(VerbError::InvalidPd));
        // Past the budget: refused before anything is taken.
        let small = Budget::new(mr_weight(3));
        let mut t2 = MrTable::new(4, 8);
        t2.set_budget(&small);
        let pd2 = t2.alloc_pd().unwrap();
        assert_eq!(
            t2.alloc_fast_mr(pd2, 4),
            Err(VerbError::InsufficientResources)
        );
        assert_eq!(t2.mr_count(), 0);

        let k = t.alloc_fast_mr(pd, 4).unwrap();
        assert_eq!(b.used(), mr_weight(4));
        assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
        // Free: no access, no rereg.
        assert!(t.mr(k).is_none());
        assert_eq!(
            t.lookup(k).err(),
            Some(super::super::AccessError::Invalidated)
        );
        let m = mem();
        let k1 = next(k);
        t.fast_reg(pd, &reg(k1, RW), &m).unwrap();
        assert_eq!(t.mr(k1).unwrap().pages(), &[BASE, BASE + 0x3000]);
        assert_eq!(
            t.rereg_mr(k1, super::super::Rereg::default()),
            Err(VerbError::InvalidHandle)
        );
        // The budget did not move: the list went into the room charged.
        assert_eq!(b.used(), mr_weight(4));
        // Deregistered by the key ALLOC gave (an older key byte).
        t.dereg_mr(k).unwrap();
        assert_eq!(b.used(), 0);
        assert!(t.fast_mr_at(k1).is_none());
        t.dealloc_pd(pd).unwrap();
    }

    #[test]
    fn mp_08_invalidate_rules() {
        let mut t = MrTable::new(4, 8);
        let pd = t.alloc_pd().unwrap();
        let other = t.alloc_pd().unwrap();
        let k = t.alloc_fast_mr(pd, 2).unwrap();
        // A free MR under its current key: nothing to do (o9-5.2.2 note).
        assert_eq!(t.invalidate(pd, 1, k), Ok(()));
        let m = mem();
        let access = Access(RW.0 | Access::MW_BIND.0);
        let k1 = next(k);
        t.fast_reg(pd, &reg(k1, access), &m).unwrap();
        assert_eq!(t.invalidate(pd, 1, k), Err(MwError::StaleKey));
        assert_eq!(t.invalidate(other, 1, k1), Err(MwError::PdMismatch));
        // A window bound to it keeps it valid (MP-06).
        let mw = t.alloc_mw(pd, MwType::Type2).unwrap();
        let w = MwBind {
            mw_rkey: mw,
            new_rkey: next(mw),
            mr_lkey: k1,
            addr: 0x5000_0100,
            length: 16,
            access: Access::REMOTE_READ,
        };
        t.bind_mw(pd, 1, &w).unwrap();
        assert_eq!(t.invalidate(pd, 1, k1), Err(MwError::MrHasWindows));
        t.invalidate(pd, 1, next(mw)).unwrap();
        assert_eq!(t.invalidate(pd, 1, k1), Ok(()));
        assert!(t.mr(k1).is_none());
        // A window cannot be bound to it while it is free.
        let w2 = MwBind {
            new_rkey: next(next(mw)),
            mw_rkey: next(mw),
            ..w
        };
        assert_eq!(t.bind_mw(pd, 1, &w2), Err(MwError::NoSuchMr));
        // An MR registered by the command is still not invalidatable (o9-5.2.2 3).
        let r = t.reg_mr(pd, 0, 4096, RW, 4096, vec![BASE]).unwrap();
        assert_eq!(t.invalidate(pd, 1, r), Err(MwError::NotInvalidatable));
    }

    #[test]
    fn mp_08_failed_reg_leaves_the_mr_free_and_empty() {
        let mut t = MrTable::new(4, 8);
        let pd = t.alloc_pd().unwrap();
        let k = t.alloc_fast_mr(pd, 2).unwrap();
        let m = mem();
        let bad_list = FastReg {
            page_list: BASE + 0x10000 - 8,
            ..reg(next(k), RW)
        };
        assert_eq!(t.fast_reg(pd, &bad_list, &m), Err(FastRegError::PageList));
        let short = FastReg {
            length: 0x2000,
            ..reg(next(k), RW)
        };
        assert_eq!(
            t.fast_reg(pd, &short, &m),
            Err(FastRegError::BadTranslation)
        );
        let mr = t.fast_mr_at(k).unwrap();
        assert_eq!((mr.key(), mr.fast().unwrap().valid), (k, false));
        assert!(mr.pages().is_empty());
        assert_eq!(FastRegError::PageList.status(), WcStatus::LocQpOpErr);
        assert_eq!(FastRegError::NotFree.status(), WcStatus::LocProtErr);
    }
}
