//! The running device: the BAR0 register file on the vfio-user thread, the data
//! path on its own thread, and the hand-over between them (ARCHITECTURE.md §2, §4, §5).
//!
//! Threads:
//! - the vfio-user thread serves QEMU's messages; BAR0 accesses land in
//!   [`Front`]. Control-path work (bring-up, commands, context snapshots) runs
//!   there, under the core lock, and is quick (QEMU waits at most 5 s for any
//!   reply, and a trapped access costs the guest ~100 us anyway);
//! - the data-path thread polls doorbells, the fabric link and timers, busy while
//!   there is work and for [`BUSY_POLL`] after it, then asleep on epoll (link
//!   socket, WAKE eventfd, next deadline) with the `asleep` word set in every
//!   doorbell page so the driver knows to ring WAKE (abi::uar
//!   DOORBELL_PROTOCOL). An idle device uses no CPU.

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use transport::engine::{Engine, Limits, PortConfig};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use crate::abi;
use crate::abi::bar0::{dev_ctrl, dev_status, reg, CtxStatus, CtxTable, Fatal};
use crate::caps::Caps;
use crate::cmdq::{self, CmdQueue};
use crate::counters_out::{CountersOutput, Snapshot};
use crate::glue::{BarDoorbells, GuestMem, Msix};
use crate::hca::{DbSlot, Doorbells, Eq, Hca};
use crate::panic_text::panic_text;
use crate::port::Port;
use crate::ring::Ring;

mod data_path;
pub(crate) mod sleep;
use data_path::data_path;

/// How long the data path keeps polling after the last work before it sleeps,
/// unless `--busy-poll` says otherwise.
pub const BUSY_POLL: Duration = Duration::from_micros(500);

/// What one batch of commands may do under the core lock, on the BAR0 write
/// of CMDQ_PI or on the data path: QEMU waits for the lock on every BAR0
/// access (its reply timeout is 5 s, a vCPU stalls meanwhile) and the data
/// path does too, so heavy commands run a few at a time (issue 13, MMIO stall).
pub const CMD_BUDGET: cmdq::Budget = cmdq::Budget {
    commands: 16,
    time: Some(Duration::from_millis(1)),
};

/// How long the data path waits at most for the vfio-user thread to take the
/// lock before its own next round.
const FRONT_FIRST: Duration = Duration::from_millis(5);

/// Longest sleep without a deadline: bounds how late a stop request or a
/// periodic counter print is noticed.
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// While asleep, the full round (the doorbell summaries of every page in use)
/// runs at least this often.
const RESCAN_EVERY: Duration = Duration::from_secs(1);

/// The device's one clock, monotonic: the wall time (since the Unix epoch, as
/// pcap captures want it) of the first call plus the monotonic time elapsed
/// since. The engine's timers run on it, so setting the host's clock neither
/// fires every ACK timeout at once nor stalls them (RL-10).
pub fn now() -> Duration {
    static ORIGIN: OnceLock<(Instant, Duration)> = OnceLock::new();
    let (at, wall) = ORIGIN.get_or_init(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        (Instant::now(), wall)
    });
    *wall + at.elapsed()
}

/// The BAR0 registers the driver configures (abi::bar0).
#[derive(Debug, Default, Clone)]
struct Regs {
    driver_abi: u32,
    dev_ctrl: u32,
    dev_status: u32,
    fatal: u32,
    ignored_writes: u32,
    cmdq_base: u64,
    cmdq_log2: u32,
    /// The last CMDQ_PI written: commands up to it run in budgeted batches,
    /// the first on the BAR0 write itself, the rest on the data path.
    cmdq_pi: u32,
    eq0_base: u64,
    eq0_log2: u32,
    ctx_table: u32,
    ctx_index: u32,
    ctx_status: u32,
    ctx_window: Vec<u8>,
}

/// Everything both threads touch, under one lock.
pub struct Core {
    pub hca: Hca,
    regs: Regs,
    cmdq: Option<CmdQueue>,
    port_config: PortConfig,
    limits: Limits,
    /// Counters of the RoCE port's vhost-user-net backend, if it serves one.
    net: Option<Arc<crate::net::NetCounters>>,
    cmd_stats: CmdStats,
}

/// How the command queue's work was split (printed with the counters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CmdStats {
    /// CMDQ_PI writes.
    pub pi_writes: u64,
    /// Most commands one CMDQ_PI write ran (at most `CMD_BUDGET.commands`).
    pub max_per_write: u32,
    /// CMDQ_PI writes that left commands to the data path.
    pub deferred: u64,
    /// Batches the data path ran.
    pub data_path_batches: u64,
}

impl Core {
    fn enabled(&self) -> bool {
        self.regs.dev_status & dev_status::ENABLED != 0
    }

    /// Whether posted commands wait to run.
    fn commands_pending(&self) -> bool {
        self.enabled()
            && self
                .cmdq
                .as_ref()
                .is_some_and(|q| q.ci() != self.regs.cmdq_pi)
    }

