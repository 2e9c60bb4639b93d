//! Counter sets of QUERY_COUNTERS (ARCHITECTURE.md §3: "every drop reason has a counter").
//!
//! The per-reason sets are the engine's own reason lists in their stable order
//! (`DropReason::ALL`, `RxDrop::ALL`, `NakReason::ALL`), the device set the data
//! path's `HcaCounters`; their names, in snake case, go into the header as string
//! lists, so the driver's hw_stats names come from the same source as the
//! device's counting. Adding a reason changes the generated header, which the
//! header test then asks to regenerate.

use transport::engine::{Counters, NakReason, RxDrop};
use transport::wire::DropReason;

use super::layout::{screaming_snake, Entry, Section};

abi_enum! {
    /// QUERY_COUNTERS sets (names in `VHCA_COUNTERS_<SET>_NAMES`).
    pub enum CounterSet: u8 = "VHCA_COUNTERS" {
        /// Packets, bytes, ACKs, NAKs, retransmissions, timeouts of the port.
        Port = 0,
        /// Packets dropped by the wire checks, per reason (WF-09, PV-10).
        WireDrop = 1,
        /// Packets dropped by the transport, per reason (PV-10).
        RxDrop = 2,
        /// NAKs sent, per reason (RL-12).
        NakSent = 3,
        /// The device's data path: WQEs fetched and refused, doorbell overruns,
        /// guest-memory faults, CQEs, EQEs, overflows, interrupts, CQEs
        /// discarded on a CQ in error, the memory budget and the fabric key's
        /// drops (issue 13).
        Device = 4,
    }
}

/// Device-wide counters of the data path (the engine and link count the rest):
/// the values of the `Device` set. Defined here, beside the names, so the ABI
/// needs nothing of the runtime (ARCHITECTURE.md §1); the data path owns the
/// instance (`hca::Hca::counters`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HcaCounters {
    pub send_wqes: u64,
    pub recv_wqes: u64,
    /// WQEs that failed validation (error completion, QP to Error).
    pub bad_wqes: u64,
    /// A producer index more than a ring ahead of the device (guest bug or
    /// attack): the QP or SRQ goes to Error.
    pub doorbell_overruns: u64,
    /// Guest-memory accesses that failed (unmapped rings, DMA_UNMAP under a
    /// transfer).
    pub memory_faults: u64,
    pub cqes: u64,
    pub cq_overflows: u64,
    pub eqes: u64,
    pub eq_overflows: u64,
    pub interrupts: u64,
    /// Completions that found their CQ in error (overflowed or its ring not
    /// writable, CQ-03), the one that overflowed it included: never written.
    pub cqes_discarded: u64,
    /// Times a WQE stayed in its ring because the memory budget could not
    /// hold it (the queue resumes as memory frees; ARCHITECTURE.md §9).
    pub mem_budget_stalls: u64,
    /// Requests the memory budget refused (REG_MR, CREATE_* of rings and QPs,
    /// WQEs): the engine's count, copied in by `HcaCounters::with_budget`.
    pub mem_budget_refusals: u64,
    /// Host bytes held for the guest now (a level, not a count).
    pub mem_held_bytes: u64,
    /// The fabric key stage (ARCHITECTURE.md §9; 0 without a fabric key):
    /// datagrams received whose tag and sequence number verified.
    pub fabric_key_rx_verified: u64,
    /// Datagrams dropped without a tag: a peer without the key.
    pub fabric_key_rx_untagged: u64,
    /// Datagrams dropped shorter than a packet and its trailer.
    pub fabric_key_rx_short: u64,
    /// Datagrams dropped whose tag did not verify: a forgery or another key.
    pub fabric_key_rx_bad_tag: u64,
    /// Datagrams dropped, well tagged but from another node's address than
    /// their LRH:SLID's.
    pub fabric_key_rx_wrong_sender: u64,
    /// Datagrams dropped as replays (a sequence number seen or too old).
    pub fabric_key_rx_replay: u64,
    /// Packets not sent: too long for the trailer, or not in a lent buffer.
    pub fabric_key_tx_dropped: u64,
}

