//! Quality of service on the wire: static rate control (AD-07), SL-to-VL
//! mapping and VL arbitration (AD-06), each test named after its feature
//! (docs/FEATURES.md).

mod common;

use common::*;
use transport::engine::{
    RxDrop, VlArbEntry, VlArbTables, DEFAULT_DATA_VLS, DEFAULT_PORT_MBPS, HIGH_LIMIT_UNLIMITED,
};
use transport::verbs::{Access, AddressVector, Mtu, QpType, UdDest, WrOpcode};
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
    data_on_wire(WrOpcode::RdmaWrite, static_rate, bytes)
}

/// [`write_on_wire`] for `op`: WRITE (node 0's requests carry the data) or
/// READ (node 1's responses do); returns the data carrier's packets.
fn data_on_wire(op: WrOpcode, static_rate: u8, bytes: u32) -> Vec<Sent> {
    let (slid, dir) = match op {
        WrOpcode::RdmaRead => (2, Direction::Response),
        _ => (1, Direction::Request),
    };
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
            op,
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
            if r.lrh.slid != slid || r.transport.bth.opcode.info().direction() != dir {
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

/// AD-07, per destination (IBA 9.11: the IPD is the destination's): a UD
/// QP whose WQEs alternate one to node 1 over a 2.5 Gb/s path (IPD 15 from
/// the 40 Gb/s port) and four to node 2 over a 10 Gb/s path (IPD 3) puts
/// each destination's packets on the wire at that destination's own rate,
/// within 10 % and never above it; a packet to one destination does not wait
/// for the gap a packet to the other asked for (paced per QP, each would get
/// half its rate). The link runs at the port's rate: the clock advances by
/// each packet's time on it.
#[test]
fn ad_07_a_ud_qp_paces_each_destination_at_its_own_rate() {
    const IBV_RATE_2_5_GBPS: u8 = 2;
    const IBV_RATE_10_GBPS: u8 = 3;
    let mut net = Net::new(3, 1 << 20, 11);
    let ka = net.reg_all(0, ALL_ACCESS);
    let (qa, cq) = ud_qp(&mut net, 0);
    let (q1, _) = ud_qp(&mut net, 1);
    let (q2, _) = ud_qp(&mut net, 2);
    let dests = [(2u16, q1, IBV_RATE_2_5_GBPS), (3, q2, IBV_RATE_10_GBPS)];
    let wr = |id: u64| {
        let (dlid, qpn, static_rate) = dests[usize::from(!id.is_multiple_of(5))];
        let mut w = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 2048, ka));
        w.ud = Some(UdDest {
            av: AddressVector {
                dlid,
                static_rate,
                ..AddressVector::default()
            },
            remote_qpn: qpn,
            remote_qkey: 0x1111_1111,
            pkey_index: None,
        });
        w
    };
    let total = 400u64;
    let (mut posted, mut done) = (0u64, 0u64);
    // Each destination's packets: (start, length).
    let mut on_wire: [Vec<(u64, u64)>; 2] = Default::default();
    let mut now = net.now;
    let mut buf = vec![0u8; 8192];
    let n = &mut net.nodes[0];
    for _ in 0..100_000 {
        while posted < total && posted - done < 60 {
            n.engine.post_send(qa, wr(posted)).unwrap();
            posted += 1;
        }
        if let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) {
            let p = PacketRepr::parse(&buf[..len]).expect("valid packet");
            let to = usize::from(p.lrh.dlid == 3);
            on_wire[to].push((now.0, len as u64));
            now = now.plus_ns(len as u64 * NS_PER_KIB / 1024);
        } else if let Some(t) = n.engine.poll_timeout() {
            now = now.max(t);
            n.engine.handle_timeout(now);
        }
        while n.engine.poll_cq(cq).is_some() {
            done += 1;
        }
        if done == total {
            break;
        }
    }
    assert_eq!(done, total, "every SEND went");
    assert_eq!((on_wire[0].len(), on_wire[1].len()), (80, 320));
    for (to, (_, _, static_rate)) in dests.iter().enumerate() {
        let pkts = &on_wire[to];
        let ipd = u64::from(transport::engine::ipd(DEFAULT_PORT_MBPS, *static_rate));
        // Bytes per ns, first start to last start, against the path's rate.
        let span = pkts.last().unwrap().0 - pkts[0].0;
        let bytes: u64 = pkts[..pkts.len() - 1].iter().map(|p| p.1).sum();
        let got = bytes as f64 / span as f64;
        let want = f64::from(transport::engine::rate_mbps(*static_rate).unwrap()) / 8_000.0;
        assert!(
            (0.9..=1.0 + 1e-9).contains(&(got / want)),
            "to node {}: {got:.4} B/ns, its path {want:.4} B/ns",
            to + 1
        );
        for w in pkts.windows(2) {
            let t = w[0].1 * 8_000 / u64::from(DEFAULT_PORT_MBPS);
            assert!(
                w[1].0 - w[0].0 + 2 >= (ipd + 1) * t,
                "to node {}: {w:?}",
                to + 1
            );
        }
    }
}

