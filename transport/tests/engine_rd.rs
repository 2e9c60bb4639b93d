//! Reliable Datagram between engines (AD-11, OP-11, PV-09, WF-07): RD QPs in
//! an RD domain send through an EE context; the wire carries RD opcodes with
//! RDETH (the peer's EECN) and DETH (Q_Key, source QP); the responder checks
//! the EE context, the destination QP's RDD and its Q_Key; a failed message
//! is followed by a RESYNC; over a lossy fabric every message arrives once,
//! in order per EE context, byte-exact.

mod common;

use common::*;
use transport::engine::{MAX_EEC, MAX_RDD, RD_WINDOW};
use transport::verbs::{
    AddressVector, Completion, EecAttr, Handle, Mtu, QpCap, QpState, RdDest, RdQpAttr, RdQpInit,
    RecvWr, SendWr, Sge, VerbError, WcOpcode, WcStatus, WrOpcode,
};
use transport::wire::ext::{AethSyndrome, NakCode};
use transport::wire::opcode::{Direction, Operation, Service};
use transport::wire::PacketRepr;

const QKEY: u32 = 0x0011_2233;

/// One node's RD side: a domain, an EE context, RD QPs, a send and a receive
/// CQ shared by its QPs.
#[derive(Debug, Clone)]
struct Side {
    node: usize,
    rdd: Handle,
    eec: u32,
    qps: Vec<u32>,
    scq: Handle,
    rcq: Handle,
    lkey: u32,
}

fn rd_qp(net: &mut Net, node: usize, rdd: Handle, scq: Handle, rcq: Handle) -> u32 {
    let n = &mut net.nodes[node];
    let qpn = n
        .engine
        .create_rd_qp(RdQpInit {
            pd: n.pd,
            rdd,
            send_cq: scq,
            recv_cq: rcq,
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        })
        .expect("rd qp");
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        n.engine
            .modify_rd_qp(
                qpn,
                &RdQpAttr {
                    state: st,
                    qkey: Some(QKEY),
                    access: Some(ALL_ACCESS),
                },
            )
            .expect("modify rd qp");
    }
    qpn
}

fn side(net: &mut Net, node: usize, nqps: usize) -> Side {
    let lkey = net.reg_all(node, ALL_ACCESS);
    let e = &mut net.nodes[node].engine;
    let rdd = e.alloc_rdd().expect("rdd");
    let eec = e.create_eec(rdd).expect("eec");
    let scq = e.create_cq().expect("cq");
    let rcq = e.create_cq().expect("cq");
    let qps = (0..nqps).map(|_| rd_qp(net, node, rdd, scq, rcq)).collect();
    Side {
        node,
        rdd,
        eec,
        qps,
        scq,
        rcq,
        lkey,
    }
}

/// Init -> RTR -> RTS of `s`'s EEC towards `peer`.
fn eec_up(net: &mut Net, s: &Side, peer: &Side, mtu: Mtu, sq_psn: u32, rq_psn: u32) {
    let now = net.now;
    let peer_lid = net.nodes[peer.node].engine.port().lid;
    let a = EecAttr {
        pkey_index: 0,
        av: AddressVector {
            dlid: peer_lid,
            ..AddressVector::default()
        },
        path_mtu: mtu,
        remote_eecn: peer.eec,
        rq_psn,
        sq_psn,
        min_rnr_timer: 1,
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
    };
    let e = &mut net.nodes[s.node].engine;
    for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
        e.modify_eec(s.eec, st, &a, now).expect("modify eec");
    }
}

const PSN_A: u32 = 0xff_fff8;
const PSN_B: u32 = 0x12_3456;

/// Nodes 0 and 1 with `nqps` RD QPs each and one EEC pair between them.
fn pair(seed: u64, nqps: usize, mtu: Mtu) -> (Net, Side, Side) {
    let mut net = Net::new(2, 1 << 20, seed);
    let a = side(&mut net, 0, nqps);
    let b = side(&mut net, 1, nqps);
    eec_up(&mut net, &a, &b, mtu, PSN_A, PSN_B);
    eec_up(&mut net, &b, &a, mtu, PSN_B, PSN_A);
    (net, a, b)
}

fn dest(s: &Side, to: &Side, i: usize) -> RdDest {
    RdDest {
        eecn: s.eec,
        remote_qpn: to.qps[i],
        remote_qkey: QKEY,
    }
}

fn post_recv(net: &mut Net, s: &Side, qp: u32, id: u64, addr: u64, len: u32) {
    net.nodes[s.node]
        .engine
        .post_recv_rd(
            qp,
            RecvWr {
                wr_id: id,
                sges: sge(addr, len, s.lkey),
            },
        )
        .expect("post recv rd");
}

fn post(net: &mut Net, s: &Side, qp: u32, wr: SendWr, d: RdDest) {
    net.nodes[s.node]
        .engine
        .post_send_rd(qp, wr, d)
        .expect("post send rd");
}

/// Posts `wr` on `a`'s first QP to `b`'s first QP.
fn post0(net: &mut Net, a: &Side, b: &Side, wr: SendWr) {
    post(net, a, a.qps[0], wr, dest(a, b, 0));
}

/// Posts a signaled SEND of `len` bytes at `src` (`s`'s key) on `s`'s QP
/// `qp` (an index) to `d`.
fn send(net: &mut Net, s: &Side, qp: usize, d: RdDest, id: u64, src: u64, len: u32) {
    let wr = send_wr(id, WrOpcode::Send, sge(src, len, s.lkey));
    post(net, s, s.qps[qp], wr, d);
}

