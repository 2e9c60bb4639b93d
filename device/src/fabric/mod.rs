//! The fabric: how a `vhca` device's port moves native InfiniBand packets to other
//! devices (ARCHITECTURE.md §6).
//!
//! - [`FabricFile`]: the nodes of the fabric (LID, port GUID, UDP address), read
//!   from a TOML file; it stands in for a subnet manager's assignment.
//! - [`Link`]: what the device needs from a port: send one packet (routed by its
//!   LRH:DLID), receive packets without blocking, a file descriptor to wait on, and a
//!   deadline for work the link holds itself. [`UdpLink`] is the `ib-udp` mode;
//!   [`TapLink`] the `roce` mode (RoCEv2 frames on a TAP shared with the guest's
//!   virtio-net, WF-10).
//! - Stages that wrap any [`Link`]: [`FaultLink`] (seeded drop, duplicate, reorder,
//!   corrupt, delay) and [`CaptureLink`] (every packet to a pcap file, WF-11).
//!
//! Like the transport engine (ARCHITECTURE.md §3), nothing here reads a clock: every call
//! takes `now`, the caller's time since the Unix epoch, so a stage's behaviour is a
//! function of its inputs and the capture timestamps are the caller's. Only
//! [`UdpLink`] and [`TapLink`] do I/O, and never block.

use std::os::fd::RawFd;
use std::time::Duration;

mod auth;
mod capture;
mod fault;
mod file;
mod tap;
mod tap_sys;
mod udp;
mod udp_sys;

pub use auth::{
    AuthCounters, AuthLink, FabricKey, FabricKeyError, KEY_LEN, REPLAY_WINDOW, SEQ_LEN, TAG_LEN,
    TRAILER_LEN,
};
pub use capture::{CaptureCounters, CaptureLink};
pub use fault::{
    FaultCounters, FaultLink, FaultSpec, FaultSpecError, DELAY_CAPACITY, MAX_DELAY, REORDER_HOLD,
};
pub use file::{FabricFile, FabricFileError, Node, MAX_UNICAST_LID, PROGRAMMATIC};
pub use tap::{
    classify, format_mac, vnet_hdr_ok, FrameClass, PushError, Tap, TapCounters, TapLink, ToGuest,
    MAX_FRAME_LEN, TAP_LOOPBACK_CAPACITY, TO_GUEST_BYTES, TO_GUEST_FRAMES, VNET_HDR_LEN,
};
pub use tap_sys::{TUN_F_CSUM, TUN_F_TSO4, TUN_F_TSO6, TUN_F_TSO_ECN};
pub use udp::{UdpCounters, UdpLink, LOOPBACK_CAPACITY};

/// The longest native packet, LRH through VCRC: LRH:PktLen counts LRH through ICRC
/// in 4-byte words in 11 bits (IBA 7.7.8), and the 2-byte VCRC follows. A receive
/// buffer of this size always suffices.
pub const MAX_PACKET_LEN: usize = 0x7ff * 4 + 2;

/// The shortest native packet with a transport: LRH (8) + BTH (12) + ICRC (4) +
/// VCRC (2). Anything shorter cannot even be parsed far enough to be dropped with a
/// reason, so the link drops it and counts it.
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
    /// Opening or using the TAP device failed.
    #[error("TAP {name}: {source}")]
    Tap {
        name: String,
        source: std::io::Error,
    },
}

/// A port's link to the fabric (ARCHITECTURE.md §6: link modes share one trait).
///
/// `now` is the caller's time since the Unix epoch; it must not go backwards.
/// Stages that hold packets (delay, reorder) release them on any call whose `now` has
/// reached their time, so the caller's loop is: wait on [`Link::raw_fd`] until
/// [`Link::poll_timeout`], call [`Link::handle_timeout`], drain [`Link::recv`].
pub trait Link {
    /// Sends one native packet, LRH through VCRC, to the node holding its LRH:DLID.
    /// An undeliverable packet is dropped and counted, not an error.
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError>;

    /// Copies the next received packet into `buf` (at least [`MAX_PACKET_LEN`]
    /// bytes) and returns its length, or `None` when nothing is waiting. Never
    /// blocks.
    fn recv(&mut self, now: Duration, buf: &mut [u8]) -> Result<Option<usize>, LinkError>;

    /// The descriptor that becomes readable when a packet arrives (for epoll).
    fn raw_fd(&self) -> RawFd;

    /// The earliest time at which the link has work the descriptor will not signal:
    /// a held packet to release, or a looped-back packet waiting in [`Link::recv`]
    /// (then a time at or before the last `now`). `None`: nothing pending.
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
}

impl<L: Link + ?Sized> Link for Box<L> {
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        (**self).send(now, packet)
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
    fn clear(&mut self) {
        (**self).clear()
    }
    fn begin_sends(&mut self) {
        (**self).begin_sends()
    }
    fn end_sends(&mut self) -> Result<(), LinkError> {
        (**self).end_sends()
    }
}

/// The LRH:DLID (IBA 7.7.7), if the packet holds a whole LRH.
fn dlid_of(packet: &[u8]) -> Option<u16> {
    transport::wire::Lrh::new_checked(packet)
        .ok()
        .map(|l| l.dlid())
}

/// The LRH:SLID, if the packet holds a whole LRH.
fn slid_of(packet: &[u8]) -> Option<u16> {
    transport::wire::Lrh::new_checked(packet)
        .ok()
        .map(|l| l.slid())
}
