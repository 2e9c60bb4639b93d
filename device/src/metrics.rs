//! The Prometheus endpoint (`--metrics-listen ADDR`, issue 28): `GET
//! /metrics` answers with the device's counters as labelled metrics in the
//! Prometheus text exposition format (0.0.4), encoded by `prometheus-client`
//! from the same [`Snapshot`] the text and JSON reports show
//! (`counters_out`), so the three cannot disagree on a name or a value.
//!
//! The metrics, every counter with its zeros (counters end in `_total`):
//! - `vhca_port_packets_total{dir="rx"|"tx"}` and
//!   `vhca_port_{link_errors,link_down,link_up,tx_link_full}_total`: the
//!   port's own counters;
//! - `vhca_engine_<name>_total`: the engine's port set (`port_set` in the
//!   JSON), microseconds as `_seconds_total`;
//! - `vhca_drops_total{layer="wire"|"transport",reason}`: the wire checks'
//!   and the transport's drops by reason (PV-10);
//! - `vhca_naks_sent_total{reason}` (RL-12);
//! - `vhca_rd_<name>_total` (AD-11), `vhca_device_<name>_total` (the
//!   device set; `vhca_device_mem_held_bytes` is a gauge),
//!   `vhca_cmdq_<name>` (counters and, for the largest and longest, gauges),
//!   `vhca_mgmt_<name>_total` (the SMA and BMA, on a native IB port);
//! - `vhca_link_value{stage,name}`: the link stages' report lines (`udp`,
//!   `auth`, `flow`, `tap`, `vhost_user_net`) as gauges, because those lines
//!   mix counters with levels (credits, queue depths);
//! - `vhca_metrics_requests_total{result}`: this endpoint's own requests.
//!
//! `vhca switch --metrics-listen` serves [`SwitchMetrics`] the same way, from
//! the copy its one thread leaves at most every [`SNAPSHOT_EVERY`].
//!
//! The HTTP side is a few lines on std's `TcpListener` rather than an HTTP
//! crate: one request, one answer, the connection closed, is all a scraper
//! needs, and a server of our own makes the bounds explicit. One thread
//! serves one connection at a time (the others wait in the kernel's listen
//! backlog); a connection has [`CONNECTION_TIME`] in all to send a request
//! head of at most [`MAX_REQUEST`] bytes and take the answer, or it is
//! closed. So a client that connects and sends nothing, trickles, sends an
//! endless request line or never reads costs one bounded buffer and delays
//! the next scrape by at most that time; it never touches the data path,
//! whose lock is taken only to copy the counters (`Core::counters_snapshot`,
//! as the signal thread's exit report does), at most once per
//! [`SNAPSHOT_EVERY`] however fast the scrapes come, never while talking to a
//! client.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::counters_out::{Snapshot, Stage};
use crate::switch_proc::SwitchSnapshot;

/// The longest request head (request line and headers) read; a longer one
/// is answered 431 and closed.
pub const MAX_REQUEST: usize = 8 * 1024;

/// The most of an oversized request read (and thrown away) after its 431.
const DRAIN_MAX: usize = 64 * 1024;

/// How long one connection may take in all, from accept to the last byte
/// of the answer.
pub const CONNECTION_TIME: Duration = Duration::from_secs(2);

/// The answer's content type: the Prometheus text format.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What became of the requests (`vhca_metrics_requests_total{result}`).
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// `GET` or `HEAD /metrics` requests, answered.
    pub ok: AtomicU64,
    /// Another path (404) or method (405), or a request line that is not HTTP (400).
    pub refused: AtomicU64,
    /// A request head over [`MAX_REQUEST`] (431).
    pub too_large: AtomicU64,
    /// Connections closed at [`CONNECTION_TIME`], or by the client, before
    /// a whole request head.
    pub incomplete: AtomicU64,
    /// Accept, read or write errors.
    pub io_errors: AtomicU64,
}

