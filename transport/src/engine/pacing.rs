//! Static rate control (AD-07; IBA 9.11, seed 002 "静态速率控制"): a port
//! faster than a path's slowest link waits between the packets it sends on
//! that path, so it does not inject more than the path carries. The wait is
//! the inter-packet delay (IPD) of the spec: with `R` the port's rate and `r`
//! the path's, `IPD = ceil(R / r) - 1`, and after a packet that takes `T` at
//! the port's rate the next one to the same destination goes no sooner than
//! `IPD * T` after its end, that is `(IPD + 1) * T` after its start: the path
//! then runs at `R / (IPD + 1) <= r`.
//!
//! The engine has no clock (ARCHITECTURE.md §3): the requester notes the time
//! the next packet may go (`Requester::pace_at`; `pace_due` keeps it for the
//! gap after, see [`PACE_SLACK_NS`]), refuses to send before it,
//! and that time is a requester deadline in the engine's timer heap, so
//! `poll_timeout` reports it and `handle_timeout` puts the QP back in the
//! transmit schedule. A path at the port's rate (static rate 0, the default,
//! or any rate not below the port's) costs one comparison per packet.
//!
//! A connected QP has one destination: its gate is the QP's (`pace_at`),
//! and covers its responses (READ responses, ACKs) as well as its requests.
//! A UD QP's WQEs may name several destinations, each with its own static
//! rate (the address handle's): the QP keeps a time per destination
//! ([`Dests`]), and the packet at the head of its send queue waits for its
//! own destination's time only, not for the gap a packet to another
//! destination asked for (IBA 9.11: the IPD is per destination). The send
//! queue stays in post order (C9-25): a head that waits holds the WQEs
//! behind it. A UD QP that sent, within a gap, to more destinations than
//! [`MAX_PACED_DESTS`] paces the whole QP for the newest one instead (as much
//! as the spec asks or more, never less).

use super::requester::Requester;
use super::PortConfig;
use crate::cc::{CcCounters, Limit};
use crate::verbs::{AddressVector, Time};

/// Whether the QP's next packet must wait (its time has not come).
pub(crate) fn waiting(req: &Requester, now: Time) -> bool {
    req.pace_at.is_some_and(|t| t > now)
}

/// After the QP sent a packet (a request or a response) of `len` bytes to
/// `av` at `now`: the congestion controller counts it, and the gate takes
/// the time the next may go from the path's static rate (per destination
/// for UD, `ud`) and the controller's limit (per QP), the later of the two
/// (issue 31, `crate::cc`). Neither (static rate 0, no limit, the common
/// case) costs two comparisons.
pub(crate) fn after_send(
    req: &mut Requester,
    port: &PortConfig,
    av: &AddressVector,
    ud: bool,
    len: usize,
    now: Time,
) {
    req.cc.rp.on_sent(&port.cc, port.rate_mbps, len, now);
    let cc = req.cc.rp.limit();
    if ud {
        if av.static_rate != 0 {
            sent_to(req, port, av, len, now);
        }
        if cc != Limit::None {
            // The controller's limit is the QP's, whatever the destination.
            let t = cc.next_send(port.rate_mbps, len, base(req.pace_due, now));
            req.pace_at = req.pace_at.max(t);
            req.pace_due = t;
        }
    } else if av.static_rate != 0 || cc != Limit::None {
        sent(req, port, av.static_rate, len, now);
    }
}

/// The congestion controller's timer, when due at `now` (from the engine's
/// `handle_timeout`; the controller's deadline is part of the requester's).
pub(crate) fn cc_timer(req: &mut Requester, port: &PortConfig, now: Time, c: &mut CcCounters) {
    if req.cc.rp.deadline().is_some_and(|t| t <= now) {
        req.cc.rp.on_timer(&port.cc, port.rate_mbps, now, c);
    }
}

/// After a connected QP sent a packet of `len` bytes at `now` on a path of
/// `static_rate`: when the next may go, the stricter of the static rate and
/// the congestion controller's limit.
pub(crate) fn sent(req: &mut Requester, port: &PortConfig, static_rate: u8, len: usize, now: Time) {
    let from = base(req.pace_due, now);
    let fixed = next_send(port.rate_mbps, static_rate, len, from);
    let cc = req.cc.rp.limit().next_send(port.rate_mbps, len, from);
    req.pace_at = fixed.max(cc);
    req.pace_due = req.pace_at;
}

/// Most destinations a UD QP keeps a time for at once ([`Dests`]).
pub const MAX_PACED_DESTS: usize = 64;

/// A destination as pacing tells them apart: DLID, and the DGID with a GRH
/// (RoCE paths have no DLID).
type Dest = (u16, Option<[u8; 16]>);

