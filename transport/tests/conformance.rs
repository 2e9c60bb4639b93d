//! Rows whose earlier tests did not assert what the row says (issue 29, item
//! 3): each test here checks its row on the wire, in the packets the engines
//! exchange (`Net::sniffed`) or answer to crafted requests (`common::craft`).
//! The OP-09 tests run a 2^31-byte message between two engines over memory
//! that makes and checks its bytes instead of holding them (`Synth`).

mod common;

use common::craft::*;
use common::*;
use transport::engine::{NakReason, RxDrop};
use transport::psn;
use transport::verbs::Completion;
use transport::verbs::{AttrMask, QpAttr, QpState, SendFlags, WcStatus, WrOpcode};
use transport::wire::opcode::Opcode;
use transport::wire::{AethRepr, AethSyndrome, ExtHeaders, NakCode, TransportRepr};

/// The sniffed exchange, parsed (`common::craft::seen`).
fn sniffed(net: &Net) -> Vec<Seen> {
    net.sniffed
        .as_ref()
        .expect("sniffing on")
        .iter()
        .map(|b| seen(b))
        .collect()
}

/// RL-08 (9.7.5.1.1 AckReq, 9.7.5.1.2 MSN): the requester sets AckReq on the
/// last (or only) packet of every message, since each message's completion
/// waits for an acknowledgement; the responder's MSN counts messages, not
/// packets: an ACK for PSN p carries the number of whole messages that end at
/// or before p. Messages of 1, 3 and 4 packets and a 0-byte one, with the
/// PSNs wrapping at 2^24 (the requester starts at 0xfffff0).
#[test]
fn rl_08_every_message_end_asks_for_an_ack_and_the_msn_counts_messages() {
    let o = ConnOpts::default();
    let (mut net, p, ka, kb) = pair_setup(81, 1 << 22, ALL_ACCESS, &o);
    net.sniffed = Some(Vec::new());
    let pmtu = o.mtu.bytes() as u32;
    let sizes = [100, 3 * pmtu - 7, 0, 4 * pmtu, pmtu, 2 * pmtu + 1, 8];
    fill(&mut net, 0, MEM_BASE, 8 * pmtu as usize, 5);
    for (i, _) in sizes.iter().enumerate() {
        let at = MEM_BASE + 0x10_0000 + 0x1_0000 * i as u64;
        recv(&mut net, 1, p.qb, i as u64, at, 0x1_0000, kb);
    }
    for (i, len) in sizes.iter().enumerate() {
        let s = send_wr(i as u64, WrOpcode::Send, sge(MEM_BASE, *len, ka));
        net.nodes[0].engine.post_send(p.qa, s).unwrap();
    }
    wait(&mut net, 0, p.cq_a, sizes.len());
    let pkts = sniffed(&net);

    // The requester: the PSN each message ends at, and AckReq there.
    let mut ends = Vec::new();
    // (Both QPs are number 2, each on its own node: tell requests by opcode.)
    let requests: Vec<&Seen> = pkts
        .iter()
        .filter(|k| k.opcode != Opcode::RC_ACKNOWLEDGE)
        .collect();
    for k in &requests {
        let info = k.opcode.info();
        if info.ends_message() {
            assert!(k.ack_req, "a message's last packet asks for an ACK: {k:?}");
            if !ends.contains(&k.psn) {
                ends.push(k.psn);
            }
        }
    }
    assert_eq!(ends.len(), sizes.len(), "one end per message: {requests:?}");
    assert_eq!(ends[0], psn::add(o.psn_a, 0));
    let npkts: u32 = sizes.iter().map(|l| l.div_ceil(pmtu).max(1)).sum();
    assert_eq!(*ends.last().unwrap(), psn::add(o.psn_a, npkts - 1));

    // The responder: every ACK's MSN is the count of messages ended by its PSN.
    let acks: Vec<&Seen> = pkts
        .iter()
        .filter(|k| k.opcode == Opcode::RC_ACKNOWLEDGE)
        .collect();
    assert!(!acks.is_empty());
    for k in &acks {
        let (syn, msn) = (
            k.syndrome.expect("an ACK has an AETH"),
            k.msn.expect("an ACK has an AETH"),
        );
        assert!(matches!(syn, AethSyndrome::Ack { .. }), "{k:?}");
        let done = ends.iter().filter(|e| psn::diff(**e, k.psn) <= 0).count() as u32;
        assert_eq!(msn, done, "MSN of the ACK for PSN {:#x}", k.psn);
    }
    assert_eq!(
        acks.last().unwrap().msn.unwrap(),
        sizes.len() as u32,
        "the last ACK names every message"
    );
}

