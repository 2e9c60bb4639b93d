//! Context-table records, as the read-only BAR0 window shows them (ARCHITECTURE.md §4:
//! the tables are device-resident, the guest cannot scribble on them; the window
//! lets the driver show live entries in debugfs and dump them after a failure).
//!
//! Each record is a snapshot taken when CTX_INDEX is written. The fields are the
//! live state: numbers, states, PSNs, ring indices, keys, counters, and the ring's
//! page list so a dump names the guest memory involved.

use super::cmd::{Av, Pbl};
use super::layout::{entry, Entry, Section};

abi_consts! {
    /// Context record flag bits (`flags` of the CQ, SRQ, MR and EQ contexts).
    pub mod ctx_flags: u8 = "VHCA_CTX_F" {
        /// CQ, EQ: armed; SRQ: limit armed.
        ARMED = 1 << 0,
        /// CQ: armed for solicited completions only.
        SOLICITED = 1 << 1,
        /// CQ: overflowed (CQ-03); SRQ: in error.
        ERROR = 1 << 2,
        /// MR: the identity DMA MR (VHCA_REG_MR_F_DMA).
        DMA = 1 << 3,
        /// MR: a fast-registration MR (VHCA_REG_MR_F_FAST; MP-08).
        FAST = 1 << 4,
        /// MR: a fast-registration MR that is free (not registered, or
        /// invalidated since): its key grants nothing.
        FREE = 1 << 5,
        /// MR: over device memory (VHCA_REG_MR_F_DM; issue 29 item 2):
        /// `first_page` is the DM byte offset of `iova`.
        DM = 1 << 7,
    }
}

abi_struct! {
    /// QP context (CTX_TABLE = VHCA_CTX_QPC).
    pub struct QpContext (192) {
        pub qpn: u32,
        pub pdn: u32,
        pub send_cqn: u32,
        pub recv_cqn: u32,
        pub srqn: u32,
        pub dest_qpn: u32,
        pub qkey: u32,
        /// `VHCA_ACCESS_*`.
        pub access: u32,
        /// Next PSN the requester sends.
        pub sq_psn: u32,
        /// Oldest PSN not yet acknowledged.
        pub sq_una_psn: u32,
        /// Expected PSN of the responder (ePSN).
        pub rq_psn: u32,
        /// SQ producer index last read from the doorbell slot.
        pub sq_pi: u32,
        /// Send WQEs fetched.
        pub sq_ci: u32,
        /// Send WQEs retired (completed or silently retired, OR-06).
        pub sq_done: u32,
        /// RQ producer index last read from the doorbell slot.
        pub rq_pi: u32,
        /// Receive WQEs consumed.
        pub rq_ci: u32,
        pub uar: u32,
        pub db_slot: u16,
        pub pkey_index: u16,
        /// `enum vhca_qp_type`.
        pub qp_type: u8,
        /// `enum vhca_qp_state`.
        pub state: u8,
        /// `enum vhca_mtu`.
        pub path_mtu: u8,
        pub port: u8,
        pub log2_sq_size: u8,
        pub log2_rq_size: u8,
        pub sq_wqe_shift: u8,
        pub rq_wqe_shift: u8,
        pub timeout: u8,
        pub retry_cnt: u8,
        pub rnr_retry: u8,
        pub min_rnr_timer: u8,
        pub max_rd_atomic: u8,
        pub max_dest_rd_atomic: u8,
        pub sq_sig_all: u8,
        pub rsvd: u8,
        /// The path (RC, UC).
        pub av: Av,
        pub tx_packets: u64,
        pub rx_packets: u64,
        /// Packets sent again (timeouts and NAKs, RL-10, RL-03).
        pub retransmits: u64,
        /// RNR NAKs received (RL-11).
        pub rnr_naks: u64,
        pub sq: Pbl,
        pub rq: Pbl,
    }
}

