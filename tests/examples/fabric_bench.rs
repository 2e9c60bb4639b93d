//! A generated fat tree against back-to-back cables, in the same run (issue
//! 27 BENCHMARKS: "aggregate all-to-all throughput of the fat tree against
//! the sum of its nodes' back-to-back rates; per-hop latency"; item 2: "idle
//! CPU of the whole fabric < 5 % of a core; memory per node reported").
//! Static mode (no SM), optimised `vhca` processes on UDP loopback; the
//! test driver plays every guest from one thread. Per round:
//!
//! * (a) all-to-all RC WRITE: every HCA of a fat tree of 4 leaves x 2 HCAs
//!   and 2 spines (8 HCAs, 6 switches) WRITEs 64 KiB messages to every other
//!   one over its own RC QP (4 in flight per QP), for a few seconds; bytes per
//!   second at the requesters' completions, all HCAs together. Against: two
//!   HCAs cabled back to back doing the same (each WRITEs to the other), times
//!   4 (the 8 HCAs in pairs).
//! * (b) 8-byte SEND ping-pong round trip p50 through 0 switches (the
//!   back-to-back pair), 1 (two HCAs on one leaf) and 3 (leaf, spine, leaf):
//!   the increment per switch hop.
//! * (c) idle: a fat tree of 8 leaves x 4 HCAs and 2 spines (32 HCAs, 10
//!   switches) with every port Active and no traffic (the driver has brought
//!   every HCA up, as a guest's driver would, and then does nothing):
//!   CPU time of every process over 30 s (/proc/PID/stat utime + stime) as a
//!   share of one core, and VmRSS per HCA and per switch.
//!
//! Run by `scripts/bench-fabric.sh`, which builds an optimised `vhca` and
//! passes it in `VHCA_BIN`. `VHCA_BENCH_ROUNDS=N` (default 3),
//! `VHCA_BENCH_QUICK=1` (short runs).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::verbs::QpType;
use vhca_tests::bench_tsv as tsv;
use vhca_tests::fat_tree::fat_tree;
use vhca_tests::fixture::{assert_success, connect_pair_with, ping_pong_p50, Node, Region};
use vhca_tests::process::{cpu_ns, cpu_ticks, rss_kib};
use vhca_tests::switch_proc::SwitchProc;
use vhca_tests::{ConnOpts, Layout, Options, QpH, QpInit, SendWr, Vhca};

fn quick() -> bool {
    std::env::var_os("VHCA_BENCH_QUICK").is_some()
}

/// Clock ticks per second of /proc/PID/stat (USER_HZ).
const HZ: f64 = 100.0;
const MSG: usize = 64 << 10;
const SLOTS: usize = 8;
const PER_QP: usize = 4;

/// An RC pair of `a` and `b` patient enough for a loaded host (ACK timeout
/// 4.096 us * 2^17, about 0.5 s, as the switch tests' `rc_pair`: with the
/// default 67 ms the fat tree's all-to-all ran out of retries here, its
/// switches dropping datagrams until link-level flow control), with room
/// for the benchmark's WRITEs in flight.
fn pair(a: &mut Node, b: &mut Node) -> (QpH, QpH) {
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq).wr(64, 64);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq).wr(64, 64);
    let o = ConnOpts {
        timeout: 17,
        ..ConnOpts::default()
    };
    connect_pair_with(a, &ia, b, &ib, &o)
}

/// Two HCAs and one QP of each toward each other.
fn two(hcas: &mut [Node], i: usize, j: usize) -> (QpH, QpH) {
    let (lo, hi) = hcas.split_at_mut(j);
    pair(&mut lo[i], &mut hi[0])
}

