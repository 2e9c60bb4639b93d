//! The send side of an EE context (AD-11, OP-11): one message at a time from
//! the RD QPs waiting for the EEC, PSNs from the EEC's send PSN, go-back on a
//! sequence NAK or ACK timeout, RNR waits, and RESYNC before a message that
//! follows a failed one (seed 000 "RESYNC": the requester makes the
//! responder's expected PSN its own; seed 001: an RD QP's send logic works on
//! one WQE until its response came back).

use std::collections::{BTreeMap, VecDeque};

use super::io::{emit, headers};
use super::{ack_timeout_ns, fail_qp, Eec, RdCounters, RdQp};
use crate::engine::{access::local_status, Ctx, Effects};
use crate::psn;
use crate::verbs::{QpState, SendData, SendFlags, Time, WcStatus, WrOpcode};
use crate::wire::ext::{AethSyndrome, AtomicEthRepr, DethRepr, NakCode, RethRepr};
use crate::wire::opcode::Opcode;
use crate::wire::opcode::{Operation, Position};
use crate::wire::packet::EmitWithError;
use crate::wire::{ExtHeaders, ExtKind, PacketRepr};

/// AckReq at least every this many packets of a long message.
const ACK_REQ_EVERY: u32 = 16;

/// Packets of the message in flight sent and not acknowledged, at most: a
/// message of up to 2^31 bytes (C9-16) is not put on the fabric whole before
/// its first ACK (vhca policy, as RC's window, RL-17).
pub const RD_WINDOW: u32 = 128;

/// The EEC's send state.
#[derive(Debug, Default)]
pub(crate) struct EecReq {
    /// The PSN of the next new packet.
    pub next_psn: u32,
    /// RD QPs whose head WQE waits for this EEC, in the order they came.
    pub waiting: VecDeque<u32>,
    /// The message in flight.
    pub cur: Option<Msg>,
    /// The next message is preceded by a RESYNC (OP-11).
    pub resync_pending: bool,
    /// ACK timer or end of an RNR wait.
    pub deadline: Option<Time>,
    /// Waiting out an RNR NAK's timer (RL-11).
    rnr_wait: bool,
    /// Retries left for the message in flight (RL-10, RL-11).
    retries: u8,
    rnr_retries: u8,
    /// A QP whose message completed: the caller offers its next WQE.
    pub finished: Option<u32>,
}

/// The message in flight on an EEC.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg {
    /// The RD QP it belongs to (for a RESYNC: the QP of the message after it,
    /// whose number the RESYNC's DETH carries so its ACK has a QP to go to,
    /// o9-23.2.1).
    pub qpn: u32,
    dest_qpn: u32,
    pub resync: bool,
    read: bool,
    /// An ATOMIC (OP-07 on RD): one request, answered by an atomic ACK.
    atomic: bool,
    first_psn: u32,
    /// PSNs the message takes: its packets, or a READ's responses (9.7.3.1).
    npkts: u32,
    /// Packets built (a READ: its request covers `una..npkts`).
    sent: u32,
    /// Packets acknowledged (a READ: responses placed).
    una: u32,
    /// The most packets ever built: below it a packet is a retransmission.
    hwm: u32,
    /// A READ response gap was asked about already (until progress).
    gap_asked: bool,
}

impl EecReq {
    pub fn new(sq_psn: u32) -> EecReq {
        EecReq {
            next_psn: sq_psn,
            ..EecReq::default()
        }
    }

    /// The message in flight is given up without a response (its QP left
    /// RTS or went away): the responder's PSN is unknown now (OP-11).
    pub fn abandon(&mut self) {
        self.cur = None;
        self.deadline = None;
        self.rnr_wait = false;
        self.resync_pending = true;
    }
}

/// The opcode of packet `k` of an RD SEND or WRITE (Table 38, 0b010).
fn data_opcode(op: WrOpcode, first: bool, last: bool) -> Opcode {
    use WrOpcode::*;
    match (op, first, last) {
        (Send | SendWithImm, true, false) => Opcode::RD_SEND_FIRST,
        (Send | SendWithImm, false, false) => Opcode::RD_SEND_MIDDLE,
        (Send, false, true) => Opcode::RD_SEND_LAST,
        (Send, true, true) => Opcode::RD_SEND_ONLY,
        (SendWithImm, false, true) => Opcode::RD_SEND_LAST_WITH_IMMEDIATE,
        (SendWithImm, true, true) => Opcode::RD_SEND_ONLY_WITH_IMMEDIATE,
        (_, true, false) => Opcode::RD_RDMA_WRITE_FIRST,
        (_, false, false) => Opcode::RD_RDMA_WRITE_MIDDLE,
        (RdmaWriteWithImm, false, true) => Opcode::RD_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (RdmaWriteWithImm, true, true) => Opcode::RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (_, false, true) => Opcode::RD_RDMA_WRITE_LAST,
        (_, true, true) => Opcode::RD_RDMA_WRITE_ONLY,
    }
}

