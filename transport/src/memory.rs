//! The memory the engine reads and writes: the caller's (guest physical memory in
//! the device, a `Vec<u8>` in tests). The engine translates virtual addresses
//! through MRs (`crate::mr`) first; what reaches this trait is a physical address
//! that the caller must still check against what it has mapped (ARCHITECTURE.md §9).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Largest single copy of packet bytes (a payload into a packet, a packet
/// segment into or out of memory, a packet into or out of a shared-memory
/// ring slot): above ~2 KiB glibc's memcpy switches to `rep movsb`, which on
/// the hosts measured here is far slower when source and destination are
/// not mutually aligned or sit at the same offset in their pages (a 4 KiB
/// copy: 1.0-1.5 GB/s against 10-18 GB/s in 1 KiB pieces, 2026-11-30; the
/// engine benchmark, one thread, ~1.2x), the usual case for packets.
pub const COPY_CHUNK: usize = 1024;

/// The largest piece [`set_copy_piece`] takes: a whole packet's payload.
pub const MAX_COPY_PIECE: usize = 4096;

/// The piece size packet copies use now: [`COPY_CHUNK`], or what the process
/// measured to be faster on its CPU ([`set_copy_piece`]). Another CPU says
/// the opposite of the one above: on the Intel host of 2026-12-01 a whole
/// 4 KiB copy not mutually aligned took 218 ns against 317-342 ns in 1 KiB
/// pieces (129 against 143 ns aligned), so the device measures at start
/// (`device::copy_tune`, issue 30).
static COPY_PIECE: AtomicUsize = AtomicUsize::new(COPY_CHUNK);

/// The piece size packet copies use (the static `COPY_PIECE` says why).
pub fn copy_piece() -> usize {
    COPY_PIECE.load(Ordering::Relaxed)
}

/// Sets the piece size packet copies use, clamped to
/// `COPY_CHUNK..=MAX_COPY_PIECE`; returns the size set. A process-wide
/// property of the CPU, set once at start by whoever measured it.
pub fn set_copy_piece(n: usize) -> usize {
    let n = n.clamp(COPY_CHUNK, MAX_COPY_PIECE);
    COPY_PIECE.store(n, Ordering::Relaxed);
    n
}

/// Copies `src` into `dst` (of the same length) in [`copy_piece`] pieces.
pub fn copy_chunked(dst: &mut [u8], src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    let piece = copy_piece();
    for (d, s) in dst.chunks_mut(piece).zip(src.chunks(piece)) {
        d.copy_from_slice(s);
    }
}

