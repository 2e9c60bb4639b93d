//! The transport engine (ARCHITECTURE.md §3): owns PDs, MRs, CQs, SRQs and QPs; takes verbs,
//! received packets and timer firings as inputs; gives packets to transmit,
//! completions, events and its next deadline as outputs. Sans-IO, after quinn-proto:
//! no sockets, threads or clock inside; memory is the caller's [`Memory`].
//!
//! Per QP, three state machines, as Linux rxe's rxe_req.c, rxe_comp.c and
//! rxe_resp.c. On the send side the requester ([`requester`]) segments WQEs into
//! packets and assigns PSNs; the completer ([`completer`]) handles what comes back
//! (ACKs, NAKs, READ responses, atomic ACKs), retires WQEs and retransmits
//! (go-back-N from the first unacknowledged PSN, at once on a NAK, after the local
//! ACK timeout on silence). On the receive side the responder ([`responder`])
//! validates requests in the spec's order (rxe style), executes them and queues
//! responses in PSN order.
//!
//! This file holds the engine's types and its verbs (PDs, MRs, CQs, SRQs, QPs,
//! posting); `io.rs` its inputs and outputs besides the verbs: received packets,
//! transmit, timers and events.

mod access;
mod apm;
mod atomic_gap;
mod cc_ib;
mod cc_np;
mod completer;
mod config;
mod counters;
mod cq;
mod credits;
#[cfg(test)]
mod handle_tests;
mod ids;
mod io;
pub use io::{RxFrom, TxSlots, LENT_HEAD};
pub mod link;
mod mcast;
mod odp;
pub use mcast::{
    is_multicast_gid, is_multicast_lid, MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH,
    MAX_TOTAL_MCAST_QP_ATTACH, MULTICAST_LID_BASE, MULTICAST_QPN,
};
pub use odp::OdpCounters;
mod pacing;
mod rd;
pub use pacing::{ipd, rate_mbps, DEFAULT_PORT_MBPS};
pub use rd::{rd_qp_bytes, RdCounters, MAX_EEC, MAX_RDD, RD_WINDOW};
mod port_window;
pub use port_window::DEFAULT_PORT_WINDOW;
mod recovery;
mod reorder;
mod schedule;
pub use recovery::INITIAL_WINDOW;
pub use reorder::{
    ReorderCounters, DEFAULT_HOLD_NS as DEFAULT_REORDER_HOLD_NS, MISS_LIMIT as REORDER_MISS_LIMIT,
    PEER_SLOTS as REORDER_PEER_SLOTS, PROBE_EVERY as REORDER_PROBE_EVERY,
    SLOTS as REORDER_HOLD_SLOTS,
};
mod requester;
mod responder;
mod subnet;
mod timer_heap;
pub use subnet::SMI_QPN;
mod vl;
mod xrc;
pub use vl::{
    vl_cap, VlArbEntry, VlArbError, VlArbTables, DEFAULT_DATA_VLS, HIGH_LIMIT_UNLIMITED,
    MAX_VL_ARB_ENTRIES, VL15,
};

use std::collections::{BTreeSet, HashMap, VecDeque};

pub use config::*;
pub use counters::{Counters, NakReason, RxDrop};
use cq::{Cq, Srq};
use requester::Requester;
/// What a QP reserves in the engine's budget at creation: its state and its
/// responder's bounded queues, for READ/ATOMIC depth `max_rd_atomic`.
pub use responder::state_bound as qp_bytes;
use responder::Responder;

use crate::budget::{Budget, Charge, Held, Weigh};
use crate::memory::Memory;
use crate::mr::MrTable;
use crate::psn;
use crate::qp_state;
use crate::verbs::{
    AttrMask, Completion, Event, Handle, MwType, QpAttr, QpInit, QpState, QpType, RecvWr, SendWr,
    Time, VerbError, WcOpcode, WcStatus,
};

/// Dead transmit-schedule entries tolerated beyond twice the QPs before the
/// schedule is rebuilt (`schedule_qp`).
const SCHEDULE_SLACK: usize = 64;

/// One queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub init: QpInit,
    pub state: QpState,
    pub attr: QpAttr,
    pub rq: Held<RecvWr>,
    pub req: Requester,
    pub resp: Responder,
    /// In the transmit schedule.
    pub scheduled: bool,
    /// Its live entry in the transmit schedule (`schedule`).
    pub(crate) sched: schedule::Mark,
    /// The requester goes first next time: responses and requests of one QP
    /// take turns, so a long READ response stream does not starve the QP's own
    /// send queue until its ACK timer runs out of retries (RL-10).
    pub req_turn: bool,
    /// The time of this QP's live entry in [`Engine`]'s timer heap: never later
    /// than the requester's deadline (see [`Engine::arm`]).
    pub timer_at: Option<Time>,
    /// The QP's fixed state and its responder's bounded queues, reserved in
    /// the budget for the QP's life (see `responder::state_bound`).
    _reserved: Charge,
    /// An XRC TGT QP's XRC domain (SR-02, PV-08); `None` for other QPs.
    pub xrcd: Option<Handle>,
    /// Its part in the port window (`port_window`).
    pub(crate) port: port_window::Share,
    /// Automatic path migration state (AD-10, `apm`).
    pub apm: apm::Apm,
    /// How this QP's reorder holds ended lately (`reorder`).
    pub(crate) hold_misses: reorder::Misses,
    /// Page faults waiting for the guest (issue 29, `odp`).
    pub(crate) odp: odp::QpOdp,
}

