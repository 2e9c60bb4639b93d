//! The port's management plane (issue 26 items 1, 2 and 4; AD-09, AD-12;
//! ARCHITECTURE.md §3a): the device's Subnet Management Agent, as a real HCA's
//! firmware runs it, and the port state it owns.
//!
//! [`Mgmt`] drives one sans-IO [`Sma`] (`transport::mad`) and is driven by
//! [`crate::port::Port`]: every packet that arrives on VL15 comes here before
//! the engine; a request is answered on the wire (LID-routed back to its SLID, or
//! directed route out of the port with both LRH LIDs permissive, IBA 14.2.2), a
//! response, trap or SMInfo for this node goes to the guest's QP0 through the
//! engine (nothing reaches a guest that has no QP0: counted). The SMA's traps and
//! M_Key lease run on the data path's clock. What the SM sets (LID, LMC, SM LID/SL,
//! P_Keys, GID prefix, SL-to-VL table, port state) is applied to the engine and
//! raised to the guest as async events ([`PortEvent`]); the port sends and takes
//! data packets only while the SM has it Active (IBA 7.2: Armed takes them, and the
//! first one moves it to Active).
//!
//! The port's Baseboard Management Agent ([`Bma`], AD-12: BKeyInfo and the
//! B_Key with its lease) answers the baseboard management class (0x05) that the
//! guest's MAD layer hands MAD_IFC from QP1, as the SMA answers SMPs; its
//! Congestion Control Agent ([`CcAgent`], IBA Annex A10.4) the congestion
//! control class (0x21) the same way.
//!
//! The subnet mode ([`SubnetMode`], the fabric file's `subnet`) picks who brings the
//! port up: `static` (vhca's default) comes up Active with the file's LIDs, and
//! an SM may later take it over; `sm` waits in Init for an SM.

use std::collections::VecDeque;

use transport::engine::{Engine, PortConfig};
use transport::mad::attr::node_type;
use transport::mad::bma::{Bma, CLASS_BM};
use transport::mad::cc::CcAgent;
use transport::mad::cc_attr::CLASS_CC;
use transport::mad::header::{CLASS_SUBN_DIRECTED_ROUTE, CLASS_SUBN_LID_ROUTED};
use transport::mad::portinfo::{cap, port_state};
use transport::mad::{
    parse_qp0, smp_packet, MadContext, NodeDescription, NodeIdentity, PortState, ReplyRoute, Sma,
    SmaEvent, SmaOutput, MAD_LEN, PERMISSIVE_LID,
};
use transport::verbs::Time;
use transport::wire::LrhRepr;

/// SMPs waiting for the wire or for the guest's QP0 at most (each queue); one
/// more is dropped and counted. A round drains both, so only a flood within one
/// round of the data path meets the bound.
pub const MAX_QUEUED: usize = 256;

/// Who brings the port up (the fabric file's `subnet`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SubnetMode {
    /// The fabric file's LIDs are final: the port is Active once its link is up,
    /// and the SMA answers with the file's values; an SM may later take over.
    #[default]
    Static,
    /// A subnet manager brings the port up: it stays in Init after link up
    /// until an SM arms and activates it; the file's LIDs are initial values.
    Sm,
}

/// A change the guest's driver hears of as an async event (AE-01; the kernel's
/// IB_EVENT_*). Port active and port error go through the engine's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortEvent {
    LidChange,
    PkeyChange,
    SmChange,
    ClientReregister,
    GidChange,
}

/// What the management plane counts (exported with the device's counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MgmtCounters {
    /// SMPs taken from the wire by the SMA.
    pub smp_rx: u64,
    /// SMPs the SMA put on the wire (responses and traps).
    pub smp_tx: u64,
    /// SMPs handed to the guest's QP0.
    pub smp_to_qp0: u64,
    /// VL15 packets that were not an SMP for QP0 (IBA 7.6.4, 13.5.1).
    pub drop_not_smp: u64,
    /// SMPs for another node's LID (the LRH DLID is neither one of this port's
    /// LIDs nor the permissive LID).
    pub drop_bad_dlid: u64,
    /// SMPs for this node's SM or agent when the guest has no QP0.
    pub drop_no_qp0: u64,
    /// SMPs dropped because a queue was full ([`MAX_QUEUED`]).
    pub drop_queue_full: u64,
    /// Responses that could not be built into a packet.
    pub drop_unbuildable: u64,
    /// Data packets received while the port was neither Armed nor Active.
    pub rx_data_not_active: u64,
    /// Data packets the port did not send because it was not Active.
    pub tx_data_not_active: u64,
    /// SL-to-VL tables the SM set that name a VL the port does not have (the
    /// engine keeps its table).
    pub sl2vl_refused: u64,
    /// MAD_IFC commands.
    pub mad_ifc: u64,
}

