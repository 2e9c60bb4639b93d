//! Packets into an engine (ARCHITECTURE.md §3, §9 hostile peer): RC, UC and UD QPs
//! in every state (Reset, Init, RTR, RTS, SQD, SQE, Error), some on an SRQ, with
//! MRs, posted receives and sends in flight, on an InfiniBand or a RoCEv2 port;
//! RD QPs on an EE context (AD-11), an XRC TGT QP on an XRC SRQ and an INI QP
//! (SR-02), UD QPs in multicast groups (AD-09), an RC QP with an armed alternate
//! path (AD-10), on a port whose data VLs, SL-to-VL and VL arbitration tables,
//! link and static rates (pacing), credits and receive reorder hold the input
//! sets (fuzz/src/bench.rs `Setup`; issue 25 item 7).
//! The input is a list of operations (arbitrary crate): packets (a transport part
//! the harness frames, addresses to one of the QPs and gives right CRCs, or whole
//! frames), transmit polls, time steps, posts and state changes. Nothing may
//! panic, and memory outside the registered region must stay untouched (MP-xx:
//! no access outside permission).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use transport::verbs::{AttrMask, MigState, QpAttr, QpState, QpType, RdDest};
use vhca_fuzz::bench::{mgid, mlid, recv, Bench, Setup, MR_LEN, MR_OFF, OPCODES, PEER_QPN, QKEY};
use vhca_fuzz::{fix_native, fix_roce};

