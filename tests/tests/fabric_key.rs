//! The fabric key on real processes (issue 13 deliverable 4, ARCHITECTURE.md §9):
//! two `vhca` processes started with the same `--fabric-key-file` move RC
//! traffic byte-exact, while datagrams a third party sends at one of them from
//! a forged fabric address (a valid UD SEND without a tag, with a made-up tag,
//! too short to hold one) are dropped and counted, and none reaches the QP it
//! was aimed at. The same forged SEND without a fabric key is delivered: that
//! is the hole the key closes, and the proof that the forgeries are real ones.
//! And the log: a warning when a node is off the host and there is no key, or
//! when others can read the key file; the key itself is never logged.

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, DethRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::verbs::QpType;
use vhca_tests::fixture::{assert_success, connect_pair, wait_n, Node};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::{ConnOpts, Layout, Options, RecvWr, SendWr, Vhca};

/// Forgeries of each kind sent at the victim.
const FORGED: usize = 300;

/// A UD SEND Only from `slid` to `dlid`'s QP `qpn` with the right Q_Key: what
/// a node of the fabric would send.
fn ud_send(slid: u16, dlid: u16, qpn: u32, qkey: u32, psn: u32, payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: 0,
            dlid,
            slid,
        },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: qpn,
                ack_req: false,
                psn,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr { qkey, src_qp: 7 }),
                ..ExtHeaders::default()
            },
            payload,
        },
    };
    let mut buf = vec![0; repr.buffer_len()];
    let n = repr.emit(&mut buf).expect("a valid UD packet");
    buf.truncate(n);
    buf
}

/// The `name value` pairs of the `auth` line of a counter report.
fn auth_counter(report: &str, name: &str) -> Option<u64> {
    let line = report.lines().rev().find(|l| l.contains("auth (key "))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == name)?;
    words.next()?.parse().ok()
}

/// What the forgeries moved in the victim's QUERY_COUNTERS device set, as its
/// driver reads them: the `fabric_key_*` counters, after minus before.
type GuestDeltas = Vec<(String, u64)>;

/// The device set's `fabric_key_*` counters as the guest reads them.
fn guest_key_counters(n: &mut Node) -> GuestDeltas {
    let values = n
        .hca
        .query_counters(CounterSet::Device)
        .expect("QUERY_COUNTERS of the device set");
    CounterSet::Device
        .names()
        .into_iter()
        .zip(values)
        .filter(|(name, _)| name.starts_with("fabric_key_"))
        .collect()
}

/// The value of `name` in `d`.
fn delta(d: &GuestDeltas, name: &str) -> u64 {
    d.iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in the device set: {d:?}"))
        .1
}

