//! InfiniBand congestion notification between two engines (issue 31 item 2;
//! IBA Annex A10.2.2, A10.3; BTH:FECN/BECN, IBA 9.2.9, 9.2.10): a request a
//! switch marked (the bench's `rewrite` sets FECN and the VCRC, as
//! `switch::cc` does) is answered with BECN, on the ACK for RC and in a CN
//! packet (opcode 0x81) for UD and UC; the source's congestion controller
//! hears the BECN (the IBA CCA when the port runs it). Assertions on the wire.

mod common;

use common::*;
use transport::cc::iba::Params;
use transport::engine::RxDrop;
use transport::mad::cc_attr::{CaCongestionEntry, CaCongestionSetting, CctEntry};
use transport::verbs::{AddressVector, QpType, UdDest, WcStatus, WrOpcode};
use transport::wire::crc::vcrc;
use transport::wire::opcode::{Direction, Opcode};
use transport::wire::PacketRepr;

/// The bench's switch: FECN on every request node 0 (LID 1) sends, the VCRC
/// computed again (FECN is outside the ICRC, IBA 9.2.9). The bench's
/// `Net::rewrite` takes a `&mut Vec`.
#[allow(clippy::ptr_arg)]
fn mark_requests_from_node_0(pkt: &mut Vec<u8>) {
    let Ok(p) = PacketRepr::parse(pkt) else {
        return;
    };
    if p.lrh.slid != 1 || p.transport.bth.opcode.info().direction() != Direction::Request {
        return;
    }
    // LRH (8) then BTH byte 4: F B Resv6.
    pkt[8 + 4] |= 0x80;
    let n = pkt.len() - 2;
    let crc = vcrc(&pkt[..n]).to_le_bytes();
    pkt[n..].copy_from_slice(&crc);
}

/// SL 0: CCTI_Increase 1, CCTI_Timer 1000 (about 1 ms); CCT entry i is IPD i.
fn cca() -> Params {
    let mut s = CaCongestionSetting::default();
    s.entries[0] = CaCongestionEntry {
        ccti_timer: 1000,
        ccti_increase: 1,
        trigger_threshold: 0,
        ccti_min: 0,
    };
    let cct: Vec<CctEntry> = (0..64)
        .map(|i| CctEntry {
            shift: 0,
            multiplier: i,
        })
        .collect();
    Params::from_agent(&s, &cct)
}

fn parsed(wire: &[Vec<u8>]) -> Vec<PacketRepr<'_>> {
    wire.iter()
        .map(|b| PacketRepr::parse(b).expect("every packet valid, CRCs included"))
        .collect()
}

/// RC WRITEs from node 0 to node 1, marked or not: the wire and the net.
fn rc_writes(mark: bool) -> Net {
    let mut net = Net::new(2, 1 << 20, 31);
    net.sniffed = Some(Vec::new());
    if mark {
        net.rewrite = Some(mark_requests_from_node_0);
    }
    net.nodes[0].engine.set_cc_iba(Some(cca()));
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    for i in 0..4 {
        let c = post_wait(
            &mut net,
            0,
            p.qa,
            p.cq_a,
            write_wr(i, ka, 4096, kb, MEM_BASE + 0x10000),
        );
        assert_eq!(c.status, WcStatus::Success);
    }
    net
}

#[test]
fn a10_2_2_rc_request_with_fecn_is_acked_with_becn_and_the_source_ccti_rises() {
    let net = rc_writes(true);
    let wire = net.sniffed.as_ref().unwrap();
    let pkts = parsed(wire);
    let acks: Vec<_> = pkts
        .iter()
        .filter(|p| p.lrh.slid == 2 && p.transport.bth.opcode == Opcode::RC_ACKNOWLEDGE)
        .collect();
    assert!(!acks.is_empty());
    assert!(
        acks.iter()
            .all(|p| p.transport.bth.becn && !p.transport.bth.fecn),
        "every ACK of a marked request carries BECN"
    );
    assert!(
        !pkts.iter().any(|p| p.transport.bth.opcode == Opcode::CNP),
        "RC answers on the ACK, no CN packet"
    );
    let c1 = net.nodes[1].engine.counters().cc;
    let requests = pkts.iter().filter(|p| p.lrh.slid == 1).count() as u64;
    assert_eq!(c1.fecn_seen, requests);
    let c0 = net.nodes[0].engine.counters().cc;
    assert_eq!(c0.becns_received, acks.len() as u64);
    assert_eq!(c0.rate_cuts, acks.len() as u64, "CCTI +1 per BECN");
}

/// A10.2.2: the destination returns a BECN for each FECN it receives, so the
/// source hears of congestion as often as its packets meet it, not once a
/// message: a marked RC request is ACKed at once (IBA 9.7.5.1.1 lets a
/// responder ACK any request), the BECN on it. Four 4 KiB WRITEs of four
/// 1 KiB packets each, all marked: more BECNs than messages (one a message,
/// 4, before), and every ACK carries one. (ACKs still coalesce when several
/// requests arrive before the responder sends: one BECN for those.)
#[test]
fn a10_2_2_marked_rc_requests_are_acked_at_once_with_becn_not_once_a_message() {
    let net = rc_writes(true);
    let c1 = net.nodes[1].engine.counters().cc;
    let c0 = net.nodes[0].engine.counters().cc;
    assert_eq!(c1.fecn_seen, 16, "four WRITEs of four packets, all marked");
    assert!(
        c0.becns_received > 4,
        "{} BECNs for 16 marks in 4 messages",
        c0.becns_received
    );
    assert_eq!(c0.rate_cuts, c0.becns_received, "CCTI +1 per BECN");
}

