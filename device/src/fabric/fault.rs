//! The fault-injection stage (ARCHITECTURE.md §6): between the engine and a link, it
//! drops, duplicates, reorders, corrupts and delays the packets the engine sends,
//! under a seeded generator, so that recovery (ARCHITECTURE.md §3: "recovery speed is a
//! feature") can be shown on real processes and not only in the simulation.
//!
//! Deterministic: the same spec, seed and sequence of calls (packets and `now`
//! values) give the same faults, because the generator is this file's own
//! SplitMix64 (a dependency's generator could change its stream between versions)
//! and time comes from the caller. Faults apply to the send direction; wrap both
//! nodes' links to fault both directions.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{Link, LinkError, Received};

/// Longest time a packet held back for reordering waits for a packet to overtake
/// it; after that it goes out anyway, so the last packet of a burst is late, not
/// lost.
pub const REORDER_HOLD: Duration = Duration::from_millis(1);

/// Packets the delay line holds at most; beyond it packets are dropped and
/// counted, so a long delay at a high rate cannot grow memory without bound.
pub const DELAY_CAPACITY: usize = 65_536;

/// Longest delay a spec may ask for: longer is surely a typo for a shorter unit.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// What to inject. Rates are probabilities per packet in 0..=1, drawn
/// independently.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpec {
    /// A packet is lost.
    pub drop: f64,
    /// A packet is sent twice.
    pub dup: f64,
    /// A packet is held back and sent after the next one (or after
    /// [`REORDER_HOLD`]).
    pub reorder: f64,
    /// One random bit of the packet is flipped (the VCRC then fails, so the
    /// receiver drops it: a CRC-16 catches every single-bit error).
    pub corrupt: f64,
    /// A delayed packet goes out this much later.
    pub delay: Duration,
    /// The share of packets delayed when `delay` is set (default 1: all, a fixed
    /// latency; below 1 the delayed ones are overtaken, which also reorders).
    pub delay_rate: f64,
    /// The generator's seed.
    pub seed: u64,
    /// Tests of the device's own containment: panic (in the data path) when
    /// sending the N-th packet; 0 = never. Not a network fault: it checks that
    /// an internal bug turns into a FATAL device the guest can reset, not a
    /// hung one (issue 13).
    pub panic_after: u64,
    /// Every native packet to this DLID is lost (0: none): a dead path of a
    /// node with LMC > 0, whose other LIDs stay reachable (AD-10 tests).
    pub drop_dlid: u16,
    /// The path to `drop_dlid` dies only after this many packets to it went
    /// through (0: dead from the start): a path that fails while a stream
    /// runs on it, on a device that was up for a while (AD-10 VM test).
    pub drop_dlid_after: u64,
}

impl Default for FaultSpec {
    /// No faults at all.
    fn default() -> Self {
        FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            delay_rate: 1.0,
            seed: 0,
            panic_after: 0,
            drop_dlid: 0,
            drop_dlid_after: 0,
        }
    }
}

/// Why a fault spec string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultSpecError {
    /// Nothing to parse.
    #[error("empty fault spec (expected e.g. drop=0.05,dup=0.02,delay=100us,seed=7)")]
    Empty,
    /// An item without `=`, or an empty item (`,,`).
    #[error("fault spec item `{0}` is not key=value")]
    NotKeyValue(String),
    /// A key this stage does not know.
    #[error("unknown fault `{0}` (known: drop, dup, reorder, corrupt, delay, delay_rate, seed, drop_dlid, drop_dlid_after)")]
    UnknownKey(String),
    /// A key given twice.
    #[error("fault `{0}` given twice")]
    Repeated(String),
    /// A rate that is not a number in 0..=1.
    #[error("fault `{key}`: `{value}` is not a probability between 0 and 1")]
    BadRate { key: String, value: String },
    /// A delay that is not a number with a unit, or too long.
    #[error("fault `delay`: {why}")]
    BadDelay { value: String, why: String },
    /// A seed that is not a u64 (decimal or 0x hex).
    #[error("fault `seed`: `{0}` is not a 64-bit unsigned integer")]
    BadSeed(String),
}

