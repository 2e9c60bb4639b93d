//! Guest memory as the device reaches it: the DMA maps QEMU sends (fd,
//! offset, iova, size), mapped into this process with vm-memory and
//! published as a whole new map on every change (ARCHITECTURE.md §5), so a reader
//! on another thread always sees either the old map or the new one.
//!
//! Every access is checked against the map: an address the guest never
//! mapped is an error for the caller to turn into a completion error, never
//! a fault (ARCHITECTURE.md §9).

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend,
    GuestMemoryLoadGuard, GuestMemoryRegion, MmapRegion, VolatileMemory, VolatileSlice,
};

use crate::sync::lock;

/// The largest single memcpy of a guest access: a caller hands over a whole
/// packet's segment (one map lookup), and it moves in pieces of this size,
/// because above ~2 KiB glibc's memcpy is `rep movsb`, many times slower on
/// the hosts measured when source and destination are not mutually aligned
/// (`transport::memory::COPY_CHUNK`, the same size; a device test checks that
/// the two agree).
pub const COPY_PIECE: usize = 1024;

/// The largest piece [`DmaView::with_copy_piece`] takes: a whole packet's
/// payload.
pub const MAX_COPY_PIECE: usize = 4096;

/// The guest memory map type: vm-memory regions over mmaps of QEMU's fds.
pub type GuestMemoryMmap = vm_memory::GuestMemoryMmap<()>;
type Region = vm_memory::GuestRegionMmap<()>;

/// A guest-physical access outside mapped memory, or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DmaError {
    #[error("guest range 0x{addr:x} (+{len}) is not mapped")]
    Unmapped { addr: u64, len: u64 },
    #[error("guest atomic at 0x{addr:x} is not 8-byte aligned")]
    Misaligned { addr: u64 },
}

