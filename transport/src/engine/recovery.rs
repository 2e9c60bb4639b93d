//! How an RC requester notices loss early and how much it keeps in flight
//! (issue 14; vhca policy where the spec leaves room, cited where it does not).
//!
//! The spec's recovery is the local ACK timer (RL-10; 4.096 us x 2^timeout,
//! 67 ms for perftest's 14) plus the responder's PSN Sequence Error NAK (RL-03).
//! Neither covers a lost tail (the last packets of a burst, or the ACK of the
//! last one): nothing follows them, so the responder sends no NAK, and the
//! requester waits for the timer. Recovery within about one round trip:
//!
//! - **Round-trip time.** One packet with AckReq at a time is timed from its
//!   first transmission to the ACK (or response) that covers it; a PSN that was
//!   sent again is never timed (Karn). Smoothed as RFC 6298 does.
//! - **Probe.** When nothing has been acknowledged for a probe timeout (twice
//!   the smoothed round trip, at least the variance bound and a floor the
//!   caller sets for its host's scheduling noise, never more than half the
//!   ACK timeout), the requester sends the oldest unacknowledged packet again
//!   with AckReq, outside the send sequence (a tail probe). If the responder
//!   had it, it is a duplicate, which it must answer with an ACK of the newest
//!   PSN it completed (RL-04, RL-05; 9.7.5.1.1); if it lost it, it is the
//!   packet it expects (a silent drop after an earlier NAK ends with it,
//!   RL-03). A spurious probe (the peer was only slow) costs one packet. If a
//!   probe timeout later what was sent before the probe is still not all
//!   acknowledged, the rest was lost: go-back-N (9.7.4.1.3) resends it and the
//!   window is cut. So it does at once when an ACK half the least round trip
//!   or more after the probe (its answer) leaves the tail unacknowledged
//!   (vhca policy). For a READ the probe is a re-request of the oldest
//!   READ's rest (RL-14), alone, not a go-back over the later READs: a
//!   responder executes every duplicate READ in full (RL-05), and one that
//!   queues it behind what it is still sending (soft-RoCE) would replay
//!   every outstanding READ per probe of a paused stream. A responder that
//!   stops its stream for the duplicate instead (seed 004 §3.3.2.2) ACKs
//!   past the READs it dropped, which then go again at once (C9-27). While
//!   READ responses keep coming, even for READs already answered, no probe
//!   goes, and a READ probe's watch lasts (such a responder's duplicate
//!   answer comes after its whole queue). A probe is not a retry:
//!   `retry_cnt` still counts ACK timeouts and sequence NAKs only (RL-10),
//!   and the ACK timer keeps running, so a peer that is gone still fails
//!   the QP in the time the spec gives. Probes back off (doubling) until
//!   progress.
//! - **When a due probe goes (vhca policy).** The probe timer only marks the
//!   probe due; what it does is decided when the QP is next polled for a
//!   packet. A caller runs its due timers before it reads what arrived, so a
//!   process descheduled past the probe timeout would otherwise probe (and,
//!   a timeout later, go back) although the ACKs waiting in its socket
//!   acknowledge everything.
//! - **A floor that learns the host's noise (vhca policy).** A probe whose
//!   original was answered too is spurious: after it, the responder answers
//!   both, so a duplicate response comes (an ACK of a PSN already
//!   acknowledged, a READ response already placed) for a PSN at or after the
//!   probed one (cf. TCP's Eifel detection, RFC 3522, which tells the
//!   answers apart by timestamps; here the responder's duplicate answer,
//!   RL-04/05, tells it). Each spurious probe doubles that QP's floor, up to
//!   [`MAX_FLOOR_FACTOR`] times the configured one; each probe that proves
//!   useful (watched for [`WATCH_PTOS`] probe timeouts without a duplicate
//!   answer: the original or its ACK was lost; or followed by a go-back,
//!   what went before it still unacknowledged a probe timeout later) lowers
//!   it by an eighth, never below the configured one. A go-back after the probe resends packets
//!   whose duplicate answers look the same, so such a probe is not judged
//!   either way. An ACK that repeats the last one's PSN and MSN with only
//!   another credit count is the responder's credit update (RL-13), not a
//!   duplicate answer, and is not judged. Network duplication (a fabric that duplicates an ACK while a
//!   probe is watched) raises the floor wrongly; useful probes bring it back.
//!   `Limits::adaptive_probe_floor` off keeps the floor fixed (and still
//!   counts the spurious probes).
//! - **A tail's floor (vhca policy).** The floor guards against spurious
//!   probes whose cost is the go-back that may follow them: a window's
//!   packets sent again and the window cut. With at most [`TAIL_PKTS`]
//!   packets unacknowledged (a small message, one in flight, as
//!   ibv_rc_pingpong sends; the end of a burst) a spurious probe, or the
//!   go-back after it, resends a packet or a few, while a lost last packet
//!   or ACK (nothing follows to provoke a NAK, RL-03) otherwise costs the
//!   whole floor, many times such a message's round trip. So a tail probes
//!   at its own floor: it starts at the configured one divided by
//!   [`TAIL_FLOOR_DIV`] (not below [`MIN_PTO_NS`]), is learned as the other (a tail probe's verdict
//!   moves the tail floor only, so noise a tail's probes meet never delays
//!   a window's), and never exceeds the QP's floor. The round trip still
//!   bounds it from below (2 x SRTT, SRTT + 4 x RTTVAR).
//! - **At most one go-back per NAK burst (vhca policy).** On a PSN Sequence
//!   Error NAK the requester resends from the NAK's PSN (RL-03; seed 004
//!   §3.4: the responder NAKs once, then drops silently until that PSN
//!   comes; §4: the requester keeps its point of maximum advance); the spec
//!   says from where, not how soon after another NAK. A reordered packet
//!   provokes two NAKs a packet time apart: one for its PSN (the packet after
//!   it came first) and, once it came and the next one did too, one for the
//!   PSN after it, which the responder dropped meanwhile. The go-back the
//!   first started resends that PSN anyway, so the second, for a PSN within
//!   what the go-back resends and coming within half the least round trip of
//!   its start (no resent packet can have provoked it), is absorbed: no new
//!   go-back, no retry counted (RL-10 counts go-backs). A NAK that comes
//!   later may report a resent packet lost and goes back again.
//!   `Limits::bounded_go_back` off goes back for every NAK of another PSN.
//! - **Two copies of what the responder's silence hinges on (vhca
//!   policy).** After a sequence NAK the responder drops everything but the
//!   PSN it expects, without another NAK (RL-03; seed 004 §3.4). A lost
//!   NAK, or a lost first packet of the go-back it started, then left
//!   nothing to come back until a probe timeout: on the device tier at 5 %
//!   loss these were most of WRITE's probes, each costing the 1 ms floor.
//!   So the responder sends a sequence NAK after any request but a READ
//!   twice (the requester goes back once for both: the copy names the PSN
//!   it went back to), and the requester sends the NAKed packet twice when
//!   the go-back it started resends it ([`Recovery::copy_first`]; the copy
//!   is a duplicate the responder answers, RL-04, or an ATOMIC's, answered
//!   from its saved result and never executed again, RL-06; issue 30). Not
//!   for READ requests (a duplicate READ is executed again, RL-05).
//! - **A READ re-request whose answer lost its first response (vhca
//!   policy).** A gap in READ responses is asked for again once (RL-14);
//!   more responses after the same gap are the old stream's. A response
//!   whose PSN came already since that go-back, not right after itself (a
//!   fabric duplicate), and half the least round trip or more after it, is
//!   the responder's new stream (it answers a duplicate READ from the
//!   request's PSN, RL-05; one stream never repeats a PSN, C9-27): its
//!   first response was lost too, and the requester asks again at once
//!   instead of a probe timeout later. So is a response before the one
//!   that showed the gap (the old stream had passed it). A READ/ATOMIC
//!   asked for again asks only for what has not come by the time its
//!   request goes (RL-14), not by the go-back. A READ probe is judged
//!   spurious only by a duplicate of its own READ's responses: a go-back
//!   after it asks for the later READs again too. When the old stream
//!   reaches the point of maximum advance and the re-request is still
//!   unanswered, the responder never saw it (it would have stopped that
//!   stream and answered next, RL-05): the probe is due a probe timeout
//!   without the floor after the re-request ([`Recovery::on_old_stream_end`]).
//! - **Window.** Packets in flight (PSNs between the oldest unacknowledged and
//!   the next to send) are limited by a congestion window, AIMD as TCP Reno:
//!   slow start from [`INITIAL_WINDOW`], one more packet per window acknowledged
//!   after the first loss, cut to 0.7 of itself once per loss episode (a
//!   sequence NAK, a READ response gap, a probe; 0.7 as CUBIC, since random
//!   loss on a virtual link is not always congestion), never below
//!   [`MIN_WINDOW`] (about a bandwidth-delay product of a loopback or LAN
//!   path at 4 KiB packets), which an ACK timeout returns it to, and never
//!   above the engine's send window (RL-17). Go-back-N then resends little,
//!   and a burst that overflowed the peer's receive buffer is not repeated.
//!   AckReq goes at least every half window and on the packet that fills it,
//!   so ACKs keep the window moving (RL-08). A responder that saw loss on
//!   the QP (a sequence NAK sent, a duplicate answered) coalesces a batch's
//!   ACKs into its two newest, not one, so a lost ACK leaves another (vhca
//!   policy, `responder::responses::queue_aeth`).
//! - **READs in flight (vhca policy).** A window smaller than a READ's
//!   responses lets one READ be outstanding at a time; its lost request or
//!   last response is then found only by a probe timeout, since no later
//!   response (C9-27) or sequence NAK (RL-03) shows it. So the window is
//!   never below one more than the last READ's responses (while READs are
//!   what the QP sends: another message resets it): the next READ
//!   goes while one is still wholly unanswered, and whichever of two is
//!   hit, the other's packets show the gap within a round trip. Still
//!   never above the engine's send window (RL-17).
//!
//!   After an RNR wait (RL-11) only the NAKed request goes until it is
//!   answered, so a receiver without buffers is not flooded by retries.
//! - **Port window.** The windows above bound each QP; their sum over the
//!   port is bounded by `port_window` (`Limits::port_window`, vhca policy,
//!   ARCHITECTURE.md §3): a new packet waits for room there too, a probe or
//!   a go-back resend never does, and once the port is half full each new
//!   packet asks for an ACK (`Recovery::force_ack_req`).
//!
//! UC and UD never retransmit and are not windowed.

