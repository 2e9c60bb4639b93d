//! The data path (ARCHITECTURE.md §2 steps 2 and 5): doorbells → WQE fetch and checks →
//! the engine; the engine's completions and events → CQEs, EQEs and MSI-X.
//!
//! Everything a guest wrote is validated here before the engine sees it
//! (ARCHITECTURE.md §9): a WQE that does not decode completes with
//! `IBV_WC_LOC_QP_OP_ERR` in order and fails its QP; a producer index more than
//! a ring ahead is an overrun that fails the QP; a ring page the guest unmapped
//! is a memory fault, counted, never a crash.

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use transport::memory::Memory;
use transport::verbs::{Event, VerbError, WcStatus};

use crate::abi;
use crate::abi::layout::Field;
use crate::convert::cqe_of;
use crate::hca::{summary_offset, DbSlot, Doorbells, Hca, HcaCounters, Interrupts, SlotOwner};
use crate::port::Port;
use crate::ring::Ring;

/// WQEs fetched per queue per round, so one busy queue cannot starve others.
pub const FETCH_BUDGET: u32 = 64;

/// The largest WQE stride (abi MAX_WQE_SHIFT).
pub(crate) const MAX_WQE: usize = 1 << 12;

mod wqe;
pub use wqe::{decode_recv, decode_send, decode_send_rd, decode_send_xrc, BadWqe};

/// Writes `entry` (whose last byte is the owner byte) at index `pi` of `ring`:
/// everything but the owner first, then the owner (abi::cqe OWNER_CONVENTION).
fn write_entry(ring: &Ring, mem: &mut dyn Memory, pi: u32, entry: &[u8]) -> bool {
    let addr = ring.entry_addr(pi);
    let n = entry.len();
    if mem.write(addr, &entry[..n - 1]).is_err() {
        return false;
    }
    fence(Ordering::Release);
    mem.write(addr + n as u64 - 1, &entry[n - 1..]).is_ok()
}

/// The byte offsets of UAR page `uar`'s summary words (abi::uar
/// DOORBELL_PROTOCOL).
fn summary_words(uar: u32) -> impl Iterator<Item = u64> {
    let base = summary_offset(uar);
    (0..u64::from(abi::uar::uar::SUMMARY_SIZE / 4)).map(move |w| base + 4 * w)
}

/// What one round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    pub wqes: u32,
    pub packets: u32,
    pub cqes: u32,
    pub eqes: u32,
}

impl Work {
    pub fn any(&self) -> bool {
        self.wqes + self.packets + self.cqes + self.eqes > 0
    }
}

/// A work queue the data path consumes.
#[derive(Debug, Clone, Copy)]
enum Wq {
    Sq(u32),
    Rq(u32),
    Srq(u32),
}

/// What the engine made of one WQE.
enum Taken {
    /// Posted, or completed with an error (a WQE that does not decode): the
    /// queue moves past it.
    Yes,
    /// Not now (the engine's queue is full, the QP cannot take it yet): the
    /// queue waits at this WQE.
    Later,
    /// The queue is unusable (a receive WQE the QP cannot use): skipped to
    /// its producer index, the QP fails.
    Broken,
}

/// How one queue's WQEs go into the engine.
#[derive(Debug, Clone, Copy)]
enum Post {
    Send {
        qpn: u32,
        t: abi::verbs::QpType,
        max_sge: u32,
        max_inline: u32,
    },
    Recv {
        qpn: u32,
        max_sge: u32,
    },
    Srq {
        srqn: u32,
        max_sge: u32,
    },
}