/// Why a DMA map (or a vhost-user memory region, [`seal_and_check_size`]) was
/// refused.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    #[error("empty or overflowing range")]
    Range,
    #[error("offset 0x{offset:x} + size 0x{size:x} is past the end of the file ({len} bytes)")]
    PastEof { offset: u64, size: u64, len: u64 },
    #[error("cannot inspect the fd: {0}")]
    Stat(#[source] std::io::Error),
    #[error(
        "the file cannot be sealed against shrinking ({0}): guest RAM must be a \
         sealable memfd (QEMU: memory-backend-memfd with seal=on, the default)"
    )]
    Unsealable(#[source] std::io::Error),
    #[error("mmap failed: {0}")]
    Mmap(#[source] vm_memory::mmap::MmapRegionError),
    #[error("map is inconsistent: {0}")]
    Collection(#[source] vm_memory::GuestRegionCollectionError),
}

/// The device's view of guest memory. Cheap to clone (an `Arc`); share it
/// with every thread that touches guest memory.
#[derive(Debug, Clone)]
pub struct DmaMemory {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    atomic: GuestMemoryAtomic<GuestMemoryMmap>,
    /// The regions of the published map, in address order; held while a
    /// new map is built so that updates are serialised.
    regions: Mutex<Vec<Arc<Region>>>,
    generation: AtomicU64,
}

impl Default for DmaMemory {
    fn default() -> Self {
        DmaMemory::new()
    }
}

impl DmaMemory {
    /// An empty map: every access fails until QEMU maps memory.
    pub fn new() -> DmaMemory {
        DmaMemory {
            shared: Arc::new(Shared {
                atomic: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
                regions: Mutex::new(Vec::new()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The vm-memory handle, for code that wants the `Bytes` /
    /// `GuestMemoryBackend` API directly.
    pub fn atomic(&self) -> &GuestMemoryAtomic<GuestMemoryMmap> {
        &self.shared.atomic
    }

    /// A snapshot of the current map. Holding it keeps its mappings alive
    /// (an unmap in the meantime takes effect for later snapshots), so take
    /// one per batch of work, not per lifetime.
    pub fn snapshot(&self) -> GuestMemoryLoadGuard<GuestMemoryMmap> {
        self.shared.atomic.memory()
    }

    /// Counts map changes; a caller that caches translations compares it.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// The mapped ranges as (guest address, size), in address order.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.snapshot()
            .iter()
            .map(|r| (r.start_addr().0, r.len()))
            .collect()
    }

    /// The current map, for a batch of accesses (a round of the data path):
    /// [`DmaView`] does what [`DmaMemory`]'s accessors do, each of which
    /// loads the map anew (an atomic load of the published map per call,
    /// issue 30: 4 % of the data path's CPU moving 64 KiB WRITEs). Holding
    /// it keeps its mappings alive, like [`DmaMemory::snapshot`].
    pub fn view(&self) -> DmaView {
        // The generation first: a map published in between makes it stale,
        // which costs a second look ([`DmaView::with_map`]), never a miss.
        let generation = self.generation();
        DmaView {
            mem: self.snapshot(),
            generation,
            shared: self.shared.clone(),
            piece: COPY_PIECE,
        }
    }

    /// Whether all of `addr..addr + len` is mapped.
    pub fn is_mapped(&self, addr: u64, len: usize) -> bool {
        self.view().is_mapped(addr, len)
    }

    /// Reads `buf.len()` bytes at guest address `addr`; the range may span
    /// adjacent maps but not a hole.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        self.view().read(addr, buf)
    }

    /// Writes `data` at guest address `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        self.view().write(addr, data)
    }

    /// Compare-and-swap of the little-endian 64-bit word at `addr`; returns
    /// the value found there.
    pub fn compare_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, DmaError> {
        self.view().compare_swap(addr, compare, swap)
    }

    /// Fetch-and-add on the 64-bit word at `addr`; returns the old value.
    pub fn fetch_add(&self, addr: u64, add: u64) -> Result<u64, DmaError> {
        self.view().fetch_add(addr, add)
    }

    /// Atomic store of the 64-bit word at `addr` (RDMA ATOMIC WRITE).
    pub fn atomic_store(&self, addr: u64, value: u64) -> Result<(), DmaError> {
        self.view().atomic_store(addr, value)
    }

    /// Maps `size` bytes of `file` at `offset` to guest address `iova`,
    /// replacing whatever was mapped there. A map QEMU marks read-only is
    /// mapped private: device writes to it are lost instead of faulting.
    pub(crate) fn map(
        &self,
        iova: u64,
        size: u64,
        file: File,
        offset: u64,
        writable: bool,
    ) -> Result<(), MapError> {
        let end = iova
            .checked_add(size)
            .filter(|_| size > 0)
            .ok_or(MapError::Range)?;
        let len = usize::try_from(size).map_err(|_| MapError::Range)?;
        seal_and_check_size(&file, offset, size)?;
        let share = if writable {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        let region = MmapRegion::build(
            Some(FileOffset::new(file, offset)),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_NORESERVE | share,
        )
        .map_err(MapError::Mmap)?;
        let region = Region::new(region, GuestAddress(iova)).ok_or(MapError::Range)?;

        let mut regions = lock(&self.shared.regions);
        let mut next = carve(&regions, iova, end);
        next.push(Arc::new(region));
        next.sort_by_key(|r| r.start_addr());
        self.publish(&mut regions, next)
    }

    /// Removes `iova..iova + size` from the map; parts of it that are not
    /// mapped are ignored, and a map that straddles an end is trimmed.
    pub(crate) fn unmap(&self, iova: u64, size: u64) -> Result<(), MapError> {
        let mut regions = lock(&self.shared.regions);
        let next = carve(&regions, iova, iova.saturating_add(size));
        self.publish(&mut regions, next)
    }

    /// Drops every map (client gone).
    pub(crate) fn clear(&self) {
        let mut regions = lock(&self.shared.regions);
        // An empty list always publishes.
        let _ = self.publish(&mut regions, Vec::new());
    }

    fn publish(
        &self,
        regions: &mut Vec<Arc<Region>>,
        next: Vec<Arc<Region>>,
    ) -> Result<(), MapError> {
        let map = if next.is_empty() {
            GuestMemoryMmap::new()
        } else {
            GuestMemoryMmap::from_arc_regions(next.clone()).map_err(MapError::Collection)?
        };
        let guard = self
            .shared
            .atomic
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.replace(map);
        *regions = next;
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }
}

/// One snapshot of the guest memory map ([`DmaMemory::view`]) and the
/// accesses through it; every access is checked against that map.
pub struct DmaView {
    mem: GuestMemoryLoadGuard<GuestMemoryMmap>,
    /// The map's generation when `mem` was loaded (or before).
    generation: u64,
    shared: Arc<Shared>,
    /// The size of the pieces its copies go in ([`Self::with_copy_piece`]).
    piece: usize,
}

impl DmaView {
    /// The view, copying in pieces of `n` bytes, clamped to
    /// `COPY_PIECE..=MAX_COPY_PIECE`: what the caller measured to be the
    /// fastest on this CPU (the device's `copy_tune`; [`COPY_PIECE`] without).
    pub fn with_copy_piece(self, n: usize) -> DmaView {
        DmaView {
            piece: n.clamp(COPY_PIECE, MAX_COPY_PIECE),
            ..self
        }
    }

    /// Runs `f` on the map to use: the view's own, or the one published
    /// since it was taken. Every access asks (one atomic load of the
    /// generation, not the map's load protocol), so a map change takes
    /// effect at the next access, as it did with a load per access: memory
    /// mapped during a round is reachable in it, and memory unmapped during
    /// a round (DMA_UNMAP answered) is not written after the change is seen.
    fn with_map<T>(&self, f: impl FnOnce(&GuestMemoryMmap) -> T) -> T {
        if self.shared.generation.load(Ordering::Acquire) == self.generation {
            f(&self.mem)
        } else {
            f(&self.shared.atomic.memory())
        }
    }

    /// Whether all of `addr..addr + len` is mapped.
    pub fn is_mapped(&self, addr: u64, len: usize) -> bool {
        self.with_map(|mem| mem.check_range(GuestAddress(addr), len))
    }

    /// Reads `buf.len()` bytes at guest address `addr`; the range may span
    /// adjacent maps but not a hole.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), DmaError> {
        self.with_map(|mem| read_in(mem, addr, buf, self.piece))
    }

    /// Writes `data` at guest address `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), DmaError> {
        self.with_map(|mem| write_in(mem, addr, data, self.piece))
    }

    /// Reads guest address `addr` into `dst`, memory that is not guest
    /// memory and not a Rust slice (a shared-memory ring slot another
    /// process reads, issue 30): one copy, in pieces (`with_copy_piece`).
    pub fn read_volatile(&self, addr: u64, dst: VolatileSlice<'_>) -> Result<(), DmaError> {
        self.with_map(|mem| read_volatile_in(mem, addr, dst, self.piece))
    }

    /// Writes `src`, memory that is not guest memory and not a Rust slice
    /// (a shared-memory ring slot another process writes, issue 30), at
    /// guest address `addr`: one copy, in pieces (`with_copy_piece`).
    pub fn write_volatile(&self, addr: u64, src: VolatileSlice<'_>) -> Result<(), DmaError> {
        self.with_map(|mem| write_volatile_in(mem, addr, src, self.piece))
    }

    /// Runs `f` on the 64-bit word at the 8-aligned guest address `addr`,
    /// atomically against every other CPU and thread touching it.
    fn with_word<T>(&self, addr: u64, f: impl FnOnce(&AtomicU64) -> T) -> Result<T, DmaError> {
        self.with_map(|mem| word_in(mem, addr, f))
    }

    /// Compare-and-swap of the little-endian 64-bit word at `addr`; returns
    /// the value found there.
    pub fn compare_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, DmaError> {
        self.with_word(addr, |w| {
            match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(old) | Err(old) => old,
            }
        })
    }

    /// Fetch-and-add on the 64-bit word at `addr`; returns the old value.
    pub fn fetch_add(&self, addr: u64, add: u64) -> Result<u64, DmaError> {
        self.with_word(addr, |w| w.fetch_add(add, Ordering::SeqCst))
    }

    /// Atomic store of the 64-bit word at `addr` (RDMA ATOMIC WRITE).
    pub fn atomic_store(&self, addr: u64, value: u64) -> Result<(), DmaError> {
        self.with_word(addr, |w| w.store(value, Ordering::SeqCst))
    }
}

/// Reads `buf.len()` bytes at guest address `addr` of `mem`; the range may
/// span adjacent maps but not a hole.
fn read_in(mem: &GuestMemoryMmap, addr: u64, buf: &mut [u8], size: usize) -> Result<(), DmaError> {
    if buf.is_empty() {
        return Ok(());
    }
    // Within one map (nearly always): one lookup, then the copy in pieces.
    if let Ok(s) = mem.get_slice(GuestAddress(addr), buf.len()) {
        let len = buf.len();
        for (k, piece) in buf.chunks_mut(size).enumerate() {
            // The pieces of `buf` tile `s`, which has its length: never out
            // of range, and if it were, an error rather than bytes skipped.
            let from = s
                .subslice(k * size, piece.len())
                .map_err(|_| unmapped(addr, len))?;
            from.copy_to(piece);
        }
        return Ok(());
    }
    if !mem.check_range(GuestAddress(addr), buf.len()) {
        return Err(unmapped(addr, buf.len()));
    }
    mem.read_slice(buf, GuestAddress(addr))
        .map_err(|_| unmapped(addr, buf.len()))
}

/// Writes `data` at guest address `addr` of `mem`.
fn write_in(mem: &GuestMemoryMmap, addr: u64, data: &[u8], size: usize) -> Result<(), DmaError> {
    if data.is_empty() {
        return Ok(());
    }
    if let Ok(s) = mem.get_slice(GuestAddress(addr), data.len()) {
        for (k, piece) in data.chunks(size).enumerate() {
            // As in `read_in`.
            let to = s
                .subslice(k * size, piece.len())
                .map_err(|_| unmapped(addr, data.len()))?;
            to.copy_from(piece);
        }
        return Ok(());
    }
    // Checked first so that a write running into a hole changes nothing.
    if !mem.check_range(GuestAddress(addr), data.len()) {
        return Err(unmapped(addr, data.len()));
    }
    mem.write_slice(data, GuestAddress(addr))
        .map_err(|_| unmapped(addr, data.len()))
}

/// Copies `from` into `to`, of the same length, in pieces of `size` bytes;
/// `None` if a piece is out of range (never: the pieces tile both slices),
/// rather than bytes skipped (as `read_in`).
fn copy_volatile<A: vm_memory::bitmap::BitmapSlice, B: vm_memory::bitmap::BitmapSlice>(
    from: VolatileSlice<'_, A>,
    to: VolatileSlice<'_, B>,
    size: usize,
) -> Option<()> {
    let len = from.len();
    let mut at = 0;
    while at < len {
        let n = (len - at).min(size);
        from.subslice(at, n)
            .ok()?
            .copy_to_volatile_slice(to.subslice(at, n).ok()?);
        at += n;
    }
    Some(())
}

/// Reads guest address `addr` of `mem` into `dst` (`DmaView::read_volatile`).
fn read_volatile_in(
    mem: &GuestMemoryMmap,
    addr: u64,
    dst: VolatileSlice<'_>,
    size: usize,
) -> Result<(), DmaError> {
    let len = dst.len();
    if len == 0 {
        return Ok(());
    }
    let bad = |_| unmapped(addr, len);
    if let Ok(from) = mem.get_slice(GuestAddress(addr), len) {
        return copy_volatile(from, dst, size).ok_or_else(|| unmapped(addr, len));
    }
    // Across adjacent maps (rare): piece by piece through a buffer.
    let mut piece = [0u8; COPY_PIECE];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(COPY_PIECE);
        read_in(mem, addr + at as u64, &mut piece[..n], size)?;
        dst.subslice(at, n).map_err(bad)?.copy_from(&piece[..n]);
        at += n;
    }
    Ok(())
}

/// Writes `src` at guest address `addr` of `mem` (`DmaView::write_volatile`).
fn write_volatile_in(
    mem: &GuestMemoryMmap,
    addr: u64,
    src: VolatileSlice<'_>,
    size: usize,
) -> Result<(), DmaError> {
    let len = src.len();
    if len == 0 {
        return Ok(());
    }
    let bad = |_| unmapped(addr, len);
    if let Ok(to) = mem.get_slice(GuestAddress(addr), len) {
        return copy_volatile(src, to, size).ok_or_else(|| unmapped(addr, len));
    }
    // Across adjacent maps (rare): checked first, as `write_in`, then piece
    // by piece through a buffer.
    if !mem.check_range(GuestAddress(addr), len) {
        return Err(unmapped(addr, len));
    }
    let mut piece = [0u8; COPY_PIECE];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(COPY_PIECE);
        src.subslice(at, n).map_err(bad)?.copy_to(&mut piece[..n]);
        write_in(mem, addr + at as u64, &piece[..n], size)?;
        at += n;
    }
    Ok(())
}

