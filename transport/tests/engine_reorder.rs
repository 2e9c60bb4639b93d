//! The receive reorder hold (issue 14, `engine::reorder`, vhca policy): a
//! packet one PSN ahead waits briefly for the one it overtook. Two engines
//! driven round by round, each round's packets from one node delivered to
//! the other in an order the test chooses: an adjacent swap costs no
//! sequence NAK (RL-03) and no READ re-request (RL-14); a lost packet is
//! still NAKed.

mod common;

use common::*;
use transport::engine::{Limits, ReorderCounters, DEFAULT_REORDER_HOLD_NS};
use transport::psn;
use transport::verbs::{AttrMask, QpAttr, QpState, Time, WcStatus, WrOpcode};
use transport::wire::PacketRepr;

const PMTU: u32 = 1024;
const A_MEM: u64 = MEM_BASE + 0x2_0000;
const B_MEM: u64 = MEM_BASE + 0x4_0000;

/// What happens to one round's packets from `node` before delivery.
type Tamper<'a> = dyn FnMut(usize, &mut Vec<Vec<u8>>) + 'a;

/// Runs rounds until `done` or `max` rounds: every node sends all it has
/// (64 packets at most), `tamper` reorders or drops them, the other node
/// receives them in that order, 1 us passes, due timers fire. When nothing
/// moves, time jumps to the next timer.
fn pump(
    net: &mut Net,
    tamper: &mut Tamper<'_>,
    max: usize,
    mut done: impl FnMut(&mut Net) -> bool,
) {
    let mut buf = vec![0u8; 8192];
    for _ in 0..max {
        if done(net) {
            return;
        }
        let mut moved = false;
        for from in 0..2 {
            let mut out = Vec::new();
            let n = &mut net.nodes[from];
            for _ in 0..64 {
                let Some(len) = n.engine.poll_transmit(&mut n.mem, net.now, &mut buf) else {
                    break;
                };
                out.push(buf[..len].to_vec());
            }
            moved |= !out.is_empty();
            tamper(from, &mut out);
            let to = &mut net.nodes[1 - from];
            for p in &out {
                to.engine.handle_packet(p, &mut to.mem, net.now);
            }
        }
        net.now = net.now.plus_ns(1_000);
        let mut next = None;
        for n in &mut net.nodes {
            if n.engine.poll_timeout().is_some_and(|t| t <= net.now) {
                n.engine.handle_timeout(net.now);
                moved = true;
            }
            next = [next, n.engine.poll_timeout()].into_iter().flatten().min();
        }
        if !moved {
            match next {
                Some(t) => net.now = Time(net.now.0.max(t.0)),
                None => break,
            }
        }
    }
    assert!(done(net), "not done after {max} rounds");
}

/// A packet's PSN, for the tamper functions.
fn psn_of(p: &[u8]) -> u32 {
    let t = PacketRepr::parse(p)
        .expect("a packet the engine built")
        .transport;
    t.bth.psn
}

/// Swaps the packets at PSNs `x` and `x + 1` when both are in one round.
fn swap_at(x: u32) -> impl FnMut(&mut Vec<Vec<u8>>) {
    let mut done = false;
    move |out: &mut Vec<Vec<u8>>| {
        if done {
            return;
        }
        let i = out.iter().position(|p| psn_of(p) == x);
        let j = out.iter().position(|p| psn_of(p) == psn::add(x, 1));
        if let (Some(i), Some(j)) = (i, j) {
            out.swap(i, j);
            done = true;
        }
    }
}

struct Bench {
    net: Net,
    p: Pair,
    o: ConnOpts,
    ka: u32,
    kb: u32,
}

fn bench(hold_ns: u64) -> Bench {
    let limits = Limits {
        reorder_hold_ns: hold_ns,
        ..Limits::default()
    };
    let mut net = Net::with_limits(2, 1 << 20, 7, limits);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    // PSNs near the wrap: the hold's PSN arithmetic is modular (psn::diff).
    let o = ConnOpts {
        timeout: 14,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    fill(&mut net, 0, A_MEM, 64 * 1024, 0x31);
    fill(&mut net, 1, B_MEM, 64 * 1024, 0x52);
    Bench { net, p, o, ka, kb }
}

/// Posts a WRITE of `len` bytes from node 0's A_MEM to node 1's B_MEM.
fn post_write(b: &mut Bench, id: u64, off: u64, len: u32) {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(A_MEM + off, len, b.ka));
    w.rkey = b.kb;
    w.remote_addr = B_MEM + off;
    b.net.nodes[0].engine.post_send(b.p.qa, w).unwrap();
}

