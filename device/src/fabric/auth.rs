//! The fabric key stage (issue 13, ARCHITECTURE.md §9): with a key shared by the
//! nodes of a fabric, every datagram carries a sequence number and a 16-byte
//! tag, so that a third party that can send to the UDP port, and forge its
//! source address, cannot inject packets, and cannot replay captured ones.
//!
//! Off by default: the UDP link's own checks (source address in the fabric file,
//! LRH:SLID of that node) hold on a fabric inside one host; a fabric that leaves
//! the host needs the key, because a UDP source address is easily forged.
//!
//! On the wire, a keyed datagram is the native packet (LRH through VCRC) followed
//! by a trailer:
//!
//! ```text
//! | packet (LRH .. VCRC) | sequence number (8 bytes, big endian) | tag (16 bytes) |
//! ```
//!
//! The tag is the first 16 bytes of BLAKE3 in keyed mode over everything before
//! it (the packet and the sequence number), under a key derived from the fabric
//! key for this one use (BLAKE3 `derive_key`, so the same key file can never
//! yield a MAC that means something elsewhere). A 128-bit tag leaves a forger a
//! 2^-128 chance per try.
//!
//! Replay: each sender numbers its datagrams by its clock, in nanoseconds since
//! the Unix epoch: each datagram (to every destination) gets the time of its
//! send or one more than the last number, whichever is higher. So a restarted
//! sender starts above everything it sent before (it would have to send faster
//! than one datagram per nanosecond not to, or have its clock stepped back
//! across the restart: then its peers drop its datagrams as replays, counted,
//! until they restart too), and a sender's numbers keep up with its clock.
//! A number more than [`MAX_AHEAD`] ahead of the receiver's own clock is
//! dropped before it moves any window (issue 25 item 4): a node holding the
//! key that forged a victim's address and a number near 2^64 would otherwise
//! stop every later datagram of the victim until the receiver restarts; now
//! one forgery holds a victim's datagrams back for at most [`MAX_AHEAD`] plus
//! the clocks' difference, and the nodes' clocks must agree within
//! [`MAX_AHEAD`] (NTP does far better). The receiver keeps,
//! per sender (LRH:SLID, which the tag covers; on a cabled port, whose one
//! peer numbers everything it sends in one stream whatever the SLIDs, one for
//! the cable: issue 27), the highest number seen and a sliding window of [`REPLAY_WINDOW`] numbers below it, as IPsec ESP (RFC 4303
//! §3.4.3) and WireGuard do (a ring of bitmap words, RFC 6479): a datagram seen
//! before, or older than the window, is dropped. Loss leaves holes, which is
//! fine; reordering within the window is accepted. What the window cannot stop
//! (no handshake here): a receiver that restarts forgets its windows, so
//! datagrams captured before its restart are accepted once more; the transport
//! then drops them by PSN (their QPs are gone or past them).
//!
//! The stage sits next to the socket (innermost), so a capture outside it
//! records plain native packets that Wireshark dissects, and the fault stage's
//! duplicates and reorders happen before the numbering, as the transport would
//! see them without a key.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::os::fd::RawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Link, LinkError, Received, MAX_PACKET_LEN, MIN_PACKET_LEN};
use transport::mad::dr::PERMISSIVE_LID;

/// Bytes of a fabric key (a BLAKE3 key).
pub const KEY_LEN: usize = 32;

/// Bytes of the per-datagram sequence number.
pub const SEQ_LEN: usize = 8;

/// Bytes of the tag.
pub const TAG_LEN: usize = 16;

/// Bytes the stage adds to each datagram.
pub const TRAILER_LEN: usize = SEQ_LEN + TAG_LEN;

/// Words of the replay bitmap ring (RFC 6479): one word is the one being
/// filled, so the window is one word short of the ring.
const WINDOW_WORDS: usize = 32;

/// How many sequence numbers below the highest seen a datagram may carry and
/// still be accepted (once): reordering deeper than this is dropped as a replay.
pub const REPLAY_WINDOW: u64 = ((WINDOW_WORDS - 1) * 64) as u64;

/// How far ahead of the receiver's clock a sender's sequence number (its
/// clock, module comment) may be and still be accepted: the clocks'
/// difference and the numbers a burst takes beyond its send time. Also the
/// longest a forged number (from a node holding the key) keeps a sender's own
/// datagrams out, as they are older than the window until its clock passes it.
pub const MAX_AHEAD: Duration = Duration::from_secs(10);

