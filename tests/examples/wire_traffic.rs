//! The traffic `scripts/wire-dissect-test.sh` captures on the underlay and
//! dissects with `tools/wireshark/vhca.lua` (issue 28 item 4): two `vhca`
//! processes on UDP loopback, played by the test driver, in three fabrics one
//! after the other:
//!
//! - `plain`: cabled back to back, no fabric key (keepalives, link flow
//!   control packets, IB packets);
//! - `keyed`: the same with a fabric key (every IB packet carries the key's
//!   trailer);
//! - `switch-keyed`: each node cabled to a port of one `vhca switch`, keyed.
//!
//! In each, over one RC QP pair: an RDMA WRITE of 64 KiB (FIRST, MIDDLE, LAST
//! and ACKs), a 3000-byte SEND back (SEND ONLY), and an RDMA READ of 8 KiB
//! (READ REQUEST and RESPONSEs), each checked byte for byte. Before each
//! fabric's traffic it prints one line
//!
//! ```text
//! FABRIC <name> keyed=<0|1> ports=<port>,<port>,...
//! ```
//!
//! with every UDP port of that fabric (nodes and switch ports), so the script
//! can tell each fabric's datagrams apart in one capture. `VHCA_BIN` names the
//! `vhca` binary (else a debug build).

use std::time::Duration;

use vhca_tests::fixture::{assert_success, wait_n, Node};
use vhca_tests::switch_proc::{rc_pair, star_fabric, write_then_send, SwitchProc};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::{Layout, Options, SendWr, Vhca};

const KEY: &str = "3a";

/// The UDP ports of the fabric file: every `127.0.0.1:PORT` in it.
fn ports(v: &Vhca) -> Vec<u16> {
    let text = std::fs::read_to_string(v.fabric_file()).expect("read the fabric file");
    let mut out: Vec<u16> = text
        .split("127.0.0.1:")
        .skip(1)
        .filter_map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

fn key_header(keyed: bool) -> String {
    if keyed {
        format!("key = \"{}\"\n", KEY.repeat(32))
    } else {
        String::new()
    }
}

/// Two nodes cabled back to back, or each to a port of one switch.
fn fabric(switched: bool, keyed: bool) -> (Vhca, Option<SwitchProc>) {
    if switched {
        let (v, sw) = star_fabric(2, 2, &key_header(keyed));
        (v, Some(sw))
    } else {
        let opts = Options {
            top_toml: "[[link]]\nends = [\"n0\", \"n1\"]\n".into(),
            fabric_header: key_header(keyed),
            ..Options::nodes(2)
        };
        (Vhca::spawn(opts), None)
    }
}

/// An RDMA READ of `len` bytes of b's memory into a's, checked.
fn read_checked(a: &mut Node, b: &mut Node, qa: vhca_tests::QpH, len: usize, seed: u64) {
    let src = b.region(len, Layout::Scattered, 0);
    let dst = a.region(len, Layout::Scattered, 0);
    let data = pattern(seed, len);
    b.write(&src, 0, &data);
    a.hca
        .post_send(
            qa,
            &SendWr::read(9, src.buf.va(0), src.mr.rkey).sge(dst.mr.sge(&dst.buf, 0, len)),
        )
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, Duration::from_secs(30)));
    assert_bytes(&a.read(&dst, 0, len), &data, "RDMA READ");
}

fn run(name: &str, switched: bool, keyed: bool) {
    let (mut v, sw) = fabric(switched, keyed);
    let list: Vec<String> = ports(&v).iter().map(u16::to_string).collect();
    println!(
        "FABRIC {name} keyed={} ports={}",
        u8::from(keyed),
        list.join(",")
    );
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let qs = rc_pair(&mut a, &mut b);
    write_then_send(&mut a, &mut b, qs, 64 << 10, 0x28_4000, name);
    read_checked(&mut a, &mut b, qs.0, 8 << 10, 0x28_4100);
    // A second of keepalives and periodic flow-control packets.
    std::thread::sleep(Duration::from_millis(1200));
    drop((a, b));
    for i in 0..v.len() {
        v.stop(i, Duration::from_secs(5));
    }
    drop(sw);
    eprintln!("wire_traffic: {name}: done");
}

fn main() {
    run("plain", false, false);
    run("keyed", false, true);
    run("switch-keyed", true, true);
}
