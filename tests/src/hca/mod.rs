//! The driver: bring-up through BAR0 (abi::bar0 BAR0_RULES, step by step), the
//! command queue (abi::cmd COMMAND_PROTOCOL), EQ 0, and a typed wrapper for every
//! command. The data path (WQEs, doorbells, CQEs, EQEs) is in [`crate::verbs`].
//!
//! One file per concern: `cmdq` runs the command queue, `rings` builds doorbell
//! slots, page lists and rings, `commands` and `qp` are the typed commands. The
//! driver's state, bring-up and register access are here.

mod cmdq;
mod commands;
mod qp;
mod rings;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use device::abi::bar0::{dev_ctrl, dev_status, reg, CtxStatus, CtxTable};
use device::abi::cmd::{cmd_const, pbl_const, DeviceAttr, Pbl, PortAttr};
use device::abi::cqe::{entry_const, Eqe};
use device::abi::ident::{bar, ident};
use device::abi::uar::uar;
use device::abi::verbs::num;

use crate::guest::{self, Guest, PAGE};

pub use cmdq::{CmdError, Nothing, Param};
pub use commands::{CqH, EqH, Mr, Pd, SrqH};
pub use qp::{ConnOpts, QpH, QpInit, Remote};
pub use rings::{DbSlot, PblKind, Ring};

use commands::{CqState, EqState, SrqState};
use qp::QpSt;

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

/// The CAP_* registers as the driver reads them at bring-up (`device::caps::Caps`
/// is the device's side: it fills these registers and QUERY_DEVICE). A driver
/// keeps its own copy, as vhca.ko does; `bringup` tests check the registers
/// against QUERY_DEVICE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapRegs {
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

// ---------------------------------------------------------------- the driver

/// The HCA as its driver sees it, over one [`Guest`].
pub struct Hca {
    pub(crate) g: Guest,
    pub(crate) cfg: HcaConfig,
    caps: CapRegs,
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

    pub fn caps(&self) -> CapRegs {
        self.caps
    }

    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// QUERY_DEVICE as cached at bring-up.
    pub fn device_attr(&self) -> &DeviceAttr {
        &self.dev
    }

    /// QUERY_PORT(1) as cached at bring-up (or the last [`Hca::refresh_port`]).
    pub fn port_attr(&self) -> &PortAttr {
        &self.port
    }

    /// QUERY_PORT(1) again, kept as the cached attributes: after a subnet
    /// manager has given the port its LID (issue 26/27).
    pub fn refresh_port(&mut self) -> Result<&PortAttr, CmdError> {
        self.port = self.query_port(num::PORT as u8)?;
        Ok(&self.port)
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

fn read_caps(g: &mut Guest) -> Result<CapRegs, guest::Error> {
    Ok(CapRegs {
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
    use device::abi::cmd::{AllocPdOut, CreateQpIn, QueryPortIn};

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
        let s = DbSlot { uar: 2, slot: 17 };
        assert_eq!(s.offset(), 2 * 4096 + 136);
        assert_eq!(s.asleep_offset(), 2 * 4096);
        assert_eq!(eq0_slot().offset(), 128, "after the header and summary");
    }
}
