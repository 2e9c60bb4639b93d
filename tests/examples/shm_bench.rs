//! Shared-memory link benchmark (issue 30 item 1), each figure a ratio to a
//! baseline measured in the same run. Two real `vhca` processes on one host,
//! driven by the userspace test driver, first over UDP loopback (the fabric
//! file as before), then over the shared-memory rings (both nodes with
//! `host = "bench"`); run by `scripts/bench-shm.sh`, which builds an optimised
//! `vhca` and passes it in `VHCA_BIN`.
//!
//! 1. RC WRITE, 64 KiB messages, A -> B, 16 in flight, against a
//!    single-thread memcpy of the same bytes between two 2 MiB buffers
//!    (target over the rings >= 0.5x). `1a`: the CPU time both `vhca`
//!    processes spent per WRITE (their threads' schedstat).
//!    Printed next to it, what the link's rings allow on this host: two
//!    threads moving the same bytes as 4 KiB packets through one of its
//!    rings, one copy in and one copy out, nothing else.
//! 2. 8-byte SEND ping-pong, round-trip p50, against a ping-pong of 8 bytes
//!    through shared memory between two threads of this process, each
//!    polling (yielding between tries, as the device and the driver do)
//!    (target over the rings <= 2x). Printed next to it, this host's floor
//!    for the device's architecture: a four-party relay through shared
//!    memory (driver A -> device A -> device B -> driver B and back, four
//!    threads each polling with the same yields), so that the part of the
//!    gap that is four pollers on this host's CPUs shows apart from vhca's.
//!
//!    `2c`: what a wake-up costs here, two threads blocking on a socket
//!    pair pinned to two CPUs against both on one: a hop that finds its
//!    next thread asleep.
//!
//! `VHCA_BENCH_QUICK=1` shortens the runs; `VHCA_BENCH_VHCA_ARGS` adds
//! `vhca` arguments; `VHCA_BENCH_LINKS=shm` (or `udp`) runs one link only;
//! `VHCA_BENCH_WRITES=N` sets the WRITE count (default 12 000).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use device::fabric::{ShmPush, ShmRxRing, ShmTxRing};
use vhca_tests::fixture::{bench_pair, ping_pong_p50, transfer_rate, Transfer};
use vhca_tests::{Options, Vhca};

const MSG: usize = 64 << 10;
const SLOTS: usize = 32;

fn quick() -> bool {
    std::env::var_os("VHCA_BENCH_QUICK").is_some()
}

/// A one-byte round trip between two threads blocking on a socket pair, one
/// pinned to CPU 0 and the echoing one to CPU `echo_cpu`: what a wake-up (a
/// sleeping thread made to run) costs across CPUs or on one. The median of
/// `n`; `None` where the host has no such CPU.
fn wake_round_trip(echo_cpu: usize, n: usize) -> Option<Duration> {
    use std::io::{Read, Write};
    let (mut a, mut b) = std::os::unix::net::UnixStream::pair().ok()?;
    let echo = std::thread::spawn(move || {
        let pinned = vhca_tests::sys::pin_thread_to_cpu(echo_cpu);
        let mut c = [0u8; 1];
        while b.read_exact(&mut c).is_ok() && b.write_all(&c).is_ok() {}
        pinned
    });
    let ping = std::thread::spawn(move || {
        if !vhca_tests::sys::pin_thread_to_cpu(0) {
            return None;
        }
        let mut rtt = Vec::with_capacity(n);
        let mut c = [0u8; 1];
        for _ in 0..n {
            let t = Instant::now();
            if a.write_all(&c).is_err() || a.read_exact(&mut c).is_err() {
                return None;
            }
            rtt.push(t.elapsed());
        }
        rtt.sort();
        Some(rtt[n / 2])
    });
    let p50 = ping.join().ok().flatten();
    // The pinger's end is closed: the echo thread's read fails and it ends.
    let pinned = echo.join().unwrap_or(false);
    p50.filter(|_| pinned)
}

