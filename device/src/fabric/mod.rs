//! The fabric: how a `vhca` device's port moves native InfiniBand packets (over
//! UDP) or RoCEv2 frames (on a TAP) to other devices (ARCHITECTURE.md §6).
//!
//! - [`FabricFile`]: the nodes of the fabric (LID, port GUID, UDP address), read
//!   from a TOML file; it stands in for a subnet manager's assignment.
//! - [`Link`]: what the device needs from a port: send one packet (routed by its
//!   LRH:DLID), lend received packets without blocking, a file descriptor to wait on, and a
//!   deadline for work the link holds itself. [`UdpLink`] is the `ib-udp` mode;
//!   [`TapLink`] the `roce` mode (RoCEv2 frames on a TAP shared with the guest's
//!   virtio-net, WF-10).
//! - Stages that wrap any [`Link`]: [`FaultLink`] (seeded drop, duplicate, reorder,
//!   corrupt, delay), [`CaptureLink`] (every packet to a pcap file, WF-11) and
//!   [`AuthLink`] (the fabric key: a sequence number and a keyed tag on every
//!   datagram, issue 13, ARCHITECTURE.md §9) and [`FlowLink`] (IBA 7.9
//!   credit-based link flow control on a cabled port, issue 27 item 4).
//! - [`ShmLink`]: the `ib-udp` link of a node with co-located peers (`host` in
//!   the fabric file): shared-memory rings to them, UDP to the rest (issue 30).
//!
//! Like the transport engine (ARCHITECTURE.md §3), nothing here reads a clock: every call
//! takes `now`, the caller's time since the Unix epoch, so a stage's behaviour is a
//! function of its inputs and the capture timestamps are the caller's. Only
//! [`UdpLink`] and [`TapLink`] do I/O, and never block.

use std::os::fd::RawFd;
use std::time::Duration;

mod auth;
mod cabling;
mod capture;
mod colocated;
mod fault;
mod file;
mod flow;
mod ib_cc;
mod liveness;
mod partition;
mod shm;
mod shm_hold;
pub(crate) mod shm_ring;
mod shm_sys;
mod tap;
mod tap_gso;
mod tap_sys;
mod topology;
mod udp;
mod udp_counters;
mod udp_drops;
mod udp_sys;
mod underlay;
mod vl_arb;

pub use auth::{
    AuthCounters, AuthLink, FabricKey, FabricKeyError, KEY_LEN, MAX_AHEAD, REPLAY_WINDOW, SEQ_LEN,
    TAG_LEN, TRAILER_LEN,
};
pub use cabling::{Cabling, End, SwitchSpec, MAX_SWITCH_PORTS};
pub use capture::{CaptureCounters, CaptureLink, FLUSH_AFTER as CAPTURE_FLUSH_AFTER};
pub use colocated::{Hosts, DEFAULT_SHM_DIR};
pub use fault::{
    FaultCounters, FaultLink, FaultSpec, FaultSpecError, DELAY_CAPACITY, MAX_DELAY, REORDER_HOLD,
};
pub use file::{FabricFile, FabricFileError, Node, MAX_UNICAST_LID, PROGRAMMATIC};
pub use flow::{
    grant as flow_grant, Charge, FlowLink, FlowLinkCounters, HCA_QUEUE_BLOCKS, MAX_PACKET_BLOCKS,
    RESERVE as FLOW_RESERVE, SOCKET_BYTES_PER_BLOCK,
};
pub use ib_cc::IbCc;
pub use liveness::{
    Liveness, LivenessCounters, BEAT as KEEPALIVE_BEAT, DEAD_AFTER as PORT_DEAD_AFTER, KEEPALIVE,
};
pub use partition::{PortAttrs, DEFAULT_PKEY, MAX_LMC, MAX_PKEYS};
pub use shm::{
    ring_path as shm_ring_path, ShmCounters, ShmLink, CORRUPT_BACKOFF as SHM_CORRUPT_BACKOFF,
    DOORBELL as SHM_DOORBELL, STALL_AFTER as SHM_STALL_AFTER,
};
pub use shm_hold::HOLD_MAX as SHM_HOLD_MAX;
pub use shm_ring::{
    Push as ShmPush, RxRing as ShmRxRing, TxRing as ShmTxRing, RING_BYTES as SHM_RING_BYTES,
    SLOTS as SHM_SLOTS, SLOT_SIZE as SHM_SLOT_SIZE,
};
pub use tap::{
    classify, format_mac, vnet_hdr_ok, FrameClass, PushError, Tap, TapCounters, TapLink, ToGuest,
    MAX_FRAME_LEN, TAP_LOOPBACK_CAPACITY, TAP_STATE_CHECK, TO_GUEST_BYTES, TO_GUEST_FRAMES,
    VNET_HDR_LEN,
};
pub use tap_gso::GSO_MAX_SEGS;
pub use tap_sys::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN, TUN_F_USO4, TUN_F_USO6};
pub use topology::{generate as topology_text, Shape, Topology, TopologyError};
pub use udp::{UdpCounters, UdpLink, UdpOffloads, LOOPBACK_CAPACITY};
pub use underlay::{
    ib_mtu_for, is_dont_fragment, path_mtu, port_mtu, set_int as set_int_sockopt, LOOPBACK_MTU,
    MAX_EXT_HEADERS, MAX_PACKET_OVERHEAD,
};

