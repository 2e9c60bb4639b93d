//! The port window (ARCHITECTURE.md §3; issue 12 figure 6): RC request
//! packets in flight over all of a port's QPs stay under
//! `Limits::port_window`, every QP still completes, and one QP alone is not
//! slowed.

mod common;

use std::collections::HashMap;

use common::*;
use transport::engine::{Limits, DEFAULT_PORT_WINDOW};
use transport::psn;
use transport::verbs::{WcStatus, WrOpcode};
use transport::wire::opcode::Direction;
use transport::wire::PacketRepr;

/// Request packets node 0 sent and the responder has not acknowledged yet,
/// over all QPs, from the packets put on the wire: per QP, the PSN after the
/// newest request sent (`sent`, by the responder's QPN) less the PSN after the
/// newest ACK the responder sent (`acked`, by the requester's QPN).
struct WireCount {
    sent: HashMap<u32, u32>,
    acked: HashMap<u32, u32>,
    /// Requester QPN -> responder QPN.
    peer: HashMap<u32, u32>,
    max: u32,
}

impl WireCount {
    fn new(pairs: &[Pair]) -> WireCount {
        WireCount {
            sent: HashMap::new(),
            acked: HashMap::new(),
            peer: pairs.iter().map(|p| (p.qa, p.qb)).collect(),
            max: 0,
        }
    }

    fn see(&mut self, net: &mut Net) {
        for pkt in net.sniffed.as_mut().unwrap().drain(..) {
            let p = PacketRepr::parse(&pkt).expect("the engine emits valid packets");
            let bth = p.transport.bth;
            let next = psn::add(bth.psn, 1);
            let slot = match bth.opcode.info().direction() {
                Direction::Request => self.sent.entry(bth.dest_qp),
                Direction::Response => self.acked.entry(bth.dest_qp),
                Direction::Notification => continue,
            };
            let v = slot.or_insert(next);
            if psn::diff(next, *v) > 0 {
                *v = next;
            }
        }
        let start = ConnOpts::default().psn_a;
        let total: u32 = self
            .peer
            .iter()
            .map(|(qa, qb)| {
                let s = self.sent.get(qb).copied().unwrap_or(start);
                let a = self.acked.get(qa).copied().unwrap_or(start);
                psn::diff(s, a).max(0) as u32
            })
            .sum();
        self.max = self.max.max(total);
    }
}

/// `n` QPs from node 0 to node 1, each with one signaled WRITE of `len`
/// bytes; runs until every QP completed. Returns the steps each QP took to
/// complete, the most packets in flight on the wire and by the engine's own
/// count, the time it took and the requester's probes.
fn run(n: usize, len: u32, limits: Limits, drop: f64) -> (Vec<usize>, u32, u32, u64, u64) {
    run_on(n, len, limits, drop, None)
}

