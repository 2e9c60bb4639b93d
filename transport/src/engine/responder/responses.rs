//! The responder's responses (IBA 9.7.5, C9-27; OR-02, RL-04..RL-08): the ACKs,
//! NAKs, READ responses and atomic ACKs queued in PSN order and the packets built
//! from them, and the READ/ATOMIC resources saved for a duplicate request to
//! replay (9.7.5.1.1).

use crate::engine::access::{self, RemoteErr};
use crate::engine::credits;
use crate::engine::link;
use crate::engine::{to_error, Ctx, NakReason, Qp, RxDrop};
use crate::psn;
use crate::verbs::{Event, QpType};
use crate::wire::ext::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, ExtHeaders, NakCode, CREDIT_CODE_INVALID,
};
use crate::wire::opcode::{Opcode, Operation};
use crate::wire::packet::EmitWithError;
use crate::wire::{BthRepr, GrhRepr, LrhRepr, PacketRepr, TransportRepr};

/// A saved READ or ATOMIC (RL-07): what a duplicate must replay.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resource {
    pub(super) psn: u32,
    pub(super) npkts: u32,
    pub(super) kind: ResKind,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum ResKind {
    Read {
        va: u64,
        rkey: u32,
        len: u64,
    },
    Atomic {
        orig: u64,
    },
    /// FLUSH or ATOMIC WRITE (IBA 1.5 MPE): executed once; a duplicate gets
    /// the zero-length RDMA READ Response Only again.
    Placement,
}

/// A response waiting to be sent, in PSN order (C9-27, OR-02).
#[derive(Debug, Clone, Copy)]
pub(super) enum RespItem {
    Aeth {
        psn: u32,
        syndrome: AethSyndrome,
        /// The answer to a duplicate request (RL-04): not merged with the ACK
        /// of a new one, so that a requester whose probe and original came
        /// in one batch still gets two answers and knows the probe was
        /// spurious (`engine::recovery`, issue 14).
        dup: bool,
    },
    Read {
        psn: u32,
        va: u64,
        rkey: u32,
        len: u64,
        sent: u64,
        /// The response of a new request (not a duplicate's replay): it holds
        /// one of the requester's max_dest_rd_atomic outstanding slots until
        /// its last packet is built (see [`rd_atomic_slot_free`]).
        fresh: bool,
        /// The PD the data is read under, fixed when the request is taken:
        /// an XRC TGT QP's is its request's XRC SRQ's, which a later request
        /// may change before this response is built (SR-02).
        pd: u32,
    },
    AtomicAck {
        psn: u32,
        orig: u64,
        fresh: bool,
    },
}

/// Responses a QP may hold unsent: every READ/ATOMIC slot (at most
/// max_dest_rd_atomic fresh ones, and one replay per saved resource) with an
/// ACK after each, plus room for ACKs and NAKs. A requester that keeps to the
/// negotiated depth never reaches it (its new requests wait for responses, its
/// SEND/WRITE ACKs coalesce, RL-08); a peer that floods duplicates does, and
/// its further requests are dropped (`RxDrop::ResponseQueueFull`) instead of
/// growing the queue without end.
pub(super) fn out_cap(qp: &Qp) -> usize {
    out_cap_for(qp.attr.max_dest_rd_atomic)
}

/// [`out_cap`] of a QP whose max_dest_rd_atomic is `depth`.
pub(super) fn out_cap_for(depth: u8) -> usize {
    4 * usize::from(depth) + 32
}

/// Whether a new READ, ATOMIC, FLUSH or ATOMIC WRITE may be taken: the
/// responses of fewer than max_dest_rd_atomic new ones are still unsent. The
/// requester must keep its unacknowledged READ/ATOMIC requests within the
/// responder resources negotiated per QP at connection (IBA 9.4.4, 9.4.5;
/// seed 000, responder resources: "the requester is responsible for ensuring
/// that all unacknowledged ATOMIC and RDMA READ operations together do not
/// exceed the receiver's resources"). One that sends more while the earlier
/// responses are not even out asks for what was not negotiated: refused
/// unexecuted with NAK Invalid Request, as Linux rxe does
/// (RESPST_ERR_TOO_MANY_RDMA_ATM_REQ). Without this check the saved FIFO
/// (RL-07) evicted a resource whose response was still queued and the queue
/// of responses grew with every request.
pub(super) fn rd_atomic_slot_free(qp: &Qp) -> bool {
    let depth = usize::from(qp.attr.max_dest_rd_atomic);
    let busy = qp
        .resp
        .out
        .iter()
        .filter(|it| {
            matches!(
                it,
                RespItem::Read { fresh: true, .. } | RespItem::AtomicAck { fresh: true, .. }
            )
        })
        .count();
    busy < depth
}