pub use transport::wire::MAX_PACKET_LEN;

/// The shortest native packet with a transport: LRH (8) + BTH (12) + ICRC (4) +
/// VCRC (2). The UDP link sends nothing shorter (counted as `drop_tx_short`); a
/// shorter one received is the engine's parse to drop (ARCHITECTURE.md §2).
pub const MIN_PACKET_LEN: usize = 8 + 12 + 4 + 2;

/// The permissive DLID (IBA 7.11.1): accepted by every port.
pub const PERMISSIVE_LID: u16 = 0xffff;

/// Why a link call failed. A packet the fabric cannot deliver is not an error but a
/// counted drop, as on a real fabric; errors are about the link itself.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The node named for this link is not in the fabric file.
    #[error("node `{0}` is not in the fabric file")]
    UnknownNode(String),
    /// Binding the node's UDP address failed.
    #[error("cannot bind UDP {address} for node `{node}`: {source}")]
    Bind {
        node: String,
        address: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// A socket handed to the link is bound elsewhere than the node's address.
    #[error("socket is bound to {actual}, but node `{node}` is at {expected} in the fabric file")]
    AddressMismatch {
        node: String,
        expected: std::net::SocketAddr,
        actual: std::net::SocketAddr,
    },
    /// A receive buffer shorter than [`MAX_PACKET_LEN`]; nothing was consumed.
    #[error("receive buffer of {have} bytes, need {MAX_PACKET_LEN}")]
    BufferTooSmall { have: usize },
    /// The socket failed in a way that is not a per-packet drop.
    #[error("UDP socket error: {0}")]
    Io(#[from] std::io::Error),
    /// The underlay cannot carry the port's packets unfragmented, or the
    /// fabric file asks for a larger MTU than it carries (issue 27 item 3).
    #[error("node `{node}`: {why}")]
    Mtu { node: String, why: String },
    /// Making the shared-memory ring from a co-located node failed (issue 30).
    #[error("shared-memory ring {path}: {source}")]
    Shm {
        path: String,
        source: std::io::Error,
    },
    /// Opening or using the TAP device failed.
    #[error("TAP {name}: {source}")]
    Tap {
        name: String,
        source: std::io::Error,
    },
}

/// A received packet, lent by the link to the caller of [`Link::recv_batch`] for
/// the length of one callback: the bytes are the link's receive buffer itself (the
/// kernel's recvmmsg or read(2) wrote them there), so nothing is copied between
/// the kernel and the engine (ARCHITECTURE.md §2, "A received packet").
#[derive(Debug, Clone, Copy)]
pub struct Received<'a> {
    /// The packet as the link layer carries it (a native packet, LRH through
    /// VCRC; or a RoCEv2 frame), at most [`MAX_PACKET_LEN`] bytes. Not checked
    /// beyond that: every check of its contents is the engine's
    /// (`Engine::handle_packet_from`). Only its first
    /// [`transport::engine::LENT_HEAD`] bytes when it is [`Received::lent`].
    pub packet: &'a [u8],
    /// The whole packet where it lies, when the link lends it in place (the
    /// shared-memory link's ring slot, issue 30): memory another process can
    /// write, so it is copied, never borrowed (`Engine::handle_received_lent`
    /// places its payload from there, one copy). `packet` is then a private
    /// copy of its head: LRH, GRH and transport headers, for the stages that
    /// look at them. Only a link whose CRCs were taken ([`Link::take_crcs`])
    /// lends, so only stages that read no more than the LRH and the length
    /// ([`Received::len`]) ever see it; never a VL15 packet.
    pub lent: Option<vm_memory::VolatileSlice<'a>>,
    /// The LID of the fabric node the packet came from, as only the link can
    /// know it (the UDP link: the node whose address sent the datagram); the
    /// engine drops a packet whose LRH:SLID is another (a spoofed source,
    /// ARCHITECTURE.md §9). `None` where the link cannot tell (TAP: RoCE
    /// carries its addresses in the packet).
    pub src_lid: Option<u16>,
    /// The packet came through memory and its sender left its CRCs out
    /// ([`Link::take_crcs`]): the engine does not check them. A stage that
    /// changes a packet (fault injection's corruption) clears it.
    pub crcs_vouched: bool,
}

