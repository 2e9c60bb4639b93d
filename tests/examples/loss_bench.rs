//! RC under loss (issue 14): two real `vhca` processes on UDP loopback, the
//! loss injected by each process's fault stage (`--fault`, on both links),
//! RC WRITE and READ of 64 KiB messages on one QP (16 outstanding), each
//! condition's throughput as a ratio to the lossless figure of the same run,
//! with loss probes on (the default) and off (recovery by the ACK timer and
//! sequence NAKs alone, as before issue 14). Run by `scripts/bench-loss.sh`,
//! which builds an optimised `vhca` and passes it in `VHCA_BIN`.
//!
//! `VHCA_BENCH_QUICK=1` moves less data per run (a smoke check);
//! `VHCA_BENCH_MSGS=N` sets the messages per run (default 400 = 25 MiB);
//! `VHCA_BENCH_CONDITIONS=0,2` runs only those conditions (0 = lossless; the
//! ratios are then to the first one run); `VHCA_BENCH_COUNTERS=1` prints the
//! requester's recovery counters per run (go-backs by cause, probes, spurious
//! probes, packets resent, time stalled until a probe or timeout);
//! `VHCA_BENCH_OPS=read` runs only READ (or `write`, `fetchadd`, `cmpswap`;
//! a list such as `write,fetchadd`; default WRITE and READ);
//! `VHCA_BENCH_ATOMICS=N` sets the ATOMICs per run (default 20000): 8-byte
//! FETCH_ADDs or COMPARE_SWAPs to one word, 16 outstanding as `ib_atomic_bw`
//! keeps them (issue 30), each run checking that the word ends at the number
//! of operations (RL-06: none executed twice);
//! `VHCA_BENCH_PROBES=off,on` sets which settings run, in which order; an
//! entry `on:--no-loss-probe-adapt` adds vhca arguments to that setting only
//! (variants alternate within the same minutes).

use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::verbs::QpType;
use vhca_tests::bench_tsv as tsv;
use vhca_tests::fixture::{connect_pair_with, transfer_rate, Node, Transfer};
use vhca_tests::{ConnOpts, GuestOptions, HcaConfig, Layout, Options, QpInit, Vhca};

const MSG: usize = 64 << 10;
const SLOTS: usize = 32;
const PER_QP: usize = 16;

/// The conditions, as `--fault` specs (None: lossless).
const CONDITIONS: [(&str, Option<&str>); 5] = [
    ("lossless", None),
    ("1% loss", Some("drop=0.01")),
    ("5% loss", Some("drop=0.05")),
    ("10% loss", Some("drop=0.1")),
    ("2% dup + 5% reorder", Some("dup=0.02,reorder=0.05")),
];

/// One run: fresh processes with `fault` and loss probes `on` or `off`
/// (`--no-loss-probes`), with the setting's own vhca arguments after a `:`.
fn run(op: Transfer, fault: Option<&str>, probes: &str, msgs: usize) -> f64 {
    let atomic = matches!(op, Transfer::FetchAdd | Transfer::CmpSwap);
    let msg = if atomic { 8 } else { MSG };
    let mut opts = Options::nodes(2);
    opts.fault = fault.map(String::from);
    let (on_off, own) = probes.split_once(':').unwrap_or((probes, ""));
    opts.extra_args = match on_off {
        "on" => Vec::new(),
        "off" => vec!["--no-loss-probes".into()],
        other => panic!("VHCA_BENCH_PROBES: `{other}` is not on or off"),
    };
    opts.extra_args
        .extend(own.split_whitespace().map(String::from));
    // `VHCA_BENCH_VHCA_ARGS="--loss-probe-min 500us"`: extra vhca arguments.
    if let Ok(extra) = std::env::var("VHCA_BENCH_VHCA_ARGS") {
        opts.extra_args
            .extend(extra.split_whitespace().map(String::from));
    }
    // perftest's QP attributes: timeout 14 (67 ms), retry_cnt 7.
    let co = ConnOpts {
        timeout: 14,
        ..ConnOpts::default()
    };
    let v = Vhca::spawn(opts);
    let go = GuestOptions::default;
    let mut a = Node::connect_with(&v, 0, go(), HcaConfig::default());
    let mut b = Node::connect_with(&v, 1, go(), HcaConfig::default());
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq).wr(64, 4);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq).wr(64, 4);
    let (qa, _qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &co);
    let local = a.region(MSG * SLOTS, Layout::Contiguous, 0);
    let remote = b.region(MSG * SLOTS, Layout::Contiguous, 0);
    let rate = transfer_rate(&mut a, &[qa], op, &local, &remote, msg, SLOTS, msgs, PER_QP);
    if atomic {
        // RL-06: every operation executed once, whatever was lost or resent.
        let word = u64::from_le_bytes(b.read(&remote, 0, 8).try_into().unwrap());
        assert_eq!(
            word, msgs as u64,
            "{op:?} {fault:?}: the target word after {msgs} operations"
        );
    }
    if std::env::var_os("VHCA_BENCH_COUNTERS").is_some() {
        // The requester's port counters: probes, timeouts, retransmissions.
        let names = CounterSet::Port.names();
        let vals = a
            .hca
            .query_counters(CounterSet::Port)
            .expect("QUERY_COUNTERS");
        let pick: Vec<String> = names
            .iter()
            .zip(&vals)
            .filter(|(n, _)| {
                [
                    "retransmits",
                    "timeouts",
                    "loss_probes",
                    "seq_nak_go_backs",
                    "seq_naks_absorbed",
                    "probe_go_backs",
                    "spurious_probes",
                    "resent_packets",
                    "recovery_stall_us",
                    "rx_packets",
                    "duplicates_received",
                    "reorder_held",
                    "reorder_in_order",
                    "reorder_overtaken",
                    "reorder_expired",
                    "reorder_full",
                    "reorder_skipped",
                ]
                .contains(&n.as_str())
            })
            .map(|(n, v)| format!("{n}={v}"))
            .collect();
        // The responder's: packets it sent (data or responses; a READ's
        // replays show here) and the duplicate requests it answered.
        let bvals = b
            .hca
            .query_counters(CounterSet::Port)
            .expect("QUERY_COUNTERS");
        let peer: Vec<String> = names
            .iter()
            .zip(&bvals)
            .filter(|(n, _)| {
                [
                    "tx_packets",
                    "duplicates_received",
                    "naks_sent",
                    "reorder_held",
                    "reorder_in_order",
                    "reorder_overtaken",
                    "reorder_expired",
                    "dup_reads_queued",
                ]
                .contains(&n.as_str())
            })
            .map(|(n, v)| format!("peer_{n}={v}"))
            .collect();
        // Both sides' transport drops, per reason (nonzero ones).
        let drops = |n: &mut Node, who: &str| -> Vec<String> {
            let names = CounterSet::RxDrop.names();
            let vals = n
                .hca
                .query_counters(CounterSet::RxDrop)
                .expect("QUERY_COUNTERS");
            names
                .iter()
                .zip(&vals)
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{who}_{k}={v}"))
                .collect()
        };
        let mut dropped = drops(&mut a, "drop");
        dropped.extend(drops(&mut b, "peer_drop"));
        eprintln!(
            "  {op:?} {fault:?} probes {probes}: {} {} {}",
            pick.join(" "),
            peer.join(" "),
            dropped.join(" ")
        );
    }
    drop((a, b));
    drop(v);
    rate
}

