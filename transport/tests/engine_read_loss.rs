//! READ under loss (issue 14, `engine::recovery`): how soon a requester asks
//! again for READ responses that were lost, without waiting for a probe
//! timeout. Two engines on the simulated fabric with targeted drops.

mod common;

use common::loss::{lose_when, loss_pair};
use common::*;
use transport::psn;
use transport::verbs::{Completion, WcStatus, WrOpcode};
use transport::wire::PacketRepr;

const PMTU: u32 = 1024;
const SRC: u64 = MEM_BASE + 0x2_0000; // on node 1
const DST: u64 = MEM_BASE + 0x4_0000; // on node 0

/// PSNs of the READ requests sniffed, in wire order.
fn read_requests(net: &Net) -> Vec<u32> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| {
            let t = PacketRepr::parse(b).ok()?.transport;
            t.bth
                .opcode
                .info()
                .name
                .contains("READ_REQUEST")
                .then_some(t.bth.psn)
        })
        .collect()
}

fn read(net: &mut Net, p: &Pair, ka: u32, kb: u32, id: u64, len: u32) {
    let mut r = send_wr(id, WrOpcode::RdmaRead, sge(DST, len, ka));
    r.rkey = kb;
    r.remote_addr = SRC;
    let c = post_wait(net, 0, p.qa, p.cq_a, r);
    assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
    assert_eq!(
        bytes(net, 0, DST, len as usize),
        bytes(net, 1, SRC, len as usize),
        "READ data byte-exact"
    );
}

/// Posts READs 2 and 3 of four responses each (the first and the second
/// half of SRC to DST) and runs the bench until both complete; the data
/// must have arrived byte-exact. Their completions.
fn two_reads(net: &mut Net, p: &Pair, ka: u32, kb: u32) -> Vec<Completion> {
    for (id, off) in [(2u64, 0u64), (3, 4)] {
        let mut r = send_wr(
            id,
            WrOpcode::RdmaRead,
            sge(DST + off * u64::from(PMTU), 4 * PMTU, ka),
        );
        r.rkey = kb;
        r.remote_addr = SRC + off * u64::from(PMTU);
        net.nodes[0].engine.post_send(p.qa, r).unwrap();
    }
    let c = wait(net, 0, p.cq_a, 2);
    assert_eq!(
        bytes(net, 0, DST, 8 * PMTU as usize),
        bytes(net, 1, SRC, 8 * PMTU as usize),
        "byte-exact"
    );
    c
}

/// The requester never waited for a probe timeout.
fn assert_no_probe(net: &Net) {
    assert_eq!(
        net.nodes[0].engine.counters().probes,
        0,
        "no probe timeout waited for"
    );
}

/// A READ of eight responses whose first response is lost, and lost again
/// in the answer to the re-request. The re-request's responses start over
/// at the READ's first PSN (RL-05), so its second response repeats a PSN
/// the requester saw since it asked again: the stream restarted without its
/// first response, and the requester asks again at once. Before, it took
/// that response for more of the old stream and waited for a probe.
#[test]
fn a_re_request_whose_first_response_is_lost_is_asked_again_without_a_probe() {
    let (mut net, p, o, ka, kb) = loss_pair(41, None);
    fill(&mut net, 1, SRC, 8 * PMTU as usize, 0x3c);
    // A clean READ first: the requester measures the round trip.
    read(&mut net, &p, ka, kb, 1, PMTU);
    let first = psn::add(o.psn_a, 1);
    let mut lost = 0;
    lose_when(&mut net, move |psn, name| {
        let hit = lost < 2 && psn == first && name.contains("READ_RESPONSE");
        lost += u32::from(hit);
        hit
    });
    net.sniffed = Some(Vec::new());
    read(&mut net, &p, ka, kb, 2, 8 * PMTU);
    assert_eq!(net.dropped, 2, "the first response, twice");
    assert_eq!(
        read_requests(&net),
        vec![first, first, first],
        "the READ, its re-request, and the re-request again"
    );
    assert_no_probe(&net);
}

/// Two READs of four responses in flight: the first one's last response and
/// the second one's first are lost. The second one's next response shows
/// both gaps at once (responses come in PSN order, C9-27): the go-back
/// starts at the older READ's missing response, not at the newer one's,
/// else the older one waited for a probe.
#[test]
fn a_gap_seen_in_a_later_read_goes_back_to_an_older_reads_missing_response() {
    let (mut net, p, o, ka, kb) = loss_pair(43, None);
    fill(&mut net, 1, SRC, 8 * PMTU as usize, 0x5c);
    read(&mut net, &p, ka, kb, 1, PMTU);
    // READ 2 takes PSNs first..first+3, READ 3 the four after.
    let first = psn::add(o.psn_a, 1);
    let (a3, b0) = (psn::add(first, 3), psn::add(first, 4));
    let mut lost = Vec::new();
    lose_when(&mut net, move |psn, name| {
        let hit = [a3, b0].contains(&psn) && !lost.contains(&psn) && name.contains("READ_RESPONSE");
        if hit {
            lost.push(psn);
        }
        hit
    });
    net.sniffed = Some(Vec::new());
    let c = two_reads(&mut net, &p, ka, kb);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(2, WcStatus::Success), (3, WcStatus::Success)],
        "in post order"
    );
    assert_eq!(net.dropped, 2);
    let reqs = read_requests(&net);
    assert_eq!(reqs[..3], [first, b0, a3], "{reqs:x?}");
    assert_no_probe(&net);
}

