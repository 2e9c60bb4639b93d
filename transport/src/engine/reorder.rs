//! The receive reorder hold (issue 14; vhca policy, ARCHITECTURE.md §3).
//!
//! A fabric that swaps two adjacent packets of an RC or XRC QP costs a whole
//! recovery under the spec's rules alone: the responder NAKs the request
//! that came one PSN early (PSN Sequence Error, RL-03), drops what follows
//! until the requester's go-back (9.7.4.1.3) resends it all; a READ
//! response one PSN early makes the requester ask again for the rest of the
//! READ (RL-14), which the responder re-executes (RL-05).
//!
//! So an RC/XRC packet that arrives exactly one PSN ahead of the one its QP
//! expects (a request one past the responder's ePSN while no sequence NAK is
//! outstanding; a READ response one past the requester's oldest missing
//! response) is held briefly before any of the spec's processing runs:
//!
//! - the next packet of that QP in the same direction releases it: if that
//!   one is the missing PSN, it is processed first and the held one right
//!   after, in order (no NAK, no re-request); if it is older than the
//!   missing PSN (a duplicate) it is processed and the hold continues; else
//!   the held packet is processed first, then the new one, in the order
//!   they came;
//! - else it is processed when [`Limits::reorder_hold_ns`] has passed (the
//!   engine's timers, [`super::Engine::handle_timeout`]).
//!
//! Holding is indistinguishable from the fabric delivering the packet a
//! little later, which it may (IBA 9.7.5.1 allows any delay; the packet
//! passes every header check again when it is processed), so every rule of
//! the spec holds for what is processed: a lost packet is still NAKed
//! (RL-03), a gap in READ responses still asked for again (RL-14), only a
//! packet time or the hold time later.
//!
//! A path that loses packets but does not reorder them pays for each hold:
//! the packet after a lost one waits for the next before its NAK goes. So
//! once [`MISS_LIMIT`] holds of a QP in a row ended otherwise than in order
//! (overtaken or expired), that QP holds only one candidate in
//! [`PROBE_EVERY`] (`reorder_skipped` counts the others), until a hold of it
//! ends in order again: a reordering path keeps the hold, a lossy one mostly
//! skips it. The record is the QP's ([`Misses`], two counters in each QP),
//! not the engine's, so a peer whose path loses (or that makes its holds
//! miss on purpose) switches the hold off for its own QPs only (issue 25).
//!
//! Bounded: at most [`SLOTS`] packets are held per engine, one per QP and
//! direction, and at most [`PEER_SLOTS`] from one peer (its source LID, or
//! on RoCE its source GID), in buffers allocated on the first hold; with
//! every slot in use, or every slot its peer may take, the packet is
//! processed at once (`reorder_full`): a peer with many QPs cannot take the
//! hold from the others (issue 25). Nothing is held while
//! nothing arrives out of order: a lossless stream pays one branch per
//! packet. The earliest expiry is kept, so [`super::Engine::poll_timeout`]
//! stays O(1).

use super::{Qp, QpType, RxFrom};
use crate::psn;
use crate::verbs::{Time, WrOpcode};
use crate::wire::opcode::{Direction, Operation};
use crate::wire::PacketRepr;

/// Packets held at most, over all QPs of an engine.
pub const SLOTS: usize = 16;

/// Packets held at most from one peer: half the slots, so that the others
/// always have the other half.
pub const PEER_SLOTS: usize = SLOTS / 2;

/// Default hold (`Limits::reorder_hold_ns`): well under a round trip of the
/// slowest path vhca runs on (two processes on one host: 50-100 us), and
/// long enough for the packet that overtook the held one to arrive in the
/// same or the next batch of the receive path.
pub const DEFAULT_HOLD_NS: u64 = 50_000;

/// Holds in a row not ended in order after which most candidates are
/// processed at once.
pub const MISS_LIMIT: u32 = 8;
/// Past [`MISS_LIMIT`], one candidate in this many is still held, so that a
/// path that starts to reorder is noticed.
pub const PROBE_EVERY: u32 = 8;

/// Packets longer than this are never held (a native packet with a GRH and a
/// 4 KiB payload, or a RoCE frame, fits).
const MAX_LEN: usize = 4096 + 256;

