//! A switch's congestion marking (issue 31 item 2; IBA Annex A10.2.1, A10.4.3.6,
//! A10.4.3.7): the congestion control manager sets SwitchCongestionSetting with a
//! CC MAD to the switch's LID (QP1, class 0x21), and a data packet leaving by a
//! port whose output queue is past the threshold goes out with BTH:FECN set,
//! its ICRC still good (FECN is a variant bit, IBA 9.2.9) and its VCRC new.
//!
//! The switch: 4 ports, LID 1; LID 2 behind port 1, LID 3 behind port 2.

mod switch_util;

use switch_util::{packet, switch_config};
use transport::mad::cc_attr::{id, CLASS_CC};
use transport::switch::cc::QueueDepth;
use transport::switch::pma::GSI_QKEY;
use transport::switch::{Egress, Switch, SwitchOut};
use transport::verbs::Time;
use transport::wire::ext::DethRepr;
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};

const T0: Time = Time(5_000_000_000);
const SW_LID: u16 = 1;

fn switch() -> Switch {
    let mut sw = Switch::new(&switch_config(4));
    sw.set_static_lid(SW_LID);
    for (lid, port) in [(2, 1), (3, 2)] {
        sw.link_up(port);
        assert!(sw.set_static_route(lid, port));
        sw.activate(port);
    }
    sw
}

fn feed(sw: &mut Switch, pkt: &[u8], port: u8) -> Vec<SwitchOut> {
    let mut out = vec![];
    sw.handle_packet(pkt, port, T0, &mut out);
    out
}

/// A CC MAD from the SM at LID 2 (port 1) to the switch, as OpenSM's
/// `cc_mad_post` builds it; the response MAD.
fn cc(sw: &mut Switch, method: u8, attr: u16, modifier: u32, data: &[u8]) -> Vec<u8> {
    let mut mad = [0u8; 256];
    mad[0] = 1;
    mad[1] = CLASS_CC;
    mad[2] = 2;
    mad[3] = method;
    mad[8..16].copy_from_slice(&0x7a94u64.to_be_bytes());
    mad[16..18].copy_from_slice(&attr.to_be_bytes());
    mad[20..24].copy_from_slice(&modifier.to_be_bytes());
    mad[64..64 + data.len()].copy_from_slice(data);
    let repr = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: 0,
            dlid: SW_LID,
            slid: 2,
        },
        grh: None,
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
                psn: 1,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: GSI_QKEY,
                    src_qp: 1,
                }),
                ..ExtHeaders::default()
            },
            payload: &mad,
        },
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    let out = feed(sw, &buf, 1);
    assert_eq!(out.len(), 1, "one response");
    assert_eq!(out[0].port, 1, "back toward the SM");
    let Egress::New(b) = &out[0].packet else {
        panic!("a response is a new packet")
    };
    let p = PacketRepr::parse(b).expect("a valid packet");
    let r = p.transport.payload.to_vec();
    assert_eq!(r[3], 0x81, "GetResp");
    assert_eq!(u16::from_be_bytes([r[4], r[5]]), 0, "status");
    r
}

/// SwitchCongestionSetting with every part valid: Threshold, Packet_Size
/// (64-byte units), Marking_Rate.
fn configure(sw: &mut Switch, threshold: u8, packet_size: u8, marking_rate: u16) {
    let mut d = [0u8; 76];
    d[0..4].copy_from_slice(&0x1fu32.to_be_bytes());
    d[68] = threshold << 4;
    d[69] = packet_size;
    d[74..76].copy_from_slice(&marking_rate.to_be_bytes());
    cc(sw, 0x02, id::SWITCH_CONGESTION_SETTING, 0, &d);
}

/// A 512-byte data packet from LID 2 to LID 3: forwarded out of port 2.
fn data(sw: &mut Switch) -> Vec<u8> {
    let pkt = packet(0, 3, 2, 0x44, &[0x5a; 512]);
    let out = feed(sw, &pkt, 1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, 2);
    assert_eq!(out[0].packet, Egress::Same);
    pkt
}

fn queue(blocks: u32) -> QueueDepth {
    QueueDepth { blocks, limit: 160 }
}

/// The marked packet: valid (VCRC and ICRC checked by parse), FECN set, and
/// otherwise the same bytes but the VCRC.
fn assert_marked(orig: &[u8], marked: &[u8]) {
    let p = PacketRepr::parse(marked).expect("both CRCs good");
    assert!(p.transport.bth.fecn);
    assert!(!PacketRepr::parse(orig).unwrap().transport.bth.fecn);
    let n = orig.len() - 2;
    let diff: Vec<usize> = (0..n).filter(|&i| orig[i] != marked[i]).collect();
    assert_eq!(diff, vec![8 + 4], "only BTH byte 4 (F/B/Resv6) changed");
}

