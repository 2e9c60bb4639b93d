//! Crafted packets into one engine, and two-engine scenarios, for the checks of
//! IBA 9.6 (header validation), 9.7 (PSNs, duplicates, NAKs, RNR, retries), the QP
//! state rules of ch. 10/11 and memory protection (features PV, RL, MP, QS, OP, CQ,
//! SR). Every crafted request is a [`PacketRepr`] emitted with correct CRCs and fed
//! to `handle_packet`; what the engine answers is read back with `poll_transmit`
//! and parsed, so each test asserts the exact AETH syndrome and PSN, or silence.

mod common;

use common::craft::*;
use common::*;
use transport::engine::RxDrop;
use transport::engine::{Limits, NakReason};
use transport::psn;
use transport::verbs::{
    Access, AddressVector, AttrMask, Completion, Event, Handle, QpAttr, QpCap, QpInit, QpState,
    QpType, RecvWr, SendFlags, Sge, Time, UdDest, VerbError, WcOpcode, WcStatus, WrOpcode,
};
use transport::wire::crc::{icrc_native, vcrc};
use transport::wire::opcode::Opcode;
use transport::wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, DethRepr, DropReason as WireDrop, ExtHeaders,
    LrhRepr, NakCode,
};

// ------------------------------------------------------------------ crafted: memory protection NAKs

/// MP-02, RL-12: a WRITE whose R_Key has a wrong key byte, or names no MR, gets
/// NAK Remote Access Error for its PSN (9.3.3.2, 9.7.5.2); nothing is written.
#[test]
fn mp_02_rl_12_wrong_rkey_write_naks_remote_access_error() {
    for bad in [|k: u32| k ^ 0x5a, |k: u32| k.wrapping_add(0x100 * 77)] {
        let mut b = bench();
        let e = b.epsn_b();
        let before = b.mem(B);
        let pkt = b
            .request(Opcode::RC_RDMA_WRITE_ONLY, e)
            .reth(TARGET, bad(b.kb), 16)
            .payload(&[0xab; 16])
            .bytes();
        b.inject(B, &pkt);
        assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
        assert_eq!(b.mem(B), before, "target memory unchanged");
        assert_eq!(b.naks_sent(B), 1);
        assert_eq!(
            b.naked(B, NakReason::KeyMismatch) + b.naked(B, NakReason::NoSuchKey),
            1
        );
        assert_eq!(b.total_drops(B), 0);
    }
}

/// MP-04, RL-12: a WRITE at a VA outside the MR (the R_Key's range) gets NAK
/// Remote Access Error; nothing is written.
#[test]
fn mp_04_rl_12_write_va_out_of_bounds_naks_remote_access_error() {
    let mut b = bench();
    let pd = b.net.nodes[B].pd;
    let k = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    let e = b.epsn_b();
    let before = b.mem(B);
    // Wholly past the end, and straddling the end.
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET + 4096, k, 8)
        .payload(&[1; 8])
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before);

    let mut b = bench();
    let pd = b.net.nodes[B].pd;
    let k = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    let e = b.epsn_b();
    let before = b.mem(B);
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET + 4092, k, 8)
        .payload(&[1; 8])
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before);
    assert_eq!(b.naks_sent(B), 1);
}

/// MP-04, RL-12: a multi-packet WRITE whose RETH (VA, DMALen) runs past the MR is
/// refused at its first packet: NAK Remote Access Error for that PSN, and not one
/// byte is written, though the first packet's own payload lies inside the MR.
#[test]
fn mp_04_rl_12_write_length_past_mr_naks_before_any_byte_is_written() {
    let mut b = bench();
    let pd = b.net.nodes[B].pd;
    let k = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    let e = b.epsn_b();
    let pmtu = b.o.mtu.bytes();
    let before = b.mem(B);
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_FIRST, e)
        .reth(TARGET + 2048, k, 4096)
        .payload(&vec![0xcd; pmtu])
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before, "no byte of the refused WRITE lands");
    assert_eq!(b.naked(B, NakReason::OutOfBounds), 1);
}

/// MP-04, RL-15: on UC too, a WRITE whose RETH (VA, DMALen) runs past the MR is
/// refused at its first packet (9.3.3.2): not one byte lands, nothing is sent
/// back (UC has no NAK), the drop is counted, and the message's later packets
/// are dropped with it.
#[test]
fn mp_04_rl_15_uc_write_length_past_mr_drops_before_any_byte_is_written() {
    let mut b = bench_with(ConnOpts {
        qp_type: QpType::Uc,
        ..ConnOpts::default()
    });
    let pd = b.net.nodes[B].pd;
    let k = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    let e = b.epsn_b();
    let pmtu = b.o.mtu.bytes();
    let before = b.mem(B);
    let first = b
        .request(Opcode::UC_RDMA_WRITE_FIRST, e)
        .reth(TARGET + 2048, k, 4096)
        .payload(&vec![0xcd; pmtu])
        .bytes();
    let last = b
        .request(Opcode::UC_RDMA_WRITE_LAST, psn::add(e, 1))
        .payload(&vec![0xce; pmtu])
        .bytes();
    b.inject(B, &first);
    b.inject(B, &last);
    assert!(b.drain(B).is_empty(), "UC answers nothing");
    assert!(b.mem(B) == before, "no byte of the refused WRITE lands");
    let c = b.net.nodes[B].engine.counters();
    assert_eq!(c.dropped(RxDrop::NotExpected), 1, "the first packet's drop");
    assert_eq!(c.dropped(RxDrop::UcResync), 1, "the rest of the message");
}

/// MP-04, RL-12: a READ whose DMALen runs past the MR gets NAK Remote Access
/// Error and no response data.
#[test]
fn mp_04_rl_12_read_length_past_mr_naks_remote_access_error() {
    let mut b = bench();
    let pd = b.net.nodes[B].pd;
    let k = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    let e = b.epsn_b();
    let pkt = b
        .request(Opcode::RC_RDMA_READ_REQUEST, e)
        .reth(TARGET + 4000, k, 200)
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
    assert_eq!(b.naks_sent(B), 1);
    assert_eq!(b.naked(B, NakReason::OutOfBounds), 1);
}

/// OP-07, RL-12: an ATOMIC at a VA that is not 8-byte aligned gets NAK Invalid
/// Request (9.4.5); the target is not touched.
#[test]
fn op_07_rl_12_misaligned_atomic_naks_invalid_request() {
    for op in [Opcode::RC_FETCH_ADD, Opcode::RC_COMPARE_SWAP] {
        let mut b = bench();
        let e = b.epsn_b();
        let before = b.mem(B);
        let pkt = b.request(op, e).atomic(TARGET + 4, b.kb, 0, 0x55).bytes();
        b.inject(B, &pkt);
        assert_one_nak(&b.drain(B), e, NakCode::InvalidRequest);
        assert_eq!(b.mem(B), before);
        assert_eq!(b.naks_sent(B), 1);
        assert_eq!(b.naked(B, NakReason::MisalignedAtomic), 1);
    }
}

/// MP-04, RL-12: an MR without the remote right the request needs (write, read,
/// atomic) gets NAK Remote Access Error; memory unchanged.
#[test]
fn mp_04_rl_12_mr_without_the_remote_right_naks_remote_access_error() {
    let all_but = |x: Access| Access(ALL_ACCESS.0 & !x.0);
    let cases: [(Access, Opcode); 3] = [
        (all_but(Access::REMOTE_WRITE), Opcode::RC_RDMA_WRITE_ONLY),
        (all_but(Access::REMOTE_READ), Opcode::RC_RDMA_READ_REQUEST),
        (all_but(Access::REMOTE_ATOMIC), Opcode::RC_FETCH_ADD),
    ];
    for (rights, op) in cases {
        let mut b = bench();
        let pd = b.net.nodes[B].pd;
        let k = reg(&mut b.net, B, pd, TARGET, 4096, rights);
        let e = b.epsn_b();
        let before = b.mem(B);
        let c = b.request(op, e);
        let pkt = match op {
            Opcode::RC_RDMA_WRITE_ONLY => c.reth(TARGET, k, 8).payload(&[9; 8]),
            Opcode::RC_RDMA_READ_REQUEST => c.reth(TARGET, k, 8),
            _ => c.atomic(TARGET, k, 0, 1),
        }
        .bytes();
        b.inject(B, &pkt);
        assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
        assert_eq!(b.mem(B), before, "{op:?}");
    }
}

/// MP-04, RL-12: a request for an operation the responder QP does not enable
/// (QP access flags without REMOTE_WRITE) is NAKed Invalid Request, as Linux
/// rxe does (check_op_valid); memory unchanged.
#[test]
fn mp_04_rl_12_qp_without_remote_write_naks_invalid_request() {
    let mut b = bench();
    // B's QP: remote read and atomic only (RTS -> RTS with new access flags).
    let attr = QpAttr {
        state: Some(QpState::Rts),
        access: Access(Access::REMOTE_READ.0 | Access::REMOTE_ATOMIC.0),
        ..QpAttr::default()
    };
    let now = b.net.now;
    b.net.nodes[B]
        .engine
        .modify_qp(b.p.qb, &attr, AttrMask::STATE | AttrMask::ACCESS_FLAGS, now)
        .unwrap();
    let e = b.epsn_b();
    let before = b.mem(B);
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, b.kb, 8)
        .payload(&[3; 8])
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e, NakCode::InvalidRequest);
    assert_eq!(b.mem(B), before);
}

/// MP-01, RL-12: an R_Key of an MR in another PD than the QP's is refused like a
/// bad key: NAK Remote Access Error, memory unchanged.
#[test]
fn mp_01_rl_12_rkey_of_another_pd_naks_remote_access_error() {
    let mut b = bench();
    let other = b.net.nodes[B].engine.mrs().alloc_pd().unwrap();
    let k = reg(&mut b.net, B, other, TARGET, 4096, ALL_ACCESS);
    let e = b.epsn_b();
    let before = b.mem(B);
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, k, 8)
        .payload(&[7; 8])
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before);
}

