//! The engine's inputs and outputs besides the verbs (ARCHITECTURE.md §3): received
//! packets, the next packet to transmit, the requester timers (RL-10, RL-11) and
//! events, and the header checks a received packet passes before any QP state is
//! touched (9.6; PV-02, PV-03, PV-05, PV-06, PV-10).

use super::mcast::{is_multicast_gid, is_multicast_lid, MULTICAST_QPN};
use super::reorder::Arrival;
use super::{completer, link, requester, responder};
use super::{Effects, Engine, PortConfig, Qp, RxDrop, PERMISSIVE_LID};
use crate::memory::Memory;
use crate::qp_state;
use crate::verbs::{Event, QpType, Time};
use crate::wire::opcode::Service;
use crate::wire::PacketRepr;

/// Packets a QP sends in a row before the transmit schedule moves on to the
/// next (vhca policy; issue 12, figure 6): one 64 KiB message at a 4 KiB
/// MTU. Packet by packet round robin over 1024 QPs interleaves their
/// messages, so each packet a responder receives is another QP's and asks
/// for its own ACK (the port window asks for one on every packet once a
/// destination is half full): one ACK per data packet. In runs, the
/// responder's ACKs for a run's packets received in one batch coalesce into
/// one (`responder::responses`, RL-08), and the QP's state stays in cache.
/// A run ends early when the QP has nothing more to send or is held back
/// (its own window, the port window, credits); VL arbitration (AD-06) still
/// picks the next packet's VL first.
pub(super) const TX_BURST: u32 = 16;

/// Bytes at the start of a lent packet that the engine copies for its
/// headers (issue 30, [`Engine::handle_received_lent`]): LRH, GRH, BTH and
/// the longest extension headers of any opcode fit (a test checks).
pub const LENT_HEAD: usize = 128;

/// A received packet as [`Engine::receive`] takes it: its own bytes, or
/// (`lent`) a packet whose first [`LENT_HEAD`] bytes are a private copy in
/// `bytes` (as long as the packet; the rest of `bytes` is not the packet's)
/// and whose whole is `lent`, in place.
#[derive(Clone, Copy)]
pub(super) struct RxBuf<'a> {
    pub bytes: &'a [u8],
    pub lent: Option<vm_memory::VolatileSlice<'a>>,
}

impl RxBuf<'_> {
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The whole packet into `v` (the reorder hold keeps it).
    pub fn copy_into(&self, v: &mut Vec<u8>) {
        v.clear();
        v.extend_from_slice(self.bytes);
        if let Some(l) = self.lent {
            if let Ok(rest) = l.subslice(LENT_HEAD, l.len().saturating_sub(LENT_HEAD)) {
                rest.copy_to(&mut v[LENT_HEAD..]);
            }
        }
    }
}

/// Whether a packet whose first bytes are `head` may be handled with its
/// payload left in place (issue 30): a native RC, UC or XRC SEND, RDMA WRITE
/// or RDMA READ response to one QP. Their payload is only placed in memory
/// (`responder::place`, `completer`); every other packet (atomics, MADs,
/// UD, RD, multicast, CNPs, anything the parse would refuse) is copied
/// whole first, as the engine reads its payload's bytes.
fn lendable(head: &[u8]) -> bool {
    use crate::wire::opcode::{Opcode, Operation};
    use crate::wire::{Bth, GrhRepr, Lnh, Lrh, LrhRepr};
    let bth_at = match Lrh::new_checked(head).map(|l| l.lnh()) {
        Ok(Lnh::IbaLocal) => LrhRepr::LEN,
        Ok(Lnh::IbaGlobal) => LrhRepr::LEN + GrhRepr::LEN,
        _ => return false,
    };
    let Some(bth) = head.get(bth_at..).and_then(|b| Bth::new_checked(b).ok()) else {
        return false;
    };
    if bth.dest_qp() == MULTICAST_QPN {
        return false;
    }
    let Some(info) = Opcode::from_u8(bth.opcode()).map(Opcode::info) else {
        return false;
    };
    matches!(info.service, Service::Rc | Service::Uc | Service::Xrc)
        && matches!(
            info.operation,
            Operation::Send
                | Operation::SendWithImmediate
                | Operation::SendWithInvalidate
                | Operation::RdmaWrite
                | Operation::RdmaWriteWithImmediate
                | Operation::RdmaReadResponse
        )
}

/// Where a link lets the engine build a packet's payload in place: the
/// shared-memory link's ring slot for the packet's DLID (issue 30), so that
/// guest memory is copied once, into the slot, instead of into the engine's
/// buffer and from there into the slot. [`Engine::poll_transmit_into`] asks
/// only for a native packet whose CRCs its link computes and whose payload
/// comes from memory: a SEND or RDMA WRITE (any QP type) or a READ response.
pub trait TxSlots {
    /// Room for `len` payload bytes of a packet to `dlid`, whose payload
    /// starts at `at`: the link sends the packet's other bytes from the
    /// engine's buffer around them (`Link::send`), or `None` (the payload
    /// goes into the buffer, as ever). Asked at most once per packet built;
    /// a later ask, or a packet that is not sent, gives the room back.
    fn payload_slot(
        &mut self,
        dlid: u16,
        at: usize,
        len: usize,
    ) -> Option<vm_memory::VolatileSlice<'_>>;
}