impl Received<'_> {
    /// The packet's length (also of a lent one).
    pub fn len(&self) -> usize {
        self.lent.map_or(self.packet.len(), |l| l.len())
    }

    /// Whether the packet is empty (never, from a link).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the whole packet into `buf` (at least [`Received::len`]
    /// bytes); returns its length.
    pub fn copy_to(&self, buf: &mut [u8]) -> usize {
        match self.lent {
            Some(l) => l.copy_to(buf),
            None => {
                buf[..self.packet.len()].copy_from_slice(self.packet);
                self.packet.len()
            }
        }
    }
}

/// A port's link to the fabric (ARCHITECTURE.md §6: link modes share one trait).
///
/// `now` is the caller's time since the Unix epoch; it must not go backwards.
/// Stages that hold packets (delay, reorder) release them on any call whose `now` has
/// reached their time, so the caller's loop is: wait on [`Link::raw_fd`] until
/// [`Link::poll_timeout`], call [`Link::handle_timeout`], drain [`Link::recv_batch`].
///
/// Receive checks have one owner each (ARCHITECTURE.md §2): a link checks only
/// what the packet does not say — where it came from (the UDP source address),
/// whether it fits a receive buffer, where a TAP frame goes (engine or guest) —
/// and the engine parses the packet once and does every check of its contents.
pub trait Link {
    /// Sends one native packet, LRH through VCRC, to the node holding its LRH:DLID.
    /// An undeliverable packet is dropped and counted, not an error.
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError>;

    /// Lends up to `max` received packets, one by one, to `deliver`, straight
    /// from the link's receive buffers; returns how many. Never blocks: 0 when
    /// nothing is waiting. What the link drops on the way (unknown sender,
    /// oversized) it counts and does not deliver.
    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError>;

    /// Copies the next received packet into `buf` (at least [`MAX_PACKET_LEN`]
    /// bytes) and returns its length, or `None` when nothing is waiting. Never
    /// blocks. For tests and tools: the port uses [`Link::recv_batch`], which
    /// does not copy.
    fn recv(&mut self, now: Duration, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if buf.len() < MAX_PACKET_LEN {
            return Err(LinkError::BufferTooSmall { have: buf.len() });
        }
        let mut got = None;
        self.recv_batch(now, 1, &mut |r| {
            got = Some(r.copy_to(buf));
        })?;
        Ok(got)
    }

    /// The descriptor that becomes readable when a packet arrives (for epoll).
    fn raw_fd(&self) -> RawFd;

    /// The earliest time at which the link has work the descriptor will not signal:
    /// a held packet to release, or a looped-back packet (or one read from the
    /// kernel already) waiting in [`Link::recv_batch`] (then a time at or before
    /// the last `now`). `None`: nothing pending.
    fn poll_timeout(&self) -> Option<Duration>;

    /// Does whatever [`Link::poll_timeout`] asked for, as of `now`.
    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError>;

    /// Writes out whatever a stage buffers (a capture file) before the process
    /// ends. Nothing by default.
    fn flush(&mut self) -> Result<(), LinkError> {
        Ok(())
    }

    /// One line of the link's own counters for the device's counter report, if
    /// it keeps any beyond the port's.
    fn report(&self) -> Option<String> {
        None
    }

    /// The fabric key stage's counters, if the link has one (stages forward
    /// the question to the link they wrap): the device's counter set shows
    /// them (issue 13).
    fn auth_counters(&self) -> Option<AuthCounters> {
        None
    }

