#!/bin/bash
# images/own-qemu.sh — README.md's "Your own QEMU" section, followed as written
# (issue 17, "Done when": two VMs doing ibv_rc_pingpong from that section alone).
#
# Usage: images/own-qemu.sh [--timeout S] [--out DIR]
#   (as root; run it under the VM lock: flock /tmp/vhca-vm.lock images/own-qemu.sh)
#
# The commands are not copied here: they are EXTRACTED from the section's four
# ```sh blocks at run time, so a README edit that breaks the recipe breaks this
# script. What it adds is only what a person does by hand around them:
#   1. block 1 (cargo install, vhca-man) runs with `~/.local` replaced by a
#      temporary root, which is put on PATH;
#   2. block 2 (mkdir /tmp/vhca, the two vhca lines) runs as written, in the
#      repository (examples/fabric.toml is relative); both vhca processes and
#      /tmp/vhca's files are removed on exit;
#   3. block 3 is VM a's QEMU line, used verbatim; VM b's is derived as the
#      README's prose says: /tmp/vhca/b.sock, its own disk (trixie-b.qcow2),
#      the two UDP ports of -netdev dgram swapped. Each substitution must hit,
#      or the script stops. The "trixie guest image" a user brings is made here
#      (cached in $VHCA_CACHE/own-qemu-<key>, key = this script + the guest,
#      vhca.ko and the provider package): an ext4 file system built with
#      `mkfs.ext4 -d` from images/guest.sh's trixie guest (its initramfs
#      content and modules), with vhca.ko in /lib/modules/$K/extra (depmod'ed)
#      and the .deb of guest-driver/provider/package.sh installed (dpkg
#      --root), as a qcow2; each VM gets its own qcow2 on top of it. That disk
#      has no bootloader, so the only QEMU arguments added to the README's line
#      are what a bootloader would give: -kernel (the guest's kernel), -initrd
#      (a small one that loads virtio_blk and ext4, mounts root=/dev/vda and
#      switch_roots to the disk's /init) and -append (root=/dev/vda,
#      console=ttyS0 for -nographic's serial console, and vhca.cmd= carrying
#      the step-4 commands to the disk's /init, which runs them and powers
#      off). QEMU is the host tool root's (images/host-root.sh; run through
#      vhca_chroot as images/run-vm.sh does); `-accel kvm -accel tcg` stays:
#      TCG here, where the root has no /dev/kvm.
#   4. block 4 runs in the guests under `set -ex`: VM a without the "# VM b"
#      line (the server), VM b without the "# VM a" line and with 10.0.0.2
#      (the client); NIC= is derived as the README says, from `ip -br link`
#      (the first interface other than lo: the virtio-net NIC). VM b starts
#      once VM a's server listens. Consoles go to stdout (prefixed a:/b:) and
#      to --out.
# PASS (exit 0) when both guests' commands, whose last is the pingpong, exit 0.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
# shellcheck source=../scripts/lib.sh
. "$VHCA_REPO/scripts/lib.sh"

timeout=900 out=''
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) need "$@"; timeout=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
vhca_need_root
apt_install qemu-utils e2fsprogs

# --- the section's ```sh blocks ----------------------------------------------
SECTION=$(awk '/^## Your own QEMU/ {on = 1; next} on && /^## / {exit} on' "$VHCA_REPO/README.md")
[ -n "$SECTION" ] || vhca_die "README.md has no '## Your own QEMU' section"
block() { # the Nth ```sh block of the section, continuation lines joined
    printf '%s\n' "$SECTION" | awk -v n="$1" '
        /^```sh$/ {k++; inb = (k == n); next}
        /^```/ {inb = 0; next}
        inb {print}' | sed -e ':a' -e '/\\$/N; s/\\\n[ ]*/ /; ta'
}
B1=$(block 1) B2=$(block 2) B3=$(block 3) B4=$(block 4)
[ -n "$B1" ] && [ -n "$B2" ] && [ -n "$B3" ] && [ -n "$B4" ] && [ -z "$(block 5)" ] ||
    vhca_die "the section must have exactly four \`\`\`sh blocks (install, vhca, qemu, guest)"

