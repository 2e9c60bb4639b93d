//! Backpressure of the shared-memory link (issue 30): a producer whose next
//! hop's ring is full holds its packets in the engine (`Link::tx_room`
//! false) instead of publishing them into nothing, as a real port waits for
//! credit (IBA 7.9) instead of dropping. A full ring used to mean a drop and
//! an RC resend; without it the ring can be small enough for its lines to
//! stay in the caches the two cores share.
//!
//! Hostile peers (ARCHITECTURE.md §9): a hold stops every packet of the
//! port, not only the full ring's (the link learns a packet's ring only once
//! the engine built it), so one consumer that stops draining would stop the
//! traffic to the others. A hold therefore lasts at most [`HOLD_MAX`]; a
//! ring that outlasts it is not held for again until it drained to half
//! (a consumer that keeps its ring nearly full, slowly or on purpose, gets
//! its packets dropped as before, `drop_tx_full`, and the others flow).
//!
//! Sans-IO: the link asks with the time and a way to read a ring's fill.
//! The cost of a question is in proportion to the rings that filled, not to
//! the peers: only those are watched.

use std::time::Duration;

/// The longest one full ring holds the port's packets back. A consumer that
/// drains at all frees a slot in microseconds (512 slots: about 2 MiB a
/// millisecond at the slowest TCG-loaded figures in BENCHMARKS.md).
pub const HOLD_MAX: Duration = Duration::from_millis(2);

/// While held, how soon a sleeping data path looks at the ring again (the
/// consumer does not wake its producer when it drains).
pub const RECHECK: Duration = Duration::from_micros(50);

/// One watched ring.
#[derive(Debug, Clone, Copy)]
struct Watch {
    peer: usize,
    /// Held for since then.
    since: Option<Duration>,
    /// It outlasted [`HOLD_MAX`]: no hold until it drained to half.
    no_hold: bool,
}

/// The rings that filled and the holds they cause.
#[derive(Debug, Default)]
pub struct Holds {
    watch: Vec<Watch>,
    recheck_at: Option<Duration>,
}

impl Holds {
    /// Peer `peer`'s ring was full after a publish: watched from now on.
    pub fn filled(&mut self, peer: usize) {
        if !self.watch.iter().any(|w| w.peer == peer) {
            self.watch.push(Watch {
                peer,
                since: None,
                no_hold: false,
            });
        }
    }

    /// Whether the port may send now. `used(peer)` reads the slots in use
    /// of that peer's ring out of `slots`, `None` when there is no usable
    /// ring (closed, corrupt: its sends are dropped and counted there).
    /// Holds that outlast [`HOLD_MAX`] are counted in `timeouts` (the
    /// link's counter).
    pub fn room(
        &mut self,
        now: Duration,
        slots: u64,
        mut used: impl FnMut(usize) -> Option<u64>,
        timeouts: &mut u64,
    ) -> bool {
        let mut held = false;
        self.watch.retain_mut(|w| {
            let Some(n) = used(w.peer) else {
                return false;
            };
            if n < slots {
                w.since = None;
                if w.no_hold && n <= slots / 2 {
                    w.no_hold = false;
                }
                // Still watched only while it has to drain to half.
                return w.no_hold;
            }
            if w.no_hold {
                return true;
            }
            let since = *w.since.get_or_insert(now);
            if now.saturating_sub(since) >= HOLD_MAX {
                w.no_hold = true;
                w.since = None;
                *timeouts += 1;
                log::debug!(
                    "fabric: ring of peer {} full for {HOLD_MAX:?}: its packets are dropped until it drains",
                    w.peer
                );
            } else {
                held = true;
            }
            true
        });
        self.recheck_at = held.then(|| now + RECHECK);
        !held
    }

    /// When a held port should ask again.
    pub fn recheck_at(&self) -> Option<Duration> {
        self.recheck_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOTS: u64 = 8;
    const T0: Duration = Duration::from_secs(1);

    #[test]
    fn an_unwatched_ring_costs_nothing_and_holds_nothing() {
        let mut h = Holds::default();
        assert!(h.room(T0, SLOTS, |_| panic!("no ring filled"), &mut 0));
        assert_eq!(h.recheck_at(), None);
    }

    #[test]
    fn a_full_ring_holds_until_it_has_a_slot() {
        let mut h = Holds::default();
        let mut n = 0;
        h.filled(3);
        h.filled(3);
        assert!(!h.room(T0, SLOTS, |p| (p == 3).then_some(SLOTS), &mut n));
        assert_eq!(h.recheck_at(), Some(T0 + RECHECK));
        let t = T0 + Duration::from_micros(10);
        assert!(h.room(t, SLOTS, |_| Some(SLOTS - 1), &mut n));
        assert_eq!(h.recheck_at(), None);
        // Not watched any more: no question asked.
        assert!(h.room(t, SLOTS, |_| panic!("dropped from the watch"), &mut n));
        assert_eq!(n, 0);
    }

    #[test]
    fn a_ring_that_stays_full_holds_at_most_hold_max_then_not_until_half_drained() {
        let mut h = Holds::default();
        let mut n = 0;
        h.filled(1);
        h.filled(2);
        let full = |_| Some(SLOTS);
        assert!(!h.room(T0, SLOTS, full, &mut n));
        assert!(!h.room(T0 + HOLD_MAX / 2, SLOTS, full, &mut n));
        assert!(
            h.room(T0 + HOLD_MAX, SLOTS, full, &mut n),
            "the hold is bounded"
        );
        assert_eq!(n, 2);
        // Full again and again, or nearly: no more holds.
        for (k, used) in [SLOTS, SLOTS - 1, SLOTS, SLOTS / 2 + 1, SLOTS]
            .into_iter()
            .enumerate()
        {
            let t = T0 + HOLD_MAX * (k as u32 + 2);
            assert!(
                h.room(t, SLOTS, |_| Some(used), &mut n),
                "no hold at {used}"
            );
        }
        // Drained to half: held for again when it fills.
        let t = T0 + HOLD_MAX * 10;
        assert!(h.room(t, SLOTS, |_| Some(SLOTS / 2), &mut n));
        h.filled(1);
        assert!(!h.room(t, SLOTS, |p| (p == 1).then_some(SLOTS), &mut n));
        assert_eq!(n, 2);
    }

    #[test]
    fn a_ring_gone_is_forgotten() {
        let mut h = Holds::default();
        h.filled(0);
        assert!(h.room(T0, SLOTS, |_| None, &mut 0));
        assert!(h.room(T0, SLOTS, |_| panic!("forgotten"), &mut 0));
    }
}
