//! Reliable Datagram (AD-11, OP-11, PV-09, WF-07; IBA 9.7, seeds 000-002):
//! RD domains (RDD), end-to-end (EE) contexts and RD QPs.
//!
//! Which state lives where (seed 000 9.3.1.2 and the responder-resources note
//! "for RD the connection context is the EE context"; seed 002: "for RD it is
//! the EE context, not the QP, that decides the port"):
//! - the **EE context** (EEC) holds everything of reliability: the path, the
//!   P_Key, the remote EECN, the send PSN and the expected PSN, the ACK timer,
//!   the retry and RNR counts, the message in flight (`send.rs`) and the
//!   responder's message in progress and responses (`recv.rs`);
//! - the **RD QP** holds queues, a Q_Key, remote access rights and its RDD;
//!   each send WR names its destination QP, Q_Key and local EEC ([`RdDest`]).
//!
//! An EEC carries one message at a time (seed 001: an RD QP's SQ logic works on
//! one WQE and goes on only once its response came back): messages of the RD
//! QPs that use it queue in the EEC, in the order their WQEs reached the head
//! of their send queues, so messages are in order per EEC and per QP.
//! Reliability is RC's rules at message granularity: PSNs per packet, ACK on
//! AckReq, sequence NAK and go-back, ACK timer with `retry_cnt`, RNR NAK with
//! `rnr_retry`; a READ that lost responses asks again for its rest (RL-14).
//! A message that ends in error leaves the two ends' PSNs unknown to each
//! other, so the next message on that EEC is preceded by a RESYNC (OP-11,
//! seed 000 "RESYNC"); so is the first message after an EEC came back from
//! Error through Reset.
//!
//! Atomics (OP-07) run once: the responder's EEC keeps the last one's PSN
//! and original value and answers a duplicate from them (seed 000: "for RD
//! the saved state is in the EE context").
//!
//! Not implemented: SEND with Invalidate, SQD of EECs, alternate paths (APM)
//! of EECs, an SRQ for RD QPs.
//!
//! Bounds: at most [`MAX_RDD`] RDDs and [`MAX_EEC`] EECs per engine, RD QPs
//! count against `Limits::max_qp` with the other QPs, and an EEC's responses
//! not yet sent against [`RESP_CAP`] (ARCHITECTURE.md §9).

mod io;
mod recv;
mod send;

pub use send::RD_WINDOW;

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{Effects, Engine, PortConfig};
use crate::budget::{Charge, Held, Weigh};
use crate::psn;
use crate::verbs::{
    Access, Completion, EecAttr, Handle, QpState, RdDest, RdQpAttr, RdQpInit, RecvWr, SendData,
    SendFlags, SendWr, Time, VerbError, WcOpcode, WcStatus, WrOpcode,
};

/// RD domains per engine (a guest cannot make the engine hold more).
pub const MAX_RDD: usize = 64;
/// EE contexts per engine.
pub const MAX_EEC: usize = 256;
/// Responses (ACKs, NAKs, READ responses) one EEC holds unsent: a request that
/// would need another is dropped unexecuted, as one lost on the wire, and the
/// requester's retry brings it again (ARCHITECTURE.md §9).
pub const RESP_CAP: usize = 32;

/// Why an RD packet was dropped or refused: one counter each (ARCHITECTURE.md
/// §3 "every drop reason has a counter"; PV-09, PV-10).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RdCounters {
    /// RDETH names no EE context of this CA (o9-26, table 43): dropped.
    pub bad_eecn: u64,
    /// The EE context is not in a state that receives (RTR/RTS for
    /// requests, RTS for responses): dropped (o9-26).
    pub eec_not_receiving: u64,
    /// BTH:P_Key does not match the EE context's (o9-24): dropped.
    pub bad_pkey: u64,
    /// SLID is not the EE context's remote LID, or the GRH does not fit its
    /// path (o9-28, C9-43.1.2): dropped.
    pub bad_path: u64,
    /// A request's destination QP does not exist, is not an RD QP or cannot
    /// receive: NAK Invalid RD Request (o9-23.2.1).
    pub bad_dest_qp: u64,
    /// The destination QP's RDD is not the EE context's (PV-09): NAK Invalid
    /// RD Request.
    pub rdd_mismatch: u64,
    /// DETH:Q_Key does not match the destination QP's (C9-50): NAK Invalid RD
    /// Request, the EE context's PSN unchanged.
    pub bad_qkey: u64,
    /// A response for a QP that does not exist or is not an RD QP
    /// (o9-23.2.1), or that matches nothing in flight on its EEC: dropped.
    pub unexpected_response: u64,
    /// Request PSN ahead of the expected PSN after a sequence NAK was sent
    /// (9.7.5.1.1): dropped.
    pub out_of_sequence: u64,
    /// Duplicate requests answered again (9.7.5.1.2).
    pub duplicates: u64,
    /// Requests dropped unexecuted because the EEC's responses were at
    /// [`RESP_CAP`].
    pub response_queue_full: u64,
    /// NAKs sent by RD responders (sequence, RNR, invalid request, remote
    /// access or operational error, invalid RD request).
    pub naks_sent: u64,
    /// ACKs sent by RD responders.
    pub acks_sent: u64,
    /// RESYNCs sent (OP-11).
    pub resyncs_sent: u64,
    /// RESYNCs received and applied (OP-11).
    pub resyncs_received: u64,
    /// Request packets sent again (go-back after a NAK or ACK timeout).
    pub retransmits: u64,
    /// ACK timer expiries of EE contexts (RL-10).
    pub timeouts: u64,
}