use crate::psn;
use crate::verbs::Time;

/// The window a QP starts with, in packets.
pub const INITIAL_WINDOW: u32 = 16;
/// The window never goes below this after a loss.
pub(super) const MIN_WINDOW: u32 = 8;
/// Probe timeout before any round trip was measured.
const INITIAL_PTO_NS: u64 = 1_000_000;
/// Default floor of the probe timeout (100 us; `Limits::min_probe_timeout_ns`):
/// below it a probe would race ordinary ACKs on any real path.
pub const MIN_PTO_NS: u64 = 100_000;
/// Probes back off by doubling, at most this many times.
const MAX_BACKOFF: u32 = 10;
/// A QP's learned probe floor never exceeds the configured one times this
/// (and the probe timeout never half the ACK timeout, whatever the floor).
const MAX_FLOOR_FACTOR: u64 = 32;

/// How long (in probe timeouts) a probe's duplicate answer is waited for: a
/// peer descheduled for longer than a probe timeout answers late.
const WATCH_PTOS: u64 = 8;

/// A tail of at most this many unacknowledged packets probes at its own,
/// lower floor (see the module doc, "A tail's floor"): a 4 KiB message at
/// path MTU 1024, the ping-pong's whole flight.
pub(super) const TAIL_PKTS: u32 = 4;
/// The tail floor starts at (and never goes below) the configured floor
/// divided by this, but not below [`MIN_PTO_NS`] ([`tail_min_ns`]).
const TAIL_FLOOR_DIV: u64 = 8;

/// Where a tail floor starts and what it never goes below, for a configured
/// floor of `min_pto_ns`: an eighth of it, at least [`MIN_PTO_NS`] (below
/// that a probe races ordinary ACKs, and packets queued behind other QPs'
/// at the port, ARCHITECTURE.md §3), at most the configured floor itself.
fn tail_min_ns(min_pto_ns: u64) -> u64 {
    (min_pto_ns / TAIL_FLOOR_DIV)
        .max(MIN_PTO_NS)
        .min(min_pto_ns)
}

/// A probe whose answer is being watched: if the responder answers both the
/// original and the probe (a duplicate response for a PSN at or after the
/// probed one), nothing had been lost and the probe was spurious.
#[derive(Debug, Clone, Copy)]
struct Watch {
    /// The probed PSN (for a READ, the first response asked for again).
    psn: u32,
    /// For a READ probe, the PSN after the probed READ's last response: a
    /// go-back after the probe asks for the later READs again too, and
    /// their duplicate answers say nothing of the probe.
    end: Option<u32>,
    /// Until when an answer to the probe may still come.
    until: Time,
    /// The probe went at the tail floor: its verdict moves that floor.
    tail: bool,
    /// A go-back resent packets since the probe: their duplicate answers
    /// cannot be told from the probe's, so the probe is not judged.
    resent: bool,
}

/// A go-back under way: the PSNs `[from, end)` are being sent again since
/// `at`.
#[derive(Debug, Clone, Copy)]
struct GoBack {
    from: u32,
    end: u32,
    at: Time,
}

/// Loss detection and the congestion window of one RC requester.
#[derive(Debug, Clone)]
pub(crate) struct Recovery {
    srtt_ns: Option<u64>,
    rttvar_ns: u64,
    /// The least round trip measured.
    min_rtt_ns: Option<u64>,
    /// The packet being timed: its PSN and when it was sent.
    sample: Option<(u32, Time)>,
    /// When a probe goes out if nothing is acknowledged before.
    pub probe_at: Option<Time>,
    /// The probe timer fired: the probe is decided at the next poll for a
    /// packet, unless progress comes first (`completer::fire_probe`).
    pub probe_due: bool,
    backoff: u32,
    /// A probe (or a resend after an RNR wait) is out: one packet in flight
    /// until a response comes.
    pub probing: bool,
    /// The probe's packet went.
    probe_sent: bool,
    /// When the last tail probe was decided.
    probe_sent_at: Option<Time>,
    /// The next packet carries AckReq whatever its place in the message.
    pub force_ack_req: bool,
    /// Packets sent since the last one with AckReq.
    since_ack_req: u32,
    cwnd: u32,
    /// Additive increase: packets acknowledged toward the next increment.
    acked: u32,
    ssthresh: u32,
    /// The loss episode: until `una` passes this PSN, further losses belong to
    /// the same episode and do not shrink the window again.
    recover: Option<u32>,
    /// A tail probe to send: the PSN of the packet to send again.
    pub pending_probe: Option<u32>,
    /// A tail probe went when the point of maximum advance was here: if a
    /// probe timeout later `una` is still short of it, the rest was lost.
    probe_hwm: Option<u32>,
    /// The engine's send window (RL-17): the window never grows past it.
    pub cap: u32,
    /// Probes are armed (`Limits::loss_probes`).
    pub probes: bool,
    /// Floor of the probe timeout (`Limits::min_probe_timeout_ns`).
    pub min_pto_ns: u64,
    /// This QP's learned floor: at least `min_pto_ns`, raised by spurious
    /// probes, lowered by useful ones.
    floor_ns: u64,
    /// The probe whose answer is watched for a duplicate.
    watch: Option<Watch>,
    /// The go-back under way, for sequence NAKs it already answers.
    go_back: Option<GoBack>,
    /// The tail floor: the probe timeout's floor while at most [`TAIL_PKTS`]
    /// packets are unacknowledged; learned like `floor_ns`, between
    /// [`tail_min_ns`] and `floor_ns`.
    tail_floor_ns: u64,
    /// Packets unacknowledged (the caller's count, given to
    /// [`Recovery::on_send`] and [`Recovery::on_progress`]): whether the
    /// tail floor applies.
    unacked: u32,
    /// The last packet sent or acknowledgement received.
    last_activity: Time,
    /// `Limits::adaptive_probe_floor`.
    pub adaptive: bool,
    /// `Limits::bounded_go_back`.
    pub bounded_go_back: bool,
    /// The last ACK-kind AETH received: its PSN, MSN and credit code, to tell
    /// a credit update from a duplicate answer ([`Recovery::credit_only`]).
    last_ack: Option<(u32, u32, u8)>,
    /// The READ response PSNs seen since the last go-back, to see the
    /// responder restart its response stream ([`Recovery::read_restarted`]).
    seen: Seen,
    /// The response PSNs of the last READ sent: the window lets a READ go
    /// while one such READ is outstanding ([`Recovery::window`]).
    read_span: u32,
    /// The first packet of the go-back under way, to go twice when it is
    /// resent ([`Recovery::copy_first`]).
    copy_psn: Option<u32>,
    /// That packet's copy, to send next (outside the send sequence).
    pub pending_copy: Option<u32>,
    /// The PSN of the newest PSN Sequence Error NAK taken
    /// ([`Recovery::repeated_nak`]).
    last_seq_nak: Option<u32>,
}

