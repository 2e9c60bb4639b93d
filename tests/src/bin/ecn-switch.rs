//! `ecn-switch`: an Ethernet switch between the kernel sides of TAP devices
//! whose egress ports are rate-limited, RED/ECN-marking queues: the
//! data-centre switch of issue 31's RoCE incast where the kernel has no
//! marking qdisc (`images/roce-pair.sh --bottleneck`). The logic, and what
//! RED does, is in `vhca_tests::ecn_switch`.
//!
//! ```text
//! ecn-switch --port ta --port tb --rate 100M --min 8K --max 32K --max-p 0.2 \
//!            --cap 128K --stats FILE --ready FILE
//! ```
//!
//! Every port's queue has the same profile and rate (a switch of equal
//! ports). The devices must exist and be up, and be on no bridge (the
//! switch replaces the bridge). At SIGTERM/SIGINT it prints one line per
//! egress port (and writes them to `--stats`, which it also rewrites every
//! second):
//!
//! ```text
//! ecn-switch port=ta forwarded=F bytes=B marked=M early_drops=E tail_drops=T \
//!     q_p50=X q_p99=Y q_max=Z rx_sock_drops=S tx_errors=X filtered=N
//! ```
//!
//! (`port=ta`: the queue of frames going out to ta; q_*: bytes queued as
//! seen by arriving frames; rx_sock_drops: frames the kernel dropped from
//! the port's socket before the switch read them, so that no loss goes
//! uncounted.)

use clap::Parser;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vhca_tests::ecn_switch::afpacket::{self, PacketSock, VNET_HDR_LEN};
use vhca_tests::ecn_switch::{Egress, MacTable, Out, Red, Rng};

/// Frames read from one port per round: a bound on a round's work.
const RX_BATCH: usize = 64;
/// Learnt stations.
const MAC_LIMIT: usize = 1024;
/// The longest frame read: a 64 KiB GSO frame and its virtio-net header.
const RX_BUF: usize = 65536 + 256;

#[derive(Parser, Debug)]
#[command(
    name = "ecn-switch",
    about = "A rate-limited RED/ECN-marking Ethernet switch between TAP devices"
)]
struct Args {
    /// A port: a network device (the kernel side of a TAP). Twice or more.
    #[arg(long = "port", required = true)]
    ports: Vec<String>,
    /// Egress rate of every port, bits/s (k, M, G suffixes); 0 = no limit.
    #[arg(long, value_parser = parse_rate)]
    rate: u64,
    /// RED's lower threshold, bytes (K, M suffixes: 1024s).
    #[arg(long = "min", default_value = "8K", value_parser = parse_size)]
    min_th: usize,
    /// RED's upper threshold, bytes: every frame from here is hit.
    #[arg(long = "max", default_value = "32K", value_parser = parse_size)]
    max_th: usize,
    /// RED's probability at the upper threshold.
    #[arg(long = "max-p", default_value_t = 0.2)]
    max_p: f64,
    /// Buffer per port, bytes: tail drop past it.
    #[arg(long, default_value = "128K", value_parser = parse_size)]
    cap: usize,
    /// Token bucket depth, bytes (default: 500 us at the rate, at least two
    /// 1514-byte frames).
    #[arg(long, value_parser = parse_size)]
    burst: Option<usize>,
    /// Counters file, rewritten every second and at exit.
    #[arg(long)]
    stats: Option<PathBuf>,
    /// A time series: every second one line per port appended, the second's
    /// forwarded bytes, marks and drops and the bytes queued at its end.
    #[arg(long)]
    series: Option<PathBuf>,
    /// File created once every port's socket is bound.
    #[arg(long)]
    ready: Option<PathBuf>,
    /// Seed of RED's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Frames without the virtio-net header (a GSO frame from a TAP owner
    /// then cannot be sent on: counted in tx_errors).
    #[arg(long)]
    no_vnet_hdr: bool,
}