/// Room in the link for the `len`-byte payload of `pkt`, a packet being
/// built ([`TxSlots`]): asked only where the link computes the CRCs (they
/// would read the payload) on a native port, for a payload there is.
pub(super) fn payload_slot<'s>(
    slots: &'s mut Option<&mut dyn TxSlots>,
    port: &super::PortConfig,
    pkt: &PacketRepr<'_>,
    len: usize,
) -> Option<vm_memory::VolatileSlice<'s>> {
    let t = slots.as_deref_mut()?;
    if len == 0 || !port.crcs_by_link || port.is_ethernet() {
        return None;
    }
    t.payload_slot(pkt.lrh.dlid, pkt.payload_at(), len)
}

/// Where lent packet `l`'s payload lies, as parsed into `pkt`.
fn lent_payload<'a>(
    l: vm_memory::VolatileSlice<'a>,
    pkt: &PacketRepr<'_>,
) -> Option<vm_memory::VolatileSlice<'a>> {
    l.subslice(pkt.payload_at(), pkt.transport.payload.len())
        .ok()
}

/// What only the link knows of a received packet (ARCHITECTURE.md §9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxFrom {
    /// The LID of the fabric node that sent it (the UDP link: the node whose
    /// address sent the datagram); `None` where the link cannot tell. The
    /// engine drops a packet whose LRH:SLID is another (a spoofed source).
    pub src_lid: Option<u16>,
    /// The packet crossed memory, not a wire, and its sender left the ICRC
    /// and VCRC out (`PortConfig::crcs_by_link`; the shared-memory link,
    /// issue 30): they are not checked. Only a native packet; every other
    /// check is made as always.
    pub crcs_vouched: bool,
}

impl Engine {
    /// Handles one received packet as the port's link carries them: a native
    /// packet (LRH through VCRC) on InfiniBand, a RoCEv2 frame (Ethernet header
    /// through ICRC) on Ethernet (WF-10). The same as
    /// [`Self::handle_packet_from`] from a sender the link cannot name.
    pub fn handle_packet(&mut self, buf: &[u8], mem: &mut dyn Memory, now: Time) {
        self.handle_packet_from(buf, None, mem, now)
    }

    /// Handles one received packet that the link took from the node with LID
    /// `src_lid` (the UDP link knows it from the datagram's source address).
    ///
    /// The packet is parsed once, here, and every check of its contents is
    /// made once, here (ARCHITECTURE.md §2, "A received packet"): lengths,
    /// VCRC, ICRC and headers in the parse (`link::parse`); on InfiniBand the
    /// DLID (the port's LIDs or the permissive LID, 7.11.1) and the SLID
    /// against `src_lid` (a spoofed source, ARCHITECTURE.md §9); on Ethernet
    /// the destination MAC in `link::parse`, the IP addresses in
    /// `check_roce_addresses`; then the transport's header checks.
    pub fn handle_packet_from(
        &mut self,
        buf: &[u8],
        src_lid: Option<u16>,
        mem: &mut dyn Memory,
        now: Time,
    ) {
        let from = RxFrom {
            src_lid,
            crcs_vouched: false,
        };
        self.handle_received(buf, from, mem, now)
    }

    /// [`Self::handle_packet_from`] with all the link knows of the packet.
    pub fn handle_received(&mut self, buf: &[u8], from: RxFrom, mem: &mut dyn Memory, now: Time) {
        let rx = RxBuf {
            bytes: buf,
            lent: None,
        };
        self.handle_rx(rx, from, mem, now)
    }

    /// Handles a native packet that its link lends in place: `lent` is the
    /// whole packet in memory that another process may write at any time (a
    /// shared-memory ring slot, issue 30), valid for this call. The engine
    /// never borrows those bytes: it copies the first [`LENT_HEAD`] for the
    /// headers, and when the packet's payload is only placed (a SEND, RDMA
    /// WRITE or READ response of a connected QP, with CRCs the link
    /// vouches for) copies the payload once, straight into memory
    /// (`Memory::write_src`); any other packet is copied whole and handled
    /// as [`Self::handle_received`] does. Bytes the peer changes meanwhile
    /// are the peer's own traffic: every check is made on the private copy.
    pub fn handle_received_lent(
        &mut self,
        lent: vm_memory::VolatileSlice<'_>,
        from: RxFrom,
        mem: &mut dyn Memory,
        now: Time,
    ) {
        let len = lent.len();
        let mut scratch = std::mem::take(&mut self.rx_scratch);
        if scratch.len() < crate::wire::MAX_PACKET_LEN {
            scratch.resize(crate::wire::MAX_PACKET_LEN, 0);
        }
        match scratch.get_mut(..len) {
            None => {
                // Longer than any packet (the link bounds it first).
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += len as u64;
                self.counters
                    .wire_drops
                    .count(crate::wire::DropReason::LengthMismatch);
            }
            Some(whole) => {
                let may = from.crcs_vouched
                    && len > LENT_HEAD
                    && self.port.link == super::LinkLayer::InfiniBand;
                // The head, then (unless the payload stays in place) the
                // rest, none when the head was all of it.
                let n = if may { LENT_HEAD } else { len };
                lent.copy_to(&mut whole[..n]);
                let in_place = may && lendable(&whole[..LENT_HEAD]);
                if !in_place {
                    if let Ok(rest) = lent.subslice(n, len - n) {
                        rest.copy_to(&mut whole[n..]);
                    }
                }
                let rx = RxBuf {
                    bytes: whole,
                    lent: in_place.then_some(lent),
                };
                self.handle_rx(rx, from, mem, now);
            }
        }
        self.rx_scratch = scratch;
    }

