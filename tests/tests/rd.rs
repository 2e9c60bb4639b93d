//! Reliable Datagram between two `vhca` processes on UDP loopback (AD-11),
//! driven over vfio-user by the test driver (Linux verbs have no RD):
//! ALLOC_RDD, CREATE/MODIFY/QUERY_EEC, RD QPs whose send WQEs carry `struct
//! vhca_rd_seg`; SEND, RDMA WRITE and RDMA READ through one EE context pair;
//! a destination QP of another RD domain is refused (PV-09).

use std::time::Duration;

use vhca_tests::abi::bar0::{CtxStatus, CtxTable};
use vhca_tests::abi::cmd::{Av, EecAttr, Status};
use vhca_tests::abi::verbs::{num, Mtu, QpState, QpType, WcOpcode, WcStatus};
use vhca_tests::fixture::{assert_success, wait_n, Node, Region};
use vhca_tests::util::pattern;
use vhca_tests::{ConnOpts, Layout, Options, QpH, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);

/// One node's RD side: a domain, an EE context, an RD QP in the domain.
struct Side {
    rdd: u32,
    eec: u32,
    qp: QpH,
}

fn rd_qp(n: &mut Node, rdd: u32, o: &ConnOpts) -> QpH {
    let qp = n
        .hca
        .create_qp(&QpInit::rd(n.pd, n.cq, rdd))
        .expect("CREATE_QP RD");
    n.hca.qp_to_init(qp, o).expect("RD QP to Init");
    n.hca.qp_to_rtr(qp, None, o).expect("RD QP to RTR");
    n.hca.qp_to_rts(qp, o).expect("RD QP to RTS");
    qp
}

fn side(n: &mut Node, o: &ConnOpts) -> Side {
    let rdd = n.hca.alloc_rdd().expect("ALLOC_RDD");
    let eec = n.hca.create_eec(rdd).expect("CREATE_EEC");
    let qp = rd_qp(n, rdd, o);
    Side { rdd, eec, qp }
}

/// MODIFY_EEC Init -> RTR -> RTS toward the peer's EE context.
fn eec_up(n: &mut Node, s: &Side, peer_lid: u16, peer_eec: u32, sq_psn: u32, rq_psn: u32) {
    let mut a = EecAttr {
        state: QpState::Init.raw(),
        ..EecAttr::default()
    };
    n.hca.modify_eec(s.eec, &a).expect("EEC to Init");
    a.state = QpState::Rtr.raw();
    a.path_mtu = Mtu::M1024.raw();
    a.remote_eecn = peer_eec;
    a.rq_psn = rq_psn;
    a.min_rnr_timer = 1;
    a.av = Av {
        dlid: peer_lid,
        port_num: num::PORT as u8,
        ..Av::default()
    };
    n.hca.modify_eec(s.eec, &a).expect("EEC to RTR");
    a.state = QpState::Rts.raw();
    a.sq_psn = sq_psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    n.hca.modify_eec(s.eec, &a).expect("EEC to RTS");
}

fn setup() -> (Vhca, Node, Node, Side, Side, ConnOpts) {
    setup_with(Options::nodes(2))
}

fn setup_with(opts: Options) -> (Vhca, Node, Node, Side, Side, ConnOpts) {
    let v = Vhca::spawn(opts);
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let o = ConnOpts::default();
    let sa = side(&mut a, &o);
    let sb = side(&mut b, &o);
    let (la, lb) = (a.lid(), b.lid());
    eec_up(&mut a, &sa, lb, sb.eec, 0x10, 0x777);
    eec_up(&mut b, &sb, la, sa.eec, 0x777, 0x10);
    (v, a, b, sa, sb, o)
}

fn region(n: &mut Node, len: usize) -> Region {
    n.region(len, Layout::Scattered, 3)
}

