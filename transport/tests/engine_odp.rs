//! On-demand paging in the engine (issue 29): two engines over the simulated
//! fabric with ODP MRs; a test "guest" answers the page fault events with
//! MAPs (or FAULT_FAILs) of the pages, as vhca.ko does from the PageFault EQE.

mod common;

use common::*;
use transport::verbs::{Event, PageFault, RecvWr, WcOpcode, WcStatus, WrOpcode};
use transport::wire::ext::AethSyndrome;
use transport::wire::{NakCode, PacketRepr};

/// A fault the test guest saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fault {
    node: usize,
    qpn: u32,
    key: u32,
    vpn: u64,
    npages: u32,
    write: bool,
    responder: bool,
}

/// Takes the page fault events of `node` (other events are left out).
fn faults(net: &mut Net, node: usize) -> Vec<Fault> {
    let mut out = Vec::new();
    while let Some(e) = net.nodes[node].engine.poll_event() {
        if let Event::PageFault(PageFault {
            qpn,
            key,
            vpn,
            npages,
            write,
            responder,
        }) = e
        {
            out.push(Fault {
                node,
                qpn,
                key,
                vpn,
                npages,
                write,
                responder,
            });
        }
    }
    out
}

/// Maps the fault's pages at physical = virtual + `shift` (identity with 0).
fn map(net: &mut Net, f: &Fault, shift: u64) {
    let pages: Vec<u64> = (0..u64::from(f.npages))
        .map(|i| ((f.vpn + i) << 12) + shift)
        .collect();
    net.nodes[f.node]
        .engine
        .odp_map(f.key, f.vpn << 12, &pages)
        .expect("map");
}

/// Runs until `done`, answering every fault on both nodes with an identity
/// MAP; returns the faults seen.
fn run_serving(net: &mut Net, mut done: impl FnMut(&mut Net) -> bool) -> Vec<Fault> {
    let mut seen = Vec::new();
    let mut idle = 0;
    for _ in 0..2_000_000 {
        let mut served = false;
        for node in 0..2 {
            for f in faults(net, node) {
                map(net, &f, 0);
                seen.push(f);
                served = true;
            }
        }
        if done(net) {
            return seen;
        }
        // Idle twice with no fault to answer: stuck.
        if net.step() || served {
            idle = 0;
        } else {
            idle += 1;
            if idle > 1 {
                break;
            }
        }
    }
    panic!("did not finish; faults {seen:?}");
}

/// An ODP MR over `[iova, iova + len)` on `node`, with every right.
fn odp_mr(net: &mut Net, node: usize, iova: u64, len: u64) -> u32 {
    let n = &mut net.nodes[node];
    n.engine
        .mrs()
        .reg_odp_mr(n.pd, iova, len, ALL_ACCESS)
        .expect("reg_odp_mr")
}

fn wr(
    id: u64,
    op: WrOpcode,
    addr: u64,
    len: u32,
    lkey: u32,
    raddr: u64,
    rkey: u32,
) -> transport::verbs::SendWr {
    let mut w = send_wr(id, op, sge(addr, len, lkey));
    w.remote_addr = raddr;
    w.rkey = rkey;
    w
}

/// The AETH syndromes of the sniffed packets.
fn syndromes(net: &Net) -> Vec<AethSyndrome> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| PacketRepr::parse(b).ok())
        .filter_map(|p| p.transport.ext.aeth.map(|a| a.syndrome))
        .collect()
}

fn rnr_naks(net: &Net) -> usize {
    syndromes(net)
        .iter()
        .filter(|s| matches!(s, AethSyndrome::RnrNak { .. }))
        .count()
}

const SRC: u64 = MEM_BASE + 0x1_0000;
const DST: u64 = MEM_BASE + 0x4_0000;

/// A sniffed pair whose node 0 posted an RDMA WRITE of `len` bytes from its
/// plain MR into node 1's ODP MR of `mr_len` bytes at `DST + off`.
fn write_into_odp(seed: u64, mr_len: u64, off: u64, len: usize) -> (Net, Pair, u32) {
    let mut net = Net::new(2, 1 << 20, seed);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = odp_mr(&mut net, 1, DST, mr_len);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    fill(&mut net, 0, SRC, len, seed as u8);
    let w = wr(1, WrOpcode::RdmaWrite, SRC, len as u32, ka, DST + off, kb);
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    (net, p, kb)
}

