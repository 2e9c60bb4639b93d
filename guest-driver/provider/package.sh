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
#   1. rdma-core's source: always trixie's (56.1), whatever the release, from
#      the trixie root: `apt-get source --print-uris`, the tarballs checked by
#      SHA256, Debian's patches applied; kept in
#      $VHCA_CACHE/rdma-core-src-<version>. Bookworm's own 44.0 source cannot
#      be had here (the mirror has no rdma-core_44.0.orig tarball; issue 24),
#      and it is not needed: a provider is loaded by the private ABI its file
#      name carries, and both releases' libibverbs load providers of private
#      ABI 34 (`*-rdmav34.so`; IBVERBS_PABI_VERSION is 34 in both trees).
#   2. A git tree of it; `git am` of patches/*.patch (0001 adds
#      providers/vhca and its kernel header, wired into CMake; 0002 names it in
#      debian/); the applied files must equal guest-driver/provider's and
#      the ABI headers.
#   3. cmake + ninja inside the release's root, only the vhca-rdmav<PABI>
#      target; warnings in providers/vhca fail the build. When the release's
#      libibverbs1 is not the source's version (bookworm: 44.0), the provider
#      is compiled against that release's public headers (its libibverbs-dev,
#      downloaded in the root, VHCA_IBVERBS_INCLUDE in CMakeLists.txt): the
#      structures the provider and the library share (ibv_qp_ex grew a member
#      after 44, moving verbs_qp's own fields) then have the loading
#      library's layout, and compat.h leaves out what 44 lacks. The root's
#      libibverbs must export verbs_register_driver_<PABI>.
#   4. The check that it loads: in the release's root, a small program
#      dlopen()s libibverbs.so.1 and then the provider with RTLD_NOW, so every
#      symbol the provider imports (IBVERBS_PRIVATE_<PABI> included) must
#      resolve in the release's own library, or the build fails.
#   5. dpkg-deb: libvhca-rdmav<PABI>.so in the libibverbs provider folder and
#      /etc/libibverbs.d/vhca.driver; Depends on libibverbs1 of the release's
#      rdma-core major version (the provider ABI is private to a release).
#      gzip members, so busybox's dpkg can install it too.
#   Cached in $VHCA_CACHE/provider-deb-<key>, key = this script, the patches,
#   the sources and both versions.
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
src_root=$("$VHCA_IMAGES/distro-root.sh" trixie)
# The source's version (trixie's) and the loading library's (the release's).
ver=$(vhca_chroot "$src_root" dpkg-query -W -f='${Version}' libibverbs1) ||
    vhca_die "no libibverbs1 in the trixie root"
upstream=${ver%-*}
lib_ver=$(vhca_chroot "$root" dpkg-query -W -f='${Version}' libibverbs1) ||
    vhca_die "no libibverbs1 in the $release root"
