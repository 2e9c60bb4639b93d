//! (b) Resizing CQs (CQ-04) and SRQs against a real `vhca` pair: a CQ resized
//! up and down with completions not yet polled, traffic going on between
//! resizes, every completion arriving exactly once and in order; an SRQ grown
//! with WQEs posted, every WQE consumed; and the bad resizes refused with
//! nothing changed.

use std::time::Duration;

use vhca_tests::abi::cmd::{Pbl, ResizeCqIn, Status};
use vhca_tests::fixture::{assert_success, connect_pair_with, wait_n, Node};
use vhca_tests::hca::CmdError;
use vhca_tests::{ConnOpts, CqH, Layout, Options, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);

fn two_nodes() -> (Vhca, Node, Node) {
    let v = Vhca::spawn(Options::nodes(2));
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

#[track_caller]
fn status(r: Result<u32, CmdError>) -> Status {
    match r {
        Ok(n) => panic!("resize succeeded ({n} entries), expected a failure"),
        Err(e) => e.status().unwrap_or_else(|| panic!("not a status: {e}")),
    }
}

/// Waits until `n` CQEs sit unpolled in the ring.
fn wait_ready(n: &mut Node, cq: CqH, want: u32) {
    let deadline = std::time::Instant::now() + T;
    while n.hca.cq_ready(cq) < want {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {want} CQEs in the ring",
            n.hca.cq_ready(cq)
        );
        n.hca.service();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// xorshift: the test's choices, reproducible.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn cq_04_resize_cq_with_unpolled_completions_keeps_every_completion_once_in_order() {
    let (_v, mut a, mut b) = two_nodes();
    // The sender's send CQ: small, resized all along.
    let cq = a.hca.create_cq(3, 0).expect("CREATE_CQ");
    let ia = QpInit::rc(a.pd, cq).wr(64, 1);
    let ib = QpInit::rc(b.pd, b.cq).wr(1, 256);
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
    let rbuf = b.region(4096, Layout::Scattered, 0);
    let sbuf = a.region(4096, Layout::Scattered, 0);

    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut next_id = 0u64; // next wr_id to post
    let mut expect_id = 0u64; // next wr_id to poll
    let mut log2 = 3u32;
    let mut unpolled = 0u32;
    let mut resizes = 0;
    let mut refused = 0;
    for round in 0..60 {
        // Post what fits in the ring with the unpolled ones.
        // (The test driver's SQ holds 64 WQEs until their CQEs are polled.)
        let room = ((1u32 << log2) - unpolled).min(32);
        let k = if room == 0 {
            0
        } else {
            1 + rng.below(u64::from(room)) as u32
        };
        for _ in 0..k {
            b.hca
                .post_recv(qb, &RecvWr::new(0, vec![rbuf.mr.sge(&rbuf.buf, 0, 64)]))
                .unwrap();
        }
        for _ in 0..k {
            a.hca
                .post_send(
                    qa,
                    &SendWr::send(next_id).sges(vec![sbuf.mr.sge(&sbuf.buf, 0, 64)]),
                )
                .unwrap();
            next_id += 1;
        }
        assert_success(&wait_n(&mut b.hca, b.cq, k as usize, T));
        unpolled += k;
        wait_ready(&mut a, cq, unpolled);

        // Poll some, leaving the rest in the ring across the resize.
        let p = rng.below(u64::from(unpolled) + 1) as usize;
        let got = a.hca.poll_cq(cq, p);
        assert_eq!(got.len(), p, "round {round}");
        assert_success(&got);
        for c in &got {
            assert_eq!(c.wr_id, expect_id, "round {round}: order");
            expect_id += 1;
        }
        unpolled -= p as u32;

        // Too small for what is outstanding: refused, nothing changes.
        if unpolled > 1 {
            let small = 31 - (unpolled - 1).leading_zeros(); // 2^small < unpolled
            assert_eq!(
                status(a.hca.resize_cq(cq, small)),
                Status::BadParam,
                "round {round}: {unpolled} unpolled into {}",
                1u32 << small
            );
            refused += 1;
        }
        // A new size that holds them (sometimes the same size).
        let min = 32 - unpolled.max(1).saturating_sub(1).leading_zeros();
        let new = (min.max(1) + rng.below(4) as u32).min(6);
        let n = a.hca.resize_cq(cq, new).expect("RESIZE_CQ");
        assert_eq!(n, 1 << new);
        assert_eq!(a.hca.cq_entries(cq), 1 << new);
        log2 = new;
        resizes += 1;
        // The unpolled ones are all there, no more, no less.
        assert_eq!(a.hca.cq_ready(cq), unpolled, "round {round}: after resize");
    }
    // The rest, in order; then nothing more.
    let rest = wait_n(&mut a.hca, cq, unpolled as usize, T);
    assert_success(&rest);
    for c in &rest {
        assert_eq!(c.wr_id, expect_id);
        expect_id += 1;
    }
    assert_eq!(expect_id, next_id, "every completion exactly once");
    std::thread::sleep(Duration::from_millis(50));
    assert!(a.hca.poll_cq(cq, 16).is_empty(), "no duplicate");
    assert!(
        resizes == 60 && refused > 10,
        "{resizes} resizes, {refused} refused"
    );
}

#[test]
fn cq_04_bad_cq_resizes_are_refused_and_change_nothing() {
    let (_v, mut a, _b) = two_nodes();
    let cq = a.hca.create_cq(4, 0).expect("CREATE_CQ");
    let max_log2 = a.hca.device_attr().max_cqe.ilog2();
    let ring = a.hca.alloc_ring(4, 6, Layout::Scattered);
    let too_big = ResizeCqIn {
        cqn: cq.cqn,
        log2_entries: max_log2 as u8 + 1,
        rsvd: [0; 3],
        ring: ring.pbl,
    };
    assert_eq!(
        status(a.hca.resize_cq_raw(cq, &too_big, ring)),
        Status::LimitExceeded
    );
    assert_eq!(
        status(a.hca.resize_cq(CqH { cqn: 0x7f_fff0 }, 4)),
        Status::NotFound
    );
    let ring = a.hca.alloc_ring(4, 6, Layout::Scattered);
    let bad_rsvd = ResizeCqIn {
        cqn: cq.cqn,
        log2_entries: 4,
        rsvd: [1, 0, 0],
        ring: ring.pbl,
    };
    assert_eq!(
        status(a.hca.resize_cq_raw(cq, &bad_rsvd, ring)),
        Status::BadParam
    );
    let ring = a.hca.alloc_ring(4, 6, Layout::Scattered);
    let outside = ResizeCqIn {
        cqn: cq.cqn,
        log2_entries: 4,
        rsvd: [0; 3],
        ring: Pbl {
            addr: 1 << 50,
            npages: 1,
            page_shift: 12,
            levels: 0,
            rsvd: 0,
        },
    };
    assert_eq!(
        status(a.hca.resize_cq_raw(cq, &outside, ring)),
        Status::BadAddress
    );
    assert_eq!(a.hca.cq_entries(cq), 16, "unchanged");
    // Still the old CQ: a resize that fits works.
    assert_eq!(a.hca.resize_cq(cq, 6).unwrap(), 64);
    a.hca.destroy_cq(cq).expect("DESTROY_CQ");
}

#[test]
fn resize_srq_grows_with_posted_wqes_and_every_wqe_is_consumed() {
    let (_v, mut a, mut b) = two_nodes();
    let srq = b.hca.create_srq(b.pd, 4, 1, 0).expect("CREATE_SRQ");
    let ia = QpInit::rc(a.pd, a.cq);
    let ib = QpInit::rc(b.pd, b.cq).srq(srq);
    let (qa, _qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
    let n = 16usize;
    let rbuf = b.region(n * 256, Layout::Scattered, 0);
    let sbuf = a.region(n * 256, Layout::Scattered, 0);
    let recv = |i: usize| RecvWr::new(i as u64, vec![rbuf.mr.sge(&rbuf.buf, i * 256, 256)]);

    // Full at 4, grown to 16 with the 4 posted, then filled.
    let first: Vec<RecvWr> = (0..4).map(recv).collect();
    b.hca.post_srq_recv(srq, &first).unwrap();
    assert!(b.hca.post_srq_recv(srq, &[recv(4)]).is_err(), "full at 4");
    assert_eq!(b.hca.resize_srq(srq, 12, 4).expect("RESIZE_SRQ"), 16);
    assert_eq!(b.hca.query_srq(srq).unwrap().max_wr, 16);
    let more: Vec<RecvWr> = (4..n).map(recv).collect();
    b.hca.post_srq_recv(srq, &more).unwrap();
    // Shrinking below what is posted: refused, nothing changes.
    assert_eq!(status(b.hca.resize_srq(srq, 8, 3)), Status::BadParam);
    // Bad sizes.
    assert_eq!(status(b.hca.resize_srq(srq, 0, 4)), Status::LimitExceeded);
    assert_eq!(status(b.hca.resize_srq(srq, 20, 4)), Status::BadParam);
    let max = b.hca.device_attr().max_srq_wr;
    assert_eq!(
        status(b.hca.resize_srq(srq, max + 1, 4)),
        Status::LimitExceeded
    );
    assert_eq!(
        status(b.hca.resize_srq(vhca_tests::SrqH { srqn: 0x7f_fff0 }, 8, 3)),
        Status::NotFound
    );
    let q = b.hca.query_srq(srq).unwrap();
    assert_eq!((q.max_wr, q.wqe_count), (16, n as u32));

    for i in 0..n {
        a.write(&sbuf, i * 256, &[i as u8; 100]);
        a.hca
            .post_send(
                qa,
                &SendWr::send(i as u64).sges(vec![sbuf.mr.sge(&sbuf.buf, i * 256, 100)]),
            )
            .unwrap();
    }
    assert_success(&wait_n(&mut a.hca, a.cq, n, T));
    let got = wait_n(&mut b.hca, b.cq, n, T);
    assert_success(&got);
    // One QP: the SRQ's WQEs in ring order, each once.
    let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (0..n as u64).collect::<Vec<_>>());
    for i in 0..n {
        assert_eq!(b.read(&rbuf, i * 256, 100), vec![i as u8; 100]);
    }
    assert_eq!(b.hca.query_srq(srq).unwrap().wqe_count, 0);
    // Empty now: shrinking works too.
    assert_eq!(b.hca.resize_srq(srq, 2, 1).expect("shrink"), 2);
}
