//! The send side of a QP: segmentation, PSNs, ACK processing (the completer) and
//! retransmission (IBA 9.4, 9.5, 9.7; OP-01..OP-10, OR-01, OR-04..OR-06,
//! RL-01, RL-02, RL-08..RL-11, RL-17).

use std::collections::VecDeque;

use super::link;
use super::{to_error, Ctx, Effects, Qp, RxDrop};
use crate::engine::counters::Counters;
use crate::psn;
use crate::verbs::{
    Completion, FlushSpec, QpAttr, QpState, QpType, SendData, SendFlags, SendWr, Time, VerbError,
    WcOpcode, WcStatus, WrOpcode,
};
use crate::wire::ext::{
    AethSyndrome, AtomicEthRepr, DethRepr, ExtHeaders, FethRepr, NakCode, RethRepr,
};
use crate::wire::opcode::{Opcode, Operation, Position};
use crate::wire::packet::EmitWithError;
use crate::wire::{BthRepr, GrhRepr, LrhRepr, PacketRepr, TransportRepr};

/// Set AckReq at least every this many packets of a long message, so that ACKs
/// keep the send window open (RL-08).
const ACK_REQ_EVERY: u32 = 32;

/// One send WQE and its progress.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    pub len: u64,
    pub signaled: bool,
    /// PSN of its first packet, fixed once it was first sent.
    pub first_psn: u32,
    /// PSNs it takes (RL-02: a READ takes one per response packet).
    pub npkts: u32,
    /// Packets sent in the current pass.
    pub sent: u32,
    pub started: bool,
    /// READ: response bytes placed so far.
    pub resp_bytes: u64,
    pub done: Option<WcStatus>,
    /// A WQE the caller could not accept: it fails with this status when the
    /// requester reaches it (see `Engine::post_send_rejected`).
    pub rejected: Option<WcStatus>,
}

impl SendWqe {
    fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.opcode,
            WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpSwap
                | WrOpcode::AtomicFetchAdd
                | WrOpcode::Flush
                | WrOpcode::AtomicWrite
        )
    }

    /// FLUSH or ATOMIC WRITE: answered by an empty RDMA READ Response Only.
    fn is_placement(&self) -> bool {
        matches!(self.wr.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite)
    }

    fn last_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts.saturating_sub(1))
    }

    fn contains(&self, p: u32) -> bool {
        self.started && psn::diff(p, self.first_psn) >= 0 && psn::diff(p, self.last_psn()) <= 0
    }
}

/// Requester state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    pub wqes: VecDeque<SendWqe>,
    pub max_wr: usize,
    /// Index of the WQE being transmitted; all before it are fully sent.
    pub cur: usize,
    pub next_psn: u32,
    /// Oldest unacknowledged PSN.
    pub una: u32,
    /// Point of maximum advance: the PSN after the highest one ever sent. A go-back
    /// lowers `next_psn`, not this; the responder may answer a retried request
    /// with any PSN up to here (seed 004 §4, 9.7.4.1.3).
    pub hwm: u32,
    retry_left: u8,
    rnr_left: u8,
    ack_deadline: Option<Time>,
    rnr_deadline: Option<Time>,
    rnr_psn: u32,
    /// PSN a go-back already restarted from: further evidence of the same gap
    /// (out-of-order responses, duplicate NAKs) does not rewind again.
    rewound_to: Option<u32>,
}

impl Requester {
    pub fn new(max_wr: usize) -> Requester {
        Requester {
            max_wr,
            ..Requester::default()
        }
    }

    /// RTR→RTS: the first packet carries the SQ start PSN.
    pub fn start(&mut self, sq_psn: u32, attr: &QpAttr) {
        self.next_psn = sq_psn;
        self.una = sq_psn;
        self.hwm = sq_psn;
        self.resume(attr);
    }

    /// (Re)entering RTS: counters reloaded.
    pub fn resume(&mut self, attr: &QpAttr) {
        self.retry_left = attr.retry_cnt;
        self.rnr_left = attr.rnr_retry;
    }

    pub fn post(&mut self, wr: SendWr, sig_all: bool) {
        self.post_with(wr, sig_all, None);
    }

    /// Queues `wr`; with `rejected`, as a WQE that fails with that status in turn.
    pub fn post_with(&mut self, wr: SendWr, sig_all: bool, rejected: Option<WcStatus>) {
        let len = match (&wr.data, wr.opcode) {
            // FLUSH: the length of the range (`compare`); ATOMIC WRITE: its word.
            (_, WrOpcode::Flush) => wr.compare,
            (_, WrOpcode::AtomicWrite) => 8,
            (SendData::Inline(d), _) => d.len() as u64,
            (SendData::Sges(s), _) => s.iter().map(|s| u64::from(s.length)).sum(),
            (SendData::Bind(_), _) => 0,
        };
        let signaled = sig_all || wr.flags.contains(SendFlags::SIGNALED);
        self.wqes.push_back(SendWqe {
            wr,
            len,
            signaled,
            first_psn: 0,
            npkts: 0,
            sent: 0,
            started: false,
            resp_bytes: 0,
            done: None,
            rejected,
        });
    }

