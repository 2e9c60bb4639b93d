//! The receive side of an EE context (AD-11, PV-09, OP-11): the expected PSN,
//! the message in progress, and the responses in PSN order (o9-19). The
//! checks after the EEC's own (`check_eec`), in the spec's order: RESYNC
//! (accepted whatever the PSN, seed 000 "RESYNC" item 3), the PSN (9.7.5.1:
//! duplicates answered again, a gap NAKed once), the destination QP
//! (o9-23.2.1), its RDD against the EEC's (PV-09), the Q_Key (C9-50), the
//! opcode sequence and lengths; then execution.

use std::collections::{BTreeMap, VecDeque};

use super::io::{emit, headers};
use super::{Eec, RdQp, RESP_CAP};
use crate::engine::access::{self, local_status};
use crate::engine::Ctx;
use crate::mr::RemoteAccess;
use crate::psn;
use crate::verbs::{Access, Completion, QpState, RecvWr, WcFlags, WcOpcode, WcStatus};
use crate::wire::ext::{AethRepr, AethSyndrome, AtomicAckEthRepr, NakCode, CREDIT_CODE_INVALID};
use crate::wire::opcode::Opcode;
use crate::wire::opcode::{Operation, Position};
use crate::wire::{ExtHeaders, PacketRepr};

/// The EEC's receive state.
#[derive(Debug, Default)]
pub(crate) struct EecResp {
    /// Expected PSN (9.7.5.1).
    pub epsn: u32,
    cur: Option<InMsg>,
    /// A sequence NAK was sent for the current gap (9.7.5.1.1: only one).
    nak_sent: bool,
    out: VecDeque<Out>,
    msn: u32,
    /// The PSN of the last RESYNC applied: a copy of it (its ACK was lost)
    /// is answered again without moving the expected PSN back.
    last_resync: Option<u32>,
    /// The last atomic executed: its PSN and original value, for a duplicate
    /// (OP-07; seed 000: for RD the saved state is the EE context's; one
    /// message at a time makes one entry enough).
    last_atomic: Option<(u32, u64)>,
}

/// A multi-packet message in progress.
#[derive(Debug)]
enum InMsg {
    Send {
        qpn: u32,
        src_qp: u32,
        wqe: RecvWr,
        placed: u64,
    },
    Write {
        qpn: u32,
        src_qp: u32,
        va: u64,
        rkey: u32,
        dma_len: u64,
        placed: u64,
    },
}

/// A response waiting to be sent.
#[derive(Debug)]
enum Out {
    Aeth {
        dest_qp: u32,
        psn: u32,
        syndrome: AethSyndrome,
    },
    /// An atomic's ACK with the original value (OP-07).
    AtomicAck { dest_qp: u32, psn: u32, orig: u64 },
    Read {
        dest_qp: u32,
        qpn: u32,
        pd: u32,
        psn: u32,
        va: u64,
        rkey: u32,
        len: u64,
        k: u32,
        npkts: u32,
    },
}

impl EecResp {
    pub fn new(rq_psn: u32) -> EecResp {
        EecResp {
            epsn: rq_psn,
            ..EecResp::default()
        }
    }

    /// The local QP of the message in progress.
    pub fn cur_qpn(&self) -> Option<u32> {
        match &self.cur {
            Some(InMsg::Send { qpn, .. } | InMsg::Write { qpn, .. }) => Some(*qpn),
            None => None,
        }
    }

    /// Drops the message in progress (RESYNC, OP-11; the EEC going down): a
    /// SEND's receive WQE goes back to the front of its QP's queue, unused.
    pub fn abort(&mut self, qps: &mut BTreeMap<u32, RdQp>) {
        if let Some(InMsg::Send { qpn, wqe, .. }) = self.cur.take() {
            if let Some(qp) = qps.get_mut(&qpn) {
                qp.rq.push_front(wqe);
            }
        }
    }

    /// Drops the message in progress if it is for QP `qpn` (which leaves
    /// RTS/RTR or goes away), its receive WQE back in that QP's queue.
    pub fn forget(&mut self, qpn: u32, qps: &mut BTreeMap<u32, RdQp>) {
        if self.cur_qpn() == Some(qpn) {
            self.abort(qps);
        }
    }

