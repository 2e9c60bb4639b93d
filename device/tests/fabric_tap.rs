//! ARCHITECTURE.md §6 `roce` link mode (WF-10): a TapLink over a fake TAP (a
//! `socketpair(AF_UNIX, SOCK_SEQPACKET)`, one message per frame, with vnet
//! headers as a real TAP gives them). RoCEv2 frames for the port go to the engine
//! without the vnet header, everything else to the guest's queue with it; every
//! malformed frame is dropped and counted; the port's own frames loop back.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use device::fabric::{
    classify, FrameClass, Link, LinkError, Tap, TapLink, MAX_FRAME_LEN, MAX_PACKET_LEN,
    TAP_LOOPBACK_CAPACITY, TO_GUEST_FRAMES, VNET_HDR_LEN,
};
use socket2::{Domain, Socket, Type};

mod common;
use common::is_root;

const T0: Duration = Duration::from_secs(1_700_000_000);
const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const PEER: [u8; 6] = [0x52, 0x54, 0x00, 0x65, 0x43, 0x21];
const BCAST: [u8; 6] = [0xff; 6];

/// A TapLink on one end of a SEQPACKET pair; the other end plays the kernel.
fn fake_tap() -> (TapLink, Socket) {
    let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    // Room for a few 64 KiB frames in flight.
    let _ = b.set_send_buffer_size(1 << 20);
    let tap = Tap::from_fd(OwnedFd::from(a), "fake0", MAC, 1500).unwrap();
    (TapLink::new(Arc::new(tap)), b)
}

fn eth(dst: [u8; 6], ethertype: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&PEER);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

fn udp(dport: u16, payload: usize) -> Vec<u8> {
    let mut u = 49152u16.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend(std::iter::repeat_n(0xabu8, payload));
    u
}

fn ipv4_udp(dst: [u8; 6], dport: u16, payload: usize) -> Vec<u8> {
    let mut f = eth(dst, 0x0800);
    let total = (20 + 8 + payload) as u16;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&total.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 2, 10, 0, 0, 1]);
    f.extend(udp(dport, payload));
    f
}

fn ipv6_udp(dst: [u8; 6], dport: u16, payload: usize) -> Vec<u8> {
    let mut f = eth(dst, 0x86dd);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend_from_slice(&[0xfe; 32]);
    f.extend(udp(dport, payload));
    f
}

fn vlan_ipv4_udp(dst: [u8; 6], dport: u16) -> Vec<u8> {
    let plain = ipv4_udp(dst, dport, 40);
    let mut f = eth(dst, 0x8100);
    f.extend_from_slice(&[0x20, 0x05]); // PCP 1, VID 5
    f.extend_from_slice(&plain[12..]);
    f
}

fn arp(dst: [u8; 6]) -> Vec<u8> {
    let mut f = eth(dst, 0x0806);
    f.extend_from_slice(&[0; 28]);
    f
}

fn with_hdr(hdr: [u8; VNET_HDR_LEN], frame: &[u8]) -> Vec<u8> {
    let mut v = hdr.to_vec();
    v.extend_from_slice(frame);
    v
}

fn inject(peer: &Socket, frame: &[u8]) {
    (&*peer)
        .write_all(&with_hdr([0; VNET_HDR_LEN], frame))
        .unwrap();
}

fn recv(link: &mut TapLink) -> Option<Vec<u8>> {
    let mut buf = vec![0; MAX_PACKET_LEN];
    link.recv(T0, &mut buf).unwrap().map(|n| buf[..n].to_vec())
}

#[test]
fn tap_roce_frames_for_the_port_go_to_the_engine_without_vnet_header() {
    let (mut link, peer) = fake_tap();
    link.tap().to_guest().set_attached(true);
    for f in [
        ipv4_udp(MAC, 4791, 100),
        ipv6_udp(MAC, 4791, 64),
        vlan_ipv4_udp(MAC, 4791),
        // RoCEv2 multicast (UD to a group) is the engine's too.
        ipv4_udp([0x01, 0x00, 0x5e, 0, 0, 1], 4791, 32),
    ] {
        inject(&peer, &f);
        assert_eq!(recv(&mut link).as_deref(), Some(&f[..]));
    }
    assert_eq!(recv(&mut link), None);
    let c = *link.counters();
    assert_eq!(
        (c.rx_roce_frames, c.to_guest_frames, c.dropped()),
        (4, 0, 0)
    );
}

