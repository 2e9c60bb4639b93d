#!/usr/bin/env bash
# The wire dissected (issue 28 item 4): a live capture of vhca's UDP underlay
# opens in tshark as InfiniBand through tools/wireshark/vhca.lua.
#
# In a private network namespace (so that lo carries nothing but this test),
# tcpdump records lo while the test driver (tests/examples/wire_traffic.rs)
# plays the guests of two real `vhca` processes in three fabrics: back to back
# without a fabric key, back to back with one, and through a `vhca switch`
# with one; in each an RC WRITE, SEND and READ. Then tshark reads the capture
# twice, once finding vhca by the dissector's heuristic and once by the UDP
# ports preference (heuristic off), and each time:
#   - no malformed packet and no expert error;
#   - every UDP datagram of each fabric is vhca (none left as UDP data);
#   - every VCRC and LPCRC the dissector computes matches (it frames right);
#   - the IB BTH opcodes include the traffic's (RC SEND ONLY, RDMA WRITE
#     FIRST/MIDDLE/LAST, ACK, RDMA READ REQUEST and RESPONSE FIRST/LAST);
#   - keepalives and flow-control packets are dissected as such;
#   - in the keyed fabrics every IB packet carries the trailer, its sequence
#     number reads as the sender's clock (within a minute of the capture's),
#     and the 16-byte tag is shown; the unkeyed one has no trailer.
# Last, a copy of the dissector with the trailer one byte short must fail
# these checks: the test can fail.
#
# Needs root (the namespace and the capture), tcpdump and tshark (installed
# when missing, as scripts/lib.sh does); exits 77 with "SKIP: reason" when
# they cannot be had. env VHCA_KEEP=1 keeps the folder with the capture.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