#[test]
fn ad_11_op_07_rd_send_write_read_atomic_between_two_devices() {
    let (_v, mut a, mut b, sa, sb, o) = setup();
    let src = region(&mut a, 16 << 10);
    let dst = region(&mut b, 16 << 10);
    // SEND with immediate of 5000 bytes (5 packets at 1024).
    let msg = pattern(7, 5000);
    a.write(&src, 0, &msg);
    b.hca
        .post_recv(sb.qp, &RecvWr::new(77, vec![dst.mr.sge(&dst.buf, 0, 8192)]))
        .unwrap();
    let w = SendWr::send_imm(1, 0xbeef)
        .sges(vec![src.mr.sge(&src.buf, 0, msg.len())])
        .rd(sa.eec, sb.qp.qpn, o.qkey);
    a.hca.post_send(sa.qp, &w).unwrap();
    let s = wait_n(&mut a.hca, a.cq, 1, T);
    assert_success(&s);
    let r = wait_n(&mut b.hca, b.cq, 1, T);
    assert_success(&r);
    assert_eq!((r[0].wr_id, r[0].byte_len), (77, 5000));
    assert_eq!((r[0].qp_num, r[0].src_qp), (sb.qp.qpn, sa.qp.qpn));
    assert_eq!(r[0].imm_or_inv, 0xbeef);
    assert_eq!(r[0].opcode, WcOpcode::Recv.raw());
    assert_eq!(b.read(&dst, 0, msg.len()), msg);
    // RDMA WRITE of 3000 bytes, then an RDMA READ of them back.
    let wmsg = pattern(9, 3000);
    a.write(&src, 8192, &wmsg);
    let w = SendWr::write(2, dst.buf.va(10_000), dst.mr.rkey)
        .sges(vec![src.mr.sge(&src.buf, 8192, wmsg.len())])
        .rd(sa.eec, sb.qp.qpn, o.qkey);
    let rd = SendWr::read(3, dst.buf.va(10_000), dst.mr.rkey)
        .sges(vec![src.mr.sge(&src.buf, 12_288, wmsg.len())])
        .rd(sa.eec, sb.qp.qpn, o.qkey);
    a.hca.post_send_batch(sa.qp, &[w, rd]).unwrap();
    let s = wait_n(&mut a.hca, a.cq, 2, T);
    assert_success(&s);
    assert_eq!(s[1].opcode, WcOpcode::RdmaRead.raw());
    assert_eq!(b.read(&dst, 10_000, wmsg.len()), wmsg);
    assert_eq!(a.read(&src, 12_288, wmsg.len()), wmsg);
    // A FETCH_ADD of 5 on an 8-byte aligned word of node b (OP-07 over RD).
    let at = 12_000 + ((8 - dst.buf.va(12_000) % 8) % 8) as usize;
    b.write(&dst, at, &100u64.to_le_bytes());
    let fa = SendWr::fetch_add(4, dst.buf.va(at), dst.mr.rkey, 5)
        .sges(vec![src.mr.sge(&src.buf, 15_000, 8)])
        .rd(sa.eec, sb.qp.qpn, o.qkey);
    a.hca.post_send(sa.qp, &fa).unwrap();
    let s = wait_n(&mut a.hca, a.cq, 1, T);
    assert_success(&s);
    assert_eq!(s[0].opcode, WcOpcode::FetchAdd.raw());
    assert_eq!(a.read(&src, 15_000, 8), 100u64.to_le_bytes());
    assert_eq!(b.read(&dst, at, 8), 105u64.to_le_bytes());
    // QUERY_EEC: node b expected 5 SEND + 3 WRITE + 3 READ + 1 ATOMIC PSNs
    // from 0x10.
    let q = b.hca.query_eec(sb.eec).unwrap();
    assert_eq!(q.rddn, sb.rdd);
    assert_eq!(q.attr.state, QpState::Rts.raw());
    assert_eq!(q.attr.rq_psn, 0x10 + 12);
    assert_eq!(q.attr.remote_eecn, sa.eec);
    let q = a.hca.query_eec(sa.eec).unwrap();
    assert_eq!(q.attr.sq_psn, 0x10 + 12);
    let qq = a.hca.query_qp(sa.qp).unwrap();
    assert_eq!(qq.qp_type, QpType::Rd.raw());
    assert_eq!(qq.attr.qkey, o.qkey);
    // The BAR0 context window shows the RD QP too.
    let (st, w) = a.hca.read_context(CtxTable::Qpc, sa.qp.qpn).unwrap();
    assert_eq!(st, CtxStatus::Ok.raw());
    assert_eq!(u32::from_le_bytes(w[0..4].try_into().unwrap()), sa.qp.qpn);
}

