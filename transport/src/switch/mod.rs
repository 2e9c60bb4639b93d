//! A switch's sans-IO core (issue 26 item 3; AD-09): forwarding by LRH:DLID through
//! the LinearForwardingTable (unicast) or the MulticastForwardingTable (MLIDs
//! 0xC000..=0xFFFE), VL15 for subnet management packets (directed route through
//! [`crate::mad::dr::switch_hop`], the switch's own SMPs answered by its SMA in
//! [`sma`]), per-port counters in the PortCounters shape read by its PerfMgt agent
//! on QP1 ([`pma`]), and a counter for every drop. Driven by `vhca switch`
//! (`device/src/switch_proc`), which also uses the start-up interface ([`Switch::set_static_route`], [`Switch::activate`], ...)
//! to stand in for an SM on a static subnet.
//!
//! Interface: [`Switch::handle_packet`] takes a whole native packet (LRH through
//! VCRC) with the physical port it arrived on and `now`, and appends what goes out
//! (port and bytes: the same bytes for a forwarded data packet, new ones for an SMP
//! the switch changed or answered). The link's inputs are [`Switch::link_up`] and
//! [`Switch::link_down`]; the SM drives the port states through PortInfo. A
//! port the SM Disabled ([`Switch::port_disabled`]) has no link: the driver
//! stops its keepalives and the core drops what still arrives on it. The SMA's
//! traps (trap 128 on a link change, AD-09; trap 256 on a failed M_Key check,
//! AD-12) share one queue ([`crate::mad::sma::traps`], as the HCA's SMA) and
//! come out of [`Switch::poll_transmit`]; [`Switch::poll_timeout`] says when it,
//! the trap resends and the M_Key and B_Key leases next have work.

pub mod cc;
pub mod pma;
mod sma;

use crate::mad::attr::{
    node_type, notice_type, trap, trap128_details, NodeDescription, SlToVlTable,
};
use crate::mad::bma::{Bma, CLASS_BM};
use crate::mad::cc::CcAgent;
use crate::mad::cc_attr::CLASS_CC;
use crate::mad::dr::{self, DrDrop, SwitchHop, PERMISSIVE_LID};
use crate::mad::header::{Smp, SmpRepr, SmpRoute};
use crate::mad::portinfo::{phys_state, port_state};
use crate::mad::sma::mkey::MkeyLease;
use crate::mad::sma::traps::TrapQueue;
use crate::mad::sma::SmaDrop;
use crate::mad::switch_attr::{SwitchInfoRepr, LFT_NO_PORT, MFT_POSITION_PORTS, MLID_BASE};
use crate::mad::{NodeIdentity, PortState, MAD_LEN};
use crate::verbs::Time;
use crate::wire::crc::vcrc;
use crate::wire::ext::DethRepr;
use crate::wire::lrh::{Lnh, Lrh, LrhRepr};
use crate::wire::opcode::Opcode;
use crate::wire::{ExtHeaders, PacketRepr, TransportRepr};

/// The management lane (IBA 7.6.5): SMPs only.
pub const VL15: u8 = 15;
/// The largest LFT a switch may have: every unicast LID (IBA 4.1).
pub const MAX_LINEAR_FDB_CAP: u16 = 0xc000;
/// The largest MFT: every multicast LID but the permissive one.
pub const MAX_MULTICAST_FDB_CAP: u16 = 0x3fff;
/// The most physical ports: 255 is the LFT's "no port".
pub const MAX_PORTS: u8 = 254;
const VCRC_LEN: usize = 2;
/// Sends of one trap before the switch stops waiting for its TrapRepress
/// (issue 26 item 7: bounded; OpenSM answers the first send).
pub const MAX_TRAP_SENDS: u32 = 8;

/// What a switch is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchConfig {
    /// Physical ports, 1..=254 (clamped).
    pub num_ports: u8,
    pub node_guid: u64,
    pub system_image_guid: u64,
    pub device_id: u16,
    pub vendor_id: u32,
    pub revision: u32,
    pub description: NodeDescription,
    /// LFT entries, rounded up to whole 64-LID blocks, at most 0xC000.
    pub linear_fdb_cap: u16,
    /// MFT entries, rounded up to whole 32-MLID blocks, at most 0x3FFF.
    pub multicast_fdb_cap: u16,
}

/// Why a packet was not forwarded (the switch counts each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SwitchDrop {
    /// Shorter than an LRH, LRH:PktLen disagrees with the length, or a bad VCRC
    /// (counted in the ingress port's PortRcvErrors too).
    Malformed,
    /// The ingress port number is not one of this switch's physical ports.
    NoSuchPort,
    /// A data packet arrived on a port that is not Armed or Active (IBA 7.2: Init
    /// and Down pass SMPs only).
    IngressNotActive,
    /// No LFT entry (255), a DLID above LinearFDBTop or past the table, LID 0, a
    /// permissive DLID on a data packet, or an MLID with an empty MFT mask.
    NoRoute,
    /// The egress port's link is down (counted in its PortXmitDiscards).
    EgressDown,
    /// A data packet's egress port is not Active (counted in its PortXmitDiscards).
    EgressNotActive,
    /// A VL15 packet that is not an SMP (IBA 7.6.5: VL15 is for SMPs only).
    Vl15NotSmp,
    /// A data packet for the switch's own LID that no agent takes: not a GMP to
    /// QP1 of the PerfMgt class ([`pma`]) or the baseboard management class
    /// (port 0's BMA, which counts its own drops), or a PerfMgt response.
    ToSwitch,
    /// A directed-route SMP whose path is bad (per reason in `dr_drops`).
    BadDrPath,
    /// A response or trap for an SM on this switch: there is none.
    NoSm,
    /// Arrived on a port whose PortPhysicalState the SM set to Disabled (IBA
    /// 14.2.5.6): the port has no link, so nothing it hears is taken.
    PortDisabled,
    /// A TrapRepress that names no outstanding trap of this switch.
    UnmatchedRepress,
    /// The SLtoVLMappingTable of (ingress, egress) maps the data packet's SL
    /// to VL15 or to a VL the egress port does not operate (PortInfo:
    /// OperationalVLs): discarded (IBA 7.6.6, 14.2.5.8). Counted in the egress
    /// port's PortXmitDiscards too.
    EgressVlNotOperational,
    /// An SMP that failed the M_Key check of port 0 (IBA 14.2.4, AD-12): no
    /// response; M_KeyViolations counted, trap 256 queued.
    BadMkey,
}