    /// The next time a timer of this requester fires.
    pub fn deadline(&self) -> Option<Time> {
        match (self.ack_deadline, self.rnr_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Index of the unfinished WQE whose PSN range holds `p`.
    fn open_wqe(&self, p: u32) -> Option<usize> {
        self.wqes
            .iter()
            .position(|w| w.contains(p) && w.done.is_none())
    }

    fn outstanding(&self) -> u32 {
        psn::diff(self.next_psn, self.una).max(0) as u32
    }

    /// PSNs sent at least once and not acknowledged yet (what the ACK timer
    /// covers, even while a go-back resends them).
    fn unacked(&self) -> u32 {
        psn::diff(self.hwm, self.una).max(0) as u32
    }
}

/// Local ACK timeout: 4.096 us * 2^timeout (IBA 11.2.4.2); 0 means none.
fn ack_timeout_ns(attr: &QpAttr) -> Option<u64> {
    (attr.timeout != 0).then(|| 4096u64 << attr.timeout.min(31))
}

/// Largest payload of one packet of this QP: the path MTU of a connected QP, the
/// port's MTU for UD (a UD message is one packet, C9-12).
fn pmtu_of(qp: &Qp) -> usize {
    if qp.init.qp_type == QpType::Ud {
        crate::wire::MAX_PAYLOAD
    } else {
        qp.attr.path_mtu.bytes()
    }
}

/// Checks a WR against the QP before it is queued (immediate errors).
pub(crate) fn validate_wr(qp: &Qp, wr: &SendWr, max_inline: u32) -> Result<(), VerbError> {
    let t = qp.init.qp_type;
    let ok = match wr.opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => true,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => t != QpType::Ud,
        WrOpcode::RdmaRead | WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd => t == QpType::Rc,
        // IBA 1.5 MPE: FLUSH and ATOMIC WRITE are RC operations (opcodes 0x1c, 0x1d).
        WrOpcode::Flush | WrOpcode::AtomicWrite => t == QpType::Rc,
        // OP-03: SEND with Invalidate exists for RC (and XRC) only (Table 38).
        WrOpcode::SendWithInv => t == QpType::Rc,
        // MP-07: LOCAL_INV sends nothing; any service may carry it.
        WrOpcode::LocalInv => true,
        // MP-06, MP-07: windows are bound through connected QPs (a type 2
        // window is associated with its QP; UD has no R_Key use).
        WrOpcode::BindMw => t != QpType::Ud,
    };
    if !ok {
        return Err(VerbError::InvalidWr);
    }
    if (wr.opcode == WrOpcode::BindMw) != matches!(wr.data, SendData::Bind(_)) {
        // A bind carries exactly its bind, and only a bind carries one.
        return Err(VerbError::InvalidWr);
    }
    if wr.opcode == WrOpcode::LocalInv || wr.opcode == WrOpcode::BindMw {
        return Ok(());
    }
    if t == QpType::Ud && wr.ud.is_none() {
        return Err(VerbError::InvalidWr);
    }
    match &wr.data {
        SendData::Inline(d) => {
            if d.len() > max_inline as usize || d.len() > qp.init.cap.max_inline_data as usize {
                return Err(VerbError::InvalidWr);
            }
        }
        SendData::Sges(s) => {
            if s.len() > qp.init.cap.max_send_sge as usize {
                return Err(VerbError::MaxSgeExceeded);
            }
        }
        SendData::Bind(_) => return Err(VerbError::InvalidWr),
    }
    Ok(())
}

fn wc_opcode(op: WrOpcode) -> WcOpcode {
    match op {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpSwap => WcOpcode::CompSwap,
        WrOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
        WrOpcode::LocalInv => WcOpcode::LocalInv,
        WrOpcode::BindMw => WcOpcode::BindMw,
        WrOpcode::Flush => WcOpcode::Flush,
        WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
    }
}

fn completion(qp: &Qp, w: &SendWqe, status: WcStatus) -> Completion {
    let mut c = Completion::new(w.wr.wr_id, status, wc_opcode(w.wr.opcode), qp.qpn);
    match w.wr.opcode {
        WrOpcode::RdmaRead => c.byte_len = w.len as u32,
        // The 8-byte original value landed in the local buffer (mlx5 and rxe
        // report 8 too; the ABI's CQE says "transferred").
        WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd | WrOpcode::AtomicWrite => {
            c.byte_len = 8
        }
        _ => {}
    }
    c
}

/// Retires finished WQEs from the head, in post order (OR-04); unsignaled
/// successful ones silently (OR-06).
fn retire(qp: &mut Qp, fx: &mut Effects) {
    while let Some(w) = qp.req.wqes.front() {
        let Some(status) = w.done else { break };
        if w.signaled || status != WcStatus::Success {
            fx.completions
                .push((qp.init.send_cq, completion(qp, w, status)));
        }
        qp.req.wqes.pop_front();
        qp.req.cur = qp.req.cur.saturating_sub(1);
    }
    if qp.state == QpState::Sqd
        && qp.req.wqes.iter().all(|w| !w.started)
        && qp.attr.en_sqd_async_notify
    {
        // QS-05: drained.
        fx.events
            .push(crate::verbs::Event::SqDrained { qpn: qp.qpn });
        qp.attr.en_sqd_async_notify = false;
    }
}

/// Completes every WQE not done yet with a flush error (QS-06, QS-07).
pub(crate) fn flush_sq(qp: &mut Qp, fx: &mut Effects) {
    for w in qp.req.wqes.iter_mut() {
        if w.done.is_none() {
            w.done = Some(WcStatus::WrFlushErr);
        }
    }
    // Flushed WQEs always complete, signaled or not.
    for w in qp.req.wqes.iter_mut() {
        w.signaled = true;
    }
    retire(qp, fx);
    qp.req.cur = 0;
    qp.req.ack_deadline = None;
    qp.req.rnr_deadline = None;
}

/// A send-side error: the WQE at `idx` completes with `status`; RC goes to Error,
/// UC and UD to SQE (QS-06), later WQEs flush.
fn fail(qp: &mut Qp, idx: usize, status: WcStatus, fx: &mut Effects) {
    // Everything before it that was still waiting is acknowledged by implication;
    // not a READ/ATOMIC whose response never came (its data or result is not
    // there: C9-27 orders responses, an ACK does not stand for them): flushed.
    if let Some(w) = qp.req.wqes.get_mut(idx) {
        w.done = Some(status);
    }
    for w in qp.req.wqes.iter_mut().take(idx) {
        if w.done.is_none() {
            w.done = Some(if w.is_rd_atomic() {
                WcStatus::WrFlushErr
            } else {
                WcStatus::Success
            });
        }
    }
    retire(qp, fx);
    if qp.init.qp_type == QpType::Rc {
        to_error(qp, fx);
    } else {
        qp.state = QpState::Sqe;
        flush_sq(qp, fx);
    }
}

/// Restarts transmission from PSN `p` (go-back-N, 9.7.4.1.3).
fn rewind(qp: &mut Qp, p: u32) {
    let r = &mut qp.req;
    // The unfinished WQE holding `p`, else the first unfinished one after it: a
    // READ/ATOMIC completed out of order by its response needs no resend.
    let Some(i) = r.wqes.iter().position(|w| {
        w.done.is_none() && (w.contains(p) || !w.started || psn::diff(w.first_psn, p) > 0)
    }) else {
        return;
    };
    let w = &mut r.wqes[i];
    // For a READ, `p` is the first response not yet received, so the retried
    // request asks only for the rest (RL-14).
    let p = match (w.contains(p), w.started) {
        (true, _) => p,
        (false, true) => w.first_psn,
        (false, false) => r.hwm,
    };
    w.sent = if w.started {
        psn::diff(p, w.first_psn) as u32
    } else {
        0
    };
    for later in r.wqes.iter_mut().skip(i + 1) {
        later.sent = 0;
    }
    r.cur = i;
    r.next_psn = p;
    r.rewound_to = Some(p);
}

/// Implicit acknowledgement of every request before PSN `p` (an ACK, or a NAK or
/// response for `p`): completes SEND/WRITE WQEs whose last packet is before `p`.
/// Returns the index of a READ/ATOMIC whose responses were skipped, if any.
fn ack_through(qp: &mut Qp, last_acked: u32, now: Time) -> Option<usize> {
    let timeout = ack_timeout_ns(&qp.attr);
    let r = &mut qp.req;
    let mut progressed = false;
    let mut skipped = None;
    for (i, w) in r.wqes.iter_mut().enumerate() {
        if i >= r.cur && !w.started {
            break;
        }
        if w.done.is_some() {
            continue;
        }
        if !w.started || psn::diff(last_acked, w.first_psn) < 0 {
            break;
        }
        if w.is_rd_atomic() {
            // An ACK past a READ/ATOMIC whose response never came: it was lost.
            skipped = Some(i);
            break;
        }
        // Acknowledged through its last packet: done, even while a go-back is
        // resending it (the responder has it all; seed 004 §4).
        if psn::diff(last_acked, w.last_psn()) >= 0 {
            w.done = Some(WcStatus::Success);
            progressed = true;
        } else {
            break;
        }
    }
    let mut new_una = psn::add(last_acked, 1);
    if let Some(i) = skipped {
        // The READ/ATOMIC stays unacknowledged until its response comes (C9-27):
        // the ACK covers only what precedes its first missing response.
        let w = &r.wqes[i];
        let pmtu = qp.attr.path_mtu.bytes() as u64;
        let resume = if w.wr.opcode == WrOpcode::RdmaRead {
            psn::add(w.first_psn, (w.resp_bytes / pmtu) as u32)
        } else {
            w.first_psn
        };
        if psn::diff(resume, new_una) < 0 {
            new_una = resume;
        }
    }
    // The valid region ends at the point of maximum advance, not at `next_psn`,
    // which a go-back lowered (RL-09).
    if psn::diff(new_una, r.una) > 0 && psn::diff(new_una, r.hwm) <= 0 {
        r.una = new_una;
        progressed = true;
    }
    // WQEs past `una` that their READ/ATOMIC response completed out of order
    // need no acknowledgement: `una` moves past them (else a timeout would resend
    // from a PSN no unfinished WQE holds).
    for w in r.wqes.iter() {
        if w.done.is_some() && w.contains(r.una) {
            r.una = psn::add(w.last_psn(), 1);
            progressed = true;
        }
    }
    if psn::diff(r.una, r.next_psn) > 0 {
        skip_acked(r);
    }
    if progressed {
        r.retry_left = qp.attr.retry_cnt;
        r.rnr_left = qp.attr.rnr_retry;
        r.ack_deadline = if r.unacked() > 0 {
            timeout.map(|t| now.plus_ns(t))
        } else {
            None
        };
    }
    skipped
}

/// After a go-back, an ACK came for PSNs the go-back was about to resend (the
/// responder answers a retried request with its furthest PSN, seed 004 §4):
/// skip what is acknowledged. Every WQE keeps the PSNs it was first sent with:
/// sending resumes at `una` in the first unfinished WQE (at its first PSN when
/// READ/ATOMIC responses completed the WQEs before it out of order), or at the
/// point of maximum advance when every WQE sent so far is done.
fn skip_acked(r: &mut Requester) {
    let una = r.una;
    match r.wqes.iter().position(|w| w.done.is_none()) {
        Some(i) if r.wqes[i].started => {
            let w = &mut r.wqes[i];
            let p = if w.contains(una) { una } else { w.first_psn };
            w.sent = psn::diff(p, w.first_psn) as u32;
            for later in r.wqes.iter_mut().skip(i + 1) {
                later.sent = 0;
            }
            r.cur = i;
            r.next_psn = p;
        }
        first_unstarted => {
            r.cur = first_unstarted.unwrap_or(r.wqes.len());
            r.next_psn = r.hwm;
        }
    }
}

/// Handles a response packet (ACK, NAK, READ response, atomic ACK) on an RC QP.
/// Returns whether the QP has something to send now.
pub(crate) fn handle_response(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    if qp.init.qp_type != QpType::Rc || !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        cx.counters.drop(RxDrop::NotExpected);
        return false;
    }
    let t = &pkt.transport;
    let p = t.bth.psn;
    // RL-09: only PSNs in the unacknowledged region [una, hwm) count; a
    // duplicate (before una) or ghost (at/after the point of maximum advance) is
    // dropped. Not `next_psn`: after a go-back the responder still answers with
    // its furthest PSN (seed 004 §4).
    if psn::diff(p, qp.req.una) < 0 || psn::diff(p, qp.req.hwm) >= 0 {
        cx.counters.drop(RxDrop::GhostResponse);
        return false;
    }
    let op = t.bth.opcode.info().operation;
    let wake = match op {
        Operation::Acknowledge => {
            let Some(aeth) = t.ext.aeth else { return false };
            on_aeth(qp, p, aeth.syndrome, cx)
        }
        Operation::RdmaReadResponse => on_read_response(qp, pkt, cx),
        Operation::AtomicAcknowledge => on_atomic_ack(qp, pkt, cx),
        _ => false,
    };
    retire(qp, cx.fx);
    wake
}

