#!/usr/bin/env bash
# The main job. Until the device exists (issues 4 and 5 bring two VMs doing RDMA),
# this builds the wire layer, writes a capture of one packet of every IBA opcode
# (with and without GRH, several payload sizes) and has tshark dissect it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_rust
ensure_tshark

out=${1:-target/vhca-corpus.pcap}
mkdir -p "$(dirname "$out")"
cargo run --quiet --release -p transport --example corpus -- "$out"
# The corpus' payloads are opaque bytes: keep tshark's upper-layer guessers
# (RPC-over-RDMA, EoIB, ...) away from them, as the conformance test does.
off=$(tshark -G heuristic-decodes | awk -F'\t' '$1=="infiniband.payload"{printf " --disable-protocol %s", $2}')
echo "== $out: packets per opcode, as tshark dissects them"
# shellcheck disable=SC2086
tshark -r "$out" $off -T fields -e infiniband.bth.opcode | sort -n | uniq -c |
    awk '{printf "  opcode %3s: %s packets\n", $2, $1}'
total=$(tshark -r "$out" | wc -l)
# tshark 4.0 reads Reliable Datagram opcodes (0x40-0x55) as Mellanox DC with a
# 20-byte BTH, so short RD packets look malformed to it; everything else must not
# (transport/tests/tshark_corpus.rs has the details).
# shellcheck disable=SC2086
malformed=$(tshark -r "$out" $off -Y '_ws.malformed && !(infiniband.bth.opcode >= 0x40 && infiniband.bth.opcode <= 0x55)' | wc -l)
echo "== $total packets; malformed outside RD: $malformed"
[ "$malformed" -eq 0 ]
