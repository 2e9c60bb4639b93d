//! RNR NAK storm (issue 14; RL-11): eight senders SEND to one receiver whose
//! receive queues are empty. Each sender waits the RNR timer the NAK names and
//! then sends only the NAKed request until it is answered, so the storm costs
//! each sender about one packet per RNR period, not its send window; once
//! receives are posted every message arrives, in order, byte-exact.

mod common;

use common::*;
use transport::verbs::{RecvWr, Sge, WcOpcode, WcStatus, WrOpcode};

const SENDERS: usize = 8;
const MSGS: u64 = 16;
const LEN: u32 = 4096;
/// RNR timer code 14: 1.28 ms (IBA Table 47).
const RNR_CODE: u8 = 14;
const RNR_NS: u64 = 1_280_000;
/// How long the receiver has no buffers.
const STORM_NS: u64 = 20 * RNR_NS;

#[test]
fn rl_11_an_rnr_storm_costs_each_sender_one_packet_per_rnr_period() {
    let mut net = Net::new(SENDERS + 1, 1 << 22, 3);
    let keys: Vec<u32> = (0..=SENDERS).map(|i| net.reg_all(i, ALL_ACCESS)).collect();
    let o = ConnOpts {
        min_rnr_timer: RNR_CODE,
        ..ConnOpts::default()
    };
    // Node 0 receives; nodes 1..=SENDERS send.
    let pairs: Vec<Pair> = (1..=SENDERS).map(|s| connect(&mut net, s, 0, &o)).collect();
    for (k, p) in pairs.iter().enumerate() {
        fill(
            &mut net,
            p.a,
            MEM_BASE,
            (MSGS * u64::from(LEN)) as usize,
            k as u8,
        );
        for m in 0..MSGS {
            let wr = send_wr(
                m,
                WrOpcode::Send,
                vec![Sge {
                    addr: MEM_BASE + m * u64::from(LEN),
                    length: LEN,
                    lkey: keys[p.a],
                }],
            );
            net.nodes[p.a].engine.post_send(p.qa, wr).expect("post");
        }
    }
    let t0 = net.now;
    let sent_before: u64 = (1..=SENDERS)
        .map(|s| net.nodes[s].engine.counters().tx_packets)
        .sum();
    net.run_until(10_000_000, |n| n.now.0 - t0.0 >= STORM_NS);
    let sent: u64 = (1..=SENDERS)
        .map(|s| net.nodes[s].engine.counters().tx_packets)
        .sum::<u64>()
        - sent_before;
    let naks = net.nodes[0].engine.counters().rnr_naks_sent;
    let periods = STORM_NS / RNR_NS;
    eprintln!(
        "RNR storm: {SENDERS} senders, {} ms without receive buffers ({periods} RNR periods): \
         {sent} request packets, {naks} RNR NAKs",
        STORM_NS / 1_000_000
    );
    // The first burst (the initial window) and then one per period each.
    let window = u64::from(transport::engine::INITIAL_WINDOW);
    let bound = SENDERS as u64 * (window + periods + 1);
    assert!(sent <= bound, "{sent} packets > {bound}");
    assert!(
        naks >= SENDERS as u64 * (periods - 1),
        "every sender keeps retrying: {naks}"
    );
    // Buffers arrive: every message is delivered in order and exact.
    for (k, p) in pairs.iter().enumerate() {
        let base = MEM_BASE + (1 << 21) + k as u64 * MSGS * u64::from(LEN);
        for m in 0..MSGS {
            let wr = RecvWr {
                wr_id: m,
                sges: vec![Sge {
                    addr: base + m * u64::from(LEN),
                    length: LEN,
                    lkey: keys[0],
                }],
            };
            net.nodes[0].engine.post_recv(p.qb, wr).expect("post_recv");
        }
    }
    let mut got = vec![0u64; SENDERS];
    let mut sent_ok = vec![0u64; SENDERS];
    let done = net.run_until(10_000_000, |n| {
        for (k, p) in pairs.iter().enumerate() {
            while let Some(c) = n.poll(0, p.cq_b) {
                assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv));
                assert_eq!(c.wr_id, got[k], "sender {k}: in order");
                got[k] += 1;
            }
            while let Some(c) = n.poll(p.a, p.cq_a) {
                assert_eq!(c.status, WcStatus::Success, "sender {k}: {c:?}");
                sent_ok[k] += 1;
            }
        }
        got.iter().all(|g| *g == MSGS) && sent_ok.iter().all(|s| *s == MSGS)
    });
    assert!(done, "received {got:?}, sent {sent_ok:?}");
    for (k, p) in pairs.iter().enumerate() {
        let base = MEM_BASE + (1 << 21) + k as u64 * MSGS * u64::from(LEN);
        let len = (MSGS * u64::from(LEN)) as usize;
        assert!(
            bytes(&net, p.a, MEM_BASE, len) == bytes(&net, 0, base, len),
            "sender {k}: data"
        );
    }
}
