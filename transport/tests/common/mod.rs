//! A test bench for the engine: N engines (one per node), each with its own memory,
//! on a simulated fabric that can drop, duplicate, reorder, corrupt and delay
//! packets under a seeded RNG, driven by a virtual clock. Deterministic.

#![allow(dead_code)]

pub mod apm;
pub mod bottleneck;
pub mod craft;
pub mod loss;
mod setup;
pub use setup::*;

use std::collections::BinaryHeap;

use transport::engine::{Engine, Limits, LinkLayer, PortConfig};
use transport::memory::VecMemory;
use transport::verbs::{
    Access, AddressVector, AttrMask, Completion, Handle, Mtu, QpAttr, QpInit, QpState, QpType,
    SendData, SendFlags, SendWr, Sge, Time, WrOpcode,
};
use transport::wire::Lrh;

/// A small deterministic RNG (xorshift64*), so the bench needs no crate.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

/// Fault rates of the simulated fabric.
#[derive(Debug, Clone, Copy, Default)]
pub struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    pub reorder: f64,
    pub corrupt: f64,
    /// Extra delay up to this many ns (jitter).
    pub jitter_ns: u64,
    /// How long a reordered packet is held back (ns; 0: four one-way
    /// latencies). A few packet times let only the next packets overtake
    /// it, as the device's fault stage does.
    pub reorder_delay_ns: u64,
}

#[derive(Debug, PartialEq, Eq)]
struct InFlight {
    at: Time,
    seq: u64,
    to: usize,
    bytes: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on (time, seq).
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// A link model for goodput measurements (issue 14): each node's egress link
/// serializes its packets at `ns_per_kib` (1024 bytes take that long) and
/// holds at most `queue_bytes` waiting to go out; a node whose queue is full
/// is not asked for packets until it drains (the backpressure of a NIC or a
/// socket buffer). Without it, time advances by one ns per byte put on the
/// wire by any node.
#[derive(Debug, Clone, Copy)]
pub struct LinkModel {
    pub ns_per_kib: u64,
    pub queue_bytes: u64,
}

/// One node: an engine and its memory.
pub struct Node {
    pub engine: Engine,
    pub mem: VecMemory,
    pub pd: Handle,
}

/// Physical memory per node in the bench.
pub const MEM_BASE: u64 = 0x10_0000;

/// Decides whether a packet put on the wire is lost ([`Net::lose`]).
pub type LoseFn = Box<dyn FnMut(&[u8]) -> bool>;

/// The bench.
pub struct Net {
    pub nodes: Vec<Node>,
    pub now: Time,
    pub faults: Faults,
    pub rng: Rng,
    /// One-way latency in ns.
    pub latency_ns: u64,
    wire: BinaryHeap<InFlight>,
    seq: u64,
    buf: Vec<u8>,
    pub delivered: u64,
    pub dropped: u64,
    /// When set, a copy of every packet put on the wire (before faults).
    pub sniffed: Option<Vec<Vec<u8>>>,
    /// When set, applied to every packet put on the wire (before faults).
    pub rewrite: Option<fn(&mut Vec<u8>)>,
    /// When set, per-node egress links (see [`LinkModel`]).
    pub link: Option<LinkModel>,
    /// When each node's egress link is free again (with `link`).
    link_free: Vec<Time>,
    /// When set, a packet (sniffed first) for which it returns true is lost:
    /// a test's targeted drop of one packet (RL-14, RL-13).
    pub lose: Option<LoseFn>,
    /// When set, every packet is delivered as a link lends one in place
    /// (`Engine::handle_received_lent`, CRCs vouched for; issue 30), and
    /// built with its payload in a slot the "link" gives
    /// (`Engine::poll_transmit_into`).
    pub lend: bool,
    /// Packets built with their payload in a slot (with `lend`).
    pub slotted: u64,
}

/// A link's slot for a packet's payload (`TxSlots`), as the shared-memory
/// link's ring slot: `given` is where the payload goes in the packet.
#[derive(Default)]
pub struct TestSlots {
    pub slot: Vec<u8>,
    pub given: Option<(usize, usize)>,
}

impl transport::engine::TxSlots for TestSlots {
    fn payload_slot(
        &mut self,
        _dlid: u16,
        at: usize,
        len: usize,
    ) -> Option<vm_memory::VolatileSlice<'_>> {
        self.given = Some((at, len));
        self.slot.clear();
        self.slot.resize(len, 0xdd);
        Some(vm_memory::VolatileSlice::from(&mut self.slot[..]))
    }
}

