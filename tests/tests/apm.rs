//! Automatic path migration (AD-10) between real `vhca` processes: the
//! guest loads an alternate path through MODIFY_QP (`ModifyQpIn::alt`), arms
//! it, QUERY_QP reports it; a migration the guest asks of one side moves its
//! requests onto the alternate path with MigReq, the other side follows, and
//! its guest gets the path migrated event (`VHCA_EQE_PATH_MIG`).

use std::time::Duration;

use vhca_tests::abi::cmd::QpAttr;
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::cqe::EqeType;
use vhca_tests::abi::verbs::{qp_attr_mask as m, QpType};
use vhca_tests::fixture::{assert_success, connect_pair, lmc_pair_options, load_alt, wait_n, Node};
use vhca_tests::hca::QpH;
use vhca_tests::{Layout, SendWr, Vhca};

const T: Duration = Duration::from_secs(20);
/// n0: LIDs 0x20..=0x21, n1: 0x28..=0x29 (LMC 1): the alternate paths use
/// the second LIDs.
const LID_A: u16 = 0x20;
const LID_B: u16 = 0x28;

fn mig(state: u8) -> QpAttr {
    QpAttr {
        path_mig_state: state,
        ..QpAttr::default()
    }
}

/// Two guests on LMC 1 nodes (A's packets to B's base LID lost with
/// `dead_primary`), an RC pair, the alternate paths loaded with migration
/// states `mig_a` and `mig_b`.
fn pair(dead_primary: bool, mig_a: u8, mig_b: u8) -> (Vhca, Node, Node, QpH, QpH) {
    let fault = dead_primary.then(|| format!("drop_dlid={LID_B}"));
    let v = Vhca::spawn(lmc_pair_options((LID_A, LID_B), fault));
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    load_alt(&mut a, qa, mig_a, LID_B + 1);
    load_alt(&mut b, qb, mig_b, LID_A + 1);
    (v, a, b, qa, qb)
}

/// A WRITE of `len` bytes of pattern `seed` from A's QP `qa` into a region
/// of B: waits for its completion and checks B's copy.
fn write_checked(a: &mut Node, b: &mut Node, qa: QpH, len: usize, seed: u64) {
    let src = a.region(len, Layout::Contiguous, 0);
    let dst = b.region(len, Layout::Contiguous, 0);
    a.write(&src, 0, &vhca_tests::util::pattern(seed, len));
    let w = SendWr::write(1, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len));
    a.hca.post_send(qa, &w).unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert_eq!(b.read(&dst, 0, len), vhca_tests::util::pattern(seed, len));
}

/// Waits for node `n`'s async event `kind` (`what` if it does not come),
/// which must name QP `q`; then QUERY_QP: the QP's (path migration state,
/// primary path DLID).
fn event_then_path(n: &mut Node, kind: EqeType, q: QpH, what: &str) -> (u8, u16) {
    let e = n
        .hca
        .wait_async_event(T, |e| e.kind == kind.raw())
        .expect(what);
    assert_eq!(e.object, q.qpn);
    let s = n.hca.query_qp(q).unwrap();
    (s.attr.path_mig_state, s.attr.ah_attr.dlid)
}

#[test]
fn ad_10_guest_arms_the_alternate_path_migrates_and_the_peer_follows_with_an_event() {
    // Rearm (1) with the alternate path: the device arms it (2).
    let (_v, mut a, mut b, qa, qb) = pair(false, 1, 1);
    let q = a.hca.query_qp(qa).unwrap();
    assert_eq!(q.attr.path_mig_state, 2, "Armed");
    assert_eq!((q.alt.ah_attr.dlid, q.alt.timeout), (LID_B + 1, 14));
    // The guest migrates A (Migrated, 0): no event on A's side.
    a.hca
        .modify_qp(qa, m::PATH_MIG_STATE, &mig(0))
        .expect("migrate a");
    let q = a.hca.query_qp(qa).unwrap();
    assert_eq!((q.attr.path_mig_state, q.attr.ah_attr.dlid), (0, LID_B + 1));
    assert_eq!(
        q.alt.ah_attr.dlid, LID_B,
        "the old primary is the alternate"
    );
    // A WRITE goes on the new path; B follows on its MigReq.
    write_checked(&mut a, &mut b, qa, 64 << 10, 3);
    let path = event_then_path(&mut b, EqeType::PathMig, qb, "path migrated event at B");
    assert_eq!(path, (0, LID_A + 1));
    assert_eq!(
        b.hca.counter(CounterSet::Port, "path_migrations").unwrap(),
        Some(1)
    );
    assert!(a
        .hca
        .wait_async_event(Duration::from_millis(200), |e| e.kind
            == EqeType::PathMig.raw())
        .is_none());
}

#[test]
fn ad_10_a_dead_primary_path_migrates_with_nothing_lost_and_both_guests_see_the_event() {
    // A's packets to B's base LID (the primary path) are all lost; B's LID
    // 0x29 (the alternate path) stays reachable.
    let (_v, mut a, mut b, qa, qb) = pair(true, 2, 2);
    write_checked(&mut a, &mut b, qa, 1 << 20, 5);
    for (n, q, peer) in [(&mut a, qa, LID_B), (&mut b, qb, LID_A)] {
        let path = event_then_path(n, EqeType::PathMig, q, "path migrated event");
        assert_eq!(path, (0, peer + 1));
    }
    assert!(a.hca.counter(CounterSet::Port, "timeouts").unwrap() >= Some(2));
}

#[test]
fn ad_10_a_guest_not_armed_gets_the_path_migration_error_event() {
    // A's primary path is dead and A is Armed: A migrates and asks B to
    // follow (MigReq = 1 on B's alternate path). B holds that alternate path
    // but is not Armed: it refuses, and its guest gets VHCA_EQE_PATH_MIG_ERR.
    // B's alternate path loaded, not armed (0).
    let (_v, mut a, mut b, qa, qb) = pair(true, 2, 0);
    let len = 4096;
    let src = a.region(len, Layout::Contiguous, 0);
    let dst = b.region(len, Layout::Contiguous, 0);
    let w = SendWr::write(1, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len));
    a.hca.post_send(qa, &w).unwrap();
    let what = "path migration error event at B";
    let path = event_then_path(&mut b, EqeType::PathMigErr, qb, what);
    assert_eq!(path, (0, LID_A));
    assert_eq!(
        b.hca
            .counter(CounterSet::Port, "path_migration_errors")
            .unwrap(),
        Some(1)
    );
    assert!(a
        .hca
        .wait_async_event(T, |e| e.kind == EqeType::PathMig.raw())
        .is_some());
}
