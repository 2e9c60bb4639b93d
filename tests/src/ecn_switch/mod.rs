//! The logic of `ecn-switch` (src/bin/ecn-switch.rs, issue 31 item 3): a
//! userspace Ethernet switch that plays a data-centre switch's ECN-marking
//! egress port where the kernel has no marking qdisc (no `red`, `fq_codel`,
//! `codel` or `pie`: this project's build host). It forwards frames between
//! the kernel sides of TAP devices (AF_PACKET sockets, [`afpacket`]), learns
//! MACs, and gives every egress port a byte queue drained at a set rate (a
//! token bucket) with RED on the instantaneous queue, as a switch's WRED/ECN
//! profile (DCQCN's Kmin/Kmax/Pmax):
//!
//! - below `min_th` bytes queued nothing happens; between `min_th` and
//!   `max_th` a frame is hit with a probability rising linearly to `max_p`;
//!   at or above `max_th` every frame is hit;
//! - a hit ECN-capable frame (ECT(0), ECT(1)) is marked Congestion
//!   Experienced (RFC 3168 §5; IPv4 header checksum recomputed, RFC 791), a
//!   hit frame that is not ECN-capable (not IP, Not-ECT) is dropped;
//! - a frame that would take the queue past `cap` bytes is dropped (tail).
//!
//! Marking does not break RoCEv2's ICRC: the IP TOS / traffic class byte is
//! one of the variant fields the ICRC masks (IBA annex A17.3.3, as
//! `transport::wire::roce` verifies it).
//!
//! Everything here is pure (time in nanoseconds as an argument, randomness
//! from a seeded generator), so it is unit-tested below.

pub mod afpacket;

use std::collections::{HashMap, VecDeque};

/// RED/ECN profile and buffer of one egress port, in bytes of Ethernet frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    pub min_th: usize,
    pub max_th: usize,
    /// Probability at `max_th` (0..=1).
    pub max_p: f64,
    /// The buffer: a frame that would pass it is tail-dropped.
    pub cap: usize,
}

impl Red {
    /// Checks the profile: 0 < min_th < max_th <= cap, 0 < max_p <= 1.
    pub fn new(min_th: usize, max_th: usize, max_p: f64, cap: usize) -> Result<Red, String> {
        if min_th == 0 || min_th >= max_th || max_th > cap {
            return Err(format!(
                "RED thresholds must be 0 < min ({min_th}) < max ({max_th}) <= cap ({cap})"
            ));
        }
        if !(max_p > 0.0 && max_p <= 1.0) {
            return Err(format!("RED max_p {max_p} is not in (0, 1]"));
        }
        Ok(Red {
            min_th,
            max_th,
            max_p,
            cap,
        })
    }

    /// Probability that a frame arriving at a queue of `queued` bytes is hit.
    pub fn probability(&self, queued: usize) -> f64 {
        if queued < self.min_th {
            0.0
        } else if queued >= self.max_th {
            1.0
        } else {
            self.max_p * (queued - self.min_th) as f64 / (self.max_th - self.min_th) as f64
        }
    }

    /// What happens to a frame of `len` bytes with ECN codepoint `ecn`
    /// (None: not IP) arriving at `queued` bytes; `u` is uniform in [0, 1).
    pub fn verdict(&self, queued: usize, len: usize, ecn: Option<u8>, u: f64) -> Verdict {
        if queued + len > self.cap {
            return Verdict::TailDrop;
        }
        if u >= self.probability(queued) {
            return Verdict::Enqueue;
        }
        match ecn {
            Some(ECN_CE) => Verdict::Enqueue, // already marked upstream
            Some(ECT_0 | ECT_1) => Verdict::Mark,
            _ => Verdict::EarlyDrop,
        }
    }
}

/// RFC 3168 §5 codepoints.
pub const NOT_ECT: u8 = 0;
pub const ECT_1: u8 = 1;
pub const ECT_0: u8 = 2;
pub const ECN_CE: u8 = 3;

/// The fate of an arriving frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Enqueue,
    /// Enqueue marked CE.
    Mark,
    /// RED hit a frame that cannot be marked.
    EarlyDrop,
    /// The buffer is full.
    TailDrop,
}

