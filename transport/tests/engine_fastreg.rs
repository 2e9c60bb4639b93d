//! Fast-registration memory regions over the simulated fabric (MP-08): an MR
//! allocated free, registered by a REG_MR work request in send-queue order with
//! a page list read from memory and a consumer key byte, invalidated by
//! LOCAL_INV or by a SEND with Invalidate (o9-5.2.2), and re-registered under a
//! new key while the old one is refused; the errors of REG_MR.

mod common;

use common::*;
use transport::engine::NakReason;
use transport::verbs::{
    Access, FastReg, QpState, RecvWr, SendData, SendWr, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

/// Where node 1 keeps the page list of a REG_MR.
const LIST: u64 = MEM_BASE + 0x2_0000;
/// The MR's virtual address: nothing like the physical pages behind it.
const IOVA: u64 = 0x7f00_1234_5000 + 0x300;
/// Pages of the first registration (out of order on purpose) and of the second.
const PAGES1: [u64; 3] = [
    MEM_BASE + 0x1_2000,
    MEM_BASE + 0x3_0000,
    MEM_BASE + 0x1_0000,
];
const PAGES2: [u64; 3] = [
    MEM_BASE + 0x4_0000,
    MEM_BASE + 0x4_1000,
    MEM_BASE + 0x5_3000,
];
const MR_LEN: u64 = 3 * 4096 - 0x300;
const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

fn write_wr(id: u64, lkey: u32, len: u32, rkey: u32, raddr: u64) -> SendWr {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(MEM_BASE, len, lkey));
    w.rkey = rkey;
    w.remote_addr = raddr;
    w
}

/// Writes a page list into node `node`'s memory at `at`.
fn put_pages(net: &mut Net, node: usize, at: u64, pages: &[u64]) {
    let off = (at - MEM_BASE) as usize;
    for (i, p) in pages.iter().enumerate() {
        net.nodes[node].mem.bytes[off + 8 * i..off + 8 * i + 8].copy_from_slice(&p.to_le_bytes());
    }
}

fn reg_wr(id: u64, key: u32, access: Access, npages: u32) -> SendWr {
    let mut w = send_wr(id, WrOpcode::RegMr, Vec::new());
    w.data = SendData::Reg(FastReg {
        key,
        access,
        iova: IOVA,
        length: MR_LEN,
        page_shift: 12,
        page_list: LIST,
        npages,
    });
    w
}

fn inv_wr(id: u64, key: u32) -> SendWr {
    let mut w = send_wr(id, WrOpcode::LocalInv, Vec::new());
    w.imm_or_inv = key;
    w
}

fn with_byte(key: u32, b: u8) -> u32 {
    (key & !0xff) | u32::from(b)
}

/// Two nodes, one RC pair, all memory registered on both; node 1 allocates a
/// fast-registration MR of 4 pages.
fn setup(seed: u64) -> (Net, Pair, u32, u32, u32) {
    let mut net = Net::new(2, 1 << 20, seed);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let pd = net.nodes[1].pd;
    let fk = net.nodes[1].engine.mrs().alloc_fast_mr(pd, 4).unwrap();
    (net, p, ka, kb, fk)
}

/// Posts `wr` on node 1's QP `qb` and returns its completion.
fn post_b(net: &mut Net, qb: u32, cq_b: u32, wr: SendWr) -> transport::verbs::Completion {
    net.nodes[1].engine.post_send(qb, wr).unwrap();
    wait(net, 1, cq_b, 1).remove(0)
}

fn naked(net: &Net, r: NakReason) -> u64 {
    net.nodes[1].engine.counters().naked(r)
}

/// A WRITE of `len` bytes from node 0 at `raddr` under `rkey` on a new pair:
/// its status (a refused key puts the pair's QPs in Error).
fn write_on_new_pair(net: &mut Net, ka: u32, rkey: u32, raddr: u64, len: u32) -> WcStatus {
    let q = connect(net, 0, 1, &ConnOpts::default());
    net.nodes[0]
        .engine
        .post_send(q.qa, write_wr(1, ka, len, rkey, raddr))
        .unwrap();
    wait(net, 0, q.cq_a, 1)[0].status
}

