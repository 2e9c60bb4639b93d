//! The SQ Drain state on the wire (QS-05, seed 001 §9) between two engines:
//! a message begun before RTS -> SQD is finished and acknowledged, nothing new
//! starts until the QP is back in RTS, the SQ-drained event (AE-01) comes with
//! the last acknowledgement (or at once when the SQ was idle), and the
//! attributes changed while drained take effect.

mod common;

use common::*;
use transport::engine::Limits;
use transport::verbs::{
    AttrMask, Completion, Event, QpAttr, QpState, QpType, RecvWr, SendWr, WcStatus, WrOpcode,
};
use transport::wire::opcode::Opcode;
use transport::wire::PacketRepr;

const REMOTE: u64 = MEM_BASE + 0x10_0000;

/// A two-node net whose egress links take about two 1 KiB packets a step, so
/// that a test can change a QP's state between the packets of one message.
fn slow_net(seed: u64, limits: Limits) -> (Net, Pair, u32, u32) {
    let mut net = Net::with_limits(2, 1 << 22, seed, limits);
    net.link = Some(LinkModel {
        ns_per_kib: 1_000,
        queue_bytes: 1_100,
    });
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    (net, p, ka, kb)
}

fn write(id: u64, len: u32, off: u64, lkey: u32, rkey: u32) -> SendWr {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(MEM_BASE + off, len, lkey));
    w.remote_addr = REMOTE + off;
    w.rkey = rkey;
    w
}

fn to_state(net: &mut Net, node: usize, qpn: u32, attr: QpAttr, mask: AttrMask) {
    let now = net.now;
    net.nodes[node]
        .engine
        .modify_qp(qpn, &attr, mask | AttrMask::STATE, now)
        .expect("modify");
}

fn sqd(notify: bool) -> QpAttr {
    QpAttr {
        state: Some(QpState::Sqd),
        en_sqd_async_notify: notify,
        ..QpAttr::default()
    }
}

fn events(net: &mut Net, node: usize) -> Vec<Event> {
    std::iter::from_fn(|| net.nodes[node].engine.poll_event()).collect()
}

/// The request packets node 0 (LID 1) put on the wire: (PSN, opcode, RETH VA).
fn requests(sniffed: &[Vec<u8>]) -> Vec<(u32, Opcode, Option<u64>)> {
    sniffed
        .iter()
        .filter_map(|b| PacketRepr::parse(b).ok())
        .filter(|p| p.lrh.slid == 1 && p.transport.bth.opcode != Opcode::RC_ACKNOWLEDGE)
        .map(|p| {
            let t = &p.transport;
            (t.bth.psn, t.bth.opcode, t.ext.reth.map(|r| r.va))
        })
        .collect()
}