/// The RD part of the engine.
#[derive(Debug, Default)]
pub(crate) struct Rd {
    /// RDD -> how many EECs and QPs are in it.
    rdds: HashMap<Handle, u32>,
    next_rdd: Handle,
    eecs: BTreeMap<u32, Eec>,
    next_eecn: u32,
    qps: BTreeMap<u32, RdQp>,
    /// EECs that may have a packet to send, round robin.
    sched: VecDeque<u32>,
    /// RD goes first in the next `poll_transmit` (RD and the other QPs take
    /// turns, so neither starves the other).
    turn: bool,
    /// The EECs' deadlines (ACK timer RL-10, RNR wait RL-11) as a min-heap
    /// of (time, EECN), kept like the QPs' (`io.rs` `arm`): an entry is live
    /// while it equals its EEC's `timer_at`, so the next deadline is O(1)
    /// and a round costs nothing per EEC that has no timer due (issue 12).
    timers: super::timer_heap::TimerHeap,
}

/// An EE context.
#[derive(Debug)]
pub(crate) struct Eec {
    eecn: u32,
    rdd: Handle,
    state: QpState,
    attr: EecAttr,
    /// Was in Error since it was last in RTS: the first message after it
    /// returns to RTS is preceded by a RESYNC (OP-11).
    errored: bool,
    scheduled: bool,
    /// The time of this EEC's live entry in `Rd::timers`.
    timer_at: Option<Time>,
    req: send::EecReq,
    resp: recv::EecResp,
}

/// An RD QP.
#[derive(Debug)]
pub(crate) struct RdQp {
    qpn: u32,
    init: RdQpInit,
    state: QpState,
    qkey: u32,
    access: Access,
    sq: Held<RdWqe>,
    rq: Held<RecvWr>,
    /// Its head WQE was offered to (or runs on) its EEC.
    offered: bool,
    /// Its fixed state, reserved in the budget for its life as every QP's
    /// is (ARCHITECTURE.md §9; an RD QP's responder state is its EECs').
    _reserved: Charge,
}

/// What an RD QP reserves in the engine's budget at creation: its state
/// (its WQEs are charged as they are posted).
pub fn rd_qp_bytes() -> u64 {
    std::mem::size_of::<RdQp>() as u64
}

/// A send WQE of an RD QP.
#[derive(Debug)]
pub(crate) struct RdWqe {
    wr: SendWr,
    dest: RdDest,
    len: u64,
    /// A WQE the caller could not accept (`post_send_rd_rejected`): it fails
    /// with this status when it reaches the head of the queue.
    rejected: Option<WcStatus>,
}

impl Weigh for RdWqe {
    fn weight(&self) -> u64 {
        super::requester::wr_weight(&self.wr)
    }
}

impl Rd {
    pub(crate) fn has_qp(&self, qpn: u32) -> bool {
        self.qps.contains_key(&qpn)
    }

    pub(crate) fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// Whether RD has any object that could send or time out.
    pub(crate) fn active(&self) -> bool {
        !self.eecs.is_empty()
    }

    /// Whether RD goes first in this `poll_transmit` (and flips the turn).
    pub(crate) fn take_turn(&mut self) -> bool {
        self.turn = !self.turn;
        !self.turn
    }

