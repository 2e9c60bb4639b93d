//! Issue 31 "Done when", InfiniBand (item 2; IBA Annex A10): an 8-to-1 incast
//! through one switch port in simulated time, the IBA congestion control on
//! and off.
//!
//! The rig: ten engines on IB ports at 40 Gb/s (the engine's default rate),
//! each cabled to a port of the real switch core (`transport::switch`, static
//! routes), 2 us of propagation per cable. Nodes 0..=7 each move 64 KiB RDMA
//! WRITEs to node 8 (four outstanding per QP), so node 8's switch port is the
//! bottleneck. The victim: a second QP of node 0 sends a 64-byte WRITE every
//! 50 us to node 9, through another, idle switch port.
//!
//! The switch model: per egress port a FIFO drained at the link's rate; IB
//! link flow control (IBA 7.9) as per-ingress-port credit: a node's link sends
//! only while its ingress buffer at the switch (32 KiB) has room, a packet
//! holding its bytes there until it has left by its egress port, and an
//! ingress port's packets leave in the order they came (its buffer is a FIFO,
//! so a packet for an idle port waits behind those for the congested one:
//! head-of-line blocking). Nothing is ever dropped. The egress queue may hold
//! what every ingress buffer holds (10 x 32 KiB): the marking threshold is
//! relative to that (`switch::cc`: Threshold 15 marks past a sixteenth, 20 KiB).
//!
//! Control on: the switch's SwitchCongestionSetting (Threshold 15, every
//! eligible packet) marks FECN; node 8 answers on its ACKs with BECN; the
//! senders' CCA (CCTI_Increase 1, CCTI_Timer 400 (410 us), a CCT whose entry
//! i is IPD i) paces each QP. Off: no marking, no CCA.
//!
//! Asserted (second half of 20 ms): on, Jain's fairness index of the eight
//! senders' goodput >= 0.95, the bottleneck queue's p99 under 64 KiB (a fifth of
//! its cap), the victim's p99 latency <= 2x its latency with no incast, and
//! the bottleneck at least 80% as busy as without control; off,
//! the queue's p99 at the cap the eight ingress buffers make (>= 90% of 256 KiB)
//! and the victim's p99 latency above 2x unloaded (blocked behind the incast),
//! both without a drop.

mod common;
mod switch_util;

use std::collections::{BinaryHeap, VecDeque};

use common::*;
use switch_util::switch_config;
use transport::cc::iba::Params;
use transport::mad::cc_attr::{
    sw_control_map, CaCongestionEntry, CaCongestionSetting, CctEntry, SwitchCongestionSetting,
};
use transport::switch::cc::QueueDepth;
use transport::switch::{Egress, Switch, SwitchOut};
use transport::verbs::{Handle, Mtu, WcStatus};

const SENDERS: usize = 8;
const R: usize = 8;
const W: usize = 9;
const NODES: usize = 10;
const MBPS: u64 = 40_000;
const HOP_NS: u64 = 2_000;
const INGRESS_CAP: u64 = 32 * 1024;
const EGRESS_CAP: u64 = NODES as u64 * INGRESS_CAP;
const MSG: u32 = 64 * 1024;
const OUTSTANDING: usize = 4;
const END_NS: u64 = 20_000_000;
const VICTIM_EVERY_NS: u64 = 50_000;
const STAGGER_NS: u64 = 250_000;

fn ser_ns(len: usize) -> u64 {
    (len as u64 * 8 * 1000).div_ceil(MBPS)
}

/// A packet in flight on a cable: due at `at` at node `to` (or the switch's
/// port `to + 1` when `to_switch`).
#[derive(PartialEq, Eq)]
struct Flight {
    at: u64,
    seq: u64,
    to: usize,
    to_switch: bool,
    bytes: Vec<u8>,
}

impl Ord for Flight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
impl PartialOrd for Flight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// One packet waiting in an egress port's FIFO: when it has left, its length
/// and its ingress node.
struct Queued {
    depart: u64,
    len: usize,
    ingress: usize,
}

