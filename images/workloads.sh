#!/bin/bash
# images/workloads.sh — build (or reuse) the guest overlay with the workloads
# users run over RDMA (issue 15) and print its folder: NVMe over Fabrics' host
# tool (nvme), fio, UCX (ucx_perftest, ucx_info and the UCT transports that
# run on an RDMA device) and Open MPI, each with its ldd closure, taken from
# the host tool root (images/host-root.sh installs the packages). The base
# guest (guest.sh) stays small: only the scripts that run these workloads
# boot with this overlay (run-vm.sh / vm-pair.sh / roce-pair.sh --overlay).
#
# Output folder $VHCA_CACHE/workloads-<key>, <key> = sha256(this script,
# stage-lib.sh, wl/mpi-pingpong.c, the host root's key); the overlay is its
# tree/ subfolder. The MPI check (wl/mpi-pingpong.c) is compiled here, against
# the root's Open MPI, to /usr/lib/vhca-wl/mpi-pingpong.
#
# Usage: images/workloads.sh
#   stdout: the overlay folder (DIR/tree); progress goes to stderr.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ $# -eq 0 ] || { sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2; }
vhca_need_root
ROOT=$(vhca_ensure_root)
KEY=$( { cat "$0" "$VHCA_IMAGES/stage-lib.sh" "$VHCA_IMAGES/wl/mpi-pingpong.c"; vhca_root_key; } |
    sha256sum | cut -c1-16)
OUT="$VHCA_CACHE/workloads-$KEY"

exec 9>"$VHCA_CACHE/.workloads.lock"
flock 9
if [ -e "$OUT/.vhca-workloads-complete" ]; then
    echo "$OUT/tree"
    exit 0
fi
rm -rf "$VHCA_CACHE"/workloads-*.tmp.*
TMP="$OUT.tmp.$$"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"

cat >"$TMP/build.sh" <<'BUILD'
#!/bin/bash
set -euo pipefail
S=$1/tree
ML=/usr/lib/x86_64-linux-gnu
mkdir -p "$S"
. "$2/stage-lib.sh"
# NVMe over Fabrics (host side; the target is the kernel's nvmet, configured
# through configfs) and fio.
add_elf /usr/sbin/nvme
add_elf /usr/bin/fio
# UCX: the tools, and the transport modules UCX loads with dlopen (no ldd
# closure names them): InfiniBand verbs (rc_verbs, ud_verbs, and the
# accelerated ones where the device allows), rdma_cm wireup, and CMA for
# processes on one node. The GPU modules (ROCm, CUDA) stay out.
add_elf /usr/bin/ucx_perftest
add_elf /usr/bin/ucx_info
for f in "$ML"/ucx/libuct_ib.so* "$ML"/ucx/libuct_rdmacm.so* "$ML"/ucx/libuct_cma.so*; do
    [ -e "$f" ] && add_elf "$f"
done
# (copy_dir DIR: a folder of data files, as it is)
copy_dir() { local r; r=$(readlink -f "$1"); mkdir -p "$S$r"; cp -a "$r/." "$S$r/"; }
if [ -d /etc/ucx ]; then copy_dir /etc/ucx; fi
# Open MPI: the launcher and daemons, the MCA components it loads with dlopen
# (with their closures), and the help texts and default parameters it reads.
for f in /usr/bin/mpirun /usr/bin/mpiexec /usr/bin/orterun /usr/bin/orted /usr/bin/prterun \
         /usr/bin/prted /usr/bin/prte /usr/bin/ompi_info /usr/bin/mpicc; do
    [ -e "$f" ] && is_elf "$(readlink -f "$f")" && add_elf "$f"
done
for d in "$ML"/openmpi/lib/openmpi* "$ML"/pmix2/lib/pmix "$ML"/prte/lib/prte "$ML"/openmpi/lib/pmix \
         "$ML"/openmpi/lib/prte; do
    [ -d "$d" ] || continue
    for f in "$d"/*.so; do [ -e "$f" ] && add_elf "$f"; done
done
for d in /usr/share/openmpi /usr/share/pmix /usr/share/prte /etc/openmpi /etc/pmix /etc/prte; do
    if [ -d "$d" ]; then copy_dir "$d"; fi
done
# The MPI check, built with the root's Open MPI (mpicc) against its libmpi.
mkdir -p "$S/usr/lib/vhca-wl"
mpicc -O2 -Wall -Wextra -Werror -o "$S/usr/lib/vhca-wl/mpi-pingpong" "$2/wl/mpi-pingpong.c"
for l in $(ldd "$S/usr/lib/vhca-wl/mpi-pingpong" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
    add_elf "$l"
done
du -sh "$S"
BUILD

vhca_log "building the workloads overlay in $TMP"
vhca_chroot "$ROOT" bash "$TMP/build.sh" "$TMP" "$VHCA_IMAGES" >"$TMP/build.log" 2>&1 ||
    { tail -30 "$TMP/build.log" >&2; vhca_die "workloads overlay build failed"; }
# Merged /usr: run-vm.sh folds top-level bin, sbin, lib, lib64 into usr/.
rm -f "$TMP/build.sh"
date -u +%s >"$TMP/.vhca-workloads-complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
vhca_log "workloads overlay ready: $OUT/tree ($(du -sh "$OUT/tree" | cut -f1))"
echo "$OUT/tree"
