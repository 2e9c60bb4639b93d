#!/usr/bin/env bash
# A fabric across two hosts against one host (issue 27 item 3): two optimised
# vhca processes cabled back to back, keyed, across a 1500-byte veth between
# two network namespaces (IB MTU 1024) or on UDP loopback (IB MTU 4096),
# alternated round by round (tests/examples/underlay_bench.rs): RC WRITE
# throughput and SEND ping-pong latency, each round's ratios and their min and
# max. Needs root (ip netns); the namespaces and the veth (s12mtu-*) are
# deleted when it ends. Figures go to docs/benchmarks-history.md by hand, with
# the date.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example underlay_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
VHCA_BENCH_ROUNDS=${VHCA_BENCH_ROUNDS:-3} VHCA_BIN="$target/release/vhca" \
    "$target/release/examples/underlay_bench" 2>/dev/null
