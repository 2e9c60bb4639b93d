//! `ib-udp` link mode (ARCHITECTURE.md §6): one native InfiniBand packet, LRH through
//! VCRC, as the whole payload of one UDP datagram, routed by LRH:DLID through the
//! fabric file.
//!
//! The socket faces the network, so everything that arrives is untrusted (ARCHITECTURE.md
//! §9). The link checks what the packet itself does not say: a datagram is taken
//! only from an address listed in the fabric file, and only if it fits a receive
//! buffer; it is lent to the caller with that node's LID ([`Received::src_lid`]).
//! Everything in the packet — its length fields, LRH:DLID and LRH:SLID (against
//! that LID), the CRCs — is checked once, by the engine's parse, which counts its
//! own drops (ARCHITECTURE.md §2, "A received packet").
//!
//! Batched I/O (issue 12): recvmmsg and sendmmsg, and where the kernel has them UDP
//! GSO (a run of same-size packets to one peer, e.g. the PMTU packets of one RDMA
//! WRITE, leaves as one super-datagram) and UDP GRO (a received buffer may hold a
//! run of datagrams, split here by the segment size the kernel reports). Both are
//! probed when the link is set up and dropped, with a log line, when the kernel
//! refuses them; a GSO send the kernel refuses later (EINVAL) turns GSO off and
//! goes out again as plain datagrams.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use transport::wire::packet::BUFFER_ALIGN_OFFSET;

use super::liveness::{Liveness, BEAT, DEAD_AFTER, KEEPALIVE};
pub use super::udp_counters::{buffer_warning, UdpCounters, SOCKET_BUFFER};
use super::udp_sys::{send_batch, set_udp_opt, OutMsg, RecvBatch, RecvMeta};
use super::{
    dlid_of, End, FabricFile, Link, LinkError, Node, Received, MAX_PACKET_LEN, MIN_PACKET_LEN,
};

/// Packets looped back to the node's own LID and not yet received. A sender that
/// outruns its own receiver loses packets here, as it would in a switch buffer,
/// instead of growing memory without bound.
pub const LOOPBACK_CAPACITY: usize = 4096;

/// Messages one [`Link::recv_batch`] call skips (dropped, or socket errors)
/// before it returns, so that a flood of junk cannot hold the caller's loop; the
/// socket stays readable and the next call goes on.
const RECV_SKIP: usize = 256;

/// Messages one recvmmsg reads.
const MMSG_BATCH: usize = 32;

/// Packets queued between [`Link::begin_sends`] and [`Link::end_sends`] before
/// they go out anyway (one sendmmsg, fewer messages with GSO): a port round's
/// budget.
const TX_QUEUE: usize = 64;

/// A receive buffer with GRO: the largest UDP payload, which is also the largest
/// run the kernel coalesces.
const GRO_BUF: usize = 1 << 16;

/// Segments of one GSO send at most (the kernel's UDP_MAX_SEGMENTS was 64 before
/// Linux 6.1, 128 since).
const GSO_MAX_SEGMENTS: usize = 64;

/// Bytes of one GSO send at most: the run must fit one IP datagram (65535 bytes
/// with the IPv6 header and the UDP header).
const GSO_MAX_BYTES: usize = 65_535 - 40 - 8;

/// Which kernel offloads a [`UdpLink`] may use (issue 12: "UDP GSO/GRO where the
/// kernel has them"). Each one allowed is still probed at setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpOffloads {
    /// UDP_SEGMENT on send.
    pub gso: bool,
    /// UDP_GRO on receive.
    pub gro: bool,
}

impl UdpOffloads {
    /// Both, where the kernel has them (the default).
    pub const ALL: UdpOffloads = UdpOffloads {
        gso: true,
        gro: true,
    };
    /// Neither: one datagram per packet each way.
    pub const NONE: UdpOffloads = UdpOffloads {
        gso: false,
        gro: false,
    };
}

/// A send buffer: room for the longest packet, which starts
/// `BUFFER_ALIGN_OFFSET` bytes past a 16-byte boundary so that the engine's CRC
/// folds the payload aligned when it builds the packet in place (WF-09).
#[derive(Debug)]
struct TxBuf {
    data: Box<[u8]>,
    off: usize,
    len: usize,
}

