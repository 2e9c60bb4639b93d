//! `fabric-driver`: the test driver playing the guests of many `vhca`
//! nodes of a big fabric whose subnet manager runs elsewhere (OpenSM in a
//! guest; issue 27 item 2, `images/fabric-tests.sh`). Two commands:
//!
//! - `traffic --dir DIR --nodes A..B [--len SIZE] [--active-timeout DURATION]
//!   [--path-mtu M] [--cut-file F --streams K --after-cut DURATION]`: connects to the sockets
//!   `DIR/nA.sock` .. `DIR/n(B-1).sock`, waits until the SM has made every
//!   port Active (QUERY_PORT; the LIDs are the SM's), then runs RC WRITE and
//!   SEND between every two of the nodes, each checked byte for byte, on
//!   QPs whose path MTU is M (256..4096: what an SA PathRecord would give,
//!   the smallest MTU on the paths; default each port's active MTU). With
//!   `--cut-file`, then K RC streams between the two halves of the range
//!   (one half per host in a two-host fabric) run WRITEs checked byte for
//!   byte; the file `DIR/streaming` tells the caller they run; once the
//!   caller has taken a cable down and created F, every stream must go on
//!   (the SM re-routes; RC retries ride it out) and finish 5 more WRITEs.
//! - `ibnetdiscover --fabric FILE --output OUT`: compares `ibnetdiscover`'s
//!   output with the fabric file's cabling: every switch port's peer (GUID
//!   and port) as cabled, and as many CAs and switches.
//!
//! Durations and sizes as `vhca` takes them (`300s`, `16K`; a bare number
//! of seconds still works); a bad argument is clap's error with the usage
//! line, exit 2.
//!
//! Prints `RESULT name PASS|FAIL detail` lines; exit 0 iff every one passed.
//! A failed check inside the library's helpers panics, which is exit 101.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Parser};
use device::fabric::{End, FabricFile};
use device::units::{legacy_duration_in, parse_size, ParseArgs};
use vhca_tests::abi::verbs::PortState;
use vhca_tests::fixture::{assert_success, wait_n, Node, Region};
use vhca_tests::hca::{ConnOpts, Hca, HcaConfig, QpH};
use vhca_tests::switch_proc::{rc_pair_with, write_then_send};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::{Guest, GuestOptions, Layout, SendWr};

/// The driver's command line.
#[derive(Debug, Parser)]
#[command(name = "fabric-driver")]
enum Cmd {
    /// RC traffic between the nodes once the SM made them Active.
    Traffic(TrafficArgs),
    /// Compares `ibnetdiscover`'s output with the fabric file's cabling.
    Ibnetdiscover {
        /// The fabric file.
        #[arg(long, value_name = "FILE")]
        fabric: PathBuf,
        /// `ibnetdiscover`'s output.
        #[arg(long, value_name = "FILE")]
        output: PathBuf,
    },
}

#[derive(Debug, Args)]
struct TrafficArgs {
    /// The folder of the sockets `nA.sock` .. and of `streaming`.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The nodes A..B-1 (A < B).
    #[arg(long, value_name = "A..B", value_parser = parse_nodes)]
    nodes: (usize, usize),
    /// Bytes of each WRITE (a size: 16K, 1M).
    #[arg(long, value_name = "SIZE", default_value = "16K", value_parser = parse_size)]
    len: u64,
    /// How long the SM may take to make every port Active (a duration; a
    /// bare number counts seconds).
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = seconds())]
    active_timeout: Duration,
    /// The QPs' path MTU (default each port's active MTU).
    #[arg(long, value_name = "M", value_parser = ["256", "512", "1024", "2048", "4096"])]
    path_mtu: Option<String>,
    /// Run streams across a cable cut, which the caller signals by creating F.
    #[arg(long, value_name = "F")]
    cut_file: Option<PathBuf>,
    /// RC streams across the cut.
    #[arg(long, value_name = "K", default_value_t = 8, requires = "cut_file")]
    streams: usize,
    /// How long the streams go on after the cut (a duration; a bare number
    /// counts seconds).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = seconds(), requires = "cut_file")]
    after_cut: Duration,
}

