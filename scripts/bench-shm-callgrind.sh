#!/usr/bin/env bash
# Instructions the two `vhca` processes of the shared-memory WRITE bench
# execute (issue 30): a count this host's bimodal speed cannot move, for A/B
# of data-path changes. Each `vhca` runs under callgrind (`--busy-poll 0`, so
# that no spinning is counted); prints each process's program total and the
# ring packets it sent. Usage:
#   scripts/bench-shm-callgrind.sh [VHCA_BINARY [OUT_DIR]]
# VHCA_BINARY defaults to a release build with line tables (so that
# `callgrind_annotate OUT_DIR/cg.PID` names lines), made in
# target/callgrind; OUT_DIR to target/callgrind/run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 2; }
bin=${1:-}
if [ -z "$bin" ]; then
    CARGO_TARGET_DIR=target/callgrind CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
        cargo build --release -q -p device --bin vhca
    bin=$(realpath target/callgrind/release/vhca)
fi
out=$(realpath -m "${2:-target/callgrind/run}")
mkdir -p "$out"
rm -f "$out"/cg.*
cargo build --release -q -p vhca-tests --example shm_bench
cat > "$out/wrap.sh" <<W
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$out/cg.%p $bin "\$@"
W
chmod +x "$out/wrap.sh"
VHCA_BENCH_WRITES=${VHCA_BENCH_WRITES:-1000} VHCA_BENCH_QUICK=1 VHCA_BENCH_LINKS=shm \
    VHCA_BENCH_VHCA_ARGS="--busy-poll 0" VHCA_BIN="$out/wrap.sh" \
    timeout 900 target/release/examples/shm_bench 2>/dev/null > "$out/bench.txt"
shopt -s nullglob
profiles=("$out"/cg.*)
[ ${#profiles[@]} = 2 ] || { echo "expected 2 callgrind profiles in $out, found ${#profiles[@]} (bench output: $out/bench.txt)" >&2; exit 1; }
for f in "${profiles[@]}"; do
    echo "$(basename "$f"): $(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/{print $1}') instructions"
done
grep -o "shm n[01]: tx [0-9]* ([0-9]* B) rx [0-9]*" "$out/bench.txt"
