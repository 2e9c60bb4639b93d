//! The responder of a QP, the third of its three state machines (the receive
//! side, as Linux rxe's rxe_resp.c): request validation in the spec's order,
//! execution, and responses in PSN order (IBA 9.4, 9.5, 9.7.5, 9.8; after rxe's
//! responder: check PSN, check op sequence, check access, check resources, check
//! length, check R_Key, execute, acknowledge).
//! Features OP-01..OP-10, OR-02, OR-03, OR-07, RL-03..RL-08, RL-11, RL-12, RL-15,
//! RL-16, SR-01.
//!
//! What it sends back is in `responses.rs`: the responses queued in PSN order
//! and their packets, the READ/ATOMIC resources saved for replay, and the
//! duplicate requests answered from them.

mod place;
mod responses;

use std::collections::VecDeque;

use place::{SendStep, WriteFail};
use responses::{
    ack, duplicate, nak, out_cap, out_cap_for, queue_aeth, rd_atomic_slot_free, remote_nak,
    save_resource, zero_read_response, ResKind, Resource, RespItem,
};
pub(crate) use responses::{poll_transmit, unsolicited_credit_ack};

use super::access::{self, local_status, RemoteErr};
use super::{Ctx, Effects, NakReason, Qp, RxDrop};
use crate::mr::RemoteAccess;
use crate::psn;
use crate::verbs::{
    Access, Completion, Event, FlushSpec, Handle, QpState, QpType, RecvWr, WcFlags, WcOpcode,
    WcStatus,
};
use crate::wire::ext::{AethSyndrome, NakCode, RethRepr};
use crate::wire::opcode::{Operation, Position};
use crate::wire::{PacketRepr, MAX_PAYLOAD};

/// Bytes of GRH space at the start of every UD receive buffer (IBA 11.4.1.2).
pub const UD_GRH_SPACE: usize = 40;

/// A message being received.
#[derive(Debug)]
enum InMsg {
    /// SEND: the receive WQE and bytes placed so far.
    Send {
        wqe: RecvWr,
        from_srq: bool,
        placed: u64,
    },
    /// RDMA WRITE: target and bytes written so far.
    Write {
        va: u64,
        rkey: u32,
        dma_len: u64,
        placed: u64,
    },
    /// UC: the rest of a message whose start could not be taken (RL-15).
    Discard,
}

/// Responder state of a QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN (RL-03).
    pub epsn: u32,
    /// Messages completed (AETH:MSN, RL-08).
    pub msn: u32,
    /// A NAK (sequence or RNR) went out for `epsn`; later packets are dropped
    /// silently until it arrives (RL-03).
    pub(super) nak_sent: bool,
    cur: Option<InMsg>,
    resources: VecDeque<Resource>,
    out: VecDeque<RespItem>,
    established: bool,
    /// The credit code of the last ACK-kind AETH sent (RL-13, `credits`).
    advertised: Option<u8>,
    /// `Limits::credits` off: ACKs carry no count.
    pub(crate) credits_off: bool,
    /// This QP saw loss (it sent a sequence NAK or answered a duplicate):
    /// its ACKs coalesce into the two newest (`responses::queue_aeth`).
    lossy: bool,
    /// A request came with FECN: the next response carries BECN (IBA
    /// A10.2.2, `cc_ib`).
    pub(crate) becn: bool,
}

impl Responder {
    /// A responder that reports credits (RL-13) if `credits`.
    pub(crate) fn new(credits: bool) -> Responder {
        Responder {
            credits_off: !credits,
            ..Responder::default()
        }
    }

    /// Whether a response waits to be sent.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }
}

/// The host bytes a QP's responder can hold at most, with the QP itself: its
/// saved READ/ATOMIC resources (RL-07) and its queue of unsent responses
/// (`responses::out_cap`), for the deepest max_dest_rd_atomic the engine
/// grants. Reserved in the budget when the QP is created (ARCHITECTURE.md §9).
pub fn state_bound(max_rd_atomic: u8) -> u64 {
    // Queues grow by doubling: room for the next power of two.
    let saved = usize::from(max_rd_atomic).next_power_of_two();
    let out = out_cap_for(max_rd_atomic).next_power_of_two();
    (std::mem::size_of::<Qp>()
        + saved * std::mem::size_of::<Resource>()
        + out * std::mem::size_of::<RespItem>()) as u64
}

