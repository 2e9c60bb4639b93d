# shellcheck shell=bash
# images/lib.sh — shared helpers for the images/ scripts (sourced, not run).
#
# Nothing in here changes what host-root.sh or guest.sh build: their cache keys
# are the hashes of those scripts alone, so this file holds only plumbing
# (paths, logging, locking, the chroot runner).

VHCA_IMAGES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VHCA_REPO=$(cd "$VHCA_IMAGES/.." && pwd)
: "${VHCA_CACHE:=/var/cache/vhca}"
VHCA_RUN="$VHCA_CACHE/run"

vhca_log() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }
# vhca_step: a long step with a heartbeat (scripts/heartbeat.sh).
# shellcheck source=../scripts/heartbeat.sh
. "$VHCA_REPO/scripts/heartbeat.sh"
vhca_die() { vhca_log "error: $*"; exit 1; }

vhca_need_root() {
    [ "$(id -u)" -eq 0 ] || vhca_die "must run as root: the tool root (debootstrap, chroot, mount namespaces), TAPs, bridges and network namespaces need it; run it with sudo"
}

# First 16 hex digits of sha256 over the given files' contents.
vhca_hash() { cat "$@" | sha256sum | cut -c1-16; }

# The trixie root this checkout's host-root.sh builds (may not exist yet).
vhca_root_key() { vhca_hash "$VHCA_IMAGES/host-root.sh"; }
vhca_root_dir() { echo "$VHCA_CACHE/root-$(vhca_root_key)"; }

# A root of another Debian release (bookworm, sid: images/distro-root.sh),
# keyed by that script and the suite, so host-root.sh's key never moves.
vhca_distro_root_dir() {
    echo "$VHCA_CACHE/distro-$1-$( (cat "$VHCA_IMAGES/distro-root.sh"; echo "$1") | sha256sum | cut -c1-16)"
}

# Make sure the root exists (builds it on first use) and print its path.
vhca_ensure_root() {
    local r; r=$(vhca_root_dir)
    if [ ! -e "$r/.vhca-root-complete" ]; then
        "$VHCA_IMAGES/host-root.sh" >/dev/null || vhca_die "host-root.sh failed"
    fi
    echo "$r"
}

# vhca_chroot ROOT CMD... — run CMD inside ROOT in a private mount namespace.
# /proc, /sys, /dev (+pts, shm) are mounted inside; the cache folder
# ($VHCA_CACHE, which holds the run folder for sockets, the guest images and the
# per-VM temp dirs), the repository and every path in $VHCA_BIND (space
# separated) are bind-mounted at the same path. All mounts live in a namespace
# made by `unshare -m`, so they vanish when CMD exits, however it exits; the
# host's mount table is never touched. The process chain execs down to CMD, so
# its pid is CMD's pid (signals and `timeout` reach it directly).
# The working directory is kept when it is visible inside, else it is /.
vhca_chroot() {
    vhca_chroot_cmd "$@"
    "${VHCA_CHROOT_CMD[@]}"
}

