//! The shared-memory link (issue 30 item 1, ARCHITECTURE.md §6): nodes that
//! the fabric file puts on one host (`host = "..."`, `colocated.rs`) exchange
//! packets through shared-memory rings instead of UDP loopback; every other
//! node stays on UDP in the same fabric.
//!
//! [`ShmLink`] holds the node's [`UdpLink`] and routes each packet by its
//! LRH:DLID: to a co-located node through the ring of that direction
//! (`shm_ring.rs`: one single-producer single-consumer ring per direction, a
//! file under `shm_dir`, created by the receiving node), anything else
//! (other hosts, multicast, the own LID, a peer whose ring is not there yet)
//! through the UDP link. It receives from both, and lends a ring's packet with
//! the sending node's LID as [`Received::src_lid`], so the engine's spoof check
//! works as on UDP. Every stage above (fault, capture, fabric key, flow
//! control, the engine) is unchanged.
//!
//! Wake-ups: the receiver polls its rings on every round of the data path
//! (busy polling included); when the data path is about to sleep
//! (`Link::set_sleeping`) each ring's `sleeping` word is set (and
//! `Link::poll_timeout` then looks at the rings once more), and a producer
//! that publishes a packet into a ring with that word set clears it and
//! sends a [`DOORBELL`] datagram from its UDP socket to the receiver's. The
//! data path, woken, clears the words again. The doorbell is the UDP socket the data path already waits on
//! (`Link::raw_fd`), so the port waits on one descriptor as before, the
//! doorbell needs no descriptor passing between processes (an eventfd would),
//! and a doorbell is one datagram per sleep, not per packet. It is 8 bytes,
//! shorter than any packet, and never reaches the stages above.
//!
//! CRCs: where nothing between the engine and this link reads or changes
//! packets, the device leaves the CRCs to it ([`Link::take_crcs`]): ring
//! packets go without them (the slot flag `FLAG_NO_CRCS`, and the receiver
//! marks them [`Received::crcs_vouched`]), and a packet that leaves over UDP
//! gets them here first.
//!
//! Trust (ARCHITECTURE.md §9): the peer is another process that can write
//! anything into the rings. Indices and lengths are validated (`shm_ring.rs`);
//! a bad one makes the ring corrupt: that peer's ring traffic is dropped and
//! counted, and after [`CORRUPT_BACKOFF`] the receiver makes a fresh ring (the
//! producer reopens it). A full ring holds the port's packets in the engine
//! for a while (`shm_hold.rs`: backpressure instead of a drop and a resend,
//! bounded by `HOLD_MAX`). A peer that dies or stalls leaves its rings full:
//! after that bound sends to it are dropped and counted (no queue grows), and
//! after [`STALL_AFTER`] it is counted stalled and its path watched for a new
//! ring. Nothing a peer writes costs another peer's traffic beyond one
//! `HOLD_MAX` each time its ring fills after draining to half.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::path::PathBuf;
use std::time::Duration;

use super::shm_hold::Holds;
use super::shm_ring::{Corrupt, Push, RxRing, TxRing, FLAG_NO_CRCS, SLOTS};
use super::udp::source_lid;
use super::{dlid_of, FabricFile, Link, LinkError, Node, Received, UdpLink, MAX_PACKET_LEN};
use super::{MIN_PACKET_LEN, PERMISSIVE_LID};

/// The doorbell datagram: shorter than [`MIN_PACKET_LEN`], so no packet.
pub const DOORBELL: &[u8; 8] = b"vhcadoor";

/// How long a ring stays full, its consumer not draining it, before the peer
/// is counted stalled.
pub const STALL_AFTER: Duration = Duration::from_millis(200);

/// How long a corrupt ring stays unused before it is made again.
pub const CORRUPT_BACKOFF: Duration = Duration::from_secs(1);

/// How often a producer without a ring (not made yet, closed, replaced)
/// looks for one at the path.
const REOPEN_EVERY: Duration = Duration::from_millis(10);

