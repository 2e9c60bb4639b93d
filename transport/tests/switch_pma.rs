//! The switch's Performance Management agent (issue 26 items 3 and 6; AD-09): what
//! `perfquery <switch-lid> <port>` sends (a PerfMgt GMP to QP1 of the switch's LID)
//! and what comes back on the wire: ClassPortInfo, PortCounters after known traffic,
//! PortCountersExtended, Set(PortCounters) clearing, the MAD status of a bad field,
//! the drops, the response's route by the LFT.
//!
//! The switch: 4 ports, LID 1; LID 2 behind port 1, LID 3 behind port 2, LID 4
//! behind port 3 (the static start-up interface, no SM needed).

mod switch_util;

use switch_util::{packet, switch_config};
use transport::mad::{method, status};
use transport::switch::pma::{pma_attr, GSI_QKEY};
use transport::switch::{Egress, Switch, SwitchDrop, SwitchOut};
use transport::verbs::Time;
use transport::wire::ext::DethRepr;
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};

const T0: Time = Time(5_000_000_000);
const SW_LID: u16 = 1;
const TID: u64 = 0x0000_0042_0000_1234;
const PKEY: u16 = 0x8001;
const REQ_QP: u32 = 0x37;
const REQ_SL: u8 = 3;

fn switch() -> Switch {
    let mut sw = Switch::new(&switch_config(4));
    sw.set_static_lid(SW_LID);
    for (lid, port) in [(2, 1), (3, 2), (4, 3)] {
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

/// A PerfMgt MAD (IBA 16.1.1): header, 40 reserved octets, data at 64.
fn pma_mad(class: u8, m: u8, attr: u16, port_select: u8, counter_select: u16) -> [u8; 256] {
    let mut mad = [0u8; 256];
    mad[0] = 1;
    mad[1] = class;
    mad[2] = 1;
    mad[3] = m;
    mad[8..16].copy_from_slice(&TID.to_be_bytes());
    mad[16..18].copy_from_slice(&attr.to_be_bytes());
    mad[65] = port_select;
    mad[66..68].copy_from_slice(&counter_select.to_be_bytes());
    mad
}

/// A GMP as a port's GSI sends it: UD SEND Only to QP1 on a data VL, the GSI Q_Key.
fn gmp(slid: u16, qkey: u32, mad: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: REQ_SL,
            dlid: SW_LID,
            slid,
        },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: PKEY,
                fecn: false,
                becn: false,
                dest_qp: 1,
                ack_req: false,
                psn: 9,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey,
                    src_qp: REQ_QP,
                }),
                ..ExtHeaders::default()
            },
            payload: mad,
        },
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