/// MP-01, MP-05: an L_Key of an MR in another PD fails the local check of a send
/// WQE: Local Protection Error, and nothing goes on the wire.
#[test]
fn mp_01_mp_05_lkey_of_another_pd_completes_with_local_protection_error() {
    let mut b = bench();
    let other = b.net.nodes[A].engine.mrs().alloc_pd().unwrap();
    let k = reg(&mut b.net, A, other, MEM_BASE, 4096, ALL_ACCESS);
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 64,
                    lkey: k,
                }],
            ),
        )
        .unwrap();
    let sent = b.drain(A);
    assert!(sent.is_empty(), "{sent:?}");
    let c = b.poll(A, b.p.cq_a).expect("completion");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::LocProtErr));
}

/// MP-02: after deregister and register, the MR index is the same but the key
/// byte is new; the old R_Key is stale: NAK Remote Access Error. The new key
/// works.
#[test]
fn mp_02_stale_key_byte_after_reregistration_is_refused() {
    let mut b = bench();
    let pd = b.net.nodes[B].pd;
    let old = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    b.net.nodes[B].engine.mrs().dereg_mr(old).unwrap();
    // A freed index comes back after the others in quarantine (MP-02): cycle
    // registrations until it does.
    let mut new = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    for _ in 0..=transport::mr::KEY_QUARANTINE {
        if transport::mr::key_index(new) == transport::mr::key_index(old) {
            break;
        }
        b.net.nodes[B].engine.mrs().dereg_mr(new).unwrap();
        new = reg(&mut b.net, B, pd, TARGET, 4096, ALL_ACCESS);
    }
    assert_eq!(transport::mr::key_index(new), transport::mr::key_index(old));
    assert_ne!(new, old);
    let e = b.epsn_b();
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, new, 4)
        .payload(&[1, 2, 3, 4])
        .bytes();
    b.inject(B, &pkt);
    assert_one_ack(&b.drain(B), e);
    assert_eq!(&b.mem(B)[off(TARGET)..off(TARGET) + 4], &[1, 2, 3, 4]);
    let before = b.mem(B);
    let e1 = psn::add(e, 1);
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e1)
        .reth(TARGET, old, 4)
        .payload(&[9; 4])
        .bytes();
    b.inject(B, &pkt);
    assert_one_nak(&b.drain(B), e1, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before);
}

// ------------------------------------------------------------------ crafted: silent drops (9.6)

/// After a silent drop nothing was consumed and ePSN did not move: the same PSN
/// is accepted next and ACKed.
fn assert_epsn_intact(b: &mut Bench, e: u32) {
    assert_eq!(b.epsn_b(), e);
    let pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, b.kb, 4)
        .payload(&[4, 3, 2, 1])
        .bytes();
    b.inject(B, &pkt);
    assert_one_ack(&b.drain(B), e);
    assert_eq!(&b.mem(B)[off(TARGET)..off(TARGET) + 4], &[4, 3, 2, 1]);
}

/// PV-03, PV-10: a P_Key that does not match the QP's partition is dropped
/// silently (C9-43): no response, memory and ePSN unchanged, BadPkey counted.
#[test]
fn pv_03_pv_10_wrong_pkey_is_silently_dropped() {
    let mut b = bench();
    let e = b.epsn_b();
    let before = b.mem(B);
    // Other partitions (full and limited member), and the invalid P_Key 0.
    for pkey in [0x8001u16, 0x7ffe, 0x0000] {
        let mut c = b
            .request(Opcode::RC_RDMA_WRITE_ONLY, e)
            .reth(TARGET, b.kb, 4)
            .payload(&[1; 4]);
        c.bth.pkey = pkey;
        b.inject(B, &c.bytes());
    }
    assert!(b.drain(B).is_empty());
    assert_eq!(b.drops(B, RxDrop::BadPkey), 3);
    assert_eq!(b.total_drops(B), 3);
    assert_eq!(b.mem(B), before);
    assert_eq!(b.naks_sent(B), 0);
    // A limited-member P_Key of the same partition is valid against a full member.
    let mut c = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, b.kb, 4)
        .payload(&[4, 3, 2, 1]);
    c.bth.pkey = 0x7fff;
    b.inject(B, &c.bytes());
    assert_one_ack(&b.drain(B), e);
}

/// PV-05, PV-10: a UD datagram whose Q_Key differs from the QP's is dropped
/// silently (C9-50): no receive WQE consumed, BadQkey counted.
#[test]
fn pv_05_pv_10_ud_wrong_qkey_is_silently_dropped() {
    let mut b = bench_with(ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    });
    b.post_recv(B, b.p.qb, 5, TARGET, 256);
    let before = b.mem(B);
    let mut c = b.request(Opcode::UD_SEND_ONLY, 0).payload(&[0x11; 32]);
    c.bth.ack_req = false;
    c.ext.deth = Some(DethRepr {
        qkey: 0x1111_1112,
        src_qp: b.p.qa,
    });
    b.inject(B, &c.bytes());
    assert!(b.drain(B).is_empty());
    assert_eq!(b.drops(B, RxDrop::BadQkey), 1);
    assert_eq!(b.poll(B, b.p.cq_b), None);
    assert_eq!(b.mem(B), before);
    // The right Q_Key is delivered into the same, unconsumed WQE.
    c.ext.deth = Some(DethRepr {
        qkey: 0x1111_1111,
        src_qp: b.p.qa,
    });
    b.inject(B, &c.bytes());
    let r = b.poll(B, b.p.cq_b).expect("receive");
    assert_eq!(
        (r.wr_id, r.status, r.byte_len, r.src_qp),
        (5, WcStatus::Success, 40 + 32, b.p.qa)
    );
}

/// PV-05: a send WR whose Q_Key has the high bit set (a controlled Q_Key) sends
/// the QP's own Q_Key from its context (C9-48..C9-51, 10.2.x); any other Q_Key
/// is sent as given.
#[test]
fn pv_05_controlled_qkey_is_taken_from_the_qp_context() {
    let mut b = bench_with(ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    });
    let av = AddressVector {
        dlid: b.lid(B),
        ..AddressVector::default()
    };
    for (id, qkey) in [(1u64, 0x8000_0000u32), (2, 0x1234_5678)] {
        let mut w = send_wr(
            id,
            WrOpcode::Send,
            vec![Sge {
                addr: MEM_BASE,
                length: 16,
                lkey: b.ka,
            }],
        );
        w.ud = Some(UdDest {
            av,
            remote_qpn: b.p.qb,
            remote_qkey: qkey,
            pkey_index: None,
        });
        b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    }
    let sent = b.drain(A);
    let qkeys: Vec<_> = sent.iter().map(|s| s.qkey).collect();
    assert_eq!(qkeys, [Some(0x1111_1111), Some(0x1234_5678)]);
}

/// PV-01: BTH:TVer other than 0 is dropped silently before the transport (C9-36);
/// the wire counter names it.
#[test]
fn pv_01_tver_not_zero_is_silently_dropped() {
    let mut b = bench();
    let e = b.epsn_b();
    let before = b.mem(B);
    let mut pkt = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, b.kb, 4)
        .payload(&[1; 4])
        .bytes();
    pkt[LrhRepr::LEN + 1] |= 0x1; // TVer = 1
    let n = pkt.len();
    let icrc = icrc_native(&pkt[..n - 6], false);
    pkt[n - 6..n - 2].copy_from_slice(&icrc.to_le_bytes());
    let v = vcrc(&pkt[..n - 2]);
    pkt[n - 2..].copy_from_slice(&v.to_le_bytes());
    b.inject(B, &pkt);
    assert!(b.drain(B).is_empty());
    assert_eq!(
        b.net.nodes[B]
            .engine
            .counters()
            .wire_drops
            .get(WireDrop::BadTver),
        1
    );
    assert_eq!(b.mem(B), before);
    assert_epsn_intact(&mut b, e);
}

/// PV-02: a DestQP naming no QP (C9-37), or a QP of another service than the
/// opcode's (C9-39), is dropped silently.
#[test]
fn pv_02_unknown_qp_or_service_mismatch_is_silently_dropped() {
    let mut b = bench();
    let e = b.epsn_b();
    let before = b.mem(B);
    let mut c = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, b.kb, 4)
        .payload(&[1; 4]);
    c.bth.dest_qp = 0x00_abcd;
    b.inject(B, &c.bytes());
    assert_eq!(b.drops(B, RxDrop::UnknownQp), 1);
    let c = b
        .request(Opcode::UC_RDMA_WRITE_ONLY, e)
        .reth(TARGET, b.kb, 4)
        .payload(&[1; 4]);
    b.inject(B, &c.bytes());
    assert_eq!(b.drops(B, RxDrop::ServiceMismatch), 1);
    assert!(b.drain(B).is_empty());
    assert_eq!(b.mem(B), before);
    assert_epsn_intact(&mut b, e);
}

/// Creates a QP on `node` (own CQ) and leaves it in Reset.
fn new_qp(net: &mut Net, node: usize, qp_type: QpType) -> (u32, Handle) {
    let n = &mut net.nodes[node];
    let cq = n.engine.create_cq().unwrap();
    let qp = n
        .engine
        .create_qp(QpInit {
            qp_type,
            pd: n.pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 64,
            },
            sq_sig_all: false,
        })
        .unwrap();
    (qp, cq)
}