#[test]
fn mp_08_write_lands_in_a_fast_registered_mr_and_local_inv_refuses_its_key() {
    let (mut net, p, ka, _kb, fk) = setup(1);
    // Free (never registered): its key grants nothing.
    assert_eq!(
        write_on_new_pair(&mut net, ka, fk, IOVA, 8),
        WcStatus::RemAccessErr
    );
    assert_eq!(naked(&net, NakReason::RegionInvalidated), 1);

    put_pages(&mut net, 1, LIST, &PAGES1);
    let k1 = with_byte(fk, 0x5a);
    let c = post_b(&mut net, p.qb, p.cq_b, reg_wr(10, k1, RW, 3));
    assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::RegMr));
    let mr = net.nodes[1].engine.mr_table().mr(k1).unwrap();
    assert_eq!(
        (mr.iova(), mr.length(), mr.pages()),
        (IOVA, MR_LEN, &PAGES1[..])
    );

    // A WRITE across both page boundaries lands through the translation.
    let len = 0x2000u32;
    fill(&mut net, 0, MEM_BASE, len as usize, 3);
    net.nodes[0]
        .engine
        .post_send(p.qa, write_wr(1, ka, len, k1, IOVA + 0x100))
        .unwrap();
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    let src = bytes(&net, 0, MEM_BASE, len as usize);
    // IOVA + 0x100 is offset 0x400 of the first page.
    let first = 0x1000 - 0x400;
    assert_eq!(bytes(&net, 1, PAGES1[0] + 0x400, first), src[..first]);
    assert_eq!(
        bytes(&net, 1, PAGES1[1], 0x1000),
        src[first..first + 0x1000]
    );
    assert_eq!(
        bytes(&net, 1, PAGES1[2], len as usize - first - 0x1000),
        src[first + 0x1000..]
    );

    // LOCAL_INV: the same R_Key is refused (Remote Access Error).
    let c = post_b(&mut net, p.qb, p.cq_b, inv_wr(11, k1));
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    net.nodes[0]
        .engine
        .post_send(p.qa, write_wr(2, ka, 8, k1, IOVA))
        .unwrap();
    assert_eq!(
        wait(&mut net, 0, p.cq_a, 1)[0].status,
        WcStatus::RemAccessErr
    );
    assert_eq!(naked(&net, NakReason::RegionInvalidated), 2);
}

#[test]
fn mp_08_reregistration_with_a_new_key_byte_refuses_the_old_key() {
    let (mut net, p, ka, _, fk) = setup(2);
    put_pages(&mut net, 1, LIST, &PAGES1);
    let k1 = with_byte(fk, 0x10);
    let c = post_b(&mut net, p.qb, p.cq_b, reg_wr(1, k1, RW, 3));
    assert_eq!(c.status, WcStatus::Success);
    assert_eq!(
        post_b(&mut net, p.qb, p.cq_b, inv_wr(2, k1)).status,
        WcStatus::Success
    );
    // Registered again over other pages, with another key byte, unsignaled:
    // the WRITE after it on the same queue sees it (send-queue order).
    put_pages(&mut net, 1, LIST, &PAGES2);
    let k2 = with_byte(fk, 0x11);
    let mut r = reg_wr(3, k2, RW, 3);
    r.flags = transport::verbs::SendFlags(0);
    net.nodes[1].engine.post_send(p.qb, r).unwrap();
    net.nodes[1].engine.post_send(p.qb, inv_wr(5, k2)).unwrap();
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::Success));
    // Invalidated by wr 5, which succeeded only because wr 3 had registered k2.
    let c = post_b(&mut net, p.qb, p.cq_b, {
        let mut r = reg_wr(6, k2, RW, 3);
        r.flags = transport::verbs::SendFlags::SIGNALED;
        r
    });
    assert_eq!(c.status, WcStatus::Success);

    fill(&mut net, 0, MEM_BASE, 0x200, 4);
    net.nodes[0]
        .engine
        .post_send(p.qa, write_wr(7, ka, 0x200, k2, IOVA))
        .unwrap();
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    assert_eq!(
        bytes(&net, 1, PAGES2[0] + 0x300, 0x200),
        bytes(&net, 0, MEM_BASE, 0x200)
    );
    // The old key: refused as stale (MP-02).
    assert_eq!(
        write_on_new_pair(&mut net, ka, k1, IOVA, 8),
        WcStatus::RemAccessErr
    );
    assert_eq!(naked(&net, NakReason::KeyMismatch), 1);
}