    fn handle_rx(&mut self, buf: RxBuf<'_>, from: RxFrom, mem: &mut dyn Memory, now: Time) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += buf.len() as u64;
        // The receive reorder hold (`reorder`, vhca policy): a packet one
        // PSN ahead may wait for the one it overtook. Held packets whose
        // hold ran out are not processed here, before this one: a process
        // descheduled past the hold reads the missing packet in its next
        // batch, which then still goes first (as a due probe waits for what
        // arrived, `recovery`). `poll_transmit`, after the batch, processes
        // what is still held.
        match self.receive(buf, from, mem, now, true) {
            Arrival::Process | Arrival::Held => {}
            Arrival::ThenHeld(n) => self.release_held(n, mem, now),
            Arrival::HeldFirst(n) => {
                self.release_held(n, mem, now);
                // Its QP holds nothing now: this one is processed (or held
                // in turn, when it is one ahead of the new expected PSN).
                let again = self.receive(buf, from, mem, now, true);
                debug_assert!(matches!(again, Arrival::Process | Arrival::Held));
            }
        }
    }

    /// Processes the held packets whose hold ran out by `now` (`reorder`),
    /// from [`Self::poll_transmit`], which every caller runs after
    /// [`Self::handle_timeout`] and the packets it received (the hold's expiry is in
    /// [`Self::poll_timeout`]; processing a packet needs guest memory, which
    /// the timer entry point does not have). O(1) when none is due.
    fn release_expired(&mut self, mem: &mut dyn Memory, now: Time) {
        // Releasing never holds again (`receive` without `may_hold`), so
        // this ends once every due slot is empty.
        while let Some(n) = self.hold.first_expired(now) {
            let qpn = self.hold.on_expired(n, &mut self.counters.reorder);
            if let Some(qp) = qpn.and_then(|q| self.qps.get_mut(&q)) {
                qp.hold_misses.miss();
            }
            self.release_held(n, mem, now);
        }
    }

    /// Processes the packet held in slot `n` of the reorder hold.
    fn release_held(&mut self, n: usize, mem: &mut dyn Memory, now: Time) {
        if let Some((held, from)) = self.hold.take(n) {
            let rx = RxBuf {
                bytes: &held,
                lent: None,
            };
            self.receive(rx, from, mem, now, false);
            self.hold.put_back(held);
        }
    }

