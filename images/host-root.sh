#!/bin/bash
# images/host-root.sh — build (or reuse) the host tool root and print its path.
#
# The host tool root is a Debian trixie tree made with debootstrap (minbase):
# trixie's kernel, headers, compiler, rdma-core, perftest, pyverbs and
# busybox-static first, then QEMU (>= 10.1, with the vfio-user-pci device) from
# trixie-backports. Everything that needs trixie or the new QEMU runs inside it
# with images/in-root.sh; the bookworm host itself is left alone (installing
# QEMU 10.1 on it would pull the host onto trixie's libc).
#
# Cache: $VHCA_CACHE/root-<key> (default /var/cache/vhca), <key> = the first 16
# hex digits of sha256(this script). Editing this script rebuilds; an unchanged
# script reuses the root at once. The root is built in root-<key>.tmp.<pid> and
# renamed into place only when complete (marker file .vhca-root-complete), so an
# interrupted build never leaves a half root behind. Downloaded .debs are kept in
# $VHCA_CACHE/debs so a rebuild does not download them again.
#
# Usage: images/host-root.sh [--rebuild] [--no-prune]
#   stdout: the root's path (one line); progress goes to stderr.
#   --rebuild   build again even if the cached root exists
#   --no-prune  keep roots built by older versions of this script
#   env VHCA_MIRROR   Debian mirror (default: the host's apt mirror, else deb.debian.org)
#   env VHCA_DEBOOTSTRAP=trixie  use trixie's debootstrap even if the host's knows trixie
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rebuild=0 prune=1
for a in "$@"; do
    case "$a" in
        --rebuild) rebuild=1;;
        --no-prune) prune=0;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument: $a";;
    esac
done

vhca_need_root
mkdir -p "$VHCA_CACHE" "$VHCA_RUN" "$VHCA_CACHE/debs/partial"

KEY=$(vhca_root_key)
ROOT="$VHCA_CACHE/root-$KEY"

# One builder at a time; a second caller waits, then finds the root cached.
exec 9>"$VHCA_CACHE/.host-root.lock"
flock 9

if [ "$rebuild" = 0 ] && [ -e "$ROOT/.vhca-root-complete" ]; then
    echo "$ROOT"
    exit 0
fi

SUITE=trixie
PACKAGES=(
    # the guest's kernel and the headers to build vhca.ko against
    linux-image-amd64 linux-headers-amd64
    # userspace RDMA stack and tools (guest side and host-side builds)
    rdma-core ibverbs-utils ibverbs-providers perftest python3-pyverbs
    rdmacm-utils infiniband-diags libibverbs-dev librdmacm-dev
    # the subnet manager a guest runs on the native-IB fabric (issue 26)
    opensm
    # the guest's userland
    busybox-static pciutils kmod iproute2 strace
    # the guest's network tools (RoCE tests and benchmarks: TCP throughput,
    # captures and NIC settings inside the guest)
    iperf3 tcpdump ethtool
    # the workloads users run over RDMA (issue 15; images/workloads.sh puts
    # their ldd closures in a guest overlay): NVMe over Fabrics' host tool and
    # fio, UCX's perftest, Open MPI (and its headers: images/workloads.sh
    # builds the MPI check, images/wl/mpi-pingpong.c)
    nvme-cli fio ucx-utils openmpi-bin libopenmpi-dev
    # building kernel modules and rdma-core providers
    gcc make libc6-dev cmake ninja-build pkgconf python3 xz-utils zstd patch
    dpkg-dev cpio
)

t0=$(date +%s)

# --- mirror ---------------------------------------------------------------
detect_mirror() {
    local f u
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # one-line format: deb [opts] URI suite...; deb822: URIs: URI...
        for u in $(sed -n -e 's/^[[:space:]]*deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\{0,1\}\([^[:space:]]\+\).*/\2/p' \
                           -e 's/^URIs:[[:space:]]*//p' "$f"); do
            case "$u" in
                http*://*/debian|http*://*/debian/) echo "${u%/}"; return;;
            esac
        done
    done
    echo http://deb.debian.org/debian
}
MIRROR=${VHCA_MIRROR:-$(detect_mirror)}
SECURITY_MIRROR=${VHCA_SECURITY_MIRROR:-${MIRROR%/debian}/debian-security}
vhca_log "mirror $MIRROR (security: $SECURITY_MIRROR)"

