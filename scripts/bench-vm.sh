#!/usr/bin/env bash
# Issue 5's benchmark: vhca vs Linux soft-RoCE (rdma_rxe) between the same two
# TCG guests (images/vm-pair.sh), in the same run:
#   1. ib_write_bw -s 65536 (RC) bandwidth: target >= 5x rxe, goal >= 10x;
#   2. ib_send_lat -s 8 (RC) typical latency: target <= 0.5x rxe.
# vhca: the guests' vhca0 devices on the UDP fabric. rxe: rxe0 on the guests'
# virtio-net NICs (a -netdev dgram UDP pair), `rdma link add rxe0 type rxe
# netdev eth0`, GID index 1 (the IPv4 one). Both boots run the same commands
# but for the device; the vhca processes are there (idle) in the rxe boots too.
#
# Usage: scripts/bench-vm.sh [ROUNDS]   (default 2; each round = one vhca boot
#        and one rxe boot, alternating). Env: BENCH_BW_N (ib_write_bw
#        iterations, default 1000), BENCH_LAT_N (ib_send_lat iterations, 1000).
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-2}
BW_N=${BENCH_BW_N:-1000}
LAT_N=${BENCH_LAT_N:-1000}
work=$(mktemp -d /tmp/bench-vm.XXXXXX)

# One boot: server in A, client in B; the client retries until A listens.
# $1 = vhca|rxe; prints "BW_MiBps LAT_us" (empty fields on failure).
one() {
    local dev=$1 out="$work/$1.$2" pre='' dflag
    if [ "$dev" = rxe ]; then
        pre='modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0 || exit 1; rdma link; '
        dflag='-d rxe0 -x 1'
    else
        dflag='-d vhca0'
    fi
    local bw="ib_write_bw $dflag -F -s 65536 -n $BW_N -p 18700"
    local lat="ib_send_lat $dflag -F -s 8 -n $LAT_N -p 18701"
    local retry='r() { i=0; while :; do i=$((i+1)); "$@" </dev/null && return 0; [ $i -ge 30 ] && return 1; sleep 1; done; }; '
    mkdir -p "$out"
    images/vm-pair.sh --out "$out" --timeout 600 --ready '' \
        "${pre}ibv_devices; $bw </dev/null && $lat </dev/null" \
        "${pre}${retry}r $bw \$SERVER_IP && r $lat \$SERVER_IP" >"$out/pair.out" 2>&1
    local rc=$?
    # The client's (B's) result lines: "65536 N peak avg msgrate" and
    # "8 N t_min t_max t_typical ...".
    local b w l
    b=$(sed -n '/^=== B/,$p' "$out/pair.out")
    w=$(awk '$1 == 65536 && $2 == '"$BW_N"' && NF >= 5 { print $4; exit }' <<<"$b")
    l=$(awk '$1 == 8 && $2 == '"$LAT_N"' && NF >= 6 { print $5; exit }' <<<"$b")
    echo "${w:-NA} ${l:-NA} $rc $out"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "NA" }'; }

echo "bench-vm: $rounds round(s), ib_write_bw -s 65536 -n $BW_N, ib_send_lat -s 8 -n $LAT_N; logs in $work"
fail=0
for r in $(seq "$rounds"); do
    read -r vbw vlat vrc vout < <(one vhca "$r")
    echo "round $r vhca: ib_write_bw ${vbw} MiB/s, ib_send_lat typical ${vlat} us (vm-pair exit $vrc, $vout)"
    read -r xbw xlat xrc xout < <(one rxe "$r")
    echo "round $r rxe:  ib_write_bw ${xbw} MiB/s, ib_send_lat typical ${xlat} us (vm-pair exit $xrc, $xout)"
    bwr=$(ratio "$vbw" "$xbw") latr=$(ratio "$vlat" "$xlat")
    echo "round $r RATIO bw vhca/rxe = ${bwr}x (target >= 5, goal >= 10); lat vhca/rxe = ${latr}x (target <= 0.5)"
    [ "$vrc" = 0 ] && [ "$xrc" = 0 ] && [ "$bwr" != NA ] && [ "$latr" != NA ] || fail=1
done
exit "$fail"
