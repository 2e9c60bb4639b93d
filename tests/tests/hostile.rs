//! A hostile guest and a hostile peer against a live vhca (issue 13,
//! ARCHITECTURE.md §9), with the figures in the output (`--nocapture`):
//!
//! - guest: MR registrations whose maximal page lists (2^18 entries) all alias
//!   one guest page, until the device refuses with NO_RESOURCES; the
//!   process's RSS stays within its `--mem-budget`;
//! - peer: 10^6 datagrams from the fabric address of a (killed) peer node and
//!   from a stranger, crafted with the transport's emitters and mutated
//!   (random header fields, truncation, bad CRCs, bad fields under good CRCs,
//!   a wrong SLID) at QPs of each type in each state; vhca stays up, its RSS
//!   bounded, its counters account for every packet that reached the engine,
//!   no memory outside what the peer was granted changes, and a clean RC
//!   transfer works afterwards.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use transport::wire::crc::{icrc_native, vcrc};
use transport::wire::opcode::Opcode;
use transport::wire::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders,
    ExtKind, LrhRepr, PacketRepr, RethRepr, TransportRepr,
};
use vhca_tests::abi::cmd::{
    pbl_const, CreateCqIn, CreateCqOut, Opcode as Cmd, Pbl, RegMrIn, Status,
};
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::verbs::{access, QpState, QpType};
use vhca_tests::fixture::{clean_transfer, Node};
use vhca_tests::util::{pattern, Rng};
use vhca_tests::{CmdError, ConnOpts, Layout, Options, PblKind, QpH, RecvWr, Remote, Vhca};

const MIB: u64 = 1 << 20;

/// The hostile guest's device budget.
const GUEST_BUDGET: u64 = 16 * MIB;

fn options_with_budget(nodes: usize, budget: u64) -> Options {
    let mut o = Options::nodes(nodes);
    o.extra_args = vec!["--mem-budget".into(), format!("{}M", budget / MIB)];
    o
}

fn device_counter(n: &mut Node, name: &str) -> u64 {
    n.hca
        .counter(CounterSet::Device, name)
        .expect("QUERY_COUNTERS")
        .unwrap_or_else(|| panic!("no device counter {name}"))
}