/// Takes the next message for the EEC: a RESYNC first when one is pending.
fn start_next(e: &mut Eec, qps: &BTreeMap<u32, RdQp>) -> bool {
    let pmtu = e.attr.path_mtu.bytes() as u64;
    while let Some(qpn) = e.req.waiting.pop_front() {
        let Some(qp) = qps.get(&qpn) else { continue };
        let Some(w) = qp.sq.front() else { continue };
        if qp.state != QpState::Rts || w.dest.eecn != e.eecn {
            continue;
        }
        let r = &mut e.req;
        let resync = r.resync_pending;
        let read = w.wr.opcode == WrOpcode::RdmaRead;
        let atomic = matches!(
            w.wr.opcode,
            WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd
        );
        let npkts = if resync || atomic {
            1
        } else if read {
            psn::read_packets(w.len, pmtu as usize)
        } else {
            w.len.div_ceil(pmtu).max(1) as u32
        };
        if resync {
            // The message goes right after its RESYNC.
            r.waiting.push_front(qpn);
            r.resync_pending = false;
        }
        r.cur = Some(Msg {
            qpn,
            dest_qpn: w.dest.remote_qpn,
            resync,
            read: read && !resync,
            atomic: atomic && !resync,
            first_psn: r.next_psn,
            npkts,
            sent: 0,
            una: 0,
            hwm: 0,
            gap_asked: false,
        });
        r.next_psn = psn::add(r.next_psn, npkts);
        r.retries = e.attr.retry_cnt;
        r.rnr_retries = e.attr.rnr_retry;
        return true;
    }
    false
}

/// The next request packet of the EEC, if it has one to send now.
pub(super) fn poll_transmit(
    e: &mut Eec,
    qps: &mut BTreeMap<u32, RdQp>,
    cx: &mut Ctx<'_>,
    buf: &mut [u8],
) -> Option<usize> {
    if e.state != QpState::Rts || e.req.rnr_wait {
        return None;
    }
    // A message that fails locally lets the next one go in the same call;
    // each failure takes one waiting QP, so this ends.
    loop {
        if e.req.cur.is_none() && !start_next(e, qps) {
            return None;
        }
        let m = e.req.cur?;
        if m.sent >= m.npkts || (!m.read && m.sent - m.una >= RD_WINDOW) {
            return None;
        }
        match build(e, qps, m, cx, buf) {
            Ok(len) => return Some(len),
            Err(status) => {
                e.req.cur = None;
                e.req.deadline = None;
                e.req.resync_pending = true;
                if let Some(qp) = qps.get_mut(&m.qpn) {
                    fail_qp(qp, status, cx.fx);
                }
            }
        }
    }
}

