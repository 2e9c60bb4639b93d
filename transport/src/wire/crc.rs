//! The invariant CRC (ICRC, CRC-32) and variant CRC (VCRC, CRC-16) of IBA 7.8, and
//! the RoCEv2 ICRC (annex A17.3.3); WF-09, WF-10.
//!
//! Both CRCs are sent least significant byte first, like Ethernet's FCS: the value
//! `c` goes on the wire as `c.to_le_bytes()`. The real-hardware capture in
//! `tests/data` is the reference (`tests/capture_vectors.rs`).

use std::sync::LazyLock;

use super::bth::VARIANT_BYTE as BTH_VARIANT_BYTE;
use super::{BthRepr, GrhRepr, LrhRepr};

/// Bytes of the ICRC.
pub const ICRC_LEN: usize = 4;
/// Bytes of the VCRC.
pub const VCRC_LEN: usize = 2;

const LRH: usize = LrhRepr::LEN;
const GRH: usize = GrhRepr::LEN;
const BTH: usize = BthRepr::LEN;

/// Sets the variant bits of a GRH to 1: TClass, FlowLabel, HopLmt (7.8.1).
fn mask_grh(g: &mut [u8]) {
    g[0] |= 0x0f;
    g[1] = 0xff;
    g[2] = 0xff;
    g[3] = 0xff;
    g[7] = 0xff;
}

/// ICRC of a native packet. `pkt` runs from the LRH up to the ICRC (exclusive) and
/// holds at least the LRH, the GRH when `has_grh`, and the BTH.
///
/// Variant fields count as all ones (7.8.1): LRH:VL, or the whole LRH when a GRH is
/// present (a router rewrites it); GRH TClass, FlowLabel, HopLmt; BTH F/B/Resv6.
pub fn icrc_native(pkt: &[u8], has_grh: bool) -> u32 {
    let hdr = if has_grh { LRH + GRH + BTH } else { LRH + BTH };
    let mut masked = [0u8; LRH + GRH + BTH];
    let m = &mut masked[..hdr];
    m.copy_from_slice(&pkt[..hdr]);
    if has_grh {
        m[..LRH].fill(0xff);
        mask_grh(&mut m[LRH..LRH + GRH]);
    } else {
        m[0] |= 0xf0;
    }
    m[hdr - BTH + BTH_VARIANT_BYTE] = 0xff;
    let mut h = crc32fast::Hasher::new();
    h.update(m);
    h.update(&pkt[hdr..]);
    h.finalize()
}

/// RoCEv2 ICRC (annex A17.3.3): eight bytes of ones stand for the LRH, then the IP
/// header with its variant fields as ones (IPv4: TOS, TTL, checksum; IPv6: traffic
/// class, flow label, hop limit), the UDP header with its checksum as ones, the BTH
/// with F/B/Resv6 as ones, and `rest`: everything after the BTH up to the ICRC.
/// `ip` must hold a whole IPv4 (IHL-long) or IPv6 (40-byte) header, `udp` 8 bytes,
/// `bth` 12 bytes; [`super::roce`] checks that before calling.
pub fn icrc_roce(ip: &[u8], udp: &[u8], bth: &[u8], rest: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; LRH]);
    let mut iph = [0u8; 60];
    let iph = &mut iph[..ip.len().min(60)];
    iph.copy_from_slice(&ip[..iph.len()]);
    if iph[0] >> 4 == 6 {
        mask_grh(iph); // the IPv6 header has the GRH's layout
    } else {
        iph[1] = 0xff; // TOS
        iph[8] = 0xff; // TTL
        iph[10] = 0xff; // header checksum
        iph[11] = 0xff;
    }
    h.update(iph);
    let mut u = [0u8; 8];
    u.copy_from_slice(&udp[..8]);
    u[6] = 0xff; // UDP checksum
    u[7] = 0xff;
    h.update(&u);
    let mut b = [0u8; BTH];
    b.copy_from_slice(&bth[..BTH]);
    b[BTH_VARIANT_BYTE] = 0xff;
    h.update(&b);
    h.update(rest);
    h.finalize()
}

