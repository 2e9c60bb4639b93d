//! Event queues and completion queues: CREATE_EQ, DESTROY_EQ, CREATE_CQ,
//! DESTROY_CQ and RESIZE_CQ.

use crate::abi::cmd::{
    CreateCqIn, CreateCqOut, CreateEqIn, CreateEqOut, DestroyCqIn, DestroyEqIn, ResizeCqIn,
    ResizeCqOut, Status,
};
use crate::abi::cqe::entry_const;
use crate::abi::ident::bar;
use crate::abi::verbs::num;
use crate::hca::{Cq, Eq, SlotOwner};

use super::mr::charge_rings;
use super::{fail, log2_floor, reserved, Exec, Fail, Syndrome};

// ---------------------------------------------------------------- EQs

const EQE_SHIFT: u32 = entry_const::EQE_SIZE.trailing_zeros();
const CQE_SHIFT: u32 = entry_const::CQE_SIZE.trailing_zeros();

pub(super) fn create_eq(x: &mut Exec<'_>, i: CreateEqIn) -> Result<CreateEqOut, Fail> {
    reserved(i.rsvd == [0; 7])?;
    let caps = x.hca.caps;
    let vector = u32::from(i.vector);
    if !(bar::MSIX_VECTOR_FIRST_COMP..caps.msix_vectors).contains(&vector) {
        return Err(fail(Status::BadParam, Syndrome::Vector));
    }
    let log2 = u32::from(i.log2_entries);
    if log2 == 0 || log2 > caps.max_eq_log2 {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    let eqn = (1..caps.max_eq)
        .find(|n| !x.hca.eqs.contains_key(n))
        .ok_or(fail(Status::NoResources, Syndrome::Caps))?;
    let db = x.free_slot(i.uar, i.db_slot, true)?;
    let ring = x.ring(&i.ring, EQE_SHIFT, log2, caps.max_eq_log2)?;
    let charge = charge_rings(x, &[Some(&ring)])?;
    let (_, arm) = db.load(x.db);
    x.hca.eqs.insert(
        eqn,
        Eq {
            ring,
            vector: i.vector,
            db,
            pi: 0,
            // The arm word as it is now: a change after this allows the first
            // interrupt (abi::uar DOORBELL_PROTOCOL).
            last_arm: arm,
            users: 0,
            overflows: 0,
            pbl: i.ring,
        },
    );
    x.hca.slots.insert(db, SlotOwner::Eq(eqn));
    x.hca.ring_charges.insert(SlotOwner::Eq(eqn), charge);
    Ok(CreateEqOut { eqn })
}

pub(super) fn destroy_eq(x: &mut Exec<'_>, i: DestroyEqIn) -> Result<(), Fail> {
    if i.eqn == num::ASYNC_EQN {
        return Err(fail(Status::Permission, Syndrome::Eq0));
    }
    let eq = x
        .hca
        .eqs
        .get(&i.eqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoEq))?;
    if eq.users > 0 {
        return Err(fail(Status::Busy, Syndrome::EqBusy));
    }
    let db = eq.db;
    x.hca.eqs.remove(&i.eqn);
    x.hca.slots.remove(&db);
    x.hca.ring_charges.remove(&SlotOwner::Eq(i.eqn));
    Ok(())
}

// ---------------------------------------------------------------- CQs