fn split_suffix(s: &str) -> (&str, char) {
    match s.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => (&s[..s.len() - 1], c.to_ascii_uppercase()),
        _ => (s, ' '),
    }
}

fn parse_rate(s: &str) -> Result<u64, String> {
    let (n, suf) = split_suffix(s);
    let m: u64 = match suf {
        ' ' => 1,
        'K' => 1_000,
        'M' => 1_000_000,
        'G' => 1_000_000_000,
        _ => return Err(format!("{s}: bits/s with a k, M or G suffix")),
    };
    let v: f64 = n.parse().map_err(|_| format!("{s}: not a rate"))?;
    if !(0.0..=1e12).contains(&v) {
        return Err(format!("{s}: out of range"));
    }
    Ok((v * m as f64) as u64)
}

/// A byte count as `vhca` reads one (`device::units::parse_size`: `32K`,
/// `1M`), at most 1 GiB.
fn parse_size(s: &str) -> Result<usize, String> {
    let v = device::units::parse_size(s)?;
    usize::try_from(v)
        .ok()
        .filter(|&b| b <= 1 << 30)
        .ok_or_else(|| format!("{s}: too large"))
}

#[derive(Default, Clone)]
struct PortExtra {
    rx_sock_drops: u64,
    rx_truncated: u64,
    tx_errors: u64,
    filtered: u64,
}

fn report(names: &[String], eg: &[Egress], ex: &[PortExtra]) -> String {
    let mut s = String::new();
    for ((n, e), x) in names.iter().zip(eg).zip(ex) {
        let st = &e.stats;
        s += &format!(
            "ecn-switch port={n} forwarded={} bytes={} marked={} early_drops={} tail_drops={} \
             q_p50={} q_p99={} q_max={} rx_sock_drops={} rx_truncated={} tx_errors={} filtered={}\n",
            st.forwarded,
            st.bytes,
            st.marked,
            st.early_drops,
            st.tail_drops,
            e.occupancy.percentile(0.5),
            e.occupancy.percentile(0.99),
            e.occupancy.max,
            x.rx_sock_drops,
            x.rx_truncated,
            x.tx_errors,
            x.filtered,
        );
    }
    s
}

fn write_stats(path: &Option<PathBuf>, text: &str) {
    if let Some(p) = path {
        let tmp = p.with_extension("tmp");
        if std::fs::write(&tmp, text)
            .and_then(|_| std::fs::rename(&tmp, p))
            .is_err()
        {
            eprintln!("ecn-switch: cannot write {}", p.display());
        }
    }
}