    /// Forgets the packets the link holds for its own port (its loopback
    /// queue, held or delayed packets): at a device reset the engine that sent
    /// them is gone, and a new QP with the same number must not receive them.
    fn clear(&mut self) {}

    /// The sends that follow, up to [`Link::end_sends`], may be queued and
    /// handed to the kernel together (the UDP link: one sendmmsg per batch;
    /// issue 12). Without it every send goes out at once. Nothing by default.
    fn begin_sends(&mut self) {}

    /// Sends whatever [`Link::begin_sends`] let the link queue, and goes back
    /// to sending at once. Nothing by default.
    fn end_sends(&mut self) -> Result<(), LinkError> {
        Ok(())
    }

    /// Between [`Link::begin_sends`] and [`Link::end_sends`]: a buffer of the
    /// link's own, [`MAX_PACKET_LEN`] bytes starting
    /// `wire::packet::BUFFER_ALIGN_OFFSET` past a 16-byte boundary, for the
    /// caller to build the next packet in; [`Link::send_from_buffer`] then sends
    /// it without a copy (the UDP link queues the buffer itself). Until then,
    /// a second call lends the same buffer with its bytes as they are (the
    /// fabric key stage writes its trailer after the packet so). `None`: the
    /// link takes packets only through [`Link::send`] (the default).
    fn send_buffer(&mut self) -> Option<&mut [u8]> {
        None
    }

    /// Sends the first `len` bytes of the buffer [`Link::send_buffer`] lent,
    /// as [`Link::send`] would.
    fn send_from_buffer(&mut self, _now: Duration, _len: usize) -> Result<(), LinkError> {
        Ok(())
    }

    /// Whether the link is up (AE-01): the port's state, which the port turns
    /// into port active / port error events. Stages forward it; up by default.
    fn is_up(&self) -> bool {
        true
    }

    /// The SM set the port's PortPhysicalState to Disabled (true) or Polling
    /// (false) (IBA 14.2.5.6): a disabled link sends nothing, keepalives
    /// included, drops what arrives (counted) and is down, so its partner
    /// goes down after its silence; enabled again it trains when the partner
    /// is heard. Stages forward it; nothing by default (a link with no PHY
    /// state of its own).
    fn set_disabled(&mut self, _disabled: bool) {}

    /// The data path is about to sleep on [`Link::raw_fd`] (true), or has
    /// woken (false). A link whose peers wake it by other means than a
    /// packet on the descriptor asks them to now, and [`Link::poll_timeout`]
    /// called after it says whether something came in between (the
    /// shared-memory rings: a doorbell datagram, issue 30; a busy-polling
    /// data path never asks, so its peers send none). Stages forward it;
    /// nothing by default.
    fn set_sleeping(&mut self, _sleeping: bool) {}

    /// Whether every datagram this link takes comes from one peer: a cabled
    /// port, which accepts only its cable's other end (ARCHITECTURE.md §6).
    /// The fabric key stage then keeps one replay window for the link (the
    /// peer's sequence numbers are one stream) instead of one per SLID
    /// (issue 27). Stages forward it; false by default.
    fn single_peer(&self) -> bool {
        false
    }

    /// Whether the producer may hand the link another packet now (the
    /// longest one) without the link queuing past its bound: false while
    /// link flow control ([`FlowLink`], IBA 7.9) holds packets waiting for
    /// credit, or while a shared-memory ring to a peer is full
    /// (`shm_hold.rs`), and the port's data path then leaves the engine's
    /// packets in the engine. Stages forward it; true by default.
    fn tx_room(&mut self, _now: Duration) -> bool {
        true
    }

    /// Sends a link packet (IBA 7.9.4: a flow-control packet) to the other
    /// end of the port's cable, in order with the data packets sent before
    /// it; it is not routed. Stages forward it as it is (the fabric key
    /// stage too, as it does keepalives). Dropped by a link without a cable
    /// (the default).
    fn send_link_packet(&mut self, _now: Duration, _packet: &[u8]) -> Result<(), LinkError> {
        Ok(())
    }

