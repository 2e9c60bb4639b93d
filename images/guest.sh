#!/bin/bash
# images/guest.sh — build (or reuse) the minimal guest and print its folder.
#
# The guest is trixie's kernel (from the host tool root) and a generated
# initramfs: busybox-static, an /init (below), the RDMA tools, iperf3, tcpdump
# and ethtool with their ldd closure, the libibverbs providers and
# /etc/libibverbs.d, and the kernel modules
# for the RDMA core stack and virtio-net (decompressed, depmod'ed).
#
# Output folder $VHCA_CACHE/guest-<key> (default /var/cache/vhca), <key> =
# sha256(this script + the host root's key), built in a temp folder and renamed:
#   vmlinuz          the kernel
#   initramfs.cpio   the initramfs (uncompressed newc cpio)
#   kver             the kernel release ($K, for building modules against it)
#   contents.txt     the initramfs file list
#
# Usage: images/guest.sh [--release RELEASE] [--rebuild]
#   stdout: the guest folder (one line); progress goes to stderr.
#   --release   trixie (default: the host tool root's kernel and userland) or
#               bookworm (Debian 12: its 6.1 kernel, modules, rdma-core 44 and
#               tools, staged from images/distro-root.sh's bookworm root; the
#               same /init, issue 17)
#
# Adding our own files (vhca.ko, libvhca): nothing here is rebuilt for them.
# images/run-vm.sh --overlay DIR appends DIR as one more cpio archive at boot
# (the kernel unpacks concatenated archives in order; later files win). Lay DIR
# out like the guest's / ; top-level bin, sbin, lib, lib64 are folded into usr/
# by run-vm.sh (the initramfs is merged-/usr). For example:
#   DIR/lib/modules/$K/extra/vhca.ko                      (depmod'ed at boot and
#                                       loaded by PCI modalias, or list it in:)
#   DIR/etc/modules.d/vhca                                (module names, one a line)
#   DIR/usr/lib/x86_64-linux-gnu/libibverbs/libvhca-rdmav34.so
#   DIR/etc/libibverbs.d/vhca.driver                      ("driver vhca")
#   DIR/etc/vhca-init.d/NN-name.sh                        (sourced by /init before
#                                                           the command)
set -euo pipefail
. "$(dirname "$0")/lib.sh"

rebuild=0 release=trixie
while [ $# -gt 0 ]; do
    case "$1" in
        --rebuild) rebuild=1; shift;;
        --release) [ $# -ge 2 ] || vhca_die "--release needs an argument"; release=$2; shift 2;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument: $1";;
    esac
done
vhca_need_root
case "$release" in
    trixie) ROOT=$(vhca_ensure_root); RKEY=$(vhca_root_key);;
    bookworm) ROOT=$("$VHCA_IMAGES/distro-root.sh" bookworm); RKEY=${ROOT##*/};;
    *) vhca_die "--release: trixie or bookworm";;
esac
KEY=$( { cat "$0" "$VHCA_IMAGES/stage-lib.sh"; echo "$RKEY"; } | sha256sum | cut -c1-16)
OUT="$VHCA_CACHE/guest-$KEY"

exec 9>"$VHCA_CACHE/.guest.lock"
flock 9
if [ "$rebuild" = 0 ] && [ -e "$OUT/.vhca-guest-complete" ]; then
    echo "$OUT"
    exit 0
fi
rm -rf "$VHCA_CACHE"/guest-*.tmp.*
TMP="$OUT.tmp.$$"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP"
t0=$(date +%s.%N)

K=$(sed -n 's/^kernel=//p' "$ROOT/etc/vhca-root.info")
[ -n "$K" ] || vhca_die "no kernel= in $ROOT/etc/vhca-root.info"

# ---------------------------------------------------------------------------
# The guest's /init (busybox sh). Kernel command line options it reads:
#   vhca.ip=ADDR/PREFIX   configure the first ethernet interface
#   vhca.cmd=BASE64       a command to run (when there is no /vhca/cmd file)
#   vhca.shell=1          interactive shell on the console instead of a command
#   vhca.debug=1          set -x
# It runs /vhca/cmd (a sh script; run-vm.sh appends it as a cpio), prints
# "VHCA-EXIT-<token>=<status>" (<token> from /vhca/token, empty if none) and
# powers off.
cat >"$TMP/init" <<'INIT'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=linux
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
exec </dev/console >/dev/console 2>&1
read -r up _ </proc/uptime
echo "vhca-init: /init started at ${up}s"

