//! Context-table snapshots for BAR0's read-only window (ARCHITECTURE.md §4;
//! abi::context): the live state of one QP, CQ, SRQ, MR or EQ as its record,
//! taken when the driver writes CTX_INDEX.
//!
//! The record is built from the device's tables and the engine's (QP state,
//! PSNs and attributes from `query_qp`, SRQ limit, MR translation). What
//! neither keeps reads as zero: a QP's oldest unacknowledged PSN, retired WQE
//! count and per-QP packet counters, an EQ's interrupt count. The doorbell
//! words (producer and consumer indices, whether a CQ or EQ is armed) are the
//! guest's: [`snapshot_with_doorbells`] reads them, [`snapshot`] shows zeros
//! for the indices and no ARMED flag.

use crate::abi::bar0::{CtxStatus, CtxTable};
use crate::abi::context::{ctx_flags, CqContext, EqContext, MrContext, QpContext, SrqContext};
use crate::abi::uar::cq_arm;
use crate::abi::verbs::num;
use crate::convert::av_to_abi;
use crate::hca::{DbSlot, Doorbells, Hca};

/// The record of object `index` of `table`, without the doorbell words.
pub fn snapshot(hca: &Hca, table: CtxTable, index: u32) -> (CtxStatus, Vec<u8>) {
    take(hca, None, table, index)
}

/// The record of object `index` of `table`, with the doorbell words as they
/// are now.
pub fn snapshot_with_doorbells(
    hca: &Hca,
    db: &dyn Doorbells,
    table: CtxTable,
    index: u32,
) -> (CtxStatus, Vec<u8>) {
    take(hca, Some(db), table, index)
}

fn take(
    hca: &Hca,
    db: Option<&dyn Doorbells>,
    table: CtxTable,
    index: u32,
) -> (CtxStatus, Vec<u8>) {
    let record = match table {
        CtxTable::None => return (CtxStatus::BadTable, Vec::new()),
        CtxTable::Qpc => qp(hca, db, index).map(|c| c.to_bytes().to_vec()),
        CtxTable::Cqc => cq(hca, db, index).map(|c| c.to_bytes().to_vec()),
        CtxTable::Srqc => srq(hca, db, index).map(|c| c.to_bytes().to_vec()),
        CtxTable::Mpt => mr(hca, index).map(|c| c.to_bytes().to_vec()),
        CtxTable::Eqc => eq(hca, db, index).map(|c| c.to_bytes().to_vec()),
    };
    match record {
        Some(b) => (CtxStatus::Ok, b),
        None => (CtxStatus::NoObject, Vec::new()),
    }
}

/// The slot's two words, or zeros without the doorbell pages.
fn words(slot: DbSlot, db: Option<&dyn Doorbells>) -> (u32, u32) {
    db.map_or((0, 0), |d| slot.load(d))
}

