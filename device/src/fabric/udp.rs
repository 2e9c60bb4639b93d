//! `ib-udp` link mode (ARCHITECTURE.md §6): one native InfiniBand packet, LRH through
//! VCRC, as the whole payload of one UDP datagram, routed by LRH:DLID through the
//! fabric file.
//!
//! The socket faces the network, so everything that arrives is untrusted (ARCHITECTURE.md
//! §9): a datagram is accepted only from an address listed in the fabric file,
//! carrying that node's LID as its LRH:SLID, addressed to this node's LID (or the
//! permissive LID), and of a length a native packet can have. Everything else is
//! dropped and counted; the CRCs and headers are checked later by
//! `transport::wire::PacketRepr::parse`, which has its own drop counters.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use super::udp_sys::{send_batch, RecvBatch};
use super::{
    dlid_of, slid_of, FabricFile, Link, LinkError, Node, MAX_PACKET_LEN, MIN_PACKET_LEN,
    PERMISSIVE_LID,
};

/// Packets looped back to the node's own LID and not yet received. A sender that
/// outruns its own receiver loses packets here, as it would in a switch buffer,
/// instead of growing memory without bound.
pub const LOOPBACK_CAPACITY: usize = 4096;

/// Datagrams one [`UdpLink::recv`] call reads while skipping dropped ones, so that a
/// flood of junk cannot hold the caller's loop; the socket stays readable and the
/// next call goes on.
const RECV_BATCH: usize = 256;

/// Datagrams one recvmmsg reads, and sends one sendmmsg writes (between
/// [`Link::begin_sends`] and [`Link::end_sends`]): a port round moves up to 64
/// packets each way.
const MMSG_BATCH: usize = 32;

/// What a [`UdpLink`] did, and every reason it dropped a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// Packets sent on the socket.
    pub tx_packets: u64,
    /// Bytes sent on the socket.
    pub tx_bytes: u64,
    /// Packets to the node's own LID, looped back without the socket (AD-04).
    pub loopback_packets: u64,
    /// Packets received (socket and loopback).
    pub rx_packets: u64,
    /// Bytes received (socket and loopback).
    pub rx_bytes: u64,
    /// Send: LRH:DLID is no node of the fabric file.
    pub drop_tx_unknown_dlid: u64,
    /// Send: shorter than [`MIN_PACKET_LEN`].
    pub drop_tx_short: u64,
    /// Send: longer than [`MAX_PACKET_LEN`].
    pub drop_tx_oversized: u64,
    /// Send: the socket's send buffer was full.
    pub drop_tx_would_block: u64,
    /// Send: the socket refused the datagram (the error is also returned).
    pub drop_tx_error: u64,
    /// Send: the loopback queue held [`LOOPBACK_CAPACITY`] packets.
    pub drop_loopback_full: u64,
    /// Receive: from an address that is no node of the fabric file.
    pub drop_rx_unknown_source: u64,
    /// Receive: shorter than [`MIN_PACKET_LEN`].
    pub drop_rx_short: u64,
    /// Receive: longer than [`MAX_PACKET_LEN`].
    pub drop_rx_oversized: u64,
    /// Receive: LRH:SLID is not the sending node's LID (a spoofed source).
    pub drop_rx_slid_mismatch: u64,
    /// Receive: LRH:DLID is neither this node's LID nor the permissive LID.
    pub drop_rx_wrong_dlid: u64,
    /// Receive: the socket reported an error for an earlier datagram (an ICMP
    /// port-unreachable from a peer that is down); skipped.
    pub rx_socket_errors: u64,
}

impl UdpCounters {
    /// All packets dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        self.drop_tx_unknown_dlid
            + self.drop_tx_short
            + self.drop_tx_oversized
            + self.drop_tx_would_block
            + self.drop_tx_error
            + self.drop_loopback_full
            + self.drop_rx_unknown_source
            + self.drop_rx_short
            + self.drop_rx_oversized
            + self.drop_rx_slid_mismatch
            + self.drop_rx_wrong_dlid
    }
}

/// Socket buffer size asked for (bytes): 1024 full-PMTU packets.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// The `ib-udp` link of one node.
#[derive(Debug)]
pub struct UdpLink {
    fabric: FabricFile,
    node: Node,
    socket: UdpSocket,
    loopback: VecDeque<Vec<u8>>,
    /// The last recvmmsg's datagrams (buffers one byte longer than the longest
    /// packet, so that an oversized datagram shows as a full buffer instead of
    /// being silently truncated into a "valid" length), and the next to hand out.
    rx: RecvBatch,
    rx_got: Vec<(usize, Option<SocketAddr>)>,
    rx_next: usize,
    /// Between [`Link::begin_sends`] and [`Link::end_sends`]: sends queue.
    batching: bool,
    /// Sends queued while batching.
    tx_queue: Vec<(Vec<u8>, SocketAddr)>,
    /// Buffers of sent packets, reused by the next queued sends.
    tx_spare: Vec<Vec<u8>>,
    counters: UdpCounters,
}

