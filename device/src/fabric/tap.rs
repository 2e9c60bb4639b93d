//! The Ethernet port (WF-10): RoCEv2 frames on a TAP device, which a Linux bridge
//! connects to anything else (other vhca ports, Linux soft-RoCE, plain NICs).
//!
//! One TAP carries both the port's RoCE traffic and the guest's ordinary network
//! traffic, as one wire does on a RoCE NIC: [`TapLink`] reads every frame and
//! hands the transport only those for the port (its MAC, IPv4 or IPv6, UDP to
//! 4791, annex A17.4); everything else goes to a [`FrameSink`] — the guest's NIC
//! when one shares the port — or is counted and dropped. The engine validates a
//! RoCE frame fully (ICRC, lengths); here frames are only classified.
//!
//! The TAP gives frames without FCS; a frame the port sends to its own MAC (two
//! QPs of one port) never comes back from the bridge, so it loops back here.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use transport::wire::roce::{
    MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, ETH_HEADER_LEN, UDP_PORT, VLAN_TAG_LEN,
};

use super::{Link, LinkError};

/// Frames the loopback holds at most; more are dropped and counted.
pub const TAP_LOOPBACK_CAPACITY: usize = 256;

/// Frames read from the TAP per [`Link::recv`] call at most, so that a flood of
/// frames for the guest cannot keep the data path from its other work.
const READS_PER_RECV: usize = 64;

/// The largest frame read from the TAP: a 9000-byte MTU jumbo frame with an
/// 802.1Q tag. A longer one is cut by the read and dropped.
pub const MAX_FRAME_LEN: usize = 9000 + ETH_HEADER_LEN + VLAN_TAG_LEN;

/// Where frames that are not the port's go: the guest's NIC sharing the port.
pub trait FrameSink: Send {
    /// Takes one whole Ethernet frame; `false` when it had no room (the frame is
    /// dropped and counted by the link).
    fn push(&mut self, frame: &[u8]) -> bool;
}

/// What a [`TapLink`] counted. Every frame read is exactly one of: a RoCE frame
/// for the port, a frame passed to the sink, or a drop with its reason.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TapCounters {
    /// RoCE frames handed to the transport (looped-back ones included).
    pub rx_roce: u64,
    /// Frames sent on the TAP.
    pub tx_frames: u64,
    /// Frames to the port's own MAC looped back without the TAP.
    pub looped: u64,
    /// Frames passed to the guest's NIC.
    pub to_guest: u64,
    /// Frames not for the port and no NIC to take them (or the NIC was full).
    pub drop_not_for_port: u64,
    /// RoCE (UDP 4791) frames for another unicast MAC.
    pub drop_other_mac: u64,
    /// Frames too short for an Ethernet header.
    pub drop_runt: u64,
    /// Frames longer than [`MAX_FRAME_LEN`].
    pub drop_oversized: u64,
    /// Frames to send that were not sent (TAP full or down, bad frame).
    pub drop_tx: u64,
    /// Looped-back frames dropped because the loopback queue was full.
    pub drop_loopback_full: u64,
}

impl std::fmt::Display for TapCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tap: rx_roce {} tx {} looped {} to_guest {} drop_not_for_port {} \
             drop_other_mac {} drop_runt {} drop_oversized {} drop_tx {} \
             drop_loopback_full {}",
            self.rx_roce,
            self.tx_frames,
            self.looped,
            self.to_guest,
            self.drop_not_for_port,
            self.drop_other_mac,
            self.drop_runt,
            self.drop_oversized,
            self.drop_tx,
            self.drop_loopback_full
        )
    }
}

/// What a frame is to the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// IPv4/IPv6 UDP to 4791 for the port's MAC: the transport's.
    Roce,
    /// UDP to 4791 for another unicast MAC.
    OtherMacRoce,
    /// Anything else: ARP, ND, IP, broadcast, multicast.
    Other,
    /// Shorter than an Ethernet header.
    Runt,
}

