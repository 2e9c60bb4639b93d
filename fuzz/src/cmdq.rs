//! The device bench of the `cmdq` target and of the seed generator
//! (examples/seeds.rs): a Hca with fake guest memory, a command ring and a
//! loopback link, driven by records (see [`Op`]).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::time::Duration;

use device::abi::bar0::CtxTable;
use device::abi::cmd::{cmd_owner, pbl_const, Cmd, Opcode, Pbl};
use device::abi::uar::uar;
use device::cmdq::{execute_pending, Budget, CmdQueue};
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
                src_lid: None,
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

pub const OPCODES: [Opcode; 27] = [
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
];

/// One operation of the input. The encoding is a plain record format (not the
/// arbitrary crate's) so that `examples/seeds.rs` writes seeds from the ABI's own
/// structs: a tag byte, then the fields little-endian:
/// - `0x00..=0x7f` command `OPCODES[tag % 27]`: flags u8, out_len u16, in_len u16,
///   input; `0x80` the same with a raw opcode u16 first;
/// - `0x81` a whole 64-byte slot; `0x82` poke: addr u32, len u16, bytes;
/// - `0x83` doorbell: uar u8, word u16 (4-byte words of the page), value u32;
///   `0x84` rounds: n u8;
/// - `0x85` context window: table u8, index u32.
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
        let port = Port::new(
            Engine::new(PortConfig::new(LID, GUID), Limits::default()),
            Box::new(Loop::default()),
        );
        let mut hca = Hca::new(port);
        // EQ 0, as BAR0's ENABLE installs it.
        let pbl = Pbl {
            addr: EQ0_RING,
            npages: 1,
            page_shift: 12,
            levels: pbl_const::CONTIGUOUS as u8,
            rsvd: 0,
        };
        let ring = Ring::new(&mem, vec![EQ0_RING], 12, 4, 6, 16).unwrap();
        let slot = DbSlot {
            uar: 0,
            slot: uar::EQ0_SLOT as u16,
        };
        hca.eqs.insert(
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
        hca.slots.insert(slot, SlotOwner::Eq(0));
        Dev {
            hca,
            q,
            mem,
            db: VecDoorbells::new(UARS),
            pi: 0,
            now: Duration::from_secs(1),
        }
    }

    pub fn slot_addr(&self, i: u32) -> u64 {
        CMDQ + u64::from(i % (1 << CMDQ_LOG2)) * Cmd::SIZE as u64
    }

    /// Posts `slot` and runs the queue; `false` when the queue went fatal.
    pub fn submit(&mut self, slot: &[u8]) -> bool {
        let at = self.slot_addr(self.pi);
        self.mem.write(at, slot).unwrap();
        self.mem.write(at + 6, &[cmd_owner::DEVICE]).unwrap();
        self.pi = self.pi.wrapping_add(1);
        match execute_pending(
            &mut self.hca,
            &mut self.q,
            self.pi,
            &mut self.mem,
            &self.db,
            self.now,
            Budget::default(),
        ) {
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

    /// Runs one operation; `false` when the command queue went fatal (the device
    /// stops taking commands then, abi::bar0 FATAL).
    pub fn apply(&mut self, op: Op<'_>) -> bool {
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
                return self.submit(&c.to_bytes());
            }
            Op::Slot(s) => {
                return self.submit(s);
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
            Op::Context { table, index } => {
                if let Some(t) = CtxTable::from_raw(u32::from(table % 8)) {
                    let _ = snapshot_with_doorbells(&self.hca, &self.db, t, index);
                }
            }
        }
        true
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
