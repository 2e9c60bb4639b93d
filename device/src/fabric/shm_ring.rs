//! One direction of the shared-memory link (`shm.rs`, issue 30 item 1): a
//! single-producer single-consumer ring of fixed slots in a file both
//! processes map (ARCHITECTURE.md §6, "Shared-memory link").
//!
//! The consumer (the receiving node) creates the file, `0600`, under a
//! temporary name and renames it into place, so that a producer never maps a
//! half-made ring; the producer (the sending node) opens it by path. Layout,
//! little-endian, offsets in bytes:
//!
//! | offset | word | written by |
//! |--------|------|------------|
//! | 0      | magic `vhcaring` (u64) | consumer, at creation |
//! | 8      | version (u32), 12 slots (u32), 16 slot size (u32) | consumer, at creation |
//! | 64     | tail: packets published (u64) | producer |
//! | 128    | head: packets consumed (u64) | consumer |
//! | 192    | sleeping (u32): 1 = ring the doorbell | consumer sets, producer clears |
//! | 256    | closed (u32): 1 = nobody reads this file any more | consumer |
//! | 4096 + i * SLOT_SIZE | slot i: length (u32), flags (u16, [`FLAG_NO_CRCS`]), lead (u8), 0 (u8); `lead` bytes later the packet | producer |
//!
//! Packet n goes in slot n % SLOTS. A packet whose payload the engine built
//! in its slot starts `lead` bytes (< 64) after the slot's header, so that
//! its payload starts on a cache line: both copies of the payload (guest to
//! slot, slot to guest) then run aligned, as guests' buffers usually are
//! (a whole 4 KiB copy took 129 against 218 ns unaligned on the Intel host;
//! the WRITE benchmark's median rose 10 %, higher in 9 of 10 alternated
//! pairs: BENCHMARKS.md). The indices only grow (wrapping u64).
//! Trust (ARCHITECTURE.md §9): each side keeps its own index in its own
//! memory and only ever *writes* it to the file; the other side's index, and
//! every slot length, is read from the file and checked before use: a tail
//! more than SLOTS ahead of the consumer's head, a head ahead of the
//! producer's tail or more than SLOTS behind it, a length of 0 or over
//! [`MAX_PACKET_LEN`] make the ring [`Corrupt`]. Nothing read from the file is
//! used as an address without `shm_sys`'s bounds check.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};

use super::shm_sys::{euid, Mapping};
use super::MAX_PACKET_LEN;

/// Slots of a ring: at the largest MTU (4096) 16 packets are one 64 KiB WRITE,
/// so a ring holds 32 of them in flight, about the UDP link's socket buffer
/// (4 MiB). 256 slots (one 16-WRITE window exactly) overflowed now and then
/// under the device benchmark, each time a loss to recover; since a full ring
/// holds the producer instead (`shm_hold.rs`), 128 and 256 slots moved the
/// same bytes a second as 512 in that benchmark (2026-12-01, 5 alternated
/// rounds: 0.325x..0.382x and 0.346x..0.371x against 0.291x..0.424x of
/// memcpy), so the size stays.
pub const SLOTS: u64 = 512;

/// A slot: its 8-byte header, the lead before the packet and room for the
/// longest packet, rounded to a cache line.
pub const SLOT_SIZE: usize = (8 + MAX_LEAD + MAX_PACKET_LEN).div_ceil(64) * 64;

/// The longest lead before a packet in its slot.
const MAX_LEAD: usize = 63;

// The longest lead with the longest packet fits a slot: what `pop_head`
// reads stays in its slot whatever the peer wrote.
const _: () = assert!(8 + MAX_LEAD + MAX_PACKET_LEN <= SLOT_SIZE);

/// The header page before the slots.
const HEADER: usize = 4096;

/// The size of a ring file.
pub const RING_BYTES: usize = HEADER + SLOTS as usize * SLOT_SIZE;

const MAGIC: u64 = u64::from_le_bytes(*b"vhcaring");
/// 2: the slot's second word holds flags (it was unused in 1, so a version-1
/// producer would leave CRC-less packets unmarked). 3: a lead before the
/// packet (its third byte), and slots longer by it.
const VERSION: u32 = 3;

