//! Automatic path migration (AD-10; IBA 17.2.8, MigReq 9.2.4) between two
//! engines on the simulated fabric. Each node's port has LMC 1, so it owns two
//! LIDs: the primary path of a QP pair uses the base LIDs, the alternate path
//! the base LIDs + 1 (source path bits 1, AD-01). The test kills the primary
//! path by losing every packet to one of its DLIDs.

mod common;

use common::apm::*;
use common::*;
use transport::engine::{Limits, RxDrop};
use transport::verbs::{
    AddressVector, AttrMask, Event, MigState, QpAttr, QpState, QpType, RecvWr, Sge, VerbError,
    WcStatus, WrOpcode,
};

/// Node 0's base LID (LIDs 2 and 3) and node 1's (LIDs 4 and 5).
const LID_A: u16 = 2;
const LID_B: u16 = 4;
const LIDS: (u16, u16) = (LID_A, LID_B);
const LEN: usize = 10_000;
const SRC: u64 = MEM_BASE;
const DST: u64 = MEM_BASE + 0x10_0000;

fn net(apm_timeouts: u8) -> Net {
    let limits = Limits {
        loss_probes: false,
        apm_timeouts,
        ..Limits::default()
    };
    lmc_net(LID_A, LID_B, 7, limits)
}

/// Posts a receive at B and a SEND of `LEN` bytes at A.
fn send(net: &mut Net, p: &Pair) {
    let ka = net.reg_all(p.a, ALL_ACCESS);
    let kb = net.reg_all(p.b, ALL_ACCESS);
    fill(net, p.a, SRC, LEN, 0x5a);
    net.nodes[p.b]
        .engine
        .post_recv(
            p.qb,
            RecvWr {
                wr_id: 9,
                sges: vec![Sge {
                    addr: DST,
                    length: LEN as u32,
                    lkey: kb,
                }],
            },
        )
        .expect("recv");
    net.nodes[p.a]
        .engine
        .post_send(p.qa, send_wr(1, WrOpcode::Send, sge(SRC, LEN as u32, ka)))
        .expect("send");
}

/// Every packet to the primary path's DLID of A's requests is lost.
fn kill_primary(net: &mut Net) {
    kill_dlid(net, LID_B);
}

/// The consumer migrates A's Armed QP (Modify QP to Migrated).
fn migrate_on_request(net: &mut Net, qa: u32) {
    let now = net.now;
    let m = QpAttr {
        path_mig_state: MigState::Migrated,
        ..QpAttr::default()
    };
    net.nodes[0]
        .engine
        .modify_qp(qa, &m, AttrMask::PATH_MIG_STATE, now)
        .expect("migrate");
}

#[test]
fn ad_10_armed_requester_migrates_when_primary_path_dies_and_message_completes() {
    let mut net = net(2);
    let o = ConnOpts::default();
    let p = alt_pair(&mut net, &o, LIDS, MigState::Rearm, MigState::Armed);
    // Rearm arms at once (vhca policy): both ends report Armed.
    assert_eq!(mig_state(&net, 0, p.qa), (MigState::Armed, LID_B));
    assert_eq!(mig_state(&net, 1, p.qb), (MigState::Armed, LID_A));
    kill_primary(&mut net);
    send(&mut net, &p);
    let ca = wait_cqe(&mut net, p.a, p.cq_a);
    assert_eq!(ca.status, WcStatus::Success);
    let cb = wait_cqe(&mut net, p.b, p.cq_b);
    assert_eq!(cb.status, WcStatus::Success);
    assert_eq!(cb.byte_len, LEN as u32);
    assert_eq!(bytes(&net, p.b, DST, LEN), bytes(&net, p.a, SRC, LEN));
    // Both ends now use the former alternate path and report Migrated.
    assert_both_migrated(&mut net, &p, LIDS);
    for n in 0..2 {
        assert_eq!(net.nodes[n].engine.counters().path_migrations, 1);
    }
    // Two ACK timeouts on the primary path, then the migration: nothing was
    // lost for good, the retry count was not exhausted.
    assert_eq!(net.nodes[0].engine.counters().timeouts, 2);
    let w = wire(&mut net);
    let first_alt = w.iter().position(|&(d, _)| d == LID_B + 1).expect("alt");
    assert!(w[..first_alt].iter().all(|&(d, m)| d == LID_B && !m));
    // After the migration, requests and responses carry MigReq = 1 (9.2.4).
    assert!(w[first_alt..]
        .iter()
        .all(|&(d, m)| m && (d == LID_B + 1 || d == LID_A + 1)));
    assert!(w[first_alt..].iter().any(|&(d, _)| d == LID_A + 1));
}