impl Post {
    /// Decodes WQE `idx` and posts it.
    fn take(self, port: &mut Port, counters: &mut HcaCounters, idx: u32, wqe: &[u8]) -> Taken {
        use transport::verbs::QpState as S;
        let state = |port: &Port, qpn| {
            let e = port.engine();
            e.query_qp(qpn)
                .map(|q| q.0)
                .or_else(|_| e.query_rd_qp(qpn).map(|q| q.0)) // AD-11
        };
        match self {
            Post::Send {
                qpn,
                t,
                max_sge,
                max_inline,
            } => {
                // AD-11: an RD QP's WQEs are the RD engine's, with their own
                // decoder (EE context, destination) and rejection queue.
                let rd = t == abi::verbs::QpType::Rd;
                let reject = |port: &mut Port, id| {
                    let e = port.engine_mut();
                    if rd {
                        e.post_send_rd_rejected(qpn, id, WcStatus::LocQpOpErr)
                    } else {
                        e.post_send_rejected(qpn, id, WcStatus::LocQpOpErr)
                    }
                };
                let e = port.engine_mut();
                let posted = if rd {
                    decode_send_rd(wqe, max_sge, max_inline)
                        .map(|(wr, dest)| e.post_send_rd(qpn, wr, dest))
                } else if t == abi::verbs::QpType::XrcIni {
                    // SR-02: the XRC SRQ goes into the XRCETH of its packets.
                    decode_send_xrc(wqe, max_sge, max_inline)
                        .map(|(wr, srqn)| e.post_send_xrc(qpn, wr, srqn))
                } else {
                    decode_send(wqe, t, max_sge, max_inline).map(|wr| e.post_send(qpn, wr))
                };
                let r = posted.unwrap_or_else(|(id, why)| {
                    counters.bad_wqes += 1;
                    log::debug!("qp {qpn}: send WQE {idx} refused: {why:?}");
                    reject(port, id)
                });
                match r {
                    Ok(()) => Taken::Yes,
                    // The engine holds max_send_wr WQEs: the rest wait in the ring.
                    Err(VerbError::QueueFull) => Taken::Later,
                    Err(VerbError::InsufficientResources) => over_budget(counters),
                    // Reset/Init/RTR: not yet postable; fetched once the QP can send.
                    Err(VerbError::InvalidWr)
                        if !matches!(state(port, qpn), Ok(S::Rts | S::Sqd | S::Sqe | S::Error)) =>
                    {
                        Taken::Later
                    }
                    Err(e) => {
                        // A WR the engine refuses (bad SGE count, not supported):
                        // an error completion, like a WQE that does not decode.
                        counters.bad_wqes += 1;
                        log::debug!("qp {qpn}: send WQE {idx} refused by the engine: {e:?}");
                        let id = u64::from_le_bytes(wqe[..8].try_into().expect("8 bytes"));
                        let _ = reject(port, id);
                        Taken::Yes
                    }
                }
            }
            Post::Recv { qpn, max_sge } => {
                let r = match decode_recv(wqe, max_sge) {
                    Ok(wr) => port.engine_mut().post_recv(qpn, wr),
                    Err(_) => Err(VerbError::InvalidWr),
                };
                match r {
                    Ok(()) => Taken::Yes,
                    Err(VerbError::QueueFull) => Taken::Later,
                    Err(VerbError::InsufficientResources) => over_budget(counters),
                    Err(VerbError::InvalidWr) if matches!(state(port, qpn), Ok(S::Reset)) => {
                        Taken::Later
                    }
                    Err(e) => {
                        // A receive WQE that cannot be used: the QP fails (its
                        // receives flush), as a local QP operation error would.
                        counters.bad_wqes += 1;
                        log::debug!("qp {qpn}: receive WQE {idx} refused: {e:?}");
                        Taken::Broken
                    }
                }
            }
            Post::Srq { srqn, max_sge } => match decode_recv(wqe, max_sge) {
                Ok(wr) => match port.engine_mut().post_srq_recv(srqn, wr) {
                    Ok(()) => Taken::Yes,
                    Err(VerbError::QueueFull) => Taken::Later,
                    Err(VerbError::InsufficientResources) => over_budget(counters),
                    Err(e) => {
                        counters.bad_wqes += 1;
                        log::debug!("srq {srqn}: WQE {idx} refused: {e:?}");
                        Taken::Yes
                    }
                },
                Err(e) => {
                    // No QP to fail: the WQE is skipped and counted.
                    counters.bad_wqes += 1;
                    log::debug!("srq {srqn}: WQE {idx} does not decode: {e:?}");
                    Taken::Yes
                }
            },
        }
    }
}

/// A WQE the memory budget cannot hold now stays in its ring, not consumed:
/// the queue stalls at it like a full engine queue (`Qp::sq_stalled`), so the
/// data path can sleep, and it is fetched again once something that frees
/// memory (a completion, an ACK, a command) woke the data path
/// (ARCHITECTURE.md §9).
fn over_budget(counters: &mut HcaCounters) -> Taken {
    counters.mem_budget_stalls += 1;
    Taken::Later
}

