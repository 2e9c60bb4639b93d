//! ATOMICs under loss (issue 30; `engine::atomic_gap`, `engine::recovery`):
//! how soon a requester asks again for a lost ATOMIC, without ever having it
//! executed twice (RL-06). Two engines on the simulated fabric, 10 us apart,
//! with targeted drops; what is asserted is what the fabric carries.

mod common;

use common::loss::lose_first;
use common::*;
use transport::engine::Limits;
use transport::psn;
use transport::verbs::{WcStatus, WrOpcode};
use transport::wire::PacketRepr;

/// The counter, in node 1's memory.
const COUNTER: u64 = MEM_BASE + 0x1_0000;
/// The fetched values, 8 bytes per operation, in node 0's memory.
const RESULTS: u64 = MEM_BASE + 0x2_0000;

/// Two nodes 10 us apart, an RC pair with `depth` READ/ATOMICs outstanding,
/// ACK timeout 14 (67 ms), probe floor `floor_ns`, loss probes `probes`:
/// (bench, pair, its options, node 0's key, node 1's key).
fn pair(depth: u8, floor_ns: u64, probes: bool) -> (Net, Pair, ConnOpts, u32, u32) {
    let limits = Limits {
        min_probe_timeout_ns: floor_ns,
        loss_probes: probes,
        ..Limits::default()
    };
    pair_with(depth, limits)
}

/// [`pair`] with these engine limits.
fn pair_with(depth: u8, limits: Limits) -> (Net, Pair, ConnOpts, u32, u32) {
    let mut net = Net::with_limits(2, 1 << 20, 7, limits);
    net.latency_ns = 10_000;
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts {
        timeout: 14,
        max_rd_atomic: depth,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    (net, p, o, ka, kb)
}

/// Posts FETCH_ADDs of 1 to the counter with ids `ids` (each result in its
/// own slot).
fn post_adds(net: &mut Net, p: &Pair, ka: u32, kb: u32, ids: std::ops::Range<u64>) {
    for id in ids {
        let mut w = send_wr(id, WrOpcode::AtomicFetchAdd, sge(RESULTS + 8 * id, 8, ka));
        w.remote_addr = COUNTER;
        w.rkey = kb;
        w.swap_add = 1;
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
}

/// Runs `n` FETCH_ADDs (ids `ids`) to completion: all succeed, in order.
fn adds(net: &mut Net, p: &Pair, ka: u32, kb: u32, ids: std::ops::Range<u64>) {
    let n = ids.end - ids.start;
    let first = ids.start;
    post_adds(net, p, ka, kb, ids);
    let c = wait(net, 0, p.cq_a, n as usize);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        (first..first + n)
            .map(|i| (i, WcStatus::Success))
            .collect::<Vec<_>>()
    );
}

fn u64_at(net: &Net, node: usize, addr: u64) -> u64 {
    u64::from_le_bytes(bytes(net, node, addr, 8).try_into().unwrap())
}

/// RL-06: the counter equals the operations completed, and the fetched
/// values are 0..n, each once.
fn assert_once(net: &Net, n: u64) {
    assert_eq!(u64_at(net, 1, COUNTER), n, "the counter equals the adds");
    let mut got: Vec<u64> = (0..n).map(|i| u64_at(net, 0, RESULTS + 8 * i)).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        (0..n).collect::<Vec<_>>(),
        "each add fetched its own value"
    );
}

/// The sniffed packets named `what` (an opcode name's part), as PSNs.
fn sniffed(net: &Net, what: &str) -> Vec<u32> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| {
            let t = PacketRepr::parse(b).ok()?.transport;
            t.bth.opcode.info().name.contains(what).then_some(t.bth.psn)
        })
        .collect()
}

/// Sequence NAKs sniffed, as PSNs.
fn seq_naks(net: &Net) -> Vec<u32> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| {
            let t = PacketRepr::parse(b).ok()?.transport;
            let a = t.ext.aeth?;
            matches!(
                a.syndrome,
                transport::wire::ext::AethSyndrome::Nak(
                    transport::wire::ext::NakCode::PsnSequenceError
                )
            )
            .then_some(t.bth.psn)
        })
        .collect()
}

