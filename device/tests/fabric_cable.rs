//! The HCA side of a cable (issue 26 item 3; ARCHITECTURE.md §6): in a cabled
//! fabric a node's `UdpLink` sends every packet (any DLID, multicast,
//! permissive) to its cable's other end and takes datagrams only from there;
//! its keepalives go only there; its own-LID loopback stays; two HCAs linked
//! back to back still exchange packets, with the fabric key too. And a switch
//! port's link: cabled, no loopback, down until its partner is heard.

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::{drain, drain_from, loopback_sockets, ud_packet};
use device::fabric::{
    AuthLink, FabricFile, FabricKey, Link, UdpLink, UdpOffloads, KEEPALIVE, MAX_PACKET_LEN,
};

const T0: Duration = Duration::from_secs(1_700_000_000);

/// Nodes a (LID 1), b (LID 2); a 2-port switch sw0 with `ports` addresses;
/// the `links` given.
fn fabric(nodes: &[SocketAddr], sw: &[SocketAddr], links: &[(&str, &str)]) -> FabricFile {
    let mut text = String::new();
    for (i, a) in nodes.iter().enumerate() {
        text += &format!(
            "[[node]]\nname = \"{}\"\nlid = {}\nguid = {}\naddress = \"{a}\"\n",
            ["a", "b"][i],
            i + 1,
            i + 1
        );
    }
    if !sw.is_empty() {
        let list: Vec<String> = sw.iter().map(|a| format!("\"{a}\"")).collect();
        text += &format!(
            "[[switch]]\nname = \"sw0\"\nguid = 0x100\nports = {}\naddress = [{}]\n",
            sw.len(),
            list.join(", ")
        );
    }
    for (x, y) in links {
        text += &format!("[[link]]\nends = [\"{x}\", \"{y}\"]\n");
    }
    FabricFile::parse("cable.toml", &text).expect("a valid cabled fabric")
}

