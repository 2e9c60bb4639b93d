//! Partitions (AD-05, PV-03) and LMC paths (AD-01) between two engines on the
//! simulated fabric: the P_Key a QP sends is its table entry, a packet is
//! checked against the receiving QP's entry (QP1 against the whole table) by
//! the membership rule of 10.9.3, and a port of LMC > 0 sends from and takes
//! packets to each of its 2^LMC LIDs.

mod common;

use common::*;
use transport::engine::{Limits, PortConfig, RxDrop, GSI_QKEY};
use transport::verbs::{
    AddressVector, AttrMask, QpAttr, QpState, QpType, RecvWr, SendWr, UdDest, WcStatus, WrOpcode,
};
use transport::wire::opcode::Opcode;
use transport::wire::PacketRepr;

const REMOTE: u64 = MEM_BASE + 0x10_0000;

fn port(lid: u16, lmc: u8, pkeys: &[u16]) -> PortConfig {
    let mut p = PortConfig::new(lid, 0x0002_c903_0000_0000 + u64::from(lid));
    p.lmc = lmc;
    p.pkeys = pkeys.to_vec();
    p
}

/// Changes path attributes the way software does (QS-05): RTS -> SQD, then
/// SQD -> RTS with the new values.
fn repath(net: &mut Net, node: usize, qpn: u32, mut attr: QpAttr, mask: AttrMask) {
    let now = net.now;
    let e = &mut net.nodes[node].engine;
    let sqd = QpAttr {
        state: Some(QpState::Sqd),
        ..QpAttr::default()
    };
    e.modify_qp(qpn, &sqd, AttrMask::STATE, now).expect("sqd");
    attr.state = Some(QpState::Rts);
    e.modify_qp(qpn, &attr, mask | AttrMask::STATE, now)
        .expect("rts");
}

fn pkey_index(net: &mut Net, node: usize, qpn: u32, index: u16) {
    let a = QpAttr {
        pkey_index: index,
        ..QpAttr::default()
    };
    repath(net, node, qpn, a, AttrMask::PKEY_INDEX);
}

fn write(id: u64, off: u64, lkey: u32, rkey: u32) -> SendWr {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(MEM_BASE + off, 64, lkey));
    w.remote_addr = REMOTE + off;
    w.rkey = rkey;
    w
}

/// (SLID, DLID, P_Key, opcode) of every packet put on the wire.
fn headers(net: &mut Net) -> Vec<(u16, u16, u16, Opcode)> {
    net.sniffed
        .replace(Vec::new())
        .unwrap_or_default()
        .iter()
        .filter_map(|b| PacketRepr::parse(b).ok())
        .map(|p| {
            let bth = p.transport.bth;
            (p.lrh.slid, p.lrh.dlid, bth.pkey, bth.opcode)
        })
        .collect()
}

#[test]
fn ad_05_pv_03_each_qp_sends_its_entry_and_limited_members_do_not_meet() {
    let limits = Limits {
        loss_probes: false,
        ..Limits::default()
    };
    let a = port(1, 0, &[0xffff, 0x8005, 0x0006, 0x0007]);
    let b = port(2, 0, &[0xffff, 0x0005, 0x8006, 0x0007]);
    let mut net = Net::with_ports(vec![a, b], 1 << 22, 5, limits);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    fill(&mut net, 0, MEM_BASE, 4096, 7);
    let o = ConnOpts {
        retry_cnt: 1,
        ..ConnOpts::default()
    };
    // Full (A) with limited (B), limited (A) with full (B): both talk, each
    // side's packets carrying its own entry.
    for (i, (pa, pb)) in [(0x8005, 0x0005), (0x0006, 0x8006)].into_iter().enumerate() {
        let p = connect(&mut net, 0, 1, &o);
        let idx = i as u16 + 1;
        pkey_index(&mut net, 0, p.qa, idx);
        pkey_index(&mut net, 1, p.qb, idx);
        net.sniffed = Some(Vec::new());
        let off = 0x100 * idx as u64;
        assert_eq!(
            post_wait(&mut net, 0, p.qa, p.cq_a, write(1, off, ka, kb)).status,
            WcStatus::Success
        );
        assert_eq!(
            bytes(&net, 1, REMOTE + off, 64),
            bytes(&net, 0, MEM_BASE + off, 64)
        );
        let h = headers(&mut net);
        assert!(h.iter().any(|x| x.3 == Opcode::RC_RDMA_WRITE_ONLY));
        for (slid, _, pkey, op) in h {
            let want = if slid == 1 { pa } else { pb };
            assert_eq!(pkey, want, "{op:?} from LID {slid}");
        }
    }
    assert_eq!(net.nodes[1].engine.counters().dropped(RxDrop::BadPkey), 0);
    // Limited with limited (0x0007 on both): B drops every request silently,
    // counted, and A's WRITE runs out of retries.
    let p = connect(&mut net, 0, 1, &o);
    pkey_index(&mut net, 0, p.qa, 3);
    pkey_index(&mut net, 1, p.qb, 3);
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write(1, 0x800, ka, kb)).status,
        WcStatus::RetryExcErr
    );
    assert_eq!(net.nodes[1].engine.counters().dropped(RxDrop::BadPkey), 2);
    assert!(bytes(&net, 1, REMOTE + 0x800, 64).iter().all(|&b| b == 0));
}

