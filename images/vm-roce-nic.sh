#!/bin/bash
# images/vm-roce-nic.sh — the RoCE port's NIC side (WF-10) in a real TCG guest:
# vhca --tap/--vhost-user-net serves the guest's stock virtio-net-pci over
# vhost-user; the guest pings the TAP's host side and moves 16 MiB each way over
# TCP. Everything (TAP, vhca, QEMU, the TCP peer) runs inside network namespace
# vhcanetA, created here and deleted on exit, so no frame leaves it.
# Needs root; builds nothing: VHCA=path/to/vhca (default target/debug/vhca).
# Exit 0 when ping and both transfers succeed.
set -u
NS=vhcanetA
REPO=$(cd "$(dirname "$0")/.." && pwd)
VHCA=${VHCA:-$REPO/target/debug/vhca}
RUN=${VHCA_CACHE:-/var/cache/vhca}/run
MAC=52:54:00:aa:00:02
cleanup() {
    [ -n "${VPID:-}" ] && kill "$VPID" 2>/dev/null; wait "${VPID:-}" 2>/dev/null
    [ -n "${SPID:-}" ] && kill "$SPID" 2>/dev/null
    ip netns del $NS 2>/dev/null
    rm -f $RUN/netA.sock $RUN/netA-net.sock
}
trap cleanup EXIT
ip netns add $NS
ip netns exec $NS ip link set lo up
ip netns exec $NS ip tuntap add dev vtap0 mode tap
ip netns exec $NS ip addr add 10.77.0.1/24 dev vtap0
ip netns exec $NS ip link set vtap0 up
ip netns exec $NS "$VHCA" --socket $RUN/netA.sock --tap vtap0 --mac $MAC \
    --vhost-user-net $RUN/netA-net.sock --log ${VLOG:-info} --capture /tmp/vhca-netA.pcap >/tmp/vhca-netA.log 2>&1 &
VPID=$!
# TCP sinks/sources on the TAP's host side (inside the namespace).
ip netns exec $NS python3 - >/tmp/vhca-netA-tcp.log 2>&1 <<'PY' &
import socket, threading
def sink():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.1", 5001)); s.listen(1); c, _ = s.accept(); n = 0
    while True:
        b = c.recv(1 << 16)
        if not b: break
        n += len(b)
    print("host received", n, "bytes from the guest", flush=True); c.close()
def source():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("10.77.0.1", 5002)); s.listen(1); c, _ = s.accept()
    c.sendall(b"\x5a" * (16 << 20)); c.close(); print("host sent", 16 << 20, "bytes to the guest", flush=True)
t = threading.Thread(target=sink); t.start(); source(); t.join()
PY
SPID=$!
for i in $(seq 50); do [ -S $RUN/netA-net.sock ] && break; sleep 0.1; done
ip netns exec $NS "$REPO/images/run-vm.sh" --timeout 400 --append vhca.ip=10.77.0.2/24 \
    --qemu-arg -chardev --qemu-arg socket,id=vn,path=$RUN/netA-net.sock \
    --qemu-arg -netdev --qemu-arg vhost-user,id=n1,chardev=vn \
    --qemu-arg -device --qemu-arg virtio-net-pci,netdev=n1,mac=$MAC,romfile= \
    -- 'ip addr show eth0; ping -c 3 10.77.0.1 && dd if=/dev/zero bs=65536 count=256 2>/dev/null | nc 10.77.0.1 5001; n=$(nc 10.77.0.1 5002 | wc -c); echo "guest received $n bytes"; [ "$n" = 16777216 ]'
RC=$?
sleep 1
echo "run-vm exit: $RC"
echo "--- host TCP"; cat /tmp/vhca-netA-tcp.log
kill -TERM $VPID; wait $VPID; VPID=
echo "--- vhca counters"; grep -E "^(tap|vhost-user-net|port)" /tmp/vhca-netA.log
[ "$RC" = 0 ] && grep -q "host received 16777216" /tmp/vhca-netA-tcp.log \
    && grep -q "host sent 16777216" /tmp/vhca-netA-tcp.log && echo "vm-roce-nic: OK" && exit 0
echo "vm-roce-nic: FAILED"; exit 1