/// The port set's counters, in ABI order.
const PORT_COUNTERS: [&str; 47] = [
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "acks_sent",
    "naks_sent",
    "rnr_naks_sent",
    "retransmits",
    "timeouts",
    "rnr_naks_received",
    "duplicates_received",
    "tx_no_route",
    "loss_probes",
    "seq_nak_go_backs",
    "seq_naks_absorbed",
    "probe_go_backs",
    "spurious_probes",
    "resent_packets",
    "recovery_stall_us",
    "mcast_rx_copies",
    "mcast_own_skipped",
    "credit_waits",
    "credit_probes",
    "credit_acks_sent",
    "path_migrations",
    "path_migration_errors",
    "reorder_held",
    "reorder_in_order",
    "reorder_overtaken",
    "reorder_expired",
    "reorder_full",
    "dup_reads_queued",
    "reorder_skipped",
    "odp_faults_raised",
    "odp_faults_not_raised",
    "odp_faults_resolved",
    "odp_faults_failed",
    "odp_rnr_naks",
    "odp_responses_dropped",
    "odp_invalidations",
    "cc_ce_seen",
    "cc_cnps_sent",
    "cc_cnps_received",
    "cc_rate_cuts",
    "cc_fecn_seen",
    "cc_becns_received",
    "cc_cn_queue_full",
];

/// The port set's values, in the order of its names.
fn port_values(c: &Counters) -> [u64; PORT_COUNTERS.len()] {
    // Destructured without `..`: a counter added to the engine must be placed here.
    let Counters {
        rx_packets,
        tx_packets,
        rx_bytes,
        tx_bytes,
        // Issue 30: how the payloads arrived, not what happened to them;
        // the shared-memory link reports it (`rx_lent`).
        rx_in_place: _,
        wire_drops: _,
        rx_drops: _,
        naks_sent,
        nak_reasons: _,
        rnr_naks_sent,
        acks_sent,
        retransmits,
        timeouts,
        rnr_naks_received,
        duplicates_received,
        probes,
        tx_no_route,
        seq_nak_go_backs,
        seq_naks_absorbed,
        probe_go_backs,
        spurious_probes,
        resent_packets,
        recovery_stall_us,
        mcast_rx_copies,
        mcast_own_skipped,
        credit_waits,
        credit_probes,
        credit_acks_sent,
        path_migrations,
        path_migration_errors,
        // AD-11: Reliable Datagram has no guest ABI yet; its counters are in
        // the engine's report (`counters_out`), not in QUERY_COUNTERS.
        rd: _,
        reorder,
        odp,
        cc,
    } = c;
    // Issue 31: the congestion-control counters, named by `CcCounters::named`.
    let [cc0, cc1, cc2, cc3, cc4, cc5, cc6] = cc.named().map(|(_, v)| v);
    // Issue 29; destructured so a new ODP counter is placed here too.
    let transport::engine::OdpCounters {
        faults_raised,
        faults_not_raised,
        faults_resolved,
        faults_failed,
        rnr_naks: odp_rnr_naks,
        responses_dropped,
        invalidations,
    } = *odp;
    [
        *rx_packets,
        *tx_packets,
        *rx_bytes,
        *tx_bytes,
        *acks_sent,
        *naks_sent,
        *rnr_naks_sent,
        *retransmits,
        *timeouts,
        *rnr_naks_received,
        *duplicates_received,
        *tx_no_route,
        *probes,
        *seq_nak_go_backs,
        *seq_naks_absorbed,
        *probe_go_backs,
        *spurious_probes,
        *resent_packets,
        *recovery_stall_us,
        *mcast_rx_copies,
        *mcast_own_skipped,
        *credit_waits,
        *credit_probes,
        *credit_acks_sent,
        *path_migrations,
        *path_migration_errors,
        reorder.held,
        reorder.in_order,
        reorder.overtaken,
        reorder.expired,
        reorder.full,
        reorder.dup_reads_queued,
        reorder.skipped,
        faults_raised,
        faults_not_raised,
        faults_resolved,
        faults_failed,
        odp_rnr_naks,
        responses_dropped,
        invalidations,
        cc0,
        cc1,
        cc2,
        cc3,
        cc4,
        cc5,
        cc6,
    ]
}

