//! XRC between two engines (SR-02, PV-08, WF-06): an INI QP on node 0 sends
//! into XRC SRQs of node 1 through one TGT QP; the wire carries XRC opcodes
//! with XRCETH, and the target takes the SRQ its XRCETH names, in its own XRC
//! domain only.

mod common;

use common::*;
use transport::engine::NakReason;
use transport::verbs::{Handle, QpType, RecvWr, VerbError, WcOpcode, WcStatus, WrOpcode};
use transport::wire::ext::{AethSyndrome, NakCode};
use transport::wire::opcode::{Direction, Service};
use transport::wire::PacketRepr;

fn xrc_srq(net: &mut Net, xrcd: Handle, cq: Handle) -> Handle {
    let n = &mut net.nodes[1];
    n.engine
        .create_xrc_srq(n.pd, xrcd, cq, 16, 4, 0)
        .expect("xrc srq")
}

fn post_srq(net: &mut Net, srq: Handle, wr_id: u64, addr: u64, len: u32, lkey: u32) {
    net.nodes[1]
        .engine
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id,
                sges: sge(addr, len, lkey),
            },
        )
        .expect("post srq recv");
}

/// The sniffed packets, parsed: (opcode byte, service, direction, XRCETH's
/// SRQ, AETH syndrome).
type Seen = (u8, Service, Direction, Option<u32>, Option<AethSyndrome>);

fn seen(net: &mut Net) -> Vec<Seen> {
    net.sniffed
        .take()
        .unwrap_or_default()
        .iter()
        .map(|b| {
            let p = PacketRepr::parse(b).expect("a valid packet");
            let t = &p.transport;
            let info = t.bth.opcode.info();
            (
                t.bth.opcode.as_u8(),
                info.service,
                info.direction(),
                t.ext.xrceth.map(|x| x.xrc_srq),
                t.ext.aeth.map(|a| a.syndrome),
            )
        })
        .collect()
}

#[test]
fn sr02_xrc_send_lands_in_the_srq_named_by_xrceth() {
    let mut net = Net::new(2, 1 << 20, 1);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (i, t) = xrc_pair(&mut net);
    let s1 = xrc_srq(&mut net, t.xrcd, t.cq);
    let s2 = xrc_srq(&mut net, t.xrcd, t.cq);
    post_srq(&mut net, s1, 11, MEM_BASE + 0x1_0000, 8192, kb);
    post_srq(&mut net, s2, 22, MEM_BASE + 0x2_0000, 8192, kb);
    net.sniffed = Some(Vec::new());

    // A 3-packet SEND to SRQ 2, then a 1-packet SEND with immediate to SRQ 1.
    fill(&mut net, 0, MEM_BASE, 3000, 5);
    fill(&mut net, 0, MEM_BASE + 0x4000, 100, 9);
    let e = &mut net.nodes[0].engine;
    e.post_send_xrc(
        i.ini,
        send_wr(1, WrOpcode::Send, sge(MEM_BASE, 3000, ka)),
        s2,
    )
    .unwrap();
    let mut w = send_wr(2, WrOpcode::SendWithImm, sge(MEM_BASE + 0x4000, 100, ka));
    w.imm_or_inv = 0xabcd;
    e.post_send_xrc(i.ini, w, s1).unwrap();

    let sent = wait(&mut net, 0, i.cq, 2);
    assert!(
        sent.iter().all(|c| c.status == WcStatus::Success),
        "{sent:?}"
    );
    let got = wait(&mut net, 1, t.cq, 2);
    // Both completions on the SRQs' CQ, for the TGT QP, each from the WQE of
    // the SRQ its XRCETH named.
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.status, c.opcode, c.byte_len, c.qp_num, c.src_qp))
            .collect::<Vec<_>>(),
        vec![
            (22, WcStatus::Success, WcOpcode::Recv, 3000, t.tgt, i.ini),
            (11, WcStatus::Success, WcOpcode::Recv, 100, t.tgt, i.ini),
        ]
    );
    assert_eq!(got[1].imm_data, 0xabcd);
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x2_0000, 3000),
        bytes(&net, 0, MEM_BASE, 3000)
    );
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x1_0000, 100),
        bytes(&net, 0, MEM_BASE + 0x4000, 100)
    );

    // On the wire (WF-06): XRC requests, each with XRCETH naming its SRQ,
    // and XRC acknowledgements without it.
    let pkts = seen(&mut net);
    let reqs: Vec<_> = pkts
        .iter()
        .filter(|p| p.2 == Direction::Request)
        .map(|p| (p.0, p.1, p.3))
        .collect();
    assert_eq!(
        reqs,
        vec![
            (0xa0, Service::Xrc, Some(s2)), // XRC SEND FIRST
            (0xa1, Service::Xrc, Some(s2)), // MIDDLE
            (0xa2, Service::Xrc, Some(s2)), // LAST
            (0xa5, Service::Xrc, Some(s1)), // SEND ONLY WITH IMMEDIATE
        ]
    );
    let acks: Vec<_> = pkts.iter().filter(|p| p.2 == Direction::Response).collect();
    assert!(!acks.is_empty());
    for a in acks {
        assert_eq!((a.0, a.1, a.3), (0xb1, Service::Xrc, None), "{a:?}");
        assert!(matches!(a.4, Some(AethSyndrome::Ack { .. })), "{a:?}");
    }
}

