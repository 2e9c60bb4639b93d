//! The command queue (ARCHITECTURE.md §4; abi::cmd COMMAND_PROTOCOL): commands from the
//! driver's ring, executed in order, one at a time, all or nothing.
//!
//! A command is checked completely before anything changes: its input (inline
//! or a mailbox) and where its output goes, every number it names, its doorbell
//! slot, its rings and page lists (read from guest memory and checked against
//! the guest's map). Only then is the engine called, at most once per command
//! (so there is never an earlier engine change to undo), and the device's
//! tables updated. A refusal is a status and a [`Syndrome`] in the slot, never a
//! panic (ARCHITECTURE.md §9).
//!
//! The protocol (fetching a slot, checking its mailboxes, writing the status
//! and clearing `owner`) is here; the handlers follow `abi::cmd::commands()`:
//! one per opcode, each taking its input struct and returning its output
//! struct, in one module per object family, so that each file can be read on
//! its own.

mod cq;
mod mcast;
mod mr;
mod odp;
mod port;
mod qp;
mod rd;
mod srq;
mod staged;
mod xrc;

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use transport::engine::Engine;
use transport::memory::Memory;
use transport::verbs::{self as tv, VerbError};

use crate::abi::bar0::Fatal;
use crate::abi::cmd::{cmd_const, cmd_flags, cmd_owner, pbl_const, Cmd, Opcode, Pbl, Status};
use crate::abi::layout::AbiStruct;
use crate::abi::uar::uar as uar_const;
use crate::abi::verbs::{access, num};
use crate::hca::{DbSlot, Doorbells, Hca};
use crate::ring::{self, read_pbl, Ring, RingError};

use cq::{create_cq, create_eq, destroy_cq, destroy_eq, resize_cq};
use mcast::{attach_mcast, detach_mcast};
use mr::{alloc_mw, alloc_pd, dealloc_mw, dealloc_pd, dereg_mr, reg_mr, rereg_mr};
pub use port::device_counters;
use port::{
    mad_ifc, query_counters, query_device, query_port, set_gid, set_node_desc, set_port_caps,
};
use qp::{create_qp, destroy_qp, modify_qp, query_qp};
use srq::{create_srq, destroy_srq, modify_srq, query_srq, resize_srq};
pub use staged::{Prepared, Ticket};
use staged::{Request, Staging};

/// Commands executed per [`execute_pending`] call at most, so the caller's loop
/// stays responsive (one command may read a page list of 2 MiB).
pub const MAX_COMMANDS_PER_CALL: u32 = 64;

/// Mailboxes and their pages: a mailbox never crosses a 4 KiB page.
const MAILBOX_PAGE_SHIFT: u32 = pbl_const::MIN_PAGE_SHIFT;

/// The command ring the driver configured through BAR0, and how far the device
/// has executed it.
#[derive(Debug, Clone)]
pub struct CmdQueue {
    ring: Ring,
    base: u64,
    log2_size: u32,
    /// Commands completed (free-running): CMDQ_CI.
    ci: u32,
    /// The longest one command took, and its opcode (the figure issue 13's
    /// MMIO-stall test judges: a command runs under the core lock).
    longest: (Duration, u16),
    /// The most CPU time one command (one step of it) used, and its opcode:
    /// the wall time above also counts the time the thread was preempted.
    longest_cpu: (Duration, u16),
    /// This queue among every queue the process made (a reset or a new
    /// queue makes prepared pieces of the old one stale).
    id: u64,
    /// Whether heavy commands run in steps (`staged`).
    staged: bool,
    /// The command in progress at CI, waiting for its heavy pieces.
    waiting: Option<Ticket>,
}