#[test]
fn a10_2_1_switch_marks_fecn_only_above_the_threshold() {
    let mut sw = switch();
    let pkt = data(&mut sw);
    // No manager yet: Threshold 0 marks nothing, even with the queue full.
    assert!(sw.cc_mark(2, &pkt, queue(160), T0).is_none());
    // Threshold 8: past half of the queue (80 of 160 blocks).
    configure(&mut sw, 8, 0, 0);
    assert!(sw.cc_mark(2, &pkt, queue(0), T0).is_none());
    assert!(sw.cc_mark(2, &pkt, queue(80), T0).is_none(), "at, not past");
    let m = sw
        .cc_mark(2, &pkt, queue(81), T0)
        .expect("past the threshold");
    assert_marked(&pkt, &m);
    // Threshold 15: past a sixteenth.
    configure(&mut sw, 15, 0, 0);
    assert!(sw.cc_mark(2, &pkt, queue(10), T0).is_none());
    assert!(sw.cc_mark(2, &pkt, queue(11), T0).is_some());
    assert_eq!(sw.fecn_marked(2), 2);
    assert_eq!(sw.fecn_marked(1), 0);
    // The marks are in the CongestionLog (A10.4.3.5): port 2's bit, the
    // packet's SLID and DLID.
    let log = cc(&mut sw, 0x01, id::CONGESTION_LOG, 0, &[]);
    assert_eq!(log[32], 1, "LogType: switch");
    assert_eq!(log[34..36], 2u16.to_be_bytes());
    assert_eq!(log[40 + 31], 1 << 2, "port 2 marked");
    assert_eq!(log[72..76], [0, 2, 0, 3], "SLID 2, DLID 3");
}

#[test]
fn a10_4_3_6_marking_rate_and_packet_size_limit_what_is_marked() {
    let mut sw = switch();
    let pkt = data(&mut sw);
    // Marking_Rate 2: two eligible packets unmarked between marked ones.
    configure(&mut sw, 15, 0, 2);
    let marks: Vec<bool> = (0..9)
        .map(|_| sw.cc_mark(2, &pkt, queue(100), T0).is_some())
        .collect();
    assert_eq!(
        marks,
        [false, false, true, false, false, true, false, false, true]
    );
    // Packet_Size 10 (640 bytes): the 512-byte packet is too short.
    configure(&mut sw, 15, 10, 0);
    assert!(sw.cc_mark(2, &pkt, queue(100), T0).is_none());
    let big = packet(0, 3, 2, 0x44, &[0x5a; 1024]);
    assert!(sw.cc_mark(2, &big, queue(100), T0).is_some());
}

#[test]
fn a10_2_1_marked_smp_cnp_and_junk_are_left_alone() {
    let mut sw = switch();
    configure(&mut sw, 15, 0, 0);
    let pkt = data(&mut sw);
    let m = sw.cc_mark(2, &pkt, queue(100), T0).unwrap();
    assert!(
        sw.cc_mark(2, &m, queue(100), T0).is_none(),
        "already marked"
    );
    let smp = packet(15, 3, 2, 0, &[0; 256]);
    assert!(sw.cc_mark(2, &smp, queue(100), T0).is_none(), "VL15");
    let mut cnp = pkt.clone();
    cnp[8] = Opcode::CNP.as_u8();
    assert!(sw.cc_mark(2, &cnp, queue(100), T0).is_none(), "a CN packet");
    assert!(
        sw.cc_mark(2, &pkt[..20], queue(100), T0).is_none(),
        "truncated"
    );
    assert!(
        sw.cc_mark(9, &pkt, queue(100), T0).is_none(),
        "no such port"
    );
    assert_eq!(sw.fecn_marked(2), 1);
}

#[test]
fn a10_4_3_7_a_valid_port_element_overrides_the_switch_setting() {
    let mut sw = switch();
    configure(&mut sw, 15, 0, 0);
    let pkt = data(&mut sw);
    // Port 2: valid, congestion control, Threshold 1 (only a nearly full queue).
    let mut d = [0u8; 128];
    d[8..12].copy_from_slice(&[0x80 | 1, 0, 0, 0]);
    cc(&mut sw, 0x02, id::SWITCH_PORT_CONGESTION_SETTING, 0, &d);
    assert!(sw.cc_mark(2, &pkt, queue(150), T0).is_none(), "150 of 160");
    assert!(sw.cc_mark(2, &pkt, queue(151), T0).is_some());
    // Port 1 keeps the switch's Threshold 15.
    assert!(sw.cc_mark(1, &pkt, queue(11), T0).is_some());
}
