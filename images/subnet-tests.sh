#!/bin/bash
# images/subnet-tests.sh — a real InfiniBand subnet over vhca (issue 26): two
# guests on one `vhca switch` (sw0), a third node with no guest (c) on a
# second switch (sw1) that two parallel cables join to sw0, the fabric in SM
# mode (images/vm-pair.sh --subnet sm: every port waits in Init for a subnet
# manager). Guest A first checks that its port stays in Init with no SM and
# that the tools say so, then runs Debian's OpenSM, which sweeps the subnet
# through the devices' SMAs and the switches', assigns LIDs, programs the
# switches and activates every port; then the standard diags run against the
# subnet from A, IPoIB comes up on both guests (ib0) and B pings A and runs
# iperf3 (datagram mode, then connected mode) and rdma_cm tools (rping,
# ucmatose, mckey, ib_write_bw -R) over it, and NVMe over Fabrics over IB:
# nvmet-rdma in A, nvme-rdma with fio's verification in B (images/wl/nvmet.sh,
# nvme-host.sh; the workloads overlay of images/workloads.sh). While B's first
# RC stream runs, A kills OpenSM and starts it again: the new SM re-sweeps
# and the stream loses nothing. Last, A takes down the sw0 port that carries
# c's route (`ibportstate ... disable`, as an admin would) and OpenSM routes
# c's LID through the other cable; the port is enabled again after.
#
# OpenSM runs with its congestion control manager on (issue 31 item 2, IBA
# Annex A10; `congestion_control TRUE` and non-default cc_* options, for the
# whole stage): it Sets SwitchCongestionSetting on both switches (their CC
# agents on QP1) and CACongestionSetting and a two-block
# CongestionControlTable on the CA ports (the device's agent through vhca.ko's
# MAD_IFC), and infiniband-diags' ibccquery reads each back from A. c has no
# guest and B's boots once A is ready, so at first nothing answers their QP1
# (as on a real HCA with no driver): OpenSM's only CC errors may be its
# timeouts for them; the restarted OpenSM configures B. ibccconfig protects
# sw0's and B's CC_Key with OpenSM's cc_key: a wrong key gets no answer and
# counts CC_KeyViolations, and the restarted OpenSM (which carries the key)
# configures sw0 again. After B's RC stream sw0 has marked FECN under
# OpenSM's threshold: its CongestionLog, A's cc_fecn_seen, B's
# cc_becns_received and sw0's exit report say so.
#
# With --bench, B also measures TCP throughput (iperf3, 3 rounds of 10 s,
# alternated) over IPoIB and over the guests' virtio-net link, and prints
# "BENCH ipoib|virtio Mbit/s" lines (scripts/bench-ipoib.sh reads them).
#
# Usage: images/subnet-tests.sh [--out DIR] [--timeout S] [--bench]
# Prints one "PASS name" / "FAIL name" line per check; exit 0 iff all pass.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

out='' timeout=900 bench=0
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2;;
        --timeout) timeout=$2; shift 2;;
        --bench) bench=1; shift;;
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

# Both guests' judge of a perftest stream.
cat >"$ov/usr/share/sn/perftest.sh" <<'S'
perftest_ok() { # RC LOG: perftest's status; 0 too when the run completed and
    # only its clock calibration failed afterwards (a TCG guest on a loaded
    # host: "Correlation coefficient r^2 < 0.9", then "Can't produce a
    # report"), which says nothing of the transfer
    [ "$1" = 0 ] && return 0
    grep -q "Can't produce a report" "$2" && grep -q 'Correlation coefficient' "$2" &&
        ! grep -qiE 'error|fail|couldn|unable' "$2" || return 1
    echo "perftest: the run completed; only its clock calibration failed (TCG timing)"
}
perftest_server_ok() { # RC LOG: a perftest server's status; 0 too when only
    # the client's report never came: a client whose clock calibration
    # failed (perftest_ok) exits without sending it, and the server then
    # fails reading it ("Couldn't read reports"). The client's own check
    # says whether its run completed; any other error still fails here.
    perftest_ok "$1" "$2" && return 0
    grep -q "Couldn't read reports" "$2" &&
        ! grep -iE 'error|fail|couldn|unable' "$2" |
            grep -vqE "Couldn't read reports|Failed to exchange data between server and clients" ||
        return 1
    echo "perftest server: the client's report never came (its clock calibration failed?); the client's check judges the run"
}
S

