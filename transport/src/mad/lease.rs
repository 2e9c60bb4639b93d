//! The lease timer of a management key (AD-12): M_KeyLeasePeriod (IBA 14.2.4.2)
//! and B_KeyLeasePeriod (IBA 16.2) run the same way. A failed key check starts
//! it (if the period is not 0 and it is not already running), a request with the
//! right key stops it, and when it runs out the agent drops its protection so a
//! new manager can take the node over.

use crate::verbs::Time;

/// A lease period, in seconds, counting down from a failed key check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LeaseTimer {
    deadline: Option<Time>,
}

impl LeaseTimer {
    /// A failed check at `now`: starts the timer for `period_s` seconds unless it
    /// runs already or the period is 0 (no lease: protection never runs out).
    pub fn start(&mut self, period_s: u16, now: Time) {
        if self.deadline.is_none() && period_s != 0 {
            self.deadline = Some(now.plus_ns(u64::from(period_s) * 1_000_000_000));
        }
    }

    /// A matching key: the timer stops.
    pub fn stop(&mut self) {
        self.deadline = None;
    }

    /// True once, when the lease has run out by `now` (the timer then stops).
    pub fn expired(&mut self, now: Time) -> bool {
        match self.deadline {
            Some(t) if now >= t => {
                self.deadline = None;
                true
            }
            _ => false,
        }
    }

    /// When the lease runs out, if the timer runs.
    pub fn deadline(&self) -> Option<Time> {
        self.deadline
    }
}