/// The device set's counters, in ABI order.
const DEVICE_COUNTERS: [&str; 21] = [
    "send_wqes",
    "recv_wqes",
    "bad_wqes",
    "doorbell_overruns",
    "memory_faults",
    "cqes",
    "cq_overflows",
    "eqes",
    "eq_overflows",
    "interrupts",
    "cqes_discarded",
    "mem_budget_stalls",
    "mem_budget_refusals",
    "mem_held_bytes",
    "fabric_key_rx_verified",
    "fabric_key_rx_untagged",
    "fabric_key_rx_short",
    "fabric_key_rx_bad_tag",
    "fabric_key_rx_wrong_sender",
    "fabric_key_rx_replay",
    "fabric_key_tx_dropped",
];

/// The device set's values, in the order of its names.
fn device_values(h: &HcaCounters) -> [u64; DEVICE_COUNTERS.len()] {
    // Destructured without `..`: a counter added to the device must be placed here.
    let HcaCounters {
        send_wqes,
        recv_wqes,
        bad_wqes,
        doorbell_overruns,
        memory_faults,
        cqes,
        cq_overflows,
        eqes,
        eq_overflows,
        interrupts,
        cqes_discarded,
        mem_budget_stalls,
        mem_budget_refusals,
        mem_held_bytes,
        fabric_key_rx_verified,
        fabric_key_rx_untagged,
        fabric_key_rx_short,
        fabric_key_rx_bad_tag,
        fabric_key_rx_wrong_sender,
        fabric_key_rx_replay,
        fabric_key_tx_dropped,
    } = *h;
    [
        send_wqes,
        recv_wqes,
        bad_wqes,
        doorbell_overruns,
        memory_faults,
        cqes,
        cq_overflows,
        eqes,
        eq_overflows,
        interrupts,
        cqes_discarded,
        mem_budget_stalls,
        mem_budget_refusals,
        mem_held_bytes,
        fabric_key_rx_verified,
        fabric_key_rx_untagged,
        fabric_key_rx_short,
        fabric_key_rx_bad_tag,
        fabric_key_rx_wrong_sender,
        fabric_key_rx_replay,
        fabric_key_tx_dropped,
    ]
}