fn dest(av: &AddressVector) -> Dest {
    (av.dlid, av.grh.map(|g| g.dgid))
}

/// A UD QP's pacing times per destination: when the next packet to each may
/// go. At most [`MAX_PACED_DESTS`]; a time past by more than
/// [`PACE_SLACK_NS`] no longer counts ([`base`]) and its entry is dropped to
/// make room.
#[derive(Debug, Default)]
pub(crate) struct Dests(Vec<(Dest, Time)>);

impl Dests {
    /// When the next packet to `av`'s destination may go, if it was paced
    /// (nothing to look at, the common case, costs one comparison).
    pub(crate) fn due(&self, av: &AddressVector) -> Option<Time> {
        if self.0.is_empty() {
            return None;
        }
        self.at(dest(av))
    }

    fn at(&self, d: Dest) -> Option<Time> {
        self.0.iter().find(|e| e.0 == d).map(|e| e.1)
    }

    /// Sets `d`'s time; false when there is no room.
    fn set(&mut self, d: Dest, t: Time, now: Time) -> bool {
        if let Some(e) = self.0.iter_mut().find(|e| e.0 == d) {
            e.1 = t;
            return true;
        }
        self.0
            .retain(|e| e.1 .0.saturating_add(PACE_SLACK_NS) >= now.0);
        if self.0.len() >= MAX_PACED_DESTS {
            return false;
        }
        self.0.push((d, t));
        true
    }

    fn remove(&mut self, d: Dest) {
        self.0.retain(|e| e.0 != d);
    }
}

/// Whether the QP's next packet must wait; `head_due`: for a UD QP's head
/// WQE, its destination's time ([`Dests::due`]), which, when ahead, becomes
/// the QP's deadline (`pace_at`) so that the timer wakes it.
pub(crate) fn waiting_for(req: &mut Requester, head_due: Option<Time>, now: Time) -> bool {
    if waiting(req, now) {
        return true;
    }
    match head_due {
        Some(t) if t > now => {
            req.pace_at = Some(t);
            true
        }
        _ => false,
    }
}

/// After a UD QP sent a packet of `len` bytes to `av` at `now`: when the next
/// to the same destination may go (its gap counted from that destination's
/// due time, [`base`]).
pub(crate) fn sent_to(
    req: &mut Requester,
    port: &PortConfig,
    av: &AddressVector,
    len: usize,
    now: Time,
) {
    if req.pace_at.is_some_and(|t| t <= now) {
        req.pace_at = None; // the head's wait, over
    }
    let d = dest(av);
    let from = base(req.dests.at(d), now);
    match next_send(port.rate_mbps, av.static_rate, len, from) {
        None => req.dests.remove(d),
        Some(t) => {
            if !req.dests.set(d, t, now) {
                // No room: the whole QP waits, as a connected one does.
                req.pace_at = Some(t);
            }
        }
    }
}

/// The port's bit rate when its configuration says nothing else: 4x QDR,
/// 40 Gb/s, what QUERY_PORT reports (active width 4x, speed QDR).
pub const DEFAULT_PORT_MBPS: u32 = 40_000;

/// The bit rate, in Mb/s, of a static rate as verbs encode it (`enum ibv_rate`,
/// the encoding of IBA 15.2.5.16 PathRecord:Rate that `ibv_rate_to_mbps`
/// decodes). `None` for 0 (the port's rate) and for values that name no rate:
/// those are not paced.
pub fn rate_mbps(static_rate: u8) -> Option<u32> {
    Some(match static_rate {
        2 => 2_500,
        3 => 10_000,
        4 => 30_000,
        5 => 5_000,
        6 => 20_000,
        7 => 40_000,
        8 => 60_000,
        9 => 80_000,
        10 => 120_000,
        11 => 14_062,
        12 => 56_250,
        13 => 112_500,
        14 => 168_750,
        15 => 25_781,
        16 => 103_125,
        17 => 206_250,
        18 => 309_375,
        19 => 28_125,
        20 => 53_125,
        21 => 425_000,
        22 => 637_500,
        _ => return None,
    })
}

/// The inter-packet delay of a path of static rate `static_rate` from a port
/// of `port_mbps` (IBA 9.11: `ceil(port / path) - 1`); 0 when the path is not
/// slower than the port.
pub fn ipd(port_mbps: u32, static_rate: u8) -> u32 {
    match rate_mbps(static_rate) {
        Some(path) if path < port_mbps => port_mbps.div_ceil(path) - 1,
        _ => 0,
    }
}

