//! Completion queues and shared receive queues as the engine keeps them
//! (seed 003; CQ-01..CQ-03, SR-01).

use std::collections::VecDeque;

use crate::verbs::{Completion, Handle, RecvWr};

/// A completion queue: a bounded FIFO of completions the caller drains with
/// [`super::Engine::poll_cq`]. Its depth is the ring's: a completion that finds it
/// full overflows the CQ (CQ-03).
#[derive(Debug)]
pub(crate) struct Cq {
    pub depth: usize,
    pub entries: VecDeque<Completion>,
    /// Armed for the next completion (`Some(false)`) or the next solicited one
    /// (`Some(true)`) (CQ-02).
    pub armed: Option<bool>,
    /// Overflowed: nothing more is added and the CQ error event was raised.
    pub overflowed: bool,
    /// QPs and SRQs using this CQ (destroy is refused while non-zero).
    pub users: usize,
}

/// What happened when a completion was pushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    Queued { notify: bool },
    Overflow,
    Dropped,
}

impl Cq {
    pub fn new(depth: usize) -> Cq {
        Cq {
            depth,
            entries: VecDeque::with_capacity(depth.min(4096)),
            armed: None,
            overflowed: false,
            users: 0,
        }
    }

    /// Adds a completion; reports whether an armed CQ must raise its event.
    pub fn push(&mut self, c: Completion) -> Pushed {
        if self.overflowed {
            return Pushed::Dropped;
        }
        if self.entries.len() >= self.depth {
            // CQ-03: never written past the ring; the CQ error event goes out once.
            self.overflowed = true;
            return Pushed::Overflow;
        }
        let notify = match self.armed {
            Some(solicited_only) => !solicited_only || c.solicited || c.status as u8 != 0,
            None => false,
        };
        if notify {
            self.armed = None;
        }
        self.entries.push_back(c);
        Pushed::Queued { notify }
    }
}

/// A shared receive queue (SR-01): receive WQEs consumed in order by any QP using
/// it; the limit event fires once when the count drops below the limit, which
/// then resets to 0 (disarmed).
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: Handle,
    pub max_wr: usize,
    pub max_sge: usize,
    pub limit: usize,
    pub wqes: crate::budget::Held<RecvWr>,
    pub users: usize,
}

impl Srq {
    /// Takes the next receive WQE; returns it and whether the limit event fires.
    pub fn take(&mut self) -> Option<(RecvWr, bool)> {
        let w = self.wqes.pop_front()?;
        let fire = self.limit != 0 && self.wqes.len() < self.limit;
        if fire {
            self.limit = 0;
        }
        Some((w, fire))
    }
}