#[test]
fn requester_gather_fault_waits_for_the_map_then_sends_byte_exact() {
    let mut net = Net::new(2, 1 << 20, 1);
    let ka = odp_mr(&mut net, 0, SRC, 0x1_0000);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 5000;
    fill(&mut net, 0, SRC + 0x100, len, 7);
    recv(&mut net, 1, p.qb, 9, DST, 8192, kb);
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            wr(1, WrOpcode::Send, SRC + 0x100, len as u32, ka, 0, 0),
        )
        .unwrap();
    // Nothing is sent until the guest maps: the SQ waits, one event.
    net.run_until(1000, |_| false);
    let f = faults(&mut net, 0);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].qpn, f[0].key, f[0].vpn, f[0].write, f[0].responder),
        (p.qa, ka, SRC >> 12, false, false)
    );
    assert_eq!(
        net.nodes[0].engine.counters().tx_packets,
        0,
        "no packet while waiting"
    );
    map(&mut net, &f[0], 0);
    // The next page faults in turn; the test guest maps it.
    run_serving(&mut net, |n| n.nodes[1].engine.cq_len(p.cq_b) > 0);
    let c = wait_cqe(&mut net, 1, p.cq_b);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, len as u32));
    assert_eq!(bytes(&net, 0, SRC + 0x100, len), bytes(&net, 1, DST, len));
    let s = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((s.wr_id, s.status), (1, WcStatus::Success));
    let o = net.nodes[0].engine.counters().odp;
    assert_eq!((o.faults_raised, o.faults_resolved), (2, 2));
}

#[test]
fn responder_write_fault_is_an_rnr_nak_and_the_retry_succeeds_after_the_map() {
    let len = 3000;
    let (mut net, p, kb) = write_into_odp(2, 0x1_0000, 0x800, len);
    // Until the first fault: an RNR NAK on the wire, the fault raised once.
    let mut f = Vec::new();
    net.run_until(100_000, |n| {
        f.extend(faults(n, 1));
        !f.is_empty()
    });
    assert_eq!(f.len(), 1);
    assert_eq!(
        (f[0].qpn, f[0].key, f[0].vpn, f[0].write, f[0].responder),
        (p.qb, kb, DST >> 12, true, true)
    );
    // The RNR NAK goes out on the next round.
    net.run_until(3, |_| false);
    assert!(rnr_naks(&net) >= 1, "{:?}", syndromes(&net));
    assert_eq!(
        net.nodes[1].engine.counters().odp.rnr_naks,
        rnr_naks(&net) as u64
    );
    assert!(bytes(&net, 1, DST + 0x800, len).iter().all(|&b| b == 0));
    map(&mut net, &f[0], 0);
    run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) > 0);
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(bytes(&net, 0, SRC, len), bytes(&net, 1, DST + 0x800, len));
}

#[test]
fn responder_send_receive_buffer_fault_is_an_rnr_nak_and_keeps_the_receive_wqe() {
    let mut net = Net::new(2, 1 << 20, 3);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = odp_mr(&mut net, 1, DST, 0x1_0000);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 2500;
    fill(&mut net, 0, SRC, len, 5);
    recv(&mut net, 1, p.qb, 41, DST, 4096, kb);
    net.nodes[0]
        .engine
        .post_send(p.qa, wr(1, WrOpcode::Send, SRC, len as u32, ka, 0, 0))
        .unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[1].engine.cq_len(p.cq_b) > 0);
    assert!(
        seen.iter().all(|f| f.responder && f.write && f.node == 1),
        "{seen:?}"
    );
    assert!(rnr_naks(&net) >= 1);
    let c = wait_cqe(&mut net, 1, p.cq_b);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (41, WcStatus::Success, len as u32)
    );
    assert_eq!(bytes(&net, 0, SRC, len), bytes(&net, 1, DST, len));
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);
}

