//! The link flow-control stage (IBA 7.9; issue 27 item 4; ARCHITECTURE.md
//! §6): credit-based, per-VL flow control between the two ends of a cable,
//! so that a port never sends a data packet its partner has no buffer for.
//! The protocol is `transport::flow` (sans-IO); this stage joins it to a
//! [`Link`]:
//!
//! - Send: a data packet goes out while its VL has credit; else it waits in
//!   a bounded queue of the stage's own (counted as a stall) and goes when an
//!   FC packet from the partner grants credit. [`Link::tx_room`] is false
//!   while the queue has no room for one more of the longest packets, and
//!   the port's data path then leaves the packets in the engine's bounded
//!   windows. VL15 passes at once, outside flow control (7.9.1).
//! - Receive: FC packets are taken here; a data packet's blocks are charged
//!   to the VL's receive buffer until freed: on an HCA port as soon as the
//!   engine took it, on a switch port when it has left by its egress port
//!   ([`FlowLink::free`], given back as the egress stage's
//!   [`FlowLink::take_released`]), so a blocked egress backs up to the
//!   ingress, which stops granting credit to its sender.
//! - Head-of-queue lifetime (IBA 18.2.5.4, PortInfo:HOQLife): on a switch
//!   port a packet that has waited at the head of its VL's queue longer
//!   than the port's lifetime is discarded (counted, its charge released),
//!   so a partner that stops granting credit (a dead switch whose link is
//!   not yet down: that takes the silence timeout here, microseconds on a
//!   real cable) cannot hold the ingress buffers, and with them every
//!   sender behind them, for longer than that ([`FlowLink::set_hoq_life`]).
//! - The buffer granted is the UDP socket's receive buffer as the kernel
//!   granted it ([`grant`]), so the kernel never drops a datagram of a
//!   partner that keeps to its credit.
//!
//! On the wire an FC packet is a 6-byte datagram (IBA 7.9.4), shorter than
//! any data packet (`MIN_PACKET_LEN`): the length stands for the start
//! delimiters that tell link packets from data packets on a real link. Like
//! a keepalive it is not authenticated by the fabric key (the fabric key
//! stage passes it); it is taken only from the cable's other end, and a
//! forged one can only cost credit, never inject data.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::os::fd::RawFd;
use std::time::Duration;

use transport::flow::{
    blocks, FlowConfig, FlowControl, FlowCounters, DATA_VLS, FC_PACKET_LEN, VL15,
};
use transport::verbs::Time;
use transport::wire::vl_of;

use super::{Link, LinkError, Received, MAX_PACKET_LEN};

/// Receive buffer kept back from the grant: room for what is not flow
/// controlled (FC packets, keepalives, VL15 SMPs) in the socket.
pub const RESERVE: usize = 64 << 10;

/// Socket buffer bytes charged per credit block at worst: Linux charges a
/// datagram its buffer's truesize, the data rounded up to the allocation
/// plus about 1 KiB of bookkeeping, which for the shortest packet (one
/// block) is about 1.1 KiB. Granting one block per this many bytes keeps any
/// mix of packets within the buffer.
pub const SOCKET_BYTES_PER_BLOCK: usize = 1152;

/// Blocks of the longest packet: the queue keeps room for one more.
pub const MAX_PACKET_BLOCKS: u32 = MAX_PACKET_LEN.div_ceil(64) as u32;

/// Blocks an HCA port queues at most while waiting for credit (about 16
/// packets of 4 KiB): beyond, the port stops taking packets from the engine.
pub const HCA_QUEUE_BLOCKS: u32 = 1024;

/// The grant of a port whose socket's receive buffer is `rcvbuf` bytes (as
/// the kernel granted it), over `vls` data VLs.
pub fn grant(rcvbuf: usize, vls: u8) -> FlowConfig {
    let total = rcvbuf.saturating_sub(RESERVE) / SOCKET_BYTES_PER_BLOCK;
    FlowConfig::split(u32::try_from(total).unwrap_or(u32::MAX), vls)
}

/// A received packet's claim on its ingress port's buffer, carried with it
/// to its egress port (a switch): `len` bytes on `vl` of port `port`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub port: u8,
    pub vl: u8,
    pub len: u16,
}

/// What the stage itself counts (the protocol's counters are
/// [`FlowCounters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowLinkCounters {
    /// Data packets dropped: the wait queue was full (a producer that did
    /// not look at [`Link::tx_room`]).
    pub drop_tx_queue_full: u64,
    /// Data packets dropped: on a VL not operational on this link.
    pub drop_tx_vl: u64,
    /// The most blocks the wait queue held.
    pub queue_max_blocks: u64,
    /// Data packets discarded at the head of the wait queue after the
    /// port's head-of-queue lifetime (IBA 18.2.5.4).
    pub drop_tx_hoq: u64,
    /// Data packets dropped from the wait queue when the link went down:
    /// their partner is gone, and held they would keep their ingress
    /// ports' buffers charged (a switch) until it came back.
    pub drop_tx_link_down: u64,
}

