//! XRC (SR-02): ALLOC_XRCD, DEALLOC_XRCD, and the XRC TGT QPs, which have no
//! rings, doorbell slot, PD or CQ (abi::verbs QpType::XrcTgt): CREATE_QP,
//! MODIFY_QP, QUERY_QP and DESTROY_QP of one. The engine keeps the domains and
//! what is in them (`transport::engine::xrc`); the device keeps which QPNs are
//! TGT QPs, in `Hca::xrc_tgts`.

use crate::abi::cmd::{
    AllocXrcdOut, CreateQpIn, CreateQpOut, DeallocXrcdIn, Pbl, QpCap, QueryQpOut, Status,
};
use crate::abi::verbs::{num, QpType};
use crate::convert::qp_attr_to_abi;

use super::{check_port, fail, reserved, Exec, Fail, Syndrome};

pub(super) fn alloc_xrcd(x: &mut Exec<'_>) -> Result<AllocXrcdOut, Fail> {
    Ok(AllocXrcdOut {
        xrcdn: x.engine().create_xrcd()?,
    })
}

pub(super) fn dealloc_xrcd(x: &mut Exec<'_>, i: DeallocXrcdIn) -> Result<(), Fail> {
    // BUSY while an XRC SRQ or TGT QP is in it: the engine counts them.
    Ok(x.engine().destroy_xrcd(i.xrcdn)?)
}

/// The XRC domain of an XRC SRQ's CREATE_SRQ and its CQ, checked.
pub(super) fn xrc_srq_parts(x: &mut Exec<'_>, xrcdn: u32, cqn: u32) -> Result<(), Fail> {
    if !x.engine().xrcd_exists(xrcdn) {
        return Err(fail(Status::NotFound, Syndrome::NoXrcd));
    }
    if !x.hca.cqs.contains_key(&cqn) {
        return Err(fail(Status::BadCq, Syndrome::NoCq));
    }
    Ok(())
}

/// CREATE_QP of an XRC_TGT QP: only `xrcdn` and `port` mean anything; every
/// other field is zero (no rings, slot, sizes, PD, CQs or SRQ).
pub(super) fn create_tgt_qp(x: &mut Exec<'_>, i: &CreateQpIn) -> Result<CreateQpOut, Fail> {
    check_port(i.port)?;
    let none = |n: u32| n == 0 || n == num::NONE;
    reserved(
        i.sq_sig_all == 0
            && i.log2_sq_size == 0
            && i.log2_rq_size == 0
            && none(i.pdn)
            && none(i.send_cqn)
            && none(i.recv_cqn)
            && none(i.srqn)
            && i.cap == QpCap::default()
            && i.uar == 0
            && i.db_slot == 0
            && i.sq == Pbl::default()
            && i.rq == Pbl::default(),
    )?;
    if !x.engine().xrcd_exists(i.xrcdn) {
        return Err(fail(Status::NotFound, Syndrome::NoXrcd));
    }
    let qpn = x.engine().create_xrc_tgt_qp(i.xrcdn)?;
    x.hca.xrc_tgts.insert(qpn, i.xrcdn);
    Ok(CreateQpOut {
        qpn,
        cap: QpCap::default(),
    })
}

/// QUERY_QP of a TGT QP: no PD, CQs or SRQ (`VHCA_NONE`), no sizes.
pub(super) fn query_tgt_qp(x: &mut Exec<'_>, qpn: u32) -> Result<QueryQpOut, Fail> {
    let (state, attr, _) = x.hca.port.engine().query_qp(qpn)?;
    Ok(QueryQpOut {
        attr: qp_attr_to_abi(state, &attr, &transport::verbs::QpCap::default()),
        qp_type: QpType::XrcTgt.raw(),
        sq_sig_all: 0,
        rsvd0: 0,
        pdn: num::NONE,
        send_cqn: num::NONE,
        recv_cqn: num::NONE,
        srqn: num::NONE,
        rsvd1: 0,
        alt: crate::convert::alt_path_to_abi(&attr),
    })
}

/// DESTROY_QP of a TGT QP.
pub(super) fn destroy_tgt_qp(x: &mut Exec<'_>, qpn: u32) -> Result<(), Fail> {
    x.engine().destroy_qp(qpn)?;
    x.hca.xrc_tgts.remove(&qpn);
    Ok(())
}