/// Classifies a frame (no validation beyond what classification reads; the
/// engine checks the rest, WF-10).
pub fn classify(frame: &[u8], mac: &MacAddr) -> FrameKind {
    let Some(hdr) = frame.get(..ETH_HEADER_LEN) else {
        return FrameKind::Runt;
    };
    let mut ethertype = u16::from_be_bytes([hdr[12], hdr[13]]);
    let mut at = ETH_HEADER_LEN;
    if ethertype == ETHERTYPE_VLAN {
        let Some(t) = frame.get(at + 2..at + 4) else {
            return FrameKind::Other;
        };
        ethertype = u16::from_be_bytes([t[0], t[1]]);
        at += VLAN_TAG_LEN;
    }
    let udp_at = match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(&b0) = frame.get(at) else {
                return FrameKind::Other;
            };
            // Version 4, UDP, not a non-first fragment (RoCE never fragments).
            let ihl = usize::from(b0 & 0xf) * 4;
            let ok = b0 >> 4 == 4
                && ihl >= 20
                && frame.get(at + 9) == Some(&17)
                && frame
                    .get(at + 6..at + 8)
                    .is_some_and(|f| u16::from_be_bytes([f[0], f[1]]) & 0x1fff == 0);
            if !ok {
                return FrameKind::Other;
            }
            at + ihl
        }
        ETHERTYPE_IPV6 => {
            if frame.get(at).is_none_or(|b| b >> 4 != 6) || frame.get(at + 6) != Some(&17) {
                return FrameKind::Other;
            }
            at + 40
        }
        _ => return FrameKind::Other,
    };
    match frame.get(udp_at + 2..udp_at + 4) {
        Some(p) if u16::from_be_bytes([p[0], p[1]]) == UDP_PORT => {}
        _ => return FrameKind::Other,
    }
    let dst = &hdr[..6];
    if dst == mac {
        FrameKind::Roce
    } else if dst[0] & 1 == 0 {
        FrameKind::OtherMacRoce
    } else {
        // Multicast RoCE (UD multicast, PV-07) is not served: the port does not
        // join groups, so it is not the port's.
        FrameKind::Other
    }
}

/// The `ethernet` link mode: a TAP device (WF-10).
pub struct TapLink {
    tap: File,
    mac: MacAddr,
    /// One frame as read from the TAP.
    frame: Box<[u8]>,
    loopback: VecDeque<Vec<u8>>,
    sink: Option<Box<dyn FrameSink>>,
    counters: TapCounters,
}

impl std::fmt::Debug for TapLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TapLink")
            .field("fd", &self.tap.as_raw_fd())
            .field("mac", &self.mac)
            .field("counters", &self.counters)
            .finish()
    }
}

/// `struct ifreq` as TUNSETIFF and SIOCGIFMTU read it: the name, then a union
/// whose first member is the flags (or the MTU).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: [u8; 24],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TAP: i16 = 0x0002;
const IFF_NO_PI: i16 = 0x1000;

fn ifreq(name: &str) -> Result<IfReq, std::io::Error> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= 16 || bytes.contains(&0) || bytes.contains(&b'/') {
        return Err(std::io::Error::new(
            ErrorKind::InvalidInput,
            format!("TAP name `{name}`: 1 to 15 characters, no '/'"),
        ));
    }
    let mut r = IfReq {
        name: [0; 16],
        data: [0; 24],
    };
    r.name[..bytes.len()].copy_from_slice(bytes);
    Ok(r)
}