/// Posts a READ of `len` bytes of node 1's B_MEM into node 0's A_MEM.
fn post_read(b: &mut Bench, id: u64, off: u64, len: u32) {
    let mut r = send_wr(id, WrOpcode::RdmaRead, sge(A_MEM + off, len, b.ka));
    r.rkey = b.kb;
    r.remote_addr = B_MEM + off;
    b.net.nodes[0].engine.post_send(b.p.qa, r).unwrap();
}

/// Runs until `n` completions came on node 0 and returns them.
fn finish(b: &mut Bench, n: usize, tamper: &mut Tamper<'_>) -> Vec<(u64, WcStatus)> {
    let mut got = Vec::new();
    let cq = b.p.cq_a;
    pump(&mut b.net, tamper, 20_000, |net| {
        while let Some(c) = net.poll(0, cq) {
            got.push((c.wr_id, c.status));
        }
        got.len() >= n
    });
    got
}

/// A WRITE of eight packets whose third and fourth swap on the wire: the
/// responder holds the fourth until the third comes and processes both in
/// order: no sequence NAK, no go-back, the data byte-exact. Without the hold
/// (the same run with it off) the responder NAKs and the requester goes back.
#[test]
fn an_adjacent_swap_of_write_packets_costs_no_sequence_nak() {
    for hold in [DEFAULT_REORDER_HOLD_NS, 0] {
        let mut b = bench(hold);
        let x = psn::add(b.o.psn_a, 2);
        let mut swap = swap_at(x);
        post_write(&mut b, 1, 0, 8 * PMTU);
        let got = finish(&mut b, 1, &mut |from, out| {
            if from == 0 {
                swap(out)
            }
        });
        assert_eq!(got, [(1, WcStatus::Success)]);
        assert_eq!(
            bytes(&b.net, 1, B_MEM, 8 * PMTU as usize),
            bytes(&b.net, 0, A_MEM, 8 * PMTU as usize),
            "WRITE data byte-exact"
        );
        let (req, resp) = (
            b.net.nodes[0].engine.counters(),
            b.net.nodes[1].engine.counters(),
        );
        if hold == 0 {
            // The spec's processing alone: the swap costs NAKs (one for
            // each PSN the responder dropped meanwhile) and a go-back.
            assert!(resp.naks_sent >= 1, "hold off: the swap is NAKed (RL-03)");
            assert!(req.seq_nak_go_backs >= 1);
            assert!(req.resent_packets >= 1);
            assert_eq!(resp.reorder.held, 0);
            continue;
        }
        assert_eq!(resp.naks_sent, 0, "no sequence NAK for a swap");
        assert_eq!(req.seq_nak_go_backs, 0);
        assert_eq!(req.resent_packets, 0);
        assert_eq!(resp.duplicates_received, 0);
        assert_eq!((resp.reorder.held, resp.reorder.in_order), (1, 1));
        assert_eq!((resp.reorder.overtaken, resp.reorder.expired), (0, 0));
    }
}

/// A READ of eight responses whose third and fourth swap on the wire: the
/// requester holds the fourth until the third comes: no re-request (RL-14),
/// so the responder executes the READ once, and the data is byte-exact.
#[test]
fn an_adjacent_swap_of_read_responses_costs_no_re_request() {
    for hold in [DEFAULT_REORDER_HOLD_NS, 0] {
        let mut b = bench(hold);
        let x = psn::add(b.o.psn_a, 2);
        let mut swap = swap_at(x);
        post_read(&mut b, 1, 0, 8 * PMTU);
        let got = finish(&mut b, 1, &mut |from, out| {
            if from == 1 {
                swap(out)
            }
        });
        assert_eq!(got, [(1, WcStatus::Success)]);
        assert_eq!(
            bytes(&b.net, 0, A_MEM, 8 * PMTU as usize),
            bytes(&b.net, 1, B_MEM, 8 * PMTU as usize),
            "READ data byte-exact"
        );
        let (req, resp) = (
            b.net.nodes[0].engine.counters(),
            b.net.nodes[1].engine.counters(),
        );
        if hold == 0 {
            assert!(req.retransmits >= 1, "hold off: the gap is asked for again");
            assert!(resp.duplicates_received >= 1);
            continue;
        }
        assert_eq!(req.retransmits, 0, "no READ re-request for a swap");
        assert_eq!(
            resp.duplicates_received, 0,
            "the READ executed once (RL-05)"
        );
        assert_eq!(resp.tx_packets, 8, "eight responses, none twice");
        assert_eq!((req.reorder.held, req.reorder.in_order), (1, 1));
    }
}

