//! Fast-registration MRs between two `vhca` processes on UDP loopback (MP-08;
//! o9-5.2.2): REG_MR with VHCA_REG_MR_F_FAST allocates a free MR, a REG_MR WQE
//! registers it from a page list in guest memory under a new key byte, an
//! RDMA WRITE lands through it, LOCAL_INV and SEND with Invalidate revoke the
//! key, a re-registration under another key byte works while the old key is
//! refused; bad REG_MR WQEs complete in error, never crash the device.

use std::time::Duration;

use vhca_tests::abi::bar0::{dev_cap, CtxTable};
use vhca_tests::abi::cmd::Status;
use vhca_tests::abi::context::{ctx_flags, MrContext};
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::cqe::Cqe;
use vhca_tests::abi::layout::Field;
use vhca_tests::abi::verbs::{access, wc_flags, QpType, WcOpcode, WcStatus};
use vhca_tests::abi::wqe::RegMrSeg;
use vhca_tests::fixture::{connect_pair, wait_n, Node};
use vhca_tests::guest::Buf;
use vhca_tests::util::pattern;
use vhca_tests::{Layout, Options, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);
const RW: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
/// The buffer behind the MR: 3 scattered pages, starting 0x200 into the first.
const LEN: usize = 3 * 4096 - 0x200;

/// The MR context of `key`'s index through the BAR0 window.
fn mpt(n: &mut Node, key: u32) -> MrContext {
    let (_, w) = n.hca.read_context(CtxTable::Mpt, key >> 8).unwrap();
    MrContext::get(&w)
}