/// Two READs of four responses: the first one's last two are lost, the
/// second one's all arrive and show the gap (C9-27) after the old stream
/// has passed it. The re-request's answer loses its first response (the
/// third of the READ) again; its next one lies before the response that
/// showed the gap, so it is the responder's new stream, and the requester
/// asks again at once instead of waiting for a probe.
#[test]
fn a_re_request_answered_after_the_old_stream_ended_is_asked_again_at_once() {
    let (mut net, p, o, ka, kb) = loss_pair(47, None);
    fill(&mut net, 1, SRC, 8 * PMTU as usize, 0x6e);
    read(&mut net, &p, ka, kb, 1, PMTU);
    let first = psn::add(o.psn_a, 1);
    let (a2, a3) = (psn::add(first, 2), psn::add(first, 3));
    let mut lost = Vec::new();
    lose_when(&mut net, move |psn, name| {
        let times = lost.iter().filter(|&&q| q == psn).count();
        let hit = name.contains("READ_RESPONSE")
            && ((psn == a2 && times < 2) || (psn == a3 && times < 1));
        if hit {
            lost.push(psn);
        }
        hit
    });
    net.sniffed = Some(Vec::new());
    let c = two_reads(&mut net, &p, ka, kb);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(net.dropped, 3);
    let reqs = read_requests(&net);
    assert_eq!(reqs[..3], [first, psn::add(first, 4), a2], "{reqs:x?}");
    assert_eq!(
        reqs.iter().filter(|&&r| r == a2).count(),
        2,
        "asked again for the lost part: {reqs:x?}"
    );
    assert_no_probe(&net);
}

/// Two READs of four responses; the first one's second response is lost,
/// the third shows the gap, and the re-request for the rest is lost too.
/// The old stream runs to the last PSN asked for (the responder never saw
/// the re-request that would have stopped it), and nothing else comes: the
/// re-request goes again a probe timeout without the floor after the first
/// one, well before the floor (1 ms here).
#[test]
fn a_lost_re_request_is_sent_again_soon_after_the_old_stream_ends() {
    let (mut net, p, o, ka, kb) = loss_pair(53, Some(1_000_000));
    fill(&mut net, 1, SRC, 8 * PMTU as usize, 0x7f);
    read(&mut net, &p, ka, kb, 1, PMTU);
    let first = psn::add(o.psn_a, 1);
    let a1 = psn::add(first, 1);
    let (mut resp_lost, mut req_lost) = (false, false);
    lose_when(&mut net, move |psn, name| {
        if psn != a1 {
            return false;
        }
        if name.contains("READ_RESPONSE") && !resp_lost {
            resp_lost = true;
            return true;
        }
        if name.contains("READ_REQUEST") && !req_lost {
            req_lost = true;
            return true;
        }
        false
    });
    net.sniffed = Some(Vec::new());
    let t0 = net.now;
    let c = two_reads(&mut net, &p, ka, kb);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(net.dropped, 2);
    let reqs = read_requests(&net);
    assert_eq!(reqs.iter().filter(|&&r| r == a1).count(), 2, "{reqs:x?}");
    let took = net.now.0 - t0.0;
    assert!(
        took < 500_000,
        "done {took} ns after posting, not a floor later"
    );
}

/// A READ of eight responses whose third is lost once: the fourth shows the
/// gap and the requester asks again for the rest (RL-14); the old stream's
/// fifth to eighth responses, already on the wire, carry data the answer
/// brings again (it starts over at the gap, RL-05) and are dropped, each
/// counted as such (every drop has its counter), not silently.
#[test]
fn old_stream_read_responses_after_a_gap_are_dropped_and_counted() {
    use transport::engine::RxDrop;
    let (mut net, p, o, ka, kb) = loss_pair(61, None);
    fill(&mut net, 1, SRC, 8 * PMTU as usize, 0x6d);
    read(&mut net, &p, ka, kb, 1, PMTU);
    let third = psn::add(o.psn_a, 3);
    let mut lost = false;
    lose_when(&mut net, move |psn, name| {
        let hit = !lost && psn == third && name.contains("READ_RESPONSE");
        lost |= hit;
        hit
    });
    let before = net.nodes[0]
        .engine
        .counters()
        .dropped(RxDrop::ReadResponseAfterGap);
    read(&mut net, &p, ka, kb, 2, 8 * PMTU);
    assert_eq!(net.dropped, 1);
    let c = net.nodes[0].engine.counters();
    assert_eq!(
        c.dropped(RxDrop::ReadResponseAfterGap) - before,
        4,
        "the old stream's fifth to eighth responses: {c:?}"
    );
    assert_no_probe(&net);
}
