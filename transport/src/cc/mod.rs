//! Congestion control (issue 31): the controllers that limit a QP's send rate
//! when the fabric reports congestion, sans-IO like the rest of the engine
//! (no clock: every entry point takes `now`).
//!
//! # The hook (what the engine calls, what a controller may do)
//!
//! A controller never sends, reads the wire or owns a timer of its own. Per
//! QP the requester holds one [`QpCc`]: the reaction point (`rp`, a
//! [`Controller`], the enum of every algorithm, `Idle` until the first
//! congestion notification) and the notification point's pacing (`np`, an
//! [`Np`]). The engine drives them at five moments:
//!
//! | event (engine) | call | what the controller does |
//! |---|---|---|
//! | a packet of the QP left (`pacing::after_send`, requests and responses) | [`Controller::on_sent`] | counts bytes (DCQCN's byte counter) |
//! | before the next packet goes (`pacing`) | [`Controller::limit`] | says the QP's [`Limit`] |
//! | a congestion notification for the QP came (RoCE: a CNP, A17.9; IB: a BECN, annex A10) | [`Controller::on_notify`] | cuts the rate (starts the controller the port's [`CcConfig`] names for that notification) |
//! | its deadline passed (the engine's timer heap: [`Controller::deadline`] is part of the requester's deadline) | [`Controller::on_timer`] | raises the rate, updates its estimates |
//! | the notification point saw a marked packet (RoCE: IP ECN = CE; IB: BTH:FECN) | [`Np::notify_due`] | says whether to answer now (at most one answer per QP per interval); the engine then leaves the answer's address in [`Np::pending`] and sends it before any other packet |
//!
//! The limit is one more limit on the pacing gate of static rate control
//! (`engine::pacing`, IBA 9.11): after each packet the gate computes the time
//! the next may go from the path's static rate and from the controller's
//! limit and keeps the later of the two (the stricter limit wins). A limit
//! is either a rate ([`Limit::Kbps`], DCQCN's current rate) or an
//! inter-packet delay counted as IBA 9.11 counts static rate's
//! ([`Limit::Ipd`]: the IBA congestion control table's entries, once the
//! CCA has turned its CCT index into an IPD). [`Limit::None`] costs the gate
//! one comparison, as static rate 0 does.
//!
//! Adding a controller (the IBA CCA of annex A10 is the second): a variant of
//! [`Controller`] and of [`Notification`], its parameters in [`CcConfig`],
//! its counters appended to [`CcCounters`]; the engine's calls stay as they
//! are.
//!
//! The IBA congestion control agent on InfiniBand (annex A10) is [`iba`]
//! (the source's CCT index per QP: up by CCTI_Increase per BECN, down by one
//! per CCTI_Timer, the table entry as [`Limit::Ipd`]) with its parameters
//! from the port's CC agent (`mad::cc`, class 0x21, set by OpenSM's CC
//! manager); the switch marks FECN (`switch::cc`) and the receiving CA
//! answers with BECN (`engine::cc_ib`).
//!
//! DCQCN on RoCEv2 is [`dcqcn`] (reaction point) plus the notification point
//! in the engine's receive path (`engine::cc_np`): a requester's RoCE frames
//! are ECN-capable (ECT(0)) when DCQCN is on; a receiver that sees CE answers
//! the frame's source QP with a CNP (BTH opcode 0x81, 16 reserved bytes,
//! ICRC: RoCEv2 annex A17.9), at most one per QP per
//! `np_min_time_between_cnps`.

pub mod dcqcn;
pub mod iba;

use crate::verbs::Time;

/// Which congestion controllers the port runs (`PortConfig::cc`); all off
/// by default.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CcConfig {
    /// DCQCN on a RoCE port (reaction and notification points), with mlx5's
    /// parameters.
    pub dcqcn: Option<dcqcn::Params>,
    /// The IBA congestion control agent's source side on an IB port (annex
    /// A10.3, [`iba`]): CACongestionSetting and the CCT from the port's CC
    /// agent. The notification point (FECN to BECN) runs whatever this says,
    /// as A10.2.2 asks of every CA.
    pub iba: Option<iba::Params>,
}

impl CcConfig {
    /// Whether the port's RoCE frames carry ECT (a notification point
    /// downstream may then mark them CE instead of dropping them).
    pub fn ecn_capable(&self) -> bool {
        self.dcqcn.is_some()
    }
}

/// What a controller asks of a QP's pacing gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Limit {
    /// No limit (the path's static rate alone, if any).
    #[default]
    None,
    /// At most this many kb/s (start of a packet to start of the next).
    Kbps(u64),
    /// An inter-packet delay as IBA 9.11 counts it: after a packet that
    /// takes `T` at the port's rate the next starts `(ipd + 1) * T` after it
    /// started. 0 is no limit.
    Ipd(u32),
}

