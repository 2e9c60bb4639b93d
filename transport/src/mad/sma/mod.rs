//! The Subnet Management Agent of one HCA port (IBA 14.2; AD-09, AD-12), sans-IO in
//! quinn-proto's shape: [`Sma::handle_mad`] takes an SMP that arrived on QP0 with
//! the port's context and `now` and returns what to send back; [`Sma::poll_transmit`]
//! gives the traps to send, [`Sma::poll_timeout`] / [`Sma::handle_timeout`] drive the
//! M_Key lease and the trap resends, [`Sma::poll_event`] the changes the SM made
//! (the device turns them into async events). Local commands ([`Sma::link_up`],
//! [`Sma::link_down`], [`Sma::data_packet_received`], [`Sma::set_capability_mask`],
//! [`Sma::modify_host_capabilities`], [`Sma::set_node_description`]) are the
//! link's and the host's inputs.
//!
//! Order of the checks on a request, each failure counted: the SMP's length and
//! class; the directed route (IBA 14.2.2); responses and traps go to the node's SM;
//! base and class version (BAD_VERSION); SMInfo to the SM; the M_Key (IBA 14.2.4);
//! the method (UNSUPPORTED_METHOD); the attribute (UNSUPPORTED_METHOD_ATTR) and its
//! handler (INVALID_FIELD).

pub(crate) mod handlers;
pub(crate) mod mkey;
pub mod port;
pub(crate) mod traps;

use std::collections::VecDeque;

use super::attr::{
    attr_id, node_type, notice_type, trap, trap128_details, trap144_change, NodeDescription,
    Trap144Details,
};
use super::dr::{self, DrDrop, HcaDeliver, HcaSend};
use super::header::{method, status, Smp, SmpRepr, SmpRoute, BASE_VERSION, SMP_CLASS_VERSION};
use super::portinfo::{cap, phys_state, port_state};
use super::{MadError, MAD_LEN, SMP_DATA_LEN};
use crate::verbs::Time;
use handlers::{Req, SetEffects};
use mkey::MkeyLease;
pub use port::PortState;
use traps::TrapQueue;

/// Traps waiting for the SM's TrapRepress at most; a new one beyond is dropped and
/// counted ([`SmaDrop::TrapQueueFull`]).
pub const MAX_PENDING_TRAPS: usize = 8;

/// Shortest interval between two sends of an unrepressed trap. The interval is
/// otherwise PortInfo:SubnetTimeOut's 4.096 us x 2^n, the subnet's propagation bound
/// the SM programs (OpenSM: 18, about 1 s); the floor keeps a zero from flooding.
pub const MIN_TRAP_RESEND_NS: u64 = 10_000_000;

/// Who the node is: what NodeInfo and NodeDescription report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    /// [`node_type`]: CA for an HCA; a switch's SMA (issue 26 item 3) will say SWITCH.
    pub node_type: u8,
    pub num_ports: u8,
    pub system_image_guid: u64,
    pub node_guid: u64,
    pub device_id: u16,
    pub revision: u32,
    /// 24 bits (an IEEE OUI).
    pub vendor_id: u32,
    pub description: NodeDescription,
}

/// Where an SMP came from, as the device's QP0 saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadContext {
    /// The port it arrived on (1 for a one-port HCA).
    pub in_port: u8,
    /// LRH:SLID: where a LID-routed response goes.
    pub slid: u16,
}

/// How a response leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyRoute {
    /// LID-routed to this LID (the request's SLID).
    Lid(u16),
    /// Directed route out of this port (LRH DLID and SLID permissive).
    Directed(u8),
    /// To this node's own SM (a directed-route SMP with hop count 0).
    LocalSm,
}

/// What [`Sma::handle_mad`] asks the caller to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmaOutput {
    /// Send this response.
    Reply {
        mad: Box<[u8; MAD_LEN]>,
        route: ReplyRoute,
    },
    /// Hand these bytes (directed-route fields updated) to the node's SM on QP0:
    /// a response or trap for it, or an SMInfo request (the SMA passes SMInfo on).
    ToSm(Box<[u8; MAD_LEN]>),
    /// Nothing to send: consumed (a TrapRepress) or dropped (counted).
    Nothing,
}