fn to_init(net: &mut Net, node: usize, qpn: u32) {
    let a = QpAttr {
        state: Some(QpState::Init),
        port_num: 1,
        access: ALL_ACCESS,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    let now = net.now;
    net.nodes[node].engine.modify_qp(qpn, &a, m, now).unwrap();
}

/// QS-04, PV-02: packets to a QP in Reset or Init are dropped silently (C9-38);
/// the receive WQE posted in Init is not consumed.
#[test]
fn qs_04_pv_02_packets_to_a_qp_in_reset_or_init_are_silently_dropped() {
    let mut b = bench();
    let (q, cq) = new_qp(&mut b.net, B, QpType::Rc);
    let mut c = b.request(Opcode::RC_SEND_ONLY, 0).payload(&[5; 8]);
    c.bth.dest_qp = q;
    b.inject(B, &c.bytes());
    assert_eq!(b.drops(B, RxDrop::QpNotReceiving), 1);
    to_init(&mut b.net, B, q);
    b.net.nodes[B]
        .engine
        .post_recv(
            q,
            RecvWr {
                wr_id: 1,
                sges: vec![Sge {
                    addr: TARGET,
                    length: 64,
                    lkey: b.kb,
                }],
            },
        )
        .unwrap();
    let before = b.mem(B);
    b.inject(B, &c.bytes());
    assert_eq!(b.drops(B, RxDrop::QpNotReceiving), 2);
    assert!(b.drain(B).is_empty());
    assert_eq!(b.poll(B, cq), None);
    assert_eq!(b.mem(B), before);
    assert_eq!(b.state(B, q), QpState::Init);
    // From RTR on the same packet is processed; the first one raises
    // communication established (QS-08).
    let a = QpAttr {
        state: Some(QpState::Rtr),
        path_mtu: b.o.mtu,
        dest_qp_num: b.p.qa,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        av: AddressVector {
            dlid: b.lid(A),
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    let m = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    let now = b.net.now;
    b.net.nodes[B].engine.modify_qp(q, &a, m, now).unwrap();
    b.inject(B, &c.bytes());
    let got = b.drain(B);
    assert_eq!(
        got.iter()
            .map(|s| (s.dest_qp, s.psn, s.syndrome.map(any_credits)))
            .collect::<Vec<_>>(),
        [(b.p.qa, 0, Some(ACK))]
    );
    assert_eq!(
        b.poll(B, cq).map(|c| (c.wr_id, c.status, c.byte_len)),
        Some((1, WcStatus::Success, 8))
    );
    assert!(b.events(B).contains(&Event::CommEstablished { qpn: q }));
}

/// PV-06: for a connected QP the SLID must be the peer's LID and the DLID this
/// port's (C9-53, C9-54); a multicast SLID (C9-56) and the permissive DLID for a
/// QP other than QP0 (C9-55) are invalid. All dropped silently (C9-57).
#[test]
fn pv_06_lid_checks_silently_drop() {
    let mut b = bench();
    let e = b.epsn_b();
    let before = b.mem(B);
    let base = || {
        b.request(Opcode::RC_RDMA_WRITE_ONLY, e)
            .reth(TARGET, b.kb, 4)
            .payload(&[1; 4])
    };
    let mut pkts = Vec::new();
    let mut c = base();
    c.lrh.slid = 7; // not the peer
    pkts.push(c.bytes());
    let mut c = base();
    c.lrh.slid = 0xc001; // multicast
    pkts.push(c.bytes());
    let mut c = base();
    c.lrh.dlid = 9; // not this port
    pkts.push(c.bytes());
    let mut c = base();
    c.lrh.dlid = 0xffff; // permissive, QP is not QP0
    pkts.push(c.bytes());
    for p in &pkts {
        b.inject(B, p);
    }
    assert!(b.drain(B).is_empty());
    assert_eq!(b.drops(B, RxDrop::BadSlid), 2);
    assert_eq!(b.drops(B, RxDrop::BadDlid), 2);
    assert_eq!(b.mem(B), before);
    assert_epsn_intact(&mut b, e);
}

// ------------------------------------------------------------------ crafted: PSN and duplicates (9.7)

/// RL-03: a request ahead of ePSN gets exactly one NAK PSN Sequence Error carrying
/// the ePSN; further out-of-order requests are dropped silently until the
/// expected PSN arrives, which is executed normally.
#[test]
fn rl_03_psn_far_ahead_gets_one_sequence_nak_then_silent_drops() {
    let mut b = bench();
    let e = b.epsn_b();
    let before = b.mem(B);
    let ahead = |b: &Bench, n: u32| {
        b.request(Opcode::RC_RDMA_WRITE_ONLY, psn::add(e, n))
            .reth(TARGET, b.kb, 4)
            .payload(&[9; 4])
            .bytes()
    };
    let p = ahead(&b, 0x40_0000);
    b.inject(B, &p);
    assert_one_nak(&b.drain(B), e, NakCode::PsnSequenceError);
    for n in [5, 1, 0x7f_ffff] {
        let p = ahead(&b, n);
        b.inject(B, &p);
    }
    assert!(b.drain(B).is_empty());
    assert_eq!(b.drops(B, RxDrop::OutOfSequence), 3);
    assert_eq!(b.naks_sent(B), 1);
    assert_eq!(b.naked(B, NakReason::PsnSequence), 1);
    assert_eq!(b.mem(B), before);
    assert_eq!(
        b.state(B, b.p.qb),
        QpState::Rts,
        "a sequence error is not fatal"
    );
    assert_epsn_intact(&mut b, e);
    // After the gap closed, a new gap is NAKed again (once).
    let p = ahead(&b, 3);
    b.inject(B, &p);
    assert_one_nak(&b.drain(B), psn::add(e, 1), NakCode::PsnSequenceError);
}

/// RL-06: a duplicate ATOMIC whose PSN matches no saved atomic is dropped
/// silently (9.7.5.1.1); the target is not touched.
#[test]
fn rl_06_duplicate_atomic_with_a_psn_never_seen_is_silently_dropped() {
    let mut b = bench();
    let e = b.epsn_b();
    let before = b.mem(B);
    let pkt = b
        .request(Opcode::RC_FETCH_ADD, psn::add(e, psn::PSN_MASK - 2))
        .atomic(TARGET, b.kb, 0, 1)
        .bytes();
    b.inject(B, &pkt);
    assert!(b.drain(B).is_empty());
    assert_eq!(b.drops(B, RxDrop::UnmatchedDuplicate), 1);
    assert_eq!(b.mem(B), before);
    assert_epsn_intact(&mut b, e);
}

/// RL-04: a duplicate SEND or WRITE is ACKed again with the newest completed PSN,
/// is not executed again (no receive WQE, no memory write) and leaves ePSN alone.
#[test]
fn rl_04_duplicate_send_and_write_are_reacked_without_reexecution() {
    let mut b = bench();
    let e = b.epsn_b();
    b.post_recv(B, b.p.qb, 1, TARGET, 64);
    b.post_recv(B, b.p.qb, 2, TARGET + 0x100, 64);
    let send = b
        .request(Opcode::RC_SEND_ONLY, e)
        .payload(&[0x5e; 16])
        .bytes();
    b.inject(B, &send);
    assert_one_ack(&b.drain(B), e);
    let e1 = psn::add(e, 1);
    let write = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, e1)
        .reth(TARGET + 0x200, b.kb, 4)
        .payload(&[1, 1, 1, 1])
        .bytes();
    b.inject(B, &write);
    assert_one_ack(&b.drain(B), e1);
    let r = b.poll(B, b.p.cq_b).unwrap();
    assert_eq!((r.wr_id, r.byte_len), (1, 16));
    // The application changes the WRITE's target afterwards.
    let t = off(TARGET + 0x200);
    b.net.nodes[B].mem.bytes[t..t + 4].copy_from_slice(&[2, 2, 2, 2]);
    let before = b.mem(B);
    for dup in [&send, &write] {
        b.inject(B, dup);
        // The ACK names the newest PSN completed, not the duplicate's.
        assert_one_ack(&b.drain(B), e1);
    }
    assert_eq!(b.mem(B), before, "nothing written again");
    assert_eq!(b.poll(B, b.p.cq_b), None, "no receive WQE consumed");
    assert_eq!(b.epsn_b(), psn::add(e, 2));
    assert_eq!(b.net.nodes[B].engine.counters().duplicates_received, 2);
    assert_eq!(b.naks_sent(B), 0);
    // WQE 2 is still there for the next new SEND.
    let p = b
        .request(Opcode::RC_SEND_ONLY, psn::add(e, 2))
        .payload(&[1; 8])
        .bytes();
    b.inject(B, &p);
    assert_one_ack(&b.drain(B), psn::add(e, 2));
    assert_eq!(b.poll(B, b.p.cq_b).unwrap().wr_id, 2);
}

/// RL-05: a duplicate READ is executed again from memory as it is now, its
/// responses restart at the request's PSN, and ePSN does not move.
#[test]
fn rl_05_duplicate_read_is_reexecuted_from_memory() {
    let mut b = bench();
    let e = b.epsn_b();
    let pmtu = b.o.mtu.bytes();
    let len = pmtu + 100; // two response packets: PSNs e, e+1
    let t = off(TARGET);
    b.net.nodes[B].mem.bytes[t..t + len].fill(0xaa);
    let read = b
        .request(Opcode::RC_RDMA_READ_REQUEST, e)
        .reth(TARGET, b.kb, len as u32)
        .bytes();
    b.inject(B, &read);
    let r = b.drain(B);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].opcode, r[0].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, e)
    );
    assert_eq!(
        (r[1].opcode, r[1].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn::add(e, 1))
    );
    assert!(r.iter().all(|s| s.payload.iter().all(|x| *x == 0xaa)));
    let e2 = psn::add(e, 2);
    assert_eq!(b.epsn_b(), e2);
    b.net.nodes[B].mem.bytes[t..t + len].fill(0xbb);
    b.inject(B, &read);
    let r = b.drain(B);
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].opcode, r[0].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, e)
    );
    assert_eq!(
        (r[1].opcode, r[1].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn::add(e, 1))
    );
    assert!(
        r.iter().all(|s| s.payload.iter().all(|x| *x == 0xbb)),
        "read again from memory"
    );
    assert_eq!(b.epsn_b(), e2);
    // A retried READ for the second half only (a subset starting at response PSN
    // e+1) gets just that part.
    let tail = b
        .request(Opcode::RC_RDMA_READ_REQUEST, psn::add(e, 1))
        .reth(TARGET + pmtu as u64, b.kb, 100)
        .bytes();
    b.inject(B, &tail);
    let r = b.drain(B);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].opcode, r[0].psn, r[0].payload.len()),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn::add(e, 1), 100)
    );
    assert_eq!(b.epsn_b(), e2);
}

