//! The port window: a bound on RC request packets in flight from the port to
//! each destination, over all the QPs whose path leads there (vhca policy,
//! ARCHITECTURE.md §3; issue 12, figure 6).
//!
//! Each RC requester keeps its own congestion window (`recovery`), but
//! nothing there bounds their sum: 1024 QPs with a message each put 64 MiB in
//! flight, which overflows the receiving socket's buffer (the drops show as
//! Udp RcvbufErrors) and costs each QP that lost a packet a recovery. A real
//! fabric bounds a port by its link-level flow-control credits; this is the
//! transport-level equivalent:
//!
//! - A QP's share is its packets sent and not acknowledged (`hwm - una`,
//!   what the ACK timer covers) while it is RTS or SQD; a QP in any other
//!   state holds none. It counts at its destination: the remote port its
//!   primary path names (the DLID on InfiniBand, the DGID on RoCE; after a
//!   migration, AD-10, the new path's). A destination's total is the sum of
//!   its QPs' shares, kept in step in O(1) each time an input touched a QP
//!   ([`Engine::arm`] calls [`PortWindow::sync`]).
//! - A requester starts a new packet (a PSN at its high-water mark) only
//!   while its destination's total is under
//!   [`Limits::port_window`](super::Limits); a probe or a go-back resend of a
//!   PSN already counted is never held back (loss recovery must not wait for
//!   the loss it recovers from).
//! - A QP held back joins its destination's FIFO of waiting QPs (at most
//!   once) and leaves the transmit schedule; while that total is under the
//!   bound, its waiting QPs go back to the schedule, one per run of packets
//!   (`io::TX_BURST`) there is room for, oldest first (checked at every
//!   change of the total, so room another QP took first is not lost to
//!   the waiters). Each wait costs one push and one pop: no scan of the QPs
//!   (issue 12's cost rule), and no QP starves (round robin by waiting
//!   order).
//! - The bound is per destination because what it protects is the
//!   receiver's buffer, and so that a dead peer cannot starve the others: the
//!   QPs to a peer that stopped answering hold that peer's room until their
//!   retries run out (RL-10), never the room of a live one. A destination
//!   is held only while some QP counts packets at it or waits for it, so
//!   their number is bounded by the QPs (and their memory by the budget
//!   that charges QPs).
//!
//! - Once a destination is half full, every new packet to it asks for an
//!   ACK (AckReq, RL-08): a QP's window asks only every half window, and
//!   packets that wait for an ACK request behind a QP held back would pin
//!   the room until that QP's next turn (with 1024 QPs, until a probe). A
//!   QP held back with such packets (sent while under half full) waits at
//!   the front: its next packet asks for their ACK.
//!
//! The bound is above one QP's send window (RL-17), so one QP alone is never
//! slowed by it. 0 means no bound.

use std::collections::VecDeque;

use super::ids::IdMap;
use super::{Engine, Qp};
use crate::psn;
use crate::verbs::QpState;

/// The default port window in packets per destination: what the device's
/// UDP link sizes its receive socket buffer for (`SOCKET_BUFFER`, 4 MiB:
/// 1024 full-PMTU packets; the kernel grants twice that for its
/// per-datagram overhead), so a full window fits the receiver's buffer; four
/// times the largest per-QP send window (256, RL-17).
pub const DEFAULT_PORT_WINDOW: u32 = 1024;

/// Where a connected QP's requests go: the remote port of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Dest {
    /// InfiniBand: the path's DLID.
    Lid(u16),
    /// RoCE: the path's DGID (the peer's IP address).
    Gid([u8; 16]),
}

/// One QP's part in the port window.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Share {
    /// Packets of this QP counted in its destination's total.
    counted: u32,
    /// The destination they are counted at (`None` while `counted` is 0).
    at: Option<Dest>,
    /// The destination had room when the transmit schedule polled this QP
    /// (set before each poll, read by the requester).
    room: bool,
    /// The destination was at least half full then: a new packet asks for
    /// an ACK.
    tight: bool,
    /// The requester was refused a new packet in this poll.
    refused: bool,
    /// The destination whose FIFO of waiting QPs holds this QP.
    waiting: Option<Dest>,
    /// Refused while holding packets whose ACK it has not asked for.
    owed: bool,
    /// Woken from the FIFO of this destination and not yet refused again
    /// or out of packets (see [`PortWindow::after_poll`]).
    woken: Option<Dest>,
}

/// One destination's packets in flight and the QPs waiting for its room.
#[derive(Debug, Default)]
struct DestWindow {
    in_flight: u32,
    /// QPs refused a new packet, oldest first.
    waiting: VecDeque<u32>,
}

