//! MSI-X: vectors as eventfds that QEMU hands over with SET_IRQS, the
//! pending bit array, and the table as the guest would see it.
//!
//! QEMU emulates the table itself and masks a vector by rewiring it to an
//! eventfd of its own (ARCHITECTURE.md §5), so the per-vector mask bits here are
//! stored and read back but not enforced: their reset value is "masked",
//! and enforcing them would silence every vector whose table writes QEMU
//! keeps to itself. The function-wide Enable and Function Mask bits come
//! through config space writes (QEMU forwards them) and are enforced: a
//! vector fired under Function Mask is held in the PBA and sent on unmask.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use crate::sync::{lock, read, write};

/// Bytes per MSI-X table entry: address low, address high, data, control.
pub const ENTRY_SIZE: u64 = 16;
/// Vector Control bit 0: the vector is masked.
const VECTOR_MASKED: u8 = 1;

/// What became of one [`crate::Handle::trigger`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The vector's eventfd was signalled.
    Fired,
    /// Function Mask is set: the vector's pending bit is set and it fires
    /// when the guest clears the mask.
    Pending,
    /// No eventfd is wired to the vector: nothing happened.
    Unwired,
    /// MSI-X is disabled in config space: nothing happened.
    Disabled,
    /// The function has no such vector.
    NoSuchVector,
}

/// How many triggers ended which way, since the function was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MsixCounters {
    pub fired: u64,
    pub pending: u64,
    pub unwired: u64,
    pub disabled: u64,
    /// Writes to an eventfd that failed (its counter is saturated).
    pub signal_errors: u64,
}

/// Vector state shared by the vfio-user thread (SET_IRQS, config writes)
/// and the embedder's threads (trigger).
#[derive(Debug)]
pub(crate) struct Vectors {
    count: usize,
    fds: RwLock<Vec<Option<File>>>,
    pending: Vec<AtomicU64>,
    enabled: AtomicBool,
    function_masked: AtomicBool,
    /// Orders a masked trigger against an unmask, so that a vector is
    /// either fired by the trigger or found pending by the unmask.
    mask_lock: Mutex<()>,
    fired: AtomicU64,
    held: AtomicU64,
    unwired: AtomicU64,
    disabled: AtomicU64,
    signal_errors: AtomicU64,
}

impl Vectors {
    pub(crate) fn new(count: u16) -> Vectors {
        let count = usize::from(count);
        Vectors {
            count,
            fds: RwLock::new((0..count).map(|_| None).collect()),
            pending: (0..count.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            enabled: AtomicBool::new(false),
            function_masked: AtomicBool::new(false),
            mask_lock: Mutex::new(()),
            fired: AtomicU64::new(0),
            held: AtomicU64::new(0),
            unwired: AtomicU64::new(0),
            disabled: AtomicU64::new(0),
            signal_errors: AtomicU64::new(0),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Signals `vector` as the function's state allows.
    pub(crate) fn trigger(&self, vector: u16) -> Trigger {
        let v = usize::from(vector);
        if v >= self.count {
            return Trigger::NoSuchVector;
        }
        if !self.enabled.load(Ordering::Acquire) {
            self.disabled.fetch_add(1, Ordering::Relaxed);
            return Trigger::Disabled;
        }
        if self.function_masked.load(Ordering::Acquire) {
            let _g = lock(&self.mask_lock);
            if self.function_masked.load(Ordering::Acquire) {
                self.pending[v / 64].fetch_or(1 << (v % 64), Ordering::AcqRel);
                self.held.fetch_add(1, Ordering::Relaxed);
                return Trigger::Pending;
            }
        }
        self.signal(v)
    }

    fn signal(&self, v: usize) -> Trigger {
        let fds = read(&self.fds);
        match fds.get(v) {
            Some(Some(fd)) => {
                // An eventfd takes an 8-byte native-endian increment.
                if (&*fd).write_all(&1u64.to_ne_bytes()).is_err() {
                    self.signal_errors.fetch_add(1, Ordering::Relaxed);
                }
                self.fired.fetch_add(1, Ordering::Relaxed);
                Trigger::Fired
            }
            _ => {
                self.unwired.fetch_add(1, Ordering::Relaxed);
                Trigger::Unwired
            }
        }
    }

    /// Applies the Message Control register after a config write; on unmask
    /// sends what was held.
    pub(crate) fn set_control(&self, enabled: bool, function_masked: bool) {
        let _g = lock(&self.mask_lock);
        self.enabled.store(enabled, Ordering::Release);
        self.function_masked
            .store(function_masked, Ordering::Release);
        if enabled && !function_masked {
            for (word, bits) in self.pending.iter().enumerate() {
                let mut held = bits.swap(0, Ordering::AcqRel);
                while held != 0 {
                    let bit = held.trailing_zeros() as usize;
                    held &= held - 1;
                    self.signal(word * 64 + bit);
                }
            }
        }
    }

    /// Wires `fds[i]` to vector `start + i`; a `None` unwires. Vectors past
    /// the table are refused (the caller checked nothing).
    pub(crate) fn wire(&self, start: u32, fds: Vec<Option<File>>) -> Result<(), WireError> {
        let mut table = write(&self.fds);
        let start = usize::try_from(start).map_err(|_| WireError)?;
        let end = start.checked_add(fds.len()).ok_or(WireError)?;
        if end > table.len() {
            return Err(WireError);
        }
        for (slot, fd) in table[start..end].iter_mut().zip(fds) {
            *slot = fd;
        }
        Ok(())
    }

    /// Signals vectors `start..start + count` as if the device had (SET_IRQS
    /// with DATA_NONE | ACTION_TRIGGER, a loopback test of the wiring).
    pub(crate) fn fire_range(&self, start: u32, count: u32) {
        for v in start..start.saturating_add(count) {
            if let Ok(v) = u16::try_from(v) {
                self.trigger(v);
            }
        }
    }

    /// Drops every eventfd and pending bit and disables MSI-X (reset,
    /// disconnect, SET_IRQS with count 0).
    pub(crate) fn unwire_all(&self) {
        for slot in write(&self.fds).iter_mut() {
            *slot = None;
        }
    }

    pub(crate) fn reset(&self) {
        self.unwire_all();
        let _g = lock(&self.mask_lock);
        for bits in &self.pending {
            bits.store(0, Ordering::Release);
        }
        self.enabled.store(false, Ordering::Release);
        self.function_masked.store(false, Ordering::Release);
    }

    /// The PBA as the guest reads it: `data.len()` bytes at `offset`.
    pub(crate) fn read_pba(&self, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            let word = (at / 8) as usize;
            *byte = self
                .pending
                .get(word)
                .map(|w| w.load(Ordering::Acquire).to_le_bytes()[(at % 8) as usize])
                .unwrap_or(0);
        }
    }

    pub(crate) fn counters(&self) -> MsixCounters {
        MsixCounters {
            fired: self.fired.load(Ordering::Relaxed),
            pending: self.held.load(Ordering::Relaxed),
            unwired: self.unwired.load(Ordering::Relaxed),
            disabled: self.disabled.load(Ordering::Relaxed),
            signal_errors: self.signal_errors.load(Ordering::Relaxed),
        }
    }
}

/// SET_IRQS named vectors the function does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireError;

/// The MSI-X table, read and written only by the vfio-user thread.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    bytes: Vec<u8>,
}

impl Table {
    pub(crate) fn new(vectors: u16) -> Table {
        let mut t = Table {
            bytes: vec![0; usize::from(vectors) * ENTRY_SIZE as usize],
        };
        t.reset();
        t
    }