    /// One received packet through the checks to its QP; `may_hold`: the
    /// reorder hold may keep it (`reorder`), or, when it releases a held
    /// packet of the same QP, say which goes first.
    fn receive(
        &mut self,
        buf: RxBuf<'_>,
        from: RxFrom,
        mem: &mut dyn Memory,
        now: Time,
        may_hold: bool,
    ) -> Arrival {
        let parsed = link::parse(&self.port, buf.bytes, from.crcs_vouched, &mut self.rx_memo)
            .and_then(|(pkt, roce)| {
                if roce.is_none() {
                    check_lids(&self.port, &pkt, from.src_lid).map_err(link::Drop::Rx)?;
                }
                Ok((pkt, roce))
            });
        let (mut pkt, roce) = match parsed {
            Ok(p) => p,
            Err(link::Drop::Wire(d)) => {
                log::debug!("drop: {d}");
                self.counters.wire_drops.count(d);
                return Arrival::Process;
            }
            Err(link::Drop::Rx(r)) => {
                log::debug!("drop: {r:?}");
                self.counters.drop(r);
                return Arrival::Process;
            }
        };
        // A lent packet's payload is placed from where it lies; the bytes
        // the parse saw past the head are not the packet's, so the repr
        // holds zeros of the payload's length (`Ctx::payload`).
        let lent = match buf.lent {
            None => None,
            Some(l) => match lent_payload(l, &pkt) {
                Some(p) => {
                    let n = pkt.transport.payload.len();
                    pkt.transport.payload = &crate::wire::packet::ZEROS[..n];
                    Some(p)
                }
                None => {
                    // Unreachable: the parse bounded the payload.
                    self.counters
                        .wire_drops
                        .count(crate::wire::DropReason::Truncated);
                    return Arrival::Process;
                }
            },
        };
        if pkt.transport.bth.opcode.info().service == Service::Rd {
            // WF-07, PV-09: RD packets are demultiplexed by their RDETH's EE
            // context first (`rd`).
            self.handle_rd_packet(&pkt, roce, mem, now);
            return Arrival::Process;
        }
        if pkt.transport.bth.opcode == crate::wire::opcode::Opcode::CNP {
            self.receive_cnp(&pkt, now); // issue 31: a reaction point's (`cc_np`)
            return Arrival::Process;
        }
        let dest = pkt.transport.bth.dest_qp;
        if dest == MULTICAST_QPN {
            // PV-07: a copy for every attached QP, each through its checks.
            self.deliver_multicast(&pkt, roce, mem, now);
            return Arrival::Process;
        }
        // One QP lookup serves the header checks and the handling.
        let checked = match self.qps.get_mut(&dest) {
            None => Err(RxDrop::UnknownQp), // C9-37
            Some(qp) => check_headers(&self.port, qp, &pkt, false).map(|()| qp),
        };
        let qp = match checked {
            Ok(qp) => qp,
            Err(r) => {
                log::debug!("drop packet to QP {dest}: {r:?}");
                self.counters.drop(r);
                // AD-10: a refused migration request raises its event.
                if let Some(qp) = self.qps.get_mut(&dest) {
                    let mut fx = Effects::default();
                    let (port, c) = (&self.port, &mut self.counters);
                    if super::apm::on_rejected(qp, &pkt, roce.is_some(), port, &mut fx, c) {
                        self.finish(fx);
                    }
                }
                return Arrival::Process;
            }
        };
        let arrival = if may_hold {
            let hold_ns = self.limits.reorder_hold_ns;
            let c = &mut self.counters.reorder;
            let mut m = qp.hold_misses;
            // The sender: on RoCE its source address, else its LID (which
            // `check_lids` held against the link's).
            let peer = match (&roce, &pkt.grh) {
                (Some(_), Some(g)) => g.sgid,
                _ => {
                    let mut p = [0u8; 16];
                    p[..2].copy_from_slice(&pkt.lrh.slid.to_be_bytes());
                    p
                }
            };
            let a = self
                .hold
                .on_arrival(c, hold_ns, qp, &mut m, peer, &pkt, buf, from, now);
            qp.hold_misses = m;
            a
        } else {
            Arrival::Process
        };
        if matches!(arrival, Arrival::Held | Arrival::HeldFirst(_)) {
            return arrival;
        }
        self.counters.rx_in_place += u64::from(lent.is_some());
        // Issue 31: a CE mark for the notification point (`cc_np`).
        let c = &mut self.counters.cc;
        super::cc_np::on_receive(&self.port, c, &mut self.cnps, qp, &pkt, roce.as_ref(), now);
        let mut fx = Effects::default();
        super::apm::on_receive(qp, &pkt, roce.is_some(), &mut fx, &mut self.counters); // AD-10
        let info = pkt.transport.bth.opcode.info();
        use crate::wire::opcode::Direction;
        let bth = &pkt.transport.bth;
        if roce.is_none() && (bth.fecn || bth.becn) {
            // IBA A10.2.2, A10.3: FECN on a request is answered with BECN,
            // BECN on a response slows the QP down (`cc_ib`).
            let (port, c) = (&self.port, &mut self.counters.cc);
            match info.direction() {
                Direction::Request if bth.fecn => {
                    super::cc_ib::on_fecn(port, qp, &pkt, &mut self.cn, c)
                }
                Direction::Response if bth.becn => super::cc_ib::on_becn(port, qp, now, c),
                _ => {}
            }
        }
        let state_before = qp.state;
        let mut ctx = super::engine_ctx!(self, mem, &mut fx, now, roce, lent);
        let (wants_tx, quiet) = match info.direction() {
            Direction::Request => {
                let r = responder::handle_request(qp, &pkt, &mut ctx);
                // Issue 30: a request changes nothing `arm` reads (the
                // requester's packets in flight and deadlines, the QP's
                // path) unless it moved the QP's state or migrated its path
                // (which raises an event): most packets of a message leave
                // the timers and the port window as they were. And one that
                // leaves no response waiting (in order, no AckReq) gives the
                // transmit schedule nothing to do.
                let same = qp.state == state_before && fx.events.is_empty();
                (r && (qp.resp.has_output() || !same), same)
            }
            Direction::Response => (completer::handle_response(qp, &pkt, &mut ctx), false),
            Direction::Notification => (false, false),
        };
        self.finish(fx);
        if !quiet {
            self.arm(dest);
        }
        if wants_tx {
            self.schedule_qp(dest);
        }
        arrival
    }

    /// Builds the next packet to send into `buf` (for speed, starting
    /// [`crate::wire::packet::BUFFER_ALIGN_OFFSET`] bytes past a 16-byte boundary;
    /// it must hold a whole packet:
    /// 8 + 40 + 12 + 28 + 4096 + 6 bytes is always enough); returns its length, or
    /// `None` when nothing is ready. Round robin over QPs, in runs of up to
    /// [`TX_BURST`] packets of one QP.
    pub fn poll_transmit(
        &mut self,
        mem: &mut dyn Memory,
        now: Time,
        buf: &mut [u8],
    ) -> Option<usize> {
        self.poll_transmit_with(mem, now, buf, None)
            .map(|(len, _)| len)
    }

    /// [`Self::poll_transmit`], building a data packet's payload in the
    /// place `slots` gives for it, if any ([`TxSlots`]); also returns
    /// whether it did: the packet's payload bytes are then there, not in
    /// `buf`, and the caller hands `buf` to the link that gave the place
    /// saying so.
    pub fn poll_transmit_into(
        &mut self,
        mem: &mut dyn Memory,
        now: Time,
        buf: &mut [u8],
        slots: &mut dyn TxSlots,
    ) -> Option<(usize, bool)> {
        self.poll_transmit_with(mem, now, buf, Some(slots))
    }

