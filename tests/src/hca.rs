//! The driver: bring-up through BAR0 (abi::bar0 BAR0_RULES, step by step), the
//! command queue (abi::cmd COMMAND_PROTOCOL), EQ 0, and a typed wrapper for every
//! command. The data path (WQEs, doorbells, CQEs, EQEs) is in [`crate::verbs`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use device::abi::bar0::{dev_ctrl, dev_status, reg, CtxStatus, CtxTable, Fatal};
use device::abi::cmd::{
    cmd_const, cmd_flags, cmd_owner, commands, pbl_const, reg_mr_flags, AllocMwIn, AllocMwOut,
    AllocPdOut, Av, Cmd, CreateCqIn, CreateCqOut, CreateEqIn, CreateEqOut, CreateQpIn, CreateQpOut,
    CreateSrqIn, CreateSrqOut, DeallocMwIn, DeallocPdIn, DeregMrIn, DestroyCqIn, DestroyEqIn,
    DestroyQpIn, DestroySrqIn, DeviceAttr, ModifyQpIn, ModifySrqIn, MwType, Opcode, Pbl, PortAttr,
    QpAttr, QpCap, QueryCountersIn, QueryCountersOut, QueryPortIn, QueryQpIn, QueryQpOut,
    QuerySrqIn, QuerySrqOut, RegMrIn, RegMrOut, ReregMrIn, ResizeCqIn, ResizeCqOut, ResizeSrqIn,
    ResizeSrqOut, Status,
};
use device::abi::counters::CounterSet;
use device::abi::cqe::{entry_const, Eqe};
use device::abi::ident::{bar, ident};
use device::abi::layout::{AbiStruct, Field};
use device::abi::uar::uar;
use device::abi::verbs::{access, num, qp_attr_mask as m, srq_attr_mask, Mtu, QpState, QpType};
use device::abi::wqe::{wqe_const, RecvCtrl, Sge};

use crate::guest::{self, Buf, Guest, Layout, PAGE};
use crate::util::log2_ceil;

// ---------------------------------------------------------------- parameters

/// A command parameter: an ABI struct, or [`Nothing`].
pub trait Param: Sized {
    /// Bytes; 0 for [`Nothing`].
    const SIZE: usize;
    fn encode(&self) -> Vec<u8>;
    fn decode(b: &[u8]) -> Self;
}

impl<T: AbiStruct> Param for T {
    const SIZE: usize = <T as Field>::SIZE;
    fn encode(&self) -> Vec<u8> {
        let mut v = vec![0; <T as Field>::SIZE];
        self.put(&mut v);
        v
    }
    fn decode(b: &[u8]) -> T {
        T::get(b)
    }
}

/// No input or no output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Nothing;

impl Param for Nothing {
    const SIZE: usize = 0;
    fn encode(&self) -> Vec<u8> {
        Vec::new()
    }
    fn decode(_: &[u8]) -> Nothing {
        Nothing
    }
}

// ---------------------------------------------------------------- errors

/// Why a command did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdError {
    /// Completed with a status other than OK.
    Status {
        opcode: u16,
        status: u8,
        syndrome: u32,
    },
    /// The device did not clear `owner` in time.
    Timeout { opcode: u16, waited: Duration },
    /// DEV_STATUS.FATAL is set (FATAL_SYNDROME).
    Fatal { syndrome: u32 },
    /// The vfio-user connection failed.
    Vfio(String),
}

impl CmdError {
    /// The status, if the command completed.
    pub fn status(&self) -> Option<Status> {
        match self {
            CmdError::Status { status, .. } => Status::from_raw(*status),
            _ => None,
        }
    }

    /// The raw status byte, if the command completed.
    pub fn raw_status(&self) -> Option<u8> {
        match self {
            CmdError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = |o: u16| {
            Opcode::from_raw(o).map_or_else(|| format!("opcode {o:#x}"), |x| format!("{x:?}"))
        };
        match self {
            CmdError::Status {
                opcode,
                status,
                syndrome,
            } => {
                let s = Status::from_raw(*status)
                    .map_or_else(|| format!("status {status}"), |s| format!("{s:?}"));
                write!(f, "{}: {s} (syndrome {syndrome:#x})", op(*opcode))
            }
            CmdError::Timeout { opcode, waited } => {
                write!(f, "{}: no completion after {waited:?}", op(*opcode))
            }
            CmdError::Fatal { syndrome } => {
                let s = Fatal::from_raw(*syndrome)
                    .map_or_else(|| format!("{syndrome}"), |x| format!("{x:?}"));
                write!(f, "device FATAL: {s}")
            }
            CmdError::Vfio(e) => write!(f, "vfio-user: {e}"),
        }
    }
}

impl std::error::Error for CmdError {}

impl From<guest::Error> for CmdError {
    fn from(e: guest::Error) -> CmdError {
        CmdError::Vfio(e.to_string())
    }
}

/// Why bring-up failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BringUpError {
    Vfio(String),
    /// DEV_STATUS did not reach the state in time.
    Timeout {
        waiting_for: &'static str,
        status: u32,
    },
    BadMagic(u32),
    /// The device's ABI major differs from ours.
    AbiMismatch {
        device: u32,
        driver: u32,
    },
    /// ENABLE ended in FATAL with this syndrome.
    Fatal(u32),
    /// A command of the probe (NOP, QUERY_DEVICE, QUERY_PORT) failed.
    Cmd(CmdError),
}

impl fmt::Display for BringUpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bring-up: {self:?}")
    }
}

impl std::error::Error for BringUpError {}

impl From<guest::Error> for BringUpError {
    fn from(e: guest::Error) -> BringUpError {
        BringUpError::Vfio(e.to_string())
    }
}

impl From<CmdError> for BringUpError {
    fn from(e: CmdError) -> BringUpError {
        BringUpError::Cmd(e)
    }
}

// ---------------------------------------------------------------- configuration

/// Driver settings.
#[derive(Debug, Clone)]
pub struct HcaConfig {
    /// log2 of command slots (clamped to CAP_MAX_CMDQ_LOG2).
    pub cmdq_log2: u32,
    /// log2 of EQ 0 entries (clamped to CAP_MAX_EQ_LOG2).
    pub eq0_log2: u32,
    /// How long one command may take.
    pub cmd_timeout: Duration,
    /// How long RESET and ENABLE may take.
    pub ready_timeout: Duration,
    /// Set VHCA_CMD_F_EVENT on every command and check its COMMAND_DONE EQE.
    pub cmd_events: bool,
    /// Keep at most this many asynchronous EQEs (older ones are dropped).
    pub max_kept_events: usize,
}

impl Default for HcaConfig {
    fn default() -> HcaConfig {
        HcaConfig {
            cmdq_log2: 6,
            eq0_log2: 10,
            cmd_timeout: Duration::from_secs(10),
            ready_timeout: Duration::from_secs(5),
            cmd_events: false,
            max_kept_events: 1 << 16,
        }
    }
}

/// The CAP_* registers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_srq: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_eq: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    pub max_inline: u32,
    pub num_uars: u32,
    pub msix_vectors: u32,
    pub max_cmdq_log2: u32,
    pub max_eq_log2: u32,
    pub max_srq_wr: u32,
    pub num_ports: u32,
    pub flags: u32,
}

// ---------------------------------------------------------------- objects

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

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pd(pub u32);

