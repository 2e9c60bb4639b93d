#!/bin/bash
# guest-driver/provider/build.sh — build libvhca, the rdma-core provider of
# vhca, inside the rdma-core source of the guest's version (ARCHITECTURE.md §7).
#
# Usage: guest-driver/provider/build.sh [--rebuild]
#   Prints the output folder, which holds libvhca-rdmav<PABI>.so and
#   vhca.driver ("driver vhca", for /etc/libibverbs.d). Run it on the host: it
#   re-runs itself inside the host tool root (images/in-root.sh).
#
# Steps (inside the root):
#   1. rdma-core's source at the version of the root's libibverbs1 (the guest's
#      rdma-core): `apt-get source --print-uris` lists the tarballs and their
#      SHA256; apt-helper download-file fetches them (checked); the orig
#      tarball is unpacked, its stale debian/ replaced by the Debian tarball,
#      debian/patches/series applied. Kept in $VHCA_CACHE/rdma-core-<ver>/src.
#   2. A build tree next to it: the provider sources go to providers/vhca (with
#      vhca_abi.h), vhca-abi-user.h to kernel-headers/rdma/ (both listed in
#      the CMake files), configured once with -DNO_PYVERBS=1 -DNO_MAN_PAGES=1
#      -DENABLE_RESOLVE_NEIGH=0 -DCMAKE_SKIP_RPATH=ON, and only the
#      vhca-rdmav<PABI> target is built.
#   3. The result is cached in $VHCA_CACHE/provider-<key>/, key = hash of this
#      script, the provider sources, vhca_abi.h, vhca-abi-user.h and the
#      rdma-core version: unchanged sources cost nothing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
: "${VHCA_CACHE:=/var/cache/vhca}"
rebuild=0
case "${1:-}" in
    --rebuild) rebuild=1;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
    "") ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2;;
esac

