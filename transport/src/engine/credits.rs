//! End-to-end (message level) credits of RC (RL-13; IBA 9.7.7.2, seed 000
//! 9.3.5.1: an ACK's AETH syndrome carries the responder's credit count, from
//! which the requester knows its limit; seed 004 §2.6.2: a duplicate ACK may be
//! sent only to deliver credits).
//!
//! Responder: every AETH of the ACK kind (ACK, first/last/only READ response,
//! atomic ACK) carries the count of receive WQEs on the QP's own receive queue
//! when the packet is built, rounded down to a value of the credit table (IBA
//! Table 46); a QP on an SRQ has no count of its own and sends the "invalid"
//! code 31 (9.7.7.2: no credit count). When the count last sent was zero and a
//! receive WQE is posted, an unsolicited ACK (a duplicate of the last one, with
//! the new count) tells the requester it may go on, and ends its RNR wait if
//! the message sent alone met an RNR NAK.
//!
//! Requester: SEND, SEND with Immediate or Invalidate and RDMA WRITE with
//! Immediate consume a receive WQE. Each ACK-kind AETH at PSN `p` in
//! `[una - 1, hwm)` (the unacknowledged region, or the duplicate of the last
//! ACK that carries credits) sets the limit: the consuming messages started at
//! or before `p` plus the credits. A consuming message starts only within the
//! limit, or, at zero credits, alone: when no other consuming message is
//! outstanding one may go (the single message the requester may send without
//! credits, 9.7.7.2; the responder may have posted a WQE whose update is still
//! on its way, as in a ping-pong, or lost). Without a WQE it meets an RNR NAK
//! (RL-11), and a credit update arriving during the RNR wait ends the wait. So
//! a receiver short of buffers is sent one message at a time instead of a
//! window of them, and a ping-pong waits for nothing. Before the first count
//! (a new connection) and after code 31 there is no limit, as with a
//! responder that has no credits.
//!
//! The count is a lower bound: it is taken when the ACK is built, after
//! messages later than `p` may have consumed WQEs too, and WQEs posted later
//! only add. So no message sent within the limit finds no WQE, whatever
//! order ACKs arrive in (only the one sent alone at zero may); the newest
//! limit is kept.

use super::requester::SendWqe;
use super::{Counters, Qp};
use crate::psn;
use crate::verbs::{QpType, Time, WrOpcode};
use crate::wire::ext::{AethSyndrome, CREDIT_CODE_INVALID};

/// What the requester knows of the responder's credits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// No count received yet, or the responder reports none (code 31): no
    /// limit (a missing WQE is an RNR NAK, RL-11, as with a peer without
    /// credits).
    #[default]
    Unlimited,
    /// Consuming messages may start while fewer than this many have started
    /// (a count that wraps, compared in sequence order).
    Upto(u32),
}

/// The requester's credit state (RL-13).
#[derive(Debug, Default)]
pub(crate) struct Credits {
    /// `Limits::credits` off: no limit, counts received ignored.
    off: bool,
    limit: Limit,
    /// Consuming messages started so far (wraps).
    started: u32,
}

/// Does this work request consume a receive WQE at the responder (9.7.7.2)?
pub(super) fn consumes(op: WrOpcode) -> bool {
    matches!(
        op,
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv | WrOpcode::RdmaWriteWithImm
    )
}

/// The WQEs sent so far (or run, local operations), oldest first: a prefix of
/// the queue, since WQEs start in order. Its length is bounded by what is
/// unacknowledged (the send window), not by the queue's depth, so a peer's
/// ACKs cost no scan of a deep send queue.
fn sent_part<'a>(q: impl IntoIterator<Item = &'a SendWqe>) -> impl Iterator<Item = &'a SendWqe> {
    q.into_iter().take_while(|w| w.started || w.done.is_some())
}

fn outstanding(w: &SendWqe) -> bool {
    w.started && w.done.is_none() && consumes(w.wr.opcode)
}

/// The largest credit code whose count is at most `n` (IBA Table 46).
pub(crate) fn code_for(n: usize) -> u8 {
    (0..CREDIT_CODE_INVALID)
        .rev()
        .find(|&c| {
            AethSyndrome::Ack { credit_code: c }
                .credits()
                .is_some_and(|k| k as usize <= n)
        })
        .unwrap_or(0)
}

/// The credit code the responder of `qp` reports now: its receive queue's
/// WQEs, or "invalid" on an SRQ (no count of its own).
pub(crate) fn responder_code(qp: &Qp) -> u8 {
    if qp.init.srq.is_some() || qp.resp.credits_off {
        CREDIT_CODE_INVALID
    } else {
        code_for(qp.rq.len())
    }
}