impl Limit {
    /// When the packet after one of `len` bytes, started at `from` on a port
    /// of `port_mbps`, may start under this limit; `None` when it does not
    /// hold the next packet back.
    pub fn next_send(self, port_mbps: u32, len: usize, from: Time) -> Option<Time> {
        let bits = len as u64 * 8;
        let ns = match self {
            Limit::None | Limit::Ipd(0) => return None,
            // bits / (kbps * 1e3 b/s) in ns = bits * 1e6 / kbps; rounded up so
            // the QP never goes faster than the limit.
            Limit::Kbps(k) => (bits * 1_000_000).div_ceil(k.max(1)),
            Limit::Ipd(ipd) => {
                let t = (bits * 1_000).div_ceil(u64::from(port_mbps.max(1)));
                t.saturating_mul(u64::from(ipd) + 1)
            }
        };
        Some(from.plus_ns(ns))
    }
}

/// A congestion notification for a QP, by what carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notification {
    /// RoCEv2: a CNP (BTH opcode 0x81, A17.9) for the QP.
    Cnp,
    /// InfiniBand: a BECN (an ACK or a CN packet with BTH:B set, A10.2.2)
    /// for a QP whose path is on service level `sl`.
    Becn { sl: u8 },
}

/// A QP's reaction point: the algorithm that limits its rate, `Idle` (no
/// limit, no timer) until the first notification.
#[derive(Debug, Default)]
pub enum Controller {
    #[default]
    Idle,
    /// DCQCN's reaction point (`dcqcn::Rp`).
    Dcqcn(dcqcn::Rp),
    /// The IBA CCA's source side (`iba::Cca`).
    Iba(iba::Cca),
}

impl Controller {
    /// The QP's limit now.
    pub fn limit(&self) -> Limit {
        match self {
            Controller::Idle => Limit::None,
            Controller::Dcqcn(rp) => rp.limit(),
            Controller::Iba(cca) => cca.limit(),
        }
    }

    /// The controller's next timer, if it has one running.
    pub fn deadline(&self) -> Option<Time> {
        match self {
            Controller::Idle => None,
            Controller::Dcqcn(rp) => rp.deadline(),
            Controller::Iba(cca) => cca.deadline(),
        }
    }

    /// A packet of `len` bytes of the QP left at `now`.
    pub fn on_sent(&mut self, cfg: &CcConfig, port_mbps: u32, len: usize, now: Time) {
        match self {
            Controller::Idle => {}
            Controller::Dcqcn(rp) => {
                if let Some(p) = &cfg.dcqcn {
                    rp.on_sent(p, port_mbps, len, now);
                }
            }
            // The CCA counts no bytes: its index moves by BECN and timer.
            Controller::Iba(_) => {}
        }
    }

    /// A congestion notification `n` for the QP came at `now`. An idle QP
    /// starts the controller `cfg` names for `n`; a notification no
    /// controller of the port takes is ignored (false: the caller counts
    /// it).
    pub fn on_notify(
        &mut self,
        cfg: &CcConfig,
        port_mbps: u32,
        n: Notification,
        now: Time,
        c: &mut CcCounters,
    ) -> bool {
        match (n, &mut *self, &cfg.dcqcn, &cfg.iba) {
            (Notification::Cnp, Controller::Dcqcn(rp), Some(p), _) => {
                rp.on_cnp(p, port_mbps, now, c)
            }
            (Notification::Cnp, Controller::Idle, Some(p), _) => {
                let mut rp = dcqcn::Rp::new(p, port_mbps, now);
                rp.on_cnp(p, port_mbps, now, c);
                *self = Controller::Dcqcn(rp);
            }
            (Notification::Becn { .. }, Controller::Iba(cca), _, Some(p)) => {
                cca.on_becn(p, now, c);
            }
            (Notification::Becn { sl }, Controller::Idle, _, Some(p)) => {
                let mut cca = iba::Cca::new(p, sl);
                cca.on_becn(p, now, c);
                *self = Controller::Iba(cca);
            }
            _ => return false,
        }
        true
    }

    /// The controller's deadline passed (`now` at or after [`Self::deadline`]).
    pub fn on_timer(&mut self, cfg: &CcConfig, port_mbps: u32, now: Time, c: &mut CcCounters) {
        match self {
            Controller::Idle => {}
            Controller::Dcqcn(rp) => match &cfg.dcqcn {
                Some(p) => rp.on_timer(p, port_mbps, now, c),
                // Turned off under it: back to no limit.
                None => *self = Controller::Idle,
            },
            Controller::Iba(cca) => match &cfg.iba {
                Some(p) => {
                    cca.on_timer(p, now);
                    if cca.at_rest(p) {
                        *self = Controller::Idle;
                    }
                }
                None => *self = Controller::Idle,
            },
        }
    }
}

