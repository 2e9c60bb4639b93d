#!/usr/bin/env bash
# Issue 11's benchmark: vhca's RoCEv2 port against Linux soft-RoCE (rdma_rxe)
# between the same two TCG guests on a private bridge (images/roce-pair.sh),
# in the same run:
#   1. ib_write_bw -s 65536 (RC) bandwidth, vhca<->vhca / rxe<->rxe;
#   2. ib_send_lat -s 8 (RC) typical latency, vhca<->vhca / rxe<->rxe;
#   3. the guests' ordinary TCP throughput (iperf3 -t T, B's client sends to
#      A's server) through vhca's shared port (each guest's virtio-net on its
#      vhca's vhost-user-net backend, the vhca-vhca boot) / through plain TAP
#      virtio-net NICs (the rxe-rxe boot);
#   and, for reference, vhca (A, server) <-> rxe (B, client): 1 and 2;
#   and vhca on native IB (images/vm-pair.sh, the UDP fabric) in the same
#   guests: 1 and 2, the figure RoCE is compared with (issue 30 item 2);
#   with BENCH_BASE_BIN, one more vhca-vhca boot with that binary (e.g. main's,
#   the baseline of a change), compared with the vhca under test.
# One round = one vhca-vhca boot, one rxe-rxe boot, one vhca-rxe boot, one
# native-IB boot (and the base boot); each ratio is taken against its baseline
# of the same round, and over all rounds its min and max are printed.
#
# Usage: scripts/bench-roce.sh [--rounds N] [--only rxe] [--out DIR]
#                               [-- ROCE_PAIR_OPTION...]
#   --rounds N   rounds (default 2)
#   --only rxe   only the rxe-rxe baseline boots (vhca's RoCE mode not needed)
#   --out DIR    logs (default: a new /tmp/bench-roce.XXXXXX)
# Env: BENCH_BW_N (ib_write_bw iterations, default 1000), BENCH_LAT_N
# (ib_send_lat iterations, 1000), BENCH_IPERF_T (iperf3 seconds, 5),
# BENCH_VHCA_BIN (a prebuilt vhca binary to test instead of building one),
# BENCH_BASE_BIN (a prebuilt vhca binary to compare with on RoCE; unset: no
# base boot), BENCH_NO_IB=1 (no native-IB boot).
#
# Output: per boot "round R PAIR: ib_write_bw X MiB/s, ib_send_lat typical Y us,
# iperf3 Z Mbit/s"; per round "round R RATIO ..."; then "RATIO ... min A max B"
# per ratio. Exit 0 iff every boot produced its numbers.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

rounds=2 only='' out='' pair_opts=()
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need "$@"; rounds=$2; shift 2;;
        --only) need "$@"; only=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; pair_opts+=("$@"); break;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
case "$only" in ''|rxe) ;; *) vhca_die "--only rxe (or nothing)";; esac
BW_N=${BENCH_BW_N:-1000}
LAT_N=${BENCH_LAT_N:-1000}
IT=${BENCH_IPERF_T:-5}
VHCA_BIN=${BENCH_VHCA_BIN:-}
BASE_BIN=${BENCH_BASE_BIN:-}
if [ -n "$out" ]; then mkdir -p "$out" && out=$(realpath "$out") || exit 1
else out=$(mktemp -d /tmp/bench-roce.XXXXXX); fi