    /// Runs one batch of the posted commands (`CMD_BUDGET`), writes their
    /// COMMAND_DONE events and raises EQ 0; returns how many ran. A command
    /// queue the driver broke makes the device FATAL. `pre`: the heavy pieces
    /// the data path prepared without the lock for the command in progress
    /// (cmdq::staged; issue 13).
    fn run_commands(&mut self, handle: &pci::Handle, pre: Option<cmdq::Prepared>) -> u32 {
        let Some(bar2) = handle.bar_memory(abi::ident::bar::BAR2_INDEX as usize) else {
            return 0;
        };
        let db = BarDoorbells(bar2);
        let irq = Msix(handle);
        let Some(mut q) = self.cmdq.take() else {
            return 0;
        };
        let mut mem = GuestMem::new(handle, self.hca.caps.dm_size);
        let before = q.ci();
        let pi = self.regs.cmdq_pi;
        let r = cmdq::execute_staged(
            &mut self.hca,
            &mut q,
            pi,
            &mut mem,
            &db,
            now(),
            CMD_BUDGET,
            pre,
        );
        match r {
            Ok(done) => {
                for d in done {
                    self.hca.push_eqe(
                        0,
                        abi::cqe::EqeType::CommandDone.raw(),
                        u32::from(d.token),
                        u32::from(d.status.raw()),
                        &mut mem,
                        &db,
                    );
                }
            }
            Err(f) => {
                log::warn!("device: command queue stopped: {f:?}");
                if f == Fatal::Internal {
                    // A command hit a bug (contained in cmdq): tell the driver
                    // as for one in the data path (AE-01, issue 13).
                    self.hca.push_eqe(
                        0,
                        abi::cqe::EqeType::DeviceFatal.raw(),
                        0,
                        f.raw(),
                        &mut mem,
                        &db,
                    );
                }
                self.regs.fatal = f.raw();
                self.regs.dev_status |= dev_status::FATAL;
                self.regs.dev_status &= !dev_status::ENABLED;
            }
        }
        self.hca.raise_interrupts(&db, &irq);
        let ran = q.ci().wrapping_sub(before);
        self.cmdq = Some(q);
        ran
    }

    /// Drops every object and configuration: DEV_CTRL.RESET, PCI reset, a new
    /// client. The link (and its UDP socket) stays: the fabric address is the
    /// node's, not the VM's.
    fn reset(&mut self) {
        // The engine goes with the reset (a driver unload, a PCI reset, the
        // client gone): report what it counted first, or a guest that resets
        // its device before QEMU exits leaves only zeros in the log.
        let e = self.hca.port.engine().counters();
        if e.rx_packets + e.tx_packets > 0 {
            log::info!(
                "device: reset; the counters until now:\n{}",
                self.counters_report()
            );
        }
        let engine = Engine::new(self.port_config.clone(), self.limits);
        self.hca.reset(engine, now());
        self.regs = Regs {
            dev_status: dev_status::READY,
            ctx_window: vec![0; reg::CTX_WINDOW_SIZE as usize],
            ..Regs::default()
        };
        self.cmdq = None;
    }
}

/// What the threads share.
pub struct Shared {
    core: Mutex<Core>,
    /// Written by WAKE (and by stop) to end the data path's sleep.
    wake: EventFd,
    stop: AtomicBool,
    /// Set by the data path once it stopped and flushed the link.
    stopped: AtomicBool,
    /// vfio-user callbacks waiting for the lock: the data path lets them in
    /// before it takes the lock again (a mutex is not fair, and a data path
    /// busy with deferred commands would otherwise keep QEMU waiting).
    front_waiting: AtomicUsize,
    handle: pci::Handle,
    /// The data path runs the port even while the HCA is not enabled: on RoCE
    /// the link also carries the guest's NIC traffic, so the VM's network
    /// works without the vhca driver loaded; on both links the port's
    /// liveness runs (AE-01: an ib-udp node keeps sending keepalives and
    /// draining its socket, so its peers' ports stay active and a datagram
    /// never leaves the level-triggered socket readable under a sleeping
    /// data path). The disabled HCA's engine has no QPs: packets for it are
    /// dropped and counted.
    link_always: bool,
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock is a bug; the device keeps serving with
        // whatever state the lock holds rather than dying.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lock for a vfio-user callback: ahead of the data path's next round.
    fn lock_front(&self) -> MutexGuard<'_, Core> {
        self.front_waiting.fetch_add(1, Ordering::AcqRel);
        let g = self.lock();
        self.front_waiting.fetch_sub(1, Ordering::AcqRel);
        g
    }

    /// Lets waiting vfio-user callbacks take the lock first (for at most
    /// [`FRONT_FIRST`]), so a BAR0 access waits for one data-path round at most.
    fn yield_to_front(&self) {
        let t = Instant::now();
        while self.front_waiting.load(Ordering::Acquire) > 0 && t.elapsed() < FRONT_FIRST {
            std::thread::yield_now();
        }
    }

    /// Asks the data path to end.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.write(1);
    }

    /// An internal error (a bug) stopped the data path: the device goes FATAL
    /// with syndrome INTERNAL and, if the driver had it enabled, tells it with a
    /// DEVICE_FATAL event on EQ 0 (AE-01). Every queue stops until RESET, which
    /// starts the device again empty; the process keeps serving.
    fn internal_fault(&self) {
        let mut core = self.lock();
        if core.enabled() {
            let mut mem = GuestMem::new(&self.handle, core.hca.caps.dm_size);
            if let Some(bar2) = self.handle.bar_memory(abi::ident::bar::BAR2_INDEX as usize) {
                let db = BarDoorbells(bar2);
                core.hca.push_eqe(
                    0,
                    abi::cqe::EqeType::DeviceFatal.raw(),
                    0,
                    Fatal::Internal.raw(),
                    &mut mem,
                    &db,
                );
                core.hca.raise_interrupts(&db, &Msix(&self.handle));
            }
        }
        core.regs.fatal = Fatal::Internal.raw();
        core.regs.dev_status |= dev_status::FATAL;
        core.regs.dev_status &= !dev_status::ENABLED;
    }
}

