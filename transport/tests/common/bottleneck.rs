//! A switch for congestion-control simulations (issue 31): every node of a
//! [`Net`] hangs off one output-queued switch; each switch output port is a
//! [`QueueModel`] (a link of rate R with a FIFO that marks packets above a
//! threshold and drops at a cap). The engines run as they do in the device:
//! each node's NIC takes the engine's next packet when its own link (rate R)
//! is free, so a node sends at line rate unless its engine paces it.
//! Simulated time; deterministic (seeded RNG for RED).
//!
//! Reused across link layers: the [`Marker`] says how a packet is marked —
//! [`mark_ce`] sets IP ECN = CE on an ECN-capable RoCEv2 frame (DCQCN); an
//! InfiniBand switch's FECN marking is another marker over the same queue.
//! Routing is by destination MAC on RoCE and by DLID on InfiniBand
//! ([`route`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::{Net, Rng};
use transport::engine::LinkLayer;
use transport::verbs::Time;
use transport::wire::Lrh;

/// When a queue marks.
#[derive(Debug, Clone, Copy)]
pub enum Marking {
    /// Never (a plain tail-drop queue).
    Off,
    /// Every markable packet that arrives to more than `k` bytes queued.
    Step { k: u64 },
    /// RED-style (as the DCQCN paper configures switches): no mark below
    /// `kmin` bytes, probability rising linearly to `pmax` at `kmax`, every
    /// packet above `kmax`.
    Red { kmin: u64, kmax: u64, pmax: f64 },
}

/// One switch output port: a link of `rate_mbps`, a FIFO of at most
/// `cap_bytes` (a packet that does not fit is dropped), [`Marking`] on
/// arrival. Only markable packets are marked (an ECN-incapable one passes
/// unmarked: the switch drops only at the cap, as a data-centre switch's
/// ECN profile does).
#[derive(Debug, Clone, Copy)]
pub struct QueueModel {
    pub rate_mbps: u32,
    pub cap_bytes: u64,
    pub marking: Marking,
}

/// Marks a packet as congested; false when it cannot be (not ECN-capable).
pub type Marker = fn(&mut [u8]) -> bool;

/// [`Marker`] for RoCEv2 (RFC 3168): an ECT(0)/ECT(1) IPv4 or IPv6 frame
/// becomes CE (the IPv4 header checksum updated; the ICRC masks the DS byte,
/// A17.3.3). Not-ECT and CE frames are left as they are.
pub fn mark_ce(f: &mut [u8]) -> bool {
    if f.len() < 54 {
        return false;
    }
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => {
            let ecn = f[15] & 3;
            if ecn == 0 {
                return false;
            }
            f[15] |= 3;
            f[24] = 0;
            f[25] = 0;
            let ihl = usize::from(f[14] & 0xf) * 4;
            let mut sum = 0u32;
            for w in f[14..14 + ihl].chunks(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            let c = !(sum as u16);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            true
        }
        0x86dd => {
            // Traffic class: the low nibble of byte 14 and the high of 15;
            // ECN is its low 2 bits, bits 5..4 of byte 15.
            if (f[15] >> 4) & 3 == 0 {
                return false;
            }
            f[15] |= 0x30;
            true
        }
        _ => false,
    }
}

/// The IP ECN field of a RoCEv2 frame (None: not IP).
pub fn ecn_of(f: &[u8]) -> Option<u8> {
    match u16::from_be_bytes([*f.get(12)?, *f.get(13)?]) {
        0x0800 => Some(f.get(15)? & 3),
        0x86dd => Some((f.get(15)? >> 4) & 3),
        _ => None,
    }
}

/// The node a unicast packet goes to: by destination MAC on RoCE, by DLID
/// (and LMC) on InfiniBand.
pub fn route(net: &Net, pkt: &[u8]) -> Option<usize> {
    if net.nodes[0].engine.port().is_ethernet() {
        return net.nodes.iter().position(|n| {
            matches!(n.engine.port().link, LinkLayer::Ethernet { mac } if pkt.get(..6) == Some(&mac[..]))
        });
    }
    let dlid = Lrh::new_checked(pkt).ok()?.dlid();
    net.nodes.iter().position(|n| {
        let p = n.engine.port();
        let mask = !((1u16 << p.lmc.min(7)) - 1);
        p.lid & mask == dlid & mask
    })
}

