//! Rings in guest memory (ARCHITECTURE.md §4): SQ, RQ, SRQ, CQ, EQ and the command queue
//! are arrays of fixed-size entries spread over guest pages that a page list
//! (PBL) names, since user buffers are not physically contiguous.
//!
//! Everything here is checked, never trusted (ARCHITECTURE.md §9): a page list with an
//! unaligned or out-of-memory page, a ring larger than its pages, an entry that
//! would straddle a page — each is an error when the ring is created, so that the
//! data path can then turn any index into an address with a mask and a shift.

use transport::memory::{MemError, Memory};

use crate::abi::cmd::{pbl_const, Pbl};

/// Why a ring or a page list was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("page size 2^{0} not supported (4 KiB to 1 GiB)")]
    PageSize(u32),
    #[error("entry size 2^{0} not supported (16 bytes to one page)")]
    EntrySize(u32),
    #[error("2^{0} entries is more than the device allows")]
    TooManyEntries(u32),
    #[error("page list has {have} pages, the ring needs {need}")]
    PageCount { have: usize, need: usize },
    #[error("page {index} at {addr:#x} is not aligned to the page size")]
    Unaligned { index: usize, addr: u64 },
    #[error("page list form {0} unknown (0 contiguous, 1 one level, 2 two levels)")]
    Levels(u8),
    #[error("page list or table at {0:#x} is not aligned")]
    ListUnaligned(u64),
    #[error("reserved field of the page list is not zero")]
    Reserved,
    #[error("page list or page outside guest memory: {0}")]
    Memory(#[from] MemError),
}

/// Page size limits for rings and page lists: from a 4 KiB base page to 1 GiB
/// huge pages.
pub const MIN_PAGE_SHIFT: u32 = 12;
pub const MAX_PAGE_SHIFT: u32 = 30;
/// Entries are at least 16 bytes (an EQE) and at most one page.
pub const MIN_ENTRY_SHIFT: u32 = 4;
/// A ring holds at most 2^MAX_LOG_ENTRIES entries.
pub const MAX_LOG_ENTRIES: u32 = 20;
/// Pages a page list may hold: enough for a 1 GiB region of 4 KiB pages. Bounds
/// what a single command can make the device read and keep.
pub const MAX_PBL_PAGES: usize = 1 << 18;

// The limits are the ABI's (abi::cmd pbl_const).
const _: () = {
    assert!(MIN_PAGE_SHIFT == pbl_const::MIN_PAGE_SHIFT);
    assert!(MAX_PAGE_SHIFT == pbl_const::MAX_PAGE_SHIFT);
    assert!(MAX_PBL_PAGES == pbl_const::MAX_PAGES as usize);
};

/// Reads a page list (`abi::cmd::Pbl`) in any of its three forms (abi::cmd
/// `pbl_const`): the guest-physical address of each of its `npages` data pages,
/// each aligned to `2^page_shift`. Nothing is trusted: the forms, the page size,
/// the count, the reserved field, the alignment of lists, tables and pages and
/// every address read are checked.
/// The page list of a ring of `2^log2` entries of `2^entry_shift` bytes in
/// physically contiguous guest memory at `base` (the command queue and EQ 0,
/// which BAR0 describes by base and size only).
pub fn contiguous_pbl(base: u64, entry_shift: u32, log2: u32) -> Pbl {
    let page_shift = pbl_const::MIN_PAGE_SHIFT;
    let bytes = 1u64 << (entry_shift + log2).min(63);
    Pbl {
        addr: base,
        npages: u32::try_from(bytes.div_ceil(1 << page_shift)).unwrap_or(u32::MAX),
        page_shift: page_shift as u8,
        levels: pbl_const::CONTIGUOUS as u8,
        rsvd: 0,
    }
}

