//! Base address registers: their layout (which pages are trapped, which are
//! mapped into the guest) and the shared memory behind mapped pages.
//!
//! A mapped page is a page of a memfd that QEMU maps into the guest
//! (vfio-user sparse mmap) and that this process maps too: a guest store
//! lands in it without any message (ARCHITECTURE.md §4, BAR2 doorbells), and the
//! embedder polls it through [`BarMemory`].

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use vm_memory::{Bytes, FileOffset, MmapRegion, VolatileMemory};

/// Page size of mapped BAR areas: QEMU maps whole host pages.
pub const PAGE_SIZE: u64 = 4096;

/// How the embedder wants one BAR: a 64-bit memory BAR of `size` bytes, by
/// default wholly trapped (every access is a vfio-user message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarSpec {
    pub(crate) size: u64,
    pub(crate) prefetchable: bool,
    pub(crate) mmap: Vec<Range<u64>>,
}

impl BarSpec {
    /// A BAR whose every access reaches [`crate::Device::bar_read`] /
    /// [`crate::Device::bar_write`].
    pub fn trapped(size: u64) -> BarSpec {
        BarSpec {
            size,
            prefetchable: false,
            mmap: Vec::new(),
        }
    }

    /// A BAR wholly mapped into the guest.
    pub fn mapped(size: u64) -> BarSpec {
        BarSpec::trapped(size).mmap_area(0, size)
    }

    /// Maps `len` bytes at `offset` into the guest; the rest stays trapped.
    /// Both must be multiples of [`PAGE_SIZE`].
    pub fn mmap_area(mut self, offset: u64, len: u64) -> BarSpec {
        self.mmap.push(offset..offset.saturating_add(len));
        self
    }

    /// Sets the prefetchable bit of the BAR (default: not prefetchable).
    pub fn prefetchable(mut self, prefetchable: bool) -> BarSpec {
        self.prefetchable = prefetchable;
        self
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// What serves one stretch of a BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    /// The embedder's callbacks.
    Trapped,
    /// The shared memfd (a message reaches it only if QEMU did not map it).
    Mapped,
    /// The MSI-X table, emulated here.
    MsixTable,
    /// The MSI-X pending bit array, emulated here.
    MsixPba,
}

/// A BAR's stretches in address order, covering the whole BAR.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) size: u64,
    pub(crate) parts: Vec<(Range<u64>, Part)>,
}

impl Layout {
    /// Splits `0..size` into parts: the `special` ranges (sorted, disjoint,
    /// inside the BAR) with their kind, and `Trapped` in between.
    pub(crate) fn new(size: u64, mut special: Vec<(Range<u64>, Part)>) -> Layout {
        special.sort_by_key(|(r, _)| r.start);
        let mut parts = Vec::new();
        let mut at = 0;
        for (range, part) in special {
            if range.start > at {
                parts.push((at..range.start, Part::Trapped));
            }
            at = range.end;
            parts.push((range, part));
        }
        if at < size {
            parts.push((at..size, Part::Trapped));
        }
        Layout { size, parts }
    }

    /// The parts an access of `len` bytes at `offset` touches, each as
    /// (part, offset of the piece in the BAR, range of the piece in the
    /// access buffer). `None` if the access leaves the BAR.
    pub(crate) fn pieces(&self, offset: u64, len: usize) -> Option<Vec<(Part, u64, Range<usize>)>> {
        let end = offset.checked_add(len as u64)?;
        if end > self.size {
            return None;
        }
        let mut pieces = Vec::new();
        for (range, part) in &self.parts {
            let start = range.start.max(offset);
            let stop = range.end.min(end);
            if start < stop {
                let buf = (start - offset) as usize..(stop - offset) as usize;
                pieces.push((*part, start, buf));
            }
        }
        Some(pieces)
    }
}

/// An access outside a BAR's memory, or a misaligned atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("BAR memory access at 0x{offset:x} (+{len}) is out of range or misaligned")]
pub struct BarError {
    pub offset: u64,
    pub len: u64,
}

/// The memory behind a BAR's mapped pages, shared with QEMU and the guest.
/// Cheap to clone; every accessor is bounds-checked and volatile, so the
/// embedder's poller may read it while the guest writes it.
#[derive(Debug, Clone)]
pub struct BarMemory {
    region: Arc<MmapRegion>,
}

impl BarMemory {
    /// A zeroed memfd of `size` bytes, mapped shared into this process.
    pub(crate) fn new(name: &CStr, size: u64) -> io::Result<BarMemory> {
        let len = usize::try_from(size).map_err(|_| io::ErrorKind::InvalidInput)?;
        let file = memfd(name, size)?;
        let region =
            MmapRegion::from_file(FileOffset::new(file, 0), len).map_err(io::Error::other)?;
        Ok(BarMemory {
            region: Arc::new(region),
        })
    }

    /// The memfd QEMU maps; offset 0 is the BAR's first byte.
    pub(crate) fn raw_fd(&self) -> Option<RawFd> {
        self.region.file_offset().map(|f| f.file().as_raw_fd())
    }

