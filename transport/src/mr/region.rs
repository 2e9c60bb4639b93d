//! A registered memory region and its translation (MP-03, MP-04): the MR
//! context entry with its page list, the physical segments of a virtual range,
//! and the copies through a range that passed a check ([`MrRange`]) or an
//! atomic's 8-byte word ([`AtomicTarget`]).

use crate::memory::{Dst, MemError, Memory, Src};
use crate::verbs::{Access, Handle};

use super::CopyError;

/// A memory region's translation: where its bytes live (MP-03).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Translation {
    /// Virtual address of the first byte (any alignment).
    pub iova: u64,
    /// Bytes; 0 is allowed (then `pages` is empty).
    pub length: u64,
    /// A power of two in `MIN_PAGE_SIZE..=MAX_PAGE_SIZE`.
    pub page_size: u64,
    /// Physical address of each page spanned by `[iova, iova + length)`, each
    /// aligned to `page_size`; `iova`'s offset in its page is its offset in
    /// `pages[0]`.
    pub pages: Vec<u64>,
}

/// What a reregistration changes (`ibv_rereg_mr` flags: CHANGE_TRANSLATION,
/// CHANGE_PD, CHANGE_ACCESS); `None` keeps the current value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Rereg {
    pub pd: Option<Handle>,
    pub access: Option<Access>,
    pub translation: Option<Translation>,
}

/// A registered memory region: one MR context entry and its page list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mr {
    pub(super) key: u32,
    pub(super) pd: Handle,
    pub(super) access: Access,
    pub(super) iova: u64,
    pub(super) length: u64,
    pub(super) page_shift: u32,
    pub(super) pages: Vec<u64>,
    /// A linear translation instead of a page list: the physical address of
    /// `iova`, each byte of `[iova, iova + length)` at that plus its offset
    /// from `iova`. A DMA MR (`get_dma_mr`) is `Some(0)` with IOVA 0 over the
    /// whole address space (virtual = physical; the caller's memory checks
    /// every access); a device-memory MR is the DM bytes it covers, whose
    /// bounds are the MR's (`MrTable::reg_linear_mr`).
    pub(super) linear: Option<u64>,
    /// Memory windows bound to it (MP-06, MP-07): while any is, the MR cannot
    /// be deregistered or reregistered (IBA 10.6.7; seed 003 "如果一个 MR 还有被
    /// 绑定的 MW,那么这个 MR 不能被取消注册").
    pub(super) windows: u32,
    /// A fast-registration MR (MP-08): its page-list room and whether it is
    /// valid; `None` for an MR registered by REG_MR (the command).
    pub(super) fast: Option<super::FastMr>,
    /// An on-demand paging MR (issue 29, `odp`): its sparse translation;
    /// `pages` is empty.
    pub(super) odp: Option<Box<super::OdpPages>>,
}

impl Mr {
    /// An MR without a page list: a linear one (device memory, `linear` =
    /// its base) or an on-demand-paging one (`odp`, pages given later by
    /// MAP_ODP); translation in 4 KiB pages.
    pub(super) fn pageless(
        key: u32,
        pd: Handle,
        access: Access,
        (iova, length): (u64, u64),
        linear: Option<u64>,
        odp: Option<Box<super::OdpPages>>,
    ) -> Mr {
        Mr {
            key,
            pd,
            access,
            iova,
            length,
            page_shift: super::MIN_PAGE_SIZE.trailing_zeros(),
            pages: Vec::new(),
            linear,
            windows: 0,
            fast: None,
            odp,
        }
    }

    /// Memory windows bound to this MR.
    pub fn windows(&self) -> u32 {
        self.windows
    }

    /// Its L_Key, which is also its R_Key.
    pub fn key(&self) -> u32 {
        self.key
    }

    pub fn pd(&self) -> Handle {
        self.pd
    }

    pub fn access(&self) -> Access {
        self.access
    }

    pub fn iova(&self) -> u64 {
        self.iova
    }

    pub fn length(&self) -> u64 {
        self.length
    }

    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    pub fn pages(&self) -> &[u64] {
        &self.pages
    }

    /// The fast-registration state (MP-08), `None` for other MRs.
    pub fn fast(&self) -> Option<super::FastMr> {
        self.fast
    }

    /// Whether this is a DMA MR (virtual address = physical address).
    pub fn is_identity(&self) -> bool {
        self.linear == Some(0) && self.iova == 0
    }

    /// The physical address of `iova` when the translation is linear (a
    /// DMA or device-memory MR), `None` for a page list.
    pub fn linear(&self) -> Option<u64> {
        self.linear
    }