/// What the shared-memory link did, and every reason it dropped a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShmCounters {
    /// Packets published into a peer's ring.
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Packets taken from the rings (delivered, or dropped while disabled).
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets to a co-located peer that went over UDP: its ring was not
    /// there (not made yet, or closed).
    pub tx_udp_fallback: u64,
    /// Doorbells sent, and received (filtered out before the stages above).
    pub doorbells_tx: u64,
    pub doorbells_rx: u64,
    /// Doorbells the socket refused (the peer's data path may then wait
    /// for its next event).
    pub doorbell_errors: u64,
    /// Send: the peer's ring was full (after a hold that outlasted
    /// `shm_hold::HOLD_MAX`, or a packet that skipped the question).
    pub drop_tx_full: u64,
    /// Holds of the port's packets for a full ring that outlasted
    /// `shm_hold::HOLD_MAX` (`Link::tx_room`).
    pub tx_hold_timeouts: u64,
    /// Send: the peer's ring was corrupt (a bad head), until it is reopened.
    pub drop_tx_corrupt: u64,
    /// Send or receive on a ring while the SM has the port disabled.
    pub drop_tx_disabled: u64,
    pub drop_rx_disabled: u64,
    /// Rings found corrupt: a tail or head outside the ring.
    pub corrupt_index: u64,
    /// Rings found corrupt: a slot length of 0 or over the longest packet.
    pub corrupt_length: u64,
    /// Rings made again after being corrupt.
    pub rings_remade: u64,
    /// Peers whose ring stayed full for [`STALL_AFTER`].
    pub peer_stalls: u64,
    /// Rings opened (again) by this producer.
    pub tx_opens: u64,
    /// With the CRCs left to the link ([`Link::take_crcs`]): packets that
    /// left on UDP, whose CRCs the link filled in; packets taken from a ring
    /// without CRCs (the engine did not check them).
    pub tx_crcs_filled: u64,
    pub rx_crcs_vouched: u64,
    /// Packets lent to the stack above in their slot, their payload placed
    /// from there (issue 30, `Received::lent`).
    pub rx_lent: u64,
    /// Packets whose payload the engine built in their slot
    /// (`Link::payload_slot`), published around it.
    pub tx_in_slot: u64,
    /// Send: such a packet whose ring went away (closed, remade, corrupt)
    /// between the slot's reservation and the send: its payload was only
    /// in that ring.
    pub drop_tx_slot_lost: u64,
}

impl ShmCounters {
    /// Packets dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        self.drop_tx_full
            + self.drop_tx_corrupt
            + self.drop_tx_disabled
            + self.drop_rx_disabled
            + self.drop_tx_slot_lost
    }
}

impl std::fmt::Display for ShmCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tx {} ({} B) rx {} ({} B) tx_udp_fallback {} doorbells_tx {} doorbells_rx {} \
             doorbell_errors {} dropped {}: tx_full {} tx_hold_timeouts {} tx_corrupt {} tx_disabled {} \
             rx_disabled {} corrupt_index {} corrupt_length {} rings_remade {} peer_stalls {} \
             tx_opens {} tx_crcs_filled {} rx_crcs_vouched {} rx_lent {} tx_in_slot {} \
             tx_slot_lost {}",
            self.tx_packets,
            self.tx_bytes,
            self.rx_packets,
            self.rx_bytes,
            self.tx_udp_fallback,
            self.doorbells_tx,
            self.doorbells_rx,
            self.doorbell_errors,
            self.dropped(),
            self.drop_tx_full,
            self.tx_hold_timeouts,
            self.drop_tx_corrupt,
            self.drop_tx_disabled,
            self.drop_rx_disabled,
            self.corrupt_index,
            self.corrupt_length,
            self.rings_remade,
            self.peer_stalls,
            self.tx_opens,
            self.tx_crcs_filled,
            self.rx_crcs_vouched,
            self.rx_lent,
            self.tx_in_slot,
            self.drop_tx_slot_lost,
        )
    }
}