/// PSNs seen since a go-back from `from`: the first [`SEEN_PSNS`] of them,
/// bit per PSN (bounded: a larger READ is not watched past them), the last
/// one, and the response that showed the gap the go-back answers.
#[derive(Debug, Clone, Default)]
struct Seen {
    from: u32,
    bits: [u64; SEEN_PSNS / 64],
    last: Option<u32>,
    trigger: Option<u32>,
}

/// How many PSNs after a go-back's start [`Seen`] tracks.
const SEEN_PSNS: usize = 1024;

impl Default for Recovery {
    fn default() -> Recovery {
        Recovery {
            srtt_ns: None,
            rttvar_ns: 0,
            min_rtt_ns: None,
            sample: None,
            probe_at: None,
            probe_due: false,
            backoff: 0,
            probing: false,
            probe_sent: false,
            probe_sent_at: None,
            force_ack_req: false,
            since_ack_req: 0,
            cwnd: INITIAL_WINDOW,
            acked: 0,
            ssthresh: u32::MAX,
            recover: None,
            pending_probe: None,
            probe_hwm: None,
            cap: 256,
            probes: true,
            min_pto_ns: MIN_PTO_NS,
            floor_ns: MIN_PTO_NS,
            tail_floor_ns: tail_min_ns(MIN_PTO_NS),
            unacked: 0,
            watch: None,
            go_back: None,
            last_activity: Time(0),
            adaptive: true,
            bounded_go_back: true,
            last_ack: None,
            seen: Seen::default(),
            read_span: 0,
            copy_psn: None,
            pending_copy: None,
            last_seq_nak: None,
        }
    }
}

impl Recovery {
    /// A requester's recovery under the engine's `limits` (fixed for its life).
    pub fn new(limits: &super::Limits) -> Recovery {
        Recovery {
            cap: limits.send_window,
            probes: limits.loss_probes,
            min_pto_ns: limits.min_probe_timeout_ns,
            floor_ns: limits.min_probe_timeout_ns,
            tail_floor_ns: tail_min_ns(limits.min_probe_timeout_ns),
            adaptive: limits.adaptive_probe_floor,
            bounded_go_back: limits.bounded_go_back,
            ..Recovery::default()
        }
    }

    /// Packets the requester may have in flight now: the congestion
    /// window, but at least one more than the last READ's responses (see
    /// the module doc, "READs in flight").
    pub fn window(&self) -> u32 {
        if self.probing {
            1
        } else {
            let reads = self.read_span.saturating_add(1);
            self.cwnd.max(reads).min(self.cap).max(1)
        }
    }

    /// A message goes out for the first time: a READ asking for `npkts`
    /// responses, or another message (0: the window is the congestion
    /// window alone again, so a QP that read once keeps its AIMD).
    pub fn on_read_sent(&mut self, npkts: u32) {
        self.read_span = npkts;
    }

    /// Whether another request packet may go with `in_flight` PSNs
    /// unacknowledged: within the window, or the one packet of a probe (which
    /// goes whatever is counted in flight: a READ's PSNs stay counted until
    /// their responses come).
    pub fn may_send(&self, in_flight: u32) -> bool {
        if self.probing {
            !self.probe_sent
        } else {
            in_flight < self.window()
        }
    }

    /// Whether the packet about to go, which leaves `in_flight` packets
    /// unacknowledged, must ask for an ACK: forced (a probe), the window
    /// full after it (else nothing would acknowledge the window and it could
    /// only reopen by a probe), or half a window since the last request (ACKs
    /// keep coming while the window is open, RL-08). The message's last
    /// packet asks in any case (the requester adds it).
    pub fn ack_req_due(&self, in_flight: u32) -> bool {
        let w = self.window();
        self.force_ack_req || in_flight >= w || self.since_ack_req + 1 >= (w / 2).max(1)
    }

    /// Packets went since the last one with AckReq: their ACK is not asked
    /// for yet (the port window serves such a QP first, `port_window`).
    pub fn ack_req_owed(&self) -> bool {
        self.since_ack_req > 0
    }

    /// The probe timeout: 2 x SRTT, at least SRTT + 4 x RTTVAR and the QP's
    /// learned floor (the tail floor for a tail), at most half the ACK
    /// timeout, doubled per unanswered probe.
    pub fn pto_ns(&self, ack_timeout_ns: Option<u64>) -> u64 {
        let base = match self.srtt_ns {
            Some(s) => (2 * s).max(s + 4 * self.rttvar_ns),
            None => INITIAL_PTO_NS,
        };
        let floor = if self.is_tail() {
            self.tail_floor_ns.min(self.floor_ns)
        } else {
            self.floor_ns
        };
        let t = (base.max(floor)) << self.backoff.min(MAX_BACKOFF);
        match ack_timeout_ns {
            Some(a) => t.min(a / 2).max(1),
            None => t,
        }
    }

    /// Whether at most [`TAIL_PKTS`] packets are unacknowledged: a spurious
    /// probe or the go-back after it resends no more than that.
    fn is_tail(&self) -> bool {
        (1..=TAIL_PKTS).contains(&self.unacked)
    }

    /// A request packet went out; `new` when its PSN was never sent before;
    /// `unacked` packets are unacknowledged now.
    pub fn on_send(
        &mut self,
        p: u32,
        ack_req: bool,
        new: bool,
        unacked: u32,
        now: Time,
        ack_timeout: Option<u64>,
    ) {
        self.unacked = unacked;
        if ack_req && new && self.sample.is_none() {
            self.sample = Some((p, now));
        }
        // The probe waits a PTO after the last packet sent, not the first: a
        // long message is still leaving while its first packets wait for the
        // ACK of its last (RFC 8985 7.2 arms the same way).
        if self.probes {
            self.probe_at = Some(now.plus_ns(self.pto_ns(ack_timeout)));
        }
        self.last_activity = now;
        self.force_ack_req = false;
        self.probe_sent = self.probing;
        self.since_ack_req = if ack_req { 0 } else { self.since_ack_req + 1 };
    }

