#!/usr/bin/env bash
# A generated fat tree (issue 27): all-to-all RC throughput against the same
# HCAs in back-to-back pairs, latency per switch hop, and the idle CPU and
# memory of a 32-HCA, 10-switch fabric; optimised vhca processes on UDP
# loopback, static mode (tests/examples/fabric_bench.rs). Figures go to
# docs/benchmarks-history.md by hand, with the date; the run also writes
# them to bench-results/fabric.tsv (scripts/lib.sh bench_tsv_end) for
# scripts/plot-benchmarks.py.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example fabric_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
bench_tsv_begin
VHCA_BIN="$target/release/vhca" "$target/release/examples/fabric_bench" 2>/dev/null
bench_tsv_end fabric
