//! The engine's host-memory budget (ARCHITECTURE.md §9, issue 13): MR page
//! lists, held WQEs and QP state are charged while held, refused with
//! `InsufficientResources` past the limit, counted, and given back on every
//! way out (deregistration, completion, flush, destroy).

mod common;

use common::*;
use transport::engine::{Engine, Limits};
use transport::verbs::{Access, RecvWr, Sge, VerbError, WrOpcode};

const A: usize = 0;
const B: usize = 1;

/// Two nodes; B's engine holds at most `limit` bytes for its guest.
fn net_with_budget(limit: u64) -> Net {
    let mut net = Net::new(2, 1 << 16, 3);
    let port = net.nodes[B].engine.port().clone();
    let limits = Limits {
        mem_budget: limit,
        ..Limits::default()
    };
    net.nodes[B].engine = Engine::new(port, limits);
    net.nodes[B].pd = net.nodes[B].engine.mrs().alloc_pd().expect("pd");
    net
}

/// MR page lists that all alias one page are charged by their length, not by
/// the memory they name: registrations stop at the limit with
/// InsufficientResources, and deregistration gives the bytes back.
#[test]
fn mr_page_lists_are_charged_and_refused_past_the_limit() {
    let limit = 4 << 20;
    let mut net = net_with_budget(limit);
    let e = &mut net.nodes[B].engine;
    let pd = e.mrs().alloc_pd().unwrap();
    let npages = 1u64 << 16; // 512 KiB of page list over one 4 KiB page
    let mut keys = Vec::new();
    let err = loop {
        let pages = vec![MEM_BASE; npages as usize];
        match e.mrs().reg_mr(pd, 0, npages * 4096, Access(1), 4096, pages) {
            Ok(k) => keys.push(k),
            Err(err) => break err,
        }
        assert!(keys.len() < 100, "never refused");
    };
    assert_eq!(err, VerbError::InsufficientResources);
    let b = e.budget().clone();
    println!(
        "{} MRs of {npages} aliased pages: {} of {} bytes held, {} refusal(s)",
        keys.len(),
        b.used(),
        b.limit(),
        b.refusals()
    );
    assert_eq!(keys.len(), 7, "4 MiB holds seven 512 KiB page lists");
    assert!(b.used() <= limit);
    assert_eq!(b.refusals(), 1);
    for k in keys {
        e.mrs().dereg_mr(k).unwrap();
    }
    assert_eq!(b.used(), 0, "deregistration gives every byte back");
    // A reregistration that grows the list is charged too.
    let k = e
        .mrs()
        .reg_mr(pd, 0, 4096, Access(1), 4096, vec![MEM_BASE])
        .unwrap();
    let small = b.used();
    let t = transport::mr::Translation {
        iova: 0,
        length: (1 << 20) * 4096,
        page_size: 4096,
        pages: vec![MEM_BASE; 1 << 20],
    };
    let change = transport::mr::Rereg {
        translation: Some(t),
        ..Default::default()
    };
    assert_eq!(
        e.mrs().rereg_mr(k, change),
        Err(VerbError::InsufficientResources)
    );
    assert_eq!(b.used(), small, "a refused reregistration changes nothing");
}