pub(super) fn create_cq(x: &mut Exec<'_>, i: CreateCqIn) -> Result<CreateCqOut, Fail> {
    reserved(i.rsvd == [0; 5])?;
    let max_log2 = log2_floor(x.hca.caps.max_cqe);
    let log2 = u32::from(i.log2_entries);
    if log2 > max_log2 {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    if !x.hca.eqs.contains_key(&i.eqn) {
        return Err(fail(Status::NotFound, Syndrome::NoEq));
    }
    let db = x.free_slot(i.uar, i.db_slot, false)?;
    let ring = x.ring(&i.ring, CQE_SHIFT, log2, max_log2)?;
    let charge = charge_rings(x, &[Some(&ring)])?;
    let entries = ring.len();
    let cqn = x.engine().create_cq()?;
    let (_, arm) = db.load(x.db);
    x.hca.cqs.insert(
        cqn,
        Cq {
            ring,
            eqn: i.eqn,
            db,
            pi: 0,
            last_arm: arm,
            overflowed: false,
            events: 0,
            armed: None,
            pbl: i.ring,
        },
    );
    x.hca.slots.insert(db, SlotOwner::Cq(cqn));
    x.hca.ring_charges.insert(SlotOwner::Cq(cqn), charge);
    if let Some(eq) = x.hca.eqs.get_mut(&i.eqn) {
        eq.users += 1;
    }
    Ok(CreateCqOut { cqn, entries })
}

pub(super) fn destroy_cq(x: &mut Exec<'_>, i: DestroyCqIn) -> Result<(), Fail> {
    let cq = x
        .hca
        .cqs
        .get(&i.cqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoCq))?;
    // The engine counts the QPs using the CQ (the one count there is).
    if x.hca.port.engine().cq_users(i.cqn).unwrap_or(0) > 0 {
        return Err(fail(Status::Busy, Syndrome::CqBusy));
    }
    let (db, eqn) = (cq.db, cq.eqn);
    x.engine().destroy_cq(i.cqn)?;
    x.hca.cqs.remove(&i.cqn);
    x.hca.slots.remove(&db);
    x.hca.ring_charges.remove(&SlotOwner::Cq(i.cqn));
    if let Some(eq) = x.hca.eqs.get_mut(&eqn) {
        eq.users = eq.users.saturating_sub(1);
    }
    Ok(())
}

/// RESIZE_CQ (CQ-04; abi::cmd RESIZE_PROTOCOL): the device copies the CQEs
/// not consumed, [ci, pi), into the new ring at the same free-running indices
/// with the new ring's owner bits, and stamps every other slot "not yet
/// written" for the index that lands there next. All checks and all writes
/// into the new ring come before any state changes.
pub(super) fn resize_cq(x: &mut Exec<'_>, i: ResizeCqIn) -> Result<ResizeCqOut, Fail> {
    reserved(i.rsvd == [0; 3])?;
    let max_log2 = log2_floor(x.hca.caps.max_cqe);
    let log2 = u32::from(i.log2_entries);
    if log2 > max_log2 {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    let cq = x
        .hca
        .cqs
        .get(&i.cqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoCq))?;
    if cq.overflowed {
        return Err(fail(Status::BadState, Syndrome::CqOverflowed));
    }
    let (old, pi) = (cq.ring.clone(), cq.pi);
    let (ci, _) = cq.db.load(x.db);
    let ring = x.ring(&i.ring, CQE_SHIFT, log2, max_log2)?;
    // The new ring is charged beside the old until the old goes.
    let charge = charge_rings(x, &[Some(&ring)])?;
    let pending = pi.wrapping_sub(ci);
    if pending > old.len() {
        // A consumer index the device never wrote up to: garbage.
        return Err(fail(Status::BadParam, Syndrome::ConsumerIndex));
    }
    let staged = x.hca.port.engine().cq_len(i.cqn) as u64;
    if u64::from(pending) + staged > u64::from(ring.len()) {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    // The rest blank, owned by the driver until the device writes them: a
    // heavy piece, before the copies (a blank done a step before covers every
    // slot).
    x.blank_cq(&ring, ci, pi)?;
    const CQE: usize = entry_const::CQE_SIZE as usize;
    let owner_at = CQE - 1;
    let owner_mask = entry_const::OWNER_BIT as u8;
    let mut e = [0u8; CQE];
    // Slot by slot, the index in [ci, ci + N) that lives there: a copy below
    // pi, else the next index the device writes there.
    for n in 0..pending {
        let k = ci.wrapping_add(n);
        let owner = crate::abi::cqe::owner_bit(k, log2);
        old.read(&*x.mem, k, &mut e)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
        e[owner_at] = (e[owner_at] & !owner_mask) | owner;
        ring.write(&mut *x.mem, k, &e)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
    }
    let entries = ring.len();
    let cq = x.hca.cqs.get_mut(&i.cqn).expect("checked above");
    cq.ring = ring;
    cq.pbl = i.ring;
    x.hca.ring_charges.insert(SlotOwner::Cq(i.cqn), charge);
    Ok(ResizeCqOut { entries })
}