impl Hca {
    /// One round of the data path as of `now`: new WQEs from the doorbells,
    /// then [`Hca::run_timers`]'s work.
    pub fn run_once(
        &mut self,
        mem: &mut dyn Memory,
        db: &dyn Doorbells,
        irq: &dyn Interrupts,
        now: Duration,
    ) -> Work {
        let wqes = self.fetch_wqes(mem, db);
        Work {
            wqes,
            ..self.run_timers(mem, db, irq, now)
        }
    }

    /// The round without the doorbell scan: timers and the link, then
    /// completions and events. Alone it is the round of a data path woken by a
    /// deadline while asleep (no doorbell can have moved unseen then,
    /// abi::uar DOORBELL_PROTOCOL).
    pub fn run_timers(
        &mut self,
        mem: &mut dyn Memory,
        db: &dyn Doorbells,
        irq: &dyn Interrupts,
        now: Duration,
    ) -> Work {
        // What the received packets completed goes to the guest before the
        // round's packets go out: a receive's CQE does not wait for the
        // sendmmsg of the ACK (nor for the peer that send wakes, on a small
        // host; issue 30 item 3). What sending completes (an error flush, a
        // UD send) follows it.
        let mut w = Work {
            packets: self.port.run_receive(mem, now) as u32,
            ..Work::default()
        };
        w.cqes = self.write_cqes(mem, db);
        w.eqes = self.write_events(mem, db, irq);
        w.packets += self.port.run_send(mem, now) as u32;
        // Only if sending completed something: the arm words were read and
        // the EQs' vectors looked at once this round already.
        let engine = self.port.engine();
        if engine.ready_cqs().next().is_some() || engine.has_events() {
            w.cqes += self.write_cqes(mem, db);
            w.eqes += self.write_events(mem, db, irq);
        }
        w
    }

    /// Whether a producer doorbell may have moved since the device last
    /// fetched: the rescan of the sleep protocol (abi::uar DOORBELL_PROTOCOL),
    /// a summary bit set in a page holding a QP, SRQ or CQ, or a queue on the retry
    /// list that stopped at the fetch budget. A queue whose fetch stopped
    /// because the engine could take nothing more, and whose doorbell has not
    /// moved since, is not pending: what unblocks it (a command, an ACK or
    /// completion from the link) wakes the data path anyway, and counting it
    /// would keep the data path from ever sleeping (a doorbell rung on a QP in
    /// Init would spin a core). O(pages in use + retry list), not O(queues).
    pub fn doorbells_pending(&self, db: &dyn Doorbells) -> bool {
        self.slots
            .summary_pages()
            .any(|u| summary_words(u).any(|at| db.load(at) != 0))
            || self.retry.iter().any(|&o| self.unfetched(o, db, true))
    }

    /// Whether `o`'s queues hold WQEs the device has not fetched (with
    /// `new_only`, not counting a queue stalled at its producer index, see
    /// [`crate::hca::Qp::has_wqes`]).
    fn unfetched(&self, o: SlotOwner, db: &dyn Doorbells, new_only: bool) -> bool {
        match o {
            SlotOwner::Qp(n) => self.qps.get(&n).is_some_and(|q| q.has_wqes(db, new_only)),
            SlotOwner::Srq(n) => self.srqs.get(&n).is_some_and(|s| s.has_wqes(db, new_only)),
            SlotOwner::Eq(_) | SlotOwner::Cq(_) => false,
        }
    }

    /// Fills `Hca::todo` with the queues a round fetches from (ARCHITECTURE.md
    /// §2 step 2): those the summaries of the pages in use flag, each word taken with one atomic swap
    /// to zero, plus the retry list; the CQs flagged go to `Hca::arms` for
    /// [`Hca::write_cqes`]. A producer index or arm word stored without its
    /// bit is not read (abi::uar DOORBELL_PROTOCOL): the round costs one
    /// summary line per page holding a QP, SRQ or CQ, then one slot per
    /// flagged object, so an idle QP or CQ costs nothing. A bit of a free slot
    /// or an EQ's is dropped; a bit whose word did not move costs one slot read.
    fn flagged(&mut self, db: &dyn Doorbells) {
        let Hca {
            slots,
            retry,
            arms,
            todo,
            ..
        } = self;
        todo.clear();
        todo.append(retry);
        for uar in slots.summary_pages() {
            for (w, at) in summary_words(uar).enumerate() {
                if db.load(at) == 0 {
                    continue;
                }
                // The load first: an idle page's line stays shared, not
                // written, by the device.
                let mut bits = db.swap(at, 0);
                while bits != 0 {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    let slot = DbSlot {
                        uar,
                        slot: (w as u32 * 32 + b) as u16,
                    };
                    match slots.get(&slot) {
                        Some(SlotOwner::Cq(cqn)) => arms.push(cqn),
                        Some(o) if o.is_flagged() => todo.push(o),
                        _ => {
                            log::trace!("doorbell summary: bit of {slot:?} holds no QP, SRQ or CQ")
                        }
                    }
                }
            }
        }
        if todo.len() > 1 {
            todo.sort_unstable();
            todo.dedup();
        }
    }

