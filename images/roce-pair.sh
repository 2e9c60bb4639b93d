#!/bin/bash
# images/roce-pair.sh — two guests on a private Ethernet, each with a RoCEv2
# device (vhca or Linux soft-RoCE), run a server command in guest A and a
# client command in guest B.
#
# Usage: images/roce-pair.sh [OPTIONS] [--] SERVER_CMD CLIENT_CMD
#
# What it does:
#   - makes a network namespace of its own (vhca-roce-<pid>-<random>) with a
#     Linux bridge br0 and two TAP devices on it, ta (A) and tb (B). Every QEMU
#     and vhca process of the run runs in it (ip netns exec; run-vm.sh
#     --netns), nothing on the bridge is connected to anything else: no frame
#     leaves the namespace. The namespace, bridge and TAPs go away on exit;
#   - per side, one of:
#       vhca  a vhca process in RoCE mode owns the side's TAP and serves both
#             the vfio-user device and a vhost-user-net backend for the guest's
#             own virtio-net NIC (same MAC): vhca --socket S --tap tX --mac M
#             --vhost-user-net N; the guest gets vhca.ko + libvhca (built and
#             cached exactly as vm-pair.sh does) and uses vhca0, whose RoCE
#             GIDs come from eth0's addresses. Needs a vhca with
#             --vhost-user-net (issue 11); with an older binary this fails at
#             once, saying so;
#       rxe   a plain virtio-net NIC on the TAP (-netdev tap), and in the guest
#             `rdma link add rxe0 type rxe netdev eth0`;
#   - A is 10.99.0.1/24 (MAC 52:54:00:99:00:01), B 10.99.0.2/24
#     (52:54:00:99:00:02). In both guests the init hook exports SERVER_IP,
#     CLIENT_IP, PEER_IP, MY_IP, NETDEV (eth0), DEV (vhca0 or rxe0) and GIDX:
#     the GID index of the RoCE v2 GID that is eth0's IPv4 address mapped
#     (::ffff:a.b.c.d), found in /sys/class/infiniband/$DEV/ports/1/gids/* and
#     gid_attrs/types/* (waits up to 10 s for the port and the GID); it prints
#     "roce-hook: ..." with what it found;
#   - boots A, then B once A's console matches --ready, runs SERVER_CMD in A
#     and CLIENT_CMD in B (sh command lines: use $DEV, $GIDX, $SERVER_IP, ...
#     in single quotes), waits for both and prints each command's output.
#
# Options:
#   --a vhca|rxe      A's (the server's) RoCE device (default vhca)
#   --b vhca|rxe      B's (the client's) RoCE device (default vhca)
#   --loss PCT        drop PCT % of the frames the bridge forwards, at random,
#                     both directions: nft table bridge vhca_loss, rule
#                     `numgen random mod 100 < PCT counter drop` on the bridge
#                     forward hook (every frame: RoCE, ARP, the tools' TCP)
#   --bottleneck RATE[,min=BYTES,max=BYTES,max_p=P,cap=BYTES]
#                     an ECN-marking bottleneck of RATE bits/s (k, M, G) on
#                     the path, each direction (issue 31): RED on the queue,
#                     ECT frames marked CE between min and max (probability
#                     rising to max_p, every frame from max), Not-ECT frames
#                     dropped there, tail drop at cap (defaults 8K, 32K,
#                     0.2, 128K). First the kernel's: a tbf of RATE at the
#                     root of ta and of tb (the bridge's ports towards A and
#                     B) with a child `red ... ecn`, else `fq_codel ecn`
#                     (which has no min/max: its own target); where tc says
#                     neither qdisc kind exists (kernels without
#                     CONFIG_NET_SCH_RED/FQ_CODEL), one line says so and
#                     ecn-switch (tests/src/bin/ecn-switch.rs, built with
#                     cargo) takes the bridge's place: ta and tb leave br0
#                     and the switch forwards between them through AF_PACKET
#                     sockets, with the same rate and RED profile. vhca sides
#                     get --no-tap-gso (frames cross the bottleneck one by
#                     one, as on a wire). The log says which bottleneck ran
#                     and its counters at the end (qdisc: tc -s; ecn-switch:
#                     "ecn-switch port=..." lines, also in OUT/ecn-switch.stats, and a
#                     per-second series in OUT/ecn-switch.series).
#                     Not with --loss, --capture (no br0 traffic when the
#                     switch runs; --capture-taps works)
#   --ecn-switch BIN  use this ecn-switch binary instead of building one
#   --mtu N           Ethernet MTU of the bridge, the TAPs and the guests' NICs
#                     (default 1500); 9000 gives RoCE a 4096-byte path MTU on
#                     both vhca (its TAP's MTU) and rxe (its netdev's)
#   --capture FILE    capture the RoCE frames (udp port 4791) crossing br0 into
#                     FILE (pcap, dumpcap in the namespace). br0 sees a frame
#                     before the --loss rule (forward hook) drops it
#   --capture-taps FILE  also capture the RoCE frames on ta and tb into FILE
#                     (pcapng, one interface each, the first 96 bytes of a
#                     frame: every header): what each side sent, and what the
#                     bridge delivered to it after the --loss rule, so a
#                     frame dropped by the rule is in --capture's file and
#                     missing from its TAP here
#   --out DIR         keep consoles, vhca logs, overlays in DIR (default: a new
#                     $VHCA_CACHE/run/roce.XXXXXX, kept)
#   --timeout S       per-guest timeout (default 300)
#   --mem SIZE        guest RAM (default 1G)
#   --vhca BIN        use this vhca binary instead of building one
#   --vhca-log LEVEL  vhca --log level (default info)
#   --share DIR       share the host folder DIR read-write with both guests
#                     at /share (run-vm.sh --share, virtio-9p)
#   --single          boot guest A only: B's device runs without a guest (the
#                     other end of the bridge), CLIENT_CMD is not run
#   --vhca-arg ARG    extra vhca argument, both vhca sides (repeatable)
#   --overlay DIR     one more overlay for both guests (repeatable)
#   --ready REGEX     start B once A's console (after /init's "ready") matches
#                     REGEX (grep -E; default 'local address:|Waiting for client');
#                     '' = once A's /init is ready
#   --verbose         full guest kernel log on the consoles
#
# Exit status: 0 if both commands exit 0; else the server's status if it
# failed, else the client's; 124 on a guest timeout (as run-vm.sh).
#
# Examples:
#   images/roce-pair.sh --a rxe --b rxe \
#       'ibv_rc_pingpong -d $DEV -g $GIDX -n 10' 'ibv_rc_pingpong -d $DEV -g $GIDX -n 10 $SERVER_IP'
#   images/roce-pair.sh --a vhca --b rxe --capture /tmp/x.pcap \
#       'ib_write_bw -d $DEV -x $GIDX -F' 'ib_write_bw -d $DEV -x $GIDX -F $SERVER_IP'
set -euo pipefail
. "$(dirname "$0")/lib.sh"