arg() { # value of vhca.$1= on the kernel command line
    for w in $(cat /proc/cmdline); do
        case "$w" in "vhca.$1="*) echo "${w#vhca.$1=}"; return 0;; esac
    done
    return 1
}
[ "$(arg debug)" = 1 ] && set -x
hostname "$(arg hostname || echo vhca-guest)"
ip link set lo up
ulimit -l unlimited  # RDMA memory registration pins pages

K=$(uname -r)
# Modules an overlay added (not in modules.dep yet): index them.
if [ -n "$(find /lib/modules/$K -name '*.ko' -newer /lib/modules/$K/modules.dep 2>/dev/null | head -1)" ] ||
   [ -d /lib/modules/$K/extra ] || [ -d /lib/modules/$K/updates ]; then
    depmod -a "$K"
fi
# Coldplug: load drivers for the devices present (no udev here).
for bus in pci virtio; do
    for m in /sys/bus/$bus/devices/*/modalias; do
        [ -r "$m" ] && modprobe -q -b "$(cat "$m")"
    done
done
for f in /etc/modules /etc/modules.d/*; do
    [ -r "$f" ] || continue
    sed 's/#.*//' "$f" | while read -r m args; do
        [ -n "$m" ] && { modprobe "$m" $args || echo "vhca-init: modprobe $m failed"; }
    done
done

