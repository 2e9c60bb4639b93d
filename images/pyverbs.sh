#!/bin/bash
# images/pyverbs.sh — run rdma-core's pyverbs test suite in a guest against vhca0.
#
# Usage: images/pyverbs.sh [OPTIONS] [MODULE...]
#   MODULE: test module names (test_qp, test_cq, ...; default: every
#   tests/test_*.py shipped by python3-pyverbs).
#
# What it does:
#   - builds (or reuses, all cached by content) the vhca binary, vhca.ko and
#     libvhca exactly as vm-pair.sh does (same cache keys), and an overlay
#     with vhca.ko, libvhca, /etc/libibverbs.d/vhca.driver and the same init
#     hook (modprobe ib_core ib_uverbs vhca, wait for port 1 ACTIVE);
#   - builds (or reuses) a second overlay, $VHCA_CACHE/pyverbs-<key>/ (key =
#     this script's overlay section + the host root's key): python3 (binary, the whole stdlib
#     with its __pycache__, minus test/idlelib/tkinter/...), pyverbs from
#     /usr/lib/python3/dist-packages, the ldd closure of python3, of every
#     extension module in lib-dynload and of pyverbs; and the test suite,
#     rdma-core's tests/ from the python3-pyverbs .deb (the root unpacks no
#     /usr/share/doc; the .deb comes from $VHCA_CACHE/debs or `apt-get
#     download` in the root), *.py.gz decompressed, at /opt/rdma-core/tests;
#   - native IB: writes a two-node fabric in SM mode (the guest's node a
#     cabled back to back to a node b with no guest), starts a vhca process
#     for each, boots one guest with a's device, whose hook starts OpenSM
#     (the SA rdma_cm's route resolution and multicast joins need), loads
#     ib_ipoib and gives ib0 10.98.0.1/24 (the address test_rdmacm finds);
#     RoCE: see --roce;
#   - runs the modules in one python3 process, each as
#       python3 tests/run_tests.py --dev vhca0 -v tests.MODULE
#     would (its timeout by faulthandler), except test_flow, alone
#     (rdma-core 56.1 crashes Python in cleanup after test_flow when more runs
#     after it); a module the shared process did not finish (crash, timeout)
#     runs again alone, and the report shows a PYVERBS-SHARED line;
#   - prints per-module and total run/pass/fail/error/skip counts (from
#     unittest's "Ran N tests" and "OK/FAILED (...)" lines; pass = run - fail -
#     error - skip - expected failures), the FAIL/ERROR tests with the last
#     line of their traceback, and modules that crashed or timed out.
#
# Options:
#   --out DIR          keep console, vhca log, per-module logs in DIR
#                      (default: a new $VHCA_CACHE/run/pyverbs.XXXXXX, kept)
#   --module-timeout S per-module timeout in the guest (default 600)
#   --timeout S        guest timeout (default 5400)
#   --vhca BIN         use this vhca binary instead of building one
#   --vhca-log LEVEL   vhca --log level (default warn)
#   --vhca-arg ARG     extra vhca argument (repeatable)
#   --mem SIZE         guest RAM (default 2G)
#   --hugepages N      2 MiB huge pages reserved in the guest (default 32)
#   --verbose          full guest kernel log on the console
#   --rebuild          rebuild the python/pyverbs overlay
#   --roce             the device's port is Ethernet with RoCEv2 (WF-10): vhca
#                      on a TAP in a network namespace of this run's own, the
#                      guest's NIC (10.98.0.1/24) served by vhca over
#                      vhost-user-net on the port's MAC, so the rdmacm tests
#                      find vhca0's netdev and run
#
# Exit status: 0 if no test failed or errored and no module crashed.
#
# Example:
#   images/pyverbs.sh                      # whole suite
#   images/pyverbs.sh test_qp test_cq      # two modules
set -euo pipefail
. "$(dirname "$0")/lib.sh"