fn parse_rate(key: &str, value: &str) -> Result<f64, FaultSpecError> {
    match value.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(FaultSpecError::BadRate {
            key: key.to_string(),
            value: value.to_string(),
        }),
    }
}

/// `delay=`: a duration in the one syntax of every option
/// ([`crate::units::parse_duration`]), at most [`MAX_DELAY`].
fn parse_delay(value: &str) -> Result<Duration, FaultSpecError> {
    let bad = |why| FaultSpecError::BadDelay {
        value: value.to_string(),
        why,
    };
    match crate::units::parse_duration(value) {
        Ok(d) if d > MAX_DELAY => Err(bad(format!("`{value}` is longer than 60s"))),
        Ok(d) => Ok(d),
        Err(why) => Err(bad(why)),
    }
}

fn parse_seed(value: &str) -> Result<u64, FaultSpecError> {
    let r = match value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => value.parse(),
    };
    r.map_err(|_| FaultSpecError::BadSeed(value.to_string()))
}

impl std::str::FromStr for FaultSpec {
    type Err = FaultSpecError;

    /// Parses `drop=0.05,dup=0.02,reorder=0.02,corrupt=0.005,delay=100us,seed=7`:
    /// comma-separated `key=value`, any order, each key at most once, the missing
    /// ones 0 (`delay_rate` 1).
    fn from_str(s: &str) -> Result<FaultSpec, FaultSpecError> {
        if s.trim().is_empty() {
            return Err(FaultSpecError::Empty);
        }
        let mut spec = FaultSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            let (key, value) = item
                .split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .filter(|(k, v)| !k.is_empty() && !v.is_empty())
                .ok_or_else(|| FaultSpecError::NotKeyValue(item.to_string()))?;
            if seen.contains(&key) {
                return Err(FaultSpecError::Repeated(key.to_string()));
            }
            match key {
                "drop" => spec.drop = parse_rate(key, value)?,
                "dup" => spec.dup = parse_rate(key, value)?,
                "reorder" => spec.reorder = parse_rate(key, value)?,
                "corrupt" => spec.corrupt = parse_rate(key, value)?,
                "delay_rate" => spec.delay_rate = parse_rate(key, value)?,
                "delay" => spec.delay = parse_delay(value)?,
                "seed" => spec.seed = parse_seed(value)?,
                "panic_after" => spec.panic_after = parse_seed(value)?,
                "drop_dlid" => {
                    spec.drop_dlid = parse_seed(value)?
                        .try_into()
                        .map_err(|_| FaultSpecError::BadSeed(value.to_string()))?
                }
                "drop_dlid_after" => spec.drop_dlid_after = parse_seed(value)?,
                _ => return Err(FaultSpecError::UnknownKey(key.to_string())),
            }
            seen.push(key);
        }
        Ok(spec)
    }
}

impl fmt::Display for FaultSpec {
    /// The spec in the form [`FaultSpec::from_str`](std::str::FromStr) reads, for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drop={},dup={},reorder={},corrupt={},delay={}ns,delay_rate={},seed={},panic_after={},drop_dlid={},drop_dlid_after={}",
            self.drop,
            self.dup,
            self.reorder,
            self.corrupt,
            self.delay.as_nanos(),
            self.delay_rate,
            self.seed,
            self.panic_after,
            self.drop_dlid,
            self.drop_dlid_after
        )
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, any seed (0 too) is fine, and its
/// stream is fixed by this code, not by a dependency's version.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `p`. A rate of 0 draws nothing, so faults that are
    /// off do not shift the stream of those that are on.
    fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        let unit = (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64);
        unit < p
    }

    /// Uniform in 0..n (n > 0), by multiply-shift.
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// What a [`FaultLink`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Packets the engine sent into the stage.
    pub packets: u64,
    /// Packets dropped on purpose.
    pub dropped: u64,
    /// Packets with a bit flipped.
    pub corrupted: u64,
    /// Packets sent twice (each counts once here).
    pub duplicated: u64,
    /// Packets held back to be overtaken.
    pub reordered: u64,
    /// Packets put on the delay line.
    pub delayed: u64,
    /// Packets lost because the delay line was full.
    pub drop_delay_full: u64,
    /// Packets handed to the inner link (duplicates count twice).
    pub forwarded: u64,
    /// Packets to `drop_dlid` seen (sent while fewer than `drop_dlid_after`,
    /// dropped after).
    pub to_drop_dlid: u64,
}