    fn fetch_wqes(&mut self, mem: &mut dyn Memory, db: &dyn Doorbells) -> u32 {
        let mut n = 0;
        self.flagged(db);
        let todo = std::mem::take(&mut self.todo);
        let mut buf = std::mem::take(&mut self.wqe_buf);
        for &o in &todo {
            // One load of the slot per queue and round: an index stored after
            // it comes with a new summary bit.
            let behind = match o {
                SlotOwner::Qp(qpn) => {
                    let Some((sq_pi, rq_pi)) = self.qps.get(&qpn).map(|q| q.db.load(db)) else {
                        continue;
                    };
                    n += self.fetch(Wq::Sq(qpn), sq_pi, mem, &mut buf);
                    n += self.fetch(Wq::Rq(qpn), rq_pi, mem, &mut buf);
                    self.qps.get(&qpn).is_some_and(|q| {
                        q.sq_fetched != sq_pi || (q.rq.is_some() && q.rq_fetched != rq_pi)
                    })
                }
                SlotOwner::Srq(srqn) => {
                    let Some(pi) = self.srqs.get(&srqn).map(|s| s.db.load(db).0) else {
                        continue;
                    };
                    n += self.fetch(Wq::Srq(srqn), pi, mem, &mut buf);
                    self.srqs.get(&srqn).is_some_and(|s| s.fetched != pi)
                }
                SlotOwner::Eq(_) | SlotOwner::Cq(_) => false,
            };
            // Left behind (stalled on the engine, or over the fetch budget):
            // fetched again next round without a new bit, so a queue stalled
            // on a full engine resumes once the engine drains.
            if behind {
                self.retry.push(o);
            }
        }
        self.todo = todo;
        self.wqe_buf = buf;
        n
    }

    /// Fails a QP whose guest broke the ring protocol (overrun, unreadable ring):
    /// to Error, so every WQE flushes and the guest sees it (QS-06).
    fn fail_qp(&mut self, qpn: u32, now: Duration) {
        let attr = transport::verbs::QpAttr {
            state: Some(transport::verbs::QpState::Error),
            ..Default::default()
        };
        let t = transport::verbs::Time(now.as_nanos() as u64);
        let engine = self.port.engine_mut();
        let r = if engine.query_rd_qp(qpn).is_ok() {
            // AD-11: an RD QP is modified through its own verb.
            engine.modify_rd_qp(
                qpn,
                &transport::verbs::RdQpAttr {
                    state: transport::verbs::QpState::Error,
                    qkey: None,
                    access: None,
                },
            )
        } else {
            engine.modify_qp(qpn, &attr, transport::verbs::AttrMask::STATE, t)
        };
        if let Err(e) = r {
            log::warn!("qp {qpn}: cannot move to Error: {e:?}");
        }
    }