/// Every HCA of `hcas` WRITEs `MSG`-byte messages to every other over an RC
/// QP of its own, `PER_QP` in flight each, for `secs` after a warm-up of a
/// quarter of that; all the HCAs' completed bytes per second, and their
/// ACK timeouts and retransmitted packets in the whole run (port counters).
/// The driver serves the HCAs round robin from one thread.
fn all_to_all(hcas: &mut [Node], secs: f64) -> (f64, u64, u64) {
    let n = hcas.len();
    let src: Vec<Region> = hcas
        .iter_mut()
        .map(|h| h.region(MSG * SLOTS, Layout::Contiguous, 0))
        .collect();
    let dst: Vec<Region> = hcas
        .iter_mut()
        .map(|h| h.region(MSG * SLOTS, Layout::Contiguous, 0))
        .collect();
    // Node i's flows: (QP, peer).
    let mut flows: Vec<Vec<(QpH, usize)>> = vec![Vec::new(); n];
    for i in 0..n {
        for j in i + 1..n {
            let (qa, qb) = two(hcas, i, j);
            flows[i].push((qa, j));
            flows[j].push((qb, i));
        }
    }
    let index: Vec<HashMap<u32, usize>> = flows
        .iter()
        .map(|f| f.iter().enumerate().map(|(k, (q, _))| (q.qpn, k)).collect())
        .collect();
    let mut outstanding: Vec<Vec<usize>> = flows.iter().map(|f| vec![0; f.len()]).collect();
    let mut posted = vec![0usize; n];
    let warm = Duration::from_secs_f64(secs / 4.0);
    let run = Duration::from_secs_f64(secs);
    let t0 = Instant::now();
    let mut last_progress = Instant::now();
    let (mut bytes, mut started) = (0u64, None::<Instant>);
    loop {
        let now = Instant::now();
        let posting = now < t0 + warm + run;
        if started.is_none() && now >= t0 + warm {
            started = Some(now);
        }
        let mut busy = false;
        for i in 0..n {
            for (k, &(q, j)) in flows[i].iter().enumerate() {
                while posting && outstanding[i][k] < PER_QP {
                    let off = (posted[i] % SLOTS) * MSG;
                    let wr = SendWr::write(k as u64, dst[j].buf.va(off), dst[j].mr.rkey)
                        .sge(src[i].mr.sge(&src[i].buf, off, MSG));
                    hcas[i].hca.post_send(q, &wr).unwrap();
                    outstanding[i][k] += 1;
                    posted[i] += 1;
                }
            }
            let got = hcas[i].hca.poll_cq(hcas[i].cq, 64);
            assert_success(&got);
            for c in &got {
                outstanding[i][index[i][&c.qp_num]] -= 1;
                if started.is_some() && posting {
                    bytes += MSG as u64;
                }
            }
            busy |= !got.is_empty();
        }
        if busy {
            last_progress = Instant::now();
        } else {
            assert!(
                last_progress.elapsed() < Duration::from_secs(30),
                "all-to-all stalled: {outstanding:?}"
            );
            std::thread::yield_now();
        }
        if !posting && outstanding.iter().flatten().all(|&o| o == 0) {
            break;
        }
    }
    let measured = started.map_or(0.0, |s| (t0 + warm + run - s).as_secs_f64());
    let sum = |hcas: &mut [Node], name: &str| -> u64 {
        hcas.iter_mut()
            .map(|h| h.hca.counter(CounterSet::Port, name).unwrap().unwrap_or(0))
            .sum()
    };
    (
        bytes as f64 / measured.max(1e-9),
        sum(hcas, "timeouts"),
        sum(hcas, "retransmits"),
    )
}

/// The back-to-back pair: two HCAs cabled to each other.
fn back_to_back() -> Vhca {
    Vhca::spawn(Options {
        top_toml: "[[link]]\nends = [\"n0\", \"n1\"]\n".into(),
        ..Options::nodes(2)
    })
}

/// Ping-pong p50 between HCAs `i` and `j` over a fresh RC pair.
fn latency(hcas: &mut [Node], i: usize, j: usize) -> Duration {
    let (qa, qb) = two(hcas, i, j);
    let (lo, hi) = hcas.split_at_mut(j);
    ping_pong_p50(
        &mut lo[i],
        qa,
        &mut hi[0],
        qb,
        if quick() { 300 } else { 2_000 },
    )
}

struct Round {
    /// Fat-tree all-to-all, the back-to-back pair's: bytes/s, ACK timeouts,
    /// retransmitted packets.
    fat: (f64, u64, u64),
    pair: (f64, u64, u64),
    /// p50 through 0, 1 and 3 switches.
    lat: [Duration; 3],
    /// CPU cores busy during the two all-to-all runs (every HCA, switch and
    /// this driver; schedstat): fat tree, pair.
    cores: (f64, f64),
}