impl Net {
    /// `n` nodes with LIDs 1..=n and `mem_len` bytes of memory each.
    pub fn new(n: usize, mem_len: usize, seed: u64) -> Net {
        Net::with_limits(n, mem_len, seed, Limits::default())
    }

    /// [`Net::new`] with engines of these limits.
    pub fn with_limits(n: usize, mem_len: usize, seed: u64, limits: Limits) -> Net {
        Net::with_ports(
            (0..n)
                .map(|i| PortConfig::new(i as u16 + 1, 0x0002_c903_0000_0000 + i as u64))
                .collect(),
            mem_len,
            seed,
            limits,
        )
    }

    /// `n` nodes with RoCEv2 ports (WF-10): MAC 02:00:00:00:00:0i, GID 0 =
    /// ::ffff:10.0.0.i, GID 1 = fd00::i; frames are routed by destination MAC.
    /// Their LIDs (1..=n) only name the nodes to the bench.
    pub fn new_roce(n: usize, mem_len: usize, seed: u64) -> Net {
        Net::with_ports(
            (1..=n)
                .map(|i| {
                    let mut p = PortConfig::ethernet(roce_mac(i));
                    p.lid = i as u16;
                    p.roce_gids[0] = Some(roce_gid_v4(i));
                    p.roce_gids[1] = Some(roce_gid_v6(i));
                    p
                })
                .collect(),
            mem_len,
            seed,
            Limits::default(),
        )
    }

    /// Nodes with these ports (their LIDs name them on the bench's fabric).
    pub fn with_ports(ports: Vec<PortConfig>, mem_len: usize, seed: u64, limits: Limits) -> Net {
        let nodes = ports
            .into_iter()
            .map(|port| {
                let mut engine = Engine::new(port, limits);
                let pd = engine.mrs().alloc_pd().expect("pd");
                Node {
                    engine,
                    mem: VecMemory::new(MEM_BASE, mem_len),
                    pd,
                }
            })
            .collect();
        Net {
            nodes,
            now: Time(0),
            faults: Faults::default(),
            rng: Rng::new(seed),
            latency_ns: 2_000,
            wire: BinaryHeap::new(),
            seq: 0,
            buf: vec![0; 8192],
            delivered: 0,
            dropped: 0,
            sniffed: None,
            rewrite: None,
            link: None,
            link_free: Vec::new(),
            lose: None,
            lend: false,
            slotted: 0,
        }
    }

    /// Registers all of a node's memory as one MR (VA = physical address) with
    /// every right; returns its key.
    pub fn reg_all(&mut self, node: usize, access: Access) -> u32 {
        let n = &mut self.nodes[node];
        let len = n.mem.bytes.len() as u64;
        let pages = (0..len.div_ceil(4096))
            .map(|i| MEM_BASE + i * 4096)
            .collect();
        n.engine
            .mrs()
            .reg_mr(n.pd, MEM_BASE, len, access, 4096, pages)
            .expect("reg_mr")
    }

