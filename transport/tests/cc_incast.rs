//! Issue 31, "Done when": DCQCN in simulated time. Eight RoCEv2 senders write
//! to one receiver through one switch port (an incast), and a ninth node's
//! victim flow shares that port; the switch port is the queue model of
//! `common::bottleneck` (a 10 Gb/s link, ECN marking above a threshold,
//! tail drop at a cap). With DCQCN on the eight converge to fair shares with
//! a bounded queue and the victim's latency stays near its unloaded one;
//! with it off the queue fills to its cap and drops.

mod common;

use common::bottleneck::{jain, mark_ce, quantile, Marking, QueueModel, Star};
use common::*;
use transport::cc::{dcqcn, CcConfig};
use transport::engine::{Limits, PortConfig};
use transport::verbs::{Mtu, Sge, Time, WcStatus, WrOpcode};

/// Every link's rate, Mb/s.
const LINK_MBPS: u32 = 10_000;
/// One-way propagation per link (node to switch, switch to node).
const PROP_NS: u64 = 5_000;
/// The switch port's buffer, and where it marks.
const CAP: u64 = 256 * 1024;
const KMIN: u64 = 4 * 1024;
const KMAX: u64 = 16 * 1024;
const SENDERS: usize = 8;
const RECEIVER: usize = 0;
const VICTIM: usize = SENDERS + 1;
/// Each sender keeps this many 64 KiB WRITEs posted.
const OUTSTANDING: usize = 4;
const MSG: u32 = 64 * 1024;
/// The victim: one 256-byte WRITE at a time, one every 20 us.
const VICTIM_LEN: u32 = 256;
const VICTIM_GAP_NS: u64 = 20_000;

/// mlx5's DCQCN parameters with `rp_clamp_tgt_rate` 1: every CNP sets the
/// target rate to the current rate, as the DCQCN paper's reaction point does.
/// With mlx5's default 0 the target stays where the first CNP left it (line
/// rate) while CNPs come more often than `rp_time_reset`, and each byte
/// stage's fast recovery then goes halfway back to line rate: on this incast
/// the queue stays at its cap (README, "Congestion control").
fn params() -> dcqcn::Params {
    dcqcn::Params {
        rp_clamp_tgt_rate: 1,
        ..dcqcn::Params::default()
    }
}

fn ports(n: usize, cc: bool) -> Vec<PortConfig> {
    (1..=n)
        .map(|i| {
            let mut p = PortConfig::ethernet(roce_mac(i)).with_ethernet_mtu(9000);
            p.lid = i as u16;
            p.roce_gids[0] = Some(roce_gid_v4(i));
            p.rate_mbps = LINK_MBPS;
            if cc {
                p.cc = CcConfig {
                    dcqcn: Some(params()),
                    ..CcConfig::default()
                };
            }
            p
        })
        .collect()
}

struct Outcome {
    /// Bytes each sender got through the bottleneck in the measured window.
    shares: Vec<f64>,
    queue_p99: u64,
    queue_max: u64,
    drops: u64,
    victim_p99_ns: u64,
    victim_samples: usize,
    /// Each node's congestion-control counters.
    cc: Vec<transport::cc::CcCounters>,
}

/// Runs the incast (`senders` of them; 0: the victim alone) for `warm` then
/// `measure` ns.
fn incast(cc: bool, senders: usize, warm: u64, measure: u64) -> Outcome {
    let mut net = Net::with_ports(ports(VICTIM + 1, cc), 1 << 20, 31, Limits::default());
    let keys: Vec<u32> = (0..=VICTIM).map(|i| net.reg_all(i, ALL_ACCESS)).collect();
    let o = ConnOpts {
        mtu: Mtu::M4096,
        timeout: 12,
        ..ConnOpts::default()
    };
    let pairs: Vec<Pair> = (1..=VICTIM)
        .map(|i| connect(&mut net, i, RECEIVER, &o))
        .collect();
    let queue = QueueModel {
        rate_mbps: LINK_MBPS,
        cap_bytes: CAP,
        marking: Marking::Red {
            kmin: KMIN,
            kmax: KMAX,
            pmax: 0.2,
        },
    };
    let mut star = Star::new(&net, LINK_MBPS, PROP_NS, queue, mark_ce);
    let mut posted = [0usize; VICTIM + 1];
    let mut next_id = 1u64;
    let mut victim_sent: Option<Time> = None;
    let mut victim_next = Time(0);
    let mut lat: Vec<u64> = Vec::new();
    let mut recording = false;
    let mut errors = 0;
    let end = Time(warm + measure);
    let mut app = |net: &mut Net, recording: bool| {
        for (k, p) in pairs.iter().enumerate() {
            let node = k + 1;
            while let Some(c) = net.poll(node, p.cq_a) {
                if c.status != WcStatus::Success {
                    errors += 1;
                }
                posted[node] -= 1;
                if node == VICTIM {
                    if let Some(t) = victim_sent.take() {
                        if recording {
                            lat.push(net.now.0 - t.0);
                        }
                    }
                }
            }
            if node == VICTIM {
                if posted[node] == 0 && net.now >= victim_next {
                    let mut w = send_wr(next_id, WrOpcode::RdmaWrite, sge(keys[node], VICTIM_LEN));
                    w.remote_addr = MEM_BASE + 0x8_0000;
                    w.rkey = keys[RECEIVER];
                    net.nodes[node].engine.post_send(p.qa, w).unwrap();
                    next_id += 1;
                    posted[node] += 1;
                    victim_sent = Some(net.now);
                    victim_next = net.now.plus_ns(VICTIM_GAP_NS);
                }
                continue;
            }
            if node > senders {
                continue;
            }
            while posted[node] < OUTSTANDING {
                let mut w = send_wr(next_id, WrOpcode::RdmaWrite, sge(keys[node], MSG));
                w.remote_addr = MEM_BASE;
                w.rkey = keys[RECEIVER];
                net.nodes[node].engine.post_send(p.qa, w).unwrap();
                next_id += 1;
                posted[node] += 1;
            }
        }
    };
    while net.now < end {
        if !recording && net.now.0 >= warm {
            recording = true;
            star.recording = true;
            star.reset_stats();
        }
        star.step(&mut net);
        app(&mut net, recording);
    }
    assert_eq!(errors, 0, "every WRITE completes");
    let cc: Vec<_> = net.nodes.iter().map(|n| n.engine.counters().cc).collect();
    let s = star.stats(RECEIVER);
    let shares = (1..=senders).map(|i| s.tx_by_src[i] as f64).collect();
    let mut occ = s.occupancy.clone();
    let samples = lat.len();
    Outcome {
        shares,
        queue_p99: quantile(&mut occ, 0.99),
        queue_max: s.max_bytes,
        drops: s.drops,
        victim_p99_ns: quantile(&mut lat, 0.99),
        victim_samples: samples,
        cc,
    }
}

