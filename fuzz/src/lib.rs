//! Helpers shared by the fuzz targets (fuzz/README.md): they turn fuzzer bytes into
//! packets whose CRCs and length fields are right, so that the fuzzer's mutations
//! reach the transport's header checks instead of dying at the ICRC/VCRC (WF-09),
//! which no coverage feedback can solve.

use transport::wire::crc::{icrc_native, icrc_roce, vcrc};
use transport::wire::roce::{ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_VLAN, UDP_PORT};

/// LRH, GRH, BTH lengths (IBA 7.7, 7.7.6, 9.2).
const LRH: usize = 8;
const GRH: usize = 40;

/// Recomputes LRH:PktLen, GRH:PayLen, the ICRC and the VCRC of a native packet in
/// place (truncating it to whole words), so that it passes the link layer checks
/// (C9-35) and reaches the transport. Packets too short for the headers stay as
/// they are.
pub fn fix_native(p: &mut Vec<u8>) {
    if p.len() < LRH + 12 + 6 {
        return;
    }
    let words = ((p.len() - 2) / 4).min(0x7ff);
    p.truncate(words * 4 + 2);
    let crc_end = words * 4;
    p[4] = (p[4] & 0xf8) | ((words >> 8) as u8 & 0x07);
    p[5] = words as u8;
    let has_grh = p[1] & 3 == 3;
    if crc_end < 4 + if has_grh { LRH + GRH + 12 } else { LRH + 12 } {
        return;
    }
    if has_grh {
        let pay = (crc_end - LRH - GRH) as u16;
        p[LRH + 4..LRH + 6].copy_from_slice(&pay.to_be_bytes());
    }
    let icrc = icrc_native(&p[..crc_end - 4], has_grh);
    p[crc_end - 4..crc_end].copy_from_slice(&icrc.to_le_bytes());
    let v = vcrc(&p[..crc_end]);
    p[crc_end..crc_end + 2].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes the IP lengths, the IPv4 header checksum, the UDP length and the ICRC
/// of a RoCEv2 frame in place (A17.3.3), for an Ethernet frame that names IPv4 or
/// IPv6 (optionally behind one VLAN tag) and UDP port 4791; other frames are left as
/// they are. The whole frame after the UDP header is the datagram (no Ethernet
/// padding).
pub fn fix_roce(f: &mut [u8]) {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    if f.len() < 14 {
        return;
    }
    let mut at = 12;
    if be16(f, at) == ETHERTYPE_VLAN {
        at += 4;
        if f.len() < at + 2 {
            return;
        }
    }
    let ethertype = be16(f, at);
    let ip_at = at + 2;
    let ip_len = match ethertype {
        ETHERTYPE_IPV4 => 20,
        ETHERTYPE_IPV6 => 40,
        _ => return,
    };
    let udp_at = ip_at + ip_len;
    // UDP header, BTH and ICRC at least.
    if f.len() < udp_at + 8 + 12 + 4 {
        return;
    }
    let udp_len = (f.len() - udp_at).min(0xffff - 40) as u16;
    let end = udp_at + usize::from(udp_len);
    if ethertype == ETHERTYPE_IPV4 {
        let total = udp_len + 20;
        f[ip_at] = 0x45;
        f[ip_at + 2..ip_at + 4].copy_from_slice(&total.to_be_bytes());
        f[ip_at + 9] = 17;
        f[ip_at + 10..ip_at + 12].fill(0);
        let mut sum = 0u32;
        for w in f[ip_at..ip_at + 20].chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        f[ip_at + 10..ip_at + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    } else {
        f[ip_at] = (f[ip_at] & 0x0f) | 0x60;
        f[ip_at + 4..ip_at + 6].copy_from_slice(&udp_len.to_be_bytes());
        f[ip_at + 6] = 17;
    }
    f[udp_at + 2..udp_at + 4].copy_from_slice(&UDP_PORT.to_be_bytes());
    f[udp_at + 4..udp_at + 6].copy_from_slice(&udp_len.to_be_bytes());
    let bth_at = udp_at + 8;
    let icrc_at = end - 4;
    let icrc = icrc_roce(
        &f[ip_at..udp_at],
        &f[udp_at..bth_at],
        &f[bth_at..bth_at + 12],
        &f[bth_at + 12..icrc_at],
    );
    f[icrc_at..end].copy_from_slice(&icrc.to_le_bytes());
}

/// A native packet from `slid` to `dlid` around `transport` (BTH onward, without
/// ICRC), with a GRH when `grh` is given (sgid, dgid); PktLen, PadCnt-independent
/// lengths and both CRCs computed by [`fix_native`].
pub fn native_packet(
    slid: u16,
    dlid: u16,
    sl: u8,
    grh: Option<([u8; 16], [u8; 16])>,
    transport: &[u8],
) -> Vec<u8> {
    let mut p = Vec::with_capacity(LRH + GRH + transport.len() + 6);
    p.push(0); // VL 0, LVer 0
    p.push((sl & 0xf) << 4 | if grh.is_some() { 3 } else { 2 });
    p.extend_from_slice(&dlid.to_be_bytes());
    p.extend_from_slice(&[0, 0]); // PktLen, set below
    p.extend_from_slice(&slid.to_be_bytes());
    if let Some((sgid, dgid)) = grh {
        p.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 0x1b, 64]);
        p.extend_from_slice(&sgid);
        p.extend_from_slice(&dgid);
    }
    p.extend_from_slice(transport);
    p.extend_from_slice(&[0; 6]); // ICRC, VCRC
    fix_native(&mut p);
    p
}

/// A RoCEv2 frame (IPv4 when both GIDs are IPv4-mapped, else IPv6) from `smac`/`sgid`
/// to `dmac`/`dgid` around `transport` (BTH onward, without ICRC).
pub fn roce_frame(
    smac: [u8; 6],
    dmac: [u8; 6],
    sgid: [u8; 16],
    dgid: [u8; 16],
    sport: u16,
    transport: &[u8],
) -> Vec<u8> {
    let mapped = |g: &[u8; 16]| g[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    let v4 = mapped(&sgid) && mapped(&dgid);
    let mut f = Vec::with_capacity(14 + 40 + 8 + transport.len() + 4);
    f.extend_from_slice(&dmac);
    f.extend_from_slice(&smac);
    if v4 {
        f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&sgid[12..]);
        f.extend_from_slice(&dgid[12..]);
    } else {
        f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f.extend_from_slice(&[0x60, 0, 0, 0, 0, 0, 17, 64]);
        f.extend_from_slice(&sgid);
        f.extend_from_slice(&dgid);
    }
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&[0; 6]); // destination port, length, checksum: below
    f.extend_from_slice(transport);
    f.extend_from_slice(&[0; 4]); // ICRC
    fix_roce(&mut f);
    f
}
pub mod bench;
pub mod cmdq;
