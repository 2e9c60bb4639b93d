//! The device's counters for the host (issue 17, ARCHITECTURE.md §2 "counted by
//! reason"): the periodic log (`--counters-every`) and the exit report as text
//! or as JSON lines (`--counters-format json`), and `--counters-file PATH`, a
//! JSON object rewritten atomically (written beside it, then renamed over it)
//! every period, so that a running device's counters can be read at any time
//! (`cat`, `jq`) without stopping it or parsing its log.
//!
//! One JSON object per line; the keys:
//! - `time`: the device clock (seconds since the Unix epoch, `run::now`);
//! - `port`: what the port counts (`rx_packets`, `tx_packets`, `link_errors`,
//!   `link_down`, `link_up`);
//! - one object per QUERY_COUNTERS set, named as the set in snake case
//!   (`port_set` for the engine's `Port` set, then `wire_drop`, `rx_drop`,
//!   `nak_sent`, `device`) with the names the driver's hw counters carry
//!   (`abi::counters`, one source for both; the reasons' names are the
//!   engine's, `DropReason::name` and the like), every counter, zeros
//!   included;
//! - `rd`: the engine's Reliable Datagram counters (AD-11), in no
//!   QUERY_COUNTERS set yet;
//! - `link`: one object per link stage (`udp`, `tap`, `auth`) with the counters
//!   of its log line; `vhost_user_net` likewise in RoCE mode;
//! - `cmdq`: how command batches were split;
//! - `counters_file` (with `--counters-file`): its rewrites `written`,
//!   `failed`, and `skipped` because the last one was still in progress (the
//!   file is written by a thread of its own, never by the data path).
//!
//! The JSON is built by serde (`JsonReport` and the ordered maps
//! [`Named`], [`Ordered`]); the text report names every counter too, the
//! engine's and the device's sets without their zero counters (`engine:`
//! for `port_set`, then `wire_drop:`, `rx_drop:`, `nak_sent:`, `rd:`,
//! `cmdq:`, `device:`). The link stages' counters still come as their
//! report lines, read back by [`parse_counter_line`].
//!
//! Nothing here takes the device's lock or knows its threads: the data path
//! hands a [`Snapshot`] taken under its lock.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::engine::Counters;

use crate::abi::counters::{CounterSet, HcaCounters};
use crate::port::PortCounters;

/// How often the counters file is rewritten without `--counters-every`.
pub const FILE_EVERY: Duration = Duration::from_secs(1);

/// The format of the counters printed to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CountersFormat {
    /// `name: values` lines, for people.
    #[default]
    Text,
    /// One JSON object per report, on one line.
    Json,
}

impl std::str::FromStr for CountersFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(CountersFormat::Text),
            "json" => Ok(CountersFormat::Json),
            _ => Err(format!("{s}: text or json")),
        }
    }
}

