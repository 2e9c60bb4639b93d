//! Numbers the ABI shares with ibverbs (rdma-core's `verbs.h`) and the kernel's
//! `ib_verbs.h`, so that the driver passes them through unchanged. The engine
//! (`transport::verbs`) uses the same numbers; the ABI tests check each against it.

use super::layout::{Entry, Section};

abi_enum! {
    /// QP service (the kernel's `enum ib_qp_type`, which has GSI; ibverbs' RC, UC
    /// and UD have the same numbers).
    pub enum QpType: u8 = "VHCA_QPT" {
        /// QP 0, subnet management (AD-09): not supported, CREATE_QP answers
        /// `VHCA_STATUS_NOT_SUPPORTED`.
        Smi = 0,
        /// QP 1, general services: a UD QP with the well-known Q_Key 0x80010000
        /// (PV-05); the device gives it QPN 1 (ARCHITECTURE.md §7).
        Gsi = 1,
        /// Reliable Connection.
        Rc = 2,
        /// Unreliable Connection.
        Uc = 3,
        /// Unreliable Datagram.
        Ud = 4,
        /// XRC initiator (SR-02): sends only; each send WQE names the target's
        /// XRC SRQ (`struct vhca_xrc_seg`). No RQ, no SRQ; recv_cqn as send_cqn.
        XrcIni = 9,
        /// XRC target (SR-02): receives only, into the XRC SRQ each request
        /// names (PV-08); no rings, doorbell slot, PD or CQ: CREATE_QP reads
        /// only `xrcdn` and `port`.
        XrcTgt = 10,
        /// Reliable Datagram (AD-11; no `ibv_qp_type` number: Linux verbs
        /// have no RD): in the RD domain CREATE_QP names in `xrcdn`; each send
        /// WQE names its EE context, destination QP and Q_Key (`struct
        /// vhca_rd_seg`); SEND, RDMA WRITE (with immediate), RDMA READ and the
        /// ATOMICs. MODIFY_QP takes the state, Q_Key and access flags only
        /// (the path, PSNs and timers are the EE context's, MODIFY_EEC).
        Rd = 11,
    }
}

abi_enum! {
    /// SRQ types (`enum ibv_srq_type`).
    pub enum SrqType: u8 = "VHCA_SRQT" {
        /// An SRQ QPs of its PD name at creation (SR-01).
        Basic = 0,
        /// An XRC SRQ (SR-02): in an XRC domain, with its own CQ; XRC TGT QPs
        /// of that domain receive into it.
        Xrc = 1,
    }
}

abi_enum! {
    /// QP states (`enum ibv_qp_state`; IBA 10.3.1, QS-01).
    pub enum QpState: u8 = "VHCA_QPS" {
        Reset = 0,
        Init = 1,
        Rtr = 2,
        Rts = 3,
        Sqd = 4,
        Sqe = 5,
        Error = 6,
    }
}

abi_enum! {
    /// Path MTU (`enum ibv_mtu`; IBA 7.7.8, AD-03).
    pub enum Mtu: u8 = "VHCA_MTU" {
        M256 = 1,
        M512 = 2,
        M1024 = 3,
        M2048 = 4,
        M4096 = 5,
    }
}

abi_enum! {
    /// Send work request opcodes (`enum ibv_wr_opcode`), the ones the engine runs.
    pub enum WrOpcode: u8 = "VHCA_WR" {
        RdmaWrite = 0,
        RdmaWriteWithImm = 1,
        Send = 2,
        SendWithImm = 3,
        RdmaRead = 4,
        AtomicCmpSwap = 5,
        AtomicFetchAdd = 6,
        /// Invalidate the R_Key ctrl.imm_or_inv: a type 2 memory window's
        /// (MP-07) or a fast-registration MR's (MP-08).
        LocalInv = 7,
        /// Bind a memory window (MP-06, MP-07): ctrl + `struct vhca_bind_seg`.
        BindMw = 8,
        SendWithInv = 9,
        /// RDMA FLUSH (IBA 1.5 MPE; RC): ctrl.imm_or_inv = placement type
        /// (`VHCA_FLUSH_GLOBAL`) | selectivity level << 4 (`VHCA_FLUSH_LEVEL_*`),
        /// then `struct vhca_raddr_seg` and `struct vhca_atomic_seg` whose
        /// compare_add is the length; ctrl.len = 0.
        Flush = 14,
        /// RDMA ATOMIC WRITE (IBA 1.5 MPE; RC): `struct vhca_raddr_seg`, then
        /// `struct vhca_atomic_seg` whose compare_add holds the 8 bytes to
        /// write (copied as they are); ctrl.len = 0.
        AtomicWrite = 15,
        /// Fast registration of an MR allocated with `VHCA_REG_MR_F_FAST`
        /// (MP-08; the kernel's IB_WR_REG_MR): ctrl.imm_or_inv = the MR's new
        /// key, then `struct vhca_reg_mr_seg`; ctrl.len = 0.
        RegMr = 32,
    }
}

