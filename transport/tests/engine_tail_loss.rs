//! A lost tail of RC WRITE packets (issue 14, `engine::recovery`): the tail
//! probe's answer that leaves the tail unacknowledged shows the rest lost,
//! and the requester goes back at once instead of a probe timeout later.

mod common;

use common::loss::{lose_when, loss_pair};
use common::*;
use transport::psn;
use transport::verbs::WcStatus;

const PMTU: u32 = 1024;
const FLOOR_NS: u64 = 1_000_000;

/// A WRITE of four packets whose last one (the only one asking for an ACK)
/// is lost once: the responder has the first three and sends nothing. A
/// probe timeout later the requester probes the oldest packet; the
/// responder answers the duplicate with its newest PSN, the third (RL-04),
/// short of the tail: the fourth was lost and goes again at once.
#[test]
fn a_probe_answer_short_of_the_tail_goes_back_at_once() {
    let (mut net, p, o, ka, kb) = loss_pair(59, Some(FLOOR_NS));
    let (src, dst) = (MEM_BASE, MEM_BASE + 0x4_0000);
    fill(&mut net, 0, src, 4 * PMTU as usize, 0x21);
    // `write_wr` writes from MEM_BASE, `src`.
    let post = |net: &mut Net, id: u64, len: u32| {
        let c = post_wait(net, 0, p.qa, p.cq_a, write_wr(id, ka, len, kb, dst));
        assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
    };
    // A clean one-packet WRITE first: the round trip is measured.
    post(&mut net, 1, PMTU);
    let last = psn::add(o.psn_a, 4);
    let mut lost = false;
    lose_when(&mut net, move |psn, name| {
        let hit = !lost && psn == last && name.contains("WRITE");
        lost |= hit;
        hit
    });
    let t0 = net.now;
    post(&mut net, 2, 4 * PMTU);
    assert_eq!(net.dropped, 1);
    assert_eq!(
        bytes(&net, 1, dst, 4 * PMTU as usize),
        bytes(&net, 0, src, 4 * PMTU as usize)
    );
    let took = net.now.0 - t0.0;
    assert!(
        took < FLOOR_NS + FLOOR_NS / 2,
        "done {took} ns after posting: one probe timeout and a round trip, not two"
    );
    assert_eq!(net.nodes[0].engine.counters().probe_go_backs, 1);
}