/// A QP's notification point: when it last answered a marked packet, so that
/// it answers at most once per interval (mlx5's `np_min_time_between_cnps`,
/// per QP).
#[derive(Debug, Default, Clone, Copy)]
pub struct Np {
    last: Option<Time>,
    /// The notification waiting to go (one per QP: the engine queues the QP
    /// once, so what waits is bounded by the QPs).
    pub pending: Option<NpReply>,
}

/// Where a notification point's answer goes: the marked packet's source,
/// read from the packet itself (a UD QP's senders differ packet to packet).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NpReply {
    /// The source QP of the marked packet: the answer's BTH:DestQP.
    pub dest_qp: u32,
    /// The marked packet's BTH:P_Key.
    pub pkey: u16,
    /// The marked packet's DGID (the answer's SGID) and SGID (its DGID).
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    /// RoCE: the marked frame's source MAC (the answer's destination).
    pub dmac: [u8; 6],
    /// InfiniBand: the marked packet's SLID (the answer's DLID), DLID (its
    /// SLID) and SL.
    pub dlid: u16,
    pub slid: u16,
    pub sl: u8,
}

impl Np {
    /// A marked packet came at `now`: true when the notification goes (and
    /// the interval restarts), false when one went less than `min_gap_ns`
    /// ago.
    pub fn notify_due(&mut self, min_gap_ns: u64, now: Time) -> bool {
        if self
            .last
            .is_some_and(|l| now.0 < l.0.saturating_add(min_gap_ns))
        {
            return false;
        }
        self.last = Some(now);
        true
    }
}

/// A QP's congestion-control state (held by the engine's requester).
#[derive(Debug, Default)]
pub struct QpCc {
    /// Reaction point.
    pub rp: Controller,
    /// Notification point.
    pub np: Np,
}

/// The engine's congestion-control counters (`engine::Counters::cc`); the
/// device exports them in its port counter set (append only).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CcCounters {
    /// RoCE packets received with ECN = CE (notification point).
    pub ce_seen: u64,
    /// CNPs sent (notification point).
    pub cnps_sent: u64,
    /// CNPs received for a local QP (reaction point), handled or not.
    pub cnps_received: u64,
    /// Rate cuts a reaction point made.
    pub rate_cuts: u64,
    /// InfiniBand: request packets received with BTH:FECN (a switch marked
    /// them, A10.2.1), answered with BECN on an RC response or a CN packet.
    pub fecn_seen: u64,
    /// InfiniBand: BECNs for a local QP (on a response or a CN packet).
    pub becns_received: u64,
    /// InfiniBand: CN packets dropped, the queue of those waiting full.
    pub cn_queue_full: u64,
}

impl CcCounters {
    /// Every counter with its name, in export order.
    pub fn named(&self) -> [(&'static str, u64); 7] {
        // Destructured without `..`: a counter added must be named here.
        let CcCounters {
            ce_seen,
            cnps_sent,
            cnps_received,
            rate_cuts,
            fecn_seen,
            becns_received,
            cn_queue_full,
        } = *self;
        [
            ("ce_seen", ce_seen),
            ("cnps_sent", cnps_sent),
            ("cnps_received", cnps_received),
            ("rate_cuts", rate_cuts),
            ("fecn_seen", fecn_seen),
            ("becns_received", becns_received),
            ("cn_queue_full", cn_queue_full),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_space_packets_as_their_rate_or_ipd_says() {
        // 1000 bytes at 1 Gb/s: 8 us.
        assert_eq!(
            Limit::Kbps(1_000_000).next_send(40_000, 1000, Time(0)),
            Some(Time(8_000))
        );
        // IPD 3 at 40 Gb/s: 200 ns a packet, 800 ns start to start (IBA 9.11).
        assert_eq!(
            Limit::Ipd(3).next_send(40_000, 1000, Time(5)),
            Some(Time(805))
        );
        assert_eq!(Limit::Ipd(0).next_send(40_000, 1000, Time(5)), None);
        assert_eq!(Limit::None.next_send(40_000, 1000, Time(5)), None);
    }

    #[test]
    fn the_notification_point_answers_once_per_interval() {
        let mut np = Np::default();
        assert!(np.notify_due(4_000, Time(100)));
        assert!(!np.notify_due(4_000, Time(4_099)));
        assert!(np.notify_due(4_000, Time(4_100)));
    }
}
