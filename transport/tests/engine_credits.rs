//! RL-13: end-to-end credits (IBA 9.7.7.2; seed 000 9.3.5.1, seed 004
//! §2.6.2). The responder reports the receive WQEs of its receive queue in
//! every ACK's AETH (an SRQ: code 31, no count); the requester starts no SEND
//! beyond them, at zero credits sends one alone, and goes on when an ACK
//! brings credits (an unsolicited duplicate of the last ACK when a WQE is
//! posted after a zero count, which also ends an RNR wait). Asserted on the
//! wire.

mod common;

use common::*;
use transport::psn;
use transport::verbs::{RecvWr, Time, WcOpcode, WcStatus, WrOpcode};
use transport::wire::{AethSyndrome, PacketRepr};

const MSG: u32 = 64;

/// What the wire carried: (DestQP, PSN, opcode name, AETH syndrome). Each
/// test has one pair whose two QPs may have the same number (on two nodes):
/// requests and responses are told apart by opcode.
fn wire(net: &Net) -> Vec<(u32, u32, String, Option<AethSyndrome>)> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| {
            let t = PacketRepr::parse(b).ok()?.transport;
            Some((
                t.bth.dest_qp,
                t.bth.psn,
                t.bth.opcode.info().name.to_string(),
                t.ext.aeth.map(|a| a.syndrome),
            ))
        })
        .collect()
}

/// PSNs of the SEND requests on the wire.
fn sends(net: &Net) -> Vec<u32> {
    wire(net)
        .into_iter()
        .filter(|w| w.2.contains("SEND"))
        .map(|w| w.1)
        .collect()
}

/// (PSN, credits) of the ACKs on the wire; credits `None` for code 31.
fn acks(net: &Net) -> Vec<(u32, Option<u32>)> {
    wire(net)
        .into_iter()
        .filter(|w| w.2 == "RC_ACKNOWLEDGE")
        .filter_map(|w| match w.3 {
            Some(s @ AethSyndrome::Ack { .. }) => Some((w.1, s.credits())),
            _ => None,
        })
        .collect()
}

fn post_recvs(net: &mut Net, qp: u32, kb: u32, ids: std::ops::Range<u64>) {
    for id in ids {
        net.nodes[1]
            .engine
            .post_recv(
                qp,
                RecvWr {
                    wr_id: id,
                    sges: sge(MEM_BASE + 0x8000 + id * 0x100, MSG, kb),
                },
            )
            .unwrap();
    }
}

fn post_sends(net: &mut Net, qp: u32, ka: u32, ids: std::ops::Range<u64>) {
    for id in ids {
        let s = send_wr(id, WrOpcode::Send, sge(MEM_BASE + id * 0x100, MSG, ka));
        net.nodes[0].engine.post_send(qp, s).unwrap();
    }
}

/// Runs the bench until its clock reaches `until` and stops there: when it
/// jumps to a timer at or after `until` (the jump fires nothing, the next
/// step would), the clock is set back to just before `until`.
fn run_before(net: &mut Net, until: Time) {
    for _ in 0..1_000_000 {
        if !net.step() {
            return;
        }
        if net.now >= until {
            net.now = Time(until.0 - 1);
            return;
        }
    }
}

/// A connected pair (options `o`) whose responder has 4 receive WQEs, after
/// one SEND: its ACK reported the 3 left. Returns the net, pair and keys.
fn primed(seed: u64, o: &ConnOpts) -> (Net, Pair, u32, u32) {
    let mut net = Net::new(2, 1 << 20, seed);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, o);
    for i in 0..16 {
        fill(&mut net, 0, MEM_BASE + i * 0x100, MSG as usize, i as u8);
    }
    post_recvs(&mut net, p.qb, kb, 0..4);
    net.sniffed = Some(Vec::new());
    post_sends(&mut net, p.qa, ka, 0..1);
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    assert_eq!(wait(&mut net, 1, p.cq_b, 1)[0].opcode, WcOpcode::Recv);
    assert_eq!(acks(&net), vec![(o.psn_a, Some(3))]);
    (net, p, ka, kb)
}

/// Index on the wire of the first packet matching `f`.
fn at(
    w: &[(u32, u32, String, Option<AethSyndrome>)],
    f: impl Fn(&(u32, u32, String, Option<AethSyndrome>)) -> bool,
) -> usize {
    w.iter()
        .position(f)
        .unwrap_or_else(|| panic!("not on the wire: {w:?}"))
}