    fn queue(&mut self, dest_qp: u32, psn: u32, syndrome: AethSyndrome) {
        // Consecutive ACKs to one QP coalesce into the latest (9.7.5.1.2).
        if let (
            AethSyndrome::Ack { .. },
            Some(Out::Aeth {
                dest_qp: d,
                psn: p,
                syndrome: AethSyndrome::Ack { .. },
            }),
        ) = (syndrome, self.out.back_mut())
        {
            if *d == dest_qp {
                *p = psn;
                return;
            }
        }
        self.out.push_back(Out::Aeth {
            dest_qp,
            psn,
            syndrome,
        });
    }
}

const ACK: AethSyndrome = AethSyndrome::Ack {
    credit_code: CREDIT_CODE_INVALID,
};

fn nak(e: &mut Eec, cx: &mut Ctx<'_>, src: u32, p: u32, code: NakCode) {
    cx.counters.rd.naks_sent += 1;
    e.resp.queue(src, p, AethSyndrome::Nak(code));
}

/// A request arrived for this EEC (it passed the EEC checks). Returns whether
/// a response was queued.
pub(super) fn handle_request(
    e: &mut Eec,
    qps: &mut BTreeMap<u32, RdQp>,
    pkt: &PacketRepr<'_>,
    cx: &mut Ctx<'_>,
) -> bool {
    let t = &pkt.transport;
    let bth = &t.bth;
    let info = bth.opcode.info();
    let p = bth.psn;
    let Some(deth) = t.ext.deth else {
        return false; // every RD request has a DETH (Table 38)
    };
    let src = deth.src_qp;
    if e.resp.out.len() >= RESP_CAP {
        cx.counters.rd.response_queue_full += 1;
        return true;
    }
    if info.operation == Operation::Resync {
        if e.resp.last_resync == Some(p) && psn::diff(p, e.resp.epsn) < 0 {
            // A copy of the RESYNC applied last (its ACK was lost, or the
            // fabric duplicated it): ACK it again, move nothing back.
            cx.counters.rd.duplicates += 1;
            cx.counters.rd.acks_sent += 1;
            e.resp.queue(src, p, ACK);
            return true;
        }
        // OP-11: the expected PSN becomes the requester's, whatever it was,
        // and a message in progress is dropped; RESYNC takes no WQE.
        e.resp.last_resync = Some(p);
        e.resp.abort(qps);
        e.resp.epsn = psn::add(p, 1);
        e.resp.nak_sent = false;
        cx.counters.rd.resyncs_received += 1;
        cx.counters.rd.acks_sent += 1;
        e.resp.queue(src, p, ACK);
        return true;
    }
    let d = psn::diff(p, e.resp.epsn);
    if d < 0 {
        return duplicate(e, qps, pkt, cx);
    }
    if d > 0 {
        // 9.7.5.1.1: one sequence NAK per gap, with the expected PSN.
        if e.resp.nak_sent {
            cx.counters.rd.out_of_sequence += 1;
            return false;
        }
        e.resp.nak_sent = true;
        let epsn = e.resp.epsn;
        nak(e, cx, src, epsn, NakCode::PsnSequenceError);
        return true;
    }
    // o9-23.2.1: the EEC is valid; the destination QP must be an RD QP that
    // receives. PV-09: in the EEC's RDD. C9-50: the Q_Key. Each is a NAK
    // Invalid RD Request with the EEC's PSN unchanged.
    let qp = match qps.get_mut(&bth.dest_qp) {
        Some(q) if matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqe) => q,
        _ => {
            cx.counters.rd.bad_dest_qp += 1;
            nak(e, cx, src, p, NakCode::InvalidRdRequest);
            return true;
        }
    };
    if qp.init.rdd != e.rdd {
        cx.counters.rd.rdd_mismatch += 1;
        nak(e, cx, src, p, NakCode::InvalidRdRequest);
        return true;
    }
    if deth.qkey != qp.qkey {
        cx.counters.rd.bad_qkey += 1;
        nak(e, cx, src, p, NakCode::InvalidRdRequest);
        return true;
    }
    // 9.7.5.1.2 opcode sequence: a message in progress continues with its
    // own QP's middle or last packets; otherwise a packet starts one.
    let seq_ok = match &e.resp.cur {
        None => info.starts_message(),
        Some(InMsg::Send { qpn, src_qp, .. }) => {
            !info.starts_message()
                && *qpn == qp.qpn
                && *src_qp == src
                && matches!(
                    info.operation,
                    Operation::Send | Operation::SendWithImmediate
                )
        }
        Some(InMsg::Write { qpn, src_qp, .. }) => {
            !info.starts_message()
                && *qpn == qp.qpn
                && *src_qp == src
                && matches!(
                    info.operation,
                    Operation::RdmaWrite | Operation::RdmaWriteWithImmediate
                )
        }
    };
    // C9-11: first and middle packets are a full PMTU, last and only at most.
    let pmtu = e.attr.path_mtu.bytes();
    let len = t.payload.len();
    let len_ok = match info.position {
        Position::First | Position::Middle => len == pmtu,
        Position::Last => len > 0 && len <= pmtu,
        Position::Only => len <= pmtu,
    };
    if !seq_ok || !len_ok {
        // The message in progress ends unexecuted; a SEND's receive WQE goes
        // back to its QP's queue, unused, as a RESYNC leaves it (issue 25:
        // dropped, it was a guest buffer lost with no completion).
        e.resp.abort(qps);
        nak(e, cx, src, p, NakCode::InvalidRequest);
        return true;
    }
    match info.operation {
        Operation::Send | Operation::SendWithImmediate => on_send(e, qp, pkt, cx),
        Operation::RdmaWrite | Operation::RdmaWriteWithImmediate => on_write(e, qp, pkt, cx),
        Operation::RdmaReadRequest => on_read(e, qp, pkt, cx),
        Operation::CompareSwap | Operation::FetchAdd => on_atomic(e, qp, pkt, cx),
        _ => {
            // Not an RD operation here (module doc).
            nak(e, cx, src, p, NakCode::InvalidRequest);
            true
        }
    }
}