/// Aborts a message in progress when the QP goes to Error: a receive WQE of
/// its own queue goes back there to be flushed; one taken from an SRQ (the
/// SRQ's WQEs are not the QP's to flush) completes flushed on the QP's
/// receive CQ, which for an XRC TGT QP is the one its message bound
/// (issue 25: dropped, it was a guest buffer lost with no completion).
pub(crate) fn abort_message(qp: &mut Qp, fx: &mut Effects) {
    match qp.resp.cur.take() {
        Some(InMsg::Send {
            wqe,
            from_srq: false,
            ..
        }) => qp.rq.push_front(wqe),
        Some(InMsg::Send {
            wqe,
            from_srq: true,
            ..
        }) => {
            let c = Completion {
                xrc_srq: qp.init.srq.filter(|_| qp.init.qp_type == QpType::XrcTgt),
                ..Completion::new(wqe.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn)
            };
            fx.completions.push((qp.init.recv_cq, c));
        }
        _ => {}
    }
    qp.resp.out.clear();
}

/// The receive WQE a message in progress took from an SRQ, and the SRQ,
/// taken off the QP: a QP moved to Reset gives it back to the SRQ, which
/// outlives the QP's state (its own queue's WQEs are discarded).
pub(crate) fn take_srq_wqe(qp: &mut Qp) -> Option<(Handle, RecvWr)> {
    let srq = qp.init.srq?;
    match qp.resp.cur.take() {
        Some(InMsg::Send {
            wqe,
            from_srq: true,
            ..
        }) => Some((srq, wqe)),
        other => {
            qp.resp.cur = other;
            None
        }
    }
}

fn take_recv(qp: &mut Qp, cx: &mut Ctx<'_>) -> Option<(RecvWr, bool)> {
    match qp.init.srq {
        Some(h) => {
            let srq = cx.srqs.get_mut(&h)?;
            let (w, fire) = srq.take()?;
            if fire {
                cx.fx.events.push(Event::SrqLimitReached { srq: h });
            }
            Some((w, true))
        }
        None => qp.rq.pop_front().map(|w| (w, false)),
    }
}

fn put_back(qp: &mut Qp, cx: &mut Ctx<'_>, wqe: RecvWr, from_srq: bool) {
    if from_srq {
        if let Some(s) = qp.init.srq.and_then(|h| cx.srqs.get_mut(&h)) {
            s.wqes.push_front(wqe);
        }
    } else {
        qp.rq.push_front(wqe);
    }
}

fn recv_completion(qp: &Qp, wqe: &RecvWr, status: WcStatus, byte_len: u64) -> Completion {
    Completion {
        byte_len: byte_len as u32,
        src_qp: qp.attr.dest_qp_num,
        pkey_index: qp.attr.pkey_index,
        slid: qp.attr.av.dlid,
        sl: qp.attr.av.sl,
        // SR-02: a TGT QP's receive side is the XRC SRQ bound for the message.
        xrc_srq: qp.init.srq.filter(|_| qp.init.qp_type == QpType::XrcTgt),
        ..Completion::new(wqe.wr_id, status, WcOpcode::Recv, qp.qpn)
    }
}

/// The write context a first/only RDMA WRITE packet opens from its RETH.
fn start_write(reth: &RethRepr) -> InMsg {
    InMsg::Write {
        va: reth.va,
        rkey: reth.rkey,
        dma_len: u64::from(reth.dma_len),
        placed: 0,
    }
}

