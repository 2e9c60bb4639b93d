//! The guest as QEMU presents it to the device: a vfio-user [`Client`] on the
//! device's socket, guest RAM as a memfd mapped here and DMA-mapped at a
//! guest-physical base, config space, BAR0 through trapped region accesses, BAR2
//! mapped from the memfd the server hands out (sparse mmap), MSI-X vectors as
//! eventfds (SET_IRQS), and a page allocator over guest RAM.
//!
//! Quirks of the `vfio_user` 0.1.7 client that shape this (ARCHITECTURE.md §5):
//! - `Client::resettable()` is inverted (true when the device does *not* offer
//!   reset): [`Guest::reset_supported`] corrects it.
//! - `region_read` reads the payload even after an error reply and then hangs;
//!   the `pci` server never fails a region access, and [`crate::Vhca`] has a
//!   watchdog that kills the processes of a test that hangs.
//! - A DMA map always carries an fd: guest RAM is always a memfd here.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
};
use vfio_user::Client;
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::sys::{self, SharedMap};

/// Bytes per guest page.
pub const PAGE: u64 = 4096;

/// Default guest-physical base of RAM: 4 GiB, so that addresses need the high
/// halves of 64-bit registers.
pub const RAM_BASE: u64 = 0x1_0000_0000;

/// Default guest RAM.
pub const RAM_SIZE: u64 = 256 << 20;

/// Errors of the vfio-user connection (the device went away, a message failed).
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How a [`Guest`] sets itself up.
#[derive(Debug, Clone)]
pub struct GuestOptions {
    pub ram_base: u64,
    pub ram_size: u64,
    /// DMA-map RAM in pieces of this many bytes (so that one piece can be
    /// unmapped later); `None`: one map.
    pub dma_chunk: Option<u64>,
    /// Enable bus mastering and MSI-X and wire every vector to an eventfd.
    pub wire_vectors: bool,
}

impl Default for GuestOptions {
    fn default() -> GuestOptions {
        GuestOptions {
            ram_base: RAM_BASE,
            ram_size: RAM_SIZE,
            dma_chunk: None,
            wire_vectors: true,
        }
    }
}

/// PCI identity read from config space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciIds {
    pub vendor: u16,
    pub device: u16,
    pub revision: u8,
    /// Base class << 16 | subclass << 8 | prog-if.
    pub class: u32,
    pub subsystem_vendor: u16,
    pub subsystem: u16,
    pub header_type: u8,
}

/// Where a buffer lies in guest-physical memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Physically contiguous pages.
    Contiguous,
    /// Pages apart from each other and out of address order, as user memory is.
    Scattered,
}

/// A buffer in guest RAM: `len` bytes from byte `first_off` of `pages[0]`,
/// with a virtual address `va` (what an MR's iova and an SGE's address name);
/// `va % 4096 == first_off`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buf {
    pub va: u64,
    pub len: usize,
    pub first_off: usize,
    pub pages: Vec<u64>,
}

impl Buf {
    /// The guest-physical address of byte `off`.
    pub fn gpa(&self, off: usize) -> u64 {
        let at = self.first_off + off;
        self.pages[at / PAGE as usize] + (at % PAGE as usize) as u64
    }

    /// The virtual address of byte `off`.
    pub fn va(&self, off: usize) -> u64 {
        self.va + off as u64
    }

    /// Whether the pages follow each other in guest-physical memory.
    pub fn is_contiguous(&self) -> bool {
        self.pages.windows(2).all(|w| w[1] == w[0] + PAGE)
    }

    /// Pieces `(gpa, len)` of `[off, off + len)` that are contiguous in guest
    /// memory (one per page crossed).
    pub fn pieces(&self, off: usize, len: usize) -> Vec<(u64, usize)> {
        assert!(
            off + len <= self.len,
            "[{off}, +{len}) outside a buffer of {}",
            self.len
        );
        let mut out = Vec::new();
        let mut at = off;
        let end = off + len;
        while at < end {
            let in_page = (self.first_off + at) % PAGE as usize;
            let n = (PAGE as usize - in_page).min(end - at);
            out.push((self.gpa(at), n));
            at += n;
        }
        out
    }
}

/// A first-fit page allocator over guest RAM.
#[derive(Debug, Clone)]
pub struct PageAlloc {
    base: u64,
    used: Vec<bool>,
    hint: usize,
    free: usize,
}

