//! A receive WQE taken from an SRQ (SR-01) by a SEND First whose message
//! never ends (issue 25 item 3): when a later packet errors the QP the WQE
//! completes flushed on the QP's receive CQ (the SRQ's CQ for an XRC TGT
//! QP), and when the QP is reset it goes back to the SRQ. Dropped, it was a
//! guest buffer lost with no completion.

mod common;

use common::*;
use transport::engine::NakReason;
use transport::verbs::{AttrMask, QpAttr, QpState, RecvWr, WcStatus, WrOpcode};

/// A Middle packet cut to 100 bytes (C9-11: a Middle is a full PMTU).
fn short(bytes: &[u8]) -> Vec<u8> {
    reemit(bytes, |p| p.transport.payload = &p.transport.payload[..100])
}

fn deliver(net: &mut Net, node: usize, pkts: &[Vec<u8>]) {
    let now = net.now;
    let n = &mut net.nodes[node];
    for p in pkts {
        n.engine.handle_packet(p, &mut n.mem, now);
    }
}

/// An RC pair whose node 1 QP receives from an SRQ holding WQEs 100 and
/// 101, and the three packets of a 3000-byte SEND node 0 posted (PMTU 1024).
fn rc_srq_send() -> (Net, Pair, u32, Vec<Vec<u8>>) {
    let mut net = Net::new(2, 1 << 20, 31);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pd = net.nodes[1].pd;
    let srq = net.nodes[1].engine.create_srq(pd, 16, 1, 0).unwrap();
    for i in 0..2u64 {
        let wr = RecvWr {
            wr_id: 100 + i,
            sges: sge(MEM_BASE + 0x1_0000 * (i + 1), 4096, kb),
        };
        net.nodes[1].engine.post_srq_recv(srq, wr).unwrap();
    }
    let o = ConnOpts {
        srq: [None, Some(srq)],
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let w = send_wr(1, WrOpcode::Send, sge(MEM_BASE, 3000, ka));
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let pkts = take_sent(&mut net, 0);
    assert_eq!(pkts.len(), 3, "First, Middle, Last");
    (net, p, srq, pkts)
}

#[test]
fn sr_01_srq_wqe_of_a_message_cut_by_a_qp_error_completes_flushed() {
    let (mut net, p, srq, pkts) = rc_srq_send();
    deliver(&mut net, 1, &[pkts[0].clone(), short(&pkts[1])]);
    assert_eq!(
        net.nodes[1].engine.counters().naked(NakReason::PmtuLength),
        1
    );
    let c = net
        .poll(1, p.cq_b)
        .expect("the SRQ WQE completes, not lost");
    assert_eq!(
        (c.wr_id, c.status, c.qp_num),
        (100, WcStatus::WrFlushErr, p.qb)
    );
    assert!(net.poll(1, p.cq_b).is_none());
    // The SRQ's other WQE is the SRQ's, for its other QPs: not flushed.
    assert_eq!(net.nodes[1].engine.query_srq(srq).unwrap().0, 1);
}

#[test]
fn sr_01_srq_wqe_of_a_message_cut_by_a_reset_goes_back_to_the_srq() {
    let (mut net, p, srq, pkts) = rc_srq_send();
    deliver(&mut net, 1, &pkts[..1]);
    assert_eq!(net.nodes[1].engine.query_srq(srq).unwrap().0, 1);
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    let now = net.now;
    net.nodes[1]
        .engine
        .modify_qp(p.qb, &reset, AttrMask::STATE, now)
        .unwrap();
    assert_eq!(net.nodes[1].engine.query_srq(srq).unwrap().0, 2);
    assert!(net.poll(1, p.cq_b).is_none());
}

#[test]
fn sr_02_xrc_srq_wqe_of_a_message_cut_by_a_qp_error_completes_on_the_srq_cq() {
    let mut net = Net::new(2, 1 << 20, 32);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (XrcInitiator { ini, .. }, XrcTarget { xrcd, cq: tcq, tgt }) = xrc_pair(&mut net);
    let srq = {
        let n = &mut net.nodes[1];
        n.engine.create_xrc_srq(n.pd, xrcd, tcq, 16, 1, 0).unwrap()
    };
    let wr = RecvWr {
        wr_id: 7,
        sges: sge(MEM_BASE + 0x1_0000, 4096, kb),
    };
    net.nodes[1].engine.post_srq_recv(srq, wr).unwrap();
    let w = send_wr(1, WrOpcode::Send, sge(MEM_BASE, 3000, ka));
    net.nodes[0].engine.post_send_xrc(ini, w, srq).unwrap();
    let pkts = take_sent(&mut net, 0);
    assert_eq!(pkts.len(), 3, "First, Middle, Last");
    deliver(&mut net, 1, &[pkts[0].clone(), short(&pkts[1])]);
    assert_eq!(
        net.nodes[1].engine.counters().naked(NakReason::PmtuLength),
        1
    );
    let c = net
        .poll(1, tcq)
        .expect("the XRC SRQ WQE completes, not lost");
    assert_eq!(
        (c.wr_id, c.status, c.qp_num, c.xrc_srq),
        (7, WcStatus::WrFlushErr, tgt, Some(srq))
    );
}