#[test]
fn tap_everything_else_goes_whole_to_the_guest_queue_and_wakes_it() {
    let (mut link, peer) = fake_tap();
    let tap = Arc::clone(link.tap());
    let q = tap.to_guest();
    q.set_attached(true);
    let guest = [
        arp(BCAST),
        arp(MAC),
        ipv4_udp(MAC, 53, 20),
        ipv6_udp(BCAST, 4790, 8),
        eth(MAC, 0x88cc), // LLDP: not IP
        // Too short to hold UDP: the guest's stack decides.
        ipv4_udp(MAC, 4791, 0)[..30].to_vec(),
    ];
    for f in &guest {
        inject(&peer, f);
    }
    assert_eq!(recv(&mut link), None, "nothing for the engine");
    assert_eq!(q.event().read().unwrap(), 1, "one wake-up per batch");
    for f in &guest {
        let got = q.pop().expect("queued for the guest");
        assert_eq!(&got[..VNET_HDR_LEN], &[0; VNET_HDR_LEN], "vnet header kept");
        assert_eq!(&got[VNET_HDR_LEN..], &f[..]);
    }
    assert!(q.pop().is_none());
    assert_eq!(link.counters().to_guest_frames, guest.len() as u64);
}

#[test]
fn tap_roce_for_another_mac_goes_to_the_engine_which_owns_the_dmac_check() {
    // The link steers by UDP port only; the Ethernet destination is checked
    // once, by the engine's parse (ARCHITECTURE.md §2), which drops a frame a
    // bridge flooded to us as BadDmac (transport/tests/engine_roce.rs).
    let (mut link, peer) = fake_tap();
    link.tap().to_guest().set_attached(true);
    let v4 = ipv4_udp(PEER, 4791, 64);
    let v6 = ipv6_udp(PEER, 4791, 64);
    inject(&peer, &v4);
    inject(&peer, &v6);
    assert_eq!(recv(&mut link).as_deref(), Some(&v4[..]));
    assert_eq!(recv(&mut link).as_deref(), Some(&v6[..]));
    let c = *link.counters();
    assert_eq!(
        (c.rx_roce_frames, c.to_guest_frames, c.dropped()),
        (2, 0, 0)
    );
}

#[test]
fn tap_one_receive_call_lends_every_roce_frame_of_a_burst_and_queues_the_rest() {
    // Batched reads (issue 12): one recv_batch reads the burst, lends each RoCE
    // frame from its buffer and queues the guest's frames, up to `max` lent.
    let (mut link, peer) = fake_tap();
    link.tap().to_guest().set_attached(true);
    let roce: Vec<Vec<u8>> = (0..10).map(|i| ipv4_udp(MAC, 4791, 40 + i)).collect();
    for (i, f) in roce.iter().enumerate() {
        inject(&peer, f);
        if i % 3 == 0 {
            inject(&peer, &arp(BCAST));
        }
    }
    let mut got = Vec::new();
    let n = link
        .recv_batch(T0, 6, &mut |r| {
            assert_eq!(r.src_lid, None);
            got.push(r.packet.to_vec())
        })
        .unwrap();
    assert_eq!(n, 6);
    let n = link
        .recv_batch(T0, 64, &mut |r| got.push(r.packet.to_vec()))
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(got, roce);
    assert_eq!(link.counters().to_guest_frames, 4);
    assert_eq!(
        link.recv_batch(T0, 64, &mut |_| panic!("empty")).unwrap(),
        0
    );
}

