//! Two engines (and loopback on one) over the simulated fabric: operations,
//! ordering, completions, SRQ, UD, UC and addressing, each test named after the
//! feature it shows on the wire (docs/FEATURES.md).

mod common;

use common::*;
use transport::psn;
use transport::verbs::{
    AddressVector, Completion, Event, Mtu, QpInit, QpType, RecvWr, SendFlags, Sge, UdDest,
    VerbError, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

fn sge(addr: u64, len: u32, lkey: u32) -> Vec<Sge> {
    vec![Sge {
        addr,
        length: len,
        lkey,
    }]
}

/// Runs until `n` completions arrived on the CQ; returns them in order.
fn wait(net: &mut Net, node: usize, cq: u32, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    net.run_until(5_000_000, |net| {
        while let Some(c) = net.poll(node, cq) {
            got.push(c);
        }
        got.len() >= n
    });
    assert_eq!(got.len(), n, "completions on node {node}: {got:?}");
    got
}

fn setup(seed: u64, o: &ConnOpts) -> (Net, Pair, u32, u32) {
    pair_setup(seed, 1 << 22, ALL_ACCESS, o)
}

#[test]
fn op_02_op_05_immediate_data_reaches_the_receive_completion() {
    let (mut net, p, ka, kb) = setup(11, &ConnOpts::default());
    fill(&mut net, 0, MEM_BASE, 3000, 1);
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x10000, 4096, kb);
    recv(&mut net, 1, p.qb, 2, MEM_BASE + 0x20000, 16, kb);
    let mut s = send_wr(10, WrOpcode::SendWithImm, sge(MEM_BASE, 3000, ka));
    s.imm_or_inv = 0xdead_beef;
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    let mut w = send_wr(11, WrOpcode::RdmaWriteWithImm, sge(MEM_BASE, 2500, ka));
    w.remote_addr = MEM_BASE + 0x30000;
    w.rkey = kb;
    w.imm_or_inv = 0x1234_5678;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let r = wait(&mut net, 1, p.cq_b, 2);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm_data),
        (1, WcOpcode::Recv, 3000, 0xdead_beef)
    );
    assert!(r[0].flags.contains(WcFlags::WITH_IMM));
    // OP-05: WRITE with immediate consumes a receive WQE; its buffer stays untouched.
    assert_eq!(
        (r[1].wr_id, r[1].opcode, r[1].byte_len, r[1].imm_data),
        (2, WcOpcode::RecvRdmaWithImm, 2500, 0x1234_5678)
    );
    assert_eq!(bytes(&net, 1, MEM_BASE + 0x20000, 16), vec![0; 16]);
    assert_eq!(
        bytes(&net, 0, MEM_BASE, 2500),
        bytes(&net, 1, MEM_BASE + 0x30000, 2500)
    );
    assert_eq!(wait(&mut net, 0, p.cq_a, 2).len(), 2);
}

#[test]
fn op_09_zero_length_send_write_read_and_a_4_mib_write() {
    let (mut net, p, _ka, kb) = setup(12, &ConnOpts::default());
    recv(&mut net, 1, p.qb, 1, MEM_BASE, 0, kb);
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, vec![]))
        .unwrap();
    let mut w = send_wr(2, WrOpcode::RdmaWrite, vec![]);
    w.rkey = 0x7777; // a zero-length WRITE checks no R_Key (C9-88)
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let mut r = send_wr(3, WrOpcode::RdmaRead, vec![]);
    r.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, r).unwrap();
    let big = 4 << 20;
    let mut net2 = Net::new(2, (big as usize) * 2 + 4096, 13);
    let k2a = net2.reg_all(0, ALL_ACCESS);
    let k2b = net2.reg_all(1, ALL_ACCESS);
    let p2 = connect(&mut net2, 0, 1, &ConnOpts::default());
    fill(&mut net2, 0, MEM_BASE + 1, big as usize, 9);
    let mut w = send_wr(4, WrOpcode::RdmaWrite, sge(MEM_BASE + 1, big, k2a));
    w.remote_addr = MEM_BASE + u64::from(big) + 7;
    w.rkey = k2b;
    net2.nodes[0].engine.post_send(p2.qa, w).unwrap();
    let a = wait(&mut net, 0, p.cq_a, 3);
    assert!(a.iter().all(|c| c.status == WcStatus::Success), "{a:?}");
    assert_eq!(wait(&mut net, 1, p.cq_b, 1)[0].byte_len, 0);
    let c = wait(&mut net2, 0, p2.cq_a, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert!(
        bytes(&net2, 0, MEM_BASE + 1, big as usize)
            == bytes(&net2, 1, MEM_BASE + u64::from(big) + 7, big as usize)
    );
}