/// The hold's counters (ARCHITECTURE.md §3: every choice counted).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReorderCounters {
    /// Packets held one PSN ahead.
    pub held: u64,
    /// Held packets processed right after the missing PSN came: a sequence
    /// NAK or READ re-request saved.
    pub in_order: u64,
    /// Held packets processed because another (later) packet of their QP
    /// came first: the missing one was lost or is further behind.
    pub overtaken: u64,
    /// Held packets processed when the hold time ran out.
    pub expired: u64,
    /// Packets one PSN ahead processed at once because every slot was in use.
    pub full: u64,
    /// Packets one PSN ahead processed at once because the last
    /// [`MISS_LIMIT`] holds or more ended otherwise than in order (a path
    /// that loses rather than reorders).
    pub skipped: u64,
    /// Duplicate READ requests (a fabric's duplicate, RL-05) answered by the
    /// same READ's answer still queued and not begun, not a second one
    /// (`responder::responses::duplicate`).
    pub dup_reads_queued: u64,
}

/// Which processing a held packet waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// A request: the responder's ePSN check (RL-03).
    Request,
    /// A READ response: the requester's response PSN check (RL-14).
    Response,
}

#[derive(Debug)]
struct Slot {
    qpn: u32,
    dir: Dir,
    /// The PSN whose arrival releases the held packet in order.
    missing: u32,
    until: Time,
    from: RxFrom,
    /// The sender ([`PEER_SLOTS`]).
    peer: [u8; 16],
    buf: Vec<u8>,
}

/// What the receive path does with an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Arrival {
    /// Process it; nothing held for its QP is affected.
    Process,
    /// It was held (copied into a slot): nothing more now.
    Held,
    /// Process it, then the packet of slot `n` (it was the missing PSN).
    ThenHeld(usize),
    /// Process the packet of slot `n` first, then this one.
    HeldFirst(usize),
}

/// The engine's hold slots.
#[derive(Debug, Default)]
pub(crate) struct ReorderHold {
    slots: Vec<Option<Slot>>,
    /// Slots in use.
    used: usize,
    /// The earliest `until` of the slots in use.
    next: Option<Time>,
    /// A released packet's buffer, kept for the next hold.
    spare: Vec<u8>,
}

/// How a QP's holds ended lately (kept in the QP: see the module doc).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Misses {
    /// Holds in a row that ended otherwise than in order.
    misses: u32,
    /// Candidates seen since `misses` reached [`MISS_LIMIT`].
    candidates: u32,
}

impl Misses {
    /// A hold of the QP ended otherwise than in order.
    pub(super) fn miss(&mut self) {
        self.misses = self.misses.saturating_add(1);
    }

    /// Whether a candidate of the QP is processed at once rather than held:
    /// past [`MISS_LIMIT`] misses, all but one in [`PROBE_EVERY`].
    fn skip(&mut self) -> bool {
        if self.misses < MISS_LIMIT {
            return false;
        }
        self.candidates = self.candidates.wrapping_add(1);
        !self.candidates.is_multiple_of(PROBE_EVERY)
    }
}

impl ReorderHold {
    /// The earliest time a held packet expires (O(1)).
    pub(super) fn next_expiry(&self) -> Option<Time> {
        self.next
    }

    fn recompute(&mut self) {
        self.next = self.slots.iter().flatten().map(|s| s.until).min();
    }

