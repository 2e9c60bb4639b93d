//! Issue 28 item 3: the Prometheus endpoint of a running device
//! (`--metrics-listen`), scraped by a real HTTP client (curl) while two
//! devices move data, and its bounds against clients that misbehave.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vhca_tests::fixture::{bench_pair, transfer_rate, Transfer};
use vhca_tests::{Options, Vhca};

/// The address node `i` serves its metrics on, from its log line
/// `vhca: metrics on http://ADDR/metrics` (port 0 picks a free port).
fn metrics_addr(v: &Vhca, i: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = v.stderr(i);
        if let Some(rest) = log.split("metrics on http://").nth(1) {
            return rest.split("/metrics").next().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no metrics address in {log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET /metrics` with curl; the body.
fn scrape(addr: &str) -> String {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--max-time", "10"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .expect("curl runs");
    assert!(
        out.status.success(),
        "curl {addr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 exposition")
}

/// The value of sample `name{labels}` (labels in any order) in an
/// exposition.
fn sample(body: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
        if n != name {
            return None;
        }
        let set: Vec<&str> = rest
            .trim_end_matches('}')
            .split(',')
            .filter(|s| !s.is_empty())
            .collect();
        let want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        (set.len() == want.len() && want.iter().all(|w| set.contains(&w.as_str())))
            .then(|| value.parse().ok())?
    })
}

fn get(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(body, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{body}"))
}

/// Two devices, node 0's sends corrupted one in fifty (node 1's wire checks
/// drop them for their VCRC, C9-35), RC WRITEs from node 0 to node 1, and
/// both scraped with curl from another thread during the transfers: the
/// packet counters are there, labelled by direction, and grow between two
/// scrapes; the provoked drop shows on node 1 as
/// `vhca_drops_total{layer="wire",reason="bad_vcrc"}` and not on node 0.
#[test]
fn two_devices_metrics_scraped_with_curl_under_load_show_packets_and_the_provoked_drop() {
    let mut opts = Options::nodes(2);
    opts.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    opts.faults.insert(0, "corrupt=0.02,seed=28".into());
    let mut v = Vhca::spawn(opts);
    let addrs = [metrics_addr(&v, 0), metrics_addr(&v, 1)];
    let (mut a, _b, qa, _qb, src, dst) = bench_pair(&v, 65536, 16);
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicUsize::new(0));
    let scraper = {
        let (stop, taken, addrs) = (Arc::clone(&stop), Arc::clone(&taken), addrs.clone());
        std::thread::spawn(move || {
            let mut bodies = Vec::new();
            while !stop.load(Ordering::Acquire) {
                bodies.push([scrape(&addrs[0]), scrape(&addrs[1])]);
                taken.fetch_add(1, Ordering::Release);
                std::thread::sleep(Duration::from_millis(100));
            }
            bodies
        })
    };
    // Load until the scraper has taken four pairs of scrapes meanwhile.
    let t = Instant::now();
    let mut moved = 0;
    while taken.load(Ordering::Acquire) < 4 {
        assert!(t.elapsed() < Duration::from_secs(120), "scrapes stalled");
        transfer_rate(
            &mut a,
            &[qa],
            Transfer::Write,
            &src,
            &dst,
            65536,
            16,
            32,
            16,
        );
        moved += 32 * 65536;
    }
    stop.store(true, Ordering::Release);
    let during = scraper.join().expect("the scraper");
    assert!(during.len() >= 4, "{} scrapes", during.len());
    let (first, last) = (&during[0], &during[during.len() - 1]);
    let tx = |b: &str| get(b, "vhca_port_packets_total", &[("dir", "tx")]);
    let rx = |b: &str| get(b, "vhca_port_packets_total", &[("dir", "rx")]);
    assert!(
        tx(&last[0]) > tx(&first[0]),
        "node 0 sends more between scrapes"
    );
    assert!(
        rx(&last[1]) > rx(&first[1]),
        "node 1 receives more between scrapes"
    );
    assert!(
        get(&last[0], "vhca_engine_tx_bytes_total", &[])
            > get(&first[0], "vhca_engine_tx_bytes_total", &[])
    );
    assert!(
        last[0].contains("# TYPE vhca_port_packets_total counter"),
        "{}",
        last[0]
    );
    // After the load, the totals: every byte moved, and the drops.
    let end = [scrape(&addrs[0]), scrape(&addrs[1])];
    assert!(get(&end[0], "vhca_engine_tx_bytes_total", &[]) >= moved as f64);
    let vcrc = |b: &str| {
        get(
            b,
            "vhca_drops_total",
            &[("layer", "wire"), ("reason", "bad_vcrc")],
        )
    };
    assert!(
        vcrc(&end[1]) > 0.0,
        "node 1 dropped corrupted packets:\n{}",
        end[1]
    );
    assert_eq!(vcrc(&end[0]), 0.0, "node 0's own packets are not corrupted");
    // Every reason is a series, zeros included.
    assert_eq!(
        get(
            &end[1],
            "vhca_drops_total",
            &[("layer", "transport"), ("reason", "bad_pkey")]
        ),
        0.0
    );
    // The recovery answered the loss: node 0 sent packets again.
    assert!(get(&end[0], "vhca_engine_resent_packets_total", &[]) > 0.0);
    assert!(get(&end[0], "vhca_metrics_requests_total", &[("result", "ok")]) >= 5.0);
    v.assert_alive(0);
    v.assert_alive(1);
}

/// The endpoint's bounds on a real device: a client that connects and sends
/// nothing, and one whose request line never ends, are closed, and the
/// scrapes after them are answered; a bad path is a 404.
#[test]
fn metrics_endpoint_drops_idle_and_oversized_clients_and_serves_the_next_scrape() {
    let mut opts = Options::nodes(1);
    opts.extra_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    let mut v = Vhca::spawn(opts);
    let addr = metrics_addr(&v, 0);
    // Idle: the server closes it (device::metrics::CONNECTION_TIME, 2 s).
    let mut idle = TcpStream::connect(&addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let r = idle.read_to_end(&mut got);
    assert!(r.is_err() || got.is_empty(), "{r:?} {got:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(scrape(&addr).contains("vhca_port_packets_total"));
    // An endless request line: refused (431) or cut off, never read whole.
    let mut big = TcpStream::connect(&addr).unwrap();
    big.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let line = vec![b'A'; 64 * 1024];
    let sent = big.write_all(b"GET /").and_then(|()| big.write_all(&line));
    let mut answer = String::new();
    big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = big.read_to_string(&mut answer);
    assert!(
        sent.is_err() || answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "{answer}"
    );
    drop(big);
    // Meanwhile a second idle client waits in the backlog: the next scrape
    // is answered once it is dropped.
    let _idle2 = TcpStream::connect(&addr).unwrap();
    let t = Instant::now();
    let body = scrape(&addr);
    assert!(t.elapsed() < Duration::from_secs(5));
    assert_eq!(
        get(
            &body,
            "vhca_metrics_requests_total",
            &[("result", "too_large")]
        ),
        1.0
    );
    assert!(
        get(
            &body,
            "vhca_metrics_requests_total",
            &[("result", "incomplete")]
        ) >= 2.0
    );
    let out = Command::new("curl")
        .args([
            "--silent",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
        ])
        .arg(format!("http://{addr}/other"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "404");
    v.assert_alive(0);
}

/// A bad `--metrics-listen` is one line naming the option: an address that
/// does not parse (clap's usage error, exit 2), one that is taken (exit 1,
/// before the device serves).
#[test]
fn metrics_listen_refuses_a_bad_or_taken_address_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric.toml");
    let port = vhca_tests::process::free_udp_ports(1).unwrap()[0];
    std::fs::write(
        &fabric,
        format!(
            "[[node]]\nname = \"a\"\nlid = 1\nguid = \"0x0002c90300000001\"\n\
             address = \"127.0.0.1:{port}\"\n"
        ),
    )
    .unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().map(|a| (a, taken)).unwrap();
    let bin = vhca_tests::process::vhca_binary(vhca_tests::Build::Debug);
    let run = |addr: &str| {
        Command::new(&bin)
            .arg("--socket")
            .arg(dir.path().join("a.sock"))
            .arg("--fabric")
            .arg(&fabric)
            .args(["--node", "a", "--metrics-listen", addr])
            .output()
            .unwrap()
    };
    let o = run("localhost-ish");
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--metrics-listen"), "{e}");
    let o = run(&taken.0.to_string());
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.lines()
            .last()
            .is_some_and(|l| l.starts_with(&format!("vhca: --metrics-listen {}: ", taken.0))),
        "{e}"
    );
}

/// `vhca switch --metrics-listen`: two HCAs through a switch, node 0's sends
/// corrupted one in twenty (the switch drops them as malformed, each counted
/// in port 1's PortRcvErrors too); RC WRITEs from node 0 to node 1 get
/// through, and a curl scrape shows what crossed each port and the drops,
/// labelled by port and reason.
#[test]
fn switch_metrics_scraped_with_curl_count_each_ports_packets_and_drops() {
    use vhca_tests::fixture::Node;
    use vhca_tests::process::free_udp_ports;
    use vhca_tests::switch_proc::{rc_pair, star, write_checked, SwitchProc};

    let sw_ports = free_udp_ports(2).unwrap();
    let mut opts = Options {
        top_toml: star(&sw_ports, 2),
        ..Options::nodes(2)
    };
    opts.faults.insert(0, "corrupt=0.05,seed=9".into());
    let v = Vhca::spawn(opts);
    let mut sw = SwitchProc::spawn(
        v.fabric_file(),
        "sw0",
        v.dir(),
        &["--metrics-listen", "127.0.0.1:0"],
    );
    sw.wait_active(&[1, 2]);
    let log = sw.stderr_text();
    let addr = log
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address in {log}"))
        .to_string();
    let rcv = |b: &str, p: &str| sample(b, "vhca_switch_port_rcv_packets_total", &[("port", p)]);
    let xmit = |b: &str, p: &str| sample(b, "vhca_switch_port_xmit_packets_total", &[("port", p)]);
    let before = scrape(&addr);
    let (r1, x2) = (
        rcv(&before, "1").unwrap_or(0.0),
        xmit(&before, "2").unwrap_or(0.0),
    );
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let (qa, _qb) = rc_pair(&mut a, &mut b);
    for k in 0..4 {
        write_checked(
            &mut a,
            &mut b,
            qa,
            256 << 10,
            0x28_00 + k,
            "n0 -> n1 via sw0",
        );
    }
    // The switch publishes a copy at most every 100 ms as its loop runs.
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let body = scrape(&addr);
        let malformed = sample(&body, "vhca_switch_drops_total", &[("reason", "malformed")]);
        if rcv(&body, "1") > Some(r1 + 256.0) && malformed > Some(0.0) {
            break body;
        }
        assert!(Instant::now() < deadline, "{body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(xmit(&after, "2") > Some(x2 + 256.0), "{after}");
    assert!(
        get(
            &after,
            "vhca_switch_port_rcv_errors_total",
            &[("port", "1")]
        ) > 0.0
    );
    assert_eq!(
        get(
            &after,
            "vhca_switch_port_rcv_errors_total",
            &[("port", "2")]
        ),
        0.0
    );
    assert_eq!(
        get(&after, "vhca_switch_drops_total", &[("reason", "no_route")]),
        0.0
    );
    assert_eq!(
        get(
            &after,
            "vhca_switch_port_state",
            &[("port", "1"), ("state", "Active")]
        ),
        1.0
    );
    assert!(
        get(
            &after,
            "vhca_switch_link_value",
            &[("port", "2"), ("stage", "udp"), ("name", "tx")]
        ) > 0.0
    );
    let (status, _) = sw.stop();
    assert!(status.success(), "{status}");
}