pub fn read_pbl(mem: &dyn Memory, pbl: &Pbl) -> Result<Vec<u64>, RingError> {
    let page_shift = u32::from(pbl.page_shift);
    if !(MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT).contains(&page_shift) {
        return Err(RingError::PageSize(page_shift));
    }
    if pbl.rsvd != 0 {
        return Err(RingError::Reserved);
    }
    let count = usize::try_from(pbl.npages).unwrap_or(usize::MAX);
    if count > MAX_PBL_PAGES {
        return Err(RingError::PageCount {
            have: count,
            need: MAX_PBL_PAGES,
        });
    }
    match u32::from(pbl.levels) {
        pbl_const::CONTIGUOUS => {
            let mask = (1u64 << page_shift) - 1;
            if pbl.addr & mask != 0 {
                return Err(RingError::Unaligned {
                    index: 0,
                    addr: pbl.addr,
                });
            }
            // At most 2^18 pages of 2^30 bytes: the span fits a u64; its end
            // must too.
            let span = (count as u64) << page_shift;
            if count > 0 && pbl.addr.checked_add(span - 1).is_none() {
                return Err(RingError::Memory(MemError {
                    addr: pbl.addr,
                    len: span,
                }));
            }
            Ok((0..count as u64)
                .map(|i| pbl.addr + (i << page_shift))
                .collect())
        }
        pbl_const::ONE_LEVEL => {
            if !pbl.addr.is_multiple_of(8) {
                return Err(RingError::ListUnaligned(pbl.addr));
            }
            read_list(mem, pbl.addr, count, page_shift, 0)
        }
        pbl_const::TWO_LEVEL => {
            if !pbl.addr.is_multiple_of(8) {
                return Err(RingError::ListUnaligned(pbl.addr));
            }
            let per_table = pbl_const::TABLE_ENTRIES as usize;
            let tables = read_u64s(mem, pbl.addr, count.div_ceil(per_table))?;
            let mut pages = Vec::with_capacity(count);
            for (t, &table) in tables.iter().enumerate() {
                if !table.is_multiple_of(u64::from(pbl_const::TABLE_SIZE)) {
                    return Err(RingError::ListUnaligned(table));
                }
                let first = t * per_table;
                let n = (count - first).min(per_table);
                pages.extend(read_list(mem, table, n, page_shift, first)?);
            }
            Ok(pages)
        }
        _ => Err(RingError::Levels(pbl.levels)),
    }
}

/// `count` little-endian u64s at guest-physical `addr`.
fn read_u64s(mem: &dyn Memory, addr: u64, count: usize) -> Result<Vec<u64>, RingError> {
    let mut raw = vec![0u8; count * 8];
    // Read in pieces so a huge list does not need one huge mapping check.
    for (i, chunk) in raw.chunks_mut(4096).enumerate() {
        mem.read(addr.wrapping_add(i as u64 * 4096), chunk)?;
    }
    Ok(raw
        .chunks_exact(8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8-byte chunk")))
        .collect())
}

/// A list of `count` page addresses at `addr`, each aligned to `2^page_shift`;
/// `first` is the index of its first page in the whole page list (for errors).
fn read_list(
    mem: &dyn Memory,
    addr: u64,
    count: usize,
    page_shift: u32,
    first: usize,
) -> Result<Vec<u64>, RingError> {
    let mask = (1u64 << page_shift) - 1;
    let pages = read_u64s(mem, addr, count)?;
    match pages.iter().position(|a| a & mask != 0) {
        Some(i) => Err(RingError::Unaligned {
            index: first + i,
            addr: pages[i],
        }),
        None => Ok(pages),
    }
}

/// A ring of `2^log_entries` entries of `2^entry_shift` bytes over guest pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    pages: Vec<u64>,
    page_shift: u32,
    entry_shift: u32,
    log_entries: u32,
}

impl Ring {
    /// Checks the geometry and that every page lies in guest memory now (a later
    /// DMA_UNMAP is caught at each access).
    pub fn new(
        mem: &dyn Memory,
        pages: Vec<u64>,
        page_shift: u32,
        entry_shift: u32,
        log_entries: u32,
        max_log_entries: u32,
    ) -> Result<Ring, RingError> {
        if !(MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT).contains(&page_shift) {
            return Err(RingError::PageSize(page_shift));
        }
        if !(MIN_ENTRY_SHIFT..=page_shift).contains(&entry_shift) {
            return Err(RingError::EntrySize(entry_shift));
        }
        if log_entries > max_log_entries.min(MAX_LOG_ENTRIES) {
            return Err(RingError::TooManyEntries(log_entries));
        }
        let bytes = 1u64 << (entry_shift + log_entries);
        let need = bytes.div_ceil(1 << page_shift) as usize;
        if pages.len() < need {
            return Err(RingError::PageCount {
                have: pages.len(),
                need,
            });
        }
        let mask = (1u64 << page_shift) - 1;
        let mut probe = [0u8; 1];
        for (index, &p) in pages.iter().enumerate().take(need) {
            if p & mask != 0 {
                return Err(RingError::Unaligned { index, addr: p });
            }
            // First and last byte of the part of the page the ring uses.
            let used = (bytes - ((index as u64) << page_shift)).min(1 << page_shift);
            mem.read(p, &mut probe)?;
            mem.read(p + used - 1, &mut probe)?;
        }
        let mut pages = pages;
        pages.truncate(need);
        Ok(Ring {
            pages,
            page_shift,
            entry_shift,
            log_entries,
        })
    }

