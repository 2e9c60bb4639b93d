//! The Ethernet port's link (WF-10): a `TapLink` over one end of a datagram
//! socket pair standing in for the TAP (each datagram one frame, as on a TAP).

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use device::fabric::{classify, FrameKind, FrameSink, Link, TapLink, MAX_PACKET_LEN};
use transport::wire::opcode::Opcode;
use transport::wire::roce::{EthernetRepr, IpRepr, Ipv4Repr, RoceRepr};
use transport::wire::{BthRepr, TransportRepr};

const MAC: [u8; 6] = [0x52, 0x54, 0, 0, 0, 1];
const PEER: [u8; 6] = [0x52, 0x54, 0, 0, 0, 2];

fn link() -> (TapLink, UnixDatagram) {
    let (a, b) = UnixDatagram::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let fd: OwnedFd = a.into();
    (TapLink::from_file(std::fs::File::from(fd), MAC), b)
}

fn roce_frame(dst: [u8; 6], payload: &[u8]) -> Vec<u8> {
    let r = RoceRepr {
        eth: EthernetRepr {
            dst,
            src: PEER,
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: "10.0.0.2".parse().unwrap(),
            dst: "10.0.0.1".parse().unwrap(),
            tos: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
        }),
        udp_src_port: 0xc001,
        udp_checksum: false,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 1,
                ack_req: false,
                psn: 0,
            },
            ext: transport::wire::ExtHeaders {
                deth: Some(transport::wire::DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 1,
                }),
                ..Default::default()
            },
            payload,
        },
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

struct Sink(std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>, usize);

impl FrameSink for Sink {
    fn push(&mut self, frame: &[u8]) -> bool {
        let mut v = self.0.lock().unwrap();
        if v.len() >= self.1 {
            return false;
        }
        v.push(frame.to_vec());
        true
    }
}

fn recv_all(l: &mut TapLink) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    let mut out = Vec::new();
    for _ in 0..100 {
        match l.recv(Duration::ZERO, &mut buf).unwrap() {
            Some(n) => out.push(buf[..n].to_vec()),
            None => break,
        }
    }
    out
}

#[test]
fn wf_10_roce_frames_for_the_port_go_to_the_transport_the_rest_to_the_guest() {
    let (mut l, peer) = link();
    let guest = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    l.set_sink(Box::new(Sink(guest.clone(), 100)));
    let ours = roce_frame(MAC, b"hello");
    let other_mac = roce_frame(PEER, b"x");
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&PEER);
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    let mut not_roce_udp = ours.clone();
    not_roce_udp[37] = 0; // UDP destination port 0x1200: not 4791 (0x12b7)
    for f in [&ours, &other_mac, &arp, &not_roce_udp, &vec![1u8; 5]] {
        peer.send(f).unwrap();
    }
    let got = recv_all(&mut l);
    assert_eq!(got, vec![ours.clone()]);
    assert_eq!(
        *guest.lock().unwrap(),
        vec![arp.clone(), not_roce_udp.clone()]
    );
    let c = *l.counters();
    assert_eq!(
        (c.rx_roce, c.to_guest, c.drop_other_mac, c.drop_runt),
        (1, 2, 1, 1)
    );
    assert_eq!(classify(&ours, &MAC), FrameKind::Roce);
    assert_eq!(classify(&arp, &MAC), FrameKind::Other);
}

#[test]
fn wf_10_without_a_guest_nic_other_frames_are_counted_drops() {
    let (mut l, peer) = link();
    let guest = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut ipv6 = roce_frame(MAC, b"")[..14].to_vec();
    ipv6[12..14].copy_from_slice(&[0x86, 0xdd]);
    ipv6.extend_from_slice(&[0x60; 40]);
    peer.send(&ipv6).unwrap();
    assert!(recv_all(&mut l).is_empty());
    assert_eq!(l.counters().drop_not_for_port, 1);
    // A full guest queue drops too.
    l.set_sink(Box::new(Sink(guest.clone(), 0)));
    peer.send(&ipv6).unwrap();
    assert!(recv_all(&mut l).is_empty());
    assert_eq!(l.counters().drop_not_for_port, 2);
}

#[test]
fn wf_10_oversized_and_garbage_frames_are_dropped_never_a_panic() {
    let (mut l, peer) = link();
    peer.send(&vec![0u8; device::fabric::MAX_FRAME_LEN + 100])
        .unwrap();
    let mut x: u64 = 7;
    let mut r = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for len in 0..200usize {
        let mut f: Vec<u8> = (0..len).map(|_| r() as u8).collect();
        if len > 13 && len % 3 == 0 {
            f[..6].copy_from_slice(&MAC);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
        }
        peer.send(&f).unwrap();
    }
    let mut buf = vec![0u8; MAX_PACKET_LEN];
    for _ in 0..500 {
        if l.recv(Duration::ZERO, &mut buf).unwrap().is_none() && l.poll_timeout().is_none() {
            break;
        }
    }
    assert_eq!(l.counters().drop_oversized, 1);
}

#[test]
fn wf_10_frames_to_the_own_mac_loop_back_and_others_go_out() {
    let (mut l, peer) = link();
    peer.set_nonblocking(true).unwrap();
    let own = roce_frame(MAC, b"self");
    let out = roce_frame(PEER, b"out");
    l.send(Duration::ZERO, &own).unwrap();
    l.send(Duration::ZERO, &out).unwrap();
    assert_eq!(
        l.poll_timeout(),
        Some(Duration::ZERO),
        "a looped frame is due"
    );
    assert_eq!(recv_all(&mut l), vec![own]);
    let mut b = vec![0u8; 9100];
    let n = peer.recv(&mut b).unwrap();
    assert_eq!(&b[..n], &out[..]);
    assert!(peer.recv(&mut b).is_err(), "the own frame never left");
    let c = *l.counters();
    assert_eq!((c.looped, c.tx_frames, c.rx_roce), (1, 1, 1));
    for _ in 0..device::fabric::TAP_LOOPBACK_CAPACITY + 5 {
        l.send(Duration::ZERO, &roce_frame(MAC, b"")).unwrap();
    }
    assert_eq!(l.counters().drop_loopback_full, 5);
}
