//! UD multicast (AD-08, PV-07) between engines over the simulated fabric, which
//! carries a multicast packet to every node as the device's links do, and the
//! GRH rules of connected QPs (PV-04) with crafted packets.

mod common;

use common::*;
use transport::engine::{Limits, RxDrop, MULTICAST_QPN};
use transport::verbs::{
    AddressVector, AttrMask, Completion, GlobalRoute, QpAttr, QpType, RecvWr, Sge, UdDest,
    VerbError, WcFlags, WcStatus, WrOpcode,
};
use transport::wire::crc::{icrc_native, vcrc};
use transport::wire::opcode::Opcode;
use transport::wire::{
    BthRepr, DropReason as WireDrop, ExtHeaders, GrhRepr, LrhRepr, PacketRepr, TransportRepr,
};

const MGID: [u8; 16] = [
    0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0, 1,
];
const MLID: u16 = 0xc001;
const QKEY: u32 = 0x1111_1111;

fn post_recvs(net: &mut Net, node: usize, qp: u32, key: u32, n: u64) {
    for i in 0..n {
        let addr = MEM_BASE + 0x10000 + i * 0x1000;
        recv(net, node, qp, 1000 + i, addr, 0x1000, key);
    }
}

/// A UD SEND of 64 bytes from `qp` on `node` to the group `dgid` (a GRH when
/// `grh`), DLID `dlid`, DestQP 0xFFFFFF.
fn send_to_group(
    net: &mut Net,
    node: usize,
    qp: u32,
    key: u32,
    id: u64,
    dlid: u16,
    dgid: Option<[u8; 16]>,
) {
    let mut w = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 64, key));
    let mut av = AddressVector {
        dlid,
        ..AddressVector::default()
    };
    if net.nodes[node].engine.port().is_ethernet() {
        av = roce_av(1, 0);
    }
    av.grh = dgid.map(|dgid| GlobalRoute {
        dgid,
        hop_limit: 1,
        ..GlobalRoute::default()
    });
    w.ud = Some(UdDest {
        av,
        remote_qpn: MULTICAST_QPN,
        remote_qkey: QKEY,
        pkey_index: None,
    });
    net.nodes[node].engine.post_send(qp, w).unwrap();
}

/// Runs the fabric until it is idle; returns what each (node, CQ) received.
fn settle(net: &mut Net) {
    net.run_until(1_000_000, |_| false);
}

fn recvs(net: &mut Net, node: usize, cq: u32) -> Vec<Completion> {
    std::iter::from_fn(|| net.poll(node, cq))
        .filter(|c| c.opcode == transport::verbs::WcOpcode::Recv)
        .collect()
}

fn dropped(net: &Net, node: usize, r: RxDrop) -> u64 {
    net.nodes[node].engine.counters().dropped(r)
}