/// A trap to send to the SM: LID-routed to `dlid` at service level `sl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrapOut {
    pub mad: Box<[u8; MAD_LEN]>,
    pub dlid: u16,
    pub sl: u8,
}

/// What the SM (or the link) changed, for the device to report (AE-01 events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmaEvent {
    /// PortInfo:LID or LMC (IB_EVENT_LID_CHANGE).
    LidChanged { lid: u16, lmc: u8 },
    /// PortInfo:MasterSMLID or MasterSMSL (IB_EVENT_SM_CHANGE).
    SmChanged { sm_lid: u16, sm_sl: u8 },
    /// PortInfo:PortState (IB_EVENT_PORT_ACTIVE / PORT_ERR).
    PortStateChanged(u8),
    /// A P_KeyTable entry (IB_EVENT_PKEY_CHANGE).
    PkeyTableChanged,
    /// PortInfo:GIDPrefix (IB_EVENT_GID_CHANGE).
    GidPrefixChanged(u64),
    /// PortInfo:ClientReregister was set (IB_EVENT_CLIENT_REREGISTER).
    ClientReregister,
}

impl SmaEvent {
    fn same_kind(&self, o: &SmaEvent) -> bool {
        core::mem::discriminant(self) == core::mem::discriminant(o)
    }
}

/// Why the SMA dropped an SMP without answering (each has a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SmaDrop {
    /// Shorter than 256 bytes.
    Truncated,
    /// Not management class 0x01 or 0x81.
    NotSmp,
    /// A directed-route check failed (C14-6, C14-9, C14-13).
    BadDrPath,
    /// Failed the M_Key check (IBA 14.2.4, AD-12): no response, M_KeyViolations
    /// counted, trap 256 queued.
    BadMkey,
    /// A bad version in a method that has no response.
    BadVersion,
    /// A TrapRepress that names no pending trap.
    UnmatchedRepress,
    /// A trap that found the pending queue full.
    TrapQueueFull,
    /// A trap with no SM to send it to (MasterSMLID 0).
    NoSmLid,
}

impl SmaDrop {
    /// Every reason, in counter order.
    pub const ALL: [SmaDrop; 8] = [
        SmaDrop::Truncated,
        SmaDrop::NotSmp,
        SmaDrop::BadDrPath,
        SmaDrop::BadMkey,
        SmaDrop::BadVersion,
        SmaDrop::UnmatchedRepress,
        SmaDrop::TrapQueueFull,
        SmaDrop::NoSmLid,
    ];
    fn index(self) -> usize {
        SmaDrop::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

/// The SMA's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SmaCounters {
    drops: [u64; SmaDrop::ALL.len()],
    /// [`SmaDrop::BadDrPath`] split by reason.
    dr_drops: [u64; DrDrop::ALL.len()],
    /// Responses sent with a non-zero status.
    pub error_replies: u64,
    /// M_Key leases that ran out (protection cleared).
    pub lease_expiries: u64,
    /// Trap sends, resends included.
    pub traps_sent: u64,
    /// Traps the SM repressed.
    pub traps_repressed: u64,
}

impl SmaCounters {
    /// The count for one drop reason.
    pub fn drops(&self, why: SmaDrop) -> u64 {
        self.drops[why.index()]
    }
    /// Directed-route drops for one reason.
    pub fn dr_drops(&self, why: DrDrop) -> u64 {
        self.dr_drops[why.index()]
    }
    fn count(&mut self, why: SmaDrop) {
        self.drops[why.index()] += 1;
    }
}

/// The SMA of one HCA port.
#[derive(Debug, Clone)]
pub struct Sma {
    node: NodeIdentity,
    port: PortState,
    lease: MkeyLease,
    traps: TrapQueue,
    /// At most one pending event of each kind (the latest value): bounded.
    events: VecDeque<SmaEvent>,
    counters: SmaCounters,
}

impl Sma {
    pub fn new(node: NodeIdentity, port: PortState) -> Sma {
        Sma {
            node,
            port,
            lease: MkeyLease::default(),
            traps: TrapQueue::default(),
            events: VecDeque::new(),
            counters: SmaCounters::default(),
        }
    }

