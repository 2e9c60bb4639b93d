#!/usr/bin/env bash
# OpenSM's sweep of a generated fat tree (issue 27): the time from OpenSM's
# start in a guest to its "SUBNET UP", for 32 HCAs (8 leaves x 4, 4 spines:
# 12 switches) and 128 HCAs (16 leaves x 8, 8 spines: 24 switches), every
# HCA but the guest's a `vhca` process with no guest, in two namespaces
# joined by an MTU-1500 veth (images/fabric-tests.sh --sweep-only). Also
# the fabric's CPU at rest (all its processes, 10 s, % of one core) and its
# memory per HCA and per switch (RSS). The sweep is OpenSM's (a TCG guest)
# as much as the fabric's: the ratio 128/32 is the figure to watch.
#
# Usage: scripts/bench-opensm-sweep.sh [RUNS]   (default 3)
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-3}
work=$(mktemp -d /tmp/bench-sweep.XXXXXX)
echo "bench-opensm-sweep: $runs run(s) per size; logs in $work"
for r in $(seq "$runs"); do
    for size in "32 8 4 4" "128 16 8 8"; do
        set -- $size
        images/fabric-tests.sh --sweep-only --leaves "$2" --spines "$3" --hosts-per-leaf "$4" \
            --out "$work/$1-$r" >"$work/$1-$r.out" 2>&1
        rc=$?
        grep -E '^BENCH|FAIL' "$work/$1-$r.out" | sed "s/^/$1 HCAs, run $r: /"
        [ "$rc" = 0 ] || echo "$1 HCAs, run $r: fabric-tests.sh exit $rc (see $work/$1-$r.out)"
    done
done | tee "$work/all.txt"
awk '
    / HCAs, run / && $6 == "sweep_secs" { s[$1] = s[$1] " " $7; if (!($1 in min) || $7 < min[$1]) min[$1] = $7; if ($7 > max[$1]) max[$1] = $7 }
    END {
        for (n in s) printf "sweep %s HCAs, s:%s (min %s, max %s)\n", n, s[n], min[n], max[n]
        if ((32 in min) && (128 in min) && min[32] > 0)
            printf "RATIO sweep 128/32 HCAs: min %.2f, max %.2f\n", min[128] / max[32], max[128] / min[32]
    }' "$work/all.txt"
