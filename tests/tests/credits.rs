//! RL-13 between two `vhca` processes on UDP loopback: end-to-end credits
//! through the real data path. B's receive queue holds few WQEs; A's SENDs
//! stay within the credits B's ACKs report, one goes alone at zero (and meets
//! an RNR NAK with the longest RNR timer), and B posting receives sends the
//! credit update that ends A's RNR wait long before the timer would. The
//! device counters (QUERY_COUNTERS) show the one sent alone, the RNR NAK and
//! the update.

use std::time::{Duration, Instant};

use vhca_tests::abi::verbs::{QpType, WcOpcode};
use vhca_tests::fixture::{assert_success, connect_pair_with, Node};
use vhca_tests::util::pattern;
use vhca_tests::{ConnOpts, Layout, Options, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);
const MSG: usize = 256;

fn port(n: &mut Node, name: &str) -> u64 {
    n.hca
        .port_counter(name)
        .expect("QUERY_COUNTERS")
        .unwrap_or_else(|| panic!("no port counter {name}"))
}

#[test]
fn rl_13_sends_keep_to_the_credits_and_a_posted_receive_ends_the_rnr_wait() {
    let v = Vhca::spawn(Options::nodes(2));
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    // The longest RNR timer (655.36 ms): only the credit update ends the
    // wait within the time asserted below.
    let o = ConnOpts {
        min_rnr_timer: 0,
        ..ConnOpts::default()
    };
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq);
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &o);
    let src = a.region(8 * MSG, Layout::Scattered, 0);
    let dst = b.region(8 * MSG, Layout::Scattered, 0);
    let data = pattern(13, 8 * MSG);
    a.write(&src, 0, &data);
    let recv = |b: &mut Node, i: usize| {
        let wr = RecvWr::new(i as u64, vec![dst.mr.sge(&dst.buf, i * MSG, MSG)]);
        b.hca.post_recv(qb, &wr).unwrap();
    };
    let send = |a: &mut Node, i: usize| {
        let wr = SendWr::send(i as u64).sge(src.mr.sge(&src.buf, i * MSG, MSG));
        a.hca.post_send(qa, &wr).unwrap();
    };
    // Three receives; one SEND: its ACK reports the two left.
    for i in 0..3 {
        recv(&mut b, i);
    }
    // B's device takes the three WQEs from its ring before the SEND comes
    // (a WQE still in the ring is not a credit yet).
    std::thread::sleep(Duration::from_millis(100));
    send(&mut a, 0);
    assert_success(&a.cqes(1, T));
    // Four SENDs on two credits: two complete; the third goes alone once
    // they are acknowledged, finds no WQE (RNR NAK, 655 ms); the fourth waits.
    for i in 1..5 {
        send(&mut a, i);
    }
    assert_success(&a.cqes(2, T));
    let t0 = Instant::now();
    while port(&mut b, "rnr_naks_sent") == 0 {
        assert!(t0.elapsed() < T, "no RNR NAK for the SEND sent alone");
        std::thread::sleep(Duration::from_millis(5));
    }
    // (A busy host may let A's loss probe resend that SEND before the NAK
    // is back: a second RNR NAK for it.)
    let rnr = port(&mut b, "rnr_naks_sent");
    assert!(port(&mut a, "credit_probes") >= 1);
    assert!(a.hca.poll_cq(a.cq, 4).is_empty());
    // Two receives: B's credit update ends A's RNR wait; both complete well
    // inside the 655 ms the RNR timer would take.
    let t1 = Instant::now();
    recv(&mut b, 3);
    recv(&mut b, 4);
    assert_success(&a.cqes(2, T));
    let took = t1.elapsed();
    assert!(took < Duration::from_millis(400), "took {took:?}");
    // (The fourth may still go alone before B's device has taken the second
    // WQE from its ring: another RNR NAK, ended the same way.)
    assert!(port(&mut b, "rnr_naks_sent") >= rnr);
    assert!(port(&mut b, "credit_acks_sent") >= 1);
    let r = b.cqes(5, T);
    assert_success(&r);
    assert!(r.iter().all(|c| c.opcode == WcOpcode::Recv.raw()));
    assert_eq!(b.read(&dst, 0, 5 * MSG), data[..5 * MSG]);
}