abi_struct! {
    /// CQ context (CTX_TABLE = VHCA_CTX_CQC).
    pub struct CqContext (64) {
        pub cqn: u32,
        pub eqn: u32,
        pub uar: u32,
        pub db_slot: u16,
        pub log2_entries: u8,
        /// `VHCA_CTX_F_ARMED`, `SOLICITED`, `ERROR`.
        pub flags: u8,
        /// CQEs written (free-running producer index).
        pub pi: u32,
        /// Consumer index last read from the doorbell slot.
        pub ci: u32,
        /// Arm word last taken.
        pub arm: u32,
        /// Uses of the CQ by QPs, once per role (a QP with one CQ for both
        /// counts twice).
        pub users: u32,
        /// Completion events raised.
        pub events: u64,
        pub rsvd: u64,
        pub ring: Pbl,
    }
}

abi_struct! {
    /// SRQ context (CTX_TABLE = VHCA_CTX_SRQC).
    pub struct SrqContext (64) {
        pub srqn: u32,
        pub pdn: u32,
        pub max_wr: u32,
        pub max_sge: u32,
        /// Armed limit (0 if not armed).
        pub srq_limit: u32,
        /// Producer index last read from the doorbell slot.
        pub pi: u32,
        /// WQEs consumed.
        pub ci: u32,
        pub uar: u32,
        pub db_slot: u16,
        pub log2_entries: u8,
        pub wqe_shift: u8,
        /// QPs using the SRQ.
        pub users: u32,
        /// `VHCA_CTX_F_ARMED`, `ERROR`.
        pub flags: u8,
        pub rsvd: [u8; 7],
        pub ring: Pbl,
    }
}

abi_struct! {
    /// Memory protection table entry (CTX_TABLE = VHCA_CTX_MPT), by key index.
    pub struct MrContext (48) {
        /// Current key: (index << 8) | key byte (MP-02).
        pub key: u32,
        pub pdn: u32,
        /// `VHCA_ACCESS_*`.
        pub access: u32,
        /// Pages in the translation (the MTT, device-resident).
        pub npages: u32,
        pub iova: u64,
        pub length: u64,
        /// Guest-physical address of the first page; with `VHCA_CTX_F_DM`,
        /// the DM byte offset of `iova`.
        pub first_page: u64,
        pub page_shift: u8,
        /// `VHCA_CTX_F_DMA`, `VHCA_CTX_F_FAST`, `VHCA_CTX_F_FREE`, `VHCA_CTX_F_DM`.
        pub flags: u8,
        pub rsvd: [u8; 6],
    }
}

abi_struct! {
    /// EQ context (CTX_TABLE = VHCA_CTX_EQC); EQ 0 is the async EQ.
    pub struct EqContext (64) {
        pub eqn: u32,
        pub uar: u32,
        pub db_slot: u16,
        /// MSI-X vector.
        pub vector: u16,
        pub log2_entries: u8,
        /// `VHCA_CTX_F_ARMED`.
        pub flags: u8,
        pub rsvd0: u16,
        /// EQEs written (free-running producer index).
        pub pi: u32,
        /// Consumer index last read from the doorbell slot.
        pub ci: u32,
        /// Arm word last taken.
        pub arm: u32,
        pub rsvd1: u32,
        /// Interrupts signalled.
        pub interrupts: u64,
        pub rsvd2: u64,
        /// The ring (EQ 0: contiguous).
        pub ring: Pbl,
    }
}

/// Context records.
pub fn section() -> Section {
    Section {
        title: "Context-table records (BAR0 window)",
        entries: vec![
            Entry::Consts(ctx_flags::layout()),
            Entry::Struct(entry::<QpContext>()),
            Entry::Struct(entry::<CqContext>()),
            Entry::Struct(entry::<SrqContext>()),
            Entry::Struct(entry::<MrContext>()),
            Entry::Struct(entry::<EqContext>()),
        ],
    }
}
