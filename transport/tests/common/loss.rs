//! The bench the loss-recovery tests share (issue 14, `engine::recovery`):
//! two nodes 10 us apart, one RC pair whose ACK timeout (14: 4.096 us *
//! 2^14, about 67 ms) lies far above what recovery should take, and drops
//! chosen by PSN and opcode.

use transport::engine::Limits;
use transport::wire::PacketRepr;

use transport::verbs::Mtu;

use super::{connect, ConnOpts, LinkModel, Net, Pair, ALL_ACCESS};

/// The goodput simulations' pair (`sim_goodput`, `sim_atomic_loss`): two
/// nodes of `mem_len` bytes, 10 us apart on a link of 1 ns per byte with a
/// 128 KiB queue, all memory of each registered, and one RC pair at MTU
/// 4096 with ACK timeout 14, 16 READs/ATOMICs outstanding and 1024 WRs:
/// (bench, pair, node 0's key, node 1's key).
pub fn goodput_pair(seed: u64, mem_len: usize, limits: Limits) -> (Net, Pair, u32, u32) {
    let mut net = Net::with_limits(2, mem_len, seed, limits);
    net.link = Some(LinkModel {
        ns_per_kib: 1024,
        queue_bytes: 128 * 1024,
    });
    net.latency_ns = 10_000;
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts {
        mtu: Mtu::M4096,
        timeout: 14,
        max_rd_atomic: 16,
        max_wr: 1024,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    (net, p, ka, kb)
}

/// Two nodes of 1 MiB, 10 us apart, all memory of each registered, and one
/// RC pair connected with ACK timeout 14; `probe_floor_ns`, when given, is
/// the engines' probe timeout floor (`Limits::min_probe_timeout_ns`):
/// (bench, pair, its options, node 0's key, node 1's key).
pub fn loss_pair(seed: u64, probe_floor_ns: Option<u64>) -> (Net, Pair, ConnOpts, u32, u32) {
    let mut limits = Limits::default();
    if let Some(ns) = probe_floor_ns {
        limits.min_probe_timeout_ns = ns;
    }
    let mut net = Net::with_limits(2, 1 << 20, seed, limits);
    net.latency_ns = 10_000;
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let o = ConnOpts {
        timeout: 14,
        ..ConnOpts::default()
    };
    let p = connect(&mut net, 0, 1, &o);
    (net, p, o, ka, kb)
}

/// From now on the fabric loses every packet for which `hit(PSN, opcode
/// name)` says so (the closure keeps its own count of what it took);
/// packets that do not parse pass.
pub fn lose_when(net: &mut Net, mut hit: impl FnMut(u32, &str) -> bool + 'static) {
    net.lose = Some(Box::new(move |b: &[u8]| {
        let Ok(pk) = PacketRepr::parse(b) else {
            return false;
        };
        let bth = pk.transport.bth;
        hit(bth.psn, bth.opcode.info().name)
    }));
}

/// From now on the fabric loses, for each `(psn, part, n)`, the first `n`
/// packets at that PSN whose opcode name contains `part` (each packet counts
/// against one rule at most).
pub fn lose_first(net: &mut Net, rules: &[(u32, &'static str, u32)]) {
    let mut left = rules.to_vec();
    lose_when(net, move |q, name| {
        left.iter_mut().any(|(psn, part, n)| {
            let hit = *n > 0 && q == *psn && name.contains(*part);
            *n -= u32::from(hit);
            hit
        })
    });
}