#[test]
fn mp_08_send_with_invalidate_frees_a_fast_registered_mr() {
    let (mut net, p, ka, kb, fk) = setup(3);
    put_pages(&mut net, 1, LIST, &PAGES1);
    let k1 = with_byte(fk, 0x77);
    assert_eq!(
        post_b(&mut net, p.qb, p.cq_b, reg_wr(1, k1, RW, 3)).status,
        WcStatus::Success
    );
    net.nodes[1]
        .engine
        .post_recv(
            p.qb,
            RecvWr {
                wr_id: 2,
                sges: sge(MEM_BASE + 0x9000, 64, kb),
            },
        )
        .unwrap();
    let mut s = send_wr(3, WrOpcode::SendWithInv, sge(MEM_BASE, 8, ka));
    s.imm_or_inv = k1;
    net.nodes[0].engine.post_send(p.qa, s).unwrap();
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    let c = wait(&mut net, 1, p.cq_b, 1);
    assert_eq!(
        (c[0].status, c[0].opcode),
        (WcStatus::Success, WcOpcode::Recv)
    );
    assert!(c[0].flags.0 & WcFlags::WITH_INV.0 != 0);
    assert_eq!(c[0].imm_data, k1);
    let mr = net.nodes[1].engine.mr_table().fast_mr_at(k1).unwrap();
    assert!(!mr.fast().unwrap().valid);
    net.nodes[0]
        .engine
        .post_send(p.qa, write_wr(4, ka, 8, k1, IOVA))
        .unwrap();
    assert_eq!(
        wait(&mut net, 0, p.cq_a, 1)[0].status,
        WcStatus::RemAccessErr
    );
    assert_eq!(naked(&net, NakReason::RegionInvalidated), 1);
    // Once free it can be registered again under a new key.
    let q = connect(&mut net, 0, 1, &ConnOpts::default());
    let k2 = with_byte(fk, 0x78);
    assert_eq!(
        post_b(&mut net, q.qb, q.cq_b, reg_wr(5, k2, RW, 3)).status,
        WcStatus::Success
    );
}

/// A REG_MR that fails completes with `status`, puts the QP in Error and
/// leaves the MR as it was.
fn reg_fails(net: &mut Net, wr: SendWr, status: WcStatus) {
    let q = connect(net, 0, 1, &ConnOpts::default());
    let c = post_b(net, q.qb, q.cq_b, wr);
    assert_eq!((c.status, c.opcode), (status, WcOpcode::RegMr));
    assert_eq!(
        net.nodes[1].engine.query_qp(q.qb).unwrap().0,
        QpState::Error
    );
}