/// The file of the ring carrying packets from `from` to `to`, in `fabric`'s
/// `shm_dir`: named by both nodes' UDP addresses, which the running nodes
/// hold bound, so two fabrics on one host never share a ring.
pub fn ring_path(fabric: &FabricFile, from: &Node, to: &Node) -> PathBuf {
    let tag = |a: SocketAddr| {
        a.to_string()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    fabric.hosts().dir().join(format!(
        "vhca-{}-to-{}.ring",
        tag(from.address),
        tag(to.address)
    ))
}

/// A co-located node and the two rings to it.
#[derive(Debug)]
struct Peer {
    node: Node,
    /// This node's ring into the peer (the peer made it), once opened.
    tx: Option<TxRing>,
    tx_path: PathBuf,
    /// When to look for a ring at `tx_path` next.
    tx_retry_at: Duration,
    /// The peer's head was bad: its ring is unused until then.
    tx_bad_until: Option<Duration>,
    /// Since when every send found the ring full.
    full_since: Option<Duration>,
    stalled: bool,
    /// A packet went in while batching: the doorbell question waits for
    /// `end_sends`.
    doorbell_due: bool,
    /// The peer's ring into this node (made here).
    rx: RxRing,
    rx_path: PathBuf,
    /// The ring was found corrupt then: unread until it is made again.
    rx_bad_since: Option<Duration>,
}

impl Peer {
    /// Its ring, if packets can go in now without (re)opening it: opened,
    /// not closed by its consumer, not backing off after a bad head.
    fn ready_tx(&mut self) -> Option<&mut TxRing> {
        if self.tx_bad_until.is_some() {
            return None;
        }
        self.tx.as_mut().filter(|t| !t.is_closed())
    }
}

/// The link of a node with co-located peers: rings to them, UDP to the rest
/// (module doc).
#[derive(Debug)]
pub struct ShmLink {
    udp: UdpLink,
    fabric: FabricFile,
    peers: Vec<Peer>,
    /// The packet taken from a ring, lent to the caller.
    rx_buf: Box<[u8]>,
    /// The ring drained first next time (fairness among peers).
    rx_first: usize,
    /// The rings' `sleeping` words are set.
    armed: bool,
    batching: bool,
    disabled: bool,
    /// The engine leaves native packets' CRCs to this link
    /// ([`Link::take_crcs`]): ring packets go without, UDP ones get them here.
    crcs_by_link: bool,
    /// Where a packet handed in by reference gets its CRCs before UDP.
    crc_scratch: Box<[u8]>,
    /// The last DLID routed and its ring, if any (`ring_for`).
    last_route: Option<(u16, Option<usize>)>,
    /// The slot `Link::payload_slot` reserved last for a packet built in
    /// place (issue 30): the peer, the payload's place in the packet, and
    /// the ring and slot it holds for (`TxRing::next_slot`).
    tx_slot: Option<TxSlot>,
    /// Rings that filled, and the port's packets they hold back.
    holds: Holds,
    counters: ShmCounters,
}

/// A slot reserved for a packet whose payload the engine builds in it.
#[derive(Debug, Clone, Copy)]
struct TxSlot {
    peer: usize,
    at: usize,
    len: usize,
    slot: ((u64, u64), u64),
}

impl ShmLink {
    /// The link of `udp`'s node: rings with every node the fabric file puts
    /// on its host (none: the UDP link alone, wrapped). Makes the node's
    /// receive rings now, so that peers find them.
    pub fn new(udp: UdpLink) -> Result<ShmLink, LinkError> {
        let fabric = udp.fabric().clone();
        let me = udp.node().clone();
        let i = fabric
            .nodes()
            .iter()
            .position(|n| n.name == me.name)
            .ok_or_else(|| LinkError::UnknownNode(me.name.clone()))?;
        let mut co = fabric.hosts().co_located(i);
        if !co.is_empty() && fabric.cabling().is_cabled() {
            // A cabled port has one partner, its cable's other end, reached
            // through the UDP link's cable (`cabling.rs`).
            log::warn!(
                "fabric: node {}: `host` is ignored in a cabled fabric; UDP only",
                me.name
            );
            co.clear();
        }
        let mut peers = Vec::with_capacity(co.len());
        for j in co {
            let node = fabric.nodes()[j].clone();
            let rx_path = ring_path(&fabric, &node, &me);
            let rx = RxRing::create(&rx_path).map_err(|source| LinkError::Shm {
                path: rx_path.display().to_string(),
                source,
            })?;
            log::info!(
                "fabric: node {} shares host {:?} with {}: shared-memory rings {} (in) and {} (out)",
                me.name,
                fabric.hosts().host(i).unwrap_or_default(),
                node.name,
                rx_path.display(),
                ring_path(&fabric, &me, &node).display()
            );
            peers.push(Peer {
                tx: None,
                tx_path: ring_path(&fabric, &me, &node),
                tx_retry_at: Duration::ZERO,
                tx_bad_until: None,
                full_since: None,
                stalled: false,
                doorbell_due: false,
                node,
                rx,
                rx_path,
                rx_bad_since: None,
            });
        }
        Ok(ShmLink {
            udp,
            fabric,
            peers,
            rx_buf: vec![0; MAX_PACKET_LEN].into_boxed_slice(),
            rx_first: 0,
            armed: false,
            batching: false,
            disabled: false,
            crcs_by_link: false,
            crc_scratch: Box::default(),
            last_route: None,
            tx_slot: None,
            holds: Holds::default(),
            counters: ShmCounters::default(),
        })
    }

    /// What the link did and dropped so far (its UDP link's: [`ShmLink::udp`]).
    pub fn counters(&self) -> &ShmCounters {
        &self.counters
    }

    /// The UDP link under the rings.
    pub fn udp(&self) -> &UdpLink {
        &self.udp
    }

    /// How many co-located peers the link has rings with.
    pub fn ring_peers(&self) -> usize {
        self.peers.len()
    }

    /// Sends `packet` to peer `p` through its ring, or over UDP when it has
    /// none (yet).
    fn send_ring(&mut self, now: Duration, p: usize, packet: &[u8]) -> Result<(), LinkError> {
        match self.way(now, p) {
            Way::Ring => {
                let flags = self.slot_flags();
                let r = self.peers[p].tx.as_mut().map(|tx| tx.push(packet, flags));
                self.pushed(now, p, r, packet.len());
                Ok(())
            }
            Way::Udp => self.send_udp(now, packet),
            Way::Dropped => Ok(()),
        }
    }

    /// The flags of a slot this link fills.
    fn slot_flags(&self) -> u32 {
        if self.crcs_by_link {
            FLAG_NO_CRCS
        } else {
            0
        }
    }

    /// Sends `packet` over UDP, with its CRCs filled in first when the engine
    /// left them to this link (a copy: `packet` is the caller's).
    fn send_udp(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        if !self.crcs_by_link {
            return self.udp.send(now, packet);
        }
        if self.crc_scratch.is_empty() {
            self.crc_scratch = vec![0; MAX_PACKET_LEN].into_boxed_slice();
        }
        let Some(b) = self.crc_scratch.get_mut(..packet.len()) else {
            // Longer than any packet: UDP drops and counts it.
            return self.udp.send(now, packet);
        };
        b.copy_from_slice(packet);
        // Not a native packet (nothing the engine builds): sent as it is.
        if transport::wire::fill_crcs(b).is_ok() {
            self.counters.tx_crcs_filled += 1;
        }
        self.udp.send(now, b)
    }

    /// Fills in the CRCs of the `len`-byte packet in the UDP link's lent
    /// buffer, when the engine left them to this link, before UDP sends it.
    fn fill_lent(&mut self, len: usize) {
        if !self.crcs_by_link {
            return;
        }
        let b = self.udp.send_buffer().and_then(|b| b.get_mut(..len));
        if b.is_some_and(|b| transport::wire::fill_crcs(b).is_ok()) {
            self.counters.tx_crcs_filled += 1;
        }
    }

    /// How a packet to peer `p` goes now: its ring (opened or reopened
    /// here), UDP (no ring), or nowhere (counted).
    fn way(&mut self, now: Duration, p: usize) -> Way {
        let c = &mut self.counters;
        if self.disabled {
            c.drop_tx_disabled += 1;
            return Way::Dropped;
        }
        let peer = &mut self.peers[p];
        if let Some(until) = peer.tx_bad_until {
            if now < until {
                c.drop_tx_corrupt += 1;
                return Way::Dropped;
            }
            peer.tx_bad_until = None;
            peer.tx = None;
        }
        if peer.tx.as_ref().is_some_and(TxRing::is_closed) {
            // The consumer stopped or made a new ring: find the new one (at
            // most every REOPEN_EVERY: a peer that keeps `closed` set costs
            // an open per that time, not per packet).
            peer.tx = None;
        }
        if peer.tx.is_none() && now >= peer.tx_retry_at {
            peer.tx_retry_at = now + REOPEN_EVERY;
            match TxRing::open(&peer.tx_path) {
                Ok(t) if t.is_closed() => {
                    log::debug!("fabric: ring {} is closed", peer.tx_path.display());
                }
                Ok(t) => {
                    c.tx_opens += 1;
                    peer.full_since = None;
                    peer.stalled = false;
                    peer.tx = Some(t);
                }
                Err(e) => log::debug!("fabric: ring {}: {e}", peer.tx_path.display()),
            }
        }
        if peer.tx.is_none() {
            c.tx_udp_fallback += 1;
            return Way::Udp;
        }
        Way::Ring
    }

    /// Counts what [`TxRing::push`] did with a `len`-byte packet to peer `p`
    /// (`None`: the ring went away, which [`ShmLink::way`] rules out) and
    /// rings the doorbell or watches for a stall.
    fn pushed(&mut self, now: Duration, p: usize, r: Option<Result<Push, Corrupt>>, len: usize) {
        let c = &mut self.counters;
        let peer = &mut self.peers[p];
        let Some(r) = r else {
            c.drop_tx_full += 1;
            return;
        };
        match r {
            Ok(Push::Sent) => {
                c.tx_packets += 1;
                c.tx_bytes += len as u64;
                if peer.tx.as_ref().is_some_and(TxRing::filled) {
                    self.holds.filled(p);
                }
                peer.full_since = None;
                peer.stalled = false;
                if self.batching {
                    peer.doorbell_due = true;
                } else {
                    self.doorbell(p);
                }
            }
            Ok(Push::Full) => {
                c.drop_tx_full += 1;
                let since = *peer.full_since.get_or_insert(now);
                if now.saturating_sub(since) >= STALL_AFTER {
                    if !peer.stalled {
                        peer.stalled = true;
                        c.peer_stalls += 1;
                        log::warn!(
                            "fabric: {}'s ring has not drained for {STALL_AFTER:?}: \
                             its packets are dropped until it does",
                            peer.node.name
                        );
                    }
                    // A consumer that died and came back made a new file.
                    if now >= peer.tx_retry_at {
                        peer.tx_retry_at = now + REOPEN_EVERY;
                        if !peer.tx.as_ref().is_some_and(|t| t.is_at(&peer.tx_path)) {
                            peer.tx = None;
                        }
                    }
                }
            }
            Err(why) => {
                c.drop_tx_corrupt += 1;
                count_corrupt(c, why);
                peer.tx_bad_until = Some(now + CORRUPT_BACKOFF);
                log::warn!(
                    "fabric: {}'s ring is corrupt ({why:?}); its packets are dropped for {CORRUPT_BACKOFF:?}",
                    peer.node.name
                );
            }
        }
    }

    /// Rings peer `p`'s doorbell if its receiver asked for one.
    fn doorbell(&mut self, p: usize) {
        let peer = &mut self.peers[p];
        peer.doorbell_due = false;
        if !peer.tx.as_ref().is_some_and(TxRing::take_sleeping) {
            return;
        }
        match self.udp.socket().send_to(DOORBELL, peer.node.address) {
            Ok(_) => self.counters.doorbells_tx += 1,
            Err(e) => {
                self.counters.doorbell_errors += 1;
                log::debug!("fabric: doorbell to {}: {e}", peer.node.name);
            }
        }
    }

    /// Takes up to `max` packets from peer `p`'s ring.
    fn drain(
        &mut self,
        now: Duration,
        p: usize,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> usize {
        let peer = &mut self.peers[p];
        if peer.rx_bad_since.is_some() {
            return 0;
        }
        let c = &mut self.counters;
        // Issue 30: once the stack above took the CRCs, nothing in it reads
        // past a packet's headers (`Link::take_crcs`), so a data packet is
        // lent where it lies and the engine places its payload from the
        // slot: one copy instead of two. The head is copied for the headers.
        let head_cap = if self.crcs_by_link {
            transport::engine::LENT_HEAD
        } else {
            self.rx_buf.len()
        };
        let mut n = 0;
        while n < max {
            match peer.rx.pop_head(&mut self.rx_buf[..head_cap]) {
                Ok(None) => break,
                Ok(Some(p)) => {
                    n += 1;
                    c.rx_packets += 1;
                    c.rx_bytes += p.len as u64;
                    if self.disabled {
                        c.drop_rx_disabled += 1;
                        continue;
                    }
                    // The peer left the CRCs out (memory is the wire): the
                    // engine does not check them (`Link::take_crcs`).
                    let crcs_vouched = p.flags & FLAG_NO_CRCS != 0;
                    c.rx_crcs_vouched += u64::from(crcs_vouched);
                    let head = p.len.min(head_cap);
                    let vl15 =
                        transport::wire::vl_of(&self.rx_buf[..head]) == transport::engine::VL15;
                    let lent = if p.len > head_cap && crcs_vouched && !vl15 {
                        peer.rx.lent(&p)
                    } else {
                        None
                    };
                    let whole = if lent.is_some() { head } else { p.len };
                    if whole > head && !peer.rx.read_rest(&p, head, &mut self.rx_buf[head..whole]) {
                        // Unreachable: `pop_head` bounded the length.
                        c.corrupt_length += 1;
                        continue;
                    }
                    c.rx_lent += u64::from(lent.is_some());
                    let packet = &self.rx_buf[..whole];
                    deliver(Received {
                        packet,
                        lent,
                        src_lid: source_lid(&self.fabric, Some(peer.node.lid), packet),
                        crcs_vouched,
                    });
                }
                Err(why) => {
                    count_corrupt(c, why);
                    peer.rx_bad_since = Some(now);
                    log::warn!(
                        "fabric: ring from {} is corrupt ({why:?}): dropped; a new one in {CORRUPT_BACKOFF:?}",
                        peer.node.name
                    );
                    break;
                }
            }
        }
        if n > 0 {
            peer.rx.release();
        }
        n
    }
}

/// How a packet to a co-located peer goes ([`ShmLink::way`]).
enum Way {
    Ring,
    Udp,
    Dropped,
}

/// Which of `peers`' rings a packet goes through, if any: a unicast DLID of
/// a co-located node. `last` is the DLID asked last and its answer, which
/// holds for the link's life (its fabric and peers do not change): a stream
/// to one peer costs no map lookup and no name comparison per packet.
fn ring_for(
    peers: &[Peer],
    fabric: &FabricFile,
    last: &mut Option<(u16, Option<usize>)>,
    packet: &[u8],
) -> Option<usize> {
    if peers.is_empty() || !(MIN_PACKET_LEN..=MAX_PACKET_LEN).contains(&packet.len()) {
        return None;
    }
    ring_for_dlid(peers, fabric, last, dlid_of(packet)?)
}

/// [`ring_for`] a packet to `dlid`.
fn ring_for_dlid(
    peers: &[Peer],
    fabric: &FabricFile,
    last: &mut Option<(u16, Option<usize>)>,
    dlid: u16,
) -> Option<usize> {
    if peers.is_empty() {
        return None;
    }
    match *last {
        Some((l, p)) if l == dlid => return p,
        _ => {}
    }
    let p = if dlid == PERMISSIVE_LID || transport::engine::is_multicast_lid(dlid) {
        None
    } else {
        fabric
            .by_lid(dlid)
            .and_then(|node| peers.iter().position(|p| p.node.name == node.name))
    };
    *last = Some((dlid, p));
    p
}

fn count_corrupt(c: &mut ShmCounters, why: Corrupt) {
    match why {
        Corrupt::Index => c.corrupt_index += 1,
        Corrupt::Length => c.corrupt_length += 1,
    }
}

impl Drop for ShmLink {
    fn drop(&mut self) {
        // The producers stop writing (they see `closed`) and the files go.
        for p in &self.peers {
            p.rx.close();
        }
    }
}

impl Link for ShmLink {
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        // A packet handed in whole: a slot reserved for one that was not
        // built after all is free again.
        self.tx_slot = None;
        match ring_for(&self.peers, &self.fabric, &mut self.last_route, packet) {
            Some(p) => self.send_ring(now, p, packet),
            None => self.send_udp(now, packet),
        }
    }

    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        let count = self.peers.len();
        for k in 0..count {
            if n >= max {
                break;
            }
            n += self.drain(now, (self.rx_first + k) % count, max - n, deliver);
        }
        if count > 0 {
            self.rx_first = (self.rx_first + 1) % count;
        }
        let doorbells = &mut self.counters.doorbells_rx;
        let mut got = 0;
        self.udp.recv_batch(now, max - n, &mut |r| {
            if r.packet == DOORBELL {
                *doorbells += 1;
            } else {
                got += 1;
                deliver(r);
            }
        })?;
        Ok(n + got)
    }

    fn raw_fd(&self) -> RawFd {
        // Doorbells arrive on the UDP socket too (module doc).
        self.udp.raw_fd()
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let mut at = self.udp.poll_timeout();
        let mut earliest = |t: Duration| at = Some(at.map_or(t, |a| a.min(t)));
        if let Some(t) = self.holds.recheck_at() {
            earliest(t);
        }
        for p in &self.peers {
            match p.rx_bad_since {
                Some(since) => earliest(since + CORRUPT_BACKOFF),
                // A packet waiting (or a bad tail, found at the next drain).
                None if p.rx.waiting() != Ok(0) => earliest(Duration::ZERO),
                None => {}
            }
        }
        at
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        for p in &mut self.peers {
            let Some(since) = p.rx_bad_since else {
                continue;
            };
            if now < since + CORRUPT_BACKOFF {
                continue;
            }
            // A fresh ring; the old one is marked closed, so the producer
            // reopens the path.
            match RxRing::create(&p.rx_path) {
                Ok(rx) => {
                    p.rx = rx;
                    p.rx_bad_since = None;
                    self.counters.rings_remade += 1;
                    if self.armed {
                        p.rx.set_sleeping(true);
                    }
                }
                Err(e) => {
                    p.rx_bad_since = Some(now);
                    log::warn!("fabric: ring {}: {e}", p.rx_path.display());
                }
            }
        }
        self.udp.handle_timeout(now)
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        // Called as the process ends (the data path's last act), which may
        // not drop the link: close the rings now, so that their files go
        // and the peers send over UDP (to a port that is closing too).
        for p in &self.peers {
            p.rx.close();
        }
        self.udp.flush()
    }

    fn report(&self) -> Option<String> {
        let mine = format!("shm {}: {}", self.udp.node().name, self.counters);
        Some(match self.udp.report() {
            Some(r) => format!("{r}\n{mine}"),
            None => mine,
        })
    }

    fn clear(&mut self) {
        self.udp.clear()
    }

    fn begin_sends(&mut self) {
        self.batching = true;
        self.udp.begin_sends()
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        self.batching = false;
        for p in 0..self.peers.len() {
            if self.peers[p].doorbell_due {
                self.doorbell(p);
            }
        }
        self.udp.end_sends()
    }

    fn send_buffer(&mut self) -> Option<&mut [u8]> {
        self.udp.send_buffer()
    }

    fn send_from_buffer(&mut self, now: Duration, len: usize) -> Result<(), LinkError> {
        // A whole packet, as `send`.
        self.tx_slot = None;
        // The packet is in the UDP link's buffer: a ring takes it from there
        // (one copy, into the slot), and the buffer stays lent for the next
        // packet (`Link::send_buffer`).
        let ring = match self.udp.send_buffer().and_then(|b| b.get(..len)) {
            Some(b) => ring_for(&self.peers, &self.fabric, &mut self.last_route, b),
            None => None,
        };
        let Some(p) = ring else {
            self.fill_lent(len);
            return self.udp.send_from_buffer(now, len);
        };
        match self.way(now, p) {
            Way::Ring => {
                let flags = self.slot_flags();
                let tx = self.peers[p].tx.as_mut();
                let b = self.udp.send_buffer().and_then(|b| b.get(..len));
                let r = tx.zip(b).map(|(tx, b)| tx.push(b, flags));
                self.pushed(now, p, r, len);
                Ok(())
            }
            Way::Udp => {
                self.fill_lent(len);
                self.udp.send_from_buffer(now, len)
            }
            Way::Dropped => Ok(()),
        }
    }

    fn is_up(&self) -> bool {
        self.udp.is_up()
    }

    fn set_sleeping(&mut self, sleeping: bool) {
        // Doorbells only while the data path sleeps: a busy-polling one
        // finds the packets itself, and asking on every empty round made
        // the producer send a doorbell datagram for nearly every packet.
        // `poll_timeout`, which the data path calls after this (the store
        // is SeqCst, `set_sleeping` in shm_ring.rs), looks at the rings once
        // more, so a packet published before the producer could see the
        // word is not slept on.
        if self.armed != sleeping {
            self.armed = sleeping;
            for p in &self.peers {
                p.rx.set_sleeping(sleeping);
            }
        }
    }

    fn set_disabled(&mut self, disabled: bool) {
        self.disabled = disabled;
        self.udp.set_disabled(disabled)
    }

    fn send_link_packet(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.udp.send_link_packet(now, packet)
    }

    fn payload_slot(
        &mut self,
        dlid: u16,
        at: usize,
        len: usize,
    ) -> Option<vm_memory::VolatileSlice<'_>> {
        self.tx_slot = None;
        // Only where the CRCs are the link's: the engine computes none
        // over the payload, and no stage above reads it.
        if !self.crcs_by_link || self.disabled {
            return None;
        }
        let p = ring_for_dlid(&self.peers, &self.fabric, &mut self.last_route, dlid)?;
        let tx = self.peers[p].ready_tx()?;
        // Full or corrupt: built in the buffer, and `send` counts it.
        let room = tx.reserve(at, len).ok()??;
        self.tx_slot = Some(TxSlot {
            peer: p,
            at,
            len,
            slot: tx.next_slot(),
        });
        Some(room)
    }

    fn send_slotted(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        let Some(s) = self.tx_slot.take() else {
            // Not after a `payload_slot` that gave room: the caller's bug.
            self.counters.drop_tx_slot_lost += 1;
            return Ok(());
        };
        if self.disabled {
            self.counters.drop_tx_disabled += 1;
            return Ok(());
        }
        let route = ring_for(&self.peers, &self.fabric, &mut self.last_route, packet);
        let fits = route == Some(s.peer) && s.at + s.len <= packet.len();
        let flags = self.slot_flags();
        // The reserved slot holds only while its ring does: open, not
        // replaced, not corrupt, nothing published since.
        let ready = self.peers[s.peer].ready_tx();
        let Some(tx) = ready.filter(|t| fits && t.next_slot() == s.slot) else {
            self.counters.drop_tx_slot_lost += 1;
            return Ok(());
        };
        let r = tx.publish_around(packet, s.at, s.len, flags);
        if matches!(r, Ok(Push::Sent)) {
            self.counters.tx_in_slot += 1;
        }
        self.pushed(now, s.peer, Some(r), packet.len());
        Ok(())
    }

    fn tx_room(&mut self, now: Duration) -> bool {
        // Disabled, every send is dropped and counted: nothing to wait for.
        let peers = &mut self.peers;
        let room = self.disabled
            || self.holds.room(
                now,
                SLOTS,
                |p| peers.get_mut(p)?.ready_tx().and_then(|t| t.used().ok()),
                &mut self.counters.tx_hold_timeouts,
            );
        room && self.udp.tx_room(now)
    }

    fn take_crcs(&mut self) -> bool {
        // Worth it only with rings: a UDP-only node would fill every
        // packet's CRCs here instead of in the engine, for nothing.
        self.crcs_by_link = !self.peers.is_empty();
        self.crcs_by_link
    }
}