/// `VHCA_BENCH_CONDITIONS=0,2`: only those conditions (default: all).
fn wanted(i: usize) -> bool {
    match std::env::var("VHCA_BENCH_CONDITIONS") {
        Ok(s) if !s.trim().is_empty() => s.split(',').any(|x| x.trim() == i.to_string()),
        _ => true,
    }
}

fn main() {
    let msgs = std::env::var("VHCA_BENCH_MSGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::var_os("VHCA_BENCH_QUICK").is_some() {
            40
        } else {
            400
        });
    let atomics = std::env::var("VHCA_BENCH_ATOMICS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::var_os("VHCA_BENCH_QUICK").is_some() {
            2000
        } else {
            20000
        });
    // `VHCA_BENCH_OPS=read`: only READ (or `write`, `fetchadd`, `cmpswap`, a
    // comma-separated list); default WRITE and READ.
    let ops = std::env::var("VHCA_BENCH_OPS").unwrap_or_else(|_| "write,read".into());
    let ops: Vec<Transfer> = [
        Transfer::Write,
        Transfer::Read,
        Transfer::FetchAdd,
        Transfer::CmpSwap,
    ]
    .into_iter()
    .filter(|op| {
        ops.to_lowercase()
            .split(',')
            .any(|o| o.trim() == format!("{op:?}").to_lowercase())
    })
    .collect();
    for op in ops {
        let atomic = matches!(op, Transfer::FetchAdd | Transfer::CmpSwap);
        let (n, unit, per, what) = if atomic {
            (atomics, "ops/s", 8.0, "8 B")
        } else {
            (msgs, "MB/s", 1e6, "64 KiB")
        };
        // `VHCA_BENCH_PROBES=off,on`: which settings, in which order.
        let order = std::env::var("VHCA_BENCH_PROBES").unwrap_or_else(|_| "on,off".into());
        for probes in order.split(',').map(str::trim) {
            let mut base = None;
            let mut line = Vec::new();
            for (i, (name, fault)) in CONDITIONS.into_iter().enumerate() {
                if !wanted(i) {
                    continue;
                }
                let r = run(op, fault, probes, n);
                let b = *base.get_or_insert(r);
                line.push(format!("{name} {:.0} {unit} ({:.3}x)", r / per, r / b));
                // The loss rate as the abscissa of the plot; the duplication
                // and reordering condition by its name.
                let x = match fault {
                    None => "0".to_string(),
                    Some(f) => f
                        .strip_prefix("drop=")
                        .and_then(|p| p.parse::<f64>().ok())
                        .map_or(f.to_string(), |p| format!("{}", p * 100.0)),
                };
                let series = format!("vhca {op:?} probes {probes}");
                tsv::row("goodput-vs-loss", &series, &x, "one", r / per, unit);
                tsv::row(
                    "goodput-vs-loss",
                    &series,
                    &x,
                    "ratio",
                    r / b,
                    "x of lossless",
                );
            }
            println!(
                "RC {op:?} {what}, loss probes {probes}: {}",
                line.join(", ")
            );
        }
    }
}
