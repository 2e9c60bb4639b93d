//! The 4 KiB PCI Express configuration space, emulated byte by byte.
//!
//! Every byte has a read-write mask and a write-1-to-clear mask; bits in
//! neither are read-only. A guest write therefore never changes an ID, a
//! capability pointer or a size bit, whatever QEMU forwards (ARCHITECTURE.md §5:
//! QEMU forwards the writes it does not emulate itself).

use std::ops::Range;

/// Size of a PCI Express function's configuration space.
pub const CONFIG_SIZE: usize = 4096;

/// Offsets of the type 0 header registers (PCI Local Bus 3.0, §6.1).
pub mod reg {
    pub const VENDOR_ID: usize = 0x00;
    pub const DEVICE_ID: usize = 0x02;
    pub const COMMAND: usize = 0x04;
    pub const STATUS: usize = 0x06;
    pub const REVISION_ID: usize = 0x08;
    /// Programming interface, subclass, base class (low to high).
    pub const CLASS_CODE: usize = 0x09;
    pub const CACHE_LINE_SIZE: usize = 0x0c;
    pub const HEADER_TYPE: usize = 0x0e;
    pub const BAR0: usize = 0x10;
    pub const SUBSYSTEM_VENDOR_ID: usize = 0x2c;
    pub const SUBSYSTEM_ID: usize = 0x2e;
    pub const CAPABILITIES_POINTER: usize = 0x34;
    pub const INTERRUPT_LINE: usize = 0x3c;
    pub const INTERRUPT_PIN: usize = 0x3d;
    /// First byte after the header: capabilities live in 0x40..0x100.
    pub const HEADER_END: usize = 0x40;
    /// Start of the extended configuration space (PCIe only).
    pub const EXTENDED: usize = 0x100;
}

/// Command register bits (PCI Local Bus 3.0, §6.2.2).
pub mod command {
    pub const MEMORY_SPACE: u16 = 1 << 1;
    pub const BUS_MASTER: u16 = 1 << 2;
    pub const PARITY_ERROR_RESPONSE: u16 = 1 << 6;
    pub const SERR_ENABLE: u16 = 1 << 8;
    pub const INTX_DISABLE: u16 = 1 << 10;
}

/// Status register bits.
pub mod status {
    pub const CAPABILITIES_LIST: u16 = 1 << 4;
    pub const MASTER_DATA_PARITY_ERROR: u16 = 1 << 8;
    pub const SIGNALED_TARGET_ABORT: u16 = 1 << 11;
    pub const RECEIVED_TARGET_ABORT: u16 = 1 << 12;
    pub const RECEIVED_MASTER_ABORT: u16 = 1 << 13;
    pub const SIGNALED_SYSTEM_ERROR: u16 = 1 << 14;
    pub const DETECTED_PARITY_ERROR: u16 = 1 << 15;
    /// The error bits software clears by writing 1.
    pub const W1C: u16 = MASTER_DATA_PARITY_ERROR
        | SIGNALED_TARGET_ABORT
        | RECEIVED_TARGET_ABORT
        | RECEIVED_MASTER_ABORT
        | SIGNALED_SYSTEM_ERROR
        | DETECTED_PARITY_ERROR;
}

/// Configuration space contents with their write masks, plus the power-on
/// contents that a reset restores.
#[derive(Clone)]
pub(crate) struct ConfigSpace {
    bytes: Box<[u8; CONFIG_SIZE]>,
    rw: Box<[u8; CONFIG_SIZE]>,
    w1c: Box<[u8; CONFIG_SIZE]>,
    initial: Box<[u8; CONFIG_SIZE]>,
}

impl ConfigSpace {
    /// All zero and read-only.
    pub(crate) fn new() -> ConfigSpace {
        ConfigSpace {
            bytes: Box::new([0; CONFIG_SIZE]),
            rw: Box::new([0; CONFIG_SIZE]),
            w1c: Box::new([0; CONFIG_SIZE]),
            initial: Box::new([0; CONFIG_SIZE]),
        }
    }

