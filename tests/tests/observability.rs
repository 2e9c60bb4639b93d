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
        "1s".into(),
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
        // Issue 26: the port's SMA and QP0 path (`device::mgmt`).
        "mgmt",
    ] {
        assert!(before[set].is_object(), "no {set} in {before}");
    }
    assert_eq!(n(&before, "mgmt", "sma_drop_bad_mkey"), 0);
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

/// Options for one node keeping its counters in `file`.
fn with_counters_file(file: &Path) -> Options {
    let mut opts = Options::nodes(1);
    opts.extra_args = vec!["--counters-file".into(), file.to_str().unwrap().into()];
    opts
}

/// Issue 25 item 5: the counters file's temporary file is created, never
/// opened: a symlink planted at the temporary name main used
/// (`FILE.tmp`) is not followed, and the file it points to is untouched
/// (vhca often runs as root).
#[test]
fn counters_file_does_not_follow_a_symlink_planted_at_its_temporary_name() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n0.counters.json");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "root's file\n").unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join("n0.counters.json.tmp")).unwrap();
    let mut v = Vhca::spawn(with_counters_file(&file));
    // Two rewrites: the first at once, the next a second later.
    let first = wait_counters(&file, Duration::from_secs(5), |_| true);
    let t0 = first["time"].as_f64().unwrap();
    wait_counters(&file, Duration::from_secs(5), |c| {
        c["time"].as_f64().unwrap() > t0
    });
    v.assert_alive(0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file\n");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file(), "{:?}", meta.file_type());
    // The planted link is still there, still pointing at the victim.
    assert_eq!(
        std::fs::read_link(dir.path().join("n0.counters.json.tmp")).unwrap(),
        victim
    );
}

/// Issue 25 item 5: a FIFO at the counters file's path and one at the
/// temporary name main used (`FILE.tmp`) do not stop the data path: the device moves
/// traffic within a bounded wait and the FIFO at the path is replaced by the
/// counters object without being opened.
#[test]
fn a_fifo_at_the_counters_file_or_its_temporary_name_does_not_stall_the_data_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("n0.counters.json");
    for p in [file.clone(), dir.path().join("n0.counters.json.tmp")] {
        vhca_tests::sys::mkfifo(&p).unwrap_or_else(|e| panic!("mkfifo {p:?}: {e}"));
    }
    let v = Vhca::spawn(with_counters_file(&file));
    // The traffic runs on a thread of its own so that a stalled data path
    // fails this test within the wait rather than at the watchdog.
    let (tx, rx) = std::sync::mpsc::channel();
    let v = std::sync::Arc::new(std::sync::Mutex::new(v));
    let t = {
        let v = std::sync::Arc::clone(&v);
        std::thread::spawn(move || {
            let mut a = Node::connect(&v.lock().unwrap(), 0);
            clean_transfer(&mut a);
            let _ = tx.send(());
        })
    };
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => t.join().unwrap(),
        Err(e) => {
            // Unblock the device so the thread and the process end.
            v.lock().unwrap().kill(0);
            panic!("no 1 MiB transfer within 60 s with FIFOs at the counters file: {e:?}");
        }
    }
    // The FIFO at the path was replaced (by rename) with a whole object.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !std::fs::symlink_metadata(&file)
        .unwrap()
        .file_type()
        .is_file()
    {
        assert!(Instant::now() < deadline, "the FIFO at the path stayed");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_counters(&file, Duration::from_secs(5), |_| true);
    v.lock().unwrap().assert_alive(0);
}