/// OR-05 (C9-31): a fenced WR waits until every READ and ATOMIC before it
/// has completed. Here the fenced SEND carries the 8 bytes the FetchAdd
/// before it brings back: sent any earlier, it would carry the buffer's old
/// contents.
#[test]
fn or_05_fenced_send_waits_for_the_atomic_before_it() {
    let (mut net, p, ka, kb) = pair_setup(82, 1 << 22, ALL_ACCESS, &ConnOpts::default());
    let counter = MEM_BASE + 0x1000;
    let local = MEM_BASE + 0x2000;
    net.nodes[1].mem.bytes[0x1000..0x1008].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    let before = bytes(&net, 1, counter, 8);
    net.nodes[0].mem.bytes[0x2000..0x2008].fill(0xee);
    recv(&mut net, 1, p.qb, 1, MEM_BASE + 0x8000, 64, kb);
    let mut a = send_wr(1, WrOpcode::AtomicFetchAdd, sge(local, 8, ka));
    a.remote_addr = counter;
    a.rkey = kb;
    a.swap_add = 5;
    net.nodes[0].engine.post_send(p.qa, a).unwrap();
    let mut s = send_wr(2, WrOpcode::Send, sge(local, 8, ka));
    s.flags = SendFlags(SendFlags::SIGNALED.0 | SendFlags::FENCE.0);
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x8000, 8),
        before,
        "the SEND left after the FetchAdd's result was in place"
    );
    assert_eq!(
        u64::from_le_bytes(bytes(&net, 1, counter, 8).try_into().unwrap()),
        0x1122_3344_5566_778d
    );
}

/// RL-05 (IBA 9.7.5.1.4; seed 004 §3.3.2.2): when a duplicate READ with an
/// earlier PSN arrives while the responder is sending the responses of a
/// later READ, it stops those and answers the duplicate, from memory as it
/// is now; the requester asks again for whatever it still misses.
#[test]
fn rl_05_a_duplicate_read_preempts_the_responses_of_a_later_read() {
    let mut b = bench();
    let e = b.epsn_b();
    let pmtu = b.o.mtu.bytes();
    let t = off(TARGET);
    b.net.nodes[B].mem.bytes[t..t + 2 * pmtu].fill(0xaa);
    b.net.nodes[B].mem.bytes[t + 4 * pmtu..t + 7 * pmtu].fill(0xcc);
    // READ 1: two packets, PSNs e, e+1. READ 2: three packets, e+2..e+4.
    let read1 = b
        .request(Opcode::RC_RDMA_READ_REQUEST, e)
        .reth(TARGET, b.kb, 2 * pmtu as u32)
        .bytes();
    let read2 = b
        .request(Opcode::RC_RDMA_READ_REQUEST, psn::add(e, 2))
        .reth(TARGET + 4 * pmtu as u64, b.kb, 3 * pmtu as u32)
        .bytes();
    b.inject(B, &read1);
    b.inject(B, &read2);
    let first = take(&mut b.net, B, 3);
    let psns: Vec<u32> = first.iter().map(|s| s.psn).collect();
    assert_eq!(psns, vec![e, psn::add(e, 1), psn::add(e, 2)]);
    // READ 1 again, its data changed since: READ 2's last two responses
    // (e+3, e+4) must not go before the duplicate's.
    b.net.nodes[B].mem.bytes[t..t + 2 * pmtu].fill(0xbb);
    b.inject(B, &read1);
    let rest = b.drain(B);
    let heads: Vec<(Opcode, u32)> = rest.iter().map(|s| (s.opcode, s.psn)).collect();
    assert!(rest.len() >= 2, "{heads:?}");
    assert_eq!(
        (rest[0].opcode, rest[0].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, e),
        "the duplicate is answered at once: {heads:?}"
    );
    assert_eq!(
        (rest[1].opcode, rest[1].psn),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, psn::add(e, 1))
    );
    assert!(
        rest[..2]
            .iter()
            .all(|s| s.payload.iter().all(|x| *x == 0xbb)),
        "re-executed from memory as it is now"
    );
    // Whatever follows is READ 2's, in order: the spec leaves it to the
    // responder whether to finish it (the requester retries what is missing).
    let later: Vec<u32> = rest[2..].iter().map(|s| s.psn).collect();
    assert!(
        later.is_empty() || later.windows(2).all(|w| psn::diff(w[1], w[0]) == 1),
        "{later:?}"
    );
    assert_eq!(b.epsn_b(), psn::add(e, 5), "the duplicate moved no ePSN");
}

