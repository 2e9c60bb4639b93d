//! One HCA port: the transport engine joined to its fabric link (ARCHITECTURE.md §2
//! steps 3-4, §6). The port moves packets between the two and fires timers; it
//! knows nothing of guest rings or PCI, so the same loop runs in the device and in
//! tests over a `VecMemory`.
//!
//! Time: the link takes a `Duration` since the Unix epoch, the engine a
//! `transport::verbs::Time` in nanoseconds; the port uses one origin for both, so a
//! deadline from either compares with the other.

use std::os::fd::RawFd;
use std::time::Duration;

use transport::engine::Engine;
use transport::mad::portinfo::{phys_state, port_state};
use transport::memory::Memory;
use transport::verbs::Time;

use crate::fabric::{Link, LinkError, MAX_PACKET_LEN};
use crate::mgmt::Mgmt;

/// Packets moved per direction in one [`Port::run_once`] at most, so that a
/// flood in one direction cannot starve the other or the guest's doorbells.
pub const BUDGET: usize = 64;

/// What the port itself counts (the engine and the link stages count the rest).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PortCounters {
    /// Packets handed from the link to the engine.
    pub rx_packets: u64,
    /// Packets handed from the engine to the link.
    pub tx_packets: u64,
    /// Link calls that failed (socket errors, not per-packet drops); the packet of
    /// a failed send is lost, which the transport recovers from like any loss.
    pub link_errors: u64,
    /// Times the link went down (port error events, AE-01).
    pub link_down: u64,
    /// Times it came back up (port active events).
    pub link_up: u64,
    /// Rounds whose sends stopped because the link had no room (link flow
    /// control holding packets for credit, IBA 7.9).
    pub tx_link_full: u64,
}

/// An engine and the link of its port.
pub struct Port {
    engine: Engine,
    link: Box<dyn Link + Send>,
    tx: Box<[u8]>,
    counters: PortCounters,
    /// The port's state as last seen on the link (AE-01; QUERY_PORT).
    up: bool,
    /// The management plane of an InfiniBand port (its SMA, `mgmt`); a RoCE
    /// port has none (no QP0, IBA A17.2).
    mgmt: Option<Mgmt>,
    /// What the link was last told of the SM's PortPhysicalState Disabled.
    disabled: bool,
}

/// Where packets start in the transmit buffer: payloads then sit 16-byte aligned
/// for the CRC fold (`wire::packet::BUFFER_ALIGN_OFFSET`).
const TX_OFFSET: usize = transport::wire::packet::BUFFER_ALIGN_OFFSET;

fn to_time(now: Duration) -> Time {
    Time(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX))
}

/// The port's link as the engine's [`transport::engine::TxSlots`] (issue 30).
struct LinkSlots<'a>(&'a mut (dyn Link + Send));

impl transport::engine::TxSlots for LinkSlots<'_> {
    fn payload_slot(
        &mut self,
        dlid: u16,
        at: usize,
        len: usize,
    ) -> Option<vm_memory::VolatileSlice<'_>> {
        self.0.payload_slot(dlid, at, len)
    }
}

impl Port {
    pub fn new(engine: Engine, link: Box<dyn Link + Send>) -> Port {
        Port {
            engine,
            link,
            tx: vec![0; MAX_PACKET_LEN + TX_OFFSET].into_boxed_slice(),
            counters: PortCounters::default(),
            up: true,
            mgmt: None,
            disabled: false,
        }
    }

    /// A port with a management plane (an InfiniBand port's SMA): the SM's
    /// values and port state rule from now on.
    pub fn with_mgmt(engine: Engine, link: Box<dyn Link + Send>, mgmt: Mgmt) -> Port {
        let mut p = Port::new(engine, link);
        p.mgmt = Some(mgmt);
        p
    }

    /// Replaces the engine (device reset, a new client): every QP, CQ and MR of
    /// the old one is gone; the link stays, and so does what the SM set.
    /// What the guest's driver told the SMA goes with it (`Mgmt::guest_gone`).
    pub fn set_engine(&mut self, engine: Engine, now: Duration) {
        self.engine = engine;
        if let Some(m) = &mut self.mgmt {
            m.restore(&mut self.engine);
            m.guest_gone(to_time(now));
        }
        self.link.clear();
    }