impl PageAlloc {
    pub fn new(base: u64, pages: usize) -> PageAlloc {
        PageAlloc {
            base,
            used: vec![false; pages],
            hint: 0,
            free: pages,
        }
    }

    pub fn free_pages(&self) -> usize {
        self.free
    }

    /// `n` contiguous pages aligned to `align_pages`; their guest address.
    pub fn contiguous(&mut self, n: usize, align_pages: usize) -> Option<u64> {
        assert!(n > 0 && align_pages > 0);
        let total = self.used.len();
        for start in [self.hint, 0] {
            let mut i = start.next_multiple_of(align_pages);
            while i + n <= total {
                match (i..i + n).rev().find(|&j| self.used[j]) {
                    None => {
                        self.used[i..i + n].iter_mut().for_each(|u| *u = true);
                        self.free -= n;
                        self.hint = i + n;
                        return Some(self.base + i as u64 * PAGE);
                    }
                    Some(busy) => i = (busy + 1).next_multiple_of(align_pages),
                }
            }
        }
        None
    }

    /// `n` single pages, none adjacent to another of them, in scrambled order.
    pub fn scattered(&mut self, n: usize, seed: u64) -> Option<Vec<u64>> {
        let total = self.used.len();
        let mut picked = Vec::with_capacity(n);
        let mut i = self.hint;
        let mut scanned = 0;
        while picked.len() < n && scanned < 2 * total {
            let j = i % total;
            let left_free = j == 0 || !self.used[j - 1];
            if !self.used[j] && left_free {
                self.used[j] = true;
                picked.push(j);
                i += 2;
                scanned += 2;
            } else {
                i += 1;
                scanned += 1;
            }
        }
        if picked.len() < n {
            for &j in &picked {
                self.used[j] = false;
            }
            return None;
        }
        self.free -= n;
        self.hint = (picked.last().copied().unwrap_or(0) + 2) % total;
        let mut rng = crate::util::Rng::new(seed ^ 0x5ca7_7e4e);
        rng.shuffle(&mut picked);
        Some(
            picked
                .into_iter()
                .map(|j| self.base + j as u64 * PAGE)
                .collect(),
        )
    }

    /// Takes the `n` pages from `gpa` if all are free.
    pub fn reserve(&mut self, gpa: u64, n: usize) -> bool {
        let i = ((gpa - self.base) / PAGE) as usize;
        if i + n > self.used.len() || self.used[i..i + n].iter().any(|&u| u) {
            return false;
        }
        self.used[i..i + n].iter_mut().for_each(|u| *u = true);
        self.free -= n;
        true
    }

    /// Returns pages.
    pub fn release(&mut self, pages: &[u64]) {
        for &p in pages {
            let j = ((p - self.base) / PAGE) as usize;
            assert!(self.used[j], "page {p:#x} freed twice");
            self.used[j] = false;
            self.free += 1;
        }
    }
}

/// The guest side of one vfio-user connection.
pub struct Guest {
    client: Client,
    ram_file: File,
    ram: SharedMap,
    ram_base: u64,
    ram_size: u64,
    mapped: Vec<(u64, u64)>,
    bar2: Vec<(u64, SharedMap)>,
    bar2_size: u64,
    bar0_size: u64,
    vectors: Vec<Option<EventFd>>,
    msix_count: u32,
    msix_cap: Option<u64>,
    alloc: PageAlloc,
    next_va: u64,
    seed: u64,
}

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("ram_base", &self.ram_base)
            .field("ram_size", &self.ram_size)
            .field("mapped", &self.mapped)
            .field("bar2_size", &self.bar2_size)
            .field("msix_count", &self.msix_count)
            .finish_non_exhaustive()
    }
}

const MSIX_CAP_ID: u8 = 0x11;
const MSIX_ENABLE: u16 = 0x8000;
const MSIX_FUNCTION_MASK: u16 = 0x4000;