/// Sends `mad` from LID `slid` into port `in_port`; the one packet out, its port,
/// and the response MAD after checking the headers a GSI expects back.
fn ask(sw: &mut Switch, slid: u16, in_port: u8, mad: &[u8; 256]) -> (u8, Vec<u8>) {
    let out = feed(sw, &gmp(slid, GSI_QKEY, mad), in_port);
    assert_eq!(out.len(), 1, "one response");
    let Egress::New(b) = &out[0].packet else {
        panic!("a response is a new packet")
    };
    // parse checks both CRCs.
    let p = PacketRepr::parse(b).expect("a valid packet");
    assert_eq!(
        p.lrh,
        LrhRepr {
            vl: 0,
            sl: REQ_SL,
            dlid: slid,
            slid: SW_LID
        }
    );
    let t = &p.transport;
    assert_eq!(t.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!((t.bth.dest_qp, t.bth.pkey), (REQ_QP, PKEY));
    assert_eq!(
        t.ext.deth,
        Some(DethRepr {
            qkey: GSI_QKEY,
            src_qp: 1
        })
    );
    let r = t.payload.to_vec();
    assert_eq!(r.len(), 256);
    assert_eq!(&r[..3], &mad[..3], "versions and class");
    assert_eq!(r[3], method::GET_RESP);
    assert_eq!(&r[8..16], &TID.to_be_bytes(), "the request's TID");
    assert_eq!(&r[16..18], &mad[16..18], "the attribute");
    (out[0].port, r)
}

fn st(r: &[u8]) -> u16 {
    u16::from_be_bytes([r[4], r[5]])
}
fn be32(r: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(r[64 + at..64 + at + 4].try_into().unwrap())
}
fn be64(r: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(r[64 + at..64 + at + 8].try_into().unwrap())
}
fn be16(r: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([r[64 + at], r[64 + at + 1]])
}

fn get(attr: u16, port: u8) -> [u8; 256] {
    pma_mad(0x04, method::GET, attr, port, 0)
}

/// Known traffic through port 2 (LID 3): 3 packets in to LID 2 (port 1), 2 back.
/// The words of each.
fn traffic(sw: &mut Switch) -> (u64, u64) {
    let to2 = packet(0, 2, 3, 0x40, &[0xab; 100]);
    let to3 = packet(0, 3, 2, 0x41, &[0xcd; 40]);
    for _ in 0..3 {
        assert_eq!(feed(sw, &to2, 2).len(), 1);
    }
    for _ in 0..2 {
        assert_eq!(feed(sw, &to3, 1).len(), 1);
    }
    (((to2.len() - 2) / 4) as u64, ((to3.len() - 2) / 4) as u64)
}

#[test]
fn ad_09_switch_pma_class_port_info_bytes() {
    let mut sw = switch();
    let (port, r) = ask(&mut sw, 3, 2, &get(pma_attr::CLASS_PORT_INFO, 0));
    assert_eq!(port, 2);
    assert_eq!(st(&r), status::OK);
    // BaseVersion 1, ClassVersion 1, CapabilityMask AllPortSelect (bit 8) |
    // IsExtendedWidthSupportedNoIETF (bit 10), RespTimeValue 18.
    assert_eq!(&r[64..72], &[1, 1, 0x05, 0x00, 0, 0, 0, 18]);
    assert!(r[72..].iter().all(|&b| b == 0), "no redirection, no traps");
    assert_eq!(sw.counters().pma_replies, 1);
}

#[test]
fn ad_09_switch_pma_port_counters_of_port_2_count_the_traffic() {
    let mut sw = switch();
    let (w_in, w_out) = traffic(&mut sw);
    let req = get(pma_attr::PORT_COUNTERS, 2);
    let req_words = ((gmp(3, GSI_QKEY, &req).len() - 2) / 4) as u32;
    let (port, r) = ask(&mut sw, 3, 2, &req);
    assert_eq!(port, 2, "back to LID 3 by the LFT");
    assert_eq!(st(&r), status::OK);
    assert_eq!(r[65], 2, "PortSelect");
    // The request itself was received on port 2 before the counters were read;
    // its response is sent after.
    assert_eq!(be32(&r, 24), 2 * w_out as u32, "PortXmitData");
    assert_eq!(be32(&r, 28), 3 * w_in as u32 + req_words, "PortRcvData");
    assert_eq!(be32(&r, 32), 2, "PortXmitPkts");
    assert_eq!(be32(&r, 36), 4, "PortRcvPkts");
    assert_eq!(be16(&r, 8), 0, "PortRcvErrors");
    // Port 1 saw the mirror image.
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS, 1));
    assert_eq!((be32(&r, 32), be32(&r, 36)), (3, 2));
    assert_eq!(be32(&r, 24), 3 * w_in as u32);
    // Every port summed (PortSelect 0xFF): 5 packets forwarded, 2 responses sent.
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS, 0xff));
    assert_eq!(be32(&r, 32), 5 + 2, "PortXmitPkts, all ports");
}

#[test]
fn ad_09_switch_pma_port_counters_saturate_at_field_width() {
    let mut sw = switch();
    // IBA 16.1.3.5: PortRcvErrors is 16 bits and stops at 0xFFFF.
    for _ in 0..0x1_0005 {
        feed(&mut sw, &[0u8; 4], 2);
    }
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS, 2));
    assert_eq!(be16(&r, 8), 0xffff, "PortRcvErrors");
}

#[test]
fn ad_09_switch_pma_port_counters_extended() {
    let mut sw = switch();
    let (w_in, w_out) = traffic(&mut sw);
    let req = get(pma_attr::PORT_COUNTERS_EXT, 2);
    let req_words = ((gmp(3, GSI_QKEY, &req).len() - 2) / 4) as u64;
    let (_, r) = ask(&mut sw, 3, 2, &req);
    assert_eq!(st(&r), status::OK);
    assert_eq!(r[65], 2);
    assert_eq!(be64(&r, 8), 2 * w_out, "PortXmitData");
    assert_eq!(be64(&r, 16), 3 * w_in + req_words, "PortRcvData");
    assert_eq!(be64(&r, 24), 2, "PortXmitPkts");
    assert_eq!(be64(&r, 32), 4, "PortRcvPkts");
    assert!(r[64 + 40..].iter().all(|&b| b == 0), "no IETF counters");
}

