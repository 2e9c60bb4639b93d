//! The crafted-packet bench (IBA 9.6, 9.7, ch. 10/11 checks): two engines and
//! a connected RC pair, requests and responses built field by field with
//! correct CRCs ([`Craft`]), fed to one engine with [`inject`], and what the
//! engine answers read back parsed ([`drain`], [`Seen`]). Used by crafted.rs
//! and conformance.rs.

use super::*;
use transport::engine::{Limits, NakReason, RxDrop};
use transport::verbs::{Access, Completion, Event, Handle, QpState, RecvWr, Sge, Time};
use transport::wire::opcode::Opcode;
use transport::wire::{
    AethSyndrome, AtomicEthRepr, BthRepr, ExtHeaders, LrhRepr, NakCode, PacketRepr, RethRepr,
    TransportRepr,
};

pub const A: usize = 0;
pub const B: usize = 1;
pub const MEM_LEN: usize = 1 << 16;
/// Where crafted requests write, read and operate in B's memory.
pub const TARGET: u64 = MEM_BASE + 0x4000;
pub const ACK: AethSyndrome = AethSyndrome::Ack { credit_code: 31 };

/// An ACK with any credit count as [`ACK`], for tests of other things than
/// the count (RL-13 has its own).
pub fn any_credits(s: AethSyndrome) -> AethSyndrome {
    match s {
        AethSyndrome::Ack { .. } => ACK,
        other => other,
    }
}

// ------------------------------------------------------------------ bench

/// Two nodes, all memory registered on both, one connected pair.
pub struct Bench {
    pub net: Net,
    pub p: Pair,
    pub o: ConnOpts,
    pub ka: u32,
    pub kb: u32,
}

pub fn bench_with(o: ConnOpts) -> Bench {
    bench_limits(o, Limits::default())
}

pub fn bench_limits(o: ConnOpts, limits: Limits) -> Bench {
    // Each crafted packet is processed as it is injected, no time passing:
    // the receive reorder hold in front of that processing (vhca policy)
    // has its own tests (engine_reorder.rs).
    let limits = Limits {
        reorder_hold_ns: 0,
        ..limits
    };
    let mut net = Net::with_limits(2, MEM_LEN, 7, limits);
    let ka = net.reg_all(A, ALL_ACCESS);
    let kb = net.reg_all(B, ALL_ACCESS);
    let p = connect(&mut net, A, B, &o);
    Bench { net, p, o, ka, kb }
}

pub fn bench() -> Bench {
    bench_with(ConnOpts::default())
}

impl Bench {
    /// The PSN B expects next (A's start PSN).
    pub fn epsn_b(&self) -> u32 {
        self.net.nodes[B]
            .engine
            .query_qp(self.p.qb)
            .unwrap()
            .1
            .rq_psn
    }

    pub fn lid(&self, node: usize) -> u16 {
        self.net.nodes[node].engine.port().lid
    }

    /// A valid request from A's QP to B's QP: LRH A -> B, default P_Key.
    pub fn request(&self, op: Opcode, psn: u32) -> Craft {
        Craft {
            lrh: LrhRepr {
                vl: 0,
                sl: 0,
                dlid: self.lid(B),
                slid: self.lid(A),
            },
            bth: BthRepr {
                opcode: op,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: self.p.qb,
                ack_req: true,
                psn,
            },
            ext: ExtHeaders::default(),
            payload: Vec::new(),
        }
    }

    /// A response from B's QP to A's QP.
    pub fn response(&self, op: Opcode, psn: u32, ext: ExtHeaders) -> Craft {
        Craft {
            lrh: LrhRepr {
                vl: 0,
                sl: 0,
                dlid: self.lid(A),
                slid: self.lid(B),
            },
            bth: BthRepr {
                opcode: op,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: self.p.qa,
                ack_req: false,
                psn,
            },
            ext,
            payload: Vec::new(),
        }
    }

    pub fn inject(&mut self, node: usize, pkt: &[u8]) {
        inject(&mut self.net, node, pkt);
    }

