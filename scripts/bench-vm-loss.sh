#!/usr/bin/env bash
# Issue 14's VM benchmark: RC under loss between two TCG guests, vhca's RoCEv2
# port beside Linux soft-RoCE (rdma_rxe) on the same private bridge
# (images/roce-pair.sh), each stack against its own lossless figure of the run.
#
# Per stack (vhca-vhca, rxe-rxe) and condition, one boot runs, client in B:
#   ib_write_bw -s 65536 -n BW_N, ib_read_bw -s 65536 -n BW_N (RC, perftest's
#   QP timeout 14 = 67 ms), ibv_rc_pingpong -s 4096 -n PP_N (usec/iter),
#   ib_atomic_bw -n ATOMIC_N (8-byte FETCH_ADDs, max_rd_atomic outstanding;
#   ops/s from perftest's message rate; issue 30).
# Conditions:
#   loss P   the bridge drops P % of all frames both ways (roce-pair.sh --loss:
#            an nft rule on the bridge's forward hook; the same for both stacks)
#   dupreord 2 % duplicated + 5 % reordered packets both ways. No bridge rule can
#            reorder, so each stack gets it at its own sender: vhca by its fault
#            stage (--fault dup=0.02,reorder=0.05), rxe by netem on each guest's
#            eth0 (`netem duplicate 2% reorder 5% delay 200us`: 5 % of the frames
#            skip the 200 us delay the others wait, so they overtake them).
# Every tool runs under `timeout` in the guest: a stack that stalls (soft-RoCE
# is known to at 10 % loss) is reported as "stall", not waited for.
#
# Usage: scripts/bench-vm-loss.sh [--rounds N] [--stacks "vhca rxe"]
#                                 [--conditions "0 1 5 10 dupreord"] [--out DIR]
# Env: BENCH_BW_N (default 500), BENCH_PP_N (default 500), BENCH_TOOL_T
# (seconds per tool before it counts as stalled, default 150), BENCH_TOOLS
# (which tools run, default "write read pp"; e.g. "write" alone, so that the
# counters below are WRITE's; "atomic" adds ib_atomic_bw), BENCH_ATOMIC_N
# (default 50000), BENCH_VHCA_BIN (a prebuilt vhca binary, e.g.
# another tree's, to compare in the same minutes; default: built here),
# BENCH_TAP_GSO=keep (do not pass --no-tap-gso: for a binary without it).
#
# For a vhca stack each boot also prints both vhca processes' recovery
# counters (their reports at a device reset and at exit, summed: a reset
# starts the engine's counters again): A is the server (the WRITE's
# responder), B the client (the requester of WRITE and READ).
#
# Output: one line per boot with MiB/s, usec/iter and ops/s, then per stack and
# condition "RATIO stack cond write X read Y atomic A pingpong-time Z" against the
# same round's lossless boot of that stack, and min/max over the rounds.
# Exit 0 iff every lossless boot produced its numbers.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

rounds=1 stacks="vhca rxe" conds="0 1 5 10 dupreord" out=''
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need "$@"; rounds=$2; shift 2;;
        --stacks) need "$@"; stacks=$2; shift 2;;
        --conditions) need "$@"; conds=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
case "$rounds" in ''|*[!0-9]*|0) vhca_die "--rounds takes a positive number";; esac
for s in $stacks; do case "$s" in vhca|rxe) ;; *) vhca_die "--stacks: vhca and/or rxe";; esac; done
for c in $conds; do
    case "$c" in dupreord) ;; ''|*[!0-9]*) vhca_die "--conditions: percentages or dupreord";; esac
done
TOOLS=${BENCH_TOOLS:-write read pp}
for t in $TOOLS; do case "$t" in write|read|pp|atomic) ;; *) vhca_die "BENCH_TOOLS: write, read, pp and/or atomic";; esac; done
BW_N=${BENCH_BW_N:-500}
PP_N=${BENCH_PP_N:-500}
AT_N=${BENCH_ATOMIC_N:-50000}
TT=${BENCH_TOOL_T:-150}
if [ -n "$out" ]; then mkdir -p "$out" && out=$(realpath "$out") || exit 1
else out=$(mktemp -d /tmp/bench-vm-loss.XXXXXX); fi