    /// The port as the SM has set it.
    pub fn port(&self) -> &PortState {
        &self.port
    }

    pub fn node(&self) -> &NodeIdentity {
        &self.node
    }

    pub fn counters(&self) -> &SmaCounters {
        &self.counters
    }

    /// Handles one SMP that arrived on QP0. Never panics; every drop is counted.
    pub fn handle_mad(&mut self, mad: &[u8], ctx: &MadContext, now: Time) -> SmaOutput {
        self.expire_lease(now);
        let view = match Smp::new_checked(mad) {
            Ok(v) => v,
            Err(_) => return self.drop(SmaDrop::Truncated),
        };
        let mut smp = match SmpRepr::parse(&view) {
            Ok(s) => s,
            Err(MadError::NotSmp) => return self.drop(SmaDrop::NotSmp),
            Err(_) => return self.drop(SmaDrop::Truncated),
        };
        if let SmpRoute::Directed(dr) = &mut smp.route {
            match dr::hca_receive(dr, ctx.in_port) {
                Ok(HcaDeliver::Sma) => {}
                Ok(HcaDeliver::Sm) => return Self::for_this_node(&smp),
                Err(e) => return self.dr_drop(e),
            }
        }
        if smp.method & method::RESPONSE != 0 || smp.method == method::TRAP {
            return Self::for_this_node(&smp);
        }
        let is_request = matches!(smp.method, method::GET | method::SET);
        if smp.base_version != BASE_VERSION || smp.class_version != SMP_CLASS_VERSION {
            if !is_request {
                return self.drop(SmaDrop::BadVersion);
            }
            return self.reply(smp, status::BAD_VERSION, None, ctx);
        }
        if smp.attr_id == attr_id::SM_INFO {
            // SMInfo is the SM's (IBA 14.2.5.13, guarded by its SM_Key, not the
            // M_Key), and goes to QP0 whatever the capability mask says: as
            // mlx4's firmware path passes SMInfo to the host (`ib_process_mad`:
            // "the SMA can't handle them"), the guest's MAD layer gives it to
            // its SM's agent (`sminfo` against OpenSM) or, with none, answers
            // UNSUPPORTED_METHOD_ATTR itself (mad.c, an unclaimed request).
            return Self::for_this_node(&smp);
        }
        let Some(mkey_matched) = self.check_mkey(&smp, now) else {
            return self.drop(SmaDrop::BadMkey);
        };
        match smp.method {
            method::GET | method::SET => self.get_or_set(smp, mkey_matched, ctx),
            method::TRAP_REPRESS => {
                self.repress(&smp);
                SmaOutput::Nothing
            }
            _ => self.reply(smp, status::UNSUPPORTED_METHOD, None, ctx),
        }
    }

    fn get_or_set(&mut self, smp: SmpRepr, mkey_matched: bool, ctx: &MadContext) -> SmaOutput {
        let Some(h) = handlers::lookup(handlers::TABLE, smp.attr_id) else {
            return self.reply(smp, status::UNSUPPORTED_METHOD_ATTR, None, ctx);
        };
        let req = Req {
            attr_mod: smp.attr_mod,
            data: &smp.data,
            in_port: ctx.in_port,
            mkey_matched,
        };
        let mut st = status::OK;
        if smp.method == method::SET {
            let Some(set) = h.set else {
                return self.reply(smp, status::UNSUPPORTED_METHOD_ATTR, None, ctx);
            };
            let mut fx = SetEffects::default();
            if let Err(e) = set(self, &req, &mut fx) {
                st = e;
            }
            self.set_effects(fx);
        }
        // A SubnGetResp to a Set carries the attribute as it is now (IBA 14.2.2).
        match (h.get)(self, &req) {
            Ok(data) => self.reply(smp, st, Some(data), ctx),
            Err(e) => self.reply(smp, if st != status::OK { st } else { e }, None, ctx),
        }
    }