impl UdpLink {
    /// Binds `node`'s address from the fabric file.
    pub fn bind(fabric: &FabricFile, node: &str) -> Result<UdpLink, LinkError> {
        let me = Self::own_node(fabric, node)?;
        let socket = UdpSocket::bind(me.address).map_err(|source| LinkError::Bind {
            node: node.to_string(),
            address: me.address,
            source,
        })?;
        UdpLink::from_socket(fabric, node, socket)
    }

    /// Uses a socket the caller bound already (to learn an OS-chosen port before
    /// writing the fabric file, or a socket passed in by a supervisor). It must be
    /// bound to `node`'s address.
    pub fn from_socket(
        fabric: &FabricFile,
        node: &str,
        socket: UdpSocket,
    ) -> Result<UdpLink, LinkError> {
        let me = Self::own_node(fabric, node)?;
        let actual = socket.local_addr()?;
        if actual != me.address {
            return Err(LinkError::AddressMismatch {
                node: node.to_string(),
                expected: me.address,
                actual,
            });
        }
        socket.set_nonblocking(true)?;
        // Bursts of full-PMTU packets overflow the default receive buffer (208
        // KiB) before the data path drains it: ask for more (Linux caps it at
        // twice net.core.rmem_max) and say what was granted.
        let sref = socket2::SockRef::from(&socket);
        let _ = sref.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sref.set_send_buffer_size(SOCKET_BUFFER);
        log::debug!(
            "fabric: socket buffers rx {:?} tx {:?}",
            sref.recv_buffer_size().ok(),
            sref.send_buffer_size().ok()
        );
        log::info!(
            "fabric: node {} (LID {:#x}, GUID {:#018x}) on udp {} ({} nodes in {})",
            me.name,
            me.lid,
            me.guid,
            me.address,
            fabric.nodes().len(),
            fabric.file()
        );
        Ok(UdpLink {
            fabric: fabric.clone(),
            node: me,
            socket,
            loopback: VecDeque::new(),
            rx: RecvBatch::new(MMSG_BATCH, MAX_PACKET_LEN + 1),
            rx_got: Vec::with_capacity(MMSG_BATCH),
            rx_next: 0,
            batching: false,
            tx_queue: Vec::with_capacity(MMSG_BATCH),
            tx_spare: Vec::new(),
            counters: UdpCounters::default(),
        })
    }

    fn own_node(fabric: &FabricFile, node: &str) -> Result<Node, LinkError> {
        fabric
            .by_name(node)
            .cloned()
            .ok_or_else(|| LinkError::UnknownNode(node.to_string()))
    }

    /// This node's entry in the fabric file.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The fabric this link routes through.
    pub fn fabric(&self) -> &FabricFile {
        &self.fabric
    }

    /// The socket's bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.node.address
    }

    /// What the link did and dropped so far.
    pub fn counters(&self) -> &UdpCounters {
        &self.counters
    }

    /// Sends the queued packets with as few sendmmsg calls as the kernel
    /// allows. A full socket buffer drops the rest like a congested link
    /// would (the transport recovers them, RL-10).
    fn send_queued(&mut self) -> Result<(), LinkError> {
        let q = &mut self.tx_queue;
        let mut r = Ok(());
        let mut at = 0;
        while at < q.len() {
            let msgs: Vec<(&[u8], SocketAddr)> =
                q[at..].iter().map(|(b, a)| (b.as_slice(), *a)).collect();
            match send_batch(self.socket.as_raw_fd(), &msgs) {
                Ok(n) if n > 0 => {
                    for (b, _) in &q[at..at + n] {
                        self.counters.tx_packets += 1;
                        self.counters.tx_bytes += b.len() as u64;
                    }
                    at += n;
                }
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.counters.drop_tx_would_block += (q.len() - at) as u64;
                    at = q.len();
                }
                Err(e) => {
                    // The first packet failed: count it and go on with the rest.
                    self.counters.drop_tx_error += 1;
                    at += 1;
                    if r.is_ok() {
                        r = Err(e.into());
                    }
                }
            }
        }
        for (b, _) in q.drain(..) {
            if self.tx_spare.len() < MMSG_BATCH {
                self.tx_spare.push(b);
            }
        }
        r
    }

    /// Checks datagram `i` of the receive batch, from `from`; its length if it
    /// is to be delivered.
    fn accept(&mut self, i: usize, n: usize, from: SocketAddr) -> Option<usize> {
        let c = &mut self.counters;
        let Some(peer) = self.fabric.by_address(&from) else {
            c.drop_rx_unknown_source += 1;
            log::debug!("fabric: dropped {n}-byte datagram from {from}: not in the fabric file");
            return None;
        };
        if n > MAX_PACKET_LEN {
            c.drop_rx_oversized += 1;
            log::debug!("fabric: dropped oversized datagram from {}", peer.name);
            return None;
        }
        if n < MIN_PACKET_LEN {
            c.drop_rx_short += 1;
            log::debug!("fabric: dropped {n}-byte datagram from {}", peer.name);
            return None;
        }
        let pkt = &self.rx.buf(i)[..n];
        let slid = slid_of(pkt);
        if slid != Some(peer.lid) {
            c.drop_rx_slid_mismatch += 1;
            log::debug!(
                "fabric: dropped packet from {} with SLID {slid:#x?}, its LID is {:#x}",
                peer.name,
                peer.lid
            );
            return None;
        }
        let dlid = dlid_of(pkt);
        if dlid != Some(self.node.lid) && dlid != Some(PERMISSIVE_LID) {
            c.drop_rx_wrong_dlid += 1;
            log::debug!(
                "fabric: dropped packet from {} for DLID {dlid:#x?}",
                peer.name
            );
            return None;
        }
        Some(n)
    }
}

