//! RDMA READs against a slow responder that executes every READ request it
//! gets, duplicates included, one after another and each to its end (RL-05
//! lets a responder answer a duplicate READ as a new one; Linux soft-RoCE does
//! so, queueing it behind the responses it is still sending). Seen in the
//! suite (issue 30's CI run, rxe-vhca/ib_read_bw, 16 READs of 64 KiB
//! outstanding): the responder, a TCG guest, paused a few milliseconds
//! mid-stream; the requester's READ probe asked for the rest again; the
//! responder then sent the old stream's end and the duplicate's replay, whose
//! PSNs the requester had all received (responses before `una`); seeing no
//! progress, it probed again, adding a replay each time, until the READs it
//! waited for sat behind more replays than seven ACK timeouts cover:
//! "transport retry counter exceeded" with no packet lost.
//!
//! A response the responder sends for a READ already answered (before
//! `una`) shows that it is alive and busy answering in order (C9-27): what
//! the requester waits for comes after it. Such a response postpones the
//! probe as other activity does (vhca policy, `recovery`); the ACK timer
//! (RL-10) still runs, so a responder that never answers fails the QP in the
//! spec's time.

mod common;

use common::craft::*;
use common::*;
use std::collections::VecDeque;
use transport::verbs::{Time, WcStatus, WrOpcode};
use transport::wire::opcode::Opcode;
use transport::wire::{AethRepr, ExtHeaders, PacketRepr, RethRepr};

const PMTU: u64 = 1024;
const READ_LEN: u32 = 16 * 1024; // 16 responses a READ
const READS: usize = 24;
const SRC: u64 = MEM_BASE + 0x4000; // on the responder
const DST: u64 = MEM_BASE + 0x8000; // on the requester

/// A READ the scripted responder is answering: its next response's PSN and
/// offset, and where it ends.
struct Serving {
    psn: u32,
    va: u64,
    left: u64,
    first: bool,
}

/// A responder that answers READ requests strictly in arrival order, each to
/// its end, one packet every `gap_ns`, with a pause of `pause_ns` after every
/// `pause_every` packets (a guest descheduled); duplicates are executed as
/// new (RL-05) and never cut short.
struct SlowResponder {
    queue: VecDeque<(u32, RethRepr)>,
    serving: Option<Serving>,
    next_at: Time,
    sent: u64,
    gap_ns: u64,
    pause_every: u64,
    pause_ns: u64,
    msn: u32,
    /// Once the first READ is answered, answer nothing else and replay it
    /// forever (soft-RoCE's responder was seen looping so).
    stuck: Option<(u32, RethRepr)>,
}