    /// Whether `[va, va + len)` lies inside the MR, without overflow (MP-04;
    /// IBA 9.3.3.2: the responder checks that the data does not cross the MR's start
    /// and end). A zero-length range may sit at either end.
    pub fn contains(&self, va: u64, len: u64) -> bool {
        match va.checked_sub(self.iova) {
            Some(off) => off <= self.length && len <= self.length - off,
            None => false,
        }
    }

    /// The physical segments of `[va, va + len)`, which must lie inside the MR
    /// (else the iterator ends early). Seed 003: `offset = va - start_va`, page
    /// `offset / page_size`, `pa = page[index] + offset % page_size`, where the
    /// offset counts from the start of the first page (the IOVA's page).
    pub(super) fn segments(&self, va: u64, len: u64) -> Segments<'_> {
        let mask = self.page_size() - 1;
        // rel = va - (iova & !mask); cannot overflow when va >= iova.
        let rel = va
            .checked_sub(self.iova)
            .and_then(|off| off.checked_add(self.iova & mask));
        if let Some(base) = self.linear {
            // `contains` was checked: `va - iova + len <= length`, and
            // `base + length` does not wrap (registration), so neither does
            // the physical range.
            let pa = va
                .checked_sub(self.iova)
                .and_then(|off| base.checked_add(off));
            return Segments {
                pages: &[],
                page_shift: 0,
                rel: pa.unwrap_or(0),
                left: if pa.is_some() { len } else { 0 },
                linear: true,
                odp: None,
            };
        }
        if let Some(o) = self.odp.as_deref() {
            // Sparse: looked up by virtual page number at every step, so a
            // page unmapped since is never reached through a stale address.
            return Segments {
                pages: &[],
                page_shift: super::ODP_PAGE_SHIFT,
                rel: va,
                left: if self.contains(va, len) { len } else { 0 },
                linear: false,
                odp: Some(o),
            };
        }
        Segments {
            linear: false,
            odp: None,
            pages: &self.pages,
            page_shift: self.page_shift,
            rel: rel.unwrap_or(0),
            left: if rel.is_some() { len } else { 0 },
        }
    }
}

/// Iterator over the physical `(address, length)` pieces of a virtual range of an
/// MR, one per page touched (MP-03).
#[derive(Debug, Clone)]
pub struct Segments<'a> {
    pages: &'a [u64],
    page_shift: u32,
    /// Offset of the next byte from the start of the MR's first page.
    rel: u64,
    left: u64,
    /// A linear MR: one segment, at the physical address in `rel`.
    linear: bool,
    /// An ODP MR: `rel` is the virtual address, each page looked up here; a
    /// missing page ends the iteration.
    odp: Option<&'a super::OdpPages>,
}

impl Iterator for Segments<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        if self.left == 0 {
            return None;
        }
        if self.linear {
            let n = std::mem::take(&mut self.left);
            return Some((self.rel, n));
        }
        let page_size = 1u64 << self.page_shift;
        let off = self.rel & (page_size - 1);
        if let Some(o) = self.odp {
            let Some(page) = o.page(self.rel >> self.page_shift) else {
                self.left = 0;
                return None;
            };
            let n = self.left.min(page_size - off);
            self.rel = self.rel.saturating_add(n);
            self.left -= n;
            // Aligned, and page + page_size does not overflow (checked at MAP).
            return Some((page + off, n));
        }
        let idx = usize::try_from(self.rel >> self.page_shift).ok()?;
        let Some(&page) = self.pages.get(idx) else {
            // Outside the page list: only reachable through a range that was not
            // checked; end rather than guess.
            self.left = 0;
            return None;
        };
        let n = self.left.min(page_size - off);
        self.rel = self.rel.saturating_add(n);
        self.left -= n;
        // `page` is page aligned and `page + page_size` does not overflow
        // (checked at registration), so neither does `page + off + n`.
        Some((page + off, n))
    }
}

/// A range of an MR that passed a data-path check: proof that `[va, va + len)` may
/// be touched as asked. It borrows the table, so the MR cannot be deregistered or
/// reregistered while it is held.
#[derive(Debug, Clone, Copy)]
pub struct MrRange<'a> {
    pub(super) mr: &'a Mr,
    pub(super) va: u64,
    pub(super) len: u64,
}