impl Guest {
    /// Connects, negotiates, reads the regions, creates and DMA-maps guest RAM,
    /// maps BAR2, and (with `wire_vectors`) enables memory decoding, bus
    /// mastering and MSI-X with every vector on an eventfd.
    pub fn connect(socket: &Path, opts: GuestOptions) -> Result<Guest, Error> {
        assert_eq!(opts.ram_base % PAGE, 0);
        assert_eq!(opts.ram_size % PAGE, 0);
        let mut client = Client::new(socket)?;
        let ram_file = sys::memfd(c"vhca-guest-ram", opts.ram_size)?;
        let ram = SharedMap::new(&ram_file, 0, opts.ram_size as usize)?;
        let bar0_size = client.region(0).map_or(0, |r| r.size);
        let bar2_size = client.region(2).map_or(0, |r| r.size);
        let mut bar2 = Vec::new();
        if let Some(r) = client.region(2) {
            if r.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 {
                if let Some(fo) = &r.file_offset {
                    let areas: Vec<(u64, u64)> = if r.sparse_areas.is_empty() {
                        vec![(0, r.size)]
                    } else {
                        r.sparse_areas.iter().map(|a| (a.offset, a.size)).collect()
                    };
                    for (off, size) in areas {
                        let m = SharedMap::new(fo.file(), fo.start() + off, size as usize)?;
                        bar2.push((off, m));
                    }
                }
            }
        }
        let msix_count = client.get_irq_info_count(VFIO_PCI_MSIX_IRQ_INDEX)?;
        let seed = opts.ram_base ^ u64::from(std::process::id());
        let mut g = Guest {
            client,
            ram_file,
            ram,
            ram_base: opts.ram_base,
            ram_size: opts.ram_size,
            mapped: Vec::new(),
            bar2,
            bar2_size,
            bar0_size,
            vectors: (0..msix_count).map(|_| None).collect(),
            msix_count,
            msix_cap: None,
            alloc: PageAlloc::new(opts.ram_base, (opts.ram_size / PAGE) as usize),
            next_va: 0x7f3a_0000_0000,
            seed,
        };
        g.msix_cap = g.find_capability(MSIX_CAP_ID)?;
        let chunk = opts.dma_chunk.unwrap_or(opts.ram_size);
        let mut at = 0;
        while at < opts.ram_size {
            let n = chunk.min(opts.ram_size - at);
            g.dma_map(opts.ram_base + at, n)?;
            at += n;
        }
        if opts.wire_vectors {
            // Memory space and bus master, as the guest's pci_enable_device and
            // pci_set_master do.
            let cmd = g.cfg_u16(0x04)?;
            g.cfg_write(0x04, &(cmd | 0x0006).to_le_bytes())?;
            g.set_msix_control(true, false)?;
            for v in 0..msix_count {
                g.wire(v)?;
            }
        }
        Ok(g)
    }

    /// The vfio-user client, for messages this type has no method for.
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Hangs up (as QEMU quitting does). Drop does the same.
    pub fn disconnect(self) {
        let _ = self.client.shutdown();
    }

    // ---- config space ----