impl CounterSet {
    /// Counter names of the set, in value order.
    pub fn names(self) -> Vec<String> {
        match self {
            CounterSet::Port => PORT_COUNTERS.iter().map(|s| s.to_string()).collect(),
            // The engine's own names (`name()`), which the reports and metrics
            // use too.
            CounterSet::WireDrop => DropReason::ALL.iter().map(|r| r.name().into()).collect(),
            CounterSet::RxDrop => RxDrop::ALL.iter().map(|r| r.name().into()).collect(),
            CounterSet::NakSent => NakReason::ALL.iter().map(|r| r.name().into()).collect(),
            CounterSet::Device => DEVICE_COUNTERS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// The set's values from the engine's counters `c` and the device's `h`, in
    /// the order of [`names`](Self::names).
    pub fn values(self, c: &Counters, h: &HcaCounters) -> Vec<u64> {
        match self {
            CounterSet::Port => port_values(c).to_vec(),
            CounterSet::WireDrop => DropReason::ALL
                .iter()
                .map(|r| c.wire_drops.get(*r))
                .collect(),
            CounterSet::RxDrop => RxDrop::ALL.iter().map(|r| c.dropped(*r)).collect(),
            CounterSet::NakSent => NakReason::ALL.iter().map(|r| c.naked(*r)).collect(),
            CounterSet::Device => device_values(h).to_vec(),
        }
    }

    /// The C macro holding the names: `VHCA_COUNTERS_RX_DROP_NAMES`.
    pub fn names_macro(self) -> String {
        format!(
            "{}_{}_NAMES",
            CounterSet::layout().prefix,
            screaming_snake(&format!("{self:?}"))
        )
    }
}

/// The counter sets.
pub fn section() -> Section {
    Section {
        title: "Counters",
        entries: std::iter::once(Entry::Enum(CounterSet::layout()))
            .chain(CounterSet::ALL.iter().map(|&set| Entry::Names {
                doc: "Counter names of a set, in QUERY_COUNTERS order.",
                r#macro: set.names_macro(),
                names: set.names(),
            }))
            .collect(),
    }
}

impl CounterSet {
    /// The prefix vhca.ko puts before the set's names to make its rdma hw
    /// counters (guest-driver/README.md "Counters"; `counters.c` holds the
    /// same strings): the per-reason sets get one, so that a reason never
    /// reads as a port or device counter (`memory_fault` NAKs beside the
    /// device's `memory_faults`).
    pub fn hw_counter_prefix(self) -> &'static str {
        match self {
            CounterSet::Port | CounterSet::Device => "",
            CounterSet::WireDrop => "wire_drop_",
            CounterSet::RxDrop => "rx_drop_",
            CounterSet::NakSent => "nak_sent_",
        }
    }

    /// Whether vhca.ko shows the set as port 1's hw counters (`rdma statistic
    /// show link vhca0/1`) or as the device's (sysfs `hw_counters/` of the
    /// device; the data path's counters are device-wide). The NAKs sent per
    /// reason are the device's too: with them the port's reply outgrew one
    /// netlink message (`port_hw_counters_fit_one_rdma_netlink_reply`), and
    /// the device has one port.
    pub fn hw_counters_per_port(self) -> bool {
        !matches!(self, CounterSet::NakSent | CounterSet::Device)
    }
}

/// The guest's hw counter names of the port (`per_port`) or of the device, in
/// the driver's order (the sets in value order, each set's names in
/// QUERY_COUNTERS order). ib_core makes one sysfs file per name: a device
/// whose names repeat fails to register.
pub fn hw_counter_names(per_port: bool) -> Vec<String> {
    CounterSet::ALL
        .iter()
        .filter(|set| set.hw_counters_per_port() == per_port)
        .flat_map(|&set| {
            set.names()
                .into_iter()
                .map(move |n| format!("{}{n}", set.hw_counter_prefix()))
        })
        .collect()
}

/// Bytes the hw counters `names` take in ib_core's reply to `rdma statistic
/// show link` (RDMA_NLDEV_CMD_STAT_GET): per counter a nested attribute
/// holding the name (NUL-terminated) and the u64 value, each attribute a
/// 4-byte header padded to 4 bytes.
pub fn hw_counters_netlink_bytes(names: &[String]) -> usize {
    let attr = |payload: usize| 4 + payload.div_ceil(4) * 4;
    names.iter().map(|n| 4 + attr(n.len() + 1) + attr(8)).sum()
}

/// What of that reply the counters may take: ib_core builds it in one
/// `nlmsg_new(NLMSG_DEFAULT_SIZE)` (a 4 KiB page less the skb's shared info:
/// 3,760 bytes on x86-64) with the netlink header, the device's index and
/// name and the port ahead of them, and fails the whole command (EMSGSIZE,
/// "Message too long") when they do not fit.
pub const HW_COUNTERS_NETLINK_BUDGET: usize = 3_600;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hw_counter_names_are_unique_file_names() {
        let port = hw_counter_names(true);
        let device = hw_counter_names(false);
        let mut seen = std::collections::HashSet::new();
        for n in port.iter().chain(&device) {
            assert!(seen.insert(n.as_str()), "hw counter {n} twice");
            assert!(
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "hw counter name {n:?}: sysfs file names and rdma statistic keys are [a-z0-9_]"
            );
        }
        let total: usize = CounterSet::ALL.iter().map(|s| s.names().len()).sum();
        assert_eq!(port.len() + device.len(), total);
        assert_eq!(port[0], "rx_packets");
        assert!(port.contains(&"wire_drop_bad_icrc".to_string()));
        assert!(device.contains(&"nak_sent_psn_sequence".to_string()));
        assert!(device.contains(&"send_wqes".to_string()));
    }

    /// A reason added to a per-reason set grows `rdma statistic show link`'s
    /// reply; past the budget the command shows nothing at all (seen with
    /// every set on the port: 4,004 bytes).
    #[test]
    fn port_hw_counters_fit_one_rdma_netlink_reply() {
        let port = hw_counters_netlink_bytes(&hw_counter_names(true));
        assert!(
            port <= HW_COUNTERS_NETLINK_BUDGET,
            "port 1's hw counters take {port} bytes of the netlink reply, over \
             {HW_COUNTERS_NETLINK_BUDGET}: shorten names or show a set per device"
        );
    }
}
