#!/usr/bin/env bash
# A/B of two (or more) `vhca` binaries on the shared-memory WRITE benchmark
# (issue 30): alternates them round by round under one `shm_bench` binary,
# so that the host's drifts fall on every binary alike, and prints each
# run's line and each binary's min / median / max of the WRITE's ratio to
# memcpy and of the CPU both `vhca` spent per WRITE.
# Usage: scripts/bench-shm-ab.sh ROUNDS VHCA_A VHCA_B [VHCA_C ...]
#   VHCA_BENCH_WRITES (default 40000) WRITEs a run.
# Two binaries of different ring versions cannot share a ring; each run's
# two `vhca` are the same binary, so that never happens.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
[ $# -ge 3 ] || { sed -n 2,10p "$0" >&2; exit 2; }
rounds=$1
shift
for b in "$@"; do
    [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done
ensure_rust
cargo build --release -q -p vhca-tests --example shm_bench
bench=$(realpath "${CARGO_TARGET_DIR:-target}")/release/examples/shm_bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq 1 "$rounds"); do
    for b in "$@"; do
        text=$(VHCA_BENCH_WRITES=${VHCA_BENCH_WRITES:-40000} VHCA_BENCH_LINKS=shm \
            VHCA_BIN="$(realpath "$b")" timeout 300 "$bench" 2>/dev/null || true)
        ratio=$(grep -o "1\. RC WRITE 64 KiB .* ratio [0-9.]*" <<<"$text" | awk '{print $NF}')
        gbs=$(grep -o "1\. RC WRITE 64 KiB [0-9.]* GB/s" <<<"$text" | awk '{print $6}')
        cpu=$(grep -o "per 64 KiB WRITE [0-9.]* us" <<<"$text" | awk '{print $5}')
        drv=$(grep -o "polling its CQ [0-9.]* us" <<<"$text" | awk '{print $4}')
        full=$(grep -o "tx_full [0-9]*" <<<"$text" | head -1 | awk '{print $2}')
        echo "round $r $b: ratio ${ratio:-?} (${gbs:-?} GB/s) vhca CPU/WRITE ${cpu:-?} us driver ${drv:-?} us tx_full ${full:-?} load $(cut -d' ' -f1 /proc/loadavg)"
        echo "$b ${ratio:-nan} ${cpu:-nan}" >>"$out"
    done
done
for b in "$@"; do
    for col in 2 3; do
        name=$([ $col = 2 ] && echo "ratio to memcpy" || echo "vhca CPU per WRITE (us)")
        grep -F "$b " "$out" | awk -v c=$col '$c != "nan" {print $c}' | sort -n |
            awk -v b="$b" -v n="$name" '{v[NR]=$1} END {if (NR) printf "%s: %s min %s median %s max %s (%d runs)\n", b, n, v[1], v[int((NR+1)/2)], v[NR], NR}'
    done
done
