//! Rings in guest memory (design.md §4): SQ, RQ, SRQ, CQ, EQ and the command queue
//! are arrays of fixed-size entries spread over guest pages that a page list
//! (PBL) names, since user buffers are not physically contiguous.
//!
//! Everything here is checked, never trusted (design.md §9): a page list with an
//! unaligned or out-of-memory page, a ring larger than its pages, an entry that
//! would straddle a page — each is an error when the ring is created, so that the
//! data path can then turn any index into an address with a mask and a shift.

use transport::memory::{MemError, Memory};

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

/// Reads a one-level page list: `count` little-endian u64 page addresses at
/// guest-physical `addr`, each aligned to `2^page_shift`.
pub fn read_pbl(
    mem: &dyn Memory,
    addr: u64,
    count: usize,
    page_shift: u32,
) -> Result<Vec<u64>, RingError> {
    if !(MIN_PAGE_SHIFT..=MAX_PAGE_SHIFT).contains(&page_shift) {
        return Err(RingError::PageSize(page_shift));
    }
    if count > MAX_PBL_PAGES {
        return Err(RingError::PageCount {
            have: count,
            need: MAX_PBL_PAGES,
        });
    }
    let mut raw = vec![0u8; count * 8];
    // Read in pieces so a huge list does not need one huge mapping check.
    for (i, chunk) in raw.chunks_mut(4096).enumerate() {
        mem.read(addr.wrapping_add(i as u64 * 4096), chunk)?;
    }
    let mask = (1u64 << page_shift) - 1;
    raw.chunks_exact(8)
        .enumerate()
        .map(|(index, b)| {
            let a = u64::from_le_bytes(b.try_into().expect("8-byte chunk"));
            if a & mask != 0 {
                Err(RingError::Unaligned { index, addr: a })
            } else {
                Ok(a)
            }
        })
        .collect()
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

    #[test]
    fn pbl_is_read_and_checked() {
        let mut mem = VecMemory::new(0x10_0000, 64 << 10);
        let list: Vec<u8> = [0x20_0000u64, 0x30_1000, 0x40_0008]
            .iter()
            .flat_map(|a| a.to_le_bytes())
            .collect();
        mem.write(0x10_0100, &list).unwrap();
        assert_eq!(
            read_pbl(&mem, 0x10_0100, 2, 12).unwrap(),
            vec![0x20_0000, 0x30_1000]
        );
        assert_eq!(
            read_pbl(&mem, 0x10_0100, 3, 12),
            Err(RingError::Unaligned {
                index: 2,
                addr: 0x40_0008
            })
        );
        assert!(matches!(
            read_pbl(&mem, 0x10_0100, 2, 21),
            Err(RingError::Unaligned { index: 1, .. })
        ));
        assert!(matches!(
            read_pbl(&mem, 0x11_0000 - 8, 2, 12),
            Err(RingError::Memory(_))
        ));
        assert!(matches!(
            read_pbl(&mem, 0x10_0000, MAX_PBL_PAGES + 1, 12),
            Err(RingError::PageCount { .. })
        ));
    }
}
