//! Completion queues and shared receive queues as the engine keeps them
//! (seed 003; CQ-01, SR-01).

use std::collections::VecDeque;

use crate::verbs::{Completion, Handle, RecvWr};

/// A completion queue as the engine keeps it: the completions it produced that
/// the caller has not taken yet ([`super::Engine::poll_cq`]), in order.
///
/// Completions are an output of the engine, as packets and events are
/// (ARCHITECTURE.md §4 "who owns what"): the CQ the consumer sees, with its
/// depth, its arming (CQ-02) and its overflow (CQ-03), is the caller's (the
/// device's CQ ring). So this queue has no depth to overflow and no arming.
///
/// Bound: a completion is staged only when the engine retires a WQE it holds
/// (a send WQE, a receive WQE of the QP's RQ or of an SRQ), each once; so the
/// queue holds at most the WQEs the caller posted and the engine retired since
/// the caller last drained it. The device drains every CQ at the end of each
/// data-path round and asserts that nothing stays staged
/// (`device::datapath::write_cqes`), so the queue never holds more than one
/// round's completions: at most the WQEs the engine held in that round
/// (`max_send_wr` + `max_recv_wr` per QP, `max_wr` per SRQ) plus those the
/// round posted, which the guest's rings bound.
#[derive(Debug, Default)]
pub(crate) struct Cq {
    pub staged: VecDeque<Completion>,
    /// QPs using this CQ as send or receive CQ (destroy is refused while
    /// non-zero).
    pub users: usize,
}

/// A shared receive queue (SR-01): receive WQEs consumed in order by any QP using
/// it; the limit event fires once when the count drops below the limit, which
/// then resets to 0 (disarmed).
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: Handle,
    pub max_wr: usize,
    pub max_sge: usize,
    pub limit: usize,
    pub wqes: crate::budget::Held<RecvWr>,
    pub users: usize,
    /// An XRC SRQ's domain and CQ (SR-02).
    pub xrc: Option<super::xrc::XrcSrq>,
}

impl Srq {
    /// Takes the next receive WQE; returns it and whether the limit event fires.
    pub fn take(&mut self) -> Option<(RecvWr, bool)> {
        let w = self.wqes.pop_front()?;
        let fire = self.limit != 0 && self.wqes.len() < self.limit;
        if fire {
            self.limit = 0;
        }
        Some((w, fire))
    }
}
