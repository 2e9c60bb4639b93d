//! AD-06 between two `vhca` processes: the fabric file's `sl2vl` table is the
//! ports' SL-to-VL table, so an RC QP whose path has SL 3 sends (and is
//! answered) on the VL the file gives SL 3, and a QP on SL 0 stays on VL0;
//! read back from the processes' own captures.

use std::time::Duration;
use transport::wire::pcap::{Frame, PcapReader};
use transport::wire::PacketRepr;
use vhca_tests::abi::verbs::QpType;
use vhca_tests::fixture::{assert_success, connect_pair_with, wait_n, Node};
use vhca_tests::{ConnOpts, Layout, Options, QpInit, SendWr, Vhca};

/// (SL, VL) of every packet in a capture file.
fn lanes(path: &std::path::Path) -> Vec<(u8, u8)> {
    let bytes = std::fs::read(path).expect("capture file");
    PcapReader::new(&bytes[..])
        .expect("a pcap file")
        .filter_map(|r| match r.expect("a good record").frame {
            Frame::Infiniband(p) => PacketRepr::parse(p).ok().map(|x| (x.lrh.sl, x.lrh.vl)),
            _ => None,
        })
        .collect()
}

#[test]
fn ad_06_fabric_file_sl2vl_on_the_wire() {
    let header = "sl2vl = [0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]";
    let mut v = Vhca::spawn(Options::nodes(2).capture().fabric_header(header));
    let t = Duration::from_secs(30);
    {
        let mut a = Node::connect(&v, 0);
        let mut b = Node::connect(&v, 1);
        for sl in [3u8, 0] {
            let ia = QpInit::new(QpType::Rc, a.pd, a.cq);
            let ib = QpInit::new(QpType::Rc, b.pd, b.cq);
            let o = ConnOpts {
                sl,
                ..ConnOpts::default()
            };
            let (qa, _qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &o);
            let src = a.region(8192, Layout::Contiguous, 0);
            let dst = b.region(8192, Layout::Contiguous, 0);
            let w = SendWr::write(u64::from(sl) + 1, dst.buf.va(0), dst.mr.rkey)
                .sge(src.mr.sge(&src.buf, 0, 5000));
            a.hca.post_send(qa, &w).unwrap();
            assert_success(&wait_n(&mut a.hca, a.cq, 1, t));
        }
    }
    for i in 0..2 {
        let s = v.stop(i, Duration::from_secs(5));
        eprintln!("node {i} stopped: {s:?}");
    }
    for i in 0..2 {
        let got = lanes(&v.node(i).capture.clone().expect("capture path"));
        assert!(got.contains(&(3, 5)), "node {i}: SL 3 on VL 5: {got:?}");
        assert!(got.contains(&(0, 0)), "node {i}: SL 0 on VL 0: {got:?}");
        assert!(
            got.iter()
                .all(|&(sl, vl)| vl == if sl == 3 { 5 } else { 0 }),
            "node {i}: {got:?}"
        );
    }
}
