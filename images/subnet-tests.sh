#!/bin/bash
# images/subnet-tests.sh — a real InfiniBand subnet over vhca (issue 26): two
# guests and a third node with no guest (c), cabled to one `vhca switch`, the
# fabric in SM mode (images/vm-pair.sh --subnet sm: every port waits in Init
# for a subnet manager). Guest A runs Debian's OpenSM, which sweeps the subnet
# through the devices' SMAs and the switch's, assigns LIDs, programs the
# switch and activates every port; then the standard diags run against the
# subnet from A, IPoIB comes up on both guests (ib0, datagram mode) and B
# pings A and runs iperf3 and rdma_cm tools (rping, ib_write_bw -R) over it,
# and NVMe over Fabrics over IB: nvmet-rdma in A, nvme-rdma with fio's
# verification in B (images/wl/nvmet.sh, nvme-host.sh; the workloads overlay
# of images/workloads.sh).
#
# Usage: images/subnet-tests.sh [--out DIR] [--timeout S]
# Prints one "PASS name" / "FAIL name" line per check; exit 0 iff all pass.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

out='' timeout=900
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2;;
        --timeout) timeout=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
vhca_need_root
mkdir -p "$VHCA_RUN"
[ -n "$out" ] || out=$(mktemp -d "$VHCA_RUN/subnet.XXXXXX")
mkdir -p "$out"
ov=$(mktemp -d /tmp/subnet-ov.XXXXXX)
trap 'rm -rf "$ov"' EXIT
mkdir -p "$ov/usr/share/sn" "$ov/usr/share/wl"
cp images/wl/nvmet.sh images/wl/nvme-host.sh "$ov/usr/share/wl/"
wl_tree=$(images/workloads.sh) || vhca_die "images/workloads.sh failed"

# A: OpenSM, the diags, then the servers B's clients use; waits for B's "done".
cat >"$ov/usr/share/sn/a.sh" <<'S'
check() { # NAME CMD...: runs CMD (60 s at most), prints its output and "SN name rc"
    name=$1; shift
    echo "--- $name: $*"
    timeout 60 "$@" 2>&1; rc=$?
    echo "SN $name $rc"
}
modprobe -a ib_umad ib_ipoib rdma_ucm || echo "modprobe failed"
mkdir -p /var/log /var/cache/opensm /etc/opensm
echo "port: $(cat /sys/class/infiniband/vhca0/ports/1/state) before the SM"
# A flushed log, so the checks below read it as OpenSM writes it.
printf 'force_log_flush TRUE\n' >/etc/opensm/opensm.conf
opensm -F /etc/opensm/opensm.conf -f /tmp/opensm.log >/tmp/opensm.out 2>&1 &
i=0
until grep -q 'SUBNET UP' /tmp/opensm.log 2>/dev/null || [ $i -ge 240 ]; do sleep 0.5; i=$((i + 1)); done
grep -q 'SUBNET UP' /tmp/opensm.log; echo "SN opensm_subnet_up $?"
i=0
until grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state || [ $i -ge 60 ]; do sleep 0.5; i=$((i + 1)); done
grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state; echo "SN port_active $?"
LID=$(cat /sys/class/infiniband/vhca0/ports/1/lid)
echo "port: $(cat /sys/class/infiniband/vhca0/ports/1/state) lid $LID sm_lid $(cat /sys/class/infiniband/vhca0/ports/1/sm_lid)"
check ibstat ibstat vhca0
check sminfo sminfo
echo IBND-BEGIN; timeout 60 ibnetdiscover 2>&1; echo "SN ibnetdiscover $?"; echo IBND-END
check iblinkinfo iblinkinfo
SW=$(ibswitches 2>/dev/null | sed -n 's/.* lid \([0-9]*\) .*/\1/p' | head -1)
B=$(ibhosts 2>/dev/null | grep 0200000000000a02 >/dev/null && smpquery -D nodeinfo 0,1,2 >/dev/null 2>&1 && echo ok)
echo "switch lid ${SW:-?}"
check smpquery_nodeinfo smpquery nodeinfo "$LID"
check smpquery_portinfo smpquery portinfo "$LID"
check smpquery_pkeys smpquery pkeys "$LID"
check smpquery_sl2vl smpquery sl2vl "$LID"
check smpquery_vlarb smpquery vlarb "$LID"
check smpquery_dr_nodeinfo_b smpquery -D nodeinfo 0,1,2
check smpquery_switchinfo smpquery switchinfo "${SW:-0}"
check saquery saquery
check saquery_pathrecord saquery -p
check perfquery perfquery
check perfquery_switch_port perfquery "${SW:-0}" 2
check ibroute ibroute "${SW:-0}"
check ibtracert ibtracert "$LID" "${SW:-0}"
# IPoIB (datagram mode) and the servers of B's checks.
ip link set ib0 up && ip addr add 10.98.0.1/24 dev ib0
check ipoib_up ip -o addr show dev ib0
iperf3 -s -1 >/tmp/iperf3.log 2>&1 &
rping -s -a 10.98.0.1 -C 10 >/tmp/rping.log 2>&1 &
ib_write_bw -R -d vhca0 -s 65536 -n 100 >/tmp/wbw.log 2>&1 &
ibping -S >/dev/null 2>&1 &
# NVMe over Fabrics over IB: the target on A's IPoIB address until B says done.
SERVER_IP=10.98.0.1 DEV=vhca0 sh /usr/share/wl/nvmet.sh 18998 >/tmp/nvmet.log 2>&1 &
nvmet=$!
echo SN-READY
timeout 600 nc -l -p 18999 >/dev/null 2>&1
wait "$nvmet"; echo "SN nvmet_rdma_target $?"
echo "--- servers"; cat /tmp/iperf3.log /tmp/rping.log /tmp/wbw.log /tmp/nvmet.log
echo "--- opensm log (SUBNET UP, errors)"; grep -E 'SUBNET UP|ERR|rror' /tmp/opensm.log | head -40
S
# B: waits for Active, then IPoIB and rdma_cm over the subnet.
cat >"$ov/usr/share/sn/b.sh" <<'C'
check() {
    name=$1; shift
    echo "--- $name: $*"
    timeout "${T:-120}" "$@" 2>&1; rc=$?
    echo "SN $name $rc"
}
modprobe -a ib_umad ib_ipoib rdma_ucm || echo "modprobe failed"
i=0
until grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state || [ $i -ge 120 ]; do sleep 0.5; i=$((i + 1)); done
grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state; echo "SN b_port_active $?"
ip link set ib0 up && ip addr add 10.98.0.2/24 dev ib0
check ipoib_ping ping -c 3 -W 5 10.98.0.1
check ipoib_iperf3 iperf3 -c 10.98.0.1 -t 5
check rping rping -c -a 10.98.0.1 -C 10 -v
check ib_write_bw_R ib_write_bw -R -d vhca0 -s 65536 -n 100 10.98.0.1
A_GUID=0x0200000000000a01
check ibping ibping -c 3 -G "$A_GUID"
check b_saquery saquery
check b_perfquery perfquery
T=600 check nvmeof_ib sh /usr/share/wl/nvme-host.sh 10.98.0.1 18998 1
echo done | nc 10.99.0.1 18999
C

