#!/usr/bin/env bash
# The main job: two VMs doing RDMA over the default fabric (UDP on loopback).
# Builds everything from Debian packages and crates (the host tool root with
# QEMU >= 10.1, the guest, vhca, the kernel module and the rdma-core provider;
# cached under /var/cache/vhca), boots two TCG guests, each with its own vhca
# device, and runs ibv_rc_pingpong and ib_write_bw between them over native IB
# on UDP, then rping and ib_write_bw -R (rdma_cm) over RoCEv2 on a TAP bridge.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_rust

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