# one A B R IPERF(0|1) [BIN [TAG]]: one boot (with vhca binary BIN, else
# BENCH_VHCA_BIN or a fresh build); prints "BW LAT IPERF RC DIR" (NA on failure).
one() {
    local a=$1 b=$2 r=$3 ip=$4 bin=${5:-$VHCA_BIN} d="$out/$1-$2${6:-}.$3" binopt=()
    [ -n "$bin" ] && binopt=(--vhca "$bin")
    local bw="ib_write_bw -d \$DEV -x \$GIDX -F -s 65536 -n $BW_N -p 18700"
    local lat="ib_send_lat -d \$DEV -x \$GIDX -F -s 8 -n $LAT_N -p 18701"
    local retry='r() { i=0; while :; do i=$((i+1)); "$@" </dev/null && return 0; [ $i -ge 30 ] && return 1; sleep 1; done; }; '
    local srv="$bw </dev/null && $lat </dev/null" cli="${retry}r $bw \$SERVER_IP && r $lat \$SERVER_IP"
    if [ "$ip" = 1 ]; then
        srv="$srv && iperf3 -s -1 -p 18702 </dev/null"
        cli="$cli && r iperf3 -c \$SERVER_IP -p 18702 -t $IT -f m"
    fi
    mkdir -p "$d"
    images/roce-pair.sh --a "$a" --b "$b" --out "$d" --timeout 600 --ready '' "${binopt[@]}" "${pair_opts[@]}" \
        "ip -br addr; $srv" "$cli" >"$d/pair.out" 2>&1
    local rc=$? o w l t
    # The client's (B's) result lines: "65536 N peak avg msgrate",
    # "8 N t_min t_max t_typical ...", iperf3's "... Mbits/sec ... receiver".
    o=$(sed -n '/^=== B/,$p' "$d/pair.out")
    w=$(awk '$1 == 65536 && $2 == '"$BW_N"' && NF >= 5 { print $4; exit }' <<<"$o")
    l=$(awk '$1 == 8 && $2 == '"$LAT_N"' && NF >= 6 { print $5; exit }' <<<"$o")
    t=$(awk '/receiver/ { for (i = 2; i <= NF; i++) if ($i == "Mbits/sec") { print $(i - 1); exit } }' <<<"$o")
    [ "$ip" = 1 ] || t=-
    echo "${w:-NA} ${l:-NA} ${t:-NA} $rc $d"
}
# one_ib R: one native-IB boot of vhca (vm-pair.sh, the UDP fabric), the same
# tools; prints "BW LAT RC DIR".
one_ib() {
    local d="$out/ib-ib.$1" binopt=()
    [ -n "$VHCA_BIN" ] && binopt=(--vhca "$VHCA_BIN")
    local bw="ib_write_bw -d vhca0 -F -s 65536 -n $BW_N -p 18700"
    local lat="ib_send_lat -d vhca0 -F -s 8 -n $LAT_N -p 18701"
    local retry='r() { i=0; while :; do i=$((i+1)); "$@" </dev/null && return 0; [ $i -ge 30 ] && return 1; sleep 1; done; }; '
    mkdir -p "$d"
    images/vm-pair.sh --out "$d" --timeout 600 --ready '' "${binopt[@]}" \
        "$bw </dev/null && $lat </dev/null" "${retry}r $bw \$SERVER_IP && r $lat \$SERVER_IP" \
        >"$d/pair.out" 2>&1
    local rc=$? o w l
    o=$(sed -n '/^=== B/,$p' "$d/pair.out")
    w=$(awk '$1 == 65536 && $2 == '"$BW_N"' && NF >= 5 { print $4; exit }' <<<"$o")
    l=$(awk '$1 == 8 && $2 == '"$LAT_N"' && NF >= 6 { print $5; exit }' <<<"$o")
    echo "${w:-NA} ${l:-NA} $rc $d"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "NA" }'; }
# Collected numbers and ratios, "KIND:NAME VALUE" per line, for min/max.
ratios="$out/ratios"
: >"$ratios"
keep() { [ "$2" = NA ] || echo "$1 $2" >>"$ratios"; }
why() { # DIR: the first error line of a failed boot
    grep -hE 'error:|FAIL|failed|Couldn|Unable' "$1/pair.out" 2>/dev/null | head -1
}