side_a=vhca side_b=vhca loss=0 mtu=1500 capture='' capture_taps='' out='' timeout=300 mem=1G bin='' vhca_log=info
verbose=0 ready='local address:|Waiting for client'
vhca_args=() extra_ov=() single=0 bottleneck='' ecn_switch_bin=''
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --a) need "$@"; side_a=$2; shift 2;;
        --b) need "$@"; side_b=$2; shift 2;;
        --loss) need "$@"; loss=$2; shift 2;;
        --mtu) need "$@"; mtu=$2; shift 2;;
        --bottleneck) need "$@"; bottleneck=$2; shift 2;;
        --ecn-switch) need "$@"; ecn_switch_bin=$2; shift 2;;
        --capture) need "$@"; capture=$2; shift 2;;
        --capture-taps) need "$@"; capture_taps=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        --timeout) need "$@"; timeout=$2; shift 2;;
        --mem) need "$@"; mem=$2; shift 2;;
        --vhca) need "$@"; bin=$2; shift 2;;
        --vhca-log) need "$@"; vhca_log=$2; shift 2;;
        --vhca-arg) need "$@"; vhca_args+=("$2"); shift 2;;
        --overlay) need "$@"; extra_ov+=(--overlay "$(realpath "$2")"); shift 2;;
        --share) need "$@"; [ -d "$2" ] || vhca_die "--share $2: not a directory"
            extra_ov+=(--share "$(realpath "$2")"); shift 2;;
        --single) single=1; shift;;
        --ready) need "$@"; ready=$2; shift 2;;
        --verbose) verbose=1; shift;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; break;;
        -*) vhca_die "unknown option $1 (try --help)";;
        *) break;;
    esac
done
[ $# -eq 2 ] || vhca_die "need SERVER_CMD and CLIENT_CMD (try --help)"
server_cmd=$1 client_cmd=$2
for s in "$side_a" "$side_b"; do
    case "$s" in vhca|rxe) ;; *) vhca_die "a side is vhca or rxe, not '$s'";; esac