/// Bytes per second of a single-thread memcpy of `total` 64 KiB messages
/// between two buffers of `SLOTS` messages (the WRITE's own buffers' size).
fn memcpy_rate(total: usize) -> f64 {
    let src = vec![7u8; MSG * SLOTS];
    let mut dst = vec![0u8; MSG * SLOTS];
    let t = Instant::now();
    for i in 0..total {
        let off = (i % SLOTS) * MSG;
        dst[off..off + MSG].copy_from_slice(&src[off..off + MSG]);
        std::hint::black_box(&mut dst);
    }
    (total * MSG) as f64 / t.elapsed().as_secs_f64()
}

/// What the link's rings allow on this host, with nothing else of vhca in
/// it: two threads moving `total` 64 KiB messages as 4 KiB packets through
/// one of the shared-memory link's rings (`shm_ring.rs`, 512 slots in a
/// file under /dev/shm), the producer copying each packet from the source
/// buffer into its slot ([`ShmTxRing::push`]), the consumer from the slot
/// into the destination buffer ([`ShmRxRing::pop`]): the two copies no ring
/// avoids. Each yields while the ring is full or empty; bytes per second.
fn ring_two_copies(total: usize) -> f64 {
    const PKT: usize = 4096;
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a folder for the ring");
    let path = dir.path().join("floor.ring");
    let mut rx = ShmRxRing::create(&path).expect("ring");
    let mut tx = ShmTxRing::open(&path).expect("ring");
    let pkts = total * MSG / PKT;
    let t = Instant::now();
    let producer = std::thread::spawn(move || {
        let src = vec![7u8; MSG * SLOTS];
        for n in 0..pkts {
            let off = (n * PKT) % src.len();
            while tx.push(&src[off..off + PKT], 0) == Ok(ShmPush::Full) {
                std::thread::yield_now();
            }
        }
    });
    let mut dst = vec![0u8; MSG * SLOTS];
    let mut n = 0;
    while n < pkts {
        let off = (n * PKT) % dst.len();
        match rx.pop(&mut dst[off..off + PKT]) {
            Ok(Some(_)) => {
                n += 1;
                // Slots go back in batches, as the link releases them.
                if n % 16 == 0 {
                    rx.release();
                }
            }
            Ok(None) => {
                rx.release();
                std::thread::yield_now();
            }
            Err(e) => panic!("ring: {e:?}"),
        }
    }
    std::hint::black_box(&dst);
    let rate = (total * MSG) as f64 / t.elapsed().as_secs_f64();
    producer.join().unwrap();
    rate
}

/// `n` round trips from this thread: sequence number i stored in `out`, then
/// polled for in `back` (yielding between looks); the p50.
fn round_trips(n: usize, out: &AtomicU64, back: &AtomicU64) -> Duration {
    let mut rtt = Vec::with_capacity(n);
    for i in 1..=n as u64 {
        let t = Instant::now();
        out.store(i, Ordering::Release);
        while back.load(Ordering::Acquire) != i {
            std::thread::yield_now();
        }
        rtt.push(t.elapsed());
    }
    rtt.sort();
    rtt[n / 2]
}

/// 8-byte ping-pong through shared memory between two threads: each waits
/// for the other's sequence number in a cache line of its own, yielding
/// between looks; p50 round trip.
fn shm_pingpong_threads(n: usize) -> Duration {
    #[repr(align(64))]
    struct Line(AtomicU64);
    let lines = Arc::new([Line(AtomicU64::new(0)), Line(AtomicU64::new(0))]);
    let l = lines.clone();
    let echo = std::thread::spawn(move || {
        for i in 1..=n as u64 {
            while l[0].0.load(Ordering::Acquire) != i {
                std::thread::yield_now();
            }
            l[1].0.store(i, Ordering::Release);
        }
    });
    let p50 = round_trips(n, &lines[0].0, &lines[1].0);
    echo.join().unwrap();
    p50
}