out='' mtimeout=600 timeout=5400 hugepages=32 bin='' vhca_log=warn mem=2G verbose=0 rebuild=0 roce=0
vhca_args=()
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) need "$@"; out=$2; shift 2;;
        --module-timeout) need "$@"; mtimeout=$2; shift 2;;
        --timeout) need "$@"; timeout=$2; shift 2;;
        --vhca) need "$@"; bin=$2; shift 2;;
        --vhca-log) need "$@"; vhca_log=$2; shift 2;;
        --vhca-arg) need "$@"; vhca_args+=("$2"); shift 2;;
        --mem) need "$@"; mem=$2; shift 2;;
        --hugepages) need "$@"; hugepages=$2; shift 2;;
        --verbose) verbose=1; shift;;
        --rebuild) rebuild=1; shift;;
        --roce) roce=1; shift;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; break;;
        -*) vhca_die "unknown option $1 (try --help)";;
        *) break;;
    esac
done
modules=("$@")
vhca_need_root

# --- builds (as vm-pair.sh) --------------------------------------------------
ROOT=$(vhca_ensure_root)
GUEST=$("$VHCA_IMAGES/guest.sh")
K=$(cat "$GUEST/kver")

[ -n "$bin" ] || bin=$(vhca_build_vhca)
[ -x "$bin" ] || vhca_die "no vhca binary at $bin"

KO=$(vhca_build_module "$K")
PROV=$("$VHCA_REPO/guest-driver/provider/build.sh")
SO=$(ls "$PROV"/libvhca-rdmav*.so)

# --- the python + pyverbs + tests overlay (cached) ---------------------------
# Keyed by this section alone: the guest's hooks and script below do not
# rebuild it.
PYKEY=$( (sed -n '/^# --- the python/,/^# --- run folder/p' "$0"; vhca_root_key) |
    sha256sum | cut -c1-16)
