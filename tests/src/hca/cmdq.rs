//! The command queue as the driver runs it (abi::cmd COMMAND_PROTOCOL):
//! parameters and their encoding, command errors, posting slots and waiting for
//! the device to hand them back.

use std::fmt;
use std::sync::atomic::{fence, Ordering};
use std::time::{Duration, Instant};

use device::abi::bar0::{reg, Fatal};
use device::abi::cmd::{cmd_const, cmd_flags, cmd_owner, commands, Cmd, Opcode, Status};
use device::abi::ident::bar;
use device::abi::layout::{AbiStruct, Field};

use crate::guest;

use super::Hca;

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

impl Hca {
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
}
