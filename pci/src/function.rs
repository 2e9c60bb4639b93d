//! One PCI function: its builder, its state on the vfio-user thread, the
//! [`Handle`] its embedder's threads share, and the [`Device`] trait the
//! embedder implements for trapped BAR accesses.

use std::ops::Range;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK,
    VFIO_IRQ_SET_ACTION_UNMASK, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};

use crate::bar::{BarMemory, BarSpec, Layout, Part, PAGE_SIZE};
use crate::caps;
use crate::config::{command, overlaps, reg, status, ConfigSpace};
use crate::dma::DmaMemory;
use crate::msix::{self, MsixCounters, Trigger, Vectors};

/// Number of BARs of a type 0 header.
pub const NUM_BARS: usize = 6;
/// Largest MSI-X table (PCI Local Bus 3.0, §6.8.2.3).
pub const MAX_VECTORS: u16 = 2048;
/// Largest region access served: the crate's `max_data_xfer_size`, which
/// QEMU honours. A larger one is a confused client; it gets nothing back
/// rather than a multi-gigabyte walk through the callbacks.
const MAX_ACCESS: usize = 1 << 20;

/// What the embedder implements: the function's trapped BAR registers and
/// its reactions to reset and disconnect. Called on the vfio-user thread,
/// one message at a time; every call must return quickly (QEMU gives each
/// message 5 s, and one late reply leaves the device dead in that QEMU).
pub trait Device {
    /// A read of `data.len()` bytes at `offset` in a trapped part of `bar`.
    /// `data` arrives zeroed; what is left in it is the answer.
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]);
    /// A write of `data` at `offset` in a trapped part of `bar`.
    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]);
    /// DEVICE_RESET (guest reboot, driver FLR): config space, MSI-X and the
    /// mapped BAR memory are already back at power-on state; DMA maps stay.
    fn reset(&mut self) {}
    /// The client is gone: every DMA map and vector is already dropped and
    /// the function is at power-on state. Forget everything of that VM; the
    /// next connection is a new one. May also follow a connection that sent
    /// nothing (the server being stopped).
    fn disconnected(&mut self) {}
}

/// Where MSI-X lives: in one BAR, table and pending bit array.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MsixPlace {
    vectors: u16,
    bar: usize,
    table: Range<u64>,
    pba: Range<u64>,
}

/// Describes a function; [`FunctionBuilder::build`] checks and creates it.
#[derive(Debug, Clone)]
pub struct FunctionBuilder {
    vendor_id: u16,
    device_id: u16,
    subsystem_vendor_id: u16,
    subsystem_id: u16,
    class_code: u32,
    revision: u8,
    bars: Vec<(usize, BarSpec)>,
    msix: Option<(u16, usize, u64, u64)>,
    pcie: bool,
    power_management: bool,
}

/// Why a function description was refused.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("BAR {0}: a 64-bit memory BAR takes an even index below 6, and each index once")]
    BarIndex(usize),
    #[error("BAR {bar}: size 0x{size:x} is not a power of two of at least 4 KiB")]
    BarSize { bar: usize, size: u64 },
    #[error("BAR {bar}: mmap area 0x{start:x}..0x{end:x} is empty, not page aligned, outside the BAR or overlapping another")]
    MmapArea { bar: usize, start: u64, end: u64 },
    #[error("MSI-X: {0}")]
    Msix(&'static str),
    #[error("BAR {bar}: cannot create its shared memory: {source}")]
    Memory {
        bar: usize,
        #[source]
        source: std::io::Error,
    },
}

impl FunctionBuilder {
    /// A function with these IDs, class 0xff0000 (unassigned) and, unless
    /// turned off, a PCI Express and a Power Management capability.
    pub fn new(vendor_id: u16, device_id: u16) -> FunctionBuilder {
        FunctionBuilder {
            vendor_id,
            device_id,
            subsystem_vendor_id: vendor_id,
            subsystem_id: 0,
            class_code: 0xff_0000,
            revision: 0,
            bars: Vec::new(),
            msix: None,
            pcie: true,
            power_management: true,
        }
    }

    /// Subsystem vendor and subsystem IDs (default: the vendor ID and 0).
    pub fn subsystem(mut self, vendor_id: u16, id: u16) -> Self {
        self.subsystem_vendor_id = vendor_id;
        self.subsystem_id = id;
        self
    }