    /// The responder acknowledged through `last_acked`, moving `una` forward by
    /// `n` packets; `unacked` remain.
    pub fn on_progress(
        &mut self,
        last_acked: u32,
        n: u32,
        unacked: u32,
        now: Time,
        ack_timeout: Option<u64>,
    ) {
        self.unacked = unacked;
        if let Some((p, sent)) = self.sample {
            if psn::diff(last_acked, p) >= 0 {
                self.sample = None;
                self.rtt_sample(now.0.saturating_sub(sent.0));
            }
        }
        self.backoff = 0;
        self.probing = false;
        self.probe_due = false;
        self.last_activity = now;
        self.keep_read_watch(now, ack_timeout);
        self.expire_watch(now);
        self.probe_covered(psn::add(last_acked, 1));
        // A tail probe's answer that leaves the tail unacknowledged: the
        // responder answered the probe (a duplicate with its newest PSN,
        // RL-04; or the packet it waited for, after which it had dropped
        // the rest, RL-03), so what followed was lost: go back at once, not
        // a probe timeout later (vhca policy). An ACK sooner than half the
        // least round trip after the probe answers no probe.
        let answered = match (self.probe_hwm, self.probe_sent_at, self.min_rtt_ns) {
            (Some(_), Some(t), Some(rtt)) => now.0 >= t.0.saturating_add(rtt / 2),
            _ => false,
        };
        let go_back_now = self.probes && answered;
        if let Some(r) = self.recover {
            if psn::diff(last_acked, r) >= 0 {
                self.recover = None;
            }
        }
        if self.recover.is_none() {
            if self.cwnd < self.ssthresh {
                self.cwnd = self.cwnd.saturating_add(n);
            } else {
                self.acked = self.acked.saturating_add(n);
                while self.acked >= self.cwnd {
                    self.acked -= self.cwnd;
                    self.cwnd += 1;
                }
            }
            self.cwnd = self.cwnd.min(self.cap.max(MIN_WINDOW));
        }
        self.probe_at = (self.probes && unacked > 0).then(|| now.plus_ns(self.pto_ns(ack_timeout)));
        if go_back_now && unacked > 0 {
            self.probe_due = true;
        }
    }

