//! (f) `vhca --capture` of RC (and UD) traffic, dissected by tshark: every frame
//! is InfiniBand with a known opcode, between the two nodes' LIDs, and nothing
//! is malformed.
//!
//! Needs `tshark` on PATH; without it the test prints a notice and passes,
//! unless `VHCA_REQUIRE_TSHARK=1`. Upper-layer payload heuristics (RPC-over-RDMA
//! and friends) are disabled for the check: our payloads are opaque bytes, and
//! those dissectors mark short SENDs malformed instead of declining them
//! (transport/tests/tshark_corpus.rs tells the story).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use vhca_tests::abi::verbs::QpType;
use vhca_tests::fixture::{assert_success, connect_pair, wait_n, Node};
use vhca_tests::verbs::ud_dest;
use vhca_tests::{ConnOpts, Layout, Options, RecvWr, SendWr, Vhca};

/// Severity of an expert "error" (Wireshark's PI_ERROR).
const PI_ERROR: u64 = 0x0080_0000;

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn heuristic_protocols() -> Vec<String> {
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

/// tshark's fields for every frame of `file`, and what tshark said on stderr
/// when it did not read the file to its end cleanly.
fn dissect(file: &Path, fields: &[&str]) -> (Vec<Vec<String>>, Option<String>) {
    let mut cmd = Command::new("tshark");
    for h in heuristic_protocols() {
        cmd.args(["--disable-protocol", &h]);
    }
    cmd.arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=,", "-E", "aggregator=|"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let damaged = !out.status.success() || err.contains("cut short") || err.contains("damaged");
    let rows = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.splitn(fields.len(), ',').map(str::to_owned).collect())
        .collect();
    (rows, damaged.then_some(err))
}

