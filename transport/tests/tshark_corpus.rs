//! WF-11: the packet corpus, written as an ERF pcap by our writer, dissects cleanly
//! in tshark and tshark reads back the field values we built.
//!
//! Needs `tshark` on PATH. Without it the test prints a skip line and passes,
//! unless `VHCA_REQUIRE_TSHARK=1`, which makes a missing tshark a failure
//! (`tests/tshark-corpus.sh` installs tshark and sets it).
//!
//! What tshark 4.0 (the version this was written against, 4.0.17) does with the
//! corpus, found by running it, and what this test does about it:
//!
//! * Unknown opcodes. tshark 4.0 has no row for FLUSH (0x1C) and ATOMIC WRITE
//!   (0x1D), which IBA 1.5 added, for the CNP (0x81, RoCEv2 annex A17), nor for any
//!   XRC opcode (0xA0..=0xB7, IBA 1.2 annex A14): it shows "Unknown OpCode" and the
//!   bytes after the BTH as "Vendor Specific or Unknown Header Sequence". LRH, GRH
//!   and BTH are still dissected, so those fields are compared; extension headers
//!   and payload are not. The test fails if tshark calls any *other* opcode unknown.
//! * Reliable Datagram (0x40..=0x55). tshark reads every opcode whose service bits
//!   are 0b010 as Mellanox's Dynamically Connected transport, with a 20-byte BTH
//!   (in `dissect_infiniband_common`: `if ((opCode >> 5) == 0x2) bthSize += 8`), so
//!   RDETH, DETH and everything after them are read 8 bytes late; a packet with less
//!   than 8 bytes after its IBA headers then runs off the end and is marked
//!   malformed. IBA 9.2 and Table 38 put the RDETH right after a 12-byte BTH, which
//!   is what we send and what `PacketRepr::parse` reads back, so tshark is wrong
//!   here: RD packets are exempt from the malformed check and their extension
//!   headers and payload are not compared. (tshark also skips the RDETH of RD
//!   ACKNOWLEDGE, reading it as the AETH.) LRH, GRH and BTH are compared.
//! * Upper-layer heuristics. With default settings tshark offers every payload to
//!   the heuristic dissectors registered on `infiniband.payload` (RPC-over-RDMA,
//!   Mellanox EoIB, SMC-R, ...). RPC-over-RDMA's tries to reassemble every short RC
//!   SEND and EoIB reads its header from empty UD payloads, and both throw
//!   (malformed) on payloads of 0..=4 bytes instead of declining them. The
//!   corpus' payloads are opaque bytes of no upper-layer protocol, so the field
//!   comparison runs with those protocols disabled; a default-settings run
//!   checks that every malformed mark is one of the two cases above.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use transport::wire::corpus::{corpus, CorpusPacket};
use transport::wire::opcode::Service;
use transport::wire::packet::pad_for;
use transport::wire::pcap::PcapWriter;

/// Opcodes tshark 4.0 does not know (see the module comment).
fn unknown_to_tshark_4_0(op: u8) -> bool {
    matches!(op, 0x1c | 0x1d | 0x81 | 0xa0..=0xb7)
}

/// Reliable Datagram opcodes, which tshark dissects as Mellanox DC (module comment).
fn rd(op: u8) -> bool {
    op >> 5 == 0b010
}

/// Severity of an expert "error" (Wireshark's PI_ERROR).
const PI_ERROR: u64 = 0x0080_0000;

/// Removes the temporary capture even when an assertion fails.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn write_corpus(packets: &[CorpusPacket]) -> TempFile {
    let path = std::env::temp_dir().join(format!("vhca-corpus-{}.pcap", std::process::id()));
    let file = std::fs::File::create(&path).expect("create temp pcap");
    let mut w = PcapWriter::infiniband(std::io::BufWriter::new(file)).expect("pcap header");
    for (i, p) in packets.iter().enumerate() {
        let ts = Duration::from_secs(1_700_000_000) + Duration::from_millis(i as u64);
        w.write_packet(ts, &p.bytes).expect("write packet");
    }
    w.flush().expect("flush");
    TempFile(path)
}

/// Runs tshark on `file` with `extra` options, printing `fields` separated by ','
/// (multiple occurrences joined by '|'); returns one Vec of strings per frame.
fn tshark_fields(file: &TempFile, extra: &[String], fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(extra).arg("-r").arg(&file.0).args([
        "-T",
        "fields",
        "-E",
        "separator=,",
        "-E",
        "aggregator=|",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            // The last field (Info) may itself hold commas: split only n-1 times.
            l.splitn(fields.len(), ',').map(str::to_owned).collect()
        })
        .collect()
}

/// The protocols whose heuristic dissectors tshark tries on IB payloads.
fn payload_heuristic_protocols() -> Vec<String> {
    let out = Command::new("tshark")
        .args(["-G", "heuristic-decodes"])
        .output()
        .expect("run tshark -G");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut cols = l.split('\t');
            (cols.next() == Some("infiniband.payload"))
                .then(|| cols.next().map(str::to_owned))
                .flatten()
        })
        .collect()
}