/// RL-06: a duplicate ATOMIC replays the saved original value and is never
/// executed again.
#[test]
fn rl_06_duplicate_atomic_replays_the_saved_result() {
    let mut b = bench();
    let e = b.epsn_b();
    let t = off(TARGET);
    b.net.nodes[B].mem.bytes[t..t + 8].copy_from_slice(&10u64.to_le_bytes());
    let fa = b
        .request(Opcode::RC_FETCH_ADD, e)
        .atomic(TARGET, b.kb, 0, 5)
        .bytes();
    b.inject(B, &fa);
    let r = b.drain(B);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].opcode, r[0].psn, r[0].orig),
        (Opcode::RC_ATOMIC_ACKNOWLEDGE, e, Some(10))
    );
    assert_eq!(b.mem(B)[t..t + 8], 15u64.to_le_bytes());
    let e1 = psn::add(e, 1);
    let cs = b
        .request(Opcode::RC_COMPARE_SWAP, e1)
        .atomic(TARGET, b.kb, 15, 99)
        .bytes();
    b.inject(B, &cs);
    let r = b.drain(B);
    assert_eq!((r[0].psn, r[0].orig), (e1, Some(15)));
    assert_eq!(b.mem(B)[t..t + 8], 99u64.to_le_bytes());
    for _ in 0..3 {
        b.inject(B, &fa);
        b.inject(B, &cs);
        let r = b.drain(B);
        let got: Vec<_> = r.iter().map(|s| (s.opcode, s.psn, s.orig)).collect();
        assert_eq!(
            got,
            [
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, e, Some(10)),
                (Opcode::RC_ATOMIC_ACKNOWLEDGE, e1, Some(15))
            ]
        );
    }
    assert_eq!(
        b.mem(B)[t..t + 8],
        99u64.to_le_bytes(),
        "never executed again"
    );
    assert_eq!(b.epsn_b(), psn::add(e, 2));
}

/// RL-09: at the requester, a response before the oldest unacknowledged PSN
/// (duplicate) or at/after the next PSN (ghost) is dropped silently and retires
/// nothing; the real ACK then completes the WQE.
#[test]
fn rl_09_ghost_and_duplicate_acks_are_dropped_at_the_requester() {
    let mut b = bench();
    let e = b.o.psn_a;
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    let sent = b.drain(A);
    assert_eq!((sent.len(), sent[0].psn), (1, e));
    let aeth = |s: AethSyndrome| ExtHeaders {
        aeth: Some(AethRepr {
            syndrome: s,
            msn: 1,
        }),
        ..Default::default()
    };
    let ghosts = [
        (Opcode::RC_ACKNOWLEDGE, psn::add(e, 1), aeth(ACK)),
        (Opcode::RC_ACKNOWLEDGE, psn::add(e, 0x1000), aeth(ACK)),
        (
            Opcode::RC_ACKNOWLEDGE,
            psn::add(e, psn::PSN_MASK),
            aeth(ACK),
        ),
        (
            Opcode::RC_ACKNOWLEDGE,
            psn::add(e, 7),
            aeth(AethSyndrome::Nak(NakCode::RemoteAccessError)),
        ),
        (
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            psn::add(e, 2),
            ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: ACK,
                    msn: 1,
                }),
                atomic_ack_eth: Some(AtomicAckEthRepr {
                    orig_remote_data: 1,
                }),
                ..Default::default()
            },
        ),
    ];
    for (op, p, ext) in ghosts {
        let pkt = b.response(op, p, ext).bytes();
        b.inject(A, &pkt);
    }
    assert_eq!(b.drops(A, RxDrop::GhostResponse), 5);
    assert_eq!(b.poll(A, b.p.cq_a), None);
    assert_eq!(b.state(A, b.p.qa), QpState::Rts);
    let pkt = b.response(Opcode::RC_ACKNOWLEDGE, e, aeth(ACK)).bytes();
    b.inject(A, &pkt);
    let c = b.poll(A, b.p.cq_a).expect("completion");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    // The same ACK again is now a duplicate.
    b.inject(A, &pkt);
    assert_eq!(b.drops(A, RxDrop::GhostResponse), 6);
    assert_eq!(b.poll(A, b.p.cq_a), None);
}

/// RL-11: a SEND that finds no receive WQE gets exactly one RNR NAK for its PSN
/// carrying the QP's minimum RNR timer; requests after it are dropped silently
/// until the retried SEND arrives, which then lands once a receive is posted.
#[test]
fn rl_11_send_without_a_receive_gets_an_rnr_nak_with_the_min_rnr_timer() {
    let mut b = bench_with(ConnOpts {
        min_rnr_timer: 14,
        ..ConnOpts::default()
    });
    let e = b.epsn_b();
    let send = b
        .request(Opcode::RC_SEND_ONLY, e)
        .payload(&[0x42; 24])
        .bytes();
    b.inject(B, &send);
    let got = b.drain(B);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].opcode, got[0].psn), (Opcode::RC_ACKNOWLEDGE, e));
    assert_eq!(
        got[0].syndrome,
        Some(AethSyndrome::RnrNak { timer_code: 14 })
    );
    assert_eq!(b.net.nodes[B].engine.counters().rnr_naks_sent, 1);
    assert_eq!(b.epsn_b(), e, "ePSN stays on the NAKed request");
    let next = b
        .request(Opcode::RC_SEND_ONLY, psn::add(e, 1))
        .payload(&[1; 4])
        .bytes();
    b.inject(B, &next);
    assert!(b.drain(B).is_empty());
    assert_eq!(b.drops(B, RxDrop::OutOfSequence), 1);
    b.post_recv(B, b.p.qb, 3, TARGET, 64);
    b.inject(B, &send);
    assert_one_ack(&b.drain(B), e);
    let r = b.poll(B, b.p.cq_b).unwrap();
    assert_eq!((r.wr_id, r.status, r.byte_len), (3, WcStatus::Success, 24));
    assert_eq!(b.mem(B)[off(TARGET)..off(TARGET) + 24], [0x42; 24]);
    assert_eq!(b.state(B, b.p.qb), QpState::Rts, "RNR is not an error");
}

/// RL-11: the requester waits the RNR timer the NAK names (IBA Table 47: code
/// 14 is 1.28 ms), not its own, before it sends the NAKed request again.
#[test]
fn rl_11_requester_waits_the_rnr_timer_the_nak_names() {
    let mut b = bench();
    let e = b.o.psn_a;
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    assert_eq!(b.drain(A).len(), 1);
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome: AethSyndrome::RnrNak { timer_code: 14 },
            msn: 0,
        }),
        ..Default::default()
    };
    b.net.now = Time(1_000);
    let pkt = b.response(Opcode::RC_ACKNOWLEDGE, e, ext).bytes();
    b.inject(A, &pkt);
    assert!(b.drain(A).is_empty(), "nothing before the RNR timer");
    // Entries armed before the NAK (the ACK timer, a loss probe) may come due
    // first and fire nothing (the engine's timer heap is lazy).
    let mut wake = b.net.nodes[A].engine.poll_timeout().expect("RNR timer");
    while wake < Time(1_000 + 1_280_000) {
        b.net.now = wake;
        b.net.nodes[A].engine.handle_timeout(wake);
        assert!(b.drain(A).is_empty(), "nothing before the RNR timer");
        wake = b.net.nodes[A].engine.poll_timeout().expect("RNR timer");
    }
    assert_eq!(wake, Time(1_000 + 1_280_000));
    b.net.now = wake;
    b.net.nodes[A].engine.handle_timeout(wake);
    let again = b.drain(A);
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].opcode, again[0].psn), (Opcode::RC_SEND_ONLY, e));
    assert_eq!(b.poll(A, b.p.cq_a), None);
}