/// Node 0's request packets and node 1's responses, parsed: (SLID, DestQP,
/// VL, SL).
fn lanes(net: &Net) -> Vec<(u16, u32, u8, u8)> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .map(|b| {
            let p = PacketRepr::parse(b).expect("valid packet");
            (p.lrh.slid, p.transport.bth.dest_qp, p.lrh.vl, p.lrh.sl)
        })
        .collect()
}

/// Posts a signaled RDMA WRITE of `len` bytes on `qp` of node 0.
fn write(net: &mut Net, qp: u32, id: u64, len: u32, ka: u32, kb: u32) {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(MEM_BASE, len, ka));
    w.remote_addr = MEM_BASE + (64 << 10);
    w.rkey = kb;
    net.nodes[0].engine.post_send(qp, w).unwrap();
}

/// AD-06: the LRH's VL is the SL-to-VL table's entry for the path's SL, on
/// requests and on the responses of the other side (its own table); an SL
/// the table leaves on VL0 goes on VL0; a table naming a VL the port does not
/// have (VL15 among them: it is not a data VL) is refused.
#[test]
fn ad_06_sl_to_vl_on_the_wire() {
    let mut net = Net::new(2, 1 << 20, 3);
    let mut table = [0u8; 16];
    table[3] = 2;
    table[5] = 1;
    for n in &mut net.nodes {
        n.engine.set_sl2vl(table).unwrap();
    }
    let mut bad = table;
    bad[7] = transport::engine::VL15;
    assert!(net.nodes[0].engine.set_sl2vl(bad).is_err());
    bad[7] = transport::engine::DEFAULT_DATA_VLS;
    assert!(net.nodes[0].engine.set_sl2vl(bad).is_err());
    assert_eq!(net.nodes[0].engine.port().sl2vl, table);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let kb = net.reg_all(1, ALL_ACCESS);
    let mut qps = Vec::new();
    for sl in [3u8, 5, 4] {
        let o = ConnOpts {
            sl,
            ..ConnOpts::default()
        };
        let p = connect(&mut net, 0, 1, &o);
        write(&mut net, p.qa, 1, 4096, ka, kb);
        wait(&mut net, 0, p.cq_a, 1);
        qps.push((p, sl));
    }
    let seen = lanes(&net);
    for (p, sl) in qps {
        let vl = table[usize::from(sl)];
        let req: Vec<_> = seen.iter().filter(|x| x.0 == 1 && x.1 == p.qb).collect();
        let resp: Vec<_> = seen.iter().filter(|x| x.0 == 2 && x.1 == p.qa).collect();
        assert!(!req.is_empty() && !resp.is_empty(), "SL {sl}: {seen:?}");
        for x in req.iter().chain(&resp) {
            assert_eq!((x.2, x.3), (vl, sl), "SL {sl} goes on VL {vl}: {x:?}");
        }
    }
}