/// MP-05 (IBA 10.10.3 Table 82, RC receive queue; `ibv_poll_cq`'s
/// IBV_WC_LOC_ACCESS_ERR): an RDMA WRITE with immediate whose R_Key check
/// fails is NAKed Remote Access Error, and the receive WQE it consumed
/// completes with Local Access Error (not a flush, not Local Protection
/// Error, which names the responder's own SGE); the QP goes to Error and the
/// receive WQE behind it is flushed.
#[test]
fn mp_05_write_with_immediate_to_a_bad_rkey_completes_its_receive_with_local_access_error() {
    let mut b = bench();
    let e = b.epsn_b();
    b.post_recv(B, b.p.qb, 41, TARGET + 0x800, 64);
    b.post_recv(B, b.p.qb, 42, TARGET + 0x900, 64);
    let mut w = b
        .request(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, e)
        .reth(TARGET, b.kb ^ 0x80, 16)
        .payload(&[9; 16]);
    w.ext.imm_dt = Some(0x1234_5678);
    let before = b.mem(B);
    b.inject(B, &w.bytes());
    let out = b.drain(B);
    assert_one_nak(&out, e, NakCode::RemoteAccessError);
    assert_eq!(b.mem(B), before, "nothing written");
    let c = b.poll(B, b.p.cq_b).expect("the consumed receive completes");
    assert_eq!((c.wr_id, c.status), (41, WcStatus::LocAccessErr));
    let f = b.poll(B, b.p.cq_b).expect("the next receive is flushed");
    assert_eq!((f.wr_id, f.status), (42, WcStatus::WrFlushErr));
    assert_eq!(b.state(B, b.p.qb), QpState::Error);
}