#[test]
fn or_01_or_04_or_06_op_08_completions_in_post_order_unsignaled_silent() {
    let (mut net, p, ka, kb) = setup(14, &ConnOpts::default());
    for i in 0..20u64 {
        recv(
            &mut net,
            1,
            p.qb,
            i,
            MEM_BASE + 0x10000 * (i + 1),
            0x8000,
            kb,
        );
    }
    fill(&mut net, 0, MEM_BASE, 0x8000, 5);
    // A mix of multi-packet SENDs, WRITEs and READs; odd ones unsignaled.
    for i in 0..20u64 {
        let len = 100 + (i as u32 * 1777) % 9000;
        let mut w = match i % 3 {
            0 => send_wr(i, WrOpcode::Send, sge(MEM_BASE, len, ka)),
            1 => {
                let mut w = send_wr(i, WrOpcode::RdmaWrite, sge(MEM_BASE, len, ka));
                w.remote_addr = MEM_BASE + 0x20_0000 + i * 0x4000;
                w.rkey = kb;
                w
            }
            _ => {
                let mut w = send_wr(
                    i,
                    WrOpcode::RdmaRead,
                    sge(MEM_BASE + 0x30_0000 + i * 0x4000, len, ka),
                );
                w.remote_addr = MEM_BASE + 0x20_0000 + (i - 1) * 0x4000;
                w.rkey = kb;
                w
            }
        };
        if i % 2 == 1 {
            w.flags = SendFlags(0);
        }
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    let sends = (0..20u64).filter(|i| i % 3 == 0).count();
    let recvs = wait(&mut net, 1, p.cq_b, sends);
    // OR-07, OP-08: receives complete in order, each SEND whole in its own WQE.
    for (n, c) in recvs.iter().enumerate() {
        assert_eq!(c.wr_id, n as u64);
        let i = (n * 3) as u64;
        assert_eq!(c.byte_len, 100 + (i as u32 * 1777) % 9000);
        assert_eq!(
            bytes(
                &net,
                1,
                MEM_BASE + 0x10000 * (n as u64 + 1),
                c.byte_len as usize
            ),
            bytes(&net, 0, MEM_BASE, c.byte_len as usize)
        );
    }
    let done = wait(&mut net, 0, p.cq_a, 10);
    let ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (0..20).filter(|i| i % 2 == 0).collect::<Vec<_>>());
    assert!(
        net.poll(0, p.cq_a).is_none(),
        "unsignaled WRs complete silently"
    );
}

#[test]
fn or_05_fenced_send_waits_for_the_read_before_it() {
    let (mut net, p, ka, kb) = setup(15, &ConnOpts::default());
    fill(&mut net, 1, MEM_BASE + 0x1000, 64, 3);
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x8000, 64, kb);
    let mut r = send_wr(1, WrOpcode::RdmaRead, sge(MEM_BASE + 0x2000, 64, ka));
    r.remote_addr = MEM_BASE + 0x1000;
    r.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, r).unwrap();
    // The fenced SEND carries what the READ brought: it must not leave before.
    let mut s = send_wr(2, WrOpcode::Send, sge(MEM_BASE + 0x2000, 64, ka));
    s.flags = SendFlags(SendFlags::SIGNALED.0 | SendFlags::FENCE.0);
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x8000, 64),
        bytes(&net, 1, MEM_BASE + 0x1000, 64)
    );
}

/// OP-10: a SEND with the solicited flag completes at the responder marked
/// solicited, one without it not: what a CQ armed for solicited completions
/// (CQ-02) decides on. The arming itself is the device CQ ring's
/// (ARCHITECTURE.md §4 "who owns what"), asserted by device/tests/datapath.rs
/// `datapath_cq_02_*` and tests/tests/traffic.rs.
#[test]
fn op_10_solicited_flag_reaches_the_responders_completion() {
    let (mut net, p, ka, kb) = setup(16, &ConnOpts::default());
    for i in 0..3 {
        recv(&mut net, 1, p.qb, i, MEM_BASE + 0x1000 * (i + 1), 64, kb);
    }
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, sge(MEM_BASE, 8, ka)))
        .unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert!(!c[0].solicited);
    let mut s = send_wr(2, WrOpcode::Send, sge(MEM_BASE, 8, ka));
    s.flags = SendFlags(SendFlags::SIGNALED.0 | SendFlags::SOLICITED.0);
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert!(c[0].solicited);
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(3, WrOpcode::Send, sge(MEM_BASE, 8, ka)))
        .unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert!(!c[0].solicited);
}

