//! The `unsafe` of the crate (with `ecn_switch::afpacket`'s packet sockets), in small wrappers: a memfd for guest RAM, a
//! shared mapping of a file (guest RAM, BAR2 doorbell pages), `poll` on a
//! descriptor, signals to a child process, a thread's CPU affinity.
//!
//! A [`SharedMap`] is memory another process (the `vhca` device) reads and
//! writes concurrently, as DMA memory is for a real driver. Plain copies are used
//! for payload and ring entries, atomics for the words the protocols order
//! (owner bytes, doorbell slots, the `asleep` word); the protocols' fences are the
//! caller's (see `abi::uar` and `abi::cqe`).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};
use std::time::Duration;

/// A new anonymous memory file of `size` bytes (guest RAM, as QEMU's
/// `memory-backend-memfd`).
pub fn memfd(name: &std::ffi::CStr, size: u64) -> io::Result<File> {
    // Sealable, as QEMU's memory-backend-memfd: vhca seals a DMA-mapped file
    // against shrinking and refuses one it cannot seal.
    // SAFETY: `name` is a valid NUL-terminated string; memfd_create returns a
    // new descriptor or -1 and touches no memory of ours otherwise.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor was just created and nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size)?;
    Ok(file)
}

/// Pins the calling thread to CPU `cpu` (benchmarks: a wake-up across CPUs
/// against one on the same CPU); false if the kernel refused (no such CPU).
pub fn pin_thread_to_cpu(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: `set` is a plain bit set on our stack, CPU_SET writes inside it
    // (the index checked above), and sched_setaffinity only reads
    // `size_of::<cpu_set_t>()` bytes of it; pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// `len` bytes of a file mapped shared, read-write, at file offset `offset`.
#[derive(Debug)]
pub struct SharedMap {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory with no thread affinity; every
// access goes through bounds-checked methods below, and concurrent access is
// what the mapping is for (another process writes it anyway).
unsafe impl Send for SharedMap {}
// SAFETY: as above; `&SharedMap` only allows copies and atomic accesses.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `len` bytes of `file` from `offset` (page-aligned).
    pub fn new(file: &File, offset: u64, len: usize) -> io::Result<SharedMap> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) aliases no
        // Rust object; the fd is valid for the duration of the call; failure is
        // MAP_FAILED, checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(SharedMap {
            ptr: NonNull::new(p.cast()).expect("mmap returned NULL without MAP_FIXED"),
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|end| end <= self.len),
            "access [{off:#x}, +{len:#x}) outside a mapping of {:#x} bytes",
            self.len
        );
    }

    /// Copies bytes out of the mapping.
    pub fn read(&self, off: usize, buf: &mut [u8]) {
        self.check(off, buf.len());
        // SAFETY: the range is inside the mapping (checked); `buf` is a distinct
        // Rust allocation, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), buf.as_mut_ptr(), buf.len())
        }
    }

    /// Copies bytes into the mapping.
    pub fn write(&self, off: usize, data: &[u8]) {
        self.check(off, data.len());
        // SAFETY: the range is inside the mapping (checked) and does not overlap
        // `data`, a Rust allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(off), data.len())
        }
    }

    /// Sets `len` bytes to `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) {
        self.check(off, len);
        // SAFETY: the range is inside the mapping (checked).
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(off), byte, len) }
    }

    /// The byte at `off` as an atomic.
    pub fn atomic_u8(&self, off: usize) -> &AtomicU8 {
        self.check(off, 1);
        // SAFETY: in bounds (checked); AtomicU8 has alignment 1; the mapping
        // lives as long as `self`, which the returned reference borrows.
        unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().add(off)) }
    }

    /// The 32-bit word at `off` (4-aligned) as an atomic.
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        self.check(off, 4);
        assert_eq!(off % 4, 0, "unaligned 32-bit atomic at {off:#x}");
        // SAFETY: in bounds and aligned (checked; the mapping is page-aligned);
        // the mapping outlives the borrow.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// The 64-bit word at `off` (8-aligned) as an atomic.
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        self.check(off, 8);
        assert_eq!(off % 8, 0, "unaligned 64-bit atomic at {off:#x}");
        // SAFETY: in bounds and aligned (checked); the mapping outlives the borrow.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `new`; no reference into it can
        // outlive `self` (they all borrow it).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes; true if readable.
pub fn wait_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: one valid pollfd, count 1; poll writes only `revents`.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r >= 0 {
            return Ok(r > 0 && p.revents & libc::POLLIN != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `signal` to process `pid`.
pub fn kill(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: kill takes no pointers; a wrong pid is an error return.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes a FIFO at `path` (a hostile host file for `--counters-file`).
pub fn mkfifo(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call; mkfifo
    // reads it and touches no other memory of ours.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