/// A signaled `op` of the local `sges` on the peer's `raddr` under `rkey`.
fn remote_wr(id: u64, op: WrOpcode, sges: Vec<Sge>, raddr: u64, rkey: u32) -> SendWr {
    let mut wr = send_wr(id, op, sges);
    wr.remote_addr = raddr;
    wr.rkey = rkey;
    wr
}

/// Runs the bench until `s`'s send CQ holds one completion; takes it.
fn sent(net: &mut Net, s: &Side) -> Completion {
    wait(net, s.node, s.scq, 1).remove(0)
}

/// Moves `s`'s first QP (in SQE after a failed WR) back to RTS, its Q_Key
/// and access kept.
fn qp0_to_rts(net: &mut Net, s: &Side) {
    let rts = RdQpAttr {
        state: QpState::Rts,
        qkey: None,
        access: None,
    };
    let e = &mut net.nodes[s.node].engine;
    e.modify_rd_qp(s.qps[0], &rts).expect("QP back to RTS");
}

/// [`pair`] of one QP each, keeping a copy of every packet on the wire.
fn sniffed_pair(seed: u64, mtu: Mtu) -> (Net, Side, Side) {
    let (mut net, a, b) = pair(seed, 1, mtu);
    net.sniffed = Some(Vec::new());
    (net, a, b)
}

/// The first sniffed packet of operation `op`, as it was on the wire.
fn sniffed_copy(net: &Net, op: Operation) -> Vec<u8> {
    net.sniffed
        .as_ref()
        .expect("sniffing")
        .iter()
        .find(|p| {
            PacketRepr::parse(p)
                .unwrap()
                .transport
                .bth
                .opcode
                .info()
                .operation
                == op
        })
        .expect("sniffed packet of the operation")
        .clone()
}

/// Every sniffed packet, parsed.
fn parsed(net: &Net) -> Vec<PacketRepr<'_>> {
    net.sniffed
        .as_ref()
        .expect("sniffing")
        .iter()
        .map(|p| PacketRepr::parse(p).expect("parse"))
        .collect()
}