#[test]
fn rl_13_the_requester_keeps_to_the_credits_and_a_posted_wqe_ends_the_wait() {
    // The longest RNR timer (655.36 ms): only the credit update can end the
    // wait early.
    let o = ConnOpts {
        min_rnr_timer: 0,
        ..ConnOpts::default()
    };
    let (mut net, p, ka, kb) = primed(41, &o);
    let first = o.psn_a;
    let psn = |k| psn::add(first, k);
    // Five more SENDs on three credits: three go; the fourth only once they
    // are acknowledged (the ACK says 0), alone; the fifth waits.
    post_sends(&mut net, p.qa, ka, 1..6);
    let c = wait(&mut net, 0, p.cq_a, 3);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    let t0 = net.now;
    run_before(&mut net, t0.plus_ns(300_000));
    assert_eq!(sends(&net), (0..5).map(psn).collect::<Vec<_>>());
    let w = wire(&net);
    let zero = at(&w, |x| x.2 == "RC_ACKNOWLEDGE" && x.1 == psn(3));
    assert_eq!(w[zero].3.and_then(|s| s.credits()), Some(0));
    assert!(
        at(&w, |x| x.2.contains("SEND") && x.1 == psn(4)) > zero,
        "{w:?}"
    );
    assert!(net.nodes[0].engine.counters().credit_waits > 0);
    assert_eq!(net.nodes[0].engine.counters().credit_probes, 1);
    // The one sent alone found no WQE: one RNR NAK.
    assert_eq!(net.nodes[1].engine.counters().rnr_naks_sent, 1);
    // Two WQEs posted: an unsolicited ACK (the last one again) with 2
    // credits ends the RNR wait; both SENDs go and complete at once.
    let t1 = net.now;
    post_recvs(&mut net, p.qb, kb, 4..6);
    let c = wait(&mut net, 0, p.cq_a, 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    assert!(net.now.0 - t1.0 < 1_000_000, "{:?} {t1:?}", net.now);
    let w = wire(&net);
    let upd = at(&w, |x| {
        x.2 == "RC_ACKNOWLEDGE" && x.1 == psn(3) && x.3.and_then(|s| s.credits()) == Some(2)
    });
    let s = sends(&net);
    assert_eq!(s[5..], [psn(4), psn(5)], "{s:x?}");
    let resent = w
        .iter()
        .enumerate()
        .filter(|(_, x)| x.2.contains("SEND") && x.1 == psn(4))
        .map(|(i, _)| i)
        .nth(1)
        .unwrap();
    assert!(upd < resent, "{w:?}");
    let rc = net.nodes[1].engine.counters();
    assert_eq!((rc.rnr_naks_sent, rc.credit_acks_sent), (1, 1));
    let r = wait(&mut net, 1, p.cq_b, 5);
    for (k, c) in r.iter().enumerate() {
        let id = k as u64 + 1;
        assert_eq!((c.wr_id, c.byte_len), (id, MSG));
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x8000 + id * 0x100, MSG as usize),
            bytes(&net, 0, MEM_BASE + id * 0x100, MSG as usize)
        );
    }
}

#[test]
fn rl_13_a_lost_credit_update_leaves_the_rnr_timer_to_resume() {
    // RNR timer code 14: 1.28 ms.
    let o = ConnOpts {
        min_rnr_timer: 14,
        ..ConnOpts::default()
    };
    let (mut net, p, ka, kb) = primed(42, &o);
    let first = o.psn_a;
    post_sends(&mut net, p.qa, ka, 1..5); // three credits, four SENDs
    wait(&mut net, 0, p.cq_a, 3);
    let t0 = net.now;
    run_before(&mut net, t0.plus_ns(100_000));
    assert_eq!(net.nodes[1].engine.counters().rnr_naks_sent, 1);
    // The update is lost: the SEND goes again when its RNR timer ends and
    // finds the WQE posted meanwhile.
    let last_ack = psn::add(first, 3);
    net.lose = Some(Box::new(move |b: &[u8]| {
        PacketRepr::parse(b).is_ok_and(|pk| {
            let t = pk.transport;
            t.bth.psn == last_ack && t.bth.opcode.info().name == "RC_ACKNOWLEDGE"
        })
    }));
    post_recvs(&mut net, p.qb, kb, 4..5);
    let c = wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].engine.counters().credit_acks_sent, 1);
    assert_eq!(net.dropped, 1, "the credit update was lost");
    assert!(net.now.0 - t0.0 >= 1_280_000, "{:?} {t0:?}", net.now);
    assert_eq!(net.nodes[1].engine.counters().rnr_naks_sent, 1);
    assert_eq!(sends(&net).len(), 6);
}

