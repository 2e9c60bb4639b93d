//! ATOMICs under loss (issue 30 item 4; RL-06, RL-07, RL-03, RL-10): two
//! engines on the simulated fabric of `sim_goodput` (8 Gb/s egress links, 10
//! us one way), one RC QP with 16 READ/ATOMICs outstanding (max_rd_atomic, as
//! `ib_atomic_bw` keeps them against the device), a stream of 8-byte
//! FETCH_ADDs or COMPARE_SWAPs to one counter, the ACK timeout perftest uses
//! (14: 67 ms) and the device's probe floor (1 ms, `--loss-probe-min`). The
//! same seed runs lossless and with 5 % of all packets lost both ways; what
//! is measured is the simulated time to complete the operations, what is
//! asserted the lossy run's rate as a fraction of the lossless one's.
//!
//! Every run checks exactly-once execution (RL-06: a duplicate ATOMIC is
//! answered from the responder's saved result, never executed again): the
//! counter ends at the number of operations, and each FETCH_ADD fetched a
//! distinct value (each COMPARE_SWAP, the value it compared with: executed
//! in PSN order, it found the counter at its own index).
//!
//! `SIM_SEED=<n>` runs only that seed and prints both runs' counters.

mod common;

use common::loss::goodput_pair;
use common::*;
use transport::engine::{Counters, Limits};
use transport::verbs::{Sge, WcStatus, WrOpcode};

const A: usize = 0;
const B: usize = 1;
/// Operations per run.
const OPS: u64 = 2000;
/// WRs kept posted (perftest's tx depth); the engine sends 16 at a time.
const POSTED: u64 = 128;
/// The counter, in B's memory.
const COUNTER: u64 = MEM_BASE;
/// The fetched values, one 8-byte slot per operation, in A's memory.
const RESULTS: u64 = MEM_BASE + 0x1000;
const MEM_LEN: usize = 0x1000 + 8 * OPS as usize;
const SEEDS: u64 = 30;
const MAX_STEPS: usize = 5_000_000;
/// The device's default probe floor (`--loss-probe-min 1ms`).
const DEVICE_PROBE_FLOOR_NS: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    FetchAdd,
    CmpSwap,
}

/// What one run measured.
#[derive(Debug)]
struct Run {
    ns: u64,
    /// The requester's counters (node A).
    req: Counters,
    /// The responder's.
    resp: Counters,
}

fn limits() -> Limits {
    Limits {
        min_probe_timeout_ns: DEVICE_PROBE_FLOOR_NS,
        ..Limits::default()
    }
}

/// `OPS` operations of `op` on a fresh pair under `faults`; checks that each
/// was executed exactly once; the simulated time from the first post to the
/// last completion.
fn run(seed: u64, op: Op, faults: Faults) -> Run {
    let (mut net, p, ka, kb) = goodput_pair(seed, MEM_LEN, limits());
    net.faults = faults;
    let start = net.now;
    let wr = |i: u64| {
        let (opcode, compare, swap_add) = match op {
            Op::FetchAdd => (WrOpcode::AtomicFetchAdd, 0, 1),
            Op::CmpSwap => (WrOpcode::AtomicCmpSwap, i, i + 1),
        };
        let mut w = send_wr(
            i,
            opcode,
            vec![Sge {
                addr: RESULTS + 8 * i,
                length: 8,
                lkey: ka,
            }],
        );
        w.remote_addr = COUNTER;
        w.rkey = kb;
        w.compare = compare;
        w.swap_add = swap_add;
        w
    };
    let mut posted = 0;
    let mut done = 0;
    let finished = net.run_until(MAX_STEPS, |n| {
        while let Some(c) = n.poll(A, p.cq_a) {
            assert_eq!(
                c.status,
                WcStatus::Success,
                "seed {seed} {op:?}: {c:?}; responder {:?}",
                n.nodes[B].engine.counters()
            );
            assert_eq!(c.wr_id, done, "seed {seed} {op:?}: completions in order");
            done += 1;
        }
        while posted < OPS && posted < done + POSTED {
            n.nodes[A].engine.post_send(p.qa, wr(posted)).expect("post");
            posted += 1;
        }
        done == OPS
    });
    assert!(finished, "seed {seed} {op:?} {faults:?}: {done}/{OPS} done");
    let ns = net.now.0 - start.0;
    assert_executed_once(&net, op, &format!("seed {seed} {op:?} {faults:?}"));
    Run {
        ns,
        req: net.nodes[A].engine.counters().clone(),
        resp: net.nodes[B].engine.counters().clone(),
    }
}

fn u64_at(net: &Net, node: usize, addr: u64) -> u64 {
    u64::from_le_bytes(bytes(net, node, addr, 8).try_into().unwrap())
}

