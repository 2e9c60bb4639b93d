//! RD packets in and out (AD-11, WF-07, PV-09): a received RD packet is
//! checked against its EE context and handed to the EEC's receive side
//! (requests) or send side (responses); EECs take turns to send; their timers
//! fire here.

use super::{eec_pkey, offer_head, Eec};
use super::{recv, send, Rd};
use crate::engine::{Effects, Engine, PortConfig};
use crate::memory::Memory;
use crate::verbs::{QpState, Time};
use crate::wire::opcode::Direction;
use crate::wire::PacketRepr;

impl Engine {
    /// A received RD packet (`io.rs` hands every packet of the RD service
    /// here, WF-07): the EE context checks (PV-09: o9-25, o9-26, o9-24, o9-28),
    /// then the responder (requests) or the EEC's send side (responses).
    pub(crate) fn handle_rd_packet(
        &mut self,
        pkt: &PacketRepr<'_>,
        roce: Option<crate::engine::link::RoceRx>,
        mem: &mut dyn Memory,
        now: Time,
    ) {
        let Some(rdeth) = pkt.transport.ext.rdeth else {
            return; // the parse guarantees an RDETH for every RD opcode
        };
        let eecn = rdeth.ee_context;
        let request = pkt.transport.bth.opcode.info().direction() == Direction::Request;
        let verdict = match self.rd.eecs.get(&eecn) {
            None => Err(Bad::Eecn),
            Some(e) => check_eec(&self.port, e, pkt, request),
        };
        if let Err(b) = verdict {
            log::debug!("drop RD packet for EEC {eecn}: {b:?}");
            let c = &mut self.counters.rd;
            match b {
                Bad::Eecn => c.bad_eecn += 1,
                Bad::State => c.eec_not_receiving += 1,
                Bad::Pkey => c.bad_pkey += 1,
                Bad::Path => c.bad_path += 1,
            }
            return;
        }
        let mut fx = Effects::default();
        let mut ctx = crate::engine::engine_ctx!(self, mem, &mut fx, now, roce);
        let Rd { eecs, qps, .. } = &mut self.rd;
        let Some(e) = eecs.get_mut(&eecn) else {
            return;
        };
        let wake = if request {
            recv::handle_request(e, qps, pkt, &mut ctx)
        } else {
            send::handle_response(e, qps, pkt, &mut ctx)
        };
        let next = if request { None } else { e.req.finished.take() };
        if let Some(q) = next {
            // The QP's next WQE goes to its EEC (which may be another one).
            offer_head(&mut self.rd, q, &mut fx);
        }
        if wake {
            self.rd.schedule(eecn);
        }
        self.rd.arm(eecn); // a response restarts or stops the ACK timer
        self.finish(fx);
    }

    /// The next RD packet to send (responses of an EEC before its requests),
    /// round robin over EECs.
    pub(crate) fn rd_poll_transmit(
        &mut self,
        mem: &mut dyn Memory,
        now: Time,
        buf: &mut [u8],
    ) -> Option<usize> {
        let mut fx = Effects::default();
        let mut out = None;
        for _ in 0..self.rd.sched.len() {
            let Some(eecn) = self.rd.sched.pop_front() else {
                break;
            };
            let mut ctx = crate::engine::engine_ctx!(self, mem, &mut fx, now, None);
            let Rd { eecs, qps, .. } = &mut self.rd;
            let Some(e) = eecs.get_mut(&eecn) else {
                continue;
            };
            let built = recv::poll_transmit(e, &mut ctx, buf)
                .or_else(|| send::poll_transmit(e, qps, &mut ctx, buf));
            let next = e.req.finished.take();
            if built.is_none() {
                e.scheduled = false;
            } else {
                self.rd.sched.push_back(eecn);
            }
            if let Some(q) = next {
                offer_head(&mut self.rd, q, &mut fx);
            }
            if let Some(len) = built {
                self.rd.arm(eecn); // a request sent starts the ACK timer
                self.counters.tx_packets += 1;
                self.counters.tx_bytes += len as u64;
                out = Some(len);
                break;
            }
        }
        self.finish(fx);
        out
    }

    /// Fires the EEC timers due at `now`: ACK timeouts (RL-10) and RNR waits
    /// (RL-11) of the message in flight.
    pub(crate) fn rd_handle_timeout(&mut self, now: Time) {
        let due = self.rd.take_due(now);
        let mut fx = Effects::default();
        for &eecn in &due {
            let Rd { eecs, qps, .. } = &mut self.rd;
            let Some(e) = eecs.get_mut(&eecn) else {
                continue;
            };
            if e.req.deadline.is_none_or(|d| d > now) {
                continue; // moved later since it was armed: re-armed below
            }
            let out = send::on_timeout(e, qps, now, &mut self.counters.rd, &mut fx);
            let next = e.req.finished.take();
            match out {
                send::Timeout::Resend => self.rd.schedule(eecn),
                send::Timeout::Exhausted => {
                    // Seed 001: retries that cannot correct the error move the
                    // EEC from RTS to Error.
                    if let Some(e) = self.rd.eecs.get_mut(&eecn) {
                        e.state = QpState::Error;
                    }
                    self.eec_down(eecn, true, &mut fx);
                }
                send::Timeout::Nothing => {}
            }
            if let Some(q) = next {
                offer_head(&mut self.rd, q, &mut fx);
            }
        }
        for eecn in due {
            self.rd.arm(eecn);
        }
        self.finish(fx);
    }
}

