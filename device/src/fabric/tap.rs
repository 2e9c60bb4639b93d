//! `roce` link mode (ARCHITECTURE.md §6): RoCEv2 frames on a TAP device that also carries
//! the guest's ordinary network traffic, as one Ethernet port of a real RoCE NIC
//! carries both (WF-10).
//!
//! The TAP is opened with `IFF_VNET_HDR`: every frame read or written starts with a
//! 12-byte `virtio_net_hdr_v1` (virtio 1.2 §5.1.6), so the guest's virtio-net
//! offloads (partial checksums, TCP segmentation) pass through untouched. The link
//! demultiplexes what it reads ([`classify`]):
//!
//! - IPv4/IPv6, UDP destination port 4791: a RoCEv2 frame for the engine, lent by
//!   [`Link::recv_batch`] without the vnet header, straight from the read buffer;
//!   the engine parses it once and owns every check of it (its MAC, addresses,
//!   lengths and ICRC: `transport::wire::roce`, annex A17.4; ARCHITECTURE.md §2);
//! - anything else (ARP, ND, IP, broadcast): the guest's, queued whole (vnet
//!   header included) on the bounded [`ToGuest`] queue that the vhost-user-net
//!   backend (`crate::net`) drains into the guest's RX ring.
//!
//! The TAP faces the network, so everything read is untrusted (ARCHITECTURE.md §9):
//! frames too short to steer, too long for a buffer or with a bad vnet header are
//! dropped and counted here; the rest is the engine's or the guest's to judge.
//!
//! Batched I/O (issues 12 and 30): one receive call reads up to [`RECV_BATCH`]
//! frames and lends every RoCE frame among them to the port. A TAP descriptor
//! takes one frame per read(2) or write(2) (there is no sendmmsg for it), and
//! the kernel's work per frame (an skb, the bridge, the TAP queue) costs more
//! than the system call, so a round's frames are batched as UDP GSO
//! super-frames ([`super::tap_gso`], which says what was measured): between
//! [`Link::begin_sends`] and [`Link::end_sends`] sends queue, and each run of
//! same-size frames of one flow leaves in one write; a TAP that accepts
//! `TUN_F_USO4/6` (the guest negotiated checksum offload, Linux 6.2+) hands
//! such super-frames over whole, and the link cuts them back into frames.
//! Without UDP GSO (an older kernel refuses the write with EINVAL: logged once)
//! every frame is one write, as before, and reads stay one frame each.

use std::collections::VecDeque;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use transport::wire::roce::{MacAddr, ETH_HEADER_LEN, UDP_PORT};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::tap_gso::{self, SegmentError, Segments, GSO_UDP_L4};
use super::tap_sys;
use super::{Link, LinkError, Received, MAX_PACKET_LEN};

/// Length of the `virtio_net_hdr_v1` before every frame on the TAP and in the
/// guest's rings (virtio 1.2 §5.1.6: 12 bytes once VIRTIO_F_VERSION_1 is
/// negotiated, whether or not MRG_RXBUF is).
pub const VNET_HDR_LEN: usize = 12;

/// The longest frame the TAP may hand over or the guest may send: a TCP GSO
/// super-frame carries at most one IP datagram of 65535 bytes, behind an Ethernet
/// header and one 802.1Q tag.
pub const MAX_FRAME_LEN: usize = 65_535 + ETH_HEADER_LEN + 4;

/// Frames looped back to the port itself and not yet received; beyond this a
/// sender outrunning its own receiver loses frames, as in a switch buffer.
pub const TAP_LOOPBACK_CAPACITY: usize = 1024;

/// Buffers of delivered loopback frames kept for reuse.
const TAP_LOOPBACK_SPARE: usize = 64;

/// Frames waiting for the guest's RX ring, and their total bytes: a guest that
/// stops posting RX buffers loses frames here instead of growing our memory.
pub const TO_GUEST_FRAMES: usize = 512;
pub const TO_GUEST_BYTES: usize = 8 << 20;

/// Frames one [`Link::recv_batch`] call reads at most (RoCE frames lent, the
/// others handed to the guest or dropped), so that guest traffic cannot hold the
/// data path; the TAP stays readable and the next call goes on.
const RECV_BATCH: usize = 64;

/// Frames queued between [`Link::begin_sends`] and [`Link::end_sends`] before
/// they are written anyway (the port sends at most its budget per round).
const TX_QUEUE: usize = 256;