done
case "$loss" in ''|*[!0-9]*) vhca_die "--loss takes a whole percentage";; esac
[ "$loss" -le 100 ] || vhca_die "--loss takes a percentage (0-100)"
# --bottleneck RATE[,k=v...]: bn_rate, bn_min, bn_max, bn_maxp, bn_cap.
bn_rate='' bn_min=8K bn_max=32K bn_maxp=0.2 bn_cap=128K
if [ -n "$bottleneck" ]; then
    [ "$loss" = 0 ] || vhca_die "--bottleneck and --loss do not go together"
    [ -z "$capture" ] || vhca_die "--bottleneck and --capture do not go together (use --capture-taps)"
    IFS=, read -r -a bn_parts <<<"$bottleneck"
    bn_rate=${bn_parts[0]}
    [[ "$bn_rate" =~ ^[0-9]+(\.[0-9]+)?[kKmMgG]?$ ]] || vhca_die "--bottleneck $bottleneck: RATE is bits/s with an optional k, M or G"
    for kv in "${bn_parts[@]:1}"; do
        case "$kv" in
            min=*) bn_min=${kv#min=};;
            max=*) bn_max=${kv#max=};;
            max_p=*) bn_maxp=${kv#max_p=};;
            cap=*) bn_cap=${kv#cap=};;
            *) vhca_die "--bottleneck: unknown parameter '$kv' (min, max, max_p, cap)";;
        esac
    done
    for v in "$bn_min" "$bn_max" "$bn_cap"; do
        [[ "$v" =~ ^[0-9]+[kKmM]?$ ]] || vhca_die "--bottleneck: '$v' is not a size in bytes (K, M)"
    done
    [[ "$bn_maxp" =~ ^(0?\.[0-9]+|1(\.0*)?)$ ]] || vhca_die "--bottleneck: max_p '$bn_maxp' is not a probability"
    # Frames cross the bottleneck one by one, as on a wire.
    vhca_args+=(--no-tap-gso)
fi
vhca_need_root
vhca_netns_check

# --- builds ------------------------------------------------------------------
"$VHCA_IMAGES/host-root.sh" >/dev/null
GUEST=$("$VHCA_IMAGES/guest.sh")
K=$(cat "$GUEST/kver")
any_vhca=0
if [ "$side_a" = vhca ] || [ "$side_b" = vhca ]; then any_vhca=1; fi
if [ "$any_vhca" = 1 ]; then
    [ -n "$bin" ] || bin=$(vhca_build_vhca)
    [ -x "$bin" ] || vhca_die "no vhca binary at $bin"
    # The RoCE mode of issue 11: --tap/--mac and the vhost-user-net backend.
    vhelp=$("$bin" --help 2>&1 || true)
    for o in --tap --mac --vhost-user-net; do
        grep -q -- "$o" <<<"$vhelp" ||
            vhca_die "$bin has no $o option: vhca's RoCE mode with a shared NIC (issue 11) is not in this build; use --a rxe --b rxe"
    done
    KO=$(vhca_build_module "$K")
    PROV=$("$VHCA_REPO/guest-driver/provider/build.sh")
    SO=$(ls "$PROV"/libvhca-rdmav*.so)
fi

# --- run folder, overlays ----------------------------------------------------
mkdir -p "$VHCA_RUN"
if [ -z "$out" ]; then
    out=$(mktemp -d "$VHCA_RUN/roce.XXXXXX")
else
    mkdir -p "$out"
    out=$(realpath "$out")
fi
[ -z "$capture" ] || capture=$(realpath -m "$capture")
[ -z "$capture_taps" ] || capture_taps=$(realpath -m "$capture_taps")

if [ "$any_vhca" = 1 ]; then
    ovv="$out/overlay-vhca"
    rm -rf "$ovv"
    mkdir -p "$ovv/lib/modules/$K/extra" "$ovv/usr/lib/x86_64-linux-gnu/libibverbs" "$ovv/etc/libibverbs.d"
    cp "$KO" "$ovv/lib/modules/$K/extra/vhca.ko"
    cp "$SO" "$ovv/usr/lib/x86_64-linux-gnu/libibverbs/"
    cp "$PROV/vhca.driver" "$ovv/etc/libibverbs.d/vhca.driver"
fi