/// The engine.
pub struct Engine {
    pub(crate) port: PortConfig,
    pub(crate) limits: Limits,
    pub(crate) mrs: MrTable,
    cqs: HashMap<Handle, Cq>,
    /// The CQs holding completions not yet polled: what a caller moving them
    /// out visits, instead of every CQ ([`Engine::ready_cqs`]).
    ready_cqs: BTreeSet<Handle>,
    srqs: HashMap<Handle, Srq>,
    /// The QPs by QPN (a hash map: `ids`).
    pub(crate) qps: ids::IdMap<u32, Qp>,
    next_handle: Handle,
    next_qpn: u32,
    events: VecDeque<Event>,
    /// QPs that may have a packet to send, round robin, a lane per VL
    /// (`schedule`).
    schedule: schedule::Schedule,
    /// Requester timers (ACK timeout RL-10, RNR wait RL-11) as a min-heap of
    /// (time, QPN), so the next deadline costs O(1) and firing costs
    /// O(log QPs) per due timer, whatever the number of QPs. An entry is live
    /// while its time equals its QP's `timer_at`; others are dropped when they
    /// reach the top (or when the heap is compacted, see [`Engine::arm`]).
    timers: timer_heap::TimerHeap,
    pub(crate) counters: Counters,
    /// Host bytes held for the guest (ARCHITECTURE.md §9).
    budget: Budget,
    /// UD multicast groups and their attached QPs (AD-08, PV-07).
    mcast: mcast::McastTable,
    /// The members a multicast packet goes to, reused packet to packet.
    mcast_scratch: Vec<u32>,
    /// XRC domains (SR-02).
    xrcds: xrc::Xrcds,
    /// Arbitration between data VLs (AD-06, `vl`): on while the SL-to-VL
    /// table uses another VL than VL0; the arbiter's state.
    vl_arb: bool,
    arbiter: vl::Arbiter,
    /// RC packets in flight per destination and the QPs waiting for room.
    port_window: port_window::PortWindow,
    /// The QP that built the last packets and how many in a row
    /// (`io::TX_BURST`).
    tx_burst: (u32, u32),
    /// Reliable Datagram: RDDs, EE contexts, RD QPs (AD-11, `rd`).
    rd: rd::Rd,
    /// Received packets held one PSN ahead (`reorder`, vhca policy).
    hold: reorder::ReorderHold,
    /// A lent packet's private copy (`io`, issue 30): allocated at the
    /// first, reused for every one after.
    rx_scratch: Vec<u8>,
    /// The last packet parsed whose CRCs its link vouched for (issue 30,
    /// `wire::template::ParseMemo`).
    rx_memo: crate::wire::template::ParseMemo,
    /// CN packets waiting for the wire (IB congestion control, `cc_ib`).
    cn: cc_ib::CnQueue,
    /// QPs with a CNP to send (issue 31, `cc_np`).
    cnps: cc_np::CnpQueue,
}

/// Completions and events produced while handling one input; applied to CQs by
/// [`Engine::finish`] so that QP code never borrows the CQ table.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    pub completions: Vec<(Handle, Completion)>,
    pub events: Vec<Event>,
}

impl Engine {
    /// An engine serving `port`.
    pub fn new(port: PortConfig, limits: Limits) -> Engine {
        let mut port = port;
        if vl::check_table(&port.sl2vl, port.data_vls).is_err() {
            // AD-06: a table naming a VL the port lacks would send packets
            // every receiver drops; such a port keeps every SL on VL0.
            log::warn!(
                "SL-to-VL table {:?} names a VL past the port's {}: all SLs on VL0",
                port.sl2vl,
                port.data_vls
            );
            port.sl2vl = [0; 16];
            port.data_vls = port.data_vls.clamp(1, 15);
        }
        if let Err(e) = port.vl_arb.check(port.data_vls, &port.sl2vl) {
            // AD-06: a table that starves a VL in use would hang its QPs.
            log::warn!("VL arbitration tables refused ({e}): every data VL in turn");
            port.vl_arb = VlArbTables::fair(port.data_vls);
        }
        let budget = Budget::new(limits.mem_budget);
        let mut mrs = MrTable::new(limits.max_pd as u32, limits.max_mr as u32);
        mrs.set_budget(&budget);
        let ethernet = port.is_ethernet();
        Engine {
            vl_arb: !port.is_ethernet() && port.sl2vl.iter().any(|&v| v != 0),
            arbiter: vl::Arbiter::new(port.vl_arb.clone()),
            port,
            limits,
            mrs,
            cqs: HashMap::new(),
            ready_cqs: BTreeSet::new(),
            srqs: HashMap::new(),
            qps: ids::IdMap::default(),
            next_handle: 1,
            next_qpn: 2,
            events: VecDeque::new(),
            schedule: schedule::Schedule::default(),
            timers: timer_heap::TimerHeap::default(),
            counters: Counters::default(),
            budget,
            mcast: mcast::McastTable::default(),
            mcast_scratch: Vec::new(),
            xrcds: xrc::Xrcds::default(),
            port_window: port_window::PortWindow::new(limits.port_window, ethernet),
            tx_burst: (0, 0),
            rd: rd::Rd::default(),
            hold: reorder::ReorderHold::default(),
            rx_scratch: Vec::new(),
            rx_memo: Default::default(),
            cn: cc_ib::CnQueue::default(),
            cnps: cc_np::CnpQueue::new(),
        }
    }

