//! The device bench of the `cmdq` target and of the seed generator
//! (examples/seeds.rs): a Hca with fake guest memory, a command ring and a
//! loopback link, driven by records (see [`Op`]).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::Duration;

use device::abi::bar0::{CtxTable, Fatal};
use device::abi::cmd::{cmd_owner, pbl_const, Cmd, Opcode, Pbl};
use device::abi::uar::uar;
use device::cmdq::{execute_staged, Budget, CmdDone, CmdQueue, Prepared};
use device::context::snapshot_with_doorbells;
use device::fabric::{Link, LinkError, Received};
use device::glue::VecDoorbells;
use device::hca::{DbSlot, Doorbells, Eq, Hca, Interrupts, SlotOwner};
use device::port::Port;
use device::ring::Ring;
use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::{Memory, VecMemory};

pub const MEM: usize = 512 * 1024;
/// 128 command slots: two pages.
pub const CMDQ: u64 = 0x1000;
pub const CMDQ_LOG2: u32 = 7;
pub const IN_MB: u64 = 0x3000;
pub const OUT_MB: u64 = 0x4000;
pub const EQ0_RING: u64 = 0x5000;
pub const LID: u16 = 7;
pub const GUID: u64 = 0x0002_c903_0000_0007;
pub const UARS: usize = 4;

/// A link that loops every packet back (a one-node fabric, AD-04), holding at
/// most 256.
#[derive(Default)]
pub struct Loop(VecDeque<Vec<u8>>);

impl Link for Loop {
    fn send(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        if self.0.len() < 256 {
            self.0.push_back(packet.to_vec());
        }
        Ok(())
    }
    fn recv_batch(
        &mut self,
        _now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.0.pop_front() else {
                break;
            };
            deliver(Received {
                packet: &p,
                lent: None,
                src_lid: None,
                crcs_vouched: false,
            });
            n += 1;
        }
        Ok(n)
    }
    fn raw_fd(&self) -> RawFd {
        -1
    }
    fn poll_timeout(&self) -> Option<Duration> {
        None
    }
    fn handle_timeout(&mut self, _now: Duration) -> Result<(), LinkError> {
        Ok(())
    }
}

pub struct NoIrq;
impl Interrupts for NoIrq {
    fn trigger(&self, _vector: u16) {}
}

/// The commands a record's tag names (`tag % len`); issue 25 item 7 appended
/// the multicast, XRC domain, RD domain and EE context commands, issue 29 the
/// on-demand paging ones (appended, so the tags of the older seeds keep their
/// meaning).
pub const OPCODES: [Opcode; 40] = [
    Opcode::Nop,
    Opcode::QueryDevice,
    Opcode::QueryPort,
    Opcode::QueryCounters,
    Opcode::SetGid,
    Opcode::AllocPd,
    Opcode::DeallocPd,
    Opcode::CreateEq,
    Opcode::DestroyEq,
    Opcode::CreateCq,
    Opcode::DestroyCq,
    Opcode::ResizeCq,
    Opcode::CreateSrq,
    Opcode::ModifySrq,
    Opcode::QuerySrq,
    Opcode::DestroySrq,
    Opcode::ResizeSrq,
    Opcode::CreateQp,
    Opcode::ModifyQp,
    Opcode::QueryQp,
    Opcode::DestroyQp,
    Opcode::RegMr,
    Opcode::ReregMr,
    Opcode::DeregMr,
    Opcode::AllocMw,
    Opcode::DeallocMw,
    Opcode::AllocPd,
    Opcode::AttachMcast,
    Opcode::DetachMcast,
    Opcode::AllocXrcd,
    Opcode::DeallocXrcd,
    Opcode::AllocRdd,
    Opcode::DeallocRdd,
    Opcode::CreateEec,
    Opcode::ModifyEec,
    Opcode::QueryEec,
    Opcode::DestroyEec,
    Opcode::MapOdp,
    Opcode::UnmapOdp,
    Opcode::OdpFaultFail,
];

