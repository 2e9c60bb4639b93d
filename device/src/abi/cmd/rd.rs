//! Parameters of the Reliable Datagram commands (AD-11): RD domains and EE
//! contexts. RD QPs are CREATE_QP's type RD (`abi::verbs::QpType::Rd`).

use super::Av;

abi_struct! {
    /// ALLOC_RDD output.
    pub struct AllocRddOut (4) {
        pub rddn: u32,
    }
}

abi_struct! {
    /// DEALLOC_RDD input.
    pub struct DeallocRddIn (4) {
        pub rddn: u32,
    }
}

abi_struct! {
    /// CREATE_EEC input.
    pub struct CreateEecIn (4) {
        /// The RD domain the EE context belongs to.
        pub rddn: u32,
    }
}

abi_struct! {
    /// CREATE_EEC output.
    pub struct CreateEecOut (4) {
        /// 24 bits, nonzero: what the peer's RDETH names.
        pub eecn: u32,
    }
}

abi_struct! {
    /// EE context attributes (AD-11; IBA 11.2.x Modify EEC). A MODIFY_EEC to
    /// `state` reads the fields of that transition: Reset->Init `pkey_index`;
    /// Init->RTR `av`, `path_mtu`, `remote_eecn`, `rq_psn`, `min_rnr_timer`;
    /// RTR->RTS `sq_psn`, `timeout`, `retry_cnt`, `rnr_retry`. QUERY_EEC
    /// returns all, with the current send and expected PSNs.
    pub struct EecAttr (64) {
        /// `enum vhca_qp_state` (no SQD or SQE).
        pub state: u8,
        /// `enum vhca_mtu`.
        pub path_mtu: u8,
        /// RNR NAK timer code (5 bits).
        pub min_rnr_timer: u8,
        /// Local ACK timeout exponent: 4.096 us * 2^timeout; 0 = none.
        pub timeout: u8,
        /// 0..=7.
        pub retry_cnt: u8,
        /// 0..=7; 7 = infinite.
        pub rnr_retry: u8,
        pub pkey_index: u16,
        /// The peer's EE context (24 bits, nonzero).
        pub remote_eecn: u32,
        /// Expected PSN (24 bits).
        pub rq_psn: u32,
        /// Send PSN (24 bits).
        pub sq_psn: u32,
        /// Zero.
        pub rsvd: u32,
        /// The path to the peer.
        pub av: Av,
    }
}

abi_struct! {
    /// MODIFY_EEC input (mailbox).
    pub struct ModifyEecIn (72) {
        pub eecn: u32,
        /// Zero.
        pub rsvd: u32,
        pub attr: EecAttr,
    }
}

abi_struct! {
    /// QUERY_EEC input.
    pub struct QueryEecIn (4) {
        pub eecn: u32,
    }
}

abi_struct! {
    /// QUERY_EEC output (mailbox).
    pub struct QueryEecOut (72) {
        pub rddn: u32,
        /// Zero.
        pub rsvd: u32,
        pub attr: EecAttr,
    }
}

abi_struct! {
    /// DESTROY_EEC input.
    pub struct DestroyEecIn (4) {
        pub eecn: u32,
    }
}