    /// Moves every packet every engine has to send onto the wire, delivers what is
    /// due, fires timers; advances the clock to the next event. Returns false when
    /// nothing at all is pending.
    pub fn step(&mut self) -> bool {
        let mut sent = false;
        if self.link.is_some() && self.link_free.len() != self.nodes.len() {
            self.link_free = vec![Time(0); self.nodes.len()];
        }
        for i in 0..self.nodes.len() {
            for _ in 0..64 {
                if !self.link_has_room(i) {
                    break;
                }
                let n = &mut self.nodes[i];
                let built = if self.lend {
                    // As the shared-memory link: the payload built in a
                    // "slot" of the link's, the packet put together after.
                    let mut slots = TestSlots::default();
                    let b = n.engine.poll_transmit_into(
                        &mut n.mem,
                        self.now,
                        &mut self.buf,
                        &mut slots,
                    );
                    b.map(|(len, in_slot)| {
                        let mut pkt = self.buf[..len].to_vec();
                        if in_slot {
                            let (at, plen) = slots.given.expect("a slot was given");
                            self.buf[at..at + plen].fill(0xee); // not the packet's
                            pkt[at..at + plen].copy_from_slice(&slots.slot[..plen]);
                            self.slotted += 1;
                        }
                        pkt
                    })
                } else {
                    let b = n.engine.poll_transmit(&mut n.mem, self.now, &mut self.buf);
                    b.map(|len| self.buf[..len].to_vec())
                };
                let Some(pkt) = built else {
                    break;
                };
                sent = true;
                self.launch(i, pkt);
            }
        }
        // Deliver everything due now.
        let mut got = false;
        while self.wire.peek().is_some_and(|p| p.at <= self.now) {
            let mut p = self.wire.pop().unwrap();
            let n = &mut self.nodes[p.to];
            if self.lend {
                let from = transport::engine::RxFrom {
                    src_lid: None,
                    crcs_vouched: true,
                };
                let lent = vm_memory::VolatileSlice::from(&mut p.bytes[..]);
                n.engine
                    .handle_received_lent(lent, from, &mut n.mem, self.now);
            } else {
                n.engine.handle_packet(&p.bytes, &mut n.mem, self.now);
            }
            self.delivered += 1;
            got = true;
        }
        // A timer due now may resend: then the net is not idle.
        let mut fired = false;
        for n in &mut self.nodes {
            fired |= n.engine.poll_timeout().is_some_and(|t| t <= self.now);
            n.engine.handle_timeout(self.now);
        }
        if sent || got || fired {
            return true;
        }
        // Idle: jump to the next event.
        let next_pkt = self.wire.peek().map(|p| p.at);
        let next_timer = self
            .nodes
            .iter()
            .filter_map(|n| n.engine.poll_timeout())
            .min();
        match (next_pkt, next_timer) {
            (None, None) => false,
            (a, b) => {
                let t = [a, b].into_iter().flatten().min().unwrap();
                self.now = self.now.max(t);
                true
            }
        }
    }

    /// Whether node `i` may put another packet on its egress link now.
    fn link_has_room(&self, i: usize) -> bool {
        let Some(l) = self.link else { return true };
        let queued_ns = self.link_free[i].0.saturating_sub(self.now.0);
        queued_ns.saturating_mul(1024) / l.ns_per_kib.max(1) < l.queue_bytes
    }

    fn launch(&mut self, from: usize, mut pkt: Vec<u8>) {
        if let Some(s) = &mut self.sniffed {
            s.push(pkt.clone());
        }
        if let Some(lose) = &mut self.lose {
            if lose(&pkt) {
                self.dropped += 1;
                return;
            }
        }
        if let Some(f) = self.rewrite {
            f(&mut pkt);
        }
        // A multicast packet (a multicast MAC or DLID) goes to every node, the
        // sender included, as the device's links carry it (PV-07): the
        // receivers' engines filter by group.
        let mut targets: Vec<usize> = Vec::new();
        if self.nodes[0].engine.port().is_ethernet() {
            if pkt.first().is_some_and(|b| b & 1 != 0) {
                targets.extend(0..self.nodes.len());
            } else {
                // A RoCE frame goes to the port whose MAC it names.
                targets.extend(self.nodes.iter().position(|n| {
                    matches!(n.engine.port().link, LinkLayer::Ethernet { mac } if pkt.get(..6) == Some(&mac[..]))
                }));
            }
        } else {
            let Ok(lrh) = Lrh::new_checked(&pkt[..]) else {
                return;
            };
            let dlid = lrh.dlid();
            if transport::engine::is_multicast_lid(dlid) {
                targets.extend(0..self.nodes.len());
            } else {
                // A port owns its 2^LMC LIDs (AD-01).
                targets.extend(self.nodes.iter().position(|n| {
                    let p = n.engine.port();
                    let mask = !((1u16 << p.lmc.min(7)) - 1);
                    p.lid & mask == dlid & mask
                }));
            }
        }
        if targets.is_empty() {
            self.dropped += 1;
            return;
        }
        for to in targets {
            self.launch_to(from, to, pkt.clone());
        }
    }

