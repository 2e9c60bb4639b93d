#!/bin/bash
# guest-driver/provider/package.sh — libvhca as a Debian package for a guest
# release (issue 17): rdma-core's source of that release with our patch series
# (patches/, git format-patch form) applied, the provider built in that tree,
# packaged as ibverbs-provider-vhca_<version>_amd64.deb. A guest installs it
# with `apt install ./ibverbs-provider-vhca_*.deb` (README.md).
#
# Usage: guest-driver/provider/package.sh [--release bookworm|trixie]
#        guest-driver/provider/package.sh --update-patches
#   Prints the .deb's path (default release: trixie). --update-patches writes
#   patches/ anew from the provider's sources, against trixie's rdma-core (run
#   it after changing a provider file: a build stops when the series does not
#   reproduce the sources, rather than package something else).
#
# Steps (run as root on the host; the builds run in the release's root:
# trixie = the host tool root, bookworm = images/distro-root.sh's):
#   1. rdma-core's source at the root's libibverbs1 version (bookworm 44.0,
#      trixie 56.1): `apt-get source --print-uris` inside the root, the
#      tarballs checked by SHA256, Debian's patches applied; kept in
#      $VHCA_CACHE/rdma-core-src-<version>. A mirror without the orig
#      tarball: env VHCA_RDMA_CORE_GIT=<clone of linux-rdma/rdma-core>, whose
#      tag v<upstream> is archived instead.
#   2. A git tree of it; `git am` of patches/*.patch (0001 adds
#      providers/vhca and its kernel header, wired into CMake; 0002 names it in
#      debian/); the applied files must equal guest-driver/provider's and
#      the ABI headers.
#   3. cmake + ninja inside the root, only the vhca-rdmav<PABI> target;
#      warnings in providers/vhca fail the build.
#   4. dpkg-deb: libvhca-rdmav<PABI>.so in the libibverbs provider folder and
#      /etc/libibverbs.d/vhca.driver; Depends on libibverbs1 of the same
#      rdma-core major version (the provider ABI is private to a release).
#      gzip members, so busybox's dpkg can install it too.
#   Cached in $VHCA_CACHE/provider-deb-<key>, key = this script, the patches,
#   the sources and the version.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../../images/lib.sh
. "$REPO/images/lib.sh"

release=trixie update=0
while [ $# -gt 0 ]; do
    case "$1" in
        --release) [ $# -ge 2 ] || vhca_die "--release needs an argument"; release=$2; shift 2;;
        --update-patches) update=1; shift;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
case "$release" in trixie|bookworm) ;; *) vhca_die "--release: bookworm or trixie";; esac
vhca_need_root
command -v git >/dev/null || vhca_die "git is needed on the host (the patch series)"
root=$("$VHCA_IMAGES/distro-root.sh" "$release")
ver=$(vhca_chroot "$root" dpkg-query -W -f='${Version}' libibverbs1) ||
    vhca_die "no libibverbs1 in the $release root"