    pub fn drain(&mut self, node: usize) -> Vec<Seen> {
        drain(&mut self.net, node)
    }

    pub fn mem(&self, node: usize) -> Vec<u8> {
        self.net.nodes[node].mem.bytes.clone()
    }

    pub fn drops(&self, node: usize, r: RxDrop) -> u64 {
        self.net.nodes[node].engine.counters().dropped(r)
    }

    pub fn total_drops(&self, node: usize) -> u64 {
        let c = self.net.nodes[node].engine.counters();
        RxDrop::ALL.iter().map(|r| c.dropped(*r)).sum()
    }

    pub fn naks_sent(&self, node: usize) -> u64 {
        self.net.nodes[node].engine.counters().naks_sent
    }

    /// NAKs sent for one reason: each NAK names its reason in a counter (RL-12).
    pub fn naked(&self, node: usize, r: NakReason) -> u64 {
        self.net.nodes[node].engine.counters().naked(r)
    }

    pub fn post_recv(&mut self, node: usize, qpn: u32, wr_id: u64, addr: u64, len: u32) {
        let key = if node == A { self.ka } else { self.kb };
        self.net.nodes[node]
            .engine
            .post_recv(
                qpn,
                RecvWr {
                    wr_id,
                    sges: vec![Sge {
                        addr,
                        length: len,
                        lkey: key,
                    }],
                },
            )
            .unwrap();
    }

    pub fn state(&self, node: usize, qpn: u32) -> QpState {
        self.net.nodes[node].engine.query_qp(qpn).unwrap().0
    }

    pub fn poll(&mut self, node: usize, cq: Handle) -> Option<Completion> {
        self.net.poll(node, cq)
    }

    pub fn events(&mut self, node: usize) -> Vec<Event> {
        std::iter::from_fn(|| self.net.nodes[node].engine.poll_event()).collect()
    }
}

/// A packet being crafted: every field can be changed before it is emitted.
pub struct Craft {
    pub lrh: LrhRepr,
    pub bth: BthRepr,
    pub ext: ExtHeaders,
    pub payload: Vec<u8>,
}

impl Craft {
    pub fn reth(mut self, va: u64, rkey: u32, dma_len: u32) -> Craft {
        self.ext.reth = Some(RethRepr { va, rkey, dma_len });
        self
    }

    pub fn atomic(mut self, va: u64, rkey: u32, compare: u64, swap_add: u64) -> Craft {
        self.ext.atomic_eth = Some(AtomicEthRepr {
            va,
            rkey,
            swap_add,
            compare,
        });
        self
    }

    pub fn payload(mut self, p: &[u8]) -> Craft {
        self.payload = p.to_vec();
        self
    }

    /// The packet, LRH through VCRC, with both CRCs right.
    pub fn bytes(&self) -> Vec<u8> {
        let pkt = PacketRepr {
            lrh: self.lrh,
            grh: None,
            transport: TransportRepr {
                bth: self.bth,
                ext: self.ext,
                payload: &self.payload,
            },
        };
        let mut buf = vec![0; pkt.buffer_len()];
        let n = pkt.emit(&mut buf).expect("emit");
        buf.truncate(n);
        buf
    }
}

/// What an engine sent, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub opcode: Opcode,
    pub psn: u32,
    pub dest_qp: u32,
    pub se: bool,
    pub ack_req: bool,
    pub syndrome: Option<AethSyndrome>,
    /// The AETH's MSN, with its syndrome.
    pub msn: Option<u32>,
    pub orig: Option<u64>,
    pub qkey: Option<u32>,
    pub payload: Vec<u8>,
}

