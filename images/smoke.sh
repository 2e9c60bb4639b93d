#!/bin/bash
# images/smoke.sh — build (or reuse) the host root and the guest, check that the
# root's QEMU has vfio-user-pci, boot the guest without any vfio-user device and
# check what it prints. Prints the time of each step. Exit 0 on success.
#
# Usage: images/smoke.sh [run-vm.sh options...]   (e.g. --verbose, --timeout 300)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
vhca_need_root

now() { date +%s.%N; }
dt() { awk "BEGIN{printf \"%.1f\", $(now) - $1}"; }
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }

t=$(now)
ROOT=$("$VHCA_IMAGES/host-root.sh")
echo "smoke: host root   $ROOT ($(dt "$t") s)"

"$VHCA_IMAGES/in-root.sh" qemu-system-x86_64 -device help 2>/dev/null | grep -q '"vfio-user-pci"' ||
    fail "no vfio-user-pci in the root's QEMU"
echo "smoke: $("$VHCA_IMAGES/in-root.sh" qemu-system-x86_64 --version | head -1), has vfio-user-pci"

t=$(now)
GUEST=$("$VHCA_IMAGES/guest.sh")
K=$(cat "$GUEST/kver")
echo "smoke: guest       $GUEST, kernel $K ($(dt "$t") s)"

log="$VHCA_RUN/smoke-console.log"
t=$(now)
set +e
"$VHCA_IMAGES/run-vm.sh" --timeout 180 --log "$log" "$@" -- \
    'uname -r; lspci -nn; cat /proc/cpuinfo | head -3; ibv_devinfo -l; echo SMOKE-MARKER-OK' 2>"$VHCA_RUN/smoke-run.err"
rc=$?
set -e
boot=$(tr -d '\r' <"$log" | sed -n 's/.*vhca-init: \/init started at \([0-9.]*\)s$/\1/p' | head -1)
wall=$(dt "$t")
cat "$VHCA_RUN/smoke-run.err" >&2
[ "$rc" = 0 ] || fail "guest command exit status $rc (console: $log)"
tr -d '\r' <"$log" | grep -qx "$K" || fail "guest did not print its kernel release $K"
tr -d '\r' <"$log" | grep -qx 'SMOKE-MARKER-OK' || fail "no marker from the guest"
echo "smoke: guest booted to /init in ${boot:-?} s (guest uptime); whole VM run ${wall} s"
echo "smoke: OK"