    /// Class code: base class, subclass, programming interface (24 bits,
    /// e.g. 0x0c0600 for an InfiniBand controller).
    pub fn class_code(mut self, class_code: u32) -> Self {
        self.class_code = class_code & 0xff_ffff;
        self
    }

    /// Revision ID.
    pub fn revision(mut self, revision: u8) -> Self {
        self.revision = revision;
        self
    }

    /// A 64-bit memory BAR at `index` (0, 2 or 4; it also takes `index + 1`).
    pub fn bar(mut self, index: usize, spec: BarSpec) -> Self {
        self.bars.push((index, spec));
        self
    }

    /// MSI-X with `vectors` vectors, its table at `table_offset` and its
    /// pending bit array at `pba_offset` in BAR `bar`. Both must lie in
    /// trapped parts of that BAR: this crate answers them.
    pub fn msix(mut self, vectors: u16, bar: usize, table_offset: u64, pba_offset: u64) -> Self {
        self.msix = Some((vectors, bar, table_offset, pba_offset));
        self
    }

    /// Whether to add a PCI Express capability (default: yes; QEMU treats
    /// the device as conventional PCI without one).
    pub fn pcie(mut self, on: bool) -> Self {
        self.pcie = on;
        self
    }

    /// Whether to add a Power Management capability (default: yes).
    pub fn power_management(mut self, on: bool) -> Self {
        self.power_management = on;
        self
    }

    /// Checks the description and creates the function, with a memfd for
    /// every BAR that has mapped areas.
    pub fn build(self) -> Result<Function, BuildError> {
        let mut bar_specs: [Option<BarSpec>; NUM_BARS] = Default::default();
        for (index, spec) in &self.bars {
            let index = *index;
            if index >= NUM_BARS || index % 2 == 1 || bar_specs[index].is_some() {
                return Err(BuildError::BarIndex(index));
            }
            if !spec.size.is_power_of_two() || spec.size < PAGE_SIZE {
                return Err(BuildError::BarSize {
                    bar: index,
                    size: spec.size,
                });
            }
            check_mmap_areas(index, spec)?;
            bar_specs[index] = Some(spec.clone());
        }

        let msix = match self.msix {
            None => None,
            Some((vectors, bar, table_offset, pba_offset)) => Some(place_msix(
                &bar_specs,
                vectors,
                bar,
                table_offset,
                pba_offset,
            )?),
        };

        let mut bars: [Option<Bar>; NUM_BARS] = Default::default();
        for (index, spec) in bar_specs.into_iter().enumerate() {
            let Some(spec) = spec else { continue };
            let mut special: Vec<(Range<u64>, Part)> = spec
                .mmap
                .iter()
                .map(|r| (r.clone(), Part::Mapped))
                .collect();
            if let Some(m) = msix.as_ref().filter(|m| m.bar == index) {
                special.push((m.table.clone(), Part::MsixTable));
                special.push((m.pba.clone(), Part::MsixPba));
            }
            let memory = if spec.mmap.is_empty() {
                None
            } else {
                let name = std::ffi::CString::new(format!("pci-bar{index}"))
                    .expect("a formatted BAR name has no NUL");
                Some(
                    BarMemory::new(&name, spec.size)
                        .map_err(|source| BuildError::Memory { bar: index, source })?,
                )
            };
            bars[index] = Some(Bar {
                layout: Layout::new(spec.size, special),
                spec,
                memory,
            });
        }

        let mut config = ConfigSpace::new();
        let cap_offsets = self.write_config(&mut config, &bars, msix.as_ref());

        let shared = Arc::new(Shared {
            memory: DmaMemory::new(),
            bar_memory: std::array::from_fn(|i| bars[i].as_ref().and_then(|b| b.memory.clone())),
            vectors: msix.as_ref().map(|m| Vectors::new(m.vectors)),
            command: AtomicU16::new(0),
            counters: Counters::default(),
        });
        Ok(Function {
            config,
            caps: cap_offsets,
            table: msix.as_ref().map(|m| msix::Table::new(m.vectors)),
            msix,
            bars,
            err_eventfd: None,
            peer: None,
            warned_unshared: false,
            shared,
        })
    }

