//! The HCA's device-resident state (ARCHITECTURE.md §4): the port (engine + link) and
//! the tables of EQs, CQs, QPs and SRQs with their guest rings and doorbell slots.
//!
//! The command queue ([`crate::cmdq`]) creates and destroys these objects; the
//! data path ([`crate::datapath`]) polls their doorbells, fetches WQEs into the
//! engine and writes CQEs and EQEs. Both see guest memory only through
//! `transport::memory::Memory`, doorbell pages through [`Doorbells`] and MSI-X
//! through [`Interrupts`], so the whole device runs in tests on a `VecMemory`.
//!
//! Numbers: QPNs, CQNs and SRQNs are the engine's own handles (no mapping table
//! to get wrong); EQNs and PDNs are the device's (PDs through the engine's MR
//! table).

use std::collections::{BTreeMap, HashMap};

use crate::abi;
pub use crate::abi::counters::HcaCounters;
use crate::caps::Caps;
use crate::port::Port;
use crate::ring::Ring;

/// The doorbell pages (BAR2) as the device sees them: 32-bit words at byte
/// offsets, loaded and stored atomically (the guest writes them concurrently).
pub trait Doorbells {
    /// The word at `offset` (4-aligned), or 0 past the end.
    fn load(&self, offset: u64) -> u32;
    /// Stores `value` at `offset` (4-aligned); ignored past the end.
    fn store(&self, offset: u64, value: u32);
    /// Atomically replaces the word at `offset` (4-aligned) with `value` and
    /// returns what it held (0 past the end): how the device takes a summary
    /// word (abi::uar DOORBELL_PROTOCOL).
    fn swap(&self, offset: u64, value: u32) -> u32;
    /// Atomically ORs `bits` into the word at `offset` (4-aligned); ignored past
    /// the end. What a producer does to a summary word (the device never does;
    /// tests and the fuzz harness play the driver with it).
    fn fetch_or(&self, offset: u64, bits: u32) -> u32;
    /// Bytes of doorbell space.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// MSI-X vectors.
pub trait Interrupts {
    /// Raises `vector` (a no-op, counted by the PCI layer, when it is masked or
    /// not wired).
    fn trigger(&self, vector: u16);
}

/// A doorbell slot: page `uar` of BAR2, slot `slot` (8 bytes each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DbSlot {
    pub uar: u32,
    pub slot: u16,
}

impl DbSlot {
    /// Byte offset of the slot's first word in BAR2.
    pub fn offset(self) -> u64 {
        u64::from(self.uar) * u64::from(abi::uar::uar::PAGE_SIZE)
            + u64::from(self.slot) * u64::from(abi::uar::uar::SLOT_SIZE)
    }

    /// The slot's two words.
    pub fn load(self, db: &dyn Doorbells) -> (u32, u32) {
        let o = self.offset();
        (db.load(o), db.load(o + 4))
    }

    /// The byte offset in BAR2 of the summary word holding this slot's bit, and
    /// the bit (abi::uar DOORBELL_PROTOCOL).
    pub fn summary_bit(self) -> (u64, u32) {
        let word = u64::from(self.slot / 32) * 4;
        (
            summary_offset(self.uar) + word,
            1 << (u32::from(self.slot) % 32),
        )
    }

    /// What a driver does to ring a producer doorbell (abi::uar
    /// DOORBELL_PROTOCOL), without the wake half: store `pi` in word `word`
    /// (0 or 4) of the slot, then set the slot's summary bit. For tests and
    /// the fuzz harness, which play the driver.
    pub fn produce(self, db: &dyn Doorbells, word: u64, pi: u32) {
        db.store(self.offset() + word, pi);
        let (at, bit) = self.summary_bit();
        db.fetch_or(at, bit);
    }
}

