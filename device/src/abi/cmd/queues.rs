//! Parameters of the queue commands: EQs, CQs, SRQs and QPs (with the address
//! vector, sizes and attributes a QP is created and modified with).

use super::Pbl;

abi_struct! {
    /// Address vector (IBA 10.2.1, AD-02; `struct ibv_ah_attr`): a connected QP's
    /// path (MODIFY_QP) or a UD destination (send WQE).
    pub struct Av (40) {
        /// Destination GID, network order, if `is_global`.
        pub dgid: [u8; 16],
        /// GRH flow label (20 bits), if `is_global`.
        pub flow_label: u32,
        /// Destination LID.
        pub dlid: u16,
        /// Service level.
        pub sl: u8,
        /// Low bits added to the port's LID to make the SLID (LMC, AD-01).
        pub src_path_bits: u8,
        /// `enum ibv_rate`; 0 = port rate.
        pub static_rate: u8,
        /// 1: send a GRH with the fields below.
        pub is_global: u8,
        /// GID table index of the SGID.
        pub sgid_index: u8,
        /// GRH hop limit.
        pub hop_limit: u8,
        /// GRH traffic class.
        pub traffic_class: u8,
        /// Port (1); 0 means the QP's port.
        pub port_num: u8,
        /// Zero, but in the UD segment of a GSI (QP1) send WQE: the index of
        /// the port P_Key table entry the send carries (`ib_ud_wr.pkey_index`,
        /// the partition the GSI answers in; AD-05, PV-03); past the table,
        /// the WQE completes with VHCA_WC_LOC_QP_OP_ERR. Ignored elsewhere.
        pub pkey_index: u16,
        /// RoCE port: the destination MAC (the next hop for `dgid`, which the
        /// driver resolves, as ib_core's `ah_attr.roce.dmac`); zero on an
        /// InfiniBand port (A17.4.5).
        pub dmac: [u8; 6],
        /// Zero.
        pub rsvd2: [u8; 2],
    }
}

abi_struct! {
    /// QP sizes (`struct ibv_qp_cap`): asked for at CREATE_QP, granted in its output.
    pub struct QpCap (20) {
        pub max_send_wr: u32,
        pub max_recv_wr: u32,
        pub max_send_sge: u32,
        pub max_recv_sge: u32,
        pub max_inline_data: u32,
    }
}

abi_struct! {
    /// A QP's alternate path (AD-10; `ibv_qp_attr`'s `alt_ah_attr`,
    /// `alt_pkey_index`, `alt_port_num`, `alt_timeout`), valid where the
    /// attribute mask has `ALT_PATH`.
    pub struct AltPath (48) {
        pub ah_attr: Av,
        pub pkey_index: u16,
        /// Port (1).
        pub port_num: u8,
        /// Local ACK timeout on the alternate path (as `timeout`).
        pub timeout: u8,
        /// Zero.
        pub rsvd: u32,
    }
}

abi_struct! {
    /// QP attributes (`struct ibv_qp_attr`), valid where the attribute mask says.
    pub struct QpAttr (96) {
        /// `enum vhca_qp_state`.
        pub qp_state: u8,
        /// `enum vhca_qp_state`: the state the driver believes the QP is in.
        pub cur_qp_state: u8,
        /// `enum vhca_mtu`.
        pub path_mtu: u8,
        /// Path migration state (AD-10): `enum ibv_mig_state` (0 Migrated,
        /// 1 Rearm, 2 Armed); the device arms a Rearm at once.
        pub path_mig_state: u8,
        pub qkey: u32,
        /// Expected PSN of the responder (24 bits).
        pub rq_psn: u32,
        /// Next PSN of the requester (24 bits).
        pub sq_psn: u32,
        pub dest_qp_num: u32,
        /// `VHCA_ACCESS_*` remote rights of the QP.
        pub qp_access_flags: u32,
        pub pkey_index: u16,
        pub port_num: u8,
        pub en_sqd_async_notify: u8,
        pub max_rd_atomic: u8,
        pub max_dest_rd_atomic: u8,
        pub min_rnr_timer: u8,
        /// Local ACK timeout: 4.096 us * 2^timeout, 0 = infinite (RL-10).
        pub timeout: u8,
        /// Transport retries, 0..=7; 7 is seven (RL-10).
        pub retry_cnt: u8,
        /// RNR retries, 0..=7; 7 is infinite (RL-11).
        pub rnr_retry: u8,
        /// Query only: the SQ is draining (SQD).
        pub sq_draining: u8,
        pub rsvd: u8,
        /// The path.
        pub ah_attr: Av,
        /// Query only: the sizes granted.
        pub cap: QpCap,
    }
}