    /// Defines a register while the function is built: its value, which bits
    /// the guest may write and which it clears by writing 1. `N` is the
    /// register width in bytes; the register must lie inside the space (the
    /// builder's own offsets, never guest input).
    pub(crate) fn define<const N: usize>(&mut self, offset: usize, value: u64, rw: u64, w1c: u64) {
        let value = value.to_le_bytes();
        let rw = rw.to_le_bytes();
        let w1c = w1c.to_le_bytes();
        for i in 0..N {
            self.bytes[offset + i] = value[i];
            self.initial[offset + i] = value[i];
            self.rw[offset + i] = rw[i];
            self.w1c[offset + i] = w1c[i];
        }
    }

    /// Reads `data.len()` bytes at `offset`. Bytes past the end read as 0xff,
    /// as a read that nobody claims does on a PCI bus.
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            *byte = offset
                .checked_add(i as u64)
                .and_then(|o| usize::try_from(o).ok())
                .and_then(|o| self.bytes.get(o).copied())
                .unwrap_or(0xff);
        }
    }

    /// Applies a guest write through the masks and returns the byte range it
    /// covered inside the space (empty if none), so the caller can act on
    /// registers with side effects.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Range<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(CONFIG_SIZE);
        let end = start.saturating_add(data.len()).min(CONFIG_SIZE);
        for (at, &value) in (start..end).zip(data) {
            let old = self.bytes[at];
            let kept = (old & !self.rw[at]) | (value & self.rw[at]);
            self.bytes[at] = kept & !(value & self.w1c[at]);
        }
        start..end
    }

    /// Restores the power-on contents (DEVICE_RESET, disconnect).
    pub(crate) fn reset(&mut self) {
        *self.bytes = *self.initial;
    }

    #[cfg(test)]
    pub(crate) fn u8(&self, offset: usize) -> u8 {
        self.bytes[offset]
    }

    pub(crate) fn u16(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.bytes[offset], self.bytes[offset + 1]])
    }

    /// Overwrites a register without the masks: for the function's own
    /// corrections after a guest write (an unsupported power state).
    pub(crate) fn set_u16(&mut self, offset: usize, value: u16) {
        self.bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
    }
}

impl std::fmt::Debug for ConfigSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigSpace").finish_non_exhaustive()
    }
}

/// Whether two byte ranges share a byte.
pub(crate) fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_bytes_ignore_writes() {
        let mut c = ConfigSpace::new();
        c.define::<2>(reg::VENDOR_ID, 0x1234, 0, 0);
        c.write(0, &[0xff, 0xff]);
        assert_eq!(c.u16(reg::VENDOR_ID), 0x1234);
    }

    #[test]
    fn masked_bits_mix_old_and_new() {
        let mut c = ConfigSpace::new();
        c.define::<2>(reg::COMMAND, 0x0000, 0x0006, 0);
        c.write(reg::COMMAND as u64, &0xffffu16.to_le_bytes());
        assert_eq!(c.u16(reg::COMMAND), 0x0006);
    }

    #[test]
    fn write_one_clears_and_write_zero_keeps() {
        let mut c = ConfigSpace::new();
        c.define::<2>(reg::STATUS, 0x3010, 0, 0x3000);
        c.write(reg::STATUS as u64, &0x0000u16.to_le_bytes());
        assert_eq!(c.u16(reg::STATUS), 0x3010);
        c.write(reg::STATUS as u64, &0x1010u16.to_le_bytes());
        assert_eq!(c.u16(reg::STATUS), 0x2010);
    }

    #[test]
    fn accesses_past_the_end_read_ones_and_write_nothing() {
        let mut c = ConfigSpace::new();
        let mut buf = [0u8; 4];
        c.read(CONFIG_SIZE as u64 - 2, &mut buf);
        assert_eq!(buf, [0, 0, 0xff, 0xff]);
        c.read(u64::MAX, &mut buf);
        assert_eq!(buf, [0xff; 4]);
        assert!(c.write(u64::MAX, &[1, 2]).is_empty());
        assert_eq!(c.write(CONFIG_SIZE as u64 - 1, &[1, 2]), 4095..4096);
    }

    #[test]
    fn reset_restores_defined_values() {
        let mut c = ConfigSpace::new();
        c.define::<1>(reg::CACHE_LINE_SIZE, 0, 0xff, 0);
        c.write(reg::CACHE_LINE_SIZE as u64, &[0x10]);
        assert_eq!(c.u8(reg::CACHE_LINE_SIZE), 0x10);
        c.reset();
        assert_eq!(c.u8(reg::CACHE_LINE_SIZE), 0);
    }
}