#[test]
fn sr02_xrc_write_read_and_atomic_reach_the_srq_pd() {
    let mut net = Net::new(2, 1 << 20, 2);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (i, t) = xrc_pair(&mut net);
    let s = xrc_srq(&mut net, t.xrcd, t.cq);
    net.sniffed = Some(Vec::new());

    fill(&mut net, 0, MEM_BASE, 2500, 3);
    fill(&mut net, 1, MEM_BASE + 0x3_0000, 1500, 8);
    net.nodes[1].mem.bytes[0x5_0000..0x5_0008].copy_from_slice(&40u64.to_le_bytes());
    let mut write = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, 2500, ka));
    write.remote_addr = MEM_BASE + 0x2_0000;
    write.rkey = kb;
    let mut read = send_wr(2, WrOpcode::RdmaRead, sge(MEM_BASE + 0x8000, 1500, ka));
    read.remote_addr = MEM_BASE + 0x3_0000;
    read.rkey = kb;
    let mut add = send_wr(3, WrOpcode::AtomicFetchAdd, sge(MEM_BASE + 0x9000, 8, ka));
    add.remote_addr = MEM_BASE + 0x5_0000;
    add.rkey = kb;
    add.swap_add = 2;
    let e = &mut net.nodes[0].engine;
    for w in [write, read, add] {
        e.post_send_xrc(i.ini, w, s).unwrap();
    }
    let done = wait(&mut net, 0, i.cq, 3);
    assert!(
        done.iter().all(|c| c.status == WcStatus::Success),
        "{done:?}"
    );
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x2_0000, 2500),
        bytes(&net, 0, MEM_BASE, 2500)
    );
    assert_eq!(
        bytes(&net, 0, MEM_BASE + 0x8000, 1500),
        bytes(&net, 1, MEM_BASE + 0x3_0000, 1500)
    );
    assert_eq!(bytes(&net, 0, MEM_BASE + 0x9000, 8), 40u64.to_le_bytes());
    assert_eq!(bytes(&net, 1, MEM_BASE + 0x5_0000, 8), 42u64.to_le_bytes());
    assert!(net.poll(1, t.cq).is_none(), "no receive completion");

    // Every request is an XRC one with XRCETH; every response an XRC one
    // (READ responses 0xad..0xb0, the atomic ACK 0xb2).
    let pkts = seen(&mut net);
    for p in &pkts {
        assert_eq!(p.1, Service::Xrc, "{p:?}");
        assert_eq!(p.3.is_some(), p.2 == Direction::Request, "{p:?}");
    }
    let ops: Vec<u8> = pkts.iter().map(|p| p.0).collect();
    for op in [0xa6, 0xa8, 0xac, 0xad, 0xaf, 0xb4, 0xb2] {
        assert!(ops.contains(&op), "0x{op:02x} in {ops:02x?}");
    }
}

#[test]
fn pv08_xrc_srq_of_another_domain_is_naked() {
    let mut net = Net::new(2, 1 << 20, 3);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (i, t) = xrc_pair(&mut net);
    // An XRC SRQ in another domain of the same node, with a WQE posted.
    let other = net.nodes[1].engine.create_xrcd().unwrap();
    let foreign = xrc_srq(&mut net, other, t.cq);
    post_srq(&mut net, foreign, 7, MEM_BASE + 0x1_0000, 4096, kb);
    net.sniffed = Some(Vec::new());

    let e = &mut net.nodes[0].engine;
    e.post_send_xrc(
        i.ini,
        send_wr(1, WrOpcode::Send, sge(MEM_BASE, 64, ka)),
        foreign,
    )
    .unwrap();
    let c = wait_cqe(&mut net, 0, i.cq);
    assert_eq!(c.status, WcStatus::RemInvReqErr);
    // The foreign SRQ's WQE is untouched, nothing completed at the target.
    assert_eq!(net.nodes[1].engine.query_srq(foreign).unwrap().0, 1);
    assert!(net.poll(1, t.cq).is_none());
    assert_eq!(net.nodes[1].engine.counters().naked(NakReason::XrcSrq), 1);
    let pkts = seen(&mut net);
    assert_eq!(pkts[0].3, Some(foreign));
    let nak = pkts
        .iter()
        .find(|p| p.2 == Direction::Response)
        .expect("a response");
    assert_eq!(
        (nak.0, nak.4),
        (0xb1, Some(AethSyndrome::Nak(NakCode::InvalidRequest)))
    );
}

