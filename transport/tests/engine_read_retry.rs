//! RL-14: a retried RDMA READ asks only for what was not received. When a READ
//! response is lost, the re-request starts at the PSN of the first missing
//! response, its RETH VA advanced and its DMA length shortened by what the
//! responses before it placed (9.7.4.1.3: the requester may resume a READ at
//! the failed response; seed 004 "retry"), and the data lands byte-exact.

mod common;

use common::*;
use transport::psn;
use transport::verbs::{WcStatus, WrOpcode};
use transport::wire::PacketRepr;

const LEN: u32 = 4096; // four responses at the 1024-byte path MTU
const PMTU: u64 = 1024;
const SRC: u64 = MEM_BASE + 0x2_0000; // on node 1
const DST: u64 = MEM_BASE + 0x4_0000; // on node 0

/// (PSN, VA, DMA length) of every READ request sniffed, in wire order.
fn read_requests(net: &Net) -> Vec<(u32, u64, u32)> {
    net.sniffed
        .as_ref()
        .unwrap()
        .iter()
        .filter_map(|b| {
            let t = PacketRepr::parse(b).ok()?.transport;
            let reth = t.ext.reth?;
            t.bth
                .opcode
                .info()
                .name
                .contains("READ_REQUEST")
                .then_some((t.bth.psn, reth.va, reth.dma_len))
        })
        .collect()
}

/// A READ of LEN bytes from node 1 whose response at `first + lost` is lost
/// once; returns the READ requests on the wire and the request's first PSN.
fn read_losing(lost: u32, seed: u64) -> (Vec<(u32, u64, u32)>, u32) {
    let mut net = Net::new(2, 1 << 20, seed);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts::default();
    let p = connect(&mut net, 0, 1, &o);
    let first = o.psn_a;
    fill(&mut net, 1, SRC, LEN as usize, 0x5a);
    let target = psn::add(first, lost);
    let mut done = false;
    net.lose = Some(Box::new(move |b: &[u8]| {
        let Ok(pk) = PacketRepr::parse(b) else {
            return false;
        };
        let bth = pk.transport.bth;
        let hit = !done && bth.psn == target && bth.opcode.info().name.contains("READ_RESPONSE");
        done |= hit;
        hit
    }));
    net.sniffed = Some(Vec::new());
    let mut r = send_wr(1, WrOpcode::RdmaRead, sge(DST, LEN, ka));
    r.rkey = kb;
    r.remote_addr = SRC;
    net.nodes[0].engine.post_send(p.qa, r).unwrap();
    assert_eq!(wait(&mut net, 0, p.cq_a, 1)[0].status, WcStatus::Success);
    assert_eq!(
        bytes(&net, 0, DST, LEN as usize),
        bytes(&net, 1, SRC, LEN as usize),
        "READ data byte-exact after the retry"
    );
    assert_eq!(net.dropped, 1, "exactly the one response was lost");
    (read_requests(&net), first)
}

#[test]
fn rl_14_a_lost_middle_response_is_re_read_from_its_psn() {
    // Response 1 of 0..=3 lost: response 2 shows the gap, the re-request
    // starts at response 1 (its PSN, VA + 1 PMTU, 3 PMTUs).
    let (reqs, first) = read_losing(1, 31);
    assert_eq!(reqs[0], (first, SRC, LEN), "{reqs:x?}");
    assert_eq!(
        reqs[1],
        (psn::add(first, 1), SRC + PMTU, LEN - PMTU as u32),
        "{reqs:x?}"
    );
    // Nothing is asked again from the READ's start.
    assert!(reqs[1..].iter().all(|r| r.0 != first), "{reqs:x?}");
}

#[test]
fn rl_14_a_lost_last_response_is_re_read_alone() {
    // The last response lost: no later response shows a gap, the timer does;
    // the re-request asks for the last PMTU only.
    let (reqs, first) = read_losing(3, 32);
    assert_eq!(reqs[0], (first, SRC, LEN), "{reqs:x?}");
    assert_eq!(
        reqs[1],
        (psn::add(first, 3), SRC + 3 * PMTU, PMTU as u32),
        "{reqs:x?}"
    );
    assert_eq!(reqs.len(), 2, "{reqs:x?}");
}