/// `f()`, and the cores processes `pids` kept busy meanwhile (schedstat).
fn busy_cores<T>(pids: &[u32], f: impl FnOnce() -> T) -> (T, f64) {
    let ns = || pids.iter().map(|&p| cpu_ns(p)).sum::<u64>();
    let (c0, t) = (ns(), Instant::now());
    let x = f();
    let used = ns().saturating_sub(c0) as f64 / 1e9;
    (x, used / t.elapsed().as_secs_f64())
}

fn round() -> Round {
    let secs = if quick() { 2.0 } else { 6.0 };
    let v = back_to_back();
    let mut hcas: Vec<Node> = (0..2).map(|i| Node::connect(&v, i)).collect();
    let l0 = latency(&mut hcas, 0, 1);
    let pids = [v.pid(0), v.pid(1), std::process::id()];
    let (pair, pair_cores) = busy_cores(&pids, || all_to_all(&mut hcas, secs));
    drop(hcas);
    drop(v);
    let (v, switches) = fat_tree((4, 2, 2), &[], Options::default(), &[]);
    let mut hcas: Vec<Node> = (0..v.len()).map(|i| Node::connect(&v, i)).collect();
    // n0 and n1 on leaf0, n2 on leaf1.
    let l1 = latency(&mut hcas, 0, 1);
    let l3 = latency(&mut hcas, 0, 2);
    let pids: Vec<u32> = (0..v.len())
        .map(|i| v.pid(i))
        .chain(switches.iter().map(|s| s.pid()))
        .chain([std::process::id()])
        .collect();
    let (fat, fat_cores) = busy_cores(&pids, || all_to_all(&mut hcas, secs));
    Round {
        fat,
        pair,
        lat: [l0, l1, l3],
        cores: (fat_cores, pair_cores),
    }
}

/// The idle fabric: CPU share of one core of all processes from
/// /proc/PID/stat, and from the threads' schedstat (`cpu_ns`; of all, of the
/// HCAs, of the switches: an idle HCA uses less than one 10 ms tick in 30 s,
/// so the stat sum of 32 moves by whole ticks per process); RSS in KiB per
/// HCA (mean, max) and per switch (mean, max).
struct Idle {
    stat_total: f64,
    total: f64,
    hcas: f64,
    switches: f64,
    rss_hca: (u64, u64),
    rss_switch: (u64, u64),
    counts: (usize, usize),
}