/// Two READ requests (eight responses each) that swap on the wire: the
/// second is 8 PSNs ahead of the responder's ePSN, since the first READ's
/// responses take eight (9.7.4.1.1). It is held all the same: no sequence
/// NAK, no go-back, each READ executed once.
#[test]
fn swapped_read_requests_cost_no_sequence_nak() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    let first = b.o.psn_a;
    let second = psn::add(first, 8);
    let mut done = false;
    post_read(&mut b, 1, 0, 8 * PMTU);
    post_read(&mut b, 2, 8 * PMTU as u64, 8 * PMTU);
    let got = finish(&mut b, 2, &mut |from, out| {
        if from != 0 || done {
            return;
        }
        let i = out.iter().position(|p| psn_of(p) == first);
        let j = out.iter().position(|p| psn_of(p) == second);
        if let (Some(i), Some(j)) = (i, j) {
            out.swap(i, j);
            done = true;
        }
    });
    assert!(done, "both requests went in one round");
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(
        bytes(&b.net, 0, A_MEM, 16 * PMTU as usize),
        bytes(&b.net, 1, B_MEM, 16 * PMTU as usize),
        "READ data byte-exact"
    );
    let (req, resp) = (
        b.net.nodes[0].engine.counters(),
        b.net.nodes[1].engine.counters(),
    );
    assert_eq!(resp.naks_sent, 0);
    assert_eq!(req.seq_nak_go_backs, 0);
    assert_eq!(resp.duplicates_received, 0);
    assert_eq!((resp.reorder.held, resp.reorder.in_order), (1, 1));
}

/// A WRITE of eight packets whose third is lost: the fourth is held, the
/// fifth overtakes it, and the responder NAKs the third as the spec says
/// (RL-03); the go-back resends it and the data is byte-exact.
#[test]
fn a_lost_packet_is_still_naked() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    let lost = psn::add(b.o.psn_a, 2);
    let mut gone = false;
    post_write(&mut b, 1, 0, 8 * PMTU);
    let got = finish(&mut b, 1, &mut |from, out| {
        if from == 0 && !gone {
            let before = out.len();
            out.retain(|p| psn_of(p) != lost);
            gone = out.len() != before;
        }
    });
    assert_eq!(got, [(1, WcStatus::Success)]);
    assert_eq!(
        bytes(&b.net, 1, B_MEM, 8 * PMTU as usize),
        bytes(&b.net, 0, A_MEM, 8 * PMTU as usize)
    );
    let (req, resp) = (
        b.net.nodes[0].engine.counters(),
        b.net.nodes[1].engine.counters(),
    );
    assert_eq!(resp.naks_sent, 1, "the lost packet is NAKed (RL-03)");
    assert_eq!(req.seq_nak_go_backs, 1);
    assert_eq!((resp.reorder.held, resp.reorder.overtaken), (1, 1));
    assert_eq!(resp.reorder.in_order, 0);
}

/// A WRITE of eight packets whose seventh is lost: the eighth, the last, is
/// held and nothing follows it, so its hold runs out (the engine's timer,
/// `poll_timeout`) and the responder NAKs the seventh then, not later: the
/// requester goes back without waiting for a probe.
#[test]
fn a_held_tail_is_processed_when_its_hold_runs_out() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    let lost = psn::add(b.o.psn_a, 6);
    let mut gone = false;
    post_write(&mut b, 1, 0, 8 * PMTU);
    let t0 = b.net.now;
    let got = finish(&mut b, 1, &mut |from, out| {
        if from == 0 && !gone {
            let before = out.len();
            out.retain(|p| psn_of(p) != lost);
            gone = out.len() != before;
        }
    });
    assert_eq!(got, [(1, WcStatus::Success)]);
    assert_eq!(
        bytes(&b.net, 1, B_MEM, 8 * PMTU as usize),
        bytes(&b.net, 0, A_MEM, 8 * PMTU as usize)
    );
    let (req, resp) = (
        b.net.nodes[0].engine.counters(),
        b.net.nodes[1].engine.counters(),
    );
    assert_eq!((resp.reorder.held, resp.reorder.expired), (1, 1));
    assert_eq!(resp.naks_sent, 1);
    assert_eq!(req.seq_nak_go_backs, 1);
    assert_eq!(req.probes, 0, "the NAK came before any probe");
    let took = b.net.now.0 - t0.0;
    assert!(
        took < DEFAULT_REORDER_HOLD_NS + 100_000,
        "done {took} ns after posting: the hold time and a few rounds"
    );
}