#[test]
fn sr_01_srq_shared_by_two_qps_consumed_in_order_with_limit_event() {
    let mut net = Net::new(2, 1 << 20, 17);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pd = net.nodes[1].pd;
    let srq = net.nodes[1].engine.create_srq(pd, 16, 1, 0).unwrap();
    for i in 0..8u64 {
        net.nodes[1]
            .engine
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: 100 + i,
                    sges: sge(MEM_BASE + 0x1000 * (i + 1), 256, kb),
                },
            )
            .unwrap();
    }
    net.nodes[1].engine.modify_srq_limit(srq, 5).unwrap();
    let o = ConnOpts {
        srq: [None, Some(srq)],
        ..ConnOpts::default()
    };
    let p1 = connect(&mut net, 0, 1, &o);
    let p2 = connect(&mut net, 0, 1, &o);
    for i in 0..4 {
        let p = if i % 2 == 0 { p1 } else { p2 };
        net.nodes[0]
            .engine
            .post_send(
                p.qa,
                send_wr(i, WrOpcode::Send, sge(MEM_BASE, 10 + i as u32, ka)),
            )
            .unwrap();
        // One at a time, so the order of consumption is the order of arrival.
        let c = wait(&mut net, 1, p.cq_b, 1);
        assert_eq!(
            (c[0].wr_id, c[0].qp_num, c[0].byte_len),
            (100 + i, p.qb, 10 + i as u32)
        );
    }
    let ev: Vec<Event> = std::iter::from_fn(|| net.nodes[1].engine.poll_event()).collect();
    assert_eq!(
        ev.iter()
            .filter(|e| **e == Event::SrqLimitReached { srq })
            .count(),
        1,
        "the limit event fires once, then the limit is 0: {ev:?}"
    );
    assert_eq!(net.nodes[1].engine.query_srq(srq).unwrap(), (4, 0));
    assert_eq!(net.nodes[1].engine.destroy_srq(srq), Err(VerbError::Busy));
}

#[test]
fn srq_resize_keeps_its_entries_and_refuses_too_small() {
    let mut net = Net::new(2, 1 << 20, 23);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let pd = net.nodes[1].pd;
    let srq = net.nodes[1].engine.create_srq(pd, 4, 1, 2).unwrap();
    let post = |net: &mut Net, i: u64| {
        net.nodes[1].engine.post_srq_recv(
            srq,
            RecvWr {
                wr_id: 100 + i,
                sges: sge(MEM_BASE + 0x1000 * (i + 1), 256, kb),
            },
        )
    };
    for i in 0..4 {
        post(&mut net, i).unwrap();
    }
    assert_eq!(post(&mut net, 4), Err(VerbError::QueueFull));
    let e = &mut net.nodes[1].engine;
    assert_eq!(e.resize_srq(srq, 3), Err(VerbError::InvalidAttr));
    assert_eq!(e.resize_srq(srq, 0), Err(VerbError::MaxWrExceeded));
    assert_eq!(e.resize_srq(srq, 1 << 30), Err(VerbError::MaxWrExceeded));
    assert_eq!(e.resize_srq(srq + 1000, 8), Err(VerbError::InvalidSrq));
    e.resize_srq(srq, 8).unwrap();
    for i in 4..8 {
        post(&mut net, i).unwrap();
    }
    assert_eq!(net.nodes[1].engine.query_srq(srq).unwrap(), (8, 2));

    let o = ConnOpts {
        srq: [None, Some(srq)],
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    for i in 0..6 {
        net.nodes[0]
            .engine
            .post_send(p.qa, send_wr(i, WrOpcode::Send, sge(MEM_BASE, 8, ka)))
            .unwrap();
    }
    net.run_until(100_000, |n| n.nodes[1].engine.cq_len(p.cq_b) == 6);
    let e = &mut net.nodes[1].engine;
    let ids: Vec<u64> = std::iter::from_fn(|| e.poll_cq(p.cq_b))
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(ids, (100..106).collect::<Vec<_>>());
    assert_eq!(e.query_srq(srq).unwrap().0, 2);
}

#[test]
fn rl_16_ad_02_ad_04_ud_sends_to_a_peer_and_to_its_own_lid() {
    let mut net = Net::new(2, 1 << 20, 18);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (qa, cqa) = ud_qp(&mut net, 0);
    let (qa2, cqa2) = ud_qp(&mut net, 0);
    let (qb, cqb) = ud_qp(&mut net, 1);
    fill(&mut net, 0, MEM_BASE, 4096, 4);
    recv(&mut net, 1, qb, 1, MEM_BASE + 0x10000, 4096 + 40, kb);
    recv(&mut net, 0, qa2, 2, MEM_BASE + 0x20000, 4096 + 40, ka);
    for (id, dlid, dqp) in [(1u64, 2u16, qb), (2, 1, qa2)] {
        let mut w = send_wr(id, WrOpcode::SendWithImm, sge(MEM_BASE, 4096, ka));
        w.imm_or_inv = 77;
        w.ud = Some(UdDest {
            av: AddressVector {
                dlid,
                sl: 3,
                ..AddressVector::default()
            },
            remote_qpn: dqp,
            remote_qkey: 0x1111_1111,
            pkey_index: None,
        });
        net.nodes[0].engine.post_send(qa, w).unwrap();
    }
    let b = wait(&mut net, 1, cqb, 1);
    // RL-16: one packet, the source in the completion, 40 bytes of GRH room first.
    assert_eq!(
        (
            b[0].status,
            b[0].byte_len,
            b[0].src_qp,
            b[0].slid,
            b[0].sl,
            b[0].imm_data
        ),
        (WcStatus::Success, 4096 + 40, qa, 1, 3, 77)
    );
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x10000 + 40, 4096),
        bytes(&net, 0, MEM_BASE, 4096)
    );
    let l = wait(&mut net, 0, cqa2, 1);
    assert_eq!(
        (l[0].status, l[0].src_qp, l[0].slid),
        (WcStatus::Success, qa, 1)
    );
    assert_eq!(wait(&mut net, 0, cqa, 2).len(), 2);
    // C9-12: a UD message longer than one packet fails locally.
    let mut w = send_wr(9, WrOpcode::Send, sge(MEM_BASE, 4097, ka));
    w.ud = Some(ud_dest(2, qb));
    assert_eq!(
        post_wait(&mut net, 0, qa, cqa, w).status,
        WcStatus::LocLenErr
    );
}