/// Three nodes: node 0 sends from QP `s` (itself attached) and has a second
/// attached QP; node 1 has one attached QP and one that is not; node 2 one
/// attached QP. Every attached QP but the sender gets one copy with the
/// sender's QPN and the GRH flag; the QP not attached and the sender get
/// nothing. After node 1's QP detaches, node 1 no longer receives (the
/// packet finds no attached QP there and is dropped, counted).
#[test]
fn pv_07_ad_08_multicast_reaches_every_attached_qp_and_detach_stops_it() {
    let mut net = Net::new(3, 1 << 20, 5);
    let keys: Vec<u32> = (0..3).map(|i| net.reg_all(i, ALL_ACCESS)).collect();
    let (s, cq_s) = ud_qp(&mut net, 0);
    let (a0, cq_a0) = ud_qp(&mut net, 0);
    let (a1, cq_a1) = ud_qp(&mut net, 1);
    let (n1, cq_n1) = ud_qp(&mut net, 1);
    let (a2, cq_a2) = ud_qp(&mut net, 2);
    for (node, qp) in [(0, s), (0, a0), (1, a1), (2, a2)] {
        net.nodes[node].engine.attach_mcast(qp, MGID, MLID).unwrap();
    }
    for (node, qp) in [(0, s), (0, a0), (1, a1), (1, n1), (2, a2)] {
        post_recvs(&mut net, node, qp, keys[node], 4);
    }
    fill(&mut net, 0, MEM_BASE, 64, 9);
    send_to_group(&mut net, 0, s, keys[0], 1, MLID, Some(MGID));
    settle(&mut net);
    let sent = bytes(&net, 0, MEM_BASE, 64);
    for (node, cq, qp) in [(0, cq_a0, a0), (1, cq_a1, a1), (2, cq_a2, a2)] {
        let got = recvs(&mut net, node, cq);
        assert_eq!(got.len(), 1, "QP {qp} on node {node}: {got:?}");
        let c = &got[0];
        assert_eq!(
            (c.status, c.src_qp, c.slid, c.byte_len),
            (WcStatus::Success, s, 1, 64 + 40)
        );
        assert!(c.flags.0 & WcFlags::GRH.0 != 0);
        // C9-59: the DGID of the GRH in front of the data is the group's.
        let grh = bytes(&net, node, MEM_BASE + 0x10000, 40);
        assert_eq!(&grh[24..40], &MGID[..]);
        assert_eq!(bytes(&net, node, MEM_BASE + 0x10000 + 40, 64), sent);
    }
    assert!(recvs(&mut net, 1, cq_n1).is_empty(), "not attached");
    let own: Vec<_> = std::iter::from_fn(|| net.poll(0, cq_s)).collect();
    assert!(
        own.iter()
            .all(|c| c.opcode == transport::verbs::WcOpcode::Send),
        "the sender does not get its own packet: {own:?}"
    );
    assert_eq!(net.nodes[0].engine.counters().mcast_own_skipped, 1);
    assert_eq!(net.nodes[0].engine.counters().mcast_rx_copies, 1);

    // Detach: node 1 stops receiving, nodes 0 and 2 go on.
    net.nodes[1].engine.detach_mcast(a1, MGID, MLID).unwrap();
    assert_eq!(
        net.nodes[1].engine.detach_mcast(a1, MGID, MLID),
        Err(VerbError::InvalidAttr)
    );
    let before = dropped(&net, 1, RxDrop::Multicast);
    send_to_group(&mut net, 0, s, keys[0], 2, MLID, Some(MGID));
    settle(&mut net);
    assert!(recvs(&mut net, 1, cq_a1).is_empty(), "detached");
    assert_eq!(dropped(&net, 1, RxDrop::Multicast), before + 1);
    assert_eq!(recvs(&mut net, 0, cq_a0).len(), 1);
    assert_eq!(recvs(&mut net, 2, cq_a2).len(), 1);
}

/// PV-07: a multicast packet without a GRH (C9-43.1.1), with a unicast DGID
/// (C9-58), or to another MLID than the group's is dropped and counted at
/// every receiver; none reaches a QP.
#[test]
fn pv_07_multicast_without_grh_or_group_dgid_or_mlid_is_dropped() {
    let mut net = Net::new(2, 1 << 20, 6);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (s, _) = ud_qp(&mut net, 0);
    let (r, cq_r) = ud_qp(&mut net, 1);
    net.nodes[1].engine.attach_mcast(r, MGID, MLID).unwrap();
    post_recvs(&mut net, 1, r, kb, 8);
    let unicast = net.nodes[1].engine.port().gid();
    send_to_group(&mut net, 0, s, ka, 1, MLID, None);
    send_to_group(&mut net, 0, s, ka, 2, MLID, Some(unicast));
    send_to_group(&mut net, 0, s, ka, 3, MLID + 1, Some(MGID));
    let other = {
        let mut g = MGID;
        g[15] = 9;
        g
    };
    send_to_group(&mut net, 0, s, ka, 4, MLID, Some(other));
    settle(&mut net);
    assert!(recvs(&mut net, 1, cq_r).is_empty());
    assert_eq!(dropped(&net, 1, RxDrop::McastNoGrh), 1);
    assert_eq!(dropped(&net, 1, RxDrop::McastBadDgid), 1);
    assert_eq!(dropped(&net, 1, RxDrop::BadDlid), 1);
    assert_eq!(dropped(&net, 1, RxDrop::Multicast), 1);
    // A good one still goes through.
    send_to_group(&mut net, 0, s, ka, 5, MLID, Some(MGID));
    settle(&mut net);
    assert_eq!(recvs(&mut net, 1, cq_r).len(), 1);
}