/// A [`Link`] with faults injected into what is sent through it.
#[derive(Debug)]
pub struct FaultLink<L> {
    inner: L,
    spec: FaultSpec,
    rng: SplitMix64,
    /// A packet waiting to be overtaken, and when it goes out regardless.
    held: Option<(Vec<u8>, Duration)>,
    /// Delayed packets with their due times, in due order because `now` never goes
    /// backwards and the delay is fixed.
    delayed: VecDeque<(Duration, Vec<u8>)>,
    counters: FaultCounters,
}

impl<L: Link> FaultLink<L> {
    /// Wraps `inner`.
    pub fn new(inner: L, spec: FaultSpec) -> FaultLink<L> {
        log::info!("fabric: fault injection {spec}");
        FaultLink {
            inner,
            spec,
            rng: SplitMix64(spec.seed),
            held: None,
            delayed: VecDeque::new(),
            counters: FaultCounters::default(),
        }
    }

    /// The spec in force.
    pub fn spec(&self) -> &FaultSpec {
        &self.spec
    }

    /// What the stage did so far.
    pub fn counters(&self) -> &FaultCounters {
        &self.counters
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably.
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// The wrapped link back; packets still held or delayed are lost.
    pub fn into_inner(self) -> L {
        self.inner
    }

    /// Releases every held or delayed packet whose time has come. Sends all of
    /// them even if one fails, and returns the first error.
    fn release(&mut self, now: Duration) -> Result<(), LinkError> {
        let mut result = Ok(());
        while self.delayed.front().is_some_and(|(due, _)| *due <= now) {
            let (_, p) = self.delayed.pop_front().expect("front checked");
            self.counters.forwarded += 1;
            let r = self.inner.send(now, &p);
            result = result.and(r);
        }
        if self.held.as_ref().is_some_and(|(_, until)| *until <= now) {
            let (p, _) = self.held.take().expect("held checked");
            let r = self.out(now, &p);
            result = result.and(r);
        }
        result
    }

    /// After drop, corrupt and duplicate: maybe hold the packet back, else send it
    /// and then the one held back, which it has thereby overtaken.
    fn reorder_stage(&mut self, now: Duration, p: &[u8]) -> Result<(), LinkError> {
        if self.held.is_none() && self.rng.chance(self.spec.reorder) {
            self.counters.reordered += 1;
            self.held = Some((p.to_vec(), now + REORDER_HOLD));
            return Ok(());
        }
        let r = self.out(now, p);
        match self.held.take() {
            Some((h, _)) => r.and(self.out(now, &h)),
            None => r,
        }
    }

    /// The delay line, then the inner link.
    fn out(&mut self, now: Duration, p: &[u8]) -> Result<(), LinkError> {
        if !self.spec.delay.is_zero() && self.rng.chance(self.spec.delay_rate) {
            if self.delayed.len() >= DELAY_CAPACITY {
                self.counters.drop_delay_full += 1;
            } else {
                self.counters.delayed += 1;
                self.delayed.push_back((now + self.spec.delay, p.to_vec()));
            }
            return Ok(());
        }
        self.counters.forwarded += 1;
        self.inner.send(now, p)
    }
}

impl<L: Link> Link for FaultLink<L> {
    fn flush(&mut self) -> Result<(), LinkError> {
        self.inner.flush()
    }

    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        // Packets due earlier leave before this one.
        let released = self.release(now);
        self.counters.packets += 1;
        if self.counters.packets == self.spec.panic_after {
            panic!("fault injection: panic_after={}", self.spec.panic_after);
        }
        // LRH bytes 2-3: the DLID (InfiniBand ports only: on a RoCE port
        // these are destination MAC bytes, so `drop_dlid` is not for them).
        let to_dlid = self.spec.drop_dlid != 0
            && packet.get(2..4) == Some(&self.spec.drop_dlid.to_be_bytes()[..]);
        let to_dead = to_dlid && {
            self.counters.to_drop_dlid += 1;
            if self.counters.to_drop_dlid == self.spec.drop_dlid_after + 1 {
                log::warn!(
                    "fault injection: the path to DLID {:#x} dies now, after {} packets",
                    self.spec.drop_dlid,
                    self.spec.drop_dlid_after
                );
            }
            self.counters.to_drop_dlid > self.spec.drop_dlid_after
        };
        if to_dead || self.rng.chance(self.spec.drop) {
            self.counters.dropped += 1;
            return released;
        }
        let corrupted;
        let p = if !packet.is_empty() && self.rng.chance(self.spec.corrupt) {
            self.counters.corrupted += 1;
            let bit = self.rng.below(packet.len() as u64 * 8) as usize;
            let mut c = packet.to_vec();
            c[bit / 8] ^= 1 << (bit % 8);
            corrupted = c;
            &corrupted[..]
        } else {
            packet
        };
        let dup = self.rng.chance(self.spec.dup);
        let mut r = self.reorder_stage(now, p);
        if dup {
            self.counters.duplicated += 1;
            r = r.and(self.reorder_stage(now, p));
        }
        released.and(r)
    }

    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        // Faults are applied on the way out; received packets pass as lent.
        self.release(now)?;
        self.inner.recv_batch(now, max, deliver)
    }

    fn raw_fd(&self) -> RawFd {
        self.inner.raw_fd()
    }

    fn poll_timeout(&self) -> Option<Duration> {
        [
            self.inner.poll_timeout(),
            self.delayed.front().map(|(due, _)| *due),
            self.held.as_ref().map(|(_, until)| *until),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        let r = self.release(now);
        r.and(self.inner.handle_timeout(now))
    }

    fn report(&self) -> Option<String> {
        self.inner.report()
    }

    fn auth_counters(&self) -> Option<super::AuthCounters> {
        self.inner.auth_counters()
    }

    fn is_up(&self) -> bool {
        self.inner.is_up()
    }

    fn single_peer(&self) -> bool {
        self.inner.single_peer()
    }
    fn set_sleeping(&mut self, sleeping: bool) {
        self.inner.set_sleeping(sleeping)
    }

    fn set_disabled(&mut self, disabled: bool) {
        self.inner.set_disabled(disabled)
    }

    fn tx_room(&mut self, now: Duration) -> bool {
        self.inner.tx_room(now)
    }

    fn send_link_packet(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.inner.send_link_packet(now, packet)
    }

    fn clear(&mut self) {
        self.held = None;
        self.delayed.clear();
        self.inner.clear()
    }

    fn begin_sends(&mut self) {
        self.inner.begin_sends()
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        self.inner.end_sends()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // First outputs for seed 0 from the reference implementation.
        let mut g = SplitMix64(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn below_stays_in_range() {
        let mut g = SplitMix64(3);
        assert!((0..10_000).all(|_| g.below(7) < 7));
    }

    #[test]
    fn delays() {
        assert_eq!(parse_delay("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_delay("1.5ms"), Ok(Duration::from_micros(1500)));
        assert_eq!(parse_delay("0s"), Ok(Duration::ZERO));
        assert!(parse_delay("100").is_err());
        assert!(parse_delay("100h").is_err());
        assert!(parse_delay("-1ms").is_err());
        assert!(parse_delay("61s").is_err());
    }
}
