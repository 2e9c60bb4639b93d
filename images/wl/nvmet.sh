#!/bin/sh
# Guest A of images/roce-tests.sh's workload pairs: an NVMe over Fabrics
# target (the kernel's nvmet with the rdma transport) on the guest's RoCE
# address: subsystem vhca-test, namespace 1 = a memory-backed null_blk (so
# fio's verification reads back what it wrote), RDMA port 4420. It serves
# until guest B says "done" on TCP port $1 (bounded by the caller's timeout),
# then takes the target down again.
# Usage: nvmet.sh DONE_PORT
set -eu
P=$1
modprobe null_blk nr_devices=1 memory_backed=1 gb=1
modprobe nvmet
modprobe nvmet-rdma
grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config
C=/sys/kernel/config/nvmet
S=$C/subsystems/vhca-test
mkdir "$S"
echo 1 >"$S/attr_allow_any_host"
mkdir "$S/namespaces/1"
printf /dev/nullb0 >"$S/namespaces/1/device_path"
echo 1 >"$S/namespaces/1/enable"
mkdir "$C/ports/1"
echo rdma >"$C/ports/1/addr_trtype"
echo ipv4 >"$C/ports/1/addr_adrfam"
echo "$SERVER_IP" >"$C/ports/1/addr_traddr"
echo 4420 >"$C/ports/1/addr_trsvcid"
ln -s "$S" "$C/ports/1/subsystems/vhca-test"
echo "nvmet: vhca-test on rdma $SERVER_IP:4420 ($DEV)"
# The host's "done" (nc -l exits after one connection; its status depends on
# how the peer closed, so it is not judged).
nc -l -p "$P" </dev/null || true
set +e
bad=0
step() { "$@" || { echo "nvmet: teardown step failed: $*"; bad=1; }; }
step rm "$C/ports/1/subsystems/vhca-test"
step rmdir "$C/ports/1"
echo 0 >"$S/namespaces/1/enable" || { echo "nvmet: cannot disable the namespace"; bad=1; }
step rmdir "$S/namespaces/1"
step rmdir "$S"
step modprobe -r nvmet-rdma
echo "nvmet: down"
if dmesg | grep -E 'WARNING:|BUG:|Oops|cut here|Call Trace'; then
    echo "nvmet: kernel warnings above"; exit 1
fi
exit "$bad"
