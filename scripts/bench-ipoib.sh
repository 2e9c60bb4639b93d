#!/usr/bin/env bash
# IPoIB against the same guests' virtio-net (issue 26): TCP throughput with
# iperf3 between two TCG guests on a switched subnet that OpenSM brings up
# (images/subnet-tests.sh --bench). In each boot guest B alternates 10 s
# iperf3 runs to A over ib0 (connected mode: RC QPs through the switch) and
# over the guests' virtio-net link (a QEMU -netdev dgram pair), 3 rounds,
# then 3 runs over ib0 in datagram mode (UD). Prints every figure and the
# ratios against virtio-net of the same round; the figures go to
# docs/benchmarks-history.md by hand, with the date.
#
# Usage: scripts/bench-ipoib.sh [BOOTS]   (default 1)
set -uo pipefail
cd "$(dirname "$0")/.."

boots=${1:-1}
work=$(mktemp -d /tmp/bench-ipoib.XXXXXX)
echo "bench-ipoib: $boots boot(s); logs in $work"
all=''
for b in $(seq "$boots"); do
    images/subnet-tests.sh --bench --timeout 1800 --out "$work/boot$b" >"$work/boot$b.out" 2>&1
    rc=$?
    lines=$(tr -d '\r' <"$work/boot$b/console-b.log" | grep -E '^BENCH ')
    echo "$lines" | sed "s/^/boot $b: /"
    [ "$rc" = 0 ] || echo "boot $b: subnet-tests.sh exit $rc (see $work/boot$b.out)"
    all+="$lines"$'\n'
done
# Per round: connected-mode IPoIB / virtio-net of the same round.
awk '
    $1 == "BENCH" && $2 == "ipoib" { ib[$5] = $3 }
    $1 == "BENCH" && $2 == "virtio" { if ($5 in ib && $3 > 0) { r = ib[$5] / $3; n++; s = s sprintf(" %.2f", r)
        if (min == "" || r < min) min = r; if (max == "" || r > max) max = r } }
    $1 == "BENCH" && $2 == "ipoib-datagram" { d = d " " $3 }
    END {
        if (n == 0) { print "RATIO ipoib(connected)/virtio-net: no figures"; exit 1 }
        printf "RATIO ipoib(connected)/virtio-net per round:%s (min %.2f, max %.2f)\n", s, min, max
        print "ipoib datagram mode, Mbit/s:" d
    }' <<<"$all"