/// The VCRC's CRC-16: polynomial 0x100B, initial value 0xFFFF, reflected, final
/// inversion (7.8.2). Check value over "123456789": 0x0A3D.
static VCRC_PARAMS: LazyLock<crc_fast::CrcParams> = LazyLock::new(|| {
    crc_fast::CrcParams::new("IBA-VCRC", 16, 0x100b, 0xffff, true, 0xffff, 0x0a3d)
});

/// VCRC of a native packet: `pkt` runs from the LRH through the ICRC.
pub fn vcrc(pkt: &[u8]) -> u16 {
    crc_fast::checksum_with_params(*VCRC_PARAMS, pkt) as u16
}

/// GF(2) polynomial arithmetic, bit `i` = coefficient of `x^i`. Slow and plain on
/// purpose: it only builds the single-pass tables below, once, and is the reference
/// the tests check them against.
mod gf2 {
    /// Carry-less product; the degrees must add up to less than 128.
    pub const fn mul(a: u128, b: u128) -> u128 {
        let mut r = 0;
        let mut i = 0;
        while i < 128 {
            if (b >> i) & 1 != 0 {
                r ^= a << i;
            }
            i += 1;
        }
        r
    }

    pub fn degree(a: u128) -> i32 {
        127 - a.leading_zeros() as i32
    }

    /// Quotient and remainder of `a / m`, `m != 0`.
    pub fn div_rem(mut a: u128, m: u128) -> (u128, u128) {
        let dm = degree(m);
        let mut q = 0;
        while a != 0 && degree(a) >= dm {
            let s = degree(a) - dm;
            q ^= 1 << s;
            a ^= m << s;
        }
        (q, a)
    }

    pub fn rem(a: u128, m: u128) -> u128 {
        div_rem(a, m).1
    }

    /// `a * b mod m` for `a`, `b` already reduced and `deg m <= 64`.
    pub fn mul_mod(a: u128, b: u128, m: u128) -> u128 {
        rem(mul(a, b), m)
    }

    #[cfg(test)]
    pub fn gcd(mut a: u128, mut b: u128) -> u128 {
        while b != 0 {
            (a, b) = (b, rem(a, b));
        }
        a
    }

    /// Inverse of `a` modulo `m` (extended Euclid); `a` must be coprime to `m`.
    pub fn inv(a: u128, m: u128) -> u128 {
        let (mut r0, mut r1) = (m, rem(a, m));
        let (mut t0, mut t1) = (0u128, 1u128);
        while r1 != 0 {
            let (q, r) = div_rem(r0, r1);
            (r0, r1) = (r1, r);
            (t0, t1) = (t1, t0 ^ mul(q, t1));
        }
        assert_eq!(r0, 1, "not invertible");
        rem(t0, m)
    }

    /// `x^k mod m`.
    pub fn x_pow(k: u32, m: u128) -> u128 {
        (0..k).fold(1, |acc, _| rem(acc << 1, m))
    }

    /// The normal-order polynomial of a reflected `width`-bit register, and back:
    /// bit `i` of the register is the coefficient of `x^(width-1-i)`.
    pub fn reflect(r: u128, width: u32) -> u128 {
        r.reverse_bits() >> (128 - width)
    }
}

// Single-pass ICRC + VCRC for packet build (WF-09).
//
// Both CRCs are reflected and cover the same bytes up to the ICRC, so with the data
// as one polynomial d(x) over those n bytes a width-w register s moves to
// U_w(s, d) = s·x^(8n) + d·x^w mod P_w (normal bit order; a reflected register is
// the bit reversal of that remainder). Take Q = P32·P16·R (degree 64, pairwise
// coprime factors) and a start S with S ≡ s32·x^32 (mod P32), S ≡ s16·x^48 (mod P16)
// (CRT). Then U_64(S, d) mod P32 = x^32·U_32(s32, d) and mod P16 = x^48·U_16(s16, d):
// one CRC-64 pass over the packet (crc-fast, carry-less folding) yields both
// registers. The ICRC differs from the VCRC only in its data, the variant header
// fields counted as ones (7.8.1); the difference δ sits in a few header bytes and
// U_32(s, d ^ δ) = U_32(s ^ c(δ), d), with c linear in δ and independent of the
// payload length, so it is folded into the start register from per-byte tables.
// The VCRC then runs on over the four ICRC bytes (7.8.2), also linear, so that is
// folded into the output table. With a GRH the whole LRH is variant: the pass
// starts after it, from a start register that holds the VCRC over the LRH.
//
// Who does what: the headers (a few dozen bytes, latency-bound) go through
// slice-by-8 tables of the CRC-64, in two independent halves; the payload goes
// through crc-fast (VPCLMULQDQ folding) from a 16-byte aligned start in whole
// 128-byte blocks, its ragged ends and the pad through the tables again.