/// One operation of the input. The encoding is a plain record format (not the
/// arbitrary crate's) so that `examples/seeds.rs` writes seeds from the ABI's own
/// structs: a tag byte, then the fields little-endian:
/// - `0x00..=0x7f` command `OPCODES[tag % 27]`: flags u8, out_len u16, in_len u16,
///   input; `0x80` the same with a raw opcode u16 first;
/// - `0x81` a whole 64-byte slot; `0x82` poke: addr u32, len u16, bytes;
/// - `0x83` doorbell: uar u8, word u16 (4-byte words of the page), value u32;
///   `0x84` rounds: n u8;
/// - `0x85` context window: table u8, index u32;
/// - `0x86` staging: mode u8 (bit 0 heavy commands run in steps, as the
///   running device does, `CmdQueue::set_staged`; bit 1 the guest rewrites the
///   slot of a command in progress between its steps); `0x87..` as `0x85`.
pub enum Op<'a> {
    Cmd {
        opcode: u16,
        flags: u8,
        input: &'a [u8],
        out_len: u16,
    },
    Slot(&'a [u8]),
    Poke {
        addr: u32,
        bytes: &'a [u8],
    },
    Doorbell {
        uar: u8,
        slot: u16,
        value: u32,
    },
    Run(u8),
    Context {
        table: u8,
        index: u32,
    },
    Staged(u8),
}

/// Reads the records of an input; a short record ends it.
pub struct Ops<'a>(pub &'a [u8]);

impl<'a> Ops<'a> {
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = self.0.split_at_checked(n)?;
        self.0 = b;
        Some(a)
    }
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub fn cmd(&mut self, opcode: u16) -> Option<Op<'a>> {
        let flags = self.u8()?;
        let out_len = self.u16()?;
        let n = self.u16()?;
        Some(Op::Cmd {
            opcode,
            flags,
            out_len,
            input: self.take(usize::from(n))?,
        })
    }
}

impl<'a> Iterator for Ops<'a> {
    type Item = Op<'a>;
    fn next(&mut self) -> Option<Op<'a>> {
        match self.u8()? {
            t @ 0..=0x7f => self.cmd(OPCODES[usize::from(t) % OPCODES.len()].raw()),
            0x80 => {
                let op = self.u16()?;
                self.cmd(op)
            }
            0x81 => Some(Op::Slot(self.take(64)?)),
            0x82 => {
                let addr = self.u32()?;
                let n = self.u16()?;
                Some(Op::Poke {
                    addr,
                    bytes: self.take(usize::from(n))?,
                })
            }
            0x83 => Some(Op::Doorbell {
                uar: self.u8()?,
                slot: self.u16()?,
                value: self.u32()?,
            }),
            0x84 => Some(Op::Run(self.u8()?)),
            0x86 => Some(Op::Staged(self.u8()?)),
            _ => Some(Op::Context {
                table: self.u8()?,
                index: self.u32()?,
            }),
        }
    }
}

pub struct Dev {
    pub hca: Hca,
    q: CmdQueue,
    pub mem: VecMemory,
    db: VecDoorbells,
    pi: u32,
    now: Duration,
    /// `Op::Staged`'s mode.
    staged: u8,
    /// Steps the staged commands took (a command that waited at least once).
    pub steps: u64,
    /// Prepared pieces of a staged command kept across a reset (`reset`).
    pub stale: Option<Prepared>,
}

fn engine() -> Engine {
    Engine::new(PortConfig::new(LID, GUID), Limits::default())
}

impl Default for Dev {
    fn default() -> Dev {
        Dev::new()
    }
}

impl Dev {
    pub fn new() -> Dev {
        let mem = VecMemory::new(0, MEM);
        let q = CmdQueue::new(&mem, CMDQ, CMDQ_LOG2, 10).unwrap();
        let port = Port::new(engine(), Box::new(Loop::default()));
        let mut d = Dev {
            hca: Hca::new(port),
            q,
            mem,
            db: VecDoorbells::new(UARS),
            pi: 0,
            now: Duration::from_secs(1),
            staged: 0,
            steps: 0,
            stale: None,
        };
        // Device memory (issue 29 item 2): REG_MR with DM is checked against
        // it; what a DM MR reaches is the DM window, outside this memory, so
        // an access through one fails as any unmapped address does.
        d.hca.caps.dm_size = 64 << 10;
        d.install_eq0();
        d
    }

