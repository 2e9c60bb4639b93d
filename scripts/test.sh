#!/usr/bin/env bash
# The test suite: formatting, lints, unit, property and simulation tests, the
# conformance tests against tshark, fuzzing, and the VM tiers. Installs what it
# needs (Rust, tshark; the VM scripts build their roots and guests in the cache).
#
# Usage: scripts/test.sh [--fresh-cache [--keep-cache]] [--only REGEX] [--list]
#   Every stage runs, even after one fails (issue 24); the run ends with one
#   table: each stage, PASS/FAIL/SKIP, its time and its log, then the line
#   "stages: N passed, N failed, N skipped". Exit status 0 iff no stage failed.
#   A stage that cannot run for a reason outside the project exits 77 after a
#   line "SKIP: <reason>"; it counts as skipped, never as passed.
#   --fresh-cache  run against an empty cache, as a new machine would: VHCA_CACHE
#                  is a new folder /var/cache/vhca-fresh.XXXXXX (removed at the
#                  end unless --keep-cache) and every other VHCA_* variable is
#                  cleared, so nothing set by hand or left in /var/cache/vhca
#                  can stand in for a missing input. Run it before resolving
#                  an issue.
#   --only REGEX   only the stages whose names match (e.g. 'fmt|clippy').
#   --list         print the stage names and exit.
#   env VHCA_TEST_LOGS  folder for the stage logs (default
#                  target/test-logs/<date>-<pid>).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

fresh=0 keep=0 only='' list=0
while [ $# -gt 0 ]; do
    case "$1" in
        --fresh-cache) fresh=1; shift;;
        --keep-cache) keep=1; shift;;
        --only) [ $# -ge 2 ] || { echo "test.sh: --only needs a regex" >&2; exit 2; }; only=$2; shift 2;;
        --list) list=1; shift;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) echo "test.sh: unknown argument $1 (try --help)" >&2; exit 2;;
    esac
done
[ "$keep" = 0 ] || [ "$fresh" = 1 ] || { echo "test.sh: --keep-cache goes with --fresh-cache" >&2; exit 2; }

# name|command (run by bash from the repository root). The order is the
# dependency order: the VM stages use the binaries cargo-test built.
STAGES=(
    "setup|ensure_rust; ensure_tshark (scripts/lib.sh)"
    # docs/FEATURES.md's status and tests columns as the test names give them.
    "fmt|cargo fmt --all -- --check && scripts/features.py --check"
    "clippy|cargo clippy --workspace --all-targets --quiet -- -D warnings"
    # The tshark conformance tests, the TAP tests and the two-namespace tests
    # fail instead of skipping when tshark, CAP_NET_ADMIN or ip netns is
    # missing (the suite runs as root).
    "cargo-test|VHCA_REQUIRE_TSHARK=1 VHCA_REQUIRE_TAP=1 VHCA_REQUIRE_NETNS=1 cargo test --workspace --no-fail-fast"
    # tools/wireshark/vhca.lua on a live capture of the UDP underlay: two
    # devices back to back and through a switch, with and without a fabric
    # key, dissected as InfiniBand by tshark (issue 28 item 4).
    "wire-dissect|scripts/wire-dissect-test.sh"
    # Every target for a short bounded time (fuzz/README.md has the long run).
    "fuzz|scripts/fuzz.sh --seconds 15"
    # The device under a real QEMU (host root and guest are cached in $VHCA_CACHE).
    "device-smoke|images/device-smoke.sh"
    "vm-tests|images/vm-tests.sh"
    # Other guest kernels and rdma-core releases (issue 17): vhca.ko against 6.1,
    # 6.12 and sid's headers, the provider packages, pingpongs on 6.1 and 6.12.
    "distro-tests|images/distro-tests.sh"
    # The Debian packages (issue 28): vhca and vhca-dkms installed with apt into
    # clean bookworm and trixie roots, the unit verified and its command line
    # run, DKMS builds the module; the libvirt example validated.
    "packages|images/package-tests.sh"
    # README's "Your own QEMU" section followed as written: two VMs, ibv_rc_pingpong.
    "own-qemu|images/own-qemu.sh"
    "roce-tests|images/roce-tests.sh"
    # The workloads without rdma_cm (UCX, MPI) over the InfiniBand link layer too.
    "wl-ib|images/wl-ib.sh"
    # A switched InfiniBand subnet brought up by OpenSM in a guest, the diags,
    # IPoIB and rdma_cm over it (issue 26).
    "subnet|images/subnet-tests.sh"
    # A fabric past one host (issue 27): OpenSM in a guest over a 32-HCA,
    # 12-switch fat tree in two namespaces joined by an MTU-1500 veth, the
    # test driver's all-to-all RC, a spine killed under RC streams.
    "fabric|images/fabric-tests.sh"
    # The README's "vhca in your CI" as written (issue 28): scripts/vhca-vm run
    # with a shared folder, libfabric's fi_pingpong and a program built on the
    # host, on both link layers.
    "vhca-vm|images/vhca-vm-tests.sh"
    "vm-reload|images/vm-reload.sh"
    "vm-reboot|images/vm-reboot.sh"
    "pyverbs-ib|images/pyverbs.sh"
    # The same suite with a RoCEv2 port: the rdmacm tests run (WF-10).
    "pyverbs-roce|images/pyverbs.sh --roce"
)