/// RL-12, MP-05: the requester completes a WQE NAKed Invalid Request, Remote
/// Access Error or Remote Operational Error with REM_INV_REQ_ERR,
/// REM_ACCESS_ERR or REM_OP_ERR, flushes the rest, and its RC QP goes to Error;
/// a PSN Sequence Error NAK instead makes it resend from the NAKed PSN at once.
#[test]
fn rl_12_mp_05_requester_maps_each_nak_code_to_its_completion_status() {
    let cases = [
        (NakCode::InvalidRequest, WcStatus::RemInvReqErr),
        (NakCode::RemoteAccessError, WcStatus::RemAccessErr),
        (NakCode::RemoteOperationalError, WcStatus::RemOpErr),
    ];
    for (code, status) in cases {
        let mut b = bench();
        let e = b.o.psn_a;
        for id in [1, 2, 3] {
            b.net.nodes[A]
                .engine
                .post_send(
                    b.p.qa,
                    send_wr(
                        id,
                        WrOpcode::Send,
                        vec![Sge {
                            addr: MEM_BASE,
                            length: 8,
                            lkey: b.ka,
                        }],
                    ),
                )
                .unwrap();
        }
        assert_eq!(b.drain(A).len(), 3);
        // NAK for the second: the first is implicitly acknowledged.
        let ext = ExtHeaders {
            aeth: Some(AethRepr {
                syndrome: AethSyndrome::Nak(code),
                msn: 1,
            }),
            ..Default::default()
        };
        let pkt = b
            .response(Opcode::RC_ACKNOWLEDGE, psn::add(e, 1), ext)
            .bytes();
        b.inject(A, &pkt);
        let got: Vec<_> = std::iter::from_fn(|| b.poll(A, b.p.cq_a))
            .map(|c| (c.wr_id, c.status))
            .collect();
        assert_eq!(
            got,
            [
                (1, WcStatus::Success),
                (2, status),
                (3, WcStatus::WrFlushErr)
            ],
            "{code:?}"
        );
        assert_eq!(b.state(A, b.p.qa), QpState::Error);
        assert!(b.drain(A).is_empty());
    }
    let mut b = bench();
    let e = b.o.psn_a;
    for id in [1, 2, 3] {
        b.net.nodes[A]
            .engine
            .post_send(
                b.p.qa,
                send_wr(
                    id,
                    WrOpcode::Send,
                    vec![Sge {
                        addr: MEM_BASE,
                        length: 8,
                        lkey: b.ka,
                    }],
                ),
            )
            .unwrap();
    }
    assert_eq!(b.drain(A).len(), 3);
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome: AethSyndrome::Nak(NakCode::PsnSequenceError),
            msn: 1,
        }),
        ..Default::default()
    };
    let pkt = b
        .response(Opcode::RC_ACKNOWLEDGE, psn::add(e, 1), ext)
        .bytes();
    b.inject(A, &pkt);
    let got: Vec<_> = std::iter::from_fn(|| b.poll(A, b.p.cq_a))
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(got, [(1, WcStatus::Success)]);
    let psns: Vec<_> = b.drain(A).iter().map(|s| s.psn).collect();
    assert_eq!(
        psns,
        [psn::add(e, 1), psn::add(e, 1), psn::add(e, 2)],
        "go back to the NAKed PSN (its first packet twice, issue 14)"
    );
    assert_eq!(b.state(A, b.p.qa), QpState::Rts);
}

// ------------------------------------------------------------------ two engines: RNR and retries

/// RL-11: a SEND that finds no receive WQE gets RNR NAKs (for its PSN, with the
/// responder's minimum RNR timer); once a receive is posted the retried SEND
/// lands and both sides complete successfully.
#[test]
fn rl_11_rnr_naks_until_a_receive_is_posted_then_the_send_succeeds() {
    let mut b = bench(); // rnr_retry 7: infinite
    let t = off(MEM_BASE);
    b.net.nodes[A].mem.bytes[t..t + 32].fill(0x77);
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 32,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    let done = b.net.run_until(100_000, |n| {
        n.nodes[B].engine.counters().rnr_naks_sent >= 10
    });
    assert!(done);
    assert_eq!(b.poll(A, b.p.cq_a), None);
    assert_eq!(b.poll(B, b.p.cq_b), None);
    b.post_recv(B, b.p.qb, 9, TARGET, 64);
    let (c, _) = run_for_cqe(&mut b.net, B, b.p.cq_b);
    assert_eq!((c.wr_id, c.status, c.byte_len), (9, WcStatus::Success, 32));
    let (c, _) = run_for_cqe(&mut b.net, A, b.p.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    assert_eq!(b.mem(B)[off(TARGET)..off(TARGET) + 32], [0x77; 32]);
    assert!(b.net.nodes[A].engine.counters().rnr_naks_received >= 10);
}

/// RL-11: with RNR retry count 2, the third RNR NAK completes the WQE with
/// RNR_RETRY_EXC_ERR and the RC QP goes to Error.
#[test]
fn rl_11_rnr_retry_exhausted_completes_with_rnr_retry_exc_err() {
    let mut b = bench_with(ConnOpts {
        rnr_retry: 2,
        ..ConnOpts::default()
    });
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 32,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    let (c, _) = run_for_cqe(&mut b.net, A, b.p.cq_a);
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RnrRetryExcErr));
    assert_eq!(b.net.nodes[A].engine.counters().rnr_naks_received, 3);
    assert_eq!(b.net.nodes[B].engine.counters().rnr_naks_sent, 3);
    assert_eq!(b.state(A, b.p.qa), QpState::Error);
    assert_eq!(b.poll(B, b.p.cq_b), None);
}

/// RL-10: with the peer gone (its QP destroyed: every request is dropped), the
/// requester retries `retry_cnt` times, one local ACK timeout apart, and
/// completes with RETRY_EXC_ERR exactly timeout x (retry count + 1) after the
/// first send; the QP goes to Error. Driven by hand on the timer so that the
/// times are exact.
fn peer_gone(loss_probes: bool) -> (Bench, Vec<u64>, Completion, u64, u64) {
    let o = ConnOpts {
        timeout: 10,
        retry_cnt: 3,
        ..ConnOpts::default()
    };
    let limits = Limits {
        loss_probes,
        ..Limits::default()
    };
    let mut b = bench_limits(o, limits);
    b.net.nodes[B].engine.destroy_qp(b.p.qb).unwrap();
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 32,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    let t0 = b.net.now;
    let timeout_ns = 4096u64 << o.timeout; // 4.096 us * 2^timeout (IBA 11.2.4.2)
    let mut sent_at = Vec::new();
    let done = loop {
        let mut buf = vec![0u8; 8192];
        let now = b.net.now;
        loop {
            let n = &mut b.net.nodes[A];
            let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) else {
                break;
            };
            let s = seen(&buf[..len]);
            assert_eq!(
                (s.opcode, s.psn),
                (Opcode::RC_SEND_ONLY, o.psn_a),
                "the same request again"
            );
            sent_at.push(now.0 - t0.0);
            b.inject(B, &buf[..len]);
        }
        if let Some(c) = b.poll(A, b.p.cq_a) {
            break (c, now);
        }
        let Some(t) = b.net.nodes[A].engine.poll_timeout() else {
            panic!("no timer and no completion")
        };
        b.net.now = t;
        b.net.nodes[A].engine.handle_timeout(t);
    };
    let (c, t) = done;
    (b, sent_at, c, t.0 - t0.0, timeout_ns)
}

/// RL-10 without loss probes: the requester retries `retry_cnt` times, one local
/// ACK timeout apart, and completes with RETRY_EXC_ERR exactly timeout x (retry
/// count + 1) after the first send; the QP goes to Error.
#[test]
fn rl_10_retry_exhausted_with_the_peer_gone_after_timeout_times_retry_count_plus_one() {
    let (b, sent_at, c, t, timeout_ns) = peer_gone(false);
    let o = b.o;
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RetryExcErr));
    assert_eq!(
        sent_at,
        [0, timeout_ns, 2 * timeout_ns, 3 * timeout_ns],
        "first send and retry_cnt retries"
    );
    assert_eq!(t, timeout_ns * (u64::from(o.retry_cnt) + 1));
    let ca = b.net.nodes[A].engine.counters();
    assert_eq!((ca.timeouts, ca.retransmits, ca.probes), (4, 3, 0));
    assert_eq!(b.drops(B, RxDrop::UnknownQp), 4);
    assert_eq!(b.state(A, b.p.qa), QpState::Error);
    assert_eq!(b.net.nodes[A].engine.poll_timeout(), None);
}

/// RL-10 with loss probes (issue 14): probes go between the retries, backing
/// off, but they are not retries. The retries go at the same times, the QP
/// fails at the same time with RETRY_EXC_ERR, and the counters keep probes
/// apart from timeouts and retransmissions.
#[test]
fn rl_10_loss_probes_are_not_retries_and_the_peer_gone_fails_at_the_same_time() {
    let (b, sent_at, c, t, timeout_ns) = peer_gone(true);
    let o = b.o;
    assert_eq!((c.wr_id, c.status), (1, WcStatus::RetryExcErr));
    assert_eq!(t, timeout_ns * (u64::from(o.retry_cnt) + 1));
    for k in 0..=3 {
        assert!(
            sent_at.contains(&(k * timeout_ns)),
            "retry {k}: {sent_at:?}"
        );
    }
    let ca = b.net.nodes[A].engine.counters();
    assert_eq!(
        ca.timeouts, 4,
        "retry_cnt + 1 ACK timeouts, as without probes"
    );
    assert!(ca.probes > 0, "probes went between the retries");
    // Each probe timeout sent the request once: a tail probe, or (the one
    // after an unanswered tail probe) a go-back, counted as a retransmission
    // besides the three the retries made.
    let go_backs = ca.retransmits - 3;
    assert_eq!(sent_at.len() as u64, 4 + ca.probes, "{sent_at:?}");
    assert!(
        go_backs > 0 && go_backs < ca.probes,
        "{go_backs} of {}",
        ca.probes
    );
    // Before the first retry: the first send, then probes at growing gaps.
    let first: Vec<u64> = sent_at
        .iter()
        .copied()
        .filter(|&s| s < timeout_ns)
        .collect();
    let gaps: Vec<u64> = first.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 2, "{sent_at:?}");
    assert!(gaps.windows(2).all(|g| g[1] > g[0]), "{sent_at:?}");
    assert_eq!(b.drops(B, RxDrop::UnknownQp), 4 + ca.probes);
    assert_eq!(b.state(A, b.p.qa), QpState::Error);
    assert_eq!(b.net.nodes[A].engine.poll_timeout(), None);
}

// ------------------------------------------------------------------ QP states

