#!/bin/bash
# images/vm-reload.sh — issue 5's reload check: in a guest with a vhca device,
# rmmod/modprobe vhca 20 times with an ibv_rc_pingpong (loopback through the
# device) after each load; meanwhile the host samples the vhca process's file
# descriptors and anonymous RSS (shared guest-memory pages the device touches
# count as RssShmem/RssFile, not as a leak). Passes when every reload works,
# the fd count grew by at most 2 and RssAnon by less than 4 MiB.
#
# Usage: images/vm-reload.sh [vm-pair.sh options]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
vhca_need_root
fail() { echo "vm-reload: FAIL: $*" >&2; exit 1; }

guest='set -e
for i in $(seq 20); do
  rmmod vhca
  modprobe vhca
  n=0; until grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state 2>/dev/null; do
    n=$((n+1)); [ $n -lt 100 ] || { echo "port not active after reload $i"; exit 1; }; sleep 0.1; done
  ibv_rc_pingpong -d vhca0 -g 0 -n 5 -p $((18000+i)) >/dev/null 2>&1 &
  sleep 0.5
  ibv_rc_pingpong -d vhca0 -g 0 -n 5 -p $((18000+i)) 127.0.0.1 >/tmp/pp.out 2>&1 ||
    { cat /tmp/pp.out; echo "pingpong failed after reload $i"; exit 1; }
  wait
  echo "reload $i ok"
done
echo RELOAD-OK'

samples=$(mktemp)
(
    while true; do
        for p in $(pgrep -f -- "--socket [^ ]*/pair-[0-9]+-a\\.sock" || true); do
            echo "$p $(ls /proc/"$p"/fd 2>/dev/null | wc -l) $(awk '/RssAnon/{print $2}' /proc/"$p"/status 2>/dev/null)"
        done
        sleep 1
    done
) >"$samples" &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; rm -f "$samples"' EXIT

out=$("$VHCA_IMAGES/vm-pair.sh" --ready '' --timeout 400 "$@" "$guest" 'true' 2>&1) || {
    echo "$out" | tail -30
    fail "the reload loop failed"
}
grep -q RELOAD-OK <<<"$out" || fail "no RELOAD-OK from the guest"
kill $sampler 2>/dev/null || true
# The samples of the first vhca process seen (guest A's).
pid=$(awk 'NF==3{print $1; exit}' "$samples")
[ -n "$pid" ] || fail "no samples of the vhca process (pattern did not match)"
# Single samples mislead: the process exists before QEMU connects and the
# guest boots for seconds before the driver enables MSI-X (fewer fds), each
# reload closes and reopens the MSI-X eventfds (a sample mid-reload is off by
# a few), and the last samples may fall after the guest powered off and QEMU
# closed its connection (a run failed on "17 -> 10" that way). So the fds are
# compared as the most seen with the driver up: the largest count of the first
# half against the largest of the last quarter; RssAnon as the medians of the
# first half and the last quarter. A leak is growth: one fd per reload adds 20.
stat_of() { # $1 = first-half|last-quarter, $2 = column (2 fds, 3 RssAnon), $3 = max|median
    local all n k
    all=$(awk -v p="$pid" -v c="$2" '$1==p && NF==3{print $c}' "$samples")
    n=$(wc -l <<<"$all")
    if [ "$1" = first-half ]; then k=$(((n + 1) / 2)); head -n "$k" <<<"$all"
    else k=$(((n + 3) / 4)); tail -n "$k" <<<"$all"; fi |
        sort -n | awk -v m="$3" '{v[NR]=$1} END{print (m=="max") ? v[NR] : v[int((NR+1)/2)]}'
}
fd0=$(stat_of first-half 2 max); fd1=$(stat_of last-quarter 2 max)
rss0=$(stat_of first-half 3 median); rss1=$(stat_of last-quarter 3 median)
echo "vm-reload: fd samples: $(awk -v p="$pid" '$1==p && NF==3{printf "%s ", $2}' "$samples")"
echo "vm-reload: 20 reloads with traffic OK; vhca fds $fd0 -> $fd1, RssAnon $rss0 -> $rss1 KiB"
[ $((fd1 - fd0)) -le 2 ] || fail "fd count grew from $fd0 to $fd1"
[ $((rss1 - rss0)) -lt 4096 ] || fail "RssAnon grew from $rss0 to $rss1 KiB"
echo "vm-reload: OK"