/// Builds packet `m.sent` of the message in flight and advances.
fn build(
    e: &mut Eec,
    qps: &BTreeMap<u32, RdQp>,
    m: Msg,
    cx: &mut Ctx<'_>,
    buf: &mut [u8],
) -> Result<usize, WcStatus> {
    let pmtu = e.attr.path_mtu.bytes() as u64;
    let k = m.sent;
    let p = psn::add(m.first_psn, k);
    let qp = qps.get(&m.qpn).ok_or(WcStatus::LocQpOpErr)?;
    let w = qp.sq.front().ok_or(WcStatus::LocQpOpErr)?;
    // PV-05 as UD: a Q_Key with its high bit set means the QP's own.
    let qkey = if w.dest.remote_qkey & 0x8000_0000 != 0 {
        qp.qkey
    } else {
        w.dest.remote_qkey
    };
    let deth = Some(DethRepr {
        qkey,
        src_qp: m.qpn,
    });
    let (op, n, ext, adv) = if m.resync {
        // OP-11, C9-15.a1: zero-length, RDETH and DETH only.
        let ext = ExtHeaders {
            deth,
            ..ExtHeaders::default()
        };
        (Opcode::RD_RESYNC, 0, ext, 1)
    } else if m.atomic {
        // OP-07: RDETH, DETH and AtomicETH (Table 38, 0b010).
        let ext = ExtHeaders {
            deth,
            atomic_eth: Some(AtomicEthRepr {
                va: w.wr.remote_addr,
                rkey: w.wr.rkey,
                swap_add: w.wr.swap_add,
                compare: w.wr.compare,
            }),
            ..ExtHeaders::default()
        };
        let op = if w.wr.opcode == WrOpcode::AtomicCmpSwap {
            Opcode::RD_COMPARE_SWAP
        } else {
            Opcode::RD_FETCH_ADD
        };
        (op, 0, ext, 1)
    } else if m.read {
        // One request for the rest of the READ (as RL-14 for RC).
        let done = u64::from(k) * pmtu;
        let ext = ExtHeaders {
            deth,
            reth: Some(RethRepr {
                va: w.wr.remote_addr.wrapping_add(done),
                rkey: w.wr.rkey,
                dma_len: (w.len - done.min(w.len)) as u32,
            }),
            ..ExtHeaders::default()
        };
        (Opcode::RD_RDMA_READ_REQUEST, 0, ext, m.npkts - k)
    } else {
        let offset = u64::from(k) * pmtu;
        let n = (w.len - offset.min(w.len)).min(pmtu) as usize;
        let op = data_opcode(w.wr.opcode, k == 0, k + 1 == m.npkts);
        let info = op.info();
        let mut ext = ExtHeaders {
            deth,
            ..ExtHeaders::default()
        };
        if info.has(ExtKind::Reth) {
            ext.reth = Some(RethRepr {
                va: w.wr.remote_addr,
                rkey: w.wr.rkey,
                dma_len: w.len as u32,
            });
        }
        if info.has(ExtKind::ImmDt) {
            ext.imm_dt = Some(w.wr.imm_or_inv);
        }
        (op, n, ext, 1)
    };
    let info = op.info();
    let last = k + adv >= m.npkts;
    let ack_req = last || (k + 1).is_multiple_of(ACK_REQ_EVERY);
    let mut pkt: PacketRepr<'_> = headers(cx.port, e, op, m.dest_qpn, p, ack_req, ext);
    pkt.transport.bth.solicited = !m.resync
        && w.wr.flags.contains(SendFlags::SOLICITED)
        && info.ends_message()
        && matches!(
            info.operation,
            Operation::Send | Operation::SendWithImmediate | Operation::RdmaWriteWithImmediate
        );
    let (mrs, mem, pd) = (&*cx.mrs, &*cx.mem, qp.init.pd);
    let offset = u64::from(k) * pmtu;
    let data = &w.wr.data;
    let len = emit(cx.port, e, &pkt, buf, n, |dst| match data {
        SendData::Inline(d) => {
            let at = offset as usize;
            let src = d.get(at..at + dst.len()).ok_or(WcStatus::LocLenErr)?;
            dst.copy_from_slice(src);
            Ok(())
        }
        SendData::Sges(s) => mrs.gather(mem, pd, s, offset, dst).map_err(local_status),
        SendData::Bind(_) | SendData::Reg(_) => Err(WcStatus::LocQpOpErr),
    })
    .map_err(|e| match e {
        EmitWithError::Fill(st) => st,
        EmitWithError::Emit(_) => WcStatus::LocQpOpErr,
    })?;
    if m.resync && k == 0 {
        cx.counters.rd.resyncs_sent += 1;
    }
    if k < m.hwm {
        cx.counters.rd.retransmits += 1;
    }
    let r = &mut e.req;
    if let Some(c) = r.cur.as_mut() {
        c.sent = k + adv;
        c.hwm = c.hwm.max(c.sent);
    }
    if r.deadline.is_none() {
        r.deadline = ack_timeout_ns(&e.attr).map(|t| cx.now.plus_ns(t));
    }
    Ok(len)
}

/// The message in flight (or its RESYNC) is done: the next may go.
fn finish(e: &mut Eec, qps: &mut BTreeMap<u32, RdQp>, m: Msg, fx: &mut Effects) {
    e.req.cur = None;
    e.req.deadline = None;
    if m.resync {
        return;
    }
    if let Some(qp) = qps.get_mut(&m.qpn) {
        super::complete_head(qp, WcStatus::Success, fx);
        e.req.finished = Some(m.qpn);
    }
}