    /// The host bytes its page list holds (ARCHITECTURE.md §9: charged to the
    /// memory budget while the ring exists).
    pub fn host_bytes(&self) -> u64 {
        (std::mem::size_of::<Ring>() + std::mem::size_of_val(self.pages.as_slice())) as u64
    }

    /// Entries in the ring.
    pub fn len(&self) -> u32 {
        1 << self.log_entries
    }

    /// Never: a ring has at least one entry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Bytes per entry.
    pub fn entry_size(&self) -> usize {
        1 << self.entry_shift
    }

    pub fn log_entries(&self) -> u32 {
        self.log_entries
    }

    /// The guest-physical address of entry `index` (taken modulo the ring size, as
    /// producer and consumer counters run freely).
    pub fn entry_addr(&self, index: u32) -> u64 {
        let i = u64::from(index & (self.len() - 1));
        let off = i << self.entry_shift;
        let page = (off >> self.page_shift) as usize;
        self.pages[page] + (off & ((1 << self.page_shift) - 1))
    }

    /// Reads entry `index` into `buf` (at most one entry's bytes).
    pub fn read(&self, mem: &dyn Memory, index: u32, buf: &mut [u8]) -> Result<(), MemError> {
        let n = buf.len().min(self.entry_size());
        mem.read(self.entry_addr(index), &mut buf[..n])
    }

    /// Writes `data` (at most one entry's bytes) at entry `index`.
    pub fn write(&self, mem: &mut dyn Memory, index: u32, data: &[u8]) -> Result<(), MemError> {
        let n = data.len().min(self.entry_size());
        mem.write(self.entry_addr(index), &data[..n])
    }