fn main() {
    let a = Args::parse();
    if a.ports.len() < 2 {
        eprintln!("ecn-switch: needs two ports or more");
        std::process::exit(2);
    }
    let red = match Red::new(a.min_th, a.max_th, a.max_p, a.cap) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ecn-switch: {e}");
            std::process::exit(2);
        }
    };
    let burst = a
        .burst
        .unwrap_or_else(|| ((a.rate / 8 / 2000) as usize).max(2 * 1514));
    let prefix = if a.no_vnet_hdr { 0 } else { VNET_HDR_LEN };
    let mut socks = Vec::new();
    for p in &a.ports {
        match PacketSock::open(p, !a.no_vnet_hdr, 8 << 20) {
            Ok(s) => socks.push(s),
            Err(e) => {
                eprintln!("ecn-switch: port {p}: {e}");
                std::process::exit(1);
            }
        }
    }
    afpacket::install_stop_handler();
    let mut eg: Vec<Egress> = a
        .ports
        .iter()
        .map(|_| Egress::new(red, a.rate, burst, prefix))
        .collect();
    let mut ex = vec![PortExtra::default(); a.ports.len()];
    let mut macs = MacTable::new(MAC_LIMIT);
    let mut rng = Rng::new(a.seed);
    let fds: Vec<_> = socks.iter().map(|s| s.raw()).collect();
    let mut ready = vec![false; fds.len()];
    let mut buf = vec![0u8; RX_BUF];
    eprintln!(
        "ecn-switch: ports {} at {} bit/s (bucket {burst} B), RED {}..{} B max_p {} cap {} B{}",
        a.ports.join(","),
        a.rate,
        red.min_th,
        red.max_th,
        red.max_p,
        red.cap,
        if prefix > 0 {
            ", virtio-net headers"
        } else {
            ""
        }
    );
    if let Some(r) = &a.ready {
        if let Err(e) = std::fs::write(r, "ready\n") {
            eprintln!("ecn-switch: {}: {e}", r.display());
            std::process::exit(1);
        }
    }
    let t0 = Instant::now();
    let mut next_stats = Duration::from_secs(1);
    let mut series = a.series.as_ref().map(|p| {
        std::fs::File::create(p).unwrap_or_else(|e| {
            eprintln!("ecn-switch: {}: {e}", p.display());
            std::process::exit(1);
        })
    });
    let mut last: Vec<_> = eg.iter().map(|e| e.stats.clone()).collect();
    while !afpacket::stop_requested() {
        let now = t0.elapsed();
        let ns = now.as_nanos() as u64;
        for (i, e) in eg.iter_mut().enumerate() {
            // Bounded: the bucket, or the queue (at most `cap` bytes).
            while let Some(f) = e.pop(ns) {
                if socks[i].send(&f).is_err() {
                    ex[i].tx_errors += 1;
                }
            }
        }
        if now >= next_stats {
            for (s, x) in socks.iter().zip(ex.iter_mut()) {
                x.rx_sock_drops += s.take_drops();
            }
            write_stats(&a.stats, &report(&a.ports, &eg, &ex));
            if let Some(f) = series.as_mut() {
                let mut text = String::new();
                for ((n, e), l) in a.ports.iter().zip(&eg).zip(last.iter_mut()) {
                    let st = &e.stats;
                    text += &format!(
                        "t={} port={n} bytes={} marked={} drops={} queued={}\n",
                        now.as_secs(),
                        st.bytes - l.bytes,
                        st.marked - l.marked,
                        st.early_drops + st.tail_drops - l.early_drops - l.tail_drops,
                        e.queued()
                    );
                    *l = st.clone();
                }
                use std::io::Write;
                let _ = f.write_all(text.as_bytes());
            }
            next_stats = now + Duration::from_secs(1);
        }
        let wait_ns = eg
            .iter()
            .filter_map(|e| e.wait_ns(ns))
            .min()
            .unwrap_or(100_000_000)
            .min(100_000_000);
        match afpacket::poll_readable(&fds, Duration::from_nanos(wait_ns), &mut ready) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                eprintln!("ecn-switch: poll: {e}");
                break;
            }
        }
        for i in 0..socks.len() {
            if !ready[i] {
                continue;
            }
            for _ in 0..RX_BATCH {
                let n = match socks[i].recv(&mut buf) {
                    Ok(Some(n)) => n,
                    Ok(None) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                        ex[i].rx_truncated += 1;
                        continue;
                    }
                    Err(e) => {
                        eprintln!("ecn-switch: {}: {e}", socks[i].name);
                        break;
                    }
                };
                if n <= prefix {
                    ex[i].rx_truncated += 1;
                    continue;
                }
                let frame = &buf[..n];
                match macs.route(&frame[prefix..], i) {
                    Out::Port(o) => {
                        eg[o].offer(frame.to_vec(), rng.next_f64());
                    }
                    Out::Flood => {
                        for (o, e) in eg.iter_mut().enumerate() {
                            if o != i {
                                e.offer(frame.to_vec(), rng.next_f64());
                            }
                        }
                    }
                    Out::Filter => ex[i].filtered += 1,
                }
            }
        }
    }
    for (s, x) in socks.iter().zip(ex.iter_mut()) {
        x.rx_sock_drops += s.take_drops();
    }
    let text = report(&a.ports, &eg, &ex);
    write_stats(&a.stats, &text);
    print!("{text}");
}
