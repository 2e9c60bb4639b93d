//! The completer of a QP, the second of its three state machines (as Linux rxe's
//! rxe_comp.c): handles the responses to the requester's packets (ACK, NAK, RNR
//! NAK, RDMA READ response, atomic ACK), retires WQEs in post order into
//! completions, goes back to the first unacknowledged PSN on a NAK, a gap or a
//! timeout, and fails or flushes the send queue (IBA 9.7; C9-27, OR-04, OR-06,
//! QS-05..QS-07, RL-03, RL-09..RL-11, RL-14). It works on the QP's [`Requester`]
//! state, which the [`requester`](super::requester) fills as it sends.

use super::requester::{ack_timeout_ns, Requester, SendWqe};
use super::{to_error, Ctx, Effects, Qp, RxDrop};
use crate::engine::counters::Counters;
use crate::psn;
use crate::verbs::{Completion, QpState, SendData, Time, WcOpcode, WcStatus, WrOpcode};
use crate::wire::ext::{AethSyndrome, NakCode};
use crate::wire::opcode::{Operation, Position};
use crate::wire::PacketRepr;

fn wc_opcode(op: WrOpcode) -> WcOpcode {
    match op {
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        WrOpcode::RdmaRead => WcOpcode::RdmaRead,
        WrOpcode::AtomicCmpSwap => WcOpcode::CompSwap,
        WrOpcode::AtomicFetchAdd => WcOpcode::FetchAdd,
        WrOpcode::LocalInv => WcOpcode::LocalInv,
        WrOpcode::BindMw => WcOpcode::BindMw,
        WrOpcode::RegMr => WcOpcode::RegMr,
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
pub(super) fn retire(qp: &mut Qp, fx: &mut Effects) {
    while let Some(w) = qp.req.wqes.front() {
        let Some(status) = w.done else { break };
        if w.signaled || status != WcStatus::Success {
            fx.completions
                .push((qp.init.send_cq, completion(qp, w, status)));
        }
        qp.req.wqes.pop_front();
        qp.req.cur = qp.req.cur.saturating_sub(1);
    }
    check_drained(qp, fx);
}

/// QS-05 (seed 001 §9): in SQD, once every message begun before the QP entered
/// it has been sent, acknowledged and retired (no WQE left that has started),
/// the SQ is drained; the SQ-drained event is raised once, if the modify to SQD
/// asked for it. Called as WQEs retire and at the modify itself, so an SQ that
/// was idle already raises it at once.
pub(super) fn check_drained(qp: &mut Qp, fx: &mut Effects) {
    if qp.state == QpState::Sqd
        && qp.attr.en_sqd_async_notify
        && qp.req.wqes.iter().all(|w| !w.started)
    {
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
    qp.req.rec.idle();
}

/// A send-side error: the WQE at `idx` completes with `status`; RC goes to Error,
/// UC and UD to SQE (QS-06), later WQEs flush.
pub(super) fn fail(qp: &mut Qp, idx: usize, status: WcStatus, fx: &mut Effects) {
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
    if qp.init.qp_type.is_reliable() {
        to_error(qp, fx);
    } else {
        qp.state = QpState::Sqe;
        flush_sq(qp, fx);
    }
}

/// Where a go-back resumes a WQE after the one it restarts in: from its start,
/// but a READ that already received responses asks only for the rest (RL-14),
/// and a READ/ATOMIC its responses completed out of order is not sent again
/// (the requester skips it).
pub(super) fn resent_from(w: &SendWqe, pmtu: u64) -> u32 {
    if !w.started {
        0
    } else if w.done.is_some() {
        w.npkts
    } else if w.wr.opcode == WrOpcode::RdmaRead {
        ((w.resp_bytes / pmtu) as u32).min(w.npkts.saturating_sub(1))
    } else {
        0
    }
}

/// Restarts transmission from PSN `p` (go-back-N, 9.7.4.1.3).
fn rewind(qp: &mut Qp, p: u32, now: Time) {
    let pmtu = qp.attr.path_mtu.bytes() as u64;
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
        later.sent = resent_from(later, pmtu);
    }
    r.cur = i;
    r.next_psn = p;
    r.rewound_to = Some(p);
    let hwm = r.hwm;
    r.rec.on_rewind(p, hwm, now);
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
    let una_before = r.una;
    // The valid region ends at the point of maximum advance, not at `next_psn`,
    // which a go-back lowered (RL-09).
    if psn::diff(new_una, r.una) > 0 && psn::diff(new_una, r.hwm) <= 0 {
        r.una = new_una;
        progressed = true;
    }
    // WQEs past `una` that their READ/ATOMIC response completed out of order
    // need no acknowledgement: `una` moves past them (else a timeout would resend
    // from a PSN no unfinished WQE holds).
    // Likewise past the responses a READ at `una` already received: they
    // acknowledge their own PSNs (9.7.4.1.2), though they came while an older
    // READ still missed one.
    let pmtu = qp.attr.path_mtu.bytes() as u64;
    for w in r.wqes.iter() {
        if w.done.is_some() && w.contains(r.una) {
            r.una = psn::add(w.last_psn(), 1);
            progressed = true;
        } else if w.wr.opcode == WrOpcode::RdmaRead && w.contains(r.una) {
            let resume = psn::add(w.first_psn, (w.resp_bytes / pmtu) as u32);
            if psn::diff(resume, r.una) > 0 {
                r.una = resume;
                progressed = true;
            }
        }
    }
    if psn::diff(r.una, r.next_psn) > 0 {
        skip_acked(r, qp.attr.path_mtu.bytes() as u64);
    }
    if progressed {
        r.retry_left = qp.attr.retry_cnt;
        r.rnr_left = qp.attr.rnr_retry;
        r.ack_deadline = if r.unacked() > 0 {
            timeout.map(|t| now.plus_ns(t))
        } else {
            None
        };
        let n = psn::diff(r.una, una_before).max(0) as u32;
        let unacked = r.unanswered();
        r.rec.on_progress(last_acked, n, unacked, now, timeout);
    }
    skipped
}

/// After a go-back, an ACK came for PSNs the go-back was about to resend (the
/// responder answers a retried request with its furthest PSN, seed 004 §4):
/// skip what is acknowledged. Every WQE keeps the PSNs it was first sent with:
/// sending resumes at `una` in the first unfinished WQE (at its first PSN when
/// READ/ATOMIC responses completed the WQEs before it out of order), or at the
/// point of maximum advance when every WQE sent so far is done.
fn skip_acked(r: &mut Requester, pmtu: u64) {
    let una = r.una;
    match r.wqes.iter().position(|w| w.done.is_none()) {
        Some(i) if r.wqes[i].started => {
            let w = &mut r.wqes[i];
            let p = if w.contains(una) { una } else { w.first_psn };
            w.sent = psn::diff(p, w.first_psn) as u32;
            for later in r.wqes.iter_mut().skip(i + 1) {
                later.sent = resent_from(later, pmtu);
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
    if !qp.init.qp_type.is_reliable() || !matches!(qp.state, QpState::Rts | QpState::Sqd) {
        cx.counters.drop(RxDrop::NotExpected);
        return false;
    }
    let t = &pkt.transport;
    let p = t.bth.psn;
    // RL-13: the credits of any ACK-kind AETH, taken before the duplicate
    // check below drops it (seed 004 §2.6.1-2.6.2: a duplicate of the last
    // ACK may be sent only to carry credits).
    let credited = t
        .ext
        .aeth
        .is_some_and(|a| super::credits::on_aeth(qp, p, a.syndrome, cx.now));
    // An ACK whose only news is the credit count answers no probe (issue 14).
    let credit_only = t.ext.aeth.is_some_and(|a| match a.syndrome {
        AethSyndrome::Ack { credit_code } => qp.req.rec.credit_only(p, a.msn, credit_code),
        _ => false,
    });
    // RL-09: only PSNs in the unacknowledged region [una, hwm) count; a
    // duplicate (before una) or ghost (at/after the point of maximum advance) is
    // dropped. Not `next_psn`: after a go-back the responder still answers with
    // its furthest PSN (seed 004 §4).
    let before_una = psn::diff(p, qp.req.una) < 0;
    let op = t.bth.opcode.info().operation;
    if before_una || psn::diff(p, qp.req.hwm) >= 0 {
        if before_una && !credit_only && qp.req.rec.on_duplicate(p, cx.now) {
            // The answer to a probe whose original was answered too.
            cx.counters.spurious_probes += 1;
        }
        if before_una && op == Operation::RdmaReadResponse {
            // The responder is replaying a READ already answered (a
            // duplicate it executes in full, RL-05) and answers in order
            // (C9-27): what this QP waits for comes after it. A probe now
            // would queue one more replay behind it (a storm against a
            // responder that never cuts a replay short, as soft-RoCE;
            // engine_read_slow_responder.rs). Postponed as by any activity;
            // the ACK timer still runs (RL-10).
            qp.req.rec.on_activity(cx.now, ack_timeout_ns(&qp.attr));
        }
        cx.counters.drop(RxDrop::GhostResponse);
        return credited;
    }
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
    wake || credited
}

fn on_aeth(qp: &mut Qp, p: u32, syn: AethSyndrome, cx: &mut Ctx<'_>) -> bool {
    match syn {
        AethSyndrome::Ack { .. } => {
            if let Some(i) = ack_through(qp, p, cx.now) {
                let first = qp.req.wqes[i].first_psn;
                let resume = read_resume_psn(qp, i).unwrap_or(first);
                if qp.req.rewound_to != Some(resume) {
                    cx.counters.retransmits += 1;
                    rewind(qp, resume, cx.now);
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
            qp.req.rec.probe_at = None;
            qp.req.rec.probe_due = false;
            false
        }
        AethSyndrome::Nak(code) => {
            ack_through(qp, psn::add(p, psn::PSN_MASK), cx.now);
            let idx = qp.req.open_wqe(p);
            match code {
                NakCode::PsnSequenceError => {
                    // RL-03/RL-10: go back to the PSN the responder expects, at once.
                    let una = qp.req.una;
                    if qp.req.rec.repeated_nak(p, una) || qp.req.rewound_to == Some(p) {
                        return false;
                    }
                    if qp.req.rec.absorbs_nak(p, cx.now) {
                        // The go-back under way resends `p` already (a
                        // reordered packet's NAKs; `recovery`): not restarted,
                        // not a retry (RL-10 counts the go-backs).
                        cx.counters.seq_naks_absorbed += 1;
                        return true;
                    }
                    if qp.req.retry_left == 0 {
                        // RL-10: the oldest unfinished WQE is the one that failed.
                        let oldest = qp.req.wqes.iter().position(|w| w.done.is_none());
                        fail(qp, oldest.unwrap_or(0), WcStatus::RetryExcErr, cx.fx);
                        return false;
                    }
                    qp.req.retry_left -= 1;
                    cx.counters.retransmits += 1;
                    cx.counters.seq_nak_go_backs += 1;
                    let hwm = qp.req.hwm;
                    qp.req.rec.on_loss(hwm);
                    qp.req.rec.end_probe();
                    let resume = if psn::diff(qp.req.una, p) < 0 {
                        // A READ/ATOMIC before `p` still misses its response: go
                        // back to it as well (C9-27: responses come in PSN order).
                        qp.req.una
                    } else {
                        idx.and_then(|i| read_resume_psn(qp, i)).unwrap_or(p)
                    };
                    rewind(qp, resume, cx.now);
                    // The responder now drops all but `p` silently (RL-03):
                    // that packet goes twice when the go-back resends it
                    // (`Recovery::copy_first`), also when the go-back starts
                    // earlier, at a READ/ATOMIC missing its response; not a
                    // READ request (a duplicate READ is executed again, RL-05).
                    if idx.is_some_and(|i| qp.req.wqes[i].wr.opcode != WrOpcode::RdmaRead) {
                        qp.req.rec.copy_first(p);
                    }
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

/// A READ response or ATOMIC result that found its page not present (issue
/// 29): dropped and counted, the fault raised (the send queue waits for the
/// MAP) and the requester rewound to `from`, so that it asks again when the
/// queue resumes.
fn odp_drop_response(qp: &mut Qp, f: crate::mr::OdpFault, from: u32, cx: &mut Ctx<'_>) {
    cx.counters.odp.responses_dropped += 1;
    super::odp::requester_fault(qp, f, cx);
    if qp.req.rewound_to != Some(from) {
        rewind(qp, from, cx.now);
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
    // Responses before this READ acknowledge everything older (C9-27 ordering);
    // an older READ/ATOMIC still missing a response lost it.
    let first = qp.req.wqes[i].first_psn;
    let older_lost = ack_through(qp, psn::add(first, psn::PSN_MASK), cx.now);
    let expect = read_resume_psn(qp, i).unwrap_or(first);
    let d = psn::diff(p, expect);
    let restarted = qp.req.rec.read_restarted(p, cx.now);
    if d < 0 {
        cx.counters.duplicates_received += 1;
        if qp.req.rec.on_duplicate(p, cx.now) {
            cx.counters.spurious_probes += 1;
        }
        qp.req.rec.on_activity(cx.now, ack_timeout_ns(&qp.attr));
        return false;
    }
    if d > 0 {
        // A response was lost: ask again for the rest, once per gap; again
        // when the re-request's answer lost its first response too (the
        // responder's stream started over without it, `recovery`). An older
        // READ/ATOMIC still missing a response lost it as well (it came
        // before this one, C9-27): the go-back starts there, or nothing
        // would ask for it again before a probe.
        let from = older_lost
            .map(|l| read_resume_psn(qp, l).unwrap_or(qp.req.wqes[l].first_psn))
            .unwrap_or(expect);
        if qp.req.rewound_to == Some(from) && !restarted {
            cx.counters.drop(RxDrop::ReadResponseAfterGap);
            qp.req.rec.on_activity(cx.now, ack_timeout_ns(&qp.attr));
            if psn::add(p, 1) == qp.req.hwm {
                qp.req.rec.on_old_stream_end(cx.now);
            }
            return false;
        }
        cx.counters.retransmits += 1;
        let hwm = qp.req.hwm;
        qp.req.rec.on_loss(hwm);
        qp.req.rec.end_probe();
        rewind(qp, from, cx.now);
        qp.req.rec.on_read_gap(p, cx.now);
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
    let data = cx.payload(t);
    if let Err(e) = cx.mrs.scatter(cx.mem, qp.init.pd, sges, w.resp_bytes, data) {
        if let crate::mr::CopyError::PageFault(f) = e {
            // Issue 29: the READ's buffer page is not present: the response
            // is dropped, the send queue waits for the page and then asks
            // again for the rest (RL-14); the old stream's later responses
            // are dropped as after any gap.
            odp_drop_response(qp, f, p, cx);
            return false;
        }
        fail(qp, i, super::access::local_status(e), cx.fx);
        return false;
    }
    let w = &mut qp.req.wqes[i];
    w.resp_bytes += len;
    if older_lost.is_none() {
        qp.req.rewound_to = None;
    }
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
    if let Some(lost) = older_lost {
        // An older READ/ATOMIC still misses a response, which came before this
        // one (C9-27): it was lost. This READ keeps what it placed (its
        // completion still waits for the older one, OR-04); the older one asks
        // again for its rest (RL-14) and so does this one, for what the
        // responder drops when it answers the retry (RL-05).
        let resume = read_resume_psn(qp, lost).unwrap_or(qp.req.wqes[lost].first_psn);
        if qp.req.rewound_to != Some(resume) || restarted {
            cx.counters.retransmits += 1;
            let hwm = qp.req.hwm;
            qp.req.rec.on_loss(hwm);
            qp.req.rec.end_probe();
            rewind(qp, resume, cx.now);
            qp.req.rec.on_read_gap(p, cx.now);
        } else if psn::add(p, 1) == qp.req.hwm {
            qp.req.rec.on_old_stream_end(cx.now);
        }
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
    // Responses before this one acknowledge everything older (C9-27); an
    // older READ/ATOMIC still missing its response lost it.
    let older_lost = ack_through(qp, psn::add(p, psn::PSN_MASK), cx.now);
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
            if let crate::mr::CopyError::PageFault(f) = e {
                // Issue 29: the result's page is not present: dropped; the
                // ATOMIC is requested again after the MAP and the
                // responder's replay answers it without executing it again
                // (RL-06).
                let first = qp.req.wqes[i].first_psn;
                odp_drop_response(qp, f, first, cx);
                return false;
            }
            fail(qp, i, super::access::local_status(e), cx.fx);
            return false;
        }
    }
    qp.req.wqes[i].done = Some(WcStatus::Success);
    ack_through(qp, p, cx.now);
    match older_lost {
        Some(lost) => rd_atomic_gap(qp, lost, i, cx),
        None => {
            qp.req.rewound_to = None;
            qp.req.atomic_gap.clear();
        }
    }
    true
}

/// The ATOMIC response at WQE `at` came while the older READ/ATOMIC at `lost`
/// still misses its response: ask again at once for the missing ones before
/// it, not for those in flight after it (`atomic_gap`; issue 30).
fn rd_atomic_gap(qp: &mut Qp, lost: usize, at: usize, cx: &mut Ctx<'_>) {
    let p = qp.req.wqes[at].first_psn;
    let missing = |w: &SendWqe| w.is_rd_atomic() && w.started && w.done.is_none();
    let Some(newest) = qp.req.wqes.iter().take(at).rev().find(|w| missing(w)) else {
        return;
    };
    let (newest, hwm) = (newest.first_psn, qp.req.hwm);
    if !qp.req.atomic_gap.news(p, newest, hwm) {
        // Asked for already: the re-request's answer comes after the
        // responses still in flight (C9-27), so once they came it is due
        // within a round trip, not a probe floor later.
        qp.req.rec.on_old_stream_end(cx.now);
        return;
    }
    // A duplicate READ preempts the responses queued after it (RL-05): then
    // everything after it goes again, as after any gap.
    let selective = !qp
        .req
        .wqes
        .iter()
        .take(at)
        .skip(lost)
        .any(|w| w.done.is_none() && w.wr.opcode == WrOpcode::RdmaRead);
    let in_flight: Vec<u32> = qp.req.wqes.iter().skip(at + 1).map(|w| w.sent).collect();
    let resume = read_resume_psn(qp, lost).unwrap_or(qp.req.wqes[lost].first_psn);
    cx.counters.retransmits += 1;
    qp.req.rec.on_loss(hwm);
    qp.req.rec.end_probe();
    rewind(qp, resume, cx.now);
    if selective {
        // What went after `p` keeps its progress: a lost one shows as the
        // next gap (or by the probe), a duplicate would only be replayed.
        for (w, sent) in qp.req.wqes.iter_mut().skip(at + 1).zip(in_flight) {
            if w.started && w.done.is_none() {
                w.sent = sent;
            }
        }
        // The go-back resends nothing from `p` on: a sequence NAK for a
        // later PSN is news, not one it answers (`Recovery::absorbs_nak`).
        qp.req.rec.on_rewind(resume, p, cx.now);
    }
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
            rewind(qp, p, now);
            // RL-11: the NAKed request alone until it is answered (issue 14:
            // many senders to a receiver without buffers do not flood it).
            qp.req.rec.start_probe();
            let t = ack_timeout_ns(&qp.attr);
            qp.req.ack_deadline = t.map(|t| now.plus_ns(t));
            return true;
        }
        // Waiting out an RNR NAK: no probe, no ACK timer (RL-11).
        qp.req.rec.probe_at = None;
        qp.req.rec.probe_due = false;
        return false;
    }
    if qp.req.unacked() == 0 {
        qp.req.ack_deadline = None;
        qp.req.rec.idle();
        return false;
    }
    match qp.req.ack_deadline {
        Some(d) if d <= now => {}
        _ => return probe(qp, now),
    }
    c.timeouts += 1;
    c.recovery_stall_us += qp.req.rec.stalled_ns(now) / 1000;
    // AD-10: an Armed QP may move to its alternate path here (restarting
    // its retry count); the resend below then goes on the new path.
    super::apm::on_ack_timeout(qp, fx, c);
    if qp.req.retry_left == 0 {
        // RL-10: seven means seven; then RETRY_EXC_ERR and the QP goes to Error.
        let una = qp.req.una;
        let idx = qp.req.open_wqe(una).unwrap_or(0);
        fail(qp, idx, WcStatus::RetryExcErr, fx);
        return false;
    }
    qp.req.retry_left -= 1;
    c.retransmits += 1;
    let hwm = qp.req.hwm;
    qp.req.rec.on_timeout(hwm);
    resend_oldest(qp, now);
    let t = ack_timeout_ns(&qp.attr);
    qp.req.ack_deadline = t.map(|t| now.plus_ns(t));
    qp.req.rec.probe_at = None;
    qp.req.rec.probe_due = false;
    true
}

/// Goes back to the oldest unacknowledged request (for a READ, to its first
/// response not received, RL-14).
fn resend_oldest(qp: &mut Qp, now: Time) {
    let resume = oldest_resume_psn(qp);
    qp.req.rewound_to = None;
    rewind(qp, resume, now);
}

/// The PSN a resend of the oldest unacknowledged request starts at.
fn oldest_resume_psn(qp: &Qp) -> u32 {
    let una = qp.req.una;
    qp.req
        .open_wqe(una)
        .and_then(|i| read_resume_psn(qp, i))
        .unwrap_or(una)
}

/// The probe timer fired before the ACK timer (issue 14, `recovery`). What
/// it does is decided when the QP is next polled for a packet
/// ([`fire_probe`]): a caller that was itself descheduled past the probe
/// timeout runs its due timers before it reads what arrived meanwhile, and
/// the ACKs waiting in its socket make the probe needless (vhca policy).
fn probe(qp: &mut Qp, now: Time) -> bool {
    match qp.req.rec.probe_at {
        Some(t) if t <= now => {}
        _ => return false,
    }
    qp.req.rec.probe_at = None;
    qp.req.rec.probe_due = true;
    true
}

/// A probe timeout with nothing acknowledged since ([`probe`]): the oldest
/// unacknowledged request goes again with AckReq, alone; not a retry (RL-10
/// counts ACK timeouts and sequence NAKs only).
pub(super) fn fire_probe(qp: &mut Qp, now: Time, c: &mut Counters) {
    qp.req.rec.probe_due = false;
    if qp.req.unacked() == 0 || qp.req.rnr_deadline.is_some() {
        return;
    }
    let (una, hwm) = (qp.req.una, qp.req.hwm);
    let timeout = ack_timeout_ns(&qp.attr);
    c.recovery_stall_us += qp.req.rec.stalled_ns(now) / 1000;
    let read = qp
        .req
        .open_wqe(una)
        .is_some_and(|i| qp.req.wqes[i].wr.opcode == WrOpcode::RdmaRead);
    if read {
        c.probes += 1;
        let resume = oldest_resume_psn(qp);
        let end = qp
            .req
            .open_wqe(una)
            .map_or(resume, |i| psn::add(qp.req.wqes[i].last_psn(), 1));
        // The READ's rest asked for again, alone and outside the send
        // sequence, as a tail probe: not a go-back over the later READs. A
        // responder executes each duplicate READ in full (RL-05), and one
        // that never cuts a replay short (soft-RoCE) queues them all behind
        // what it is still sending, so a go-back per probe against a paused
        // peer replays every outstanding READ each time, a storm that ends
        // in RETRY_EXC_ERR (engine_read_slow_responder.rs). A responder that
        // stops its stream for the duplicate instead (seed 004 §3.3.2.2, as
        // vhca's) ACKs past the later READs it dropped, which then go again
        // at once (C9-27, `on_aeth`); a later READ lost whole is a probe of
        // its own.
        qp.req.rec.pending_probe = Some(resume);
        qp.req.rec.on_read_probe(resume, end, now, timeout);
    } else if qp.req.rec.tail_probe_or_go_back(una) {
        // A probe timeout after the tail probe, and what went before it is
        // still not all acknowledged: lost; go back N (9.7.4.1.3).
        c.probes += 1;
        c.retransmits += 1;
        c.probe_go_backs += 1;
        qp.req.rec.on_tail_lost(hwm, now, timeout);
        resend_oldest(qp, now);
    } else {
        c.probes += 1;
        qp.req.rec.on_tail_probe(una, hwm, now, timeout);
    }
}