#[test]
fn pv08_xrc_srq_number_that_is_not_an_xrc_srq_is_naked() {
    for plain in [true, false] {
        let mut net = Net::new(2, 1 << 20, 4);
        let ka = net.reg_all(0, ALL_ACCESS);
        let kb = net.reg_all(1, ALL_ACCESS);
        let (i, t) = xrc_pair(&mut net);
        // A plain SRQ of the target's node (not XRC), or no SRQ at all.
        let n = &mut net.nodes[1];
        let srqn = if plain {
            let s = n.engine.create_srq(n.pd, 16, 4, 0).unwrap();
            post_srq(&mut net, s, 7, MEM_BASE + 0x1_0000, 4096, kb);
            s
        } else {
            0x77_7777
        };
        let e = &mut net.nodes[0].engine;
        e.post_send_xrc(
            i.ini,
            send_wr(1, WrOpcode::Send, sge(MEM_BASE, 64, ka)),
            srqn,
        )
        .unwrap();
        let c = wait_cqe(&mut net, 0, i.cq);
        assert_eq!(c.status, WcStatus::RemInvReqErr, "plain {plain}");
        assert!(net.poll(1, t.cq).is_none());
        assert_eq!(net.nodes[1].engine.counters().naked(NakReason::XrcSrq), 1);
        if plain {
            assert_eq!(net.nodes[1].engine.query_srq(srqn).unwrap().0, 1);
        }
    }
}

#[test]
fn sr02_xrc_objects_and_queue_rules() {
    let mut net = Net::new(2, 1 << 20, 5);
    let ka = net.reg_all(0, ALL_ACCESS);
    let (i, t) = xrc_pair(&mut net);
    let s = xrc_srq(&mut net, t.xrcd, t.cq);
    let e1 = &mut net.nodes[1].engine;
    assert_eq!(e1.xrc_srq(s), Ok(Some((t.xrcd, t.cq))));
    assert_eq!(e1.qp_xrcd(t.tgt), Ok(Some(t.xrcd)));
    // The domain holds while an SRQ or TGT QP is in it; the CQ while the SRQ is.
    assert_eq!(e1.destroy_xrcd(t.xrcd), Err(VerbError::Busy));
    assert_eq!(e1.destroy_cq(t.cq), Err(VerbError::Busy));
    // Neither half has a receive queue; a TGT QP has no send queue.
    let r = RecvWr {
        wr_id: 1,
        sges: Vec::new(),
    };
    assert_eq!(e1.post_recv(t.tgt, r.clone()), Err(VerbError::InvalidWr));
    let w = send_wr(1, WrOpcode::Send, sge(MEM_BASE, 8, ka));
    assert_eq!(e1.post_send(t.tgt, w.clone()), Err(VerbError::InvalidWr));
    assert_eq!(
        e1.post_send_xrc(t.tgt, w.clone(), s),
        Err(VerbError::InvalidWr)
    );
    // A TGT QP only through create_xrc_tgt_qp, with a live domain.
    assert_eq!(e1.create_xrc_tgt_qp(9999), Err(VerbError::InvalidHandle));
    let e0 = &mut net.nodes[0].engine;
    assert_eq!(e0.post_recv(i.ini, r), Err(VerbError::InvalidWr));
    // An INI QP's WR names its SRQ (24 bits); no other QP's does.
    assert_eq!(e0.post_send(i.ini, w.clone()), Err(VerbError::InvalidWr));
    assert_eq!(
        e0.post_send_xrc(i.ini, w.clone(), 1 << 24),
        Err(VerbError::InvalidAttr)
    );
    // FLUSH and ATOMIC WRITE have no XRC opcode.
    let mut f = send_wr(2, WrOpcode::AtomicWrite, Vec::new());
    f.remote_addr = MEM_BASE;
    assert_eq!(e0.post_send_xrc(i.ini, f, s), Err(VerbError::InvalidWr));

    // Teardown in the order verbs allow.
    let e1 = &mut net.nodes[1].engine;
    e1.destroy_srq(s).unwrap();
    assert_eq!(e1.destroy_xrcd(t.xrcd), Err(VerbError::Busy));
    e1.destroy_qp(t.tgt).unwrap();
    e1.destroy_xrcd(t.xrcd).unwrap();
    e1.destroy_cq(t.cq).unwrap();
}