/// The device's counters at one instant, taken under the device's lock.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The device clock (since the Unix epoch).
    pub time: Duration,
    pub port: PortCounters,
    pub engine: Counters,
    /// The device's data-path counters, the memory budget's included.
    pub hca: HcaCounters,
    /// The link stages' report (`Link::report`): one `stage name: counters`
    /// line per stage.
    pub link: Option<String>,
    /// The vhost-user-net backend's counters line (RoCE mode).
    pub net: Option<String>,
    /// The command queue's split (name, value).
    pub cmdq: Vec<(&'static str, u64)>,
    /// The management plane's counters (`mgmt::Mgmt::counter_pairs`): empty on a
    /// port without an SMA (RoCE), and then not reported.
    pub mgmt: Vec<(&'static str, u64)>,
    /// The counters file's rewrites (`--counters-file`; set by
    /// `CountersOutput`, which writes it).
    pub counters_file: Option<FileCounters>,
}

/// The counters of one log line of a link stage or the vhost-user-net
/// backend, as (name, value): `tx 5 (300 B, 2 GSO runs) dropped 1: tx_short 1`
/// gives `tx` 5, `tx_bytes` 300, `tx_gso_runs` 2, `dropped` 1, `tx_short` 1.
/// A parenthesised group qualifies the counter before it. `None` if the line
/// does not have that shape.
pub fn parse_counter_line(text: &str) -> Option<Vec<(String, u64)>> {
    let spaced = text
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace(',', " , ")
        .replace(':', " ");
    let toks: Vec<&str> = spaced.split_whitespace().collect();
    let mut out = Vec::new();
    let mut base: Option<&str> = None;
    let mut i = 0;
    while i < toks.len() {
        if toks[i] == "(" {
            let base = base?;
            i += 1;
            loop {
                let v: u64 = toks.get(i)?.parse().ok()?;
                i += 1;
                let mut words = Vec::new();
                while let Some(&w) = toks.get(i) {
                    if w == "," || w == ")" {
                        break;
                    }
                    words.push(if w == "B" {
                        "bytes".to_string()
                    } else {
                        w.to_ascii_lowercase()
                    });
                    i += 1;
                }
                if words.is_empty() {
                    return None;
                }
                out.push((format!("{base}_{}", words.join("_")), v));
                match *toks.get(i)? {
                    ")" => {
                        i += 1;
                        break;
                    }
                    _ => i += 1,
                }
            }
        } else {
            let name = toks[i];
            if name.parse::<u64>().is_ok() || name == ")" || name == "," {
                return None;
            }
            let v: u64 = toks.get(i + 1)?.parse().ok()?;
            out.push((name.to_string(), v));
            base = Some(name);
            i += 2;
        }
    }
    Some(out)
}

/// Counters by name in report order: a JSON object (keys in this order), a
/// text line of `name value` pairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Named(pub Vec<(String, u64)>);

impl Named {
    fn of<'a>(pairs: impl IntoIterator<Item = (&'a str, u64)>) -> Named {
        Named(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `name value name value ...`, without the zero counters (the text
    /// report's choice; JSON and metrics keep them). Empty if all are zero.
    pub fn nonzero_text(&self) -> String {
        self.0
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// `name value ...`, every counter.
    fn all_text(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl serde::Serialize for Named {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// A JSON object whose keys keep their order (serde_json's own map sorts
/// them unless its `preserve_order` feature is on).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ordered<V>(pub Vec<(String, V)>);

impl<V: serde::Serialize> serde::Serialize for Ordered<V> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

/// The counters of one link stage's report line (or the vhost-user-net
/// backend's): by name when the line has the shape [`parse_counter_line`]
/// reads, else its text under `"text"`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum Stage {
    Counters(Named),
    Text { text: String },
}

impl Stage {
    fn of(line: &str) -> Stage {
        match parse_counter_line(line) {
            Some(pairs) => Stage::Counters(Named(pairs)),
            None => Stage::Text {
                text: line.to_string(),
            },
        }
    }
}

/// The stages of a link report (`udp a: ...`, `auth (key X): ...`), keyed by
/// the first word of their label.
pub fn link_stages(report: &str) -> Ordered<Stage> {
    Ordered(
        report
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| {
                let (label, rest) = line.split_once(": ").unwrap_or(("link", line));
                let stage = label.split_whitespace().next().unwrap_or("link");
                (stage.to_string(), Stage::of(rest))
            })
            .collect(),
    )
}

/// `value` as one line of JSON. The types here serialize to JSON without
/// fail (string keys, integers and strings); an error would be a bug, and
/// is reported as a JSON string rather than a panic.
pub(crate) fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| format!("\"counters: {e}\""))
}

/// The JSON report (`--counters-format json`, `--counters-file`); see the
/// module's documentation for its keys.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    /// Seconds since the Unix epoch.
    time: f64,
    port: &'a PortCounters,
    /// `port_set`, `wire_drop`, `rx_drop`, `nak_sent`, `device`: the
    /// QUERY_COUNTERS sets, then `rd`.
    #[serde(flatten)]
    sets: Ordered<Named>,
    link: Ordered<Stage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vhost_user_net: Option<Stage>,
    cmdq: Named,
    #[serde(skip_serializing_if = "Named::is_empty")]
    mgmt: Named,
    #[serde(skip_serializing_if = "Option::is_none")]
    counters_file: Option<FileCounters>,
}

impl Snapshot {
    /// The engine's and the device's counters by name, every one, zeros
    /// included: the QUERY_COUNTERS sets keyed as the set in snake case
    /// (`port_set` for the engine's `Port` set, not to be confused with the
    /// port's own counters), then `rd` (AD-11: in no QUERY_COUNTERS set yet).
    pub fn sets(&self) -> Ordered<Named> {
        let mut sets: Vec<(String, Named)> = CounterSet::ALL
            .iter()
            .map(|&set| {
                let key = match set {
                    CounterSet::Port => "port_set".to_string(),
                    _ => crate::abi::layout::screaming_snake(&format!("{set:?}"))
                        .to_ascii_lowercase(),
                };
                let pairs = set
                    .names()
                    .into_iter()
                    .zip(set.values(&self.engine, &self.hca));
                (key, Named(pairs.collect()))
            })
            .collect();
        sets.push(("rd".into(), Named::of(self.engine.rd.named())));
        Ordered(sets)
    }

    /// The link stages' counters, and the vhost-user-net backend's as the
    /// stage `vhost_user_net`.
    pub fn stages(&self) -> Ordered<Stage> {
        let mut s = link_stages(self.link.as_deref().unwrap_or(""));
        if let Some(n) = &self.net {
            s.0.push(("vhost_user_net".into(), Stage::of(n)));
        }
        s
    }

    /// The text report (`--counters-format text`): a line per part, every
    /// counter by name (the engine's and the device's sets without their
    /// zero counters, a set all zero without its line).
    pub fn text(&self) -> String {
        let p = &self.port;
        let mut s = format!(
            "port: rx {} tx {} link_errors {} link_down {} link_up {} tx_link_full {}\n",
            p.rx_packets, p.tx_packets, p.link_errors, p.link_down, p.link_up, p.tx_link_full
        );
        if let Some(r) = &self.link {
            let _ = writeln!(s, "{r}");
        }
        if let Some(n) = &self.net {
            let _ = writeln!(s, "vhost-user-net: {n}");
        }
        let sets = self.sets();
        let line = |s: &mut String, key: &str, label: &str| {
            if let Some((_, set)) = sets.0.iter().find(|(k, _)| k == key) {
                let t = set.nonzero_text();
                if !t.is_empty() {
                    let _ = writeln!(s, "{label}: {t}");
                }
            }
        };
        line(&mut s, "port_set", "engine");
        for key in ["wire_drop", "rx_drop", "nak_sent", "rd"] {
            line(&mut s, key, key);
        }
        let _ = writeln!(
            s,
            "cmdq: {}",
            Named::of(self.cmdq.iter().copied()).all_text()
        );
        line(&mut s, "device", "device");
        let mut s = s.trim_end().to_string();
        if !self.mgmt.is_empty() {
            let m: Vec<String> = self.mgmt.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = write!(s, "\nmgmt: {}", m.join(" "));
        }
        if let Some(f) = &self.counters_file {
            let _ = write!(
                s,
                "\ncounters-file: written {} failed {} skipped {}",
                f.written, f.failed, f.skipped
            );
        }
        s
    }

    /// The snapshot as one JSON object, without a newline.
    pub fn json(&self) -> String {
        to_json(&JsonReport {
            time: self.time.as_secs_f64(),
            port: &self.port,
            sets: self.sets(),
            link: link_stages(self.link.as_deref().unwrap_or("")),
            vhost_user_net: self.net.as_deref().map(Stage::of),
            cmdq: Named::of(self.cmdq.iter().copied()),
            mgmt: Named::of(self.mgmt.iter().copied()),
            counters_file: self.counters_file,
        })
    }

    /// The snapshot in `format`.
    pub fn render(&self, format: CountersFormat) -> String {
        match format {
            CountersFormat::Text => self.text(),
            CountersFormat::Json => self.json(),
        }
    }
}

/// What became of the counters file's rewrites (the `counters_file` key of
/// the JSON report): a rewrite still in progress when the next one is due is
/// not queued but skipped (issue 25 item 5: a slow or stuck file system never
/// holds up the data path nor piles up copies).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FileCounters {
    /// Rewrites that replaced the file.
    pub written: u64,
    /// Rewrites that failed (logged once until one succeeds).
    pub failed: u64,
    /// Periods skipped because the previous rewrite was still in progress.
    pub skipped: u64,
}