/// AD-06: VL15 carries QP0's packets only and QP0's packets come on VL15
/// only: a request on VL15 for another QP, one for QP0 on a data VL and one on
/// a data VL the port does not have are dropped and counted; a packet for QP0
/// on VL15 passes the VL rules (and finds no QP0 in the engine).
#[test]
fn ad_06_vl15_only_for_qp0() {
    let mut net = Net::new(2, 1 << 20, 5);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    write(&mut net, p.qa, 1, 512, ka, kb);
    wait(&mut net, 0, p.cq_a, 1);
    let wire = net.sniffed.take().unwrap();
    let req = wire
        .iter()
        .find(|b| PacketRepr::parse(b).is_ok_and(|x| x.lrh.slid == 1))
        .expect("a request")
        .clone();
    let count = |net: &Net, r: RxDrop| net.nodes[1].engine.counters().dropped(r);
    let cases = [
        (15u8, p.qb, Some(RxDrop::Vl15NotQp0)),
        (0, 0, Some(RxDrop::Qp0NotVl15)),
        (3, 0, Some(RxDrop::Qp0NotVl15)),
        (DEFAULT_DATA_VLS, p.qb, Some(RxDrop::UnsupportedVl)),
        (14, p.qb, Some(RxDrop::UnsupportedVl)),
        (15, 0, None),
    ];
    for (vl, dest, want) in cases {
        let mut x = PacketRepr::parse(&req).unwrap();
        x.lrh.vl = vl;
        x.transport.bth.dest_qp = dest;
        let mut buf = vec![0; x.buffer_len()];
        let n = x.emit(&mut buf).unwrap();
        let before: Vec<u64> = RxDrop::ALL.iter().map(|r| count(&net, *r)).collect();
        let node = &mut net.nodes[1];
        node.engine.handle_packet(&buf[..n], &mut node.mem, net.now);
        let after: Vec<u64> = RxDrop::ALL.iter().map(|r| count(&net, *r)).collect();
        let moved: Vec<RxDrop> = RxDrop::ALL
            .iter()
            .zip(before.iter().zip(&after))
            .filter(|(_, (b, a))| a > b)
            .map(|(r, _)| *r)
            .collect();
        let want = want.unwrap_or(RxDrop::UnknownQp);
        assert_eq!(moved, vec![want], "VL {vl} to QP {dest}");
    }
}

/// AD-06: with three QPs on VL0 and one on VL1 all backlogged, the port's
/// default arbitration tables (every data VL weight 1 in the low-priority
/// table) take one packet from each VL in turn, so the
/// VL1 QP gets half of the wire, not the quarter a round robin over QPs
/// would give it.
#[test]
fn ad_06_vl_arbitration_round_robin() {
    let mut net = Net::new(2, 1 << 20, 9);
    let mut table = [0u8; 16];
    table[1] = 1;
    for n in &mut net.nodes {
        n.engine.set_sl2vl(table).unwrap();
    }
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let kb = net.reg_all(1, ALL_ACCESS);
    let mut pairs = Vec::new();
    for sl in [0u8, 0, 0, 1] {
        let o = ConnOpts {
            sl,
            ..ConnOpts::default()
        };
        pairs.push(connect(&mut net, 0, 1, &o));
    }
    for p in &pairs {
        // 16 packets: within a new QP's window (`INITIAL_WINDOW`), so all
        // are ready at once.
        write(&mut net, p.qa, 1, 16 << 10, ka, kb);
    }
    for p in &pairs {
        wait(&mut net, 0, p.cq_a, 1);
    }
    let vls: Vec<u8> = lanes(&net)
        .into_iter()
        .filter(|x| x.0 == 1)
        .map(|x| x.2)
        .collect();
    // 16 packets per QP; while the VL1 QP has packets (its 16), VL1 has
    // every other one: 16 of the first 32 (round robin over the QPs: 8).
    assert_eq!(vls.len(), 64, "{vls:?}");
    let head = &vls[..32];
    let on_vl1 = head.iter().filter(|&&v| v == 1).count();
    assert!(on_vl1 >= 15, "VL1 had {on_vl1} of 32: {vls:?}");
    assert!(
        head.windows(2).filter(|w| w[0] == w[1]).count() <= 1,
        "VLs alternate: {vls:?}"
    );
}