/// The destinations' windows.
#[derive(Debug, Default)]
pub(crate) struct PortWindow {
    /// The bound per destination (0: none).
    bound: u32,
    /// A RoCE port: destinations are GIDs.
    ethernet: bool,
    /// The sum over all destinations (what [`Engine::port_in_flight`] reports).
    in_flight: u32,
    /// The destinations some QP counts packets at or waits for.
    dests: IdMap<Dest, DestWindow>,
}

impl PortWindow {
    pub(crate) fn new(bound: u32, ethernet: bool) -> PortWindow {
        PortWindow {
            bound,
            ethernet,
            ..PortWindow::default()
        }
    }

    /// The destination `qp`'s requests go to now.
    fn dest_of(&self, qp: &Qp) -> Dest {
        let av = &qp.attr.av;
        match av.grh {
            Some(g) if self.ethernet => Dest::Gid(g.dgid),
            _ => Dest::Lid(av.dlid),
        }
    }

    /// Packets in flight to `d`.
    fn load(&self, d: &Dest) -> u32 {
        self.dests.get(d).map_or(0, |w| w.in_flight)
    }

    /// Drops `d`'s entry once nothing counts at it and nothing waits for it.
    fn gc(&mut self, d: &Dest) {
        if self
            .dests
            .get(d)
            .is_some_and(|w| w.in_flight == 0 && w.waiting.is_empty())
        {
            self.dests.remove(d);
        }
    }

    /// Moves `n` packets of a QP out of `d`'s total (`add`: into it).
    /// Returns whether [`Engine::port_wake`] has work at `d` now: QPs wait
    /// for it, or its entry is empty and goes. The usual change on the data
    /// path (a packet sent or acknowledged, nobody waiting) needs neither,
    /// and saves a second lookup per packet.
    fn count(&mut self, d: Dest, n: u32, add: bool) -> bool {
        if n == 0 {
            return true;
        }
        let w = self.dests.entry(d).or_default();
        if add {
            w.in_flight += n;
            self.in_flight += n;
        } else {
            // Saturating: a miscount must not wrap into a destination that
            // is full forever (the debug check catches it in tests).
            w.in_flight = w.in_flight.saturating_sub(n);
            self.in_flight = self.in_flight.saturating_sub(n);
        }
        w.in_flight == 0 || !w.waiting.is_empty()
    }
}

/// The requester's check before it builds a packet: a new one (at the
/// high-water mark) needs room at its destination; a resend does not.
pub(super) fn may_start(qp: &mut Qp) -> bool {
    let new = psn::diff(qp.req.next_psn, qp.req.hwm) >= 0;
    if qp.port.room || !new {
        if new && qp.port.tight {
            // Packets held without AckReq would hold the destination's room
            // until their QP's next turn: the ACK is asked for now (RL-08).
            qp.req.rec.force_ack_req = true;
        }
        return true;
    }
    qp.port.refused = true;
    qp.port.owed = qp.req.unacked() > 0 && qp.req.rec.ack_req_owed();
    false
}

/// What a QP should count now.
fn share_of(qp: &Qp) -> u32 {
    let live = matches!(qp.state, QpState::Rts | QpState::Sqd);
    // An XRC INI QP is an RC requester (SR-02); a TGT QP sends no requests.
    if qp.init.qp_type.is_reliable() && live {
        qp.req.unacked()
    } else {
        0
    }
}

impl PortWindow {
    /// Brings `qp`'s share up to date after an input touched it (from
    /// [`Engine::arm`], which has the QP in hand). Returns the destinations
    /// whose waiting QPs [`Engine::port_wake`] should look at now (at most
    /// two: the one the share left and the one it counts at).
    pub(super) fn sync(&mut self, qp: &mut Qp) -> [Option<Dest>; 2] {
        let now = share_of(qp);
        let to = (now > 0).then(|| self.dest_of(qp));
        let (was, counted) = (qp.port.at, qp.port.counted);
        if (was, counted) == (to, now) {
            return [None, None]; // the usual case of a QP with nothing in flight
        }
        qp.port.at = to;
        qp.port.counted = now;
        // Room appears where packets left. Waiting QPs are woken on every
        // change while there is room, not only when a count falls: a QP
        // refused with packets whose ACK it has not asked for goes to its
        // FIFO's front, so under steady pressure an earlier such QP is
        // pushed back by later ones; waking whenever there is room keeps it
        // from waiting for a loss probe (`engine_port_window` tests).
        let mut wake = [None, None];
        if was == to {
            if let Some(d) = to {
                wake[1] = self
                    .count(d, counted.abs_diff(now), now > counted)
                    .then_some(d);
            }
        } else {
            if let Some(d) = was {
                wake[0] = self.count(d, counted, false).then_some(d);
            }
            if let Some(d) = to {
                wake[1] = self.count(d, now, true).then_some(d);
            }
        }
        wake
    }