/// What MAD_IFC answers (the ABI's `mad_ifc_flag`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MadIfcResult {
    /// Not an SMP request for the SMA: ib_core goes on as without it.
    NotHandled,
    /// The SMA took it and made no response.
    Consumed,
    /// The SMA's response.
    Reply(Box<[u8; MAD_LEN]>),
}

/// The port's management plane: its SMA and the queues between it, the wire and
/// the guest's QP0.
pub struct Mgmt {
    sma: Sma,
    bma: Bma,
    /// The port's Congestion Control Agent (class 0x21, IBA A10.4).
    cca: CcAgent,
    /// The agent's settings generation the engine has (`apply_cc`).
    cc_applied: u64,
    mode: SubnetMode,
    counters: MgmtCounters,
    to_wire: VecDeque<Vec<u8>>,
    to_qp0: VecDeque<Vec<u8>>,
    events: VecDeque<PortEvent>,
    /// Whether the port was Active when the engine last heard (AE-01).
    active: bool,
    /// The last SL-to-VL table the engine refused.
    refused_sl2vl: Option<[u8; 16]>,
    /// What the guest may change, as it was before any guest changed it.
    defaults: HostDefaults,
}

/// The host-settable capability bits and the node description a port starts
/// with, which a device reset brings back ([`Mgmt::guest_gone`]).
#[derive(Debug, Clone, Copy)]
struct HostDefaults {
    caps: u32,
    description: NodeDescription,
}

impl Mgmt {
    /// The management plane of a port configured as `port` (the fabric file's
    /// LID, LMC, P_Keys, SL-to-VL table), named `name` in NodeDescription. The
    /// link counts as up: a static port starts Active, an SM-mode one in Init.
    pub fn new(port: &PortConfig, name: &str, mode: SubnetMode) -> Mgmt {
        let guid = port.port_guid;
        let node = NodeIdentity {
            node_type: node_type::CA,
            num_ports: 1,
            system_image_guid: guid,
            node_guid: guid,
            device_id: u16::try_from(crate::abi::ident::ident::PCI_DEVICE_ID).unwrap_or(0),
            revision: crate::abi::ident::ident::PCI_REVISION,
            // The GUID's company ID (EUI-64: its top 24 bits).
            vendor_id: ((guid >> 40) & 0xff_ffff) as u32,
            description: NodeDescription::from_text(&format!("vhca {name}")),
        };
        let cap = u16::try_from(port.pkeys.len()).unwrap_or(u16::MAX);
        let mut st = PortState::new(1, guid, 1, cap);
        let n = st.pkeys.len().min(port.pkeys.len());
        st.pkeys[..n].copy_from_slice(&port.pkeys[..n]);
        st.info.lid = port.lid;
        st.info.lmc = port.lmc;
        st.info.gid_prefix = port.gid_prefix;
        st.info.vl_cap = transport::engine::vl_cap(port.data_vls);
        st.info.operational_vls = st.info.vl_cap;
        st.sl2vl = transport::mad::SlToVlTable(port.sl2vl);
        st.info.port_state = port_state::DOWN;
        // Issue 27 item 3: MTUCap is what the underlay carries (the engine's
        // largest path MTU), so an SM's NeighborMTU cannot pass it (the Set
        // is refused); without an SM the active MTU is that value too.
        st.info.mtu_cap = port.max_mtu as u8;
        st.info.neighbor_mtu = port.max_mtu as u8;
        // The guest's agents and description reach the SMA (SET_PORT_CAPS,
        // SET_NODE_DESC), and their changes are trapped: trap 144 for both.
        st.info.capability_mask |=
            cap::IS_CAPABILITY_MASK_NOTICE_SUPPORTED | cap::IS_OTHER_LOCAL_CHANGES_NOTICE_SUPPORTED;
        let defaults = HostDefaults {
            caps: st.info.capability_mask & cap::HOST_SETTABLE,
            description: node.description,
        };
        let mut sma = Sma::new(node, st);
        let now = Time(0);
        match mode {
            SubnetMode::Static => sma.link_up_static(now),
            SubnetMode::Sm => sma.link_up(now),
        }
        // The start is no change to report.
        while sma.poll_event().is_some() {}
        let active = sma.port().info.port_state == port_state::ACTIVE;
        Mgmt {
            sma,
            bma: Bma::new(),
            cca: CcAgent::ca(),
            cc_applied: 0,
            mode,
            counters: MgmtCounters::default(),
            to_wire: VecDeque::new(),
            to_qp0: VecDeque::new(),
            events: VecDeque::new(),
            active,
            refused_sl2vl: None,
            defaults,
        }
    }