# A's readback of what OpenSM's congestion control manager set.
cat >"$ov/usr/share/sn/cc-is.sh" <<'S'
#!/bin/sh
# cc-is.sh KEY ATTR LID NAME[@N]=VALUE...: `ibccquery -c KEY ATTR LID` answers,
# and its N-th (1st) field NAME reads VALUE (written as ibccquery prints it:
# hex fields in hex; leading zeros and 0x do not count); NAME!=VALUE: it
# reads something else; NAME~REGEX: it matches.
key=$1 attr=$2 lid=$3; shift 3
o=$(ibccquery -c "$key" "$attr" "$lid" 2>&1); rc=$?
echo "$o"
[ $rc = 0 ] || exit 1
norm() { echo "$1" | tr 'A-F' 'a-f' | sed 's/^0x//; s/^0*//'; }
bad=0
for nv in "$@"; do
    case "$nv" in # NAME=V, NAME!=V, NAME~REGEX
        *!=*) op='!=' name=${nv%%!=*} want=${nv#*!=};;
        *=*) op='=' name=${nv%%=*} want=${nv#*=};;
        *) op='~' name=${nv%%~*} want=${nv#*~};;
    esac
    n=1
    case "$name" in *@*) n=${name#*@}; name=${name%@*};; esac
    v=$(echo "$o" | sed -n "s/^$name:\.*//p" | sed -n "${n}p")
    case "$op" in
        '=') [ "$(norm "$v")" = "$(norm "$want")" ];;
        '!=') [ -n "$v" ] && [ "$(norm "$v")" != "$(norm "$want")" ];;
        '~') echo "$v" | grep -qE "$want";;
    esac || { echo "cc-is: $attr $lid $name#$n is '$v', want $op '$want'"; bad=1; }
done
exit $bad
S
chmod +x "$ov/usr/share/sn/cc-is.sh"

# A's answer to B's "has mckey's receiver its messages?" (nc -ll -e).
cat >"$ov/usr/share/sn/mckey-status.sh" <<'S'
#!/bin/sh
if grep -q 'test complete' /tmp/mckey.log 2>/dev/null; then echo done; else echo waiting; fi
S
chmod +x "$ov/usr/share/sn/mckey-status.sh"

