//! XRC between two `vhca` processes on UDP loopback (SR-02, PV-08): ALLOC_XRCD,
//! XRC SRQs with their own CQ, an XRC_TGT QP without rings, an XRC_INI QP
//! whose send WQEs carry `struct vhca_xrc_seg`. The SEND lands in the SRQ its
//! XRC segment names; an SRQ of another domain is NAKed; QUERY_DEVICE shows
//! the XRC capability; the objects' lifetimes are enforced.

use std::time::Duration;

use vhca_tests::abi::bar0::dev_cap;
use vhca_tests::abi::cmd::Status;
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::verbs::{QpType, WcOpcode, WcStatus};
use vhca_tests::fixture::{assert_success, connect_qps, wait_n, Node, Region};
use vhca_tests::util::pattern;
use vhca_tests::{ConnOpts, Layout, Options, QpH, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);

/// Node b's XRC side: a domain, a CQ for its SRQs, a TGT QP.
struct Target {
    xrcd: u32,
    cq: vhca_tests::CqH,
    tgt: QpH,
}

fn setup() -> (Vhca, Node, Node, QpH, Target) {
    let v = Vhca::spawn(Options::nodes(2));
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let xrcd = b.hca.alloc_xrcd().expect("ALLOC_XRCD");
    let cq = b.hca.create_cq(6, 0).expect("CREATE_CQ");
    let tgt = b.hca.create_xrc_tgt_qp(xrcd).expect("CREATE_QP XRC_TGT");
    let ini = a
        .hca
        .create_qp(&QpInit::new(QpType::XrcIni, a.pd, a.cq))
        .expect("CREATE_QP XRC_INI");
    connect_qps(&mut a.hca, ini, &mut b.hca, tgt, &ConnOpts::default());
    (v, a, b, ini, Target { xrcd, cq, tgt })
}

fn region(n: &mut Node, len: usize) -> Region {
    n.region(len, Layout::Scattered, 5)
}

#[test]
fn sr02_xrc_send_lands_in_the_srq_named_by_the_wqe() {
    let (_v, mut a, mut b, ini, t) = setup();
    let caps = b.hca.query_device().unwrap().cap_flags;
    assert_ne!(caps & dev_cap::XRC, 0, "QUERY_DEVICE shows XRC");
    let s1 = b.hca.create_xrc_srq(b.pd, t.xrcd, t.cq, 16, 1).unwrap();
    let s2 = b.hca.create_xrc_srq(b.pd, t.xrcd, t.cq, 16, 1).unwrap();
    let src = region(&mut a, 16 << 10);
    let d1 = region(&mut b, 16 << 10);
    let d2 = region(&mut b, 16 << 10);
    b.hca
        .post_srq_recv(
            s1,
            &[RecvWr::new(11, vec![d1.mr.sge(&d1.buf, 0, 16 << 10)])],
        )
        .unwrap();
    b.hca
        .post_srq_recv(
            s2,
            &[RecvWr::new(22, vec![d2.mr.sge(&d2.buf, 0, 16 << 10)])],
        )
        .unwrap();
    // 10000 bytes (several packets) to SRQ 2, then 300 with immediate to SRQ 1.
    let m2 = pattern(2, 10_000);
    let m1 = pattern(1, 300);
    a.write(&src, 0, &m2);
    a.write(&src, 12 << 10, &m1);
    let w2 = SendWr::send(1)
        .sges(vec![src.mr.sge(&src.buf, 0, m2.len())])
        .xrc(s2.srqn);
    let w1 = SendWr::send_imm(2, 0xfeed)
        .sges(vec![src.mr.sge(&src.buf, 12 << 10, m1.len())])
        .xrc(s1.srqn);
    a.hca.post_send_batch(ini, &[w2, w1]).unwrap();
    let sent = wait_n(&mut a.hca, a.cq, 2, T);
    assert_success(&sent);
    let got = wait_n(&mut b.hca, t.cq, 2, T);
    assert_success(&got);
    let seen: Vec<_> = got
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.qp_num, c.src_qp, c.srqn))
        .collect();
    let recv = WcOpcode::Recv.raw();
    assert_eq!(
        seen,
        vec![
            (22, recv, 10_000, t.tgt.qpn, ini.qpn, s2.srqn),
            (11, recv, 300, t.tgt.qpn, ini.qpn, s1.srqn),
        ]
    );
    assert_eq!(got[1].imm_or_inv, 0xfeed);
    assert_eq!(b.read(&d2, 0, m2.len()), m2);
    assert_eq!(b.read(&d1, 0, m1.len()), m1);
    // Nothing went to the node's own CQ.
    assert!(b.hca.poll_cq(b.cq, 4).is_empty());
    // RDMA WRITE through the TGT QP, checked against the SRQ's PD.
    let w = SendWr::write(3, d1.buf.va(0), d1.mr.rkey)
        .sges(vec![src.mr.sge(&src.buf, 0, 5000)])
        .xrc(s1.srqn);
    a.hca.post_send(ini, &w).unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert_eq!(b.read(&d1, 0, 5000), m2[..5000]);
}

