//! Two engines over the simulated fabric: the IBA 1.5 Memory Placement
//! Extensions, RDMA FLUSH and RDMA ATOMIC WRITE on RC.

mod common;

use common::*;
use transport::verbs::{Access, FlushSpec, WcOpcode, WcStatus, WrOpcode};

fn atomic_write(id: u64, rkey: u32, va: u64, bytes: [u8; 8]) -> transport::verbs::SendWr {
    let mut w = send_wr(id, WrOpcode::AtomicWrite, vec![]);
    w.rkey = rkey;
    w.remote_addr = va;
    w.swap_add = u64::from_le_bytes(bytes);
    w
}

fn flush(id: u64, rkey: u32, va: u64, len: u64, ptype: u8, level: u8) -> transport::verbs::SendWr {
    let mut w = send_wr(id, WrOpcode::Flush, vec![]);
    w.rkey = rkey;
    w.remote_addr = va;
    w.compare = len;
    w.imm_or_inv = FlushSpec {
        placement_type: ptype,
        selectivity: level,
    }
    .bits();
    w
}

/// A node pair whose responder (node 1) has every right plus FLUSH_GLOBAL.
fn setup(b_access: Access, seed: u64) -> (Net, Pair, u32) {
    let mut net = Net::new(2, 1 << 16, seed);
    net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, b_access);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    (net, p, kb)
}

#[test]
fn atomic_write_stores_the_eight_bytes_as_given() {
    let (mut net, p, kb) = setup(ALL_ACCESS, 11);
    let target = MEM_BASE + 0x1008;
    let word = *b"cccccccc";
    let w = atomic_write(1, kb, target, word);
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.status, c.opcode, c.byte_len),
        (WcStatus::Success, WcOpcode::AtomicWrite, 8)
    );
    assert_eq!(bytes(&net, 1, target, 8), word);
    // Neighbours untouched.
    assert_eq!(bytes(&net, 1, target - 8, 8), [0; 8]);
    assert_eq!(bytes(&net, 1, target + 8, 8), [0; 8]);
}

#[test]
fn atomic_write_misaligned_is_invalid_request() {
    let (mut net, p, kb) = setup(ALL_ACCESS, 12);
    let w = atomic_write(1, kb, MEM_BASE + 0x1004, [1; 8]);
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(c.status, WcStatus::RemInvReqErr);
    assert_eq!(bytes(&net, 1, MEM_BASE + 0x1000, 16), [0; 16]);
}

#[test]
fn atomic_write_needs_remote_write() {
    let (mut net, p, kb) = setup(Access(1 | 4 | 8), 13);
    let w = atomic_write(1, kb, MEM_BASE + 0x1000, [1; 8]);
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert_eq!(bytes(&net, 1, MEM_BASE + 0x1000, 8), [0; 8]);
}

#[test]
fn atomic_write_bad_rkey_is_remote_access_error() {
    let (mut net, p, kb) = setup(ALL_ACCESS, 14);
    let w = atomic_write(1, kb ^ 0x55, MEM_BASE + 0x1000, [1; 8]);
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::RemAccessErr);
}

#[test]
fn flush_global_range_and_whole_region() {
    let (mut net, p, kb) = setup(ALL_ACCESS | Access::FLUSH_GLOBAL, 15);
    let f = flush(
        1,
        kb,
        MEM_BASE + 0x100,
        0x200,
        FlushSpec::TYPE_GLOBAL,
        FlushSpec::LEVEL_RANGE,
    );
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Flush));
    // The whole region: the request's VA and length do not matter.
    let f = flush(
        2,
        kb,
        0,
        12_345_678,
        FlushSpec::TYPE_GLOBAL,
        FlushSpec::LEVEL_MR,
    );
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Flush));
}

#[test]
fn flush_range_out_of_bounds_is_remote_access_error() {
    let (mut net, p, kb) = setup(ALL_ACCESS | Access::FLUSH_GLOBAL, 16);
    let f = flush(
        1,
        kb,
        MEM_BASE + 0xff00,
        0x200,
        FlushSpec::TYPE_GLOBAL,
        FlushSpec::LEVEL_RANGE,
    );
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::RemAccessErr);
}

