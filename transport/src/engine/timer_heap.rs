//! The lazy min-heap of deadlines the engine keeps for its QPs (`io.rs`) and
//! its EE contexts (`rd`): one entry per (time, number), live while it equals
//! the object's `timer_at`. A deadline moved later costs nothing (the early
//! entry fires as a no-op and re-arms); only an earlier one is pushed, and
//! the heap is rebuilt when stale entries outnumber live ones, so it stays
//! O(objects) whatever a peer sends and the next deadline is O(1) (issue 12).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::verbs::Time;

#[derive(Debug, Default)]
pub(crate) struct TimerHeap(BinaryHeap<Reverse<(Time, u32)>>);

impl TimerHeap {
    /// The earliest entry, live or stale: never later than a live deadline.
    pub(crate) fn peek(&self) -> Option<(Time, u32)> {
        self.0.peek().map(|Reverse(e)| *e)
    }

    pub(crate) fn pop(&mut self) {
        self.0.pop();
    }

    pub(crate) fn push(&mut self, t: Time, n: u32) {
        self.0.push(Reverse((t, n)));
    }

    /// Covers deadline `d` of object `n`, whose live entry is `timer_at`:
    /// pushes only when `d` is earlier. Returns whether it pushed (the
    /// caller then offers [`Self::compact`] its live entries).
    pub(crate) fn arm(&mut self, timer_at: &mut Option<Time>, d: Time, n: u32) -> bool {
        if timer_at.is_some_and(|t| t <= d) {
            return false;
        }
        *timer_at = Some(d);
        self.push(d, n);
        true
    }

    /// Rebuilds the heap from the live entries when stale ones outnumber
    /// them (`live` objects in all).
    pub(crate) fn compact<I: Iterator<Item = (Time, u32)>>(&mut self, live: usize, entries: I) {
        if self.0.len() > 2 * live + 16 {
            self.0 = entries.map(Reverse).collect();
        }
    }

    /// Pops the entries due at `now` and returns the numbers of those that
    /// `take` (given the number and the entry's time) finds live.
    pub(crate) fn take_due(
        &mut self,
        now: Time,
        mut take: impl FnMut(u32, Time) -> bool,
    ) -> Vec<u32> {
        let mut due = Vec::new();
        while let Some((t, n)) = self.peek() {
            if t > now {
                break;
            }
            self.pop();
            if take(n, t) {
                due.push(n);
            }
        }
        due
    }

    /// Debug checks: whether the heap holds exactly this entry.
    #[cfg(debug_assertions)]
    pub(crate) fn holds(&self, t: Time, n: u32) -> bool {
        self.0.iter().any(|Reverse(e)| *e == (t, n))
    }
}
