//! Issue 30: packets a link lends in place (`Engine::handle_received_lent`,
//! the shared-memory ring slot they arrived in). A SEND, RDMA WRITE or READ
//! response of a connected QP is placed from the lent bytes with no copy of
//! the engine's own; everything else is copied whole first. Either way the
//! result is the one a private packet gives: the same bytes in memory, the
//! same completions, with loss, duplicates and reordering (the reorder hold
//! keeps a whole copy of a lent packet). The sending side's counterpart:
//! a data packet's payload built in the place its link gives
//! (`Engine::poll_transmit_into`, `TxSlots`).

mod common;

use common::*;
use transport::engine::{Limits, PortConfig, RxFrom, LENT_HEAD};
use transport::verbs::{Completion, WcStatus, WrOpcode};
use transport::wire::{BthRepr, GrhRepr, LrhRepr};

const SRC: u64 = MEM_BASE;
const WRITE_AT: u64 = MEM_BASE + 0x4_0003;
const RECV_AT: u64 = MEM_BASE + 0x8_0000;
const READ_TO: u64 = MEM_BASE + 0xa_0001;
const ATOMIC_AT: u64 = MEM_BASE + 0xf_0000;
const WRITE_LEN: usize = 70_000;
const SEND_LEN: usize = 9_000;
const READ_LEN: usize = 30_000;

/// Two nodes; `lend`: their packets leave without CRCs and arrive lent, as
/// on the shared-memory link, else with CRCs as on a wire.
fn net(lend: bool, faults: Faults, seed: u64) -> Net {
    let ports = (1..=2u16)
        .map(|lid| PortConfig {
            crcs_by_link: lend,
            ..PortConfig::new(lid, u64::from(lid))
        })
        .collect();
    let mut net = Net::with_ports(ports, 1 << 20, seed, Limits::default());
    net.lend = lend;
    net.faults = faults;
    net
}

/// A WRITE, a SEND, a READ of what the WRITE placed, a FETCH_ADD and a
/// WRITE with immediate from node 0 to node 1; returns both nodes' memory
/// and the completions (sorted by wr_id).
fn workload(net: &mut Net) -> (Vec<u8>, Vec<u8>, Vec<Completion>) {
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts {
        mtu: transport::verbs::Mtu::M4096,
        ..ConnOpts::default()
    };
    let p = connect(net, 0, 1, &o);
    fill(net, 0, SRC, WRITE_LEN, 11);
    recv(net, 1, p.qb, 100, RECV_AT, SEND_LEN as u32, kb);
    recv(net, 1, p.qb, 101, RECV_AT + 0x4000, 16, kb);
    let e = &mut net.nodes[0].engine;
    e.post_send(p.qa, write_wr(1, ka, WRITE_LEN as u32, kb, WRITE_AT))
        .unwrap();
    let s = send_wr(2, WrOpcode::Send, sge(SRC + 7, SEND_LEN as u32, ka));
    e.post_send(p.qa, s).unwrap();
    let mut r = send_wr(3, WrOpcode::RdmaRead, sge(READ_TO, READ_LEN as u32, ka));
    r.remote_addr = WRITE_AT + 1000;
    r.rkey = kb;
    e.post_send(p.qa, r).unwrap();
    let mut f = send_wr(4, WrOpcode::AtomicFetchAdd, sge(SRC + 0xe_0000, 8, ka));
    f.remote_addr = ATOMIC_AT;
    f.rkey = kb;
    f.swap_add = 5;
    e.post_send(p.qa, f).unwrap();
    let mut wi = write_wr(5, ka, 3000, kb, WRITE_AT + 0x2_0000);
    wi.opcode = WrOpcode::RdmaWriteWithImm;
    wi.imm_or_inv = 0x1234_5678;
    e.post_send(p.qa, wi).unwrap();
    let mut got = wait(net, 0, p.cq_a, 5);
    got.extend(wait(net, 1, p.cq_b, 2));
    got.sort_by_key(|c| c.wr_id);
    for c in &got {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
    }
    let a = bytes(net, 0, MEM_BASE, 1 << 20);
    let b = bytes(net, 1, MEM_BASE, 1 << 20);
    (a, b, got)
}

