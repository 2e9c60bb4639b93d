//! Issue 30 item 2, ARCHITECTURE.md §6: the TAP link's batched I/O. A round's
//! RoCE frames of one flow leave as one UDP GSO super-frame
//! (VIRTIO_NET_HDR_GSO_UDP_L4), numbered so that the segments the kernel cuts
//! keep valid ICRCs (A17.3.3 covers the IPv4 Identification); a super-frame
//! read whole is cut back into byte-identical frames; without GSO (forced off,
//! or a kernel that refuses it) every frame is one write, as before. Fake TAPs
//! are `socketpair(AF_UNIX, SOCK_SEQPACKET)` (one message per frame, as a TAP);
//! the last test runs the real kernel's bridge and segmentation (root only).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use device::fabric::{Link, Tap, TapLink, MAX_PACKET_LEN, VNET_HDR_LEN};
use socket2::{Domain, Socket, Type};

mod common;
use common::is_root;
use transport::wire::crc::icrc_roce;
use transport::wire::roce::RoceRepr;

const T0: Duration = Duration::from_secs(1_700_000_000);
const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const PEER: [u8; 6] = [0x52, 0x54, 0x00, 0x65, 0x43, 0x21];
/// The engine's RoCE payload at an Ethernet MTU of 1500 (PMTU 1024).
const SEG: usize = 1024;

fn fake_tap(mac: [u8; 6]) -> (TapLink, Socket) {
    let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    let _ = b.set_send_buffer_size(4 << 20);
    let _ = b.set_recv_buffer_size(4 << 20);
    let tap = Tap::from_fd(OwnedFd::from(a), "fake0", mac, 1500).unwrap();
    (TapLink::new(Arc::new(tap)), b)
}

fn csum(data: &[u8]) -> u16 {
    let mut s: u32 = data
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// A RoCEv2 frame as the engine builds it (IPv4 Identification 0, UDP checksum
/// 0): RC SEND Middle, `payload` bytes, valid IPv4 checksum and ICRC.
fn roce_v4(dst: [u8; 6], psn: u32, payload: usize) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let udp_len = 8 + 12 + payload + 4;
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 10, 99, 0, 2, 10, 99, 0, 1]);
    let c = csum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&0xc123u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    // BTH: RC SEND Middle (0x01), P_Key 0xffff, DestQP 0x12, PSN.
    f.extend_from_slice(&[0x01, 0, 0xff, 0xff, 0, 0, 0, 0x12]);
    f.extend_from_slice(&psn.to_be_bytes());
    f.extend((0..payload).map(|i| (i as u32 ^ psn) as u8));
    let end = f.len();
    let icrc = icrc_roce(&f[14..34], &f[34..42], &f[42..54], &f[54..end]);
    f.extend_from_slice(&icrc.to_le_bytes());
    assert!(RoceRepr::parse(&f).is_ok());
    f
}