    /// Builds the SubnGetResp: the request with method GetResp, the status, the
    /// attribute (or the request's data on failure) and, for a directed-route SMP, D
    /// set and the pointer moved for the way back.
    fn reply(
        &mut self,
        mut smp: SmpRepr,
        st: u16,
        data: Option<[u8; SMP_DATA_LEN]>,
        ctx: &MadContext,
    ) -> SmaOutput {
        smp.method = method::GET_RESP;
        smp.status = st;
        if let Some(d) = data {
            smp.data = d;
        }
        let route = match &mut smp.route {
            SmpRoute::Lid => ReplyRoute::Lid(ctx.slid),
            SmpRoute::Directed(dr) => match dr::hca_respond(dr, ctx.in_port) {
                Ok(HcaSend::Port) => ReplyRoute::Directed(ctx.in_port),
                Ok(HcaSend::Local) => ReplyRoute::LocalSm,
                Ok(HcaSend::LidRouted) => ReplyRoute::Lid(ctx.slid),
                Err(e) => return self.dr_drop(e),
            },
        };
        if st != status::OK {
            self.counters.error_replies += 1;
        }
        SmaOutput::Reply {
            mad: Box::new(smp.to_bytes()),
            route,
        }
    }

    /// A response or trap for this node goes to its QP0 whatever the port's
    /// capability mask, as an HCA's firmware passes every SMP that is not its
    /// SMA's to the host: a response to whoever here sent the request
    /// (ibnetdiscover and smpquery send SMPs from a port without IsSM, and
    /// Linux's MAD layer hands a response to the agent whose TID it carries,
    /// `drivers/infiniband/core/mad.c` find_mad_agent), a trap to the SM's agent
    /// if one registered for it (as mlx4's firmware, whatever IsSM says).
    fn for_this_node(smp: &SmpRepr) -> SmaOutput {
        SmaOutput::ToSm(Box::new(smp.to_bytes()))
    }

    fn drop(&mut self, why: SmaDrop) -> SmaOutput {
        self.counters.count(why);
        SmaOutput::Nothing
    }

    fn dr_drop(&mut self, e: DrDrop) -> SmaOutput {
        log::debug!("SMA: directed-route SMP dropped: {e}");
        self.counters.dr_drops[e.index()] += 1;
        self.drop(SmaDrop::BadDrPath)
    }

    // ---- M_Key (IBA 14.2.4; AD-12) ----

    /// The M_Key check ([`MkeyLease::check`]): `Some(matched)` lets the request
    /// on; `None` fails it, and trap 256 goes to the SM.
    fn check_mkey(&mut self, smp: &SmpRepr, now: Time) -> Option<bool> {
        match self.lease.check(&mut self.port.info, smp, now) {
            Ok(matched) => Some(matched),
            Err(details) => {
                self.queue_trap(notice_type::SECURITY, trap::BAD_MKEY, details, now);
                None
            }
        }
    }

    /// Clears M_KeyProtectBits once the lease has run out (IBA 14.2.4.2).
    fn expire_lease(&mut self, now: Time) {
        if self.lease.expire(&mut self.port.info, now) {
            self.counters.lease_expiries += 1;
        }
    }

    // ---- traps (IBA 14.2.5.1, 13.4.8) ----

    fn queue_trap(&mut self, ty: u8, number: u16, details: [u8; 54], now: Time) {
        let producer = self.node.node_type;
        if let Err(why) = self
            .traps
            .queue(&self.port.info, producer, (ty, number), details, now)
        {
            self.counters.count(why);
        }
    }

    /// A TrapRepress names the trap by its TID (IBA 13.4.8.1): that trap stops.
    fn repress(&mut self, smp: &SmpRepr) {
        match self.traps.repress(smp) {
            Ok(()) => self.counters.traps_repressed += 1,
            Err(why) => self.counters.count(why),
        }
    }

    /// The next trap due at `now` (first send or a resend), LID-routed to the SM.
    /// Call until `None`.
    pub fn poll_transmit(&mut self, now: Time) -> Option<TrapOut> {
        self.expire_lease(now);
        let t = self.traps.poll_transmit(&self.port.info, now)?;
        self.counters.traps_sent += 1;
        Some(t)
    }

    /// Traps sent and not yet repressed.
    pub fn pending_traps(&self) -> usize {
        self.traps.len()
    }