#[test]
fn pv08_xrc_srq_of_another_domain_is_naked() {
    let (_v, mut a, mut b, ini, t) = setup();
    let other = b.hca.alloc_xrcd().unwrap();
    let foreign = b.hca.create_xrc_srq(b.pd, other, t.cq, 16, 1).unwrap();
    let d = region(&mut b, 4096);
    b.hca
        .post_srq_recv(foreign, &[RecvWr::new(9, vec![d.mr.sge(&d.buf, 0, 4096)])])
        .unwrap();
    let src = region(&mut a, 4096);
    let w = SendWr::send(1)
        .sges(vec![src.mr.sge(&src.buf, 0, 100)])
        .xrc(foreign.srqn);
    a.hca.post_send(ini, &w).unwrap();
    let c = wait_n(&mut a.hca, a.cq, 1, T);
    assert_eq!(c[0].status, WcStatus::RemInvReqErr.raw(), "{c:?}");
    assert_eq!(b.hca.query_srq(foreign).unwrap().wqe_count, 1);
    assert!(b.hca.poll_cq(t.cq, 4).is_empty());
    let naks = b.hca.counter(CounterSet::NakSent, "xrc_srq").unwrap();
    assert_eq!(naks, Some(1));
}

#[test]
fn sr02_xrc_objects_lifetimes_and_bad_creates() {
    let (_v, _a, mut b, _ini, t) = setup();
    let s = b.hca.create_xrc_srq(b.pd, t.xrcd, t.cq, 16, 1).unwrap();
    // The domain holds while an SRQ or TGT QP is in it; the CQ while an
    // SRQ completes on it.
    let busy = |r: Result<(), vhca_tests::CmdError>| match r {
        Err(vhca_tests::CmdError::Status { status, .. }) => status,
        other => panic!("{other:?}"),
    };
    assert_eq!(busy(b.hca.dealloc_xrcd(t.xrcd)), Status::Busy.raw());
    assert_eq!(busy(b.hca.destroy_cq(t.cq)), Status::Busy.raw());
    // No domain, no CQ: refused.
    assert!(b.hca.create_xrc_srq(b.pd, 999, t.cq, 16, 1).is_err());
    assert!(b.hca.create_xrc_tgt_qp(999).is_err());
    // An INI QP has no receive side.
    let ini_srq = QpInit::new(QpType::XrcIni, b.pd, b.cq).srq(s);
    assert!(b.hca.create_qp(&ini_srq).is_err());
    // QUERY_QP of a TGT QP: no PD, CQs or SRQ.
    let q = b.hca.query_qp(t.tgt).unwrap();
    assert_eq!(q.qp_type, QpType::XrcTgt.raw());
    b.hca.destroy_srq(s).unwrap();
    assert_eq!(busy(b.hca.dealloc_xrcd(t.xrcd)), Status::Busy.raw());
    b.hca.destroy_qp(t.tgt).unwrap();
    b.hca.dealloc_xrcd(t.xrcd).unwrap();
    b.hca.destroy_cq(t.cq).unwrap();
}