    /// Every entry zero and masked, as at power-on.
    pub(crate) fn reset(&mut self) {
        self.bytes.fill(0);
        for entry in self.bytes.chunks_mut(ENTRY_SIZE as usize) {
            entry[12] = VECTOR_MASKED;
        }
    }

    /// `data.len()` bytes at `offset` in the table; outside reads as zero.
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            *byte = usize::try_from(offset + i as u64)
                .ok()
                .and_then(|at| self.bytes.get(at).copied())
                .unwrap_or(0);
        }
    }

    /// Address and data are writable; of Vector Control only the mask bit.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, &value) in data.iter().enumerate() {
            let Some(at) = usize::try_from(offset + i as u64).ok() else {
                continue;
            };
            let Some(byte) = self.bytes.get_mut(at) else {
                continue;
            };
            *byte = match at % ENTRY_SIZE as usize {
                12 => value & VECTOR_MASKED,
                13..=15 => 0,
                _ => value,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn eventfd() -> File {
        // SAFETY: eventfd takes no pointers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: the descriptor was just created and has no other owner.
        unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) }
    }

    fn count(f: &File) -> u64 {
        let mut buf = [0u8; 8];
        match (&*f).read(&mut buf) {
            Ok(8) => u64::from_ne_bytes(buf),
            _ => 0,
        }
    }

    #[test]
    fn masked_trigger_is_held_then_sent_on_unmask() {
        let v = Vectors::new(4);
        let fd = eventfd();
        v.wire(1, vec![Some(fd.try_clone().unwrap())]).unwrap();
        v.set_control(true, true);
        assert_eq!(v.trigger(1), Trigger::Pending);
        let mut pba = [0u8; 8];
        v.read_pba(0, &mut pba);
        assert_eq!(pba[0], 0b10);
        assert_eq!(count(&fd), 0);
        v.set_control(true, false);
        assert_eq!(count(&fd), 1);
        v.read_pba(0, &mut pba);
        assert_eq!(pba[0], 0);
    }

    #[test]
    fn trigger_reports_unwired_disabled_and_range() {
        let v = Vectors::new(2);
        assert_eq!(v.trigger(0), Trigger::Disabled);
        v.set_control(true, false);
        assert_eq!(v.trigger(0), Trigger::Unwired);
        assert_eq!(v.trigger(2), Trigger::NoSuchVector);
        assert_eq!(v.wire(1, vec![None, None]), Err(WireError));
        let c = v.counters();
        assert_eq!((c.disabled, c.unwired), (1, 1));
    }

    #[test]
    fn table_keeps_only_writable_bits() {
        let mut t = Table::new(2);
        let mut b = [0u8; 4];
        t.read(12, &mut b);
        assert_eq!(b, [1, 0, 0, 0]);
        t.write(16, &[0xff; 16]);
        let mut e = [0u8; 16];
        t.read(16, &mut e);
        assert_eq!(&e[..12], &[0xff; 12]);
        assert_eq!(&e[12..], &[1, 0, 0, 0]);
    }
}