#[derive(Arbitrary, Debug)]
enum Op {
    /// A transport part (BTH onward, no ICRC) to QP `qp` of the table (the
    /// bench's QPs, then its RD QPs); flags: bit 0 keep the fuzzer's DestQP,
    /// bit 1 keep its P_Key, bit 2 keep its PSN (else PSN + `psn`), bit 3 GRH
    /// (InfiniBand; RoCE always has one), bit 4 IPv6 (RoCE), bit 5 the extended
    /// header the QP needs (RDETH+DETH, XRCETH, DETH), bit 6 from the peer's
    /// alternate path. On SL `sl` (LRH:VL from the SL-to-VL table).
    Packet {
        qp: u8,
        flags: u8,
        psn: u8,
        sl: u8,
        bytes: Vec<u8>,
    },
    /// A datagram to a multicast group (of 4; groups 0 and 1 have members).
    Mcast {
        group: u8,
        sl: u8,
        bytes: Vec<u8>,
    },
    /// A whole packet or frame, with only the CRCs and lengths fixed.
    Raw(Vec<u8>),
    /// A whole packet as a shared-memory peer hands it in: CRCs as they are,
    /// vouched for (`RxFrom::crcs_vouched`, issue 30), every other check
    /// still the engine's.
    Vouched(Vec<u8>),
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
    /// A send on RD QP `qp` through the EE context (or a bad one).
    PostSendRd {
        qp: u8,
        opcode: u8,
        off: u16,
        len: u16,
        bad_eec: bool,
    },
    PostRecvRd {
        qp: u8,
        off: u16,
        len: u16,
    },
    /// A send on the XRC INI QP to XRC SRQ `srqn` (0: the bench's).
    PostSendXrc {
        opcode: u8,
        off: u16,
        len: u16,
        srqn: u8,
    },
    PostRecvXrc {
        off: u16,
        len: u16,
    },
    /// Attach (or detach) QP `qp` to multicast group `group`.
    Attach {
        qp: u8,
        group: u8,
        detach: bool,
    },
    /// Load (or not) an alternate path on QP `qp`, set migration state `mig`.
    Alt {
        qp: u8,
        mig: u8,
        load: bool,
    },
    /// The EE context to a state.
    Eec {
        state: u8,
    },
    /// SL-to-VL table change (AD-06).
    Sl2Vl([u8; 16]),
    /// The port's link went down or up (AE-01).
    Port(bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    roce: bool,
    setup: Setup,
    ops: Vec<Op>,
}

fn state(s: u8) -> QpState {
    [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Error,
    ][usize::from(s) % 6]
}

fuzz_target!(|input: Input| {
    let mut b = Bench::with(input.roce, &input.setup);
    for op in input.ops.iter().take(256) {
        match op {
            Op::Packet {
                qp,
                flags,
                psn,
                sl,
                bytes,
            } => b.packet(*qp, *flags, *psn, *sl, bytes),
            Op::Mcast { group, sl, bytes } => b.mcast_packet(*group, *sl, bytes),
            Op::Raw(bytes) => {
                let mut p = bytes.clone();
                if b.roce {
                    fix_roce(&mut p);
                } else {
                    fix_native(&mut p);
                }
                b.e.handle_packet(&p, &mut b.mem, b.now);
            }
            Op::Vouched(bytes) => {
                let from = transport::engine::RxFrom {
                    src_lid: None,
                    crcs_vouched: true,
                };
                b.e.handle_received(bytes, from, &mut b.mem, b.now);
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
                let _ = if b.qps[i].1 == QpType::XrcIni {
                    b.e.post_send_xrc(b.qps[i].0, wr, b.xrc_srq)
                } else {
                    b.e.post_send(b.qps[i].0, wr)
                };
            }
            Op::PostRecv { qp, off, len } => {
                let i = usize::from(*qp) % b.qps.len();
                let r = recv(0, b.lkey, u64::from(*off) % MR_LEN, u32::from(*len));
                let _ = b.e.post_recv(b.qps[i].0, r);
            }
            Op::Modify { qp, state: s } => {
                let i = usize::from(*qp) % b.qps.len();
                let a = QpAttr {
                    state: Some(state(*s)),
                    ..QpAttr::default()
                };
                let _ = b.e.modify_qp(b.qps[i].0, &a, AttrMask::STATE, b.now);
            }
            Op::PostSendRd {
                qp,
                opcode,
                off,
                len,
                bad_eec,
            } => {
                let q = b.rd[usize::from(*qp) % b.rd.len()];
                let op = OPCODES[usize::from(*opcode) % OPCODES.len()];
                // Index 0 of the table is an RC QP, so the WR has no UdDest.
                let wr = b.send_wr(0, op, u32::from(*off) % MR_LEN as u32, u32::from(*len));
                let dest = RdDest {
                    eecn: b.eecn ^ u32::from(*bad_eec),
                    remote_qpn: PEER_QPN,
                    remote_qkey: QKEY,
                };
                let _ = b.e.post_send_rd(q, wr, dest);
            }
            Op::PostRecvRd { qp, off, len } => {
                let q = b.rd[usize::from(*qp) % b.rd.len()];
                let r = recv(0, b.lkey, u64::from(*off) % MR_LEN, u32::from(*len));
                let _ = b.e.post_recv_rd(q, r);
            }
            Op::PostSendXrc {
                opcode,
                off,
                len,
                srqn,
            } => {
                let op = OPCODES[usize::from(*opcode) % OPCODES.len()];
                let wr = b.send_wr(0, op, u32::from(*off) % MR_LEN as u32, u32::from(*len));
                let srq = if *srqn == 0 {
                    b.xrc_srq
                } else {
                    u32::from(*srqn)
                };
                let _ = b.e.post_send_xrc(b.xrc_ini, wr, srq);
            }
            Op::PostRecvXrc { off, len } => {
                let r = recv(0, b.lkey, u64::from(*off) % MR_LEN, u32::from(*len));
                let _ = b.e.post_srq_recv(b.xrc_srq, r);
            }
            Op::Attach { qp, group, detach } => {
                let q = b.qps[usize::from(*qp) % b.qps.len()].0;
                let _ = if *detach {
                    b.e.detach_mcast(q, mgid(*group), mlid(*group))
                } else {
                    b.e.attach_mcast(q, mgid(*group), mlid(*group))
                };
            }
            Op::Alt { qp, mig, load } => {
                let q = if *qp == 0 {
                    b.apm_qp
                } else {
                    b.qps[usize::from(*qp) % b.qps.len()].0
                };
                let m =
                    [MigState::Migrated, MigState::Rearm, MigState::Armed][usize::from(*mig) % 3];
                b.alt(q, m, *load);
            }
            Op::Eec { state: s } => {
                let (_, a, _) = match b.e.query_eec(b.eecn) {
                    Ok(x) => x,
                    Err(_) => continue,
                };
                let _ = b.e.modify_eec(b.eecn, state(*s), &a, b.now);
            }
            Op::Sl2Vl(t) => {
                let _ = b.e.set_sl2vl(t.map(|v| v % 16));
            }
            Op::Port(up) => b.e.port_changed(*up),
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
