#!/usr/bin/env bash
# IBA congestion control between vhca processes (issue 31 item 2): the 8-to-1
# incast through one `vhca switch` with the fabric file's `[ib_cc]` against
# the same fabric without it, alternating run by run, and a victim flow on
# another switch port timed unloaded and during the incast: goodput, Jain's
# index, drops, retries, FECN marked/seen, BECNs, rate cuts, the victim's p99
# (tests/examples/cc_ib_bench.rs). Rounds: VHCA_BENCH_ROUNDS (default 3), or
# the first argument. Figures go to BENCHMARKS.md by hand, with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
export VHCA_BENCH_ROUNDS="${1:-${VHCA_BENCH_ROUNDS:-3}}"
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example cc_ib_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
VHCA_BIN="$target/release/vhca" "$target/release/examples/cc_ib_bench" 2>/dev/null