# hook_overlay SIDE(a|b) KIND(vhca|rxe) MY_IP PEER_IP: the init hook of one guest.
hook_overlay() {
    local d="$out/overlay-$1"
    rm -rf "$d"
    mkdir -p "$d/etc/vhca-init.d"
    {
        echo "# roce-pair.sh: guest $1, RoCE device $2."
        echo "ROCE_KIND=$2 MY_IP=$3 PEER_IP=$4 MTU=$mtu"
        cat <<'EOF'
export SERVER_IP=10.99.0.1 CLIENT_IP=10.99.0.2 PEER_IP MY_IP
NETDEV=
for d in /sys/class/net/*; do
    [ "${d##*/}" = lo ] && continue
    [ -e "$d/device" ] && { NETDEV=${d##*/}; break; }
done
[ "$MTU" = 1500 ] || ip link set "$NETDEV" mtu "$MTU" ||
    echo "roce-hook: cannot set MTU $MTU on $NETDEV"
if [ "$ROCE_KIND" = rxe ]; then
    DEV=rxe0
    { modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "$NETDEV"; } ||
        echo "roce-hook: rdma link add rxe0 on $NETDEV failed"
else
    DEV=vhca0
    modprobe -a ib_core ib_uverbs vhca || echo "roce-hook: modprobe failed"
fi
# The RoCE v2 GID of our IPv4 address (::ffff:a.b.c.d), once the port is up.
want=$(echo "$MY_IP" | awk -F. '{ printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4 }')
P=/sys/class/infiniband/$DEV/ports/1
GIDX= st= i=0
while [ $i -lt 100 ]; do
    st=$(cat $P/state 2>/dev/null) || st=
    case "$st" in
        *ACTIVE*)
            for g in $(grep -lx "$want" $P/gids/* 2>/dev/null); do
                n=${g##*/} t=
                read -r t <$P/gid_attrs/types/$n 2>/dev/null || t=
                case "$t" in *"v2"*) GIDX=$n; break;; esac
            done;;
    esac
    [ -n "$GIDX" ] && break
    sleep 0.1
    i=$((i + 1))
done
export NETDEV DEV GIDX
echo "roce-hook: $ROCE_KIND DEV=$DEV GIDX=${GIDX:-none} NETDEV=$NETDEV MAC=$(cat /sys/class/net/$NETDEV/address 2>/dev/null) IP=$MY_IP port ${st:-absent} link_layer $(cat $P/link_layer 2>/dev/null)"
EOF
    } >"$d/etc/vhca-init.d/60-roce.sh"
}
hook_overlay a "$side_a" 10.99.0.1 10.99.0.2
hook_overlay b "$side_b" 10.99.0.2 10.99.0.1

# --- teardown ----------------------------------------------------------------
NS='' pids=() socks=() bn_kind='' bn_pid=''
VHCA_CAPTURE_PID= taps_pid=
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
    vhca_netns_capture_stop
    if [ -n "$taps_pid" ]; then
        local keep=$VHCA_CAPTURE_PID
        VHCA_CAPTURE_PID=$taps_pid
        vhca_netns_capture_stop
        VHCA_CAPTURE_PID=$keep taps_pid=
    fi
    if [ -n "$bn_pid" ]; then
        kill -TERM "$bn_pid" 2>/dev/null || true
        wait "$bn_pid" 2>/dev/null || true
        bn_pid=''
        grep '^ecn-switch port=' "$out/ecn-switch.log" | while read -r l; do vhca_log "$l"; done
    elif [ -n "$NS" ] && [ -n "$bn_kind" ]; then
        for d in ta tb; do
            vhca_log "qdisc $d: $(ip netns exec "$NS" tc -s qdisc show dev "$d" | tr '\n' ' ')"
        done
    fi
    if [ -n "$NS" ]; then
        if [ "$loss" != 0 ]; then
            vhca_log "loss rule dropped $(vhca_netns_loss_count "$NS" || true) frames"
        fi
        vhca_netns_delete "$NS"
        NS=''
    fi
    for p in "${socks[@]}"; do rm -f "$p"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- the network -------------------------------------------------------------
vhca_netns_create vhca-roce
NS=$VHCA_NETNS
vhca_netns_tap "$NS" ta
vhca_netns_tap "$NS" tb
case "$mtu" in ''|*[!0-9]*) vhca_die "--mtu $mtu: a number of bytes";; esac
if [ "$mtu" != 1500 ]; then
    # Before vhca opens its TAP: the TAP's MTU sets the port's path MTU.
    for i in ta tb br0; do
        ip -n "$NS" link set "$i" mtu "$mtu" || vhca_die "cannot set MTU $mtu on $i"
    done