# A: the no-SM checks, OpenSM, the diags, the servers B's clients use, the SM
# restart under B's stream; after B's "done", the reroute.
cat >"$ov/usr/share/sn/a.sh" <<'S'
check() { # NAME CMD...: runs CMD (60 s at most), prints its output and "SN name rc"
    name=$1; shift
    echo "--- $name: $*"
    timeout 60 "$@" 2>&1; rc=$?
    echo; echo "SN $name $rc"   # on a line of its own, whatever CMD printed last
}
fails() { # NAME CMD...: as check, but passes when CMD fails
    name=$1; shift
    echo "--- $name (must fail): $*"
    timeout 60 "$@" 2>&1 && rc=1 || rc=0
    echo; echo "SN $name $rc"   # on a line of its own, whatever CMD printed last
}
wait_for() { # TRIES CMD...: CMD every 0.5 s until it succeeds; its status
    n=$1; shift
    i=0
    until "$@" >/dev/null 2>&1 || [ $i -ge "$n" ]; do sleep 0.5; i=$((i + 1)); done
    "$@" >/dev/null 2>&1
}
state() { cat /sys/class/infiniband/vhca0/ports/1/state; }
sm_gone() { # OpenSM exited (gone, or a zombie this shell has not reaped)
    st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$sm/status" 2>/dev/null)
    [ -z "$st" ] || [ "$st" = Z ]
}
. /usr/share/sn/perftest.sh
modprobe -a ib_umad ib_ipoib rdma_ucm || echo "modprobe failed"
mkdir -p /var/log /var/cache/opensm /etc/opensm
# No SM yet: the port waits in Init (as a real port whose link trained), and
# the tools say so.
echo "port: $(state) before the SM"
sleep 3
check no_sm_port_stays_init grep -q INIT /sys/class/infiniband/vhca0/ports/1/state
check no_sm_ibstat_says_initializing sh -c 'ibstat vhca0 | tee /proc/self/fd/2 | grep -q "State: Initializing"'
check no_sm_ibv_devinfo_says_init sh -c 'ibv_devinfo -d vhca0 | tee /proc/self/fd/2 | grep -q PORT_INIT'
fails no_sm_sminfo_finds_none sminfo
# A flushed log, so the checks below read it as OpenSM writes it; a short
# sweep interval, so a cabling change is seen within seconds.
printf 'force_log_flush TRUE\nsweep_interval 3\n' >/etc/opensm/opensm.conf
# The congestion control manager (IBA A10; osm_congestion_control.c), with
# settings that differ from OpenSM's defaults in every field it sends: marking
# on the switches' ports 1 and 2 (victim mask), SLs 0 and 1 on the CAs, a
# 70-entry table (two CongestionControlTable blocks).
CCK=0x00c0ffee0000cc01
cct=0:0 i=1
while [ $i -lt 70 ]; do cct="$cct,1:$i"; i=$((i + 1)); done
cat >>/etc/opensm/opensm.conf <<EOF
congestion_control TRUE
cc_key $CCK
cc_sw_cong_setting_control_map 0x1f
cc_sw_cong_setting_victim_mask 0x6
cc_sw_cong_setting_credit_mask 0x30
cc_sw_cong_setting_threshold 0xf
cc_sw_cong_setting_packet_size 4
cc_sw_cong_setting_credit_starvation_threshold 0x3
cc_sw_cong_setting_credit_starvation_return_delay 1:25
cc_sw_cong_setting_marking_rate 2
cc_ca_cong_setting_port_control 0x0000
cc_ca_cong_setting_control_map 0x0003
cc_ca_cong_setting_ccti_timer 0 40
cc_ca_cong_setting_ccti_increase 0 2
cc_ca_cong_setting_trigger_threshold 0 30
cc_ca_cong_setting_ccti_min 0 0
cc_ca_cong_setting_ccti_timer 1 80
cc_ca_cong_setting_ccti_increase 1 3
cc_ca_cong_setting_trigger_threshold 1 40
cc_ca_cong_setting_ccti_min 1 1
cc_cct $cct
EOF
opensm -F /etc/opensm/opensm.conf -f /tmp/opensm.log >/tmp/opensm.out 2>&1 &
sm=$!
wait_for 240 grep -q 'SUBNET UP' /tmp/opensm.log; echo "SN opensm_subnet_up $?"
wait_for 60 grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state; echo "SN port_active $?"
LID=$(cat /sys/class/infiniband/vhca0/ports/1/lid)
echo "port: $(state) lid $LID sm_lid $(cat /sys/class/infiniband/vhca0/ports/1/sm_lid)"
check ibstat ibstat vhca0
check sminfo sminfo
echo IBND-BEGIN; timeout 60 ibnetdiscover 2>&1; echo "SN ibnetdiscover $?"; echo IBND-END
check iblinkinfo iblinkinfo
SW=$(ibswitches 2>/dev/null | grep 0200000000000b00 | sed -n 's/.* lid \([0-9]*\) .*/\1/p' | head -1)
echo "sw0 lid ${SW:-?}"
check smpquery_nodeinfo smpquery nodeinfo "$LID"
check smpquery_portinfo smpquery portinfo "$LID"
check smpquery_pkeys smpquery pkeys "$LID"
check smpquery_sl2vl smpquery sl2vl "$LID"
check smpquery_vlarb smpquery vlarb "$LID"
check smpquery_dr_nodeinfo_b smpquery -D nodeinfo 0,1,2
check smpquery_dr_nodeinfo_c smpquery -D nodeinfo 0,1,4,1
check smpquery_switchinfo smpquery switchinfo "${SW:-0}"
check smpquery_sl2vl_switch smpquery sl2vl "${SW:-0}" 4
# What the guest's kernel knows reaches its SMA: OpenSM's ib_umad issm file
# sets IsSM (modify_port -> SET_PORT_CAPS), so PortInfo and the SA's
# PortInfoRecords of SM ports show it; a node description written to sysfs
# (modify_device -> SET_NODE_DESC) is what NodeDescription answers.
check is_sm_in_portinfo sh -c "smpquery portinfo $LID | tee /proc/self/fd/2 | grep -q '^[[:space:]]*IsSM$'"
check saquery_sm_ports sh -c "saquery -s | tee /proc/self/fd/2 | grep -qi PortInfoRecord"
echo "vhca guest A" >/sys/class/infiniband/vhca0/node_desc
check nodedesc_from_guest sh -c "smpquery nodedesc $LID | tee /proc/self/fd/2 | grep -q 'vhca guest A'"
check saquery saquery
check saquery_pathrecord saquery -p
check perfquery perfquery
check perfquery_switch_port perfquery "${SW:-0}" 2
check ibroute ibroute "${SW:-0}"
check ibtracert ibtracert "$LID" "${SW:-0}"
# Congestion control: what OpenSM's CC manager set (it waits for the answers
# before SUBNET UP), read back from both switches and A's port. B's guest
# boots only after SN-READY and c has none: nothing answers their QP1 yet (as
# on a real HCA with no driver), so OpenSM's only CC errors may be its
# timeouts for those two; the restarted OpenSM configures B (below).
SW1=$(ibswitches 2>/dev/null | grep 0200000000000b01 | sed -n 's/.* lid \([0-9]*\) .*/\1/p' | head -1)
echo "cc: sw1 lid ${SW1:-?}"
cc=/usr/share/sn/cc-is.sh
cc_errors_only_for() { # NAME LOG GUID-REGEX: OpenSM's CC errors in LOG are timeouts of those nodes
    check "$1" sh -c "grep 'ERR C1' $2; ! grep 'ERR C1' $2 | grep -vE 'IB_TIMEOUT.*GUID 0x($3) '"
}
cc_ca() { # NAME LID: the CA port's CACongestionSetting, table and CongestionInfo
    check "cc_$1_ca_setting" $cc $CCK CACongestionSetting "$2" Port_Control=0 Control_Map=0x3 \
        CCTI_Timer@1=40 CCTI_Increase@1=2 Trigger_Threshold@1=30 CCTI_Min@1=0 \
        CCTI_Timer@2=80 CCTI_Increase@2=3 Trigger_Threshold@2=40 CCTI_Min@2=1 CCTI_Timer@3=0
    check "cc_$1_cct" $cc $CCK CongestionControlTable "$2" CCTI_Limit=69 \
        CCT_Shift@1=0 CCT_Multiplier@1=0 CCT_Shift@2=1 CCT_Multiplier@2=1 \
        CCT_Shift@65=1 CCT_Multiplier@65=64 CCT_Multiplier@70=69
    check "cc_$1_congestion_info" $cc $CCK CongestionInfo "$2" ControlTableCap=2
    check "cc_$1_class_port_info" ibccquery ClassPortInfo "$2"
}
cc_protect() { # NAME LID (A10.4.1): OpenSM's cc_key only names the key it
    # sends; ibccconfig makes it the port's (key, protect bit, lease 0,
    # violations 0); a wrong key then gets no answer and is counted.
    check "cc_$1_set_key" ibccconfig CongestionKeyInfo "$2" $CCK 1 0 0
    check "cc_$1_key_info" $cc $CCK CongestionKeyInfo "$2" CC_Key=$CCK CC_KeyProtectBit=1 CC_KeyViolations=0
    fails "cc_$1_wrong_key_unanswered" ibccquery -t 200 -c 0xbad CongestionKeyInfo "$2"
    check "cc_$1_key_violation_counted" $cc $CCK CongestionKeyInfo "$2" CC_KeyViolations!=0
}
cc_errors_only_for cc_opensm_no_errors /tmp/opensm.log '0200000000000a02|0200000000000a03'
for s in "sw0 ${SW:-0}" "sw1 ${SW1:-0}"; do
    check "cc_${s% *}_switch_setting" $cc $CCK SwitchCongestionSetting "${s#* }" Control_Map=0x1f \
        Victim_Mask=06 Credit_Mask=30 Threshold=0xf Packet_Size=4 CS_Threshold=0x3 \
        CS_ReturnDelay=0x4019 Marking_Rate=2
    check "cc_${s% *}_congestion_info" $cc $CCK CongestionInfo "${s#* }" ControlTableCap=0
    check "cc_${s% *}_port_setting" ibccquery -c $CCK SwitchPortCongestionSetting "${s#* }"