#[test]
fn responder_atomic_fault_is_an_rnr_nak_and_the_atomic_runs_once() {
    let mut net = Net::new(2, 1 << 20, 4);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = odp_mr(&mut net, 1, DST, 0x1000);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    net.nodes[1].mem.bytes[(DST - MEM_BASE) as usize + 8] = 40;
    let mut w = wr(1, WrOpcode::AtomicFetchAdd, SRC, 8, ka, DST + 8, kb);
    w.swap_add = 2;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) > 0);
    assert!(rnr_naks(&net) >= 1);
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );
    assert_eq!(bytes(&net, 0, SRC, 8), 40u64.to_le_bytes());
    assert_eq!(
        bytes(&net, 1, DST + 8, 8),
        42u64.to_le_bytes(),
        "executed once"
    );
}

#[test]
fn read_source_not_present_holds_the_response_stream_until_the_map() {
    let mut net = Net::new(2, 1 << 20, 5);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = odp_mr(&mut net, 1, DST, 0x1_0000);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 9000;
    // The guest would map these bytes; they are there at physical = virtual.
    fill(&mut net, 1, DST + 0x10, len, 9);
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            wr(1, WrOpcode::RdmaRead, SRC, len as u32, ka, DST + 0x10, kb),
        )
        .unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) > 0);
    assert!(
        !seen.is_empty() && seen.iter().all(|f| f.node == 1 && f.responder && !f.write),
        "{seen:?}"
    );
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, len as u32));
    assert_eq!(bytes(&net, 0, SRC, len), bytes(&net, 1, DST + 0x10, len));
    // The stream continued after the map: no timeout had to bring it back.
    assert_no_recovery(&net, 0);
}

#[test]
fn read_response_to_a_missing_page_is_dropped_and_asked_again_after_the_map() {
    let mut net = Net::new(2, 1 << 20, 6);
    let ka = odp_mr(&mut net, 0, SRC, 0x1_0000);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 9000;
    fill(&mut net, 1, DST, len, 11);
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            wr(1, WrOpcode::RdmaRead, SRC + 0x20, len as u32, ka, DST, kb),
        )
        .unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) > 0);
    assert!(
        seen.iter().all(|f| f.node == 0 && !f.responder && f.write),
        "{seen:?}"
    );
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, len as u32));
    assert_eq!(bytes(&net, 0, SRC + 0x20, len), bytes(&net, 1, DST, len));
    let o = net.nodes[0].engine.counters().odp;
    assert!(o.responses_dropped >= 1, "{o:?}");
    // Asked again at once after the map, not after an ACK timeout.
    assert_no_recovery(&net, 0);
}

#[test]
fn atomic_result_to_a_missing_page_is_asked_again_and_the_responder_replays_it() {
    let mut net = Net::new(2, 1 << 20, 7);
    let ka = odp_mr(&mut net, 0, SRC, 0x1000);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    net.nodes[1].mem.bytes[(DST - MEM_BASE) as usize] = 7;
    let mut w = wr(1, WrOpcode::AtomicFetchAdd, SRC, 8, ka, DST, kb);
    w.swap_add = 1;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) > 0);
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(
        bytes(&net, 0, SRC, 8),
        7u64.to_le_bytes(),
        "the original value"
    );
    assert_eq!(
        bytes(&net, 1, DST, 8),
        8u64.to_le_bytes(),
        "executed once (RL-06)"
    );
    assert_eq!(net.nodes[0].engine.counters().odp.responses_dropped, 1);
    assert_no_recovery(&net, 0);
}