PYOV="$VHCA_CACHE/pyverbs-$PYKEY"
if [ "$rebuild" = 1 ] || [ ! -e "$PYOV/.complete" ]; then
    vhca_log "building the python/pyverbs overlay in $PYOV"
    tmp="$PYOV.tmp.$$"
    rm -rf "$tmp" "$PYOV"
    mkdir -p "$tmp/ov"
    deb=$(ls "$VHCA_CACHE"/debs/python3-pyverbs_*.deb 2>/dev/null | tail -1 || true)
    vhca_chroot "$ROOT" /bin/bash -euo pipefail -c '
        O=$1/ov deb=$2
        ver=$(dpkg-query -W -f "\${Version}" python3-pyverbs)
        if [ -z "$deb" ] || ! dpkg-deb -f "$deb" Version | grep -qxF "$ver"; then
            (cd "$1" && apt-get download -q "python3-pyverbs=$ver" >/dev/null)
            deb=$(ls "$1"/python3-pyverbs_*.deb)
        fi
        mkdir -p "$1/deb"
        dpkg-deb -x "$deb" "$1/deb"
        mkdir -p "$O/opt/rdma-core"
        cp -a "$1/deb/usr/share/doc/rdma-core/tests" "$O/opt/rdma-core/tests"
        find "$O/opt/rdma-core/tests" -name "*.gz" -exec gunzip -f {} +
        add() { # PATH: copy it (symlinks kept, and their targets) under $O
            local f=$1
            while :; do
                [ -e "$O$f" ] || [ -L "$O$f" ] || { mkdir -p "$O$(dirname "$f")"; cp -a "$f" "$O$f"; }
                [ -L "$f" ] || break
                local t; t=$(readlink "$f")
                case "$t" in /*) f=$t;; *) f=$(dirname "$f")/$t;; esac
            done
        }
        add_elf() {
            local l
            for l in $(ldd "$1" 2>/dev/null | awk "\$2 == \"=>\" && \$3 ~ /^\\// {print \$3} \$1 ~ /^\\// {print \$1}"); do
                case "$l" in /lib/*|/lib64/*) l=/usr$l;; esac
                add "$l"
            done
        }
        PY=$(readlink -f /usr/bin/python3)
        PV=$(basename "$PY")
        add /usr/bin/python3; add "$PY"; add_elf "$PY"
        mkdir -p "$O/usr/lib"
        (cd /usr/lib && tar -cf - --exclude="$PV/test" --exclude="$PV/idlelib" \
            --exclude="$PV/tkinter" --exclude="$PV/turtledemo" --exclude="$PV/ensurepip" \
            --exclude="$PV/lib2to3" --exclude="$PV/config-*" "$PV") | tar -xf - -C "$O/usr/lib"
        mkdir -p "$O/usr/lib/python3/dist-packages"
        cp -a /usr/lib/python3/dist-packages/pyverbs "$O/usr/lib/python3/dist-packages/"
        for f in $(find "/usr/lib/$PV/lib-dynload" /usr/lib/python3/dist-packages/pyverbs -name "*.so"); do
            add_elf "$f"
        done
        # pre-compile the tests and pyverbs .py files (TCG is slow at it)
        python3 -m compileall -q -s "$O" -p / "$O/opt/rdma-core/tests" "$O/usr/lib/python3/dist-packages/pyverbs" >/dev/null || true
        echo "$ver" >"$1/pyverbs.version"
    ' sh "$tmp" "$deb" || vhca_die "building the pyverbs overlay failed"
    touch "$tmp/.complete"
    mv "$tmp" "$PYOV"
fi

# --- run folder, fabric, vhca overlay ----------------------------------------
mkdir -p "$VHCA_RUN"
if [ -z "$out" ]; then
    out=$(mktemp -d "$VHCA_RUN/pyverbs.XXXXXX")
else
    mkdir -p "$out"
    out=$(realpath "$out")
fi
sock="$VHCA_RUN/pyverbs-$$.sock"
fab=$((20000 + RANDOM % 20000))
# Native IB: a subnet as rdma_cm needs one (IBA 14, 15): the guest's node a
# cabled back to back to a node b with no guest (a second vhca process, the
# link's other end), the ports waiting in Init for OpenSM in the guest, whose
# SA answers rdma_cm's PathRecord queries and multicast joins.
cat >"$out/fabric.toml" <<EOF
subnet = "sm"

[[node]]
name = "a"
lid = 1
guid = "0x0200000000000a01"
address = "127.0.0.1:$fab"

[[node]]
name = "b"
lid = 2
guid = "0x0200000000000a02"
address = "127.0.0.1:$((fab + 1))"

[[link]]
ends = ["a", "b"]
EOF

ov="$out/overlay"
rm -rf "$ov"
want=ACTIVE
[ "$roce" = 1 ] || want='INIT|ACTIVE'
vhca_guest_overlay "$ov" "$K" "$KO" "$SO" "$PROV/vhca.driver" "$want"
if [ "$roce" = 0 ]; then
    # rdma_cm over InfiniBand (test_rdmacm): an IPoIB address on the port
    # for the tests to find (base.py: the device's netdev, its first
    # address) and a subnet administrator for route resolution (a
    # PathRecord query, IBA 15.2.5.16) and multicast joins (MCMemberRecord).
    # OpenSM in the guest activates both ports of the fabric above and
    # answers the SA queries; ib_ipoib joins the broadcast group.
    cat >"$ov/etc/vhca-init.d/60-pyverbs-ib.sh" <<'EOF'
# images/pyverbs.sh (native IB): OpenSM, IPoIB 10.98.0.1/24 on ib0.
modprobe -a ib_umad ib_ipoib rdma_ucm || echo "vhca-hook: modprobe ib_umad ib_ipoib rdma_ucm failed"
mkdir -p /var/log /var/cache/opensm /etc/opensm
printf 'force_log_flush TRUE\n' >/etc/opensm/opensm.conf
opensm -F /etc/opensm/opensm.conf -f /var/log/opensm.log >/var/log/opensm.out 2>&1 &
i=0
until grep -q 'SUBNET UP' /var/log/opensm.log 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
grep -q 'SUBNET UP' /var/log/opensm.log 2>/dev/null || echo "vhca-hook: OpenSM: no SUBNET UP in 60 s"
i=0
until grep -q ACTIVE /sys/class/infiniband/vhca0/ports/1/state || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
grep -E ' ERR ' /var/log/opensm.log | head -5
i=0
until [ -e /sys/class/net/ib0 ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
ip link set ib0 up && ip addr add 10.98.0.1/24 dev ib0 || echo "vhca-hook: no IPoIB interface ib0"
echo "vhca-hook: SM lid $(cat /sys/class/infiniband/vhca0/ports/1/sm_lid 2>/dev/null), port $(cat /sys/class/infiniband/vhca0/ports/1/state 2>/dev/null), ib0 $(ip -o -4 addr show ib0 2>/dev/null | awk "{print \$4}")"
EOF
fi

# --- the guest's script --------------------------------------------------------
if [ ${#modules[@]} -eq 0 ]; then
    mapfile -t modules < <(cd "$PYOV/ov/opt/rdma-core/tests" && ls test_*.py | sed 's/\.py$//')
fi
{
    echo "cd /opt/rdma-core/tests"
    echo "export HOME=/tmp PYTHONDONTWRITEBYTECODE=1 PYTHONFAULTHANDLER=1"
    # 2M huge pages for the tests that want them (u.requires_huge_pages)
    echo "echo $hugepages >/proc/sys/vm/nr_hugepages 2>/dev/null || true"
    echo "python3 -c 'import pyverbs.device as d; print(\"pyverbs devices:\", [x.name.decode() for x in d.get_device_list()])'"
    # The modules share one python3 process (shared.py below): under TCG a
    # process's start and the suite's imports cost ~3.8 s, 47 times a run
    # (~3 of the stage's ~4.7 minutes went to them). test_flow, whose
    # objects crash Python's cleanup (rdma-core 56.1) when more runs after
    # it, keeps a process of its own. A module the shared process did not
    # finish (a crash, or its timeout: faulthandler ends the process) runs
    # again alone, as before, with those after it; the report notes it.
    echo "rm -f /tmp/pyverbs-done"
    echo "cat >/tmp/pyverbs-shared.py <<'PYEOF'"
    cat <<'PYEOF'
# images/pyverbs.sh: the modules named on the command line in this one
# process, each as `run_tests.py --dev vhca0 -v tests.MODULE` would run it,
# between the same markers; each one finished is added to /tmp/pyverbs-done.
import faulthandler, os, sys, unittest
from importlib.machinery import SourceFileLoader
timeout, modules = int(sys.argv[1]), sys.argv[2:]
sys.argv = ['run_tests.py', '--dev', 'vhca0', '-v']
sys.path.insert(0, os.getcwd())  # run_tests.py's own folder, as for it
from args_parser import parser
tests = SourceFileLoader('tests', os.path.join(os.getcwd(), '__init__.py')).load_module()
parser.parse_args()
for m in modules:
    print('=== PYVERBS-MODULE-BEGIN', m, flush=True)
    faulthandler.dump_traceback_later(timeout, exit=True)
    prog = unittest.main(module=tests, argv=['run_tests.py', '--verbose', 'tests.' + m], exit=False)
    faulthandler.cancel_dump_traceback_later()
    sys.stderr.flush()
    print('=== PYVERBS-MODULE-END', m, 'rc=%d' % (0 if prog.result.wasSuccessful() else 1), flush=True)
    with open('/tmp/pyverbs-done', 'a') as f:
        f.write(m + '\n')
PYEOF
    echo "PYEOF"
    shared=() alone=()
    for m in "${modules[@]}"; do
        if [ "$m" = test_flow ]; then alone+=("$m"); else shared+=("$m"); fi
    done
    if [ ${#shared[@]} -gt 0 ]; then
        echo "python3 /tmp/pyverbs-shared.py $mtimeout ${shared[*]} 2>&1 || echo \"=== PYVERBS-SHARED-EXIT rc=\$?\""
    fi
    # One module in a process of its own, between the markers.
    cat <<EOF
alone() {
    echo "=== PYVERBS-MODULE-BEGIN \$1"
    timeout -s KILL $mtimeout python3 run_tests.py --dev vhca0 -v tests.\$1 2>&1
    echo "=== PYVERBS-MODULE-END \$1 rc=\$?"
}
EOF
    for m in "${shared[@]}"; do
        cat <<EOF
if ! grep -qx $m /tmp/pyverbs-done; then
    echo "=== PYVERBS-SHARED-RERUN $m: not finished in the shared process, run alone"
    alone $m
fi
EOF
    done
    for m in "${alone[@]}"; do
        echo "alone $m"
    done
} >"$out/guest.sh"

# --- teardown ------------------------------------------------------------------
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -f "$sock" "${sock%.sock}-net.sock" "${sock%.sock}-b.sock"
    [ -z "$netns" ] || ip netns del "$netns" 2>/dev/null || true
}
netns=''
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

nic=()
if [ "$roce" = 1 ]; then
    # A namespace of this run's own with a bridge and the port's TAP: frames
    # never leave it.
    netns="vhca-pyverbs-$$" mac=52:54:00:98:00:01
    ip netns add "$netns"
    ip -n "$netns" link set lo up
    ip -n "$netns" link add br0 type bridge
    ip -n "$netns" link set br0 up
    ip -n "$netns" tuntap add ta mode tap
    ip -n "$netns" link set ta master br0
    ip -n "$netns" link set ta up
    ip netns exec "$netns" "$bin" --socket "$sock" --tap ta --mac "$mac" \
        --vhost-user-net "${sock%.sock}-net.sock" --log "$vhca_log" \
        "${vhca_args[@]}" >"$out/vhca.log" 2>&1 &
    nic=(--append vhca.ip=10.98.0.1/24
        --qemu-arg -chardev --qemu-arg "socket,id=vn0,path=${sock%.sock}-net.sock"
        --qemu-arg -netdev --qemu-arg vhost-user,id=vn1,chardev=vn0
        --qemu-arg -device --qemu-arg "virtio-net-pci,netdev=vn1,mac=$mac,romfile=")
else
    "$bin" --socket "$sock" --fabric "$out/fabric.toml" --node a --log "$vhca_log" \
        "${vhca_args[@]}" >"$out/vhca.log" 2>&1 &
    pids+=($!)
    # Node b: no guest, its port the other end of a's cable.
    "$bin" --socket "${sock%.sock}-b.sock" --fabric "$out/fabric.toml" --node b \
        --log "$vhca_log" >"$out/vhca-b.log" 2>&1 &
fi
pids+=($!)
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || vhca_die "vhca did not create its socket (log: $out/vhca.log)"
if [ "$roce" = 1 ]; then
    for _ in $(seq 100); do [ -S "${sock%.sock}-net.sock" ] && break; sleep 0.1; done
fi

vm_opts=(--quiet --timeout "$timeout" --mem "$mem" --overlay "$ov" --overlay "$PYOV/ov")
[ "$verbose" = 1 ] && vm_opts+=(--verbose)
vhca_log "running ${#modules[@]} module(s); console: $out/console.log"
rc=0
"$VHCA_IMAGES/run-vm.sh" "${vm_opts[@]}" --name vhca-pyverbs --log "$out/console.log" \
    --vfio-user "$sock" "${nic[@]}" --script "$out/guest.sh" 2>"$out/run-vm.err" || rc=$?
cleanup
pids=()

# --- report --------------------------------------------------------------------
tr -d '\r' <"$out/console.log" >"$out/console.txt"
grep -E 'vhca-hook:|pyverbs devices:|PYVERBS-SHARED|Oops|BUG:|WARNING:|Call Trace' "$out/console.txt" || true
mkdir -p "$out/modules"
awk -v dir="$out/modules" '
    # A module run again alone (after the shared process ended in it)
    # starts its log afresh.
    /^=== PYVERBS-MODULE-BEGIN / { if (f != "") close(f); f = dir "/" $3 ".log"; close(f); printf "" > f; close(f); next }
    /^=== PYVERBS-MODULE-END / { print >> f; close(f); f = ""; next }
    f != "" { print >> f }' "$out/console.txt"
status=0
printf '%-26s %5s %5s %5s %5s %5s  %s\n' module run pass fail error skip note
T_run=0 T_pass=0 T_fail=0 T_err=0 T_skip=0
for m in "${modules[@]}"; do
    f="$out/modules/$m.log"
    note=''
    if [ ! -e "$f" ]; then
        printf '%-26s %5s %5s %5s %5s %5s  %s\n' "$m" - - - - - "not run (guest rc $rc)"
        status=1; continue
    fi
    mrc=$(sed -n 's/^=== PYVERBS-MODULE-END .* rc=//p' "$f")
    ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$f" | tail -1)
    res=$(grep -E '^(OK|FAILED)( \(|$)' "$f" | tail -1 || true)
    get() { echo "$res" | grep -oE "$1=[0-9]+" | cut -d= -f2 || true; }
    fa=$(get failures) er=$(get errors) sk=$(get skipped) xf=$(get 'expected failures') us=$(get 'unexpected successes')
    fa=${fa:-0} er=${er:-0} sk=${sk:-0} xf=${xf:-0} us=${us:-0}
    if [ -z "$ran" ] || [ -z "$res" ]; then
        ran=${ran:-0}
        note="no summary (rc=${mrc:-?}: crash/timeout)"; status=1
        # count the tests the verbose log reported before the crash
        fa=$(grep -cE ' \.\.\. FAIL$' "$f" || true) er=$(grep -cE ' \.\.\. ERROR$' "$f" || true)
        sk=$(grep -cE ' \.\.\. skipped' "$f" || true)
        ran=$(grep -cE ' \.\.\. (ok|FAIL|ERROR|skipped.*)$' "$f" || true)
        er=$((er + 1))
    elif [ "${mrc:-0}" != 0 ] && [ "$fa" = 0 ] && [ "$er" = 0 ]; then
        note="rc=$mrc after the summary (crash in cleanup)"
    fi
    pass=$((ran - fa - er - sk - xf))
    [ "$pass" -lt 0 ] && pass=0
    [ $((fa + er)) -gt 0 ] && status=1
    printf '%-26s %5s %5s %5s %5s %5s  %s\n' "$m" "$ran" "$pass" "$fa" "$er" "$sk" "$note"
    T_run=$((T_run + ran)) T_pass=$((T_pass + pass)) T_fail=$((T_fail + fa))
    T_err=$((T_err + er)) T_skip=$((T_skip + sk))
done
printf '%-26s %5s %5s %5s %5s %5s\n' TOTAL "$T_run" "$T_pass" "$T_fail" "$T_err" "$T_skip"
# The failing tests, each with the last line of its traceback.
for m in "${modules[@]}"; do
    f="$out/modules/$m.log"
    [ -e "$f" ] || continue
    awk -v m="$m" '
        /^(FAIL|ERROR): / { if (name != "") print "  " m ": " name " -- " last; name = $0; last = ""; next }
        /^----------+$/ || /^==========+$/ { if (name != "" && last != "") { print "  " m ": " name " -- " last; name = "" } next }
        name != "" && NF { last = $0 }
        END { if (name != "") print "  " m ": " name " -- " last }' "$f"
done
vhca_log "logs in $out (console.txt, modules/*.log, vhca.log); guest exit $rc"
exit "$status"