/// Handles a request packet. Returns whether the QP has a response to send.
pub(crate) fn handle_request(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    if qp.state == QpState::Rtr && !qp.resp.established {
        // QS-08: the first packet in RTR establishes communication.
        qp.resp.established = true;
        cx.fx.events.push(Event::CommEstablished { qpn: qp.qpn });
    }
    qp.resp.established = true;
    match qp.init.qp_type {
        QpType::Rc => handle_rc(qp, pkt, cx, true),
        QpType::XrcTgt => {
            // o9-24.a1, PV-08: the XRC SRQ of the request, bound if it is
            // in the QP's domain and the request starts a message, or the one
            // bound if it continues one (`xrc::bind_target`); else NAKed
            // after the PSN check, as any invalid request is.
            let in_message = qp.resp.cur.is_some();
            let xrc_ok = super::xrc::bind_target(qp, pkt, in_message, cx.srqs);
            handle_rc(qp, pkt, cx, xrc_ok)
        }
        // `io::check_headers` sends an INI QP responses only.
        QpType::XrcIni => false,
        QpType::Uc => {
            handle_uc(qp, pkt, cx);
            false
        }
        QpType::Ud => {
            handle_ud(qp, pkt, cx);
            false
        }
    }
}

/// `xrc_ok`: an XRC TGT QP's request named an XRC SRQ of its domain (always
/// true for RC).
fn handle_rc(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>, xrc_ok: bool) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let info = t.bth.opcode.info();
    // 0. A peer that sends faster than its responses leave (duplicates, above
    //    all) must not grow the response queue without end: at its bound the
    //    request is dropped unexecuted, as if lost (see `out_cap`).
    if qp.resp.out.len() >= out_cap(qp) {
        cx.counters.drop(RxDrop::ResponseQueueFull);
        return false;
    }
    // 1. Check PSN (9.7.5.1; RL-03, RL-04).
    let d = psn::diff(p, qp.resp.epsn);
    if d > 0 {
        if qp.resp.nak_sent {
            cx.counters.drop(RxDrop::OutOfSequence);
            return false;
        }
        qp.resp.nak_sent = true;
        qp.resp.lossy = true;
        let e = qp.resp.epsn;
        nak(qp, cx, e, NakCode::PsnSequenceError, NakReason::PsnSequence);
        // After a SEND or WRITE packet the NAK goes twice (vhca policy,
        // issue 14): this QP now drops everything but `e` without another
        // NAK (RL-03), so a lost NAK left the requester nothing to act on
        // but a probe timeout. The copy is the same NAK; the requester goes
        // back once for both (RL-10 counts one retry). After an ATOMIC,
        // FLUSH or ATOMIC WRITE too (issue 30: at 5 % loss a stream of
        // ATOMICs lost a NAK as often as a WRITE stream, each costing the
        // probe floor, fifty of its round trips). Not after a READ request:
        // a READ stream showed no gain in the simulation (its requester
        // also sees response gaps), only a packet more.
        if info.operation != Operation::RdmaReadRequest {
            responses::queue_aeth(qp, e, AethSyndrome::Nak(NakCode::PsnSequenceError));
        }
        return true;
    }
    if d < 0 {
        cx.counters.duplicates_received += 1;
        return duplicate(qp, pkt, cx);
    }
    if !xrc_ok {
        // o9-24.a1 (PV-08): the XRC SRQ is missing or of another domain, or
        // not the one the message's first packet bound.
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::XrcSrq);
        return true;
    }
    // 2. Check op sequence (9.7.5.1.2): a message in progress continues, or a new one
    //    starts.
    let cont = matches!(info.position, Position::Middle | Position::Last);
    let seq_ok = match (&qp.resp.cur, info.operation) {
        (None, _) => !cont,
        (
            Some(InMsg::Send { .. }),
            Operation::Send | Operation::SendWithImmediate | Operation::SendWithInvalidate,
        ) => cont,
        (Some(InMsg::Write { .. }), Operation::RdmaWrite | Operation::RdmaWriteWithImmediate) => {
            cont
        }
        _ => false,
    };
    if !seq_ok {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::OpSequence);
        return true;
    }
    // 3. Check the operation is enabled on this QP (o9-...; MP-04).
    let need = match info.operation {
        Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => Some(Access::REMOTE_WRITE),
        Operation::RdmaReadRequest => Some(Access::REMOTE_READ),
        Operation::CompareSwap | Operation::FetchAdd => Some(Access::REMOTE_ATOMIC),
        // IBA 1.5 MPE: ATOMIC WRITE is a write that must not tear; a FLUSH
        // needs the flush rights of the MR it names only.
        Operation::AtomicWrite => Some(Access::REMOTE_WRITE),
        Operation::Flush => None,
        // OP-03: SEND with Invalidate is a SEND whose last packet carries IETH.
        Operation::Send | Operation::SendWithImmediate | Operation::SendWithInvalidate => None,
        _ => {
            nak(qp, cx, p, NakCode::InvalidRequest, NakReason::BadOpcode);
            return true;
        }
    };
    if let Some(a) = need {
        if !qp.attr.access.contains(a) {
            nak(qp, cx, p, NakCode::InvalidRequest, NakReason::OpNotEnabled);
            return true;
        }
    }
    // 4. Check length against the PMTU (C9-11): first/middle full, last/only not over.
    if info.payload && !place::pmtu_len_ok(qp, info, t.payload.len()) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::PmtuLength);
        return true;
    }
    match info.operation {
        Operation::Send | Operation::SendWithImmediate | Operation::SendWithInvalidate => {
            rc_send(qp, pkt, cx)
        }
        Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => rc_write(qp, pkt, cx),
        Operation::RdmaReadRequest => rc_read(qp, pkt, cx),
        Operation::Flush => rc_flush(qp, pkt, cx),
        Operation::AtomicWrite => rc_atomic_write(qp, pkt, cx),
        _ => rc_atomic(qp, pkt, cx),
    }
}

