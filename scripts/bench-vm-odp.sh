#!/usr/bin/env bash
# Issue 29's ODP benchmark: RC RDMA WRITE of 64 KiB between two TCG guests
# (images/vm-pair.sh, vhca0 on the UDP fabric) from and into an on-demand-
# paging MR (perftest's --odp: ibv_reg_mr with IBV_ACCESS_ON_DEMAND) against
# a pinned MR, in the same boot:
#   first touch: ib_write_bw -s 65536 -n $FIRST_N, each run a new process, so
#     a new MR whose pages the device has never seen: the client's gathers and
#     the server's targets fault (page-fault EQE, vhca.ko faults the pages in,
#     MAP_ODP; the server's side answers with an RNR NAK until then);
#   warm: -n $BW_N, where the faults of the first pass are amortised.
# Each figure is a ratio against the pinned run of the same size in the same
# boot. The page faults each run cost are read from the port counters
# (/sys/class/infiniband/vhca0/ports/1/hw_counters/odp_*) before and after it,
# on both guests.
#
# Usage: scripts/bench-vm-odp.sh [ROUNDS]   (default 2; one boot each).
# Env: BENCH_BW_N (warm iterations, default 2000), BENCH_FIRST_N (first-touch
# iterations, default 16).
set -uo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-2}
BW_N=${BENCH_BW_N:-2000}
FIRST_N=${BENCH_FIRST_N:-16}
work=$(mktemp -d /tmp/bench-vm-odp.XXXXXX)

# name|ib_write_bw arguments; the order alternates pinned and ODP.
cases="pinned_first|-s 65536 -n $FIRST_N
odp_first|--odp -s 65536 -n $FIRST_N
pinned_warm|-s 65536 -n $BW_N
odp_warm|--odp -s 65536 -n $BW_N"

side() { # $1 = A|B: the guest's script (B adds $SERVER_IP and retries)
    cat <<EOF
hc=/sys/class/infiniband/vhca0/ports/1/hw_counters
cnt() { echo "\$(cat \$hc/odp_faults_raised) \$(cat \$hc/odp_faults_resolved) \$(cat \$hc/odp_rnr_naks)"; }
i=0
printf '%s\n' "$cases" | while IFS='|' read -r name args; do
    port=\$((18700 + i)); i=\$((i + 1))
    before=\$(cnt)
EOF
    if [ "$1" = A ]; then
        echo '    ib_write_bw -d vhca0 -F $args -p $port </dev/null'
    else
        cat <<'EOF'
    t=0
    until ib_write_bw -d vhca0 -F $args -p $port $SERVER_IP </dev/null; do
        t=$((t + 1)); [ $t -ge 30 ] && break; sleep 1
    done
EOF
    fi
    cat <<'EOF'
    echo "ODP-COUNT $name $before $(cnt)"
done
EOF
}

one() { # $1 = round; prints "name MiB/s faults_A faults_B rnr_A" lines
    local out="$work/$1"
    mkdir -p "$out"
    side A >"$out/a.sh"; side B >"$out/b.sh"
    images/vm-pair.sh --out "$out" --timeout 900 --ready '' \
        "$(cat "$out/a.sh")" "$(cat "$out/b.sh")" >"$out/pair.out" 2>&1
    echo "vm-pair exit $? ($out)" >&2
    local a b
    a=$(sed -n '/^=== A/,/^=== B/p' "$out/pair.out")
    b=$(sed -n '/^=== B/,$p' "$out/pair.out")
    local name args bw fa fb ra
    while IFS='|' read -r name args; do
        # B's result line: "65536 N peak avg msgrate"; the runs come in order.
        bw=$(awk -v k="$name" '$1 == 65536 && $2 ~ /^[0-9]+$/ && NF >= 5 { last = $4 }
             $1 == "ODP-COUNT" { if ($2 == k) { print last; exit } last = "" }' <<<"$b")
        fa=$(awk -v k="$name" '$1 == "ODP-COUNT" && $2 == k { print $6 - $3; exit }' <<<"$a")
        ra=$(awk -v k="$name" '$1 == "ODP-COUNT" && $2 == k { print $8 - $5; exit }' <<<"$a")
        fb=$(awk -v k="$name" '$1 == "ODP-COUNT" && $2 == k { print $6 - $3; exit }' <<<"$b")
        echo "$name ${bw:-NA} ${fa:-NA} ${fb:-NA} ${ra:-NA}"
    done <<<"$cases"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "NA" }'; }

echo "bench-vm-odp: $rounds round(s), ib_write_bw -s 65536, first touch -n $FIRST_N, warm -n $BW_N; logs in $work"
fail=0
for r in $(seq "$rounds"); do
    declare -A bw=() fa=() fb=() ra=()
    while read -r name b a_f b_f a_r; do
        bw[$name]=$b fa[$name]=$a_f fb[$name]=$b_f ra[$name]=$a_r
        echo "round $r $name: ${b} MiB/s; page faults raised: server ${a_f}, client ${b_f}; server RNR NAKs for ODP ${a_r}"
    done < <(one "$r")
    f=$(ratio "${bw[odp_first]:-}" "${bw[pinned_first]:-}") w=$(ratio "${bw[odp_warm]:-}" "${bw[pinned_warm]:-}")
    echo "round $r RATIO odp/pinned first touch = ${f}x, warm = ${w}x"
    [ "$f" != NA ] && [ "$w" != NA ] || fail=1
    # A run that faulted nothing did not use ODP.
    [ "${fb[odp_first]:-0}" != 0 ] && [ "${fb[odp_first]:-NA}" != NA ] || { echo "round $r: odp_first raised no fault at the client"; fail=1; }
    unset bw fa fb ra
done
exit "$fail"