done
cc_ca a "$LID"
check cc_a_congestion_log $cc $CCK CongestionLog "$LID" LogType=2
check cc_timestamp ibccquery Timestamp "${SW:-0}"
cc_protect sw0 "${SW:-0}"
# IPoIB (connected mode here; B starts in datagram mode and switches later)
# and the servers of B's checks.
echo connected >/sys/class/net/ib0/mode && ip link set ib0 mtu 65520 || echo "ib0: no connected mode"
ip link set ib0 up && ip addr add 10.98.0.1/24 dev ib0
check ipoib_up ip -o addr show dev ib0
iperf3 -s >/tmp/iperf3.log 2>&1 &
iperf=$!
rping -s -a 10.98.0.1 -C 10 >/tmp/rping.log 2>&1 &
ib_write_bw -R -d vhca0 -s 65536 -n 100 >/tmp/wbw.log 2>&1 &
ucmatose -b 10.98.0.1 >/tmp/ucmatose.log 2>&1 &
ucm=$!
ibping -S >/dev/null 2>&1 &
# The SM restart: B's first check is a 30 s RC stream (ib_write_bw -D over
# the switch); once it flows, OpenSM is killed and started again.
timeout 600 ib_write_bw -d vhca0 -D 30 -s 65536 -p 18997 >/tmp/wbw-d.log 2>&1 &
wbwd=$!
rcv() { cat /sys/class/infiniband/vhca0/ports/1/counters/port_rcv_data 2>/dev/null || echo 0; }
flowing() { [ "$(rcv)" -gt $((r0 + 2500000)) ]; }   # 10 MB more received (4-byte words)
r0=$(rcv)
(
    # Once the stream has carried 10 MB (A's port counters: the data is
    # WRITEs into A), stop OpenSM under it.
    wait_for 600 flowing; echo "SN opensm_restart_stream_flowing $?"
    echo "port_rcv_data $(rcv) (was $r0)"
    kill "$sm"; wait_for 60 sm_gone
    echo "SN opensm_killed $?"
    : >/tmp/sm-killed
    sleep 2
    grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state; echo "SN port_active_without_sm $?"
    opensm -F /etc/opensm/opensm.conf -f /tmp/opensm2.log >/tmp/opensm2.out 2>&1 &
    wait_for 240 grep -q 'SUBNET UP' /tmp/opensm2.log; echo "SN opensm_restart_subnet_up $?"
    [ "$(cat /sys/class/infiniband/vhca0/ports/1/lid)" = "$LID" ]; echo "SN opensm_restart_keeps_lid $?"
    # mckey's receiver joins under the new SM: a client reregister (the new
    # SM's first sweep sets PortInfo:ClientReregister) ends the joins made
    # before with a multicast error event, and mckey does not join again.
    timeout 600 mckey -m 239.1.2.3 -b 10.98.0.1 -C 5 >/tmp/mckey.log 2>&1 &
    echo $! >/tmp/mckey.pid
    # B's sender asks whether the receiver has its 5 messages (mckey-status).
    nc -ll -p 18995 -e /usr/share/sn/mckey-status.sh >/dev/null 2>&1 &
    sleep 2
    # B's next checks need the SA: tell B the new SM is up.
    i=0
    until echo up | nc 10.99.0.2 18996 >/dev/null 2>&1 || [ $i -ge 300 ]; do sleep 1; i=$((i + 1)); done
) &
restart=$!
# NVMe over Fabrics over IB: the target on A's IPoIB address until B says done.
SERVER_IP=10.98.0.1 DEV=vhca0 sh /usr/share/wl/nvmet.sh 18998 >/tmp/nvmet.log 2>&1 &
nvmet=$!
echo SN-READY
wait "$wbwd"; rc=$?
perftest_server_ok $rc /tmp/wbw-d.log; r=$?
# What the server said, when it is a failure (the client's log is B's).
[ $r = 0 ] || { echo "ib_write_bw server: exit $rc"; cat /tmp/wbw-d.log; }
echo "SN opensm_restart_stream_server $r"
# The SM was down while the stream still ran (not after it).
[ -e /tmp/sm-killed ]; echo "SN opensm_killed_during_stream $?"
wait "$restart"
# The restarted OpenSM (B's guest is up) configured B, and sw0 again through
# its protected CC_Key: only c's timeouts.
cc_errors_only_for cc_restart_opensm_no_errors /tmp/opensm2.log 0200000000000a03
BL=$(smpquery -D portinfo 0,1,2 2>/dev/null | sed -n 's/^Lid:\.*\([0-9]*\)$/\1/p')
echo "cc: b lid ${BL:-?}"
cc_ca b "${BL:-0}"
check cc_restart_sw0_switch_setting $cc $CCK SwitchCongestionSetting "${SW:-0}" Threshold=0xf Marking_Rate=2
cc_protect b "${BL:-0}"
# B's 30 s stream into A left sw0 by its port 1 with OpenSM's threshold (15)
# and packet size (256 bytes: the WRITEs, not the ACKs): sw0 marked FECN
# there (its CongestionLog: events, port 1 in the map) and A saw them.
check cc_sw0_marked_fecn $cc $CCK CongestionLog "${SW:-0}" LogType=1 LogEventsCounter!=0 'PortMap~[2367abef]$'
check cc_a_fecn_seen sh -c 'f=/sys/class/infiniband/vhca0/ports/1/hw_counters/cc_fecn_seen; cat $f; [ "$(cat $f)" -gt 0 ]'
timeout 900 nc -l -p 18999 >/dev/null 2>&1
wait "$nvmet"; echo "SN nvmet_rdma_target $?"
mck=$(cat /tmp/mckey.pid 2>/dev/null)
if [ -n "$mck" ]; then
    # Not this shell's child (the restart subshell started it): its log.
    wait_for 120 grep -q 'test complete' /tmp/mckey.log || {
        kill "$mck"
        echo "mckey: still waiting; the SA's groups and sw0's MFT:"
        saquery -g; ibroute -M "$SW"
    }
    grep -q 'test complete' /tmp/mckey.log && ! grep -q ERROR /tmp/mckey.log
    echo "SN mckey_receiver $?"