#[test]
fn ad_09_switch_pma_set_port_counters_clears_the_selected_counters() {
    let mut sw = switch();
    let (w_in, _) = traffic(&mut sw);
    // CounterSelect PortXmitData only: the rest stay.
    let (_, r) = ask(
        &mut sw,
        3,
        2,
        &pma_mad(0x04, method::SET, pma_attr::PORT_COUNTERS, 2, 0x1000),
    );
    assert_eq!(st(&r), status::OK);
    assert_eq!(be32(&r, 24), 0, "PortXmitData cleared");
    assert_eq!(be32(&r, 32), 2, "PortXmitPkts kept");
    // perfquery -r: every counter of port 2.
    let (_, r) = ask(
        &mut sw,
        3,
        2,
        &pma_mad(0x04, method::SET, pma_attr::PORT_COUNTERS, 2, 0xffff),
    );
    assert_eq!(st(&r), status::OK);
    assert!(r[64 + 4..64 + 40].iter().all(|&b| b == 0), "all clear");
    // Since the clear: one request in, one response (the Set's) out.
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS, 2));
    assert_eq!((be32(&r, 32), be32(&r, 36)), (1, 1));
    // Port 1's counters are untouched.
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS, 1));
    assert_eq!(be32(&r, 24), 3 * w_in as u32);
}

#[test]
fn ad_09_switch_pma_bad_fields_get_the_mad_status() {
    let mut sw = switch();
    // PortSelect 5 on a 4-port switch: INVALID_FIELD (IBA 13.4.7).
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS, 5));
    assert_eq!(st(&r), status::INVALID_FIELD);
    let (_, r) = ask(&mut sw, 3, 2, &get(pma_attr::PORT_COUNTERS_EXT, 200));
    assert_eq!(st(&r), status::INVALID_FIELD);
    // PortSamplesControl, and a Set of ClassPortInfo: not supported here.
    let (_, r) = ask(&mut sw, 3, 2, &get(0x0010, 1));
    assert_eq!(st(&r), status::UNSUPPORTED_METHOD_ATTR);
    let set_cpi = pma_mad(0x04, method::SET, pma_attr::CLASS_PORT_INFO, 0, 0);
    let (_, r) = ask(&mut sw, 3, 2, &set_cpi);
    assert_eq!(st(&r), status::UNSUPPORTED_METHOD_ATTR);
    // Another method (0x03, Send): not one of the class.
    let (_, r) = ask(
        &mut sw,
        3,
        2,
        &pma_mad(0x04, 0x03, pma_attr::PORT_COUNTERS, 1, 0),
    );
    assert_eq!(st(&r), status::UNSUPPORTED_METHOD);
    // Class version 2.
    let mut v2 = get(pma_attr::PORT_COUNTERS, 1);
    v2[2] = 2;
    let (_, r) = ask(&mut sw, 3, 2, &v2);
    assert_eq!(st(&r), status::BAD_VERSION);
    assert_eq!(sw.counters().pma_error_replies, 6);
}

#[test]
fn ad_09_switch_qp1_gmp_of_another_class_or_q_key_is_counted_as_dropped() {
    let mut sw = switch();
    let c = |sw: &Switch| sw.counters().drop_count(SwitchDrop::ToSwitch);
    // SubnAdm (0x03) to QP1 of a switch: no SA here.
    let sa = pma_mad(0x03, method::GET, 0x0011, 0, 0);
    assert!(feed(&mut sw, &gmp(3, GSI_QKEY, &sa), 2).is_empty());
    assert_eq!(c(&sw), 1);
    // A PerfMgt GMP with the wrong Q_Key (IBA 13.5.1).
    let pc = get(pma_attr::PORT_COUNTERS, 1);
    assert!(feed(&mut sw, &gmp(3, 0x1111_1111, &pc), 2).is_empty());
    assert_eq!(c(&sw), 2);
    // A response sent to the PMA gets no answer.
    let resp = pma_mad(0x04, method::GET_RESP, pma_attr::PORT_COUNTERS, 1, 0);
    assert!(feed(&mut sw, &gmp(3, GSI_QKEY, &resp), 2).is_empty());
    assert_eq!(c(&sw), 3);
    // A short MAD.
    assert!(feed(&mut sw, &gmp(3, GSI_QKEY, &pc[..200]), 2).is_empty());
    assert_eq!(c(&sw), 4);
    assert_eq!(sw.counters().pma_replies, 0);
}