/// Byte offset in BAR2 of UAR page `uar`'s doorbell summary.
pub fn summary_offset(uar: u32) -> u64 {
    u64::from(uar) * u64::from(abi::uar::uar::PAGE_SIZE) + u64::from(abi::uar::uar::SUMMARY_OFFSET)
}

/// Which object holds each doorbell slot (a slot is one object's), kept by the
/// create and destroy commands, and how many flagged slots (QP, SRQ, CQ) each
/// UAR page holds: the pages whose summaries the data path scans
/// (ARCHITECTURE.md §2), so a round costs O(pages in use), not O(objects).
#[derive(Debug, Default, Clone)]
pub struct SlotTable {
    owners: HashMap<DbSlot, SlotOwner>,
    summary_pages: BTreeMap<u32, u32>,
}

impl SlotTable {
    /// Gives `slot` to `owner`; returns the previous owner (the command queue
    /// checks the slot is free first).
    pub fn insert(&mut self, slot: DbSlot, owner: SlotOwner) -> Option<SlotOwner> {
        let old = self.owners.insert(slot, owner);
        if let Some(o) = old {
            self.uncount(slot.uar, o);
        }
        if owner.is_flagged() {
            *self.summary_pages.entry(slot.uar).or_default() += 1;
        }
        old
    }

    /// Frees `slot`.
    pub fn remove(&mut self, slot: &DbSlot) -> Option<SlotOwner> {
        let old = self.owners.remove(slot);
        if let Some(o) = old {
            self.uncount(slot.uar, o);
        }
        old
    }

    fn uncount(&mut self, uar: u32, owner: SlotOwner) {
        if !owner.is_flagged() {
            return;
        }
        if let Some(n) = self.summary_pages.get_mut(&uar) {
            *n -= 1;
            if *n == 0 {
                self.summary_pages.remove(&uar);
            }
        }
    }

    pub fn get(&self, slot: &DbSlot) -> Option<SlotOwner> {
        self.owners.get(slot).copied()
    }

    pub fn contains_key(&self, slot: &DbSlot) -> bool {
        self.owners.contains_key(slot)
    }

    pub fn len(&self) -> usize {
        self.owners.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    pub fn keys(&self) -> impl Iterator<Item = &DbSlot> {
        self.owners.keys()
    }

    /// The UAR pages holding at least one QP, SRQ or CQ slot, ascending.
    pub fn summary_pages(&self) -> impl Iterator<Item = u32> + '_ {
        self.summary_pages.keys().copied()
    }

    pub fn clear(&mut self) {
        self.owners.clear();
        self.summary_pages.clear();
    }
}

/// An event queue (EQ 0: asynchronous events and command completions, vector 0;
/// others: completion events of the CQs bound to them).
#[derive(Debug, Clone)]
pub struct Eq {
    pub ring: Ring,
    pub vector: u16,
    pub db: DbSlot,
    /// EQEs written (free-running).
    pub pi: u32,
    /// The arm word last acted on: a different word in the slot allows one more
    /// interrupt (abi::uar DOORBELL_PROTOCOL).
    pub last_arm: u32,
    /// CQs bound to this EQ (DESTROY_EQ is BUSY while any is).
    pub users: u32,
    /// EQEs dropped because the ring was full.
    pub overflows: u64,
    /// Where the ring lives, as the driver gave it (for the context window).
    pub pbl: abi::cmd::Pbl,
}

/// A completion queue: its guest ring and everything about it, depth, arming
/// (CQ-02) and overflow (CQ-03) (ARCHITECTURE.md §4 "who owns what"). The
/// engine's CQ of the same number only stages the completions it produced
/// until the data path's round moves them into the ring.
#[derive(Debug, Clone)]
pub struct Cq {
    pub ring: Ring,
    pub eqn: u32,
    pub db: DbSlot,
    /// CQEs written (free-running).
    pub pi: u32,
    /// The arm word last acted on.
    pub last_arm: u32,
    /// Set once the ring overflowed (CQ-03): the CQ is in error, nothing more is
    /// written.
    pub overflowed: bool,
    /// Completion events raised.
    pub events: u64,
    /// Armed for the next completion written to the ring (`Some(false)`) or the
    /// next solicited or error one (`Some(true)`); cleared when the event goes
    /// out (CQ-02).
    pub armed: Option<bool>,
    /// Where the ring lives, as the driver gave it (for the context window).
    pub pbl: abi::cmd::Pbl,
}

