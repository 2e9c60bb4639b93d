#!/usr/bin/env bash
# One switch hop against a back-to-back cable (issue 26): two optimised vhca
# processes on UDP loopback, cabled to each other or through `vhca switch`,
# alternated round by round (tests/examples/switch_bench.rs). Figures go to
# BENCHMARKS.md by hand, with the date.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example switch_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
VHCA_BIN="$target/release/vhca" "$target/release/examples/switch_bench" 2>/dev/null
