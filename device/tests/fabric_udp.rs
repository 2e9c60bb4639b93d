//! ARCHITECTURE.md §6 `ib-udp` link mode: two UdpLinks on 127.0.0.1 exchange real
//! packets built with `PacketRepr`; a packet to the own LID loops back without a
//! socket (AD-04); undeliverable and untrusted datagrams are dropped and counted
//! (ARCHITECTURE.md §9).

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::{drain, drain_from, loopback_sockets, recv_within, ud_packet};
use device::fabric::{
    FabricFile, Link, LinkError, Node, UdpLink, UdpOffloads, MAX_PACKET_LEN, MIN_PACKET_LEN,
};
use transport::engine::{Engine, Limits, PortConfig, RxDrop};
use transport::memory::VecMemory;
use transport::verbs::Time;
use transport::wire::{DropReason, PacketRepr};

const T0: Duration = Duration::from_secs(1_700_000_000);

#[test]
fn udp_link_section6_exchange_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    assert!(a.raw_fd() >= 0 && b.raw_fd() >= 0 && a.raw_fd() != b.raw_fd());
    assert_eq!(a.node().lid, 1);
    assert_eq!(b.node().lid, 2);

    for i in 0..10u32 {
        let payload = vec![i as u8; (i * 37) as usize];
        let ab = ud_packet(1, 2, i, &payload);
        let ba = ud_packet(2, 1, 1000 + i, &payload);
        a.send(T0, &ab).unwrap();
        b.send(T0, &ba).unwrap();
        let got = recv_within(&mut b, T0).expect("b receives a's packet");
        assert_eq!(got, ab);
        let p = PacketRepr::parse(&got).expect("valid packet");
        assert_eq!((p.lrh.slid, p.lrh.dlid, p.transport.bth.psn), (1, 2, i));
        assert_eq!(p.transport.payload, &payload[..]);
        let got = recv_within(&mut a, T0).expect("a receives b's packet");
        assert_eq!(got, ba);
        assert_eq!(PacketRepr::parse(&got).unwrap().transport.bth.psn, 1000 + i);
    }
    for link in [&a, &b] {
        let c = link.counters();
        assert_eq!((c.tx_packets, c.rx_packets), (10, 10), "{c:?}");
        assert_eq!(c.tx_bytes, c.rx_bytes);
        assert_eq!(c.dropped(), 0, "{c:?}");
    }
    // Nothing else is waiting.
    let mut buf = vec![0; MAX_PACKET_LEN];
    assert_eq!(a.recv(T0, &mut buf).unwrap(), None);
    assert_eq!(a.poll_timeout(), None);
}

/// A recvmmsg that returned less than a batch emptied the socket, so the
/// round reads no more (issue 30 item 3: a second read that only said EAGAIN
/// was a system call in every round that received); a full batch reads on.
#[test]
fn udp_link_a_short_receive_batch_ends_the_rounds_reads() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    let round = |b: &mut UdpLink, sent: u32| {
        // Loopback UDP has queued them when send returns; the pause is margin.
        std::thread::sleep(Duration::from_millis(20));
        let calls = b.recv_calls();
        let mut got = 0;
        let n = b.recv_batch(T0, 64, &mut |_| got += 1).unwrap();
        assert_eq!((n, got), (sent as usize, sent as usize));
        b.recv_calls() - calls
    };
    a.send(T0, &ud_packet(1, 2, 0, b"ping")).unwrap();
    assert_eq!(round(&mut b, 1), 1, "one datagram waiting: one read");
    // 40 waiting, sizes apart (no GRO run): a full batch of 32, then a short
    // one of 8 that ends the round.
    for i in 0..40u32 {
        a.send(T0, &ud_packet(1, 2, i, &vec![7; i as usize]))
            .unwrap();
    }
    assert_eq!(round(&mut b, 40), 2, "a full batch, then a short one");
    assert_eq!(round(&mut b, 0), 1, "nothing waiting: the one read says so");
}