/// Datagrams one [`Link::recv_batch`] call of an [`AuthLink`] drops at most
/// before it returns, so that a flood of forgeries cannot hold the caller's
/// loop (each costs a MAC).
const RECV_BUDGET: usize = 256;

/// The longest key file read: a key is 64 hex digits; anything much longer is
/// not a key file, and is not read into memory whole.
const MAX_KEY_FILE: u64 = 4096;

/// BLAKE3 `derive_key` contexts: the MAC key and the key's public id are
/// derived from the fabric key, each for its one use.
const MAC_CONTEXT: &str = "vhca 2026-11 fabric datagram MAC v1";
const ID_CONTEXT: &str = "vhca 2026-11 fabric key id v1";

/// Where a key came from, for logs and the permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KeySource {
    /// Built in code (tests).
    Bytes,
    /// Read from a file (a key file, or a fabric file with `key = ...`) with
    /// these permission bits.
    File { path: PathBuf, mode: u32 },
}

/// A fabric key: 32 bytes shared by every node of a fabric. Its `Debug` shows
/// only its id, never the key.
#[derive(Clone)]
pub struct FabricKey {
    key: [u8; KEY_LEN],
    source: KeySource,
}

impl PartialEq for FabricKey {
    fn eq(&self, other: &FabricKey) -> bool {
        constant_time_eq::constant_time_eq_32(&self.key, &other.key)
    }
}

impl Eq for FabricKey {}

impl fmt::Debug for FabricKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FabricKey(id {})", self.id())
    }
}

/// Why a key or key file was refused; every message is one line.
#[derive(Debug, thiserror::Error)]
pub enum FabricKeyError {
    /// The key file could not be read.
    #[error("key file {path}: cannot read: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The text is not a key.
    #[error("{0}")]
    Bad(String),
}

impl FabricKey {
    /// A key from its bytes.
    pub fn from_bytes(key: [u8; KEY_LEN]) -> FabricKey {
        FabricKey {
            key,
            source: KeySource::Bytes,
        }
    }