/// Where the IP header of an Ethernet frame starts and its version, past one
/// 802.1Q tag; None for anything else (ARP, truncated headers).
fn ip_header(frame: &[u8]) -> Option<(usize, u8)> {
    let mut off = 12;
    let mut ty = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
    if ty == 0x8100 {
        off += 4;
        ty = u16::from_be_bytes([*frame.get(off)?, *frame.get(off + 1)?]);
    }
    let ip = off + 2;
    match ty {
        0x0800 if frame.len() >= ip + 20 && frame[ip] >> 4 == 4 => {
            let ihl = usize::from(frame[ip] & 0xf) * 4;
            (ihl >= 20 && frame.len() >= ip + ihl).then_some((ip, 4))
        }
        0x86dd if frame.len() >= ip + 40 && frame[ip] >> 4 == 6 => Some((ip, 6)),
        _ => None,
    }
}

/// The ECN codepoint of an IPv4 or IPv6 frame; None if it is not IP.
pub fn ecn_of(frame: &[u8]) -> Option<u8> {
    let (ip, v) = ip_header(frame)?;
    Some(match v {
        4 => frame[ip + 1] & 3,
        _ => (frame[ip + 1] >> 4) & 3,
    })
}

/// The RFC 791 header checksum of the IPv4 header `hdr` (its checksum field
/// taken as zero).
pub fn ipv4_header_checksum(hdr: &[u8]) -> u16 {
    // Bytes 10-11 are the checksum field itself; sums chain (RFC 1071).
    let head = transport::wire::roce::internet_sum(0, &hdr[..10.min(hdr.len())]);
    !transport::wire::roce::internet_sum(u32::from(head), hdr.get(12..).unwrap_or(&[]))
}

/// Marks an ECN-capable IP frame Congestion Experienced, fixing the IPv4
/// header checksum (IPv6 has none). Returns false, leaving the frame as it
/// was, for a frame that is not IP or is Not-ECT (RFC 3168 §5: only ECT
/// frames may be marked).
pub fn set_ce(frame: &mut [u8]) -> bool {
    let Some((ip, v)) = ip_header(frame) else {
        return false;
    };
    match v {
        4 => {
            if frame[ip + 1] & 3 == NOT_ECT {
                return false;
            }
            frame[ip + 1] |= ECN_CE;
            let ihl = usize::from(frame[ip] & 0xf) * 4;
            let c = ipv4_header_checksum(&frame[ip..ip + ihl]);
            frame[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        }
        _ => {
            // Traffic class = low nibble of byte 0, high nibble of byte 1;
            // ECN is its low two bits: bits 4-5 of byte 1.
            if (frame[ip + 1] >> 4) & 3 == NOT_ECT {
                return false;
            }
            frame[ip + 1] |= ECN_CE << 4;
        }
    }
    true
}

/// xorshift64* (Vigna): a small seeded generator, so that a run can be
/// replayed and the tests are deterministic.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Queue occupancy seen by arriving frames, in buckets of [`Occupancy::BUCKET`]
/// bytes up to the cap: bounded by the cap, not by the run's length.
#[derive(Debug, Clone)]
pub struct Occupancy {
    counts: Vec<u64>,
    pub max: usize,
}

impl Occupancy {
    pub const BUCKET: usize = 256;

    pub fn new(cap: usize) -> Occupancy {
        Occupancy {
            counts: vec![0; cap / Self::BUCKET + 1],
            max: 0,
        }
    }

    pub fn record(&mut self, bytes: usize) {
        let i = (bytes / Self::BUCKET).min(self.counts.len() - 1);
        self.counts[i] += 1;
        self.max = self.max.max(bytes);
    }

    /// The upper edge of the bucket holding quantile `q` (0..=1) of the samples;
    /// 0 without samples.
    pub fn percentile(&self, q: f64) -> usize {
        let n: u64 = self.counts.iter().sum();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return ((i + 1) * Self::BUCKET).min(self.max);
            }
        }
        self.max
    }
}

/// Counters of one egress port.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortStats {
    pub forwarded: u64,
    pub bytes: u64,
    pub marked: u64,
    pub early_drops: u64,
    pub tail_drops: u64,
}

/// One egress port: RED at the tail, a token bucket at the head. Frames are
/// kept with `prefix` bytes in front of the Ethernet header (the AF_PACKET
/// socket's virtio-net header), which neither RED nor the rate counts.
#[derive(Debug)]
pub struct Egress {
    red: Red,
    prefix: usize,
    frames: VecDeque<Vec<u8>>,
    queued: usize,
    /// Bytes per nanosecond; 0 = no limit.
    rate: f64,
    burst: f64,
    tokens: f64,
    last_ns: u64,
    pub stats: PortStats,
    pub occupancy: Occupancy,
}

