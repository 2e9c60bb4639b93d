//! Work queue entries: what the driver writes into SQ, RQ and SRQ rings in guest
//! memory and the device fetches after a doorbell (ARCHITECTURE.md §2 step 2, §4).

use super::layout::{entry, Entry, Section};

use super::cmd::Av;

abi_text! {
    /// How a WQE is laid out.
    pub const WQE_LAYOUT = "Work queue entries. A ring holds 2^log2_size WQEs of 2^wqe_shift \
bytes each (the stride, fixed per queue at create time); WQE i (free-running producer \
index) is at byte (i mod size) * stride of the ring's page list. Send strides are 64-byte \
basic blocks (VHCA_SQ_MIN_WQE_SHIFT); receive strides start at 32 bytes. A WQE is valid \
because the producer index in the doorbell slot covers it; it has no owner bit.\n\n\
Send WQE, in this order: struct vhca_send_ctrl; then, on a UD or GSI QP, struct \
vhca_ud_seg, on an XRC_INI QP, struct vhca_xrc_seg, on an RD QP, struct vhca_rd_seg; then for RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ a struct \
vhca_raddr_seg, and for ATOMIC_CMP_SWAP and ATOMIC_FETCH_ADD a struct vhca_raddr_seg \
followed by a struct vhca_atomic_seg; for FLUSH and ATOMIC_WRITE (IBA 1.5 Memory \
Placement Extensions, RC only, ctrl.len = 0, no data) a struct vhca_raddr_seg followed by \
a struct vhca_atomic_seg whose compare_add is the FLUSH's length or the 8 bytes the \
ATOMIC WRITE stores (FLUSH: ctrl.imm_or_inv = placement type | selectivity level << 4); \
for BIND_MW a struct vhca_bind_seg (ctrl.len = 0, \
ctrl.imm_or_inv = the window's current R_Key); for REG_MR a struct vhca_reg_mr_seg \
(ctrl.len = 0, ctrl.imm_or_inv = the MR's key after the registration: the index of a \
fast-registration MR, a new key byte); LOCAL_INV has the control segment only \
(ctrl.len = 0, ctrl.imm_or_inv = the R_Key to invalidate); then the data: ctrl.len SGEs (struct vhca_sge), or, \
with VHCA_SEND_INLINE, ctrl.len bytes of inline data. Everything must fit in the stride: a \
WQE that does not, an unknown opcode, or an opcode the QP's service does not allow \
completes with an error CQE (VHCA_WC_LOC_QP_OP_ERR) and never crashes the device \
(ARCHITECTURE.md §2, §9).\n\n\
Receive WQE (RQ and SRQ): struct vhca_recv_ctrl, then num_sge SGEs. For UD, the first 40 \
bytes of the buffers receive the GRH (undefined when the CQE has no GRH flag), as ibverbs \
expects.";
}

abi_consts! {
    /// WQE strides.
    pub mod wqe_const: u32 = "VHCA" {
        /// Smallest send stride: one 64-byte basic block (control + UD segment, or
        /// control + remote address + two SGEs).
        SQ_MIN_WQE_SHIFT = 6,
        /// Smallest receive stride: 32 bytes (control + one SGE).
        RQ_MIN_WQE_SHIFT = 5,
        /// Largest stride for both: 4 KiB (room for 32 SGEs or 256 bytes inline
        /// with every header).
        MAX_WQE_SHIFT = 12,
        /// Bytes before the data of a UD send WQE.
        UD_HEADERS_SIZE = 64,
        /// Bytes of the GRH at the start of a UD receive buffer (`struct ibv_grh`).
        UD_GRH_SIZE = 40,
    }
}

abi_struct! {
    /// Send WQE control segment (every send WQE starts with it).
    pub struct SendCtrl (16) {
        /// Returned in the CQE.
        pub wr_id: u64,
        /// `enum vhca_wr_opcode` (`ibv_wr_opcode`).
        pub opcode: u8,
        /// `VHCA_SEND_*` (`ibv_send_flags` bits).
        pub flags: u8,
        /// SGE count, or bytes of inline data with VHCA_SEND_INLINE.
        pub len: u16,
        /// Immediate data (WITH_IMM opcodes) as a number: the provider stores
        /// be32toh(wr.imm_data) and the device sends it big-endian in ImmDt, so
        /// the bytes arrive as posted. SEND_WITH_INV: wr.invalidate_rkey as is.
        pub imm_or_inv: u32,
    }
}

abi_struct! {
    /// UD destination segment (AD-02; UD and GSI QPs).
    pub struct UdSeg (48) {
        /// Destination QP (24 bits).
        pub remote_qpn: u32,
        /// Q_Key; one with the high bit set means "use the QP's" (PV-05).
        pub remote_qkey: u32,
        /// Where to.
        pub av: Av,
    }
}

abi_struct! {
    /// RD segment (RD QPs, AD-11): the local EE context that carries the
    /// message, the destination QP and the Q_Key it checks (a Q_Key with bit
    /// 31 set means the QP's own, as UD).
    pub struct RdSeg (16) {
        /// 24 bits.
        pub eecn: u32,
        /// 24 bits.
        pub remote_qpn: u32,
        pub remote_qkey: u32,
        pub rsvd: u32,
    }
}

abi_struct! {
    /// XRC segment (XRC_INI QPs, SR-02; `ibv_send_wr.qp_type.xrc.remote_srqn`):
    /// the XRC SRQ of the target node the WQE's message goes to (XRCETH, WF-06).
    pub struct XrcSeg (16) {
        /// 24 bits.
        pub remote_srqn: u32,
        pub rsvd: [u8; 12],
    }
}