rc=0
images/vm-pair.sh --subnet sm --out "$out" --timeout "$timeout" --ready 'SN-READY' \
    --overlay "$ov" --overlay "$wl_tree" -- 'sh /usr/share/sn/a.sh' 'sh /usr/share/sn/b.sh' >"$out/pair.log" 2>&1 || rc=$?
con() { tr -d '\r' <"$out/console-$1.log" 2>/dev/null; }
fail=0
for g in a b; do
    while read -r _ name code; do
        if [ "$code" = 0 ]; then echo "PASS $name"; else echo "FAIL $name (exit $code)"; fail=1; fi
    done < <(con "$g" | grep -E '^SN [A-Za-z0-9_]+ [0-9]+$')
done
# ibnetdiscover lists exactly the file's nodes and cables: three CAs, one
# switch, a on port 1, b on port 2, c on port 3.
ibnd=$(con a | sed -n '/^IBND-BEGIN/,/^IBND-END/p')
n_ca=$(echo "$ibnd" | grep -c '^Ca')
n_sw=$(echo "$ibnd" | grep -c '^Switch')
links=$(echo "$ibnd" | grep -oE '^\[[0-9]+\][[:space:]]+"H-0200000000000a0[0-9]"' | tr -s '\t ' ' ' | sort | tr '\n' ';')
want='[1] "H-0200000000000a01";[2] "H-0200000000000a02";[3] "H-0200000000000a03";'
if [ "$n_ca" = 3 ] && [ "$n_sw" = 1 ] && [ "$links" = "$want" ]; then
    echo "PASS ibnetdiscover_topology"
else
    echo "FAIL ibnetdiscover_topology (CAs $n_ca, switches $n_sw, switch links '$links')"; fail=1
fi
ran=$(con a; con b)
for name in opensm_subnet_up port_active ipoib_ping rping ib_write_bw_R b_port_active \
    nvmeof_ib nvmet_rdma_target; do
    grep -q "^SN $name " <<<"$ran" || { echo "FAIL $name (never ran)"; fail=1; }
done
[ "$rc" = 0 ] || echo "note: vm-pair.sh exit $rc (logs: $out)"
echo "logs: $out"
exit $fail
