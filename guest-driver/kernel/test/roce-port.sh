#!/bin/sh
# SPDX-License-Identifier: GPL-2.0 OR MIT
# roce-port.sh — checks of vhca.ko's RoCEv2 port (WF-10), run inside a guest
# whose vhca device has an Ethernet port and whose virtio-net NIC (IFACE,
# default eth0) has the port's MAC and an IPv4 address.
#
# Usage (in the guest): sh roce-port.sh [IFACE]
#
# Checks: link layer Ethernet (sysfs and ibv_devinfo), the port ACTIVE, the
# GID table as show_gids prints it (index 0 the MAC-derived fe80:: GID, an
# IPv4-mapped GID for the NIC's address, every entry "RoCE v2" on IFACE);
# ibv_rc_pingpong and ibv_ud_pingpong between two QPs of the port;
# PORT_ERR / PORT_ACTIVE on link down / up (AE-01, seen by ibv_asyncwatch);
# active_mtu following the NIC's MTU; unloading and reloading virtio_net and
# vhca in both orders (the port pairs again, nothing hangs, no WARN/BUG in
# dmesg). Prints PASS/FAIL lines; exit status 0 iff all pass.

IF=${1:-eth0}
P=/sys/class/infiniband/vhca0/ports/1
fails=0
ZERO=0000:0000:0000:0000:0000:0000:0000:0000

ok() { echo "PASS $1"; }
bad() { echo "FAIL $1${2:+: $2}"; fails=$((fails + 1)); }
check() { # NAME COMMAND...
	n=$1
	shift
	if "$@"; then ok "$n"; else bad "$n"; fi
}

# show_gids, as rdma-core's script prints the table.
show_gids() {
	for g in "$P"/gids/*; do
		i=${g##*/}
		v=$(cat "$g" 2>/dev/null) || continue
		[ "$v" = "$ZERO" ] && continue
		t=$(cat "$P/gid_attrs/types/$i" 2>/dev/null)
		d=$(cat "$P/gid_attrs/ndevs/$i" 2>/dev/null)
		echo "vhca0 1 $i $v $t $d"
	done
}

wait_state() { # WANT (ACTIVE or DOWN), up to 5 s
	i=0
	while [ $i -lt 50 ]; do
		case "$(cat $P/state 2>/dev/null)" in *"$1"*) return 0;; esac
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

wait_dev() { # vhca0 present, up to 5 s
	i=0
	while [ $i -lt 50 ]; do
		[ -e $P/state ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# The IPv4-mapped GID of IFACE's address (::ffff:a.b.c.d as sysfs shows it).
v4_gid() {
	a=$(ip -4 -o addr show dev "$IF" | sed -n 's/.* inet \([0-9.]*\)\/.*/\1/p' | head -n1)
	[ -n "$a" ] || return 1
	set -- $(echo "$a" | tr . ' ')
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x\n' "$1" "$2" "$3" "$4"
}

has_gid() { # GID -> index on stdout
	show_gids | awk -v g="$1" '$4 == g { print $3; f = 1 } END { exit !f }'
}

addr=$(ip -4 -o addr show dev "$IF" | sed -n 's/.* inet \([0-9.\/]*\) .*/\1/p' | head -n1)

wait_dev || { bad "vhca0 present"; exit 1; }
check link_layer_sysfs grep -qx Ethernet $P/link_layer
check devinfo_link_layer sh -c 'ibv_devinfo -d vhca0 -v | grep -q "link_layer:[[:space:]]*Ethernet"'
check port_active wait_state ACTIVE
sleep 1	# roce_gid_mgmt works from a workqueue
echo "--- show_gids"
show_gids
echo "---"
g0=$(cat $P/gids/0)
case "$g0" in fe80:*) ok gid0_link_local;; *) bad gid0_link_local "$g0";; esac
check gid0_type sh -c "grep -qx 'RoCE v2' $P/gid_attrs/types/0"
check gid0_ndev sh -c "grep -qx '$IF' $P/gid_attrs/ndevs/0"
g4=$(v4_gid) && idx=$(has_gid "$g4") && ok "gid_ipv4 ($g4 at $idx)" || bad gid_ipv4 "$g4 missing"
all_v2_on_ndev() {
	show_gids | awk -v d="$IF" '$5 " " $6 " " $7 != "RoCE v2 " d { bad = 1 } END { exit bad }'
}
no_gids() { ! show_gids | grep -q .; }
check gids_all_v2_on_ndev all_v2_on_ndev
ibv_devinfo -d vhca0 -v | grep -E 'link_layer|state|active_mtu|max_mtu|GID\[' | sed 's/^/  /'