    /// Issue 30: asks the link to compute the ICRC and VCRC of the native
    /// packets the engine sends from now on (`PortConfig::crcs_by_link`, as
    /// a NIC's checksum offload); true when it does, and then for good. A
    /// link that carries packets through memory leaves both out there and
    /// fills them in for a packet that goes onto a wire after all
    /// (`transport::wire::fill_crcs`), and marks what it delivers from
    /// memory [`Received::crcs_vouched`]. A stage that reads the CRCs or
    /// changes packets (fault injection, capture, the fabric key's tag) says
    /// no without asking further; one that does neither forwards the
    /// question. No by default. A link whose CRCs are taken may also lend
    /// what it receives in place ([`Received::lent`]): the stages that
    /// forward the question read only a packet's LRH and length.
    fn take_crcs(&mut self) -> bool {
        false
    }

    /// Issue 30: room for `len` payload bytes of the packet the engine is
    /// building for `dlid`, its payload at `at` (`transport::engine::TxSlots`):
    /// the shared-memory link's next slot in that peer's ring, so that guest
    /// memory is copied once, into the slot. The packet then goes by
    /// [`Link::send_slotted`]. Only a link whose CRCs were taken gives room
    /// (the stages that forward [`Link::take_crcs`] read only the headers),
    /// and only once the peer's ring is open (the first packet to it, sent
    /// whole, opens it); none by default, and stages do not forward it.
    fn payload_slot(
        &mut self,
        _dlid: u16,
        _at: usize,
        _len: usize,
    ) -> Option<vm_memory::VolatileSlice<'_>> {
        None
    }

    /// Sends `packet`, whose payload bytes are not in it but in the room
    /// the last [`Link::payload_slot`] gave (built there by the engine). A
    /// link that never gives room never gets this; by default the packet is
    /// dropped.
    fn send_slotted(&mut self, _now: Duration, _packet: &[u8]) -> Result<(), LinkError> {
        Ok(())
    }
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        (**self).send(now, packet)
    }
    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        (**self).recv_batch(now, max, deliver)
    }
    fn recv(&mut self, now: Duration, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        (**self).recv(now, buf)
    }
    fn raw_fd(&self) -> RawFd {
        (**self).raw_fd()
    }
    fn poll_timeout(&self) -> Option<Duration> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        (**self).handle_timeout(now)
    }
    fn flush(&mut self) -> Result<(), LinkError> {
        (**self).flush()
    }
    fn report(&self) -> Option<String> {
        (**self).report()
    }
    fn auth_counters(&self) -> Option<AuthCounters> {
        (**self).auth_counters()
    }
    fn clear(&mut self) {
        (**self).clear()
    }
    fn begin_sends(&mut self) {
        (**self).begin_sends()
    }
    fn end_sends(&mut self) -> Result<(), LinkError> {
        (**self).end_sends()
    }
    fn send_buffer(&mut self) -> Option<&mut [u8]> {
        (**self).send_buffer()
    }
    fn send_from_buffer(&mut self, now: Duration, len: usize) -> Result<(), LinkError> {
        (**self).send_from_buffer(now, len)
    }
    fn is_up(&self) -> bool {
        (**self).is_up()
    }
    fn set_disabled(&mut self, disabled: bool) {
        (**self).set_disabled(disabled)
    }
    fn set_sleeping(&mut self, sleeping: bool) {
        (**self).set_sleeping(sleeping)
    }
    fn single_peer(&self) -> bool {
        (**self).single_peer()
    }

    fn tx_room(&mut self, now: Duration) -> bool {
        (**self).tx_room(now)
    }
    fn send_link_packet(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        (**self).send_link_packet(now, packet)
    }
    fn take_crcs(&mut self) -> bool {
        (**self).take_crcs()
    }
    fn payload_slot(
        &mut self,
        dlid: u16,
        at: usize,
        len: usize,
    ) -> Option<vm_memory::VolatileSlice<'_>> {
        (**self).payload_slot(dlid, at, len)
    }
    fn send_slotted(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        (**self).send_slotted(now, packet)
    }
}

/// The LRH:DLID (IBA 7.7.7), if the packet holds a whole LRH.
fn dlid_of(packet: &[u8]) -> Option<u16> {
    transport::wire::Lrh::new_checked(packet)
        .ok()
        .map(|l| l.dlid())
}

fn slid_of(packet: &[u8]) -> Option<u16> {
    transport::wire::Lrh::new_checked(packet)
        .ok()
        .map(|l| l.slid())
}
