//! On-demand paging (issue 29): REG_MR with the ODP flag, MAP_ODP, UNMAP_ODP
//! and ODP_FAULT_FAIL. The engine keeps the sparse translation and restarts or
//! fails the QPs waiting on pages (`transport::engine::odp`); the data path
//! turns its page fault events into `EqePageFault` entries on EQ 0.

use transport::verbs::VerbError;

use crate::abi::cmd::{
    odp_const, reg_mr_flags, MapOdpIn, OdpFaultFailIn, RegMrIn, RegMrOut, Status, UnmapOdpIn,
};

use super::{check_access, fail, reserved, Exec, Fail, Syndrome};

/// NOT_SUPPORTED when the device serves no ODP (`vhca --no-odp`).
fn odp_on(x: &Exec<'_>) -> Result<(), Fail> {
    if x.hca.caps.odp {
        Ok(())
    } else {
        Err(fail(Status::NotSupported, Syndrome::Unsupported))
    }
}

/// REG_MR with `VHCA_REG_MR_F_ODP`: no pages (the page list all zero), every
/// page not present; iova 0 and length 2^64 - 1 is an implicit MR. BAD_PARAM
/// with FAST or DMA or another flag, or a page list.
pub(super) fn reg_odp_mr(x: &mut Exec<'_>, i: &RegMrIn) -> Result<RegMrOut, Fail> {
    odp_on(x)?;
    if i.flags != reg_mr_flags::ODP {
        return Err(fail(Status::BadParam, Syndrome::Flags));
    }
    let p = &i.pbl;
    if p.addr != 0 || p.npages != 0 || p.page_shift != 0 || p.levels != 0 || p.rsvd != 0 {
        return Err(fail(Status::BadParam, Syndrome::PageList));
    }
    let access = check_access(i.access)?;
    super::mr::pd_exists(x, i.pdn)?;
    let key = x
        .engine()
        .mrs()
        .reg_odp_mr(i.pdn, i.iova, i.length, access)?;
    Ok(RegMrOut {
        lkey: key,
        rkey: key,
    })
}

/// The checks every ODP command makes first: ODP on, reserved bits zero,
/// `lkey` an ODP MR's (else BAD_PARAM).
fn odp_key(x: &mut Exec<'_>, rsvd: u32, lkey: u32) -> Result<(), Fail> {
    odp_on(x)?;
    reserved(rsvd == 0)?;
    match x.engine().mrs().mr(lkey) {
        Some(m) if m.is_odp() => Ok(()),
        _ => Err(fail(Status::BadParam, Syndrome::NoMr)),
    }
}

/// The engine's refusal of a range or page list: BAD_PARAM (the key was
/// checked), NO_RESOURCES past the engine's bounds.
fn range_fail(e: VerbError) -> Fail {
    match e {
        VerbError::InsufficientResources => fail(Status::NoResources, Syndrome::Budget),
        _ => fail(Status::BadParam, Syndrome::AttrValue),
    }
}

/// MAP_ODP: the page list (read and checked as REG_MR's) installed from `va`
/// on; the waiting QPs restart.
pub(super) fn map_odp(x: &mut Exec<'_>, i: MapOdpIn) -> Result<(), Fail> {
    odp_key(x, i.rsvd, i.lkey)?;
    let p = &i.pbl;
    if u32::from(p.page_shift) != odp_const::PAGE_SHIFT
        || p.npages == 0
        || p.npages > odp_const::MAX_MAP_PAGES
    {
        return Err(fail(Status::BadParam, Syndrome::PageList));
    }
    let pages = x.mr_pages(p)?;
    x.engine().odp_map(i.lkey, i.va, &pages).map_err(range_fail)
}

/// UNMAP_ODP: when it completes, no device access uses the pages.
pub(super) fn unmap_odp(x: &mut Exec<'_>, i: UnmapOdpIn) -> Result<(), Fail> {
    odp_key(x, i.rsvd, i.lkey)?;
    x.engine()
        .odp_unmap(i.lkey, i.va, i.length)
        .map_err(range_fail)
}

/// ODP_FAULT_FAIL: the work waiting on the pages fails.
pub(super) fn odp_fault_fail(x: &mut Exec<'_>, i: OdpFaultFailIn) -> Result<(), Fail> {
    odp_key(x, i.rsvd, i.lkey)?;
    x.engine()
        .odp_fault_fail(i.lkey, i.va, i.length)
        .map_err(range_fail)
}