# Two QPs of the port (the device loops frames to its own MAC back): RC
# and UD through the IPv4 GID, AHs and RTR with the MAC ib_core resolved.
if [ -n "${idx:-}" ]; then
	timeout 30 ibv_rc_pingpong -d vhca0 -g "$idx" -n 10 >/tmp/lo-s.log 2>&1 &
	sleep 1
	check rc_pingpong_loopback timeout 30 ibv_rc_pingpong -d vhca0 -g "$idx" -n 10 127.0.0.1
	wait
	timeout 30 ibv_ud_pingpong -d vhca0 -g "$idx" -n 10 >/tmp/lo-s.log 2>&1 &
	sleep 1
	check ud_pingpong_loopback timeout 30 ibv_ud_pingpong -d vhca0 -g "$idx" -n 10 127.0.0.1
	wait
fi

# AE-01: link down and up, seen as async events.
ibv_asyncwatch -d vhca0 >/tmp/async.log 2>&1 &
aw=$!
sleep 1
ip link set "$IF" down
check port_down_on_link_down wait_state DOWN
check phys_state_disabled grep -q Disabled $P/phys_state
ip link set "$IF" up
check port_active_on_link_up wait_state ACTIVE
sleep 1
kill $aw 2>/dev/null
wait $aw 2>/dev/null
sed 's/^/  async: /' /tmp/async.log
check async_port_err grep -q 'PORT_ERR' /tmp/async.log
check async_port_active grep -q 'PORT_ACTIVE' /tmp/async.log
[ -n "$addr" ] && ip addr replace "$addr" dev "$IF"

# active_mtu follows the NIC: 1000 bytes leave room for 512 (A17.4).
ip link set "$IF" mtu 1000
check active_mtu_512 sh -c 'ibv_devinfo -d vhca0 | grep -q "active_mtu:.*512"'
ip link set "$IF" mtu 1500
check active_mtu_1024 sh -c 'ibv_devinfo -d vhca0 | grep -q "active_mtu:.*1024"'

reconfig() {
	ip link set "$IF" up
	[ -n "$addr" ] && ip addr replace "$addr" dev "$IF"
}

# The NIC goes away and comes back: the port follows, nothing waits.
check rmmod_virtio_net rmmod virtio_net
check port_down_without_nic wait_state DOWN
check no_gid_without_nic no_gids
check modprobe_virtio_net modprobe virtio_net
sleep 1
reconfig
check port_active_after_nic_back wait_state ACTIVE
sleep 1
g4=$(v4_gid) && has_gid "$g4" >/dev/null && ok gid_ipv4_after_nic_back || bad gid_ipv4_after_nic_back

# vhca goes away and comes back while the NIC stays.
check rmmod_vhca rmmod vhca
check modprobe_vhca modprobe vhca
wait_dev
check port_active_after_vhca_back wait_state ACTIVE
sleep 1
g4=$(v4_gid) && has_gid "$g4" >/dev/null && ok gid_ipv4_after_vhca_back || bad gid_ipv4_after_vhca_back

# Both away, vhca first back: it waits DOWN for the NIC, then pairs.
check rmmod_vhca_then_nic sh -c 'rmmod vhca && rmmod virtio_net'
check modprobe_vhca_alone modprobe vhca
wait_dev
check port_down_before_nic wait_state DOWN
check modprobe_nic_after_vhca modprobe virtio_net
sleep 1
reconfig
check port_active_late_nic wait_state ACTIVE
sleep 1
g4=$(v4_gid) && has_gid "$g4" >/dev/null && ok gid_ipv4_late_nic || bad gid_ipv4_late_nic
show_gids

# NIC first out, then vhca (the other order of the two removals).
check rmmod_nic_then_vhca sh -c 'rmmod virtio_net && rmmod vhca'
check reload_both sh -c 'modprobe virtio_net && modprobe vhca'
wait_dev
reconfig
check port_active_after_reload wait_state ACTIVE

if dmesg | grep -Eq 'WARNING:|BUG:|refcount_t|unregister_netdevice: waiting'; then
	bad dmesg_clean
	dmesg | grep -E -A5 'WARNING:|BUG:|refcount_t|unregister_netdevice: waiting' | head -40
else
	ok dmesg_clean
fi
dmesg | grep -i vhca | tail -n 20 | sed 's/^/  dmesg: /'
echo "roce-port: $fails failure(s)"
[ $fails = 0 ]