/// A QP's guest side: its rings, doorbell slot and how far the device fetched.
#[derive(Debug, Clone)]
pub struct Qp {
    pub qp_type: abi::verbs::QpType,
    pub pdn: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub srqn: Option<u32>,
    pub sq: Ring,
    /// None with an SRQ.
    pub rq: Option<Ring>,
    pub db: DbSlot,
    /// Send WQEs fetched into the engine (free-running, compared with sq_pi).
    pub sq_fetched: u32,
    /// Receive WQEs fetched into the engine.
    pub rq_fetched: u32,
    /// The SQ producer index at which fetching last stopped because the engine
    /// could take no more (QP not yet postable, send queue full): WQEs up to it
    /// wait for the QP to change, not for the data path to poll again.
    pub sq_stalled: Option<u32>,
    /// Likewise for the RQ.
    pub rq_stalled: Option<u32>,
    /// Sizes granted at creation.
    pub cap: transport::verbs::QpCap,
    pub sq_sig_all: bool,
    /// Where the rings live, as the driver gave them (for the context window;
    /// `rq_pbl` is zero with an SRQ).
    pub sq_pbl: abi::cmd::Pbl,
    pub rq_pbl: abi::cmd::Pbl,
}

impl Qp {
    /// Takes the producer indices in the doorbell slot as the point from which
    /// WQEs are new: at creation and on every transition to Reset, so that the
    /// driver's free-running counters need not restart at zero.
    pub fn sync_indices(&mut self, db: &dyn Doorbells) {
        let (sq_pi, rq_pi) = self.db.load(db);
        self.sq_fetched = sq_pi;
        self.rq_fetched = rq_pi;
    }

    /// Whether the guest posted WQEs the device has not fetched, on the SQ or
    /// the RQ. With `new_only`, a queue stalled at its current producer index
    /// does not count: it waits for the QP to change, not for the data path.
    pub fn has_wqes(&self, db: &dyn Doorbells, new_only: bool) -> bool {
        let (sq, rq) = self.db.load(db);
        ahead(sq, self.sq_fetched, self.sq_stalled, new_only)
            || (self.rq.is_some() && ahead(rq, self.rq_fetched, self.rq_stalled, new_only))
    }
}

/// A producer index `pi` past the device's `fetched` (see [`Qp::has_wqes`]).
fn ahead(pi: u32, fetched: u32, stalled: Option<u32>, new_only: bool) -> bool {
    pi != fetched && !(new_only && stalled == Some(pi))
}

impl Srq {
    /// Whether the guest posted WQEs the device has not fetched (see
    /// [`Qp::has_wqes`]).
    pub fn has_wqes(&self, db: &dyn Doorbells, new_only: bool) -> bool {
        ahead(self.db.load(db).0, self.fetched, self.stalled, new_only)
    }
}

/// A shared receive queue's guest side.
#[derive(Debug, Clone)]
pub struct Srq {
    pub pdn: u32,
    pub ring: Ring,
    pub db: DbSlot,
    /// Receive WQEs fetched into the engine.
    pub fetched: u32,
    /// The producer index at which fetching last stopped on a full engine
    /// queue (see `Qp::sq_stalled`).
    pub stalled: Option<u32>,
    /// SGEs a WQE may carry (what the data path decodes against; the engine
    /// checks it again on post).
    pub max_sge: u32,
    /// Where the ring lives, as the driver gave it (for the context window).
    pub pbl: abi::cmd::Pbl,
}

