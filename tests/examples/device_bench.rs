//! Device benchmarks (issue: the device), each a ratio to a baseline measured
//! in the same run. Two real `vhca` processes on UDP loopback, driven by the
//! userspace test driver; run by `scripts/bench-device.sh`, which builds an
//! optimised `vhca` and passes it in `VHCA_BIN`.
//!
//! 1. RC WRITE, 64 KiB messages, A -> B, vs `iperf3 -u -b 0 -l 4160` on
//!    loopback (receiver-side rate).
//! 2. 8-byte SEND ping-pong, round-trip p50, vs a UDP ping-pong of 8 bytes
//!    between two sockets in one thread (the figure for the target), and, for
//!    context, two threads polling and two threads blocked in `recv`.
//! 3. 64-byte RDMA WRITE messages per second vs 64-byte UDP datagrams per
//!    second (receiver side).
//! 4. CPU of an idle `vhca` (client connected, nothing posted) over 10 s.
//! 5. The same with 10 000 QPs and 10 000 CQs created (issue 12: a data-path
//!    round costs O(work), not O(objects)), and the host memory (RssAnon) each
//!    idle QP + CQ costs.
//! 6. Aggregate RC WRITE 64 KiB throughput with 1, 16, 256 and 1024 active
//!    QPs between the two processes, each against the 1-QP figure of the
//!    same run.
//! 7. RC SEND stream of 64 KiB messages with few receives posted (RL-13:
//!    compare `VHCA_BENCH_VHCA_ARGS="--no-credits"`; no baseline of its own).
//!
//! `VHCA_BENCH_QUICK=1` shortens every run (for a smoke check);
//! `VHCA_BENCH_ONLY=2,4` runs only those figures; `VHCA_BENCH_SCALE_QPS=N`
//! sets figure 5's object count (default 10 000); `VHCA_BENCH_PINGPONGS=N`
//! sets the ping-pong count; `VHCA_BENCH_FIG6_MSGS=N` sets figure 6's
//! messages per row (default 6 000) and `VHCA_BENCH_FIG6_QPS=1,256,1024` its
//! rows (each row also prints its CPU per GB and packet counts);
//! `VHCA_BENCH_VHCA_ARGS` adds `vhca` arguments (e.g. `--busy-poll 50us`).

use std::net::UdpSocket;
use std::process::Command;
use std::time::{Duration, Instant};

use vhca_tests::abi::verbs::QpType;
use vhca_tests::bench_tsv as tsv;
use vhca_tests::fixture::{
    assert_success, connect_pair_with, transfer_rate, Node, Region, Transfer,
};
use vhca_tests::process::cpu_ns;
use vhca_tests::{
    ConnOpts, GuestOptions, HcaConfig, Layout, Options, QpInit, RecvWr, SendWr, Vhca,
};

fn quick() -> bool {
    std::env::var_os("VHCA_BENCH_QUICK").is_some()
}

fn sge(r: &Region, off: usize, len: usize) -> Vec<vhca_tests::abi::wqe::Sge> {
    vec![r.mr.sge(&r.buf, off, len)]
}

