//! The invariant CRC (ICRC, CRC-32) and variant CRC (VCRC, CRC-16) of IBA 7.8, and
//! the RoCEv2 ICRC (annex A17.3.3); WF-09, WF-10.
//!
//! Both CRCs are sent least significant byte first, like Ethernet's FCS: the value
//! `c` goes on the wire as `c.to_le_bytes()`. The real-hardware captures in
//! `shared/testdata` are the reference (`tests/capture_vectors.rs`).

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
}
