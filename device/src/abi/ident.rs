//! Who the device is on the PCI bus, which ABI it speaks, and where its BARs and
//! MSI-X structures are (ARCHITECTURE.md §4, §5).

use super::layout::{Entry, Section};

abi_consts! {
    /// Identity of the PCI function and of the ABI.
    pub mod ident: u32 = "VHCA" {
        /// Experimental vendor ID, as QEMU's `edu` device uses: never a real HCA
        /// vendor's, so that mlx4/mlx5 never bind (ARCHITECTURE.md §4). In-tree Linux
        /// claims only 0x1234:0x1111 (bochs-drm); QEMU's edu (0x11e8) has no driver.
        PCI_VENDOR_ID = 0x1234,
        /// Device ID: "1b" for InfiniBand, "ca" for channel adapter. No in-tree
        /// driver matches 0x1234:0x1bca (checked against Linux's PCI ID tables and
        /// QEMU's docs/specs/pci-ids.rst; the guest image should also check its own
        /// modules.alias).
        PCI_DEVICE_ID = 0x1bca,
        /// Subsystem vendor: QEMU's (Red Hat / Qumranet) for emulated devices.
        PCI_SUBSYSTEM_VENDOR_ID = 0x1af4,
        /// Subsystem ID QEMU uses for emulated hardware devices (pci-ids.rst).
        PCI_SUBSYSTEM_ID = 0x1100,
        /// Class code (base, sub, prog-if): serial bus controller, InfiniBand.
        PCI_CLASS = 0x0c0600,
        /// PCI revision; the ABI version below is what matters.
        PCI_REVISION = 0x01,
        /// ABI version: major << 16 | minor. A driver binds only to a device with
        /// the same major and a minor at least its own; minors only append fields
        /// to mailbox structs and add opcodes. Major 2: the RoCEv2 port (the
        /// address vector grew a destination MAC, WF-10). Major 3: the doorbell
        /// summary (slots start at 16; a producer index needs its summary bit)
        /// and fast-registration MRs (MP-08: REG_MR's FAST flag, the REG_MR
        /// WQE, DeviceAttr's max_fast_reg_pages). Minor 1: UD multicast
        /// (ATTACH_MCAST, DETACH_MCAST, DeviceAttr's max_mcast_*; AD-08).
        /// Minor 2: XRC (ALLOC/DEALLOC_XRCD, CreateSrqIn's XRC fields,
        /// CreateQpIn's xrcdn, the send WQE's XRC segment, the CQE's srqn;
        /// SR-02), memory windows of type 2A (MP-07), QueryPortOut's
        /// max_vl_num (AD-06), the alternate path in ModifyQpIn / QueryQpOut
        /// (AD-10) and new counter names: each in reserved bytes or appended.
        /// Minor 3: the address vector's pkey_index (reserved bytes before),
        /// a GSI send WQE's P_Key index (AD-05, PV-03).
        /// Minor 4: Reliable Datagram (AD-11: ALLOC/DEALLOC_RDD,
        /// CREATE/MODIFY/QUERY/DESTROY_EEC, QP type RD with its RDD in
        /// CreateQpIn's xrcdn, the send WQE's RD segment).
        /// Minor 5: the SMA's MAD_IFC (AD-09). Minor 6: SET_PORT_CAPS and
        /// SET_NODE_DESC (the guest's capability bits and node description
        /// in the SMA). Minor 7: on-demand paging (issue 29: REG_MR's ODP
        /// flag, MAP_ODP, UNMAP_ODP, ODP_FAULT_FAIL, the PAGE_FAULT EQE,
        /// DeviceAttr's odp_caps in reserved bytes).
        ABI_VERSION = 0x0003_0007,
        /// Value of the MAGIC register: the bytes "VHCA" read as a little-endian
        /// u32, so a BAR that is not ours (or all-ones after a surprise removal)
        /// is told apart at once.
        MAGIC = 0x4143_4856,
    }
}

abi_consts! {
    /// BARs and MSI-X placement.
    pub mod bar: u32 = "VHCA" {
        /// BAR0: registers, the context window and the MSI-X table and PBA.
        /// Trapped: every access is a vfio-user round trip (ARCHITECTURE.md §4, §5), so
        /// only the control path touches it.
        BAR0_INDEX = 0,
        /// 64 KiB: registers below 0x1000, the context window at 0x1000, MSI-X at
        /// 0x8000 and 0x9000.
        BAR0_SIZE = 0x1_0000,
        /// BAR2: doorbell pages (UARs), memfd-backed and mapped into the guest
        /// with a sparse mmap, so a doorbell store never exits the VM (ARCHITECTURE.md
        /// §4). 64-bit, prefetchable: it is plain memory the device polls.
        BAR2_INDEX = 2,
        /// BAR4: the WAKE page, 4 KiB, trapped. A 32-bit store of any value at
        /// any 4-aligned offset wakes the device, like BAR0 WAKE; it holds
        /// nothing else, so the kernel can map it into user contexts (BAR0 holds
        /// RESET and the command queue and must stay the kernel's) and a user
        /// provider can ring WAKE without a system call.
        WAKE_BAR_INDEX = 4,
        /// Bytes of the WAKE page at the start of BAR4.
        WAKE_BAR_SIZE = 0x1000,
        /// Device memory (issue 29 item 2): CAP_DM_SIZE bytes at this offset
        /// of BAR4, right after the WAKE page; BAR4 is the smallest power of
        /// two that holds both. Memfd-backed and mapped into the guest with a
        /// sparse mmap like BAR2, so the guest reads and writes it as memory
        /// (the kernel maps allocations of it into user space, `ibv_alloc_dm`);
        /// the device reads and writes the same bytes for an MR registered
        /// over them (REG_MR `VHCA_REG_MR_F_DM`), never outside them. Zeroed by
        /// a PCI reset and when the VM goes, not by DEV_CTRL.RESET. The device
        /// keeps no record of allocations: the driver allocates (4 KiB
        /// granularity, so that each allocation is mapped into one process
        /// only) and zeroes what it hands out.
        DM_OFFSET = 0x1000,
        /// Largest CAP_DM_SIZE (64 MiB): a bound on what `--dm-size` may ask.
        DM_MAX_SIZE = 0x400_0000,
        /// MSI-X table offset in BAR0 (16 bytes per vector; QEMU emulates it).
        MSIX_TABLE_OFFSET = 0x8000,
        /// MSI-X pending-bit array offset in BAR0: 4 KiB after the table, which
        /// holds the largest table (64 vectors, 1 KiB) with room to spare.
        MSIX_PBA_OFFSET = 0x9000,
        /// Fewest MSI-X vectors the device offers: vector 0 and at least seven
        /// completion vectors.
        MSIX_MIN_VECTORS = 8,
        /// Most MSI-X vectors the device offers.
        MSIX_MAX_VECTORS = 64,
        /// Vector of command completions and asynchronous events (EQ 0; ARCHITECTURE.md §4).
        MSIX_VECTOR_ASYNC = 0,
        /// First vector for completion event queues; the rest up to
        /// CAP_MSIX_VECTORS - 1 are theirs too.
        MSIX_VECTOR_FIRST_COMP = 1,
    }
}

/// Identity and BAR placement.
pub fn section() -> Section {
    Section {
        title: "PCI identity, ABI version, BARs and MSI-X",
        entries: vec![Entry::Consts(ident::layout()), Entry::Consts(bar::layout())],
    }
}
