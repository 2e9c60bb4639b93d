# shellcheck shell=bash
# images/lib.sh — shared helpers for the images/ scripts (sourced, not run).
#
# Nothing in here changes what host-root.sh or guest.sh build: their cache keys
# are the hashes of those scripts alone, so this file holds only plumbing
# (paths, logging, locking, the chroot runner).

VHCA_IMAGES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VHCA_REPO=$(cd "$VHCA_IMAGES/.." && pwd)
: "${VHCA_CACHE:=/var/cache/vhca}"
VHCA_RUN="$VHCA_CACHE/run"

vhca_log() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }
vhca_die() { vhca_log "error: $*"; exit 1; }

vhca_need_root() {
    [ "$(id -u)" -eq 0 ] || vhca_die "must run as root (debootstrap, chroot, mount namespaces)"
}

# First 16 hex digits of sha256 over the given files' contents.
vhca_hash() { cat "$@" | sha256sum | cut -c1-16; }

# The trixie root this checkout's host-root.sh builds (may not exist yet).
vhca_root_key() { vhca_hash "$VHCA_IMAGES/host-root.sh"; }
vhca_root_dir() { echo "$VHCA_CACHE/root-$(vhca_root_key)"; }

# Make sure the root exists (builds it on first use) and print its path.
vhca_ensure_root() {
    local r; r=$(vhca_root_dir)
    if [ ! -e "$r/.vhca-root-complete" ]; then
        "$VHCA_IMAGES/host-root.sh" >/dev/null || vhca_die "host-root.sh failed"
    fi
    echo "$r"
}

# vhca_chroot ROOT CMD... — run CMD inside ROOT in a private mount namespace.
# /proc, /sys, /dev (+pts, shm) are mounted inside; the cache folder
# ($VHCA_CACHE, which holds the run folder for sockets, the guest images and the
# per-VM temp dirs), the repository and every path in $VHCA_BIND (space
# separated) are bind-mounted at the same path. All mounts live in a namespace
# made by `unshare -m`, so they vanish when CMD exits, however it exits; the
# host's mount table is never touched. The process chain execs down to CMD, so
# its pid is CMD's pid (signals and `timeout` reach it directly).
# The working directory is kept when it is visible inside, else it is /.
vhca_chroot() {
    vhca_chroot_cmd "$@"
    "${VHCA_CHROOT_CMD[@]}"
}

# vhca_chroot_cmd ROOT CMD... — only build that command line, into the array
# VHCA_CHROOT_CMD, for callers that exec it or run it under timeout(1).
vhca_chroot_cmd() {
    local root=$1; shift
    [ -d "$root" ] || vhca_die "no root at $root"
    mkdir -p "$VHCA_RUN"
    local binds="$VHCA_CACHE $VHCA_REPO ${VHCA_BIND:-}"
    local cwd; cwd=$(pwd -P)
    # shellcheck disable=SC2016
    VHCA_CHROOT_CMD=(unshare -m --propagation private -- /bin/bash -c '
        set -e
        root=$1 binds=$2 cwd=$3; shift 3
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --make-rslave "$root/sys"
        mount --rbind /dev "$root/dev"
        mount --make-rslave "$root/dev"
        for b in $binds; do
            [ -e "$b" ] || continue
            case "$b" in "$root"|"$root"/*) continue;; esac
            mkdir -p "$root$b"
            mount --bind "$b" "$root$b"
        done
        inside=/
        for b in $binds; do
            case "$cwd/" in "$b"/*) inside=$cwd;; esac
        done
        exec chroot "$root" /usr/bin/env -i \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
            ${VHCA_ENV:-} \
            /bin/sh -c "cd \"\$1\" 2>/dev/null || cd /; shift; exec \"\$@\"" sh "$inside" "$@"
    ' vhca-chroot "$root" "$binds" "$cwd" "$@")
}

# The vhca binary, optimised, in $CARGO_TARGET_DIR (default: the repo's
# target/); prints its path.
vhca_build_vhca() {
    local target=${CARGO_TARGET_DIR:-$VHCA_REPO/target}
    (cd "$VHCA_REPO" && CARGO_TARGET_DIR=$target cargo build -q --release -p device --bin vhca) ||
        vhca_die "cargo build failed"
    echo "$target/release/vhca"
}

# vhca.ko for guest kernel release $1, built in a copy keyed by its sources and
# the release (the checkout stays clean, an unchanged driver is not rebuilt);
# prints its path. W=1, and a warning fails the build.
vhca_build_module() {
    local K=$1 kdir="$VHCA_REPO/guest-driver/kernel" key dir tmp
    key=$( (cat "$kdir"/*.[ch] "$kdir/Kbuild" "$VHCA_REPO/guest-driver/include/vhca_abi.h"; echo "$K") |
        sha256sum | cut -c1-16)
    dir="$VHCA_CACHE/kmod-$key"
    if [ ! -e "$dir/vhca.ko" ]; then
        tmp="$dir.tmp.$$"
        rm -rf "$tmp"
        mkdir -p "$tmp/src/kernel" "$tmp/src/include"
        cp "$kdir"/*.[ch] "$kdir/Kbuild" "$tmp/src/kernel/"
        cp "$VHCA_REPO/guest-driver/include/vhca_abi.h" "$tmp/src/include/"
        "$VHCA_IMAGES/in-root.sh" make -s -C "/lib/modules/$K/build" M="$tmp/src/kernel" W=1 \
            >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log" >&2; vhca_die "vhca.ko build failed"; }
        if grep -q 'warning:' "$tmp/build.log"; then
            cat "$tmp/build.log" >&2
            vhca_die "warnings building vhca.ko"
        fi
        mv "$tmp/src/kernel/vhca.ko" "$tmp/vhca.ko"
        rm -rf "$tmp/src" "$dir"
        mv "$tmp" "$dir"
    fi
    echo "$dir/vhca.ko"
}