/// A guest registers MRs of 2^18 pages whose page lists name one guest page
/// (three guest pages in all: the data page, one table, the directory): each
/// costs vhca 2 MiB of host heap, and without a budget nothing stopped it
/// before 65 536 MRs (128 GiB). The device refuses with NO_RESOURCES once its
/// budget is spent, and its RSS stays within it.
#[test]
fn hostile_guest_aliased_page_lists_stop_at_the_memory_budget() {
    let v = Vhca::spawn(options_with_budget(1, GUEST_BUDGET));
    let mut n = Node::connect(&v, 0);
    let entries = pbl_const::TABLE_ENTRIES as usize;
    let list = |a: u64| -> Vec<u8> { (0..entries).flat_map(|_| a.to_le_bytes()).collect() };
    let g = n.hca.guest_mut();
    let (data, table, dir) = (
        g.alloc_pages(1, 1),
        g.alloc_pages(1, 1),
        g.alloc_pages(1, 1),
    );
    g.write(table, &list(data));
    g.write(dir, &list(table));
    let npages = pbl_const::MAX_PAGES;
    let input = RegMrIn {
        pdn: n.pd.0,
        access: access::LOCAL_WRITE,
        iova: 0,
        length: u64::from(npages) << 12,
        flags: 0,
        rsvd: 0,
        pbl: Pbl {
            addr: dir,
            npages,
            page_shift: 12,
            levels: pbl_const::TWO_LEVEL as u8,
            rsvd: 0,
        },
    };
    let per_mr = u64::from(npages) * 8;
    // Twice what the budget holds: a device without one takes them all.
    let tries = 2 * GUEST_BUDGET / per_mr;
    let rss0 = v.rss_kib(0);
    let started = Instant::now();
    let mut mrs = 0u64;
    let mut refused = None;
    let mut registered = Vec::new();
    for _ in 0..tries {
        match n.hca.reg_mr_raw(&input, Vec::new()) {
            Ok(mr) => {
                registered.push(mr);
                mrs += 1
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let rss1 = v.rss_kib(0);
    let held = device_counter(&mut n, "mem_held_bytes");
    let refusals = device_counter(&mut n, "mem_budget_refusals");
    println!(
        "hostile guest: {mrs} MRs of {npages} pages aliasing 1 guest page ({} MiB of page \
         list each) in {:.1} s, then {refused:?}; vhca RSS {rss0} KiB -> {rss1} KiB \
         (+{} KiB), held {held} bytes, budget {} bytes, {refusals} refusal(s)",
        per_mr / MIB,
        started.elapsed().as_secs_f64(),
        rss1.saturating_sub(rss0),
        GUEST_BUDGET
    );
    match refused {
        Some(CmdError::Status { status, .. }) => {
            assert_eq!(status, Status::NoResources.raw(), "insufficient resources")
        }
        other => panic!("{mrs} registrations, none refused for lack of memory: {other:?}"),
    }
    assert!(mrs >= 1 && mrs * per_mr <= GUEST_BUDGET, "{mrs} MRs");
    assert!(held <= GUEST_BUDGET, "{held} bytes held");
    assert!(refusals >= 1);
    // RSS: the page lists, plus at most one list being read when refused and
    // allocator slack; never the 2x the guest asked for.
    let grown = rss1.saturating_sub(rss0) * 1024;
    assert!(
        grown <= GUEST_BUDGET + 8 * MIB,
        "RSS grew {} MiB under a {} MiB budget",
        grown / MIB,
        GUEST_BUDGET / MIB
    );
    for mr in &registered {
        n.hca.dereg_mr(mr).expect("DEREG_MR");
    }
    // Rings too: CQs of 2^20 CQEs (64 MiB of ring in 16 384 pages) whose
    // page lists alias the same page cost vhca 128 KiB of page list each.
    let log2 = 20u8;
    let ring_pages = (64u32 << log2) >> 12;
    let rss2 = v.rss_kib(0);
    let mut cqs = 0u64;
    let refused = loop {
        let slot = n.hca.alloc_slot(None);
        let cq = CreateCqIn {
            ring: Pbl {
                addr: dir,
                npages: ring_pages,
                page_shift: 12,
                levels: pbl_const::TWO_LEVEL as u8,
                rsvd: 0,
            },
            eqn: 0,
            uar: slot.uar,
            db_slot: slot.slot,
            log2_entries: log2,
            rsvd: [0; 5],
        };
        match n.hca.cmd::<_, CreateCqOut>(Cmd::CreateCq, &cq) {
            Ok(_) => cqs += 1,
            Err(e) => break e,
        }
        assert!(
            cqs * u64::from(ring_pages) * 8 <= 2 * GUEST_BUDGET,
            "{cqs} CQs and never refused"
        );
    };
    let rss3 = v.rss_kib(0);
    println!(
        "hostile guest: {cqs} CQs of 2^{log2} CQEs aliasing 1 guest page, then {refused:?}; \
         vhca RSS {rss2} KiB -> {rss3} KiB"
    );
    assert!(
        matches!(refused, CmdError::Status { status, .. } if status == Status::NoResources.raw()),
        "{refused:?}"
    );
    assert!(rss3.saturating_sub(rss0) * 1024 <= GUEST_BUDGET + 8 * MIB);
    // The device keeps serving: traffic flows.
    n.hca.nop().expect("NOP");
    clean_transfer(&mut n);
}

// ---------------------------------------------------------------- the hostile peer

const PEER_PACKETS: u64 = 1_000_000;
/// Datagrams sent before waiting for the engine to catch up (the device's
/// socket buffer holds a few thousand small datagrams).
const BATCH: u64 = 1_000;

/// Packets the kernel dropped at the UDP socket bound to `port` on loopback
/// (the `drops` column of /proc/net/udp).
fn socket_drops(port: u16) -> u64 {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1)?.ends_with(&want)).then(|| f.last()?.parse::<u64>().ok())?
        })
        .sum()
}