    fn launch_to(&mut self, from: usize, to: usize, mut pkt: Vec<u8>) {
        // With a link model the packet leaves once the link has sent what was
        // queued before it (a packet lost on the way took its time on the link
        // too); without, at once (time then advances below).
        let departs = match self.link {
            Some(l) => {
                let start = self.link_free[from].max(self.now);
                let done = start.plus_ns(pkt.len() as u64 * l.ns_per_kib / 1024);
                self.link_free[from] = done;
                done
            }
            None => self.now,
        };
        let f = self.faults;
        if self.rng.chance(f.drop) {
            self.dropped += 1;
            return;
        }
        if self.rng.chance(f.corrupt) {
            let i = self.rng.below(pkt.len() as u64) as usize;
            pkt[i] ^= 1 << self.rng.below(8);
        }
        let copies = if self.rng.chance(f.duplicate) { 2 } else { 1 };
        for _ in 0..copies {
            let mut at = departs.plus_ns(self.latency_ns);
            if f.jitter_ns > 0 {
                at = at.plus_ns(self.rng.below(f.jitter_ns));
            }
            if self.rng.chance(f.reorder) {
                at = at.plus_ns(match f.reorder_delay_ns {
                    0 => self.latency_ns * 4,
                    d => d,
                });
            }
            self.seq += 1;
            self.wire.push(InFlight {
                at,
                seq: self.seq,
                to,
                bytes: pkt.clone(),
            });
        }
        if self.link.is_none() {
            // Time passes as packets go out (1 byte/ns, about 8 Gb/s).
            self.now = self.now.plus_ns(pkt.len() as u64);
        }
    }

    /// Packets on the wire, not yet delivered.
    pub fn in_flight(&self) -> usize {
        self.wire.len()
    }

    /// Runs until `done` holds or nothing is pending or `max_steps` pass.
    pub fn run_until(&mut self, max_steps: usize, mut done: impl FnMut(&mut Net) -> bool) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Polls one completion from a node's CQ.
    pub fn poll(&mut self, node: usize, cq: Handle) -> Option<Completion> {
        self.nodes[node].engine.poll_cq(cq)
    }
}

/// A connected pair of QPs on two nodes, with their CQs.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub a: usize,
    pub b: usize,
    pub qa: u32,
    pub qb: u32,
    pub cq_a: Handle,
    pub cq_b: Handle,
}

/// Options for connecting a pair.
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    pub qp_type: QpType,
    pub mtu: Mtu,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub srq: [Option<Handle>; 2],
    pub max_wr: u32,
    /// The path's service level (AD-06) and static rate (AD-07, `ibv_rate`).
    pub sl: u8,
    pub static_rate: u8,
}

impl Default for ConnOpts {
    fn default() -> ConnOpts {
        ConnOpts {
            qp_type: QpType::Rc,
            mtu: Mtu::M1024,
            psn_a: 0xff_fff0,
            psn_b: 0xff_ff00,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            srq: [None, None],
            max_wr: 1024,
            sl: 0,
            static_rate: 0,
        }
    }
}

pub const ALL_ACCESS: Access = Access(1 | 2 | 4 | 8);

fn create(net: &mut Net, node: usize, o: &ConnOpts, srq: Option<Handle>) -> (u32, Handle) {
    let cq = net.nodes[node].engine.create_cq().expect("cq");
    let init = QpInit {
        srq,
        ..qp_init(net, node, o.qp_type, cq, qp_cap(o.max_wr, 4, 64), false)
    };
    let qp = net.nodes[node].engine.create_qp(init).expect("qp");
    (qp, cq)
}

