//! The receive reorder hold (`engine::reorder`, vhca policy) on XRC
//! (SR-02): a TGT QP holds a request that overtook its predecessor as an RC
//! QP does, so a swap of two XRC SEND packets costs no sequence NAK (RL-03).

mod common;

use common::*;
use transport::engine::Limits;
use transport::psn;
use transport::verbs::{RecvWr, WcStatus, WrOpcode};
use transport::wire::PacketRepr;

#[test]
fn an_adjacent_swap_of_xrc_send_packets_costs_no_sequence_nak() {
    let mut net = Net::with_limits(2, 1 << 20, 3, Limits::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let (XrcInitiator { ini, cq: icq }, XrcTarget { xrcd, cq: tcq, .. }) = xrc_pair(&mut net);
    let srq = {
        let n = &mut net.nodes[1];
        n.engine
            .create_xrc_srq(n.pd, xrcd, tcq, 16, 4, 0)
            .expect("xrc srq")
    };
    let dst = MEM_BASE + 0x1_0000;
    net.nodes[1]
        .engine
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 7,
                sges: sge(dst, 8192, kb),
            },
        )
        .expect("post srq recv");
    fill(&mut net, 0, MEM_BASE, 4000, 5);
    net.nodes[0]
        .engine
        .post_send_xrc(
            ini,
            send_wr(1, WrOpcode::Send, sge(MEM_BASE, 4000, ka)),
            srq,
        )
        .unwrap();
    // Every packet node 0 sends, in order, then delivered with the second
    // and third swapped.
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::new();
    {
        let n = &mut net.nodes[0];
        while let Some(len) = n.engine.poll_transmit(&mut n.mem, net.now, &mut buf) {
            out.push(buf[..len].to_vec());
        }
    }
    assert_eq!(out.len(), 4, "a 4000-byte SEND at a 1024-byte MTU");
    let psn_of = |p: &[u8]| PacketRepr::parse(p).unwrap().transport.bth.psn;
    assert_eq!(psn_of(&out[2]), psn::add(psn_of(&out[1]), 1));
    out.swap(1, 2);
    let now = net.now;
    let to = &mut net.nodes[1];
    for p in &out {
        to.engine.handle_packet(p, &mut to.mem, now);
    }
    let got = wait(&mut net, 1, tcq, 1);
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (7, WcStatus::Success, 4000)
    );
    assert_eq!(bytes(&net, 1, dst, 4000), bytes(&net, 0, MEM_BASE, 4000));
    let sent = wait(&mut net, 0, icq, 1);
    assert_eq!(sent[0].status, WcStatus::Success);
    let c = net.nodes[1].engine.counters();
    assert_eq!(c.naks_sent, 0, "no sequence NAK for a swap (RL-03)");
    assert_eq!((c.reorder.held, c.reorder.in_order), (1, 1));
    assert_eq!(net.nodes[0].engine.counters().resent_packets, 0);
}
