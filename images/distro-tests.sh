#!/bin/bash
# images/distro-tests.sh — the "any distro guest" stage of the test suite
# (issue 17):
#   1. images/kmod-matrix.sh: vhca.ko builds with W=1 against Debian's 6.1
#      (bookworm), 6.12 (trixie) and sid's newest kernel headers, and from
#      the DKMS source tree;
#   2. guest-driver/provider/package.sh for bookworm (libibverbs 44.0) and
#      trixie (56.1): the patch series applies to trixie's rdma-core source,
#      the provider builds in each release's root (bookworm's against its own
#      libibverbs headers, since its 44.0 source is not on the mirror: issue
#      24) and that release's libibverbs loads it with every symbol bound;
#      `apt-get install -s ./<deb>` in that release's root
#      resolves the package's dependencies the way a user's
#      `apt install ./<deb>` does (simulated: the cached roots stay as built);
#   3. two bookworm guests (6.1, their own modules, vhca.ko built against
#      6.1's headers, the bookworm package installed with dpkg) run
#      ibv_rc_pingpong (also with -N, the extended QP API whose structures
#      the provider shares with libibverbs 44.0) and ibv_ud_pingpong
#      (images/vm-tests.sh --only);
#   4. two trixie guests with the trixie package run ibv_rc_pingpong.
# Usage: images/distro-tests.sh [--no-vm]
#   Prints PASS/FAIL per step; exit 0 iff all pass. --no-vm: steps 1 and 2.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh
vm=1
case "${1:-}" in
    --no-vm) vm=0;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
    "") ;;
    *) vhca_die "unknown argument $1 (try --help)";;
esac
vhca_need_root
fail=0
step() { # NAME CMD...: run, print PASS/FAIL
    local name=$1; shift
    if "$@"; then echo "PASS $name"; else echo "FAIL $name"; fail=1; fi
}

step kmod_matrix images/kmod-matrix.sh bookworm trixie sid

apt_sim() { # RELEASE
    local deb root
    deb=$(guest-driver/provider/package.sh --release "$1") || return 1
    root=$(images/distro-root.sh "$1") || return 1
    # The .deb must be visible inside the root: it is under $VHCA_CACHE.
    vhca_chroot "$root" apt-get install -s -q "$deb" >"$deb.apt-sim.log" 2>&1 ||
        { cat "$deb.apt-sim.log"; return 1; }
    grep -q '^Inst ibverbs-provider-vhca ' "$deb.apt-sim.log" ||
        { cat "$deb.apt-sim.log"; return 1; }
    local list
    list=$(dpkg-deb -c "$deb") || return 1
    grep -q 'libibverbs/libvhca-rdmav[0-9]*\.so$' <<<"$list" &&
        grep -q 'etc/libibverbs.d/vhca.driver$' <<<"$list"
}
step provider_deb_bookworm apt_sim bookworm
step provider_deb_trixie apt_sim trixie

if [ "$vm" = 1 ]; then
    step pingpong_bookworm images/vm-tests.sh --only 'rc_pingpong|rc_pingpong_N|ud_pingpong' -- --release bookworm
    step pingpong_trixie_deb images/vm-tests.sh --only 'rc_pingpong' -- --provider-deb
fi
[ "$fail" = 0 ] && echo "distro-tests: all passed" || echo "distro-tests: FAILED"
exit "$fail"