/// Modifies a QP through Init, RTR, RTS with the masks the transition table needs.
#[allow(clippy::too_many_arguments)]
pub fn bring_up(
    net: &mut Net,
    node: usize,
    qpn: u32,
    o: &ConnOpts,
    remote_lid: u16,
    remote_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
) {
    let e = &mut net.nodes[node].engine;
    let now = net.now;
    let ud = o.qp_type == QpType::Ud;
    let mut a = QpAttr {
        state: Some(QpState::Init),
        pkey_index: 0,
        port_num: 1,
        qkey: 0x1111_1111,
        access: ALL_ACCESS | Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT,
        ..QpAttr::default()
    };
    let m_init = if ud {
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY
    } else {
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS
    };
    e.modify_qp(qpn, &a, m_init, now).expect("init");
    a.state = Some(QpState::Rtr);
    a.path_mtu = o.mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = o.max_rd_atomic;
    a.min_rnr_timer = o.min_rnr_timer;
    a.av = AddressVector {
        dlid: remote_lid,
        sl: o.sl,
        static_rate: o.static_rate,
        ..AddressVector::default()
    };
    if net.nodes[node].engine.port().is_ethernet() {
        // RoCE: the path is the peer's GID 0 and MAC (bench nodes are named by
        // their LID).
        a.av = roce_av(remote_lid as usize, 0);
    }
    let e = &mut net.nodes[node].engine;
    let m_rtr = match o.qp_type {
        QpType::Ud => AttrMask::STATE,
        QpType::Uc => {
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
        }
        QpType::Rc | QpType::XrcIni | QpType::XrcTgt => RC_RTR_MASK,
    };
    e.modify_qp(qpn, &a, m_rtr, now).expect("rtr");
    a.state = Some(QpState::Rts);
    a.sq_psn = sq_psn;
    a.timeout = o.timeout;
    a.retry_cnt = o.retry_cnt;
    a.rnr_retry = o.rnr_retry;
    a.max_rd_atomic = o.max_rd_atomic;
    let m_rts = if o.qp_type == QpType::Rc {
        RC_RTS_MASK
    } else {
        AttrMask::STATE | AttrMask::SQ_PSN
    };
    e.modify_qp(qpn, &a, m_rts, now).expect("rts");
}

/// Creates and connects a QP pair between nodes `a` and `b`.
pub fn connect(net: &mut Net, a: usize, b: usize, o: &ConnOpts) -> Pair {
    let (qa, cq_a) = create(net, a, o, o.srq[0]);
    let (qb, cq_b) = create(net, b, o, o.srq[1]);
    let la = net.nodes[a].engine.port().lid;
    let lb = net.nodes[b].engine.port().lid;
    bring_up(net, a, qa, o, lb, qb, o.psn_a, o.psn_b);
    bring_up(net, b, qb, o, la, qa, o.psn_b, o.psn_a);
    Pair {
        a,
        b,
        qa,
        qb,
        cq_a,
        cq_b,
    }
}

/// A signaled send WR of `op` over `sges`; callers set the remote fields they need.
pub fn send_wr(id: u64, op: WrOpcode, sges: Vec<Sge>) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: op,
        flags: SendFlags::SIGNALED,
        data: SendData::Sges(sges),
        imm_or_inv: 0,
        remote_addr: 0,
        rkey: 0,
        compare: 0,
        swap_add: 0,
        ud: None,
    }
}

/// Fills `len` bytes of a node's memory at `addr` with a pattern that depends on
/// `seed` and the offset (so misplaced or shifted bytes show).
pub fn fill(net: &mut Net, node: usize, addr: u64, len: usize, seed: u8) {
    let off = (addr - MEM_BASE) as usize;
    for (i, b) in net.nodes[node].mem.bytes[off..off + len]
        .iter_mut()
        .enumerate()
    {
        *b = (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 8) as u8;
    }
}