/// Runs `f` on the 64-bit word at the 8-aligned guest address `addr` of
/// `mem`, atomically against every other CPU and thread touching it.
fn word_in<T>(
    mem: &GuestMemoryMmap,
    addr: u64,
    f: impl FnOnce(&AtomicU64) -> T,
) -> Result<T, DmaError> {
    if !addr.is_multiple_of(8) {
        return Err(DmaError::Misaligned { addr });
    }
    let slice = mem
        .get_slice(GuestAddress(addr), 8)
        .map_err(|_| unmapped(addr, 8))?;
    let word = slice
        .get_atomic_ref::<AtomicU64>(0)
        .map_err(|_| DmaError::Misaligned { addr })?;
    Ok(f(word))
}

/// Makes `size` bytes of `file` at `offset` safe to map and access for as
/// long as the mapping lives, or says why not. An access to a mapped page
/// past the end of its file raises SIGBUS, which would kill the process. A
/// file that can change size (a regular file; memfds are) is sealed against
/// shrinking first, so the client cannot truncate it under the mapping later
/// (issue 13; ARCHITECTURE.md §5, §9), then checked against the size it can no
/// longer go below. One that cannot be sealed is refused: every device access
/// would otherwise be at the client's mercy. Devices (DAX, ...) have no size
/// to shrink. Used for vfio-user DMA maps and for the vhost-user-net
/// backend's memory regions (issue 25 item 2): the same rules for both.
pub fn seal_and_check_size(file: &File, offset: u64, size: u64) -> Result<(), MapError> {
    let meta = file.metadata().map_err(MapError::Stat)?;
    if meta.is_file() {
        seal_shrink(file).map_err(MapError::Unsealable)?;
    }
    let meta = file.metadata().map_err(MapError::Stat)?;
    let file_end = offset.checked_add(size).ok_or(MapError::Range)?;
    if meta.is_file() && file_end > meta.len() {
        return Err(MapError::PastEof {
            offset,
            size,
            len: meta.len(),
        });
    }
    Ok(())
}

