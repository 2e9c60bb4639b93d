//! The command queue (design.md §4; abi::cmd COMMAND_PROTOCOL): commands from the
//! driver's ring, executed in order, one at a time, all or nothing.
//!
//! A command is checked completely before anything changes: its input (inline
//! or a mailbox) and where its output goes, every number it names, its doorbell
//! slot, its rings and page lists (read from guest memory and checked against
//! the guest's map). Only then is the engine called, at most once per command
//! (so there is never an earlier engine change to undo), and the device's
//! tables updated. A refusal is a status and a [`Syndrome`] in the slot, never a
//! panic (design.md §9).
//!
//! The handlers below follow `abi::cmd::commands()`: one per opcode, each taking
//! its input struct and returning its output struct.

use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use transport::engine::LinkLayer;
use transport::engine::{Engine, Limits};
use transport::memory::Memory;
use transport::mr::{Rereg, Translation};
use transport::verbs::{self as tv, VerbError};

use crate::abi::bar0::{dev_cap, Fatal};
use crate::abi::cmd::{
    cmd_const, cmd_flags, cmd_owner, pbl_const, reg_mr_flags, rereg, AllocMwIn, AllocMwOut,
    AllocPdOut, Av, Cmd, CreateCqIn, CreateCqOut, CreateEqIn, CreateEqOut, CreateQpIn, CreateQpOut,
    CreateSrqIn, CreateSrqOut, DeallocMwIn, DeallocPdIn, DeregMrIn, DestroyCqIn, DestroyEqIn,
    DestroyQpIn, DestroySrqIn, DeviceAttr, GidType, ModifyQpIn, ModifySrqIn, MwType, Opcode, Pbl,
    PortAttr, QpAttr, QpCap, QueryCountersIn, QueryCountersOut, QueryPortIn, QueryQpIn, QueryQpOut,
    QuerySrqIn, QuerySrqOut, RegMrIn, RegMrOut, ReregMrIn, ResizeCqIn, ResizeCqOut, ResizeSrqIn,
    ResizeSrqOut, SetGidIn, Status,
};
use crate::abi::counters::CounterSet;
use crate::abi::cqe::entry_const;
use crate::abi::ident::{bar, ident};
use crate::abi::layout::AbiStruct;
use crate::abi::uar::uar as uar_const;
use crate::abi::verbs::{
    access, num, qp_attr_mask, srq_attr_mask, AtomicCap, Mtu, PortState, QpState, QpType,
};
use crate::abi::wqe::{wqe_const, RaddrSeg, RecvCtrl, SendCtrl, Sge, UdSeg};
use crate::hca::{Cq, DbSlot, Doorbells, Eq, Hca, Qp, SlotOwner, Srq};
use crate::ring::{self, read_pbl, Ring, RingError};

pub use crate::context::snapshot;

/// Commands executed per [`execute_pending`] call at most, so the caller's loop
/// stays responsive (one command may read a page list of 2 MiB).
pub const MAX_COMMANDS_PER_CALL: u32 = 64;

/// The Local CA ACK Delay the device reports (IBA 14.2.5.6: 4.096 us *
/// 2^value); software processing is slower than silicon, as rxe reports.
const LOCAL_CA_ACK_DELAY: u8 = 15;

/// Mailboxes and their pages: a mailbox never crosses a 4 KiB page.
const MAILBOX_PAGE_SHIFT: u32 = pbl_const::MIN_PAGE_SHIFT;

/// Device limits: what QUERY_DEVICE reports, what BAR0's CAP_* registers show
/// and what the command queue enforces. 32 bits each, as the registers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// QPs, including QP 1 (GSI).
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_srq: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    /// EQs, including EQ 0.
    pub max_eq: u32,
    /// Work requests per SQ or RQ; rings hold at most this many WQEs.
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_inline: u32,
    /// UAR pages of BAR2.
    pub num_uars: u32,
    /// MSI-X vectors (abi::ident MSIX_MIN_VECTORS..=MSIX_MAX_VECTORS).
    pub msix_vectors: u32,
    pub max_cmdq_log2: u32,
    pub max_eq_log2: u32,
    pub max_srq_wr: u32,
    /// RDMA READ / ATOMIC depth, as initiator and as responder.
    pub max_rd_atomic: u32,
    /// `VHCA_DEV_CAP_*`.
    pub flags: u32,
}

impl Caps {
    /// The device's limits over an engine with `l`: the engine's own sizes, and
    /// the device's choices for what the engine does not know (EQs, UARs,
    /// vectors, the command queue).
    pub fn from_limits(l: &Limits) -> Caps {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Caps {
            max_qp: n(l.max_qp),
            max_cq: n(l.max_cq),
            max_srq: n(l.max_srq),
            max_mr: n(l.max_mr).min(transport::mr::MAX_MR_INDEX),
            max_pd: n(l.max_pd),
            max_eq: 64,
            max_qp_wr: l.max_qp_wr,
            max_sge: l.max_sge,
            max_cqe: l.max_cqe,
            max_inline: l.max_inline,
            // 256 KiB of BAR2: the kernel's page and 63 user contexts.
            num_uars: 64,
            msix_vectors: 16,
            // 1024 slots of 64 bytes: 64 KiB, a modest contiguous allocation.
            max_cmdq_log2: 10,
            // 64 Ki EQEs of 16 bytes: 1 MiB.
            max_eq_log2: 16,
            max_srq_wr: l.max_qp_wr,
            max_rd_atomic: u32::from(l.max_rd_atomic),
            flags: dev_cap::RC
                | dev_cap::UC
                | dev_cap::UD
                | dev_cap::GSI
                | dev_cap::SRQ
                | dev_cap::ATOMIC
                | dev_cap::SEND_WITH_INV
                | dev_cap::MW_TYPE1
                | dev_cap::MW_TYPE2
                | dev_cap::DMA_MR
                | dev_cap::RESIZE_CQ
                | dev_cap::RESIZE_SRQ
                | dev_cap::FLUSH_GLOBAL
                | dev_cap::ATOMIC_WRITE,
        }
    }
}

