//! A fabric across two hosts (issue 27 item 3): two network namespaces
//! joined by a veth pair stand for two hosts on an ordinary network, half
//! the fabric on each side, the fabric key on. Side A runs HCAs n0, n1 and
//! switch sw0; side B runs n2, n3 and sw1; every cable crosses the veth
//! (n0, n1 on sw1; n2, n3 on sw0; sw0:3 to sw1:3), so every datagram of the
//! fabric rides the underlay. The link MTU follows it: QUERY_PORT's
//! max/active MTU is 1024 on a 1500-byte veth and 4096 on a 9000-byte one,
//! chosen from the interface; RC WRITE and SEND between the sides arrive
//! byte for byte; neither namespace fragments or reassembles one IP
//! datagram (/proc/net/snmp FragCreates, ReasmReqds) and no link refuses
//! one as too big (`tx_error`, where EMSGSIZE is counted). A QP path MTU
//! above the port's is refused (EINVAL, as rxe's `rxe_qp_chk_attr`), and a
//! fabric file asking for more than the underlay carries stops the node
//! with one line.
//!
//! Needs root (`ip netns`): without it the tests say SKIP and pass, unless
//! `VHCA_REQUIRE_NETNS=1` (CI runs as root).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use vhca_tests::abi::verbs::{Mtu, QpType};
use vhca_tests::fixture::Node;
use vhca_tests::netns::{Hosts, A_ADDR, B_ADDR};
use vhca_tests::process::{vhca_binary, wrapped, Build};
use vhca_tests::switch_proc::{rc_pair, write_then_send, SwitchProc};
use vhca_tests::util::udp_counter;
use vhca_tests::{ConnOpts, Options, QpInit, Remote, Vhca};

const KEY: &str = "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c";

/// The two hosts, or `None` after a SKIP line when the kernel refuses a
/// namespace and the run does not require one.
fn hosts(mtu: u32, test: &str) -> Option<Hosts> {
    let h = Hosts::new(mtu);
    if h.is_none() {
        let required = std::env::var_os("VHCA_REQUIRE_NETNS").is_some_and(|v| v == "1");
        assert!(
            !required,
            "VHCA_REQUIRE_NETNS=1 but ip netns add is refused"
        );
        println!("SKIP {test}: ip netns add refused (needs root)");
    }
    h
}

/// The fabric file: n0, n1 and sw0 on A; n2, n3 and sw1 on B; every cable
/// across the veth; keyed; `extra` top-level lines.
fn fabric_text(extra: &str) -> String {
    let mut s = format!("key = \"{KEY}\"\n{extra}\n");
    for (i, addr) in [A_ADDR, A_ADDR, B_ADDR, B_ADDR].iter().enumerate() {
        let _ = write!(
            s,
            "[[node]]\nname = \"n{i}\"\nlid = {}\nguid = \"{:#018x}\"\naddress = \"{addr}:{}\"\n",
            i + 1,
            0x0002_c903_0027_0000u64 + i as u64,
            18_000 + i
        );
    }
    for (k, addr) in [A_ADDR, B_ADDR].iter().enumerate() {
        let list: Vec<String> = (0..3)
            .map(|p| format!("\"{addr}:{}\"", 18_100 + 10 * k + p))
            .collect();
        let _ = write!(
            s,
            "[[switch]]\nname = \"sw{k}\"\nguid = \"{:#018x}\"\nports = 3\naddress = [{}]\nlid = {}\n",
            0x0002_c903_0027_9000u64 + k as u64,
            list.join(", "),
            0x40 + k
        );
    }
    for (a, b) in [
        ("n0", "sw1:1"),
        ("n1", "sw1:2"),
        ("n2", "sw0:1"),
        ("n3", "sw0:2"),
        ("sw0:3", "sw1:3"),
    ] {
        let _ = write!(s, "[[link]]\nends = [\"{a}\", \"{b}\"]\n");
    }
    s
}

/// Node i's side.
fn side(h: &Hosts, i: usize) -> &str {
    if i < 2 {
        &h.a
    } else {
        &h.b
    }
}

