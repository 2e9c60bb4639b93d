//! Tables keyed by numbers the engine assigns (QPNs): a hash map with a
//! multiplicative hash instead of SipHash or a B-tree (issue 12, figure 6).
//!
//! Every packet in and out looks its QP up several times (the header checks,
//! the handling, the transmit schedule, the timer and port window upkeep).
//! With the QPs in a `BTreeMap` each lookup walked 3-4 nodes of 11 QPs each
//! (the ~750-byte `Qp`s stored inline, so a node spans 8 KiB) with a
//! mispredicted linear search per node: with 1024 active QPs those walks
//! were the largest single cost of a packet (`perf` of figure 6, docs/benchmarks-history.md),
//! and the cost grew with the number of QPs. A hash lookup costs the same
//! with 1 or 10 000 QPs.
//!
//! The keys in the table are the engine's own (QPNs handed out in sequence,
//! never chosen by a guest or a peer), so a hash that is not keyed against
//! flooding is safe: a peer chooses only what it looks up, and a miss costs
//! one probe sequence like any other. Iteration order is arbitrary; nothing
//! in the engine depends on it (the debug checks and the timer heap rebuild
//! visit every QP in any order).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map keyed by engine-assigned numbers.
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing of an integer key: one multiplication by 2^64 / phi,
/// folded so that both the low bits (the bucket) and the high bits (the
/// table's control tag) depend on every bit of the key.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

const PHI: u64 = 0x9e37_79b9_7f4a_7c15;

impl IdHasher {
    fn mix(&mut self, v: u64) {
        let h = (self.0 ^ v).wrapping_mul(PHI);
        self.0 = h ^ (h >> 32);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    /// Eight bytes per multiplication: a RoCE destination (`port_window`)
    /// hashes its 16-byte GID on every packet sent and acknowledged.
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.mix(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            // The length keeps a short tail apart from the same bytes zero-padded.
            self.mix(u64::from_le_bytes(b) ^ ((rest.len() as u64) << 56));
        }
    }

    // The default integer writes go through `write` byte by byte; an enum's
    // discriminant (`write_isize`) and a LID (`write_u16`) are one word.
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }

    fn write_u16(&mut self, v: u16) {
        self.mix(u64::from(v));
    }

    fn write_u32(&mut self, v: u32) {
        self.mix(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }

    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_and_strided_keys_spread_over_buckets_and_tags() {
        let b = BuildHasherDefault::<IdHasher>::default();
        for stride in [1u32, 1024] {
            // The low 10 bits (a 1024-bucket table's index) of 1024 keys:
            // spread as a random function's would be (~647 distinct, not a
            // few crowded buckets); the top 7 bits (hashbrown's tag): all.
            let hashes: Vec<u64> = (2u32..1026).map(|k| b.hash_one(k * stride)).collect();
            let mut low: Vec<u64> = hashes.iter().map(|h| h & 1023).collect();
            low.sort_unstable();
            low.dedup();
            assert!(
                low.len() > 600,
                "stride {stride}: {} bucket indices",
                low.len()
            );
            let mut tags: Vec<u64> = hashes.iter().map(|h| h >> 57).collect();
            tags.sort_unstable();
            tags.dedup();
            assert!(tags.len() > 100, "stride {stride}: {} tags", tags.len());
        }
    }

    #[test]
    fn gid_keys_that_differ_in_one_byte_hash_apart() {
        // A RoCE destination's key: 16 bytes, hashed a word at a time.
        let b = BuildHasherDefault::<IdHasher>::default();
        let base = [0x20u8; 16];
        let mut seen = vec![b.hash_one(base)];
        for i in 0..16 {
            let mut g = base;
            g[i] ^= 1;
            seen.push(b.hash_one(g));
        }
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 17);
        // A short tail is not the same bytes zero-padded.
        let h = |bytes: &[u8]| {
            let mut x = IdHasher::default();
            x.write(bytes);
            x.finish()
        };
        assert_ne!(h(&[1, 0, 0]), h(&[1]));
        assert_ne!(h(&[0; 9]), h(&[0; 8]));
    }

    #[test]
    fn a_map_finds_what_it_holds() {
        let mut m: IdMap<u32, u32> = IdMap::default();
        for k in 0..5000u32 {
            m.insert(k.wrapping_mul(7919), k);
        }
        for k in 0..5000u32 {
            assert_eq!(m.get(&k.wrapping_mul(7919)), Some(&k));
        }
        assert_eq!(m.get(&u32::MAX), None);
    }
}