#[test]
fn mp_08_reg_mr_errors() {
    let (mut net, p, ka, kb, fk) = setup(4);
    put_pages(&mut net, 1, LIST, &PAGES1);
    let k = with_byte(fk, 0x21);
    // More pages than the MR was allocated with (4).
    let mut w = reg_wr(1, k, RW, 5);
    if let SendData::Reg(r) = &mut w.data {
        r.length = 5 * 4096 - 0x300;
    }
    reg_fails(&mut net, w, WcStatus::LocQpOpErr);
    // A page list that does not cover [iova, iova + length) exactly.
    reg_fails(&mut net, reg_wr(2, k, RW, 2), WcStatus::LocQpOpErr);
    // A page list outside memory.
    let mut w = reg_wr(3, k, RW, 3);
    if let SendData::Reg(r) = &mut w.data {
        r.page_list = MEM_BASE + (1 << 20) - 8;
    }
    reg_fails(&mut net, w, WcStatus::LocQpOpErr);
    // A page that is not page aligned.
    put_pages(
        &mut net,
        1,
        LIST + 0x100,
        &[MEM_BASE + 0x800, PAGES1[1], PAGES1[2]],
    );
    let mut w = reg_wr(4, k, RW, 3);
    if let SendData::Reg(r) = &mut w.data {
        r.page_list = LIST + 0x100;
    }
    reg_fails(&mut net, w, WcStatus::LocQpOpErr);
    // Page size below 4 KiB.
    let mut w = reg_wr(5, k, RW, 3);
    if let SendData::Reg(r) = &mut w.data {
        r.page_shift = 11;
    }
    reg_fails(&mut net, w, WcStatus::LocQpOpErr);
    // Remote write without local write (MP-04).
    reg_fails(
        &mut net,
        reg_wr(6, k, Access::REMOTE_WRITE, 3),
        WcStatus::LocProtErr,
    );
    // The index of an MR registered by the command is not a fast one.
    reg_fails(&mut net, reg_wr(7, kb, RW, 3), WcStatus::LocProtErr);
    // A fast MR of another PD (MP-01).
    let pd2 = net.nodes[1].engine.mrs().alloc_pd().unwrap();
    let other = net.nodes[1].engine.mrs().alloc_fast_mr(pd2, 4).unwrap();
    reg_fails(&mut net, reg_wr(8, other, RW, 3), WcStatus::LocProtErr);
    // Nothing changed: still free under its first key.
    let mr = net.nodes[1].engine.mr_table().fast_mr_at(fk).unwrap();
    assert_eq!((mr.key(), mr.fast().unwrap().valid), (fk, false));
    assert!(mr.pages().is_empty());

    // Registered; a second REG_MR while it is valid is refused (free-state
    // rule) and the first registration stays.
    assert_eq!(
        post_b(&mut net, p.qb, p.cq_b, reg_wr(9, k, RW, 3)).status,
        WcStatus::Success
    );
    reg_fails(
        &mut net,
        reg_wr(10, with_byte(fk, 0x22), RW, 3),
        WcStatus::LocProtErr,
    );
    assert_eq!(
        write_on_new_pair(&mut net, ka, k, IOVA, 8),
        WcStatus::Success
    );
    // LOCAL_INV under a stale key byte fails; the MR stays valid.
    let q = connect(&mut net, 0, 1, &ConnOpts::default());
    let c = post_b(&mut net, q.qb, q.cq_b, inv_wr(11, with_byte(fk, 0x20)));
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::LocProtErr, WcOpcode::LocalInv)
    );
    assert_eq!(
        write_on_new_pair(&mut net, ka, k, IOVA, 8),
        WcStatus::Success
    );
    // The owner deregisters it by index, whatever the key byte it knows.
    assert!(net.nodes[1].engine.mrs().dereg_mr(fk).is_ok());
    assert!(net.nodes[1].engine.mr_table().fast_mr_at(fk).is_none());
}

#[test]
fn mp_08_reg_mr_runs_when_reached_not_after_earlier_acks_and_fence_waits() {
    let (mut net, p, ka, kb, fk) = setup(5);
    put_pages(&mut net, 1, LIST, &PAGES1);
    // B: a 3-packet WRITE to A, then REG_MR: after one round of sending, the
    // WRITE is unacknowledged and the MR is already registered.
    let k1 = with_byte(fk, 0x51);
    let mut w = write_wr(1, kb, 3000, ka, MEM_BASE + 0x4000);
    w.data = SendData::Sges(sge(MEM_BASE + 0x6000, 3000, kb));
    net.nodes[1].engine.post_send(p.qb, w).unwrap();
    net.nodes[1]
        .engine
        .post_send(p.qb, reg_wr(2, k1, RW, 3))
        .unwrap();
    net.step();
    assert!(
        net.poll(1, p.cq_b).is_none(),
        "the WRITE is not acknowledged yet"
    );
    assert!(net.nodes[1].engine.mr_table().mr(k1).is_some());
    // Completions still come in order.
    let c = wait(&mut net, 1, p.cq_b, 2);
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(c[1].opcode, WcOpcode::RegMr);
    // With FENCE it waits for the WRITE's acknowledgement.
    assert_eq!(
        post_b(&mut net, p.qb, p.cq_b, inv_wr(3, k1)).status,
        WcStatus::Success
    );
    let k2 = with_byte(fk, 0x52);
    let mut w = write_wr(4, kb, 3000, ka, MEM_BASE + 0x4000);
    w.data = SendData::Sges(sge(MEM_BASE + 0x6000, 3000, kb));
    net.nodes[1].engine.post_send(p.qb, w).unwrap();
    let mut r = reg_wr(5, k2, RW, 3);
    r.flags = transport::verbs::SendFlags(
        transport::verbs::SendFlags::SIGNALED.0 | transport::verbs::SendFlags::FENCE.0,
    );
    net.nodes[1].engine.post_send(p.qb, r).unwrap();
    net.step();
    assert!(net.nodes[1].engine.mr_table().mr(k2).is_none());
    assert_eq!(wait(&mut net, 1, p.cq_b, 2)[1].status, WcStatus::Success);
    assert!(net.nodes[1].engine.mr_table().mr(k2).is_some());
}