fn two_nodes() -> (Vhca, Node, Node) {
    let v = Vhca::spawn(Options::nodes(2));
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
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

fn with_byte(k: u32, b: u8) -> u32 {
    (k & !0xff) | u32::from(b)
}

/// A buffer of node `n` (scattered pages) and a page holding its page list;
/// the REG_MR segment that maps it at the buffer's VA.
fn fast_target(n: &mut Node) -> (Buf, RegMrSeg) {
    let g = n.hca.guest_mut();
    let buf = g.alloc_buf(LEN, Layout::Scattered, 0x200);
    let list = g.alloc_pages(1, 1);
    let bytes: Vec<u8> = buf.pages.iter().flat_map(|p| p.to_le_bytes()).collect();
    g.write(list, &bytes);
    let seg = RegMrSeg {
        iova: buf.va,
        length: LEN as u64,
        page_list: list,
        npages: buf.pages.len() as u32,
        access: RW,
        page_shift: 12,
        rsvd: 0,
    };
    (buf, seg)
}

#[test]
fn mp_08_fast_reg_write_lands_then_local_inv_send_with_inv_and_reregistration() {
    let (_v, mut a, mut b) = two_nodes();
    let dev = b.hca.query_device().expect("QUERY_DEVICE");
    assert_ne!(dev.cap_flags & dev_cap::FAST_REG_MR, 0);
    assert!(dev.max_fast_reg_pages >= 256, "{}", dev.max_fast_reg_pages);
    let src = a.region(8192, Layout::Scattered, 0);
    let (buf, seg) = fast_target(&mut b);
    let fk = b.hca.alloc_fast_mr(b.pd, 8).expect("ALLOC_MR");
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);

    // Free until registered: the context window says so.
    let c = mpt(&mut b, fk);
    assert_eq!((c.key, c.flags), (fk, ctx_flags::FAST | ctx_flags::FREE));
    // MP-08: a REG_MR WQE with a new key byte; no packet, a REG_MR completion.
    let k1 = with_byte(fk, 0x31);
    b.hca.post_send(qb, &SendWr::reg_mr(1, k1, seg)).unwrap();
    expect(&one(&mut b), 1, WcStatus::Success, WcOpcode::RegMr);
    let c = mpt(&mut b, fk);
    assert_eq!(
        (c.key, c.flags, c.npages, c.iova, c.length, c.first_page),
        (k1, ctx_flags::FAST, 3, buf.va, LEN as u64, buf.pages[0])
    );
    // A WRITE across both page boundaries lands through the translation.
    let data = pattern(5, 6000);
    a.write(&src, 0, &data);
    a.hca
        .post_send(
            qa,
            &SendWr::write(2, buf.va + 100, k1).sge(src.mr.sge(&src.buf, 0, 6000)),
        )
        .unwrap();
    expect(&one(&mut a), 2, WcStatus::Success, WcOpcode::RdmaWrite);
    assert_eq!(b.hca.guest().buf_read(&buf, 100, 6000), data);

    // LOCAL_INV: the same R_Key is refused with Remote Access Error.
    b.hca.post_send(qb, &SendWr::local_inv(3, k1)).unwrap();
    expect(&one(&mut b), 3, WcStatus::Success, WcOpcode::LocalInv);
    assert_eq!(mpt(&mut b, fk).flags, ctx_flags::FAST | ctx_flags::FREE);
    a.hca
        .post_send(
            qa,
            &SendWr::write(4, buf.va, k1).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 4, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);

    // Registered again with another key byte on a fresh pair; then SEND with
    // Invalidate from A revokes it (the receive says WITH_INV).
    let (qa2, qb2) = connect_pair(&mut a, &mut b, QpType::Rc);
    let k2 = with_byte(fk, 0x32);
    b.hca.post_send(qb2, &SendWr::reg_mr(5, k2, seg)).unwrap();
    expect(&one(&mut b), 5, WcStatus::Success, WcOpcode::RegMr);
    a.hca
        .post_send(
            qa2,
            &SendWr::write(6, buf.va, k2).sge(src.mr.sge(&src.buf, 0, 64)),
        )
        .unwrap();
    expect(&one(&mut a), 6, WcStatus::Success, WcOpcode::RdmaWrite);
    let rbuf = b.region(4096, Layout::Scattered, 0);
    b.hca
        .post_recv(qb2, &RecvWr::new(7, vec![rbuf.mr.sge(&rbuf.buf, 0, 4096)]))
        .unwrap();
    a.hca
        .post_send(
            qa2,
            &SendWr::send_inv(8, k2).sge(src.mr.sge(&src.buf, 0, 100)),
        )
        .unwrap();
    expect(&one(&mut a), 8, WcStatus::Success, WcOpcode::Send);
    let r = one(&mut b);
    expect(&r, 7, WcStatus::Success, WcOpcode::Recv);
    assert_ne!(r.wc_flags & wc_flags::WITH_INV, 0, "WITH_INV: {r:?}");
    assert_eq!(r.imm_or_inv, k2);
    a.hca
        .post_send(
            qa2,
            &SendWr::write(9, buf.va, k2).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 9, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);

    // A third registration: the old key byte k1 is refused, k3 works.
    let (qa3, qb3) = connect_pair(&mut a, &mut b, QpType::Rc);
    let k3 = with_byte(fk, 0x33);
    b.hca.post_send(qb3, &SendWr::reg_mr(10, k3, seg)).unwrap();
    expect(&one(&mut b), 10, WcStatus::Success, WcOpcode::RegMr);
    a.hca
        .post_send(
            qa3,
            &SendWr::write(11, buf.va, k3).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(&one(&mut a), 11, WcStatus::Success, WcOpcode::RdmaWrite);
    a.hca
        .post_send(
            qa3,
            &SendWr::write(12, buf.va, k1).sge(src.mr.sge(&src.buf, 0, 8)),
        )
        .unwrap();
    expect(
        &one(&mut a),
        12,
        WcStatus::RemAccessErr,
        WcOpcode::RdmaWrite,
    );
    // DEREG_MR by the key ALLOC_MR gave (another key byte): the MR goes.
    b.hca.dereg_key(fk).expect("DEREG_MR of a fast MR");
    assert_eq!(
        b.hca.dereg_key(k3).unwrap_err().status(),
        Some(Status::NotFound)
    );
}

#[test]
fn mp_08_bad_alloc_and_bad_reg_mr_wqes_fail_cleanly() {
    let (_v, mut a, mut b) = two_nodes();
    let max = b.hca.query_device().unwrap().max_fast_reg_pages;
    // ALLOC_MR: no pages, or more than the device allows.
    for n in [0, max + 1] {
        assert_eq!(
            b.hca.alloc_fast_mr(b.pd, n).unwrap_err().status(),
            Some(Status::BadParam),
            "{n} pages"
        );
    }
    let (_buf, seg) = fast_target(&mut b);
    let fk = b.hca.alloc_fast_mr(b.pd, 2).expect("ALLOC_MR");
    let k = with_byte(fk, 0x40);
    // Each bad REG_MR completes in error (the QP fails), on its own pair; the
    // last bool: refused by the device's decode (a bad WQE, counted) rather
    // than by the engine.
    let two = RegMrSeg {
        npages: 2,
        length: 2 * 4096 - 0x200,
        ..seg
    };
    let bads: [(RegMrSeg, WcStatus, bool); 8] = [
        // 3 pages into an MR of 2.
        (seg, WcStatus::LocQpOpErr, false),
        // Reserved field, page shift, page-list alignment, no pages.
        (RegMrSeg { rsvd: 1, ..two }, WcStatus::LocQpOpErr, true),
        (
            RegMrSeg {
                page_shift: 40,
                ..two
            },
            WcStatus::LocQpOpErr,
            true,
        ),
        (
            RegMrSeg {
                page_list: two.page_list + 4,
                ..two
            },
            WcStatus::LocQpOpErr,
            true,
        ),
        (RegMrSeg { npages: 0, ..two }, WcStatus::LocQpOpErr, true),
        // A page list outside guest memory: read when the WQE runs, refused.
        (
            RegMrSeg {
                page_list: 1 << 40,
                ..two
            },
            WcStatus::LocQpOpErr,
            false,
        ),
        // Pages that do not cover [iova, iova + length) (MP-03).
        (
            RegMrSeg {
                length: 3 * 4096,
                ..two
            },
            WcStatus::LocQpOpErr,
            false,
        ),
        // Remote write without local write (MP-04).
        (
            RegMrSeg {
                access: access::REMOTE_WRITE,
                ..two
            },
            WcStatus::LocProtErr,
            false,
        ),
    ];
    let bad_wqes = |n: &mut Node| {
        n.hca
            .counter(CounterSet::Device, "bad_wqes")
            .unwrap()
            .unwrap()
    };
    for (i, (s, st, decode)) in bads.into_iter().enumerate() {
        let (_qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
        let id = 100 + i as u64;
        let before = bad_wqes(&mut b);
        b.hca.post_send(qb, &SendWr::reg_mr(id, k, s)).unwrap();
        let c = one(&mut b);
        assert_eq!((c.wr_id, c.status), (id, st.raw()), "case {i}: {c:?}");
        assert_eq!(bad_wqes(&mut b) - before, u64::from(decode), "case {i}");
    }
    // The same MR registers with the good segment: the failures changed nothing.
    let (_qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    b.hca.post_send(qb, &SendWr::reg_mr(200, k, two)).unwrap();
    expect(&one(&mut b), 200, WcStatus::Success, WcOpcode::RegMr);
    // The device is alive and the MR still free: a good registration works.
    let (_buf2, good) = fast_target(&mut b);
    let fk2 = b.hca.alloc_fast_mr(b.pd, 4).expect("ALLOC_MR");
    let (_qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let k2 = with_byte(fk2, 7);
    b.hca.post_send(qb, &SendWr::reg_mr(1, k2, good)).unwrap();
    expect(&one(&mut b), 1, WcStatus::Success, WcOpcode::RegMr);
    // A second REG_MR while it is valid: refused (free-state rule).
    b.hca
        .post_send(qb, &SendWr::reg_mr(2, with_byte(fk2, 8), good))
        .unwrap();
    expect(&one(&mut b), 2, WcStatus::LocProtErr, WcOpcode::RegMr);
}