    fn schedule(&mut self, eecn: u32) {
        if let Some(e) = self.eecs.get_mut(&eecn) {
            if !e.scheduled {
                e.scheduled = true;
                self.sched.push_back(eecn);
            }
        }
    }

    /// The earliest EEC deadline (ACK timer or RNR wait), O(1). Never later
    /// than an EEC's deadline; may be earlier (an entry whose deadline moved
    /// later fires as a no-op that re-arms it).
    pub(crate) fn next_deadline(&self) -> Option<Time> {
        self.timers.peek().map(|(t, _)| t)
    }

    /// Keeps the heap covering `eecn`'s deadline after an input touched the
    /// EEC. Only an earlier deadline is pushed; when stale entries outnumber
    /// live ones the heap is rebuilt, so it stays O(EECs) whatever a peer
    /// sends.
    pub(crate) fn arm(&mut self, eecn: u32) {
        let Some(e) = self.eecs.get_mut(&eecn) else {
            return;
        };
        let Some(d) = e.req.deadline else {
            return;
        };
        if self.timers.arm(&mut e.timer_at, d, eecn) {
            let live = self
                .eecs
                .values()
                .filter_map(|e| e.timer_at.map(|t| (t, e.eecn)));
            self.timers.compact(self.eecs.len(), live);
        }
    }

    /// Debug builds: every EEC deadline is covered by a live heap entry no
    /// later than it (the invariant [`Self::arm`] keeps).
    #[cfg(debug_assertions)]
    pub(crate) fn check_timers(&self) {
        for e in self.eecs.values() {
            let Some(d) = e.req.deadline else { continue };
            let t = e
                .timer_at
                .unwrap_or_else(|| panic!("EEC {} has a deadline {d:?} and no timer", e.eecn));
            assert!(
                t <= d,
                "EEC {} timer {t:?} after its deadline {d:?}",
                e.eecn
            );
            assert!(
                self.timers.holds(t, e.eecn),
                "EEC {}: no heap entry at {t:?}",
                e.eecn
            );
        }
    }

    /// Pops the heap entries due at `now` and returns their EECs (each
    /// once); their `timer_at` is cleared, so the caller re-arms them.
    pub(crate) fn take_due(&mut self, now: Time) -> Vec<u32> {
        let eecs = &mut self.eecs;
        self.timers
            .take_due(now, |eecn, t| match eecs.get_mut(&eecn) {
                Some(e) if e.timer_at == Some(t) => {
                    e.timer_at = None;
                    true
                }
                _ => false,
            })
    }
}

/// The P_Key of EEC attributes on this port (the port's table entry).
fn eec_pkey(port: &PortConfig, a: &EecAttr) -> u16 {
    port.pkeys
        .get(usize::from(a.pkey_index))
        .copied()
        .unwrap_or(0xffff)
}

/// Local ACK timeout: 4.096 us * 2^timeout (IBA 11.2.4.2); 0 means none.
fn ack_timeout_ns(a: &EecAttr) -> Option<u64> {
    (a.timeout != 0).then(|| 4096u64 << a.timeout.min(31))
}

fn wc_opcode(op: WrOpcode) -> WcOpcode {
    match op {
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpSwap => WcOpcode::CompSwap,
        WrOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
        _ => WcOpcode::Send,
    }
}

/// Completes the head send WQE of `qp` with `status` (signaled, or always
/// when in error) and pops it.
fn complete_head(qp: &mut RdQp, status: WcStatus, fx: &mut Effects) {
    let Some(w) = qp.sq.pop_front() else {
        return;
    };
    qp.offered = false;
    let signaled = qp.init.sq_sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
    if signaled || status != WcStatus::Success {
        let mut c = Completion::new(w.wr.wr_id, status, wc_opcode(w.wr.opcode), qp.qpn);
        let reads = matches!(
            w.wr.opcode,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd
        );
        if reads && status == WcStatus::Success {
            c.byte_len = w.len as u32;
        }
        fx.completions.push((qp.init.send_cq, c));
    }
}

/// Flushes every send WQE of `qp` (QS-07).
fn flush_sq(qp: &mut RdQp, fx: &mut Effects) {
    while !qp.sq.is_empty() {
        complete_head(qp, WcStatus::WrFlushErr, fx);
    }
}

fn flush_rq(qp: &mut RdQp, fx: &mut Effects) {
    while let Some(w) = qp.rq.pop_front() {
        fx.completions.push((
            qp.init.recv_cq,
            Completion::new(w.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn),
        ));
    }
}

