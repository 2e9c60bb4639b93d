//! Goodput under loss (issue 14; RL-03, RL-08, RL-10, RL-14): two engines on a
//! simulated fabric with a link model (8 Gb/s egress links with a 128 KiB queue,
//! 10 us one way), an RC QP moving 2 MiB as 64 KiB WRITEs or READs, the ACK
//! timeout perftest uses (14: 67 ms), and the same seed run twice: lossless and
//! with 5% of all packets lost, in both directions. What is measured is the
//! simulated time to move the data; the data is checked byte for byte after
//! every run. What is asserted is the lossy run's goodput as a fraction of the
//! lossless one's (issue 14: >= 0.5 over the seeds, no seed below 0.25).
//!
//! With 2% duplication and 5% reordering (the fabric holds a packet back for
//! about one packet time), a go-back that absorbs the second sequence NAK of a
//! reordered packet (`recovery`: the requester resends from the NAK's PSN,
//! RL-03 and seed 004 §3.4, §4; when is its choice) resends less than one
//! that restarts, and moves the data sooner.
//!
//! `SIM_SEED=<n>` runs only that seed.

mod common;

use common::loss::goodput_pair;
use common::*;
use transport::engine::{Counters, Limits};
use transport::verbs::{Sge, WcStatus, WrOpcode};

const A: usize = 0;
const B: usize = 1;
const MSG: u64 = 64 * 1024;
const MSGS: u64 = 32;
const TOTAL: u64 = MSG * MSGS;
/// Where the data comes from and goes to, in each node's memory.
const SRC: u64 = MEM_BASE;
const DST: u64 = MEM_BASE + TOTAL;
const MEM_LEN: usize = 2 * TOTAL as usize;
const SEEDS: u64 = 50;
const MAX_STEPS: usize = 5_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

/// What one run measured.
#[derive(Debug)]
struct Run {
    ns: u64,
    /// The requester's counters (node A).
    req: Counters,
}

/// Moves `TOTAL` bytes with `op` on a fresh pair; returns the simulated time
/// from the first post to the last completion.
fn run(seed: u64, op: Op, drop: f64) -> Run {
    run_with(
        seed,
        op,
        Faults {
            drop,
            ..Faults::default()
        },
        Limits::default(),
    )
}

/// [`run`] with these faults and engine limits.
fn run_with(seed: u64, op: Op, faults: Faults, limits: Limits) -> Run {
    let drop = faults.drop;
    let (mut net, p, ka, kb) = goodput_pair(seed, MEM_LEN, limits);
    // The data: A's source for a WRITE, B's for a READ.
    let (from, to) = match op {
        Op::Write => (A, B),
        Op::Read => (B, A),
    };
    fill(&mut net, from, SRC, TOTAL as usize, seed as u8);
    net.faults = faults;
    let start = net.now;
    for i in 0..MSGS {
        let off = i * MSG;
        let (local, remote, opcode, lkey, rkey) = match op {
            Op::Write => (SRC + off, DST + off, WrOpcode::RdmaWrite, ka, kb),
            Op::Read => (DST + off, SRC + off, WrOpcode::RdmaRead, ka, kb),
        };
        let mut wr = send_wr(
            i,
            opcode,
            vec![Sge {
                addr: local,
                length: MSG as u32,
                lkey,
            }],
        );
        wr.remote_addr = remote;
        wr.rkey = rkey;
        net.nodes[A].engine.post_send(p.qa, wr).expect("post");
    }
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
        done == MSGS
    });
    assert!(
        finished,
        "seed {seed} {op:?} drop {drop}: {done}/{MSGS} done"
    );
    assert!(
        bytes(&net, from, SRC, TOTAL as usize) == bytes(&net, to, DST, TOTAL as usize),
        "seed {seed} {op:?} drop {drop}: data differs"
    );
    Run {
        ns: net.now.0 - start.0,
        req: net.nodes[A].engine.counters().clone(),
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("SIM_SEED") {
        Ok(s) => vec![s.parse().expect("SIM_SEED")],
        Err(_) => (1..=SEEDS).collect(),
    }
}

/// Runs every seed lossless and at 5% loss; asserts the goodput ratios:
/// over the seeds at least `overall_min`, each seed at least `seed_min`.
fn goodput_at_5_percent_loss(op: Op, overall_min: f64, seed_min: f64) {
    let mut ratios = Vec::new();
    let (mut lossless_ns, mut lossy_ns) = (0u64, 0u64);
    let (mut timeouts, mut retransmits, mut probes) = (0u64, 0u64, 0u64);
    for seed in seeds() {
        let clean = run(seed, op, 0.0);
        let lossy = run(seed, op, 0.05);
        lossless_ns += clean.ns;
        lossy_ns += lossy.ns;
        timeouts += lossy.req.timeouts;
        retransmits += lossy.req.retransmits;
        probes += lossy.req.probes;
        let r = clean.ns as f64 / lossy.ns as f64;
        if std::env::var("SIM_SEED").is_ok() {
            eprintln!("seed {seed}: lossless {clean:?}\nlossy {lossy:?}");
        }
        ratios.push((r, seed));
    }
    ratios.sort_by(|a, b| a.0.total_cmp(&b.0));
    let overall = lossless_ns as f64 / lossy_ns as f64;
    let mbps = |ns: u64| (TOTAL * ratios.len() as u64) as f64 / ns as f64 * 1000.0;
    eprintln!(
        "{op:?} 64 KiB at 5% loss: goodput {:.3}x of lossless over {} seeds \
         ({:.0} vs {:.0} MB/s); per seed min {:.3} (seed {}) median {:.3} max {:.3}; \
         {timeouts} ACK timeouts, {retransmits} retransmissions, {probes} probes",
        overall,
        ratios.len(),
        mbps(lossy_ns),
        mbps(lossless_ns),
        ratios[0].0,
        ratios[0].1,
        ratios[ratios.len() / 2].0,
        ratios[ratios.len() - 1].0,
    );
    assert!(
        overall >= overall_min,
        "{op:?}: goodput {overall:.3}x of lossless"
    );
    assert!(
        ratios[0].0 >= seed_min,
        "{op:?}: seed {} at {:.3}x",
        ratios[0].1,
        ratios[0].0
    );
}