/// [`run`] with egress links of this model (packets queue at the sender).
fn run_on(
    n: usize,
    len: u32,
    limits: Limits,
    drop: f64,
    link: Option<LinkModel>,
) -> (Vec<usize>, u32, u32, u64, u64) {
    let mut net = Net::with_limits(2, 1 << 20, 7, limits);
    net.faults.drop = drop;
    net.link = link;
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pairs: Vec<Pair> = (0..n)
        .map(|_| connect(&mut net, 0, 1, &ConnOpts::default()))
        .collect();
    for (i, p) in pairs.iter().enumerate() {
        let mut w = send_wr(i as u64, WrOpcode::RdmaWrite, sge(MEM_BASE, len, ka));
        w.remote_addr = MEM_BASE + 0x4_0000;
        w.rkey = kb;
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    net.sniffed = Some(Vec::new());
    let mut wire = WireCount::new(&pairs);
    let mut engine_max = 0;
    let mut done_at = vec![None; n];
    let mut left = n;
    let start = net.now;
    for step in 0..2_000_000 {
        if left == 0 {
            break;
        }
        assert!(net.step(), "the net went idle with {left} QPs unfinished");
        wire.see(&mut net);
        engine_max = engine_max.max(net.nodes[0].engine.port_in_flight());
        for (i, p) in pairs.iter().enumerate() {
            if done_at[i].is_none() {
                if let Some(c) = net.poll(0, p.cq_a) {
                    assert_eq!(c.status, WcStatus::Success, "QP {i}");
                    done_at[i] = Some(step);
                    left -= 1;
                }
            }
        }
    }
    assert_eq!(left, 0, "{left} QPs starved");
    assert_eq!(net.nodes[0].engine.port_in_flight(), 0, "all acknowledged");
    let steps = done_at.into_iter().map(Option::unwrap).collect();
    let probes = net.nodes[0].engine.counters().probes;
    (steps, wire.max, engine_max, net.now.0 - start.0, probes)
}

#[test]
fn a_thousand_qps_stay_under_the_port_window_and_all_complete() {
    let bound = 64;
    let limits = Limits {
        port_window: bound,
        ..Limits::default()
    };
    // 1024 QPs x 4 packets (4 KiB at a 1 KiB MTU): 4096 packets, 64 at a time.
    let (steps, wire_max, engine_max, _, probes) = run(1024, 4096, limits, 0.0);
    // Nothing is lost, so nothing waits for a probe: a QP held back has asked
    // for the ACK of what it sent (ARCHITECTURE.md §3).
    assert_eq!(probes, 0);
    assert!(
        wire_max <= bound,
        "{wire_max} packets in flight on the wire"
    );
    assert!(engine_max <= bound, "engine counted {engine_max}");
    assert_eq!(engine_max, bound, "the bound was reached (the test bites)");
    // Round robin: the QPs finish in waves of about bound / 4 QPs, in the
    // order they waited; no QP finishes much later than the last of its wave.
    let last = *steps.iter().max().unwrap();
    let first = *steps.iter().min().unwrap();
    assert!(last > first, "{first} {last}");
    let late = steps.iter().filter(|&&s| s == last).count();
    assert!(late <= bound as usize, "{late} QPs finished last together");
}

#[test]
fn without_a_port_window_the_same_load_puts_every_packet_in_flight() {
    // What the bound prevents (and what the test above would see without
    // it): a sender's egress queue of 4 MiB (a socket buffer) fills with
    // packets of every QP, each QP within its own window.
    let link = Some(LinkModel {
        ns_per_kib: 1_000,
        queue_bytes: 4 << 20,
    });
    let unbounded = Limits {
        port_window: 0,
        ..Limits::default()
    };
    // 256 QPs x 16 packets (16 KiB at a 1 KiB MTU).
    let (_, wire_max, _, _, _) = run_on(256, 16 << 10, unbounded, 0.0, link);
    assert!(wire_max >= 1024, "{wire_max}");
    let bounded = Limits {
        port_window: 64,
        ..Limits::default()
    };
    let (_, wire_max, _, _, _) = run_on(256, 16 << 10, bounded, 0.0, link);
    assert!(wire_max <= 64, "{wire_max}");
}

#[test]
fn one_qp_alone_is_not_slowed_by_the_default_port_window() {
    assert!(DEFAULT_PORT_WINDOW > Limits::default().send_window);
    // 2 MiB in one WRITE: 2048 packets, the QP's window grows to its limit.
    let unbounded = Limits {
        port_window: 0,
        ..Limits::default()
    };
    let (_, w0, _, t0, _) = run(1, 512 << 10, unbounded, 0.0);
    let (_, w1, _, t1, _) = run(1, 512 << 10, Limits::default(), 0.0);
    assert_eq!(t0, t1, "the same time with the default window as without");
    assert_eq!(w0, w1);
}

#[test]
fn loss_recovery_goes_on_under_a_full_port_window() {
    // Probes and go-back resends of packets already counted are not held
    // back: with 2 % loss every QP still completes, within the bound.
    let bound = 32;
    let limits = Limits {
        port_window: bound,
        ..Limits::default()
    };
    let (_, _, engine_max, _, _) = run(64, 8192, limits, 0.02);
    assert!(engine_max <= bound, "{engine_max}");
}

#[test]
fn destroying_qps_releases_their_packets_in_flight() {
    let limits = Limits {
        port_window: 8,
        ..Limits::default()
    };
    let mut net = Net::with_limits(2, 1 << 20, 3, limits);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pairs: Vec<Pair> = (0..4)
        .map(|_| connect(&mut net, 0, 1, &ConnOpts::default()))
        .collect();
    for p in &pairs {
        let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, 8192, ka));
        w.remote_addr = MEM_BASE + 0x4_0000;
        w.rkey = kb;
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    let mut buf = vec![0; 8192];
    let n = &mut net.nodes[0];
    while n
        .engine
        .poll_transmit(&mut n.mem, net.now, &mut buf)
        .is_some()
    {}
    assert_eq!(n.engine.port_in_flight(), 8);
    n.engine.destroy_qp(pairs[0].qa).unwrap();
    let left = n.engine.port_in_flight();
    assert!(left < 8, "{left}");
    // The room the destroyed QP left goes to the others.
    let mut more = 0;
    while n
        .engine
        .poll_transmit(&mut n.mem, net.now, &mut buf)
        .is_some()
    {
        more += 1;
    }
    assert_eq!(more, 8 - left);
    for p in &pairs[1..] {
        n.engine.destroy_qp(p.qa).unwrap();
    }
    assert_eq!(n.engine.port_in_flight(), 0);
}

/// A WRITE of `len` bytes on `p` from node 0 into node `p.b`'s memory.
fn post_write(net: &mut Net, p: &Pair, id: u64, len: u32, ka: u32, kb: u32) {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(MEM_BASE, len, ka));
    w.remote_addr = MEM_BASE + 0x4_0000;
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
}