/// An event queue (EQ 0 is the async EQ, not created by command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EqH {
    pub eqn: u32,
    pub vector: u32,
}

/// A completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CqH {
    pub cqn: u32,
}

/// A shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SrqH {
    pub srqn: u32,
}

/// A queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpH {
    pub qpn: u32,
    pub qp_type: QpType,
}

/// A registered memory region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mr {
    pub lkey: u32,
    pub rkey: u32,
    pub pdn: u32,
    pub iova: u64,
    pub length: u64,
    pub access: u32,
    /// Pages holding the page list.
    pub meta: Vec<u64>,
}

impl Mr {
    /// An SGE over `[off, off + len)` of `buf` through this MR.
    pub fn sge(&self, buf: &Buf, off: usize, len: usize) -> Sge {
        Sge {
            addr: buf.va(off),
            length: len as u32,
            lkey: self.lkey,
        }
    }
}

pub(crate) struct EqState {
    pub ring: Ring,
    pub vector: u32,
    pub slot: DbSlot,
    pub ci: u32,
    pub arm: u32,
}

pub(crate) struct CqState {
    pub ring: Ring,
    pub slot: DbSlot,
    pub ci: u32,
    pub arm_sn: u32,
    pub eqn: u32,
    pub entries: u32,
}

pub(crate) struct QpSt {
    pub qp_type: QpType,
    pub sq: Ring,
    pub rq: Option<Ring>,
    pub slot: DbSlot,
    pub sq_pi: u32,
    pub rq_pi: u32,
    /// wr_ids of send WQEs posted and not yet retired, oldest first.
    pub sq_outstanding: VecDeque<u64>,
    pub rq_outstanding: u32,
    pub srqn: Option<u32>,
    pub cap: QpCap,
    pub send_cqn: u32,
    pub recv_cqn: u32,
}

pub(crate) struct SrqState {
    pub ring: Ring,
    pub slot: DbSlot,
    pub pi: u32,
    pub outstanding: u32,
    pub max_wr: u32,
    pub max_sge: u32,
}

/// What to create a QP with.
#[derive(Debug, Clone)]
pub struct QpInit {
    pub qp_type: QpType,
    pub pd: Pd,
    pub send_cq: CqH,
    pub recv_cq: CqH,
    pub srq: Option<SrqH>,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline: u32,
    pub sq_sig_all: bool,
    /// Ring pages: contiguous (CONTIGUOUS page list) or scattered (ONE_LEVEL).
    pub layout: Layout,
    /// UAR page of the doorbell slot (None: the first free slot).
    pub uar: Option<u32>,
}

impl QpInit {
    pub fn new(qp_type: QpType, pd: Pd, cq: CqH) -> QpInit {
        QpInit {
            qp_type,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline: 64,
            sq_sig_all: false,
            layout: Layout::Scattered,
            uar: None,
        }
    }

    pub fn rc(pd: Pd, cq: CqH) -> QpInit {
        QpInit::new(QpType::Rc, pd, cq)
    }

    pub fn uc(pd: Pd, cq: CqH) -> QpInit {
        QpInit::new(QpType::Uc, pd, cq)
    }

    pub fn ud(pd: Pd, cq: CqH) -> QpInit {
        QpInit::new(QpType::Ud, pd, cq)
    }

    pub fn wr(mut self, send: u32, recv: u32) -> QpInit {
        self.max_send_wr = send;
        self.max_recv_wr = recv;
        self
    }

    pub fn sge(mut self, send: u32, recv: u32) -> QpInit {
        self.max_send_sge = send;
        self.max_recv_sge = recv;
        self
    }

    pub fn inline(mut self, n: u32) -> QpInit {
        self.max_inline = n;
        self
    }

    pub fn srq(mut self, srq: SrqH) -> QpInit {
        self.srq = Some(srq);
        self.max_recv_wr = 0;
        self
    }

    pub fn recv_cq(mut self, cq: CqH) -> QpInit {
        self.recv_cq = cq;
        self
    }

    pub fn layout(mut self, l: Layout) -> QpInit {
        self.layout = l;
        self
    }

    pub fn sig_all(mut self) -> QpInit {
        self.sq_sig_all = true;
        self
    }

    pub fn uar(mut self, uar: u32) -> QpInit {
        self.uar = Some(uar);
        self
    }
}

/// The peer of a connected QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    pub lid: u16,
    pub qpn: u32,
    /// The PSN the peer's requester starts at (our rq_psn).
    pub psn: u32,
}

/// Attributes for bringing a QP to RTS.
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    /// `enum vhca_mtu`; None: the port's active MTU.
    pub mtu: Option<u8>,
    /// Our requester's first PSN.
    pub sq_psn: u32,
    /// Local ACK timeout exponent (4.096 us * 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub access: u32,
    pub qkey: u32,
    pub sl: u8,
}

impl Default for ConnOpts {
    fn default() -> ConnOpts {
        ConnOpts {
            mtu: None,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC
                | access::FLUSH_GLOBAL
                | access::FLUSH_PERSISTENT,
            qkey: 0x1111_1111,
            sl: 0,
        }
    }
}

// ---------------------------------------------------------------- the driver

/// The HCA as its driver sees it, over one [`Guest`].
pub struct Hca {
    pub(crate) g: Guest,
    pub(crate) cfg: HcaConfig,
    caps: Caps,
    abi_version: u32,
    // Command queue.
    cmdq: u64,
    cmdq_log2: u32,
    cmd_pi: u32,
    token: u16,
    mbox_in: u64,
    mbox_out: u64,
    // EQ 0.
    pub(crate) eq0: EqState,
    pub(crate) events: VecDeque<Eqe>,
    pub(crate) events_dropped: u64,
    pub(crate) cmd_done: VecDeque<Eqe>,
    // Objects.
    slots: BTreeSet<DbSlot>,
    pub(crate) eqs: HashMap<u32, EqState>,
    pub(crate) cqs: HashMap<u32, CqState>,
    pub(crate) qps: HashMap<u32, QpSt>,
    pub(crate) srqs: HashMap<u32, SrqState>,
    pds: BTreeSet<u32>,
    /// Live MR keys and their page-list pages.
    mrs: HashMap<u32, Vec<u64>>,
    dev: DeviceAttr,
    port: PortAttr,
    /// WAKE writes done by the doorbell protocol.
    pub wakes: u64,
    pub(crate) wake_enabled: bool,
}

impl fmt::Debug for Hca {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hca")
            .field("caps", &self.caps)
            .field("lid", &self.port.lid)
            .field("qps", &self.qps.len())
            .field("cqs", &self.cqs.len())
            .finish_non_exhaustive()
    }
}

fn eq0_slot() -> DbSlot {
    DbSlot {
        uar: uar::KERNEL_UAR,
        slot: uar::EQ0_SLOT as u16,
    }
}

impl Hca {
    /// Brings the device up exactly as abi::bar0 BAR0_RULES says, then probes
    /// the queue with NOP and caches QUERY_DEVICE and QUERY_PORT.
    pub fn bring_up(g: Guest) -> Result<Hca, BringUpError> {
        Hca::bring_up_with(g, HcaConfig::default())
    }

