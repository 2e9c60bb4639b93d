//! On-demand paging MRs (issue 29): an MR registered with no pages, whose 4 KiB
//! pages the guest installs (MAP) and removes (UNMAP) while it lives. The
//! translation is sparse: only present pages have an entry, never more than the
//! MR spans, and the table holds at most [`MrTable::max_odp_entries`] entries
//! over all ODP MRs, so an implicit MR (iova 0, length 2^64 - 1: the whole
//! address space) cannot grow without bound.
//!
//! An access to a page that is not present is neither a success nor an
//! [`AccessError`]: a copy through the range answers
//! [`CopyError::PageFault`](super::CopyError::PageFault) with an [`OdpFault`]
//! (key, first page, page count, read or write), touching nothing, and the
//! engine waits for the guest (mlx5 does the same: a WQE or RDMA page fault
//! event, `mlx5_ib_mr_wqe_pfault_handler` / `mlx5_ib_mr_rdma_pfault_handler`
//! in Linux drivers/infiniband/hw/mlx5/odp.c, resolved by mapping the pages and
//! resumed). Pages the guest could not fault in ([`MrTable::odp_fail`]) are an
//! access error, [`AccessError::OdpFailed`], until a MAP installs them (mlx5:
//! `mlx5_ib_page_fault_resume(.., resume_with_error)`).

use std::collections::BTreeMap;

use crate::verbs::{Access, Handle, VerbError};

use super::{check_pd_access, mr_weight, AccessError, Mr, MrTable};

/// log2 of the page size of every ODP translation.
pub const ODP_PAGE_SHIFT: u32 = 12;
/// Bytes per ODP page.
pub const ODP_PAGE_SIZE: u64 = 1 << ODP_PAGE_SHIFT;
/// Most pages one fault names (one MAP_ODP can cover them).
pub const MAX_FAULT_PAGES: u64 = 512;
/// Failed ranges one ODP MR remembers; an ODP_FAULT_FAIL beyond is refused.
pub const MAX_FAILED_RANGES: usize = 64;
/// Host bytes charged per present page (the entry and its tree node).
pub const ODP_ENTRY_BYTES: u64 = 48;

/// A page fault: `npages` 4 KiB pages from virtual page `vpn` (va >> 12) of the
/// ODP MR `key` are not present; `write` when the access would write them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OdpFault {
    pub key: u32,
    pub vpn: u64,
    pub npages: u32,
    pub write: bool,
}

impl OdpFault {
    /// Whether pages `[vpn, vpn + npages)` of `key` cover any page of the fault.
    pub fn overlaps(&self, key: u32, vpn: u64, npages: u64) -> bool {
        key == self.key
            && vpn < self.vpn.saturating_add(u64::from(self.npages))
            && self.vpn < vpn.saturating_add(npages)
    }
}

/// The sparse translation of an ODP MR.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct OdpPages {
    /// Virtual page number -> physical address of the page (4 KiB aligned).
    present: BTreeMap<u64, u64>,
    /// Pages the guest could not fault in: first vpn -> end vpn (exclusive),
    /// disjoint.
    failed: BTreeMap<u64, u64>,
}

impl OdpPages {
    /// Present pages.
    pub fn len(&self) -> usize {
        self.present.len()
    }

    pub fn is_empty(&self) -> bool {
        self.present.is_empty()
    }

    /// The physical address of page `vpn`, if present.
    pub fn page(&self, vpn: u64) -> Option<u64> {
        self.present.get(&vpn).copied()
    }

    /// Whether any page of `[first, end)` is marked failed.
    fn failed_in(&self, first: u64, end: u64) -> bool {
        // The last failed range starting before `end` is the only one that
        // can reach into [first, end) (they are disjoint and sorted).
        self.failed
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > first)
    }

    /// The first run of missing pages in `[first, end)`, at most
    /// [`MAX_FAULT_PAGES`] long.
    fn first_missing(&self, first: u64, end: u64) -> Option<(u64, u64)> {
        let mut at = first;
        for (&vpn, _) in self.present.range(first..end) {
            if vpn != at {
                break;
            }
            at += 1;
        }
        if at >= end {
            return None;
        }
        let next = self.present.range(at..end).next().map_or(end, |(&v, _)| v);
        Some((at, (next - at).min(MAX_FAULT_PAGES)))
    }

    /// Removes failed marks in `[first, end)`, splitting ranges that straddle it.
    fn clear_failed(&mut self, first: u64, end: u64) {
        let hit: Vec<(u64, u64)> = self
            .failed
            .range(..end)
            .filter(|(_, &e)| e > first)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in hit {
            self.failed.remove(&s);
            if s < first {
                self.failed.insert(s, first);
            }
            if e > end {
                self.failed.insert(end, e);
            }
        }
    }
}