impl CmdQueue {
    /// The ring of `2^log2_size` slots at `base`: physically contiguous, 4 KiB
    /// aligned, in guest memory, `1..=max_log2` (BAR0 CAP_MAX_CMDQ_LOG2);
    /// `CmdqBadConfig` otherwise.
    pub fn new(
        mem: &dyn Memory,
        base: u64,
        log2_size: u32,
        max_log2: u32,
    ) -> Result<CmdQueue, Fatal> {
        if log2_size == 0 || log2_size > max_log2.min(ring::MAX_LOG_ENTRIES) {
            return Err(Fatal::CmdqBadConfig);
        }
        let slot_shift = cmd_const::SLOT_SIZE.trailing_zeros();
        let page_shift = pbl_const::MIN_PAGE_SHIFT;
        let pbl = ring::contiguous_pbl(base, slot_shift, log2_size);
        let pages = read_pbl(mem, &pbl).map_err(|_| Fatal::CmdqBadConfig)?;
        let ring = Ring::new(mem, pages, page_shift, slot_shift, log2_size, max_log2)
            .map_err(|_| Fatal::CmdqBadConfig)?;
        Ok(CmdQueue {
            ring,
            base,
            log2_size,
            ci: 0,
            longest: (Duration::ZERO, 0),
            longest_cpu: (Duration::ZERO, 0),
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            staged: false,
            waiting: None,
        })
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    pub fn log2_size(&self) -> u32 {
        self.log2_size
    }

    /// Slots in the ring.
    pub fn slots(&self) -> u32 {
        self.ring.len()
    }

    /// Commands completed (free-running): what CMDQ_CI reads.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// The longest time one command held the caller (under the core lock),
    /// and its opcode.
    pub fn longest_command(&self) -> (Duration, u16) {
        self.longest
    }

    /// The most CPU time one command (or one step of a staged one) used,
    /// and its opcode.
    pub fn longest_command_cpu(&self) -> (Duration, u16) {
        self.longest_cpu
    }

    fn note_time(&mut self, wall: Duration, cpu: Duration, opcode: u16) {
        if wall > self.longest.0 {
            self.longest = (wall, opcode);
        }
        if cpu > self.longest_cpu.0 {
            self.longest_cpu = (cpu, opcode);
        }
    }

    /// Heavy commands run in steps, their heavy pieces done by the caller
    /// without its lock ([`Ticket::prepare`]; issue 13, ARCHITECTURE.md §5).
    /// Off by default: every command runs whole in [`execute_pending`].
    pub fn set_staged(&mut self, on: bool) {
        self.staged = on;
    }

    /// The command in progress at CI and the pieces it waits for, if any:
    /// for [`Ticket::prepare`], whose result goes to the next
    /// [`execute_staged`].
    pub fn take_waiting(&mut self) -> Option<Ticket> {
        self.waiting.take()
    }
}

/// A command that asked for a COMMAND_DONE event (`VHCA_CMD_F_EVENT`): the
/// caller writes the EQE on EQ 0 (object = token, data = status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdDone {
    pub token: u16,
    pub status: Status,
}

impl From<Status> for u32 {
    /// The status as the COMMAND_DONE EQE's `data` word.
    fn from(s: Status) -> u32 {
        u32::from(s.raw())
    }
}