abi_enum! {
    /// Completion status (`enum ibv_wc_status`).
    pub enum WcStatus: u8 = "VHCA_WC" {
        Success = 0,
        LocLenErr = 1,
        LocQpOpErr = 2,
        LocEecOpErr = 3,
        LocProtErr = 4,
        WrFlushErr = 5,
        MwBindErr = 6,
        BadRespErr = 7,
        LocAccessErr = 8,
        RemInvReqErr = 9,
        RemAccessErr = 10,
        RemOpErr = 11,
        RetryExcErr = 12,
        RnrRetryExcErr = 13,
        LocRddViolErr = 14,
        RemInvRdReqErr = 15,
        RemAbortErr = 16,
        InvEecnErr = 17,
        InvEecStateErr = 18,
        FatalErr = 19,
        RespTimeoutErr = 20,
        GeneralErr = 21,
    }
}

abi_enum! {
    /// Completion opcode (`enum ibv_wc_opcode`).
    pub enum WcOpcode: u8 = "VHCA_WC_OP" {
        Send = 0,
        RdmaWrite = 1,
        RdmaRead = 2,
        CompSwap = 3,
        FetchAdd = 4,
        BindMw = 5,
        LocalInv = 6,
        Flush = 8,
        AtomicWrite = 9,
        /// A fast registration (MP-08; the kernel's IB_WC_REG_MR).
        RegMr = 10,
        Recv = 128,
        RecvRdmaWithImm = 129,
    }
}

abi_enum! {
    /// Port state (`enum ibv_port_state`).
    pub enum PortState: u8 = "VHCA_PORT" {
        Nop = 0,
        Down = 1,
        Init = 2,
        Armed = 3,
        Active = 4,
        ActiveDefer = 5,
    }
}

abi_enum! {
    /// Atomic capability (`enum ibv_atomic_cap`; OP-13: GLOB only if atomics are
    /// atomic against the guest's CPUs too).
    pub enum AtomicCap: u8 = "VHCA_ATOMIC" {
        None = 0,
        Hca = 1,
        Glob = 2,
    }
}

abi_consts! {
    /// Memory access flags (`enum ibv_access_flags` bits; MP-04).
    pub mod access: u32 = "VHCA_ACCESS" {
        LOCAL_WRITE = 1 << 0,
        REMOTE_WRITE = 1 << 1,
        REMOTE_READ = 1 << 2,
        REMOTE_ATOMIC = 1 << 3,
        MW_BIND = 1 << 4,
        /// The MR may be the target of a FLUSH of placement type global
        /// visibility (IBA 1.5 MPE).
        FLUSH_GLOBAL = 1 << 8,
        /// Placement type persistence: never granted; guest memory is not
        /// non-volatile, so REG_MR refuses it (VHCA_STATUS_BAD_PARAM).
        FLUSH_PERSISTENT = 1 << 9,
    }
}

abi_consts! {
    /// FLUSH placement types and selectivity levels (`enum ib_placement_type`,
    /// `enum ib_selectivity_level`), as FETH carries them.
    pub mod flush: u32 = "VHCA_FLUSH" {
        /// Placement type: global visibility.
        GLOBAL = 1 << 0,
        /// Placement type: persistence (never succeeds on this device).
        PERSISTENT = 1 << 1,
        /// Selectivity: the range [remote_addr, remote_addr + length).
        LEVEL_RANGE = 0,
        /// Selectivity: the whole memory region of the R_Key.
        LEVEL_MR = 1,
    }
}

abi_consts! {
    /// Send WQE flags (`enum ibv_send_flags` bits).
    pub mod send_flags: u8 = "VHCA_SEND" {
        /// Wait for prior READ/ATOMIC to complete first (C9-31, OR-05).
        FENCE = 1 << 0,
        /// Write a CQE on success (OR-06).
        SIGNALED = 1 << 1,
        /// Set the solicited-event bit (OP-10).
        SOLICITED = 1 << 2,
        /// The data follows the headers in the WQE (`len` bytes), not SGEs.
        INLINE = 1 << 3,
    }
}

