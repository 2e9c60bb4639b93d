//! BAR0, the trapped register file (ARCHITECTURE.md §4): identification, capabilities,
//! reset and enable, the command queue and EQ 0, the WAKE register and the
//! read-only context window.

use super::layout::{Entry, Section};

abi_text! {
    /// How BAR0 is used.
    pub const BAR0_RULES = "BAR0 rules. Registers are 32 bits wide at 4-byte aligned offsets; a \
64-bit guest-physical address is a LO/HI pair, which may also be accessed as one aligned \
8-byte access. Reads of unassigned offsets return 0. Writes to read-only registers, to \
unassigned offsets, to the context window, and to configuration registers (CMDQ_*, EQ0_*) \
while DEV_STATUS.ENABLED is set are ignored and counted in IGNORED_WRITES. Every access is \
a vfio-user round trip (~100 us as the guest sees it; ARCHITECTURE.md §5): nothing on the data \
path reads or writes BAR0 except WAKE, and WAKE only when a doorbell page says the device \
is asleep.\n\n\
Bring-up: write DEV_CTRL.RESET and poll DEV_STATUS until READY is set and ENABLED clear; \
check MAGIC and ABI_VERSION; read the CAP_* registers; write DRIVER_ABI, CMDQ_BASE_*, \
CMDQ_LOG2_SIZE, EQ0_BASE_*, EQ0_LOG2_SIZE (both rings zeroed, physically contiguous, \
4 KiB aligned); arm EQ 0 through its doorbell slot (UAR 0, slot VHCA_UAR_EQ0_SLOT); write \
DEV_CTRL.ENABLE; poll DEV_STATUS until ENABLED or FATAL. A FATAL device does nothing until \
RESET; FATAL_SYNDROME says why (enum vhca_fatal).";
}

abi_consts! {
    /// BAR0 register offsets.
    pub mod reg: u32 = "VHCA_REG" {
        /// R: `VHCA_MAGIC`.
        MAGIC = 0x0000,
        /// R: `VHCA_ABI_VERSION` of the device.
        ABI_VERSION = 0x0004,
        /// RW: the driver writes its `VHCA_ABI_VERSION` before ENABLE; a different
        /// major, or a higher minor than the device's, makes ENABLE fail with
        /// FATAL / `VHCA_FATAL_ABI_MISMATCH`.
        DRIVER_ABI = 0x0008,
        /// RW: `VHCA_DEV_CTRL_*` bits.
        DEV_CTRL = 0x000c,
        /// R: `VHCA_DEV_STATUS_*` bits.
        DEV_STATUS = 0x0010,
        /// W: any value wakes the polling device. The driver writes it only after
        /// a doorbell store when its UAR page's `asleep` word is set (see the
        /// doorbell protocol), so an awake device costs no exit.
        WAKE = 0x0014,
        /// R: why DEV_STATUS.FATAL is set (`enum vhca_fatal`).
        FATAL_SYNDROME = 0x0018,
        /// R: writes ignored since reset (read-only registers, the context window,
        /// configuration while enabled).
        IGNORED_WRITES = 0x001c,

        /// R: QPs the device can hold, including QP 1 (GSI).
        CAP_MAX_QP = 0x0100,
        /// R: CQs.
        CAP_MAX_CQ = 0x0104,
        /// R: SRQs.
        CAP_MAX_SRQ = 0x0108,
        /// R: MRs (key index space; IBA 3.5.3: 24-bit index, MP-02).
        CAP_MAX_MR = 0x010c,
        /// R: PDs.
        CAP_MAX_PD = 0x0110,
        /// R: EQs, including EQ 0.
        CAP_MAX_EQ = 0x0114,
        /// R: work requests per SQ or RQ.
        CAP_MAX_QP_WR = 0x0118,
        /// R: SGEs per WQE.
        CAP_MAX_SGE = 0x011c,
        /// R: entries per CQ.
        CAP_MAX_CQE = 0x0120,
        /// R: bytes of inline data per send WQE.
        CAP_MAX_INLINE = 0x0124,
        /// R: UAR pages in BAR2 (BAR2 is this many 4 KiB pages).
        CAP_NUM_UARS = 0x0128,
        /// R: MSI-X vectors (`VHCA_MSIX_MIN_VECTORS`..=`VHCA_MSIX_MAX_VECTORS`).
        CAP_MSIX_VECTORS = 0x012c,
        /// R: largest CMDQ_LOG2_SIZE.
        CAP_MAX_CMDQ_LOG2 = 0x0130,
        /// R: largest log2 of EQ entries (EQ 0 and CREATE_EQ).
        CAP_MAX_EQ_LOG2 = 0x0134,
        /// R: work requests per SRQ.
        CAP_MAX_SRQ_WR = 0x0138,
        /// R: physical ports (1).
        CAP_NUM_PORTS = 0x013c,
        /// R: `VHCA_DEV_CAP_*` bits.
        CAP_FLAGS = 0x0140,
        /// R: bytes of device memory (issue 29 item 2): BAR4 holds them at
        /// `VHCA_DM_OFFSET`, a multiple of 4 KiB, at most `VHCA_DM_MAX_SIZE`;
        /// 0: the device has none (a device before this register reads 0
        /// too). REG_MR with `VHCA_REG_MR_F_DM` registers a range of them.
        CAP_DM_SIZE = 0x0144,

        /// RW: command ring guest-physical base, low half (4 KiB aligned).
        CMDQ_BASE_LO = 0x0200,
        /// RW: command ring guest-physical base, high half.
        CMDQ_BASE_HI = 0x0204,
        /// RW: log2 of command slots (1..=CAP_MAX_CMDQ_LOG2).
        CMDQ_LOG2_SIZE = 0x0208,
        /// W: producer doorbell. The driver writes its free-running producer
        /// index (commands posted) after setting OWNER in every new slot.
        CMDQ_PI = 0x020c,
        /// R: the device's free-running consumer index (commands completed).
        CMDQ_CI = 0x0210,

        /// RW: EQ 0 ring guest-physical base, low half (4 KiB aligned). EQ 0 takes
        /// command-done events and every asynchronous event, on vector 0.
        EQ0_BASE_LO = 0x0220,
        /// RW: EQ 0 ring guest-physical base, high half.
        EQ0_BASE_HI = 0x0224,
        /// RW: log2 of EQ 0 entries (1..=CAP_MAX_EQ_LOG2).
        EQ0_LOG2_SIZE = 0x0228,

        /// RW: context table to show in the window (`enum vhca_ctx_table`).
        CTX_TABLE = 0x0300,
        /// RW: object number in that table (QPN, CQN, SRQN, MR key index, EQN).
        /// Writing it copies the live entry into the window (a snapshot: the
        /// entry is consistent even while the device runs).
        CTX_INDEX = 0x0304,
        /// R: `enum vhca_ctx_status` of the last snapshot.
        CTX_STATUS = 0x0308,
        /// R: the window: the snapshot record (`struct vhca_*_context`), zero past
        /// its size. Read-only: writes are ignored and counted (ARCHITECTURE.md §4).
        CTX_WINDOW = 0x1000,
        /// Bytes in the window.
        CTX_WINDOW_SIZE = 0x100,
    }
}

