//! The 8-to-1 incast with link flow control on and off (issue 27 item 4:
//! "incast with and without flow control (drops, retries, goodput, fairness
//! as Jain's index >= 0.95)"): `vhca_tests::incast::run`, eight senders
//! through one `vhca switch` to one receiver, 32 RC WRITEs of 64 KiB each,
//! the same small receive buffer on every port (`rx_buffer = 262144`) in
//! both set-ups, which alternate run by run so the host's load moves both
//! alike. Prints each run and, per set-up, the min and max of: drops
//! (kernel + switch + link), retries (RC retransmits + ACK timeouts),
//! packets resent, aggregate goodput, Jain's index over the eight senders.
//! Run by `scripts/bench-incast.sh`, which builds an optimised `vhca` and
//! passes it in `VHCA_BIN`.
//!
//! `VHCA_BENCH_ROUNDS=N` (default 3).

use vhca_tests::incast::{self, min_max, Incast};

const EXTRA: &str = "rx_buffer = 262144\n";

fn main() {
    let rounds: usize = std::env::var("VHCA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let mut runs: [Vec<Incast>; 2] = [Vec::new(), Vec::new()];
    for r in 0..rounds {
        for (k, fc) in [true, false].into_iter().enumerate() {
            let x = incast::run(fc, EXTRA, 32, 64 << 10);
            println!(
                "run {} flow control {}: drops {} (kernel {} switch {} link {}) retries {} \
                 resent {} stalls {} goodput {:.1} MB/s jain {:.3}",
                r + 1,
                if fc { "on " } else { "off" },
                x.kernel_drops + x.switch_drops + x.link_drops,
                x.kernel_drops,
                x.switch_drops,
                x.link_drops,
                x.retries,
                x.resent,
                x.stalls,
                x.total_goodput() / 1e6,
                x.fairness()
            );
            runs[k].push(x);
        }
    }
    println!("\nflow control | drops min-max | retries min-max | resent min-max | goodput MB/s min-max | Jain min-max");
    for (k, name) in ["on", "off"].iter().enumerate() {
        let v = &runs[k];
        let d = min_max(
            v.iter()
                .map(|x| (x.kernel_drops + x.switch_drops + x.link_drops) as f64),
        );
        let r = min_max(v.iter().map(|x| x.retries as f64));
        let s = min_max(v.iter().map(|x| x.resent as f64));
        let g = min_max(v.iter().map(|x| x.total_goodput() / 1e6));
        let j = min_max(v.iter().map(Incast::fairness));
        println!(
            "{name:>12} | {:.0}-{:.0} | {:.0}-{:.0} | {:.0}-{:.0} | {:.1}-{:.1} | {:.3}-{:.3}",
            d.0, d.1, r.0, r.1, s.0, s.1, g.0, g.1, j.0, j.1
        );
    }
}