/// Node 0's packets on the wire, as (VL, bytes), when a UD QP per SL in
/// `sls` sends `n` SENDs of 1 KiB, all posted before the first goes, on a
/// link at the port's rate (the bench asks node 0 for a packet only when its
/// link has room: the QPs stay backlogged; UD has no window to stall them).
/// SL `s` goes on VL `s`; node 0 arbitrates with `tables` (None: the
/// default, every VL in turn).
fn ud_backlog_on_wire(tables: Option<VlArbTables>, sls: &[u8], n: u64) -> Vec<(u8, u64)> {
    let mut net = vl_bench(1 << 20, sls, tables);
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let mut cqs = Vec::new();
    for &sl in sls {
        let o = ConnOpts {
            qp_type: QpType::Ud,
            ..ConnOpts::default()
        };
        let p = connect(&mut net, 0, 1, &o);
        for i in 0..n {
            let mut w = send_wr(i, WrOpcode::Send, sge(MEM_BASE, 1024, ka));
            w.ud = Some(UdDest {
                av: AddressVector {
                    dlid: 2,
                    sl,
                    ..AddressVector::default()
                },
                remote_qpn: p.qb,
                remote_qkey: 0x1111_1111,
                pkey_index: None,
            });
            net.nodes[0].engine.post_send(p.qa, w).unwrap();
        }
        cqs.push(p.cq_a);
    }
    for cq in cqs {
        wait(&mut net, 0, cq, n as usize);
    }
    node0_on_wire(&mut net)
}

/// Two nodes of `mem_len` bytes on links at the port's rate (a node is
/// asked for a packet only when its link has room), sniffed; SL `s` of
/// `sls` goes on VL `s`; node 0 arbitrates with `tables` (None: the
/// default, every VL in turn).
fn vl_bench(mem_len: usize, sls: &[u8], tables: Option<VlArbTables>) -> Net {
    let mut net = Net::new(2, mem_len, 13);
    let mut sl2vl = [0u8; 16];
    for &sl in sls {
        sl2vl[usize::from(sl)] = sl;
    }
    for node in &mut net.nodes {
        node.engine.set_sl2vl(sl2vl).unwrap();
    }
    if let Some(t) = tables {
        net.nodes[0].engine.set_vl_arb(t).unwrap();
    }
    net.link = Some(LinkModel {
        ns_per_kib: NS_PER_KIB,
        queue_bytes: 8192,
    });
    net.sniffed = Some(Vec::new());
    net
}

/// Node 0's packets on the wire so far, as (VL, bytes).
fn node0_on_wire(net: &mut Net) -> Vec<(u8, u64)> {
    net.sniffed
        .take()
        .unwrap()
        .iter()
        .map(|b| (PacketRepr::parse(b).expect("valid packet"), b.len() as u64))
        .filter(|(p, _)| p.lrh.slid == 1)
        .map(|(p, len)| (p.lrh.vl, len))
        .collect()
}

/// VL0's and VL1's weights 3:1 in the low-priority table.
fn three_to_one() -> VlArbTables {
    VlArbTables {
        high: Vec::new(),
        low: vec![
            VlArbEntry { vl: 0, weight: 96 },
            VlArbEntry { vl: 1, weight: 32 },
        ],
        high_limit: 0,
    }
}

/// Bytes on VL `vl` in `wire`.
fn bytes_on(wire: &[(u8, u64)], vl: u8) -> u64 {
    wire.iter().filter(|x| x.0 == vl).map(|x| x.1).sum()
}

/// The part of `wire` while every VL of it still had packets to come: up to
/// the last packet of the VL that finished first.
fn while_all_backlogged(wire: &[(u8, u64)]) -> &[(u8, u64)] {
    let mut vls: Vec<u8> = wire.iter().map(|x| x.0).collect();
    vls.sort_unstable();
    vls.dedup();
    let end = vls
        .iter()
        .map(|&vl| wire.iter().rposition(|x| x.0 == vl).unwrap())
        .min()
        .unwrap();
    &wire[..=end]
}