#[test]
fn sr02_rc_request_to_a_tgt_qp_is_dropped() {
    // C9-39: an RC SEND addressed to a TGT QP is not of the QP's service.
    let mut net = Net::new(2, 1 << 20, 6);
    let ka = net.reg_all(0, ALL_ACCESS);
    let (_, t) = xrc_pair(&mut net);
    let (rc, cq) = new_qp(&mut net, 0, QpType::Rc, qp_cap(4, 1, 0), false);
    let o = ConnOpts {
        retry_cnt: 1,
        timeout: 1,
        ..ConnOpts::default()
    };
    bring_up(&mut net, 0, rc, &o, 2, t.tgt, 0x10, 0x10);
    let w = send_wr(1, WrOpcode::Send, sge(MEM_BASE, 8, ka));
    net.nodes[0].engine.post_send(rc, w).unwrap();
    // Never acknowledged: the RC QP retries and gives up.
    assert_eq!(wait_cqe(&mut net, 0, cq).status, WcStatus::RetryExcErr);
    let dropped = net.nodes[1]
        .engine
        .counters()
        .dropped(transport::engine::RxDrop::ServiceMismatch);
    assert!(dropped >= 1, "{dropped}");
    assert!(net.poll(1, t.cq).is_none());
}

#[test]
fn sr02_xrc_read_response_uses_the_pd_of_its_own_request() {
    // A READ answered after a later request of the same TGT QP named an XRC
    // SRQ of another PD: its response still reads under the READ's SRQ's PD.
    let mut net = Net::new(2, 1 << 20, 7);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (i, t) = xrc_pair(&mut net);
    let s_read = xrc_srq(&mut net, t.xrcd, t.cq);
    let other_pd = net.nodes[1].engine.mrs().alloc_pd().unwrap();
    let n = &mut net.nodes[1];
    let s_send = n
        .engine
        .create_xrc_srq(other_pd, t.xrcd, t.cq, 16, 1, 0)
        .unwrap();
    // The SEND's buffer: an MR of the other PD.
    let kb2 = n
        .engine
        .mrs()
        .reg_mr(
            other_pd,
            MEM_BASE + 0x8_0000,
            4096,
            ALL_ACCESS,
            4096,
            vec![MEM_BASE + 0x8_0000],
        )
        .unwrap();
    post_srq(&mut net, s_send, 5, MEM_BASE + 0x8_0000, 4096, kb2);
    fill(&mut net, 1, MEM_BASE + 0x3_0000, 2000, 4);
    let mut read = send_wr(1, WrOpcode::RdmaRead, sge(MEM_BASE + 0x6000, 2000, ka));
    read.remote_addr = MEM_BASE + 0x3_0000;
    read.rkey = kb;
    let e = &mut net.nodes[0].engine;
    e.post_send_xrc(i.ini, read, s_read).unwrap();
    e.post_send_xrc(
        i.ini,
        send_wr(2, WrOpcode::Send, sge(MEM_BASE, 64, ka)),
        s_send,
    )
    .unwrap();
    // Both requests reach the target before it answers either.
    let now = net.now;
    let mut buf = vec![0u8; 8192];
    let mut reqs = Vec::new();
    let n0 = &mut net.nodes[0];
    while let Some(len) = n0.engine.poll_transmit(&mut n0.mem, now, &mut buf) {
        reqs.push(buf[..len].to_vec());
    }
    assert_eq!(reqs.len(), 2);
    let n1 = &mut net.nodes[1];
    for r in &reqs {
        n1.engine.handle_packet(r, &mut n1.mem, now);
    }
    let done = wait(&mut net, 0, i.cq, 2);
    assert!(
        done.iter().all(|c| c.status == WcStatus::Success),
        "{done:?}"
    );
    assert_eq!(
        bytes(&net, 0, MEM_BASE + 0x6000, 2000),
        bytes(&net, 1, MEM_BASE + 0x3_0000, 2000)
    );
    assert_eq!(wait_cqe(&mut net, 1, t.cq).wr_id, 5);
}

