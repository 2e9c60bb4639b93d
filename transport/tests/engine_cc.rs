//! Issue 31, DCQCN on RoCEv2 between two engines: ECN-capable frames, the
//! notification point's CNPs (RoCEv2 annex A17.9: BTH opcode 0x81, 16
//! reserved bytes, ICRC; at most one per QP per `np_min_time_between_cnps`),
//! and the reaction point's limit on the QP's pacing gate.

mod common;

use common::bottleneck::{ecn_of, mark_ce};
use common::*;
use std::net::Ipv4Addr;
use transport::cc::{dcqcn, CcConfig, Limit};
use transport::engine::{Limits, PortConfig, RxDrop};
use transport::verbs::{Sge, Time, WrOpcode};
use transport::wire::opcode::Opcode;
use transport::wire::roce::{EthernetRepr, IpRepr, Ipv4Repr, RoceRepr};
use transport::wire::{BthRepr, ExtHeaders, TransportRepr};

/// Two RoCE nodes (as `Net::new_roce`), DCQCN on where `on` says.
fn net(on: [bool; 2]) -> Net {
    let ports = (1..=2)
        .map(|i| {
            let mut p = PortConfig::ethernet(roce_mac(i));
            p.lid = i as u16;
            p.roce_gids[0] = Some(roce_gid_v4(i));
            if on[i - 1] {
                p.cc = CcConfig {
                    dcqcn: Some(dcqcn::Params::default()),
                    ..CcConfig::default()
                };
            }
            p
        })
        .collect();
    Net::with_ports(ports, 1 << 20, 7, Limits::default())
}

/// Marks CE on every ECN-capable frame node 0 sends (a congested hop on its
/// way to node 1). A `Vec` because `Net::rewrite` takes one.
#[allow(clippy::ptr_arg)]
fn mark_node0(f: &mut Vec<u8>) {
    if f.get(6..12) == Some(&roce_mac(1)[..]) {
        mark_ce(f);
    }
}

fn write(net: &mut Net, p: &Pair, len: u32) {
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let sges = vec![Sge {
        addr: MEM_BASE,
        length: len,
        lkey: ka,
    }];
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sges);
    w.remote_addr = MEM_BASE + 0x8_0000;
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
}