struct Sim {
    net: Net,
    sw: Switch,
    cc: bool,
    flights: BinaryHeap<Flight>,
    seq: u64,
    /// Per node: its link busy until.
    link_free: Vec<u64>,
    /// Per node: bytes its packets hold in its ingress buffer at the switch.
    ingress_bytes: Vec<u64>,
    /// Per node: when the last packet from its ingress port leaves (FIFO).
    ingress_last: Vec<u64>,
    /// Per egress port (node index): its FIFO and when its last packet leaves.
    egress: Vec<VecDeque<Queued>>,
    egress_last: Vec<u64>,
    /// Bottleneck queue bytes at each enqueue, in the measured half.
    samples: Vec<u64>,
    now: u64,
}

impl Sim {
    fn queued_bytes(&self, port: usize) -> u64 {
        self.egress[port].iter().map(|q| q.len as u64).sum()
    }

    /// Packets that have left their egress port by now free their ingress bytes.
    fn drain(&mut self) {
        for p in 0..NODES {
            while self.egress[p].front().is_some_and(|q| q.depart <= self.now) {
                let q = self.egress[p].pop_front().unwrap();
                self.ingress_bytes[q.ingress] -= q.len as u64;
            }
        }
    }

    fn fly(&mut self, at: u64, to: usize, to_switch: bool, bytes: Vec<u8>) {
        self.seq += 1;
        self.flights.push(Flight {
            at,
            seq: self.seq,
            to,
            to_switch,
            bytes,
        });
    }

    /// A packet from node `from` reached the switch: forwarded (and marked) into
    /// its egress FIFO, its departure after the packets ahead of it there and
    /// in its ingress FIFO.
    fn at_switch(&mut self, from: usize, pkt: Vec<u8>) {
        let mut out: Vec<SwitchOut> = Vec::new();
        self.sw.handle_packet(
            &pkt,
            from as u8 + 1,
            transport::verbs::Time(self.now),
            &mut out,
        );
        let Some(o) = out.pop() else {
            panic!("the switch forwards every packet here");
        };
        let port = usize::from(o.port) - 1;
        let mut bytes = match o.packet {
            Egress::Same => pkt,
            Egress::New(b) => b.into_vec(),
        };
        let q = self.queued_bytes(port);
        if port == R && self.now >= END_NS / 2 {
            self.samples.push(q);
        }
        if self.cc {
            let depth = QueueDepth {
                blocks: (q / 64) as u32,
                limit: (EGRESS_CAP / 64) as u32,
            };
            let t = transport::verbs::Time(self.now);
            if let Some(m) = self.sw.cc_mark(o.port, &bytes, depth, t) {
                bytes = m.into_vec();
            }
        }
        let len = bytes.len();
        let depart = self
            .now
            .max(self.egress_last[port])
            .max(self.ingress_last[from])
            + ser_ns(len);
        self.egress_last[port] = depart;
        self.ingress_last[from] = depart;
        self.egress[port].push_back(Queued {
            depart,
            len,
            ingress: from,
        });
        self.fly(depart + HOP_NS, port, false, bytes);
    }

    /// Lets every node put on its link what its engine has and its ingress
    /// buffer takes.
    fn transmit(&mut self, buf: &mut [u8]) {
        for i in 0..NODES {
            while self.link_free[i] <= self.now && self.ingress_bytes[i] < INGRESS_CAP {
                let n = &mut self.net.nodes[i];
                let t = transport::verbs::Time(self.now);
                let Some(len) = n.engine.poll_transmit(&mut n.mem, t, buf) else {
                    break;
                };
                let done = self.now + ser_ns(len);
                self.link_free[i] = done;
                self.ingress_bytes[i] += len as u64;
                let pkt = buf[..len].to_vec();
                self.fly(done + HOP_NS, i, true, pkt);
            }
        }
    }

    /// The next time anything happens.
    fn next(&self) -> Option<u64> {
        let flight = self.flights.peek().map(|f| f.at);
        let timers = self
            .net
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout().map(|t| t.0))
            .min();
        let links = (0..NODES)
            .filter(|&i| self.link_free[i] > self.now)
            .map(|i| self.link_free[i])
            .min();
        let drains = (0..NODES)
            .filter_map(|p| self.egress[p].front().map(|q| q.depart))
            .min();
        [flight, timers, links, drains]
            .into_iter()
            .flatten()
            .filter(|&t| t > self.now)
            .min()
    }
}

