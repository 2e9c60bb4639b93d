#!/usr/bin/env bash
# scripts/package.sh — the Debian packages of vhca (issue 28 item 2), built with
# dpkg-deb from this checkout:
#
#   vhca_<version>_amd64.deb       the host side: /usr/bin/vhca (release build),
#       vhca(1) (from vhca-man), the systemd template unit vhca@.service
#       (vhca --config /etc/vhca/NAME.toml), /etc/vhca/example.toml (a
#       conffile), the vhost-user backend description
#       /usr/share/qemu/vhost-user/50-vhca-net.json (vhca --print-capabilities
#       answers with its type), the example fabric files and libvirt domain in
#       /usr/share/doc/vhca/examples, and the Wireshark dissector in
#       Wireshark's global Lua plugin folder when tools/wireshark/*.lua exists.
#       Depends from dpkg-shlibdeps (libc6, libgcc-s1): the binary is built on
#       this machine, so build it on the oldest release it is for (Debian 12;
#       trixie's newer libc runs it too).
#   vhca-dkms_<version>_all.deb   the guest's kernel module as DKMS source
#       (/usr/src/vhca-<version>, laid out by guest-driver/kernel's
#       `make dkms-src`); its postinst adds it to DKMS and builds and installs
#       it for every kernel whose headers are installed; DKMS's own kernel
#       hook builds it for kernels installed later (AUTOINSTALL in dkms.conf).
#       The rdma-core provider is guest-driver/provider/package.sh's package.
#
# dpkg-deb and not cargo-deb: the host package holds files cargo does not
# build (the unit, the man page from a second binary, a conffile, the QEMU
# description), cargo-deb is not in Debian, and the kernel package has no Rust
# in it at all; the provider package is made the same way.
#
# Usage: scripts/package.sh [--out DIR]
#   Prints the two .debs' paths, host package first (default DIR:
#   target/debian). Needs cargo (scripts/lib.sh ensure_rust), dpkg-deb and
#   dpkg-shlibdeps (dpkg-dev), make; no root.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
out=target/debian
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || { echo "package.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) echo "package.sh: unknown argument $1 (try --help)" >&2; exit 2;;
    esac
done
log() { printf '[package.sh] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
for t in cargo dpkg-deb dpkg-shlibdeps make gzip; do
    command -v "$t" >/dev/null || die "$t is needed (cargo: scripts/lib.sh ensure_rust; dpkg-dev; make)"
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' device/Cargo.toml | head -1)
dkms_version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"$/\1/p' guest-driver/kernel/dkms.conf)
[ -n "$version" ] && [ -n "$dkms_version" ] || die "no version in device/Cargo.toml or dkms.conf"
work=$(mktemp -d "$out/.stage.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the host package ---------------------------------------------------------
log "cargo build --release -p device --bin vhca --bin vhca-man (a few minutes cold)"
target=${CARGO_TARGET_DIR:-$REPO/target}
CARGO_TARGET_DIR=$target cargo build --release -p device --bin vhca --bin vhca-man >&2 ||
    die "cargo build failed"
st="$work/vhca"
doc="$st/usr/share/doc/vhca"
install -d "$st/DEBIAN" "$st/usr/bin" "$st/usr/share/man/man1" "$st/usr/lib/systemd/system" \
    "$st/etc/vhca" "$st/usr/share/qemu/vhost-user" "$doc/examples"
install -m 755 "$target/release/vhca" "$st/usr/bin/vhca"
strip --strip-unneeded "$st/usr/bin/vhca"
"$target/release/vhca-man" | gzip -9n >"$st/usr/share/man/man1/vhca.1.gz"
install -m 644 packaging/vhca@.service "$st/usr/lib/systemd/system/vhca@.service"
install -m 644 packaging/example.toml "$st/etc/vhca/example.toml"
install -m 644 packaging/50-vhca-net.json "$st/usr/share/qemu/vhost-user/50-vhca-net.json"
install -m 644 examples/fabric.toml examples/fabric-switch.toml examples/fabric-subnet.toml \
    examples/libvirt-domain.xml examples/libvirt-apparmor.txt "$doc/examples/"
cat LICENSE-MIT LICENSE-APACHE >"$doc/copyright"
# The dissector (issue 28 item 4), when this checkout has it.
lua=
[ ! -d tools/wireshark ] || lua=$(find tools/wireshark -maxdepth 1 -name '*.lua' | sort | head -1)
if [ -n "$lua" ]; then
    install -d "$st/usr/lib/x86_64-linux-gnu/wireshark/plugins"
    install -m 644 "$lua" "$st/usr/lib/x86_64-linux-gnu/wireshark/plugins/vhca.lua"
    log "with the Wireshark dissector $lua"
else
    log "no tools/wireshark/*.lua: the package has no Wireshark dissector"
fi
# Depends: what the binary links (libc6, libgcc-s1), as dpkg-shlibdeps says.
mkdir -p "$work/shlibs/debian"
printf 'Source: vhca\n\nPackage: vhca\nArchitecture: amd64\n' >"$work/shlibs/debian/control"
depends=$(cd "$work/shlibs" && dpkg-shlibdeps -O "$st/usr/bin/vhca" 2>/dev/null |
    sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies for vhca"
size=$(du -sk --exclude=DEBIAN "$st" | cut -f1)
cat >"$st/DEBIAN/control" <<EOF
Package: vhca
Version: $version
Architecture: amd64
Maintainer: vhca <vhca@localhost>
Depends: $depends
Suggests: qemu-system-x86 (>= 1:10.1), libvirt-daemon-system, tshark
Installed-Size: $size
Section: net
Priority: optional
Description: virtual PCIe InfiniBand HCA served to QEMU over vfio-user
 vhca serves one PCI function, an InfiniBand host channel adapter, to QEMU's
 vfio-user-pci device (QEMU 10.1 or newer) and carries its port's packets
 over UDP (native InfiniBand) or, as a RoCEv2 port, over a TAP device whose
 other frames go to the VM's virtio-net through a vhost-user-net backend.
 .
 vhca@NAME.service runs one device with the options of /etc/vhca/NAME.toml.
 The guest needs the vhca kernel module (vhca-dkms) and the libibverbs
 provider (ibverbs-provider-vhca).
EOF
printf '/etc/vhca/example.toml\n' >"$st/DEBIAN/conffiles"
# A template unit with no default instance: nothing to enable, only
# systemd's view of the unit files to refresh (what debhelper's
# dh_installsystemd does for it), and the running instances to stop on removal.
cat >"$st/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
EOF
cat >"$st/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    systemctl stop 'vhca@*.service' >/dev/null 2>&1 || true
fi
EOF
cat >"$st/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
EOF
chmod 755 "$st/DEBIAN/postinst" "$st/DEBIAN/prerm" "$st/DEBIAN/postrm"
host_deb="$out/vhca_${version}_amd64.deb"
dpkg-deb --root-owner-group -Zxz --build "$st" "$host_deb" >/dev/null || die "dpkg-deb (vhca) failed"

# --- the DKMS package -----------------------------------------------------------
st="$work/vhca-dkms"
install -d "$st/DEBIAN" "$st/usr/share/doc/vhca-dkms"
make -s -C guest-driver/kernel dkms-src DESTDIR="$st" >&2 || die "make dkms-src failed"
[ -e "$st/usr/src/vhca-$dkms_version/dkms.conf" ] &&
    [ -e "$st/usr/src/vhca-$dkms_version/include/vhca_abi.h" ] ||
    die "make dkms-src did not lay out /usr/src/vhca-$dkms_version"
install -m 644 LICENSE-MIT "$st/usr/share/doc/vhca-dkms/copyright"
size=$(du -sk --exclude=DEBIAN "$st" | cut -f1)
cat >"$st/DEBIAN/control" <<EOF
Package: vhca-dkms
Version: $dkms_version
Architecture: all
Maintainer: vhca <vhca@localhost>
Depends: dkms (>= 3.0)
Recommends: linux-headers-amd64 | linux-headers-generic
Suggests: ibverbs-provider-vhca
Installed-Size: $size
Section: kernel
Priority: optional
Description: vhca kernel module (DKMS source), for guests of a vhca device
 vhca.ko drives the vhca virtual InfiniBand HCA (PCI 1234:1bca) in a guest:
 an ib_core provider for Linux 6.1 and newer. DKMS builds it for every
 kernel whose headers are installed, now and when kernels are installed later.
EOF
# Build for every kernel with headers now; a kernel it cannot build for is
# reported but does not fail the installation (the other kernels keep theirs;
# `dkms status` shows it), as Debian's DKMS packages do.
cat >"$st/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
NAME=vhca
VERSION=$dkms_version
EOF
cat >>"$st/DEBIAN/postinst" <<'EOF'
if [ "$1" = configure ]; then
    dkms status -m "$NAME" -v "$VERSION" | grep -q . || dkms add -m "$NAME" -v "$VERSION"
    for build in /lib/modules/*/build; do
        [ -e "$build/Makefile" ] || continue
        k=$(basename "$(dirname "$build")")
        dkms install -m "$NAME" -v "$VERSION" -k "$k" ||
            echo "vhca-dkms: vhca.ko did not build for $k (see /var/lib/dkms/$NAME/$VERSION/build/make.log)" >&2
    done
fi
EOF
cat >"$st/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
case "\$1" in
    remove|upgrade|deconfigure) dkms remove -m vhca -v $dkms_version --all >/dev/null 2>&1 || true;;
esac
EOF
chmod 755 "$st/DEBIAN/postinst" "$st/DEBIAN/prerm"
dkms_deb="$out/vhca-dkms_${dkms_version}_all.deb"
dpkg-deb --root-owner-group -Zxz --build "$st" "$dkms_deb" >/dev/null || die "dpkg-deb (vhca-dkms) failed"
log "built $host_deb and $dkms_deb"
echo "$host_deb"
echo "$dkms_deb"
