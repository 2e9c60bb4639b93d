//! The transmit schedule: the QPs that may have a packet to send, round
//! robin, in one lane per VL (AD-06). With VL arbitration off (every SL on
//! VL0) every QP is in lane 0 and this is one round robin over QPs.
//!
//! With it on, a QP waits in the lane of the VL its next packet goes on, so
//! the arbiter's choice (`vl::Arbiter::pick`, given which lanes are not
//! empty) names the lane whose first QP goes next: O(1) per packet however
//! many QPs are scheduled, where a single queue had to be searched for the
//! first QP of the chosen VL (issue 25: O(N^2) per round with many QPs on
//! several SLs).
//!
//! A QP whose VL changes while it waits (a UD WQE of another SL posted to an
//! empty send queue, a path that migrated, AD-10) is queued again in its new
//! lane; its old entry stays where it is, dead (each entry carries the
//! generation of the push that made it, and only the QP's latest is live,
//! [`Mark`]), and is passed over when it comes up: O(1) both. When the lanes'
//! VLs change (SL-to-VL table, arbitration tables) every QP is placed again
//! ([`Schedule::take_all`]), once per configuration change.

use std::collections::VecDeque;

/// Lanes: one per VL, VL15 included.
const LANES: usize = 16;

/// Where a QP's live entry is: its lane and the generation of the push
/// that made it (kept in the QP).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub lane: u8,
    gen: u64,
}

/// An entry of a lane: a QP and the generation of its push.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub qpn: u32,
    gen: u64,
}

impl Entry {
    /// Whether this is the QP's live entry (`m` its mark).
    pub fn live(&self, m: &Mark) -> bool {
        self.gen == m.gen
    }
}

#[derive(Debug)]
pub(crate) struct Schedule {
    lanes: [VecDeque<Entry>; LANES],
    /// Bit `l`: lane `l` is not empty.
    ready: u16,
    len: usize,
    /// The generation of the last push (never reused: an entry of a QP
    /// destroyed, or of a QP number used again, is never live).
    gen: u64,
    /// Steps taken (entries queued or taken, arbiter picks): what a test
    /// counts to show the schedule costs O(1) per packet.
    work: u64,
}

impl Default for Schedule {
    fn default() -> Schedule {
        Schedule {
            lanes: std::array::from_fn(|_| VecDeque::new()),
            ready: 0,
            len: 0,
            gen: 0,
            work: 0,
        }
    }
}

impl Schedule {
    /// QPs scheduled, over all lanes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bit `l` set: lane `l` has a QP.
    pub fn ready(&self) -> u16 {
        self.ready
    }

    pub fn work(&self) -> u64 {
        self.work
    }

    /// Counts one step of the caller's (a pick of the arbiter).
    pub fn step(&mut self) {
        self.work += 1;
    }

    /// Queues QP `qpn` last in lane `lane`; its mark `m` now names this
    /// entry (any other entry of it is dead).
    pub fn push_back(&mut self, m: &mut Mark, lane: u8, qpn: u32) {
        let e = self.entry(m, lane, qpn);
        self.lanes[usize::from(m.lane)].push_back(e);
    }

    /// As [`Self::push_back`], first in its lane.
    pub fn push_front(&mut self, m: &mut Mark, lane: u8, qpn: u32) {
        let e = self.entry(m, lane, qpn);
        self.lanes[usize::from(m.lane)].push_front(e);
    }

    fn entry(&mut self, m: &mut Mark, lane: u8, qpn: u32) -> Entry {
        self.gen += 1;
        *m = Mark {
            lane: lane % LANES as u8,
            gen: self.gen,
        };
        self.ready |= 1 << m.lane;
        self.len += 1;
        self.work += 1;
        Entry { qpn, gen: self.gen }
    }

    /// The first entry of lane `lane`, taken off.
    pub fn pop_front(&mut self, lane: u8) -> Option<Entry> {
        let l = usize::from(lane) % LANES;
        let q = self.lanes[l].pop_front()?;
        if self.lanes[l].is_empty() {
            self.ready &= !(1 << l);
        }
        self.len -= 1;
        self.work += 1;
        Some(q)
    }

    /// The lowest lane that has a QP.
    pub fn first_ready(&self) -> Option<u8> {
        (self.ready != 0).then(|| self.ready.trailing_zeros() as u8)
    }

    /// Every entry, lane by lane in order, taken off (to be placed again).
    pub fn take_all(&mut self) -> Vec<Entry> {
        let mut all = Vec::with_capacity(self.len);
        for lane in &mut self.lanes {
            all.extend(lane.drain(..));
        }
        self.work += all.len() as u64;
        self.ready = 0;
        self.len = 0;
        all
    }
}
