//! The data path on a `VecMemory` guest: WQEs written into rings as the driver
//! does, doorbells stored into doorbell pages, CQEs and EQEs read back with the
//! owner convention, interrupts recorded (ARCHITECTURE.md §2 steps 2 and 5).

use std::cell::RefCell;
use std::net::UdpSocket;
use std::time::Duration;

use device::abi;
use device::abi::layout::Field;
use device::fabric::{FabricFile, Node, UdpLink};
use device::glue::VecDoorbells;
use device::hca::{Cq, DbSlot, Doorbells, Eq, Hca, Interrupts, Qp, SlotOwner};
use device::port::Port;
use device::ring::Ring;
use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::{Memory, VecMemory};
use transport::verbs::{
    Access, AddressVector, AttrMask, Mtu, MwType, QpAttr, QpCap, QpInit, QpState, QpType, Time,
};

const BASE: u64 = 0x10_0000;
const MEM: usize = 16 << 20;
const LID: u16 = 7;
/// The first doorbell slot (below it: the page's header and summary); the
/// helpers below number slots from it.
const FIRST: u16 = abi::uar::uar::FIRST_SLOT as u16;

#[derive(Default)]
struct Irqs(RefCell<Vec<u16>>);

impl Interrupts for Irqs {
    fn trigger(&self, vector: u16) {
        self.0.borrow_mut().push(vector);
    }
}

struct Dev {
    hca: Hca,
    mem: VecMemory,
    db: VecDoorbells,
    irq: Irqs,
    /// Next free guest page.
    next: u64,
    key: u32,
    pd: u32,
}

fn pages(d: &mut Dev, n: u64) -> Vec<u64> {
    let v = (0..n).map(|i| d.next + i * 4096).collect();
    d.next += n * 4096;
    v
}

fn dev() -> Dev {
    dev_with(Limits::default())
}

fn dev_with(limits: Limits) -> Dev {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let f = FabricFile::from_nodes(vec![Node {
        name: "a".into(),
        lid: LID,
        guid: 0x0002_c903_0000_0007,
        address: sock.local_addr().unwrap(),
    }])
    .unwrap();
    let link = UdpLink::from_socket(&f, "a", sock).unwrap();
    let mut e = Engine::new(PortConfig::new(LID, 0x0002_c903_0000_0007), limits);
    let pd = e.mrs().alloc_pd().unwrap();
    let data_pages = (0..1024u64).map(|i| BASE + (8 << 20) + i * 4096).collect();
    let key = e
        .mrs()
        .reg_mr(pd, BASE + (8 << 20), 4 << 20, Access(15), 4096, data_pages)
        .unwrap();
    Dev {
        hca: Hca::new(Port::new(e, Box::new(link))),
        mem: VecMemory::new(BASE, MEM),
        db: VecDoorbells::new(4),
        irq: Irqs::default(),
        next: BASE,
        key,
        pd,
    }
}

fn run(d: &mut Dev, rounds: usize) {
    for _ in 0..rounds {
        let now = Duration::from_millis(1);
        d.hca.run_once(&mut d.mem, &d.db, &d.irq, now);
    }
}

fn add_eq(d: &mut Dev, eqn: u32, vector: u16, slot: u16) {
    let p = pages(d, 1);
    let ring = Ring::new(&d.mem, p, 12, 4, 6, 20).unwrap();
    d.hca.eqs.insert(
        eqn,
        Eq {
            ring,
            vector,
            db: DbSlot {
                uar: 0,
                slot: FIRST + slot,
            },
            pi: 0,
            last_arm: 0,
            users: 0,
            overflows: 0,
            pbl: Default::default(),
        },
    );
    let db = d.hca.eqs[&eqn].db;
    d.hca.slots.insert(db, SlotOwner::Eq(eqn));
}

fn add_cq(d: &mut Dev, eqn: u32, slot: u16) -> u32 {
    let cqn = d.hca.port.engine_mut().create_cq().unwrap();
    let p = pages(d, 4);
    let ring = Ring::new(&d.mem, p, 12, 6, 8, 20).unwrap();
    d.hca.cqs.insert(
        cqn,
        Cq {
            ring,
            eqn,
            db: DbSlot {
                uar: 1,
                slot: FIRST + slot,
            },
            pi: 0,
            last_arm: 0,
            overflowed: false,
            events: 0,
            armed: None,
            pbl: Default::default(),
        },
    );
    let db = d.hca.cqs[&cqn].db;
    d.hca.slots.insert(db, SlotOwner::Cq(cqn));
    cqn
}

fn add_qp(d: &mut Dev, cq: u32, slot: u16) -> u32 {
    add_qp_rq(d, cq, slot, 6)
}

