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
# The baseline is taken once QEMU has connected and the guest's driver is up:
# the largest count of the first quarter of the samples (the process exists a
# moment before QEMU connects, with fewer fds), not the very first sample.
read -r fd0 rss0 < <(awk -v p="$pid" '$1==p && NF==3{n++; f[n]=$2; r[n]=$3}
    END{q=int((n+3)/4); m=0; for(i=1;i<=q;i++) if(f[i]>m){m=f[i]; mr=r[i]}; print m, mr}' "$samples")
# The end figure is the largest count of the last quarter, for the same
# reason: the last samples may fall after the guest powered off and QEMU
# closed its connection (the count then drops to the bare process's, which
# is no leak: a run failed on "17 -> 10" that way). A leak is growth: one fd
# kept per reload would add 20 by the end.
read -r fd1 rss1 < <(awk -v p="$pid" '$1==p && NF==3{n++; f[n]=$2; r[n]=$3}
    END{q=int((n+3)/4); m=0; for(i=n-q+1;i<=n;i++) if(f[i]>m){m=f[i]; mr=r[i]}; print m, mr}' "$samples")
echo "vm-reload: 20 reloads with traffic OK; vhca fds $fd0 -> $fd1, RssAnon $rss0 -> $rss1 KiB"
[ $((fd1 - fd0)) -le 2 ] || fail "fd count grew from $fd0 to $fd1"
[ $((rss1 - rss0)) -lt 4096 ] || fail "RssAnon grew from $rss0 to $rss1 KiB"
echo "vm-reload: OK"
