//! Adapters from the PCI layer to what the HCA core needs: guest memory as
//! `transport::memory::Memory` (with device memory, `crate::dm`), the mapped BAR2 as [`Doorbells`], MSI-X as
//! [`Interrupts`]. Every failure of the PCI layer becomes the core's error value
//! (an unmapped address is a `MemError`, never a panic; ARCHITECTURE.md §5, §9).

use std::sync::atomic::Ordering;

use transport::memory::{MemError, Memory};

use crate::abi;
use crate::hca::{Doorbells, Interrupts};

/// Guest memory as the engine and the rings see it: guest RAM, and device
/// memory (BAR4's DM bytes) at `crate::dm::DM_WINDOW` (issue 29 item 2).
pub struct GuestMem<'a> {
    /// The guest's memory map as of this `GuestMem`'s making: one load of
    /// the published map per round, not per access (`pci::DmaView`).
    dma: pci::DmaView,
    /// BAR4's shared memory and the DM bytes in it, `None` without DM.
    dm: Option<(&'a pci::BarMemory, u64)>,
}

fn err(addr: u64, len: usize) -> MemError {
    MemError {
        addr,
        len: len as u64,
    }
}

impl<'a> GuestMem<'a> {
    /// The function's guest RAM and its `dm_size` bytes of device memory
    /// (0: none; BAR4 unmapped: none).
    pub fn new(handle: &'a pci::Handle, dm_size: u32) -> GuestMem<'a> {
        let bar = abi::ident::bar::WAKE_BAR_INDEX as usize;
        GuestMem {
            // Issue 30: copies in the piece size measured for this CPU.
            dma: handle
                .memory()
                .view()
                .with_copy_piece(transport::memory::copy_piece()),
            dm: handle
                .bar_memory(bar)
                .filter(|_| dm_size != 0)
                .map(|b| (b, u64::from(dm_size))),
        }
    }

    /// Where `[addr, addr + len)` is: `None` for guest RAM, else the DM
    /// bytes' BAR memory and the access's offset in BAR4, or the error of an
    /// access to the window outside the DM bytes.
    fn dm_at(&self, addr: u64, len: usize) -> Option<Result<(&'a pci::BarMemory, u64), MemError>> {
        let size = self.dm.map_or(0, |(_, size)| size);
        let at = crate::dm::locate(addr, len as u64, size)?;
        Some(match (at, self.dm) {
            (Ok(offset), Some((bar, _))) => {
                Ok((bar, u64::from(abi::ident::bar::DM_OFFSET) + offset))
            }
            _ => Err(err(addr, len)),
        })
    }

    /// The 8-byte word at `addr` in device memory, if it is there.
    fn dm_word(&self, addr: u64) -> Option<Result<&'a std::sync::atomic::AtomicU64, MemError>> {
        Some(
            self.dm_at(addr, 8)?
                .and_then(|(bar, off)| bar.atomic_u64(off).map_err(|_| err(addr, 8))),
        )
    }
}

// The DMA view copies a segment in pieces of the size the engine's own copies
// use (`transport::memory::COPY_CHUNK`): one size, checked where both meet.
const _: () = assert!(pci::dma::COPY_PIECE == transport::memory::COPY_CHUNK);
const _: () = assert!(pci::dma::MAX_COPY_PIECE == transport::memory::MAX_COPY_PIECE);