impl Link for UdpLink {
    fn send(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        let c = &mut self.counters;
        if packet.len() < MIN_PACKET_LEN {
            c.drop_tx_short += 1;
            return Ok(());
        }
        if packet.len() > MAX_PACKET_LEN {
            c.drop_tx_oversized += 1;
            return Ok(());
        }
        let Some(dlid) = dlid_of(packet) else {
            // Unreachable after the length check, but a drop is the right answer.
            c.drop_tx_short += 1;
            return Ok(());
        };
        if dlid == self.node.lid {
            // AD-04: a packet to the own LID never touches the socket (ARCHITECTURE.md §6).
            if self.loopback.len() >= LOOPBACK_CAPACITY {
                c.drop_loopback_full += 1;
            } else {
                c.loopback_packets += 1;
                self.loopback.push_back(packet.to_vec());
            }
            return Ok(());
        }
        let Some(peer) = self.fabric.by_lid(dlid) else {
            c.drop_tx_unknown_dlid += 1;
            log::debug!("fabric: dropped packet for DLID {dlid:#x}: no such node");
            return Ok(());
        };
        let to = peer.address;
        if self.batching {
            let mut b = self.tx_spare.pop().unwrap_or_default();
            b.clear();
            b.extend_from_slice(packet);
            self.tx_queue.push((b, to));
            if self.tx_queue.len() >= MMSG_BATCH {
                return self.send_queued();
            }
            return Ok(());
        }
        match self.socket.send_to(packet, to) {
            Ok(_) => {
                c.tx_packets += 1;
                c.tx_bytes += packet.len() as u64;
                Ok(())
            }
            // A full send buffer loses the packet like a congested link would; the
            // transport recovers it (ARCHITECTURE.md §3).
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                c.drop_tx_would_block += 1;
                Ok(())
            }
            Err(e) => {
                c.drop_tx_error += 1;
                Err(e.into())
            }
        }
    }

    fn begin_sends(&mut self) {
        self.batching = true;
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        self.batching = false;
        self.send_queued()
    }

    fn recv(&mut self, _now: Duration, buf: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if buf.len() < MAX_PACKET_LEN {
            return Err(LinkError::BufferTooSmall { have: buf.len() });
        }
        if let Some(p) = self.loopback.pop_front() {
            buf[..p.len()].copy_from_slice(&p);
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += p.len() as u64;
            return Ok(Some(p.len()));
        }
        for _ in 0..RECV_BATCH {
            if self.rx_next >= self.rx_got.len() {
                self.rx_next = 0;
                match self.rx.recv(self.socket.as_raw_fd(), &mut self.rx_got) {
                    Ok(()) if self.rx_got.is_empty() => return Ok(None),
                    Ok(()) => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // An ICMP error queued for an earlier datagram: it says a peer is
                    // down, which the transport learns by its own timeouts.
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::ConnectionRefused | ErrorKind::ConnectionReset
                        ) =>
                    {
                        self.counters.rx_socket_errors += 1;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let i = self.rx_next;
            self.rx_next += 1;
            let (n, from) = self.rx_got[i];
            let Some(from) = from else {
                self.counters.drop_rx_unknown_source += 1;
                continue;
            };
            if let Some(n) = self.accept(i, n, from) {
                buf[..n].copy_from_slice(&self.rx.buf(i)[..n]);
                self.counters.rx_packets += 1;
                self.counters.rx_bytes += n as u64;
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    fn raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    fn clear(&mut self) {
        self.loopback.clear();
    }

    fn poll_timeout(&self) -> Option<Duration> {
        // Looped-back packets do not make the socket readable: ask to be called
        // at once.
        (!self.loopback.is_empty()).then_some(Duration::ZERO)
    }

    fn handle_timeout(&mut self, _now: Duration) -> Result<(), LinkError> {
        Ok(())
    }
}