#[test]
fn ad_10_qp_not_armed_does_not_migrate_and_exceeds_retries() {
    let mut net = net(2);
    let o = ConnOpts {
        retry_cnt: 2,
        ..ConnOpts::default()
    };
    // An alternate path loaded but not armed.
    let p = alt_pair(&mut net, &o, LIDS, MigState::Migrated, MigState::Migrated);
    kill_primary(&mut net);
    send(&mut net, &p);
    let ca = wait_cqe(&mut net, p.a, p.cq_a);
    assert_eq!(ca.status, WcStatus::RetryExcErr);
    assert_eq!(net.nodes[0].engine.counters().timeouts, 3);
    assert_eq!(mig_state(&net, 0, p.qa), (MigState::Migrated, LID_B));
    assert_eq!(net.nodes[0].engine.counters().path_migrations, 0);
    assert!(!events(&mut net, 0).contains(&Event::PathMigrated { qpn: p.qa }));
    assert!(wire(&mut net).iter().all(|&(d, m)| d == LID_B && !m));
}

#[test]
fn ad_10_responder_not_armed_drops_the_alternate_path() {
    let mut net = net(2);
    let o = ConnOpts {
        retry_cnt: 3,
        ..ConnOpts::default()
    };
    // B holds the alternate path but is not armed: C9-54 takes only the
    // primary remote LID then.
    let p = alt_pair(&mut net, &o, LIDS, MigState::Armed, MigState::Migrated);
    kill_primary(&mut net);
    send(&mut net, &p);
    let ca = wait_cqe(&mut net, p.a, p.cq_a);
    assert_eq!(ca.status, WcStatus::RetryExcErr);
    assert_eq!(mig_state(&net, 0, p.qa).0, MigState::Migrated);
    assert_eq!(mig_state(&net, 1, p.qb), (MigState::Migrated, LID_A));
    let drops = net.nodes[1].engine.counters().dropped(RxDrop::BadSlid);
    assert!(drops > 0, "B dropped the alternate path's packets");
    assert_eq!(net.nodes[1].engine.counters().path_migrations, 0);
}

#[test]
fn ad_10_not_armed_responder_raises_the_path_migration_error_event_once() {
    // A migrates (its primary path dies) and asks B to follow with MigReq = 1
    // on B's alternate path; B holds that path but is not Armed, so it cannot
    // migrate: it drops every such packet (C9-54, C9-57) and raises the path
    // migration error event once, not once per resent packet.
    let mut net = net(2);
    let o = ConnOpts {
        retry_cnt: 3,
        ..ConnOpts::default()
    };
    let p = alt_pair(&mut net, &o, LIDS, MigState::Armed, MigState::Migrated);
    kill_primary(&mut net);
    send(&mut net, &p);
    assert_eq!(
        wait_cqe(&mut net, p.a, p.cq_a).status,
        WcStatus::RetryExcErr
    );
    let refused = wire(&mut net)
        .iter()
        .filter(|&&(d, m)| d == LID_B + 1 && m)
        .count();
    assert!(refused > 1, "A resent its migrated request ({refused})");
    let c = net.nodes[1].engine.counters();
    assert!(c.dropped(RxDrop::BadSlid) >= refused as u64);
    assert_eq!(c.path_migration_errors, 1);
    assert_eq!(c.path_migrations, 0);
    assert_eq!(
        events(&mut net, 1),
        vec![Event::PathMigrationError { qpn: p.qb }]
    );
    assert_eq!(mig_state(&net, 1, p.qb), (MigState::Migrated, LID_A));
    // The requester side migrated (its event) and raised no error event.
    let ea = events(&mut net, 0);
    assert!(ea.contains(&Event::PathMigrated { qpn: p.qa }));
    assert!(!ea.contains(&Event::PathMigrationError { qpn: p.qa }));
    assert_eq!(net.nodes[0].engine.counters().path_migration_errors, 0);
}

