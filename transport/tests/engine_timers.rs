//! The engine's requester timers at scale (RL-10 local ACK timeout, RL-11 RNR
//! wait): with hundreds of QPs each timer fires at its own deadline, once per
//! retry, whatever the other QPs do, and the next deadline the engine reports is
//! the earliest of them (the device sleeps until it).

mod common;

use common::*;
use transport::engine::Limits;
use transport::verbs::{Access, Sge, WcStatus, WrOpcode};

const A: usize = 0;
const B: usize = 1;
/// More QPs than the debug-build invariant check looks at (64).
const PAIRS: usize = 200;
/// 4.096 us * 2^10: ConnOpts' default timeout.
const TIMEOUT_NS: u64 = 4096 << 10;

/// A node pair with `PAIRS` connected RC QPs and all memory registered.
/// Loss probes (issue 14) are off: these tests time the ACK timer alone.
fn many() -> (Net, Vec<Pair>, u32) {
    let limits = Limits {
        loss_probes: false,
        ..Limits::default()
    };
    let mut net = Net::with_limits(2, 1 << 16, 11, limits);
    let key = net.reg_all(A, Access(1 | 2 | 4 | 8));
    net.reg_all(B, Access(1 | 2 | 4 | 8));
    let o = ConnOpts {
        retry_cnt: 2,
        ..ConnOpts::default()
    };
    let pairs = (0..PAIRS).map(|_| connect(&mut net, A, B, &o)).collect();
    (net, pairs, key)
}

fn write(net: &mut Net, p: &Pair, id: u64, key: u32) {
    let mut wr = send_wr(
        id,
        WrOpcode::RdmaWrite,
        vec![Sge {
            addr: MEM_BASE,
            length: 64,
            lkey: key,
        }],
    );
    wr.remote_addr = MEM_BASE + 0x1000;
    wr.rkey = key;
    net.nodes[A].engine.post_send(p.qa, wr).expect("post");
}

#[test]
fn rl_10_each_of_many_qps_times_out_at_its_own_deadline_retry_cnt_plus_one_times() {
    let (mut net, pairs, key) = many();
    assert_eq!(
        net.nodes[A].engine.poll_timeout(),
        None,
        "idle QPs arm no timer"
    );
    // Every packet lost; the QPs send one WRITE each, 1 us apart.
    net.faults.drop = 1.0;
    let t0 = net.now;
    for (i, p) in pairs.iter().enumerate() {
        write(&mut net, p, i as u64, key);
        let e = &mut net.nodes[A];
        let len = e
            .engine
            .poll_transmit(&mut e.mem, net.now, &mut [0u8; 8192]);
        assert!(len.is_some(), "QP {} sends its WRITE", p.qa);
        net.now = net.now.plus_ns(1_000);
    }
    // The first WRITE's timer is the engine's next deadline.
    assert_eq!(
        net.nodes[A].engine.poll_timeout(),
        Some(t0.plus_ns(TIMEOUT_NS)),
        "the earliest of {PAIRS} deadlines"
    );
    // Just before it nothing fires; at it, exactly the first QP retries.
    let before = net.nodes[A].engine.counters().timeouts;
    net.nodes[A]
        .engine
        .handle_timeout(t0.plus_ns(TIMEOUT_NS - 1));
    assert_eq!(net.nodes[A].engine.counters().timeouts, before);
    net.nodes[A].engine.handle_timeout(t0.plus_ns(TIMEOUT_NS));
    assert_eq!(net.nodes[A].engine.counters().timeouts, before + 1);
    net.now = net.now.max(t0.plus_ns(TIMEOUT_NS));
    // Run to the end: every QP times out 1 + retry_cnt times, then fails.
    let mut failed = [false; PAIRS];
    let done = net.run_until(1_000_000, |n| {
        for (i, p) in pairs.iter().enumerate() {
            while let Some(c) = n.poll(A, p.cq_a) {
                assert_eq!(c.status, WcStatus::RetryExcErr, "QP {}", p.qa);
                assert_eq!(c.wr_id, i as u64);
                failed[i] = true;
            }
        }
        failed.iter().all(|f| *f)
    });
    assert!(done, "every QP's WRITE ends in RETRY_EXC_ERR");
    assert_eq!(
        net.nodes[A].engine.counters().timeouts,
        PAIRS as u64 * 3,
        "one timeout per try: the first send and retry_cnt = 2 retries"
    );
    // The last QP posted last: (1 + 2) timeouts after its send.
    let last = t0.plus_ns((PAIRS as u64 - 1) * 1_000 + 3 * TIMEOUT_NS);
    assert!(net.now >= last, "{:?} before {last:?}", net.now);
    assert!(
        net.now < last.plus_ns(TIMEOUT_NS),
        "no timer fired late or twice"
    );
    assert_eq!(
        net.nodes[A].engine.poll_timeout(),
        None,
        "failed QPs keep no timer"
    );
}