/// AD-06 (IBA 7.6.9): two backlogged QPs on VL0 and VL1 whose low-priority
/// arbitration entries weigh 3:1 (96 and 32 units of 64 bytes) share the
/// wire 3:1 in bytes within 10 %, where the default tables share it 1:1.
#[test]
fn ad_06_vl_arbitration_weights_share_the_wire() {
    for (t, want) in [(Some(three_to_one()), 3.0), (None, 1.0)] {
        let wire = ud_backlog_on_wire(t, &[0, 1], 300);
        assert_eq!(wire.len(), 600);
        let both = while_all_backlogged(&wire);
        assert!(both.len() >= 200, "{} packets while both sent", both.len());
        let ratio = bytes_on(both, 0) as f64 / bytes_on(both, 1) as f64;
        assert!(
            (ratio / want - 1.0).abs() <= 0.10,
            "VL0 / VL1 bytes {ratio:.3}, want {want} +- 10 %: {:?}",
            &both[..40]
        );
    }
}

/// AD-06 (IBA 7.6.9, 14.2.5.6): a VL in the high-priority table goes before
/// one in the low-priority table, but only LimitOfHighPriority x 4 KiB at a
/// time while the low one waits: with limit 1, runs of high-priority packets
/// of just over 4 KiB (four 1 KiB SENDs) each followed by one low-priority
/// packet; with limit 0, one each in turn; unlimited, low priority waits
/// until high priority has nothing left.
#[test]
fn ad_06_high_priority_preempts_low_up_to_the_limit() {
    let tables = |high_limit| VlArbTables {
        high: vec![VlArbEntry { vl: 1, weight: 64 }],
        low: vec![VlArbEntry { vl: 0, weight: 64 }],
        high_limit,
    };
    // Runs of one VL while both were backlogged, as (VL, packets, bytes).
    let runs = |wire: &[(u8, u64)]| {
        let mut r: Vec<(u8, usize, u64)> = Vec::new();
        for &(vl, len) in while_all_backlogged(wire) {
            match r.last_mut() {
                Some(l) if l.0 == vl => {
                    l.1 += 1;
                    l.2 += len;
                }
                _ => r.push((vl, 1, len)),
            }
        }
        r
    };
    let wire = ud_backlog_on_wire(Some(tables(1)), &[0, 1], 200);
    let r = runs(&wire);
    assert!(r.len() >= 40, "{r:?}");
    // The last run may be cut short by the end of the backlog.
    for run in &r[..r.len() - 1] {
        match run.0 {
            1 => assert!(
                run.1 == 4 && run.2 >= 4096,
                "a high-priority run of {} packets, {} bytes: {r:?}",
                run.1,
                run.2
            ),
            _ => assert_eq!(run.1, 1, "one low-priority packet at a time: {r:?}"),
        }
    }
    let wire = ud_backlog_on_wire(Some(tables(0)), &[0, 1], 100);
    let r = runs(&wire);
    assert!(r.iter().all(|x| x.1 == 1), "strict turns: {r:?}");
    let wire = ud_backlog_on_wire(Some(tables(HIGH_LIMIT_UNLIMITED)), &[0, 1], 100);
    let first_low = wire.iter().position(|x| x.0 == 0).unwrap();
    assert_eq!(first_low, 100, "all of VL1 before VL0: {wire:?}");
}