impl SwitchDrop {
    /// Every reason, in counter order.
    pub const ALL: [SwitchDrop; 14] = [
        SwitchDrop::Malformed,
        SwitchDrop::NoSuchPort,
        SwitchDrop::IngressNotActive,
        SwitchDrop::NoRoute,
        SwitchDrop::EgressDown,
        SwitchDrop::EgressNotActive,
        SwitchDrop::Vl15NotSmp,
        SwitchDrop::ToSwitch,
        SwitchDrop::BadDrPath,
        SwitchDrop::NoSm,
        SwitchDrop::PortDisabled,
        SwitchDrop::UnmatchedRepress,
        SwitchDrop::EgressVlNotOperational,
        SwitchDrop::BadMkey,
    ];

    /// This reason's index in [`SwitchDrop::ALL`].
    pub fn index(self) -> usize {
        SwitchDrop::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

/// One port's counters in the PortCounters shape (IBA 16.1.3.5), for a PerfMgt
/// agent to report. Data counts 32-bit words from the LRH through the ICRC
/// (LRH:PktLen). Saturating, as PortCounters are.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortCounters {
    pub xmit_packets: u64,
    pub rcv_packets: u64,
    pub xmit_data_words: u64,
    pub rcv_data_words: u64,
    /// Malformed packets received (PortRcvErrors).
    pub rcv_errors: u64,
    /// Packets dropped because this egress port could not take them (PortXmitDiscards).
    pub xmit_discards: u64,
    /// VL15 packets dropped on arrival here (VL15Dropped).
    pub vl15_dropped: u64,
}

/// The switch-wide counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchCounters {
    /// By [`SwitchDrop::index`].
    pub drops: [u64; SwitchDrop::ALL.len()],
    /// Directed-route drops by [`DrDrop::index`].
    pub dr_drops: [u64; DrDrop::ALL.len()],
    /// SMPs the SMA answered / answered with a non-zero status.
    pub sma_replies: u64,
    pub sma_error_replies: u64,
    /// PerfMgt GMPs the PMA answered / answered with a non-zero status.
    pub pma_replies: u64,
    pub pma_error_replies: u64,
    /// Trap sends, resends included / traps the SM repressed.
    pub traps_sent: u64,
    pub traps_repressed: u64,
    /// Traps given up after [`MAX_TRAP_SENDS`] sends unrepressed.
    pub traps_abandoned: u64,
    /// Traps not sent for want of an SM: MasterSMLID 0 in port 0's PortInfo
    /// (the SM reads SwitchInfo:PortStateChange when it comes).
    pub traps_no_sm: u64,
    /// Traps not queued: [`crate::mad::sma::MAX_PENDING_TRAPS`] pending.
    pub traps_queue_full: u64,
    /// M_Key leases that ran out (protection cleared).
    pub lease_expiries: u64,
}

impl SwitchCounters {
    pub fn drop_count(&self, why: SwitchDrop) -> u64 {
        self.drops[why.index()]
    }
}

/// What goes out of a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Egress {
    /// The packet as it came in.
    Same,
    /// A new or changed packet (LRH through VCRC).
    New(Box<[u8]>),
}

/// One packet out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchOut {
    pub port: u8,
    pub packet: Egress,
}

/// A switch: its identity, one [`PortState`] per port (index 0 the management
/// port), SwitchInfo, the forwarding tables, counters.
#[derive(Debug, Clone)]
pub struct Switch {
    node: NodeIdentity,
    ports: Vec<PortState>,
    info: SwitchInfoRepr,
    /// Egress port per LID.
    lft: Vec<u8>,
    /// Port masks per MLID index: `positions` 16-bit masks each.
    mft: Vec<u16>,
    counters: SwitchCounters,
    port_counters: Vec<PortCounters>,
    /// SLtoVLMappingTable per (input port, output port), ports 0..=N each:
    /// index `in * (N + 1) + out` (IBA 14.2.5.8).
    sl2vl: Vec<SlToVlTable>,
    /// Port 0's M_Key lease (AD-12).
    lease: MkeyLease,
    /// The SMA's traps, each given up after [`MAX_TRAP_SENDS`] sends.
    traps: TrapQueue,
    /// The Baseboard Management Agent of port 0 (B_Key, AD-12).
    bma: Bma,
    /// The Congestion Control Agent of port 0 (class 0x21, IBA A10.4) and
    /// the FECN marker it configures ([`cc`]).
    cca: CcAgent,
    marker: cc::Marker,
}