/// Progress on the message: retries restart, so does the ACK timer.
fn progress(e: &mut Eec, now: Time) {
    let r = &mut e.req;
    r.retries = e.attr.retry_cnt;
    r.rnr_retries = e.attr.rnr_retry;
    r.deadline = ack_timeout_ns(&e.attr).map(|t| now.plus_ns(t));
    if let Some(c) = r.cur.as_mut() {
        c.gap_asked = false;
    }
}

/// The message failed at the responder or ran out of retries: its WQE
/// completes with `status` and the next message RESYNCs first (OP-11).
fn fail(e: &mut Eec, qps: &mut BTreeMap<u32, RdQp>, m: Msg, status: WcStatus, fx: &mut Effects) {
    e.req.cur = None;
    e.req.deadline = None;
    e.req.rnr_wait = false;
    e.req.resync_pending = true;
    if !m.resync {
        if let Some(qp) = qps.get_mut(&m.qpn) {
            fail_qp(qp, status, fx);
        }
    }
}

/// A response arrived for this EEC (it passed the EEC checks). Returns
/// whether the EEC may have a packet to send now.
pub(super) fn handle_response(
    e: &mut Eec,
    qps: &mut BTreeMap<u32, RdQp>,
    pkt: &PacketRepr<'_>,
    cx: &mut Ctx<'_>,
) -> bool {
    let bth = &pkt.transport.bth;
    // o9-23.2.1: a response for a QP that is not an RD QP here is dropped;
    // so is one that matches nothing in flight (a ghost, RL-09).
    let m = match e.req.cur {
        Some(m) if m.qpn == bth.dest_qp && qps.contains_key(&bth.dest_qp) => m,
        _ => {
            cx.counters.rd.unexpected_response += 1;
            return false;
        }
    };
    let off = psn::diff(bth.psn, m.first_psn);
    let in_flight = off >= m.una as i32 && off < m.npkts as i32;
    let info = bth.opcode.info();
    match info.operation {
        Operation::Acknowledge => {
            let Some(aeth) = pkt.transport.ext.aeth else {
                return false;
            };
            if !in_flight {
                // A duplicate ACK (off below) or a ghost: nothing to do.
                return false;
            }
            let off = off as u32;
            match aeth.syndrome {
                AethSyndrome::Ack { .. } if m.read || m.atomic => {
                    cx.counters.rd.unexpected_response += 1;
                    false
                }
                AethSyndrome::Ack { .. } => {
                    progress(e, cx.now);
                    if let Some(c) = e.req.cur.as_mut() {
                        c.una = off + 1;
                        c.sent = c.sent.max(c.una);
                    }
                    if off + 1 == m.npkts {
                        finish(e, qps, m, cx.fx);
                    }
                    true
                }
                AethSyndrome::RnrNak { .. } => {
                    // RL-11: wait, then send again from the NAKed packet.
                    if e.req.rnr_retries == 0 {
                        fail(e, qps, m, WcStatus::RnrRetryExcErr, cx.fx);
                        return true;
                    }
                    if e.req.rnr_retries != 7 {
                        e.req.rnr_retries -= 1;
                    }
                    let us = aeth.syndrome.rnr_timer_us().unwrap_or(10);
                    go_back(e, off);
                    e.req.rnr_wait = true;
                    e.req.deadline = Some(cx.now.plus_ns(u64::from(us) * 1000));
                    false
                }
                AethSyndrome::Nak(NakCode::PsnSequenceError) => {
                    // 9.7.5.1.1: everything before the NAKed PSN arrived.
                    if e.req.retries == 0 {
                        fail(e, qps, m, WcStatus::RetryExcErr, cx.fx);
                        return true;
                    }
                    e.req.retries -= 1;
                    go_back(e, off);
                    true
                }
                AethSyndrome::Nak(code) => {
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        NakCode::InvalidRdRequest | NakCode::PsnSequenceError => {
                            WcStatus::RemInvRdReqErr
                        }
                    };
                    fail(e, qps, m, status, cx.fx);
                    true
                }
            }
        }
        Operation::RdmaReadResponse if m.read => on_read_response(e, qps, m, pkt, off, cx),
        Operation::AtomicAcknowledge if m.atomic && in_flight => {
            // OP-07: the original value lands in the WQE's buffer in host
            // order, as on RC.
            let orig = pkt
                .transport
                .ext
                .atomic_ack_eth
                .map_or(0, |a| a.orig_remote_data);
            let Some(qp) = qps.get(&m.qpn) else {
                return false;
            };
            let placed = match qp.sq.front().map(|w| &w.wr.data) {
                Some(SendData::Sges(sges)) => {
                    cx.mrs
                        .scatter(cx.mem, qp.init.pd, sges, 0, &orig.to_le_bytes())
                }
                _ => Ok(()),
            };
            match placed {
                Ok(()) => finish(e, qps, m, cx.fx),
                Err(err) => fail(e, qps, m, local_status(err), cx.fx),
            }
            true
        }
        _ => {
            cx.counters.rd.unexpected_response += 1;
            false
        }
    }
}