/// A QP whose RQ holds `2^rq_log2` WQEs of 64 bytes.
fn add_qp_rq(d: &mut Dev, cq: u32, slot: u16, rq_log2: u32) -> u32 {
    let cap = QpCap {
        max_send_wr: 64,
        max_recv_wr: 1 << rq_log2,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    let e = d.hca.port.engine_mut();
    let qpn = e
        .create_qp(QpInit {
            qp_type: QpType::Rc,
            pd: d.pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let sq = pages(d, 2);
    let rq = pages(d, 1 << rq_log2.saturating_sub(6));
    let mut qp = Qp {
        qp_type: abi::verbs::QpType::Rc,
        pdn: d.pd,
        send_cqn: cq,
        recv_cqn: cq,
        srqn: None,
        sq: Ring::new(&d.mem, sq, 12, 7, 6, 20).unwrap(), // 64 x 128 B
        rq: Some(Ring::new(&d.mem, rq, 12, 6, rq_log2, 20).unwrap()), // 64 B each
        db: DbSlot {
            uar: 1,
            slot: FIRST + slot,
        },
        sq_fetched: 0,
        rq_fetched: 0,
        sq_stalled: None,
        rq_stalled: None,
        cap,
        sq_sig_all: false,
        sq_pbl: Default::default(),
        rq_pbl: Default::default(),
    };
    qp.sync_indices(&d.db);
    d.hca.slots.insert(qp.db, SlotOwner::Qp(qpn));
    d.hca.qps.insert(qpn, qp);
    qpn
}

/// Brings two QPs of the device to RTS, connected to each other over its own
/// LID (loopback, AD-04).
fn connect(d: &mut Dev, a: u32, b: u32) {
    let e = d.hca.port.engine_mut();
    for (q, r) in [(a, b), (b, a)] {
        let mut at = QpAttr {
            state: Some(QpState::Init),
            port_num: 1,
            access: Access(15),
            ..QpAttr::default()
        };
        e.modify_qp(
            q,
            &at,
            AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS,
            Time(0),
        )
        .unwrap();
        at.state = Some(QpState::Rtr);
        at.path_mtu = Mtu::M1024;
        at.dest_qp_num = r;
        at.max_dest_rd_atomic = 4;
        at.min_rnr_timer = 1;
        at.av = AddressVector {
            dlid: LID,
            ..AddressVector::default()
        };
        e.modify_qp(
            q,
            &at,
            AttrMask::STATE
                | AttrMask::AV
                | AttrMask::PATH_MTU
                | AttrMask::DEST_QPN
                | AttrMask::RQ_PSN
                | AttrMask::MAX_DEST_RD_ATOMIC
                | AttrMask::MIN_RNR_TIMER,
            Time(0),
        )
        .unwrap();
        at.state = Some(QpState::Rts);
        at.timeout = 14;
        at.retry_cnt = 7;
        at.rnr_retry = 7;
        at.max_rd_atomic = 4;
        e.modify_qp(
            q,
            &at,
            AttrMask::STATE
                | AttrMask::TIMEOUT
                | AttrMask::RETRY_CNT
                | AttrMask::RNR_RETRY
                | AttrMask::SQ_PSN
                | AttrMask::MAX_QP_RD_ATOMIC,
            Time(0),
        )
        .unwrap();
    }
}

fn put<T: Field>(buf: &mut Vec<u8>, v: T) {
    let at = buf.len();
    buf.resize(at + T::SIZE, 0);
    v.put(&mut buf[at..]);
}

/// Writes a send WQE at the QP's next producer index and rings the doorbell.
fn post_send(d: &mut Dev, qpn: u32, wqe: &[u8]) {
    let qp = &d.hca.qps[&qpn];
    let (pi, rq) = qp.db.load(&d.db);
    d.mem.write(qp.sq.entry_addr(pi), wqe).unwrap();
    qp.db.produce(&d.db, 0, pi.wrapping_add(1));
    let _ = rq;
}

fn post_recv(d: &mut Dev, qpn: u32, wr_id: u64, addr: u64, len: u32) {
    let qp = &d.hca.qps[&qpn];
    let (_, pi) = qp.db.load(&d.db);
    let mut w = Vec::new();
    put(
        &mut w,
        abi::wqe::RecvCtrl {
            wr_id,
            num_sge: 1,
            rsvd: 0,
        },
    );
    put(
        &mut w,
        abi::wqe::Sge {
            addr,
            length: len,
            lkey: d.key,
        },
    );
    d.mem
        .write(qp.rq.as_ref().unwrap().entry_addr(pi), &w)
        .unwrap();
    qp.db.produce(&d.db, 4, pi.wrapping_add(1));
}

/// A signaled SEND WQE of one SGE (`len` bytes at `addr`, the test MR).
fn signaled_send(d: &Dev, wr_id: u64, addr: u64, len: u32) -> Vec<u8> {
    let mut w = Vec::new();
    put(&mut w, ctrl(wr_id, 2, abi::verbs::send_flags::SIGNALED, 1));
    put(
        &mut w,
        abi::wqe::Sge {
            addr,
            length: len,
            lkey: d.key,
        },
    );
    w
}

fn ctrl(wr_id: u64, opcode: u8, flags: u8, len: u16) -> abi::wqe::SendCtrl {
    abi::wqe::SendCtrl {
        wr_id,
        opcode,
        flags,
        len,
        imm_or_inv: 0,
    }
}

/// Polls one CQE as the driver does (owner convention), advancing `ci` in the
/// CQ's doorbell slot.
fn poll_cq(d: &mut Dev, cqn: u32) -> Option<abi::cqe::Cqe> {
    let cq = &d.hca.cqs[&cqn];
    let (ci, _) = cq.db.load(&d.db);
    let mut b = [0u8; 64];
    d.mem.read(cq.ring.entry_addr(ci), &mut b).unwrap();
    let e = abi::cqe::Cqe::from_bytes(&b);
    if e.owner != abi::cqe::owner_bit(ci, cq.ring.log_entries()) {
        return None;
    }
    d.db.store(cq.db.offset(), ci.wrapping_add(1));
    Some(e)
}

fn poll_eq(d: &mut Dev, eqn: u32) -> Option<abi::cqe::Eqe> {
    let eq = &d.hca.eqs[&eqn];
    let (ci, _) = eq.db.load(&d.db);
    let mut b = [0u8; 16];
    d.mem.read(eq.ring.entry_addr(ci), &mut b).unwrap();
    let e = abi::cqe::Eqe::from_bytes(&b);
    if e.owner != abi::cqe::owner_bit(ci, eq.ring.log_entries()) {
        return None;
    }
    d.db.store(eq.db.offset(), ci.wrapping_add(1));
    Some(e)
}

fn wait_cqe(d: &mut Dev, cqn: u32) -> abi::cqe::Cqe {
    for _ in 0..10_000 {
        run(d, 1);
        if let Some(e) = poll_cq(d, cqn) {
            return e;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    panic!("no CQE on cq {cqn}");
}

const DATA: u64 = BASE + (8 << 20);

/// The order inside a round (issue 30 item 3), in its own file.
#[path = "datapath/round_order.rs"]
mod round_order;

fn setup() -> (Dev, u32, u32, u32) {
    let mut d = dev();
    add_eq(&mut d, 1, 3, 9);
    let cq = add_cq(&mut d, 1, 8);
    let a = add_qp(&mut d, cq, 9);
    let b = add_qp(&mut d, cq, 10);
    connect(&mut d, a, b);
    (d, cq, a, b)
}

/// A SEND (SGE) and an RDMA WRITE (inline) through the rings: CQEs for both
/// sides with the right fields, data in place (OP-01, OP-02, CQ-01).
#[test]
fn datapath_send_and_inline_write_through_rings() {
    let (mut d, cq, a, b) = setup();
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    d.mem.write(DATA, &msg).unwrap();
    post_recv(&mut d, b, 77, DATA + 0x10000, 4096);
    let w = signaled_send(&d, 5, DATA, 3000);
    post_send(&mut d, a, &w);
    let mut got = [wait_cqe(&mut d, cq), wait_cqe(&mut d, cq)];
    got.sort_by_key(|e| e.wr_id);
    assert_eq!((got[0].wr_id, got[0].status, got[0].opcode), (5, 0, 0));
    assert_eq!(
        (got[1].wr_id, got[1].status, got[1].opcode, got[1].byte_len),
        (77, 0, 128, 3000)
    );
    assert_eq!(got[1].qp_num, b);
    let mut back = vec![0u8; 3000];
    d.mem.read(DATA + 0x10000, &mut back).unwrap();
    assert_eq!(back, msg);

    // Inline WRITE of 40 bytes.
    let mut w = Vec::new();
    put(
        &mut w,
        ctrl(
            6,
            0,
            abi::verbs::send_flags::SIGNALED | abi::verbs::send_flags::INLINE,
            40,
        ),
    );
    put(
        &mut w,
        abi::wqe::RaddrSeg {
            remote_addr: DATA + 0x20000,
            rkey: d.key,
            rsvd: 0,
        },
    );
    w.extend_from_slice(&[0xab; 40]);
    post_send(&mut d, a, &w);
    let e = wait_cqe(&mut d, cq);
    assert_eq!((e.wr_id, e.status, e.opcode), (6, 0, 1));
    let mut back = [0u8; 41];
    d.mem.read(DATA + 0x20000, &mut back).unwrap();
    assert_eq!(&back[..40], &[0xab; 40]);
    assert_eq!(back[40], 0);
}

/// A WQE that does not decode (unknown opcode, too many SGEs) completes with
/// LOC_QP_OP_ERR in order and the QP goes to Error; the device goes on.
#[test]
fn datapath_bad_wqes_complete_with_errors_and_fail_the_qp() {
    let (mut d, cq, a, _b) = setup();
    let mut w = Vec::new();
    put(&mut w, ctrl(9, 0x77, abi::verbs::send_flags::SIGNALED, 0));
    post_send(&mut d, a, &w);
    let e = wait_cqe(&mut d, cq);
    assert_eq!(
        (e.wr_id, e.status),
        (9, abi::verbs::WcStatus::LocQpOpErr.raw())
    );
    assert_eq!(d.hca.port.engine().query_qp(a).unwrap().0, QpState::Error);
    assert_eq!(d.hca.counters.bad_wqes, 1);
    // Too many SGEs on the other QP.
    let mut w = Vec::new();
    put(&mut w, ctrl(10, 2, abi::verbs::send_flags::SIGNALED, 5));
    let b = *d.hca.qps.keys().find(|&&q| q != a).unwrap();
    post_send(&mut d, b, &w);
    let e = wait_cqe(&mut d, cq);
    assert_eq!(
        (e.wr_id, e.status),
        (10, abi::verbs::WcStatus::LocQpOpErr.raw())
    );
}

/// A producer index more than a ring ahead is an overrun: counted, the QP
/// fails, nothing is read past the ring.
#[test]
fn datapath_doorbell_overrun_fails_the_qp() {
    let (mut d, _cq, a, _b) = setup();
    let qp = &d.hca.qps[&a];
    qp.db.produce(&d.db, 0, 1000);
    run(&mut d, 2);
    assert_eq!(d.hca.counters.doorbell_overruns, 1);
    assert_eq!(d.hca.port.engine().query_qp(a).unwrap().0, QpState::Error);
}

/// CQ-02: an armed CQ raises one EQE on its EQ and the EQ's vector; no arm, no
/// event; solicited arming ignores unsolicited completions.
#[test]
fn datapath_cq_02_arming_raises_eqe_and_interrupt() {
    let (mut d, cq, a, b) = setup();
    let send = |d: &mut Dev, id: u64, flags: u8| {
        let mut w = Vec::new();
        put(&mut w, ctrl(id, 2, flags, 0));
        post_send(d, a, &w);
    };
    // Not armed: completions, no EQE.
    post_recv(&mut d, b, 1, DATA, 64);
    send(&mut d, 1, abi::verbs::send_flags::SIGNALED);
    wait_cqe(&mut d, cq);
    wait_cqe(&mut d, cq);
    assert!(d.irq.0.borrow().is_empty());
    // Arm the EQ (sequence 1) and the CQ for solicited only.
    let eq_slot = d.hca.eqs[&1].db;
    d.db.store(eq_slot.offset() + 4, 1);
    let cq_slot = d.hca.cqs[&cq].db;
    d.db.store(cq_slot.offset() + 4, 1 | abi::uar::cq_arm::SOLICITED);
    flag(&d, cq_slot);
    run(&mut d, 1);
    post_recv(&mut d, b, 2, DATA, 64);
    send(&mut d, 2, 0); // unsolicited, unsignaled
    let e = wait_cqe(&mut d, cq);
    assert_eq!(e.wr_id, 2);
    assert!(
        d.irq.0.borrow().is_empty(),
        "unsolicited completion raised an event"
    );
    post_recv(&mut d, b, 3, DATA, 64);
    send(&mut d, 3, abi::verbs::send_flags::SOLICITED);
    let e = wait_cqe(&mut d, cq);
    assert_eq!(e.wr_id, 3);
    run(&mut d, 2);
    assert_eq!(*d.irq.0.borrow(), vec![3]);
    let eqe = poll_eq(&mut d, 1).expect("completion EQE");
    assert_eq!(
        (eqe.kind, eqe.object),
        (abi::cqe::EqeType::Completion.raw(), cq)
    );
    assert!(poll_eq(&mut d, 1).is_none());
    // Disarmed by the event: another solicited completion raises nothing.
    post_recv(&mut d, b, 4, DATA, 64);
    send(&mut d, 4, abi::verbs::send_flags::SOLICITED);
    assert_eq!(wait_cqe(&mut d, cq).wr_id, 4);
    run(&mut d, 2);
    assert!(poll_eq(&mut d, 1).is_none(), "an event without a new arm");
    // Armed for the next completion (a new arm word): an unsolicited one fires.
    d.db.store(cq_slot.offset() + 4, 2);
    flag(&d, cq_slot);
    run(&mut d, 1);
    post_recv(&mut d, b, 5, DATA, 64);
    send(&mut d, 5, 0);
    assert_eq!(wait_cqe(&mut d, cq).wr_id, 5);
    run(&mut d, 2);
    let eqe = poll_eq(&mut d, 1).expect("completion EQE for the next completion");
    assert_eq!(
        (eqe.kind, eqe.object),
        (abi::cqe::EqeType::Completion.raw(), cq)
    );
    assert!(poll_eq(&mut d, 1).is_none());
    assert_eq!(d.hca.cqs[&cq].events, 2);
}

/// CQ-03: a CQ ring the guest does not consume is never written past: the
/// completion that finds no room overflows the CQ (counted, CQ error event on
/// EQ 0), the entries already written stay intact and in order.
#[test]
fn datapath_cq_03_overflow_stops_the_cq_and_raises_cq_error() {
    let (mut d, cq, a, _b) = setup();
    add_eq(&mut d, 0, 0, 10);
    // Ring of 256; 300 signaled zero-length WRITEs.
    for i in 0..300u64 {
        let mut w = Vec::new();
        put(&mut w, ctrl(i, 0, abi::verbs::send_flags::SIGNALED, 0));
        put(
            &mut w,
            abi::wqe::RaddrSeg {
                remote_addr: DATA,
                rkey: d.key,
                rsvd: 0,
            },
        );
        post_send(&mut d, a, &w);
        if i % 32 == 31 {
            run(&mut d, 50);
        }
    }
    run(&mut d, 200);
    assert_eq!(d.hca.cqs[&cq].pi, 256, "wrote past the consumer");
    assert!(d.hca.cqs[&cq].overflowed);
    assert_eq!(d.hca.counters.cq_overflows, 1);
    let eqe = poll_eq(&mut d, 0).expect("CQ error EQE on EQ 0");
    assert_eq!((eqe.kind, eqe.object), (abi::cqe::EqeType::CqErr.raw(), cq));
    assert!(poll_eq(&mut d, 0).is_none(), "one CQ error event");
    // The 44 completions that found the CQ in error are discarded and counted,
    // not kept in the engine: the CQ ring alone has a depth.
    assert_eq!(d.hca.counters.cqes_discarded, 44);
    assert_eq!(d.hca.port.engine().cq_len(cq), 0);
    assert_eq!(d.hca.port.engine().ready_cqs().count(), 0);
    let ids: Vec<u64> = (0..256)
        .map(|_| poll_cq(&mut d, cq).unwrap().wr_id)
        .collect();
    assert_eq!(ids, (0..256).collect::<Vec<_>>());
    run(&mut d, 10);
    assert!(
        poll_cq(&mut d, cq).is_none(),
        "an overflowed CQ stays stopped"
    );
}

/// CQ-02, the arm-then-poll race: a CQE that reached the ring before the
/// device saw the arm word, and that the driver has not consumed, fires the
/// event at once (the driver's poll may have run before the CQE landed).
#[test]
fn datapath_cq_02_arm_with_unconsumed_cqes_fires_at_once() {
    let (mut d, cq, a, _b) = setup();
    let mut w = Vec::new();
    put(&mut w, ctrl(1, 0, abi::verbs::send_flags::SIGNALED, 0));
    put(
        &mut w,
        abi::wqe::RaddrSeg {
            remote_addr: DATA,
            rkey: d.key,
            rsvd: 0,
        },
    );
    post_send(&mut d, a, &w);
    for _ in 0..1000 {
        run(&mut d, 1);
        if d.hca.cqs[&cq].pi == 1 {
            break;
        }
    }
    assert_eq!(d.hca.cqs[&cq].pi, 1, "the CQE reached the ring");
    let eq_slot = d.hca.eqs[&1].db;
    d.db.store(eq_slot.offset() + 4, 1);
    let cq_slot = d.hca.cqs[&cq].db;
    d.db.store(cq_slot.offset() + 4, 1);
    flag(&d, cq_slot);
    run(&mut d, 1);
    assert_eq!(*d.irq.0.borrow(), vec![3]);
    let eqe = poll_eq(&mut d, 1).expect("completion EQE");
    assert_eq!(eqe.object, cq);
    assert_eq!(poll_cq(&mut d, cq).map(|e| e.wr_id), Some(1));
}

fn bind_wqe(wr_id: u64, mw: u32, new: u32, mr: u32, addr: u64, len: u64, rsvd: u32) -> Vec<u8> {
    let mut w = Vec::new();
    let mut c = ctrl(wr_id, 8, abi::verbs::send_flags::SIGNALED, 0);
    c.imm_or_inv = mw;
    put(&mut w, c);
    put(
        &mut w,
        abi::wqe::BindSeg {
            addr,
            length: len,
            mr_lkey: mr,
            new_rkey: new,
            access: abi::verbs::access::REMOTE_WRITE,
            rsvd,
        },
    );
    w
}

fn write_wqe(wr_id: u64, lkey: u32, rkey: u32, raddr: u64) -> Vec<u8> {
    let mut w = Vec::new();
    put(&mut w, ctrl(wr_id, 0, abi::verbs::send_flags::SIGNALED, 1));
    put(
        &mut w,
        abi::wqe::RaddrSeg {
            remote_addr: raddr,
            rkey,
            rsvd: 0,
        },
    );
    put(
        &mut w,
        abi::wqe::Sge {
            addr: DATA,
            length: 16,
            lkey,
        },
    );
    w
}

/// MP-07, OP-03 through the rings: a BIND_MW WQE (SendCtrl + BindSeg) binds a
/// type 2 window, an RDMA WRITE through it lands, LOCAL_INV (opcode 7) frees
/// it and the next WRITE fails; a SEND with Invalidate of a rebound window
/// gives a receive CQE with WITH_INV and the key; a BindSeg with a nonzero
/// reserved field completes with LOC_QP_OP_ERR.
#[test]
fn datapath_mp_07_op_03_bind_local_inv_and_send_with_inv_wqes() {
    use abi::verbs::{WcOpcode as O, WcStatus as S};
    let (mut d, cq, a, b) = setup();
    let win = DATA + 0x30000;
    let (mw, key) = {
        let e = d.hca.port.engine_mut();
        let pages = (0..16u64).map(|i| win + i * 4096).collect();
        let all = Access(15 | Access::MW_BIND.0);
        let key = e
            .mrs()
            .reg_mr(d.pd, win, 16 * 4096, all, 4096, pages)
            .unwrap();
        (e.alloc_mw(d.pd, MwType::Type2).unwrap(), key)
    };
    let k1 = (mw & !0xff) | ((mw + 1) & 0xff);
    post_send(&mut d, b, &bind_wqe(1, mw, k1, key, win, 4096, 0));
    let e = wait_cqe(&mut d, cq);
    assert_eq!((e.wr_id, e.status, e.opcode), (1, 0, O::BindMw.raw()));
    let w = write_wqe(2, d.key, k1, win + 64);
    post_send(&mut d, a, &w);
    let e = wait_cqe(&mut d, cq);
    assert_eq!((e.wr_id, e.status), (2, 0));
    let mut inv = Vec::new();
    let mut c = ctrl(3, 7, abi::verbs::send_flags::SIGNALED, 0);
    c.imm_or_inv = k1;
    put(&mut inv, c);
    post_send(&mut d, b, &inv);
    let e = wait_cqe(&mut d, cq);
    assert_eq!((e.wr_id, e.status, e.opcode), (3, 0, O::LocalInv.raw()));
    // Rebind with a new key, then SEND with Invalidate from A.
    let k2 = (mw & !0xff) | ((mw + 2) & 0xff);
    post_send(&mut d, b, &bind_wqe(4, k1, k2, key, win, 4096, 0));
    assert_eq!(wait_cqe(&mut d, cq).status, 0);
    post_recv(&mut d, b, 5, DATA + 0x10000, 4096);
    let mut s = Vec::new();
    let mut c = ctrl(6, 9, abi::verbs::send_flags::SIGNALED, 1);
    c.imm_or_inv = k2;
    put(&mut s, c);
    put(
        &mut s,
        abi::wqe::Sge {
            addr: DATA,
            length: 100,
            lkey: d.key,
        },
    );
    post_send(&mut d, a, &s);
    let mut got = [wait_cqe(&mut d, cq), wait_cqe(&mut d, cq)];
    got.sort_by_key(|e| e.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (5, 0));
    assert_ne!(got[0].wc_flags & abi::verbs::wc_flags::WITH_INV, 0);
    assert_eq!(got[0].imm_or_inv, k2);
    assert_eq!((got[1].wr_id, got[1].status), (6, 0));
    // The key is gone: the WRITE fails (and A's QP with it).
    let w = write_wqe(7, d.key, k2, win);
    post_send(&mut d, a, &w);
    let e = wait_cqe(&mut d, cq);
    assert_eq!((e.wr_id, e.status), (7, S::RemAccessErr.raw()));
    // A malformed BindSeg (on a fresh device): an error CQE, never a panic.
    let (mut d, cq, _a, b) = setup();
    post_send(&mut d, b, &bind_wqe(8, k2, k2 + 1, key, win, 64, 5));
    let e = wait_cqe(&mut d, cq);
    assert_eq!((e.wr_id, e.status), (8, S::LocQpOpErr.raw()));
}

/// WF-10: a RoCE UD receive's CQE carries the source MAC and what the header
/// space holds, with the flags that say so; an InfiniBand one carries neither.
#[test]
fn wf_10_roce_receive_cqe_reports_smac_and_network_header() {
    use abi::verbs::wc_flags;
    let mut c = transport::verbs::Completion::new(
        7,
        transport::verbs::WcStatus::Success,
        transport::verbs::WcOpcode::Recv,
        3,
    );
    let ib = device::convert::cqe_of(&c, 1);
    assert_eq!(
        ib.wc_flags & (wc_flags::WITH_SMAC | wc_flags::WITH_NETWORK_HDR_TYPE),
        0
    );
    assert_eq!((ib.smac, ib.network_hdr_type), ([0; 6], 0));
    c.smac = Some([2, 0, 0, 0, 0, 9]);
    c.network_hdr = transport::verbs::NetworkHdr::Ipv4;
    let e = device::convert::cqe_of(&c, 1);
    assert_eq!(e.smac, [2, 0, 0, 0, 0, 9]);
    assert_eq!(e.network_hdr_type, abi::cqe::NetworkHdr::Ipv4.raw());
    assert_eq!(
        e.wc_flags & (wc_flags::WITH_SMAC | wc_flags::WITH_NETWORK_HDR_TYPE),
        wc_flags::WITH_SMAC | wc_flags::WITH_NETWORK_HDR_TYPE
    );
    c.network_hdr = transport::verbs::NetworkHdr::Ipv6;
    assert_eq!(device::convert::cqe_of(&c, 1).network_hdr_type, 3);
}

/// A send doorbell rung on a QP that cannot send yet (Reset) leaves nothing
/// pending once the data path has looked: the device may sleep (before, the
/// rescan saw the doorbell forever and the data path never slept, a core spun
/// by one unprivileged process). The WQE waits in the ring and goes out once the
/// QP reaches RTS; a new doorbell is pending again at once.
#[test]
fn a_doorbell_on_a_qp_that_cannot_send_does_not_keep_the_device_awake() {
    let mut d = dev();
    add_eq(&mut d, 1, 3, 9);
    let cq = add_cq(&mut d, 1, 8);
    let a = add_qp(&mut d, cq, 9);
    let b = add_qp(&mut d, cq, 10);
    let msg = [7u8; 64];
    d.mem.write(DATA, &msg).unwrap();
    let mut w = Vec::new();
    put(&mut w, ctrl(5, 2, abi::verbs::send_flags::SIGNALED, 1));
    put(
        &mut w,
        abi::wqe::Sge {
            addr: DATA,
            length: 64,
            lkey: d.key,
        },
    );
    post_send(&mut d, a, &w);
    assert!(d.hca.doorbells_pending(&d.db), "a new doorbell is pending");
    run(&mut d, 2);
    assert!(
        !d.hca.doorbells_pending(&d.db),
        "a doorbell the QP cannot take is not pending"
    );
    assert_eq!(d.hca.qps[&a].sq_fetched, 0, "the WQE waits in the ring");
    // The same on the receive side of a QP in Reset.
    post_recv(&mut d, b, 77, DATA + 0x10000, 4096);
    run(&mut d, 1);
    assert!(!d.hca.doorbells_pending(&d.db));

    connect(&mut d, a, b);
    let mut got = [wait_cqe(&mut d, cq), wait_cqe(&mut d, cq)];
    got.sort_by_key(|e| e.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (5, 0), "sent once in RTS");
    assert_eq!((got[1].wr_id, got[1].status, got[1].byte_len), (77, 0, 64));
    post_send(&mut d, a, &w);
    assert!(d.hca.doorbells_pending(&d.db), "pending again");
}

/// ARCHITECTURE.md §9: a receive WQE the memory budget cannot hold stays in
/// its ring, not consumed: the queue stalls at it (counted), the stalled
/// doorbell does not keep the data path awake, and once memory frees (here an
/// MR's page list is deregistered) the next round takes the rest.
#[test]
fn wqes_over_the_memory_budget_wait_in_the_ring_until_memory_frees() {
    let mut d = dev_with(Limits {
        mem_budget: 4 << 20,
        ..Limits::default()
    });
    add_eq(&mut d, 1, 3, 9);
    let cq = add_cq(&mut d, 1, 8);
    let a = add_qp(&mut d, cq, 9);
    let b = add_qp(&mut d, cq, 10);
    connect(&mut d, a, b);
    // A page list that aliases one page fills the budget but for ~5 WQEs.
    let budget = d.hca.port.engine().budget().clone();
    let room = 5 * transport::budget::recv_wqe_bytes(1) + 8;
    let fill = budget.limit() - budget.used() - transport::mr::mr_bytes(0) - room;
    let n = fill / 8;
    let filler = d
        .hca
        .port
        .engine_mut()
        .mrs()
        .reg_mr(d.pd, 0, n * 4096, Access(1), 4096, vec![BASE; n as usize])
        .unwrap();
    for i in 0..20 {
        post_recv(&mut d, b, i, DATA, 64);
    }
    run(&mut d, 3);
    let took = d.hca.qps[&b].rq_fetched;
    assert!((1..20).contains(&took), "{took} of 20 taken");
    assert!(d.hca.counters.mem_budget_stalls >= 1);
    assert!(budget.used() <= budget.limit());
    assert!(
        !d.hca.doorbells_pending(&d.db),
        "a queue stalled on the budget does not keep the data path awake"
    );
    d.hca.port.engine_mut().mrs().dereg_mr(filler).unwrap();
    run(&mut d, 1);
    assert_eq!(
        d.hca.qps[&b].rq_fetched, 20,
        "the rest taken once memory freed"
    );
}

/// Doorbells that count the words the device loads (to show what a round
/// reads), otherwise the test's pages.
struct CountingDoorbells<'a> {
    db: &'a VecDoorbells,
    loads: std::cell::Cell<u32>,
}

impl Doorbells for CountingDoorbells<'_> {
    fn load(&self, offset: u64) -> u32 {
        self.loads.set(self.loads.get() + 1);
        self.db.load(offset)
    }
    fn store(&self, offset: u64, value: u32) {
        self.db.store(offset, value)
    }
    fn swap(&self, offset: u64, value: u32) -> u32 {
        self.db.swap(offset, value)
    }
    fn fetch_or(&self, offset: u64, bits: u32) -> u32 {
        self.db.fetch_or(offset, bits)
    }
    fn len(&self) -> u64 {
        self.db.len()
    }
}

/// Words of BAR2 one round loads.
fn loads_of_a_round(d: &mut Dev) -> u32 {
    let c = CountingDoorbells {
        db: &d.db,
        loads: Default::default(),
    };
    d.hca
        .run_once(&mut d.mem, &c, &d.irq, Duration::from_millis(1));
    c.loads.get()
}

/// The summary bit of a slot (abi::uar DOORBELL_PROTOCOL), set as a driver
/// does, alone.
fn flag(d: &Dev, slot: DbSlot) {
    let (at, bit) = slot.summary_bit();
    d.db.fetch_or(at, bit);
}

/// Issue 12 / ARCHITECTURE.md §2: the device reads a producer slot only when
/// its summary bit says so. A SEND stored with its index but not its bit is
/// not fetched, however many rounds run, and does not keep the device awake
/// (with the old scan of every slot it went out at the first round); once the
/// bit is set it goes out.
#[test]
fn a_producer_index_without_its_summary_bit_is_not_fetched() {
    let (mut d, cq, a, b) = setup();
    post_recv(&mut d, b, 77, DATA + 0x10000, 4096);
    let msg = [5u8; 64];
    d.mem.write(DATA, &msg).unwrap();
    let mut w = Vec::new();
    put(&mut w, ctrl(5, 2, abi::verbs::send_flags::SIGNALED, 1));
    put(
        &mut w,
        abi::wqe::Sge {
            addr: DATA,
            length: 64,
            lkey: d.key,
        },
    );
    let qp = &d.hca.qps[&a];
    let (pi, _) = qp.db.load(&d.db);
    d.mem.write(qp.sq.entry_addr(pi), &w).unwrap();
    let slot = qp.db;
    d.db.store(slot.offset(), pi.wrapping_add(1)); // no summary bit
    run(&mut d, 20);
    assert_eq!(d.hca.qps[&a].sq_fetched, pi, "not fetched without its bit");
    assert_eq!(d.hca.counters.send_wqes, 0);
    assert!(poll_cq(&mut d, cq).is_none(), "no completion");
    assert!(
        !d.hca.doorbells_pending(&d.db),
        "an unflagged index does not keep the device awake"
    );
    flag(&d, slot);
    assert!(d.hca.doorbells_pending(&d.db), "the bit is pending");
    let mut got = [wait_cqe(&mut d, cq), wait_cqe(&mut d, cq)];
    got.sort_by_key(|e| e.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (5, 0), "sent once flagged");
    assert_eq!((got[1].wr_id, got[1].status, got[1].byte_len), (77, 0, 64));
    assert_eq!(d.hca.qps[&a].sq_fetched, pi.wrapping_add(1));
}

/// Issue 12: an idle round costs O(pages in use), not O(objects): it loads
/// the same number of doorbell words with 2 QPs and 1 CQ as with 100 QPs and
/// 99 CQs on the same page (the old round loaded both producer words of every
/// QP and the slot of every CQ), and a flagged QP costs its slot, not a scan.
#[test]
fn an_idle_round_loads_the_same_words_whatever_the_number_of_qps_and_cqs() {
    let (mut d, cq, a, _b) = setup();
    run(&mut d, 2);
    let two = loads_of_a_round(&mut d);
    for i in 0..98 {
        add_qp(&mut d, cq, 11 + i);
        add_cq(&mut d, 1, 120 + i);
    }
    run(&mut d, 2);
    let hundred = loads_of_a_round(&mut d);
    assert_eq!(two, hundred, "idle round: {two} loads with 2 QPs");
    let summary = abi::uar::uar::SUMMARY_SIZE / 4;
    assert!(hundred >= summary, "the summary of the QPs' page is read");
    // A bit whose index did not move: one slot read (two words) more.
    flag(&d, d.hca.qps[&a].db);
    let flagged = loads_of_a_round(&mut d);
    assert_eq!(flagged, hundred + 2, "one flagged QP: its slot's two words");
    assert_eq!(d.hca.counters.send_wqes, 0);
}

/// DOORBELL_PROTOCOL, hostile guest: summary bits the device did not ask for
/// (every bit of a page: the header's and summary's own slots, free slots, a
/// CQ's and an EQ's slots, QPs whose index did not move; and a page with no
/// QP) fetch nothing, fail nothing, are taken in one round and leave the
/// device free to sleep; the QPs then work as before.
#[test]
fn spurious_summary_bits_are_harmless() {
    let (mut d, cq, a, b) = setup();
    let page = |u: u32| {
        (0..abi::uar::uar::SUMMARY_SIZE / 4)
            .map(move |w| device::hca::summary_offset(u) + u64::from(w) * 4)
    };
    for at in page(1).chain(page(0)).chain(page(2)) {
        d.db.store(at, u32::MAX);
    }
    assert!(d.hca.doorbells_pending(&d.db));
    run(&mut d, 1);
    for at in page(1) {
        assert_eq!(d.db.load(at), 0, "the QPs' page summary is taken");
    }
    for at in page(2) {
        assert_eq!(d.db.load(at), u32::MAX, "a page without QPs is not read");
    }
    assert!(
        !d.hca.doorbells_pending(&d.db),
        "spurious bits do not keep the device awake"
    );
    run(&mut d, 3);
    let c = &d.hca.counters;
    assert_eq!(
        (c.send_wqes, c.recv_wqes, c.bad_wqes, c.doorbell_overruns),
        (0, 0, 0, 0)
    );
    assert!(poll_cq(&mut d, cq).is_none());
    for q in [a, b] {
        assert_eq!(d.hca.port.engine().query_qp(q).unwrap().0, QpState::Rts);
    }
    assert!(d.hca.retry.is_empty(), "nothing left to retry");
    // Real doorbells still work.
    post_recv(&mut d, b, 77, DATA + 0x10000, 4096);
    let mut w = Vec::new();
    put(&mut w, ctrl(5, 2, abi::verbs::send_flags::SIGNALED, 1));
    put(
        &mut w,
        abi::wqe::Sge {
            addr: DATA,
            length: 64,
            lkey: d.key,
        },
    );
    post_send(&mut d, a, &w);
    let mut got = [wait_cqe(&mut d, cq), wait_cqe(&mut d, cq)];
    got.sort_by_key(|e| e.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (5, 0));
    assert_eq!((got[1].wr_id, got[1].status), (77, 0));
}

/// A queue with more WQEs than one round fetches (`FETCH_BUDGET`) stays on
/// the retry list: the next round takes the rest without a new summary bit,
/// and until then it is pending (the device must not sleep on it).
#[test]
fn a_queue_over_the_fetch_budget_is_fetched_on_without_a_new_bit() {
    let mut d = dev();
    add_eq(&mut d, 1, 3, 9);
    let cq = add_cq(&mut d, 1, 8);
    let a = add_qp(&mut d, cq, 9);
    let b = add_qp_rq(&mut d, cq, 10, 8);
    connect(&mut d, a, b);
    let budget = device::datapath::FETCH_BUDGET;
    let n = budget + budget / 2;
    for i in 0..n {
        post_recv(&mut d, b, u64::from(i), DATA, 64);
    }
    run(&mut d, 1);
    assert_eq!(d.hca.qps[&b].rq_fetched, budget, "one budget a round");
    assert!(
        d.hca.doorbells_pending(&d.db),
        "the rest is pending without a bit"
    );
    assert_eq!(d.hca.retry, vec![SlotOwner::Qp(b)]);
    run(&mut d, 1);
    assert_eq!(d.hca.qps[&b].rq_fetched, n, "the rest the next round");
    assert!(d.hca.retry.is_empty());
    assert!(!d.hca.doorbells_pending(&d.db));
}

/// CQ-02 with the doorbell summary: the device reads a CQ's arm word only when
/// the slot's summary bit sends it there (no round loads every CQ's slot). An
/// arm stored without its bit raises nothing, however many completions land;
/// once the bit is set, the arm finds the unconsumed CQEs and fires at once.
#[test]
fn a_cq_arm_without_its_summary_bit_is_not_seen() {
    let (mut d, cq, a, b) = setup();
    let eq_slot = d.hca.eqs[&1].db;
    d.db.store(eq_slot.offset() + 4, 1);
    let cq_slot = d.hca.cqs[&cq].db;
    d.db.store(cq_slot.offset() + 4, 1); // next completion, no summary bit
    run(&mut d, 2);
    post_recv(&mut d, b, 1, DATA, 64);
    let mut w = Vec::new();
    put(&mut w, ctrl(1, 2, abi::verbs::send_flags::SIGNALED, 0));
    post_send(&mut d, a, &w);
    for _ in 0..200 {
        run(&mut d, 1);
        if d.hca.cqs[&cq].pi == 2 {
            break;
        }
    }
    assert_eq!(d.hca.cqs[&cq].pi, 2, "both CQEs written");
    run(&mut d, 2);
    assert!(
        d.irq.0.borrow().is_empty(),
        "an unflagged arm raised an event"
    );
    assert_eq!(d.hca.cqs[&cq].armed, None);
    flag(&d, cq_slot);
    run(&mut d, 1);
    assert_eq!(
        *d.irq.0.borrow(),
        vec![3],
        "the arm fires at once once seen"
    );
    let eqe = poll_eq(&mut d, 1).expect("completion EQE");
    assert_eq!(eqe.object, cq);
}