    fn poll_transmit_with(
        &mut self,
        mem: &mut dyn Memory,
        now: Time,
        buf: &mut [u8],
        mut slots: Option<&mut dyn TxSlots>,
    ) -> Option<(usize, bool)> {
        // Held packets whose time came are processed before anything is
        // built: their answers may be what goes out (`reorder`).
        self.release_expired(mem, now);
        // Issue 31: CNPs go first (`cc_np` on RoCE, `cc_ib` on IB, IBA
        // A10.2.2).
        let c = &mut self.counters.cc;
        let ib = super::cc_ib::poll_transmit(&mut self.cn, &self.port, buf, c);
        if let Some(len) = ib.or_else(|| {
            (!self.cnps.is_empty())
                .then(|| self.poll_cnp(buf))
                .flatten()
        }) {
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += len as u64;
            return Some((len, false));
        }
        // AD-11: RD's EE contexts and the QPs take turns.
        let rd_first = self.rd.active() && self.rd.take_turn();
        if rd_first {
            if let Some(len) = self.rd_poll_transmit(mem, now, buf) {
                return Some((len, false));
            }
        }
        let mut fx = Effects::default();
        let mut out = None;
        let picked = self.vl_pick();
        // Each scheduled QP is taken at most twice (once more if it was in
        // another VL's lane, `next_scheduled`): a QP that builds nothing
        // leaves the schedule.
        let n = 2 * self.schedule.len();
        for _ in 0..n {
            let Some((qpn, moved)) = self.next_scheduled(picked) else {
                break;
            };
            if moved {
                continue;
            }
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            self.port_window.before_poll(qp);
            // A reborrow for this QP's turn (the trait object's lifetime
            // shortened to it: `Option` does not coerce on its own).
            let slots = slots.as_mut().map(|s| &mut **s as &mut dyn TxSlots);
            let mut ctx = super::engine_ctx!(self, mem, &mut fx, now, None, None, slots);
            let built = if qp.req_turn {
                requester::poll_transmit(qp, &mut ctx, buf)
                    .or_else(|| responder::poll_transmit(qp, &mut ctx, buf))
            } else {
                responder::poll_transmit(qp, &mut ctx, buf)
                    .or_else(|| requester::poll_transmit(qp, &mut ctx, buf))
            };
            let in_slot = ctx.tx_in_slot;
            qp.req_turn = !qp.req_turn;
            // The QP stays in hand for its upkeep (one lookup a packet, not
            // three): the port window's and the timers', then its place in
            // the schedule; the QPs that upkeep wakes are queued after it
            // is, as when each step looked it up again.
            let woken = self.port_window.after_poll(qp, built.is_some());
            let armed = arm_qp(&mut self.port_window, &mut self.timers, qp);
            let Some(len) = built else {
                qp.scheduled = false;
                if let Some(d) = woken {
                    self.port_wake(d);
                }
                self.after_arm(armed);
                continue;
            };
            // A QP keeps its turn for up to TX_BURST packets in a row.
            let run = if self.tx_burst.0 == qpn {
                self.tx_burst.1 + 1
            } else {
                1
            };
            let lane = super::vl::lane(self.vl_arb, &self.port, qp);
            let front = run < TX_BURST;
            if front {
                self.tx_burst = (qpn, run);
                self.schedule.push_front(&mut qp.sched, lane, qpn);
            }
            if let Some(d) = woken {
                self.port_wake(d);
            }
            self.after_arm(armed);
            if self.vl_arb {
                self.vl_sent(buf, len);
            }
            if !front {
                self.tx_burst = (qpn, 0);
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    self.schedule.push_back(&mut qp.sched, lane, qpn);
                }
            }
            self.counters.tx_packets += 1;
            self.counters.tx_bytes += len as u64;
            out = Some((len, in_slot));
            break;
        }
        self.finish(fx);
        if out.is_none() && self.rd.active() && !rd_first {
            out = self.rd_poll_transmit(mem, now, buf).map(|len| (len, false));
        }
        out
    }

    /// The earliest time [`Self::handle_timeout`] may have work: O(1). It is
    /// never later than a QP's deadline; it may be earlier (a timer that was
    /// pushed back fires as a no-op that re-arms it) unless
    /// [`Self::settle_timers`] ran since the last input.
    pub fn poll_timeout(&self) -> Option<Time> {
        #[cfg(debug_assertions)]
        self.check_timers();
        #[cfg(debug_assertions)]
        self.check_port_window();
        #[cfg(debug_assertions)]
        self.rd.check_timers();
        let t = self.timers.peek().map(|(t, _)| t);
        // The reorder hold's earliest expiry (`reorder`).
        let t = [t, self.hold.next_expiry()].into_iter().flatten().min();
        if !self.rd.active() {
            return t;
        }
        // AD-11: the EE contexts' timers.
        [t, self.rd.next_deadline()].into_iter().flatten().min()
    }

    /// Makes [`Self::poll_timeout`] exact: drops the stale entries at the top
    /// of the timer heap and moves a pushed-back one to its QP's deadline, so
    /// a caller sleeping until `poll_timeout` is not woken for a timer that
    /// progress disarmed (with loss probes every message arms one that its ACK
    /// disarms: a wake-up per message, and on a host whose CPUs the guests'
    /// vCPUs fill, each preempts one). Amortised O(log QPs) per entry pushed.
    pub fn settle_timers(&mut self) {
        while let Some((t, qpn)) = self.timers.peek() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                self.timers.pop();
                continue;
            };
            if qp.timer_at != Some(t) {
                self.timers.pop();
                continue;
            }
            match qp.req.deadline() {
                Some(d) if d <= t => return,
                Some(d) => {
                    self.timers.pop();
                    qp.timer_at = Some(d);
                    self.timers.push(d, qpn);
                }
                None => {
                    self.timers.pop();
                    qp.timer_at = None;
                }
            }
        }
    }

    /// Fires every timer due at `now`: ACK timeouts (RL-10) and RNR waits (RL-11).
    /// Costs O(log QPs) per heap entry due, nothing per QP that is not.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.rd.active() {
            self.rd_handle_timeout(now); // AD-11
        }
        let qps = &mut self.qps;
        let due = self.timers.take_due(now, |qpn, t| match qps.get_mut(&qpn) {
            Some(qp) if qp.timer_at == Some(t) => {
                qp.timer_at = None;
                true
            }
            _ => false,
        });
        let mut fx = Effects::default();
        let mut wake = Vec::new();
        for &qpn in &due {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            // AD-07: a paced QP's time to send came; the other deadlines
            // below are the completer's.
            if qp.req.pace_at.is_some_and(|t| t <= now) {
                qp.req.pace_at = None;
                wake.push(qpn);
            }
            // Issue 31: the congestion controller's timer (`pacing`).
            let (port, c) = (&self.port, &mut self.counters.cc);
            super::pacing::cc_timer(&mut qp.req, port, now, c);
            if qp.req.deadline().is_some_and(|d| d <= now)
                && completer::on_timeout(qp, now, &mut fx, &mut self.counters)
            {
                wake.push(qpn);
            }
        }
        self.finish(fx);
        for q in due {
            self.arm(q);
        }
        for q in wake {
            self.schedule_qp(q);
        }
    }

    /// Keeps the timer heap covering `qpn`'s requester deadline (and the port
    /// window's count, `port_window`) after an input touched the QP. A later deadline (the ACK timer restarted by progress,
    /// the common case) costs nothing: the earlier entry fires, finds the
    /// deadline ahead and re-arms. Only an earlier one is pushed, which leaves
    /// the older entry stale; when stale entries outnumber live ones the heap
    /// is rebuilt, so its size stays O(QPs) whatever a peer sends.
    pub(super) fn arm(&mut self, qpn: u32) {
        // One lookup of the QP for both (this runs for every packet in and
        // out).
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let armed = arm_qp(&mut self.port_window, &mut self.timers, qp);
        self.after_arm(armed);
    }

    /// What [`arm_qp`] left to do with the whole engine at hand.
    fn after_arm(&mut self, armed: Armed) {
        for d in armed.wake.into_iter().flatten() {
            self.port_wake(d);
        }
        if armed.compact {
            let live = self
                .qps
                .values()
                .filter_map(|q| q.timer_at.map(|t| (t, q.qpn)));
            self.timers.compact(self.qps.len(), live);
        }
    }

    /// Debug builds, few QPs: every requester deadline is covered by a live
    /// heap entry no later than it (the invariant [`Self::arm`] keeps).
    #[cfg(debug_assertions)]
    fn check_timers(&self) {
        if self.qps.len() > 64 {
            return;
        }
        for qp in self.qps.values() {
            if let Some(d) = qp.req.deadline() {
                let t = qp
                    .timer_at
                    .unwrap_or_else(|| panic!("QP {} has a deadline {d:?} and no timer", qp.qpn));
                assert!(t <= d, "QP {} timer {t:?} after its deadline {d:?}", qp.qpn);
                assert!(
                    self.timers.holds(t, qp.qpn),
                    "QP {} timer {t:?} not in the heap",
                    qp.qpn
                );
            }
        }
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether an asynchronous event waits for [`Self::poll_event`].
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// The port's link went up or down (AE-01): raises the unaffiliated port
    /// active or port error event. The link's state is its owner's (the
    /// device's port); the engine only reports it.
    pub fn port_changed(&mut self, up: bool) {
        // Only the latest port state matters: an unread change it undoes goes,
        // so a link that flaps while nobody polls (a disabled device) holds
        // one event, not one per flap.
        self.events
            .retain(|e| !matches!(e, Event::PortActive | Event::PortError));
        self.events.push_back(if up {
            Event::PortActive
        } else {
            Event::PortError
        });
    }
}

