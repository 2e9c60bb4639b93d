//! Queue pairs: CREATE_QP, MODIFY_QP, QUERY_QP and DESTROY_QP, and the
//! conversions between the engine's QP attributes and the ABI's.

use transport::verbs as tv;

use crate::abi::cmd::{
    AltPath, Av, CreateQpIn, CreateQpOut, DestroyQpIn, ModifyQpIn, Pbl, QpAttr, QueryQpIn,
    QueryQpOut, Status,
};
use crate::abi::verbs::{num, qp_attr_mask, Mtu, QpState, QpType};
use crate::abi::wqe::{wqe_const, RaddrSeg, RdSeg, SendCtrl, Sge, UdSeg, XrcSeg};
use crate::convert::{cap_to_abi, qp_attr_to_abi};
use crate::hca::{Qp, SlotOwner};

use super::mr::charge_rings;
use super::mr::pd_exists;
use super::srq::{recv_stride, wq_size};
use super::{
    check_access_in, check_port, fail, log2_floor, reserved, time, Exec, Fail, Syndrome,
    QP_ACCESS_BITS,
};

/// Bytes of a send WQE before its SGEs or inline data: control and UD
/// segments for datagrams; control and remote address for connected QPs (an
/// atomic's extra segment takes the room of a second SGE, and the smallest
/// stride holds it).
fn send_headers(t: QpType) -> u32 {
    match t {
        QpType::Ud | QpType::Gsi | QpType::Smi => (SendCtrl::SIZE + UdSeg::SIZE) as u32,
        QpType::Rc | QpType::Uc => (SendCtrl::SIZE + RaddrSeg::SIZE) as u32,
        // SR-02: the XRC segment after the control segment.
        QpType::XrcIni | QpType::XrcTgt => (SendCtrl::SIZE + XrcSeg::SIZE + RaddrSeg::SIZE) as u32,
        // AD-11: the RD segment after the control segment.
        QpType::Rd => (SendCtrl::SIZE + RdSeg::SIZE + RaddrSeg::SIZE) as u32,
    }
}