    /// Lays out the header and the capability chain.
    fn write_config(
        &self,
        c: &mut ConfigSpace,
        bars: &[Option<Bar>; NUM_BARS],
        msix: Option<&MsixPlace>,
    ) -> CapOffsets {
        c.define::<2>(reg::VENDOR_ID, self.vendor_id.into(), 0, 0);
        c.define::<2>(reg::DEVICE_ID, self.device_id.into(), 0, 0);
        let writable = command::MEMORY_SPACE
            | command::BUS_MASTER
            | command::PARITY_ERROR_RESPONSE
            | command::SERR_ENABLE
            | command::INTX_DISABLE;
        c.define::<2>(reg::COMMAND, 0, writable.into(), 0);
        c.define::<1>(reg::REVISION_ID, self.revision.into(), 0, 0);
        c.define::<3>(reg::CLASS_CODE, self.class_code.into(), 0, 0);
        c.define::<1>(reg::CACHE_LINE_SIZE, 0, 0xff, 0);
        c.define::<1>(reg::INTERRUPT_LINE, 0, 0xff, 0);
        // Interrupt pin 0: no INTx, MSI-X only.
        c.define::<2>(
            reg::SUBSYSTEM_VENDOR_ID,
            self.subsystem_vendor_id.into(),
            0,
            0,
        );
        c.define::<2>(reg::SUBSYSTEM_ID, self.subsystem_id.into(), 0, 0);

        for (index, bar) in bars.iter().enumerate() {
            let Some(bar) = bar else { continue };
            let size_mask = !(bar.spec.size - 1);
            // Memory space (bit 0 = 0), 64-bit type (bits 2:1 = 10b).
            let flags = 0x4 | if bar.spec.prefetchable { 0x8 } else { 0 };
            let low = reg::BAR0 + 4 * index;
            c.define::<4>(low, flags, size_mask & 0xffff_fff0, 0);
            c.define::<4>(low + 4, 0, size_mask >> 32, 0);
        }

        // Capabilities in order; each points to the next.
        let mut chain: Vec<(u8, usize)> = Vec::new();
        if self.pcie {
            chain.push((caps::id::PCI_EXPRESS, caps::PCIE_SIZE));
        }
        if self.power_management {
            chain.push((caps::id::POWER_MANAGEMENT, caps::PM_SIZE));
        }
        if msix.is_some() {
            chain.push((caps::id::MSIX, caps::MSIX_SIZE));
        }
        let mut offsets = Vec::with_capacity(chain.len());
        let mut at = reg::HEADER_END;
        for (_, size) in &chain {
            offsets.push(at);
            at = (at + size).next_multiple_of(8);
        }
        let mut found = CapOffsets::default();
        for (i, (cap_id, _)) in chain.iter().enumerate() {
            let at = offsets[i];
            let next = offsets.get(i + 1).map_or(0, |&n| n as u8);
            match *cap_id {
                caps::id::PCI_EXPRESS => {
                    caps::write_pcie(c, at, next);
                    found.pcie = Some(at);
                }
                caps::id::POWER_MANAGEMENT => {
                    caps::write_pm(c, at, next);
                    found.pm = Some(at);
                }
                _ => {
                    if let Some(m) = msix {
                        caps::write_msix(
                            c,
                            at,
                            next,
                            m.vectors,
                            m.bar as u8,
                            m.table.start as u32,
                            m.pba.start as u32,
                        );
                    }
                    found.msix = Some(at);
                }
            }
        }
        let first = offsets.first().copied().unwrap_or(0);
        c.define::<1>(reg::CAPABILITIES_POINTER, first as u64, 0, 0);
        let cap_list = if first != 0 {
            status::CAPABILITIES_LIST
        } else {
            0
        };
        c.define::<2>(reg::STATUS, cap_list.into(), 0, status::W1C.into());
        // 0x100 stays zero: an extended capability header of ID 0, version
        // 0, next 0 says "no extended capabilities" (PCIe Base 3.0, §7.9.1).
        found
    }
}