/// Why an RD packet failed the EE context checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bad {
    Eecn,
    State,
    Pkey,
    Path,
}

/// The EE context checks of an RD packet (PV-09; 9.6.1.4 table 43 o9-25,
/// o9-26; o9-24 the P_Key against the EEC's; o9-28 and C9-53/C9-54 the SLID
/// against the EEC's path; C9-43.1.2 the GRH as the path has one). All are
/// silent drops.
fn check_eec(port: &PortConfig, e: &Eec, pkt: &PacketRepr<'_>, request: bool) -> Result<(), Bad> {
    let state_ok = if request {
        matches!(e.state, QpState::Rtr | QpState::Rts)
    } else {
        e.state == QpState::Rts
    };
    if !state_ok {
        return Err(Bad::State);
    }
    if !crate::engine::io::pkey_match(pkt.transport.bth.pkey, eec_pkey(port, &e.attr)) {
        return Err(Bad::Pkey);
    }
    let path = &e.attr.av;
    if port.is_ethernet() {
        // RoCE: the addresses stand for the LIDs (A17.4.5), both ways as for
        // a connected QP (`io::check_roce_addresses`): from the path's DGID,
        // to the port's GID the path sends from (so to one of the port's
        // GIDs at all; issue 25: only the source was checked).
        let ok = match (pkt.grh.as_ref(), path.grh.as_ref()) {
            (Some(g), Some(p)) => {
                g.sgid == p.dgid
                    && crate::engine::link::source_gid(port, p.sgid_index) == Some(g.dgid)
            }
            _ => false,
        };
        return if ok { Ok(()) } else { Err(Bad::Path) };
    }
    if pkt.grh.is_some() != path.grh.is_some() {
        return Err(Bad::Path);
    }
    if let (Some(g), Some(p)) = (pkt.grh.as_ref(), path.grh.as_ref()) {
        if g.sgid != p.dgid || g.dgid != port.gid() {
            return Err(Bad::Path);
        }
    }
    if pkt.lrh.slid != path.dlid {
        return Err(Bad::Path);
    }
    Ok(())
}

/// The LRH, GRH and BTH fields every RD packet of EEC `e` shares.
pub(super) fn headers(
    port: &PortConfig,
    e: &Eec,
    op: crate::wire::opcode::Opcode,
    dest_qp: u32,
    psn: u32,
    ack_req: bool,
    ext: crate::wire::ExtHeaders,
) -> PacketRepr<'static> {
    use crate::wire::{BthRepr, GrhRepr, LrhRepr, TransportRepr};
    let av = &e.attr.av;
    PacketRepr {
        lrh: LrhRepr {
            // AD-06: the SL's data VL (an EEC is never QP0, which alone
            // goes on VL15; any QPN but 0 says so).
            vl: crate::engine::vl::tx_vl(port, u32::MAX, av.sl),
            sl: av.sl & 0xf,
            dlid: av.dlid,
            slid: port.slid(av.src_path_bits),
        },
        grh: av.grh.map(|g| GrhRepr {
            traffic_class: g.traffic_class,
            flow_label: g.flow_label,
            hop_limit: g.hop_limit,
            sgid: crate::engine::link::source_gid(port, g.sgid_index).unwrap_or_default(),
            dgid: g.dgid,
        }),
        transport: TransportRepr {
            bth: BthRepr {
                opcode: op,
                solicited: false,
                mig_req: false,
                pkey: eec_pkey(port, &e.attr),
                fecn: false,
                becn: false,
                dest_qp,
                ack_req,
                psn,
            },
            ext: crate::wire::ExtHeaders {
                rdeth: Some(crate::wire::ext::RdethRepr {
                    ee_context: e.attr.remote_eecn,
                }),
                ..ext
            },
            payload: &[],
        },
    }
}

/// Writes `pkt` on the port's link (RoCE framing included) with its payload
/// filled in place.
pub(super) fn emit<E>(
    port: &PortConfig,
    e: &Eec,
    pkt: &PacketRepr<'_>,
    buf: &mut [u8],
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<usize, crate::wire::packet::EmitWithError<E>> {
    let av = &e.attr.av;
    let sport = crate::engine::link::udp_source_port(
        av.grh.map_or(0, |g| g.flow_label),
        e.eecn,
        e.attr.remote_eecn,
    );
    crate::engine::link::emit_with(port, pkt, av.dmac, sport, buf, payload_len, fill)
}