impl Switch {
    /// A switch as it powers up: every physical port Down (its link not up), port 0
    /// Active with no LID, the LFT all 255, the MFT empty.
    pub fn new(cfg: &SwitchConfig) -> Switch {
        let n = cfg.num_ports.clamp(1, MAX_PORTS);
        let lft_cap = cfg.linear_fdb_cap.min(MAX_LINEAR_FDB_CAP).div_ceil(64) * 64;
        let mft_cap = (cfg.multicast_fdb_cap.min(MAX_MULTICAST_FDB_CAP) / 32) * 32;
        // Every port of a switch has port 0's GUID (IBA 14.2.5.3 PortGUID).
        let port_guid = cfg.node_guid;
        let mut ports: Vec<PortState> = (0..=n)
            .map(|p| PortState::new(p, port_guid, 1, 64))
            .collect();
        // Base port 0 is the switch's own, always up: Active from the start, as
        // ibsim's switch SMA port; OpenSM only sets its LID and SM fields (the
        // "base port 0" case of its link manager).
        ports[0].info.port_state = port_state::ACTIVE;
        ports[0].info.port_physical_state = phys_state::LINK_UP;
        let positions = usize::from(n) / MFT_POSITION_PORTS + 1;
        Switch {
            node: NodeIdentity {
                node_type: node_type::SWITCH,
                num_ports: n,
                system_image_guid: cfg.system_image_guid,
                node_guid: cfg.node_guid,
                device_id: cfg.device_id,
                revision: cfg.revision,
                vendor_id: cfg.vendor_id & 0xff_ffff,
                description: cfg.description,
            },
            ports,
            info: SwitchInfoRepr {
                linear_fdb_cap: lft_cap,
                multicast_fdb_cap: mft_cap,
                linear_fdb_top: 0,
                default_port: 0,
                default_mcast_primary_port: LFT_NO_PORT,
                default_mcast_not_primary_port: LFT_NO_PORT,
                lids_per_port: 0,
                partition_enforcement_cap: 0,
                // Reserved (0): the switch does not advertise
                // IsMulticastFDBTopSupported (IBA 14.2.5.4), so the whole
                // MFT up to MulticastFDBCap is valid, as diags read it.
                multicast_fdb_top: 0,
                ..SwitchInfoRepr::default()
            },
            lft: vec![LFT_NO_PORT; usize::from(lft_cap)],
            mft: vec![0; usize::from(mft_cap) * positions],
            counters: SwitchCounters {
                drops: [0; SwitchDrop::ALL.len()],
                dr_drops: [0; DrDrop::ALL.len()],
                sma_replies: 0,
                sma_error_replies: 0,
                pma_replies: 0,
                pma_error_replies: 0,
                traps_sent: 0,
                traps_repressed: 0,
                traps_abandoned: 0,
                traps_no_sm: 0,
                traps_queue_full: 0,
                lease_expiries: 0,
            },
            port_counters: vec![PortCounters::default(); usize::from(n) + 1],
            // Every SL on VL0 until the SM programs it, as an HCA port's
            // table starts (the one data VL every port has).
            sl2vl: vec![SlToVlTable::default(); (usize::from(n) + 1).pow(2)],
            lease: MkeyLease::default(),
            traps: TrapQueue::bounded(MAX_TRAP_SENDS),
            bma: Bma::new(),
            cca: CcAgent::switch(n),
            marker: cc::Marker::new(n),
        }
    }

    pub fn num_ports(&self) -> u8 {
        self.node.num_ports
    }
    pub fn counters(&self) -> &SwitchCounters {
        &self.counters
    }
    /// Port `p`'s counters (0 the management port).
    pub fn port_counters(&self, p: u8) -> Option<&PortCounters> {
        self.port_counters.get(usize::from(p))
    }
    /// Port `p`'s state (0 the management port).
    pub fn port(&self, p: u8) -> Option<&PortState> {
        self.ports.get(usize::from(p))
    }
    pub fn switch_info(&self) -> &SwitchInfoRepr {
        &self.info
    }
    /// Port 0's Baseboard Management Agent.
    pub fn bma(&self) -> &Bma {
        &self.bma
    }
    /// The switch's LID: port 0's (IBA 14.2.5.6, a switch has one LID range).
    pub fn lid(&self) -> u16 {
        self.ports[0].info.lid
    }
    /// Whether an SM set physical port `p`'s PortPhysicalState to Disabled (IBA
    /// 14.2.5.6): its link is down until the SM sets Polling, so the driver
    /// sends nothing on it, keepalives included, and its link partner goes Down.
    pub fn port_disabled(&self, p: u8) -> bool {
        p != 0
            && self
                .ports
                .get(usize::from(p))
                .is_some_and(|s| s.info.port_physical_state == phys_state::DISABLED)
    }
    fn mft_positions(&self) -> usize {
        usize::from(self.node.num_ports) / MFT_POSITION_PORTS + 1
    }
    fn mft_mlids(&self) -> usize {
        usize::from(self.info.multicast_fdb_cap)
    }
    fn mft_mask(&self, mlid_idx: usize, position: u8) -> u16 {
        let i = mlid_idx * self.mft_positions() + usize::from(position);
        self.mft.get(i).copied().unwrap_or(0)
    }
    fn set_mft_mask(&mut self, mlid_idx: usize, position: u8, mask: u16) {
        let i = mlid_idx * self.mft_positions() + usize::from(position);
        if let Some(m) = self.mft.get_mut(i) {
            *m = mask;
        }
    }