if [ "$list" = 1 ]; then
    for s in "${STAGES[@]}"; do echo "${s%%|*}"; done
    exit 0
fi

if [ "$fresh" = 1 ]; then
    # Nothing from the environment may stand in for an input: clear every
    # VHCA_* variable (the cache, a source clone, a mirror, a binary).
    while read -r v; do unset "$v"; done < <(compgen -e | grep '^VHCA_' || true)
    mkdir -p /var/cache || exit 1
    VHCA_CACHE=$(mktemp -d /var/cache/vhca-fresh.XXXXXX) || exit 1
    export VHCA_CACHE
    echo "test.sh: fresh cache $VHCA_CACHE (every other VHCA_* variable cleared)"
    if [ "$keep" = 0 ]; then
        # The VM scripts leave nothing mounted (their mounts live in private
        # namespaces), so the folder can go; a process still inside it is a
        # bug the FAIL lines above already show.
        trap 'rm -rf --one-file-system "$VHCA_CACHE"' EXIT
    fi
fi

logs=${VHCA_TEST_LOGS:-target/test-logs/$(date -u +%Y%m%dT%H%M%SZ)-$$}
mkdir -p "$logs" || exit 1
logs=$(cd "$logs" && pwd)

# The toolchain and tshark: a stage of its own, so a failed install is one
# FAIL line rather than an abort; the later cargo stages then fail too.
setup() {
    # shellcheck source=lib.sh
    . scripts/lib.sh
    ensure_rust && ensure_tshark && cargo --version && tshark --version | head -1
}
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

names=() results=() times=() logfiles=() reasons=()
t_all=$SECONDS
for s in "${STAGES[@]}"; do
    name=${s%%|*} cmd=${s#*|}
    if [ -n "$only" ] && ! [[ $name =~ $only ]]; then continue; fi
    log="$logs/$name.log"
    echo "== $name: $cmd" >&2
    t0=$SECONDS
    if [ "$name" = setup ]; then
        (setup) 2>&1 | tee "$log"
    else
        bash -c "$cmd" </dev/null 2>&1 | tee "$log"
    fi
    rc=${PIPESTATUS[0]}
    dt=$((SECONDS - t0))
    reason=''
    case "$rc" in
        0) res=PASS;;
        77) res=SKIP
            reason=$(grep -m1 '^SKIP' "$log" | sed 's/^SKIP:\{0,1\} *//')
            [ -n "$reason" ] || { res=FAIL; reason='exit 77 without a SKIP line'; };;
        *) res=FAIL reason="exit $rc";;
    esac
    # The setup stage puts Rust on PATH for the stages after it.
    [ "$name" = setup ] && [ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
    echo "== $name: $res in ${dt}s${reason:+ ($reason)}" >&2
    names+=("$name") results+=("$res") times+=("$dt") logfiles+=("$log") reasons+=("$reason")
done

pass=0 fail=0 skip=0
echo
echo "Summary (logs in $logs):"
printf '  %-14s %-5s %7s  %s\n' stage result time log
for i in "${!names[@]}"; do
    case "${results[$i]}" in PASS) pass=$((pass + 1));; FAIL) fail=$((fail + 1));; SKIP) skip=$((skip + 1));; esac
    printf '  %-14s %-5s %6ss  %s%s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}" \
        "${logfiles[$i]}" "${reasons[$i]:+  (${reasons[$i]})}"
done
echo "  total time $((SECONDS - t_all))s${VHCA_CACHE:+, cache ${VHCA_CACHE}}"
[ "$skip" = 0 ] || echo "  $skip stage(s) skipped: they did not run and are not counted as passed"
# A failed stage's own FAIL lines (at most 8), here at the end: a CI that
# shows only the output's tail (and not the log files) then still says which
# check failed. "must" lines are the wire-dissect's negative controls.
for i in "${!names[@]}"; do
    [ "${results[$i]}" = FAIL ] || continue
    echo "  ${names[$i]} failed; its last FAIL lines:"
    grep -aE '(^|[^A-Za-z])(FAIL|FAILED|panicked|error:)' "${logfiles[$i]}" |
        grep -av 'as it must' | grep -av '^RETRY ' | tail -n 8 | cut -c1-300 | sed 's/^/    /'
done
echo "stages: $pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