struct Waiting {
    bytes: Vec<u8>,
    charge: Option<Charge>,
    /// When it joined the queue (for the head-of-queue lifetime).
    since: Duration,
}

/// The flow-control stage on a link (module comment). Off
/// ([`FlowLink::off`]): everything passes as through the bare link.
pub struct FlowLink<L> {
    inner: L,
    fc: Option<FlowControl>,
    queues: Vec<VecDeque<Waiting>>,
    queued_blocks: u32,
    limit_blocks: u32,
    /// An HCA port: a received packet is freed as soon as it was delivered.
    auto_free: bool,
    released: Vec<Charge>,
    spare: Vec<Vec<u8>>,
    was_up: bool,
    /// The latest `now` a call brought ([`Link::end_sends`] has none).
    last_now: Duration,
    /// Head-of-queue lifetime: `None` waits for credit as long as the link
    /// is up (an HCA port, whose queue the engine's windows bound).
    hoq_life: Option<Duration>,
    counters: FlowLinkCounters,
}

impl<L: Link> FlowLink<L> {
    /// Flow control on `inner` granting `config`, queueing at most
    /// `limit_blocks` while waiting for credit; `auto_free` for an HCA port.
    pub fn new(inner: L, config: FlowConfig, limit_blocks: u32, auto_free: bool) -> FlowLink<L> {
        let was_up = inner.is_up();
        FlowLink {
            inner,
            fc: Some(FlowControl::new(config)),
            queues: (0..DATA_VLS).map(|_| VecDeque::new()).collect(),
            queued_blocks: 0,
            limit_blocks: limit_blocks.max(MAX_PACKET_BLOCKS),
            auto_free,
            released: Vec::new(),
            spare: Vec::new(),
            was_up,
            last_now: Duration::ZERO,
            hoq_life: None,
            counters: FlowLinkCounters::default(),
        }
    }

    /// A packet waiting at the head of its queue longer than `life` is
    /// discarded (IBA 18.2.5.4); `None`: never.
    pub fn set_hoq_life(&mut self, life: Option<Duration>) {
        self.hoq_life = life;
    }

    /// No flow control: a pass-through (`flow_control = false`).
    pub fn off(inner: L) -> FlowLink<L> {
        let mut l = FlowLink::new(inner, FlowConfig::split(0, 1), 0, true);
        l.fc = None;
        l
    }

    /// The protocol's counters, when flow control is on.
    pub fn flow_counters(&self) -> Option<&FlowCounters> {
        self.fc.as_ref().map(FlowControl::counters)
    }

    pub fn counters(&self) -> &FlowLinkCounters {
        &self.counters
    }

    /// The blocks waiting for credit and the most that may wait (0 with
    /// flow control off: nothing ever waits): a switch's congestion marking
    /// reads its egress queue here (IBA A10.2.1).
    pub fn queue_depth(&self) -> (u32, u32) {
        match self.fc {
            Some(_) => (self.queued_blocks, self.limit_blocks),
            None => (0, 0),
        }
    }

    pub fn inner(&self) -> &L {
        &self.inner
    }

    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// Sends `packet` as [`Link::send`] does; `charge`, if any, comes back
    /// from [`FlowLink::take_released`] once the packet has left (or was
    /// dropped): then its ingress port may free its blocks.
    pub fn send_charged(
        &mut self,
        now: Duration,
        packet: &[u8],
        charge: Option<Charge>,
    ) -> Result<(), LinkError> {
        self.last_now = self.last_now.max(now);
        let Some(fc) = self.fc.as_mut() else {
            self.released.extend(charge);
            return self.inner.send(now, packet);
        };
        let vl = vl_of(packet);
        if vl == VL15 {
            self.released.extend(charge);
            return self.inner.send(now, packet);
        }
        if !fc.is_operational(vl) {
            self.counters.drop_tx_vl += 1;
            self.released.extend(charge);
            return Ok(());
        }
        if self.queues[usize::from(vl)].is_empty() && fc.may_send(vl, packet.len()) {
            fc.sent(vl, packet.len(), time(now));
            self.released.extend(charge);
            return self.inner.send(now, packet);
        }
        self.wait(vl, packet, charge, now);
        Ok(())
    }