/// `--nodes A..B`.
fn parse_nodes(range: &str) -> Result<(usize, usize), String> {
    range
        .split_once("..")
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
        .filter(|(a, b)| a < b)
        .ok_or_else(|| "A..B with A < B".into())
}

/// A duration from 1s to 1h; a bare number counts seconds, as before.
fn seconds() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    let s = Duration::from_secs(1);
    legacy_duration_in(s, s..=s * 3600, false)
}

fn result(name: &str, ok: bool, detail: &str) -> bool {
    println!(
        "RESULT {name} {} {detail}",
        if ok { "PASS" } else { "FAIL" }
    );
    ok
}

fn main() {
    let ok = match Cmd::parse_args(std::env::args_os()).unwrap_or_else(|e| e.exit()) {
        Cmd::Traffic(t) => traffic(&t),
        Cmd::Ibnetdiscover { fabric, output } => ibnetdiscover(&fabric, &output),
    };
    std::process::exit(if ok { 0 } else { 1 })
}

/// Connects to `sock` once it exists (the caller starts the processes).
fn connect(sock: &Path, deadline: Instant) -> Node {
    loop {
        if sock.exists() {
            match Guest::connect(sock, GuestOptions::default()) {
                Ok(g) => {
                    let hca = Hca::bring_up_with(g, HcaConfig::default())
                        .unwrap_or_else(|e| panic!("{}: {e}", sock.display()));
                    return Node::from_hca(hca);
                }
                Err(e) if Instant::now() > deadline => {
                    panic!("{}: {e}", sock.display())
                }
                Err(_) => {}
            }
        } else if Instant::now() > deadline {
            panic!("{} never appeared", sock.display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn traffic(t: &TrafficArgs) -> bool {
    let dir = &t.dir;
    let (a, b) = t.nodes;
    let len = usize::try_from(t.len).unwrap_or(usize::MAX);
    // enum vhca_mtu: 1 = 256 .. 5 = 4096, as a PathRecord's MTU field (clap
    // took only these five).
    let mtu = t.path_mtu.as_deref().map(|v| match v {
        "256" => 1u8,
        "512" => 2,
        "1024" => 3,
        "2048" => 4,
        _ => 5,
    });
    let active_timeout = t.active_timeout;
    let t0 = Instant::now();
    let mut nodes: Vec<Node> = (a..b)
        .map(|i| {
            connect(
                &dir.join(format!("n{i}.sock")),
                t0 + Duration::from_secs(60),
            )
        })
        .collect();
    println!(
        "DRIVER connected {} nodes in {:?}",
        nodes.len(),
        t0.elapsed()
    );
    // The SM sweeps: every port Active, with the LID it gave.
    let t1 = Instant::now();
    loop {
        let waiting: Vec<usize> = nodes
            .iter_mut()
            .enumerate()
            .filter_map(|(k, n)| {
                let st = n.hca.query_port(1).expect("QUERY_PORT").state;
                (st != PortState::Active.raw()).then_some(a + k)
            })
            .collect();
        if waiting.is_empty() {
            break;
        }
        if t1.elapsed() > active_timeout {
            return result(
                "all_ports_active",
                false,
                &format!("after {active_timeout:?} not Active: {waiting:?}"),
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for n in &mut nodes {
        n.hca.refresh_port().expect("QUERY_PORT");
    }
    let lids: Vec<u16> = nodes.iter().map(|n| n.lid()).collect();
    result(
        "all_ports_active",
        true,
        &format!(
            "{} nodes after {:?}, LIDs {lids:?}",
            nodes.len(),
            t1.elapsed()
        ),
    );
    // Every two nodes: RC WRITE one way and SEND back, byte for byte.
    let t2 = Instant::now();
    let n = nodes.len();
    let mut pairs = 0;
    for i in 0..n {
        for j in i + 1..n {
            let (lo, hi) = nodes.split_at_mut(j);
            let (x, y) = (&mut lo[i], &mut hi[0]);
            // The switch tests' patient ACK timeout (rc_pair's), on `mtu`.
            let o = ConnOpts {
                timeout: 17,
                mtu,
                ..ConnOpts::default()
            };
            let qs = rc_pair_with(x, y, &o);
            let what = format!("n{} -> n{}", a + i, a + j);
            write_then_send(x, y, qs, len, 0x2727 + (i * n + j) as u64 * 2, &what);
            pairs += 1;
        }
    }
    let secs = t2.elapsed().as_secs_f64();
    result(
        "all_to_all_rc",
        true,
        &format!(
            "{pairs} pairs, {len}-byte WRITE + 3000-byte SEND each, byte-exact, {secs:.1} s ({:.1} MB/s of WRITEs)",
            (pairs * len) as f64 / secs / 1e6
        ),
    );
    match &t.cut_file {
        Some(cut) => streams(&mut nodes, mtu, a, dir, cut, t.streams, t.after_cut),
        None => true,
    }
}

/// One RC stream: the QP on the sender, its buffers, and what it has done.
struct Stream {
    from: usize,
    to: usize,
    qp: QpH,
    src: Region,
    dst: Region,
    before: u32,
    after: u32,
    longest: Duration,
}

/// K streams from the first half of `nodes` to the second, round robin,
/// until each has done 5 WRITEs after `cut` appeared and `after` has passed.
fn streams(
    nodes: &mut [Node],
    mtu: Option<u8>,
    first: usize,
    dir: &Path,
    cut: &Path,
    k: usize,
    after: Duration,
) -> bool {
    let n = nodes.len();
    let half = n / 2;
    // A local ACK timeout of 4.096 us * 2^20 (4.3 s) and 7 retries: about
    // 30 s, longer than a dead link's silence timeout (5 s) plus the SM's
    // trap handling and re-sweep.
    let o = ConnOpts {
        timeout: 20,
        retry_cnt: 7,
        mtu,
        ..ConnOpts::default()
    };
    let len = 64 << 10;
    // Distinct pairs across the halves, every sender and receiver used
    // before one is used twice.
    let cross: Vec<(usize, usize)> = (0..n - half)
        .flat_map(|d| (0..half).map(move |i| (i, half + (i + d) % (n - half))))
        .collect();
    let mut ss: Vec<Stream> = cross
        .into_iter()
        .take(k)
        .map(|(i, j)| {
            let (lo, hi) = nodes.split_at_mut(j);
            let (x, y) = (&mut lo[i], &mut hi[0]);
            let (qp, _) = rc_pair_with(x, y, &o);
            Stream {
                from: i,
                to: j,
                qp,
                src: x.region(len, Layout::Scattered, 0),
                dst: y.region(len, Layout::Scattered, 0),
                before: 0,
                after: 0,
                longest: Duration::ZERO,
            }
        })
        .collect();
    let started = Instant::now();
    let mut cut_at: Option<Instant> = None;
    let mut announced = false;
    let mut seq = 0u64;
    loop {
        for s in &mut ss {
            let (x, y) = if s.from < s.to {
                let (lo, hi) = nodes.split_at_mut(s.to);
                (&mut lo[s.from], &mut hi[0])
            } else {
                let (lo, hi) = nodes.split_at_mut(s.from);
                (&mut hi[0], &mut lo[s.to])
            };
            let (src, dst) = (&s.src, &s.dst);
            seq += 1;
            let data = pattern(0x5700 + seq, len);
            x.write(src, 0, &data);
            let t = Instant::now();
            x.hca
                .post_send(
                    s.qp,
                    &SendWr::write(seq, dst.buf.va(0), dst.mr.rkey)
                        .sge(src.mr.sge(&src.buf, 0, len)),
                )
                .unwrap();
            assert_success(&wait_n(&mut x.hca, x.cq, 1, Duration::from_secs(90)));
            // A WRITE that ends after the cut counts as after it, with the
            // time it took: the one in flight when the cable went down
            // waits for the re-route.
            if cut_at.is_none() && cut.exists() {
                cut_at = Some(Instant::now());
            }
            if cut_at.is_some() {
                s.longest = s.longest.max(t.elapsed());
            }
            assert_bytes(
                &y.read(dst, 0, len),
                &data,
                &format!("stream n{} -> n{}", first + s.from, first + s.to),
            );
            if cut_at.is_some() {
                s.after += 1;
            } else {
                s.before += 1;
            }
        }
        if !announced {
            std::fs::write(dir.join("streaming"), b"")
                .unwrap_or_else(|e| panic!("write {}/streaming: {e}", dir.display()));
            println!("DRIVER streaming {k} streams");
            announced = true;
        }
        if let Some(c) = cut_at {
            if c.elapsed() >= after && ss.iter().all(|s| s.after >= 5) {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(600) {
            return result(
                "streams_survive_cut",
                false,
                &format!("still waiting after 600 s (cut seen: {})", cut_at.is_some()),
            );
        }
    }
    let detail: Vec<String> = ss
        .iter()
        .map(|s| {
            format!(
                "n{}->n{}: {} before, {} after, longest WRITE after {:.1} s",
                first + s.from,
                first + s.to,
                s.before,
                s.after,
                s.longest.as_secs_f64()
            )
        })
        .collect();
    result("streams_survive_cut", true, &detail.join("; "))
}

/// `ibnetdiscover`'s view against the fabric file.
fn ibnetdiscover(fabric: &Path, out: &Path) -> bool {
    let f = FabricFile::load(fabric).unwrap_or_else(|e| {
        eprintln!("fabric-driver: {e}");
        std::process::exit(2)
    });
    let text = std::fs::read_to_string(out).unwrap_or_else(|e| {
        eprintln!("fabric-driver: {}: {e}", out.display());
        std::process::exit(2)
    });
    let c = f.cabling();
    let end = |e: End| -> (u64, u8) {
        match e {
            End::Node(i) => (f.nodes()[i].guid, 1),
            End::Port { switch, port } => (c.switches()[switch].guid, port),
        }
    };
    // Cabled: each switch port's peer.
    let mut want: BTreeMap<(u64, u8), (u64, u8)> = BTreeMap::new();
    for &(x, y) in c.links() {
        for (p, q) in [(x, y), (y, x)] {
            if matches!(p, End::Port { .. }) {
                want.insert(end(p), end(q));
            }
        }
    }
    let got = parse_ibnetdiscover(&text);
    let cas = text.lines().filter(|l| l.starts_with("Ca")).count();
    let sws = text.lines().filter(|l| l.starts_with("Switch")).count();
    let missing: Vec<String> = want
        .iter()
        .filter(|(k, v)| got.get(k) != Some(v))
        .take(5)
        .map(|(k, v)| {
            format!(
                "{:#x}:{} -> {:#x}:{} (saw {:?})",
                k.0,
                k.1,
                v.0,
                v.1,
                got.get(k)
            )
        })
        .collect();
    let extra = got.keys().filter(|k| !want.contains_key(k)).count();
    let ok =
        missing.is_empty() && extra == 0 && cas == f.nodes().len() && sws == c.switches().len();
    result(
        "ibnetdiscover_equals_topology",
        ok,
        &format!(
            "{cas} CAs (file {}), {sws} switches (file {}), {} switch links (file {}), {extra} not in the file; first differences: {missing:?}",
            f.nodes().len(),
            c.switches().len(),
            got.len(),
            want.len()
        ),
    )
}

/// From `ibnetdiscover`'s text: (switch GUID, port) -> (peer GUID, port),
/// from the port lines of each `Switch` block
/// (`[3]  "H-0002c90300000003"[1](...)  # ...`).
fn parse_ibnetdiscover(text: &str) -> BTreeMap<(u64, u8), (u64, u8)> {
    let guid = |s: &str| -> Option<u64> {
        let q = s.find('"')?;
        let r = s[q + 1..].find('"')? + q + 1;
        let g = s[q + 1..r].split('-').nth(1)?;
        u64::from_str_radix(g, 16).ok()
    };
    let mut out = BTreeMap::new();
    let mut sw: Option<u64> = None;
    for l in text.lines() {
        if l.starts_with("Switch") {
            sw = guid(l);
        } else if l.trim().is_empty() || l.starts_with("Ca") {
            sw = None;
        } else if let (Some(s), Some(rest)) = (sw, l.strip_prefix('[')) {
            let Some((p, tail)) = rest.split_once(']') else {
                continue;
            };
            let (Ok(p), Some(g)) = (p.parse::<u8>(), guid(tail)) else {
                continue;
            };
            // The peer's port: the bracket after the quoted GUID.
            let after = &tail[tail.find("\"[").map_or(tail.len(), |i| i + 2)..];
            let Some(pp) = after.split(']').next().and_then(|x| x.parse::<u8>().ok()) else {
                continue;
            };
            out.insert((s, p), (g, pp));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_driver_takes_durations_and_sizes_and_the_old_bare_seconds() {
        let parse = |args: &str| {
            Cmd::parse_args(std::iter::once("fabric-driver").chain(args.split_whitespace()))
                .map_err(|e| e.to_string())
        };
        let Ok(Cmd::Traffic(t)) = parse("traffic --dir d --nodes 1..4 --len 64K --after-cut 2s --cut-file c --active-timeout 300") else {
            panic!("traffic parses");
        };
        assert_eq!((t.nodes, t.len, t.streams), ((1, 4), 64 << 10, 8));
        assert_eq!(t.active_timeout, Duration::from_secs(300));
        assert_eq!(t.after_cut, Duration::from_secs(2));
        let Ok(Cmd::Traffic(t)) = parse("traffic --dir d --nodes 0..2") else {
            panic!("defaults");
        };
        assert_eq!(
            (t.len, t.active_timeout),
            (16 << 10, Duration::from_secs(300))
        );
        for (args, names) in [
            ("traffic --dir d --nodes 4..1", "--nodes <A..B>"),
            (
                "traffic --dir d --nodes 0..2 --path-mtu 300",
                "--path-mtu <M>",
            ),
            (
                "traffic --dir d --nodes 0..2 --active-timeout 2h",
                "--active-timeout",
            ),
            ("traffic --dir d --nodes 0..2 --len lots", "--len <SIZE>"),
            ("traffic --dir d --nodes 0..2 --streams 4", "--cut-file"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.contains(names), "{args}: {e}");
            assert!(e.contains("Usage: fabric-driver traffic"), "{args}: {e}");
        }
    }

    #[test]
    fn ibnetdiscover_switch_blocks_give_each_port_its_peer() {
        let text =
            "#\n# Topology file\n\nvendid=0x2c9\nswitchguid=0x2c90300100001(2c90300100001)\n\
Switch\t3 \"S-0002c90300100001\"\t\t# \"leaf0\" base port 0 lid 3 lmc 0\n\
[1]\t\"H-0002c90300000001\"[1](2c90300000001) \t\t# \"n0\" lid 1 4xSDR\n\
[3]\t\"S-0002c90300100002\"[2]\t\t# \"spine0\" lid 4 4xSDR\n\
\nvendid=0x2c9\ncaguid=0x2c90300000001\n\
Ca\t1 \"H-0002c90300000001\"\t\t# \"n0\"\n\
[1](2c90300000001) \t\"S-0002c90300100001\"[1]\t\t# lid 1 lmc 0 \"leaf0\" lid 3 4xSDR\n";
        let m = parse_ibnetdiscover(text);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m[&(0x2c90300100001, 1)], (0x2c90300000001, 1));
        assert_eq!(m[&(0x2c90300100001, 3)], (0x2c90300100002, 2));
    }
}
