//! Memory windows between two `vhca` processes on UDP loopback, through the
//! command queue and the send queue's WQEs (MP-06 type 1, MP-07 types 2B and 2A, OP-03
//! SEND with Invalidate; IBA 10.6.7, 9.4.1.1.3, o9-5.2.2; seed 003 "Memory
//! Window"): an RDMA WRITE lands through a bound type 2 window and fails after
//! LOCAL_INV and after SEND with Invalidate; a type 1 window is bound, keeps its
//! MR from being deregistered, and is rebound to a new R_Key.

use std::time::Duration;

use vhca_tests::abi::cmd::{MwType, Status};
use vhca_tests::abi::cqe::Cqe;
use vhca_tests::abi::verbs::{access, wc_flags, QpType, WcOpcode, WcStatus};
use vhca_tests::fixture::{connect_pair, wait_n, Node, Region, ALL_ACCESS};
use vhca_tests::hca::PblKind;
use vhca_tests::util::pattern;
use vhca_tests::{Layout, Options, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);
const RW: u32 = access::REMOTE_WRITE | access::REMOTE_READ;
/// The window: [WIN_OFF, WIN_OFF + WIN_LEN) of B's region.
const WIN_OFF: usize = 4096;
const WIN_LEN: usize = 8192;

fn two_nodes() -> (Vhca, Node, Node) {
    let v = Vhca::spawn(Options::nodes(2));
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

/// A region whose MR allows windows (MW_BIND).
fn bindable(n: &mut Node, len: usize) -> Region {
    let buf = n.hca.guest_mut().alloc_buf(len, Layout::Scattered, 0);
    let mr = n
        .hca
        .reg_mr(n.pd, &buf, ALL_ACCESS | access::MW_BIND, PblKind::OneLevel)
        .expect("REG_MR with MW_BIND");
    Region { buf, mr }
}

fn one(n: &mut Node) -> Cqe {
    wait_n(&mut n.hca, n.cq, 1, T)[0]
}

fn expect(c: &Cqe, id: u64, st: WcStatus, op: WcOpcode) {
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, st.raw(), op.raw()),
        "CQE {c:?}"
    );
}

/// The R_Key with the same index and the key byte plus `d`.
fn next_key(k: u32, d: u32) -> u32 {
    (k & !0xff) | (k.wrapping_add(d) & 0xff)
}

#[test]
fn mp_07_op_03_write_through_type2_window_then_local_inv_and_send_with_inv_revoke_it() {
    let (_v, mut a, mut b) = two_nodes();
    let src = a.region(WIN_LEN, Layout::Scattered, 0);
    let win = bindable(&mut b, 4 * 4096);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let mw = b.hca.alloc_mw(b.pd, MwType::Type2).expect("ALLOC_MW");
    // A window is a PD user (MP-06): the PD is busy.
    assert_eq!(
        b.hca.dealloc_pd(b.pd).unwrap_err().status(),
        Some(Status::Busy)
    );

    // MP-07: BIND_MW WQE on B's QP; no packet, a BIND_MW completion.
    let k1 = next_key(mw, 1);
    let va = win.buf.va(WIN_OFF);
    b.hca
        .post_send(
            qb,
            &SendWr::bind_mw(1, mw, k1, win.mr.lkey, va, WIN_LEN as u64, RW),
        )
        .unwrap();
    expect(&one(&mut b), 1, WcStatus::Success, WcOpcode::BindMw);
    // The MR has a window bound: DEREG_MR is refused.
    assert_eq!(
        b.hca.dereg_mr(&win.mr).unwrap_err().status(),
        Some(Status::Busy)
    );

    // An RDMA WRITE on the wire through the window's R_Key lands.
    let data = pattern(7, 3000);
    a.write(&src, 0, &data);
    a.hca
        .post_send(
            qa,
            &SendWr::write(2, va + 100, k1).sge(src.mr.sge(&src.buf, 0, 3000)),
        )
        .unwrap();
    expect(&one(&mut a), 2, WcStatus::Success, WcOpcode::RdmaWrite);
    assert_eq!(b.read(&win, WIN_OFF + 100, 3000), data);

    // MP-07, type 2B: the window's R_Key through a second pair's QP (same PD)
    // is a Remote Access Error (IBA 10.6.7.2.4); the first pair stays usable.
    let (qa2, _qb2) = connect_pair(&mut a, &mut b, QpType::Rc);
    a.hca
        .post_send(
            qa2,
            &SendWr::write(3, va, k1).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 3, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);

    // MP-07 LOCAL_INV: the window goes free, the WRITE now fails.
    b.hca.post_send(qb, &SendWr::local_inv(4, k1)).unwrap();
    expect(&one(&mut b), 4, WcStatus::Success, WcOpcode::LocalInv);

    // OP-03 on a fresh pair: rebind with a new key, SEND with Invalidate.
    let (qa3, qb3) = connect_pair(&mut a, &mut b, QpType::Rc);
    let k2 = next_key(k1, 1);
    b.hca
        .post_send(
            qb3,
            &SendWr::bind_mw(5, k1, k2, win.mr.lkey, va, WIN_LEN as u64, RW),
        )
        .unwrap();
    expect(&one(&mut b), 5, WcStatus::Success, WcOpcode::BindMw);
    a.hca
        .post_send(
            qa3,
            &SendWr::write(6, va, k2).sge(src.mr.sge(&src.buf, 0, 64)),
        )
        .unwrap();
    expect(&one(&mut a), 6, WcStatus::Success, WcOpcode::RdmaWrite);
    let rbuf = b.region(4096, Layout::Scattered, 0);
    b.hca
        .post_recv(qb3, &RecvWr::new(7, vec![rbuf.mr.sge(&rbuf.buf, 0, 4096)]))
        .unwrap();
    a.hca
        .post_send(
            qa3,
            &SendWr::send_inv(8, k2).sge(src.mr.sge(&src.buf, 0, 200)),
        )
        .unwrap();
    expect(&one(&mut a), 8, WcStatus::Success, WcOpcode::Send);
    let r = one(&mut b);
    expect(&r, 7, WcStatus::Success, WcOpcode::Recv);
    assert_ne!(r.wc_flags & wc_flags::WITH_INV, 0, "WITH_INV: {r:?}");
    assert_eq!(r.imm_or_inv, k2);
    assert_eq!(r.byte_len, 200);
    // The key is invalid now: the WRITE fails.
    a.hca
        .post_send(
            qa3,
            &SendWr::write(9, va, k2).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 9, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);

    // The free window lets its MR go once deallocated.
    b.hca.dealloc_mw(k2).expect("DEALLOC_MW");
    b.hca.dereg_mr(&win.mr).expect("DEREG_MR after DEALLOC_MW");
    let _ = qa;
}