fi
[ "$loss" = 0 ] || vhca_netns_loss "$NS" "$loss"
# bn_bytes SIZE: SIZE (K, M suffixes) in bytes.
bn_bytes() {
    local v=${1%[kKmM]}
    case "$1" in *[kK]) echo $((v * 1024));; *[mM]) echo $((v * 1048576));; *) echo "$v";; esac
}
if [ -n "$bottleneck" ]; then
    # tc's rate unit: "bit" after the number (100Mbit); the bucket holds
    # 500 us at the rate, at least two full frames (as ecn-switch's).
    tc_rate="${bn_rate%[kKmMgG]}$(case "$bn_rate" in *[kK]) echo k;; *[mM]) echo M;; *[gG]) echo G;; esac)bit"
    bmin=$(bn_bytes "$bn_min") bmax=$(bn_bytes "$bn_max") bcap=$(bn_bytes "$bn_cap")
    tc_err=''
    for dev in ta tb; do
        ip netns exec "$NS" tc qdisc add dev "$dev" root handle 1: tbf rate "$tc_rate" burst 16k latency 100ms ||
            vhca_die "tc: cannot add a tbf of $tc_rate on $dev"
        if e=$(ip netns exec "$NS" tc qdisc add dev "$dev" parent 1:1 handle 10: red limit "$bcap" \
                min "$bmin" max "$bmax" avpkt 1500 burst $(((2 * bmin + bmax) / (3 * 1500) + 1)) \
                probability "$bn_maxp" bandwidth "$tc_rate" ecn 2>&1); then
            bn_kind="tbf $tc_rate + red ecn"
        elif e2=$(ip netns exec "$NS" tc qdisc add dev "$dev" parent 1:1 handle 10: fq_codel ecn 2>&1); then
            bn_kind="tbf $tc_rate + fq_codel ecn"
        else
            tc_err="red: $e; fq_codel: $e2"
            for d in ta tb; do ip netns exec "$NS" tc qdisc del dev "$d" root 2>/dev/null || true; done
            bn_kind=''
            break
        fi
    done
    if [ -z "$bn_kind" ]; then
        vhca_log "no marking qdisc in this kernel ($tc_err): ecn-switch, a userspace RED/ECN switch, replaces br0"
        if [ -z "$ecn_switch_bin" ]; then
            ecn_switch_bin=$(vhca_build_test_bin ecn-switch) || exit 1
        fi
        [ -x "$ecn_switch_bin" ] || vhca_die "no ecn-switch binary at $ecn_switch_bin"
        ip -n "$NS" link set ta nomaster && ip -n "$NS" link set tb nomaster ||
            vhca_die "cannot take ta, tb off br0"
        rm -f "$out/ecn-switch.ready" "$out/ecn-switch.stats"
        ip netns exec "$NS" "$ecn_switch_bin" --port ta --port tb --rate "$bn_rate" --min "$bn_min" \
            --max "$bn_max" --max-p "$bn_maxp" --cap "$bn_cap" --stats "$out/ecn-switch.stats" \
            --series "$out/ecn-switch.series" --ready "$out/ecn-switch.ready" >"$out/ecn-switch.log" 2>&1 &
        bn_pid=$!
        for _ in $(seq 100); do
            [ -e "$out/ecn-switch.ready" ] && break
            kill -0 "$bn_pid" 2>/dev/null || break
            sleep 0.1
        done
        [ -e "$out/ecn-switch.ready" ] || { cat "$out/ecn-switch.log" >&2; vhca_die "ecn-switch did not start"; }
        bn_kind="ecn-switch $bn_rate"
    fi
    vhca_log "bottleneck: $bn_kind, RED $bn_min..$bn_max max_p $bn_maxp cap $bn_cap, both directions"
fi
[ -z "$capture" ] || vhca_netns_capture "$NS" br0 "$capture" 'udp port 4791'
if [ -n "$capture_taps" ]; then
    # After br0's: vhca_netns_capture sets VHCA_CAPTURE_PID, kept for br0's.
    rm -f "$capture_taps"
    ip netns exec "$NS" dumpcap -q -i ta -s 96 -f 'udp port 4791' -i tb -s 96 -f 'udp port 4791' \
        -w "$capture_taps" 2>"$capture_taps.log" &
    taps_pid=$!
    for _ in $(seq 100); do
        [ -s "$capture_taps" ] && break
        kill -0 "$taps_pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$capture_taps" ] || { cat "$capture_taps.log" >&2; vhca_die "dumpcap did not start capturing on ta, tb in $NS"; }
