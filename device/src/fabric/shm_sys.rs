//! The few unsafe operations of the shared-memory link (`shm.rs`): mapping a
//! ring file shared, and reading and writing words and bytes of a mapping
//! that another process writes too. Every access is bounds-checked here
//! against the mapping's length, so nothing a peer writes into the file (an
//! index, a length) can make this process touch memory outside it; the words
//! are atomics, the bytes are copied with raw copies (never lent as a Rust
//! reference, since the peer may change them at any time).

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use transport::memory::copy_piece;

/// A shared, read-write mapping of the first `len` bytes of a file.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value (unmapped on drop);
// every access goes through atomics or raw copies, so moving it to another
// thread is sound.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `file` (which must be at least that long: a
    /// shorter file would fault on access, so it is refused here).
    pub fn new(file: &File, len: usize) -> io::Result<Mapping> {
        let have = file.metadata()?.len();
        if have < len as u64 || len == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("ring file of {have} bytes, need {len}"),
            ));
        }
        // SAFETY: a fresh mapping chosen by the kernel (no address hint) of a
        // descriptor we hold; the result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap gave null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The 8-byte word at `off`. `off` is one of the link's own constants
    /// (never a value read from the file): a bad one is a bug, so it panics.
    pub fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(
            off.is_multiple_of(8) && off + 8 <= self.len,
            "word {off} outside"
        );
        // SAFETY: in bounds and 8-aligned (the mapping is page-aligned); the
        // memory lives as long as `self`; AtomicU64 has u64's layout, and all
        // access to the word, ours and the peer's, is atomic.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU64>() }
    }

    /// The 4-byte word at `off` (as [`Mapping::u64_at`]).
    pub fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(
            off.is_multiple_of(4) && off + 4 <= self.len,
            "word {off} outside"
        );
        // SAFETY: as in `u64_at`, for a 4-aligned 4-byte word.
        unsafe { &*self.ptr.as_ptr().add(off).cast::<AtomicU32>() }
    }

    /// Copies `src` into the mapping at `off`; false (nothing written) if it
    /// would not fit.
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        if off.checked_add(src.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // In pieces of the size measured fastest on this CPU: on some a
        // whole packet in one memcpy (`rep movsb`) is many times slower when
        // slot and buffer are not mutually aligned (`transport::memory`).
        let size = copy_piece();
        for (k, piece) in src.chunks(size).enumerate() {
            // SAFETY: the destination range is inside the mapping (checked
            // above: `off + k * size + piece.len()` is within
            // `off + src.len()`) and cannot overlap `src`, a Rust slice of
            // our own memory.
            unsafe {
                let to = self.ptr.as_ptr().add(off + k * size);
                std::ptr::copy_nonoverlapping(piece.as_ptr(), to, piece.len());
            }
        }
        true
    }

    /// Copies the mapping's bytes at `off` into `dst`; false (nothing read)
    /// if the range is outside the mapping. The bytes are a snapshot: the
    /// peer may be writing them meanwhile, which can garble the copy but
    /// never reaches outside `dst`.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> bool {
        if off.checked_add(dst.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        // In pieces, as `write`.
        let size = copy_piece();
        for (k, piece) in dst.chunks_mut(size).enumerate() {
            // SAFETY: the source range is inside the mapping (checked above:
            // `off + k * size + piece.len()` is within
            // `off + dst.len()`) and cannot overlap `dst`, a Rust slice of
            // our own memory.
            unsafe {
                let from = self.ptr.as_ptr().add(off + k * size);
                std::ptr::copy_nonoverlapping(from, piece.as_mut_ptr(), piece.len());
            }
        }
        true
    }
}

impl Mapping {
    /// The mapping's bytes at `off..off + len` as a volatile slice, `None`
    /// if the range is outside the mapping: a received packet left in its
    /// slot and copied from there once, into guest memory (issue 30,
    /// `Received::lent`).
    pub fn volatile(&self, off: usize, len: usize) -> Option<vm_memory::VolatileSlice<'_>> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: the range is inside the mapping (checked above), which
        // lives as long as the borrow of `self`. A VolatileSlice only copies
        // through raw pointers and never forms a Rust reference to the bytes,
        // so the peer writing them meanwhile can garble a copy but not break
        // memory safety (as `read`).
        Some(unsafe { vm_memory::VolatileSlice::new(self.ptr.as_ptr().add(off), len) })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range `new` mapped; no reference into it
        // outlives `self` (the word accessors borrow `self`).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// This process's effective user: a ring file must be its own (`shm_ring`).
pub fn euid() -> u32 {
    // SAFETY: geteuid has no arguments, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}
