//! Link-level credit flow control (IBA 7.9; issue 27 item 4), the sans-IO
//! core `transport::flow`: the FC packet's codec, the sender's credit check
//! against the receiver's grant (also across the mod-4096 wrap), the
//! initialisation, and the recovery of lost FC and data packets, driven
//! deterministically between two ends over a simulated in-order link.

use std::collections::VecDeque;

use proptest::prelude::*;
use transport::flow::{
    blocks, FcError, FcOp, FcPacket, FlowConfig, FlowControl, FC_PACKET_LEN, MAX_CREDIT,
    PERIOD_BUSY, VL15,
};
use transport::verbs::Time;

/// WF-09, IBA 7.9.4.2: the LPCRC is the VCRC's CRC-16 and goes on the wire
/// as the VCRC does, least significant byte first (the order the
/// real-hardware capture fixes for the VCRC, `capture_vectors.rs`): the last
/// two bytes of a flow-control packet are exactly the two bytes the wire
/// module appends as a VCRC over the same four bytes.
#[test]
fn fc_packet_lpcrc_goes_on_the_wire_as_a_vcrc_does() {
    let p = FcPacket {
        op: FcOp::Normal,
        fctbs: 0x5a3,
        vl: 2,
        fccl: 0x0c4,
    };
    let b = p.encode();
    let crc = transport::wire::crc::vcrc(&b[..4]);
    assert_ne!(
        crc.to_le_bytes(),
        crc.to_be_bytes(),
        "a CRC whose order shows"
    );
    assert_eq!(b[4..6], crc.to_le_bytes());
}