pub fn seen(bytes: &[u8]) -> Seen {
    let p = PacketRepr::parse(bytes).expect("the engine emits valid packets");
    let t = p.transport;
    Seen {
        opcode: t.bth.opcode,
        psn: t.bth.psn,
        dest_qp: t.bth.dest_qp,
        se: t.bth.solicited,
        ack_req: t.bth.ack_req,
        syndrome: t.ext.aeth.map(|a| a.syndrome),
        msn: t.ext.aeth.map(|a| a.msn),
        orig: t.ext.atomic_ack_eth.map(|a| a.orig_remote_data),
        qkey: t.ext.deth.map(|d| d.qkey),
        payload: t.payload.to_vec(),
    }
}

pub fn inject(net: &mut Net, node: usize, pkt: &[u8]) {
    let now = net.now;
    let n = &mut net.nodes[node];
    n.engine.handle_packet(pkt, &mut n.mem, now);
}

/// Everything `node` has to send now.
pub fn drain(net: &mut Net, node: usize) -> Vec<Seen> {
    let out = take(net, node, 10_000);
    assert!(out.len() < 10_000, "runaway transmit");
    out
}

/// At most `max` of the packets `node` has to send now, the rest left queued.
pub fn take(net: &mut Net, node: usize, max: usize) -> Vec<Seen> {
    let mut buf = vec![0u8; 8192];
    let now = net.now;
    let n = &mut net.nodes[node];
    let mut out = Vec::new();
    while out.len() < max {
        let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) else {
            break;
        };
        out.push(seen(&buf[..len]));
    }
    out
}

/// Moves packets between nodes A and B at once (no loss, no time), until neither
/// has anything to send; returns what went by, with the sender.
pub fn pump(net: &mut Net) -> Vec<(usize, Seen)> {
    let mut buf = vec![0u8; 8192];
    let mut log = Vec::new();
    loop {
        let mut moved = false;
        for from in [A, B] {
            let now = net.now;
            let n = &mut net.nodes[from];
            let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) else {
                continue;
            };
            moved = true;
            log.push((from, seen(&buf[..len])));
            let m = &mut net.nodes[1 - from];
            m.engine.handle_packet(&buf[..len], &mut m.mem, now);
        }
        assert!(log.len() < 100_000, "runaway exchange");
        if !moved {
            return log;
        }
    }
}

pub fn assert_one_nak(got: &[Seen], psn: u32, code: NakCode) {
    // A PSN Sequence Error NAK goes as two copies of the one NAK (issue 14,
    // vhca policy: the responder is silent after it, RL-03, so one lost
    // copy leaves the other); every other NAK once.
    let copies = if code == NakCode::PsnSequenceError {
        2
    } else {
        1
    };
    assert_eq!(got.len(), copies, "exactly one NAK: {got:?}");
    assert!(
        got.iter().all(|g| g == &got[0]),
        "copies of one NAK: {got:?}"
    );
    assert_eq!(got[0].opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(got[0].psn, psn);
    assert_eq!(got[0].syndrome, Some(AethSyndrome::Nak(code)));
}

pub fn assert_one_ack(got: &[Seen], psn: u32) {
    assert_eq!(got.len(), 1, "exactly one response: {got:?}");
    assert_eq!(got[0].opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(got[0].psn, psn);
    // Any credit count (RL-13 has its own tests).
    assert!(
        matches!(got[0].syndrome, Some(AethSyndrome::Ack { .. })),
        "{got:?}"
    );
}

/// Registers `[iova, iova + len)` of a node's memory (page aligned, VA = PA) in `pd`.
pub fn reg(net: &mut Net, node: usize, pd: Handle, iova: u64, len: u64, access: Access) -> u32 {
    let pages = (0..len.div_ceil(4096)).map(|i| iova + i * 4096).collect();
    net.nodes[node]
        .engine
        .mrs()
        .reg_mr(pd, iova, len, access, 4096, pages)
        .expect("reg_mr")
}

pub fn off(addr: u64) -> usize {
    (addr - MEM_BASE) as usize
}

pub fn run_for_cqe(net: &mut Net, node: usize, cq: Handle) -> (Completion, Time) {
    let mut got = None;
    net.run_until(2_000_000, |n| {
        got = n.poll(node, cq);
        got.is_some()
    });
    (got.expect("completion"), net.now)
}