    /// EQ 0, as BAR0's ENABLE installs it.
    fn install_eq0(&mut self) {
        let pbl = Pbl {
            addr: EQ0_RING,
            npages: 1,
            page_shift: 12,
            levels: pbl_const::CONTIGUOUS as u8,
            rsvd: 0,
        };
        let ring = Ring::new(&self.mem, vec![EQ0_RING], 12, 4, 6, 16).unwrap();
        let slot = DbSlot {
            uar: 0,
            slot: uar::EQ0_SLOT as u16,
        };
        self.hca.eqs.insert(
            0,
            Eq {
                ring,
                vector: 0,
                db: slot,
                pi: 0,
                last_arm: 0,
                users: 0,
                overflows: 0,
                pbl,
            },
        );
        self.hca.slots.insert(slot, SlotOwner::Eq(0));
    }

    /// A device reset (DEV_CTRL.RESET, a PCI reset, a new client) as
    /// device/src/run.rs `Core::reset` does it: a new engine, every object
    /// dropped, the command queue gone; then the driver enables the device
    /// again (a new queue over the same ring, EQ 0). The link and whatever it
    /// holds in flight stay: packets sent before the reset arrive after it. A
    /// staged command's prepared pieces from before (`stale`) are handed to
    /// the first batch after, which must drop them (another queue).
    pub fn reset(&mut self) {
        self.hca.reset(engine(), self.now);
        self.q = CmdQueue::new(&self.mem, CMDQ, CMDQ_LOG2, 10).unwrap();
        self.q.set_staged(self.staged & 1 != 0);
        // The driver starts the new queue at slot 0 with every slot its own.
        self.pi = 0;
        for i in 0..(1u32 << CMDQ_LOG2) {
            let at = self.slot_addr(i);
            self.mem.write(at + 6, &[0]).unwrap();
        }
        self.install_eq0();
    }

    pub fn slot_addr(&self, i: u32) -> u64 {
        CMDQ + u64::from(i % (1 << CMDQ_LOG2)) * Cmd::SIZE as u64
    }

    /// Posts `slot` and runs the queue; `false` when the queue went fatal.
    pub fn submit(&mut self, slot: &[u8]) -> bool {
        let at = self.post(slot);
        // Staged (the running device's way, device/src/run): a heavy command
        // stops with a ticket, whose pieces are prepared (without the lock
        // there) and handed to the next batch; a two-ring command takes two
        // steps. Bounded: every step answers at least one piece.
        let mut pre = self.stale.take();
        let mut r = Ok(Vec::new());
        for step in 0..8 {
            r = self.batch(pre.take());
            let Some(t) = self.q.take_waiting() else {
                break;
            };
            assert!(step < 7, "a staged command still waits after 7 steps");
            self.steps += 1;
            if self.staged & 2 != 0 {
                // The guest rewrites the slot (not its owner byte) meanwhile:
                // the command was read once, so this changes nothing.
                let mut junk = [0xa5u8; 64];
                junk[6] = cmd_owner::DEVICE;
                self.mem.write(at, &junk).unwrap();
            }
            pre = Some(t.prepare(&mut self.mem));
        }
        match r {
            Ok(_) => {
                // One command posted, one completed, its slot handed back.
                assert_eq!(self.q.ci(), self.pi, "command not completed");
                let mut owner = [0u8];
                self.mem.read(at + 6, &mut owner).unwrap();
                assert_eq!(owner[0], 0, "owner not cleared");
                true
            }
            Err(_) => false,
        }
    }

    /// Writes `slot` at PI with the owner bit set and moves PI on; the slot's
    /// address.
    fn post(&mut self, slot: &[u8]) -> u64 {
        let at = self.slot_addr(self.pi);
        self.mem.write(at, slot).unwrap();
        self.mem.write(at + 6, &[cmd_owner::DEVICE]).unwrap();
        self.pi = self.pi.wrapping_add(1);
        at
    }

    /// One batch of the queue up to PI, with the prepared pieces `pre`.
    fn batch(&mut self, pre: Option<Prepared>) -> Result<Vec<CmdDone>, Fatal> {
        execute_staged(
            &mut self.hca,
            &mut self.q,
            self.pi,
            &mut self.mem,
            &self.db,
            self.now,
            Budget::default(),
            pre,
        )
    }

