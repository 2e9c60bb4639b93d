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

use vhca_tests::abi::verbs::QpType;
use vhca_tests::fixture::{connect_pair_with, transfer_rate, Node, Region, Transfer};
use vhca_tests::switch_proc::{star_fabric, SwitchProc};
use vhca_tests::{ConnOpts, Layout, Options, QpInit, RecvWr, SendWr, Vhca};

fn quick() -> bool {
    std::env::var_os("VHCA_BENCH_QUICK").is_some()
}

fn sge(r: &Region, off: usize, len: usize) -> Vec<vhca_tests::abi::wqe::Sge> {
    vec![r.mr.sge(&r.buf, off, len)]
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

/// (WRITE bytes per second, ping-pong p50) on a fresh fabric.
fn measure(switched: bool) -> (f64, Duration) {
    let (v, _sw) = fabric(switched);
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq).wr(512, 512);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq).wr(512, 512);
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
    let (msg, slots) = (64 << 10, 32);
    let src = a.region(msg * slots, Layout::Contiguous, 0);
    let dst = b.region(msg * slots, Layout::Contiguous, 0);
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

    let n = if quick() { 300 } else { 2_000 };
    let sbuf = a.region(4096, Layout::Contiguous, 0);
    let rbuf_a = a.region(4096, Layout::Contiguous, 0);
    let rbuf_b = b.region(4096, Layout::Contiguous, 0);
    let mut rtt = Vec::with_capacity(n);
    for i in 0..n as u64 {
        b.hca
            .post_recv(qb, &RecvWr::new(i, sge(&rbuf_b, 0, 64)))
            .unwrap();
        a.hca
            .post_recv(qa, &RecvWr::new(i, sge(&rbuf_a, 0, 64)))
            .unwrap();
        let t = Instant::now();
        a.hca
            .post_send(qa, &SendWr::send(i).sges(sge(&sbuf, 0, 8)))
            .unwrap();
        while b.hca.poll_cq(b.cq, 4).is_empty() {
            std::thread::yield_now();
        }
        b.hca
            .post_send(qb, &SendWr::send(i).sges(sge(&rbuf_b, 0, 8)))
            .unwrap();
        let mut seen = 0;
        while seen < 2 {
            seen += a.hca.poll_cq(a.cq, 4).len();
            std::thread::yield_now();
        }
        rtt.push(t.elapsed());
        // B's own SEND completion.
        while b.hca.poll_cq(b.cq, 4).is_empty() {
            std::thread::yield_now();
        }
    }
    rtt.sort();
    (rate, rtt[n / 2])
}

fn main() {
    let rounds: usize = std::env::var("VHCA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut rows = Vec::new();
    for r in 0..rounds {
        let (w0, l0) = measure(false);
        let (w1, l1) = measure(true);
        println!(
            "round {r}: back-to-back WRITE {:.0} MB/s p50 {:.1} us | one switch hop WRITE {:.0} MB/s p50 {:.1} us | ratio {:.2}x, latency {:+.0} %",
            w0 / 1e6,
            l0.as_secs_f64() * 1e6,
            w1 / 1e6,
            l1.as_secs_f64() * 1e6,
            w1 / w0,
            (l1.as_secs_f64() / l0.as_secs_f64() - 1.0) * 100.0
        );
        rows.push((w1 / w0, l1.as_secs_f64() / l0.as_secs_f64() - 1.0));
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