/// Queues an ACK or NAK; consecutive ACKs coalesce into the newest, or the
/// two newest once the QP saw loss (RL-08).
pub(super) fn queue_aeth(qp: &mut Qp, psn: u32, syndrome: AethSyndrome) {
    queue_aeth_as(qp, psn, syndrome, false);
}

/// [`queue_aeth`]; `dup` for the answer to a duplicate, which coalesces only
/// with another duplicate's (a flood of duplicates still queues one ACK).
fn queue_aeth_as(qp: &mut Qp, psn: u32, syndrome: AethSyndrome, dup: bool) {
    // RL-11: an RNR NAK for the PSN an unsent RNR NAK already names says
    // nothing new (a peer resending the request faster than the NAK leaves
    // would queue one per copy): coalesced into the one queued.
    if let AethSyndrome::RnrNak { .. } = syndrome {
        let queued = qp.resp.out.iter().any(|it| {
            matches!(it, RespItem::Aeth { psn: q, syndrome: AethSyndrome::RnrNak { .. }, .. } if *q == psn)
        });
        if queued {
            return;
        }
    }
    if let AethSyndrome::Ack { .. } = syndrome {
        // Coalesced into the newest; on a QP that saw loss (a sequence NAK
        // sent, a duplicate answered) into the two newest, kept as two
        // packets (vhca policy, issue 14; RL-08 allows coalescing, it does
        // not require it): one lost leaves the other, so a lost ACK after a
        // batch of requests does not hold the requester's window until a
        // probe. A lossless QP keeps one ACK per batch (issue 12). A
        // duplicate's answer coalesces into the one queued (a flood of
        // duplicates queues one).
        qp.resp.lossy |= dup;
        let two = qp.resp.lossy && !dup;
        let n = qp.resp.out.len();
        let is_ack = |it: &RespItem| matches!(it, RespItem::Aeth { syndrome: AethSyndrome::Ack { .. }, dup: d, .. } if *d == dup);
        let last_is_ack = n >= 1 && is_ack(&qp.resp.out[n - 1]);
        if two && last_is_ack && n >= 2 && is_ack(&qp.resp.out[n - 2]) {
            qp.resp.out.remove(n - 2);
        } else if last_is_ack && !two {
            if let Some(RespItem::Aeth { psn: p, .. }) = qp.resp.out.back_mut() {
                *p = psn;
            }
            return;
        }
    }
    qp.resp.out.push_back(RespItem::Aeth { psn, syndrome, dup });
}

pub(super) fn ack(qp: &mut Qp, psn: u32) {
    // The credit count is set when the ACK is built (`poll_transmit`, RL-13).
    queue_aeth(
        qp,
        psn,
        AethSyndrome::Ack {
            credit_code: CREDIT_CODE_INVALID,
        },
    );
}

/// A receive WQE was posted: if the last credit count sent was zero, the last
/// ACK again with the new count, so that a requester held by credits goes on
/// (RL-13; seed 004 §2.6.2: a duplicate ACK to deliver credits). Once per zero
/// count sent. Returns whether an ACK was queued.
pub(crate) fn unsolicited_credit_ack(qp: &mut Qp) -> bool {
    if qp.resp.advertised != Some(0) {
        return false;
    }
    qp.resp.advertised = None;
    let last = psn::add(qp.resp.epsn, psn::PSN_MASK);
    ack(qp, last);
    true
}

/// NAKs `psn` with `code`; for RC errors other than a sequence error the QP goes to
/// Error after the NAK (class A/B/C errors of 9.9.2).
pub(super) fn nak(qp: &mut Qp, cx: &mut Ctx<'_>, psn: u32, code: NakCode, why: NakReason) {
    cx.counters.nak(why);
    queue_aeth(qp, psn, AethSyndrome::Nak(code));
    if code != NakCode::PsnSequenceError {
        // AE-01 (IBA 11.6.3.1): the responder's QP reports why it failed — an
        // invalid request, an access violation, or a catastrophic local error.
        let qpn = qp.qpn;
        cx.fx.events.push(match code {
            NakCode::RemoteAccessError => Event::QpAccessError { qpn },
            NakCode::RemoteOperationalError => Event::QpFatal { qpn },
            _ => Event::QpRequestError { qpn },
        });
        // The NAK itself must still go out: keep it, flush everything else.
        let out = std::mem::take(&mut qp.resp.out);
        to_error(qp, cx.fx);
        qp.resp.out = out;
    }
}