    /// A key written as 64 hex digits (surrounding white space ignored; make one
    /// with `openssl rand -hex 32`). The all-zero key is refused: it is a
    /// placeholder, not a secret.
    pub fn from_hex(text: &str) -> Result<FabricKey, FabricKeyError> {
        let t = text.trim();
        if t.len() != 2 * KEY_LEN || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(FabricKeyError::Bad(format!(
                "a fabric key is {} hex digits (e.g. from `openssl rand -hex 32`), got {} characters{}",
                2 * KEY_LEN,
                t.chars().count(),
                if t.bytes().all(|b| b.is_ascii_hexdigit()) {
                    ""
                } else {
                    " that are not all hex digits"
                }
            )));
        }
        let mut key = [0u8; KEY_LEN];
        for (i, b) in key.iter_mut().enumerate() {
            // Cannot fail: the digits were checked above.
            *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).unwrap_or(0);
        }
        if key == [0; KEY_LEN] {
            return Err(FabricKeyError::Bad(
                "the all-zero fabric key is a placeholder, not a secret".into(),
            ));
        }
        Ok(FabricKey::from_bytes(key))
    }

    /// Reads a key file: 64 hex digits. Best kept readable by its owner only
    /// (`chmod 600`); [`FabricKey::permission_warning`] says when it is not.
    pub fn load(path: impl AsRef<Path>) -> Result<FabricKey, FabricKeyError> {
        let path = path.as_ref();
        let io = |source| FabricKeyError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if !meta.is_file() {
            return Err(FabricKeyError::Bad(format!(
                "key file {}: not a regular file",
                path.display()
            )));
        }
        let mut text = String::new();
        file.take(MAX_KEY_FILE + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        if text.len() as u64 > MAX_KEY_FILE {
            return Err(FabricKeyError::Bad(format!(
                "key file {}: longer than {MAX_KEY_FILE} bytes; a key file holds 64 hex digits",
                path.display()
            )));
        }
        let key = FabricKey::from_hex(&text)
            .map_err(|e| FabricKeyError::Bad(format!("key file {}: {e}", path.display())))?;
        Ok(key.with_source(path, meta.permissions().mode()))
    }

    /// The same key, noted as read from `path` with permission bits `mode` (a
    /// fabric file holding `key = ...`).
    pub fn with_source(mut self, path: &Path, mode: u32) -> FabricKey {
        self.source = KeySource::File {
            path: path.to_path_buf(),
            mode,
        };
        self
    }

    /// A short public name of the key (8 hex digits, derived one way from it),
    /// so that logs of two nodes show whether they hold the same key without
    /// showing the key.
    pub fn id(&self) -> String {
        let d = blake3::derive_key(ID_CONTEXT, &self.key);
        d[..4].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Where the key came from, for the log.
    pub fn source(&self) -> String {
        match &self.source {
            KeySource::Bytes => "code".into(),
            KeySource::File { path, .. } => path.display().to_string(),
        }
    }

    /// A warning when the file the key came from can be read by others than its
    /// owner (group or world permission bits).
    pub fn permission_warning(&self) -> Option<String> {
        match &self.source {
            KeySource::File { path, mode } if mode & 0o044 != 0 => Some(format!(
                "fabric key file {} is readable by {} (mode {:o}): anyone who reads it can inject packets; chmod 600 it",
                path.display(),
                if mode & 0o004 != 0 { "everyone" } else { "its group" },
                mode & 0o7777
            )),
            _ => None,
        }
    }

    /// The key the tags are made with (see the module comment).
    fn mac_key(&self) -> [u8; 32] {
        blake3::derive_key(MAC_CONTEXT, &self.key)
    }
}

/// What an [`AuthLink`] did, and every reason it dropped a datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AuthCounters {
    /// Datagrams tagged and handed to the inner link.
    pub tx_tagged: u64,
    /// Datagrams whose tag and sequence number were good.
    pub rx_verified: u64,
    /// Send: the packet plus the trailer would exceed [`MAX_PACKET_LEN`] (no
    /// packet of a 4096-byte PMTU comes near it), or a packet built in a lent
    /// buffer is longer than the buffer lent.
    pub drop_tx_oversized: u64,
    /// Send: [`Link::send_from_buffer`] without a buffer lent by
    /// [`Link::send_buffer`] (the caller's mistake), or the inner link no
    /// longer lending it.
    pub drop_tx_not_lent: u64,
    /// Receive: exactly one native packet by its LRH:PktLen, no trailer: a peer
    /// without the key, or a forger who did not try. No MAC is computed.
    pub drop_rx_untagged: u64,
    /// Receive: shorter than the shortest packet plus the trailer.
    pub drop_rx_short: u64,
    /// Receive: the tag does not verify: another key, a changed byte, a forgery.
    pub drop_rx_bad_tag: u64,
    /// Receive: a good tag, but the link took the datagram from another
    /// node's address than the one its LRH:SLID names: a datagram of one node
    /// replayed from another's (forged) address. Dropped before it marks the
    /// SLID's replay window, so that it cannot use up the number of the real
    /// datagram still on its way.
    pub drop_rx_wrong_sender: u64,
    /// Receive: a good tag on a sequence number seen before, or older than the
    /// replay window: a replay (or reordering deeper than [`REPLAY_WINDOW`]).
    pub drop_rx_replay: u64,
    /// Receive: a good tag on a sequence number more than [`MAX_AHEAD`] ahead
    /// of this node's clock: a forgery by a node holding the key (or a
    /// sender whose clock is that far ahead). Dropped before it moves the
    /// window.
    pub drop_rx_future: u64,
}

impl AuthCounters {
    /// All datagrams dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        self.drop_tx_oversized
            + self.drop_tx_not_lent
            + self.drop_rx_untagged
            + self.drop_rx_short
            + self.drop_rx_bad_tag
            + self.drop_rx_wrong_sender
            + self.drop_rx_replay
            + self.drop_rx_future
    }
}

impl AuthCounters {
    /// `h` with the fabric key's counters filled in: QUERY_COUNTERS' device
    /// set and the counter report show them beside the device's own (issue
    /// 13; "counters for every drop reason").
    pub fn into_device(
        self,
        mut h: crate::abi::counters::HcaCounters,
    ) -> crate::abi::counters::HcaCounters {
        h.fabric_key_rx_verified = self.rx_verified;
        h.fabric_key_rx_untagged = self.drop_rx_untagged;
        h.fabric_key_rx_short = self.drop_rx_short;
        h.fabric_key_rx_bad_tag = self.drop_rx_bad_tag;
        h.fabric_key_rx_wrong_sender = self.drop_rx_wrong_sender;
        // A number too far ahead is a refusal of the replay window too; the
        // link's report counts it apart (`drop_rx_future`).
        h.fabric_key_rx_replay = self.drop_rx_replay + self.drop_rx_future;
        h.fabric_key_tx_dropped = self.drop_tx_oversized + self.drop_tx_not_lent;
        h
    }
}