fn on_aeth(qp: &mut Qp, p: u32, syn: AethSyndrome, cx: &mut Ctx<'_>) -> bool {
    match syn {
        AethSyndrome::Ack { .. } => {
            if let Some(i) = ack_through(qp, p, cx.now) {
                let first = qp.req.wqes[i].first_psn;
                let resume = read_resume_psn(qp, i).unwrap_or(first);
                if qp.req.rewound_to != Some(resume) {
                    cx.counters.retransmits += 1;
                    rewind(qp, resume);
                }
                return true;
            }
            qp.req.rewound_to = None;
            true
        }
        AethSyndrome::RnrNak { timer_code } => {
            cx.counters.rnr_naks_received += 1;
            ack_through(qp, psn::add(p, psn::PSN_MASK), cx.now);
            // An RNR NAK is a response: the responder is alive, so the transport
            // retry count (which counts silence and sequence errors, RL-10) starts
            // again; only the RNR retry count limits an RNR wait (RL-11). Else
            // a few lost packets during a long RNR wait fail the QP.
            qp.req.retry_left = qp.attr.retry_cnt;
            if qp.attr.rnr_retry != 7 {
                if qp.req.rnr_left == 0 {
                    let idx = qp.req.wqes.iter().position(|w| w.contains(p)).unwrap_or(0);
                    fail(qp, idx, WcStatus::RnrRetryExcErr, cx.fx);
                    return false;
                }
                qp.req.rnr_left -= 1;
            }
            // RL-11: wait the responder's timer, then resend from the NAKed PSN.
            let us = syn.rnr_timer_us().unwrap_or(10);
            let _ = timer_code;
            qp.req.rnr_deadline = Some(cx.now.plus_ns(u64::from(us) * 1000));
            // A READ/ATOMIC before `p` whose response was lost is resent too
            // (its responses preceded this NAK, C9-27).
            qp.req.rnr_psn = if psn::diff(qp.req.una, p) < 0 {
                qp.req.una
            } else {
                p
            };
            qp.req.ack_deadline = None;
            false
        }
        AethSyndrome::Nak(code) => {
            ack_through(qp, psn::add(p, psn::PSN_MASK), cx.now);
            let idx = qp.req.open_wqe(p);
            match code {
                NakCode::PsnSequenceError => {
                    // RL-03/RL-10: go back to the PSN the responder expects, at once.
                    if qp.req.rewound_to == Some(p) {
                        return false;
                    }
                    if qp.req.retry_left == 0 {
                        // RL-10: the oldest unfinished WQE is the one that failed.
                        let oldest = qp.req.wqes.iter().position(|w| w.done.is_none());
                        fail(qp, oldest.unwrap_or(0), WcStatus::RetryExcErr, cx.fx);
                        return false;
                    }
                    qp.req.retry_left -= 1;
                    cx.counters.retransmits += 1;
                    let resume = if psn::diff(qp.req.una, p) < 0 {
                        // A READ/ATOMIC before `p` still misses its response: go
                        // back to it as well (C9-27: responses come in PSN order).
                        qp.req.una
                    } else {
                        idx.and_then(|i| read_resume_psn(qp, i)).unwrap_or(p)
                    };
                    rewind(qp, resume);
                    true
                }
                NakCode::InvalidRequest => {
                    fail(qp, idx.unwrap_or(0), WcStatus::RemInvReqErr, cx.fx);
                    false
                }
                NakCode::RemoteAccessError => {
                    fail(qp, idx.unwrap_or(0), WcStatus::RemAccessErr, cx.fx);
                    false
                }
                NakCode::RemoteOperationalError => {
                    fail(qp, idx.unwrap_or(0), WcStatus::RemOpErr, cx.fx);
                    false
                }
                NakCode::InvalidRdRequest => {
                    fail(qp, idx.unwrap_or(0), WcStatus::RemInvRdReqErr, cx.fx);
                    false
                }
            }
        }
    }
}