#[test]
fn rl_15_uc_loses_whole_messages_and_resyncs_on_the_next_first() {
    let o = ConnOpts {
        qp_type: QpType::Uc,
        mtu: Mtu::M256,
        ..ConnOpts::default()
    };
    let (mut net, p, ka, kb) = setup(19, &o);
    fill(&mut net, 0, MEM_BASE, 2000, 8);
    for i in 0..40u64 {
        recv(&mut net, 1, p.qb, i, MEM_BASE + 0x1000 * (i + 1), 4096, kb);
    }
    net.faults.drop = 0.05;
    for i in 0..40u64 {
        let len = 200 + (i as u32 * 37) % 1700;
        net.nodes[0]
            .engine
            .post_send(p.qa, send_wr(i, WrOpcode::Send, sge(MEM_BASE, len, ka)))
            .unwrap();
    }
    let sent = wait(&mut net, 0, p.cq_a, 40);
    assert!(sent.iter().all(|c| c.status == WcStatus::Success));
    net.run_until(100_000, |_| false);
    let mut got = Vec::new();
    while let Some(c) = net.poll(1, p.cq_b) {
        got.push(c);
    }
    assert!(
        !got.is_empty() && got.len() < 40,
        "some lost, some not: {}",
        got.len()
    );
    // Every message that arrived is whole and exact; WQEs are reused, in order.
    for (n, c) in got.iter().enumerate() {
        assert_eq!(c.wr_id, n as u64);
        assert_eq!(c.status, WcStatus::Success);
        let len = c.byte_len as usize;
        assert!(len >= 200);
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x1000 * (n as u64 + 1), len),
            bytes(&net, 0, MEM_BASE, len)
        );
    }
}

#[test]
fn ad_03_every_pmtu_segments_and_reassembles() {
    for (i, mtu) in [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096]
        .into_iter()
        .enumerate()
    {
        let o = ConnOpts {
            mtu,
            ..ConnOpts::default()
        };
        let (mut net, p, ka, kb) = setup(20 + i as u64, &o);
        let len = mtu.bytes() * 3 + 1;
        fill(&mut net, 0, MEM_BASE, len, i as u8);
        recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x10000, len as u32, kb);
        net.nodes[0]
            .engine
            .post_send(
                p.qa,
                send_wr(1, WrOpcode::Send, sge(MEM_BASE, len as u32, ka)),
            )
            .unwrap();
        let c = wait(&mut net, 1, p.cq_b, 1);
        assert_eq!(c[0].byte_len as usize, len);
        // Exactly four packets for 3 PMTUs + 1 byte, and one ACK (C9-11).
        assert_eq!(net.nodes[0].engine.counters().tx_packets, 4, "{mtu:?}");
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x10000, len),
            bytes(&net, 0, MEM_BASE, len)
        );
    }
}

#[test]
fn rl_01_psns_wrap_past_0xffffff() {
    let o = ConnOpts {
        mtu: Mtu::M256,
        psn_a: psn::PSN_MASK - 3,
        ..ConnOpts::default()
    };
    let (mut net, p, ka, kb) = setup(30, &o);
    fill(&mut net, 0, MEM_BASE, 256 * 10, 2);
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x10000, 4096, kb);
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, sge(MEM_BASE, 2560, ka)))
        .unwrap();
    wait(&mut net, 1, p.cq_b, 1);
    let (_, a, _) = net.nodes[0].engine.query_qp(p.qa).unwrap();
    assert_eq!(a.sq_psn, 6, "ten packets from 0xFFFFFC end at 5");
    let (_, b, _) = net.nodes[1].engine.query_qp(p.qb).unwrap();
    assert_eq!(b.rq_psn, 6);
}