/// Bytes 0 (flags) and 1 (gso_type) of the vnet header (virtio 1.2 §5.1.6).
const HDR_F_NEEDS_CSUM: u8 = 1;
const HDR_F_DATA_VALID: u8 = 2;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_UDP: u8 = 3;
const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;

/// What a [`TapLink`] did, and every reason it dropped a frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TapCounters {
    /// RoCE frames written to the TAP.
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames to the port's own MAC or a multicast MAC, looped back to the engine.
    pub loopback_frames: u64,
    /// RoCE frames lent to the engine (TAP and loopback).
    pub rx_roce_frames: u64,
    pub rx_roce_bytes: u64,
    /// Frames queued for the guest's virtio-net.
    pub to_guest_frames: u64,
    pub to_guest_bytes: u64,
    /// Send: shorter than an Ethernet header or longer than [`MAX_PACKET_LEN`].
    pub drop_tx_bad_len: u64,
    /// Send: the TAP's queue was full.
    pub drop_tx_would_block: u64,
    /// Send: the TAP interface is down (the kernel answers EIO).
    pub drop_tx_link_down: u64,
    /// Send: any other write error (the error is also returned).
    pub drop_tx_error: u64,
    /// Send: the loopback queue held [`TAP_LOOPBACK_CAPACITY`] frames.
    pub drop_loopback_full: u64,
    /// Receive: shorter than a vnet header and an Ethernet header.
    pub drop_rx_short: u64,
    /// Receive: longer than [`MAX_FRAME_LEN`], or a RoCE frame longer than
    /// [`MAX_PACKET_LEN`] (what a receive buffer of the engine's holds).
    pub drop_rx_oversized: u64,
    /// Receive: a vnet header with unknown flags or GSO type, a checksum offset
    /// outside the frame, or GSO on a RoCE frame.
    pub drop_rx_bad_vnet_hdr: u64,
    /// Receive: a frame for the guest while no guest RX ring is attached.
    pub drop_guest_absent: u64,
    /// Receive: a frame for the guest while its queue was full.
    pub drop_guest_queue_full: u64,
    /// Receive: the TAP reported end of file (only a test's fake TAP does).
    pub rx_eof: u64,
    /// UDP GSO super-frames written (each counted in `tx_frames` as the frames
    /// it carries; issue 30).
    pub tx_gso_writes: u64,
    /// UDP GSO super-frames read whole and cut into frames (RoCE frames counted
    /// in `rx_roce_frames`, the guest's in `to_guest_frames`).
    pub rx_gso_reads: u64,
}

impl TapCounters {
    /// All frames dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        self.drop_tx_bad_len
            + self.drop_tx_would_block
            + self.drop_tx_link_down
            + self.drop_tx_error
            + self.drop_loopback_full
            + self.drop_rx_short
            + self.drop_rx_oversized
            + self.drop_rx_bad_vnet_hdr
            + self.drop_guest_absent
            + self.drop_guest_queue_full
    }
}

impl fmt::Display for TapCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx {} ({} B) loopback {} rx_roce {} ({} B) to_guest {} ({} B) dropped {}: \
             tx_bad_len {} tx_would_block {} tx_link_down {} tx_error {} loopback_full {} \
             rx_short {} rx_oversized {} rx_bad_vnet_hdr {} guest_absent {} \
             guest_queue_full {} gso_writes {} gso_reads {}",
            self.tx_frames,
            self.tx_bytes,
            self.loopback_frames,
            self.rx_roce_frames,
            self.rx_roce_bytes,
            self.to_guest_frames,
            self.to_guest_bytes,
            self.dropped(),
            self.drop_tx_bad_len,
            self.drop_tx_would_block,
            self.drop_tx_link_down,
            self.drop_tx_error,
            self.drop_loopback_full,
            self.drop_rx_short,
            self.drop_rx_oversized,
            self.drop_rx_bad_vnet_hdr,
            self.drop_guest_absent,
            self.drop_guest_queue_full,
            self.tx_gso_writes,
            self.rx_gso_reads,
        )
    }
}

/// Where a frame read from the TAP goes ([`classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameClass {
    /// RoCEv2: to the engine, which accepts it (the port's MAC, one of its
    /// GIDs) or drops and counts it (A17.4.5).
    Roce,
    /// Everything else: to the guest's virtio-net.
    Guest,
}

