//! Congestion control in the engine's receive and transmit paths (issue 31;
//! the controllers and the hook are `crate::cc`, ARCHITECTURE.md §3).
//!
//! - Notification point (RoCEv2, DCQCN): a RoCE frame for a local QP whose IP
//!   ECN field says Congestion Experienced is counted (`ce_seen`) and, at
//!   most once per QP per `np_min_time_between_cnps`, answered with a CNP to
//!   the frame's source QP. The QP keeps the answer's address
//!   (`cc::Np::pending`) and is queued once; [`Engine::poll_cnp`] sends the
//!   queued CNPs before any other packet (a CNP is small and the sooner it
//!   arrives the less the source overshoots).
//! - The CNP (RoCEv2 annex A17.9): BTH opcode 0x81, the marked packet's
//!   P_Key, DestQP its source QP, PSN 0, BECN set, A/SE/M clear; 16 reserved
//!   bytes; ICRC. IP DSCP `np_cnp_dscp`, not ECN-capable.
//! - Reaction point: a CNP for a local QP in RTS or SQD whose P_Key the QP
//!   accepts (and, connected, from its path's addresses) is counted
//!   (`cnps_received`) and handed to the QP's controller
//!   (`cc::Controller::on_notify`); others are dropped and counted as any
//!   packet failing the same check.

use super::io::{check_roce_addresses, pkey_match};
use super::{link, Engine, Qp, RxDrop};
use crate::cc::{CcCounters, Notification, NpReply};
use crate::qp_state;
use crate::verbs::{QpType, Time};
use crate::wire::packet::EmitWithError;
use crate::wire::{GrhRepr, LrhRepr, PacketRepr};

/// The queue of QPs with a CNP to send (each QP at most once).
pub(crate) type CnpQueue = std::collections::VecDeque<u32>;

/// After `pkt` passed its QP's checks: the notification point's part. Counts
/// a CE mark and, when the QP's interval allows, leaves a CNP to send and
/// queues the QP.
pub(super) fn on_receive(
    port: &super::PortConfig,
    c: &mut CcCounters,
    queue: &mut CnpQueue,
    qp: &mut Qp,
    pkt: &PacketRepr<'_>,
    roce: Option<&link::RoceRx>,
    now: Time,
) {
    let (Some(rx), Some(grh)) = (roce, pkt.grh.as_ref()) else {
        return; // InfiniBand: FECN is the IBA CCA's (annex A10)
    };
    if grh.traffic_class & 3 != crate::cc::dcqcn::CE {
        return;
    }
    c.ce_seen += 1;
    let Some(p) = &port.cc.dcqcn else {
        return;
    };
    if !qp.req.cc.np.notify_due(p.cnp_gap_ns(), now) {
        return;
    }
    let bth = &pkt.transport.bth;
    // The source QP: a UD sender names itself in the DETH; a connected QP's
    // peer is its path's.
    let dest_qp = match (qp.init.qp_type, pkt.transport.ext.deth) {
        (QpType::Ud, Some(d)) => d.src_qp,
        (QpType::Ud, None) => return,
        _ => qp.attr.dest_qp_num,
    };
    let was_pending = qp.req.cc.np.pending.is_some();
    qp.req.cc.np.pending = Some(NpReply {
        dest_qp,
        pkey: bth.pkey,
        sgid: grh.dgid,
        dgid: grh.sgid,
        dmac: rx.smac,
        dlid: pkt.lrh.slid,
        slid: pkt.lrh.dlid,
        sl: pkt.lrh.sl,
    });
    if !was_pending {
        queue.push_back(qp.qpn);
    }
}

impl Engine {
    /// The limit QP `qpn`'s congestion controller puts on its sending now
    /// (`None`: no such QP). For reports and tests.
    pub fn cc_limit(&self, qpn: u32) -> Option<crate::cc::Limit> {
        self.qps.get(&qpn).map(|q| q.req.cc.rp.limit())
    }

    /// Builds the next queued CNP into `buf`, if any (from `poll_transmit`,
    /// before anything else).
    pub(super) fn poll_cnp(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some(qpn) = self.cnps.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue; // destroyed since
            };
            let Some(r) = qp.req.cc.np.pending.take() else {
                continue;
            };
            let Some(p) = &self.port.cc.dcqcn else {
                continue; // turned off since
            };
            let pkt = PacketRepr {
                lrh: LrhRepr {
                    vl: 0,
                    sl: r.sl & 0xf,
                    dlid: r.dlid,
                    slid: r.slid,
                },
                grh: Some(GrhRepr {
                    traffic_class: p.cnp_tos(),
                    flow_label: 0,
                    hop_limit: 64,
                    sgid: r.sgid,
                    dgid: r.dgid,
                }),
                transport: super::cc_ib::cnp_transport(r.pkey, r.dest_qp),
            };
            let sport = link::udp_source_port(0, qpn, r.dest_qp);
            let fill = |_: &mut [u8]| Ok::<(), ()>(());
            match link::emit_with(&self.port, &pkt, r.dmac, sport, buf, 0, fill) {
                Ok(len) => {
                    self.counters.cc.cnps_sent += 1;
                    return Some(len);
                }
                Err(EmitWithError::Emit(_) | EmitWithError::Fill(())) => {
                    self.counters.tx_no_route += 1;
                }
            }
        }
        None
    }

    /// A CNP (BTH opcode 0x81) that passed the wire and LID checks: the
    /// reaction point of its DestQP.
    pub(super) fn receive_cnp(&mut self, pkt: &PacketRepr<'_>, now: Time) {
        let dest = pkt.transport.bth.dest_qp;
        let Some(qp) = self.qps.get_mut(&dest) else {
            self.counters.drop(RxDrop::UnknownQp);
            return;
        };
        if let Err(r) = check_cnp(&self.port, qp, pkt) {
            self.counters.drop(r);
            return;
        }
        self.counters.cc.cnps_received += 1;
        let (cfg, mbps) = (&self.port.cc, self.port.rate_mbps);
        let c = &mut self.counters.cc;
        if self.port.is_ethernet() {
            qp.req.cc.rp.on_notify(cfg, mbps, Notification::Cnp, now, c);
        } else if pkt.transport.bth.becn {
            // InfiniBand: a CN packet carries a BECN for the QP (IBA
            // A10.3, `cc_ib`).
            super::cc_ib::on_becn(&self.port, qp, now, c);
        }
        self.arm(dest);
    }
}

/// Whether QP `qp` takes CNP `pkt`: it sends (RTS, SQD), the P_Key is its
/// partition's, and on RoCE a connected QP's CNP comes from its path.
fn check_cnp(port: &super::PortConfig, qp: &Qp, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
    if !qp_state::sends_packets(qp.state) {
        return Err(RxDrop::QpNotReceiving);
    }
    let own = port.pkeys.get(usize::from(qp.attr.pkey_index)).copied();
    if !own.is_some_and(|k| pkey_match(pkt.transport.bth.pkey, k)) {
        return Err(RxDrop::BadPkey);
    }
    if port.is_ethernet() && qp.init.qp_type != QpType::Ud {
        return check_roce_addresses(port, qp, pkt);
    }
    Ok(())
}
