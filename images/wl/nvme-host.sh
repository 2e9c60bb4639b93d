#!/bin/sh
# Guest B of images/roce-tests.sh's workload pairs: NVMe over Fabrics host
# against guest A's target (wl/nvmet.sh), N rounds of: nvme discover, nvme
# connect -t rdma, fio with data verification (crc32c) for 4 KiB random and
# 128 KiB sequential writes, each verified by reading everything back, and
# read and verified once more by the same job with --verify_only; nvme
# disconnect. Prints "nvme-host: round I done" after each round (roce-tests.sh
# samples the vhca processes' fds and memory on those lines), then tells A
# "done" on TCP port DONE_PORT.
# Usage: nvme-host.sh TARGET_IP DONE_PORT ROUNDS
set -u
T=$1 P=$2 N=$3
say_done() {
    i=0
    until echo done | nc "$T" "$P" 2>/dev/null; do
        i=$((i + 1)); [ $i -ge 30 ] && break; sleep 1
    done
}
fail() { echo "nvme-host: FAIL: $*"; say_done; exit 1; }
modprobe nvme-rdma || fail "modprobe nvme-rdma"
F="--direct=1 --ioengine=libaio --iodepth=16 --verify=crc32c --verify_fatal=1 --output-format=terse --terse-version=3"
r=1
while [ $r -le "$N" ]; do
    # The target may still be coming up: discovery is retried for 60 s.
    i=0
    until nvme discover -t rdma -a "$T" -s 4420 2>&1 | grep -q 'subnqn: *vhca-test'; do
        i=$((i + 1)); [ $i -ge 60 ] && fail "round $r: nvme discover found no vhca-test"; sleep 1
    done
    nvme connect -t rdma -n vhca-test -a "$T" -s 4420 || fail "round $r: nvme connect"
    dev=''
    i=0
    while [ -z "$dev" ]; do
        for b in /sys/class/nvme/nvme*/nvme*n1; do
            [ -e "$b" ] && grep -q vhca-test "$(dirname "$b")/subsysnqn" 2>/dev/null && dev=/dev/${b##*/}
        done
        i=$((i + 1)); [ $i -ge 100 ] && fail "round $r: no namespace block device"
        [ -n "$dev" ] || sleep 0.1
    done
    [ "$r" = 1 ] && echo "nvme-host: $dev: $(cat /sys/block/${dev#/dev/}/size) sectors"
    # Each write job verifies what it wrote by reading it back (its verify
    # phase), then the same job again with --verify_only reads and checks
    # it once more, as a read workload of its own (fio's way to verify the
    # data a previous run wrote: a plain read job with --verify reads blocks
    # by its own random map, not the writer's).
    for job in "randwrite 4k 0" "write 128k 32m"; do
        set -- $job
        for mode in write verify_only; do
            extra=''
            [ "$mode" = verify_only ] && extra=--verify_only
            out=$(fio --name="$1-$2" --filename="$dev" --rw="$1" --bs="$2" --size=16m --offset="$3" \
                  --randseed=7 $F $extra 2>&1) || { echo "$out" | tail -5; fail "round $r: fio $1 $2 $mode"; }
            # terse v3: field 7 = read KiB/s, 8 = read IOPS, 48 = write KiB/s, 49 = write IOPS
            echo "$out" | awk -F';' -v j="$1 $2 ($mode)" -v r="$r" 'NF > 50 {
                printf "nvme-host: round %s fio %s: read %s KiB/s %s IOPS, write %s KiB/s %s IOPS\n", r, j, $7, $8, $48, $49 }'
        done
    done
    nvme disconnect -n vhca-test >/dev/null || fail "round $r: nvme disconnect"
    echo "nvme-host: round $r done"
    r=$((r + 1))
done
say_done
if dmesg | grep -E 'WARNING:|BUG:|Oops|cut here|Call Trace'; then
    echo "nvme-host: kernel warnings above"; exit 1
fi
echo "nvme-host: $N rounds passed"