    /// The port.
    pub fn port(&self) -> &PortConfig {
        &self.port
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Counters.
    /// The host memory held for the guest and its limit (ARCHITECTURE.md §9).
    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Sets (`Some`) or clears (`None`) entry `index` of a RoCE port's GID table
    /// (the driver mirrors ib_core's table). `NotSupported` on an InfiniBand
    /// port, whose only GID is prefix:port_guid.
    pub fn set_roce_gid(&mut self, index: usize, gid: Option<[u8; 16]>) -> Result<(), VerbError> {
        if !self.port.is_ethernet() {
            return Err(VerbError::NotSupported);
        }
        let slot = self
            .port
            .roce_gids
            .get_mut(index)
            .ok_or(VerbError::InvalidAttr)?;
        *slot = gid;
        Ok(())
    }

    /// Sets the port's SL-to-VL table (AD-06): entry `sl` is the data VL of
    /// service level `sl`. `InvalidAttr` if an entry names a VL the port does
    /// not have (VL15 included: it is not a data VL) or one the VL
    /// arbitration tables do not serve.
    pub fn set_sl2vl(&mut self, table: [u8; 16]) -> Result<(), VerbError> {
        vl::check_table(&table, self.port.data_vls)?;
        self.port
            .vl_arb
            .check(self.port.data_vls, &table)
            .map_err(|_| VerbError::InvalidAttr)?;
        self.port.sl2vl = table;
        self.vl_arb = !self.port.is_ethernet() && table.iter().any(|&v| v != 0);
        self.relane();
        Ok(())
    }

    /// Sets the port's VL arbitration tables (AD-06, IBA 7.6.9) and restarts
    /// the arbiter at their first entries; refused (and nothing changes) if
    /// [`VlArbTables::check`] finds them bad for the port's data VLs and
    /// SL-to-VL table.
    pub fn set_vl_arb(&mut self, tables: VlArbTables) -> Result<(), VlArbError> {
        tables.check(self.port.data_vls, &self.port.sl2vl)?;
        self.arbiter = vl::Arbiter::new(tables.clone());
        self.port.vl_arb = tables;
        self.relane();
        Ok(())
    }

    /// PDs and MRs.
    pub fn mrs(&mut self) -> &mut MrTable {
        &mut self.mrs
    }

    /// PDs and MRs, to look at (a device's context-table view).
    pub fn mr_table(&self) -> &MrTable {
        &self.mrs
    }

    /// A new CQ or SRQ handle (nonzero; one space for both, the device's CQN
    /// and SRQN). After the counter wraps, handles still live are skipped:
    /// handing one out again would replace a live CQ or SRQ (issue 13).
    /// Fewer than `max_cq + max_srq` are live, so this ends.
    fn handle(&mut self) -> Handle {
        loop {
            let h = self.next_handle;
            self.next_handle = self.next_handle.wrapping_add(1).max(1);
            if !self.cqs.contains_key(&h) && !self.srqs.contains_key(&h) {
                return h;
            }
        }
    }

    // ------------------------------------------------------------------ CQs

    /// Creates a CQ (CQ-01): the engine's side of it, where completions wait
    /// for the caller to take them ([`Engine::poll_cq`]). Its depth, arming
    /// and overflow are the caller's (ARCHITECTURE.md §4 "who owns what").
    pub fn create_cq(&mut self) -> Result<Handle, VerbError> {
        if self.cqs.len() >= self.limits.max_cq {
            return Err(VerbError::InsufficientResources);
        }
        let h = self.handle();
        self.cqs.insert(h, Cq::default());
        Ok(h)
    }

    /// Destroys a CQ no QP uses; completions still staged in it go with it.
    pub fn destroy_cq(&mut self, cq: Handle) -> Result<(), VerbError> {
        match self.cqs.get(&cq) {
            None => Err(VerbError::InvalidCq),
            Some(c) if c.users > 0 => Err(VerbError::Busy),
            Some(_) => {
                self.cqs.remove(&cq);
                self.ready_cqs.remove(&cq);
                Ok(())
            }
        }
    }

    /// Takes the oldest completion of a CQ.
    pub fn poll_cq(&mut self, cq: Handle) -> Option<Completion> {
        let q = self.cqs.get_mut(&cq)?;
        let c = q.staged.pop_front();
        if q.staged.is_empty() {
            self.ready_cqs.remove(&cq);
        }
        c
    }

    /// The CQs that hold completions to poll, in handle order: O(such CQs),
    /// so a caller draining completions each round pays for the CQs with
    /// work, not for every CQ (issue 12).
    pub fn ready_cqs(&self) -> impl Iterator<Item = Handle> + '_ {
        self.ready_cqs.iter().copied()
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: Handle) -> usize {
        self.cqs.get(&cq).map_or(0, |c| c.staged.len())
    }

    /// How many times QPs name a CQ, once per role (a QP with one CQ for both
    /// counts twice); `destroy_cq` is refused while it is not 0. The one count
    /// there is (ARCHITECTURE.md §4 "who owns what").
    pub fn cq_users(&self, cq: Handle) -> Option<usize> {
        self.cqs.get(&cq).map(|c| c.users)
    }

    // ------------------------------------------------------------------ SRQs