abi_consts! {
    /// DEV_CTRL bits.
    pub mod dev_ctrl: u32 = "VHCA_DEV_CTRL" {
        /// Self-clearing: drop every object and every configuration register, clear
        /// ENABLED and FATAL, then set READY. Also what a PCI reset does.
        RESET = 1 << 0,
        /// 1: start serving the command queue and EQ 0 as configured. 0: stop (the
        /// device finishes the command it is executing, then serves nothing).
        ENABLE = 1 << 1,
    }
}

abi_consts! {
    /// DEV_STATUS bits.
    pub mod dev_status: u32 = "VHCA_DEV_STATUS" {
        /// Reset finished; registers may be configured.
        READY = 1 << 0,
        /// The command queue and EQ 0 are live.
        ENABLED = 1 << 1,
        /// The device stopped on a driver error; see FATAL_SYNDROME. Only RESET
        /// clears it.
        FATAL = 1 << 2,
    }
}

abi_consts! {
    /// DEV_CAP bits (CAP_FLAGS and QUERY_DEVICE's `cap_flags`): what the device
    /// supports, for the driver to turn into IB device capability flags.
    pub mod dev_cap: u32 = "VHCA_DEV_CAP" {
        /// Reliable Connection QPs.
        RC = 1 << 0,
        /// Unreliable Connection QPs.
        UC = 1 << 1,
        /// Unreliable Datagram QPs.
        UD = 1 << 2,
        /// QP 1 (GSI) through CREATE_QP with type GSI (ARCHITECTURE.md §7).
        GSI = 1 << 3,
        /// Shared receive queues (SR-01).
        SRQ = 1 << 4,
        /// ATOMIC CmpSwap and FetchAdd (OP-07).
        ATOMIC = 1 << 5,
        /// SEND with Invalidate (OP-03).
        SEND_WITH_INV = 1 << 6,
        /// REG_MR with `VHCA_REG_MR_F_DMA` (an identity MR for kernel verbs).
        DMA_MR = 1 << 7,
        /// Memory windows of type 1 (MP-06): ALLOC_MW, BIND_MW WQEs.
        MW_TYPE1 = 1 << 8,
        /// Memory windows of type 2B (MP-07): BIND_MW, LOCAL_INV and SEND_WITH_INV.
        MW_TYPE2 = 1 << 9,
        /// RESIZE_CQ (CQ-04).
        RESIZE_CQ = 1 << 10,
        /// RESIZE_SRQ (`ibv_modify_srq` with IBV_SRQ_MAX_WR).
        RESIZE_SRQ = 1 << 11,
        /// RDMA FLUSH of placement type global visibility on RC (IBA 1.5 MPE).
        FLUSH_GLOBAL = 1 << 12,
        /// RDMA ATOMIC WRITE on RC (IBA 1.5 MPE).
        ATOMIC_WRITE = 1 << 13,
        /// Fast-registration MRs (MP-08; the kernel's
        /// IB_DEVICE_MEM_MGT_EXTENSIONS): REG_MR with `VHCA_REG_MR_F_FAST`,
        /// REG_MR and LOCAL_INV WQEs on MR keys, remote invalidation of them by
        /// SEND_WITH_INV; QUERY_DEVICE's max_fast_reg_pages.
        FAST_REG_MR = 1 << 14,
        /// Memory windows of type 2A (MP-07): ALLOC_MW with `VHCA_MW_TYPE2_A`,
        /// windows associated with their QP alone, which DESTROY_QP refuses
        /// (BUSY) while any is bound. Linux verbs have no way to ask for one
        /// (`IB_MW_TYPE_2` is type 2B here), so vhca.ko does not advertise it.
        MW_TYPE2A = 1 << 15,
        /// XRC (SR-02; the kernel's IB_DEVICE_XRC): ALLOC_XRCD, XRC SRQs,
        /// XRC_INI and XRC_TGT QPs.
        XRC = 1 << 16,
        /// Automatic path migration (AD-10; the kernel's
        /// IB_DEVICE_AUTO_PATH_MIG and IB_PORT_AUTO_MIGR_SUP): MODIFY_QP's
        /// ALT_PATH and PATH_MIG_STATE, the PATH_MIG and PATH_MIG_ERR events.
        APM = 1 << 17,
    }
}