impl fmt::Display for AuthCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tx_tagged {} rx_verified {} drop_tx_oversized {} drop_tx_not_lent {} \
             drop_rx_untagged {} drop_rx_short {} drop_rx_bad_tag {} \
             drop_rx_wrong_sender {} drop_rx_replay {} drop_rx_future {}",
            self.tx_tagged,
            self.rx_verified,
            self.drop_tx_oversized,
            self.drop_tx_not_lent,
            self.drop_rx_untagged,
            self.drop_rx_short,
            self.drop_rx_bad_tag,
            self.drop_rx_wrong_sender,
            self.drop_rx_replay,
            self.drop_rx_future
        )
    }
}

/// Why a received datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refused {
    Untagged,
    Short,
    BadTag,
    WrongSender,
    Replay,
    Future,
}

/// One sender's replay window: the highest sequence number seen and a ring of
/// bitmap words for the [`REPLAY_WINDOW`] numbers below it (RFC 6479).
#[derive(Debug, Clone, Default)]
struct Window {
    top: u64,
    bits: [u64; WINDOW_WORDS],
}

impl Window {
    /// Whether `seq` is new; if so it is marked seen.
    fn accept(&mut self, seq: u64) -> bool {
        const W: u64 = WINDOW_WORDS as u64;
        if seq > self.top {
            // Clear the words the window slides past (at most the whole ring).
            let (from, to) = (self.top / 64, seq / 64);
            for i in 1..=(to - from).min(W) {
                self.bits[((from + i) % W) as usize] = 0;
            }
            self.top = seq;
        } else if self.top - seq >= REPLAY_WINDOW {
            return false;
        }
        let word = &mut self.bits[((seq / 64) % W) as usize];
        let bit = 1u64 << (seq % 64);
        if *word & bit != 0 {
            return false;
        }
        *word |= bit;
        true
    }
}

/// The receive side's state: the MAC key, the per-sender windows and the
/// counters, apart from the inner link so that a packet the inner link lends
/// is checked while it is lent (no copy, ARCHITECTURE.md §2).
struct Checks {
    mac_key: [u8; 32],
    /// Per sender (LRH:SLID): at most 65 536 windows, and only datagrams with a
    /// good tag create one, so a forger cannot grow the table. On a link with
    /// a single peer, one window under [`CABLE_WINDOW`].
    windows: HashMap<u16, Window>,
    /// The inner link takes datagrams from one peer only ([`Link::single_peer`]).
    single_peer: bool,
    counters: AuthCounters,
}

/// The window of a single-peer link's one stream: LID 0 is reserved (IBA
/// 4.1.3), no packet's SLID.
const CABLE_WINDOW: u16 = 0;

/// The tag of `data` under `mac_key` (see the module comment).
fn tag(mac_key: &[u8; 32], data: &[u8]) -> [u8; TAG_LEN] {
    let h = blake3::keyed_hash(mac_key, data);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h.as_bytes()[..TAG_LEN]);
    t
}