#[test]
fn fc_packet_fields_round_trip_and_bad_lpcrc_op_length_and_vl15_are_refused() {
    let p = FcPacket {
        op: FcOp::Normal,
        fctbs: 0xabc,
        vl: 7,
        fccl: 0x123,
    };
    let b = p.encode();
    assert_eq!(b.len(), FC_PACKET_LEN);
    // Op in the top nibble, FCTBS in the next 12 bits, VL, FCCL (7.9.4).
    assert_eq!(&b[..4], &[0x0a, 0xbc, 0x71, 0x23]);
    assert_eq!(FcPacket::decode(&b), Ok(p));
    let init = FcPacket {
        op: FcOp::Init,
        ..p
    };
    assert_eq!(init.encode()[0] >> 4, 1);
    assert_eq!(FcPacket::decode(&init.encode()), Ok(init));
    for bit in 0..48 {
        let mut bad = b;
        bad[bit / 8] ^= 1 << (bit % 8);
        assert_eq!(FcPacket::decode(&bad), Err(FcError::Lpcrc), "bit {bit}");
    }
    // A reserved Op with a good LPCRC.
    let mut op2 = b;
    op2[0] = 0x20 | (op2[0] & 0xf);
    let crc = transport::wire::crc::vcrc(&op2[..4]);
    op2[4..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(FcPacket::decode(&op2), Err(FcError::Op));
    let vl15 = FcPacket { vl: 15, ..p }.encode();
    assert_eq!(FcPacket::decode(&vl15), Err(FcError::Vl15));
    assert_eq!(FcPacket::decode(&b[..5]), Err(FcError::Length));
}

#[test]
fn bad_fc_packets_are_dropped_and_counted_by_reason_and_change_no_credit() {
    let mut a = FlowControl::new(FlowConfig::split(1000, 1));
    let good = FcPacket {
        op: FcOp::Normal,
        fctbs: 0,
        vl: 0,
        fccl: 500,
    }
    .encode();
    let mut bad_crc = good;
    bad_crc[3] ^= 1;
    let not_operational = FcPacket {
        vl: 3,
        ..FcPacket::decode(&good).unwrap()
    }
    .encode();
    assert!(a.handle_fc(&bad_crc).is_err());
    assert!(a.handle_fc(&good[..4]).is_err());
    assert!(a.handle_fc(&not_operational).is_err());
    assert_eq!(a.credit(0), 0, "no credit from a dropped FC packet");
    let c = *a.counters();
    assert_eq!(
        (c.fc_bad_lpcrc, c.fc_bad_length, c.fc_bad_vl, c.fc_received),
        (1, 1, 1, 0)
    );
    assert_eq!(c.fc_dropped(), 3);
    a.handle_fc(&good).unwrap();
    assert_eq!((a.credit(0), a.counters().fc_received), (500, 1));
}

#[test]
fn a_packet_takes_one_credit_per_started_64_byte_block() {
    assert_eq!([1, 64, 65, 128, 4096 + 26].map(blocks), [1, 1, 2, 2, 65]);
}

#[test]
fn no_data_before_the_first_credit_limit_and_init_packets_until_the_partner_is_heard() {
    let t = Time(0);
    let mut a = FlowControl::new(FlowConfig::split(100, 1));
    let mut b = FlowControl::new(FlowConfig::split(100, 1));
    assert!(!a.may_send(0, 64), "7.9.2: credit limits come before data");
    assert!(
        a.may_send(VL15, 256),
        "VL15 is outside flow control (7.9.1)"
    );
    let fa = a.poll_transmit(t).expect("an Init FC packet at once");
    assert_eq!((fa.op, fa.vl, fa.fccl), (FcOp::Init, 0, 100));
    assert_eq!(
        a.poll_transmit(t),
        None,
        "one per VL per period while initialising"
    );
    // b hears a's Init: a needs b's limits now, not after a period.
    b.handle_fc(&fa.encode()).unwrap();
    assert!(b.may_send(0, 100 * 64));
    assert!(!b.may_send(0, 100 * 64 + 1));
    let fb = b.poll_transmit(t).expect("answered at once");
    assert_eq!((fb.op, fb.fccl), (FcOp::Normal, 100));
    a.handle_fc(&fb.encode()).unwrap();
    assert_eq!(a.credit(0), 100);
    let later = a.poll_transmit(Time(1)).map(|p| p.op);
    assert_ne!(later, Some(FcOp::Init));
}

#[test]
fn credit_check_holds_across_the_mod_4096_wrap() {
    let mut a = FlowControl::new(FlowConfig::split(MAX_CREDIT.into(), 1));
    let mut b = FlowControl::new(FlowConfig::split(MAX_CREDIT.into(), 1));
    let t = Time(0);
    // Many thousand blocks: FCTBS and ABR wrap several times.
    let len = 64 * 100;
    let mut sent_blocks = 0u64;
    for round in 0..200u64 {
        while let Some(p) = a.poll_transmit(Time(round)) {
            b.handle_fc(&p.encode()).unwrap();
        }
        while let Some(p) = b.poll_transmit(Time(round)) {
            a.handle_fc(&p.encode()).unwrap();
        }
        let mut n = 0;
        while a.may_send(0, len) {
            a.sent(0, len, t);
            assert!(b.received(0, len, t), "never beyond the grant");
            sent_blocks += 100;
            n += 1;
        }
        assert_eq!(n, 20, "the whole grant every round, also after a wrap");
        for _ in 0..n {
            b.freed(0, len);
        }
    }
    assert!(sent_blocks > 4 * 4096);
    assert_eq!(b.counters().rx_overrun, 0);
}

#[test]
fn a_lost_fc_packet_is_recovered_by_the_next_periodic_one() {
    let mut a = FlowControl::new(FlowConfig::split(200, 1));
    let mut b = FlowControl::new(FlowConfig::split(200, 1));
    let t0 = Time(1_000);
    let p = b.poll_transmit(t0).unwrap();
    a.handle_fc(&p.encode()).unwrap();
    let q = a.poll_transmit(t0).unwrap();
    b.handle_fc(&q.encode()).unwrap();
    while b.poll_transmit(t0).is_some() {}
    let len = 64 * 50;
    for _ in 0..4 {
        a.sent(0, len, t0);
        b.received(0, len, t0);
    }
    assert!(!a.may_send(0, len), "out of credit");
    a.record_stall(0);
    for _ in 0..4 {
        b.freed(0, len);
    }
    // The eager update (all freed) is lost on the way.
    let lost = b.poll_transmit(t0).expect("eager update");
    assert_eq!(lost.fccl, 400);
    assert!(!a.may_send(0, len));
    assert_eq!(b.poll_transmit(t0), None);
    let due = b.poll_timeout().unwrap();
    assert_eq!(due, Time(t0.0 + PERIOD_BUSY), "busy link: the short period");
    let again = b.poll_transmit(due).expect("periodic FC packet");
    a.handle_fc(&again.encode()).unwrap();
    assert!(a.may_send(0, len));
    assert_eq!(a.counters().stalled[0], 1);
}

#[test]
fn lost_data_blocks_are_written_off_by_the_next_fctbs() {
    let mut a = FlowControl::new(FlowConfig::split(100, 1));
    let mut b = FlowControl::new(FlowConfig::split(100, 1));
    let t = Time(0);
    a.handle_fc(&b.poll_transmit(t).unwrap().encode()).unwrap();
    b.handle_fc(&a.poll_transmit(t).unwrap().encode()).unwrap();
    while b.poll_transmit(t).is_some() {}
    // Three packets of 30 blocks; the second is lost on the way.
    for i in 0..3 {
        a.sent(0, 30 * 64, t);
        if i != 1 {
            b.received(0, 30 * 64, t);
            b.freed(0, 30 * 64);
        }
    }
    // Without the lost packet's blocks b grants 60 + 100: 70 beyond a.
    let fc = a.poll_transmit(Time(PERIOD_BUSY * 2000)).unwrap();
    b.handle_fc(&fc.encode()).unwrap();
    assert_eq!(b.fccl(0), 90 + 100, "ABR = FCTBS: the lost blocks are gone");
}

/// What a simulated link carries, in order.
#[derive(Debug, Clone, Copy)]
enum Wire {
    Data(usize),
    Fc([u8; FC_PACKET_LEN]),
}

proptest! {
    /// The receiver never holds more than it granted, whatever the packet
    /// sizes, the order of frees, and which FC and data packets are lost;
    /// and as long as the receiver frees, the sender is never stuck for
    /// longer than a period.
    #[test]
    fn sender_never_exceeds_the_granted_credit_over_a_lossy_link(
        cap in 70u32..3000,
        steps in proptest::collection::vec((0usize..4200, 0u8..10, 0u8..4), 1..400),
    ) {
        let cfg = FlowConfig::split(cap, 1);
        let cap = u32::from(cfg.capacity[0]);
        let mut a = FlowControl::new(cfg);
        let mut b = FlowControl::new(cfg);
        let mut to_b: VecDeque<Wire> = VecDeque::new();
        let mut held: VecDeque<usize> = VecDeque::new();
        let mut now = 0u64;
        let mut pending: Option<usize> = None;
        for (len, loss, frees) in steps {
            now += PERIOD_BUSY / 3;
            let len = len.max(26);
            let t = Time(now);
            // a: FC packets and data, in order on the wire.
            while let Some(p) = a.poll_transmit(t) {
                to_b.push_back(Wire::Fc(p.encode()));
            }
            let want = pending.take().unwrap_or(len);
            if a.may_send(0, want) {
                a.sent(0, want, t);
                to_b.push_back(Wire::Data(want));
            } else {
                pending = Some(want);
            }
            // The wire: one in ten lost when `loss` is 0.
            while let Some(w) = to_b.pop_front() {
                if loss == 0 {
                    continue;
                }
                match w {
                    Wire::Data(n) => {
                        prop_assert!(b.received(0, n, t), "overrun: held {}", b.held(0));
                        held.push_back(n);
                    }
                    Wire::Fc(bytes) => {
                        b.handle_fc(&bytes).unwrap();
                    }
                }
            }
            prop_assert!(b.held(0) <= cap);
            for _ in 0..frees {
                if let Some(n) = held.pop_front() {
                    b.freed(0, n);
                }
            }
            while let Some(p) = b.poll_transmit(t) {
                if loss != 1 {
                    a.handle_fc(&p.encode()).unwrap();
                }
            }
        }
        prop_assert_eq!(b.counters().rx_overrun, 0);
        // Drain: b frees everything; within two periods a has credit for
        // the largest packet again.
        while let Some(n) = held.pop_front() {
            b.freed(0, n);
        }
        for _ in 0..3 {
            now += PERIOD_BUSY;
            while let Some(p) = a.poll_transmit(Time(now)) {
                b.handle_fc(&p.encode()).unwrap();
            }
            while let Some(p) = b.poll_transmit(Time(now)) {
                a.handle_fc(&p.encode()).unwrap();
            }
        }
        prop_assert_eq!(u32::from(a.credit(0)), cap);
    }
}
