#!/bin/bash
# images/run-vm.sh — boot one guest under TCG and run a command in it.
#
# Usage: images/run-vm.sh [OPTIONS] [--] [COMMAND...]
#   COMMAND is a sh script line run by the guest's busybox sh (as with ssh,
#   several words are joined with spaces). Without COMMAND (and without
#   --script) the guest starts an interactive shell (stdin attached).
#
# Options:
#   --vfio-user SOCKET  attach a vfio-user PCI device served on SOCKET (repeatable).
#                       Paths outside $VHCA_CACHE and the repository are
#                       bind-mounted into the root automatically; $VHCA_CACHE/run
#                       is the intended place.
#   --root-port         put vfio-user devices behind pcie-root-ports (default:
#                       integrated endpoints on pcie.0)
#   --net LPORT:RPORT   virtio-net NIC on -netdev dgram: UDP 127.0.0.1:LPORT ->
#                       127.0.0.1:RPORT (the peer guest uses RPORT:LPORT)
#   --tap IFNAME        virtio-net NIC on the existing TAP device IFNAME
#                       (-netdev tap,ifname=IFNAME,script=no,downscript=no);
#                       with --netns, IFNAME lives in that namespace
#   --vhost-user-net SOCKET
#                       virtio-net NIC whose backend is a vhost-user-net server
#                       already listening on SOCKET (vhca --vhost-user-net: the
#                       guest's NIC shares vhca's RoCE port); QEMU connects as
#                       the client (guest RAM is memfd share=on, as vhost-user
#                       needs). Put SOCKET under $VHCA_CACHE/run like --vfio-user's.
#   --netns NS          run QEMU in the network namespace NS (ip netns exec NS;
#                       NS must exist): its TAP and whatever it reaches live
#                       there. run-vm.sh itself stays in the caller's namespace.
#   --ip ADDR/PREFIX    address of the guest's NIC (with --net, --tap or
#                       --vhost-user-net; at most one of the three)
#   --mac MAC           NIC MAC (default 52:54:00:56:xx:yy from LPORT with --net,
#                       52:54:00:57:xx:yy from the TAP's name or the socket path)
#   --name NAME         guest hostname (default vhca-guest)
#   --overlay DIR       append DIR to the initramfs (repeatable; see guest.sh)
#   --script FILE       run FILE (sh) in the guest instead of COMMAND
#   --timeout SECONDS   kill the VM after this long (default 300; 0 = never)
#   --log FILE          also write the console to FILE (default: in the run dir)
#   --quiet             do not copy the console to stdout
#   --mem SIZE          guest RAM (default 1G; memfd-backed, share=on)
#   --smp N             guest CPUs (default 1)
#   --append ARGS       extra kernel command line
#   --qemu-arg ARG      extra QEMU argument (repeatable, one word each)
#   --qmp SOCKET        QMP monitor on unix SOCKET (server, nowait)
#   --verbose           full kernel log on the console (default: quiet)
#   --shell             interactive shell even with vfio-user etc. (stdin attached)
#   --reboot            let a guest reboot restart the VM (default: QEMU exits on
#                       reboot, -no-reboot); the guest then boots again and runs
#                       COMMAND again, until the timeout or a kill
#   --keep              keep the run dir ($VHCA_CACHE/run/vm.*) afterwards
#   --release RELEASE   the guest's Debian release: trixie (default, 6.12) or
#                       bookworm (6.1 and its own modules; images/guest.sh)
#   --share DIR         share the host folder DIR read-write with the guest
#                       (virtio-9p, QEMU's -virtfs with security_model=none:
#                       files the guest writes belong to the user running
#                       QEMU); the guest mounts it at /share before any other
#                       hook runs and exports VHCA_SHARE=/share
#   --accel auto|kvm|tcg  QEMU's accelerator (default: $VHCA_ACCEL, else auto:
#                       kvm when a guest runs under /dev/kvm here, else tcg;
#                       lib.sh vhca_accel probes once per host boot)
#
# Exit status: the guest command's status (from the marker line
# "VHCA-EXIT-<token>=<status>" that the guest's /init prints); 124 if the
# timeout struck; 125 if QEMU stopped without the marker (crash, panic, boot
# failure). Timing goes to stderr: "run-vm: ready after X s (guest uptime Y s)".
#
# Examples:
#   images/run-vm.sh 'uname -r; lspci -nn'
#   images/run-vm.sh --vfio-user /var/cache/vhca/run/vhca0.sock -- 'lspci -vvv -nn; ibv_devinfo'
#   images/run-vm.sh --quiet --log /tmp/a.log --net 10001:10002 --ip 10.99.0.1/24 -- 'sleep 60' &
#   images/run-vm.sh --quiet --log /tmp/b.log --net 10002:10001 --ip 10.99.0.2/24 -- 'ping -c3 10.99.0.1'
#   images/run-vm.sh --netns vhca-123-4567 --tap ta --ip 10.99.0.1/24 -- 'ip -br addr'
set -euo pipefail
. "$(dirname "$0")/lib.sh"