impl Memory for GuestMem<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        if let Some(dm) = self.dm_at(addr, buf.len()) {
            let (bar, off) = dm?;
            return bar.read(off, buf).map_err(|_| err(addr, buf.len()));
        }
        self.dma.read(addr, buf).map_err(|_| err(addr, buf.len()))
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        if let Some(dm) = self.dm_at(addr, data.len()) {
            let (bar, off) = dm?;
            return bar.write(off, data).map_err(|_| err(addr, data.len()));
        }
        self.dma
            .write(addr, data)
            .map_err(|_| err(addr, data.len()))
    }

    fn read_dst(&self, addr: u64, dst: transport::memory::Dst<'_>) -> Result<(), MemError> {
        use transport::memory::Dst;
        match dst {
            Dst::Bytes(b) => self.read(addr, b),
            // Issue 30: a payload built in a ring slot, straight from guest RAM.
            Dst::Volatile(v) if self.dm_at(addr, v.len()).is_none() => self
                .dma
                .read_volatile(addr, v)
                .map_err(|_| err(addr, v.len())),
            // Device memory: through a buffer, as the trait's default.
            Dst::Volatile(v) => transport::memory::read_volatile_buffered(self, addr, v),
        }
    }

    fn write_src(&mut self, addr: u64, src: transport::memory::Src<'_>) -> Result<(), MemError> {
        use transport::memory::Src;
        match src {
            Src::Bytes(b) => self.write(addr, b),
            // Issue 30: a payload in a ring slot, straight into guest RAM.
            Src::Volatile(v) if self.dm_at(addr, v.len()).is_none() => self
                .dma
                .write_volatile(addr, v)
                .map_err(|_| err(addr, v.len())),
            // Device memory: through a buffer, as the trait's default.
            Src::Volatile(v) => transport::memory::write_volatile_buffered(self, addr, v),
        }
    }

    // Atomics on device memory are the host's atomics on the shared word, so
    // they are atomic against the guest's own stores to it as well (OP-13).
    fn compare_swap(&mut self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        if let Some(w) = self.dm_word(addr) {
            let w = w?;
            return Ok(w
                .compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire)
                .unwrap_or_else(|old| old));
        }
        self.dma
            .compare_swap(addr, compare, swap)
            .map_err(|_| err(addr, 8))
    }

    fn fetch_add(&mut self, addr: u64, add: u64) -> Result<u64, MemError> {
        if let Some(w) = self.dm_word(addr) {
            return Ok(w?.fetch_add(add, Ordering::AcqRel));
        }
        self.dma.fetch_add(addr, add).map_err(|_| err(addr, 8))
    }

    fn atomic_write(&mut self, addr: u64, value: u64) -> Result<(), MemError> {
        if let Some(w) = self.dm_word(addr) {
            w?.store(value, Ordering::Release);
            return Ok(());
        }
        self.dma.atomic_store(addr, value).map_err(|_| err(addr, 8))
    }

    fn check(&self, addr: u64, len: u64) -> Result<(), MemError> {
        let e = MemError { addr, len };
        let n = usize::try_from(len).map_err(|_| e)?;
        if let Some(dm) = self.dm_at(addr, n) {
            return dm.map(|_| ());
        }
        if addr.checked_add(len).is_none() || !self.dma.is_mapped(addr, n) {
            return Err(e);
        }
        Ok(())
    }
}

/// The doorbell pages: BAR2's shared memory.
pub struct BarDoorbells<'a>(pub &'a pci::BarMemory);

impl Doorbells for BarDoorbells<'_> {
    fn load(&self, offset: u64) -> u32 {
        self.0.load_u32(offset).unwrap_or(0)
    }

    fn store(&self, offset: u64, value: u32) {
        let _ = self.0.store_u32(offset, value);
    }

    // The summary words are shared with every vCPU of the guest: a plain load
    // and store would lose a bit set in between, so the read-modify-writes are
    // the atomics of `pci::BarMemory::atomic_u32` (no unsafe here, abi::uar
    // DOORBELL_PROTOCOL). AcqRel: the slot loads that follow a swap see the
    // producer indices stored before the bits it took.
    fn swap(&self, offset: u64, value: u32) -> u32 {
        self.0
            .atomic_u32(offset)
            .map_or(0, |w| w.swap(value, Ordering::AcqRel))
    }

    fn fetch_or(&self, offset: u64, bits: u32) -> u32 {
        self.0
            .atomic_u32(offset)
            .map_or(0, |w| w.fetch_or(bits, Ordering::AcqRel))
    }

    fn len(&self) -> u64 {
        self.0.len()
    }
}

/// MSI-X through the function's handle.
pub struct Msix<'a>(pub &'a pci::Handle);

impl Interrupts for Msix<'_> {
    fn trigger(&self, vector: u16) {
        let outcome = self.0.trigger(vector);
        log::trace!("msi-x vector {vector}: {outcome:?}");
    }
}

/// Doorbell pages in a vector, for tests and for a device without PCI.
#[derive(Debug, Default)]
pub struct VecDoorbells(pub Vec<std::sync::atomic::AtomicU32>);

impl VecDoorbells {
    /// `pages` zeroed doorbell pages.
    pub fn new(pages: usize) -> VecDoorbells {
        let words = pages * crate::abi::uar::uar::PAGE_SIZE as usize / 4;
        VecDoorbells((0..words).map(|_| Default::default()).collect())
    }
}

impl Doorbells for VecDoorbells {
    fn load(&self, offset: u64) -> u32 {
        self.0
            .get((offset / 4) as usize)
            .map_or(0, |w| w.load(Ordering::Acquire))
    }

    fn store(&self, offset: u64, value: u32) {
        if let Some(w) = self.0.get((offset / 4) as usize) {
            w.store(value, Ordering::Release);
        }
    }

    fn swap(&self, offset: u64, value: u32) -> u32 {
        self.0
            .get((offset / 4) as usize)
            .map_or(0, |w| w.swap(value, Ordering::AcqRel))
    }

    fn fetch_or(&self, offset: u64, bits: u32) -> u32 {
        self.0
            .get((offset / 4) as usize)
            .map_or(0, |w| w.fetch_or(bits, Ordering::AcqRel))
    }

    fn len(&self) -> u64 {
        self.0.len() as u64 * 4
    }
}