    fn is_own_lid(&self, dlid: u16) -> bool {
        let pi = &self.ports[0].info;
        pi.lid != 0 && dlid >= pi.lid && u32::from(dlid) < u32::from(pi.lid) + (1u32 << pi.lmc)
    }

    fn drop(&mut self, why: SwitchDrop) {
        self.counters.drops[why.index()] += 1;
    }

    fn port_state_changed(&mut self) {
        // IBA 14.2.5.4: the switch sets PortStateChange when a port's state changes.
        self.info.port_state_change = true;
    }

    /// The link state machine moved a port (Down -> Init, or to Down): the
    /// transitions IBA 14.2.5.4 sets PortStateChange for, and trap 128's.
    fn link_state_changed(&mut self) {
        self.port_state_changed();
        self.link_trap();
    }

    /// Port `p`'s link trained: Down -> Init, waiting for the SM (IBA 7.2).
    pub fn link_up(&mut self, p: u8) {
        let Some(port) = self.ports.get_mut(usize::from(p)).filter(|_| p != 0) else {
            return;
        };
        let pi = &mut port.info;
        if pi.port_physical_state == phys_state::DISABLED || pi.port_state != port_state::DOWN {
            return;
        }
        pi.port_state = port_state::INIT;
        pi.port_physical_state = phys_state::LINK_UP;
        self.link_state_changed();
    }

    /// Port `p`'s link went away: Down, the PHY polling again.
    pub fn link_down(&mut self, p: u8) {
        let Some(port) = self.ports.get_mut(usize::from(p)).filter(|_| p != 0) else {
            return;
        };
        let pi = &mut port.info;
        if pi.port_physical_state == phys_state::DISABLED || pi.port_state == port_state::DOWN {
            return;
        }
        pi.port_state = port_state::DOWN;
        pi.port_physical_state = phys_state::POLLING;
        self.link_state_changed();
    }

    /// A link state change to report by trap 128 (IBA 14.2.5.1, "link state
    /// of at least one port changed", switches only) to the SM from port 0,
    /// as ibsim's switch sends it on every link change (`sim_cmd.c`
    /// unlink/relink, `encode_trap128`: the switch's LID in the details). The
    /// link has no clock: the trap is due at the next [`Switch::poll_transmit`]
    /// (queued at time 0), resent until the SM represses it or given up after
    /// [`MAX_TRAP_SENDS`] sends. One trap 128 at most is outstanding: a change
    /// meanwhile sends one more after it (what it reported may predate the
    /// change).
    pub(super) fn link_trap(&mut self) {
        let details = trap128_details(self.lid());
        let kind = (notice_type::URGENT, trap::LINK_STATE_CHANGE);
        let pi = &self.ports[0].info;
        if let Err(why) = self
            .traps
            .queue_once(pi, self.node.node_type, kind, details, Time(0))
        {
            self.count_unqueued(why);
        }
    }

    /// Static subnet (no SM; the fabric file plays it): the switch's own LID
    /// (port 0's, LMC 0). 0 or a non-unicast LID: no LID.
    pub fn set_static_lid(&mut self, lid: u16) {
        self.ports[0].info.lid = if lid < MLID_BASE { lid } else { 0 };
        self.ports[0].info.lmc = 0;
    }

    /// Static subnet: the LFT entry for `lid` (as an SM's SubnSet of the
    /// block holding it would), raising LinearFDBTop to cover it. Refused
    /// (false) for a LID past the table or a port that is not 0 or physical.
    pub fn set_static_route(&mut self, lid: u16, port: u8) -> bool {
        let Some(e) = self.lft.get_mut(usize::from(lid)) else {
            return false;
        };
        if lid == 0 || port > self.node.num_ports {
            return false;
        }
        *e = port;
        self.info.linear_fdb_top = self.info.linear_fdb_top.max(lid);
        true
    }

    /// Static subnet: every MLID of the MFT to `ports` (the flooding a
    /// subnet without an SM does: every multicast packet to every port but
    /// the one it came in on). Ports past the switch's are left out.
    pub fn set_static_flood(&mut self, ports: &[u8]) {
        let positions = self.mft_positions();
        for idx in 0..self.mft_mlids() {
            for pos in 0..positions {
                let mask = ports
                    .iter()
                    .filter(|&&p| p != 0 && p <= self.node.num_ports)
                    .filter(|&&p| usize::from(p) / MFT_POSITION_PORTS == pos)
                    .fold(0u16, |m, &p| m | 1 << (usize::from(p) % MFT_POSITION_PORTS));
                self.set_mft_mask(idx, pos as u8, mask);
            }
        }
    }

    /// Static subnet: every (in, out) SLtoVLMappingTable to `table` (the
    /// fabric file's `sl2vl`, which its nodes use too), as an SM's SubnSets
    /// of every pair would: a packet keeps the VL its SL has at the HCAs
    /// (AD-06) instead of collapsing to VL0 at the first switch.
    pub fn set_static_sl2vl(&mut self, table: SlToVlTable) {
        for t in &mut self.sl2vl {
            *t = table;
        }
    }