impl SlowResponder {
    /// The next response packet, if one is due at `now`.
    fn respond(&mut self, b: &Bench, now: Time) -> Option<Vec<u8>> {
        if now < self.next_at {
            return None;
        }
        if self.serving.is_none() {
            let (psn, reth) = match self.stuck {
                Some(first) if self.sent > 0 => first,
                Some(_) => *self.queue.front()?,
                None => self.queue.pop_front()?,
            };
            self.serving = Some(Serving {
                psn,
                va: reth.va,
                left: u64::from(reth.dma_len),
                first: true,
            });
        }
        let s = self.serving.as_mut().unwrap();
        let len = s.left.min(PMTU);
        let last = s.left <= PMTU;
        let op = match (s.first, last) {
            (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
            (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
        };
        if last {
            self.msn = self.msn.wrapping_add(1);
        }
        let ext = ExtHeaders {
            aeth: (s.first || last).then_some(AethRepr {
                syndrome: ACK,
                msn: self.msn & 0xff_ffff,
            }),
            ..ExtHeaders::default()
        };
        let data = bytes(&b.net, B, s.va, len as usize);
        let pkt = b.response(op, s.psn, ext).payload(&data).bytes();
        s.psn = transport::psn::add(s.psn, 1);
        s.va += len;
        s.left -= len;
        s.first = false;
        if last {
            self.serving = None;
        }
        self.sent += 1;
        let pause = if self.sent.is_multiple_of(self.pause_every) {
            self.pause_ns
        } else {
            0
        };
        self.next_at = now.plus_ns(self.gap_ns + pause);
        Some(pkt)
    }
}

/// Runs `READS` READs (at most `max_rd_atomic` outstanding) against the slow
/// responder; returns the completions' statuses and the READ requests sent.
fn run(pause_ns: u64, stuck: bool) -> (Vec<WcStatus>, usize, Bench) {
    let o = ConnOpts {
        max_rd_atomic: 16,
        timeout: 14, // perftest's: 67 ms
        ..ConnOpts::default()
    };
    // The device's probe floor (`--loss-probe-min`, 1 ms).
    let limits = transport::engine::Limits {
        min_probe_timeout_ns: 1_000_000,
        ..transport::engine::Limits::default()
    };
    let mut b = bench_limits(o, limits);
    fill(&mut b.net, B, SRC, READ_LEN as usize, 0x3c);
    for i in 0..READS {
        let mut wr = send_wr(i as u64, WrOpcode::RdmaRead, sge(DST, READ_LEN, b.ka));
        wr.rkey = b.kb;
        wr.remote_addr = SRC;
        b.net.nodes[A].engine.post_send(b.p.qa, wr).unwrap();
    }
    let mut r = SlowResponder {
        queue: VecDeque::new(),
        serving: None,
        next_at: Time(0),
        sent: 0,
        gap_ns: 25_000,
        pause_every: 40,
        pause_ns,
        msn: 0,
        stuck: None,
    };
    let mut requests = 0;
    let mut done = Vec::new();
    let mut buf = vec![0u8; 8192];
    let end = b.net.now.plus_ns(5_000_000_000);
    while done.len() < READS && b.net.now < end {
        let now = b.net.now;
        let n = &mut b.net.nodes[A];
        while let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) {
            let t = PacketRepr::parse(&buf[..len]).unwrap().transport;
            if t.bth.opcode == Opcode::RC_RDMA_READ_REQUEST {
                requests += 1;
                let req = (t.bth.psn, t.ext.reth.unwrap());
                if stuck && r.stuck.is_none() {
                    r.stuck = Some(req);
                }
                r.queue.push_back(req);
            }
        }
        if let Some(pkt) = r.respond(&b, now) {
            b.inject(A, &pkt);
        }
        while let Some(c) = b.poll(A, b.p.cq_a) {
            done.push(c.status);
        }
        b.net.nodes[A].engine.handle_timeout(now);
        b.net.now = now.plus_ns(5_000);
    }
    (done, requests, b)
}

#[test]
fn reads_against_a_slow_in_order_responder_complete_without_a_replay_storm() {
    // A pause of 3 ms every 40 responses: longer than the probe floor, as a
    // TCG guest's scheduling hiccups were.
    let (done, requests, b) = run(3_000_000, false);
    assert_eq!(done.len(), READS, "every READ completes: {done:?}");
    assert!(
        done.iter().all(|s| *s == WcStatus::Success),
        "no retry exceeded: {done:?}"
    );
    assert_eq!(
        bytes(&b.net, A, DST, READ_LEN as usize),
        bytes(&b.net, B, SRC, READ_LEN as usize),
        "the data read"
    );
    // Probes for the pauses are allowed (a pause looks like a loss until the
    // responses go on), a storm of replays is not: at most one re-request
    // per pause.
    let pauses = (READS as u64 * u64::from(READ_LEN) / PMTU).div_ceil(40) as usize;
    assert!(
        requests <= READS + pauses,
        "{requests} READ requests for {READS} READs and {pauses} pauses"
    );
}

#[test]
fn a_responder_replaying_an_answered_read_forever_still_fails_the_qp_in_time() {
    // The replayed READ's responses postpone the probes; the ACK timer
    // (RL-10: 67 ms, seven retries) still ends the wait for the others.
    let (done, _, b) = run(0, true);
    assert_eq!(done.first(), Some(&WcStatus::Success), "{done:?}");
    assert_eq!(done.get(1), Some(&WcStatus::RetryExcErr), "{done:?}");
    let ms = b.net.now.0 / 1_000_000;
    assert!(
        (7 * 67..=12 * 67).contains(&ms),
        "failed after {ms} ms: eight ACK timeouts of 67 ms, give or take the probes before"
    );
}