# one STACK COND ROUND: one boot; prints "WRITE READ PP ATOMIC RC DIR" (NA, or stall
# when the tool hit its timeout).
one() {
    local s=$1 c=$2 r=$3 d="$out/$1-$2.$3" opts=() pre=''
    # vhca sends frame by frame in every boot of this bench (issue 30): the
    # bridge's drop rule sees a GSO run as one frame, and a wire drops single
    # frames. (A vhca binary older than --no-tap-gso: set BENCH_TAP_GSO=keep.)
    [ "$s" = vhca ] && [ "${BENCH_TAP_GSO:-}" != keep ] && opts+=(--vhca-arg --no-tap-gso)
    case "$c" in
        dupreord)
            # (/usr/sbin/tc: the guest's busybox sh would run its own tc
            # applet, which has no netem, for a bare `tc`.)
            if [ "$s" = vhca ]; then opts+=(--vhca-arg --fault --vhca-arg dup=0.02,reorder=0.05)
            else pre='/usr/sbin/tc qdisc add dev eth0 root netem duplicate 2% reorder 5% delay 200us && '; fi;;
        0) ;;
        *) opts+=(--loss "$c");;
    esac
    local t="timeout $TT"
    local wr="ib_write_bw -d \$DEV -x \$GIDX -F -s 65536 -n $BW_N -p 18710"
    local rd="ib_read_bw -d \$DEV -x \$GIDX -F -s 65536 -n $BW_N -p 18711"
    local pp="ibv_rc_pingpong -d \$DEV -g \$GIDX -s 4096 -n $PP_N -p 18712"
    local at="ib_atomic_bw -d \$DEV -x \$GIDX -F -n $AT_N -p 18713"
    local retry='r() { i=0; while :; do i=$((i+1)); "$@" </dev/null && return 0; e=$?; [ $e = 124 ] || [ $e = 143 ] && return $e; [ $i -ge 30 ] && return 1; sleep 1; done; }; '
    # Each tool's status is printed ("tool-exit NAME RC") so a stall (124) is
    # told apart from a failure; the server goes on to the next tool either way.
    local srv="$pre" cli="${pre}${retry}" tool cmd
    for tool in $TOOLS; do
        case "$tool" in write) cmd=$wr;; read) cmd=$rd;; pp) cmd=$pp;; atomic) cmd=$at;; esac
        srv+="$t $cmd </dev/null; echo tool-exit $tool \$?; "
        cli+="r $t $cmd \$SERVER_IP; echo tool-exit $tool \$?; "
    done
    mkdir -p "$d"
    [ -n "${BENCH_VHCA_BIN:-}" ] && opts+=(--vhca "$BENCH_VHCA_BIN")
    images/roce-pair.sh --a "$s" --b "$s" --out "$d" --timeout $((TT * 3 + 400)) --ready '' "${opts[@]}" \
        "ip -br addr; $srv" "$cli" >"$d/pair.out" 2>&1
    local rc=$? o w rdv p a
    o=$(sed -n '/^=== B/,$p' "$d/pair.out")
    # perftest: "SIZE N peak avg msgrate", taken from the tool's own part of
    # B's output (up to its "tool-exit NAME" line: a stalled WRITE prints no
    # line, and the next line is READ's): column COL (4: average MB/s, 5:
    # message rate in Mpps).
    fig() {
        awk -v t="$1" -v size="$2" -v n="$3" -v col="$4" '$1 == size && $2 == n && NF >= 5 { v = $col }
            $1 == "tool-exit" { if ($2 == t) { if (v != "") print v; exit } v = "" }' <<<"$o"
    }
    w=$(fig write 65536 "$BW_N" 4)
    rdv=$(fig read 65536 "$BW_N" 4)
    a=$(fig atomic 8 "$AT_N" 5)
    [ -n "$a" ] && a=$(awk -v m="$a" 'BEGIN { printf "%.0f", m * 1e6 }')
    # (rc_pingpong: either side's line; under loss the side whose last ACK is
    # lost may end in a retry error after the other side finished, roce-tests.sh)
    p=$(awk '/iters in .* usec\/iter/ { for (i = 1; i <= NF; i++) if ($i == "usec/iter") { print $(i - 1); exit } }' "$d/pair.out")
    # (coreutils' timeout exits 124, busybox's 143: killed by SIGTERM)
    stall() { grep -qE "tool-exit $1 (124|143)" <<<"$o" && echo stall || echo NA; }
    [ -n "$w" ] || w=$(stall write)
    [ -n "$rdv" ] || rdv=$(stall read)
    [ -n "$p" ] || p=$(stall pp)
    [ -n "$a" ] || a=$(stall atomic)
    echo "$w $rdv $p $a $rc $d"
}
# counters DIR: both vhca processes' recovery counters of the boot in DIR.
counters() {
    local x f
    for x in a b; do
        f="$1/vhca-$x.log"
        [ -f "$f" ] || continue
        # The report's `engine: name value ...` lines (zero counters left out).
        awk -v side="$x" '$1 == "engine:" {
                for (i = 2; i < NF; i += 2) if ($(i + 1) ~ /^[0-9]+$/) sum[$i] += $(i + 1)
            }
            END {
                split("tx_packets rx_packets naks_sent acks_sent duplicates_received timeouts loss_probes seq_nak_go_backs seq_naks_absorbed probe_go_backs spurious_probes resent_packets recovery_stall_us", k, " ")
                line = ""
                for (i = 1; i in k; i++) line = line " " k[i] "=" (sum[k[i]] + 0)
                print "  vhca " toupper(side) ":" line
            }' "$f"
    done
}
num() { case "$1" in ''|NA|stall) return 1;; esac; }
# ratio A B: A/B, or "stall"/NA.
ratio() {
    [ "$1" = stall ] && { echo stall; return; }
    awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.3f", a / b; else print "NA" }'
}
ratios="$out/ratios"
: >"$ratios"
keep() { num "$2" && echo "$1 $2" >>"$ratios"; }