    pub fn sma(&self) -> &Sma {
        &self.sma
    }

    /// The port's Baseboard Management Agent.
    pub fn bma(&self) -> &Bma {
        &self.bma
    }

    /// The port's Congestion Control Agent: what the CC manager (or the
    /// fabric file) set for the port's congestion control.
    pub fn cc_agent(&self) -> &CcAgent {
        &self.cca
    }
    pub fn cc_agent_mut(&mut self) -> &mut CcAgent {
        &mut self.cca
    }

    pub fn mode(&self) -> SubnetMode {
        self.mode
    }

    pub fn counters(&self) -> &MgmtCounters {
        &self.counters
    }

    /// Every counter of the management plane and its SMA, named for the
    /// counter report (`counters_out`, the `mgmt` line / object): this
    /// module's drops and traffic, the SMA's drops by reason (directed-route
    /// drops by rule), its error responses, traps and M_Key lease expiries,
    /// PortInfo:M_KeyViolations, and the BMA's drops, responses, B_Key lease
    /// expiries and B_KeyViolations.
    pub fn counter_pairs(&self) -> Vec<(&'static str, u64)> {
        use transport::mad::{DrDrop, SmaDrop};
        let c = &self.counters;
        let mut v = vec![
            ("smp_rx", c.smp_rx),
            ("smp_tx", c.smp_tx),
            ("smp_to_qp0", c.smp_to_qp0),
            ("drop_not_smp", c.drop_not_smp),
            ("drop_bad_dlid", c.drop_bad_dlid),
            ("drop_no_qp0", c.drop_no_qp0),
            ("drop_queue_full", c.drop_queue_full),
            ("drop_unbuildable", c.drop_unbuildable),
            ("rx_data_not_active", c.rx_data_not_active),
            ("tx_data_not_active", c.tx_data_not_active),
            ("sl2vl_refused", c.sl2vl_refused),
            ("mad_ifc", c.mad_ifc),
        ];
        let s = self.sma.counters();
        for d in SmaDrop::ALL {
            let name = match d {
                SmaDrop::Truncated => "sma_drop_truncated",
                SmaDrop::NotSmp => "sma_drop_not_smp",
                SmaDrop::BadDrPath => "sma_drop_bad_dr_path",
                SmaDrop::BadMkey => "sma_drop_bad_mkey",
                SmaDrop::BadVersion => "sma_drop_bad_version",
                SmaDrop::UnmatchedRepress => "sma_drop_unmatched_repress",
                SmaDrop::TrapQueueFull => "sma_drop_trap_queue_full",
                SmaDrop::NoSmLid => "sma_drop_no_sm_lid",
            };
            v.push((name, s.drops(d)));
        }
        for d in DrDrop::ALL {
            let name = match d {
                DrDrop::HopCountTooLarge => "sma_dr_hop_count_too_large",
                DrDrop::BadHopPointer => "sma_dr_bad_hop_pointer",
                DrDrop::WrongPort => "sma_dr_wrong_port",
                DrDrop::NoSuchPort => "sma_dr_no_such_port",
                DrDrop::NotPermissive => "sma_dr_not_permissive",
            };
            v.push((name, s.dr_drops(d)));
        }
        v.extend([
            ("sma_error_replies", s.error_replies),
            ("sma_lease_expiries", s.lease_expiries),
            ("sma_traps_sent", s.traps_sent),
            ("sma_traps_repressed", s.traps_repressed),
            (
                "mkey_violations",
                u64::from(self.sma.port().info.mkey_violations),
            ),
        ]);
        // The BMA (AD-12): its drops by reason, responses, B_Key lease
        // expiries and B_KeyViolations.
        use transport::mad::bma::BmaDrop;
        let b = self.bma.counters();
        for d in BmaDrop::ALL {
            let name = match d {
                BmaDrop::NotBm => "bma_drop_not_bm",
                BmaDrop::Response => "bma_drop_response",
                BmaDrop::BadVersion => "bma_drop_bad_version",
                BmaDrop::BadBkey => "bma_drop_bad_bkey",
                BmaDrop::UnmatchedRepress => "bma_drop_unmatched_repress",
            };
            v.push((name, b.drops(d)));
        }
        v.extend([
            ("bma_replies", b.replies),
            ("bma_error_replies", b.error_replies),
            ("bma_lease_expiries", b.lease_expiries),
            (
                "bkey_violations",
                u64::from(self.bma.bkey_info().violations),
            ),
        ]);
        // The CC agent (IBA A10.4): the same, for the CC_Key.
        v.extend(self.cca.named_counters());
        v
    }