abi_struct! {
    /// CREATE_EQ input. EQ rings are zeroed by the driver (owner convention).
    pub struct CreateEqIn (32) {
        /// The ring: 2^log2_entries EQEs of 16 bytes.
        pub ring: Pbl,
        /// UAR page of the doorbell slot (`struct vhca_eq_doorbell`); 0.
        pub uar: u32,
        pub db_slot: u16,
        /// MSI-X vector, VHCA_MSIX_VECTOR_FIRST_COMP..CAP_MSIX_VECTORS.
        pub vector: u16,
        pub log2_entries: u8,
        pub rsvd: [u8; 7],
    }
}

abi_struct! {
    /// CREATE_EQ output.
    pub struct CreateEqOut (4) {
        pub eqn: u32,
    }
}

abi_struct! {
    /// DESTROY_EQ input.
    pub struct DestroyEqIn (4) {
        pub eqn: u32,
    }
}

abi_struct! {
    /// CREATE_CQ input. CQ rings are zeroed by the driver (owner convention).
    pub struct CreateCqIn (32) {
        /// The ring: 2^log2_entries CQEs of 64 bytes.
        pub ring: Pbl,
        /// EQ for completion events (0 = the async EQ, vector 0).
        pub eqn: u32,
        /// UAR page of the doorbell slot (`struct vhca_cq_doorbell`).
        pub uar: u32,
        pub db_slot: u16,
        pub log2_entries: u8,
        pub rsvd: [u8; 5],
    }
}

abi_struct! {
    /// CREATE_CQ output.
    pub struct CreateCqOut (8) {
        pub cqn: u32,
        /// Usable entries: the whole ring (the device reads the consumer index,
        /// so no slot is kept empty).
        pub entries: u32,
    }
}

abi_struct! {
    /// DESTROY_CQ input.
    pub struct DestroyCqIn (4) {
        pub cqn: u32,
    }
}

abi_struct! {
    /// RESIZE_CQ input: the CQ's new ring, which the device fills itself (no
    /// need to zero it; RESIZE_PROTOCOL).
    pub struct ResizeCqIn (24) {
        pub cqn: u32,
        /// The new ring: 2^log2_entries CQEs of 64 bytes.
        pub log2_entries: u8,
        pub rsvd: [u8; 3],
        pub ring: Pbl,
    }
}

abi_struct! {
    /// RESIZE_CQ output.
    pub struct ResizeCqOut (4) {
        /// Usable entries of the new ring (the whole ring).
        pub entries: u32,
    }
}

abi_struct! {
    /// CREATE_SRQ input (mailbox).
    pub struct CreateSrqIn (56) {
        pub pdn: u32,
        pub max_wr: u32,
        pub max_sge: u32,
        /// Armed limit at creation (0 = not armed).
        pub srq_limit: u32,
        /// UAR page of the doorbell slot (`struct vhca_srq_doorbell`).
        pub uar: u32,
        pub db_slot: u16,
        /// Ring entries: 2^log2_entries >= max_wr.
        pub log2_entries: u8,
        /// log2 of the receive WQE stride (VHCA_RQ_MIN_WQE_SHIFT..=MAX).
        pub wqe_shift: u8,
        /// The ring.
        pub ring: Pbl,
        /// `enum vhca_srq_type`.
        pub srq_type: u8,
        pub rsvd: [u8; 3],
        /// XRC SRQ: its XRC domain (SR-02); else zero.
        pub xrcdn: u32,
        /// XRC SRQ: the CQ its receives complete on; else zero.
        pub cqn: u32,
        pub rsvd2: u32,
    }
}

abi_struct! {
    /// CREATE_SRQ output.
    pub struct CreateSrqOut (12) {
        pub srqn: u32,
        pub max_wr: u32,
        pub max_sge: u32,
    }
}

abi_struct! {
    /// MODIFY_SRQ input.
    pub struct ModifySrqIn (16) {
        pub srqn: u32,
        /// `VHCA_SRQ_ATTR_*`.
        pub attr_mask: u32,
        pub max_wr: u32,
        pub srq_limit: u32,
    }
}

abi_struct! {
    /// RESIZE_SRQ input: the SRQ's new ring, of the same WQE stride
    /// (RESIZE_PROTOCOL).
    pub struct ResizeSrqIn (32) {
        pub srqn: u32,
        /// WQEs the SRQ must hold; 0 < max_wr <= 2^log2_entries.
        pub max_wr: u32,
        /// New ring entries: 2^log2_entries.
        pub log2_entries: u8,
        pub rsvd: [u8; 7],
        /// The new ring.
        pub ring: Pbl,
    }
}