#[test]
fn qs_09_create_qp_result_codes() {
    let mut net = Net::new(1, 1 << 16, 31);
    let cq = net.nodes[0].engine.create_cq().unwrap();
    let init = qp_init(&net, 0, QpType::Rc, cq, qp_cap(16, 1, 0), false);
    let e = &mut net.nodes[0].engine;
    assert_eq!(
        e.create_qp(QpInit { pd: 999, ..init }),
        Err(VerbError::InvalidPd)
    );
    assert_eq!(
        e.create_qp(QpInit {
            send_cq: 999,
            ..init
        }),
        Err(VerbError::InvalidCq)
    );
    assert_eq!(
        e.create_qp(QpInit {
            srq: Some(999),
            ..init
        }),
        Err(VerbError::InvalidSrq)
    );
    let mut big = init;
    big.cap.max_send_wr = 1 << 30;
    assert_eq!(e.create_qp(big), Err(VerbError::MaxWrExceeded));
    let mut big = init;
    big.cap.max_recv_sge = 1000;
    assert_eq!(e.create_qp(big), Err(VerbError::MaxSgeExceeded));
    let q = e.create_qp(init).unwrap();
    assert!(q >= 2, "QPN 0 and 1 are reserved");
    assert_eq!(e.destroy_cq(cq), Err(VerbError::Busy));
    e.destroy_qp(q).unwrap();
    e.destroy_cq(cq).unwrap();
}

#[test]
fn ad_01_ad_05_port_gid_and_pkey_table() {
    let net = Net::new(1, 4096, 32);
    let port = net.nodes[0].engine.port();
    let gid = port.gid();
    assert_eq!(&gid[..8], &[0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&gid[8..], &port.port_guid.to_be_bytes());
    assert_eq!(port.pkeys[0], 0xffff);
}

/// Moves packets between nodes 0 and 1 directly, recording what node 1 sends.
fn pump_trace(net: &mut Net, keep: &mut Vec<Vec<u8>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        let mut moved = false;
        for i in 0..2 {
            let now = net.now;
            loop {
                let n = &mut net.nodes[i];
                let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) else {
                    break;
                };
                moved = true;
                if i == 1 {
                    keep.push(buf[..len].to_vec());
                }
                let m = &mut net.nodes[1 - i];
                m.engine.handle_packet(&buf[..len], &mut m.mem, now);
            }
        }
        if !moved {
            break;
        }
    }
}

#[test]
fn or_02_rl_02_responses_in_psn_order_and_a_read_takes_one_psn_per_response() {
    let (mut net, p, ka, kb) = setup(40, &ConnOpts::default());
    let start = ConnOpts::default().psn_a;
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x9000, 64, kb);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, 2048, ka)); // 2 packets
    w.remote_addr = MEM_BASE + 0x1000;
    w.rkey = kb;
    let mut r = send_wr(2, WrOpcode::RdmaRead, sge(MEM_BASE + 0x4000, 3000, ka)); // 3 responses
    r.remote_addr = MEM_BASE + 0x1000;
    r.rkey = kb;
    let mut a = send_wr(3, WrOpcode::AtomicFetchAdd, sge(MEM_BASE + 0x8000, 8, ka));
    a.remote_addr = MEM_BASE + 0x2000;
    a.rkey = kb;
    a.swap_add = 1;
    let s = send_wr(4, WrOpcode::Send, sge(MEM_BASE, 16, ka));
    for w in [w, r, a, s] {
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    let mut keep = Vec::new();
    pump_trace(&mut net, &mut keep);
    let resp: Vec<(u32, String)> = keep
        .iter()
        .map(|b| {
            let pk = transport::wire::PacketRepr::parse(b).unwrap();
            let bth = pk.transport.bth;
            (
                psn::diff(bth.psn, start) as u32,
                bth.opcode.info().name.to_string(),
            )
        })
        .collect();
    // WRITE takes PSNs 0-1, READ 2-4 (one per response packet, RL-02), ATOMIC 5,
    // SEND 6; responses never overtake one another (C9-27).
    let psns: Vec<u32> = resp.iter().map(|r| r.0).collect();
    assert!(psns.windows(2).all(|w| w[0] <= w[1]), "{resp:?}");
    let reads: Vec<u32> = resp
        .iter()
        .filter(|r| r.1.contains("READ_RESPONSE"))
        .map(|r| r.0)
        .collect();
    assert_eq!(reads, vec![2, 3, 4], "{resp:?}");
    assert!(
        resp.contains(&(5, "RC_ATOMIC_ACKNOWLEDGE".into())),
        "{resp:?}"
    );
    assert_eq!(resp.last().unwrap(), &(6, "RC_ACKNOWLEDGE".into()));
    let done = wait(&mut net, 0, p.cq_a, 4);
    assert_eq!(
        done.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
}

#[test]
fn rl_17_unacknowledged_packets_stay_within_the_window() {
    let o = ConnOpts {
        mtu: Mtu::M256,
        ..ConnOpts::default()
    };
    let (mut net, p, ka, kb) = setup(41, &o);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, 1 << 20, ka)); // 4096 packets
    w.remote_addr = MEM_BASE + (1 << 21);
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    // Nothing is delivered: the requester stops at its window (the congestion
    // window it starts with, issue 14), far below the spec's 2^23 bound
    // (9.7.4.1.4).
    let mut buf = vec![0u8; 8192];
    let mut sent = 0;
    let n = &mut net.nodes[0];
    while n
        .engine
        .poll_transmit(&mut n.mem, net.now, &mut buf)
        .is_some()
    {
        sent += 1;
        assert!(sent <= 10_000);
    }
    let window = n.engine.limits().send_window;
    assert_eq!(sent, transport::engine::INITIAL_WINDOW);
    assert!(sent <= window && window < psn::MAX_OUTSTANDING);
}

