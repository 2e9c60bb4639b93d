#!/usr/bin/env bash
# Shared-memory link benchmark (issue 30 item 1): two optimised vhca
# processes on one host, over UDP loopback and then over the shared-memory
# rings (`host` in the fabric file), driven by the userspace test driver;
# RC WRITE 64 KiB against a single-thread memcpy and the 8-byte SEND
# ping-pong p50 against a two-thread shared-memory ping-pong and against a
# four-party relay through shared memory (the architecture's floor on this
# host: two drivers and two devices polling), each baseline measured in the
# same run (tests/examples/shm_bench.rs).
# `RUNS=3 scripts/bench-shm.sh` repeats it; run it under `nice -n 15` on a
# shared host.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
cargo build --release -q -p device --bin vhca
cargo build --release -q -p vhca-tests --example shm_bench
target=$(realpath "${CARGO_TARGET_DIR:-target}")
for run in $(seq 1 "${RUNS:-1}"); do
    echo "run $run"
    VHCA_BIN="$target/release/vhca" "$target/release/examples/shm_bench" 2>/dev/null
done