/// A request below the expected PSN (9.7.5.1.2): SEND and WRITE are ACKed
/// again with the latest PSN; a READ is executed again (seed 004 "duplicate
/// RDMA READ": re-read from memory); RESYNC was handled before.
fn duplicate(
    e: &mut Eec,
    qps: &mut BTreeMap<u32, RdQp>,
    pkt: &PacketRepr<'_>,
    cx: &mut Ctx<'_>,
) -> bool {
    cx.counters.rd.duplicates += 1;
    let t = &pkt.transport;
    let src = t.ext.deth.map_or(0, |d| d.src_qp);
    if t.bth.opcode.info().operation == Operation::RdmaReadRequest {
        return match qps.get_mut(&t.bth.dest_qp) {
            Some(qp) if qp.init.rdd == e.rdd => on_read(e, qp, pkt, cx),
            _ => false,
        };
    }
    if matches!(
        t.bth.opcode.info().operation,
        Operation::CompareSwap | Operation::FetchAdd
    ) {
        // OP-07: never executed twice; the saved result is sent again when
        // the PSN is the saved one's, else the duplicate is dropped.
        return match e.resp.last_atomic {
            Some((psn, orig)) if psn == t.bth.psn => {
                e.resp.out.push_back(Out::AtomicAck {
                    dest_qp: src,
                    psn,
                    orig,
                });
                true
            }
            _ => false,
        };
    }
    let last = psn::add(e.resp.epsn, psn::PSN_MASK);
    cx.counters.rd.acks_sent += 1;
    e.resp.queue(src, last, ACK);
    true
}

/// The packet was executed: the expected PSN moves on and, when asked or at
/// the message's end, an ACK goes back.
fn accepted(e: &mut Eec, cx: &mut Ctx<'_>, pkt: &PacketRepr<'_>, src: u32) -> bool {
    let bth = &pkt.transport.bth;
    e.resp.epsn = psn::add(bth.psn, 1);
    e.resp.nak_sent = false;
    if bth.ack_req || bth.opcode.info().ends_message() {
        cx.counters.rd.acks_sent += 1;
        e.resp.queue(src, bth.psn, ACK);
        return true;
    }
    false
}