    /// The management plane, if the port has one.
    pub fn mgmt(&self) -> Option<&Mgmt> {
        self.mgmt.as_ref()
    }

    /// The next port event for the guest (LID, P_Key, SM, GID changes, client
    /// reregister), from the SMA.
    pub fn poll_port_event(&mut self) -> Option<crate::mgmt::PortEvent> {
        self.mgmt.as_mut()?.poll_event()
    }

    /// MAD_IFC: the guest's MAD layer hands the SMA a MAD; `None` without one.
    pub fn mad_ifc(
        &mut self,
        mad: &[u8; transport::mad::MAD_LEN],
        slid: u16,
        now: Duration,
    ) -> Option<crate::mgmt::MadIfcResult> {
        let m = self.mgmt.as_mut()?;
        Some(m.mad_ifc(mad, slid, to_time(now), &mut self.engine))
    }

    /// SET_PORT_CAPS: the guest's agents to the SMA's CapabilityMask; `None`
    /// without an SMA.
    pub fn set_port_caps(
        &mut self,
        set: u32,
        clear: u32,
        now: Duration,
    ) -> Option<Result<u32, transport::mad::HostCapError>> {
        let m = self.mgmt.as_mut()?;
        Some(m.set_port_caps(set, clear, to_time(now)))
    }

