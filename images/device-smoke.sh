#!/bin/bash
# images/device-smoke.sh — the device seen by a real QEMU (issue: the device,
# "Real QEMU"): boots the guest under TCG with `vhca` attached through
# vfio-user-pci and checks, from inside the guest and from vhca's log, that
#   - the function is 1234:1bca, class 0c06, BAR0 64 KiB, BAR2 256 KiB, BAR4
#     512 KiB (the WAKE page, then 256K of device memory, rounded up), with
#     PCI Express, MSI-X and power-management capabilities and a 4 KiB config
#     space;
#   - a BAR0 register read returns the device's MAGIC (a trapped access);
#   - a guest store to the doorbell page (BAR2) reaches the device with no
#     vfio-user message (vhca sees the word in its shared memory when WAKE is
#     rung, and logs no region write for BAR2), while the store to BAR0 WAKE
#     arrives as a region write.
#
# Usage: images/device-smoke.sh [path/to/vhca]   (default: builds target/debug/vhca)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
vhca_need_root

fail() { echo "device-smoke: FAIL: $*" >&2; exit 1; }

BIN=${1:-}
if [ -z "$BIN" ]; then
    (cd "$VHCA_REPO" && cargo build -q -p device --bin vhca)
    BIN="${CARGO_TARGET_DIR:-$VHCA_REPO/target}/debug/vhca"
fi
[ -x "$BIN" ] || fail "no vhca binary at $BIN"

"$VHCA_IMAGES/host-root.sh" >/dev/null
"$VHCA_IMAGES/guest.sh" >/dev/null

mkdir -p "$VHCA_RUN"
work=$(mktemp -d "$VHCA_RUN/device-smoke.XXXXXX")
sock="$work/vhca.sock"
port=$((20000 + RANDOM % 20000))
cat >"$work/fabric.toml" <<EOF
[[node]]
name = "a"
lid = 5
guid = "0x0002c90300000005"
address = "127.0.0.1:$port"
EOF
vhca_pid=
cleanup() {
    [ -n "$vhca_pid" ] && kill "$vhca_pid" 2>/dev/null && wait "$vhca_pid" 2>/dev/null
    rm -f "$sock"
}
trap cleanup EXIT

RUST_LOG=info,device::run=debug,pci::server=trace \
    "$BIN" --socket "$sock" --fabric "$work/fabric.toml" --node a >"$work/vhca.log" 2>&1 &
vhca_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || fail "vhca did not create its socket (log: $work/vhca.log)"

# In the guest: find the function, print what the checks need, poke the BARs
# with busybox devmem (a 32-bit store to BAR2 + 0x48 is UAR 0, slot 9).
guest_cmd='
D=$(grep -l "0x0c0600" /sys/bus/pci/devices/*/class | head -1 | xargs dirname)
echo "ids $(cat $D/vendor) $(cat $D/device) $(cat $D/class)"
echo "config $(stat -c %s $D/config)"
r0=$(sed -n 1p $D/resource); r2=$(sed -n 3p $D/resource)
b0=$(echo $r0 | cut -d" " -f1); e0=$(echo $r0 | cut -d" " -f2)
b2=$(echo $r2 | cut -d" " -f1); e2=$(echo $r2 | cut -d" " -f2)
r4=$(sed -n 5p $D/resource); b4=$(echo $r4 | cut -d" " -f1); e4=$(echo $r4 | cut -d" " -f2)
echo "bar0 $(( e0 - b0 + 1 )) bar2 $(( e2 - b2 + 1 )) bar4 $(( e4 - b4 + 1 ))"
lspci -vv -s ${D##*/} | grep -o "Express\|MSI-X: Enable. Count=[0-9]*\|Power Management" | sort -u | sed "s/^/cap /"
echo "magic $(devmem $(( b0 )) 32)"
devmem $(( b2 + 0x48 )) 32 0xabcd1234
devmem $(( b0 + 0x14 )) 32 1
echo poked'
log="$work/console.log"
"$VHCA_IMAGES/run-vm.sh" --vfio-user "$sock" --timeout 120 --log "$log" --quiet -- "$guest_cmd" ||
    fail "guest command failed (console: $log)"
out=$(tr -d '\r' <"$log")
sleep 0.3
kill "$vhca_pid" 2>/dev/null; wait "$vhca_pid" 2>/dev/null || true
vhca_pid=

want() { grep -qx "$1" <<<"$out" || fail "guest did not print '$1' (console: $log)"; }
want "ids 0x1234 0x1bca 0x0c0600"
want "config 4096"
# BAR4: the WAKE page and, after it, the default 256K of device memory
# (--dm-size), the whole rounded up to a power of two (issue 29).
want "bar0 65536 bar2 262144 bar4 524288"
want "cap Express"
want "cap Power Management"
grep -q "^cap MSI-X: Enable. Count=16$" <<<"$out" || fail "no MSI-X capability with 16 vectors"
want "magic 0x41434856"
want "poked"
grep -q "pci: region 0 write 0x14 \[01, 00, 00, 00\]" "$work/vhca.log" ||
    fail "the BAR0 WAKE store did not arrive as a region write (log: $work/vhca.log)"
grep -q "region 2 write" "$work/vhca.log" &&
    fail "a BAR2 store arrived as a vfio-user message (log: $work/vhca.log)"
grep -q "WAKE; UAR 0 doorbell words: \[0x48=0xabcd1234\]" "$work/vhca.log" ||
    fail "vhca did not see the doorbell store in BAR2 (log: $work/vhca.log)"
echo "device-smoke: OK: 1234:1bca class 0c06, BAR0 64 KiB, BAR2 256 KiB, BAR4 512 KiB (WAKE + device memory), PCIe+MSI-X(16)+PM, 4 KiB config;"
echo "device-smoke: OK: doorbell store seen in shared memory without a message; WAKE arrived as a region write"
rm -rf "$work"
