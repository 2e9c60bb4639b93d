#!/bin/bash
# images/vm-tests.sh — the VM tier of the test suite: rdma-core's and perftest's
# tools between two TCG guests, each with its own vhca device (images/vm-pair.sh).
#
# Usage: images/vm-tests.sh [--keep-going] [--out DIR] [--only REGEX] [-- VM_PAIR_OPTION...]
#   --only REGEX   run only the tools whose name matches ^(REGEX)$ (grep -E),
#                  e.g. 'rc_pingpong|ud_pingpong' (images/distro-tests.sh)
#
# One vm-pair.sh boot runs every tool pair in sequence: guest A runs the
# servers (each on its own TCP port, under `timeout`), guest B the clients
# (each retried while the server is not listening yet). Before the servers,
# guest A checks `ibv_devinfo -v` (vhca0, PORT_ACTIVE, port_lid 1, link_layer
# InfiniBand) and `rdma link`. A tool passes when both of its sides exit 0.
# After the servers, guest A checks the counters (`counters`): `rdma statistic
# show link vhca0/1` has rx/tx packets, bytes and ACKs > 0 and the per-reason
# names, and the sysfs port counters (port_xmit_packets ...) and the device's
# hw counters (send_wqes, cqes) are > 0.
#
# Tools: ibv_{rc,uc,ud,srq}_pingpong -c, each with and without -e;
# ibv_rc_pingpong -N (the extended QP's ibv_wr_* API: libibverbs finds the
# ibv_qp_ex inside the provider's verbs_qp, so a provider built with another
# release's structure layout fails here, issue 24); over RC
# ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat
# ib_read_lat; ib_send_bw -c UD; ib_write_bw -c UC; UD multicast (AD-08,
# PV-07: images/vt/ud-mcast.c, built in the tool root: two QPs of guest A
# attached to a group and one not, guest B's SENDs to the group reach the
# attached two, and after a detach only the other one; no subnet manager);
# ibv_xsrq_pingpong and ib_send_bw -c XRC (SR-02); APM failover (AD-10:
# images/vt/apm-failover.c, built in the tool root: an armed RC QP pair on
# its primary path, guest B's second LID, which the fault below kills in the
# middle of a stream of WRITEs and SENDs; both sides must see the path
# migrated event, every message complete, the data byte-exact and query_qp
# MIGRATED); on-demand paging (issue 29 item 1): ib_write_bw and ib_read_bw
# with --odp, and images/vt/odp-stream.c, built in the tool root: RDMA WRITEs
# and READs between implicit ODP MRs while both sides swap their buffers out
# (MADV_PAGEOUT to swap on zram, which the tool proves with mincore), munmap
# and mmap new pages at the same address, and MADV_DONTNEED them, every byte
# of every round checked on both sides; devinfo_caps (issue 16: `ibv_devinfo -v` on both guests shows
# AUTO_PATH_MIG, XRC, MEM_WINDOW, MEM_WINDOW_TYPE_2B, the AUTO_MIGR_SUP port
# capability, multicast limits > 0, max_pkeys = pkey_tbl_len, max_vl_num
# 8 (4), atomic_cap ATOMIC_HCA, max_ee and max_rdd 0).
#
# The fabric gives node b LMC 1 (LIDs 2 and 3, AD-01) and both devices
# `--fault drop_dlid=3,drop_dlid_after=$VHCA_VM_TESTS_APM_AFTER` (default
# 1500): guest A's packets to LID 3 are lost once 1500 went through. Only
# apm_failover sends to LID 3 (the other tools use the port's LID, 2), so
# its primary path dies mid-stream and the rest of the suite is untouched.
#
# Prints one "PASS name" / "FAIL name" line per tool; exit 0 iff all pass.
# The guests' consoles and the vhca logs stay in --out (default: a new
# $VHCA_CACHE/run/pair.XXXXXX, printed at the end).
#
# Environment: VHCA_VM_TESTS_N (pingpong iterations, default 50),
# VHCA_VM_TESTS_PERF_N (perftest iterations, default 100),
# VHCA_VM_TESTS_APM_AFTER (packets of apm_failover's primary path before it
# dies, default 1500 of its 4096).
set -uo pipefail
cd "$(dirname "$0")/.."
. images/lib.sh

