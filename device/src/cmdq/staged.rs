//! Heavy commands in steps (issue 13, MMIO stall; ARCHITECTURE.md §5).
//!
//! The commands run under the core lock, which every BAR0 access of QEMU and
//! every data-path round waits for. Most of a heavy command's time is guest
//! memory, not device state: reading a page list of up to 2^18 entries and
//! checking its pages (REG_MR, REREG_MR, CREATE_QP/CQ/SRQ/EQ, RESIZE_CQ/SRQ),
//! and writing the blank entries of a new CQ ring of up to 2^20 CQEs
//! (RESIZE_CQ). A [`Request`] is such a piece: it reads or writes the guest's
//! memory only, never the device's tables, so it can run without the lock.
//!
//! With staging on (`CmdQueue::set_staged`) a command whose handler asks for
//! a heavy piece that is not ready stops there: nothing has changed yet (every
//! handler checks before it changes anything), its slot stays the device's
//! (owner set, CI not advanced: the command is "in progress", abi::cmd
//! COMMAND_PROTOCOL lets it complete later), and a [`Ticket`] waits in the
//! queue. The data path takes it (`CmdQueue::take_waiting`), runs [`Ticket::prepare`] without the lock,
//! and hands the [`Prepared`] answers to its next batch, which runs the
//! command again from the start: its cheap checks again, the heavy pieces from
//! the answers. A command that needs two pieces (CREATE_QP's two rings) takes
//! two such steps. The command is read from its slot once, at the first step,
//! so a guest that rewrites the slot meanwhile changes nothing; a device reset
//! or a new queue between the steps makes the answers stale (another queue,
//! another CI), and they are dropped. Each command still changes everything it
//! names or nothing (ARCHITECTURE.md §4), with one visible trace: a RESIZE_CQ
//! refused at its last step because something changed between the steps (the
//! memory budget filled, the CQ overflowed) has blanked the new ring it
//! offered, guest memory it named for that ring and the device never used.
//!
//! Without staging (the command-queue tests, the fuzz target) every piece
//! runs inline, as before.

use transport::memory::Memory;

use crate::abi::cmd::{Cmd, Pbl, Status};
use crate::abi::cqe::{entry_const, owner_bit};
use crate::ring::{read_pbl, Ring};

use super::{fail, ring_fail, Fail, Syndrome};

/// A piece at most this many pages (a page list's entries) runs inline: its
/// reads cost microseconds, less than a step's round trip.
const INLINE_PAGES: u32 = 64;

/// A CQ ring of at most this many entries is blanked inline (256 KiB of CQEs).
pub(super) const INLINE_BLANK: u32 = 4096;

/// A heavy piece of a command: guest memory only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Request {
    /// A ring of `2^log2` entries of `2^entry_shift` bytes over the pages of
    /// `pbl` (`Exec::ring`).
    Ring {
        pbl: Pbl,
        entry_shift: u32,
        log2: u32,
        max_log2: u32,
    },
    /// An MR's page list, every page in guest memory (`Exec::mr_pages`).
    MrPages { pbl: Pbl },
    /// Every entry of the new CQ ring `ring` blank, for the indices from
    /// `from` on (RESIZE_CQ, CQ-04): the owner bit of the lap each index
    /// lands in, inverted (owned by the driver until the device writes it).
    BlankCq { ring: Ring, from: u32 },
}

/// What a [`Request`] found.
#[derive(Debug, Clone)]
pub(super) enum Answer {
    Ring(Result<Ring, Fail>),
    Pages(Result<Vec<u64>, Fail>),
    Blanked(Result<(), Fail>),
}

impl Request {
    /// Whether it runs inline even with staging on.
    fn light(&self) -> bool {
        match self {
            Request::Ring { pbl, .. } | Request::MrPages { pbl } => pbl.npages <= INLINE_PAGES,
            Request::BlankCq { ring, .. } => ring.len() <= INLINE_BLANK,
        }
    }

    /// Does it: the guest's memory only.
    pub(super) fn run(&self, mem: &mut dyn Memory) -> Answer {
        match self {
            Request::Ring {
                pbl,
                entry_shift,
                log2,
                max_log2,
            } => Answer::Ring(ring(&*mem, pbl, *entry_shift, *log2, *max_log2)),
            Request::MrPages { pbl } => Answer::Pages(mr_pages(&*mem, pbl)),
            Request::BlankCq { ring, from } => Answer::Blanked(blank_cq(mem, ring, *from)),
        }
    }
}

/// A ring of `2^log2` entries of `2^entry_shift` bytes over the pages of
/// `pbl`, every page checked against guest memory.
pub(super) fn ring(
    mem: &dyn Memory,
    pbl: &Pbl,
    entry_shift: u32,
    log2: u32,
    max_log2: u32,
) -> Result<Ring, Fail> {
    let pages = read_pbl(mem, pbl).map_err(ring_fail)?;
    Ring::new(
        mem,
        pages,
        u32::from(pbl.page_shift),
        entry_shift,
        log2,
        max_log2,
    )
    .map_err(ring_fail)
}