    fn rtt_sample(&mut self, r: u64) {
        self.min_rtt_ns = Some(self.min_rtt_ns.map_or(r, |m| m.min(r)));
        // RFC 6298 2.2-2.3 with alpha 1/8, beta 1/4.
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(r);
                self.rttvar_ns = r / 2;
            }
            Some(s) => {
                self.rttvar_ns = (3 * self.rttvar_ns + s.abs_diff(r)) / 4;
                self.srtt_ns = Some((7 * s + r) / 8);
            }
        }
    }

    /// A loss was seen (sequence NAK, READ response gap, probe): the window
    /// halves once per episode, which lasts until `hwm` is acknowledged.
    pub fn on_loss(&mut self, hwm: u32) {
        self.sample = None;
        if self.recover.is_some() {
            return;
        }
        self.ssthresh = (self.cwnd.min(self.cap) * 7 / 10).max(MIN_WINDOW);
        self.cwnd = self.ssthresh;
        self.acked = 0;
        self.recover = Some(psn::add(hwm, psn::PSN_MASK));
    }

    /// The ACK timer fired: the window starts again from its minimum.
    pub fn on_timeout(&mut self, hwm: u32) {
        self.on_loss(hwm);
        self.cwnd = MIN_WINDOW;
        // The resend goes whatever a probe or an RNR resend left waiting.
        self.probing = false;
    }

    /// What a probe timeout does now: a tail probe, or, when one already went
    /// and what was sent before it is still not all acknowledged a probe
    /// timeout later, go-back-N (`true`). A probe whose answer acknowledges
    /// everything (only an ACK was lost, or the peer was slow) cost one packet.
    pub fn tail_probe_or_go_back(&mut self, una: u32) -> bool {
        self.probe_hwm.is_some_and(|h| psn::diff(una, h) < 0)
    }

    /// A tail probe of the packet at `una` goes out now, outside the send
    /// sequence; the next probe timeout, if still needed, after a doubled
    /// timeout. The window is not cut: the probe finds out whether anything
    /// was lost.
    pub fn on_tail_probe(&mut self, una: u32, hwm: u32, now: Time, ack_timeout: Option<u64>) {
        log::debug!(
            "tail probe psn {una}: unacked {} srtt {:?} rttvar {} floor {} tail floor {} backoff {} stalled {} ns",
            self.unacked,
            self.srtt_ns,
            self.rttvar_ns,
            self.floor_ns,
            self.tail_floor_ns,
            self.backoff,
            self.stalled_ns(now)
        );
        self.watch_probe(una, None, now, ack_timeout);
        self.pending_probe = Some(una);
        self.probe_hwm = Some(hwm);
        self.probe_sent_at = Some(now);
        self.sample = None;
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.probe_at = Some(now.plus_ns(self.pto_ns(ack_timeout)));
    }

    /// A probe timeout after a tail probe found `una` still short of what was
    /// sent before the probe: that was lost. The window is cut and the caller
    /// goes back to `una` (9.7.4.1.3), not as a retry (RL-10).
    ///
    /// The probe was useful (it found a loss), so a raised floor comes down
    /// by an eighth, as when a probe's watch runs out: under loss most
    /// probes end in such a go-back, and a floor that only spurious probes
    /// moved (up) would stay raised for the QP's life (vhca policy).
    pub fn on_tail_lost(&mut self, hwm: u32, now: Time, ack_timeout: Option<u64>) {
        if self.adaptive {
            let tail = self.watch.map_or(self.is_tail(), |w| w.tail);
            self.lower_floor(tail);
        }
        self.on_loss(hwm);
        self.probe_hwm = None;
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.probe_at = Some(now.plus_ns(self.pto_ns(ack_timeout)));
    }

    /// A READ's rest is asked for again (its re-request is the probe, RL-14,
    /// sent as `pending_probe`, outside the send sequence). The window is
    /// not cut to one packet: new requests still follow within it, or a
    /// pause of the peer would stall the whole queue behind one READ.
    /// Only a duplicate response of this READ (before `end`) judges it.
    pub fn on_read_probe(&mut self, resume: u32, end: u32, now: Time, ack_timeout: Option<u64>) {
        // An earlier READ probe still watched (responses have kept coming
        // since, `keep_read_watch`) is judged first: against a responder
        // that answers duplicates after its queue, each new probe's watch
        // would replace the last before its answer came, and none would
        // ever be judged spurious.
        self.expire_watch(now);
        if self.watch.is_none_or(|w| w.end.is_none()) {
            self.watch_probe(resume, Some(end), now, ack_timeout);
        }
        self.sample = None;
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        self.probe_at = Some(now.plus_ns(self.pto_ns(ack_timeout)));
    }

    /// Progress after a tail probe: whether it says that what followed `una`
    /// was lost (then go-back-N resends it and the window is cut).
    /// Progress: a tail probe whose packets before it are now all
    /// acknowledged is over.
    fn probe_covered(&mut self, una: u32) {
        if self.probe_hwm.is_some_and(|h| psn::diff(una, h) >= 0) {
            self.probe_hwm = None;
        }
    }

    /// One packet, with AckReq, until a response comes (a probe, or the
    /// request an RNR NAK named after its wait).
    pub fn start_probe(&mut self) {
        self.copy_psn = None;
        self.pending_copy = None;
        self.probing = true;
        self.probe_sent = false;
        self.force_ack_req = true;
    }

    /// A response says where to resume: the window applies again.
    /// A go-back starts with it (a sequence NAK, a READ response gap), so a
    /// probe that came due meanwhile is moot too.
    pub fn end_probe(&mut self) {
        self.probing = false;
        self.probe_hwm = None;
        self.pending_probe = None;
        self.probe_due = false;
    }

    /// A response came that acknowledges nothing new (a READ response after a
    /// gap, a duplicate): the responder is alive and its queue is draining
    /// toward what was asked again, so the probe waits a PTO from now.
    pub fn on_activity(&mut self, now: Time, ack_timeout: Option<u64>) {
        self.keep_read_watch(now, ack_timeout);
        if self.probe_at.is_some() || self.probe_due {
            self.probe_due = false;
            self.probe_at = Some(now.plus_ns(self.pto_ns(ack_timeout)));
        }
    }

    /// A READ probe's watch lasts while responses keep coming. A responder
    /// answers in PSN order (C9-27), and one that executes a duplicate READ
    /// after what it had queued (soft-RoCE: RL-05 lets it) sends the probe's
    /// duplicate answer only once every earlier response went: counted in
    /// probe timeouts from the probe, a long queue would make every such
    /// probe look useful and lower the floor the pauses need raised
    /// (engine_read_slow_responder.rs).
    fn keep_read_watch(&mut self, now: Time, ack_timeout: Option<u64>) {
        // Runs for every ACK (`on_progress`): the probe timeout is worked
        // out only when such a watch is there to extend.
        if let Some(w) = self.watch.filter(|w| w.end.is_some() && w.until > now) {
            let until = now.plus_ns(WATCH_PTOS * self.pto_ns(ack_timeout));
            self.watch = Some(Watch {
                until: w.until.max(until),
                ..w
            });
        }
    }

    /// A go-back from `from` started while `end` was the point of maximum
    /// advance: nothing in flight can be timed any more (Karn).
    pub fn on_rewind(&mut self, from: u32, end: u32, now: Time) {
        self.sample = None;
        self.go_back = Some(GoBack { from, end, at: now });
        self.seen = Seen {
            from,
            ..Seen::default()
        };
        if let Some(w) = &mut self.watch {
            w.resent = true;
        }
    }

    /// The go-back a sequence NAK just started resends the NAKed packet at
    /// `from` (first, or after a READ/ATOMIC that missed its response): it
    /// goes twice (vhca policy, issue 14). After a sequence NAK the
    /// responder drops every request but the one it expects, without
    /// another NAK (RL-03; seed 004 §3.4), so a lost resend left nothing to
    /// come back until a probe timeout (the host's floor, ten or more round
    /// trips); with two copies one lost leaves the other, and the second is
    /// a duplicate the responder answers with an ACK (RL-04), an ATOMIC's
    /// from its saved result, never executed again (RL-06; issue 30). Not
    /// for a READ request: a duplicate READ is executed again (RL-05).
    pub fn copy_first(&mut self, from: u32) {
        self.copy_psn = (!self.probing).then_some(from);
        self.pending_copy = None;
    }

    /// A packet of the send sequence went again (a go-back's resend): if it
    /// is the go-back's first, its copy goes next ([`Recovery::copy_first`]).
    pub fn on_resend(&mut self, p: u32) {
        if self.copy_psn == Some(p) {
            self.copy_psn = None;
            self.pending_copy = (!self.probing).then_some(p);
        }
    }

    /// A PSN Sequence Error NAK for `p` came: whether it repeats one taken
    /// before or is older (the responder's copy, see the module doc, or the
    /// fabric's duplicate, reordered or not). A responder NAKs its expected
    /// PSN once and then waits for it; its next NAK, once that PSN came,
    /// names a later one (RL-03; its expected PSN never goes back). So a NAK
    /// at or before the newest one taken asks for nothing: no go-back, no
    /// retry counted (RL-10). The newest is forgotten once `una` passed it
    /// (a NAK before `una` is dropped as a duplicate anyway, RL-09), or a
    /// long-lived QP would compare PSNs more than half the PSN space apart.
    pub fn repeated_nak(&mut self, p: u32, una: u32) -> bool {
        if self.last_seq_nak.is_some_and(|q| psn::diff(q, una) < 0) {
            self.last_seq_nak = None;
        }
        match self.last_seq_nak {
            Some(q) if psn::diff(p, q) <= 0 => true,
            _ => {
                self.last_seq_nak = Some(p);
                false
            }
        }
    }

    /// Whether a PSN Sequence Error NAK for `p` asks for nothing the go-back
    /// under way does not already resend (vhca policy: at most one go-back per
    /// round trip; see the module doc). It does when `p` lies within what the
    /// go-back resends and the NAK came sooner after its start than half the
    /// least round trip measured: then no resent packet can have provoked
    /// it, so a packet sent before the go-back did (a reordered one,
    /// typically: the responder NAKs the late packet's PSN, then, a packet
    /// time later, the one after it, which it dropped meanwhile). Half: a
    /// resend NAKed at once (it was itself reordered) comes back in about one
    /// round trip, and the samples (an ACK of a packet with AckReq) may be
    /// longer than a NAK's. Later, it may report a resent packet lost: a new
    /// go-back.
    pub fn absorbs_nak(&self, p: u32, now: Time) -> bool {
        let Some(rtt) = self.min_rtt_ns else {
            return false;
        };
        let within = rtt / 2;
        self.bounded_go_back
            && self.go_back.is_some_and(|g| {
                psn::diff(p, g.from) >= 0
                    && psn::diff(p, g.end) < 0
                    && now.0 < g.at.0.saturating_add(within)
            })
    }

    /// A READ response for `p` came. Returns whether it shows that the
    /// responder started its responses again since the last go-back: `p`
    /// came already since then, or lies before the response whose gap the
    /// go-back answers (the old stream had passed it: one response stream
    /// comes in PSN order without repeats, C9-27), and not right after itself
    /// (a duplicate the fabric made arrives next to its original), at least
    /// half the least round trip after the go-back (sooner, no re-request
    /// can have been answered: a packet the fabric reordered). A duplicate
    /// READ's responses start again at its request's PSN (RL-05), so such a
    /// response is the re-request's stream, and if the requester still waits
    /// for that request's first response, it was lost on the way. vhca
    /// policy: ask again at once, not a probe timeout later (issue 14).
    pub fn read_restarted(&mut self, p: u32, now: Time) -> bool {
        let s = &mut self.seen;
        let before = s.last.replace(p);
        let behind = s.trigger.is_some_and(|t| psn::diff(p, t) < 0);
        let off = psn::diff(p, s.from);
        let Ok(off) = usize::try_from(off) else {
            return false;
        };
        let repeat = if off < SEEN_PSNS {
            let (word, bit) = (off / 64, 1u64 << (off % 64));
            let r = s.bits[word] & bit != 0;
            s.bits[word] |= bit;
            r
        } else {
            false
        };
        let (Some(g), Some(rtt)) = (self.go_back, self.min_rtt_ns) else {
            return false;
        };
        (repeat || behind) && before != Some(p) && now.0 >= g.at.0.saturating_add(rtt / 2)
    }

    /// The response to the last PSN ever asked for (the point of maximum
    /// advance) came, from the stream the responder sent before the go-back
    /// under way, whose re-request is still unanswered. The responder stops
    /// that stream when the re-request reaches it (RL-05, seed 004
    /// §3.3.2.2) and answers it next: either the answer follows within a
    /// round trip of the re-request, or the re-request was lost. So the
    /// probe (a re-request again) is due a probe timeout without the floor
    /// after the re-request went, and at least the least round trip from
    /// now (vhca policy, issue 14: the floor is for a peer's scheduling
    /// noise, and a peer that was only slow answers both re-requests in one
    /// batch, the second preempting the first's queued answer, RL-05).
    pub fn on_old_stream_end(&mut self, now: Time) {
        let (Some(g), Some(srtt), Some(min)) = (self.go_back, self.srtt_ns, self.min_rtt_ns) else {
            return;
        };
        if !self.probes {
            return;
        }
        let base = (2 * srtt).max(srtt + 4 * self.rttvar_ns);
        let due = g.at.plus_ns(base).max(now.plus_ns(min));
        if self.probe_at.is_none_or(|t| t > due) {
            self.probe_at = Some(due);
        }
    }

    /// The READ response for `p` showed a gap, and the go-back for it has
    /// started ([`Recovery::on_rewind`]).
    pub fn on_read_gap(&mut self, p: u32, now: Time) {
        self.read_restarted(p, now);
        self.seen.trigger = Some(p);
    }

    /// How long (ns) nothing was sent or acknowledged, at `now` (a probe or
    /// the ACK timer fired).
    pub fn stalled_ns(&self, now: Time) -> u64 {
        now.0.saturating_sub(self.last_activity.0)
    }

    /// The QP's current probe floor (ns).
    #[cfg(test)]
    pub fn floor_ns(&self) -> u64 {
        self.floor_ns
    }

    /// The QP's current tail floor (ns).
    #[cfg(test)]
    pub fn tail_floor_ns(&self) -> u64 {
        self.tail_floor_ns
    }

    /// A useful probe: the floor it went at comes down by an eighth, never
    /// below where it starts.
    fn lower_floor(&mut self, tail: bool) {
        if tail {
            let min = tail_min_ns(self.min_pto_ns);
            self.tail_floor_ns = (self.tail_floor_ns - self.tail_floor_ns / 8).max(min);
        } else {
            self.floor_ns = (self.floor_ns - self.floor_ns / 8).max(self.min_pto_ns);
        }
    }

    /// A probe of `p` goes: watch for a duplicate answer.
    fn watch_probe(&mut self, p: u32, end: Option<u32>, now: Time, ack_timeout: Option<u64>) {
        // The last probe's watch, if it ran out, proved it useful; if not, a
        // probe again before its answer says the peer is slow or gone, and
        // the new probe is judged instead.
        self.expire_watch(now);
        self.watch = Some(Watch {
            psn: p,
            end,
            until: now.plus_ns(WATCH_PTOS * self.pto_ns(ack_timeout)),
            tail: self.is_tail(),
            resent: false,
        });
    }

    /// A probe's watch that ran out without a duplicate answer: the probe was
    /// the only copy to get through (the original or its ACK was lost), so it
    /// was useful and the floor comes down by an eighth, toward the
    /// configured one (slowly: one spurious probe doubles it).
    fn expire_watch(&mut self, now: Time) {
        if let Some(w) = self.watch.filter(|w| w.until <= now) {
            self.watch = None;
            if self.adaptive && !w.resent {
                self.lower_floor(w.tail);
            }
        }
    }

    /// A response for `p` came that the requester already had (an ACK before
    /// `una`, a READ response already placed). If it answers the watched
    /// probe (`p` at or after the probed PSN), the responder had the original
    /// too: the probe was spurious (the peer or its ACK was only late, as on
    /// a host that deschedules a process for longer than the probe timeout).
    /// The QP's floor doubles (within [`MAX_FLOOR_FACTOR`] times the
    /// configured one). Not judged when a go-back resent packets since the
    /// probe (their duplicate answers look the same). Returns whether it was.
    pub fn on_duplicate(&mut self, p: u32, now: Time) -> bool {
        let Some(w) = self.watch else { return false };
        if w.until <= now {
            self.expire_watch(now);
            return false;
        }
        if w.resent || psn::diff(p, w.psn) < 0 || w.end.is_some_and(|e| psn::diff(p, e) >= 0) {
            return false;
        }
        self.watch = None;
        if !self.adaptive {
            // Counted, not acted on.
            return true;
        }
        if w.tail {
            // A tail's spurious probe cost a packet or a few: the tail floor
            // doubles, up to the QP's floor; the bulk floor stays.
            let min = tail_min_ns(self.min_pto_ns);
            self.tail_floor_ns = self
                .tail_floor_ns
                .saturating_mul(2)
                .min(self.floor_ns)
                .max(min);
            return true;
        }
        let max = self.min_pto_ns.saturating_mul(MAX_FLOOR_FACTOR);
        self.floor_ns = self
            .floor_ns
            .saturating_mul(2)
            .min(max)
            .max(self.min_pto_ns);
        true
    }

    /// An ACK-kind AETH at `p` with `msn` and `credit_code` came; returns
    /// whether it only updates the credits: the same PSN and MSN as the last
    /// one received (no progress) with another credit count. That is the
    /// responder's unsolicited credit ACK (RL-13; seed 004 §2.6.2: the last
    /// ACK again, sent only to deliver credits), not its duplicate answer to a
    /// probe (RL-04/05), which repeats PSN, MSN and count alike, so it must
    /// not be judged by [`Recovery::on_duplicate`]. A probe answered just
    /// after the count changed looks like one too and goes unjudged: the
    /// floor is only ever raised on a sure duplicate.
    pub fn credit_only(&mut self, p: u32, msn: u32, credit_code: u8) -> bool {
        let last = self.last_ack.replace((p, msn, credit_code));
        last.is_some_and(|(lp, lm, lc)| lp == p && lm == msn && lc != credit_code)
    }

    /// Nothing left unacknowledged.
    pub fn idle(&mut self) {
        self.copy_psn = None;
        self.pending_copy = None;
        self.probe_at = None;
        self.probe_due = false;
        self.end_probe();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_nak_at_or_before_the_newest_taken_is_a_repeat() {
        let mut r = Recovery::default();
        assert!(!r.repeated_nak(100, 100), "the first NAK is taken");
        assert!(r.repeated_nak(100, 100), "its copy is not");
        assert!(!r.repeated_nak(103, 101), "a later PSN is a new NAK");
        assert!(
            r.repeated_nak(101, 101),
            "an older one came late (reordered)"
        );
        let mut r = Recovery::default();
        let top = psn::PSN_MASK;
        assert!(!r.repeated_nak(top - 1, top - 1));
        assert!(!r.repeated_nak(2, 0), "later across the PSN wrap");
        assert!(r.repeated_nak(top, 0), "before it across the wrap");
        // Half the PSN space later the old NAK is forgotten (`una` passed
        // it), so a new NAK there is not taken for an older one.
        let far = psn::add(2, 1 << 23);
        assert!(!r.repeated_nak(far, far), "a NAK half the PSN space on");
    }

    #[test]
    fn slow_start_then_additive_increase_and_one_decrease_per_episode() {
        let mut r = Recovery::default();
        let t = Time(0);
        r.on_progress(10, 16, 0, t, None);
        assert_eq!(r.window(), 32, "slow start adds what was acknowledged");
        r.on_loss(100);
        assert_eq!(r.window(), 22, "x 0.7");
        r.on_loss(120);
        assert_eq!(r.window(), 22, "same episode: no second decrease");
        r.on_progress(99, 21, 0, t, None);
        assert_eq!(r.window(), 22, "episode over; additive increase...");
        r.on_progress(100, 1, 0, t, None);
        assert_eq!(r.window(), 23, "...one per window acknowledged");
        r.on_timeout(200);
        assert_eq!(r.window(), MIN_WINDOW);
        r.cap = 1;
        assert_eq!(r.window(), 1, "never above the engine's window");
        r.cap = 4;
        r.on_progress(300, 100, 0, t, None);
        assert_eq!(r.window(), 4, "grows no further than it");
    }

    #[test]
    fn probe_timeout_follows_rtt_backs_off_and_stays_under_the_ack_timeout() {
        let mut r = Recovery::default();
        r.on_send(5, true, true, r.unacked, Time(1_000), None);
        r.on_progress(5, 1, 1, Time(101_000), None);
        // One sample: RTTVAR is half of it, so SRTT + 4 x RTTVAR = 3 x RTT.
        assert_eq!(r.pto_ns(None), 300_000, "3 x 100 us");
        r.on_read_probe(5, 6, Time(0), None);
        // After an RNR wait: one packet until a response.
        r.start_probe();
        assert!(r.probing && r.force_ack_req);
        assert_eq!(r.window(), 1, "one packet while a probe is out");
        assert!(r.may_send(40), "the probe goes whatever is in flight");
        r.on_send(9, true, false, r.unacked, Time(0), None);
        assert!(!r.may_send(0), "and nothing after it");
        assert_eq!(r.pto_ns(None), 600_000, "doubled");
        assert_eq!(r.pto_ns(Some(500_000)), 250_000, "half the ACK timeout");
        r.on_progress(9, 1, 0, Time(0), None);
        assert!(!r.probing && r.probe_at.is_none());
    }

    #[test]
    fn a_tail_probe_goes_first_and_go_back_n_only_if_it_did_not_cover_the_tail() {
        let mut r = Recovery::default();
        let w = r.window();
        assert!(!r.tail_probe_or_go_back(10), "no probe yet: probe");
        r.on_tail_probe(10, 20, Time(0), None);
        assert_eq!(r.pending_probe, Some(10));
        // The answer acknowledges everything sent before the probe: no loss.
        r.on_progress(19, 10, 0, Time(50_000), None);
        assert!(!r.tail_probe_or_go_back(20));
        assert!(r.window() >= w, "no cut");
        // Another tail: the answer covers part of it only; a probe timeout
        // later the rest was lost.
        r.on_tail_probe(20, 30, Time(100_000), None);
        r.on_progress(24, 5, 5, Time(150_000), None);
        assert!(r.tail_probe_or_go_back(25), "still short of 30: go back");
        let before = r.window();
        r.on_tail_lost(30, Time(300_000), None);
        assert_eq!(r.window(), (before * 7 / 10).max(MIN_WINDOW));
        assert!(!r.tail_probe_or_go_back(25), "once");
    }

    #[test]
    fn a_resent_psn_is_never_timed() {
        let mut r = Recovery::default();
        r.on_send(5, true, true, r.unacked, Time(0), None);
        r.on_rewind(5, 6, Time(0));
        r.on_progress(5, 1, 0, Time(5_000_000), None);
        assert_eq!(r.pto_ns(None), INITIAL_PTO_NS, "no sample taken");
    }
    /// A recovery whose round trip is measured at 10 us (far below the
    /// floor, which then sets the probe timeout).
    fn measured(floor_ns: u64) -> Recovery {
        let mut r = Recovery {
            min_pto_ns: floor_ns,
            floor_ns,
            ..Recovery::default()
        };
        r.on_send(1, true, true, r.unacked, Time(0), None);
        r.on_progress(1, 1, 0, Time(10_000), None);
        r
    }

    #[test]
    fn a_tail_probes_at_its_own_floor_and_its_verdicts_move_only_that() {
        let mut r = measured(800_000);
        let tail = 800_000 / TAIL_FLOOR_DIV;
        r.unacked = 5;
        assert_eq!(r.pto_ns(None), 800_000, "five packets: the QP's floor");
        r.unacked = TAIL_PKTS;
        assert_eq!(r.pto_ns(None), tail, "a tail: the tail floor");
        // A spurious tail probe doubles the tail floor, not the QP's.
        r.on_tail_probe(10, 14, Time(1_000_000), None);
        r.on_progress(13, 4, 0, Time(1_050_000), None);
        assert!(r.on_duplicate(13, Time(1_060_000)), "spurious");
        assert_eq!((r.tail_floor_ns(), r.floor_ns()), (2 * tail, 800_000));
        r.unacked = 1;
        assert_eq!(r.pto_ns(None), 2 * tail);
        // Never above the QP's floor.
        for k in 0..10u64 {
            let t = Time(2_000_000 + k * 100_000_000);
            r.unacked = 2;
            r.on_tail_probe(20, 22, t, None);
            r.on_duplicate(21, t.plus_ns(1_000));
        }
        assert_eq!((r.tail_floor_ns(), r.floor_ns()), (800_000, 800_000));
        // A useful tail probe (its watch runs out) lowers it by an eighth.
        r.on_tail_probe(30, 32, Time(3_000_000_000), None);
        r.on_progress(31, 2, 0, Time(30_000_000_000), None);
        assert_eq!(r.tail_floor_ns(), 700_000);
        assert_eq!(r.floor_ns(), 800_000);
    }

    #[test]
    fn a_spurious_probe_doubles_the_floor_within_its_bound() {
        let mut r = measured(100_000);
        assert_eq!(r.pto_ns(None), 100_000, "the floor sets the PTO");
        // A tail probe of PSN 10 (20 was the point of maximum advance); the
        // original's ACK comes, then the probe's duplicate answer.
        r.on_tail_probe(10, 20, Time(1_000_000), None);
        r.on_progress(19, 10, 0, Time(1_050_000), None);
        assert!(r.on_duplicate(19, Time(1_060_000)), "spurious");
        assert_eq!(r.floor_ns(), 200_000);
        assert_eq!(r.pto_ns(None), 200_000, "the PTO follows the floor");
        assert!(!r.on_duplicate(19, Time(1_070_000)), "judged once");
        for k in 0..20u64 {
            let t = Time(2_000_000 + k * 100_000_000);
            r.on_tail_probe(20, 30, t, None);
            r.on_duplicate(25, t.plus_ns(1_000));
        }
        assert_eq!(r.floor_ns(), 100_000 * MAX_FLOOR_FACTOR, "bounded");
        assert_eq!(r.pto_ns(Some(1_000_000)), 500_000, "half the ACK timeout");
    }

    #[test]
    fn a_useful_probe_does_not_raise_the_floor_and_lowers_a_raised_one() {
        let mut r = measured(100_000);
        // The probe's answer is the only one: no duplicate while watched.
        r.on_tail_probe(10, 20, Time(1_000_000), None);
        r.on_progress(19, 10, 0, Time(1_050_000), None);
        assert!(!r.on_duplicate(5, Time(1_060_000)), "before the probed PSN");
        r.on_progress(29, 10, 0, Time(10_000_000), None);
        assert_eq!(
            r.floor_ns(),
            100_000,
            "not raised, never below the configured"
        );
        // Raised by a spurious one, then lowered by an eighth per useful one.
        r.on_tail_probe(30, 40, Time(20_000_000), None);
        assert!(r.on_duplicate(35, Time(20_100_000)));
        assert_eq!(r.floor_ns(), 200_000);
        r.on_tail_probe(40, 50, Time(30_000_000), None);
        r.on_progress(49, 10, 0, Time(40_000_000), None);
        assert_eq!(r.floor_ns(), 175_000);
    }

    #[test]
    fn a_probe_followed_by_a_go_back_is_not_judged_and_fixed_floors_stay() {
        let mut r = measured(100_000);
        r.on_tail_probe(10, 20, Time(1_000_000), None);
        r.on_tail_lost(20, Time(1_300_000), None);
        r.on_rewind(10, 20, Time(1_300_000));
        // The go-back's resends are answered as duplicates too.
        assert!(!r.on_duplicate(19, Time(1_400_000)));
        r.on_progress(19, 10, 0, Time(50_000_000), None);
        assert_eq!(r.floor_ns(), 100_000);
        let mut f = measured(100_000);
        f.adaptive = false;
        f.on_tail_probe(10, 20, Time(1_000_000), None);
        assert!(f.on_duplicate(19, Time(1_010_000)), "counted");
        assert_eq!(f.floor_ns(), 100_000, "not acted on");
    }

    #[test]
    fn an_ack_that_changes_only_the_credit_count_is_a_credit_update() {
        let mut r = Recovery::default();
        assert!(!r.credit_only(19, 7, 0), "nothing to compare with");
        assert!(
            !r.credit_only(19, 7, 0),
            "repeated whole: a duplicate answer"
        );
        assert!(r.credit_only(19, 7, 1), "same PSN and MSN, new count");
        assert!(!r.credit_only(19, 8, 2), "the MSN moved");
        assert!(!r.credit_only(20, 8, 3), "the PSN moved");
    }

    #[test]
    fn a_read_stream_that_starts_again_after_a_go_back_is_seen() {
        let mut r = measured(100_000);
        // A gap at 10 seen from 14: the go-back re-requests from 10.
        r.on_rewind(10, 40, Time(1_000_000));
        assert!(!r.read_restarted(14, Time(1_000_000)), "the first seen");
        assert!(!r.read_restarted(16, Time(1_010_000)), "the old stream");
        assert!(!r.read_restarted(15, Time(1_020_000)), "reordered: new");
        assert!(
            !r.read_restarted(15, Time(1_020_000)),
            "the fabric's duplicate, next to its original"
        );
        assert!(!r.read_restarted(17, Time(1_020_000)));
        assert!(
            r.read_restarted(14, Time(1_030_000)),
            "the re-request's stream, its first response (10) lost"
        );
        r.on_rewind(10, 40, Time(1_040_000));
        assert!(!r.read_restarted(11, Time(1_050_000)), "forgotten");
        assert!(
            !r.read_restarted(11, Time(1_050_001)),
            "adjacent repeat: a duplicate"
        );
        // The old stream had passed 16 when the go-back started: a
        // response before it (its first, 10, lost again) is the new stream.
        r.on_rewind(10, 40, Time(1_500_000));
        r.on_read_gap(16, Time(1_500_000));
        assert!(
            !r.read_restarted(11, Time(1_500_001)),
            "too soon: reordered"
        );
        assert!(r.read_restarted(12, Time(1_520_000)), "behind the gap's");
        assert!(!r.read_restarted(17, Time(1_520_001)), "the old stream");
        r.on_rewind(10, 40, Time(2_000_000));
        r.read_restarted(12, Time(2_000_000));
        r.read_restarted(13, Time(2_000_001));
        assert!(
            !r.read_restarted(12, Time(2_000_002)),
            "within half the least round trip of the go-back"
        );
        assert!(!r.read_restarted(9, Time(3_000_000)), "before the go-back");
        assert!(
            !r.read_restarted(10 + SEEN_PSNS as u32, Time(3_000_000)),
            "past what is tracked"
        );
    }

    #[test]
    fn the_window_lets_a_read_go_while_one_read_is_outstanding() {
        let mut r = Recovery::default();
        r.on_timeout(0);
        assert_eq!(r.window(), MIN_WINDOW);
        r.on_read_sent(16);
        assert_eq!(r.window(), 17, "one 16-response READ and a packet more");
        assert!(r.may_send(16) && !r.may_send(17));
        r.cap = 12;
        assert_eq!(r.window(), 12, "never above the engine's window");
        r.cap = 256;
        r.on_read_sent(1);
        assert_eq!(r.window(), MIN_WINDOW, "the last READ's size counts");
        r.on_read_sent(16);
        r.on_read_sent(0);
        assert_eq!(
            r.window(),
            MIN_WINDOW,
            "another message after it: AIMD alone"
        );
        r.start_probe();
        assert_eq!(r.window(), 1, "a probe still goes alone");
    }

    #[test]
    fn a_read_probe_is_judged_by_its_own_reads_duplicates_only() {
        let mut r = measured(100_000);
        // The READ at PSNs 10..26 is asked again from 12; its go-back asks
        // again for the READ after it (26..42) as well.
        r.on_read_probe(12, 26, Time(1_000_000), None);
        assert!(
            !r.on_duplicate(30, Time(1_010_000)),
            "a later READ's replay"
        );
        assert!(
            !r.on_duplicate(11, Time(1_010_000)),
            "before the probed PSN"
        );
        assert_eq!(r.floor_ns(), 100_000);
        assert!(
            r.on_duplicate(13, Time(1_020_000)),
            "the probed READ's: spurious"
        );
        assert_eq!(r.floor_ns(), 200_000);
    }

    #[test]
    fn the_old_streams_end_brings_the_probe_of_an_unanswered_re_request_forward() {
        let mut r = measured(1_000_000);
        // RTT 10 us: SRTT 10, RTTVAR 5; the PTO's base is 30 us, the floor 1 ms.
        r.on_send(20, true, true, r.unacked, Time(5_000_000), None);
        r.on_rewind(10, 40, Time(5_000_000));
        assert_eq!(r.probe_at, Some(Time(6_000_000)), "the floor");
        r.on_old_stream_end(Time(5_005_000));
        assert_eq!(r.probe_at, Some(Time(5_030_000)), "30 us after the go-back");
        r.on_old_stream_end(Time(5_100_000));
        assert_eq!(r.probe_at, Some(Time(5_030_000)), "never later than it was");
        let mut late = measured(1_000_000);
        late.on_send(20, true, true, late.unacked, Time(5_000_000), None);
        late.on_rewind(10, 40, Time(5_000_000));
        late.on_old_stream_end(Time(5_200_000));
        assert_eq!(
            late.probe_at,
            Some(Time(5_210_000)),
            "the least round trip from now at the earliest"
        );
        let mut off = measured(1_000_000);
        off.probes = false;
        off.on_rewind(10, 40, Time(5_000_000));
        off.on_old_stream_end(Time(5_005_000));
        assert_eq!(off.probe_at, None, "probes off");
    }

    #[test]
    fn a_probe_that_finds_a_loss_lowers_a_raised_floor() {
        let mut r = measured(100_000);
        r.on_tail_probe(10, 20, Time(1_000_000), None);
        assert!(r.on_duplicate(15, Time(1_010_000)));
        assert_eq!(r.floor_ns(), 200_000, "raised by a spurious probe");
        // The next probe's answer leaves the tail unacknowledged: go back.
        r.on_tail_probe(20, 30, Time(2_000_000), None);
        r.on_tail_lost(30, Time(2_400_000), None);
        assert_eq!(r.floor_ns(), 175_000, "an eighth down");
        for k in 0..20u64 {
            let t = Time(3_000_000 + k * 1_000_000);
            r.on_tail_probe(30, 40, t, None);
            r.on_tail_lost(40, t.plus_ns(500_000), None);
        }
        assert_eq!(r.floor_ns(), 100_000, "never below the configured one");
    }

    #[test]
    fn a_probes_partial_answer_makes_the_go_back_due_unless_one_started() {
        let mut r = measured(1_000_000);
        r.on_tail_probe(10, 20, Time(2_000_000), None);
        r.on_progress(12, 3, 8, Time(2_001_000), None);
        assert!(!r.probe_due, "sooner than half the least round trip");
        r.on_progress(14, 2, 6, Time(2_020_000), None);
        assert!(r.probe_due, "the answer leaves 15..20: go back now");
        assert!(r.tail_probe_or_go_back(15));
        // A sequence NAK's go-back came first: nothing more is due.
        r.end_probe();
        assert!(!r.probe_due && !r.tail_probe_or_go_back(15));
    }

    #[test]
    fn a_go_back_absorbs_the_sequence_naks_of_one_round_trip_within_its_range() {
        let mut r = measured(100_000);
        // The least round trip 10 us: NAKs within 5 us of the go-back.
        assert!(
            !Recovery::default().absorbs_nak(10, Time(0)),
            "no round trip known"
        );
        r.on_rewind(10, 30, Time(1_000_000));
        assert!(r.absorbs_nak(10, Time(1_001_000)));
        assert!(
            r.absorbs_nak(11, Time(1_004_000)),
            "the reordered packet's second NAK"
        );
        assert!(!r.absorbs_nak(9, Time(1_001_000)), "before the go-back");
        assert!(!r.absorbs_nak(30, Time(1_001_000)), "never sent before it");
        assert!(
            !r.absorbs_nak(12, Time(1_005_000)),
            "later: a resend may be lost"
        );
        r.bounded_go_back = false;
        assert!(!r.absorbs_nak(11, Time(1_005_000)), "off");
    }
}