    /// The ring consumer of every work queue (SQ, RQ, SRQ): reads the WQEs
    /// between the device's index and `pi`, the guest's producer index as
    /// the round loaded it (at most
    /// [`FETCH_BUDGET`] a round), hands each to the engine, and stops where
    /// the engine can take no more (the queue is then stalled at that
    /// producer index, see `Qp::sq_stalled`). A guest that breaks the ring
    /// protocol (an index more than a ring ahead, an unreadable ring, a WQE
    /// the RQ cannot use) skips the queue to its producer index and, for a
    /// QP's queue, fails the QP (QS-06). One table lookup per queue.
    fn fetch(&mut self, q: Wq, pi: u32, mem: &mut dyn Memory, buf: &mut [u8]) -> u32 {
        let Hca {
            qps,
            srqs,
            port,
            counters,
            ..
        } = self;
        let (ring, fetched, stalled_at, post) = match q {
            Wq::Sq(qpn) => {
                let Some(qp) = qps.get_mut(&qpn) else {
                    return 0;
                };
                let post = Post::Send {
                    qpn,
                    t: qp.qp_type,
                    max_sge: qp.cap.max_send_sge,
                    max_inline: qp.cap.max_inline_data,
                };
                (&qp.sq, &mut qp.sq_fetched, &mut qp.sq_stalled, post)
            }
            Wq::Rq(qpn) => {
                let Some(qp) = qps.get_mut(&qpn) else {
                    return 0;
                };
                let Some(rq) = &qp.rq else { return 0 };
                let post = Post::Recv {
                    qpn,
                    max_sge: qp.cap.max_recv_sge,
                };
                (rq, &mut qp.rq_fetched, &mut qp.rq_stalled, post)
            }
            Wq::Srq(srqn) => {
                let Some(s) = srqs.get_mut(&srqn) else {
                    return 0;
                };
                let post = Post::Srq {
                    srqn,
                    max_sge: s.max_sge,
                };
                (&s.ring, &mut s.fetched, &mut s.stalled, post)
            }
        };
        let avail = pi.wrapping_sub(*fetched);
        if avail == 0 {
            return 0;
        }
        let mut broken = false;
        let mut n = 0;
        if avail > ring.len() {
            counters.doorbell_overruns += 1;
            log::debug!(
                "{q:?}: producer index {pi} is {avail} past the device, ring holds {}",
                ring.len()
            );
            *fetched = pi;
            broken = true;
        } else {
            let mut stalled = None;
            let stride = ring.entry_size();
            while n < avail.min(FETCH_BUDGET) {
                let idx = *fetched;
                if ring.read(mem, idx, &mut buf[..stride]).is_err() {
                    counters.memory_faults += 1;
                    *fetched = pi;
                    broken = true;
                    break;
                }
                match post.take(port, counters, idx, &buf[..stride]) {
                    Taken::Yes => {}
                    Taken::Later => {
                        stalled = Some(pi);
                        break;
                    }
                    Taken::Broken => {
                        *fetched = pi;
                        broken = true;
                        break;
                    }
                }
                match q {
                    Wq::Sq(_) => counters.send_wqes += 1,
                    Wq::Rq(_) | Wq::Srq(_) => counters.recv_wqes += 1,
                }
                *fetched = idx.wrapping_add(1);
                n += 1;
            }
            *stalled_at = stalled;
        }
        if broken {
            if let Wq::Sq(qpn) | Wq::Rq(qpn) = q {
                self.fail_qp(qpn, Duration::ZERO);
            }
        }
        n
    }