/// A count the engine keeps, as a record field (saturated; 0 for an object
/// the engine does not know).
fn engine_count(n: Option<usize>) -> u32 {
    n.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

fn shift_of(entry_size: usize) -> u8 {
    entry_size.trailing_zeros() as u8
}

fn qp(hca: &Hca, db: Option<&dyn Doorbells>, qpn: u32) -> Option<QpContext> {
    let q = hca.qps.get(&qpn)?;
    let e = hca.port.engine();
    let (state, a) = match e.query_qp(qpn) {
        Ok((state, a, _)) => (state, a),
        // AD-11: an RD QP has a state and a Q_Key; its path, PSNs and timers
        // are its EE contexts'.
        Err(_) => {
            let (state, qkey, _) = e.query_rd_qp(qpn).ok()?;
            let a = transport::verbs::QpAttr {
                qkey,
                ..Default::default()
            };
            (state, a)
        }
    };
    let (sq_pi, rq_pi) = words(q.db, db);
    let (log2_rq_size, rq_wqe_shift) = q.rq.as_ref().map_or((0, 0), |r| {
        (r.log_entries() as u8, shift_of(r.entry_size()))
    });
    Some(QpContext {
        qpn,
        pdn: q.pdn,
        send_cqn: q.send_cqn,
        recv_cqn: q.recv_cqn,
        srqn: q.srqn.unwrap_or(num::NONE),
        dest_qpn: a.dest_qp_num,
        qkey: a.qkey,
        access: a.access.0,
        sq_psn: a.sq_psn,
        // RD QPs have none (their EECs hold the PSNs): 0.
        sq_una_psn: e.sq_una_psn(qpn).unwrap_or(0),
        rq_psn: a.rq_psn,
        sq_pi,
        sq_ci: q.sq_fetched,
        sq_done: 0,
        rq_pi: if q.rq.is_some() { rq_pi } else { 0 },
        rq_ci: if q.rq.is_some() { q.rq_fetched } else { 0 },
        uar: q.db.uar,
        db_slot: q.db.slot,
        pkey_index: a.pkey_index,
        qp_type: q.qp_type.raw(),
        state: state as u8,
        path_mtu: a.path_mtu as u8,
        port: a.port_num,
        log2_sq_size: q.sq.log_entries() as u8,
        log2_rq_size,
        sq_wqe_shift: shift_of(q.sq.entry_size()),
        rq_wqe_shift,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        min_rnr_timer: a.min_rnr_timer,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        sq_sig_all: u8::from(q.sq_sig_all),
        rsvd: 0,
        av: av_to_abi(&a.av),
        tx_packets: 0,
        rx_packets: 0,
        retransmits: 0,
        rnr_naks: 0,
        sq: q.sq_pbl,
        rq: q.rq_pbl,
    })
}

fn cq(hca: &Hca, db: Option<&dyn Doorbells>, cqn: u32) -> Option<CqContext> {
    let c = hca.cqs.get(&cqn)?;
    let (ci, arm) = words(c.db, db);
    let mut flags = 0;
    if let Some(solicited) = c.armed {
        flags |= ctx_flags::ARMED;
        if solicited {
            flags |= ctx_flags::SOLICITED;
        }
    } else if db.is_some() && arm != c.last_arm {
        flags |= ctx_flags::ARMED;
        if arm & cq_arm::SOLICITED != 0 {
            flags |= ctx_flags::SOLICITED;
        }
    }
    if c.overflowed {
        flags |= ctx_flags::ERROR;
    }
    Some(CqContext {
        cqn,
        eqn: c.eqn,
        uar: c.db.uar,
        db_slot: c.db.slot,
        log2_entries: c.ring.log_entries() as u8,
        flags,
        pi: c.pi,
        ci,
        arm: c.last_arm,
        users: engine_count(hca.port.engine().cq_users(cqn)),
        events: c.events,
        rsvd: 0,
        ring: c.pbl,
    })
}

fn srq(hca: &Hca, db: Option<&dyn Doorbells>, srqn: u32) -> Option<SrqContext> {
    let s = hca.srqs.get(&srqn)?;
    let (_, limit) = hca.port.engine().query_srq(srqn).ok()?;
    let (pi, _) = words(s.db, db);
    Some(SrqContext {
        srqn,
        pdn: s.pdn,
        max_wr: s.ring.len(),
        max_sge: s.max_sge,
        srq_limit: u32::try_from(limit).unwrap_or(u32::MAX),
        pi,
        ci: s.fetched,
        uar: s.db.uar,
        db_slot: s.db.slot,
        log2_entries: s.ring.log_entries() as u8,
        wqe_shift: shift_of(s.ring.entry_size()),
        users: engine_count(hca.port.engine().srq_users(srqn)),
        flags: if limit != 0 { ctx_flags::ARMED } else { 0 },
        rsvd: [0; 7],
        ring: s.pbl,
    })
}

fn mr(hca: &Hca, index: u32) -> Option<MrContext> {
    let m = hca.port.engine().mr_table().mr_at(index)?;
    // A DM MR's linear translation is onto the engine's DM window.
    let dm = m
        .linear()
        .and_then(|pa| pa.checked_sub(crate::dm::DM_WINDOW));
    Some(MrContext {
        key: m.key(),
        pdn: m.pd(),
        access: m.access().0,
        npages: u32::try_from(m.pages().len()).unwrap_or(u32::MAX),
        iova: m.iova(),
        length: m.length(),
        first_page: dm.unwrap_or_else(|| m.pages().first().copied().unwrap_or(0)),
        page_shift: m.page_size().trailing_zeros() as u8,
        flags: match m.fast() {
            _ if m.is_identity() => ctx_flags::DMA,
            _ if dm.is_some() => ctx_flags::DM,
            Some(f) if f.valid => ctx_flags::FAST,
            Some(_) => ctx_flags::FAST | ctx_flags::FREE,
            None => 0,
        },
        rsvd: [0; 6],
    })
}

fn eq(hca: &Hca, db: Option<&dyn Doorbells>, eqn: u32) -> Option<EqContext> {
    let e = hca.eqs.get(&eqn)?;
    let (ci, arm) = words(e.db, db);
    Some(EqContext {
        eqn,
        uar: e.db.uar,
        db_slot: e.db.slot,
        vector: e.vector,
        log2_entries: e.ring.log_entries() as u8,
        flags: if db.is_some() && arm != e.last_arm {
            ctx_flags::ARMED
        } else {
            0
        },
        rsvd0: 0,
        pi: e.pi,
        ci,
        arm: e.last_arm,
        rsvd1: 0,
        interrupts: 0,
        rsvd2: 0,
        ring: e.pbl,
    })
}