    /// Queues a packet that has no credit yet (bounded; counted).
    fn wait(&mut self, vl: u8, packet: &[u8], charge: Option<Charge>, now: Duration) {
        let n = u32::from(blocks(packet.len()));
        let Some(fc) = self.fc.as_mut() else {
            return;
        };
        if self.queued_blocks + n > self.limit_blocks {
            self.counters.drop_tx_queue_full += 1;
            self.released.extend(charge);
            return;
        }
        fc.record_stall(vl);
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(packet);
        self.queues[usize::from(vl)].push_back(Waiting {
            bytes,
            charge,
            since: now,
        });
        self.queued_blocks += n;
        self.counters.queue_max_blocks = self
            .counters
            .queue_max_blocks
            .max(u64::from(self.queued_blocks));
    }

    /// Charges that were released since the last call (their packets left
    /// or were dropped), for their ingress ports to [`FlowLink::free`].
    pub fn take_released(&mut self, out: &mut Vec<Charge>) {
        out.append(&mut self.released);
    }

    /// A packet of `len` bytes received on `vl` by this port left the
    /// switch: its blocks are free to grant again.
    pub fn free(&mut self, vl: u8, len: usize) {
        if let Some(fc) = self.fc.as_mut() {
            fc.freed(vl, len);
        }
    }

    /// Sends the waiting packets that have credit now, in order per VL.
    fn pump(&mut self, now: Duration) -> Result<(), LinkError> {
        let Some(fc) = self.fc.as_mut() else {
            return Ok(());
        };
        let mut r = Ok(());
        let life = self.hoq_life;
        for (vl, q) in self.queues.iter_mut().enumerate() {
            while let Some(w) = q.front() {
                if life.is_some_and(|l| now.saturating_sub(w.since) > l) {
                    // IBA 18.2.5.4: too long at the head of the queue.
                    let w = q.pop_front().expect("front");
                    self.queued_blocks -= u32::from(blocks(w.bytes.len()));
                    self.counters.drop_tx_hoq += 1;
                    self.released.extend(w.charge);
                    if self.spare.len() < 64 {
                        self.spare.push(w.bytes);
                    }
                    continue;
                }
                if !fc.may_send(vl as u8, w.bytes.len()) {
                    break;
                }
                let w = q.pop_front().expect("front");
                fc.sent(vl as u8, w.bytes.len(), time(now));
                self.queued_blocks -= u32::from(blocks(w.bytes.len()));
                self.released.extend(w.charge);
                if let Err(e) = self.inner.send(now, &w.bytes) {
                    r = Err(e);
                }
                if self.spare.len() < 64 {
                    self.spare.push(w.bytes);
                }
            }
        }
        r
    }

    /// The link came up: the protocol starts over (IBA 7.9.2); then the FC
    /// packets due go out.
    fn emit(&mut self, now: Duration) -> Result<(), LinkError> {
        let Some(fc) = self.fc.as_mut() else {
            return Ok(());
        };
        let up = self.inner.is_up();
        if up && !self.was_up {
            fc.link_up();
        }
        if !up && self.was_up {
            for q in self.queues.iter_mut() {
                for w in q.drain(..) {
                    self.counters.drop_tx_link_down += 1;
                    self.released.extend(w.charge);
                }
            }
            self.queued_blocks = 0;
        }
        self.was_up = up;
        let mut r = Ok(());
        while let Some(p) = fc.poll_transmit(time(now)) {
            if let Err(e) = self.inner.send_link_packet(now, &p.encode()) {
                r = Err(e);
            }
        }
        r
    }

    fn report_line(&self) -> Option<String> {
        let fc = self.fc.as_ref()?;
        let c = fc.counters();
        let l = &self.counters;
        let mut s = format!(
            "flow: fc_tx {} fc_rx {} fc_dropped {}: bad_lpcrc {} bad_op {} bad_length {} bad_vl {} \
             stalled {}",
            c.fc_sent,
            c.fc_received,
            c.fc_dropped(),
            c.fc_bad_lpcrc,
            c.fc_bad_op,
            c.fc_bad_length,
            c.fc_bad_vl,
            c.stalls(),
        );
        for vl in (0..DATA_VLS as u8).filter(|&v| fc.is_operational(v)) {
            let _ = write!(
                s,
                " stalled_vl{vl} {} credit_vl{vl} {} grant_vl{vl} {}",
                c.stalled[usize::from(vl)],
                fc.credit(vl),
                fc.config().capacity[usize::from(vl)]
            );
        }
        let _ = write!(
            s,
            " queued_blocks {} queue_max_blocks {} drop_tx_queue_full {} drop_tx_vl {} \
             drop_tx_link_down {} drop_tx_hoq {} rx_overrun {} rx_bad_vl {}",
            self.queued_blocks,
            l.queue_max_blocks,
            l.drop_tx_queue_full,
            l.drop_tx_vl,
            l.drop_tx_link_down,
            l.drop_tx_hoq,
            c.rx_overrun,
            c.rx_bad_vl
        );
        Some(s)
    }
}