fn ud_qp(net: &mut Net, node: usize, gsi: bool, qkey: u32) -> (u32, u32) {
    let cq = net.nodes[node].engine.create_cq().unwrap();
    let init = qp_init(net, node, QpType::Ud, cq, qp_cap(16, 1, 0), false);
    let n = &mut net.nodes[node];
    let qpn = if gsi {
        n.engine.create_gsi_qp(init).unwrap()
    } else {
        n.engine.create_qp(init).unwrap()
    };
    let now = net.now;
    let e = &mut net.nodes[node].engine;
    let mut a = QpAttr {
        state: Some(QpState::Init),
        qkey,
        port_num: 1,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::QKEY;
    let m = if gsi { m } else { m | AttrMask::PORT };
    e.modify_qp(qpn, &a, m, now).expect("init");
    a.state = Some(QpState::Rtr);
    e.modify_qp(qpn, &a, AttrMask::STATE, now).expect("rtr");
    a.state = Some(QpState::Rts);
    e.modify_qp(qpn, &a, AttrMask::STATE | AttrMask::SQ_PSN, now)
        .expect("rts");
    (qpn, cq)
}

fn ud_send(id: u64, dlid: u16, path_bits: u8, qpn: u32, qkey: u32, lkey: u32) -> SendWr {
    let mut s = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 32, lkey));
    s.ud = Some(UdDest {
        av: AddressVector {
            dlid,
            src_path_bits: path_bits,
            ..AddressVector::default()
        },
        remote_qpn: qpn,
        remote_qkey: qkey,
        pkey_index: None,
    });
    s
}

