//! Small helpers: a seeded RNG (no external crate), data patterns, waiting.

use std::time::{Duration, Instant};

/// SplitMix64: small, fast, seeded, good enough for test data and fuzzing.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c909)
    }

    /// A seed from `VHCA_TEST_SEED` or the clock; printed so a failure can be
    /// replayed.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("VHCA_TEST_SEED")
            .ok()
            .and_then(|s| {
                s.strip_prefix("0x")
                    .map_or_else(|| s.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
            })
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("vhca-tests: {what}: VHCA_TEST_SEED={seed:#x}");
        Rng::new(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        self.fill(&mut v);
        v
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }

    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// `len` bytes that depend on `seed` and on the position, so a misplaced,
/// duplicated or stale chunk is caught (not only a wrong byte).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut r = Rng::new(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ len as u64);
    r.fill(&mut v);
    v
}

/// Where two byte strings first differ, for readable assertion messages.
pub fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// Asserts `got == want` byte for byte with a short message.
#[track_caller]
pub fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if let Some(at) = first_difference(got, want) {
        let ctx = |v: &[u8]| v[at.min(v.len())..(at + 16).min(v.len())].to_vec();
        panic!(
            "{what}: {} bytes, want {}; first difference at byte {at}: got {:02x?}, want {:02x?}",
            got.len(),
            want.len(),
            ctx(got),
            ctx(want)
        );
    }
}

/// Polls `f` until it returns `Some` or `timeout` passes (spins briefly, then
/// sleeps in short steps).
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        spins += 1;
        if spins < 200 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// `ceil(log2(n))`, with `log2_ceil(0) == log2_ceil(1) == 0`.
pub fn log2_ceil(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

/// Counter `name` of the last `udp ...` line (a UDP link's report) in a
/// `vhca` process's report text (its stderr's exit report).
pub fn udp_counter(report: &str, name: &str) -> u64 {
    let line = report
        .lines()
        .rev()
        .find(|l| l.starts_with("udp "))
        .unwrap_or_else(|| panic!("no udp line in {report}"));
    let mut w = line.split_whitespace();
    w.find(|x| *x == name)
        .unwrap_or_else(|| panic!("no {name} in {line}"));
    w.next().unwrap().parse().unwrap()
}