#[test]
fn udp_link_batched_sends_leave_at_end_sends_in_order_and_all_arrive() {
    // Between begin_sends and end_sends the link queues (one sendmmsg per 64):
    // nothing leaves before end_sends, then all 100 leave in order, and the
    // receiver takes them through its recvmmsg batches.
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    let sent: Vec<Vec<u8>> = (0..100u32)
        .map(|i| ud_packet(1, 2, i, &vec![i as u8; 64 + i as usize * 13]))
        .collect();
    a.begin_sends();
    for p in &sent[..20] {
        a.send(T0, p).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = vec![0; MAX_PACKET_LEN];
    assert_eq!(b.recv(T0, &mut buf).unwrap(), None, "queued, not sent yet");
    for p in &sent[20..] {
        a.send(T0, p).unwrap();
    }
    a.end_sends().unwrap();
    let mut got = Vec::new();
    while got.len() < sent.len() {
        match recv_within(&mut b, T0) {
            Some(p) => got.push(p),
            None => break,
        }
    }
    assert_eq!(got, sent);
    assert_eq!(a.counters().tx_packets, 100);
    assert_eq!(b.counters().rx_packets, 100);
    assert_eq!(a.counters().dropped() + b.counters().dropped(), 0);
    // After end_sends a send leaves at once again.
    a.send(T0, &sent[0]).unwrap();
    assert_eq!(recv_within(&mut b, T0).as_deref(), Some(&sent[0][..]));
}

#[test]
fn udp_link_ad04_loopback_to_own_lid() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    let pkts: Vec<Vec<u8>> = (0..3).map(|i| ud_packet(1, 1, i, b"self")).collect();
    for p in &pkts {
        a.send(T0, p).unwrap();
    }
    // The socket is not readable for these, so the link asks to be polled now.
    assert_eq!(a.poll_timeout(), Some(Duration::ZERO));
    let mut buf = vec![0; MAX_PACKET_LEN];
    for p in &pkts {
        let n = a.recv(T0, &mut buf).unwrap().expect("looped back");
        assert_eq!(&buf[..n], &p[..]);
        assert!(PacketRepr::parse(&buf[..n]).is_ok());
    }
    assert_eq!(a.recv(T0, &mut buf).unwrap(), None);
    assert_eq!(a.poll_timeout(), None);
    let c = a.counters();
    assert_eq!(
        (c.loopback_packets, c.tx_packets, c.rx_packets),
        (3, 0, 3),
        "{c:?}"
    );
    assert!(
        drain(&mut b, T0).is_empty(),
        "loopback never reaches the socket"
    );
}

#[test]
fn udp_link_section6_unknown_dlid_is_a_counted_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    a.send(T0, &ud_packet(1, 7, 0, b"nobody")).unwrap();
    assert_eq!(a.counters().drop_tx_unknown_dlid, 1);
    assert_eq!(a.counters().tx_packets, 0);
    // Packets too short or too long to be native packets are not sent either.
    a.send(T0, &[0u8; MIN_PACKET_LEN - 1]).unwrap();
    a.send(T0, &vec![0u8; MAX_PACKET_LEN + 1]).unwrap();
    assert_eq!(a.counters().drop_tx_short, 1);
    assert_eq!(a.counters().drop_tx_oversized, 1);
    assert!(drain(&mut b, T0).is_empty());
}

/// PV-07 (ARCHITECTURE.md §6): a packet to a multicast DLID goes to every
/// other node of the fabric file and loops back to the sender's own engine,
/// batched or not; the receivers' engines keep it for attached QPs only.
#[test]
fn udp_link_pv_07_multicast_goes_to_every_node_and_loops_back() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    let one = ud_packet(1, 0xc001, 1, b"multicast");
    a.send(T0, &one).unwrap();
    a.begin_sends();
    let two = ud_packet(1, 0xfffe, 2, b"batched");
    a.send(T0, &two).unwrap();
    a.end_sends().unwrap();
    assert_eq!(drain(&mut b, T0), vec![one.clone(), two.clone()]);
    assert_eq!(drain(&mut a, T0), vec![one, two], "looped back");
    let c = a.counters();
    assert_eq!(
        (
            c.tx_multicast,
            c.tx_packets,
            c.loopback_packets,
            c.drop_tx_unknown_dlid
        ),
        (2, 2, 2, 0),
        "{c:?}"
    );
}