#[test]
fn qs_01_qs_02_error_reset_and_back_to_rts_then_traffic_flows() {
    use transport::verbs::{AttrMask, QpAttr, QpState};
    let (mut net, p, ka, kb) = setup(42, &ConnOpts::default());
    // A wrong attribute set is refused and the QP is unchanged (QS-02).
    let bad = QpAttr {
        state: Some(QpState::Sqd),
        qkey: 5,
        ..QpAttr::default()
    };
    assert_eq!(
        net.nodes[0]
            .engine
            .modify_qp(p.qa, &bad, AttrMask::STATE | AttrMask::QKEY, net.now),
        Err(VerbError::InvalidTransition)
    );
    assert_eq!(net.nodes[0].engine.query_qp(p.qa).unwrap().0, QpState::Rts);
    // Posted WRs flush when the QP is moved to Error (QS-01, QS-07).
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, sge(MEM_BASE, 8, ka)))
        .unwrap();
    let err = QpAttr {
        state: Some(QpState::Error),
        ..QpAttr::default()
    };
    net.nodes[0]
        .engine
        .modify_qp(p.qa, &err, AttrMask::STATE, net.now)
        .unwrap();
    let c = wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(c[0].status, WcStatus::WrFlushErr);
    // Reset, then Init/RTR/RTS again with fresh PSNs on both sides.
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    for (node, qp) in [(0, p.qa), (1, p.qb)] {
        net.nodes[node]
            .engine
            .modify_qp(qp, &reset, AttrMask::STATE, net.now)
            .unwrap();
    }
    let o = ConnOpts::default();
    bring_up(&mut net, 0, p.qa, &o, 2, p.qb, 0x100, 0x900);
    bring_up(&mut net, 1, p.qb, &o, 1, p.qa, 0x900, 0x100);
    recv(&mut net, 1, p.qb, 7, MEM_BASE + 0x1000, 64, kb);
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(2, WrOpcode::Send, sge(MEM_BASE, 8, ka)))
        .unwrap();
    assert_eq!(wait(&mut net, 1, p.cq_b, 1)[0].wr_id, 7);
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
}

#[test]
fn mp_03_scattered_pages_translate_at_odd_offsets_on_the_wire() {
    let (mut net, p, ka, _) = setup(43, &ConnOpts::default());
    // Node 1 registers 5 pages at iova 0x7000_0123, backed by physical pages out
    // of order.
    let phys: Vec<u64> = [9u64, 2, 7, 4, 12]
        .iter()
        .map(|i| MEM_BASE + i * 4096)
        .collect();
    let pd = net.nodes[1].pd;
    let iova = 0x7000_0123;
    let len = 5 * 4096 - 0x123 - 100;
    let k = net.nodes[1]
        .engine
        .mrs()
        .reg_mr(pd, iova, len, ALL_ACCESS, 4096, phys.clone())
        .unwrap();
    fill(&mut net, 0, MEM_BASE, len as usize, 6);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, len as u32, ka));
    w.remote_addr = iova;
    w.rkey = k;
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, w).status,
        WcStatus::Success
    );
    let src = bytes(&net, 0, MEM_BASE, len as usize);
    let mut at = 0usize;
    for (i, page) in phys.iter().enumerate() {
        let off = if i == 0 { 0x123 } else { 0 };
        let n = (4096 - off).min(len as usize - at);
        assert_eq!(
            bytes(&net, 1, page + off as u64, n),
            src[at..at + n],
            "page {i}"
        );
        at += n;
    }
}

#[test]
fn cq_01_completions_carry_every_field() {
    let (mut net, p, ka, kb) = setup(44, &ConnOpts::default());
    recv(&mut net, 1, p.qb, 0xabc, MEM_BASE + 0x1000, 64, kb);
    let mut s = send_wr(0x1234, WrOpcode::SendWithImm, sge(MEM_BASE, 33, ka));
    s.imm_or_inv = 99;
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    let r = wait(&mut net, 1, p.cq_b, 1)[0];
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len, r.imm_data, r.qp_num, r.src_qp, r.slid),
        (
            0xabc,
            WcStatus::Success,
            WcOpcode::Recv,
            33,
            99,
            p.qb,
            p.qa,
            1
        )
    );
    assert!(r.flags.contains(WcFlags::WITH_IMM));
    let c = wait(&mut net, 0, p.cq_a, 1)[0];
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.qp_num),
        (0x1234, WcStatus::Success, WcOpcode::Send, p.qa)
    );
}

