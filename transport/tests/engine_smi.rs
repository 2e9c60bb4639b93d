//! QP0, the Subnet Management Interface's QP, in the engine (issue 26 item 1;
//! AD-09, AD-06, PV-03, PV-05): one per port with the number 0, UD, its packets on
//! VL15 whatever the SL, neither its P_Key (C9-41) nor its Q_Key (C9-48) checked
//! on receipt, and VL15 for QP0 only both ways (IBA 7.6.4), each refusal counted;
//! the permissive DLID is for QP0 alone (PV-06).

mod common;

use common::*;
use transport::engine::{Limits, PortConfig, RxDrop, GSI_QKEY, PERMISSIVE_LID, SMI_QPN, VL15};
use transport::verbs::{
    AddressVector, AttrMask, QpAttr, QpState, QpType, RecvWr, SendWr, UdDest, VerbError, WcStatus,
    WrOpcode,
};
use transport::wire::PacketRepr;

const REMOTE: u64 = MEM_BASE + 0x10_0000;

fn port(lid: u16, pkeys: &[u16]) -> PortConfig {
    let mut p = PortConfig::new(lid, 0x0002_c903_0000_0000 + u64::from(lid));
    p.pkeys = pkeys.to_vec();
    // Two data VLs with SL 1 on VL1: an SMP's SL must not pick its VL.
    p.sl2vl[1] = 1;
    p
}

/// Which UD QP [`ud_qp`] creates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// QP0, the SMI's.
    Smi,
    /// QP1, the GSI's.
    Gsi,
    /// An ordinary UD QP.
    Data,
}

/// A UD QP of `kind` brought to RTS with this Q_Key.
fn ud_qp(net: &mut Net, node: usize, kind: Kind, qkey: u32) -> (u32, transport::verbs::Handle) {
    let cq = net.nodes[node].engine.create_cq().unwrap();
    let init = qp_init(net, node, QpType::Ud, cq, qp_cap(16, 1, 0), false);
    let e = &mut net.nodes[node].engine;
    let qpn = match kind {
        Kind::Smi => e.create_smi_qp(init).unwrap(),
        Kind::Gsi => e.create_gsi_qp(init).unwrap(),
        Kind::Data => e.create_qp(init).unwrap(),
    };
    let now = net.now;
    let mut a = QpAttr {
        state: Some(QpState::Init),
        qkey,
        port_num: 1,
        ..QpAttr::default()
    };
    // The special QPs take no port at Reset -> Init (seed 001).
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::QKEY;
    let m = if kind == Kind::Data {
        m | AttrMask::PORT
    } else {
        m
    };
    e.modify_qp(qpn, &a, m, now).expect("init");
    a.state = Some(QpState::Rtr);
    e.modify_qp(qpn, &a, AttrMask::STATE, now).expect("rtr");
    a.state = Some(QpState::Rts);
    e.modify_qp(qpn, &a, AttrMask::STATE | AttrMask::SQ_PSN, now)
        .expect("rts");
    (qpn, cq)
}

fn ud_send(id: u64, dlid: u16, sl: u8, qpn: u32, qkey: u32, lkey: u32) -> SendWr {
    let mut s = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 256, lkey));
    s.ud = Some(UdDest {
        av: AddressVector {
            dlid,
            sl,
            ..AddressVector::default()
        },
        remote_qpn: qpn,
        remote_qkey: qkey,
        pkey_index: None,
    });
    s
}

fn post_recvs(net: &mut Net, node: usize, qpn: u32, lkey: u32, n: u64) {
    for id in 0..n {
        let r = RecvWr {
            wr_id: id,
            sges: sge(REMOTE + id * 0x200, 0x200, lkey),
        };
        net.nodes[node].engine.post_recv(qpn, r).unwrap();
    }
}

/// Two nodes, LIDs 1 and 2, in the default partition, all memory registered:
/// (net, node 0's key, node 1's key).
fn two_nodes(seed: u64) -> (Net, u32, u32) {
    let mut net = Net::with_ports(
        vec![port(1, &[0xffff]), port(2, &[0xffff])],
        1 << 22,
        seed,
        Limits::default(),
    );
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    (net, ka, kb)
}