pub(super) fn remote_nak(e: RemoteErr) -> NakCode {
    e.nak()
}

pub(super) fn save_resource(qp: &mut Qp, r: Resource) -> bool {
    let depth = usize::from(qp.attr.max_dest_rd_atomic);
    if depth == 0 {
        return false;
    }
    // RL-07: a FIFO as deep as the negotiated limit; the oldest entry makes room
    // (the requester never has more than that many outstanding: a new request
    // reached here only if `rd_atomic_slot_free`, so the entry leaving has
    // had its response sent).
    while qp.resp.resources.len() >= depth {
        qp.resp.resources.pop_front();
    }
    qp.resp.resources.push_back(r);
    true
}

pub(super) fn zero_read_response(p: u32, fresh: bool) -> RespItem {
    RespItem::Read {
        psn: p,
        va: 0,
        rkey: 0,
        len: 0,
        sent: 0,
        fresh,
        pd: 0,
    }
}

/// A request in the duplicate region (9.7.5.1.1; RL-04..RL-06).
pub(super) fn duplicate(qp: &mut Qp, pkt: &PacketRepr<'_>, cx: &mut Ctx<'_>) -> bool {
    let t = &pkt.transport;
    let p = t.bth.psn;
    match t.bth.opcode.info().operation {
        Operation::RdmaReadRequest => {
            let Some(reth) = t.ext.reth else { return false };
            let pmtu = qp.attr.path_mtu.bytes() as u64;
            let found = qp.resp.resources.iter().find_map(|r| match r.kind {
                ResKind::Read { va, rkey, len }
                    if psn::diff(p, r.psn) >= 0 && psn::diff(p, psn::add(r.psn, r.npkts)) < 0 =>
                {
                    Some((r.psn, va, rkey, len))
                }
                _ => None,
            });
            let Some((first, va, rkey, len)) = found else {
                cx.counters.drop(RxDrop::UnmatchedDuplicate);
                return false;
            };
            // RL-05: the retried READ asks for a subset of the original, starting at
            // the response PSN it names.
            let skip = psn::diff(p, first) as u64 * pmtu;
            let (dva, dlen) = (reth.va, u64::from(reth.dma_len));
            if reth.rkey != rkey || dva != va.wrapping_add(skip) || skip + dlen > len {
                cx.counters.drop(RxDrop::UnmatchedDuplicate);
                return false;
            }
            // The same READ asked again while its answer is queued and not
            // begun (a fabric duplicate, or a retry that caught up with its
            // original): that answer, read from memory when it goes, is the
            // re-execution RL-05 asks for, in order (C9-27). Answering it
            // twice, or preempting the later READs queued behind it, would
            // only make the requester ask for those again (vhca policy,
            // issue 14).
            let queued = qp.resp.out.iter().any(|it| {
                matches!(it, RespItem::Read { psn: q, va: v, rkey: k, len: l, sent: 0, .. }
                    if *q == p && *v == dva && *k == rkey && *l == dlen)
            });
            if queued {
                cx.counters.reorder.dup_reads_queued += 1;
                return true;
            }
            // A newer duplicate preempts responses still queued for later PSNs
            // (RL-05). An ACK among them is sent again after the READ's responses,
            // never before them (C9-27), so the requester still gets it.
            // A READ stream is judged by its last PSN, not its first: one that
            // started before `p` but reaches it would resend, after this one, what
            // the requester asks again here; each retry would add a whole
            // remainder (seed 004 §3.3.2.2: stop responding to the original).
            let before = qp.resp.out.len();
            qp.resp.out.retain(|it| match it {
                RespItem::Read { psn: q, len, .. } => {
                    let n = psn::read_packets(*len, pmtu as usize);
                    psn::diff(psn::add(*q, n - 1), p) < 0
                }
                RespItem::AtomicAck { psn: q, .. } | RespItem::Aeth { psn: q, .. } => {
                    psn::diff(*q, p) < 0
                }
            });
            let preempted = qp.resp.out.len() != before;
            qp.resp.out.push_back(RespItem::Read {
                psn: p,
                va: dva,
                rkey,
                len: dlen,
                sent: 0,
                fresh: false,
                pd: qp.init.pd,
            });
            if preempted {
                let last = psn::add(qp.resp.epsn, psn::PSN_MASK);
                ack(qp, last);
            }
            true
        }
        Operation::CompareSwap | Operation::FetchAdd => {
            let saved = qp.resp.resources.iter().find_map(|r| match r.kind {
                ResKind::Atomic { orig } if r.psn == p => Some(orig),
                _ => None,
            });
            // RL-06: one replay queued per saved ATOMIC; more copies of the
            // duplicate while it waits add nothing (each used to queue one).
            let queued = |qp: &Qp| {
                qp.resp
                    .out
                    .iter()
                    .any(|it| matches!(it, RespItem::AtomicAck { psn: q, .. } if *q == p))
            };
            match saved {
                Some(_) if queued(qp) => true,
                Some(orig) => {
                    qp.resp.out.push_back(RespItem::AtomicAck {
                        psn: p,
                        orig,
                        fresh: false,
                    });
                    true
                }
                None => {
                    cx.counters.drop(RxDrop::UnmatchedDuplicate);
                    false
                }
            }
        }
        Operation::Flush | Operation::AtomicWrite => {
            // Executed once already: answer again, never store again.
            let saved = qp
                .resp
                .resources
                .iter()
                .any(|r| matches!(r.kind, ResKind::Placement) && r.psn == p);
            let queued = qp
                .resp
                .out
                .iter()
                .any(|it| matches!(it, RespItem::Read { psn: q, len: 0, .. } if *q == p));
            if saved && queued {
                true
            } else if saved {
                qp.resp.out.push_back(zero_read_response(p, false));
                true
            } else {
                cx.counters.drop(RxDrop::UnmatchedDuplicate);
                false
            }
        }
        _ => {
            // SEND/WRITE: ACK the newest completed PSN again, execute nothing.
            let last = psn::add(qp.resp.epsn, psn::PSN_MASK);
            queue_aeth_as(
                qp,
                last,
                AethSyndrome::Ack {
                    credit_code: CREDIT_CODE_INVALID,
                },
                true,
            );
            true
        }
    }
}