/// PV-07: each copy passes its QP's own checks: an attached QP with another
/// Q_Key drops its copy (counted) while the others get theirs.
#[test]
fn pv_07_each_attached_qp_checks_its_copy() {
    let mut net = Net::new(2, 1 << 20, 7);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (s, _) = ud_qp(&mut net, 0);
    let (r, cq_r) = ud_qp(&mut net, 1);
    let (q, cq_q) = ud_qp(&mut net, 1);
    let attr = QpAttr {
        qkey: 0x2222,
        ..QpAttr::default()
    };
    let now = net.now;
    net.nodes[1]
        .engine
        .modify_qp(q, &attr, AttrMask::QKEY, now)
        .unwrap();
    for qp in [r, q] {
        net.nodes[1].engine.attach_mcast(qp, MGID, MLID).unwrap();
        post_recvs(&mut net, 1, qp, kb, 2);
    }
    send_to_group(&mut net, 0, s, ka, 1, MLID, Some(MGID));
    settle(&mut net);
    assert_eq!(recvs(&mut net, 1, cq_r).len(), 1);
    assert!(recvs(&mut net, 1, cq_q).is_empty());
    assert_eq!(dropped(&net, 1, RxDrop::BadQkey), 1);
}

/// AD-08: attach and detach refuse what is not a UD QP and a multicast
/// address, keep the group's MLID, are bounded by the limits
/// (max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach), and a
/// destroyed QP leaves its groups.
#[test]
fn ad_08_attach_rules_and_limits() {
    let limits = Limits {
        max_mcast_grp: 2,
        max_mcast_qp_attach: 2,
        max_total_mcast_qp_attach: 3,
        ..Limits::default()
    };
    let mut net = Net::with_limits(1, 1 << 20, 8, limits);
    let (a, _) = ud_qp(&mut net, 0);
    let (b, _) = ud_qp(&mut net, 0);
    let (c, _) = ud_qp(&mut net, 0);
    let (rc, _) = new_qp(&mut net, 0, QpType::Rc, qp_cap(4, 1, 0), true);
    let e = &mut net.nodes[0].engine;
    let g = |i: u8| {
        let mut g = MGID;
        g[15] = i;
        g
    };
    assert_eq!(e.attach_mcast(rc, g(1), MLID), Err(VerbError::InvalidAttr));
    let unicast = e.port().gid();
    assert_eq!(
        e.attach_mcast(a, unicast, MLID),
        Err(VerbError::InvalidAttr)
    );
    assert_eq!(e.attach_mcast(a, g(1), 0x1234), Err(VerbError::InvalidAttr));
    assert_eq!(e.attach_mcast(a, g(1), 0xffff), Err(VerbError::InvalidAttr));
    assert_eq!(
        e.attach_mcast(999, g(1), MLID),
        Err(VerbError::InvalidHandle)
    );
    e.attach_mcast(a, g(1), MLID).unwrap();
    e.attach_mcast(a, g(1), MLID).unwrap(); // twice: no error, one attachment
    assert_eq!(
        e.attach_mcast(b, g(1), MLID + 1),
        Err(VerbError::InvalidAttr)
    );
    e.attach_mcast(b, g(1), MLID).unwrap();
    assert_eq!(
        e.attach_mcast(c, g(1), MLID),
        Err(VerbError::InsufficientResources),
        "max_mcast_qp_attach"
    );
    e.attach_mcast(a, g(2), MLID + 1).unwrap();
    assert_eq!(
        e.attach_mcast(a, g(3), MLID + 2),
        Err(VerbError::InsufficientResources),
        "max_mcast_grp"
    );
    assert_eq!(
        e.attach_mcast(b, g(2), MLID + 1),
        Err(VerbError::InsufficientResources),
        "max_total_mcast_qp_attach"
    );
    assert_eq!(e.mcast_members(&g(1)), vec![a, b]);
    assert_eq!(
        e.detach_mcast(b, g(1), MLID + 1),
        Err(VerbError::InvalidAttr)
    );
    // Destroying `a` frees two attachments and group 2.
    e.destroy_qp(a).unwrap();
    assert_eq!(e.mcast_members(&g(1)), vec![b]);
    assert!(e.mcast_members(&g(2)).is_empty());
    e.attach_mcast(c, g(3), MLID + 2).unwrap();
    e.attach_mcast(c, g(1), MLID).unwrap();
}