fn time(now: Duration) -> Time {
    Time(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX))
}

impl<L: Link> Link for FlowLink<L> {
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.send_charged(now, packet, None)
    }

    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        self.last_now = self.last_now.max(now);
        let Self {
            inner,
            fc,
            auto_free,
            ..
        } = self;
        let Some(fc) = fc.as_mut() else {
            return inner.recv_batch(now, max, deliver);
        };
        let t = time(now);
        let n = inner.recv_batch(now, max, &mut |r| {
            if r.len() == FC_PACKET_LEN {
                // Counted by reason when it does not decode.
                let _ = fc.handle_fc(r.packet);
                return;
            }
            // The LRH and the length only: a lent packet's head has them.
            let vl = vl_of(r.packet);
            fc.received(vl, r.len(), t);
            deliver(r);
            if *auto_free {
                fc.freed(vl, r.len());
            }
        })?;
        self.pump(now)?;
        self.emit(now)?;
        Ok(n)
    }

    fn raw_fd(&self) -> RawFd {
        self.inner.raw_fd()
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let mine = self
            .fc
            .as_ref()
            .and_then(FlowControl::poll_timeout)
            .map(|t| Duration::from_nanos(t.0));
        // The head of a queue to discard when its lifetime runs out.
        let hoq = self.hoq_life.and_then(|l| {
            self.queues
                .iter()
                .filter_map(|q| q.front())
                .map(|w| w.since + l + Duration::from_micros(1))
                .min()
        });
        [self.inner.poll_timeout(), mine, hoq]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        self.last_now = self.last_now.max(now);
        self.inner.handle_timeout(now)?;
        self.pump(now)?;
        self.emit(now)
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        self.inner.flush()
    }

    fn report(&self) -> Option<String> {
        match (self.inner.report(), self.report_line()) {
            (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
            (a, b) => a.or(b),
        }
    }

    fn auth_counters(&self) -> Option<super::AuthCounters> {
        self.inner.auth_counters()
    }

    fn clear(&mut self) {
        // The waiting packets were the old engine's.
        for q in self.queues.iter_mut() {
            for w in q.drain(..) {
                self.released.extend(w.charge);
            }
        }
        self.queued_blocks = 0;
        self.inner.clear()
    }

    fn begin_sends(&mut self) {
        self.inner.begin_sends()
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        let now = self.last_now;
        let a = self.pump(now);
        let b = self.emit(now);
        let c = self.inner.end_sends();
        a.and(b).and(c)
    }

    fn send_buffer(&mut self) -> Option<&mut [u8]> {
        self.inner.send_buffer()
    }

    fn send_from_buffer(&mut self, now: Duration, len: usize) -> Result<(), LinkError> {
        self.last_now = self.last_now.max(now);
        let Some(fc) = self.fc.as_mut() else {
            return self.inner.send_from_buffer(now, len);
        };
        // The inner link lends the same buffer again, the packet in it
        // (`Link::send_buffer`).
        let Some(b) = self.inner.send_buffer() else {
            return self.inner.send_from_buffer(now, len);
        };
        let Some(packet) = b.get(..len) else {
            return self.inner.send_from_buffer(now, len);
        };
        let vl = vl_of(packet);
        let go = vl == VL15
            || (fc.is_operational(vl)
                && self.queues[usize::from(vl)].is_empty()
                && fc.may_send(vl, len));
        if go {
            if vl != VL15 {
                fc.sent(vl, len, time(now));
            }
            return self.inner.send_from_buffer(now, len);
        }
        if !fc.is_operational(vl) {
            self.counters.drop_tx_vl += 1;
            return Ok(());
        }
        let copy = packet.to_vec();
        self.wait(vl, &copy, None, now);
        Ok(())
    }

    fn send_link_packet(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.inner.send_link_packet(now, packet)
    }

    fn take_crcs(&mut self) -> bool {
        // Credits count blocks, whatever the CRCs hold.
        self.inner.take_crcs()
    }

    fn tx_room(&mut self, now: Duration) -> bool {
        self.inner.tx_room(now)
            && (self.fc.is_none() || self.queued_blocks + MAX_PACKET_BLOCKS <= self.limit_blocks)
    }

    fn is_up(&self) -> bool {
        self.inner.is_up()
    }

    fn set_sleeping(&mut self, sleeping: bool) {
        self.inner.set_sleeping(sleeping)
    }

    fn set_disabled(&mut self, disabled: bool) {
        self.inner.set_disabled(disabled);
        // Down now: what waits for credit goes (see `emit`).
        let _ = self.emit(self.last_now);
    }

    fn single_peer(&self) -> bool {
        self.inner.single_peer()
    }
}