impl Egress {
    /// A port drained at `rate_bps` bits/s (0: as fast as frames come) with
    /// a bucket of `burst` bytes.
    pub fn new(red: Red, rate_bps: u64, burst: usize, prefix: usize) -> Egress {
        Egress {
            red,
            prefix,
            frames: VecDeque::new(),
            queued: 0,
            rate: rate_bps as f64 / 8e9,
            burst: burst as f64,
            tokens: burst as f64,
            last_ns: 0,
            stats: PortStats::default(),
            occupancy: Occupancy::new(red.cap),
        }
    }

    /// Bytes waiting.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Offers a frame (prefix included); `u` uniform in [0, 1).
    pub fn offer(&mut self, mut frame: Vec<u8>, u: f64) -> Verdict {
        let eth = frame.get(self.prefix..).unwrap_or(&[]);
        let len = eth.len();
        self.occupancy.record(self.queued);
        let v = self.red.verdict(self.queued, len, ecn_of(eth), u);
        match v {
            Verdict::TailDrop => self.stats.tail_drops += 1,
            Verdict::EarlyDrop => self.stats.early_drops += 1,
            Verdict::Enqueue | Verdict::Mark => {
                if v == Verdict::Mark && set_ce(&mut frame[self.prefix..]) {
                    self.stats.marked += 1;
                }
                self.queued += len;
                self.frames.push_back(frame);
            }
        }
        v
    }

    fn refill(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        self.tokens = (self.tokens + dt as f64 * self.rate).min(self.burst);
    }

    /// The head frame if the bucket lets it go at `now_ns`. The bucket may go
    /// below zero by one frame, so that a frame larger than the bucket still
    /// leaves (at the rate, once the debt is paid back).
    pub fn pop(&mut self, now_ns: u64) -> Option<Vec<u8>> {
        if self.rate > 0.0 {
            self.refill(now_ns);
            if self.tokens < 0.0 {
                return None;
            }
        }
        let f = self.frames.pop_front()?;
        let len = f.len() - self.prefix.min(f.len());
        self.queued -= len;
        if self.rate > 0.0 {
            self.tokens -= len as f64;
        }
        self.stats.forwarded += 1;
        self.stats.bytes += len as u64;
        Some(f)
    }

    /// Nanoseconds from `now_ns` until [`Egress::pop`] can give a frame; None if
    /// the queue is empty.
    pub fn wait_ns(&self, now_ns: u64) -> Option<u64> {
        if self.frames.is_empty() {
            return None;
        }
        if self.rate <= 0.0 {
            return Some(0);
        }
        let dt = now_ns.saturating_sub(self.last_ns) as f64;
        let t = (self.tokens + dt * self.rate).min(self.burst);
        if t >= 0.0 {
            Some(0)
        } else {
            Some((-t / self.rate).ceil() as u64)
        }
    }
}

/// Where a frame goes: one port, or every other port (flood).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    Port(usize),
    Flood,
    /// Back where it came from: a frame for a station on its own port.
    Filter,
}

/// A learning bridge's MAC table, bounded: past `limit` stations new
/// sources are not learnt (their frames are flooded, as a full switch does).
#[derive(Debug)]
pub struct MacTable {
    map: HashMap<[u8; 6], usize>,
    limit: usize,
}

impl MacTable {
    pub fn new(limit: usize) -> MacTable {
        MacTable {
            map: HashMap::new(),
            limit,
        }
    }

    /// Learns the source of a frame from `port`, and says where it goes.
    pub fn route(&mut self, frame: &[u8], port: usize) -> Out {
        if frame.len() < 14 {
            return Out::Filter;
        }
        let mut src = [0; 6];
        src.copy_from_slice(&frame[6..12]);
        if src[0] & 1 == 0 && (self.map.contains_key(&src) || self.map.len() < self.limit) {
            self.map.insert(src, port);
        }
        if frame[0] & 1 != 0 {
            return Out::Flood; // broadcast, multicast
        }
        let mut dst = [0; 6];
        dst.copy_from_slice(&frame[0..6]);
        match self.map.get(&dst) {
            Some(&p) if p == port => Out::Filter,
            Some(&p) => Out::Port(p),
            None => Out::Flood,
        }
    }
}

#[cfg(test)]
mod tests;
