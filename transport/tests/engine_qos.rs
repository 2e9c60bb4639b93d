//! Quality of service on the wire: static rate control (AD-07) and SL-to-VL
//! mapping (AD-06), each test named after its feature (docs/FEATURES.md).

mod common;

use common::*;
use transport::engine::DEFAULT_PORT_MBPS;
use transport::verbs::{Access, Mtu, WrOpcode};
use transport::wire::opcode::Direction;
use transport::wire::PacketRepr;

/// Bytes the egress link carries in `NS_PER_KIB` ns: the port's rate, so an
/// unpaced QP runs at the port's rate, as on a real link.
const NS_PER_KIB: u64 = 1024 * 8 * 1000 / DEFAULT_PORT_MBPS as u64;

/// A request packet node 0 put on its link: when it started and its length.
struct Sent {
    start: u64,
    len: u64,
}

/// Runs `bytes` of RDMA WRITEs from node 0 to node 1 over a path of
/// `static_rate` on a link at the port's rate; returns node 0's request
/// packets with the times the link started them (the Net's link model: a
/// packet starts when it is handed over or when the one before it is done).
fn write_on_wire(static_rate: u8, bytes: u32) -> Vec<Sent> {
    let mut net = Net::new(2, 4 << 20, 7);
    net.link = Some(LinkModel {
        ns_per_kib: NS_PER_KIB,
        queue_bytes: 8192,
    });
    net.sniffed = Some(Vec::new());
    let o = ConnOpts {
        mtu: Mtu::M4096,
        static_rate,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let kb = net.reg_all(1, ALL_ACCESS);
    let chunk = 64 << 10;
    let n = bytes / chunk;
    for i in 0..n {
        let mut w = send_wr(
            u64::from(i),
            WrOpcode::RdmaWrite,
            sge(MEM_BASE + u64::from(i * chunk), chunk, ka),
        );
        w.remote_addr = MEM_BASE + u64::from(i * chunk);
        w.rkey = kb;
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    let mut sent = Vec::new();
    let mut seen = 0;
    let mut link_free = 0u64;
    let mut done = 0;
    for _ in 0..1_000_000 {
        if done == n as usize {
            break;
        }
        if !net.step() {
            break;
        }
        let now = net.now.0;
        let wire = net.sniffed.as_ref().unwrap();
        for pkt in &wire[seen..] {
            let r = PacketRepr::parse(pkt).expect("valid packet");
            if r.lrh.slid != 1 || r.transport.bth.opcode.info().direction() != Direction::Request {
                continue;
            }
            let start = link_free.max(now);
            link_free = start + pkt.len() as u64 * NS_PER_KIB / 1024;
            sent.push(Sent {
                start,
                len: pkt.len() as u64,
            });
        }
        seen = wire.len();
        while net.poll(0, p.cq_a).is_some() {
            done += 1;
        }
    }
    assert_eq!(done, n as usize, "all WRITEs complete");
    sent
}

/// Bytes per ns from the first packet's start to the last one's end.
fn rate(sent: &[Sent]) -> f64 {
    let first = sent.first().expect("packets").start;
    let last = sent.last().expect("packets");
    let end = last.start + last.len * NS_PER_KIB / 1024;
    sent.iter().map(|s| s.len).sum::<u64>() as f64 / (end - first) as f64
}

/// AD-07: a QP whose path runs at 10 Gb/s from a 40 Gb/s port (IPD 3, IBA
/// 9.11) puts its packets on the wire at a quarter of the rate of a QP whose
/// path runs at the port's rate, within 10 %; its packets are evenly spaced
/// (each (IPD + 1) packet times after the one before), not sent in bursts.
#[test]
fn ad_07_static_rate_paces_injection() {
    const IBV_RATE_10_GBPS: u8 = 3;
    let bytes = 1 << 20;
    let full = write_on_wire(0, bytes);
    let paced = write_on_wire(IBV_RATE_10_GBPS, bytes);
    assert_eq!(full.len(), paced.len());
    assert!(full.len() >= 256, "{} packets", full.len());
    let (rf, rp) = (rate(&full), rate(&paced));
    let ratio = rp / rf;
    assert!(
        (0.225..=0.275).contains(&ratio),
        "paced {rp:.3} B/ns vs unpaced {rf:.3} B/ns: ratio {ratio:.3}, want 0.25 +- 10 %"
    );
    // Each gap between full packets' starts is 4 packet times (no bursts).
    for w in paced.windows(2) {
        let t = w[0].len * 8_000 / u64::from(DEFAULT_PORT_MBPS);
        let gap = w[1].start - w[0].start;
        assert!(
            gap + 2 >= 4 * t,
            "gap {gap} ns after a {}-byte packet",
            w[0].len
        );
    }
}
