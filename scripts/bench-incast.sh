#!/usr/bin/env bash
# 8-to-1 incast through one `vhca switch` with IBA 7.9 link flow control on
# and off (issue 27 item 4): drops, retries, goodput and Jain's fairness
# index, three runs of each, min and max (tests/examples/incast_bench.rs).
# Figures go to docs/benchmarks-history.md by hand, with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example incast_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
VHCA_BIN="$target/release/vhca" "$target/release/examples/incast_bench" 2>/dev/null
