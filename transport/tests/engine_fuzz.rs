//! Hostile peers (ARCHITECTURE.md §9): packets that pass the wire checks (CRCs recomputed)
//! but carry arbitrary headers, opcodes, PSNs, keys and lengths, thrown at engines
//! with live RC, UC and UD QPs. Nothing panics, memory outside the registered
//! regions is never touched, and afterwards a fresh QP pair still moves data.

mod common;

use common::*;
use transport::verbs::{QpType, RecvWr, SendData, SendFlags, SendWr, Sge, WcStatus, WrOpcode};
use transport::wire::crc::{icrc_native, vcrc};
use transport::wire::Lrh;

/// Recomputes PktLen, the ICRC and the VCRC of a mutated native packet so that it
/// reaches the transport.
fn fix_crcs(p: &mut Vec<u8>) {
    if p.len() < 8 + 12 + 6 {
        return;
    }
    // Whole 4-byte words up to the ICRC, then ICRC and VCRC.
    let words = (p.len() - 2) / 4;
    p.truncate(words * 4 + 2);
    let crc_end = words * 4;
    {
        let mut l = Lrh::new_unchecked(&mut p[..]);
        l.set_pkt_len(words as u16);
    }
    let has_grh = p[1] & 3 == 3;
    if crc_end < 4 + if has_grh { 60 } else { 20 } {
        return;
    }
    if has_grh && p.len() >= 48 {
        let pay = (crc_end - 48) as u16;
        p[12..14].copy_from_slice(&pay.to_be_bytes());
    }
    let icrc = icrc_native(&p[..crc_end - 4], has_grh);
    p[crc_end - 4..crc_end].copy_from_slice(&icrc.to_le_bytes());
    let v = vcrc(&p[..crc_end]);
    p[crc_end..crc_end + 2].copy_from_slice(&v.to_le_bytes());
}

fn send(id: u64, op: WrOpcode, addr: u64, len: u32, key: u32, raddr: u64, rkey: u32) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: op,
        flags: SendFlags::SIGNALED,
        data: SendData::Sges(vec![Sge {
            addr,
            length: len,
            lkey: key,
        }]),
        imm_or_inv: 0,
        remote_addr: raddr,
        rkey,
        compare: 0,
        swap_add: 1,
        ud: None,
    }
}

/// Brings every pair back to RTS with its original PSNs, so that the recorded
/// packets reach live responders and requesters again (a QP a bad packet moved to
/// Error drops everything after).
fn revive(net: &mut Net, pairs: &[(QpType, Pair)]) {
    use transport::verbs::{AttrMask, QpAttr, QpState};
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    for (t, p) in pairs {
        let o = ConnOpts {
            qp_type: *t,
            ..ConnOpts::default()
        };
        for (n, q) in [(p.a, p.qa), (p.b, p.qb)] {
            let now = net.now;
            net.nodes[n]
                .engine
                .modify_qp(q, &reset, AttrMask::STATE, now)
                .unwrap();
        }
        bring_up(net, p.a, p.qa, &o, 2, p.qb, o.psn_a, o.psn_b);
        bring_up(net, p.b, p.qb, &o, 1, p.qa, o.psn_b, o.psn_a);
    }
}

/// Only this window of each node's memory is registered; the rest must stay zero.
const MR_OFF: u64 = 0x4_0000;
const MR_LEN: u64 = 0x4_0000;
const MEM_LEN: usize = 0x10_0000;