    /// Moves every completion the engine staged into its CQ ring while there
    /// is room (the consumer index in the CQ's doorbell slot), and raises
    /// completion events for armed CQs (CQ-02).
    ///
    /// The CQ ring alone has a depth, an arming and an overflow
    /// (ARCHITECTURE.md §4 "who owns what"); the engine's per-CQ queue is only
    /// where completions wait for this round's copy. Every staged completion
    /// leaves the engine here, written or, on a CQ in error, discarded and
    /// counted: that is what bounds the engine's queues (a round's worth of
    /// completions, see `transport::engine`'s `Cq`), asserted at the end.
    ///
    /// An arm word the device sees applies to CQEs it writes from then on, and,
    /// as with mlx5's arm doorbell carrying the consumer index, an arm that
    /// finds unconsumed CQEs in the ring fires at once. Otherwise a CQE written
    /// between the driver's arm store and the device reading it would wake
    /// nobody: the driver's arm-then-poll ran before the CQE was there.
    fn write_cqes(&mut self, mem: &mut dyn Memory, db: &dyn Doorbells) -> u32 {
        let mut n = 0;
        let mut fire: Vec<(u32, u32)> = Vec::new();
        let mut overflow: Vec<u32> = Vec::new();
        let Hca {
            port,
            cqs,
            counters,
            arms,
            ..
        } = self;
        // Arm words first, of the CQs whose summary bit this round took (the
        // driver sets it after a new arm word, without WAKE), so an arm seen
        // now applies to what is written below. A CQ whose bit is not taken
        // yet (armed while the device slept, seen by a timer-only round) is
        // armed at the next full round, which fires at once if CQEs wait.
        if arms.len() > 1 {
            arms.sort_unstable();
            arms.dedup();
        }
        for cqn in arms.drain(..) {
            let Some(cq) = cqs.get_mut(&cqn) else {
                continue;
            };
            let (ci, arm) = cq.db.load(db);
            if arm != cq.last_arm {
                cq.last_arm = arm;
                cq.armed = Some(arm & abi::uar::cq_arm::SOLICITED != 0);
                if cq.pi != ci {
                    // Unconsumed CQEs: the driver may have polled before they
                    // landed. A spurious event only costs it a poll.
                    cq.armed = None;
                    fire.push((cq.eqn, cqn));
                }
            }
        }
        // Then only the CQs the engine has completions for.
        let ready: Vec<u32> = port.engine().ready_cqs().collect();
        for cqn in ready {
            let engine = port.engine_mut();
            let Some(cq) = cqs.get_mut(&cqn) else {
                // An engine CQ without a ring (not made by CREATE_CQ): nowhere
                // to write.
                while engine.poll_cq(cqn).is_some() {
                    counters.cqes_discarded += 1;
                }
                continue;
            };
            let (ci, _) = cq.db.load(db);
            while let Some(c) = engine.poll_cq(cqn) {
                if cq.overflowed {
                    // A CQ in error (CQ-03) takes no more CQEs: what the
                    // engine completes for it is discarded, not kept.
                    counters.cqes_discarded += 1;
                    continue;
                }
                if cq.pi.wrapping_sub(ci) >= cq.ring.len() {
                    if cq.pi.wrapping_sub(ci) > cq.ring.len() {
                        // A consumer index ahead of what was written: garbage.
                        log::debug!("cq {cqn}: ci {ci} ahead of pi {}", cq.pi);
                    }
                    // CQ-03: a completion and no room for it (a guest that does
                    // not poll, or a consumer index it made up): the CQ
                    // overflowed. Nothing is written past the ring; the CQ stops
                    // and the driver gets a CQ error event on EQ 0.
                    cq.overflowed = true;
                    counters.cq_overflows += 1;
                    counters.cqes_discarded += 1;
                    overflow.push(cqn);
                    log::warn!("cq {cqn}: overflow (pi {}, ci {ci})", cq.pi);
                    continue;
                }
                let owner = abi::cqe::owner_bit(cq.pi, cq.ring.log_entries());
                let e = cqe_of(&c, owner);
                if !write_entry(&cq.ring, mem, cq.pi, &e.to_bytes()) {
                    counters.memory_faults += 1;
                    counters.cqes_discarded += 1;
                    cq.overflowed = true;
                    log::warn!("cq {cqn}: ring not writable; CQ stopped");
                    continue;
                }
                cq.pi = cq.pi.wrapping_add(1);
                counters.cqes += 1;
                n += 1;
                // CQ-02: next, or solicited (OP-10) or an error.
                if let Some(solicited_only) = cq.armed {
                    if !solicited_only || c.solicited || c.status != WcStatus::Success {
                        cq.armed = None;
                        fire.push((cq.eqn, cqn));
                    }
                }
            }
        }
        debug_assert!(
            port.engine().ready_cqs().next().is_none(),
            "completions left staged in the engine after the round"
        );
        for cqn in overflow {
            self.push_eqe(0, abi::cqe::EqeType::CqErr.raw(), cqn, 0, mem, db);
        }
        for (eqn, cqn) in fire {
            if let Some(c) = self.cqs.get_mut(&cqn) {
                c.events += 1;
            }
            self.push_eqe(eqn, abi::cqe::EqeType::Completion.raw(), cqn, 0, mem, db);
        }
        n
    }