/// Steers an Ethernet frame (no vnet header). Only enough of the headers is read
/// to tell RoCEv2 (UDP destination port 4791, annex A17.2) from the rest: this is
/// demultiplexing, not a check; the engine parses a RoCE frame once, with every
/// check (its Ethernet destination included: a frame a bridge flooded to us for
/// another MAC is the engine's `BadDmac` drop). A frame too short to tell is the
/// guest's, whose stack drops it as any NIC's host would.
pub fn classify(frame: &[u8]) -> FrameClass {
    if tap_gso::udp_dport(frame) == Some(UDP_PORT) {
        FrameClass::Roce
    } else {
        FrameClass::Guest
    }
}

/// Checks a vnet header as the kernel or the guest filled it (virtio 1.2
/// §5.1.6.2): known flags and GSO type, a checksum position inside the frame,
/// a segment size with GSO.
pub fn vnet_hdr_ok(hdr: &[u8; VNET_HDR_LEN], frame_len: usize) -> bool {
    let flags = hdr[0];
    let gso = hdr[1];
    let gso_size = u16::from_le_bytes([hdr[4], hdr[5]]);
    let csum_start = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
    let csum_offset = usize::from(u16::from_le_bytes([hdr[8], hdr[9]]));
    if flags & !(HDR_F_NEEDS_CSUM | HDR_F_DATA_VALID) != 0 {
        return false;
    }
    if flags & HDR_F_NEEDS_CSUM != 0 && csum_start + csum_offset + 2 > frame_len {
        return false;
    }
    match gso & !GSO_ECN {
        GSO_NONE => gso & GSO_ECN == 0,
        GSO_TCPV4 | GSO_UDP | GSO_TCPV6 | GSO_UDP_L4 => gso_size != 0,
        _ => false,
    }
}

/// The frames the TAP link hands to the guest's virtio-net, waiting for the
/// vhost-user-net backend: bounded in frames and bytes, with an eventfd the
/// backend's epoll loop watches. Shared by the data-path thread (producer) and the
/// backend thread (consumer).
#[derive(Debug)]
pub struct ToGuest {
    queue: Mutex<GuestQueue>,
    event: EventFd,
    /// Set while the guest has a live RX ring; otherwise frames are dropped at once
    /// (a NIC whose driver is down), not kept stale for the next guest.
    attached: AtomicBool,
}

#[derive(Debug, Default)]
struct GuestQueue {
    frames: VecDeque<Vec<u8>>,
    bytes: usize,
}

/// Why [`ToGuest::push`] refused a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    Absent,
    Full,
}

