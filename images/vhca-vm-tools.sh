#!/bin/bash
# images/vhca-vm-tools.sh — build (or reuse) the guest overlay of the tools
# that `scripts/vhca-vm run` adds to every guest, and print its folder:
# libfabric's command-line tools (Debian's libfabric-bin: fi_info,
# fi_pingpong, fi_strerror) with their ldd closure. libfabric itself
# (libfabric1, with its verbs and ofi_rxm providers built in) is in the host
# tool root already (Open MPI depends on it); libfabric-bin is not installed
# there, so its .deb is fetched (the version that matches the root's
# libfabric1) and unpacked here, which keeps host-root.sh, and so every
# cached guest and module, as they are.
#
# Output folder $VHCA_CACHE/vhca-vm-tools-<key>, <key> = sha256(this script,
# stage-lib.sh, the host root's key); the overlay is its tree/ subfolder.
#
# Usage: images/vhca-vm-tools.sh
#   stdout: the overlay folder (DIR/tree); progress goes to stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -eq 0 ] || { sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2; }
vhca_need_root
ROOT=$(vhca_ensure_root)
KEY=$( { cat "$0" "$VHCA_IMAGES/stage-lib.sh"; vhca_root_key; } | sha256sum | cut -c1-16)
OUT="$VHCA_CACHE/vhca-vm-tools-$KEY"

exec 9>"$VHCA_CACHE/.vhca-vm-tools.lock"
flock 9
if [ -e "$OUT/.vhca-vm-tools-complete" ]; then
    echo "$OUT/tree"
    exit 0
fi
rm -rf "$VHCA_CACHE"/vhca-vm-tools-*.tmp.*
TMP="$OUT.tmp.$$"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"

cat >"$TMP/build.sh" <<'BUILD'
#!/bin/bash
set -euo pipefail
S=$1/tree
mkdir -p "$S/usr/bin"
. "$2/stage-lib.sh"
cd "$1"
v=$(dpkg-query -W -f='${Version}' libfabric1)
echo "libfabric1 $v in the root; fetching libfabric-bin=$v"
apt-get download "libfabric-bin=$v"
dpkg -x libfabric-bin_*.deb x
for f in x/usr/bin/fi_*; do
    cp "$f" "$S/usr/bin/"
    add_closure "$f"
done
rm -rf x libfabric-bin_*.deb
du -sh "$S"
BUILD

vhca_log "building the vhca-vm tools overlay in $TMP (libfabric-bin from the root's mirror, ~10 s)"
vhca_chroot "$ROOT" bash "$TMP/build.sh" "$TMP" "$VHCA_IMAGES" >"$TMP/build.log" 2>&1 ||
    { tail -30 "$TMP/build.log" >&2; vhca_die "vhca-vm tools overlay build failed"; }
rm -f "$TMP/build.sh"
date -u +%s >"$TMP/.vhca-vm-tools-complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
vhca_log "vhca-vm tools overlay ready: $OUT/tree ($(du -sh "$OUT/tree" | cut -f1))"
echo "$OUT/tree"