/// Receive and send WQEs are charged while the engine holds them: posting
/// stops at the limit (before the queues are full) with
/// InsufficientResources, and the bytes come back as the WQEs complete.
#[test]
fn held_wqes_are_charged_until_they_complete() {
    let o = ConnOpts::default();
    // Room for the QP and a few WQEs, not for the 1024 its queues allow.
    let mut net = net_with_budget(64 << 10);
    let kb = net.reg_all(B, ALL_ACCESS);
    let ka = net.reg_all(A, ALL_ACCESS);
    let p = connect(&mut net, A, B, &o);
    let idle = net.nodes[B].engine.budget().used();
    let sge = |key| Sge {
        addr: MEM_BASE,
        length: 64,
        lkey: key,
    };
    let mut posted = 0u64;
    let err = loop {
        let wr = RecvWr {
            wr_id: posted,
            sges: vec![sge(kb); 4],
        };
        match net.nodes[B].engine.post_recv(p.qb, wr) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, VerbError::InsufficientResources);
    assert!(posted > 0 && posted < u64::from(o.max_wr), "{posted}");
    let b = net.nodes[B].engine.budget().clone();
    assert!(b.used() <= b.limit());
    println!(
        "{posted} receive WQEs taken, then refused: {} of {} bytes",
        b.used(),
        b.limit()
    );
    // A's SENDs consume them: the bytes come back.
    for i in 0..posted {
        let wr = send_wr(i, WrOpcode::Send, vec![sge(ka)]);
        net.nodes[A].engine.post_send(p.qa, wr).unwrap();
    }
    let mut got = 0;
    net.run_until(1_000_000, |n| {
        while n.poll(B, p.cq_b).is_some() {
            got += 1;
        }
        got == posted
    });
    assert_eq!(got, posted);
    assert_eq!(b.used(), idle, "consumed receive WQEs are credited");
    // Send WQEs: charged until their ACKs retire them.
    let mut sends = 0u64;
    let err = loop {
        let wr = send_wr(sends, WrOpcode::RdmaWrite, vec![sge(kb); 4]);
        let wr = transport::verbs::SendWr {
            remote_addr: MEM_BASE,
            rkey: ka,
            ..wr
        };
        match net.nodes[B].engine.post_send(p.qb, wr) {
            Ok(()) => sends += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(err, VerbError::InsufficientResources);
    assert!(b.used() <= b.limit());
    let mut done = 0;
    net.run_until(1_000_000, |n| {
        while n.poll(B, p.cq_b).is_some() {
            done += 1;
        }
        done == sends
    });
    assert_eq!(done, sends);
    assert_eq!(b.used(), idle, "retired send WQEs are credited");
    assert!(b.refusals() >= 2);
    // Destroying the QP gives its reservation back.
    net.nodes[B].engine.destroy_qp(p.qb).unwrap();
    assert!(b.used() < idle);
}

/// Each QP reserves its fixed and responder state: creation stops at the
/// limit with InsufficientResources.
#[test]
fn qp_creation_is_refused_when_the_budget_is_spent() {
    let mut net = net_with_budget(256 << 10);
    let o = ConnOpts::default();
    let mut n = 0;
    let err = loop {
        let cq = net.nodes[B].engine.create_cq().unwrap();
        let pd = net.nodes[B].pd;
        let r = net.nodes[B].engine.create_qp(transport::verbs::QpInit {
            qp_type: o.qp_type,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: transport::verbs::QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        });
        match r {
            Ok(_) => n += 1,
            Err(e) => break e,
        }
        assert!(n < 10_000, "never refused");
    };
    assert_eq!(err, VerbError::InsufficientResources);
    let b = net.nodes[B].engine.budget();
    println!("{n} QPs created in {} bytes", b.limit());
    assert!(n > 10 && b.used() <= b.limit());
}

/// Issue 25 item 6: an RD QP (AD-11) reserves its state as every QP does:
/// creation stops at the budget's limit (a refusal counted, well before
/// `Limits::max_qp`), and destroying one gives its bytes back.
#[test]
fn rd_qp_creation_is_charged_and_refused_when_the_budget_is_spent() {
    use transport::engine::rd_qp_bytes;
    use transport::verbs::{QpCap, RdQpInit};
    let limit = 64 << 10;
    let mut net = net_with_budget(limit);
    let pd = net.nodes[B].pd;
    let e = &mut net.nodes[B].engine;
    let rdd = e.alloc_rdd().unwrap();
    let cq = e.create_cq().unwrap();
    let init = RdQpInit {
        pd,
        rdd,
        send_cq: cq,
        recv_cq: cq,
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    };
    let before = e.budget().used();
    let first = e.create_rd_qp(init).unwrap();
    assert_eq!(e.budget().used(), before + rd_qp_bytes());
    let mut qps = vec![first];
    let err = loop {
        match e.create_rd_qp(init) {
            Ok(q) => qps.push(q),
            Err(err) => break err,
        }
        assert!(qps.len() < 10_000, "never refused");
    };
    assert_eq!(err, VerbError::InsufficientResources);
    let b = e.budget().clone();
    assert_eq!(b.refusals(), 1, "refused by the budget, not by max_qp");
    assert!(b.used() <= limit);
    assert!(qps.len() as u64 >= (limit - before) / rd_qp_bytes() - 1);
    for q in qps {
        e.destroy_rd_qp(q).unwrap();
    }
    assert_eq!(b.used(), before);
}