    /// Static subnet: port `p`, its link up (Init), goes Active as an SM's
    /// PortInfo Set to Armed and then Active would take it (IBA 7.2); a port
    /// that is Down stays Down.
    pub fn activate(&mut self, p: u8) {
        let Some(port) = self.ports.get_mut(usize::from(p)).filter(|_| p != 0) else {
            return;
        };
        let pi = &mut port.info;
        if pi.port_state == port_state::INIT || pi.port_state == port_state::ARMED {
            pi.port_state = port_state::ACTIVE;
            self.port_state_changed();
        }
    }

    /// Handles one packet (LRH through VCRC) that arrived on physical port
    /// `in_port`, appending what goes out to `out`. Never panics; every packet
    /// either goes out or is counted as a drop.
    pub fn handle_packet(&mut self, pkt: &[u8], in_port: u8, now: Time, out: &mut Vec<SwitchOut>) {
        self.expire_lease(now);
        if in_port == 0 || in_port > self.node.num_ports {
            return self.drop(SwitchDrop::NoSuchPort);
        }
        let ip = usize::from(in_port);
        if self.port_disabled(in_port) {
            // IBA 14.2.5.6: a Disabled port's PHY is off; what its partner
            // sent before it noticed is not received.
            return self.drop(SwitchDrop::PortDisabled);
        }
        let Ok(lrh_view) = Lrh::new_checked(pkt) else {
            self.port_counters[ip].rcv_errors += 1;
            return self.drop(SwitchDrop::Malformed);
        };
        let words = usize::from(lrh_view.pkt_len());
        // The link layer's checks (IBA 7.7.8, 7.8.2): length, then VCRC. A switch
        // does not check the ICRC of what it only forwards.
        if words * 4 + VCRC_LEN != pkt.len()
            || vcrc(&pkt[..words * 4]).to_le_bytes() != pkt[words * 4..]
        {
            self.port_counters[ip].rcv_errors += 1;
            return self.drop(SwitchDrop::Malformed);
        }
        if self.ports[ip].info.port_state == port_state::DOWN {
            // No link, no packet: a driver bug; counted, not forwarded.
            return self.drop(SwitchDrop::IngressNotActive);
        }
        let pc = &mut self.port_counters[ip];
        pc.rcv_packets = pc.rcv_packets.saturating_add(1);
        pc.rcv_data_words = pc.rcv_data_words.saturating_add(words as u64);
        let dlid = lrh_view.dlid();
        if lrh_view.vl() == VL15 {
            return self.handle_vl15(pkt, in_port, now, out);
        }
        let st = self.ports[ip].info.port_state;
        if st == port_state::ARMED {
            // IBA 7.2: an Armed port goes Active on the first data packet it receives.
            self.ports[ip].info.port_state = port_state::ACTIVE;
            self.port_state_changed();
        } else if st != port_state::ACTIVE {
            return self.drop(SwitchDrop::IngressNotActive);
        }
        if (MLID_BASE..PERMISSIVE_LID).contains(&dlid) {
            return self.multicast(pkt, dlid, in_port, words, out);
        }
        if self.is_own_lid(dlid) {
            return self.for_switch(pkt, in_port, now, out);
        }
        let Some(port) = self.lft_port(dlid) else {
            return self.drop(SwitchDrop::NoRoute);
        };
        self.send_data(pkt, in_port, port, words, out);
    }

    /// The SLtoVLMappingTable of (`in_port`, `out_port`) (IBA 14.2.5.8), if
    /// both are ports of the switch.
    pub fn sl2vl(&self, in_port: u8, out_port: u8) -> Option<&SlToVlTable> {
        let n = usize::from(self.node.num_ports) + 1;
        let (i, o) = (usize::from(in_port), usize::from(out_port));
        (i < n && o < n).then(|| &self.sl2vl[i * n + o])
    }

    fn sl2vl_mut(&mut self, in_port: u8, out_port: u8) -> Option<&mut SlToVlTable> {
        let n = usize::from(self.node.num_ports) + 1;
        let (i, o) = (usize::from(in_port), usize::from(out_port));
        (i < n && o < n).then(|| &mut self.sl2vl[i * n + o])
    }

    /// Forwards a data packet from `in_port` out of `out_port` on the VL the
    /// (in, out) SLtoVLMappingTable gives its LRH:SL (IBA 7.6.6): the same
    /// bytes if the VL stays, else LRH:VL rewritten and the VCRC (which covers
    /// it; the ICRC does not) computed again. A VL the egress port does not
    /// operate, or VL15, discards it.
    fn send_data(
        &mut self,
        pkt: &[u8],
        in_port: u8,
        out_port: u8,
        words: usize,
        out: &mut Vec<SwitchOut>,
    ) {
        let sl = usize::from(pkt[1] >> 4);
        let vl = self.sl2vl(in_port, out_port).map_or(VL15, |t| t.0[sl]);
        let ops = data_vls(self.ports[usize::from(out_port)].info.operational_vls);
        if vl == VL15 || vl >= ops {
            let pc = &mut self.port_counters[usize::from(out_port)];
            pc.xmit_discards = pc.xmit_discards.saturating_add(1);
            return self.drop(SwitchDrop::EgressVlNotOperational);
        }
        if vl == pkt[0] >> 4 {
            return self.send(out_port, Egress::Same, words, true, out);
        }
        let mut b = pkt.to_vec().into_boxed_slice();
        b[0] = vl << 4 | (b[0] & 0x0f);
        let crc = vcrc(&b[..words * 4]).to_le_bytes();
        b[words * 4..].copy_from_slice(&crc);
        self.send(out_port, Egress::New(b), words, true, out);
    }