/// The pages `[first, end)` (vpns) an ODP MR spans.
fn span(mr: &Mr) -> (u64, u64) {
    let first = mr.iova >> ODP_PAGE_SHIFT;
    // Implicit: iova 0, length u64::MAX; else iova + length <= u64::MAX
    // (checked at registration).
    let last = mr.iova.saturating_add(mr.length.saturating_sub(1)) >> ODP_PAGE_SHIFT;
    let end = if mr.length == 0 { first } else { last + 1 };
    (first, end)
}

/// The vpns `[first, end)` a byte range touches (rounded out); `len` > 0 and the
/// range does not wrap.
fn pages_of(va: u64, len: u64) -> (u64, u64) {
    let first = va >> ODP_PAGE_SHIFT;
    let end = (va + (len - 1)) >> ODP_PAGE_SHIFT;
    (first, end + 1)
}

impl Mr {
    /// Whether this is an ODP MR.
    pub fn is_odp(&self) -> bool {
        self.odp.is_some()
    }

    /// Whether this is an implicit ODP MR (the whole address space).
    pub fn is_implicit_odp(&self) -> bool {
        self.odp.is_some() && self.iova == 0 && self.length == u64::MAX
    }

    /// The sparse translation of an ODP MR.
    pub fn odp_pages(&self) -> Option<&OdpPages> {
        self.odp.as_deref()
    }