abi_consts! {
    /// Completion flags (`enum ibv_wc_flags` bits).
    pub mod wc_flags: u32 = "VHCA_WC_FLAG" {
        /// UD: the receive buffer starts with the 40-byte GRH.
        GRH = 1 << 0,
        /// `imm_or_inv` holds immediate data.
        WITH_IMM = 1 << 1,
        /// `imm_or_inv` holds the R_Key the SEND invalidated.
        WITH_INV = 1 << 3,
        /// RoCE receives: `smac` holds the sender's MAC (kernel `IB_WC_WITH_SMAC`).
        WITH_SMAC = 1 << 4,
        /// RoCE receives: `network_hdr_type` says what the 40-byte header space
        /// holds (kernel `IB_WC_WITH_NETWORK_HDR_TYPE`).
        WITH_NETWORK_HDR_TYPE = 1 << 6,
    }
}

abi_consts! {
    /// QP attribute mask (`enum ibv_qp_attr_mask` bits) of MODIFY_QP; the device
    /// checks it against the transition table (QS-02) and refuses CAP with
    /// `VHCA_STATUS_NOT_SUPPORTED`. ALT_PATH reads `ModifyQpIn::alt` (AD-10).
    pub mod qp_attr_mask: u32 = "VHCA_QP_ATTR" {
        STATE = 1 << 0,
        CUR_STATE = 1 << 1,
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        ACCESS_FLAGS = 1 << 3,
        PKEY_INDEX = 1 << 4,
        PORT = 1 << 5,
        QKEY = 1 << 6,
        AV = 1 << 7,
        PATH_MTU = 1 << 8,
        TIMEOUT = 1 << 9,
        RETRY_CNT = 1 << 10,
        RNR_RETRY = 1 << 11,
        RQ_PSN = 1 << 12,
        MAX_QP_RD_ATOMIC = 1 << 13,
        ALT_PATH = 1 << 14,
        MIN_RNR_TIMER = 1 << 15,
        SQ_PSN = 1 << 16,
        MAX_DEST_RD_ATOMIC = 1 << 17,
        PATH_MIG_STATE = 1 << 18,
        CAP = 1 << 19,
        DEST_QPN = 1 << 20,
    }
}

abi_consts! {
    /// SRQ attribute mask (`enum ibv_srq_attr_mask` bits) of MODIFY_SRQ.
    pub mod srq_attr_mask: u32 = "VHCA_SRQ_ATTR" {
        /// Resize: not through MODIFY_SRQ (`VHCA_STATUS_NOT_SUPPORTED`); the
        /// driver uses RESIZE_SRQ, which takes the new ring.
        MAX_WR = 1 << 0,
        /// Set and arm the limit: one SRQ_LIMIT_REACHED event when fewer WQEs
        /// remain, then the limit is 0 again (SR-01).
        LIMIT = 1 << 1,
    }
}

abi_consts! {
    /// Special object numbers.
    pub mod num: u32 = "VHCA" {
        /// "No SRQ" in CREATE_QP, and no object: PDNs, CQNs, SRQNs, QPNs of
        /// created QPs (except GSI, 1) and EQNs of created EQs are never 0.
        NONE = 0,
        /// The asynchronous EQ (configured through BAR0, not CREATE_EQ).
        ASYNC_EQN = 0,
        /// QPN of the GSI QP.
        GSI_QPN = 1,
        /// The only port.
        PORT = 1,
    }
}

/// Numbers shared with ibverbs.
pub fn section() -> Section {
    Section {
        title: "Numbers shared with ibverbs",
        entries: vec![
            Entry::Enum(QpType::layout()),
            Entry::Enum(SrqType::layout()),
            Entry::Enum(QpState::layout()),
            Entry::Enum(Mtu::layout()),
            Entry::Enum(WrOpcode::layout()),
            Entry::Enum(WcStatus::layout()),
            Entry::Enum(WcOpcode::layout()),
            Entry::Enum(PortState::layout()),
            Entry::Enum(AtomicCap::layout()),
            Entry::Consts(access::layout()),
            Entry::Consts(flush::layout()),
            Entry::Consts(send_flags::layout()),
            Entry::Consts(wc_flags::layout()),
            Entry::Consts(qp_attr_mask::layout()),
            Entry::Consts(srq_attr_mask::layout()),
            Entry::Consts(num::layout()),
        ],
    }
}