#[test]
fn ad_10_path_migration_error_event_again_after_a_new_alternate_path() {
    // One event per refused migration: loading a new alternate path (still
    // not armed) re-enables it, and A's next resent MigReq raises it again.
    let mut net = net(7);
    let o = ConnOpts {
        retry_cnt: 7,
        ..ConnOpts::default()
    };
    let p = alt_pair(&mut net, &o, LIDS, MigState::Armed, MigState::Migrated);
    kill_primary(&mut net);
    send(&mut net, &p);
    let errors = |n: &mut Net| n.nodes[1].engine.counters().path_migration_errors;
    assert!(net.run_until(1_000_000, |n| errors(n) == 1));
    assert_eq!(
        events(&mut net, 1),
        vec![Event::PathMigrationError { qpn: p.qb }]
    );
    load_alt(&mut net, 1, p.qb, LID_A, MigState::Migrated);
    assert!(net.run_until(1_000_000, |n| errors(n) == 2));
    assert_eq!(
        events(&mut net, 1),
        vec![Event::PathMigrationError { qpn: p.qb }]
    );
    assert_eq!(
        wait_cqe(&mut net, p.a, p.cq_a).status,
        WcStatus::RetryExcErr
    );
    assert_eq!(errors(&mut net), 2);
    assert!(events(&mut net, 1).is_empty());
}

#[test]
fn ad_10_migrate_on_request_swaps_paths_without_event() {
    let mut net = net(2);
    let o = ConnOpts::default();
    let p = alt_pair(&mut net, &o, LIDS, MigState::Armed, MigState::Armed);
    migrate_on_request(&mut net, p.qa);
    assert_eq!(mig_state(&net, 0, p.qa), (MigState::Migrated, LID_B + 1));
    let (_, a, _) = net.nodes[0].engine.query_qp(p.qa).unwrap();
    assert_eq!(a.alt_av.dlid, LID_B, "the old primary is the alternate");
    assert!(events(&mut net, 0).is_empty());
    // The first request on the new path carries MigReq = 1 and moves B.
    net.sniffed = Some(Vec::new());
    send(&mut net, &p);
    assert_eq!(wait_cqe(&mut net, p.a, p.cq_a).status, WcStatus::Success);
    assert_eq!(wait_cqe(&mut net, p.b, p.cq_b).status, WcStatus::Success);
    assert_eq!(wire(&mut net).first(), Some(&(LID_B + 1, true)));
    assert_eq!(mig_state(&net, 1, p.qb), (MigState::Migrated, LID_A + 1));
    assert_eq!(events(&mut net, 1), vec![Event::PathMigrated { qpn: p.qb }]);
    // Re-arming (the old primary as the alternate) clears MigReq.
    let r = QpAttr {
        path_mig_state: MigState::Rearm,
        ..QpAttr::default()
    };
    let now = net.now;
    for (n, q) in [(0, p.qa), (1, p.qb)] {
        net.nodes[n]
            .engine
            .modify_qp(q, &r, AttrMask::PATH_MIG_STATE, now)
            .expect("rearm");
        assert_eq!(mig_state(&net, n, q).0, MigState::Armed);
    }
    net.sniffed = Some(Vec::new());
    send(&mut net, &p);
    assert_eq!(wait_cqe(&mut net, p.a, p.cq_a).status, WcStatus::Success);
    assert!(wire(&mut net).iter().all(|&(_, m)| !m));
}