/// An ACK-kind AETH at PSN `p` reached the requester of `qp` at `now`:
/// takes its credits if `p` is in `[una - 1, hwm)`, and ends an RNR wait
/// whose message they cover (its WQE was posted since the RNR NAK). Returns
/// whether the QP has something to send now.
pub(super) fn on_aeth(qp: &mut Qp, p: u32, syn: AethSyndrome, now: Time) -> bool {
    let AethSyndrome::Ack { .. } = syn else {
        return false;
    };
    let r = &qp.req;
    if r.credits.off
        || qp.init.qp_type != QpType::Rc
        || psn::diff(p, r.una) < -1
        || psn::diff(p, r.hwm) >= 0
    {
        return false;
    }
    let c = &qp.req.credits;
    let limit = match syn.credits() {
        None => Limit::Unlimited,
        Some(n) => {
            // Consuming messages started after `p` are not in the count.
            let after = sent_part(qp.req.wqes.iter())
                .filter(|w| w.started && consumes(w.wr.opcode) && psn::diff(w.first_psn, p) > 0)
                .count() as u32;
            let new = c.started.wrapping_sub(after).wrapping_add(n);
            match c.limit {
                Limit::Upto(old) if (new.wrapping_sub(old) as i32) < 0 => Limit::Upto(old),
                _ => Limit::Upto(new),
            }
        }
    };
    // An RNR wait under way ends now if the count covers the NAKed message
    // and the consuming ones before it after `p`: its WQE was posted since.
    let covered = match (syn.credits(), qp.req.rnr_deadline) {
        (Some(n), Some(d)) if n > 0 && d > now => {
            let rp = qp.req.rnr_psn;
            let k = sent_part(qp.req.wqes.iter())
                .filter(|w| {
                    w.started
                        && consumes(w.wr.opcode)
                        && psn::diff(w.first_psn, p) > 0
                        && psn::diff(w.first_psn, rp) <= 0
                })
                .count() as u32;
            psn::diff(rp, p) > 0 && k <= n
        }
        _ => false,
    };
    if covered {
        qp.req.rnr_deadline = Some(now);
    }
    let c = &mut qp.req.credits;
    let was_open = c.open();
    c.limit = limit;
    covered || (!was_open && c.open())
}

impl Credits {
    /// The state of a new connection under `limits`.
    pub(super) fn new(limits: &super::Limits) -> Credits {
        Credits {
            off: !limits.credits,
            ..Credits::default()
        }
    }

    /// A new connection (RTR -> RTS): no count known yet.
    pub(super) fn reset(&mut self) {
        *self = Credits {
            off: self.off,
            ..Credits::default()
        };
    }

    fn open(&self) -> bool {
        match self.limit {
            Limit::Unlimited => true,
            Limit::Upto(l) => (l.wrapping_sub(self.started) as i32) > 0,
        }
    }
}

/// May the requester of `qp` start WQE `i` now (it has not started)? A
/// consuming message needs a credit, or goes alone (see the module). Counts
/// it as started when it may.
pub(super) fn may_start(qp: &mut Qp, i: usize, counters: &mut Counters) -> bool {
    let Some(w) = qp.req.wqes.get(i) else {
        return true;
    };
    if qp.init.qp_type != QpType::Rc || !consumes(w.wr.opcode) {
        return true;
    }
    let open = qp.req.credits.open();
    let go = open || !sent_part(qp.req.wqes.iter()).any(outstanding);
    if !go {
        counters.credit_waits += 1;
        return false;
    }
    if !open {
        counters.credit_probes += 1;
    }
    let c = &mut qp.req.credits;
    c.started = c.started.wrapping_add(1);
    true
}

/// A receive WQE was posted on `qp`: if the last count it reported was zero,
/// an ACK (the last one again) reports the new count. Returns whether a
/// packet was queued.
pub(crate) fn on_post_recv(qp: &mut Qp) -> bool {
    if qp.init.qp_type != QpType::Rc || qp.init.srq.is_some() {
        return false;
    }
    if !matches!(
        qp.state,
        crate::verbs::QpState::Rtr | crate::verbs::QpState::Rts | crate::verbs::QpState::Sqd
    ) {
        return false;
    }
    super::responder::unsolicited_credit_ack(qp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rl_13_a_count_is_reported_as_the_largest_table_value_not_above_it() {
        // IBA Table 46: 0, 1, 2, 3, 4, 6, 8, 12, ... 32768.
        let credits = |n| {
            AethSyndrome::Ack {
                credit_code: code_for(n),
            }
            .credits()
        };
        let got: Vec<_> = [0, 1, 4, 5, 7, 8, 1000, 40_000]
            .into_iter()
            .map(credits)
            .collect();
        let want = [0, 1, 4, 4, 6, 8, 768, 32768].map(Some);
        assert_eq!(got, want);
        assert_ne!(code_for(usize::MAX), CREDIT_CODE_INVALID);
    }
}