/// Builds the next response packet of this QP, if any.
pub(crate) fn poll_transmit(qp: &mut Qp, cx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
    if !qp.init.qp_type.is_reliable() {
        return None;
    }
    // AD-07: responses to a paced path wait their turn like requests (one
    // gate per QP: its path is one destination).
    if crate::engine::pacing::waiting(&qp.req, cx.now) {
        return None;
    }
    let item = qp.resp.out.pop_front()?;
    let mut read = None;
    let mut cont = None;
    let pmtu = qp.attr.path_mtu.bytes() as u64;
    let msn = qp.resp.msn;
    // RL-13: every ACK-kind AETH reports the receive WQEs posted now.
    let credit_code = credits::responder_code(qp);
    let (op, p, ext, payload_len) = match item {
        RespItem::Aeth { psn, syndrome, .. } => {
            let syndrome = match syndrome {
                AethSyndrome::Ack { .. } => {
                    cx.counters.acks_sent += 1;
                    qp.resp.advertised = Some(credit_code);
                    AethSyndrome::Ack { credit_code }
                }
                other => other,
            };
            let ext = ExtHeaders {
                aeth: Some(AethRepr { syndrome, msn }),
                ..Default::default()
            };
            (Opcode::RC_ACKNOWLEDGE, psn, ext, 0)
        }
        RespItem::AtomicAck { psn, orig, .. } => {
            qp.resp.advertised = Some(credit_code);
            let ext = ExtHeaders {
                aeth: Some(AethRepr {
                    syndrome: AethSyndrome::Ack { credit_code },
                    msn,
                }),
                atomic_ack_eth: Some(AtomicAckEthRepr {
                    orig_remote_data: orig,
                }),
                ..Default::default()
            };
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, ext, 0)
        }
        RespItem::Read {
            psn: first,
            va,
            rkey,
            len,
            sent,
            fresh,
            pd,
        } => {
            let n = (len - sent).min(pmtu) as usize;
            let k = (sent / pmtu) as u32;
            let is_first = sent == 0;
            let is_last = sent + n as u64 >= len;
            let op = match (is_first, is_last) {
                (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
                (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
                (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
            };
            // Read from memory into the packet when it is built, below.
            read = Some((rkey, va.wrapping_add(sent), psn::add(first, k), pd));
            let mut ext = ExtHeaders::default();
            if op.info().has(crate::wire::ExtKind::Aeth) {
                // C9-24: AETH in first, last and only, not middle.
                qp.resp.advertised = Some(credit_code);
                ext.aeth = Some(AethRepr {
                    syndrome: AethSyndrome::Ack { credit_code },
                    msn,
                });
            }
            if !is_last {
                cont = Some(RespItem::Read {
                    psn: first,
                    va,
                    rkey,
                    len,
                    sent: sent + n as u64,
                    fresh,
                    pd,
                });
            }
            (op, psn::add(first, k), ext, n)
        }
    };
    let op = if qp.init.qp_type == QpType::XrcTgt {
        // SR-02: a TGT QP answers with XRC opcodes.
        crate::engine::xrc::response(op)
    } else {
        op
    };
    let grh = qp.attr.av.grh.map(|g| GrhRepr {
        traffic_class: g.traffic_class,
        flow_label: g.flow_label,
        hop_limit: g.hop_limit,
        sgid: link::source_gid(cx.port, g.sgid_index).unwrap_or_default(),
        dgid: g.dgid,
    });
    let udp_sport = link::udp_source_port(
        qp.attr.av.grh.map_or(0, |g| g.flow_label),
        qp.qpn,
        qp.attr.dest_qp_num,
    );
    let pkt = PacketRepr {
        lrh: LrhRepr {
            vl: crate::engine::vl::tx_vl(cx.port, qp.qpn, qp.attr.av.sl), // AD-06
            sl: qp.attr.av.sl & 0xf,
            dlid: qp.attr.av.dlid,
            slid: cx.port.slid(qp.attr.av.src_path_bits),
        },
        grh,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: op,
                solicited: false,
                mig_req: qp.apm.migreq, // AD-10, 9.2.4
                pkey: cx
                    .port
                    .pkeys
                    .get(usize::from(qp.attr.pkey_index))
                    .copied()
                    .unwrap_or(0xffff),
                fecn: false,
                becn: qp.resp.becn, // A10.2.2 (`cc_ib`)
                dest_qp: qp.attr.dest_qp_num,
                ack_req: false,
                psn: p,
            },
            ext,
            payload: &[],
        },
    };
    let qpn = qp.qpn;
    let (mrs, mem) = (&*cx.mrs, &*cx.mem);
    let dmac = qp.attr.av.dmac;
    // Issue 30: a READ response's payload goes from memory straight into
    // the co-located peer's ring slot, where the link gives one.
    let in_slot = match read {
        Some(_) => super::super::io::payload_slot(&mut cx.tx_slots, cx.port, &pkt, payload_len),
        None => None,
    };
    let slotted = in_slot.is_some();
    let built = link::emit_with(
        cx.port,
        &pkt,
        dmac,
        udp_sport,
        buf,
        payload_len,
        |dst| match read {
            Some((rkey, va, _, pd)) if !dst.is_empty() => {
                let dst =
                    in_slot.map_or(crate::memory::Dst::Bytes(dst), crate::memory::Dst::Volatile);
                access::remote_read(mrs, mem, pd, qpn, rkey, va, dst)
            }
            _ => Ok(()),
        },
    );
    match built {
        Ok(len) => {
            cx.tx_in_slot = slotted;
            if let Some(c) = cont {
                qp.resp.out.push_front(c);
            }
            qp.resp.becn = false;
            let (av, now) = (qp.attr.av, cx.now);
            crate::engine::pacing::after_send(&mut qp.req, cx.port, &av, false, len, now);
            Some(len)
        }
        Err(EmitWithError::Fill(RemoteErr::PageFault(f))) => {
            // Issue 29: the READ's source page is not present: the response
            // stream waits here (later responses behind it, C9-27) until a
            // MAP restarts the QP.
            qp.resp.out.push_front(item);
            crate::engine::odp::responder_fault(qp, f, cx);
            None
        }
        Err(EmitWithError::Fill(e)) => {
            // The MR went away under the READ: NAK what could not be read.
            let p = read.map_or(p, |r| r.2);
            nak(qp, cx, p, remote_nak(e), NakReason::from(e));
            poll_transmit(qp, cx, buf)
        }
        Err(EmitWithError::Emit(_)) => {
            // RoCE: no route for the path (its GID entry went away); the
            // response is lost like one dropped on the wire.
            if cx.port.is_ethernet() {
                cx.counters.tx_no_route += 1;
            }
            None
        }
    }
}