/// For a READ WQE, the PSN of the first response packet not yet received.
fn read_resume_psn(qp: &Qp, i: usize) -> Option<u32> {
    let w = qp.req.wqes.get(i)?;
    if w.wr.opcode != WrOpcode::RdmaRead {
        return None;
    }
    let pmtu = qp.attr.path_mtu.bytes() as u64;
    Some(psn::add(w.first_psn, (w.resp_bytes / pmtu) as u32))
}

fn on_read_response(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let Some(i) = qp.req.open_wqe(p) else {
        cx.counters.drop(RxDrop::GhostResponse);
        return false;
    };
    if qp.req.wqes[i].is_placement() {
        return on_placement_response(qp, i, pkt, cx);
    }
    if qp.req.wqes[i].wr.opcode != WrOpcode::RdmaRead {
        cx.counters.drop(RxDrop::UnexpectedResponse);
        return false;
    }
    // Responses before this READ acknowledge everything older (C9-27 ordering).
    let first = qp.req.wqes[i].first_psn;
    ack_through(qp, psn::add(first, psn::PSN_MASK), cx.now);
    let expect = read_resume_psn(qp, i).unwrap_or(first);
    let d = psn::diff(p, expect);
    if d < 0 {
        cx.counters.duplicates_received += 1;
        return false;
    }
    if d > 0 {
        // A response was lost: ask again for the rest, once per gap.
        if qp.req.rewound_to == Some(expect) {
            return false;
        }
        cx.counters.retransmits += 1;
        rewind(qp, expect);
        return true;
    }
    let pmtu = qp.attr.path_mtu.bytes() as u64;
    let w = &qp.req.wqes[i];
    let remaining = w.len - w.resp_bytes;
    let pos = t.bth.opcode.info().position;
    let first_pkt = w.resp_bytes == 0;
    let len = t.payload.len() as u64;
    // A retried READ asks for the rest only (RL-14) and its responses start again
    // with First/Only at that PSN (9.7.5.1.1: a duplicate READ is answered as a
    // new response sequence): First/Only are valid at any resume point.
    let ok = match pos {
        Position::Only => len == remaining && len <= pmtu,
        Position::First => len == pmtu && remaining > pmtu,
        Position::Middle => !first_pkt && len == pmtu && remaining > pmtu,
        Position::Last => !first_pkt && len == remaining && len <= pmtu && len > 0,
    };
    if !ok {
        fail(qp, i, WcStatus::BadRespErr, cx.fx);
        return false;
    }
    let SendData::Sges(sges) = &w.wr.data else {
        fail(qp, i, WcStatus::LocProtErr, cx.fx);
        return false;
    };
    if let Err(e) = cx
        .mrs
        .scatter(cx.mem, qp.init.pd, sges, w.resp_bytes, t.payload)
    {
        fail(qp, i, super::access::local_status(e), cx.fx);
        return false;
    }
    let w = &mut qp.req.wqes[i];
    w.resp_bytes += len;
    qp.req.rewound_to = None;
    // Each new response packet is progress: the retry count limits retries
    // without progress (RL-10), or a long READ that loses a few responses to
    // timeouts fails though it advances.
    qp.req.retry_left = qp.attr.retry_cnt;
    if matches!(pos, Position::Last | Position::Only) {
        w.done = Some(WcStatus::Success);
        let last = w.last_psn();
        ack_through(qp, last, cx.now);
    } else {
        let timeout = ack_timeout_ns(&qp.attr);
        qp.req.ack_deadline = timeout.map(|t| cx.now.plus_ns(t));
        // The response acknowledges its own PSN (9.7.4.1.2): `una` follows a
        // long READ, or a re-request for its rest stays outside the send window.
        ack_through(qp, p, cx.now);
    }
    true
}