abi_struct! {
    /// RESIZE_SRQ output.
    pub struct ResizeSrqOut (4) {
        /// WQEs the SRQ holds now (the whole ring).
        pub max_wr: u32,
    }
}

abi_struct! {
    /// QUERY_SRQ input.
    pub struct QuerySrqIn (4) {
        pub srqn: u32,
    }
}

abi_struct! {
    /// QUERY_SRQ output.
    pub struct QuerySrqOut (16) {
        pub max_wr: u32,
        pub max_sge: u32,
        /// Armed limit, 0 if not armed.
        pub srq_limit: u32,
        /// WQEs posted and not yet consumed.
        pub wqe_count: u32,
    }
}

abi_struct! {
    /// DESTROY_SRQ input.
    pub struct DestroySrqIn (4) {
        pub srqn: u32,
    }
}

abi_struct! {
    /// CREATE_QP input (mailbox). The QP starts in Reset.
    pub struct CreateQpIn (88) {
        /// `enum vhca_qp_type`.
        pub qp_type: u8,
        /// 1: every send WQE completes, signaled or not.
        pub sq_sig_all: u8,
        /// log2 of the send WQE stride (VHCA_SQ_MIN_WQE_SHIFT..=MAX).
        pub sq_wqe_shift: u8,
        /// log2 of the receive WQE stride (VHCA_RQ_MIN_WQE_SHIFT..=MAX).
        pub rq_wqe_shift: u8,
        /// SQ ring entries: 2^log2_sq_size >= cap.max_send_wr.
        pub log2_sq_size: u8,
        /// RQ ring entries: 2^log2_rq_size >= cap.max_recv_wr (0 with an SRQ).
        pub log2_rq_size: u8,
        pub port: u8,
        pub rsvd0: u8,
        pub pdn: u32,
        pub send_cqn: u32,
        pub recv_cqn: u32,
        /// `VHCA_NONE` for none.
        pub srqn: u32,
        /// Sizes asked for.
        pub cap: QpCap,
        /// UAR page of the doorbell slot (`struct vhca_qp_doorbell`).
        pub uar: u32,
        pub db_slot: u16,
        pub rsvd1: [u8; 2],
        /// XRC_TGT: its XRC domain (SR-02); RD: its RD domain (AD-11); else
        /// zero.
        pub xrcdn: u32,
        /// SQ ring.
        pub sq: Pbl,
        /// RQ ring (npages 0 with an SRQ).
        pub rq: Pbl,
    }
}

abi_struct! {
    /// CREATE_QP output.
    pub struct CreateQpOut (24) {
        pub qpn: u32,
        /// Sizes granted (at least those asked for).
        pub cap: QpCap,
    }
}

abi_struct! {
    /// MODIFY_QP input (mailbox). Only the attributes `attr_mask` names are
    /// read. A transition to Reset also takes the producer indices now in the
    /// QP's doorbell slot as the point from which WQEs are new, as CREATE_QP
    /// does: WQEs posted and not yet fetched are dropped, and the driver's
    /// free-running indices need not restart at zero.
    pub struct ModifyQpIn (152) {
        pub qpn: u32,
        /// `VHCA_QP_ATTR_*` (`ibv_qp_attr_mask` bits).
        pub attr_mask: u32,
        pub attr: QpAttr,
        /// With `VHCA_QP_ATTR_ALT_PATH` (AD-10).
        pub alt: AltPath,
    }
}

abi_struct! {
    /// QUERY_QP input.
    pub struct QueryQpIn (4) {
        pub qpn: u32,
    }
}

abi_struct! {
    /// QUERY_QP output (mailbox): every attribute, and the creation parameters.
    pub struct QueryQpOut (168) {
        pub attr: QpAttr,
        /// `enum vhca_qp_type`.
        pub qp_type: u8,
        pub sq_sig_all: u8,
        pub rsvd0: u16,
        pub pdn: u32,
        pub send_cqn: u32,
        pub recv_cqn: u32,
        pub srqn: u32,
        pub rsvd1: u32,
        /// The alternate path (AD-10); after a migration the former primary.
        pub alt: AltPath,
    }
}

abi_struct! {
    /// ALLOC_XRCD output.
    pub struct AllocXrcdOut (4) {
        pub xrcdn: u32,
    }
}

abi_struct! {
    /// DEALLOC_XRCD input.
    pub struct DeallocXrcdIn (4) {
        pub xrcdn: u32,
    }
}

abi_struct! {
    /// DESTROY_QP input.
    pub struct DestroyQpIn (4) {
        pub qpn: u32,
    }
}