impl ServerCounters {
    fn pairs(&self) -> [(&'static str, u64); 5] {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("ok", l(&self.ok)),
            ("refused", l(&self.refused)),
            ("too_large", l(&self.too_large)),
            ("incomplete", l(&self.incomplete)),
            ("io_error", l(&self.io_errors)),
        ]
    }
}

/// The bounds of one connection (the constants; shorter in tests).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request: usize,
    pub connection_time: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_request: MAX_REQUEST,
            connection_time: CONNECTION_TIME,
        }
    }
}

/// Where the metrics of a scrape come from: called once per `GET /metrics`.
pub type Collect = dyn Fn() -> Box<dyn Collector> + Send;

/// Binds `addr` and serves `/metrics` from a thread of its own; returns the
/// address bound (port 0 picks a free one). The thread lives as long as the
/// process.
pub fn listen(
    addr: SocketAddr,
    limits: Limits,
    collect: Box<Collect>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    std::thread::Builder::new()
        .name("vhca-metrics".into())
        .spawn(move || serve(listener, limits, collect, Arc::default()))?;
    Ok(local)
}

/// [`listen`] for a device: `snapshot` copies its counters (under its lock)
/// once per scrape; the address is logged, for a port 0 bound.
pub fn listen_device(
    addr: SocketAddr,
    snapshot: impl Fn() -> Snapshot + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let snapshot = at_most_every(SNAPSHOT_EVERY, snapshot);
    let bound = listen(
        addr,
        Limits::default(),
        Box::new(move || Box::new(DeviceMetrics(snapshot()))),
    )
    .map_err(|e| std::io::Error::new(e.kind(), format!("--metrics-listen {addr}: {e}")))?;
    log::info!("vhca: metrics on http://{bound}/metrics");
    Ok(bound)
}

/// The shortest time between two copies of the device's counters: scrapes
/// closer together get the last copy, so that however fast a client asks,
/// the lock is taken at most ten times a second (a copy reads the link's
/// report, `/proc/net/udp` included).
pub const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);

/// `snapshot`, called at most once per `every`: in between, its last
/// result again.
fn at_most_every(every: Duration, snapshot: impl Fn() -> Snapshot) -> impl Fn() -> Snapshot {
    let last: std::sync::Mutex<Option<(Instant, Snapshot)>> = std::sync::Mutex::new(None);
    move || {
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        match &*last {
            Some((t, s)) if t.elapsed() < every => s.clone(),
            _ => {
                let s = snapshot();
                *last = Some((Instant::now(), s.clone()));
                s
            }
        }
    }
}

