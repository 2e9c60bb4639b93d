//! Memory windows over the simulated fabric (MP-06 type 1, MP-07 type 2B,
//! OP-03 SEND with Invalidate): binds by work request, remote access through
//! the window's R_Key, local and remote invalidation (IBA 10.6.7, 9.4.1.1.3,
//! o9-5.2.2; seed 003 "Memory Window").

mod common;

use common::*;
use transport::verbs::{
    Access, MwType, QpState, SendData, VerbError, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

const RW: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
/// The window's range on node 1.
const WIN: u64 = MEM_BASE + 0x4000;
const WIN_LEN: u64 = 0x1000;

/// Two nodes, one RC pair, MRs over all memory with MW_BIND.
fn setup(seed: u64) -> (Net, Pair, u32, u32) {
    let all = Access(ALL_ACCESS.0 | Access::MW_BIND.0);
    pair_setup(seed, 1 << 20, all, &ConnOpts::default())
}

/// Node 1 allocates a window of `ty` and binds it through QP `qpn` over
/// [WIN, WIN + WIN_LEN) of `kb`; returns the new R_Key.
fn bind_on_b(net: &mut Net, p: &Pair, qpn: u32, ty: MwType, kb: u32) -> u32 {
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, ty).unwrap();
    let new = (mw & !0xff) | ((mw + 0x11) & 0xff);
    net.nodes[1]
        .engine
        .post_send(qpn, bind_wr(50, mw, new, kb, WIN, WIN_LEN, RW))
        .unwrap();
    let c = wait(net, 1, p.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    new
}

#[test]
fn mp_07_type2_window_write_then_local_inv_refuses_the_key() {
    let (mut net, p, ka, kb) = setup(1);
    let rkey = bind_on_b(&mut net, &p, p.qb, MwType::Type2, kb);
    fill(&mut net, 0, MEM_BASE, 256, 7);
    net.nodes[0]
        .engine
        .post_send(p.qa, write_wr(1, ka, 256, rkey, WIN + 0x100))
        .unwrap();
    let c = wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(
        bytes(&net, 1, WIN + 0x100, 256),
        bytes(&net, 0, MEM_BASE, 256)
    );
    // Outside the window (but inside the MR): Remote Access Error.
    let mut w = write_wr(2, ka, 16, rkey, WIN + WIN_LEN - 8);
    w.flags = transport::verbs::SendFlags::SIGNALED;
    let (mut net2, p2, ka2, kb2) = setup(2);
    let rkey2 = bind_on_b(&mut net2, &p2, p2.qb, MwType::Type2, kb2);
    w.rkey = rkey2;
    w.data = SendData::Sges(sge(MEM_BASE, 16, ka2));
    net2.nodes[0].engine.post_send(p2.qa, w).unwrap();
    assert_eq!(
        wait(&mut net2, 0, p2.cq_a, 1)[0].status,
        WcStatus::RemAccessErr
    );
    // MP-07 local invalidate: the window goes free, the key stops working.
    let mut inv = send_wr(3, WrOpcode::LocalInv, Vec::new());
    inv.imm_or_inv = rkey;
    net.nodes[1].engine.post_send(p.qb, inv).unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    assert!(net.nodes[1]
        .engine
        .mr_table()
        .mw(rkey)
        .unwrap()
        .binding()
        .is_none());
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write_wr(4, ka, 8, rkey, WIN)).status,
        WcStatus::RemAccessErr
    );
    assert_eq!(
        net.nodes[1]
            .engine
            .counters()
            .naked(transport::engine::NakReason::WindowNotBound),
        1
    );
}

#[test]
fn mp_07_type2_window_refuses_another_qp_of_the_same_pd() {
    let (mut net, p, ka, kb) = setup(3);
    let p2 = connect(&mut net, 0, 1, &ConnOpts::default());
    let rkey = bind_on_b(&mut net, &p, p.qb, MwType::Type2, kb);
    // Through the second pair: the window is bound to p.qb, not p2.qb.
    assert_eq!(
        post_wait(&mut net, 0, p2.qa, p2.cq_a, write_wr(1, ka, 8, rkey, WIN)).status,
        WcStatus::RemAccessErr
    );
    assert_eq!(
        net.nodes[1]
            .engine
            .counters()
            .naked(transport::engine::NakReason::WindowWrongQp),
        1
    );
    // The bound QP still works; a READ through the window too.
    let mut r = send_wr(2, WrOpcode::RdmaRead, sge(MEM_BASE + 0x8000, 64, ka));
    r.rkey = rkey;
    r.remote_addr = WIN;
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, r).status,
        WcStatus::Success
    );
}