/// A send WQE of an RD QP failed (its message NAKed, out of retries, or its
/// EEC unusable): it completes in error, the QP goes to SQE and its other
/// WQEs flush (seed 001: "a WR to an EEC in Error completes in error and the
/// RD QP is put in SQE"; RD QPs have SQE, QS-06).
fn fail_qp(qp: &mut RdQp, status: WcStatus, fx: &mut Effects) {
    complete_head(qp, status, fx);
    if qp.state == QpState::Rts {
        qp.state = QpState::Sqe;
    }
    flush_sq(qp, fx);
}

/// Offers the head WQE of RD QP `qpn` to its EEC, when there is one and it
/// was not offered yet. A WQE whose EEC cannot send (gone, or not in RTS, or
/// of another RDD) fails at once (seed 001 items on posting to an RD QP whose
/// EEC is in Init, RTR or Error; PV-09 for the RDD).
fn offer_head(rd: &mut Rd, qpn: u32, fx: &mut Effects) {
    let Some(qp) = rd.qps.get_mut(&qpn) else {
        return;
    };
    if qp.offered || qp.state != QpState::Rts {
        return;
    }
    let Some(w) = qp.sq.front() else {
        return;
    };
    if let Some(status) = w.rejected {
        // QS-06: a WQE that could not be read fails in post order and the QP
        // stops (SQE, its later WQEs flushed).
        fail_qp(qp, status, fx);
        return;
    }
    let eecn = w.dest.eecn;
    match rd.eecs.get_mut(&eecn) {
        Some(e) if e.state == QpState::Rts && e.rdd == qp.init.rdd => {
            qp.offered = true;
            e.req.waiting.push_back(qpn);
            rd.schedule(eecn);
        }
        Some(e) if e.rdd != qp.init.rdd => fail_qp(qp, WcStatus::LocRddViolErr, fx),
        Some(_) => fail_qp(qp, WcStatus::InvEecStateErr, fx),
        None => fail_qp(qp, WcStatus::InvEecnErr, fx),
    }
}

/// A QP leaves RTS or goes away: its message on an EEC is abandoned (the EEC
/// then RESYNCs before its next message, OP-11) and its offer withdrawn.
fn withdraw(rd: &mut Rd, qpn: u32) {
    for e in rd.eecs.values_mut() {
        e.req.waiting.retain(|q| *q != qpn);
        if e.req.cur.as_ref().is_some_and(|m| m.qpn == qpn) {
            e.req.abandon();
        }
    }
    if let Some(q) = rd.qps.get_mut(&qpn) {
        q.offered = false;
    }
}

impl Engine {
    // ------------------------------------------------------------------ RDDs

    /// Allocate RD domain (AD-11): `InsufficientResources` past [`MAX_RDD`].
    pub fn alloc_rdd(&mut self) -> Result<Handle, VerbError> {
        let rd = &mut self.rd;
        if rd.rdds.len() >= MAX_RDD {
            return Err(VerbError::InsufficientResources);
        }
        loop {
            rd.next_rdd = rd.next_rdd.wrapping_add(1).max(1);
            if !rd.rdds.contains_key(&rd.next_rdd) {
                break;
            }
        }
        rd.rdds.insert(rd.next_rdd, 0);
        Ok(rd.next_rdd)
    }

    /// How many EECs and RD QPs are in RD domain `rdd`; `None` if it does
    /// not exist.
    pub fn query_rdd(&self, rdd: Handle) -> Option<u32> {
        self.rd.rdds.get(&rdd).copied()
    }

    /// Deallocate RD domain: `Busy` while an EEC or RD QP is in it.
    pub fn dealloc_rdd(&mut self, rdd: Handle) -> Result<(), VerbError> {
        match self.rd.rdds.get(&rdd) {
            None => Err(VerbError::InvalidHandle),
            Some(&n) if n > 0 => Err(VerbError::Busy),
            Some(_) => {
                self.rd.rdds.remove(&rdd);
                Ok(())
            }
        }
    }

    // ------------------------------------------------------------------ EECs