/// The response of a FLUSH or ATOMIC WRITE (IBA 1.5 MPE): an RDMA READ
/// Response Only without payload at the request's PSN.
fn on_placement_response(qp: &mut Qp, i: usize, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let first = qp.req.wqes[i].first_psn;
    ack_through(qp, psn::add(first, psn::PSN_MASK), cx.now);
    if t.bth.opcode.info().position != Position::Only || !t.payload.is_empty() {
        fail(qp, i, WcStatus::BadRespErr, cx.fx);
        return false;
    }
    qp.req.wqes[i].done = Some(WcStatus::Success);
    qp.req.rewound_to = None;
    ack_through(qp, t.bth.psn, cx.now);
    true
}

fn on_atomic_ack(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let Some(i) = qp.req.open_wqe(p) else {
        cx.counters.drop(RxDrop::GhostResponse);
        return false;
    };
    let w = &qp.req.wqes[i];
    if !matches!(
        w.wr.opcode,
        WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd
    ) {
        cx.counters.drop(RxDrop::UnexpectedResponse);
        return false;
    }
    ack_through(qp, psn::add(p, psn::PSN_MASK), cx.now);
    let orig = t
        .ext
        .atomic_ack_eth
        .map(|a| a.orig_remote_data)
        .unwrap_or(0);
    let w = &qp.req.wqes[i];
    if let SendData::Sges(sges) = &w.wr.data {
        // The original value lands in the requester's buffer in host order.
        if let Err(e) = cx
            .mrs
            .scatter(cx.mem, qp.init.pd, sges, 0, &orig.to_le_bytes())
        {
            fail(qp, i, super::access::local_status(e), cx.fx);
            return false;
        }
    }
    qp.req.wqes[i].done = Some(WcStatus::Success);
    qp.req.rewound_to = None;
    ack_through(qp, p, cx.now);
    true
}