/// What [`Engine::arm`] must still do once the QP is put down: wake the
/// QPs waiting at these destinations, rebuild the timer heap.
#[must_use]
struct Armed {
    wake: [Option<super::port_window::Dest>; 2],
    compact: bool,
}

/// [`Engine::arm`] on the QP in hand (its number is `qp.qpn`).
fn arm_qp(
    window: &mut super::port_window::PortWindow,
    timers: &mut super::timer_heap::TimerHeap,
    qp: &mut Qp,
) -> Armed {
    // The same moments change the QP's packets in flight.
    let wake = window.sync(qp);
    let qpn = qp.qpn;
    let compact = qp
        .req
        .deadline()
        .is_some_and(|d| timers.arm(&mut qp.timer_at, d, qpn));
    Armed { wake, compact }
}

/// Transport header validation before any QP state is touched (9.6, C9-37..C9-57;
/// PV-02, PV-03, PV-04, PV-05, PV-06). Silent drops (PV-10). The caller has
/// found the QP (C9-37); for a multicast copy (`mcast`, PV-07) it has checked
/// the GRH and the group, and the address checks of a unicast packet do not
/// apply (C9-46: a UD QP checks a DGID only for multicast).
pub(super) fn check_headers(
    port: &PortConfig,
    qp: &Qp,
    pkt: &PacketRepr<'_>,
    mcast: bool,
) -> Result<(), RxDrop> {
    let bth = &pkt.transport.bth;
    if !qp_state::receives_packets(qp.state) {
        return Err(RxDrop::QpNotReceiving); // C9-38, QS-04
    }
    let info = bth.opcode.info();
    let svc_ok = matches!(
        (info.service, qp.init.qp_type),
        (Service::Rc, QpType::Rc) | (Service::Uc, QpType::Uc) | (Service::Ud, QpType::Ud)
    ) || xrc_direction_ok(info, qp.init.qp_type);
    if !svc_ok {
        return Err(RxDrop::ServiceMismatch); // C9-39
    }
    // PV-03: C9-41 QP0 is not checked; C9-42 QP1 against every P_Key of
    // the port's table (AD-05); C9-43 every other QP against its own entry.
    let pkey_ok = match qp.qpn {
        0 => true,
        1 => port.pkey_slot(bth.pkey).is_some(),
        _ => {
            // AD-10: an Armed QP's alternate path has its own P_Key index.
            let alt = super::apm::alt_active(qp).then_some(qp.attr.alt_pkey_index);
            core::iter::once(qp.attr.pkey_index).chain(alt).any(|i| {
                port.pkeys
                    .get(usize::from(i))
                    .is_some_and(|&own| pkey_match(bth.pkey, own))
            })
        }
    };
    if !pkey_ok {
        return Err(RxDrop::BadPkey);
    }
    if port.is_ethernet() && !mcast {
        return check_roce_addresses(port, qp, pkt);
    }
    let lrh = &pkt.lrh;
    // C9-55: the permissive LID is a valid DLID only for QP0, whatever the
    // service (UD checks no other DLID rule, C9-53; PV-06).
    if lrh.dlid == PERMISSIVE_LID && qp.qpn != super::SMI_QPN {
        return Err(RxDrop::BadDlid);
    }
    if qp.init.qp_type != QpType::Ud {
        check_grh(port, qp, pkt)?;
        // C9-53, C9-54: connected services check both LIDs (UD checks
        // neither); C9-56: a multicast SLID is never valid; C9-55: the
        // permissive LID only for QP0. That the DLID is one of the port's
        // `check_lids` found already.
        if (0xc000..0xffff).contains(&lrh.slid) || lrh.slid == PERMISSIVE_LID {
            return Err(RxDrop::BadSlid);
        }
        // C9-54 items 3 and 4: the primary path's remote LID, or the
        // alternate's while Armed (AD-10).
        if !super::apm::rx_paths(qp).any(|p| p.dlid == lrh.slid) {
            return Err(RxDrop::BadSlid);
        }
    } else {
        // C9-48..C9-51: the Q_Key; QP1 uses the well-known one; QP0's is not
        // checked (C9-48).
        let deth = pkt.transport.ext.deth.map(|d| d.qkey).unwrap_or(0);
        if deth != qp.attr.qkey && qp.qpn != super::SMI_QPN {
            return Err(RxDrop::BadQkey);
        }
    }
    Ok(())
}