/// Which check refused a command: the slot's `syndrome` (device-specific, for
/// the driver's log; 0 on success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Syndrome {
    None = 0,
    /// Unknown opcode.
    Opcode = 1,
    /// in_len shorter than the input or longer than a mailbox.
    InMailboxLength = 2,
    /// The input mailbox crosses a 4 KiB page.
    InMailboxPage = 3,
    /// The input mailbox is outside guest memory.
    InMailboxAddress = 4,
    OutMailboxLength = 5,
    OutMailboxPage = 6,
    OutMailboxAddress = 7,
    /// A reserved field is not zero.
    Reserved = 8,
    /// A page list's form, page size or page count.
    PageList = 9,
    /// A page list, table or page outside guest memory.
    PageListAddress = 10,
    /// A page, list or table not aligned.
    PageUnaligned = 11,
    /// A ring's entry count: out of range, or below the WQEs asked for.
    RingSize = 12,
    /// A WQE stride out of range, or too small for the SGEs or inline data.
    Stride = 13,
    /// A doorbell slot outside the UAR pages or a page's slots (EQs: UAR 0).
    SlotRange = 14,
    /// EQ 0's doorbell slot.
    SlotReserved = 15,
    /// A doorbell slot another object holds.
    SlotBusy = 16,
    /// Not port 1.
    Port = 17,
    /// An MSI-X vector out of range.
    Vector = 18,
    NoEq = 19,
    /// An EQ with CQs.
    EqBusy = 20,
    /// EQ 0 belongs to BAR0.
    Eq0 = 21,
    NoCq = 22,
    /// A CQ with QPs.
    CqBusy = 23,
    NoPd = 24,
    /// No such SRQ, or one of another PD.
    NoSrq = 25,
    /// An SRQ with QPs.
    SrqBusy = 26,
    NoQp = 27,
    NoMr = 28,
    QpType = 29,
    /// More than the device's limits (Caps).
    Caps = 30,
    /// Unknown attribute mask bits.
    AttrMask = 31,
    /// An attribute value out of range.
    AttrValue = 32,
    /// Unknown flag bits.
    Flags = 33,
    /// Unknown access bits.
    Access = 34,
    /// A valid request the device does not implement.
    Unsupported = 35,
    CounterSet = 36,
    /// RESIZE_CQ of a CQ that overflowed (CQ-03).
    CqOverflowed = 37,
    /// A consumer index in a doorbell slot the device never wrote up to.
    ConsumerIndex = 38,
    /// A producer index in a doorbell slot more than a ring ahead.
    ProducerIndex = 39,
    /// An existing ring became unreadable or a new one unwritable.
    RingAddress = 40,
    /// SET_GID: an index past the table, a GID type other than RoCEv2, or a
    /// zero GID set as valid.
    Gid = 41,
    /// The device's host-memory budget (`--mem-budget`) cannot hold it.
    Budget = 42,
    /// No XRC domain has this number (SR-02).
    NoXrcd = 43,
    /// No RD domain has this number (AD-11).
    NoRdd = 44,
    /// SET_PORT_CAPS: a bit the host may not change, or one both set and
    /// cleared.
    PortCaps = 45,
    /// SET_NODE_DESC: a length past 64, a NUL within the description or a
    /// byte after it that is not NUL.
    NodeDesc = 46,
    /// The engine refused; the status says why.
    Engine = 0x100,
    /// Not a refusal: the command waits for a heavy piece done without the
    /// core lock (`staged`); never written to a slot.
    InProgress = 0x200,
}

/// A refused command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fail {
    status: Status,
    syndrome: Syndrome,
}

const fn fail(status: Status, syndrome: Syndrome) -> Fail {
    Fail { status, syndrome }
}

impl From<VerbError> for Fail {
    fn from(e: VerbError) -> Fail {
        fail(e.into(), Syndrome::Engine)
    }
}

fn ring_fail(e: RingError) -> Fail {
    match e {
        RingError::Memory(_) => fail(Status::BadAddress, Syndrome::PageListAddress),
        RingError::Unaligned { .. } | RingError::ListUnaligned(_) => {
            fail(Status::BadParam, Syndrome::PageUnaligned)
        }
        RingError::PageSize(_)
        | RingError::Levels(_)
        | RingError::Reserved
        | RingError::PageCount { .. } => fail(Status::BadParam, Syndrome::PageList),
        RingError::EntrySize(_) | RingError::TooManyEntries(_) => {
            fail(Status::BadParam, Syndrome::RingSize)
        }
    }
}

fn reserved(zero: bool) -> Result<(), Fail> {
    if zero {
        Ok(())
    } else {
        Err(fail(Status::BadParam, Syndrome::Reserved))
    }
}

fn check_port(port: u8) -> Result<(), Fail> {
    if u32::from(port) == num::PORT {
        Ok(())
    } else {
        Err(fail(Status::BadParam, Syndrome::Port))
    }
}

const ACCESS_BITS: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND
    | access::FLUSH_GLOBAL;

/// QP access may also enable FLUSH of placement type persistence (as Linux
/// rxe, the responder checks the QP's flush rights and then the MR's); no MR
/// can hold that right, so such a FLUSH still fails (IBA 1.5 MPE).
const QP_ACCESS_BITS: u32 = ACCESS_BITS | access::FLUSH_PERSISTENT;

fn check_access(a: u32) -> Result<tv::Access, Fail> {
    check_access_in(a, ACCESS_BITS)
}

fn check_access_in(a: u32, allowed: u32) -> Result<tv::Access, Fail> {
    if a & !allowed != 0 {
        return Err(fail(Status::BadParam, Syndrome::Access));
    }
    Ok(tv::Access(a))
}