    /// PortInfo:PortState (IBA 14.2.5.6).
    pub fn port_state(&self) -> u8 {
        self.sma.port().info.port_state
    }

    /// PortInfo:PortPhysicalState.
    pub fn phys_state(&self) -> u8 {
        self.sma.port().info.port_physical_state
    }

    /// Whether data packets may go out (IBA 7.2: Active only).
    pub fn sends_data(&self) -> bool {
        self.port_state() == port_state::ACTIVE
    }

    /// The link came up or went down (`Link::is_up`).
    pub fn link_changed(&mut self, up: bool, now: Time, engine: &mut Engine) {
        match (up, self.mode) {
            (true, SubnetMode::Static) => self.sma.link_up_static(now),
            (true, SubnetMode::Sm) => self.sma.link_up(now),
            (false, _) => self.sma.link_down(now),
        }
        self.apply(engine);
    }

    /// A data packet arrived (not VL15): whether the engine may have it. Armed
    /// takes it and becomes Active (IBA 7.2); Down and Init drop it (counted).
    pub fn data_packet_received(&mut self, now: Time, engine: &mut Engine) -> bool {
        match self.port_state() {
            port_state::ACTIVE => true,
            port_state::ARMED => {
                self.sma.data_packet_received(now);
                self.apply(engine);
                true
            }
            _ => {
                self.counters.rx_data_not_active += 1;
                false
            }
        }
    }

    /// A data packet the engine built and the port does not send (not Active).
    pub fn count_tx_not_active(&mut self) {
        self.counters.tx_data_not_active += 1;
    }

    /// A packet that arrived on VL15: to the SMA; its answer queued for the wire
    /// or the guest's QP0. True when it goes on to QP0 (the engine will count
    /// it as received).
    pub fn on_vl15(&mut self, pkt: &[u8], now: Time, engine: &mut Engine) -> bool {
        let p = match parse_qp0(pkt) {
            Ok(p) => p,
            Err(e) => {
                log::debug!("mgmt: VL15 packet dropped: {e}");
                self.counters.drop_not_smp += 1;
                return false;
            }
        };
        let me = engine.port();
        let mask = !((1u16 << me.lmc.min(7)) - 1);
        if p.lrh.dlid != PERMISSIVE_LID && p.lrh.dlid & mask != me.lid & mask {
            self.counters.drop_bad_dlid += 1;
            return false;
        }
        let queued = self.to_qp0.len();
        self.counters.smp_rx += 1;
        let ctx = MadContext {
            in_port: 1,
            slid: p.lrh.slid,
        };
        match self.sma.handle_mad(p.mad, &ctx, now) {
            SmaOutput::Reply { mad, route } => self.send_reply(&mad, route, p.lrh.sl, engine),
            SmaOutput::ToSm(mad) => {
                let lrh = p.lrh;
                self.queue_qp0(lrh, p.pkey, p.src_qp, &mad, engine);
            }
            SmaOutput::Nothing => {}
        }
        self.apply(engine);
        self.to_qp0.len() > queued
    }