/// Lossless traffic holds nothing: many WRITEs and READs in order.
#[test]
fn in_order_traffic_holds_nothing() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    for i in 0..8u64 {
        post_write(&mut b, 2 * i, i * 4096, 4096);
        post_read(&mut b, 2 * i + 1, 32 * 1024 + i * 4096, 4096);
    }
    let got = finish(&mut b, 16, &mut |_, _| {});
    assert!(got.iter().all(|(_, s)| *s == WcStatus::Success));
    for n in &b.net.nodes {
        assert_eq!(n.engine.counters().reorder, Default::default());
    }
}

/// Two READ requests (eight responses each) and a fabric duplicate of the
/// first that arrives after the second, before any response went: the
/// first READ's answer is still queued and not begun, and answers the
/// duplicate too (RL-05: read from memory when it goes). The second READ
/// is not preempted, so the requester asks for nothing again and the
/// responder sends each response once.
#[test]
fn a_duplicate_read_request_behind_a_later_one_preempts_nothing() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    let first = b.o.psn_a;
    let mut done = false;
    post_read(&mut b, 1, 0, 8 * PMTU);
    post_read(&mut b, 2, 8 * PMTU as u64, 8 * PMTU);
    let got = finish(&mut b, 2, &mut |from, out| {
        if from != 0 || done {
            return;
        }
        if let Some(i) = out.iter().position(|p| psn_of(p) == first) {
            if out.len() >= 2 {
                let dup = out[i].clone();
                out.push(dup);
                done = true;
            }
        }
    });
    assert!(done, "both requests went in one round");
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(
        bytes(&b.net, 0, A_MEM, 16 * PMTU as usize),
        bytes(&b.net, 1, B_MEM, 16 * PMTU as usize),
        "READ data byte-exact"
    );
    let (req, resp) = (
        b.net.nodes[0].engine.counters(),
        b.net.nodes[1].engine.counters(),
    );
    assert_eq!(resp.duplicates_received, 1);
    assert_eq!(resp.reorder.dup_reads_queued, 1);
    assert_eq!(resp.tx_packets, 16, "each response once");
    assert_eq!(req.retransmits, 0, "nothing asked for again");
}

/// A process descheduled past the hold: the held packet's hold ran out
/// before the receiver ran again, and the missing packet waits in its next
/// batch. That batch is read before anything held is processed, so the
/// missing packet still goes first: no NAK (as a due probe waits for what
/// arrived, `recovery`).
#[test]
fn a_hold_that_ran_out_while_descheduled_still_takes_the_missing_packet_first() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    post_write(&mut b, 1, 0, 4 * PMTU);
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::new();
    {
        let n = &mut b.net.nodes[0];
        while let Some(len) = n.engine.poll_transmit(&mut n.mem, b.net.now, &mut buf) {
            out.push(buf[..len].to_vec());
        }
    }
    assert_eq!(out.len(), 4);
    // The last two swap; the third comes only after twice the hold.
    let now = b.net.now;
    let to = &mut b.net.nodes[1];
    for p in [&out[0], &out[1], &out[3]] {
        to.engine.handle_packet(p, &mut to.mem, now);
    }
    assert_eq!(to.engine.counters().reorder.held, 1);
    let late = now.plus_ns(2 * DEFAULT_REORDER_HOLD_NS);
    assert!(to.engine.poll_timeout().is_some_and(|t| t <= late));
    to.engine.handle_timeout(late);
    to.engine.handle_packet(&out[2], &mut to.mem, late);
    b.net.now = late;
    let got = finish(&mut b, 1, &mut |_, _| {});
    assert_eq!(got, [(1, WcStatus::Success)]);
    assert_eq!(
        bytes(&b.net, 1, B_MEM, 4 * PMTU as usize),
        bytes(&b.net, 0, A_MEM, 4 * PMTU as usize)
    );
    let resp = b.net.nodes[1].engine.counters();
    assert_eq!(resp.naks_sent, 0);
    assert_eq!((resp.reorder.in_order, resp.reorder.expired), (1, 0));
}