/// Moves ePSN past a request that executed and queues an ACK when asked,
/// or when a BECN waits: A10.2.2 returns a BECN for each FECN received, and
/// left for the message's last ACK the marks of a long message would come
/// back as one (`cc_ib::on_fecn` sets it before the request gets here).
fn advance(qp: &mut Qp, p: u32, n: u32, ack_req: bool, ends_message: bool) {
    qp.resp.epsn = psn::add(p, n);
    qp.resp.nak_sent = false;
    if ends_message {
        qp.resp.msn = psn::add(qp.resp.msn, 1);
    }
    if ack_req || qp.resp.becn {
        ack(qp, p);
    }
}

fn rc_send(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let ends = t.bth.opcode.info().ends_message();
    if qp.resp.cur.is_none() {
        // 5. Check resources: a receive WQE, else RNR NAK (9.7.5.2.8; RL-11).
        let Some((wqe, from_srq)) = take_recv(qp, cx) else {
            rnr_nak(qp, cx, p);
            return true;
        };
        qp.resp.cur = Some(InMsg::Send {
            wqe,
            from_srq,
            placed: 0,
        });
    }
    // 6. Place the payload in the receive buffers (local length/protection checks of
    //    the responder; a failure completes the receive WQE in error).
    match place::send(qp, t, cx) {
        SendStep::Failed(status) => {
            let (code, why) = if status == WcStatus::LocLenErr {
                (NakCode::InvalidRequest, NakReason::ReceiveTooSmall)
            } else {
                (
                    NakCode::RemoteOperationalError,
                    NakReason::ReceiveProtection,
                )
            };
            nak(qp, cx, p, code, why);
            return true;
        }
        SendStep::Placed(Some(mut c)) => {
            if let Some(rkey) = t.ext.ieth {
                // OP-03, o9-5.2.1: the invalidate runs once the packet passed
                // every transport check and the message is placed; o9-5.2.2:
                // the R_Key is validated first (MrTable::invalidate).
                c.imm_data = rkey;
                if let Err(e) = cx.mrs.invalidate(qp.init.pd, qp.qpn, rkey) {
                    // Table 63 "Remote Invalidate Error" (rxe: class J): the
                    // receive WQE completes with REM_INV_REQ_ERR, the requester
                    // is NAKed Invalid Request and the QP goes to Error.
                    log::debug!("QP {}: SEND with Invalidate of {rkey:#x}: {e}", qp.qpn);
                    c.status = WcStatus::RemInvReqErr;
                    cx.fx.completions.push((qp.init.recv_cq, c));
                    nak(
                        qp,
                        cx,
                        p,
                        NakCode::InvalidRequest,
                        NakReason::InvalidInvalidate,
                    );
                    return true;
                }
                c.flags = WcFlags::WITH_INV;
            }
            cx.fx.completions.push((qp.init.recv_cq, c));
        }
        SendStep::Placed(None) => {}
        SendStep::Fault(f) => {
            // Issue 29: the receive buffer's page is not present: RNR NAK
            // (the request is not executed, 9.7.5.2.8) and the fault raised.
            super::odp::responder_fault(qp, f, cx);
            super::odp::count_rnr_nak(cx);
            rnr_nak(qp, cx, p);
            return true;
        }
    }
    advance(qp, p, 1, t.bth.ack_req || ends, ends);
    true
}