/// How one rewrite is done: [`write_atomically`], or a stand-in in tests.
type WriteFn = dyn Fn(&Path, &str) -> std::io::Result<()> + Send + Sync;

/// The state the counters file's writer thread shares with the data path.
#[derive(Debug, Default)]
struct WriterState {
    /// Set when a rewrite is handed over, cleared by the writer when it is done.
    busy: AtomicBool,
    written: AtomicU64,
    failed: AtomicU64,
    skipped: AtomicU64,
}

/// The thread that rewrites the counters file, so that the data path never
/// does file I/O (issue 25 item 5): one rewrite at a time, at most one handed
/// over and none queued. The thread ends when the last clone of its
/// `CountersOutput` is dropped.
#[derive(Debug)]
struct FileWriter {
    path: PathBuf,
    /// The rendered objects for the writer; `None` if it could not start.
    jobs: Option<SyncSender<String>>,
    state: Arc<WriterState>,
}

impl FileWriter {
    fn spawn(path: PathBuf, write: Arc<WriteFn>) -> Arc<FileWriter> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(1);
        let state = Arc::new(WriterState::default());
        let st = Arc::clone(&state);
        let p = path.clone();
        let spawned = std::thread::Builder::new()
            .name("vhca-counters".into())
            .spawn(move || {
                // Logged once until a rewrite succeeds again.
                let mut failing = false;
                for text in rx {
                    match write(&p, &text) {
                        Ok(()) => {
                            st.written.fetch_add(1, Ordering::Relaxed);
                            failing = false;
                        }
                        Err(e) => {
                            st.failed.fetch_add(1, Ordering::Relaxed);
                            if !failing {
                                log::warn!("--counters-file {}: {e}", p.display());
                            }
                            failing = true;
                        }
                    }
                    st.busy.store(false, Ordering::Release);
                }
            });
        let jobs = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                log::warn!("--counters-file {}: no writer thread: {e}", path.display());
                None
            }
        };
        Arc::new(FileWriter { path, jobs, state })
    }

    fn counters(&self) -> FileCounters {
        let s = &self.state;
        FileCounters {
            written: s.written.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            skipped: s.skipped.load(Ordering::Relaxed),
        }
    }

    /// Hands `text` to the writer, or counts a skip if it is still busy with
    /// the last one. Never waits.
    fn offer(&self, text: String) -> bool {
        let s = &self.state;
        if s.busy.swap(true, Ordering::AcqRel) {
            if s.skipped.fetch_add(1, Ordering::Relaxed) == 0 {
                log::warn!(
                    "--counters-file {}: the last rewrite is still in progress; \
                     rewrites are skipped until it ends",
                    self.path.display()
                );
            }
            return false;
        }
        // `busy` was clear, so the channel's one slot is free.
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|tx| tx.try_send(text).is_ok());
        if !sent {
            // No writer: nothing else would clear `busy`.
            s.busy.store(false, Ordering::Release);
            s.failed.fetch_add(1, Ordering::Relaxed);
        }
        sent
    }

    /// Waits up to `within` for the writer to be idle.
    fn idle_within(&self, within: Duration) -> bool {
        let t = Instant::now();
        while self.state.busy.load(Ordering::Acquire) {
            if t.elapsed() >= within {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }
}

/// How long the exit report waits for the counters file's last rewrite: a
/// stuck file system delays the exit by this much, not forever.
const EXIT_WRITE_WAIT: Duration = Duration::from_secs(1);

/// Where and when the counters go: the data path calls [`tick`](Self::tick)
/// every round, the exit paths [`report`](Self::report). The file is written
/// by a thread of its own (`FileWriter`), shared by the clones.
#[derive(Debug, Clone)]
pub struct CountersOutput {
    log_every: Option<Duration>,
    format: CountersFormat,
    file: Option<Arc<FileWriter>>,
    file_every: Duration,
    last_log: Instant,
    /// `None` until the first write, which comes at the first round so that
    /// the file exists as soon as the device serves.
    last_file: Option<Instant>,
}

impl CountersOutput {
    /// `every`: the period of the stderr log (none without it) and of the
    /// file (`FILE_EVERY` without it).
    pub fn new(every: Option<Duration>, format: CountersFormat, file: Option<PathBuf>) -> Self {
        Self::with_writer(every, format, file, Arc::new(write_atomically))
    }

    fn with_writer(
        every: Option<Duration>,
        format: CountersFormat,
        file: Option<PathBuf>,
        write: Arc<WriteFn>,
    ) -> Self {
        CountersOutput {
            log_every: every,
            format,
            file: file.map(|p| FileWriter::spawn(p, write)),
            file_every: every.unwrap_or(FILE_EVERY),
            last_log: Instant::now(),
            last_file: None,
        }
    }

    /// What became of the file's rewrites so far (`None` without a file).
    pub fn file_counters(&self) -> Option<FileCounters> {
        self.file.as_ref().map(|f| f.counters())
    }

    /// Prints and hands over what is due; `snapshot` is called only then.
    /// Never waits for the file (`FileWriter`).
    pub fn tick(&mut self, snapshot: impl FnOnce() -> Snapshot) {
        let now = Instant::now();
        let log_due = self
            .log_every
            .is_some_and(|e| now.saturating_duration_since(self.last_log) >= e);
        let file_due = self.file.is_some()
            && self
                .last_file
                .is_none_or(|t| now.saturating_duration_since(t) >= self.file_every);
        if !log_due && !file_due {
            return;
        }
        let mut s = snapshot();
        s.counters_file = self.file_counters();
        if log_due {
            self.last_log = now;
            eprintln!("{}", s.render(self.format));
        }
        if file_due {
            self.last_file = Some(now);
            if let Some(f) = &self.file {
                f.offer(s.json() + "\n");
            }
        }
    }

    /// The exit report: to stderr in the chosen format, and the file once
    /// more, waiting for that rewrite at most `EXIT_WRITE_WAIT` in all.
    pub fn report(&mut self, s: &Snapshot) {
        let mut s = s.clone();
        s.counters_file = self.file_counters();
        eprintln!("{}", s.render(self.format));
        let Some(f) = &self.file else { return };
        let t = Instant::now();
        if !f.idle_within(EXIT_WRITE_WAIT) {
            f.state.skipped.fetch_add(1, Ordering::Relaxed);
        } else if f.offer(s.json() + "\n") {
            f.idle_within(EXIT_WRITE_WAIT.saturating_sub(t.elapsed()));
        }
    }
}

/// Writes `text` to `path` so that a reader sees the old or the new content,
/// never a part: into a new file of a random name in the same folder, then
/// renamed over `path`. The new file is created with O_EXCL and O_NOFOLLOW
/// (issue 25 item 5: vhca often runs as root, and a fixed temporary name is a
/// place where anyone who can write the folder plants a symlink to a file of
/// root's, or a FIFO that blocks the writer forever); a name taken is retried
/// with another. The rename replaces whatever is at `path` (a symlink or FIFO
/// there included) without opening it.
pub fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    use std::hash::{BuildHasher, Hasher};
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tries = 0;
    let (tmp, mut f) = loop {
        // RandomState is seeded from the OS's random source once per thread
        // and differs at every call: unpredictable without an RNG crate.
        let r = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let mut n = std::ffi::OsString::from(".");
        n.push(name);
        n.push(format!(".{r:016x}.tmp"));
        let tmp = dir.join(n);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let done = f
        .write_all(text.as_bytes())
        .and_then(|()| std::fs::rename(&tmp, path));
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{AuthCounters, TapCounters, UdpCounters};

    #[test]
    fn parses_the_udp_line_with_its_groups() {
        let c = UdpCounters {
            tx_packets: 5,
            tx_bytes: 300,
            tx_gso_runs: 2,
            rx_packets: 7,
            rx_bytes: 700,
            rx_gro_runs: 1,
            drop_tx_short: 3,
            rx_socket_errors: 4,
            ..UdpCounters::default()
        };
        let text = c.to_string();
        let pairs = parse_counter_line(&text).expect(&text);
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|p| p.1);
        assert_eq!(get("tx"), Some(5));
        assert_eq!(get("tx_bytes"), Some(300));
        assert_eq!(get("tx_gso_runs"), Some(2));
        assert_eq!(get("rx_bytes"), Some(700));
        assert_eq!(get("rx_gro_runs"), Some(1));
        assert_eq!(get("dropped"), Some(3));
        assert_eq!(get("tx_short"), Some(3));
        assert_eq!(get("rx_socket_errors"), Some(4));
        // Every number of the line became one counter.
        let numbers = text
            .split(|c: char| !c.is_ascii_digit())
            .filter(|t| !t.is_empty())
            .count();
        assert_eq!(pairs.len(), numbers, "{text}");
    }

    #[test]
    fn every_stage_line_parses_whole() {
        for text in [
            TapCounters::default().to_string(),
            AuthCounters::default().to_string(),
            crate::net::NetCounters::default().to_string(),
        ] {
            let pairs = parse_counter_line(&text).expect(&text);
            let numbers = text.split_whitespace().filter(|t| t.contains('0')).count();
            assert_eq!(pairs.len(), numbers, "{text}");
        }
    }

    #[test]
    fn a_line_of_another_shape_is_refused() {
        assert_eq!(parse_counter_line("tx 1 rx"), None);
        assert_eq!(parse_counter_line("(1 B)"), None);
        assert_eq!(parse_counter_line("tx 1 (B)"), None);
        assert_eq!(parse_counter_line("tx 1 (1 B"), None);
        assert_eq!(parse_counter_line("1 2"), None);
    }

    #[test]
    fn json_names_every_set_and_stage() {
        let s = Snapshot {
            time: Duration::from_millis(1_500),
            port: PortCounters {
                rx_packets: 3,
                tx_packets: 4,
                link_errors: 0,
                ..PortCounters::default()
            },
            link: Some("udp a: tx 1 (2 B, 0 GSO runs)\nauth (key \"x\"): rx_verified 9".into()),
            cmdq: vec![("pi_writes", 2)],
            ..Snapshot::default()
        };
        let j = s.json();
        assert!(
            j.starts_with("{\"time\":1.5,\"port\":{\"rx_packets\":3,"),
            "{j}"
        );
        for key in [
            "\"port_set\":{\"rx_packets\":0",
            "\"wire_drop\":{",
            "\"rx_drop\":{",
            "\"nak_sent\":{",
            "\"device\":{\"send_wqes\":0",
            "\"link\":{\"udp\":{\"tx\":1,\"tx_bytes\":2,\"tx_gso_runs\":0},\"auth\":{\"rx_verified\":9}}",
            "\"cmdq\":{\"pi_writes\":2}}",
        ] {
            assert!(j.contains(key), "{key} not in {j}");
        }
        assert!(!j.contains('\n'));
    }

    #[test]
    fn the_management_planes_counters_are_reported_when_there_is_one() {
        let s = Snapshot {
            mgmt: vec![("smp_rx", 3), ("sma_drop_bad_mkey", 1)],
            ..Snapshot::default()
        };
        assert!(s
            .json()
            .contains(",\"mgmt\":{\"smp_rx\":3,\"sma_drop_bad_mkey\":1}"));
        let t = s.text();
        assert_eq!(t.lines().last(), Some("mgmt: smp_rx 3 sma_drop_bad_mkey 1"));
        // The line parses as the other counter lines do.
        assert_eq!(
            parse_counter_line("smp_rx 3 sma_drop_bad_mkey 1").map(|p| p.len()),
            Some(2)
        );
    }

    #[test]
    fn the_text_report_keeps_its_lines() {
        let s = Snapshot {
            link: Some("udp a: tx 1".into()),
            net: Some("tx 2".into()),
            cmdq: vec![("pi_writes", 2), ("max_per_write", 16)],
            ..Snapshot::default()
        };
        let t = s.text();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines,
            [
                "port: rx 0 tx 0 link_errors 0 link_down 0 link_up 0 tx_link_full 0",
                "udp a: tx 1",
                "vhost-user-net: tx 2",
                // The engine's and the device's sets are all zero: no line.
                "cmdq: pi_writes 2 max_per_write 16",
            ]
        );
        assert_eq!(s.render(CountersFormat::Text), t);
    }

    /// A snapshot with counters above zero in every set of the engine and
    /// the device.
    fn busy_snapshot() -> Snapshot {
        use transport::engine::{NakReason, RxDrop};
        use transport::wire::DropReason;
        let mut engine = Counters {
            rx_packets: 5,
            tx_packets: 6,
            retransmits: 2,
            probes: 1,
            ..Counters::default()
        };
        for (i, r) in DropReason::ALL.iter().enumerate() {
            for _ in 0..=i {
                engine.wire_drops.count(*r);
            }
        }
        engine.drop(RxDrop::BadPkey);
        engine.nak(NakReason::PsnSequence);
        engine.rd.bad_eecn = 3;
        Snapshot {
            engine,
            hca: HcaCounters {
                send_wqes: 4,
                fabric_key_rx_bad_tag: 7,
                ..HcaCounters::default()
            },
            cmdq: vec![("pi_writes", 2), ("deferred", 0)],
            ..Snapshot::default()
        }
    }

    /// Issue 28 item 3: every counter of the text report is named (no Rust
    /// debug output such as `DropCounters([3923, 4476, ...])`), on the line
    /// of its set, and the zero ones are left out.
    #[test]
    fn the_text_report_names_every_counter() {
        let s = busy_snapshot();
        let t = s.text();
        for bad in ["DropCounters", "Counters {", "[", "{", "("] {
            assert!(!t.contains(bad), "{bad:?} in {t}");
        }
        let label = |key: &str| if key == "port_set" { "engine" } else { key }.to_string();
        for (key, set) in s.sets().0 {
            let line = t
                .lines()
                .find(|l| l.starts_with(&format!("{}: ", label(&key))));
            for (name, v) in &set.0 {
                let pair = format!(" {name} {v}");
                match (line, *v) {
                    (Some(l), 0) => assert!(!l.contains(&format!(" {name} ")), "{l}"),
                    (Some(l), _) => assert!(
                        format!("{l} ").contains(&format!("{pair} ")),
                        "{pair} not in {l}"
                    ),
                    (None, 0) => {}
                    (None, _) => panic!("no {key} line for {name} {v} in {t}"),
                }
            }
        }
        // Every wire drop reason is above zero here: all named on the line.
        let wire = t.lines().find(|l| l.starts_with("wire_drop: ")).unwrap();
        assert_eq!(
            parse_counter_line(&wire["wire_drop: ".len()..]).map(|p| p.len()),
            Some(transport::wire::DropReason::ALL.len()),
            "{wire}"
        );
        assert!(
            t.contains(
                "\nengine: rx_packets 5 tx_packets 6 naks_sent 1 retransmits 2 loss_probes 1\n"
            ),
            "{t}"
        );
        assert!(t.contains("\nrx_drop: bad_pkey 1\n"), "{t}");
        assert!(t.contains("\nnak_sent: psn_sequence 1\n"), "{t}");
        assert!(t.contains("\nrd: bad_eecn 3\n"), "{t}");
        assert!(t.contains("\ncmdq: pi_writes 2 deferred 0\n"), "{t}");
        assert!(
            t.contains("\ndevice: send_wqes 4 fabric_key_rx_bad_tag 7"),
            "{t}"
        );
    }

    /// Issue 28 item 2: the JSON is built by serde and keeps its keys: the
    /// port's, every set's with every counter (zeros included), `rd`, the
    /// link stages, `cmdq`.
    #[test]
    fn the_json_report_is_valid_and_keeps_every_key() {
        let mut s = busy_snapshot();
        s.link = Some("udp a: tx 1 (2 B, 0 GSO runs)\nodd: not a counter line".into());
        s.counters_file = Some(FileCounters {
            written: 1,
            ..FileCounters::default()
        });
        let v: serde_json::Value = serde_json::from_str(&s.json()).expect("valid JSON");
        assert_eq!(v["time"], 0.0);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut want = vec![
            "cmdq",
            "counters_file",
            "device",
            "link",
            "nak_sent",
            "port",
            "port_set",
            "rd",
            "rx_drop",
            "time",
            "wire_drop",
        ];
        want.sort_unstable();
        let mut got = keys.clone();
        got.sort_unstable();
        assert_eq!(got, want);
        assert_eq!(v["port"]["tx_link_full"], 0);
        for (key, set) in s.sets().0 {
            let obj = v[&key].as_object().unwrap_or_else(|| panic!("{key}"));
            assert_eq!(obj.len(), set.0.len(), "{key}");
            for (name, n) in set.0 {
                assert_eq!(obj[&name], n, "{key}.{name}");
            }
        }
        assert_eq!(v["wire_drop"]["bad_icrc"], 11);
        assert_eq!(v["link"]["udp"]["tx_bytes"], 2);
        assert_eq!(v["link"]["odd"]["text"], "not a counter line");
        assert_eq!(v["counters_file"]["written"], 1);
        assert_eq!(v["cmdq"]["deferred"], 0);
    }

    /// Issue 25 item 5: the data path hands the file over and never waits;
    /// while a rewrite is stuck, the rounds due are skipped and counted, and
    /// the exit report waits a bounded time.
    #[test]
    fn a_stuck_counters_file_write_skips_rounds_and_counts_them() {
        let (release, stuck) = std::sync::mpsc::channel::<()>();
        let stuck = std::sync::Mutex::new(stuck);
        let dir = tempfile::tempdir().unwrap();
        let mut out = CountersOutput::with_writer(
            None,
            CountersFormat::Json,
            Some(dir.path().join("c.json")),
            Arc::new(move |p: &Path, t: &str| {
                // The first rewrite blocks until released (a FIFO, a hung
                // file system), the later ones do not.
                let _ = stuck.lock().unwrap().recv();
                write_atomically(p, t)
            }),
        );
        out.file_every = Duration::ZERO;
        let t = Instant::now();
        for _ in 0..5 {
            out.tick(Snapshot::default);
        }
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        let c = out.file_counters().unwrap();
        assert_eq!((c.written, c.skipped), (0, 4), "{c:?}");
        let t = Instant::now();
        out.report(&Snapshot::default());
        let waited = t.elapsed();
        assert!(
            waited >= EXIT_WRITE_WAIT && waited < EXIT_WRITE_WAIT * 3,
            "{waited:?}"
        );
        drop(release);
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.file_counters().unwrap().written == 0 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        out.tick(Snapshot::default);
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.file_counters().unwrap().written < 2 {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        let text = std::fs::read_to_string(dir.path().join("c.json")).unwrap();
        assert!(
            text.contains("\"counters_file\":{\"written\":1,\"failed\":0,\"skipped\":"),
            "{text}"
        );
    }

    /// The temporary file is a new one of a random name: a file, link or
    /// FIFO at any name main used is left alone.
    #[test]
    fn the_temporary_file_is_created_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep\n").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("c.json.tmp")).unwrap();
        write_atomically(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        // A symlink at the path itself is replaced, not followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write_atomically(&path, "newer\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["c.json", "c.json.tmp", "victim"]);
    }

    #[test]
    fn the_file_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        write_atomically(&path, "old\n").unwrap();
        write_atomically(&path, "new\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new\n");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
    }
}
