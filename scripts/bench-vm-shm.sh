#!/usr/bin/env bash
# Issue 30's VM figure for the shared-memory link: the same two TCG guests
# (images/vm-pair.sh), their vhca devices on UDP loopback in one boot and on
# the shared-memory link in the next (both nodes `host = "local"` in the fabric
# file, ARCHITECTURE.md §6), alternating, each figure a ratio against the UDP
# boot of the same round:
#   1. ib_write_bw -s 65536 (RC) bandwidth;
#   2. ib_send_lat -s 8 (RC) typical latency.
# The guests, the vhca binary and every command are the same in both boots;
# only the fabric file's two `host` lines differ.
#
# Usage: scripts/bench-vm-shm.sh [ROUNDS]   (default 2; each round = one UDP
#        boot and one shm boot). Env: BENCH_BW_N (ib_write_bw iterations,
#        default 1000), BENCH_LAT_N (ib_send_lat iterations, 1000).
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-2}
BW_N=${BENCH_BW_N:-1000}
LAT_N=${BENCH_LAT_N:-1000}
work=$(mktemp -d /tmp/bench-vm-shm.XXXXXX)

# One boot: server in A, client in B; the client retries until A listens.
# $1 = udp|shm; prints "BW_MiBps LAT_us RC DIR SHM_PACKETS" (NA on failure).
one() {
    local link=$1 out="$work/$1.$2" extra=()
    if [ "$link" = shm ]; then
        extra=(--node-toml 'a:host = "local"' --node-toml 'b:host = "local"')
    fi
    local bw="ib_write_bw -d vhca0 -F -s 65536 -n $BW_N -p 18700"
    local lat="ib_send_lat -d vhca0 -F -s 8 -n $LAT_N -p 18701"
    local retry='r() { i=0; while :; do i=$((i+1)); "$@" </dev/null && return 0; [ $i -ge 30 ] && return 1; sleep 1; done; }; '
    mkdir -p "$out"
    images/vm-pair.sh --out "$out" --timeout 600 --ready '' "${extra[@]}" \
        "ibv_devices; $bw </dev/null && $lat </dev/null" \
        "${retry}r $bw \$SERVER_IP && r $lat \$SERVER_IP" >"$out/pair.out" 2>&1
    local rc=$?
    local b w l s
    b=$(sed -n '/^=== B/,$p' "$out/pair.out")
    w=$(awk '$1 == 65536 && $2 == '"$BW_N"' && NF >= 5 { print $4; exit }' <<<"$b")
    l=$(awk '$1 == 8 && $2 == '"$LAT_N"' && NF >= 6 { print $5; exit }' <<<"$b")
    # Proof of the link in use: the shm link's last report line in the vhca
    # logs ("shm NODE: tx PACKETS ..."); "-" when there is none (UDP).
    s=$(grep -ho 'shm [ab]: tx [0-9]*' "$out"/*.log 2>/dev/null | tail -1 | tr ' ' _)
    echo "${w:-NA} ${l:-NA} $rc $out ${s:--}"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "NA" }'; }

echo "bench-vm-shm: $rounds round(s), ib_write_bw -s 65536 -n $BW_N, ib_send_lat -s 8 -n $LAT_N; logs in $work"
fail=0
for r in $(seq "$rounds"); do
    read -r ubw ulat urc uout _ < <(one udp "$r")
    echo "round $r udp: ib_write_bw ${ubw} MiB/s, ib_send_lat typical ${ulat} us (vm-pair exit $urc, $uout)"
    read -r sbw slat src sout sproof < <(one shm "$r")
    echo "round $r shm: ib_write_bw ${sbw} MiB/s, ib_send_lat typical ${slat} us (vm-pair exit $src, $sout; $sproof)"
    echo "round $r RATIO shm/udp: bw $(ratio "$sbw" "$ubw")x, lat $(ratio "$slat" "$ulat")x"
    [ "$urc" = 0 ] && [ "$src" = 0 ] && [ "$ubw" != NA ] && [ "$sbw" != NA ] || fail=1
done
exit "$fail"
