//! Reliable Datagram (AD-11): ALLOC_RDD, DEALLOC_RDD, the EE context commands,
//! and the RD QP's side of CREATE_QP, MODIFY_QP and QUERY_QP. The engine keeps
//! the domains, EE contexts and RD QPs (`transport::engine::rd`); an RD QP's
//! rings and doorbell slot are the device's like any QP's (`Hca::qps`, type
//! `QpType::Rd`).

use transport::engine::Engine;
use transport::verbs as tv;

use crate::abi::cmd::{
    AllocRddOut, CreateEecIn, CreateEecOut, CreateQpIn, DeallocRddIn, DestroyEecIn, EecAttr,
    ModifyEecIn, QpAttr, QueryEecIn, QueryEecOut, Status,
};
use crate::abi::verbs::{num, qp_attr_mask};
use crate::convert::{av_to_abi, qp_attr_to_abi};

use super::qp::{av_from_abi, mtu_from_abi, state_from_abi};
use super::{fail, reserved, time, Exec, Fail, Syndrome};

pub(super) fn alloc_rdd(x: &mut Exec<'_>) -> Result<AllocRddOut, Fail> {
    Ok(AllocRddOut {
        rddn: x.engine().alloc_rdd()?,
    })
}

pub(super) fn dealloc_rdd(x: &mut Exec<'_>, i: DeallocRddIn) -> Result<(), Fail> {
    // BUSY while an EEC or RD QP is in it: the engine counts them.
    Ok(x.engine().dealloc_rdd(i.rddn)?)
}

pub(super) fn create_eec(x: &mut Exec<'_>, i: CreateEecIn) -> Result<CreateEecOut, Fail> {
    Ok(CreateEecOut {
        eecn: x.engine().create_eec(i.rddn)?,
    })
}

pub(super) fn modify_eec(x: &mut Exec<'_>, i: ModifyEecIn) -> Result<(), Fail> {
    let a = &i.attr;
    reserved(i.rsvd == 0 && a.rsvd == 0)?;
    let state = state_from_abi(a.state)?;
    // The path and MTU are read (and so checked) only where the transition
    // takes them (abi::cmd EecAttr).
    let rtr = state == tv::QpState::Rtr;
    let attr = tv::EecAttr {
        pkey_index: a.pkey_index,
        av: if rtr {
            av_from_abi(&a.av)?
        } else {
            tv::AddressVector::default()
        },
        path_mtu: if rtr {
            mtu_from_abi(a.path_mtu)?
        } else {
            tv::Mtu::default()
        },
        remote_eecn: a.remote_eecn,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        min_rnr_timer: a.min_rnr_timer,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
    };
    // The engine checks the path against the port (a RoCE path is global,
    // its SGID index in the GID table) and changes nothing on a refusal.
    let now = time(x.now);
    Ok(x.engine().modify_eec(i.eecn, state, &attr, now)?)
}

pub(super) fn query_eec(x: &mut Exec<'_>, i: QueryEecIn) -> Result<QueryEecOut, Fail> {
    let (state, a, rdd) = x.hca.port.engine().query_eec(i.eecn)?;
    Ok(QueryEecOut {
        rddn: rdd,
        rsvd: 0,
        attr: EecAttr {
            state: state as u8,
            path_mtu: a.path_mtu as u8,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            pkey_index: a.pkey_index,
            remote_eecn: a.remote_eecn,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            rsvd: 0,
            av: av_to_abi(&a.av),
        },
    })
}

pub(super) fn destroy_eec(x: &mut Exec<'_>, i: DestroyEecIn) -> Result<(), Fail> {
    Ok(x.engine().destroy_eec(i.eecn)?)
}

/// CREATE_QP of an RD QP: no SRQ (not implemented for RD), an RD domain in
/// `xrcdn`.
pub(super) fn check_create(x: &mut Exec<'_>, i: &CreateQpIn) -> Result<(), Fail> {
    if i.srqn != num::NONE {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    if i.xrcdn == 0 || x.engine().query_rdd(i.xrcdn).is_none() {
        return Err(fail(Status::NotFound, Syndrome::NoRdd));
    }
    Ok(())
}

/// The engine's half of an RD QP's CREATE_QP (the rings were checked by the
/// caller).
pub(super) fn create_qp(x: &mut Exec<'_>, init: &tv::QpInit, rddn: u32) -> Result<u32, Fail> {
    Ok(x.engine().create_rd_qp(tv::RdQpInit {
        pd: init.pd,
        rdd: rddn,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        cap: init.cap,
        sq_sig_all: init.sq_sig_all,
    })?)
}

/// MODIFY_QP of an RD QP: the state (required), the Q_Key and the access
/// flags; P_Key index and port are accepted and unused (an RD QP's
/// partition and port are its EE contexts', seed 002). Anything else is
/// BAD_PARAM: it belongs to MODIFY_EEC.
pub(super) fn modify_qp(
    x: &mut Exec<'_>,
    qpn: u32,
    attr: &tv::QpAttr,
    mask: tv::AttrMask,
) -> Result<(), Fail> {
    use qp_attr_mask as m;
    let allowed = m::STATE | m::CUR_STATE | m::QKEY | m::ACCESS_FLAGS | m::PKEY_INDEX | m::PORT;
    if mask.0 & !allowed != 0 || mask.0 & m::STATE == 0 {
        return Err(fail(Status::BadParam, Syndrome::AttrMask));
    }
    let state = attr
        .state
        .ok_or(fail(Status::BadParam, Syndrome::AttrMask))?;
    let a = tv::RdQpAttr {
        state,
        qkey: (mask.0 & m::QKEY != 0).then_some(attr.qkey),
        access: (mask.0 & m::ACCESS_FLAGS != 0).then_some(attr.access),
    };
    x.engine().modify_rd_qp(qpn, &a)?;
    if state == tv::QpState::Reset {
        // WQEs are new from the producer indices in the slot now (abi::cmd
        // ModifyQpIn).
        let db = x.db;
        if let Some(qp) = x.hca.qps.get_mut(&qpn) {
            qp.sync_indices(db);
        }
    }
    Ok(())
}

/// QUERY_QP's attributes of an RD QP: its state and Q_Key.
pub(super) fn query_qp(e: &Engine, qpn: u32, cap: &tv::QpCap) -> Result<QpAttr, Fail> {
    let (state, qkey, _) = e.query_rd_qp(qpn)?;
    let a = tv::QpAttr {
        qkey,
        ..tv::QpAttr::default()
    };
    Ok(qp_attr_to_abi(state, &a, cap))
}