TMP=$(mktemp -d /tmp/own-qemu.XXXXXX)
mkdir -p "$VHCA_RUN"
W=$(mktemp -d "$VHCA_RUN/own-qemu.XXXXXX") # QEMU's folder (visible in the root)
[ -n "$out" ] || out=$W
mkdir -p "$out"
out=$(realpath "$out")
qpids=()
cleanup() {
    local p
    for p in "${qpids[@]}" $(jobs -p); do kill -TERM "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -f /tmp/vhca/a.sock /tmp/vhca/b.sock /tmp/vhca/a.json /tmp/vhca/b.json
    rmdir /tmp/vhca 2>/dev/null || true
    rm -rf "$TMP"
    [ "$W" = "$out" ] || rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- step 1: install vhca into a temporary root --------------------------------
vhca_log "step 1: ${B1//$'\n'/; }"
# shellcheck disable=SC2088  # the README's literal ~/.local
s1=${B1//'~/.local'/$TMP/root}
[ "$s1" != "$B1" ] || vhca_die "step 1 does not install into ~/.local"
export PATH="$TMP/root/bin:$PATH" # as ~/.local/bin is on a user's PATH
(cd "$VHCA_REPO" && bash -ec "$s1") >"$out/step1.log" 2>&1 ||
    { tail -20 "$out/step1.log" >&2; vhca_die "step 1 failed (log: $out/step1.log)"; }
[ -s "$TMP/root/share/man/man1/vhca.1" ] || vhca_die "step 1 left no man page"

# --- the guest disk (what the person brings) -------------------------------------
"$VHCA_IMAGES/host-root.sh" >/dev/null
ROOT=$(vhca_ensure_root)
GUEST=$("$VHCA_IMAGES/guest.sh" --release trixie)
touch "$GUEST/.vhca-guest-complete"
K=$(cat "$GUEST/kver")
KO=$(vhca_build_module "$K")
DEB=$("$VHCA_REPO/guest-driver/provider/package.sh" --release trixie)
KEY=$( { cat "$0"; echo "${GUEST##*/}"; cat "$KO" "$DEB"; } | sha256sum | cut -c1-16)
IMG="$VHCA_CACHE/own-qemu-$KEY"
if [ ! -e "$IMG/.complete" ]; then
    vhca_log "building the trixie disk in $IMG"
    rm -rf "$IMG" "$VHCA_CACHE"/own-qemu-*.tmp.*
    T="$IMG.tmp.$$"
    mkdir -p "$T/fs" "$T/initrd"
    # (cpio is the root's: the host may not have it)
    vhca_chroot "$ROOT" sh -c 'cd "$1" && cpio --quiet -id <"$2"' sh "$T/fs" "$GUEST/initramfs.cpio"
    mkdir -p "$T/fs/lib/modules/$K/extra" "$T/fs/var/lib/dpkg/info" "$T/fs/var/lib/dpkg/updates"
    cp "$KO" "$T/fs/lib/modules/$K/extra/vhca.ko"
    : >"$T/fs/var/lib/dpkg/status"
    # The guest's libibverbs1 is in the tree, not in a dpkg database: -depends.
    vhca_chroot "$ROOT" sh -ec '
        depmod -b "$1" "$2"
        dpkg --root="$1" --force-depends --force-not-root -i "$3" >/dev/null 2>&1
        # the boot initrd: busybox, virtio_blk and ext4 (in dependency order)
        S=$4; mkdir -p "$S/bin" "$S/dev" "$S/proc" "$S/sys" "$S/newroot" "$S/mods"
        cp /usr/bin/busybox "$S/bin/"
        for m in bin/sh mount umount insmod sleep switch_root; do ln -sf busybox "$S/bin/${m##*/}"; done
        i=10
        for m in virtio_blk crc32c_generic crc32c ext4; do modprobe -S "$2" --show-depends "$m"; done |
            awk "\$1 == \"insmod\" && !seen[\$2]++ {print \$2}" | while read -r f; do
                b=${f##*/}; b=${b%.xz}
                case "$f" in *.xz) xz -dc "$f";; *) cat "$f";; esac >"$S/mods/$i-$b"
                i=$((i + 1))
            done
    ' sh "$T/fs" "$K" "$DEB" "$T/initrd"
    [ -e "$T/fs/etc/libibverbs.d/vhca.driver" ] || vhca_die "the provider package did not install"
    cat >"$T/initrd/init" <<'EOF'
#!/bin/sh
# own-qemu.sh's boot initrd: what a bootloader + initramfs-tools do for root=/dev/vda.
mount -t proc proc /proc
mount -t devtmpfs devtmpfs /dev
for m in /mods/*; do insmod "$m" 2>/dev/null; done
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
mount -t ext4 /dev/vda /newroot || { echo "own-qemu initrd: cannot mount /dev/vda"; sleep 5; exit 1; }
umount /proc; umount /dev
exec switch_root /newroot /init
EOF
    chmod 755 "$T/initrd/init"
    vhca_chroot "$ROOT" sh -c 'cd "$1" && find . -mindepth 1 | sort | cpio --quiet -o -H newc -R 0:0 >"$2"' \
        sh "$T/initrd" "$T/initrd.cpio"
    rm -rf "$T/initrd"
    cp "$GUEST/vmlinuz" "$T/vmlinuz"
    mb=$(( $(du -sm "$T/fs" | cut -f1) * 3 / 2 + 64 ))
    mkfs.ext4 -q -L vhca-trixie -d "$T/fs" "$T/disk.raw" "${mb}M" >/dev/null
    qemu-img convert -f raw -O qcow2 "$T/disk.raw" "$T/trixie.qcow2"
    rm -rf "$T/fs" "$T/disk.raw"
    date -u +%s >"$T/.complete"
    mv "$T" "$IMG"
    for old in "$VHCA_CACHE"/own-qemu-*; do
        [ -d "$old" ] && [ "$old" != "$IMG" ] && [ -e "$old/.complete" ] && rm -rf "$old"
    done
fi
for v in a b; do
    qemu-img create -q -f qcow2 -b "$IMG/trixie.qcow2" -F qcow2 "$W/trixie-$v.qcow2"
done

# --- step 2: the two vhca processes, as written ---------------------------------
vhca_log "step 2: ${B2//$'\n'/; }"
[ ! -e /tmp/vhca/a.sock ] && [ ! -e /tmp/vhca/b.sock ] || vhca_die "/tmp/vhca/{a,b}.sock exist: another run?"
cd "$VHCA_REPO"
eval "$B2" 2>>"$out/vhca.log"
cd /
for _ in $(seq 100); do
    [ -S /tmp/vhca/a.sock ] && [ -S /tmp/vhca/b.sock ] && break
    sleep 0.1
done
[ -S /tmp/vhca/a.sock ] && [ -S /tmp/vhca/b.sock ] ||
    { cat "$out/vhca.log" >&2; vhca_die "step 2: the vhca sockets did not appear"; }

# --- steps 3 and 4: the two VMs -----------------------------------------------------
QA=$B3
QB=$B3
sub() { # sub VAR FROM TO: replace in QB, which must change
    local before=$QB
    QB=${QB//"$1"/"$2"}
    [ "$QB" != "$before" ] || vhca_die "step 3: VM b's line: no '$1' in VM a's to replace"
}
sub /tmp/vhca/a.sock /tmp/vhca/b.sock
sub trixie-a.qcow2 trixie-b.qcow2
lp=$(printf '%s' "$B3" | sed -n 's/.*local\.port=\([0-9]*\).*/\1/p')
rp=$(printf '%s' "$B3" | sed -n 's/.*remote\.port=\([0-9]*\).*/\1/p')
[ -n "$lp" ] && [ -n "$rp" ] || vhca_die "step 3: no -netdev dgram local.port/remote.port"
sub "local.port=$lp" "local.port=PEER"
sub "remote.port=$rp" "remote.port=$lp"
sub "local.port=PEER" "local.port=$rp"

# Step 4's commands for each VM.
nicre='^NIC=[^ ]*'
printf '%s\n' "$B4" | grep -q "$nicre" || vhca_die "step 4 sets no NIC="
printf '%s\n' "$B4" | grep -q '# VM a' && printf '%s\n' "$B4" | grep -q '# VM b' ||
    vhca_die "step 4: no '# VM a' / '# VM b' lines"
# (/usr/bin/ip: the image's /bin/sh is busybox, which runs its own `ip` applet,
# without -br, for a bare `ip`; a trixie system's iproute2 is /usr/bin/ip.)
nic="NIC=\$(/usr/bin/ip -br link | awk '\$1 != \"lo\" {print \$1; exit}')"
CA=$(printf '%s\n' "$B4" | grep -v '# VM b' | sed "s#$nicre#$nic#")
CB=$(printf '%s\n' "$B4" | grep -v '# VM a' | sed "s#$nicre#$nic#")
[ "$CB" != "${CB//10.0.0.1\/24/10.0.0.2/24}" ] || vhca_die "step 4: no 10.0.0.1/24 to change for VM b"
CB=${CB//10.0.0.1\/24/10.0.0.2/24}

boot() { # boot NAME QEMU_LINE COMMANDS: in the background, console to $out/NAME.log
    local cmd b64
    cmd=$(printf 'set -ex\n%s\n' "$3" | base64 -w0)
    b64="-kernel $IMG/vmlinuz -initrd $IMG/initrd.cpio -append 'root=/dev/vda rw console=ttyS0 quiet loglevel=4 vhca.hostname=own-$1 vhca.cmd=$cmd'"
    printf '%s\n' "$3" >"$out/$1.cmd"
    printf '%s %s\n' "$2" "$b64" >"$out/$1.qemu"
    # KVM nested in this host's VM stops -cpu max guests early ("KVM internal
    # error ... emulation failure"): /dev/kvm is hidden in QEMU's own mount
    # namespace (vhca_chroot's, private), so -accel kvm fails and the README's
    # -accel tcg fallback is what runs, as for a user without /dev/kvm access.
    VHCA_BIND="/tmp/vhca $out" vhca_chroot_cmd "$ROOT" sh -c \
        "[ ! -e /dev/kvm ] || mount --bind /dev/null /dev/kvm; cd '$W' && exec $2 $b64"
    timeout -k 5 "$timeout" "${VHCA_CHROOT_CMD[@]}" </dev/null >"$out/$1.log" 2>&1 &
    qpids+=($!)
    tail --pid="$!" -n +1 -F "$out/$1.log" 2>/dev/null | sed -u "s/^/$1: /" &
}
vhca_log "step 3: VM a: $QA"
boot a "$QA" "$CA"
t0=$(date +%s)
until grep -q 'local address:' "$out/a.log"; do
    kill -0 "${qpids[0]}" 2>/dev/null || vhca_die "VM a stopped before its server listened ($out/a.log)"
    [ $(($(date +%s) - t0)) -lt "$timeout" ] || vhca_die "VM a's server did not listen in $timeout s"
    sleep 1
done
vhca_log "step 3: VM b: $QB"
boot b "$QB" "$CB"
rc=0
for i in 0 1; do wait "${qpids[$i]}" || true; done
sleep 1
for v in a b; do
    st=$(tr -d '\r' <"$out/$v.log" | sed -n 's/.*VHCA-EXIT-=\([0-9]*\)$/\1/p' | tail -1)
    vhca_log "VM $v: step 4 exit status ${st:-none (no exit marker: see $out/$v.log)}"
    [ "${st:-1}" = 0 ] || rc=1
done
if [ "$rc" = 0 ]; then
    vhca_log "PASS: both VMs ran README's ibv_rc_pingpong (logs in $out)"
else
    vhca_log "FAIL (logs in $out)"
fi
exit "$rc"
