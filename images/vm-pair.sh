#!/bin/bash
# images/vm-pair.sh — two guests, each with its own vhca device, on one fabric:
# run a server command in guest A and a client command in guest B.
#
# Usage: images/vm-pair.sh [OPTIONS] [--] SERVER_CMD CLIENT_CMD
#
# What it does:
#   - builds (or reuses, all cached by content) the vhca binary (cargo, in
#     $CARGO_TARGET_DIR, default target/ of the repo), vhca.ko for the guest
#     kernel ($VHCA_CACHE/kmod-<key>/) and libvhca
#     (guest-driver/provider/build.sh);
#   - writes a fabric file with two nodes on UDP loopback (a: LID 1, b: LID 2)
#     and starts two vhca processes, each on its own vfio-user socket under
#     $VHCA_CACHE/run;
#   - boots guest A (10.99.0.1) and, once A's server is ready (its console
#     matches --ready), guest B (10.99.0.2), each with its device, an overlay holding vhca.ko,
#     libvhca-rdmav34.so, /etc/libibverbs.d/vhca.driver and an init hook that
#     loads ib_core, ib_uverbs and vhca and waits for the port to be ACTIVE,
#     and a virtio NIC pair on -netdev dgram for the tools' out-of-band
#     exchange. In the guests, $SERVER_IP, $CLIENT_IP and $PEER_IP are set;
#   - runs SERVER_CMD in A and CLIENT_CMD in B, waits for both, and prints
#     each command's output (the console between /init's "ready" and
#     "command done" lines);
#   - tears everything down on any exit (QEMUs, vhca processes, sockets).
#
# Options:
#   --out DIR         keep console logs, vhca logs and the fabric file in DIR
#                     (default: a new $VHCA_CACHE/run/pair.XXXXXX, kept)
#   --timeout S       per-guest timeout (default 300)
#   --vhca BIN        use this vhca binary instead of building one
#   --vhca-log LEVEL  vhca --log level (default info)
#   --vhca-arg ARG    extra vhca argument, both devices (repeatable)
#   --verbose         full guest kernel log on the consoles
#   --overlay DIR     one more overlay for both guests (repeatable; run-vm.sh)
#   --share DIR       share the host folder DIR read-write with both guests
#                     at /share (run-vm.sh --share, virtio-9p)
#   --single          boot guest A only: B's device runs without a guest (the
#                     peer end of A's fabric), CLIENT_CMD is not run
#   --client-reboot   guest B may reboot (run-vm.sh --reboot): each boot runs
#                     CLIENT_CMD again; B is stopped once A's command ends,
#                     and the pair's status is A's alone
#   --fabric-top TOML lines at the top of the fabric file (e.g. a P_Key table
#                     for both nodes: 'pkeys = ["0xffff", "0x8001"]', AD-05)
#   --node-toml N:LINE  one more TOML line in node N's table (N: a or b;
#                     repeatable), e.g. 'b:lmc = 1': b owns LIDs 2 and 3
#                     (AD-01, the APM test's second path; a's LID 1 can
#                     have no LMC: a base LID is a multiple of 2^lmc)
#   --ready REGEX     start guest B once guest A's console matches REGEX
#                     (grep -E; default: what ibv_*_pingpong and perftest
#                     servers print just before they listen: 'local address:|
#                     Waiting for client'); '' = once A's /init is ready
#   --release R       both guests run Debian release R: trixie (default, 6.12)
#                     or bookworm (6.1, its own modules and rdma-core 44;
#                     vhca.ko built against its headers in its root, the
#                     provider from its package: --provider-deb is implied)
#   --subnet MODE     a switched subnet (issue 26): a and b on ports 1 and 2
#                     of a 5-port `vhca switch` sw0 (one switch hop between
#                     the guests), a third node c (a vhca process with no
#                     guest, so the subnet has more nodes than guests) on
#                     port 1 of a second switch sw1, and two parallel cables
#                     sw0:4-sw1:4 and sw0:5-sw1:5 (a path to reroute to when
#                     one goes down); switch LIDs 100 and 101 in static mode;
#                     the fabric file's `subnet = "MODE"`: sm (the ports wait
#                     in Init for a subnet manager, e.g. OpenSM in guest A) or
#                     static; the guests' hook then waits for Init or Active
#   --provider-deb    install libvhca from the Debian package
#                     (guest-driver/provider/package.sh --release R) with the
#                     guest's busybox dpkg (the guests have no apt), instead
#                     of copying build.sh's library into the overlay
#
# Exit status: 0 if both commands exit 0; else the server's status if it
# failed, else the client's; 124 on a guest timeout (as run-vm.sh).
#
# Example:
#   images/vm-pair.sh 'ibv_rc_pingpong -d vhca0 -g 0 -n 10' \
#                     'ibv_rc_pingpong -d vhca0 -g 0 -n 10 $SERVER_IP'
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out='' timeout=300 bin='' vhca_log=info verbose=0 client_reboot=0
ready='local address:|Waiting for client' release=trixie provider_deb=0
vhca_args=() extra_ov=() fab_top='' node_a_toml='' node_b_toml='' subnet='' single=0
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) need "$@"; out=$2; shift 2;;
        --timeout) need "$@"; timeout=$2; shift 2;;
        --vhca) need "$@"; bin=$2; shift 2;;
        --vhca-log) need "$@"; vhca_log=$2; shift 2;;
        --vhca-arg) need "$@"; vhca_args+=("$2"); shift 2;;
        --verbose) verbose=1; shift;;
        --client-reboot) client_reboot=1; shift;;
        --ready) need "$@"; ready=$2; shift 2;;
        --release) need "$@"; release=$2; shift 2;;
        --provider-deb) provider_deb=1; shift;;
        --subnet) need "$@"; subnet=$2; shift 2
            case "$subnet" in sm|static) ;; *) vhca_die "--subnet: sm or static";; esac;;
        --fabric-top) need "$@"; fab_top=$2; shift 2;;
        --node-toml) need "$@"
            case "$2" in
                a:*) node_a_toml+="${2#a:}"$'\n';;
                b:*) node_b_toml+="${2#b:}"$'\n';;
                *) vhca_die "--node-toml: a:LINE or b:LINE";;
            esac
            shift 2;;
        --overlay) need "$@"; extra_ov+=(--overlay "$(realpath "$2")"); shift 2;;
        --share) need "$@"; [ -d "$2" ] || vhca_die "--share $2: not a directory"
            extra_ov+=(--share "$(realpath "$2")"); shift 2;;
        --single) single=1; shift;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; break;;
        -*) vhca_die "unknown option $1 (try --help)";;
        *) break;;
    esac