/// Runs the data path; a panic in it (a bug) must not leave a hung device that
/// the guest waits on forever: the device goes FATAL (`Shared::internal_fault`)
/// and the data path starts again, idle until the driver resets the device.
fn supervise_data_path(shared: Arc<Shared>, every: CountersOutput, busy: Duration) {
    loop {
        let s = Arc::clone(&shared);
        let e = every.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| data_path(s, e, busy)));
        let Err(e) = r else { return };
        let what = panic_text(&*e);
        log::error!("device: internal error in the data path ({what}): FATAL until RESET");
        shared.internal_fault();
        if shared.stop.load(Ordering::Acquire) {
            shared.stopped.store(true, Ordering::Release);
            return;
        }
        // A bug that fires again at once must not spin.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The BAR0 side of the device, served on the vfio-user thread.
pub struct Front {
    shared: Arc<Shared>,
}

fn le32(data: &[u8]) -> u32 {
    let mut b = [0u8; 4];
    let n = data.len().min(4);
    b[..n].copy_from_slice(&data[..n]);
    u32::from_le_bytes(b)
}

impl Front {
    fn bar2(&self) -> Option<&pci::BarMemory> {
        self.shared
            .handle
            .bar_memory(abi::ident::bar::BAR2_INDEX as usize)
    }

    /// Debug aid for WAKE: the nonzero doorbell words of UAR 0 as the device sees
    /// them in the shared BAR2 memory (the stores that rang came without any
    /// vfio-user message).
    fn log_pending_doorbells(&self) {
        let Some(bar) = self.bar2() else { return };
        let db = BarDoorbells(bar);
        let words: Vec<String> = (abi::uar::uar::HEADER_SIZE..abi::uar::uar::PAGE_SIZE)
            .step_by(4)
            .filter_map(|o| {
                let v = db.load(u64::from(o));
                (v != 0).then(|| format!("{o:#x}={v:#x}"))
            })
            .take(16)
            .collect();
        log::debug!("device: WAKE; UAR 0 doorbell words: [{}]", words.join(", "));
    }