/// OR-03 (C9-28): the responder executes SEND, RDMA WRITE and ATOMIC
/// requests in the order they arrive, and answers an unsupported one (here an
/// unaligned FetchAdd, OP-07) in its PSN's turn. WRITEs and atomics on one
/// word, with SENDs between them, all arrive before any answer is read: each
/// atomic's original value is what the requests before it left, the SENDs
/// take the receive WQEs in order, and the NAK comes after every response of
/// the requests before it.
#[test]
fn or_03_sends_writes_and_atomics_execute_in_arrival_order() {
    let mut b = bench();
    let e = b.epsn_b();
    let at = |n: u32| psn::add(e, n);
    b.post_recv(B, b.p.qb, 1, TARGET + 0x100, 64);
    b.post_recv(B, b.p.qb, 2, TARGET + 0x200, 64);
    let write = |b: &Bench, n: u32, v: u64| {
        b.request(Opcode::RC_RDMA_WRITE_ONLY, at(n))
            .reth(TARGET, b.kb, 8)
            .payload(&v.to_le_bytes())
            .bytes()
    };
    let send = |b: &Bench, n: u32, fill: u8| {
        b.request(Opcode::RC_SEND_ONLY, at(n))
            .payload(&[fill; 8])
            .bytes()
    };
    let pkts = [
        write(&b, 0, 10),
        b.request(Opcode::RC_FETCH_ADD, at(1))
            .atomic(TARGET, b.kb, 0, 1)
            .bytes(),
        send(&b, 2, 0xa1),
        write(&b, 3, 100),
        b.request(Opcode::RC_COMPARE_SWAP, at(4))
            .atomic(TARGET, b.kb, 100, 7)
            .bytes(),
        send(&b, 5, 0xa2),
        b.request(Opcode::RC_FETCH_ADD, at(6))
            .atomic(TARGET, b.kb, 0, 5)
            .bytes(),
        b.request(Opcode::RC_FETCH_ADD, at(7))
            .atomic(TARGET + 4, b.kb, 0, 1)
            .bytes(),
    ];
    for p in &pkts {
        b.inject(B, p);
    }
    let out = b.drain(B);
    let heads: Vec<(Opcode, u32)> = out.iter().map(|s| (s.opcode, s.psn)).collect();
    let atomics: Vec<(u32, u64)> = out
        .iter()
        .filter(|s| s.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE)
        .map(|s| (s.psn, s.orig.expect("an AtomicAckETH")))
        .collect();
    assert_eq!(
        atomics,
        vec![(at(1), 10), (at(4), 100), (at(6), 7)],
        "each atomic saw the requests before it: {heads:?}"
    );
    assert!(
        out.windows(2).all(|w| psn::diff(w[1].psn, w[0].psn) > 0),
        "answers in PSN order: {heads:?}"
    );
    let last = out.last().expect("answers");
    assert_eq!(
        (last.psn, last.syndrome),
        (at(7), Some(AethSyndrome::Nak(NakCode::InvalidRequest))),
        "the unsupported request answered in its turn: {heads:?}"
    );
    assert_eq!(bytes(&b.net, B, TARGET, 8), 12u64.to_le_bytes());
    let c1 = b.poll(B, b.p.cq_b).expect("first SEND");
    let c2 = b.poll(B, b.p.cq_b).expect("second SEND");
    assert_eq!(
        [(c1.wr_id, c1.status), (c2.wr_id, c2.status)],
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(bytes(&b.net, B, TARGET + 0x100, 8), [0xa1; 8]);
    assert_eq!(bytes(&b.net, B, TARGET + 0x200, 8), [0xa2; 8]);
}

/// RL-17, its Start PSN clause (IBA 9.7.1.1.1; seed 004 §2.1): the first
/// request a QP sends carries the SQ Start PSN software gave it, and the
/// responder expects the Start ePSN it was given; a Start PSN chosen after
/// the PSNs a connection used before puts that connection's stale packets
/// outside the valid window: a stale request lands in the responder's
/// duplicate region (re-ACKed, never executed, RL-04) and a stale ACK at the
/// requester is dropped as a ghost (RL-09), completing nothing.
#[test]
fn rl_17_a_start_psn_after_the_old_connection_keeps_its_stale_packets_out() {
    let mut b = bench();
    let old = b.o.psn_a;
    b.net.nodes[A].mem.bytes[0..64].fill(0x11);
    for i in 0..3u64 {
        let mut w = send_wr(i, WrOpcode::RdmaWrite, sge(MEM_BASE, 8, b.ka));
        w.remote_addr = TARGET + 8 * i;
        w.rkey = b.kb;
        b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    }
    pump(&mut b.net);
    for _ in 0..3 {
        assert_eq!(
            b.poll(A, b.p.cq_a).map(|c| c.status),
            Some(WcStatus::Success)
        );
    }
    // Both QPs back to Reset and connected again, A's Start PSN (B's Start
    // ePSN) after the three PSNs the old connection used.
    let new = psn::add(old, 0x1000);
    let now = b.net.now;
    for (n, q) in [(A, b.p.qa), (B, b.p.qb)] {
        let reset = QpAttr {
            state: Some(QpState::Reset),
            ..QpAttr::default()
        };
        b.net.nodes[n]
            .engine
            .modify_qp(q, &reset, AttrMask::STATE, now)
            .unwrap();
    }
    let o = b.o;
    let (la, lb) = (b.lid(A), b.lid(B));
    bring_up(&mut b.net, A, b.p.qa, &o, lb, b.p.qb, new, o.psn_b);
    bring_up(&mut b.net, B, b.p.qb, &o, la, b.p.qa, o.psn_b, new);
    assert_eq!(b.epsn_b(), new);

    b.net.nodes[A].mem.bytes[0..64].fill(0x77);
    let mut w = send_wr(9, WrOpcode::RdmaWrite, sge(MEM_BASE, 8, b.ka));
    w.remote_addr = TARGET + 0x40;
    w.rkey = b.kb;
    b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    let first = take_sent(&mut b.net, A);
    assert_eq!(first.len(), 1);
    assert_eq!(
        seen(&first[0]).psn,
        new,
        "the first request carries the Start PSN"
    );

    // A stale WRITE of the old connection reaches B.
    let before = b.mem(B);
    let stale = b
        .request(Opcode::RC_RDMA_WRITE_ONLY, psn::add(old, 1))
        .reth(TARGET + 0x40, b.kb, 8)
        .payload(&[0x55; 8])
        .bytes();
    b.inject(B, &stale);
    for s in b.drain(B) {
        assert!(
            matches!(s.syndrome, Some(AethSyndrome::Ack { .. })),
            "a duplicate is at most re-ACKed: {s:?}"
        );
    }
    assert_eq!(b.mem(B), before, "a stale request is not executed");
    assert_eq!(b.epsn_b(), new);
    // A stale ACK of the old connection reaches A.
    let ghosts = b.drops(A, RxDrop::GhostResponse);
    let ack = b
        .response(
            Opcode::RC_ACKNOWLEDGE,
            psn::add(old, 2),
            ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: ACK,
                    msn: 3,
                }),
                ..ExtHeaders::default()
            },
        )
        .bytes();
    b.inject(A, &ack);
    assert_eq!(b.drops(A, RxDrop::GhostResponse), ghosts + 1);
    assert!(
        b.poll(A, b.p.cq_a).is_none(),
        "a stale ACK completes nothing"
    );

    // The new connection's WRITE goes on, untouched by either.
    b.inject(B, &first[0]);
    pump(&mut b.net);
    let c = b.poll(A, b.p.cq_a).expect("the new WRITE completes");
    assert_eq!((c.wr_id, c.status), (9, WcStatus::Success));
    assert_eq!(bytes(&b.net, B, TARGET + 0x40, 8), [0x77; 8]);
}