abi_struct! {
    /// Remote address segment (RDMA and ATOMIC).
    pub struct RaddrSeg (16) {
        pub remote_addr: u64,
        pub rkey: u32,
        pub rsvd: u32,
    }
}

abi_struct! {
    /// Atomic segment (ibverbs' `wr.atomic`, OP-07).
    pub struct AtomicSeg (16) {
        /// CmpSwap: the compare value; FetchAdd: the value to add.
        pub compare_add: u64,
        /// CmpSwap: the swap value; FetchAdd: ignored.
        pub swap: u64,
    }
}

abi_struct! {
    /// Memory window bind segment (BIND_MW; MP-06, MP-07; `struct ibv_mw_bind_info`
    /// plus the new R_Key). The window is named by ctrl.imm_or_inv. A type 1 bind
    /// of length 0 unbinds the window. The bind completes with opcode BIND_MW, or
    /// with VHCA_WC_MW_BIND_ERR when a rule of IBA 10.6.7 is broken.
    pub struct BindSeg (32) {
        /// First virtual address of the window, inside the MR.
        pub addr: u64,
        pub length: u64,
        /// The MR the window is bound to; it needs VHCA_ACCESS_MW_BIND.
        pub mr_lkey: u32,
        /// The window's R_Key after the bind: same index, new key byte (the
        /// provider's choice, as ibv_inc_rkey).
        pub new_rkey: u32,
        /// `VHCA_ACCESS_REMOTE_*` rights the window grants.
        pub access: u32,
        pub rsvd: u32,
    }
}

abi_struct! {
    /// Fast-registration segment (REG_MR; MP-08; the kernel's `struct ib_reg_wr`
    /// over the page list `ib_map_mr_sg` built). The MR is named by the index of
    /// ctrl.imm_or_inv, which is also its key afterwards; it must have been
    /// allocated with VHCA_REG_MR_F_FAST, belong to the QP's PD and be free
    /// (never registered, or invalidated since). The page list is read when the
    /// device reaches the WQE in send-queue order (earlier WQEs sent, not
    /// necessarily acknowledged; with VHCA_SEND_FENCE once every earlier WQE
    /// has completed), and WQEs after it see the registration; the list must
    /// stay unchanged until the REG_MR completes. Completes with opcode REG_MR; with
    /// VHCA_WC_LOC_PROT_ERR when the MR, its PD, its state or the rights are
    /// wrong, with VHCA_WC_LOC_QP_OP_ERR when the translation is (MP-03).
    pub struct RegMrSeg (40) {
        /// First virtual address; any byte alignment (offset in the first page).
        pub iova: u64,
        pub length: u64,
        /// Guest-physical address of `npages` little-endian 64-bit page
        /// addresses, each aligned to the page size, covering exactly
        /// [iova, iova + length); 8-byte aligned.
        pub page_list: u64,
        /// 1..=the MR's max_pages (at most QUERY_DEVICE's max_fast_reg_pages).
        pub npages: u32,
        /// `VHCA_ACCESS_*`; remote write or atomic need local write (MP-04).
        pub access: u32,
        /// log2 of the page size: VHCA_PBL_MIN_PAGE_SHIFT..=30.
        pub page_shift: u32,
        pub rsvd: u32,
    }
}

abi_struct! {
    /// Scatter/gather element: `length` bytes at `addr` of the MR of `lkey`.
    pub struct Sge (16) {
        pub addr: u64,
        pub length: u32,
        pub lkey: u32,
    }
}

abi_struct! {
    /// Receive WQE control segment (RQ and SRQ).
    pub struct RecvCtrl (16) {
        /// Returned in the CQE.
        pub wr_id: u64,
        /// SGEs that follow.
        pub num_sge: u32,
        pub rsvd: u32,
    }
}

// Strides never exceed the smallest page, so an entry never straddles two pages;
// the smallest send stride holds a UD send's headers.
const _: () = {
    use super::cmd::pbl_const;
    assert!(wqe_const::MAX_WQE_SHIFT <= pbl_const::MIN_PAGE_SHIFT);
    assert!(SendCtrl::SIZE + UdSeg::SIZE == 1 << wqe_const::SQ_MIN_WQE_SHIFT);
    assert!(RecvCtrl::SIZE + Sge::SIZE == 1 << wqe_const::RQ_MIN_WQE_SHIFT);
    // A REG_MR fits the smallest send stride.
    assert!(SendCtrl::SIZE + RegMrSeg::SIZE <= 1 << wqe_const::SQ_MIN_WQE_SHIFT);
};

/// Work queue entries.
pub fn section() -> Section {
    Section {
        title: "Work queue entries (SQ, RQ, SRQ rings)",
        entries: vec![
            Entry::Text(WQE_LAYOUT),
            Entry::Consts(wqe_const::layout()),
            Entry::Struct(entry::<SendCtrl>()),
            Entry::Struct(entry::<UdSeg>()),
            Entry::Struct(entry::<XrcSeg>()),
            Entry::Struct(entry::<RdSeg>()),
            Entry::Struct(entry::<RaddrSeg>()),
            Entry::Struct(entry::<AtomicSeg>()),
            Entry::Struct(entry::<BindSeg>()),
            Entry::Struct(entry::<RegMrSeg>()),
            Entry::Struct(entry::<Sge>()),
            Entry::Struct(entry::<RecvCtrl>()),
        ],
    }
}