/// QS-03: Post Send is an immediate error in Reset, Init and RTR; Post Receive is
/// one in Reset only. Refused posts leave no completion.
#[test]
fn qs_03_posting_rules_in_reset_init_and_rtr() {
    let mut b = bench();
    let (q, cq) = new_qp(&mut b.net, A, QpType::Rc);
    let ka = b.ka;
    let post = |b: &mut Bench| {
        let e = &mut b.net.nodes[A].engine;
        let s = e.post_send(
            q,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: ka,
                }],
            ),
        );
        let r = e.post_recv(
            q,
            RecvWr {
                wr_id: 2,
                sges: vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: ka,
                }],
            },
        );
        (s, r)
    };
    assert_eq!(
        post(&mut b),
        (Err(VerbError::InvalidWr), Err(VerbError::InvalidWr))
    );
    to_init(&mut b.net, A, q);
    assert_eq!(post(&mut b), (Err(VerbError::InvalidWr), Ok(())));
    let o = b.o;
    let lb = b.lid(B);
    let (qb2, _) = new_qp(&mut b.net, B, QpType::Rc);
    let a = QpAttr {
        state: Some(QpState::Rtr),
        path_mtu: o.mtu,
        dest_qp_num: qb2,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        av: AddressVector {
            dlid: lb,
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    let m = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    let now = b.net.now;
    b.net.nodes[A].engine.modify_qp(q, &a, m, now).unwrap();
    assert_eq!(post(&mut b), (Err(VerbError::InvalidWr), Ok(())));
    assert_eq!(
        b.net.nodes[A].engine.cq_len(cq),
        0,
        "refused posts complete nothing"
    );
    assert!(b.drain(A).is_empty());
}

/// QS-06: a UC send error completes that WQE in error, flushes the later ones,
/// puts the QP in SQE; its RQ keeps receiving; Modify QP SQE -> RTS restores
/// sending.
#[test]
fn qs_06_uc_send_error_enters_sqe_flushes_later_wqes_and_the_rq_keeps_working() {
    let mut b = bench_with(ConnOpts {
        qp_type: QpType::Uc,
        ..ConnOpts::default()
    });
    b.post_recv(A, b.p.qa, 50, MEM_BASE + 0x2000, 64);
    let bad = b.ka ^ 0x33;
    let e = &mut b.net.nodes[A].engine;
    e.post_send(
        b.p.qa,
        send_wr(
            1,
            WrOpcode::Send,
            vec![Sge {
                addr: MEM_BASE,
                length: 8,
                lkey: bad,
            }],
        ),
    )
    .unwrap();
    e.post_send(
        b.p.qa,
        send_wr(
            2,
            WrOpcode::Send,
            vec![Sge {
                addr: MEM_BASE,
                length: 8,
                lkey: b.ka,
            }],
        ),
    )
    .unwrap();
    let log = pump(&mut b.net);
    assert!(log.is_empty(), "nothing sent: {log:?}");
    let c1 = b.poll(A, b.p.cq_a).unwrap();
    let c2 = b.poll(A, b.p.cq_a).unwrap();
    assert_eq!((c1.wr_id, c1.status), (1, WcStatus::LocProtErr));
    assert_eq!((c2.wr_id, c2.status), (2, WcStatus::WrFlushErr));
    assert_eq!(b.state(A, b.p.qa), QpState::Sqe);
    // The RQ of the QP in SQE still receives.
    b.net.nodes[B]
        .engine
        .post_send(
            b.p.qb,
            send_wr(
                3,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 20,
                    lkey: b.kb,
                }],
            ),
        )
        .unwrap();
    pump(&mut b.net);
    assert_eq!(
        b.poll(B, b.p.cq_b).map(|c| (c.wr_id, c.status)),
        Some((3, WcStatus::Success))
    );
    let r = b.poll(A, b.p.cq_a).expect("receive in SQE");
    assert_eq!(
        (r.wr_id, r.status, r.byte_len, r.opcode),
        (50, WcStatus::Success, 20, WcOpcode::Recv)
    );
    // Back to RTS, and sending works again.
    let now = b.net.now;
    let a = QpAttr {
        state: Some(QpState::Rts),
        ..QpAttr::default()
    };
    b.net.nodes[A]
        .engine
        .modify_qp(b.p.qa, &a, AttrMask::STATE, now)
        .unwrap();
    b.post_recv(B, b.p.qb, 60, TARGET, 64);
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                4,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    pump(&mut b.net);
    assert_eq!(
        b.poll(A, b.p.cq_a).map(|c| (c.wr_id, c.status)),
        Some((4, WcStatus::Success))
    );
    let r = b.poll(B, b.p.cq_b).unwrap();
    assert_eq!((r.wr_id, r.status), (60, WcStatus::Success));
}

/// QS-06: a UD send error (message longer than the port MTU: Local Length Error)
/// also goes to SQE, and the UD RQ keeps working.
#[test]
fn qs_06_ud_send_error_enters_sqe_and_the_rq_keeps_working() {
    let mut b = bench_with(ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    });
    b.post_recv(A, b.p.qa, 50, MEM_BASE + 0x8000, 256);
    let av = AddressVector {
        dlid: b.lid(B),
        ..AddressVector::default()
    };
    let mut w = send_wr(
        1,
        WrOpcode::Send,
        vec![Sge {
            addr: MEM_BASE,
            length: 4097,
            lkey: b.ka,
        }],
    );
    w.ud = Some(UdDest {
        av,
        remote_qpn: b.p.qb,
        remote_qkey: 0x1111_1111,
        pkey_index: None,
    });
    b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    assert!(pump(&mut b.net).is_empty());
    assert_eq!(
        b.poll(A, b.p.cq_a).map(|c| (c.wr_id, c.status)),
        Some((1, WcStatus::LocLenErr))
    );
    assert_eq!(b.state(A, b.p.qa), QpState::Sqe);
    let mut w = send_wr(
        2,
        WrOpcode::Send,
        vec![Sge {
            addr: MEM_BASE,
            length: 10,
            lkey: b.kb,
        }],
    );
    w.ud = Some(UdDest {
        av: AddressVector {
            dlid: b.lid(A),
            ..av
        },
        remote_qpn: b.p.qa,
        remote_qkey: 0x1111_1111,
        pkey_index: None,
    });
    b.net.nodes[B].engine.post_send(b.p.qb, w).unwrap();
    pump(&mut b.net);
    let r = b.poll(A, b.p.cq_a).expect("UD receive in SQE");
    assert_eq!(
        (r.wr_id, r.status, r.byte_len, r.src_qp),
        (50, WcStatus::Success, 50, b.p.qb)
    );
}

/// QS-07: Modify QP to Error completes every outstanding send and receive WQE
/// with WR_FLUSH_ERR; WQEs posted in Error are flushed at once; inbound packets
/// are dropped.
#[test]
fn qs_07_error_flushes_outstanding_and_newly_posted_wqes() {
    let mut b = bench();
    b.post_recv(A, b.p.qa, 10, MEM_BASE + 0x1000, 64);
    b.post_recv(A, b.p.qa, 11, MEM_BASE + 0x1100, 64);
    let mut s = send_wr(
        20,
        WrOpcode::Send,
        vec![Sge {
            addr: MEM_BASE,
            length: 8,
            lkey: b.ka,
        }],
    );
    s.flags = SendFlags::default(); // unsignaled: flushed WQEs complete anyway
    b.net.nodes[A].engine.post_send(b.p.qa, s).unwrap();
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                21,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    let now = b.net.now;
    let a = QpAttr {
        state: Some(QpState::Error),
        ..QpAttr::default()
    };
    b.net.nodes[A]
        .engine
        .modify_qp(b.p.qa, &a, AttrMask::STATE, now)
        .unwrap();
    let got: Vec<_> = std::iter::from_fn(|| b.poll(A, b.p.cq_a))
        .map(|c| (c.wr_id, c.status, c.opcode))
        .collect();
    let f = WcStatus::WrFlushErr;
    assert_eq!(
        got,
        [
            (20, f, WcOpcode::Send),
            (21, f, WcOpcode::Send),
            (10, f, WcOpcode::Recv),
            (11, f, WcOpcode::Recv)
        ]
    );
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                22,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    b.post_recv(A, b.p.qa, 12, MEM_BASE + 0x1200, 64);
    let got: Vec<_> = std::iter::from_fn(|| b.poll(A, b.p.cq_a))
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(got, [(22, f), (12, f)]);
    assert!(b.drain(A).is_empty());
    // Inbound requests to the QP in Error are dropped silently.
    let mut c = b.request(Opcode::RC_SEND_ONLY, b.o.psn_b).payload(&[1; 4]);
    c.bth.dest_qp = b.p.qa;
    c.lrh = LrhRepr {
        vl: 0,
        sl: 0,
        dlid: b.lid(A),
        slid: b.lid(B),
    };
    b.inject(A, &c.bytes());
    assert_eq!(b.drops(A, RxDrop::QpNotReceiving), 1);
    assert!(b.drain(A).is_empty());
}

// ------------------------------------------------------------------ CQs and SRQs

/// CQ-01: the engine stages every completion it produces, in order, for the
/// caller to take: its CQ has no depth to overflow and raises no CQ event. A
/// CQ's depth, arming and overflow are its ring's (ARCHITECTURE.md §4 "who owns
/// what"): CQ-03 is asserted by device/tests/datapath.rs
/// (`datapath_cq_03_overflow_stops_the_cq_and_raises_cq_error`), CQ-02 there
/// and by tests/tests/traffic.rs.
#[test]
fn cq_01_the_engine_stages_every_completion_in_order_and_raises_no_cq_event() {
    let mut net = Net::new(2, MEM_LEN, 9);
    let ka = net.reg_all(A, ALL_ACCESS);
    let kb = net.reg_all(B, ALL_ACCESS);
    let o = ConnOpts::default();
    let (qa, _) = new_qp(&mut net, A, QpType::Rc);
    let (qb, cq) = new_qp(&mut net, B, QpType::Rc);
    bring_up(&mut net, A, qa, &o, 2, qb, o.psn_a, o.psn_b);
    bring_up(&mut net, B, qb, &o, 1, qa, o.psn_b, o.psn_a);
    for i in 0..40 {
        net.nodes[B]
            .engine
            .post_recv(
                qb,
                RecvWr {
                    wr_id: i,
                    sges: vec![Sge {
                        addr: TARGET + i * 0x100,
                        length: 64,
                        lkey: kb,
                    }],
                },
            )
            .unwrap();
        let mut s = send_wr(
            100 + i,
            WrOpcode::Send,
            vec![Sge {
                addr: MEM_BASE,
                length: 8,
                lkey: ka,
            }],
        );
        s.flags = SendFlags::default();
        net.nodes[A].engine.post_send(qa, s).unwrap();
    }
    pump(&mut net);
    let e = &mut net.nodes[B].engine;
    assert_eq!(e.cq_len(cq), 40);
    assert_eq!(e.ready_cqs().collect::<Vec<_>>(), [cq]);
    let events: Vec<_> = std::iter::from_fn(|| e.poll_event()).collect();
    assert!(events.is_empty(), "{events:?}");
    let ids: Vec<_> = std::iter::from_fn(|| e.poll_cq(cq))
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(ids, (0..40).collect::<Vec<_>>());
    assert_eq!(e.ready_cqs().count(), 0, "a drained CQ is not ready");
}