/// iperf3 UDP on loopback: receiver-side bytes per second.
fn iperf3_udp(secs: u32) -> Option<f64> {
    let port = "5299";
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-p", port])
        .stdout(std::process::Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", port, "-u", "-b", "0", "-l", "4160"])
        .args(["-t", &secs.to_string(), "-J"])
        .output()
        .ok()?;
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    // "sum" of the end section: the receiver-side figure is the "bits_per_second"
    // of "sum_received" in newer iperf3, or "sum" with lost datagrams counted.
    let end = text.find("\"end\"")?;
    let tail = &text[end..];
    let key = if tail.contains("\"sum_received\"") {
        "\"sum_received\""
    } else {
        "\"sum\""
    };
    let at = tail.find(key)?;
    let bps_at = tail[at..].find("\"bits_per_second\":")? + at + 18;
    let num: String = tail[bps_at..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == 'e' || *c == '+')
        .collect();
    let bps: f64 = num.parse().ok()?;
    // With -u the "sum" of the client's end is what was sent; scale by the
    // loss the same section reports.
    let lost = if key == "\"sum\"" {
        let lp = tail[at..].find("\"lost_percent\":").map(|p| p + at + 15);
        lp.and_then(|p| {
            tail[p..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == 'e' || *c == '-')
                .collect::<String>()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0)
    } else {
        0.0
    };
    Some(bps / 8.0 * (1.0 - lost / 100.0))
}

/// UDP ping-pong of 8 bytes between two sockets in this thread: p50 round trip.
fn udp_pingpong(n: usize) -> Duration {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    let mut buf = [0u8; 64];
    let mut rtt = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        a.send(&[1u8; 8]).unwrap();
        b.recv(&mut buf).unwrap();
        b.send(&[2u8; 8]).unwrap();
        a.recv(&mut buf).unwrap();
        rtt.push(t.elapsed());
    }
    rtt.sort();
    rtt[n / 2]
}

/// UDP ping-pong of 8 bytes between two threads: each waits for the other's
/// datagram, blocked in `recv` (netperf's UDP_RR on loopback) or, with `spin`,
/// polling a non-blocking socket: p50 round trip.
fn udp_pingpong_threads(n: usize, spin: bool) -> Duration {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    a.connect(b.local_addr().unwrap()).unwrap();
    b.connect(a.local_addr().unwrap()).unwrap();
    a.set_nonblocking(spin).unwrap();
    b.set_nonblocking(spin).unwrap();
    // Spinning: a non-blocking recv, yielding between tries (as the device
    // ping-pong's driver polls its CQs).
    fn recv(s: &UdpSocket, buf: &mut [u8]) -> usize {
        loop {
            match s.recv(buf) {
                Ok(n) => return n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("udp recv: {e}"),
            }
        }
    }
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..n {
            let len = recv(&b, &mut buf);
            b.send(&buf[..len]).unwrap();
        }
    });
    let mut buf = [0u8; 64];
    let mut rtt = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        a.send(&[1u8; 8]).unwrap();
        recv(&a, &mut buf);
        rtt.push(t.elapsed());
    }
    echo.join().unwrap();
    rtt.sort();
    rtt[n / 2]
}

/// 64-byte UDP datagrams per second, sender and receiver on two threads.
fn udp_rate(secs: f64) -> f64 {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let to = rx.local_addr().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let sender = std::thread::spawn(move || {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(to).unwrap();
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            let _ = tx.send(&[0u8; 64]);
        }
    });
    let mut buf = [0u8; 128];
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed().as_secs_f64() < secs {
        if rx.recv(&mut buf).is_ok() {
            n += 1;
        }
    }
    let dt = t.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    n as f64 / dt
}

/// RssAnon of a process, in bytes: its private memory. (VmRSS would also
/// count the guest's pages the device has touched through its shared
/// mapping: rings and page lists are guest memory, not the device's.)
fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Percent of a core `pid` used over `secs` seconds of sleep here.
fn idle_cpu(pid: u32, secs: u64) -> (u64, f64) {
    let c0 = vhca_tests::process::cpu_ticks(pid);
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let ticks = vhca_tests::process::cpu_ticks(pid) - c0;
    let hz = 100.0; // USER_HZ on Linux
    (ticks, ticks as f64 / hz / t.elapsed().as_secs_f64() * 100.0)
}

/// `VHCA_BENCH_ONLY=2,4` runs only those figures (default: all).
fn wanted(figure: u32) -> bool {
    match std::env::var("VHCA_BENCH_ONLY") {
        Ok(s) if !s.trim().is_empty() => s.split(',').any(|x| x.trim() == figure.to_string()),
        _ => true,
    }
}

