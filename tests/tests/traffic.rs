//! (b) Two `vhca` processes on UDP loopback: RC SEND, SEND with immediate,
//! WRITE, WRITE with immediate, READ, CmpSwap and FetchAdd from 0 B to 8 MiB,
//! several QPs at once, UC SEND and WRITE, UD SEND (also to the device's own
//! LID), an SRQ shared by several QPs with its limit event, and completion
//! events through MSI-X with solicited-only arming. Data is checked byte for
//! byte, and the bytes around it are checked untouched.

use std::time::Duration;

use vhca_tests::abi::cqe::{Cqe, EqeType};
use vhca_tests::abi::ident::bar;
use vhca_tests::abi::verbs::{wc_flags, AtomicCap, QpType, WcOpcode, WrOpcode};
use vhca_tests::fixture::{assert_success, connect_pair, connect_pair_with, wait_n, Node, Region};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::verbs::{is_recv, ud_dest};
use vhca_tests::{ConnOpts, Layout, Options, QpH, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);
const CANARY: u8 = 0xee;
const SIZES: [usize; 12] = [
    0,
    1,
    63,
    64,
    255,
    1024,
    4095,
    4096,
    4097,
    65_537,
    1 << 20,
    8 << 20,
];

fn two_nodes() -> (Vhca, Node, Node) {
    let v = Vhca::spawn(Options::nodes(2));
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

/// One SGE over `[0, len)` of a region, or none for an empty message.
fn sges(r: &Region, off: usize, len: usize) -> Vec<vhca_tests::abi::wqe::Sge> {
    if len == 0 {
        Vec::new()
    } else {
        vec![r.mr.sge(&r.buf, off, len)]
    }
}

fn expect_op(c: &Cqe, op: WcOpcode) {
    assert_eq!(c.opcode, op.raw(), "CQE opcode: {c:?}");
}

#[test]
fn rc_every_opcode_every_size_byte_exact() {
    let (mut v, mut a, mut b) = two_nodes();
    let qps: Vec<(QpH, QpH)> = (0..3)
        .map(|_| connect_pair(&mut a, &mut b, QpType::Rc))
        .collect();
    let max = 8 << 20;
    // Scattered pages, byte-misaligned starts, a canary zone after the data.
    let src = a.region(max + 64, Layout::Scattered, 13);
    let dst = b.region(max + 64, Layout::Scattered, 7);
    let mut id = 0u64;
    for op in [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::RdmaRead,
    ] {
        for (k, &size) in SIZES.iter().enumerate() {
            id += 1;
            let (qa, qb) = qps[k % qps.len()];
            let data = pattern(id, size);
            let imm = 0xc0de_0000 | id as u32;
            // The side the data goes to is filled with the canary first.
            let (from, to) = if op == WrOpcode::RdmaRead {
                (&dst, &src)
            } else {
                (&src, &dst)
            };
            let (from_node, to_node) = if op == WrOpcode::RdmaRead {
                (&b, &a)
            } else {
                (&a, &b)
            };
            from_node.write(from, 0, &data);
            to_node.hca.guest().buf_fill(&to.buf, 0, size + 64, CANARY);
            let recv = matches!(
                op,
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm
            );
            if recv {
                b.hca
                    .post_recv(qb, &RecvWr::new(id, vec![dst.mr.sge(&dst.buf, 0, max)]))
                    .unwrap();
            }
            let raddr = dst.buf.va(0);
            let rkey = dst.mr.rkey;
            let wr = match op {
                WrOpcode::Send => SendWr::send(id),
                WrOpcode::SendWithImm => SendWr::send_imm(id, imm),
                WrOpcode::RdmaWrite => SendWr::write(id, raddr, rkey),
                WrOpcode::RdmaWriteWithImm => SendWr::write_imm(id, raddr, rkey, imm),
                _ => SendWr::read(id, raddr, rkey),
            }
            .sges(sges(&src, 0, size));
            a.hca.post_send(qa, &wr).unwrap();
            let ca = wait_n(&mut a.hca, a.cq, 1, T);
            assert_success(&ca);
            assert_eq!(ca[0].wr_id, id);
            assert_eq!(ca[0].qp_num, qa.qpn);
            match op {
                WrOpcode::RdmaRead => {
                    expect_op(&ca[0], WcOpcode::RdmaRead);
                    assert_eq!(ca[0].byte_len as usize, size, "READ byte_len");
                }
                WrOpcode::Send | WrOpcode::SendWithImm => expect_op(&ca[0], WcOpcode::Send),
                _ => expect_op(&ca[0], WcOpcode::RdmaWrite),
            }
            if recv {
                let cb = wait_n(&mut b.hca, b.cq, 1, T);
                assert_success(&cb);
                let c = &cb[0];
                assert_eq!(c.wr_id, id);
                assert_eq!(c.qp_num, qb.qpn);
                assert_eq!(c.byte_len as usize, size, "{op:?} {size}: receive byte_len");
                if op == WrOpcode::RdmaWriteWithImm {
                    expect_op(c, WcOpcode::RecvRdmaWithImm);
                } else {
                    expect_op(c, WcOpcode::Recv);
                }
                if op == WrOpcode::Send {
                    assert_eq!(c.wc_flags & wc_flags::WITH_IMM, 0);
                } else {
                    assert_ne!(c.wc_flags & wc_flags::WITH_IMM, 0, "{c:?}");
                    assert_eq!(c.imm_or_inv, imm, "immediate data as posted");
                }
            }
            let to_node = if op == WrOpcode::RdmaRead { &a } else { &b };
            let got = to_node.read(to, 0, size + 64);
            assert_bytes(&got[..size], &data, &format!("{op:?} of {size} B"));
            assert!(
                got[size..].iter().all(|&x| x == CANARY),
                "{op:?} of {size} B wrote past the message"
            );
        }
    }
    v.assert_alive(0);
    v.assert_alive(1);
}

#[test]
fn rc_inline_sends_and_writes() {
    let (_v, mut a, mut b) = two_nodes();
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let max_inline = a.hca.qp_cap(qa).max_inline_data as usize;
    assert!(max_inline >= 64, "granted inline {max_inline}");
    let dst = b.region(4096, Layout::Contiguous, 0);
    for (i, size) in [0usize, 1, 17, 48, 64].into_iter().enumerate() {
        let id = i as u64 + 1;
        let data = pattern(100 + id, size);
        b.hca.guest().buf_fill(&dst.buf, 0, 4096, CANARY);
        b.hca
            .post_recv(qb, &RecvWr::new(id, vec![dst.mr.sge(&dst.buf, 0, 4096)]))
            .unwrap();
        a.hca
            .post_send(qa, &SendWr::send(id).inline(&data))
            .unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
        let c = wait_n(&mut b.hca, b.cq, 1, T);
        assert_success(&c);
        assert_eq!(c[0].byte_len as usize, size);
        assert_bytes(&b.read(&dst, 0, size), &data, "inline SEND");
        assert_eq!(b.read(&dst, size, 1)[0], CANARY);

        let data = pattern(200 + id, size);
        let w = SendWr::write(100 + id, dst.buf.va(1000), dst.mr.rkey).inline(&data);
        a.hca.post_send(qa, &w).unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
        assert_bytes(&b.read(&dst, 1000, size), &data, "inline WRITE");
    }
}

#[test]
fn rc_atomics_execute_once_with_original_values_returned() {
    let (_v, mut a, mut b) = two_nodes();
    let (qa, _qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let target = b.region(4096, Layout::Contiguous, 0);
    let results = a.region(8 * 256, Layout::Scattered, 0);
    let init = 0x1111_2222_3333_4444u64;
    b.write(&target, 8, &init.to_le_bytes());
    let raddr = target.buf.va(8);
    let rkey = target.mr.rkey;
    let word = |b: &Node| u64::from_le_bytes(b.read(&target, 8, 8).try_into().unwrap());
    let result =
        |a: &Node, i: usize| u64::from_le_bytes(a.read(&results, 8 * i, 8).try_into().unwrap());

    // CmpSwap that matches.
    let x = 0xaaaa_bbbb_cccc_dddd;
    let wr = SendWr::cmp_swap(1, raddr, rkey, init, x).sge(results.mr.sge(&results.buf, 0, 8));
    a.hca.post_send(qa, &wr).unwrap();
    let c = wait_n(&mut a.hca, a.cq, 1, T);
    assert_success(&c);
    expect_op(&c[0], WcOpcode::CompSwap);
    let cmp_swap_len = c[0].byte_len;
    assert_eq!(result(&a, 0), init, "CmpSwap returns the original value");
    assert_eq!(word(&b), x, "swapped");
    // CmpSwap that does not match: no change, original returned.
    let wr = SendWr::cmp_swap(2, raddr, rkey, 12345, 777).sge(results.mr.sge(&results.buf, 8, 8));
    a.hca.post_send(qa, &wr).unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert_eq!(result(&a, 1), x);
    assert_eq!(word(&b), x, "no swap on mismatch");
    // FetchAdd, many in flight: each executes exactly once, in order.
    let n = 200usize;
    let per = 16usize;
    let mut cqes = Vec::new();
    let ids: Vec<usize> = (0..n).collect();
    for chunk in ids.chunks(per) {
        let last = *chunk.last().unwrap();
        let wrs: Vec<SendWr> = chunk
            .iter()
            .map(|&i| {
                let w = SendWr::fetch_add(10 + i as u64, raddr, rkey, 3).sge(results.mr.sge(
                    &results.buf,
                    8 * (i + 2),
                    8,
                ));
                if i == last {
                    w
                } else {
                    w.unsignaled()
                }
            })
            .collect();
        a.hca.post_send_batch(qa, &wrs).unwrap();
        cqes.extend(drain_until(&mut a, qa, 32));
    }
    let chunks = n.div_ceil(per);
    let more = chunks - cqes.len();
    cqes.extend(wait_n(&mut a.hca, a.cq, more, T));
    assert_success(&cqes);
    for c in &cqes {
        expect_op(c, WcOpcode::FetchAdd);
    }
    assert_eq!(word(&b), x.wrapping_add(3 * n as u64), "each FetchAdd once");
    for i in 0..n {
        assert_eq!(
            result(&a, i + 2),
            x.wrapping_add(3 * i as u64),
            "FetchAdd {i} original value"
        );
    }
    // ibv_wc.byte_len of an atomic is the 8 bytes returned (abi::cqe Cqe).
    assert_eq!(cmp_swap_len, 8, "CmpSwap CQE byte_len");
    assert!(
        cqes.iter().all(|c| c.byte_len == 8),
        "FetchAdd CQE byte_len: {:?}",
        cqes[0]
    );
}

/// OP-13 (o9-17, o9-18): the device says its atomics are atomic against the
/// HCA's other operations (ATOMIC_HCA), which is what it does: FetchAdds from
/// two QPs on one word, posted interleaved and in flight together, each
/// execute once, the word ends at the exact sum and every original value
/// returned is distinct (they were serialised). Not GLOB: under TCG a guest
/// CPU's locked instruction is not guaranteed atomic against the device's
/// thread, so atomicity against guest CPUs (o9-18) is not claimed.
#[test]
fn op_13_hca_atomicity_is_advertised_and_fetch_adds_from_two_qps_on_one_word_are_exact() {
    let (_v, mut a, mut b) = two_nodes();
    let attr = a.hca.query_device().expect("QUERY_DEVICE");
    assert_eq!(
        attr.atomic_cap,
        AtomicCap::Hca.raw(),
        "ibv_atomic_cap IBV_ATOMIC_HCA"
    );
    let (q1, _) = connect_pair(&mut a, &mut b, QpType::Rc);
    let (q2, _) = connect_pair(&mut a, &mut b, QpType::Rc);
    let target = b.region(4096, Layout::Contiguous, 0);
    let n = 64usize;
    let results = a.region(8 * 2 * n, Layout::Scattered, 0);
    b.write(&target, 0, &0u64.to_le_bytes());
    let raddr = target.buf.va(0);
    let rkey = target.mr.rkey;
    for i in 0..n {
        for (k, qp) in [q1, q2].into_iter().enumerate() {
            let slot = 2 * i + k;
            let wr = SendWr::fetch_add(slot as u64, raddr, rkey, 1 << 20 | 1).sge(results.mr.sge(
                &results.buf,
                8 * slot,
                8,
            ));
            a.hca.post_send(qp, &wr).unwrap();
        }
        if a.hca.sq_outstanding(q1) + a.hca.sq_outstanding(q2) > 24 {
            let c = wait_n(&mut a.hca, a.cq, 8, T);
            assert_success(&c);
        }
    }
    let left = a.hca.sq_outstanding(q1) + a.hca.sq_outstanding(q2);
    assert_success(&wait_n(&mut a.hca, a.cq, left, T));
    let word = u64::from_le_bytes(b.read(&target, 0, 8).try_into().unwrap());
    assert_eq!(word, (2 * n as u64) * (1 << 20 | 1), "each FetchAdd once");
    let mut seen: Vec<u64> = (0..2 * n)
        .map(|s| u64::from_le_bytes(a.read(&results, 8 * s, 8).try_into().unwrap()))
        .collect();
    seen.sort_unstable();
    let want: Vec<u64> = (0..2 * n as u64).map(|k| k * (1 << 20 | 1)).collect();
    assert_eq!(seen, want, "every FetchAdd saw a distinct original value");
}

/// Polls the node's CQ until at most `max` send WQEs of `qp` are outstanding.
fn drain_until(n: &mut Node, qp: QpH, max: usize) -> Vec<Cqe> {
    let deadline = std::time::Instant::now() + T;
    let mut out = Vec::new();
    while n.hca.sq_outstanding(qp) > max {
        assert!(
            std::time::Instant::now() < deadline,
            "send completions stopped coming"
        );
        out.extend(n.hca.poll_cq(n.cq, 64));
    }
    out
}

#[test]
fn rc_several_qps_at_once() {
    let (_v, mut a, mut b) = two_nodes();
    let n_qps = 6;
    let chunk = 256 << 10;
    let qps: Vec<(QpH, QpH)> = (0..n_qps)
        .map(|_| connect_pair(&mut a, &mut b, QpType::Rc))
        .collect();
    // Per QP: 4 WRITE chunks and 1 SEND chunk A→B, 1 READ chunk B→A.
    let per = 6 * chunk;
    let src = a.region(n_qps * per, Layout::Scattered, 0);
    let dst = b.region(n_qps * per, Layout::Scattered, 0);
    let mut want_b = Vec::new();
    let mut want_a = Vec::new();
    for (q, &(qa, qb)) in qps.iter().enumerate() {
        let base = q * per;
        for j in 0..5 {
            let d = pattern((q * 10 + j) as u64, chunk);
            a.write(&src, base + j * chunk, &d);
            want_b.push((base + j * chunk, d));
        }
        let d = pattern((q * 10 + 9) as u64, chunk);
        b.write(&dst, base + 5 * chunk, &d);
        want_a.push((base + 5 * chunk, d));
        b.hca
            .post_recv(
                qb,
                &RecvWr::new(q as u64, sges(&dst, base + 4 * chunk, chunk)),
            )
            .unwrap();
        let mut wrs = Vec::new();
        for j in 0..4 {
            let off = base + j * chunk;
            wrs.push(
                SendWr::write((q * 10 + j) as u64, dst.buf.va(off), dst.mr.rkey)
                    .sges(sges(&src, off, chunk)),
            );
        }
        wrs.push(SendWr::send((q * 10 + 4) as u64).sges(sges(&src, base + 4 * chunk, chunk)));
        let off = base + 5 * chunk;
        wrs.push(
            SendWr::read((q * 10 + 5) as u64, dst.buf.va(off), dst.mr.rkey)
                .sges(sges(&src, off, chunk)),
        );
        a.hca.post_send_batch(qa, &wrs).unwrap();
    }
    let ca = wait_n(&mut a.hca, a.cq, 6 * n_qps, T);
    assert_success(&ca);
    let cb = wait_n(&mut b.hca, b.cq, n_qps, T);
    assert_success(&cb);
    for (off, d) in &want_b {
        assert_bytes(&b.read(&dst, *off, chunk), d, &format!("B at {off}"));
    }
    for (off, d) in &want_a {
        assert_bytes(&a.read(&src, *off, chunk), d, &format!("A at {off} (READ)"));
    }
    // Completions of one QP come in posting order.
    for &(qa, _) in &qps {
        let ids: Vec<u64> = ca
            .iter()
            .filter(|c| c.qp_num == qa.qpn)
            .map(|c| c.wr_id)
            .collect();
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(ids, sorted, "QP {} completions in order", qa.qpn);
    }
}

/// Attempts and wait per attempt for a UC message (which may be lost, RL-15).
const UC_TRIES: usize = 5;
const UC_WAIT: Duration = Duration::from_secs(3);

#[test]
fn uc_send_and_write() {
    let (_v, mut a, mut b) = two_nodes();
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Uc);
    // UC has no flow control and no retransmission: a burst larger than the
    // receiver's socket buffer loses packets, and with them the message. The
    // sizes stay well below that.
    let max = 64 << 10;
    let src = a.region(max, Layout::Scattered, 5);
    let dst = b.region(max + 64, Layout::Scattered, 3);
    let marker = b.region(64, Layout::Contiguous, 0);
    let mut id = 0;
    for size in [0usize, 1, 4096, 4097, max] {
        // SEND.
        id += 1;
        let d = pattern(id, size);
        a.write(&src, 0, &d);
        b.hca.guest().buf_fill(&dst.buf, 0, size + 64, CANARY);
        b.hca
            .post_recv(qb, &RecvWr::new(id, sges(&dst, 0, max)))
            .unwrap();
        // RL-15: UC may lose a whole message (here: a receiver starved of CPU
        // by the other tests overflows its socket buffer); the receive WQE stays
        // posted, so the message is simply sent again.
        let mut c = Vec::new();
        for _ in 0..UC_TRIES {
            a.hca
                .post_send(qa, &SendWr::send(id).sges(sges(&src, 0, size)))
                .unwrap();
            assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
            c = b.hca.wait_cqes(b.cq, 1, UC_WAIT);
            if !c.is_empty() {
                break;
            }
        }
        assert_eq!(c.len(), 1, "UC SEND {size} lost {UC_TRIES} times");
        assert_success(&c);
        assert_eq!(c[0].byte_len as usize, size);
        assert_bytes(&b.read(&dst, 0, size), &d, &format!("UC SEND {size}"));
        assert_eq!(b.read(&dst, size, 1)[0], CANARY);
        // WRITE, then WRITE with immediate (its receive completion says the
        // earlier WRITE of the same QP has landed: UC keeps order).
        id += 1;
        let d = pattern(id, size);
        a.write(&src, 0, &d);
        b.hca.guest().buf_fill(&dst.buf, 0, size + 64, CANARY);
        b.hca
            .post_recv(qb, &RecvWr::new(id, sges(&marker, 0, 64)))
            .unwrap();
        let mut c = Vec::new();
        for _ in 0..UC_TRIES {
            a.hca
                .post_send_batch(
                    qa,
                    &[
                        SendWr::write(id, dst.buf.va(0), dst.mr.rkey).sges(sges(&src, 0, size)),
                        SendWr::write_imm(id + 1000, marker.buf.va(0), marker.mr.rkey, id as u32),
                    ],
                )
                .unwrap();
            assert_success(&wait_n(&mut a.hca, a.cq, 2, T));
            c = b.hca.wait_cqes(b.cq, 1, UC_WAIT);
            if !c.is_empty() {
                break;
            }
        }
        assert_eq!(c.len(), 1, "UC WRITE {size} lost {UC_TRIES} times");
        assert_success(&c);
        expect_op(&c[0], WcOpcode::RecvRdmaWithImm);
        assert_eq!(c[0].imm_or_inv, id as u32);
        assert_bytes(&b.read(&dst, 0, size), &d, &format!("UC WRITE {size}"));
        assert_eq!(b.read(&dst, size, 1)[0], CANARY);
    }
}

#[test]
fn ud_send_to_peer_and_to_own_lid() {
    let (_v, mut a, mut b) = two_nodes();
    let o = ConnOpts::default();
    let ua = a.qp(QpType::Ud);
    let ua2 = a.qp(QpType::Ud);
    let ub = b.qp(QpType::Ud);
    a.hca.qp_to_rts_from_reset(ua, None, &o).expect("UD to RTS");
    a.hca
        .qp_to_rts_from_reset(ua2, None, &o)
        .expect("UD to RTS");
    b.hca.qp_to_rts_from_reset(ub, None, &o).expect("UD to RTS");
    let mtu = 128usize << a.hca.port_attr().active_mtu;
    // AD-06: the InfiniBand port reports its 8 data VLs (VLCap 4: VL0-7).
    assert_eq!(a.hca.port_attr().max_vl_num, 4);
    let grh = 40;
    let src = a.region(mtu, Layout::Contiguous, 0);
    let rb = b.region(grh + mtu + 64, Layout::Scattered, 0);
    let ra = a.region(grh + mtu + 64, Layout::Scattered, 0);
    let (a_lid, b_lid) = (a.lid(), b.lid());
    let mut id = 0;
    for size in [0usize, 1, 100, 1000, mtu] {
        for to_self in [false, true] {
            id += 1;
            let d = pattern(id, size);
            a.write(&src, 0, &d);
            let dest = if to_self {
                ud_dest(a_lid, ua2.qpn, o.qkey)
            } else {
                ud_dest(b_lid, ub.qpn, o.qkey)
            };
            let (node, q, r) = if to_self {
                (&mut a, ua2, &ra)
            } else {
                (&mut b, ub, &rb)
            };
            node.hca.guest().buf_fill(&r.buf, 0, grh + mtu + 64, CANARY);
            node.hca
                .post_recv(q, &RecvWr::new(id, vec![r.mr.sge(&r.buf, 0, grh + mtu)]))
                .unwrap();
            a.hca
                .post_send(ua, &SendWr::send(id).sges(sges(&src, 0, size)).ud(dest))
                .unwrap();
            let mut got: Vec<Cqe> = if to_self {
                wait_n(&mut a.hca, a.cq, 2, T)
            } else {
                let mut v = wait_n(&mut a.hca, a.cq, 1, T);
                v.extend(wait_n(&mut b.hca, b.cq, 1, T));
                v
            };
            assert_success(&got);
            got.sort_by_key(is_recv);
            assert_eq!(got[0].qp_num, ua.qpn);
            let c = &got[1];
            expect_op(c, WcOpcode::Recv);
            assert_eq!(c.qp_num, q.qpn);
            assert_eq!(
                c.byte_len as usize,
                size + grh,
                "UD byte_len counts the GRH space"
            );
            assert_eq!(c.src_qp, ua.qpn, "UD source QPN");
            assert_eq!(c.slid, a_lid, "UD source LID");
            assert_eq!(c.wc_flags & wc_flags::GRH, 0, "no GRH on a local route");
            let node = if to_self { &a } else { &b };
            assert_bytes(
                &node.read(r, grh, size),
                &d,
                &format!("UD {size} B, to self {to_self}"),
            );
            assert_eq!(node.read(r, grh + size, 1)[0], CANARY);
        }
    }
    // A wrong Q_Key is dropped silently; the receive stays posted.
    b.hca
        .post_recv(
            ub,
            &RecvWr::new(999, vec![rb.mr.sge(&rb.buf, 0, grh + mtu)]),
        )
        .unwrap();
    let bad = ud_dest(b_lid, ub.qpn, o.qkey ^ 1);
    a.hca
        .post_send(ua, &SendWr::send(500).inline(b"x").ud(bad))
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert!(
        b.hca
            .wait_cqes(b.cq, 1, Duration::from_millis(300))
            .is_empty(),
        "wrong Q_Key delivered"
    );
    a.hca
        .post_send(
            ua,
            &SendWr::send(501)
                .inline(b"y")
                .ud(ud_dest(b_lid, ub.qpn, o.qkey)),
        )
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    let c = wait_n(&mut b.hca, b.cq, 1, T);
    assert_eq!(c[0].wr_id, 999);
    assert_eq!(c[0].byte_len as usize, grh + 1);
}

#[test]
fn srq_shared_by_several_qps_with_limit_event() {
    let (_v, mut a, mut b) = two_nodes();
    let slots = 64usize;
    let srq = b
        .hca
        .create_srq(b.pd, slots as u32, 1, 0)
        .expect("CREATE_SRQ");
    b.hca.arm_srq_limit(srq, 8).expect("arm the limit");
    assert_eq!(b.hca.query_srq(srq).unwrap().srq_limit, 8);
    let mut pairs = Vec::new();
    for _ in 0..3 {
        let ia = QpInit::rc(a.pd, a.cq);
        let ib = QpInit::rc(b.pd, b.cq).srq(srq);
        pairs.push(connect_pair_with(
            &mut a,
            &ia,
            &mut b,
            &ib,
            &ConnOpts::default(),
        ));
    }
    let rbuf = b.region(slots * 4096, Layout::Scattered, 0);
    let recvs: Vec<RecvWr> = (0..slots)
        .map(|i| RecvWr::new(i as u64, vec![rbuf.mr.sge(&rbuf.buf, i * 4096, 4096)]))
        .collect();
    b.hca.post_srq_recv(srq, &recvs).unwrap();
    let n = 60;
    let src = a.region(n * 4096, Layout::Scattered, 0);
    let size_of = |i: usize| 1000 + i;
    for i in 0..n {
        a.write(&src, i * 4096, &pattern(i as u64, size_of(i)));
    }
    let mut sent = Vec::new();
    for i in 0..n {
        let (qa, _) = pairs[i % 3];
        a.hca
            .post_send(
                qa,
                &SendWr::send(i as u64).sges(sges(&src, i * 4096, size_of(i))),
            )
            .unwrap();
        sent.extend(drain_until(&mut a, qa, 16));
    }
    let mut per_qp = std::collections::HashMap::new();
    let cb = wait_n(&mut b.hca, b.cq, n, T);
    assert_success(&cb);
    for c in &cb {
        *per_qp.entry(c.qp_num).or_insert(0) += 1;
        let i = c.byte_len as usize - 1000;
        assert!(i < n, "byte_len {}", c.byte_len);
        let slot = c.wr_id as usize;
        assert_bytes(
            &b.read(&rbuf, slot * 4096, size_of(i)),
            &pattern(i as u64, size_of(i)),
            &format!("message {i} in SRQ slot {slot}"),
        );
    }
    assert_eq!(per_qp.len(), 3, "every QP used the SRQ: {per_qp:?}");
    assert!(per_qp.values().all(|&k| k == n / 3));
    let srqn = srq.srqn;
    let ev = b.hca.wait_async_event(Duration::from_secs(5), |e| {
        e.kind == EqeType::SrqLimitReached.raw() && e.object == srqn
    });
    assert!(ev.is_some(), "SRQ_LIMIT_REACHED after going below 8 of 64");
    let q = b.hca.query_srq(srq).unwrap();
    assert_eq!(q.srq_limit, 0, "the limit disarms when it fires");
    assert_eq!(q.wqe_count, (slots - n) as u32);
    let more = n - sent.len();
    sent.extend(wait_n(&mut a.hca, a.cq, more, T));
    assert_success(&sent);
    assert!(
        b.hca
            .wait_async_event(Duration::from_millis(200), |e| e.kind
                == EqeType::SrqLimitReached.raw())
            .is_none(),
        "one event per arming"
    );
}

#[test]
fn completion_events_through_msix_with_solicited_arming() {
    let (_v, mut a, mut b) = two_nodes();
    let eq = b
        .hca
        .create_eq(6, bar::MSIX_VECTOR_FIRST_COMP)
        .expect("CREATE_EQ");
    let cq = b.hca.create_cq(8, eq.eqn).expect("CREATE_CQ on the EQ");
    let ia = QpInit::rc(a.pd, a.cq);
    let ib = QpInit::rc(b.pd, cq);
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
    let rbuf = b.region(64 * 64, Layout::Contiguous, 0);
    let recvs: Vec<RecvWr> = (0..64)
        .map(|i| RecvWr::new(i, vec![rbuf.mr.sge(&rbuf.buf, i as usize * 64, 64)]))
        .collect();
    b.hca.post_recv_batch(qb, &recvs[..32]).unwrap();
    let mut id = 0;
    let mut send = |a: &mut Node, solicited: bool| {
        id += 1;
        let mut w = SendWr::send(id).inline(b"event?");
        if solicited {
            w = w.solicited();
        }
        a.hca.post_send(qa, &w).unwrap();
        assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    };
    let quiet = Duration::from_millis(300);
    let completion_of = |evs: &[vhca_tests::abi::cqe::Eqe]| {
        evs.iter()
            .any(|e| e.kind == EqeType::Completion.raw() && e.object == cq.cqn)
    };

    // Not armed: completions, no event.
    send(&mut a, false);
    assert_success(&wait_n(&mut b.hca, cq, 1, T));
    assert!(
        b.hca.wait_event(eq, quiet).is_empty(),
        "event without arming"
    );

    // Armed for solicited only: unsolicited completions raise nothing...
    b.hca.arm_cq(cq, true).unwrap();
    send(&mut a, false);
    send(&mut a, false);
    assert_success(&wait_n(&mut b.hca, cq, 2, T));
    assert!(
        b.hca.wait_event(eq, quiet).is_empty(),
        "event for an unsolicited completion"
    );
    // ...a solicited one does, through the EQ's MSI-X vector.
    send(&mut a, true);
    let evs = b.hca.wait_event(eq, Duration::from_secs(5));
    assert!(
        completion_of(&evs),
        "no COMPLETION EQE for a solicited message: {evs:?}"
    );
    assert_success(&wait_n(&mut b.hca, cq, 1, T));

    // One arming, one event.
    send(&mut a, true);
    assert_success(&wait_n(&mut b.hca, cq, 1, T));
    assert!(
        b.hca.wait_event(eq, quiet).is_empty(),
        "a second event without re-arming"
    );

    // Armed for the next completion: any completion.
    b.hca.arm_cq(cq, false).unwrap();
    send(&mut a, false);
    let evs = b.hca.wait_event(eq, Duration::from_secs(5));
    assert!(completion_of(&evs), "no event when armed for next: {evs:?}");
    assert_success(&wait_n(&mut b.hca, cq, 1, T));

    // The vector unwired (QEMU took it over): the EQE is written, no eventfd here.
    let vec = eq.vector;
    b.hca.guest_mut().unwire(vec).unwrap();
    b.hca.arm_cq(cq, false).unwrap();
    send(&mut a, false);
    assert_success(&wait_n(&mut b.hca, cq, 1, T));
    let evs = vhca_tests::util::wait_for(Duration::from_secs(5), || {
        let e = b.hca.drain_eq(eq.eqn);
        (!e.is_empty()).then_some(e)
    })
    .expect("the EQE is written while the vector is unwired");
    assert!(completion_of(&evs));
    // Rewired to a new eventfd: interrupts arrive there.
    b.hca.guest_mut().wire(vec).unwrap();
    b.hca.arm_cq(cq, false).unwrap();
    send(&mut a, false);
    assert!(
        b.hca.guest().wait_vector(vec, Duration::from_secs(5)) > 0,
        "no interrupt after rewiring"
    );
    assert!(completion_of(&b.hca.wait_event(eq, Duration::from_secs(1))));
    assert_success(&wait_n(&mut b.hca, cq, 1, T));
}