    /// Before the transmit schedule polls `qp`: whether a new request packet
    /// may go to its destination.
    pub(super) fn before_poll(&self, qp: &mut Qp) {
        qp.port.refused = false;
        if self.bound == 0 || !qp.init.qp_type.is_reliable() {
            qp.port.room = true;
            qp.port.tight = false;
            return;
        }
        let load = self.load(&self.dest_of(qp));
        qp.port.room = load < self.bound;
        qp.port.tight = load >= self.bound / 2;
    }

    /// After the transmit schedule polled `qp` (`built`: it gave a packet):
    /// a QP refused for want of room waits for it (once in its
    /// destination's FIFO, however often refused). A QP woken for room that
    /// leaves the schedule without being refused did not need it: the next
    /// waiting QP gets it (else the last waiters of a destination whose
    /// woken QPs all went idle would wait with nothing in flight to wake
    /// them). Returns the destination whose waiting QPs
    /// [`Engine::port_wake`] is to look at.
    pub(super) fn after_poll(&mut self, qp: &mut Qp, built: bool) -> Option<Dest> {
        if qp.port.refused {
            qp.port.woken = None;
        } else if !built {
            return qp.port.woken.take();
        }
        if qp.port.refused && qp.port.waiting.is_none() {
            let d = self.dest_of(qp);
            qp.port.waiting = Some(d);
            let w = self.dests.entry(d).or_default();
            if qp.port.owed {
                // Its next packet asks for the ACK that releases the ones
                // it holds: it goes first (once; then it queues as all do).
                w.waiting.push_front(qp.qpn);
            } else {
                w.waiting.push_back(qp.qpn);
            }
        }
        qp.port.refused = false;
        None
    }
}

impl Engine {
    /// Moves QPs waiting for `d` back to the transmit schedule, one per run
    /// of packets (`io::TX_BURST`) there is room for (at least one), oldest
    /// first; drops `d`'s entry when it holds nothing.
    pub(super) fn port_wake(&mut self, d: Dest) {
        let Engine {
            port_window,
            qps,
            schedule,
            port,
            vl_arb,
            ..
        } = self;
        let Some(w) = port_window.dests.get_mut(&d) else {
            return;
        };
        let mut room = match port_window.bound {
            0 => usize::MAX,
            b => b.saturating_sub(w.in_flight) as usize,
        };
        while room > 0 {
            let Some(q) = w.waiting.pop_front() else {
                break;
            };
            let Some(qp) = qps.get_mut(&q) else {
                continue; // destroyed while waiting
            };
            qp.port.waiting = None;
            qp.port.woken = Some(d);
            // A woken QP may send a run of packets (`io::TX_BURST`).
            room = room.saturating_sub(super::io::TX_BURST as usize);
            if !qp.scheduled {
                qp.scheduled = true;
                let lane = super::vl::lane(*vl_arb, port, qp);
                schedule.push_back(&mut qp.sched, lane, q);
            }
        }
        if w.in_flight == 0 && w.waiting.is_empty() {
            port_window.dests.remove(&d);
        }
    }

    /// A destroyed QP's share leaves its destination's total (and the QP
    /// its FIFO).
    pub(super) fn port_forget(&mut self, qp: &Qp) {
        let w = &mut self.port_window;
        if let Some(d) = qp.port.waiting {
            if let Some(dw) = w.dests.get_mut(&d) {
                dw.waiting.retain(|q| *q != qp.qpn);
            }
            w.gc(&d);
        }
        if let Some(d) = qp.port.at {
            if w.count(d, qp.port.counted, false) {
                self.port_wake(d);
            }
        }
    }

    /// Debug builds, few QPs: every QP's share is up to date and counted at
    /// its destination, and each destination's total is their sum (what
    /// [`PortWindow::sync`] keeps between inputs).
    #[cfg(debug_assertions)]
    pub(super) fn check_port_window(&self) {
        if self.qps.len() > 64 {
            return;
        }
        let w = &self.port_window;
        let mut sums: std::collections::HashMap<Dest, u32> = Default::default();
        for qp in self.qps.values() {
            assert_eq!(qp.port.counted, share_of(qp), "QP {} share", qp.qpn);
            let at = (qp.port.counted > 0).then(|| w.dest_of(qp));
            assert_eq!(qp.port.at, at, "QP {} destination", qp.qpn);
            if let Some(d) = at {
                *sums.entry(d).or_default() += qp.port.counted;
            }
        }
        for (d, dw) in &w.dests {
            assert_eq!(sums.remove(d).unwrap_or(0), dw.in_flight, "{d:?} total");
        }
        assert!(sums.is_empty(), "totals of unknown destinations {sums:?}");
        let total: u32 = w.dests.values().map(|d| d.in_flight).sum();
        assert_eq!(total, w.in_flight, "port total");
    }

    /// RC request packets in flight over all the port's QPs and
    /// destinations (the port window bounds each destination's part).
    pub fn port_in_flight(&self) -> u32 {
        self.port_window.in_flight
    }
}
