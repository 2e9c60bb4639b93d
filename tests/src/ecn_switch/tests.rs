//! The marking switch's logic: RED's curve and verdicts, CE marking with a
//! valid IPv4 checksum and ICRC, the token bucket, the occupancy percentiles,
//! the MAC table.

use super::*;
use std::net::Ipv4Addr;
use transport::wire::opcode::Opcode;
use transport::wire::roce::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, RoceRepr};
use transport::wire::{BthRepr, ExtHeaders, TransportRepr};

fn red() -> Red {
    Red::new(4000, 16000, 0.2, 64000).unwrap()
}

/// A RoCEv2 RC SEND Only frame of `payload` bytes with DS byte `ds`.
fn roce_frame(v6: bool, ds: u8, payload: &[u8]) -> Vec<u8> {
    let ip = if v6 {
        IpRepr::V6(Ipv6Repr {
            src: Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped(),
            dst: Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
            traffic_class: ds,
            flow_label: 0x12345,
            hop_limit: 64,
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 2),
            dst: Ipv4Addr::new(10, 0, 0, 1),
            tos: ds,
            ident: 7,
            dont_frag: true,
            ttl: 64,
        })
    };
    let r = RoceRepr {
        eth: EthernetRepr {
            dst: [0x52, 0x54, 0, 0x99, 0, 1],
            src: [0x52, 0x54, 0, 0x99, 0, 2],
            vlan: None,
        },
        ip,
        udp_src_port: 0xc001,
        udp_checksum: false,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::RC_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0x11,
                ack_req: true,
                psn: 5,
            },
            ext: ExtHeaders::default(),
            payload,
        },
    };
    let mut b = vec![0; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

#[test]
fn red_probability_is_zero_below_min_linear_to_max_p_and_one_from_max() {
    let r = red();
    assert_eq!(r.probability(0), 0.0);
    assert_eq!(r.probability(3999), 0.0);
    assert_eq!(r.probability(4000), 0.0);
    assert!((r.probability(10000) - 0.1).abs() < 1e-12);
    assert!((r.probability(15999) - 0.2).abs() < 1e-3);
    assert_eq!(r.probability(16000), 1.0);
    assert_eq!(r.probability(60000), 1.0);
}

#[test]
fn red_marks_ect_drops_not_ect_and_tail_drops_past_the_cap() {
    let r = red();
    // Below min_th nothing is hit, whatever u.
    assert_eq!(r.verdict(100, 1500, Some(NOT_ECT), 0.0), Verdict::Enqueue);
    // Mid-way, p = 0.1: u below it hits, above it does not.
    assert_eq!(r.verdict(10000, 1500, Some(ECT_0), 0.05), Verdict::Mark);
    assert_eq!(r.verdict(10000, 1500, Some(ECT_1), 0.05), Verdict::Mark);
    assert_eq!(r.verdict(10000, 1500, Some(ECT_0), 0.15), Verdict::Enqueue);
    assert_eq!(
        r.verdict(10000, 1500, Some(NOT_ECT), 0.05),
        Verdict::EarlyDrop
    );
    assert_eq!(r.verdict(10000, 60, None, 0.05), Verdict::EarlyDrop);
    // Already CE: kept, not counted again.
    assert_eq!(r.verdict(10000, 1500, Some(ECN_CE), 0.05), Verdict::Enqueue);
    // From max_th every frame is hit.
    assert_eq!(r.verdict(16000, 1500, Some(ECT_0), 0.999), Verdict::Mark);
    // Past the cap: dropped even if ECN-capable.
    assert_eq!(r.verdict(63000, 1001, Some(ECT_0), 0.5), Verdict::TailDrop);
    assert_eq!(r.verdict(63000, 1000, Some(ECT_0), 0.999), Verdict::Mark);
}

#[test]
fn red_profile_rejects_disordered_thresholds_and_bad_max_p() {
    assert!(Red::new(0, 10, 0.1, 20).is_err());
    assert!(Red::new(10, 10, 0.1, 20).is_err());
    assert!(Red::new(10, 30, 0.1, 20).is_err());
    assert!(Red::new(10, 20, 0.0, 20).is_err());
    assert!(Red::new(10, 20, 1.5, 20).is_err());
    assert!(Red::new(10, 20, 1.0, 20).is_ok());
}

/// RFC 1071: a header with a valid checksum sums to 0xFFFF.
fn ipv4_header_ok(frame: &[u8]) -> bool {
    let mut s = 0u32;
    for w in frame[14..34].chunks(2) {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

#[test]
fn set_ce_marks_an_ect_ipv4_roce_frame_with_a_valid_checksum_and_icrc() {
    let mut f = roce_frame(false, (26 << 2) | ECT_0, b"payload!");
    assert!(ipv4_header_ok(&f));
    assert_eq!(ecn_of(&f), Some(ECT_0));
    assert!(set_ce(&mut f));
    assert_eq!(ecn_of(&f), Some(ECN_CE));
    assert!(ipv4_header_ok(&f), "IPv4 header checksum not fixed");
    // The receiver's parser checks the header checksum and the ICRC
    // (which masks the TOS byte, A17.3.3) and sees CE with the DSCP kept.
    let r = RoceRepr::parse(&f).expect("a marked frame still parses");
    assert_eq!(r.ip.ecn(), ECN_CE);
    assert_eq!(r.ip.dscp(), 26);
    assert_eq!(r.transport.payload, b"payload!");
}

#[test]
fn set_ce_marks_ipv6_traffic_class_ecn_bits_only() {
    let mut f = roce_frame(true, (10 << 2) | ECT_1, b"x");
    assert_eq!(ecn_of(&f), Some(ECT_1));
    assert!(set_ce(&mut f));
    let r = RoceRepr::parse(&f).expect("a marked IPv6 frame still parses");
    assert_eq!(r.ip.ecn(), ECN_CE);
    assert_eq!(r.ip.dscp(), 10);
}

#[test]
fn set_ce_leaves_not_ect_and_non_ip_frames_alone() {
    let f0 = roce_frame(false, 26 << 2, b"p");
    let mut f = f0.clone();
    assert!(!set_ce(&mut f));
    assert_eq!(f, f0);
    let mut arp = vec![0xffu8; 42];
    arp[12] = 0x08;
    arp[13] = 0x06;
    let a0 = arp.clone();
    assert_eq!(ecn_of(&arp), None);
    assert!(!set_ce(&mut arp));
    assert_eq!(arp, a0);
    // Truncated IPv4 header: not IP to us, never indexed past the end.
    let mut short = f0[..30].to_vec();
    assert_eq!(ecn_of(&short), None);
    assert!(!set_ce(&mut short));
}

#[test]
fn egress_drains_at_its_rate_after_the_burst() {
    // 8 Mbit/s = 1 byte per microsecond; a 1000-byte bucket.
    let mut e = Egress::new(
        Red::new(50_000, 60_000, 0.1, 100_000).unwrap(),
        8_000_000,
        1000,
        0,
    );
    for _ in 0..5 {
        assert_eq!(e.offer(vec![0; 1000], 0.5), Verdict::Enqueue);
    }
    assert_eq!(e.queued(), 5000);
    assert!(e.pop(0).is_some(), "the full bucket lets one frame go");
    assert_eq!(e.wait_ns(0), Some(0), "tokens at zero: the next may go");
    assert!(e.pop(0).is_some());
    // Now 1000 bytes in debt: 1 ms to pay back.
    assert!(e.pop(0).is_none());
    assert_eq!(e.wait_ns(0), Some(1_000_000));
    assert!(e.pop(999_000).is_none());
    assert!(e.pop(1_000_000).is_some());
    // 4 ms later the bucket is capped at its 1000 bytes, not 4000.
    assert!(e.pop(5_000_000).is_some());
    assert!(e.pop(5_000_000).is_some());
    assert!(e.pop(5_000_000).is_none());
    assert_eq!(e.wait_ns(5_000_000), None);
    assert_eq!(e.stats.forwarded, 5);
    assert_eq!(e.stats.bytes, 5000);
    assert_eq!(e.queued(), 0);
}

#[test]
fn egress_marks_about_max_p_half_way_and_counts_every_fate() {
    let mut e = Egress::new(red(), 0, 0, 2);
    let mut rng = Rng::new(42);
    // Fill to 10000 bytes (p = 0.1) with Not-ECT ARP-sized frames below min_th
    // first, then hold the queue at 10 000 bytes: offer an ECT frame, pop one.
    let ect = {
        let mut f = vec![0u8, 0]; // the 2-byte prefix
        f.extend(roce_frame(false, ECT_0, &[0; 958]));
        f
    };
    let len = ect.len() - 2;
    while e.queued() + len <= 10_000 {
        e.offer(ect.clone(), 0.99);
    }
    let (mut marks, n) = (0u32, 20_000u32);
    for _ in 0..n {
        if e.offer(ect.clone(), rng.next_f64()) == Verdict::Mark {
            marks += 1;
        }
        let f = e.pop(0).unwrap();
        assert!(ipv4_header_ok(&f[2..]));
    }
    let p = e.red.probability(e.queued());
    let frac = f64::from(marks) / f64::from(n);
    assert!((frac - p).abs() < 0.02, "marked {frac}, expected about {p}");
    assert_eq!(e.stats.marked, u64::from(marks));
    // Not-ECT at the same depth is dropped about as often, and counted.
    let mut plain = ect.clone();
    plain[2 + 15] &= !3;
    plain[2 + 24..2 + 26].fill(0);
    let c = ipv4_header_checksum(&plain[2 + 14..2 + 34]);
    plain[2 + 24..2 + 26].copy_from_slice(&c.to_be_bytes());
    let mut drops = 0;
    for _ in 0..n {
        if e.offer(plain.clone(), rng.next_f64()) == Verdict::EarlyDrop {
            drops += 1;
        } else {
            e.pop(0).unwrap();
        }
    }
    assert!((drops as f64 / f64::from(n) - p).abs() < 0.02);
    assert_eq!(e.stats.early_drops, drops);
    // Tail drops at the cap, counted; the queue never passes it.
    let mut tails = 0;
    for _ in 0..200 {
        if e.offer(ect.clone(), 0.999) == Verdict::TailDrop {
            tails += 1;
        }
        assert!(e.queued() <= 64_000);
    }
    assert!(tails > 0);
    assert_eq!(e.stats.tail_drops, tails);
    assert!(e.occupancy.percentile(1.0) > 60_000);
}

#[test]
fn occupancy_percentiles_come_from_the_samples() {
    let mut o = Occupancy::new(10_000);
    assert_eq!(o.percentile(0.99), 0);
    for _ in 0..98 {
        o.record(100);
    }
    o.record(5000);
    o.record(9000);
    // The upper edge of the bucket (256 bytes), capped by the largest sample.
    assert_eq!(o.percentile(0.5), 256);
    assert_eq!(o.percentile(0.99), 5120);
    assert_eq!(o.percentile(1.0), 9000);
    o.record(1_000_000); // past the cap: the last bucket, the true max kept
    assert_eq!(o.max, 1_000_000);
}

#[test]
fn mac_table_learns_floods_unknown_and_filters_local() {
    let mut t = MacTable::new(2);
    let f = |dst: [u8; 6], src: [u8; 6]| {
        let mut v = vec![0u8; 60];
        v[0..6].copy_from_slice(&dst);
        v[6..12].copy_from_slice(&src);
        v
    };
    let (a, b, c) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]);
    assert_eq!(t.route(&f(b, a), 0), Out::Flood);
    assert_eq!(t.route(&f([0xff; 6], b), 1), Out::Flood);
    assert_eq!(t.route(&f(a, b), 1), Out::Port(0));
    assert_eq!(t.route(&f(b, a), 0), Out::Port(1));
    assert_eq!(
        t.route(&f(b, a), 1),
        Out::Filter,
        "a moved to port 1, b is there"
    );
    // Full: c is not learnt, frames to it are flooded.
    t.route(&f(a, c), 2);
    assert_eq!(t.route(&f(c, a), 0), Out::Flood);
    assert_eq!(t.route(&[0u8; 10], 0), Out::Filter);
}