#[test]
fn mp_06_type1_window_rebind_and_zero_length_unbind() {
    let (mut net, p, ka, kb) = setup(4);
    let k1 = bind_on_b(&mut net, &p, p.qb, MwType::Type1, kb);
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write_wr(1, ka, 8, k1, WIN)).status,
        WcStatus::Success
    );
    // Type 1 cannot be invalidated (seed 003): LOCAL_INV fails.
    // Rebind with a new key: the old key fails, the new one works.
    let k2 = (k1 & !0xff) | ((k1 + 1) & 0xff);
    assert_eq!(
        post_wait(
            &mut net,
            1,
            p.qb,
            p.cq_b,
            bind_wr(2, k1, k2, kb, WIN, 64, RW)
        )
        .status,
        WcStatus::Success
    );
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write_wr(3, ka, 8, k2, WIN + 8)).status,
        WcStatus::Success
    );
    // Zero-length bind: unbound, still allocated.
    let k3 = (k2 & !0xff) | ((k2 + 1) & 0xff);
    assert_eq!(
        post_wait(
            &mut net,
            1,
            p.qb,
            p.cq_b,
            bind_wr(4, k2, k3, 0, 0, 0, Access(0))
        )
        .status,
        WcStatus::Success
    );
    assert_unbound(&mut net, &p, (ka, kb), k3, k1);
}

/// Window `mw` on node 1 is bound to nothing, MR `kb` has no window, and a
/// WRITE from node 0 through `old` (a key the window had) is refused.
fn assert_unbound(net: &mut Net, p: &Pair, (ka, kb): (u32, u32), mw: u32, old: u32) {
    let t = net.nodes[1].engine.mr_table();
    assert!(t.mw(mw).unwrap().binding().is_none());
    assert_eq!(t.mr(kb).unwrap().windows(), 0);
    assert_eq!(
        post_wait(net, 0, p.qa, p.cq_a, write_wr(5, ka, 8, old, WIN)).status,
        WcStatus::RemAccessErr
    );
}

#[test]
fn mp_06_local_inv_of_a_type1_window_is_a_protection_error() {
    let (mut net, p, _ka, kb) = setup(5);
    let k1 = bind_on_b(&mut net, &p, p.qb, MwType::Type1, kb);
    let mut inv = send_wr(1, WrOpcode::LocalInv, Vec::new());
    inv.imm_or_inv = k1;
    net.nodes[1].engine.post_send(p.qb, inv).unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::LocProtErr, WcOpcode::LocalInv)
    );
    assert_eq!(
        net.nodes[1].engine.query_qp(p.qb).unwrap().0,
        QpState::Error
    );
    // Still bound: a failed invalidate changes nothing.
    assert!(net.nodes[1]
        .engine
        .mr_table()
        .mw(k1)
        .unwrap()
        .binding()
        .is_some());
}

#[test]
fn mp_06_bind_errors_complete_with_mw_bind_err_and_fail_the_qp() {
    let mut net = Net::new(2, 1 << 20, 6);
    let kb = net.reg_all(1, ALL_ACCESS); // no MW_BIND
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type2).unwrap();
    net.nodes[1]
        .engine
        .post_send(p.qb, bind_wr(1, mw, mw + 1, kb, WIN, 64, RW))
        .unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::MwBindErr, WcOpcode::BindMw)
    );
    assert_eq!(
        net.nodes[1].engine.query_qp(p.qb).unwrap().0,
        QpState::Error
    );
    // UD cannot bind: refused at post.
    let o = ConnOpts {
        qp_type: transport::verbs::QpType::Ud,
        ..ConnOpts::default()
    };
    let u = connect(&mut net, 0, 1, &o);
    let mut w = bind_wr(2, mw, mw + 1, kb, WIN, 64, RW);
    w.ud = Some(transport::verbs::UdDest {
        av: Default::default(),
        remote_qpn: u.qa,
        remote_qkey: 0,
        pkey_index: None,
    });
    assert_eq!(
        net.nodes[1].engine.post_send(u.qb, w),
        Err(VerbError::InvalidWr)
    );
}

