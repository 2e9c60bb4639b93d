#!/bin/bash
# images/roce-tests.sh — RoCEv2 between two guests (WF-10): each guest's vhca
# device has an Ethernet port on a TAP in a private network namespace
# (vm-pair.sh --roce), the guest's NIC carries the port's MAC so vhca.ko pairs
# them and ib_core fills the RoCE GID table from eth0's addresses. Runs the
# standard tools with the IPv4 RoCEv2 GID and rdma_cm, one PASS/FAIL line per
# check, then "N passed, M failed".
#
# Usage: images/roce-tests.sh [--out DIR]
# Exit status: 0 if every check passed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out=''
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
vhca_need_root
[ -n "$out" ] || { mkdir -p "$VHCA_RUN"; out=$(mktemp -d "$VHCA_RUN/roce.XXXXXX"); }
mkdir -p "$out"

# Each check: a name, the server command, the client command. The client waits
# for the server to listen (the tools' clients do not retry).
checks=(
    "rc_pingpong|ibv_rc_pingpong -d vhca0 -g \$GIDX -n 50 -s 4096|ibv_rc_pingpong -d vhca0 -g \$GIDX -n 50 -s 4096 \$SERVER_IP"
    "uc_pingpong|ibv_uc_pingpong -d vhca0 -g \$GIDX -n 50|ibv_uc_pingpong -d vhca0 -g \$GIDX -n 50 \$SERVER_IP"
    "ud_pingpong|ibv_ud_pingpong -d vhca0 -g \$GIDX -n 50|ibv_ud_pingpong -d vhca0 -g \$GIDX -n 50 \$SERVER_IP"
    "srq_pingpong|ibv_srq_pingpong -d vhca0 -g \$GIDX -n 50|ibv_srq_pingpong -d vhca0 -g \$GIDX -n 50 \$SERVER_IP"
    "write_bw|ib_write_bw -d vhca0 -x \$GIDX -s 65536 -n 200|ib_write_bw -d vhca0 -x \$GIDX -s 65536 -n 200 \$SERVER_IP"
    "read_bw|ib_read_bw -d vhca0 -x \$GIDX -s 65536 -n 200|ib_read_bw -d vhca0 -x \$GIDX -s 65536 -n 200 \$SERVER_IP"
    "send_lat|ib_send_lat -d vhca0 -x \$GIDX -s 8 -n 200|ib_send_lat -d vhca0 -x \$GIDX -s 8 -n 200 \$SERVER_IP"
    "atomic_lat|ib_atomic_lat -d vhca0 -x \$GIDX -n 200|ib_atomic_lat -d vhca0 -x \$GIDX -n 200 \$SERVER_IP"
    "rping_verify|rping -s -v -V -C 10 -a \$SERVER_IP|rping -c -v -V -C 10 -a \$SERVER_IP"
    "write_bw_rdma_cm|ib_write_bw -d vhca0 -R -s 65536 -n 200|ib_write_bw -d vhca0 -R -s 65536 -n 200 \$SERVER_IP"
)

# The port as ib_core sees it: link layer Ethernet, a RoCE v2 GID of eth0's IPv4
# address, paired with eth0.
port_check='p=/sys/class/infiniband/vhca0/ports/1
ll=$(cat $p/link_layer); t=$(cat $p/gid_attrs/types/$GIDX); n=$(cat $p/gid_attrs/ndevs/$GIDX)
g=$(cat $p/gids/$GIDX); echo "port: $ll, gid $GIDX $g $t $n"
[ "$ll" = Ethernet ] && [ "$t" = "RoCE v2" ] && [ "$n" = eth0 ] && case $g in *:ffff:0a63:*) true;; *) false;; esac
echo "RESULT port_ethernet_gids $?"'

server="$port_check"
client="sleep 1"
for c in "${checks[@]}"; do
    IFS='|' read -r name s cl <<<"$c"
    server+="
timeout 60 $s >/tmp/$name.log 2>&1; echo \"RESULT $name \$?\"; tail -4 /tmp/$name.log"
    client+="
sleep 3; timeout 60 $cl >/tmp/$name.log 2>&1; echo \"RESULT $name \$?\"; tail -4 /tmp/$name.log"
done

rc=0
"$VHCA_IMAGES/vm-pair.sh" --roce --timeout 600 --ready '' --out "$out" "$server" "$client" \
    >"$out/pair.log" 2>&1 || rc=$?
pass=0 fail=0
report() { # NAME: passed on both sides (or the one side that runs it)
    local n=$1 a b
    a=$(grep -a "RESULT $n " "$out/console-a.log" | tr -d '\r' | awk '{print $3}' | tail -1) || a=
    b=$(grep -a "RESULT $n " "$out/console-b.log" | tr -d '\r' | awk '{print $3}' | tail -1) || b=
    if [ "${a:-1}" = 0 ] && { [ "$n" = port_ethernet_gids ] || [ "${b:-1}" = 0 ]; }; then
        echo "PASS $n"; pass=$((pass + 1))
    else
        echo "FAIL $n (server ${a:-none}, client ${b:-none})"; fail=$((fail + 1))
    fi
}
report port_ethernet_gids
for c in "${checks[@]}"; do report "${c%%|*}"; done
if grep -Eq 'rx_other_mac [1-9]|rx_short [1-9]|rx_oversized [1-9]|rx_bad_vnet_hdr [1-9]|tx_bad_desc [1-9]|rx_bad_desc [1-9]' "$out"/vhca-*.log; then
    echo "FAIL tap_drops ($(grep -h '^tap:' "$out"/vhca-*.log | tr '\n' ' '))"; fail=$((fail + 1))
else
    echo "PASS tap_drops"; pass=$((pass + 1))
fi
[ "$rc" = 0 ] || echo "roce-tests: vm-pair.sh exited $rc (logs in $out)"
echo "roce-tests: $pass passed, $fail failed"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
