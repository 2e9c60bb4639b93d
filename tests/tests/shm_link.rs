//! The shared-memory link between `vhca` processes on one host (issue 30 item
//! 1, ARCHITECTURE.md §6): nodes with the same `host` in the fabric file move
//! their packets through rings in `shm_dir`, the others over UDP, in one
//! fabric. Lossy rings (the fault stage above them) still deliver RC traffic
//! byte-exact, a node off the host stays reachable, and a co-located peer
//! killed mid-stream costs only its own traffic.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use vhca_tests::abi::verbs::{QpType, WcStatus};
use vhca_tests::fixture::{assert_success, connect_pair, connect_pair_with, wait_n, Node, Region};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::verbs::wc_status;
use vhca_tests::{ConnOpts, Layout, Options, QpInit, RecvWr, SendWr, Vhca};

/// `n` nodes, those in `on_host` with `host = "h"`, rings in the run folder.
fn options(n: usize, on_host: &[usize]) -> Options {
    let mut o = Options::nodes(n);
    o.top_toml = "shm_dir = \".\"".into();
    o.node_toml = on_host
        .iter()
        .map(|&i| (i, "host = \"h\"".to_string()))
        .collect::<HashMap<_, _>>();
    o
}

fn write_wr(id: u64, src: &Region, dst: &Region, off: usize, len: usize) -> SendWr {
    SendWr::write(id, dst.buf.va(off), dst.mr.rkey).sge(src.mr.sge(&src.buf, off, len))
}

/// The value of `key` in node `i`'s last `shm` counter line (printed at exit).
fn shm_counter(v: &Vhca, i: usize, key: &str) -> Option<u64> {
    let text = v.stderr(i);
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains(&format!("shm n{i}:")))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == key)?;
    words.next()?.trim_end_matches(':').parse().ok()
}

/// The traffic of both three-node tests: n0 WRITEs `len` bytes of pattern
/// `seed` to n1 (the rings, described as `rings`) and to n2 (UDP), n1 SENDs
/// them back over the rings; every copy is checked byte for byte. The nodes
/// are stopped after it, so their counter lines are in their stderr.
fn write_to_b_and_c_and_send_back(v: &mut Vhca, len: usize, seed: u64, rings: &str) {
    let mut a = Node::connect(v, 0);
    let mut b = Node::connect(v, 1);
    let mut c = Node::connect(v, 2);
    let (ab, ba) = connect_pair(&mut a, &mut b, QpType::Rc);
    let (ac, _) = connect_pair(&mut a, &mut c, QpType::Rc);
    let src = a.region(len, Layout::Scattered, 0);
    let bdst = b.region(len, Layout::Scattered, 0);
    let cdst = c.region(len, Layout::Scattered, 0);
    let d = pattern(seed, len);
    a.write(&src, 0, &d);
    a.hca
        .post_send(ab, &write_wr(1, &src, &bdst, 0, len))
        .unwrap();
    a.hca
        .post_send(ac, &write_wr(2, &src, &cdst, 0, len))
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 2, Duration::from_secs(60)));
    assert_bytes(&b.read(&bdst, 0, len), &d, &format!("WRITE over {rings}"));
    assert_bytes(&c.read(&cdst, 0, len), &d, "WRITE over UDP");
    // SEND back over the rings.
    let back = a.region(len, Layout::Scattered, 0);
    a.hca
        .post_recv(ab, &RecvWr::new(9, vec![back.mr.sge(&back.buf, 0, len)]))
        .unwrap();
    b.hca
        .post_send(ba, &SendWr::send(3).sge(bdst.mr.sge(&bdst.buf, 0, len)))
        .unwrap();
    assert_success(&wait_n(&mut b.hca, b.cq, 1, Duration::from_secs(60)));
    assert_success(&wait_n(&mut a.hca, a.cq, 1, Duration::from_secs(60)));
    assert_bytes(&a.read(&back, 0, len), &d, &format!("SEND over {rings}"));
    drop((a, b, c));
    for i in 0..3 {
        v.stop(i, Duration::from_secs(5));
    }
}

#[test]
fn shm_rings_with_faults_and_a_udp_node_move_rc_traffic_byte_exact_between_vhca_processes() {
    // n0 and n1 share a host (rings, with drop/dup/reorder at each link);
    // n2 is elsewhere (UDP) in the same fabric.
    let mut o = options(3, &[0, 1]);
    for i in 0..2 {
        o.faults
            .insert(i, "drop=0.05,dup=0.02,reorder=0.02,seed=7".into());
    }
    let mut v = Vhca::spawn(o);
    write_to_b_and_c_and_send_back(&mut v, 4 << 20, 30, "lossy rings");
    // The rings carried n0's and n1's traffic; n2 has none.
    assert!(
        shm_counter(&v, 0, "tx").is_some_and(|n| n > 1000),
        "{}",
        v.stderr(0)
    );
    assert!(
        shm_counter(&v, 1, "rx").is_some_and(|n| n > 1000),
        "{}",
        v.stderr(1)
    );
    assert_eq!(shm_counter(&v, 0, "corrupt_index"), Some(0));
    assert_eq!(shm_counter(&v, 2, "tx"), None);
    // The fault stage keeps the CRCs in the engine: nothing is lent in place.
    assert_eq!(shm_counter(&v, 1, "rx_lent"), Some(0));
    // Stopped nodes remove their rings.
    let rings = std::fs::read_dir(v.dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "ring")
        })
        .count();
    assert_eq!(rings, 0);
}