pub(super) fn create_qp(x: &mut Exec<'_>, i: CreateQpIn) -> Result<CreateQpOut, Fail> {
    reserved(i.rsvd0 == 0 && i.rsvd1 == [0; 2])?;
    let caps = x.hca.caps;
    let qp_type = QpType::from_raw(i.qp_type).ok_or(fail(Status::BadParam, Syndrome::QpType))?;
    if !matches!(qp_type, QpType::XrcTgt | QpType::Rd) {
        reserved(i.xrcdn == 0)?;
    }
    let service = match qp_type {
        // SR-02: a TGT QP has nothing of what follows.
        QpType::XrcTgt => return super::xrc::create_tgt_qp(x, &i),
        QpType::XrcIni => tv::QpType::XrcIni,
        // AD-11: queues as a UD QP's; the engine creates it as RD
        // (`rd::create_qp`), which its RD domain makes it.
        QpType::Rd => {
            super::rd::check_create(x, &i)?;
            tv::QpType::Ud
        }
        QpType::Rc => tv::QpType::Rc,
        QpType::Uc => tv::QpType::Uc,
        // QP 0 (AD-09): the engine numbers it 0 (`Engine::create_smi_qp`).
        QpType::Ud | QpType::Gsi | QpType::Smi => tv::QpType::Ud,
    };
    check_port(i.port)?;
    pd_exists(x, i.pdn)?;
    for cqn in [i.send_cqn, i.recv_cqn] {
        if !x.hca.cqs.contains_key(&cqn) {
            return Err(fail(Status::BadCq, Syndrome::NoCq));
        }
    }
    let srqn = (i.srqn != num::NONE).then_some(i.srqn);
    if qp_type == QpType::XrcIni
        && (srqn.is_some()
            || i.cap.max_recv_wr != 0
            || i.cap.max_recv_sge != 0
            || i.log2_rq_size != 0
            || i.rq != Pbl::default())
    {
        // SR-02: an INI QP has no receive side.
        return Err(fail(Status::BadParam, Syndrome::QpType));
    }
    if let Some(s) = srqn {
        match x.hca.srqs.get(&s) {
            Some(srq) if srq.pdn == i.pdn => {}
            _ => return Err(fail(Status::BadSrq, Syndrome::NoSrq)),
        }
    }

    // Sizes: the device's limits first, then the rings and strides asked for.
    let c = i.cap;
    if c.max_send_wr > caps.max_qp_wr
        || c.max_send_sge > caps.max_sge
        || c.max_inline_data > caps.max_inline
        || (srqn.is_none() && (c.max_recv_wr > caps.max_qp_wr || c.max_recv_sge > caps.max_sge))
    {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    let sq_shift = u32::from(i.sq_wqe_shift);
    if !(wqe_const::SQ_MIN_WQE_SHIFT..=wqe_const::MAX_WQE_SHIFT).contains(&sq_shift) {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    let send_room = (1u32 << sq_shift) - send_headers(qp_type);
    if c.max_send_sge > send_room / Sge::SIZE as u32 || c.max_inline_data > send_room {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    let max_send_wr = wq_size(i.log2_sq_size, c.max_send_wr, caps.max_qp_wr)?;
    let no_rq = srqn.is_some() || qp_type == QpType::XrcIni;
    let (max_recv_wr, max_recv_sge) = match srqn {
        _ if qp_type == QpType::XrcIni => (0, 0),
        Some(_) => {
            // The SRQ receives; no RQ ring.
            if i.log2_rq_size != 0 || i.rq != Pbl::default() {
                return Err(fail(Status::BadParam, Syndrome::RingSize));
            }
            (0, 0)
        }
        None => (
            wq_size(i.log2_rq_size, c.max_recv_wr, caps.max_qp_wr)?,
            recv_stride(i.rq_wqe_shift, c.max_recv_sge)?.min(caps.max_sge),
        ),
    };
    let granted = tv::QpCap {
        max_send_wr,
        max_recv_wr,
        max_send_sge: (send_room / Sge::SIZE as u32).min(caps.max_sge),
        max_recv_sge,
        max_inline_data: send_room.min(caps.max_inline),
    };

    let db = x.free_slot(i.uar, i.db_slot, false)?;
    let max_log2 = log2_floor(caps.max_qp_wr);
    let sq = x.ring(&i.sq, sq_shift, u32::from(i.log2_sq_size), max_log2)?;
    let rq = match no_rq {
        true => None,
        false => Some(x.ring(
            &i.rq,
            u32::from(i.rq_wqe_shift),
            u32::from(i.log2_rq_size),
            max_log2,
        )?),
    };

    let charge = charge_rings(x, &[Some(&sq), rq.as_ref()])?;
    let init = tv::QpInit {
        qp_type: service,
        pd: i.pdn,
        send_cq: i.send_cqn,
        recv_cq: i.recv_cqn,
        srq: srqn,
        cap: granted,
        sq_sig_all: i.sq_sig_all != 0,
    };
    let qpn = match qp_type {
        QpType::Gsi => x.engine().create_gsi_qp(init)?,
        QpType::Smi => x.engine().create_smi_qp(init)?,
        QpType::Rd => super::rd::create_qp(x, &init, i.xrcdn)?,
        _ => x.engine().create_qp(init)?,
    };
    let mut qp = Qp {
        qp_type,
        pdn: i.pdn,
        send_cqn: i.send_cqn,
        recv_cqn: i.recv_cqn,
        srqn,
        sq,
        rq,
        db,
        sq_fetched: 0,
        rq_fetched: 0,
        sq_stalled: None,
        rq_stalled: None,
        cap: granted,
        sq_sig_all: i.sq_sig_all != 0,
        sq_pbl: i.sq,
        rq_pbl: if no_rq { Pbl::default() } else { i.rq },
    };
    qp.sync_indices(x.db);
    x.hca.qps.insert(qpn, qp);
    x.hca.slots.insert(db, SlotOwner::Qp(qpn));
    x.hca.ring_charges.insert(SlotOwner::Qp(qpn), charge);
    Ok(CreateQpOut {
        qpn,
        cap: cap_to_abi(&granted),
    })
}

pub(super) fn state_from_abi(raw: u8) -> Result<tv::QpState, Fail> {
    let s = QpState::from_raw(raw).ok_or(fail(Status::BadParam, Syndrome::AttrValue))?;
    Ok(match s {
        QpState::Reset => tv::QpState::Reset,
        QpState::Init => tv::QpState::Init,
        QpState::Rtr => tv::QpState::Rtr,
        QpState::Rts => tv::QpState::Rts,
        QpState::Sqd => tv::QpState::Sqd,
        QpState::Sqe => tv::QpState::Sqe,
        QpState::Error => tv::QpState::Error,
    })
}

pub(super) fn mtu_from_abi(raw: u8) -> Result<tv::Mtu, Fail> {
    let m = Mtu::from_raw(raw).ok_or(fail(Status::BadParam, Syndrome::AttrValue))?;
    Ok(match m {
        Mtu::M256 => tv::Mtu::M256,
        Mtu::M512 => tv::Mtu::M512,
        Mtu::M1024 => tv::Mtu::M1024,
        Mtu::M2048 => tv::Mtu::M2048,
        Mtu::M4096 => tv::Mtu::M4096,
    })
}

/// An address vector from MODIFY_QP, every field in range (the data path's
/// conversion masks instead, for WQEs it cannot refuse).
pub(super) fn av_from_abi(av: &Av) -> Result<tv::AddressVector, Fail> {
    // pkey_index is a GSI send WQE's only (AD-05): reserved in a QP's path.
    reserved(av.pkey_index == 0 && av.rsvd2 == [0; 2])?;
    // 0: the QP's port; there is one.
    if u32::from(av.port_num) > num::PORT {
        return Err(fail(Status::BadParam, Syndrome::Port));
    }
    // The SGID index is the engine's to check against the port's GID table
    // (one entry on InfiniBand, the RoCE table on Ethernet).
    let global_bad = av.is_global > 1 || (av.is_global == 1 && av.flow_label > 0xf_ffff);
    if av.sl > 15 || av.src_path_bits > 0x7f || global_bad {
        return Err(fail(Status::BadParam, Syndrome::AttrValue));
    }
    Ok(crate::convert::av_from_abi(av))
}

/// The engine's attributes and mask of a MODIFY_QP: only the attributes the
/// mask names are read (ibverbs), each checked here or by the engine's table.
fn qp_attr_from_abi(
    a: &QpAttr,
    alt: &AltPath,
    mask: u32,
) -> Result<(tv::QpAttr, tv::AttrMask), Fail> {
    use qp_attr_mask as m;
    let known = (m::DEST_QPN << 1) - 1;
    if mask & !known != 0 {
        return Err(fail(Status::BadParam, Syndrome::AttrMask));
    }
    // Resizing: not implemented.
    if mask & m::CAP != 0 {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    reserved(a.rsvd == 0)?;
    let has = |bit: u32| mask & bit != 0;
    let mut t = tv::QpAttr::default();
    if has(m::STATE) {
        t.state = Some(state_from_abi(a.qp_state)?);
    }
    if has(m::CUR_STATE) {
        t.cur_state = Some(state_from_abi(a.cur_qp_state)?);
    }
    if has(m::EN_SQD_ASYNC_NOTIFY) {
        t.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    }
    if has(m::ACCESS_FLAGS) {
        t.access = check_access_in(a.qp_access_flags, QP_ACCESS_BITS)?;
    }
    if has(m::PKEY_INDEX) {
        t.pkey_index = a.pkey_index;
    }
    if has(m::PORT) {
        t.port_num = a.port_num;
    }
    if has(m::QKEY) {
        t.qkey = a.qkey;
    }
    if has(m::AV) {
        t.av = av_from_abi(&a.ah_attr)?;
    }
    if has(m::PATH_MTU) {
        t.path_mtu = mtu_from_abi(a.path_mtu)?;
    }
    if has(m::TIMEOUT) {
        t.timeout = a.timeout;
    }
    if has(m::RETRY_CNT) {
        t.retry_cnt = a.retry_cnt;
    }
    if has(m::RNR_RETRY) {
        t.rnr_retry = a.rnr_retry;
    }
    if has(m::RQ_PSN) {
        t.rq_psn = a.rq_psn;
    }
    if has(m::MAX_QP_RD_ATOMIC) {
        t.max_rd_atomic = a.max_rd_atomic;
    }
    if has(m::MIN_RNR_TIMER) {
        t.min_rnr_timer = a.min_rnr_timer;
    }
    if has(m::SQ_PSN) {
        t.sq_psn = a.sq_psn;
    }
    if has(m::MAX_DEST_RD_ATOMIC) {
        t.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(m::DEST_QPN) {
        t.dest_qp_num = a.dest_qp_num;
    }
    // AD-10: the engine checks the alternate path's values and whether
    // arming has one (`engine::apm`).
    if has(m::ALT_PATH) {
        reserved(alt.rsvd == 0)?;
        t.alt_av = av_from_abi(&alt.ah_attr)?;
        t.alt_pkey_index = alt.pkey_index;
        t.alt_port_num = alt.port_num;
        t.alt_timeout = alt.timeout;
    }
    if has(m::PATH_MIG_STATE) {
        t.path_mig_state = match a.path_mig_state {
            0 => tv::MigState::Migrated,
            1 => tv::MigState::Rearm,
            2 => tv::MigState::Armed,
            _ => return Err(fail(Status::BadParam, Syndrome::AttrValue)),
        };
    }
    Ok((t, tv::AttrMask(mask)))
}

pub(super) fn modify_qp(x: &mut Exec<'_>, i: ModifyQpIn) -> Result<(), Fail> {
    if !x.hca.qps.contains_key(&i.qpn) && !x.hca.xrc_tgts.contains_key(&i.qpn) {
        return Err(fail(Status::NotFound, Syndrome::NoQp));
    }
    let (attr, mask) = qp_attr_from_abi(&i.attr, &i.alt, i.attr_mask)?;
    if x.hca
        .qps
        .get(&i.qpn)
        .is_some_and(|q| q.qp_type == QpType::Rd)
    {
        return super::rd::modify_qp(x, i.qpn, &attr, mask);
    }
    let now = time(x.now);
    // The engine's transition table checks the transition, the mask and the
    // values, and changes nothing on a refusal (QS-02).
    x.engine().modify_qp(i.qpn, &attr, mask, now)?;
    if attr.state == Some(tv::QpState::Reset) {
        // WQEs are new from the producer indices in the slot now (abi::cmd
        // ModifyQpIn).
        let db = x.db;
        if let Some(qp) = x.hca.qps.get_mut(&i.qpn) {
            qp.sync_indices(db);
        }
    }
    Ok(())
}

pub(super) fn query_qp(x: &mut Exec<'_>, i: QueryQpIn) -> Result<QueryQpOut, Fail> {
    if x.hca.xrc_tgts.contains_key(&i.qpn) {
        return super::xrc::query_tgt_qp(x, i.qpn);
    }
    let qp = x
        .hca
        .qps
        .get(&i.qpn)
        .ok_or(fail(Status::NotFound, Syndrome::NoQp))?;
    let engine = x.hca.port.engine();
    let (out, attr) = if qp.qp_type == QpType::Rd {
        // AD-11: an RD QP has a state and a Q_Key; its path is its EECs'.
        (
            super::rd::query_qp(engine, i.qpn, &qp.cap)?,
            tv::QpAttr::default(),
        )
    } else {
        let (state, attr, _) = engine.query_qp(i.qpn)?;
        let mut out = qp_attr_to_abi(state, &attr, &qp.cap);
        // QS-05: SQD's draining substate.
        out.sq_draining = u8::from(engine.sq_draining(i.qpn)?);
        (out, attr)
    };
    Ok(QueryQpOut {
        attr: out,
        qp_type: qp.qp_type.raw(),
        sq_sig_all: u8::from(qp.sq_sig_all),
        rsvd0: 0,
        pdn: qp.pdn,
        send_cqn: qp.send_cqn,
        recv_cqn: qp.recv_cqn,
        srqn: qp.srqn.unwrap_or(num::NONE),
        rsvd1: 0,
        alt: crate::convert::alt_path_to_abi(&attr),
    })
}

pub(super) fn destroy_qp(x: &mut Exec<'_>, i: DestroyQpIn) -> Result<(), Fail> {
    if x.hca.xrc_tgts.contains_key(&i.qpn) {
        return super::xrc::destroy_tgt_qp(x, i.qpn);
    }
    if !x.hca.qps.contains_key(&i.qpn) {
        return Err(fail(Status::NotFound, Syndrome::NoQp));
    }
    if x.hca
        .qps
        .get(&i.qpn)
        .is_some_and(|q| q.qp_type == QpType::Rd)
    {
        x.engine().destroy_rd_qp(i.qpn)?;
    } else {
        x.engine().destroy_qp(i.qpn)?;
    }
    let Some(qp) = x.hca.qps.remove(&i.qpn) else {
        return Ok(());
    };
    x.hca.slots.remove(&qp.db);
    x.hca.ring_charges.remove(&SlotOwner::Qp(i.qpn));
    Ok(())
}