    /// Posts the command of `op` (a command record) and runs one batch only: a
    /// staged command that waits stays in progress, its pieces prepared into
    /// `stale` (for a reset to interrupt). `false` when the queue went fatal.
    pub fn begin(&mut self, op: Op<'_>) -> bool {
        let slot = match op {
            Op::Cmd { .. } | Op::Slot(_) => self.slot_of(op),
            other => return self.apply(other),
        };
        self.post(&slot);
        let r = self.batch(None);
        if let Some(t) = self.q.take_waiting() {
            self.stale = Some(t.prepare(&mut self.mem));
        }
        r.is_ok()
    }

    /// Runs one operation; `false` when the command queue went fatal (the device
    /// stops taking commands then, abi::bar0 FATAL).
    pub fn apply(&mut self, op: Op<'_>) -> bool {
        match op {
            Op::Cmd { .. } | Op::Slot(_) => {
                let slot = self.slot_of(op);
                return self.submit(&slot);
            }
            Op::Poke { addr, bytes } => {
                let a = u64::from(addr) % MEM as u64;
                let n = bytes.len().min(MEM - a as usize);
                self.mem.write(a, &bytes[..n]).unwrap();
            }
            Op::Doorbell { uar, slot, value } => {
                let off = u64::from(uar) % UARS as u64 * u64::from(uar::PAGE_SIZE)
                    + u64::from(slot) * 4 % u64::from(uar::PAGE_SIZE);
                self.db.store(off, value);
                // And the slot's doorbell summary bit, as a driver would
                // (abi::uar DOORBELL_PROTOCOL), so a stored index reaches the
                // ring consumer; a word of the header or summary flags a
                // slot below FIRST_SLOT, which the device must drop.
                let page = off - off % u64::from(uar::PAGE_SIZE);
                let slot = (off % u64::from(uar::PAGE_SIZE)) / u64::from(uar::SLOT_SIZE);
                self.db.fetch_or(
                    page + u64::from(uar::SUMMARY_OFFSET) + slot / 32 * 4,
                    1 << (slot % 32),
                );
            }
            Op::Run(n) => {
                for _ in 0..(n % 8) {
                    self.now += Duration::from_micros(100);
                    self.hca.run_once(&mut self.mem, &self.db, &NoIrq, self.now);
                }
            }
            Op::Staged(mode) => {
                self.staged = mode;
                self.q.set_staged(mode & 1 != 0);
            }
            Op::Context { table, index } => {
                if let Some(t) = CtxTable::from_raw(u32::from(table % 8)) {
                    let _ = snapshot_with_doorbells(&self.hca, &self.db, t, index);
                }
            }
        }
        true
    }

    /// The slot of a command record (its input in the inbound mailbox when
    /// longer than the slot's inline data).
    fn slot_of(&mut self, op: Op<'_>) -> Vec<u8> {
        match op {
            Op::Cmd {
                opcode,
                flags,
                input,
                out_len,
            } => {
                let mut c = Cmd {
                    opcode,
                    flags,
                    ..Cmd::default()
                };
                let input = &input[..input.len().min(4096)];
                if input.len() <= c.data.len() {
                    c.data[..input.len()].copy_from_slice(input);
                } else {
                    self.mem.write(IN_MB, input).unwrap();
                    c.in_mailbox = IN_MB;
                    c.in_len = input.len() as u16;
                }
                if usize::from(out_len) > c.data.len() {
                    c.out_mailbox = OUT_MB;
                    c.out_len = out_len % 4097;
                }
                c.to_bytes().to_vec()
            }
            Op::Slot(s) => s.to_vec(),
            _ => Vec::new(),
        }
    }

    /// The final rounds: whatever the operations left in flight moves on.
    pub fn finish(&mut self) {
        for _ in 0..4 {
            self.now += Duration::from_millis(10);
            self.hca.run_once(&mut self.mem, &self.db, &NoIrq, self.now);
        }
    }

    /// The inline data of the last completed command (its output, abi::cmd).
    pub fn last_out(&self) -> [u8; 32] {
        let mut b = [0u8; 64];
        self.mem
            .read(self.slot_addr(self.pi.wrapping_sub(1)), &mut b)
            .unwrap();
        b[32..].try_into().unwrap()
    }

    /// Status of the last completed command.
    pub fn last_status(&self) -> u8 {
        let mut b = [0u8; 1];
        self.mem
            .read(self.slot_addr(self.pi.wrapping_sub(1)) + 5, &mut b)
            .unwrap();
        b[0]
    }
}