/// ICRC polynomial (CRC-32, IBA 7.8.1), normal order with the x^32 term.
const P32: u128 = 0x1_04c1_1db7;
/// VCRC polynomial (IBA 7.8.2), normal order with the x^16 term.
const P16: u128 = 0x1_100b;
/// Third factor bringing Q to degree 64: x^16 + 1, coprime to P32 and P16 (tested).
const R16: u128 = 0x1_0001;
/// The combined CRC-64 polynomial.
const Q: u128 = gf2::mul(gf2::mul(P32, P16), R16);

/// Header byte offsets whose ICRC data differs from the wire (7.8.1), counted from
/// where the table CRC starts: the LRH without a GRH (VL; BTH F/B/Resv6), the GRH
/// with one (TClass, FlowLabel, HopLmt; BTH F/B/Resv6), the LRH then being all
/// variant and handled by `lrh_vcrc`.
const DELTA_POS: [usize; 7] = [
    0,
    1,
    2,
    3,
    7,
    LRH + BTH_VARIANT_BYTE,
    GRH + BTH_VARIANT_BYTE,
];

/// Tables and crc-fast parameters of the single-pass CRC, built once.
struct SinglePass {
    /// crc-fast parameters of the CRC-64 over Q; `init_algorithm` is set per call.
    params: crc_fast::CrcParams,
    /// Start register for ICRC = VCRC = all-ones registers and no variant deltas.
    start: u64,
    /// With a GRH the table CRC starts after the LRH, which counts as ones in the
    /// ICRC: start register for an all-zero LRH in the VCRC and ones in the ICRC ...
    grh_start: u64,
    /// ... and `lrh_vcrc[i][b]` its change for byte `i` of the LRH being `b`.
    lrh_vcrc: Box<[[u64; 256]; LRH]>,
    /// `delta[i][b]`: start-register change for a difference `b` between the ICRC
    /// data and the wire at byte `DELTA_POS[i]`.
    delta: Box<[[u64; 256]; DELTA_POS.len()]>,
    /// `out[k][b]`: for byte `k` of the CRC-64 register, the ICRC register (low 32
    /// bits) and the VCRC register continued over those ICRC bytes (bits 32..48),
    /// both from zero (linear parts).
    out: Box<[[u64; 256]; 8]>,
    /// VCRC register change from the ICRC's final inversion (four 0xff bytes).
    vcrc_ff: u16,
    /// Slice-by-8 tables of the reflected CRC-64 over Q, for the head of the packet.
    slice8: Box<[[u64; 256]; 8]>,
    /// `shift[k][b]`: the register `b << 8k` after `SHIFT_LEN` zero bytes, to
    /// join two independent halves of the header CRC.
    shift: Box<[[u64; 256]; 8]>,
}

/// Bytes the second, independent half of the headers' table CRC covers (WF-09).
const SHIFT_LEN: usize = 32;