#[test]
fn mp_06_type1_window_bind_rebind_and_busy_mr() {
    let (_v, mut a, mut b) = two_nodes();
    let src = a.region(4096, Layout::Scattered, 0);
    let win = bindable(&mut b, 4 * 4096);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let mw = b
        .hca
        .alloc_mw(b.pd, MwType::Type1)
        .expect("ALLOC_MW type 1");
    let va = win.buf.va(WIN_OFF);
    let k1 = next_key(mw, 1);
    b.hca
        .post_send(qb, &SendWr::bind_mw(1, mw, k1, win.mr.lkey, va, 4096, RW))
        .unwrap();
    expect(&one(&mut b), 1, WcStatus::Success, WcOpcode::BindMw);
    let data = pattern(3, 512);
    a.write(&src, 0, &data);
    a.hca
        .post_send(
            qa,
            &SendWr::write(2, va, k1).sge(src.mr.sge(&src.buf, 0, 512)),
        )
        .unwrap();
    expect(&one(&mut a), 2, WcStatus::Success, WcOpcode::RdmaWrite);
    assert_eq!(b.read(&win, WIN_OFF, 512), data);
    // MP-06: a type 1 window is rebound by a bind (a new R_Key); the READ
    // through the new key works.
    let k2 = next_key(k1, 1);
    b.hca
        .post_send(qb, &SendWr::bind_mw(3, k1, k2, win.mr.lkey, va, 4096, RW))
        .unwrap();
    expect(&one(&mut b), 3, WcStatus::Success, WcOpcode::BindMw);
    a.hca
        .post_send(
            qa,
            &SendWr::read(4, va, k2).sge(src.mr.sge(&src.buf, 1024, 512)),
        )
        .unwrap();
    expect(&one(&mut a), 4, WcStatus::Success, WcOpcode::RdmaRead);
    assert_eq!(a.read(&src, 1024, 512), data);
    assert_eq!(
        b.hca.dereg_mr(&win.mr).unwrap_err().status(),
        Some(Status::Busy)
    );
    // The old key is stale: Remote Access Error.
    a.hca
        .post_send(
            qa,
            &SendWr::write(5, va, k1).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 5, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);
    b.hca.dealloc_mw(k2).expect("DEALLOC_MW of a bound window");
    b.hca.dereg_mr(&win.mr).expect("DEREG_MR");
}

#[test]
fn mp_07_type2a_window_through_the_device_serves_its_qp_and_keeps_it_from_destroy() {
    let (_v, mut a, mut b) = two_nodes();
    let src = a.region(WIN_LEN, Layout::Scattered, 0);
    let win = bindable(&mut b, 4 * 4096);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let (qa2, qb2) = connect_pair(&mut a, &mut b, QpType::Rc);
    let mw = b.hca.alloc_mw(b.pd, MwType::Type2A).expect("ALLOC_MW 2A");
    let k = next_key(mw, 3);
    let va = win.buf.va(WIN_OFF);
    b.hca
        .post_send(
            qb,
            &SendWr::bind_mw(1, mw, k, win.mr.lkey, va, WIN_LEN as u64, RW),
        )
        .unwrap();
    expect(&one(&mut b), 1, WcStatus::Success, WcOpcode::BindMw);
    // Through its QP: the WRITE lands; through the other pair: refused.
    let data = pattern(9, 500);
    a.write(&src, 0, &data);
    a.hca
        .post_send(
            qa,
            &SendWr::write(2, va, k).sge(src.mr.sge(&src.buf, 0, 500)),
        )
        .unwrap();
    expect(&one(&mut a), 2, WcStatus::Success, WcOpcode::RdmaWrite);
    assert_eq!(b.read(&win, WIN_OFF, 500), data);
    a.hca
        .post_send(
            qa2,
            &SendWr::write(3, va, k).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 3, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);
    // Type 2A: DESTROY_QP of its QP is BUSY while bound (seed 003); the
    // other pair's QP goes.
    assert_eq!(
        b.hca.destroy_qp(qb).unwrap_err().status(),
        Some(Status::Busy)
    );
    b.hca.destroy_qp(qb2).expect("DESTROY_QP without windows");
    // LOCAL_INV through its QP frees it; then the QP can go.
    b.hca.post_send(qb, &SendWr::local_inv(4, k)).unwrap();
    expect(&one(&mut b), 4, WcStatus::Success, WcOpcode::LocalInv);
    b.hca.destroy_qp(qb).expect("DESTROY_QP after LOCAL_INV");
    b.hca.dealloc_mw(k).expect("DEALLOC_MW");
    b.hca.dereg_mr(&win.mr).expect("DEREG_MR");
}
