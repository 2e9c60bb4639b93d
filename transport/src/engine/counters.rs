//! Counters for every reason a packet is dropped or refused by the engine
//! (ARCHITECTURE.md §3: "every drop reason has a counter"; PV-10).

use crate::wire::DropCounters;

macro_rules! reasons {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $n:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v,)* }

        impl $name {
            /// Every reason, in counter order.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// The reason's counter name in snake case: the name in the
            /// device's reports, metrics and QUERY_COUNTERS name lists.
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $n,)* }
            }
        }
    };
}

reasons! {
    /// Why a packet that passed the wire checks was dropped by the transport.
    RxDrop {
        /// DestQP names no QP (C9-37).
        UnknownQp = "unknown_qp",
        /// DestQP is in Reset or Init, or in Error (C9-38, QS-04).
        QpNotReceiving = "qp_not_receiving",
        /// The opcode's service is not the QP's (C9-39).
        ServiceMismatch = "service_mismatch",
        /// BTH:P_Key does not match the QP's partition (C9-42, C9-43; PV-03).
        BadPkey = "bad_pkey",
        /// DETH:Q_Key does not match the QP's Q_Key (C9-48..C9-51; PV-05).
        BadQkey = "bad_qkey",
        /// DLID is not this port's LID (C9-53; PV-06).
        BadDlid = "bad_dlid",
        /// SLID is not the connected QP's remote LID, or is multicast (C9-54, C9-56).
        BadSlid = "bad_slid",
        /// Multicast (DestQP 0xFFFFFF) to a group no local QP is attached to
        /// (C9-58, o9-23; PV-07).
        Multicast = "multicast",
        /// Request PSN ahead of ePSN after a NAK was sent for the gap (RL-03).
        OutOfSequence = "out_of_sequence",
        /// Duplicate READ or ATOMIC that matches no saved request (RL-05, RL-06).
        UnmatchedDuplicate = "unmatched_duplicate",
        /// UC: packet of a message whose start was lost (RL-15).
        UcResync = "uc_resync",
        /// UD/UC: no receive WQE posted (UD and UC drop, never RNR).
        NoReceiveWqe = "no_receive_wqe",
        /// UD: payload longer than the PMTU, or more than one packet (C9-12).
        UdBadLength = "ud_bad_length",
        /// A response outside the unacknowledged region: duplicate or ghost (RL-09).
        GhostResponse = "ghost_response",
        /// A response whose opcode does not fit the WQE it acknowledges.
        UnexpectedResponse = "unexpected_response",
        /// A request arriving at a QP that only sends, or a response at a QP with
        /// nothing outstanding.
        NotExpected = "not_expected",
        /// RoCE: an Ethernet destination that is not the port's MAC (WF-10).
        BadDmac = "bad_dmac",
        /// RoCE: the destination IP is not one of the port's GIDs, or a connected
        /// QP's packet comes from or to another address than its path's
        /// (A17.4.5; the RoCE counterpart of the LID checks C9-53, C9-54).
        BadGid = "bad_gid",
        /// RC: the QP's queue of responses not yet sent is at its bound; the
        /// request is dropped unexecuted like one lost on the wire, and the
        /// requester's retry brings it again (C9-27 order kept; RL-07, RL-08).
        ResponseQueueFull = "response_queue_full",
        /// LRH:SLID is not the LID of the node the link took the packet from
        /// (the UDP link knows it by the datagram's source address;
        /// ARCHITECTURE.md §9).
        SpoofedSlid = "spoofed_slid",
        /// Multicast (DestQP 0xFFFFFF) without a GRH (C9-43.1.1, C9-58; PV-07).
        McastNoGrh = "mcast_no_grh",
        /// Multicast whose DGID is not a multicast GID (C9-58; PV-07).
        McastBadDgid = "mcast_bad_dgid",
        /// RC/UC: a GRH present where the QP's path has none, or absent where
        /// it has one (9.6.1.2, C9-43.1.2; PV-04).
        GrhMismatch = "grh_mismatch",
        /// RC/UC on InfiniBand: the GRH's DGID is not this port's GID or its
        /// SGID is not the path's remote GID (reserved, loopback or multicast
        /// GIDs included; C9-47.1.1; PV-04).
        BadGrhGid = "bad_grh_gid",
        /// A packet on VL15 not for QP0 (AD-06; VL15 is management only).
        Vl15NotQp0 = "vl15_not_qp0",
        /// A packet for QP0 on a data VL (AD-06; SMPs use VL15 only).
        Qp0NotVl15 = "qp0_not_vl15",
        /// A packet on a data VL the port does not have (AD-06).
        UnsupportedVl = "unsupported_vl",
        /// A READ response of the stream before a gap the requester has
        /// already asked again for (RL-14): its data comes again in the
        /// answer to the re-request, which starts over at the gap (RL-05).
        ReadResponseAfterGap = "read_response_after_gap",
    }
}