fn sge(lkey: u32, length: u32) -> Vec<Sge> {
    vec![Sge {
        addr: MEM_BASE,
        length,
        lkey,
    }]
}

/// The queue bound the incast keeps with DCQCN on: the p99 of the bytes a
/// packet finds queued at the bottleneck is at most twice the marking
/// profile's Kmax (an eighth of the buffer).
const QUEUE_P99_BOUND: u64 = 2 * KMAX;

#[test]
fn dcqcn_incast_converges_to_fair_shares_with_a_bounded_queue_and_spares_the_victim() {
    let unloaded = incast(true, 0, 1_000_000, 2_000_000);
    assert!(unloaded.victim_samples > 50);
    let on = incast(true, SENDERS, 20_000_000, 30_000_000);
    let j = jain(&on.shares);
    let total: f64 = on.shares.iter().sum();
    eprintln!(
        "unloaded victim p99 {} ns; DCQCN on: shares {:?} (Jain {j:.3}, {:.2} Gb/s), queue p99 {} max {}, drops {}, victim p99 {} ns over {} samples; receiver {:?}, sender 1 {:?}",
        unloaded.victim_p99_ns,
        on.shares,
        total * 8.0 / 30e6,
        on.queue_p99,
        on.queue_max,
        on.drops,
        on.victim_p99_ns,
        on.victim_samples,
        on.cc[RECEIVER],
        on.cc[1],
    );
    // The receiver marked, answered and the senders cut.
    assert!(on.cc[RECEIVER].ce_seen > 0 && on.cc[RECEIVER].cnps_sent > 0);
    let received: u64 = on.cc.iter().map(|c| c.cnps_received).sum();
    assert_eq!(
        received, on.cc[RECEIVER].cnps_sent,
        "every CNP reached its QP"
    );
    assert!((1..=SENDERS).all(|i| on.cc[i].rate_cuts > 0));
    // Fair shares of a link kept busy (>= 80% of 10 Gb/s), a short queue, no
    // loss, and the victim within twice its unloaded latency.
    assert!(j >= 0.95, "Jain's index {j}");
    assert!(total * 8.0 / 30e6 >= 0.8 * f64::from(LINK_MBPS) / 1e3);
    assert!(
        on.queue_p99 <= QUEUE_P99_BOUND,
        "queue p99 {} over {QUEUE_P99_BOUND}",
        on.queue_p99
    );
    assert_eq!(on.drops, 0);
    assert!(
        on.victim_p99_ns <= 2 * unloaded.victim_p99_ns,
        "victim p99 {} ns, unloaded {} ns",
        on.victim_p99_ns,
        unloaded.victim_p99_ns
    );
}

#[test]
fn without_congestion_control_the_incast_fills_the_queue_to_its_cap_and_drops() {
    let off = incast(false, SENDERS, 2_000_000, 5_000_000);
    eprintln!(
        "DCQCN off: shares {:?}, queue p99 {} max {}, drops {}",
        off.shares, off.queue_p99, off.queue_max, off.drops
    );
    // Frames are not ECN-capable: nothing is marked, nothing answered.
    assert_eq!(off.cc[RECEIVER].ce_seen, 0);
    assert!(off.cc.iter().all(|c| c.cnps_sent == 0 && c.rate_cuts == 0));
    // The queue sits at its cap (within one frame) and drops.
    assert!(off.queue_p99 + 9000 > CAP, "queue p99 {}", off.queue_p99);
    assert!(off.drops > 0);
}