#[test]
fn udp_link_section9_datagram_from_a_stranger_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    // A well-formed packet claiming to be from a's LID, sent from an address the
    // fabric file does not list.
    stranger
        .send_to(&ud_packet(1, 2, 0, b"spoof"), b.local_addr())
        .unwrap();
    let good = ud_packet(1, 2, 1, b"real");
    a.send(T0, &good).unwrap();
    let got = recv_within(&mut b, T0).expect("the real packet");
    assert_eq!(got, good);
    assert_eq!(b.counters().drop_rx_unknown_source, 1);
    assert_eq!(b.counters().rx_packets, 1);
}

/// A fabric of links "a" (LID 1) and "b" (LID 2) and a node "x" (LID 3) whose
/// socket the test drives by hand, to send what a broken or hostile peer would.
fn with_raw_peer() -> (UdpLink, UdpLink, UdpSocket) {
    let mut s = loopback_sockets(3);
    let node = |name: &str, lid: u16, address: SocketAddr| Node {
        name: name.into(),
        lid,
        guid: 0x1000 + u64::from(lid),
        address,
    };
    let fabric = FabricFile::from_nodes(vec![
        node("a", 1, s[0].1),
        node("b", 2, s[1].1),
        node("x", 3, s[2].1),
    ])
    .unwrap();
    let (x, _) = s.pop().unwrap();
    let (sb, _) = s.pop().unwrap();
    let (sa, _) = s.pop().unwrap();
    let a = UdpLink::from_socket(&fabric, "a", sa).unwrap();
    let b = UdpLink::from_socket(&fabric, "b", sb).unwrap();
    (a, b, x)
}

#[test]
fn udp_link_section9_oversized_dropped_the_rest_lent_with_the_senders_lid() {
    // The link drops what no buffer holds and names the sender by its address;
    // what the packet says (length, SLID, DLID) is the engine's to check
    // (ARCHITECTURE.md §2), so short, spoofed and misaddressed packets pass the
    // link with x's LID, 3.
    let (_a, mut b, x) = with_raw_peer();
    let to = b.local_addr();
    let short = vec![0u8; MIN_PACKET_LEN - 1];
    let spoofed = ud_packet(1, 2, 0, b"claims LID 1");
    let misaddressed = ud_packet(3, 1, 0, b"for LID 1");
    let good = ud_packet(3, 2, 9, b"fine");
    let permissive = ud_packet(3, 0xffff, 10, b"permissive");
    x.send_to(&short, to).unwrap();
    x.send_to(&vec![0u8; MAX_PACKET_LEN + 1], to).unwrap();
    for p in [&spoofed, &misaddressed, &good, &permissive] {
        x.send_to(p, to).unwrap();
    }
    let got = drain_from(&mut b, T0);
    let want: Vec<(Vec<u8>, Option<u16>)> = [short, spoofed, misaddressed, good, permissive]
        .into_iter()
        .map(|p| (p, Some(3)))
        .collect();
    assert_eq!(got, want);
    let c = *b.counters();
    assert_eq!(c.drop_rx_oversized, 1, "{c:?}");
    assert_eq!(c.rx_packets, 5, "{c:?}");
    assert_eq!(c.dropped(), 1, "{c:?}");
}