    /// Creates an SRQ (SR-01).
    pub fn create_srq(
        &mut self,
        pd: Handle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<Handle, VerbError> {
        if !self.mrs.pd_exists(pd) {
            return Err(VerbError::InvalidPd);
        }
        if max_wr == 0 || max_wr > self.limits.max_qp_wr {
            return Err(VerbError::MaxWrExceeded);
        }
        if max_sge > self.limits.max_sge {
            return Err(VerbError::MaxSgeExceeded);
        }
        if limit > max_wr {
            return Err(VerbError::InvalidAttr);
        }
        if self.srqs.len() >= self.limits.max_srq {
            return Err(VerbError::InsufficientResources);
        }
        let wqes = Held::new(&self.budget);
        let h = self.handle();
        self.mrs.pd_ref(pd)?;
        self.srqs.insert(
            h,
            Srq {
                pd,
                max_wr: max_wr as usize,
                max_sge: max_sge as usize,
                limit: limit as usize,
                wqes,
                users: 0,
                xrc: None,
            },
        );
        Ok(h)
    }

    /// Arms the SRQ limit event: fires once when fewer than `limit` WQEs remain.
    pub fn modify_srq_limit(&mut self, srq: Handle, limit: u32) -> Result<(), VerbError> {
        let s = self.srqs.get_mut(&srq).ok_or(VerbError::InvalidSrq)?;
        if limit as usize > s.max_wr {
            return Err(VerbError::InvalidAttr);
        }
        s.limit = limit as usize;
        Ok(())
    }

    /// Gives an SRQ a new capacity, keeping its WQEs and limit:
    /// `MaxWrExceeded` beyond the device, `InvalidAttr` below the WQEs it holds
    /// or its armed limit. Nothing changes on failure.
    pub fn resize_srq(&mut self, srq: Handle, max_wr: u32) -> Result<(), VerbError> {
        let s = self.srqs.get_mut(&srq).ok_or(VerbError::InvalidSrq)?;
        if max_wr == 0 || max_wr > self.limits.max_qp_wr {
            return Err(VerbError::MaxWrExceeded);
        }
        let m = max_wr as usize;
        if s.wqes.len() > m || s.limit > m {
            return Err(VerbError::InvalidAttr);
        }
        s.max_wr = m;
        Ok(())
    }

    /// The QPs using an SRQ; `destroy_srq` is refused while it is not 0.
    pub fn srq_users(&self, srq: Handle) -> Option<usize> {
        self.srqs.get(&srq).map(|s| s.users)
    }

    /// The SRQ's WQE count and current limit.
    pub fn query_srq(&self, srq: Handle) -> Result<(usize, usize), VerbError> {
        let s = self.srqs.get(&srq).ok_or(VerbError::InvalidSrq)?;
        Ok((s.wqes.len(), s.limit))
    }

    /// Destroys an SRQ no QP uses.
    pub fn destroy_srq(&mut self, srq: Handle) -> Result<(), VerbError> {
        match self.srqs.get(&srq) {
            None => Err(VerbError::InvalidSrq),
            Some(s) if s.users > 0 => Err(VerbError::Busy),
            Some(s) => {
                let (pd, xrc) = (s.pd, s.xrc);
                self.srqs.remove(&srq);
                let _ = self.mrs.pd_unref(pd);
                if let Some(x) = xrc {
                    self.release_xrc_srq(x);
                }
                Ok(())
            }
        }
    }

    /// Posts a receive WQE to an SRQ.
    pub fn post_srq_recv(&mut self, srq: Handle, wr: RecvWr) -> Result<(), VerbError> {
        let s = self.srqs.get_mut(&srq).ok_or(VerbError::InvalidSrq)?;
        if wr.sges.len() > s.max_sge {
            return Err(VerbError::MaxSgeExceeded);
        }
        if s.wqes.len() >= s.max_wr {
            return Err(VerbError::QueueFull);
        }
        if !self.budget.admit(wr.weight()) {
            return Err(VerbError::InsufficientResources);
        }
        s.wqes.push_back(wr);
        Ok(())
    }

    // ------------------------------------------------------------------ QPs

    // ---- memory windows (MP-06, MP-07) ----

    /// Allocate Memory Window of type `ty` in `pd` (MP-06 type 1, MP-07 types
    /// 2A and 2B): returns its R_Key, unbound; the PD cannot be deallocated while it
    /// exists (`InvalidPd`, `InsufficientResources`). Binding is a BIND_MW
    /// work request ([`crate::verbs::WrOpcode::BindMw`]).
    pub fn alloc_mw(&mut self, pd: Handle, ty: MwType) -> Result<u32, VerbError> {
        self.mrs.alloc_mw(pd, ty)
    }

    /// Deallocate Memory Window, bound or not (a bound one is unbound: its MR
    /// may then be deregistered), named by the index of `rkey` (any key byte).
    /// `InvalidHandle` unless a window lives at that index.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), VerbError> {
        self.mrs.dealloc_mw(rkey)
    }

    /// Creates a QP in Reset (QS-09: every refusal leaves nothing behind).
    /// An XRC TGT QP has no PD, CQ or queues: [`Engine::create_xrc_tgt_qp`]
    /// creates it (`InvalidAttr` here); an XRC INI QP has no receive side and
    /// takes no SRQ (`InvalidSrq`).
    pub fn create_qp(&mut self, init: QpInit) -> Result<u32, VerbError> {
        match init.qp_type {
            QpType::XrcTgt => Err(VerbError::InvalidAttr),
            QpType::XrcIni if init.srq.is_some() => Err(VerbError::InvalidSrq),
            _ => self.create_qp_numbered(init, None, None),
        }
    }

    /// Creates QP 1, the General Services Interface QP (IBA 3.9.2, ARCHITECTURE.md
    /// §7): a UD QP with the fixed number 1 that ib_core's MAD layer (ib_cm,
    /// umad, SA queries) opens on every port. Its attributes follow the GSI rows
    /// of seed 001 (P_Key index and Q_Key at Reset→Init; PV-05: peers address it
    /// with Q_Key 0x80010000). `Busy` if it exists; `InvalidAttr` unless `init`
    /// asks for UD.
    pub fn create_gsi_qp(&mut self, init: QpInit) -> Result<u32, VerbError> {
        if init.qp_type != QpType::Ud {
            return Err(VerbError::InvalidAttr);
        }
        if self.qps.contains_key(&1) {
            return Err(VerbError::Busy);
        }
        self.create_qp_numbered(init, Some(1), None)
    }

