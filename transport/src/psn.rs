//! 24-bit packet sequence numbers (IBA 9.7.1, seed 004; RL-01, RL-17).
//!
//! PSNs wrap at 2^24. Whether one PSN is "before" another only makes sense within
//! half the space: the spec bounds the outstanding window at 2^23 packets (8M,
//! RL-17) so that the duplicate and the valid regions never overlap.

/// Number of distinct PSNs.
pub const PSN_SPACE: u32 = 1 << 24;
/// PSN mask.
pub const PSN_MASK: u32 = PSN_SPACE - 1;
/// Largest number of unacknowledged packets a requester may have outstanding
/// (9.7.4.1.4, RL-17).
pub const MAX_OUTSTANDING: u32 = 1 << 23;

/// `psn + n`, wrapping at 2^24 (RL-01).
#[inline]
pub const fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The signed distance from `b` to `a` (`a - b`) in the PSN circle, in
/// `-2^23..2^23`: positive when `a` is after `b`.
#[inline]
pub const fn diff(a: u32, b: u32) -> i32 {
    // Shift the 24-bit difference into the top of an i32 and back: sign extension.
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// `a` comes strictly before `b`.
#[inline]
pub const fn before(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

/// Number of packets an RDMA READ of `len` bytes takes at `pmtu` bytes per
/// packet: at least one (a zero-length READ has one response; RL-02).
#[inline]
pub const fn read_packets(len: u64, pmtu: usize) -> u32 {
    if len == 0 {
        1
    } else {
        len.div_ceil(pmtu as u64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rl_01_psn_wraps_at_24_bits() {
        assert_eq!(add(0xff_ffff, 1), 0);
        assert_eq!(add(0xff_fffe, 5), 3);
        assert_eq!(diff(2, 0xff_fffe), 4);
        assert_eq!(diff(0xff_fffe, 2), -4);
        assert!(before(0xff_ffff, 0));
        assert!(!before(0, 0xff_ffff));
        assert_eq!(diff(0x80_0000, 0), -0x80_0000, "half the space is 'before'");
        assert_eq!(diff(0x7f_ffff, 0), 0x7f_ffff);
    }

    #[test]
    fn rl_02_read_consumes_one_psn_per_response_packet() {
        assert_eq!(read_packets(0, 256), 1);
        assert_eq!(read_packets(1, 256), 1);
        assert_eq!(read_packets(256, 256), 1);
        assert_eq!(read_packets(257, 256), 2);
        assert_eq!(read_packets(1 << 31, 256), 1 << 23);
    }
}