#[test]
fn after_unmap_no_access_touches_the_old_pages() {
    let mut net = Net::new(2, 1 << 20, 8);
    let ka = odp_mr(&mut net, 0, SRC, 0x1000);
    let kb = odp_mr(&mut net, 1, DST, 0x1000);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    // Source page at physical A0, target page at B0.
    let (a0, b0) = (MEM_BASE + 0x8_0000, MEM_BASE + 0x9_0000);
    net.nodes[0].engine.odp_map(ka, SRC, &[a0]).unwrap();
    net.nodes[1].engine.odp_map(kb, DST, &[b0]).unwrap();
    fill(&mut net, 0, a0, 4096, 1);
    for i in 0..4 {
        net.nodes[0]
            .engine
            .post_send(p.qa, wr(i, WrOpcode::RdmaWrite, SRC, 4096, ka, DST, kb))
            .unwrap();
    }
    wait(&mut net, 0, p.cq_a, 4);
    assert_eq!(bytes(&net, 0, a0, 4096), bytes(&net, 1, b0, 4096));
    // Unmap both, then the guest reuses the old pages for something else.
    net.nodes[0].engine.odp_unmap(ka, SRC, 4096).unwrap();
    net.nodes[1].engine.odp_unmap(kb, DST, 4096).unwrap();
    let sentinel = vec![0xee; 4096];
    net.nodes[0].mem.bytes[(a0 - MEM_BASE) as usize..][..4096].copy_from_slice(&sentinel);
    net.nodes[1].mem.bytes[(b0 - MEM_BASE) as usize..][..4096].copy_from_slice(&sentinel);
    // New data on new pages: faults map source to A1, target to B1.
    let (a1, b1) = (MEM_BASE + 0xa_0000, MEM_BASE + 0xb_0000);
    fill(&mut net, 0, a1, 4096, 2);
    for i in 0..4 {
        net.nodes[0]
            .engine
            .post_send(
                p.qa,
                wr(10 + i, WrOpcode::RdmaWrite, SRC, 4096, ka, DST, kb),
            )
            .unwrap();
    }
    let mut got = Vec::new();
    net.run_until(2_000_000, |net| {
        for node in 0..2 {
            for f in faults(net, node) {
                let pa = if node == 0 { a1 } else { b1 };
                net.nodes[node]
                    .engine
                    .odp_map(f.key, f.vpn << 12, &[pa])
                    .unwrap();
            }
        }
        while let Some(c) = net.poll(0, p.cq_a) {
            got.push(c);
        }
        got.len() == 4
    });
    assert!(got.iter().all(|c| c.status == WcStatus::Success), "{got:?}");
    assert_eq!(bytes(&net, 0, a1, 4096), bytes(&net, 1, b1, 4096));
    // Nothing read the old source page (the target got A1's bytes, never the
    // sentinel) and nothing wrote the old target page.
    assert_ne!(bytes(&net, 1, b1, 4096), sentinel);
    assert_eq!(
        bytes(&net, 1, b0, 4096),
        sentinel,
        "old target page untouched"
    );
    assert_eq!(
        bytes(&net, 0, a0, 4096),
        sentinel,
        "old source page untouched"
    );
    assert_eq!(net.nodes[0].engine.counters().odp.invalidations, 1);
}

#[test]
fn fault_fail_completes_the_requester_with_local_protection_error() {
    let mut net = Net::new(2, 1 << 20, 9);
    let ka = odp_mr(&mut net, 0, SRC, 0x1000);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    recv(&mut net, 1, p.qb, 1, DST, 4096, kb);
    net.nodes[0]
        .engine
        .post_send(p.qa, wr(1, WrOpcode::Send, SRC, 100, ka, 0, 0))
        .unwrap();
    net.run_until(1000, |_| false);
    let f = faults(&mut net, 0);
    assert_eq!(f.len(), 1);
    net.nodes[0].engine.odp_fault_fail(ka, SRC, 100).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::LocProtErr));
    assert_eq!(net.nodes[0].engine.counters().odp.faults_failed, 1);
}

#[test]
fn fault_fail_makes_the_responder_nak_remote_access_error() {
    let (mut net, p, kb) = write_into_odp(10, 0x1000, 0, 64);
    let mut f = Vec::new();
    net.run_until(100_000, |n| {
        f.extend(faults(n, 1));
        !f.is_empty()
    });
    net.nodes[1].engine.odp_fault_fail(kb, DST, 64).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(c.status, WcStatus::RemAccessErr);
    assert!(syndromes(&net).contains(&AethSyndrome::Nak(NakCode::RemoteAccessError)));
    assert_eq!(
        net.nodes[1]
            .engine
            .counters()
            .naked(transport::engine::NakReason::OdpFailed),
        1
    );
}

#[test]
fn implicit_mrs_serve_a_write_anywhere() {
    let mut net = Net::new(2, 1 << 20, 11);
    let ka = odp_mr(&mut net, 0, 0, u64::MAX);
    let kb = odp_mr(&mut net, 1, 0, u64::MAX);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 6000;
    fill(&mut net, 0, SRC + 0x333, len, 13);
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            wr(
                1,
                WrOpcode::RdmaWrite,
                SRC + 0x333,
                len as u32,
                ka,
                DST + 0x10,
                kb,
            ),
        )
        .unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) > 0);
    assert!(seen.iter().any(|f| f.node == 0) && seen.iter().any(|f| f.node == 1));
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);
    assert_eq!(
        bytes(&net, 0, SRC + 0x333, len),
        bytes(&net, 1, DST + 0x10, len)
    );
}

