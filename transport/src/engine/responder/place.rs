//! Placing a SEND or RDMA WRITE packet: the part of the responder that RC and UC
//! share (9.4.1, 9.4.3; OP-01, OP-02, OP-05). Each step reports what happened;
//! what a failure means differs by service and stays with the caller: RC NAKs
//! and keeps its PSN (9.7.5.2), UC drops the rest of the message and counts it
//! (RL-15, 9.8.3).

use super::{recv_completion, take_recv, InMsg};
use crate::engine::access::{self, local_status, RemoteErr};
use crate::engine::{Ctx, Qp};
use crate::mr::RemoteAccess;
use crate::verbs::{Completion, RecvWr, WcFlags, WcOpcode, WcStatus};
use crate::wire::opcode::{OpcodeInfo, Position};
use crate::wire::TransportRepr;

/// C9-11: first and middle packets carry a full PMTU, a last one 1..=PMTU
/// bytes, an only one at most a PMTU.
pub(super) fn pmtu_len_ok(qp: &Qp, info: &OpcodeInfo, len: usize) -> bool {
    let pmtu = qp.attr.path_mtu.bytes();
    match info.position {
        Position::First | Position::Middle => len == pmtu,
        Position::Last => len > 0 && len <= pmtu,
        Position::Only => len <= pmtu,
    }
}

/// What placing a SEND packet did.
pub(super) enum SendStep {
    /// Placed; the message's completion when this packet ended it (the caller
    /// adds what only it knows, such as an invalidation, and pushes it).
    Placed(Option<Completion>),
    /// The receive buffers refused the bytes (length or protection): the
    /// message is closed and its receive WQE completed with this status.
    Failed(WcStatus),
    /// A page of an ODP MR of the receive buffers is not present (issue 29):
    /// nothing was placed; a message's first packet gave its receive WQE
    /// back (the retry takes it again), a later one keeps the message open
    /// where it was.
    Fault(crate::mr::OdpFault),
}

/// Places a SEND packet into the receive WQE of the message in progress
/// (`qp.resp.cur` is `InMsg::Send`; the caller took the WQE at its first packet).
pub(super) fn send(qp: &mut Qp, t: &TransportRepr<'_>, cx: &mut Ctx<'_>) -> SendStep {
    let Some(InMsg::Send { wqe, placed, .. }) = &mut qp.resp.cur else {
        return SendStep::Placed(None);
    };
    let data = cx.payload(t);
    if let Err(e) = cx.mrs.scatter(cx.mem, qp.init.pd, &wqe.sges, *placed, data) {
        if let crate::mr::CopyError::PageFault(f) = e {
            if *placed == 0 {
                if let Some(InMsg::Send { wqe, from_srq, .. }) = qp.resp.cur.take() {
                    super::put_back(qp, cx, wqe, from_srq);
                }
            }
            return SendStep::Fault(f);
        }
        let status = local_status(e);
        if let Some(InMsg::Send { wqe, placed, .. }) = qp.resp.cur.take() {
            cx.fx
                .completions
                .push((qp.init.recv_cq, recv_completion(qp, &wqe, status, placed)));
        }
        return SendStep::Failed(status);
    }
    *placed += t.payload.len() as u64;
    if !t.bth.opcode.info().ends_message() {
        return SendStep::Placed(None);
    }
    let Some(InMsg::Send { wqe, placed, .. }) = qp.resp.cur.take() else {
        return SendStep::Placed(None);
    };
    let mut c = recv_completion(qp, &wqe, WcStatus::Success, placed);
    if let Some(imm) = t.ext.imm_dt {
        c.imm_data = imm;
        c.flags = WcFlags::WITH_IMM;
    }
    c.solicited = t.bth.solicited; // OP-10
    SendStep::Placed(Some(c))
}

/// Why a WRITE packet was not placed. Nothing was written and no receive WQE
/// consumed; `qp.resp.cur` is left for the caller to close.
pub(super) enum WriteFail {
    /// Past DMALen, or short of it at the last packet (9.4.3).
    Length,
    /// A WRITE with immediate found no receive WQE (RL-11 on RC).
    NoReceive,
    /// R_Key, access or bounds (C9-88, MP-04), with the receive WQE the last
    /// (or only) packet of a WRITE with immediate had taken: the caller
    /// decides its fate (RC completes it in error, UC puts it back).
    Remote(RemoteErr, Option<(RecvWr, bool)>),
}

/// Places an RDMA WRITE packet of the message in `qp.resp.cur`
/// (`InMsg::Write`, opened from the RETH of its first packet). The first
/// packet checks the whole VA/DMALen range its RETH names before any byte lands
/// (9.3.3.2, as rxe's check_rkey does for RC and UC): a WRITE that runs past its
/// MR is refused whole (MP-04). Returns whether the message ended.
pub(super) fn write(
    qp: &mut Qp,
    t: &TransportRepr<'_>,
    cx: &mut Ctx<'_>,
) -> Result<bool, WriteFail> {
    let Some(InMsg::Write {
        va,
        rkey,
        dma_len,
        placed,
    }) = qp.resp.cur
    else {
        return Ok(false);
    };
    let info = t.bth.opcode.info();
    let len = t.payload.len() as u64;
    let ends = info.ends_message();
    // Length against DMALen: never past it, exactly it at the end.
    if placed + len > dma_len || (ends && placed + len != dma_len) {
        return Err(WriteFail::Length);
    }
    // WRITE with immediate consumes a receive WQE: taken before memory is touched.
    let has_imm = info.operation == crate::wire::opcode::Operation::RdmaWriteWithImmediate;
    let recv: Option<(RecvWr, bool)> = if has_imm && ends {
        Some(take_recv(qp, cx).ok_or(WriteFail::NoReceive)?)
    } else {
        None
    };
    // C9-88: a zero-length WRITE checks nothing.
    if dma_len > 0 && len > 0 {
        let whole = match placed {
            0 => access::remote_check(
                cx.mrs,
                qp.init.pd,
                qp.qpn,
                rkey,
                va,
                dma_len,
                RemoteAccess::Write,
            ),
            _ => Ok(()),
        };
        let data = cx.payload(t);
        if let Err(e) = whole.and_then(|()| {
            access::remote_write(
                cx.mrs,
                cx.mem,
                qp.init.pd,
                qp.qpn,
                rkey,
                va.wrapping_add(placed),
                data,
            )
        }) {
            return Err(WriteFail::Remote(e, recv));
        }
    }
    if let Some(InMsg::Write { placed, .. }) = &mut qp.resp.cur {
        *placed += len;
    }
    if ends {
        qp.resp.cur = None;
        if let Some((wqe, _)) = recv {
            let mut c = recv_completion(qp, &wqe, WcStatus::Success, dma_len);
            c.opcode = WcOpcode::RecvRdmaWithImm;
            c.imm_data = t.ext.imm_dt.unwrap_or(0);
            c.flags = WcFlags::WITH_IMM;
            c.solicited = t.bth.solicited;
            cx.fx.completions.push((qp.init.recv_cq, c));
        }
    }
    Ok(ends)
}