/// A timer fired: ACK timeout (RL-10) or the end of an RNR wait (RL-11).
/// Returns whether the QP has something to send.
pub(crate) fn on_timeout(qp: &mut Qp, now: Time, fx: &mut Effects, c: &mut Counters) -> bool {
    let r = &mut qp.req;
    if let Some(d) = r.rnr_deadline {
        if d <= now {
            r.rnr_deadline = None;
            let p = r.rnr_psn;
            r.rewound_to = None;
            rewind(qp, p);
            let t = ack_timeout_ns(&qp.attr);
            qp.req.ack_deadline = t.map(|t| now.plus_ns(t));
            return true;
        }
    }
    let Some(d) = qp.req.ack_deadline else {
        return false;
    };
    if d > now {
        return false;
    }
    if qp.req.unacked() == 0 {
        qp.req.ack_deadline = None;
        return false;
    }
    c.timeouts += 1;
    if qp.req.retry_left == 0 {
        // RL-10: seven means seven; then RETRY_EXC_ERR and the QP goes to Error.
        let una = qp.req.una;
        let idx = qp.req.open_wqe(una).unwrap_or(0);
        fail(qp, idx, WcStatus::RetryExcErr, fx);
        return false;
    }
    qp.req.retry_left -= 1;
    c.retransmits += 1;
    let una = qp.req.una;
    let resume = qp
        .req
        .open_wqe(una)
        .and_then(|i| read_resume_psn(qp, i))
        .unwrap_or(una);
    qp.req.rewound_to = None;
    rewind(qp, resume);
    let t = ack_timeout_ns(&qp.attr);
    qp.req.ack_deadline = t.map(|t| now.plus_ns(t));
    true
}

/// Builds the next request packet of this QP, if any.
pub(crate) fn poll_transmit(
    qp: &mut Qp,
    cx: &mut Ctx<'_>,
    buf: &mut [u8],
    limits: &super::Limits,
) -> Option<usize> {
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) || qp.req.rnr_deadline.is_some() {
        return None;
    }
    if !run_local_ops(qp, cx) {
        return None;
    }
    let is_rc = qp.init.qp_type == QpType::Rc;
    if is_rc && qp.req.outstanding() >= limits.send_window {
        return None;
    }
    let i = qp.req.cur;
    let w = qp.req.wqes.get(i)?;
    let pmtu = pmtu_of(qp);
    if let Some(status) = w.rejected {
        // A local error (or a WQE the caller could not accept) fails only once
        // everything before it has completed: `fail` takes the earlier WQEs as
        // acknowledged, which only a response may say. Until then nothing more
        // is sent.
        if i == 0 {
            fail(qp, i, status, cx.fx);
        }
        return None;
    }
    if w.sent == 0 && !w.started {
        if qp.state == QpState::Sqd {
            return None; // QS-05: no new message while draining
        }
        // Only a fenced WQE or a new READ/ATOMIC needs the count: skip the scan for
        // plain SEND/WRITE, which may stand behind hundreds of unacknowledged WQEs.
        let earlier_rd = if w.wr.flags.contains(SendFlags::FENCE) || w.is_rd_atomic() {
            // RL-07: the responder keeps its last max_dest_rd_atomic READ/ATOMICs
            // by arrival; a later one that already completed still occupies a slot
            // while an older one waits for (re-requested) responses. Count every
            // READ/ATOMIC from the oldest unfinished one on, or the new request
            // evicts the older one's saved state and its retry is never answered.
            let q = &qp.req.wqes;
            match q
                .iter()
                .take(i)
                .position(|x| x.is_rd_atomic() && x.done.is_none())
            {
                Some(o) => q
                    .iter()
                    .take(i)
                    .skip(o)
                    .filter(|x| x.is_rd_atomic())
                    .count(),
                None => 0,
            }
        } else {
            0
        };
        if w.wr.flags.contains(SendFlags::FENCE) && earlier_rd > 0 {
            return None; // OR-05
        }
        if w.is_rd_atomic() && earlier_rd >= usize::from(qp.attr.max_rd_atomic.max(1)) {
            return None; // RL-07
        }
        if w.len > super::MAX_MSG_SIZE
            || (qp.init.qp_type == QpType::Ud && w.len > pmtu as u64)
            || (matches!(
                w.wr.opcode,
                WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd
            ) && w.len < 8)
        {
            local_error(qp, i, WcStatus::LocLenErr, cx.fx);
            return None;
        }
    }
    let w = &mut qp.req.wqes[i];
    if w.sent == 0 {
        if !w.started {
            w.npkts = match w.wr.opcode {
                WrOpcode::RdmaRead => psn::read_packets(w.len, pmtu),
                WrOpcode::AtomicCmpSwap
                | WrOpcode::AtomicFetchAdd
                | WrOpcode::Flush
                | WrOpcode::AtomicWrite => 1,
                _ => (w.len.div_ceil(pmtu as u64)).max(1) as u32,
            };
            w.started = true;
        }
        // A WQE sent again from its start gets the same PSNs: sizes are fixed.
        w.first_psn = qp.req.next_psn;
    }
    match build_request(qp, i, cx, buf) {
        Ok(len) => Some(len),
        Err(status) => {
            local_error(qp, i, status, cx.fx);
            None
        }
    }
}

fn is_local_op(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::BindMw | WrOpcode::LocalInv)
}

