//! Partitions (AD-05, PV-03) and LMC paths (AD-01) between real `vhca`
//! processes whose fabric file gives each node an LMC and a P_Key table:
//! QUERY_PORT and QUERY_DEVICE report them, a QP's P_Key index picks the
//! P_Key its packets carry, two limited members do not meet (counted), QP1
//! takes any partition of the port's table, and path bits pick the SLID.

use std::collections::HashMap;
use std::time::Duration;

use vhca_tests::abi::cmd::{Av, QpAttr};
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::verbs::{qp_attr_mask as m, QpState, QpType, WcStatus};
use vhca_tests::fixture::{assert_success, connect_pair_with, wait_n, Node};
use vhca_tests::verbs::ud_dest;
use vhca_tests::{ConnOpts, Hca, Layout, Options, QpH, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(20);
const GSI_QKEY: u32 = 0x8001_0000;

/// n0: LIDs 0x20..=0x23 (LMC 2), n1: 0x28..=0x29 (LMC 1); partition 5 full
/// on n0 and limited on n1, partition 7 limited on both.
fn fabric() -> (Vhca, Node, Node) {
    let opts = Options {
        lids: HashMap::from([(0, 0x20), (1, 0x28)]),
        node_toml: HashMap::from([
            (
                0,
                "lmc = 2\npkeys = [\"0xffff\", \"0x8005\", \"0x0007\"]".to_string(),
            ),
            (
                1,
                "lmc = 1\npkeys = [\"0xffff\", \"0x0005\", \"0x0007\"]".to_string(),
            ),
        ]),
        ..Options::nodes(2)
    };
    let v = Vhca::spawn(opts);
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

/// RTS -> SQD -> RTS with a new P_Key index and, for connected QPs, path
/// (the way software changes them, QS-05).
fn repath(h: &mut Hca, qp: QpH, pkey_index: u16, av: Option<Av>) {
    let sqd = QpAttr {
        qp_state: QpState::Sqd.raw(),
        ..QpAttr::default()
    };
    h.modify_qp(qp, m::STATE, &sqd).expect("to SQD");
    let mut a = QpAttr {
        qp_state: QpState::Rts.raw(),
        pkey_index,
        ..QpAttr::default()
    };
    let mut mask = m::STATE | m::PKEY_INDEX;
    if let Some(av) = av {
        a.ah_attr = av;
        mask |= m::AV;
    }
    h.modify_qp(qp, mask, &a).expect("back to RTS");
}

fn path(dlid: u16, src_path_bits: u8) -> Option<Av> {
    Some(Av {
        dlid,
        src_path_bits,
        port_num: 1,
        ..Av::default()
    })
}

fn bad_pkeys(h: &mut Hca) -> u64 {
    h.counter(CounterSet::RxDrop, "bad_pkey").unwrap().unwrap()
}

#[test]
fn ad_05_ad_01_query_port_and_device_report_the_table_and_lmc() {
    let (_v, mut a, mut b) = fabric();
    let p = a.hca.query_port(1).unwrap();
    assert_eq!((p.lid, p.lmc, p.pkey_tbl_len), (0x20, 2, 3));
    assert_eq!(&p.pkeys[..4], &[0xffff, 0x8005, 0x0007, 0]);
    assert_eq!(a.hca.query_device().unwrap().max_pkeys, 3);
    let p = b.hca.query_port(1).unwrap();
    assert_eq!((p.lid, p.lmc, p.pkey_tbl_len), (0x28, 1, 3));
    assert_eq!(&p.pkeys[..3], &[0xffff, 0x0005, 0x0007]);
    // An index past the table is refused at MODIFY_QP.
    let q = a.qp(QpType::Rc);
    let init = QpAttr {
        qp_state: QpState::Init.raw(),
        pkey_index: 3,
        port_num: 1,
        ..QpAttr::default()
    };
    assert!(a
        .hca
        .modify_qp(
            q,
            m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
            &init
        )
        .is_err());
}

#[test]
fn ad_01_pv_03_rc_over_path_bits_in_a_shared_partition_limited_pair_dropped() {
    let (_v, mut a, mut b) = fabric();
    let src = a.region(8192, Layout::Contiguous, 0);
    let dst = b.region(8192, Layout::Contiguous, 0);
    a.write(&src, 0, &vhca_tests::util::pattern(3, 8192));
    // Two tries of about 67 ms each for the pair that cannot meet.
    let o = ConnOpts {
        retry_cnt: 1,
        ..ConnOpts::default()
    };
    let (ia, ib) = (
        QpInit::new(QpType::Rc, a.pd, a.cq),
        QpInit::new(QpType::Rc, b.pd, b.cq),
    );
    // Partition 5 (full on n0, limited on n1), n0's LID 0x23 to n1's 0x29
    // and back: the WRITE lands. With the default retries: two tries of
    // 67 ms are too few for a host busy enough to hold an ACK back that
    // long (the ACK then finds the QP in Error, counted QpNotReceiving).
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
    repath(&mut a.hca, qa, 1, path(0x29, 3));
    repath(&mut b.hca, qb, 1, path(0x23, 1));
    let w = SendWr::write(1, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 8192));
    a.hca.post_send(qa, &w).unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert_eq!(b.read(&dst, 0, 8192), a.read(&src, 0, 8192));
    assert_eq!(bad_pkeys(&mut b.hca), 0);
    // Partition 7, limited on both sides: n1 drops every request (counted)
    // and n0's WRITE runs out of retries.
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &o);
    repath(&mut a.hca, qa, 2, None);
    repath(&mut b.hca, qb, 2, None);
    let w = SendWr::write(2, dst.buf.va(4096), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 64));
    a.hca.post_send(qa, &w).unwrap();
    let c = wait_n(&mut a.hca, a.cq, 1, T);
    assert_eq!(c[0].status, WcStatus::RetryExcErr.raw());
    assert!(bad_pkeys(&mut b.hca) >= 2, "each try dropped");
}