sockets=() overlays=() qemu_extra=() script='' cmd=''
net='' tap='' vhost_net='' netns='' ip='' mac='' name=vhca-guest timeout=300 log='' quiet=0 mem=1G smp=1
append='' qmp='' verbose=0 shell=0 keep=0 root_port=0 reboot=0 release=trixie share='' accel=${VHCA_ACCEL:-auto}
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --vfio-user) need "$@"; sockets+=("$2"); shift 2;;
        --root-port) root_port=1; shift;;
        --net) need "$@"; net=$2; shift 2;;
        --tap) need "$@"; tap=$2; shift 2;;
        --vhost-user-net) need "$@"; vhost_net=$2; shift 2;;
        --netns) need "$@"; netns=$2; shift 2;;
        --ip) need "$@"; ip=$2; shift 2;;
        --mac) need "$@"; mac=$2; shift 2;;
        --name) need "$@"; name=$2; shift 2;;
        --overlay) need "$@"; overlays+=("$2"); shift 2;;
        --script) need "$@"; script=$2; shift 2;;
        --timeout) need "$@"; timeout=$2; shift 2;;
        --log) need "$@"; log=$2; shift 2;;
        --quiet) quiet=1; shift;;
        --mem) need "$@"; mem=$2; shift 2;;
        --smp) need "$@"; smp=$2; shift 2;;
        --append) need "$@"; append=$2; shift 2;;
        --qemu-arg) need "$@"; qemu_extra+=("$2"); shift 2;;
        --qmp) need "$@"; qmp=$2; shift 2;;
        --verbose) verbose=1; shift;;
        --shell) shell=1; shift;;
        --keep) keep=1; shift;;
        --reboot) reboot=1; shift;;
        --release) need "$@"; release=$2; shift 2;;
        --share) need "$@"; share=$2; shift 2;;
        --accel) need "$@"; accel=$2; shift 2;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; break;;
        -*) vhca_die "unknown option $1 (try --help)";;
        *) break;;
    esac
done
[ $# -gt 0 ] && cmd="$*"
[ -z "$cmd" ] && [ -z "$script" ] && shell=1
nics=0
for n in "$net" "$tap" "$vhost_net"; do [ -z "$n" ] || nics=$((nics + 1)); done
[ "$nics" -le 1 ] || vhca_die "--net, --tap and --vhost-user-net: one NIC only"
[ -z "$ip" ] || [ "$nics" = 1 ] || vhca_die "--ip needs a NIC (--net, --tap or --vhost-user-net)"
[ -z "$netns" ] || [ -e "/run/netns/$netns" ] || vhca_die "--netns $netns: no such network namespace"
if [ -n "$share" ]; then
    [ -d "$share" ] || vhca_die "--share $share: not a directory"
    share=$(realpath "$share")
    case "$share" in *[,[:space:]]*) vhca_die "--share $share: QEMU's -virtfs takes no comma or blank in the path";; esac
fi
case "$accel" in auto|kvm|tcg) ;; *) vhca_die "--accel $accel: auto, kvm or tcg";; esac

vhca_need_root
ROOT=$(vhca_ensure_root)
GUEST=$("$VHCA_IMAGES/guest.sh" --release "$release")
touch "$GUEST/.vhca-guest-complete"

