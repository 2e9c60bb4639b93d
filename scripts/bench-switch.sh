#!/usr/bin/env bash
# One switch hop against a back-to-back cable (issue 26): two optimised vhca
# processes on UDP loopback, cabled to each other or through `vhca switch`,
# alternated round by round (tests/examples/switch_bench.rs). Figures go to
# docs/benchmarks-history.md by hand, with the date; the run also writes
# them to bench-results/switch.tsv (scripts/lib.sh bench_tsv_end) for
# scripts/plot-benchmarks.py.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example switch_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
bench_tsv_begin
VHCA_BIN="$target/release/vhca" "$target/release/examples/switch_bench" 2>/dev/null
bench_tsv_end switch