#[test]
fn rl_13_a_responder_on_an_srq_reports_no_credit_count_and_the_requester_is_not_held() {
    let mut net = Net::new(2, 1 << 20, 43);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pd = net.nodes[1].pd;
    let srq = net.nodes[1].engine.create_srq(pd, 64, 4, 0).expect("srq");
    let o = ConnOpts {
        srq: [None, Some(srq)],
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    for id in 0..2 {
        net.nodes[1]
            .engine
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: id,
                    sges: sge(MEM_BASE + 0x8000 + id * 0x100, MSG, kb),
                },
            )
            .unwrap();
    }
    net.sniffed = Some(Vec::new());
    post_sends(&mut net, p.qa, ka, 0..2);
    let c = wait(&mut net, 0, p.cq_a, 2);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    let got = acks(&net);
    assert!(
        !got.is_empty() && got.iter().all(|a| a.1.is_none()),
        "{got:?}"
    );
    // Both SENDs went at once, without waiting for an ACK between them.
    let w = wire(&net);
    let first_ack = w.iter().position(|x| x.2 == "RC_ACKNOWLEDGE").unwrap();
    let sends: Vec<usize> = w
        .iter()
        .enumerate()
        .filter(|(_, x)| x.2.contains("SEND"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(sends.len(), 2);
    assert!(sends[1] < first_ack, "{w:?}");
}

#[test]
fn rl_13_with_credits_off_acks_carry_no_count_and_nothing_is_held() {
    let limits = transport::engine::Limits {
        credits: false,
        ..Default::default()
    };
    let mut net = Net::with_limits(2, 1 << 20, 44, limits);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    post_recvs(&mut net, p.qb, kb, 0..1);
    net.sniffed = Some(Vec::new());
    post_sends(&mut net, p.qa, ka, 0..1);
    wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(acks(&net), vec![(ConnOpts::default().psn_a, None)]);
    // No WQE left: the next SEND goes at once and meets an RNR NAK (RL-11).
    post_sends(&mut net, p.qa, ka, 1..2);
    let t0 = net.now;
    run_before(&mut net, t0.plus_ns(100_000));
    // Sent, and resent after each RNR wait (10 us).
    let first = ConnOpts::default().psn_a;
    let s = sends(&net);
    assert!(
        s.len() > 2 && s[1..].iter().all(|&x| x == psn::add(first, 1)),
        "{s:x?}"
    );
    assert!(net.nodes[1].engine.counters().rnr_naks_sent >= 1);
    assert_eq!(net.nodes[0].engine.counters().credit_waits, 0);
}

#[test]
fn rl_13_an_update_of_one_credit_ends_the_rnr_wait_of_the_message_it_covers() {
    let o = ConnOpts {
        min_rnr_timer: 0, // 655.36 ms
        ..ConnOpts::default()
    };
    let (mut net, p, ka, kb) = primed(45, &o);
    post_sends(&mut net, p.qa, ka, 1..5); // three credits, four SENDs
    wait(&mut net, 0, p.cq_a, 3);
    let t0 = net.now;
    run_before(&mut net, t0.plus_ns(100_000));
    assert_eq!(net.nodes[1].engine.counters().rnr_naks_sent, 1);
    // One WQE: the update (1 credit) covers exactly the NAKed SEND.
    post_recvs(&mut net, p.qb, kb, 4..5);
    let t1 = net.now;
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    assert!(net.now.0 - t1.0 < 1_000_000, "{:?} {t1:?}", net.now);
    let got = acks(&net);
    assert!(
        got.contains(&(psn::add(o.psn_a, 3), Some(1))),
        "no update: {got:?}"
    );
    assert_eq!(net.nodes[1].engine.counters().rnr_naks_sent, 1);
}
