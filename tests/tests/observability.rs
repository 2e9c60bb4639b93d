//! What a host operator sees of a running device (issue 17): its counters as
//! JSON, read from `--counters-file` while it serves and from the stderr log
//! (`--counters-format json`).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use vhca_tests::fixture::{clean_transfer, Node};
use vhca_tests::{Options, Vhca};

/// The counters file, once it holds an object that `ready` accepts.
fn wait_counters(path: &Path, within: Duration, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    let mut last = String::new();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            // Written by rename: never a partial object.
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("counters file is not JSON ({e}): {text:?}"));
            assert!(
                text.ends_with('\n') && text.lines().count() == 1,
                "{text:?}"
            );
            if ready(&v) {
                return v;
            }
            last = text;
        }
        assert!(
            Instant::now() < deadline,
            "{} not as expected within {within:?}; last: {last}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn n(v: &Value, set: &str, name: &str) -> u64 {
    v[set][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {set}.{name} in {v}"))
}

#[test]
fn counters_of_a_running_device_read_from_its_counters_file_and_json_log() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n0.counters.json");
    let mut opts = Options::nodes(1);
    opts.extra_args = vec![
        "--counters-file".into(),
        file.to_str().unwrap().into(),
        "--counters-every".into(),
        "1".into(),
        "--counters-format".into(),
        "json".into(),
    ];
    let mut v = Vhca::spawn(opts);
    // Written as soon as the device serves, before any guest.
    let before = wait_counters(&file, Duration::from_secs(5), |_| true);
    for set in [
        "port",
        "port_set",
        "wire_drop",
        "rx_drop",
        "nak_sent",
        "device",
        "link",
        "cmdq",
    ] {
        assert!(before[set].is_object(), "no {set} in {before}");
    }
    assert_eq!(n(&before, "port_set", "tx_packets"), 0);
    assert!(before["link"]["udp"].is_object(), "{before}");
    let t0 = before["time"].as_f64().expect("time");

    {
        let mut a = Node::connect(&v, 0);
        // 1 MiB of RC WRITE and a SEND on a loopback pair.
        clean_transfer(&mut a);
        // Read while the device runs: the next rewrite shows the traffic.
        let after = wait_counters(&file, Duration::from_secs(10), |c| {
            c["device"]["send_wqes"].as_u64() >= Some(2)
        });
        v.assert_alive(0);
        let tx = n(&after, "port_set", "tx_packets");
        assert!(tx >= 256, "1 MiB in 4 KiB packets at least, got {tx}");
        assert_eq!(n(&after, "port", "tx_packets"), tx);
        // A loopback pair: the UDP link loops the node's own packets back.
        assert!(
            after["link"]["udp"]["loopback"].as_u64() > Some(0),
            "{after}"
        );
        assert!(after["time"].as_f64().unwrap() > t0);
        assert!(n(&after, "cmdq", "pi_writes") > 0);
    }
    let status = v.stop(0, Duration::from_secs(5)).expect("stopped");
    assert!(status.success(), "{status}");
    // The stderr log: every counters line is one JSON object; the last one is
    // the exit report, and the file holds the same counters.
    let err = v.stderr(0);
    let lines: Vec<Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.len() >= 2, "periodic and exit reports: {err}");
    let last = lines.last().unwrap();
    let fin = wait_counters(&file, Duration::from_secs(1), |_| true);
    assert_eq!(last["port_set"], fin["port_set"]);
    assert!(n(last, "device", "send_wqes") >= 2);
}

/// The records of a capture file as it is now, all whole; `None` while a
/// record is cut short (still partly in the device's buffer).
fn whole_records(path: &Path) -> Option<usize> {
    use transport::wire::pcap::PcapReader;
    let bytes = std::fs::read(path).ok()?;
    let reader = PcapReader::new(&bytes).ok()?;
    let mut n = 0;
    for r in reader {
        if r.ok()?.truncated {
            return None;
        }
        n += 1;
    }
    Some(n)
}

#[test]
fn a_running_devices_capture_reads_whole_once_idle() {
    use vhca_tests::abi::verbs::QpType;
    use vhca_tests::fixture::{assert_success, connect_pair, wait_n};
    use vhca_tests::{Layout, RecvWr, SendWr};

    let mut v = Vhca::spawn(Options::nodes(2).capture());
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let src = a.region(4096, Layout::Scattered, 0);
    let dst = b.region(4096, Layout::Scattered, 0);
    b.hca
        .post_recv(qb, &RecvWr::new(1, vec![dst.mr.sge(&dst.buf, 0, 4096)]))
        .unwrap();
    // One small SEND and its ACK: far less than a write buffer holds.
    a.hca
        .post_send(qa, &SendWr::send(2).sge(src.mr.sge(&src.buf, 0, 100)))
        .unwrap();
    let t = Duration::from_secs(10);
    assert_success(&wait_n(&mut a.hca, a.cq, 1, t));
    assert_success(&wait_n(&mut b.hca, b.cq, 1, t));
    // Nothing more is sent; within a second both packets are in the file of
    // the device that keeps running.
    let file = v.node(0).capture.clone().expect("capture");
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let n = whole_records(&file);
        if n >= Some(2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: {n:?} whole records while the device runs",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    v.assert_alive(0);
    if let Ok(out) = std::process::Command::new("tshark")
        .arg("-r")
        .arg(&file)
        .output()
    {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !err.contains("cut short"), "{err}");
        assert!(String::from_utf8_lossy(&out.stdout).lines().count() >= 2);
    }
}
