//! Shared receive queues: CREATE_SRQ, MODIFY_SRQ, QUERY_SRQ, DESTROY_SRQ and
//! RESIZE_SRQ, and the receive ring checks that QPs share.

use crate::abi::cmd::{
    CreateSrqIn, CreateSrqOut, DestroySrqIn, ModifySrqIn, QuerySrqIn, QuerySrqOut, ResizeSrqIn,
    ResizeSrqOut, Status,
};
use crate::abi::verbs::{srq_attr_mask, SrqType};
use crate::abi::wqe::{wqe_const, RecvCtrl, Sge};
use crate::hca::{Doorbells, SlotOwner, Srq};

use super::mr::charge_rings;
use super::mr::pd_exists;
use super::{fail, log2_floor, reserved, Exec, Fail, Syndrome};

/// Receive WQE stride checks (RQ and SRQ): the stride in range, room for
/// `max_sge` SGEs after the control segment. Returns the SGEs it holds.
pub(super) fn recv_stride(shift: u8, max_sge: u32) -> Result<u32, Fail> {
    let shift = u32::from(shift);
    if !(wqe_const::RQ_MIN_WQE_SHIFT..=wqe_const::MAX_WQE_SHIFT).contains(&shift) {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    let room = ((1u32 << shift) - RecvCtrl::SIZE as u32) / Sge::SIZE as u32;
    if max_sge > room {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    Ok(room)
}

/// A ring of `2^log2` WQEs for `wr` of them, in a device that allows
/// `max_wr`: LIMIT_EXCEEDED beyond the device, BAD_PARAM when smaller than asked.
pub(super) fn wq_size(log2: u8, wr: u32, max_wr: u32) -> Result<u32, Fail> {
    let log2 = u32::from(log2);
    if log2 > log2_floor(max_wr) {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    if wr > 1 << log2 {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    Ok(1 << log2)
}

pub(super) fn create_srq(x: &mut Exec<'_>, i: CreateSrqIn) -> Result<CreateSrqOut, Fail> {
    let caps = x.hca.caps;
    reserved(i.rsvd == [0; 3] && i.rsvd2 == 0)?;
    let xrc = match SrqType::from_raw(i.srq_type) {
        Some(SrqType::Basic) => {
            reserved(i.xrcdn == 0 && i.cqn == 0)?;
            None
        }
        // SR-02: an XRC SRQ names its domain and its CQ.
        Some(SrqType::Xrc) => Some((i.xrcdn, i.cqn)),
        None => return Err(fail(Status::BadParam, Syndrome::AttrValue)),
    };
    pd_exists(x, i.pdn)?;
    if let Some((xrcdn, cqn)) = xrc {
        super::xrc::xrc_srq_parts(x, xrcdn, cqn)?;
    }
    if i.max_wr == 0 || i.max_wr > caps.max_srq_wr || i.max_sge > caps.max_sge {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    if i.srq_limit > i.max_wr {
        return Err(fail(Status::BadParam, Syndrome::AttrValue));
    }
    let max_wr = wq_size(i.log2_entries, i.max_wr, caps.max_srq_wr)?;
    let max_sge = recv_stride(i.wqe_shift, i.max_sge)?.min(caps.max_sge);
    let db = x.free_slot(i.uar, i.db_slot, false)?;
    let ring = x.ring(
        &i.ring,
        u32::from(i.wqe_shift),
        u32::from(i.log2_entries),
        log2_floor(caps.max_srq_wr),
    )?;
    let charge = charge_rings(x, &[Some(&ring)])?;
    let srqn = match xrc {
        None => x.engine().create_srq(i.pdn, max_wr, max_sge, i.srq_limit)?,
        Some((xrcd, cq)) => {
            x.engine()
                .create_xrc_srq(i.pdn, xrcd, cq, max_wr, max_sge, i.srq_limit)?
        }
    };
    // WQEs are new from the producer index in the slot now.
    let (pi, _) = db.load(x.db);
    x.hca.srqs.insert(
        srqn,
        Srq {
            pdn: i.pdn,
            ring,
            db,
            fetched: pi,
            stalled: None,
            max_sge,
            pbl: i.ring,
        },
    );
    x.hca.slots.insert(db, SlotOwner::Srq(srqn));
    x.hca.ring_charges.insert(SlotOwner::Srq(srqn), charge);
    Ok(CreateSrqOut {
        srqn,
        max_wr,
        max_sge,
    })
}

pub(super) fn modify_srq(x: &mut Exec<'_>, i: ModifySrqIn) -> Result<(), Fail> {
    if i.attr_mask & !(srq_attr_mask::MAX_WR | srq_attr_mask::LIMIT) != 0 {
        return Err(fail(Status::BadParam, Syndrome::AttrMask));
    }
    if !x.hca.srqs.contains_key(&i.srqn) {
        return Err(fail(Status::NotFound, Syndrome::NoSrq));
    }
    if i.attr_mask & srq_attr_mask::MAX_WR != 0 {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    if i.attr_mask & srq_attr_mask::LIMIT != 0 {
        x.engine().modify_srq_limit(i.srqn, i.srq_limit)?;
    }
    Ok(())
}

/// RESIZE_SRQ (abi::cmd RESIZE_PROTOCOL): the WQEs posted and not fetched,
/// [fetched, pi), are copied into the new ring at the same indices; fetched
/// ones are in the engine already. Checks and copies come before any state
/// changes.
pub(super) fn resize_srq(x: &mut Exec<'_>, i: ResizeSrqIn) -> Result<ResizeSrqOut, Fail> {
    reserved(i.rsvd == [0; 7])?;
    let caps = x.hca.caps;
    let s = x
        .hca
        .srqs
        .get(&i.srqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoSrq))?;
    let (old, fetched) = (s.ring.clone(), s.fetched);
    if i.max_wr == 0 || i.max_wr > caps.max_srq_wr {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    let max_wr = wq_size(i.log2_entries, i.max_wr, caps.max_srq_wr)?;
    let stride_shift = old.entry_size().trailing_zeros();
    let ring = x.ring(
        &i.ring,
        stride_shift,
        u32::from(i.log2_entries),
        log2_floor(caps.max_srq_wr),
    )?;
    let s = x.hca.srqs.get(&i.srqn).expect("checked above");
    let unfetched =
        srq_unfetched(s, x.db).ok_or(fail(Status::BadParam, Syndrome::ProducerIndex))?;
    let (queued, limit) = x.hca.port.engine().query_srq(i.srqn)?;
    if u64::from(unfetched) + queued as u64 > u64::from(max_wr) || limit > max_wr as usize {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    let mut buf = vec![0u8; old.entry_size()];
    for n in 0..unfetched {
        let k = fetched.wrapping_add(n);
        old.read(&*x.mem, k, &mut buf)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
        ring.write(&mut *x.mem, k, &buf)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
    }
    // The new ring is charged beside the old until the old goes.
    let charge = charge_rings(x, &[Some(&ring)])?;
    x.engine().resize_srq(i.srqn, max_wr)?;
    x.hca.ring_charges.insert(SlotOwner::Srq(i.srqn), charge);
    let s = x.hca.srqs.get_mut(&i.srqn).expect("checked above");
    s.ring = ring;
    s.pbl = i.ring;
    Ok(ResizeSrqOut { max_wr })
}

/// WQEs posted to `s` that the data path has not fetched yet, [fetched, pi);
/// `None` for a producer index more than a ring ahead (garbage).
fn srq_unfetched(s: &crate::hca::Srq, db: &dyn Doorbells) -> Option<u32> {
    let (pi, _) = s.db.load(db);
    let unfetched = pi.wrapping_sub(s.fetched);
    (unfetched <= s.ring.len()).then_some(unfetched)
}

pub(super) fn query_srq(x: &mut Exec<'_>, i: QuerySrqIn) -> Result<QuerySrqOut, Fail> {
    let s = x
        .hca
        .srqs
        .get(&i.srqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoSrq))?;
    // The ring's entries are the WQEs the SRQ takes (wq_size; the engine's
    // max_wr is the same number, set from it).
    let (max_wr, max_sge) = (s.ring.len(), s.max_sge);
    // Posted WQEs: those in the engine and those the data path has not fetched
    // yet (a doorbell it has not seen); a garbage producer index counts nothing.
    let unfetched = srq_unfetched(s, x.db).unwrap_or(0);
    let (queued, limit) = x.hca.port.engine().query_srq(i.srqn)?;
    let count = queued as u64 + u64::from(unfetched);
    Ok(QuerySrqOut {
        max_wr,
        max_sge,
        srq_limit: u32::try_from(limit).unwrap_or(u32::MAX),
        wqe_count: u32::try_from(count).unwrap_or(u32::MAX),
    })
}

pub(super) fn destroy_srq(x: &mut Exec<'_>, i: DestroySrqIn) -> Result<(), Fail> {
    let s = x
        .hca
        .srqs
        .get(&i.srqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoSrq))?;
    // The engine counts the QPs using the SRQ (the one count there is).
    if x.hca.port.engine().srq_users(i.srqn).unwrap_or(0) > 0 {
        return Err(fail(Status::Busy, Syndrome::SrqBusy));
    }
    let db = s.db;
    x.engine().destroy_srq(i.srqn)?;
    x.hca.srqs.remove(&i.srqn);
    x.hca.slots.remove(&db);
    x.hca.ring_charges.remove(&SlotOwner::Srq(i.srqn));
    Ok(())
}