#[test]
fn ae_01_qs_08_responder_errors_and_first_packet_raise_async_events() {
    use transport::verbs::{AttrMask, QpAttr, QpState};
    let (mut net, p, ka, kb) = setup(45, &ConnOpts::default());
    // An access violation at the responder: NAK, and the QP reports it (11.6.3).
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, 8, ka));
    w.remote_addr = MEM_BASE + 0x100;
    w.rkey = kb ^ 0x33; // a stale key byte
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let c = wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(c[0].status, WcStatus::RemAccessErr);
    let ev: Vec<Event> = std::iter::from_fn(|| net.nodes[1].engine.poll_event()).collect();
    assert!(ev.contains(&Event::QpAccessError { qpn: p.qb }), "{ev:?}");
    assert_eq!(
        net.nodes[1].engine.query_qp(p.qb).unwrap().0,
        QpState::Error
    );
    // A new pair whose B side stops in RTR: A's first packet establishes
    // communication there (QS-08) and B still answers it.
    let mut net = Net::new(2, 1 << 16, 46);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let e = &mut net.nodes[1].engine;
    let now = net.now;
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    e.modify_qp(p.qb, &reset, AttrMask::STATE, now).unwrap();
    let mut a = QpAttr {
        state: Some(QpState::Init),
        port_num: 1,
        access: ALL_ACCESS,
        ..QpAttr::default()
    };
    e.modify_qp(
        p.qb,
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        now,
    )
    .unwrap();
    a.state = Some(QpState::Rtr);
    a.path_mtu = Mtu::M1024;
    a.dest_qp_num = p.qa;
    a.rq_psn = ConnOpts::default().psn_a;
    a.max_dest_rd_atomic = 4;
    a.av = AddressVector {
        dlid: 1,
        ..AddressVector::default()
    };
    e.modify_qp(
        p.qb,
        &a,
        AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC,
        now,
    )
    .unwrap();
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x100, 64, kb);
    while net.nodes[1].engine.poll_event().is_some() {}
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, sge(MEM_BASE, 8, ka)))
        .unwrap();
    wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    let ev: Vec<Event> = std::iter::from_fn(|| net.nodes[1].engine.poll_event()).collect();
    assert_eq!(ev, vec![Event::CommEstablished { qpn: p.qb }]);
}

/// OP-03 (now implemented, see engine_mw.rs): a SEND with Invalidate of an
/// R_Key that names nothing fails the o9-5.2.2 check at the responder: the
/// requester gets REM_INV_REQ_ERR, the receive WQE completes with it too.
#[test]
fn op_03_send_with_invalidate_of_an_unknown_key_is_a_remote_invalid_request() {
    let (mut net, p, ka, kb) = setup(47, &ConnOpts::default());
    recv(&mut net, 1, p.qb, 9, MEM_BASE + 0x10000, 64, kb);
    let mut w = send_wr(1, WrOpcode::SendWithInv, sge(MEM_BASE, 8, ka));
    w.imm_or_inv = 0x1234;
    assert_eq!(
        post_wait(&mut net, 0, p.qa, p.cq_a, w).status,
        WcStatus::RemInvReqErr
    );
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!((c[0].wr_id, c[0].status), (9, WcStatus::RemInvReqErr));
}

/// A WQE the device could not accept on an RC QP (IBA 10.8.3: an RC send
/// queue error takes the QP to Error, not to SQE; QS-06, the UC/UD SQE row,
/// is crafted.rs's qs_06_* tests): it completes in post order with
/// LocQpOpErr after the WRITEs before it have been acknowledged (not sooner:
/// nothing has acknowledged them), the QP goes to Error and the WQE after it
/// flushes. Data of the earlier WRITEs arrived.
#[test]
fn rc_rejected_wqe_completes_in_order_and_fails_the_qp() {
    let (mut net, p, ka, kb) = setup(31, &ConnOpts::default());
    fill(&mut net, 0, MEM_BASE, 0x8000, 9);
    for i in 0..2u64 {
        let mut w = send_wr(i, WrOpcode::RdmaWrite, sge(MEM_BASE, 0x8000, ka));
        w.remote_addr = MEM_BASE + 0x20_0000 + i * 0x8000;
        w.rkey = kb;
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    net.nodes[0]
        .engine
        .post_send_rejected(p.qa, 2, WcStatus::LocQpOpErr)
        .unwrap();
    let mut w = send_wr(3, WrOpcode::RdmaWrite, sge(MEM_BASE, 8, ka));
    w.remote_addr = MEM_BASE + 0x30_0000;
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let done = wait(&mut net, 0, p.cq_a, 4);
    let got: Vec<(u64, WcStatus)> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::LocQpOpErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    for i in 0..2u64 {
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x20_0000 + i * 0x8000, 0x8000),
            bytes(&net, 0, MEM_BASE, 0x8000)
        );
    }
    let (state, _, _) = net.nodes[0].engine.query_qp(p.qa).unwrap();
    assert_eq!(state, transport::verbs::QpState::Error);
}

