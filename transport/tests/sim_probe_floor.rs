//! The probe timeout learns the host's noise (issue 14, `engine::recovery`):
//! two engines driven packet by packet on a hand-held clock. A probe whose
//! original was answered too (the responder answers the probe as a duplicate,
//! RL-04) was spurious and doubles that QP's probe floor; a probe whose answer
//! is the only one (the original's ACK was lost) was useful and leaves it.
//! The floor is observed as the time from a request to its probe; a
//! one-packet request is a tail, so the floor learned is the tail floor.

mod common;

use common::*;
use transport::engine::Limits;
use transport::verbs::{Sge, WcStatus, WrOpcode};

const A: usize = 0;
const B: usize = 1;
const FLOOR_NS: u64 = 800_000;
/// A one-packet WRITE is a tail (`engine::recovery`, "A tail's floor"):
/// its probe goes at the tail floor, an eighth of the configured one, and
/// that is the floor these probes teach.
const TAIL_NS: u64 = FLOOR_NS / 8;
/// One way, far below the (tail) floor, so the floor sets the probe timeout.
const HOP_NS: u64 = 5_000;

struct Bench {
    net: Net,
    p: Pair,
    ka: u32,
    kb: u32,
    id: u64,
}

fn bench(adaptive: bool) -> Bench {
    let limits = Limits {
        min_probe_timeout_ns: FLOOR_NS,
        adaptive_probe_floor: adaptive,
        ..Limits::default()
    };
    let mut net = Net::with_limits(2, 1 << 20, 3, limits);
    let ka = net.reg_all(A, ALL_ACCESS);
    let kb = net.reg_all(B, ALL_ACCESS);
    let o = ConnOpts {
        timeout: 14,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, A, B, &o);
    Bench {
        net,
        p,
        ka,
        kb,
        id: 0,
    }
}

impl Bench {
    /// Everything `node` sends now.
    fn out(&mut self, node: usize) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 8192];
        let now = self.net.now;
        let n = &mut self.net.nodes[node];
        let mut v = Vec::new();
        while let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) {
            v.push(buf[..len].to_vec());
            assert!(v.len() < 100, "runaway transmit");
        }
        v
    }

    fn deliver(&mut self, node: usize, pkts: &[Vec<u8>]) {
        let now = self.net.now;
        let n = &mut self.net.nodes[node];
        for p in pkts {
            n.engine.handle_packet(p, &mut n.mem, now);
        }
    }

    fn advance(&mut self, ns: u64) {
        self.net.now = self.net.now.plus_ns(ns);
    }

    /// Posts a one-packet WRITE; returns A's packets.
    fn write(&mut self) -> Vec<Vec<u8>> {
        self.id += 1;
        let mut wr = send_wr(
            self.id,
            WrOpcode::RdmaWrite,
            vec![Sge {
                addr: MEM_BASE,
                length: 64,
                lkey: self.ka,
            }],
        );
        wr.remote_addr = MEM_BASE + 4096;
        wr.rkey = self.kb;
        self.net.nodes[A]
            .engine
            .post_send(self.p.qa, wr)
            .expect("post");
        let pkts = self.out(A);
        assert_eq!(pkts.len(), 1);
        pkts
    }

    /// A round trip without loss: the request, its ACK one hop later each way.
    fn clean_round(&mut self) {
        let req = self.write();
        self.advance(HOP_NS);
        self.deliver(B, &req);
        let ack = self.out(B);
        self.advance(HOP_NS);
        self.deliver(A, &ack);
        self.completes();
    }

    fn completes(&mut self) {
        let c = self.net.poll(A, self.p.cq_a).expect("a completion");
        assert_eq!((c.wr_id, c.status), (self.id, WcStatus::Success));
    }

    /// A WRITE whose ACK is held back: returns the probe A sent, B's ACK of
    /// the original and how long after the request A probed.
    fn probed_round(&mut self) -> (Vec<Vec<u8>>, Vec<Vec<u8>>, u64) {
        let sent = self.net.now;
        let req = self.write();
        self.advance(HOP_NS);
        self.deliver(B, &req);
        let held = self.out(B);
        assert_eq!(held.len(), 1, "B acknowledges");
        let probe = self.probe_of(&req);
        (probe, held, self.net.now.0 - sent.0)
    }

    /// A's timers up to the probe of `req` (a timer entry that progress
    /// pushed back comes due at its old time and re-arms).
    fn probe_of(&mut self, req: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let probe = loop {
            let t = self.net.nodes[A]
                .engine
                .poll_timeout()
                .expect("a probe timer");
            self.net.now = t;
            self.net.nodes[A].engine.handle_timeout(t);
            let out = self.out(A);
            if !out.is_empty() {
                break out;
            }
        };
        assert_eq!(probe, req, "the probe is the request again");
        probe
    }

    /// The probe reaches B, a duplicate there, answered with an ACK of the
    /// newest PSN (RL-04).
    fn answer(&mut self, probe: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let before = self.net.nodes[B].engine.counters().duplicates_received;
        self.advance(HOP_NS);
        self.deliver(B, probe);
        assert_eq!(
            self.net.nodes[B].engine.counters().duplicates_received,
            before + 1
        );
        let ack = self.out(B);
        assert_eq!(ack.len(), 1);
        ack
    }

    fn spurious(&self) -> u64 {
        self.net.nodes[A].engine.counters().spurious_probes
    }
}