/// OR-07 (seed 003): the receive completions of one RQ come in the order its
/// WQEs were posted, each with its message, also when loss and duplication
/// make the requester resend: 24 SENDs of 1 to 5 packets.
#[test]
fn or_07_receive_completions_of_one_rq_come_in_post_order_under_loss() {
    let o = ConnOpts::default();
    let (mut net, p, ka, kb) = pair_setup(83, 1 << 22, ALL_ACCESS, &o);
    net.faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        ..Faults::default()
    };
    let pmtu = o.mtu.bytes() as u32;
    fill(&mut net, 0, MEM_BASE, 5 * pmtu as usize, 3);
    let at = |i: u64| MEM_BASE + 0x10_0000 + 0x1_0000 * i;
    for i in 0..24 {
        recv(&mut net, 1, p.qb, i, at(i), 0x1_0000, kb);
    }
    let lens: Vec<u32> = (0..24).map(|i| 1 + (i * 1777) % (5 * pmtu)).collect();
    for (i, len) in lens.iter().enumerate() {
        let s = send_wr(i as u64, WrOpcode::Send, sge(MEM_BASE, *len, ka));
        net.nodes[0].engine.post_send(p.qa, s).unwrap();
    }
    let got: Vec<(u64, WcStatus, u32)> = wait(&mut net, 1, p.cq_b, 24)
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len))
        .collect();
    let want: Vec<(u64, WcStatus, u32)> = (0..24)
        .map(|i| (i, WcStatus::Success, lens[i as usize]))
        .collect();
    assert_eq!(got, want);
    for (i, len) in lens.iter().enumerate() {
        let l = *len as usize;
        assert_eq!(bytes(&net, 1, at(i as u64), l), bytes(&net, 0, MEM_BASE, l));
    }
    assert!(net.dropped > 0, "the loss made resends");
}

// ------------------------------------------------------------------ OP-09: 2^31-byte messages

/// Where the synthetic memory of the OP-09 tests sits: virtual, physical.
const BIG_VA: u64 = 1 << 40;
const BIG_PA: u64 = 1 << 41;
/// The OP-09 MRs' length: 2^31 bytes and a page more (for 2^31 + 1).
const BIG_LEN: u64 = (1 << 31) + (1 << 30);

