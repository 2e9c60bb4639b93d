//! Engine benchmark (issue: transport engine): two engines in one process, packets
//! handed from one to the other in memory.
//!
//! - RC RDMA WRITE of 1 MiB messages at PMTU 4096: bytes per second, as a ratio to
//!   `memcpy` + `crc32fast` over the same bytes measured in the same run; once with
//!   each engine on its own thread (as two `vhca` processes run), once with both on
//!   one thread.
//! - RC SEND of 8-byte messages: messages per second.
//!
//! Run: `cargo bench -p transport --bench engine`.

use std::hint::black_box;
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use transport::engine::{Engine, Limits, PortConfig, RxFrom};
use transport::memory::VecMemory;
use transport::verbs::{
    Access, AddressVector, AttrMask, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, SendData,
    SendFlags, SendWr, Sge, Time, WcStatus, WrOpcode,
};

const BASE: u64 = 0x10_0000;
/// Packets start this far past a 16-byte boundary of their (heap, 16-aligned)
/// buffers, as `wire::packet::BUFFER_ALIGN_OFFSET` recommends.
const OFF: usize = transport::wire::packet::BUFFER_ALIGN_OFFSET;
const MEM: usize = 4 << 20;

struct Side {
    e: Engine,
    mem: VecMemory,
    key: u32,
    qp: u32,
    cq: u32,
}

/// `crcs_by_link`: the port leaves the CRCs to its link, as a `vhca` on the
/// shared-memory link does (issue 30), and takes packets vouched for.
fn side(lid: u16, crcs_by_link: bool) -> Side {
    // VHCA_BENCH_WINDOW=N: the requester's send window in packets.
    let limits = Limits {
        send_window: std::env::var("VHCA_BENCH_WINDOW")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Limits::default().send_window),
        ..Limits::default()
    };
    let port = PortConfig {
        crcs_by_link,
        ..PortConfig::new(lid, 0x1000 + u64::from(lid))
    };
    let mut e = Engine::new(port, limits);
    let pd = e.mrs().alloc_pd().unwrap();
    let pages = (0..(MEM as u64 / 4096)).map(|i| BASE + i * 4096).collect();
    let key = e
        .mrs()
        .reg_mr(pd, BASE, MEM as u64, Access(15), 4096, pages)
        .unwrap();
    let cq = e.create_cq().unwrap();
    let qp = e
        .create_qp(QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4096,
                max_recv_wr: 4096,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    Side {
        e,
        mem: VecMemory::new(BASE, MEM),
        key,
        qp,
        cq,
    }
}

fn connect(s: &mut Side, rlid: u16, rqp: u32) {
    let mut a = QpAttr {
        state: Some(QpState::Init),
        port_num: 1,
        access: Access(15),
        ..QpAttr::default()
    };
    let t = Time(0);
    s.e.modify_qp(
        s.qp,
        &a,
        AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
        t,
    )
    .unwrap();
    a.state = Some(QpState::Rtr);
    a.path_mtu = transport::verbs::Mtu::M4096;
    a.dest_qp_num = rqp;
    a.max_dest_rd_atomic = 4;
    a.av = AddressVector {
        dlid: rlid,
        ..AddressVector::default()
    };
    s.e.modify_qp(
        s.qp,
        &a,
        AttrMask::STATE
            | AttrMask::AV
            | AttrMask::PATH_MTU
            | AttrMask::DEST_QPN
            | AttrMask::RQ_PSN
            | AttrMask::MAX_DEST_RD_ATOMIC,
        t,
    )
    .unwrap();
    a.state = Some(QpState::Rts);
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    s.e.modify_qp(
        s.qp,
        &a,
        AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC,
        t,
    )
    .unwrap();
}

fn pair() -> (Side, Side) {
    pair_with(false)
}

/// [`pair`], the CRCs left to the link or not ([`side`]).
fn pair_with(crcs_by_link: bool) -> (Side, Side) {
    let mut a = side(1, crcs_by_link);
    let mut b = side(2, crcs_by_link);
    let (qa, qb) = (a.qp, b.qp);
    connect(&mut a, 2, qb);
    connect(&mut b, 1, qa);
    (a, b)
}

/// What the link says of each packet [`pump`] hands over: nothing.
const PLAIN: RxFrom = RxFrom {
    src_lid: None,
    crcs_vouched: false,
};