#[test]
fn write_64k_keeps_half_its_goodput_at_5_percent_loss() {
    goodput_at_5_percent_loss(Op::Write, 0.55, 0.4);
}

#[test]
fn read_64k_keeps_half_its_goodput_at_5_percent_loss() {
    // Raised with the READ recovery of ARCHITECTURE.md §3 (was 0.50 / 0.25;
    // measured 0.548 / 0.468 at 2f76f80).
    goodput_at_5_percent_loss(Op::Read, 0.52, 0.4);
}

/// Duplication and reordering: the sum over the seeds of packets resent,
/// NAKs absorbed and the time taken with and without faults, with go-backs
/// that absorb the NAKs of one round trip or not, with the receive reorder
/// hold (`hold_ns`, `engine::reorder`) or not.
fn reordered(op: Op, bounded_go_back: bool, hold_ns: u64) -> (u64, u64, u64, u64) {
    let faults = Faults {
        duplicate: 0.02,
        reorder: 0.05,
        // About one packet time at 8 Gb/s: the next packet overtakes it.
        reorder_delay_ns: 6_000,
        ..Faults::default()
    };
    let limits = Limits {
        bounded_go_back,
        reorder_hold_ns: hold_ns,
        ..Limits::default()
    };
    let (mut resent, mut absorbed, mut ns, mut clean_ns) = (0, 0, 0, 0);
    for seed in seeds().into_iter().take(20) {
        let r = run_with(seed, op, faults, limits);
        resent += r.req.resent_packets;
        absorbed += r.req.seq_naks_absorbed;
        ns += r.ns;
        clean_ns += run_with(seed, op, Faults::default(), limits).ns;
    }
    (resent, absorbed, ns, clean_ns)
}

#[test]
fn a_bounded_go_back_absorbs_the_second_nak_of_a_reordered_packet() {
    // The go-back bound alone: without the reorder hold, which spares most
    // of these NAKs (the test below).
    for op in [Op::Write, Op::Read] {
        let (resent_on, absorbed, ns_on, clean_on) = reordered(op, true, 0);
        let (resent_off, none, ns_off, clean_off) = reordered(op, false, 0);
        eprintln!(
            "{op:?} 64 KiB, 2% dup + 5% reorder: bounded go-back {resent_on} packets resent, \
             {absorbed} NAKs absorbed, {:.3}x of lossless; unbounded {resent_off} resent, \
             {:.3}x",
            clean_on as f64 / ns_on as f64,
            clean_off as f64 / ns_off as f64,
        );
        assert_eq!(none, 0, "{op:?}: off absorbs nothing");
        if op == Op::Write {
            // A READ's responses are not NAKed: its gaps ask again once each.
            assert!(absorbed > 0, "{op:?}");
            assert!(
                resent_on < resent_off,
                "{op:?}: {resent_on} resent, {resent_off} without the bound"
            );
            assert!(
                ns_on as f64 / clean_on as f64 <= ns_off as f64 / clean_off as f64,
                "{op:?}: slower with the bound"
            );
        }
    }
}

/// The receive reorder hold (`engine::reorder`, vhca policy): under 2 %
/// duplication and 5 % reordering WRITE and READ keep 0.9x of their lossless
/// goodput (without it 0.643x and 0.489x: each swap cost a sequence NAK and go-back, or a
/// READ re-request) and resend a tenth of the packets or less.
#[test]
fn a_reorder_hold_keeps_dup_reorder_goodput() {
    let hold = transport::engine::DEFAULT_REORDER_HOLD_NS;
    for op in [Op::Write, Op::Read] {
        let (resent_on, _, ns_on, clean_on) = reordered(op, true, hold);
        let (resent_off, _, ns_off, clean_off) = reordered(op, true, 0);
        let (on, off) = (
            clean_on as f64 / ns_on as f64,
            clean_off as f64 / ns_off as f64,
        );
        eprintln!(
            "{op:?} 64 KiB, 2% dup + 5% reorder: hold on {resent_on} packets resent, \
             {on:.3}x of lossless; off {resent_off} resent, {off:.3}x"
        );
        assert!(on >= 0.9, "{op:?}: {on:.3}x of lossless with the hold");
        assert!(
            resent_on * 10 <= resent_off,
            "{op:?}: {resent_on} resent with the hold, {resent_off} without"
        );
    }
}