reasons! {
    /// Why a responder NAKed a request (RL-12, MP-05): one counter each, so that the
    /// NAKs a peer provokes can be told apart without a capture.
    NakReason {
        /// PSN ahead of ePSN (RL-03).
        PsnSequence = "psn_sequence",
        /// MIDDLE/LAST without FIRST, or FIRST inside a message (9.7.5.1.2).
        OpSequence = "op_sequence",
        /// An opcode the QP does not serve.
        BadOpcode = "bad_opcode",
        /// RDMA WRITE/READ/ATOMIC not enabled on the QP (MP-04).
        OpNotEnabled = "op_not_enabled",
        /// Payload not a full PMTU in FIRST/MIDDLE, or over it (C9-11).
        PmtuLength = "pmtu_length",
        /// WRITE payload past DMALen, or short of it at the end.
        DmaLength = "dma_length",
        /// DMALen above 2^31 (C9-9).
        TooLong = "too_long",
        /// The receive WQE's buffers are too small for the SEND (MP-05).
        ReceiveTooSmall = "receive_too_small",
        /// The receive WQE's buffers failed their L_Key checks (MP-05).
        ReceiveProtection = "receive_protection",
        /// No READ/ATOMIC resource left (RL-07).
        NoResources = "no_resources",
        /// R_Key index names no MR (MP-02).
        NoSuchKey = "no_such_key",
        /// R_Key byte is stale (MP-02).
        KeyMismatch = "key_mismatch",
        /// MR of another PD (MP-01).
        PdMismatch = "pd_mismatch",
        /// VA/length outside the MR (MP-04).
        OutOfBounds = "out_of_bounds",
        /// MR without REMOTE_READ (MP-04).
        NoRemoteRead = "no_remote_read",
        /// MR without REMOTE_WRITE (MP-04).
        NoRemoteWrite = "no_remote_write",
        /// MR without REMOTE_ATOMIC (MP-04).
        NoRemoteAtomic = "no_remote_atomic",
        /// ATOMIC VA not 8-byte aligned (OP-07).
        MisalignedAtomic = "misaligned_atomic",
        /// The MR's pages are outside the caller's memory.
        MemoryFault = "memory_fault",
        /// R_Key of a memory window that is not bound (MP-06, MP-07).
        WindowNotBound = "window_not_bound",
        /// R_Key of a type 2 window bound to another QP (MP-07).
        WindowWrongQp = "window_wrong_qp",
        /// SEND with Invalidate whose IETH R_Key failed the o9-5.2.2 checks
        /// (OP-03): the receive WQE completes with REM_INV_REQ_ERR.
        InvalidInvalidate = "invalid_invalidate",
        /// FLUSH whose placement type the MR's access does not allow (IBA 1.5
        /// MPE).
        NoFlush = "no_flush",
        /// R_Key of a fast-registration MR that is free: invalidated locally or
        /// remotely, or not registered yet (MP-08, o9-5.2.2).
        RegionInvalidated = "region_invalidated",
        /// XRC: the request's XRCETH names no XRC SRQ of the TGT QP's XRC
        /// domain (o9-24.a1; PV-08), or a packet continuing a message names
        /// another SRQ than its first packet did.
        XrcSrq = "xrc_srq",
        /// A page of an ODP MR the guest could not fault in (ODP_FAULT_FAIL,
        /// issue 29).
        OdpFailed = "odp_failed",
    }
}