/// log2 of the largest power of two not above `v` (0 for 0 and 1).
fn log2_floor(v: u32) -> u32 {
    v.checked_ilog2().unwrap_or(0)
}

fn time(now: Duration) -> tv::Time {
    tv::Time(u64::try_from(now.as_nanos()).unwrap_or(u64::MAX))
}

// Byte offsets in a command slot.
const STATUS_AT: u64 = core::mem::offset_of!(Cmd, status) as u64;
const OWNER_AT: u64 = core::mem::offset_of!(Cmd, owner) as u64;
const SYNDROME_AT: u64 = core::mem::offset_of!(Cmd, syndrome) as u64;
const DATA_AT: u64 = core::mem::offset_of!(Cmd, data) as u64;
const INLINE: usize = cmd_const::INLINE_SIZE as usize;

/// How much one [`execute_pending`] call may do: at most `commands`
/// commands, and no new command once `time` has passed since the call began
/// (at least one runs). The caller holds the device's lock meanwhile, which
/// QEMU's BAR0 accesses and the data path wait for (ARCHITECTURE.md §5), so a
/// batch of heavy commands (REG_MR of 2^18 pages, RESIZE_CQ to the largest
/// ring) must not run in one go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub commands: u32,
    pub time: Option<Duration>,
}

impl Default for Budget {
    /// [`MAX_COMMANDS_PER_CALL`] commands, no time bound.
    fn default() -> Budget {
        Budget {
            commands: MAX_COMMANDS_PER_CALL,
            time: None,
        }
    }
}

/// Executes the commands from the queue's CI up to `pi` (the driver's
/// CMDQ_PI), in order, within `budget` (the rest waits for the next call):
/// for each, the outputs, then `syndrome` and `status`, then `owner` cleared
/// last with release ordering, then CI advanced (abi::cmd COMMAND_PROTOCOL).
/// Returns the commands that asked for a COMMAND_DONE event, for the caller to
/// post on EQ 0.
///
/// Fatal: a slot the device should execute but does not own, or a `pi` more
/// than a ring ahead of CI (`CmdqNotOwned`: the device cannot tell where
/// commands are); a ring the guest unmapped (`CmdqBadConfig`). CI then stays at
/// the slot concerned.
pub fn execute_pending(
    hca: &mut Hca,
    q: &mut CmdQueue,
    pi: u32,
    mem: &mut dyn Memory,
    db: &dyn Doorbells,
    now: Duration,
    budget: Budget,
) -> Result<Vec<CmdDone>, Fatal> {
    execute_staged(hca, q, pi, mem, db, now, budget, None)
}