/// Adds `F_SEAL_SHRINK` to `file` unless it has it: from then on nobody
/// (the client included) can make it smaller. Fails for a file that does not
/// support seals (not a memfd, or one created without `MFD_ALLOW_SEALING`) or
/// whose seals are sealed without this one.
fn seal_shrink(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: F_GET_SEALS takes no argument and touches no memory of ours;
    // `fd` is open for the duration of the call (borrowed from `file`).
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    if seals >= 0 && seals & libc::F_SEAL_SHRINK != 0 {
        return Ok(());
    }
    // SAFETY: as above; F_ADD_SEALS takes an int argument.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn unmapped(addr: u64, len: usize) -> DmaError {
    DmaError::Unmapped {
        addr,
        len: len as u64,
    }
}

/// The regions minus `start..end`: untouched ones are kept as they are
/// (same mapping), partly covered ones are re-mapped from their file for the
/// part that remains.
fn carve(regions: &[Arc<Region>], start: u64, end: u64) -> Vec<Arc<Region>> {
    let mut out = Vec::with_capacity(regions.len() + 1);
    for r in regions {
        let r_start = r.start_addr().0;
        let r_end = r_start + r.len();
        if r_end <= start || end <= r_start {
            out.push(Arc::clone(r));
            continue;
        }
        for (a, b) in [(r_start, start), (end, r_end)] {
            if a < b {
                match remap(r, a - r_start, b - a) {
                    Some(piece) => out.push(Arc::new(piece)),
                    None => log::warn!("dma: lost 0x{a:x}..0x{b:x} while unmapping a part of it"),
                }
            }
        }
    }
    out
}