fn idle() -> Idle {
    let secs = if quick() { 5.0 } else { 30.0 };
    let (v, switches): (Vhca, Vec<SwitchProc>) = fat_tree((8, 2, 4), &[], Options::default(), &[]);
    // Every device enabled (a vhca without a guest waits for one and does
    // nothing at all).
    let _guests: Vec<Node> = (0..v.len()).map(|i| Node::connect(&v, i)).collect();
    let hca_pids: Vec<u32> = (0..v.len()).map(|i| v.pid(i)).collect();
    let sw_pids: Vec<u32> = switches.iter().map(|s| s.pid()).collect();
    // Let the start-up's work (training, the first counters files) pass.
    std::thread::sleep(Duration::from_secs(2));
    let all: Vec<u32> = hca_pids.iter().chain(&sw_pids).copied().collect();
    let ticks = || all.iter().map(|&p| cpu_ticks(p)).sum::<u64>();
    let ns = |pids: &[u32]| pids.iter().map(|&p| cpu_ns(p)).sum::<u64>();
    let (t0, h0, s0) = (ticks(), ns(&hca_pids), ns(&sw_pids));
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (t1, h1, s1) = (ticks(), ns(&hca_pids), ns(&sw_pids));
    let wall = t.elapsed().as_secs_f64();
    let share = |d: u64| d as f64 / 1e9 / wall;
    let mean_max = |pids: &[u32]| {
        let r: Vec<u64> = pids.iter().map(|&p| rss_kib(p)).collect();
        (
            r.iter().sum::<u64>() / r.len().max(1) as u64,
            r.iter().copied().max().unwrap_or(0),
        )
    };
    Idle {
        stat_total: (t1 - t0) as f64 / HZ / wall,
        total: share(h1 - h0 + s1 - s0),
        hcas: share(h1 - h0),
        switches: share(s1 - s0),
        rss_hca: mean_max(&hca_pids),
        rss_switch: mean_max(&sw_pids),
        counts: (hca_pids.len(), sw_pids.len()),
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    (
        v.iter().cloned().fold(f64::MAX, f64::min),
        v.iter().cloned().fold(f64::MIN, f64::max),
    )
}

fn main() {
    let rounds: usize = std::env::var("VHCA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (mut ratio, mut hop1, mut hop3, mut idle_pct) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        let x = round();
        // The 8 HCAs in 4 back-to-back pairs.
        let sum = 4.0 * x.pair.0;
        println!(
            "round {r}: all-to-all WRITE 64 KiB, fat tree of 8 HCAs {:.0} MB/s ({} ACK timeouts, {} packets resent, {:.0} % CPU) | 4 back-to-back pairs {:.0} MB/s (one pair {:.0}; {} timeouts, {} resent, {:.0} % CPU) | ratio {:.2}x ({} CPUs here)",
            x.fat.0 / 1e6,
            x.fat.1,
            x.fat.2,
            x.cores.0 * 100.0,
            sum / 1e6,
            x.pair.0 / 1e6,
            x.pair.1,
            x.pair.2,
            x.cores.1 * 100.0,
            x.fat.0 / sum,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let [l0, l1, l3] = x.lat.map(us);
        println!(
            "round {r}: 8 B ping-pong p50: 0 switches {l0:.1} us, 1 switch {l1:.1} us, 3 switches {l3:.1} us | per hop: first {:+.1} us, next two {:+.1} us each",
            l1 - l0,
            (l3 - l1) / 2.0
        );
        tsv::row(
            "fat-tree-all-to-all",
            "fat tree",
            r,
            "one",
            x.fat.0 / 1e6,
            "MB/s",
        );
        tsv::row(
            "fat-tree-all-to-all",
            "4 back-to-back pairs",
            r,
            "one",
            sum / 1e6,
            "MB/s",
        );
        tsv::row(
            "fat-tree-all-to-all",
            "fat tree/pairs",
            r,
            "ratio",
            x.fat.0 / sum,
            "x",
        );
        for (hops, l) in [(0, l0), (1, l1), (3, l3)] {
            tsv::row("p50-by-hops", &format!("round {r}"), hops, "one", l, "us");
        }
        ratio.push(x.fat.0 / sum);
        hop1.push(l1 - l0);
        hop3.push((l3 - l1) / 2.0);
        let i = idle();
        println!(
            "round {r}: idle fabric of {} HCAs and {} switches: {:.2} % of one core by /proc/PID/stat, {:.2} % by schedstat (HCAs {:.2} %, switches {:.2} %); RSS per HCA {} KiB (max {}), per switch {} KiB (max {})",
            i.counts.0,
            i.counts.1,
            i.stat_total * 100.0,
            i.total * 100.0,
            i.hcas * 100.0,
            i.switches * 100.0,
            i.rss_hca.0,
            i.rss_hca.1,
            i.rss_switch.0,
            i.rss_switch.1
        );
        tsv::row(
            "idle-fabric-cpu",
            "schedstat",
            r,
            "one",
            i.total * 100.0,
            "% of a core",
        );
        idle_pct.push(i.total * 100.0);
    }
    let (r0, r1) = min_max(&ratio);
    let (a0, a1) = min_max(&hop1);
    let (b0, b1) = min_max(&hop3);
    let (c0, c1) = min_max(&idle_pct);
    println!(
        "over {rounds} rounds: fat tree / back-to-back all-to-all {r0:.2}x..{r1:.2}x; per switch hop {a0:+.1}..{a1:+.1} us (first), {b0:+.1}..{b1:+.1} us (spine hops); idle fabric {c0:.2}..{c1:.2} % of one core (target < 5 %)"
    );
}