/// REG_MRs run early between WRITEs on a lossy, reordering fabric: go-back-N
/// passes over them without running them twice, completions come once each
/// and in order, and every key works at the end of its turn.
#[test]
fn mp_08_reg_mr_between_writes_under_loss() {
    for seed in 0..8 {
        let (mut net, p, ka, kb, fk) = setup(100 + seed);
        net.faults.drop = 0.15;
        net.faults.reorder = 0.1;
        net.faults.duplicate = 0.05;
        put_pages(&mut net, 1, LIST, &PAGES1);
        let mut expect = Vec::new();
        let mut id = 0;
        for round in 0..6u8 {
            let k = with_byte(fk, 0x60 + round);
            for op in 0..3 {
                id += 1;
                let wr = match op {
                    0 => {
                        let mut w = write_wr(id, kb, 2500, ka, MEM_BASE + 0x4000);
                        w.data = SendData::Sges(sge(MEM_BASE + 0x6000, 2500, kb));
                        w
                    }
                    1 => reg_wr(id, k, RW, 3),
                    _ => inv_wr(id, k),
                };
                net.nodes[1].engine.post_send(p.qb, wr).unwrap();
                expect.push((id, WcStatus::Success));
            }
        }
        let c = wait(&mut net, 1, p.cq_b, expect.len());
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            expect,
            "seed {seed}"
        );
        assert!(net.poll(1, p.cq_b).is_none());
        let mr = net.nodes[1].engine.mr_table().fast_mr_at(fk).unwrap();
        assert_eq!(
            (mr.key(), mr.fast().unwrap().valid),
            (with_byte(fk, 0x65), false)
        );
    }
}

/// READs whose responses complete out of order, then local operations: a
/// go-back that passes over a READ done out of order must run (or skip) the
/// local operation after it, never send it as a request.
#[test]
fn mp_08_local_ops_after_reads_completed_out_of_order_under_loss() {
    for seed in 0..24 {
        let (mut net, p, ka, kb, fk) = setup(200 + seed);
        net.faults.drop = 0.2;
        net.faults.reorder = 0.2;
        put_pages(&mut net, 1, LIST, &PAGES1);
        let mut expect = Vec::new();
        let mut id = 0;
        for round in 0..4u8 {
            let k = with_byte(fk, 0x70 + round);
            for op in 0..4 {
                id += 1;
                let wr = match op {
                    0 | 1 => {
                        let mut r = send_wr(
                            id,
                            WrOpcode::RdmaRead,
                            sge(MEM_BASE + 0x6000 + 0x1000 * op, 2000, kb),
                        );
                        r.rkey = ka;
                        r.remote_addr = MEM_BASE + 0x4000;
                        r
                    }
                    2 => reg_wr(id, k, RW, 3),
                    _ => inv_wr(id, k),
                };
                net.nodes[1].engine.post_send(p.qb, wr).unwrap();
                expect.push((id, WcStatus::Success));
            }
        }
        let c = wait(&mut net, 1, p.cq_b, expect.len());
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            expect,
            "seed {seed}"
        );
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x7000, 2000),
            bytes(&net, 0, MEM_BASE + 0x4000, 2000)
        );
    }
}