impl Checks {
    /// Checks datagram `d`, which the inner link took from the node with LID
    /// `src_lid` when it knows it, at `now` (since the Unix epoch); the length
    /// of the packet in it if it is to be delivered.
    fn open(&mut self, d: &[u8], src_lid: Option<u16>, now: Duration) -> Result<usize, Refused> {
        let n = d.len();
        let own_len = transport::wire::Lrh::new_checked(d)
            .ok()
            .map(|l| usize::from(l.pkt_len()) * 4 + 2);
        if own_len == Some(n) {
            return Err(Refused::Untagged);
        }
        if n < MIN_PACKET_LEN + TRAILER_LEN {
            return Err(Refused::Short);
        }
        let body = n - TAG_LEN;
        let want = tag(&self.mac_key, &d[..body]);
        let got: &[u8; TAG_LEN] = d[body..].try_into().map_err(|_| Refused::Short)?;
        if !constant_time_eq::constant_time_eq_16(&want, got) {
            return Err(Refused::BadTag);
        }
        // Only now is anything in the datagram trusted: the tag covers the
        // LRH, so its SLID names the sender, one that holds the key. The
        // window is that SLID's, not the sending address's node: an address is
        // forged easily, and a replay sent from another node's address must
        // neither pass as new there nor move that node's window ahead of its
        // own numbers (which would drop its datagrams as replays).
        //
        // A cabled port takes datagrams from its cable's other end only: that
        // end numbers all it sends in one stream, whatever the SLIDs (a
        // switch forwards many nodes' packets; an SM changes LIDs; a
        // directed-route SMP and its response carry the permissive LID, IBA
        // 14.2.2), so one window holds them and the cable names the sender.
        // Elsewhere a permissive SLID is the sender the link knows.
        let m = body - SEQ_LEN;
        let slid = transport::wire::Lrh::new_checked(&d[..m])
            .map_err(|_| Refused::Short)?
            .slid();
        let window = if self.single_peer {
            CABLE_WINDOW
        } else {
            match src_lid {
                Some(s) if slid == PERMISSIVE_LID => s,
                Some(s) if s != slid => return Err(Refused::WrongSender),
                _ => slid,
            }
        };
        let mut seq = [0u8; SEQ_LEN];
        seq.copy_from_slice(&d[m..body]);
        let seq = u64::from_be_bytes(seq);
        // Before the window: a number past the bound must not move it (module
        // comment, issue 25 item 4).
        let limit = u64::try_from((now + MAX_AHEAD).as_nanos()).unwrap_or(u64::MAX);
        if seq > limit {
            return Err(Refused::Future);
        }
        if !self.windows.entry(window).or_default().accept(seq) {
            return Err(Refused::Replay);
        }
        Ok(m)
    }

    fn count(&mut self, r: Refused, n: usize) {
        let c = &mut self.counters;
        let (count, what) = match r {
            Refused::Untagged => (
                &mut c.drop_rx_untagged,
                "without a tag (a peer without the fabric key?)",
            ),
            Refused::Short => (&mut c.drop_rx_short, "too short to hold a tag"),
            Refused::BadTag => (
                &mut c.drop_rx_bad_tag,
                "with a bad tag (another key, or forged or changed)",
            ),
            Refused::WrongSender => (
                &mut c.drop_rx_wrong_sender,
                "from another node's address than its LRH:SLID (replayed from a forged address?)",
            ),
            Refused::Replay => (&mut c.drop_rx_replay, "replayed (sequence number seen)"),
            Refused::Future => (
                &mut c.drop_rx_future,
                "numbered more than MAX_AHEAD ahead of this node's clock \
                 (forged by a key holder, or the sender's clock is ahead)",
            ),
        };
        *count += 1;
        // The first of each reason is worth a warning (a misconfigured peer or
        // an attack); the rest are in the counters.
        if *count == 1 {
            log::warn!("fabric: dropped a {n}-byte datagram {what}; further ones are counted");
        } else {
            log::debug!("fabric: dropped a {n}-byte datagram {what}");
        }
    }
}

/// A [`Link`] stage that tags every datagram it sends with a sequence number
/// and a keyed MAC, and passes on only received datagrams whose tag verifies
/// and whose number is new (see the module comment).
///
/// Copies nothing where the inner link lends buffers: a received packet is
/// checked in the inner link's buffer and lent on shortened by the trailer
/// ([`Link::recv_batch`]); a packet to send is built in the inner link's send
/// buffer, lent shortened by [`TRAILER_LEN`], and the trailer written after it
/// ([`Link::send_buffer`]). Every datagram grows by the same [`TRAILER_LEN`],
/// so a run of same-size packets stays one (the UDP link's GSO, issue 12).
pub struct AuthLink<L> {
    inner: L,
    checks: Checks,
    key_id: String,
    /// The least number the next datagram gets (module comment: at least
    /// the send's time).
    next_seq: u64,
    /// The packet and its trailer being sent by [`Link::send`] (the caller's
    /// slice is read-only).
    scratch: Vec<u8>,
    /// The length of the buffer [`Link::send_buffer`] lent, until
    /// [`Link::send_from_buffer`].
    lent: Option<usize>,
    /// A receive call stopped at [`RECV_BUDGET`] drops: more may wait in the
    /// inner link's buffers without the descriptor signalling it.
    more: bool,
}