/// Four FETCH_ADDs in flight; the first one's response is lost. The second
/// one's response shows it (responses come in PSN order, C9-27; IBA
/// 9.7.5.1): the requester asks again for that one at once, and only for it
/// (the others' responses are on their way), and the responder answers from
/// its saved result (RL-06). Before, nothing acted on the gap and the
/// requester waited for a probe timeout.
#[test]
fn rl06_a_later_atomic_response_asks_again_at_once_for_only_the_lost_one() {
    let (mut net, p, o, ka, kb) = pair(4, 1_000_000, true);
    adds(&mut net, &p, ka, kb, 0..1); // measures the round trip
    let first = psn::add(o.psn_a, 1);
    lose_first(&mut net, &[(first, "ATOMIC_ACKNOWLEDGE", 1)]);
    net.sniffed = Some(Vec::new());
    let t0 = net.now;
    adds(&mut net, &p, ka, kb, 1..5);
    assert_eq!(net.dropped, 1);
    let reqs = sniffed(&net, "FETCH_ADD");
    let psns: Vec<u32> = (0..4).map(|i| psn::add(first, i)).collect();
    assert_eq!(reqs[..4], psns[..], "{reqs:x?}");
    assert_eq!(reqs[4..], [first], "only the lost one again: {reqs:x?}");
    assert_eq!(
        net.nodes[0].engine.counters().probes,
        0,
        "no probe waited for"
    );
    assert!(
        net.now.0 - t0.0 < 200_000,
        "done within a few round trips, not a probe floor: {} ns",
        net.now.0 - t0.0
    );
    assert_eq!(
        net.nodes[1].engine.counters().duplicates_received,
        1,
        "the responder answered one duplicate"
    );
    assert_once(&net, 5);
}

/// A lost ATOMIC request: the responder NAKs the PSN it expects when the
/// next request comes (RL-03), twice, as after a SEND or WRITE (one lost NAK
/// would leave the requester only a probe timeout: the responder drops all
/// else silently). The go-back sends the NAKed ATOMIC twice too; the copy
/// is a duplicate the responder answers from its saved result (RL-06).
#[test]
fn rl03_a_lost_atomic_request_is_naked_twice_and_resent_twice() {
    let (mut net, p, o, ka, kb) = pair(4, 1_000_000, true);
    adds(&mut net, &p, ka, kb, 0..1);
    let second = psn::add(o.psn_a, 2);
    lose_first(&mut net, &[(second, "FETCH_ADD", 1)]);
    net.sniffed = Some(Vec::new());
    adds(&mut net, &p, ka, kb, 1..5);
    assert_eq!(seq_naks(&net), vec![second, second], "the NAK and its copy");
    let reqs = sniffed(&net, "FETCH_ADD");
    assert_eq!(
        reqs.iter().filter(|&&q| q == second).count(),
        3,
        "the lost one, then two copies: {reqs:x?}"
    );
    assert_eq!(net.nodes[0].engine.counters().probes, 0);
    assert_once(&net, 5);
}

/// The first FETCH_ADD's response and the second one's request are lost:
/// the NAK for the second (RL-03) sends the requester back to the first,
/// whose response is missing (C9-27). The NAKed request is the one the
/// responder waits for, so it goes twice when the go-back reaches it,
/// though the go-back started earlier.
#[test]
fn rl03_the_naked_request_goes_twice_when_the_go_back_starts_before_it() {
    let (mut net, p, o, ka, kb) = pair(4, 1_000_000, true);
    adds(&mut net, &p, ka, kb, 0..1);
    let (first, second) = (psn::add(o.psn_a, 1), psn::add(o.psn_a, 2));
    lose_first(
        &mut net,
        &[(first, "ATOMIC_ACKNOWLEDGE", 1), (second, "FETCH_ADD", 1)],
    );
    net.sniffed = Some(Vec::new());
    adds(&mut net, &p, ka, kb, 1..5);
    assert_eq!(net.dropped, 2);
    let reqs = sniffed(&net, "FETCH_ADD");
    assert_eq!(
        reqs.iter().filter(|&&q| q == second).count(),
        3,
        "the lost one, then two copies: {reqs:x?}"
    );
    assert_once(&net, 5);
}

/// The first FETCH_ADD's response and the third one's request are lost. The
/// second one's response shows the first gap, and the re-request resends
/// the first only; the NAK for the third (RL-03), coming right after, is
/// news, not an echo of that go-back (`Recovery::absorbs_nak`): the
/// requester goes back for it at once instead of waiting for a probe.
/// (Without the receive reorder hold, `engine::reorder`, the NAK and the
/// response that shows the gap come together.)
#[test]
fn rl03_a_nak_after_an_atomic_re_request_is_not_absorbed() {
    let (mut net, p, o, ka, kb) = pair_with(
        4,
        Limits {
            min_probe_timeout_ns: 1_000_000,
            reorder_hold_ns: 0,
            ..Limits::default()
        },
    );
    adds(&mut net, &p, ka, kb, 0..1);
    let (first, third) = (psn::add(o.psn_a, 1), psn::add(o.psn_a, 3));
    lose_first(
        &mut net,
        &[(first, "ATOMIC_ACKNOWLEDGE", 1), (third, "FETCH_ADD", 1)],
    );
    net.sniffed = Some(Vec::new());
    adds(&mut net, &p, ka, kb, 1..5);
    assert_eq!(net.dropped, 2);
    let c = net.nodes[0].engine.counters();
    assert_eq!((c.probes, c.seq_naks_absorbed), (0, 0), "{c:?}");
    assert_once(&net, 5);
}

