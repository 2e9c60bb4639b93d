//! The `ib-udp` link's receive path (device/src/fabric/udp.rs; ARCHITECTURE.md §6,
//! §9; issue 25 item 7) over real sockets on 127.0.0.1, inside this process: link
//! "a" (LID 1, the one under test, UDP GRO on or off) and peer "b" (LID 2) of a
//! programmatic fabric, and a stranger whose address no fabric file lists. The
//! fuzzer's datagrams come from b's address (raw, or through b's own link, whose
//! batched sends of same-size packets leave as one UDP GSO run that a's GRO
//! receives as one buffer to split), from the stranger, or as keepalives (AE-01);
//! a also sends (to b, to itself through its loopback) and its timers run. What
//! must hold: a never delivers more packets than the fabric's nodes sent it (the
//! stranger's datagrams and keepalives never pass: the source check), every
//! delivered packet fits `MAX_PACKET_LEN` and carries the LID of a fabric node,
//! and `rx_packets` counts exactly what was delivered.
#![no_main]

use std::net::UdpSocket;
use std::time::Duration;

use arbitrary::Arbitrary;
use device::fabric::{FabricFile, Link, Node, UdpLink, UdpOffloads, KEEPALIVE, MAX_PACKET_LEN};
use libfuzzer_sys::fuzz_target;
use vhca_fuzz::{fix_native, native_packet};

#[derive(Arbitrary, Debug)]
enum Op {
    /// A datagram of any bytes from b's address (`stranger`: from an address
    /// not in the fabric); `fix`: CRCs and lengths made right.
    Raw {
        stranger: bool,
        fix: bool,
        bytes: Vec<u8>,
    },
    /// b's link sends `n` copies (1..=64) of a native packet to LID 1 around
    /// `transport` in one batch: a GSO run where the kernel has it.
    Run { n: u8, transport: Vec<u8> },
    /// A keepalive from b (or the stranger).
    Keepalive { stranger: bool },
    /// a sends a native packet from LID 1 to `dlid` (1 or a multicast LID: to
    /// itself too, through its loopback).
    Send { dlid: u16, transport: Vec<u8> },
    /// a receives up to `max` packets.
    Recv(u8),
    /// Time passes (ms) and a's timers run (keepalives, liveness).
    Advance(u16),
}

#[derive(Arbitrary, Debug)]
struct Input {
    gro: bool,
    liveness: bool,
    ops: Vec<Op>,
}

fn bind() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
}

fuzz_target!(|input: Input| {
    let (sa, sb, stranger) = (bind(), bind(), bind());
    let node = |name: &str, lid: u16, s: &UdpSocket| Node {
        name: name.into(),
        lid,
        guid: 0x0002_c903_0000_0000 + u64::from(lid),
        address: s.local_addr().unwrap(),
    };
    let fabric = FabricFile::from_nodes(vec![node("a", 1, &sa), node("b", 2, &sb)]).unwrap();
    let a_addr = sa.local_addr().unwrap();
    let b_raw = sb.try_clone().unwrap();
    let offloads = UdpOffloads {
        gso: true,
        gro: input.gro,
    };
    let mut a = UdpLink::with_offloads(&fabric, "a", sa, offloads).unwrap();
    let mut b = UdpLink::with_offloads(&fabric, "b", sb, UdpOffloads::ALL).unwrap();
    if !input.liveness {
        a.set_liveness(None);
    }
    b.set_liveness(None);
    let mut now = Duration::from_secs(1_700_000_000);
    // Packets the fabric's nodes sent a (an upper bound of what a may deliver).
    let mut from_fabric = 0u64;
    let mut delivered = 0u64;
    let recv = |a: &mut UdpLink,
                now: Duration,
                max: usize,
                from_fabric: u64,
                delivered: &mut u64| {
        let _ = a.recv_batch(now, max, &mut |r| {
            *delivered += 1;
            assert!(
                r.packet.len() <= MAX_PACKET_LEN,
                "oversized packet delivered"
            );
            assert!(
                matches!(r.src_lid, Some(1 | 2)),
                "delivered without a fabric node's LID: {:?}",
                r.src_lid
            );
        });
        assert!(
            *delivered <= from_fabric,
            "a delivered {} packets, the fabric sent {from_fabric}: a stranger's or a keepalive passed",
            *delivered
        );
    };
    for op in input.ops.iter().take(128) {
        match op {
            Op::Raw {
                stranger: s,
                fix,
                bytes,
            } => {
                let mut d = bytes.clone();
                if *fix {
                    fix_native(&mut d);
                }
                d.truncate(MAX_PACKET_LEN + 64);
                let from = if *s { &stranger } else { &b_raw };
                if from.send_to(&d, a_addr).is_ok() && !*s && d != KEEPALIVE {
                    from_fabric += 1;
                }
            }
            Op::Run { n, transport } => {
                let p = native_packet(2, 1, 0, None, transport);
                b.begin_sends();
                let n = u64::from(n % 64) + 1;
                for _ in 0..n {
                    let _ = b.send(now, &p);
                }
                let _ = b.end_sends();
                from_fabric += n;
            }
            Op::Keepalive { stranger: s } => {
                let from = if *s { &stranger } else { &b_raw };
                let _ = from.send_to(KEEPALIVE, a_addr);
            }
            Op::Send { dlid, transport } => {
                let p = native_packet(1, *dlid, 0, None, transport);
                let _ = a.send(now, &p);
                // Its own LID, or a multicast LID (every node, a itself too
                // through its loopback, AD-04): a receives it.
                if *dlid == 1 || transport::engine::is_multicast_lid(*dlid) {
                    from_fabric += 1;
                }
                // b's socket is drained so that it never fills.
                let _ = b.recv_batch(now, 64, &mut |_| {});
            }
            Op::Recv(max) => recv(&mut a, now, usize::from(*max), from_fabric, &mut delivered),
            Op::Advance(ms) => {
                now += Duration::from_millis(u64::from(*ms));
                let _ = a.handle_timeout(now);
            }
        }
    }
    // Everything left, then the counts agree.
    for _ in 0..64 {
        let before = delivered;
        recv(&mut a, now, 256, from_fabric, &mut delivered);
        if delivered == before {
            break;
        }
    }
    assert_eq!(a.counters().rx_packets, delivered);
});