/// QP 1 (GSI, ARCHITECTURE.md §7): created with its fixed number, brought up with the
/// GSI rows of the transition table, reached by a UD send to QPN 1 with the
/// well-known Q_Key 0x80010000 (PV-05); a send with another Q_Key is dropped
/// and counted; a second QP 1 is refused.
#[test]
fn pv_05_gsi_qp1_takes_mads_with_the_well_known_qkey() {
    use transport::engine::RxDrop;
    use transport::verbs::{AttrMask, QpAttr, QpState};
    let mut net = Net::new(2, 1 << 20, 23);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let mut gsi_cq = Vec::new();
    for node in 0..2 {
        let cq = net.nodes[node].engine.create_cq().unwrap();
        let init = qp_init(&net, node, QpType::Ud, cq, qp_cap(16, 1, 0), true);
        let n = &mut net.nodes[node];
        assert_eq!(n.engine.create_gsi_qp(init), Ok(1));
        assert_eq!(n.engine.create_gsi_qp(init), Err(VerbError::Busy));
        let t = transport::verbs::Time(0);
        let mut a = QpAttr {
            state: Some(QpState::Init),
            qkey: 0x8001_0000,
            ..QpAttr::default()
        };
        n.engine
            .modify_qp(
                1,
                &a,
                AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::QKEY,
                t,
            )
            .unwrap();
        a.state = Some(QpState::Rtr);
        n.engine.modify_qp(1, &a, AttrMask::STATE, t).unwrap();
        a.state = Some(QpState::Rts);
        n.engine
            .modify_qp(1, &a, AttrMask::STATE | AttrMask::SQ_PSN, t)
            .unwrap();
        gsi_cq.push(cq);
    }
    fill(&mut net, 0, MEM_BASE, 256, 6);
    recv(&mut net, 1, 1, 40, MEM_BASE + 0x10000, 256 + 40, kb);
    recv(&mut net, 1, 1, 41, MEM_BASE + 0x20000, 256 + 40, kb);
    for (id, qkey) in [(1u64, 0x1111_1111u32), (2, 0x8001_0000)] {
        let mut w = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 256, ka));
        w.ud = Some(UdDest {
            av: AddressVector {
                dlid: 2,
                ..AddressVector::default()
            },
            remote_qpn: 1,
            remote_qkey: qkey,
            pkey_index: None,
        });
        net.nodes[0].engine.post_send(1, w).unwrap();
    }
    assert_eq!(wait(&mut net, 0, gsi_cq[0], 2).len(), 2);
    let got = wait(&mut net, 1, gsi_cq[1], 1);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].src_qp, got[0].byte_len),
        (40, WcStatus::Success, 1, 256 + 40)
    );
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x10000 + 40, 256),
        bytes(&net, 0, MEM_BASE, 256)
    );
    assert_eq!(net.nodes[1].engine.counters().dropped(RxDrop::BadQkey), 1);
}

/// A local error behind an unacknowledged WQE waits for it (RC): the SEND
/// before it must not be reported successful without an ACK. Here the peer
/// has no receive and RNR retry is 0, so the SEND fails with the RNR status
/// and the WQE with the bad L_Key then flushes.
#[test]
fn rc_local_error_does_not_complete_earlier_wqes_without_an_ack() {
    let o = ConnOpts {
        rnr_retry: 0,
        ..ConnOpts::default()
    };
    let (mut net, p, ka, _kb) = setup(41, &o);
    net.nodes[0]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, sge(MEM_BASE, 64, ka)))
        .unwrap();
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            send_wr(2, WrOpcode::Send, sge(MEM_BASE, 64, ka ^ 0x55)),
        )
        .unwrap();
    let got: Vec<(u64, WcStatus)> = wait(&mut net, 0, p.cq_a, 2)
        .iter()
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
}

/// OP-07: an atomic's completion reports the 8 bytes of the original value.
#[test]
fn op_07_atomic_completion_reports_eight_bytes() {
    let (mut net, p, ka, kb) = setup(42, &ConnOpts::default());
    let mut w = send_wr(1, WrOpcode::AtomicFetchAdd, sge(MEM_BASE, 8, ka));
    w.remote_addr = MEM_BASE + 0x1000;
    w.rkey = kb;
    w.swap_add = 5;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let c = wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(
        (c[0].status, c[0].opcode, c[0].byte_len),
        (WcStatus::Success, WcOpcode::FetchAdd, 8)
    );
}