    /// The LFT's egress port for a unicast LID: none for LID 0, the permissive LID,
    /// a LID above LinearFDBTop or past the table, or an entry naming no physical
    /// port.
    fn lft_port(&self, dlid: u16) -> Option<u8> {
        if dlid == 0 || dlid >= MLID_BASE || dlid > self.info.linear_fdb_top {
            return None;
        }
        let p = *self.lft.get(usize::from(dlid))?;
        (p != 0 && p <= self.node.num_ports).then_some(p)
    }

    fn multicast(
        &mut self,
        pkt: &[u8],
        mlid: u16,
        in_port: u8,
        words: usize,
        out: &mut Vec<SwitchOut>,
    ) {
        let idx = usize::from(mlid - MLID_BASE);
        let ports: Vec<u8> = (1..=self.node.num_ports)
            .filter(|&p| {
                let pos = usize::from(p) / MFT_POSITION_PORTS;
                let bit = usize::from(p) % MFT_POSITION_PORTS;
                idx < self.mft_mlids()
                    && p != in_port
                    && self.mft_mask(idx, pos as u8) & (1 << bit) != 0
            })
            .collect();
        if ports.is_empty() {
            return self.drop(SwitchDrop::NoRoute);
        }
        for p in ports {
            self.send_data(pkt, in_port, p, words, out);
        }
    }

    /// Sends by physical port `port`: a data packet only if the port is Active, an
    /// SMP if its link is up (VL15 passes in Init and Armed, IBA 7.2). A refusal is
    /// counted per reason and in the port's PortXmitDiscards.
    fn send(&mut self, port: u8, pkt: Egress, words: usize, data: bool, out: &mut Vec<SwitchOut>) {
        let p = usize::from(port);
        let st = self.ports[p].info.port_state;
        let why = if st == port_state::DOWN {
            Some(SwitchDrop::EgressDown)
        } else if data && st != port_state::ACTIVE {
            Some(SwitchDrop::EgressNotActive)
        } else {
            None
        };
        let pc = &mut self.port_counters[p];
        if let Some(why) = why {
            pc.xmit_discards = pc.xmit_discards.saturating_add(1);
            return self.drop(why);
        }
        pc.xmit_packets = pc.xmit_packets.saturating_add(1);
        pc.xmit_data_words = pc.xmit_data_words.saturating_add(words as u64);
        out.push(SwitchOut { port, packet: pkt });
    }

    /// A data packet for the switch's own LID: a PerfMgt GMP to QP1 goes to the
    /// PMA, a baseboard management one to the BMA (AD-12); the response goes
    /// back to the requester's SLID and QP (the DETH's source QP) with the request's SL, VL and P_Key, by the LFT (or out of the
    /// ingress port if the LFT has no entry for the requester). Anything else is
    /// counted as `ToSwitch`.
    fn for_switch(&mut self, pkt: &[u8], in_port: u8, now: Time, out: &mut Vec<SwitchOut>) {
        let Some(req) = parse_gmp(pkt) else {
            return self.drop(SwitchDrop::ToSwitch);
        };
        let payload = req.transport.payload;
        let mad = if payload.get(1) == Some(&CLASS_BM) {
            // The BMA counts its own drops and replies.
            match self.bma.handle_mad(payload, now) {
                Some(m) => *m,
                None => return,
            }
        } else if payload.get(1) == Some(&CLASS_CC) {
            // So does the CC agent (IBA A10.4).
            match self.cca.handle_mad(payload, now) {
                Some(m) => *m,
                None => return,
            }
        } else {
            let Some(mad) = pma::answer(payload, &mut self.port_counters) else {
                return self.drop(SwitchDrop::ToSwitch);
            };
            self.counters.pma_replies += 1;
            if mad[4..6] != [0, 0] {
                self.counters.pma_error_replies += 1;
            }
            mad
        };
        let src_qp = req.transport.ext.deth.map_or(0, |d| d.src_qp);
        let lrh = LrhRepr {
            vl: req.lrh.vl,
            sl: req.lrh.sl,
            dlid: req.lrh.slid,
            slid: req.lrh.dlid,
        };
        let deth = DethRepr {
            qkey: pma::GSI_QKEY,
            src_qp: pma::GSI_QP,
        };
        let port = self.lft_port(req.lrh.slid).unwrap_or(in_port);
        self.send_mad(port, lrh, (req.transport.bth.pkey, src_qp), deth, &mad, out);
    }

    fn vl15_drop(&mut self, in_port: u8, why: SwitchDrop) {
        let pc = &mut self.port_counters[usize::from(in_port)];
        pc.vl15_dropped = pc.vl15_dropped.saturating_add(1);
        self.drop(why);
    }