impl Default for Caps {
    /// The limits of an engine with `Limits::default()`.
    fn default() -> Caps {
        Caps::from_limits(&Limits::default())
    }
}

/// The command ring the driver configured through BAR0, and how far the device
/// has executed it.
#[derive(Debug, Clone)]
pub struct CmdQueue {
    ring: Ring,
    base: u64,
    log2_size: u32,
    /// Commands completed (free-running): CMDQ_CI.
    ci: u32,
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
    /// The engine refused; the status says why.
    Engine = 0x100,
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

/// Executes the commands from the queue's CI up to `pi` (the driver's
/// CMDQ_PI), in order, at most [`MAX_COMMANDS_PER_CALL`] of them: for each, the
/// outputs, then `syndrome` and `status`, then `owner` cleared last with release
/// ordering, then CI advanced (abi::cmd COMMAND_PROTOCOL). Returns the commands
/// that asked for a COMMAND_DONE event, for the caller to post on EQ 0.
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
) -> Result<Vec<CmdDone>, Fatal> {
    if pi.wrapping_sub(q.ci) > q.slots() {
        return Err(Fatal::CmdqNotOwned);
    }
    let mut done = Vec::new();
    for _ in 0..MAX_COMMANDS_PER_CALL {
        if q.ci == pi {
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
        let mut raw = [0u8; Cmd::SIZE];
        mem.read(addr, &mut raw).map_err(|_| Fatal::CmdqBadConfig)?;
        let cmd = Cmd::from_bytes(&raw);
        let result = dispatch(&mut Exec {
            hca: &mut *hca,
            mem: &mut *mem,
            db,
            cmd,
            now,
        });
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
    /// `pbl`, every page checked against guest memory.
    fn ring(&self, pbl: &Pbl, entry_shift: u32, log2: u32, max_log2: u32) -> Result<Ring, Fail> {
        let pages = read_pbl(&*self.mem, pbl).map_err(ring_fail)?;
        Ring::new(
            &*self.mem,
            pages,
            u32::from(pbl.page_shift),
            entry_shift,
            log2,
            max_log2,
        )
        .map_err(ring_fail)
    }

    /// The pages of an MR's page list, each wholly in guest memory.
    fn mr_pages(&self, pbl: &Pbl) -> Result<Vec<u64>, Fail> {
        let pages = read_pbl(&*self.mem, pbl).map_err(ring_fail)?;
        let last = (1u64 << pbl.page_shift) - 1;
        let mut probe = [0u8];
        for &p in &pages {
            // Aligned pages of at most 1 GiB: p + last cannot overflow.
            if self.mem.read(p, &mut probe).is_err() || self.mem.read(p + last, &mut probe).is_err()
            {
                return Err(fail(Status::BadAddress, Syndrome::PageListAddress));
            }
        }
        Ok(pages)
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
        Opcode::AllocMw => run(x, alloc_mw),
        Opcode::DeallocMw => run_in(x, dealloc_mw),
        Opcode::SetGid => run_in(x, set_gid),
    }
}

// ---------------------------------------------------------------- device, port

fn query_device(x: &mut Exec<'_>) -> Result<DeviceAttr, Fail> {
    let c = x.hca.caps;
    let port = x.hca.port.engine().port();
    let page_sizes =
        (pbl_const::MIN_PAGE_SHIFT..=pbl_const::MAX_PAGE_SHIFT).fold(0u64, |acc, s| acc | (1 << s));
    Ok(DeviceAttr {
        fw_ver: u64::from(ident::ABI_VERSION),
        node_guid: port.port_guid,
        sys_image_guid: port.port_guid,
        max_mr_size: u64::from(pbl_const::MAX_PAGES) << pbl_const::MAX_PAGE_SHIFT,
        page_size_cap: page_sizes,
        vendor_id: ident::PCI_VENDOR_ID,
        vendor_part_id: ident::PCI_DEVICE_ID,
        hw_ver: ident::PCI_REVISION,
        cap_flags: c.flags,
        max_qp: c.max_qp,
        max_qp_wr: c.max_qp_wr,
        max_sge: c.max_sge,
        max_cq: c.max_cq,
        max_cqe: c.max_cqe,
        max_mr: c.max_mr,
        max_pd: c.max_pd,
        max_srq: c.max_srq,
        max_srq_wr: c.max_srq_wr,
        max_srq_sge: c.max_sge,
        max_eq: c.max_eq,
        max_eqe: 1u32.checked_shl(c.max_eq_log2).unwrap_or(u32::MAX),
        max_inline_data: c.max_inline,
        max_qp_rd_atom: c.max_rd_atomic,
        max_qp_init_rd_atom: c.max_rd_atomic,
        max_res_rd_atom: c.max_rd_atomic.saturating_mul(c.max_qp),
        max_msg_sz: u32::try_from(transport::engine::MAX_MSG_SIZE).unwrap_or(u32::MAX),
        num_uars: c.num_uars,
        msix_vectors: u16::try_from(c.msix_vectors).unwrap_or(u16::MAX),
        max_pkeys: u16::try_from(port.pkeys.len()).unwrap_or(u16::MAX),
        local_ca_ack_delay: LOCAL_CA_ACK_DELAY,
        phys_port_cnt: num::PORT as u8,
        atomic_cap: AtomicCap::Hca.raw(),
        rsvd: 0,
    })
}

/// `IB_WIDTH_4X` and `IB_SPEED_QDR`: nominal, the fabric is a socket.
const ACTIVE_WIDTH: u8 = 2;
const ACTIVE_SPEED: u8 = 4;
/// IBA PortPhysicalState LinkUp.
const PHYS_STATE_LINK_UP: u8 = 5;
/// `IBV_LINK_LAYER_INFINIBAND`.
const LINK_LAYER_IB: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
const LINK_LAYER_ETHERNET: u8 = 2;

fn query_port(x: &mut Exec<'_>, i: QueryPortIn) -> Result<PortAttr, Fail> {
    check_port(i.port)?;
    reserved(i.rsvd == [0; 3])?;
    let p = x.hca.port.engine().port();
    let mut out = PortAttr::default();
    let n = p.pkeys.len().min(out.pkeys.len());
    out.pkeys[..n].copy_from_slice(&p.pkeys[..n]);
    let (link_layer, mac, gid_tbl_len) = match p.link {
        LinkLayer::InfiniBand => (LINK_LAYER_IB, [0; 6], 1),
        LinkLayer::Ethernet { mac } => (LINK_LAYER_ETHERNET, mac, p.roce_gids.len() as u16),
    };
    Ok(PortAttr {
        port_guid: p.port_guid,
        gid_prefix: p.gid_prefix,
        gid0: p.gid(),
        max_msg_sz: u32::try_from(transport::engine::MAX_MSG_SIZE).unwrap_or(u32::MAX),
        lid: p.lid,
        // No subnet manager: LIDs come from the fabric file (design.md §6).
        sm_lid: 0,
        pkey_tbl_len: n as u16,
        gid_tbl_len,
        state: PortState::Active.raw(),
        phys_state: PHYS_STATE_LINK_UP,
        max_mtu: p.max_mtu as u8,
        active_mtu: p.max_mtu as u8,
        lmc: p.lmc,
        sm_sl: 0,
        link_layer,
        active_width: ACTIVE_WIDTH,
        active_speed: ACTIVE_SPEED,
        mac,
        ..out
    })
}

/// SET_GID: one entry of a RoCE port's GID table (WF-10). All or nothing: the
/// checks come before the table changes.
fn set_gid(x: &mut Exec<'_>, i: SetGidIn) -> Result<(), Fail> {
    check_port(i.port)?;
    reserved(i.rsvd == [0; 3])?;
    let bad = fail(Status::BadParam, Syndrome::Gid);
    let gid = match i.valid {
        0 => {
            reserved(i.gid_type == 0 && i.gid == [0; 16])?;
            None
        }
        1 => {
            if GidType::from_raw(i.gid_type) != Some(GidType::RoceV2) || i.gid == [0; 16] {
                return Err(bad);
            }
            Some(i.gid)
        }
        _ => return Err(bad),
    };
    let engine = x.hca.port.engine_mut();
    if !engine.port().is_ethernet() {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    if usize::from(i.index) >= engine.port().roce_gids.len() {
        return Err(bad);
    }
    engine.set_roce_gid(usize::from(i.index), gid)?;
    Ok(())
}

fn query_counters(x: &mut Exec<'_>, i: QueryCountersIn) -> Result<QueryCountersOut, Fail> {
    check_port(i.port)?;
    reserved(i.rsvd == 0)?;
    let set = CounterSet::from_raw(i.set).ok_or(fail(Status::BadParam, Syndrome::CounterSet))?;
    let values = set.values(x.hca.port.engine().counters(), &x.hca.counters);
    let mut out = QueryCountersOut::default();
    let n = values.len().min(out.values.len());
    out.count = n as u32;
    out.values[..n].copy_from_slice(&values[..n]);
    Ok(out)
}

// ---------------------------------------------------------------- PDs

fn alloc_pd(x: &mut Exec<'_>) -> Result<AllocPdOut, Fail> {
    Ok(AllocPdOut {
        pdn: x.engine().mrs().alloc_pd()?,
    })
}

fn dealloc_pd(x: &mut Exec<'_>, i: DeallocPdIn) -> Result<(), Fail> {
    // BUSY while an MR, QP or SRQ uses it: the engine counts them.
    Ok(x.engine().mrs().dealloc_pd(i.pdn)?)
}

fn pd_exists(x: &mut Exec<'_>, pdn: u32) -> Result<(), Fail> {
    if x.engine().mrs().pd_exists(pdn) {
        Ok(())
    } else {
        Err(fail(Status::BadPd, Syndrome::NoPd))
    }
}

// ---------------------------------------------------------------- EQs

const EQE_SHIFT: u32 = entry_const::EQE_SIZE.trailing_zeros();
const CQE_SHIFT: u32 = entry_const::CQE_SIZE.trailing_zeros();

fn create_eq(x: &mut Exec<'_>, i: CreateEqIn) -> Result<CreateEqOut, Fail> {
    reserved(i.rsvd == [0; 7])?;
    let caps = x.hca.caps;
    let vector = u32::from(i.vector);
    if !(bar::MSIX_VECTOR_FIRST_COMP..caps.msix_vectors).contains(&vector) {
        return Err(fail(Status::BadParam, Syndrome::Vector));
    }
    let log2 = u32::from(i.log2_entries);
    if log2 == 0 || log2 > caps.max_eq_log2 {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    let eqn = (1..caps.max_eq)
        .find(|n| !x.hca.eqs.contains_key(n))
        .ok_or(fail(Status::NoResources, Syndrome::Caps))?;
    let db = x.free_slot(i.uar, i.db_slot, true)?;
    let ring = x.ring(&i.ring, EQE_SHIFT, log2, caps.max_eq_log2)?;
    let (_, arm) = db.load(x.db);
    x.hca.eqs.insert(
        eqn,
        Eq {
            ring,
            vector: i.vector,
            db,
            pi: 0,
            // The arm word as it is now: a change after this allows the first
            // interrupt (abi::uar DOORBELL_PROTOCOL).
            last_arm: arm,
            users: 0,
            overflows: 0,
            pbl: i.ring,
        },
    );
    x.hca.slots.insert(db, SlotOwner::Eq(eqn));
    Ok(CreateEqOut { eqn })
}

fn destroy_eq(x: &mut Exec<'_>, i: DestroyEqIn) -> Result<(), Fail> {
    if i.eqn == num::ASYNC_EQN {
        return Err(fail(Status::Permission, Syndrome::Eq0));
    }
    let eq = x
        .hca
        .eqs
        .get(&i.eqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoEq))?;
    if eq.users > 0 {
        return Err(fail(Status::Busy, Syndrome::EqBusy));
    }
    let db = eq.db;
    x.hca.eqs.remove(&i.eqn);
    x.hca.slots.remove(&db);
    Ok(())
}

// ---------------------------------------------------------------- CQs

fn create_cq(x: &mut Exec<'_>, i: CreateCqIn) -> Result<CreateCqOut, Fail> {
    reserved(i.rsvd == [0; 5])?;
    let max_log2 = log2_floor(x.hca.caps.max_cqe);
    let log2 = u32::from(i.log2_entries);
    if log2 > max_log2 {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    if !x.hca.eqs.contains_key(&i.eqn) {
        return Err(fail(Status::NotFound, Syndrome::NoEq));
    }
    let db = x.free_slot(i.uar, i.db_slot, false)?;
    let ring = x.ring(&i.ring, CQE_SHIFT, log2, max_log2)?;
    let entries = ring.len();
    let cqn = x.engine().create_cq(entries)?;
    let (_, arm) = db.load(x.db);
    x.hca.cqs.insert(
        cqn,
        Cq {
            ring,
            eqn: i.eqn,
            db,
            pi: 0,
            last_arm: arm,
            users: 0,
            overflowed: false,
            events: 0,
            armed: None,
            pbl: i.ring,
        },
    );
    x.hca.slots.insert(db, SlotOwner::Cq(cqn));
    if let Some(eq) = x.hca.eqs.get_mut(&i.eqn) {
        eq.users += 1;
    }
    Ok(CreateCqOut { cqn, entries })
}

fn destroy_cq(x: &mut Exec<'_>, i: DestroyCqIn) -> Result<(), Fail> {
    let cq = x
        .hca
        .cqs
        .get(&i.cqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoCq))?;
    if cq.users > 0 {
        return Err(fail(Status::Busy, Syndrome::CqBusy));
    }
    let (db, eqn) = (cq.db, cq.eqn);
    x.engine().destroy_cq(i.cqn)?;
    x.hca.cqs.remove(&i.cqn);
    x.hca.slots.remove(&db);
    if let Some(eq) = x.hca.eqs.get_mut(&eqn) {
        eq.users = eq.users.saturating_sub(1);
    }
    Ok(())
}

/// RESIZE_CQ (CQ-04; abi::cmd RESIZE_PROTOCOL): the device copies the CQEs
/// not consumed, [ci, pi), into the new ring at the same free-running indices
/// with the new ring's owner bits, and stamps every other slot "not yet
/// written" for the index that lands there next. All checks and all writes
/// into the new ring come before any state changes.
fn resize_cq(x: &mut Exec<'_>, i: ResizeCqIn) -> Result<ResizeCqOut, Fail> {
    reserved(i.rsvd == [0; 3])?;
    let max_log2 = log2_floor(x.hca.caps.max_cqe);
    let log2 = u32::from(i.log2_entries);
    if log2 > max_log2 {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    let cq = x
        .hca
        .cqs
        .get(&i.cqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoCq))?;
    if cq.overflowed {
        return Err(fail(Status::BadState, Syndrome::CqOverflowed));
    }
    let (old, pi) = (cq.ring.clone(), cq.pi);
    let (ci, _) = cq.db.load(x.db);
    let ring = x.ring(&i.ring, CQE_SHIFT, log2, max_log2)?;
    let pending = pi.wrapping_sub(ci);
    if pending > old.len() {
        // A consumer index the device never wrote up to: garbage.
        return Err(fail(Status::BadParam, Syndrome::ConsumerIndex));
    }
    let staged = x.hca.port.engine().cq_len(i.cqn) as u64;
    if u64::from(pending) + staged > u64::from(ring.len()) {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    const CQE: usize = entry_const::CQE_SIZE as usize;
    let owner_at = CQE - 1;
    let owner_mask = entry_const::OWNER_BIT as u8;
    let mut e = [0u8; CQE];
    // Slot by slot, the index in [ci, ci + N) that lives there: a copy below
    // pi, else the next index the device writes there.
    for n in 0..ring.len() {
        let k = ci.wrapping_add(n);
        let owner = crate::abi::cqe::owner_bit(k, log2);
        if n < pending {
            old.read(&*x.mem, k, &mut e)
                .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
            e[owner_at] = (e[owner_at] & !owner_mask) | owner;
        } else {
            e = [0u8; CQE];
            e[owner_at] = owner ^ owner_mask;
        }
        ring.write(&mut *x.mem, k, &e)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
    }
    let entries = ring.len();
    x.engine().resize_cq(i.cqn, entries)?;
    let cq = x.hca.cqs.get_mut(&i.cqn).expect("checked above");
    cq.ring = ring;
    cq.pbl = i.ring;
    Ok(ResizeCqOut { entries })
}

// ---------------------------------------------------------------- SRQs

/// Receive WQE stride checks (RQ and SRQ): the stride in range, room for
/// `max_sge` SGEs after the control segment. Returns the SGEs it holds.
fn recv_stride(shift: u8, max_sge: u32) -> Result<u32, Fail> {
    let shift = u32::from(shift);
    if !(wqe_const::RQ_MIN_WQE_SHIFT..=wqe_const::MAX_WQE_SHIFT).contains(&shift) {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    let room = ((1u32 << shift) - RecvCtrl::SIZE as u32) / Sge::SIZE as u32;
    if max_sge > room {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    Ok(room)
}

/// A ring of `2^log2` WQEs for `wr` of them, in a device that allows
/// `max_wr`: LIMIT_EXCEEDED beyond the device, BAD_PARAM when smaller than asked.
fn wq_size(log2: u8, wr: u32, max_wr: u32) -> Result<u32, Fail> {
    let log2 = u32::from(log2);
    if log2 > log2_floor(max_wr) {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    if wr > 1 << log2 {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    Ok(1 << log2)
}

fn create_srq(x: &mut Exec<'_>, i: CreateSrqIn) -> Result<CreateSrqOut, Fail> {
    let caps = x.hca.caps;
    pd_exists(x, i.pdn)?;
    if i.max_wr == 0 || i.max_wr > caps.max_srq_wr || i.max_sge > caps.max_sge {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    if i.srq_limit > i.max_wr {
        return Err(fail(Status::BadParam, Syndrome::AttrValue));
    }
    let max_wr = wq_size(i.log2_entries, i.max_wr, caps.max_srq_wr)?;
    let max_sge = recv_stride(i.wqe_shift, i.max_sge)?.min(caps.max_sge);
    let db = x.free_slot(i.uar, i.db_slot, false)?;
    let ring = x.ring(
        &i.ring,
        u32::from(i.wqe_shift),
        u32::from(i.log2_entries),
        log2_floor(caps.max_srq_wr),
    )?;
    let srqn = x.engine().create_srq(i.pdn, max_wr, max_sge, i.srq_limit)?;
    // WQEs are new from the producer index in the slot now.
    let (pi, _) = db.load(x.db);
    x.hca.srqs.insert(
        srqn,
        Srq {
            pdn: i.pdn,
            ring,
            db,
            fetched: pi,
            stalled: None,
            max_wr,
            max_sge,
            users: 0,
            pbl: i.ring,
        },
    );
    x.hca.slots.insert(db, SlotOwner::Srq(srqn));
    Ok(CreateSrqOut {
        srqn,
        max_wr,
        max_sge,
    })
}

fn modify_srq(x: &mut Exec<'_>, i: ModifySrqIn) -> Result<(), Fail> {
    if i.attr_mask & !(srq_attr_mask::MAX_WR | srq_attr_mask::LIMIT) != 0 {
        return Err(fail(Status::BadParam, Syndrome::AttrMask));
    }
    if !x.hca.srqs.contains_key(&i.srqn) {
        return Err(fail(Status::NotFound, Syndrome::NoSrq));
    }
    if i.attr_mask & srq_attr_mask::MAX_WR != 0 {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    if i.attr_mask & srq_attr_mask::LIMIT != 0 {
        x.engine().modify_srq_limit(i.srqn, i.srq_limit)?;
    }
    Ok(())
}

/// RESIZE_SRQ (abi::cmd RESIZE_PROTOCOL): the WQEs posted and not fetched,
/// [fetched, pi), are copied into the new ring at the same indices; fetched
/// ones are in the engine already. Checks and copies come before any state
/// changes.
fn resize_srq(x: &mut Exec<'_>, i: ResizeSrqIn) -> Result<ResizeSrqOut, Fail> {
    reserved(i.rsvd == [0; 7])?;
    let caps = x.hca.caps;
    let s = x
        .hca
        .srqs
        .get(&i.srqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoSrq))?;
    let (old, fetched) = (s.ring.clone(), s.fetched);
    if i.max_wr == 0 || i.max_wr > caps.max_srq_wr {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    let max_wr = wq_size(i.log2_entries, i.max_wr, caps.max_srq_wr)?;
    let stride_shift = old.entry_size().trailing_zeros();
    let ring = x.ring(
        &i.ring,
        stride_shift,
        u32::from(i.log2_entries),
        log2_floor(caps.max_srq_wr),
    )?;
    let unfetched =
        srq_unfetched(s, x.db).ok_or(fail(Status::BadParam, Syndrome::ProducerIndex))?;
    let (queued, limit) = x.hca.port.engine().query_srq(i.srqn)?;
    if u64::from(unfetched) + queued as u64 > u64::from(max_wr) || limit > max_wr as usize {
        return Err(fail(Status::BadParam, Syndrome::RingSize));
    }
    let mut buf = vec![0u8; old.entry_size()];
    for n in 0..unfetched {
        let k = fetched.wrapping_add(n);
        old.read(&*x.mem, k, &mut buf)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
        ring.write(&mut *x.mem, k, &buf)
            .map_err(|_| fail(Status::BadAddress, Syndrome::RingAddress))?;
    }
    x.engine().resize_srq(i.srqn, max_wr)?;
    let s = x.hca.srqs.get_mut(&i.srqn).expect("checked above");
    s.ring = ring;
    s.max_wr = max_wr;
    s.pbl = i.ring;
    Ok(ResizeSrqOut { max_wr })
}

/// WQEs posted to `s` that the data path has not fetched yet, [fetched, pi);
/// `None` for a producer index more than a ring ahead (garbage).
fn srq_unfetched(s: &crate::hca::Srq, db: &dyn Doorbells) -> Option<u32> {
    let (pi, _) = s.db.load(db);
    let unfetched = pi.wrapping_sub(s.fetched);
    (unfetched <= s.ring.len()).then_some(unfetched)
}

fn query_srq(x: &mut Exec<'_>, i: QuerySrqIn) -> Result<QuerySrqOut, Fail> {
    let s = x
        .hca
        .srqs
        .get(&i.srqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoSrq))?;
    let (max_wr, max_sge) = (s.max_wr, s.max_sge);
    // Posted WQEs: those in the engine and those the data path has not fetched
    // yet (a doorbell it has not seen); a garbage producer index counts nothing.
    let unfetched = srq_unfetched(s, x.db).unwrap_or(0);
    let (queued, limit) = x.hca.port.engine().query_srq(i.srqn)?;
    let count = queued as u64 + u64::from(unfetched);
    Ok(QuerySrqOut {
        max_wr,
        max_sge,
        srq_limit: u32::try_from(limit).unwrap_or(u32::MAX),
        wqe_count: u32::try_from(count).unwrap_or(u32::MAX),
    })
}

fn destroy_srq(x: &mut Exec<'_>, i: DestroySrqIn) -> Result<(), Fail> {
    let s = x
        .hca
        .srqs
        .get(&i.srqn)
        .ok_or(fail(Status::NotFound, Syndrome::NoSrq))?;
    if s.users > 0 {
        return Err(fail(Status::Busy, Syndrome::SrqBusy));
    }
    let db = s.db;
    x.engine().destroy_srq(i.srqn)?;
    x.hca.srqs.remove(&i.srqn);
    x.hca.slots.remove(&db);
    Ok(())
}

// ---------------------------------------------------------------- QPs

/// Bytes of a send WQE before its SGEs or inline data: control and UD
/// segments for datagrams; control and remote address for connected QPs (an
/// atomic's extra segment takes the room of a second SGE, and the smallest
/// stride holds it).
fn send_headers(t: QpType) -> u32 {
    match t {
        QpType::Ud | QpType::Gsi | QpType::Smi => (SendCtrl::SIZE + UdSeg::SIZE) as u32,
        QpType::Rc | QpType::Uc => (SendCtrl::SIZE + RaddrSeg::SIZE) as u32,
    }
}

fn create_qp(x: &mut Exec<'_>, i: CreateQpIn) -> Result<CreateQpOut, Fail> {
    reserved(i.rsvd0 == 0 && i.rsvd1 == [0; 6])?;
    let caps = x.hca.caps;
    let qp_type = QpType::from_raw(i.qp_type).ok_or(fail(Status::BadParam, Syndrome::QpType))?;
    let service = match qp_type {
        QpType::Rc => tv::QpType::Rc,
        QpType::Uc => tv::QpType::Uc,
        QpType::Ud | QpType::Gsi => tv::QpType::Ud,
        // QP 0: no subnet management agent (AD-09).
        QpType::Smi => return Err(fail(Status::NotSupported, Syndrome::QpType)),
    };
    check_port(i.port)?;
    pd_exists(x, i.pdn)?;
    for cqn in [i.send_cqn, i.recv_cqn] {
        if !x.hca.cqs.contains_key(&cqn) {
            return Err(fail(Status::BadCq, Syndrome::NoCq));
        }
    }
    let srqn = (i.srqn != num::NONE).then_some(i.srqn);
    if let Some(s) = srqn {
        match x.hca.srqs.get(&s) {
            Some(srq) if srq.pdn == i.pdn => {}
            _ => return Err(fail(Status::BadSrq, Syndrome::NoSrq)),
        }
    }

    // Sizes: the device's limits first, then the rings and strides asked for.
    let c = i.cap;
    if c.max_send_wr > caps.max_qp_wr
        || c.max_send_sge > caps.max_sge
        || c.max_inline_data > caps.max_inline
        || (srqn.is_none() && (c.max_recv_wr > caps.max_qp_wr || c.max_recv_sge > caps.max_sge))
    {
        return Err(fail(Status::LimitExceeded, Syndrome::Caps));
    }
    let sq_shift = u32::from(i.sq_wqe_shift);
    if !(wqe_const::SQ_MIN_WQE_SHIFT..=wqe_const::MAX_WQE_SHIFT).contains(&sq_shift) {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    let send_room = (1u32 << sq_shift) - send_headers(qp_type);
    if c.max_send_sge > send_room / Sge::SIZE as u32 || c.max_inline_data > send_room {
        return Err(fail(Status::BadParam, Syndrome::Stride));
    }
    let max_send_wr = wq_size(i.log2_sq_size, c.max_send_wr, caps.max_qp_wr)?;
    let (max_recv_wr, max_recv_sge) = match srqn {
        Some(_) => {
            // The SRQ receives; no RQ ring.
            if i.log2_rq_size != 0 || i.rq != Pbl::default() {
                return Err(fail(Status::BadParam, Syndrome::RingSize));
            }
            (0, 0)
        }
        None => (
            wq_size(i.log2_rq_size, c.max_recv_wr, caps.max_qp_wr)?,
            recv_stride(i.rq_wqe_shift, c.max_recv_sge)?.min(caps.max_sge),
        ),
    };
    let granted = tv::QpCap {
        max_send_wr,
        max_recv_wr,
        max_send_sge: (send_room / Sge::SIZE as u32).min(caps.max_sge),
        max_recv_sge,
        max_inline_data: send_room.min(caps.max_inline),
    };

    let db = x.free_slot(i.uar, i.db_slot, false)?;
    let max_log2 = log2_floor(caps.max_qp_wr);
    let sq = x.ring(&i.sq, sq_shift, u32::from(i.log2_sq_size), max_log2)?;
    let rq = match srqn {
        Some(_) => None,
        None => Some(x.ring(
            &i.rq,
            u32::from(i.rq_wqe_shift),
            u32::from(i.log2_rq_size),
            max_log2,
        )?),
    };

    let init = tv::QpInit {
        qp_type: service,
        pd: i.pdn,
        send_cq: i.send_cqn,
        recv_cq: i.recv_cqn,
        srq: srqn,
        cap: granted,
        sq_sig_all: i.sq_sig_all != 0,
    };
    let qpn = match qp_type {
        QpType::Gsi => x.engine().create_gsi_qp(init)?,
        _ => x.engine().create_qp(init)?,
    };
    let mut qp = Qp {
        qp_type,
        pdn: i.pdn,
        send_cqn: i.send_cqn,
        recv_cqn: i.recv_cqn,
        srqn,
        sq,
        rq,
        db,
        sq_fetched: 0,
        rq_fetched: 0,
        sq_stalled: None,
        rq_stalled: None,
        cap: granted,
        sq_sig_all: i.sq_sig_all != 0,
        sq_pbl: i.sq,
        rq_pbl: if srqn.is_some() { Pbl::default() } else { i.rq },
    };
    qp.sync_indices(x.db);
    x.hca.qps.insert(qpn, qp);
    x.hca.slots.insert(db, SlotOwner::Qp(qpn));
    // As the engine counts them: once per role, so a CQ for both counts twice.
    for cqn in [i.send_cqn, i.recv_cqn] {
        if let Some(cq) = x.hca.cqs.get_mut(&cqn) {
            cq.users += 1;
        }
    }
    if let Some(s) = srqn.and_then(|s| x.hca.srqs.get_mut(&s)) {
        s.users += 1;
    }
    Ok(CreateQpOut {
        qpn,
        cap: cap_to_abi(&granted),
    })
}

fn state_from_abi(raw: u8) -> Result<tv::QpState, Fail> {
    let s = QpState::from_raw(raw).ok_or(fail(Status::BadParam, Syndrome::AttrValue))?;
    Ok(match s {
        QpState::Reset => tv::QpState::Reset,
        QpState::Init => tv::QpState::Init,
        QpState::Rtr => tv::QpState::Rtr,
        QpState::Rts => tv::QpState::Rts,
        QpState::Sqd => tv::QpState::Sqd,
        QpState::Sqe => tv::QpState::Sqe,
        QpState::Error => tv::QpState::Error,
    })
}

fn mtu_from_abi(raw: u8) -> Result<tv::Mtu, Fail> {
    let m = Mtu::from_raw(raw).ok_or(fail(Status::BadParam, Syndrome::AttrValue))?;
    Ok(match m {
        Mtu::M256 => tv::Mtu::M256,
        Mtu::M512 => tv::Mtu::M512,
        Mtu::M1024 => tv::Mtu::M1024,
        Mtu::M2048 => tv::Mtu::M2048,
        Mtu::M4096 => tv::Mtu::M4096,
    })
}

/// An address vector from MODIFY_QP, every field in range (the data path's
/// conversion masks instead, for WQEs it cannot refuse).
fn av_from_abi(av: &Av) -> Result<tv::AddressVector, Fail> {
    reserved(av.rsvd == 0 && av.rsvd2 == [0; 2])?;
    // 0: the QP's port; there is one.
    if u32::from(av.port_num) > num::PORT {
        return Err(fail(Status::BadParam, Syndrome::Port));
    }
    // The SGID index is the engine's to check against the port's GID table
    // (one entry on InfiniBand, the RoCE table on Ethernet).
    let global_bad = av.is_global > 1 || (av.is_global == 1 && av.flow_label > 0xf_ffff);
    if av.sl > 15 || av.src_path_bits > 0x7f || global_bad {
        return Err(fail(Status::BadParam, Syndrome::AttrValue));
    }
    Ok(crate::datapath::av_from_abi(av))
}

/// The engine's attributes and mask of a MODIFY_QP: only the attributes the
/// mask names are read (ibverbs), each checked here or by the engine's table.
fn qp_attr_from_abi(a: &QpAttr, mask: u32) -> Result<(tv::QpAttr, tv::AttrMask), Fail> {
    use qp_attr_mask as m;
    let known = (m::DEST_QPN << 1) - 1;
    if mask & !known != 0 {
        return Err(fail(Status::BadParam, Syndrome::AttrMask));
    }
    // Alternate paths and migration (AD-10), resizing: not implemented.
    if mask & (m::ALT_PATH | m::PATH_MIG_STATE | m::CAP) != 0 {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    reserved(a.rsvd == 0)?;
    let has = |bit: u32| mask & bit != 0;
    let mut t = tv::QpAttr::default();
    if has(m::STATE) {
        t.state = Some(state_from_abi(a.qp_state)?);
    }
    if has(m::CUR_STATE) {
        t.cur_state = Some(state_from_abi(a.cur_qp_state)?);
    }
    if has(m::EN_SQD_ASYNC_NOTIFY) {
        t.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    }
    if has(m::ACCESS_FLAGS) {
        t.access = check_access_in(a.qp_access_flags, QP_ACCESS_BITS)?;
    }
    if has(m::PKEY_INDEX) {
        t.pkey_index = a.pkey_index;
    }
    if has(m::PORT) {
        t.port_num = a.port_num;
    }
    if has(m::QKEY) {
        t.qkey = a.qkey;
    }
    if has(m::AV) {
        t.av = av_from_abi(&a.ah_attr)?;
    }
    if has(m::PATH_MTU) {
        t.path_mtu = mtu_from_abi(a.path_mtu)?;
    }
    if has(m::TIMEOUT) {
        t.timeout = a.timeout;
    }
    if has(m::RETRY_CNT) {
        t.retry_cnt = a.retry_cnt;
    }
    if has(m::RNR_RETRY) {
        t.rnr_retry = a.rnr_retry;
    }
    if has(m::RQ_PSN) {
        t.rq_psn = a.rq_psn;
    }
    if has(m::MAX_QP_RD_ATOMIC) {
        t.max_rd_atomic = a.max_rd_atomic;
    }
    if has(m::MIN_RNR_TIMER) {
        t.min_rnr_timer = a.min_rnr_timer;
    }
    if has(m::SQ_PSN) {
        t.sq_psn = a.sq_psn;
    }
    if has(m::MAX_DEST_RD_ATOMIC) {
        t.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(m::DEST_QPN) {
        t.dest_qp_num = a.dest_qp_num;
    }
    Ok((t, tv::AttrMask(mask)))
}

fn modify_qp(x: &mut Exec<'_>, i: ModifyQpIn) -> Result<(), Fail> {
    if !x.hca.qps.contains_key(&i.qpn) {
        return Err(fail(Status::NotFound, Syndrome::NoQp));
    }
    let (attr, mask) = qp_attr_from_abi(&i.attr, i.attr_mask)?;
    let now = time(x.now);
    // The engine's transition table checks the transition, the mask and the
    // values, and changes nothing on a refusal (QS-02).
    x.engine().modify_qp(i.qpn, &attr, mask, now)?;
    if attr.state == Some(tv::QpState::Reset) {
        // WQEs are new from the producer indices in the slot now (abi::cmd
        // ModifyQpIn).
        let db = x.db;
        if let Some(qp) = x.hca.qps.get_mut(&i.qpn) {
            qp.sync_indices(db);
        }
    }
    Ok(())
}

pub(crate) fn cap_to_abi(c: &tv::QpCap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The ABI form of an engine address vector.
pub(crate) fn av_to_abi(av: &tv::AddressVector) -> Av {
    let g = av.grh.unwrap_or_default();
    Av {
        dgid: g.dgid,
        flow_label: g.flow_label,
        dlid: av.dlid,
        sl: av.sl,
        src_path_bits: av.src_path_bits,
        static_rate: av.static_rate,
        is_global: u8::from(av.grh.is_some()),
        sgid_index: g.sgid_index,
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        port_num: num::PORT as u8,
        rsvd: 0,
        dmac: av.dmac,
        rsvd2: [0; 2],
    }
}

/// The ABI form of a QP's attributes (QUERY_QP).
pub(crate) fn qp_attr_to_abi(state: tv::QpState, a: &tv::QpAttr, cap: &tv::QpCap) -> QpAttr {
    QpAttr {
        qp_state: state as u8,
        cur_qp_state: state as u8,
        path_mtu: a.path_mtu as u8,
        path_mig_state: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.access.0,
        pkey_index: a.pkey_index,
        port_num: a.port_num,
        en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        // The engine does not say whether a drain is still under way.
        sq_draining: 0,
        rsvd: 0,
        ah_attr: av_to_abi(&a.av),
        cap: cap_to_abi(cap),
    }
}

fn query_qp(x: &mut Exec<'_>, i: QueryQpIn) -> Result<QueryQpOut, Fail> {
    let qp = x
        .hca
        .qps
        .get(&i.qpn)
        .ok_or(fail(Status::NotFound, Syndrome::NoQp))?;
    let (state, attr, _) = x.hca.port.engine().query_qp(i.qpn)?;
    Ok(QueryQpOut {
        attr: qp_attr_to_abi(state, &attr, &qp.cap),
        qp_type: qp.qp_type.raw(),
        sq_sig_all: u8::from(qp.sq_sig_all),
        rsvd0: 0,
        pdn: qp.pdn,
        send_cqn: qp.send_cqn,
        recv_cqn: qp.recv_cqn,
        srqn: qp.srqn.unwrap_or(num::NONE),
        rsvd1: 0,
    })
}

fn destroy_qp(x: &mut Exec<'_>, i: DestroyQpIn) -> Result<(), Fail> {
    if !x.hca.qps.contains_key(&i.qpn) {
        return Err(fail(Status::NotFound, Syndrome::NoQp));
    }
    x.engine().destroy_qp(i.qpn)?;
    let Some(qp) = x.hca.qps.remove(&i.qpn) else {
        return Ok(());
    };
    x.hca.slots.remove(&qp.db);
    for cqn in [qp.send_cqn, qp.recv_cqn] {
        if let Some(cq) = x.hca.cqs.get_mut(&cqn) {
            cq.users = cq.users.saturating_sub(1);
        }
    }
    if let Some(s) = qp.srqn.and_then(|s| x.hca.srqs.get_mut(&s)) {
        s.users = s.users.saturating_sub(1);
    }
    Ok(())
}

// ---------------------------------------------------------------- MRs

fn reg_mr(x: &mut Exec<'_>, i: RegMrIn) -> Result<RegMrOut, Fail> {
    reserved(i.rsvd == 0)?;
    if i.flags & !reg_mr_flags::DMA != 0 {
        return Err(fail(Status::BadParam, Syndrome::Flags));
    }
    let access = check_access(i.access)?;
    pd_exists(x, i.pdn)?;
    let key = if i.flags & reg_mr_flags::DMA != 0 {
        // The identity MR: iova, length and the page list are ignored; the
        // guest memory map refuses what is not the guest's.
        x.engine().mrs().reg_dma_mr(i.pdn, access)?
    } else {
        let pages = x.mr_pages(&i.pbl)?;
        let page_size = 1u64 << i.pbl.page_shift;
        x.engine()
            .mrs()
            .reg_mr(i.pdn, i.iova, i.length, access, page_size, pages)?
    };
    Ok(RegMrOut {
        lkey: key,
        rkey: key,
    })
}

fn rereg_mr(x: &mut Exec<'_>, i: ReregMrIn) -> Result<RegMrOut, Fail> {
    let all = rereg::CHANGE_TRANSLATION | rereg::CHANGE_PD | rereg::CHANGE_ACCESS;
    if i.change == 0 || i.change & !all != 0 {
        return Err(fail(Status::BadParam, Syndrome::Flags));
    }
    if x.engine().mrs().mr(i.lkey).is_none() {
        return Err(fail(Status::NotFound, Syndrome::NoMr));
    }
    let mut change = Rereg::default();
    if i.change & rereg::CHANGE_PD != 0 {
        pd_exists(x, i.pdn)?;
        change.pd = Some(i.pdn);
    }
    if i.change & rereg::CHANGE_ACCESS != 0 {
        change.access = Some(check_access(i.access)?);
    }
    if i.change & rereg::CHANGE_TRANSLATION != 0 {
        change.translation = Some(Translation {
            iova: i.iova,
            length: i.length,
            page_size: 1u64 << i.pbl.page_shift.min(63),
            pages: x.mr_pages(&i.pbl)?,
        });
    }
    // Checked as a whole by the engine, which keeps the keys (MP-02).
    let key = x.engine().mrs().rereg_mr(i.lkey, change)?;
    Ok(RegMrOut {
        lkey: key,
        rkey: key,
    })
}

fn dereg_mr(x: &mut Exec<'_>, i: DeregMrIn) -> Result<(), Fail> {
    // BUSY while memory windows are bound to it (MP-06, MP-07).
    Ok(x.engine().mrs().dereg_mr(i.lkey)?)
}

// ---------------------------------------------------------------- MWs

/// ALLOC_MW (MP-06 type 1, MP-07 type 2B): an unbound window in the PD; the
/// PD is BUSY while it exists.
fn alloc_mw(x: &mut Exec<'_>, i: AllocMwIn) -> Result<AllocMwOut, Fail> {
    let ty = match MwType::from_raw(i.mw_type) {
        Some(MwType::Type1) => tv::MwType::Type1,
        Some(MwType::Type2) => tv::MwType::Type2,
        None => return Err(fail(Status::BadParam, Syndrome::AttrValue)),
    };
    pd_exists(x, i.pdn)?;
    Ok(AllocMwOut {
        rkey: x.engine().alloc_mw(i.pdn, ty)?,
    })
}

/// DEALLOC_MW: by the window's current R_Key; a bound window is unbound.
fn dealloc_mw(x: &mut Exec<'_>, i: DeallocMwIn) -> Result<(), Fail> {
    Ok(x.engine().dealloc_mw(i.rkey)?)
}