/// [`execute_pending`] with the heavy pieces `pre` of the command in progress
/// at CI (from [`Ticket::prepare`]; stale ones are dropped). With staging on,
/// a command that waits for a heavy piece ends the batch: it stays in
/// progress, and [`CmdQueue::take_waiting`] gives its [`Ticket`].
#[allow(clippy::too_many_arguments)]
pub fn execute_staged(
    hca: &mut Hca,
    q: &mut CmdQueue,
    pi: u32,
    mem: &mut dyn Memory,
    db: &dyn Doorbells,
    now: Duration,
    budget: Budget,
    pre: Option<Prepared>,
) -> Result<Vec<CmdDone>, Fatal> {
    if pi.wrapping_sub(q.ci) > q.slots() {
        return Err(Fatal::CmdqNotOwned);
    }
    // What waits is asked again below, with what is prepared.
    q.waiting = None;
    let mut pre = pre.filter(|p| p.queue == q.id && p.ci == q.ci);
    let started = std::time::Instant::now();
    let mut done = Vec::new();
    for k in 0..budget.commands.max(1) {
        if q.ci == pi {
            break;
        }
        if k > 0 && budget.time.is_some_and(|t| started.elapsed() >= t) {
            break;
        }
        let addr = q.ring.entry_addr(q.ci);
        let mut owner = [0u8];
        mem.read(addr + OWNER_AT, &mut owner)
            .map_err(|_| Fatal::CmdqBadConfig)?;
        if owner[0] & cmd_owner::DEVICE == 0 {
            return Err(Fatal::CmdqNotOwned);
        }
        // The driver set owner last, after a write barrier: read the rest after.
        fence(Ordering::Acquire);
        // A command in progress was read at its first step: read once.
        let (cmd, answers) = match pre.take() {
            Some(p) => (p.cmd, p.answers),
            None => {
                let mut raw = [0u8; Cmd::SIZE];
                mem.read(addr, &mut raw).map_err(|_| Fatal::CmdqBadConfig)?;
                (Cmd::from_bytes(&raw), Vec::new())
            }
        };
        let t = std::time::Instant::now();
        let cpu = thread_cpu();
        let mut x = Exec {
            hca: &mut *hca,
            mem: &mut *mem,
            db,
            cmd,
            now,
            staging: Staging {
                allow: q.staged,
                answers,
                wants: Vec::new(),
            },
        };
        // A panic in a handler is a bug, but one a guest's command reached: it
        // must not unwind into the vfio-user crate (the connection would go)
        // nor leave the queue stuck. The command stays in its slot, and the
        // device goes FATAL (INTERNAL; the caller tells the driver with a
        // DEVICE_FATAL event, AE-01) until RESET rebuilds every table
        // (issue 13, ARCHITECTURE.md §9).
        let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            test_panic(cmd.opcode);
            dispatch(&mut x)
        })) {
            Ok(r) => r,
            Err(e) => {
                let what = e
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| e.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                log::error!(
                    "cmdq: internal error in command {} (opcode {:#06x}): {what}; FATAL until RESET",
                    q.ci,
                    cmd.opcode
                );
                return Err(Fatal::Internal);
            }
        };
        if result.as_ref().is_err_and(|f| *f == staged::WAIT) {
            q.waiting = Some(Ticket {
                queue: q.id,
                ci: q.ci,
                cmd,
                answers: x.staging.answers,
                wants: x.staging.wants,
            });
            q.note_time(t.elapsed(), thread_cpu().saturating_sub(cpu), cmd.opcode);
            break;
        }
        if let Err(f) = &result {
            log::debug!(
                "cmdq: command {} (opcode {:#06x}, token {}) refused: {:?} ({:?})",
                q.ci,
                cmd.opcode,
                cmd.token,
                f.status,
                f.syndrome
            );
        }
        let status = complete(mem, addr, result)?;
        q.note_time(t.elapsed(), thread_cpu().saturating_sub(cpu), cmd.opcode);
        q.ci = q.ci.wrapping_add(1);
        if cmd.flags & cmd_flags::EVENT != 0 {
            done.push(CmdDone {
                token: cmd.token,
                status,
            });
        }
    }
    Ok(done)
}

/// Test-only (issue 13, ARCHITECTURE.md §9): with `VHCA_TEST_PANIC=command:OP`
/// in the environment (OP in hex, `0x0050`, or decimal), the first command of
/// opcode OP panics in its handler, once, so that tests can show how such a
/// panic is contained. Unset, it costs a load and a compare.
fn test_panic(opcode: u16) {
    use std::sync::atomic::AtomicBool;
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<u16>> = OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);
    let armed = ARMED.get_or_init(|| {
        let v = std::env::var("VHCA_TEST_PANIC").ok()?;
        let op = v.strip_prefix("command:")?;
        match op.strip_prefix("0x") {
            Some(hex) => u16::from_str_radix(hex, 16).ok(),
            None => op.parse().ok(),
        }
    });
    if *armed == Some(opcode) && !FIRED.swap(true, Ordering::AcqRel) {
        panic!("VHCA_TEST_PANIC: a test panic in command {opcode:#06x}");
    }
}

/// The CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
#[allow(unsafe_code)]
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer to a
    // local; the clock id is a constant every Linux has.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Writes a command's outcome into its slot (and output mailbox), owner last.