/// The hold is bounded per engine, not per QP: with 17 QPs each missing
/// its first packet, 16 second packets are held (`REORDER_HOLD_SLOTS`) and
/// the 17th is processed at once (a sequence NAK, RL-03, counted as
/// `full`). When the first packets come, the 16 held go in order, and every
/// WRITE completes byte-exact.
/// Node 0 receives from peers 1.. (`qps[p - 1]` QPs of peer `p`, in
/// order), each QP a two-packet WRITE whose second packet arrives first:
/// every peer's second packets, peer by peer, then every first packet.
/// Returns the bench, the pairs by peer, and node 0's reorder counters
/// right after (before anything is sent back).
fn seconds_first(qps: &[usize]) -> (Net, Vec<Vec<Pair>>, ReorderCounters) {
    let limits = Limits {
        reorder_hold_ns: DEFAULT_REORDER_HOLD_NS,
        ..Limits::default()
    };
    let mut net = Net::with_limits(1 + qps.len(), 1 << 20, 7, limits);
    let k0 = net.reg_all(0, ALL_ACCESS);
    let o = ConnOpts {
        timeout: 14,
        ..ConnOpts::default()
    };
    let mut pairs = Vec::new();
    let mut out = Vec::new();
    for (i, &n) in qps.iter().enumerate() {
        let peer = i + 1;
        let k = net.reg_all(peer, ALL_ACCESS);
        fill(&mut net, peer, A_MEM, 64 * 1024, 0x30 + peer as u8);
        let ps: Vec<Pair> = (0..n).map(|_| connect(&mut net, peer, 0, &o)).collect();
        for (j, p) in ps.iter().enumerate() {
            let off = j as u64 * 2 * u64::from(PMTU);
            let mut w = send_wr(j as u64, WrOpcode::RdmaWrite, sge(A_MEM + off, 2 * PMTU, k));
            w.rkey = k0;
            w.remote_addr = peer_dst(peer) + off;
            net.nodes[peer].engine.post_send(p.qa, w).unwrap();
        }
        out.extend(take_sent(&mut net, peer));
        pairs.push(ps);
    }
    let total: usize = qps.iter().sum();
    assert_eq!(out.len(), 2 * total);
    let (firsts, seconds): (Vec<_>, Vec<_>) = out.into_iter().partition(|p| psn_of(p) == o.psn_a);
    let now = net.now;
    let to = &mut net.nodes[0];
    for p in seconds.iter().chain(&firsts) {
        to.engine.handle_packet(p, &mut to.mem, now);
    }
    let c = to.engine.counters().reorder.clone();
    (net, pairs, c)
}

/// Where peer `peer`'s WRITEs land on node 0.
fn peer_dst(peer: usize) -> u64 {
    B_MEM + peer as u64 * 0x1_0000
}

/// Runs until every WRITE completed; returns the go-backs each peer's QPs
/// made (a sequence NAK each: their second packet was not held).
fn go_backs(net: &mut Net, pairs: &[Vec<Pair>]) -> Vec<u64> {
    for ps in pairs {
        for p in ps {
            assert_eq!(wait_cqe(net, p.a, p.cq_a).status, WcStatus::Success);
        }
    }
    (1..=pairs.len())
        .map(|n| net.nodes[n].engine.counters().seq_nak_go_backs)
        .collect()
}

/// The hold is bounded per engine: two peers each fill the half of the
/// slots one peer may take (`REORDER_PEER_SLOTS`), and a third peer's
/// packet one PSN ahead is processed at once (`full`) and NAKed; so is
/// each of the first two's one over its half.
#[test]
fn the_hold_is_bounded_per_engine() {
    use transport::engine::{REORDER_HOLD_SLOTS, REORDER_PEER_SLOTS};
    let half = REORDER_PEER_SLOTS;
    assert_eq!(2 * half, REORDER_HOLD_SLOTS);
    let (mut net, pairs, c) = seconds_first(&[half + 1, half + 1, 1]);
    assert_eq!((c.held, c.full), (REORDER_HOLD_SLOTS as u64, 3));
    assert_eq!(c.in_order, REORDER_HOLD_SLOTS as u64);
    assert_eq!(go_backs(&mut net, &pairs), [1, 1, 1]);
}

