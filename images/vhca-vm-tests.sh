#!/bin/bash
# images/vhca-vm-tests.sh — the README's "vhca in your CI" followed as
# written (issue 28): the commands between the README's ci-example markers
# run one by one from the repository root: a C program (examples/ci/hello.c)
# built on the host into the shared folder, then `scripts/vhca-vm run` with
# examples/ci shared into both guests, on the RoCE and on the native IB link
# layer, where examples/ci/ci.sh runs libfabric's fi_pingpong (verbs
# provider, FI_EP_MSG and FI_EP_RDM through ofi_rxm) and the program. Then
# the host reads what each guest wrote into the shared folder, and two more
# runs check one guest alone and that a command's exit status comes back.
#
# Usage: images/vhca-vm-tests.sh
# Prints one "PASS name" / "FAIL name" line per check; exit 0 iff all pass.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh
[ $# -eq 0 ] || { sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2; }
vhca_need_root

fails=0 passes=0
result() { # NAME RC [WHY]
    if [ "$2" = 0 ]; then echo "PASS $1"; passes=$((passes + 1))
    else echo "FAIL $1${3:+ ($3)}"; fails=$((fails + 1)); fi
}

# The README's commands, exactly as a reader copies them.
mapfile -t cmds < <(sed -n '/<!-- ci-example:begin -->/,/<!-- ci-example:end -->/p' README.md |
    grep -E '^(images|scripts)/')
[ "${#cmds[@]}" -ge 3 ] || { echo "FAIL readme_ci_example (no commands between the markers)"; exit 1; }
rm -f examples/ci/hello examples/ci/result-*.txt
for c in "${cmds[@]}"; do
    echo "=== $c"
    name=$(sed -E 's/.*--link ([a-z]+).*/vhca_vm_\1/; t; s/^images\/in-root.sh gcc.*/build_on_host/; t; s/.*/readme_cmd/' <<<"$c")
    t0=$SECONDS
    out=$(bash -c "$c" 2>&1); rc=$?
    printf '%s\n' "$out" | sed 's/^/    /'   # the guests' own PASS lines, indented
    echo "($((SECONDS - t0)) s)"
    result "$name" "$rc" "exit $rc"
    case "$name" in
        vhca_vm_*)
            l=${name#vhca_vm_}
            grep -qE '^vhca-vm: accelerator (kvm|tcg) \(' <<<"$out"; result "accelerator_said_$l" $?
            # What each guest wrote in the shared folder, read on the host.
            ok=0
            for r in server client; do
                f=examples/ci/result-$l-$r.txt
                for s in fi_info_verbs fi_pingpong_msg fi_pingpong_rdm hello; do
                    grep -qx "PASS $s" "$f" 2>/dev/null || { echo "$f: no PASS $s"; ok=1; }
                done
            done
            result "share_written_by_both_guests_$l" "$ok"
            # The data checks ran (-c) and every size was exchanged.
            n=$(grep -c '^1m  *20  *=20 ' <<<"$out")
            [ "$n" = 4 ]; result "fi_pingpong_all_sizes_$l" $? "$n of 4 runs reached 1 MiB"
            ;;
    esac
done

# Bad arguments: a clear one-line error and a failing status, before anything boots.
bad=0
for args in "run --link foo -- true" "run --guests 3 -- true" "run --share /nonexistent -- true" \
    "run --link ib" "frobnicate"; do
    # shellcheck disable=SC2086  # one word each
    out=$(timeout 30 scripts/vhca-vm $args 2>&1); rc=$?
    if [ "$rc" = 0 ] || [ "$rc" = 124 ] || ! grep -qE 'error:|usage|Usage' <<<"$out"; then
        echo "vhca-vm $args: exit $rc: $out"; bad=1
    fi
done
result bad_arguments_are_refused_at_once "$bad"

# One guest; the command's exit status comes back as vhca-vm's.
out=$(scripts/vhca-vm run --guests 1 --link roce --timeout 300 -- \
    'ibv_devinfo -d $VHCA_DEV | grep -q PORT_ACTIVE && [ "$VHCA_ROLE" = server ] && exit 7' 2>&1); rc=$?
printf '%s\n' "$out" | tail -8 | sed 's/^/    /'
[ "$rc" = 7 ]; result single_guest_status_comes_back $? "exit $rc, wanted 7"
! grep -q '^=== B' <<<"$out"; result single_guest_boots_one $?

rm -f examples/ci/hello examples/ci/result-*.txt
echo "vhca-vm checks: $passes passed, $fails failed"
[ "$fails" = 0 ]