/// The peer was only late: the original's ACK comes after the probe went,
/// then the probe's answer. The next probe waits twice as long.
fn spurious_then_next_gap(adaptive: bool) -> (u64, u64, u64) {
    let mut b = bench(adaptive);
    b.clean_round();
    let (probe, held, gap) = b.probed_round();
    let dup = b.answer(&probe);
    b.deliver(A, &held);
    b.completes();
    b.advance(HOP_NS);
    b.deliver(A, &dup);
    let spurious = b.spurious();
    let (_, _, next) = b.probed_round();
    (gap, spurious, next)
}

#[test]
fn a_spurious_probe_doubles_the_qps_probe_floor() {
    let (gap, spurious, next) = spurious_then_next_gap(true);
    assert_eq!(gap, TAIL_NS, "the configured floor first");
    assert_eq!(spurious, 1);
    assert_eq!(next, 2 * TAIL_NS, "doubled");
}

#[test]
fn a_spurious_probe_is_counted_but_a_fixed_floor_stays() {
    let (gap, spurious, next) = spurious_then_next_gap(false);
    assert_eq!((gap, spurious, next), (TAIL_NS, 1, TAIL_NS));
}

/// The original's ACK was lost: the probe's answer is the only one. The
/// probe was useful and the floor stays.
#[test]
fn a_useful_probe_leaves_the_floor() {
    let mut b = bench(true);
    b.clean_round();
    let (probe, _lost, gap) = b.probed_round();
    let ack = b.answer(&probe);
    b.advance(HOP_NS);
    b.deliver(A, &ack);
    b.completes();
    assert_eq!(b.spurious(), 0);
    // Long after: the probe's watch has run out.
    b.advance(100 * FLOOR_NS);
    let (_, _, next) = b.probed_round();
    assert_eq!((gap, next), (TAIL_NS, TAIL_NS));
}

/// The peer was descheduled past the probe timeout: the request and its
/// probe reach it in one batch, before it sent anything. It answers both
/// (the probe as a duplicate, RL-04) with two ACKs, not one merged ACK
/// (RL-08 coalescing stops at a duplicate's answer), so the probe is judged
/// spurious and the floor doubles. Merged, every such probe looked useful
/// and a busy host probed after every message.
#[test]
fn a_probe_that_reaches_a_descheduled_peer_with_its_original_is_spurious() {
    let mut b = bench(true);
    b.clean_round();
    let req = b.write();
    let probe = b.probe_of(&req);
    b.advance(HOP_NS);
    b.deliver(B, &req);
    b.deliver(B, &probe);
    let acks = b.out(B);
    assert_eq!(acks.len(), 2, "the duplicate's ACK is its own");
    b.advance(HOP_NS);
    b.deliver(A, &acks);
    b.completes();
    assert_eq!(b.spurious(), 1);
    let (_, _, next) = b.probed_round();
    assert_eq!(next, 2 * TAIL_NS, "doubled");
}

/// RL-13 beside the learned floor: a useful probe (the original's ACK was
/// lost) is answered with an ACK reporting zero credits (B has no receive
/// WQE); while that probe is still watched B posts one, and its unsolicited
/// credit ACK (the last ACK again, new count only: seed 004 §2.6.2) reaches
/// A. Same PSN, same MSN, another credit count: not a duplicate answer to
/// the probe, so neither counted spurious nor raising the floor.
#[test]
fn a_credit_only_ack_is_not_the_duplicate_answer_of_a_watched_probe() {
    let mut b = bench(true);
    b.clean_round();
    let (probe, _lost, gap) = b.probed_round();
    let ack = b.answer(&probe);
    b.advance(HOP_NS);
    b.deliver(A, &ack);
    b.completes();
    // B's receive queue is empty: the ACKs said zero credits; a WQE posted
    // now makes B send the last ACK again with the new count.
    let rq = b.net.nodes[B].engine.post_recv(
        b.p.qb,
        transport::verbs::RecvWr {
            wr_id: 1,
            sges: vec![Sge {
                addr: MEM_BASE + 8192,
                length: 64,
                lkey: b.kb,
            }],
        },
    );
    rq.expect("post_recv");
    let credit = b.out(B);
    assert_eq!(credit.len(), 1, "the unsolicited credit ACK");
    let aeth = |pkt: &[u8]| {
        transport::wire::PacketRepr::parse(pkt)
            .expect("parse")
            .transport
            .ext
            .aeth
            .expect("an AETH")
    };
    let (old, new) = (aeth(&ack[0]), aeth(&credit[0]));
    assert_eq!(old.msn, new.msn, "no progress: same MSN");
    assert_ne!(old.syndrome, new.syndrome, "only the credit count changed");
    b.advance(HOP_NS);
    b.deliver(A, &credit);
    assert_eq!(b.spurious(), 0, "not a spurious probe");
    let (_, _, next) = b.probed_round();
    assert_eq!((gap, next), (TAIL_NS, TAIL_NS), "the floor stays");
}