fn check_mmap_areas(bar: usize, spec: &BarSpec) -> Result<(), BuildError> {
    let mut areas = spec.mmap.clone();
    areas.sort_by_key(|r| r.start);
    let mut prev_end = 0;
    for r in &areas {
        let bad = r.start >= r.end
            || !r.start.is_multiple_of(PAGE_SIZE)
            || !r.end.is_multiple_of(PAGE_SIZE)
            || r.end > spec.size
            || r.start < prev_end;
        if bad {
            return Err(BuildError::MmapArea {
                bar,
                start: r.start,
                end: r.end,
            });
        }
        prev_end = r.end;
    }
    Ok(())
}

fn place_msix(
    bars: &[Option<BarSpec>; NUM_BARS],
    vectors: u16,
    bar: usize,
    table_offset: u64,
    pba_offset: u64,
) -> Result<MsixPlace, BuildError> {
    if vectors == 0 || vectors > MAX_VECTORS {
        return Err(BuildError::Msix("between 1 and 2048 vectors"));
    }
    let spec = bars
        .get(bar)
        .and_then(Option::as_ref)
        .ok_or(BuildError::Msix("the table BAR is not defined"))?;
    if !table_offset.is_multiple_of(8) || !pba_offset.is_multiple_of(8) {
        return Err(BuildError::Msix(
            "table and PBA offsets must be 8-byte aligned",
        ));
    }
    let table_len = u64::from(vectors) * msix::ENTRY_SIZE;
    let pba_len = u64::from(vectors).div_ceil(64) * 8;
    let table = table_offset..table_offset.saturating_add(table_len);
    let pba = pba_offset..pba_offset.saturating_add(pba_len);
    if table.end > spec.size || pba.end > spec.size || table.end > u64::from(u32::MAX) {
        return Err(BuildError::Msix("table or PBA outside the BAR"));
    }
    let page = |r: &Range<u64>| r.start / PAGE_SIZE * PAGE_SIZE..r.end.next_multiple_of(PAGE_SIZE);
    if overlaps64(&table, &pba) {
        return Err(BuildError::Msix("table and PBA overlap"));
    }
    // QEMU maps whole pages, so a mapped area may not even share a page
    // with the table or the PBA.
    if spec
        .mmap
        .iter()
        .any(|a| overlaps64(a, &page(&table)) || overlaps64(a, &page(&pba)))
    {
        return Err(BuildError::Msix(
            "table or PBA shares a page with a mapped area",
        ));
    }
    Ok(MsixPlace {
        vectors,
        bar,
        table,
        pba,
    })
}

fn overlaps64(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Config space offsets of the capabilities present.
#[derive(Debug, Clone, Copy, Default)]
struct CapOffsets {
    pcie: Option<usize>,
    pm: Option<usize>,
    msix: Option<usize>,
}

/// One BAR: its layout and, if some of it is mapped, the memory behind it.
#[derive(Debug)]
pub(crate) struct Bar {
    pub(crate) spec: BarSpec,
    pub(crate) layout: Layout,
    pub(crate) memory: Option<BarMemory>,
}

/// Counts of things a client did that the function refused or ignored.
#[derive(Debug, Default)]
struct Counters {
    bad_accesses: AtomicU64,
    maps_without_fd: AtomicU64,
    map_errors: AtomicU64,
    maps_not_shared: AtomicU64,
    resets: AtomicU64,
    disconnects: AtomicU64,
}

/// What to do about guest RAM the device cannot share (issue 17).
pub const NOT_SHARED_HINT: &str = "Guest RAM must be shared with the device: \
    give QEMU a memory backend with share=on \
    (-object memory-backend-memfd,id=mem,size=SIZE,share=on -machine memory-backend=mem; \
    libvirt: <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>)";

/// A snapshot of the function's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionCounters {
    /// Region accesses outside a region, or to a region that does not exist.
    pub bad_accesses: u64,
    /// DMA maps that came without an fd (BIOS, option ROMs, BARs): ignored.
    pub maps_without_fd: u64,
    /// DMA maps refused (past the end of the fd, mmap failed, bad range,
    /// not shared), all reasons.
    pub map_errors: u64,
    /// DMA maps refused because the client maps the file private only (QEMU
    /// without `share=on`); also in `map_errors`.
    pub maps_not_shared: u64,
    pub resets: u64,
    pub disconnects: u64,
}

/// State shared between the vfio-user thread and the embedder's threads.
#[derive(Debug)]
struct Shared {
    memory: DmaMemory,
    bar_memory: [Option<BarMemory>; NUM_BARS],
    vectors: Option<Vectors>,
    /// The command register, mirrored on every config write to it.
    command: AtomicU16,
    counters: Counters,
}