/// A slot flag: the producer left the packet's ICRC and VCRC out (issue 30,
/// `Link::take_crcs`): memory is the wire. A peer that sets it on a packet
/// only spares the consumer the check of a packet the peer could as well
/// have sent with right CRCs; the consumer ignores every other flag bit.
pub const FLAG_NO_CRCS: u32 = 1;

/// The slot's flags: the low half of its second word (the lead is in the
/// third byte).
const FLAGS_MASK: u32 = 0xffff;

/// Where in a slot, after its header, a packet whose payload is at `at`
/// (`len` bytes) starts: its payload on a cache line; a packet without one
/// right after the header.
fn lead_for(at: usize, len: usize) -> usize {
    if len == 0 {
        0
    } else {
        (64 - (8 + at) % 64) % 64
    }
}

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_SLOTS: usize = 12;
const OFF_SLOT_SIZE: usize = 16;
/// Producer and consumer words each on a cache line of their own.
const OFF_TAIL: usize = 64;
const OFF_HEAD: usize = 128;
const OFF_SLEEPING: usize = 192;
const OFF_CLOSED: usize = 256;

/// A packet taken by [`RxRing::pop_head`].
#[derive(Debug, Clone, Copy)]
pub struct Popped {
    /// Its length, checked against [`MAX_PACKET_LEN`].
    pub len: usize,
    /// Its slot's flags ([`FLAG_NO_CRCS`]).
    pub flags: u32,
    /// Where its bytes start in the ring file.
    at: usize,
}

/// Why a ring is no longer read or written: what the peer wrote into it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corrupt {
    /// An index outside the ring (tail or head out of range).
    Index,
    /// A slot length of 0 or over [`MAX_PACKET_LEN`].
    Length,
}

/// Where slot `n` (a packet index) starts.
fn slot_at(n: u64) -> usize {
    HEADER + (n % SLOTS) as usize * SLOT_SIZE
}

/// The file's identity (device, inode): whether a path still names it.
fn identity(m: &std::fs::Metadata) -> (u64, u64) {
    (m.dev(), m.ino())
}

/// Opens an existing ring file for both sides' use: not through a symbolic
/// link, a regular file of this user, exactly [`RING_BYTES`] long.
fn open_ring(path: &Path) -> io::Result<(File, (u64, u64))> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let m = f.metadata()?;
    let refuse = |why: &str| Err(io::Error::new(io::ErrorKind::InvalidData, why.to_string()));
    if !m.file_type().is_file() {
        return refuse("not a regular file");
    }
    if m.uid() != euid() {
        return refuse("owned by another user");
    }
    if m.len() != RING_BYTES as u64 {
        return refuse("not the size of a ring");
    }
    Ok((f, identity(&m)))
}

/// Whether `path` names the file `id` (a path replaced by the consumer, or
/// removed, no longer does).
fn names(path: &Path, id: (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| identity(&m) == id)
}

/// The consumer's side of a ring.
#[derive(Debug)]
pub struct RxRing {
    map: Mapping,
    path: PathBuf,
    id: (u64, u64),
    /// Packets consumed: the consumer's own copy, the file's head only
    /// mirrors it.
    head: u64,
    /// The last tail read and found valid.
    tail: u64,
}