/// The pages of an MR's page list, each wholly in guest memory.
pub(super) fn mr_pages(mem: &dyn Memory, pbl: &Pbl) -> Result<Vec<u64>, Fail> {
    let pages = read_pbl(mem, pbl).map_err(ring_fail)?;
    // Every page in guest memory, checked as runs of adjacent pages (one
    // map lookup per run, not two per page: a list of 2^18 pages costs
    // what its distinct runs cost).
    let size = 1u64 << pbl.page_shift;
    let mut sorted = pages.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let mut run: Option<(u64, u64)> = None;
    let bad = || fail(Status::BadAddress, Syndrome::PageListAddress);
    for &p in &sorted {
        // Aligned pages of at most 1 GiB: p + size cannot overflow
        // unless p is the last page of the address space.
        let end = p.checked_add(size).ok_or_else(bad)?;
        run = match run {
            Some((start, e)) if e == p => Some((start, end)),
            Some((start, e)) => {
                mem.check(start, e - start).map_err(|_| bad())?;
                Some((p, end))
            }
            None => Some((p, end)),
        };
    }
    if let Some((start, e)) = run {
        mem.check(start, e - start).map_err(|_| bad())?;
    }
    Ok(pages)
}

/// Blanks `count` entries of a new CQ ring from index `from` (CQ-04).
pub(super) fn blank_cq_range(
    mem: &mut dyn Memory,
    ring: &Ring,
    from: u32,
    count: u32,
) -> Result<(), Fail> {
    let owner_mask = entry_const::OWNER_BIT as u8;
    let log2 = ring.log_entries();
    ring.blank(mem, from, count, |k| owner_bit(k, log2) ^ owner_mask)
        .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))
}

fn blank_cq(mem: &mut dyn Memory, ring: &Ring, from: u32) -> Result<(), Fail> {
    blank_cq_range(mem, ring, from, ring.len())
}

/// The heavy pieces of the command being run: answers from a step before, the
/// requests this step could not answer.
#[derive(Debug, Default)]
pub(super) struct Staging {
    /// Whether a heavy piece may stop the command (`CmdQueue::set_staged`).
    pub(super) allow: bool,
    pub(super) answers: Vec<(Request, Answer)>,
    pub(super) wants: Vec<Request>,
}

impl Staging {
    /// The answer to `req`: from a step before, or now if it is light or
    /// staging is off; `None` when the command must stop and wait (the
    /// request is noted for the [`Ticket`]).
    pub(super) fn answer(&mut self, req: Request, mem: &mut dyn Memory) -> Option<Answer> {
        if let Some(at) = self.answers.iter().position(|(r, _)| *r == req) {
            // A page list (up to 2 MiB) is moved out, not copied under the
            // lock: a command reads one list once. Rings are small to clone
            // and may be asked for again at a later step (CREATE_QP's two).
            if matches!(self.answers[at].1, Answer::Pages(_)) {
                return Some(self.answers.swap_remove(at).1);
            }
            return Some(self.answers[at].1.clone());
        }
        if !self.allow || req.light() {
            return Some(req.run(mem));
        }
        self.wants.push(req);
        None
    }

    /// A blank of the CQ ring `ring` a step before, from index `from`.
    pub(super) fn blanked_from(&self, ring: &Ring) -> Option<u32> {
        self.answers.iter().find_map(|(r, a)| match (r, a) {
            (Request::BlankCq { ring: r, from }, Answer::Blanked(Ok(()))) if r == ring => {
                Some(*from)
            }
            _ => None,
        })
    }
}

/// The failure a handler returns when it must wait for a heavy piece: never
/// written to a slot (`execute_staged` keeps the command in progress).
pub(super) const WAIT: Fail = fail(Status::Ok, Syndrome::InProgress);

/// A command in progress at CI, waiting for its heavy pieces: taken by the
/// data path (`CmdQueue::take_waiting`) and prepared without the lock.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub(super) queue: u64,
    pub(super) ci: u32,
    pub(super) cmd: Cmd,
    pub(super) answers: Vec<(Request, Answer)>,
    pub(super) wants: Vec<Request>,
}

/// A [`Ticket`] with its pieces done, for the next batch
/// (`execute_staged`).
#[derive(Debug)]
pub struct Prepared {
    pub(super) queue: u64,
    pub(super) ci: u32,
    pub(super) cmd: Cmd,
    pub(super) answers: Vec<(Request, Answer)>,
}

impl Ticket {
    /// Runs the pieces the command waits for: guest memory only, so the
    /// caller does it without the core lock (ARCHITECTURE.md §5).
    pub fn prepare(self, mem: &mut dyn Memory) -> Prepared {
        let mut answers = self.answers;
        for r in self.wants {
            let a = r.run(mem);
            answers.push((r, a));
        }
        Prepared {
            queue: self.queue,
            ci: self.ci,
            cmd: self.cmd,
            answers,
        }
    }

    /// The command's slot index (free-running).
    pub fn ci(&self) -> u32 {
        self.ci
    }
}