fn nak_codes(net: &Net) -> Vec<NakCode> {
    parsed(net)
        .iter()
        .filter_map(|p| match p.transport.ext.aeth.map(|a| a.syndrome) {
            Some(AethSyndrome::Nak(c)) => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn ad_11_wf_07_send_write_read_over_one_eec() {
    let (mut net, a, b) = sniffed_pair(1, Mtu::M256);
    let (qa, qb) = (a.qps[0], b.qps[0]);
    let src = MEM_BASE + 0x1000;
    let dst = MEM_BASE + 0x8000;
    fill(&mut net, 0, src, 700, 7);
    // SEND of 700 bytes (3 packets at PMTU 256).
    post_recv(&mut net, &b, qb, 50, dst, 1024);
    let mut wr = send_wr(1, WrOpcode::SendWithImm, sge(src, 700, a.lkey));
    wr.imm_or_inv = 0xabcd;
    post0(&mut net, &a, &b, wr);
    let r = wait(&mut net, 1, b.rcq, 1);
    assert_eq!(r[0].status, WcStatus::Success);
    assert_eq!(
        (r[0].byte_len, r[0].src_qp, r[0].imm_data),
        (700, qa, 0xabcd)
    );
    assert_eq!(r[0].qp_num, qb);
    let s = sent(&mut net, &a);
    assert_eq!((s.status, s.opcode), (WcStatus::Success, WcOpcode::Send));
    assert_eq!(bytes(&net, 1, dst, 700), bytes(&net, 0, src, 700));
    // RDMA WRITE of 600 bytes into node 1.
    let wdst = MEM_BASE + 0x2_0000;
    fill(&mut net, 0, src, 600, 9);
    let wr = remote_wr(2, WrOpcode::RdmaWrite, sge(src, 600, a.lkey), wdst, b.lkey);
    post0(&mut net, &a, &b, wr);
    let s = sent(&mut net, &a);
    assert_eq!(
        (s.status, s.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(bytes(&net, 1, wdst, 600), bytes(&net, 0, src, 600));
    // RDMA READ of 900 bytes from node 1 (4 responses).
    let rsrc = MEM_BASE + 0x3_0000;
    let rdst = MEM_BASE + 0x4_0000;
    fill(&mut net, 1, rsrc, 900, 33);
    let wr = remote_wr(3, WrOpcode::RdmaRead, sge(rdst, 900, a.lkey), rsrc, b.lkey);
    post0(&mut net, &a, &b, wr);
    let s = sent(&mut net, &a);
    assert_eq!((s.status, s.byte_len), (WcStatus::Success, 900));
    assert_eq!(bytes(&net, 0, rdst, 900), bytes(&net, 1, rsrc, 900));

    // WF-07 on the wire: every packet is RD; requests carry RDETH with the
    // peer's EECN and DETH with the Q_Key and the source QP; responses
    // RDETH with the requester's EECN, to the requesting QP.
    let pkts = parsed(&net);
    let lid_a = net.nodes[0].engine.port().lid;
    let mut ops = Vec::new();
    for p in &pkts {
        let t = &p.transport;
        let info = t.bth.opcode.info();
        assert_eq!(info.service, Service::Rd, "{:?}", t.bth.opcode);
        let rdeth = t.ext.rdeth.expect("RDETH");
        if p.lrh.slid == lid_a {
            assert_eq!(info.direction(), Direction::Request);
            assert_eq!(rdeth.ee_context, b.eec);
            let deth = t.ext.deth.expect("DETH");
            assert_eq!((deth.qkey, deth.src_qp), (QKEY, qa));
            assert_eq!(t.bth.dest_qp, qb);
        } else {
            assert_eq!(info.direction(), Direction::Response);
            assert_eq!(rdeth.ee_context, a.eec);
            assert!(t.ext.deth.is_none());
            assert_eq!(t.bth.dest_qp, qa);
        }
        ops.push((info.name, t.bth.psn));
    }
    // PSNs run on from the EEC's send PSN through the wrap: SEND 3 packets,
    // WRITE 3, READ request takes 4 (its responses' PSNs).
    let req: Vec<_> = ops
        .iter()
        .filter(|(n, _)| !n.contains("RESPONSE") && !n.contains("ACKNOWLEDGE"))
        .collect();
    let names: Vec<&str> = req.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            "RD_SEND_FIRST",
            "RD_SEND_MIDDLE",
            "RD_SEND_LAST_WITH_IMMEDIATE",
            "RD_RDMA_WRITE_FIRST",
            "RD_RDMA_WRITE_MIDDLE",
            "RD_RDMA_WRITE_LAST",
            "RD_RDMA_READ_REQUEST"
        ]
    );
    let psns: Vec<u32> = req.iter().map(|(_, p)| *p).collect();
    assert_eq!(
        psns,
        [0xff_fff8, 0xff_fff9, 0xff_fffa, 0xff_fffb, 0xff_fffc, 0xff_fffd, 0xff_fffe]
    );
    let reads: Vec<u32> = ops
        .iter()
        .filter(|(n, _)| n.contains("READ_RESPONSE"))
        .map(|(_, p)| *p)
        .collect();
    assert_eq!(reads, [0xff_fffe, 0xff_ffff, 0, 1]);
    let (_, attr, _) = net.nodes[1].engine.query_eec(b.eec).unwrap();
    assert_eq!(attr.rq_psn, 2, "node 1's expected PSN after the READ");
}

#[test]
fn ad_11_several_qps_share_one_eec_in_order() {
    // Three QPs on each side; A's QP i sends to B's QP (i + 1) % 3 through
    // the one EEC; B's QPs all complete on one CQ in the EEC's order.
    let (mut net, a, b) = pair(2, 3, Mtu::M512);
    let mut id = 0;
    for round in 0..4u64 {
        for i in 0..3 {
            let to = (i + 1) % 3;
            let addr = MEM_BASE + 0x1_0000 + (round * 3 + i as u64) * 0x800;
            post_recv(&mut net, &b, b.qps[to], 100 + id, addr, 2048);
            let src = MEM_BASE + 0x8_0000 + id * 0x800;
            fill(&mut net, 0, src, 1000, id as u8);
            send(&mut net, &a, i, dest(&a, &b, to), id, src, 1000);
            id += 1;
        }
    }
    let s = wait(&mut net, 0, a.scq, 12);
    let r = wait(&mut net, 1, b.rcq, 12);
    assert!(s.iter().all(|c| c.status == WcStatus::Success), "{s:?}");
    // The receiver completes in the order the EEC carried the messages.
    let sent: Vec<u64> = s.iter().map(|c| c.wr_id).collect();
    let got: Vec<u64> = r.iter().map(|c| c.wr_id - 100).collect();
    assert_eq!(sent, got);
    // Per QP in post order.
    for q in &a.qps {
        let ids: Vec<u64> = s
            .iter()
            .filter(|c| c.qp_num == *q)
            .map(|c| c.wr_id)
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    }
    for c in &r {
        assert_eq!(c.src_qp, a.qps[((c.wr_id - 100) % 3) as usize]);
    }
}

#[test]
fn pv_09_destination_qp_of_another_rdd_is_naked_invalid_rd_request() {
    let (mut net, a, b) = sniffed_pair(3, Mtu::M1024);
    // A QP on node 1 in a second RD domain: the EEC's RDD is not its.
    let e = &mut net.nodes[1].engine;
    let other = e.alloc_rdd().expect("rdd");
    let stranger = rd_qp(&mut net, 1, other, b.scq, b.rcq);
    post_recv(&mut net, &b, stranger, 9, MEM_BASE + 0x1000, 64);
    let src = MEM_BASE + 0x2000;
    let d = RdDest {
        remote_qpn: stranger,
        ..dest(&a, &b, 0)
    };
    send(&mut net, &a, 0, d, 1, src, 32);
    assert_eq!(sent(&mut net, &a).status, WcStatus::RemInvRdReqErr);
    assert_eq!(net.nodes[1].engine.counters().rd.rdd_mismatch, 1);
    assert_eq!(nak_codes(&net), [NakCode::InvalidRdRequest]);
    assert!(net.poll(1, b.rcq).is_none(), "nothing delivered");
    assert_eq!(net.nodes[1].engine.query_rd_qp(stranger).unwrap().2, other);
    assert_eq!(net.nodes[1].engine.query_eec(b.eec).unwrap().2, b.rdd);
    assert_ne!(other, b.rdd);
}

#[test]
fn pv_09_wrong_qkey_is_naked_and_the_psn_kept() {
    let (mut net, a, b) = sniffed_pair(4, Mtu::M1024);
    post_recv(&mut net, &b, b.qps[0], 9, MEM_BASE + 0x1000, 64);
    let src = MEM_BASE + 0x2000;
    let d = RdDest {
        remote_qkey: QKEY ^ 1,
        ..dest(&a, &b, 0)
    };
    send(&mut net, &a, 0, d, 1, src, 32);
    assert_eq!(sent(&mut net, &a).status, WcStatus::RemInvRdReqErr);
    let c = &net.nodes[1].engine.counters().rd;
    assert_eq!((c.bad_qkey, c.rdd_mismatch), (1, 0));
    // C9-50: the NAK carries the bad request's PSN; the EEC's PSN stays.
    let nak = parsed(&net)
        .into_iter()
        .find(|p| p.transport.ext.aeth.is_some())
        .expect("NAK");
    assert_eq!(nak.transport.bth.psn, PSN_A);
    assert_eq!(nak_codes(&net), [NakCode::InvalidRdRequest]);
    let (_, attr, _) = net.nodes[1].engine.query_eec(b.eec).unwrap();
    assert_eq!(attr.rq_psn, PSN_A);
    // The QP went to SQE (seed 001); the receive WQE was not consumed.
    assert_eq!(
        net.nodes[0].engine.query_rd_qp(a.qps[0]).unwrap().0,
        QpState::Sqe
    );
    assert!(net.poll(1, b.rcq).is_none());
}

#[test]
fn pv_09_unknown_eecn_and_foreign_pkey_are_dropped_and_counted() {
    let (mut net, a, b) = sniffed_pair(5, Mtu::M1024);
    post_recv(&mut net, &b, b.qps[0], 9, MEM_BASE + 0x1000, 64);
    let src = MEM_BASE + 0x2000;
    send(&mut net, &a, 0, dest(&a, &b, 0), 1, src, 32);
    wait(&mut net, 1, b.rcq, 1);
    wait(&mut net, 0, a.scq, 1);
    net.run_until(100_000, |_| false);
    // The SEND again, altered: were it taken, node 1 would ACK a duplicate.
    let first = net.sniffed.as_ref().unwrap()[0].clone();
    let p = PacketRepr::parse(&first).unwrap();
    assert_eq!(p.transport.bth.opcode.info().service, Service::Rd);
    let mut buf = vec![0u8; 4096];
    let before = net.nodes[1].engine.counters().rd.clone();
    // An EECN no context of node 1 has (o9-26).
    let mut bad = p;
    bad.transport.ext.rdeth = Some(transport::wire::RdethRepr { ee_context: 0x4242 });
    let n = bad.emit(&mut buf).unwrap();
    let now = net.now;
    let node = &mut net.nodes[1];
    node.engine.handle_packet(&buf[..n], &mut node.mem, now);
    // A P_Key the EEC's partition does not match (o9-24).
    let mut bad = p;
    bad.transport.bth.pkey = 0x8001;
    let n = bad.emit(&mut buf).unwrap();
    node.engine.handle_packet(&buf[..n], &mut node.mem, now);
    // From another LID than the EEC's path (o9-28).
    let mut bad = p;
    bad.lrh.slid = 7;
    let n = bad.emit(&mut buf).unwrap();
    node.engine.handle_packet(&buf[..n], &mut node.mem, now);
    let c = &node.engine.counters().rd;
    assert_eq!(c.bad_eecn, before.bad_eecn + 1);
    assert_eq!(c.bad_pkey, before.bad_pkey + 1);
    assert_eq!(c.bad_path, before.bad_path + 1);
    // Silent: nothing to send in answer, nothing delivered.
    let sent = net.nodes[1].engine.counters().tx_packets;
    net.run_until(1000, |_| false);
    assert_eq!(net.nodes[1].engine.counters().tx_packets, sent);
    assert!(net.poll(1, b.rcq).is_none());
}

#[test]
fn op_11_resync_follows_a_failed_message() {
    let (mut net, a, b) = sniffed_pair(6, Mtu::M1024);
    post_recv(&mut net, &b, b.qps[0], 9, MEM_BASE + 0x1000, 64);
    let src = MEM_BASE + 0x2000;
    // A WRITE to a bad R_Key fails at node 1 (Remote Access Error) ...
    let wr = remote_wr(
        1,
        WrOpcode::RdmaWrite,
        sge(src, 32, a.lkey),
        MEM_BASE,
        b.lkey ^ 0x100,
    );
    post0(&mut net, &a, &b, wr);
    assert_eq!(sent(&mut net, &a).status, WcStatus::RemAccessErr);
    // ... the QP is moved back to RTS and sends again: a RESYNC goes first,
    // with the EEC's next PSN, and node 1 takes it as its expected PSN.
    qp0_to_rts(&mut net, &a);
    send(&mut net, &a, 0, dest(&a, &b, 0), 2, src, 32);
    assert_eq!(sent(&mut net, &a).status, WcStatus::Success);
    assert_eq!(wait(&mut net, 1, b.rcq, 1)[0].byte_len, 32);
    let reqs: Vec<(Operation, u32)> = parsed(&net)
        .iter()
        .filter(|p| p.transport.bth.opcode.info().direction() == Direction::Request)
        .map(|p| (p.transport.bth.opcode.info().operation, p.transport.bth.psn))
        .collect();
    assert_eq!(
        reqs,
        [
            (Operation::RdmaWrite, PSN_A),
            (Operation::Resync, PSN_A + 1),
            (Operation::Send, PSN_A + 2)
        ]
    );
    let resync = parsed(&net)
        .into_iter()
        .find(|p| p.transport.bth.opcode.info().operation == Operation::Resync)
        .unwrap();
    assert!(resync.transport.payload.is_empty(), "C9-15.a1");
    assert!(resync.transport.ext.deth.is_some() && resync.transport.ext.rdeth.is_some());
    assert_eq!(net.nodes[0].engine.counters().rd.resyncs_sent, 1);
    assert_eq!(net.nodes[1].engine.counters().rd.resyncs_received, 1);
    assert_eq!(
        net.nodes[1].engine.query_eec(b.eec).unwrap().1.rq_psn,
        PSN_A + 3
    );
    // A late copy of that RESYNC (the fabric duplicated it) is ACKed again
    // and moves the expected PSN nowhere.
    let copy = sniffed_copy(&net, Operation::Resync);
    let acks = net.nodes[1].engine.counters().rd.acks_sent;
    let now = net.now;
    let n1 = &mut net.nodes[1];
    n1.engine.handle_packet(&copy, &mut n1.mem, now);
    assert_eq!(n1.engine.query_eec(b.eec).unwrap().1.rq_psn, PSN_A + 3);
    assert_eq!(n1.engine.counters().rd.acks_sent, acks + 1);
    assert_eq!(n1.engine.counters().rd.resyncs_received, 1);
}

#[test]
fn op_11_resync_after_the_eec_comes_back_from_error() {
    let (mut net, a, b) = pair(7, 1, Mtu::M1024);
    // Node 1 unreachable: the EEC runs out of retries and goes to Error.
    net.lose = Some(Box::new(|_| true));
    let src = MEM_BASE + 0x2000;
    send(&mut net, &a, 0, dest(&a, &b, 0), 1, src, 32);
    assert_eq!(sent(&mut net, &a).status, WcStatus::RetryExcErr);
    assert_eq!(
        net.nodes[0].engine.query_eec(a.eec).unwrap().0,
        QpState::Error
    );
    assert_eq!(net.nodes[0].engine.counters().rd.timeouts, 8);
    // A WR naming an EEC in Error fails and puts its QP in SQE (seed 001).
    qp0_to_rts(&mut net, &a);
    send(&mut net, &a, 0, dest(&a, &b, 0), 2, src, 32);
    assert_eq!(sent(&mut net, &a).status, WcStatus::InvEecStateErr);
    // Back through Reset with a new send PSN node 1 does not know.
    net.lose = None;
    net.sniffed = Some(Vec::new());
    let now = net.now;
    net.nodes[0]
        .engine
        .modify_eec(a.eec, QpState::Reset, &EecAttr::default(), now)
        .unwrap();
    eec_up(&mut net, &a, &b, Mtu::M1024, 0x777, PSN_B);
    qp0_to_rts(&mut net, &a);
    post_recv(&mut net, &b, b.qps[0], 9, MEM_BASE + 0x1000, 64);
    send(&mut net, &a, 0, dest(&a, &b, 0), 3, src, 32);
    assert_eq!(sent(&mut net, &a).status, WcStatus::Success);
    assert_eq!(wait(&mut net, 1, b.rcq, 1)[0].wr_id, 9);
    let first = PacketRepr::parse(&net.sniffed.as_ref().unwrap()[0]).unwrap();
    assert_eq!(
        first.transport.bth.opcode.info().operation,
        Operation::Resync
    );
    assert_eq!(first.transport.bth.psn, 0x777);
}

#[test]
fn ad_11_rdd_and_eec_tables_are_bounded() {
    let mut net = Net::new(1, 1 << 16, 1);
    let e = &mut net.nodes[0].engine;
    let rdds: Vec<Handle> = (0..MAX_RDD).map(|_| e.alloc_rdd().unwrap()).collect();
    assert_eq!(e.alloc_rdd(), Err(VerbError::InsufficientResources));
    for _ in 0..MAX_EEC {
        e.create_eec(rdds[0]).unwrap();
    }
    assert_eq!(e.create_eec(rdds[1]), Err(VerbError::InsufficientResources));
    assert_eq!(e.dealloc_rdd(rdds[0]), Err(VerbError::Busy));
    e.dealloc_rdd(rdds[1]).unwrap();
    assert_eq!(e.create_eec(rdds[1]), Err(VerbError::InvalidHandle));
}

#[test]
fn ad_11_eec_sends_at_most_a_window_before_an_ack() {
    // 64 KiB at PMTU 256: 256 packets; with nothing acknowledged the EEC
    // stops at its window, then goes on as ACKs come.
    let (mut net, a, b) = pair(8, 1, Mtu::M256);
    let src = MEM_BASE + 0x1_0000;
    let dst = MEM_BASE + 0x4_0000;
    fill(&mut net, 0, src, 65536, 3);
    post_recv(&mut net, &b, b.qps[0], 1, dst, 65536);
    send(&mut net, &a, 0, dest(&a, &b, 0), 1, src, 65536);
    let mut buf = vec![0u8; 8192];
    let mut sent = 0;
    let now = net.now;
    let n0 = &mut net.nodes[0];
    while n0
        .engine
        .poll_transmit(&mut n0.mem, now, &mut buf)
        .is_some()
    {
        sent += 1;
        assert!(sent <= 256, "runaway");
    }
    assert_eq!(sent, RD_WINDOW);
    // Delivered normally it all arrives.
    let r = wait(&mut net, 1, b.rcq, 1);
    assert_eq!((r[0].status, r[0].byte_len), (WcStatus::Success, 65536));
    assert_eq!(bytes(&net, 1, dst, 65536), bytes(&net, 0, src, 65536));
}

/// Nodes 0 and 1 on RoCE ports with one RD QP each and one EEC pair
/// between them, each EEC's path from its port's GID 0 (IPv4) to the
/// peer's.
fn roce_pair(seed: u64) -> (Net, Side, Side) {
    let mut net = Net::new_roce(2, 1 << 20, seed);
    let a = side(&mut net, 0, 1);
    let b = side(&mut net, 1, 1);
    let now = net.now;
    for (s, peer, sq, rq) in [(&a, &b, PSN_A, PSN_B), (&b, &a, PSN_B, PSN_A)] {
        let attr = EecAttr {
            av: roce_av(peer.node + 1, 0),
            path_mtu: Mtu::M1024,
            remote_eecn: peer.eec,
            rq_psn: rq,
            sq_psn: sq,
            min_rnr_timer: 1,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            ..EecAttr::default()
        };
        let e = &mut net.nodes[s.node].engine;
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            e.modify_eec(s.eec, st, &attr, now).expect("modify eec");
        }
    }
    (net, a, b)
}

#[test]
fn ad_11_wf_10_rd_over_roce() {
    let (mut net, a, b) = roce_pair(9);
    net.sniffed = Some(Vec::new());
    let now = net.now;
    // A path without a GRH is refused on RoCE (A17.4.5).
    let c = net.nodes[0].engine.create_eec(a.rdd).unwrap();
    let e = &mut net.nodes[0].engine;
    e.modify_eec(c, QpState::Init, &EecAttr::default(), now)
        .unwrap();
    let plain = EecAttr {
        remote_eecn: 1,
        ..EecAttr::default()
    };
    assert_eq!(
        e.modify_eec(c, QpState::Rtr, &plain, now),
        Err(VerbError::InvalidAttr)
    );
    let src = MEM_BASE + 0x1000;
    let dst = MEM_BASE + 0x8000;
    fill(&mut net, 0, src, 3000, 5);
    post_recv(&mut net, &b, b.qps[0], 7, dst, 4096);
    send(&mut net, &a, 0, dest(&a, &b, 0), 1, src, 3000);
    assert_eq!(wait(&mut net, 1, b.rcq, 1)[0].byte_len, 3000);
    assert_eq!(sent(&mut net, &a).status, WcStatus::Success);
    assert_eq!(bytes(&net, 1, dst, 3000), bytes(&net, 0, src, 3000));
    // RoCEv2 frames (UDP 4791) carrying RD opcodes with RDETH.
    let frames = net.sniffed.as_ref().unwrap();
    assert!(!frames.is_empty());
    for f in frames {
        let r = transport::wire::roce::RoceRepr::parse(f).expect("RoCEv2 frame");
        assert_eq!(r.transport.bth.opcode.info().service, Service::Rd);
        assert!(r.transport.ext.rdeth.is_some());
    }
}

#[test]
fn ad_11_rnr_nak_waits_for_a_receive_wqe() {
    // RL-11 on an EEC: a SEND and a WRITE with immediate meet no receive
    // WQE, are NAKed RNR, and go once node 1 posts one each.
    let (mut net, a, b) = sniffed_pair(10, Mtu::M1024);
    let src = MEM_BASE + 0x1000;
    fill(&mut net, 0, src, 2000, 1);
    send(&mut net, &a, 0, dest(&a, &b, 0), 1, src, 2000);
    let wdst = MEM_BASE + 0x2_0000;
    let mut wr = remote_wr(
        2,
        WrOpcode::RdmaWriteWithImm,
        sge(src, 1500, a.lkey),
        wdst,
        b.lkey,
    );
    wr.imm_or_inv = 0x1234_5678;
    post0(&mut net, &a, &b, wr);
    let rnrs = |n: &Net| {
        parsed(n)
            .iter()
            .filter(|p| {
                matches!(
                    p.transport.ext.aeth.map(|x| x.syndrome),
                    Some(AethSyndrome::RnrNak { .. })
                )
            })
            .count()
    };
    assert!(
        net.run_until(100_000, |n| rnrs(n) >= 3),
        "RNR NAKs sent again"
    );
    assert!(
        net.poll(0, a.scq).is_none(),
        "nothing completes without a WQE"
    );
    let dst = MEM_BASE + 0x8000;
    post_recv(&mut net, &b, b.qps[0], 10, dst, 4096);
    post_recv(&mut net, &b, b.qps[0], 11, MEM_BASE + 0x9000, 16);
    let r = wait(&mut net, 1, b.rcq, 2);
    assert_eq!((r[0].wr_id, r[0].byte_len), (10, 2000));
    assert_eq!((r[1].wr_id, r[1].opcode), (11, WcOpcode::RecvRdmaWithImm));
    assert_eq!((r[1].byte_len, r[1].imm_data), (1500, 0x1234_5678));
    let s = wait(&mut net, 0, a.scq, 2);
    assert!(s.iter().all(|c| c.status == WcStatus::Success), "{s:?}");
    assert_eq!(bytes(&net, 1, dst, 2000), bytes(&net, 0, src, 2000));
    assert_eq!(bytes(&net, 1, wdst, 1500), bytes(&net, 0, src, 1500));
}

#[test]
fn ad_11_op_07_atomics_over_rd_run_once() {
    let (mut net, a, b) = sniffed_pair(11, Mtu::M1024);
    let target = MEM_BASE + 0x2_0000;
    let res = MEM_BASE + 0x1000;
    let n1 = (target - MEM_BASE) as usize;
    net.nodes[1].mem.bytes[n1..n1 + 8].copy_from_slice(&40u64.to_le_bytes());
    let mut fa = remote_wr(
        1,
        WrOpcode::AtomicFetchAdd,
        sge(res, 8, a.lkey),
        target,
        b.lkey,
    );
    fa.swap_add = 2;
    let mut cs = remote_wr(
        2,
        WrOpcode::AtomicCmpSwap,
        sge(res + 8, 8, a.lkey),
        target,
        b.lkey,
    );
    cs.compare = 42;
    cs.swap_add = 7;
    post0(&mut net, &a, &b, fa);
    post0(&mut net, &a, &b, cs);
    let s = wait(&mut net, 0, a.scq, 2);
    assert_eq!(
        (s[0].status, s[0].opcode, s[0].byte_len),
        (WcStatus::Success, WcOpcode::FetchAdd, 8)
    );
    assert_eq!(
        (s[1].status, s[1].opcode),
        (WcStatus::Success, WcOpcode::CompSwap)
    );
    assert_eq!(bytes(&net, 0, res, 8), 40u64.to_le_bytes());
    assert_eq!(bytes(&net, 0, res + 8, 8), 42u64.to_le_bytes());
    assert_eq!(bytes(&net, 1, target, 8), 7u64.to_le_bytes());
    // On the wire: RD_COMPARE_SWAP with RDETH, DETH and AtomicETH, answered
    // by RD_ATOMIC_ACKNOWLEDGE.
    let pkts = parsed(&net);
    let req = pkts
        .iter()
        .find(|p| p.transport.bth.opcode.info().operation == Operation::CompareSwap)
        .expect("RD_COMPARE_SWAP");
    assert_eq!(req.transport.bth.opcode.info().service, Service::Rd);
    assert!(req.transport.ext.rdeth.is_some() && req.transport.ext.deth.is_some());
    assert_eq!(req.transport.ext.atomic_eth.map(|x| x.compare), Some(42));
    assert!(pkts.iter().any(|p| {
        p.transport.bth.opcode.info().operation == Operation::AtomicAcknowledge
            && p.transport.ext.atomic_ack_eth.map(|x| x.orig_remote_data) == Some(42)
    }));
    // A copy of the CMP_SWAP (its ACK lost, say) is answered from the saved
    // result and not executed again.
    let copy = sniffed_copy(&net, Operation::CompareSwap);
    net.nodes[1].mem.bytes[n1..n1 + 8].copy_from_slice(&42u64.to_le_bytes());
    net.sniffed = Some(Vec::new());
    let now = net.now;
    let n = &mut net.nodes[1];
    n.engine.handle_packet(&copy, &mut n.mem, now);
    net.run_until(10_000, |_| false);
    assert_eq!(
        bytes(&net, 1, target, 8),
        42u64.to_le_bytes(),
        "not run again"
    );
    let again = parsed(&net);
    assert_eq!(again.len(), 1);
    assert_eq!(
        again[0]
            .transport
            .ext
            .atomic_ack_eth
            .map(|x| x.orig_remote_data),
        Some(42)
    );
}

/// What the lossy run posted: per message, its sender QP index, receiver QP
/// index, source address and length.
#[derive(Debug, Clone, Copy)]
struct Sent {
    to: usize,
    src: u64,
    len: usize,
}

/// What one lossy run cost: packets the fabric lost, and the requester's
/// retransmissions and ACK timeouts.
fn lossy_run(seed: u64) -> (u64, u64, u64) {
    let (mut net, a, b) = pair(seed, 3, Mtu::M256);
    net.faults = Faults {
        drop: 0.05,
        duplicate: 0.01,
        reorder: 0.01,
        ..Faults::default()
    };
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut msgs: Vec<Sent> = Vec::new();
    let per_qp = 12;
    let mut id = 0u64;
    for round in 0..per_qp {
        for i in 0..3 {
            let to = rng.below(3) as usize;
            let len = rng.below(1100) as usize;
            let src = MEM_BASE + 0x1_0000 + id * 0x800;
            fill(
                &mut net,
                0,
                src,
                len,
                (id as u8).wrapping_mul(7) ^ seed as u8,
            );
            let raddr = MEM_BASE + 0x8_0000 + id * 0x800;
            post_recv(&mut net, &b, b.qps[to], id, raddr, 2048);
            send(&mut net, &a, i, dest(&a, &b, to), id, src, len as u32);
            msgs.push(Sent { to, src, len });
            id += 1;
            let _ = round;
        }
    }
    // And READs back from node 1 on each QP.
    let mut reads = Vec::new();
    for i in 0..3 {
        let len = 300 + rng.below(900) as usize;
        let rsrc = MEM_BASE + 0x4_0000 + i as u64 * 0x1000;
        let rdst = MEM_BASE + 0x5_0000 + i as u64 * 0x1000;
        fill(&mut net, 1, rsrc, len, 0x40 + i as u8);
        let local = sge(rdst, len as u32, a.lkey);
        let wr = remote_wr(1000 + i as u64, WrOpcode::RdmaRead, local, rsrc, b.lkey);
        post(&mut net, &a, a.qps[i], wr, dest(&a, &b, 0));
        reads.push((rsrc, rdst, len));
    }
    // And fetch-adds of 1 on one counter of node 1 (OP-07: each runs once).
    let counter = MEM_BASE + 0x6_0000;
    for k in 0..6u64 {
        let res = sge(MEM_BASE + 0x7_0000 + k * 8, 8, a.lkey);
        let mut wr = remote_wr(2000 + k, WrOpcode::AtomicFetchAdd, res, counter, b.lkey);
        wr.swap_add = 1;
        post(&mut net, &a, a.qps[(k % 3) as usize], wr, dest(&a, &b, 0));
    }
    let total = msgs.len();
    let s: Vec<Completion> = wait(&mut net, 0, a.scq, total + 3 + 6);
    let r: Vec<Completion> = wait(&mut net, 1, b.rcq, total);
    assert!(
        s.iter().all(|c| c.status == WcStatus::Success),
        "seed {seed}: {s:?}"
    );
    // Exactly once, in the EEC's order, byte-exact.
    let sent_order: Vec<u64> = s
        .iter()
        .filter(|c| c.wr_id < 1000)
        .map(|c| c.wr_id)
        .collect();
    let recv_order: Vec<u64> = r.iter().map(|c| c.wr_id).collect();
    assert_eq!(sent_order, recv_order, "seed {seed}");
    for c in &r {
        assert_eq!(c.status, WcStatus::Success, "seed {seed}");
        let m = msgs[c.wr_id as usize];
        assert_eq!(c.qp_num, b.qps[m.to]);
        assert_eq!(c.byte_len as usize, m.len, "seed {seed}");
        let raddr = MEM_BASE + 0x8_0000 + c.wr_id * 0x800;
        assert_eq!(
            bytes(&net, 1, raddr, m.len),
            bytes(&net, 0, m.src, m.len),
            "seed {seed} message {}",
            c.wr_id
        );
    }
    for (rsrc, rdst, len) in reads {
        assert_eq!(
            bytes(&net, 0, rdst, len),
            bytes(&net, 1, rsrc, len),
            "seed {seed}"
        );
    }
    assert_eq!(
        bytes(&net, 1, counter, 8),
        6u64.to_le_bytes(),
        "seed {seed}"
    );
    let mut origs: Vec<u64> = (0..6u64)
        .map(|k| {
            let b = bytes(&net, 0, MEM_BASE + 0x7_0000 + k * 8, 8);
            u64::from_le_bytes(b.try_into().unwrap())
        })
        .collect();
    origs.sort_unstable();
    assert_eq!(origs, [0, 1, 2, 3, 4, 5], "seed {seed}");
    // Nothing more arrives later (no duplicate delivery).
    net.run_until(200_000, |_| false);
    assert!(net.poll(1, b.rcq).is_none(), "seed {seed}");
    let c = &net.nodes[0].engine.counters().rd;
    assert!(
        c.retransmits > 0 || c.timeouts > 0,
        "seed {seed}: no loss recovered"
    );
    (net.dropped, c.retransmits, c.timeouts)
}

#[test]
fn ad_11_lossy_fabric_exactly_once_in_order_per_eec() {
    let mut sum = (0, 0, 0);
    for seed in 0..24 {
        let (d, r, t) = lossy_run(seed);
        sum = (sum.0 + d, sum.1 + r, sum.2 + t);
    }
    eprintln!(
        "24 seeds: {} packets lost, {} retransmitted, {} ACK timeouts",
        sum.0, sum.1, sum.2
    );
}

#[test]
fn ad_11_send_first_then_only_or_bad_length_keeps_the_receive_wqe() {
    // Issue 25 item 3: a SEND First takes node 1's receive WQE; the next
    // packet is a SEND Only (a new message inside the first) or a Middle
    // of the wrong length. Both are NAKed Invalid Request, and the WQE is
    // not lost: it goes back to its queue, so moving the QP to Error
    // flushes it (a completion for the guest's buffer).
    for only in [true, false] {
        let (mut net, a, b) = pair(11, 1, Mtu::M256);
        post_recv(&mut net, &b, b.qps[0], 9, MEM_BASE + 0x1000, 4096);
        send(&mut net, &a, 0, dest(&a, &b, 0), 1, MEM_BASE + 0x8000, 600);
        let reqs = take_sent(&mut net, 0);
        assert_eq!(reqs.len(), 3, "First, Middle, Last");
        let second = if only {
            reemit(&reqs[2], |p| {
                p.transport.bth.opcode = transport::wire::opcode::Opcode::RD_SEND_ONLY;
                p.transport.bth.psn = PSN_A + 1;
            })
        } else {
            reemit(&reqs[1], |p| {
                p.transport.payload = &p.transport.payload[..100]
            })
        };
        let now = net.now;
        let n1 = &mut net.nodes[1];
        n1.engine.handle_packet(&reqs[0], &mut n1.mem, now);
        n1.engine.handle_packet(&second, &mut n1.mem, now);
        let naks: Vec<_> = take_sent(&mut net, 1)
            .iter()
            .filter_map(|b| match PacketRepr::parse(b).unwrap().transport.ext.aeth {
                Some(a) => match a.syndrome {
                    AethSyndrome::Nak(c) => Some(c),
                    _ => None,
                },
                None => None,
            })
            .collect();
        assert_eq!(naks, vec![NakCode::InvalidRequest], "only {only}");
        assert!(net.poll(1, b.rcq).is_none(), "only {only}");
        let e1 = &mut net.nodes[1].engine;
        let err = RdQpAttr {
            state: QpState::Error,
            qkey: None,
            access: None,
        };
        e1.modify_rd_qp(b.qps[0], &err).unwrap();
        let c = net.poll(1, b.rcq).expect("the WQE is flushed, not lost");
        assert_eq!(
            (c.wr_id, c.status, c.qp_num),
            (9, WcStatus::WrFlushErr, b.qps[0]),
            "only {only}"
        );
    }
}

/// Issue 25 item 6 (A17.4.5, as RC and UD): an RD frame on RoCE is taken
/// only when its destination IP is the GID its EEC's path sends from, one
/// of the port's own: with node 1's GID 0 gone, node 0's SEND is dropped
/// and counted (`bad_path`), nothing is delivered; with it back, the
/// retransmission is.
#[test]
fn ad_11_rd_over_roce_to_an_address_not_the_ports_is_dropped() {
    let (mut net, a, b) = roce_pair(12);
    let dst = MEM_BASE + 0x8000;
    post_recv(&mut net, &b, b.qps[0], 7, dst, 4096);
    net.nodes[1].engine.set_roce_gid(0, None).unwrap();
    send(&mut net, &a, 0, dest(&a, &b, 0), 1, MEM_BASE + 0x1000, 64);
    net.run_until(20_000, |n| n.nodes[1].engine.counters().rd.bad_path > 0);
    assert!(net.nodes[1].engine.counters().rd.bad_path > 0);
    assert!(net.poll(1, b.rcq).is_none(), "nothing delivered");
    net.nodes[1]
        .engine
        .set_roce_gid(0, Some(roce_gid_v4(2)))
        .unwrap();
    assert_eq!(wait(&mut net, 1, b.rcq, 1)[0].byte_len, 64);
    assert_eq!(sent(&mut net, &a).status, WcStatus::Success);
}