fn rnr(e: &mut Eec, cx: &mut Ctx<'_>, src: u32, p: u32) -> bool {
    cx.counters.rd.naks_sent += 1;
    let timer_code = e.attr.min_rnr_timer & 0x1f;
    e.resp.queue(src, p, AethSyndrome::RnrNak { timer_code });
    true
}

fn recv_completion(
    e: &Eec,
    qp: &RdQp,
    pkt: &PacketRepr<'_>,
    wqe: &RecvWr,
    src: u32,
    op: WcOpcode,
    byte_len: u64,
) -> Completion {
    let mut c = Completion {
        byte_len: byte_len as u32,
        src_qp: src,
        pkey_index: e.attr.pkey_index,
        slid: pkt.lrh.slid,
        sl: pkt.lrh.sl,
        solicited: pkt.transport.bth.solicited,
        ..Completion::new(wqe.wr_id, WcStatus::Success, op, qp.qpn)
    };
    if let Some(imm) = pkt.transport.ext.imm_dt {
        c.imm_data = imm;
        c.flags = WcFlags::WITH_IMM;
    }
    c
}

fn on_send(e: &mut Eec, qp: &mut RdQp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let info = t.bth.opcode.info();
    let p = t.bth.psn;
    let src = t.ext.deth.map_or(0, |d| d.src_qp);
    if info.starts_message() {
        let Some(wqe) = qp.rq.pop_front() else {
            return rnr(e, cx, src, p); // RL-11: ePSN unchanged
        };
        e.resp.cur = Some(InMsg::Send {
            qpn: qp.qpn,
            src_qp: src,
            wqe,
            placed: 0,
        });
    }
    let Some(InMsg::Send { wqe, placed, .. }) = &mut e.resp.cur else {
        return false;
    };
    if let Err(err) = cx
        .mrs
        .scatter(cx.mem, qp.init.pd, &wqe.sges, *placed, t.payload)
    {
        // MP-05: the receive WQE completes in error; the requester is told.
        let status = local_status(err);
        if let Some(InMsg::Send { wqe, placed, .. }) = e.resp.cur.take() {
            let mut c = recv_completion(e, qp, pkt, &wqe, src, WcOpcode::Recv, placed);
            c.status = status;
            c.flags = WcFlags(0);
            cx.fx.completions.push((qp.init.recv_cq, c));
        }
        let code = if status == WcStatus::LocLenErr {
            NakCode::InvalidRequest
        } else {
            NakCode::RemoteOperationalError
        };
        nak(e, cx, src, p, code);
        return true;
    }
    *placed += t.payload.len() as u64;
    if info.ends_message() {
        if let Some(InMsg::Send { wqe, placed, .. }) = e.resp.cur.take() {
            let c = recv_completion(e, qp, pkt, &wqe, src, WcOpcode::Recv, placed);
            cx.fx.completions.push((qp.init.recv_cq, c));
        }
    }
    accepted(e, cx, pkt, src)
}