/// OP-10: the requester sets SE on the last packet of a solicited message only,
/// and the responder's completion says it was solicited: what a CQ armed for
/// solicited completions (CQ-02, the device's CQ ring:
/// device/tests/datapath.rs `datapath_cq_02_*`, tests/tests/traffic.rs)
/// decides on.
#[test]
fn op_10_se_on_the_last_packet_of_a_solicited_message_and_in_its_completion() {
    let mut b = bench();
    for i in 0..3 {
        b.post_recv(B, b.p.qb, i, TARGET + i * 0x1000, 4096);
    }
    let cq = b.p.cq_b;
    let plain = send_wr(
        1,
        WrOpcode::Send,
        vec![Sge {
            addr: MEM_BASE,
            length: 100,
            lkey: b.ka,
        }],
    );
    b.net.nodes[A].engine.post_send(b.p.qa, plain).unwrap();
    pump(&mut b.net);
    assert!(!b.poll(B, cq).unwrap().solicited);
    let mut sol = send_wr(
        2,
        WrOpcode::Send,
        vec![Sge {
            addr: MEM_BASE,
            length: 2500,
            lkey: b.ka,
        }],
    );
    sol.flags = SendFlags(SendFlags::SIGNALED.0 | SendFlags::SOLICITED.0);
    b.net.nodes[A].engine.post_send(b.p.qa, sol).unwrap();
    let log = pump(&mut b.net);
    let se: Vec<_> = log
        .iter()
        .filter(|(f, _)| *f == A)
        .map(|(_, s)| (s.opcode, s.se))
        .collect();
    assert_eq!(
        se,
        [
            (Opcode::RC_SEND_FIRST, false),
            (Opcode::RC_SEND_MIDDLE, false),
            (Opcode::RC_SEND_LAST, true)
        ]
    );
    let r = b.poll(B, cq).unwrap();
    assert!(r.solicited);
    let plain = send_wr(
        3,
        WrOpcode::Send,
        vec![Sge {
            addr: MEM_BASE,
            length: 10,
            lkey: b.ka,
        }],
    );
    b.net.nodes[A].engine.post_send(b.p.qa, plain).unwrap();
    pump(&mut b.net);
    assert!(!b.poll(B, cq).unwrap().solicited);
    assert!(b.poll(B, cq).is_none());
}

/// SR-01: an SRQ shared by a QP hands out WQEs in order; the limit event fires
/// once when fewer WQEs than the limit remain, and the limit resets to 0.
#[test]
fn sr_01_srq_limit_event_fires_once_and_disarms() {
    let mut net = Net::new(2, MEM_LEN, 11);
    let ka = net.reg_all(A, ALL_ACCESS);
    let kb = net.reg_all(B, ALL_ACCESS);
    let pd = net.nodes[B].pd;
    let srq = net.nodes[B].engine.create_srq(pd, 16, 2, 0).unwrap();
    for i in 0..4 {
        net.nodes[B]
            .engine
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: i,
                    sges: vec![Sge {
                        addr: TARGET + i * 0x100,
                        length: 64,
                        lkey: kb,
                    }],
                },
            )
            .unwrap();
    }
    net.nodes[B].engine.modify_srq_limit(srq, 2).unwrap();
    let p = connect(
        &mut net,
        A,
        B,
        &ConnOpts {
            srq: [None, Some(srq)],
            ..ConnOpts::default()
        },
    );
    let limit_events = |net: &mut Net| {
        let e = &mut net.nodes[B].engine;
        std::iter::from_fn(|| e.poll_event())
            .filter(|v| *v == Event::SrqLimitReached { srq })
            .count()
    };
    let mut fired = Vec::new();
    for i in 0..4u64 {
        net.nodes[A]
            .engine
            .post_send(
                p.qa,
                send_wr(
                    i,
                    WrOpcode::Send,
                    vec![Sge {
                        addr: MEM_BASE,
                        length: 8,
                        lkey: ka,
                    }],
                ),
            )
            .unwrap();
        pump(&mut net);
        fired.push(limit_events(&mut net));
    }
    // 4 -> 3 -> 2 left: not below 2; -> 1: below, fires; -> 0: disarmed.
    assert_eq!(fired, [0, 0, 1, 0]);
    assert_eq!(net.nodes[B].engine.query_srq(srq).unwrap(), (0, 0));
    let ids: Vec<_> = std::iter::from_fn(|| net.poll(B, p.cq_b))
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(ids, [0, 1, 2, 3]);
}

// ------------------------------------------------------------------ completion statuses

/// MP-05: the completion statuses of protection and length errors, end to end:
/// Local Protection Error for a bad L_Key, Remote Access Error for a bad R_Key,
/// Local Length Error at the responder (receive buffer too small) seen as Remote
/// Invalid Request at the requester, and Local Protection Error for a READ into
/// an MR without local write.
#[test]
fn mp_05_protection_and_length_errors_complete_with_their_statuses() {
    // Bad L_Key.
    let mut b = bench();
    let bad = b.ka ^ 0x01;
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 8,
                    lkey: bad,
                }],
            ),
        )
        .unwrap();
    pump(&mut b.net);
    assert_eq!(
        b.poll(A, b.p.cq_a).map(|c| (c.wr_id, c.status)),
        Some((1, WcStatus::LocProtErr))
    );
    assert_eq!(b.state(A, b.p.qa), QpState::Error);

    // Bad R_Key.
    let mut b = bench();
    let mut w = send_wr(
        2,
        WrOpcode::RdmaWrite,
        vec![Sge {
            addr: MEM_BASE,
            length: 8,
            lkey: b.ka,
        }],
    );
    w.remote_addr = TARGET;
    w.rkey = b.kb ^ 0x01;
    let before = b.mem(B);
    b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    pump(&mut b.net);
    assert_eq!(
        b.poll(A, b.p.cq_a).map(|c| (c.wr_id, c.status)),
        Some((2, WcStatus::RemAccessErr))
    );
    assert_eq!(b.mem(B), before);

    // Receive buffer too small.
    let mut b = bench();
    b.post_recv(B, b.p.qb, 7, TARGET, 16);
    b.net.nodes[A]
        .engine
        .post_send(
            b.p.qa,
            send_wr(
                3,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: 100,
                    lkey: b.ka,
                }],
            ),
        )
        .unwrap();
    let log = pump(&mut b.net);
    assert!(log
        .iter()
        .any(|(f, s)| *f == B && s.syndrome == Some(AethSyndrome::Nak(NakCode::InvalidRequest))));
    assert_eq!(
        b.poll(B, b.p.cq_b).map(|c| (c.wr_id, c.status)),
        Some((7, WcStatus::LocLenErr))
    );
    assert_eq!(
        b.poll(A, b.p.cq_a).map(|c| (c.wr_id, c.status)),
        Some((3, WcStatus::RemInvReqErr))
    );

    // READ into an MR without local write.
    let mut b = bench();
    let pd = b.net.nodes[A].pd;
    let ro = reg(&mut b.net, A, pd, MEM_BASE + 0x8000, 4096, Access(0));
    let mut w = send_wr(
        4,
        WrOpcode::RdmaRead,
        vec![Sge {
            addr: MEM_BASE + 0x8000,
            length: 8,
            lkey: ro,
        }],
    );
    w.remote_addr = TARGET;
    w.rkey = b.kb;
    let before = b.mem(A);
    b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    pump(&mut b.net);
    assert_eq!(
        b.poll(A, b.p.cq_a).map(|c| (c.wr_id, c.status)),
        Some((4, WcStatus::LocProtErr))
    );
    assert_eq!(b.mem(A), before);
}

/// IBA 1.5 MPE: an ATOMIC WRITE whose RETH length or payload is not 8 bytes
/// is an Invalid Request; a misaligned one too; memory unchanged.
#[test]
fn mpe_malformed_atomic_write_naks_invalid_request() {
    let cases: [(u64, u32, &[u8]); 3] = [
        (TARGET, 4, &[1; 8]),
        (TARGET, 8, &[1; 4]),
        (TARGET + 4, 8, &[1; 8]),
    ];
    for (va, dma_len, payload) in cases {
        let mut b = bench();
        let e = b.epsn_b();
        let before = b.mem(B);
        let pkt = b
            .request(Opcode::RC_ATOMIC_WRITE, e)
            .reth(va, b.kb, dma_len)
            .payload(payload)
            .bytes();
        b.inject(B, &pkt);
        assert_one_nak(&b.drain(B), e, NakCode::InvalidRequest);
        assert_eq!(b.mem(B), before, "va {va:#x} len {dma_len}");
    }
}