fn main() {
    let secs = if quick() { 1 } else { 3 };
    // The iperf3 baseline is taken before and after the WRITE run and the
    // higher figure kept: the host's load moves both, and this errs against us.
    let iperf_before = if wanted(1) { iperf3_udp(secs) } else { None };
    // `VHCA_BENCH_VHCA_ARGS="--busy-poll 50us"`: extra vhca arguments.
    let mut opts = Options::nodes(2);
    if let Ok(extra) = std::env::var("VHCA_BENCH_VHCA_ARGS") {
        opts.extra_args = extra.split_whitespace().map(String::from).collect();
    }
    let v = Vhca::spawn(opts);
    // Guest RAM for figures 5 and 6: 10 000 QPs + CQs and 1024 connected
    // QPs' rings do not fit the default 256 MiB (untouched pages cost nothing).
    let go = || GuestOptions {
        ram_size: 2 << 30,
        ..GuestOptions::default()
    };
    let mut a = Node::connect_with(&v, 0, go(), HcaConfig::default());
    let mut b = Node::connect_with(&v, 1, go(), HcaConfig::default());
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq).wr(512, 512);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq).wr(512, 512);
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());

    let msg = 64 << 10;
    let slots = 32;
    let src = a.region(msg * slots, Layout::Contiguous, 0);
    let dst = b.region(msg * slots, Layout::Contiguous, 0);

    // ---- 1. RC WRITE 64 KiB.
    let r1 = if wanted(1) {
        let window = 16;
        let total = if quick() { 2_000 } else { 12_000 };
        let mut posted = 0usize;
        let mut done = 0usize;
        let t = Instant::now();
        while done < total {
            while posted < total && posted - done < window {
                let off = (posted % slots) * msg;
                let wr = SendWr::write(posted as u64, dst.buf.va(off), dst.mr.rkey)
                    .sges(sge(&src, off, msg));
                a.hca.post_send(qa, &wr).unwrap();
                posted += 1;
            }
            let got = a.hca.wait_cqes(a.cq, 1, Duration::from_secs(10));
            assert!(!got.is_empty(), "RC WRITE stalled at {done} of {total}");
            assert_success(&got);
            done += got.len();
            let more = a.hca.poll_cq(a.cq, window);
            assert_success(&more);
            done += more.len();
        }
        let write_rate = (total * msg) as f64 / t.elapsed().as_secs_f64();
        let iperf = match (iperf_before, iperf3_udp(secs)) {
            (Some(x), Some(y)) => Some(x.max(y)),
            (x, y) => x.or(y),
        };
        Some((write_rate, iperf))
    } else {
        None
    };

    // ---- 2. 8-byte SEND ping-pong.
    let r2 = if wanted(2) {
        let n = std::env::var("VHCA_BENCH_PINGPONGS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if quick() { 500 } else { 3_000 });
        let sbuf = a.region(4096, Layout::Contiguous, 0);
        let rbuf_a = a.region(4096, Layout::Contiguous, 0);
        let rbuf_b = b.region(4096, Layout::Contiguous, 0);
        let mut rtt = Vec::with_capacity(n);
        for i in 0..n as u64 {
            b.hca
                .post_recv(qb, &RecvWr::new(i, sge(&rbuf_b, 0, 64)))
                .unwrap();
            a.hca
                .post_recv(qa, &RecvWr::new(i, sge(&rbuf_a, 0, 64)))
                .unwrap();
            let t = Instant::now();
            a.hca
                .post_send(qa, &SendWr::send(i).sges(sge(&sbuf, 0, 8)))
                .unwrap();
            let mut got_b = Vec::new();
            while got_b.is_empty() {
                got_b = b.hca.poll_cq(b.cq, 4);
                std::thread::yield_now();
            }
            let t1 = t.elapsed();
            b.hca
                .post_send(qb, &SendWr::send(i).sges(sge(&rbuf_b, 0, 8)))
                .unwrap();
            // A sees its SEND's completion and the reply's receive.
            let mut seen = 0;
            let mut t2 = Duration::ZERO;
            let mut kinds = Vec::new();
            while seen < 2 {
                let g = a.hca.poll_cq(a.cq, 4);
                if seen == 0 && !g.is_empty() {
                    t2 = t.elapsed();
                }
                seen += g.len();
                kinds.extend(g.iter().map(|c| format!("{:?}", c.opcode)));
                std::thread::yield_now();
            }
            let t3 = t.elapsed();
            // `VHCA_BENCH_DEBUG=1`: where a round trip's time goes, every 200th.
            if std::env::var("VHCA_BENCH_DEBUG").is_ok() && i % 200 == 0 {
                eprintln!("b-recv {t1:?} a-first {t2:?} a-both {t3:?} {kinds:?}");
            }
            rtt.push(t.elapsed());
            // B's SEND completion.
            let mut sb = 0;
            while sb < 1 {
                sb += b.hca.poll_cq(b.cq, 4).len();
                std::thread::yield_now();
            }
        }
        rtt.sort();
        let p50 = rtt[n / 2];
        let udp_p50 = udp_pingpong(n).min(udp_pingpong(n));
        let poll_p50 = udp_pingpong_threads(n, true).min(udp_pingpong_threads(n, true));
        let block_p50 = udp_pingpong_threads(n, false).min(udp_pingpong_threads(n, false));
        Some((p50, udp_p50, poll_p50, block_p50))
    } else {
        None
    };

    // ---- 3. 64-byte RDMA WRITE messages per second.
    let r3 = if wanted(3) {
        let udp64_before = udp_rate(secs as f64);
        let small = a.region(64, Layout::Contiguous, 0);
        let per = 64usize;
        let t = Instant::now();
        let mut msgs = 0u64;
        let mut outstanding = 0usize;
        let budget = secs as f64;
        while t.elapsed().as_secs_f64() < budget || outstanding > 0 {
            if t.elapsed().as_secs_f64() < budget && outstanding < 4 {
                let wrs: Vec<SendWr> = (0..per)
                    .map(|j| {
                        let w = SendWr::write(j as u64, dst.buf.va(0), dst.mr.rkey)
                            .sges(sge(&small, 0, 64));
                        if j + 1 == per {
                            w
                        } else {
                            w.unsignaled()
                        }
                    })
                    .collect();
                a.hca.post_send_batch(qa, &wrs).unwrap();
                outstanding += 1;
            }
            let got = a.hca.poll_cq(a.cq, 8);
            if got.is_empty() {
                std::thread::yield_now();
            }
            assert_success(&got);
            outstanding -= got.len();
            msgs += (got.len() * per) as u64;
        }
        let write64_rate = msgs as f64 / t.elapsed().as_secs_f64();
        // As for iperf3: the UDP rate before and after, the higher kept.
        let udp64_rate = udp_rate(secs as f64).max(udp64_before);
        Some((write64_rate, udp64_rate))
    } else {
        None
    };

    // ---- 7. RC SEND stream: 64 KiB SENDs A -> B, 16 in flight, B keeping
    // `VHCA_BENCH_RECVS` (default 16) receives posted, each reposted as its
    // completion is polled. With end-to-end credits (RL-13) A waits for B's
    // buffers; without (`VHCA_BENCH_VHCA_ARGS="--no-credits"`) it meets RNR
    // NAKs instead.
    let r7 = if wanted(7) {
        let window = 16;
        let recvs: usize = std::env::var("VHCA_BENCH_RECVS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(16)
            .clamp(1, slots);
        let total = if quick() { 2_000 } else { 12_000 };
        for i in 0..recvs {
            let wr = RecvWr::new(i as u64, sge(&dst, (i % slots) * msg, msg));
            b.hca.post_recv(qb, &wr).unwrap();
        }
        let mut next_recv = recvs;
        let (mut posted, mut done, mut received) = (0usize, 0usize, 0usize);
        let t = Instant::now();
        while done < total || received < total {
            while posted < total && posted - done < window {
                let off = (posted % slots) * msg;
                let wr = SendWr::send(posted as u64).sges(sge(&src, off, msg));
                a.hca.post_send(qa, &wr).unwrap();
                posted += 1;
            }
            let got_b = b.hca.poll_cq(b.cq, 64);
            assert_success(&got_b);
            for _ in &got_b {
                received += 1;
                if next_recv < total {
                    let off = (next_recv % slots) * msg;
                    let wr = RecvWr::new(next_recv as u64, sge(&dst, off, msg));
                    b.hca.post_recv(qb, &wr).unwrap();
                    next_recv += 1;
                }
            }
            let got_a = a.hca.poll_cq(a.cq, 64);
            assert_success(&got_a);
            done += got_a.len();
            if got_a.is_empty() && got_b.is_empty() {
                assert!(
                    t.elapsed() < Duration::from_secs(120),
                    "RC SEND stalled at {done}/{received} of {total}"
                );
                std::thread::yield_now();
            }
        }
        Some((
            (total * msg) as f64 / t.elapsed().as_secs_f64(),
            recvs,
            window,
        ))
    } else {
        None
    };

    // ---- 6. Aggregate RC WRITE over many QPs (before 4 and 5: they add
    // idle objects to node A).
    let r6 = if wanted(6) {
        // `VHCA_BENCH_FIG6_QPS=1,256,1024`: the rows (default 1, 16, 256,
        // 1024; the first is the baseline of the ratios).
        let counts: Vec<usize> = match std::env::var("VHCA_BENCH_FIG6_QPS") {
            Ok(s) if !s.trim().is_empty() => s
                .split(',')
                .filter_map(|x| x.trim().parse().ok())
                .filter(|&n| n > 0)
                .collect(),
            _ if quick() => vec![1, 16],
            _ => vec![1, 16, 256, 1024],
        };
        let mut qa_all = Vec::new();
        let mut out = Vec::new();
        for &n in &counts {
            while qa_all.len() < n {
                let ia = QpInit::new(QpType::Rc, a.pd, a.cq).wr(32, 4);
                let ib = QpInit::new(QpType::Rc, b.pd, b.cq).wr(4, 4);
                let (x, _) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
                qa_all.push(x);
            }
            // At least 4 messages per QP; 32 in flight in all (2 MiB, as
            // figure 1's 16 per QP roughly), spread over the QPs, at least one
            // each (1024 with 1024 QPs; A's CQ holds 4096).
            // `VHCA_BENCH_FIG6_MSGS=N`: messages per row (default 6 000; more
            // for steadier figures on a busy host).
            let msgs = std::env::var("VHCA_BENCH_FIG6_MSGS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(6_000);
            let total = (if quick() { 1_000 } else { msgs }).max(4 * n);
            let per_qp = (32 / n).max(1);
            let drops_before = udp_rcvbuf_errors();
            let cost = RowCost::start(&v, &mut a, &mut b);
            let rate = transfer_rate(
                &mut a,
                &qa_all[..n],
                Transfer::Write,
                &src,
                &dst,
                msg,
                slots,
                total,
                per_qp,
            );
            // Datagrams the kernel dropped for a full receive buffer (both
            // devices' sockets, and anything else on the host) during the run.
            let drops = udp_rcvbuf_errors()
                .zip(drops_before)
                .map(|(a, b)| a.saturating_sub(b));
            let cost = cost.finish(&mut a, &mut b, (total * msg) as f64);
            out.push((n, rate, drops, cost));
        }
        Some(out)
    } else {
        None
    };

    // ---- 4. Idle CPU.
    let idle_secs = if quick() { 2 } else { 10 };
    let r4 = if wanted(4) {
        Some(idle_cpu(v.pid(0), idle_secs))
    } else {
        None
    };

    // ---- 5. Idle CPU and memory with many QPs and CQs (on node B, which
    // figure 6 left with fewer objects than A).
    let r5 = if wanted(5) {
        let n: usize = std::env::var("VHCA_BENCH_SCALE_QPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(if quick() { 1_000 } else { 10_000 });
        let pid = v.pid(1);
        std::thread::sleep(Duration::from_millis(500));
        let rss0 = rss(pid);
        let t = Instant::now();
        for _ in 0..n {
            // One CQ (16 entries) and one RC QP on it (4 WRs each way) per
            // step: the smallest rings, as an application with many idle
            // connections would have.
            let cq = b.hca.create_cq(4, 0).expect("CREATE_CQ");
            b.hca
                .create_qp(&QpInit::new(QpType::Rc, b.pd, cq).wr(4, 4))
                .expect("CREATE_QP");
        }
        let made = t.elapsed();
        std::thread::sleep(Duration::from_millis(500));
        let rss1 = rss(pid);
        let (ticks, pct) = idle_cpu(pid, idle_secs);
        Some((n, made, rss1.saturating_sub(rss0), ticks, pct))
    } else {
        None
    };

    println!("device benchmarks (two vhca processes, UDP loopback)");
    match r1 {
        Some((write_rate, Some(base))) => {
            println!(
                "1. RC WRITE 64 KiB: {:.3} GB/s; iperf3 -u -b 0 -l 4160 received {:.3} GB/s; ratio {:.2} (target >= 0.7, goal >= 1.0)",
                write_rate / 1e9,
                base / 1e9,
                write_rate / base
            );
            tsv::row("rc-write-64k", "vhca", "", "one", write_rate / 1e9, "GB/s");
            tsv::row("rc-write-64k", "iperf3-udp", "", "one", base / 1e9, "GB/s");
            tsv::row(
                "rc-write-64k",
                "vhca/iperf3",
                "",
                "ratio",
                write_rate / base,
                "x",
            );
        }
        Some((write_rate, None)) => {
            println!(
                "1. RC WRITE 64 KiB: {:.3} GB/s; iperf3 not available, no ratio",
                write_rate / 1e9
            );
            tsv::row("rc-write-64k", "vhca", "", "one", write_rate / 1e9, "GB/s");
        }
        None => {}
    }
    if let Some((p50, udp_p50, poll_p50, block_p50)) = r2 {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "2. 8-byte SEND ping-pong p50 round trip: {:.1} us; UDP ping-pong {:.1} us; ratio {:.2} (target <= 2.0)",
            us(p50),
            us(udp_p50),
            us(p50) / us(udp_p50)
        );
        tsv::row("send-8b-p50", "vhca", "", "one", us(p50), "us");
        tsv::row("send-8b-p50", "udp", "", "one", us(udp_p50), "us");
        tsv::row(
            "send-8b-p50",
            "vhca/udp",
            "",
            "ratio",
            us(p50) / us(udp_p50),
            "x",
        );
        println!(
            "   other UDP ping-pongs: two threads polling (non-blocking recv + yield) {:.1} us, ratio {:.2}; two threads blocked in recv (netperf UDP_RR style) {:.1} us, ratio {:.2}",
            us(poll_p50),
            us(p50) / us(poll_p50),
            us(block_p50),
            us(p50) / us(block_p50)
        );
    }
    if let Some((write64_rate, udp64_rate)) = r3 {
        println!(
            "3. 64-byte RDMA WRITE: {:.0} msg/s; 64-byte UDP datagrams {:.0}/s received; ratio {:.2}",
            write64_rate,
            udp64_rate,
            write64_rate / udp64_rate
        );
        tsv::row("write-64b-rate", "vhca", "", "one", write64_rate, "msg/s");
        tsv::row("write-64b-rate", "udp", "", "one", udp64_rate, "msg/s");
        tsv::row(
            "write-64b-rate",
            "vhca/udp",
            "",
            "ratio",
            write64_rate / udp64_rate,
            "x",
        );
    }
    if let Some((ticks, idle_pct)) = r4 {
        println!(
            "4. idle vhca over {idle_secs} s: {ticks} CPU ticks = {idle_pct:.2}% of a core (target < 1%)"
        );
        tsv::row("idle-cpu", "vhca", "", "one", idle_pct, "% of a core");
    }
    if let Some((n, made, bytes, ticks, pct)) = r5 {
        println!(
            "5. idle vhca with {n} QPs + {n} CQs (created in {:.1} s) over {idle_secs} s: {ticks} CPU ticks = {pct:.2}% of a core (target < 1%); private memory (RssAnon) grew {:.1} MiB = {} bytes per QP + CQ",
            made.as_secs_f64(),
            bytes as f64 / (1 << 20) as f64,
            bytes / n as u64
        );
        tsv::row("idle-cpu-many-qps", "vhca", n, "one", pct, "% of a core");
        tsv::row(
            "rss-per-qp-cq",
            "vhca",
            n,
            "one",
            (bytes / n as u64) as f64,
            "bytes",
        );
    }
    if let Some(rates) = r6 {
        let one = rates[0].1;
        let list: Vec<String> = rates
            .iter()
            .map(|(n, r, d, _)| {
                let d = d.map_or("?".into(), |d| d.to_string());
                format!(
                    "{n} QPs {:.3} GB/s ({:.2}x, {d} RcvbufErrors)",
                    r / 1e9,
                    r / one
                )
            })
            .collect();
        println!(
            "6. aggregate RC WRITE 64 KiB: {} (target: 1024 QPs >= 0.9x of one)",
            list.join(", ")
        );
        for (n, r, _, c) in &rates {
            println!("6. {n} QPs: {c}");
            tsv::row("aggregate-write-64k", "vhca", n, "one", r / 1e9, "GB/s");
            tsv::row(
                "aggregate-write-64k",
                "vhca",
                n,
                "ratio",
                r / one,
                "x of 1 QP",
            );
        }
    }
    if let Some((rate, recvs, window)) = r7 {
        println!(
            "7. RC SEND 64 KiB stream, {window} in flight, {recvs} receives reposted: {:.3} GB/s",
            rate / 1e9
        );
    }
    let _ = (qb, &b);
}

/// What one row of figure 6 cost (issue 12): CPU time of both `vhca`
/// processes and of this driver per GB moved (the sum of their threads'
/// run time, `/proc/PID/task/*/schedstat`, in ns: the host has no hardware
/// counters for `perf stat`), and the packets the two engines exchanged
/// (QUERY_COUNTERS of the port set): A's data packets, B's ACKs, A's resent
/// packets and loss probes.
struct RowCost {
    pids: [u32; 3],
    cpu_ns: [u64; 3],
    ports: [Vec<u64>; 2],
}

/// The finished [`RowCost`].
struct RowCostOut {
    /// CPU seconds per GB: A, B, the driver.
    cpu: [f64; 3],
    /// A's data packets sent, B's ACKs sent, A's resent packets and probes.
    packets: [u64; 4],
}

const PORT_NAMES: [&str; 4] = ["tx_packets", "acks_sent", "resent_packets", "loss_probes"];

fn port_counters(n: &mut Node) -> Vec<u64> {
    use vhca_tests::abi::counters::CounterSet;
    let names = CounterSet::Port.names();
    let v = n.hca.query_counters(CounterSet::Port).unwrap_or_default();
    PORT_NAMES
        .iter()
        .map(|want| {
            names
                .iter()
                .position(|x| x == want)
                .and_then(|i| v.get(i).copied())
                .unwrap_or(0)
        })
        .collect()
}

impl RowCost {
    fn start(v: &Vhca, a: &mut Node, b: &mut Node) -> RowCost {
        let pids = [v.pid(0), v.pid(1), std::process::id()];
        RowCost {
            pids,
            cpu_ns: pids.map(cpu_ns),
            ports: [port_counters(a), port_counters(b)],
        }
    }

    fn finish(self, a: &mut Node, b: &mut Node, bytes: f64) -> RowCostOut {
        let now = self.pids.map(cpu_ns);
        let gb = bytes / 1e9;
        let cpu = std::array::from_fn(|i| now[i].saturating_sub(self.cpu_ns[i]) as f64 / 1e9 / gb);
        let pa = port_counters(a);
        let pb = port_counters(b);
        let d = |now: &[u64], then: &[u64], i: usize| {
            let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
            at(now).saturating_sub(at(then))
        };
        let packets = [
            d(&pa, &self.ports[0], 0),
            d(&pb, &self.ports[1], 1),
            d(&pa, &self.ports[0], 2),
            d(&pa, &self.ports[0], 3),
        ];
        RowCostOut { cpu, packets }
    }
}

impl std::fmt::Display for RowCostOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, drv] = self.cpu;
        let [tx, acks, resent, probes] = self.packets;
        write!(
            f,
            "CPU s/GB A {a:.3} + B {b:.3} = {:.3}, driver {drv:.3}; A sent {tx} packets, B {acks} ACKs ({:.3} per packet), {resent} resent, {probes} probes",
            a + b,
            acks as f64 / tx.max(1) as f64
        )
    }
}

/// The host's Udp RcvbufErrors (`/proc/net/snmp`): datagrams dropped because
/// a socket's receive buffer was full.
fn udp_rcvbuf_errors() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let (names, values) = (udp.next()?, udp.next()?);
    let i = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(i)?.parse().ok()
}
