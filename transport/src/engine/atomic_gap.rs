//! ATOMIC responses that show an older one lost (issue 30; vhca policy where
//! the spec leaves room, cited where it does not).
//!
//! Responses come in the order of their requests (C9-27), so an ATOMIC
//! response for PSN `p` while an older READ/ATOMIC still misses its own says
//! that the older one's request or response was lost (IBA 9.7.5.1: the
//! requester sees a missing response by the PSN of a later one). Before this,
//! nothing acted on it: the requester waited for a probe timeout (the
//! device's floor, 1 ms, some fifty round trips), and meanwhile sent no new
//! READ/ATOMIC, since the responder keeps only max_dest_rd_atomic saved
//! results and the lost one must stay among them (RL-07). At 5 % loss
//! `ib_atomic_bw` kept 0.077x of its lossless rate.
//!
//! Now the requester asks again at once, for the missing ones only: the
//! ATOMICs in flight after `p` are not sent again (their responses are still
//! coming, and a duplicate ATOMIC only costs the responder a replay, RL-06,
//! never a second execution). A duplicate READ among the missing ones would
//! preempt the responses queued after it (RL-05), so then the go-back is the
//! ordinary one from the first missing request (9.7.4.1.3).
//!
//! Once per gap: the responses still in flight after `p` show the same gap
//! and ask for nothing new ([`AtomicGap::news`]). A later response shows a
//! new one when a request missing before it lies at or after the `p` of the
//! last re-request (a loss the re-request did not cover), or when it answers
//! a request sent after the re-request (the responder answers in order, so
//! the re-request or its answer was lost).

use crate::psn;

/// The last re-request of missing ATOMIC responses.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AtomicGap {
    /// The PSN of the response that showed the gap (every request missing
    /// before it was asked for again) and the point of maximum advance then.
    asked: Option<(u32, u32)>,
}

impl AtomicGap {
    /// A response for `p` came while the requests up to `newest_missing` (the
    /// first PSN of the newest one before `p` still without its response)
    /// miss theirs, with `hwm` the point of maximum advance: whether they
    /// must be asked for again (and from now on count as asked).
    pub fn news(&mut self, p: u32, newest_missing: u32, hwm: u32) -> bool {
        let new = match self.asked {
            None => true,
            Some((before, then)) => {
                psn::diff(newest_missing, before) >= 0 || psn::diff(p, then) >= 0
            }
        };
        if new {
            self.asked = Some((p, hwm));
        }
        new
    }

    /// Whether a re-request is outstanding.
    pub fn asked(&self) -> bool {
        self.asked.is_some()
    }

    /// No READ/ATOMIC misses a response any more, or a go-back resends them
    /// all anyway.
    pub fn clear(&mut self) {
        self.asked = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_is_asked_for_once_then_again_for_a_new_loss_or_a_lost_re_request() {
        let mut g = AtomicGap::default();
        // Requests 10..26 in flight; 10's response lost, 11's shows it.
        assert!(g.news(11, 10, 26), "the first response after the gap");
        assert!(!g.news(12, 10, 26), "the same gap");
        assert!(!g.news(25, 10, 26), "the same gap, the last in flight");
        // 14's response lost too: 15's shows a gap the re-request missed.
        assert!(g.news(15, 14, 26), "a loss after the one asked for");
        assert!(!g.news(16, 14, 26));
        // A request sent after the re-request is answered, 10 still missing:
        // the re-request or its answer was lost.
        assert!(g.news(26, 10, 27), "an answer to a later request");
        g.clear();
        assert!(!g.asked());
        // Across the PSN wrap.
        let top = psn::PSN_MASK;
        assert!(g.news(0, top, 5));
        assert!(!g.news(1, top, 5));
        assert!(g.news(5, top, 6));
    }
}