#[test]
fn tap_malformed_frames_are_dropped_and_counted_never_delivered() {
    let (mut link, peer) = fake_tap();
    link.tap().to_guest().set_attached(true);
    let roce = ipv4_udp(MAC, 4791, 64);
    // Truncated: less than a vnet header; a vnet header and half an Ethernet one.
    (&peer).write_all(&[0; 7]).unwrap();
    (&peer).write_all(&[0; VNET_HDR_LEN + 10]).unwrap();
    // Bad vnet headers: unknown flag, unknown GSO type, ECN without GSO, checksum
    // position outside the frame, GSO without a segment size, GSO on RoCE.
    let mut csum_out = [0u8; VNET_HDR_LEN];
    csum_out[0] = 1;
    csum_out[6..8].copy_from_slice(&(roce.len() as u16).to_le_bytes());
    let mut gso_roce = [0u8; VNET_HDR_LEN];
    gso_roce[1] = 3; // GSO_UDP
    gso_roce[4] = 0x40;
    for hdr in [
        [0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        [0, 2, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0],
        [0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        csum_out,
        [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        gso_roce,
    ] {
        (&peer).write_all(&with_hdr(hdr, &roce)).unwrap();
    }
    // Oversized: a RoCE frame longer than any native packet, and a frame longer
    // than the largest GSO frame.
    inject(&peer, &ipv4_udp(MAC, 4791, MAX_PACKET_LEN));
    inject(
        &peer,
        &arp(BCAST)
            .into_iter()
            .chain(std::iter::repeat_n(0, MAX_FRAME_LEN))
            .collect::<Vec<_>>(),
    );
    // A good frame after all that still arrives.
    inject(&peer, &roce);
    let mut got = None;
    for _ in 0..4 {
        got = got.or(recv(&mut link));
    }
    assert_eq!(got.as_deref(), Some(&roce[..]));
    let c = *link.counters();
    assert_eq!(c.drop_rx_short, 2, "{c:?}");
    assert_eq!(c.drop_rx_bad_vnet_hdr, 6, "{c:?}");
    assert_eq!(c.drop_rx_oversized, 2, "{c:?}");
    assert_eq!((c.rx_roce_frames, c.to_guest_frames), (1, 0));
    assert_eq!(c.dropped(), 10);
}

#[test]
fn tap_guest_frames_without_a_guest_or_beyond_the_queue_are_counted() {
    let (mut link, peer) = fake_tap();
    inject(&peer, &arp(BCAST));
    assert_eq!(recv(&mut link), None);
    assert_eq!(link.counters().drop_guest_absent, 1);
    link.tap().to_guest().set_attached(true);
    let extra = 5;
    for _ in 0..TO_GUEST_FRAMES + extra {
        inject(&peer, &arp(BCAST));
        while recv(&mut link).is_some() {}
    }
    let c = *link.counters();
    assert_eq!(c.to_guest_frames, TO_GUEST_FRAMES as u64);
    assert_eq!(c.drop_guest_queue_full, extra as u64);
    assert_eq!(link.tap().to_guest().len(), TO_GUEST_FRAMES);
    // Detaching (the guest's driver stopped) empties the queue.
    assert_eq!(link.tap().to_guest().set_attached(false), TO_GUEST_FRAMES);
    assert!(link.tap().to_guest().is_empty());
}

#[test]
fn tap_send_writes_a_zeroed_vnet_header_and_loops_back_own_and_multicast_frames() {
    let (mut link, peer) = fake_tap();
    assert_eq!(link.raw_fd(), link.tap().as_raw_fd());
    let to_peer = ipv4_udp(PEER, 4791, 200);
    let to_self = ipv4_udp(MAC, 4791, 100);
    let to_group = ipv6_udp([0x33, 0x33, 0, 0, 0, 1], 4791, 50);
    for f in [&to_peer, &to_self, &to_group] {
        link.send(T0, f).unwrap();
    }
    // On the wire: the peer's and the multicast frame, not the own one.
    let mut buf = vec![0u8; 4096];
    let mut wire = Vec::new();
    peer.set_nonblocking(true).unwrap();
    while let Ok(n) = (&peer).read(&mut buf) {
        assert_eq!(&buf[..VNET_HDR_LEN], &[0; VNET_HDR_LEN]);
        wire.push(buf[VNET_HDR_LEN..n].to_vec());
    }
    assert_eq!(wire, vec![to_peer.clone(), to_group.clone()]);
    // Looped back without the TAP: the engine sees its own frames.
    assert_eq!(link.poll_timeout(), Some(Duration::ZERO));
    assert_eq!(recv(&mut link), Some(to_self));
    assert_eq!(recv(&mut link), Some(to_group));
    assert_eq!(recv(&mut link), None);
    assert_eq!(link.poll_timeout(), None);
    let c = *link.counters();
    assert_eq!(
        (c.tx_frames, c.loopback_frames, c.rx_roce_frames),
        (2, 2, 2)
    );

    // Bad lengths and a full loopback queue are counted drops, not errors.
    link.send(T0, &[0; 10]).unwrap();
    link.send(T0, &vec![0; MAX_PACKET_LEN + 1]).unwrap();
    for _ in 0..TAP_LOOPBACK_CAPACITY + 3 {
        link.send(T0, &ipv4_udp(MAC, 4791, 8)).unwrap();
    }
    let c = *link.counters();
    assert_eq!((c.drop_tx_bad_len, c.drop_loopback_full), (2, 3));
}

#[test]
fn tap_recv_refuses_a_short_buffer() {
    let (mut link, _peer) = fake_tap();
    let mut small = [0u8; 64];
    assert!(matches!(
        link.recv(T0, &mut small),
        Err(LinkError::BufferTooSmall { have: 64 })
    ));
}

#[test]
fn tap_classify_reads_only_enough_to_tell_roce() {
    assert_eq!(classify(&ipv4_udp(MAC, 4791, 0)), FrameClass::Roce);
    // Steering, not acceptance: another MAC's RoCE frame is the engine's to drop.
    assert_eq!(classify(&ipv4_udp(PEER, 4791, 0)), FrameClass::Roce);
    assert_eq!(classify(&ipv4_udp(MAC, 4792, 0)), FrameClass::Guest);
    assert_eq!(classify(&[]), FrameClass::Guest);
    assert_eq!(classify(&MAC), FrameClass::Guest);
    // A later IPv4 fragment has no UDP header even if its bytes look like one.
    let mut frag = ipv4_udp(MAC, 4791, 16);
    frag[20] = 0x00;
    frag[21] = 0x10;
    assert_eq!(classify(&frag), FrameClass::Guest);
    // Every prefix of a RoCE frame classifies without panicking.
    let f = vlan_ipv4_udp(MAC, 4791);
    for n in 0..f.len() {
        let _ = classify(&f[..n]);
    }
}

/// A real TAP (root only; CI runs as root): created down, so nothing is ever
/// sent; the kernel's answers to the ioctls and to a write on a down interface.
#[test]
fn tap_real_device_opens_with_vnet_headers_and_counts_writes_while_down() {
    if std::fs::metadata("/dev/net/tun").is_err() || !is_root() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let tap = Tap::open("vhcat%d", MAC).expect("TUNSETIFF");
    assert!(tap.name().starts_with("vhcat"), "{}", tap.name());
    assert!(tap.mtu() >= 68);
    tap.set_offload(device::fabric::TUN_F_CSUM | device::fabric::TUN_F_TSO4)
        .expect("TUNSETOFFLOAD");
    let mut link = TapLink::new(Arc::new(tap));
    link.send(T0, &ipv4_udp(PEER, 4791, 64)).unwrap();
    assert_eq!(link.counters().drop_tx_link_down, 1);
    assert_eq!(recv(&mut link), None);
}

/// AE-01: the link follows the TAP's administrative state (`ip link set
/// TAP up/down`), read every TAP_STATE_CHECK, which is its deadline.
#[test]
fn ae_01_tap_link_is_up_while_its_interface_is_up() {
    if std::fs::metadata("/dev/net/tun").is_err() || !is_root() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let tap = Tap::open("vhcae%d", MAC).expect("TUNSETIFF");
    let name = tap.name().to_string();
    let ip = |state: &str| {
        let ok = std::process::Command::new("ip")
            .args(["link", "set", "dev", &name, state])
            .status()
            .expect("ip")
            .success();
        assert!(ok, "ip link set {name} {state}");
    };
    let mut link = TapLink::new(Arc::new(tap));
    assert_eq!(
        link.poll_timeout(),
        Some(Duration::ZERO),
        "first check at once"
    );
    link.handle_timeout(T0).unwrap();
    assert!(!link.is_up(), "a new TAP is down");
    let next = T0 + device::fabric::TAP_STATE_CHECK;
    assert_eq!(link.poll_timeout(), Some(next));
    ip("up");
    link.handle_timeout(next - Duration::from_millis(1))
        .unwrap();
    assert!(!link.is_up(), "read at its deadline, not before");
    link.handle_timeout(next).unwrap();
    assert!(link.is_up());
    ip("down");
    link.handle_timeout(next + device::fabric::TAP_STATE_CHECK)
        .unwrap();
    assert!(!link.is_up());
    // A socketpair TAP has no interface to read: always up, no deadline.
    let (fake, _peer) = fake_tap();
    assert!(fake.is_up());
    assert_eq!(fake.poll_timeout(), None);
}