impl<'a> MrRange<'a> {
    pub fn mr(&self) -> &'a Mr {
        self.mr
    }

    pub fn va(&self) -> u64 {
        self.va
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The physical segments of the whole range (MP-03).
    pub fn segments(&self) -> Segments<'a> {
        self.mr.segments(self.va, self.len)
    }

    /// The page fault of an ODP MR's range when a page of its first `n` bytes
    /// is not present (`write`: the access would write).
    pub fn odp_fault(&self, n: u64, write: bool) -> Option<super::OdpFault> {
        self.mr.odp_fault(self.va, n.min(self.len), write)
    }

    /// Reads `buf.len()` bytes from the start of the range, one [`Memory`]
    /// call per physically contiguous segment (the memory copies a segment
    /// in [`crate::memory::COPY_CHUNK`] pieces itself). An
    /// ODP page not present is [`CopyError::PageFault`], before any byte moves.
    pub fn read<'d>(&self, mem: &dyn Memory, buf: impl Into<Dst<'d>>) -> Result<(), CopyError> {
        let buf = buf.into();
        if let Some(f) = self.odp_fault(buf.len() as u64, false) {
            return Err(CopyError::PageFault(f));
        }
        let mut rest = buf;
        for (pa, n) in self.prefix(rest.len())? {
            let at = seg_len(n, rest.len())?;
            let (head, tail) = rest.split_at(at).ok_or(CopyError::Length)?;
            mem.read_dst(pa, head)?;
            rest = tail;
        }
        finished(rest.len())
    }

    /// Writes `data` at the start of the range, one [`Memory`] call per
    /// physically contiguous segment, as [`Self::read`]. An ODP page not
    /// present is [`CopyError::PageFault`], before any byte moves.
    pub fn write<'d>(
        &self,
        mem: &mut dyn Memory,
        data: impl Into<Src<'d>>,
    ) -> Result<(), CopyError> {
        let data = data.into();
        if let Some(f) = self.odp_fault(data.len() as u64, true) {
            return Err(CopyError::PageFault(f));
        }
        let mut rest = data;
        for (pa, n) in self.prefix(data.len())? {
            let at = seg_len(n, rest.len())?;
            let (head, tail) = rest.split_at(at).ok_or(CopyError::Length)?;
            mem.write_src(pa, head)?;
            rest = tail;
        }
        finished(rest.len())
    }

    /// The segments of the first `n` bytes of the range.
    fn prefix(&self, n: usize) -> Result<Segments<'a>, CopyError> {
        let n = u64::try_from(n).map_err(|_| CopyError::Length)?;
        if n > self.len {
            return Err(CopyError::Length);
        }
        Ok(self.mr.segments(self.va, n))
    }
}

/// A segment's length as a slice length no longer than `max`.
pub(super) fn seg_len(n: u64, max: usize) -> Result<usize, CopyError> {
    match usize::try_from(n) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(CopyError::Length),
    }
}

/// Segments that ended before the buffer did (never for a checked range).
pub(super) fn finished(left: usize) -> Result<(), CopyError> {
    if left == 0 {
        Ok(())
    } else {
        Err(CopyError::Length)
    }
}

/// The physical address of an 8-byte word that passed [`MrTable::check_atomic`]:
/// an aligned word never crosses a page (pages are at least 4 KiB), so it is one
/// physical address (OP-07, OP-13).
///
/// [`MrTable::check_atomic`]: super::MrTable::check_atomic
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicTarget {
    pub(super) pa: u64,
    /// An ODP word whose page is not present (issue 29): `pa` means nothing
    /// and every operation refuses; the caller asks [`Self::odp_fault`] first.
    pub(super) fault: Option<super::OdpFault>,
}

impl AtomicTarget {
    /// The page fault of an ODP word whose page is not present: nothing may
    /// be executed until the page is mapped.
    pub fn odp_fault(&self) -> Option<super::OdpFault> {
        self.fault
    }

    /// Refuses an operation on a word whose page is not present.
    fn present(&self) -> Result<u64, MemError> {
        match self.fault {
            None => Ok(self.pa),
            Some(_) => Err(MemError {
                addr: self.pa,
                len: 8,
            }),
        }
    }

    /// The physical address of the word (8-byte aligned).
    pub fn pa(&self) -> u64 {
        self.pa
    }

    /// CmpSwap (IBA 9.4.5): returns the original value.
    pub fn compare_swap(
        &self,
        mem: &mut dyn Memory,
        compare: u64,
        swap: u64,
    ) -> Result<u64, MemError> {
        mem.compare_swap(self.present()?, compare, swap)
    }

    /// FetchAdd (IBA 9.4.5): returns the original value.
    pub fn fetch_add(&self, mem: &mut dyn Memory, add: u64) -> Result<u64, MemError> {
        mem.fetch_add(self.present()?, add)
    }

    /// ATOMIC WRITE (IBA 1.5 MPE): one single-copy-atomic 8-byte store.
    pub fn store(&self, mem: &mut dyn Memory, value: u64) -> Result<(), MemError> {
        mem.atomic_write(self.present()?, value)
    }
}