/// PV-07 on RoCE (WF-10): the group is an IPv4 multicast address as an
/// IPv4-mapped GID; the frame goes to its Ethernet multicast MAC
/// (01:00:5E + the low 23 bits) and reaches the attached QPs of both other
/// nodes, not a node without one.
#[test]
fn pv_07_roce_multicast_goes_to_the_groups_mac_and_every_member() {
    let mut net = Net::new_roce(4, 1 << 20, 9);
    let keys: Vec<u32> = (0..4).map(|i| net.reg_all(i, ALL_ACCESS)).collect();
    let mgid: [u8; 16] = std::net::Ipv4Addr::new(239, 129, 2, 3)
        .to_ipv6_mapped()
        .octets();
    let (s, _) = ud_qp(&mut net, 0);
    let mut members = Vec::new();
    for (node, &key) in keys.iter().enumerate().skip(1) {
        let (q, cq) = ud_qp(&mut net, node);
        post_recvs(&mut net, node, q, key, 2);
        if node != 3 {
            net.nodes[node].engine.attach_mcast(q, mgid, 0).unwrap();
        }
        members.push((node, cq));
    }
    net.sniffed = Some(Vec::new());
    send_to_group(&mut net, 0, s, keys[0], 1, 0, Some(mgid));
    settle(&mut net);
    let frames = net.sniffed.take().unwrap();
    assert_eq!(frames.len(), 1);
    assert_eq!(&frames[0][..6], &[0x01, 0x00, 0x5e, 0x01, 2, 3]);
    for (node, cq) in members {
        let got = recvs(&mut net, node, cq);
        let want = usize::from(node != 3);
        assert_eq!(got.len(), want, "node {node}: {got:?}");
    }
    assert_eq!(dropped(&net, 3, RxDrop::Multicast), 1);
}

// ------------------------------------------------------------------ PV-04

/// Brings an RC QP to RTS with a path to `remote` that carries a GRH with
/// DGID `dgid` when given.
fn rc_up(net: &mut Net, node: usize, qp: u32, remote: u16, rqp: u32, dgid: Option<[u8; 16]>) {
    let av = AddressVector {
        dlid: remote,
        grh: dgid.map(|dgid| GlobalRoute {
            dgid,
            hop_limit: 1,
            ..GlobalRoute::default()
        }),
        ..AddressVector::default()
    };
    walk_to_rts(
        net,
        node,
        qp,
        &rc_attr(av, rqp, 100),
        RC_RTR_MASK,
        RC_RTS_MASK,
    );
}

fn rc_qp(net: &mut Net, node: usize) -> (u32, u32) {
    new_qp(net, node, QpType::Rc, qp_cap(16, 1, 0), true)
}

/// A crafted RC SEND ONLY from node 0 (LID 1) to `qp` on node 1 at PSN 100,
/// with `grh` if given, then `edit` applied and both CRCs made right again.
fn crafted_send(qp: u32, grh: Option<GrhRepr>, edit: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let pkt = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: 0,
            dlid: 2,
            slid: 1,
        },
        grh,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: qp,
                ack_req: true,
                psn: 100,
            },
            ext: ExtHeaders::default(),
            payload: &[7; 8],
        },
    };
    let mut buf = vec![0; pkt.buffer_len()];
    let n = pkt.emit(&mut buf).unwrap();
    buf.truncate(n);
    edit(&mut buf);
    let icrc = icrc_native(&buf[..n - 6], grh.is_some());
    buf[n - 6..n - 2].copy_from_slice(&icrc.to_le_bytes());
    let v = vcrc(&buf[..n - 2]);
    buf[n - 2..].copy_from_slice(&v.to_le_bytes());
    buf
}

fn inject(net: &mut Net, node: usize, pkt: &[u8]) {
    let now = net.now;
    let n = &mut net.nodes[node];
    n.engine.handle_packet(pkt, &mut n.mem, now);
}

fn answers(net: &mut Net, node: usize) -> usize {
    let mut buf = vec![0u8; 8192];
    let now = net.now;
    let n = &mut net.nodes[node];
    std::iter::from_fn(|| n.engine.poll_transmit(&mut n.mem, now, &mut buf)).count()
}