/// An RNR NAK for the request at `p` (9.7.5.2.8; RL-11): the request is not
/// executed, the requester retries it after the QP's minimum RNR timer.
fn rnr_nak(qp: &mut Qp, cx: &mut Ctx<'_>, p: u32) {
    qp.resp.nak_sent = true;
    cx.counters.rnr_naks_sent += 1;
    let timer_code = qp.attr.min_rnr_timer & 0x1f;
    queue_aeth(qp, p, AethSyndrome::RnrNak { timer_code });
}

fn rc_write(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let info = t.bth.opcode.info();
    if qp.resp.cur.is_none() {
        let Some(reth) = t.ext.reth else { return false };
        if u64::from(reth.dma_len) > super::MAX_MSG_SIZE {
            nak(qp, cx, p, NakCode::InvalidRequest, NakReason::TooLong);
            return true;
        }
        qp.resp.cur = Some(start_write(&reth));
    }
    // 7. Length, resources, then R_Key and bounds before any byte is written.
    match place::write(qp, t, cx) {
        Ok(ends) => advance(qp, p, 1, t.bth.ack_req || ends, ends),
        Err(WriteFail::Length) => {
            qp.resp.cur = None;
            nak(qp, cx, p, NakCode::InvalidRequest, NakReason::DmaLength);
        }
        Err(WriteFail::NoReceive) => {
            // An RNR NAK leaves the request unexecuted (9.7.5.2.8): a WRITE-imm
            // Only packet must not leave a message open behind it, or its
            // retry fails the op sequence check.
            if info.starts_message() {
                qp.resp.cur = None;
            }
            rnr_nak(qp, cx, p);
        }
        Err(WriteFail::Remote(RemoteErr::PageFault(f), recv)) => {
            // Issue 29: the target page is not present: nothing was written;
            // the receive WQE a WRITE with immediate took goes back, and the
            // request is RNR NAKed (9.7.5.2.8) as for want of that WQE.
            if let Some((wqe, from_srq)) = recv {
                put_back(qp, cx, wqe, from_srq);
            }
            if info.starts_message() {
                qp.resp.cur = None;
            }
            super::odp::responder_fault(qp, f, cx);
            super::odp::count_rnr_nak(cx);
            rnr_nak(qp, cx, p);
        }
        Err(WriteFail::Remote(e, recv)) => {
            qp.resp.cur = None;
            if let Some((wqe, _)) = recv {
                // MP-05, IBA 10.10.3 Table 82 (RC receive queue): the receive
                // WQE a WRITE with immediate consumed completes with Local
                // Access Error when the write's protection check fails, ahead
                // of the flush the NAK's move to Error brings to the others.
                let mut c = recv_completion(qp, &wqe, WcStatus::LocAccessErr, 0);
                c.opcode = WcOpcode::RecvRdmaWithImm;
                cx.fx.completions.push((qp.init.recv_cq, c));
            }
            nak(qp, cx, p, remote_nak(e), NakReason::from(e));
        }
    }
    true
}

fn rc_read(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let Some(reth) = t.ext.reth else { return false };
    if !rd_atomic_slot_free(qp) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    let len = u64::from(reth.dma_len);
    if len > super::MAX_MSG_SIZE {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::TooLong);
        return true;
    }
    if len > 0 {
        if let Err(e) = access::remote_check(
            cx.mrs,
            qp.init.pd,
            qp.qpn,
            reth.rkey,
            reth.va,
            len,
            RemoteAccess::Read,
        ) {
            nak(qp, cx, p, remote_nak(e), NakReason::from(e));
            return true;
        }
    }
    let npkts = psn::read_packets(len, qp.attr.path_mtu.bytes());
    let r = Resource {
        psn: p,
        npkts,
        kind: ResKind::Read {
            va: reth.va,
            rkey: reth.rkey,
            len,
        },
    };
    if !save_resource(qp, r) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    qp.resp.out.push_back(RespItem::Read {
        psn: p,
        va: reth.va,
        rkey: reth.rkey,
        len,
        sent: 0,
        fresh: true,
        pd: qp.init.pd,
    });
    advance(qp, p, npkts, false, true);
    true
}