abi_enum! {
    /// FATAL_SYNDROME values.
    pub enum Fatal: u32 = "VHCA_FATAL" {
        /// Not fatal.
        None = 0,
        /// DRIVER_ABI is not compatible with ABI_VERSION.
        AbiMismatch = 1,
        /// CMDQ_BASE or CMDQ_LOG2_SIZE is invalid (unaligned, too big, unmapped).
        CmdqBadConfig = 2,
        /// A slot between CMDQ_CI and CMDQ_PI was not owned by the device: the
        /// queue stops, since the device cannot tell where commands are.
        CmdqNotOwned = 3,
        /// EQ0_BASE or EQ0_LOG2_SIZE is invalid.
        Eq0BadConfig = 4,
        /// EQ 0 overflowed: the driver did not advance its consumer index. An
        /// event (a command completion, a QP error) would be lost, and no other
        /// queue could report that, so the device stops (as a CQ overflow is an
        /// error, CQ-03).
        Eq0Overflow = 5,
        /// UAR 0 (EQ 0's doorbell slot) is not readable.
        Uar0Unavailable = 6,
        /// The device hit an internal error (a bug) and stopped every queue; a
        /// DEVICE_FATAL event went to EQ 0. RESET brings it back, empty.
        Internal = 7,
    }
}

abi_enum! {
    /// CTX_TABLE values: which device-resident context table the window shows.
    pub enum CtxTable: u32 = "VHCA_CTX" {
        /// Nothing selected.
        None = 0,
        /// QP contexts, by QPN (`struct vhca_qp_context`).
        Qpc = 1,
        /// CQ contexts, by CQN (`struct vhca_cq_context`).
        Cqc = 2,
        /// SRQ contexts, by SRQN (`struct vhca_srq_context`).
        Srqc = 3,
        /// Memory protection table, by MR key index = key >> 8 (`struct vhca_mr_context`).
        Mpt = 4,
        /// EQ contexts, by EQN (`struct vhca_eq_context`).
        Eqc = 5,
    }
}

abi_enum! {
    /// CTX_STATUS values.
    pub enum CtxStatus: u32 = "VHCA_CTX_STATUS" {
        /// The window holds the entry.
        Ok = 0,
        /// No live object has that number; the window reads as zeros.
        NoObject = 1,
        /// CTX_TABLE is not a table; the window reads as zeros.
        BadTable = 2,
    }
}

// The regions of BAR0 follow each other without overlap (checked at build time).
const _: () = {
    use super::ident::bar;
    assert!(reg::CAP_FLAGS < reg::CMDQ_BASE_LO && reg::EQ0_LOG2_SIZE < reg::CTX_TABLE);
    assert!(reg::CTX_STATUS < reg::CTX_WINDOW);
    assert!(reg::CTX_WINDOW + reg::CTX_WINDOW_SIZE <= bar::MSIX_TABLE_OFFSET);
    assert!(bar::MSIX_TABLE_OFFSET + 16 * bar::MSIX_MAX_VECTORS <= bar::MSIX_PBA_OFFSET);
    assert!(bar::MSIX_PBA_OFFSET + bar::MSIX_MAX_VECTORS / 8 <= bar::BAR0_SIZE);
    assert!(bar::MSIX_MIN_VECTORS <= bar::MSIX_MAX_VECTORS);
};

/// The register map.
pub fn section() -> Section {
    Section {
        title: "BAR0 registers",
        entries: vec![
            Entry::Text(BAR0_RULES),
            Entry::Consts(reg::layout()),
            Entry::Consts(dev_ctrl::layout()),
            Entry::Consts(dev_status::layout()),
            Entry::Consts(dev_cap::layout()),
            Entry::Enum(Fatal::layout()),
            Entry::Enum(CtxTable::layout()),
            Entry::Enum(CtxStatus::layout()),
        ],
    }
}