fn gids(net: &Net) -> ([u8; 16], [u8; 16]) {
    (
        net.nodes[0].engine.port().gid(),
        net.nodes[1].engine.port().gid(),
    )
}

/// PV-04 (9.6.1.2, C9-43.1.2): an RC QP whose path has no GRH drops a packet
/// with one, and a QP whose path has one drops a packet without; each drop
/// is counted and nothing is answered or received. Matching packets pass.
#[test]
fn pv_04_rc_grh_presence_must_match_the_qp() {
    let mut net = Net::new(2, 1 << 20, 10);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (ga, gb) = gids(&net);
    let (plain, cq_plain) = rc_qp(&mut net, 1);
    let (global, cq_global) = rc_qp(&mut net, 1);
    rc_up(&mut net, 1, plain, 1, 50, None);
    rc_up(&mut net, 1, global, 1, 51, Some(ga));
    for qp in [plain, global] {
        recv(&mut net, 1, qp, 1, MEM_BASE + 0x1000, 64, kb);
    }
    let grh = GrhRepr {
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 1,
        sgid: ga,
        dgid: gb,
    };
    inject(&mut net, 1, &crafted_send(plain, Some(grh), |_| {}));
    inject(&mut net, 1, &crafted_send(global, None, |_| {}));
    assert_eq!(dropped(&net, 1, RxDrop::GrhMismatch), 2);
    assert_eq!(answers(&mut net, 1), 0);
    assert!(net.poll(1, cq_plain).is_none() && net.poll(1, cq_global).is_none());
    inject(&mut net, 1, &crafted_send(plain, None, |_| {}));
    inject(&mut net, 1, &crafted_send(global, Some(grh), |_| {}));
    assert_eq!(answers(&mut net, 1), 2, "two ACKs");
    assert_eq!(
        net.poll(1, cq_plain).map(|c| c.status),
        Some(WcStatus::Success)
    );
    assert_eq!(
        net.poll(1, cq_global).map(|c| c.status),
        Some(WcStatus::Success)
    );
}

/// PV-04 (C9-47.1.1): with a GRH, an RC QP checks the DGID against the
/// port's GID and the SGID against its path's remote GID (also with the
/// default prefix in front of the same low 64 bits); a reserved, loopback or
/// multicast GID is never valid. Each drop is counted and unanswered.
#[test]
fn pv_04_rc_grh_gids_are_checked() {
    let mut net = Net::new(2, 1 << 20, 11);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (ga, gb) = gids(&net);
    let (qp, cq) = rc_qp(&mut net, 1);
    rc_up(&mut net, 1, qp, 1, 50, Some(ga));
    recv(&mut net, 1, qp, 1, MEM_BASE + 0x1000, 64, kb);
    let good = GrhRepr {
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 1,
        sgid: ga,
        dgid: gb,
    };
    let mut loopback = [0u8; 16];
    loopback[15] = 1;
    let mut other = gb;
    other[15] ^= 0x55;
    let bad = [
        GrhRepr {
            dgid: [0; 16],
            ..good
        },
        GrhRepr {
            dgid: loopback,
            ..good
        },
        GrhRepr { dgid: MGID, ..good },
        GrhRepr {
            dgid: other,
            ..good
        },
        GrhRepr { sgid: MGID, ..good },
        GrhRepr {
            sgid: loopback,
            ..good
        },
        GrhRepr { sgid: gb, ..good },
    ];
    for g in bad {
        inject(&mut net, 1, &crafted_send(qp, Some(g), |_| {}));
    }
    assert_eq!(dropped(&net, 1, RxDrop::BadGrhGid), bad.len() as u64);
    assert_eq!(answers(&mut net, 1), 0);
    assert!(net.poll(1, cq).is_none());
    inject(&mut net, 1, &crafted_send(qp, Some(good), |_| {}));
    assert_eq!(answers(&mut net, 1), 1);
    assert_eq!(net.poll(1, cq).map(|c| c.status), Some(WcStatus::Success));
}

