//! What one data-path round costs the device with many idle QPs (issue 12,
//! docs/benchmarks-history.md "Doorbell summary"): `Hca::run_once` on a `VecMemory` guest
//! with 1, 100, 1000 and 10 000 RC QPs created and nothing posted, the case of
//! a busy device that also holds many idle connections. Timed in the thread's
//! own CPU time (CLOCK_THREAD_CPUTIME_ID), so a loaded host stretches it less
//! than wall time.
//!
//!     cargo run --release -p device --example round_cost
//!
//! Written against APIs that predate the doorbell summary (the QP slots start
//! at 16 and summary words are never written), so the same file measures the
//! full scan of an older tree too.

use std::net::UdpSocket;
use std::time::Duration;

use device::abi;
use device::fabric::{FabricFile, Node, UdpLink};
use device::glue::VecDoorbells;
use device::hca::{Cq, DbSlot, Hca, Interrupts, Qp, SlotOwner};
use device::port::Port;
use device::ring::Ring;
use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::VecMemory;
use transport::verbs::{QpCap, QpInit, QpType};

const BASE: u64 = 0x10_0000;
const LID: u16 = 7;

struct NoIrq;

impl Interrupts for NoIrq {
    fn trigger(&self, _: u16) {}
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid, exclusively
    // borrowed `ts` and keeps no pointer to it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let f = FabricFile::from_nodes(vec![Node {
        name: "a".into(),
        lid: LID,
        guid: 0x0002_c903_0000_0007,
        address: sock.local_addr().expect("address"),
    }])
    .expect("fabric");
    let link = UdpLink::from_socket(&f, "a", sock).expect("link");
    let limits = Limits {
        max_qp: 20_000,
        ..Limits::default()
    };
    let mut e = Engine::new(PortConfig::new(LID, 0x0002_c903_0000_0007), limits);
    let pd = e.mrs().alloc_pd().expect("pd");
    let cq = e.create_cq().expect("cq");
    let mut hca = Hca::new(Port::new(e, Box::new(link)));
    let mut mem = VecMemory::new(BASE, 1 << 20);
    let uars = 64usize; // 10 000 QPs and 10 000 CQs take 42 pages
    let db = VecDoorbells::new(uars);
    // Every idle QP's rings share the same pages: they are never read.
    let sq_pages: Vec<u64> = (0..2).map(|i| BASE + i * 4096).collect();
    let rq_pages = vec![BASE + 2 * 4096];
    let per_page = u64::from(abi::uar::uar::SLOTS - 16);
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let rounds = 2_000u32;
    println!("data-path round with N idle RC QPs ({rounds} rounds each, thread CPU time)");
    let mut made = 0u64;
    for n in [1u64, 100, 1_000, 10_000] {
        while made < n {
            let qpn = hca
                .port
                .engine_mut()
                .create_qp(QpInit {
                    qp_type: QpType::Rc,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap,
                    sq_sig_all: false,
                })
                .expect("create_qp");
            let slot = DbSlot {
                uar: 1 + (made / per_page) as u32,
                slot: (16 + made % per_page) as u16,
            };
            let mut qp = Qp {
                qp_type: abi::verbs::QpType::Rc,
                pdn: pd,
                send_cqn: cq,
                recv_cqn: cq,
                srqn: None,
                sq: Ring::new(&mem, sq_pages.clone(), 12, 7, 6, 20).expect("sq"),
                rq: Some(Ring::new(&mem, rq_pages.clone(), 12, 6, 6, 20).expect("rq")),
                db: slot,
                sq_fetched: 0,
                rq_fetched: 0,
                sq_stalled: None,
                rq_stalled: None,
                cap,
                sq_sig_all: false,
                sq_pbl: Default::default(),
                rq_pbl: Default::default(),
            };
            qp.sync_indices(&db);
            hca.slots.insert(slot, SlotOwner::Qp(qpn));
            hca.qps.insert(qpn, qp);
            made += 1;
        }
        let now = Duration::from_millis(1);
        for _ in 0..100 {
            hca.run_once(&mut mem, &db, &NoIrq, now);
        }
        let t = thread_cpu();
        for _ in 0..rounds {
            hca.run_once(&mut mem, &db, &NoIrq, now);
        }
        let per = (thread_cpu() - t) / rounds;
        println!("{n:>6} QPs: {:>8.2} us per round", per.as_secs_f64() * 1e6);
    }
    // And one idle CQ per QP (the CQ rings share one page too): what the
    // round's arm-word scan of every CQ costs (`datapath::write_cqes`).
    let first = 1 + (made / per_page) as u32 + 1;
    for i in 0..made {
        let cqn = hca.port.engine_mut().create_cq().expect("cq");
        let slot = DbSlot {
            uar: first + (i / per_page) as u32,
            slot: (16 + i % per_page) as u16,
        };
        hca.cqs.insert(
            cqn,
            Cq {
                ring: Ring::new(&mem, vec![BASE + 3 * 4096], 12, 6, 6, 20).expect("cq ring"),
                eqn: 0,
                db: slot,
                pi: 0,
                last_arm: 0,
                overflowed: false,
                events: 0,
                armed: None,
                pbl: Default::default(),
            },
        );
        hca.slots.insert(slot, SlotOwner::Cq(cqn));
    }
    let now = Duration::from_millis(1);
    let t = thread_cpu();
    for _ in 0..rounds {
        hca.run_once(&mut mem, &db, &NoIrq, now);
    }
    let per = (thread_cpu() - t) / rounds;
    println!(
        "{made:>6} QPs + {made} CQs: {:>8.2} us per round",
        per.as_secs_f64() * 1e6
    );
}