    /// Size in bytes (the whole BAR, trapped pages included).
    pub fn len(&self) -> u64 {
        self.region.size() as u64
    }

    /// Never true: a BAR has at least one page.
    pub fn is_empty(&self) -> bool {
        self.region.size() == 0
    }

    fn err(offset: u64, len: usize) -> BarError {
        BarError {
            offset,
            len: len as u64,
        }
    }

    fn at(offset: u64, len: usize) -> Result<usize, BarError> {
        usize::try_from(offset).map_err(|_| Self::err(offset, len))
    }

    /// Copies `buf.len()` bytes at `offset` out of the BAR.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BarError> {
        let at = Self::at(offset, buf.len())?;
        self.region
            .as_volatile_slice()
            .read_slice(buf, at)
            .map_err(|_| Self::err(offset, buf.len()))
    }

    /// Copies `data` into the BAR at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), BarError> {
        let at = Self::at(offset, data.len())?;
        self.region
            .as_volatile_slice()
            .write_slice(data, at)
            .map_err(|_| Self::err(offset, data.len()))
    }

    /// The 32-bit word at a 4-aligned `offset`, for atomic loads and stores
    /// (a doorbell the guest writes with one store).
    pub fn atomic_u32(&self, offset: u64) -> Result<&AtomicU32, BarError> {
        let at = Self::at(offset, 4)?;
        self.region
            .get_atomic_ref::<AtomicU32>(at)
            .map_err(|_| Self::err(offset, 4))
    }

    /// The 64-bit word at an 8-aligned `offset`.
    pub fn atomic_u64(&self, offset: u64) -> Result<&AtomicU64, BarError> {
        let at = Self::at(offset, 8)?;
        self.region
            .get_atomic_ref::<AtomicU64>(at)
            .map_err(|_| Self::err(offset, 8))
    }

    /// Acquire-load of the 32-bit word at a 4-aligned `offset`.
    pub fn load_u32(&self, offset: u64) -> Result<u32, BarError> {
        Ok(self.atomic_u32(offset)?.load(Ordering::Acquire))
    }

    /// Release-store of the 32-bit word at a 4-aligned `offset`.
    pub fn store_u32(&self, offset: u64, value: u32) -> Result<(), BarError> {
        self.atomic_u32(offset)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Zeroes the whole BAR (reset, disconnect). Written in place rather than
    /// truncated: QEMU keeps the pages mapped, and a truncated memfd would
    /// fault on the guest's next access.
    pub(crate) fn clear(&self) {
        let zeros = [0u8; PAGE_SIZE as usize];
        let slice = self.region.as_volatile_slice();
        let mut at = 0;
        while at < slice.len() {
            let n = zeros.len().min(slice.len() - at);
            // In range by construction; a failure would only leave stale bytes.
            let _ = slice.write_slice(&zeros[..n], at);
            at += n;
        }
    }
}

/// A memfd of `size` bytes.
fn memfd(name: &CStr, size: u64) -> io::Result<File> {
    // SAFETY: `name` is a valid NUL-terminated string for the duration of
    // the call; memfd_create touches no other memory and returns a new
    // descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by memfd_create and is owned by nothing
    // else, so the OwnedFd becomes its only owner.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_fills_gaps_with_trapped_parts() {
        let l = Layout::new(
            0x10000,
            vec![
                (0x9000..0x9008, Part::MsixPba),
                (0x8000..0x8080, Part::MsixTable),
            ],
        );
        assert_eq!(
            l.parts,
            vec![
                (0..0x8000, Part::Trapped),
                (0x8000..0x8080, Part::MsixTable),
                (0x8080..0x9000, Part::Trapped),
                (0x9000..0x9008, Part::MsixPba),
                (0x9008..0x10000, Part::Trapped),
            ]
        );
    }

    #[test]
    fn access_across_parts_is_split() {
        let l = Layout::new(0x2000, vec![(0x1000..0x2000, Part::Mapped)]);
        let pieces = l.pieces(0xffc, 8).unwrap();
        assert_eq!(
            pieces,
            vec![(Part::Trapped, 0xffc, 0..4), (Part::Mapped, 0x1000, 4..8)]
        );
        assert!(l.pieces(0x1ffc, 8).is_none());
        assert!(l.pieces(u64::MAX, 2).is_none());
    }

    #[test]
    fn bar_memory_is_bounds_checked() {
        let m = BarMemory::new(c"test", 0x2000).unwrap();
        m.store_u32(0x1000, 7).unwrap();
        assert_eq!(m.load_u32(0x1000), Ok(7));
        assert!(m.load_u32(0x2000).is_err());
        assert!(m.load_u32(0x1002).is_err());
        assert!(m.read(0x1ffc, &mut [0; 8]).is_err());
        m.clear();
        assert_eq!(m.load_u32(0x1000), Ok(0));
    }
}