    pub fn bring_up_with(mut g: Guest, cfg: HcaConfig) -> Result<Hca, BringUpError> {
        // Reset, then wait for READY with ENABLED clear.
        g.bar0_write32(reg::DEV_CTRL, dev_ctrl::RESET)?;
        let st = wait_status(&mut g, cfg.ready_timeout, |s| {
            s & dev_status::READY != 0 && s & dev_status::ENABLED == 0
        })
        .map_err(|status| BringUpError::Timeout {
            waiting_for: "READY after RESET",
            status,
        })?;
        log::debug!("bring-up: DEV_STATUS {st:#x} after reset");
        // Identity.
        let magic = g.bar0_read32(reg::MAGIC)?;
        if magic != ident::MAGIC {
            return Err(BringUpError::BadMagic(magic));
        }
        let abi_version = g.bar0_read32(reg::ABI_VERSION)?;
        if !abi_compatible(abi_version, ident::ABI_VERSION) {
            return Err(BringUpError::AbiMismatch {
                device: abi_version,
                driver: ident::ABI_VERSION,
            });
        }
        let caps = read_caps(&mut g)?;
        g.bar0_write32(reg::DRIVER_ABI, ident::ABI_VERSION)?;
        // Command queue.
        let cmdq_log2 = cfg.cmdq_log2.clamp(1, caps.max_cmdq_log2.max(1));
        let cmdq_bytes = (1u64 << cmdq_log2) * u64::from(cmd_const::SLOT_SIZE);
        let cmdq = g.alloc_pages(cmdq_bytes.div_ceil(PAGE) as usize, 1);
        g.bar0_write32(reg::CMDQ_BASE_LO, cmdq as u32)?;
        g.bar0_write32(reg::CMDQ_BASE_HI, (cmdq >> 32) as u32)?;
        g.bar0_write32(reg::CMDQ_LOG2_SIZE, cmdq_log2)?;
        // EQ 0.
        let eq0_log2 = cfg.eq0_log2.clamp(1, caps.max_eq_log2.max(1));
        let eq0_bytes = (1u64 << eq0_log2) * u64::from(entry_const::EQE_SIZE);
        let eq0_pages = eq0_bytes.div_ceil(PAGE) as usize;
        let eq0_base = g.alloc_pages(eq0_pages, 1);
        g.bar0_write32(reg::EQ0_BASE_LO, eq0_base as u32)?;
        g.bar0_write32(reg::EQ0_BASE_HI, (eq0_base >> 32) as u32)?;
        g.bar0_write32(reg::EQ0_LOG2_SIZE, eq0_log2)?;
        // Arm EQ 0 through its slot.
        let slot = eq0_slot();
        g.bar2_store32(slot.offset(), 0)?;
        g.bar2_store32(slot.offset() + 4, 1)?;
        let eq0 = EqState {
            ring: Ring {
                pages: (0..eq0_pages as u64).map(|i| eq0_base + i * PAGE).collect(),
                log2: eq0_log2,
                shift: 4,
                meta: Vec::new(),
                pbl: Pbl {
                    addr: eq0_base,
                    npages: eq0_pages as u32,
                    page_shift: 12,
                    levels: pbl_const::CONTIGUOUS as u8,
                    rsvd: 0,
                },
            },
            vector: bar::MSIX_VECTOR_ASYNC,
            slot,
            ci: 0,
            arm: 1,
        };
        // Enable.
        g.bar0_write32(reg::DEV_CTRL, dev_ctrl::ENABLE)?;
        let st = wait_status(&mut g, cfg.ready_timeout, |s| {
            s & (dev_status::ENABLED | dev_status::FATAL) != 0
        })
        .map_err(|status| BringUpError::Timeout {
            waiting_for: "ENABLED or FATAL after ENABLE",
            status,
        })?;
        if st & dev_status::FATAL != 0 {
            let syndrome = g.bar0_read32(reg::FATAL_SYNDROME)?;
            return Err(BringUpError::Fatal(syndrome));
        }
        let mbox_in = g.alloc_pages(1, 1);
        let mbox_out = g.alloc_pages(1, 1);
        let mut slots = BTreeSet::new();
        slots.insert(slot);
        let mut h = Hca {
            g,
            cfg,
            caps,
            abi_version,
            cmdq,
            cmdq_log2,
            cmd_pi: 0,
            token: 0,
            mbox_in,
            mbox_out,
            eq0,
            events: VecDeque::new(),
            events_dropped: 0,
            cmd_done: VecDeque::new(),
            slots,
            eqs: HashMap::new(),
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashMap::new(),
            pds: BTreeSet::new(),
            mrs: HashMap::new(),
            dev: DeviceAttr::default(),
            port: PortAttr::default(),
            wakes: 0,
            wake_enabled: true,
        };
        h.nop()?;
        h.dev = h.query_device()?;
        h.port = h.query_port(num::PORT as u8)?;
        Ok(h)
    }

    pub fn guest(&self) -> &Guest {
        &self.g
    }

    pub fn guest_mut(&mut self) -> &mut Guest {
        &mut self.g
    }

    /// Gives the guest back (objects are abandoned; the device keeps them
    /// until reset or disconnect).
    pub fn into_guest(self) -> Guest {
        self.g
    }

    pub fn caps(&self) -> Caps {
        self.caps
    }

    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// QUERY_DEVICE as cached at bring-up.
    pub fn device_attr(&self) -> &DeviceAttr {
        &self.dev
    }

    /// QUERY_PORT(1) as cached at bring-up.
    pub fn port_attr(&self) -> &PortAttr {
        &self.port
    }

    /// Our LID.
    pub fn lid(&self) -> u16 {
        self.port.lid
    }

    pub fn read_reg(&mut self, off: u32) -> Result<u32, guest::Error> {
        self.g.bar0_read32(off)
    }

    pub fn write_reg(&mut self, off: u32, v: u32) -> Result<(), guest::Error> {
        self.g.bar0_write32(off, v)
    }

    pub fn dev_status(&mut self) -> Result<u32, guest::Error> {
        self.g.bar0_read32(reg::DEV_STATUS)
    }

    /// FATAL_SYNDROME if DEV_STATUS.FATAL is set.
    pub fn fatal(&mut self) -> Result<Option<u32>, guest::Error> {
        if self.dev_status()? & dev_status::FATAL != 0 {
            Ok(Some(self.g.bar0_read32(reg::FATAL_SYNDROME)?))
        } else {
            Ok(None)
        }
    }

    /// Reads one context record through the BAR0 window (4-byte reads):
    /// CTX_STATUS and the window's bytes.
    pub fn read_context(
        &mut self,
        table: CtxTable,
        index: u32,
    ) -> Result<(u32, Vec<u8>), guest::Error> {
        self.g.bar0_write32(reg::CTX_TABLE, table.raw())?;
        self.g.bar0_write32(reg::CTX_INDEX, index)?;
        let status = self.g.bar0_read32(reg::CTX_STATUS)?;
        let mut w = Vec::with_capacity(reg::CTX_WINDOW_SIZE as usize);
        for off in (0..reg::CTX_WINDOW_SIZE).step_by(4) {
            w.extend_from_slice(&self.g.bar0_read32(reg::CTX_WINDOW + off)?.to_le_bytes());
        }
        Ok((status, w))
    }

    /// Whether the window shows a live object `index` in `table`.
    pub fn context_exists(&mut self, table: CtxTable, index: u32) -> Result<bool, guest::Error> {
        Ok(self.read_context(table, index)?.0 == CtxStatus::Ok.raw())
    }