#[test]
fn capture_of_rc_traffic_dissects_cleanly_in_tshark() {
    if !tshark_available() {
        if std::env::var("VHCA_REQUIRE_TSHARK").as_deref() == Ok("1") {
            panic!("tshark not found on PATH and VHCA_REQUIRE_TSHARK=1");
        }
        println!("SKIP capture_of_rc_traffic_dissects_cleanly_in_tshark: tshark not installed");
        return;
    }
    let mut v = Vhca::spawn(Options::nodes(2).capture());
    let t = Duration::from_secs(30);
    {
        let mut a = Node::connect(&v, 0);
        let mut b = Node::connect(&v, 1);
        let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
        let src = a.region(64 << 10, Layout::Scattered, 0);
        let dst = b.region(64 << 10, Layout::Scattered, 0);
        let mut id = 0;
        // SENDs of several sizes (one packet, several packets), with immediate.
        for size in [0usize, 1, 5, 100, 5000, 20_000] {
            id += 1;
            b.hca
                .post_recv(
                    qb,
                    &RecvWr::new(id, vec![dst.mr.sge(&dst.buf, 0, 64 << 10)]),
                )
                .unwrap();
            let mut w = if size % 2 == 0 {
                SendWr::send(id)
            } else {
                SendWr::send_imm(id, 0xabcd)
            };
            if size > 0 {
                w = w.sge(src.mr.sge(&src.buf, 0, size));
            }
            a.hca.post_send(qa, &w).unwrap();
            assert_success(&wait_n(&mut a.hca, a.cq, 1, t));
            assert_success(&wait_n(&mut b.hca, b.cq, 1, t));
        }
        // WRITE, WRITE with immediate, READ, atomics.
        b.hca.post_recv(qb, &RecvWr::new(50, vec![])).unwrap();
        let wrs = vec![
            SendWr::write(59, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 100)),
            SendWr::write(60, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 10_000)),
            SendWr::write_imm(61, dst.buf.va(0), dst.mr.rkey, 7).sge(src.mr.sge(&src.buf, 0, 3000)),
            SendWr::read(62, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 9000)),
            SendWr::cmp_swap(63, dst.buf.va(64), dst.mr.rkey, 0, 5).sge(src.mr.sge(&src.buf, 0, 8)),
            SendWr::fetch_add(64, dst.buf.va(64), dst.mr.rkey, 1).sge(src.mr.sge(&src.buf, 8, 8)),
        ];
        a.hca.post_send_batch(qa, &wrs).unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 6, t));
        assert_success(&wait_n(&mut b.hca, b.cq, 1, t));
        // A UD SEND.
        let o = ConnOpts::default();
        let ua = a.qp(QpType::Ud);
        let ub = b.qp(QpType::Ud);
        a.hca.qp_to_rts_from_reset(ua, None, &o).unwrap();
        b.hca.qp_to_rts_from_reset(ub, None, &o).unwrap();
        b.hca
            .post_recv(ub, &RecvWr::new(70, vec![dst.mr.sge(&dst.buf, 0, 4096)]))
            .unwrap();
        a.hca
            .post_send(
                ua,
                &SendWr::send(71)
                    .inline(b"ud!")
                    .ud(ud_dest(b.lid(), ub.qpn, o.qkey)),
            )
            .unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, t));
        assert_success(&wait_n(&mut b.hca, b.cq, 1, t));
    }
    // Stop politely so the captures are flushed and closed.
    for i in 0..2 {
        let s = v.stop(i, Duration::from_secs(5));
        eprintln!("node {i} stopped: {s:?}");
    }
    let lids: BTreeSet<u64> = [v.lid(0), v.lid(1)].iter().map(|&l| u64::from(l)).collect();
    // Opcodes the traffic above makes (RC: SEND first/middle/last/only and
    // with immediate, WRITE only/first/middle/last and with immediate, READ
    // request and responses, ACK, atomics and their ACK; UD SEND only).
    let expected: BTreeSet<u64> = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e,
        0x0f, 0x10, 0x11, 0x12, 0x13, 0x14, 0x64, 0x65,
    ]
    .into_iter()
    .collect();
    for i in 0..2 {
        let file = v.node(i).capture.clone().expect("capture path");
        let (rows, damaged) = dissect(
            &file,
            &[
                "frame.number",
                "_ws.malformed",
                "_ws.expert.severity",
                "infiniband.bth.opcode",
                "infiniband.lrh.slid",
                "infiniband.lrh.dlid",
                "frame.protocols",
            ],
        );
        assert!(
            rows.len() >= 20,
            "node {i}: only {} frames captured",
            rows.len()
        );
        let mut opcodes = BTreeSet::new();
        let mut directions = BTreeSet::new();
        for r in &rows {
            assert_eq!(r.len(), 7, "{r:?}");
            assert!(r[1].is_empty(), "node {i}: frame {} malformed: {r:?}", r[0]);
            assert!(
                r[2].split('|').filter_map(num).all(|s| s < PI_ERROR),
                "node {i}: frame {} has an expert error: {r:?}",
                r[0]
            );
            assert!(
                r[6].contains("infiniband"),
                "node {i}: frame {} not InfiniBand: {r:?}",
                r[0]
            );
            let op =
                num(&r[3]).unwrap_or_else(|| panic!("node {i}: frame {} has no BTH: {r:?}", r[0]));
            assert!(
                expected.contains(&op),
                "node {i}: frame {}: unexpected opcode {op:#x}",
                r[0]
            );
            opcodes.insert(op);
            let (s, d) = (num(&r[4]).unwrap(), num(&r[5]).unwrap());
            assert!(
                lids.contains(&s) && lids.contains(&d),
                "node {i}: frame {} LIDs {s} -> {d}",
                r[0]
            );
            directions.insert((s, d));
        }
        assert_eq!(
            directions.len(),
            2,
            "node {i}: sent and received packets both captured"
        );
        eprintln!("node {i}: {} frames, opcodes {opcodes:x?}", rows.len());
        // After the record checks, so that those run even when this fails.
        assert!(
            damaged.is_none(),
            "node {i}: tshark did not read {} cleanly (not flushed and closed when \
             the process was stopped with SIGTERM?): {}",
            file.display(),
            damaged.unwrap_or_default()
        );
        // What the traffic above must have put on the wire.
        for op in [0x04u64, 0x0a, 0x0c, 0x11, 0x12, 0x13, 0x14, 0x64] {
            assert!(
                opcodes.contains(&op),
                "node {i}: no opcode {op:#x} in the capture: {opcodes:x?}"
            );
        }
    }
}