fn on_write(e: &mut Eec, qp: &mut RdQp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let info = t.bth.opcode.info();
    let p = t.bth.psn;
    let src = t.ext.deth.map_or(0, |d| d.src_qp);
    if !qp.access.contains(Access::REMOTE_WRITE) {
        nak(e, cx, src, p, NakCode::InvalidRequest); // MP-04
        return true;
    }
    if info.starts_message() {
        let Some(reth) = t.ext.reth else {
            return false;
        };
        let dma_len = u64::from(reth.dma_len);
        if dma_len > 1 << 31 {
            nak(e, cx, src, p, NakCode::InvalidRequest); // C9-9
            return true;
        }
        if dma_len > 0 {
            let r = access::remote_check(
                cx.mrs,
                qp.init.pd,
                qp.qpn,
                reth.rkey,
                reth.va,
                dma_len,
                RemoteAccess::Write,
            );
            if let Err(err) = r {
                nak(e, cx, src, p, err.nak());
                return true;
            }
        }
        e.resp.cur = Some(InMsg::Write {
            qpn: qp.qpn,
            src_qp: src,
            va: reth.va,
            rkey: reth.rkey,
            dma_len,
            placed: 0,
        });
    }
    let Some(InMsg::Write {
        va,
        rkey,
        dma_len,
        placed,
        ..
    }) = e.resp.cur
    else {
        return false;
    };
    let n = t.payload.len() as u64;
    let ends = info.ends_message();
    if placed + n > dma_len || (ends && placed + n != dma_len) {
        e.resp.cur = None;
        nak(e, cx, src, p, NakCode::InvalidRequest);
        return true;
    }
    let with_imm = info.operation == Operation::RdmaWriteWithImmediate;
    if with_imm && ends && qp.rq.is_empty() {
        return rnr(e, cx, src, p); // RL-11: nothing written yet
    }
    if n > 0 {
        let r = access::remote_write(
            cx.mrs,
            cx.mem,
            qp.init.pd,
            qp.qpn,
            rkey,
            va.wrapping_add(placed),
            t.payload.into(),
        );
        if let Err(err) = r {
            e.resp.cur = None;
            nak(e, cx, src, p, err.nak());
            return true;
        }
    }
    if let Some(InMsg::Write { placed, .. }) = &mut e.resp.cur {
        *placed += n;
    }
    if ends {
        e.resp.cur = None;
        if with_imm {
            if let Some(wqe) = qp.rq.pop_front() {
                let c = recv_completion(e, qp, pkt, &wqe, src, WcOpcode::RecvRdmaWithImm, dma_len);
                cx.fx.completions.push((qp.init.recv_cq, c));
            }
        }
    }
    accepted(e, cx, pkt, src)
}

/// An ATOMIC request (OP-07): 8-byte aligned, on an MR with remote atomic
/// access, executed once; its result is kept for a duplicate.
fn on_atomic(e: &mut Eec, qp: &mut RdQp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let src = t.ext.deth.map_or(0, |d| d.src_qp);
    let Some(a) = t.ext.atomic_eth else {
        return false;
    };
    if !qp.access.contains(Access::REMOTE_ATOMIC) {
        nak(e, cx, src, p, NakCode::InvalidRequest); // MP-04
        return true;
    }
    let cmp_swap = t.bth.opcode.info().operation == Operation::CompareSwap;
    let r = access::remote_atomic(
        cx.mrs, cx.mem, qp.init.pd, qp.qpn, a.rkey, a.va, cmp_swap, a.compare, a.swap_add,
    );
    match r {
        Ok(orig) => {
            e.resp.last_atomic = Some((p, orig));
            e.resp.out.push_back(Out::AtomicAck {
                dest_qp: src,
                psn: p,
                orig,
            });
            e.resp.epsn = psn::add(p, 1);
            e.resp.nak_sent = false;
        }
        Err(err) => nak(e, cx, src, p, err.nak()), // misaligned: Invalid Request
    }
    true
}

/// An RDMA READ request (new, or a duplicate executed again): checked whole,
/// then answered a packet at a time from `poll_transmit`.
fn on_read(e: &mut Eec, qp: &mut RdQp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    let src = t.ext.deth.map_or(0, |d| d.src_qp);
    let fresh = p == e.resp.epsn;
    let Some(reth) = t.ext.reth else {
        return false;
    };
    let len = u64::from(reth.dma_len);
    let refuse = |e: &mut Eec, cx: &mut Ctx<'_>, code: NakCode| {
        // A duplicate that fails is dropped silently (seed 004).
        if fresh {
            nak(e, cx, src, p, code);
        }
        fresh
    };
    if !qp.access.contains(Access::REMOTE_READ) || len > 1 << 31 {
        return refuse(e, cx, NakCode::InvalidRequest);
    }
    if len > 0 {
        let r = access::remote_check(
            cx.mrs,
            qp.init.pd,
            qp.qpn,
            reth.rkey,
            reth.va,
            len,
            RemoteAccess::Read,
        );
        if let Err(err) = r {
            return refuse(e, cx, err.nak());
        }
    }
    let npkts = psn::read_packets(len, e.attr.path_mtu.bytes());
    e.resp.out.push_back(Out::Read {
        dest_qp: src,
        qpn: qp.qpn,
        pd: qp.init.pd,
        psn: p,
        va: reth.va,
        rkey: reth.rkey,
        len,
        k: 0,
        npkts,
    });
    if fresh {
        e.resp.epsn = psn::add(p, npkts);
        e.resp.nak_sent = false;
    }
    true
}