impl TxBuf {
    fn new() -> TxBuf {
        let data = vec![0u8; MAX_PACKET_LEN + 16].into_boxed_slice();
        let at = data.as_ptr() as usize % 16;
        let off = (16 + BUFFER_ALIGN_OFFSET - at) % 16;
        TxBuf { data, off, len: 0 }
    }

    /// Room for a whole packet.
    fn room(&mut self) -> &mut [u8] {
        &mut self.data[self.off..self.off + MAX_PACKET_LEN]
    }

    fn as_slice(&self) -> &[u8] {
        &self.data[self.off..self.off + self.len]
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// The `ib-udp` link of one node.
#[derive(Debug)]
pub struct UdpLink {
    fabric: FabricFile,
    node: Node,
    socket: UdpSocket,
    loopback: VecDeque<Vec<u8>>,
    /// Buffers of received loopback packets, reused by the next ones.
    loopback_spare: Vec<Vec<u8>>,
    /// The last recvmmsg's messages (buffers one byte longer than the longest
    /// packet, or [`GRO_BUF`] with GRO, so that an oversized datagram shows as
    /// too long instead of being silently truncated into a "valid" length), the
    /// next message to lend from and the offset of its next segment.
    rx: RecvBatch,
    rx_got: Vec<RecvMeta>,
    /// The last read of this `recv_batch` was short: the queue ran empty, the
    /// call reads no more (issue 30 item 3). And the reads made, for tests.
    rx_drained: bool,
    recv_calls: u64,
    rx_next: usize,
    rx_off: usize,
    /// UDP_SEGMENT / UDP_GRO in use (probed at setup; GSO also dropped when a
    /// send is refused).
    gso: bool,
    gro: bool,
    /// Between [`Link::begin_sends`] and [`Link::end_sends`]: sends queue.
    batching: bool,
    /// Sends queued while batching.
    tx_queue: Vec<(TxBuf, SocketAddr)>,
    /// Buffers of sent packets, reused by the next queued sends.
    tx_spare: Vec<TxBuf>,
    /// The buffer [`Link::send_buffer`] lent, until [`Link::send_from_buffer`].
    tx_slot: Option<TxBuf>,
    counters: UdpCounters,
    /// Whether the port is up (AE-01).
    live: Liveness,
    /// In a cabled fabric (`cabling.rs`): the other end of this port's cable,
    /// where every packet goes and the only address datagrams are taken from.
    cable: Option<Cable>,
    /// Whether packets to the node's own LIDs loop back (an HCA port, AD-04);
    /// not on a switch port, which has no LID of its own.
    own_lids: bool,
}

/// The other end of a cabled port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cable {
    peer: SocketAddr,
    /// The LID datagrams from the peer are lent with: the peer node's, back
    /// to back; none through a switch, which forwards every node's packets.
    peer_lid: Option<u16>,
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
        UdpLink::with_offloads(fabric, node, socket, UdpOffloads::ALL)
    }

    /// [`UdpLink::from_socket`], using only the offloads `allow` names (tests
    /// force the plain path with [`UdpOffloads::NONE`]).
    pub fn with_offloads(
        fabric: &FabricFile,
        node: &str,
        socket: UdpSocket,
        allow: UdpOffloads,
    ) -> Result<UdpLink, LinkError> {
        let me = Self::own_node(fabric, node)?;
        let c = fabric.cabling();
        let i = fabric.nodes().iter().position(|n| n.name == me.name);
        let cable = match i
            .filter(|_| c.is_cabled())
            .and_then(|i| c.peer(End::Node(i)))
        {
            None => None,
            Some(peer) => Some(Cable {
                peer: c
                    .address(fabric.nodes(), peer)
                    .ok_or_else(|| LinkError::UnknownNode(node.into()))?,
                peer_lid: match peer {
                    End::Node(j) => Some(fabric.nodes()[j].lid),
                    End::Port { .. } => None,
                },
            }),
        };
        UdpLink::open(fabric, me, cable, true, socket, allow)
    }