    // ------------------------------------------------------------ command queue

    /// Slots in the command ring.
    pub fn cmdq_slots(&self) -> u32 {
        1 << self.cmdq_log2
    }

    fn slot_addr(&self, index: u32) -> u64 {
        self.cmdq + u64::from(index & (self.cmdq_slots() - 1)) * u64::from(cmd_const::SLOT_SIZE)
    }

    /// Runs one command: `input` inline or in the input mailbox, `O` inline or
    /// in the output mailbox (abi::cmd COMMAND_PROTOCOL); polls `owner`.
    pub fn cmd<I: Param, O: Param>(&mut self, opcode: Opcode, input: &I) -> Result<O, CmdError> {
        if let Some(spec) = commands().into_iter().find(|c| c.opcode == opcode) {
            let size =
                |s: Option<device::abi::layout::StructEntry>| s.map_or(0, |e| (e.layout)().size);
            debug_assert_eq!(size(spec.input), I::SIZE, "{opcode:?}: input struct");
            debug_assert_eq!(size(spec.output), O::SIZE, "{opcode:?}: output struct");
        }
        let out = self.cmd_bytes(opcode.raw(), &input.encode(), O::SIZE)?;
        Ok(O::decode(&out))
    }

    /// Runs one command with raw parameter bytes; returns `out_size` output bytes.
    pub fn cmd_bytes(
        &mut self,
        opcode: u16,
        input: &[u8],
        out_size: usize,
    ) -> Result<Vec<u8>, CmdError> {
        let inline = cmd_const::INLINE_SIZE as usize;
        self.token = self.token.wrapping_add(1);
        let mut c = Cmd {
            opcode,
            token: self.token,
            flags: if self.cfg.cmd_events {
                cmd_flags::EVENT
            } else {
                0
            },
            ..Cmd::default()
        };
        if input.len() <= inline {
            c.data[..input.len()].copy_from_slice(input);
        } else {
            assert!(input.len() <= cmd_const::MAILBOX_MAX as usize);
            self.g.write(self.mbox_in, input);
            c.in_mailbox = self.mbox_in;
            c.in_len = input.len() as u16;
        }
        if out_size > inline {
            assert!(out_size <= cmd_const::MAILBOX_MAX as usize);
            self.g.fill(self.mbox_out, out_size, 0);
            c.out_mailbox = self.mbox_out;
            c.out_len = out_size as u16;
        }
        let index = self.cmd_pi;
        let done = self.exec_slots(&[c.to_bytes()], true)?;
        let r = Cmd::from_bytes(&done[0]);
        let result = if r.status != Status::Ok.raw() {
            Err(CmdError::Status {
                opcode,
                status: r.status,
                syndrome: r.syndrome,
            })
        } else if out_size == 0 {
            Ok(Vec::new())
        } else if out_size <= inline {
            Ok(r.data[..out_size].to_vec())
        } else {
            Ok(self.g.read_vec(self.mbox_out, out_size))
        };
        if self.cfg.cmd_events {
            self.expect_command_done(c.token, r.status, index)?;
        }
        log::trace!(
            "cmd {opcode:#x} -> status {} syndrome {:#x}",
            r.status,
            r.syndrome
        );
        result
    }

