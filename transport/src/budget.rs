//! The host memory an engine holds on its guest's behalf, under one limit
//! (ARCHITECTURE.md §9; issue 13 "guest memory exhaustion").
//!
//! Everything a guest can make the engine keep on the host heap is charged to
//! the engine's [`Budget`]: MR page lists (8 bytes a page, up to 2^18 pages an
//! MR), the send and receive WQEs it holds (with their SGE lists or inline
//! data), and for each QP its fixed state with the responder's bounded queues
//! (reserved at creation). Ring and page-list pages in guest memory may all
//! alias one guest page, so only a limit on what the host keeps bounds the
//! host: a guest that asks for more gets the verbs' "insufficient resources"
//! (`VerbError::InsufficientResources`; the device's `NO_RESOURCES`, ENOMEM)
//! and every refusal is counted.
//!
//! The queues that hold WQEs are [`Held`] queues: they charge each element as
//! it enters and credit it as it leaves or when the queue is dropped, so no
//! path that retires, flushes or destroys WQEs can leak a charge. The verbs
//! that add WQEs on a guest's request check the limit first
//! ([`Budget::admit`]); put-backs (a receive WQE returned to its queue) are
//! charged without a check, as they only restore what was there.

use std::collections::VecDeque;
use std::ops::{Deref, Index, IndexMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The default limit of an engine's budget: 256 MiB of host heap.
pub const DEFAULT_LIMIT: u64 = 256 << 20;

/// What an MR with `pages` translation entries costs (its context and page
/// list).
pub fn mr_bytes(pages: u64) -> u64 {
    (std::mem::size_of::<crate::mr::Mr>() as u64).saturating_add(pages.saturating_mul(8))
}

/// What a receive WQE with `sges` SGEs costs while held; send WQEs cost more
/// (their progress), so this is the least a WQE costs.
pub fn recv_wqe_bytes(sges: u64) -> u64 {
    let sge = std::mem::size_of::<crate::verbs::Sge>() as u64;
    (std::mem::size_of::<crate::verbs::RecvWr>() as u64).saturating_add(sges.saturating_mul(sge))
}

/// What a QP reserves at creation: its state and its responder's bounded
/// queues, for an engine granting READ/ATOMIC depth `max_rd_atomic`.
pub fn qp_bytes(max_rd_atomic: u8) -> u64 {
    crate::engine::qp_state_bytes(max_rd_atomic)
}

#[derive(Debug)]
struct Inner {
    limit: u64,
    used: AtomicU64,
    refusals: AtomicU64,
}

/// One engine's account of host bytes held for its guest (cheap to clone:
/// clones share the account).
#[derive(Debug, Clone)]
pub struct Budget(Arc<Inner>);

impl Budget {
    /// An empty account with room for `limit` bytes.
    pub fn new(limit: u64) -> Budget {
        Budget(Arc::new(Inner {
            limit,
            used: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }))
    }

    /// The limit, in bytes.
    pub fn limit(&self) -> u64 {
        self.0.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.0.used.load(Ordering::Relaxed)
    }

    /// Requests refused because they would have gone over the limit.
    pub fn refusals(&self) -> u64 {
        self.0.refusals.load(Ordering::Relaxed)
    }

    /// Whether `bytes` more fit under the limit; a no is counted as a refusal.
    /// The engine is driven by one thread at a time, so nothing is charged
    /// between this check and the charge that follows it.
    pub fn admit(&self, bytes: u64) -> bool {
        let fits = self
            .used()
            .checked_add(bytes)
            .is_some_and(|t| t <= self.0.limit);
        if !fits {
            self.0.refusals.fetch_add(1, Ordering::Relaxed);
        }
        fits
    }

    /// Charges `bytes` if they fit ([`Budget::admit`]); the [`Charge`] gives
    /// them back when dropped.
    pub fn reserve(&self, bytes: u64) -> Option<Charge> {
        self.admit(bytes).then(|| {
            self.charge(bytes);
            Charge {
                budget: self.clone(),
                bytes,
            }
        })
    }

    pub(crate) fn charge(&self, bytes: u64) {
        self.0.used.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn release(&self, bytes: u64) {
        // Never below zero, whatever a caller got wrong.
        let _ = self
            .0
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(bytes))
            });
    }
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new(DEFAULT_LIMIT)
    }
}