#[test]
fn ad_09_switch_pma_response_routed_back_by_the_lft() {
    let mut sw = switch();
    // LID 4 sits behind port 3, but its request comes in on port 1: the response
    // goes where the LFT sends LID 4.
    let (port, r) = ask(&mut sw, 4, 1, &get(pma_attr::PORT_COUNTERS, 1));
    assert_eq!(st(&r), status::OK);
    assert_eq!(port, 3);
    // A requester the LFT does not know: back out of the ingress port.
    let (port, _) = ask(&mut sw, 0x30, 1, &get(pma_attr::PORT_COUNTERS, 1));
    assert_eq!(port, 1);
}

/// Port 0 of the switch answers the baseboard management class on QP1 with its
/// BMA (AD-12): BKeyInfo Set and Get on the wire, the B_Key guarding a Set, a
/// baseboard command a switch without hardware refuses with a status.
#[test]
fn ad_12_switch_port0_bma_answers_bkeyinfo_on_qp1() {
    use transport::mad::bma::{bm_attr, BmaDrop, CLASS_BM};
    const KEY: u64 = 0x0b0b_0000_0000_0042;
    let bm = |m: u8, attr: u16, bkey: u64, info: Option<(u64, bool, u16)>| {
        let mut mad = pma_mad(CLASS_BM, m, attr, 0, 0);
        mad[24..32].copy_from_slice(&bkey.to_be_bytes());
        mad[64..68].fill(0);
        if let Some((k, protect, lease)) = info {
            mad[64..72].copy_from_slice(&k.to_be_bytes());
            mad[72] = u8::from(protect) << 7;
            mad[74..76].copy_from_slice(&lease.to_be_bytes());
        }
        mad
    };
    let mut sw = switch();
    let set = bm(method::SET, bm_attr::BKEY_INFO, 0, Some((KEY, true, 60)));
    let (port, r) = ask(&mut sw, 3, 2, &set);
    assert_eq!((port, st(&r)), (2, status::OK));
    assert_eq!(be64(&r, 0), KEY);
    assert_eq!((r[72], be16(&r, 10)), (0x80, 60));
    // A Get without the key: answered, the key read as 0.
    let (_, r) = ask(&mut sw, 3, 2, &bm(method::GET, bm_attr::BKEY_INFO, 1, None));
    assert_eq!((st(&r), be64(&r, 0), r[72]), (status::OK, 0, 0x80));
    // A Set without the key: nothing on the wire, B_KeyViolations counted.
    let steal = bm(method::SET, bm_attr::BKEY_INFO, 1, Some((1, false, 0)));
    assert!(feed(&mut sw, &gmp(3, GSI_QKEY, &steal), 2).is_empty());
    assert_eq!(sw.bma().counters().drops(BmaDrop::BadBkey), 1);
    assert_eq!(sw.bma().bkey_info().violations, 1);
    // The lease (60 s) started with the violation: the switch's timer says so;
    // a request with the key stops it.
    assert_eq!(sw.poll_timeout(), Some(T0.plus_ns(60_000_000_000)));
    let (_, r) = ask(
        &mut sw,
        3,
        2,
        &bm(method::GET, bm_attr::BKEY_INFO, KEY, None),
    );
    assert_eq!((be64(&r, 0), be16(&r, 12)), (KEY, 1));
    assert_eq!(sw.poll_timeout(), None);
    // GetModuleStatus (0x2B) by Get: UNSUPPORTED_METHOD_ATTR.
    let (_, r) = ask(&mut sw, 3, 2, &bm(method::GET, 0x002b, KEY, None));
    assert_eq!(st(&r), status::UNSUPPORTED_METHOD_ATTR);
    assert_eq!(sw.counters().drop_count(SwitchDrop::ToSwitch), 0);
}
