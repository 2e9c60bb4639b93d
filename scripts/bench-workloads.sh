#!/usr/bin/env bash
# Issue 15's benchmark: the workloads over vhca's RoCEv2 port against Linux
# soft-RoCE (rdma_rxe) in the same two TCG guests on one private bridge, each
# round one boot per stack (images/roce-tests.sh's workload pairs wl-vhca-vhca
# and wl-rxe-rxe, only the checks measured here):
#   - NVMe over Fabrics (nvmet-rdma in A, nvme-rdma in B, a memory-backed
#     null_blk), fio with crc32c verification, 16 MiB each, iodepth 16,
#     O_DIRECT: 4 KiB random writes (IOPS), 4 KiB random reads (IOPS, the
#     writer's --verify_only pass), 128 KiB sequential writes and reads (KiB/s);
#   - UCX, UCT level (ucx_perftest -P 0): rc_verbs put_bw 64 KiB zero copy
#     (MB/s) and am_lat 8 B (usec).
# Each ratio is vhca / rxe of the same round (for latency: lower is better);
# min and max over the rounds are printed. Targets (issue 15): >= 5x rxe on
# bandwidth, <= 0.5x on latency.
#
# Usage: scripts/bench-workloads.sh [--rounds N] [--out DIR]
# Env: BENCH_UCX_N (ucx_perftest iterations, default 1000).
# Exit 0 iff every boot produced every number.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

rounds=2 out=''
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) need "$@"; rounds=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
case "$rounds" in ''|*[!0-9]*|0) vhca_die "--rounds takes a positive number";; esac
if [ -n "$out" ]; then mkdir -p "$out" && out=$(realpath "$out") || exit 1
else out=$(mktemp -d /tmp/bench-workloads.XXXXXX); fi
UN=${BENCH_UCX_N:-1000}

# figures CONSOLE: "randwrite_iops randread_iops seqwrite_kibs seqread_kibs
# put_bw_MBs am_lat_us" from B's console (NA where missing).
figures() {
    local c=$1
    awk '
        function put(k, v) { if (!(k in f)) f[k] = v }
        /^nvme-host: round 1 fio randwrite 4k \(write\):/ { put("rw", $(NF - 1)) }
        /^nvme-host: round 1 fio randwrite 4k \(verify_only\):/ { for (i = 1; i <= NF; i++) if ($i == "IOPS,") { put("rr", $(i - 1)); break } }
        /^nvme-host: round 1 fio write 128k \(write\):/ { for (i = 1; i <= NF; i++) if ($i == "write") w = i; put("sw", $(w + 1)) }
        /^nvme-host: round 1 fio write 128k \(verify_only\):/ { for (i = 1; i <= NF; i++) if ($i == "read") { put("sr", $(i + 1)); break } }
        /^--- client ucx_rc_put_bw/ { t = "bw" } /^--- client ucx_rc_am_lat/ { t = "lat" }
        /^Final:/ { if (t == "bw") put("bw", $6); if (t == "lat") put("lat", $4); t = "" }
        END { n = split("rw rr sw sr bw lat", k, " ")
              for (i = 1; i <= n; i++) printf "%s ", (k[i] in f) ? f[k[i]] : "NA"; print "" }' "$c"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "NA" }'; }
ratios="$out/ratios"
: >"$ratios"
keep() { [ "$2" = NA ] || echo "$1 $2" >>"$ratios"; }

echo "bench-workloads: $rounds round(s); logs in $out"
fail=0
names=(randwrite_4k_IOPS randread_4k_IOPS seqwrite_128k_KiB/s seqread_128k_KiB/s ucx_put_bw_MB/s ucx_am_lat_us)
for r in $(seq "$rounds"); do
    ROCE_TESTS_CHECKS='nvmeof|ucx_rc_put_bw|ucx_rc_am_lat' ROCE_TESTS_NVME_ROUNDS=1 ROCE_TESTS_PERF_N=$UN \
        images/roce-tests.sh --pairs wl-vhca-vhca,wl-rxe-rxe --out "$out/round$r" >"$out/round$r.log" 2>&1
    read -r -a v < <(figures "$out/round$r/wl-vhca-vhca/console-b.log")
    read -r -a x < <(figures "$out/round$r/wl-rxe-rxe/console-b.log")
    echo "round $r vhca: ${v[*]}"
    echo "round $r rxe:  ${x[*]}"
    line="round $r RATIO vhca/rxe:"
    for i in "${!names[@]}"; do
        [ "${v[$i]}" = NA ] || [ "${x[$i]}" = NA ] && fail=1
        q=$(ratio "${v[$i]}" "${x[$i]}")
        line+=" ${names[$i]} ${q}x"
        keep "RATIO:${names[$i]}" "$q"; keep "VHCA:${names[$i]}" "${v[$i]}"; keep "RXE:${names[$i]}" "${x[$i]}"
    done
    echo "$line"
done
awk '{ n[$1]++; v = $2 + 0; if (!($1 in mn) || v < mn[$1]) mn[$1] = v; if (!($1 in mx) || v > mx[$1]) mx[$1] = v }
     END { for (k in n) printf "%-32s min %s max %s (%d rounds)\n", k, mn[k], mx[k], n[k] }' "$ratios" | sort
exit "$fail"