out='' pair_opts=() only=''
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2;;
        --only) only=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; pair_opts+=("$@"); break;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
vhca_need_root

N=${VHCA_VM_TESTS_N:-50}
PN=${VHCA_VM_TESTS_PERF_N:-100}
APM_AFTER=${VHCA_VM_TESTS_APM_AFTER:-1500}
D='-d vhca0'
P="-d vhca0 -F -n $PN"
# name|server and client arguments (the client adds $SERVER_IP; both get -p PORT)
tests="rc_pingpong|ibv_rc_pingpong $D -g 0 -c -n $N
rc_pingpong_e|ibv_rc_pingpong $D -g 0 -c -e -n $N
rc_pingpong_N|ibv_rc_pingpong $D -g 0 -c -N -n $N
uc_pingpong|ibv_uc_pingpong $D -g 0 -c -n $N
uc_pingpong_e|ibv_uc_pingpong $D -g 0 -c -e -n $N
ud_pingpong|ibv_ud_pingpong $D -g 0 -c -s 1024 -n $N
ud_pingpong_e|ibv_ud_pingpong $D -g 0 -c -e -s 1024 -n $N
srq_pingpong|ibv_srq_pingpong $D -g 0 -c -n $N
srq_pingpong_e|ibv_srq_pingpong $D -g 0 -c -e -n $N
ib_send_bw|ib_send_bw $P
ib_write_bw|ib_write_bw $P
ib_read_bw|ib_read_bw $P
ib_atomic_bw|ib_atomic_bw $P
ib_send_lat|ib_send_lat $P
ib_write_lat|ib_write_lat $P
ib_read_lat|ib_read_lat $P
ib_send_bw_UD|ib_send_bw $P -c UD -s 1024
ib_write_bw_UC|ib_write_bw $P -c UC
ud_mcast|vhca-ud-mcast $D -n 20
xsrq_pingpong|ibv_xsrq_pingpong $D -g 0 -n $N
ib_send_bw_XRC|ib_send_bw $P -c XRC
apm_failover|vhca-apm-failover $D -n 64 -s 65536
ib_write_bw_odp|ib_write_bw $P --odp -s 65536
ib_read_bw_odp|ib_read_bw $P --odp -s 65536
odp_stream|vhca-odp-stream.sh $D -n 24 -s 262144
devinfo_caps|vhca-devinfo-caps"
if [ -n "$only" ]; then
    tests=$(printf '%s\n' "$tests" | grep -E "^($only)\|") || vhca_die "--only $only matches no tool"
fi

ov=$(mktemp -d /tmp/vm-tests-ov.XXXXXX)
trap 'rm -rf "$ov"' EXIT
mkdir -p "$ov/usr/share/vhca-tests" "$ov/usr/bin"
printf '%s\n' "$tests" >"$ov/usr/share/vhca-tests/list"
# The multicast check, built with the tool root's compiler and libibverbs
# (the guest's are the same trixie packages).
"$VHCA_IMAGES/host-root.sh" >/dev/null
VHCA_BIND="$ov" vhca_chroot "$(vhca_root_dir)" gcc -O2 -Wall -Wextra -Werror \
    -o "$ov/usr/bin/vhca-ud-mcast" "$VHCA_REPO/images/vt/ud-mcast.c" -libverbs ||
    vhca_die "building images/vt/ud-mcast.c failed"
VHCA_BIND="$ov" vhca_chroot "$(vhca_root_dir)" gcc -O2 -Wall -Wextra -Werror \
    -o "$ov/usr/bin/vhca-apm-failover" "$VHCA_REPO/images/vt/apm-failover.c" -libverbs ||
    vhca_die "building images/vt/apm-failover.c failed"
VHCA_BIND="$ov" vhca_chroot "$(vhca_root_dir)" gcc -O2 -Wall -Wextra -Werror \
    -o "$ov/usr/bin/vhca-odp-stream" "$VHCA_REPO/images/vt/odp-stream.c" -libverbs ||
    vhca_die "building images/vt/odp-stream.c failed"