    fn read_reg(&self, core: &Core, off: u64) -> u32 {
        let r = &core.regs;
        let c = &core.hca.caps;
        let lo = |v: u64| v as u32;
        let hi = |v: u64| (v >> 32) as u32;
        match off as u32 {
            reg::MAGIC => abi::ident::ident::MAGIC,
            reg::ABI_VERSION => abi::ident::ident::ABI_VERSION,
            reg::DRIVER_ABI => r.driver_abi,
            reg::DEV_CTRL => r.dev_ctrl & dev_ctrl::ENABLE,
            reg::DEV_STATUS => r.dev_status,
            reg::FATAL_SYNDROME => r.fatal,
            reg::IGNORED_WRITES => r.ignored_writes,
            reg::CAP_MAX_QP => c.max_qp,
            reg::CAP_MAX_CQ => c.max_cq,
            reg::CAP_MAX_SRQ => c.max_srq,
            reg::CAP_MAX_MR => c.max_mr,
            reg::CAP_MAX_PD => c.max_pd,
            reg::CAP_MAX_EQ => c.max_eq,
            reg::CAP_MAX_QP_WR => c.max_qp_wr,
            reg::CAP_MAX_SGE => c.max_sge,
            reg::CAP_MAX_CQE => c.max_cqe,
            reg::CAP_MAX_INLINE => c.max_inline,
            reg::CAP_NUM_UARS => c.num_uars,
            reg::CAP_MSIX_VECTORS => c.msix_vectors,
            reg::CAP_MAX_CMDQ_LOG2 => c.max_cmdq_log2,
            reg::CAP_MAX_EQ_LOG2 => c.max_eq_log2,
            reg::CAP_MAX_SRQ_WR => c.max_srq_wr,
            reg::CAP_NUM_PORTS => 1,
            reg::CAP_FLAGS => c.flags,
            reg::CAP_DM_SIZE => c.dm_size,
            reg::CMDQ_BASE_LO => lo(r.cmdq_base),
            reg::CMDQ_BASE_HI => hi(r.cmdq_base),
            reg::CMDQ_LOG2_SIZE => r.cmdq_log2,
            reg::CMDQ_CI => core.cmdq.as_ref().map_or(0, CmdQueue::ci),
            reg::EQ0_BASE_LO => lo(r.eq0_base),
            reg::EQ0_BASE_HI => hi(r.eq0_base),
            reg::EQ0_LOG2_SIZE => r.eq0_log2,
            reg::CTX_TABLE => r.ctx_table,
            reg::CTX_INDEX => r.ctx_index,
            reg::CTX_STATUS => r.ctx_status,
            o if (reg::CTX_WINDOW..reg::CTX_WINDOW + reg::CTX_WINDOW_SIZE).contains(&o) => {
                let at = (o - reg::CTX_WINDOW) as usize;
                r.ctx_window
                    .get(at..at + 4)
                    .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            _ => 0,
        }
    }

    fn write_reg(&self, core: &mut Core, off: u64, v: u32) {
        let enabled = core.enabled();
        let r = &mut core.regs;
        let set_lo = |x: &mut u64, v: u32| *x = (*x & !0xffff_ffff) | u64::from(v);
        let set_hi = |x: &mut u64, v: u32| *x = (*x & 0xffff_ffff) | (u64::from(v) << 32);
        match off as u32 {
            reg::DRIVER_ABI if !enabled => r.driver_abi = v,
            reg::CMDQ_BASE_LO if !enabled => set_lo(&mut r.cmdq_base, v),
            reg::CMDQ_BASE_HI if !enabled => set_hi(&mut r.cmdq_base, v),
            reg::CMDQ_LOG2_SIZE if !enabled => r.cmdq_log2 = v,
            reg::EQ0_BASE_LO if !enabled => set_lo(&mut r.eq0_base, v),
            reg::EQ0_BASE_HI if !enabled => set_hi(&mut r.eq0_base, v),
            reg::EQ0_LOG2_SIZE if !enabled => r.eq0_log2 = v,
            reg::DEV_CTRL => self.dev_ctrl(core, v),
            reg::CMDQ_PI if enabled => self.commands(core, v),
            reg::WAKE => {
                let _ = self.shared.wake.write(1);
                if log::log_enabled!(log::Level::Debug) {
                    self.log_pending_doorbells();
                }
            }
            reg::CTX_TABLE => r.ctx_table = v,
            reg::CTX_INDEX => {
                r.ctx_index = v;
                let table = CtxTable::from_raw(r.ctx_table);
                let (status, bytes) = match (table, self.bar2()) {
                    (Some(t), Some(bar)) => {
                        crate::context::snapshot_with_doorbells(&core.hca, &BarDoorbells(bar), t, v)
                    }
                    (Some(t), None) => crate::context::snapshot(&core.hca, t, v),
                    (None, _) => (CtxStatus::BadTable, Vec::new()),
                };
                let r = &mut core.regs;
                r.ctx_status = status.raw();
                r.ctx_window.fill(0);
                let n = bytes.len().min(r.ctx_window.len());
                r.ctx_window[..n].copy_from_slice(&bytes[..n]);
            }
            _ => {
                // Read-only registers, the context window, configuration while
                // enabled, unassigned offsets (ARCHITECTURE.md §4).
                r.ignored_writes = r.ignored_writes.wrapping_add(1);
            }
        }
    }

    fn dev_ctrl(&self, core: &mut Core, v: u32) {
        if v & dev_ctrl::RESET != 0 {
            log::info!("device: reset by the driver");
            core.reset();
            // The driver starts over: doorbell words of the old objects must not
            // read as indices of the new ones.
            if let Some(bar) = self
                .shared
                .handle
                .bar_memory(abi::ident::bar::BAR2_INDEX as usize)
            {
                let zero = vec![0u8; bar.len() as usize];
                let _ = bar.write(0, &zero);
            }
            return;
        }
        let want = v & dev_ctrl::ENABLE != 0;
        core.regs.dev_ctrl = v & dev_ctrl::ENABLE;
        if want == core.enabled() || core.regs.dev_status & dev_status::FATAL != 0 {
            return;
        }
        if !want {
            core.regs.dev_status &= !dev_status::ENABLED;
            core.hca.eqs.remove(&0);
            log::info!("device: disabled by the driver");
            return;
        }
        match self.enable(core) {
            Ok(()) => {
                core.regs.dev_status |= dev_status::ENABLED;
                log::info!("device: enabled");
            }
            Err(f) => {
                log::warn!("device: enable failed: {f:?}");
                core.regs.fatal = f.raw();
                core.regs.dev_status |= dev_status::FATAL;
            }
        }
    }

    /// Checks the configuration the driver wrote and brings up the command queue
    /// and EQ 0 (abi::bar0 BAR0_RULES).
    fn enable(&self, core: &mut Core) -> Result<(), Fatal> {
        let r = core.regs.clone();
        let ours = abi::ident::ident::ABI_VERSION;
        if r.driver_abi >> 16 != ours >> 16 || (r.driver_abi & 0xffff) > (ours & 0xffff) {
            return Err(Fatal::AbiMismatch);
        }
        let mem = GuestMem::new(&self.shared.handle, core.hca.caps.dm_size);
        let bar2 = self
            .shared
            .handle
            .bar_memory(abi::ident::bar::BAR2_INDEX as usize)
            .ok_or(Fatal::Uar0Unavailable)?;
        let db = BarDoorbells(bar2);
        let mut cmdq = CmdQueue::new(&mem, r.cmdq_base, r.cmdq_log2, core.hca.caps.max_cmdq_log2)
            .map_err(|_| Fatal::CmdqBadConfig)?;
        // Heavy commands in steps, their guest-memory work done by the data
        // path without the lock (cmdq::staged; issue 13, MMIO stall).
        cmdq.set_staged(true);
        let eqe_shift = abi::cqe::entry_const::EQE_SIZE.trailing_zeros();
        let max_log2 = core.hca.caps.max_eq_log2;
        if r.eq0_log2 == 0 || r.eq0_log2 > max_log2 {
            return Err(Fatal::Eq0BadConfig);
        }
        let eq0_pbl = crate::ring::contiguous_pbl(r.eq0_base, eqe_shift, r.eq0_log2);
        let eq0 = crate::ring::read_pbl(&mem, &eq0_pbl)
            .and_then(|pages| Ring::new(&mem, pages, 12, eqe_shift, r.eq0_log2, max_log2))
            .map_err(|_| Fatal::Eq0BadConfig)?;
        let slot = DbSlot {
            uar: abi::uar::uar::KERNEL_UAR,
            slot: abi::uar::uar::EQ0_SLOT as u16,
        };
        if db.len() < slot.offset() + 8 {
            return Err(Fatal::Uar0Unavailable);
        }
        core.hca.eqs.insert(
            0,
            Eq {
                ring: eq0,
                vector: abi::ident::bar::MSIX_VECTOR_ASYNC as u16,
                db: slot,
                pi: 0,
                // Power-on value of the slot: the driver's arm before ENABLE is
                // a change, so the first event interrupts.
                last_arm: 0,
                users: 0,
                overflows: 0,
                pbl: eq0_pbl,
            },
        );
        core.hca.slots.insert(slot, crate::hca::SlotOwner::Eq(0));
        core.cmdq = Some(cmdq);
        Ok(())
    }

    /// CMDQ_PI: runs one budgeted batch of the posted commands now, in order;
    /// the data path runs the rest (a whole ring of heavy commands in one
    /// write would hold the lock, and QEMU's vCPU, far too long).
    fn commands(&self, core: &mut Core, pi: u32) {
        core.regs.cmdq_pi = pi;
        let ran = core.run_commands(&self.shared.handle, None);
        let more = core.commands_pending();
        let st = &mut core.cmd_stats;
        st.pi_writes += 1;
        st.max_per_write = st.max_per_write.max(ran);
        st.deferred += u64::from(more);
        // New objects may have doorbells already, and commands may remain:
        // let the data path look.
        let _ = self.shared.wake.write(1);
    }
}

impl pci::Device for Front {
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        if bar != abi::ident::bar::BAR0_INDEX as usize {
            return;
        }
        let core = self.shared.lock_front();
        // Registers are 32-bit; an 8-byte access reads a LO/HI pair.
        for (i, chunk) in data.chunks_mut(4).enumerate() {
            let v = self.read_reg(&core, (offset & !3) + 4 * i as u64);
            let n = chunk.len();
            chunk.copy_from_slice(&v.to_le_bytes()[..n]);
        }
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        if bar == abi::ident::bar::WAKE_BAR_INDEX as usize {
            // The user contexts' WAKE (abi::ident WAKE_BAR_INDEX): no lock, no
            // state, just the wake-up.
            let _ = self.shared.wake.write(1);
            return;
        }
        if bar == abi::ident::bar::BAR0_INDEX as usize
            && offset == u64::from(reg::WAKE)
            && data.len() == 4
        {
            // The kernel driver's WAKE in BAR0: no state either, so no lock.
            // Under the lock the woken data path ran straight into it and went
            // back to sleep on the mutex until this thread let go (two more
            // context switches per wake-up; issue 30 item 3).
            let _ = self.shared.wake.write(1);
            if log::log_enabled!(log::Level::Debug) {
                self.log_pending_doorbells();
            }
            return;
        }
        if bar != abi::ident::bar::BAR0_INDEX as usize || !offset.is_multiple_of(4) {
            let mut core = self.shared.lock_front();
            core.regs.ignored_writes = core.regs.ignored_writes.wrapping_add(1);
            return;
        }
        let mut core = self.shared.lock_front();
        for (i, chunk) in data.chunks(4).enumerate() {
            self.write_reg(&mut core, offset + 4 * i as u64, le32(chunk));
        }
    }