#[test]
fn udp_link_section9_the_engine_drops_short_spoofed_and_misaddressed_packets() {
    // What the link lent above, handed to b's engine (LID 2) with the sender's
    // LID: each drop is counted once, by the engine's one parse.
    let mut e = Engine::new(PortConfig::new(2, 0x1002), Limits::default());
    let mut mem = VecMemory::new(0, 4096);
    let t = Time(0);
    e.handle_packet_from(&[0u8; MIN_PACKET_LEN - 1], Some(3), &mut mem, t);
    e.handle_packet_from(&ud_packet(1, 2, 0, b"claims LID 1"), Some(3), &mut mem, t);
    e.handle_packet_from(&ud_packet(3, 1, 0, b"for LID 1"), Some(3), &mut mem, t);
    // Past the LID checks: no QP 2 exists, so the good and permissive packets
    // are dropped later, as unknown QP (C9-37).
    e.handle_packet_from(&ud_packet(3, 2, 9, b"fine"), Some(3), &mut mem, t);
    e.handle_packet_from(&ud_packet(3, 0xffff, 10, b"perm"), Some(3), &mut mem, t);
    let c = e.counters();
    assert_eq!(c.wire_drops.get(DropReason::LengthMismatch), 1, "{c:?}");
    assert_eq!(c.dropped(RxDrop::SpoofedSlid), 1, "{c:?}");
    assert_eq!(c.dropped(RxDrop::BadDlid), 1, "{c:?}");
    assert_eq!(c.dropped(RxDrop::UnknownQp), 2, "{c:?}");
    // Without a sender (a caller that cannot name one) the SLID is not judged.
    e.handle_packet(&ud_packet(1, 2, 0, b"claims LID 1"), &mut mem, t);
    assert_eq!(e.counters().dropped(RxDrop::SpoofedSlid), 1);
    assert_eq!(e.counters().dropped(RxDrop::UnknownQp), 3);

    // AD-01: with LMC 2 the port answers to LIDs 8..=11 (path bits), and to
    // nothing else.
    let mut port = PortConfig::new(8, 0x1008);
    port.lmc = 2;
    let mut e = Engine::new(port, Limits::default());
    for dlid in [8, 9, 11] {
        e.handle_packet_from(&ud_packet(3, dlid, 0, b"mine"), Some(3), &mut mem, t);
    }
    for dlid in [7, 12] {
        e.handle_packet_from(&ud_packet(3, dlid, 0, b"not mine"), Some(3), &mut mem, t);
    }
    let c = e.counters();
    assert_eq!(
        (c.dropped(RxDrop::UnknownQp), c.dropped(RxDrop::BadDlid)),
        (3, 2)
    );
}

#[test]
fn udp_link_section6_setup_errors() {
    let (a, _b, _x) = with_raw_peer();
    let fabric = a.fabric().clone();
    assert!(matches!(
        UdpLink::bind(&fabric, "zz"),
        Err(LinkError::UnknownNode(n)) if n == "zz"
    ));
    // A socket bound elsewhere than the node's address.
    let other = UdpSocket::bind("127.0.0.1:0").unwrap();
    let e = UdpLink::from_socket(&fabric, "x", other).expect_err("wrong address");
    assert!(matches!(e, LinkError::AddressMismatch { .. }), "{e}");
    // "a" holds its address already.
    let e = UdpLink::bind(&fabric, "a").expect_err("address in use");
    assert!(matches!(e, LinkError::Bind { .. }), "{e}");
    let mut a = a;
    let mut small = [0u8; 64];
    assert!(matches!(
        a.recv(T0, &mut small),
        Err(LinkError::BufferTooSmall { have: 64 })
    ));
}

#[test]
fn udp_link_section6_bind_from_fabric_file() {
    // Learn a free port, release it, and let the link bind it from the file.
    let port = UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let text =
        format!("[[node]]\nname = \"solo\"\nlid = 5\nguid = 5\naddress = \"127.0.0.1:{port}\"\n");
    let fabric = FabricFile::parse("solo.toml", &text).unwrap();
    let mut link = UdpLink::bind(&fabric, "solo").expect("bind");
    assert_eq!(link.local_addr().port(), port);
    let p = ud_packet(5, 5, 0, b"me");
    link.send(T0, &p).unwrap();
    assert_eq!(recv_within(&mut link, T0), Some(p));
}

/// A fabric of "a" (LID 1) and "b" (LID 2) whose links use the offloads given.
fn offload_pair(a_off: UdpOffloads, b_off: UdpOffloads) -> (UdpLink, UdpLink) {
    offload_pair_with(a_off, b_off, |_| {})
}