# odp_stream swaps its buffers out with MADV_PAGEOUT: swap on zram (in the
# guest's module list, images/guest.sh), set up once per guest.
cat >"$ov/usr/bin/vhca-odp-stream.sh" <<'EOF'
#!/bin/sh
if ! grep -q '^/dev/zram0 ' /proc/swaps; then
    modprobe zram num_devices=1 &&
        echo 128M >/sys/block/zram0/disksize &&
        mkswap /dev/zram0 >/dev/null &&
        swapon /dev/zram0 || { echo "odp_stream: no swap on zram"; exit 1; }
fi
exec vhca-odp-stream "$@"
EOF
chmod +x "$ov/usr/bin/vhca-odp-stream.sh"
# Issue 16: what ibv_devinfo -v must show (the device does all of it). Both
# sides run it; the arguments (-p PORT [SERVER_IP]) are the list's, unused.
cat >"$ov/usr/bin/vhca-devinfo-caps" <<'EOF'
#!/bin/sh
dv=$(ibv_devinfo -v -d vhca0 2>&1); echo "$dv"
ok=1
for re in '^[[:space:]]+AUTO_PATH_MIG$' '^[[:space:]]+XRC$' '^[[:space:]]+MEM_WINDOW$' \
          '^[[:space:]]+MEM_WINDOW_TYPE_2B$' 'max_mcast_grp:[[:space:]]+[1-9]' \
          'max_mcast_qp_attach:[[:space:]]+[1-9]' 'max_total_mcast_qp_attach:[[:space:]]+[1-9]' \
          'max_vl_num:[[:space:]]+8 \(4\)$' 'atomic_cap:[[:space:]]+ATOMIC_HCA' \
          'max_ee:[[:space:]]+0$' 'max_rdd:[[:space:]]+0$'; do
    echo "$dv" | grep -Eq "$re" || { echo "devinfo_caps: missing /$re/"; ok=0; }
done
mp=$(echo "$dv" | sed -n 's/^[[:space:]]*max_pkeys:[[:space:]]*//p')
pl=$(echo "$dv" | sed -n 's/^[[:space:]]*pkey_tbl_len:[[:space:]]*//p')
[ -n "$mp" ] && [ "$mp" -ge 1 ] && [ "$mp" = "$pl" ] ||
    { echo "devinfo_caps: max_pkeys '$mp' is not pkey_tbl_len '$pl'"; ok=0; }
# IBA PortInfo:CapabilityMask IsAutomaticMigrationSupported (bit 5).
pc=$(echo "$dv" | sed -n 's/^[[:space:]]*port_cap_flags:[[:space:]]*//p')
[ -n "$pc" ] && [ $(( pc & 0x20 )) != 0 ] ||
    { echo "devinfo_caps: port_cap_flags '$pc' without AUTO_MIGR_SUP"; ok=0; }
[ $ok = 1 ]
EOF
chmod +x "$ov/usr/bin/vhca-devinfo-caps"

cat >"$ov/usr/share/vhca-tests/server.sh" <<'EOF'
#!/bin/sh
# guest A: devinfo checks, then every server in turn.
dv=$(ibv_devinfo -v -d vhca0 2>&1); echo "$dv"
ok=1
for re in 'hca_id:[[:space:]]*vhca0' 'state:[[:space:]]*PORT_ACTIVE' \
          'port_lid:[[:space:]]*1$' 'link_layer:[[:space:]]*InfiniBand'; do
    echo "$dv" | grep -Eq "$re" || { echo "devinfo: missing /$re/"; ok=0; }
done
[ $ok = 1 ] && echo "VT-S devinfo 0" || echo "VT-S devinfo 1"
rl=$(rdma link 2>&1); echo "$rl"
echo "$rl" | grep -Eq 'link vhca0/1 .*state ACTIVE' && echo "VT-S rdma_link 0" || echo "VT-S rdma_link 1"
i=0
while IFS='|' read -r name cmd; do
    port=$((18600 + i)); i=$((i + 1))
    echo "--- server $name: $cmd -p $port"
    timeout 90 $cmd -p $port </dev/null 2>&1
    echo "VT-S $name $?"
done </usr/share/vhca-tests/list
# Counters (issue 17 item 3), after all that traffic: the device's counters as
# rdma hw counters (`rdma statistic`, hw_counters/) and ib_core's sysfs port
# counters (the driver's PMA); names in guest-driver/README.md "Counters".
st=$(rdma statistic show link vhca0/1 2>&1); echo "$st"
ok=1
for c in rx_packets tx_packets rx_bytes tx_bytes acks_sent; do
    echo "$st" | grep -Eq " $c [1-9]" || { echo "rdma statistic: no $c > 0"; ok=0; }