/// A CNP from node 2 to QP `dest_qp` of node 1, in partition `pkey`.
fn cnp_frame(dest_qp: u32, pkey: u16) -> Vec<u8> {
    let r = RoceRepr {
        eth: EthernetRepr {
            dst: roce_mac(1),
            src: roce_mac(2),
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(10, 0, 0, 1),
            tos: 48 << 2,
            ident: 0,
            dont_frag: true,
            ttl: 64,
        }),
        udp_src_port: 0xc000,
        udp_checksum: false,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::CNP,
                solicited: false,
                mig_req: false,
                pkey,
                fecn: false,
                becn: true,
                dest_qp,
                ack_req: false,
                psn: 0,
            },
            ext: ExtHeaders {
                cnp: true,
                ..ExtHeaders::default()
            },
            payload: &[],
        },
    };
    let mut b = vec![0; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

#[test]
fn dcqcn_on_makes_the_ports_frames_ect0_and_off_leaves_them_not_ect() {
    for on in [true, false] {
        let mut n = net([on, on]);
        n.sniffed = Some(Vec::new());
        let p = connect(&mut n, 0, 1, &ConnOpts::default());
        write(&mut n, &p, 8192);
        wait_cqe(&mut n, 0, p.cq_a);
        let frames = n.sniffed.take().unwrap();
        assert!(frames.len() >= 9); // 8 requests, an ACK
        let want = if on { 0b10 } else { 0 };
        assert!(frames.iter().all(|f| ecn_of(f) == Some(want)), "on {on}");
    }
}

#[test]
fn a_ce_mark_is_answered_by_a_cnp_to_the_source_qp_at_most_once_per_interval() {
    let mut n = net([true, true]);
    n.sniffed = Some(Vec::new());
    n.rewrite = Some(mark_node0);
    let p = connect(&mut n, 0, 1, &ConnOpts::default());
    assert_eq!(n.nodes[0].engine.cc_limit(p.qa), Some(Limit::None));
    let start = n.now;
    write(&mut n, &p, 256 * 1024);
    wait_cqe(&mut n, 0, p.cq_a);
    let span = n.now.0 - start.0;
    let frames = n.sniffed.take().unwrap();
    let requests = frames
        .iter()
        .filter(|f| f.get(6..12) == Some(&roce_mac(1)[..]))
        .count() as u64;
    let rx = n.nodes[1].engine.counters().cc;
    assert_eq!(rx.ce_seen, requests, "every marked request seen");
    // At most one CNP per 4 us (np_min_time_between_cnps), and some.
    assert!(
        rx.cnps_sent >= 2 && rx.cnps_sent <= span / 4_000 + 1,
        "{rx:?} over {span} ns"
    );
    let mut cnps = 0;
    for f in &frames {
        let r = RoceRepr::parse(f).expect("a valid frame (ICRC)");
        if r.transport.bth.opcode != Opcode::CNP {
            continue;
        }
        cnps += 1;
        // A17.9: to the marked packet's source QP, its P_Key, PSN 0, BECN;
        // 16 reserved zero bytes after the BTH; DSCP 48, not ECN-capable.
        let b = &r.transport.bth;
        assert_eq!(
            (b.dest_qp, b.pkey, b.psn, b.becn, b.ack_req),
            (p.qa, 0xffff, 0, true, false)
        );
        assert!(r.transport.ext.cnp && r.transport.payload.is_empty());
        assert_eq!(f.len(), 14 + 20 + 8 + 12 + 16 + 4);
        assert!(f[14 + 20 + 8 + 12..][..16].iter().all(|&x| x == 0));
        assert_eq!((r.ip.dscp(), r.ip.ecn()), (48, 0));
        assert_eq!((r.eth.src, r.eth.dst), (roce_mac(2), roce_mac(1)));
    }
    assert_eq!(cnps, rx.cnps_sent);
    // The requester took each CNP and cut its rate.
    let tx = n.nodes[0].engine.counters().cc;
    assert_eq!(tx.cnps_received, rx.cnps_sent);
    assert!(tx.rate_cuts >= 1);
    assert!(matches!(n.nodes[0].engine.cc_limit(p.qa), Some(Limit::Kbps(k)) if k < 40_000_000));
}

#[test]
fn a_cnp_spaces_the_qps_next_packets_at_its_cut_rate() {
    let mut n = net([true, true]);
    let p = connect(&mut n, 0, 1, &ConnOpts::default());
    let now = n.now;
    let e = &mut n.nodes[0];
    e.engine
        .handle_packet(&cnp_frame(p.qa, 0xffff), &mut e.mem, now);
    // The first CNP: alpha 1023/1024 cuts 40 Gb/s to 40 * (1 - alpha/2).
    let kbps = 40_000_000 - 40_000_000 * 1023 / 2048;
    assert_eq!(e.engine.cc_limit(p.qa), Some(Limit::Kbps(kbps)));
    assert_eq!(e.engine.counters().cc.rate_cuts, 1);
    write(&mut n, &p, 4096);
    let e = &mut n.nodes[0];
    let mut buf = vec![0; 8192];
    let len = e
        .engine
        .poll_transmit(&mut e.mem, now, &mut buf)
        .expect("the first goes");
    // The second waits its gap: len * 8 bits at the cut rate.
    assert_eq!(e.engine.poll_transmit(&mut e.mem, now, &mut buf), None);
    let gap = (len as u64 * 8_000_000).div_ceil(kbps);
    e.engine.settle_timers();
    assert_eq!(e.engine.poll_timeout(), Some(Time(now.0 + gap)));
    let at = Time(now.0 + gap);
    e.engine.handle_timeout(at);
    assert!(e.engine.poll_transmit(&mut e.mem, at, &mut buf).is_some());
}

#[test]
fn a_cnp_for_an_unknown_qp_or_another_partition_is_dropped_and_counted() {
    let mut n = net([true, true]);
    let p = connect(&mut n, 0, 1, &ConnOpts::default());
    let now = n.now;
    let e = &mut n.nodes[0];
    e.engine
        .handle_packet(&cnp_frame(0x12_3456, 0xffff), &mut e.mem, now);
    e.engine
        .handle_packet(&cnp_frame(p.qa, 0x1234), &mut e.mem, now);
    let c = e.engine.counters();
    assert_eq!(c.dropped(RxDrop::UnknownQp), 1);
    assert_eq!(c.dropped(RxDrop::BadPkey), 1);
    assert_eq!((c.cc.cnps_received, c.cc.rate_cuts), (0, 0));
    assert_eq!(e.engine.cc_limit(p.qa), Some(Limit::None));
}

#[test]
fn a_receiver_without_dcqcn_counts_ce_but_sends_no_cnp() {
    let mut n = net([true, false]);
    n.rewrite = Some(mark_node0);
    let p = connect(&mut n, 0, 1, &ConnOpts::default());
    write(&mut n, &p, 16 * 1024);
    wait_cqe(&mut n, 0, p.cq_a);
    let rx = n.nodes[1].engine.counters().cc;
    assert!(rx.ce_seen >= 16);
    assert_eq!(rx.cnps_sent, 0);
    assert_eq!(n.nodes[0].engine.counters().cc.cnps_received, 0);
}
