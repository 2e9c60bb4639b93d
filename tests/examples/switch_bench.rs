//! One switch hop against a back-to-back cable, in the same run (issue 26:
//! "RC WRITE 64 KiB and 8 B latency through one switch hop against the
//! back-to-back link"; targets >= 0.9x throughput, <= +20 % latency). Two
//! `vhca` processes on UDP loopback, cabled either to each other or each to
//! a port of one `vhca switch` (static mode); the two set-ups alternate
//! round by round, so the host's load moves both alike. Per round and
//! set-up: RC WRITE of 64 KiB messages, 16 in flight, one QP (bytes per
//! second at the requester's completions), and an 8-byte SEND ping-pong
//! (round trip p50). Run by `scripts/bench-switch.sh`, which builds an
//! optimised `vhca` and passes it in `VHCA_BIN` (the switch is the same
//! binary).
//!
//! `VHCA_BENCH_ROUNDS=N` (default 5), `VHCA_BENCH_QUICK=1` (short runs).

use std::time::{Duration, Instant};

use vhca_tests::bench_tsv as tsv;
use vhca_tests::fixture::{bench_pair, ping_pong_p50, transfer_rate, Transfer};
use vhca_tests::switch_proc::{star_fabric, SwitchProc};
use vhca_tests::{Options, Vhca};

fn quick() -> bool {
    std::env::var_os("VHCA_BENCH_QUICK").is_some()
}

/// Two nodes cabled back to back, or through a switch (kept alive with it).
fn fabric(switched: bool) -> (Vhca, Option<SwitchProc>) {
    if switched {
        let (v, sw) = star_fabric(2, 2, "");
        (v, Some(sw))
    } else {
        let opts = Options {
            top_toml: "[[link]]\nends = [\"n0\", \"n1\"]\n".into(),
            ..Options::nodes(2)
        };
        (Vhca::spawn(opts), None)
    }
}

/// CPU time (user + system) process `pid` has used so far, from
/// /proc/PID/stat (fields 14 and 15, in clock ticks); zero if unreadable.
fn cpu(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The command name (field 2) may hold spaces: count from its ")".
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // `rest` starts at field 3: utime and stime are fields 14 and 15.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no memory effects.
    #[allow(unsafe_code)]
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// Each process's share of one CPU while the WRITE run took `wall`: the two
/// HCAs, the switch (if any) and this driver, which polls the completions.
struct CpuShare {
    hcas: [f64; 2],
    switch: Option<f64>,
    driver: f64,
}

/// (WRITE bytes per second, ping-pong p50, CPU shares during the WRITE run)
/// on a fresh fabric.
fn measure(switched: bool) -> (f64, Duration, CpuShare) {
    let (v, sw) = fabric(switched);
    let pids = [
        v.pid(0),
        v.pid(1),
        sw.as_ref().map_or(0, |s| s.pid()),
        std::process::id(),
    ];
    let share = |before: &[Duration; 4], wall: Duration| {
        let used: Vec<f64> = pids
            .iter()
            .zip(before)
            .map(|(&p, b)| cpu(p).saturating_sub(*b).as_secs_f64() / wall.as_secs_f64())
            .collect();
        CpuShare {
            hcas: [used[0], used[1]],
            switch: switched.then_some(used[2]),
            driver: used[3],
        }
    };
    let (msg, slots) = (64 << 10, 32);
    let (mut a, mut b, qa, qb, src, dst) = bench_pair(&v, msg, slots);
    let total = if quick() { 1_000 } else { 6_000 };
    // A warm-up, then the measured run.
    transfer_rate(
        &mut a,
        &[qa],
        Transfer::Write,
        &src,
        &dst,
        msg,
        slots,
        200,
        16,
    );
    let before = pids.map(cpu);
    let t0 = Instant::now();
    let rate = transfer_rate(
        &mut a,
        &[qa],
        Transfer::Write,
        &src,
        &dst,
        msg,
        slots,
        total,
        16,
    );

    let cpu_share = share(&before, t0.elapsed());
    let n = if quick() { 300 } else { 2_000 };
    let p50 = ping_pong_p50(&mut a, qa, &mut b, qb, n);
    (rate, p50, cpu_share)
}

fn shares(c: &CpuShare) -> String {
    let pct = |x: f64| format!("{:.0}%", x * 100.0);
    let total = c.hcas[0] + c.hcas[1] + c.switch.unwrap_or(0.0) + c.driver;
    format!(
        "HCAs {} {}{}, driver {}: {} of the host's CPUs",
        pct(c.hcas[0]),
        pct(c.hcas[1]),
        c.switch
            .map_or(String::new(), |s| format!(", switch {}", pct(s))),
        pct(c.driver),
        pct(total)
    )
}

fn main() {
    let rounds: usize = std::env::var("VHCA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut rows = Vec::new();
    for r in 0..rounds {
        let (w0, l0, c0) = measure(false);
        let (w1, l1, c1) = measure(true);
        println!(
            "round {r}: back-to-back WRITE {:.0} MB/s p50 {:.1} us | one switch hop WRITE {:.0} MB/s p50 {:.1} us | ratio {:.2}x, latency {:+.0} %",
            w0 / 1e6,
            l0.as_secs_f64() * 1e6,
            w1 / 1e6,
            l1.as_secs_f64() * 1e6,
            w1 / w0,
            (l1.as_secs_f64() / l0.as_secs_f64() - 1.0) * 100.0
        );
        println!(
            "round {r}: CPU during WRITE, back-to-back: {} | switched: {} (one CPU = 100%; {} CPUs here)",
            shares(&c0),
            shares(&c1),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        rows.push((w1 / w0, l1.as_secs_f64() / l0.as_secs_f64() - 1.0));
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        tsv::row(
            "switch-write-64k",
            "back-to-back",
            r,
            "one",
            w0 / 1e6,
            "MB/s",
        );
        tsv::row(
            "switch-write-64k",
            "one switch hop",
            r,
            "one",
            w1 / 1e6,
            "MB/s",
        );
        tsv::row(
            "switch-write-64k",
            "switched/back-to-back",
            r,
            "ratio",
            w1 / w0,
            "x",
        );
        tsv::row("switch-p50", "back-to-back", r, "one", us(l0), "us");
        tsv::row("switch-p50", "one switch hop", r, "one", us(l1), "us");
        tsv::row(
            "switch-p50",
            "switched/back-to-back",
            r,
            "ratio",
            us(l1) / us(l0),
            "x",
        );
    }
    let min_max = |f: fn(&(f64, f64)) -> f64| {
        let v: Vec<f64> = rows.iter().map(f).collect();
        (
            v.iter().cloned().fold(f64::MAX, f64::min),
            v.iter().cloned().fold(f64::MIN, f64::max),
        )
    };
    let (t0, t1) = min_max(|r| r.0);
    let (l0, l1) = min_max(|r| r.1);
    println!(
        "switch hop / back-to-back over {rounds} rounds: WRITE 64 KiB {t0:.2}x..{t1:.2}x (target >= 0.9x), 8 B p50 latency {:+.0} %..{:+.0} % (target <= +20 %)",
        l0 * 100.0,
        l1 * 100.0
    );
}