    /// The link of port `port` of switch `switch` (`vhca switch`): cabled to
    /// the other end of the port's link, no LID of its own, down until the
    /// other end is heard (a port without a link partner has no link).
    pub fn switch_port(
        fabric: &FabricFile,
        switch: &str,
        port: u8,
        socket: UdpSocket,
        allow: UdpOffloads,
    ) -> Result<UdpLink, LinkError> {
        let name = format!("{switch}:{port}");
        let c = fabric.cabling();
        let unknown = || LinkError::UnknownNode(name.clone());
        let (s, sw) = c.switch(switch).ok_or_else(unknown)?;
        let here = End::Port { switch: s, port };
        let address = c.address(fabric.nodes(), here).ok_or_else(unknown)?;
        let peer = c.peer(here).ok_or_else(unknown)?;
        let cable = Cable {
            peer: c.address(fabric.nodes(), peer).ok_or_else(unknown)?,
            peer_lid: match peer {
                End::Node(j) => Some(fabric.nodes()[j].lid),
                End::Port { .. } => None,
            },
        };
        let me = Node {
            name,
            lid: 0,
            guid: sw.guid,
            address,
        };
        let mut l = UdpLink::open(fabric, me, Some(cable), false, socket, allow)?;
        l.live.set_down();
        Ok(l)
    }

