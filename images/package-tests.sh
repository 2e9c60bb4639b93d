#!/bin/bash
# images/package-tests.sh — the packaging stage of the test suite (issue 28
# items 2 and 8): the two Debian packages scripts/package.sh builds, installed
# the way a user installs them, into clean Debian roots.
#
#   build_debs            scripts/package.sh builds vhca_*.deb and vhca-dkms_*.deb
#   For SUITE in bookworm and trixie, in a fresh copy of a clean minbase root
#   (images/package-root.sh, cached; the copy is thrown away):
#   SUITE/install         `apt-get install ./vhca_*.deb` resolves the
#                         dependencies and installs; the files are where the
#                         package says (binary, man page, unit, conffile, QEMU
#                         description)
#   SUITE/capabilities    `vhca --print-capabilities` prints JSON, and its type
#                         is the installed description's
#                         (/usr/share/qemu/vhost-user/50-vhca-net.json), whose
#                         binary is the vhca that printed it and whose fields
#                         are those of QEMU's vhost-user.json (VhostUserBackend)
#   SUITE/unit_runs       the unit's ExecStart line (%i = pkgtest) with an
#                         /etc/vhca/pkgtest.toml naming a socket in the root:
#                         the vfio-user socket appears, the device answers a
#                         vfio-user VERSION request, writes its counters file,
#                         and ends on SIGTERM with status 0 (in a network
#                         namespace of its own: loopback UDP only)
#   SUITE/systemd_verify  `systemd-analyze verify vhca@pkgtest.service` with the
#                         release's own systemd (installed into the copy), no
#                         warning naming the unit
#   SUITE/purge           `apt-get purge vhca` leaves no file of it, the
#                         conffile included
#   Then in another fresh copy:
#   SUITE/dkms            `apt-get install linux-headers-amd64 ./vhca-dkms_*.deb`:
#                         `dkms status` says installed for the root's kernel
#                         headers' release, the module is in updates/dkms with
#                         that vermagic (timed: a kernel module build)
#   SUITE/dkms_remove     `apt-get remove vhca-dkms` takes the module away
#   trixie/libvirt_xml    virt-xml-validate (libvirt-clients, installed into the
#                         trixie copy) accepts examples/libvirt-domain.xml with its
#                         vhostuser NIC; SKIP with the reason if it cannot be
#                         installed
#   trixie/apparmor_lines apparmor_parser compiles examples/libvirt-apparmor.txt's
#                         rules inside a profile (parse only, nothing loaded)
#
# Prints one "PASS|FAIL|SKIP name (detail)" line per check; exit 0 iff none
# failed. Logs in $VHCA_CACHE/package-tests/logs. Times (2 cores shared, load
# 3 to 8): 221 to 326 s warm, of which the two DKMS installs (headers and compiler
# unpacked, vhca.ko built) take 40 to 70 s each; cold about 10 minutes more:
# the release build (~4 min), the two debootstraps (~45 s each) and the
# first downloads (~350 MB of .debs, kept in $VHCA_CACHE/pkgroot-debs-*).
# Usage: images/package-tests.sh [--suites "bookworm trixie"]
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh
# shellcheck source=../scripts/lib.sh
. scripts/lib.sh
suites="bookworm trixie"
while [ $# -gt 0 ]; do
    case "$1" in
        --suites) [ $# -ge 2 ] || vhca_die "--suites needs a list"; suites=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
vhca_need_root
fail=0
pass() { echo "PASS $1${2:+ ($2)}"; }
flunk() { echo "FAIL $1${2:+ ($2)}"; fail=1; }
skip() { echo "SKIP $1${2:+ ($2)}"; }
t_all=$SECONDS

work="$VHCA_CACHE/package-tests"
logs="$work/logs"
mkdir -p "$logs"
rm -f "$logs"/*.log
copies=()
vhca_pid=
cleanup() {
    [ -z "$vhca_pid" ] || kill -KILL "$vhca_pid" 2>/dev/null || true
    local c
    for c in "${copies[@]}"; do rm -rf --one-file-system "$c"; done
}
trap cleanup EXIT

ensure_rust
apt_install python3 dpkg-dev make
# --- the packages -------------------------------------------------------------
t0=$SECONDS
if debs=$(scripts/package.sh --out "$work/debs" 2>"$logs/package.log"); then
    host_deb=$(sed -n 1p <<<"$debs") dkms_deb=$(sed -n 2p <<<"$debs")
    pass build_debs "$(basename "$host_deb") $(basename "$dkms_deb"), $((SECONDS - t0)) s"
else
    tail -20 "$logs/package.log"
    flunk build_debs "see $logs/package.log"
    exit 1
fi

# A fresh copy of SUITE's clean root; sets R.
fresh_copy() {
    local base
    base=$(images/package-root.sh "$1" 2>>"$logs/root-$1.log") || return 1
    R="$work/$1-copy.$$.${#copies[@]}"
    rm -rf --one-file-system "$R"
    copies+=("$R")
    cp -a "$base" "$R" || return 1
    cp "$host_deb" "$dkms_deb" "$R/root/"
}
in_r() { VHCA_ENV="DEBIAN_FRONTEND=noninteractive" vhca_chroot "$R" "$@"; }
apt_r() { # SUITE ARGS...: apt-get in the copy, .debs kept in the suite's cache
    # (dpkg without fsync: the copy is thrown away, and the syncs of a kernel
    # headers package cost a minute on a busy disk)
    local s=$1; shift
    in_r apt-get -y -q -o Dir::Cache::Archives="$VHCA_CACHE/pkgroot-debs-$s/" \
        -o Dpkg::Options::=--force-unsafe-io "$@"
}

# vfio-user VERSION (command 1) to the socket $1: the reply must be a VERSION
# reply without error, carrying the server's capabilities JSON.
vfio_user_version() {
    python3 - "$1" <<'PY'
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
caps = b'{"capabilities":{}}\0'
# header: message id, command, size, flags (0: command), error; then major, minor
s.sendall(struct.pack("<HHIIIHH", 7, 1, 20 + len(caps), 0, 0, 0, 1) + caps)
def recv(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            sys.exit("connection closed after %d bytes" % len(b))
        b += c
    return b
mid, cmd, size, flags, err, major, minor = struct.unpack("<HHIIIHH", recv(20))
data = recv(size - 20)
assert (mid, cmd, flags & 0xF, err) == (7, 1, 1, 0), (mid, cmd, flags, err)
print("VERSION reply %d.%d %s" % (major, minor, json.loads(data.rstrip(b"\0"))["capabilities"]))
PY
}

# The device the unit started: its socket (15 s at most), a VERSION reply on
# it, its counters file, and still running.
unit_probe() { # SOCKET LOG
    local sock=$1 log=$2 _
    for _ in $(seq 150); do
        [ -S "$sock" ] && break
        kill -0 "$vhca_pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -S "$sock" ] || { echo "no socket $sock"; return 1; }
    vfio_user_version "$sock" >>"$log" 2>&1 || { echo "no VERSION reply"; return 1; }
    for _ in $(seq 50); do
        [ -s "$R/var/log/vhca/pkgtest.json" ] && break
        sleep 0.1
    done
    python3 -c 'import json,sys; json.load(open(sys.argv[1]))["port_set"]' \
        "$R/var/log/vhca/pkgtest.json" 2>/dev/null || { echo "no counters file"; return 1; }
    kill -0 "$vhca_pid" 2>/dev/null || { echo "vhca ended by itself"; return 1; }
}

unit_runs() { # SUITE
    local unit="$R/usr/lib/systemd/system/vhca@.service" exec_line log="$logs/$1-unit.log"
    exec_line=$(sed -n 's/^ExecStart=//p' "$unit" | sed 's/%i/pkgtest/g')
    [ -n "$exec_line" ] || { echo "no ExecStart in the unit"; return 1; }
    cat >"$R/etc/vhca/pkgtest-fabric.toml" <<'EOF'
[[node]]
name = "a"
lid = 1
guid = "0x0002c90300000001"
address = "127.0.0.1:18515"

[[node]]
name = "b"
lid = 2
guid = "0x0002c90300000002"
address = "127.0.0.1:18516"
EOF
    cat >"$R/etc/vhca/pkgtest.toml" <<'EOF'
socket = "/run/vhca/pkgtest/vfio-user.sock"
fabric = "/etc/vhca/pkgtest-fabric.toml"
node = "a"
counters-file = "/var/log/vhca/pkgtest.json"
EOF
    # What the unit's RuntimeDirectory= and LogsDirectory= make.
    mkdir -p "$R/run/vhca/pkgtest" "$R/var/log/vhca"
    local sock="$R/run/vhca/pkgtest/vfio-user.sock" _
    # shellcheck disable=SC2086  # the unit's command line, split as systemd does
    vhca_chroot_cmd "$R" $exec_line
    unshare -n -- sh -c 'ip link set lo up && exec "$@"' sh "${VHCA_CHROOT_CMD[@]}" >"$log" 2>&1 &
    vhca_pid=$!
    local why='' st=0
    why=$(unit_probe "$sock" "$log") || st=1
    # The unit's stop: SIGTERM, TimeoutStopSec=10, then SIGKILL.
    kill -TERM "$vhca_pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$vhca_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$vhca_pid" 2>/dev/null; then
        kill -KILL "$vhca_pid"
        [ "$st" = 1 ] || { st=1; why="still running 10 s after SIGTERM"; }
    fi
    local rc=0
    wait "$vhca_pid" || rc=$?
    vhca_pid=
    [ "$st" = 0 ] || { tail -5 "$log"; echo "$why"; return 1; }
    [ "$rc" = 0 ] || { tail -5 "$log"; echo "exit status $rc after SIGTERM"; return 1; }
    echo "socket, VERSION reply, counters file, exit 0 on SIGTERM"
}

capabilities() {
    local desc="$R/usr/share/qemu/vhost-user/50-vhca-net.json" caps
    caps=$(in_r vhca --print-capabilities) || { echo "vhca --print-capabilities failed"; return 1; }
    python3 - "$desc" "$caps" "$R" <<'PY'
import json, os, sys
desc = json.load(open(sys.argv[1]))
caps = json.loads(sys.argv[2])
# docs/interop/vhost-user.json: VhostUserBackend has description, type,
# binary and optional tags; VHostUserBackendCapabilities has type.
types = {"net", "block", "console", "rng", "balloon", "rpmsg", "scsi", "9p",
         "rproc-serial", "caif", "gpu", "input", "vsock", "crypto"}
assert set(desc) <= {"description", "type", "binary", "tags"}, desc
assert isinstance(desc["description"], str) and desc["type"] in types, desc
assert all(isinstance(t, str) for t in desc.get("tags", [])), desc
assert caps["type"] == desc["type"], (caps, desc)
b = desc["binary"]
assert os.path.isabs(b) and os.access(sys.argv[3] + b, os.X_OK), b
print("type %s, binary %s" % (caps["type"], b))
PY
}

systemd_verify() { # SUITE
    apt_r "$1" install systemd >"$logs/$1-systemd.log" 2>&1 || { echo "installing systemd failed"; return 1; }
    local out
    out=$(in_r systemd-analyze verify --man=no vhca@pkgtest.service 2>&1)
    local st=$?
    printf '%s\n' "$out" >"$logs/$1-verify.log"
    [ "$st" = 0 ] || { printf '%s\n' "$out" | tail -5; echo "exit $st"; return 1; }
    if grep -i 'vhca' <<<"$out"; then echo "warnings about the unit"; return 1; fi
    echo "systemd $(in_r dpkg-query -W -f='${Version}' systemd)"
}

install_host() { # SUITE
    apt_r "$1" install "/root/$(basename "$host_deb")" >"$logs/$1-install.log" 2>&1 ||
        { tail -5 "$logs/$1-install.log"; return 1; }
    in_r dpkg-query -W -f='${Status}\n' vhca | grep -qx 'install ok installed' || return 1
    local f
    for f in /usr/bin/vhca /usr/share/man/man1/vhca.1.gz /usr/lib/systemd/system/vhca@.service \
        /etc/vhca/example.toml /usr/share/qemu/vhost-user/50-vhca-net.json; do
        [ -e "$R$f" ] || { echo "no $f"; return 1; }
    done
    in_r vhca --version >/dev/null || { echo "vhca --version failed"; return 1; }
    # The example config must be one vhca reads (its fabric file aside).
    in_r vhca --config /etc/vhca/example.toml --help >/dev/null || { echo "example.toml"; return 1; }
    echo "$(grep -c '^Unpacking' "$logs/$1-install.log") packages"
}

purge_host() { # SUITE
    apt_r "$1" purge vhca >"$logs/$1-purge.log" 2>&1 || return 1
    local f
    for f in /usr/bin/vhca /usr/lib/systemd/system/vhca@.service /etc/vhca/example.toml \
        /usr/share/qemu/vhost-user/50-vhca-net.json; do
        [ ! -e "$R$f" ] || { echo "$f is still there"; return 1; }
    done
}

dkms_install() { # SUITE
    local log="$logs/$1-dkms.log" t=$SECONDS
    vhca_log "$1: apt-get install linux-headers-amd64 vhca-dkms (a module build: about a minute)"
    # trixie's headers bring the kernel image, whose initramfs (a minute of
    # gzip on two cores) nothing here boots: as images/distro-root.sh does,
    # update-initramfs is a no-op in the copy.
    in_r sh -ec 'dpkg-divert --local --rename --add /usr/sbin/update-initramfs >/dev/null
        printf "#!/bin/sh\nexit 0\n" >/usr/sbin/update-initramfs; chmod 755 /usr/sbin/update-initramfs' ||
        return 1
    apt_r "$1" install linux-headers-amd64 "/root/$(basename "$dkms_deb")" >"$log" 2>&1 ||
        { tail -10 "$log"; return 1; }
    local dt=$((SECONDS - t)) K st ko
    K=$(in_r dpkg-query -W -f='${Depends}' linux-headers-amd64 | sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
    [ -n "$K" ] || { echo "no kernel release from linux-headers-amd64"; return 1; }
    st=$(in_r dkms status -m vhca)
    echo "$st" >>"$log"
    grep '^vhca/' <<<"$st" | grep -qF ", $K, x86_64: installed" ||
        { echo "dkms status: ${st:-nothing}"; tail -20 "$log"; return 1; }
    ko=$(cd "$R" && find "lib/modules/$K/updates/dkms" -name 'vhca.ko*' 2>/dev/null | head -1)
    [ -n "$ko" ] || { echo "no vhca.ko in /lib/modules/$K/updates/dkms"; return 1; }
    local vm
    vm=$(in_r modinfo -F vermagic "/$ko")
    [ "${vm%% *}" = "$K" ] || { echo "vermagic ${vm:-none}, not $K"; return 1; }
    echo "$K, /$ko, install ${dt} s"
}

dkms_remove() { # SUITE
    apt_r "$1" remove vhca-dkms >"$logs/$1-dkms-remove.log" 2>&1 || return 1
    local left
    left=$(cd "$R" && find lib/modules -name 'vhca.ko*' 2>/dev/null)
    [ -z "$left" ] || { echo "left: $left"; return 1; }
    [ -z "$(in_r dkms status -m vhca)" ] || { echo "dkms still lists vhca"; return 1; }
}

libvirt_xml() {
    local log="$logs/trixie-libvirt.log"
    if ! apt_r trixie install libvirt-clients libxml2-utils >"$log" 2>&1; then
        skip trixie/libvirt_xml "libvirt-clients could not be installed: $(grep -m1 '^E:' "$log")"
        return 0
    fi
    if in_r virt-xml-validate "$VHCA_REPO/examples/libvirt-domain.xml" domain >>"$log" 2>&1 &&
        grep -q "<interface type='vhostuser'>" examples/libvirt-domain.xml; then
        pass trixie/libvirt_xml "libvirt $(in_r dpkg-query -W -f='${Version}' libvirt-clients)"
    else
        tail -5 "$log"
        flunk trixie/libvirt_xml "see $log"
    fi
}

apparmor_lines() {
    local log="$logs/trixie-apparmor.log"
    apt_r trixie install apparmor >"$log" 2>&1 || { echo "apparmor could not be installed"; return 1; }
    { echo "profile vhca-lines-check {"; grep -v '^#' examples/libvirt-apparmor.txt
      sed -n 's/^#\(unix .*\)$/\1/p' examples/libvirt-apparmor.txt; echo "}"; } >"$R/root/aa-check"
    in_r apparmor_parser --skip-kernel-load --skip-cache --skip-read-cache /root/aa-check >>"$log" 2>&1 ||
        { tail -5 "$log"; return 1; }
    echo "$(grep -vc '^#\|^$' examples/libvirt-apparmor.txt) rules"
}

check() { # NAME FUNCTION ARGS...: PASS with the function's last line, or FAIL with it
    local name=$1 t=$SECONDS out; shift
    if out=$("$@" 2>&1); then pass "$name" "$(tail -1 <<<"$out")${out:+, }$((SECONDS - t)) s"
    else printf '%s\n' "$out" | sed '$d' | tail -5 >&2; flunk "$name" "$(tail -1 <<<"$out")"; fi
}

for suite in $suites; do
    t_suite=$SECONDS
    if ! fresh_copy "$suite"; then
        flunk "$suite/root" "images/package-root.sh $suite failed: $logs/root-$suite.log"
        continue
    fi
    check "$suite/install" install_host "$suite" || true
    if [ -x "$R/usr/bin/vhca" ]; then
        check "$suite/capabilities" capabilities
        check "$suite/unit_runs" unit_runs "$suite"
        check "$suite/systemd_verify" systemd_verify "$suite"
        check "$suite/purge" purge_host "$suite"
    fi
    if [ "$suite" = trixie ]; then
        libvirt_xml
        check trixie/apparmor_lines apparmor_lines
    fi
    rm -rf --one-file-system "$R"
    if fresh_copy "$suite"; then
        check "$suite/dkms" dkms_install "$suite"
        check "$suite/dkms_remove" dkms_remove "$suite"
        rm -rf --one-file-system "$R"
    else
        flunk "$suite/root" "a second copy of the $suite root failed"
    fi
    vhca_log "$suite: $((SECONDS - t_suite)) s"
done
vhca_log "package-tests: $((SECONDS - t_all)) s"
[ "$fail" = 0 ] && echo "package-tests: all passed" || echo "package-tests: FAILED"
exit "$fail"
