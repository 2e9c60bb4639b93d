#!/usr/bin/env bash
# RC under loss (issue 14): two optimised vhca processes on UDP loopback with
# loss injected by their fault stages; RC WRITE and READ 64 KiB throughput per
# condition as a ratio to the lossless figure of the same run, with loss probes
# on and off. Figures go to docs/benchmarks-history.md by hand, with the date;
# the run also writes them to bench-results/loss.tsv (scripts/lib.sh
# bench_tsv_end) for scripts/plot-benchmarks.py.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example loss_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
bench_tsv_begin
VHCA_BIN="$target/release/vhca" "$target/release/examples/loss_bench" 2>/dev/null
bench_tsv_end loss