/// A UD QP on `a` and QP1 on `b`, both at RTS with the GSI's Q_Key.
fn ud_to_qp1(a: &mut Node, b: &mut Node) -> (QpH, QpH) {
    let o = ConnOpts {
        qkey: GSI_QKEY,
        ..ConnOpts::default()
    };
    let gsi = b
        .hca
        .create_qp(&QpInit::new(QpType::Gsi, b.pd, b.cq))
        .expect("QP1");
    assert_eq!(gsi.qpn, 1);
    b.hca.qp_to_rts_from_reset(gsi, None, &o).unwrap();
    let ud = a.qp(QpType::Ud);
    a.hca.qp_to_rts_from_reset(ud, None, &o).unwrap();
    (ud, gsi)
}

#[test]
fn pv_03_ad_01_qp1_takes_any_partition_of_the_port_table() {
    let (_v, mut a, mut b) = fabric();
    let src = a.region(4096, Layout::Contiguous, 0);
    let dst = b.region(8192, Layout::Contiguous, 0);
    let (ud, gsi) = ud_to_qp1(&mut a, &mut b);
    for id in 0..4 {
        let sge = dst.mr.sge(&dst.buf, id * 1024, 1024);
        b.hca
            .post_recv(gsi, &RecvWr::new(id as u64, vec![sge]))
            .unwrap();
    }
    // n0's index 1 (0x8005) meets n1's entry 1 (0x0005); index 2 (0x0007)
    // is limited on both: dropped; index 0 meets entry 0. Path bits 2 to
    // n1's LID 0x29: SLID 0x22, n1's path bits 1.
    for (i, (idx, arrives)) in [(1u16, Some(1u16)), (2, None), (0, Some(0))]
        .into_iter()
        .enumerate()
    {
        repath(&mut a.hca, ud, idx, None);
        let before = bad_pkeys(&mut b.hca);
        let mut dest = ud_dest(0x29, 1, GSI_QKEY);
        dest.av.src_path_bits = 2;
        let w = SendWr::send(i as u64)
            .sge(src.mr.sge(&src.buf, 0, 32))
            .ud(dest);
        a.hca.post_send(ud, &w).unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
        match arrives {
            Some(entry) => {
                let c = wait_n(&mut b.hca, b.cq, 1, T);
                assert_success(&c);
                assert_eq!(c[0].pkey_index, entry, "index {idx}");
                assert_eq!((c[0].slid, c[0].dlid_path_bits), (0x22, 1));
                assert_eq!(bad_pkeys(&mut b.hca), before);
            }
            None => {
                assert!(b
                    .hca
                    .wait_cqes(b.cq, 1, Duration::from_millis(500))
                    .is_empty());
                assert_eq!(bad_pkeys(&mut b.hca), before + 1, "index {idx}");
            }
        }
    }
}

/// AD-05, PV-03 (IBA 11.4.1.1, C9-42, C9-43): QP1 answers in the partition
/// a request came in. n0's UD QP at P_Key index 1 (0x8005) sends to n1's
/// QP1, which takes it at its entry 1 (0x0005); n1 answers from QP1 with a
/// send WQE whose UD segment names that entry (`av.pkey_index`, Linux's
/// `ib_ud_wr.pkey_index`): the answer carries 0x0005, which n0's QP takes
/// (with QP1's own entry, 0xFFFF, n0 would drop it: not its partition). An
/// index past n1's table of three completes with LOC_QP_OP_ERR.
#[test]
fn ad_05_pv_03_qp1_answers_at_the_wqe_pkey_index() {
    let (_v, mut a, mut b) = fabric();
    let src = a.region(8192, Layout::Contiguous, 0);
    let dst = b.region(8192, Layout::Contiguous, 0);
    let (ud, gsi) = ud_to_qp1(&mut a, &mut b);
    repath(&mut a.hca, ud, 1, None);
    let sge = dst.mr.sge(&dst.buf, 0, 1024);
    b.hca.post_recv(gsi, &RecvWr::new(1, vec![sge])).unwrap();
    let sge = src.mr.sge(&src.buf, 4096, 1024);
    a.hca.post_recv(ud, &RecvWr::new(2, vec![sge])).unwrap();
    let w = SendWr::send(3)
        .sge(src.mr.sge(&src.buf, 0, 32))
        .ud(ud_dest(0x28, 1, GSI_QKEY));
    a.hca.post_send(ud, &w).unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    let c = wait_n(&mut b.hca, b.cq, 1, T);
    assert_success(&c);
    assert_eq!(c[0].pkey_index, 1);
    let before = bad_pkeys(&mut a.hca);
    let answer = |id: u64, pkey_index: u16| {
        let mut dest = ud_dest(0x20, ud.qpn, GSI_QKEY);
        dest.av.pkey_index = pkey_index;
        SendWr::send(id)
            .sge(dst.mr.sge(&dst.buf, 2048, 32))
            .ud(dest)
    };
    b.hca.post_send(gsi, &answer(4, c[0].pkey_index)).unwrap();
    assert_success(&wait_n(&mut b.hca, b.cq, 1, T));
    let got = wait_n(&mut a.hca, a.cq, 1, T);
    assert_success(&got);
    assert_eq!((got[0].wr_id, got[0].src_qp), (2, 1));
    assert_eq!(bad_pkeys(&mut a.hca), before);
    b.hca.post_send(gsi, &answer(5, 3)).unwrap();
    let c = wait_n(&mut b.hca, b.cq, 1, T);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::LocQpOpErr.raw()));
}
