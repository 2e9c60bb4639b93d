//! Memory windows (IBA 10.6.7, seed 003 "Memory Window"; MP-06 type 1, MP-07
//! types 2A and 2B): the window itself, why a bind or invalidate fails, and the table's
//! verbs for windows. A window takes a key index of the MR key space (an index
//! holds an MR or a window), so these are methods of [`MrTable`].

use crate::verbs::{Access, Handle, MwBind, MwType, VerbError, WcStatus};

use super::{key_byte, key_index, MrTable};

/// A memory window (IBA 10.6.7, seed 003 "Memory Window"; MP-06 type 1,
/// MP-07 types 2A and 2B): an R_Key onto a range of an MR, with its own remote rights.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mw {
    pub(super) key: u32,
    pub(super) pd: Handle,
    pub(super) ty: MwType,
    pub(super) bound: Option<MwBinding>,
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
    /// Invalidate of a fast-registration MR under a key that is not its
    /// current one (o9-5.2.2 1; MP-08).
    #[error("key byte is not the memory region's current one")]
    StaleKey,
    /// Invalidate of a fast-registration MR that memory windows are bound to
    /// (they keep its translation, MP-06).
    #[error("memory region has memory windows bound")]
    MrHasWindows,
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

impl MrTable {
    // ---- memory windows (MP-06 type 1, MP-07 types 2A/2B; IBA 10.6.7, seed 003) ----

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
    ///   becomes associated with this QP (type 2A) or this QP and PD (type
    ///   2B; the PD is the QP's, checked above);
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
        if ty.is_type2() {
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
            qpn: ty.is_type2().then_some(qpn),
        };
        self.set_window(index, b.new_rkey, Some(binding));
        Ok(())
    }

    /// Invalidates R_Key `rkey` for QP `qpn` in `pd`: a LOCAL_INV work request
    /// (seed 003 "Local Invalidate") or a received SEND with Invalidate (IBA
    /// 9.4.1.1.3, o9-5.2.2; OP-03). Valid only for a type 2 window under its
    /// current key, which goes to the free state: the key no longer grants
    /// access, the window keeps its index and key until the next bind. A bound
    /// type 2A window must be bound to this QP (o9-5.2.2 7: its association is
    /// the QP alone), a bound type 2B window to this QP and PD (8). A free
    /// type 2 window of the same PD is left as it is (o9-5.2.2 note:
    /// invalidating a free key changes nothing), of another PD refused (9).
    /// An MR key (o9-5.2.2 3), a type 1 window (6) or a stale key (1) is
    /// refused. The same rules serve LOCAL_INV: a consumer invalidates only
    /// what a remote peer of its QP could.
    ///
    /// A fast-registration MR's key is invalidated by
    /// [`invalidate_fast_mr`](Self::invalidate_fast_mr) (MP-08).
    pub fn invalidate(&mut self, pd: Handle, qpn: u32, rkey: u32) -> Result<(), MwError> {
        if let Some(r) = self.invalidate_fast_mr(pd, rkey) {
            return r;
        }
        let index = key_index(rkey);
        if self.lookup(rkey).is_ok() {
            return Err(MwError::NotInvalidatable);
        }
        let mw = self.mw(rkey).ok_or(MwError::NoSuchWindow)?;
        match (mw.ty, mw.bound) {
            (MwType::Type1, _) => Err(MwError::NotInvalidatable),
            (_, None) if mw.pd != pd => Err(MwError::PdMismatch),
            (_, None) => Ok(()),
            (_, Some(b)) if b.qpn != Some(qpn) => Err(MwError::WrongQp),
            (MwType::Type2, Some(_)) if mw.pd != pd => Err(MwError::PdMismatch),
            (_, Some(b)) => {
                self.drop_window_ref(b.mr_key);
                self.set_window(index, rkey, None);
                Ok(())
            }
        }
    }

    /// Number of type 2A windows bound to QP `qpn`: while any is, the QP
    /// cannot be destroyed (seed 003 "Type 2A"; MP-07).
    pub fn type2a_windows_of(&self, qpn: u32) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.mw.as_ref())
            .filter(|m| m.ty == MwType::Type2A && m.bound.is_some_and(|b| b.qpn == Some(qpn)))
            .count()
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
}