impl ToGuest {
    fn new() -> std::io::Result<ToGuest> {
        Ok(ToGuest {
            queue: Mutex::new(GuestQueue::default()),
            event: EventFd::new(EFD_NONBLOCK)?,
            attached: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GuestQueue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues one frame (vnet header included); does not signal.
    pub fn push(&self, frame: &[u8]) -> Result<(), PushError> {
        if !self.attached.load(Ordering::Acquire) {
            return Err(PushError::Absent);
        }
        let mut q = self.lock();
        if q.frames.len() >= TO_GUEST_FRAMES || q.bytes + frame.len() > TO_GUEST_BYTES {
            return Err(PushError::Full);
        }
        q.bytes += frame.len();
        q.frames.push_back(frame.to_vec());
        Ok(())
    }

    /// The oldest frame.
    pub fn pop(&self) -> Option<Vec<u8>> {
        let mut q = self.lock();
        let f = q.frames.pop_front()?;
        q.bytes -= f.len();
        Some(f)
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.lock().frames.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Attaches or detaches the guest; detaching drops what waits and returns how
    /// many frames that was.
    pub fn set_attached(&self, attached: bool) -> usize {
        self.attached.store(attached, Ordering::Release);
        if attached {
            return 0;
        }
        let mut q = self.lock();
        let n = q.frames.len();
        *q = GuestQueue::default();
        n
    }

    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Acquire)
    }

    /// Wakes the consumer.
    pub fn notify(&self) {
        let _ = self.event.write(1);
    }

    /// The eventfd that becomes readable after [`ToGuest::notify`].
    pub fn event(&self) -> &EventFd {
        &self.event
    }
}

/// The TAP device and what both of its users share: the data path's [`TapLink`]
/// and the vhost-user-net backend (guest TX is written here directly; one write is
/// one frame, so the two writers never interleave).
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
    mac: MacAddr,
    mtu: u16,
    to_guest: ToGuest,
    /// Whether the kernel may still take TUN_F_USO4/6 (cleared, with a log
    /// line, when it refuses them: before Linux 6.2).
    uso: AtomicBool,
}

/// A refusal to open or create the TAP, told as what to do about it (issue
/// 17): only root (CAP_NET_ADMIN) creates a TAP; any user may open one made
/// for them beforehand.
fn needs_root(name: &str, e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::PermissionDenied {
        return e;
    }
    std::io::Error::new(
        e.kind(),
        format!(
            "{e}: a TAP is created by root (CAP_NET_ADMIN) only; run vhca as root, or make \
             the TAP for this user first: sudo ip tuntap add {name} mode tap user $(id -un)"
        ),
    )
}

impl Tap {
    /// Opens (or creates) TAP `name` with vnet headers, non-blocking. The
    /// interface is configured (up, bridged, MTU) by the caller's network setup.
    pub fn open(name: &str, mac: MacAddr) -> Result<Tap, LinkError> {
        let err = |source| LinkError::Tap {
            name: name.to_string(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| err(needs_root(name, e)))?;
        let kernel_name =
            tap_sys::set_iff_tap(&file, name).map_err(|e| err(needs_root(name, e)))?;
        tap_sys::set_vnet_hdr_len(&file, VNET_HDR_LEN as i32).map_err(err)?;
        // No offloads until a guest negotiates them: frames we read are then
        // plain, whole frames with complete checksums.
        tap_sys::set_offload(&file, 0).map_err(err)?;
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{kernel_name}/mtu"))
            .ok()
            .and_then(|s| s.trim().parse::<u16>().ok())
            .unwrap_or(1500);
        log::info!(
            "fabric: TAP {kernel_name} (MTU {mtu}), port MAC {}",
            format_mac(&mac)
        );
        Tap::assemble(file, kernel_name, mac, mtu).map_err(err)
    }

    /// Uses a descriptor that already behaves as a TAP with 12-byte vnet headers:
    /// one set up by a supervisor, or a test's `socketpair(AF_UNIX,
    /// SOCK_SEQPACKET)`. Made non-blocking here.
    pub fn from_fd(fd: OwnedFd, name: &str, mac: MacAddr, mtu: u16) -> Result<Tap, LinkError> {
        let file = File::from(fd);
        tap_sys::set_nonblocking(&file).map_err(|source| LinkError::Tap {
            name: name.to_string(),
            source,
        })?;
        Tap::assemble(file, name.to_string(), mac, mtu).map_err(|source| LinkError::Tap {
            name: name.to_string(),
            source,
        })
    }

    fn assemble(file: File, name: String, mac: MacAddr, mtu: u16) -> std::io::Result<Tap> {
        Ok(Tap {
            file,
            name,
            mac,
            mtu,
            to_guest: ToGuest::new()?,
            uso: AtomicBool::new(true),
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port's MAC (also the guest NIC's, as on a real RoCE adapter).
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The interface MTU when the TAP was opened.
    pub fn mtu(&self) -> u16 {
        self.mtu
    }

    /// The guest-bound queue.
    pub fn to_guest(&self) -> &ToGuest {
        &self.to_guest
    }

    /// Writes one frame that starts with its vnet header.
    pub fn write_frame(&self, frame: &[u8]) -> std::io::Result<usize> {
        (&self.file).write(frame)
    }

    /// Writes one frame behind a separate vnet header, without copying it.
    fn write_parts(&self, hdr: &[u8], frame: &[u8]) -> std::io::Result<usize> {
        (&self.file).write_vectored(&[IoSlice::new(hdr), IoSlice::new(frame)])
    }

    /// Which offloads (`tap_sys::TUN_F_*`) frames read from the TAP may use:
    /// those the guest accepts (virtio 1.2 §5.1.6.4: GUEST_CSUM, GUEST_TSO4/6),
    /// and with a partial checksum accepted, UDP segmentation too (issue 30):
    /// the link cuts UDP GSO super-frames itself, RoCE ones for the engine and
    /// any other for the guest ([`TapLink`]), so the guest need not take them.
    /// A kernel without USO (before Linux 6.2) refuses it: logged once, and the
    /// guest's flags alone are set. Returns the flags set.
    pub fn set_offload(&self, flags: u32) -> std::io::Result<u32> {
        if flags & tap_sys::TUN_F_CSUM != 0 && self.uso.load(Ordering::Relaxed) {
            let with = flags | tap_sys::TUN_F_USO4 | tap_sys::TUN_F_USO6;
            match tap_sys::set_offload(&self.file, with) {
                Ok(()) => return Ok(with),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    self.uso.store(false, Ordering::Relaxed);
                    log::info!(
                        "tap: {} takes no UDP segmentation offload (TUN_F_USO4/6, Linux \
                         6.2+): RoCE frames are read one by one",
                        self.name
                    );
                }
                Err(e) => return Err(e),
            }
        }
        tap_sys::set_offload(&self.file, flags).map(|()| flags)
    }
}

impl AsRawFd for Tap {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: &MacAddr) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The `roce` link of one port.
#[derive(Debug)]
pub struct TapLink {
    tap: Arc<Tap>,
    loopback: VecDeque<Vec<u8>>,
    /// Buffers of received loopback frames, reused by the next ones.
    loopback_spare: Vec<Vec<u8>>,
    /// A vnet header and the longest frame, plus one byte so that an oversized
    /// read shows as a full buffer rather than a silently cut frame.
    rx_buf: Box<[u8]>,
    /// A RoCE super-frame in `rx_buf` (after its vnet header) not yet cut
    /// whole: the next call goes on with it before reading again.
    rx_segments: Option<Segments>,
    /// The segment being lent, or queued for the guest (then behind a vnet
    /// header).
    seg_buf: Vec<u8>,
    /// Between [`Link::begin_sends`] and [`Link::end_sends`]: sends queue.
    batching: bool,
    tx_queue: Vec<Vec<u8>>,
    tx_spare: Vec<Vec<u8>>,
    /// Runs of frames leave as UDP GSO super-frames (cleared when the kernel
    /// refuses one, or by [`TapLink::set_gso`]).
    gso_tx: bool,
    /// The super-frame being written.
    gso_buf: Vec<u8>,
    counters: TapCounters,
    /// The interface's state (AE-01): up while it is administratively up.
    up: bool,
    /// How often the state is read (a TAP with no /sys/class/net entry, a
    /// test's socketpair, has none to read: never).
    state_every: Option<Duration>,
    next_state_check: Duration,
}

/// How often a TapLink reads its interface's flags (AE-01): `ip link set
/// TAP down` becomes a port error event within this.
pub const TAP_STATE_CHECK: Duration = Duration::from_millis(250);

/// `IFF_UP` of `/sys/class/net/NAME/flags`.
const IFF_UP: u32 = 0x1;

impl TapLink {
    /// A link over `tap`; the vhost-user-net backend holds the other reference.
    pub fn new(tap: Arc<Tap>) -> TapLink {
        TapLink {
            loopback: VecDeque::new(),
            loopback_spare: Vec::new(),
            rx_buf: vec![0; VNET_HDR_LEN + MAX_FRAME_LEN + 1].into_boxed_slice(),
            rx_segments: None,
            seg_buf: Vec::new(),
            batching: false,
            tx_queue: Vec::new(),
            tx_spare: Vec::new(),
            gso_tx: true,
            gso_buf: Vec::new(),
            counters: TapCounters::default(),
            up: true,
            state_every: Self::read_up(&tap.name).map(|_| TAP_STATE_CHECK),
            next_state_check: Duration::ZERO,
            tap,
        }
    }

    /// Whether interface `name` is up (IFF_UP), or `None` when its flags cannot
    /// be read (no such interface).
    fn read_up(name: &str) -> Option<bool> {
        let text = std::fs::read_to_string(format!("/sys/class/net/{name}/flags")).ok()?;
        let hex = text.trim().trim_start_matches("0x");
        u32::from_str_radix(hex, 16).ok().map(|f| f & IFF_UP != 0)
    }

    /// The shared TAP.
    pub fn tap(&self) -> &Arc<Tap> {
        &self.tap
    }

    /// What the link did and dropped so far.
    pub fn counters(&self) -> &TapCounters {
        &self.counters
    }

    /// Whether runs of frames may leave as UDP GSO super-frames (on by
    /// default; off, every frame is one write, as on a kernel that refuses
    /// them).
    pub fn set_gso(&mut self, on: bool) {
        self.gso_tx = on;
    }

    /// Whether runs of frames leave as UDP GSO super-frames.
    pub fn gso(&self) -> bool {
        self.gso_tx
    }

    /// Looks at the `n` bytes just read: a RoCE frame for the engine (its
    /// length, at `rx_buf[VNET_HDR_LEN..]`), a RoCE super-frame to cut, or
    /// nothing more to do (the guest's, queued, or dropped and counted).
    fn sort(&mut self, n: usize) -> Sorted {
        let c = &mut self.counters;
        if n < VNET_HDR_LEN + ETH_HEADER_LEN {
            c.drop_rx_short += 1;
            log::debug!("tap: dropped {n}-byte frame: too short");
            return Sorted::Done;
        }
        if n > VNET_HDR_LEN + MAX_FRAME_LEN {
            c.drop_rx_oversized += 1;
            log::debug!("tap: dropped oversized frame");
            return Sorted::Done;
        }
        let (hdr, frame) = self.rx_buf[..n].split_at(VNET_HDR_LEN);
        let hdr: &[u8; VNET_HDR_LEN] = hdr.try_into().expect("split at VNET_HDR_LEN");
        if !vnet_hdr_ok(hdr, frame.len()) {
            c.drop_rx_bad_vnet_hdr += 1;
            log::debug!("tap: dropped frame with bad vnet header {hdr:02x?}");
            return Sorted::Done;
        }
        let gso_size = u16::from_le_bytes([hdr[4], hdr[5]]);
        match classify(frame) {
            FrameClass::Roce => {
                if hdr[1] == GSO_UDP_L4 {
                    // A run another link joined (tap_gso): cut here, each
                    // segment at most what an engine buffer holds.
                    return match Segments::new(frame, gso_size, MAX_PACKET_LEN, true) {
                        Ok(s) => {
                            c.rx_gso_reads += 1;
                            Sorted::Segments(s)
                        }
                        Err(SegmentError::BadHeader) => {
                            c.drop_rx_bad_vnet_hdr += 1;
                            Sorted::Done
                        }
                        Err(SegmentError::Oversized) => {
                            c.drop_rx_oversized += 1;
                            Sorted::Done
                        }
                    };
                }
                if hdr[1] != GSO_NONE {
                    c.drop_rx_bad_vnet_hdr += 1;
                    return Sorted::Done;
                }
                if frame.len() > MAX_PACKET_LEN {
                    c.drop_rx_oversized += 1;
                    return Sorted::Done;
                }
                // A partial UDP checksum (NEEDS_CSUM) needs no completing: the
                // engine does not check the UDP checksum, the ICRC covers the data
                // (A17.3.3).
                Sorted::Roce(frame.len())
            }
            FrameClass::Guest if hdr[1] == GSO_UDP_L4 => {
                // Only with USO on (Tap::set_offload): the guest did not
                // negotiate it (net::FEATURES has no GUEST_USO), so its frames
                // are cut here with their UDP checksums complete.
                match Segments::new(frame, gso_size, MAX_FRAME_LEN, false) {
                    Ok(mut segs) => {
                        c.rx_gso_reads += 1;
                        let frame = &self.rx_buf[VNET_HDR_LEN..n];
                        let mut whole = Vec::new();
                        while segs.next_into(frame, &mut self.seg_buf) {
                            whole.clear();
                            whole.extend_from_slice(&[0; VNET_HDR_LEN]);
                            whole.extend_from_slice(&self.seg_buf);
                            push_guest(&self.tap, c, &whole);
                        }
                    }
                    Err(_) => c.drop_rx_bad_vnet_hdr += 1,
                }
                Sorted::Done
            }
            FrameClass::Guest => {
                push_guest(&self.tap, c, &self.rx_buf[..n]);
                Sorted::Done
            }
        }
    }

    /// Lends the segments of the super-frame in `rx_buf` while `*n < max`.
    fn lend_segments(&mut self, n: &mut usize, max: usize, deliver: &mut dyn FnMut(Received<'_>)) {
        while *n < max {
            let Some(segs) = self.rx_segments.as_mut() else {
                return;
            };
            let frame = &self.rx_buf[VNET_HDR_LEN..VNET_HDR_LEN + segs.frame_len()];
            if !segs.next_into(frame, &mut self.seg_buf) {
                self.rx_segments = None;
                return;
            }
            self.counters.rx_roce_frames += 1;
            self.counters.rx_roce_bytes += self.seg_buf.len() as u64;
            deliver(Received {
                lent: None,
                packet: &self.seg_buf,
                src_lid: None,
                crcs_vouched: false,
            });
            *n += 1;
        }
    }

    /// Counts the outcome of one write carrying `frames` frames of `bytes`.
    fn tx_result(
        &mut self,
        r: std::io::Result<usize>,
        frames: u64,
        bytes: u64,
    ) -> Result<(), LinkError> {
        let c = &mut self.counters;
        match r {
            Ok(_) => {
                c.tx_frames += frames;
                c.tx_bytes += bytes;
                Ok(())
            }
            // A full queue or a downed interface loses the frame like a congested
            // or unplugged link would; the transport recovers it.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                c.drop_tx_would_block += frames;
                Ok(())
            }
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                if c.drop_tx_link_down == 0 {
                    log::warn!("tap: {} is down; frames are dropped", self.tap.name);
                }
                c.drop_tx_link_down += frames;
                Ok(())
            }
            Err(e) => {
                c.drop_tx_error += frames;
                Err(LinkError::Tap {
                    name: self.tap.name.clone(),
                    source: e,
                })
            }
        }
    }

    /// Writes one whole frame behind a zeroed vnet header: no checksum
    /// offload, no GSO; the engine's frame is whole.
    fn write_one(&mut self, frame: &[u8]) -> Result<(), LinkError> {
        let r = self.tap.write_parts(&[0; VNET_HDR_LEN], frame);
        self.tx_result(r, 1, frame.len() as u64)
    }

    /// Writes the queued frames: each run [`tap_gso::run_len`] finds as one
    /// super-frame, the rest one by one. The first error is returned after
    /// every frame was written or counted.
    fn write_queued(&mut self) -> Result<(), LinkError> {
        let mut frames = std::mem::take(&mut self.tx_queue);
        let mut result = Ok(());
        let mut i = 0;
        while i < frames.len() {
            let k = if self.gso_tx {
                tap_gso::run_len(&frames[i..])
            } else {
                1
            };
            let r = if k >= 2 {
                let hdr = tap_gso::join(&mut frames[i..i + k], &mut self.gso_buf);
                let w = self.tap.write_parts(&hdr, &self.gso_buf);
                if w.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EINVAL) {
                    // A kernel without VIRTIO_NET_HDR_GSO_UDP_L4 on a TAP (before
                    // Linux 6.2): the run goes again frame by frame (still
                    // valid frames: each ICRC matches its renumbered header).
                    log::info!(
                        "tap: {} refuses UDP GSO writes: one write per frame from now on",
                        self.tap.name
                    );
                    self.gso_tx = false;
                    continue;
                }
                if w.is_ok() {
                    self.counters.tx_gso_writes += 1;
                }
                let bytes = frames[i..i + k].iter().map(|f| f.len() as u64).sum();
                self.tx_result(w, k as u64, bytes)
            } else {
                let f = std::mem::take(&mut frames[i]);
                let r = self.write_one(&f);
                frames[i] = f;
                r
            };
            if result.is_ok() {
                result = r;
            }
            i += k.max(1);
        }
        for mut f in frames.drain(..) {
            if self.tx_spare.len() < TX_QUEUE {
                f.clear();
                self.tx_spare.push(f);
            }
        }
        self.tx_queue = frames;
        result
    }
}

/// Queues one frame (behind its vnet header) for the guest, counted.
fn push_guest(tap: &Tap, c: &mut TapCounters, whole: &[u8]) {
    match tap.to_guest.push(whole) {
        Ok(()) => {
            c.to_guest_frames += 1;
            c.to_guest_bytes += (whole.len() - VNET_HDR_LEN) as u64;
        }
        Err(PushError::Absent) => c.drop_guest_absent += 1,
        Err(PushError::Full) => c.drop_guest_queue_full += 1,
    }
}

/// What [`TapLink::sort`] made of a frame read.
enum Sorted {
    /// A RoCE frame of this length for the engine.
    Roce(usize),
    /// A RoCE super-frame to cut.
    Segments(Segments),
    /// Queued for the guest, or dropped and counted.
    Done,
}

impl Link for TapLink {
    fn send(&mut self, _now: Duration, frame: &[u8]) -> Result<(), LinkError> {
        let c = &mut self.counters;
        if frame.len() < ETH_HEADER_LEN || frame.len() > MAX_PACKET_LEN {
            c.drop_tx_bad_len += 1;
            return Ok(());
        }
        let dst = &frame[..6];
        let own = dst == self.tap.mac;
        if own || dst[0] & 1 != 0 {
            // A bridge never sends a frame back out of the port it came in on, so
            // the port's own frames reach its engine only this way (AD-04 on RoCE).
            if self.loopback.len() >= TAP_LOOPBACK_CAPACITY {
                c.drop_loopback_full += 1;
            } else {
                c.loopback_frames += 1;
                let mut b = self.loopback_spare.pop().unwrap_or_default();
                b.clear();
                b.extend_from_slice(frame);
                self.loopback.push_back(b);
            }
            if own {
                return Ok(());
            }
        }
        if self.batching {
            let mut b = self.tx_spare.pop().unwrap_or_default();
            b.clear();
            b.extend_from_slice(frame);
            self.tx_queue.push(b);
            if self.tx_queue.len() >= TX_QUEUE {
                return self.write_queued();
            }
            return Ok(());
        }
        self.write_one(frame)
    }