/// Bytes reserved in a [`Budget`] for as long as this lives.
#[derive(Debug)]
pub struct Charge {
    budget: Budget,
    bytes: u64,
}

impl Charge {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// What an element held for a guest costs the host: its own size and what it
/// owns on the heap.
pub(crate) trait Weigh {
    fn weight(&self) -> u64;
}

/// A queue of guest-posted elements whose bytes are charged to a budget while
/// they are in it. Reads go through `Deref` to the `VecDeque`; every way in or
/// out goes through the methods here, which keep the charge exact. Its spare
/// capacity is given back as it empties, so a queue that was once full does
/// not keep the host memory after its charge is gone.
#[derive(Debug)]
pub(crate) struct Held<T: Weigh> {
    q: VecDeque<T>,
    budget: Option<Budget>,
}

impl<T: Weigh> Default for Held<T> {
    /// A queue charged to no budget (a placeholder until the engine gives
    /// its owner one).
    fn default() -> Held<T> {
        Held {
            q: VecDeque::new(),
            budget: None,
        }
    }
}

impl Weigh for crate::verbs::RecvWr {
    fn weight(&self) -> u64 {
        recv_wqe_bytes(self.sges.len() as u64)
    }
}

impl<T: Weigh> Held<T> {
    pub fn new(budget: &Budget) -> Held<T> {
        Held {
            q: VecDeque::new(),
            budget: Some(budget.clone()),
        }
    }

    fn charge(&self, t: &T) {
        if let Some(b) = &self.budget {
            b.charge(t.weight());
        }
    }

    fn release(&mut self, t: &T) {
        if let Some(b) = &self.budget {
            b.release(t.weight());
        }
        // Give capacity back once three quarters are unused (amortized O(1)).
        let cap = self.q.capacity();
        if cap > 64 && self.q.len() < cap / 4 {
            self.q.shrink_to(cap / 2);
        }
    }

    pub fn push_back(&mut self, t: T) {
        self.charge(&t);
        self.q.push_back(t);
    }

    pub fn push_front(&mut self, t: T) {
        self.charge(&t);
        self.q.push_front(t);
    }

    pub fn pop_front(&mut self) -> Option<T> {
        let t = self.q.pop_front()?;
        self.release(&t);
        Some(t)
    }

    pub fn clear(&mut self) {
        while self.pop_front().is_some() {}
        self.q = VecDeque::new();
    }

    pub fn iter_mut(&mut self) -> std::collections::vec_deque::IterMut<'_, T> {
        self.q.iter_mut()
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.q.get_mut(i)
    }
}

impl<T: Weigh> Deref for Held<T> {
    type Target = VecDeque<T>;
    fn deref(&self) -> &VecDeque<T> {
        &self.q
    }
}

impl<T: Weigh> Index<usize> for Held<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        &self.q[i]
    }
}

impl<T: Weigh> IndexMut<usize> for Held<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.q[i]
    }
}

impl<T: Weigh> Drop for Held<T> {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.release(self.q.iter().map(Weigh::weight).sum());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct W(u64);
    impl Weigh for W {
        fn weight(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn held_queues_charge_while_they_hold_and_credit_on_every_way_out() {
        let b = Budget::new(100);
        let mut q = Held::new(&b);
        q.push_back(W(10));
        q.push_front(W(20));
        assert_eq!(b.used(), 30);
        assert_eq!(q.pop_front().map(|w| w.0), Some(20));
        assert_eq!(b.used(), 10);
        q.push_back(W(5));
        q.clear();
        assert_eq!(b.used(), 0);
        q.push_back(W(7));
        drop(q);
        assert_eq!(b.used(), 0, "a dropped queue gives its charge back");
    }

    #[test]
    fn admit_refuses_past_the_limit_and_counts_it() {
        let b = Budget::new(100);
        let c = b.reserve(60).expect("fits");
        assert!(b.admit(40));
        assert!(!b.admit(41));
        assert!(b.reserve(u64::MAX).is_none());
        assert_eq!(b.refusals(), 2);
        assert_eq!(c.bytes(), 60);
        drop(c);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_drained_queue_gives_its_capacity_back() {
        let b = Budget::new(u64::MAX);
        let mut q = Held::new(&b);
        for _ in 0..10_000 {
            q.push_back(W(1));
        }
        while q.pop_front().is_some() {}
        assert!(q.capacity() <= 128, "capacity {}", q.capacity());
    }
}