fn sum(v: &[u64]) -> u64 {
    v.iter().sum()
}

/// What the peer knows: its LID, the target's, the QPs and keys to aim at.
struct Aim {
    lid: u16,
    peer_lid: u16,
    qpns: Vec<u32>,
    rkeys: Vec<u32>,
    vas: Vec<u64>,
    qkey: u32,
    opcodes: Vec<Opcode>,
}

/// A packet with every header right and random fields: an opcode of any
/// service whose extension headers we can fill, a QP the target has (or
/// not), a PSN near the start (so requests execute) or anywhere, RETH and
/// AtomicETH at the granted MR, at a key of an MR without remote rights, or
/// anywhere.
fn valid_packet(rng: &mut Rng, aim: &Aim) -> Vec<u8> {
    let op = *rng.pick(&aim.opcodes);
    let info = op.info();
    let va = |rng: &mut Rng| match rng.below(4) {
        0 => rng.next_u64(),
        _ => rng.pick(&aim.vas) + rng.below(8192),
    };
    let rkey = |rng: &mut Rng| match rng.below(4) {
        0 => rng.next_u32(),
        _ => *rng.pick(&aim.rkeys),
    };
    let mut ext = ExtHeaders::default();
    if info.has(ExtKind::Reth) {
        let dma_len = match rng.below(4) {
            0 => rng.next_u32(),
            _ => rng.below(4096) as u32,
        };
        ext.reth = Some(RethRepr {
            va: va(rng),
            rkey: rkey(rng),
            dma_len,
        });
    }
    if info.has(ExtKind::AtomicEth) {
        ext.atomic_eth = Some(AtomicEthRepr {
            va: va(rng) & !7,
            rkey: rkey(rng),
            swap_add: rng.next_u64(),
            compare: rng.next_u64(),
        });
    }
    if info.has(ExtKind::Deth) {
        ext.deth = Some(DethRepr {
            qkey: if rng.chance(0.8) {
                aim.qkey
            } else {
                rng.next_u32()
            },
            src_qp: rng.below(1 << 24) as u32,
        });
    }
    if info.has(ExtKind::Aeth) {
        ext.aeth = Some(AethRepr {
            syndrome: AethSyndrome::Ack { credit_code: 31 },
            msn: rng.below(1 << 24) as u32,
        });
    }
    if info.has(ExtKind::AtomicAckEth) {
        ext.atomic_ack_eth = Some(AtomicAckEthRepr {
            orig_remote_data: rng.next_u64(),
        });
    }
    if info.has(ExtKind::ImmDt) {
        ext.imm_dt = Some(rng.next_u32());
    }
    if info.has(ExtKind::Ieth) {
        ext.ieth = Some(rkey(rng));
    }
    let payload = if info.payload {
        let n = match rng.below(3) {
            0 => 256,
            1 => 1024,
            _ => rng.below(1100) as usize,
        };
        vec![0xa5u8; n]
    } else {
        Vec::new()
    };
    let dest_qp = if rng.chance(0.9) {
        *rng.pick(&aim.qpns)
    } else {
        rng.below(1 << 24) as u32
    };
    let psn = if rng.chance(0.8) {
        rng.below(64) as u32
    } else {
        rng.below(1 << 24) as u32
    };
    let pkt = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: 0,
            dlid: aim.lid,
            slid: aim.peer_lid,
        },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: op,
                solicited: rng.chance(0.5),
                mig_req: false,
                pkey: if rng.chance(0.95) { 0xffff } else { 0x7fff },
                fecn: false,
                becn: false,
                dest_qp,
                ack_req: rng.chance(0.5),
                psn,
            },
            ext,
            payload: &payload,
        },
    };
    let mut buf = vec![0u8; pkt.buffer_len()];
    let n = pkt.emit(&mut buf).expect("every filled opcode emits");
    buf.truncate(n);
    buf
}