/// The byte every position of source page `page` holds.
fn page_byte(page: u64) -> u8 {
    (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// Memory that holds no bytes (so that a 2 GiB message needs no 2 GiB of
/// test memory): a read at physical offset `o` gives `page_byte(o >> 12)`; a
/// write at offset `o` is compared with what the source held at `o - shift`,
/// must follow the one before it, and is dropped.
struct Synth {
    shift: u64,
    /// The offset the next write must start at; the bytes written so far.
    next: u64,
    written: u64,
    /// Writes whose bytes were not the source's.
    bad: u64,
}

impl Synth {
    fn new(shift: u64) -> Synth {
        Synth {
            shift,
            next: shift,
            written: 0,
            bad: 0,
        }
    }

    fn offset(addr: u64, len: usize) -> Result<u64, transport::memory::MemError> {
        let err = transport::memory::MemError {
            addr,
            len: len as u64,
        };
        let o = addr.checked_sub(BIG_PA).ok_or(err)?;
        if o.checked_add(len as u64).is_none_or(|end| end > BIG_LEN) {
            return Err(err);
        }
        Ok(o)
    }

    /// Calls `f` with each run of `len` bytes from offset `o` that lies in one
    /// source page, and that page's byte.
    fn pages(o: u64, len: usize, mut f: impl FnMut(std::ops::Range<usize>, u8)) {
        let mut i = 0;
        while i < len {
            let at = o + i as u64;
            let end = len.min(i + (4096 - (at & 4095)) as usize);
            f(i..end, page_byte(at >> 12));
            i = end;
        }
    }
}

impl transport::memory::Memory for Synth {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), transport::memory::MemError> {
        let o = Synth::offset(addr, buf.len())?;
        Synth::pages(o, buf.len(), |r, v| buf[r].fill(v));
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), transport::memory::MemError> {
        let o = Synth::offset(addr, data.len())?;
        let mut ok = o == self.next;
        // The source's bytes, compared a page run at a time (memcmp).
        let src = o.wrapping_sub(self.shift);
        Synth::pages(src, data.len(), |r, v| {
            ok &= data[r.clone()] == [v; 4096][..r.len()];
        });
        self.bad += u64::from(!ok);
        self.next = o + data.len() as u64;
        self.written += data.len() as u64;
        Ok(())
    }

    fn compare_swap(
        &mut self,
        addr: u64,
        _: u64,
        _: u64,
    ) -> Result<u64, transport::memory::MemError> {
        Err(transport::memory::MemError { addr, len: 8 })
    }

    fn fetch_add(&mut self, addr: u64, _: u64) -> Result<u64, transport::memory::MemError> {
        Err(transport::memory::MemError { addr, len: 8 })
    }

    fn atomic_write(&mut self, addr: u64, _: u64) -> Result<(), transport::memory::MemError> {
        Err(transport::memory::MemError { addr, len: 8 })
    }
}

/// A bench at PMTU 4096 with a [`BIG_LEN`] MR on each node over [`Synth`]
/// memory (1 GiB pages): (bench, A's key, B's key).
fn big_bench() -> (Bench, u32, u32) {
    let mut b = bench_with(ConnOpts {
        mtu: transport::verbs::Mtu::M4096,
        ..ConnOpts::default()
    });
    let mut key = |n: usize| {
        let node = &mut b.net.nodes[n];
        let pages = (0..BIG_LEN >> 30).map(|i| BIG_PA + (i << 30)).collect();
        node.engine
            .mrs()
            .reg_mr(node.pd, BIG_VA, BIG_LEN, ALL_ACCESS, 1 << 30, pages)
            .expect("a 3 GiB MR of 1 GiB pages")
    };
    let (ka, kb) = (key(A), key(B));
    (b, ka, kb)
}

/// Runs A and B over their [`Synth`] memories, each packet delivered as it
/// leaves, until A's CQ has a completion; `on_request` sees every packet A
/// sends.
fn run_big(
    b: &mut Bench,
    ma: &mut Synth,
    mb: &mut Synth,
    mut on_request: impl FnMut(&[u8]),
) -> Completion {
    let cq = b.p.cq_a;
    let (na, nb) = b.net.nodes.split_at_mut(1);
    let (ea, eb) = (&mut na[0].engine, &mut nb[0].engine);
    let mut now = b.net.now;
    let mut buf = vec![0u8; 8192];
    for _ in 0..10_000_000 {
        let mut moved = false;
        while let Some(n) = ea.poll_transmit(ma, now, &mut buf) {
            on_request(&buf[..n]);
            eb.handle_packet(&buf[..n], mb, now);
            // About 8 Gb/s.
            now = now.plus_ns(n as u64);
            moved = true;
        }
        while let Some(n) = eb.poll_transmit(mb, now, &mut buf) {
            ea.handle_packet(&buf[..n], ma, now);
            moved = true;
        }
        if let Some(c) = ea.poll_cq(cq) {
            return c;
        }
        if !moved {
            let t = [ea.poll_timeout(), eb.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .expect("something pending");
            now = now.max(t);
            ea.handle_timeout(now);
            eb.handle_timeout(now);
        }
    }
    panic!("no completion");
}

/// OP-09 (C9-16): an RDMA WRITE of 2^31 bytes, the largest message, goes as
/// one message: RETH:DMALen 2^31 in its First packet, then 2^19 - 2 Middle
/// packets and a Last at PMTU 4096, their PSNs one run of 2^19 from the
/// Start PSN (wrapping at 2^24); every byte lands once, in order, and the
/// WRITE completes. No 2 GiB of test memory: [`Synth`] makes and checks the
/// bytes.
#[test]
fn op_09_a_2_gib_write_goes_as_one_message_of_2_19_packets() {
    let (mut b, ka, kb) = big_bench();
    let start = b.o.psn_a;
    let len: u32 = 1 << 31;
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(BIG_VA, len, ka));
    w.remote_addr = BIG_VA + 0x100;
    w.rkey = kb;
    b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    let (mut ma, mut mb) = (Synth::new(0), Synth::new(0x100));
    let (mut n, mut bad_psn, mut dma_len) = (0u32, 0u32, None);
    let mut ops = Vec::new();
    let c = run_big(&mut b, &mut ma, &mut mb, |pkt| {
        // LRH (8 bytes) first, ICRC and VCRC (6) last.
        let t = TransportRepr::parse(&pkt[8..pkt.len() - 6]).expect("a request");
        if t.bth.psn != psn::add(start, n) {
            bad_psn += 1;
        }
        let op = t.bth.opcode;
        if ops.last().is_none_or(|(o, _)| *o != op) {
            ops.push((op, 0u32));
        }
        ops.last_mut().unwrap().1 += 1;
        if let Some(r) = t.ext.reth {
            dma_len = Some(r.dma_len);
        }
        n += 1;
    });
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    assert_eq!(
        ops,
        vec![
            (Opcode::RC_RDMA_WRITE_FIRST, 1),
            (Opcode::RC_RDMA_WRITE_MIDDLE, (1 << 19) - 2),
            (Opcode::RC_RDMA_WRITE_LAST, 1),
        ]
    );
    assert_eq!(bad_psn, 0, "PSNs from the Start PSN, one per packet");
    assert_eq!(dma_len, Some(len));
    assert_eq!(
        (mb.written, mb.bad),
        (1 << 31, 0),
        "every byte once, in order"
    );
    assert_eq!(b.epsn_b(), psn::add(start, 1 << 19));
}

/// OP-09 (C9-10, C9-16, C9-22): a message of 2^31 + 1 bytes is refused. The
/// requester completes a SEND and a WRITE of that length with Local Length
/// Error and sends nothing; the responder NAKs Invalid Request a WRITE or READ
/// whose RETH:DMALen says 2^31 + 1, counted as too long, and writes nothing.
#[test]
fn op_09_a_message_over_2_gib_is_refused_by_requester_and_responder() {
    let (mut b, ka, kb) = big_bench();
    let over: u32 = (1 << 31) + 1;
    let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(BIG_VA, over, ka));
    w.remote_addr = BIG_VA;
    w.rkey = kb;
    b.net.nodes[A].engine.post_send(b.p.qa, w).unwrap();
    assert!(b.drain(A).is_empty(), "nothing on the wire");
    let c = b.poll(A, b.p.cq_a).expect("refused");
    assert_eq!((c.wr_id, c.status), (1, WcStatus::LocLenErr));
    // A SEND of two SGEs, 2^31 and 1 bytes, on a new connection (the error
    // moved the QP to Error).
    let (mut b, ka, _) = big_bench();
    let mut sges = sge(BIG_VA, 1 << 31, ka);
    sges.extend(sge(BIG_VA + (1 << 31), 1, ka));
    b.net.nodes[A]
        .engine
        .post_send(b.p.qa, send_wr(2, WrOpcode::Send, sges))
        .unwrap();
    assert!(b.drain(A).is_empty(), "nothing on the wire");
    let c = b.poll(A, b.p.cq_a).expect("refused");
    assert_eq!((c.wr_id, c.status), (2, WcStatus::LocLenErr));

    for op in [Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_READ_REQUEST] {
        let mut b = bench();
        let e = b.epsn_b();
        let mut r = b.request(op, e).reth(TARGET, b.kb, over);
        if op == Opcode::RC_RDMA_WRITE_FIRST {
            r = r.payload(&vec![7; b.o.mtu.bytes()]);
        }
        let before = b.mem(B);
        b.inject(B, &r.bytes());
        assert_one_nak(&b.drain(B), e, NakCode::InvalidRequest);
        assert_eq!(b.naked(B, NakReason::TooLong), 1, "{op:?}");
        assert_eq!(b.mem(B), before);
    }
}
