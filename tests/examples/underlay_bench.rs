//! Two `vhca` nodes cabled back to back across a 1500-byte veth between two
//! network namespaces (two hosts on an ordinary network; IB MTU 1024, issue
//! 27 item 3) against the same pair on UDP loopback (IB MTU 4096), both with
//! the fabric key, in the same run: the set-ups alternate round by round, so
//! the host's load moves both alike. Per round and set-up: RC WRITE of
//! 64 KiB messages, 16 in flight, one QP (bytes per second at the
//! requester's completions), and an 8-byte SEND ping-pong (round trip p50).
//! Run by `scripts/bench-underlay.sh` (as root: `ip netns`), which builds an
//! optimised `vhca` and passes it in `VHCA_BIN`.
//!
//! `VHCA_BENCH_ROUNDS=N` (default 3), `VHCA_BENCH_QUICK=1` (short runs).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use vhca_tests::fixture::{bench_pair, ping_pong_p50, transfer_rate, Node, Transfer};
use vhca_tests::netns::{Hosts, A_ADDR, B_ADDR};
use vhca_tests::process::free_udp_ports;
use vhca_tests::{Options, Vhca};

const KEY: &str = "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c";

fn quick() -> bool {
    std::env::var_os("VHCA_BENCH_QUICK").is_some()
}

/// n0 and n1 cabled to each other, keyed: across the veth of `hosts` (n0 on
/// side A, n1 on B) or, without, on loopback.
fn fabric(hosts: Option<&Hosts>) -> Vhca {
    let lo = Ipv4Addr::LOCALHOST;
    let ports = free_udp_ports(2).expect("free UDP ports");
    let addrs = match hosts {
        Some(_) => [(A_ADDR, 18_000), (B_ADDR, 18_001)],
        None => [(lo, ports[0]), (lo, ports[1])],
    };
    let mut text = format!("key = \"{KEY}\"\n");
    for (i, (ip, port)) in addrs.iter().enumerate() {
        text.push_str(&format!(
            "[[node]]\nname = \"n{i}\"\nlid = {}\nguid = \"{:#018x}\"\naddress = \"{ip}:{port}\"\n",
            i + 1,
            0x0002_c903_0027_b000u64 + i as u64
        ));
    }
    text.push_str("[[link]]\nends = [\"n0\", \"n1\"]\n");
    let wrap: HashMap<usize, Vec<String>> = match hosts {
        Some(h) => [(0, Hosts::wrap(&h.a)), (1, Hosts::wrap(&h.b))].into(),
        None => HashMap::new(),
    };
    Vhca::spawn(Options {
        fabric_text: Some(text),
        wrap,
        ..Options::nodes(2)
    })
}

/// (WRITE bytes per second, ping-pong p50, the port's IB MTU) on a fresh
/// pair.
fn measure(hosts: Option<&Hosts>) -> (f64, Duration, usize) {
    let v = fabric(hosts);
    let (msg, slots) = (64 << 10, 32);
    let (mut a, mut b, qa, qb, src, dst) = bench_pair(&v, msg, slots);
    let mtu = 128usize << a.hca.query_port(1).unwrap().active_mtu;
    let total = if quick() { 1_000 } else { 6_000 };
    let run = |a: &mut Node, n: usize| {
        transfer_rate(a, &[qa], Transfer::Write, &src, &dst, msg, slots, n, 16)
    };
    run(&mut a, 200); // warm-up
    let rate = run(&mut a, total);
    let n = if quick() { 300 } else { 2_000 };
    let p50 = ping_pong_p50(&mut a, qa, &mut b, qb, n);
    (rate, p50, mtu)
}

fn main() {
    let rounds: usize = std::env::var("VHCA_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let hosts = Hosts::new(1500).expect("ip netns add refused: run as root");
    let (mut tput, mut lat) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let (w0, l0, m0) = measure(None);
        let (w1, l1, m1) = measure(Some(&hosts));
        let (t, l) = (w1 / w0, l1.as_secs_f64() / l0.as_secs_f64());
        println!(
            "round {r}: loopback (MTU {m0}) WRITE {:.0} MB/s p50 {:.1} us | 1500-byte veth (MTU {m1}) WRITE {:.0} MB/s p50 {:.1} us | throughput {t:.2}x, latency {l:.2}x",
            w0 / 1e6,
            l0.as_secs_f64() * 1e6,
            w1 / 1e6,
            l1.as_secs_f64() * 1e6,
        );
        tput.push(t);
        lat.push(l);
    }
    let range = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        format!("{min:.2}x .. {max:.2}x")
    };
    println!(
        "veth / loopback over {rounds} rounds: WRITE throughput {}, ping-pong p50 latency {}",
        range(&tput),
        range(&lat)
    );
}