/// Answers connections one at a time, forever.
pub fn serve(
    listener: TcpListener,
    limits: Limits,
    collect: Box<Collect>,
    stats: Arc<ServerCounters>,
) {
    let mut buf = vec![0u8; limits.max_request];
    for conn in listener.incoming() {
        match conn {
            Ok(s) => handle(s, &limits, &mut buf, &*collect, &stats),
            Err(e) => {
                stats.io_errors.fetch_add(1, Ordering::Relaxed);
                log::debug!("metrics: accept: {e}");
                // Out of file descriptors or the like: no busy loop.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// The end of the request head in `b` (past its empty line), if it is there.
fn head_end(b: &[u8]) -> Option<usize> {
    b.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
        .or_else(|| b.windows(2).position(|w| w == b"\n\n").map(|i| i + 2))
}

/// One connection: read the head within the limits, answer, close.
fn handle(
    mut s: TcpStream,
    limits: &Limits,
    buf: &mut [u8],
    collect: &Collect,
    stats: &ServerCounters,
) {
    let deadline = Instant::now() + limits.connection_time;
    let left = || deadline.saturating_duration_since(Instant::now());
    let mut len = 0;
    let end = loop {
        if let Some(end) = head_end(&buf[..len]) {
            break end;
        }
        if len == buf.len() {
            stats.too_large.fetch_add(1, Ordering::Relaxed);
            answer(
                &mut s,
                left(),
                "431 Request Header Fields Too Large",
                "",
                b"",
            );
            // Closing with unread bytes resets the connection, which may
            // discard the answer before the client reads it: read some of
            // the rest first, within the same time and a bound.
            let mut skipped = 0;
            while skipped < DRAIN_MAX {
                let t = left();
                if t.is_zero() || s.set_read_timeout(Some(t)).is_err() {
                    break;
                }
                match s.read(buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => skipped += n,
                }
            }
            return;
        }
        let t = left();
        // A zero read timeout means none at all: the deadline has passed.
        if t.is_zero() || s.set_read_timeout(Some(t)).is_err() {
            stats.incomplete.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match s.read(&mut buf[len..]) {
            Ok(0) => {
                stats.incomplete.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(n) => len += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                stats.incomplete.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(_) => {
                stats.io_errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut words = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target, version) = (words.next(), words.next(), words.next());
    let path = target.map(|t| t.split('?').next().unwrap_or(t));
    // Counted before the answer is written: the result is decided, and the
    // exposition counts its own request.
    let refusal = match (method, path, version) {
        (Some(m), Some(p), Some(v)) if v.starts_with("HTTP/1.") => {
            if m != "GET" && m != "HEAD" {
                Some(("405 Method Not Allowed", "Allow: GET, HEAD\r\n"))
            } else if p != "/metrics" {
                Some(("404 Not Found", ""))
            } else {
                None
            }
        }
        _ => Some(("400 Bad Request", "")),
    };
    let done = match refusal {
        Some((status, headers)) => {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            answer(&mut s, left(), status, headers, b"")
        }
        None => {
            stats.ok.fetch_add(1, Ordering::Relaxed);
            let body = encode(collect(), stats);
            let body = if method == Some("HEAD") {
                ""
            } else {
                body.as_str()
            };
            let ct = format!("Content-Type: {CONTENT_TYPE}\r\n");
            answer(&mut s, left(), "200 OK", &ct, body.as_bytes())
        }
    };
    if !done {
        stats.io_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Writes an answer within `within` and closes; false if it could not.
fn answer(s: &mut TcpStream, within: Duration, status: &str, headers: &str, body: &[u8]) -> bool {
    if within.is_zero() || s.set_write_timeout(Some(within)).is_err() {
        return false;
    }
    let head = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let done = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    let _ = s.shutdown(std::net::Shutdown::Write);
    done.is_ok()
}

/// The exposition of `metrics` and the endpoint's own counters.
pub fn encode(metrics: Box<dyn Collector>, stats: &ServerCounters) -> String {
    let mut r = Registry::default();
    r.register_collector(metrics);
    r.register_collector(Box::new(Requests(stats.pairs())));
    let mut out = String::with_capacity(32 * 1024);
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, &r) {
        // Writing to a String does not fail; say so if it ever does.
        log::warn!("metrics: encoding failed: {e}");
    }
    out
}

#[derive(Debug)]
struct Requests([(&'static str, u64); 5]);

impl Collector for Requests {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        counters(
            &mut enc,
            "vhca_metrics_requests",
            "Requests to this endpoint by what became of them.",
            self.0.iter().map(|&(r, v)| ([("result", r)], v)),
        )
    }
}

/// A family of counters, one per label set.
fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, u64)>,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One counter or gauge without labels. `_us` names become `_seconds` (the
/// base unit Prometheus asks for).
fn one(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    gauge: bool,
    v: u64,
) -> Result<(), std::fmt::Error> {
    let (name, secs) = match name.strip_suffix("_us") {
        Some(stem) => (format!("{stem}_seconds"), Some(v as f64 / 1e6)),
        None => (name.to_string(), None),
    };
    let ty = if gauge {
        MetricType::Gauge
    } else {
        MetricType::Counter
    };
    let m = enc.encode_descriptor(&name, help, None, ty)?;
    match (gauge, secs) {
        (true, Some(s)) => ConstGauge::new(s).encode(m),
        (true, None) => ConstGauge::new(v).encode(m),
        (false, Some(s)) => ConstCounter::new(s).encode(m),
        (false, None) => ConstCounter::new(v).encode(m),
    }
}

/// The counters of `cmdq` and `device` that are levels, not counts.
const GAUGES: [&str; 6] = [
    "mem_held_bytes",
    "max_per_write",
    "longest_command_us",
    "longest_command_opcode",
    "longest_command_cpu_us",
    "longest_command_cpu_opcode",
];

/// The device's counters at one scrape.
#[derive(Debug)]
pub struct DeviceMetrics(pub Snapshot);

impl Collector for DeviceMetrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = &self.0;
        let p = &s.port;
        counters(
            &mut enc,
            "vhca_port_packets",
            "Packets between the port's link and its engine, by direction.",
            [("rx", p.rx_packets), ("tx", p.tx_packets)]
                .into_iter()
                .map(|(d, v)| ([("dir", d)], v)),
        )?;
        for (name, v, help) in [
            ("link_errors", p.link_errors, "Link calls that failed."),
            (
                "link_down",
                p.link_down,
                "Times the link went down (AE-01).",
            ),
            ("link_up", p.link_up, "Times the link came back up."),
            (
                "tx_link_full",
                p.tx_link_full,
                "Rounds whose sends stopped because the link had no room.",
            ),
        ] {
            one(&mut enc, &format!("vhca_port_{name}"), help, false, v)?;
        }
        let sets = s.sets();
        let set = |key: &str| sets.0.iter().find(|(k, _)| k == key).map(|(_, n)| &n.0);
        let drops = [("wire", "wire_drop"), ("transport", "rx_drop")]
            .into_iter()
            .flat_map(|(layer, key)| {
                set(key)
                    .into_iter()
                    .flatten()
                    .map(move |(r, v)| ([("layer", layer), ("reason", r.as_str())], *v))
            });
        counters(
            &mut enc,
            "vhca_drops",
            "Packets dropped, by layer (wire checks, transport) and reason (PV-10).",
            drops,
        )?;
        counters(
            &mut enc,
            "vhca_naks_sent",
            "NAKs sent, by reason (RL-12).",
            set("nak_sent")
                .into_iter()
                .flatten()
                .map(|(r, v)| ([("reason", r.as_str())], *v)),
        )?;
        for (key, prefix, help) in [
            (
                "port_set",
                "vhca_engine",
                "The engine's counter (QUERY_COUNTERS port set).",
            ),
            ("rd", "vhca_rd", "Reliable Datagram counter (AD-11)."),
            (
                "device",
                "vhca_device",
                "The device's data-path counter (QUERY_COUNTERS device set).",
            ),
        ] {
            for (name, v) in set(key).into_iter().flatten() {
                let gauge = GAUGES.contains(&name.as_str());
                one(&mut enc, &format!("{prefix}_{name}"), help, gauge, *v)?;
            }
        }
        for (name, v) in &s.cmdq {
            let help = "How the command queue's work was split.";
            one(
                &mut enc,
                &format!("vhca_cmdq_{name}"),
                help,
                GAUGES.contains(name),
                *v,
            )?;
        }
        for (name, v) in &s.mgmt {
            let help = "The port's management plane (SMA, BMA) counter.";
            one(&mut enc, &format!("vhca_mgmt_{name}"), help, false, *v)?;
        }
        let stages = s.stages();
        let mut m = enc.encode_descriptor(
            "vhca_link_value",
            "The link stages' report lines by stage and name (counters and levels).",
            None,
            MetricType::Gauge,
        )?;
        for (stage, st) in &stages.0 {
            let Stage::Counters(named) = st else { continue };
            for (name, v) in &named.0 {
                let labels = [("stage", stage.as_str()), ("name", name.as_str())];
                ConstGauge::new(*v).encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Where `vhca switch`'s one thread puts a copy of its counters for the
/// endpoint (`None` until the first).
pub type SwitchSlot = Arc<std::sync::Mutex<Option<SwitchSnapshot>>>;

/// [`listen`] for `vhca switch`: the endpoint serves the last copy the
/// switch put in the slot returned; the address is logged.
pub fn listen_switch(addr: SocketAddr) -> std::io::Result<SwitchSlot> {
    let slot = SwitchSlot::default();
    let s = Arc::clone(&slot);
    let bound = listen(
        addr,
        Limits::default(),
        Box::new(move || {
            let snap = s.lock().unwrap_or_else(|p| p.into_inner()).clone();
            Box::new(SwitchMetrics(snap))
        }),
    )
    .map_err(|e| std::io::Error::new(e.kind(), format!("--metrics-listen {addr}: {e}")))?;
    log::info!("vhca switch: metrics on http://{bound}/metrics");
    Ok(slot)
}

/// A switch's counters at one scrape (none before its loop first ran):
/// per port `vhca_switch_port_<counter>_total{port}` (IBA 16.1.3.5
/// PortCounters, `spoofed_slid` and `fecn_marked`), `vhca_switch_port_state{port,state}`,
/// `vhca_switch_drops_total{reason}`, `vhca_switch_dr_drops_total{reason}`,
/// `vhca_switch_traps_total{result}`, the SMA's counters and the ports' link
/// stages as `vhca_switch_link_value{port,stage,name}`.
#[derive(Debug)]
pub struct SwitchMetrics(pub Option<SwitchSnapshot>);

impl Collector for SwitchMetrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = &self.0 else { return Ok(()) };
        let ports: Vec<String> = s.ports.iter().map(|p| p.num.to_string()).collect();
        // The port counters, in the order of the first port's (all alike).
        let names: Vec<&str> = s
            .ports
            .first()
            .map(|p| p.counters.iter().map(|(k, _)| *k).collect())
            .unwrap_or_default();
        for (i, name) in names.iter().enumerate() {
            counters(
                &mut enc,
                &format!("vhca_switch_port_{name}"),
                "The switch port's counter (IBA 16.1.3.5 PortCounters; spoofed_slid: dropped before the core; fecn_marked: FECN set, A10.2.1).",
                s.ports.iter().zip(&ports).filter_map(|(p, num)| {
                    let v = p.counters.get(i)?.1;
                    Some(([("port", num.as_str())], v))
                }),
            )?;
        }
        let mut m = enc.encode_descriptor(
            "vhca_switch_port_state",
            "The switch port's PortState (1 for the state it is in).",
            None,
            MetricType::Gauge,
        )?;
        for (p, num) in s.ports.iter().zip(&ports) {
            let labels = [("port", num.as_str()), ("state", p.state)];
            ConstGauge::new(1u64).encode(m.encode_family(&labels)?)?;
        }
        for (name, set, help) in [
            (
                "vhca_switch_drops",
                &s.drops,
                "Packets the switch dropped, by reason.",
            ),
            (
                "vhca_switch_dr_drops",
                &s.dr_drops,
                "Directed-route SMPs the switch dropped, by reason.",
            ),
        ] {
            counters(
                &mut enc,
                name,
                help,
                set.iter().map(|(r, v)| ([("reason", r.as_str())], *v)),
            )?;
        }
        counters(
            &mut enc,
            "vhca_switch_traps",
            "The SMA's traps: sent, and each reason one was not.",
            s.traps.iter().map(|&(r, v)| ([("result", r)], v)),
        )?;
        for (name, v) in [
            ("sma_replies", s.sma_replies),
            ("sma_error_replies", s.sma_error_replies),
        ]
        .into_iter()
        .chain(s.agent_keys.iter().copied())
        {
            let help = "The switch's SMA, BMA and CC agent counter.";
            one(&mut enc, &format!("vhca_switch_{name}"), help, false, v)?;
        }
        let mut m = enc.encode_descriptor(
            "vhca_switch_link_value",
            "The switch ports' link stages' report lines by port, stage and name (counters and levels).",
            None,
            MetricType::Gauge,
        )?;
        for (p, num) in s.ports.iter().zip(&ports) {
            for (stage, st) in &crate::counters_out::link_stages(&p.link).0 {
                let Stage::Counters(named) = st else { continue };
                for (name, v) in &named.0 {
                    let labels = [
                        ("port", num.as_str()),
                        ("stage", stage.as_str()),
                        ("name", name.as_str()),
                    ];
                    ConstGauge::new(*v).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use transport::engine::{Counters, NakReason, RxDrop};
    use transport::wire::DropReason;

    fn snapshot() -> Snapshot {
        let mut engine = Counters {
            tx_bytes: 4096,
            recovery_stall_us: 1_500_000,
            ..Counters::default()
        };
        engine.wire_drops.count(DropReason::BadIcrc);
        engine.drop(RxDrop::BadQkey);
        engine.nak(NakReason::PsnSequence);
        let mut s = Snapshot {
            engine,
            link: Some("udp n0: tx 3 (300 B, 1 GSO runs) rx_kernel_drops 0".into()),
            cmdq: vec![("pi_writes", 2), ("longest_command_us", 250)],
            mgmt: vec![("smp_rx", 1)],
            ..Snapshot::default()
        };
        s.port.rx_packets = 7;
        s.port.tx_packets = 9;
        s.hca.mem_held_bytes = 1 << 20;
        s
    }

    /// Issue 28 item 3: the exposition has every counter, labelled, zeros
    /// included, in the Prometheus text format.
    #[test]
    fn the_exposition_labels_every_counter_and_keeps_the_zeros() {
        let body = encode(
            Box::new(DeviceMetrics(snapshot())),
            &ServerCounters::default(),
        );
        for line in [
            "# TYPE vhca_port_packets_total counter",
            "vhca_port_packets_total{dir=\"rx\"} 7",
            "vhca_port_packets_total{dir=\"tx\"} 9",
            "vhca_port_link_errors_total 0",
            "vhca_drops_total{layer=\"wire\",reason=\"bad_icrc\"} 1",
            "vhca_drops_total{layer=\"wire\",reason=\"bad_vcrc\"} 0",
            "vhca_drops_total{layer=\"transport\",reason=\"bad_qkey\"} 1",
            "vhca_naks_sent_total{reason=\"psn_sequence\"} 1",
            "vhca_engine_tx_bytes_total 4096",
            "vhca_engine_recovery_stall_seconds_total 1.5",
            "vhca_rd_bad_eecn_total 0",
            "# TYPE vhca_device_mem_held_bytes gauge",
            "vhca_device_mem_held_bytes 1048576",
            "vhca_cmdq_pi_writes_total 2",
            "vhca_cmdq_longest_command_seconds 0.00025",
            "vhca_mgmt_smp_rx_total 1",
            "vhca_link_value{stage=\"udp\",name=\"tx_bytes\"} 300",
            "vhca_link_value{stage=\"udp\",name=\"rx_kernel_drops\"} 0",
            "vhca_metrics_requests_total{result=\"ok\"} 0",
        ] {
            assert!(body.lines().any(|l| l == line), "{line} not in\n{body}");
        }
        let n = |set: &str| {
            body.lines()
                .filter(|l| l.starts_with(&format!("vhca_drops_total{{layer=\"{set}\"")))
                .count()
        };
        assert_eq!(n("wire"), DropReason::ALL.len());
        assert_eq!(n("transport"), RxDrop::ALL.len());
        // Every sample's name is a valid metric name, each family typed once.
        let mut types = std::collections::HashSet::new();
        for l in body.lines() {
            if let Some(t) = l.strip_prefix("# TYPE ") {
                assert!(
                    types.insert(t.split(' ').next().unwrap().to_string()),
                    "{l}"
                );
            } else if !l.starts_with('#') {
                let name = l.split(['{', ' ']).next().unwrap();
                assert!(
                    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "{l}"
                );
            }
        }
    }

    /// However fast the scrapes come, the device's lock is taken at most
    /// once per [`SNAPSHOT_EVERY`].
    #[test]
    fn scrapes_closer_than_the_snapshot_period_share_one_copy() {
        let copies = Arc::new(AtomicU64::new(0));
        let c = Arc::clone(&copies);
        let get = at_most_every(Duration::from_secs(60), move || {
            c.fetch_add(1, Ordering::Relaxed);
            snapshot()
        });
        for _ in 0..5 {
            assert_eq!(get().port.rx_packets, 7);
        }
        assert_eq!(copies.load(Ordering::Relaxed), 1);
        let c = Arc::clone(&copies);
        let get = at_most_every(Duration::ZERO, move || {
            c.fetch_add(1, Ordering::Relaxed);
            snapshot()
        });
        get();
        get();
        assert_eq!(copies.load(Ordering::Relaxed), 3);
    }

    /// A server on a free loopback port with short limits, and its counters.
    fn server(limits: Limits) -> (SocketAddr, Arc<ServerCounters>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let stats = Arc::new(ServerCounters::default());
        let st = Arc::clone(&stats);
        std::thread::spawn(move || {
            serve(
                l,
                limits,
                Box::new(|| Box::new(DeviceMetrics(snapshot()))),
                st,
            )
        });
        (addr, stats)
    }

    fn request(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// The bounds: a client that sends nothing is closed at the connection
    /// time, one whose request head is too long gets 431 and is closed, and
    /// the scrape after each is answered; other paths and methods are refused.
    #[test]
    fn idle_and_oversized_clients_are_closed_and_the_next_scrape_is_answered() {
        let limits = Limits {
            max_request: 512,
            connection_time: Duration::from_millis(300),
        };
        let (addr, stats) = server(limits);
        let mut idle = TcpStream::connect(addr).unwrap();
        idle.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let t = Instant::now();
        let mut got = Vec::new();
        let _ = idle.read_to_end(&mut got);
        assert!(got.is_empty(), "{got:?}");
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        let ok = request(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(
            ok.contains("\r\nContent-Type: text/plain; version=0.0.4"),
            "{ok}"
        );
        assert!(
            ok.contains("\nvhca_port_packets_total{dir=\"rx\"} 7\n"),
            "{ok}"
        );
        // A request line longer than the bound, all sent before the answer
        // is read (it fits the socket buffers).
        let mut long = b"GET /".to_vec();
        long.extend(std::iter::repeat_n(b'a', 400));
        long.extend(b"/metrics HTTP/1.1\r\nX: ");
        long.extend(std::iter::repeat_n(b'b', 200));
        long.extend(b"\r\n\r\n");
        let big = request(addr, &long);
        assert!(big.starts_with("HTTP/1.1 431 "), "{big}");
        assert!(request(addr, b"GET /metrics HTTP/1.0\n\n").starts_with("HTTP/1.1 200 OK"));
        assert!(request(addr, b"GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(request(addr, b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(request(addr, b"hello\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let head = request(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            head.ends_with("Content-Length: 0\r\nConnection: close\r\n\r\n"),
            "{head}"
        );
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        assert_eq!(l(&stats.incomplete), 1);
        assert_eq!(l(&stats.too_large), 1);
        assert_eq!(l(&stats.refused), 3);
        assert_eq!(l(&stats.ok), 3);
    }
}
