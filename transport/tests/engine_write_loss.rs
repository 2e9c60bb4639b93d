//! RC WRITE under loss (issue 14, `engine::recovery`): the two losses after
//! which the responder goes silent until the requester acts. After a PSN
//! Sequence Error NAK the responder drops every request but the one it
//! expects, without another NAK (RL-03; seed 004 §3.4). So a lost NAK, or a
//! lost first packet of the go-back it asked for, left the requester with
//! nothing coming back until a probe timeout (at least the host's probe
//! floor, 1 ms on the device tier): on the device tier at 5 % loss these
//! were the larger part of WRITE's ~70 probes a run. The NAK and the go-back's
//! first packet now go twice, so one lost copy leaves the other.

mod common;

use common::loss::loss_pair;
use common::*;
use transport::psn;
use transport::verbs::{Handle, WcStatus, WrOpcode};
use transport::wire::{AethSyndrome, NakCode, PacketRepr};

const PMTU: u32 = 1024;
/// The probe floor: large, so that waiting for a probe shows plainly.
const FLOOR_NS: u64 = 5_000_000;
/// The packets of the lossy WRITE.
const PKTS: u32 = 8;

struct Setup {
    net: Net,
    qa: u32,
    cq_a: Handle,
    ka: u32,
    kb: u32,
    /// The PSN of the lossy WRITE's first packet.
    first: u32,
}

const SRC: u64 = MEM_BASE;
const DST: u64 = MEM_BASE + 0x4_0000;

/// Two nodes, 10 us apart, an RC QP with perftest's timeout, and one clean
/// one-packet WRITE so the round trip is measured.
fn setup(seed: u64) -> Setup {
    let (mut net, p, o, ka, kb) = loss_pair(seed, Some(FLOOR_NS));
    fill(&mut net, 0, SRC, (PKTS * PMTU) as usize, 0x5a);
    let mut s = Setup {
        net,
        qa: p.qa,
        cq_a: p.cq_a,
        ka,
        kb,
        first: psn::add(o.psn_a, 1),
    };
    write(&mut s, 1, PMTU);
    s
}

/// Posts a WRITE of `len` bytes and waits for its completion.
fn write(s: &mut Setup, id: u64, len: u32) {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(SRC, len, s.ka));
    w.rkey = s.kb;
    w.remote_addr = DST;
    s.net.nodes[0].engine.post_send(s.qa, w).unwrap();
    let c = wait(&mut s.net, 0, s.cq_a, 1);
    assert_eq!((c[0].wr_id, c[0].status), (id, WcStatus::Success));
}

fn is_write(pk: &PacketRepr<'_>) -> bool {
    pk.transport.bth.opcode.info().name.contains("WRITE")
}

fn is_seq_nak(pk: &PacketRepr<'_>) -> bool {
    pk.transport
        .ext
        .aeth
        .is_some_and(|a| a.syndrome == AethSyndrome::Nak(NakCode::PsnSequenceError))
}

/// Runs the lossy WRITE and returns how long it took (ns), checking the data.
fn lossy_write(s: &mut Setup) -> u64 {
    let t0 = s.net.now;
    write(s, 2, PKTS * PMTU);
    let n = (PKTS * PMTU) as usize;
    assert_eq!(bytes(&s.net, 1, DST, n), bytes(&s.net, 0, SRC, n));
    s.net.now.0 - t0.0
}

/// The third packet is lost, and so is its first resend: the responder,
/// having NAKed it once, drops the rest of the go-back silently (RL-03).
/// Before, the requester waited a probe timeout (the 5 ms floor) for the
/// probe that found it; now the go-back's first packet goes twice and the
/// copy is the packet the responder waits for.
#[test]
fn a_lost_first_packet_of_a_go_back_does_not_wait_for_a_probe() {
    let mut s = setup(71);
    let lost_psn = psn::add(s.first, 2);
    let mut seen = 0;
    s.net.lose = Some(Box::new(move |b: &[u8]| {
        let Ok(pk) = PacketRepr::parse(b) else {
            return false;
        };
        if !is_write(&pk) || pk.transport.bth.psn != lost_psn {
            return false;
        }
        // The original and the first resend; any later copy passes.
        seen += 1;
        seen <= 2
    }));
    let took = lossy_write(&mut s);
    assert_eq!(s.net.dropped, 2);
    let c = s.net.nodes[0].engine.counters();
    assert_eq!(c.probes, 0, "no probe: {c:?}");
    assert_eq!(c.seq_nak_go_backs, 1, "{c:?}");
    assert!(
        took < FLOOR_NS / 10,
        "done {took} ns after posting: a few round trips, not a probe timeout"
    );
}

/// The third packet is lost and so is the responder's NAK for it: the
/// responder drops the rest silently (RL-03) and nothing came back until a
/// probe timeout. Now the NAK goes twice; the copy starts the go-back, and
/// the requester goes back once (the copy of a NAK it acted on is not a
/// second go-back, nor a retry, RL-10).
#[test]
fn a_lost_sequence_nak_does_not_wait_for_a_probe() {
    let mut s = setup(72);
    let mut naks = 0;
    let lost_psn = psn::add(s.first, 2);
    let mut data_lost = false;
    s.net.lose = Some(Box::new(move |b: &[u8]| {
        let Ok(pk) = PacketRepr::parse(b) else {
            return false;
        };
        if is_write(&pk) && pk.transport.bth.psn == lost_psn && !data_lost {
            data_lost = true;
            return true;
        }
        if is_seq_nak(&pk) {
            naks += 1;
            return naks == 1;
        }
        false
    }));
    let took = lossy_write(&mut s);
    assert_eq!(s.net.dropped, 2);
    let c = s.net.nodes[0].engine.counters();
    assert_eq!(c.probes, 0, "no probe: {c:?}");
    assert_eq!(c.seq_nak_go_backs, 1, "one go-back: {c:?}");
    assert!(
        took < FLOOR_NS / 10,
        "done {took} ns after posting: a few round trips, not a probe timeout"
    );
}

/// Without loss nothing goes twice: one NAK-free WRITE resends nothing.
#[test]
fn without_loss_nothing_is_sent_twice() {
    let mut s = setup(73);
    let took = lossy_write(&mut s);
    let c = s.net.nodes[0].engine.counters();
    assert_eq!(
        (c.resent_packets, c.retransmits, c.probes),
        (0, 0, 0),
        "{c:?}"
    );
    assert_eq!(s.net.nodes[1].engine.counters().naks_sent, 0);
    assert!(took < FLOOR_NS / 10);
}
