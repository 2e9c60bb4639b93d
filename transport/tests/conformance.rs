//! Rows whose earlier tests did not assert what the row says (issue 29, item
//! 3): each test here checks its row on the wire, in the packets the engines
//! exchange (`Net::sniffed`) or answer to crafted requests (`common::craft`).

mod common;

use common::craft::*;
use common::*;
use transport::psn;
use transport::verbs::{QpState, SendFlags, WcStatus, WrOpcode};
use transport::wire::opcode::Opcode;
use transport::wire::{AethSyndrome, NakCode};

/// The sniffed exchange, parsed (`common::craft::seen`).
fn sniffed(net: &Net) -> Vec<Seen> {
    net.sniffed
        .as_ref()
        .expect("sniffing on")
        .iter()
        .map(|b| seen(b))
        .collect()
}

/// RL-08 (9.7.5.1.1 AckReq, 9.7.5.1.2 MSN): the requester sets AckReq on the
/// last (or only) packet of every message, since each message's completion
/// waits for an acknowledgement; the responder's MSN counts messages, not
/// packets: an ACK for PSN p carries the number of whole messages that end at
/// or before p. Messages of 1, 3 and 4 packets and a 0-byte one, with the
/// PSNs wrapping at 2^24 (the requester starts at 0xfffff0).
#[test]
fn rl_08_every_message_end_asks_for_an_ack_and_the_msn_counts_messages() {
    let o = ConnOpts::default();
    let (mut net, p, ka, kb) = pair_setup(81, 1 << 22, ALL_ACCESS, &o);
    net.sniffed = Some(Vec::new());
    let pmtu = o.mtu.bytes() as u32;
    let sizes = [100, 3 * pmtu - 7, 0, 4 * pmtu, pmtu, 2 * pmtu + 1, 8];
    fill(&mut net, 0, MEM_BASE, 8 * pmtu as usize, 5);
    for (i, _) in sizes.iter().enumerate() {
        let at = MEM_BASE + 0x10_0000 + 0x1_0000 * i as u64;
        recv(&mut net, 1, p.qb, i as u64, at, 0x1_0000, kb);
    }
    for (i, len) in sizes.iter().enumerate() {
        let s = send_wr(i as u64, WrOpcode::Send, sge(MEM_BASE, *len, ka));
        net.nodes[0].engine.post_send(p.qa, s).unwrap();
    }
    wait(&mut net, 0, p.cq_a, sizes.len());
    let pkts = sniffed(&net);

    // The requester: the PSN each message ends at, and AckReq there.
    let mut ends = Vec::new();
    // (Both QPs are number 2, each on its own node: tell requests by opcode.)
    let requests: Vec<&Seen> = pkts
        .iter()
        .filter(|k| k.opcode != Opcode::RC_ACKNOWLEDGE)
        .collect();
    for k in &requests {
        let info = k.opcode.info();
        if info.ends_message() {
            assert!(k.ack_req, "a message's last packet asks for an ACK: {k:?}");
            if !ends.contains(&k.psn) {
                ends.push(k.psn);
            }
        }
    }
    assert_eq!(ends.len(), sizes.len(), "one end per message: {requests:?}");
    assert_eq!(ends[0], psn::add(o.psn_a, 0));
    let npkts: u32 = sizes.iter().map(|l| l.div_ceil(pmtu).max(1)).sum();
    assert_eq!(*ends.last().unwrap(), psn::add(o.psn_a, npkts - 1));

    // The responder: every ACK's MSN is the count of messages ended by its PSN.
    let acks: Vec<&Seen> = pkts
        .iter()
        .filter(|k| k.opcode == Opcode::RC_ACKNOWLEDGE)
        .collect();
    assert!(!acks.is_empty());
    for k in &acks {
        let (syn, msn) = (
            k.syndrome.expect("an ACK has an AETH"),
            k.msn.expect("an ACK has an AETH"),
        );
        assert!(matches!(syn, AethSyndrome::Ack { .. }), "{k:?}");
        let done = ends.iter().filter(|e| psn::diff(**e, k.psn) <= 0).count() as u32;
        assert_eq!(msn, done, "MSN of the ACK for PSN {:#x}", k.psn);
    }
    assert_eq!(
        acks.last().unwrap().msn.unwrap(),
        sizes.len() as u32,
        "the last ACK names every message"
    );
}

/// OR-05 (C9-31): a fenced WR waits until every READ and ATOMIC before it
/// has completed. Here the fenced SEND carries the 8 bytes the FetchAdd
/// before it brings back: sent any earlier, it would carry the buffer's old
/// contents.
#[test]
fn or_05_fenced_send_waits_for_the_atomic_before_it() {
    let (mut net, p, ka, kb) = pair_setup(82, 1 << 22, ALL_ACCESS, &ConnOpts::default());
    let counter = MEM_BASE + 0x1000;
    let local = MEM_BASE + 0x2000;
    net.nodes[1].mem.bytes[0x1000..0x1008].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    let before = bytes(&net, 1, counter, 8);
    net.nodes[0].mem.bytes[0x2000..0x2008].fill(0xee);
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x8000, 64, kb);
    let mut a = send_wr(1, WrOpcode::AtomicFetchAdd, sge(local, 8, ka));
    a.remote_addr = counter;
    a.rkey = kb;
    a.swap_add = 5;
    net.nodes[0].engine.post_send(p.qa, a).unwrap();
    let mut s = send_wr(2, WrOpcode::Send, sge(local, 8, ka));
    s.flags = SendFlags(SendFlags::SIGNALED.0 | SendFlags::FENCE.0);
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x8000, 8),
        before,
        "the SEND left after the FetchAdd's result was in place"
    );
    assert_eq!(
        u64::from_le_bytes(bytes(&net, 1, counter, 8).try_into().unwrap()),
        0x1122_3344_5566_778d
    );
}