    /// With `xrcd`, an XRC TGT QP (`xrc`): no PD or CQ to check or hold.
    fn create_qp_numbered(
        &mut self,
        init: QpInit,
        fixed: Option<u32>,
        xrcd: Option<Handle>,
    ) -> Result<u32, VerbError> {
        if xrcd.is_none() && !self.mrs.pd_exists(init.pd) {
            return Err(VerbError::InvalidPd);
        }
        if xrcd.is_none()
            && (!self.cqs.contains_key(&init.send_cq) || !self.cqs.contains_key(&init.recv_cq))
        {
            return Err(VerbError::InvalidCq);
        }
        if let Some(s) = init.srq {
            match self.srqs.get(&s) {
                None => return Err(VerbError::InvalidSrq),
                Some(srq) if srq.pd != init.pd => return Err(VerbError::InvalidSrq),
                Some(_) => {}
            }
        }
        let c = init.cap;
        if c.max_send_wr > self.limits.max_qp_wr
            || (init.srq.is_none() && c.max_recv_wr > self.limits.max_qp_wr)
        {
            return Err(VerbError::MaxWrExceeded);
        }
        if c.max_send_sge > self.limits.max_sge || c.max_recv_sge > self.limits.max_sge {
            return Err(VerbError::MaxSgeExceeded);
        }
        if c.max_inline_data > self.limits.max_inline {
            return Err(VerbError::InvalidAttr);
        }
        if self.qp_total() >= self.limits.max_qp {
            return Err(VerbError::InsufficientResources);
        }
        let qpn = match fixed {
            Some(q) => q,
            None => self.alloc_qpn().ok_or(VerbError::InsufficientResources)?,
        };
        let reserved = self
            .budget
            .reserve(responder::state_bound(self.limits.max_rd_atomic))
            .ok_or(VerbError::InsufficientResources)?;
        if xrcd.is_none() {
            self.mrs.pd_ref(init.pd)?;
            for cq in [init.send_cq, init.recv_cq] {
                if let Some(c) = self.cqs.get_mut(&cq) {
                    c.users += 1;
                }
            }
            if let Some(s) = init.srq.and_then(|s| self.srqs.get_mut(&s)) {
                s.users += 1;
            }
        }
        self.qps.insert(
            qpn,
            Qp {
                qpn,
                init,
                state: QpState::Reset,
                attr: QpAttr::default(),
                rq: Held::new(&self.budget),
                req: Requester::new(c.max_send_wr as usize, &self.budget, &self.limits),
                resp: Responder::new(self.limits.credits),
                scheduled: false,
                sched: schedule::Mark::default(),
                req_turn: false,
                timer_at: None,
                _reserved: reserved,
                xrcd,
                port: port_window::Share::default(),
                apm: apm::Apm {
                    after_timeouts: self.limits.apm_timeouts,
                    ..apm::Apm::default()
                },
                hold_misses: reorder::Misses::default(),
                odp: odp::QpOdp::default(),
            },
        );
        Ok(qpn)
    }

    fn alloc_qpn(&mut self) -> Option<u32> {
        // QPN 0 and 1 are the special QPs; numbers are reused only after a lap.
        for _ in 0..psn::PSN_SPACE {
            let q = self.next_qpn;
            self.next_qpn = if q >= psn::PSN_MASK - 1 { 2 } else { q + 1 };
            // RD QPs (AD-11) share the QPN space: a packet's DestQP names one.
            if !self.qps.contains_key(&q) && !self.rd.has_qp(q) {
                return Some(q);
            }
        }
        None
    }

    /// Destroys a QP; its WQEs vanish without completions (as a real HCA's do).
    /// `Busy` while a type 2A window is bound to it (MP-07).
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbError> {
        if !self.qps.contains_key(&qpn) {
            return Err(VerbError::InvalidHandle);
        }
        // MP-07: a QP with type 2A windows bound cannot be destroyed (seed
        // 003 "Type 2A"); LOCAL_INV or DEALLOC_MW frees them first.
        if self.mrs.type2a_windows_of(qpn) > 0 {
            return Err(VerbError::Busy);
        }
        let qp = self.qps.remove(&qpn).ok_or(VerbError::InvalidHandle)?;
        // MP-07: type 2B windows let their QP go (seed 003) and become free,
        // so that they never reach a later QP with this number.
        self.mrs.unbind_qp_windows(qpn);
        if let Some(x) = qp.xrcd {
            // SR-02: a TGT QP holds its domain only (`xrc`).
            self.xrcds.drop_user(x);
        } else {
            let _ = self.mrs.pd_unref(qp.init.pd);
            for cq in [qp.init.send_cq, qp.init.recv_cq] {
                if let Some(c) = self.cqs.get_mut(&cq) {
                    c.users = c.users.saturating_sub(1);
                }
            }
            if let Some(s) = qp.init.srq.and_then(|s| self.srqs.get_mut(&s)) {
                s.users = s.users.saturating_sub(1);
            }
        }
        // Its schedule entry is dead now (`schedule::Mark`): passed over.
        self.mcast_forget_qp(qpn);
        self.port_forget(&qp);
        self.hold.forget(qpn);
        Ok(())
    }