fn rc_atomic(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let Some(a) = t.ext.atomic_eth else {
        return false;
    };
    // Before executing: a request beyond the responder resources is refused
    // unexecuted (see `rd_atomic_slot_free`).
    if !rd_atomic_slot_free(qp) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    // OP-07: 8-byte aligned, else Invalid Request; R_Key and bounds, else Remote
    // Access Error; then execute exactly once and save the result (RL-06).
    let cmp_swap = t.bth.opcode.info().operation == Operation::CompareSwap;
    let orig = match access::remote_atomic(
        cx.mrs, cx.mem, qp.init.pd, qp.qpn, a.rkey, a.va, cmp_swap, a.compare, a.swap_add,
    ) {
        Ok(v) => v,
        Err(RemoteErr::PageFault(f)) => {
            // Issue 29: not executed (RL-06: it runs once, when the page is
            // there); RNR NAK and the fault raised.
            super::odp::responder_fault(qp, f, cx);
            super::odp::count_rnr_nak(cx);
            rnr_nak(qp, cx, p);
            return true;
        }
        Err(e) => {
            nak(qp, cx, p, remote_nak(e), NakReason::from(e));
            return true;
        }
    };
    if !save_resource(
        qp,
        Resource {
            psn: p,
            npkts: 1,
            kind: ResKind::Atomic { orig },
        },
    ) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    qp.resp.out.push_back(RespItem::AtomicAck {
        psn: p,
        orig,
        fresh: true,
    });
    advance(qp, p, 1, false, true);
    true
}

/// Saves the responder resource of a FLUSH or ATOMIC WRITE that executed and
/// queues its response: RDMA READ Response Only without payload (IBA 1.5 MPE;
/// as Linux rxe's `send_read_response_ack`).
fn placement_done(qp: &mut Qp, cx: &mut Ctx<'_>, p: u32) -> bool {
    if !save_resource(
        qp,
        Resource {
            psn: p,
            npkts: 1,
            kind: ResKind::Placement,
        },
    ) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    qp.resp.out.push_back(zero_read_response(p, true));
    advance(qp, p, 1, false, true);
    true
}

/// RDMA FLUSH (IBA 1.5 MPE). Requests execute in PSN order and every earlier
/// WRITE or ATOMIC was stored in the caller's memory before this one was
/// taken, so its data is globally visible once the FLUSH is validated: there
/// is nothing more to do for placement type global. Persistence is a right no
/// MR of this device can hold (the device refuses FLUSH_PERSISTENT at
/// registration), so such a FLUSH fails the rights check.
fn rc_flush(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let (Some(feth), Some(reth)) = (t.ext.feth, t.ext.reth) else {
        return false;
    };
    if !rd_atomic_slot_free(qp) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    let ptype = feth.placement_type;
    let known = FlushSpec::TYPE_GLOBAL | FlushSpec::TYPE_PERSISTENT;
    if ptype == 0 || ptype & !known != 0 || feth.selectivity > FlushSpec::LEVEL_MR {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::BadOpcode);
        return true;
    }
    let mut need = Access(0);
    if ptype & FlushSpec::TYPE_GLOBAL != 0 {
        need = need | Access::FLUSH_GLOBAL;
    }
    if ptype & FlushSpec::TYPE_PERSISTENT != 0 {
        need = need | Access::FLUSH_PERSISTENT;
    }
    // The QP must enable the placement type (its access flags, as Linux rxe),
    // then the R_Key's region must grant it.
    if !qp.attr.access.contains(need) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::OpNotEnabled);
        return true;
    }
    let range =
        (feth.selectivity == FlushSpec::LEVEL_RANGE).then_some((reth.va, u64::from(reth.dma_len)));
    if let Err(e) = cx
        .mrs
        .check_flush_at(qp.init.pd, Some(qp.qpn), reth.rkey, range, need)
    {
        let e = RemoteErr::Access(e);
        nak(qp, cx, p, remote_nak(e), NakReason::from(e));
        return true;
    }
    placement_done(qp, cx, p)
}