/// Issue 25 item 6: one peer cannot take the whole hold. A peer with more
/// QPs than there are slots gets `REORDER_PEER_SLOTS` held, the rest
/// processed at once; another peer's packet is still held and its swap
/// costs no sequence NAK.
#[test]
fn one_peer_cannot_take_every_slot_of_the_hold() {
    use transport::engine::{REORDER_HOLD_SLOTS, REORDER_PEER_SLOTS};
    let many = REORDER_HOLD_SLOTS + 1;
    let (mut net, pairs, c) = seconds_first(&[many, 1]);
    let held = REORDER_PEER_SLOTS as u64;
    assert_eq!((c.held, c.in_order), (held + 1, held + 1), "{c:?}");
    assert_eq!(c.full, many as u64 - held);
    assert_eq!(go_backs(&mut net, &pairs), [many as u64 - held, 0]);
    let len = 2 * PMTU as usize;
    assert_eq!(bytes(&net, 0, peer_dst(2), len), bytes(&net, 2, A_MEM, len));
    let len = many * 2 * PMTU as usize;
    assert_eq!(bytes(&net, 0, peer_dst(1), len), bytes(&net, 1, A_MEM, len));
}

/// `n` WRITEs of four packets on the bench's pair, one after the other,
/// each losing the first transmission of its second packet; `next` and
/// `id` are the next PSN and WR id, moved on.
fn lossy_writes(b: &mut Bench, n: usize, next: &mut u32, id: &mut u64) {
    for _ in 0..n {
        let lost = psn::add(*next, 1);
        let mut gone = false;
        post_write(b, *id, 0, 4 * PMTU);
        let got = finish(b, 1, &mut |from, out| {
            if from == 0 && !gone {
                let before = out.len();
                out.retain(|p| psn_of(p) != lost);
                gone = out.len() != before;
            }
        });
        assert_eq!(got, [(*id, WcStatus::Success)]);
        assert_eq!(
            bytes(&b.net, 1, B_MEM, 4 * PMTU as usize),
            bytes(&b.net, 0, A_MEM, 4 * PMTU as usize)
        );
        *next = psn::add(*next, 4);
        *id += 1;
    }
}

/// A path that loses packets but does not reorder them: after `MISS_LIMIT`
/// holds in a row that ended otherwise than in order (each lost packet's
/// successor was overtaken by the next), most candidates are processed at
/// once (`skipped`), so loss does not pay a packet time per NAK. Every
/// loss is still NAKed and the data byte-exact. When the path reorders
/// again, the one candidate in `PROBE_EVERY` still held ends in order and
/// holding resumes: the next swap costs no NAK.
#[test]
fn a_path_that_only_loses_mostly_skips_the_hold_until_it_reorders() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    // Phase 1: WRITEs of four packets, one after the other, each losing the
    // first transmission of its second packet.
    let mut next = b.o.psn_a;
    let mut id = 1;
    let losses = transport::engine::REORDER_MISS_LIMIT as usize + 4;
    lossy_writes(&mut b, losses, &mut next, &mut id);
    let c = b.net.nodes[1].engine.counters().clone();
    assert_eq!(c.naks_sent, losses as u64, "every loss NAKed (RL-03)");
    assert_eq!(c.reorder.in_order, 0);
    assert_eq!(
        (c.reorder.held, c.reorder.skipped),
        (u64::from(transport::engine::REORDER_MISS_LIMIT), 4),
        "{:?}",
        c.reorder
    );
    // Phase 2: WRITEs of four packets whose middle two swap, until a hold
    // ends in order (at most PROBE_EVERY of them); then one more swap is
    // held too.
    let swapped_write = |b: &mut Bench, next: &mut u32, id: &mut u64| {
        let mut swap = swap_at(psn::add(*next, 1));
        post_write(b, *id, 0, 4 * PMTU);
        let got = finish(b, 1, &mut |from, out| {
            if from == 0 {
                swap(out)
            }
        });
        assert_eq!(got, [(*id, WcStatus::Success)]);
        *next = psn::add(*next, 4);
        *id += 1;
    };
    let in_order = |b: &Bench| b.net.nodes[1].engine.counters().reorder.in_order;
    for _ in 0..transport::engine::REORDER_PROBE_EVERY {
        swapped_write(&mut b, &mut next, &mut id);
        if in_order(&b) == 1 {
            break;
        }
    }
    assert_eq!(in_order(&b), 1, "a probe hold ended in order");
    let naks = b.net.nodes[1].engine.counters().naks_sent;
    swapped_write(&mut b, &mut next, &mut id);
    assert_eq!(in_order(&b), 2);
    assert_eq!(b.net.nodes[1].engine.counters().naks_sent, naks, "no NAK");
    assert_eq!(
        bytes(&b.net, 1, B_MEM, 4 * PMTU as usize),
        bytes(&b.net, 0, A_MEM, 4 * PMTU as usize)
    );
}