/// The ping-pong's architecture with nothing else in it: four threads (driver
/// A, device A, device B, driver B) relaying an 8-byte sequence number
/// through shared memory, each polling its inputs and yielding between
/// looks, six hops a round trip (A's driver -> A's device -> B's device ->
/// B's driver -> B's device -> A's device -> A's driver); p50 round trip.
fn shm_relay_four_threads(n: usize) -> Duration {
    #[repr(align(64))]
    struct Line(AtomicU64);
    // Line k carries hop k's sequence number.
    let lines: Arc<Vec<Line>> = Arc::new((0..6).map(|_| Line(AtomicU64::new(0))).collect());
    // Each party: the (input line, output line) pairs it forwards.
    let party = |hops: Vec<(usize, usize)>| {
        let l = lines.clone();
        std::thread::spawn(move || {
            let mut done = vec![0u64; hops.len()];
            while done.iter().any(|&d| d < n as u64) {
                let mut moved = false;
                for (k, &(from, to)) in hops.iter().enumerate() {
                    let v = l[from].0.load(Ordering::Acquire);
                    if v > done[k] {
                        done[k] = v;
                        l[to].0.store(v, Ordering::Release);
                        moved = true;
                    }
                }
                if !moved {
                    std::thread::yield_now();
                }
            }
        })
    };
    // Device A: driver A's post (line 0) out to B (line 1), B's packet
    // (line 4) up to driver A (line 5); device B: A's packet (line 1) up to
    // driver B (line 2), driver B's post (line 3) out to A (line 4); driver
    // B answers line 2 on line 3.
    let parties = [
        party(vec![(0, 1), (4, 5)]),
        party(vec![(1, 2), (3, 4)]),
        party(vec![(2, 3)]),
    ];
    let p50 = round_trips(n, &lines[0].0, &lines[5].0);
    for p in parties {
        p.join().unwrap();
    }
    p50
}

/// What [`device_figures`] measures, in this order.
type Figures = (f64, (Duration, Duration), Duration, f64, f64, String);

/// The two figures between two `vhca` processes: RC WRITE 64 KiB bytes per
/// second and the CPU time both processes spent per WRITE, the 8-byte SEND
/// ping-pong's p50, the WAKEs the driver wrote a round trip, the CPU both
/// processes use idle afterwards (percent of one CPU), and node 0's stderr
/// (its counter lines); with `shm`, over the rings.
fn device_figures(shm: bool, writes: usize, pings: usize) -> Figures {
    let mut opts = Options::nodes(2);
    if let Ok(extra) = std::env::var("VHCA_BENCH_VHCA_ARGS") {
        opts.extra_args = extra.split_whitespace().map(String::from).collect();
    }
    if shm {
        for i in 0..2 {
            opts.node_toml.insert(i, "host = \"bench\"".into());
        }
    }
    let mut v = Vhca::spawn(opts);
    let (mut a, mut b, qa, qb, src, dst) = bench_pair(&v, MSG, SLOTS);
    let cpu = || vhca_tests::process::cpu_ns(v.pid(0)) + vhca_tests::process::cpu_ns(v.pid(1));
    let cpu_before = cpu();
    let me = std::process::id();
    let driver_before = vhca_tests::process::cpu_ns(me);
    let write_rate = transfer_rate(
        &mut a,
        &[qa],
        Transfer::Write,
        &src,
        &dst,
        MSG,
        SLOTS,
        writes,
        16,
    );
    // CPU both processes spent per WRITE: what the link and the engine cost,
    // less at the mercy of the scheduler than the rate.
    let write_cpu = Duration::from_nanos((cpu() - cpu_before) / writes as u64);
    // The driver's (this process's) share of the same two CPUs: it polls
    // the CQ as a guest's verbs program would.
    let driver_cpu =
        Duration::from_nanos((vhca_tests::process::cpu_ns(me) - driver_before) / writes as u64);
    let wakes = a.hca.wakes + b.hca.wakes;
    let p50 = ping_pong_p50(&mut a, qa, &mut b, qb, pings);
    // The WAKEs the driver wrote (the data path was asleep) per round trip:
    // each of the four posts a round trip (two RECVs, two SENDs) may need
    // one.
    let wakes = (a.hca.wakes + b.hca.wakes - wakes) as f64 / pings as f64;
    // Idle: after the busy-poll window (and a contended spell) is over,
    // neither process may spin; CPU time over a second, in percent of one
    // CPU, both nodes.
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu();
    std::thread::sleep(Duration::from_secs(1));
    let idle_cpu = (cpu() - before) as f64 / 1e7;
    // What A's link did (its counters at exit): the rings' line shows the
    // traffic went through them.
    drop((a, b));
    // Both stopped, not killed: a profiler wrapped around `vhca` (a
    // `VHCA_BIN` script) writes its output at exit.
    v.stop(0, Duration::from_secs(5));
    v.stop(1, Duration::from_secs(5));
    let report = v.stderr(0) + &v.stderr(1);
    (
        write_rate,
        (write_cpu, driver_cpu),
        p50,
        wakes,
        idle_cpu,
        report,
    )
}

