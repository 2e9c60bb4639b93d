//! Packets into an engine (ARCHITECTURE.md §3, §9 hostile peer): RC, UC and UD QPs
//! in every state (Reset, Init, RTR, RTS, SQD, SQE, Error), some on an SRQ, with
//! MRs, posted receives and sends in flight, on an InfiniBand or a RoCEv2 port.
//! The input is a list of operations (arbitrary crate): packets (a transport part
//! the harness frames, addresses to one of the QPs and gives right CRCs, or whole
//! frames), transmit polls, time steps, posts and state changes. Nothing may
//! panic, and memory outside the registered region must stay untouched (MP-xx:
//! no access outside permission).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use transport::verbs::{AttrMask, QpAttr, QpState};
use vhca_fuzz::bench::{recv, Bench, MR_LEN, MR_OFF, OPCODES};
use vhca_fuzz::{fix_native, fix_roce};

#[derive(Arbitrary, Debug)]
enum Op {
    /// A transport part (BTH onward, no ICRC) to QP `qp` of the table; flags:
    /// bit 0 keep the fuzzer's DestQP, bit 1 keep its P_Key, bit 2 keep its PSN
    /// (else PSN + `psn`), bit 3 GRH (InfiniBand; RoCE always has one), bit 4
    /// IPv6 (RoCE).
    Packet {
        qp: u8,
        flags: u8,
        psn: u8,
        bytes: Vec<u8>,
    },
    /// A whole packet or frame, with only the CRCs and lengths fixed.
    Raw(Vec<u8>),
    /// Up to n packets out.
    Transmit(u8),
    /// Time passes (microseconds * 16) and timers fire.
    Advance(u16),
    PostSend {
        qp: u8,
        opcode: u8,
        off: u16,
        len: u16,
        key: bool,
    },
    PostRecv {
        qp: u8,
        off: u16,
        len: u16,
    },
    Modify {
        qp: u8,
        state: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    roce: bool,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let mut b = Bench::new(input.roce);
    for op in input.ops.iter().take(256) {
        match op {
            Op::Packet {
                qp,
                flags,
                psn,
                bytes,
            } => b.packet(*qp, *flags, *psn, bytes),
            Op::Raw(bytes) => {
                let mut p = bytes.clone();
                if b.roce {
                    fix_roce(&mut p);
                } else {
                    fix_native(&mut p);
                }
                b.e.handle_packet(&p, &mut b.mem, b.now);
            }
            Op::Transmit(n) => b.transmit(*n % 32),
            Op::Advance(us) => {
                b.now = b.now.plus_ns(u64::from(*us) * 16_000);
                b.e.handle_timeout(b.now);
                b.transmit(4);
            }
            Op::PostSend {
                qp,
                opcode,
                off,
                len,
                key,
            } => {
                let i = usize::from(*qp) % b.qps.len();
                let op = OPCODES[usize::from(*opcode) % OPCODES.len()];
                let mut wr = b.send_wr(i, op, u32::from(*off) % MR_LEN as u32, u32::from(*len));
                if !key {
                    wr.rkey = 0;
                }
                let _ = b.e.post_send(b.qps[i].0, wr);
            }
            Op::PostRecv { qp, off, len } => {
                let i = usize::from(*qp) % b.qps.len();
                let r = recv(0, b.lkey, u64::from(*off) % MR_LEN, u32::from(*len));
                let _ = b.e.post_recv(b.qps[i].0, r);
            }
            Op::Modify { qp, state } => {
                let i = usize::from(*qp) % b.qps.len();
                let s = [
                    QpState::Reset,
                    QpState::Init,
                    QpState::Rtr,
                    QpState::Rts,
                    QpState::Sqd,
                    QpState::Error,
                ][usize::from(*state) % 6];
                let a = QpAttr {
                    state: Some(s),
                    ..QpAttr::default()
                };
                let _ = b.e.modify_qp(b.qps[i].0, &a, AttrMask::STATE, b.now);
            }
        }
    }
    b.transmit(64);
    // Nothing outside the registered window was written (MP-03, C9-xx: an access
    // outside an MR's bounds is refused, never performed).
    let (lo, hi) = (MR_OFF as usize, (MR_OFF + MR_LEN) as usize);
    assert!(
        b.mem.bytes[..lo].iter().all(|&x| x == 0),
        "write below the MR"
    );
    assert!(
        b.mem.bytes[hi..].iter().all(|&x| x == 0),
        "write above the MR"
    );
});
