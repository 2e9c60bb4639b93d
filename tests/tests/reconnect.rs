//! (e) A client (QEMU) that goes and comes back 50 times, with traffic in
//! between: the device's descriptors and memory do not grow, and nothing of a
//! previous client survives (no QP, no CQ, no doorbell value, no DMA mapping).

use std::time::{Duration, Instant};

use vhca_tests::abi::bar0::CtxTable;
use vhca_tests::abi::cmd::{pbl_const, CreateCqIn, CreateCqOut, Opcode, Pbl, Status};
use vhca_tests::abi::uar::uar;
use vhca_tests::abi::verbs::QpType;
use vhca_tests::fixture::{assert_success, connect_pair, wait_n, Node};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::{Guest, GuestOptions, Hca, HcaConfig, Layout, Options, RecvWr, SendWr, Vhca};

const CYCLES: usize = 50;
const WARM: usize = 10;

/// Waits until node `i`'s descriptor count has not changed for 200 ms (it has
/// finished with the last client); returns (fds, RSS KiB, threads).
fn settle(v: &Vhca, i: usize) -> (usize, u64, usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut last = v.fd_count(i);
    let mut since = Instant::now();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let n = v.fd_count(i);
        if n != last {
            last = n;
            since = Instant::now();
        } else if since.elapsed() > Duration::from_millis(200) {
            break;
        }
    }
    (last, v.rss_kib(i), v.thread_count(i))
}

struct Previous {
    ram_base: u64,
    qpns: Vec<u32>,
    cqn: u32,
}

#[test]
fn fifty_reconnects_leak_nothing_and_keep_nothing() {
    let mut v = Vhca::spawn(Options::nodes(2));
    let mut a = Node::connect(&v, 0);
    let len = 256 << 10;
    let asrc = a.region(len, Layout::Scattered, 0);
    let adst = a.region(len, Layout::Scattered, 0);
    let mut prev: Option<Previous> = None;
    let mut warm = None;
    let started = Instant::now();
    for cycle in 0..CYCLES {
        // Alternate guest-physical bases, so an old map would be visible.
        let ram_base = if cycle % 2 == 0 {
            0x1_0000_0000
        } else {
            0x3_0000_0000
        };
        let go = GuestOptions {
            ram_base,
            ram_size: 64 << 20,
            ..GuestOptions::default()
        };
        let g = Guest::connect(v.socket(1), go)
            .unwrap_or_else(|e| panic!("cycle {cycle}: connect: {e}"));
        // No doorbell value of the last client: every slot of every page is 0.
        let mut page = vec![0u8; uar::PAGE_SIZE as usize];
        for p in 0..g.bar2_size() / u64::from(uar::PAGE_SIZE) {
            assert!(g.bar2_read(p * u64::from(uar::PAGE_SIZE), &mut page));
            let slots = &page[uar::HEADER_SIZE as usize..];
            assert!(
                slots.iter().all(|&x| x == 0),
                "cycle {cycle}: UAR {p} holds doorbell values of the previous client"
            );
        }
        let mut h = Hca::bring_up_with(g, HcaConfig::default())
            .unwrap_or_else(|e| panic!("cycle {cycle}: {e}"));
        if let Some(p) = &prev {
            for &qpn in &p.qpns {
                assert!(
                    !h.context_exists(CtxTable::Qpc, qpn).unwrap(),
                    "cycle {cycle}: QP {qpn} of the previous client survives"
                );
            }
            assert!(
                !h.context_exists(CtxTable::Cqc, p.cqn).unwrap(),
                "cycle {cycle}: CQ {} of the previous client survives",
                p.cqn
            );
            // The previous client's RAM is not mapped: a ring there is refused.
            let old = CreateCqIn {
                ring: Pbl {
                    addr: p.ram_base + (1 << 20),
                    npages: 1,
                    page_shift: 12,
                    levels: pbl_const::CONTIGUOUS as u8,
                    rsvd: 0,
                },
                eqn: 0,
                uar: 0,
                db_slot: 300,
                log2_entries: 4,
                rsvd: [0; 5],
            };
            let e = h
                .cmd::<_, CreateCqOut>(Opcode::CreateCq, &old)
                .expect_err("a CQ in the previous client's memory");
            assert_eq!(e.status(), Some(Status::BadAddress), "cycle {cycle}: {e}");
        }
        let mut b = Node::from_hca(h);
        let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
        let bbuf = b.region(len, Layout::Scattered, 0);
        // A WRITE to B and a SEND back from B.
        let d = pattern(cycle as u64, len);
        a.write(&asrc, 0, &d);
        a.hca
            .post_send(
                qa,
                &SendWr::write(1, bbuf.buf.va(0), bbuf.mr.rkey).sge(asrc.mr.sge(&asrc.buf, 0, len)),
            )
            .unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, Duration::from_secs(30)));
        assert_bytes(&b.read(&bbuf, 0, len), &d, &format!("cycle {cycle}: WRITE"));
        a.hca
            .post_recv(qa, &RecvWr::new(2, vec![adst.mr.sge(&adst.buf, 0, len)]))
            .unwrap();
        b.hca
            .post_send(qb, &SendWr::send(3).sge(bbuf.mr.sge(&bbuf.buf, 0, len)))
            .unwrap();
        assert_success(&wait_n(&mut b.hca, b.cq, 1, Duration::from_secs(30)));
        assert_success(&wait_n(&mut a.hca, a.cq, 1, Duration::from_secs(30)));
        assert_bytes(&a.read(&adst, 0, len), &d, &format!("cycle {cycle}: SEND"));
        prev = Some(Previous {
            ram_base,
            qpns: vec![qb.qpn],
            cqn: b.cq.cqn,
        });
        a.hca.destroy_qp(qa).expect("DESTROY_QP on the steady side");
        // QEMU quits.
        drop(b);
        v.assert_alive(1);
        if cycle + 1 == WARM {
            warm = Some(settle(&v, 1));
        }
    }
    let (fd0, rss0, thr0) = warm.expect("warm-up measured");
    let (fd1, rss1, thr1) = settle(&v, 1);
    eprintln!(
        "{CYCLES} reconnects in {:.1} s: after {WARM}: {fd0} fds, {rss0} KiB, {thr0} threads; after {CYCLES}: {fd1} fds, {rss1} KiB, {thr1} threads",
        started.elapsed().as_secs_f64()
    );
    assert!(
        fd1 <= fd0,
        "descriptors grew from {fd0} to {fd1} over {} reconnects",
        CYCLES - WARM
    );
    assert!(thr1 <= thr0, "threads grew from {thr0} to {thr1}");
    assert!(
        rss1 <= rss0 + 8 * 1024,
        "RSS grew from {rss0} KiB to {rss1} KiB over {} reconnects",
        CYCLES - WARM
    );
}