/// RL-06: the counter holds the number of operations completed, and every
/// operation's result is the one its single execution returned.
fn assert_executed_once(net: &Net, op: Op, what: &str) {
    assert_eq!(
        u64_at(net, B, COUNTER),
        OPS,
        "{what}: the counter equals the operations completed"
    );
    let mut fetched: Vec<u64> = (0..OPS).map(|i| u64_at(net, A, RESULTS + 8 * i)).collect();
    match op {
        Op::FetchAdd => {
            fetched.sort_unstable();
            assert!(
                fetched.iter().copied().eq(0..OPS),
                "{what}: each FETCH_ADD fetched a distinct value"
            );
        }
        Op::CmpSwap => {
            for (i, v) in fetched.iter().enumerate() {
                assert_eq!(*v, i as u64, "{what}: COMPARE_SWAP {i} found its own index");
            }
        }
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SIM_SEED")],
        Err(_) => (1..=SEEDS).collect(),
    }
}

/// Runs every seed lossless and at 5 % loss; the overall ratio of rates,
/// and the per-seed minimum and maximum.
fn rate_at_5_percent_loss(op: Op) -> (f64, f64, f64) {
    let mut ratios = Vec::new();
    let (mut lossless_ns, mut lossy_ns) = (0u64, 0u64);
    let mut sum = Counters::default();
    for seed in seeds() {
        let clean = run(seed, op, Faults::default());
        let lossy = run(
            seed,
            op,
            Faults {
                drop: 0.05,
                ..Faults::default()
            },
        );
        lossless_ns += clean.ns;
        lossy_ns += lossy.ns;
        sum.timeouts += lossy.req.timeouts;
        sum.probes += lossy.req.probes;
        sum.retransmits += lossy.req.retransmits;
        sum.seq_nak_go_backs += lossy.req.seq_nak_go_backs;
        sum.resent_packets += lossy.req.resent_packets;
        sum.recovery_stall_us += lossy.req.recovery_stall_us;
        sum.duplicates_received += lossy.resp.duplicates_received;
        if std::env::var("SIM_SEED").is_ok() {
            eprintln!("seed {seed}: lossless {clean:?}\nlossy {lossy:?}");
        }
        ratios.push((clean.ns as f64 / lossy.ns as f64, seed));
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let overall = lossless_ns as f64 / lossy_ns as f64;
    let ops_per_s = |ns: u64| (OPS * ratios.len() as u64) as f64 / ns as f64 * 1e9;
    eprintln!(
        "{op:?} at 5% loss: {overall:.3}x of lossless over {} seeds ({:.0} vs {:.0} ops/s); \
         per seed min {:.3} (seed {}) max {:.3}; requester: {} ACK timeouts, {} probes, \
         {} retransmissions, {} sequence-NAK go-backs, {} packets resent, {} us stalled; \
         responder: {} duplicates",
        ratios.len(),
        ops_per_s(lossy_ns),
        ops_per_s(lossless_ns),
        ratios[0].0,
        ratios[0].1,
        ratios[ratios.len() - 1].0,
        sum.timeouts,
        sum.probes,
        sum.retransmits,
        sum.seq_nak_go_backs,
        sum.resent_packets,
        sum.recovery_stall_us,
        sum.duplicates_received,
    );
    (overall, ratios[0].0, ratios[ratios.len() - 1].0)
}

#[test]
fn fetch_add_keeps_its_rate_at_5_percent_loss() {
    let (overall, min, _) = rate_at_5_percent_loss(Op::FetchAdd);
    // Issue 30: >= 0.3x (was 0.027x in this simulation, 0.077x between
    // two guests); measured 0.447 over the seeds, the least seed 0.253.
    assert!(overall >= 0.4, "FETCH_ADD: {overall:.3}x of lossless");
    assert!(min >= 0.2, "FETCH_ADD: a seed at {min:.3}x");
}

#[test]
fn cmp_swap_keeps_its_rate_at_5_percent_loss() {
    let (overall, min, _) = rate_at_5_percent_loss(Op::CmpSwap);
    assert!(overall >= 0.4, "COMPARE_SWAP: {overall:.3}x of lossless");
    assert!(min >= 0.2, "COMPARE_SWAP: a seed at {min:.3}x");
}

/// RL-06 under loss, duplication and reordering together: every ATOMIC is
/// executed exactly once (a duplicate request, the fabric's or a retry's, is
/// answered from the saved result), whatever the fabric does.
#[test]
fn rl06_atomics_execute_exactly_once_under_loss_duplication_and_reorder() {
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        reorder_delay_ns: 6_000,
        ..Faults::default()
    };
    let mut dups = 0;
    for seed in seeds().into_iter().take(10) {
        for op in [Op::FetchAdd, Op::CmpSwap] {
            // `run` asserts the counter and every fetched value.
            let r = run(seed, op, faults);
            dups += r.resp.duplicates_received;
        }
    }
    assert!(dups > 0, "the responder saw duplicates to answer");
}