    /// The lap (0 or 1) entry `index` is written in: the owner / phase bit a
    /// producer stores so a consumer can tell a new entry from last lap's.
    pub fn lap(&self, index: u32) -> u8 {
        ((index >> self.log_entries) & 1) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use transport::memory::VecMemory;

    #[test]
    fn ring_maps_indices_over_scattered_pages_and_checks_geometry() {
        let mut mem = VecMemory::new(0x10_0000, 64 << 10);
        // Pages in reverse order: the ring must follow the list, not the addresses.
        let pages: Vec<u64> = (0..4).rev().map(|i| 0x10_0000 + i * 4096).collect();
        let r = Ring::new(&mem, pages.clone(), 12, 6, 8, 20).unwrap(); // 256 x 64 B = 4 pages
        assert_eq!(r.entry_addr(0), 0x10_3000);
        assert_eq!(r.entry_addr(63), 0x10_3000 + 63 * 64);
        assert_eq!(r.entry_addr(64), 0x10_2000);
        assert_eq!(r.entry_addr(256), 0x10_3000); // wraps
        assert_eq!((r.lap(255), r.lap(256), r.lap(512)), (0, 1, 0));
        r.write(&mut mem, 70, &[0xab; 100]).unwrap(); // clipped to one entry
        let mut b = [0u8; 64];
        r.read(&mem, 70, &mut b).unwrap();
        assert_eq!(b, [0xab; 64]);
        assert_eq!(mem.bytes[0x2000 + 6 * 64 + 64], 0, "wrote past the entry");

        assert_eq!(
            Ring::new(&mem, pages[..3].to_vec(), 12, 6, 8, 20),
            Err(RingError::PageCount { have: 3, need: 4 })
        );
        assert_eq!(
            Ring::new(&mem, vec![0x10_0010], 12, 6, 2, 20),
            Err(RingError::Unaligned {
                index: 0,
                addr: 0x10_0010
            })
        );
        assert!(matches!(
            Ring::new(&mem, vec![0x90_0000], 12, 6, 2, 20),
            Err(RingError::Memory(_))
        ));
        assert_eq!(
            Ring::new(&mem, pages.clone(), 12, 13, 2, 20),
            Err(RingError::EntrySize(13))
        );
        assert_eq!(
            Ring::new(&mem, pages.clone(), 12, 6, 9, 8),
            Err(RingError::TooManyEntries(9))
        );
        assert_eq!(
            Ring::new(&mem, pages, 11, 6, 2, 20),
            Err(RingError::PageSize(11))
        );
    }

    fn pbl(addr: u64, npages: u32, page_shift: u8, levels: u32) -> Pbl {
        Pbl {
            addr,
            npages,
            page_shift,
            levels: levels as u8,
            rsvd: 0,
        }
    }

    #[test]
    fn pbl_is_read_and_checked() {
        let one = pbl_const::ONE_LEVEL;
        let mut mem = VecMemory::new(0x10_0000, 64 << 10);
        let list: Vec<u8> = [0x20_0000u64, 0x30_1000, 0x40_0008]
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .collect();
        mem.write(0x10_0100, &list).unwrap();
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0100, 2, 12, one)).unwrap(),
            vec![0x20_0000, 0x30_1000]
        );
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0100, 3, 12, one)),
            Err(RingError::Unaligned {
                index: 2,
                addr: 0x40_0008
            })
        );
        assert!(matches!(
            read_pbl(&mem, &pbl(0x10_0100, 2, 21, one)),
            Err(RingError::Unaligned { index: 1, .. })
        ));
        assert!(matches!(
            read_pbl(&mem, &pbl(0x11_0000 - 8, 2, 12, one)),
            Err(RingError::Memory(_))
        ));
        assert!(matches!(
            read_pbl(&mem, &pbl(0x10_0000, MAX_PBL_PAGES as u32 + 1, 12, one)),
            Err(RingError::PageCount { .. })
        ));
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0104, 1, 12, one)),
            Err(RingError::ListUnaligned(0x10_0104))
        );
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0100, 1, 11, one)),
            Err(RingError::PageSize(11))
        );
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0100, 1, 12, 3)),
            Err(RingError::Levels(3))
        );
        let mut p = pbl(0x10_0100, 1, 12, one);
        p.rsvd = 1;
        assert_eq!(read_pbl(&mem, &p), Err(RingError::Reserved));
    }

    #[test]
    fn contiguous_pbl_is_a_run_of_pages() {
        let mem = VecMemory::new(0x10_0000, 4096);
        let c = pbl_const::CONTIGUOUS;
        assert_eq!(
            read_pbl(&mem, &pbl(0x20_0000, 3, 13, c)).unwrap(),
            vec![0x20_0000, 0x20_2000, 0x20_4000]
        );
        assert!(read_pbl(&mem, &pbl(0x20_0000, 0, 12, c))
            .unwrap()
            .is_empty());
        assert_eq!(
            read_pbl(&mem, &pbl(0x20_1000, 1, 13, c)),
            Err(RingError::Unaligned {
                index: 0,
                addr: 0x20_1000
            })
        );
        assert!(matches!(
            read_pbl(&mem, &pbl(u64::MAX - 0xfff, 2, 12, c)),
            Err(RingError::Memory(_))
        ));
    }

    #[test]
    fn two_level_pbl_follows_its_tables() {
        let two = pbl_const::TWO_LEVEL;
        let mut mem = VecMemory::new(0x10_0000, 64 << 10);
        // Directory at 0x10_0000 naming tables at 0x10_3000 and 0x10_1000: 600
        // pages, 512 in the first table, 88 in the second.
        let dir: Vec<u8> = [0x10_3000u64, 0x10_1000]
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .collect();
        mem.write(0x10_0000, &dir).unwrap();
        let page = |i: u64| 0x1000_0000 + i * 4096;
        for i in 0..512 {
            mem.write(0x10_3000 + i * 8, &page(i).to_le_bytes())
                .unwrap();
        }
        for i in 0..88 {
            mem.write(0x10_1000 + i * 8, &page(512 + i).to_le_bytes())
                .unwrap();
        }
        let pages = read_pbl(&mem, &pbl(0x10_0000, 600, 12, two)).unwrap();
        assert_eq!(pages, (0..600).map(page).collect::<Vec<_>>());
        // A page of the second table out of line: its index in the whole list.
        mem.write(0x10_1000 + 5 * 8, &0x1234_5008u64.to_le_bytes())
            .unwrap();
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0000, 600, 12, two)),
            Err(RingError::Unaligned {
                index: 517,
                addr: 0x1234_5008
            })
        );
        // Tables must be 4 KiB aligned.
        mem.write(0x10_0008, &0x10_1008u64.to_le_bytes()).unwrap();
        assert_eq!(
            read_pbl(&mem, &pbl(0x10_0000, 600, 12, two)),
            Err(RingError::ListUnaligned(0x10_1008))
        );
        // A table outside memory.
        mem.write(0x10_0008, &0x90_0000u64.to_le_bytes()).unwrap();
        assert!(matches!(
            read_pbl(&mem, &pbl(0x10_0000, 600, 12, two)),
            Err(RingError::Memory(_))
        ));
    }
}
