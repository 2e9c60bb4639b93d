//! Memory windows of type 2A against 2B and type 1 (MP-07; IBA 10.6.7.2.4,
//! o9-5.2.2; seed 003 "Type 2A" / "Type 2B"): a 2A window is associated with
//! its QP alone (an access through another QP is NAKed Remote Access Error on
//! the wire), keeps that QP from being destroyed while bound, and is
//! invalidated only through that QP, locally (LOCAL_INV) or remotely (SEND
//! with Invalidate); which key each fast invalidation may name, per type.

mod common;

use common::*;
use transport::engine::NakReason;
use transport::verbs::{Access, MwType, QpState, SendWr, VerbError, WcOpcode, WcStatus, WrOpcode};
use transport::wire::{AethSyndrome, NakCode, PacketRepr};

const RW: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const WIN: u64 = MEM_BASE + 0x4000;
const WIN_LEN: u64 = 0x1000;

/// Two nodes, two RC pairs, MRs over all memory with MW_BIND.
fn setup(seed: u64) -> (Net, Pair, Pair, u32, u32) {
    let all = Access(ALL_ACCESS.0 | Access::MW_BIND.0);
    let (mut net, p, ka, kb) = pair_setup(seed, 1 << 20, all, &ConnOpts::default());
    let p2 = connect(&mut net, 0, 1, &ConnOpts::default());
    (net, p, p2, ka, kb)
}

/// Node 1 allocates a window of `ty` and binds it through its QP `qpn`
/// (completions on `cq`); returns the bound R_Key.
fn bind(net: &mut Net, qpn: u32, cq: transport::verbs::Handle, ty: MwType, kb: u32) -> u32 {
    let pd = net.nodes[1].pd;
    let mw = net.nodes[1].engine.alloc_mw(pd, ty).unwrap();
    let new = (mw & !0xff) | ((mw + 0x21) & 0xff);
    let w = bind_wr(50, mw, new, kb, WIN, WIN_LEN, RW);
    net.nodes[1].engine.post_send(qpn, w).unwrap();
    let c = wait(net, 1, cq, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::BindMw)
    );
    new
}

fn local_inv(id: u64, rkey: u32) -> SendWr {
    let mut w = send_wr(id, WrOpcode::LocalInv, Vec::new());
    w.imm_or_inv = rkey;
    w
}

/// The AETH syndromes node 1 sent to QP `to` in what was sniffed.
fn syndromes_to(net: &Net, to: u32) -> Vec<AethSyndrome> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| {
            let pk = PacketRepr::parse(b).ok()?;
            let t = pk.transport;
            (t.bth.dest_qp == to).then_some(t.ext.aeth?.syndrome)
        })
        .collect()
}

fn bound(net: &Net, rkey: u32) -> bool {
    net.nodes[1]
        .engine
        .mr_table()
        .mw(rkey)
        .unwrap()
        .binding()
        .is_some()
}

#[test]
fn mp_07_type2a_window_serves_its_qp_and_another_qp_gets_a_remote_access_nak() {
    let (mut net, p, p2, ka, kb) = setup(21);
    let rkey = bind(&mut net, p.qb, p.cq_b, MwType::Type2A, kb);
    net.sniffed = Some(Vec::new());
    fill(&mut net, 0, MEM_BASE, 128, 3);
    assert_eq!(
        post_wait(
            &mut net,
            0,
            p.qa,
            p.cq_a,
            write_wr(1, ka, 128, rkey, WIN + 0x40)
        )
        .status,
        WcStatus::Success
    );
    assert_eq!(
        bytes(&net, 1, WIN + 0x40, 128),
        bytes(&net, 0, MEM_BASE, 128)
    );
    assert!(syndromes_to(&net, p.qa)
        .iter()
        .all(|s| matches!(s, AethSyndrome::Ack { .. })));
    // Same PD, same R_Key, another QP: the association is the QP (seed 003).
    assert_eq!(
        post_wait(&mut net, 0, p2.qa, p2.cq_a, write_wr(2, ka, 8, rkey, WIN)).status,
        WcStatus::RemAccessErr
    );
    assert_eq!(
        syndromes_to(&net, p2.qa),
        vec![AethSyndrome::Nak(NakCode::RemoteAccessError)]
    );
    assert_eq!(
        net.nodes[1]
            .engine
            .counters()
            .naked(NakReason::WindowWrongQp),
        1
    );
    assert_eq!(
        bytes(&net, 1, WIN, 8),
        vec![0; 8],
        "the refused WRITE wrote nothing"
    );
}

#[test]
fn mp_07_type2a_window_keeps_its_qp_alive_type2b_does_not() {
    let (mut net, p, p2, _ka, kb) = setup(22);
    let k2a = bind(&mut net, p.qb, p.cq_b, MwType::Type2A, kb);
    let k2b = bind(&mut net, p2.qb, p2.cq_b, MwType::Type2, kb);
    // 2A: DESTROY is refused while bound, and nothing changes.
    assert_eq!(net.nodes[1].engine.destroy_qp(p.qb), Err(VerbError::Busy));
    assert!(bound(&net, k2a));
    assert!(net.nodes[1].engine.query_qp(p.qb).is_ok());
    // 2B: the QP goes and its window is freed.
    net.nodes[1].engine.destroy_qp(p2.qb).unwrap();
    assert!(!bound(&net, k2b));
    // LOCAL_INV through the 2A window's own QP frees it; then DESTROY works.
    net.nodes[1]
        .engine
        .post_send(p.qb, local_inv(3, k2a))
        .unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    assert!(!bound(&net, k2a));
    net.nodes[1].engine.destroy_qp(p.qb).unwrap();
    // A freed 2A window can be deallocated and its MR deregistered.
    net.nodes[1].engine.dealloc_mw(k2a).unwrap();
    net.nodes[1].engine.dealloc_mw(k2b).unwrap();
    net.nodes[1].engine.mrs().dereg_mr(kb).unwrap();
}