fn offload_pair_with(
    a_off: UdpOffloads,
    b_off: UdpOffloads,
    prepare_a: impl FnOnce(&UdpSocket),
) -> (UdpLink, UdpLink) {
    let mut s = loopback_sockets(2);
    let node = |name: &str, lid: u16, address: SocketAddr| Node {
        name: name.into(),
        lid,
        guid: 0x1000 + u64::from(lid),
        address,
    };
    let fabric = FabricFile::from_nodes(vec![node("a", 1, s[0].1), node("b", 2, s[1].1)]).unwrap();
    let (sb, _) = s.pop().unwrap();
    let (sa, _) = s.pop().unwrap();
    prepare_a(&sa);
    let mut a = UdpLink::with_offloads(&fabric, "a", sa, a_off).unwrap();
    let mut b = UdpLink::with_offloads(&fabric, "b", sb, b_off).unwrap();
    // No keepalive deadlines (AE-01): these tests look at the batch's.
    a.set_liveness(None);
    b.set_liveness(None);
    (a, b)
}

/// One round's worth of the packets of RDMA WRITEs: runs of same-size packets
/// (the PMTU middles) with a shorter last one, and a longer first one, as the
/// requester segments them; 40 in all.
fn write_like_packets() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for m in 0..2u32 {
        v.push(ud_packet(1, 2, m * 100, &[0xf0; 1100]));
        for i in 1..19 {
            v.push(ud_packet(1, 2, m * 100 + i, &vec![i as u8; 1024]));
        }
        v.push(ud_packet(1, 2, m * 100 + 19, &[0x0f; 200]));
    }
    v
}

/// Sends `pkts` as one port round does (between begin_sends and end_sends) and
/// receives them one by one (a receive call may stop inside a GRO run).
fn round_trip(a: &mut UdpLink, b: &mut UdpLink, pkts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    a.begin_sends();
    for p in pkts {
        a.send(T0, p).unwrap();
    }
    a.end_sends().unwrap();
    let mut got = Vec::new();
    while got.len() < pkts.len() {
        match recv_within(b, T0) {
            Some(p) => got.push(p),
            None => break,
        }
    }
    got
}

#[test]
fn udp_link_gso_and_gro_carry_runs_of_same_size_packets_split_exactly() {
    // Issue 12: with UDP GSO a run of same-size packets to one peer leaves as
    // one send; with GRO the receiver gets runs in one buffer and splits them
    // by the segment size. Every packet arrives whole, in order. (The host
    // kernel has both: Linux >= 5.0.)
    let (mut a, mut b) = offload_pair(UdpOffloads::ALL, UdpOffloads::ALL);
    assert_eq!(
        (a.offloads(), b.offloads()),
        (UdpOffloads::ALL, UdpOffloads::ALL)
    );
    let pkts = write_like_packets();
    let got = round_trip(&mut a, &mut b, &pkts);
    assert_eq!(got, pkts);
    let (ca, cb) = (*a.counters(), *b.counters());
    // Each WRITE's 18 middles and its last leave as one GSO run.
    assert_eq!(ca.tx_gso_runs, 2, "{ca:?}");
    assert_eq!(ca.tx_packets, 40, "{ca:?}");
    assert!(cb.rx_gro_runs >= 2, "{cb:?}");
    assert_eq!((cb.rx_packets, cb.rx_bytes), (40, ca.tx_bytes), "{cb:?}");
    assert_eq!(ca.dropped() + cb.dropped(), 0);
    // The device's counter report shows them.
    let r = a.report().unwrap();
    assert!(
        r.starts_with("udp a: tx 40 ") && r.contains(" 2 GSO runs)"),
        "{r}"
    );

    // A receive call that stops inside a run leaves the rest in the link's
    // buffer, where the socket no longer signals it: the link asks to be
    // called at once until it is lent.
    a.begin_sends();
    for p in &pkts[1..20] {
        a.send(T0, p).unwrap();
    }
    a.end_sends().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    assert_eq!(
        b.recv_batch(T0, 5, &mut |r| got.push(r.packet.to_vec()))
            .unwrap(),
        5
    );
    assert_eq!(b.poll_timeout(), Some(Duration::ZERO));
    while b
        .recv_batch(T0, 5, &mut |r| got.push(r.packet.to_vec()))
        .unwrap()
        > 0
    {}
    assert_eq!(got, pkts[1..20]);
    assert_eq!(b.poll_timeout(), None);
}