/// A new mapping of `len` bytes at `skip` into region `r`, same file and
/// protection. `None` if `r` has no file or the piece cannot be mapped
/// (an offset that is not page aligned).
fn remap(r: &Region, skip: u64, len: u64) -> Option<Region> {
    let f = r.file_offset()?;
    let offset = FileOffset::from_arc(Arc::clone(f.arc()), f.start().checked_add(skip)?);
    let mapping = MmapRegion::build(
        Some(offset),
        usize::try_from(len).ok()?,
        r.prot(),
        r.flags(),
    )
    .ok()?;
    Region::new(mapping, GuestAddress(r.start_addr().0 + skip))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sealable memfd of `len` bytes, as QEMU's guest RAM.
    fn file(len: u64) -> File {
        memfd(len, libc::MFD_ALLOW_SEALING)
    }

    fn memfd(len: u64, flags: libc::c_uint) -> File {
        use std::os::fd::{FromRawFd, OwnedFd};
        // SAFETY: the name is a valid C string; memfd_create returns a new
        // descriptor or -1 and touches no other memory.
        let fd = unsafe { libc::memfd_create(c"ram".as_ptr(), libc::MFD_CLOEXEC | flags) };
        assert!(fd >= 0);
        // SAFETY: the descriptor was just created and has no other owner.
        let f = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        f.set_len(len).unwrap();
        f
    }

    #[test]
    fn a_mapped_file_cannot_shrink_and_an_unsealable_one_is_refused() {
        let m = DmaMemory::new();
        let f = file(0x2000);
        m.map(0, 0x2000, f.try_clone().unwrap(), 0, true).unwrap();
        // The client truncates its file under the map: refused by the seal,
        // so the device's next access reads memory instead of raising SIGBUS.
        let e = f.set_len(0x1000).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        m.write(0x1ff8, &[7; 8]).unwrap();
        let mut b = [0u8; 8];
        m.read(0x1ff8, &mut b).unwrap();
        assert_eq!(b, [7; 8]);
        // Growing stays allowed (QEMU's own seals decide that).
        f.set_len(0x3000).unwrap();

        // A memfd without MFD_ALLOW_SEALING, a plain temporary file: refused.
        for f in [memfd(0x1000, 0), tempfile::tempfile().unwrap()] {
            f.set_len(0x1000).unwrap();
            assert!(matches!(
                m.map(0x10000, 0x1000, f, 0, true),
                Err(MapError::Unsealable(_))
            ));
        }
        assert_eq!(m.ranges(), vec![(0, 0x2000)]);
    }

    #[test]
    fn a_view_follows_maps_changed_after_it_was_taken_and_spans_adjacent_maps() {
        let m = DmaMemory::new();
        m.map(0, 0x1000, file(0x1000), 0, true).unwrap();
        let v = m.view();
        // Mapped during the round the view serves: reachable through it
        // (reads, writes, atomics, the range check), as with a load per access.
        m.map(0x1000, 0x1000, file(0x1000), 0, true).unwrap();
        v.write(0x1800, &[9; 8]).unwrap();
        let mut b = [0u8; 8];
        v.read(0x1800, &mut b).unwrap();
        assert_eq!(b, [9; 8]);
        assert_eq!(v.fetch_add(0x1800, 1).unwrap(), 0x0909_0909_0909_0909);
        assert!(v.is_mapped(0x1000, 0x1000));
        // Across the two maps (the slow path), and a hole is an error.
        v.write(0xffc, &[5; 8]).unwrap();
        v.read(0xffc, &mut b).unwrap();
        assert_eq!(b, [5; 8]);
        assert!(v.read(0x1ffc, &mut b).is_err());
        assert!(v.write(0x1ffc, &b).is_err());
        assert!(v.fetch_add(0x2000, 1).is_err());
        assert!(!v.is_mapped(0, 0x2001));
        // Unmapped during the round of a view that had it: not written any
        // more (DMA_UNMAP answered).
        let w = m.view();
        w.write(0x1800, &[2; 8]).unwrap();
        m.unmap(0x1000, 0x1000).unwrap();
        assert!(w.write(0x1800, &[1; 8]).is_err());
        assert!(w.read(0x1800, &mut b).is_err());
        assert!(w.fetch_add(0x1800, 1).is_err());
        assert!(!w.is_mapped(0x1000, 1));
        w.write(0x800, &[3; 8]).unwrap();
    }

    /// Any piece size moves the same bytes, and a size out of range is
    /// clamped, never taken as it is.
    #[test]
    fn copy_piece_sizes_move_the_same_bytes() {
        let m = DmaMemory::new();
        m.map(0x1000, 0x4000, file(0x4000), 0, true).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        for n in [1, COPY_PIECE, 3000, MAX_COPY_PIECE, 1 << 20] {
            let v = m.view().with_copy_piece(n);
            assert!((COPY_PIECE..=MAX_COPY_PIECE).contains(&v.piece), "{n}");
            v.write(0x1003, &data).unwrap();
            let mut back = vec![0u8; data.len()];
            v.read(0x1003, &mut back).unwrap();
            assert_eq!(back, data, "piece {n}");
        }
    }

    #[test]
    fn partial_unmap_keeps_both_sides() {
        let m = DmaMemory::new();
        m.map(0x10000, 0x4000, file(0x4000), 0, true).unwrap();
        m.write(0x13000, &[7]).unwrap();
        m.unmap(0x11000, 0x1000).unwrap();
        assert_eq!(m.ranges(), vec![(0x10000, 0x1000), (0x12000, 0x2000)]);
        let mut b = [0u8];
        m.read(0x13000, &mut b).unwrap();
        assert_eq!(b, [7]);
        assert!(m.read(0x11000, &mut b).is_err());
    }

    #[test]
    fn map_over_a_map_replaces_it() {
        let m = DmaMemory::new();
        m.map(0, 0x2000, file(0x2000), 0, true).unwrap();
        m.map(0x1000, 0x2000, file(0x2000), 0, true).unwrap();
        assert_eq!(m.ranges(), vec![(0, 0x1000), (0x1000, 0x2000)]);
    }

    #[test]
    fn map_past_end_of_file_is_refused() {
        let m = DmaMemory::new();
        assert!(matches!(
            m.map(0, 0x2000, file(0x1000), 0, true),
            Err(MapError::PastEof { .. })
        ));
        assert!(matches!(
            m.map(u64::MAX - 0xfff, 0x2000, file(0x2000), 0, true),
            Err(MapError::Range)
        ));
        assert!(m.ranges().is_empty());
    }

    #[test]
    fn read_only_map_takes_device_writes_without_faulting() {
        let f = file(0x1000);
        let m = DmaMemory::new();
        m.map(0, 0x1000, f.try_clone().unwrap(), 0, false).unwrap();
        m.write(0, &[1, 2, 3]).unwrap();
        let mut on_disk = [0u8; 3];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut on_disk, 0).unwrap();
        assert_eq!(on_disk, [0, 0, 0]);
    }

    #[test]
    fn access_spanning_adjacent_maps_works_and_across_a_hole_fails() {
        let m = DmaMemory::new();
        m.map(0, 0x1000, file(0x1000), 0, true).unwrap();
        m.map(0x1000, 0x1000, file(0x1000), 0, true).unwrap();
        m.map(0x3000, 0x1000, file(0x1000), 0, true).unwrap();
        m.write(0xffc, &[1; 8]).unwrap();
        assert_eq!(
            m.write(0x1ffc, &[1; 8]),
            Err(DmaError::Unmapped {
                addr: 0x1ffc,
                len: 8
            })
        );
    }
}
