#!/usr/bin/env bash
# Device benchmarks (issue: the device): two optimised vhca processes on UDP
# loopback driven by the userspace test driver, each figure a ratio to a
# baseline measured in the same run (iperf3, UDP ping-pong, UDP datagram rate).
# Figures go to docs/benchmarks-history.md by hand, with the date;
# the run also writes them to bench-results/device.tsv (scripts/lib.sh
# bench_tsv_end) for scripts/plot-benchmarks.py.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
command -v iperf3 >/dev/null || apt_install iperf3
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example device_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
bench_tsv_begin
VHCA_BIN="$target/release/vhca" "$target/release/examples/device_bench" 2>/dev/null
bench_tsv_end device
