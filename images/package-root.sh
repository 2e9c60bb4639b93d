#!/bin/bash
# images/package-root.sh — build (or reuse) a clean Debian root of SUITE
# (bookworm or trixie) for the packaging tests (images/package-tests.sh) and
# print its path.
#
# Clean means debootstrap --variant=minbase and nothing else: no compiler, no
# systemd, no kernel; only the apt sources (main, -updates, -security) and the
# lists. The packaging tests never install into it: each copies it first
# (cp -a) and installs into the copy, so every test starts from the same clean
# root and `apt install ./vhca_*.deb` has to resolve the package's dependencies
# itself.
#
# Cache: $VHCA_CACHE/pkgroot-<suite>-<key>, <key> = the first 16 hex digits of
# sha256(this script + suite): editing this script (not package-tests.sh)
# rebuilds. Built in a .tmp.<pid> folder and renamed when complete (marker
# .vhca-root-complete). The .debs apt downloads in the copies are kept in
# $VHCA_CACHE/pkgroot-debs-<suite> (package-tests.sh points apt there), so a
# warm run downloads nothing.
#
# Usage: images/package-root.sh SUITE [--rebuild]
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
    bookworm|trixie) ;;
    *) vhca_die "usage: package-root.sh bookworm|trixie [--rebuild]";;
esac

key=$( (cat "$0"; echo "$suite") | sha256sum | cut -c1-16)
ROOT="$VHCA_CACHE/pkgroot-$suite-$key"
mkdir -p "$VHCA_CACHE" "$VHCA_CACHE/pkgroot-debs-$suite/partial"
exec 9>"$VHCA_CACHE/.pkgroot-$suite.lock"
flock 9
if [ "$rebuild" = 0 ] && [ -e "$ROOT/.vhca-root-complete" ]; then
    echo "$ROOT"
    exit 0
fi

MIRROR=${VHCA_MIRROR:-http://deb.debian.org/debian}
t0=$(date +%s)
rm -rf --one-file-system "$VHCA_CACHE/pkgroot-$suite"-*.tmp.*
TMP="$ROOT.tmp.$$"
trap 'rm -rf --one-file-system "$TMP"' EXIT
mkdir -p "$TMP"
vhca_log "debootstrap --variant=minbase $suite -> $TMP (about 2 minutes cold)"
debootstrap --variant=minbase --components=main --cache-dir="$VHCA_CACHE/pkgroot-debs-$suite" \
    --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$suite" "$TMP" "$MIRROR" >"$VHCA_CACHE/pkgroot-debootstrap-$suite.log" 2>&1 ||
    { tail -30 "$VHCA_CACHE/pkgroot-debootstrap-$suite.log" >&2; vhca_die "debootstrap $suite failed"; }

rm -f "$TMP/etc/apt/sources.list"
{
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite main"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $MIRROR $suite-updates main"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${MIRROR%/debian}/debian-security $suite-security main"
} >"$TMP/etc/apt/sources.list.d/debian.list"
# A user's apt would install recommends; the tests do not, so that the
# package's Depends alone must be enough for it to work.
cat >"$TMP/etc/apt/apt.conf.d/90vhca" <<'EOF'
Acquire::Check-Valid-Until "false";
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Dpkg::Use-Pty "false";
EOF
# No service may start inside the root (invoke-rc.d / deb-systemd-invoke).
printf '#!/bin/sh\nexit 101\n' >"$TMP/usr/sbin/policy-rc.d"
chmod 755 "$TMP/usr/sbin/policy-rc.d"
VHCA_ENV="DEBIAN_FRONTEND=noninteractive" vhca_chroot "$TMP" apt-get -q update \
    >"$VHCA_CACHE/pkgroot-apt-$suite.log" 2>&1 ||
    { tail -30 "$VHCA_CACHE/pkgroot-apt-$suite.log" >&2; vhca_die "apt-get update in the $suite root failed"; }
date -u +%s >"$TMP/.vhca-root-complete"
rm -rf --one-file-system "$ROOT"
mv "$TMP" "$ROOT"
trap - EXIT
vhca_log "$suite packaging root ready in $(($(date +%s) - t0)) s: $ROOT"

# Roots of older versions of this script for the same suite.
for old in "$VHCA_CACHE/pkgroot-$suite"-*; do
    [ -d "$old" ] && [ "$old" != "$ROOT" ] || continue
    case "$old" in *.tmp.*|*-debs-*) continue;; esac
    rm -rf --one-file-system "$old"
done
echo "$ROOT"