#[test]
fn flush_type_the_region_does_not_allow_is_remote_access_error() {
    // pyverbs test_qp_ex_rc_flush_type_violate: GLOBAL region, PERSISTENT flush.
    let (mut net, p, kb) = setup(ALL_ACCESS | Access::FLUSH_GLOBAL, 17);
    let f = flush(
        1,
        kb,
        MEM_BASE,
        64,
        FlushSpec::TYPE_PERSISTENT,
        FlushSpec::LEVEL_RANGE,
    );
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::RemAccessErr);
    // And a region without any flush right refuses a global flush.
    let (mut net, p, kb) = setup(ALL_ACCESS, 18);
    let f = flush(
        1,
        kb,
        MEM_BASE,
        64,
        FlushSpec::TYPE_GLOBAL,
        FlushSpec::LEVEL_MR,
    );
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::RemAccessErr);
}

#[test]
fn flush_with_unknown_type_or_level_is_invalid_request() {
    for (ptype, level) in [(0, 0), (4, 0), (1, 2)] {
        let (mut net, p, kb) = setup(ALL_ACCESS | Access::FLUSH_GLOBAL, 19);
        let f = flush(1, kb, MEM_BASE, 64, ptype, level);
        net.nodes[0].engine.post_send(p.qa, f).unwrap();
        assert_eq!(
            wait_cqe(&mut net, 0, p.cq_a).status,
            WcStatus::RemInvReqErr,
            "type {ptype} level {level}"
        );
    }
}

#[test]
fn mpe_on_uc_is_refused_at_post() {
    let mut net = Net::new(2, 1 << 16, 20);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts {
        qp_type: transport::verbs::QpType::Uc,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let e = &mut net.nodes[0].engine;
    assert!(e
        .post_send(p.qa, atomic_write(1, kb, MEM_BASE, [0; 8]))
        .is_err());
    assert!(e.post_send(p.qa, flush(2, kb, MEM_BASE, 8, 1, 0)).is_err());
}

/// WRITE, ATOMIC WRITE and FLUSH interleaved over a lossy, duplicating,
/// reordering fabric: every WQE succeeds in order, each ATOMIC WRITE executes
/// once (a replayed duplicate never stores an older word over a newer one),
/// and the final word is the last one written.
#[test]
fn mpe_survive_loss_and_duplicates() {
    for seed in 0..20u64 {
        let (mut net, p, kb) = setup(ALL_ACCESS | Access::FLUSH_GLOBAL, 100 + seed);
        net.faults.drop = 0.1;
        net.faults.duplicate = 0.1;
        net.faults.reorder = 0.1;
        let target = MEM_BASE + 0x2000;
        let n = 30u64;
        for i in 0..n {
            let w = if i % 3 == 2 {
                flush(
                    i,
                    kb,
                    target,
                    8,
                    FlushSpec::TYPE_GLOBAL,
                    FlushSpec::LEVEL_RANGE,
                )
            } else {
                atomic_write(i, kb, target, (i + 1).to_le_bytes())
            };
            net.nodes[0].engine.post_send(p.qa, w).unwrap();
        }
        for i in 0..n {
            let c = wait_cqe(&mut net, 0, p.cq_a);
            assert_eq!((c.wr_id, c.status), (i, WcStatus::Success), "seed {seed}");
        }
        let last = (0..n).filter(|i| i % 3 != 2).max().unwrap() + 1;
        assert_eq!(bytes(&net, 1, target, 8), last.to_le_bytes(), "seed {seed}");
    }
}

#[test]
fn flush_needs_the_qp_to_enable_the_placement_type() {
    use transport::verbs::{AttrMask, QpAttr};
    let (mut net, p, kb) = setup(ALL_ACCESS | Access::FLUSH_GLOBAL, 21);
    // The responder's QP enables remote read/write/atomic only (as Linux rxe,
    // the QP's access flags gate FLUSH as the MR's do).
    let now = net.now;
    let a = QpAttr {
        access: ALL_ACCESS,
        ..QpAttr::default()
    };
    net.nodes[1]
        .engine
        .modify_qp(p.qb, &a, AttrMask::ACCESS_FLAGS, now)
        .expect("RTS->RTS access");
    let f = flush(
        1,
        kb,
        MEM_BASE,
        64,
        FlushSpec::TYPE_GLOBAL,
        FlushSpec::LEVEL_RANGE,
    );
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::RemInvReqErr);
}