#[test]
fn udp_link_without_offloads_sends_and_receives_one_datagram_per_packet() {
    // The fallback forced: neither link uses GSO or GRO, and the traffic is
    // the same; and a GSO sender to a receiver without GRO (the kernel
    // segments for it).
    let pkts = write_like_packets();
    let (mut a, mut b) = offload_pair(UdpOffloads::NONE, UdpOffloads::NONE);
    assert_eq!(a.offloads(), UdpOffloads::NONE);
    assert_eq!(round_trip(&mut a, &mut b, &pkts), pkts);
    assert_eq!((a.counters().tx_gso_runs, b.counters().rx_gro_runs), (0, 0));
    assert_eq!(b.counters().rx_packets, 40);

    let (mut a, mut b) = offload_pair(UdpOffloads::ALL, UdpOffloads::NONE);
    assert_eq!(round_trip(&mut a, &mut b, &pkts), pkts);
    assert!(a.counters().tx_gso_runs >= 2);
    assert_eq!(b.counters().rx_gro_runs, 0);
}

/// SO_NO_CHECK on a socket: the kernel then refuses UDP GSO sends with EINVAL
/// (udp(7): GSO needs the checksum).
fn no_checksum(s: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a live socket descriptor and a c_int option value of the length
    // passed, only read by the kernel.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
}

#[test]
fn udp_link_gso_refused_by_the_kernel_falls_back_to_plain_datagrams() {
    // The probe succeeds (UDP_SEGMENT is known) but every GSO send fails with
    // EINVAL: the link turns GSO off and sends the same packets as plain
    // datagrams, losing none.
    let (mut a, mut b) = offload_pair_with(UdpOffloads::ALL, UdpOffloads::ALL, no_checksum);
    assert!(a.offloads().gso, "probed on");
    let pkts = write_like_packets();
    assert_eq!(round_trip(&mut a, &mut b, &pkts), pkts);
    let ca = *a.counters();
    assert!(!a.offloads().gso, "turned off by the refusal");
    assert_eq!(
        (ca.tx_gso_runs, ca.tx_packets, ca.dropped()),
        (0, 40, 0),
        "{ca:?}"
    );
}

#[test]
fn udp_link_packets_built_in_its_lent_send_buffer_leave_without_a_copy() {
    // Issue 12: while batching, the link lends its own buffer (aligned for the
    // CRC fold, WF-09) and queues it as built; routing and drops are those of
    // `send`: a packet to the own LID loops back, one to no node is dropped
    // and its buffer lent again.
    let dir = tempfile::tempdir().unwrap();
    let (mut a, mut b, _fabric) = common::udp_pair(dir.path());
    assert!(a.send_buffer().is_none(), "only while batching");
    let pkts: Vec<Vec<u8>> = (0..70u32)
        .map(|i| ud_packet(1, 2, i, &vec![i as u8; 1024]))
        .collect();
    let own = ud_packet(1, 1, 500, b"to myself");
    let nowhere = ud_packet(1, 9, 501, b"no such LID");
    a.begin_sends();
    for p in pkts.iter().chain([&own, &nowhere]) {
        let buf = a.send_buffer().expect("lent while batching");
        assert_eq!(buf.as_ptr() as usize % 16, 12);
        assert_eq!(buf.len(), MAX_PACKET_LEN);
        buf[..p.len()].copy_from_slice(p);
        a.send_from_buffer(T0, p.len()).unwrap();
    }
    a.end_sends().unwrap();
    let got = drain(&mut b, T0);
    assert_eq!(got, pkts);
    let c = *a.counters();
    assert_eq!(
        (c.tx_packets, c.loopback_packets, c.drop_tx_unknown_dlid),
        (70, 1, 1)
    );
    assert_eq!(recv_within(&mut a, T0).as_deref(), Some(&own[..]));
}