if ip=$(arg ip); then
    dev=
    for d in /sys/class/net/*; do
        [ "${d##*/}" = lo ] && continue
        [ -e "$d/device" ] && { dev=${d##*/}; break; }
    done
    if [ -n "$dev" ]; then
        ip addr add "$ip" dev "$dev" && ip link set "$dev" up
        echo "vhca-init: $dev $ip"
    else
        echo "vhca-init: vhca.ip given but no network interface"
    fi
fi

for f in /etc/vhca-init.d/*.sh; do
    [ -r "$f" ] && . "$f"
done

token=$(cat /vhca/token 2>/dev/null)
read -r up _ </proc/uptime
echo "vhca-init: ready at ${up}s"
if [ "$(arg shell)" = 1 ]; then
    setsid cttyhack sh -l
    rc=$?
elif [ -r /vhca/cmd ]; then
    (cd /root && exec sh /vhca/cmd) </dev/null
    rc=$?
elif c=$(arg cmd); then
    echo "$c" | base64 -d >/tmp/cmd
    (cd /root && exec sh /tmp/cmd) </dev/null
    rc=$?
else
    echo "vhca-init: no command (vhca.cmd=, /vhca/cmd or vhca.shell=1); starting a shell"
    setsid cttyhack sh -l
    rc=$?
fi
read -r up _ </proc/uptime
echo "vhca-init: command done at ${up}s"
echo "VHCA-EXIT-$token=$rc"
sync
poweroff -f
INIT

# ---------------------------------------------------------------------------
# Runs inside the root: stage the tree, depmod, cpio.
cat >"$TMP/build.sh" <<'BUILD'
#!/bin/bash
set -euo pipefail
OUT=$1 K=$2
S=$OUT/stage
ML=/usr/lib/x86_64-linux-gnu
mkdir -p "$S"/usr/bin "$S"/usr/sbin "$S"/usr/lib "$S"/usr/lib64
for d in bin sbin lib lib64; do ln -s usr/$d "$S/$d"; done
mkdir -p "$S"/{proc,sys,dev,tmp,run,root,mnt,etc,var/tmp,vhca,etc/modules.d,etc/vhca-init.d}
ln -s /run "$S/var/run"

# add, is_elf, add_elf (images/stage-lib.sh; the repo is visible inside the root).
. "$3/stage-lib.sh"

# busybox first, applets only where nothing real will be.
add /usr/bin/busybox
# Executables of these packages (ELF, or /bin/sh scripts).
for p in ibverbs-utils perftest rdmacm-utils infiniband-diags opensm pciutils kmod iproute2 strace \
         iperf3 tcpdump ethtool; do
    for f in $(dpkg -L "$p" | grep -E '/s?bin/[^/]+$'); do
        [ -f "$f" ] || continue
        if is_elf "$f"; then add_elf "$f"
        elif head -1 "$f" | grep -qE '^#! ?/bin/sh'; then add "$f"
        fi
    done
done
# kmod's names (depmod, modprobe, ...) are symlinks in /usr/sbin
for f in $(dpkg -L kmod | grep -E '/s?bin/'); do [ -L "$f" ] && add "$f"; done
# libibverbs providers and their config, librdmacm, pci.ids
for f in $ML/libibverbs/*.so $ML/librdmacm.so.1 $ML/libibverbs.so.1 $ML/libmlx5.so.1 $ML/libefa.so.1 $ML/libmana.so.1 $ML/libmlx4.so.1 $ML/libhns.so.1; do
    [ -e "$f" ] && add_elf "$f"
done
# glibc dlopens libgcc_s at pthread_exit/pthread_cancel (rping's threads exit
# that way): no ldd closure names it.
[ -e "$ML/libgcc_s.so.1" ] && add_elf "$ML/libgcc_s.so.1"
cp -a /etc/libibverbs.d "$S/etc/"
[ -e /usr/share/misc/pci.ids ] && add /usr/share/misc/pci.ids
[ -e /usr/share/hwdata/pci.ids ] && add /usr/share/hwdata/pci.ids
/usr/bin/busybox --list-full | while read -r a; do
    [ -e "$S/$a" ] || [ -L "$S/$a" ] || ln -s /usr/bin/busybox "$S/usr/${a#usr/}"
done

# Kernel modules: the RDMA core stack (+ soft-RoCE for comparison), virtio-net
# (and virtio_pci, a module in bookworm's 6.1, built in on trixie's 6.12) and
# netem (scripts/bench-vm-loss.sh duplicates and reorders soft-RoCE's frames with it).
# NVMe over Fabrics (target, host, null_blk namespaces: images/workloads-tests.sh).
# 9p over virtio: the host folder run-vm.sh --share gives the guest (vhca-vm run).
# (rxe computes its ICRC with the crypto API's "crc32": modprobe cannot see that
# dependency, so the crc32 drivers are listed by name.)
MODS="ib_core ib_uverbs ib_umad ib_cm iw_cm rdma_cm rdma_ucm ib_ipoib rdma_rxe virtio_net virtio_pci sch_netem
      nvmet-rdma nvme-rdma null_blk 9p 9pnet_virtio zram
      crc32_generic crc32_pclmul"
MD=/lib/modules/$K
mkdir -p "$S$MD"
for m in $MODS; do modprobe -S "$K" --show-depends "$m" || echo "warning: no module $m" >&2; done |
    awk '$1 == "insmod" {print $2}' | sort -u >"$OUT/modules.list"
while read -r f; do
    rel=${f#"$MD"/}
    mkdir -p "$S$MD/$(dirname "$rel")"
    case "$f" in
        *.xz) xz -dc "$f" >"$S$MD/${rel%.xz}";;
        *.zst) zstd -qdc "$f" >"$S$MD/${rel%.zst}";;
        *) cp "$f" "$S$MD/$rel";;
    esac
done <"$OUT/modules.list"
cp "$MD"/modules.builtin "$MD"/modules.builtin.modinfo "$S$MD/"
(cd "$S$MD" && find kernel -name '*.ko' | sort) >"$S$MD/modules.order"
depmod -b "$S" "$K"

cat >"$S/etc/passwd" <<EOF
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
printf 'root:x:0:\nnogroup:x:65534:\n' >"$S/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' >"$S/etc/hosts"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$S/etc/nsswitch.conf"
printf 'ib_uverbs\nib_umad\nrdma_ucm\n' >"$S/etc/modules"
printf 'export PS1="\\h:\\w# "\n' >"$S/etc/profile"
install -m 755 "$OUT/init" "$S/init"

(cd "$S" && find . -mindepth 1 | sort | cpio --quiet -o -H newc -R 0:0 --reproducible) >"$OUT/initramfs.cpio"
(cd "$S" && find . -mindepth 1 | sort) >"$OUT/contents.txt"
cp /boot/vmlinuz-"$K" "$OUT/vmlinuz"
echo "$K" >"$OUT/kver"
rm -rf "$S" "$OUT/build.sh" 
BUILD

vhca_log "building the guest for $K in $TMP"
vhca_chroot "$ROOT" bash "$TMP/build.sh" "$TMP" "$K" "$VHCA_IMAGES" >"$TMP/build.log" 2>&1 ||
    { tail -30 "$TMP/build.log" >&2; vhca_die "guest build failed"; }
date -u +%s >"$TMP/.vhca-guest-complete"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
vhca_log "guest ready in $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s: $OUT ($(du -h "$OUT/initramfs.cpio" | cut -f1) initramfs)"

# Prune guests of other keys unused for a day (cheap to rebuild; run-vm.sh
# touches the guest it boots).
for old in "$VHCA_CACHE"/guest-*; do
    [ -d "$old" ] && [ "$old" != "$OUT" ] || continue
    case "$old" in *.tmp.*) continue;; esac
    [ -n "$(find "$old/.vhca-guest-complete" -mmin +1440 2>/dev/null)" ] && rm -rf "$old"
done
echo "$OUT"
