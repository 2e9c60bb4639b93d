//! A ping-pong's lost tail (issue 14, `engine::recovery`, "A tail's
//! floor"): with a 4 KiB message in flight (four packets at path MTU 1024)
//! a lost last packet or a lost ACK leaves nothing to provoke a sequence NAK
//! (RL-03), so only a probe finds it. A spurious probe of so short a tail
//! costs a packet or a few, not a window, so the probe goes at the tail
//! floor (an eighth of the configured one) or twice the round trip, not at
//! the floor that guards a window's go-back against the host's noise.

mod common;

use common::loss::{lose_when, loss_pair};
use common::*;
use transport::psn;
use transport::verbs::{WcStatus, WrOpcode};

const PMTU: u32 = 1024;
const MSG: u32 = 4 * PMTU;
const FLOOR_NS: u64 = 1_000_000;

/// One SEND of `MSG` bytes from `node`'s QP to its peer's posted receive;
/// returns how long (ns) the send took to complete.
fn send(net: &mut Net, p: &Pair, from: usize, id: u64, key_from: u32, key_to: u32) -> u64 {
    let (src, dst) = (MEM_BASE, MEM_BASE + 0x4_0000);
    let (qp, cq, to, qp_to, cq_to) = if from == 0 {
        (p.qa, p.cq_a, 1, p.qb, p.cq_b)
    } else {
        (p.qb, p.cq_b, 0, p.qa, p.cq_a)
    };
    fill(net, from, src, MSG as usize, id as u8);
    recv(net, to, qp_to, id, dst, MSG, key_to);
    let t0 = net.now;
    let c = post_wait(
        net,
        from,
        qp,
        cq,
        send_wr(id, WrOpcode::Send, sge(src, MSG, key_from)),
    );
    assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
    let took = net.now.0 - t0.0;
    let r = wait(net, to, cq_to, 1).remove(0);
    assert_eq!((r.wr_id, r.status), (id, WcStatus::Success));
    assert_eq!(
        bytes(net, to, dst, MSG as usize),
        bytes(net, from, src, MSG as usize)
    );
    took
}

/// Node 0 and node 1 exchange 4 KiB SENDs (ibv_rc_pingpong's pattern, one
/// message in flight). Once the round trip is measured, one ping loses its
/// ACK and one pong its last packet: each completes within a few round
/// trips (20 us here), far under the configured 1 ms floor, which the
/// requester used to wait for (then twice: the floor, then the go-back).
#[test]
fn a_ping_pong_recovers_a_lost_tail_well_under_the_floor() {
    let (mut net, p, o, ka, kb) = loss_pair(61, Some(FLOOR_NS));
    // Clean rounds: both requesters measure the round trip.
    for i in 0..4 {
        send(&mut net, &p, 0, 10 + i, ka, kb);
        send(&mut net, &p, 1, 20 + i, kb, ka);
    }
    assert_eq!(net.dropped, 0);
    // Node 0's SENDs went from o.psn_a on, four PSNs each: the fifth
    // ping's ACK (of its last PSN) is lost.
    let ack = psn::add(o.psn_a, 4 * MSG / PMTU + 3);
    // Node 1's fifth pong: its last packet is lost.
    let last = psn::add(o.psn_b, 4 * MSG / PMTU + 3);
    let (mut ack_lost, mut last_lost) = (false, false);
    lose_when(&mut net, move |q, name| {
        let a = !ack_lost && q == ack && name.contains("ACKNOWLEDGE");
        let l = !last_lost && q == last && name.contains("SEND");
        ack_lost |= a;
        last_lost |= l;
        a || l
    });
    let ping = send(&mut net, &p, 0, 30, ka, kb);
    let pong = send(&mut net, &p, 1, 31, kb, ka);
    assert_eq!(net.dropped, 2, "the ping's ACK and the pong's last packet");
    for (what, took) in [("lost ACK", ping), ("lost last packet", pong)] {
        assert!(
            took < FLOOR_NS / 2,
            "{what}: done {took} ns after posting; the 1 ms floor must not apply to a tail"
        );
    }
    let (a, b) = (
        net.nodes[0].engine.counters(),
        net.nodes[1].engine.counters(),
    );
    assert_eq!(a.probes, 1, "one probe found the ping's lost ACK");
    assert!(b.probes >= 1, "a probe found the pong's lost tail");
    assert_eq!(a.timeouts + b.timeouts, 0);
}

/// The floor guards a window against the host's noise: a lost tail of
/// more than four packets still waits for the configured floor.
#[test]
fn a_longer_tail_keeps_the_configured_floor() {
    let (mut net, p, o, ka, kb) = loss_pair(62, Some(FLOOR_NS));
    for i in 0..4 {
        send(&mut net, &p, 0, 10 + i, ka, kb);
    }
    let (src, dst) = (MEM_BASE, MEM_BASE + 0x4_0000);
    fill(&mut net, 0, src, 2 * MSG as usize, 0x33);
    // A WRITE of eight packets whose ACK is lost.
    let ack = psn::add(o.psn_a, 4 * MSG / PMTU + 7);
    let mut lost = false;
    lose_when(&mut net, move |q, name| {
        let hit = !lost && q == ack && name.contains("ACKNOWLEDGE");
        lost |= hit;
        hit
    });
    let t0 = net.now;
    let c = post_wait(
        &mut net,
        0,
        p.qa,
        p.cq_a,
        write_wr(40, ka, 2 * MSG, kb, dst),
    );
    assert_eq!((c.wr_id, c.status), (40, WcStatus::Success));
    assert_eq!(net.dropped, 1);
    let took = net.now.0 - t0.0;
    assert!(
        took >= FLOOR_NS,
        "done {took} ns after posting: the floor applies"
    );
}