/// The keyed cross-host fabric over a veth of `mtu` bytes: ports at IB MTU
/// `want`, RC WRITE and SEND across byte for byte at the largest sizes, no
/// fragment, no refused datagram.
fn cross_host_fabric(mtu: u32, want: Mtu, test: &str) {
    let Some(h) = hosts(mtu, test) else {
        return;
    };
    let before = [Hosts::fragments(&h.a), Hosts::fragments(&h.b)];
    let wrap: HashMap<usize, Vec<String>> = (0..4).map(|i| (i, Hosts::wrap(side(&h, i)))).collect();
    let mut v = Vhca::spawn(Options {
        fabric_text: Some(fabric_text("")),
        wrap,
        ..Options::nodes(4)
    });
    let mut sws: Vec<SwitchProc> = [&h.a, &h.b]
        .iter()
        .enumerate()
        .map(|(k, ns)| {
            SwitchProc::spawn_wrapped(
                v.fabric_file(),
                &format!("sw{k}"),
                v.dir(),
                &[],
                Some(&Hosts::wrap(ns)),
            )
        })
        .collect();
    for sw in &mut sws {
        sw.wait_active(&[1, 2, 3]);
    }
    let mut hcas: Vec<Node> = (0..4).map(|i| Node::connect(&v, i)).collect();
    for (i, n) in hcas.iter_mut().enumerate() {
        let p = n.hca.query_port(1).unwrap();
        assert_eq!(
            (p.max_mtu, p.active_mtu),
            (want.raw(), want.raw()),
            "n{i}: QUERY_PORT MTU over a {mtu}-byte underlay"
        );
    }
    // AD-03: a path MTU above the port's is refused at RTR, as rxe refuses
    // ib_modify_qp with path_mtu > the port's max_mtu (EINVAL).
    if want != Mtu::M4096 {
        let (lo, hi) = hcas.split_at_mut(2);
        let (a, b) = (&mut lo[0], &mut hi[0]);
        let qa = a
            .hca
            .create_qp(&QpInit::new(QpType::Rc, a.pd, a.cq))
            .unwrap();
        let o = ConnOpts {
            mtu: Some(want.raw() + 1),
            ..ConnOpts::default()
        };
        a.hca.qp_to_init(qa, &o).unwrap();
        let r = Remote {
            lid: b.lid(),
            qpn: 0x100,
            psn: 0,
        };
        assert!(
            a.hca.qp_to_rtr(qa, Some(r), &o).is_err(),
            "path MTU above the port's MTU accepted"
        );
    }
    // Every HCA of A with every HCA of B, both ways: a 1 MiB WRITE (1024
    // packets of the MTU at 1024) and a multi-packet SEND back.
    let len = 1 << 20;
    for (i, j) in [(0, 2), (1, 3), (3, 0), (2, 1)] {
        let (x, y) = (i.min(j), i.max(j));
        let (lo, hi) = hcas.split_at_mut(y);
        let (nx, ny) = (&mut lo[x], &mut hi[0]);
        let (a, b) = if i < j { (nx, ny) } else { (ny, nx) };
        let qs = rc_pair(a, b);
        write_then_send(
            a,
            b,
            qs,
            len,
            0x2730 + i as u64,
            &format!("n{i} -> n{j} over {mtu}"),
        );
    }
    drop(hcas);
    for (k, sw) in sws.iter_mut().enumerate() {
        let (status, c) = sw.stop();
        assert!(status.success(), "sw{k}: {status}");
        for p in c["ports"].as_array().unwrap() {
            let udp: &Value = &p["link"]["udp"];
            assert_eq!(udp["tx_error"], 0, "sw{k} port {}: {c}", p["port"]);
            assert!(udp["tx"].as_u64().unwrap() > 0, "sw{k}: {c}");
        }
    }
    for i in 0..4 {
        v.stop(i, Duration::from_secs(5));
        let e = v.stderr(i);
        assert_eq!(udp_counter(&e, "tx_error"), 0, "n{i}: {e}");
        assert!(
            e.contains(&format!(
                "underlay MTU {mtu} bytes: IB MTU {}",
                128u32 << want.raw()
            )),
            "n{i} says what it chose: {e}"
        );
    }
    let after = [Hosts::fragments(&h.a), Hosts::fragments(&h.b)];
    assert_eq!(
        before, after,
        "(FragCreates, ReasmReqds) of A and B: no IP fragmentation"
    );
}

#[test]
fn ad_03_a_fabric_across_a_1500_byte_veth_runs_at_ib_mtu_1024_without_ip_fragments() {
    cross_host_fabric(
        1500,
        Mtu::M1024,
        "ad_03_a_fabric_across_a_1500_byte_veth_runs_at_ib_mtu_1024_without_ip_fragments",
    );
}

#[test]
fn ad_03_a_fabric_across_a_9000_byte_veth_runs_at_ib_mtu_4096_without_ip_fragments() {
    cross_host_fabric(
        9000,
        Mtu::M4096,
        "ad_03_a_fabric_across_a_9000_byte_veth_runs_at_ib_mtu_4096_without_ip_fragments",
    );
}

/// The fabric file may lower the MTU, never raise it past the underlay:
/// `mtu = 2048` over a 1500-byte veth stops the node with one line.
#[test]
fn a_fabric_file_mtu_above_what_the_underlay_carries_stops_the_node_with_one_line() {
    let test = "a_fabric_file_mtu_above_what_the_underlay_carries_stops_the_node_with_one_line";
    let Some(h) = hosts(1500, test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let fabric = dir.path().join("fabric.toml");
    std::fs::write(&fabric, fabric_text("mtu = 2048")).unwrap();
    let mut child = wrapped(Some(&Hosts::wrap(&h.a)), &vhca_binary(Build::Debug))
        .arg("--socket")
        .arg(dir.path().join("n0.sock"))
        .arg("--fabric")
        .arg(&fabric)
        .args(["--node", "n0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("vhca started with mtu = 2048 over a 1500-byte underlay");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success());
    let line = err
        .lines()
        .find(|l| l.contains("mtu = 2048"))
        .unwrap_or_else(|| panic!("no mtu line: {err}"));
    assert!(
        line.contains("carries at most 1024 without IP fragmentation"),
        "{line}"
    );
}