    fn expect_command_done(&mut self, token: u16, status: u8, index: u32) -> Result<(), CmdError> {
        let deadline = Instant::now() + self.cfg.cmd_timeout;
        loop {
            self.service();
            if let Some(pos) = self
                .cmd_done
                .iter()
                .position(|e| e.object == u32::from(token))
            {
                let e = self.cmd_done.remove(pos).expect("found");
                assert_eq!(
                    e.data,
                    u32::from(status),
                    "COMMAND_DONE of slot {index}: data is the status"
                );
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CmdError::Timeout {
                    opcode: 0,
                    waited: self.cfg.cmd_timeout,
                });
            }
            self.g
                .wait_vector(bar::MSIX_VECTOR_ASYNC, Duration::from_millis(5));
        }
    }

    /// Posts raw 64-byte slots at the producer index (as given: owner, opcode,
    /// everything), writes CMDQ_PI once, and waits until the device cleared
    /// `owner` in each slot posted with it set; returns the slots as the device
    /// left them. At most one ring's worth at a time.
    pub fn post_raw_cmds(&mut self, slots: &[[u8; 64]]) -> Result<Vec<[u8; 64]>, CmdError> {
        self.exec_slots(slots, false)
    }

    fn exec_slots(
        &mut self,
        slots: &[[u8; 64]],
        force_owner: bool,
    ) -> Result<Vec<[u8; 64]>, CmdError> {
        assert!(!slots.is_empty() && slots.len() as u32 <= self.cmdq_slots());
        let owner_at = std::mem::offset_of!(Cmd, owner) as u64;
        let first = self.cmd_pi;
        let mut wait_for = Vec::new();
        for (k, s) in slots.iter().enumerate() {
            let i = first.wrapping_add(k as u32);
            let a = self.slot_addr(i);
            let mut b = *s;
            let owner = if force_owner {
                cmd_owner::DEVICE
            } else {
                b[owner_at as usize]
            };
            b[owner_at as usize] = 0;
            self.g.write(a, &b);
            if owner != 0 {
                fence(Ordering::Release);
                self.g.ram_u8(a + owner_at).store(owner, Ordering::Release);
            }
            if owner & cmd_owner::DEVICE != 0 {
                wait_for.push(a);
            }
        }
        self.cmd_pi = first.wrapping_add(slots.len() as u32);
        self.g.bar0_write32(reg::CMDQ_PI, self.cmd_pi)?;
        let start = Instant::now();
        let mut spins = 0u32;
        for &a in &wait_for {
            loop {
                let o = self.g.ram_u8(a + owner_at).load(Ordering::Acquire);
                if o & cmd_owner::DEVICE == 0 {
                    break;
                }
                if start.elapsed() > self.cfg.cmd_timeout {
                    if let Some(s) = self.fatal()? {
                        return Err(CmdError::Fatal { syndrome: s });
                    }
                    let opcode = u16::from_le_bytes([slots[0][0], slots[0][1]]);
                    return Err(CmdError::Timeout {
                        opcode,
                        waited: start.elapsed(),
                    });
                }
                spins += 1;
                if spins < 2000 {
                    std::hint::spin_loop();
                } else if spins.is_multiple_of(1000) {
                    // Checking FATAL costs a message; do it rarely.
                    if let Some(s) = self.fatal()? {
                        return Err(CmdError::Fatal { syndrome: s });
                    }
                } else {
                    std::thread::sleep(Duration::from_micros(20));
                }
            }
        }
        fence(Ordering::Acquire);
        let out = (0..slots.len())
            .map(|k| {
                let mut b = [0u8; 64];
                self.g
                    .read(self.slot_addr(first.wrapping_add(k as u32)), &mut b);
                b
            })
            .collect();
        self.service();
        Ok(out)
    }

    /// The free-running command producer index.
    pub fn cmd_pi(&self) -> u32 {
        self.cmd_pi
    }

    /// Sets the producer index the next command is posted at (raw tests).
    pub fn set_cmd_pi(&mut self, pi: u32) {
        self.cmd_pi = pi;
    }

    /// Guest address of command slot `index`.
    pub fn cmd_slot_addr(&self, index: u32) -> u64 {
        self.slot_addr(index)
    }

    /// The input and output mailbox pages.
    pub fn mailboxes(&self) -> (u64, u64) {
        (self.mbox_in, self.mbox_out)
    }

    // ------------------------------------------------------------ slots and memory

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
    fn clear_slot(&mut self, s: DbSlot) -> Result<(), guest::Error> {
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

    // ------------------------------------------------------------ commands

    pub fn nop(&mut self) -> Result<(), CmdError> {
        self.cmd::<Nothing, Nothing>(Opcode::Nop, &Nothing)
            .map(|_| ())
    }

    pub fn query_device(&mut self) -> Result<DeviceAttr, CmdError> {
        self.cmd(Opcode::QueryDevice, &Nothing)
    }

    pub fn query_port(&mut self, port: u8) -> Result<PortAttr, CmdError> {
        self.cmd(Opcode::QueryPort, &QueryPortIn { port, rsvd: [0; 3] })
    }

    /// One counter set: its values (`count` of them).
    pub fn query_counters(&mut self, set: CounterSet) -> Result<Vec<u64>, CmdError> {
        let o: QueryCountersOut = self.cmd(
            Opcode::QueryCounters,
            &QueryCountersIn {
                port: num::PORT as u8,
                set: set.raw(),
                rsvd: 0,
            },
        )?;
        let n = (o.count as usize).min(o.values.len());
        Ok(o.values[..n].to_vec())
    }

    /// A counter of `set` by name (`retransmits`, `bad_wqes`, ...).
    pub fn counter(&mut self, set: CounterSet, name: &str) -> Result<Option<u64>, CmdError> {
        let v = self.query_counters(set)?;
        Ok(set
            .names()
            .iter()
            .position(|n| n == name)
            .and_then(|i| v.get(i).copied()))
    }

    /// A port counter by name (`rx_packets`, `retransmits`, ...).
    pub fn port_counter(&mut self, name: &str) -> Result<Option<u64>, CmdError> {
        self.counter(CounterSet::Port, name)
    }

    pub fn alloc_pd(&mut self) -> Result<Pd, CmdError> {
        let o: AllocPdOut = self.cmd(Opcode::AllocPd, &Nothing)?;
        self.pds.insert(o.pdn);
        Ok(Pd(o.pdn))
    }

    pub fn dealloc_pd(&mut self, pd: Pd) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeallocPd, &DeallocPdIn { pdn: pd.0 })?;
        self.pds.remove(&pd.0);
        Ok(())
    }

    /// A completion EQ of 2^log2 entries on MSI-X `vector`.
    pub fn create_eq(&mut self, log2: u32, vector: u32) -> Result<EqH, CmdError> {
        let ring = self.alloc_ring(log2, 4, Layout::Scattered);
        let slot = self.alloc_slot(Some(uar::KERNEL_UAR));
        self.clear_slot(slot)?;
        let input = CreateEqIn {
            ring: ring.pbl,
            uar: slot.uar,
            db_slot: slot.slot,
            vector: vector as u16,
            log2_entries: log2 as u8,
            rsvd: [0; 7],
        };
        match self.cmd::<_, CreateEqOut>(Opcode::CreateEq, &input) {
            Ok(o) => {
                // Arm it: a changed arm word allows the first interrupt.
                self.g.bar2_store32(slot.offset() + 4, 1)?;
                self.eqs.insert(
                    o.eqn,
                    EqState {
                        ring,
                        vector,
                        slot,
                        ci: 0,
                        arm: 1,
                    },
                );
                Ok(EqH { eqn: o.eqn, vector })
            }
            Err(e) => {
                self.free_ring(&ring);
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    pub fn destroy_eq(&mut self, eq: EqH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyEq, &DestroyEqIn { eqn: eq.eqn })?;
        if let Some(s) = self.eqs.remove(&eq.eqn) {
            self.free_ring(&s.ring);
            self.free_slot(s.slot);
        }
        Ok(())
    }

    /// A CQ of 2^log2 entries reporting events to EQ `eqn` (0: the async EQ).
    pub fn create_cq(&mut self, log2: u32, eqn: u32) -> Result<CqH, CmdError> {
        self.create_cq_with(log2, eqn, Layout::Scattered, None)
    }

    pub fn create_cq_with(
        &mut self,
        log2: u32,
        eqn: u32,
        layout: Layout,
        uar_page: Option<u32>,
    ) -> Result<CqH, CmdError> {
        let ring = self.alloc_ring(log2, 6, layout);
        let slot = self.alloc_slot(uar_page);
        self.clear_slot(slot)?;
        let input = CreateCqIn {
            ring: ring.pbl,
            eqn,
            uar: slot.uar,
            db_slot: slot.slot,
            log2_entries: log2 as u8,
            rsvd: [0; 5],
        };
        match self.cmd::<_, CreateCqOut>(Opcode::CreateCq, &input) {
            Ok(o) => {
                self.cqs.insert(
                    o.cqn,
                    CqState {
                        ring,
                        slot,
                        ci: 0,
                        arm_sn: 0,
                        eqn,
                        entries: o.entries,
                    },
                );
                Ok(CqH { cqn: o.cqn })
            }
            Err(e) => {
                self.free_ring(&ring);
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    pub fn destroy_cq(&mut self, cq: CqH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyCq, &DestroyCqIn { cqn: cq.cqn })?;
        if let Some(s) = self.cqs.remove(&cq.cqn) {
            self.free_ring(&s.ring);
            self.free_slot(s.slot);
        }
        Ok(())
    }

    /// RESIZE_CQ onto a new scattered ring of 2^log2 CQEs, as a driver does
    /// (abi::cmd RESIZE_PROTOCOL): store ci, run the command, then switch
    /// rings keeping ci. The new ring is filled with garbage first (owner bits
    /// set), since the device must initialise it. Returns the new entries.
    pub fn resize_cq(&mut self, cq: CqH, log2: u32) -> Result<u32, CmdError> {
        let ring = self.alloc_ring(log2, 6, Layout::Scattered);
        for &p in &ring.pages {
            self.g.fill(p, PAGE as usize, 0xa5);
        }
        let input = ResizeCqIn {
            cqn: cq.cqn,
            log2_entries: log2 as u8,
            rsvd: [0; 3],
            ring: ring.pbl,
        };
        self.resize_cq_raw(cq, &input, ring)
    }

    /// RESIZE_CQ with the given input over `ring` (freed on failure).
    pub fn resize_cq_raw(
        &mut self,
        cq: CqH,
        input: &ResizeCqIn,
        ring: Ring,
    ) -> Result<u32, CmdError> {
        if let Some(c) = self.cqs.get(&cq.cqn) {
            let (off, ci) = (c.slot.offset(), c.ci);
            self.g.bar2_store32(off, ci)?;
        }
        match self.cmd::<_, ResizeCqOut>(Opcode::ResizeCq, input) {
            Ok(o) => {
                let old = match self.cqs.get_mut(&cq.cqn) {
                    Some(c) => {
                        c.entries = o.entries;
                        Some(std::mem::replace(&mut c.ring, ring))
                    }
                    None => Some(ring),
                };
                if let Some(old) = old {
                    self.free_ring(&old);
                }
                Ok(o.entries)
            }
            Err(e) => {
                self.free_ring(&ring);
                Err(e)
            }
        }
    }

    /// CQEs the device has written and the driver not polled (a peek).
    pub fn cq_ready(&self, cq: CqH) -> u32 {
        let Some(c) = self.cqs.get(&cq.cqn) else {
            return 0;
        };
        let mut n = 0u32;
        while n < c.ring.entries() {
            let i = c.ci.wrapping_add(n);
            let owner = self
                .g
                .ram_u8(c.ring.addr(i) + entry_const::CQE_SIZE as u64 - 1)
                .load(Ordering::Acquire);
            if owner & entry_const::OWNER_BIT as u8 != device::abi::cqe::owner_bit(i, c.ring.log2) {
                break;
            }
            n += 1;
        }
        n
    }

    /// The entries CREATE_CQ granted.
    pub fn cq_entries(&self, cq: CqH) -> u32 {
        self.cqs.get(&cq.cqn).map_or(0, |c| c.entries)
    }

    /// An SRQ of at least `max_wr` WQEs of `max_sge` SGEs, limit armed at `limit`.
    pub fn create_srq(
        &mut self,
        pd: Pd,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<SrqH, CmdError> {
        let log2 = log2_ceil(u64::from(max_wr.max(1)));
        let shift = log2_ceil(u64::from(
            RecvCtrl::SIZE as u32 + max_sge * Sge::SIZE as u32,
        ))
        .max(wqe_const::RQ_MIN_WQE_SHIFT);
        let ring = self.alloc_ring(log2, shift, Layout::Scattered);
        let slot = self.alloc_slot(None);
        self.clear_slot(slot)?;
        let input = CreateSrqIn {
            pdn: pd.0,
            max_wr,
            max_sge,
            srq_limit: limit,
            uar: slot.uar,
            db_slot: slot.slot,
            log2_entries: log2 as u8,
            wqe_shift: shift as u8,
            ring: ring.pbl,
        };
        match self.cmd::<_, CreateSrqOut>(Opcode::CreateSrq, &input) {
            Ok(o) => {
                self.srqs.insert(
                    o.srqn,
                    SrqState {
                        ring,
                        slot,
                        pi: 0,
                        outstanding: 0,
                        max_wr: o.max_wr,
                        max_sge: o.max_sge,
                    },
                );
                Ok(SrqH { srqn: o.srqn })
            }
            Err(e) => {
                self.free_ring(&ring);
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    /// Sets and arms the SRQ limit.
    pub fn arm_srq_limit(&mut self, srq: SrqH, limit: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(
            Opcode::ModifySrq,
            &ModifySrqIn {
                srqn: srq.srqn,
                attr_mask: srq_attr_mask::LIMIT,
                max_wr: 0,
                srq_limit: limit,
            },
        )
        .map(|_| ())
    }

    pub fn modify_srq(&mut self, input: &ModifySrqIn) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::ModifySrq, input).map(|_| ())
    }

    pub fn query_srq(&mut self, srq: SrqH) -> Result<QuerySrqOut, CmdError> {
        self.cmd(Opcode::QuerySrq, &QuerySrqIn { srqn: srq.srqn })
    }

    /// RESIZE_SRQ onto a new ring of 2^log2 WQEs of the SRQ's stride, as a
    /// driver does: no post meanwhile, then switch rings keeping pi. Returns
    /// the new max_wr.
    pub fn resize_srq(&mut self, srq: SrqH, max_wr: u32, log2: u32) -> Result<u32, CmdError> {
        let shift = self.srqs.get(&srq.srqn).map_or(5, |s| s.ring.shift);
        let ring = self.alloc_ring(log2, shift, Layout::Scattered);
        let input = ResizeSrqIn {
            srqn: srq.srqn,
            max_wr,
            log2_entries: log2 as u8,
            rsvd: [0; 7],
            ring: ring.pbl,
        };
        match self.cmd::<_, ResizeSrqOut>(Opcode::ResizeSrq, &input) {
            Ok(o) => {
                let old = match self.srqs.get_mut(&srq.srqn) {
                    Some(s) => {
                        s.max_wr = o.max_wr;
                        std::mem::replace(&mut s.ring, ring)
                    }
                    None => ring,
                };
                self.free_ring(&old);
                Ok(o.max_wr)
            }
            Err(e) => {
                self.free_ring(&ring);
                Err(e)
            }
        }
    }

    pub fn destroy_srq(&mut self, srq: SrqH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroySrq, &DestroySrqIn { srqn: srq.srqn })?;
        if let Some(s) = self.srqs.remove(&srq.srqn) {
            self.free_ring(&s.ring);
            self.free_slot(s.slot);
        }
        Ok(())
    }

    /// Creates a QP (in Reset) with rings sized for `init`.
    pub fn create_qp(&mut self, init: &QpInit) -> Result<QpH, CmdError> {
        let ud = matches!(init.qp_type, QpType::Ud | QpType::Gsi | QpType::Smi);
        let headers = 16 + if ud { 48 } else { 0 } + 32;
        let data = (init.max_send_sge * Sge::SIZE as u32).max(init.max_inline);
        let sq_shift = log2_ceil(u64::from(headers + data)).max(wqe_const::SQ_MIN_WQE_SHIFT);
        assert!(sq_shift <= wqe_const::MAX_WQE_SHIFT, "send WQE too large");
        let rq_shift = log2_ceil(u64::from(
            RecvCtrl::SIZE as u32 + init.max_recv_sge.max(1) * Sge::SIZE as u32,
        ))
        .max(wqe_const::RQ_MIN_WQE_SHIFT);
        let log2_sq = log2_ceil(u64::from(init.max_send_wr.max(1)));
        let sq = self.alloc_ring(log2_sq, sq_shift, init.layout);
        let (rq, log2_rq) = if init.srq.is_some() {
            (None, 0)
        } else {
            let l = log2_ceil(u64::from(init.max_recv_wr.max(1)));
            (Some(self.alloc_ring(l, rq_shift, init.layout)), l)
        };
        let slot = self.alloc_slot(init.uar);
        self.clear_slot(slot)?;
        let cap = QpCap {
            max_send_wr: init.max_send_wr,
            max_recv_wr: if init.srq.is_some() {
                0
            } else {
                init.max_recv_wr
            },
            max_send_sge: init.max_send_sge,
            max_recv_sge: init.max_recv_sge,
            max_inline_data: init.max_inline,
        };
        let input = CreateQpIn {
            qp_type: init.qp_type.raw(),
            sq_sig_all: u8::from(init.sq_sig_all),
            sq_wqe_shift: sq_shift as u8,
            rq_wqe_shift: rq_shift as u8,
            log2_sq_size: log2_sq as u8,
            log2_rq_size: log2_rq as u8,
            port: num::PORT as u8,
            rsvd0: 0,
            pdn: init.pd.0,
            send_cqn: init.send_cq.cqn,
            recv_cqn: init.recv_cq.cqn,
            srqn: init.srq.map_or(num::NONE, |s| s.srqn),
            cap,
            uar: slot.uar,
            db_slot: slot.slot,
            rsvd1: [0; 6],
            sq: sq.pbl,
            rq: rq.as_ref().map_or(Pbl::default(), |r| r.pbl),
        };
        match self.cmd::<_, CreateQpOut>(Opcode::CreateQp, &input) {
            Ok(o) => {
                self.qps.insert(
                    o.qpn,
                    QpSt {
                        qp_type: init.qp_type,
                        sq,
                        rq,
                        slot,
                        sq_pi: 0,
                        rq_pi: 0,
                        sq_outstanding: VecDeque::new(),
                        rq_outstanding: 0,
                        srqn: init.srq.map(|s| s.srqn),
                        cap: o.cap,
                        send_cqn: init.send_cq.cqn,
                        recv_cqn: init.recv_cq.cqn,
                    },
                );
                Ok(QpH {
                    qpn: o.qpn,
                    qp_type: init.qp_type,
                })
            }
            Err(e) => {
                self.free_ring(&sq);
                if let Some(r) = &rq {
                    self.free_ring(r);
                }
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    /// The sizes CREATE_QP granted.
    pub fn qp_cap(&self, qp: QpH) -> QpCap {
        self.qps.get(&qp.qpn).map_or(QpCap::default(), |q| q.cap)
    }

    /// The (send, receive) CQNs a QP was created with.
    pub fn qp_cqs(&self, qp: QpH) -> (u32, u32) {
        self.qps
            .get(&qp.qpn)
            .map_or((0, 0), |q| (q.send_cqn, q.recv_cqn))
    }

    /// MODIFY_QP with a raw mask and attributes. Going to Reset forgets the
    /// WQEs the driver had posted (the device discards them too).
    pub fn modify_qp(&mut self, qp: QpH, mask: u32, attr: &QpAttr) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(
            Opcode::ModifyQp,
            &ModifyQpIn {
                qpn: qp.qpn,
                attr_mask: mask,
                attr: *attr,
            },
        )?;
        if mask & m::STATE != 0 && attr.qp_state == QpState::Reset.raw() {
            if let Some(q) = self.qps.get_mut(&qp.qpn) {
                q.sq_outstanding.clear();
                q.rq_outstanding = 0;
            }
        }
        Ok(())
    }

    /// Moves a QP to `state` with no other attribute.
    pub fn set_qp_state(&mut self, qp: QpH, state: QpState) -> Result<(), CmdError> {
        let attr = QpAttr {
            qp_state: state.raw(),
            ..QpAttr::default()
        };
        self.modify_qp(qp, m::STATE, &attr)
    }

    pub fn query_qp(&mut self, qp: QpH) -> Result<QueryQpOut, CmdError> {
        self.cmd(Opcode::QueryQp, &QueryQpIn { qpn: qp.qpn })
    }

    /// The QP's state as QUERY_QP reports it.
    pub fn qp_state(&mut self, qp: QpH) -> Result<Option<QpState>, CmdError> {
        Ok(QpState::from_raw(self.query_qp(qp)?.attr.qp_state))
    }

    pub fn destroy_qp(&mut self, qp: QpH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyQp, &DestroyQpIn { qpn: qp.qpn })?;
        if let Some(s) = self.qps.remove(&qp.qpn) {
            self.free_ring(&s.sq);
            if let Some(r) = &s.rq {
                self.free_ring(r);
            }
            self.free_slot(s.slot);
        }
        Ok(())
    }

    fn path_mtu(&self, o: &ConnOpts) -> u8 {
        o.mtu.unwrap_or(if self.port.active_mtu == 0 {
            Mtu::M1024.raw()
        } else {
            self.port.active_mtu
        })
    }

    /// Reset → Init (RC, UC: access flags; UD: Q_Key), as ibverbs masks it.
    pub fn qp_to_init(&mut self, qp: QpH, o: &ConnOpts) -> Result<(), CmdError> {
        let mut a = QpAttr {
            qp_state: QpState::Init.raw(),
            pkey_index: 0,
            port_num: num::PORT as u8,
            ..QpAttr::default()
        };
        let mask = match qp.qp_type {
            QpType::Rc | QpType::Uc => {
                a.qp_access_flags = o.access;
                m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS
            }
            QpType::Ud => {
                a.qkey = o.qkey;
                m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY
            }
            QpType::Gsi | QpType::Smi => {
                a.qkey = o.qkey;
                m::STATE | m::PKEY_INDEX | m::QKEY
            }
        };
        self.modify_qp(qp, mask, &a)
    }

    /// Init → RTR toward `remote` (RC, UC), or plain (UD).
    pub fn qp_to_rtr(
        &mut self,
        qp: QpH,
        remote: Option<Remote>,
        o: &ConnOpts,
    ) -> Result<(), CmdError> {
        let mut a = QpAttr {
            qp_state: QpState::Rtr.raw(),
            ..QpAttr::default()
        };
        let mask = match qp.qp_type {
            QpType::Rc | QpType::Uc => {
                let r = remote.expect("a connected QP needs its remote");
                a.path_mtu = self.path_mtu(o);
                a.dest_qp_num = r.qpn;
                a.rq_psn = r.psn & 0xff_ffff;
                a.ah_attr = Av {
                    dlid: r.lid,
                    sl: o.sl,
                    port_num: num::PORT as u8,
                    ..Av::default()
                };
                let base = m::STATE | m::AV | m::PATH_MTU | m::DEST_QPN | m::RQ_PSN;
                if qp.qp_type == QpType::Rc {
                    a.max_dest_rd_atomic = o.max_dest_rd_atomic;
                    a.min_rnr_timer = o.min_rnr_timer;
                    base | m::MAX_DEST_RD_ATOMIC | m::MIN_RNR_TIMER
                } else {
                    base
                }
            }
            _ => m::STATE,
        };
        self.modify_qp(qp, mask, &a)
    }

    /// RTR → RTS.
    pub fn qp_to_rts(&mut self, qp: QpH, o: &ConnOpts) -> Result<(), CmdError> {
        let mut a = QpAttr {
            qp_state: QpState::Rts.raw(),
            sq_psn: o.sq_psn & 0xff_ffff,
            ..QpAttr::default()
        };
        let mask = if qp.qp_type == QpType::Rc {
            a.timeout = o.timeout;
            a.retry_cnt = o.retry_cnt;
            a.rnr_retry = o.rnr_retry;
            a.max_rd_atomic = o.max_rd_atomic;
            m::STATE | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC
        } else {
            m::STATE | m::SQ_PSN
        };
        self.modify_qp(qp, mask, &a)
    }

    /// Reset → Init → RTR → RTS (RC/UC toward `remote`; UD ignores it).
    pub fn qp_to_rts_from_reset(
        &mut self,
        qp: QpH,
        remote: Option<Remote>,
        o: &ConnOpts,
    ) -> Result<(), CmdError> {
        self.qp_to_init(qp, o)?;
        self.qp_to_rtr(qp, remote, o)?;
        self.qp_to_rts(qp, o)
    }

    /// REG_MR over `buf` at its virtual address, pages described with `kind`.
    pub fn reg_mr(
        &mut self,
        pd: Pd,
        buf: &Buf,
        access: u32,
        kind: PblKind,
    ) -> Result<Mr, CmdError> {
        let (pbl, meta) = self.make_pbl(&buf.pages, kind);
        let input = RegMrIn {
            pdn: pd.0,
            access,
            iova: buf.va,
            length: buf.len as u64,
            flags: 0,
            rsvd: 0,
            pbl,
        };
        self.reg_mr_raw(&input, meta)
    }

    /// REG_MR with every field given; `meta` are pages to free with the MR.
    pub fn reg_mr_raw(&mut self, input: &RegMrIn, meta: Vec<u64>) -> Result<Mr, CmdError> {
        match self.cmd::<_, RegMrOut>(Opcode::RegMr, input) {
            Ok(o) => {
                self.mrs.insert(o.lkey, meta.clone());
                Ok(Mr {
                    lkey: o.lkey,
                    rkey: o.rkey,
                    pdn: input.pdn,
                    iova: input.iova,
                    length: input.length,
                    access: input.access,
                    meta,
                })
            }
            Err(e) => {
                self.g.free_pages(&meta);
                Err(e)
            }
        }
    }

    /// The identity DMA MR over all guest memory (kernel verbs' get_dma_mr):
    /// SGE addresses are guest-physical.
    pub fn reg_dma_mr(&mut self, pd: Pd, access: u32) -> Result<Mr, CmdError> {
        let input = RegMrIn {
            pdn: pd.0,
            access,
            iova: 0,
            length: u64::MAX,
            flags: reg_mr_flags::DMA,
            rsvd: 0,
            pbl: Pbl::default(),
        };
        self.reg_mr_raw(&input, Vec::new())
    }

    pub fn rereg_mr(&mut self, input: &ReregMrIn) -> Result<RegMrOut, CmdError> {
        self.cmd(Opcode::ReregMr, input)
    }

    pub fn dereg_mr(&mut self, mr: &Mr) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeregMr, &DeregMrIn { lkey: mr.lkey })?;
        if let Some(meta) = self.mrs.remove(&mr.lkey) {
            self.g.free_pages(&meta);
        }
        Ok(())
    }

    /// ALLOC_MW (MP-06 type 1, MP-07 type 2B): the window's first R_Key.
    pub fn alloc_mw(&mut self, pd: Pd, ty: MwType) -> Result<u32, CmdError> {
        let o: AllocMwOut = self.cmd(
            Opcode::AllocMw,
            &AllocMwIn {
                pdn: pd.0,
                mw_type: ty.raw(),
            },
        )?;
        Ok(o.rkey)
    }

    /// DEALLOC_MW by the window's current R_Key.
    pub fn dealloc_mw(&mut self, rkey: u32) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DeallocMw, &DeallocMwIn { rkey })?;
        Ok(())
    }

    /// Live objects the driver knows of: (PDs, MRs, CQs, QPs, SRQs, EQs).
    pub fn object_counts(&self) -> (usize, usize, usize, usize, usize, usize) {
        (
            self.pds.len(),
            self.mrs.len(),
            self.cqs.len(),
            self.qps.len(),
            self.srqs.len(),
            self.eqs.len(),
        )
    }

    /// The doorbell slot of a QP, CQ or SRQ (for raw tests).
    pub fn qp_slot(&self, qp: QpH) -> DbSlot {
        self.qps[&qp.qpn].slot
    }

    pub fn cq_slot(&self, cq: CqH) -> DbSlot {
        self.cqs[&cq.cqn].slot
    }

    pub fn srq_slot(&self, srq: SrqH) -> DbSlot {
        self.srqs[&srq.srqn].slot
    }
}

/// A driver binds to a device of the same ABI major and a minor at least its own.
pub fn abi_compatible(device: u32, driver: u32) -> bool {
    device >> 16 == driver >> 16 && device & 0xffff >= driver & 0xffff
}

fn wait_status(g: &mut Guest, timeout: Duration, ok: impl Fn(u32) -> bool) -> Result<u32, u32> {
    let deadline = Instant::now() + timeout;
    let mut last = 0;
    loop {
        match g.bar0_read32(reg::DEV_STATUS) {
            Ok(s) => {
                last = s;
                if ok(s) {
                    return Ok(s);
                }
            }
            Err(e) => {
                log::warn!("DEV_STATUS read failed: {e}");
                return Err(last);
            }
        }
        if Instant::now() > deadline {
            return Err(last);
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn read_caps(g: &mut Guest) -> Result<Caps, guest::Error> {
    Ok(Caps {
        max_qp: g.bar0_read32(reg::CAP_MAX_QP)?,
        max_cq: g.bar0_read32(reg::CAP_MAX_CQ)?,
        max_srq: g.bar0_read32(reg::CAP_MAX_SRQ)?,
        max_mr: g.bar0_read32(reg::CAP_MAX_MR)?,
        max_pd: g.bar0_read32(reg::CAP_MAX_PD)?,
        max_eq: g.bar0_read32(reg::CAP_MAX_EQ)?,
        max_qp_wr: g.bar0_read32(reg::CAP_MAX_QP_WR)?,
        max_sge: g.bar0_read32(reg::CAP_MAX_SGE)?,
        max_cqe: g.bar0_read32(reg::CAP_MAX_CQE)?,
        max_inline: g.bar0_read32(reg::CAP_MAX_INLINE)?,
        num_uars: g.bar0_read32(reg::CAP_NUM_UARS)?,
        msix_vectors: g.bar0_read32(reg::CAP_MSIX_VECTORS)?,
        max_cmdq_log2: g.bar0_read32(reg::CAP_MAX_CMDQ_LOG2)?,
        max_eq_log2: g.bar0_read32(reg::CAP_MAX_EQ_LOG2)?,
        max_srq_wr: g.bar0_read32(reg::CAP_MAX_SRQ_WR)?,
        num_ports: g.bar0_read32(reg::CAP_NUM_PORTS)?,
        flags: g.bar0_read32(reg::CAP_FLAGS)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_sizes_and_travel() {
        assert_eq!(<Nothing as Param>::SIZE, 0);
        assert_eq!(<CreateQpIn as Param>::SIZE, 88);
        let b = QueryPortIn {
            port: 1,
            rsvd: [0; 3],
        }
        .encode();
        assert_eq!(b, vec![1, 0, 0, 0]);
        assert_eq!(AllocPdOut::decode(&[7, 0, 0, 0]).pdn, 7);
    }

    #[test]
    fn abi_versions() {
        let v = ident::ABI_VERSION;
        assert!(abi_compatible(v, v));
        assert!(abi_compatible(v + 1, v), "a newer minor device");
        assert!(!abi_compatible(v, v + 1), "an older minor device");
        assert!(!abi_compatible(v + (1 << 16), v), "another major");
    }

    #[test]
    fn rings_map_indices_over_their_pages() {
        let r = Ring {
            pages: vec![0x9000, 0x2000],
            log2: 7,
            shift: 6,
            meta: Vec::new(),
            pbl: Pbl::default(),
        };
        assert_eq!(r.entries(), 128);
        assert_eq!(r.addr(0), 0x9000);
        assert_eq!(r.addr(63), 0x9000 + 63 * 64);
        assert_eq!(r.addr(64), 0x2000);
        assert_eq!(r.addr(128 + 65), 0x2040, "free-running index wraps");
    }

    #[test]
    fn doorbell_slots_are_8_bytes_in_4k_pages() {
        let s = DbSlot { uar: 2, slot: 9 };
        assert_eq!(s.offset(), 2 * 4096 + 72);
        assert_eq!(s.asleep_offset(), 2 * 4096);
        assert_eq!(eq0_slot().offset(), 64);
    }
}