    fn open(
        fabric: &FabricFile,
        me: Node,
        cable: Option<Cable>,
        own_lids: bool,
        socket: UdpSocket,
        allow: UdpOffloads,
    ) -> Result<UdpLink, LinkError> {
        let node = me.name.as_str();
        let actual = socket.local_addr()?;
        if actual != me.address {
            return Err(LinkError::AddressMismatch {
                node: node.to_string(),
                expected: me.address,
                actual,
            });
        }
        socket.set_nonblocking(true)?;
        // Issue 27 item 3: never an IP fragment; a datagram over the path
        // MTU is refused (EMSGSIZE, `drop_tx_error`) instead (`underlay`).
        super::underlay::set_dont_fragment(&socket)?;
        // Bursts of full-PMTU packets overflow the default receive buffer (208
        // KiB) before the data path drains it: ask for more (Linux caps it at
        // twice net.core.rmem_max) and say what was granted.
        let sref = socket2::SockRef::from(&socket);
        let _ = sref.set_recv_buffer_size(SOCKET_BUFFER);
        let _ = sref.set_send_buffer_size(SOCKET_BUFFER);
        let (rx, tx) = (sref.recv_buffer_size().ok(), sref.send_buffer_size().ok());
        log::debug!("fabric: socket buffers rx {rx:?} tx {tx:?}");
        if let Some(w) = buffer_warning(rx, tx) {
            log::warn!("fabric: {w}");
        }
        let fd = socket.as_raw_fd();
        // Probed by setting them: UDP_SEGMENT 0 (no default segment size; each
        // send names its own), UDP_GRO on. ENOPROTOOPT on kernels without them.
        let gso = allow.gso && probe("GSO", set_udp_opt(fd, libc::UDP_SEGMENT, 0));
        let gro = allow.gro && probe("GRO", set_udp_opt(fd, libc::UDP_GRO, 1));
        log::info!(
            "fabric: node {} (LID {:#x}, GUID {:#018x}) on udp {} ({} nodes in {}); \
             UDP GSO {}, GRO {}",
            me.name,
            me.lid,
            me.guid,
            me.address,
            fabric.nodes().len(),
            fabric.file(),
            on_off(gso),
            on_off(gro),
        );
        let buf = if gro { GRO_BUF } else { MAX_PACKET_LEN + 1 };
        let peers = match cable {
            Some(c) => vec![c.peer],
            None => fabric
                .nodes()
                .iter()
                .filter(|n| n.address != me.address)
                .map(|n| n.address)
                .collect(),
        };
        if let Some(c) = cable {
            log::info!("fabric: {} cabled to udp {}", me.name, c.peer);
        }
        Ok(UdpLink {
            live: Liveness::new(peers, BEAT, DEAD_AFTER),
            fabric: fabric.clone(),
            node: me,
            socket,
            loopback: VecDeque::new(),
            loopback_spare: Vec::new(),
            rx: RecvBatch::new(MMSG_BATCH, buf),
            rx_got: Vec::with_capacity(MMSG_BATCH),
            rx_drained: false,
            recv_calls: 0,
            rx_next: 0,
            rx_off: 0,
            gso,
            gro,
            batching: false,
            tx_queue: Vec::with_capacity(TX_QUEUE),
            tx_spare: Vec::new(),
            tx_slot: None,
            counters: UdpCounters::default(),
            cable,
            own_lids,
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

    /// The MTU of the network under this link (issue 27 item 3): of the
    /// route to the cable's other end, or without cabling the smallest of
    /// the routes to every other node of the fabric file (`underlay`).
    pub fn underlay_mtu(&self) -> std::io::Result<u32> {
        let peers: Vec<SocketAddr> = match self.cable {
            Some(c) => vec![c.peer],
            None => self
                .fabric
                .nodes()
                .iter()
                .map(|n| n.address)
                .filter(|&a| a != self.node.address)
                .collect(),
        };
        super::underlay::path_mtu(self.node.address, &peers)
    }

    /// The IB MTU of this link's port (issue 27 item 3,
    /// `underlay::port_mtu`): the largest its underlay carries with
    /// `trailer` bytes added to each datagram (the fabric key's), or the
    /// fabric file's lower `mtu`.
    pub fn port_mtu(&self, trailer: usize) -> Result<transport::verbs::Mtu, LinkError> {
        let under = self.underlay_mtu()?;
        let ipv6 = self.node.address.is_ipv6();
        let m =
            super::underlay::port_mtu(under, ipv6, trailer, self.fabric.mtu()).map_err(|why| {
                LinkError::Mtu {
                    node: self.node.name.clone(),
                    why,
                }
            })?;
        log::info!(
            "fabric: {} underlay MTU {under} bytes: IB MTU {}",
            self.node.name,
            m.bytes()
        );
        Ok(m)
    }

    /// The socket (for its options).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Sets how often keepalives go to the other nodes and after how long
    /// without hearing one the port is down (AE-01, `liveness`; defaults
    /// 1 s and 5 s). `None`: no keepalives, the port stays up.
    pub fn set_liveness(&mut self, beat_and_dead_after: Option<(Duration, Duration)>) {
        let was_up = self.live.is_up() || beat_and_dead_after.is_none();
        self.live = match beat_and_dead_after {
            Some((beat, dead)) => Liveness::new(self.live.peers().to_vec(), beat, dead),
            None => Liveness::off(),
        };
        if !was_up {
            self.live.set_down();
        }
    }

    /// The receive buffer the kernel granted the socket (`SO_RCVBUF` as
    /// read back), which link flow control must not grant past.
    pub fn recv_buffer(&self) -> Option<usize> {
        socket2::SockRef::from(&self.socket).recv_buffer_size().ok()
    }

    /// Asks for a receive buffer of `bytes` instead of [`SOCKET_BUFFER`]
    /// (the fabric file's `rx_buffer`, for runs that show what a small
    /// buffer does); returns what the kernel granted.
    pub fn set_recv_buffer(&mut self, bytes: usize) -> Option<usize> {
        let s = socket2::SockRef::from(&self.socket);
        let _ = s.set_recv_buffer_size(bytes);
        self.recv_buffer()
    }

    /// What the link did and dropped so far.
    pub fn counters(&self) -> &UdpCounters {
        &self.counters
    }

    /// How many recvmmsg system calls the link made.
    pub fn recv_calls(&self) -> u64 {
        self.recv_calls
    }

    /// The offloads in use now.
    pub fn offloads(&self) -> UdpOffloads {
        UdpOffloads {
            gso: self.gso,
            gro: self.gro,
        }
    }

    /// The queued packets from `from` on as sendmmsg messages: with GSO, each
    /// run to one peer of packets as long as its first (the last may be
    /// shorter) is one message; without, one message per packet. Also returns
    /// the packet count of each message.
    fn messages(&self, from: usize) -> (Vec<OutMsg<'_>>, Vec<usize>) {
        let q = &self.tx_queue[from..];
        let mut msgs = Vec::new();
        let mut counts = Vec::new();
        let mut i = 0;
        while i < q.len() {
            let (first, to) = (&q[i].0, q[i].1);
            let size = first.len();
            let mut j = i + 1;
            let mut total = size;
            if self.gso && size <= usize::from(u16::MAX) {
                while j < q.len()
                    && q[j].1 == to
                    && q[j].0.len() <= size
                    && j - i < GSO_MAX_SEGMENTS
                    && total + q[j].0.len() <= GSO_MAX_BYTES
                {
                    let len = q[j].0.len();
                    // Only the last segment of a run may be short; a shorter
                    // packet that starts a run of its own (the MIDDLEs after a
                    // FIRST with its RETH) is left to start it.
                    let starts_run = q.get(j + 1).is_some_and(|n| n.1 == to && n.0.len() == len);
                    if len < size && starts_run {
                        break;
                    }
                    total += len;
                    j += 1;
                    if len < size {
                        break;
                    }
                }
            }
            msgs.push(OutMsg {
                parts: q[i..j].iter().map(|(b, _)| b.as_slice()).collect(),
                to,
                gso: (j - i > 1).then_some(size as u16),
            });
            counts.push(j - i);
            i = j;
        }
        (msgs, counts)
    }

    /// Sends the queued packets with as few sendmmsg calls as the kernel
    /// allows. A full socket buffer drops the rest like a congested link
    /// would (the transport recovers them, RL-10).
    fn send_queued(&mut self) -> Result<(), LinkError> {
        let mut r = Ok(());
        let mut at = 0;
        while at < self.tx_queue.len() {
            let (msgs, counts) = self.messages(at);
            let sent = send_batch(self.socket.as_raw_fd(), &msgs);
            let first_gso = msgs[0].gso.is_some();
            drop(msgs);
            match sent {
                Ok(n) if n > 0 => {
                    let pkts: usize = counts[..n].iter().sum();
                    for (b, _) in &self.tx_queue[at..at + pkts] {
                        self.counters.tx_packets += 1;
                        self.counters.tx_bytes += b.len() as u64;
                    }
                    self.counters.tx_gso_runs +=
                        counts[..n].iter().filter(|&&c| c > 1).count() as u64;
                    at += pkts;
                }
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.counters.drop_tx_would_block += (self.tx_queue.len() - at) as u64;
                    at = self.tx_queue.len();
                }
                Err(e) if first_gso && e.raw_os_error() == Some(libc::EINVAL) => {
                    // The kernel takes UDP_SEGMENT but refuses this send (a
                    // path MTU below the segment size, checksums off): plain
                    // datagrams from here on, this run included.
                    log::warn!("fabric: UDP GSO send refused ({e}); sending without GSO");
                    self.gso = false;
                }
                Err(e) => {
                    // The first message failed: count its packets and go on with
                    // the rest.
                    self.counters.drop_tx_error += counts[0] as u64;
                    at += counts[0];
                    if r.is_ok() {
                        r = Err(e.into());
                    }
                }
            }
        }
        for (b, _) in self.tx_queue.drain(..) {
            if self.tx_spare.len() < TX_QUEUE {
                self.tx_spare.push(b);
            }
        }
        r
    }

    /// The next packet of the receive batch, reading a new batch when it is
    /// used up: its place in the batch and the sender, or `None` when nothing is
    /// waiting. Skips (and counts) what the link drops, at most [`RECV_SKIP`]
    /// messages' worth per call of the caller's, which `skipped` carries.
    fn next_rx(&mut self, now: Duration, skipped: &mut usize) -> Result<Option<RxAt>, LinkError> {
        while *skipped < RECV_SKIP {
            if self.rx_next >= self.rx_got.len() {
                self.rx_next = 0;
                self.rx_off = 0;
                if self.rx_drained {
                    self.rx_got.clear();
                    return Ok(None);
                }
                self.recv_calls += 1;
                let got = self.rx.recv(self.socket.as_raw_fd(), &mut self.rx_got);
                // A batch under MMSG_BATCH emptied the queue (what arrives now
                // keeps the socket readable for the next round or epoll); an
                // error, such as a peer's queued ICMP, says nothing of the rest.
                self.rx_drained = got.is_ok() && self.rx_got.len() < MMSG_BATCH;
                match got {
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
                        *skipped += 1;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            let i = self.rx_next;
            let m = self.rx_got[i];
            // Cabled: only the cable's other end; else any node of the file.
            let lid = match self.cable {
                Some(c) => (m.from == Some(c.peer)).then_some(c.peer_lid),
                None => m
                    .from
                    .and_then(|a| self.fabric.by_address(&a))
                    .map(|p| Some(p.lid)),
            };
            let Some(lid) = lid else {
                self.counters.drop_rx_unknown_source += 1;
                log::debug!(
                    "fabric: dropped {}-byte datagram from {:?}: not in the fabric file",
                    m.len,
                    m.from
                );
                self.rx_next += 1;
                self.rx_off = 0;
                *skipped += 1;
                continue;
            };
            if self.rx_off == 0 && m.segment.is_some() {
                self.counters.rx_gro_runs += 1;
            }
            // One datagram, or the next segment of a coalesced run (each as
            // long as the segment size, the last one shorter or equal).
            let start = self.rx_off;
            let end = m.segment.map_or(m.len, |s| (start + s).min(m.len));
            if end >= m.len {
                self.rx_next += 1;
                self.rx_off = 0;
            } else {
                self.rx_off = end;
            }
            if self.live.is_disabled() {
                // IBA 14.2.5.6: a Disabled port hears nothing, keepalives
                // included (its partner's, until the partner goes down).
                self.counters.drop_rx_disabled += 1;
                *skipped += 1;
                continue;
            }
            // AE-01: any datagram from a fabric node says it is alive.
            self.live.heard(now);
            if Liveness::is_keepalive(&self.rx.buf(i)[start..end]) {
                self.live.counters.keepalives_received += 1;
                self.counters.liveness = self.live.counters;
                *skipped += 1;
                continue;
            }
            if end - start > MAX_PACKET_LEN {
                self.counters.drop_rx_oversized += 1;
                log::debug!("fabric: dropped oversized datagram from LID {lid:?}");
                *skipped += 1;
                continue;
            }
            return Ok(Some((i, start..end, lid)));
        }
        Ok(None)
    }
}

/// The LID a packet from the node with base LID `base` was sent from: its
/// SLID when that is one of the node's 2^LMC LIDs (AD-01: path bits pick the
/// source LID), else the base LID, which the engine then finds spoofed
/// (ARCHITECTURE.md §9).
/// `None` for a packet from a switch port, which carries every node's packets.
pub(super) fn source_lid(fabric: &FabricFile, base: Option<u16>, packet: &[u8]) -> Option<u16> {
    let base = base?;
    Some(match super::slid_of(packet) {
        Some(s) if s == base => base,
        Some(s) if fabric.by_lid(s).is_some_and(|n| n.lid == base) => s,
        _ => base,
    })
}

/// A received packet's place: its message in the batch, its bytes there, and
/// the sender's LID when the link knows it.
type RxAt = (usize, std::ops::Range<usize>, Option<u16>);

/// Where a packet to send goes.
enum Route {
    /// One peer.
    To(SocketAddr),
    /// Nowhere more: dropped (counted) or looped back to the own LID (AD-04).
    Done,
    /// A multicast DLID: every node (PV-07, [`UdpLink::send_multicast`]).
    Multicast,
}

impl UdpLink {
    /// A multicast packet (PV-07): without a subnet manager, no node knows
    /// which others joined the group, so it goes to every node of the fabric
    /// file, this one included (loopback), and each engine keeps it only for
    /// its QPs attached to the group (C9-58; ARCHITECTURE.md §6). A node that
    /// attaches needs no configuration; the copies cost one datagram per node,
    /// bounded by the fabric file.
    fn send_multicast(&mut self, packet: &[u8]) -> Result<(), LinkError> {
        self.counters.tx_multicast += 1;
        if self.own_lids {
            self.loop_back(packet);
        }
        let own = self.node.lid;
        let mut r = Ok(());
        // Cabled: one copy to the cable's other end (a switch replicates it
        // by its multicast forwarding table).
        let to_all = self.cable.is_none();
        let count = if to_all { self.fabric.nodes().len() } else { 1 };
        for i in 0..count {
            let to = match self.cable {
                Some(c) => c.peer,
                None if self.fabric.nodes()[i].lid == own => continue,
                None => self.fabric.nodes()[i].address,
            };
            let sent = if self.batching {
                let mut b = self.tx_spare.pop().unwrap_or_else(TxBuf::new);
                b.room()[..packet.len()].copy_from_slice(packet);
                b.len = packet.len();
                self.queue(b, to)
            } else {
                self.send_one(packet, to)
            };
            if sent.is_err() {
                r = sent;
            }
        }
        r
    }

    /// One datagram on the socket, now.
    fn send_one(&mut self, packet: &[u8], to: SocketAddr) -> Result<(), LinkError> {
        let c = &mut self.counters;
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

    /// Queues a copy of `packet` for this node's own receive (AD-04).
    fn loop_back(&mut self, packet: &[u8]) {
        let c = &mut self.counters;
        if self.loopback.len() >= LOOPBACK_CAPACITY {
            c.drop_loopback_full += 1;
        } else {
            c.loopback_packets += 1;
            let mut b = self.loopback_spare.pop().unwrap_or_default();
            b.clear();
            b.extend_from_slice(packet);
            self.loopback.push_back(b);
        }
    }

    /// Where a packet to send goes (see [`Route`]).
    fn route(&mut self, packet: &[u8]) -> Route {
        let c = &mut self.counters;
        if self.live.is_disabled() {
            // IBA 14.2.5.6: a Disabled port's PHY is off.
            c.drop_tx_disabled += 1;
            return Route::Done;
        }
        if packet.len() < MIN_PACKET_LEN {
            c.drop_tx_short += 1;
            return Route::Done;
        }
        if packet.len() > MAX_PACKET_LEN {
            c.drop_tx_oversized += 1;
            return Route::Done;
        }
        let Some(dlid) = dlid_of(packet) else {
            // Unreachable after the length check, but a drop is the right answer.
            c.drop_tx_short += 1;
            return Route::Done;
        };
        if transport::engine::is_multicast_lid(dlid) {
            return Route::Multicast;
        }
        let peer = self.fabric.by_lid(dlid);
        let own = dlid == self.node.lid || peer.is_some_and(|p| p.name == self.node.name);
        if let Some(c) = self.cable.filter(|_| !own || !self.own_lids) {
            // Cabled: every other DLID (unicast, permissive) goes down the
            // cable; the other end routes it.
            return Route::To(c.peer);
        }
        if own {
            // AD-04: a packet to the own LID never touches the socket (ARCHITECTURE.md §6).
            self.loop_back(packet);
            return Route::Done;
        }
        let Some(peer) = peer else {
            c.drop_tx_unknown_dlid += 1;
            log::debug!("fabric: dropped packet for DLID {dlid:#x}: no such node");
            return Route::Done;
        };
        Route::To(peer.address)
    }

    /// Queues a routed packet while batching; a full queue goes out at once.
    fn queue(&mut self, b: TxBuf, to: SocketAddr) -> Result<(), LinkError> {
        self.tx_queue.push((b, to));
        if self.tx_queue.len() >= TX_QUEUE {
            return self.send_queued();
        }
        Ok(())
    }
}

/// Whether an offload's setsockopt succeeded; says so in the log when not.
fn probe(what: &str, r: std::io::Result<()>) -> bool {
    match r {
        Ok(()) => true,
        Err(e) => {
            log::info!("fabric: UDP {what} not available ({e}); one datagram per packet");
            false
        }
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

impl Link for UdpLink {
    fn send(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        let to = match self.route(packet) {
            Route::To(to) => to,
            Route::Done => return Ok(()),
            Route::Multicast => return self.send_multicast(packet),
        };
        if self.batching {
            let mut b = self.tx_spare.pop().unwrap_or_else(TxBuf::new);
            b.room()[..packet.len()].copy_from_slice(packet);
            b.len = packet.len();
            return self.queue(b, to);
        }
        self.send_one(packet, to)
    }

    fn send_buffer(&mut self) -> Option<&mut [u8]> {
        if !self.batching {
            return None;
        }
        let spare = &mut self.tx_spare;
        Some(
            self.tx_slot
                .get_or_insert_with(|| spare.pop().unwrap_or_else(TxBuf::new))
                .room(),
        )
    }

    fn send_from_buffer(&mut self, _now: Duration, len: usize) -> Result<(), LinkError> {
        let Some(mut b) = self.tx_slot.take() else {
            // No buffer was lent: nothing to send (the caller's mistake).
            self.counters.drop_tx_short += 1;
            return Ok(());
        };
        if len > MAX_PACKET_LEN {
            self.counters.drop_tx_oversized += 1;
            self.tx_slot = Some(b);
            return Ok(());
        }
        b.len = len;
        match self.route(b.as_slice()) {
            Route::To(to) => self.queue(b, to),
            Route::Done => {
                self.tx_slot = Some(b);
                Ok(())
            }
            Route::Multicast => {
                let r = self.send_multicast(b.as_slice());
                self.tx_slot = Some(b);
                r
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

    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.loopback.pop_front() else {
                break;
            };
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += p.len() as u64;
            deliver(Received {
                lent: None,
                packet: &p,
                src_lid: source_lid(&self.fabric, Some(self.node.lid), &p),
                crcs_vouched: false,
            });
            n += 1;
            if self.loopback_spare.len() < MMSG_BATCH {
                self.loopback_spare.push(p);
            }
        }
        let mut skipped = 0;
        self.rx_drained = false;
        while n < max {
            let Some((i, range, lid)) = self.next_rx(now, &mut skipped)? else {
                break;
            };
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += range.len() as u64;
            let packet = &self.rx.buf(i)[range];
            deliver(Received {
                lent: None,
                packet,
                src_lid: source_lid(&self.fabric, lid, packet),
                crcs_vouched: false,
            });
            n += 1;
        }
        Ok(n)
    }

    fn raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    fn clear(&mut self) {
        self.loopback.clear();
    }

    fn poll_timeout(&self) -> Option<Duration> {
        // Looped-back packets do not make the socket readable, nor do segments
        // of a batch already read: ask to be called at once.
        let now = (!self.loopback.is_empty() || self.rx_next < self.rx_got.len())
            .then_some(Duration::ZERO);
        match (now, self.live.deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        if self.live.tick(now) {
            // A keepalive that cannot go now (a full buffer, a peer's ICMP
            // error) is as good as lost: the next beat retries.
            let sent = self
                .live
                .peers()
                .iter()
                .filter(|to| self.socket.send_to(KEEPALIVE, to).is_ok())
                .count();
            self.live.counters.keepalives_sent += sent as u64;
        }
        self.counters.liveness = self.live.counters;
        Ok(())
    }

    fn report(&self) -> Option<String> {
        // The kernel's own drops on this socket (a full receive buffer):
        // what link flow control exists to keep at zero (issue 27 item 4).
        let kernel = super::udp_drops::socket_drops(self.socket.as_raw_fd()).unwrap_or(0);
        Some(format!(
            "udp {}: {} rx_kernel_drops {kernel}",
            self.node.name, self.counters
        ))
    }

    fn send_link_packet(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        let Some(c) = self.cable else {
            return Ok(()); // No cable, no partner to tell.
        };
        if self.live.is_disabled() {
            self.counters.drop_tx_disabled += 1;
            return Ok(());
        }
        // Queued with the data packets while batching, so that it leaves
        // after them: its FCTBS counts them (IBA 7.9.3).
        if self.batching && packet.len() <= MAX_PACKET_LEN {
            let mut b = self.tx_spare.pop().unwrap_or_else(TxBuf::new);
            b.room()[..packet.len()].copy_from_slice(packet);
            b.len = packet.len();
            return self.queue(b, c.peer);
        }
        self.send_one(packet, c.peer)
    }

    fn is_up(&self) -> bool {
        self.live.is_up()
    }

    fn set_disabled(&mut self, disabled: bool) {
        self.live.set_disabled(disabled);
        self.counters.liveness = self.live.counters;
    }

    fn single_peer(&self) -> bool {
        self.cable.is_some()
    }
}