impl RxRing {
    /// Creates a fresh, empty ring at `path`, replacing (and marking closed,
    /// so that its producer reopens the path) any ring there before.
    pub fn create(path: &Path) -> io::Result<RxRing> {
        if let Ok((old, _)) = open_ring(path) {
            if let Ok(m) = Mapping::new(&old, RING_BYTES) {
                m.u32_at(OFF_CLOSED).store(1, Ordering::Release);
            }
        }
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".new{}", std::process::id()));
        let tmp = PathBuf::from(tmp);
        let _ = std::fs::remove_file(&tmp);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        let made = (|| -> io::Result<Mapping> {
            f.set_len(RING_BYTES as u64)?;
            let map = Mapping::new(&f, RING_BYTES)?;
            map.u32_at(OFF_VERSION).store(VERSION, Ordering::Relaxed);
            map.u32_at(OFF_SLOTS).store(SLOTS as u32, Ordering::Relaxed);
            map.u32_at(OFF_SLOT_SIZE)
                .store(SLOT_SIZE as u32, Ordering::Relaxed);
            map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
            std::fs::rename(&tmp, path)?;
            Ok(map)
        })();
        let map = made.inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
        let id = identity(&f.metadata()?);
        Ok(RxRing {
            map,
            path: path.to_path_buf(),
            id,
            head: 0,
            tail: 0,
        })
    }

    /// Packets published and not yet taken, or why the tail is bad.
    pub fn waiting(&self) -> Result<u64, Corrupt> {
        let tail = self.map.u64_at(OFF_TAIL).load(Ordering::Acquire);
        let n = tail.wrapping_sub(self.head);
        if n > SLOTS {
            return Err(Corrupt::Index);
        }
        Ok(n)
    }

    /// Copies the next packet into `buf` (at least [`MAX_PACKET_LEN`] bytes)
    /// and returns its length and the slot's flags; `None` when the ring is
    /// empty. The slot is given back to the producer only by
    /// [`RxRing::release`].
    pub fn pop(&mut self, buf: &mut [u8]) -> Result<Option<(usize, u32)>, Corrupt> {
        match self.pop_head(buf)? {
            Some(p) if p.len > buf.len() => Err(Corrupt::Length),
            p => Ok(p.map(|p| (p.len, p.flags))),
        }
    }

    /// Takes the next packet as [`RxRing::pop`] does, but copies only its
    /// first `head.len()` bytes (all of a shorter one); the rest stays in
    /// the slot, read with [`RxRing::lent`] or [`RxRing::read_rest`] until
    /// [`RxRing::release`] gives the slot back (issue 30: a payload placed
    /// straight from the slot).
    pub fn pop_head(&mut self, head: &mut [u8]) -> Result<Option<Popped>, Corrupt> {
        if self.head == self.tail {
            self.tail = self.head.wrapping_add(self.waiting()?);
            if self.head == self.tail {
                return Ok(None);
            }
        }
        let at = slot_at(self.head);
        let mut word = [0u8; 8];
        if !self.map.read(at, &mut word) {
            return Err(Corrupt::Index); // Unreachable: slots are inside the file.
        }
        let [l0, l1, l2, l3, f0, f1, lead, _] = word;
        let len = u32::from_le_bytes([l0, l1, l2, l3]) as usize;
        let flags = u32::from(u16::from_le_bytes([f0, f1]));
        let lead = usize::from(lead);
        // Inside the slot whatever the peer wrote: 8 + MAX_LEAD +
        // MAX_PACKET_LEN <= SLOT_SIZE.
        if len == 0 || len > MAX_PACKET_LEN || lead > MAX_LEAD {
            return Err(Corrupt::Length);
        }
        let at = at + 8 + lead;
        let n = len.min(head.len());
        if !self.map.read(at, &mut head[..n]) {
            return Err(Corrupt::Length);
        }
        self.head = self.head.wrapping_add(1);
        Ok(Some(Popped { len, flags, at }))
    }

    /// Packet `p`'s bytes, in its slot (valid until [`RxRing::release`]).
    pub fn lent(&self, p: &Popped) -> Option<vm_memory::VolatileSlice<'_>> {
        self.map.volatile(p.at, p.len)
    }

    /// Copies packet `p`'s bytes from `from` on into `dst` (as long as the
    /// rest); false if that is not inside the packet.
    pub fn read_rest(&self, p: &Popped, from: usize, dst: &mut [u8]) -> bool {
        from.checked_add(dst.len()).is_some_and(|end| end <= p.len)
            && self.map.read(p.at + from, dst)
    }

    /// Gives the slots taken so far back to the producer.
    pub fn release(&self) {
        self.map
            .u64_at(OFF_HEAD)
            .store(self.head, Ordering::Release);
    }

    /// Asks the producer for a doorbell with the next packet (`on`) or not.
    /// After setting it the caller must look at [`RxRing::waiting`] again
    /// before it sleeps: this fence pairs with the producer's in
    /// [`TxRing::take_sleeping`], so either the producer sees the flag or
    /// the consumer sees the packet.
    pub fn set_sleeping(&self, on: bool) {
        self.map
            .u32_at(OFF_SLEEPING)
            .store(u32::from(on), Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    /// Tells the producer that nobody reads this ring any more, and removes
    /// the file if its path still names it.
    pub fn close(&self) {
        self.map.u32_at(OFF_CLOSED).store(1, Ordering::Release);
        if names(&self.path, self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The producer's side of a ring.
#[derive(Debug)]
pub struct TxRing {
    map: Mapping,
    id: (u64, u64),
    /// Packets published: the producer's own copy.
    tail: u64,
    /// The last publish took the last free slot (as the head read then
    /// said): the link's backpressure watches the ring (`shm_hold.rs`).
    filled: bool,
}

/// What [`TxRing::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// Published.
    Sent,
    /// Every slot is taken: the consumer has not drained the ring.
    Full,
}

impl TxRing {
    /// Opens the ring a consumer created at `path`: its header must say this
    /// layout, and its indices must be in range (a producer that ran before
    /// us left the tail where the consumer's head will catch up with it).
    pub fn open(path: &Path) -> io::Result<TxRing> {
        let (f, id) = open_ring(path)?;
        let map = Mapping::new(&f, RING_BYTES)?;
        let ok = map.u64_at(OFF_MAGIC).load(Ordering::Acquire) == MAGIC
            && map.u32_at(OFF_VERSION).load(Ordering::Relaxed) == VERSION
            && map.u32_at(OFF_SLOTS).load(Ordering::Relaxed) == SLOTS as u32
            && map.u32_at(OFF_SLOT_SIZE).load(Ordering::Relaxed) == SLOT_SIZE as u32;
        if !ok {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not a vhca ring of this version",
            ));
        }
        let tail = map.u64_at(OFF_TAIL).load(Ordering::Relaxed);
        let t = TxRing {
            map,
            id,
            tail,
            filled: false,
        };
        t.used()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "ring indices out of range"))?;
        Ok(t)
    }

    /// Slots in use, or why the consumer's head is bad.
    pub fn used(&self) -> Result<u64, Corrupt> {
        let head = self.map.u64_at(OFF_HEAD).load(Ordering::Acquire);
        let n = self.tail.wrapping_sub(head);
        if n > SLOTS {
            return Err(Corrupt::Index);
        }
        Ok(n)
    }

    /// Publishes `packet` (1..=[`MAX_PACKET_LEN`] bytes, the caller checked)
    /// with slot flags `flags`.
    pub fn push(&mut self, packet: &[u8], flags: u32) -> Result<Push, Corrupt> {
        // All of it before an empty payload range.
        self.publish_around(packet, packet.len(), 0, flags)
    }

    /// Which slot the next packet goes into, and of which ring file: a
    /// reservation ([`TxRing::reserve`]) holds only while both stay.
    pub fn next_slot(&self) -> ((u64, u64), u64) {
        (self.id, self.tail)
    }

    /// The next slot's packet bytes, `at..at + len` of them, for a packet
    /// built in place (issue 30, `Link::payload_slot`): `Ok(None)` when the
    /// ring is full or the range is past a packet. Nothing is published
    /// until [`TxRing::publish_around`]; another reserve gives the same slot.
    pub fn reserve(
        &self,
        at: usize,
        len: usize,
    ) -> Result<Option<vm_memory::VolatileSlice<'_>>, Corrupt> {
        if self.used()? >= SLOTS || at.checked_add(len).is_none_or(|end| end > MAX_PACKET_LEN) {
            return Ok(None);
        }
        let lead = lead_for(at, len);
        Ok(self.map.volatile(slot_at(self.tail) + 8 + lead + at, len))
    }

    /// Publishes the packet [`TxRing::reserve`] took bytes `at..at + len`
    /// of for its payload (written there since): `packet` holds its other
    /// bytes (its own bytes in that range are not the packet's). The
    /// caller checked that `packet` is 1..=[`MAX_PACKET_LEN`] bytes and
    /// covers the range.
    pub fn publish_around(
        &mut self,
        packet: &[u8],
        at: usize,
        len: usize,
        flags: u32,
    ) -> Result<Push, Corrupt> {
        // The consumer only frees slots: the reserved one is still free.
        let used = self.used()?;
        if used >= SLOTS {
            return Ok(Push::Full);
        }
        let slot = slot_at(self.tail);
        let (Some(head), Some(tail)) = (packet.get(..at), packet.get(at + len..)) else {
            return Err(Corrupt::Length); // The caller's checks make this unreachable.
        };
        // Where `reserve` put the payload.
        let lead = lead_for(at, len);
        let mut word = [0u8; 8];
        word[..4].copy_from_slice(&(packet.len() as u32).to_le_bytes());
        word[4..6].copy_from_slice(&((flags & FLAGS_MASK) as u16).to_le_bytes());
        word[6] = lead as u8;
        let start = slot + 8 + lead;
        if packet.is_empty()
            || packet.len() > MAX_PACKET_LEN
            || !self.map.write(slot, &word)
            || !self.map.write(start, head)
            || !self.map.write(start + at + len, tail)
        {
            return Err(Corrupt::Length);
        }
        self.tail = self.tail.wrapping_add(1);
        self.filled = used + 1 >= SLOTS;
        self.map
            .u64_at(OFF_TAIL)
            .store(self.tail, Ordering::Release);
        Ok(Push::Sent)
    }

    /// Whether the consumer asked for a doorbell; clears the request (one
    /// doorbell per sleep). Called after [`TxRing::push`]: the fence pairs
    /// with the consumer's in [`RxRing::set_sleeping`].
    pub fn take_sleeping(&self) -> bool {
        fence(Ordering::SeqCst);
        let w = self.map.u32_at(OFF_SLEEPING);
        w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::AcqRel) != 0
    }

    /// Whether the last publish took the ring's last free slot.
    pub fn filled(&self) -> bool {
        self.filled
    }

    /// Whether the consumer closed the ring (it stopped, or replaced it).
    pub fn is_closed(&self) -> bool {
        self.map.u32_at(OFF_CLOSED).load(Ordering::Acquire) != 0
    }

    /// Whether `path` still names this ring's file.
    pub fn is_at(&self, path: &Path) -> bool {
        names(path, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    fn pair(dir: &Path) -> (RxRing, TxRing) {
        let path = dir.join("r.ring");
        let rx = RxRing::create(&path).unwrap();
        let tx = TxRing::open(&path).unwrap();
        (rx, tx)
    }

    #[test]
    fn a_payload_built_in_its_slot_starts_on_a_cache_line_and_arrives_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (mut rx, mut tx) = pair(dir.path());
        let mut head = [0u8; 64];
        // Headers of 20 bytes (LRH + BTH), 36 (with a RETH), 60 (GRH).
        for (k, at) in [20usize, 36, 60, 0, 63, 64].into_iter().enumerate() {
            let len = 1000 + k;
            let room = tx.reserve(at, len).unwrap().unwrap();
            assert_eq!(
                room.ptr_guard().as_ptr() as usize % 64,
                0,
                "payload at {at}"
            );
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + k) as u8).collect();
            room.write_slice(&payload, 0).unwrap();
            let mut packet = vec![0xa5u8; at + len + 4];
            packet[at + len..].copy_from_slice(&[1, 2, 3, 4]);
            assert_eq!(
                tx.publish_around(&packet, at, len, FLAG_NO_CRCS),
                Ok(Push::Sent)
            );
            let p = rx.pop_head(&mut head).unwrap().unwrap();
            assert_eq!((p.len, p.flags), (packet.len(), FLAG_NO_CRCS));
            let mut whole = vec![0u8; p.len];
            rx.lent(&p).unwrap().read_slice(&mut whole, 0).unwrap();
            let mut want = packet.clone();
            want[at..at + len].copy_from_slice(&payload);
            assert_eq!(whole, want);
            assert_eq!(&head[..at.min(64)], &want[..at.min(64)]);
            rx.release();
        }
        // A packet pushed whole starts right after the header.
        assert_eq!(tx.push(&[9; 30], 0), Ok(Push::Sent));
        let p = rx.pop_head(&mut head).unwrap().unwrap();
        assert_eq!(p.at % SLOT_SIZE, (HEADER + 8) % SLOT_SIZE);
    }

    #[test]
    fn a_lead_past_its_bound_is_corrupt_not_a_read_outside_the_slot() {
        let dir = tempfile::tempdir().unwrap();
        let (mut rx, mut tx) = pair(dir.path());
        assert_eq!(tx.push(&[9; 30], 0), Ok(Push::Sent));
        // The peer writes a lead of 64 into the slot's header.
        let mut word = [0u8; 8];
        word[..4].copy_from_slice(&30u32.to_le_bytes());
        word[6] = 64;
        assert!(tx.map.write(HEADER, &word));
        let mut head = [0u8; 64];
        assert_eq!(rx.pop_head(&mut head).unwrap_err(), Corrupt::Length);
    }
}