    /// A VL15 packet: it must be an SMP (UD SEND Only to QP0, a 256-byte MAD of class
    /// 0x01 or 0x81, IBA 14.2.1). LID-routed: answered if for this switch, else
    /// forwarded by the LFT. Directed route: through `switch_hop`, unless the LRH
    /// names another node (a LID-routed part: forwarded by the LFT).
    fn handle_vl15(&mut self, pkt: &[u8], in_port: u8, now: Time, out: &mut Vec<SwitchOut>) {
        let Some((lrh, smp)) = parse_smp(pkt) else {
            return self.vl15_drop(in_port, SwitchDrop::Vl15NotSmp);
        };
        let words = pkt.len() / 4;
        let for_me = lrh.dlid == PERMISSIVE_LID || self.is_own_lid(lrh.dlid);
        if !for_me {
            let Some(port) = self.lft_port(lrh.dlid) else {
                return self.vl15_drop(in_port, SwitchDrop::NoRoute);
            };
            return self.send(port, Egress::Same, words, false, out);
        }
        let mut smp = smp;
        match &mut smp.route {
            SmpRoute::Lid => self.respond(lrh, smp, in_port, now, out),
            SmpRoute::Directed(d) => {
                // The end of a LID-routed tail (C14-9:4): the SMP is this switch's.
                if !d.direction
                    && d.hop_cnt > 0
                    && d.hop_ptr == d.hop_cnt.wrapping_add(1)
                    && d.dr_dlid != PERMISSIVE_LID
                {
                    return self.respond(lrh, smp, in_port, now, out);
                }
                match dr::switch_hop(d, in_port, self.node.num_ports) {
                    Ok(SwitchHop::Forward(p)) => self.send_smp(p, lrh, &smp, out),
                    Ok(SwitchHop::Local) if !d.direction => {
                        self.respond(lrh, smp, in_port, now, out)
                    }
                    Ok(SwitchHop::Local) => self.vl15_drop(in_port, SwitchDrop::NoSm),
                    Ok(SwitchHop::LidRoute(lid)) => {
                        let me = self.lid_or_permissive();
                        self.send_lid_routed(lid, me, &smp, in_port, out)
                    }
                    Err(e) => self.dr_drop(in_port, e),
                }
            }
        }
    }

    fn lid_or_permissive(&self) -> u16 {
        match self.lid() {
            0 => PERMISSIVE_LID,
            l => l,
        }
    }

    fn dr_drop(&mut self, in_port: u8, e: DrDrop) {
        self.counters.dr_drops[e.index()] += 1;
        self.vl15_drop(in_port, SwitchDrop::BadDrPath);
    }

    /// The SMA answers; the response goes back the way the request came.
    fn respond(
        &mut self,
        req_lrh: LrhRepr,
        smp: SmpRepr,
        in_port: u8,
        now: Time,
        out: &mut Vec<SwitchOut>,
    ) {
        let mut resp = match sma::answer(self, smp, in_port, now) {
            Ok(Some(r)) => r,
            Ok(None) => return,
            Err(why) => return self.vl15_drop(in_port, why),
        };
        self.counters.sma_replies += 1;
        let me = self.lid_or_permissive();
        match &mut resp.route {
            SmpRoute::Lid => self.send_lid_routed(req_lrh.slid, me, &resp, in_port, out),
            SmpRoute::Directed(d) if d.dr_dlid != PERMISSIVE_LID => {
                // Reached through a LID-routed tail: back LID-routed to the node that
                // ended the directed part (C14-13:1 happens there).
                d.direction = true;
                self.send_lid_routed(req_lrh.slid, me, &resp, in_port, out)
            }
            SmpRoute::Directed(d) => match dr::switch_respond(d, self.node.num_ports) {
                Ok(SwitchHop::Forward(p)) => {
                    // Directed route: both LRH LIDs permissive, as the HCA's SMA.
                    let lrh = LrhRepr {
                        vl: VL15,
                        sl: 0,
                        dlid: PERMISSIVE_LID,
                        slid: PERMISSIVE_LID,
                    };
                    self.send_smp(p, lrh, &resp, out)
                }
                Ok(_) => self.vl15_drop(in_port, SwitchDrop::NoSm),
                Err(e) => self.dr_drop(in_port, e),
            },
        }
    }

    /// Sends an SMP LID-routed to `dlid` by the LFT.
    fn send_lid_routed(
        &mut self,
        dlid: u16,
        slid: u16,
        smp: &SmpRepr,
        in_port: u8,
        out: &mut Vec<SwitchOut>,
    ) {
        let lrh = LrhRepr {
            vl: VL15,
            sl: 0,
            dlid,
            slid,
        };
        match self.lft_port(dlid) {
            Some(p) => self.send_smp(p, lrh, smp, out),
            None => self.vl15_drop(in_port, SwitchDrop::NoRoute),
        }
    }

    // ---- the SMA's timers and traps (AD-12) ----

    /// Clears port 0's M_KeyProtectBits once the lease has run out (IBA 14.2.4.2).
    fn expire_lease(&mut self, now: Time) {
        if self.lease.expire(&mut self.ports[0].info, now) {
            self.counters.lease_expiries += 1;
        }
    }

    fn queue_trap(&mut self, kind: (u8, u16), details: [u8; 54], now: Time) {
        let pi = &self.ports[0].info;
        if let Err(why) = self
            .traps
            .queue(pi, self.node.node_type, kind, details, now)
        {
            self.count_unqueued(why);
        }
    }

    /// A trap the queue refused: no SM to send it to, or the queue full.
    fn count_unqueued(&mut self, why: SmaDrop) {
        match why {
            SmaDrop::NoSmLid => self.counters.traps_no_sm += 1,
            _ => self.counters.traps_queue_full += 1,
        }
    }

    /// Traps sent and not yet repressed.
    pub fn pending_traps(&self) -> usize {
        self.traps.len()
    }