/// Engine counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Received packets whose payload was placed from where their link
    /// lent it, not from a copy of the engine's (issue 30,
    /// `Engine::handle_received_lent`).
    pub rx_in_place: u64,
    /// Wire-level drops (bad CRC, length, ...).
    pub wire_drops: DropCounters,
    /// Transport-level drops, indexed by [`RxDrop::ALL`].
    pub rx_drops: Vec<u64>,
    pub naks_sent: u64,
    /// NAKs sent, indexed by [`NakReason::ALL`].
    pub nak_reasons: Vec<u64>,
    pub rnr_naks_sent: u64,
    pub acks_sent: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub rnr_naks_received: u64,
    pub duplicates_received: u64,
    /// Probes sent: the oldest unacknowledged request sent again before the
    /// ACK timeout because nothing was acknowledged for a probe timeout
    /// (issue 14; not retries, RL-10).
    pub probes: u64,
    /// RoCE: packets that could not be framed (the path has no GRH, its SGID
    /// entry is gone from the GID table, or its GIDs mix IPv4 and IPv6); the
    /// WQE completes in error.
    pub tx_no_route: u64,
    /// RC requester: go-backs started by a PSN Sequence Error NAK (RL-03).
    pub seq_nak_go_backs: u64,
    /// RC requester: sequence NAKs for a PSN the go-back under way already
    /// resends, within a round trip of its start: not restarted (`recovery`).
    pub seq_naks_absorbed: u64,
    /// RC requester: go-backs after a tail probe (what went before it was
    /// still not all acknowledged a probe timeout later; 9.7.4.1.3).
    pub probe_go_backs: u64,
    /// RC requester: probes found spurious (the responder answered the
    /// original and the probe: nothing had been lost; `recovery`).
    pub spurious_probes: u64,
    /// RC requester: request packets sent again (go-backs and probes).
    pub resent_packets: u64,
    /// RC requester: microseconds spent with packets unacknowledged and
    /// nothing sent or acknowledged, until a probe or ACK timeout fired.
    pub recovery_stall_us: u64,
    /// Multicast copies delivered to an attached QP's header checks (PV-07).
    pub mcast_rx_copies: u64,
    /// Multicast packets of this port looped back to their own sending QP,
    /// not delivered to it (PV-07).
    pub mcast_own_skipped: u64,
    /// RC requester: times a SEND or WRITE with Immediate was held for lack
    /// of end-to-end credits (RL-13).
    pub credit_waits: u64,
    /// RC requester: messages sent alone at zero credits (RL-13: the one
    /// message a requester may send without credits).
    pub credit_probes: u64,
    /// RC responder: unsolicited ACKs sent to report credits after a zero
    /// count, when a receive WQE was posted (RL-13).
    pub credit_acks_sent: u64,
    /// QPs that migrated to their alternate path (AD-10), either side.
    pub path_migrations: u64,
    /// Path migration error events raised (AD-10): MigReq = 1 packets on
    /// the alternate path of a QP that was not Armed (each also counted as
    /// the header check's drop).
    pub path_migration_errors: u64,
    /// Reliable Datagram drops, NAKs and recovery, per reason (AD-11, PV-09).
    pub rd: super::rd::RdCounters,
    /// The receive reorder hold (`reorder`, vhca policy).
    pub reorder: super::reorder::ReorderCounters,
    /// On-demand paging (issue 29, `odp`).
    pub odp: super::odp::OdpCounters,
    /// Congestion control (issue 31, `crate::cc`).
    pub cc: crate::cc::CcCounters,
}

impl Counters {
    /// Counts one transport drop.
    pub fn drop(&mut self, r: RxDrop) {
        if self.rx_drops.len() < RxDrop::ALL.len() {
            self.rx_drops.resize(RxDrop::ALL.len(), 0);
        }
        if let Some(i) = RxDrop::ALL.iter().position(|x| *x == r) {
            self.rx_drops[i] += 1;
        }
    }

    /// Counts one NAK sent for `r`.
    pub fn nak(&mut self, r: NakReason) {
        self.naks_sent += 1;
        if self.nak_reasons.len() < NakReason::ALL.len() {
            self.nak_reasons.resize(NakReason::ALL.len(), 0);
        }
        if let Some(i) = NakReason::ALL.iter().position(|x| *x == r) {
            self.nak_reasons[i] += 1;
        }
    }