done
[ $# -eq 2 ] || vhca_die "need SERVER_CMD and CLIENT_CMD (try --help)"
server_cmd=$1 client_cmd=$2
vhca_need_root

# --- builds ------------------------------------------------------------------
"$VHCA_IMAGES/host-root.sh" >/dev/null
case "$release" in
    trixie) kroot='';;
    bookworm) kroot=$("$VHCA_IMAGES/distro-root.sh" bookworm); provider_deb=1;;
    *) vhca_die "--release: trixie or bookworm";;
esac
GUEST=$("$VHCA_IMAGES/guest.sh" --release "$release")
K=$(cat "$GUEST/kver")

[ -n "$bin" ] || bin=$(vhca_build_vhca)
[ -x "$bin" ] || vhca_die "no vhca binary at $bin"

KO=$(vhca_build_module "$K" "$kroot")
if [ "$provider_deb" = 1 ]; then
    DEB=$("$VHCA_REPO/guest-driver/provider/package.sh" --release "$release")
else
    PROV=$("$VHCA_REPO/guest-driver/provider/build.sh")
    SO=$(ls "$PROV"/libvhca-rdmav*.so)
fi

# --- run folder, fabric, overlay ---------------------------------------------
mkdir -p "$VHCA_RUN"
if [ -z "$out" ]; then
    out=$(mktemp -d "$VHCA_RUN/pair.XXXXXX")
