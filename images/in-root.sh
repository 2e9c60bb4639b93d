#!/bin/bash
# images/in-root.sh CMD [ARG...] — run a command inside the host tool root.
#
# Builds the root first if this checkout's host-root.sh has not been built yet
# (see host-root.sh). The command runs under chroot in a private mount namespace
# (unshare -m): /proc, /sys, /dev are mounted inside, and these host paths are
# bind-mounted at the same path inside:
#   - $VHCA_CACHE (default /var/cache/vhca), which holds the shared run folder
#     $VHCA_CACHE/run for vfio-user sockets and VM temp dirs, and the guest images;
#   - this repository (so `make -C /lib/modules/$K/build M=$PWD/...` works);
#   - every path listed in $VHCA_BIND (space separated).
# The mounts disappear with the namespace when the command exits. The working
# directory is kept if it is one of those paths (or below), else it is /.
# Environment: only PATH, HOME, TERM, LANG, plus the words of $VHCA_ENV
# (e.g. VHCA_ENV="K=6.12.117+deb13-amd64 FOO=1").
# Exit status: the command's. Inside, `uname -r` is the host's kernel: use
# `cat /etc/vhca-root.info` (kernel=...) or ls /lib/modules for the guest's.
#
# Examples:
#   images/in-root.sh qemu-system-x86_64 --version
#   images/in-root.sh sh -c 'qemu-system-x86_64 -device help | grep vfio-user'
#   images/in-root.sh make -C /lib/modules/$K/build M=$PWD/guest-driver/kernel
set -euo pipefail
. "$(dirname "$0")/lib.sh"
case "${1:-}" in
    ""|-h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2;;
esac
vhca_need_root
ROOT=$(vhca_ensure_root)
vhca_chroot_cmd "$ROOT" "$@"
exec "${VHCA_CHROOT_CMD[@]}"