fi
kill "$iperf" "$ucm" 2>/dev/null
echo "--- servers"; cat /tmp/iperf3.log /tmp/rping.log /tmp/wbw.log /tmp/wbw-d.log /tmp/ucmatose.log /tmp/mckey.log /tmp/nvmet.log
# The reroute: c (LID C) hangs off sw1, which two cables join to sw0's ports
# 4 and 5. Take down the one sw0 routes C through; OpenSM sees the change in
# its next sweep and routes C through the other.
C=$(smpquery -D portinfo 0,1,4,1 2>/dev/null | sed -n 's/^Lid:\.*\([0-9]*\)$/\1/p')
route() { ibroute "$SW" "$C" "$C" 2>/dev/null | awk -v l="$(printf '0x%04x' "$C")" '$1 == l { print $2 + 0 }'; }
routes_to() { [ "$(route)" = "$1" ]; }
sw_port_active() { ibportstate "$SW" "$1" | grep -q 'LinkState:.*Active'; }
P=$(route)
echo "c lid ${C:-?}, sw0 routes it to port ${P:-?}"
if [ "$P" = 4 ] || [ "$P" = 5 ]; then
    O=$((9 - P))
    check link_disable ibportstate "$SW" "$P" disable
    wait_for 180 routes_to "$O"
    echo "SN reroute_lft_to_other_cable $?"
    echo "sw0 routes c to port $(route) now"
    check reroute_lid_routed_smp smpquery nodeinfo "$C"
    check reroute_ibtracert sh -c "ibtracert $LID $C | tee /proc/self/fd/2 | grep -q '\\[$O\\]'"
    check reroute_smpquery_portinfo smpquery portinfo "$C"
    check link_enable ibportstate "$SW" "$P" enable
    wait_for 120 sw_port_active "$P"
    echo "SN link_back_active $?"
    ibportstate "$SW" "$P"
    check ibnetdiscover_after ibnetdiscover