/// Bytes the engine writes into memory: a slice of its own, or bytes it may
/// copy but never borrow as a `&[u8]`. The second is a received packet's
/// payload still in the shared-memory ring slot it arrived in (issue 30): the
/// peer process can write the slot at any time, so the engine never reads it
/// into a Rust reference (that would be a data race the compiler assumes away);
/// it copies it once, straight into guest memory ([`Memory::write_src`]).
/// What it would read is the peer's own traffic: garbage there places garbage
/// for that peer only.
#[derive(Clone, Copy, Debug)]
pub enum Src<'a> {
    Bytes(&'a [u8]),
    Volatile(vm_memory::VolatileSlice<'a>),
}

impl<'a> Src<'a> {
    pub fn len(&self) -> usize {
        match self {
            Src::Bytes(b) => b.len(),
            Src::Volatile(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` bytes and the rest; `None` when `n` is past the end.
    pub fn split_at(self, n: usize) -> Option<(Src<'a>, Src<'a>)> {
        match self {
            Src::Bytes(b) => b
                .split_at_checked(n)
                .map(|(h, t)| (Src::Bytes(h), Src::Bytes(t))),
            Src::Volatile(v) => {
                split_volatile(v, n).map(|(h, t)| (Src::Volatile(h), Src::Volatile(t)))
            }
        }
    }
}

/// The first `n` bytes of `v` and the rest; `None` when `n` is past the end.
fn split_volatile(
    v: vm_memory::VolatileSlice<'_>,
    n: usize,
) -> Option<(vm_memory::VolatileSlice<'_>, vm_memory::VolatileSlice<'_>)> {
    let rest = v.len().checked_sub(n)?;
    Some((v.subslice(0, n).ok()?, v.subslice(n, rest).ok()?))
}

impl<'a> From<&'a [u8]> for Src<'a> {
    fn from(b: &'a [u8]) -> Src<'a> {
        Src::Bytes(b)
    }
}

impl<'a> From<&'a Vec<u8>> for Src<'a> {
    fn from(b: &'a Vec<u8>) -> Src<'a> {
        Src::Bytes(b)
    }
}

impl<'a, const N: usize> From<&'a [u8; N]> for Src<'a> {
    fn from(b: &'a [u8; N]) -> Src<'a> {
        Src::Bytes(b)
    }
}

/// Where the engine reads memory to: a slice of its own, or bytes it may
/// write but never borrow as a `&mut [u8]`: the shared-memory ring slot a
/// packet to a co-located peer is built in (issue 30), which the peer can
/// read or write at any time. [`Memory::read_dst`] copies guest memory
/// straight into it.
#[derive(Debug)]
pub enum Dst<'a> {
    Bytes(&'a mut [u8]),
    Volatile(vm_memory::VolatileSlice<'a>),
}

impl<'a> Dst<'a> {
    pub fn len(&self) -> usize {
        match self {
            Dst::Bytes(b) => b.len(),
            Dst::Volatile(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The first `n` bytes and the rest; `None` when `n` is past the end.
    pub fn split_at(self, n: usize) -> Option<(Dst<'a>, Dst<'a>)> {
        match self {
            Dst::Bytes(b) => b
                .split_at_mut_checked(n)
                .map(|(h, t)| (Dst::Bytes(h), Dst::Bytes(t))),
            Dst::Volatile(v) => {
                split_volatile(v, n).map(|(h, t)| (Dst::Volatile(h), Dst::Volatile(t)))
            }
        }
    }
}

impl<'a> From<&'a mut [u8]> for Dst<'a> {
    fn from(b: &'a mut [u8]) -> Dst<'a> {
        Dst::Bytes(b)
    }
}

impl<'a> From<&'a mut Vec<u8>> for Dst<'a> {
    fn from(b: &'a mut Vec<u8>) -> Dst<'a> {
        Dst::Bytes(b)
    }
}

impl<'a, const N: usize> From<&'a mut [u8; N]> for Dst<'a> {
    fn from(b: &'a mut [u8; N]) -> Dst<'a> {
        Dst::Bytes(b)
    }
}

/// Reads `addr` of `mem` into volatile bytes `v` through a [`COPY_CHUNK`]
/// buffer on the stack ([`Memory::read_dst`]'s default).
pub fn read_volatile_buffered<M: Memory + ?Sized>(
    mem: &M,
    addr: u64,
    v: vm_memory::VolatileSlice<'_>,
) -> Result<(), MemError> {
    let err = MemError {
        addr,
        len: v.len() as u64,
    };
    let mut piece = [0u8; COPY_CHUNK];
    let mut at = 0;
    while at < v.len() {
        let n = (v.len() - at).min(COPY_CHUNK);
        mem.read(addr.checked_add(at as u64).ok_or(err)?, &mut piece[..n])?;
        v.subslice(at, n).map_err(|_| err)?.copy_from(&piece[..n]);
        at += n;
    }
    Ok(())
}

/// Writes volatile bytes `v` at `addr` of `mem` through a [`COPY_CHUNK`]
/// buffer on the stack ([`Memory::write_src`]'s default).
pub fn write_volatile_buffered<M: Memory + ?Sized>(
    mem: &mut M,
    addr: u64,
    v: vm_memory::VolatileSlice<'_>,
) -> Result<(), MemError> {
    let err = MemError {
        addr,
        len: v.len() as u64,
    };
    let mut piece = [0u8; COPY_CHUNK];
    let mut at = 0;
    while at < v.len() {
        let n = (v.len() - at).min(COPY_CHUNK);
        v.subslice(at, n).map_err(|_| err)?.copy_to(&mut piece[..n]);
        mem.write(addr.checked_add(at as u64).ok_or(err)?, &piece[..n])?;
        at += n;
    }
    Ok(())
}

/// A physical access outside the caller's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[error("memory access at 0x{addr:x} (+{len}) is outside mapped memory")]
pub struct MemError {
    pub addr: u64,
    pub len: u64,
}

/// Memory access for the engine. Atomics operate on 8-byte aligned little-endian
/// words (the host's order) and must be atomic against every other access to the
/// same word, including other QPs (OP-13).
///
/// The engine hands [`Memory::read`] and [`Memory::write`] whole physically
/// contiguous segments (a packet's payload, up to a page): an implementation
/// looks the address up once and copies in [`COPY_CHUNK`] pieces.
pub trait Memory {
    /// Reads `buf.len()` bytes at `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;
    /// Writes `data` at `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError>;
    /// Reads `dst.len()` bytes at `addr` into `dst`. The default copies into
    /// volatile bytes through a [`COPY_CHUNK`] buffer on the stack; the
    /// device copies guest memory straight into them.
    fn read_dst(&self, addr: u64, dst: Dst<'_>) -> Result<(), MemError> {
        match dst {
            Dst::Bytes(b) => self.read(addr, b),
            Dst::Volatile(v) => read_volatile_buffered(self, addr, v),
        }
    }
    /// Writes `src` at `addr`. The default copies volatile bytes through a
    /// [`COPY_CHUNK`] buffer on the stack (two copies, the second from L1);
    /// the device copies them straight into guest memory.
    fn write_src(&mut self, addr: u64, src: Src<'_>) -> Result<(), MemError> {
        match src {
            Src::Bytes(b) => self.write(addr, b),
            Src::Volatile(v) => write_volatile_buffered(self, addr, v),
        }
    }
    /// Compare-and-swap of the 8-byte word at `addr`; returns the old value.
    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError>;
    /// Fetch-and-add on the 8-byte word at `addr`; returns the old value.
    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemError>;
    /// Single-copy-atomic store of the 8-byte word at `addr` (RDMA ATOMIC
    /// WRITE): no reader ever sees part of it.
    fn atomic_write(&mut self, addr: u64, value: u64) -> Result<(), MemError>;
    /// Whether all of `addr..addr + len` is mapped, without copying it (page
    /// lists of up to 2^18 pages are checked at registration). The default
    /// probes one byte of every 4 KiB page and the last byte.
    fn check(&self, addr: u64, len: u64) -> Result<(), MemError> {
        let err = MemError { addr, len };
        if len == 0 {
            return Ok(());
        }
        let last = addr.checked_add(len - 1).ok_or(err)?;
        let mut probe = [0u8];
        let mut at = addr;
        loop {
            self.read(at, &mut probe).map_err(|_| err)?;
            match (at | 0xfff).checked_add(1) {
                Some(next) if next <= last => at = next,
                _ => break,
            }
        }
        self.read(last, &mut probe).map_err(|_| err)
    }
}

/// Memory backed by a vector, starting at physical address `base`: for tests and
/// simulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VecMemory {
    pub base: u64,
    pub bytes: Vec<u8>,
}

impl VecMemory {
    /// `len` zero bytes at `base`.
    pub fn new(base: u64, len: usize) -> VecMemory {
        VecMemory {
            base,
            bytes: vec![0; len],
        }
    }

    fn range(&self, addr: u64, len: usize) -> Result<core::ops::Range<usize>, MemError> {
        let err = MemError {
            addr,
            len: len as u64,
        };
        let start = addr.checked_sub(self.base).ok_or(err)?;
        let start = usize::try_from(start).map_err(|_| err)?;
        let end = start.checked_add(len).ok_or(err)?;
        if end > self.bytes.len() {
            return Err(err);
        }
        Ok(start..end)
    }

    fn word(&mut self, addr: u64) -> Result<&mut [u8], MemError> {
        if !addr.is_multiple_of(8) {
            return Err(MemError { addr, len: 8 });
        }
        let r = self.range(addr, 8)?;
        Ok(&mut self.bytes[r])
    }
}

impl Memory for VecMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.range(addr, buf.len())?;
        copy_chunked(buf, &self.bytes[r]);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.range(addr, data.len())?;
        copy_chunked(&mut self.bytes[r], data);
        Ok(())
    }

    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        let w = self.word(addr)?;
        let old = u64::from_le_bytes(w[..8].try_into().unwrap_or([0; 8]));
        if old == compare {
            w.copy_from_slice(&swap.to_le_bytes());
        }
        Ok(old)
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemError> {
        let w = self.word(addr)?;
        let old = u64::from_le_bytes(w[..8].try_into().unwrap_or([0; 8]));
        w.copy_from_slice(&old.wrapping_add(add).to_le_bytes());
        Ok(old)
    }

    fn atomic_write(&mut self, addr: u64, value: u64) -> Result<(), MemError> {
        self.word(addr)?.copy_from_slice(&value.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_memory_checks_bounds_and_alignment() {
        let mut m = VecMemory::new(0x1000, 64);
        m.write(0x1000, &[1, 2, 3]).unwrap();
        let mut b = [0; 3];
        m.read(0x1000, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        assert!(m.read(0xfff, &mut b).is_err());
        assert!(m.write(0x103e, &[0; 3]).is_err());
        assert!(m.read(u64::MAX, &mut b).is_err());
        assert_eq!(m.fetch_add(0x1008, 5).unwrap(), 0);
        assert_eq!(m.compare_swap(0x1008, 5, 9).unwrap(), 5);
        assert_eq!(m.compare_swap(0x1008, 5, 1).unwrap(), 9);
        assert!(m.fetch_add(0x1004, 1).is_err(), "misaligned atomic");
    }

    #[test]
    fn write_src_copies_volatile_bytes_in_pieces() {
        let mut m = VecMemory::new(0x1000, 3 * COPY_CHUNK);
        let mut bytes: Vec<u8> = (0..2 * COPY_CHUNK + 5).map(|i| i as u8).collect();
        let want = bytes.clone();
        let v = vm_memory::VolatileSlice::from(&mut bytes[..]);
        m.write_src(0x1003, Src::Volatile(v)).unwrap();
        assert_eq!(&m.bytes[3..3 + want.len()], &want[..]);
        let (h, t) = Src::Volatile(v).split_at(7).unwrap();
        assert_eq!((h.len(), t.len()), (7, want.len() - 7));
        assert!(Src::Volatile(v).split_at(want.len() + 1).is_none());
        assert!(m
            .write_src(0x1000 + 2 * COPY_CHUNK as u64, Src::Volatile(v))
            .is_err());
    }

    #[test]
    fn default_check_finds_any_unmapped_byte_of_a_range() {
        let m = VecMemory::new(0x1000, 0x3000);
        assert!(m.check(0x1000, 0x3000).is_ok());
        assert!(m.check(0x1800, 0).is_ok());
        assert!(m.check(0x1000, 0x3001).is_err(), "one byte past the end");
        assert!(m.check(0xfff, 2).is_err(), "one byte before");
        assert!(m.check(u64::MAX, 2).is_err(), "wraps");
    }
}