/// RL-05 (IBA 9.7.5.1.4; seed 004 §3.3.2.2): when a duplicate READ with an
/// earlier PSN arrives while the responder is sending the responses of a
/// later READ, it stops those and answers the duplicate, from memory as it
/// is now; the requester asks again for whatever it still misses.
#[test]
fn rl_05_a_duplicate_read_preempts_the_responses_of_a_later_read() {
    let mut b = bench();
    let e = b.epsn_b();
    let pmtu = b.o.mtu.bytes();
    let t = off(TARGET);
    b.net.nodes[B].mem.bytes[t..t + 2 * pmtu].fill(0xaa);
    b.net.nodes[B].mem.bytes[t + 4 * pmtu..t + 7 * pmtu].fill(0xcc);
    // READ 1: two packets, PSNs e, e+1. READ 2: three packets, e+2..e+4.
    let read1 = b
        .request(Opcode::RC_RDMA_READ_REQUEST, e)
        .reth(TARGET, b.kb, 2 * pmtu as u32)
        .bytes();
    let read2 = b
        .request(Opcode::RC_RDMA_READ_REQUEST, psn::add(e, 2))
        .reth(TARGET + 4 * pmtu as u64, b.kb, 3 * pmtu as u32)
        .bytes();
    b.inject(B, &read1);
    b.inject(B, &read2);
    let first = take(&mut b.net, B, 3);
    let psns: Vec<u32> = first.iter().map(|s| s.psn).collect();
    assert_eq!(psns, vec![e, psn::add(e, 1), psn::add(e, 2)]);
    // READ 1 again, its data changed since: READ 2's last two responses
    // (e+3, e+4) must not go before the duplicate's.
    b.net.nodes[B].mem.bytes[t..t + 2 * pmtu].fill(0xbb);
    b.inject(B, &read1);
    let rest = b.drain(B);
    let heads: Vec<(Opcode, u32)> = rest.iter().map(|s| (s.opcode, s.psn)).collect();
    assert!(rest.len() >= 2, "{heads:?}");
    assert_eq!(
        (rest[0].opcode, rest[0].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, e),
        "the duplicate is answered at once: {heads:?}"
    );
    assert_eq!(
        (rest[1].opcode, rest[1].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn::add(e, 1))
    );
    assert!(
        rest[..2]
            .iter()
            .all(|s| s.payload.iter().all(|x| *x == 0xbb)),
        "re-executed from memory as it is now"
    );
    // Whatever follows is READ 2's, in order: the spec leaves it to the
    // responder whether to finish it (the requester retries what is missing).
    let later: Vec<u32> = rest[2..].iter().map(|s| s.psn).collect();
    assert!(
        later.is_empty() || later.windows(2).all(|w| psn::diff(w[1], w[0]) == 1),
        "{later:?}"
    );
    assert_eq!(b.epsn_b(), psn::add(e, 5), "the duplicate moved no ePSN");
}

/// MP-05 (IBA 10.10.3 Table 82, RC receive queue; `ibv_poll_cq`'s
/// IBV_WC_LOC_ACCESS_ERR): an RDMA WRITE with immediate whose R_Key check
/// fails is NAKed Remote Access Error, and the receive WQE it consumed
/// completes with Local Access Error (not a flush, not Local Protection
/// Error, which names the responder's own SGE); the QP goes to Error and the
/// receive WQE behind it is flushed.
#[test]
fn mp_05_write_with_immediate_to_a_bad_rkey_completes_its_receive_with_local_access_error() {
    let mut b = bench();
    let e = b.epsn_b();
    b.post_recv(B, b.p.qb, 41, TARGET + 0x800, 64);
    b.post_recv(B, b.p.qb, 42, TARGET + 0x900, 64);
    let mut w = b
        .request(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, e)
        .reth(TARGET, b.kb ^ 0x80, 16)
        .payload(&[9; 16]);
    w.ext.imm_dt = Some(0x1234_5678);
    let before = b.mem(B);
    b.inject(B, &w.bytes());
    let out = b.drain(B);
    assert_one_nak(&out, e, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before, "nothing written");
    let c = b.poll(B, b.p.cq_b).expect("the consumed receive completes");
    assert_eq!((c.wr_id, c.status), (41, WcStatus::LocAccessErr));
    let f = b.poll(B, b.p.cq_b).expect("the next receive is flushed");
    assert_eq!((f.wr_id, f.status), (42, WcStatus::WrFlushErr));
    assert_eq!(b.state(B, b.p.qb), QpState::Error);
}