/// IBA 1.5 MPE, RL-06: a duplicate ATOMIC WRITE is answered again (an empty
/// RDMA READ Response Only) and never stored again.
#[test]
fn mpe_duplicate_atomic_write_is_answered_not_reexecuted() {
    let mut b = bench();
    let e = b.epsn_b();
    let pkt = b
        .request(Opcode::RC_ATOMIC_WRITE, e)
        .reth(TARGET, b.kb, 8)
        .payload(&7u64.to_le_bytes())
        .bytes();
    b.inject(B, &pkt);
    let got = b.drain(B);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].opcode, got[0].psn, got[0].payload.len()),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, e, 0)
    );
    let at = (TARGET - MEM_BASE) as usize;
    assert_eq!(b.mem(B)[at..at + 8], 7u64.to_le_bytes());
    // Something else stores there; the duplicate must not undo it.
    b.net.nodes[B].mem.bytes[at..at + 8].copy_from_slice(&9u64.to_le_bytes());
    b.inject(B, &pkt);
    let got = b.drain(B);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].opcode, got[0].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, e)
    );
    assert_eq!(b.mem(B)[at..at + 8], 9u64.to_le_bytes());
}

// ------------------------------------------------------------------ crafted: responder state a peer can grow

/// RL-07 (IBA 9.4.4, 9.4.5; seed 000 responder resources): the requester keeps
/// its unacknowledged READ/ATOMIC requests within the negotiated
/// max_dest_rd_atomic; a request beyond it, while the earlier responses are
/// still unsent, is NAKed Invalid Request unexecuted (the QP fails, class B
/// of 9.9.2) instead of evicting a saved resource whose response is queued.
/// Within the depth, taken one at a time, READs never run out of resources.
#[test]
fn rl_07_read_atomic_beyond_max_dest_rd_atomic_naks_invalid_request() {
    let mut b = bench();
    let e = b.epsn_b();
    let depth = u32::from(b.o.max_rd_atomic);
    // Within the depth, each response sent before the next request: the FIFO
    // recycles its oldest entry, any number of times (RL-07).
    for i in 0..3 * depth {
        let read = b
            .request(Opcode::RC_RDMA_READ_REQUEST, psn::add(e, i))
            .reth(TARGET, b.kb, 8)
            .bytes();
        b.inject(B, &read);
        let r = b.drain(B);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    }
    let e = psn::add(e, 3 * depth);
    let t = off(TARGET + 0x100);
    b.net.nodes[B].mem.bytes[t..t + 8].copy_from_slice(&7u64.to_le_bytes());
    // depth READs whose responses are not sent yet, then one ATOMIC more.
    for i in 0..depth {
        let read = b
            .request(Opcode::RC_RDMA_READ_REQUEST, psn::add(e, i))
            .reth(TARGET, b.kb, 8)
            .bytes();
        b.inject(B, &read);
    }
    let over = psn::add(e, depth);
    let fa = b
        .request(Opcode::RC_FETCH_ADD, over)
        .atomic(TARGET + 0x100, b.kb, 0, 1)
        .bytes();
    b.inject(B, &fa);
    let r = b.drain(B);
    assert_eq!(r.len(), depth as usize + 1, "{r:?}");
    for (i, s) in r[..depth as usize].iter().enumerate() {
        assert_eq!(
            (s.opcode, s.psn),
            (Opcode::RC_RDMA_READ_RESPONSE_ONLY, psn::add(e, i as u32))
        );
    }
    assert_eq!(r[depth as usize].psn, over);
    assert_eq!(
        r[depth as usize].syndrome,
        Some(AethSyndrome::Nak(NakCode::InvalidRequest))
    );
    assert_eq!(b.naked(B, NakReason::NoResources), 1);
    assert_eq!(
        b.mem(B)[t..t + 8],
        7u64.to_le_bytes(),
        "the ATOMIC beyond the resources is not executed"
    );
    assert_eq!(b.state(B, b.p.qb), QpState::Error);
}

/// RL-06: copies of a duplicate ATOMIC that arrive while its replay is still
/// queued add nothing: one replay, not one per copy (a peer repeating one
/// duplicate must not grow the response queue).
#[test]
fn rl_06_duplicate_atomic_flood_queues_one_replay() {
    let mut b = bench();
    let e = b.epsn_b();
    let fa = b
        .request(Opcode::RC_FETCH_ADD, e)
        .atomic(TARGET, b.kb, 0, 5)
        .bytes();
    b.inject(B, &fa);
    assert_eq!(b.drain(B).len(), 1);
    for _ in 0..1000 {
        b.inject(B, &fa);
    }
    let r = b.drain(B);
    let got: Vec<_> = r.iter().map(|s| (s.opcode, s.psn, s.orig)).collect();
    assert_eq!(got, [(Opcode::RC_ATOMIC_ACKNOWLEDGE, e, Some(0))]);
    assert_eq!(b.net.nodes[B].engine.counters().duplicates_received, 1000);
    // Once sent, a later copy is replayed again (the requester may still miss it).
    b.inject(B, &fa);
    assert_eq!(b.drain(B).len(), 1);
}

/// RL-11: a SEND resent while its RNR NAK is still queued gets that NAK, not
/// one more per copy (RNR NAKs coalesce); once the NAK left, a retry gets a new
/// one.
#[test]
fn rl_11_rnr_naks_for_one_psn_coalesce() {
    let mut b = bench();
    let e = b.epsn_b();
    let send = b.request(Opcode::RC_SEND_ONLY, e).payload(&[1; 8]).bytes();
    for _ in 0..1000 {
        b.inject(B, &send);
    }
    let r = b.drain(B);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(matches!(r[0].syndrome, Some(AethSyndrome::RnrNak { .. })));
    assert_eq!(r[0].psn, e);
    b.inject(B, &send);
    assert_eq!(
        b.drain(B).len(),
        1,
        "a retry after the NAK left is NAKed again"
    );
    b.post_recv(B, b.p.qb, 9, TARGET, 64);
    b.inject(B, &send);
    assert_one_ack(&b.drain(B), e);
}

/// WRITEs received in one batch, each asking for an ACK: the responder
/// coalesces their ACKs into one (RL-08); once the QP saw loss (it sent a
/// sequence NAK, RL-03) into the two newest, kept as two packets (vhca
/// policy, issue 14): one lost on the way leaves the other, so the
/// requester's window still moves without waiting for a probe.
#[test]
fn rl_08_a_batch_of_acks_coalesces_into_its_two_newest_after_a_loss() {
    let mut b = bench();
    let e = b.epsn_b();
    let write = |b: &mut Bench, p: u32| {
        let pkt = b
            .request(Opcode::RC_RDMA_WRITE_ONLY, psn::add(e, p))
            .reth(TARGET + 0x400 + u64::from(p) * 4, b.kb, 4)
            .payload(&[7; 4])
            .bytes();
        b.inject(B, &pkt);
    };
    let acks = |out: &[Seen]| -> Vec<u32> {
        out.iter()
            .filter(|s| matches!(s.syndrome, Some(AethSyndrome::Ack { .. })))
            .map(|s| s.psn)
            .collect()
    };
    for p in 0..4 {
        write(&mut b, p);
    }
    let out = b.drain(B);
    assert_eq!(
        acks(&out),
        vec![psn::add(e, 3)],
        "lossless: one ACK, {out:?}"
    );
    // PSN e+4 lost: e+5 provokes a sequence NAK.
    write(&mut b, 5);
    assert_one_nak(&b.drain(B), psn::add(e, 4), NakCode::PsnSequenceError);
    for p in 4..8 {
        write(&mut b, p);
    }
    let out = b.drain(B);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(acks(&out), vec![psn::add(e, 6), psn::add(e, 7)]);
}

/// A flood of valid duplicate and new requests (ATOMIC replays, SEND and WRITE
/// re-ACKs, a SEND that finds no receive WQE) from a peer that never reads its
/// responses: the QP's queue of unsent responses stays within its bound
/// (`4 * max_dest_rd_atomic + 32`, RxDrop::ResponseQueueFull beyond), whatever
/// the interleaving (ACKs coalesce only with an ACK queued last, RL-08).
#[test]
fn rl_06_rl_08_unsent_responses_stay_bounded_under_a_request_flood() {
    let mut b = bench();
    let e = b.epsn_b();
    let depth = usize::from(b.o.max_rd_atomic);
    b.post_recv(B, b.p.qb, 1, TARGET + 0x800, 64);
    let history = [
        b.request(Opcode::RC_FETCH_ADD, e)
            .atomic(TARGET + 0x100, b.kb, 0, 1)
            .bytes(),
        b.request(Opcode::RC_COMPARE_SWAP, psn::add(e, 1))
            .atomic(TARGET + 0x108, b.kb, 0, 1)
            .bytes(),
        b.request(Opcode::RC_SEND_ONLY, psn::add(e, 2))
            .payload(&[3; 8])
            .bytes(),
        b.request(Opcode::RC_RDMA_WRITE_ONLY, psn::add(e, 3))
            .reth(TARGET + 0x400, b.kb, 4)
            .payload(&[4; 4])
            .bytes(),
    ];
    for pkt in &history {
        b.inject(B, pkt);
    }
    assert_eq!(b.drain(B).len(), 3, "two atomic ACKs, one coalesced ACK");
    // No receive WQE left: a new SEND gets an RNR NAK.
    let rnr = b
        .request(Opcode::RC_SEND_ONLY, psn::add(e, 4))
        .payload(&[5; 8])
        .bytes();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..20_000 {
        let pkt = match rand() % 5 {
            4 => &rnr,
            k => &history[k as usize],
        };
        b.inject(B, pkt);
    }
    let r = b.drain(B);
    assert!(
        r.len() <= 4 * depth + 32,
        "{} responses held for a peer that never read them",
        r.len()
    );
    assert_eq!(b.state(B, b.p.qb), QpState::Rts);
}
