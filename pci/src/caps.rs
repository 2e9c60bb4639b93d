//! Capability structures in configuration space: PCI Express, Power
//! Management and MSI-X. Each function writes one structure and its masks;
//! the builder chains them (`next`) in 0x40..0x100.
//!
//! QEMU drops a vfio device's PCIe-ness unless config space carries a PCI
//! Express capability (ARCHITECTURE.md §5), so the builder adds one by default.

use crate::config::ConfigSpace;

/// Capability IDs (PCI Local Bus 3.0, appendix H).
pub mod id {
    pub const POWER_MANAGEMENT: u8 = 0x01;
    pub const PCI_EXPRESS: u8 = 0x10;
    pub const MSIX: u8 = 0x11;
}

/// PCI Express capability, version 2: through Slot Status 2.
pub const PCIE_SIZE: usize = 0x3c;
/// Power Management capability.
pub const PM_SIZE: usize = 8;
/// MSI-X capability.
pub const MSIX_SIZE: usize = 12;

/// Register offsets inside the PCI Express capability (PCIe Base 3.0, §7.8).
pub mod pcie {
    pub const CAPABILITIES: usize = 0x02;
    pub const DEVICE_CAPABILITIES: usize = 0x04;
    pub const DEVICE_CONTROL: usize = 0x08;
    pub const DEVICE_STATUS: usize = 0x0a;
    pub const LINK_CAPABILITIES: usize = 0x0c;
    pub const LINK_CONTROL: usize = 0x10;
    pub const LINK_STATUS: usize = 0x12;
    pub const DEVICE_CAPABILITIES_2: usize = 0x24;
    pub const DEVICE_CONTROL_2: usize = 0x28;
    pub const LINK_CAPABILITIES_2: usize = 0x2c;
    pub const LINK_CONTROL_2: usize = 0x30;
    /// Capability version 2, device/port type 0 (PCI Express endpoint).
    pub const VERSION_2_ENDPOINT: u16 = 0x0002;
}

/// Register offsets inside the Power Management capability (PCI PM 1.2, §3.2).
pub mod pm {
    pub const PMC: usize = 0x02;
    pub const PMCSR: usize = 0x04;
    /// Power state field of PMCSR: D0 = 0, D3hot = 3.
    pub const STATE_MASK: u16 = 0x0003;
    /// Going D3hot to D0 keeps the function's state: no internal reset.
    pub const NO_SOFT_RESET: u16 = 1 << 3;
}

/// Register offsets and bits of the MSI-X capability (PCI Local Bus 3.0, §6.8.2).
pub mod msix {
    pub const CONTROL: usize = 0x02;
    pub const TABLE: usize = 0x04;
    pub const PBA: usize = 0x08;
    pub const ENABLE: u16 = 1 << 15;
    pub const FUNCTION_MASK: u16 = 1 << 14;
    /// Table size minus one.
    pub const TABLE_SIZE_MASK: u16 = 0x07ff;
}

/// Writes the capability header: ID and pointer to the next one.
fn header(c: &mut ConfigSpace, at: usize, cap_id: u8, next: u8) {
    c.define::<1>(at, cap_id.into(), 0, 0);
    c.define::<1>(at + 1, next.into(), 0, 0);
}

/// A PCI Express endpoint, capability version 2, on a 2.5 GT/s x1 link.
/// Only the control bits software is entitled to change are writable; the
/// link and slot fields are informational for a virtual function.
pub(crate) fn write_pcie(c: &mut ConfigSpace, at: usize, next: u8) {
    header(c, at, id::PCI_EXPRESS, next);
    c.define::<2>(
        at + pcie::CAPABILITIES,
        pcie::VERSION_2_ENDPOINT.into(),
        0,
        0,
    );
    // Max payload 256 B (1), extended tag (bit 5), unlimited L0s/L1
    // acceptable latency (bits 6-11), role-based error reporting (bit 15).
    c.define::<4>(at + pcie::DEVICE_CAPABILITIES, 0x0000_8fe1, 0, 0);
    // Writable: error reporting enables (0-3), relaxed ordering (4), max
    // payload (5-7), extended tag (8), no snoop (11), max read request
    // (12-14). Default: relaxed ordering, no snoop, 512 B read requests.
    c.define::<2>(at + pcie::DEVICE_CONTROL, 0x2810, 0x79ff, 0);
    // Error detected bits (0-3) are write-1-to-clear.
    c.define::<2>(at + pcie::DEVICE_STATUS, 0, 0, 0x000f);
    // 2.5 GT/s, x1, no ASPM, port 0.
    c.define::<4>(at + pcie::LINK_CAPABILITIES, 0x0000_0011, 0, 0);
    // ASPM control (0-1), read completion boundary (3), common clock (6),
    // extended synch (7).
    c.define::<2>(at + pcie::LINK_CONTROL, 0, 0x00cb, 0);
    // Current speed 2.5 GT/s, width x1, slot clock configuration.
    c.define::<2>(at + pcie::LINK_STATUS, 0x1011, 0, 0);
    // Completion timeout disable supported (bit 4), and therefore writable.
    c.define::<4>(at + pcie::DEVICE_CAPABILITIES_2, 0x0000_0010, 0, 0);
    c.define::<2>(at + pcie::DEVICE_CONTROL_2, 0, 0x0010, 0);
    // Supported link speeds vector: 2.5 GT/s.
    c.define::<4>(at + pcie::LINK_CAPABILITIES_2, 0x0000_0002, 0, 0);
    // Target link speed 2.5 GT/s; read-only here, the link never retrains.
    c.define::<2>(at + pcie::LINK_CONTROL_2, 0x0001, 0, 0);
}

/// Power Management 1.2 with D0 and D3hot only, no PME, no soft reset on
/// D3hot to D0 (the guest driver keeps the device's state).
pub(crate) fn write_pm(c: &mut ConfigSpace, at: usize, next: u8) {
    header(c, at, id::POWER_MANAGEMENT, next);
    // Version 3 (PM 1.2); no D1/D2, no PME support, no aux current.
    c.define::<2>(at + pm::PMC, 0x0003, 0, 0);
    c.define::<2>(
        at + pm::PMCSR,
        pm::NO_SOFT_RESET.into(),
        pm::STATE_MASK.into(),
        0,
    );
    // PMCSR_BSE and Data stay zero and read-only.
}

/// MSI-X with `vectors` entries; table and PBA in the given BARs at the
/// given offsets (8-byte aligned: the low 3 bits hold the BAR indicator).
pub(crate) fn write_msix(
    c: &mut ConfigSpace,
    at: usize,
    next: u8,
    vectors: u16,
    bar: u8,
    table_offset: u32,
    pba_offset: u32,
) {
    header(c, at, id::MSIX, next);
    let control = (vectors - 1) & msix::TABLE_SIZE_MASK;
    let writable = msix::ENABLE | msix::FUNCTION_MASK;
    c.define::<2>(at + msix::CONTROL, control.into(), writable.into(), 0);
    c.define::<4>(
        at + msix::TABLE,
        (table_offset | u32::from(bar)).into(),
        0,
        0,
    );
    c.define::<4>(at + msix::PBA, (pba_offset | u32::from(bar)).into(), 0, 0);
}