/// How late a paced packet may go and still count from its due time rather
/// than from when it went: the device wakes for a due packet some tens of
/// microseconds late (a host's timer and scheduling latency), and counting
/// each gap from the late wake-up would run the path well below its rate.
/// Within this slack the lost time is caught up (packets go back to back
/// until the schedule is met again), so the rate over any longer span is
/// the path's; beyond it (the QP was idle) the schedule starts afresh.
pub const PACE_SLACK_NS: u64 = 200_000;

/// The time the next gap counts from: the previous packet's due time `due`
/// if it went at most [`PACE_SLACK_NS`] after it, else `now`.
pub(crate) fn base(due: Option<Time>, now: Time) -> Time {
    match due {
        Some(d) if d <= now && now.0 - d.0 <= PACE_SLACK_NS => d,
        _ => now,
    }
}

/// When the packet after one of `len` bytes, started at `now` on a path of
/// `static_rate`, may start; `None` when the path needs no gap.
pub(crate) fn next_send(port_mbps: u32, static_rate: u8, len: usize, now: Time) -> Option<Time> {
    let ipd = ipd(port_mbps, static_rate);
    if ipd == 0 {
        return None;
    }
    // T = len * 8 bits / (port_mbps * 1e6 bit/s), in ns; rounded up so the
    // path never runs faster than R / (IPD + 1).
    let t_ns = (len as u64 * 8_000).div_ceil(u64::from(port_mbps.max(1)));
    Some(now.plus_ns(t_ns.saturating_mul(u64::from(ipd) + 1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipd_formula() {
        // 40 Gb/s port: a 10 Gb/s path waits 3 packet times, 2.5 Gb/s 15.
        assert_eq!(ipd(40_000, 3), 3);
        assert_eq!(ipd(40_000, 2), 15);
        // 30 Gb/s path: ceil(4/3) - 1 = 1 (the path then runs at 20 Gb/s).
        assert_eq!(ipd(40_000, 4), 1);
        // Not slower than the port, the port's own rate, or no rate: no gap.
        assert_eq!(ipd(40_000, 7), 0);
        assert_eq!(ipd(40_000, 9), 0);
        assert_eq!(ipd(40_000, 0), 0);
        assert_eq!(ipd(40_000, 200), 0);
        assert_eq!(next_send(40_000, 0, 4096, Time(5)), None);
        // 1000 bytes at 40 Gb/s take 200 ns; IPD 3 -> next start 800 ns later.
        assert_eq!(next_send(40_000, 3, 1000, Time(5)), Some(Time(805)));
    }

    #[test]
    fn ad_07_destinations_are_bounded_and_an_overflow_paces_the_whole_qp() {
        let port = PortConfig::new(1, 1);
        let mut req = Requester::default();
        let av = |dlid: u16| AddressVector {
            dlid,
            static_rate: 3, // 10 Gb/s from 40: IPD 3
            ..AddressVector::default()
        };
        let now = Time(1_000);
        for d in 0..MAX_PACED_DESTS as u16 {
            sent_to(&mut req, &port, &av(d + 1), 1000, now);
            assert_eq!(req.pace_at, None, "destination {d} has its own time");
        }
        // Each destination waits for its own time only.
        let due = req.dests.due(&av(1));
        assert!(waiting_for(&mut req, due, Time(1_100)));
        assert_eq!(req.pace_at, Some(Time(1_800)));
        req.pace_at = None;
        let due = req.dests.due(&av(999));
        assert!(!waiting_for(&mut req, due, Time(1_100)));
        // One more within the gap: no room, the whole QP waits.
        sent_to(&mut req, &port, &av(999), 1000, now);
        assert_eq!(req.dests.0.len(), MAX_PACED_DESTS);
        assert_eq!(req.pace_at, Some(Time(1_800)));
        let due = req.dests.due(&av(500));
        assert!(waiting_for(&mut req, due, Time(1_100)));
        // Once the others' times are past the slack, their entries make room.
        req.pace_at = None;
        let later = Time(1_800 + PACE_SLACK_NS + 1);
        sent_to(&mut req, &port, &av(999), 1000, later);
        assert_eq!((req.dests.0.len(), req.pace_at), (1, None));
    }

    #[test]
    fn late_packets_catch_up_within_the_slack() {
        // On time, or late within the slack: the gap counts from the due time.
        assert_eq!(base(Some(Time(1_000)), Time(1_000)), Time(1_000));
        assert_eq!(base(Some(Time(1_000)), Time(51_000)), Time(1_000));
        // Idle past the slack, or never paced: from now.
        let late = Time(1_000 + PACE_SLACK_NS + 1);
        assert_eq!(base(Some(Time(1_000)), late), late);
        assert_eq!(base(None, Time(7)), Time(7));
    }
}