#[test]
fn qs_05_in_flight_message_finishes_nothing_new_until_rts_event_after_last_ack() {
    let (mut net, p, ka, kb) = slow_net(1, Limits::default());
    net.sniffed = Some(Vec::new());
    fill(&mut net, 0, MEM_BASE, 16 << 10, 3);
    // WQE 1: eight packets at MTU 1024; WQE 2 behind it.
    for w in [
        write(1, 8 << 10, 0, ka, kb),
        write(2, 4 << 10, 8 << 10, ka, kb),
    ] {
        net.nodes[0].engine.post_send(p.qa, w).unwrap();
    }
    // Let the first packets of WQE 1 leave, then drain.
    net.step();
    let begun = requests(net.sniffed.as_ref().unwrap()).len();
    assert!((1..8).contains(&begun), "{begun} packets before SQD");
    to_state(&mut net, 0, p.qa, sqd(true), AttrMask::EN_SQD_ASYNC_NOTIFY);
    assert!(
        events(&mut net, 0).is_empty(),
        "drained with WQE 1 in flight"
    );
    // Step until idle: WQE 1's completion (its last ACK arrived) and the event
    // come in the same step, never the event first.
    let mut done: Vec<Completion> = Vec::new();
    let mut drained_at = None;
    for step in 0..100_000 {
        let more = net.step();
        done.extend(std::iter::from_fn(|| net.poll(0, p.cq_a)));
        let ev = events(&mut net, 0);
        if !ev.is_empty() {
            assert_eq!(ev, vec![Event::SqDrained { qpn: p.qa }]);
            assert!(drained_at.is_none(), "SQ drained twice");
            assert_eq!(done.len(), 1, "event before WQE 1's last ACK: {done:?}");
            drained_at = Some(step);
        }
        if !more {
            break;
        }
    }
    assert!(drained_at.is_some(), "no SQ-drained event");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].wr_id, done[0].status), (1, WcStatus::Success));
    // On the wire: all of WQE 1 (eight PSNs in order), nothing of WQE 2.
    let sent = requests(net.sniffed.as_ref().unwrap());
    assert_eq!(sent.len(), 8, "{sent:?}");
    assert!(sent.iter().all(|r| r.2.is_none() || r.2 == Some(REMOTE)));
    assert_eq!(
        bytes(&net, 1, REMOTE, 8 << 10),
        bytes(&net, 0, MEM_BASE, 8 << 10)
    );
    assert!(bytes(&net, 1, REMOTE + (8 << 10), 4 << 10)
        .iter()
        .all(|&b| b == 0));
    // New WRs may be posted while drained (seed §9); they wait too.
    net.nodes[0]
        .engine
        .post_send(p.qa, write(3, 1024, 12 << 10, ka, kb))
        .unwrap();
    net.run_until(10_000, |_| false);
    assert_eq!(requests(net.sniffed.as_ref().unwrap()).len(), 8);
    // SQD -> RTS resumes with the next WQE.
    let rts = QpAttr {
        state: Some(QpState::Rts),
        ..QpAttr::default()
    };
    to_state(&mut net, 0, p.qa, rts, AttrMask::NONE);
    let c = wait(&mut net, 0, p.cq_a, 2);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(
        bytes(&net, 1, REMOTE, 13 << 10),
        bytes(&net, 0, MEM_BASE, 13 << 10)
    );
    assert!(events(&mut net, 0).is_empty());
}

#[test]
fn qs_05_idle_sq_is_drained_at_once_and_only_when_asked() {
    let (mut net, p, ka, kb) = slow_net(2, Limits::default());
    // Without the notify bit: SQD, no event.
    to_state(&mut net, 0, p.qa, sqd(false), AttrMask::NONE);
    assert_eq!(net.nodes[0].engine.query_qp(p.qa).unwrap().0, QpState::Sqd);
    net.run_until(10_000, |_| false);
    assert!(events(&mut net, 0).is_empty());
    let rts = QpAttr {
        state: Some(QpState::Rts),
        ..QpAttr::default()
    };
    to_state(&mut net, 0, p.qa, rts, AttrMask::NONE);
    // With it, on an SQ with nothing begun (one WQE queued behind nothing would
    // start at once, so the SQ is empty): the event at the modify.
    to_state(&mut net, 0, p.qa, sqd(true), AttrMask::EN_SQD_ASYNC_NOTIFY);
    assert_eq!(events(&mut net, 0), vec![Event::SqDrained { qpn: p.qa }]);
    // A WQE posted in SQD is held, and raises no second event.
    net.nodes[0]
        .engine
        .post_send(p.qa, write(1, 64, 0, ka, kb))
        .unwrap();
    net.run_until(10_000, |_| false);
    assert!(net.poll(0, p.cq_a).is_none());
    assert!(events(&mut net, 0).is_empty());
    to_state(&mut net, 0, p.qa, rts, AttrMask::NONE);
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
}