/// The embedder's access to the function from any thread: guest memory,
/// mapped BAR memory, MSI-X triggers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Handle {
    shared: Arc<Shared>,
}

impl Handle {
    /// Guest memory as mapped by the current client.
    pub fn memory(&self) -> &DmaMemory {
        &self.shared.memory
    }

    /// The shared memory of `bar`, if it has mapped areas.
    pub fn bar_memory(&self, bar: usize) -> Option<&BarMemory> {
        self.shared.bar_memory.get(bar).and_then(Option::as_ref)
    }

    /// Signals MSI-X `vector`. Never blocks on the vfio-user thread for
    /// more than a lock held across an fd swap; a vector that is unwired,
    /// disabled or masked is counted and reported, not an error.
    pub fn trigger(&self, vector: u16) -> Trigger {
        match &self.shared.vectors {
            Some(v) => v.trigger(vector),
            None => Trigger::NoSuchVector,
        }
    }

    /// Number of MSI-X vectors (0 without MSI-X).
    pub fn msix_vectors(&self) -> u16 {
        self.shared.vectors.as_ref().map_or(0, |v| v.count() as u16)
    }

    /// MSI-X trigger outcomes so far.
    pub fn msix_counters(&self) -> MsixCounters {
        self.shared
            .vectors
            .as_ref()
            .map(Vectors::counters)
            .unwrap_or_default()
    }

    /// The command register as the guest last wrote it.
    pub fn command(&self) -> u16 {
        self.shared.command.load(Ordering::Acquire)
    }

    /// Whether the guest lets the function decode its BARs.
    pub fn memory_enabled(&self) -> bool {
        self.command() & command::MEMORY_SPACE != 0
    }

    /// Whether the guest lets the function master the bus (DMA, MSI-X).
    pub fn bus_master_enabled(&self) -> bool {
        self.command() & command::BUS_MASTER != 0
    }

    /// The function's counters.
    pub fn counters(&self) -> FunctionCounters {
        let c = &self.shared.counters;
        FunctionCounters {
            bad_accesses: c.bad_accesses.load(Ordering::Relaxed),
            maps_without_fd: c.maps_without_fd.load(Ordering::Relaxed),
            map_errors: c.map_errors.load(Ordering::Relaxed),
            maps_not_shared: c.maps_not_shared.load(Ordering::Relaxed),
            resets: c.resets.load(Ordering::Relaxed),
            disconnects: c.disconnects.load(Ordering::Relaxed),
        }
    }
}

/// A built function: config space, BARs, MSI-X. Serve it with
/// [`crate::Server`]; share its [`Handle`] with the data path.
#[derive(Debug)]
pub struct Function {
    config: ConfigSpace,
    caps: CapOffsets,
    msix: Option<MsixPlace>,
    table: Option<msix::Table>,
    pub(crate) bars: [Option<Bar>; NUM_BARS],
    /// The error interrupt's eventfd (index 3). Advertised because QEMU
    /// warns "Could not enable error recovery" without it; never signalled,
    /// as nothing here detects uncorrectable errors.
    err_eventfd: Option<std::fs::File>,
    /// The connected client's pid (SO_PEERCRED), to see how it maps the
    /// files of its DMA maps (`peer`).
    peer: Option<u32>,
    /// The "guest RAM without an fd" error was logged for this client.
    warned_unshared: bool,
    shared: Arc<Shared>,
}

impl Function {
    /// A handle for the embedder's threads.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Number of MSI-X vectors (for the IRQ info of index 2).
    pub(crate) fn msix_vectors(&self) -> u16 {
        self.msix.as_ref().map_or(0, |m| m.vectors)
    }

    fn bad_access(&self, what: &str, region: u32, offset: u64, len: usize) {
        self.shared
            .counters
            .bad_accesses
            .fetch_add(1, Ordering::Relaxed);
        log::debug!("pci: {what} of {len} bytes at 0x{offset:x} in region {region} ignored");
    }