#[test]
fn a10_2_2_unmarked_rc_traffic_carries_no_becn() {
    let net = rc_writes(false);
    let pkts = parsed(net.sniffed.as_ref().unwrap());
    assert!(pkts.iter().all(|p| !p.transport.bth.becn));
    assert_eq!(net.nodes[0].engine.counters().cc.becns_received, 0);
    assert_eq!(net.nodes[1].engine.counters().cc.fecn_seen, 0);
}

/// UD SENDs from node 0's QP `qa` to node 1's `qb`, marked.
fn ud_sends(n: u64) -> (Net, u32, u32) {
    let mut net = Net::new(2, 1 << 20, 32);
    net.sniffed = Some(Vec::new());
    net.rewrite = Some(mark_requests_from_node_0);
    net.nodes[0].engine.set_cc_iba(Some(cca()));
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (qa, cqa) = ud_qp(&mut net, 0);
    let (qb, cqb) = ud_qp(&mut net, 1);
    for i in 0..n {
        recv(&mut net, 1, qb, i, MEM_BASE + 0x10000, 1024 + 40, kb);
        let mut w = send_wr(i, WrOpcode::Send, sge(MEM_BASE, 256, ka));
        w.ud = Some(UdDest {
            av: AddressVector {
                dlid: 2,
                sl: 0,
                ..AddressVector::default()
            },
            remote_qpn: qb,
            remote_qkey: 0x1111_1111,
            pkey_index: None,
        });
        net.nodes[0].engine.post_send(qa, w).unwrap();
        assert_eq!(wait(&mut net, 1, cqb, 1)[0].status, WcStatus::Success);
        assert_eq!(wait(&mut net, 0, cqa, 1)[0].status, WcStatus::Success);
    }
    net.run_until(10_000, |_| false);
    (net, qa, qb)
}

#[test]
fn a10_2_2_ud_request_with_fecn_gets_a_cn_packet_with_becn_to_the_source_qp() {
    let (net, qa, _) = ud_sends(3);
    let pkts = parsed(net.sniffed.as_ref().unwrap());
    let cns: Vec<_> = pkts
        .iter()
        .filter(|p| p.transport.bth.opcode == Opcode::CNP)
        .collect();
    assert_eq!(cns.len(), 3, "one CN packet per marked request");
    for cn in &cns {
        let b = &cn.transport.bth;
        assert!(b.becn && !b.fecn);
        assert_eq!((cn.lrh.slid, cn.lrh.dlid, b.dest_qp), (2, 1, qa));
        assert!(cn.transport.ext.cnp && cn.transport.payload.is_empty());
    }
    let (c0, c1) = (
        net.nodes[0].engine.counters().cc,
        net.nodes[1].engine.counters().cc,
    );
    assert_eq!((c1.fecn_seen, c1.cnps_sent), (3, 3));
    assert_eq!(
        (c0.cnps_received, c0.becns_received, c0.rate_cuts),
        (3, 3, 3)
    );
    assert_eq!(
        net.nodes[0]
            .engine
            .counters()
            .dropped(RxDrop::ServiceMismatch),
        0
    );
}

#[test]
fn a10_3_a_cn_packet_for_no_qp_is_dropped_and_counted() {
    let (mut net, qa, _) = ud_sends(1);
    let wire = net.sniffed.as_ref().unwrap().clone();
    let cn = wire
        .iter()
        .find(|b| PacketRepr::parse(b).unwrap().transport.bth.opcode == Opcode::CNP)
        .unwrap()
        .clone();
    // The same CN packet to a QP that does not exist (both CRCs again).
    let mut p = PacketRepr::parse(&cn).unwrap();
    p.transport.bth.dest_qp = qa + 100;
    let mut bad = vec![0u8; p.buffer_len()];
    p.emit(&mut bad).unwrap();
    let before = net.nodes[0].engine.counters().dropped(RxDrop::UnknownQp);
    let n = &mut net.nodes[0];
    n.engine.handle_packet(&bad, &mut n.mem, net.now);
    assert_eq!(
        net.nodes[0].engine.counters().dropped(RxDrop::UnknownQp),
        before + 1
    );
    assert_eq!(net.nodes[0].engine.counters().cc.becns_received, 1);
}

#[test]
fn a10_2_2_uc_request_with_fecn_gets_a_cn_packet_to_the_remote_qp() {
    let mut net = Net::new(2, 1 << 20, 33);
    net.sniffed = Some(Vec::new());
    net.rewrite = Some(mark_requests_from_node_0);
    let o = ConnOpts {
        qp_type: QpType::Uc,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let c = post_wait(
        &mut net,
        0,
        p.qa,
        p.cq_a,
        write_wr(1, ka, 2048, kb, MEM_BASE + 0x10000),
    );
    assert_eq!(c.status, WcStatus::Success);
    net.run_until(10_000, |_| false);
    let pkts = parsed(net.sniffed.as_ref().unwrap());
    let cns: Vec<_> = pkts
        .iter()
        .filter(|p| p.transport.bth.opcode == Opcode::CNP)
        .collect();
    assert_eq!(cns.len(), 2, "two 1024-byte packets, each marked");
    assert!(cns.iter().all(|c| c.transport.bth.dest_qp == p.qa));
    // No CCA on node 0: the BECNs are counted, nothing slows down.
    let c0 = net.nodes[0].engine.counters().cc;
    assert_eq!((c0.becns_received, c0.rate_cuts), (2, 0));
}