fi
echo "$NS" >"$out/netns"
lmsg=''
[ "$loss" = 0 ] || lmsg=", random loss $loss %"
vhca_log "namespace $NS: br0, ta (A: $side_a), tb (B: $side_b)$lmsg"

# --- devices -----------------------------------------------------------------
# side_opts X KIND TAP MAC: sets VM_NIC to run-vm.sh's NIC options of side X,
# starting its vhca process first for a vhca side.
side_opts() {
    local x=$1 kind=$2 tapn=$3 mac=$4
    if [ "$kind" = rxe ]; then
        VM_NIC=(--tap "$tapn" --mac "$mac")
        return
    fi
    local s="$VHCA_RUN/roce-$$-$x.sock" n="$VHCA_RUN/roce-$$-$x-net.sock"
    socks+=("$s" "$n")
    rm -f "$s" "$n"
    ip netns exec "$NS" "$bin" --socket "$s" --tap "$tapn" --mac "$mac" --vhost-user-net "$n" \
        --log "$vhca_log" "${vhca_args[@]}" >"$out/vhca-$x.log" 2>&1 &
    pids+=($!)
    local p=$! _
    for _ in $(seq 100); do
        [ -S "$s" ] && [ -S "$n" ] && break
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    [ -S "$s" ] && [ -S "$n" ] || { tail -5 "$out/vhca-$x.log" >&2; vhca_die "vhca ($x) did not create its sockets (log: $out/vhca-$x.log)"; }
    VM_NIC=(--vfio-user "$s" --vhost-user-net "$n" --mac "$mac")
}
side_opts a "$side_a" ta 52:54:00:99:00:01
nic_a=("${VM_NIC[@]}")
side_opts b "$side_b" tb 52:54:00:99:00:02
nic_b=("${VM_NIC[@]}")
ndev=${#pids[@]}

# --- guests ------------------------------------------------------------------
vm_opts=(--quiet --timeout "$timeout" --mem "$mem" --netns "$NS")
[ "$any_vhca" = 1 ] && vm_opts+=(--overlay "$out/overlay-vhca")
vm_opts+=("${extra_ov[@]}")
[ "$verbose" = 1 ] && vm_opts+=(--verbose)
"$VHCA_IMAGES/run-vm.sh" "${vm_opts[@]}" --overlay "$out/overlay-a" --name roce-a \
    --log "$out/console-a.log" "${nic_a[@]}" --ip 10.99.0.1/24 -- "$server_cmd" \
    2>"$out/run-vm-a.err" &
vm_a=$!
pids+=("$vm_a")
vm_b=
if [ "$single" = 0 ]; then
    # B boots once A's server listens (the tools' clients do not retry).
    vhca_wait_ready "$out/console-a.log" "$vm_a" "$timeout" "$ready" || true
    "$VHCA_IMAGES/run-vm.sh" "${vm_opts[@]}" --overlay "$out/overlay-b" --name roce-b \
        --log "$out/console-b.log" "${nic_b[@]}" --ip 10.99.0.2/24 -- "$client_cmd" \
        2>"$out/run-vm-b.err" &
    vm_b=$!
    pids+=("$vm_b")
fi

rc_a=0 rc_b=0
wait "$vm_a" || rc_a=$?
[ -z "$vm_b" ] || wait "$vm_b" || rc_b=$?
pids=("${pids[@]:0:$ndev}")   # the VMs are gone; stop the rest
cleanup

show() { # NAME LOG
    echo "=== $1 ==="
    tr -d '\r' <"$2" | sed -n '/vhca-init: ready at/,/vhca-init: command done/p' |
        sed '1d;/vhca-init: command done/d'
    tr -d '\r' <"$2" | grep -E 'roce-hook:|vhca-vm:|vhca-share:|Oops|BUG:|WARNING:|Call Trace' || true
}
show "A ($side_a, server, exit $rc_a)" "$out/console-a.log"
[ "$single" = 1 ] || show "B ($side_b, client, exit $rc_b)" "$out/console-b.log"
vhca_log "logs in $out (console-a.log console-b.log${capture:+; capture $capture})"
if [ "$rc_a" != 0 ]; then exit "$rc_a"; fi
exit "$rc_b"