/// What a raw socket received within 50 ms.
fn raw_drain(s: &UdpSocket) -> Vec<Vec<u8>> {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0; MAX_PACKET_LEN + 64];
    while let Ok((n, _)) = s.recv_from(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// Node a cabled to switch port sw0:1 (a raw socket standing in for the
/// switch); node b, in the file, cabled to sw0:2.
fn a_on_switch() -> (UdpLink, UdpSocket, UdpSocket) {
    let mut s = loopback_sockets(4);
    let addrs: Vec<SocketAddr> = s.iter().map(|x| x.1).collect();
    let f = fabric(&addrs[..2], &addrs[2..], &[("a", "sw0:1"), ("b", "sw0:2")]);
    let (_, _) = s.pop().unwrap();
    let (port1, _) = s.pop().unwrap();
    let (b, _) = s.pop().unwrap();
    let (sa, _) = s.pop().unwrap();
    let a = UdpLink::from_socket(&f, "a", sa).unwrap();
    (a, port1, b)
}

#[test]
fn a_cabled_hca_sends_every_packet_down_its_cable_and_loops_back_its_own() {
    let (mut a, port1, b) = a_on_switch();
    a.set_liveness(None);
    // To b's LID, to a LID no node has, multicast, permissive: all to the
    // switch port, nothing to b's own address.
    let pkts = [
        ud_packet(1, 2, 0, b"to b"),
        ud_packet(1, 0x77, 1, b"unknown"),
        ud_packet(1, 0xc001, 2, b"multicast"),
        ud_packet(1, 0xffff, 3, b"permissive"),
    ];
    for p in &pkts {
        a.send(T0, p).unwrap();
    }
    assert_eq!(raw_drain(&port1), pkts.to_vec());
    assert!(raw_drain(&b).is_empty(), "nothing goes past the cable");
    let c = *a.counters();
    assert_eq!(
        (c.tx_packets, c.drop_tx_unknown_dlid, c.tx_multicast),
        (4, 0, 1),
        "{c:?}"
    );
    // Its own LID loops back (AD-04), multicast too (the switch does not send
    // a packet back out its ingress port).
    let own = ud_packet(1, 1, 4, b"self");
    a.send(T0, &own).unwrap();
    assert!(raw_drain(&port1).is_empty());
    assert_eq!(drain(&mut a, T0), vec![pkts[2].clone(), own]);
}

#[test]
fn a_cabled_hca_takes_datagrams_only_from_its_cable_peer() {
    let (mut a, port1, b) = a_on_switch();
    a.set_liveness(None);
    let from_b = ud_packet(2, 1, 0, b"from b's own address");
    b.send_to(&from_b, a.local_addr()).unwrap();
    let via = ud_packet(2, 1, 1, b"through the switch");
    port1.send_to(&via, a.local_addr()).unwrap();
    // Through a switch the sender's LID is unknown to the link (the switch
    // carries every node's packets): lent with none.
    assert_eq!(drain_from(&mut a, T0), vec![(via, None)]);
    assert_eq!(a.counters().drop_rx_unknown_source, 1);
}

#[test]
fn a_cabled_hca_keeps_alive_only_toward_its_cable_peer() {
    let (mut a, port1, b) = a_on_switch();
    a.set_liveness(Some((Duration::from_secs(1), Duration::from_secs(3))));
    a.handle_timeout(T0).unwrap();
    assert_eq!(raw_drain(&port1), vec![KEEPALIVE.to_vec()]);
    assert!(raw_drain(&b).is_empty());
    // b's keepalive does not keep a's port up; the switch port's does.
    for t in 1..=3 {
        b.send_to(KEEPALIVE, a.local_addr()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let now = T0 + Duration::from_secs(t);
        let _ = drain(&mut a, now);
        a.handle_timeout(now).unwrap();
    }
    assert!(!a.is_up(), "b is not a's link partner");
    port1.send_to(KEEPALIVE, a.local_addr()).unwrap();
    let _ = drain(&mut a, T0 + Duration::from_secs(4));
    assert!(a.is_up());
}

#[test]
fn two_hcas_back_to_back_exchange_with_and_without_the_fabric_key() {
    for keyed in [false, true] {
        let mut s = loopback_sockets(2);
        let addrs: Vec<SocketAddr> = s.iter().map(|x| x.1).collect();
        let f = fabric(&addrs, &[], &[("a", "b")]);
        let (sb, _) = s.pop().unwrap();
        let (sa, _) = s.pop().unwrap();
        let mut a: Box<dyn Link> = Box::new(UdpLink::from_socket(&f, "a", sa).unwrap());
        let mut b: Box<dyn Link> = Box::new(UdpLink::from_socket(&f, "b", sb).unwrap());
        if keyed {
            let k = FabricKey::from_bytes([0x42; 32]);
            a = Box::new(AuthLink::new(a, &k));
            b = Box::new(AuthLink::new(b, &k));
        }
        let ab = ud_packet(1, 2, 0, b"a to b");
        let ba = ud_packet(2, 1, 0, b"b to a");
        a.send(T0, &ab).unwrap();
        b.send(T0, &ba).unwrap();
        // Back to back, the peer's LID is known: lent with it.
        assert_eq!(drain_from(&mut b, T0), vec![(ab, Some(1))], "keyed {keyed}");
        assert_eq!(drain_from(&mut a, T0), vec![(ba, Some(2))], "keyed {keyed}");
    }
}

#[test]
fn a_switch_port_is_cabled_has_no_loopback_and_is_down_until_heard() {
    let mut s = loopback_sockets(4);
    let addrs: Vec<SocketAddr> = s.iter().map(|x| x.1).collect();
    let f = fabric(&addrs[..2], &addrs[2..], &[("a", "sw0:1"), ("b", "sw0:2")]);
    let (_, _) = s.pop().unwrap();
    let (p1, _) = s.pop().unwrap();
    let (_, _) = s.pop().unwrap();
    let (a, _) = s.pop().unwrap();
    let k = FabricKey::from_bytes([7; 32]);
    let mut port = AuthLink::new(
        UdpLink::switch_port(&f, "sw0", 1, p1, UdpOffloads::ALL).unwrap(),
        &k,
    );
    assert!(!port.is_up(), "no partner heard yet");
    // Any DLID, DLID 0 included, goes to node a; none loops back.
    for dlid in [0, 1, 2, 0xffff] {
        port.send(T0, &ud_packet(2, dlid, 0, b"x")).unwrap();
    }
    assert_eq!(raw_drain(&a).len(), 4);
    assert!(drain(&mut port, T0).is_empty());
    // A keepalive from node a brings the port up.
    a.send_to(KEEPALIVE, addrs[2]).unwrap();
    let _ = drain(&mut port, T0);
    assert!(port.is_up());
    assert!(
        UdpLink::switch_port(
            &f,
            "sw0",
            3,
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpOffloads::ALL
        )
        .is_err(),
        "no port 3"
    );
    assert!(
        UdpLink::switch_port(
            &f,
            "sw9",
            1,
            UdpSocket::bind("127.0.0.1:0").unwrap(),
            UdpOffloads::ALL
        )
        .is_err(),
        "no switch sw9"
    );
}
