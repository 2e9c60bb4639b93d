//! On-demand paging in the engine (issue 29): the page faults QPs meet in ODP
//! MRs (`mr::odp`), the events that tell the guest, and what a MAP, UNMAP or
//! FAULT_FAIL does to the QPs waiting. The engine's handlers call the narrow
//! entry points here ([`requester_fault`], [`responder_fault`]); the verbs are
//! [`Engine::odp_map`], [`Engine::odp_unmap`] and [`Engine::odp_fault_fail`].
//!
//! What happens at a fault, as mlx5 does it (Linux
//! drivers/infiniband/hw/mlx5/odp.c: a WQE page fault of the requester or
//! responder, `mlx5_ib_mr_wqe_pfault_handler`, resolved by mapping the pages
//! and resumed with `mlx5_ib_page_fault_resume`, with an error when the pages
//! could not be had):
//!
//! - requester (a gather for SEND, WRITE or UD SEND): the send queue stops at
//!   the packet, later WQEs wait too, no busy retry; a MAP covering the pages
//!   restarts it where it stopped;
//! - responder (a SEND's receive buffer, a WRITE or ATOMIC target): the request
//!   is not executed and is answered with an RNR NAK (9.7.5.2.8), which the
//!   requester retries after its RNR timer; by then the guest has usually mapped
//!   the pages (mlx5 hardware answers RNR NAK while a responder fault is
//!   outstanding);
//! - FAULT_FAIL: the pages become an access error (`AccessError::OdpFailed`):
//!   the requester's retry completes with Local Protection Error (IBA 10.10.3
//!   Table 81: the local buffer is not valid for the access) and the QP goes to
//!   Error; the responder answers the retried request with NAK Remote Access
//!   Error (9.7.5.2.4), as for any R_Key failure.
//!
//! One fault per QP side is outstanding at a time (a requester waits at one
//! point; a responder's second fault while one is outstanding is not raised,
//! counted, and the request is RNR NAKed all the same, so its retry raises it
//! later): at most two per QP, whatever the peer sends.

use crate::mr::OdpFault;
use crate::verbs::{Event, PageFault, VerbError};

use super::{Ctx, Engine, Qp};

/// ODP counters of the engine.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OdpCounters {
    /// Page fault events raised.
    pub faults_raised: u64,
    /// Faults met but not raised: the QP side already had one outstanding
    /// for other pages (the request was RNR NAKed; its retry raises it).
    pub faults_not_raised: u64,
    /// Faults resolved by a MAP covering them.
    pub faults_resolved: u64,
    /// Faults the guest failed (FAULT_FAIL).
    pub faults_failed: u64,
    /// RNR NAKs sent for a page not present.
    pub rnr_naks: u64,
    /// READ responses or atomic results dropped for a page not present.
    pub responses_dropped: u64,
    /// UNMAPs that removed translations.
    pub invalidations: u64,
}

/// The faults of one QP that wait for the guest.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpOdp {
    /// The send queue waits at this fault.
    pub req: Option<OdpFault>,
    /// The responder raised this one.
    pub resp: Option<OdpFault>,
}

impl QpOdp {
    /// Whether the send queue waits for pages.
    pub fn sq_waits(&self) -> bool {
        self.req.is_some()
    }
}

fn event(qpn: u32, f: &OdpFault, responder: bool) -> Event {
    Event::PageFault(PageFault {
        qpn,
        key: f.key,
        vpn: f.vpn,
        npages: f.npages,
        write: f.write,
        responder,
    })
}

/// The requester met fault `f` building a packet: the send queue waits (no
/// packet until a MAP or FAULT_FAIL names the pages) and the guest is told.
pub(crate) fn requester_fault(qp: &mut Qp, f: OdpFault, cx: &mut Ctx<'_>) {
    if qp.odp.req.is_none() {
        qp.odp.req = Some(f);
        cx.counters.odp.faults_raised += 1;
        cx.fx.events.push(event(qp.qpn, &f, false));
    }
}

