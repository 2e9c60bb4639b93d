#!/usr/bin/env bash
# The test suite: formatting, lints, unit, property and simulation tests, and the
# conformance tests against tshark. Installs what it needs (Rust, tshark).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_rust
ensure_tshark

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== cargo test"
# The tshark conformance test fails instead of skipping when tshark is missing.
VHCA_REQUIRE_TSHARK=1 cargo test --workspace 2>&1
echo "== fuzz: every target for a short bounded time (fuzz/README.md has the long run)"
scripts/fuzz.sh --seconds 15
echo "== VM: the device under a real QEMU (host root and guest are cached in /var/cache/vhca)"
images/device-smoke.sh
images/vm-tests.sh
# Other guest kernels and rdma-core releases (issue 17): vhca.ko against 6.1,
# 6.12 and sid's headers, the provider packages, pingpongs on 6.1 and 6.12.
images/distro-tests.sh
# README's "Your own QEMU" section followed as written: two VMs, ibv_rc_pingpong.
images/own-qemu.sh
images/roce-tests.sh
# The workloads without rdma_cm (UCX, MPI) over the InfiniBand link layer too.
images/wl-ib.sh
images/vm-reload.sh
images/vm-reboot.sh
images/pyverbs.sh
# The same suite with a RoCEv2 port: the rdmacm tests run (WF-10).
images/pyverbs.sh --roce