/// What one switch port saw.
#[derive(Debug, Default, Clone)]
pub struct PortStats {
    /// Bytes queued at each packet's arrival (while recording).
    pub occupancy: Vec<u64>,
    /// Packets dropped at the cap, and marked.
    pub drops: u64,
    pub marks: u64,
    /// Bytes sent on, by the node that sent them (while recording).
    pub tx_by_src: Vec<u64>,
    /// Largest queue seen.
    pub max_bytes: u64,
    /// Bytes offered (arrived, dropped or not), by sending node.
    pub rx_by_src: Vec<u64>,
}

struct Port {
    q: VecDeque<(usize, Vec<u8>)>,
    bytes: u64,
    busy_until: Time,
    stats: PortStats,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Flight {
    at: Time,
    seq: u64,
    /// `None`: to the switch; `Some(i)`: to node `i`.
    to: Option<usize>,
    from: usize,
    bytes: Vec<u8>,
}

/// The star: nodes, their links to the switch, the switch's output ports.
pub struct Star {
    /// Every link's rate (the nodes' and the switch's ports).
    pub link_mbps: u32,
    /// One-way propagation of each link (node to switch, switch to node).
    pub prop_ns: u64,
    pub queue: QueueModel,
    pub marker: Marker,
    /// Whether ports record statistics (after a warm-up).
    pub recording: bool,
    nic_free: Vec<Time>,
    nic_busy: Vec<bool>,
    ports: Vec<Port>,
    flight: BinaryHeap<Reverse<Flight>>,
    seq: u64,
    rng: Rng,
    buf: Vec<u8>,
}

impl Star {
    /// A switch for `net`'s nodes, links of `link_mbps` and `prop_ns`, each
    /// output port a `queue`.
    pub fn new(net: &Net, link_mbps: u32, prop_ns: u64, queue: QueueModel, marker: Marker) -> Star {
        let n = net.nodes.len();
        Star {
            link_mbps,
            prop_ns,
            queue,
            marker,
            recording: false,
            nic_free: vec![Time(0); n],
            nic_busy: vec![false; n],
            ports: (0..n)
                .map(|_| Port {
                    q: VecDeque::new(),
                    bytes: 0,
                    busy_until: Time(0),
                    stats: PortStats {
                        tx_by_src: vec![0; n],
                        rx_by_src: vec![0; n],
                        ..PortStats::default()
                    },
                })
                .collect(),
            flight: BinaryHeap::new(),
            seq: 0,
            rng: Rng::new(0x5eed),
            buf: vec![0; 16384],
        }
    }

    /// Time `len` bytes take on a link of `mbps`.
    pub fn ser_ns(mbps: u32, len: usize) -> u64 {
        (len as u64 * 8_000).div_ceil(u64::from(mbps.max(1)))
    }

    /// The statistics of the switch port towards node `i`.
    pub fn stats(&self, i: usize) -> &PortStats {
        &self.ports[i].stats
    }

    /// Clears every port's statistics.
    pub fn reset_stats(&mut self) {
        for p in &mut self.ports {
            let n = p.stats.tx_by_src.len();
            p.stats = PortStats {
                tx_by_src: vec![0; n],
                rx_by_src: vec![0; n],
                ..PortStats::default()
            };
        }
    }

    fn push(&mut self, at: Time, to: Option<usize>, from: usize, bytes: Vec<u8>) {
        self.seq += 1;
        self.flight.push(Reverse(Flight {
            at,
            seq: self.seq,
            to,
            from,
            bytes,
        }));
    }