/// A copy of `len` bytes of a node's memory at `addr`.
pub fn bytes(net: &Net, node: usize, addr: u64, len: usize) -> Vec<u8> {
    let off = (addr - MEM_BASE) as usize;
    net.nodes[node].mem.bytes[off..off + len].to_vec()
}

/// The MAC of RoCE bench node `i` (1-based).
pub fn roce_mac(i: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0, i as u8]
}

/// GID 0 of RoCE bench node `i`: ::ffff:10.0.0.i.
pub fn roce_gid_v4(i: usize) -> [u8; 16] {
    std::net::Ipv4Addr::new(10, 0, 0, i as u8)
        .to_ipv6_mapped()
        .octets()
}

/// GID 1 of RoCE bench node `i`: fd00::i.
pub fn roce_gid_v6(i: usize) -> [u8; 16] {
    std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i as u16).octets()
}

/// The RoCE path to bench node `i` through its GID `gid_index` (0: IPv4,
/// 1: IPv6) from the local GID of the same index.
pub fn roce_av(i: usize, gid_index: u8) -> AddressVector {
    AddressVector {
        grh: Some(transport::verbs::GlobalRoute {
            dgid: if gid_index == 0 {
                roce_gid_v4(i)
            } else {
                roce_gid_v6(i)
            },
            flow_label: 0,
            sgid_index: gid_index,
            hop_limit: 64,
            traffic_class: 0,
        }),
        dmac: roce_mac(i),
        ..AddressVector::default()
    }
}

/// One SGE (`addr`, `len`, `lkey`) as a work request's list.
pub fn sge(addr: u64, len: u32, lkey: u32) -> Vec<Sge> {
    vec![Sge {
        addr,
        length: len,
        lkey,
    }]
}

/// Runs the bench until node `node`'s CQ `cq` holds `n` completions; takes
/// them (asserts that exactly `n` came).
pub fn wait(net: &mut Net, node: usize, cq: Handle, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    net.run_until(2_000_000, |net| {
        while let Some(c) = net.poll(node, cq) {
            got.push(c);
        }
        got.len() >= n
    });
    assert_eq!(got.len(), n, "completions on node {node}: {got:?}");
    got
}

/// Runs the bench until node `node`'s CQ `cq` has a completion; takes it.
pub fn wait_cqe(net: &mut Net, node: usize, cq: Handle) -> Completion {
    let mut got = None;
    net.run_until(2_000_000, |n| {
        got = n.poll(node, cq);
        got.is_some()
    });
    got.expect("completion")
}

/// The attributes an RC QP's Init -> RTR needs (QS-02).
pub const RC_RTR_MASK: AttrMask = AttrMask(
    AttrMask::STATE.0
        | AttrMask::AV.0
        | AttrMask::PATH_MTU.0
        | AttrMask::DEST_QPN.0
        | AttrMask::RQ_PSN.0
        | AttrMask::MAX_DEST_RD_ATOMIC.0
        | AttrMask::MIN_RNR_TIMER.0,
);

/// Every packet node `node` has to send now, in order, taken off it (for a
/// test that delivers them itself).
pub fn take_sent(net: &mut Net, node: usize) -> Vec<Vec<u8>> {
    let now = net.now;
    let mut buf = vec![0u8; 8192];
    let mut out = Vec::new();
    let n = &mut net.nodes[node];
    while let Some(len) = n.engine.poll_transmit(&mut n.mem, now, &mut buf) {
        out.push(buf[..len].to_vec());
    }
    out
}

/// A packet the engine built, parsed, changed by `f` and emitted again with
/// its CRCs redone.
pub fn reemit(bytes: &[u8], f: impl FnOnce(&mut transport::wire::PacketRepr<'_>)) -> Vec<u8> {
    let mut p = transport::wire::PacketRepr::parse(bytes).expect("a valid packet");
    f(&mut p);
    let mut buf = vec![0; p.buffer_len()];
    let n = p.emit(&mut buf).expect("emit");
    buf.truncate(n);
    buf
}