echo "bench-vm-loss: $rounds round(s), stacks: $stacks, conditions: $conds;" \
    "tools: $TOOLS (ib_write_bw/ib_read_bw -s 65536 -n $BW_N, ibv_rc_pingpong -s 4096 -n $PP_N, ib_atomic_bw -n $AT_N); logs in $out"
fail=0
for r in $(seq "$rounds"); do
    for s in $stacks; do
        base_w='' base_r='' base_p='' base_a=''
        for c in $conds; do
            read -r w rd p a rc d < <(one "$s" "$c" "$r")
            echo "round $r $s loss=$c: ib_write_bw $w MiB/s, ib_read_bw $rd MiB/s, rc_pingpong $p usec/iter, ib_atomic_bw $a ops/s (exit $rc, $d)"
            [ "$s" = vhca ] && counters "$d"
            if [ "$c" = 0 ]; then
                base_w=$w base_r=$rd base_p=$p base_a=$a
                ok=1
                for t in $TOOLS; do
                    case "$t" in write) num "$w";; read) num "$rd";; pp) num "$p";; atomic) num "$a";; esac || ok=0
                done
                [ "$ok" = 1 ] || { fail=1; echo "  lossless $s boot failed"; }
                keep "BASE:$s:write_MiB/s" "$w"; keep "BASE:$s:read_MiB/s" "$rd"; keep "BASE:$s:pp_usec" "$p"
                keep "BASE:$s:atomic_ops/s" "$a"
                continue
            fi
            [ -n "$base_w" ] || continue
            rw=$(ratio "$w" "$base_w") rr=$(ratio "$rd" "$base_r") rp=$(ratio "$p" "$base_p")
            ra=$(ratio "$a" "$base_a")
            echo "round $r RATIO $s $c: write ${rw}x read ${rr}x atomic ${ra}x of lossless; rc_pingpong time ${rp}x of lossless"
            keep "RATIO:$s:$c:write" "$rw"; keep "RATIO:$s:$c:read" "$rr"; keep "RATIO:$s:$c:pp_time" "$rp"
            keep "RATIO:$s:$c:atomic" "$ra"
        done
    done
done
if [ -s "$ratios" ]; then
    awk '{ n[$1]++; v = $2 + 0; if (!($1 in mn) || v < mn[$1]) mn[$1] = v; if (!($1 in mx) || v > mx[$1]) mx[$1] = v }
         END { for (k in n) printf "%-30s min %s max %s (%d rounds)\n", k, mn[k], mx[k], n[k] }' "$ratios" | sort
fi
exit "$fail"