    /// SET_NODE_DESC: the guest's node description to the SMA; `None` without
    /// one.
    pub fn set_node_description(
        &mut self,
        desc: transport::mad::NodeDescription,
        now: Duration,
    ) -> Option<bool> {
        let m = self.mgmt.as_mut()?;
        Some(m.set_node_description(desc, to_time(now)))
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    pub fn link(&self) -> &(dyn Link + Send) {
        &*self.link
    }

    pub fn counters(&self) -> &PortCounters {
        &self.counters
    }

    /// Whether the port is active: its link up (AE-01). QUERY_PORT reports it.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// The data path is about to sleep (true) or has woken (false):
    /// [`Link::set_sleeping`]. After `true`, [`Port::next_deadline`] says
    /// whether the link got something in between.
    pub fn set_link_sleeping(&mut self, sleeping: bool) {
        self.link.set_sleeping(sleeping)
    }

    /// The descriptor to wait on for received packets.
    pub fn raw_fd(&self) -> RawFd {
        self.link.raw_fd()
    }

    /// The earliest time the port needs [`Port::run_once`] again without a packet
    /// arriving: an engine timer (ACK, RNR) or a packet the link holds.
    pub fn next_deadline(&self) -> Option<Duration> {
        let e = self
            .engine
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.0));
        let m = self
            .mgmt
            .as_ref()
            .and_then(Mgmt::poll_timeout)
            .map(|t| Duration::from_nanos(t.0));
        [e, self.link.poll_timeout(), m].into_iter().flatten().min()
    }

    /// One round as of `now`: due timers, then up to [`BUDGET`] received packets
    /// into the engine, then up to [`BUDGET`] packets out of it. Returns the
    /// packets moved, so a caller polling adaptively knows whether there was work.
    pub fn run_once(&mut self, mem: &mut dyn Memory, now: Duration) -> usize {
        self.run_receive(mem, now) + self.run_send(mem, now)
    }

    /// The first half of [`Port::run_once`]: due timers, then the received
    /// packets into the engine. A caller may take the engine's completions
    /// out before [`Port::run_send`] (issue 30 item 3: a receive's CQE does
    /// not wait for the ACK's system call).
    pub fn run_receive(&mut self, mem: &mut dyn Memory, now: Duration) -> usize {
        let t = to_time(now);
        // A Set by MAD_IFC (the guest's own SM) since the last round.
        self.follow_disabled();
        if let Err(e) = self.link.handle_timeout(now) {
            self.link_error("timeout", &e);
        }
        self.follow_link(now);
        self.follow_sm_down(now);
        if self.engine.poll_timeout().is_some_and(|d| d <= t) {
            self.engine.handle_timeout(t);
        }
        if let Some(m) = &mut self.mgmt {
            if m.poll_timeout().is_some_and(|d| d <= t) {
                m.handle_timeout(t, &mut self.engine);
            }
        }
        // Received packets go from the link's receive buffers to the engine as
        // lent slices: no copy between the kernel and the engine (ARCHITECTURE.md
        // §2, "A received packet"). On an InfiniBand port VL15 goes to the SMA
        // first (`mgmt`), and data packets pass only while the SM lets them.
        let engine = &mut self.engine;
        let mgmt = &mut self.mgmt;
        let mut moved = 0;
        let got = self.link.recv_batch(now, BUDGET, &mut |r| {
            moved += 1;
            if let Some(m) = mgmt.as_mut() {
                if transport::wire::vl_of(r.packet) == transport::engine::VL15 {
                    // One count per packet: the engine counts what goes on
                    // to QP0 when it gets it.
                    if !m.on_vl15(r.packet, t, engine) {
                        engine.count_rx_elsewhere(r.len());
                    }
                    return;
                }
                if !m.data_packet_received(t, engine) {
                    engine.count_rx_elsewhere(r.len());
                    return;
                }
            }
            let from = transport::engine::RxFrom {
                src_lid: r.src_lid,
                crcs_vouched: r.crcs_vouched,
            };
            match r.lent {
                // Issue 30: placed from the ring slot, one copy.
                Some(lent) => engine.handle_received_lent(lent, from, mem, t),
                None => engine.handle_received(r.packet, from, mem, t),
            }
        });
        // Counted as delivered, also when the link failed after some.
        self.counters.rx_packets += moved as u64;
        if let Err(e) = got {
            self.link_error("receive", &e);
        }
        // SMPs for the guest's SM or agents, through its QP0 (`mgmt`).
        if let Some(m) = &mut self.mgmt {
            while let Some(p) = m.poll_qp0() {
                self.engine.handle_packet(&p, mem, t);
            }
        }
        moved
    }

    /// The second half of [`Port::run_once`]: up to [`BUDGET`] packets out of
    /// the engine, as one batch to the link.
    pub fn run_send(&mut self, mem: &mut dyn Memory, now: Duration) -> usize {
        let t = to_time(now);
        let mut moved = 0;
        // The round's packets go to the link as one batch (on UDP one
        // sendmmsg, a GSO send per run of same-size packets; issue 12).
        self.link.begin_sends();
        let mut smps = 0;
        while let Some(p) = self
            .mgmt
            .as_mut()
            .and_then(|m| m.poll_wire(t, &self.engine))
        {
            moved += 1;
            smps += 1;
            self.counters.tx_packets += 1;
            self.engine.count_tx_elsewhere(p.len());
            if let Err(e) = self.link.send(now, &p) {
                self.link_error("send", &e);
            }
            if smps >= BUDGET {
                break;
            }
        }
        for _ in 0..BUDGET {
            // Link flow control (IBA 7.9): while the link holds packets
            // waiting for credit, or a shared-memory ring to a peer is full
            // (`fabric/shm_hold.rs`, bounded), the engine keeps the rest in
            // its own bounded windows; nothing queues past the link's bound.
            if !self.link.tx_room(now) {
                self.counters.tx_link_full += 1;
                break;
            }
            // Issue 30: where the link computes the CRCs (the shared-memory
            // link), a data packet's payload is built straight in the
            // peer's ring slot the link gives (`TxSlots`), the rest in the
            // port's buffer. Else built in the link's own buffer where it
            // lends one (UDP: queued as built, no copy), else in the port's.
            let (buf, lent, in_slot) = if self.engine.port().crcs_by_link {
                let buf = &mut self.tx[TX_OFFSET..];
                let mut slots = LinkSlots(&mut *self.link);
                let Some((len, in_slot)) = self.engine.poll_transmit_into(mem, t, buf, &mut slots)
                else {
                    break;
                };
                (&mut buf[..len], false, in_slot)
            } else {
                let (buf, lent) = match self.link.send_buffer() {
                    Some(b) => (b, true),
                    None => (&mut self.tx[TX_OFFSET..], false),
                };
                let Some(len) = self.engine.poll_transmit(mem, t, buf) else {
                    break;
                };
                (&mut buf[..len], lent, false)
            };
            let len = buf.len();
            moved += 1;
            if let Some(m) = self.mgmt.as_mut() {
                // IBA 7.2: only an Active port sends data packets; SMPs (VL15)
                // go in every state with the link up.
                if transport::wire::vl_of(buf) != transport::engine::VL15 && !m.sends_data() {
                    m.count_tx_not_active();
                    continue;
                }
            }
            self.counters.tx_packets += 1;
            let packet = &self.tx[TX_OFFSET..TX_OFFSET + len];
            let sent = if lent {
                self.link.send_from_buffer(now, len)
            } else if in_slot {
                self.link.send_slotted(now, packet)
            } else {
                self.link.send(now, packet)
            };
            if let Err(e) = sent {
                self.link_error("send", &e);
            }
        }
        if let Err(e) = self.link.end_sends() {
            self.link_error("send", &e);
        }
        // After the round's sends: the response to the SubnSet that disabled
        // the port has gone out (as a real port answers, then turns off).
        self.follow_disabled();
        // The data path sleeps until `next_deadline`: not for a disarmed timer.
        self.engine.settle_timers();
        moved
    }

    /// Flushes the link's buffered output (the capture file) before exit.
    pub fn flush_link(&mut self) {
        if let Err(e) = self.link.flush() {
            self.link_error("flush", &e);
        }
    }

    /// AE-01: a change of the link's state becomes the port's, and a port
    /// active or port error event for the driver.
    fn follow_link(&mut self, now: Duration) {
        let up = self.link.is_up();
        if up == self.up {
            return;
        }
        self.up = up;
        if up {
            self.counters.link_up += 1;
            log::info!("port: link up");
        } else {
            self.counters.link_down += 1;
            log::warn!("port: link down");
        }
        match &mut self.mgmt {
            // The SMA's port state machine decides what the guest hears.
            Some(m) => m.link_changed(up, to_time(now), &mut self.engine),
            None => self.engine.port_changed(up),
        }
    }

    /// An SM's PortState Down (a SubnSet(PortInfo) last round, on the wire or
    /// by MAD_IFC) takes the port through its LinkDownDefaultState and the
    /// link retrains (IBA 7.2, 14.2.5.6 PortState): with the link still up
    /// and not Disabled the port comes back to Init at once and waits there
    /// for the SM, as after any link up. OpenSM may set an Active port it
    /// takes over Down and bring it up again from Init; left Down with its
    /// link up, the port would never come back.
    fn follow_sm_down(&mut self, now: Duration) {
        let Some(m) = &mut self.mgmt else { return };
        if self.up && m.port_state() == port_state::DOWN && m.phys_state() != phys_state::DISABLED {
            m.link_changed(true, to_time(now), &mut self.engine);
        }
    }

    /// The SM's PortPhysicalState into the link (IBA 14.2.5.6): Disabled turns
    /// the PHY off (no keepalives, nothing sent or taken, the link partner goes
    /// down after its silence; `follow_link` then sees the link down), Polling
    /// on again (up, and the port in Init, when the partner is heard).
    fn follow_disabled(&mut self) {
        let disabled = self
            .mgmt
            .as_ref()
            .is_some_and(|m| m.phys_state() == phys_state::DISABLED);
        if disabled != self.disabled {
            log::info!(
                "port: {} by the SM",
                if disabled { "disabled" } else { "enabled" }
            );
            self.link.set_disabled(disabled);
            self.disabled = disabled;
        }
    }

    fn link_error(&mut self, what: &str, e: &LinkError) {
        self.counters.link_errors += 1;
        // A link that keeps failing (its TAP deleted) must not flood the log:
        // the first few, then every 1000th (the counter has the total).
        let n = self.counters.link_errors;
        if n <= 10 || n.is_multiple_of(1000) {
            log::warn!("port: link {what} failed ({n} so far): {e}");
        }
    }
}