# --- host tools -----------------------------------------------------------
host_apt_updated=0
host_install() {  # install bookworm packages on the host when commands are missing
    if [ "$host_apt_updated" = 0 ]; then
        vhca_log "apt-get update (host)"
        apt-get update -qq >&2
        host_apt_updated=1
    fi
    vhca_log "installing on the host: $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}
missing=()
command -v wget >/dev/null || missing+=(wget)
command -v xz >/dev/null || missing+=(xz-utils)
command -v zstd >/dev/null || missing+=(zstd)
command -v unshare >/dev/null || missing+=(util-linux)
[ -e /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
[ "${VHCA_DEBOOTSTRAP:-}" = trixie ] || command -v debootstrap >/dev/null || missing+=(debootstrap)
[ ${#missing[@]} = 0 ] || host_install "${missing[@]}"

# debootstrap: the host's if it knows trixie, else the one from trixie's .deb
# (unpacked with dpkg -x, never installed on the host).
DEBOOTSTRAP=debootstrap
if [ "${VHCA_DEBOOTSTRAP:-}" = trixie ] || [ ! -e /usr/share/debootstrap/scripts/$SUITE ]; then
    dbs="$VHCA_CACHE/debootstrap-trixie"
    if [ ! -x "$dbs/usr/sbin/debootstrap" ]; then
        vhca_log "fetching debootstrap from $SUITE"
        a="$VHCA_CACHE/apt-$SUITE"
        rm -rf "$a" "$dbs.tmp"
        mkdir -p "$a/lists/partial" "$a/cache/archives/partial" "$dbs.tmp"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $SUITE main" >"$a/sources.list"
        aopt=(-o Dir::Etc::SourceList="$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::State::Lists="$a/lists" -o Dir::Cache="$a/cache"
              -o Dir::State::status=/dev/null -o APT::Architectures::=amd64 -o Acquire::Languages=none)
        aopt+=(-o APT::Sandbox::User=root)
        apt-get "${aopt[@]}" update -qq >&2
        (cd "$dbs.tmp" && apt-get "${aopt[@]}" download debootstrap >&2)
        dpkg -x "$dbs.tmp"/debootstrap_*.deb "$dbs.tmp"
        rm -f "$dbs.tmp"/debootstrap_*.deb
        rm -rf "$a" "$dbs"
        mv "$dbs.tmp" "$dbs"
    fi
    DEBOOTSTRAP="$dbs/usr/sbin/debootstrap"
    export DEBOOTSTRAP_DIR="$dbs/usr/share/debootstrap"
fi
vhca_log "debootstrap: $DEBOOTSTRAP ($("$DEBOOTSTRAP" --version 2>/dev/null || echo '?'))"

# --- build ----------------------------------------------------------------
# Leftovers of interrupted builds (we hold the lock, so nobody is using them).
rm -rf "$VHCA_CACHE"/root-*.tmp.*
TMP="$ROOT.tmp.$$"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"

vhca_step "debootstrap --variant=minbase $SUITE -> $TMP" "~1-3 min (less from the .deb cache)" \
    "$VHCA_CACHE/debootstrap.log" \
    "$DEBOOTSTRAP" --variant=minbase --components=main --cache-dir="$VHCA_CACHE/debs" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$SUITE" "$TMP" "$MIRROR" ||
    { tail -30 "$VHCA_CACHE/debootstrap.log" >&2; vhca_die "debootstrap failed (log: $VHCA_CACHE/debootstrap.log)"; }
t1=$(date +%s)
vhca_log "debootstrap done in $((t1 - t0)) s"

# apt sources: trixie + updates + security (+ sources, for rdma-core's tarballs),
# backports present but, as always, only used when asked for.
rm -f "$TMP/etc/apt/sources.list"
cat >"$TMP/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb deb-src
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $MIRROR
Suites: $SUITE-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >"$TMP/etc/apt/apt.conf.d/90vhca" <<'EOF'
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
# No services start in a chroot.
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 755 "$TMP/usr/sbin/policy-rc.d"
echo vhca-root >"$TMP/etc/hostname"

in_tmp() { VHCA_ENV="DEBIAN_FRONTEND=noninteractive" vhca_chroot "$TMP" "$@"; }
APT=(apt-get -y -q -o Dir::Cache::Archives="$VHCA_CACHE/debs/")

# The kernel's postinst would build an initramfs-tools initrd we never use
# (guest.sh generates its own): divert update-initramfs to a no-op.
in_tmp sh -ec '
    dpkg-divert --local --rename --add /usr/sbin/update-initramfs >/dev/null
    printf "#!/bin/sh\nexit 0\n" >/usr/sbin/update-initramfs
    chmod 755 /usr/sbin/update-initramfs'

vhca_log "apt-get update (root)"
in_tmp "${APT[@]}" update >&2
vhca_log "installing trixie packages: ${PACKAGES[*]}"
vhca_step "apt-get install (root: ${#PACKAGES[@]} packages and their dependencies)" "~3-8 min (~3 with the .deb cache)" \
    "$VHCA_CACHE/apt-trixie.log" in_tmp "${APT[@]}" install "${PACKAGES[@]}" ||
    { tail -30 "$VHCA_CACHE/apt-trixie.log" >&2; vhca_die "installing trixie packages failed"; }
t2=$(date +%s)
vhca_log "trixie packages done in $((t2 - t1)) s"

# QEMU from backports, after the trixie packages (ARCHITECTURE.md §7: the other order
# makes pahole's dependencies conflict); if it still conflicts, take libdw1t64
# from backports too.
vhca_log "installing qemu-system-x86 from $SUITE-backports"
if ! vhca_step "apt-get install -t $SUITE-backports qemu-system-x86" "~1 min" "$VHCA_CACHE/apt-qemu.log" \
    in_tmp "${APT[@]}" install -t "$SUITE-backports" qemu-system-x86; then
    vhca_log "plain install failed; retrying with libdw1t64/$SUITE-backports"
    in_tmp "${APT[@]}" install -t "$SUITE-backports" qemu-system-x86 "libdw1t64/$SUITE-backports" \
        >>"$VHCA_CACHE/apt-qemu.log" 2>&1 ||
        { tail -30 "$VHCA_CACHE/apt-qemu.log" >&2; vhca_die "installing qemu-system-x86 failed"; }
fi
t3=$(date +%s)
vhca_log "qemu done in $((t3 - t2)) s"

# --- check and describe ---------------------------------------------------
in_tmp sh -c 'qemu-system-x86_64 -device help' | grep -q '"vfio-user-pci"' ||
    vhca_die "qemu-system-x86_64 in the root has no vfio-user-pci device"
K=$(in_tmp sh -c 'ls /lib/modules | sort -V | tail -1')
[ -e "$TMP/boot/vmlinuz-$K" ] || vhca_die "no kernel image for $K in the root"
[ -e "$TMP/lib/modules/$K/build/Makefile" ] || vhca_die "no headers for $K in the root"
{
    echo "key=$KEY"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "mirror=$MIRROR"
    echo "kernel=$K"
    in_tmp dpkg-query -W -f='pkg ${Package}=${Version}\n' \
        qemu-system-x86 rdma-core ibverbs-providers perftest python3-pyverbs busybox-static gcc "linux-image-$K"
} >"$TMP/etc/vhca-root.info"
date -u +%s >"$TMP/.vhca-root-complete"

rm -rf "$ROOT"
mv "$TMP" "$ROOT"
trap - EXIT
vhca_log "root ready in $(( $(date +%s) - t0 )) s: $ROOT"
sed 's/^/    /' "$ROOT/etc/vhca-root.info" >&2

# --- prune roots of older script versions not in use ----------------------
if [ "$prune" = 1 ]; then
    for old in "$VHCA_CACHE"/root-*; do
        [ -d "$old" ] && [ "$old" != "$ROOT" ] || continue
        case "$old" in *.tmp.*) continue;; esac
        busy=0
        for p in /proc/[0-9]*/root; do
            case "$(readlink "$p" 2>/dev/null)" in "$old"|"$old"/*) busy=1; break;; esac
        done
        if [ "$busy" = 0 ]; then
            vhca_log "pruning old root $old"
            rm -rf --one-file-system "$old"
        fi
    done
fi

echo "$ROOT"
