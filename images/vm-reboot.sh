#!/bin/bash
# images/vm-reboot.sh — issue 5's guest-reboot check: guest B reboots
# (`reboot -f`: the kernel shuts vhca.ko down, QEMU resets the machine and
# the vfio-user device, SeaBIOS and the kernel start again) and after every
# boot runs an ibv_rc_pingpong client against guest A, which serves one round
# per boot of B. Meanwhile the host samples B's vhca process: its file
# descriptors and anonymous RSS after the first boot and after the last.
# Passes when A served every round (the device serves again after each
# reboot), the most fds sampled in the later boots is the first boot's (+-2) and RssAnon grew by less
# than 4 MiB.
#
# Usage: images/vm-reboot.sh [--reboots N] [vm-pair.sh options]
#   --reboots N   reboots of guest B (default 3; N+1 rounds of traffic)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
vhca_need_root
fail() { echo "vm-reboot: FAIL: $*" >&2; exit 1; }

reboots=3
if [ "${1:-}" = --reboots ]; then
    [ $# -ge 2 ] || vhca_die "--reboots needs an argument"
    reboots=$2
    shift 2
fi
case "$reboots" in ''|*[!0-9]*) vhca_die "--reboots wants a number, not '$reboots'";; esac
rounds=$((reboots + 1))

server="set -e
for i in \$(seq $rounds); do
  timeout 120 ibv_rc_pingpong -d vhca0 -g 0 -n 20 || { echo \"round \$i failed\"; exit 1; }
  echo \"REBOOT-ROUND \$i OK\"
done
echo REBOOT-OK"
# Every boot of B: one pingpong, then a reboot (the last one is cut short).
client='ibv_rc_pingpong -d vhca0 -g 0 -n 20 $SERVER_IP
echo "client boot done, rebooting"
sleep 1
reboot -f'

out=$(mktemp -d "$VHCA_RUN/reboot.XXXXXX")
samples=$out/samples
# A sample: pid, fds, RssAnon (KiB), boots of B seen so far (its console).
(
    while true; do
        boots=$(tr -d '\r' 2>/dev/null <"$out/console-b.log" | grep -c 'vhca-init: ready at' || true)
        for p in $(pgrep -f -- "--socket [^ ]*/pair-[0-9]+-b\\.sock" || true); do
            echo "$p $(ls /proc/"$p"/fd 2>/dev/null | wc -l) $(awk '/RssAnon/{print $2}' /proc/"$p"/status 2>/dev/null) $boots"
        done
        sleep 1
    done
) >"$samples" &
sampler=$!
trap 'kill $sampler 2>/dev/null || true' EXIT

log=$("$VHCA_IMAGES/vm-pair.sh" --out "$out" --client-reboot --timeout $((120 + 90 * rounds)) \
    "$@" "$server" "$client" 2>&1) || {
    echo "$log" | tail -30
    fail "guest A did not serve all $rounds rounds (logs in $out)"
}
kill $sampler 2>/dev/null || true
grep -q REBOOT-OK <<<"$log" || { echo "$log" | tail -30; fail "no REBOOT-OK from guest A"; }
boots=$(tr -d '\r' <"$out/console-b.log" | grep -c 'vhca-init: ready at' || true)
[ "$boots" -ge "$rounds" ] || fail "guest B booted $boots times, want $rounds"
# Compare B's first boot with the boots after it, each by the most fds
# sampled (the client's fds while its QEMU is attached: a sample taken while
# B's QEMU is gone, between boots or at the end, counts fewer and says nothing
# about a leak, which only ever adds, boot after boot) and the last RssAnon.
read -r fd0 rss0 < <(awk '$4==1 && NF==4 {if ($2 > a) a=$2; b=$3} END{print a, b}' "$samples")
read -r fd1 rss1 < <(awk '$4>=2 && NF==4 {if ($2 > a) a=$2; b=$3} END{print a, b}' "$samples")
[ -n "$fd0" ] && [ -n "$fd1" ] || fail "no samples of B's vhca process (see $samples)"
echo "vm-reboot: $reboots reboots of guest B, $rounds rounds of ibv_rc_pingpong served;" \
    "B's vhca fds $fd0 -> $fd1, RssAnon $rss0 -> $rss1 KiB"
[ $((fd1 - fd0)) -le 2 ] && [ $((fd0 - fd1)) -le 2 ] || fail "fd count moved from $fd0 to $fd1"
[ $((rss1 - rss0)) -lt 4096 ] || fail "RssAnon grew from $rss0 to $rss1 KiB"
echo "vm-reboot: OK"