    /// Runs the timers due at `now` (the M_Key and B_Key leases) and appends the
    /// traps due (first sends and resends), each LID-routed by the LFT to the SM
    /// that port 0's PortInfo names, at its SL. A trap with no route is counted
    /// as a `NoRoute` drop (in port 0's VL15Dropped) and sent again at its next
    /// resend; one sent [`MAX_TRAP_SENDS`] times is given up (`traps_abandoned`)
    /// when its next resend is due.
    pub fn poll_transmit(&mut self, now: Time, out: &mut Vec<SwitchOut>) {
        self.expire_lease(now);
        self.bma.handle_timeout(now);
        self.cca.handle_timeout(now);
        self.counters.traps_abandoned += self.traps.give_up(now);
        while let Some(t) = self.traps.poll_transmit(&self.ports[0].info, now) {
            self.counters.traps_sent += 1;
            let lrh = LrhRepr {
                vl: VL15,
                sl: t.sl,
                dlid: t.dlid,
                slid: self.lid_or_permissive(),
            };
            match self.lft_port(t.dlid) {
                Some(p) => {
                    let deth = DethRepr { qkey: 0, src_qp: 0 };
                    self.send_mad(p, lrh, (0xffff, 0), deth, &t.mad[..], out);
                }
                None => self.vl15_drop(0, SwitchDrop::NoRoute),
            }
        }
    }

    /// When [`Switch::poll_transmit`] next has work: a trap send or give-up, or
    /// the end of the M_Key or B_Key lease.
    pub fn poll_timeout(&self) -> Option<Time> {
        [
            self.lease.deadline(),
            self.traps.next_send(),
            self.bma.poll_timeout(),
            self.cca.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Sends an SMP with a (possibly) new LRH and MAD: UD SEND Only to QP0 on VL15,
    /// both CRCs computed again.
    fn send_smp(&mut self, port: u8, lrh: LrhRepr, smp: &SmpRepr, out: &mut Vec<SwitchOut>) {
        let mad = smp.to_bytes();
        let deth = DethRepr { qkey: 0, src_qp: 0 };
        self.send_mad(port, lrh, (0xffff, 0), deth, &mad, out);
    }

    /// Sends a MAD as a UD SEND Only with `lrh`, the BTH's (P_Key, DestQP) and
    /// `deth`, both CRCs computed; a data packet unless on VL15.
    fn send_mad(
        &mut self,
        port: u8,
        lrh: LrhRepr,
        (pkey, dest_qp): (u16, u32),
        deth: DethRepr,
        mad: &[u8],
        out: &mut Vec<SwitchOut>,
    ) {
        let data = lrh.vl != VL15;
        let repr = PacketRepr {
            lrh,
            grh: None,
            transport: TransportRepr {
                bth: crate::wire::BthRepr {
                    opcode: Opcode::UD_SEND_ONLY,
                    solicited: false,
                    mig_req: false,
                    pkey,
                    fecn: false,
                    becn: false,
                    dest_qp,
                    ack_req: false,
                    psn: 0,
                },
                ext: ExtHeaders {
                    deth: Some(deth),
                    ..ExtHeaders::default()
                },
                payload: mad,
            },
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        if repr.emit(&mut buf).is_err() {
            // Built from parsed, in-range values: cannot happen; counted all the same.
            return self.drop(SwitchDrop::Malformed);
        }
        let words = (buf.len() - VCRC_LEN) / 4;
        self.send(port, Egress::New(buf.into_boxed_slice()), words, data, out);
    }
}

/// The data VLs a PortInfo:OperationalVLs (or VLCap) value names (IBA
/// 14.2.5.6: 1 VL0, 2 VL0-1, 3 VL0-3, 4 VL0-7, 5 VL0-14; others none).
fn data_vls(code: u8) -> u8 {
    match code {
        1..=4 => 1 << (code - 1),
        5 => 15,
        _ => 0,
    }
}

/// A GMP for the switch's GSI: IBA local, UD SEND Only to QP1 with the GSI Q_Key
/// (IBA 13.5.1: a datagram to QP1 with another Q_Key is dropped), CRCs good, a
/// 256-byte MAD.
fn parse_gmp(pkt: &[u8]) -> Option<PacketRepr<'_>> {
    let lrh = Lrh::new_checked(pkt).ok()?;
    if lrh.lnh() != Lnh::IbaLocal {
        return None;
    }
    let p = PacketRepr::parse(pkt).ok()?;
    let t = &p.transport;
    let qkey_ok = t.ext.deth.is_some_and(|d| d.qkey == pma::GSI_QKEY);
    (t.bth.opcode == Opcode::UD_SEND_ONLY
        && t.bth.dest_qp == pma::GSI_QP
        && qkey_ok
        && t.payload.len() == MAD_LEN)
        .then_some(p)
}

/// The LRH and SMP of a VL15 packet, if it is one: IBA local, UD SEND Only to QP0,
/// CRCs good, a 256-byte MAD of a subnet management class.
fn parse_smp(pkt: &[u8]) -> Option<(LrhRepr, SmpRepr)> {
    let lrh = Lrh::new_checked(pkt).ok()?;
    if lrh.lnh() != Lnh::IbaLocal {
        return None;
    }
    let p = PacketRepr::parse(pkt).ok()?;
    let t = &p.transport;
    if t.bth.opcode != Opcode::UD_SEND_ONLY || t.bth.dest_qp != 0 || t.payload.len() != MAD_LEN {
        return None;
    }
    let view = Smp::new_checked(t.payload).ok()?;
    let smp = SmpRepr::parse(&view).ok()?;
    Some((p.lrh, smp))
}