#[test]
fn qs_05_ud_and_uc_drain_without_acks() {
    for qp_type in [QpType::Uc, QpType::Ud] {
        let mut net = Net::new(2, 1 << 22, 3);
        // One packet a step.
        net.link = Some(LinkModel {
            ns_per_kib: 1_000,
            queue_bytes: 1_000,
        });
        let ka = net.reg_all(0, ALL_ACCESS);
        let kb = net.reg_all(1, ALL_ACCESS);
        let o = ConnOpts {
            qp_type,
            ..ConnOpts::default()
        };
        let p = connect(&mut net, 0, 1, &o);
        net.sniffed = Some(Vec::new());
        let len = if qp_type == QpType::Ud { 1024 } else { 4096 };
        for id in 1..=2 {
            net.nodes[1]
                .engine
                .post_recv(
                    p.qb,
                    RecvWr {
                        wr_id: id,
                        sges: sge(REMOTE + id * 0x2000, 0x2000, kb),
                    },
                )
                .unwrap();
        }
        for id in 1..=2 {
            let mut s = send_wr(id, WrOpcode::Send, sge(MEM_BASE, len, ka));
            if qp_type == QpType::Ud {
                s.ud = Some(transport::verbs::UdDest {
                    av: transport::verbs::AddressVector {
                        dlid: 2,
                        ..Default::default()
                    },
                    remote_qpn: p.qb,
                    remote_qkey: 0x1111_1111,
                    pkey_index: None,
                });
            }
            net.nodes[0].engine.post_send(p.qa, s).unwrap();
        }
        // UD: the first datagram left in the first step; UC: the first
        // packet of the first message.
        net.step();
        to_state(&mut net, 0, p.qa, sqd(true), AttrMask::EN_SQD_ASYNC_NOTIFY);
        net.run_until(100_000, |_| false);
        let c: Vec<_> = std::iter::from_fn(|| net.poll(0, p.cq_a)).collect();
        assert_eq!(c.len(), 1, "{qp_type:?}: {c:?}");
        assert_eq!(c[0].wr_id, 1);
        assert_eq!(events(&mut net, 0), vec![Event::SqDrained { qpn: p.qa }]);
        let sent = requests(net.sniffed.as_ref().unwrap()).len();
        assert_eq!(sent, (len / 1024) as usize, "{qp_type:?}");
        let rts = QpAttr {
            state: Some(QpState::Rts),
            ..QpAttr::default()
        };
        to_state(&mut net, 0, p.qa, rts, AttrMask::NONE);
        assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].wr_id, 2);
        assert_eq!(wait(&mut net, 1, p.cq_b, 2).len(), 2);
    }
}

#[test]
fn qs_05_retry_count_and_timeout_changed_while_drained_take_effect() {
    // Probes off: only the ACK timer resends, once per retry (RL-10).
    let limits = Limits {
        loss_probes: false,
        ..Limits::default()
    };
    let (mut net, p, ka, kb) = slow_net(4, limits);
    to_state(&mut net, 0, p.qa, sqd(true), AttrMask::EN_SQD_ASYNC_NOTIFY);
    assert_eq!(events(&mut net, 0), vec![Event::SqDrained { qpn: p.qa }]);
    // SQD -> SQD: retry count 7 -> 1, timeout 10 -> 8 (about 1 ms).
    let a = QpAttr {
        state: Some(QpState::Sqd),
        retry_cnt: 1,
        timeout: 8,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    to_state(
        &mut net,
        0,
        p.qa,
        a,
        AttrMask::RETRY_CNT | AttrMask::TIMEOUT | AttrMask::MAX_QP_RD_ATOMIC,
    );
    let rts = QpAttr {
        state: Some(QpState::Rts),
        ..QpAttr::default()
    };
    to_state(&mut net, 0, p.qa, rts, AttrMask::NONE);
    let (_, attr, _) = net.nodes[0].engine.query_qp(p.qa).unwrap();
    assert_eq!(
        (attr.retry_cnt, attr.timeout, attr.max_rd_atomic),
        (1, 8, 1)
    );
    // The peer is gone: the WRITE is sent once and retried once, then fails.
    net.faults.drop = 1.0;
    net.sniffed = Some(Vec::new());
    let t0 = net.now;
    net.nodes[0]
        .engine
        .post_send(p.qa, write(1, 64, 0, ka, kb))
        .unwrap();
    let c = wait(&mut net, 0, p.cq_a, 1);
    assert_eq!(c[0].status, WcStatus::RetryExcErr);
    assert_eq!(requests(net.sniffed.as_ref().unwrap()).len(), 2);
    // Two timeouts of 4.096 us << 8 (about 1 ms each), not of << 10.
    let took = net.now.0 - t0.0;
    assert!(
        (2 * (4096 << 8)..4 * (4096 << 8)).contains(&took),
        "took {took} ns"
    );
}