    fn reset(&mut self) {
        log::info!("device: PCI reset");
        self.shared.lock_front().reset();
    }

    fn disconnected(&mut self) {
        log::info!("device: client gone; every object and mapping dropped");
        // The engine goes with the client (`Core::reset` reports its counters).
        self.shared.lock_front().reset();
    }
}

use std::os::fd::AsRawFd;

impl Core {
    /// Every counter of the device, one `name value` per line (for
    /// `--counters-every` and the exit report).
    pub fn counters_report(&self) -> String {
        self.counters_snapshot().text()
    }

    /// The counters, for the text report, `--counters-format json` and
    /// `--counters-file` (`counters_out`).
    pub fn counters_snapshot(&self) -> Snapshot {
        let c = &self.cmd_stats;
        let mut cmdq = vec![
            ("pi_writes", c.pi_writes),
            ("max_per_write", u64::from(c.max_per_write)),
            ("deferred", c.deferred),
            ("data_path_batches", c.data_path_batches),
        ];
        // The longest command (wall and CPU under the lock) and its opcode
        // (issue 13: no command holds BAR0 long).
        if let Some(q) = &self.cmdq {
            let (wall, op) = q.longest_command();
            let (cpu, cpu_op) = q.longest_command_cpu();
            cmdq.extend([
                ("longest_command_us", wall.as_micros() as u64),
                ("longest_command_opcode", u64::from(op)),
                ("longest_command_cpu_us", cpu.as_micros() as u64),
                ("longest_command_cpu_opcode", u64::from(cpu_op)),
            ]);
        }
        Snapshot {
            time: now(),
            port: *self.hca.port.counters(),
            engine: self.hca.port.engine().counters().clone(),
            hca: cmdq::device_counters(&self.hca),
            link: self.hca.port.link().report(),
            net: self.net.as_ref().map(|n| n.to_string()),
            cmdq,
            mgmt: self
                .hca
                .port
                .mgmt()
                .map(crate::mgmt::Mgmt::counter_pairs)
                .unwrap_or_default(),
            // Filled in by `CountersOutput`, which writes the file.
            counters_file: None,
        }
    }
}