/// RDMA ATOMIC WRITE (IBA 1.5 MPE): 8 bytes of payload, RETH DMA length 8,
/// stored at the aligned VA in one single-copy-atomic store, exactly once.
fn rc_atomic_write(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let Some(reth) = t.ext.reth else {
        return false;
    };
    if !rd_atomic_slot_free(qp) {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::NoResources);
        return true;
    }
    let Ok(bytes) = <[u8; 8]>::try_from(t.payload) else {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::PmtuLength);
        return true;
    };
    if reth.dma_len != 8 {
        nak(qp, cx, p, NakCode::InvalidRequest, NakReason::DmaLength);
        return true;
    }
    let value = u64::from_le_bytes(bytes);
    if let Err(e) = access::remote_atomic_write(
        cx.mrs, cx.mem, qp.init.pd, qp.qpn, reth.rkey, reth.va, value,
    ) {
        if let RemoteErr::PageFault(f) = e {
            // Issue 29: as an ATOMIC (`rc_atomic`).
            super::odp::responder_fault(qp, f, cx);
            super::odp::count_rnr_nak(cx);
            rnr_nak(qp, cx, p);
            return true;
        }
        nak(qp, cx, p, remote_nak(e), NakReason::from(e));
        return true;
    }
    placement_done(qp, cx, p)
}

fn handle_uc(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let info = t.bth.opcode.info();
    let starts = info.starts_message();
    if p != qp.resp.epsn || (starts && qp.resp.cur.is_some()) {
        // RL-15: a gap (or a new start) ends the partial message; its receive WQE is
        // reused for the next one.
        if let Some(InMsg::Send { wqe, from_srq, .. }) = qp.resp.cur.take() {
            put_back(qp, cx, wqe, from_srq);
        }
        qp.resp.cur = None;
    }
    qp.resp.epsn = psn::add(p, 1);
    if !starts && qp.resp.cur.is_none() {
        cx.counters.drop(RxDrop::UcResync);
        return;
    }
    if matches!(qp.resp.cur, Some(InMsg::Discard)) {
        if info.ends_message() {
            qp.resp.cur = None;
        }
        cx.counters.drop(RxDrop::UcResync);
        return;
    }
    let ends = info.ends_message();
    // RL-15: what UC cannot place is dropped with the rest of its message.
    let discard = |qp: &mut Qp, cx: &mut Ctx<'_>, r: RxDrop| {
        cx.counters.drop(r);
        qp.resp.cur = if ends { None } else { Some(InMsg::Discard) };
    };
    if !place::pmtu_len_ok(qp, info, t.payload.len()) {
        if let Some(InMsg::Send { wqe, from_srq, .. }) = qp.resp.cur.take() {
            put_back(qp, cx, wqe, from_srq);
        }
        return discard(qp, cx, RxDrop::UdBadLength);
    }
    match info.operation {
        Operation::Send | Operation::SendWithImmediate => {
            if starts {
                let Some((wqe, from_srq)) = take_recv(qp, cx) else {
                    return discard(qp, cx, RxDrop::NoReceiveWqe);
                };
                qp.resp.cur = Some(InMsg::Send {
                    wqe,
                    from_srq,
                    placed: 0,
                });
            }
            match place::send(qp, t, cx) {
                SendStep::Placed(Some(c)) => cx.fx.completions.push((qp.init.recv_cq, c)),
                SendStep::Placed(None) => {}
                // The WQE completed in error; the rest of the message is not placed.
                SendStep::Failed(_) => {
                    qp.resp.cur = if ends { None } else { Some(InMsg::Discard) };
                }
                // UC cannot RNR NAK: the message is lost (RL-15), the fault
                // raised so the next one finds the page.
                SendStep::Fault(f) => {
                    super::odp::responder_fault(qp, f, cx);
                    if let Some(InMsg::Send { wqe, from_srq, .. }) = qp.resp.cur.take() {
                        put_back(qp, cx, wqe, from_srq);
                    }
                    qp.resp.cur = if ends { None } else { Some(InMsg::Discard) };
                }
            }
        }
        Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => {
            if !qp.attr.access.contains(Access::REMOTE_WRITE) {
                return discard(qp, cx, RxDrop::NotExpected);
            }
            if starts {
                let Some(reth) = t.ext.reth else { return };
                qp.resp.cur = Some(start_write(&reth));
            }
            match place::write(qp, t, cx) {
                Ok(_) => {}
                Err(WriteFail::Length) => discard(qp, cx, RxDrop::UdBadLength),
                Err(WriteFail::NoReceive) => discard(qp, cx, RxDrop::NoReceiveWqe),
                Err(WriteFail::Remote(_, recv)) => {
                    // UC drops what it cannot place (RL-15): the receive
                    // WQE stays for the next message.
                    if let Some((w, s)) = recv {
                        put_back(qp, cx, w, s);
                    }
                    discard(qp, cx, RxDrop::NotExpected)
                }
            }
        }
        _ => cx.counters.drop(RxDrop::ServiceMismatch),
    }
}