/// Executes BIND_MW and LOCAL_INV work requests (MP-06, MP-07) that reached the
/// head of the send queue: a local operation sends no packet (seed 003: "硬件并
/// 不会发送任何数据包") and takes effect only once every earlier WQE has
/// completed, so that it is ordered after them (IBA 10.6.7.2; as rxe, which
/// runs them when the requester reaches them) and WQEs after it see its
/// effect. Returns whether the requester may go on to the WQE at `cur`: false
/// while a local operation waits for earlier WQEs (or the SQ drains, QS-05) or
/// after one failed (MW_BIND_ERR / LOC_PROT_ERR, then the QP fails as on any
/// local send error: RC to Error, UC/UD to SQE; QS-06).
fn run_local_ops(qp: &mut Qp, cx: &mut Ctx<'_>) -> bool {
    loop {
        let i = qp.req.cur;
        let Some(w) = qp.req.wqes.get(i) else {
            return true;
        };
        if !is_local_op(w.wr.opcode) || w.rejected.is_some() {
            return true;
        }
        if i != 0 || qp.state == QpState::Sqd {
            return false;
        }
        let (pd, qpn) = (qp.init.pd, qp.qpn);
        let res = match (&w.wr.opcode, &w.wr.data) {
            (WrOpcode::BindMw, SendData::Bind(b)) => {
                cx.mrs.bind_mw(pd, qpn, b).map_err(|e| e.status(true))
            }
            (WrOpcode::LocalInv, _) => cx
                .mrs
                .invalidate(pd, qpn, w.wr.imm_or_inv)
                .map_err(|e| e.status(false)),
            _ => Err(WcStatus::LocQpOpErr),
        };
        match res {
            Ok(()) => {
                let w = &mut qp.req.wqes[0];
                w.started = true;
                w.done = Some(WcStatus::Success);
                retire(qp, cx.fx);
            }
            Err(status) => {
                log::debug!(
                    "QP {qpn}: {:?} failed: {status:?}",
                    qp.req.wqes[0].wr.opcode
                );
                fail(qp, 0, status, cx.fx);
                return false;
            }
        }
    }
}

/// A local error on WQE `i` (a bad L_Key, a length past the limits): it fails
/// now if it is the oldest, else once the WQEs before it have completed.
fn local_error(qp: &mut Qp, i: usize, status: WcStatus, fx: &mut Effects) {
    if i == 0 {
        fail(qp, i, status, fx);
    } else if let Some(w) = qp.req.wqes.get_mut(i) {
        w.rejected = Some(status);
    }
}

fn build_request(
    qp: &mut Qp,
    i: usize,
    cx: &mut Ctx<'_>,
    buf: &mut [u8],
) -> Result<usize, WcStatus> {
    let pmtu = pmtu_of(qp);
    let qpn = qp.qpn;
    let pd = qp.init.pd;
    let qkey_own = qp.attr.qkey;
    let w = &qp.req.wqes[i];
    let k = w.sent;
    let psn_k = psn::add(w.first_psn, k);
    let (op, payload_len, ext, adv) = match w.wr.opcode {
        WrOpcode::RdmaRead => {
            // One request for the rest of the READ (RL-14 on a retry).
            let done = u64::from(k) * pmtu as u64;
            let reth = RethRepr {
                va: w.wr.remote_addr.wrapping_add(done),
                rkey: w.wr.rkey,
                dma_len: (w.len - done.min(w.len)) as u32,
            };
            let ext = ExtHeaders {
                reth: Some(reth),
                ..Default::default()
            };
            (Opcode::RC_RDMA_READ_REQUEST, 0, ext, w.npkts - k)
        }
        WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd => {
            let ext = ExtHeaders {
                atomic_eth: Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: w.wr.swap_add,
                    compare: w.wr.compare,
                }),
                ..Default::default()
            };
            let op = if w.wr.opcode == WrOpcode::AtomicCmpSwap {
                Opcode::RC_COMPARE_SWAP
            } else {
                Opcode::RC_FETCH_ADD
            };
            (op, 0, ext, 1)
        }
        WrOpcode::Flush => {
            let spec = FlushSpec::from_bits(w.wr.imm_or_inv);
            let ext = ExtHeaders {
                feth: Some(FethRepr {
                    selectivity: spec.selectivity,
                    placement_type: spec.placement_type,
                }),
                reth: Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len as u32,
                }),
                ..Default::default()
            };
            (Opcode::RC_FLUSH, 0, ext, 1)
        }
        WrOpcode::AtomicWrite => {
            let ext = ExtHeaders {
                reth: Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: 8,
                }),
                ..Default::default()
            };
            (Opcode::RC_ATOMIC_WRITE, 8, ext, 1)
        }
        _ => {
            let offset = u64::from(k) * pmtu as u64;
            let n = (w.len - offset.min(w.len)).min(pmtu as u64) as usize;
            let first = k == 0;
            let last = k + 1 == w.npkts;
            let op = data_opcode(qp.init.qp_type, w.wr.opcode, first, last);
            let mut ext = ExtHeaders::default();
            let info = op.info();
            if info.has(crate::wire::ExtKind::Reth) {
                ext.reth = Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len as u32,
                });
            }
            if info.has(crate::wire::ExtKind::ImmDt) {
                ext.imm_dt = Some(w.wr.imm_or_inv);
            }
            if info.has(crate::wire::ExtKind::Ieth) {
                // OP-03: the R_Key to invalidate, in the last/only packet.
                ext.ieth = Some(w.wr.imm_or_inv);
            }
            if let Some(ud) = &w.wr.ud {
                // PV-05: a Q_Key with its high bit set means "use the QP's own".
                let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                    qkey_own
                } else {
                    ud.remote_qkey
                };
                ext.deth = Some(DethRepr { qkey, src_qp: qpn });
            }
            (op, n, ext, 1)
        }
    };
    let w = &qp.req.wqes[i];
    let last_pkt = k + adv >= w.npkts;
    let info = op.info();
    let (av, dest_qp) = match &w.wr.ud {
        Some(ud) => (ud.av, ud.remote_qpn),
        None => (qp.attr.av, qp.attr.dest_qp_num),
    };
    let ack_req = qp.init.qp_type == QpType::Rc
        && (last_pkt || psn::add(psn_k, 1).is_multiple_of(ACK_REQ_EVERY));
    let solicited = w.wr.flags.contains(SendFlags::SOLICITED)
        && info.ends_message()
        && matches!(
            info.operation,
            Operation::Send
                | Operation::SendWithImmediate
                | Operation::SendWithInvalidate
                | Operation::RdmaWriteWithImmediate
        );
    let grh = av.grh.map(|g| GrhRepr {
        traffic_class: g.traffic_class,
        flow_label: g.flow_label,
        hop_limit: g.hop_limit,
        // A missing RoCE entry leaves a zero SGID; `link::emit_with` then
        // refuses the packet (no route).
        sgid: link::source_gid(cx.port, g.sgid_index).unwrap_or_default(),
        dgid: g.dgid,
    });
    let udp_sport = link::udp_source_port(av.grh.map_or(0, |g| g.flow_label), qp.qpn, dest_qp);
    let pkey = cx
        .port
        .pkeys
        .get(usize::from(qp.attr.pkey_index))
        .copied()
        .unwrap_or(0xffff);
    let pkt = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: av.sl & 0xf,
            dlid: av.dlid,
            slid: cx.port.lid | u16::from(av.src_path_bits),
        },
        grh,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: op,
                solicited,
                mig_req: false,
                pkey,
                fecn: false,
                becn: false,
                dest_qp,
                ack_req,
                psn: if qp.init.qp_type == QpType::Ud {
                    qp.req.next_psn
                } else {
                    psn_k
                },
            },
            ext,
            payload: &[],
        },
    };
    // The payload goes from memory straight into the packet (no staging copy).
    let offset = u64::from(k) * pmtu as u64;
    let data = &w.wr.data;
    let word = (w.wr.opcode == WrOpcode::AtomicWrite).then(|| w.wr.swap_add.to_le_bytes());
    let mrs = &*cx.mrs;
    let mem = &*cx.mem;
    let len = link::emit_with(cx.port, &pkt, av.dmac, udp_sport, buf, payload_len, |dst| {
        match data {
            // ATOMIC WRITE: its 8 bytes come from the WQE, not from memory.
            _ if word.is_some() => {
                let src = word.as_ref().ok_or(WcStatus::LocLenErr)?;
                dst.copy_from_slice(src.get(..dst.len()).ok_or(WcStatus::LocLenErr)?);
                Ok(())
            }
            SendData::Inline(d) => {
                let at = offset as usize;
                let src = d.get(at..at + dst.len()).ok_or(WcStatus::LocLenErr)?;
                dst.copy_from_slice(src);
                Ok(())
            }
            SendData::Sges(s) => mrs
                .gather(mem, pd, s, offset, dst)
                .map_err(super::access::local_status),
            // A bind sends no packet; it never gets here.
            SendData::Bind(_) => Err(WcStatus::LocQpOpErr),
        }
    })
    .map_err(|e| match e {
        EmitWithError::Fill(st) => st,
        // RoCE: no route for the path (its GID entry went away); the WQE
        // fails like a send to an unusable address.
        EmitWithError::Emit(_) if cx.port.is_ethernet() => {
            cx.counters.tx_no_route += 1;
            WcStatus::LocQpOpErr
        }
        EmitWithError::Emit(_) => WcStatus::LocLenErr,
    })?;
    // Advance.
    let timeout = ack_timeout_ns(&qp.attr);
    let r = &mut qp.req;
    let w = &mut r.wqes[i];
    w.sent += adv;
    r.next_psn = psn::add(psn_k, adv);
    if psn::diff(r.next_psn, r.hwm) > 0 {
        r.hwm = r.next_psn;
    }
    if w.sent >= w.npkts {
        w.sent = w.npkts;
        r.cur += 1;
        if qp.init.qp_type != QpType::Rc {
            // UC/UD complete once sent: nothing will acknowledge them.
            w.done = Some(WcStatus::Success);
            r.una = r.next_psn;
        }
    }
    if qp.init.qp_type == QpType::Rc && r.ack_deadline.is_none() {
        r.ack_deadline = timeout.map(|t| cx.now.plus_ns(t));
    }
    if qp.init.qp_type != QpType::Rc {
        retire(qp, cx.fx);
    }
    Ok(len)
}