/// Builds the PCI function of the HCA (abi::ident).
pub fn function(caps: &Caps) -> Result<pci::Function, pci::BuildError> {
    use abi::ident::{bar, ident};
    let bar2_size = u64::from(caps.num_uars) * u64::from(abi::uar::uar::PAGE_SIZE);
    pci::FunctionBuilder::new(ident::PCI_VENDOR_ID as u16, ident::PCI_DEVICE_ID as u16)
        .subsystem(
            ident::PCI_SUBSYSTEM_VENDOR_ID as u16,
            ident::PCI_SUBSYSTEM_ID as u16,
        )
        .class_code(ident::PCI_CLASS)
        .revision(ident::PCI_REVISION as u8)
        .bar(
            bar::BAR0_INDEX as usize,
            pci::BarSpec::trapped(u64::from(bar::BAR0_SIZE)),
        )
        .bar(bar::BAR2_INDEX as usize, pci::BarSpec::mapped(bar2_size))
        .bar(bar::WAKE_BAR_INDEX as usize, bar4(caps.dm_size))
        .msix(
            caps.msix_vectors as u16,
            bar::BAR0_INDEX as usize,
            u64::from(bar::MSIX_TABLE_OFFSET),
            u64::from(bar::MSIX_PBA_OFFSET),
        )
        .pcie(true)
        .power_management(true)
        .build()
}

/// BAR4: the trapped WAKE page, then `dm_size` bytes of device memory
/// (abi::ident DM_OFFSET) mapped into the guest as BAR2 is (`crate::dm`).
/// Prefetchable with device memory, so that a large BAR can go above 4 GiB
/// (the WAKE page has no read side effects: reads return 0).
fn bar4(dm_size: u32) -> pci::BarSpec {
    use abi::ident::bar;
    if dm_size == 0 {
        return pci::BarSpec::trapped(u64::from(bar::WAKE_BAR_SIZE));
    }
    let (offset, size) = (u64::from(bar::DM_OFFSET), u64::from(dm_size));
    pci::BarSpec::trapped((offset + size).next_power_of_two())
        .mmap_area(offset, size)
        .prefetchable(true)
}

/// The `ib-udp` link of `node`: the UDP link, and the fabric key stage right
/// on it when there is a key, so that every stage outside (faults, capture)
/// sees plain native packets (issue 13, ARCHITECTURE.md §9); then link flow
/// control when the fabric has it (issue 27 item 4); and the port's MTU, from
/// the underlay with the key's trailer (issue 27 item 3).
type IbUdpLink = (Box<dyn crate::fabric::Link + Send>, transport::verbs::Mtu);
fn ib_udp_link(
    fabric: &crate::fabric::FabricFile,
    node: &crate::fabric::Node,
    key: Option<&crate::fabric::FabricKey>,
    liveness: Option<(Duration, Duration)>,
) -> Result<IbUdpLink, crate::fabric::LinkError> {
    use crate::fabric::{UdpLink, TRAILER_LEN};
    let mut udp = UdpLink::bind(fabric, &node.name)?;
    let mtu = udp.port_mtu(if key.is_some() { TRAILER_LEN } else { 0 })?;
    // AE-01: keepalive period and dead time (`--peer-silence`).
    udp.set_liveness(liveness);
    if let Some(b) = fabric.rx_buffer() {
        udp.set_recv_buffer(b);
    }
    let rcvbuf = udp.recv_buffer();
    let i = fabric.nodes().iter().position(|n| n.name == node.name);
    let link = if i.is_some_and(|i| !fabric.hosts().co_located(i).is_empty()) {
        // Issue 30: rings to the nodes on this host, UDP to the rest.
        keyed_link(fabric, node, key, crate::fabric::ShmLink::new(udp)?)?
    } else {
        keyed_link(fabric, node, key, udp)?
    };
    Ok((with_flow_control(fabric, link, rcvbuf), mtu))
}

