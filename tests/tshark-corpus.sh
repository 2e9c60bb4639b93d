#!/usr/bin/env bash
# WF-11 conformance: the packet corpus must dissect cleanly in tshark and tshark must
# read back the field values we built (transport/tests/tshark_corpus.rs explains
# what tshark 4.0 cannot dissect and why).
#
# Installs tshark when it is missing (Debian/Ubuntu, needs root), then runs that
# one test with VHCA_REQUIRE_TSHARK=1 so that a missing tshark fails instead of
# skipping.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v tshark >/dev/null 2>&1; then
    echo "tshark-corpus: tshark not found, installing it" >&2
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "tshark-corpus: no apt-get; install tshark by hand" >&2
        exit 1
    fi
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        SUDO="sudo"
    fi
    export DEBIAN_FRONTEND=noninteractive
    # Refresh the package lists only when the candidate is unknown (fresh images).
    if ! apt-cache policy tshark 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        $SUDO apt-get update
    fi
    # tshark's postinst asks whether non-root users may capture; the default
    # (no) is fine for reading files.
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y tshark
fi

tshark --version | head -n 1
VHCA_REQUIRE_TSHARK=1 cargo test -p transport --test tshark_corpus -- --nocapture