/// Issue 30, WF-09 on the wire: without faults, capture or a fabric key the
/// rings' nodes leave the CRCs to the link. A's WRITE to B crosses the ring
/// without them (B's link vouches, B's engine skips only that check), its
/// WRITE to C (another host: UDP) gets them filled in by A's link and C's
/// engine checks them; both arrive byte-exact, and so does B's SEND back.
/// Both ring directions build the data packets' payloads in their slots
/// (`tx_in_slot`) and lend them there (`rx_lent`).
#[test]
fn shm_rings_carry_packets_without_crcs_and_the_link_fills_them_in_for_the_udp_node() {
    let mut v = Vhca::spawn(options(3, &[0, 1]));
    write_to_b_and_c_and_send_back(&mut v, 1 << 20, 31, "the rings");
    let e0 = v.stderr(0);
    assert!(e0.contains("CRCs left to the link"), "{e0}");
    // 1 MiB to C is 256 packets at MTU 4096, each filled in by A's link.
    assert!(
        shm_counter(&v, 0, "tx_crcs_filled").is_some_and(|n| n >= 256),
        "{e0}"
    );
    // B took A's WRITE from the ring unchecked; A took B's SEND so.
    assert!(
        shm_counter(&v, 1, "rx_crcs_vouched").is_some_and(|n| n >= 256),
        "{}",
        v.stderr(1)
    );
    assert!(
        shm_counter(&v, 0, "rx_crcs_vouched").is_some_and(|n| n >= 256),
        "{e0}"
    );
    // Both were built with their payload in the ring slot and lent in it
    // on the other side, the payload placed from there: one copy a side,
    // checked byte for byte above. All but one: a node opens its ring to a
    // peer when it first sends there (`ShmLink::way`), so A's first packet
    // to B, the WRITE's first, was built before the ring was open (B's
    // ring to A was opened by its ACKs). Resends (probes) add more in-slot
    // packets on some runs, none on others.
    for i in 0..2 {
        for (key, min) in [("tx_in_slot", 255), ("rx_lent", 256)] {
            assert!(
                shm_counter(&v, i, key).is_some_and(|n| n >= min),
                "{key}: {}",
                v.stderr(i)
            );
        }
        assert_eq!(shm_counter(&v, i, "tx_slot_lost"), Some(0));
    }
    // C (no rings) computes and checks CRCs itself.
    assert!(!v.stderr(2).contains("CRCs left to the link"));
}

#[test]
fn shm_peer_killed_mid_stream_costs_only_its_own_traffic() {
    let mut v = Vhca::spawn(options(3, &[0, 1, 2]));
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let mut c = Node::connect(&v, 2);
    // 4.2 ms ACK timeout, 3 retries: the dead peer's WQEs fail soon.
    let o = ConnOpts {
        timeout: 10,
        retry_cnt: 3,
        ..ConnOpts::default()
    };
    let ia = QpInit::rc(a.pd, a.cq);
    let ic = QpInit::rc(c.pd, c.cq);
    let (ac, _) = connect_pair_with(&mut a, &ia, &mut c, &ic, &o);
    let (ab, _) = connect_pair(&mut a, &mut b, QpType::Rc);
    let len = 1 << 20;
    let src = a.region(8 * len, Layout::Scattered, 0);
    let bdst = b.region(8 * len, Layout::Scattered, 0);
    let cdst = c.region(8 * len, Layout::Scattered, 0);
    let d = pattern(31, 8 * len);
    a.write(&src, 0, &d);
    // A stream to C, and C dies under it (SIGKILL: its rings stay behind).
    let to_c: Vec<SendWr> = (0..8)
        .map(|i| write_wr(100 + i as u64, &src, &cdst, i * len, len))
        .collect();
    a.hca.post_send_batch(ac, &to_c).unwrap();
    v.kill(2);
    drop(c);
    // Meanwhile a stream to B, over its own ring.
    let to_b: Vec<SendWr> = (0..8)
        .map(|i| write_wr(200 + i as u64, &src, &bdst, i * len, len))
        .collect();
    a.hca.post_send_batch(ab, &to_b).unwrap();
    let t0 = Instant::now();
    let got = a.hca.wait_cqes(a.cq, 16, Duration::from_secs(30));
    assert_eq!(got.len(), 16, "every WQE completes: {got:#?}");
    let of = |qpn: u32| got.iter().filter(move |c| c.qp_num == qpn);
    assert!(of(ab.qpn).all(|c| c.status == WcStatus::Success.raw()));
    assert!(
        of(ac.qpn).any(|c| wc_status(c) == Some(WcStatus::RetryExcErr)),
        "the dead peer's QP fails: {got:#?}"
    );
    eprintln!("both streams done in {:?}", t0.elapsed());
    assert_bytes(&b.read(&bdst, 0, 8 * len), &d, "A to B while C died");
    v.assert_alive(0);
    v.assert_alive(1);
    // And B is still served afterwards.
    a.hca
        .post_send(ab, &write_wr(300, &src, &bdst, 0, len))
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, Duration::from_secs(30)));
    drop((a, b));
    v.stop(0, Duration::from_secs(5));
    // The survivor's sends to C went into a ring nobody read: counted, and
    // nothing was found corrupt.
    assert!(
        shm_counter(&v, 0, "tx").is_some_and(|n| n > 0),
        "{}",
        v.stderr(0)
    );
    assert_eq!(shm_counter(&v, 0, "corrupt_index"), Some(0));
}