    /// The QP's state and attributes.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpState, QpAttr, QpInit), VerbError> {
        let qp = self.qps.get(&qpn).ok_or(VerbError::InvalidHandle)?;
        let mut attr = qp.attr;
        attr.state = Some(qp.state);
        attr.cur_state = Some(qp.state);
        attr.sq_psn = qp.req.next_psn;
        attr.rq_psn = qp.resp.epsn;
        Ok((qp.state, attr, qp.init))
    }

    /// Whether the QP is in SQD with messages begun before it still in flight
    /// (QS-05: the draining substate; `ibv_query_qp`'s `sq_draining`). False
    /// once drained, and in every other state.
    pub fn sq_draining(&self, qpn: u32) -> Result<bool, VerbError> {
        let qp = self.qps.get(&qpn).ok_or(VerbError::InvalidHandle)?;
        Ok(qp.state == QpState::Sqd && qp.req.wqes.iter().any(|w| w.started))
    }

    /// The requester's oldest unacknowledged PSN, `sq_psn` once every request
    /// is acknowledged: the QP context window's `sq_una_psn` (ARCHITECTURE.md
    /// §4), what tells a stalled QP waiting for an ACK from an idle one.
    pub fn sq_una_psn(&self, qpn: u32) -> Result<u32, VerbError> {
        let qp = self.qps.get(&qpn).ok_or(VerbError::InvalidHandle)?;
        Ok(qp.req.una)
    }

    /// Modify QP (QS-01, QS-02): checked against the transition table first; a
    /// refused modify changes nothing.
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: AttrMask,
        now: Time,
    ) -> Result<(), VerbError> {
        let limits = qp_state::Limits {
            pkey_table_len: self.port.pkeys.len().min(usize::from(u16::MAX)) as u16,
            max_rd_atomic: self.limits.max_rd_atomic,
            max_dest_rd_atomic: self.limits.max_rd_atomic,
            max_mtu: self.port.max_mtu,
            ..qp_state::Limits::DEVICE
        };
        // A RoCE path is global: its GRH becomes the IP header, its SGID an
        // entry of the GID table (A17.4.5). On InfiniBand the only GID is 0.
        let sgid_ok = |i: u8| {
            let len = if self.port.is_ethernet() {
                self.port.roce_gids.len()
            } else {
                1
            };
            usize::from(i) < len
        };
        let av_ok = match attr.av.grh {
            Some(g) => sgid_ok(g.sgid_index),
            None => !self.port.is_ethernet(),
        };
        if mask.contains(AttrMask::AV) && !av_ok {
            return Err(VerbError::InvalidAttr);
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        let kind = if qpn == 1 {
            qp_state::QpKind::Gsi
        } else if qpn == SMI_QPN {
            qp_state::QpKind::Smi
        } else {
            qp_state::QpKind::from(qp.init.qp_type)
        };
        let mask = xrc::rc_mask(qp.init.qp_type, qp.state, attr.state, mask);
        let next = qp_state::check_modify_kind(kind, qp.state, attr, mask, &limits)?;
        apm::check_modify(qp, &self.port, attr, mask)?;
        apply_attrs(qp, attr, mask);
        let mut fx = Effects::default();
        apm::apply_modify(qp, attr, mask, &mut fx, &mut self.counters);
        let from = qp.state;
        match next {
            QpState::Reset => {
                if let Some((h, w)) = responder::take_srq_wqe(qp) {
                    if let Some(s) = self.srqs.get_mut(&h) {
                        s.wqes.push_front(w);
                    }
                }
                // A packet held for the QP (`reorder`) belongs to the
                // connection being reset: processed later, it would meet the
                // next one (issue 25).
                self.hold.forget(qpn);
                qp.hold_misses = reorder::Misses::default();
                qp.rq.clear();
                qp.req =
                    Requester::new(qp.init.cap.max_send_wr as usize, &self.budget, &self.limits);
                qp.resp = Responder::new(self.limits.credits);
                qp.odp = odp::QpOdp::default();
                qp.attr = QpAttr::default();
                qp.apm = apm::Apm {
                    after_timeouts: qp.apm.after_timeouts,
                    ..apm::Apm::default()
                };
            }
            QpState::Error => {}
            QpState::Rtr if from == QpState::Init => {
                qp.resp.epsn = attr.rq_psn & psn::PSN_MASK;
            }
            QpState::Rts if from == QpState::Rtr => {
                qp.req.start(attr.sq_psn & psn::PSN_MASK, &qp.attr);
            }
            QpState::Rts => {
                // Back from SQE or SQD: restart sending after the error or drain.
                qp.req.resume(&qp.attr);
            }
            _ => {}
        }
        qp.state = next;
        if next == QpState::Error {
            flush_all(qp, &mut fx);
        }
        if mask.contains(AttrMask::EN_SQD_ASYNC_NOTIFY) {
            qp.attr.en_sqd_async_notify = attr.en_sqd_async_notify;
        }
        // QS-05: an SQ with nothing in flight is drained the moment it enters SQD.
        completer::check_drained(qp, &mut fx);
        let sched = matches!(next, QpState::Rts | QpState::Sqd);
        self.finish(fx);
        self.arm(qpn);
        if sched {
            self.schedule_qp(qpn);
        }
        let _ = now;
        Ok(())
    }

    /// Posts a send WR (QS-03: refused in Reset, Init, RTR; flushed in SQE, Error).
    /// An XRC INI QP takes [`Engine::post_send_xrc`] instead.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbError> {
        self.post_send_to(qpn, wr, None)
    }

    /// `post_send` with the XRC SRQ an INI QP's WR goes to (SR-02).
    fn post_send_to(
        &mut self,
        qpn: u32,
        wr: SendWr,
        remote_srqn: Option<u32>,
    ) -> Result<(), VerbError> {
        let max_inline = self.limits.max_inline;
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        xrc::check_post(qp.init.qp_type, remote_srqn)?;
        let flush = match qp_state::send_post_outcome(qp.state) {
            qp_state::PostOutcome::Rejected => return Err(VerbError::InvalidWr),
            qp_state::PostOutcome::Queued => false,
            qp_state::PostOutcome::Flushed => true,
        };
        requester::validate_wr(qp, &wr, max_inline)?;
        if qp.req.wqes.len() >= qp.req.max_wr {
            return Err(VerbError::QueueFull);
        }
        if !self.budget.admit(requester::wr_weight(&wr)) {
            return Err(VerbError::InsufficientResources);
        }
        let mut fx = Effects::default();
        qp.req.post(wr, qp.init.sq_sig_all);
        let last = qp.req.wqes.len().wrapping_sub(1);
        if let (Some(n), Some(w)) = (remote_srqn, qp.req.wqes.get_mut(last)) {
            w.xrc_srq = n;
        }
        if flush {
            completer::flush_sq(qp, &mut fx);
        }
        self.finish(fx);
        if !flush {
            self.schedule_qp(qpn);
        }
        Ok(())
    }

    /// Queues a send WQE that the caller read but could not accept (a device
    /// finds a malformed WQE in a guest's ring after the doorbell, when no verb
    /// can return an error any more): it completes in post order with `status`
    /// (normally `LocQpOpErr`) and the QP then fails like on any local send error
    /// (RC to Error, UC/UD to SQE; QS-06), so later WQEs flush. Refused like
    /// [`Engine::post_send`] when the QP cannot take WQEs at all.
    pub fn post_send_rejected(
        &mut self,
        qpn: u32,
        wr_id: u64,
        status: WcStatus,
    ) -> Result<(), VerbError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        let flush = match qp_state::send_post_outcome(qp.state) {
            qp_state::PostOutcome::Rejected => return Err(VerbError::InvalidWr),
            qp_state::PostOutcome::Queued => false,
            qp_state::PostOutcome::Flushed => true,
        };
        if qp.req.wqes.len() >= qp.req.max_wr {
            return Err(VerbError::QueueFull);
        }
        let wr = SendWr {
            wr_id,
            opcode: crate::verbs::WrOpcode::Send,
            flags: crate::verbs::SendFlags::SIGNALED,
            data: crate::verbs::SendData::Sges(Vec::new()),
            imm_or_inv: 0,
            remote_addr: 0,
            rkey: 0,
            compare: 0,
            swap_add: 0,
            ud: None,
        };
        let mut fx = Effects::default();
        qp.req.post_with(wr, true, Some(status));
        if flush {
            completer::flush_sq(qp, &mut fx);
        }
        self.finish(fx);
        if !flush {
            self.schedule_qp(qpn);
        }
        Ok(())
    }

    /// Posts a receive WR to a QP's own RQ (refused in Reset; flushed in Error).
    /// An RD QP's goes to [`Engine::post_recv_rd`] (AD-11).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbError> {
        if self.rd.has_qp(qpn) {
            return self.post_recv_rd(qpn, wr);
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        if qp.init.srq.is_some() || qp.init.qp_type.is_xrc() {
            // SR-02: neither XRC half has a receive queue.
            return Err(VerbError::InvalidWr);
        }
        if !qp_state::can_post_recv(qp.state) {
            return Err(VerbError::InvalidWr);
        }
        admit_recv(&qp.init.cap, qp.rq.len(), &wr, &self.budget)?;
        qp.rq.push_back(wr);
        if qp.state == QpState::Error {
            let mut fx = Effects::default();
            flush_rq(qp, &mut fx);
            self.finish(fx);
        } else if credits::on_post_recv(qp) {
            // RL-13: the requester learns of the new WQE without an RNR NAK.
            self.counters.credit_acks_sent += 1;
            self.schedule_qp(qpn);
        }
        Ok(())
    }

    // ------------------------------------------------------------------ effects
    // (here, not in io.rs: the verbs schedule QPs and apply effects too)

    /// Puts a QP in the transmit schedule, in the lane of its next packet's
    /// VL (`schedule`); a QP already there whose VL changed (a UD WQE of
    /// another SL posted to an empty queue) is queued again in its new lane.
    fn schedule_qp(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            let lane = vl::lane(self.vl_arb, &self.port, qp);
            if !qp.scheduled || qp.sched.lane != lane {
                qp.scheduled = true;
                self.schedule.push_back(&mut qp.sched, lane, qpn);
            }
        }
        // Dead entries (of QPs destroyed or queued again in another lane)
        // are passed over when they come up; while nothing is sent (a port
        // that is down) none comes up, and QPs created, posted to and
        // destroyed would grow the lanes without bound (issue 25). A QP has
        // at most one live entry, so past twice the QPs that exist most are
        // dead: placing the live ones again costs O(entries) once per that
        // many pushes, O(1) per push.
        if self.schedule.len() > 2 * self.qps.len() + SCHEDULE_SLACK {
            self.relane();
        }
    }

    /// Entries in the transmit schedule, live and dead: bounded by
    /// `2 x QPs + 64` (issue 25), whatever happened to QPs while nothing
    /// was sent.
    pub fn schedule_entries(&self) -> usize {
        self.schedule.len()
    }

    /// Applies completions and events gathered while handling an input.
    fn finish(&mut self, fx: Effects) {
        if fx.completions.is_empty() && fx.events.is_empty() {
            return; // the usual case on the data path
        }
        for (cq, c) in fx.completions {
            // A QP's CQs outlive it (destroy_cq is refused while it is used),
            // so the CQ is there.
            if let Some(q) = self.cqs.get_mut(&cq) {
                q.staged.push_back(c);
                self.ready_cqs.insert(cq);
            }
        }
        self.events.extend(fx.events);
    }
}