#[test]
fn pv_10_rl_12_mp_04_hostile_packets_never_panic_nor_touch_unregistered_memory() {
    for seed in 0..4u64 {
        let mut net = Net::new(2, MEM_LEN, 100 + seed);
        let mut keys = [0u32; 2];
        for (n, k) in keys.iter_mut().enumerate() {
            let node = &mut net.nodes[n];
            let pages = (0..MR_LEN / 4096)
                .map(|i| MEM_BASE + MR_OFF + i * 4096)
                .collect();
            *k = node
                .engine
                .mrs()
                .reg_mr(node.pd, MEM_BASE + MR_OFF, MR_LEN, ALL_ACCESS, 4096, pages)
                .unwrap();
        }
        let mr = MEM_BASE + MR_OFF;
        let mut pairs = Vec::new();
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            let o = ConnOpts {
                qp_type: t,
                ..ConnOpts::default()
            };
            pairs.push((t, connect(&mut net, 0, 1, &o)));
        }
        // Legitimate traffic, recorded as seeds for mutation.
        let mut corpus: Vec<Vec<u8>> = Vec::new();
        let mut buf = vec![0u8; 8192];
        for (i, (t, p)) in pairs.iter().enumerate() {
            for k in 0..8u64 {
                let _ = net.nodes[1].engine.post_recv(
                    p.qb,
                    RecvWr {
                        wr_id: k,
                        sges: vec![Sge {
                            addr: mr + 0x1000 * k,
                            length: 0x1000,
                            lkey: keys[1],
                        }],
                    },
                );
            }
            if *t == QpType::Ud {
                continue;
            }
            let ops: &[WrOpcode] = if *t == QpType::Rc {
                &[
                    WrOpcode::Send,
                    WrOpcode::RdmaWrite,
                    WrOpcode::RdmaRead,
                    WrOpcode::AtomicFetchAdd,
                ]
            } else {
                &[WrOpcode::Send, WrOpcode::RdmaWrite]
            };
            for (j, op) in ops.iter().enumerate() {
                let len = if *op == WrOpcode::AtomicFetchAdd {
                    8
                } else {
                    3000
                };
                let w = send(
                    j as u64,
                    *op,
                    mr,
                    len,
                    keys[0],
                    mr + 0x2_0000 + 0x2000 * i as u64,
                    keys[1],
                );
                net.nodes[0].engine.post_send(p.qa, w).unwrap();
            }
            for _ in 0..50 {
                for n in 0..2 {
                    let now = net.now;
                    loop {
                        let node = &mut net.nodes[n];
                        let Some(len) = node.engine.poll_transmit(&mut node.mem, now, &mut buf)
                        else {
                            break;
                        };
                        corpus.push(buf[..len].to_vec());
                        let m = &mut net.nodes[1 - n];
                        m.engine.handle_packet(&buf[..len], &mut m.mem, now);
                    }
                }
            }
        }
        assert!(corpus.len() > 10, "corpus {}", corpus.len());
        // Now the hostile part.
        let mut rng = Rng::new(seed);
        for i in 0..50_000u64 {
            let mut p = corpus[rng.below(corpus.len() as u64) as usize].clone();
            match rng.below(6) {
                0 => {
                    // Flip bytes in the headers (LRH..first 60 bytes).
                    for _ in 0..1 + rng.below(4) {
                        let at = rng.below(p.len().min(64) as u64) as usize;
                        p[at] ^= 1 << rng.below(8);
                    }
                }
                1 => p[8] = rng.below(256) as u8, // any opcode
                2 => {
                    // PSN anywhere.
                    let v = rng.next();
                    p[17..20].copy_from_slice(&v.to_be_bytes()[..3]);
                }
                3 => {
                    // RETH/AtomicETH fields: VA, R_Key, length.
                    for at in 20..p.len().min(48) {
                        if rng.chance(0.3) {
                            p[at] = rng.below(256) as u8;
                        }
                    }
                }
                4 => {
                    // Longer or shorter.
                    let n = rng.below(300) as usize;
                    if rng.chance(0.5) {
                        p.truncate(p.len().saturating_sub(n).max(8));
                    } else {
                        p.extend((0..n).map(|_| rng.below(256) as u8));
                    }
                }
                _ => {
                    // DestQP among the live ones and a few others.
                    let q = [
                        pairs[0].1.qa,
                        pairs[0].1.qb,
                        pairs[1].1.qb,
                        pairs[2].1.qb,
                        0,
                        1,
                        0xff_ffff,
                    ][rng.below(7) as usize];
                    p[13..16].copy_from_slice(&q.to_be_bytes()[1..]);
                }
            }
            if !rng.chance(0.05) {
                fix_crcs(&mut p);
            }
            let to = rng.below(2) as usize;
            let now = net.now;
            let n = &mut net.nodes[to];
            n.engine.handle_packet(&p, &mut n.mem, now);
            if i % 7 == 0 {
                net.step();
            }
            if i % 500 == 499 {
                revive(&mut net, &pairs);
            }
        }
        net.run_until(200_000, |_| false);
        // Nothing outside the MR changed on either node.
        for n in 0..2 {
            let m = &net.nodes[n].mem.bytes;
            let (lo, hi) = (MR_OFF as usize, (MR_OFF + MR_LEN) as usize);
            assert!(
                m[..lo].iter().all(|b| *b == 0),
                "seed {seed} node {n}: below the MR"
            );
            assert!(
                m[hi..].iter().all(|b| *b == 0),
                "seed {seed} node {n}: above the MR"
            );
        }
        // A fresh RC pair still works.
        let p = connect(&mut net, 0, 1, &ConnOpts::default());
        net.nodes[1]
            .engine
            .post_recv(
                p.qb,
                RecvWr {
                    wr_id: 77,
                    sges: vec![Sge {
                        addr: mr + 0x3_0000,
                        length: 64,
                        lkey: keys[1],
                    }],
                },
            )
            .unwrap();
        net.nodes[0]
            .engine
            .post_send(p.qa, send(5, WrOpcode::Send, mr, 64, keys[0], 0, 0))
            .unwrap();
        let mut got = None;
        net.run_until(1_000_000, |n| {
            got = n.poll(1, p.cq_b);
            got.is_some()
        });
        let c = got.expect("a fresh pair delivers after the storm");
        assert_eq!((c.wr_id, c.status), (77, WcStatus::Success));
        let c = &net.nodes[0].engine.counters();
        eprintln!(
            "seed {seed}: {} packets in, wire drops {:?}, naks {}",
            c.rx_packets,
            c.wire_drops.iter().collect::<Vec<_>>(),
            c.naks_sent
        );
    }
}