/// Resend from packet `off` of the message in flight.
fn go_back(e: &mut Eec, off: u32) {
    if let Some(c) = e.req.cur.as_mut() {
        c.una = off;
        c.sent = off;
    }
}

/// A READ response: placed when it is the next one expected; a gap asks again
/// for the rest (as RL-14), once until progress.
fn on_read_response(
    e: &mut Eec,
    qps: &mut BTreeMap<u32, RdQp>,
    m: Msg,
    pkt: &PacketRepr<'_>,
    off: i32,
    cx: &mut Ctx<'_>,
) -> bool {
    if off < m.una as i32 || off >= m.npkts as i32 {
        return false; // duplicate or ghost
    }
    if off > m.una as i32 {
        if m.gap_asked {
            return false;
        }
        if let Some(c) = e.req.cur.as_mut() {
            c.gap_asked = true;
            c.sent = c.una;
        }
        return true;
    }
    let pmtu = e.attr.path_mtu.bytes() as u64;
    let Some(w) = qps.get(&m.qpn).and_then(|q| q.sq.front()) else {
        return false;
    };
    let pd = qps.get(&m.qpn).map_or(0, |q| q.init.pd);
    let at = u64::from(m.una) * pmtu;
    let want = (w.len - at.min(w.len)).min(pmtu) as usize;
    let info = pkt.transport.bth.opcode.info();
    let last = m.una + 1 == m.npkts;
    // A re-request for the rest (RL-14) starts its responses at First (or
    // Only) anywhere in the READ: the position says only where they end.
    let pos_ok = match info.position {
        Position::First | Position::Middle => !last,
        Position::Last | Position::Only => last,
    };
    let payload = pkt.transport.payload;
    if !pos_ok || payload.len() != want {
        fail(e, qps, m, WcStatus::BadRespErr, cx.fx);
        return true;
    }
    let sges = match &w.wr.data {
        SendData::Sges(s) => s.clone(),
        _ => Vec::new(),
    };
    if let Err(err) = cx.mrs.scatter(cx.mem, pd, &sges, at, payload) {
        fail(e, qps, m, local_status(err), cx.fx);
        return true;
    }
    progress(e, cx.now);
    if let Some(c) = e.req.cur.as_mut() {
        c.una += 1;
    }
    if last {
        finish(e, qps, m, cx.fx);
        return true;
    }
    false
}

/// What an EEC's timer did.
pub(super) enum Timeout {
    Nothing,
    /// Send again from the oldest unacknowledged packet.
    Resend,
    /// Out of retries: the message failed; the EEC goes to Error (seed 001).
    Exhausted,
}

/// The EEC's deadline passed: an RNR wait ended, or the ACK timer fired
/// (RL-10: go back to the oldest unacknowledged packet, `retry_cnt` times).
pub(super) fn on_timeout(
    e: &mut Eec,
    qps: &mut BTreeMap<u32, RdQp>,
    now: Time,
    c: &mut RdCounters,
    fx: &mut Effects,
) -> Timeout {
    e.req.deadline = None;
    if std::mem::take(&mut e.req.rnr_wait) {
        return Timeout::Resend;
    }
    let Some(m) = e.req.cur else {
        return Timeout::Nothing;
    };
    c.timeouts += 1;
    if e.req.retries == 0 {
        fail(e, qps, m, WcStatus::RetryExcErr, fx);
        return Timeout::Exhausted;
    }
    e.req.retries -= 1;
    if let Some(c) = e.req.cur.as_mut() {
        c.sent = c.una;
        c.gap_asked = false;
    }
    let _ = now;
    Timeout::Resend
}
