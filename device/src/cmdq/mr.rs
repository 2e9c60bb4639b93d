//! Protection domains, memory regions and memory windows: ALLOC_PD,
//! DEALLOC_PD, REG_MR, REREG_MR, DEREG_MR, ALLOC_MW and DEALLOC_MW.

use transport::mr::{Rereg, Translation};
use transport::verbs as tv;

use crate::abi::cmd::{
    reg_mr_flags, rereg, AllocMwIn, AllocMwOut, AllocPdOut, DeallocMwIn, DeallocPdIn, DeregMrIn,
    MwType, RegMrIn, RegMrOut, ReregMrIn, Status,
};

use super::{check_access, fail, reserved, Exec, Fail, Syndrome};

// ---------------------------------------------------------------- PDs

pub(super) fn alloc_pd(x: &mut Exec<'_>) -> Result<AllocPdOut, Fail> {
    Ok(AllocPdOut {
        pdn: x.engine().mrs().alloc_pd()?,
    })
}

pub(super) fn dealloc_pd(x: &mut Exec<'_>, i: DeallocPdIn) -> Result<(), Fail> {
    // BUSY while an MR, QP or SRQ uses it: the engine counts them.
    Ok(x.engine().mrs().dealloc_pd(i.pdn)?)
}

pub(super) fn pd_exists(x: &mut Exec<'_>, pdn: u32) -> Result<(), Fail> {
    if x.engine().mrs().pd_exists(pdn) {
        Ok(())
    } else {
        Err(fail(Status::BadPd, Syndrome::NoPd))
    }
}

// ---------------------------------------------------------------- MRs

pub(super) fn reg_mr(x: &mut Exec<'_>, i: RegMrIn) -> Result<RegMrOut, Fail> {
    reserved(i.rsvd == 0)?;
    if i.flags & reg_mr_flags::ODP != 0 {
        // Issue 29 (`odp`).
        return super::odp::reg_odp_mr(x, &i);
    }
    if i.flags & !(reg_mr_flags::DMA | reg_mr_flags::FAST) != 0
        || i.flags == reg_mr_flags::DMA | reg_mr_flags::FAST
    {
        return Err(fail(Status::BadParam, Syndrome::Flags));
    }
    if i.flags & reg_mr_flags::FAST != 0 {
        return alloc_fast_mr(x, &i);
    }
    let access = check_access(i.access)?;
    pd_exists(x, i.pdn)?;
    let key = if i.flags & reg_mr_flags::DMA != 0 {
        // The identity MR: iova, length and the page list are ignored; the
        // guest memory map refuses what is not the guest's.
        x.engine().mrs().reg_dma_mr(i.pdn, access)?
    } else {
        // The page list's host copy is charged to the budget: refused before
        // it is read (ARCHITECTURE.md §9).
        budget_fits(x, transport::mr::mr_bytes(u64::from(i.pbl.npages)))?;
        let pages = x.mr_pages(&i.pbl)?;
        let page_size = 1u64 << i.pbl.page_shift;
        x.engine()
            .mrs()
            .reg_mr(i.pdn, i.iova, i.length, access, page_size, pages)?
    };
    Ok(RegMrOut {
        lkey: key,
        rkey: key,
    })
}

/// REG_MR with FAST (MP-08): a free fast-registration MR with room for
/// `pbl.npages` pages, charged to the budget at that size by the engine.
fn alloc_fast_mr(x: &mut Exec<'_>, i: &RegMrIn) -> Result<RegMrOut, Fail> {
    let p = &i.pbl;
    let unused = i.access == 0
        && i.iova == 0
        && i.length == 0
        && p.addr == 0
        && p.page_shift == 0
        && p.levels == 0
        && p.rsvd == 0;
    if !unused || p.npages == 0 || p.npages > x.hca.caps.max_fast_reg_pages {
        return Err(fail(Status::BadParam, Syndrome::AttrValue));
    }
    pd_exists(x, i.pdn)?;
    let key = x.engine().mrs().alloc_fast_mr(i.pdn, p.npages)?;
    Ok(RegMrOut {
        lkey: key,
        rkey: key,
    })
}