/// The device counters with the memory budget's figures filled in
/// (ARCHITECTURE.md §9).
impl HcaCounters {
    pub fn with_budget(mut self, b: &transport::budget::Budget) -> HcaCounters {
        self.mem_budget_refusals = b.refusals();
        self.mem_held_bytes = b.used();
        self
    }
}

/// The HCA.
pub struct Hca {
    pub port: Port,
    pub eqs: BTreeMap<u32, Eq>,
    pub cqs: BTreeMap<u32, Cq>,
    pub qps: BTreeMap<u32, Qp>,
    pub srqs: BTreeMap<u32, Srq>,
    /// Which object holds each doorbell slot (a slot is one object's).
    pub slots: SlotTable,
    /// Producers whose queues the last round left with WQEs it did not fetch
    /// (the engine could take no more, or the fetch budget ran out): fetched
    /// again every round until they catch up, without a summary bit
    /// (ARCHITECTURE.md §2). Owned by the data path.
    pub retry: Vec<SlotOwner>,
    /// CQs whose summary bit this round took: their arm words are read before
    /// CQEs are written (abi::uar DOORBELL_PROTOCOL, CQ-02). Owned by the data
    /// path.
    pub arms: Vec<u32>,
    /// The queues one round fetches from (`Hca::flagged`): a buffer kept
    /// between rounds so the doorbell path does not allocate. Owned by the
    /// data path.
    pub todo: Vec<SlotOwner>,
    /// One WQE's bytes as the fetch reads them (`MAX_WQE`): kept between
    /// rounds, so a round does not clear 4 KiB of stack for WQEs that may
    /// not be there (a round's cost follows its work). Owned by the data
    /// path.
    pub wqe_buf: Box<[u8]>,
    pub counters: HcaCounters,
    /// The device limits the command queue enforces (and BAR0 shows).
    pub caps: Caps,
    /// The memory-budget charge of each object's ring page lists, released
    /// when the object goes (ARCHITECTURE.md §9).
    pub ring_charges: HashMap<SlotOwner, transport::budget::Charge>,
    /// XRC TGT QPs (SR-02) and their XRC domains: QPs without rings or a
    /// doorbell slot, so not in `qps`.
    pub xrc_tgts: BTreeMap<u32, u32>,
}

/// The object a doorbell slot belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SlotOwner {
    Eq(u32),
    Cq(u32),
    Qp(u32),
    Srq(u32),
}

impl SlotOwner {
    /// A QP or SRQ (producer indices) or a CQ (arm word): its slot's stores
    /// come with a summary bit (abi::uar DOORBELL_PROTOCOL). EQ slots do not:
    /// the few EQs are read where events are raised.
    pub fn is_flagged(self) -> bool {
        matches!(
            self,
            SlotOwner::Qp(_) | SlotOwner::Srq(_) | SlotOwner::Cq(_)
        )
    }
}

impl Hca {
    pub fn new(port: Port) -> Hca {
        Hca {
            eqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            slots: SlotTable::default(),
            retry: Vec::new(),
            arms: Vec::new(),
            todo: Vec::new(),
            wqe_buf: vec![0; crate::datapath::MAX_WQE].into_boxed_slice(),
            counters: HcaCounters::default(),
            caps: Caps::from_limits(port.engine().limits()),
            ring_charges: HashMap::new(),
            xrc_tgts: BTreeMap::new(),
            port,
        }
    }

    /// Drops every object: a reset or a new client (nothing of the previous one
    /// survives, issue: the device, "reconnect").
    pub fn reset(&mut self, engine: transport::engine::Engine, now: std::time::Duration) {
        self.port.set_engine(engine, now);
        self.eqs.clear();
        self.cqs.clear();
        self.qps.clear();
        self.srqs.clear();
        self.slots.clear();
        self.retry.clear();
        self.arms.clear();
        self.ring_charges.clear();
        self.xrc_tgts.clear();
    }
}