/// Delivers `pkts` to node `to` as the link would.
fn deliver(net: &mut Net, to: usize, pkts: &[Vec<u8>]) {
    let now = net.now;
    let n = &mut net.nodes[to];
    for p in pkts {
        n.engine.handle_packet(p, &mut n.mem, now);
    }
}

#[test]
fn ad_09_qp0_is_number_0_one_per_port_ud_only() {
    let mut net = Net::with_ports(vec![port(1, &[0xffff])], 1 << 20, 1, Limits::default());
    let cq = net.nodes[0].engine.create_cq().unwrap();
    let rc = qp_init(&net, 0, QpType::Rc, cq, qp_cap(4, 1, 0), false);
    assert_eq!(
        net.nodes[0].engine.create_smi_qp(rc),
        Err(VerbError::InvalidAttr)
    );
    assert!(!net.nodes[0].engine.has_smi_qp());
    let ud = qp_init(&net, 0, QpType::Ud, cq, qp_cap(4, 1, 0), false);
    assert_eq!(net.nodes[0].engine.create_smi_qp(ud), Ok(SMI_QPN));
    assert!(net.nodes[0].engine.has_smi_qp());
    assert_eq!(net.nodes[0].engine.create_smi_qp(ud), Err(VerbError::Busy));
    // An ordinary QP never gets 0 (nor 1).
    let q = net.nodes[0].engine.create_qp(ud).unwrap();
    assert!(q >= 2, "{q}");
    // QP0 follows the special QPs' transitions: no port at Reset->Init.
    net.nodes[0].engine.destroy_qp(SMI_QPN).unwrap();
    assert!(!net.nodes[0].engine.has_smi_qp());
}

