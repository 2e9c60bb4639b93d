#!/usr/bin/env bash
# Issue 31's RoCE incast between guests: two TCG guests (images/roce-pair.sh)
# with an ECN-marking bottleneck in place of the bridge (roce-pair.sh
# --bottleneck: the kernel's tbf + red/fq_codel ecn where it has them, else
# ecn-switch, a userspace RED/ECN switch, which the log says), K parallel
# ib_write_bw streams B -> A (one RC QP each, ports 18701..) and a victim
# ib_send_lat sharing the path, per set-up, in the same run:
#   dcqcn    vhca both sides, --dcqcn=rp_clamp_tgt_rate=1 (the simulation's)
#   dcqcn0   vhca both sides, --dcqcn (mlx5's defaults: rp_clamp_tgt_rate=0)
#   dcqcn1g  as dcqcn with rp_max_rate=1000: the reaction point's "line
#            rate" 1 Gb/s instead of the port's 40 Gb/s, so that the
#            bottleneck is a tenth of it, not 1/400
#   dcqcns   as dcqcn1g with the time constants and steps scaled to the
#            slow bottleneck (BENCH_SCALED, default rp_dce_tcp_rtt=100,
#            rp_time_reset=3000, rp_ai_rate=1, rp_hai_rate=5): mlx5's are
#            sized for CNPs every few microseconds at 40-100 Gb/s
#   nocc     vhca both sides, DCQCN off
#   rxe      Linux soft-RoCE both sides (no congestion control at all)
# Per boot: A serves everything; B first runs the victim alone (unloaded),
# then starts the K writers (-D seconds) and, once its RoCE port has sent
# 20 000 more packets (the hw counter tx_packets, rxe's sent_pkts; at most
# 60 s) and BENCH_VDELAY s more (3), the victim again (loaded): on a TCG
# guest the writers take 5-10 s to start, and a fixed delay let the victim
# run before them. Both guests print their port's cc_* hw counters at the end.
#
# Usage: scripts/bench-cc-roce.sh [--rounds N] [--setups "dcqcn nocc rxe"]
#                                 [--out DIR] [-- ROCE_PAIR_OPTION...]
# Env: BENCH_RATE (bottleneck bits/s, default 100M), BENCH_RED (its RED
# profile, roce-pair.sh's ",min=..,max=..,max_p=..,cap=.." tail; default
# none: 8K..32K, 0.2, 128K), BENCH_K (writers, 4), BENCH_D (their seconds,
# 25), BENCH_LAT_N (victim iterations, 1000), BENCH_VHCA_BIN, BENCH_ECN_SWITCH
# (prebuilt binaries; else roce-pair.sh builds them).
#
# Output per boot: "round R SETUP: bottleneck delivered X Mbit/s to A (its
# mean over the seconds with traffic, from ecn-switch's series), B resent P %
# of its packets (vhca's counters; goodput ~ X * (1 - P/100)); perftest sum S Mbit/s (streams a b c d),
# Jain J, victim p50/p99 unloaded U50/U99 us loaded L50/L99 us, A: ce_seen
# cnps_sent, B: cnps_received rate_cuts, bottleneck to A: marked early_drops
# tail_drops q_p99"; then min and max over the rounds per set-up and figure.
# Exit 0 iff every boot produced its numbers.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

rounds=1 setups="dcqcn nocc rxe" out='' pair_opts=()
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need "$@"; rounds=$2; shift 2;;
        --setups) need "$@"; setups=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; pair_opts+=("$@"); break;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
for s in $setups; do
    case "$s" in dcqcn|dcqcn0|dcqcn1g|dcqcns|nocc|rxe) ;; *) vhca_die "--setups: '$s' is not dcqcn, dcqcn0, dcqcn1g, dcqcns, nocc or rxe";; esac
done
RATE=${BENCH_RATE:-100M}
RED=${BENCH_RED:-}
K=${BENCH_K:-4}
D=${BENCH_D:-25}
VDELAY=${BENCH_VDELAY:-3}
LAT_N=${BENCH_LAT_N:-1000}
SCALED=${BENCH_SCALED:-rp_clamp_tgt_rate=1,rp_max_rate=1000,rp_dce_tcp_rtt=100,rp_time_reset=3000,rp_ai_rate=1,rp_hai_rate=5}
if [ -n "$out" ]; then mkdir -p "$out" && out=$(realpath "$out") || exit 1
else out=$(mktemp -d /tmp/bench-cc-roce.XXXXXX); fi
binopt=()
[ -n "${BENCH_VHCA_BIN:-}" ] && binopt+=(--vhca "$BENCH_VHCA_BIN")
[ -n "${BENCH_ECN_SWITCH:-}" ] && binopt+=(--ecn-switch "$BENCH_ECN_SWITCH")