/// After an ACK timeout the congestion window is at its minimum (8 packets,
/// `recovery`); 16 FETCH_ADDs posted then still all go at once: an ATOMIC
/// is one small packet each way, and the number outstanding is bounded by
/// max_rd_atomic (RL-07), as the window lets a whole READ go.
#[test]
fn rl07_atomics_keep_max_rd_atomic_in_flight_after_a_timeout() {
    let (mut net, p, o, ka, kb) = pair(16, 1_000_000, false);
    let first = psn::add(o.psn_a, 0);
    lose_first(&mut net, &[(first, "FETCH_ADD", 1)]);
    adds(&mut net, &p, ka, kb, 0..1);
    assert_eq!(net.nodes[0].engine.counters().timeouts, 1, "the ACK timer");
    post_adds(&mut net, &p, ka, kb, 1..17);
    let sent = take_sent(&mut net, 0);
    assert_eq!(sent.len(), 16, "max_rd_atomic at once");
}

/// The first of four FETCH_ADDs loses its response, and the re-request's
/// answer (the responder's replay, RL-06) is lost too. The responses of the
/// others came, so the requester knows the replay was due within a round
/// trip (C9-27): it asks again then, not a probe floor (10 ms here) later.
#[test]
fn a_lost_replay_is_asked_for_again_within_a_round_trip_of_the_last_response() {
    let (mut net, p, o, ka, kb) = pair(4, 10_000_000, true);
    adds(&mut net, &p, ka, kb, 0..1);
    let first = psn::add(o.psn_a, 1);
    lose_first(&mut net, &[(first, "ATOMIC_ACKNOWLEDGE", 2)]);
    net.sniffed = Some(Vec::new());
    let t0 = net.now;
    adds(&mut net, &p, ka, kb, 1..5);
    assert_eq!(net.dropped, 2);
    let reqs = sniffed(&net, "FETCH_ADD");
    assert_eq!(
        reqs.iter().filter(|&&q| q == first).count(),
        3,
        "the request, its re-request, and the probe: {reqs:x?}"
    );
    assert!(
        net.now.0 - t0.0 < 1_000_000,
        "done well within the probe floor: {} ns",
        net.now.0 - t0.0
    );
    assert_once(&net, 5);
}

/// As above, and the probe's answer is lost as well. The requester's next
/// probe waits the tail's floor (`recovery`, "A tail's floor": one ATOMIC is
/// missing, the others' responses completed them, so a probe resends one
/// packet), not the bulk floor of the four PSNs since the oldest one.
#[test]
fn a_single_missing_atomic_probes_at_the_tail_floor() {
    let (mut net, p, o, ka, kb) = pair(8, 10_000_000, true);
    adds(&mut net, &p, ka, kb, 0..1);
    let first = psn::add(o.psn_a, 1);
    lose_first(&mut net, &[(first, "ATOMIC_ACKNOWLEDGE", 3)]);
    net.sniffed = Some(Vec::new());
    let t0 = net.now;
    adds(&mut net, &p, ka, kb, 1..9);
    assert_eq!(net.dropped, 3);
    // The tail floor is the floor's eighth (1.25 ms), doubled once.
    assert!(
        net.now.0 - t0.0 < 5_000_000,
        "done within the tail floor, not the bulk floor: {} ns",
        net.now.0 - t0.0
    );
    assert_once(&net, 9);
}

/// RL-06 under a fabric that loses, duplicates and reorders: 400 FETCH_ADDs,
/// 16 outstanding, every one executed exactly once.
#[test]
fn rl06_fetch_adds_execute_once_under_loss_duplication_and_reorder() {
    for seed in 1..=5 {
        let (mut net, p, _o, ka, kb) = pair(16, 1_000_000, true);
        net.rng = Rng::new(seed);
        net.faults = Faults {
            drop: 0.05,
            duplicate: 0.05,
            reorder: 0.05,
            ..Faults::default()
        };
        adds(&mut net, &p, ka, kb, 0..400);
        assert_once(&net, 400);
        assert!(net.nodes[1].engine.counters().duplicates_received > 0);
    }
}