/// The next response of the EEC, in the order queued (o9-19).
pub(super) fn poll_transmit(e: &mut Eec, cx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
    loop {
        let item = e.resp.out.front_mut()?;
        match item {
            Out::Aeth {
                dest_qp,
                psn,
                syndrome,
            } => {
                let (dest_qp, psn, syndrome) = (*dest_qp, *psn, *syndrome);
                e.resp.out.pop_front();
                e.resp.msn = (e.resp.msn + 1) & psn::PSN_MASK;
                let ext = ExtHeaders {
                    aeth: Some(AethRepr {
                        syndrome,
                        msn: e.resp.msn,
                    }),
                    ..ExtHeaders::default()
                };
                let pkt = headers(cx.port, e, Opcode::RD_ACKNOWLEDGE, dest_qp, psn, false, ext);
                let r = emit(cx.port, e, &pkt, buf, 0, |_| Ok::<(), ()>(()));
                if let Ok(len) = r {
                    return Some(len);
                }
            }
            Out::AtomicAck { dest_qp, psn, orig } => {
                let (dest_qp, psn, orig) = (*dest_qp, *psn, *orig);
                e.resp.out.pop_front();
                e.resp.msn = (e.resp.msn + 1) & psn::PSN_MASK;
                let ext = ExtHeaders {
                    aeth: Some(AethRepr {
                        syndrome: ACK,
                        msn: e.resp.msn,
                    }),
                    atomic_ack_eth: Some(AtomicAckEthRepr {
                        orig_remote_data: orig,
                    }),
                    ..ExtHeaders::default()
                };
                let op = Opcode::RD_ATOMIC_ACKNOWLEDGE;
                let pkt = headers(cx.port, e, op, dest_qp, psn, false, ext);
                if let Ok(len) = emit(cx.port, e, &pkt, buf, 0, |_| Ok::<(), ()>(())) {
                    return Some(len);
                }
            }
            Out::Read {
                dest_qp,
                qpn,
                pd,
                psn: first,
                va,
                rkey,
                len,
                k,
                npkts,
            } => {
                let pmtu = e.attr.path_mtu.bytes() as u64;
                let (kk, n) = (*k, *npkts);
                let op = match (kk == 0, kk + 1 == n) {
                    (true, true) => Opcode::RD_RDMA_READ_RESPONSE_ONLY,
                    (true, false) => Opcode::RD_RDMA_READ_RESPONSE_FIRST,
                    (false, false) => Opcode::RD_RDMA_READ_RESPONSE_MIDDLE,
                    (false, true) => Opcode::RD_RDMA_READ_RESPONSE_LAST,
                };
                let at = u64::from(kk) * pmtu;
                let plen = (*len - at.min(*len)).min(pmtu) as usize;
                let (dest_qp, qpn, pd, rkey, va) = (*dest_qp, *qpn, *pd, *rkey, *va);
                let p = psn::add(*first, kk);
                let mut ext = ExtHeaders::default();
                if op.info().has(crate::wire::ExtKind::Aeth) {
                    e.resp.msn = (e.resp.msn + 1) & psn::PSN_MASK;
                    ext.aeth = Some(AethRepr {
                        syndrome: ACK,
                        msn: e.resp.msn,
                    });
                }
                let pkt = headers(cx.port, e, op, dest_qp, p, false, ext);
                let (mrs, mem) = (&*cx.mrs, &*cx.mem);
                let r = emit(cx.port, e, &pkt, buf, plen, |dst| {
                    access::remote_read(mrs, mem, pd, qpn, rkey, va.wrapping_add(at), dst.into())
                });
                match (r, e.resp.out.front_mut()) {
                    (Ok(len), Some(Out::Read { k, .. })) => {
                        *k += 1;
                        if *k >= n {
                            e.resp.out.pop_front();
                        }
                        return Some(len);
                    }
                    _ => {
                        // Memory went away under the READ (the MR was
                        // deregistered): the stream stops; the requester's
                        // timer and retry end it (seed 004).
                        e.resp.out.pop_front();
                    }
                }
            }
        }
    }
}