else
    mkdir -p "$out"
    out=$(realpath "$out")
fi
sock_a="$VHCA_RUN/pair-$$-a.sock" sock_b="$VHCA_RUN/pair-$$-b.sock"
sock_c="$VHCA_RUN/pair-$$-c.sock"
base=$((20000 + RANDOM % 20000))
fab_a=$base fab_b=$((base + 1)) net_a=$((base + 2)) net_b=$((base + 3))
fab_c=$((base + 4)) fab_sw=$((base + 5))   # sw0's ports: fab_sw .. fab_sw + 4
fab_sw1=$((base + 10))                      # sw1's ports: fab_sw1 .. fab_sw1 + 4
top=$fab_top
[ -n "$subnet" ] && top="subnet = \"$subnet\""$'\n'"$fab_top"
cat >"$out/fabric.toml" <<EOF
$top

[[node]]
name = "a"
lid = 1
guid = "0x0200000000000a01"
address = "127.0.0.1:$fab_a"
$node_a_toml
[[node]]
name = "b"
lid = 2
guid = "0x0200000000000a02"
address = "127.0.0.1:$fab_b"
$node_b_toml
EOF
if [ -n "$subnet" ]; then
    cat >>"$out/fabric.toml" <<EOF
[[node]]
name = "c"
lid = 3
guid = "0x0200000000000a03"
address = "127.0.0.1:$fab_c"

[[switch]]
name = "sw0"
guid = "0x0200000000000b00"
ports = 5
address = "127.0.0.1:$fab_sw"
lid = 100

[[switch]]
name = "sw1"
guid = "0x0200000000000b01"
ports = 5
address = "127.0.0.1:$fab_sw1"
lid = 101

[[link]]
ends = ["a", "sw0:1"]

[[link]]
ends = ["b", "sw0:2"]

[[link]]
ends = ["c", "sw1:1"]

[[link]]
ends = ["sw0:4", "sw1:4"]

[[link]]
ends = ["sw0:5", "sw1:5"]
EOF
fi

ov="$out/overlay"
rm -rf "$ov"
# With --subnet sm a port waits in Init for the SM: the hook waits for that.
want=ACTIVE
[ "$subnet" = sm ] && want='INIT|ACTIVE'
if [ "$provider_deb" = 1 ]; then
    vhca_guest_overlay "$ov" "$K" "$KO" '' '' "$want"
    # The package, installed by the guest's busybox dpkg before the vhca hook.
    # Its dependency (the guest's libibverbs1) is in the image, not in a dpkg
    # database the guest does not have: hence -F depends.
    mkdir -p "$ov/root" "$ov/var/lib/dpkg/info"
    : >"$ov/var/lib/dpkg/status"
    cp "$DEB" "$ov/root/"
    cat >"$ov/etc/vhca-init.d/40-provider-deb.sh" <<'EOF'
# vm-pair.sh --provider-deb: install libvhca's package.
if dpkg -i -F depends /root/ibverbs-provider-vhca_*.deb >/tmp/dpkg.log 2>&1; then
    echo "vhca-hook: installed $(basename /root/ibverbs-provider-vhca_*.deb)"
else
    echo "vhca-hook: dpkg -i failed:"; cat /tmp/dpkg.log
fi
EOF
else
    vhca_guest_overlay "$ov" "$K" "$KO" "$SO" "$PROV/vhca.driver" "$want"
fi
cat >"$ov/etc/vhca-init.d/51-pair.sh" <<'EOF'
# vm-pair.sh: the addresses of the guests' virtio-net link.
export SERVER_IP=10.99.0.1 CLIENT_IP=10.99.0.2
case "$(hostname)" in *-a) PEER_IP=$CLIENT_IP;; *) PEER_IP=$SERVER_IP;; esac
export PEER_IP
EOF