RUN=$(mktemp -d "$VHCA_RUN/vm.XXXXXX")
cleanup() { [ "$keep" = 1 ] || rm -rf "$RUN"; }
trap cleanup EXIT
[ -n "$log" ] || log="$RUN/console.log"
log=$(realpath -m "$log")
mkdir -p "$(dirname "$log")"
: >"$log"
binds=${VHCA_BIND:-}
# Paths QEMU opens must be visible inside the root: bind their folders.
visible() {
    case "$1" in "$VHCA_CACHE"/*|"$VHCA_REPO"/*) ;; *) binds="$binds $(dirname "$1")";; esac
}
visible "$log"

# --- per-run initramfs: base + overlays + the command ----------------------
token=$(tr -d '-' </proc/sys/kernel/random/uuid | cut -c1-12)
i=0
for o in "${overlays[@]}"; do
    [ -d "$o" ] || vhca_die "overlay $o is not a directory"
    d="$RUN/overlay$i"
    mkdir -p "$d"
    cp -a "$o/." "$d/"
    # The initramfs is merged-/usr: a real lib/ would replace the lib -> usr/lib link.
    for t in bin sbin lib lib64; do
        if [ -d "$d/$t" ] && [ ! -L "$d/$t" ]; then
            mkdir -p "$d/usr/$t"
            cp -a "$d/$t/." "$d/usr/$t/"
            rm -rf "${d:?}/$t"
        fi
    done
    i=$((i + 1))
done
if [ -n "$share" ]; then
    # Mounted first (05-): the other hooks and the command may use it.
    d="$RUN/overlay$i"
    mkdir -p "$d/etc/vhca-init.d"
    cat >"$d/etc/vhca-init.d/05-share.sh" <<'EOF'
if modprobe -a 9pnet_virtio 9p && mkdir -p /share &&
    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=none vhcashare /share; then
    export VHCA_SHARE=/share
    echo "vhca-share: host folder mounted at /share"
else
    echo "vhca-share: mounting the host folder failed"
fi
EOF
    i=$((i + 1))
fi
mkdir -p "$RUN/cmd/vhca"
echo "$token" >"$RUN/cmd/vhca/token"
if [ -n "$script" ]; then
    cp "$script" "$RUN/cmd/vhca/cmd"
elif [ "$shell" = 0 ]; then
    printf '%s\n' "$cmd" >"$RUN/cmd/vhca/cmd"
fi
vhca_chroot "$ROOT" sh -ec '
    cd "$1"
    for d in overlay* cmd; do
        [ -d "$d" ] || continue
        (cd "$d" && find . -mindepth 1 | sort | cpio --quiet -o -H newc -R 0:0) >"$d.cpio"
    done' sh "$RUN"
parts=("$GUEST/initramfs.cpio")
for ((j = 0; j < i; j++)); do parts+=("$RUN/overlay$j.cpio"); done
cat "${parts[@]}" "$RUN/cmd.cpio" >"$RUN/initrd.cpio"

# --- QEMU command line -----------------------------------------------------
kcmd="console=ttyS0 panic=-1 oops=panic vhca.hostname=$name"
[ "$verbose" = 1 ] || kcmd="$kcmd quiet loglevel=4"
[ -z "$ip" ] || kcmd="$kcmd vhca.ip=$ip"
[ "$shell" = 0 ] || kcmd="$kcmd vhca.shell=1"
[ -z "$append" ] || kcmd="$kcmd $append"

if [ "$accel" = auto ]; then
    read -r accel why <<<"$(vhca_accel)"
else
    why="(--accel $accel)"
fi
vhca_log "accelerator: $accel $why"
cpu=max
[ "$accel" = tcg ] || cpu=host
# shellcheck disable=SC2054  # commas are QEMU's
q=(qemu-system-x86_64 -accel "$accel" -cpu "$cpu" -smp "$smp" -m "$mem"
   -object "memory-backend-memfd,id=mem,size=$mem,share=on"
   -machine q35,memory-backend=mem
   -nodefaults -nographic
   -chardev "stdio,id=con,mux=on,signal=off,logfile=$log"
   -serial chardev:con
   -fw_cfg name=etc/sercon-port,string=0
   -kernel "$GUEST/vmlinuz" -initrd "$RUN/initrd.cpio" -append "$kcmd")
[ "$reboot" = 1 ] || q+=(-no-reboot)
n=0
for s in "${sockets[@]}"; do
    s=$(realpath -m "$s")
    visible "$s"
    bus=
    if [ "$root_port" = 1 ]; then
        q+=(-device "pcie-root-port,id=rp$n,chassis=$((n + 1)),slot=$n")
        bus=",\"bus\":\"rp$n\""
    fi
    q+=(-device "{\"driver\":\"vfio-user-pci\",\"id\":\"vfu$n\"$bus,\"socket\":{\"path\":\"$s\",\"type\":\"unix\"}}")
    n=$((n + 1))
done
if [ -n "$net" ]; then
    lport=${net%%:*} rport=${net##*:}
    [ -n "$mac" ] || mac=$(printf '52:54:00:56:%02x:%02x' $((lport >> 8 & 255)) $((lport & 255)))
    q+=(-netdev "dgram,id=n0,local.type=inet,local.host=127.0.0.1,local.port=$lport,remote.type=inet,remote.host=127.0.0.1,remote.port=$rport"
        -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=")
elif [ -n "$tap" ]; then
    [ -n "$mac" ] || mac=$(vhca_mac 52:54:00:57 "$tap")
    q+=(-netdev "tap,id=n0,ifname=$tap,script=no,downscript=no"
        -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=")
elif [ -n "$vhost_net" ]; then
    vhost_net=$(realpath -m "$vhost_net")
    visible "$vhost_net"
    [ -n "$mac" ] || mac=$(vhca_mac 52:54:00:57 "$vhost_net")
    q+=(-chardev "socket,id=vn0,path=$vhost_net"
        -netdev "vhost-user,id=n0,chardev=vn0"
        -device "virtio-net-pci,netdev=n0,mac=$mac,romfile=")
fi
if [ -n "$share" ]; then
    binds="$binds $share"
    q+=(-virtfs "local,path=$share,mount_tag=vhcashare,security_model=none,multidevs=remap,id=share0")
fi
if [ -n "$qmp" ]; then
    qmp=$(realpath -m "$qmp")
    visible "$qmp"
    q+=(-qmp "unix:$qmp,server=on,wait=off")
fi
q+=("${qemu_extra[@]}")

VHCA_BIND=$binds vhca_chroot_cmd "$ROOT" "${q[@]}"
cmdline=("${VHCA_CHROOT_CMD[@]}")
# ip netns exec execs the command: the pid stays QEMU's chain (timeout reaches it).
[ -z "$netns" ] || cmdline=(ip netns exec "$netns" "${cmdline[@]}")
if [ "$timeout" != 0 ]; then
    if [ "$shell" = 1 ]; then
        cmdline=(timeout --foreground -k 5 "$timeout" "${cmdline[@]}")
    else
        cmdline=(timeout -k 5 "$timeout" "${cmdline[@]}")
    fi
fi

# --- run ---------------------------------------------------------------------
t0=$(date +%s.%N)
qpid=
on_signal() { [ -n "$qpid" ] && kill -TERM "$qpid" 2>/dev/null; wait "$qpid" 2>/dev/null; exit 130; }
trap on_signal INT TERM HUP
set +e
if [ "$shell" = 1 ]; then
    "${cmdline[@]}"
    qrc=$?
else
    if [ "$quiet" = 1 ]; then
        "${cmdline[@]}" </dev/null >/dev/null 2>"$RUN/qemu.err" &
    else
        "${cmdline[@]}" </dev/null 2>"$RUN/qemu.err" &
    fi
    qpid=$!
    wait "$qpid"
    qrc=$?
fi
set -e
t1=$(date +%s.%N)
# (SeaBIOS's own console is turned off with etc/sercon-port, which QEMU warns about.)
grep -v 'name=etc/sercon-port.*should be prefixed' "$RUN/qemu.err" 2>/dev/null | sed 's/^/run-vm: qemu: /' >&2 || true

clean=$(tr -d '\r' <"$log")
ready=$(printf '%s\n' "$clean" | sed -n 's/.*vhca-init: \/init started at \([0-9.]*\)s$/\1/p' | head -1)
rc=$(printf '%s\n' "$clean" | sed -n "s/.*VHCA-EXIT-$token=\([0-9]*\)\$/\1/p" | tail -1)
wall=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
if [ -n "$ready" ]; then
    vhca_log "/init reached at guest uptime ${ready} s; VM ran ${wall} s in all"
fi
if [ -n "$rc" ]; then
    vhca_log "guest command exit status $rc"
    exit "$rc"
fi
keep=1  # failed: keep the run dir and its console log
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
    vhca_log "timeout after $timeout s (console log: $log)"
    exit 124
fi
if [ "$shell" = 1 ]; then
    exit 0
fi
vhca_log "QEMU exited ($qrc) without the guest's exit marker (console log: $log)"
exit 125