    /// Queues a response of the SMA for the wire (or, routed to this node's own
    /// SM, for QP0).
    fn send_reply(&mut self, mad: &[u8; MAD_LEN], route: ReplyRoute, sl: u8, engine: &Engine) {
        let me = engine.port().lid;
        let (dlid, slid) = match route {
            ReplyRoute::Lid(dlid) => (dlid, me),
            // Directed route: both LRH LIDs permissive (IBA 14.2.2.1).
            ReplyRoute::Directed(_) => (PERMISSIVE_LID, PERMISSIVE_LID),
            ReplyRoute::LocalSm => {
                let lrh = LrhRepr {
                    vl: transport::engine::VL15,
                    sl,
                    dlid: PERMISSIVE_LID,
                    slid: PERMISSIVE_LID,
                };
                return self.queue_qp0(lrh, 0xffff, 0, mad, engine);
            }
        };
        let lrh = LrhRepr {
            vl: transport::engine::VL15,
            sl,
            dlid,
            slid,
        };
        self.queue_wire(lrh, mad);
    }

    fn queue_wire(&mut self, lrh: LrhRepr, mad: &[u8; MAD_LEN]) {
        let Some(pkt) = smp_packet(lrh, 0xffff, 0, mad) else {
            self.counters.drop_unbuildable += 1;
            return;
        };
        if self.to_wire.len() >= MAX_QUEUED {
            self.counters.drop_queue_full += 1;
            return;
        }
        self.to_wire.push_back(pkt);
    }

    /// Queues an SMP for the guest's QP0 as the packet it arrived in (the LRH and
    /// source QP kept, the MAD as the SMA left it).
    fn queue_qp0(
        &mut self,
        lrh: LrhRepr,
        pkey: u16,
        src_qp: u32,
        mad: &[u8; MAD_LEN],
        engine: &Engine,
    ) {
        if !engine.has_smi_qp() {
            self.counters.drop_no_qp0 += 1;
            return;
        }
        let Some(pkt) = smp_packet(lrh, pkey, src_qp, mad) else {
            self.counters.drop_unbuildable += 1;
            return;
        };
        if self.to_qp0.len() >= MAX_QUEUED {
            self.counters.drop_queue_full += 1;
            return;
        }
        self.to_qp0.push_back(pkt);
    }

    /// The next SMP for the wire: a response or a trap due at `now`.
    pub fn poll_wire(&mut self, now: Time, engine: &Engine) -> Option<Vec<u8>> {
        if self.to_wire.is_empty() {
            while let Some(t) = self.sma.poll_transmit(now) {
                let lrh = LrhRepr {
                    vl: transport::engine::VL15,
                    sl: t.sl,
                    dlid: t.dlid,
                    slid: engine.port().lid,
                };
                self.queue_wire(lrh, &t.mad);
            }
        }
        let p = self.to_wire.pop_front()?;
        self.counters.smp_tx += 1;
        Some(p)
    }

    /// The next SMP for the guest's QP0 (a packet for `Engine::handle_packet`).
    pub fn poll_qp0(&mut self) -> Option<Vec<u8>> {
        let p = self.to_qp0.pop_front()?;
        self.counters.smp_to_qp0 += 1;
        Some(p)
    }

