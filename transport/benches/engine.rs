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

use transport::engine::{Engine, Limits, PortConfig};
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

fn side(lid: u16) -> Side {
    // VHCA_BENCH_WINDOW=N: the requester's send window in packets.
    let limits = Limits {
        send_window: std::env::var("VHCA_BENCH_WINDOW")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(Limits::default().send_window),
        ..Limits::default()
    };
    let mut e = Engine::new(PortConfig::new(lid, 0x1000 + u64::from(lid)), limits);
    let pd = e.mrs().alloc_pd().unwrap();
    let pages = (0..(MEM as u64 / 4096)).map(|i| BASE + i * 4096).collect();
    let key = e
        .mrs()
        .reg_mr(pd, BASE, MEM as u64, Access(15), 4096, pages)
        .unwrap();
    let cq = e.create_cq(1 << 16).unwrap();
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
    let mut a = side(1);
    let mut b = side(2);
    let (qa, qb) = (a.qp, b.qp);
    connect(&mut a, 2, qb);
    connect(&mut b, 1, qa);
    (a, b)
}

/// Moves packets both ways until neither side has anything to send.
fn pump(a: &mut Side, b: &mut Side, buf: &mut [u8]) -> u64 {
    let mut n = 0;
    loop {
        let mut moved = false;
        while let Some(len) = a.e.poll_transmit(&mut a.mem, Time(0), &mut buf[OFF..]) {
            b.e.handle_packet(&buf[OFF..OFF + len], &mut b.mem, Time(0));
            moved = true;
            n += 1;
        }
        while let Some(len) = b.e.poll_transmit(&mut b.mem, Time(0), &mut buf[OFF..]) {
            a.e.handle_packet(&buf[OFF..OFF + len], &mut a.mem, Time(0));
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
fn threaded_write(msg: u32, count: usize) -> f64 {
    let (mut a, mut b) = pair();
    // (buffer, length) pairs; an empty batch tells the responder to stop.
    let (to_b, from_a) = mpsc::channel::<Vec<(Vec<u8>, usize)>>();
    let (to_a, from_b) = mpsc::channel::<(Vec<(Vec<u8>, usize)>, Vec<Vec<u8>>)>();
    let responder = thread::Builder::new()
        .name("responder".into())
        .spawn(move || {
            let mut spare: Vec<Vec<u8>> = (0..64).map(|_| vec![0u8; 8192]).collect();
            while let Ok(batch) = from_a.recv() {
                if batch.is_empty() {
                    break;
                }
                let mut out = Vec::new();
                let mut back = Vec::with_capacity(batch.len());
                for (p, len) in batch {
                    b.e.handle_packet(&p[OFF..OFF + len], &mut b.mem, Time(0));
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
    let t = Instant::now();
    let mut posted = 0;
    let mut done = 0;
    let mut in_flight = 0usize; // batches the responder has not answered
    while done < count {
        while posted < count && posted - done < 4 {
            a.e.post_send(a.qp, write_wr(&a, &a, msg)).unwrap();
            posted += 1;
        }
        let mut batch = Vec::with_capacity(32);
        while batch.len() < 32 {
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
            to_b.send(batch).unwrap();
            in_flight += 1;
        }
        // Every batch gets one answer. Take those waiting; when nothing could be
        // sent, wait for one.
        let mut wait = !sent && in_flight > 0;
        loop {
            let r = if wait {
                from_b.recv().ok()
            } else {
                from_b.try_recv().ok()
            };
            let Some((acks, back)) = r else { break };
            wait = false;
            in_flight -= 1;
            free.extend(back);
            for (p, len) in acks {
                a.e.handle_packet(&p[OFF..OFF + len], &mut a.mem, Time(0));
                free.push(p);
            }
        }
        while let Some(c) = a.e.poll_cq(a.cq) {
            assert_eq!(c.status, WcStatus::Success);
            done += 1;
        }
    }
    let dt = t.elapsed().as_secs_f64();
    to_b.send(Vec::new()).unwrap();
    let b = responder.join().unwrap();
    assert_eq!(
        &b.mem.bytes[1 << 20..(1 << 20) + msg as usize],
        &a.mem.bytes[..msg as usize]
    );
    f64::from(msg) * count as f64 / dt
}

fn main() {
    let mut buf = vec![0u8; 8192];
    // ---- RC WRITE, 1 MiB messages, PMTU 4096, one engine per thread.
    {
        let msg = 1u32 << 20;
        let src = vec![7u8; msg as usize];
        let mut dst = vec![0u8; msg as usize];
        let mut rates = Vec::new();
        let mut base = Vec::new();
        for rep in 0..7 {
            let r = threaded_write(msg, 32);
            let t = Instant::now();
            for _ in 0..32 {
                dst.copy_from_slice(black_box(&src));
                black_box(crc32fast::hash(&dst));
            }
            let bt = f64::from(msg) * 32.0 / t.elapsed().as_secs_f64();
            if rep > 0 {
                rates.push(r);
                base.push(bt);
            }
        }
        let (er, br) = (median(rates), median(base));
        println!(
            "RC WRITE 1 MiB, PMTU 4096, engines on two threads: engine {:.2} GB/s, memcpy+crc32fast {:.2} GB/s, ratio {:.3} (target >= 0.5)",
            er / 1e9,
            br / 1e9,
            er / br
        );
    }
    // ---- RC WRITE, 1 MiB messages, PMTU 4096.
    let (mut a, mut b) = pair();
    for (i, x) in a.mem.bytes[..1 << 20].iter_mut().enumerate() {
        *x = (i * 31) as u8;
    }
    let msg = 1u32 << 20;
    // VHCA_BENCH_SCALE=N runs N times as many messages (for profiling).
    let scale: usize = std::env::var("VHCA_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let msgs_per_rep = 16 * scale;
    let mut engine_rates = Vec::new();
    let mut base_rates = Vec::new();
    let src: Vec<u8> = a.mem.bytes[..msg as usize].to_vec();
    let mut dst = vec![0u8; msg as usize];
    for rep in 0..9 {
        let t = Instant::now();
        for _ in 0..msgs_per_rep {
            a.e.post_send(a.qp, write_wr(&a, &b, msg)).unwrap();
            pump(&mut a, &mut b, &mut buf);
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
        if rep > 0 {
            engine_rates.push(f64::from(msg) * msgs_per_rep as f64 / dt);
            base_rates.push(f64::from(msg) * msgs_per_rep as f64 / db);
        }
    }
    assert_eq!(
        &b.mem.bytes[1 << 20..(1 << 20) + msg as usize],
        &a.mem.bytes[..msg as usize]
    );
    let (er, br) = (median(engine_rates), median(base_rates));
    println!(
        "RC WRITE 1 MiB, PMTU 4096, both engines on one thread: engine {:.2} GB/s, memcpy+crc32fast {:.2} GB/s, ratio {:.3}",
        er / 1e9,
        br / 1e9,
        er / br
    );

    // ---- RC SEND, 8-byte messages.
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
            pump(&mut a, &mut b, &mut buf);
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