upstream=${ver%-*}
SRCS=("$HERE"/CMakeLists.txt "$HERE"/*.[ch])
ABI_H="$REPO/guest-driver/include/vhca_abi.h"
UABI_H="$REPO/guest-driver/kernel/vhca-abi-user.h"
GIT=(git -c user.name=vhca -c user.email=vhca@localhost -c core.autocrlf=false
     -c commit.gpgsign=false -c advice.detachedHead=false)
# A fixed date: regenerating the series changes it only where the sources did.
export GIT_AUTHOR_DATE='2026-01-01T00:00:00+0000' GIT_COMMITTER_DATE='2026-01-01T00:00:00+0000'

# --- 1. the source ------------------------------------------------------------
src_base="$VHCA_CACHE/rdma-core-src-$ver"
mkdir -p "$src_base"
exec 9>"$src_base/.lock"
flock 9
if [ ! -e "$src_base/.complete" ]; then
    vhca_log "fetching rdma-core $ver's source (in the $release root)"
    find "$src_base" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
    # As build.sh: the mirror may lack the .dsc, so not `apt-get source` but
    # its URI list (with SHA256s) and apt-helper, in the root (its apt
    # sources); then, here, what dpkg-source -x does: orig tarball, Debian
    # tarball over it, debian/patches/series.
    # shellcheck disable=SC2016  # expanded inside the root
    vhca_chroot "$root" bash -ec '
        cd "$1"
        apt-get source --print-uris "rdma-core=$2" 2>/dev/null |
            sed -n "s/^.\([^ ]*\). \([^ ]*\) [0-9]* \(SHA256:[0-9a-f]*\)\$/\1 \2 \3/p" |
            grep -v "\.dsc " >uris
        [ -s uris ] || { echo "apt-get source --print-uris listed nothing"; exit 1; }
        while read -r uri name hash; do
            /usr/lib/apt/apt-helper download-file "$uri" "$name" "$hash" >/dev/null ||
                echo "download of $name failed"
        done <uris' sh "$src_base" "$ver" >"$src_base/get.log" 2>&1 ||
        { tail -20 "$src_base/get.log" >&2; vhca_die "listing rdma-core $ver's source failed"; }
    (
        cd "$src_base"
        set -e
        if ! ls rdma-core_"$upstream".orig.tar.* >/dev/null 2>&1; then
            # Some mirrors drop old orig tarballs (bookworm's 44.0 on this
            # machine's): upstream's release tag, from a clone of
            # github.com/linux-rdma/rdma-core named by VHCA_RDMA_CORE_GIT,
            # is the same tree.
            [ -n "${VHCA_RDMA_CORE_GIT:-}" ] ||
                vhca_die "no rdma-core_$upstream.orig tarball on the mirror; set VHCA_RDMA_CORE_GIT to a clone of github.com/linux-rdma/rdma-core"
            vhca_log "orig tarball from $VHCA_RDMA_CORE_GIT, tag v$upstream"
            git -C "$VHCA_RDMA_CORE_GIT" archive --format=tar --prefix="rdma-core-$upstream/" \
                "v$upstream" | gzip -n >"rdma-core_$upstream.orig.tar.gz"
        fi
        ls rdma-core_"$ver".debian.tar.* >/dev/null || vhca_die "no rdma-core_$ver.debian tarball"
        mkdir unpack
        tar -xf rdma-core_"$upstream".orig.tar.* -C unpack
        t=$(ls -d unpack/rdma-core-*)
        rm -rf "$t/debian"
        tar -xf rdma-core_"$ver".debian.tar.* -C "$t"
        if [ -s "$t/debian/patches/series" ]; then
            grep -v '^\s*#' "$t/debian/patches/series" | while read -r p _; do
                [ -n "$p" ] || continue
                patch -d "$t" -p1 -s <"$t/debian/patches/$p" || vhca_die "Debian patch $p does not apply"
            done
        fi
        mv "$t" "rdma-core-$upstream"
        rm -rf unpack rdma-core_*
    ) || exit 1
    [ -e "$src_base/rdma-core-$upstream/CMakeLists.txt" ] || vhca_die "no rdma-core-$upstream tree"
    touch "$src_base/.complete"
fi
tree="$src_base/rdma-core-$upstream"
exec 9>&-

# A fresh git tree of the release's source, one commit "rdma-core <ver>".
# (git runs on the host: the tree is under $VHCA_CACHE, visible to both.)
git_tree() { # DEST
    rm -rf "$1"
    cp -a "$tree" "$1"
    (cd "$1" && "${GIT[@]}" init -q && "${GIT[@]}" add -A -f &&
        "${GIT[@]}" commit -q -m "rdma-core $ver (Debian source)") >&2
}

# --- --update-patches: the series from the sources ----------------------------
if [ "$update" = 1 ]; then
    [ "$release" = trixie ] || vhca_die "--update-patches works against trixie's tree"
    w="$VHCA_CACHE/provider-patches.$$"
    trap 'rm -rf "$w"' EXIT
    git_tree "$w"
    mkdir -p "$w/providers/vhca"
    cp "${SRCS[@]}" "$ABI_H" "$w/providers/vhca/"
    cp "$UABI_H" "$w/kernel-headers/rdma/vhca-abi-user.h"
    sed -i 's|^add_subdirectory(providers/vmw_pvrdma)$|&\nadd_subdirectory(providers/vhca)|' "$w/CMakeLists.txt"
    sed -i 's|^  rdma/vmw_pvrdma-abi.h$|&\n  rdma/vhca-abi-user.h|' "$w/kernel-headers/CMakeLists.txt"
    [ "$(grep -c 'providers/vhca' "$w/CMakeLists.txt")" = 1 ] &&
        [ "$(grep -c 'rdma/vhca-abi-user.h' "$w/kernel-headers/CMakeLists.txt")" = 2 ] ||
        vhca_die "could not wire providers/vhca into the CMake files"
    (cd "$w" && "${GIT[@]}" add -A -f && "${GIT[@]}" commit -q -F - <<'MSG'
providers/vhca: add the vhca provider

vhca is a virtual PCIe InfiniBand HCA (PCI 1234:1bca) served to QEMU over
vfio-user; its kernel driver is vhca.ko (uverbs driver id
RDMA_DRIVER_UNKNOWN, ABI version 1). The provider maps one UAR page and the
WAKE page per context, keeps CQ, QP and SRQ rings in user memory and posts
and polls without system calls. RC, UC and UD QPs, SRQs, extended QP and
CQ verbs, parent domains and rereg_mr.

kernel-headers/rdma/vhca-abi-user.h is the driver's private uverbs ABI;
providers/vhca/vhca_abi.h the device's interface (generated).
MSG
    ) >&2
    sed -i 's|^  - vmw_pvrdma: VMware paravirtual RDMA device$|&\n  - vhca: vhca virtual PCIe InfiniBand HCA|' "$w/debian/control"
    grep -q '  - vhca: ' "$w/debian/control" || vhca_die "could not add vhca to debian/control"
    (cd "$w" && "${GIT[@]}" add -A && "${GIT[@]}" commit -q -F - <<'MSG'
debian: ship the vhca provider in ibverbs-providers

ibverbs-providers installs every lib*-rdmav*.so and every
/etc/libibverbs.d file already; only the package description lists the
providers by name.
MSG
    ) >&2
    rm -f "$HERE"/patches/*.patch
    mkdir -p "$HERE/patches"
    (cd "$w" && "${GIT[@]}" format-patch -q --no-signature --zero-commit -U2 \
        -o "$HERE/patches" HEAD~2) >&2
    ls "$HERE"/patches/*.patch
    exit 0
fi

# --- 2. the patched tree --------------------------------------------------------
PATCHES=("$HERE"/patches/*.patch)
[ -e "${PATCHES[0]}" ] || vhca_die "no patches in $HERE/patches (--update-patches)"
key=$( (cat "$0" "${PATCHES[@]}" "${SRCS[@]}" "$ABI_H" "$UABI_H"; echo "$ver") |
    sha256sum | cut -c1-16)
out="$VHCA_CACHE/provider-deb-$key"
if [ -e "$out/.complete" ]; then
    ls "$out"/*.deb
    exit 0
fi
tmp="$out.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
git_tree "$tmp/rdma-core"
(cd "$tmp/rdma-core" && "${GIT[@]}" am -q "${PATCHES[@]}") >"$tmp/am.log" 2>&1 ||
    { cat "$tmp/am.log" >&2; vhca_die "the patch series does not apply to rdma-core $ver"; }
stale=()
for f in "${SRCS[@]}" "$ABI_H"; do
    cmp -s "$f" "$tmp/rdma-core/providers/vhca/$(basename "$f")" || stale+=("$f")
done
cmp -s "$UABI_H" "$tmp/rdma-core/kernel-headers/rdma/vhca-abi-user.h" || stale+=("$UABI_H")
for f in "$tmp"/rdma-core/providers/vhca/*; do
    [ -e "$HERE/$(basename "$f")" ] || [ "$(basename "$f")" = vhca_abi.h ] || stale+=("$f (only in the series)")
done
[ ${#stale[@]} = 0 ] || vhca_die "patches/ is stale (${stale[*]}): run $0 --update-patches"

# --- 3. the build ----------------------------------------------------------------
pabi=$(sed -n 's/^set(IBVERBS_PABI_VERSION "\([0-9]*\)")$/\1/p' "$tmp/rdma-core/CMakeLists.txt")
[ -n "$pabi" ] || vhca_die "no IBVERBS_PABI_VERSION in rdma-core's CMakeLists.txt"
target="vhca-rdmav$pabi"
vhca_log "building $target in rdma-core $ver ($release root)"
# shellcheck disable=SC2016  # expanded inside the root
vhca_chroot "$root" sh -ec '
    mkdir -p "$1/build" && cd "$1/build"
    cmake -G Ninja -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 -DENABLE_RESOLVE_NEIGH=0 \
        -DCMAKE_SKIP_RPATH=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo ../rdma-core >configure.log 2>&1 ||
        { tail -30 configure.log; exit 1; }
    ninja "$2" >ninja.log 2>&1 || { grep -B2 -A12 -m5 "error" ninja.log || tail -40 ninja.log; exit 1; }
' sh "$tmp" "$target" >&2 || vhca_die "the provider does not build in rdma-core $ver"
if grep -q 'providers/vhca/.*warning:' "$tmp/build/ninja.log"; then
    grep -A6 'providers/vhca/.*warning:' "$tmp/build/ninja.log" >&2
    vhca_die "warnings in the provider (rdma-core $ver)"
fi

# --- 4. the package ----------------------------------------------------------------
major=${upstream%%.*}
vhca_ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$REPO/guest-driver/kernel/dkms.conf")
pkgver="$vhca_ver+rdma$upstream"
st="$tmp/stage"
mkdir -p "$st/DEBIAN" "$st/usr/lib/x86_64-linux-gnu/libibverbs" "$st/etc/libibverbs.d" \
    "$st/usr/share/doc/ibverbs-provider-vhca"
install -m 644 "$tmp/build/lib/lib$target.so" "$st/usr/lib/x86_64-linux-gnu/libibverbs/"
strip --strip-unneeded "$st/usr/lib/x86_64-linux-gnu/libibverbs/lib$target.so"
printf 'driver vhca\n' >"$st/etc/libibverbs.d/vhca.driver"
cp "${PATCHES[@]}" "$st/usr/share/doc/ibverbs-provider-vhca/"
cat >"$st/DEBIAN/control" <<EOF
Package: ibverbs-provider-vhca
Version: $pkgver
Architecture: amd64
Maintainer: vhca <vhca@localhost>
Depends: libc6, libibverbs1 (>= $upstream), libibverbs1 (<< $((major + 1))~)
Section: net
Priority: optional
Description: libibverbs provider for vhca, the virtual PCIe InfiniBand HCA
 libvhca-rdmav$pabi.so and /etc/libibverbs.d/vhca.driver, built from
 rdma-core $ver with providers/vhca applied (the patch series is in
 /usr/share/doc/ibverbs-provider-vhca). Needs the vhca.ko kernel driver.
EOF
printf '/etc/libibverbs.d/vhca.driver\n' >"$st/DEBIAN/conffiles"
deb="$tmp/ibverbs-provider-vhca_${pkgver}_amd64.deb"
dpkg-deb --root-owner-group -Zgzip --build "$st" "$deb" >/dev/null ||
    vhca_die "dpkg-deb failed"
cp "$tmp/build/ninja.log" "$tmp/build.log"
echo "$ver" >"$tmp/rdma-core-version"
rm -rf "$tmp/stage" "$tmp/rdma-core" "$tmp/build"
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
vhca_log "built $out/$(basename "$deb")"
ls "$out"/*.deb