#[test]
fn a_fault_is_raised_once_per_qp_and_range_while_the_guest_does_not_answer() {
    let (mut net, p, _) = write_into_odp(12, 0x2000, 0, 64);
    // The requester retries on its RNR timer many times; one event.
    net.run_until(20_000, |n| rnr_naks(n) >= 20);
    assert!(rnr_naks(&net) >= 20);
    assert_eq!(faults(&mut net, 1).len(), 1);
    let o = net.nodes[1].engine.counters().odp;
    assert_eq!((o.faults_raised, o.faults_not_raised), (1, 0));
    // Nothing was executed, nothing completed (rnr_retry 7: forever).
    assert_eq!(net.nodes[0].engine.cq_len(p.cq_a), 0);
}

#[test]
fn srq_receive_buffer_fault_is_an_rnr_nak_and_the_srq_wqe_is_taken_again() {
    let mut net = Net::new(2, 1 << 20, 13);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = odp_mr(&mut net, 1, DST, 0x1_0000);
    let pd = net.nodes[1].pd;
    let srq = net.nodes[1].engine.create_srq(pd, 16, 1, 0).unwrap();
    net.nodes[1]
        .engine
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 77,
                sges: sge(DST + 0x40, 8192, kb),
            },
        )
        .unwrap();
    let o = ConnOpts {
        srq: [None, Some(srq)],
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let len = 3000;
    fill(&mut net, 0, SRC, len, 21);
    net.nodes[0]
        .engine
        .post_send(p.qa, wr(1, WrOpcode::Send, SRC, len as u32, ka, 0, 0))
        .unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[1].engine.cq_len(p.cq_b) > 0);
    assert!(seen.iter().all(|f| f.node == 1 && f.responder), "{seen:?}");
    assert!(rnr_naks(&net) >= 1);
    let c = wait_cqe(&mut net, 1, p.cq_b);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (77, WcStatus::Success, len as u32)
    );
    assert_eq!(bytes(&net, 0, SRC, len), bytes(&net, 1, DST + 0x40, len));
    assert_eq!(
        net.nodes[1].engine.query_srq(srq).unwrap().0,
        0,
        "one WQE, used once"
    );
}

#[test]
fn ud_send_gather_fault_waits_for_the_map_then_sends() {
    let mut net = Net::new(2, 1 << 20, 14);
    let ka = odp_mr(&mut net, 0, SRC, 0x1000);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts {
        qp_type: transport::verbs::QpType::Ud,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    recv(&mut net, 1, p.qb, 5, DST, 256 + 40, kb);
    fill(&mut net, 0, SRC + 0x10, 256, 23);
    let mut w = wr(1, WrOpcode::Send, SRC + 0x10, 256, ka, 0, 0);
    w.ud = Some(transport::verbs::UdDest {
        av: transport::verbs::AddressVector {
            dlid: net.nodes[1].engine.port().lid,
            ..Default::default()
        },
        remote_qpn: p.qb,
        remote_qkey: 0x1111_1111,
        pkey_index: None,
    });
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[1].engine.cq_len(p.cq_b) > 0);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(!seen[0].responder && !seen[0].write);
    let c = wait_cqe(&mut net, 1, p.cq_b);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (5, WcStatus::Success, 256 + 40)
    );
    assert_eq!(
        bytes(&net, 0, SRC + 0x10, 256),
        bytes(&net, 1, DST + 40, 256)
    );
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);
}