    /// A REGION_READ. Never fails: what nobody answers reads as all ones.
    pub(crate) fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
        device: &mut dyn Device,
    ) {
        if data.len() > MAX_ACCESS {
            self.bad_access("read", region, offset, data.len());
            return;
        }
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.config.read(offset, data);
            return;
        }
        let bar = region as usize;
        let pieces = self
            .bars
            .get(bar)
            .and_then(Option::as_ref)
            .and_then(|b| b.layout.pieces(offset, data.len()));
        let Some(pieces) = pieces else {
            self.bad_access("read", region, offset, data.len());
            data.fill(0xff);
            return;
        };
        for (part, at, range) in pieces {
            let buf = &mut data[range];
            match part {
                Part::Trapped => device.bar_read(bar, at, buf),
                Part::Mapped => self.read_bar_memory(bar, at, buf),
                Part::MsixTable => {
                    if let (Some(t), Some(m)) = (&self.table, &self.msix) {
                        t.read(at - m.table.start, buf);
                    }
                }
                Part::MsixPba => {
                    if let (Some(v), Some(m)) = (&self.shared.vectors, &self.msix) {
                        v.read_pba(at - m.pba.start, buf);
                    }
                }
            }
        }
    }

    fn read_bar_memory(&self, bar: usize, at: u64, buf: &mut [u8]) {
        let memory = self.bars[bar].as_ref().and_then(|b| b.memory.as_ref());
        if memory.is_none_or(|m| m.read(at, buf).is_err()) {
            buf.fill(0xff);
        }
    }

    /// A REGION_WRITE. Never fails: writes nobody takes are dropped.
    pub(crate) fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
        device: &mut dyn Device,
    ) {
        if data.len() > MAX_ACCESS {
            self.bad_access("write", region, offset, data.len());
            return;
        }
        if region == VFIO_PCI_CONFIG_REGION_INDEX {
            self.config_write(offset, data);
            return;
        }
        let bar = region as usize;
        let pieces = self
            .bars
            .get(bar)
            .and_then(Option::as_ref)
            .and_then(|b| b.layout.pieces(offset, data.len()));
        let Some(pieces) = pieces else {
            self.bad_access("write", region, offset, data.len());
            return;
        };
        for (part, at, range) in pieces {
            let buf = &data[range];
            match part {
                Part::Trapped => device.bar_write(bar, at, buf),
                Part::Mapped => {
                    if let Some(m) = self.bars[bar].as_ref().and_then(|b| b.memory.as_ref()) {
                        // In range: the layout lies inside the BAR.
                        let _ = m.write(at, buf);
                    }
                }
                Part::MsixTable => {
                    if let (Some(t), Some(m)) = (&mut self.table, &self.msix) {
                        t.write(at - m.table.start, buf);
                    }
                }
                // The PBA is read-only.
                Part::MsixPba => {}
            }
        }
    }

    /// A config space write, then the side effects of the registers it hit.
    fn config_write(&mut self, offset: u64, data: &[u8]) {
        let pmcsr = self.caps.pm.map(|at| at + caps::pm::PMCSR);
        let old_pmcsr = pmcsr.map(|at| self.config.u16(at));
        let hit = self.config.write(offset, data);

        if overlaps(&hit, &(reg::COMMAND..reg::COMMAND + 2)) {
            let value = self.config.u16(reg::COMMAND);
            self.shared.command.store(value, Ordering::Release);
        }
        if let (Some(at), Some(v)) = (self.caps.msix, &self.shared.vectors) {
            let control = at + caps::msix::CONTROL;
            if overlaps(&hit, &(control..control + 2)) {
                let value = self.config.u16(control);
                v.set_control(
                    value & caps::msix::ENABLE != 0,
                    value & caps::msix::FUNCTION_MASK != 0,
                );
            }
        }
        if let (Some(at), Some(old)) = (pmcsr, old_pmcsr) {
            let new = self.config.u16(at);
            // D1 and D2 are not supported: such a write leaves the state
            // unchanged (PCI PM 1.2, §5.4.1).
            if overlaps(&hit, &(at..at + 2)) && matches!(new & caps::pm::STATE_MASK, 1 | 2) {
                let kept = (new & !caps::pm::STATE_MASK) | (old & caps::pm::STATE_MASK);
                self.config.set_u16(at, kept);
            }
        }
    }

    /// A SET_IRQS. MSI-X (index 2) has the vectors, the error interrupt
    /// (index 3) one eventfd; for the other indices only "disable" (count 0)
    /// is accepted.
    pub(crate) fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> Result<(), &'static str> {
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        if index == VFIO_PCI_ERR_IRQ_INDEX {
            return match (action, data, start, count) {
                (_, _, _, 0) => {
                    self.err_eventfd = None;
                    Ok(())
                }
                (VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, 0, 1) => {
                    self.err_eventfd = fds.into_iter().next();
                    Ok(())
                }
                _ => Err("unsupported SET_IRQS on the error interrupt"),
            };
        }
        let vectors = match &self.shared.vectors {
            Some(v) if index == VFIO_PCI_MSIX_IRQ_INDEX => v,
            _ if count == 0 => return Ok(()),
            _ => return Err("no such interrupt"),
        };
        if u64::from(start) + u64::from(count) > vectors.count() as u64 && count > 0 {
            return Err("vectors out of range");
        }
        match (action, data) {
            (VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD) => {
                if fds.len() > count as usize {
                    return Err("more fds than vectors");
                }
                // QEMU sends a vector it unwires (fd -1) as a count with no
                // fd: vectors past the fds received are unwired.
                let mut list: Vec<_> = fds.into_iter().map(Some).collect();
                list.resize_with(count as usize, || None);
                vectors
                    .wire(start, list)
                    .map_err(|_| "vectors out of range")
            }
            (VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_NONE) if count == 0 => {
                vectors.unwire_all();
                Ok(())
            }
            (VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_NONE) => {
                vectors.fire_range(start, count);
                Ok(())
            }
            // QEMU masks MSI-X vectors by rewiring them, not by SET_IRQS.
            (VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK, _) => Ok(()),
            _ => Err("unsupported SET_IRQS flags"),
        }
    }

    /// A DMA_MAP. Without an fd (BIOS, option ROMs, the device's own BARs)
    /// there is nothing to map, and it is accepted as QEMU expects.
    pub(crate) fn dma_map(
        &mut self,
        iova: u64,
        size: u64,
        fd: Option<std::fs::File>,
        offset: u64,
        writable: bool,
    ) -> Result<(), String> {
        let counters = &self.shared.counters;
        let Some(file) = fd else {
            counters.maps_without_fd.fetch_add(1, Ordering::Relaxed);
            log::debug!("pci: DMA map 0x{iova:x}+0x{size:x} without fd ignored");
            // ROMs and device memory come without an fd, read-only or small;
            // writable memory at guest address 0 is the guest's RAM (x86):
            // not a file the device can map, so the device cannot reach it.
            if writable && iova == 0 && !self.warned_unshared {
                self.warned_unshared = true;
                log::error!(
                    "pci: guest RAM (DMA map 0x0+0x{size:x}) came without a file descriptor: \
                     the device cannot reach it. {NOT_SHARED_HINT}"
                );
            }
            return Ok(());
        };
        if let Some(pid) = self.peer {
            if crate::peer::mapping_of(pid, &file) == crate::peer::Mapping::PrivateOnly {
                counters.map_errors.fetch_add(1, Ordering::Relaxed);
                counters.maps_not_shared.fetch_add(1, Ordering::Relaxed);
                return Err(format!(
                    "DMA map 0x{iova:x}+0x{size:x}: the client maps this guest memory \
                     private, so the device would not see the guest's writes. {NOT_SHARED_HINT}"
                ));
            }
        }
        self.shared
            .memory
            .map(iova, size, file, offset, writable)
            .map_err(|e| {
                counters.map_errors.fetch_add(1, Ordering::Relaxed);
                format!("DMA map 0x{iova:x}+0x{size:x}: {e}")
            })
    }

    /// A DMA_UNMAP; ranges not held are accepted.
    pub(crate) fn dma_unmap(&mut self, iova: u64, size: u64, all: bool) -> Result<(), String> {
        let result = if all {
            self.shared.memory.clear();
            Ok(())
        } else {
            self.shared.memory.unmap(iova, size)
        };
        result.map_err(|e| format!("DMA unmap 0x{iova:x}+0x{size:x}: {e}"))
    }

    /// DEVICE_RESET: back to power-on state; DMA maps stay.
    pub(crate) fn reset(&mut self) {
        self.power_on();
        self.shared.counters.resets.fetch_add(1, Ordering::Relaxed);
    }

    /// The client is gone: power-on state, and its memory dropped.
    /// A client connected; `pid` from its socket's credentials.
    pub(crate) fn connected(&mut self, pid: Option<u32>) {
        self.peer = pid;
        self.warned_unshared = false;
    }

    pub(crate) fn disconnect(&mut self) {
        self.peer = None;
        self.power_on();
        self.err_eventfd = None;
        self.shared.memory.clear();
        let counters = &self.shared.counters;
        counters.disconnects.fetch_add(1, Ordering::Relaxed);
    }

    /// Config space, MSI-X and mapped BAR memory as at power-on.
    fn power_on(&mut self) {
        self.config.reset();
        self.shared.command.store(0, Ordering::Release);
        if let Some(t) = &mut self.table {
            t.reset();
        }
        if let Some(v) = &self.shared.vectors {
            v.reset();
        }
        for m in self.shared.bar_memory.iter().flatten() {
            m.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> FunctionBuilder {
        FunctionBuilder::new(0x1234, 0x11c6)
            .bar(0, BarSpec::trapped(0x10000))
            .bar(2, BarSpec::mapped(0x10000))
    }

    #[test]
    fn odd_or_repeated_bar_index_is_refused() {
        let e = base().bar(1, BarSpec::trapped(0x1000)).build();
        assert!(matches!(e, Err(BuildError::BarIndex(1))));
        let e = base().bar(2, BarSpec::trapped(0x1000)).build();
        assert!(matches!(e, Err(BuildError::BarIndex(2))));
        let e = base().bar(6, BarSpec::trapped(0x1000)).build();
        assert!(matches!(e, Err(BuildError::BarIndex(6))));
    }

    #[test]
    fn bar_size_must_be_a_power_of_two_page_or_more() {
        let e = FunctionBuilder::new(1, 1)
            .bar(0, BarSpec::trapped(0x3000))
            .build();
        assert!(matches!(
            e,
            Err(BuildError::BarSize {
                bar: 0,
                size: 0x3000
            })
        ));
        let e = FunctionBuilder::new(1, 1)
            .bar(0, BarSpec::trapped(0x800))
            .build();
        assert!(matches!(e, Err(BuildError::BarSize { .. })));
    }

    #[test]
    fn mmap_areas_must_be_page_aligned_and_disjoint() {
        let spec = BarSpec::trapped(0x4000).mmap_area(0x800, 0x1000);
        let e = FunctionBuilder::new(1, 1).bar(0, spec).build();
        assert!(matches!(e, Err(BuildError::MmapArea { .. })));
        let spec = BarSpec::trapped(0x4000)
            .mmap_area(0x1000, 0x2000)
            .mmap_area(0x2000, 0x1000);
        let e = FunctionBuilder::new(1, 1).bar(0, spec).build();
        assert!(matches!(e, Err(BuildError::MmapArea { .. })));
    }

    #[test]
    fn msix_must_stay_off_mapped_pages() {
        let e = base().msix(8, 2, 0, 0x800).build();
        assert!(matches!(e, Err(BuildError::Msix(_))));
        let e = base().msix(8, 0, 0x8000, 0x8040).build();
        assert!(matches!(e, Err(BuildError::Msix(_))));
        let e = base().msix(8, 4, 0x8000, 0x9000).build();
        assert!(matches!(e, Err(BuildError::Msix(_))));
        assert!(base().msix(8, 0, 0x8000, 0x9000).build().is_ok());
    }

    #[test]
    fn data_path_types_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Handle>();
        send_sync::<DmaMemory>();
        send_sync::<BarMemory>();
        fn send<T: Send>() {}
        send::<Function>();
        send::<crate::Server>();
    }

    #[test]
    fn unsupported_power_state_write_is_ignored() {
        let mut f = base().build().unwrap();
        let at = f.caps.pm.unwrap() + caps::pm::PMCSR;
        f.config_write(at as u64, &[3, 0]);
        assert_eq!(f.config.u16(at) & 3, 3);
        f.config_write(at as u64, &[1, 0]);
        assert_eq!(f.config.u16(at) & 3, 3);
        f.config_write(at as u64, &[0, 0]);
        assert_eq!(f.config.u16(at) & 3, 0);
    }
}
