//! The port window: a bound on RC request packets in flight over all the
//! port's QPs (vhca policy, ARCHITECTURE.md §3; issue 12, figure 6).
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
//!   state holds none. The port's total is the sum of the shares, kept in
//!   step in O(1) each time an input touched a QP ([`Engine::arm`] calls
//!   [`Engine::port_sync`]).
//! - A requester starts a new packet (a PSN at its high-water mark) only
//!   while the total is under [`Limits::port_window`](super::Limits); a
//!   probe or a go-back resend of a PSN already counted is never held back
//!   (loss recovery must not wait for the loss it recovers from).
//! - A QP held back joins a FIFO of waiting QPs (at most once) and leaves
//!   the transmit schedule; when acknowledgements bring the total under the
//!   bound, as many waiting QPs as there is room for go back to the schedule,
//!   oldest first. Each wait costs one push and one pop: no scan of the QPs
//!   (issue 12's cost rule), and no QP starves (round robin by waiting order).
//!
//! - Once the port is half full, every new packet asks for an ACK (AckReq,
//!   RL-08): a QP's window asks only every half window, and packets that
//!   wait for an ACK request behind a QP held back would pin the port's room
//!   until that QP's next turn (with 1024 QPs, until a probe). A QP held
//!   back with such packets (sent while the port was under half full) waits
//!   at the front: its next packet asks for their ACK.
//!
//! The bound is above one QP's send window (RL-17), so one QP alone is never
//! slowed by it. 0 means no bound.

use std::collections::VecDeque;

use super::{Engine, Qp};
use crate::psn;
use crate::verbs::{QpState, QpType};

/// The default port window in packets: what the device's UDP link sizes its
/// receive socket buffer for (`SOCKET_BUFFER`, 4 MiB: 1024 full-PMTU
/// packets; the kernel grants twice that for its per-datagram overhead), so
/// a full window from one peer fits it; four times the largest per-QP send
/// window (256, RL-17).
pub const DEFAULT_PORT_WINDOW: u32 = 1024;

/// One QP's part in the port window.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Share {
    /// Packets of this QP counted in the port's total.
    counted: u32,
    /// The port had room when the transmit schedule polled this QP
    /// (set before each poll, read by the requester).
    room: bool,
    /// The port was at least half full then: a new packet asks for an ACK.
    tight: bool,
    /// The requester was refused a new packet in this poll.
    refused: bool,
    /// In the port's FIFO of waiting QPs.
    waiting: bool,
    /// Refused while holding packets whose ACK it has not asked for.
    owed: bool,
}

/// The port's packets in flight and the QPs waiting for room.
#[derive(Debug, Default)]
pub(crate) struct PortWindow {
    /// The bound (0: none).
    bound: u32,
    /// The sum of the QPs' shares.
    in_flight: u32,
    /// QPs refused a new packet, oldest first.
    waiting: VecDeque<u32>,
}

impl PortWindow {
    pub(crate) fn new(bound: u32) -> PortWindow {
        PortWindow {
            bound,
            ..PortWindow::default()
        }
    }

    fn has_room(&self) -> bool {
        self.bound == 0 || self.in_flight < self.bound
    }
}

/// The requester's check before it builds a packet: a new one (at the
/// high-water mark) needs room in the port window; a resend does not.
pub(super) fn may_start(qp: &mut Qp) -> bool {
    let new = psn::diff(qp.req.next_psn, qp.req.hwm) >= 0;
    if qp.port.room || !new {
        if new && qp.port.tight {
            // Packets held without AckReq would hold the port's room until
            // their QP's next turn: the ACK is asked for now (RL-08).
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
    if qp.init.qp_type == QpType::Rc && live {
        qp.req.unacked()
    } else {
        0
    }
}

impl PortWindow {
    /// Before the transmit schedule polls `qp`: whether a new request packet
    /// may go.
    pub(super) fn before_poll(&self, qp: &mut Qp) {
        qp.port.room = self.has_room();
        qp.port.tight = self.bound != 0 && self.in_flight >= self.bound / 2;
        qp.port.refused = false;
    }
}

impl Engine {
    /// After the transmit schedule polled `qpn`: a QP refused for want of
    /// room waits for it (once in the FIFO, however often refused).
    pub(super) fn port_after_poll(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        if qp.port.refused && !qp.port.waiting {
            qp.port.waiting = true;
            if qp.port.owed {
                // Its next packet asks for the ACK that releases the ones
                // it holds: it goes first (once; then it queues as all do).
                self.port_window.waiting.push_front(qpn);
            } else {
                self.port_window.waiting.push_back(qpn);
            }
        }
        qp.port.refused = false;
    }

    /// Brings `qpn`'s share of the port total up to date after an input
    /// touched it, and wakes waiting QPs if that made room. O(1) amortised:
    /// each QP woken was pushed once when it was refused.
    pub(super) fn port_sync(&mut self, qpn: u32) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let now = share_of(qp);
        let w = &mut self.port_window;
        w.in_flight = w.in_flight - qp.port.counted + now;
        qp.port.counted = now;
        self.port_wake();
    }

    /// Moves waiting QPs back to the transmit schedule, one per packet of
    /// room, oldest first.
    fn port_wake(&mut self) {
        let w = &mut self.port_window;
        let mut room = if w.bound == 0 {
            usize::MAX
        } else {
            w.bound.saturating_sub(w.in_flight) as usize
        };
        while room > 0 {
            let Some(q) = self.port_window.waiting.pop_front() else {
                return;
            };
            let Some(qp) = self.qps.get_mut(&q) else {
                continue; // destroyed while waiting
            };
            qp.port.waiting = false;
            room -= 1;
            self.schedule_qp(q);
        }
    }

    /// A destroyed QP's share leaves the port total (and the QP the FIFO).
    pub(super) fn port_forget(&mut self, qp: &Qp) {
        let w = &mut self.port_window;
        w.in_flight -= qp.port.counted;
        if qp.port.waiting {
            w.waiting.retain(|q| *q != qp.qpn);
        }
        self.port_wake();
    }

    /// Debug builds, few QPs: every QP's share is up to date and the port's
    /// total is their sum (what [`Self::port_sync`] keeps between inputs).
    #[cfg(debug_assertions)]
    pub(super) fn check_port_window(&self) {
        if self.qps.len() > 64 {
            return;
        }
        let mut sum = 0;
        for qp in self.qps.values() {
            assert_eq!(qp.port.counted, share_of(qp), "QP {} share", qp.qpn);
            sum += qp.port.counted;
        }
        assert_eq!(sum, self.port_window.in_flight, "port total");
    }

    /// RC request packets in flight over all the port's QPs (what the port
    /// window bounds).
    pub fn port_in_flight(&self) -> u32 {
        self.port_window.in_flight
    }
}