/// The fabric key stage on `udp` when there is a key.
fn keyed_link<L: crate::fabric::Link + Send + 'static>(
    fabric: &crate::fabric::FabricFile,
    node: &crate::fabric::Node,
    key: Option<&crate::fabric::FabricKey>,
    udp: L,
) -> Result<Box<dyn crate::fabric::Link + Send>, crate::fabric::LinkError> {
    use crate::fabric::AuthLink;
    let Some(key) = key else {
        if let Some(n) = fabric
            .nodes()
            .iter()
            .find(|n| !n.address.ip().is_loopback())
        {
            log::warn!(
                "fabric: node {} is at {}, off this host, and there is no fabric key: \
                 whoever can send to udp {} can inject packets (--fabric-key-file)",
                n.name,
                n.address,
                node.address
            );
        }
        return Ok(Box::new(udp));
    };
    if let Some(w) = key.permission_warning() {
        log::warn!("fabric: {w}");
    }
    log::info!(
        "fabric: datagrams authenticated with fabric key {} from {}",
        key.id(),
        key.source()
    );
    Ok(Box::new(AuthLink::new(udp, key)))
}

/// Link flow control (IBA 7.9, `fabric::FlowLink`) outside the fabric key
/// stage, when the fabric file has it on: granting what fits the socket's
/// receive buffer `rcvbuf`, a received packet freed as soon as the engine
/// took it.
fn with_flow_control(
    fabric: &crate::fabric::FabricFile,
    link: Box<dyn crate::fabric::Link + Send>,
    rcvbuf: Option<usize>,
) -> Box<dyn crate::fabric::Link + Send> {
    use crate::fabric::{flow_grant, FlowLink, HCA_QUEUE_BLOCKS};
    if !fabric.flow_control() {
        return link;
    }
    let grant = flow_grant(rcvbuf.unwrap_or(0), fabric.data_vls());
    log::info!(
        "fabric: link flow control on (IBA 7.9): {} blocks of 64 bytes granted per VL on {} VL(s), socket receive buffer {rcvbuf:?} bytes",
        grant.capacity[0],
        fabric.data_vls()
    );
    Box::new(FlowLink::new(link, grant, HCA_QUEUE_BLOCKS, true))
}