log() { printf '[provider/build.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- on the host: go inside the root ----------------------------------------
if [ ! -e /etc/vhca-root.info ]; then
    exec env VHCA_ENV="VHCA_CACHE=$VHCA_CACHE" "$REPO/images/in-root.sh" \
        "$HERE/build.sh" "$@"
fi

# --- inside the root --------------------------------------------------------
ver=$(dpkg-query -W -f='${Version}' libibverbs1) || die "libibverbs1 is not installed in the root"
upstream=${ver%-*}
srcs=("$HERE"/CMakeLists.txt "$HERE"/*.[ch] "$REPO/guest-driver/include/vhca_abi.h"
      "$REPO/guest-driver/kernel/vhca-abi-user.h")
key=$( (cat "$HERE/build.sh" "${srcs[@]}"; echo "$ver") | sha256sum | cut -c1-16)
out="$VHCA_CACHE/provider-$key"
if [ "$rebuild" = 0 ] && [ -e "$out/.complete" ]; then
    echo "$out"
    exit 0
fi

base="$VHCA_CACHE/rdma-core-$ver"
mkdir -p "$base"
exec 9>"$base/.lock"
flock 9

# 1. The source, once per version.
src="$base/src"
if [ ! -e "$src/.vhca-src-complete" ]; then
    log "fetching rdma-core $ver source"
    rm -rf "$src" "$base/dl"
    mkdir -p "$base/dl"
    (
        cd "$base/dl"
        # 'URI' NAME SIZE SHA256:hex, one per file; the .dsc is not needed.
        apt-get source --print-uris "rdma-core=$ver" 2>/dev/null |
            sed -n "s/^'\([^']*\)' \([^ ]*\) [0-9]* \(SHA256:[0-9a-f]*\)$/\1 \2 \3/p" |
            grep -v '\.dsc ' >uris
        [ -s uris ] || die "apt-get source --print-uris rdma-core=$ver listed nothing (deb-src missing?)"
        while read -r uri name hash; do
            /usr/lib/apt/apt-helper download-file "$uri" "$name" "$hash" >/dev/null 2>&1 ||
                die "download of $name failed"
        done <uris
    )
    orig=$(ls "$base"/dl/rdma-core_"$upstream".orig.tar.*)
    deb=$(ls "$base"/dl/rdma-core_"$ver".debian.tar.*)
    mkdir -p "$base/unpack"
    tar -xf "$orig" -C "$base/unpack"
    tree=$(ls -d "$base"/unpack/rdma-core-*)
    rm -rf "$tree/debian"
    tar -xf "$deb" -C "$tree"
    if [ -s "$tree/debian/patches/series" ]; then
        grep -v '^\s*#' "$tree/debian/patches/series" | while read -r p _; do
            [ -n "$p" ] || continue
            patch -d "$tree" -p1 -s <"$tree/debian/patches/$p" || die "patch $p does not apply"
        done
    fi
    mv "$tree" "$src"
    rm -rf "$base/unpack" "$base/dl"
    touch "$src/.vhca-src-complete"
fi

# 2. The build tree: a copy of the source with the provider wired in,
# configured once; later builds only refresh the provider's files.
work="$base/work"
bld="$base/build"
if [ ! -e "$work/.vhca-work-complete" ]; then
    log "preparing the build tree"
    rm -rf "$work" "$bld"
    cp -a "$src" "$work"
    mkdir -p "$work/providers/vhca"
    grep -q 'providers/vhca' "$work/CMakeLists.txt" ||
        sed -i 's|^add_subdirectory(providers/vmw_pvrdma)$|&\nadd_subdirectory(providers/vhca)|' "$work/CMakeLists.txt"
    grep -q 'providers/vhca' "$work/CMakeLists.txt" || die "could not add providers/vhca to CMakeLists.txt"
    sed -i 's|^  rdma/vmw_pvrdma-abi.h$|&\n  rdma/vhca-abi-user.h|' "$work/kernel-headers/CMakeLists.txt"
    [ "$(grep -c 'rdma/vhca-abi-user.h' "$work/kernel-headers/CMakeLists.txt")" = 2 ] ||
        die "could not list vhca-abi-user.h in kernel-headers/CMakeLists.txt"
    touch "$work/.vhca-work-complete"
fi
# Only changed files are rewritten, so ninja rebuilds only what changed.
sync_file() { cmp -s "$1" "$2" || cp "$1" "$2"; }
for f in "$HERE"/CMakeLists.txt "$HERE"/*.[ch] "$REPO/guest-driver/include/vhca_abi.h"; do
    sync_file "$f" "$work/providers/vhca/$(basename "$f")"
done
sync_file "$REPO/guest-driver/kernel/vhca-abi-user.h" "$work/kernel-headers/rdma/vhca-abi-user.h"
for f in "$work"/providers/vhca/*; do
    case "$(basename "$f")" in
        CMakeLists.txt|vhca_abi.h) continue;;
    esac
    [ -e "$HERE/$(basename "$f")" ] || rm -f "$f"
done

pabi=$(sed -n 's/^set(IBVERBS_PABI_VERSION "\([0-9]*\)")$/\1/p' "$work/CMakeLists.txt")
[ -n "$pabi" ] || die "no IBVERBS_PABI_VERSION in rdma-core's CMakeLists.txt"
target="vhca-rdmav$pabi"
log "building $target (rdma-core $ver)"
if [ ! -e "$bld/build.ninja" ]; then
    mkdir -p "$bld"
    (cd "$bld" && cmake -G Ninja -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 \
        -DENABLE_RESOLVE_NEIGH=0 -DCMAKE_SKIP_RPATH=ON "$work" >"$bld/configure.log" 2>&1) ||
        { tail -30 "$bld/configure.log" >&2; die "cmake failed (log: $bld/configure.log)"; }
fi
# shellcheck source=../../scripts/heartbeat.sh
. "$REPO/scripts/heartbeat.sh"
vhca_step "ninja $target" "~1 min (the first build compiles libibverbs too)" "$bld/ninja.log" \
    ninja -C "$bld" "$target" ||
    { grep -B2 -A12 -m5 'error\|warning' "$bld/ninja.log" >&2 || tail -40 "$bld/ninja.log" >&2
      die "build failed (log: $bld/ninja.log)"; }
# Warnings are errors for our own files.
if grep -q 'providers/vhca/.*warning:' "$bld/ninja.log"; then
    grep -A6 'providers/vhca/.*warning:' "$bld/ninja.log" >&2
    die "warnings in the provider (log: $bld/ninja.log)"
fi

# 3. The result.
tmp="$out.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
cp "$bld/lib/lib$target.so" "$tmp/"
printf 'driver vhca\n' >"$tmp/vhca.driver"
cp "$bld/ninja.log" "$tmp/build.log"
echo "$ver" >"$tmp/rdma-core-version"
touch "$tmp/.complete"
rm -rf "$out"
mv "$tmp" "$out"
log "built $out/lib$target.so"
echo "$out"