impl<L> fmt::Debug for AuthLink<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthLink")
            .field("key_id", &self.key_id)
            .field("next_seq", &self.next_seq)
            .field("senders", &self.checks.windows.len())
            .field("counters", &self.checks.counters)
            .finish_non_exhaustive()
    }
}

impl<L: Link> AuthLink<L> {
    /// Wraps `inner`: every datagram out is tagged with `key`, every datagram
    /// in must carry a good tag.
    pub fn new(inner: L, key: &FabricKey) -> AuthLink<L> {
        let single_peer = inner.single_peer();
        AuthLink {
            inner,
            checks: Checks {
                mac_key: key.mac_key(),
                windows: HashMap::new(),
                single_peer,
                counters: AuthCounters::default(),
            },
            key_id: key.id(),
            next_seq: 0,
            scratch: Vec::with_capacity(MAX_PACKET_LEN),
            lent: None,
            more: false,
        }
    }

    /// What was tagged, verified and dropped so far.
    pub fn counters(&self) -> &AuthCounters {
        &self.checks.counters
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably.
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// Gives back the wrapped link.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// The sequence number the next datagram gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Takes the sequence number of the datagram being sent: the send's
    /// time in nanoseconds since the epoch, or one more than the last number
    /// if that is higher (module comment). Following the clock keeps the
    /// numbers above every earlier run of this node, and brings them past a
    /// number a key holder forged in this node's name within [`MAX_AHEAD`].
    fn take_seq(&mut self, now: Duration) -> u64 {
        let t = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX / 2);
        self.next_seq = self.next_seq.max(t);
        let seq = self.next_seq;
        self.next_seq = self.next_seq.saturating_add(1);
        seq
    }
}