#[test]
fn pv_09_rd_qp_of_another_domain_is_refused_between_two_devices() {
    let (_v, mut a, mut b, sa, sb, o) = setup();
    // A second RD domain on node b with a QP in it: the EEC's RDD is not its.
    let other = b.hca.alloc_rdd().unwrap();
    let stranger = rd_qp(&mut b, other, &o);
    let src = region(&mut a, 4096);
    let dst = region(&mut b, 4096);
    b.hca
        .post_recv(
            stranger,
            &RecvWr::new(5, vec![dst.mr.sge(&dst.buf, 0, 4096)]),
        )
        .unwrap();
    let w =
        SendWr::send(1)
            .sges(vec![src.mr.sge(&src.buf, 0, 100)])
            .rd(sa.eec, stranger.qpn, o.qkey);
    a.hca.post_send(sa.qp, &w).unwrap();
    let s = wait_n(&mut a.hca, a.cq, 1, T);
    assert_eq!(s[0].status, WcStatus::RemInvRdReqErr.raw(), "{s:?}");
    // The domain is in use; the first one's EEC keeps it busy too.
    let e = b.hca.dealloc_rdd(other).unwrap_err();
    assert_eq!(e.status(), Some(Status::Busy));
    assert_eq!(
        b.hca.dealloc_rdd(sb.rdd).unwrap_err().status(),
        Some(Status::Busy)
    );
    // CREATE_QP RD in no domain is NOT_FOUND.
    let e = b
        .hca
        .create_qp(&QpInit::rd(b.pd, b.cq, 0x4444))
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::NotFound));
}

#[test]
fn ad_11_rd_over_a_lossy_fabric_between_two_devices() {
    // Both processes drop, duplicate and reorder (`--fault`): every message
    // still arrives once, in the order sent, byte-exact.
    let (v, mut a, mut b, sa, sb, o) =
        setup_with(Options::nodes(2).fault("drop=0.05,dup=0.02,reorder=0.02"));
    let n = 40;
    let src = region(&mut a, n * 4096);
    let dst = region(&mut b, n * 4096);
    let recvs: Vec<RecvWr> = (0..n)
        .map(|i| RecvWr::new(i as u64, vec![dst.mr.sge(&dst.buf, i * 4096, 4096)]))
        .collect();
    b.hca.post_recv_batch(sb.qp, &recvs).unwrap();
    let mut msgs = Vec::new();
    let mut wrs = Vec::new();
    for i in 0..n {
        let m = pattern(i as u64, 100 + (i * 397) % 3900);
        a.write(&src, i * 4096, &m);
        wrs.push(
            SendWr::send(i as u64)
                .sges(vec![src.mr.sge(&src.buf, i * 4096, m.len())])
                .rd(sa.eec, sb.qp.qpn, o.qkey),
        );
        msgs.push(m);
    }
    a.hca.post_send_batch(sa.qp, &wrs).unwrap();
    let s = wait_n(&mut a.hca, a.cq, n, T);
    assert_success(&s);
    let r = wait_n(&mut b.hca, b.cq, n, T);
    assert_success(&r);
    for (i, c) in r.iter().enumerate() {
        assert_eq!(c.wr_id, i as u64, "in order");
        assert_eq!(c.byte_len as usize, msgs[i].len());
        assert_eq!(
            b.read(&dst, i * 4096, msgs[i].len()),
            msgs[i],
            "message {i}"
        );
    }
    // Nothing more (no message delivered twice).
    std::thread::sleep(Duration::from_millis(300));
    assert!(b
        .hca
        .wait_cqes(b.cq, 1, Duration::from_millis(200))
        .is_empty());
    // The fabric did lose: node a sent more than the messages' packets (go-backs
    // after sequence NAKs or ACK timeouts; 0.95^100 that it lost none).
    let needed: u64 = msgs.iter().map(|m| m.len().div_ceil(1024) as u64).sum();
    let sent = a.hca.port_counter("tx_packets").unwrap().unwrap();
    assert!(
        sent > needed,
        "{sent} packets for {needed}: no loss recovered"
    );
    drop(v);
}