#[test]
fn mp_07_local_inv_of_a_type2a_window_through_another_qp_is_a_protection_error() {
    let (mut net, p, p2, ka, kb) = setup(23);
    let rkey = bind(&mut net, p.qb, p.cq_b, MwType::Type2A, kb);
    net.nodes[1]
        .engine
        .post_send(p2.qb, local_inv(1, rkey))
        .unwrap();
    let c = wait(&mut net, 1, p2.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::LocProtErr, WcOpcode::LocalInv)
    );
    assert_eq!(
        net.nodes[1].engine.query_qp(p2.qb).unwrap().0,
        QpState::Error
    );
    // The window is untouched: its own QP still reaches memory through it.
    assert!(bound(&net, rkey));
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write_wr(2, ka, 8, rkey, WIN)).status,
        WcStatus::Success
    );
}

/// A SEND with Invalidate of `rkey` from node 0's `qa` to node 1's `qb` (one
/// receive posted there): the requester's and the responder's statuses and the
/// AETH syndromes node 1 answered with.
fn send_inv(
    net: &mut Net,
    pair: &Pair,
    ka: u32,
    kb: u32,
    rkey: u32,
) -> (WcStatus, WcStatus, Vec<AethSyndrome>) {
    recv(net, 1, pair.qb, 9, MEM_BASE + 0x9000, 64, kb);
    net.sniffed = Some(Vec::new());
    let mut s = send_wr(1, WrOpcode::SendWithInv, sge(MEM_BASE, 8, ka));
    s.imm_or_inv = rkey;
    net.nodes[0].engine.post_send(pair.qa, s).unwrap();
    let a = wait(net, 0, pair.cq_a, 1)[0].status;
    let b = wait(net, 1, pair.cq_b, 1)[0].status;
    let syn = syndromes_to(net, pair.qa);
    net.sniffed = None;
    (a, b, syn)
}

#[test]
fn mp_07_send_with_invalidate_of_a_type2a_window_works_only_on_its_qp() {
    // o9-5.2.2 7): a valid 2A window associated with another QP is refused,
    // NAK Invalid Request on the wire, and stays bound.
    let (mut net, p, p2, ka, kb) = setup(24);
    let rkey = bind(&mut net, p.qb, p.cq_b, MwType::Type2A, kb);
    let (a, b, syn) = send_inv(&mut net, &p2, ka, kb, rkey);
    assert_eq!((a, b), (WcStatus::RemInvReqErr, WcStatus::RemInvReqErr));
    assert_eq!(syn, vec![AethSyndrome::Nak(NakCode::InvalidRequest)]);
    assert!(bound(&net, rkey));
    assert_eq!(
        net.nodes[1]
            .engine
            .counters()
            .naked(NakReason::InvalidInvalidate),
        1
    );
    // Through its own QP: ACKed, and the window is free.
    let (a, b, syn) = send_inv(&mut net, &p, ka, kb, rkey);
    assert_eq!((a, b), (WcStatus::Success, WcStatus::Success));
    assert!(matches!(syn[..], [AethSyndrome::Ack { .. }]), "{syn:?}");
    assert!(!bound(&net, rkey));
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write_wr(2, ka, 8, rkey, WIN)).status,
        WcStatus::RemAccessErr
    );
}

#[test]
fn mp_07_send_with_invalidate_of_a_type1_window_is_refused_on_the_wire() {
    // o9-5.2.2 6): type 1 keys are never invalidated (seed 003 table).
    let (mut net, p, _p2, ka, kb) = setup(25);
    let rkey = bind(&mut net, p.qb, p.cq_b, MwType::Type1, kb);
    let (a, b, syn) = send_inv(&mut net, &p, ka, kb, rkey);
    assert_eq!((a, b), (WcStatus::RemInvReqErr, WcStatus::RemInvReqErr));
    assert_eq!(syn, vec![AethSyndrome::Nak(NakCode::InvalidRequest)]);
    assert!(bound(&net, rkey));
}

#[test]
fn mp_07_invalidating_a_free_type2_key_changes_nothing_for_either_subtype() {
    // o9-5.2.2 note: a free key of the QP's PD invalidates to itself; this
    // holds for 2A and 2B alike (the PD is checked for a free window, 9).
    for ty in [MwType::Type2A, MwType::Type2] {
        let (mut net, p, _p2, _ka, _kb) = setup(26);
        let pd = net.nodes[1].pd;
        let mw = net.nodes[1].engine.alloc_mw(pd, ty).unwrap();
        net.nodes[1]
            .engine
            .post_send(p.qb, local_inv(1, mw))
            .unwrap();
        let c = wait(&mut net, 1, p.cq_b, 1);
        assert_eq!(c[0].status, WcStatus::Success, "{ty:?}");
        assert!(!bound(&net, mw));
    }
}