/// Sets both CRCs of a native packet (LRH, no GRH) right again.
fn fix_crcs(p: &mut [u8]) {
    let n = p.len();
    if n < 8 + 12 + 6 {
        return;
    }
    let icrc = icrc_native(&p[..n - 6], false);
    p[n - 6..n - 2].copy_from_slice(&icrc.to_le_bytes());
    let v = vcrc(&p[..n - 2]);
    p[n - 2..].copy_from_slice(&v.to_le_bytes());
}

/// Whether the UDP link of the target accepts a datagram from the peer's
/// address (fabric::udp: length, SLID of the sender, DLID of the target), so
/// that it reaches the engine.
fn link_accepts(p: &[u8], aim: &Aim) -> bool {
    let lid = |at: usize| u16::from_be_bytes([p[at], p[at + 1]]);
    (26..=0x7ff * 4 + 2).contains(&p.len())
        && lid(6) == aim.peer_lid
        && (lid(2) == aim.lid || lid(2) == 0xffff)
}

#[test]
fn hostile_peer_a_million_datagrams_leave_vhca_serving() {
    let mut v = Vhca::spawn(Options::nodes(2));
    let (peer_lid, peer_port, port) = (v.lid(1), v.node(1).udp_port, v.node(0).udp_port);
    // The peer is a raw socket at the (killed) second node's fabric address.
    v.kill(1);
    let peer = UdpSocket::bind(("127.0.0.1", peer_port)).expect("the peer node's address");
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.connect(("127.0.0.1", port)).unwrap();
    stranger.connect(("127.0.0.1", port)).unwrap();
    let mut n = Node::connect(&v, 0);
    let lid = n.lid();
    // Memory: one MR the peer is granted, one with local rights only, one
    // page nobody registered; the last two must come out unchanged.
    let open = n.region(64 << 10, Layout::Contiguous, 0);
    let closed_buf = n.hca.guest_mut().alloc_buf(64 << 10, Layout::Contiguous, 0);
    let closed = n
        .hca
        .reg_mr(n.pd, &closed_buf, access::LOCAL_WRITE, PblKind::Contiguous)
        .expect("REG_MR");
    let guard = n.hca.guest_mut().alloc_buf(64 << 10, Layout::Contiguous, 0);
    let closed_bytes = pattern(0xc105ed, 64 << 10);
    let guard_bytes = pattern(0x9a4d, 64 << 10);
    n.hca.guest().write(closed_buf.gpa(0), &closed_bytes);
    n.hca.guest().write(guard.gpa(0), &guard_bytes);
    // QPs of each type, in each state; the connected ones toward the peer
    // (its QP 0x42, starting PSN 0).
    let o = ConnOpts::default();
    let remote = Remote {
        lid: peer_lid,
        qpn: 0x42,
        psn: 0,
    };
    let mut qps: Vec<(QpH, &str)> = Vec::new();
    // A QP the flood sent to Error (an invalid request, an access error) is
    // brought back to RTS with fresh receive WQEs now and then, so the flood
    // keeps reaching live responders; its CQEs are drained.
    let rearm = |n: &mut Node, q: QpH| {
        n.hca.poll_cq(n.cq, 1 << 12);
        if n.hca.qp_state(q).expect("QUERY_QP") == Some(QpState::Rts) {
            return false;
        }
        n.hca.set_qp_state(q, QpState::Reset).expect("Reset");
        n.hca
            .qp_to_rts_from_reset(q, Some(remote), &o)
            .expect("RTS");
        for i in 0..32 {
            let sge = open.mr.sge(&open.buf, (i % 16) * 4096, 4096);
            n.hca
                .post_recv(q, &RecvWr::new(i as u64, vec![sge]))
                .expect("post_recv");
        }
        true
    };
    let mut live = Vec::new();
    for t in [QpType::Rc, QpType::Rc, QpType::Uc, QpType::Ud] {
        let q = n.qp(t);
        rearm(&mut n, q);
        live.push(q);
        qps.push((q, "RTS"));
    }
    let mut rearmed = 0u64;
    let reset = n.qp(QpType::Rc);
    qps.push((reset, "Reset"));
    let init = n.qp(QpType::Rc);
    n.hca.qp_to_init(init, &o).expect("Init");
    qps.push((init, "Init"));
    let rtr = n.qp(QpType::Rc);
    n.hca.qp_to_init(rtr, &o).expect("Init");
    n.hca.qp_to_rtr(rtr, Some(remote), &o).expect("RTR");
    qps.push((rtr, "RTR"));
    let err = n.qp(QpType::Uc);
    n.hca
        .qp_to_rts_from_reset(err, Some(remote), &o)
        .expect("RTS");
    n.hca.set_qp_state(err, QpState::Error).expect("Error");
    qps.push((err, "Error"));
    let aim = Aim {
        lid,
        peer_lid,
        qpns: qps.iter().map(|(q, _)| q.qpn).chain([1]).collect(),
        rkeys: vec![open.mr.rkey, closed.rkey],
        vas: vec![open.buf.va(0), closed_buf.va(0), guard.va(0)],
        qkey: o.qkey,
        opcodes: Opcode::all()
            .filter(|op| {
                op.info().headers.iter().all(|h| {
                    matches!(
                        h,
                        ExtKind::Reth
                            | ExtKind::AtomicEth
                            | ExtKind::Deth
                            | ExtKind::Aeth
                            | ExtKind::AtomicAckEth
                            | ExtKind::ImmDt
                            | ExtKind::Ieth
                    )
                })
            })
            .collect(),
    };
    let rx = |n: &mut Node| {
        n.hca
            .port_counter("rx_packets")
            .expect("QUERY_COUNTERS")
            .unwrap_or(0)
    };
    let set = |n: &mut Node, s: CounterSet| n.hca.query_counters(s).expect("QUERY_COUNTERS");
    let (rx0, wire0, drop0) = (
        rx(&mut n),
        sum(&set(&mut n, CounterSet::WireDrop)),
        sum(&set(&mut n, CounterSet::RxDrop)),
    );
    let (rss0, kdrops0) = (v.rss_kib(0), socket_drops(port));
    let mut rng = Rng::from_env("hostile peer");
    let mut class = [0u64; 6];
    let mut accepted = 0u64;
    let started = Instant::now();
    let mut buf;
    for i in 0..PEER_PACKETS {
        let mut from_peer = true;
        let k = rng.below(100);
        buf = valid_packet(&mut rng, &aim);
        let c = match k {
            // Valid headers and CRCs, random fields.
            0..35 => 0,
            // A bit flipped anywhere: a bad CRC (or a bad LRH).
            35..55 => {
                let at = rng.below(buf.len() as u64) as usize;
                buf[at] ^= 1 << rng.below(8);
                1
            }
            // Truncated, or garbage of any length.
            55..68 => {
                if rng.chance(0.7) {
                    buf.truncate(rng.below(buf.len() as u64) as usize);
                } else {
                    let len = rng.below(300) as usize;
                    buf = rng.bytes(len);
                }
                2
            }
            // Header bytes changed under right CRCs (LRH past the LIDs, BTH,
            // extension headers).
            68..88 => {
                for _ in 0..=rng.below(3) {
                    let end = buf.len().min(8 + 12 + 28);
                    let at = 8 + rng.below((end - 8) as u64) as usize;
                    buf[at] = rng.next_u32() as u8;
                }
                fix_crcs(&mut buf);
                3
            }
            // Right CRCs, another node's SLID: the link drops it.
            88..94 => {
                buf[6..8].copy_from_slice(&(peer_lid ^ 0x40).to_be_bytes());
                fix_crcs(&mut buf);
                4
            }
            // From an address that is no node of the fabric.
            _ => {
                from_peer = false;
                5
            }
        };
        class[c] += 1;
        if from_peer {
            accepted += u64::from(link_accepts(&buf, &aim));
            let _ = peer.send(&buf);
        } else {
            let _ = stranger.send(&buf);
        }
        if (i + 1) % BATCH == 0 {
            // Let the device drain its socket: at most two batches in flight.
            let until = Instant::now() + Duration::from_secs(2);
            while rx(&mut n) - rx0 + 2 * BATCH < accepted && Instant::now() < until {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if (i + 1) % (20 * BATCH) == 0 {
            for &q in &live {
                rearmed += u64::from(rearm(&mut n, q));
            }
        }
    }
    let sent_in = started.elapsed();
    // The last packets: wait until the engine's count stops moving.
    let mut last = u64::MAX;
    for _ in 0..100 {
        let r = rx(&mut n);
        if r == last {
            break;
        }
        last = r;
        std::thread::sleep(Duration::from_millis(50));
    }
    v.assert_alive(0);
    let rss1 = v.rss_kib(0);
    let kdrops = socket_drops(port) - kdrops0;
    let reached = rx(&mut n) - rx0;
    let wire = sum(&set(&mut n, CounterSet::WireDrop)) - wire0;
    let dropped = sum(&set(&mut n, CounterSet::RxDrop)) - drop0;
    let naks = sum(&set(&mut n, CounterSet::NakSent));
    println!(
        "hostile peer: {PEER_PACKETS} datagrams in {:.1} s ({} valid with random fields, {} bit \
         flips, {} truncated/garbage, {} bad fields under right CRCs, {} wrong SLID, {} from a \
         stranger); {accepted} for the link to accept, {kdrops} dropped by the kernel at the \
         socket, {reached} reached the engine: {wire} wire drops, {dropped} transport drops, \
         {} handled ({naks} NAKs sent in all; QPs brought back from Error {rearmed} times); \
         vhca RSS {rss0} KiB -> {rss1} KiB",
        sent_in.as_secs_f64(),
        class[0],
        class[1],
        class[2],
        class[3],
        class[4],
        class[5],
        reached - wire - dropped
    );
    // Every packet the link accepted reached the engine or was dropped by
    // the kernel first (the socket's drops also count the link's own).
    assert!(reached <= accepted, "{reached} > {accepted}");
    assert!(
        reached + kdrops >= accepted,
        "{accepted} accepted, {reached} reached, {kdrops} dropped by the kernel"
    );
    assert!(
        reached >= accepted * 9 / 10,
        "pacing kept the socket drained"
    );
    // The engine accounts for each: a wire drop, a transport drop, or handled.
    assert!(wire + dropped <= reached);
    assert!(wire > 0 && dropped > 0, "both kinds of drop seen");
    // Bounded memory: no queue grew with the flood.
    let grown = rss1.saturating_sub(rss0) * 1024;
    assert!(grown <= 32 * MIB, "RSS grew {} MiB", grown / MIB);
    // Nothing outside what the peer was granted changed.
    assert_eq!(
        n.hca.guest().read_vec(closed_buf.gpa(0), 64 << 10),
        closed_bytes,
        "an MR without remote rights was written"
    );
    assert_eq!(
        n.hca.guest().read_vec(guard.gpa(0), 64 << 10),
        guard_bytes,
        "unregistered memory was written"
    );
    // And the device still serves.
    for (q, state) in &qps {
        n.hca
            .query_qp(*q)
            .unwrap_or_else(|e| panic!("QUERY_QP of the {state} QP: {e}"));
    }
    // A CQ of its own: the hostile QPs' CQ holds their flushes.
    n.cq = n.hca.create_cq(12, 0).expect("CREATE_CQ");
    clean_transfer(&mut n);
    v.assert_alive(0);
}