/// Node 1's second XRC SRQ in the target's domain, of another PD and with
/// its own CQ, with one WQE posted into an MR of that PD: (SRQ, CQ, buffer).
fn srq_of_another_pd(net: &mut Net, t: &XrcTarget, wr_id: u64) -> (Handle, Handle, u64) {
    let buf = MEM_BASE + 0x8_0000;
    let n = &mut net.nodes[1];
    let pd = n.engine.mrs().alloc_pd().unwrap();
    let cq = n.engine.create_cq().unwrap();
    let srq = n.engine.create_xrc_srq(pd, t.xrcd, cq, 16, 1, 0).unwrap();
    let key = n
        .engine
        .mrs()
        .reg_mr(pd, buf, 4096, ALL_ACCESS, 4096, vec![buf])
        .unwrap();
    post_srq(net, srq, wr_id, buf, 4096, key);
    (srq, cq, buf)
}

/// A request packet with its XRCETH naming `srq` instead, CRCs redone.
fn renamed(bytes: &[u8], srq: u32) -> Vec<u8> {
    reemit(bytes, |p| {
        p.transport.ext.xrceth = Some(transport::wire::ext::XrcethRepr { xrc_srq: srq })
    })
}

#[test]
fn pv08_xrc_continuation_naming_another_srq_is_naked_and_binds_nothing() {
    // Issue 25 item 1: a SEND First names SRQ A; its Last names SRQ B of the
    // same domain but another PD and CQ. The message stays A's: the Last is
    // NAKed Invalid Request, nothing is written under B's PD and nothing
    // completes on B's CQ.
    let mut net = Net::new(2, 1 << 20, 8);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (i, t) = xrc_pair(&mut net);
    let a = xrc_srq(&mut net, t.xrcd, t.cq);
    let a_buf = MEM_BASE + 0x1_0000;
    post_srq(&mut net, a, 11, a_buf, 8192, kb);
    let (b, b_cq, b_buf) = srq_of_another_pd(&mut net, &t, 22);
    fill(&mut net, 1, a_buf, 8192, 0);
    fill(&mut net, 1, b_buf, 4096, 0);
    let a_before = bytes(&net, 1, a_buf, 8192);
    let b_before = bytes(&net, 1, b_buf, 4096);

    fill(&mut net, 0, MEM_BASE, 3000, 5);
    net.nodes[0]
        .engine
        .post_send_xrc(
            i.ini,
            send_wr(1, WrOpcode::Send, sge(MEM_BASE, 3000, ka)),
            a,
        )
        .unwrap();
    let mut reqs = take_sent(&mut net, 0);
    assert_eq!(reqs.len(), 3, "First, Middle, Last");
    reqs[2] = renamed(&reqs[2], b);
    net.sniffed = Some(Vec::new());
    let now = net.now;
    let n1 = &mut net.nodes[1];
    for r in &reqs {
        n1.engine.handle_packet(r, &mut n1.mem, now);
    }
    net.run_until(10_000, |_| false);

    // B's CQ completes nothing, B's buffer and WQE are untouched.
    assert!(net.poll(1, b_cq).is_none(), "A's WQE completed on B's CQ");
    assert_eq!(bytes(&net, 1, b_buf, 4096), b_before);
    assert_eq!(net.nodes[1].engine.query_srq(b).unwrap().0, 1);
    // The Last is refused as a request naming the wrong SRQ (PV-08).
    assert_eq!(net.nodes[1].engine.counters().naked(NakReason::XrcSrq), 1);
    let pkts = seen(&mut net);
    let naks: Vec<_> = pkts
        .iter()
        .filter(|p| p.2 == Direction::Response)
        .filter_map(|p| p.4)
        .filter(|s| matches!(s, AethSyndrome::Nak(_)))
        .collect();
    assert_eq!(naks, vec![AethSyndrome::Nak(NakCode::InvalidRequest)]);
    // A's buffer holds the First and Middle (two 1024-byte packets) and
    // nothing of the Last.
    let a_now = bytes(&net, 1, a_buf, 8192);
    assert_eq!(a_now[..2048], bytes(&net, 0, MEM_BASE, 2048)[..]);
    assert_eq!(a_now[2048..], a_before[2048..]);
    // Whatever A's WQE completes with, it completes on A's CQ.
    while let Some(c) = net.poll(1, t.cq) {
        assert_eq!(c.wr_id, 11, "{c:?}");
        assert_ne!(c.status, WcStatus::Success, "{c:?}");
    }
}