    /// How many NAKs were sent for `r`.
    pub fn naked(&self, r: NakReason) -> u64 {
        NakReason::ALL
            .iter()
            .position(|x| *x == r)
            .and_then(|i| self.nak_reasons.get(i).copied())
            .unwrap_or(0)
    }

    /// The transport drops by [`RxDrop::name`], zeros included, in
    /// [`RxDrop::ALL`] order.
    pub fn rx_drops_named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        RxDrop::ALL.iter().map(|r| (r.name(), self.dropped(*r)))
    }

    /// The NAKs sent by [`NakReason::name`], zeros included, in
    /// [`NakReason::ALL`] order.
    pub fn naks_named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        NakReason::ALL.iter().map(|r| (r.name(), self.naked(*r)))
    }

    /// How many packets were dropped for `r`.
    pub fn dropped(&self, r: RxDrop) -> u64 {
        RxDrop::ALL
            .iter()
            .position(|x| *x == r)
            .and_then(|i| self.rx_drops.get(i).copied())
            .unwrap_or(0)
    }
}

impl super::rd::RdCounters {
    /// Every Reliable Datagram counter by name, zeros included (AD-11): the
    /// device's reports show them under `rd`.
    pub fn named(&self) -> [(&'static str, u64); 17] {
        // Destructured without `..`: a counter added to RD must be named here.
        let super::rd::RdCounters {
            bad_eecn,
            eec_not_receiving,
            bad_pkey,
            bad_path,
            bad_dest_qp,
            rdd_mismatch,
            bad_qkey,
            unexpected_response,
            out_of_sequence,
            duplicates,
            response_queue_full,
            naks_sent,
            acks_sent,
            resyncs_sent,
            resyncs_received,
            retransmits,
            timeouts,
        } = *self;
        [
            ("bad_eecn", bad_eecn),
            ("eec_not_receiving", eec_not_receiving),
            ("bad_pkey", bad_pkey),
            ("bad_path", bad_path),
            ("bad_dest_qp", bad_dest_qp),
            ("rdd_mismatch", rdd_mismatch),
            ("bad_qkey", bad_qkey),
            ("unexpected_response", unexpected_response),
            ("out_of_sequence", out_of_sequence),
            ("duplicates", duplicates),
            ("response_queue_full", response_queue_full),
            ("naks_sent", naks_sent),
            ("acks_sent", acks_sent),
            ("resyncs_sent", resyncs_sent),
            ("resyncs_received", resyncs_received),
            ("retransmits", retransmits),
            ("timeouts", timeouts),
        ]
    }
}

#[cfg(test)]
mod names_tests {
    use super::*;
    use crate::wire::DropReason;

    /// Every reason has a distinct snake-case name: the reports and metrics
    /// key their counters by it.
    #[test]
    fn every_drop_and_nak_reason_has_a_distinct_snake_case_name() {
        let sets: [Vec<&str>; 3] = [
            DropReason::ALL.iter().map(|r| r.name()).collect(),
            RxDrop::ALL.iter().map(|r| r.name()).collect(),
            NakReason::ALL.iter().map(|r| r.name()).collect(),
        ];
        for names in sets {
            let mut unique = names.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{names:?}");
            for n in names {
                assert!(
                    !n.is_empty()
                        && n.chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                    "{n}"
                );
            }
        }
        let mut c = Counters::default();
        c.wire_drops.count(DropReason::BadIcrc);
        c.drop(RxDrop::BadPkey);
        c.nak(NakReason::PsnSequence);
        assert!(c.wire_drops.named().any(|p| p == ("bad_icrc", 1)));
        assert_eq!(c.wire_drops.named().count(), DropReason::ALL.len());
        assert!(c.rx_drops_named().any(|p| p == ("bad_pkey", 1)));
        assert_eq!(c.rx_drops_named().count(), RxDrop::ALL.len());
        assert!(c.naks_named().any(|p| p == ("psn_sequence", 1)));
        assert_eq!(c.naks_named().count(), NakReason::ALL.len());
    }
}