/// The responder met fault `f` for the request it is about to RNR NAK (or a
/// READ response it holds back): raised once until resolved.
pub(crate) fn responder_fault(qp: &mut Qp, f: OdpFault, cx: &mut Ctx<'_>) {
    match qp.odp.resp {
        None => {
            qp.odp.resp = Some(f);
            cx.counters.odp.faults_raised += 1;
            cx.fx.events.push(event(qp.qpn, &f, true));
        }
        Some(g) if g.overlaps(f.key, f.vpn, u64::from(f.npages)) => {}
        Some(_) => cx.counters.odp.faults_not_raised += 1,
    }
}

/// A responder's RNR NAK for a page not present (counted apart from the RNR
/// NAKs for want of a receive WQE).
pub(crate) fn count_rnr_nak(cx: &mut Ctx<'_>) {
    cx.counters.odp.rnr_naks += 1;
}

impl Engine {
    /// MAP (issue 29): installs `pages` (4 KiB each) of ODP MR `key` from the
    /// 4 KiB-aligned `va` on, then restarts the QPs waiting on them: a send
    /// queue continues where it stopped; a responder's fault is forgotten (the
    /// requester's RNR retry finds the pages). Errors as [`MrTable::odp_map`];
    /// nothing changes then.
    ///
    /// [`MrTable::odp_map`]: crate::mr::MrTable::odp_map
    pub fn odp_map(&mut self, key: u32, va: u64, pages: &[u64]) -> Result<(), VerbError> {
        let first = self.mrs.odp_map(key, va, pages)?;
        let n = self.settle_faults(key, first, pages.len() as u64);
        self.counters.odp.faults_resolved += n;
        Ok(())
    }

    /// UNMAP (issue 29): removes the translations of `[va, va + length)`
    /// (rounded out to pages). Every access looks its pages up when it copies
    /// (retransmits, READ responses and their replays included), so when this
    /// returns nothing reaches the old pages. Errors as
    /// [`MrTable::odp_unmap`].
    ///
    /// [`MrTable::odp_unmap`]: crate::mr::MrTable::odp_unmap
    pub fn odp_unmap(&mut self, key: u32, va: u64, length: u64) -> Result<(), VerbError> {
        self.mrs.odp_unmap(key, va, length)?;
        self.counters.odp.invalidations += 1;
        Ok(())
    }

    /// FAULT_FAIL (issue 29): the guest could not fault in `[va, va + length)`.
    /// The pages become an access error; the QPs waiting on them resume and
    /// fail: the send queue's WQE completes with Local Protection Error, the
    /// responder NAKs the retried request Remote Access Error. Errors as
    /// [`MrTable::odp_fail`].
    ///
    /// [`MrTable::odp_fail`]: crate::mr::MrTable::odp_fail
    pub fn odp_fault_fail(&mut self, key: u32, va: u64, length: u64) -> Result<(), VerbError> {
        let (first, n) = self.mrs.odp_fail(key, va, length)?;
        let n = self.settle_faults(key, first, n);
        self.counters.odp.faults_failed += n;
        Ok(())
    }

    /// Forgets the faults of every QP that `npages` pages from `vpn` of MR
    /// `key` cover and schedules those QPs (their retry finds the pages, or
    /// fails on them); returns how many faults that was.
    fn settle_faults(&mut self, key: u32, vpn: u64, npages: u64) -> u64 {
        let mut wake = Vec::new();
        let mut n = 0;
        for (qpn, qp) in self.qps.iter_mut() {
            let o = &mut qp.odp;
            for side in [&mut o.req, &mut o.resp] {
                if side.is_some_and(|f| f.overlaps(key, vpn, npages)) {
                    *side = None;
                    n += 1;
                    wake.push(*qpn);
                }
            }
        }
        for qpn in wake {
            self.schedule_qp(qpn);
        }
        n
    }
}