#[test]
fn lent_packets_place_what_private_packets_place() {
    let (a0, b0, c0) = workload(&mut net(false, Faults::default(), 1));
    let mut lent = net(true, Faults::default(), 1);
    let (a1, b1, c1) = workload(&mut lent);
    // The bytes where they belong, not only the same as the private run.
    assert_eq!(&b1[0x4_0003..0x4_0003 + WRITE_LEN], &a1[..WRITE_LEN]);
    assert_eq!(&b1[0x8_0000..0x8_0000 + SEND_LEN], &a1[7..7 + SEND_LEN]);
    assert_eq!(
        &a1[0xa_0001..0xa_0001 + READ_LEN],
        &a1[1000..1000 + READ_LEN]
    );
    assert_eq!(b1[0xf_0000], 5, "the FETCH_ADD ran once");
    assert!(
        (a0 == a1) && (b0 == b1),
        "memory differs from the private run"
    );
    assert_eq!(c0, c1);
    let (ca, cb) = (
        lent.nodes[0].engine.counters(),
        lent.nodes[1].engine.counters(),
    );
    // WRITE 18 + SEND 3 + WRITE w/ imm 1 on B, READ responses 8 on A; the
    // ACKs, the READ request and the atomic were copied whole.
    assert_eq!(cb.rx_in_place, 22);
    assert_eq!(ca.rx_in_place, 8);
    assert!(cb.rx_packets > cb.rx_in_place && ca.rx_packets > ca.rx_in_place);
    // The same 30 were built with their payload in the slot: the 22 by
    // A's requester, the 8 READ responses by B's responder.
    assert_eq!(lent.slotted, 30);
}

#[test]
fn lent_packets_survive_loss_duplicates_and_reordering() {
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.1,
        ..Faults::default()
    };
    let mut held = 0;
    for seed in 1..=8 {
        let (a0, b0, c0) = workload(&mut net(false, faults, seed));
        let mut lent = net(true, faults, seed);
        let (a1, b1, c1) = workload(&mut lent);
        assert!((a0 == a1) && (b0 == b1), "seed {seed}: memory differs");
        assert_eq!(c0, c1, "seed {seed}");
        for n in &lent.nodes {
            held += n.engine.counters().reorder.held;
        }
        assert!(lent.nodes[1].engine.counters().rx_in_place > 0);
    }
    assert!(held > 0, "the reorder hold kept no lent packet");
}

#[test]
fn lent_head_holds_the_headers_of_every_opcode() {
    let longest = (0..=255u8)
        .filter_map(transport::wire::opcode::Opcode::from_u8)
        .map(|o| o.info().headers_len())
        .max()
        .unwrap();
    assert!(LrhRepr::LEN + GrhRepr::LEN + BthRepr::LEN + longest <= LENT_HEAD);
}

#[test]
fn a_lent_packet_shorter_than_its_head_or_unvouched_is_copied_whole() {
    // Delivered lent without the CRCs vouched for: copied whole, checked
    // (the ports build CRCs here), placed the same.
    let ports = (1..=2u16)
        .map(|lid| PortConfig::new(lid, u64::from(lid)))
        .collect();
    let mut n = Net::with_ports(ports, 1 << 20, 3, Limits::default());
    let ka = n.reg_all(0, ALL_ACCESS);
    let kb = n.reg_all(1, ALL_ACCESS);
    let p = connect(&mut n, 0, 1, &ConnOpts::default());
    fill(&mut n, 0, SRC, 5000, 2);
    let w = write_wr(1, ka, 5000, kb, WRITE_AT);
    n.nodes[0].engine.post_send(p.qa, w).unwrap();
    let sent = take_sent(&mut n, 0);
    let now = n.now;
    let b = &mut n.nodes[1];
    for s in &sent {
        let mut s = s.clone();
        let from = RxFrom {
            src_lid: Some(1),
            crcs_vouched: false,
        };
        let v = vm_memory::VolatileSlice::from(&mut s[..]);
        b.engine.handle_received_lent(v, from, &mut b.mem, now);
    }
    assert_eq!(b.engine.counters().rx_in_place, 0);
    assert_eq!(bytes(&n, 0, SRC, 5000), bytes(&n, 1, WRITE_AT, 5000));
}

/// A UD SEND qualifies for a slot too (the requester does not look at the
/// QP type): built with its payload in the slot, it arrives byte-exact
/// (its receive is copied whole: UD is not placed in place).
#[test]
fn a_ud_send_built_in_a_slot_arrives_byte_exact() {
    let mut n = net(true, Faults::default(), 5);
    let ka = n.reg_all(0, ALL_ACCESS);
    let kb = n.reg_all(1, ALL_ACCESS);
    let (qa, cqa) = ud_qp(&mut n, 0);
    let (qb, cqb) = ud_qp(&mut n, 1);
    fill(&mut n, 0, SRC, 4096, 9);
    recv(&mut n, 1, qb, 1, RECV_AT, 4096 + 40, kb);
    let mut w = send_wr(1, WrOpcode::Send, sge(SRC, 4096, ka));
    w.ud = Some(ud_dest(2, qb));
    n.nodes[0].engine.post_send(qa, w).unwrap();
    let b = wait(&mut n, 1, cqb, 1);
    assert_eq!((b[0].status, b[0].byte_len), (WcStatus::Success, 4096 + 40));
    assert_eq!(bytes(&n, 1, RECV_AT + 40, 4096), bytes(&n, 0, SRC, 4096));
    assert_eq!(wait(&mut n, 0, cqa, 1)[0].status, WcStatus::Success);
    assert_eq!(n.slotted, 1);
    assert_eq!(n.nodes[1].engine.counters().rx_in_place, 0);
}