/// A tshark number: hex with 0x, else decimal; booleans as 1/0 or True/False.
fn num(s: &str) -> Option<u64> {
    let s = s.split('|').next().unwrap_or("").trim();
    match s {
        "" => None,
        "True" => Some(1),
        "False" => Some(0),
        _ => match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).ok(),
            None => s.parse().ok(),
        },
    }
}

fn is_error(malformed: &str, severity: &str) -> bool {
    !malformed.is_empty() || severity.split('|').filter_map(num).any(|s| s >= PI_ERROR)
}

#[test]
fn wf_11_corpus_dissects_cleanly_in_tshark() {
    if !tshark_available() {
        if std::env::var("VHCA_REQUIRE_TSHARK").as_deref() == Ok("1") {
            panic!("tshark not found on PATH and VHCA_REQUIRE_TSHARK=1");
        }
        println!("SKIP wf_11_corpus_dissects_cleanly_in_tshark: tshark not installed");
        return;
    }
    let packets = corpus();
    let file = write_corpus(&packets);
    let heuristics = payload_heuristic_protocols();

    // Pass 1, default settings: every malformed or error mark must be one that the
    // module comment explains.
    let rows = tshark_fields(
        &file,
        &[],
        &[
            "frame.number",
            "_ws.malformed",
            "_ws.expert.severity",
            "frame.protocols",
        ],
    );
    assert_eq!(rows.len(), packets.len(), "tshark saw every record");
    for (row, p) in rows.iter().zip(&packets) {
        let e = &p.expected;
        if !is_error(&row[1], &row[2]) {
            continue;
        }
        let claimed_by_heuristic = row[3]
            .split(':')
            .skip_while(|proto| *proto != "infiniband")
            .skip(1)
            .any(|proto| heuristics.iter().any(|h| h == proto));
        assert!(
            rd(e.opcode) || (claimed_by_heuristic && e.payload_len <= 4),
            "frame {} ({} grh={} payload={}) malformed with default settings: {:?}",
            row[0],
            e.name,
            e.has_grh,
            e.payload_len,
            row
        );
    }

    // Pass 2, upper-layer payload heuristics off: no marks outside RD, and the
    // fields equal what the corpus built.
    let extra: Vec<String> = heuristics
        .iter()
        .flat_map(|h| ["--disable-protocol".to_owned(), h.clone()])
        .collect();
    let fields = [
        "frame.number",                      // 0
        "_ws.malformed",                     // 1
        "_ws.expert.severity",               // 2
        "infiniband.bth.opcode",             // 3
        "infiniband.bth.psn",                // 4
        "infiniband.bth.destqp",             // 5
        "infiniband.bth.p_key",              // 6
        "infiniband.lrh.slid",               // 7
        "infiniband.lrh.dlid",               // 8
        "infiniband.lrh.pktlen",             // 9
        "infiniband.lrh.sl",                 // 10
        "infiniband.lrh.vl",                 // 11
        "infiniband.bth.se",                 // 12
        "infiniband.bth.m",                  // 13
        "infiniband.bth.a",                  // 14
        "infiniband.bth.padcnt",             // 15
        "infiniband.grh.paylen",             // 16
        "infiniband.grh.hoplmt",             // 17
        "infiniband.grh.flowlabel",          // 18
        "infiniband.grh.tclass",             // 19
        "infiniband.aeth.syndrome",          // 20
        "infiniband.aeth.msn",               // 21
        "infiniband.deth.q_key",             // 22
        "infiniband.deth.srcqp",             // 23
        "infiniband.reth.va",                // 24 (also AtomicETH VA)
        "infiniband.reth.r_key",             // 25 (also AtomicETH R_Key)
        "infiniband.reth.dmalen",            // 26
        "infiniband.atomiceth.swapdt",       // 27
        "infiniband.atomiceth.cmpdt",        // 28
        "infiniband.atomicacketh.origremdt", // 29
        "infiniband.immdt",                  // 30
        "infiniband.ieth",                   // 31
        "data.len",                          // 32
        "_ws.col.Info",                      // 33, last: may hold commas
    ];
    let rows = tshark_fields(&file, &extra, &fields);
    assert_eq!(rows.len(), packets.len(), "tshark saw every record");
    let mut unknown = BTreeSet::new();
    let mut compared_ext = 0usize;
    for (row, p) in rows.iter().zip(&packets) {
        let e = &p.expected;
        let at = format!(
            "frame {} ({} grh={} payload={})",
            row[0], e.name, e.has_grh, e.payload_len
        );
        let get = |i: usize| num(&row[i]);
        if !rd(e.opcode) {
            assert!(!is_error(&row[1], &row[2]), "{at}: malformed: {row:?}");
        }
        // LRH, GRH and BTH: tshark dissects them for every opcode.
        assert_eq!(get(3), Some(e.opcode.into()), "{at}: opcode");
        assert_eq!(get(4), Some(e.psn.into()), "{at}: PSN");
        assert_eq!(get(5), Some(e.dest_qp.into()), "{at}: DestQP");
        assert_eq!(get(6), Some(e.pkey.into()), "{at}: P_Key");
        assert_eq!(get(7), Some(e.slid.into()), "{at}: SLID");
        assert_eq!(get(8), Some(e.dlid.into()), "{at}: DLID");
        assert_eq!(get(9), Some(e.pkt_len.into()), "{at}: PktLen");
        assert_eq!(get(10), Some(e.sl.into()), "{at}: SL");
        assert_eq!(get(11), Some(e.vl.into()), "{at}: VL");
        assert_eq!(get(12), Some(e.bth.solicited.into()), "{at}: SE");
        assert_eq!(get(13), Some(e.bth.mig_req.into()), "{at}: M");
        assert_eq!(get(14), Some(e.bth.ack_req.into()), "{at}: A");
        let pad = pad_for(e.payload_len);
        assert_eq!(get(15), Some(pad as u64), "{at}: PadCnt");
        match &e.grh {
            Some(g) => {
                // PayLen: the bytes after the GRH up to and including the ICRC.
                let pay_len = u64::from(e.pkt_len) * 4 - 8 - 40;
                assert_eq!(get(16), Some(pay_len), "{at}: GRH PayLen");
                assert_eq!(get(17), Some(g.hop_limit.into()), "{at}: HopLmt");
                assert_eq!(get(18), Some(g.flow_label.into()), "{at}: FlowLabel");
                assert_eq!(get(19), Some(g.traffic_class.into()), "{at}: TClass");
            }
            None => assert_eq!(get(16), None, "{at}: no GRH expected"),
        }
        if row[33].contains("Unknown OpCode") {
            unknown.insert(e.opcode);
            continue;
        }
        if rd(e.opcode) || unknown_to_tshark_4_0(e.opcode) {
            continue;
        }
        compared_ext += 1;
        let x = &e.ext;
        if let Some(a) = x.aeth {
            assert_eq!(get(20), Some(a.syndrome.to_u8().into()), "{at}: syndrome");
            assert_eq!(get(21), Some(a.msn.into()), "{at}: MSN");
        }
        if let Some(d) = x.deth {
            assert_eq!(get(22), Some(d.qkey.into()), "{at}: Q_Key");
            assert_eq!(get(23), Some(d.src_qp.into()), "{at}: SrcQP");
        }
        if let Some(r) = x.reth {
            assert_eq!(get(24), Some(r.va), "{at}: RETH VA");
            assert_eq!(get(25), Some(r.rkey.into()), "{at}: RETH R_Key");
            assert_eq!(get(26), Some(r.dma_len.into()), "{at}: DMALen");
        }
        if let Some(a) = x.atomic_eth {
            assert_eq!(get(24), Some(a.va), "{at}: AtomicETH VA");
            assert_eq!(get(25), Some(a.rkey.into()), "{at}: AtomicETH R_Key");
            assert_eq!(get(27), Some(a.swap_add), "{at}: SwapDt");
            assert_eq!(get(28), Some(a.compare), "{at}: CmpDt");
        }
        if let Some(a) = x.atomic_ack_eth {
            assert_eq!(get(29), Some(a.orig_remote_data), "{at}: OrigRemDt");
        }
        // ImmDt and IETH are byte fields: tshark prints their hex digits.
        let hex = |i: usize| {
            row[i]
                .split('|')
                .next()
                .and_then(|h| u32::from_str_radix(h, 16).ok())
        };
        if let Some(imm) = x.imm_dt {
            assert_eq!(hex(30), Some(imm), "{at}: ImmDt");
        }
        if let Some(rkey) = x.ieth {
            assert_eq!(hex(31), Some(rkey), "{at}: IETH");
        }
        // tshark's data covers payload and pad (it does not apply PadCnt).
        let data = (e.payload_len > 0).then_some((e.payload_len + pad) as u64);
        assert_eq!(get(32), data, "{at}: payload bytes");
    }
    // Every opcode tshark does not know is one the module comment names.
    for op in &unknown {
        assert!(
            unknown_to_tshark_4_0(*op),
            "tshark calls opcode 0x{op:02x} unknown; it is not on the documented list"
        );
    }
    // The exemptions must not swallow the corpus: every other service is compared.
    let compared_services: BTreeSet<_> = packets
        .iter()
        .filter(|p| !rd(p.expected.opcode) && !unknown_to_tshark_4_0(p.expected.opcode))
        .filter_map(|p| {
            transport::wire::opcode::Opcode::from_u8(p.expected.opcode).map(|o| o.info().service)
        })
        .map(|s| format!("{s:?}"))
        .collect();
    for s in [Service::Rc, Service::Uc, Service::Ud] {
        assert!(compared_services.contains(&format!("{s:?}")), "{s:?}");
    }
    assert!(compared_ext > packets.len() / 2, "compared {compared_ext}");
    println!(
        "wf_11: {} packets dissected by tshark, {} with extension headers compared, \
         unknown to tshark: {:02x?}",
        packets.len(),
        compared_ext,
        unknown
    );
}
