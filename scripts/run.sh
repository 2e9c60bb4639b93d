#!/usr/bin/env bash
# The main job: two VMs doing RDMA over the default fabric (UDP on loopback).
# Builds everything from Debian packages and crates (the host tool root with
# QEMU >= 10.1, the guest, vhca, the kernel module and the rdma-core provider;
# cached under /var/cache/vhca), boots two TCG guests, each with its own vhca
# device. First a switched InfiniBand subnet: OpenSM in guest A brings up the
# two guests' ports, a guestless third node and two `vhca switch`es, then
# ibnetdiscover, IPoIB ping and rping (rdma_cm) over native IB; then
# ibv_rc_pingpong and ib_write_bw between them over native IB on UDP, then
# rping and ib_write_bw -R (rdma_cm) over RoCEv2 on a TAP bridge.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_rust

echo "== An InfiniBand subnet: OpenSM in VM A activates every port of two switches and three HCAs; IPoIB and rdma_cm over IB"
wait_active='i=0; until grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state || [ $i -ge 240 ]; do sleep 0.5; i=$((i + 1)); done'
images/vm-pair.sh --subnet sm --ready 'SUBNET-READY' \
    "modprobe -a ib_umad ib_ipoib rdma_ucm; mkdir -p /var/cache/opensm; ibstat vhca0 | grep State;
     opensm -B -f /tmp/opensm.log >/dev/null; $wait_active; ibstat vhca0 | grep -E 'State|Base lid|SM lid';
     ibnetdiscover; ip link set ib0 up; ip addr add 10.98.0.1/24 dev ib0; echo SUBNET-READY;
     rping -s -a 10.98.0.1 -C 10 -V" \
    "modprobe -a ib_ipoib rdma_ucm; $wait_active; ip link set ib0 up; ip addr add 10.98.0.2/24 dev ib0;
     ping -c 3 10.98.0.1 && rping -c -a 10.98.0.1 -C 10 -V"
echo "== ibv_devinfo and ibv_rc_pingpong between two VMs"
images/vm-pair.sh \
    'ibv_devinfo -d vhca0 | grep -E "hca_id|state|port_lid|link_layer"; ibv_rc_pingpong -d vhca0 -g 0 -c -n 100' \
    'ibv_rc_pingpong -d vhca0 -g 0 -c -n 100 $SERVER_IP'
echo "== ib_write_bw (64 KiB) between two VMs"
images/vm-pair.sh 'ib_write_bw -d vhca0 -s 65536 -n 200' 'ib_write_bw -d vhca0 -s 65536 -n 200 $SERVER_IP'
echo "== RoCEv2 (Ethernet link layer, WF-10): ibv_devinfo, rping over rdma_cm and ib_write_bw -R between two VMs"
images/roce-pair.sh --ready '' \
    'ibv_devinfo -d $DEV | grep -E "hca_id|state|link_layer"; rping -s -v -V -C 10 -a $SERVER_IP; ib_write_bw -d $DEV -R -s 65536 -n 200' \
    'sleep 3; rping -c -v -V -C 10 -a $SERVER_IP; sleep 3; ib_write_bw -d $DEV -R -s 65536 -n 200 $SERVER_IP'