fn complete(
    mem: &mut dyn Memory,
    addr: u64,
    result: Result<Option<Output>, Fail>,
) -> Result<Status, Fatal> {
    let bad = |_| Fatal::CmdqBadConfig;
    let f = match result {
        Ok(None) => fail(Status::Ok, Syndrome::None),
        Ok(Some(Output::Inline(b))) => {
            mem.write(addr + DATA_AT, &b).map_err(bad)?;
            fail(Status::Ok, Syndrome::None)
        }
        // Checked before the command ran; the guest could only have unmapped
        // it since on another thread, which the device does not have.
        Ok(Some(Output::Mailbox(at, b))) => match mem.write(at, &b) {
            Ok(()) => fail(Status::Ok, Syndrome::None),
            Err(_) => fail(Status::BadAddress, Syndrome::OutMailboxAddress),
        },
        Err(f) => f,
    };
    mem.write(addr + SYNDROME_AT, &(f.syndrome as u32).to_le_bytes())
        .map_err(bad)?;
    mem.write(addr + STATUS_AT, &[f.status.raw()])
        .map_err(bad)?;
    // Everything above reads as written once the driver sees owner clear.
    fence(Ordering::Release);
    mem.write(addr + OWNER_AT, &[0]).map_err(bad)?;
    Ok(f.status)
}

/// One command being executed.
struct Exec<'a> {
    hca: &'a mut Hca,
    mem: &'a mut dyn Memory,
    db: &'a dyn Doorbells,
    cmd: Cmd,
    now: Duration,
    /// Its heavy pieces (`staged`).
    staging: Staging,
}

/// A command's output, ready to write.
enum Output {
    /// Over the slot's `data`, zero-padded.
    Inline([u8; INLINE]),
    /// Into the output mailbox at this address.
    Mailbox(u64, Vec<u8>),
}

/// Where an output goes, checked before the command runs.
#[derive(Clone, Copy)]
enum Place {
    Inline,
    Mailbox(u64),
}

#[derive(Clone, Copy)]
enum Dir {
    In,
    Out,
}

/// Checks a mailbox for a `need`-byte struct: `len` at least `need` and at most
/// VHCA_CMD_MAILBOX_MAX, and `[addr, addr + len)` within one 4 KiB page.
fn check_mailbox(addr: u64, len: u16, need: usize, dir: Dir) -> Result<(), Fail> {
    let (length, page, address) = match dir {
        Dir::In => (
            Syndrome::InMailboxLength,
            Syndrome::InMailboxPage,
            Syndrome::InMailboxAddress,
        ),
        Dir::Out => (
            Syndrome::OutMailboxLength,
            Syndrome::OutMailboxPage,
            Syndrome::OutMailboxAddress,
        ),
    };
    let len = usize::from(len);
    if len < need || len == 0 || len > cmd_const::MAILBOX_MAX as usize {
        return Err(fail(Status::BadParam, length));
    }
    let last = addr
        .checked_add(len as u64 - 1)
        .ok_or(fail(Status::BadAddress, address))?;
    if addr >> MAILBOX_PAGE_SHIFT != last >> MAILBOX_PAGE_SHIFT {
        return Err(fail(Status::BadParam, page));
    }
    Ok(())
}