    pub fn cfg_read(&mut self, off: u64, len: usize) -> Result<Vec<u8>, Error> {
        let mut b = vec![0; len];
        self.client
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, off, &mut b)?;
        Ok(b)
    }

    pub fn cfg_u8(&mut self, off: u64) -> Result<u8, Error> {
        Ok(self.cfg_read(off, 1)?[0])
    }

    pub fn cfg_u16(&mut self, off: u64) -> Result<u16, Error> {
        let b = self.cfg_read(off, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn cfg_u32(&mut self, off: u64) -> Result<u32, Error> {
        let b = self.cfg_read(off, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn cfg_write(&mut self, off: u64, data: &[u8]) -> Result<(), Error> {
        self.client
            .region_write(VFIO_PCI_CONFIG_REGION_INDEX, off, data)?;
        Ok(())
    }

    /// IDs, class and header type.
    pub fn ids(&mut self) -> Result<PciIds, Error> {
        let h = self.cfg_read(0, 0x40)?;
        let u16_at = |o: usize| u16::from_le_bytes([h[o], h[o + 1]]);
        Ok(PciIds {
            vendor: u16_at(0x00),
            device: u16_at(0x02),
            revision: h[0x08],
            class: u32::from(h[0x0b]) << 16 | u32::from(h[0x0a]) << 8 | u32::from(h[0x09]),
            subsystem_vendor: u16_at(0x2c),
            subsystem: u16_at(0x2e),
            header_type: h[0x0e],
        })
    }

    /// The capability list as (ID, offset), walked as a guest walks it.
    pub fn capabilities(&mut self) -> Result<Vec<(u8, u64)>, Error> {
        let mut found = Vec::new();
        if self.cfg_u16(0x06)? & 0x10 == 0 {
            return Ok(found);
        }
        let mut at = u64::from(self.cfg_u8(0x34)? & !3);
        while at != 0 && found.len() < 48 {
            found.push((self.cfg_u8(at)?, at));
            at = u64::from(self.cfg_u8(at + 1)? & !3);
        }
        Ok(found)
    }

    pub fn find_capability(&mut self, id: u8) -> Result<Option<u64>, Error> {
        Ok(self
            .capabilities()?
            .into_iter()
            .find(|&(i, _)| i == id)
            .map(|(_, at)| at))
    }

    // ---- regions ----

    /// Size and flags of region `index` as the device described it.
    pub fn region_info(&self, index: u32) -> Option<(u64, u32)> {
        self.client.region(index).map(|r| (r.size, r.flags))
    }

    /// The sparse mmap areas of region `index`.
    pub fn sparse_areas(&self, index: u32) -> Vec<(u64, u64)> {
        self.client.region(index).map_or(Vec::new(), |r| {
            r.sparse_areas.iter().map(|a| (a.offset, a.size)).collect()
        })
    }

    pub fn bar0_size(&self) -> u64 {
        self.bar0_size
    }

    pub fn bar2_size(&self) -> u64 {
        self.bar2_size
    }

    /// Whether the device offers DEVICE_RESET (the crate's `resettable()` is
    /// inverted).
    pub fn reset_supported(&self) -> bool {
        !self.client.resettable()
    }

    /// A vfio-user DEVICE_RESET (what QEMU sends on a guest reboot).
    pub fn pci_reset(&mut self) -> Result<(), Error> {
        self.client.reset()?;
        Ok(())
    }

    // ---- BAR0 (trapped) ----

    pub fn bar0_read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.client.region_read(0, off, buf)?;
        Ok(())
    }

    pub fn bar0_write(&mut self, off: u64, data: &[u8]) -> Result<(), Error> {
        self.client.region_write(0, off, data)?;
        Ok(())
    }

    /// A posted 32-bit write into BAR0 (vfio-user NO_REPLY, not waiting for
    /// the device): what QEMU sends for a guest's store into a memory BAR
    /// (hw/vfio/pci.c `post_wr`); a later access is handled after it.
    pub fn bar0_write32_posted(&mut self, off: u32, v: u32) -> Result<(), Error> {
        self.client
            .region_write_posted(0, u64::from(off), &v.to_le_bytes())?;
        Ok(())
    }

    pub fn bar0_read32(&mut self, off: u32) -> Result<u32, Error> {
        let mut b = [0u8; 4];
        self.bar0_read(u64::from(off), &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    pub fn bar0_write32(&mut self, off: u32, v: u32) -> Result<(), Error> {
        self.bar0_write(u64::from(off), &v.to_le_bytes())
    }

    pub fn bar0_read64(&mut self, off: u32) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.bar0_read(u64::from(off), &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    pub fn bar0_write64(&mut self, off: u32, v: u64) -> Result<(), Error> {
        self.bar0_write(u64::from(off), &v.to_le_bytes())
    }

    // ---- BAR2 (mapped doorbell pages) ----

    /// Whether BAR2 is mapped here (else doorbells go through messages).
    pub fn bar2_mapped(&self) -> bool {
        !self.bar2.is_empty()
    }

    fn bar2_area(&self, off: u64, len: u64) -> Option<(&SharedMap, usize)> {
        self.bar2.iter().find_map(|(start, m)| {
            (off >= *start && off + len <= start + m.len() as u64)
                .then(|| (m, (off - start) as usize))
        })
    }

    /// Stores a 32-bit word into BAR2 (one aligned store into the mapping; a
    /// region write where BAR2 is not mapped).
    pub fn bar2_store32(&mut self, off: u64, v: u32) -> Result<(), Error> {
        if let Some((m, at)) = self.bar2_area(off, 4) {
            m.atomic_u32(at)
                .store(v, std::sync::atomic::Ordering::Release);
            Ok(())
        } else {
            self.client.region_write(2, off, &v.to_le_bytes())?;
            Ok(())
        }
    }

    /// ORs `bits` into a 32-bit word of BAR2 with one atomic read-modify-write
    /// where BAR2 is mapped (the doorbell summary, abi::uar DOORBELL_PROTOCOL:
    /// the device swaps the word to zero concurrently). Where it is not mapped,
    /// a region read then write: not atomic, but this driver is the only
    /// producer of its pages and one thread, so a race with the device's swap
    /// can only set again bits the device already took (a spurious bit,
    /// harmless), never lose one.
    pub fn bar2_or32(&mut self, off: u64, bits: u32) -> Result<(), Error> {
        if let Some((m, at)) = self.bar2_area(off, 4) {
            m.atomic_u32(at)
                .fetch_or(bits, std::sync::atomic::Ordering::AcqRel);
            Ok(())
        } else {
            let mut b = [0u8; 4];
            self.client.region_read(2, off, &mut b)?;
            let v = u32::from_le_bytes(b) | bits;
            self.client.region_write(2, off, &v.to_le_bytes())?;
            Ok(())
        }
    }

    /// Loads a 32-bit word of BAR2.
    pub fn bar2_load32(&mut self, off: u64) -> Result<u32, Error> {
        if let Some((m, at)) = self.bar2_area(off, 4) {
            Ok(m.atomic_u32(at).load(std::sync::atomic::Ordering::Acquire))
        } else {
            let mut b = [0u8; 4];
            self.client.region_read(2, off, &mut b)?;
            Ok(u32::from_le_bytes(b))
        }
    }

    /// Copies bytes out of BAR2 (mapped part only).
    pub fn bar2_read(&self, off: u64, buf: &mut [u8]) -> bool {
        match self.bar2_area(off, buf.len() as u64) {
            Some((m, at)) => {
                m.read(at, buf);
                true
            }
            None => false,
        }
    }

    // ---- guest RAM ----

    pub fn ram_base(&self) -> u64 {
        self.ram_base
    }

    pub fn ram_size(&self) -> u64 {
        self.ram_size
    }

    /// The memfd behind guest RAM.
    pub fn ram_file(&self) -> &File {
        &self.ram_file
    }

    fn ram_off(&self, gpa: u64, len: usize) -> usize {
        assert!(
            gpa >= self.ram_base
                && gpa
                    .checked_add(len as u64)
                    .is_some_and(|e| e <= self.ram_base + self.ram_size),
            "guest range {gpa:#x} +{len:#x} is outside guest RAM"
        );
        (gpa - self.ram_base) as usize
    }

    pub fn read(&self, gpa: u64, buf: &mut [u8]) {
        self.ram.read(self.ram_off(gpa, buf.len()), buf);
    }

    pub fn read_vec(&self, gpa: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read(gpa, &mut v);
        v
    }

    pub fn write(&self, gpa: u64, data: &[u8]) {
        self.ram.write(self.ram_off(gpa, data.len()), data);
    }

    pub fn fill(&self, gpa: u64, len: usize, byte: u8) {
        self.ram.fill(self.ram_off(gpa, len), len, byte);
    }

    pub fn ram_u8(&self, gpa: u64) -> &std::sync::atomic::AtomicU8 {
        self.ram.atomic_u8(self.ram_off(gpa, 1))
    }

    pub fn ram_u32(&self, gpa: u64) -> &std::sync::atomic::AtomicU32 {
        self.ram.atomic_u32(self.ram_off(gpa, 4))
    }

    pub fn ram_u64(&self, gpa: u64) -> &std::sync::atomic::AtomicU64 {
        self.ram.atomic_u64(self.ram_off(gpa, 8))
    }

    // ---- DMA maps ----

    /// DMA-maps `[gpa, gpa + len)` of guest RAM (memfd offset gpa - base).
    pub fn dma_map(&mut self, gpa: u64, len: u64) -> Result<(), Error> {
        let off = self.ram_off(gpa, len as usize) as u64;
        self.client
            .dma_map(off, gpa, len, self.ram_file.as_raw_fd())?;
        self.mapped.push((gpa, len));
        Ok(())
    }

    /// DMA-unmaps `[gpa, gpa + len)` (as QEMU does when memory goes away).
    pub fn dma_unmap(&mut self, gpa: u64, len: u64) -> Result<(), Error> {
        self.client.dma_unmap(gpa, len)?;
        self.mapped.retain(|&(a, l)| !(a == gpa && l == len));
        Ok(())
    }

    /// DMA-maps `len` bytes of another file at `gpa` (memory that is not RAM).
    pub fn dma_map_file(
        &mut self,
        file: &File,
        offset: u64,
        gpa: u64,
        len: u64,
    ) -> Result<(), Error> {
        self.client.dma_map(offset, gpa, len, file.as_raw_fd())?;
        self.mapped.push((gpa, len));
        Ok(())
    }

    /// The DMA maps this guest made and did not unmap.
    pub fn mapped(&self) -> &[(u64, u64)] {
        &self.mapped
    }

    // ---- MSI-X ----

    pub fn msix_count(&self) -> u32 {
        self.msix_count
    }

    /// The MSI-X capability's offset in config space.
    pub fn msix_capability(&self) -> Option<u64> {
        self.msix_cap
    }

    /// Writes MSI-X Message Control: enable and function mask.
    pub fn set_msix_control(&mut self, enable: bool, function_mask: bool) -> Result<(), Error> {
        let Some(at) = self.msix_cap else {
            return Err("no MSI-X capability".into());
        };
        let cur = self.cfg_u16(at + 2)?;
        let mut v = cur & !(MSIX_ENABLE | MSIX_FUNCTION_MASK);
        if enable {
            v |= MSIX_ENABLE;
        }
        if function_mask {
            v |= MSIX_FUNCTION_MASK;
        }
        self.cfg_write(at + 2, &v.to_le_bytes())
    }

    /// Wires vector `v` to a new eventfd (one SET_IRQS per vector, as QEMU does
    /// with this server's max_msg_fds of 1).
    pub fn wire(&mut self, v: u32) -> Result<(), Error> {
        let fd = EventFd::new(EFD_NONBLOCK)?;
        self.client.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            v,
            1,
            &[fd.as_raw_fd()],
        )?;
        self.vectors[v as usize] = Some(fd);
        Ok(())
    }

    /// Unwires vector `v` (count 1, no fd: what QEMU sends when the guest masks
    /// it and QEMU takes the vector over).
    pub fn unwire(&mut self, v: u32) -> Result<(), Error> {
        self.client.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            v,
            1,
            &[],
        )?;
        self.vectors[v as usize] = None;
        Ok(())
    }

    /// Whether vector `v` has an eventfd here.
    pub fn is_wired(&self, v: u32) -> bool {
        self.vectors.get(v as usize).is_some_and(Option::is_some)
    }

    /// Reads and clears vector `v`'s eventfd: how often it fired since the last
    /// read (0 if never or unwired).
    pub fn take_vector(&self, v: u32) -> u64 {
        match self.vectors.get(v as usize).and_then(Option::as_ref) {
            Some(fd) => fd.read().unwrap_or(0),
            None => 0,
        }
    }

    /// Waits up to `timeout` for vector `v` to fire; returns the count taken.
    pub fn wait_vector(&self, v: u32, timeout: Duration) -> u64 {
        let Some(fd) = self.vectors.get(v as usize).and_then(Option::as_ref) else {
            std::thread::sleep(timeout);
            return 0;
        };
        let deadline = Instant::now() + timeout;
        loop {
            let n = fd.read().unwrap_or(0);
            if n > 0 {
                return n;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return 0;
            }
            let _ = sys::wait_readable(fd.as_raw_fd(), left);
        }
    }

    // ---- page allocator ----

    /// `n` zeroed, physically contiguous pages aligned to `align_pages` pages.
    pub fn alloc_pages(&mut self, n: usize, align_pages: usize) -> u64 {
        let gpa = self
            .alloc
            .contiguous(n, align_pages)
            .unwrap_or_else(|| panic!("guest RAM exhausted: {n} contiguous pages"));
        self.fill(gpa, n * PAGE as usize, 0);
        gpa
    }

    /// `n` zeroed pages, deliberately not adjacent and out of order.
    pub fn alloc_scattered(&mut self, n: usize) -> Vec<u64> {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let pages = self
            .alloc
            .scattered(n, self.seed)
            .unwrap_or_else(|| panic!("guest RAM exhausted: {n} scattered pages"));
        for &p in &pages {
            self.fill(p, PAGE as usize, 0);
        }
        pages
    }

    /// `n` zeroed pages laid out as asked.
    pub fn alloc_layout(&mut self, n: usize, layout: Layout) -> Vec<u64> {
        match layout {
            Layout::Contiguous => {
                let a = self.alloc_pages(n, 1);
                (0..n as u64).map(|i| a + i * PAGE).collect()
            }
            Layout::Scattered => self.alloc_scattered(n),
        }
    }

    /// Returns pages to the allocator.
    pub fn free_pages(&mut self, pages: &[u64]) {
        self.alloc.release(pages);
    }

    /// Pages still free.
    pub fn pages_free(&self) -> usize {
        self.alloc.free_pages()
    }

    /// A zeroed buffer of `len` bytes starting `first_off` bytes into its first
    /// page (any alignment), laid out as asked, with a fresh virtual address.
    pub fn alloc_buf(&mut self, len: usize, layout: Layout, first_off: usize) -> Buf {
        assert!(first_off < PAGE as usize);
        let n = (first_off + len).div_ceil(PAGE as usize).max(1);
        let pages = self.alloc_layout(n, layout);
        let va = self.next_va + first_off as u64;
        self.next_va += (n as u64 + 1) * PAGE;
        Buf {
            va,
            len,
            first_off,
            pages,
        }
    }

    /// A zeroed, contiguous buffer of `len` bytes at guest address `gpa`
    /// (page-aligned; the pages must be free), e.g. inside one DMA map.
    pub fn alloc_buf_at(&mut self, gpa: u64, len: usize) -> Buf {
        assert_eq!(gpa % PAGE, 0);
        let n = len.div_ceil(PAGE as usize).max(1);
        assert!(self.alloc.reserve(gpa, n), "pages at {gpa:#x} are taken");
        self.fill(gpa, n * PAGE as usize, 0);
        let va = self.next_va;
        self.next_va += (n as u64 + 1) * PAGE;
        Buf {
            va,
            len,
            first_off: 0,
            pages: (0..n as u64).map(|i| gpa + i * PAGE).collect(),
        }
    }

    /// Frees a buffer's pages.
    pub fn free_buf(&mut self, buf: &Buf) {
        self.free_pages(&buf.pages);
    }

    /// Writes `data` at byte `off` of `buf`.
    pub fn buf_write(&self, buf: &Buf, off: usize, data: &[u8]) {
        let mut at = 0;
        for (gpa, n) in buf.pieces(off, data.len()) {
            self.write(gpa, &data[at..at + n]);
            at += n;
        }
    }

    /// Reads `len` bytes at byte `off` of `buf`.
    pub fn buf_read(&self, buf: &Buf, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        let mut at = 0;
        for (gpa, n) in buf.pieces(off, len) {
            self.read(gpa, &mut v[at..at + n]);
            at += n;
        }
        v
    }

    /// Sets `len` bytes at `off` of `buf` to `byte`.
    pub fn buf_fill(&self, buf: &Buf, off: usize, len: usize, byte: u8) {
        for (gpa, n) in buf.pieces(off, len) {
            self.fill(gpa, n, byte);
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.client.shutdown();
    }
}

/// `Client::get_irq_info` returning only the count.
trait IrqCount {
    fn get_irq_info_count(&mut self, index: u32) -> Result<u32, Error>;
}

impl IrqCount for Client {
    fn get_irq_info_count(&mut self, index: u32) -> Result<u32, Error> {
        Ok(self.get_irq_info(index)?.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vfio-user device whose region writes block until `release` says
    /// so, and whose reads answer the last value written (issue 30 item 3:
    /// a posted WAKE).
    struct SlowBackend {
        release: std::sync::mpsc::Receiver<()>,
        last: u32,
    }

    impl vfio_user::ServerBackend for SlowBackend {
        fn region_read(&mut self, _: u32, _: u64, data: &mut [u8]) -> std::io::Result<()> {
            let n = data.len().min(4);
            data[..n].copy_from_slice(&self.last.to_le_bytes()[..n]);
            Ok(())
        }
        fn region_write(&mut self, _: u32, _: u64, data: &[u8]) -> std::io::Result<()> {
            let _ = self.release.recv_timeout(Duration::from_secs(10));
            let mut b = [0u8; 4];
            let n = data.len().min(4);
            b[..n].copy_from_slice(&data[..n]);
            self.last = u32::from_le_bytes(b);
            Ok(())
        }
        fn dma_map(
            &mut self,
            _: vfio_user::DmaMapFlags,
            _: u64,
            _: u64,
            _: u64,
            _: Option<File>,
        ) -> std::io::Result<()> {
            Ok(())
        }
        fn dma_unmap(
            &mut self,
            _: vfio_user::DmaUnmapFlags,
            _: u64,
            _: u64,
        ) -> std::io::Result<()> {
            Ok(())
        }
        fn reset(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn set_irqs(
            &mut self,
            _: u32,
            _: u32,
            _: u32,
            _: u32,
            _: Vec<File>,
        ) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The driver's WAKE is a posted write, as QEMU posts a guest's store
    /// into a memory BAR: it returns while the device has not handled it yet
    /// (its vfio-user thread busy or preempted), and the next request gets
    /// its own answer, handled after the write.
    #[test]
    fn a_posted_bar_write_returns_before_the_device_handles_it() {
        use vfio_bindings::bindings::vfio::{
            vfio_region_info, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
        };
        let dir = std::env::temp_dir().join(format!("vhca-posted-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let region = vfio_user::ServerRegion {
            region_info: vfio_region_info {
                argsz: std::mem::size_of::<vfio_region_info>() as u32,
                flags: VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE,
                index: 0,
                cap_offset: 0,
                size: 4096,
                offset: 0,
            },
            sparse_areas: Vec::new(),
            mmap_fd: None,
        };
        let server = vfio_user::Server::new(&dir, false, Vec::new(), vec![region]).unwrap();
        let (release, rx) = std::sync::mpsc::channel();
        let serving = std::thread::spawn(move || {
            let mut b = SlowBackend {
                release: rx,
                last: 0,
            };
            let _ = server.run(&mut b);
        });
        let mut c = vfio_user::Client::new(&dir).unwrap();
        let t = std::time::Instant::now();
        c.region_write_posted(0, 0x40, &7u32.to_le_bytes()).unwrap();
        let took = t.elapsed();
        release.send(()).unwrap();
        let mut b = [0u8; 4];
        c.region_read(0, 0x40, &mut b).unwrap();
        drop(c);
        serving.join().unwrap();
        let _ = std::fs::remove_file(&dir);
        assert!(
            took < Duration::from_secs(5),
            "the posted write waited {took:?} for the device"
        );
        assert_eq!(u32::from_le_bytes(b), 7, "the read saw the write before it");
    }

    #[test]
    fn page_allocator_gives_contiguous_scattered_and_reserved_pages() {
        let base = 0x1_0000_0000;
        let mut a = PageAlloc::new(base, 64);
        let x = a.contiguous(3, 1).unwrap();
        assert_eq!(x, base);
        let y = a.contiguous(4, 4).unwrap();
        assert_eq!((y - base) / PAGE % 4, 0, "aligned");
        let s = a.scattered(8, 1).unwrap();
        let mut sorted = s.clone();
        sorted.sort_unstable();
        assert!(
            sorted.windows(2).all(|w| w[1] > w[0] + PAGE),
            "not adjacent: {sorted:x?}"
        );
        assert_ne!(s, sorted, "scrambled order");
        assert_eq!(a.free_pages(), 64 - 3 - 4 - 8);
        assert!(!a.reserve(base, 1), "taken");
        assert!(a.reserve(base + 60 * PAGE, 4));
        assert!(a.contiguous(64, 1).is_none());
        a.release(&s);
        assert_eq!(a.free_pages(), 64 - 3 - 4 - 4);
    }

    #[test]
    fn buffers_split_at_page_boundaries() {
        let b = Buf {
            va: 0x7000_0000_0ffe,
            len: 8194,
            first_off: 0xffe,
            pages: vec![0x5000, 0x1000, 0x9000, 0x3000],
        };
        assert_eq!(b.gpa(0), 0x5ffe);
        assert_eq!(b.gpa(2), 0x1000);
        assert!(!b.is_contiguous());
        assert_eq!(
            b.pieces(0, 8194),
            vec![(0x5ffe, 2), (0x1000, 4096), (0x9000, 4096)]
        );
        assert_eq!(b.pieces(4097, 2), vec![(0x1fff, 1), (0x9000, 1)]);
    }
}