#[test]
fn mp_07_bind_waits_for_earlier_wqes_and_later_ones_see_it() {
    let (mut net, p, ka, kb) = setup(7);
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, MwType::Type2).unwrap();
    let new = (mw & !0xff) | ((mw + 3) & 0xff);
    // B: a WRITE to A, then the bind, then a SEND: completions in order.
    let e = &mut net.nodes[1].engine;
    e.post_send(p.qb, write_wr(1, kb, 4000, ka, MEM_BASE + 0x2000))
        .unwrap();
    e.post_send(p.qb, bind_wr(2, mw, new, kb, WIN, WIN_LEN, RW))
        .unwrap();
    recv(&mut net, 0, p.qa, 9, MEM_BASE + 0x9000, 64, ka);
    net.nodes[1]
        .engine
        .post_send(p.qb, send_wr(3, WrOpcode::Send, sge(MEM_BASE, 8, kb)))
        .unwrap();
    let c = wait(&mut net, 1, p.cq_b, 3);
    let ids: Vec<_> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(c[1].opcode, WcOpcode::BindMw);
    net.nodes[0]
        .engine
        .post_send(p.qa, write_wr(4, ka, 8, new, WIN))
        .unwrap();
    assert_eq!(wait(&mut net, 0, p.cq_a, 2)[1].status, WcStatus::Success);
}

#[test]
fn op_03_send_with_invalidate_frees_the_window_and_flags_the_receive() {
    let (mut net, p, ka, kb) = setup(8);
    let rkey = bind_on_b(&mut net, &p, p.qb, MwType::Type2, kb);
    recv(&mut net, 1, p.qb, 7, MEM_BASE + 0x9000, 4096, kb);
    // Multi-packet: SEND First, SEND Last with Invalidate (IETH on the last).
    let mut s = send_wr(1, WrOpcode::SendWithInv, sge(MEM_BASE, 1500, ka));
    s.imm_or_inv = rkey;
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, s).status,
        WcStatus::Success
    );
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(c[0].opcode, WcOpcode::Recv);
    assert_eq!(c[0].byte_len, 1500);
    assert!(c[0].flags.contains(WcFlags::WITH_INV));
    assert_eq!(c[0].imm_data, rkey);
    assert_unbound(&mut net, &p, (ka, kb), rkey, rkey);
}

#[test]
fn op_03_send_with_invalidate_of_an_mr_key_is_a_remote_invalid_request() {
    let (mut net, p, ka, kb) = setup(9);
    recv(&mut net, 1, p.qb, 7, MEM_BASE + 0x9000, 64, kb);
    // o9-5.2.2 3): an MR's R_Key cannot be invalidated remotely.
    let mut s = send_wr(1, WrOpcode::SendWithInv, sge(MEM_BASE, 8, ka));
    s.imm_or_inv = kb;
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, s).status,
        WcStatus::RemInvReqErr
    );
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(c[0].status, WcStatus::RemInvReqErr);
    assert!(net.nodes[1].engine.mr_table().mr(kb).is_some());
    assert_eq!(
        net.nodes[1]
            .engine
            .counters()
            .naked(transport::engine::NakReason::InvalidInvalidate),
        1
    );
}

#[test]
fn op_03_send_with_invalidate_is_rc_only() {
    let mut net = Net::new(2, 1 << 20, 10);
    let ka = net.reg_all(0, ALL_ACCESS);
    let o = ConnOpts {
        qp_type: transport::verbs::QpType::Uc,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let s = send_wr(1, WrOpcode::SendWithInv, sge(MEM_BASE, 8, ka));
    assert_eq!(
        net.nodes[0].engine.post_send(p.qa, s),
        Err(VerbError::InvalidWr)
    );
}

#[test]
fn mp_07_destroying_the_qp_frees_its_type2_windows() {
    let (mut net, p, _ka, kb) = setup(11);
    let rkey = bind_on_b(&mut net, &p, p.qb, MwType::Type2, kb);
    assert_eq!(net.nodes[1].engine.mrs().dereg_mr(kb), Err(VerbError::Busy));
    net.nodes[1].engine.destroy_qp(p.qb).unwrap();
    assert!(net.nodes[1]
        .engine
        .mr_table()
        .mw(rkey)
        .unwrap()
        .binding()
        .is_none());
    net.nodes[1].engine.dealloc_mw(rkey).unwrap();
    net.nodes[1].engine.mrs().dereg_mr(kb).unwrap();
}