impl Exec<'_> {
    fn engine(&mut self) -> &mut Engine {
        self.hca.port.engine_mut()
    }

    /// The command's input struct: inline, or exactly its size from the input
    /// mailbox.
    fn input<I: AbiStruct>(&self) -> Result<I, Fail> {
        if I::SIZE <= INLINE {
            return Ok(I::get(&self.cmd.data));
        }
        let (addr, len) = (self.cmd.in_mailbox, self.cmd.in_len);
        check_mailbox(addr, len, I::SIZE, Dir::In)?;
        let mut b = vec![0u8; I::SIZE];
        self.mem
            .read(addr, &mut b)
            .map_err(|_| fail(Status::BadAddress, Syndrome::InMailboxAddress))?;
        Ok(I::get(&b))
    }

    /// Where the output struct goes; a mailbox is checked against guest memory
    /// now, so that a command never succeeds without its output.
    fn output_place<O: AbiStruct>(&self) -> Result<Place, Fail> {
        if O::SIZE <= INLINE {
            return Ok(Place::Inline);
        }
        let (addr, len) = (self.cmd.out_mailbox, self.cmd.out_len);
        check_mailbox(addr, len, O::SIZE, Dir::Out)?;
        let mut probe = vec![0u8; O::SIZE];
        self.mem
            .read(addr, &mut probe)
            .map_err(|_| fail(Status::BadAddress, Syndrome::OutMailboxAddress))?;
        Ok(Place::Mailbox(addr))
    }

    /// A free doorbell slot: in a UAR page of BAR2 (UAR 0 for an EQ), a slot
    /// past the header, not EQ 0's, not another object's (abi::uar
    /// DOORBELL_PROTOCOL).
    fn free_slot(&self, uar: u32, slot: u16, for_eq: bool) -> Result<DbSlot, Fail> {
        let pages = self.db.len() / u64::from(uar_const::PAGE_SIZE);
        let s = u32::from(slot);
        if u64::from(uar) >= pages
            || (for_eq && uar != uar_const::KERNEL_UAR)
            || !(uar_const::FIRST_SLOT..uar_const::SLOTS).contains(&s)
        {
            return Err(fail(Status::BadParam, Syndrome::SlotRange));
        }
        if uar == uar_const::KERNEL_UAR && s == uar_const::EQ0_SLOT {
            return Err(fail(Status::Permission, Syndrome::SlotReserved));
        }
        let d = DbSlot { uar, slot };
        if self.hca.slots.contains_key(&d) {
            return Err(fail(Status::Busy, Syndrome::SlotBusy));
        }
        Ok(d)
    }

    /// A ring of `2^log2` entries of `2^entry_shift` bytes over the pages of
    /// `pbl`, every page checked against guest memory (a heavy piece:
    /// `staged`).
    fn ring(
        &mut self,
        pbl: &Pbl,
        entry_shift: u32,
        log2: u32,
        max_log2: u32,
    ) -> Result<Ring, Fail> {
        let req = Request::Ring {
            pbl: *pbl,
            entry_shift,
            log2,
            max_log2,
        };
        match self.staging.answer(req, &mut *self.mem) {
            Some(staged::Answer::Ring(r)) => r,
            Some(_) => unreachable!("a ring request has a ring answer"),
            None => Err(staged::WAIT),
        }
    }

    /// The pages of an MR's page list, each wholly in guest memory (a heavy
    /// piece: `staged`).
    fn mr_pages(&mut self, pbl: &Pbl) -> Result<Vec<u64>, Fail> {
        match self
            .staging
            .answer(Request::MrPages { pbl: *pbl }, &mut *self.mem)
        {
            Some(staged::Answer::Pages(r)) => r,
            Some(_) => unreachable!("a page-list request has a page-list answer"),
            None => Err(staged::WAIT),
        }
    }

    /// Blanks the new CQ ring `ring` of RESIZE_CQ for every index of
    /// `[pi, ci + N)` (CQ-04): done a step before from some index `from`
    /// (then what the driver consumed since, `[from, ci)`, lands on slots
    /// that blank gave last lap's owner: those are blanked again), or now
    /// when it is small or staging is off, or the command waits for it.
    fn blank_cq(&mut self, ring: &Ring, ci: u32, pi: u32) -> Result<(), Fail> {
        let n = ring.len();
        if let Some(from) = self.staging.blanked_from(ring) {
            // No CQE lands between the steps (the data path that writes them
            // prepares the pieces): pi is still `from` unless a reset came.
            if pi.wrapping_sub(from) <= n {
                let again = ci.wrapping_sub(from);
                let again = if again <= n { again } else { 0 };
                return staged::blank_cq_range(&mut *self.mem, ring, from.wrapping_add(n), again);
            }
        }
        let req = Request::BlankCq {
            ring: ring.clone(),
            from: pi,
        };
        let pending = pi.wrapping_sub(ci);
        if !self.staging.allow || n <= staged::INLINE_BLANK {
            return staged::blank_cq_range(&mut *self.mem, ring, pi, n - pending);
        }
        match self.staging.answer(req, &mut *self.mem) {
            Some(staged::Answer::Blanked(r)) => r,
            Some(_) => unreachable!("a blank request has a blank answer"),
            None => Err(staged::WAIT),
        }
    }
}