ctr='for c in cc_ce_seen cc_cnps_sent cc_cnps_received cc_rate_cuts; do printf "CTR %s %s\n" $c "$(cat /sys/class/infiniband/$DEV/ports/1/hw_counters/$c 2>/dev/null || echo NA)"; done'
bw="ib_write_bw -d \$DEV -x \$GIDX -F -s 65536 -D $D"
lat="ib_send_lat -d \$DEV -x \$GIDX -F -s 8 -n $LAT_N"
srv="ip -br addr; "
srv+="$lat -p 18690 >/tmp/lat0 2>&1 </dev/null & $lat -p 18691 >/tmp/lat1 2>&1 </dev/null & "
srv+="for i in \$(seq $K); do $bw -p \$((18700 + i)) >/tmp/bw\$i 2>&1 </dev/null & done; wait; $ctr"
retry='r() { i=0; while :; do i=$((i+1)); "$@" </dev/null && return 0; [ $i -ge 30 ] && return 1; sleep 1; done; }; '
cli="${retry}r $lat -p 18690 \$SERVER_IP >/tmp/lat0 2>&1; "
cli+="for i in \$(seq $K); do r $bw -p \$((18700 + i)) \$SERVER_IP >/tmp/bw\$i 2>&1 & done; "
cli+="pk() { cat /sys/class/infiniband/\$DEV/ports/1/hw_counters/tx_packets 2>/dev/null || cat /sys/class/infiniband/\$DEV/ports/1/hw_counters/sent_pkts 2>/dev/null || echo 0; }; "
cli+="p0=\$(pk); w=0; while [ \$((\$(pk) - p0)) -lt 20000 ] && [ \$w -lt 120 ]; do sleep 0.5; w=\$((w + 1)); done; "
cli+="echo \"victim: after \$w waits, \$((\$(pk) - p0)) packets sent\"; sleep $VDELAY; r $lat -p 18691 \$SERVER_IP >/tmp/lat1 2>&1; wait; "
cli+="for f in lat0 lat1 \$(for i in \$(seq $K); do echo bw\$i; done); do echo \"FILE /tmp/\$f\"; cat /tmp/\$f; done; $ctr"