/// The GRH rules of a connected QP on InfiniBand (9.6.1.2; PV-04). IPVer 6
/// and NxtHdr 0x1B (C9-44, C9-45) the parse checked already. The GRH must be
/// there exactly when the QP's path has one (C9-43.1.2: the QP is configured
/// to need it or not); when there, the DGID must be this port's GID and the
/// SGID the path's remote GID, either also with the default prefix
/// 0xFE80::/64 in front of the same low 64 bits; reserved (::), loopback
/// (::1) and multicast GIDs are never valid (C9-47.1.1). While the QP is
/// Armed its alternate path's GIDs are valid too (DGID steps 6-7, SGID steps
/// 5-6; AD-10): the packet passes when it matches either path.
fn check_grh(port: &PortConfig, qp: &Qp, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
    let mut last = Err(RxDrop::GrhMismatch);
    for av in super::apm::rx_paths(qp) {
        last = check_grh_path(port, av.grh.as_ref(), pkt);
        if last.is_ok() {
            return last;
        }
    }
    last
}

/// [`check_grh`] against one path.
fn check_grh_path(
    port: &PortConfig,
    path: Option<&crate::verbs::GlobalRoute>,
    pkt: &PacketRepr<'_>,
) -> Result<(), RxDrop> {
    let (grh, path) = match (pkt.grh.as_ref(), path) {
        (None, None) => return Ok(()),
        (Some(g), Some(p)) => (g, p),
        _ => return Err(RxDrop::GrhMismatch),
    };
    let special = |g: &[u8; 16]| {
        let v = u128::from_be_bytes(*g);
        v == 0 || v == 1 || is_multicast_gid(g)
    };
    let matches = |got: &[u8; 16], want: &[u8; 16]| {
        got == want || (got[..8] == DEFAULT_GID_PREFIX && got[8..] == want[8..])
    };
    if special(&grh.dgid) || !matches(&grh.dgid, &port.gid()) {
        return Err(RxDrop::BadGrhGid);
    }
    if special(&grh.sgid) || !matches(&grh.sgid, &path.dgid) {
        return Err(RxDrop::BadGrhGid);
    }
    Ok(())
}

