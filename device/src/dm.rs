//! Device memory (issue 29 item 2; `ibv_alloc_dm`): `CAP_DM_SIZE` bytes of
//! BAR4 at `abi::ident::bar::DM_OFFSET`, shared memory the guest maps and the
//! device reads and writes for MRs registered over it (REG_MR
//! `VHCA_REG_MR_F_DM`).
//!
//! The engine sees device memory through its one [`Memory`] (it only knows
//! physical addresses): DM byte `o` is the address [`DM_WINDOW`]` + o`, a
//! window no guest-physical address reaches, and the device's memory
//! ([`crate::glue::GuestMem`]) sends an access there to the DM bytes instead
//! of guest RAM, refused unless it lies wholly inside them. A DM MR is a
//! linear translation onto the window (`transport::mr::MrTable::reg_linear_mr`),
//! so its bounds are checked by the engine as any MR's and the window's by the
//! memory: nothing reaches past the DM bytes whatever the key or page list.
//!
//! [`Memory`]: transport::memory::Memory

/// The engine's address of DM byte 0: 2^63, above every guest-physical
/// address (x86-64 and arm64 have at most 52 address bits), so never guest
/// RAM, and with room for any DM size below 2^63 without overflow.
pub const DM_WINDOW: u64 = 1 << 63;

/// The engine's address of DM byte `offset` for a range of `len` bytes that
/// lies inside `size` bytes of device memory; `None` if it does not.
pub fn window_addr(offset: u64, len: u64, size: u64) -> Option<u64> {
    let end = offset.checked_add(len)?;
    (end <= size).then_some(DM_WINDOW + offset)
}

/// Where the access `[addr, addr + len)` goes: `None` for guest RAM (below
/// the window), `Some(Ok(offset))` for DM byte `offset` when the whole
/// access lies inside `size` bytes of device memory, `Some(Err(()))` for an
/// access to the window that does not (or that wraps).
pub fn locate(addr: u64, len: u64, size: u64) -> Option<Result<u64, ()>> {
    let offset = addr.checked_sub(DM_WINDOW)?;
    Some(match offset.checked_add(len) {
        Some(end) if end <= size => Ok(offset),
        _ => Err(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_access_to_the_window_is_inside_the_dm_bytes_or_refused() {
        let size = 0x4_0000;
        assert_eq!(locate(0x1000, 8, size), None, "guest RAM");
        assert_eq!(locate(DM_WINDOW, 8, size), Some(Ok(0)));
        assert_eq!(locate(DM_WINDOW + size - 8, 8, size), Some(Ok(size - 8)));
        assert_eq!(locate(DM_WINDOW + size - 7, 8, size), Some(Err(())));
        assert_eq!(locate(DM_WINDOW + size, 0, size), Some(Ok(size)));
        assert_eq!(locate(u64::MAX, 2, size), Some(Err(())), "wraps");
        assert_eq!(locate(DM_WINDOW, 1, 0), Some(Err(())), "no DM");
        assert_eq!(window_addr(0x100, 0x100, size), Some(DM_WINDOW + 0x100));
        assert_eq!(window_addr(size - 4, 8, size), None);
        assert_eq!(window_addr(u64::MAX, 2, size), None);
    }
}