/// Bitwise reflected CRC-16 (poly 0x100B) register update, no init or xorout.
fn vcrc_update_bitwise(mut crc: u16, data: &[u8]) -> u16 {
    for &byte in data {
        crc ^= u16::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xd008
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// Constants of `iota` and `pi`: the CRT idempotents e32 (≡ 1 mod P32, ≡ 0 mod
/// P16·R) and e16, and x^-32 mod P32, x^-48 mod P16. Computed once, before the
/// tables that use them thousands of times.
static CRT: LazyLock<[u128; 4]> = LazyLock::new(|| {
    let m32 = gf2::mul(P16, R16); // Q / P32
    let m16 = gf2::mul(P32, R16); // Q / P16
    [
        gf2::mul(m32, gf2::inv(m32, P32)),
        gf2::mul(m16, gf2::inv(m16, P16)),
        gf2::inv(gf2::x_pow(32, P32), P32),
        gf2::inv(gf2::x_pow(48, P16), P16),
    ]
});

impl SinglePass {
    /// The CRC-64 start register for ICRC register `s32` and VCRC register `s16`.
    fn iota(s32: u32, s16: u16) -> u64 {
        let [e32, e16, _, _] = *CRT;
        let a = gf2::reflect(u128::from(s32), 32) << 32;
        let b = gf2::reflect(u128::from(s16), 16) << 48;
        let s = gf2::mul_mod(a, e32, Q) ^ gf2::mul_mod(b, e16, Q);
        gf2::reflect(s, 64) as u64
    }

    /// ICRC and VCRC registers held in CRC-64 register `s` (inverse of `iota` on
    /// the registers reachable from it).
    fn pi(s: u64) -> (u32, u16) {
        let [_, _, x32, x48] = *CRT;
        let u = gf2::reflect(u128::from(s), 64);
        let r32 = gf2::mul_mod(gf2::rem(u, P32), x32, P32);
        let r16 = gf2::mul_mod(gf2::rem(u, P16), x48, P16);
        (gf2::reflect(r32, 32) as u32, gf2::reflect(r16, 16) as u16)
    }

    fn new() -> SinglePass {
        let poly = Q as u64; // Q without its x^64 term
        let mut check_reg = 0u64; // CRC-64 check value, init 0, xorout 0
        for &byte in b"123456789" {
            check_reg ^= u64::from(byte);
            for _ in 0..8 {
                let lsb = check_reg & 1;
                check_reg >>= 1;
                if lsb != 0 {
                    check_reg ^= poly.reverse_bits();
                }
            }
        }
        let params = crc_fast::CrcParams::new("IBA-ICRC+VCRC", 64, poly, 0, true, 0, check_reg);
        let mut delta = Box::new([[0u64; 256]; DELTA_POS.len()]);
        for (table, &pos) in delta.iter_mut().zip(&DELTA_POS) {
            // A byte b at offset pos changes the ICRC register before the packet by
            // c = b(x)·x^32·x^-(8(pos+1)) mod P32.
            let shift = gf2::inv(gf2::x_pow(8 * (pos as u32 + 1), P32), P32);
            for (b, e) in table.iter_mut().enumerate() {
                let byte_poly = gf2::reflect(b as u128, 8) << 32;
                let c = gf2::mul_mod(gf2::rem(byte_poly, P32), shift, P32);
                *e = Self::iota(gf2::reflect(c, 32) as u32, 0);
            }
        }
        let mut lrh_vcrc = Box::new([[0u64; 256]; LRH]);
        for (i, table) in lrh_vcrc.iter_mut().enumerate() {
            for (b, e) in table.iter_mut().enumerate() {
                let mut lrh = [0u8; LRH];
                lrh[i] = b as u8;
                *e = Self::iota(0, vcrc_update_bitwise(0, &lrh));
            }
        }
        let mut ones = crc32fast::Hasher::new();
        ones.update(&[0xff; LRH]);
        let grh_start = Self::iota(!ones.finalize(), vcrc_update_bitwise(!0, &[0; LRH]));
        let mut out = Box::new([[0u64; 256]; 8]);
        for (k, table) in out.iter_mut().enumerate() {
            for (b, e) in table.iter_mut().enumerate() {
                let (r32, r16) = Self::pi((b as u64) << (8 * k));
                let v = vcrc_update_bitwise(r16, &r32.to_le_bytes());
                *e = u64::from(r32) | u64::from(v) << 32;
            }
        }
        let mut slice8 = Box::new([[0u64; 256]; 8]);
        for b in 0..256 {
            let mut reg = b as u64;
            for _ in 0..8 {
                let lsb = reg & 1;
                reg >>= 1;
                if lsb != 0 {
                    reg ^= poly.reverse_bits();
                }
            }
            slice8[0][b] = reg;
        }
        for k in 1..8 {
            for b in 0..256 {
                let prev = slice8[k - 1][b];
                slice8[k][b] = (prev >> 8) ^ slice8[0][(prev & 0xff) as usize];
            }
        }
        let mut sp = SinglePass {
            params,
            start: Self::iota(!0, !0),
            grh_start,
            lrh_vcrc,
            delta,
            out,
            vcrc_ff: vcrc_update_bitwise(0, &[0xff; ICRC_LEN]),
            slice8,
            shift: Box::new([[0u64; 256]; 8]),
        };
        let mut shift = Box::new([[0u64; 256]; 8]);
        for (k, table) in shift.iter_mut().enumerate() {
            for (b, e) in table.iter_mut().enumerate() {
                *e = sp.update_table((b as u64) << (8 * k), &[0; SHIFT_LEN]);
            }
        }
        sp.shift = shift;
        sp
    }

    /// `U(reg, data)`: the table CRC-64 register update, the headers split in two
    /// halves when long enough. Their chains of dependent lookups run side by side
    /// (`U(r, a‖b) = U(r, a)·x^(8|b|) ^ U(0, b)`), shortening the critical path
    /// before the payload pass (WF-09).
    fn update_headers(&self, reg: u64, data: &[u8]) -> u64 {
        if data.len() <= SHIFT_LEN {
            return self.update_table(reg, data);
        }
        let (a, b) = data.split_at(data.len() - SHIFT_LEN);
        let ra = self.update_table(reg, a);
        let rb = self.update_table(0, b);
        let shifted = ra
            .to_le_bytes()
            .iter()
            .zip(self.shift.iter())
            .fold(0u64, |acc, (&x, t)| acc ^ t[usize::from(x)]);
        shifted ^ rb
    }

    /// CRC-64 register update over `data`, slice-by-8 (for short heads).
    fn update_table(&self, mut reg: u64, data: &[u8]) -> u64 {
        let t = &self.slice8;
        let mut chunks = data.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            let v = (reg ^ u64::from_le_bytes(w)).to_le_bytes();
            reg = t[7][usize::from(v[0])]
                ^ t[6][usize::from(v[1])]
                ^ t[5][usize::from(v[2])]
                ^ t[4][usize::from(v[3])]
                ^ t[3][usize::from(v[4])]
                ^ t[2][usize::from(v[5])]
                ^ t[1][usize::from(v[6])]
                ^ t[0][usize::from(v[7])];
        }
        // The last 1..=7 bytes in one round too: byte i of r bytes is followed by
        // r-1-i more, so it goes through table r-1-i, like above with r = 8.
        let rest = chunks.remainder();
        if rest.is_empty() {
            return reg;
        }
        let r = rest.len();
        let mut acc = reg >> (8 * r);
        for (i, (&b, &rb)) in rest.iter().zip(reg.to_le_bytes().iter()).enumerate() {
            acc ^= t[r - 1 - i][usize::from(b ^ rb)];
        }
        acc
    }
}

/// crc-fast is fast only from a 16-byte aligned start (about 1.7x slower otherwise)
/// and on whole 128-byte blocks (a tail costs about 0.45 ns a byte), measured at 4
/// KiB on the WF-09 machine; the unaligned head and the tail go through the table.
const FOLD_ALIGN: usize = 16;
const FOLD_BLOCK: usize = 128;

static SINGLE_PASS: LazyLock<SinglePass> = LazyLock::new(SinglePass::new);

/// ICRC and VCRC of a native packet, in one pass over it (WF-09): the same values
/// as [`icrc_native`]`(pkt, has_grh)` and [`vcrc`] over `pkt` followed by that
/// ICRC. `pkt` runs from the LRH up to the ICRC (exclusive) and holds at least the
/// LRH, the GRH when `has_grh`, and the BTH.
pub fn icrc_vcrc_native(pkt: &[u8], has_grh: bool) -> (u32, u16) {
    let hdr = if has_grh { LRH + GRH + BTH } else { LRH + BTH };
    let (headers, rest) = pkt.split_at(hdr);
    icrc_vcrc_parts(headers, rest, 0, has_grh)
}

/// [`icrc_vcrc_native`] of the packet `headers`, `payload`, `pad` zero bytes, its
/// parts given apart so that a build can run the CRC over the payload where it
/// already is, in parallel with copying it into the packet (WF-09). `headers` runs
/// from the LRH and holds at least the LRH, the GRH when `has_grh`, and the BTH;
/// `pad` is at most 3.
pub fn icrc_vcrc_parts(headers: &[u8], payload: &[u8], pad: usize, has_grh: bool) -> (u32, u16) {
    SinglePassCrc::headers(headers, has_grh).finish(payload, pad)
}

/// The single-pass ICRC + VCRC register after the headers of a packet; see
/// [`icrc_vcrc_parts`].
#[derive(Debug, Clone, Copy)]
pub struct SinglePassCrc(u64);

impl SinglePassCrc {
    /// Starts the CRCs over `headers`, which run from the LRH and hold at least the
    /// LRH, the GRH when `has_grh`, and the BTH.
    pub fn headers(headers: &[u8], has_grh: bool) -> SinglePassCrc {
        let sp = &*SINGLE_PASS;
        let h = headers;
        // Variant fields count as ones in the ICRC only (7.8.1): fold the difference
        // between the masked and the wire bytes into the start register.
        if has_grh {
            let mut s = sp.grh_start;
            for (t, &b) in sp.lrh_vcrc.iter().zip(&h[..LRH]) {
                s ^= t[usize::from(b)];
            }
            let g = &h[LRH..];
            s ^= sp.delta[0][usize::from(!g[0] & 0x0f)];
            for i in 1..5 {
                s ^= sp.delta[i][usize::from(!g[DELTA_POS[i]])];
            }
            s ^= sp.delta[6][usize::from(!g[DELTA_POS[6]])];
            SinglePassCrc(sp.update_headers(s, g))
        } else {
            let mut s = sp.start;
            s ^= sp.delta[0][usize::from(!h[0] & 0xf0)];
            s ^= sp.delta[5][usize::from(!h[DELTA_POS[5]])];
            SinglePassCrc(sp.update_headers(s, h))
        }
    }

    /// Runs the CRCs on over `payload` and `pad` (at most 3) zero bytes; returns the
    /// ICRC and the VCRC, which also covers the ICRC.
    pub fn finish(self, payload: &[u8], pad: usize) -> (u32, u16) {
        let sp = &*SINGLE_PASS;
        let head_len = payload.as_ptr().align_offset(FOLD_ALIGN).min(payload.len());
        let (head, rest) = payload.split_at(head_len);
        let (bulk, tail) = rest.split_at(rest.len() - rest.len() % FOLD_BLOCK);
        let mut s = sp.update_table(self.0, head);
        if !bulk.is_empty() {
            let mut params = sp.params;
            params.init_algorithm = s;
            s = crc_fast::checksum_with_params(params, bulk);
        }
        let s = sp.update_table(s, tail);
        let s = sp.update_table(s, &[0; 3][..pad]);
        let r = s
            .to_le_bytes()
            .iter()
            .zip(sp.out.iter())
            .fold(0u64, |acc, (&b, t)| acc ^ t[usize::from(b)]);
        let icrc = !(r as u32);
        let vcrc = !((r >> 32) as u16 ^ sp.vcrc_ff);
        (icrc, vcrc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit-at-a-time reference of the VCRC, straight from the definition.
    fn vcrc_reference(data: &[u8]) -> u16 {
        let mut crc: u16 = 0xffff;
        for &byte in data {
            crc ^= u16::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xd008
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn wf_09_vcrc_matches_the_bitwise_definition() {
        assert_eq!(vcrc(b"123456789"), 0x0a3d);
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 3) as u8).collect();
        for len in [
            0, 1, 2, 3, 15, 16, 17, 63, 64, 65, 255, 256, 1000, 4096, 4160, 5000,
        ] {
            assert_eq!(
                vcrc(&data[..len]),
                vcrc_reference(&data[..len]),
                "len {len}"
            );
        }
    }

    /// Bitwise reflected CRC-64 over Q, register in and out.
    fn crc64_bitwise(mut reg: u64, data: &[u8]) -> u64 {
        let poly = (Q as u64).reverse_bits();
        for &byte in data {
            reg ^= u64::from(byte);
            for _ in 0..8 {
                let lsb = reg & 1;
                reg >>= 1;
                if lsb != 0 {
                    reg ^= poly;
                }
            }
        }
        reg
    }

    /// Small deterministic generator (xorshift) for the randomized checks.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn wf_09_single_pass_polynomial_factors_are_coprime() {
        assert_eq!(gf2::gcd(P32, P16), 1);
        assert_eq!(gf2::gcd(P32, R16), 1);
        assert_eq!(gf2::gcd(P16, R16), 1);
        assert_eq!(gf2::degree(Q), 64);
        assert_eq!(Q & 1, 1);
        assert_eq!(gf2::rem(Q, P32), 0);
        assert_eq!(gf2::rem(Q, P16), 0);
    }

    #[test]
    fn wf_09_crc_fast_crc64_register_is_the_reflected_register() {
        let sp = &*SINGLE_PASS;
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let data: Vec<u8> = (0..300).map(|_| rng.next() as u8).collect();
        for len in [
            0, 1, 7, 8, 15, 16, 17, 31, 63, 64, 65, 127, 128, 255, 256, 300,
        ] {
            let init = rng.next();
            let mut p = sp.params;
            p.init_algorithm = init;
            assert_eq!(
                crc_fast::checksum_with_params(p, &data[..len]),
                crc64_bitwise(init, &data[..len]),
                "len {len}"
            );
        }
    }

    #[test]
    fn wf_09_iota_pi_round_trip_and_track_both_crcs() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for len in [0usize, 1, 3, 4, 13, 64, 100] {
            let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let (s32, s16) = (rng.next() as u32, rng.next() as u16);
            let s = SinglePass::iota(s32, s16);
            assert_eq!(SinglePass::pi(s), (s32, s16));
            let after = SinglePass::pi(crc64_bitwise(s, &data));
            let mut h = crc32fast::Hasher::new_with_initial(!s32);
            h.update(&data);
            assert_eq!(after, (!h.finalize(), vcrc_update_bitwise(s16, &data)));
        }
    }

    #[test]
    fn wf_09_single_pass_matches_icrc_native_and_vcrc() {
        let mut rng = Rng(0x0bad_cafe_f00d_d00d);
        let mut buf = vec![0u8; LRH + GRH + BTH + 64 + 4096 + ICRC_LEN];
        let mut lens: Vec<usize> = (0..=70).chain([4093, 4094, 4095, 4096]).collect();
        lens.extend((0..60).map(|_| rng.next() as usize % 4097));
        for len in lens {
            for has_grh in [false, true] {
                // Headers plus 0..=28 bytes of extension headers, then the payload.
                let hdr = if has_grh { LRH + GRH + BTH } else { LRH + BTH };
                let n = hdr + (rng.next() as usize % 8) * 4 + len;
                buf[..n].iter_mut().for_each(|b| *b = rng.next() as u8);
                let pkt = &buf[..n];
                let icrc = icrc_native(pkt, has_grh);
                let mut full = pkt.to_vec();
                full.extend_from_slice(&icrc.to_le_bytes());
                assert_eq!(
                    icrc_vcrc_native(pkt, has_grh),
                    (icrc, vcrc(&full)),
                    "len {n}, grh {has_grh}"
                );
                // Split as a build does: extension headers with the headers, the
                // payload elsewhere (any alignment), then 0..=3 pad bytes.
                let ext = n - hdr - len;
                let pad = len % 4;
                let body = len - pad;
                let moved: Vec<u8> = pkt[hdr + ext..hdr + ext + body].to_vec();
                buf[hdr + ext + body..n].fill(0);
                let pkt = &buf[..n];
                let icrc = icrc_native(pkt, has_grh);
                let mut full = pkt.to_vec();
                full.extend_from_slice(&icrc.to_le_bytes());
                let off = rng.next() as usize % 16;
                let mut shifted = vec![0u8; body + 16];
                shifted[off..off + body].copy_from_slice(&moved);
                assert_eq!(
                    icrc_vcrc_parts(&pkt[..hdr + ext], &shifted[off..off + body], pad, has_grh),
                    (icrc, vcrc(&full)),
                    "parts: len {n}, grh {has_grh}, pad {pad}, offset {off}"
                );
            }
        }
    }
}