/// The default GID prefix, 0xFE80::/64 (4.1.1).
const DEFAULT_GID_PREFIX: [u8; 8] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0];

/// The P_Key matching rule of 10.9.3 (PV-03): the partition numbers (low 15
/// bits) are equal and not 0 (the invalid P_Key), and at least one side is a
/// full member (bit 15): two limited members of a partition may not talk.
pub(crate) fn pkey_match(a: u16, b: u16) -> bool {
    a & 0x7fff == b & 0x7fff && a & 0x7fff != 0 && (a | b) & 0x8000 != 0
}

impl PortConfig {
    /// The index of the first entry of the P_Key table that `pkey` matches
    /// (10.9.3, PV-03): what QP1 checks a packet against (C9-42) and reports
    /// as its receive completion's `pkey_index`.
    pub fn pkey_slot(&self, pkey: u16) -> Option<u16> {
        self.pkeys
            .iter()
            .position(|&own| pkey_match(pkey, own))
            .and_then(|i| u16::try_from(i).ok())
    }

    /// The SLID of a path with `path_bits` (AD-01): the base LID with the low
    /// `lmc` bits replaced by the path bits; bits above the LMC are ignored,
    /// as the port owns only its 2^LMC LIDs.
    pub fn slid(&self, path_bits: u8) -> u16 {
        let m = (1u16 << self.lmc.min(7)) - 1;
        (self.lid & !m) | (u16::from(path_bits) & m)
    }
}

/// SR-02, C9-39: an XRC packet is for an XRC QP, its requests for a TGT QP
/// (which has no send side) and its responses for an INI QP (no receive side).
fn xrc_direction_ok(info: &crate::wire::opcode::OpcodeInfo, t: QpType) -> bool {
    use crate::wire::opcode::Direction;
    matches!(
        (info.service, info.direction(), t),
        (Service::Xrc, Direction::Request, QpType::XrcTgt)
            | (Service::Xrc, Direction::Response, QpType::XrcIni)
    )
}

/// The LID checks every native packet passes before its QP is looked up, the
/// one place the port accepts a DLID and judges the sender (the link checks
/// neither, ARCHITECTURE.md §2): the DLID is one of the port's LIDs (the base
/// LID with any path bits of its LMC, AD-01) or the permissive LID (7.11.1);
/// the SLID is the LID of the node the link took the packet from, when the
/// link knows it (ARCHITECTURE.md §9: a peer cannot send in another node's
/// name). The connected-service rules on top (C9-53..C9-56) are
/// `check_headers`'.
fn check_lids(port: &PortConfig, pkt: &PacketRepr<'_>, src_lid: Option<u16>) -> Result<(), RxDrop> {
    super::vl::check_rx(port, pkt)?; // AD-06
    let lrh = &pkt.lrh;
    let mask = !((1u16 << port.lmc.min(7)) - 1);
    // PV-07: a multicast LID is a valid DLID for a multicast packet (C9-54
    // item 2); the group's MLID is checked with the group.
    let mcast = is_multicast_lid(lrh.dlid) && pkt.transport.bth.dest_qp == MULTICAST_QPN;
    if lrh.dlid != PERMISSIVE_LID && lrh.dlid & mask != port.lid & mask && !mcast {
        return Err(RxDrop::BadDlid); // C9-53, PV-06
    }
    // A node of LMC > 0 sends from any of its LIDs (AD-01): the link names
    // the LID it found the SLID in (`fabric`), or the node's base LID.
    if src_lid.is_some_and(|s| s != lrh.slid) {
        return Err(RxDrop::SpoofedSlid);
    }
    Ok(())
}

/// The address checks of a RoCE port, in place of the LID checks (A17.4.5):
/// the destination IP is one of the port's GIDs; a connected QP takes packets
/// only from its path's DGID to its path's SGID (as LIDs C9-53, C9-54); UD
/// checks the Q_Key (C9-48..C9-51).
pub(super) fn check_roce_addresses(
    port: &PortConfig,
    qp: &Qp,
    pkt: &PacketRepr<'_>,
) -> Result<(), RxDrop> {
    let Some(grh) = pkt.grh.as_ref() else {
        return Err(RxDrop::BadGid);
    };
    if !port.roce_gids.iter().flatten().any(|g| *g == grh.dgid) {
        return Err(RxDrop::BadGid);
    }
    if qp.init.qp_type == QpType::Ud {
        let deth = pkt.transport.ext.deth.map(|d| d.qkey).unwrap_or(0);
        if deth != qp.attr.qkey {
            return Err(RxDrop::BadQkey);
        }
        return Ok(());
    }
    // AD-10: the alternate path's GIDs too while Armed.
    let ok = super::apm::rx_paths(qp)
        .filter_map(|av| av.grh.as_ref())
        .any(|path| {
            grh.sgid == path.dgid && link::source_gid(port, path.sgid_index) == Some(grh.dgid)
        });
    if !ok {
        return Err(RxDrop::BadGid);
    }
    Ok(())
}