#[test]
fn pv_03_qp1_takes_any_partition_of_the_port_table() {
    let a = port(1, 0, &[0xffff, 0x8005, 0x0006, 0x0007, 0x8009]);
    let b = port(2, 0, &[0xffff, 0x0005, 0x8006, 0x0007]);
    let mut net = Net::with_ports(vec![a, b], 1 << 22, 6, Limits::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    // B's QP1 sits at P_Key index 0 (0xFFFF), as ib_core sets it.
    let (gsi, gsi_cq) = ud_qp(&mut net, 1, true, GSI_QKEY);
    assert_eq!(gsi, 1);
    for id in 0..8 {
        let r = RecvWr {
            wr_id: id,
            sges: sge(REMOTE + id * 0x100, 0x100, kb),
        };
        net.nodes[1].engine.post_recv(gsi, r).unwrap();
    }
    // A Q_Key with bit 31 set in a WR is replaced by the QP's (controlled
    // Q_Keys): the sender holds the GSI's, as a QP1 does.
    let (qa, cq_a) = ud_qp(&mut net, 0, false, GSI_QKEY);
    // From each of A's partitions in turn: 0x8005 and 0x0006 meet B's entries
    // 1 and 2 and arrive, reported at that index (what the GSI answers in);
    // 0x0007 is limited on both sides and 0x8009 not in B's table: dropped.
    for (idx, arrives) in [
        (1u16, Some(1u16)),
        (2, Some(2)),
        (3, None),
        (4, None),
        (0, Some(0)),
    ] {
        let before = net.nodes[1].engine.counters().dropped(RxDrop::BadPkey);
        pkey_index(&mut net, 0, qa, idx);
        assert_eq!(
            post_wait(
                &mut net,
                0,
                qa,
                cq_a,
                ud_send(u64::from(idx), 2, 0, 1, GSI_QKEY, ka)
            )
            .status,
            WcStatus::Success
        );
        net.run_until(10_000, |_| false);
        let got = net.poll(1, gsi_cq);
        let dropped = net.nodes[1].engine.counters().dropped(RxDrop::BadPkey) - before;
        match arrives {
            Some(i) => {
                let c = got.unwrap_or_else(|| {
                    panic!(
                        "index {idx}: nothing arrived: {:?}",
                        net.nodes[1].engine.counters()
                    )
                });
                assert_eq!((c.status, c.pkey_index), (WcStatus::Success, i));
                assert_eq!(dropped, 0);
            }
            None => {
                assert!(got.is_none(), "index {idx}: {got:?}");
                assert_eq!(dropped, 1, "index {idx}");
            }
        }
    }
}

#[test]
fn ad_01_path_bits_pick_the_slid_and_every_lid_of_the_port_is_taken() {
    // A owns LIDs 8..=11 (LMC 2), B owns 12..=13 (LMC 1).
    let a = port(8, 2, &[0xffff]);
    let b = port(12, 1, &[0xffff]);
    let mut net = Net::with_ports(vec![a, b], 1 << 22, 7, Limits::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    fill(&mut net, 0, MEM_BASE, 4096, 9);
    // RC: A -> B's LID 13 from A's LID 10; B answers from 13 to 10.
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let av = |dlid, src_path_bits| QpAttr {
        av: AddressVector {
            dlid,
            src_path_bits,
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    repath(&mut net, 0, p.qa, av(13, 2), AttrMask::AV);
    repath(&mut net, 1, p.qb, av(10, 1), AttrMask::AV);
    net.sniffed = Some(Vec::new());
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, write(1, 0, ka, kb)).status,
        WcStatus::Success
    );
    assert_eq!(bytes(&net, 1, REMOTE, 64), bytes(&net, 0, MEM_BASE, 64));
    let h = headers(&mut net);
    assert!(
        h.contains(&(10, 13, 0xffff, Opcode::RC_RDMA_WRITE_ONLY)),
        "{h:?}"
    );
    assert!(
        h.contains(&(13, 10, 0xffff, Opcode::RC_ACKNOWLEDGE)),
        "{h:?}"
    );
    assert!(
        h.iter().all(|x| matches!((x.0, x.1), (10, 13) | (13, 10))),
        "{h:?}"
    );
    // UD to each of B's LIDs; path bits above A's LMC are not A's to use
    // (0b111 -> SLID 8 | 0b11, not 8 | 0b111). B reports the SLID and its own
    // path bits.
    let (qb, cq_b) = ud_qp(&mut net, 1, false, 0x77);
    let (qa, cq_a) = ud_qp(&mut net, 0, false, 0x77);
    for (i, (dlid, bits, slid)) in [(12u16, 0u8, 8u16), (13, 7, 11), (13, 1, 9)]
        .into_iter()
        .enumerate()
    {
        let r = RecvWr {
            wr_id: i as u64,
            sges: sge(REMOTE + 0x1000, 0x100, kb),
        };
        net.nodes[1].engine.post_recv(qb, r).unwrap();
        assert_eq!(
            post_wait(
                &mut net,
                0,
                qa,
                cq_a,
                ud_send(i as u64, dlid, bits, qb, 0x77, ka)
            )
            .status,
            WcStatus::Success
        );
        let c = wait(&mut net, 1, cq_b, 1);
        assert_eq!(c[0].status, WcStatus::Success);
        assert_eq!((c[0].slid, c[0].dlid_path_bits), (slid, (dlid & 1) as u8));
    }
    assert_eq!(net.nodes[1].engine.counters().dropped(RxDrop::BadDlid), 0);
}

/// AD-05, PV-03 (IBA 11.4.1.1, C9-42): a GSI (QP1) send carries the P_Key
/// of the port table entry its work request names (Linux's
/// `ib_ud_wr.pkey_index`), not its QP's, so the GSI answers in the partition
/// a request came in: A's QP1 sends at index 1 (0x8005) and 2 (0x0006); B's
/// QP1 takes each at its matching entry (1: 0x0005, 2: 0x8006) and answers
/// at that index, which A's QP1 takes. Without an index the QP's own entry
/// goes; another UD QP ignores the WR's index; an index past the table
/// completes the WR with a local QP operation error and sends nothing.
#[test]
fn ad_05_pv_03_gsi_send_carries_the_wr_pkey_index() {
    let a = port(1, 0, &[0xffff, 0x8005, 0x0006]);
    let b = port(2, 0, &[0xffff, 0x0005, 0x8006]);
    let mut net = Net::with_ports(vec![a, b], 1 << 22, 8, Limits::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (gsi_a, cq_a) = ud_qp(&mut net, 0, true, GSI_QKEY);
    let (gsi_b, cq_b) = ud_qp(&mut net, 1, true, GSI_QKEY);
    let (ud_a, cq_ud) = ud_qp(&mut net, 0, false, GSI_QKEY);
    for (node, qp, key) in [(0, gsi_a, ka), (1, gsi_b, kb)] {
        for id in 0..8 {
            let r = RecvWr {
                wr_id: id,
                sges: sge(REMOTE + id * 0x100, 0x100, key),
            };
            net.nodes[node].engine.post_recv(qp, r).unwrap();
        }
    }
    let gsi_send = |id, dlid, lkey, pkey_index| {
        let mut w = ud_send(id, dlid, 0, 1, GSI_QKEY, lkey);
        if let Some(u) = w.ud.as_mut() {
            u.pkey_index = pkey_index;
        }
        w
    };
    // (index A names, P_Key on the wire, B's matching entry, its P_Key).
    for (idx, pkey, b_idx, b_pkey) in [(1u16, 0x8005u16, 1u16, 0x0005u16), (2, 0x0006, 2, 0x8006)] {
        net.sniffed = Some(Vec::new());
        let w = gsi_send(u64::from(idx), 2, ka, Some(idx));
        assert_eq!(
            post_wait(&mut net, 0, gsi_a, cq_a, w).status,
            WcStatus::Success
        );
        let got = wait(&mut net, 1, cq_b, 1);
        assert_eq!(
            (got[0].status, got[0].pkey_index),
            (WcStatus::Success, b_idx)
        );
        // B answers in that partition, as the MAD layer does.
        let w = gsi_send(9, 1, kb, Some(got[0].pkey_index));
        net.nodes[1].engine.post_send(gsi_b, w).unwrap();
        let got = wait(&mut net, 1, cq_b, 1);
        assert_eq!(got[0].status, WcStatus::Success);
        let got = wait(&mut net, 0, cq_a, 1);
        assert_eq!((got[0].status, got[0].pkey_index), (WcStatus::Success, idx));
        let h = headers(&mut net);
        assert_eq!(
            h,
            [
                (1, 2, pkey, Opcode::UD_SEND_ONLY),
                (2, 1, b_pkey, Opcode::UD_SEND_ONLY)
            ]
        );
    }
    // No index: the QP's own entry (0, 0xFFFF). A UD QP other than QP1:
    // its own entry whatever the WR says.
    let w = gsi_send(3, 2, ka, None);
    assert_eq!(
        post_wait(&mut net, 0, gsi_a, cq_a, w).status,
        WcStatus::Success
    );
    let w = gsi_send(4, 2, ka, Some(1));
    assert_eq!(
        post_wait(&mut net, 0, ud_a, cq_ud, w).status,
        WcStatus::Success
    );
    assert_eq!(wait(&mut net, 1, cq_b, 2).len(), 2);
    let h = headers(&mut net);
    assert_eq!(
        h.iter().map(|x| x.2).collect::<Vec<_>>(),
        [0xffff, 0xffff],
        "{h:?}"
    );
    // Past A's table of three: an error completion, nothing on the wire.
    let w = gsi_send(5, 2, ka, Some(3));
    net.nodes[0].engine.post_send(gsi_a, w).unwrap();
    let c = wait(&mut net, 0, cq_a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::LocQpOpErr));
    net.run_until(10_000, |_| false);
    assert_eq!(headers(&mut net), []);
}
