#!/usr/bin/env bash
# RC under loss (issue 14): two optimised vhca processes on UDP loopback with
# loss injected by their fault stages; RC WRITE and READ 64 KiB throughput per
# condition as a ratio to the lossless figure of the same run, with loss probes
# on and off. Figures go to BENCHMARKS.md by hand, with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example loss_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
VHCA_BIN="$target/release/vhca" "$target/release/examples/loss_bench" 2>/dev/null