    /// When [`Sma::handle_timeout`] (or `poll_transmit`) next has work.
    pub fn poll_timeout(&self) -> Option<Time> {
        let trap = self.traps.next_send();
        match (self.lease.deadline(), trap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs the timers due at `now`: the M_Key lease. Trap resends come out of
    /// [`Sma::poll_transmit`].
    pub fn handle_timeout(&mut self, now: Time) {
        self.expire_lease(now);
    }

    // ---- events ----

    /// The next change for the device to report.
    pub fn poll_event(&mut self) -> Option<SmaEvent> {
        self.events.pop_front()
    }

    fn push_event(&mut self, e: SmaEvent) {
        if let Some(slot) = self.events.iter_mut().find(|x| x.same_kind(&e)) {
            *slot = e;
        } else {
            self.events.push_back(e);
        }
    }

    fn set_effects(&mut self, fx: SetEffects) {
        let pi = self.port.info;
        if let Some(ch) = fx.port_info {
            if ch.lid {
                self.push_event(SmaEvent::LidChanged {
                    lid: pi.lid,
                    lmc: pi.lmc,
                });
            }
            if ch.sm {
                self.push_event(SmaEvent::SmChanged {
                    sm_lid: pi.master_sm_lid,
                    sm_sl: pi.master_sm_sl,
                });
            }
            if ch.gid_prefix {
                self.push_event(SmaEvent::GidPrefixChanged(pi.gid_prefix));
            }
            if ch.state {
                self.push_event(SmaEvent::PortStateChanged(pi.port_state));
            }
            if ch.client_reregister {
                self.push_event(SmaEvent::ClientReregister);
            }
        }
        if fx.pkeys_changed {
            self.push_event(SmaEvent::PkeyTableChanged);
        }
    }

    // ---- local commands: the link and the host ----

    fn local_state_change(&mut self, state: u8, phys: u8, now: Time) {
        let pi = &mut self.port.info;
        let changed = pi.port_state != state;
        pi.port_state = state;
        pi.port_physical_state = phys;
        if changed {
            self.push_event(SmaEvent::PortStateChanged(state));
            // Trap 128 is a switch's (IBA 14.2.5.1): an HCA's neighbour reports it.
            if self.node.node_type == node_type::SWITCH {
                let details = trap128_details(self.port.info.lid);
                self.queue_trap(notice_type::URGENT, trap::LINK_STATE_CHANGE, details, now);
            }
        }
    }

    /// The link trained (physical LinkUp): a Down port goes to Init and waits for the
    /// SM (IBA 7.2). A Disabled port stays down until the SM sets Polling.
    pub fn link_up(&mut self, now: Time) {
        let pi = self.port.info;
        if pi.port_physical_state == phys_state::DISABLED || pi.port_state != port_state::DOWN {
            return;
        }
        self.local_state_change(port_state::INIT, phys_state::LINK_UP, now);
    }

    /// The link trained on a subnet with no SM configured (vhca's static mode,
    /// ARCHITECTURE.md §6): the LIDs the port holds are final, so the port goes
    /// on from Init to Active itself, as an SM would have moved it. Once an SM
    /// has taken the port over (MasterSMLID set) the port waits in Init for it
    /// as on any subnet ([`Sma::link_up`]).
    pub fn link_up_static(&mut self, now: Time) {
        self.link_up(now);
        if self.port.info.port_state == port_state::INIT && self.port.info.master_sm_lid == 0 {
            self.local_state_change(port_state::ACTIVE, phys_state::LINK_UP, now);
        }
    }

    /// The link went away: the port is Down, the PHY back in its default down state.
    pub fn link_down(&mut self, now: Time) {
        let pi = self.port.info;
        if pi.port_physical_state == phys_state::DISABLED {
            return;
        }
        let phys = if pi.link_down_default_state == phys_state::SLEEP {
            phys_state::SLEEP
        } else {
            phys_state::POLLING
        };
        self.local_state_change(port_state::DOWN, phys, now);
    }

    /// A packet other than an SMP arrived: an Armed port becomes Active (IBA 7.2,
    /// the Armed state's exit on the first data packet).
    pub fn data_packet_received(&mut self, now: Time) {
        if self.port.info.port_state == port_state::ARMED {
            self.local_state_change(port_state::ACTIVE, phys_state::LINK_UP, now);
        }
    }

    /// Sets the whole capability mask, with no trap: what the port supports, as
    /// its maker configures it before the port is up.
    pub fn set_capability_mask(&mut self, mask: u32) {
        self.port.info.capability_mask = mask;
    }

    /// The host announces or withdraws the agents it runs (ib_core's
    /// `ib_modify_port`: ib_umad's issm sets IsSM while an SM holds it, ib_cm
    /// sets IsCommunicationManagementSupported; mlx4 passes them to its
    /// firmware with SET_PORT): `set` then `clear` bits of
    /// PortInfo:CapabilityMask. Only [`cap::HOST_SETTABLE`] bits, and no bit in
    /// both masks; anything else is refused and nothing changes. A change
    /// queues trap 144 with the new mask (IBA 14.2.5.1, OtherLocalChanges clear)
    /// when the port advertises IsCapabilityMaskNoticeSupported, as qib's
    /// `qib_cap_mask_chg` sends it; with no SM yet (MasterSMLID 0) the trap is
    /// dropped and counted ([`SmaDrop::NoSmLid`]). Returns the mask now.
    pub fn modify_host_capabilities(
        &mut self,
        set: u32,
        clear: u32,
        now: Time,
    ) -> Result<u32, HostCapError> {
        let foreign = (set | clear) & !cap::HOST_SETTABLE;
        if foreign != 0 {
            return Err(HostCapError::NotHostSettable(foreign));
        }
        if set & clear != 0 {
            return Err(HostCapError::SetAndClear(set & clear));
        }
        let old = self.port.info.capability_mask;
        let new = (old | set) & !clear;
        self.port.info.capability_mask = new;
        if new != old && new & cap::IS_CAPABILITY_MASK_NOTICE_SUPPORTED != 0 {
            self.queue_local_changes(false, 0, now);
        }
        Ok(new)
    }

    /// The host sets the node's description (ib_core's `ib_modify_device` with
    /// IB_DEVICE_MODIFY_NODE_DESC, from sysfs `node_desc` that rdma-ndd writes;
    /// mlx4 passes it to its firmware "so it can generate a 144 trap"): what
    /// NodeDescription answers from now on. A change queues trap 144 with
    /// OtherLocalChanges and the NodeDescription change flag (IBA 1.2.1
    /// 14.2.5.1; OpenSM's trap receiver then re-reads NodeDescription, "IB Spec
    /// v1.2.1 pg 823"; qib's `qib_node_desc_chg` and ibsendtrap's
    /// `node_desc_change` send the same) when the port advertises
    /// IsOtherLocalChangesNoticeSupported. Returns whether it changed.
    pub fn set_node_description(&mut self, desc: NodeDescription, now: Time) -> bool {
        if self.node.description == desc {
            return false;
        }
        self.node.description = desc;
        if self.port.info.capability_mask & cap::IS_OTHER_LOCAL_CHANGES_NOTICE_SUPPORTED != 0 {
            self.queue_local_changes(true, trap144_change::NODE_DESCRIPTION, now);
        }
        true
    }

    /// Queues trap 144 (a Notice of type Informational, as qib and ibsendtrap
    /// send it) carrying the current CapabilityMask.
    fn queue_local_changes(&mut self, other: bool, flags: u16, now: Time) {
        let pi = &self.port.info;
        let details = Trap144Details {
            lid: pi.lid,
            other_local_changes: other,
            capability_mask: pi.capability_mask,
            change_flags: flags,
            capability_mask2: pi.capability_mask2,
        }
        .emit();
        self.queue_trap(notice_type::INFO, trap::LOCAL_CHANGES, details, now);
    }
}

/// Why [`Sma::modify_host_capabilities`] refused (nothing changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostCapError {
    /// Bits the host may not set or clear: the SMA's own (not in
    /// [`cap::HOST_SETTABLE`]).
    #[error("capability bits {0:#010x} are not the host's to change")]
    NotHostSettable(u32),
    /// Bits both to set and to clear.
    #[error("capability bits {0:#010x} both set and cleared")]
    SetAndClear(u32),
}