/// What QP code may touch while handling an input.
pub(crate) struct Ctx<'a> {
    pub mrs: &'a mut MrTable,
    pub mem: &'a mut dyn Memory,
    pub srqs: &'a mut HashMap<Handle, Srq>,
    pub counters: &'a mut Counters,
    pub fx: &'a mut Effects,
    pub port: &'a PortConfig,
    pub now: Time,
    /// What the RoCE frame being handled carried besides its packet.
    pub roce: Option<link::RoceRx>,
    /// The payload of the packet being handled when its link lent it in
    /// place (issue 30, [`Engine::handle_received_lent`]): its
    /// `TransportRepr::payload` is then zeros of the same length, and the
    /// placement reads this instead ([`Ctx::payload`]).
    pub lent: Option<vm_memory::VolatileSlice<'a>>,
    /// Where the link lets a data packet's payload be built in place
    /// (issue 30, [`Engine::poll_transmit_into`]).
    pub tx_slots: Option<&'a mut dyn io::TxSlots>,
    /// The packet just built has its payload in the place `tx_slots` gave,
    /// not in the buffer.
    pub tx_in_slot: bool,
}

impl<'a> Ctx<'a> {
    /// The bytes of packet `t`'s payload to place: lent in place, or its own.
    pub fn payload<'s>(&self, t: &crate::wire::TransportRepr<'s>) -> crate::memory::Src<'s>
    where
        'a: 's,
    {
        match self.lent {
            Some(v) => crate::memory::Src::Volatile(v),
            None => crate::memory::Src::Bytes(t.payload),
        }
    }
}