else
    echo "SN reroute_found_route 1"
fi
echo "--- opensm log (SUBNET UP, errors)"; grep -E 'SUBNET UP|ERR|rror' /tmp/opensm.log /tmp/opensm2.log | head -40
S
# B: waits for Active, then the stream under the SM restart, IPoIB and rdma_cm
# over the subnet.
cat >"$ov/usr/share/sn/b.sh" <<'C'
check() {
    name=$1; shift
    echo "--- $name: $*"
    timeout "${T:-120}" "$@" 2>&1; rc=$?
    echo; echo "SN $name $rc"   # on a line of its own, whatever CMD printed last
}
ip_stat() { # NAME: a counter of /proc/net/snmp's Ip line
    awk -v k="$1" '/^Ip:/ { if (!h) { for (i = 1; i <= NF; i++) if ($i == k) c = i; h = 1 } else print $c }' /proc/net/snmp
}
modprobe -a ib_umad ib_ipoib rdma_ucm || echo "modprobe failed"
i=0
until grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state || [ $i -ge 120 ]; do sleep 0.5; i=$((i + 1)); done
grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state; echo "SN b_port_active $?"
# One RC stream across the switch while A restarts OpenSM (the address
# exchange over the virtio-net link, the data over IB).
T=300 check opensm_restart_stream sh -c '. /usr/share/sn/perftest.sh
    ib_write_bw -d vhca0 -D 30 -s 65536 -p 18997 10.99.0.1 >/tmp/wbw-d.log 2>&1
    rc=$?; cat /tmp/wbw-d.log; perftest_ok $rc /tmp/wbw-d.log'