lib_upstream=${lib_ver%-*}
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
    vhca_log "fetching rdma-core $ver's source (in the trixie root)"
    find "$src_base" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf {} +
    # As build.sh: the mirror may lack the .dsc, so not `apt-get source` but
    # its URI list (with SHA256s) and apt-helper, in the root (its apt
    # sources); then, here, what dpkg-source -x does: orig tarball, Debian
    # tarball over it, debian/patches/series.
    # shellcheck disable=SC2016  # expanded inside the root
    vhca_chroot "$src_root" bash -ec '
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
        ls rdma-core_"$upstream".orig.tar.* >/dev/null 2>&1 ||
            vhca_die "no rdma-core_$upstream.orig tarball (see $src_base/get.log)"
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
key=$( (cat "$0" "${PATCHES[@]}" "${SRCS[@]}" "$ABI_H" "$UABI_H"; echo "$ver $lib_ver") |
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
libdir=/usr/lib/x86_64-linux-gnu
# The release's library must load providers of this tree's private ABI.
vhca_chroot "$root" sh -c "objdump -T $libdir/libibverbs.so.1 | grep -q ' verbs_register_driver_$pabi\$'" ||
    vhca_die "libibverbs $lib_ver ($release) does not load providers of private ABI $pabi (rdma-core $ver's)"
cmake_extra=()
if [ "$lib_upstream" != "$upstream" ]; then
    # That release's public headers, from its libibverbs-dev (not installed in
    # the root: downloaded and unpacked here, the root stays as built).
    vhca_log "compiling against libibverbs $lib_ver's public headers (rdma-core $ver's tree, private ABI $pabi)"
    mkdir -p "$tmp/dev"
    # shellcheck disable=SC2016  # expanded inside the root
    vhca_chroot "$root" sh -ec 'cd "$1" && apt-get download -q "libibverbs-dev=$2" >download.log 2>&1 &&
        dpkg-deb -x libibverbs-dev_*.deb x' sh "$tmp/dev" "$lib_ver" ||
        { cat "$tmp/dev/download.log" >&2; vhca_die "could not get libibverbs-dev $lib_ver in the $release root"; }
    # Only infiniband/: the kernel's uAPI headers (rdma/) are append-only and
    # stay the tree's.
    mkdir -p "$tmp/ibverbs-include"
    cp -a "$tmp/dev/x/usr/include/infiniband" "$tmp/ibverbs-include/"
    [ -e "$tmp/ibverbs-include/infiniband/verbs.h" ] || vhca_die "no infiniband/verbs.h in libibverbs-dev $lib_ver"
    [ ! -e "$tmp/ibverbs-include/infiniband/driver.h" ] ||
        vhca_die "libibverbs-dev $lib_ver ships driver.h: decide which one the provider takes"
    cmake_extra=(-DVHCA_IBVERBS_INCLUDE="$tmp/ibverbs-include" -DVHCA_IBVERBS_VERSION="$lib_upstream")
fi
vhca_log "building $target in rdma-core $ver ($release root, for libibverbs $lib_ver)"
# shellcheck disable=SC2016  # expanded inside the root
vhca_chroot "$root" sh -ec '
    dir=$1 target=$2; shift 2
    mkdir -p "$dir/build" && cd "$dir/build"
    cmake -G Ninja -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 -DENABLE_RESOLVE_NEIGH=0 \
        -DCMAKE_SKIP_RPATH=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" ../rdma-core >configure.log 2>&1 ||
        { tail -30 configure.log; exit 1; }
    ninja "$target" >ninja.log 2>&1 || { grep -B2 -A12 -m5 "error" ninja.log || tail -40 ninja.log; exit 1; }
' sh "$tmp" "$target" "${cmake_extra[@]}" >&2 || vhca_die "the provider does not build in rdma-core $ver"
if grep -q 'providers/vhca/.*warning:' "$tmp/build/ninja.log"; then
    grep -A6 'providers/vhca/.*warning:' "$tmp/build/ninja.log" >&2
    vhca_die "warnings in the provider (rdma-core $ver)"
fi
if [ ${#cmake_extra[@]} -gt 0 ] &&
    ! grep -q -- "-I$tmp/ibverbs-include" "$tmp/build/build.ninja"; then
    vhca_die "the provider was not compiled against libibverbs $lib_ver's headers"
fi

# --- 4. the load check ----------------------------------------------------------
# The release's libibverbs, then the provider with every symbol bound now: a
# symbol the provider imports that this libibverbs lacks fails here, not in a
# user's ibv_devices.
cat >"$tmp/loadcheck.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv)
{
	if (argc != 2 || !dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL)) {
		fprintf(stderr, "libibverbs.so.1: %s\n", dlerror());
		return 1;
	}
	if (!dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
		fprintf(stderr, "%s\n", dlerror());
		return 1;
	}
	puts("loaded");
	return 0;
}
C
# shellcheck disable=SC2016  # expanded inside the root
vhca_chroot "$root" sh -ec 'gcc -O0 -o "$1/loadcheck" "$1/loadcheck.c" -ldl && "$1/loadcheck" "$1/build/lib/lib$2.so"' \
    sh "$tmp" "$target" >"$tmp/loadcheck.log" 2>&1 ||
    { cat "$tmp/loadcheck.log" >&2; vhca_die "libibverbs $lib_ver ($release) cannot load the provider"; }
vhca_log "libibverbs $lib_ver loads lib$target.so (every symbol bound)"

# --- 5. the package ----------------------------------------------------------------
major=${lib_upstream%%.*}
vhca_ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' "$REPO/guest-driver/kernel/dkms.conf")
pkgver="$vhca_ver+rdma$lib_upstream"
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
Depends: libc6, libibverbs1 (>= $lib_upstream), libibverbs1 (<< $((major + 1))~)
Section: net
Priority: optional
Description: libibverbs provider for vhca, the virtual PCIe InfiniBand HCA
 libvhca-rdmav$pabi.so and /etc/libibverbs.d/vhca.driver, built from
 rdma-core $ver with providers/vhca applied (the patch series is in
 /usr/share/doc/ibverbs-provider-vhca), for libibverbs $lib_upstream (provider
 ABI $pabi). Needs the vhca.ko kernel driver.
EOF
printf '/etc/libibverbs.d/vhca.driver\n' >"$st/DEBIAN/conffiles"
deb="$tmp/ibverbs-provider-vhca_${pkgver}_amd64.deb"
dpkg-deb --root-owner-group -Zgzip --build "$st" "$deb" >/dev/null ||
    vhca_die "dpkg-deb failed"
cp "$tmp/build/ninja.log" "$tmp/build.log"
echo "$ver" >"$tmp/rdma-core-version"
echo "$lib_ver" >"$tmp/libibverbs-version"
rm -rf "$tmp/stage" "$tmp/rdma-core" "$tmp/build" "$tmp/dev" "$tmp/ibverbs-include" "$tmp/loadcheck"
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
vhca_log "built $out/$(basename "$deb")"
ls "$out"/*.deb