/// 64 QPs from node 0 to dead node 1, then one to live node 2 (on RoCE
/// ports with `roce`: destinations are GIDs there).
fn dead_peer(roce: bool) {
    // The bound is per destination (ARCHITECTURE.md §3): 64 QPs to a peer
    // that stopped answering fill its window and keep it full until their
    // retries run out (RL-10: 8 ACK timeouts of 4 ms here); a QP to a live
    // peer still goes at once.
    let bound = 32;
    let limits = Limits {
        port_window: bound,
        ..Limits::default()
    };
    let mut net = if roce {
        let ports = Net::new_roce(3, 0, 0)
            .nodes
            .iter()
            .map(|n| n.engine.port().clone())
            .collect();
        Net::with_ports(ports, 1 << 20, 5, limits)
    } else {
        Net::with_limits(3, 1 << 20, 5, limits)
    };
    // Node 1 (LID 2) is dead: everything sent to it is lost.
    net.lose = Some(if roce {
        Box::new(|p: &[u8]| p.get(..6) == Some(&roce_mac(2)[..]))
    } else {
        Box::new(|p: &[u8]| transport::wire::Lrh::new_checked(p).is_ok_and(|l| l.dlid() == 2))
    });
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let kc = net.reg_all(2, ALL_ACCESS);
    let dead: Vec<Pair> = (0..64)
        .map(|_| connect(&mut net, 0, 1, &ConnOpts::default()))
        .collect();
    for (i, p) in dead.iter().enumerate() {
        post_write(&mut net, p, i as u64, 4096, ka, kb);
    }
    // The dead peer's window fills (64 QPs x 4 packets want 256).
    let full = net.run_until(10_000, |n| n.nodes[0].engine.port_in_flight() >= bound);
    assert!(full, "the dead peer's window filled");
    let live = connect(&mut net, 0, 2, &ConnOpts::default());
    post_write(&mut net, &live, 99, 4096, ka, kc);
    let start = net.now;
    let mut most = 0;
    let done = net.run_until(200_000, |n| {
        most = most.max(n.nodes[0].engine.port_in_flight());
        n.nodes[0]
            .engine
            .poll_cq(live.cq_a)
            .inspect(|c| assert_eq!(c.status, WcStatus::Success))
            .is_some()
    });
    assert!(done, "the live QP completed");
    let took = net.now.0 - start.0;
    // A few round trips (2 us one way), far from the dead QPs' first ACK
    // timeout (4.2 ms), let alone their last.
    assert!(took < 100_000, "the live QP took {took} ns");
    // Each destination stays under the bound: the dead one's full, the live
    // one's 4 packets on top.
    assert!(most <= bound + 4, "{most} in flight");
    // The dead QPs still hold their destination's room: none completed.
    for p in &dead {
        assert!(net.poll(0, p.cq_a).is_none());
    }
}

#[test]
fn a_dead_peer_does_not_starve_a_live_one() {
    dead_peer(false);
}

#[test]
fn a_dead_roce_peer_does_not_starve_a_live_one() {
    dead_peer(true);
}

#[test]
fn a_run_of_packets_is_acknowledged_once() {
    // The transmit schedule gives a QP up to 16 packets in a row (one 64 KiB
    // message at 4 KiB; io::TX_BURST): with many QPs sharing a tight port
    // window, every packet asks for an ACK, and a run's packets, received
    // together, are acknowledged together (RL-08). Packet by packet round
    // robin gave one ACK per data packet.
    let limits = Limits {
        port_window: 256,
        ..Limits::default()
    };
    let mut net = Net::with_limits(2, 1 << 20, 9, limits);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pairs: Vec<Pair> = (0..64)
        .map(|_| connect(&mut net, 0, 1, &ConnOpts::default()))
        .collect();
    // 64 QPs x 4 WRITEs of 16 packets (16 KiB at a 1 KiB MTU).
    for (i, p) in pairs.iter().enumerate() {
        for k in 0..4 {
            post_write(&mut net, p, (i * 4 + k) as u64, 16 << 10, ka, kb);
        }
    }
    let mut left = 64 * 4;
    let done = net.run_until(1_000_000, |n| {
        for p in &pairs {
            while let Some(c) = n.poll(0, p.cq_a) {
                assert_eq!(c.status, WcStatus::Success);
                left -= 1;
            }
        }
        left == 0
    });
    assert!(done, "{left} WRITEs left");
    let data = net.nodes[0].engine.counters().tx_packets;
    let acks = net.nodes[1].engine.counters().acks_sent;
    assert!(data >= 64 * 4 * 16, "{data} packets");
    assert!(
        acks * 8 <= data,
        "{acks} ACKs for {data} data packets (at most one per 8)"
    );
}