#[test]
fn ad_10_modify_validation_of_alt_path_and_migration_state() {
    let mut net = net(2);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let now = net.now;
    let e = &mut net.nodes[0].engine;
    // Arming needs an alternate path.
    let arm = QpAttr {
        path_mig_state: MigState::Rearm,
        ..QpAttr::default()
    };
    assert_eq!(
        e.modify_qp(p.qa, &arm, AttrMask::PATH_MIG_STATE, now),
        Err(VerbError::InvalidAttr)
    );
    // Bad alternate port, P_Key index, timeout, SL.
    let mask = AttrMask::ALT_PATH;
    for bad in [
        QpAttr {
            alt_port_num: 2,
            ..alt_attr(LID_B, MigState::Migrated)
        },
        QpAttr {
            alt_pkey_index: 1,
            ..alt_attr(LID_B, MigState::Migrated)
        },
        QpAttr {
            alt_timeout: 32,
            ..alt_attr(LID_B, MigState::Migrated)
        },
        QpAttr {
            alt_av: AddressVector {
                sl: 16,
                ..alt_attr(LID_B, MigState::Migrated).alt_av
            },
            ..alt_attr(LID_B, MigState::Migrated)
        },
    ] {
        assert_eq!(
            e.modify_qp(p.qa, &bad, mask, now),
            Err(VerbError::InvalidAttr)
        );
    }
    // A refused modify changed nothing (QS-02).
    let (_, a, _) = e.query_qp(p.qa).unwrap();
    assert_eq!(a.alt_av, AddressVector::default());
    assert_eq!(a.path_mig_state, MigState::Migrated);
    // The alternate path is not an attribute of Reset -> Init, nor of UD.
    let (qud, _) = {
        let cq = e.create_cq().unwrap();
        let pd = net.nodes[0].pd;
        let e = &mut net.nodes[0].engine;
        let q = e
            .create_qp(transport::verbs::QpInit {
                qp_type: QpType::Rc,
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: transport::verbs::QpCap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .unwrap();
        (q, cq)
    };
    let e = &mut net.nodes[0].engine;
    let init = QpAttr {
        state: Some(QpState::Init),
        port_num: 1,
        ..alt_attr(LID_B, MigState::Migrated)
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    assert_eq!(
        e.modify_qp(qud, &init, m | AttrMask::ALT_PATH, now),
        Err(VerbError::InvalidTransition)
    );
    e.modify_qp(qud, &init, m, now).expect("init");
    // Init -> RTR takes the alternate path; migration state only from RTR -> RTS.
    let rtr = QpAttr {
        state: Some(QpState::Rtr),
        path_mtu: transport::verbs::Mtu::M1024,
        dest_qp_num: p.qb,
        av: AddressVector {
            dlid: LID_B,
            ..AddressVector::default()
        },
        ..alt_attr(LID_B, MigState::Armed)
    };
    assert_eq!(
        e.modify_qp(
            qud,
            &rtr,
            RC_RTR_MASK | AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE,
            now
        ),
        Err(VerbError::InvalidTransition)
    );
    e.modify_qp(qud, &rtr, RC_RTR_MASK | AttrMask::ALT_PATH, now)
        .expect("rtr with alt path");
    let (_, a, _) = e.query_qp(qud).unwrap();
    assert_eq!(a.alt_av.dlid, LID_B + 1);
    assert_eq!(a.path_mig_state, MigState::Migrated);
    // Armed at RTR -> RTS with the alternate path loaded before.
    let rts = QpAttr {
        state: Some(QpState::Rts),
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        path_mig_state: MigState::Rearm,
        ..QpAttr::default()
    };
    let m_rts = AttrMask::STATE
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::SQ_PSN
        | AttrMask::MAX_QP_RD_ATOMIC
        | AttrMask::PATH_MIG_STATE;
    e.modify_qp(qud, &rts, m_rts, now).expect("rts armed");
    assert_eq!(e.query_qp(qud).unwrap().1.path_mig_state, MigState::Armed);
    // Reset forgets the alternate path: arming needs a new one.
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    e.modify_qp(qud, &reset, AttrMask::STATE, now).unwrap();
    let (_, a, _) = e.query_qp(qud).unwrap();
    assert_eq!(a.path_mig_state, MigState::Migrated);
    assert_eq!(a.alt_av, AddressVector::default());
}

#[test]
fn ad_10_migration_with_loss_probes_on_and_a_write() {
    // The default limits (loss probes before the ACK timeout, issue 14):
    // the probes go to the dead path too, the ACK timeouts still migrate.
    let mut net = lmc_net(LID_A, LID_B, 9, Limits::default());
    let o = ConnOpts::default();
    let p = alt_pair(&mut net, &o, LIDS, MigState::Armed, MigState::Armed);
    kill_primary(&mut net);
    let ka = net.reg_all(p.a, ALL_ACCESS);
    let kb = net.reg_all(p.b, ALL_ACCESS);
    fill(&mut net, p.a, SRC, LEN, 0x33);
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(SRC, LEN as u32, ka));
    w.remote_addr = DST;
    w.rkey = kb;
    net.nodes[p.a].engine.post_send(p.qa, w).expect("write");
    assert_eq!(wait_cqe(&mut net, p.a, p.cq_a).status, WcStatus::Success);
    assert_eq!(bytes(&net, p.b, DST, LEN), bytes(&net, p.a, SRC, LEN));
    assert_both_migrated(&mut net, &p, LIDS);
}

#[test]
fn ad_10_alternate_path_with_grh_passes_the_alternate_gid_checks() {
    // Primary paths without a GRH, alternate paths with one (C9-47.1.1 DGID
    // steps 6-7, SGID steps 5-6): a GRH packet is valid only on the
    // alternate path, and only while Armed.
    let mut net = net(2);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let global = |net: &Net, remote: usize, dlid: u16| AddressVector {
        dlid: dlid + 1,
        src_path_bits: 1,
        grh: Some(transport::verbs::GlobalRoute {
            dgid: net.nodes[remote].engine.port().gid(),
            hop_limit: 1,
            ..Default::default()
        }),
        ..AddressVector::default()
    };
    let (alt_a, alt_b) = (global(&net, 1, LID_B), global(&net, 0, LID_A));
    arm_with(&mut net, 0, p.qa, alt_a);
    arm_with(&mut net, 1, p.qb, alt_b);
    kill_primary(&mut net);
    send(&mut net, &p);
    assert_eq!(wait_cqe(&mut net, p.a, p.cq_a).status, WcStatus::Success);
    assert_eq!(wait_cqe(&mut net, p.b, p.cq_b).status, WcStatus::Success);
    assert_eq!(bytes(&net, p.b, DST, LEN), bytes(&net, p.a, SRC, LEN));
    assert_eq!(mig_state(&net, 1, p.qb), (MigState::Migrated, LID_A + 1));
    assert_eq!(
        net.nodes[1].engine.counters().dropped(RxDrop::GrhMismatch),
        0
    );
    assert_eq!(events(&mut net, 1), vec![Event::PathMigrated { qpn: p.qb }]);
    let sent = wire(&mut net);
    assert!(sent.iter().any(|&(d, m)| d == LID_B + 1 && m));
}

#[test]
fn ad_10_roce_migration_to_the_alternate_gid() {
    // RoCE (WF-10): the primary path is the peers' IPv4 GIDs, the alternate
    // their IPv6 GIDs (A17.4.5 addresses, checked per path while Armed).
    let mut net = Net::new_roce(2, 0x40_0000, 5);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    arm_with(&mut net, 0, p.qa, roce_av(2, 1));
    arm_with(&mut net, 1, p.qb, roce_av(1, 1));
    // Lose every IPv4 frame to node 2 (10.0.0.2): A's primary path.
    net.lose = Some(Box::new(|b: &[u8]| {
        b.get(12..14) == Some(&[0x08, 0x00][..]) && b.get(30..34) == Some(&[10, 0, 0, 2][..])
    }));
    send(&mut net, &p);
    assert_eq!(wait_cqe(&mut net, p.a, p.cq_a).status, WcStatus::Success);
    assert_eq!(wait_cqe(&mut net, p.b, p.cq_b).status, WcStatus::Success);
    assert_eq!(bytes(&net, p.b, DST, LEN), bytes(&net, p.a, SRC, LEN));
    for (n, q) in [(0, p.qa), (1, p.qb)] {
        let (_, a, _) = net.nodes[n].engine.query_qp(q).unwrap();
        assert_eq!(a.path_mig_state, MigState::Migrated);
        assert_eq!(a.av.grh.map(|g| g.sgid_index), Some(1), "on the IPv6 GIDs");
        assert_eq!(events(&mut net, n), vec![Event::PathMigrated { qpn: q }]);
    }
}

#[test]
fn ad_10_uc_responder_follows_a_migration_of_its_peer() {
    // UC has alternate paths too (seed 001: RC, UC) but no ACK timer: only
    // the consumer's migration moves the requester, the MigReq its peer.
    let mut net = net(2);
    let o = ConnOpts {
        qp_type: QpType::Uc,
        ..ConnOpts::default()
    };
    let p = alt_pair(&mut net, &o, LIDS, MigState::Armed, MigState::Armed);
    migrate_on_request(&mut net, p.qa);
    kill_primary(&mut net);
    send(&mut net, &p);
    assert_eq!(wait_cqe(&mut net, p.b, p.cq_b).status, WcStatus::Success);
    assert_eq!(bytes(&net, p.b, DST, LEN), bytes(&net, p.a, SRC, LEN));
    assert_eq!(mig_state(&net, 1, p.qb), (MigState::Migrated, LID_A + 1));
    assert_eq!(events(&mut net, 1), vec![Event::PathMigrated { qpn: p.qb }]);
    assert!(wire(&mut net).iter().all(|&(d, m)| d == LID_B + 1 && m));
}