/// The opcode of a SEND or WRITE packet by position (Table 38).
fn data_opcode(t: QpType, op: WrOpcode, first: bool, last: bool) -> Opcode {
    use WrOpcode::*;
    let rc = t == QpType::Rc;
    let pick = |rc_op: Opcode, uc_op: Opcode| if rc { rc_op } else { uc_op };
    if t == QpType::Ud {
        return if op == SendWithImm {
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        };
    }
    match (op, first, last) {
        (Send | SendWithImm | SendWithInv, true, false) => {
            pick(Opcode::RC_SEND_FIRST, Opcode::UC_SEND_FIRST)
        }
        (Send | SendWithImm | SendWithInv, false, false) => {
            pick(Opcode::RC_SEND_MIDDLE, Opcode::UC_SEND_MIDDLE)
        }
        // OP-03: RC only (validate_wr); IETH in the last or only packet.
        (SendWithInv, false, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (SendWithInv, true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (Send, false, true) => pick(Opcode::RC_SEND_LAST, Opcode::UC_SEND_LAST),
        (Send, true, true) => pick(Opcode::RC_SEND_ONLY, Opcode::UC_SEND_ONLY),
        (SendWithImm, false, true) => pick(
            Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
            Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
        ),
        (SendWithImm, true, true) => pick(
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
        ),
        (_, true, false) => pick(Opcode::RC_RDMA_WRITE_FIRST, Opcode::UC_RDMA_WRITE_FIRST),
        (_, false, false) => pick(Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::UC_RDMA_WRITE_MIDDLE),
        (RdmaWriteWithImm, false, true) => pick(
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        ),
        (RdmaWriteWithImm, true, true) => pick(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        ),
        (_, false, true) => pick(Opcode::RC_RDMA_WRITE_LAST, Opcode::UC_RDMA_WRITE_LAST),
        (_, true, true) => pick(Opcode::RC_RDMA_WRITE_ONLY, Opcode::UC_RDMA_WRITE_ONLY),
    }
}
