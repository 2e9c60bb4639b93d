//! IBA congestion control between vhca processes (issue 31 item 2, "the same
//! between vhca processes ... control on against off in the same run"): the
//! 8-to-1 incast of `vhca_tests::incast` (eight senders, 32 RC WRITEs of
//! 64 KiB outstanding each, 16 MiB per sender, through one `vhca switch` with
//! link flow control) with the
//! fabric file's `[ib_cc]` (the switch marks FECN, the receiver returns BECN,
//! the senders pace by their CCT) against the same fabric without it,
//! alternating run by run so the host's load moves both alike. A victim flow
//! (a second RC QP of sender n0, one 8-byte WRITE at a time to a tenth node on
//! an idle switch port) is timed before the incast (unloaded) and during it.
//!
//! Prints each run and, per set-up, the min and max over the rounds of:
//! aggregate goodput, Jain's index over the senders, drops, retries, FECN
//! marked (switch), cc_fecn_seen (receiver), cc_becns_received and
//! cc_rate_cuts (senders), the victim's p50 and p99 during the incast and its
//! p99 over its unloaded p99. Run by `scripts/bench-cc-ib.sh`, which builds an
//! optimised `vhca` and passes it in `VHCA_BIN`.
//!
//! Three set-ups alternate: `[ib_cc]` with every key at its default (the
//! README's), `[ib_cc]` for vhca's speeds ([`vhca_cc`]), and none.
//!
//! `VHCA_BENCH_ROUNDS=N` (default 3); `VHCA_IB_CC` replaces the second
//! set-up's keys (e.g. `ccti_timer = 1000`).

use std::time::Duration;

use vhca_tests::incast::{self, min_max, quantile, Incast, Setup};

const DEPTH: usize = 32;
const LEN: usize = 64 << 10;
/// Each sender writes its 32 slots this many times (16 MiB per sender).
const LAPS: usize = 8;
/// The victim's unloaded round trips.
const UNLOADED: usize = 200;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// What the summary prints of one run, by column.
const COLUMNS: [&str; 13] = [
    "goodput MB/s",
    "Jain",
    "drops",
    "retries",
    "queue max KiB",
    "FECN marked",
    "fecn_seen",
    "becns",
    "rate_cuts",
    "victim unloaded p99 us",
    "victim p50 us",
    "victim p99 us",
    "p99/unloaded",
];

fn columns(x: &Incast) -> [f64; 13] {
    let v = x.victim.clone().unwrap_or_default();
    [
        x.total_goodput() / 1e6,
        x.fairness(),
        (x.kernel_drops + x.switch_drops + x.link_drops) as f64,
        x.retries as f64,
        x.queue_max_blocks as f64 / 16.0,
        x.fecn_marked as f64,
        x.fecn_seen as f64,
        x.becns as f64,
        x.rate_cuts as f64,
        us(quantile(&v.unloaded, 0.99)),
        us(quantile(&v.loaded, 0.50)),
        us(quantile(&v.loaded, 0.99)),
        v.p99_ratio(),
    ]
}

/// Column `i`'s value as printed: ratios with three decimals, the rest one.
fn cell(i: Option<usize>, v: f64) -> String {
    match i {
        Some(1 | 12) => format!("{v:.3}"),
        _ => format!("{v:.1}"),
    }
}

/// `[ib_cc]` for vhca's speeds (README "Congestion control"): a process
/// moves a few hundred MB/s, not the 40 Gb/s the CCT's inter-packet delays
/// count packet times at, and a sending QP hears a BECN per ACK (a few
/// hundred a second in this incast) where the defaults' CCTI_Timer (410 us)
/// takes it a step back some 2,400 times a second. So: steps of 4 in the table
/// (entry 127 an IPD of 508, about 10 MB/s of 4 KiB packets), 4 entries up
/// per BECN, one down per 2 ms.
fn vhca_cc() -> String {
    let cct: Vec<String> = (0..128).map(|i| format!("0:{}", 4 * i)).collect();
    format!(
        "[ib_cc]\nccti_increase = 4\nccti_timer = 2000\ncct = \"{}\"\n",
        cct.join(",")
    )
}

/// Runs `setup`, again (at most twice more, each failure printed) when a
/// run panics: the fabric's switch and nodes pick their free UDP ports
/// apart, and on a busy host the two picks collide now and then (the
/// switch then refuses the fabric file before anything is measured).
fn run_retrying(setup: &Setup, what: &str) -> Incast {
    for _ in 0..2 {
        match std::panic::catch_unwind(|| incast::run_setup(setup)) {
            Ok(x) => return x,
            Err(e) => {
                let why = e
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or(e.downcast_ref::<&str>().copied())
                    .unwrap_or("?");
                let first = why.lines().next().unwrap_or("");
                println!("{what}: failed ({first}), run again");
            }
        }
    }
    incast::run_setup(setup)
}

fn main() {
    let rounds: usize = std::env::var("VHCA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let tuned = match std::env::var("VHCA_IB_CC") {
        Ok(keys) => format!("[ib_cc]\n{keys}\n"),
        Err(_) => vhca_cc(),
    };
    // Set-ups, alternating in each round: the README's `[ib_cc]` (every key
    // at its default), the one for vhca's speeds, none.
    let setups: [(&str, &str); 3] = [("defaults", "[ib_cc]\n"), ("vhca", &tuned), ("off", "")];
    let mut runs: [Vec<Incast>; 3] = Default::default();
    for r in 0..rounds {
        for (k, (name, tables)) in setups.iter().enumerate() {
            let setup = Setup {
                flow_control: true,
                extra: "",
                tables,
                depth: DEPTH,
                laps: LAPS,
                len: LEN,
                victim: UNLOADED,
            };
            let x = run_retrying(&setup, &format!("run {} cc {name}", r + 1));
            let c = columns(&x);
            let v = x.victim.clone().unwrap_or_default();
            let cells: Vec<String> = COLUMNS
                .iter()
                .enumerate()
                .map(|(i, n)| format!("{n} {}", cell(Some(i), c[i])))
                .collect();
            println!(
                "run {} cc {name}: {}; victim unloaded p50 {:.0} us, {} round trips loaded",
                r + 1,
                cells.join(", "),
                us(quantile(&v.unloaded, 0.5)),
                v.loaded.len()
            );
            runs[k].push(x);
        }
    }
    println!("\nper set-up, min-max over {rounds} rounds:");
    println!(
        "{:>24} | {:>22} | {:>22} | {:>22}",
        "[ib_cc]", setups[0].0, setups[1].0, setups[2].0
    );
    for (i, name) in COLUMNS.iter().enumerate() {
        let range = |k: usize| {
            let (lo, hi) = min_max(runs[k].iter().map(|x| columns(x)[i]));
            format!("{}-{}", cell(Some(i), lo), cell(Some(i), hi))
        };
        println!(
            "{name:>24} | {:>22} | {:>22} | {:>22}",
            range(0),
            range(1),
            range(2)
        );
    }
}