echo "bench-roce: $rounds round(s), ib_write_bw -s 65536 -n $BW_N, ib_send_lat -s 8 -n $LAT_N, iperf3 -t $IT; logs in $out"
fail=0
for r in $(seq "$rounds"); do
    read -r xbw xlat xtcp xrc xd < <(one rxe rxe "$r" 1)
    echo "round $r rxe-rxe:   ib_write_bw ${xbw} MiB/s, ib_send_lat typical ${xlat} us, iperf3 (plain TAP virtio-net) ${xtcp} Mbit/s (exit $xrc, $xd)"
    [ "$xrc" = 0 ] && [ "$xbw" != NA ] && [ "$xlat" != NA ] && [ "$xtcp" != NA ] || { fail=1; echo "  rxe-rxe failed: $(why "$xd")"; }
    keep BASE:rxe_write_bw_MiB/s "$xbw"; keep BASE:rxe_send_lat_us "$xlat"; keep BASE:tap_iperf3_Mbit/s "$xtcp"
    [ "$only" = rxe ] && continue
    read -r vbw vlat vtcp vrc vd < <(one vhca vhca "$r" 1)
    echo "round $r vhca-vhca: ib_write_bw ${vbw} MiB/s, ib_send_lat typical ${vlat} us, iperf3 (vhca shared port) ${vtcp} Mbit/s (exit $vrc, $vd)"
    [ "$vrc" = 0 ] && [ "$vbw" != NA ] && [ "$vlat" != NA ] && [ "$vtcp" != NA ] || { fail=1; echo "  vhca-vhca failed: $(why "$vd")"; }
    read -r ibw ilat _ irc id < <(one vhca rxe "$r" 0)
    echo "round $r vhca-rxe:  ib_write_bw ${ibw} MiB/s, ib_send_lat typical ${ilat} us (exit $irc, $id)"
    [ "$irc" = 0 ] && [ "$ibw" != NA ] && [ "$ilat" != NA ] || { fail=1; echo "  vhca-rxe failed: $(why "$id")"; }
    b1=$(ratio "$vbw" "$xbw") l1=$(ratio "$vlat" "$xlat") t1=$(ratio "$vtcp" "$xtcp")
    b2=$(ratio "$ibw" "$xbw") l2=$(ratio "$ilat" "$xlat")
    echo "round $r RATIO vhca/rxe: bw ${b1}x, lat ${l1}x; tcp shared-port/tap ${t1}x; interop vhca-rxe/rxe-rxe: bw ${b2}x, lat ${l2}x"
    keep RATIO:bw_vhca/rxe "$b1"; keep RATIO:lat_vhca/rxe "$l1"; keep RATIO:tcp_shared/tap "$t1"
    keep RATIO:bw_vhca-rxe/rxe "$b2"; keep RATIO:lat_vhca-rxe/rxe "$l2"
    keep BASE:vhca_roce_write_bw_MiB/s "$vbw"; keep BASE:vhca_roce_send_lat_us "$vlat"
    if [ "${BENCH_NO_IB:-0}" != 1 ]; then
        read -r nbw nlat nrc nd < <(one_ib "$r")
        echo "round $r ib-ib:     ib_write_bw ${nbw} MiB/s, ib_send_lat typical ${nlat} us (native IB, exit $nrc, $nd)"
        [ "$nrc" = 0 ] && [ "$nbw" != NA ] && [ "$nlat" != NA ] || { fail=1; echo "  ib-ib failed: $(why "$nd")"; }
        b3=$(ratio "$vbw" "$nbw") l3=$(ratio "$vlat" "$nlat")
        echo "round $r RATIO vhca RoCE/native IB: bw ${b3}x, lat ${l3}x"
        keep BASE:ib_write_bw_MiB/s "$nbw"; keep BASE:ib_send_lat_us "$nlat"
        keep RATIO:bw_roce/ib "$b3"; keep RATIO:lat_roce/ib "$l3"
    fi
    if [ -n "$BASE_BIN" ]; then
        read -r obw olat _ orc od < <(one vhca vhca "$r" 0 "$BASE_BIN" -base)
        echo "round $r vhca-vhca (BENCH_BASE_BIN): ib_write_bw ${obw} MiB/s, ib_send_lat typical ${olat} us (exit $orc, $od)"
        [ "$orc" = 0 ] && [ "$obw" != NA ] && [ "$olat" != NA ] || { fail=1; echo "  base failed: $(why "$od")"; }
        b4=$(ratio "$vbw" "$obw") l4=$(ratio "$vlat" "$olat")
        echo "round $r RATIO vhca/base: bw ${b4}x, lat ${l4}x"
        keep BASE:base_roce_write_bw_MiB/s "$obw"; keep BASE:base_roce_send_lat_us "$olat"
        keep RATIO:bw_vhca/base "$b4"; keep RATIO:lat_vhca/base "$l4"
    fi
done
# min and max over the rounds: the rxe-rxe baseline (BASE) and every ratio.
if [ -s "$ratios" ]; then
    awk '{ n[$1]++; v = $2 + 0; if (!($1 in mn) || v < mn[$1]) mn[$1] = v; if (!($1 in mx) || v > mx[$1]) mx[$1] = v }
         END { for (k in n) { split(k, p, ":"); printf "%s %-22s min %s max %s (%d rounds)\n", p[1], p[2], mn[k], mx[k], n[k] } }' \
        "$ratios" | sort
fi
exit "$fail"