#[test]
fn rl_10_progress_pushes_the_ack_timer_back_and_the_early_entry_fires_nothing() {
    let (mut net, pairs, key) = many();
    let p = pairs[PAIRS / 2];
    // A WRITE goes out at t0 and is acknowledged: the QP is idle, but the
    // heap still holds the entry its send armed (t0 + timeout).
    write(&mut net, &p, 1, key);
    assert!(net.run_until(10_000, |n| n.poll(A, p.cq_a).is_some()));
    // A second WRITE a little later, lost: its timer runs from its own send.
    net.now = net.now.plus_ns(TIMEOUT_NS / 2);
    let t1 = net.now;
    write(&mut net, &p, 2, key);
    let e = &mut net.nodes[A];
    e.engine
        .poll_transmit(&mut e.mem, t1, &mut [0u8; 8192])
        .expect("WRITE 2 goes out (and is lost)");
    let due = t1.plus_ns(TIMEOUT_NS);
    let next = net.nodes[A].engine.poll_timeout().expect("armed");
    assert!(
        next <= due,
        "the reported deadline may be early, never late"
    );
    // The early entry comes due and fires nothing; then the real deadline
    // is the one reported.
    for k in 1..10u64 {
        net.nodes[A]
            .engine
            .handle_timeout(t1.plus_ns(k * TIMEOUT_NS / 10));
    }
    assert_eq!(net.nodes[A].engine.counters().timeouts, 0);
    assert_eq!(net.nodes[A].engine.poll_timeout(), Some(due));
    // At the deadline the retry goes out and the timer restarts from it.
    net.nodes[A].engine.handle_timeout(due);
    assert_eq!(net.nodes[A].engine.counters().timeouts, 1);
    let e = &mut net.nodes[A];
    e.engine
        .poll_transmit(&mut e.mem, due, &mut [0u8; 8192])
        .expect("the retry goes out (and is lost)");
    assert_eq!(
        net.nodes[A].engine.poll_timeout(),
        Some(due.plus_ns(TIMEOUT_NS))
    );
    // The next retry gets through: the WRITE completes and no timer is left.
    net.now = due;
    assert!(net.run_until(100_000, |n| n
        .poll(A, p.cq_a)
        .is_some_and(|c| c.status == WcStatus::Success && c.wr_id == 2)));
    assert_eq!(net.nodes[A].engine.counters().timeouts, 2);
    net.run_until(100_000, |_| false);
    assert_eq!(net.nodes[A].engine.poll_timeout(), None);
}

#[test]
fn settled_timers_report_no_deadline_for_a_timer_progress_disarmed() {
    // Loss probes on (issue 14): every send arms a probe timer (and the ACK
    // timer, RL-10) that its ACK disarms. A caller that sleeps until
    // `poll_timeout` must not be woken for it after `settle_timers`.
    let mut net = Net::with_limits(2, 1 << 16, 11, Limits::default());
    let key = net.reg_all(A, Access(1 | 2 | 4 | 8));
    net.reg_all(B, Access(1 | 2 | 4 | 8));
    let p = connect(&mut net, A, B, &ConnOpts::default());
    write(&mut net, &p, 1, key);
    // Delivered and acknowledged: the QP is idle, its entry disarmed.
    assert!(net.run_until(10_000, |n| n.poll(A, p.cq_a).is_some()));
    assert!(
        net.nodes[A].engine.poll_timeout().is_some(),
        "unsettled, the disarmed entry is still reported"
    );
    net.nodes[A].engine.settle_timers();
    assert_eq!(
        net.nodes[A].engine.poll_timeout(),
        None,
        "settled: no wake-up"
    );
    // A lost WRITE: settled, the deadline reported is a live one.
    write(&mut net, &p, 2, key);
    let now = net.now;
    let e = &mut net.nodes[A];
    e.engine
        .poll_transmit(&mut e.mem, now, &mut [0u8; 8192])
        .expect("WRITE 2 goes out (and is lost)");
    e.engine.settle_timers();
    let d = e.engine.poll_timeout().expect("armed again");
    let probes = e.engine.counters().probes;
    e.engine.handle_timeout(d);
    e.engine.poll_transmit(&mut e.mem, d, &mut [0u8; 8192]);
    assert_eq!(
        e.engine.counters().probes,
        probes + 1,
        "the deadline reported was the probe's"
    );
}
