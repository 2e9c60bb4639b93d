#!/bin/bash
# images/kmod-matrix.sh — build vhca.ko with W=1 against the headers of every
# kernel the driver supports (issue 17): Debian 12's 6.1 (bookworm), trixie's
# 6.12 and sid's newest, each from Debian's own packages in a root of that
# release (images/distro-root.sh; trixie is the host tool root), so each is
# built by the compiler its kernel was built with. Also `dkms build` of the
# DKMS source tree (guest-driver/kernel/Makefile dkms-src, dkms.conf) on the
# first suite's kernel (the oldest).
#
# Usage: images/kmod-matrix.sh [SUITE...]     (default: bookworm trixie sid)
#   Prints "SUITE KERNEL MODULE" per kernel; exit status 1 if any build fails
#   (the build log goes to stderr). Roots and modules are cached in
#   $VHCA_CACHE (first run: a few minutes per root to debootstrap).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
case "${1:-}" in -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;; esac
vhca_need_root
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(bookworm trixie sid)

fail=0
for suite in "${suites[@]}"; do
    root=$("$VHCA_IMAGES/distro-root.sh" "$suite") || { fail=1; continue; }
    K=$(sed -n 's/^kernel=//p' "$root/etc/vhca-root.info")
    [ -n "$K" ] || vhca_die "no kernel= in $root/etc/vhca-root.info"
    # vhca_build_module dies on failure: a subshell keeps the other kernels going.
    if ko=$(vhca_build_module "$K" "$root"); then
        # The module must be for that kernel, not for whichever headers were found.
        vm=$(vhca_chroot "$root" modinfo -F vermagic "$ko" | cut -d' ' -f1)
        if [ "$vm" != "$K" ]; then
            vhca_log "$suite: $ko has vermagic $vm, not $K"
            fail=1
            continue
        fi
        echo "$suite $K $ko"
    else
        vhca_log "$suite: vhca.ko does not build against $K"
        fail=1
    fi
done

# The DKMS source tree, built by DKMS itself: `make dkms-src` lays it out, and
# `dkms build` (the release's dkms package, unpacked with dpkg -x, never
# installed: the roots stay as built) runs dkms.conf against the first suite's
# kernel, with its own trees under the temp folder.
suite=${suites[0]}
root=$("$VHCA_IMAGES/distro-root.sh" "$suite")
K=$(sed -n 's/^kernel=//p' "$root/etc/vhca-root.info")
stage=$(mktemp -d "$VHCA_CACHE/kmod-dkms.XXXXXX")
trap 'rm -rf "$stage"' EXIT
make -s -C "$VHCA_REPO/guest-driver/kernel" dkms-src DESTDIR="$stage/src" >&2
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$VHCA_REPO/guest-driver/kernel/dkms.conf")
mkdir -p "$stage/tree" "$stage/dl"
# shellcheck disable=SC2016  # expanded inside the root
if vhca_chroot "$root" sh -ec 'cd "$1/dl"; apt-get download -q dkms' sh "$stage" >"$stage/log" 2>&1 &&
   dpkg -x "$stage"/dl/dkms_*.deb "$stage/dkms" &&
   vhca_chroot "$root" "$stage/dkms/usr/sbin/dkms" build -m vhca -v "$ver" -k "$K" \
       --sourcetree "$stage/src/usr/src" --dkmstree "$stage/tree" --no-depmod >>"$stage/log" 2>&1 &&
   ko=$(find "$stage/tree/vhca/$ver/$K" -name 'vhca.ko*' | head -1) && [ -n "$ko" ]; then
    echo "dkms $K $ver"
else
    cat "$stage/log" >&2
    find "$stage/tree" -name make.log -exec cat {} + >&2 2>/dev/null
    vhca_log "dkms build of the DKMS tree failed against $K"
    fail=1
fi
exit "$fail"