# --- teardown ----------------------------------------------------------------
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -f "$sock_a" "$sock_b" "$sock_c"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- devices -----------------------------------------------------------------
start_vhca() { # NODE SOCKET
    "$bin" --socket "$2" --fabric "$out/fabric.toml" --node "$1" --log "$vhca_log" \
        "${vhca_args[@]}" >"$out/vhca-$1.log" 2>&1 &
    pids+=($!)
}
start_vhca a "$sock_a"
start_vhca b "$sock_b"
if [ -n "$subnet" ]; then
    start_vhca c "$sock_c"
    for sw in sw0 sw1; do
        "$bin" switch --fabric "$out/fabric.toml" --switch "$sw" --log "$vhca_log" \
            >"$out/switch-$sw.log" 2>&1 &
        pids+=($!)
    done
fi
for _ in $(seq 100); do [ -S "$sock_a" ] && [ -S "$sock_b" ] && break; sleep 0.1; done
[ -S "$sock_a" ] && [ -S "$sock_b" ] || vhca_die "vhca did not create its sockets (logs: $out/vhca-*.log)"

# --- guests ------------------------------------------------------------------
vm_opts=(--quiet --release "$release" --timeout "$timeout" --overlay "$ov" "${extra_ov[@]}")
[ "$verbose" = 1 ] && vm_opts+=(--verbose)
b_opts=()
[ "$client_reboot" = 1 ] && b_opts+=(--reboot)
"$VHCA_IMAGES/run-vm.sh" "${vm_opts[@]}" --name vhca-a --log "$out/console-a.log" \
    --vfio-user "$sock_a" --net "$net_a:$net_b" --ip 10.99.0.1/24 -- "$server_cmd" \
    2>"$out/run-vm-a.err" &
vm_a=$!
pids+=("$vm_a")
vm_b=
if [ "$single" = 0 ]; then
    # B boots once A's server listens (the tools' clients do not retry).
    vhca_wait_ready "$out/console-a.log" "$vm_a" "$timeout" "$ready" || true
    "$VHCA_IMAGES/run-vm.sh" "${vm_opts[@]}" --name vhca-b --log "$out/console-b.log" \
        --vfio-user "$sock_b" --net "$net_b:$net_a" --ip 10.99.0.2/24 "${b_opts[@]}" -- "$client_cmd" \
        2>"$out/run-vm-b.err" &
    vm_b=$!
    pids+=("$vm_b")
fi

rc_a=0 rc_b=0
wait "$vm_a" || rc_a=$?
if [ -z "$vm_b" ]; then
    :
elif [ "$client_reboot" = 1 ]; then
    # B boots again after every run of its command: stop it now A is done.
    kill -TERM "$vm_b" 2>/dev/null || true
    wait "$vm_b" 2>/dev/null || true
else
    wait "$vm_b" || rc_b=$?
fi
pids=("${pids[@]:0:$((${#pids[@]} - 2 + single))}")   # the VMs are gone; stop the devices
cleanup
pids=()

show() { # NAME LOG
    echo "=== $1 ==="
    tr -d '\r' <"$2" | sed -n '/vhca-init: ready at/,/vhca-init: command done/p' |
        sed '1d;$d'
    tr -d '\r' <"$2" | grep -E 'vhca-hook:|vhca-vm:|vhca-share:|Oops|BUG:|WARNING:|Call Trace' || true
}
show "A (server, exit $rc_a)" "$out/console-a.log"
[ "$single" = 1 ] || show "B (client, exit $rc_b)" "$out/console-b.log"
vhca_log "logs in $out (console-a.log console-b.log vhca-a.log vhca-b.log${subnet:+ vhca-c.log switch-sw0.log switch-sw1.log})"
if [ "$rc_a" != 0 ]; then exit "$rc_a"; fi
exit "$rc_b"