/// The same with memory-window binds and invalidates (MP-07), which wait for
/// every earlier WQE: after a go-back over a READ done out of order they run
/// in turn, never as requests.
#[test]
fn mp_07_window_ops_after_reads_completed_out_of_order_under_loss() {
    for seed in 0..24 {
        let (mut net, p, ka, _, _) = setup(300 + seed);
        let pd = net.nodes[1].pd;
        let kb = net.reg_all(1, Access(ALL_ACCESS.0 | Access::MW_BIND.0));
        net.faults.drop = 0.2;
        net.faults.reorder = 0.2;
        let mw = net.nodes[1]
            .engine
            .alloc_mw(pd, transport::verbs::MwType::Type2)
            .unwrap();
        let mut expect = Vec::new();
        let mut id = 0;
        let mut cur = mw;
        for _ in 0..4 {
            let new = with_byte(cur, (cur as u8).wrapping_add(1));
            for op in 0..4 {
                id += 1;
                let wr = match op {
                    0 | 1 => {
                        let mut r = send_wr(
                            id,
                            WrOpcode::RdmaRead,
                            sge(MEM_BASE + 0x6000 + 0x1000 * op, 2000, kb),
                        );
                        r.rkey = ka;
                        r.remote_addr = MEM_BASE + 0x4000;
                        r
                    }
                    2 => {
                        let mut w = send_wr(id, WrOpcode::BindMw, Vec::new());
                        w.data = SendData::Bind(transport::verbs::MwBind {
                            mw_rkey: cur,
                            new_rkey: new,
                            mr_lkey: kb,
                            addr: MEM_BASE,
                            length: 64,
                            access: Access::REMOTE_READ,
                        });
                        w
                    }
                    _ => inv_wr(id, new),
                };
                net.nodes[1].engine.post_send(p.qb, wr).unwrap();
                expect.push((id, WcStatus::Success));
            }
            cur = new;
        }
        let c = wait(&mut net, 1, p.cq_b, expect.len());
        assert_eq!(
            c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
            expect,
            "seed {seed}"
        );
    }
}

/// A kernel ULP's pattern (nvme-rdma: an unsignaled REG_MR, then the request's
/// SEND, per I/O, many I/Os in flight): REG_MRs do not wait for the SENDs
/// before them to be acknowledged, so 256 requests take a few round trips,
/// not one each (MP-08).
#[test]
fn mp_08_reg_mr_plus_send_pipelines() {
    let (mut net, p, ka, kb, _) = setup(9);
    let rtt = 2 * net.latency_ns;
    let pd = net.nodes[1].pd;
    let n = 256u64;
    for i in 0..n {
        net.nodes[0]
            .engine
            .post_recv(
                p.qa,
                RecvWr {
                    wr_id: i,
                    sges: sge(MEM_BASE + 0x8000, 64, ka),
                },
            )
            .unwrap();
    }
    // One page of node 1's memory per MR; the lists at LIST + 8 i.
    let pages: Vec<u64> = (0..n)
        .map(|i| MEM_BASE + 0x3_0000 + 4096 * (i % 16))
        .collect();
    put_pages(&mut net, 1, LIST, &pages);
    let start = net.now;
    for i in 0..n {
        let fk = net.nodes[1].engine.mrs().alloc_fast_mr(pd, 1).unwrap();
        let mut r = send_wr(2 * i, WrOpcode::RegMr, Vec::new());
        r.flags = transport::verbs::SendFlags(0);
        r.data = SendData::Reg(FastReg {
            key: with_byte(fk, 9),
            access: RW,
            iova: 0x1000_0000,
            length: 4096,
            page_shift: 12,
            page_list: LIST + 8 * i,
            npages: 1,
        });
        net.nodes[1].engine.post_send(p.qb, r).unwrap();
        let s = send_wr(2 * i + 1, WrOpcode::Send, sge(MEM_BASE, 64, kb));
        net.nodes[1].engine.post_send(p.qb, s).unwrap();
    }
    let c = wait(&mut net, 1, p.cq_b, n as usize);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    let took = net.now.0 - start.0;
    eprintln!(
        "{n} REG_MR + SEND: {took} ns simulated, {:.1} round trips",
        took as f64 / rtt as f64
    );
    assert!(took < 16 * rtt, "{took} ns for {n} requests, RTT {rtt} ns");
}