    /// For an ODP MR: an [`AccessError::OdpFailed`] when a page of
    /// `[va, va + len)` is marked failed. Checked with the rights, before any
    /// copy.
    pub(super) fn odp_check(&self, va: u64, len: u64) -> Result<(), AccessError> {
        match &self.odp {
            Some(o) if len > 0 => {
                let (first, end) = pages_of(va, len);
                if o.failed_in(first, end) {
                    Err(AccessError::OdpFailed)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// For an ODP MR: the fault of the first missing pages of `[va, va + len)`
    /// (inside the MR), if any.
    pub fn odp_fault(&self, va: u64, len: u64, write: bool) -> Option<OdpFault> {
        let o = self.odp.as_ref()?;
        if len == 0 {
            return None;
        }
        let (first, end) = pages_of(va, len);
        let (vpn, n) = o.first_missing(first, end)?;
        Some(OdpFault {
            key: self.key,
            vpn,
            npages: n as u32,
            write,
        })
    }
}

impl MrTable {
    /// Host entries all ODP MRs may hold together (present pages).
    pub fn max_odp_entries(&self) -> u64 {
        self.max_odp_entries
    }

    /// Sets the engine-wide cap of present ODP pages (entries already there
    /// stay; a MAP past the cap is refused).
    pub fn set_max_odp_entries(&mut self, n: u64) {
        self.max_odp_entries = n;
    }

    /// Present ODP pages over all MRs.
    pub fn odp_entries(&self) -> u64 {
        self.odp_entries
    }

    /// Register an ODP MR: no pages, every one not present (issue 29). With
    /// iova 0 and length 2^64 - 1 an implicit MR. Checks as
    /// [`reg_mr`](Self::reg_mr) for the PD and rights; `InvalidAttr` for an
    /// `iova + length` past 2^64 - 1.
    pub fn reg_odp_mr(
        &mut self,
        pd: Handle,
        iova: u64,
        length: u64,
        access: Access,
    ) -> Result<u32, VerbError> {
        check_pd_access(self, pd, access)?;
        let implicit = iova == 0 && length == u64::MAX;
        if !implicit && iova.checked_add(length).is_none() {
            return Err(VerbError::InvalidAttr);
        }
        self.install_mr(pd, mr_weight(0), |key| {
            Mr::pageless(key, pd, access, (iova, length), None, Some(Box::default()))
        })
    }

    /// MAP: installs the physical pages `pages` (4 KiB aligned) from the
    /// 4 KiB-aligned `va` on, replacing what was there and clearing failed marks.
    /// `InvalidHandle` for a key that is not an ODP MR's current key,
    /// `InvalidAttr` for a va not aligned, pages outside the MR, an empty list or a
    /// page not aligned, `InsufficientResources` past the engine-wide cap or the
    /// budget. Returns the vpn of the first page. Nothing changes on failure.
    pub fn odp_map(&mut self, key: u32, va: u64, pages: &[u64]) -> Result<u64, VerbError> {
        let mr = self.odp_mr(key)?;
        let n = pages.len() as u64;
        if !va.is_multiple_of(ODP_PAGE_SIZE) || n == 0 {
            return Err(VerbError::InvalidAttr);
        }
        let page_ok =
            |&p: &u64| p.is_multiple_of(ODP_PAGE_SIZE) && p.checked_add(ODP_PAGE_SIZE).is_some();
        if !pages.iter().all(page_ok) {
            return Err(VerbError::InvalidAttr);
        }
        let first = va >> ODP_PAGE_SHIFT;
        let end = first.checked_add(n).ok_or(VerbError::InvalidAttr)?;
        let (lo, hi) = span(mr);
        if first < lo || end > hi {
            return Err(VerbError::InvalidAttr);
        }
        let o = mr.odp.as_ref().ok_or(VerbError::InvalidHandle)?;
        let new = (first..end).filter(|v| !o.present.contains_key(v)).count() as u64;
        if self.odp_entries.saturating_add(new) > self.max_odp_entries {
            return Err(VerbError::InsufficientResources);
        }
        self.admit(new * ODP_ENTRY_BYTES)?;
        let o = self.odp_pages_mut(key)?;
        for (v, &pa) in (first..end).zip(pages) {
            o.present.insert(v, pa);
        }
        o.clear_failed(first, end);
        self.odp_entries += new;
        self.charge(new * ODP_ENTRY_BYTES, 0);
        Ok(first)
    }

    /// UNMAP: removes the translations of `[va, va + length)` rounded out to
    /// pages (failed marks stay). From the return on, no access through `key`
    /// reaches the removed pages: every copy looks the page up again. Errors
    /// as [`odp_map`](Self::odp_map). Returns (first vpn, pages) of the range.
    pub fn odp_unmap(&mut self, key: u32, va: u64, length: u64) -> Result<(u64, u64), VerbError> {
        let (first, end) = self.odp_range(key, va, length)?;
        let o = self.odp_pages_mut(key)?;
        let gone: Vec<u64> = o.present.range(first..end).map(|(&v, _)| v).collect();
        for v in &gone {
            o.present.remove(v);
        }
        let n = gone.len() as u64;
        self.odp_entries -= n;
        self.charge(0, n * ODP_ENTRY_BYTES);
        Ok((first, end - first))
    }

    /// FAULT_FAIL: the guest could not fault in `[va, va + length)` (rounded out):
    /// its pages that are not present are marked failed, and every access to
    /// them is [`AccessError::OdpFailed`] until a MAP installs them.
    /// `InsufficientResources` when the MR already holds
    /// [`MAX_FAILED_RANGES`] failed ranges; else errors as UNMAP.
    pub fn odp_fail(&mut self, key: u32, va: u64, length: u64) -> Result<(u64, u64), VerbError> {
        let (first, end) = self.odp_range(key, va, length)?;
        let o = self.odp_pages_mut(key)?;
        if o.failed.len() >= MAX_FAILED_RANGES {
            return Err(VerbError::InsufficientResources);
        }
        // Merge with what overlaps or touches it.
        let mut s = first;
        let mut e = end;
        let hit: Vec<(u64, u64)> = o
            .failed
            .range(..=end)
            .filter(|(_, &x)| x >= first)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in hit {
            o.failed.remove(&a);
            s = s.min(a);
            e = e.max(b);
        }
        o.failed.insert(s, e);
        Ok((first, end - first))
    }

    /// The pages an UNMAP or FAULT_FAIL names: the key's ODP MR, the range
    /// non-empty, not wrapping and within the MR's pages.
    fn odp_range(&self, key: u32, va: u64, length: u64) -> Result<(u64, u64), VerbError> {
        let mr = self.odp_mr(key)?;
        if length == 0 || va.checked_add(length - 1).is_none() {
            return Err(VerbError::InvalidAttr);
        }
        let (first, end) = pages_of(va, length);
        let (lo, hi) = span(mr);
        if first < lo || end > hi {
            return Err(VerbError::InvalidAttr);
        }
        Ok((first, end))
    }

    fn odp_mr(&self, key: u32) -> Result<&Mr, VerbError> {
        match self.lookup(key) {
            Ok(mr) if mr.odp.is_some() => Ok(mr),
            _ => Err(VerbError::InvalidHandle),
        }
    }

    fn odp_pages_mut(&mut self, key: u32) -> Result<&mut OdpPages, VerbError> {
        let slot = self
            .slot_mut(super::key_index(key))
            .ok_or(VerbError::InvalidHandle)?;
        slot.mr
            .as_mut()
            .filter(|m| m.key == key)
            .and_then(|m| m.odp.as_deref_mut())
            .ok_or(VerbError::InvalidHandle)
    }
}

/// What deregistering an ODP MR gives back: its present pages.
pub(super) fn odp_entries_of(mr: &Mr) -> u64 {
    mr.odp.as_ref().map_or(0, |o| o.present.len() as u64)
}

#[cfg(test)]
#[path = "odp_tests.rs"]
mod odp_tests;