skip() { echo "SKIP: $*"; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "needs root for a network namespace and the capture on its lo"
command -v unshare >/dev/null 2>&1 || skip "no unshare (util-linux)"
command -v python3 >/dev/null 2>&1 || skip "no python3"
if ! command -v tshark >/dev/null 2>&1; then
    (ensure_tshark) || skip "tshark is not installed and could not be installed"
fi
if ! command -v tcpdump >/dev/null 2>&1; then
    (apt_install tcpdump) || skip "tcpdump is not installed and could not be installed"
fi
unshare -n true 2>/dev/null || skip "cannot create a network namespace (unshare -n)"

ensure_rust
cargo build -q -p device --bin vhca
cargo build -q -p vhca-tests --example wire_traffic
target=$(realpath "${CARGO_TARGET_DIR:-target}")
lua=$(realpath tools/wireshark/vhca.lua)

work=$(mktemp -d /tmp/vhca-wire.XXXXXX)
if [ "${VHCA_KEEP:-}" = 1 ]; then
    echo "wire-dissect: keeping $work"
else
    trap 'rm -rf "$work"' EXIT
fi

# The capture and the traffic, inside the namespace.
VHCA_BIN="$target/debug/vhca" DRIVER="$target/debug/examples/wire_traffic" WORK="$work" \
    unshare -n bash -euo pipefail -c '
ip link set lo up
tcpdump -i lo -U -Z root -w "$WORK/underlay.pcap" udp 2>"$WORK/tcpdump.log" &
dump=$!
for _ in $(seq 100); do
    grep -q "listening on" "$WORK/tcpdump.log" && break
    sleep 0.1
done
grep -q "listening on" "$WORK/tcpdump.log" || { cat "$WORK/tcpdump.log"; exit 1; }
rc=0
"$DRIVER" >"$WORK/fabrics.txt" 2>"$WORK/driver.log" || rc=$?
sleep 0.5
kill -INT "$dump"
wait "$dump" || true
if [ "$rc" != 0 ]; then
    echo "wire-dissect: the test driver failed ($rc):" >&2
    tail -n 30 "$WORK/driver.log" >&2
    exit 1
fi
'
cat "$work/fabrics.txt"
echo "wire-dissect: $(tshark -r "$work/underlay.pcap" 2>/dev/null | wc -l) frames captured"

fields=(-e frame.number -e frame.time_epoch -e udp.srcport -e udp.dstport -e vhca.kind
    -e infiniband.bth.opcode -e vhca.keyed -e vhca.trailer.seq -e vhca.trailer.tag
    -e vhca.vcrc_good -e vhca.fc.lpcrc_good -e _ws.malformed -e _ws.expert.severity)

# One tshark pass with dissector $1, mode $2 (heuristic|ports): its fields
# table, then the checks; exit status 0 iff every check passed.
check() {
    local dissector=$1 mode=$2 out="$work/fields-$2-$(basename "$1").tsv" opts=()
    local all
    all=$(sed -n 's/.*ports=//p' "$work/fabrics.txt" | paste -sd,)
    if [ "$mode" = heuristic ]; then
        # The heuristic before any port's own dissector: the fabrics' ports
        # are free ports the kernel picked, which some protocol may claim.
        opts=(-o udp.try_heuristic_first:TRUE -o "vhca.udp_ports:")
    else
        opts=(--disable-heuristic vhca_udp -o "vhca.udp_ports:$all")
    fi
    tshark -X "lua_script:$dissector" "${opts[@]}" -r "$work/underlay.pcap" \
        -T fields -E occurrence=a -E aggregator=';' "${fields[@]}" >"$out" 2>"$out.err" || {
        cat "$out.err" >&2
        return 1
    }
    python3 - "$out" "$work/fabrics.txt" "$mode" <<'EOF'
import sys

fields_file, fabrics_file, mode = sys.argv[1:4]
COLS = ["frame", "time", "sport", "dport", "kind", "opcode", "keyed", "seq", "tag",
        "vcrc_good", "lpcrc_good", "malformed", "severity"]
ERROR = 0x00800000  # PI_ERROR
fabrics = []
for line in open(fabrics_file):
    w = line.split()
    if w and w[0] == "FABRIC":
        kv = dict(x.split("=", 1) for x in w[2:])
        fabrics.append((w[1], kv["keyed"] == "1", {int(p) for p in kv["ports"].split(",")}))
rows = []
for line in open(fields_file):
    v = line.rstrip("\n").split("\t")
    v += [""] * (len(COLS) - len(v))
    rows.append(dict(zip(COLS, v)))

def many(s):
    return [x for x in s.split(";") if x != ""]

def true(x):
    return x in ("1", "True", "TRUE")

failures = []
def expect(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)

print(f"wire-dissect [{mode}, {fields_file.rsplit('-', 1)[-1][:-4]}]: {len(rows)} frames")
bad = [r["frame"] for r in rows
       if r["malformed"] or any(int(s, 0) >= ERROR for s in many(r["severity"]))]
expect(not bad, f"no malformed packet or expert error (bad frames: {bad[:10]})")
crc = [r["frame"] for r in rows
       if any(not true(x) for x in many(r["vcrc_good"]) + many(r["lpcrc_good"]))]
expect(not crc, f"every VCRC and LPCRC matches (bad frames: {crc[:10]})")
for name, keyed, ports in fabrics:
    mine = [r for r in rows if r["sport"] and int(r["sport"]) in ports and int(r["dport"]) in ports]
    plain = [r["frame"] for r in mine if not r["kind"]]
    kinds = [int(k) for r in mine for k in many(r["kind"])]
    ib = [r for r in mine if "1" in many(r["kind"])]
    ops = {int(o) for r in mine for o in many(r["opcode"])}
    print(f" {name}: {len(mine)} datagrams, {kinds.count(1)} IB packets in {len(ib)}, "
          f"{kinds.count(2)} keepalives, {kinds.count(3)} flow-control packets, opcodes {sorted(ops)}")
    expect(len(mine) > 0, f"{name}: datagrams captured")
    expect(not plain, f"{name}: every datagram decoded as vhca (not: frames {plain[:10]})")
    expect(kinds.count(2) > 0, f"{name}: keepalives dissected")
    expect(kinds.count(3) > 0, f"{name}: flow-control packets dissected")
    # RC SEND ONLY 4, RDMA WRITE FIRST/MIDDLE/LAST 6/7/8, RDMA READ REQUEST
    # 12, READ RESPONSE FIRST/LAST 13/15, ACK 17 (IBA Table 38).
    want = {4, 6, 7, 8, 12, 13, 15, 17}
    expect(want <= ops, f"{name}: BTH opcodes include {sorted(want)} (missing {sorted(want - ops)})")
    ib_keyed = [true(k) for r in ib for k in many(r["keyed"])]
    expect(len(ib_keyed) == kinds.count(1), f"{name}: every IB packet says whether it is keyed")
    if keyed:
        expect(ib_keyed and all(ib_keyed), f"{name}: every IB packet has the fabric key trailer")
        seqs = [(int(s), float(r["time"])) for r in ib for s in many(r["seq"])]
        expect(len(seqs) == kinds.count(1), f"{name}: a sequence number per IB packet")
        skew = max((abs(s / 1e9 - t) for s, t in seqs), default=1e9)
        expect(skew < 60, f"{name}: sequence numbers read as the sender's clock (off by {skew:.3f} s at most)")
        tags = [t for r in ib for t in many(r["tag"])]
        expect(len(tags) == kinds.count(1) and all(len(t.replace(":", "")) == 32 for t in tags),
               f"{name}: a 16-byte tag per IB packet")
    else:
        expect(not any(ib_keyed), f"{name}: no trailer without a fabric key")
sys.exit(1 if failures else 0)
EOF
}

status=0
check "$lua" heuristic || status=1
check "$lua" ports || status=1

# The checks can fail: the same passes with the trailer one byte short.
mutant="$work/vhca-trailer-off-by-one.lua"
sed 's/^local TRAILER_LEN = SEQ_LEN + TAG_LEN$/local TRAILER_LEN = SEQ_LEN + TAG_LEN - 1/' "$lua" >"$mutant"
if cmp -s "$lua" "$mutant"; then
    echo "wire-dissect: FAIL: could not make the off-by-one copy (TRAILER_LEN line changed?)"
    status=1
fi
for mode in heuristic ports; do
    if check "$mutant" "$mode" >"$work/mutant-$mode.log" 2>&1; then
        echo "wire-dissect: FAIL: the off-by-one dissector passed the $mode checks:"
        cat "$work/mutant-$mode.log"
        status=1
    else
        echo "wire-dissect: the off-by-one dissector fails the $mode checks, as it must:"
        grep FAIL "$work/mutant-$mode.log" | head -n 4
    fi
done

if [ "$status" = 0 ]; then
    echo "wire-dissect: PASS"
else
    echo "wire-dissect: FAIL"
fi
exit "$status"