/// Moves packets both ways until neither side has anything to send, each
/// taken as `from` says.
fn pump(a: &mut Side, b: &mut Side, buf: &mut [u8], from: RxFrom) -> u64 {
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some(len) = a.e.poll_transmit(&mut a.mem, Time(0), &mut buf[OFF..]) {
            b.e.handle_received(&buf[OFF..OFF + len], from, &mut b.mem, Time(0));
            moved = true;
            n += 1;
        }
        while let Some(len) = b.e.poll_transmit(&mut b.mem, Time(0), &mut buf[OFF..]) {
            a.e.handle_received(&buf[OFF..OFF + len], from, &mut a.mem, Time(0));
            moved = true;
            n += 1;
        }
        if !moved {
            return n;
        }
    }
}

fn write_wr(a: &Side, b: &Side, len: u32) -> SendWr {
    SendWr {
        wr_id: 1,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        data: SendData::Sges(vec![Sge {
            addr: BASE,
            length: len,
            lkey: a.key,
        }]),
        imm_or_inv: 0,
        remote_addr: BASE + (1 << 20),
        rkey: b.key,
        compare: 0,
        swap_add: 0,
        ud: None,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// RC WRITEs of `msg` bytes, `count` of them, with each engine on its own thread;
/// returns the requester's bytes per second from first post to last completion.
/// Packet buffers circulate between the threads, so no packet is allocated or
/// copied on the way (as a socket send would not copy twice either).
fn threaded_write(msg: u32, count: usize, crcs_by_link: bool) -> f64 {
    let from = RxFrom {
        src_lid: None,
        crcs_vouched: crcs_by_link,
    };
    type Batch = Vec<(Vec<u8>, usize)>;
    // VHCA_BENCH_BATCH=N: packets handed over at once.
    let batch_len: usize = std::env::var("VHCA_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let (mut a, mut b) = pair_with(crcs_by_link);
    // Each message carries packets to the peer and the peer's own buffers coming
    // home, so each side reuses a small, warm set of buffers and nothing is
    // allocated on the way. `None` tells the responder to stop.
    let (to_b, from_a) = mpsc::channel::<Option<(Batch, Vec<Vec<u8>>)>>();
    let (to_a, from_b) = mpsc::channel::<(Batch, Vec<Vec<u8>>)>();
    let responder = thread::Builder::new()
        .name("responder".into())
        .spawn(move || {
            let mut spare: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; 8192]).collect();
            loop {
                // Spin rather than sleep: a futex wake-up costs more than a batch
                // of packets takes to process, and each engine owns its core (as
                // a busy-polling `vhca` does).
                let (batch, home) = match from_a.try_recv() {
                    Ok(Some(m)) => m,
                    Ok(None) | Err(mpsc::TryRecvError::Disconnected) => break,
                    Err(mpsc::TryRecvError::Empty) => {
                        std::hint::spin_loop();
                        continue;
                    }
                };
                spare.extend(home);
                let mut out = Vec::new();
                let mut back = Vec::with_capacity(batch.len());
                for (p, len) in batch {
                    b.e.handle_received(&p[OFF..OFF + len], from, &mut b.mem, Time(0));
                    back.push(p);
                }
                loop {
                    let mut buf = spare.pop().unwrap_or_else(|| vec![0u8; 8192]);
                    match b.e.poll_transmit(&mut b.mem, Time(0), &mut buf[OFF..]) {
                        Some(len) => out.push((buf, len)),
                        None => {
                            spare.push(buf);
                            break;
                        }
                    }
                }
                if to_a.send((out, back)).is_err() {
                    break;
                }
            }
            b
        })
        .unwrap();
    let mut free: Vec<Vec<u8>> = (0..512).map(|_| vec![0u8; 8192]).collect();
    let mut peer_bufs = Vec::new();
    let t = Instant::now();
    let mut posted = 0;
    let mut done = 0;
    let mut in_flight = 0usize; // batches the responder has not answered
    while done < count {
        while posted < count && posted - done < 4 {
            a.e.post_send(a.qp, write_wr(&a, &a, msg)).unwrap();
            posted += 1;
        }
        let mut batch = Vec::with_capacity(batch_len);
        while batch.len() < batch_len {
            let mut buf = free.pop().unwrap_or_else(|| vec![0u8; 8192]);
            match a.e.poll_transmit(&mut a.mem, Time(0), &mut buf[OFF..]) {
                Some(len) => batch.push((buf, len)),
                None => {
                    free.push(buf);
                    break;
                }
            }
        }
        let sent = !batch.is_empty();
        if sent {
            to_b.send(Some((batch, std::mem::take(&mut peer_bufs))))
                .unwrap();
            in_flight += 1;
        }
        // Every batch gets one answer. Take those waiting; when nothing could be
        // sent, wait for one.
        let mut wait = !sent && in_flight > 0;
        loop {
            let r = match from_b.try_recv() {
                Ok(r) => Some(r),
                Err(mpsc::TryRecvError::Empty) if wait => {
                    std::hint::spin_loop();
                    continue;
                }
                Err(_) => None,
            };
            let Some((acks, back)) = r else { break };
            wait = false;
            in_flight -= 1;
            free.extend(back);
            for (p, len) in acks {
                a.e.handle_received(&p[OFF..OFF + len], from, &mut a.mem, Time(0));
                peer_bufs.push(p);
            }
        }
        while let Some(c) = a.e.poll_cq(a.cq) {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
        }
    }
    let dt = t.elapsed().as_secs_f64();
    to_b.send(None).unwrap();
    let b = responder.join().unwrap();
    assert_eq!(
        &b.mem.bytes[1 << 20..(1 << 20) + msg as usize],
        &a.mem.bytes[..msg as usize]
    );
    if std::env::var_os("VHCA_BENCH_DEBUG").is_some() {
        eprintln!(
            "{:.2} GB/s requester {:?}",
            f64::from(msg) * count as f64 / dt / 1e9,
            a.e.counters()
        );
        eprintln!("responder {:?}", b.e.counters());
    }
    f64::from(msg) * count as f64 / dt
}

/// The same two-thread pipeline with the engines replaced by what each side must
/// at least do per packet: copy 4 KiB into a buffer and CRC it (requester), CRC
/// it and copy it out (responder). The ceiling the harness allows.
fn threaded_ceiling(msg: usize, count: usize) -> f64 {
    const PKT: usize = 4096;
    let (to_b, from_a) = mpsc::channel::<Vec<Vec<u8>>>();
    let (to_a, from_b) = mpsc::channel::<Vec<Vec<u8>>>();
    let responder = thread::spawn(move || {
        let mut dst = vec![0u8; msg];
        let mut at = 0;
        loop {
            let batch = match from_a.try_recv() {
                Ok(b) => b,
                Err(mpsc::TryRecvError::Empty) => {
                    std::hint::spin_loop();
                    continue;
                }
                Err(mpsc::TryRecvError::Disconnected) => break,
            };
            if batch.is_empty() {
                break;
            }
            for p in &batch {
                black_box(crc32fast::hash(&p[OFF..OFF + PKT]));
                dst[at..at + PKT].copy_from_slice(&p[OFF..OFF + PKT]);
                at = (at + PKT) % msg;
            }
            if to_a.send(batch).is_err() {
                break;
            }
        }
        black_box(dst);
    });
    let src = vec![5u8; msg];
    let mut free: Vec<Vec<u8>> = (0..512).map(|_| vec![0u8; 8192]).collect();
    let total = msg / PKT * count;
    let (mut sent, mut acked, mut at) = (0, 0, 0);
    let t = Instant::now();
    while acked < total {
        if sent - acked < 256 {
            let mut batch = Vec::with_capacity(32);
            while batch.len() < 32 && sent < total {
                let mut p = free.pop().unwrap();
                p[OFF..OFF + PKT].copy_from_slice(&src[at..at + PKT]);
                black_box(crc32fast::hash(&p[OFF..OFF + PKT]));
                at = (at + PKT) % msg;
                batch.push(p);
                sent += 1;
            }
            if !batch.is_empty() {
                to_b.send(batch).unwrap();
            }
        }
        match from_b.try_recv() {
            Ok(back) => {
                acked += back.len();
                free.extend(back);
            }
            Err(_) => std::hint::spin_loop(),
        }
    }
    let dt = t.elapsed().as_secs_f64();
    to_b.send(Vec::new()).unwrap();
    responder.join().unwrap();
    (msg * count) as f64 / dt
}

/// `VHCA_BENCH_ONLY=threads|one|link1|send` runs one part alone (for profiling).
fn part(name: &str) -> bool {
    std::env::var("VHCA_BENCH_ONLY").map_or(true, |v| v == name)
}

fn main() {
    let scale: usize = std::env::var("VHCA_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    // `VHCA_BENCH_COPY_PIECE=N`: the packet copies' piece size (the device
    // measures it at start, `device::copy_tune`; 1024 without it).
    if let Some(n) = std::env::var("VHCA_BENCH_COPY_PIECE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        transport::memory::set_copy_piece(n);
    }
    // ---- RC WRITE, 1 MiB messages, PMTU 4096, one engine per thread.
    if part("threads") {
        let msg = 1u32 << 20;
        let src = vec![7u8; msg as usize];
        let mut dst = vec![0u8; msg as usize];
        let mut rates = Vec::new();
        let mut base = Vec::new();
        let mut ceil = Vec::new();
        let mut by_link = Vec::new();
        for rep in 0..7 {
            let r = threaded_write(msg, 32 * scale, false);
            let l = threaded_write(msg, 32 * scale, true);
            let c = threaded_ceiling(msg as usize, 32 * scale);
            let t = Instant::now();
            for _ in 0..32 {
                dst.copy_from_slice(black_box(&src));
                black_box(crc32fast::hash(&dst));
            }
            let bt = f64::from(msg) * 32.0 / t.elapsed().as_secs_f64();
            if rep > 0 {
                rates.push(r);
                by_link.push(l);
                base.push(bt);
                ceil.push(c);
            }
        }
        let (er, br) = (median(rates), median(base));
        let cr = median(ceil);
        println!(
            "two threads, copy+crc32fast on each side, no engine: {:.2} GB/s, ratio {:.3}",
            cr / 1e9,
            cr / br
        );
        println!(
            "RC WRITE 1 MiB, PMTU 4096, engines on two threads: engine {:.2} GB/s, memcpy+crc32fast {:.2} GB/s, ratio {:.3} (target >= 0.5)",
            er / 1e9,
            br / 1e9,
            er / br
        );
        let lr = median(by_link);
        println!(
            "the same with the CRCs left to the link (the shared-memory link, issue 30): engine {:.2} GB/s, ratio {:.3}, {:.2}x with CRCs",
            lr / 1e9,
            lr / br,
            lr / er
        );
    }
    if part("one") {
        one_thread_write(scale);
    }
    if part("link1") {
        one_thread_by_link(scale);
    }
    if part("send") {
        send_rate();
    }
}

/// RC WRITE, 1 MiB messages, PMTU 4096, both engines on one thread.
fn one_thread_write(scale: usize) {
    let mut buf = vec![0u8; 8192];
    let (mut a, mut b) = pair();
    for (i, x) in a.mem.bytes[..1 << 20].iter_mut().enumerate() {
        *x = (i * 31) as u8;
    }
    let msg = 1u32 << 20;
    let msgs_per_rep = 16 * scale;
    let mut engine_rates = Vec::new();
    let mut base_rates = Vec::new();
    let mut ceil_rates = Vec::new();
    let src: Vec<u8> = a.mem.bytes[..msg as usize].to_vec();
    let mut dst = vec![0u8; msg as usize];
    for rep in 0..9 {
        let t = Instant::now();
        for _ in 0..msgs_per_rep {
            a.e.post_send(a.qp, write_wr(&a, &b, msg)).unwrap();
            pump(&mut a, &mut b, &mut buf, PLAIN);
            let c = a.e.poll_cq(a.cq).expect("write completion");
            assert_eq!(c.status, WcStatus::Success);
        }
        let dt = t.elapsed().as_secs_f64();
        // Baseline: memcpy + crc32fast of the same bytes.
        let t = Instant::now();
        for _ in 0..msgs_per_rep {
            dst.copy_from_slice(black_box(&src));
            black_box(crc32fast::hash(&dst));
        }
        let db = t.elapsed().as_secs_f64();
        // Ceiling: what the two sides must at least do, packet by packet: copy
        // into a packet and CRC it, CRC it and copy it out.
        let t = Instant::now();
        for _ in 0..msgs_per_rep {
            for (s, d) in src.chunks(4096).zip(dst.chunks_mut(4096)) {
                buf[OFF..OFF + 4096].copy_from_slice(black_box(s));
                black_box(crc32fast::hash(&buf[OFF..OFF + 4096]));
                black_box(crc32fast::hash(black_box(&buf[OFF..OFF + 4096])));
                d.copy_from_slice(&buf[OFF..OFF + 4096]);
            }
        }
        let dc = t.elapsed().as_secs_f64();
        if rep > 0 {
            engine_rates.push(f64::from(msg) * msgs_per_rep as f64 / dt);
            base_rates.push(f64::from(msg) * msgs_per_rep as f64 / db);
            ceil_rates.push(f64::from(msg) * msgs_per_rep as f64 / dc);
        }
    }
    assert_eq!(
        &b.mem.bytes[1 << 20..(1 << 20) + msg as usize],
        &a.mem.bytes[..msg as usize]
    );
    let (er, br) = (median(engine_rates), median(base_rates));
    let cr = median(ceil_rates);
    println!(
        "one thread, copy+crc32fast twice per packet, no engine: {:.2} GB/s, ratio {:.3}",
        cr / 1e9,
        cr / br
    );
    println!(
        "RC WRITE 1 MiB, PMTU 4096, both engines on one thread: engine {:.2} GB/s, memcpy+crc32fast {:.2} GB/s, ratio {:.3}",
        er / 1e9,
        br / 1e9,
        er / br
    );
}

/// RC WRITE, 1 MiB messages, both engines on one thread with the CRCs left to
/// the link (the shared-memory link's set-up, issue 30). One thread and no
/// hand-over: the engines' own cost per packet, free of the scheduler's noise
/// that the two-process bench (`shm_bench`) carries. Printed as nanoseconds
/// per 4 KiB packet for both sides together, against the copies the two sides
/// must at least make (into a packet, out of it; in `memory::copy_piece`
/// pieces, as the engine copies).
fn one_thread_by_link(scale: usize) {
    let from = RxFrom {
        src_lid: None,
        crcs_vouched: true,
    };
    let mut buf = vec![0u8; 8192];
    let (mut a, mut b) = pair_with(true);
    let msg = 1u32 << 20;
    let msgs = 16 * scale;
    let packets = (msg as usize / 4096 * msgs) as f64;
    let src: Vec<u8> = (0..msg as usize).map(|i| (i * 31) as u8).collect();
    a.mem.bytes[..msg as usize].copy_from_slice(&src);
    let mut dst = vec![0u8; msg as usize];
    let (mut engine, mut ceil) = (Vec::new(), Vec::new());
    for rep in 0..9 {
        let t = Instant::now();
        for _ in 0..msgs {
            a.e.post_send(a.qp, write_wr(&a, &b, msg)).unwrap();
            pump(&mut a, &mut b, &mut buf, from);
            let c = a.e.poll_cq(a.cq).expect("write completion");
            assert_eq!(c.status, WcStatus::Success);
        }
        let de = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let chunk = transport::memory::copy_piece();
        for _ in 0..msgs {
            for (s, d) in src.chunks(4096).zip(dst.chunks_mut(4096)) {
                for (i, (s, d)) in s.chunks(chunk).zip(d.chunks_mut(chunk)).enumerate() {
                    let at = OFF + 64 + i * chunk;
                    buf[at..at + s.len()].copy_from_slice(black_box(s));
                    d.copy_from_slice(black_box(&buf[at..at + s.len()]));
                }
            }
        }
        let dc = t.elapsed().as_secs_f64();
        if rep > 0 {
            engine.push(de * 1e9 / packets);
            ceil.push(dc * 1e9 / packets);
        }
    }
    assert_eq!(&b.mem.bytes[1 << 20..(1 << 20) + msg as usize], &src[..]);
    let (emin, emax) = (
        engine.iter().cloned().fold(f64::MAX, f64::min),
        engine.iter().cloned().fold(0.0, f64::max),
    );
    let (e, c) = (median(engine), median(ceil));
    println!(
        "RC WRITE 1 MiB, CRCs by the link, both engines on one thread: {e:.0} ns per 4 KiB packet (both sides; {emin:.0}-{emax:.0}), the two copies alone {c:.0} ns: {:.2}x, engine {:.2} GB/s",
        e / c,
        4096.0 / e
    );
}

/// RC SEND, 8-byte messages, both engines on one thread.
fn send_rate() {
    let mut buf = vec![0u8; 8192];
    let (mut a, mut b) = pair();
    let batch = 256;
    let mut rates = Vec::new();
    for rep in 0..9 {
        let t = Instant::now();
        for _ in 0..16 {
            for i in 0..batch {
                b.e.post_recv(
                    b.qp,
                    RecvWr {
                        wr_id: i,
                        sges: vec![Sge {
                            addr: BASE + (2 << 20) + i * 64,
                            length: 64,
                            lkey: b.key,
                        }],
                    },
                )
                .unwrap();
                let mut w = write_wr(&a, &b, 8);
                w.opcode = WrOpcode::Send;
                w.flags = if i == batch - 1 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags(0)
                };
                a.e.post_send(a.qp, w).unwrap();
            }
            pump(&mut a, &mut b, &mut buf, PLAIN);
            while b.e.poll_cq(b.cq).is_some() {}
            assert_eq!(a.e.poll_cq(a.cq).map(|c| c.status), Some(WcStatus::Success));
        }
        if rep > 0 {
            rates.push((16 * batch) as f64 / t.elapsed().as_secs_f64());
        }
    }
    println!(
        "RC SEND 8 B: {:.0} messages/s (both engines on one core)",
        median(rates)
    );
}