/// Issue 25 item 6: the hold's record of misses is each QP's. One QP's
/// path only loses, past `MISS_LIMIT` holds (it now mostly skips the
/// hold); another QP between the same nodes (another peer QP, as a peer
/// node's would be) swaps two packets: its first swap is still held and
/// costs no sequence NAK.
#[test]
fn a_lossy_qp_does_not_switch_the_hold_off_for_another() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    let other = connect(&mut b.net, 0, 1, &b.o);
    let mut next = b.o.psn_a;
    let mut id = 1;
    let losses = transport::engine::REORDER_MISS_LIMIT as usize + 4;
    lossy_writes(&mut b, losses, &mut next, &mut id);
    let c = b.net.nodes[1].engine.counters().clone();
    assert_eq!(c.reorder.skipped, 4, "the lossy QP skips: {:?}", c.reorder);
    // The other QP: a WRITE of four packets whose middle two swap.
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(A_MEM, 4 * PMTU, b.ka));
    w.rkey = b.kb;
    w.remote_addr = B_MEM + 0x8000;
    b.net.nodes[0].engine.post_send(other.qa, w).unwrap();
    let mut swap = swap_at(psn::add(b.o.psn_a, 1));
    let mut got = Vec::new();
    pump(
        &mut b.net,
        &mut |from, out| {
            if from == 0 {
                swap(out)
            }
        },
        20_000,
        |net| {
            while let Some(c) = net.poll(0, other.cq_a) {
                got.push((c.wr_id, c.status));
            }
            !got.is_empty()
        },
    );
    assert_eq!(got, [(id, WcStatus::Success)]);
    let after = b.net.nodes[1].engine.counters().clone();
    assert_eq!(after.reorder.in_order, 1, "{:?}", after.reorder);
    assert_eq!(after.reorder.skipped, c.reorder.skipped);
    assert_eq!(after.naks_sent, c.naks_sent, "no sequence NAK");
    assert_eq!(
        bytes(&b.net, 1, B_MEM + 0x8000, 4 * PMTU as usize),
        bytes(&b.net, 0, A_MEM, 4 * PMTU as usize)
    );
}

/// Issue 25 item 6: a QP moved to Reset drops what the hold kept for it
/// (`forget`, as on destroy): the packet belonged to the connection being
/// reset and is neither processed nor left waiting for its expiry.
#[test]
fn a_reset_qp_forgets_its_held_packet() {
    let mut b = bench(DEFAULT_REORDER_HOLD_NS);
    post_write(&mut b, 1, 0, 4 * PMTU);
    let out = take_sent(&mut b.net, 0);
    let ahead = out
        .iter()
        .find(|p| psn_of(p) == psn::add(b.o.psn_a, 1))
        .expect("the second packet")
        .clone();
    let now = b.net.now;
    let n1 = &mut b.net.nodes[1];
    n1.engine.handle_packet(&ahead, &mut n1.mem, now);
    assert_eq!(n1.engine.counters().reorder.held, 1);
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    n1.engine
        .modify_qp(b.p.qb, &reset, AttrMask::STATE, now)
        .unwrap();
    assert_eq!(n1.engine.poll_timeout(), None, "nothing held, no timer");
    let later = now.plus_ns(10 * DEFAULT_REORDER_HOLD_NS);
    let mut buf = vec![0u8; 8192];
    n1.engine.handle_timeout(later);
    while n1
        .engine
        .poll_transmit(&mut n1.mem, later, &mut buf)
        .is_some()
    {}
    let c = n1.engine.counters().clone();
    assert_eq!(c.reorder.expired, 0, "{:?}", c.reorder);
    let dropped: u64 = c.rx_drops.iter().sum();
    assert_eq!(dropped, 0, "the held packet was never processed");
}