/// What a run measured.
struct Outcome {
    /// Bytes each sender completed in the second half.
    goodput: [u64; SENDERS],
    queue_p99: u64,
    victim_p99: u64,
    fecn_marked: u64,
    becns: u64,
}

fn p99(mut v: Vec<u64>) -> u64 {
    assert!(!v.is_empty());
    v.sort_unstable();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

fn run(cc: bool, incast: bool) -> Outcome {
    let mut net = Net::new(NODES, 2 << 20, 31);
    let mut sw = Switch::new(&switch_config(NODES as u8));
    sw.set_static_lid(200);
    for i in 0..NODES {
        let port = i as u8 + 1;
        sw.link_up(port);
        assert!(sw.set_static_route(i as u16 + 1, port));
        sw.activate(port);
    }
    if cc {
        sw.cc_agent_mut()
            .set_switch_setting(&SwitchCongestionSetting {
                control_map: sw_control_map::THRESHOLD_PACKET_SIZE | sw_control_map::MARKING_RATE,
                threshold: 15,
                packet_size: 0,
                marking_rate: 0,
                ..SwitchCongestionSetting::default()
            });
        let mut s = CaCongestionSetting::default();
        s.entries[0] = CaCongestionEntry {
            ccti_timer: 400,
            ccti_increase: 1,
            trigger_threshold: 0,
            ccti_min: 0,
        };
        let cct: Vec<CctEntry> = (0..128)
            .map(|i| CctEntry {
                shift: 0,
                multiplier: i,
            })
            .collect();
        for i in 0..NODES {
            net.nodes[i]
                .engine
                .set_cc_iba(Some(Params::from_agent(&s, &cct)));
        }
    }
    let o = ConnOpts {
        mtu: Mtu::M4096,
        max_wr: 64,
        ..ConnOpts::default()
    };
    let bulk: Vec<Pair> = (0..SENDERS).map(|i| connect(&mut net, i, R, &o)).collect();
    let victim = connect(&mut net, 0, W, &o);
    let keys: Vec<u32> = (0..NODES).map(|i| net.reg_all(i, ALL_ACCESS)).collect();
    let post = |net: &mut Net, p: &Pair, id: u64, len: u32| {
        let w = write_wr(id, keys[p.a], len, keys[p.b], MEM_BASE + 0x10_0000);
        net.nodes[p.a].engine.post_send(p.qa, w).unwrap();
    };
    // Sender i starts at i * STAGGER_NS: the first ones have the link to
    // themselves, then each newcomer must get its share.
    let mut started = [!incast; SENDERS];
    let mut sim = Sim {
        net,
        sw,
        cc,
        flights: BinaryHeap::new(),
        seq: 0,
        link_free: vec![0; NODES],
        ingress_bytes: vec![0; NODES],
        ingress_last: vec![0; NODES],
        egress: (0..NODES).map(|_| VecDeque::new()).collect(),
        egress_last: vec![0; NODES],
        samples: Vec::new(),
        now: 0,
    };
    let mut buf = vec![0u8; 8192];
    let mut goodput = [0u64; SENDERS];
    let mut victim_lat = Vec::new();
    let mut victim_posted: Option<u64> = None;
    let mut next_victim = 1_000_000;
    let victim_cq: Handle = victim.cq_a;
    while sim.now < END_NS {
        // Deliver what is due.
        while sim.flights.peek().is_some_and(|f| f.at <= sim.now) {
            let f = sim.flights.pop().unwrap();
            if f.to_switch {
                sim.at_switch(f.to, f.bytes);
            } else {
                let n = &mut sim.net.nodes[f.to];
                let t = transport::verbs::Time(sim.now);
                n.engine.handle_packet(&f.bytes, &mut n.mem, t);
            }
        }
        sim.drain();
        for n in &mut sim.net.nodes {
            n.engine.handle_timeout(transport::verbs::Time(sim.now));
        }
        // The workload: a sender keeps four WRITEs outstanding; the victim
        // sends one small WRITE at a time.
        for (i, p) in bulk.iter().enumerate() {
            if !started[i] && sim.now >= i as u64 * STAGGER_NS {
                started[i] = true;
                for k in 0..OUTSTANDING {
                    post(&mut sim.net, p, k as u64, MSG);
                }
            }
            while let Some(c) = sim.net.poll(i, p.cq_a) {
                assert_eq!(c.status, WcStatus::Success);
                if sim.now >= END_NS / 2 {
                    goodput[i] += u64::from(MSG);
                }
                post(&mut sim.net, p, c.wr_id, MSG);
            }
        }
        while let Some(c) = sim.net.poll(0, victim_cq) {
            assert_eq!(c.status, WcStatus::Success);
            if let Some(t) = victim_posted.take() {
                if t >= END_NS / 2 {
                    victim_lat.push(sim.now - t);
                }
            }
        }
        if victim_posted.is_none() && sim.now >= next_victim {
            post(&mut sim.net, &victim, 0, 64);
            victim_posted = Some(sim.now);
            next_victim = sim.now + VICTIM_EVERY_NS;
        }
        sim.transmit(&mut buf);
        let wake = if victim_posted.is_none() {
            Some(next_victim)
        } else {
            None
        };
        match [sim.next(), wake]
            .into_iter()
            .flatten()
            .filter(|&t| t > sim.now)
            .min()
        {
            Some(t) => sim.now = t,
            None => break,
        }
    }
    let becns = (0..SENDERS)
        .map(|i| sim.net.nodes[i].engine.counters().cc.becns_received)
        .sum();
    Outcome {
        goodput,
        queue_p99: if incast { p99(sim.samples) } else { 0 },
        victim_p99: p99(victim_lat),
        fecn_marked: sim.sw.fecn_marked(R as u8 + 1),
        becns,
    }
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let q: f64 = x.iter().map(|&v| (v as f64).powi(2)).sum();
    s * s / (x.len() as f64 * q)
}

#[test]
fn issue_31_ib_incast_with_cc_converges_fair_with_a_bounded_queue_and_spares_the_victim() {
    let unloaded = run(false, false).victim_p99;
    let on = run(true, true);
    let off = run(false, true);
    let j_on = jain(&on.goodput);
    let total_on: u64 = on.goodput.iter().sum();
    let total_off: u64 = off.goodput.iter().sum();
    eprintln!(
        "unloaded victim p99 {unloaded} ns; on: jain {j_on:.3} goodput {:?} total {total_on} \
         queue p99 {} victim p99 {} marked {} becns {}; off: jain {:.3} total {total_off} \
         queue p99 {} victim p99 {}",
        on.goodput,
        on.queue_p99,
        on.victim_p99,
        on.fecn_marked,
        on.becns,
        jain(&off.goodput),
        off.queue_p99,
        off.victim_p99
    );
    assert!(j_on >= 0.95, "fair shares with control on: {j_on}");
    assert!(
        on.queue_p99 < EGRESS_CAP / 5,
        "bounded queue: {}",
        on.queue_p99
    );
    assert!(on.fecn_marked > 0 && on.becns > 0);
    assert!(
        on.victim_p99 <= 2 * unloaded,
        "victim p99 {} vs unloaded {unloaded}",
        on.victim_p99
    );
    // The bottleneck stays busy with control on: at least 80% of what off moves.
    assert!(total_on * 5 >= total_off * 4, "{total_on} vs {total_off}");
    // Off: the queue at the cap the eight ingress buffers make, the victim
    // blocked behind it, nothing dropped (lossless: credit, not loss).
    let cap8 = SENDERS as u64 * INGRESS_CAP;
    assert!(
        off.queue_p99 * 10 >= cap8 * 9,
        "queue at its cap: {}",
        off.queue_p99
    );
    assert!(off.victim_p99 > 2 * unloaded, "victim {}", off.victim_p99);
    assert_eq!((off.fecn_marked, off.becns), (0, 0));
}
