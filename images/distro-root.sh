#!/bin/bash
# images/distro-root.sh — build (or reuse) a Debian root of another release
# (bookworm, sid) for guest kernels other than the host tool root's trixie,
# and print its path.
#
# The host tool root (host-root.sh) stays the one place QEMU and vhca run; a
# distro root only supplies what must match a guest release: its kernel image
# and modules, the headers and compiler to build vhca.ko against them
# (images/kmod-matrix.sh), its rdma-core (the provider package,
# guest-driver/provider/package.sh) and its userland (a bookworm guest,
# images/guest.sh --release bookworm).
#
# Cache: $VHCA_CACHE/distro-<suite>-<key> (default /var/cache/vhca), <key> = the
# first 16 hex digits of sha256(this script + suite). Built in a .tmp.<pid>
# folder and renamed when complete (marker .vhca-root-complete). Keying by this
# script alone keeps host-root.sh's key, and so everyone's trixie root, untouched.
#
# Usage: images/distro-root.sh SUITE [--rebuild]
#   SUITE       bookworm | sid (trixie is host-root.sh's root; it is printed)
#   stdout: the root's path (one line); progress goes to stderr.
#   env VHCA_MIRROR   Debian mirror (default http://deb.debian.org/debian)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

suite='' rebuild=0
for a in "$@"; do
    case "$a" in
        --rebuild) rebuild=1;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        -*) vhca_die "unknown argument: $a";;
        *) suite=$a;;
    esac
done
vhca_need_root
case "$suite" in
    trixie) vhca_ensure_root; exit 0;;
    bookworm|sid) ;;
    *) vhca_die "usage: distro-root.sh bookworm|sid [--rebuild]";;
esac

ROOT=$(vhca_distro_root_dir "$suite")
mkdir -p "$VHCA_CACHE" "$VHCA_CACHE/debs-$suite/partial"
exec 9>"$VHCA_CACHE/.distro-$suite.lock"
flock 9
if [ "$rebuild" = 0 ] && [ -e "$ROOT/.vhca-root-complete" ]; then
    echo "$ROOT"
    exit 0
fi

MIRROR=${VHCA_MIRROR:-http://deb.debian.org/debian}
PACKAGES=(
    # the guest kernel of this release, the headers and compiler for vhca.ko
    linux-image-amd64 linux-headers-amd64 gcc make libc6-dev kmod
)
if [ "$suite" = bookworm ]; then
    PACKAGES+=(
        # the guest's userland (guest.sh --release bookworm stages it)
        rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils
        infiniband-diags busybox-static pciutils iproute2 strace iperf3 tcpdump
        ethtool cpio xz-utils zstd
        # the provider package: rdma-core's source built with our patches
        cmake ninja-build pkgconf python3 libnl-3-dev libnl-route-3-dev
        libudev-dev libsystemd-dev patch git dpkg-dev
    )
fi

t0=$(date +%s)
rm -rf "$VHCA_CACHE/distro-$suite"-*.tmp.*
TMP="$ROOT.tmp.$$"
trap 'rm -rf --one-file-system "$TMP"' EXIT
mkdir -p "$TMP"
vhca_step "debootstrap --variant=minbase $suite -> $TMP" "~3 min" "$VHCA_CACHE/debootstrap-$suite.log" \
    debootstrap --variant=minbase --components=main --cache-dir="$VHCA_CACHE/debs-$suite" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$suite" "$TMP" "$MIRROR" ||
    { tail -30 "$VHCA_CACHE/debootstrap-$suite.log" >&2; vhca_die "debootstrap $suite failed"; }

rm -f "$TMP/etc/apt/sources.list"
{
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main"
    if [ "$suite" != sid ]; then
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite-updates main"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${MIRROR%/debian}/debian-security $suite-security main"
    fi
} >"$TMP/etc/apt/sources.list.d/debian.list"
# (sid's Release files carry a Valid-Until; a mirror snapshot older than that
# would stop apt, and nothing here depends on the archive being current.)
cat >"$TMP/etc/apt/apt.conf.d/90vhca" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Dpkg::Use-Pty "false";
EOF
cat >"$TMP/etc/dpkg/dpkg.cfg.d/90vhca-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 755 "$TMP/usr/sbin/policy-rc.d"

in_tmp() { VHCA_ENV="DEBIAN_FRONTEND=noninteractive" vhca_chroot "$TMP" "$@"; }
APT=(apt-get -y -q -o Dir::Cache::Archives="$VHCA_CACHE/debs-$suite/")
# guest.sh builds its own initramfs: the kernel's postinst must not.
in_tmp sh -ec '
    dpkg-divert --local --rename --add /usr/sbin/update-initramfs >/dev/null
    printf "#!/bin/sh\nexit 0\n" >/usr/sbin/update-initramfs
    chmod 755 /usr/sbin/update-initramfs'
in_tmp "${APT[@]}" update >&2
vhca_log "installing $suite packages: ${PACKAGES[*]}"
vhca_step "apt-get install ($suite root: ${#PACKAGES[@]} packages and their dependencies)" "~5 min" \
    "$VHCA_CACHE/apt-$suite.log" in_tmp "${APT[@]}" install "${PACKAGES[@]}" ||
    { tail -30 "$VHCA_CACHE/apt-$suite.log" >&2; vhca_die "installing $suite packages failed"; }

K=$(in_tmp sh -c 'ls /lib/modules | sort -V | tail -1')
[ -e "$TMP/boot/vmlinuz-$K" ] || vhca_die "no kernel image for $K in the $suite root"
# (build is an absolute symlink: look from inside)
in_tmp test -e "/lib/modules/$K/build/Makefile" || vhca_die "no headers for $K in the $suite root"
{
    echo "suite=$suite"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mirror=$MIRROR"
    echo "kernel=$K"
    in_tmp dpkg-query -W -f='pkg ${Package}=${Version}\n' gcc "linux-image-$K" \
        "linux-headers-$K" 2>/dev/null || true
    [ "$suite" = sid ] || in_tmp dpkg-query -W -f='pkg ${Package}=${Version}\n' libibverbs1
} >"$TMP/etc/vhca-root.info"
date -u +%s >"$TMP/.vhca-root-complete"
rm -rf --one-file-system "$ROOT"
mv "$TMP" "$ROOT"
trap - EXIT
vhca_log "$suite root ready in $(( $(date +%s) - t0 )) s: $ROOT"
sed 's/^/    /' "$ROOT/etc/vhca-root.info" >&2

# Roots of older versions of this script for the same suite, unless in use.
for old in "$VHCA_CACHE/distro-$suite"-*; do
    [ -d "$old" ] && [ "$old" != "$ROOT" ] || continue
    case "$old" in *.tmp.*) continue;; esac
    busy=0
    for p in /proc/[0-9]*/root; do
        case "$(readlink "$p" 2>/dev/null)" in "$old"|"$old"/*) busy=1; break;; esac
    done
    [ "$busy" = 1 ] || rm -rf --one-file-system "$old"
done
echo "$ROOT"
