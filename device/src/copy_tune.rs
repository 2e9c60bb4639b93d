//! The piece size of packet copies, measured on this CPU at start (issue 30).
//!
//! Every payload byte is copied once a side (guest memory to a packet or a
//! ring slot, and back), in pieces (`transport::memory::copy_piece`, which
//! the DMA view takes, `pci::DmaView::with_copy_piece`). Which piece size is fastest depends on the
//! CPU, and the two kinds of host this project runs on disagree: on one
//! (AMD EPYC, 2026-11-30) glibc's `rep movsb` for a whole 4 KiB copy ran at
//! 1.0-1.5 GB/s when source and destination were not mutually aligned or
//! shared their page offset, against 10-18 GB/s in 1 KiB pieces; on the
//! other (Intel Xeon, 2026-12-01) the whole copy is the faster, 218 against
//! 317-342 ns not aligned, 129 against 143 ns aligned. So the device times
//! both on the two alignments packets have, a few milliseconds, and keeps
//! the 1 KiB pieces unless whole copies are clearly faster.

use std::time::{Duration, Instant};

use transport::memory::{COPY_CHUNK, MAX_COPY_PIECE};

/// The two alignments a packet copy has: the same offset (a payload to a
/// page-aligned buffer from a page-aligned one) and mutually unaligned (the
/// payload starts after the headers, 20 bytes into a ring slot's packet).
const CASES: [(usize, usize); 2] = [(0, 0), (0, 20)];

/// Copies a trial makes, one per place: ring slots apart, 2 MiB in all
/// (past the first-level caches, as a stream's ring and buffers are: a
/// copy within 64 KiB favoured other sizes than the packets' did).
const COPIES: usize = 256;

/// The distance between two places: a ring slot (`fabric::shm_ring`).
const STRIDE: usize = crate::fabric::shm_ring::SLOT_SIZE;

/// Trials per size and case; the fastest counts (a trial the scheduler
/// interrupted is slow, never fast).
const TRIALS: usize = 9;

/// Time of `COPIES` copies of `MAX_COPY_PIECE` bytes in `piece`-sized pieces.
fn trial(src: &[u8], dst: &mut [u8], (s, d): (usize, usize), piece: usize) -> Duration {
    let t = Instant::now();
    for i in 0..COPIES {
        let at = i * STRIDE;
        let from = &src[at + s..at + s + MAX_COPY_PIECE];
        let to = &mut dst[at + d..at + d + MAX_COPY_PIECE];
        for (a, b) in to.chunks_mut(piece).zip(from.chunks(piece)) {
            a.copy_from_slice(b);
        }
        std::hint::black_box(&mut *to);
    }
    t.elapsed()
}

/// The fastest trial of `piece` on each case, summed.
fn score(src: &[u8], dst: &mut [u8], piece: usize) -> Duration {
    CASES
        .iter()
        .map(|&c| {
            (0..TRIALS)
                .map(|_| trial(src, dst, c, piece))
                .min()
                .unwrap_or_default()
        })
        .sum()
}

/// Times 1 KiB pieces against whole copies; returns the piece size to use:
/// whole copies only when they take under 0.9x the time (a close call keeps
/// the pieces, which no host measured made much slower).
pub fn measure() -> usize {
    let len = COPIES * STRIDE + 64;
    let src = vec![0x5au8; len];
    let mut dst = vec![0u8; len];
    // Warm both buffers and the code once.
    score(&src, &mut dst, COPY_CHUNK);
    let pieces = score(&src, &mut dst, COPY_CHUNK);
    let whole = score(&src, &mut dst, MAX_COPY_PIECE);
    let pick = if whole.as_nanos() * 10 < pieces.as_nanos() * 9 {
        MAX_COPY_PIECE
    } else {
        COPY_CHUNK
    };
    log::debug!(
        "packet copies in {pick}-byte pieces (a 4 KiB copy at each alignment: {} ns in {COPY_CHUNK}-byte pieces, {} ns whole)",
        pieces.as_nanos() / COPIES as u128,
        whole.as_nanos() / COPIES as u128
    );
    pick
}

/// Measures and sets the piece size of the engine's copies (the DMA view
/// takes it from there, `glue::GuestMem`); returns it.
pub fn apply() -> usize {
    transport::memory::set_copy_piece(measure())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the host, the pick is one of the two sizes, and the setter
    /// takes it.
    #[test]
    fn the_pick_is_a_size_both_layers_take() {
        let n = measure();
        assert!(n == COPY_CHUNK || n == MAX_COPY_PIECE, "{n}");
        assert_eq!(transport::memory::set_copy_piece(n), n);
        // Out-of-range requests are clamped, never taken as they are.
        assert_eq!(transport::memory::set_copy_piece(1), COPY_CHUNK);
        assert_eq!(transport::memory::set_copy_piece(1 << 20), MAX_COPY_PIECE);
        transport::memory::set_copy_piece(COPY_CHUNK);
    }
}