    /// Turns the engine's events into EQEs: completion events to the CQ's EQ,
    /// the rest to EQ 0; then raises each EQ's vector that has new EQEs and a new
    /// arm word.
    fn write_events(
        &mut self,
        mem: &mut dyn Memory,
        db: &dyn Doorbells,
        irq: &dyn Interrupts,
    ) -> u32 {
        let mut n = 0;
        while let Some(ev) = self.port.engine_mut().poll_event() {
            let kind = abi::cqe::EqeType::of_event(&ev);
            if let Some(e) = abi::cqe::EqePageFault::of_event(&ev) {
                // Issue 29: its own layout, on EQ 0 with the other async events.
                if self.push_eqe_bytes(0, kind.raw(), e.to_bytes(), mem, db) {
                    n += 1;
                }
                continue;
            }
            // All on EQ 0: completion events and CQ errors are the CQ ring's,
            // raised by write_cqes.
            let object = match ev {
                Event::QpFatal { qpn }
                | Event::QpRequestError { qpn }
                | Event::QpAccessError { qpn }
                | Event::CommEstablished { qpn }
                | Event::SqDrained { qpn }
                | Event::PathMigrated { qpn }
                | Event::PathMigrationError { qpn } => qpn,
                Event::SrqLimitReached { srq } => srq,
                Event::PortActive | Event::PortError => 1,
                // Written above as an EqePageFault.
                Event::PageFault(f) => f.qpn,
            };
            if self.push_eqe(0, kind.raw(), object, 0, mem, db) {
                n += 1;
            }
        }
        // What the SM changed on the port (`mgmt`), object = port 1.
        while let Some(ev) = self.port.poll_port_event() {
            use crate::mgmt::PortEvent;
            let kind = match ev {
                PortEvent::LidChange => abi::cqe::EqeType::LidChange,
                PortEvent::PkeyChange => abi::cqe::EqeType::PkeyChange,
                PortEvent::SmChange => abi::cqe::EqeType::SmChange,
                PortEvent::ClientReregister => abi::cqe::EqeType::ClientReregister,
                PortEvent::GidChange => abi::cqe::EqeType::GidChange,
            };
            if self.push_eqe(0, kind.raw(), 1, 0, mem, db) {
                n += 1;
            }
        }
        self.raise_interrupts(db, irq);
        n
    }

    /// Writes one EQE to EQ `eqn` if it has room; false when it had none (the
    /// event is lost and counted: the driver did not consume its EQ).
    pub fn push_eqe(
        &mut self,
        eqn: u32,
        kind: u8,
        object: u32,
        data: u32,
        mem: &mut dyn Memory,
        db: &dyn Doorbells,
    ) -> bool {
        let mut e = abi::cqe::Eqe::ZERO;
        e.kind = kind;
        e.object = object;
        e.data = data;
        self.push_eqe_bytes(eqn, kind, e.to_bytes(), mem, db)
    }

    /// Writes the 16 bytes of an EQE of `kind` (any EQE layout: the owner byte
    /// is the last in all of them) to EQ `eqn` if it has room; as
    /// [`Self::push_eqe`].
    pub fn push_eqe_bytes(
        &mut self,
        eqn: u32,
        kind: u8,
        mut bytes: [u8; abi::cqe::Eqe::SIZE],
        mem: &mut dyn Memory,
        db: &dyn Doorbells,
    ) -> bool {
        let Some(eq) = self.eqs.get_mut(&eqn) else {
            return false;
        };
        let (ci, _) = eq.db.load(db);
        if eq.pi.wrapping_sub(ci) >= eq.ring.len() {
            eq.overflows += 1;
            self.counters.eq_overflows += 1;
            log::warn!(
                "eq {eqn}: full (pi {}, ci {ci}): event {kind:#x} lost",
                eq.pi
            );
            return false;
        }
        bytes[abi::cqe::Eqe::SIZE - 1] = abi::cqe::owner_bit(eq.pi, eq.ring.log_entries());
        if !write_entry(&eq.ring, mem, eq.pi, &bytes) {
            self.counters.memory_faults += 1;
            return false;
        }
        eq.pi = eq.pi.wrapping_add(1);
        self.counters.eqes += 1;
        true
    }

    /// Raises the vector of every EQ holding unconsumed EQEs whose arm word
    /// changed since its last interrupt (abi::uar DOORBELL_PROTOCOL).
    pub fn raise_interrupts(&mut self, db: &dyn Doorbells, irq: &dyn Interrupts) {
        for eq in self.eqs.values_mut() {
            let (ci, arm) = eq.db.load(db);
            if eq.pi != ci && arm != eq.last_arm {
                eq.last_arm = arm;
                irq.trigger(eq.vector);
                self.counters.interrupts += 1;
            }
        }
    }
}
