//! InfiniBand congestion notification in the engine (issue 31 item 2; IBA
//! Annex A10.2.2, A10.3): the destination CA's answer to a packet a switch
//! marked (BTH:FECN) and the source CA's reaction to the answer (BTH:BECN).
//!
//! - A request with FECN for an RC QP: the QP's next response (ACK, READ or
//!   ATOMIC response) carries BECN ("the B bit is set in an ACK or a CN
//!   BTH", IBA 9.2.10).
//! - A request with FECN for a UC or UD QP (which send no ACKs): a CN packet
//!   (BTH opcode 0x81, CongestionNotification, with BECN set and the 16
//!   reserved bytes the opcode carries) goes back to the sender: the UD
//!   packet's DETH:SrcQP at its SLID, or the UC QP's remote QP. CN packets wait
//!   in a bounded queue ([`MAX_PENDING_CN`]; one more is counted and dropped)
//!   and go before the QPs' packets.
//! - A response with BECN for a QP, or a CN packet naming it (taken, its
//!   P_Key checked, by `cc_np::receive_cnp`): a BECN for the QP's congestion
//!   controller (`cc::Notification::Becn` with the QP's SL:
//!   the IBA CCA, `cc::iba`, when the port runs it).
//!
//! The notification point runs on every IB port, whatever the port's own
//! CCA: A10.2.2 asks every CA that supports congestion control to return
//! the BECN. RoCE has its own (ECN and CNPs, `cc::dcqcn`).

use std::collections::VecDeque;

use super::link;
use super::{PortConfig, Qp};
use crate::cc::{CcCounters, Notification};
use crate::verbs::{QpType, Time};
use crate::wire::opcode::Opcode;
use crate::wire::{BthRepr, ExtHeaders, GrhRepr, LrhRepr, PacketRepr, TransportRepr};

/// CN packets waiting to go, at most.
pub(crate) const MAX_PENDING_CN: usize = 256;

/// A CN packet to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CnOut {
    lrh: LrhRepr,
    grh: Option<GrhRepr>,
    pkey: u16,
    dest_qp: u32,
}

/// The CN packets waiting for the wire.
#[derive(Debug, Default)]
pub(crate) struct CnQueue {
    q: VecDeque<CnOut>,
}

/// A packet with FECN arrived for `qp` (on InfiniBand, its headers checked):
/// an RC responder answers with BECN on its next response, a UC or UD QP
/// queues a CN packet to the sender.
pub(super) fn on_fecn(
    port: &PortConfig,
    qp: &mut Qp,
    pkt: &PacketRepr<'_>,
    cn: &mut CnQueue,
    c: &mut CcCounters,
) {
    c.fecn_seen += 1;
    let dest_qp = match qp.init.qp_type {
        QpType::Rc | QpType::XrcTgt => {
            qp.resp.becn = true;
            return;
        }
        QpType::Uc => qp.attr.dest_qp_num,
        QpType::Ud => match pkt.transport.ext.deth {
            Some(d) => d.src_qp,
            None => return,
        },
        _ => return,
    };
    if cn.q.len() >= MAX_PENDING_CN {
        c.cn_queue_full += 1;
        return;
    }
    let sl = pkt.lrh.sl;
    cn.q.push_back(CnOut {
        lrh: LrhRepr {
            vl: super::vl::tx_vl(port, qp.qpn, sl),
            sl,
            dlid: pkt.lrh.slid,
            // One of this port's LIDs: the one the marked packet came to.
            slid: pkt.lrh.dlid,
        },
        grh: pkt.grh.map(|g| GrhRepr {
            sgid: g.dgid,
            dgid: g.sgid,
            ..g
        }),
        pkey: pkt.transport.bth.pkey,
        dest_qp,
    });
}

/// A response for `qp` carried BECN (A10.3): the QP's controller hears it.
pub(super) fn on_becn(port: &PortConfig, qp: &mut Qp, now: Time, c: &mut CcCounters) {
    c.becns_received += 1;
    let n = Notification::Becn { sl: qp.attr.av.sl };
    qp.req.cc.rp.on_notify(&port.cc, port.rate_mbps, n, now, c);
}

/// Builds the next waiting CN packet into `buf`: its length, or `None` when
/// none waits.
pub(super) fn poll_transmit(
    cn: &mut CnQueue,
    port: &PortConfig,
    buf: &mut [u8],
    c: &mut CcCounters,
) -> Option<usize> {
    while let Some(o) = cn.q.pop_front() {
        let pkt = PacketRepr {
            lrh: o.lrh,
            grh: o.grh,
            transport: cnp_transport(o.pkey, o.dest_qp),
        };
        let built = link::emit_with(port, &pkt, Default::default(), 0, buf, 0, |_| {
            Ok::<(), core::convert::Infallible>(())
        });
        if let Ok(len) = built {
            c.cnps_sent += 1;
            return Some(len);
        }
        // Built from a checked packet's fields: cannot fail; counted all the same.
        c.cn_queue_full += 1;
    }
    None
}

/// The transport part of a CN packet (IBA annex A10.3; RoCEv2's CNP, annex
/// A17.9, is the same): BTH opcode 0x81 with BECN set, PSN 0, A/SE/M clear,
/// the P_Key and DestQP given; 16 reserved bytes.
pub(super) fn cnp_transport(pkey: u16, dest_qp: u32) -> TransportRepr<'static> {
    TransportRepr {
        bth: BthRepr {
            opcode: Opcode::CNP,
            solicited: false,
            mig_req: false,
            pkey,
            fecn: false,
            becn: true,
            dest_qp,
            ack_req: false,
            psn: 0,
        },
        ext: ExtHeaders {
            cnp: true,
            ..ExtHeaders::default()
        },
        payload: &[],
    }
}