/// AD-07 with a coarse clock: a driver that runs the engines only every 5 us
/// (a device's timer and wake-up latency), longer than the 3.3 us gap of a
/// 4 KiB packet at a quarter of 40 Gb/s. The packets that wake late catch up
/// (`pacing::PACE_SLACK_NS`), so the path still runs at a quarter of the
/// port's rate within 10 % rather than at one packet per wake-up (2/3 of it).
#[test]
fn ad_07_static_rate_holds_with_a_coarse_clock() {
    const IBV_RATE_10_GBPS: u8 = 3;
    const QUANTUM_NS: u64 = 5_000;
    let mut net = Net::new(2, 4 << 20, 11);
    let o = ConnOpts {
        mtu: Mtu::M4096,
        static_rate: IBV_RATE_10_GBPS,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let kb = net.reg_all(1, ALL_ACCESS);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, 1 << 20, ka));
    w.remote_addr = MEM_BASE + (2 << 20);
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let mut buf = vec![0u8; 8192];
    let mut sent: Vec<(u64, u64)> = Vec::new();
    let mut done = false;
    for k in 1..100_000u64 {
        let now = transport::verbs::Time(k * QUANTUM_NS);
        for i in 0..2 {
            net.nodes[i].engine.handle_timeout(now);
            loop {
                let n = &mut net.nodes[i];
                let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) else {
                    break;
                };
                if i == 0 {
                    sent.push((now.0, len as u64));
                }
                let peer = &mut net.nodes[1 - i];
                peer.engine.handle_packet(&buf[..len], &mut peer.mem, now);
            }
        }
        if net.poll(0, p.cq_a).is_some() {
            done = true;
            break;
        }
    }
    assert!(done, "the WRITE completes");
    let t = |len: u64| len * 8_000 / u64::from(DEFAULT_PORT_MBPS);
    let (first, last) = (sent[0], sent[sent.len() - 1]);
    let span = last.0 + t(last.1) - first.0;
    let rate = sent.iter().map(|s| s.1).sum::<u64>() as f64 / span as f64;
    let want = f64::from(DEFAULT_PORT_MBPS) / 8_000.0 / 4.0;
    assert!(
        (rate / want - 1.0).abs() <= 0.10,
        "{rate:.3} B/ns over {span} ns, want {want:.3} (a quarter of the port)"
    );
}

/// AD-07: READ responses to a paced path are paced too (the responder sends
/// on the same path): a 10 Gb/s path's READ responses leave at a quarter of
/// the rate of an unpaced path's.
#[test]
fn ad_07_static_rate_paces_read_responses() {
    const IBV_RATE_10_GBPS: u8 = 3;
    let full = data_on_wire(WrOpcode::RdmaRead, 0, 1 << 20);
    let paced = data_on_wire(WrOpcode::RdmaRead, IBV_RATE_10_GBPS, 1 << 20);
    assert_eq!(full.len(), paced.len());
    assert!(full.len() >= 256, "{} packets", full.len());
    let ratio = rate(&paced) / rate(&full);
    assert!(
        (0.225..=0.275).contains(&ratio),
        "READ responses: paced / unpaced = {ratio:.3}, want 0.25 +- 10 %"
    );
}

/// AD-06 (IBA 7.6.9): RC WRITEs follow the weights too: two QPs on VL0 and
/// VL1 (weights 96 and 32) with 1 MiB each to send, their windows and ACKs
/// in play, share node 0's link 3:1 in bytes within 10 % while both send.
#[test]
fn ad_06_vl_arbitration_weights_hold_for_rc_writes() {
    let mut net = vl_bench(4 << 20, &[0, 1], Some(three_to_one()));
    let ka = net.reg_all(0, Access::LOCAL_WRITE);
    let kb = net.reg_all(1, ALL_ACCESS);
    let mut pairs = Vec::new();
    for sl in [0u8, 1] {
        let o = ConnOpts {
            sl,
            ..ConnOpts::default()
        };
        let p = connect(&mut net, 0, 1, &o);
        for i in 0..16 {
            let w = write_wr(i, ka, 64 << 10, kb, MEM_BASE + (1 << 20));
            net.nodes[0].engine.post_send(p.qa, w).unwrap();
        }
        pairs.push(p);
    }
    for p in &pairs {
        wait(&mut net, 0, p.cq_a, 16);
    }
    let wire = node0_on_wire(&mut net);
    let both = while_all_backlogged(&wire);
    assert!(both.len() >= 500, "{} packets while both sent", both.len());
    let ratio = bytes_on(both, 0) as f64 / bytes_on(both, 1) as f64;
    assert!(
        (ratio / 3.0 - 1.0).abs() <= 0.10,
        "VL0 / VL1 bytes {ratio:.3}, want 3 +- 10 %"
    );
}