# A returned BECN for the FECNs sw0 marked (OpenSM's threshold): B heard them.
check cc_b_becns_received sh -c 'f=/sys/class/infiniband/vhca0/ports/1/hw_counters/cc_becns_received; cat $f; [ "$(cat $f)" -gt 0 ]'
timeout 300 nc -l -p 18996 >/dev/null 2>&1; echo "SN b_heard_sm_restarted $?"
ip link set ib0 up && ip addr add 10.98.0.2/24 dev ib0
check ipoib_ping ping -c 3 -W 5 10.98.0.1
check ipoib_iperf3 iperf3 -c 10.98.0.1 -t 5
check rping rping -c -a 10.98.0.1 -C 10 -v
check ib_write_bw_R ib_write_bw -R -d vhca0 -s 65536 -n 100 10.98.0.1
check ucmatose ucmatose -s 10.98.0.1 -b 10.98.0.2
# mckey exits 0 even when its join fails: its output must show no error.
# IB multicast is unreliable datagrams, and mckey only sleeps 3 s after its
# join for the SM to program the switches' MFTs (its comment says so): an SM
# slower than that (OpenSM on A's one busy TCG CPU) costs a round's 5
# messages. So a round is sent again, at most 4 times, until A's receiver
# says it has them (A's mckey-status on port 18995). (mckey's receiver
# busy-polls its CQ; the guest has no nice to lower it.)
check mckey_sender sh -c 'for round in 1 2 3 4; do
        o=$(mckey -m 239.1.2.3 -b 10.98.0.2 -s -C 5 2>&1); rc=$?
        echo "$o"; [ $rc = 0 ] && ! echo "$o" | grep -q ERROR || exit 1
        sleep 2
        st=$(nc -w 5 10.99.0.1 18995 </dev/null)
        echo "round $round: the receiver is ${st:-unreachable}"
        [ "$st" = done ] && exit 0
    done; exit 1'
A_GUID=0x0200000000000a01
check ibping ibping -c 3 -G "$A_GUID"
check b_saquery saquery
check b_perfquery perfquery
T=600 check nvmeof_ib sh /usr/share/wl/nvme-host.sh 10.98.0.1 18998 1
# IPoIB connected mode (RC QPs between the two ib0s; A is connected from the
# start, MTU 65520): a 30 000-byte ping and its replies cross unfragmented
# (no IP fragment made or reassembled here), which only RC can carry (UD's
# MTU is 4 KiB at most).
echo connected >/sys/class/net/ib0/mode; echo "SN ipoib_cm_mode $?"
ip link set ib0 mtu 65520
f0=$(ip_stat FragCreates) q0=$(ip_stat ReasmReqds)
check ipoib_cm_ping_large ping -c 3 -W 5 -s 30000 10.98.0.1
f1=$(ip_stat FragCreates) q1=$(ip_stat ReasmReqds)
echo "IP fragments made $f0 -> $f1, reassemblies $q0 -> $q1"
[ "$f0" = "$f1" ] && [ "$q0" = "$q1" ]; echo "SN ipoib_cm_unfragmented $?"
check ipoib_cm_iperf3 iperf3 -c 10.98.0.1 -t 5
if [ -f /etc/sn-bench ]; then
    for r in 1 2 3; do
        for path in ipoib:10.98.0.1 virtio:10.99.0.1; do
            v=$(iperf3 -c "${path#*:}" -t 10 -f m 2>/dev/null | awk '/receiver/ { print $(NF-2) }')
            echo "BENCH ${path%%:*} ${v:-0} round $r (ib0 $(cat /sys/class/net/ib0/mode))"
        done
    done
    echo datagram >/sys/class/net/ib0/mode
    for r in 1 2 3; do
        v=$(iperf3 -c 10.98.0.1 -t 10 -f m 2>/dev/null | awk '/receiver/ { print $(NF-2) }')
        echo "BENCH ipoib-datagram ${v:-0} round $r"
    done
