//! Two engines over the simulated fabric: RC operations end to end.

mod common;

use common::*;
use transport::verbs::{RecvWr, Sge, WcOpcode, WcStatus, WrOpcode};

#[test]
fn op_01_rc_send_multi_packet_arrives_byte_exact() {
    let mut net = Net::new(2, 1 << 20, 1);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 5000;
    fill(&mut net, 0, MEM_BASE, len, 7);
    net.nodes[1]
        .engine
        .post_recv(
            p.qb,
            RecvWr {
                wr_id: 9,
                sges: vec![Sge {
                    addr: MEM_BASE + 0x8000,
                    length: 8192,
                    lkey: kb,
                }],
            },
        )
        .unwrap();
    net.nodes[0]
        .engine
        .post_send(
            p.qa,
            send_wr(
                1,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE,
                    length: len as u32,
                    lkey: ka,
                }],
            ),
        )
        .unwrap();
    let c = wait_cqe(&mut net, 1, p.cq_b);
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, len as u32)
    );
    let s = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(
        bytes(&net, 0, MEM_BASE, len),
        bytes(&net, 1, MEM_BASE + 0x8000, len)
    );
}

#[test]
fn op_04_op_06_rc_write_then_read_back() {
    let mut net = Net::new(2, 1 << 20, 2);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 10_000;
    fill(&mut net, 0, MEM_BASE, len, 3);
    let mut w = send_wr(
        1,
        WrOpcode::RdmaWrite,
        vec![Sge {
            addr: MEM_BASE,
            length: len as u32,
            lkey: ka,
        }],
    );
    w.remote_addr = MEM_BASE + 0x1_0003;
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(
        bytes(&net, 0, MEM_BASE, len),
        bytes(&net, 1, MEM_BASE + 0x1_0003, len)
    );
    let mut r = send_wr(
        2,
        WrOpcode::RdmaRead,
        vec![Sge {
            addr: MEM_BASE + 0x4_0001,
            length: len as u32,
            lkey: ka,
        }],
    );
    r.remote_addr = MEM_BASE + 0x1_0003;
    r.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, r).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode, c.byte_len),
        (2, WcStatus::Success, WcOpcode::RdmaRead, len as u32)
    );
    assert_eq!(
        bytes(&net, 0, MEM_BASE, len),
        bytes(&net, 0, MEM_BASE + 0x4_0001, len)
    );
}

#[test]
fn op_07_rc_atomics_execute_once() {
    let mut net = Net::new(2, 1 << 16, 3);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let target = MEM_BASE + 0x100;
    let mut f = send_wr(
        1,
        WrOpcode::AtomicFetchAdd,
        vec![Sge {
            addr: MEM_BASE + 0x200,
            length: 8,
            lkey: ka,
        }],
    );
    f.remote_addr = target;
    f.rkey = kb;
    f.swap_add = 5;
    net.nodes[0].engine.post_send(p.qa, f).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::FetchAdd)
    );
    let mut cs = send_wr(
        2,
        WrOpcode::AtomicCmpSwap,
        vec![Sge {
            addr: MEM_BASE + 0x208,
            length: 8,
            lkey: ka,
        }],
    );
    cs.remote_addr = target;
    cs.rkey = kb;
    cs.compare = 5;
    cs.swap_add = 77;
    net.nodes[0].engine.post_send(p.qa, cs).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.status, c.opcode),
        (WcStatus::Success, WcOpcode::CompSwap)
    );
    assert_eq!(bytes(&net, 1, target, 8), 77u64.to_le_bytes());
    assert_eq!(bytes(&net, 0, MEM_BASE + 0x200, 8), 0u64.to_le_bytes());
    assert_eq!(bytes(&net, 0, MEM_BASE + 0x208, 8), 5u64.to_le_bytes());
}