    fn enqueue(&mut self, port: usize, from: usize, mut pkt: Vec<u8>) {
        let qm = self.queue;
        let p = &mut self.ports[port];
        let len = pkt.len() as u64;
        if self.recording {
            p.stats.occupancy.push(p.bytes);
            p.stats.rx_by_src[from] += len;
        }
        if p.bytes + len > qm.cap_bytes {
            p.stats.drops += 1;
            return;
        }
        let mark = match qm.marking {
            Marking::Off => false,
            Marking::Step { k } => p.bytes > k,
            Marking::Red { kmin, kmax, pmax } => {
                if p.bytes <= kmin {
                    false
                } else if p.bytes >= kmax {
                    true
                } else {
                    let f = (p.bytes - kmin) as f64 / (kmax - kmin) as f64;
                    self.rng.chance(f * pmax)
                }
            }
        };
        if mark && (self.marker)(&mut pkt) {
            p.stats.marks += 1;
        }
        p.bytes += len;
        p.stats.max_bytes = p.stats.max_bytes.max(p.bytes);
        p.q.push_back((from, pkt));
    }

    /// Runs the fabric until `until`, calling `app` after every event time
    /// (to post work and poll completions).
    pub fn run_until(&mut self, net: &mut Net, until: Time, mut app: impl FnMut(&mut Net)) {
        while net.now < until {
            self.step(net);
            app(net);
        }
    }

    /// Handles everything due at `net.now`, then moves the clock to the next
    /// event (at least 1 ns on).
    pub fn step(&mut self, net: &mut Net) {
        let now = net.now;
        // Arrivals.
        while self.flight.peek().is_some_and(|f| f.0.at <= now) {
            let Reverse(f) = self.flight.pop().unwrap();
            match f.to {
                None => match route(net, &f.bytes) {
                    Some(to) => self.enqueue(to, f.from, f.bytes),
                    None => self.ports[f.from].stats.drops += 1,
                },
                Some(i) => {
                    let n = &mut net.nodes[i];
                    n.engine.handle_packet(&f.bytes, &mut n.mem, now);
                }
            }
        }
        // Switch output ports.
        for i in 0..self.ports.len() {
            let p = &mut self.ports[i];
            if p.busy_until > now {
                continue;
            }
            let Some((from, pkt)) = p.q.pop_front() else {
                continue;
            };
            p.bytes -= pkt.len() as u64;
            if self.recording {
                p.stats.tx_by_src[from] += pkt.len() as u64;
            }
            p.busy_until = now.plus_ns(Self::ser_ns(self.link_mbps, pkt.len()));
            let at = p.busy_until.plus_ns(self.prop_ns);
            self.push(at, Some(i), from, pkt);
        }
        // Timers, then the NICs.
        for n in &mut net.nodes {
            if n.engine.poll_timeout().is_some_and(|t| t <= now) {
                n.engine.handle_timeout(now);
            }
        }
        for i in 0..net.nodes.len() {
            if self.nic_free[i] > now {
                continue;
            }
            let n = &mut net.nodes[i];
            match n.engine.poll_transmit(&mut n.mem, now, &mut self.buf) {
                Some(len) => {
                    let pkt = self.buf[..len].to_vec();
                    self.nic_free[i] = now.plus_ns(Self::ser_ns(self.link_mbps, len));
                    self.nic_busy[i] = true;
                    let at = self.nic_free[i].plus_ns(self.prop_ns);
                    self.push(at, None, i, pkt);
                }
                None => self.nic_busy[i] = false,
            }
        }
        // The next event.
        let mut next: Option<Time> = self.flight.peek().map(|f| f.0.at);
        let mut consider = |t: Time| next = Some(next.map_or(t, |n| n.min(t)));
        for p in &self.ports {
            if !p.q.is_empty() {
                consider(p.busy_until);
            }
        }
        for (i, n) in net.nodes.iter_mut().enumerate() {
            n.engine.settle_timers();
            if let Some(t) = n.engine.poll_timeout() {
                consider(t);
            }
            if self.nic_busy[i] {
                consider(self.nic_free[i]);
            }
        }
        // Nothing pending: the application's next move is its own (it runs
        // after this step); time still advances.
        let t = next.unwrap_or(now.plus_ns(1_000));
        net.now = t.max(now.plus_ns(1));
    }
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has all.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * s2)
}

/// The `q`-quantile (0..=1) of `v` (sorted in place).
pub fn quantile(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    v[i]
}