/// Reads the input, checks the output's place, runs `f`, encodes its output.
fn run<I: AbiStruct, O: AbiStruct>(
    x: &mut Exec<'_>,
    f: impl FnOnce(&mut Exec<'_>, I) -> Result<O, Fail>,
) -> Result<Option<Output>, Fail> {
    let input = x.input::<I>()?;
    let place = x.output_place::<O>()?;
    let out = f(x, input)?;
    Ok(Some(encode(place, &out)))
}

/// A command with an input and no output.
fn run_in<I: AbiStruct>(
    x: &mut Exec<'_>,
    f: impl FnOnce(&mut Exec<'_>, I) -> Result<(), Fail>,
) -> Result<Option<Output>, Fail> {
    let input = x.input::<I>()?;
    f(x, input)?;
    Ok(None)
}

/// A command with an output and no input.
fn run_out<O: AbiStruct>(
    x: &mut Exec<'_>,
    f: impl FnOnce(&mut Exec<'_>) -> Result<O, Fail>,
) -> Result<Option<Output>, Fail> {
    let place = x.output_place::<O>()?;
    let out = f(x)?;
    Ok(Some(encode(place, &out)))
}

fn encode<O: AbiStruct>(place: Place, out: &O) -> Output {
    match place {
        Place::Inline => {
            let mut b = [0u8; INLINE];
            out.put(&mut b);
            Output::Inline(b)
        }
        Place::Mailbox(at) => {
            let mut b = vec![0u8; O::SIZE];
            out.put(&mut b);
            Output::Mailbox(at, b)
        }
    }
}

/// One handler per opcode, with the parameter structs of `abi::cmd::commands()`.
fn dispatch(x: &mut Exec<'_>) -> Result<Option<Output>, Fail> {
    let op = Opcode::from_raw(x.cmd.opcode).ok_or(fail(Status::BadOpcode, Syndrome::Opcode))?;
    match op {
        Opcode::Nop => Ok(None),
        Opcode::QueryDevice => run_out(x, query_device),
        Opcode::QueryPort => run(x, query_port),
        Opcode::QueryCounters => run(x, query_counters),
        Opcode::AllocPd => run_out(x, alloc_pd),
        Opcode::DeallocPd => run_in(x, dealloc_pd),
        Opcode::CreateEq => run(x, create_eq),
        Opcode::DestroyEq => run_in(x, destroy_eq),
        Opcode::CreateCq => run(x, create_cq),
        Opcode::DestroyCq => run_in(x, destroy_cq),
        Opcode::ResizeCq => run(x, resize_cq),
        Opcode::CreateSrq => run(x, create_srq),
        Opcode::ModifySrq => run_in(x, modify_srq),
        Opcode::QuerySrq => run(x, query_srq),
        Opcode::DestroySrq => run_in(x, destroy_srq),
        Opcode::ResizeSrq => run(x, resize_srq),
        Opcode::CreateQp => run(x, create_qp),
        Opcode::ModifyQp => run_in(x, modify_qp),
        Opcode::QueryQp => run(x, query_qp),
        Opcode::DestroyQp => run_in(x, destroy_qp),
        Opcode::RegMr => run(x, reg_mr),
        Opcode::ReregMr => run(x, rereg_mr),
        Opcode::DeregMr => run_in(x, dereg_mr),
        Opcode::MapOdp => run_in(x, odp::map_odp),
        Opcode::UnmapOdp => run_in(x, odp::unmap_odp),
        Opcode::OdpFaultFail => run_in(x, odp::odp_fault_fail),
        Opcode::AllocMw => run(x, alloc_mw),
        Opcode::DeallocMw => run_in(x, dealloc_mw),
        Opcode::SetGid => run_in(x, set_gid),
        Opcode::MadIfc => run(x, mad_ifc),
        Opcode::SetPortCaps => run(x, set_port_caps),
        Opcode::SetNodeDesc => run_in(x, set_node_desc),
        Opcode::AttachMcast => run_in(x, attach_mcast),
        Opcode::DetachMcast => run_in(x, detach_mcast),
        Opcode::AllocXrcd => run_out(x, xrc::alloc_xrcd),
        Opcode::DeallocXrcd => run_in(x, xrc::dealloc_xrcd),
        Opcode::AllocRdd => run_out(x, rd::alloc_rdd),
        Opcode::DeallocRdd => run_in(x, rd::dealloc_rdd),
        Opcode::CreateEec => run(x, rd::create_eec),
        Opcode::ModifyEec => run_in(x, rd::modify_eec),
        Opcode::QueryEec => run(x, rd::query_eec),
        Opcode::DestroyEec => run_in(x, rd::destroy_eec),
    }
}
