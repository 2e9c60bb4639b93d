//! IBA 1.5 Memory Placement Extensions through the device: RDMA FLUSH and
//! RDMA ATOMIC WRITE WQEs on RC between two real `vhca` processes.

use std::time::Duration;

use vhca_tests::abi::bar0::dev_cap;
use vhca_tests::abi::cmd::Status;
use vhca_tests::abi::verbs::{access, flush, QpType, WcOpcode, WcStatus};
use vhca_tests::fixture::{connect_pair, wait_n, Node, Region, ALL_ACCESS};
use vhca_tests::hca::PblKind;
use vhca_tests::{Layout, Options, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);

fn two_nodes() -> (Vhca, Node, Node) {
    let v = Vhca::spawn(Options::nodes(2));
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

/// A region whose MR also has `extra` rights.
fn region_with(n: &mut Node, len: usize, extra: u32) -> Region {
    let buf = n.hca.guest_mut().alloc_buf(len, Layout::Scattered, 0);
    let mr = n
        .hca
        .reg_mr(n.pd, &buf, ALL_ACCESS | extra, PblKind::OneLevel)
        .expect("REG_MR");
    Region { buf, mr }
}

fn one(n: &mut Node) -> (u64, u8, u8, u32) {
    let c = wait_n(&mut n.hca, n.cq, 1, T);
    (c[0].wr_id, c[0].status, c[0].opcode, c[0].byte_len)
}

#[test]
fn caps_and_registration_rights() {
    let (_v, mut a, _b) = two_nodes();
    let caps = a.hca.caps();
    assert_ne!(caps.flags & dev_cap::FLUSH_GLOBAL, 0);
    assert_ne!(caps.flags & dev_cap::ATOMIC_WRITE, 0);
    // Global visibility may be granted; persistence never (guest RAM is not
    // non-volatile memory).
    region_with(&mut a, 4096, access::FLUSH_GLOBAL);
    let buf = a.hca.guest_mut().alloc_buf(4096, Layout::Scattered, 0);
    let e = a
        .hca
        .reg_mr(
            a.pd,
            &buf,
            ALL_ACCESS | access::FLUSH_PERSISTENT,
            PblKind::OneLevel,
        )
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::BadParam));
}

#[test]
fn rc_atomic_write_then_flush_then_type_violation() {
    let (_v, mut a, mut b) = two_nodes();
    let (qa, _qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let target = region_with(&mut b, 3 * 4096, access::FLUSH_GLOBAL);
    let rkey = target.mr.rkey;

    // ATOMIC WRITE: the 8 bytes as given, nothing around them.
    let word = *b"cccccccc";
    let va = target.buf.va(4096 + 8);
    a.hca
        .post_send(qa, &SendWr::atomic_write(1, va, rkey, word))
        .unwrap();
    assert_eq!(
        one(&mut a),
        (1, WcStatus::Success.raw(), WcOpcode::AtomicWrite.raw(), 8)
    );
    assert_eq!(b.read(&target, 4096 + 8, 8), word);
    assert_eq!(b.read(&target, 4096, 8), [0; 8]);
    assert_eq!(b.read(&target, 4096 + 16, 8), [0; 8]);

    // Many in flight: in order, each once; the last one stays.
    for i in 0..64u64 {
        let w = SendWr::atomic_write(10 + i, va, rkey, (i + 1).to_le_bytes());
        a.hca.post_send(qa, &w).unwrap();
    }
    let c = wait_n(&mut a.hca, a.cq, 64, T);
    assert!(c.iter().all(|c| c.status == WcStatus::Success.raw()));
    assert_eq!(b.read(&target, 4096 + 8, 8), 64u64.to_le_bytes());

    // FLUSH to global visibility, a range and the whole region (the length
    // of a region flush does not matter).
    let w = SendWr::flush(
        100,
        target.buf.va(0),
        rkey,
        3 * 4096,
        flush::GLOBAL,
        flush::LEVEL_RANGE,
    );
    a.hca.post_send(qa, &w).unwrap();
    assert_eq!(
        one(&mut a),
        (100, WcStatus::Success.raw(), WcOpcode::Flush.raw(), 0)
    );
    let w = SendWr::flush(101, 0, rkey, 12_345_678, flush::GLOBAL, flush::LEVEL_MR);
    a.hca.post_send(qa, &w).unwrap();
    assert_eq!(
        one(&mut a),
        (101, WcStatus::Success.raw(), WcOpcode::Flush.raw(), 0)
    );

    // Persistence was not granted: Remote Access Error (the QP then fails).
    let w = SendWr::flush(
        102,
        target.buf.va(0),
        rkey,
        64,
        flush::PERSISTENT,
        flush::LEVEL_RANGE,
    );
    a.hca.post_send(qa, &w).unwrap();
    let (id, st, _, _) = one(&mut a);
    assert_eq!((id, st), (102, WcStatus::RemAccessErr.raw()));
}
