//! The fabric file's port attributes (`fabric/partition.rs`): a node's LMC
//! (AD-01) and P_Key table (AD-05), checked as people write them, and the
//! `ib-udp` link routing to and naming senders by every LID of a node's range.

mod common;

use std::time::Duration;

use common::{drain_from, loopback_sockets, ud_packet};
use device::fabric::{FabricFile, FabricFileError, Link, Node, PortAttrs, UdpLink};

const T0: Duration = Duration::from_secs(1_700_000_000);

fn file(text: &str) -> Result<FabricFile, FabricFileError> {
    FabricFile::parse("f.toml", text)
}

fn node(name: &str, lid: u16, port: u16, extra: &str) -> String {
    format!(
        "[[node]]\nname = \"{name}\"\nlid = {lid}\nguid = {}\naddress = \"127.0.0.1:{port}\"\n{extra}\n",
        0x1000 + u32::from(lid)
    )
}

#[test]
fn ad_01_ad_05_lmc_and_pkeys_per_node_and_for_all() {
    let text = format!(
        "pkeys = [\"0xffff\", \"0x8001\"]\n{}{}{}",
        node(
            "a",
            8,
            1,
            "lmc = 2\npkeys = [\"0xffff\", \"0x0001\", 0x8002]"
        ),
        node("b", 12, 2, "lmc = 1"),
        node("c", 3, 3, "")
    );
    let f = file(&text).unwrap();
    let a = f.port_attrs("a").unwrap();
    assert_eq!((a.lmc, a.pkeys.clone()), (2, vec![0xffff, 0x0001, 0x8002]));
    let b = f.port_attrs("b").unwrap();
    assert_eq!((b.lmc, b.pkeys.clone()), (1, vec![0xffff, 0x8001]));
    assert_eq!(f.port_attrs("c").unwrap().lmc, 0);
    // Every LID of a range names its node; the next one does not.
    for (lid, name) in [(8, "a"), (11, "a"), (12, "b"), (13, "b"), (3, "c")] {
        assert_eq!(f.by_lid(lid).map(|n| n.name.as_str()), Some(name), "{lid}");
    }
    assert!(f.by_lid(14).is_none() && f.by_lid(7).is_none());
    // Without any: LMC 0 and the default partition only.
    let plain = file(&node("a", 1, 1, "")).unwrap();
    assert_eq!(plain.port_attrs("a"), Some(&PortAttrs::default()));
    assert_eq!(PortAttrs::default().pkeys, vec![0xffff]);
}

#[test]
fn ad_01_ad_05_bad_lmc_and_pkeys_are_one_line_errors() {
    let cases = [
        (node("a", 9, 1, "lmc = 2"), "not a multiple of 2^lmc"),
        (node("a", 8, 1, "lmc = 8"), "lmc 8 is not 0..=7"),
        (node("a", 8, 1, "lmc = \"2\""), "lmc must be an integer"),
        (node("a", 0xbffe, 1, "lmc = 2"), "not a multiple"),
        (node("a", 8, 1, "pkeys = []"), "1 to 64"),
        (node("a", 8, 1, "pkeys = [\"0x8000\"]"), "invalid P_Key"),
        (node("a", 8, 1, "pkeys = [1, \"0x8001\"]"), "again"),
        (node("a", 8, 1, "pkeys = [\"xyz\"]"), "not a 16-bit P_Key"),
        (node("a", 8, 1, "pkys = [1]"), "unknown key `pkys`"),
        (format!("pkeys = 5\n{}", node("a", 8, 1, "")), "(all nodes)"),
        // b's range 8..=9 meets a's 8..=11.
        (
            format!("{}{}", node("a", 8, 1, "lmc = 2"), node("b", 10, 2, "")),
            "LID 0xa is already node \"a\"'s",
        ),
    ];
    for (text, want) in cases {
        let e = file(&text).expect_err(&text).to_string();
        assert!(e.contains(want), "{text}\n=> {e}\n(wanted {want:?})");
        assert!(e.starts_with("f.toml: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn ad_01_udp_link_routes_every_lid_of_a_node_and_names_the_source_lid() {
    let mut s = loopback_sockets(2);
    let n = |name: &str, lid: u16, address| Node {
        name: name.into(),
        lid,
        guid: 0x1000 + u64::from(lid),
        address,
    };
    let lmc = |lmc| PortAttrs {
        lmc,
        ..PortAttrs::default()
    };
    let fabric = FabricFile::from_nodes_with_ports(
        vec![n("a", 8, s[0].1), n("b", 12, s[1].1)],
        vec![lmc(2), lmc(1)],
    )
    .unwrap();
    let (sb, _) = s.pop().unwrap();
    let (sa, _) = s.pop().unwrap();
    let mut a = UdpLink::from_socket(&fabric, "a", sa).unwrap();
    let mut b = UdpLink::from_socket(&fabric, "b", sb).unwrap();
    // To b's second LID from a's third: routed to b, named by the SLID. A
    // SLID outside a's range is named as a's base LID (the engine then
    // finds it spoofed).
    let p1 = ud_packet(10, 13, 1, b"path bits");
    let p2 = ud_packet(12, 12, 2, b"claims b's LID");
    for p in [&p1, &p2] {
        a.send(T0, p).unwrap();
    }
    assert_eq!(drain_from(&mut b, T0), vec![(p1, Some(10)), (p2, Some(8))]);
    // To a's own other LID: looped back without the socket (AD-04).
    let p3 = ud_packet(9, 11, 3, b"own");
    a.send(T0, &p3).unwrap();
    assert_eq!(drain_from(&mut a, T0), vec![(p3, Some(9))]);
    assert_eq!(a.counters().loopback_packets, 1);
    assert_eq!(a.counters().drop_tx_unknown_dlid, 0);
    a.send(T0, &ud_packet(8, 14, 4, b"nobody")).unwrap();
    assert_eq!(a.counters().drop_tx_unknown_dlid, 1);
}