done
for c in wire_drop_bad_icrc rx_drop_unknown_qp; do
    echo "$st" | grep -Eq " $c [0-9]" || { echo "rdma statistic: no $c"; ok=0; }
done
# The NAKs sent per reason are the device's hw counters (one netlink reply
# holds no more on the port).
[ -e /sys/class/infiniband/vhca0/hw_counters/nak_sent_psn_sequence ] ||
    { echo "no device hw counter nak_sent_psn_sequence"; ok=0; }
d=/sys/class/infiniband/vhca0
for f in ports/1/hw_counters/tx_packets ports/1/counters/port_xmit_packets \
         ports/1/counters/port_rcv_packets ports/1/counters/port_xmit_data \
         ports/1/counters/port_rcv_data hw_counters/send_wqes hw_counters/cqes; do
    v=$(cat $d/$f 2>&1); echo "$f: $v"
    case "$v" in [1-9]*) ;; *) echo "$d/$f not > 0"; ok=0;; esac
done
[ $ok = 1 ] && echo "VT-S counters 0" || echo "VT-S counters 1"
EOF

cat >"$ov/usr/share/vhca-tests/client.sh" <<'EOF'
#!/bin/sh
# guest B: every client in turn, retried while its server is not listening.
i=0
while IFS='|' read -r name cmd; do
    port=$((18600 + i)); i=$((i + 1))
    try=0
    while :; do
        try=$((try + 1))
        echo "--- client $name (try $try): $cmd -p $port $SERVER_IP"
        o=$(timeout 90 $cmd -p $port $SERVER_IP </dev/null 2>&1); rc=$?
        echo "$o"
        [ $rc = 0 ] && break
        echo "$o" | grep -qiE "couldn't connect|unable to connect|failed to connect|connection refused" || break
        [ $try -ge 30 ] && break
        sleep 1
    done
    echo "VT-C $name $rc"
done </usr/share/vhca-tests/list
EOF
chmod +x "$ov/usr/share/vhca-tests/"*.sh

if [ -n "$out" ]; then mkdir -p "$out" && out=$(realpath "$out") || exit 1
else mkdir -p "$VHCA_RUN"; out=$(mktemp -d "$VHCA_RUN/pair.XXXXXX"); fi
log="$out/vm-tests.out"
start=$(date +%s)
images/vm-pair.sh --out "$out" --timeout 900 --ready '' --overlay "$ov" \
    --node-toml 'b:lmc = 1' --vhca-arg "--fault=drop_dlid=3,drop_dlid_after=$APM_AFTER" "${pair_opts[@]}" \
    'sh /usr/share/vhca-tests/server.sh' 'sh /usr/share/vhca-tests/client.sh' >"$log" 2>&1
prc=$?
echo "vm-pair.sh exit $prc after $(( $(date +%s) - start )) s; output in $log"
[ -s "$log" ] || { echo "FAIL vm-pair.sh produced no output"; exit 1; }

fail=0
status() { # S|C NAME -> exit status or empty
    sed -n "s/^VT-$1 $2 \([0-9]*\)\$/\1/p" "$log" | tail -1
}
for name in devinfo rdma_link counters; do
    s=$(status S "$name")
    if [ "$s" = 0 ]; then echo "PASS $name"; else echo "FAIL $name (guest A: ${s:-no result})"; fail=1; fi
done
while IFS='|' read -r name _; do
    s=$(status S "$name") c=$(status C "$name")
    if [ "$s" = 0 ] && [ "$c" = 0 ]; then
        echo "PASS $name"
    else
        echo "FAIL $name (server ${s:-no result}, client ${c:-no result})"
        fail=1
    fi
done <<<"$tests"
grep -E 'Oops|BUG:|WARNING: CPU|cut here|Call Trace' "$log" && fail=1
if [ "$fail" = 0 ] && [ "$prc" != 0 ]; then echo "FAIL vm-pair.sh exit $prc"; fail=1; fi
[ "$fail" = 0 ] && echo "vm-tests: all passed" || echo "vm-tests: FAILED (logs: $out)"
exit "$fail"