# vhca_chroot_cmd ROOT CMD... — only build that command line, into the array
# VHCA_CHROOT_CMD, for callers that exec it or run it under timeout(1).
vhca_chroot_cmd() {
    local root=$1; shift
    [ -d "$root" ] || vhca_die "no root at $root"
    mkdir -p "$VHCA_RUN"
    local binds="$VHCA_CACHE $VHCA_REPO ${VHCA_BIND:-}"
    local cwd; cwd=$(pwd -P)
    # shellcheck disable=SC2016
    VHCA_CHROOT_CMD=(unshare -m --propagation private -- /bin/bash -c '
        set -e
        root=$1 binds=$2 cwd=$3; shift 3
        mount -t proc proc "$root/proc"
        mount --rbind /sys "$root/sys"
        mount --make-rslave "$root/sys"
        mount --rbind /dev "$root/dev"
        mount --make-rslave "$root/dev"
        for b in $binds; do
            [ -e "$b" ] || continue
            case "$b" in "$root"|"$root"/*) continue;; esac
            mkdir -p "$root$b"
            mount --bind "$b" "$root$b"
        done
        inside=/
        for b in $binds; do
            case "$cwd/" in "$b"/*) inside=$cwd;; esac
        done
        exec chroot "$root" /usr/bin/env -i \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
            ${VHCA_ENV:-} \
            /bin/sh -c "cd \"\$1\" 2>/dev/null || cd /; shift; exec \"\$@\"" sh "$inside" "$@"
    ' vhca-chroot "$root" "$binds" "$cwd" "$@")
}

# The vhca binary, optimised, in $CARGO_TARGET_DIR (default: the repo's
# target/); prints its path.
vhca_build_vhca() {
    local target=${CARGO_TARGET_DIR:-$VHCA_REPO/target}
    # cargo's own progress on stderr (nothing when it is up to date).
    (cd "$VHCA_REPO" && CARGO_TARGET_DIR=$target vhca_step "cargo build --release vhca" \
        "seconds when up to date, ~4 min from scratch (fat LTO on 2 CPUs)" - \
        cargo build --release -p device --bin vhca) || vhca_die "cargo build failed"
    echo "$target/release/vhca"
}

# vhca_build_test_bin BIN — one of the test tools in tests/src/bin (fabric-driver,
# ecn-switch), optimised with the tests' `vhca-test` profile (Cargo.toml: no
# fat-LTO link, the dependencies' builds shared with cargo-test's), in
# $CARGO_TARGET_DIR (default: the repo's target/); prints its path.
vhca_build_test_bin() {
    local target=${CARGO_TARGET_DIR:-$VHCA_REPO/target}
    (cd "$VHCA_REPO" && CARGO_TARGET_DIR=$target vhca_step "cargo build --profile vhca-test $1" \
        "seconds when up to date, ~1 min from scratch" - \
        cargo build --profile vhca-test -p vhca-tests --bin "$1") || vhca_die "cargo build of $1 failed"
    echo "$target/vhca-test/$1"
}

# vhca_guest_overlay OV K KO SO DRIVER_FILE WANT — an initramfs overlay in OV
# with vhca.ko (for kernel K), the provider library SO and its .driver file
# (SO and DRIVER_FILE empty: the caller installs the provider otherwise, e.g.
# vm-pair.sh --provider-deb), and a boot hook that loads the RDMA core and vhca and waits (20 s at most)
# until port 1's state matches the regex WANT (e.g. ACTIVE, or INIT|ACTIVE
# where a subnet manager is still to come).
vhca_guest_overlay() {
    local ov=$1 k=$2 ko=$3 so=$4 drv=$5 want=$6
    mkdir -p "$ov/lib/modules/$k/extra" "$ov/usr/lib/x86_64-linux-gnu/libibverbs" \
        "$ov/etc/libibverbs.d" "$ov/etc/vhca-init.d"
    cp "$ko" "$ov/lib/modules/$k/extra/vhca.ko"
    if [ -n "$so" ]; then
        cp "$so" "$ov/usr/lib/x86_64-linux-gnu/libibverbs/"
        cp "$drv" "$ov/etc/libibverbs.d/vhca.driver"
    fi
    echo "VHCA_HOOK_WANT='$want'" >"$ov/etc/vhca-hook.env"
    cat >"$ov/etc/vhca-init.d/50-vhca.sh" <<'EOF'
# images/lib.sh vhca_guest_overlay: load the RDMA core, user verbs and vhca;
# wait for the port.
. /etc/vhca-hook.env
modprobe -a ib_core ib_uverbs vhca || echo "vhca-hook: modprobe failed"
i=0 st=
while [ $i -lt 200 ]; do
    st=$(cat /sys/class/infiniband/vhca0/ports/1/state 2>/dev/null) || st=
    echo "$st" | grep -Eq "$VHCA_HOOK_WANT" && break
    sleep 0.1
    i=$((i + 1))
done
echo "vhca-hook: vhca0 port 1: ${st:-absent}, lid $(cat /sys/class/infiniband/vhca0/ports/1/lid 2>/dev/null)"
EOF
}

# vhca.ko for guest kernel release $1, built inside root $2 (default: the
# host tool root; images/distro-root.sh makes bookworm's and sid's) in a copy
# keyed by its sources and the release (the checkout stays clean, an unchanged
# driver is not rebuilt); prints its path. W=1, and a warning fails the build.
vhca_build_module() {
    local K=$1 root=${2:-} kdir="$VHCA_REPO/guest-driver/kernel" key dir tmp
    key=$( (cat "$kdir"/*.[ch] "$kdir/Kbuild" "$VHCA_REPO/guest-driver/include/vhca_abi.h"; echo "$K") |
        sha256sum | cut -c1-16)
    dir="$VHCA_CACHE/kmod-$key"
    if [ ! -e "$dir/vhca.ko" ]; then
        tmp="$dir.tmp.$$"
        rm -rf "$tmp"
        mkdir -p "$tmp/src/kernel" "$tmp/src/include"
        cp "$kdir"/*.[ch] "$kdir/Kbuild" "$tmp/src/kernel/"
        cp "$VHCA_REPO/guest-driver/include/vhca_abi.h" "$tmp/src/include/"
        local run=("$VHCA_IMAGES/in-root.sh")
        [ -z "$root" ] || run=(vhca_chroot "$root")
        vhca_step "make vhca.ko for $K" "~1 min" "$tmp/build.log" \
            "${run[@]}" make -C "/lib/modules/$K/build" M="$tmp/src/kernel" W=1 ||
            { cat "$tmp/build.log" >&2; vhca_die "vhca.ko build failed ($K)"; }
        if grep -q 'warning:' "$tmp/build.log"; then
            cat "$tmp/build.log" >&2
            vhca_die "warnings building vhca.ko ($K)"
        fi
        mv "$tmp/src/kernel/vhca.ko" "$tmp/vhca.ko"
        rm -rf "$tmp/src" "$dir"
        mv "$tmp" "$dir"
    fi
    echo "$dir/vhca.ko"
}

# --- private test networks ---------------------------------------------------
# Guests that talk Ethernet (RoCEv2, iperf3) do it on a Linux bridge inside a
# network namespace the script creates for itself: nothing on it is routed or
# bridged to the host's own interfaces, so no frame ever leaves the namespace.
# QEMU and vhca processes run under `ip netns exec NS` (run-vm.sh --netns NS),
# open their TAP devices there, and vanish with the namespace's teardown.

# vhca_netns_check — the host has what private networks need: iproute2,
# /dev/net/tun, bridges and nft's bridge family (nftables is installed with
# scripts/lib.sh's apt_install when missing). Probed in a throwaway namespace.
vhca_netns_check() {
    command -v ip >/dev/null || vhca_die "no ip (iproute2)"
    [ -c /dev/net/tun ] || vhca_die "no /dev/net/tun (tun driver) on this host"
    if ! command -v nft >/dev/null; then
        # shellcheck disable=SC1091  # scripts/lib.sh, for apt_install
        . "$VHCA_REPO/scripts/lib.sh"
        apt_install nftables
    fi
    local ns="vhca-probe-$$-$RANDOM" ok=1
    ip netns add "$ns" || vhca_die "ip netns add failed (network namespaces)"
    ip -n "$ns" link add vp0 type bridge 2>/dev/null || ok=0
    [ "$ok" = 1 ] || { ip netns del "$ns"; vhca_die "the host kernel cannot make bridges"; }
    ip -n "$ns" tuntap add dev vp1 mode tap 2>/dev/null || ok=0
    [ "$ok" = 1 ] || { ip netns del "$ns"; vhca_die "the host kernel cannot make tap devices"; }
    ip netns exec "$ns" nft add table bridge vhca_probe 2>/dev/null || ok=0
    ip netns del "$ns"
    [ "$ok" = 1 ] || vhca_die "nft has no bridge family on this host (nf_tables_bridge)"
}

# vhca_netns_create PREFIX — a new namespace named PREFIX-<pid>-<random>, with
# lo up and a bridge br0 (no STP, no forwarding delay, no multicast snooping,
# no IPv6 of its own) up; sets VHCA_NETNS to its name.
vhca_netns_create() {
    local ns="$1-$$-$RANDOM"
    ip netns add "$ns" || vhca_die "ip netns add $ns failed"
    # shellcheck disable=SC2034  # for the caller
    VHCA_NETNS=$ns
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 >/dev/null
    ip -n "$ns" link add br0 type bridge stp_state 0 forward_delay 0 mcast_snooping 0 ||
        vhca_die "cannot add a bridge in $ns"
    ip -n "$ns" link set br0 up
}

# vhca_netns_tap NS NAME — a persistent TAP device NAME in NS, on br0, up.
vhca_netns_tap() {
    ip -n "$1" tuntap add dev "$2" mode tap || vhca_die "cannot add tap $2 in $1"
    ip -n "$1" link set "$2" master br0 up || vhca_die "cannot bridge tap $2 in $1"
}

# vhca_netns_loss NS PCT — drop PCT % of the frames br0 forwards (either
# direction), at random: table bridge vhca_loss, chain loss, on the bridge
# forward hook; the rule counts what it drops (vhca_netns_loss_count).
vhca_netns_loss() {
    ip netns exec "$1" nft -f - <<NFT || vhca_die "cannot add the nft loss rule in $1"
table bridge vhca_loss {
    chain loss {
        type filter hook forward priority 0; policy accept;
        numgen random mod 100 < $2 counter drop
    }
}
NFT
}

# vhca_netns_loss_count NS — "PACKETS" the loss rule dropped so far (empty if none).
vhca_netns_loss_count() {
    ip netns exec "$1" nft list chain bridge vhca_loss loss 2>/dev/null |
        sed -n 's/.*counter packets \([0-9]*\) .*/\1/p' | head -1
}

# vhca_netns_capture NS IFACE FILE FILTER — capture IFACE (br0 sees every
# forwarded frame: it is promiscuous while captured) into FILE (pcap) with the
# BPF FILTER, in the background, with dumpcap (installed with tshark); waits
# (bounded) until it writes, sets VHCA_CAPTURE_PID. Stop it with
# vhca_netns_capture_stop (SIGINT, so the file is flushed).
vhca_netns_capture() {
    local ns=$1 ifc=$2 file=$3 filter=$4
    command -v dumpcap >/dev/null || vhca_die "no dumpcap (install tshark: scripts/lib.sh ensure_tshark)"
    rm -f "$file"
    ip netns exec "$ns" dumpcap -q -P -i "$ifc" -f "$filter" -w "$file" 2>"$file.log" &
    VHCA_CAPTURE_PID=$!
    local _
    for _ in $(seq 100); do
        [ -s "$file" ] && return 0
        kill -0 "$VHCA_CAPTURE_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$file.log" >&2
    vhca_die "dumpcap did not start capturing on $ifc in $ns"
}
vhca_netns_capture_stop() {
    [ -n "${VHCA_CAPTURE_PID:-}" ] || return 0
    kill -INT "$VHCA_CAPTURE_PID" 2>/dev/null || true
    local _
    for _ in $(seq 50); do kill -0 "$VHCA_CAPTURE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$VHCA_CAPTURE_PID" 2>/dev/null || true
    wait "$VHCA_CAPTURE_PID" 2>/dev/null || true
    VHCA_CAPTURE_PID=
}

# vhca_netns_delete NS — end whatever still runs in NS (only this script's own
# processes can be there: the namespace is private to it), then delete it;
# its bridge and TAP devices go with it. Bounded: TERM, 5 s, KILL.
vhca_netns_delete() {
    local ns=$1 p _
    [ -n "$ns" ] && [ -e "/run/netns/$ns" ] || return 0
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
}

# vhca_mac PREFIX WORD — a locally stable unicast MAC PREFIX:xx:yy (PREFIX =
# four octets, e.g. 52:54:00:57) from the checksum of WORD.
vhca_mac() {
    local c; c=$(printf '%s' "$2" | cksum | cut -d' ' -f1)
    printf '%s:%02x:%02x\n' "$1" $((c >> 8 & 255)) $((c & 255))
}

# vhca_accel — QEMU's accelerator for the guests and why, one line on stdout
# ("kvm REASON" or "tcg REASON"): kvm when a guest really runs under /dev/kvm
# here, else tcg. VHCA_ACCEL=kvm|tcg
# forces it; auto (the default) probes once per host boot and guest kernel:
# the guest's kernel is booted under KVM (no devices, /init's first line is
# proof enough), because opening /dev/kvm, or even running firmware under it,
# proves nothing on a host whose KVM runs only some guests (a PVM host: the
# firmware runs, the kernel stops with "KVM internal error"). The probe's
# console stays in $VHCA_RUN.
vhca_accel() {
    case "${VHCA_ACCEL:-auto}" in
        kvm|tcg) echo "$VHCA_ACCEL (VHCA_ACCEL=$VHCA_ACCEL)"; return 0;;
        auto) ;;
        *) vhca_die "VHCA_ACCEL=$VHCA_ACCEL: kvm, tcg or auto";;
    esac
    if [ ! -c /dev/kvm ]; then echo 'tcg (no /dev/kvm)'; return 0; fi
    if ! { : <>/dev/kvm; } 2>/dev/null; then
        echo 'tcg (/dev/kvm is not readable and writable by this user)'; return 0
    fi
    local guest root key memo log qp i verdict='' why
    root=$(vhca_ensure_root)
    guest=$("$VHCA_IMAGES/guest.sh") || vhca_die "guest.sh failed"
    key=$( { cat /proc/sys/kernel/random/boot_id; echo "$guest"; } | sha256sum | cut -c1-16)
    mkdir -p "$VHCA_RUN"
    memo="$VHCA_RUN/.accel-$key"
    if [ -s "$memo" ]; then
        cat "$memo"
        return 0
    fi
    # A log of this probe's own: two guests of a pair may probe at once.
    log="$VHCA_RUN/accel-probe-$key.$$.log"
    : >"$log"
    # The command itself in the background, not the function that runs it:
    # $! is then QEMU's own pid (unshare, chroot, env and sh each exec the
    # next) and the kill below ends it, whether or not bash execs a
    # backgrounded function's last command.
    vhca_chroot_cmd "$root" qemu-system-x86_64 -accel kvm -cpu host -m 256 -machine q35 -nodefaults \
        -display none -serial "file:$log" -no-reboot -kernel "$guest/vmlinuz" \
        -initrd "$guest/initramfs.cpio" -append 'console=ttyS0 panic=-1 quiet'
    "${VHCA_CHROOT_CMD[@]}" >"$log.qemu" 2>&1 &
    qp=$!
    for i in $(seq 300); do
        if grep -q 'vhca-init: /init started' "$log" 2>/dev/null; then verdict=kvm; break; fi
        if grep -qiE 'KVM internal error|Code=' "$log" "$log.qemu" 2>/dev/null || ! kill -0 "$qp" 2>/dev/null; then
            break
        fi
        sleep 0.1
    done
    kill -TERM "$qp" 2>/dev/null || true
    wait "$qp" 2>/dev/null || true
    # Whatever else still runs this probe's guest (its serial file names
    # it): a fresh-cache suite run ended with such a QEMU left over, paused
    # by KVM's internal error, holding the cache's files.
    pkill -TERM -f -- "file:$log" 2>/dev/null || true
    if [ "$verdict" = kvm ]; then
        why='(/dev/kvm runs the guest)'
    else
        verdict=tcg
        why="(/dev/kvm exists but the guest kernel stops under it; probe console: $log.qemu)"
    fi
    echo "$verdict $why" >"$memo"
    cat "$memo"
}

# vhca_wait_ready LOG PID TIMEOUT READY — until guest console LOG shows
# /init's ready line and, READY non-empty, a line after it matching READY
# (grep -E); 1 if PID (the guest's run-vm.sh) ended first or TIMEOUT seconds
# passed. vm-pair.sh and roce-pair.sh boot guest B once A's server listens.
vhca_wait_ready() {
    local log=$1 pid=$2 timeout=$3 ready=$4 _
    for _ in $(seq $((timeout * 10))); do
        if [ -n "$ready" ]; then
            tr -d '\r' 2>/dev/null <"$log" |
                sed -n '/vhca-init: ready at/,$p' | grep -Eq -- "$ready" && return 0
        else
            grep -q 'vhca-init: ready at' "$log" 2>/dev/null && return 0
        fi
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