fi
echo done | nc 10.99.0.1 18999
C
if [ "$bench" = 1 ]; then mkdir -p "$ov/etc" && : >"$ov/etc/sn-bench"; fi

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
# ibnetdiscover lists exactly the file's nodes and cables: three CAs, two
# switches; sw0: a on port 1, b on port 2, sw1 on ports 4 and 5 (its ports 4
# and 5); sw1: c on port 1, sw0 on 4 and 5.
ibnd=$(con a | sed -n '/^IBND-BEGIN/,/^IBND-END/p')
n_ca=$(echo "$ibnd" | grep -c '^Ca')
n_sw=$(echo "$ibnd" | grep -c '^Switch')
links=$(echo "$ibnd" | awk '
    /^Switch/ { match($0, /"S-[0-9a-f]+"/); sw = substr($0, RSTART + 3, RLENGTH - 4) }
    /^$/ { sw = "" }
    sw != "" && /^\[[0-9]+\][ \t]+"[HS]-[0-9a-f]+"\[[0-9]+\]/ {
        match($0, /^\[[0-9]+\]/); p = substr($0, 2, RLENGTH - 2)
        match($0, /"[HS]-[0-9a-f]+"\[[0-9]+\]/); peer = substr($0, RSTART + 1, RLENGTH - 1)
        print substr(sw, length(sw) - 3) ":" p "=" peer
    }' | sort | tr '\n' ';')
want='0b00:1=H-0200000000000a01"[1];0b00:2=H-0200000000000a02"[1];0b00:4=S-0200000000000b01"[4];0b00:5=S-0200000000000b01"[5];0b01:1=H-0200000000000a03"[1];0b01:4=S-0200000000000b00"[4];0b01:5=S-0200000000000b00"[5];'
if [ "$n_ca" = 3 ] && [ "$n_sw" = 2 ] && [ "$links" = "$want" ]; then
    echo "PASS ibnetdiscover_topology"
else
    echo "FAIL ibnetdiscover_topology (CAs $n_ca, switches $n_sw, switch links '$links')"; fail=1
fi
# The exit reports of the switch and the devices: sw0 marked FECN on port 1
# (to A) under OpenSM's threshold, and sw0's and B's CC agents dropped the
# wrong CC_Key (cca_drop_bad_cc_key, apart from CC_KeyViolations).
last() { grep -E "$2" "$out/$1" 2>/dev/null | tail -1; }
num() { sed -n "s/.* $1 \([0-9]*\).*/\1/p"; }
m1=$(last switch-sw0.log '^port 1 \(' | num fecn_marked)
k0=$(last switch-sw0.log '^switch .* dr_drops:' | num cca_drop_bad_cc_key)
kb=$(last vhca-b.log 'mgmt:' | num cca_drop_bad_cc_key)
if [ "${m1:-0}" -gt 0 ] && [ "${k0:-0}" -gt 0 ] && [ "${kb:-0}" -gt 0 ]; then
    echo "PASS cc_reports_marks_and_key_drops"
else
    echo "FAIL cc_reports_marks_and_key_drops (sw0 port 1 fecn_marked '$m1', sw0 cca_drop_bad_cc_key '$k0', b '$kb')"; fail=1
fi
ran=$(con a; con b)
for name in no_sm_port_stays_init no_sm_sminfo_finds_none opensm_subnet_up port_active \
    opensm_restart_stream opensm_restart_stream_server opensm_restart_stream_flowing \
    opensm_killed_during_stream \
    opensm_restart_subnet_up b_heard_sm_restarted \
    opensm_restart_keeps_lid ipoib_ping ipoib_cm_ping_large rping ucmatose mckey_sender \
    mckey_receiver ib_write_bw_R b_port_active nvmeof_ib nvmet_rdma_target ipoib_cm_unfragmented \
    reroute_lft_to_other_cable reroute_lid_routed_smp link_back_active is_sm_in_portinfo \
    nodedesc_from_guest cc_opensm_no_errors cc_sw0_switch_setting cc_sw1_switch_setting \
    cc_a_ca_setting cc_b_ca_setting cc_a_cct cc_b_cct cc_b_key_info cc_b_wrong_key_unanswered \
    cc_b_key_violation_counted cc_sw0_wrong_key_unanswered cc_restart_opensm_no_errors \
    cc_restart_sw0_switch_setting cc_sw0_marked_fecn cc_a_fecn_seen cc_b_becns_received; do
    grep -q "^SN $name " <<<"$ran" || { echo "FAIL $name (never ran)"; fail=1; }
done
[ "$rc" = 0 ] || echo "note: vm-pair.sh exit $rc (logs: $out)"
echo "logs: $out"
exit $fail