/// ioctl(fd, TUNSETIFF, &mut ifreq): the one system call the standard library
/// has no wrapper for.
#[allow(unsafe_code)]
fn tunsetiff(fd: RawFd, r: &mut IfReq) -> std::io::Result<()> {
    // SAFETY: `r` is a live, exclusively borrowed `struct ifreq`-sized buffer
    // (40 bytes, as the kernel's) for the duration of the call; TUNSETIFF reads
    // and writes only within it, and `fd` is an open descriptor of ours.
    let rc = unsafe { libc::ioctl(fd, TUNSETIFF as _, r as *mut IfReq) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The MTU of network interface `name`, from sysfs (of the caller's network
/// namespace).
pub fn interface_mtu(name: &str) -> std::io::Result<u32> {
    ifreq(name)?;
    let s = std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))?;
    s.trim()
        .parse()
        .map_err(|_| std::io::Error::other(format!("{name}: bad MTU `{}`", s.trim())))
}

impl TapLink {
    /// Attaches to TAP device `name` (created if missing; an existing one must
    /// be a TAP without packet information), non-blocking.
    pub fn open(name: &str, mac: MacAddr) -> Result<TapLink, LinkError> {
        let tun = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| tap_error(name, "open /dev/net/tun", e))?;
        let mut r = ifreq(name).map_err(|e| tap_error(name, "name", e))?;
        r.data[..2].copy_from_slice(&(IFF_TAP | IFF_NO_PI).to_ne_bytes());
        tunsetiff(tun.as_raw_fd(), &mut r).map_err(|e| tap_error(name, "TUNSETIFF", e))?;
        log::info!("fabric: TAP {name}, port MAC {}", format_mac(&mac));
        Ok(TapLink::from_file(tun, mac))
    }

    /// A link over an already open frame descriptor (a TAP, or in tests one
    /// end of a `SOCK_SEQPACKET` socket pair), which must be non-blocking.
    pub fn from_file(tap: File, mac: MacAddr) -> TapLink {
        TapLink {
            tap,
            mac,
            frame: vec![0; MAX_FRAME_LEN + 1].into_boxed_slice(),
            loopback: VecDeque::new(),
            sink: None,
            counters: TapCounters::default(),
        }
    }

    /// Frames that are not the port's go to `sink` from now on.
    pub fn set_sink(&mut self, sink: Box<dyn FrameSink>) {
        self.sink = Some(sink);
    }

    /// What was counted so far.
    pub fn counters(&self) -> &TapCounters {
        &self.counters
    }

    /// A second handle on the TAP for the guest NIC's transmit side (writes of
    /// whole frames are atomic on a TAP, so two writers do not interleave).
    pub fn try_clone_tap(&self) -> std::io::Result<File> {
        self.tap.try_clone()
    }

    /// Handles one frame read from the TAP: `Some(len)` if it was copied into
    /// `buf` for the transport.
    fn take(&mut self, n: usize, buf: &mut [u8]) -> Option<usize> {
        if n > MAX_FRAME_LEN {
            self.counters.drop_oversized += 1;
            return None;
        }
        let frame = &self.frame[..n];
        match classify(frame, &self.mac) {
            FrameKind::Roce if n <= buf.len() => {
                buf[..n].copy_from_slice(frame);
                self.counters.rx_roce += 1;
                Some(n)
            }
            // Longer than any RoCE packet the engine takes: not a valid one.
            FrameKind::Roce => {
                self.counters.drop_oversized += 1;
                None
            }
            FrameKind::OtherMacRoce => {
                self.counters.drop_other_mac += 1;
                None
            }
            FrameKind::Runt => {
                self.counters.drop_runt += 1;
                None
            }
            FrameKind::Other => {
                let taken = self.sink.as_mut().is_some_and(|s| s.push(frame));
                if taken {
                    self.counters.to_guest += 1;
                } else {
                    self.counters.drop_not_for_port += 1;
                }
                None
            }
        }
    }
}

/// `52:54:00:12:34:56`.
pub fn format_mac(mac: &MacAddr) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// Parses `52:54:00:12:34:56`: a unicast MAC (the port's own).
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    (parts.next().is_none() && mac[0] & 1 == 0 && mac != [0; 6]).then_some(mac)
}

fn tap_error(name: &str, what: &str, e: std::io::Error) -> LinkError {
    LinkError::Io(std::io::Error::new(
        e.kind(),
        format!("TAP {name}: {what}: {e}"),
    ))
}

impl Link for TapLink {
    fn send(&mut self, _now: Duration, frame: &[u8]) -> Result<(), LinkError> {
        if frame.len() < ETH_HEADER_LEN || frame.len() > MAX_FRAME_LEN {
            self.counters.drop_tx += 1;
            return Ok(());
        }
        if frame[..6] == self.mac {
            if self.loopback.len() >= TAP_LOOPBACK_CAPACITY {
                self.counters.drop_loopback_full += 1;
            } else {
                self.loopback.push_back(frame.to_vec());
                self.counters.looped += 1;
            }
            return Ok(());
        }
        match self.tap.write(frame) {
            Ok(_) => self.counters.tx_frames += 1,
            // A full or down TAP loses the frame like a congested wire; the
            // transport recovers (RL-10) and the counter shows it.
            Err(e) => {
                self.counters.drop_tx += 1;
                log::debug!("tap: send: {e}");
            }
        }
        Ok(())
    }

    fn recv(&mut self, _now: Duration, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if let Some(f) = self.loopback.pop_front() {
            if f.len() <= buf.len() {
                buf[..f.len()].copy_from_slice(&f);
                self.counters.rx_roce += 1;
                return Ok(Some(f.len()));
            }
            self.counters.drop_oversized += 1;
        }
        for _ in 0..READS_PER_RECV {
            let n = match self.tap.read(&mut self.frame) {
                Ok(0) => return Ok(None),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                // The TAP's interface is down: nothing to read until it is up.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => return Ok(None),
                Err(e) => return Err(LinkError::Io(e)),
            };
            if let Some(len) = self.take(n, buf) {
                return Ok(Some(len));
            }
        }
        Ok(None)
    }

    fn raw_fd(&self) -> RawFd {
        self.tap.as_raw_fd()
    }

    fn report(&self) -> Option<String> {
        Some(self.counters.to_string())
    }

    fn poll_timeout(&self) -> Option<Duration> {
        // Looped-back frames are due at once; the descriptor does not signal them.
        (!self.loopback.is_empty()).then_some(Duration::ZERO)
    }

    fn handle_timeout(&mut self, _now: Duration) -> Result<(), LinkError> {
        Ok(())
    }
}