fn main() {
    let writes = std::env::var("VHCA_BENCH_WRITES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick() { 2_000 } else { 12_000 });
    let pings = if quick() { 500 } else { 3_000 };
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    // `VHCA_BENCH_LINKS=shm` (or `udp`): one link only (for a profile).
    let only = std::env::var("VHCA_BENCH_LINKS").unwrap_or_default();
    for (name, shm) in [("udp loopback", false), ("shared memory", true)] {
        if !only.is_empty() && only != if shm { "shm" } else { "udp" } {
            continue;
        }
        let (write, (write_cpu, driver_cpu), p50, wakes, idle_cpu, report) =
            device_figures(shm, writes, pings);
        let copy = memcpy_rate(writes).max(memcpy_rate(writes));
        let ring = ring_two_copies(writes).max(ring_two_copies(writes));
        let pp = shm_pingpong_threads(pings).min(shm_pingpong_threads(pings));
        let relay = shm_relay_four_threads(pings).min(shm_relay_four_threads(pings));
        println!(
            "{name}: 1. RC WRITE 64 KiB {:.3} GB/s; memcpy {:.3} GB/s; ratio {:.3} (target over shm >= 0.5)",
            write / 1e9,
            copy / 1e9,
            write / copy
        );
        println!(
            "{name}: 1a. CPU time both vhca spent per 64 KiB WRITE {:.1} us ({:.2} ns a byte); the driver polling its CQ {:.1} us; the WRITE's wall time {:.1} us",
            us(write_cpu),
            write_cpu.as_nanos() as f64 / MSG as f64,
            us(driver_cpu),
            MSG as f64 / write * 1e6
        );
        println!(
            "{name}: 1b. the same WRITE against the link's ring alone (two threads, 4 KiB packets through its 512 slots, a copy in and a copy out, nothing else) {:.3} GB/s: ratio {:.3} (the ring alone is {:.3}x memcpy)",
            ring / 1e9,
            write / ring,
            ring / copy
        );
        println!(
            "{name}: 2. 8-byte SEND ping-pong p50 {:.1} us; shared-memory ping-pong between two threads {:.2} us; ratio {:.1} (target over shm <= 2)",
            us(p50),
            us(pp),
            us(p50) / us(pp)
        );
        println!(
            "{name}: 2b. the same p50 against a four-party relay through shared memory (four polling threads, six hops) {:.2} us: ratio {:.1} (the relay is {:.1}x the two-thread ping-pong)",
            us(relay),
            us(p50) / us(relay),
            us(relay) / us(pp)
        );
        println!(
            "{name}: the driver wrote {wakes:.2} WAKEs a round trip (a data path asleep); idle afterwards, both vhca used {idle_cpu:.2} % of a CPU"
        );
        // 2c: why the target needs every party awake on this host.
        match (wake_round_trip(1, pings), wake_round_trip(0, pings)) {
            (Some(across), Some(one)) => println!(
                "{name}: 2c. a wake-up round trip (two threads blocking on a socket pair) across CPUs 0/1 p50 {:.1} us, on CPU 0 alone {:.1} us: a hop to a sleeping thread on the other CPU costs {:.1}x the whole two-thread ping-pong",
                us(across),
                us(one),
                us(across) / 2.0 / us(pp)
            ),
            _ => println!("{name}: 2c. SKIP: this host has no second CPU to pin to"),
        }
        // Each vhca's last counters line (both processes' reports).
        let mut last = std::collections::BTreeMap::new();
        for l in report.lines() {
            if let Some(at) = l.find("shm n") {
                let line = &l[at..];
                last.insert(line.split(':').next().unwrap_or(line), line);
            }
        }
        for l in last.values() {
            println!("{name}: link: {l}");
        }
    }
}