/// Reserves the host bytes of `rings`' page lists in the memory budget
/// (ARCHITECTURE.md §9): NO_RESOURCES when they do not fit. The caller keeps
/// the charge in `Hca::ring_charges` under the object's name.
pub(super) fn charge_rings(
    x: &mut Exec<'_>,
    rings: &[Option<&crate::ring::Ring>],
) -> Result<transport::budget::Charge, Fail> {
    let bytes = rings.iter().flatten().map(|r| r.host_bytes()).sum();
    x.engine()
        .budget()
        .reserve(bytes)
        .ok_or(fail(Status::NoResources, Syndrome::Budget))
}

/// NO_RESOURCES when `bytes` more would not fit in the device's memory
/// budget; the budget counts the refusal.
fn budget_fits(x: &mut Exec<'_>, bytes: u64) -> Result<(), Fail> {
    if x.engine().budget().admit(bytes) {
        Ok(())
    } else {
        Err(fail(Status::NoResources, Syndrome::Budget))
    }
}

pub(super) fn rereg_mr(x: &mut Exec<'_>, i: ReregMrIn) -> Result<RegMrOut, Fail> {
    let all = rereg::CHANGE_TRANSLATION | rereg::CHANGE_PD | rereg::CHANGE_ACCESS;
    if i.change == 0 || i.change & !all != 0 {
        return Err(fail(Status::BadParam, Syndrome::Flags));
    }
    if x.engine().mrs().mr(i.lkey).is_none() {
        return Err(fail(Status::NotFound, Syndrome::NoMr));
    }
    let mut change = Rereg::default();
    if i.change & rereg::CHANGE_PD != 0 {
        pd_exists(x, i.pdn)?;
        change.pd = Some(i.pdn);
    }
    if i.change & rereg::CHANGE_ACCESS != 0 {
        change.access = Some(check_access(i.access)?);
    }
    if i.change & rereg::CHANGE_TRANSLATION != 0 {
        budget_fits(x, transport::mr::mr_bytes(u64::from(i.pbl.npages)))?;
        change.translation = Some(Translation {
            iova: i.iova,
            length: i.length,
            page_size: 1u64 << i.pbl.page_shift.min(63),
            pages: x.mr_pages(&i.pbl)?,
        });
    }
    // Checked as a whole by the engine, which keeps the keys (MP-02).
    let key = x.engine().mrs().rereg_mr(i.lkey, change)?;
    Ok(RegMrOut {
        lkey: key,
        rkey: key,
    })
}

pub(super) fn dereg_mr(x: &mut Exec<'_>, i: DeregMrIn) -> Result<(), Fail> {
    // BUSY while memory windows are bound to it (MP-06, MP-07).
    Ok(x.engine().mrs().dereg_mr(i.lkey)?)
}

// ---------------------------------------------------------------- MWs

/// ALLOC_MW (MP-06 type 1, MP-07 types 2B and 2A): an unbound window in the PD; the
/// PD is BUSY while it exists.
pub(super) fn alloc_mw(x: &mut Exec<'_>, i: AllocMwIn) -> Result<AllocMwOut, Fail> {
    let ty = match MwType::from_raw(i.mw_type) {
        Some(MwType::Type1) => tv::MwType::Type1,
        Some(MwType::Type2) => tv::MwType::Type2,
        Some(MwType::Type2A) => tv::MwType::Type2A,
        None => return Err(fail(Status::BadParam, Syndrome::AttrValue)),
    };
    pd_exists(x, i.pdn)?;
    Ok(AllocMwOut {
        rkey: x.engine().alloc_mw(i.pdn, ty)?,
    })
}

/// DEALLOC_MW: by the window's current R_Key; a bound window is unbound.
pub(super) fn dealloc_mw(x: &mut Exec<'_>, i: DeallocMwIn) -> Result<(), Fail> {
    Ok(x.engine().dealloc_mw(i.rkey)?)
}