/// What Linux's inet_gso_segment/__udp_gso_segment make of a super-frame (the
/// reference the link must match): the headers repeated, lengths and IPv4
/// header checksum per segment, Identification + index; the UDP checksum
/// left zero here (the kernel fills it in; the ICRC masks it, A17.3.3).
fn kernel_segments(hdr: &[u8], sf: &[u8]) -> Vec<Vec<u8>> {
    assert_eq!(hdr[1], 5, "GSO_UDP_L4");
    assert_eq!(hdr[0] & 1, 1, "NEEDS_CSUM");
    let gso = usize::from(u16::from_le_bytes([hdr[4], hdr[5]]));
    let (l3, l4, h) = (14, 34, 42);
    let id0 = u16::from_be_bytes([sf[18], sf[19]]);
    sf[h..]
        .chunks(gso)
        .enumerate()
        .map(|(i, p)| {
            let mut f = sf[..h].to_vec();
            f.extend_from_slice(p);
            let udp_len = f.len() - l4;
            f[l4 + 4..l4 + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            f[l4 + 6..l4 + 8].fill(0);
            let total = (f.len() - l3) as u16;
            f[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            f[l3 + 4..l3 + 6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
            f[l3 + 10..l3 + 12].fill(0);
            let c = csum(&f[l3..l4]);
            f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            f
        })
        .collect()
}

fn read_all(peer: &Socket) -> Vec<Vec<u8>> {
    peer.set_nonblocking(true).unwrap();
    let mut buf = vec![0u8; 70_000];
    let mut out = Vec::new();
    while let Ok(n) = (&*peer).read(&mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

/// One round: five full frames and a shorter last one to PEER.
fn round() -> Vec<Vec<u8>> {
    let mut v: Vec<_> = (0..5).map(|i| roce_v4(PEER, 100 + i, SEG)).collect();
    v.push(roce_v4(PEER, 105, 256));
    v
}

fn send_round(link: &mut TapLink, frames: &[Vec<u8>]) {
    link.begin_sends();
    for f in frames {
        link.send(T0, f).unwrap();
    }
    link.end_sends().unwrap();
}

/// The transport part (BTH through the payload, ICRC excluded) of a frame.
fn transport_of(f: &[u8]) -> &[u8] {
    &f[42..f.len() - 4]
}

#[test]
fn tap_gso_a_round_of_one_flow_leaves_in_one_write_whose_segments_keep_valid_icrcs() {
    let (mut link, peer) = fake_tap(MAC);
    let frames = round();
    send_round(&mut link, &frames);
    let wire = read_all(&peer);
    assert_eq!(wire.len(), 1, "one super-frame for the round");
    let (hdr, sf) = wire[0].split_at(VNET_HDR_LEN);
    assert_eq!(u16::from_le_bytes([hdr[4], hdr[5]]) as usize, 12 + SEG + 4);
    assert_eq!(u16::from_le_bytes([hdr[6], hdr[7]]), 34, "csum_start: UDP");
    assert_eq!(u16::from_le_bytes([hdr[8], hdr[9]]), 6, "csum_offset");
    // The super-frame's own headers are consistent (a bridge's netfilter
    // checks the IPv4 header checksum).
    assert_eq!(csum(&sf[14..34]), 0, "IPv4 header checksum");
    assert_eq!(
        usize::from(u16::from_be_bytes([sf[16], sf[17]])),
        sf.len() - 14
    );
    assert_eq!(
        usize::from(u16::from_be_bytes([sf[38], sf[39]])),
        sf.len() - 34
    );
    let segs = kernel_segments(hdr, sf);
    assert_eq!(segs.len(), frames.len());
    for (i, (s, f)) in segs.iter().zip(&frames).enumerate() {
        let parsed = RoceRepr::parse(s);
        assert!(parsed.is_ok(), "segment {i}: {parsed:?}");
        assert_eq!(transport_of(s), transport_of(f), "segment {i}");
        assert_eq!(
            u16::from_be_bytes([s[18], s[19]]),
            i as u16,
            "Identification"
        );
    }
    // The first frame goes out exactly as the engine built it.
    assert_eq!(segs[0], frames[0]);
    let c = *link.counters();
    assert_eq!((c.tx_frames, c.tx_gso_writes), (6, 1));
    assert_eq!(
        c.tx_bytes,
        frames.iter().map(|f| f.len() as u64).sum::<u64>()
    );
}

#[test]
fn tap_gso_forced_off_writes_each_frame_alone_and_unchanged() {
    let (mut link, peer) = fake_tap(MAC);
    link.set_gso(false);
    assert!(!link.gso());
    let frames = round();
    send_round(&mut link, &frames);
    let wire = read_all(&peer);
    let expect: Vec<Vec<u8>> = frames
        .iter()
        .map(|f| [&[0u8; VNET_HDR_LEN][..], f].concat())
        .collect();
    assert_eq!(wire, expect);
    let c = *link.counters();
    assert_eq!((c.tx_frames, c.tx_gso_writes), (6, 0));
}

#[test]
fn tap_gso_runs_end_at_another_flow_a_longer_frame_and_the_segment_limit() {
    let (mut link, peer) = fake_tap(MAC);
    let other = [0x52, 0x54, 0x00, 0x99, 0x99, 0x99];
    let mut frames: Vec<Vec<u8>> = (0..3).map(|i| roce_v4(PEER, i, SEG)).collect();
    frames.push(roce_v4(other, 3, SEG)); // another destination MAC
    frames.push(roce_v4(other, 4, 512));
    frames.push(roce_v4(other, 5, SEG)); // longer than the frame before
                                         // 64 KiB of IPv4 hold 62 frames of 1 KiB, and 64 (GSO_MAX_SEGS) of 256 B.
    frames.extend((0..70).map(|i| roce_v4(PEER, 6 + i, SEG)));
    frames.extend((0..70).map(|i| roce_v4(PEER, 76 + i, 256)));
    send_round(&mut link, &frames);
    let wire = read_all(&peer);
    let lens: Vec<usize> = wire
        .iter()
        .map(|m| {
            if m[1] == 5 {
                kernel_segments(&m[..VNET_HDR_LEN], &m[VNET_HDR_LEN..]).len()
            } else {
                1
            }
        })
        .collect();
    let max = device::fabric::GSO_MAX_SEGS;
    // The 8 left of 1 KiB take the first shorter frame as their last.
    assert_eq!(lens, vec![3, 2, 1, 62, 9, max, 69 - max]);
    let mut got = Vec::new();
    for m in &wire {
        if m[1] == 5 {
            got.extend(kernel_segments(&m[..VNET_HDR_LEN], &m[VNET_HDR_LEN..]));
        } else {
            got.push(m[VNET_HDR_LEN..].to_vec());
        }
    }
    for (g, f) in got.iter().zip(&frames) {
        assert!(RoceRepr::parse(g).is_ok());
        assert_eq!(transport_of(g), transport_of(f));
        assert_eq!(g[..6], f[..6]);
    }
    assert_eq!(link.counters().tx_frames, frames.len() as u64);
}

/// The receiving link gets the sender's super-frame whole (its TAP takes USO)
/// and lends the same bytes the kernel's segmentation would have delivered.
#[test]
fn tap_a_super_frame_read_whole_is_cut_into_the_frames_the_kernel_would_deliver() {
    let (mut tx, tx_peer) = fake_tap(MAC);
    let frames = round();
    send_round(&mut tx, &frames);
    let wire = read_all(&tx_peer);
    let expect = kernel_segments(&wire[0][..VNET_HDR_LEN], &wire[0][VNET_HDR_LEN..]);

    let (mut rx, rx_peer) = fake_tap(PEER);
    (&rx_peer).write_all(&wire[0]).unwrap();
    (&rx_peer)
        .write_all(&[&[0u8; VNET_HDR_LEN][..], &roce_v4(PEER, 7, 64)].concat())
        .unwrap();
    // A budget of 4: the rest waits, and the link asks to be called at once.
    let mut got = Vec::new();
    let n = rx
        .recv_batch(T0, 4, &mut |r| got.push(r.packet.to_vec()))
        .unwrap();
    assert_eq!(n, 4);
    assert_eq!(rx.poll_timeout(), Some(Duration::ZERO));
    let n = rx
        .recv_batch(T0, 64, &mut |r| got.push(r.packet.to_vec()))
        .unwrap();
    assert_eq!(n, 3, "the last two segments and the frame after them");
    assert_eq!(rx.poll_timeout(), None);
    assert_eq!(got[..6], expect[..]);
    assert_eq!(got[0], frames[0], "byte-exact");
    assert_eq!(got[6], roce_v4(PEER, 7, 64));
    for g in &got {
        assert!(RoceRepr::parse(g).is_ok());
        assert!(g.len() <= MAX_PACKET_LEN);
    }
    let c = *rx.counters();
    assert_eq!((c.rx_roce_frames, c.rx_gso_reads, c.dropped()), (7, 1, 0));
}

/// A RoCEv2 frame over IPv6 as the engine builds it (UDP checksum 0).
fn roce_v6(psn: u32, payload: usize) -> Vec<u8> {
    let mut f = PEER.to_vec();
    f.extend_from_slice(&MAC);
    f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    let udp_len = 8 + 12 + payload + 4;
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[17, 64]);
    f.extend((0..32).map(|i| 0xfe ^ i as u8));
    f.extend_from_slice(&0xc123u16.to_be_bytes());
    f.extend_from_slice(&4791u16.to_be_bytes());
    f.extend_from_slice(&(udp_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(&[0x01, 0, 0xff, 0xff, 0, 0, 0, 0x12]);
    f.extend_from_slice(&psn.to_be_bytes());
    f.extend((0..payload).map(|i| (i as u32 ^ psn) as u8));
    let end = f.len();
    let icrc = icrc_roce(&f[14..54], &f[54..62], &f[62..74], &f[74..end]);
    f.extend_from_slice(&icrc.to_le_bytes());
    assert!(RoceRepr::parse(&f).is_ok());
    f
}

/// IPv6 has no Identification: the frames are joined as the engine built
/// them and come out of the receiving link byte for byte.
#[test]
fn tap_ipv6_roce_frames_are_joined_and_cut_back_byte_exact() {
    let (mut tx, tx_peer) = fake_tap(MAC);
    let mut frames: Vec<_> = (0..4).map(|i| roce_v6(i, SEG)).collect();
    frames.push(roce_v6(4, 100));
    send_round(&mut tx, &frames);
    let wire = read_all(&tx_peer);
    assert_eq!(wire.len(), 1);
    assert_eq!(
        u16::from_le_bytes([wire[0][6], wire[0][7]]),
        54,
        "csum_start"
    );
    let (mut rx, rx_peer) = fake_tap(PEER);
    (&rx_peer).write_all(&wire[0]).unwrap();
    let mut got = Vec::new();
    rx.recv_batch(T0, 64, &mut |r| got.push(r.packet.to_vec()))
        .unwrap();
    assert_eq!(got, frames);
}

#[test]
fn tap_hostile_super_frames_are_dropped_and_counted() {
    let (mut tx, tx_peer) = fake_tap(MAC);
    // Ten frames: a super-frame longer than an engine buffer.
    let frames: Vec<_> = (0..10).map(|i| roce_v4(PEER, i, SEG)).collect();
    send_round(&mut tx, &frames);
    let good = read_all(&tx_peer).remove(0);
    assert!(good.len() > MAX_PACKET_LEN);
    let (mut rx, rx_peer) = fake_tap(PEER);
    let with_gso = |size: u16| {
        let mut m = good.clone();
        m[4..6].copy_from_slice(&size.to_le_bytes());
        m
    };
    // A segment size below a BTH and an ICRC, and one past an engine buffer.
    (&rx_peer).write_all(&with_gso(8)).unwrap();
    (&rx_peer)
        .write_all(&with_gso(MAX_PACKET_LEN as u16))
        .unwrap();
    // GSO with the ECN bit, and a lying hdr_len (ignored: headers are found
    // in the frame) that still cuts right.
    let mut ecn = good.clone();
    ecn[1] |= 0x80;
    (&rx_peer).write_all(&ecn).unwrap();
    let mut lying = good.clone();
    lying[2..4].copy_from_slice(&9000u16.to_le_bytes());
    (&rx_peer).write_all(&lying).unwrap();
    let mut got = 0;
    rx.recv_batch(T0, 64, &mut |r| {
        let p = RoceRepr::parse(r.packet);
        assert!(p.is_ok(), "{p:?} {}", r.packet.len());
        got += 1;
    })
    .unwrap();
    let c = *rx.counters();
    assert_eq!(got, 10);
    assert_eq!((c.drop_rx_bad_vnet_hdr, c.drop_rx_oversized), (2, 1));
}

/// The guest did not negotiate USO (net::FEATURES): a UDP GSO super-frame for
/// it is cut by the link, each segment with a complete UDP checksum.
#[test]
fn tap_a_guest_udp_super_frame_reaches_the_guest_cut_with_checksums() {
    let (mut rx, rx_peer) = fake_tap(PEER);
    rx.tap().to_guest().set_attached(true);
    // A DNS-like UDP datagram of 3 x 100 bytes to port 53, as a guest's
    // UDP_SEGMENT send would come (pseudo-header sum in the checksum field).
    let mut f = PEER.to_vec();
    f.extend_from_slice(&MAC);
    f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 7, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&[10, 99, 0, 1, 10, 99, 0, 2]);
    f.extend_from_slice(&[0x30, 0x39, 0, 53, 0, 0, 0, 0]);
    f.extend((0..300).map(|i| i as u8));
    let total = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    let c = csum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let mut hdr = [0u8; VNET_HDR_LEN];
    hdr[0] = 1;
    hdr[1] = 5;
    hdr[4..6].copy_from_slice(&100u16.to_le_bytes());
    hdr[6..8].copy_from_slice(&34u16.to_le_bytes());
    hdr[8..10].copy_from_slice(&6u16.to_le_bytes());
    (&rx_peer).write_all(&[&hdr[..], &f].concat()).unwrap();
    assert_eq!(
        rx.recv_batch(T0, 64, &mut |_| panic!("not RoCE")).unwrap(),
        0
    );
    let q = rx.tap().to_guest();
    assert_eq!(q.len(), 3);
    for i in 0..3u16 {
        let m = q.pop().unwrap();
        assert_eq!(m[..VNET_HDR_LEN], [0; VNET_HDR_LEN], "checksum complete");
        let s = &m[VNET_HDR_LEN..];
        assert_eq!(s.len(), 14 + 20 + 8 + 100);
        assert_eq!(csum(&s[14..34]), 0, "IPv4 header checksum");
        assert_eq!(u16::from_be_bytes([s[18], s[19]]), 7 + i);
        assert_eq!(s[42..], f[42 + 100 * usize::from(i)..][..100]);
        // UDP checksum over the pseudo-header and the datagram verifies.
        let mut pseudo = s[26..34].to_vec();
        pseudo.extend_from_slice(&[0, 17, 0, 108]);
        pseudo.extend_from_slice(&s[34..]);
        assert_eq!(csum(&pseudo), 0, "UDP checksum");
    }
    assert_eq!(rx.counters().to_guest_frames, 3);
}

/// The real kernel (root only; CI runs as root): two TAPs on a bridge. A round
/// written as one super-frame reaches the other TAP segmented by the kernel
/// (no USO there) and, with USO on, whole and cut by the link: the engine gets
/// the same bytes both ways (but the UDP checksum, which the kernel fills in
/// and the ICRC masks), each with a valid ICRC.
#[test]
fn tap_real_bridge_delivers_the_same_frames_whether_the_kernel_or_the_link_cuts_the_run() {
    if std::fs::metadata("/dev/net/tun").is_err() || !is_root() {
        eprintln!("skipped: needs root and /dev/net/tun");
        return;
    }
    let ip = |args: &[&str]| {
        let ok = std::process::Command::new("ip")
            .args(args)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "ip {args:?}");
    };
    let br = format!("vhcagb{}", std::process::id() % 100_000);
    ip(&["link", "add", "name", &br, "type", "bridge"]);
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["link", "del", &self.0])
                .status();
        }
    }
    let _del = Del(br.clone());
    let a = Tap::open("vhcaga%d", MAC).expect("TUNSETIFF");
    let b = Arc::new(Tap::open("vhcagb%d", PEER).expect("TUNSETIFF"));
    for t in [a.name(), b.name()] {
        ip(&["link", "set", t, "master", &br]);
        ip(&["link", "set", t, "up"]);
    }
    ip(&["link", "set", &br, "up"]);
    let mut tx = TapLink::new(Arc::new(a));
    let mut rx = TapLink::new(b.clone());
    let frames = round();
    let receive = |rx: &mut TapLink| {
        let mut got = Vec::new();
        for _ in 0..200 {
            rx.recv_batch(T0, 64, &mut |r| {
                if r.packet[..6] == PEER {
                    got.push(r.packet.to_vec());
                }
            })
            .unwrap();
            if got.len() >= 6 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        got
    };
    // Forwarding starts once both ports are up: the first round may be lost.
    let mut by_kernel = Vec::new();
    for _ in 0..50 {
        send_round(&mut tx, &frames);
        by_kernel = receive(&mut rx);
        if by_kernel.len() == 6 {
            break;
        }
    }
    assert_eq!(by_kernel.len(), 6, "segmented by the kernel");
    assert_eq!(
        tx.counters().tx_gso_writes > 0,
        tx.gso(),
        "GSO write or its fallback"
    );
    let set = b.set_offload(device::fabric::TUN_F_CSUM).unwrap();
    // Linux 6.2 brought both UDP GSO writes and USO on a TAP.
    let uso = device::fabric::TUN_F_USO4 | device::fabric::TUN_F_USO6;
    assert_eq!(set & uso == uso, tx.gso(), "USO set {set:#x}");
    send_round(&mut tx, &frames);
    let by_link = receive(&mut rx);
    assert_eq!(by_link.len(), 6, "cut by the link");
    for (i, (k, l)) in by_kernel.iter().zip(&by_link).enumerate() {
        assert!(RoceRepr::parse(k).is_ok(), "kernel segment {i}");
        assert!(RoceRepr::parse(l).is_ok(), "link segment {i}");
        let mut k = k.clone();
        k[40..42].fill(0); // the UDP checksum the kernel computed
        assert_eq!(&k, l, "segment {i}");
        assert_eq!(transport_of(l), transport_of(&frames[i]));
    }
    assert_eq!(
        rx.counters().rx_gso_reads > 0,
        tx.gso(),
        "read whole with USO"
    );
}