impl<L: Link> Link for AuthLink<L> {
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        if packet.len() + TRAILER_LEN > MAX_PACKET_LEN {
            self.checks.counters.drop_tx_oversized += 1;
            return Ok(());
        }
        let seq = self.take_seq(now);
        let mut b = std::mem::take(&mut self.scratch);
        b.clear();
        b.extend_from_slice(packet);
        b.extend_from_slice(&seq.to_be_bytes());
        let t = tag(&self.checks.mac_key, &b);
        b.extend_from_slice(&t);
        self.checks.counters.tx_tagged += 1;
        let r = self.inner.send(now, &b);
        self.scratch = b;
        r
    }

    fn send_buffer(&mut self) -> Option<&mut [u8]> {
        // The inner link's buffer, short of room for the trailer: the packet
        // is built where it leaves from (same start, so the same alignment).
        let b = self.inner.send_buffer()?;
        let room = b.len().checked_sub(TRAILER_LEN)?;
        self.lent = Some(room);
        Some(&mut b[..room])
    }

    fn send_from_buffer(&mut self, now: Duration, len: usize) -> Result<(), LinkError> {
        let Some(room) = self.lent.take() else {
            self.checks.counters.drop_tx_not_lent += 1;
            return Ok(());
        };
        if len > room {
            self.checks.counters.drop_tx_oversized += 1;
            return Ok(());
        }
        // The inner link lends the same buffer again until it is sent (the
        // `Link::send_buffer` contract): the packet is in it.
        let seq = self.take_seq(now);
        let Some(b) = self.inner.send_buffer() else {
            self.checks.counters.drop_tx_not_lent += 1;
            return Ok(());
        };
        let Some(trailer) = b.get_mut(len..len + TRAILER_LEN) else {
            self.checks.counters.drop_tx_oversized += 1;
            return Ok(());
        };
        trailer[..SEQ_LEN].copy_from_slice(&seq.to_be_bytes());
        let t = tag(&self.checks.mac_key, &b[..len + SEQ_LEN]);
        b[len + SEQ_LEN..len + TRAILER_LEN].copy_from_slice(&t);
        self.checks.counters.tx_tagged += 1;
        self.inner.send_from_buffer(now, len + TRAILER_LEN)
    }

    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        // Each datagram is checked in the inner link's buffer and lent on
        // without its trailer. At most `max` + RECV_BUDGET MACs per call: the
        // inner link is asked for no more than are still to be delivered or
        // may still be dropped, so a flood of forgeries cannot hold the
        // caller's loop (each costs a MAC).
        let Self {
            inner,
            checks,
            more,
            ..
        } = self;
        let (mut delivered, mut refused) = (0usize, 0usize);
        while delivered < max {
            if refused >= RECV_BUDGET {
                *more = true;
                return Ok(delivered);
            }
            let ask = (max - delivered).min(RECV_BUDGET - refused);
            let got = inner.recv_batch(now, ask, &mut |r| {
                // A link packet (IBA 7.9.4 flow control) is not tagged, as
                // a keepalive is not: it means something only to the port
                // at the cable's other end and is taken only from there
                // (`flow.rs`), which counts it; against the budget of
                // refused datagrams, as it is not data. Told by its length
                // before any check of a tag it does not have.
                if r.packet.len() == transport::flow::FC_PACKET_LEN {
                    refused += 1;
                    deliver(r);
                    return;
                }
                match checks.open(r.packet, r.src_lid, now) {
                    Ok(m) => {
                        checks.counters.rx_verified += 1;
                        delivered += 1;
                        deliver(Received {
                            lent: None,
                            packet: &r.packet[..m],
                            src_lid: r.src_lid,
                            crcs_vouched: r.crcs_vouched,
                        });
                    }
                    Err(why) => {
                        refused += 1;
                        checks.count(why, r.packet.len());
                    }
                }
            })?;
            if got == 0 {
                break;
            }
        }
        *more = false;
        Ok(delivered)
    }

    fn raw_fd(&self) -> RawFd {
        self.inner.raw_fd()
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let inner = self.inner.poll_timeout();
        if self.more {
            Some(Duration::ZERO)
        } else {
            inner
        }
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        self.inner.handle_timeout(now)
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        self.inner.flush()
    }

    fn auth_counters(&self) -> Option<AuthCounters> {
        Some(self.checks.counters)
    }

    fn is_up(&self) -> bool {
        self.inner.is_up()
    }
    fn set_sleeping(&mut self, sleeping: bool) {
        self.inner.set_sleeping(sleeping)
    }

    fn set_disabled(&mut self, disabled: bool) {
        self.inner.set_disabled(disabled)
    }

    fn single_peer(&self) -> bool {
        self.inner.single_peer()
    }

    fn tx_room(&mut self, now: Duration) -> bool {
        self.inner.tx_room(now)
    }

    fn send_link_packet(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        // Untagged, as keepalives are (the receive side above).
        self.inner.send_link_packet(now, packet)
    }

    fn report(&self) -> Option<String> {
        let mine = format!("auth (key {}): {}", self.key_id, self.checks.counters);
        Some(match self.inner.report() {
            Some(r) => format!("{r}\n{mine}"),
            None => mine,
        })
    }

    fn clear(&mut self) {
        // The sequence number and the windows outlive a device reset: the
        // peers' numbers keep going up, and so must this node's.
        self.more = false;
        self.inner.clear()
    }

    fn begin_sends(&mut self) {
        self.inner.begin_sends()
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        self.lent = None;
        self.inner.end_sends()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_accepts_each_number_once_and_slides() {
        let mut w = Window::default();
        assert!(w.accept(10_000));
        assert!(!w.accept(10_000));
        // Reordered within the window: once.
        assert!(w.accept(9_990));
        assert!(!w.accept(9_990));
        assert!(w.accept(10_000 - REPLAY_WINDOW + 1));
        // Older than the window: refused even if never seen.
        assert!(!w.accept(10_000 - REPLAY_WINDOW));
        // A jump far ahead clears the ring: old words do not mark new numbers.
        assert!(w.accept(1_000_000));
        assert!(w.accept(1_000_000 - 64 * 5));
        assert!(!w.accept(1_000_000 - 64 * 5));
        assert!(w.accept(1_000_001));
        // Every number of a dense run, in order and then again.
        let mut w = Window::default();
        for s in 5..5000 {
            assert!(w.accept(s), "{s}");
        }
        for s in 5000 - REPLAY_WINDOW..5000 {
            assert!(!w.accept(s), "{s} again");
        }
    }

    #[test]
    fn window_slide_by_less_than_a_word_keeps_marks() {
        let mut w = Window::default();
        assert!(w.accept(64 * 7 + 3));
        assert!(w.accept(64 * 7 + 1));
        assert!(w.accept(64 * 8 + 2));
        assert!(!w.accept(64 * 7 + 1));
        assert!(!w.accept(64 * 7 + 3));
        assert!(w.accept(64 * 7 + 2));
    }

    /// A tagged datagram: a 32-byte packet from `slid`, number `seq`.
    fn sealed(mac_key: &[u8; 32], slid: u16, seq: u64) -> Vec<u8> {
        let mut d = vec![0u8; 32];
        {
            let mut l = transport::wire::Lrh::new_unchecked(&mut d[..]);
            l.set_dlid(1);
            l.set_slid(slid);
            l.set_pkt_len(8);
        }
        d.extend_from_slice(&seq.to_be_bytes());
        let t = tag(mac_key, &d);
        d.extend_from_slice(&t);
        d
    }

    fn checks(single_peer: bool) -> Checks {
        Checks {
            mac_key: [3; 32],
            windows: HashMap::new(),
            single_peer,
            counters: AuthCounters::default(),
        }
    }

    #[test]
    fn a_cabled_port_keeps_one_window_for_its_peer_whatever_the_slid() {
        let now = Duration::from_secs(1);
        let mut c = checks(true);
        let k = c.mac_key;
        // The peer is node LID 5 (back to back), or a switch (no LID): its
        // own packets, a directed-route SMP's permissive SLID and an
        // SM-assigned LID all pass, numbered in one stream.
        for (slid, seq) in [(5, 10), (PERMISSIVE_LID, 11), (77, 12), (9, 13)] {
            assert!(
                c.open(&sealed(&k, slid, seq), Some(5), now).is_ok(),
                "{slid}"
            );
            assert!(
                c.open(&sealed(&k, slid, seq + 100), None, now).is_ok(),
                "{slid}"
            );
        }
        assert_eq!(c.windows.len(), 1);
        // A replay is one, whichever SLID it carries.
        assert_eq!(
            c.open(&sealed(&k, 77, 12), Some(5), now),
            Err(Refused::Replay)
        );
        assert_eq!(
            c.open(&sealed(&k, PERMISSIVE_LID, 11), None, now),
            Err(Refused::Replay)
        );
    }

    #[test]
    fn unlinked_nodes_take_a_permissive_slid_as_the_sender_they_know() {
        let now = Duration::from_secs(1);
        let mut c = checks(false);
        let k = c.mac_key;
        // Two senders' directed-route SMPs (permissive SLID) each in their
        // own window: interleaved numbers are not replays of each other.
        assert!(c
            .open(&sealed(&k, PERMISSIVE_LID, 1_000_000), Some(2), now)
            .is_ok());
        assert!(c
            .open(&sealed(&k, PERMISSIVE_LID, 10), Some(3), now)
            .is_ok());
        assert!(c.open(&sealed(&k, 2, 1_000_001), Some(2), now).is_ok());
        assert_eq!(
            c.open(&sealed(&k, PERMISSIVE_LID, 10), Some(3), now),
            Err(Refused::Replay)
        );
        // Another node's LID from a known sender is still refused.
        assert_eq!(
            c.open(&sealed(&k, 3, 20), Some(2), now),
            Err(Refused::WrongSender)
        );
    }

    #[test]
    fn keys_parse_from_hex_and_never_show() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let k = FabricKey::from_hex(&format!(" {hex}\n")).unwrap();
        assert_eq!(k.key[1], 0x11);
        assert_eq!(k.key[31], 0xff);
        let dbg = format!("{k:?}");
        assert!(!dbg.to_lowercase().contains("8899aabb"), "{dbg}");
        assert_eq!(k.id().len(), 8);
        assert_ne!(k.id(), FabricKey::from_bytes([7; 32]).id());
        assert!(FabricKey::from_hex(&hex[..62]).is_err());
        assert!(FabricKey::from_hex(&format!("{}zz", &hex[..62])).is_err());
        assert!(FabricKey::from_hex(&"0".repeat(64)).is_err());
        assert_eq!(k.permission_warning(), None);
        let m = k.clone().with_source(Path::new("/k"), 0o100644);
        assert!(m.permission_warning().unwrap().contains("everyone"));
        let g = k.clone().with_source(Path::new("/k"), 0o100640);
        assert!(g.permission_warning().unwrap().contains("group"));
        assert_eq!(
            k.clone()
                .with_source(Path::new("/k"), 0o100600)
                .permission_warning(),
            None
        );
        assert_eq!(m, k);
    }
}