    /// Create EE context in `rdd` (AD-11), in Reset; returns its EECN (24 bits,
    /// nonzero, reused only after a lap). `InsufficientResources` past
    /// [`MAX_EEC`].
    pub fn create_eec(&mut self, rdd: Handle) -> Result<u32, VerbError> {
        let rd = &mut self.rd;
        if !rd.rdds.contains_key(&rdd) {
            return Err(VerbError::InvalidHandle);
        }
        if rd.eecs.len() >= MAX_EEC {
            return Err(VerbError::InsufficientResources);
        }
        let eecn = loop {
            rd.next_eecn = (rd.next_eecn + 1) & psn::PSN_MASK;
            if rd.next_eecn != 0 && !rd.eecs.contains_key(&rd.next_eecn) {
                break rd.next_eecn;
            }
        };
        rd.eecs.insert(
            eecn,
            Eec {
                eecn,
                rdd,
                state: QpState::Reset,
                attr: EecAttr::default(),
                errored: false,
                scheduled: false,
                timer_at: None,
                req: send::EecReq::default(),
                resp: recv::EecResp::default(),
            },
        );
        if let Some(n) = rd.rdds.get_mut(&rdd) {
            *n += 1;
        }
        Ok(eecn)
    }

    /// Modify EE context (AD-11): to `state`, taking from `attr` the fields of
    /// that transition ([`EecAttr`]). The transitions are a QP's without SQE and
    /// SQD (seed 001: an EEC retries by itself and goes from RTS straight to
    /// Error): Reset->Init, Init->Init, Init->RTR, RTR->RTS, RTS->RTS, any ->
    /// Reset, any -> Error. Moving to Error or Reset abandons the message in
    /// flight: its WQE fails (`InvEecStateErr`) and its QP goes to SQE.
    pub fn modify_eec(
        &mut self,
        eecn: u32,
        state: QpState,
        attr: &EecAttr,
        now: Time,
    ) -> Result<(), VerbError> {
        use QpState::*;
        let port_pkeys = self.port.pkeys.len();
        let (port_eth, port_gids) = (self.port.is_ethernet(), self.port.roce_gids.len());
        let e = self
            .rd
            .eecs
            .get_mut(&eecn)
            .ok_or(VerbError::InvalidHandle)?;
        let ok = matches!(
            (e.state, state),
            (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (_, Reset)
                | (_, Error)
        );
        if !ok {
            return Err(VerbError::InvalidTransition);
        }
        match (e.state, state) {
            (Reset | Init, Init) if usize::from(attr.pkey_index) >= port_pkeys => {
                return Err(VerbError::InvalidAttr);
            }
            (Reset | Init, Init) => e.attr.pkey_index = attr.pkey_index,
            (Init, Rtr) => {
                if attr.remote_eecn == 0 || attr.remote_eecn > psn::PSN_MASK {
                    return Err(VerbError::InvalidAttr);
                }
                // As a QP's path: a RoCE path is global, its SGID an entry of
                // the GID table (A17.4.5); on InfiniBand the only GID is 0.
                let gids = if port_eth { port_gids } else { 1 };
                let av_ok = match attr.av.grh {
                    Some(g) => usize::from(g.sgid_index) < gids,
                    None => !port_eth,
                };
                if !av_ok {
                    return Err(VerbError::InvalidAttr);
                }
                e.attr.av = attr.av;
                e.attr.path_mtu = attr.path_mtu;
                e.attr.remote_eecn = attr.remote_eecn;
                e.attr.rq_psn = attr.rq_psn & psn::PSN_MASK;
                e.attr.min_rnr_timer = attr.min_rnr_timer & 0x1f;
                e.resp = recv::EecResp::new(e.attr.rq_psn);
            }
            (Rtr, Rts) => {
                if attr.retry_cnt > 7 || attr.rnr_retry > 7 {
                    return Err(VerbError::InvalidAttr);
                }
                e.attr.sq_psn = attr.sq_psn & psn::PSN_MASK;
                e.attr.timeout = attr.timeout;
                e.attr.retry_cnt = attr.retry_cnt;
                e.attr.rnr_retry = attr.rnr_retry;
                e.req = send::EecReq::new(e.attr.sq_psn);
                // OP-11: back from the error path, the peer's expected PSN is
                // unknown: RESYNC before the first message.
                e.req.resync_pending = e.errored;
                e.errored = false;
            }
            _ => {}
        }
        let from = e.state;
        e.state = state;
        let mut fx = Effects::default();
        if matches!(state, Reset | Error) && from != state {
            self.eec_down(eecn, state == Error, &mut fx);
        }
        if state == Reset {
            if let Some(e) = self.rd.eecs.get_mut(&eecn) {
                e.attr = EecAttr::default();
                e.req = send::EecReq::default();
                e.resp = recv::EecResp::default();
            }
        }
        self.finish(fx);
        let _ = now;
        Ok(())
    }

    /// The EE context's state and attributes (its current send and expected
    /// PSNs in `sq_psn` and `rq_psn`) and its RDD.
    pub fn query_eec(&self, eecn: u32) -> Result<(QpState, EecAttr, Handle), VerbError> {
        let e = self.rd.eecs.get(&eecn).ok_or(VerbError::InvalidHandle)?;
        let mut a = e.attr;
        if e.state == QpState::Rts {
            a.sq_psn = e.req.next_psn;
        }
        if matches!(e.state, QpState::Rtr | QpState::Rts) {
            a.rq_psn = e.resp.epsn;
        }
        Ok((e.state, a, e.rdd))
    }

    /// Destroy EE context: its message in flight and queued messages fail
    /// (`InvEecnErr`) and their QPs go to SQE.
    pub fn destroy_eec(&mut self, eecn: u32) -> Result<(), VerbError> {
        if !self.rd.eecs.contains_key(&eecn) {
            return Err(VerbError::InvalidHandle);
        }
        let mut fx = Effects::default();
        self.eec_down(eecn, false, &mut fx);
        if let Some(e) = self.rd.eecs.remove(&eecn) {
            if let Some(n) = self.rd.rdds.get_mut(&e.rdd) {
                *n = n.saturating_sub(1);
            }
        }
        self.rd.sched.retain(|q| *q != eecn);
        self.finish(fx);
        Ok(())
    }

    /// An EEC stops carrying messages (Error, Reset, destroyed): the QPs whose
    /// WQEs it held fail them and go to SQE (seed 001). `error`: it went to
    /// Error, so it RESYNCs once back in RTS (OP-11).
    fn eec_down(&mut self, eecn: u32, error: bool, fx: &mut Effects) {
        let Rd { eecs, qps, .. } = &mut self.rd;
        let Some(e) = eecs.get_mut(&eecn) else {
            return;
        };
        e.errored |= error;
        let status = if error {
            WcStatus::InvEecStateErr
        } else {
            WcStatus::InvEecnErr
        };
        let mut qpns: Vec<u32> = e.req.waiting.drain(..).collect();
        if let Some(m) = e.req.cur.take() {
            if !m.resync {
                qpns.insert(0, m.qpn);
            }
        }
        e.req.deadline = None;
        e.resp.abort(qps);
        for q in qpns {
            if let Some(qp) = qps.get_mut(&q) {
                fail_qp(qp, status, fx);
            }
        }
    }

    // ------------------------------------------------------------------ RD QPs

    fn cq_exists(&self, cq: Handle) -> bool {
        self.cqs.contains_key(&cq)
    }

    /// Counts a QP's use of a CQ (what keeps `destroy_cq` refused), or ends it.
    fn cq_use(&mut self, cq: Handle, add: bool) {
        if let Some(c) = self.cqs.get_mut(&cq) {
            c.users = if add {
                c.users + 1
            } else {
                c.users.saturating_sub(1)
            };
        }
    }

    /// QPs of every service, RD included (`Limits::max_qp` bounds them all).
    pub(crate) fn qp_total(&self) -> usize {
        self.qps.len() + self.rd.qp_count()
    }

    /// Create an RD QP (AD-11) in Reset, in RDD `init.rdd`. Refusals as
    /// [`Engine::create_qp`]'s, and `InvalidHandle` for an unknown RDD (seed
    /// 001 "invalid RDD").
    pub fn create_rd_qp(&mut self, init: RdQpInit) -> Result<u32, VerbError> {
        if !self.rd.rdds.contains_key(&init.rdd) {
            return Err(VerbError::InvalidHandle);
        }
        if !self.mrs.pd_exists(init.pd) {
            return Err(VerbError::InvalidPd);
        }
        if !self.cq_exists(init.send_cq) || !self.cq_exists(init.recv_cq) {
            return Err(VerbError::InvalidCq);
        }
        let c = init.cap;
        if c.max_send_wr > self.limits.max_qp_wr || c.max_recv_wr > self.limits.max_qp_wr {
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
        let qpn = self.alloc_qpn().ok_or(VerbError::InsufficientResources)?;
        // Issue 25: RD QPs count against the host memory a guest may hold
        // as other QPs do (`Engine::create_qp`), refused past the limit.
        let reserved = self
            .budget
            .reserve(rd_qp_bytes())
            .ok_or(VerbError::InsufficientResources)?;
        self.mrs.pd_ref(init.pd)?;
        self.cq_use(init.send_cq, true);
        self.cq_use(init.recv_cq, true);
        if let Some(n) = self.rd.rdds.get_mut(&init.rdd) {
            *n += 1;
        }
        let budget = self.budget().clone();
        self.rd.qps.insert(
            qpn,
            RdQp {
                qpn,
                init,
                state: QpState::Reset,
                qkey: 0,
                access: Access::default(),
                sq: Held::new(&budget),
                rq: Held::new(&budget),
                offered: false,
                _reserved: reserved,
            },
        );
        Ok(qpn)
    }

    /// Modify an RD QP (AD-11): Reset->Init (Q_Key required), Init->Init,
    /// Init->RTR, RTR->RTS, RTS->RTS, SQE->RTS, any -> Reset, any -> Error.
    /// Error flushes both queues (QS-07); Reset empties them.
    pub fn modify_rd_qp(&mut self, qpn: u32, attr: &RdQpAttr) -> Result<(), VerbError> {
        use QpState::*;
        let qp = self.rd.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        let ok = matches!(
            (qp.state, attr.state),
            (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (Sqe, Rts)
                | (_, Reset)
                | (_, Error)
        );
        if !ok || (qp.state == Reset && attr.state == Init && attr.qkey.is_none()) {
            return Err(VerbError::InvalidTransition);
        }
        if !matches!(attr.state, Reset | Error) {
            if let Some(k) = attr.qkey {
                qp.qkey = k;
            }
            if let Some(a) = attr.access {
                qp.access = a;
            }
        }
        let from = qp.state;
        qp.state = attr.state;
        let mut fx = Effects::default();
        match attr.state {
            Reset | Error if from != attr.state => {
                withdraw(&mut self.rd, qpn);
                let Rd { eecs, qps, .. } = &mut self.rd;
                for e in eecs.values_mut() {
                    // Its receive WQE back in the queue, to flush below.
                    e.resp.forget(qpn, qps);
                }
                if let Some(qp) = self.rd.qps.get_mut(&qpn) {
                    if attr.state == Error {
                        flush_sq(qp, &mut fx);
                        flush_rq(qp, &mut fx);
                    } else {
                        qp.sq.clear();
                        qp.rq.clear();
                        qp.qkey = 0;
                        qp.access = Access::default();
                    }
                }
            }
            Rts => offer_head(&mut self.rd, qpn, &mut fx),
            _ => {}
        }
        self.finish(fx);
        Ok(())
    }

    /// The RD QP's state, Q_Key and RDD.
    pub fn query_rd_qp(&self, qpn: u32) -> Result<(QpState, u32, Handle), VerbError> {
        let qp = self.rd.qps.get(&qpn).ok_or(VerbError::InvalidHandle)?;
        Ok((qp.state, qp.qkey, qp.init.rdd))
    }

    /// Destroy an RD QP; its WQEs vanish without completions (as
    /// [`Engine::destroy_qp`]); a message of it on an EEC is abandoned (OP-11).
    pub fn destroy_rd_qp(&mut self, qpn: u32) -> Result<(), VerbError> {
        if !self.rd.qps.contains_key(&qpn) {
            return Err(VerbError::InvalidHandle);
        }
        withdraw(&mut self.rd, qpn);
        let Rd { eecs, qps, .. } = &mut self.rd;
        for e in eecs.values_mut() {
            e.resp.forget(qpn, qps);
        }
        let Some(qp) = self.rd.qps.remove(&qpn) else {
            return Err(VerbError::InvalidHandle);
        };
        let _ = self.mrs.pd_unref(qp.init.pd);
        self.cq_use(qp.init.send_cq, false);
        self.cq_use(qp.init.recv_cq, false);
        if let Some(n) = self.rd.rdds.get_mut(&qp.init.rdd) {
            *n = n.saturating_sub(1);
        }
        Ok(())
    }

    /// Posts a send WR to an RD QP (AD-11): SEND (with immediate), RDMA WRITE
    /// (with immediate), RDMA READ or an ATOMIC (8 bytes of gather list for
    /// the original value) to `dest`. Refused in Reset, Init and RTR (QS-03),
    /// flushed in SQE and Error. Messages are at most 2^31 bytes (C9-9,
    /// C9-16, C9-22). SEND with Invalidate, FLUSH and ATOMIC WRITE are not
    /// RD operations here (`NotSupported`).
    pub fn post_send_rd(&mut self, qpn: u32, wr: SendWr, dest: RdDest) -> Result<(), VerbError> {
        let max_inline = self.limits.max_inline;
        let qp = self.rd.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        let flush = match qp.state {
            QpState::Rts => false,
            QpState::Sqe | QpState::Error => true,
            _ => return Err(VerbError::InvalidWr),
        };
        match wr.opcode {
            WrOpcode::Send
            | WrOpcode::SendWithImm
            | WrOpcode::RdmaWrite
            | WrOpcode::RdmaWriteWithImm
            | WrOpcode::RdmaRead
            | WrOpcode::AtomicCmpSwap
            | WrOpcode::AtomicFetchAdd => {}
            _ => return Err(VerbError::NotSupported),
        }
        let atomic = matches!(
            wr.opcode,
            WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd
        );
        let len = match &wr.data {
            SendData::Sges(s) => {
                if s.len() > qp.init.cap.max_send_sge as usize {
                    return Err(VerbError::MaxSgeExceeded);
                }
                crate::mr::sge_total_len(s).ok_or(VerbError::InvalidWr)?
            }
            SendData::Inline(d) if wr.opcode != WrOpcode::RdmaRead => {
                if d.len() > max_inline as usize {
                    return Err(VerbError::InvalidWr);
                }
                d.len() as u64
            }
            _ => return Err(VerbError::InvalidWr),
        };
        // OP-07: an atomic returns 8 bytes into its gather list.
        if len > 1 << 31 || (atomic && (len != 8 || matches!(wr.data, SendData::Inline(_)))) {
            return Err(VerbError::InvalidWr);
        }
        if qp.sq.len() >= qp.init.cap.max_send_wr as usize {
            return Err(VerbError::QueueFull);
        }
        if !self.budget.admit(super::requester::wr_weight(&wr)) {
            return Err(VerbError::InsufficientResources);
        }
        qp.sq.push_back(RdWqe {
            wr,
            dest,
            len,
            rejected: None,
        });
        let mut fx = Effects::default();
        if flush {
            flush_sq(qp, &mut fx);
        } else {
            offer_head(&mut self.rd, qpn, &mut fx);
        }
        self.finish(fx);
        Ok(())
    }

    /// Queues a send WQE of an RD QP that the caller read but could not
    /// accept (as [`Engine::post_send_rejected`]): it completes in post order
    /// with `status` and the QP goes to SQE (QS-06).
    pub fn post_send_rd_rejected(
        &mut self,
        qpn: u32,
        wr_id: u64,
        status: WcStatus,
    ) -> Result<(), VerbError> {
        let qp = self.rd.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        let flush = match qp.state {
            QpState::Rts => false,
            QpState::Sqe | QpState::Error => true,
            _ => return Err(VerbError::InvalidWr),
        };
        if qp.sq.len() >= qp.init.cap.max_send_wr as usize {
            return Err(VerbError::QueueFull);
        }
        let wr = SendWr {
            wr_id,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            data: SendData::Sges(Vec::new()),
            imm_or_inv: 0,
            remote_addr: 0,
            rkey: 0,
            compare: 0,
            swap_add: 0,
            ud: None,
        };
        let dest = RdDest {
            eecn: 0,
            remote_qpn: 0,
            remote_qkey: 0,
        };
        qp.sq.push_back(RdWqe {
            wr,
            dest,
            len: 0,
            rejected: Some(status),
        });
        let mut fx = Effects::default();
        if flush {
            flush_sq(qp, &mut fx);
        } else {
            offer_head(&mut self.rd, qpn, &mut fx);
        }
        self.finish(fx);
        Ok(())
    }

    /// Posts a receive WR to an RD QP (refused in Reset; flushed in Error).
    pub fn post_recv_rd(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbError> {
        let qp = self.rd.qps.get_mut(&qpn).ok_or(VerbError::InvalidHandle)?;
        if qp.state == QpState::Reset {
            return Err(VerbError::InvalidWr);
        }
        super::admit_recv(&qp.init.cap, qp.rq.len(), &wr, &self.budget)?;
        qp.rq.push_back(wr);
        if qp.state == QpState::Error {
            let mut fx = Effects::default();
            flush_rq(qp, &mut fx);
            self.finish(fx);
        }
        Ok(())
    }
}