#[test]
fn ad_09_qp0_on_vl15_with_no_pkey_or_qkey_check() {
    // A and B share no partition: QP0 is not checked (C9-41).
    let a = port(1, &[0x8005]);
    let b = port(2, &[0x8006]);
    let mut net = Net::with_ports(vec![a, b], 1 << 22, 2, Limits::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (qa, cq_a) = ud_qp(&mut net, 0, Kind::Smi, 0);
    let (qb, cq_b) = ud_qp(&mut net, 1, Kind::Smi, 0x1234);
    assert_eq!((qa, qb), (0, 0));
    post_recvs(&mut net, 1, qb, kb, 4);
    // SL 1 (VL1 for data): the SMP still goes on VL15; a Q_Key B's QP0 does not
    // hold (C9-48: not checked).
    net.nodes[0]
        .engine
        .post_send(qa, ud_send(7, 2, 1, 0, 0, ka))
        .unwrap();
    let sent = take_sent(&mut net, 0);
    assert_eq!(sent.len(), 1);
    let p = PacketRepr::parse(&sent[0]).unwrap();
    assert_eq!(p.lrh.vl, VL15);
    assert_eq!(p.lrh.sl, 1);
    assert_eq!(p.transport.bth.dest_qp, 0);
    assert_eq!(p.transport.ext.deth.unwrap().src_qp, 0);
    deliver(&mut net, 1, &sent);
    let c = wait(&mut net, 1, cq_b, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(c[0].src_qp, 0);
    let e = net.nodes[1].engine.counters();
    assert_eq!(e.dropped(RxDrop::BadPkey) + e.dropped(RxDrop::BadQkey), 0);
    let c = wait(&mut net, 0, cq_a, 1);
    assert_eq!(c[0].status, WcStatus::Success);
}

#[test]
fn ad_06_vl15_is_qp0s_only_each_refusal_counted() {
    let (mut net, ka, kb) = two_nodes(3);
    let (qa, _) = ud_qp(&mut net, 0, Kind::Smi, 0);
    let (ua, _) = ud_qp(&mut net, 0, Kind::Data, 0x11);
    let (qb, cq_b) = ud_qp(&mut net, 1, Kind::Smi, 0);
    let (ub, cq_ub) = ud_qp(&mut net, 1, Kind::Data, 0x11);
    post_recvs(&mut net, 1, qb, kb, 4);
    post_recvs(&mut net, 1, ub, kb, 4);
    // A data QP's packet for DQPN 0 goes on a data VL: B drops it.
    net.nodes[0]
        .engine
        .post_send(ua, ud_send(1, 2, 0, 0, 0, ka))
        .unwrap();
    let sent = take_sent(&mut net, 0);
    assert_eq!(PacketRepr::parse(&sent[0]).unwrap().lrh.vl, 0);
    deliver(&mut net, 1, &sent);
    // QP0's packet rewritten for B's data QP: VL15 for another QPN, dropped.
    net.nodes[0]
        .engine
        .post_send(qa, ud_send(2, 2, 0, 0, 0x11, ka))
        .unwrap();
    let sent = take_sent(&mut net, 0);
    let to_ub = reemit(&sent[0], |p| p.transport.bth.dest_qp = ub);
    deliver(&mut net, 1, &[to_ub]);
    let e = net.nodes[1].engine.counters();
    assert_eq!(e.dropped(RxDrop::Qp0NotVl15), 1);
    assert_eq!(e.dropped(RxDrop::Vl15NotQp0), 1);
    assert!(net.nodes[1].engine.poll_cq(cq_b).is_none());
    assert!(net.nodes[1].engine.poll_cq(cq_ub).is_none());
    // The unmodified SMP arrives.
    deliver(&mut net, 1, &sent);
    assert_eq!(wait(&mut net, 1, cq_b, 1)[0].status, WcStatus::Success);
}

/// PV-06, C9-55: the permissive LID (0xFFFF) is a valid DLID only for QP0.
/// An SMP sent to the permissive DLID (as a directed-route SMP goes, IBA
/// 14.2.2) reaches QP0; a packet to the permissive DLID for QP1 or an
/// ordinary UD QP is dropped silently and counted (C9-57, PV-10), and the
/// same packet to the port's own LID is taken (UD checks no LID, C9-53).
#[test]
fn pv_06_the_permissive_dlid_reaches_qp0_and_no_other_qp() {
    let (mut net, ka, kb) = two_nodes(4);
    let (qa, _) = ud_qp(&mut net, 0, Kind::Smi, 0);
    let (ga, _) = ud_qp(&mut net, 0, Kind::Gsi, GSI_QKEY);
    let (ua, _) = ud_qp(&mut net, 0, Kind::Data, 0x11);
    let (qb, cq_qb) = ud_qp(&mut net, 1, Kind::Smi, 0);
    let (gb, cq_gb) = ud_qp(&mut net, 1, Kind::Gsi, GSI_QKEY);
    let (ub, cq_ub) = ud_qp(&mut net, 1, Kind::Data, 0x11);
    for q in [qb, gb, ub] {
        post_recvs(&mut net, 1, q, kb, 4);
    }
    net.nodes[0]
        .engine
        .post_send(qa, ud_send(1, PERMISSIVE_LID, 0, qb, 0, ka))
        .unwrap();
    let smp = take_sent(&mut net, 0);
    let p = PacketRepr::parse(&smp[0]).unwrap();
    assert_eq!((p.lrh.dlid, p.transport.bth.dest_qp), (PERMISSIVE_LID, 0));
    deliver(&mut net, 1, &smp);
    assert_eq!(wait(&mut net, 1, cq_qb, 1)[0].status, WcStatus::Success);

    for (from, to, qkey) in [(ga, gb, GSI_QKEY), (ua, ub, 0x11)] {
        net.nodes[0]
            .engine
            .post_send(from, ud_send(2, PERMISSIVE_LID, 0, to, qkey, ka))
            .unwrap();
    }
    let sent = take_sent(&mut net, 0);
    assert_eq!(sent.len(), 2);
    deliver(&mut net, 1, &sent);
    let e = net.nodes[1].engine.counters();
    assert_eq!(e.dropped(RxDrop::BadDlid), 2, "QP1's and the UD QP's");
    assert!(net.nodes[1].engine.poll_cq(cq_gb).is_none());
    assert!(net.nodes[1].engine.poll_cq(cq_ub).is_none());
    // The same packets to B's LID are taken.
    let to_b: Vec<Vec<u8>> = sent.iter().map(|s| reemit(s, |p| p.lrh.dlid = 2)).collect();
    deliver(&mut net, 1, &to_b);
    assert_eq!(wait(&mut net, 1, cq_gb, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(&mut net, 1, cq_ub, 1)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].engine.counters().dropped(RxDrop::BadDlid), 2);
}