/// PV-04 (C9-44, C9-45): a GRH whose IPVer is not 6 or whose NxtHdr is not
/// 0x1B is dropped (counted by the wire checks) with its CRCs right.
#[test]
fn pv_04_grh_ipver_and_next_header_are_checked() {
    let mut net = Net::new(2, 1 << 20, 12);
    let (ga, gb) = gids(&net);
    let (qp, _) = rc_qp(&mut net, 1);
    rc_up(&mut net, 1, qp, 1, 50, Some(ga));
    let g = GrhRepr {
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 1,
        sgid: ga,
        dgid: gb,
    };
    let at = LrhRepr::LEN;
    inject(
        &mut net,
        1,
        &crafted_send(qp, Some(g), |b| b[at] = 0x40 | (b[at] & 0x0f)),
    );
    inject(
        &mut net,
        1,
        &crafted_send(qp, Some(g), |b| b[at + 6] = 0x11),
    );
    let w = &net.nodes[1].engine.counters().wire_drops;
    assert_eq!(
        (w.get(WireDrop::BadIpVer), w.get(WireDrop::BadNextHeader)),
        (1, 1)
    );
    assert_eq!(answers(&mut net, 1), 0);
}

/// PV-04 with two engines: an RC pair whose paths both carry GRHs with the
/// right GIDs moves data both ways (requests and ACKs pass the checks).
#[test]
fn pv_04_rc_pair_with_grh_paths_works_end_to_end() {
    let mut net = Net::new(2, 1 << 20, 13);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (ga, gb) = gids(&net);
    let (qa, cqa) = rc_qp(&mut net, 0);
    let (qb, cqb) = rc_qp(&mut net, 1);
    rc_up(&mut net, 0, qa, 2, qb, Some(gb));
    rc_up(&mut net, 1, qb, 1, qa, Some(ga));
    net.nodes[1]
        .engine
        .post_recv(
            qb,
            RecvWr {
                wr_id: 7,
                sges: vec![Sge {
                    addr: MEM_BASE + 0x8000,
                    length: 4096,
                    lkey: kb,
                }],
            },
        )
        .unwrap();
    fill(&mut net, 0, MEM_BASE, 3000, 3);
    net.nodes[0]
        .engine
        .post_send(qa, send_wr(1, WrOpcode::Send, sge(MEM_BASE, 3000, ka)))
        .unwrap();
    let b = wait(&mut net, 1, cqb, 1);
    let a = wait(&mut net, 0, cqa, 1);
    assert_eq!(
        (a[0].status, b[0].status, b[0].byte_len),
        (WcStatus::Success, WcStatus::Success, 3000)
    );
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x8000, 3000),
        bytes(&net, 0, MEM_BASE, 3000)
    );
    let total: u64 = (0..2)
        .map(|n| {
            RxDrop::ALL
                .iter()
                .map(|r| dropped(&net, n, *r))
                .sum::<u64>()
        })
        .sum();
    assert_eq!(total, 0);
}

/// PV-04 (C9-43, C9-46): a UD QP checks neither whether a GRH is there nor,
/// for a unicast packet, its GIDs: a SEND with a GRH to any unicast DGID and
/// one without both arrive.
#[test]
fn pv_04_ud_unicast_grh_is_not_checked() {
    let mut net = Net::new(2, 1 << 20, 14);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (s, _) = ud_qp(&mut net, 0);
    let (r, cq_r) = ud_qp(&mut net, 1);
    post_recvs(&mut net, 1, r, kb, 2);
    let mut elsewhere = net.nodes[1].engine.port().gid();
    elsewhere[..8].copy_from_slice(&0x2001_0db8_0000_0000u64.to_be_bytes());
    for (id, grh) in [(1, Some(elsewhere)), (2, None)] {
        let mut w = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 8, ka));
        w.ud = Some(UdDest {
            av: AddressVector {
                dlid: 2,
                grh: grh.map(|dgid| GlobalRoute {
                    dgid,
                    hop_limit: 1,
                    ..GlobalRoute::default()
                }),
                ..AddressVector::default()
            },
            remote_qpn: r,
            remote_qkey: QKEY,
            pkey_index: None,
        });
        net.nodes[0].engine.post_send(s, w).unwrap();
    }
    settle(&mut net);
    let got = recvs(&mut net, 1, cq_r);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_ne!(got[0].flags.0 & WcFlags::GRH.0, 0);
    assert_eq!(got[1].flags.0 & WcFlags::GRH.0, 0);
}
