//! Doorbell slots, page lists and rings in guest memory: what every queue and
//! MR is built from.

use device::abi::cmd::{pbl_const, Pbl};
use device::abi::uar::uar;

use crate::guest::{self, Layout, PAGE};

use super::Hca;

/// A doorbell slot: page `uar` of BAR2, slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DbSlot {
    pub uar: u32,
    pub slot: u16,
}

impl DbSlot {
    /// Byte offset of the slot's first word in BAR2.
    pub fn offset(self) -> u64 {
        u64::from(self.uar) * u64::from(uar::PAGE_SIZE)
            + u64::from(self.slot) * u64::from(uar::SLOT_SIZE)
    }

    /// Byte offset of the `asleep` word of the slot's page.
    pub fn asleep_offset(self) -> u64 {
        u64::from(self.uar) * u64::from(uar::PAGE_SIZE)
    }
}

/// How a ring or an MR's pages are described to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PblKind {
    /// VHCA_PBL_CONTIGUOUS (pages must be contiguous).
    Contiguous,
    /// VHCA_PBL_ONE_LEVEL.
    OneLevel,
    /// VHCA_PBL_TWO_LEVEL.
    TwoLevel,
}

/// A ring in guest memory.
#[derive(Debug, Clone)]
pub struct Ring {
    pub pages: Vec<u64>,
    pub log2: u32,
    pub shift: u32,
    /// Pages holding the page list itself.
    pub meta: Vec<u64>,
    pub pbl: Pbl,
}

impl Ring {
    pub fn entries(&self) -> u32 {
        1 << self.log2
    }

    pub fn stride(&self) -> usize {
        1 << self.shift
    }

    /// Guest address of entry `i` (free-running).
    pub fn addr(&self, i: u32) -> u64 {
        let off = u64::from(i & (self.entries() - 1)) << self.shift;
        self.pages[(off / PAGE) as usize] + off % PAGE
    }
}

impl Hca {
    /// A free doorbell slot, in `uar` if given (else the first free one).
    pub fn alloc_slot(&mut self, uar_page: Option<u32>) -> DbSlot {
        let pages: Vec<u32> = match uar_page {
            Some(u) => vec![u],
            None => (0..self.caps.num_uars.max(1)).collect(),
        };
        for u in pages {
            for s in uar::FIRST_SLOT..uar::SLOTS {
                let d = DbSlot {
                    uar: u,
                    slot: s as u16,
                };
                if !self.slots.contains(&d) {
                    self.slots.insert(d);
                    return d;
                }
            }
        }
        panic!("no free doorbell slot");
    }

    pub fn free_slot(&mut self, s: DbSlot) {
        self.slots.remove(&s);
    }

    /// Zeroes a slot's two words.
    pub(super) fn clear_slot(&mut self, s: DbSlot) -> Result<(), guest::Error> {
        self.g.bar2_store32(s.offset(), 0)?;
        self.g.bar2_store32(s.offset() + 4, 0)
    }

    /// A page list for `pages` (each 4 KiB): the Pbl and the pages holding it.
    pub fn make_pbl(&mut self, pages: &[u64], kind: PblKind) -> (Pbl, Vec<u64>) {
        let npages = pages.len() as u32;
        let mut pbl = Pbl {
            addr: 0,
            npages,
            page_shift: 12,
            levels: 0,
            rsvd: 0,
        };
        let list = |v: &[u64]| -> Vec<u8> { v.iter().flat_map(|a| a.to_le_bytes()).collect() };
        match kind {
            PblKind::Contiguous => {
                assert!(
                    pages.windows(2).all(|w| w[1] == w[0] + PAGE),
                    "CONTIGUOUS page list over pages that are not"
                );
                pbl.addr = pages.first().copied().unwrap_or(0);
                pbl.levels = pbl_const::CONTIGUOUS as u8;
                (pbl, Vec::new())
            }
            PblKind::OneLevel => {
                let n = (pages.len() * 8).div_ceil(PAGE as usize).max(1);
                let at = self.g.alloc_pages(n, 1);
                self.g.write(at, &list(pages));
                pbl.addr = at;
                pbl.levels = pbl_const::ONE_LEVEL as u8;
                (pbl, (0..n as u64).map(|i| at + i * PAGE).collect())
            }
            PblKind::TwoLevel => {
                let per = pbl_const::TABLE_ENTRIES as usize;
                let tables: Vec<u64> = self.g.alloc_scattered(pages.len().div_ceil(per).max(1));
                for (t, chunk) in tables.iter().zip(pages.chunks(per)) {
                    self.g.write(*t, &list(chunk));
                }
                let n = (tables.len() * 8).div_ceil(PAGE as usize).max(1);
                let dir = self.g.alloc_pages(n, 1);
                self.g.write(dir, &list(&tables));
                pbl.addr = dir;
                pbl.levels = pbl_const::TWO_LEVEL as u8;
                let mut meta = tables;
                meta.extend((0..n as u64).map(|i| dir + i * PAGE));
                (pbl, meta)
            }
        }
    }

    /// A zeroed ring of 2^log2 entries of 2^shift bytes.
    pub fn alloc_ring(&mut self, log2: u32, shift: u32, layout: Layout) -> Ring {
        let bytes = 1u64 << (log2 + shift);
        let n = bytes.div_ceil(PAGE).max(1) as usize;
        let pages = self.g.alloc_layout(n, layout);
        let kind = match layout {
            Layout::Contiguous => PblKind::Contiguous,
            Layout::Scattered => PblKind::OneLevel,
        };
        let (pbl, meta) = self.make_pbl(&pages, kind);
        Ring {
            pages,
            log2,
            shift,
            meta,
            pbl,
        }
    }

    /// Returns a ring's pages.
    pub fn free_ring(&mut self, r: &Ring) {
        self.g.free_pages(&r.pages);
        self.g.free_pages(&r.meta);
    }
}