fn handle_ud(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) {
    let t = &pkt.transport;
    // RL-16: single-packet messages, no PSN check (C9-12).
    if t.payload.len() > MAX_PAYLOAD {
        cx.counters.drop(RxDrop::UdBadLength);
        return;
    }
    let Some((wqe, from_srq)) = take_recv(qp, cx) else {
        cx.counters.drop(RxDrop::NoReceiveWqe);
        return;
    };
    // The first 40 bytes of a UD receive buffer hold the GRH, if any.
    // On RoCE it holds the frame's IP header as the receiver's stack expects
    // it (WF-10; see `link::RoceRx`).
    let mut grh_bytes = [0u8; UD_GRH_SPACE];
    if let Some(r) = &cx.roce {
        grh_bytes = r.hdr;
    } else if let Some(g) = &pkt.grh {
        let mut v = crate::wire::Grh::new_unchecked(&mut grh_bytes[..]);
        let pay = (t.buffer_len() + 4) as u16;
        let _ = g.emit(&mut v, pay);
    }
    let r1 = cx.mrs.scatter(cx.mem, qp.init.pd, &wqe.sges, 0, &grh_bytes);
    let r2 = r1.and_then(|_| {
        cx.mrs.scatter(
            cx.mem,
            qp.init.pd,
            &wqe.sges,
            UD_GRH_SPACE as u64,
            t.payload,
        )
    });
    let total = (UD_GRH_SPACE + t.payload.len()) as u64;
    let mut c = recv_completion(qp, &wqe, WcStatus::Success, total);
    let _ = from_srq;
    if let Err(e) = r2 {
        c.status = local_status(e);
        c.byte_len = 0;
    }
    c.src_qp = t.ext.deth.map(|d| d.src_qp).unwrap_or(0);
    if qp.qpn == 1 {
        // C9-42: QP1 takes any partition of the port; the GSI answers in the
        // one the request came in (the entry it matched, PV-03).
        c.pkey_index = cx.port.pkey_slot(t.bth.pkey).unwrap_or(0);
    }
    c.slid = pkt.lrh.slid;
    c.sl = pkt.lrh.sl;
    c.dlid_path_bits = (pkt.lrh.dlid & ((1u16 << cx.port.lmc.min(7)) - 1)) as u8;
    if pkt.grh.is_some() {
        c.flags = WcFlags(c.flags.0 | WcFlags::GRH.0);
    }
    if let Some(r) = &cx.roce {
        c.smac = Some(r.smac);
        c.network_hdr = r.net;
    }
    if let Some(imm) = t.ext.imm_dt {
        c.imm_data = imm;
        c.flags = WcFlags(c.flags.0 | WcFlags::WITH_IMM.0);
    }
    c.solicited = t.bth.solicited;
    cx.fx.completions.push((qp.init.recv_cq, c));
}