    fn begin_sends(&mut self) {
        self.batching = true;
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        self.batching = false;
        self.write_queued()
    }

    fn recv_batch(
        &mut self,
        _now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        while n < max {
            let Some(f) = self.loopback.pop_front() else {
                break;
            };
            self.counters.rx_roce_frames += 1;
            self.counters.rx_roce_bytes += f.len() as u64;
            deliver(Received {
                lent: None,
                packet: &f,
                src_lid: None,
                crcs_vouched: false,
            });
            n += 1;
            if self.loopback_spare.len() < TAP_LOOPBACK_SPARE {
                self.loopback_spare.push(f);
            }
        }
        // The rest of a super-frame first: its bytes are in rx_buf.
        self.lend_segments(&mut n, max, deliver);
        let queued_before = self.counters.to_guest_frames;
        let mut result = Ok(());
        let mut reads = 0;
        while n < max && reads < RECV_BATCH && self.rx_segments.is_none() {
            reads += 1;
            match (&self.tap.file).read(&mut self.rx_buf) {
                Ok(0) => {
                    self.counters.rx_eof += 1;
                    break;
                }
                Ok(got) => match self.sort(got) {
                    Sorted::Roce(len) => {
                        self.counters.rx_roce_frames += 1;
                        self.counters.rx_roce_bytes += len as u64;
                        deliver(Received {
                            lent: None,
                            packet: &self.rx_buf[VNET_HDR_LEN..VNET_HDR_LEN + len],
                            src_lid: None,
                            crcs_vouched: false,
                        });
                        n += 1;
                    }
                    Sorted::Segments(segs) => {
                        self.rx_segments = Some(segs);
                        self.lend_segments(&mut n, max, deliver);
                    }
                    Sorted::Done => {}
                },
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    result = Err(LinkError::Tap {
                        name: self.tap.name.clone(),
                        source: e,
                    });
                    break;
                }
            }
        }
        if self.counters.to_guest_frames != queued_before {
            self.tap.to_guest.notify();
        }
        result.map(|()| n)
    }

    fn clear(&mut self) {
        self.loopback.clear();
    }

    fn raw_fd(&self) -> RawFd {
        self.tap.as_raw_fd()
    }

    fn poll_timeout(&self) -> Option<Duration> {
        // Looped-back frames, and the rest of a super-frame read, do not make
        // the TAP readable: ask to be called at once.
        let held = !self.loopback.is_empty() || self.rx_segments.is_some();
        let now = held.then_some(Duration::ZERO);
        match (now, self.state_every.map(|_| self.next_state_check)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        if let Some(every) = self.state_every {
            if now >= self.next_state_check {
                self.next_state_check = now + every;
                // AE-01: a TAP set down (or deleted) takes the port down.
                self.up = Self::read_up(&self.tap.name).unwrap_or(false);
            }
        }
        Ok(())
    }

    fn is_up(&self) -> bool {
        self.up
    }

    fn report(&self) -> Option<String> {
        Some(format!("tap {}: {}", self.tap.name, self.counters))
    }
}