    fn find(&self, qpn: u32, dir: Dir) -> Option<usize> {
        if self.used == 0 {
            return None;
        }
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.qpn == qpn && s.dir == dir))
    }

    /// Decides what happens to `pkt` (raw bytes `buf`, `from` its link) for
    /// `qp`, which passed the header checks, sent by `peer` (its source LID
    /// or GID, [`PEER_SLOTS`]); `m` is the QP's record (`Qp::hold_misses`).
    /// `hold_ns` 0: never hold.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_arrival(
        &mut self,
        c: &mut ReorderCounters,
        hold_ns: u64,
        qp: &Qp,
        m: &mut Misses,
        peer: [u8; 16],
        pkt: &PacketRepr<'_>,
        buf: super::io::RxBuf<'_>,
        from: RxFrom,
        now: Time,
    ) -> Arrival {
        if hold_ns == 0 && self.used == 0 {
            return Arrival::Process;
        }
        let Some((dir, ahead_of)) = classify(qp, pkt) else {
            return Arrival::Process;
        };
        let p = pkt.transport.bth.psn;
        if let Some(n) = self.find(qp.qpn, dir) {
            let missing = self.slots[n].as_ref().map_or(p, |s| s.missing);
            let d = psn::diff(p, missing);
            return if d == 0 {
                c.in_order += 1;
                m.misses = 0;
                Arrival::ThenHeld(n)
            } else if d < 0 {
                // A duplicate of something older: the gap is still open.
                Arrival::Process
            } else {
                c.overtaken += 1;
                m.miss();
                Arrival::HeldFirst(n)
            };
        }
        let Some(missing) = ahead_of else {
            return Arrival::Process;
        };
        if hold_ns == 0 || buf.len() > MAX_LEN {
            return Arrival::Process;
        }
        if m.skip() {
            c.skipped += 1;
            return Arrival::Process;
        }
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, || None);
        }
        let Some(free) = self.slots.iter().position(Option::is_none) else {
            c.full += 1;
            return Arrival::Process;
        };
        let of_peer = self.slots.iter().flatten().filter(|s| s.peer == peer);
        if of_peer.count() >= PEER_SLOTS {
            c.full += 1;
            return Arrival::Process;
        }
        let until = now.plus_ns(hold_ns);
        // A slot keeps its buffer's allocation from one hold to the next
        // (`take` hands it back through `put_back`).
        let mut bytes = std::mem::take(&mut self.spare);
        buf.copy_into(&mut bytes);
        self.slots[free] = Some(Slot {
            qpn: qp.qpn,
            dir,
            missing,
            until,
            from,
            peer,
            buf: bytes,
        });
        self.used += 1;
        c.held += 1;
        self.next = Some(self.next.map_or(until, |t| t.min(until)));
        Arrival::Held
    }

    /// Empties slot `n`: its packet's bytes and source, to process now.
    pub(super) fn take(&mut self, n: usize) -> Option<(Vec<u8>, RxFrom)> {
        let s = self.slots.get_mut(n)?.take()?;
        self.used -= 1;
        self.recompute();
        Some((s.buf, s.from))
    }

    /// Gives back a buffer [`Self::take`] returned, once processed.
    pub(super) fn put_back(&mut self, buf: Vec<u8>) {
        if buf.capacity() > self.spare.capacity() {
            self.spare = buf;
        }
    }

    /// Counts a hold that ran out (its packet is processed now); returns
    /// the QP of slot `n`, whose record ([`Misses::miss`]) the caller
    /// updates.
    pub(super) fn on_expired(&mut self, n: usize, c: &mut ReorderCounters) -> Option<u32> {
        c.expired += 1;
        self.slots.get(n)?.as_ref().map(|s| s.qpn)
    }

    /// The first slot whose hold ran out at `now` (O(1) when none has).
    pub(super) fn first_expired(&self, now: Time) -> Option<usize> {
        if self.next.is_none_or(|t| t > now) {
            return None;
        }
        self.slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.until <= now))
    }

    /// Drops what is held for `qpn` (the QP is destroyed or reset: its
    /// packets would be dropped by the header checks anyway).
    pub(super) fn forget(&mut self, qpn: u32) {
        if self.used == 0 {
            return;
        }
        for s in self.slots.iter_mut() {
            if s.as_ref().is_some_and(|s| s.qpn == qpn) {
                *s = None;
                self.used -= 1;
            }
        }
        self.recompute();
    }
}

/// The direction of an RC/XRC packet the hold may concern, and the missing
/// PSN when it is exactly one ahead of what its QP expects.
fn classify(qp: &Qp, pkt: &PacketRepr<'_>) -> Option<(Dir, Option<u32>)> {
    if !matches!(
        qp.init.qp_type,
        QpType::Rc | QpType::XrcTgt | QpType::XrcIni
    ) {
        return None;
    }
    let bth = &pkt.transport.bth;
    let info = bth.opcode.info();
    let p = bth.psn;
    match info.direction() {
        Direction::Request => {
            // RL-03: ahead of ePSN, before the NAK for the gap went. Not
            // only by one: the request it overtook may be a READ, whose
            // responses take as many PSNs as it asks for (9.7.4.1.1).
            let e = qp.resp.epsn;
            let ahead = (!qp.resp.nak_sent && psn::diff(p, e) > 0).then_some(e);
            Some((Dir::Request, ahead))
        }
        Direction::Response => {
            if info.operation != Operation::RdmaReadResponse {
                return None;
            }
            // RL-14: one ahead of the oldest response still missing, which
            // is `una` while the oldest unfinished WQE is a READ (a
            // response acknowledges its own PSN, 9.7.4.1.2).
            let r = &qp.req;
            let una = r.una;
            let read_at_una = r
                .open_wqe(una)
                .is_some_and(|i| r.wqes[i].wr.opcode == WrOpcode::RdmaRead);
            let ahead =
                (read_at_una && psn::diff(p, una) == 1 && psn::diff(p, r.hwm) < 0).then_some(una);
            Some((Dir::Response, ahead))
        }
        Direction::Notification => None,
    }
}