# one SETUP R: one boot; prints its line's fields (NA where missing), then
# the exit status and the folder.
one() {
    local s=$1 r=$2 d="$out/$1.$2" args=()
    case "$s" in
        dcqcn) args=(--a vhca --b vhca --vhca-arg --dcqcn=rp_clamp_tgt_rate=1);;
        dcqcn0) args=(--a vhca --b vhca --vhca-arg --dcqcn);;
        dcqcn1g) args=(--a vhca --b vhca --vhca-arg --dcqcn=rp_clamp_tgt_rate=1,rp_max_rate=1000);;
        dcqcns) args=(--a vhca --b vhca --vhca-arg "--dcqcn=$SCALED");;
        nocc) args=(--a vhca --b vhca);;
        rxe) args=(--a rxe --b rxe);;
    esac
    mkdir -p "$d"
    images/roce-pair.sh "${args[@]}" --bottleneck "$RATE$RED" --out "$d" --timeout 240 --ready '' \
        "${binopt[@]}" "${pair_opts[@]}" "$srv" "$cli" >"$d/pair.out" 2>&1
    local rc=$? link resent
    # The bottleneck's own count of what it delivered to A: mean Mbit/s over
    # the seconds it carried more than 1 MB (the writers' time), and how
    # many such seconds. perftest's BW figures inside a TCG guest come from
    # the guest's TSC and its calibrated MHz (-F ignores a mismatch), which a
    # loaded host skews from boot to boot: they give the streams' shares
    # (Jain's index), the switch gives the rate.
    link=$(awk '/port=ta / { split($3, b, "="); if (b[2] > 1000000) { n++; s += b[2] } }
        END { if (n) printf "%.1f %d", s * 8 / n / 1e6, n; else print "NA 0" }' "$d/ecn-switch.series" 2>/dev/null)
    # B's vhca: packets resent (go-back-N, probes) out of those sent.
    resent=$(awk '/engine:/ { for (i = 1; i < NF; i++) { if ($i == "tx_packets") t = $(i + 1); if ($i == "resent_packets") r = $(i + 1) } }
        END { if (t > 0) printf "%.1f", 100 * r / t; else print "NA" }' "$d/vhca-b.log" 2>/dev/null)
    echo -n "${link:-NA 0} ${resent:-NA} "
    awk -v K="$K" -v LATN="$LAT_N" -v rc="$rc" -v dir="$d" '
        /^=== A/ { side = "A"; f = "" } /^=== B/ { side = "B"; f = "" }
        /FILE \/tmp\// { f = $2 }
        side == "B" && f ~ /lat/ && $1 == 8 && $2 == LATN && NF >= 9 { p50[f] = $5; p99[f] = $8 }
        side == "B" && f ~ /bw/ && $1 == 65536 && NF >= 5 { bw[f] = $4 * 8 * 1.048576 }
        /^CTR / { ctr[side, $2] = $3 }
        /ecn-switch port=ta / { for (i = 1; i <= NF; i++) { split($i, kv, "="); sw[kv[1]] = kv[2] } }
        /qdisc ta:/ { q = $0 }
        function v(x) { return x == "" ? "NA" : x }
        END {
            n = 0; s = 0; s2 = 0; list = ""
            for (i = 1; i <= K; i++) { x = bw["/tmp/bw" i]; list = list " " v(x == "" ? "" : sprintf("%.1f", x)); if (x != "") { n++; s += x; s2 += x * x } }
            jain = (n == K && s2 > 0) ? sprintf("%.3f", s * s / (K * s2)) : "NA"
            gp = (n == K) ? sprintf("%.1f", s) : "NA"
            if (q != "") { m = q; sub(/.*marked /, "", m); split(m, mm, " "); sw["marked"] = mm[1] }
            printf "%s %s%s %s %s %s %s %s %s %s %s %s %s %s %s %s %s %s\n", gp, "[", list " ]", jain,
                v(p50["/tmp/lat0"]), v(p99["/tmp/lat0"]), v(p50["/tmp/lat1"]), v(p99["/tmp/lat1"]),
                v(ctr["A", "cc_ce_seen"]), v(ctr["A", "cc_cnps_sent"]), v(ctr["B", "cc_cnps_received"]), v(ctr["B", "cc_rate_cuts"]),
                v(sw["marked"]), v(sw["early_drops"]), v(sw["tail_drops"]), v(sw["q_p99"]), rc, dir
        }' "$d/pair.out"
}

figs="$out/figures"
: >"$figs"
keep() { case "$3" in NA|'') ;; *) echo "$1:$2 $3" >>"$figs";; esac; }
echo "bench-cc-roce: $rounds round(s), set-ups: $setups; bottleneck $RATE$RED; $K x ib_write_bw -s 65536 -D $D, victim ib_send_lat -s 8 -n $LAT_N; logs in $out"
fail=0
for r in $(seq "$rounds"); do
    for s in $setups; do
        line=$(one "$s" "$r")
        # link secs resent% gp [ streams ] jain u50 u99 l50 l99 ce cnps_sent cnps_recv cuts marked early tail qp99 rc dir
        read -r lk lks rs gp rest <<<"$line"
        streams=$(sed 's/^\[\(.*\)\].*/\1/' <<<"$rest")
        read -r jain u50 u99 l50 l99 ce cs cr cuts mk ed td qp rc dir <<<"$(sed 's/^\[.*\] //' <<<"$rest")"
        gpe=$(awk -v l="$lk" -v r="$rs" 'BEGIN { if (l != "NA" && r != "NA") printf "%.1f", l * (1 - r / 100); else print "NA" }')
        echo "round $r $s: bottleneck delivered $lk Mbit/s to A (mean of $lks s), B resent $rs % of its packets (goodput ~$gpe Mbit/s); perftest sum $gp Mbit/s (streams$streams), Jain $jain, victim p50/p99 unloaded $u50/$u99 us loaded $l50/$l99 us, A: ce_seen $ce cnps_sent $cs, B: cnps_received $cr rate_cuts $cuts, bottleneck to A: marked $mk early_drops $ed tail_drops $td q_p99 $qp B (exit $rc, $dir)"
        if [ "$rc" != 0 ] || [ "$gp" = NA ] || [ "$l99" = NA ]; then
            fail=1
            echo "  $s failed: $(grep -hE 'error:|FAIL|failed|Couldn|Unable' "$dir/pair.out" 2>/dev/null | head -1)"
        fi
        keep "$s" bottleneck_Mbit/s "$lk"; keep "$s" resent_pct "$rs"; keep "$s" goodput_est_Mbit/s "$gpe"; keep "$s" jain "$jain"
        keep "$s" victim_p99_unloaded_us "$u99"; keep "$s" victim_p99_loaded_us "$l99"
        [ "$u99" != NA ] && [ "$l99" != NA ] &&
            keep "$s" victim_p99_loaded/unloaded "$(awk -v a="$l99" -v b="$u99" 'BEGIN { if (b > 0) printf "%.2f", a / b }')"
        keep "$s" cnps_sent "$cs"; keep "$s" rate_cuts "$cuts"; keep "$s" marked "$mk"
        keep "$s" drops "$(awk -v a="$ed" -v b="$td" 'BEGIN { if (a != "NA" && b != "NA") print a + b }')"
        keep "$s" queue_p99_B "$qp"
    done
done
if [ -s "$figs" ]; then
    awk '{ n[$1]++; v = $2 + 0; if (!($1 in mn) || v < mn[$1]) mn[$1] = v; if (!($1 in mx) || v > mx[$1]) mx[$1] = v }
         END { for (k in n) { split(k, p, ":"); printf "%-7s %-28s min %s max %s (%d rounds)\n", p[1], p[2], mn[k], mx[k], n[k] } }' \
        "$figs" | sort
fi
exit "$fail"