/// Three nodes; node 2 is stopped and its UDP address taken by the attacker,
/// who forges datagrams at node 0 as node 2 (on a network, a UDP source
/// address is forged at will). Returns the fabric, the victim, the UD
/// receive completions the forgeries caused and the fabric key counters they
/// moved as the victim's driver reads them.
fn attack(keyed: bool) -> (Vhca, usize, String, GuestDeltas) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let key = dir.path().join("fabric.key");
    std::fs::write(&key, "9f".repeat(32) + "\n").expect("write the key file");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    let mut opts = Options::nodes(3);
    if keyed {
        opts.extra_args = vec!["--fabric-key-file".into(), key.display().to_string()];
    }
    let mut v = Vhca::spawn(opts);
    let t = Duration::from_secs(30);
    let o = ConnOpts::default();
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);

    // Keyed nodes (or plain ones) move RC traffic byte-exact.
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let len = 1 << 20;
    let src = a.region(len, Layout::Scattered, 0);
    let dst = b.region(len, Layout::Scattered, 0);
    let data = pattern(0x5eed, len);
    a.write(&src, 0, &data);
    let write = |a: &mut Node, id| {
        a.hca
            .post_send(
                qa,
                &SendWr::write(id, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len)),
            )
            .unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, t));
    };
    write(&mut a, 1);
    assert_bytes(&b.read(&dst, 0, len), &data, "RC WRITE between keyed nodes");
    let _ = qb;

    // The victim's UD QP, with receives posted for whatever arrives.
    let ua = a.qp(QpType::Ud);
    a.hca.qp_to_rts_from_reset(ua, None, &o).unwrap();
    let inbox = a.region(64 << 10, Layout::Scattered, 0);
    for i in 0..16u64 {
        a.hca
            .post_recv(
                ua,
                &RecvWr::new(100 + i, vec![inbox.mr.sge(&inbox.buf, 0, 4096)]),
            )
            .unwrap();
    }

    let before = guest_key_counters(&mut a);
    // The attacker takes node 2's address.
    v.kill(2);
    let port = v.node(2).udp_port;
    let victim = format!("127.0.0.1:{}", v.node(0).udp_port);
    let sock = UdpSocket::bind(("127.0.0.1", port)).expect("bind node 2's address");
    let (slid, dlid) = (v.lid(2), v.lid(0));
    let mut sent = 0;
    for i in 0..FORGED {
        let p = ud_send(
            slid,
            dlid,
            ua.qpn,
            o.qkey,
            i as u32,
            b"forged by a third party",
        );
        // Untagged: what a node without the key sends.
        sock.send_to(&p, &victim).unwrap();
        // With a made-up trailer: a fresh sequence number and a guessed tag.
        let mut guess = p.clone();
        guess.extend_from_slice(&(u64::MAX / 2 + i as u64).to_be_bytes());
        guess.extend_from_slice(&pattern(i as u64, 16));
        sock.send_to(&guess, &victim).unwrap();
        // Long enough for a packet, too short for a packet and a trailer.
        sock.send_to(&p[..40], &victim).unwrap();
        sent += 3;
        if i % 50 == 49 {
            // Paced, so that the kernel's socket buffer loses none of them.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let got = a.hca.wait_cqes(a.cq, FORGED, Duration::from_secs(2));
    let summary = format!(
        "{} forged datagrams sent, {} UD receives completed",
        sent,
        got.len()
    );
    eprintln!("fabric_key (keyed: {keyed}): {summary}");
    let after = guest_key_counters(&mut a);
    let moved: GuestDeltas = after
        .iter()
        .zip(&before)
        .map(|((n, x), (_, y))| (n.clone(), x - y))
        .collect();
    eprintln!("fabric_key (keyed: {keyed}): QUERY_COUNTERS moved by the forgeries: {moved:?}");
    if keyed {
        // After the flood the keyed nodes still work.
        a.write(&src, 0, &pattern(0xbeef, len));
        write(&mut a, 2);
        assert_bytes(
            &b.read(&dst, 0, len),
            &pattern(0xbeef, len),
            "RC WRITE after the forgeries",
        );
    }
    drop(a);
    drop(b);
    (v, got.len(), summary, moved)
}

#[test]
fn fabric_key_forged_datagrams_are_dropped_and_counted_keyed_traffic_flows() {
    let (mut v, delivered, summary, guest) = attack(true);
    assert_eq!(delivered, 0, "a forgery reached the QP: {summary}");
    // The victim's driver sees each kind of forgery counted (QUERY_COUNTERS,
    // the device set; issue 13).
    assert_eq!(delta(&guest, "fabric_key_rx_untagged"), FORGED as u64);
    assert_eq!(delta(&guest, "fabric_key_rx_bad_tag"), FORGED as u64);
    assert_eq!(delta(&guest, "fabric_key_rx_short"), FORGED as u64);
    assert_eq!(delta(&guest, "fabric_key_rx_replay"), 0);
    assert_eq!(delta(&guest, "fabric_key_rx_wrong_sender"), 0);
    v.assert_alive(0);
    // The exit report has the stage's counters.
    v.stop(0, Duration::from_secs(5));
    let log = v.stderr_tail(0, 64 << 10);
    assert!(
        log.contains("datagrams authenticated with fabric key"),
        "no key in the log:\n{log}"
    );
    let c = |n| auth_counter(&log, n).unwrap_or_else(|| panic!("no {n} in:\n{log}"));
    eprintln!(
        "fabric_key: victim's auth counters: rx_verified {} drop_rx_untagged {} drop_rx_bad_tag {} drop_rx_short {} drop_rx_replay {}",
        c("rx_verified"),
        c("drop_rx_untagged"),
        c("drop_rx_bad_tag"),
        c("drop_rx_short"),
        c("drop_rx_replay")
    );
    assert_eq!(c("drop_rx_untagged"), FORGED as u64, "{log}");
    assert_eq!(c("drop_rx_bad_tag"), FORGED as u64, "{log}");
    assert_eq!(c("drop_rx_short"), FORGED as u64, "{log}");
    assert_eq!(c("drop_rx_replay"), 0, "{log}");
    // The RC traffic went through the stage: the victim tagged the WRITEs it
    // sent and verified the ACKs that came back.
    assert!(c("tx_tagged") > 0 && c("rx_verified") > 0, "{log}");
}

#[test]
fn fabric_key_without_a_key_the_same_forgery_is_delivered() {
    let (mut v, delivered, summary, guest) = attack(false);
    // No key, no stage: the counters are there and stay 0.
    assert!(guest.iter().all(|(_, d)| *d == 0), "{guest:?}");
    assert_eq!(guest.len(), 7, "{guest:?}");
    // Every untagged forgery is a valid SEND from a fabric address: 16 posted
    // receives complete (the rest find no receive and are dropped).
    assert_eq!(delivered, 16, "{summary}");
    v.stop(0, Duration::from_secs(5));
    let log = v.stderr_tail(0, 64 << 10);
    assert!(auth_counter(&log, "rx_verified").is_none(), "{log}");
}

/// Runs `vhca` for node `a` of `fabric` until its stderr holds `until` (or 20
/// s pass), kills it, and returns its stderr.
fn log_of_start(fabric: &std::path::Path, extra: &[&str], until: &str) -> String {
    let dir = fabric.parent().expect("the fabric file's folder");
    let stderr_path = dir.join("a.stderr");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child =
        std::process::Command::new(vhca_tests::process::vhca_binary(vhca_tests::Build::Debug))
            .arg("--socket")
            .arg(dir.join("a.sock"))
            .arg("--fabric")
            .arg(fabric)
            .args(["--node", "a"])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start vhca");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut log = String::new();
    while std::time::Instant::now() < deadline && !log.contains(until) {
        std::thread::sleep(Duration::from_millis(20));
        log = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("vhca exited ({status}):\n{log}");
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    log
}

#[test]
fn fabric_key_warnings_off_host_without_a_key_and_a_key_file_others_can_read() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let port = vhca_tests::process::free_udp_ports(1).expect("a free port")[0];
    // Node b is off this host (TEST-NET-1): without a key, anyone there could
    // inject packets, and vhca says so.
    let fabric = dir.path().join("fabric.toml");
    let nodes = format!(
        "[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:{port}\"\n\n\
         [[node]]\nname = \"b\"\nlid = 2\nguid = 2\naddress = \"192.0.2.7:18515\"\n"
    );
    std::fs::write(&fabric, &nodes).expect("write the fabric file");
    let log = log_of_start(&fabric, &[], "no fabric key");
    assert!(
        log.contains("node b is at 192.0.2.7:18515, off this host, and there is no fabric key"),
        "{log}"
    );
    // A key file everyone can read: used, with a warning; no off-host warning.
    let key = dir.path().join("fabric.key");
    std::fs::write(&key, "3c".repeat(32)).expect("write the key file");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let id = device::fabric::FabricKey::from_hex(&"3c".repeat(32))
        .expect("a key")
        .id();
    let k = key.display().to_string();
    let log = log_of_start(&fabric, &["--fabric-key-file", &k], "authenticated with");
    assert!(log.contains("is readable by everyone (mode 644)"), "{log}");
    assert!(log.contains(&format!("fabric key {id} from {k}")), "{log}");
    assert!(!log.contains("off this host"), "{log}");
    assert!(
        !log.contains(&"3c".repeat(32)),
        "the key is never logged:\n{log}"
    );
}