/// Serves the device described by `config` until the process is stopped.
pub fn serve(config: &crate::cli::Config) -> Result<(), Box<dyn std::error::Error>> {
    use crate::cli::FabricMode;
    use crate::fabric::{format_mac, CaptureLink, FaultLink, Link, Tap, TapLink};
    use transport::wire::pcap::LinkType;
    let mut net = None;
    let (mut link, mut port_config, capture_as, what): (Box<dyn Link + Send>, _, _, _) =
        match &config.mode {
            FabricMode::IbUdp { fabric, node, key } => {
                let (link, mtu) = ib_udp_link(fabric, node, key.as_ref(), config.liveness)?;
                (
                    link,
                    {
                        // AD-01, AD-05: the LMC and P_Key table the fabric file
                        // gives; AD-06: its SL-to-VL and VL arbitration
                        // tables, if it sets them.
                        let mut p = PortConfig {
                            sl2vl: fabric.sl2vl().unwrap_or_default(),
                            ..PortConfig::new(node.lid, node.guid)
                        };
                        if let Some(a) = fabric.port_attrs(&node.name) {
                            p.lmc = a.lmc;
                            p.pkeys = a.pkeys.clone();
                        }
                        if let Some(t) = fabric.vl_arb() {
                            p.vl_arb = t.clone(); // AD-06
                        }
                        // Issue 27 item 3: what the underlay carries unfragmented.
                        p.max_mtu = mtu;
                        p
                    },
                    LinkType::ErfInfiniband,
                    format!("node {} (LID {:#x})", node.name, node.lid),
                )
            }
            FabricMode::Roce {
                tap,
                mac,
                vhost_user_net,
            } => {
                let tap = Arc::new(Tap::open(tap, *mac)?);
                if let Some(path) = vhost_user_net {
                    net = Some(crate::net::spawn(Arc::clone(&tap), path)?);
                } else {
                    log::info!("fabric: no --vhost-user-net: frames for the guest are dropped");
                }
                let what = format!("RoCE port {} on TAP {}", format_mac(mac), tap.name());
                // The Ethernet MTU bounds the path MTU (1500 -> 1024, AD-03).
                let mut port = PortConfig::ethernet(*mac).with_ethernet_mtu(u32::from(tap.mtu()));
                log::info!(
                    "fabric: Ethernet MTU {}: path MTU up to {}",
                    tap.mtu(),
                    port.max_mtu.bytes()
                );
                if let Some(p) = config.dcqcn {
                    // Issue 31: the parameters in force, by mlx5's names.
                    let named: Vec<String> =
                        p.named().iter().map(|(n, v)| format!("{n}={v}")).collect();
                    log::info!("fabric: DCQCN on: {}", named.join(","));
                    port.cc.dcqcn = Some(p);
                }
                let mut tap_link = TapLink::new(tap);
                if !config.tap_gso {
                    log::info!("fabric: TAP GSO off (--no-tap-gso): one write per frame");
                    tap_link.set_gso(false);
                }
                (Box::new(tap_link), port, LinkType::Ethernet, what)
            }
        };
    if let Some(spec) = &config.fault {
        log::info!("fabric: faults {spec}");
        link = Box::new(FaultLink::new(link, *spec));
    }
    if let Some(path) = &config.capture {
        link = Box::new(CaptureLink::create_as(link, path, capture_as)?);
    }
    // Issue 30: where the stack carries packets through memory and nothing in
    // it reads or changes their CRCs, the link computes them (only for what
    // leaves on a wire), not the engine (`Link::take_crcs`).
    port_config.crcs_by_link = link.take_crcs();
    if port_config.crcs_by_link {
        log::info!("fabric: CRCs left to the link: none on the shared-memory rings");
    }
    let limits = Limits {
        loss_probes: config.loss_probes,
        min_probe_timeout_ns: config.loss_probe_min.as_nanos() as u64,
        adaptive_probe_floor: config.loss_probe_adapt,
        bounded_go_back: config.loss_go_back_bound,
        mem_budget: config.mem_budget,
        credits: config.credits,
        port_window: config.port_window,
        apm_timeouts: config.apm_timeouts,
        reorder_hold_ns: config.reorder_hold.as_nanos() as u64,
        ..Limits::default()
    };
    let caps = Caps {
        dm_size: config.dm_size,
        ..Caps::from_limits(&limits)
    };
    log::info!(
        "memory budget: {} MiB for page lists, WQEs and QP state",
        config.mem_budget >> 20
    );
    let mut engine = Engine::new(port_config.clone(), limits);
    let port = match &config.mode {
        // Issue 26: an InfiniBand port has its SMA (`mgmt`); the fabric file's
        // `subnet` says whether it comes up by itself or waits for an SM.
        FabricMode::IbUdp { fabric, node, .. } => {
            let mode = fabric.subnet();
            log::info!("subnet: {mode:?} (the device's SMA answers on QP0)");
            let mut mgmt = crate::mgmt::Mgmt::new(&port_config, &node.name, mode);
            // Issue 31: the file's IBA congestion control, as the port's CC
            // agent would hold it from an SM's CC manager.
            if let Some(c) = fabric.ib_cc() {
                mgmt.cc_agent_mut().set_ca_setting(&c.ca);
                mgmt.cc_agent_mut().set_cct(&c.cct);
                mgmt.restore(&mut engine);
            }
            Port::with_mgmt(engine, link, mgmt)
        }
        FabricMode::Roce { .. } => Port::new(engine, link),
    };
    let function = function(&caps)?;
    let mut server = pci::Server::bind(&config.socket, function)?;
    let handle = server.handle();
    let mut hca = Hca::new(port);
    hca.caps.dm_size = caps.dm_size;
    let mut core = Core {
        hca,
        regs: Regs::default(),
        cmdq: None,
        port_config,
        limits,
        net,
        cmd_stats: CmdStats::default(),
    };
    // `--no-odp` (issue 29): what QUERY_DEVICE and the commands see.
    core.hca.caps.odp = config.odp;
    core.reset();
    let shared = Arc::new(Shared {
        core: Mutex::new(core),
        wake: EventFd::new(EFD_NONBLOCK)?,
        stop: AtomicBool::new(false),
        stopped: AtomicBool::new(false),
        front_waiting: AtomicUsize::new(0),
        handle,
        link_always: true,
    });
    if let Some(addr) = config.metrics_listen {
        let shared = Arc::clone(&shared);
        crate::metrics::listen_device(addr, move || shared.lock().counters_snapshot())?;
    }
    // SIGTERM / SIGINT: stop the data path, let it flush the capture, print the
    // counters and exit 0. The vfio-user thread may be inside a client's
    // connection, which the crate gives no way to cut, so the process exits
    // from here rather than waiting for `serve` to return.
    let counters = CountersOutput::new(
        config.counters_every,
        config.counters_format,
        config.counters_file.clone(),
    );
    {
        let shared = Arc::clone(&shared);
        let mut counters = counters.clone();
        let socket = config.socket.clone();
        let net_socket = match &config.mode {
            FabricMode::Roce { vhost_user_net, .. } => vhost_user_net.clone(),
            FabricMode::IbUdp { .. } => None,
        };
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGINT,
        ])?;
        std::thread::Builder::new()
            .name("vhca-signals".into())
            .spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    log::info!("vhca: signal {sig}: stopping");
                    shared.stop();
                    let t = Instant::now();
                    while !shared.stopped.load(Ordering::Acquire)
                        && t.elapsed() < Duration::from_secs(2)
                    {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    counters.report(&shared.lock().counters_snapshot());
                    let _ = std::fs::remove_file(&socket);
                    if let Some(p) = &net_socket {
                        let _ = std::fs::remove_file(p);
                    }
                    std::process::exit(0);
                }
            })?;
    }
    // Issue 30: the copies' piece size suits this CPU (a few milliseconds,
    // once everything that can refuse the configuration has).
    crate::copy_tune::apply();
    let dp = {
        let shared = Arc::clone(&shared);
        let every = counters.clone();
        let busy = config.busy_poll;
        std::thread::Builder::new()
            .name("vhca-data".into())
            .spawn(move || supervise_data_path(shared, every, busy))?
    };
    log::info!("vhca: {what} serving on {}", config.socket.display());
    let mut front = Front {
        shared: Arc::clone(&shared),
    };
    let r = server.serve(&mut front);
    shared.stop();
    let _ = dp.join();
    let mut counters = counters;
    counters.report(&shared.lock().counters_snapshot());
    r.map_err(Into::into)
}