/// The one constructor of a [`Ctx`] over engine `$e`'s parts (its MRs,
/// SRQs, counters and port) for a QP's handlers: unicast delivery and
/// transmit (`io`), multicast delivery (`mcast`). A macro rather than a
/// method so that it borrows those fields alone, and the QP, taken from
/// `$e.qps`, stays borrowed beside it.
macro_rules! engine_ctx {
    ($e:expr, $mem:expr, $fx:expr, $now:expr, $roce:expr) => {
        $crate::engine::engine_ctx!($e, $mem, $fx, $now, $roce, None)
    };
    ($e:expr, $mem:expr, $fx:expr, $now:expr, $roce:expr, $lent:expr) => {
        $crate::engine::engine_ctx!($e, $mem, $fx, $now, $roce, $lent, None)
    };
    ($e:expr, $mem:expr, $fx:expr, $now:expr, $roce:expr, $lent:expr, $slots:expr) => {
        $crate::engine::Ctx {
            mrs: &mut $e.mrs,
            mem: $mem,
            srqs: &mut $e.srqs,
            counters: &mut $e.counters,
            fx: $fx,
            port: &$e.port,
            now: $now,
            roce: $roce,
            lent: $lent,
            tx_slots: $slots,
            tx_in_slot: false,
        }
    };
}
pub(crate) use engine_ctx;

fn apply_attrs(qp: &mut Qp, a: &QpAttr, m: AttrMask) {
    let t = &mut qp.attr;
    if m.contains(AttrMask::ACCESS_FLAGS) {
        t.access = a.access;
    }
    if m.contains(AttrMask::PKEY_INDEX) {
        t.pkey_index = a.pkey_index;
    }
    if m.contains(AttrMask::PORT) {
        t.port_num = a.port_num;
    }
    if m.contains(AttrMask::QKEY) {
        t.qkey = a.qkey;
    }
    if m.contains(AttrMask::AV) {
        t.av = a.av;
    }
    if m.contains(AttrMask::PATH_MTU) {
        t.path_mtu = a.path_mtu;
    }
    if m.contains(AttrMask::TIMEOUT) {
        t.timeout = a.timeout;
    }
    if m.contains(AttrMask::RETRY_CNT) {
        t.retry_cnt = a.retry_cnt;
    }
    if m.contains(AttrMask::RNR_RETRY) {
        t.rnr_retry = a.rnr_retry;
    }
    if m.contains(AttrMask::MAX_QP_RD_ATOMIC) {
        t.max_rd_atomic = a.max_rd_atomic;
    }
    if m.contains(AttrMask::MIN_RNR_TIMER) {
        t.min_rnr_timer = a.min_rnr_timer;
    }
    if m.contains(AttrMask::MAX_DEST_RD_ATOMIC) {
        t.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if m.contains(AttrMask::DEST_QPN) {
        t.dest_qp_num = a.dest_qp_num;
    }
    if m.contains(AttrMask::RQ_PSN) {
        t.rq_psn = a.rq_psn;
    }
    if m.contains(AttrMask::SQ_PSN) {
        t.sq_psn = a.sq_psn;
    }
}

/// Moves a QP to Error: everything outstanding completes with a flush error
/// (QS-07).
pub(crate) fn to_error(qp: &mut Qp, fx: &mut Effects) {
    qp.state = QpState::Error;
    flush_all(qp, fx);
}

fn flush_all(qp: &mut Qp, fx: &mut Effects) {
    // Issue 29: a QP in Error waits for no page.
    qp.odp = odp::QpOdp::default();
    completer::flush_sq(qp, fx);
    responder::abort_message(qp, fx);
    flush_rq(qp, fx);
}

/// The checks a receive WR passes before it is queued (RC/UC/UD and RD
/// alike): its SGEs and the queue within the QP's caps, its memory within the
/// engine's budget (admitted here).
fn admit_recv(
    cap: &crate::verbs::QpCap,
    queued: usize,
    wr: &RecvWr,
    budget: &Budget,
) -> Result<(), VerbError> {
    if wr.sges.len() > cap.max_recv_sge as usize {
        return Err(VerbError::MaxSgeExceeded);
    }
    if queued >= cap.max_recv_wr as usize {
        return Err(VerbError::QueueFull);
    }
    if !budget.admit(wr.weight()) {
        return Err(VerbError::InsufficientResources);
    }
    Ok(())
}

fn flush_rq(qp: &mut Qp, fx: &mut Effects) {
    while let Some(w) = qp.rq.pop_front() {
        fx.completions.push((
            qp.init.recv_cq,
            Completion::new(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn),
        ));
    }
}