    /// When the SMA or the BMA next has work (a trap resend, the M_Key or
    /// B_Key lease).
    pub fn poll_timeout(&self) -> Option<Time> {
        [
            self.sma.poll_timeout(),
            self.bma.poll_timeout(),
            self.cca.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn handle_timeout(&mut self, now: Time, engine: &mut Engine) {
        self.sma.handle_timeout(now);
        self.bma.handle_timeout(now);
        self.cca.handle_timeout(now);
        self.apply(engine);
    }

    /// MAD_IFC (issue 26 item 2): the guest's MAD layer hands the SMA an SMP
    /// (ib_core's `process_mad`, as mlx4/mlx5 hand theirs to the firmware), the
    /// BMA a baseboard management request (AD-12), or the CC agent a
    /// congestion control request (issue 31).
    /// Only SMP requests are the SMA's: any other class or a response is
    /// [`MadIfcResult::NotHandled`], which lets ib_core deliver it itself. The
    /// SMA's response comes back whatever its route: a hop-count-0 directed-route
    /// SMP from the local SM (`handle_outgoing_dr_smp` in Linux's
    /// `drivers/infiniband/core/mad.c`) gets its response with D set and the hop
    /// pointer back at 0 for the SM (C14-13:3); a request that came in from the
    /// wire gets what ib_core sends back with `agent_send_response`.
    pub fn mad_ifc(
        &mut self,
        mad: &[u8; MAD_LEN],
        slid: u16,
        now: Time,
        engine: &mut Engine,
    ) -> MadIfcResult {
        self.counters.mad_ifc += 1;
        let class = mad[1];
        let method = mad[3];
        if class == CLASS_BM {
            // A response or trap (a BMSend response by its attribute modifier,
            // Linux's `ib_response_mad`) is for a manager on this node, as an
            // SMP response is: ib_core's to deliver. A request is the BMA's; one
            // it drops (a bad B_Key) gets no answer from anyone.
            if !is_request(mad) {
                return MadIfcResult::NotHandled;
            }
            return match self.bma.handle_mad(mad, now) {
                Some(r) => MadIfcResult::Reply(r),
                None => MadIfcResult::Consumed,
            };
        }
        if class == CLASS_CC {
            // The congestion control class (IBA A10.4), as the BMA's: a
            // request is the CC agent's (OpenSM's CC manager sets the port's
            // CACongestionSetting and CongestionControlTable), a response is
            // for a manager here.
            if !is_request(mad) {
                return MadIfcResult::NotHandled;
            }
            let out = self.cca.handle_mad(mad, now);
            self.apply_cc(engine);
            return match out {
                Some(r) => MadIfcResult::Reply(r),
                None => MadIfcResult::Consumed,
            };
        }
        let is_smp = class == CLASS_SUBN_LID_ROUTED || class == CLASS_SUBN_DIRECTED_ROUTE;
        if !is_smp || method & transport::mad::method::RESPONSE != 0 {
            return MadIfcResult::NotHandled;
        }
        let ctx = MadContext { in_port: 1, slid };
        let out = self.sma.handle_mad(mad, &ctx, now);
        self.apply(engine);
        match out {
            SmaOutput::Reply { mad, .. } => MadIfcResult::Reply(mad),
            // SMInfo for the SM, a trap: ib_core's to deliver.
            SmaOutput::ToSm(_) => MadIfcResult::NotHandled,
            SmaOutput::Nothing => MadIfcResult::Consumed,
        }
    }

    /// SET_PORT_CAPS: the guest's ib_core announces or withdraws its agents
    /// (`modify_port`: IsSM from ib_umad's issm, IsCM from ib_cm), as mlx4 with
    /// SET_PORT; the SMA's PortInfo:CapabilityMask shows them and a change traps
    /// to the SM (`Sma::modify_host_capabilities`). Returns the mask now.
    pub fn set_port_caps(
        &mut self,
        set: u32,
        clear: u32,
        now: Time,
    ) -> Result<u32, transport::mad::HostCapError> {
        self.sma.modify_host_capabilities(set, clear, now)
    }

    /// SET_NODE_DESC: the guest's node description (sysfs `node_desc`,
    /// ib_core's `modify_device`), as mlx4 with SET_NODE; NodeDescription
    /// answers it and a change traps to the SM (`Sma::set_node_description`).
    pub fn set_node_description(&mut self, desc: NodeDescription, now: Time) -> bool {
        self.sma.set_node_description(desc, now)
    }

    /// The guest's driver is gone (a device reset, a new client): the agents
    /// it announced and the description it set go with it, as a real HCA's
    /// firmware forgets them when its driver resets it. An SM hears of the
    /// change through trap 144, as of any other (an IsSM left set would name
    /// an SM that no longer runs).
    pub fn guest_gone(&mut self, now: Time) {
        let cur = self.sma.port().info.capability_mask & cap::HOST_SETTABLE;
        let want = self.defaults.caps;
        // Both masks are host-settable and disjoint: never refused.
        let _ = self
            .sma
            .modify_host_capabilities(want & !cur, cur & !want, now);
        self.sma
            .set_node_description(self.defaults.description, now);
    }

    /// The next change to raise as an async event.
    pub fn poll_event(&mut self) -> Option<PortEvent> {
        self.events.pop_front()
    }

    fn push_event(&mut self, e: PortEvent) {
        // One pending event of each kind is enough: bounded.
        if !self.events.contains(&e) {
            self.events.push_back(e);
        }
    }

    /// Applies the SMA's changes to the engine and queues their events.
    /// Gives the engine the CC agent's settings when they changed: the port
    /// runs the IBA CCA (`transport::cc::iba`) from the first Set on.
    pub fn apply_cc(&mut self, engine: &mut Engine) {
        let g = self.cca.generation();
        if g == self.cc_applied {
            return;
        }
        self.cc_applied = g;
        engine.set_cc_iba(self.cc_params());
    }

    /// The engine's IBA CCA parameters from the CC agent, once anything set
    /// it (a CC manager's Set, the fabric file's `[ib_cc]`).
    fn cc_params(&self) -> Option<transport::cc::iba::Params> {
        let a = &self.cca;
        (a.generation() != 0)
            .then(|| transport::cc::iba::Params::from_agent(a.ca_setting(), a.cct()))
    }

    pub fn apply(&mut self, engine: &mut Engine) {
        while let Some(e) = self.sma.poll_event() {
            let pi = self.sma.port().info;
            match e {
                SmaEvent::LidChanged { lid, lmc } => {
                    engine.set_port_lid(lid, lmc);
                    self.push_event(PortEvent::LidChange);
                }
                SmaEvent::SmChanged { .. } => self.push_event(PortEvent::SmChange),
                SmaEvent::PkeyTableChanged => {
                    engine.set_pkeys(&self.sma.port().pkeys);
                    self.push_event(PortEvent::PkeyChange);
                }
                SmaEvent::GidPrefixChanged(p) => {
                    engine.set_gid_prefix(p);
                    self.push_event(PortEvent::GidChange);
                }
                SmaEvent::ClientReregister => self.push_event(PortEvent::ClientReregister),
                SmaEvent::PortStateChanged(_) => {}
            }
            let active = pi.port_state == port_state::ACTIVE;
            if active != self.active {
                self.active = active;
                // AE-01: port active when the SM (or the static link) made it
                // Active, port error when it left Active.
                engine.port_changed(active);
            }
        }
        // The SL-to-VL table has no event: compared (16 bytes) after each change.
        let want = self.sma.port().sl2vl.0;
        // A VL the port lacks: the engine keeps its table (AD-06); counted once
        // per table.
        if want != engine.port().sl2vl
            && self.refused_sl2vl != Some(want)
            && engine.set_sl2vl(want).is_err()
        {
            self.counters.sl2vl_refused += 1;
            self.refused_sl2vl = Some(want);
        }
    }

    /// A new engine (device reset): it gets what the SM set.
    pub fn restore(&self, engine: &mut Engine) {
        let pi = self.sma.port().info;
        engine.set_port_lid(pi.lid, pi.lmc);
        engine.set_pkeys(&self.sma.port().pkeys);
        engine.set_gid_prefix(pi.gid_prefix);
        let _ = engine.set_sl2vl(self.sma.port().sl2vl.0);
        // Issue 31: what the CC agent holds, once anything set it.
        if let Some(p) = self.cc_params() {
            engine.set_cc_iba(Some(p));
        }
    }
}

/// A baseboard management MAD that asks for something: not a response (R bit,
/// or a BMSend with the modifier's response bit) and not a trap.
fn is_request(mad: &[u8; MAD_LEN]) -> bool {
    use transport::mad::bma::{bm_method, ATTR_MOD_RESPONSE};
    use transport::mad::method;
    let m = mad[3];
    let attr_mod = u32::from_be_bytes([mad[20], mad[21], mad[22], mad[23]]);
    m & method::RESPONSE == 0
        && m != method::TRAP
        && !(m == bm_method::SEND && attr_mod & ATTR_MOD_RESPONSE != 0)
}