#[test]
fn xrc_send_from_and_into_odp_mrs_faults_on_both_sides_and_arrives() {
    let mut net = Net::new(2, 1 << 20, 15);
    net.sniffed = Some(Vec::new());
    let ka = odp_mr(&mut net, 0, SRC, 0x1_0000);
    let kb = odp_mr(&mut net, 1, DST, 0x1_0000);
    let (i, t) = xrc_pair(&mut net);
    let srq = {
        let n = &mut net.nodes[1];
        n.engine
            .create_xrc_srq(n.pd, t.xrcd, t.cq, 16, 4, 0)
            .expect("xrc srq")
    };
    net.nodes[1]
        .engine
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 88,
                sges: sge(DST, 8192, kb),
            },
        )
        .unwrap();
    let len = 3000;
    fill(&mut net, 0, SRC + 0x800, len, 25);
    net.nodes[0]
        .engine
        .post_send_xrc(
            i.ini,
            send_wr(1, WrOpcode::Send, sge(SRC + 0x800, len as u32, ka)),
            srq,
        )
        .unwrap();
    let seen = run_serving(&mut net, |n| n.nodes[1].engine.cq_len(t.cq) > 0);
    assert!(seen.iter().any(|f| f.node == 0 && !f.responder), "{seen:?}");
    assert!(seen.iter().any(|f| f.node == 1 && f.responder), "{seen:?}");
    assert!(rnr_naks(&net) >= 1);
    let c = wait_cqe(&mut net, 1, t.cq);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (88, WcStatus::Success, len as u32)
    );
    assert_eq!(bytes(&net, 0, SRC + 0x800, len), bytes(&net, 1, DST, len));
    assert_eq!(wait_cqe(&mut net, 0, i.cq).status, WcStatus::Success);
}

#[test]
fn a_qp_moved_to_error_while_waiting_for_a_page_flushes_and_waits_no_more() {
    let mut net = Net::new(2, 1 << 20, 16);
    let ka = odp_mr(&mut net, 0, SRC, 0x1000);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    net.nodes[0]
        .engine
        .post_send(p.qa, wr(1, WrOpcode::Send, SRC, 64, ka, 0, 0))
        .unwrap();
    net.run_until(100, |_| false);
    assert_eq!(faults(&mut net, 0).len(), 1);
    let a = transport::verbs::QpAttr {
        state: Some(transport::verbs::QpState::Error),
        ..Default::default()
    };
    net.nodes[0]
        .engine
        .modify_qp(p.qa, &a, transport::verbs::AttrMask::STATE, net.now)
        .unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::WrFlushErr);
    // The fault is forgotten: a MAP resolves nothing.
    net.nodes[0].engine.odp_map(ka, SRC, &[SRC]).unwrap();
    assert_eq!(net.nodes[0].engine.counters().odp.faults_resolved, 0);
}

#[test]
fn a_second_responder_fault_while_one_is_outstanding_is_counted_not_raised() {
    let mut net = Net::new(2, 1 << 20, 17);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = odp_mr(&mut net, 1, DST, 0x2000);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    // A READ of B's page 0 (its responses wait for the page), then a WRITE
    // to B's page 1 behind it.
    net.nodes[0]
        .engine
        .post_send(p.qa, wr(1, WrOpcode::RdmaRead, SRC, 64, ka, DST, kb))
        .unwrap();
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            wr(
                2,
                WrOpcode::RdmaWrite,
                SRC + 0x100,
                64,
                ka,
                DST + 0x1000,
                kb,
            ),
        )
        .unwrap();
    net.run_until(20_000, |n| {
        n.nodes[1].engine.counters().odp.faults_not_raised > 0
    });
    let f = faults(&mut net, 1);
    assert_eq!(f.len(), 1, "only the READ's fault: {f:?}");
    assert_eq!((f[0].vpn, f[0].write), (DST >> 12, false));
    assert!(net.nodes[1].engine.counters().odp.faults_not_raised >= 1);
    // Once it is mapped, the WRITE's retry raises its own.
    map(&mut net, &f[0], 0);
    let seen = run_serving(&mut net, |n| n.nodes[0].engine.cq_len(p.cq_a) >= 2);
    assert!(
        seen.iter().any(|g| g.vpn == (DST >> 12) + 1 && g.write),
        "{seen:?}"
    );
    let c = wait(&mut net, 0, p.cq_a, 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
}

/// The work went on after the map by itself: no ACK timeout and no loss
/// probe had to bring it back (what the code under test must not rely on).
fn assert_no_recovery(net: &Net, node: usize) {
    let c = net.nodes[node].engine.counters();
    assert_eq!((c.timeouts, c.probes), (0, 0));
}
