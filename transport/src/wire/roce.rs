//! RoCEv2 encapsulation (IBA Vol.1 annex A17; WF-10): an Ethernet II frame,
//! optionally with one 802.1Q tag, carrying IPv4 or IPv6, carrying UDP to port
//! 4791, carrying the IB transport part (BTH ... payload pad, see
//! [`TransportRepr`]) and the 4-byte ICRC (A17.3.3, [`icrc_roce`]).
//!
//! The IP header takes the place of the GRH and the Ethernet header that of the
//! LRH (A17.4); there is no VCRC, the Ethernet FCS plays its role and is not part
//! of the frames seen here (a TAP device strips it).
//!
//! [`RoceRepr::parse`] classifies first (EtherType, IP version, protocol, UDP
//! port: anything else on the bridge is [`DropReason::NotRoce`]), then validates
//! (IPv4 header checksum, length fields, ICRC, transport headers) and never panics
//! on any input. [`RoceRepr::emit`] derives every length, the IPv4 header
//! checksum, the ICRC and, if asked, the UDP checksum.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::crc::{icrc_roce, ICRC_LEN};
use super::field::{be16, be32, set_be16, set_be32};
use super::packet::{EmitWithError, TransportRepr};
use super::{BthRepr, DropReason, EmitError};

/// The UDP destination port that marks RoCEv2 (IANA "roce", annex A17.4.3).
pub const UDP_PORT: u16 = 4791;
/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType (TPID) of an IEEE 802.1Q tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Bytes of an untagged Ethernet II header.
pub const ETH_HEADER_LEN: usize = 14;
/// Bytes an 802.1Q tag adds.
pub const VLAN_TAG_LEN: usize = 4;
/// Bytes of an IPv4 header without options (what [`RoceRepr::emit`] writes).
pub const IPV4_HEADER_LEN: usize = 20;
/// Bytes of the fixed IPv6 header.
pub const IPV6_HEADER_LEN: usize = 40;
/// Bytes of the UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// IP protocol / IPv6 next-header number of UDP.
const IP_PROTO_UDP: u8 = 17;
/// IPv4 flags/fragment word: DF bit, MF bit, fragment offset mask.
const IPV4_DF: u16 = 0x4000;
const IPV4_MF: u16 = 0x2000;
const IPV4_FRAG_OFFSET: u16 = 0x1fff;
/// Largest IPv6 flow label (20 bits).
const MAX_FLOW_LABEL: u32 = 0xf_ffff;

/// An Ethernet MAC address, as its six bytes on the wire.
pub type MacAddr = [u8; 6];

/// An IEEE 802.1Q tag (its TCI; the TPID is always 0x8100).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Priority code point, 0..=7.
    pub pcp: u8,
    /// DropReason eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    fn tci(&self) -> Result<u16, EmitError> {
        if self.pcp > 7 {
            return Err(EmitError::FieldRange("802.1Q:PCP"));
        }
        if self.vid > 0x0fff {
            return Err(EmitError::FieldRange("802.1Q:VID"));
        }
        Ok((u16::from(self.pcp) << 13) | (u16::from(self.dei) << 12) | self.vid)
    }
}

/// The Ethernet II header. The EtherType is derived from the IP version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub dst: MacAddr,
    pub src: MacAddr,
    pub vlan: Option<VlanTag>,
}

impl EthernetRepr {
    /// Header bytes, tag included.
    pub fn header_len(&self) -> usize {
        ETH_HEADER_LEN + self.vlan.map_or(0, |_| VLAN_TAG_LEN)
    }

    /// Parses the header; returns it, the inner EtherType and the header length.
    fn parse(frame: &[u8]) -> Result<(EthernetRepr, u16, usize), DropReason> {
        let hdr = frame.get(..ETH_HEADER_LEN).ok_or(DropReason::Truncated)?;
        let mut dst = [0; 6];
        let mut src = [0; 6];
        dst.copy_from_slice(&hdr[0..6]);
        src.copy_from_slice(&hdr[6..12]);
        let ethertype = be16(&hdr[12..14]);
        if ethertype != ETHERTYPE_VLAN {
            let eth = EthernetRepr {
                dst,
                src,
                vlan: None,
            };
            return Ok((eth, ethertype, ETH_HEADER_LEN));
        }
        // One tag only: stacked tags (QinQ) never reach a RoCE port on our bridge,
        // and an inner 0x8100 below is not an IP EtherType, so it ends as NotRoce.
        let len = ETH_HEADER_LEN + VLAN_TAG_LEN;
        let tag = frame
            .get(ETH_HEADER_LEN..len)
            .ok_or(DropReason::Truncated)?;
        let eth = EthernetRepr {
            dst,
            src,
            vlan: Some(VlanTag::from_tci(be16(&tag[0..2]))),
        };
        Ok((eth, be16(&tag[2..4]), len))
    }

    /// Writes the header with `ethertype`; `buf` holds at least `header_len()`.
    fn emit(&self, buf: &mut [u8], ethertype: u16) -> Result<usize, EmitError> {
        buf[0..6].copy_from_slice(&self.dst);
        buf[6..12].copy_from_slice(&self.src);
        match &self.vlan {
            None => {
                set_be16(&mut buf[12..14], ethertype);
                Ok(ETH_HEADER_LEN)
            }
            Some(tag) => {
                set_be16(&mut buf[12..14], ETHERTYPE_VLAN);
                set_be16(&mut buf[14..16], tag.tci()?);
                set_be16(&mut buf[16..18], ethertype);
                Ok(ETH_HEADER_LEN + VLAN_TAG_LEN)
            }
        }
    }
}

/// The IPv4 header of a RoCEv2 frame. Version, IHL (5 on emit), total length,
/// protocol (17), the fragment fields (none) and the header checksum are derived.
/// Options of a received header are checked (checksum, ICRC) but not kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    /// The TOS byte: DSCP (upper 6 bits) and ECN (lower 2 bits); variant (A17.3.3).
    pub tos: u8,
    pub ident: u16,
    pub dont_frag: bool,
    /// Variant (A17.3.3).
    pub ttl: u8,
}

/// The IPv6 header of a RoCEv2 frame. Version, payload length and next header
/// (17; extension headers are not supported) are derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    /// DSCP and ECN; variant (A17.3.3).
    pub traffic_class: u8,
    /// 20 bits; variant (A17.3.3).
    pub flow_label: u32,
    /// Variant (A17.3.3).
    pub hop_limit: u8,
}

/// The IP header: IPv4 or IPv6 (A17.4.1, A17.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Header bytes that [`RoceRepr::emit`] writes.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => IPV4_HEADER_LEN,
            IpRepr::V6(_) => IPV6_HEADER_LEN,
        }
    }

    fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ETHERTYPE_IPV4,
            IpRepr::V6(_) => ETHERTYPE_IPV6,
        }
    }

    /// The DS byte: IPv4 TOS or IPv6 traffic class.
    pub fn ds_byte(&self) -> u8 {
        match self {
            IpRepr::V4(v) => v.tos,
            IpRepr::V6(v) => v.traffic_class,
        }
    }

    /// The DSCP, 6 bits (RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.ds_byte() >> 2
    }

    /// The ECN codepoint, 2 bits (RFC 3168); 3 (CE) is what a congestion-notifying
    /// receiver reacts to (A17.9).
    pub fn ecn(&self) -> u8 {
        self.ds_byte() & 3
    }
}

/// A whole RoCEv2 frame, Ethernet header through ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceRepr<'a> {
    pub eth: EthernetRepr,
    pub ip: IpRepr,
    /// UDP source port (the destination is always [`UDP_PORT`]); senders vary it
    /// per flow for ECMP hashing (A17.4.3).
    pub udp_src_port: u16,
    /// `true`: the UDP checksum is computed on emit; `false`: it is sent as zero.
    /// On parse, whether the received field was non-zero. A received checksum is
    /// not verified: it covers nothing the ICRC does not already cover (the
    /// pseudo-header's addresses, protocol and length, the UDP ports and length
    /// and the whole UDP payload are all under the ICRC, A17.3.3), so a frame with
    /// a good ICRC carries intact data whatever its UDP checksum says.
    pub udp_checksum: bool,
    pub transport: TransportRepr<'a>,
}

/// Offsets of the parts of a frame found by [`locate`].
struct Layout<'a> {
    eth: EthernetRepr,
    ip: IpRepr,
    ip_hdr: &'a [u8],
    /// The UDP header and payload (up to the end given by the length fields;
    /// Ethernet padding after it is cut off).
    udp: &'a [u8],
}

/// Classifies and length-checks a frame down to the UDP datagram.
fn locate(frame: &[u8]) -> Result<Layout<'_>, DropReason> {
    let (eth, ethertype, at) = EthernetRepr::parse(frame)?;
    let l3 = &frame[at..];
    match ethertype {
        ETHERTYPE_IPV4 => locate_v4(eth, l3),
        ETHERTYPE_IPV6 => locate_v6(eth, l3),
        _ => Err(DropReason::NotRoce),
    }
}

/// The UDP destination port of a datagram starting at `udp`, for classification.
fn check_port(udp: &[u8]) -> Result<(), DropReason> {
    let port = udp.get(2..4).ok_or(DropReason::Truncated)?;
    if be16(port) != UDP_PORT {
        return Err(DropReason::NotRoce);
    }
    Ok(())
}

fn locate_v4(eth: EthernetRepr, l3: &[u8]) -> Result<Layout<'_>, DropReason> {
    let first = *l3.first().ok_or(DropReason::Truncated)?;
    if first >> 4 != 4 {
        return Err(DropReason::NotRoce);
    }
    let hdr_len = usize::from(first & 0xf) * 4;
    if hdr_len < IPV4_HEADER_LEN {
        return Err(DropReason::LengthMismatch);
    }
    let hdr = l3.get(..hdr_len).ok_or(DropReason::Truncated)?;
    if hdr[9] != IP_PROTO_UDP {
        return Err(DropReason::NotRoce);
    }
    // A fragment is not a whole RoCE packet and a non-first one has no UDP header;
    // RoCE senders set DF and never fragment (A17.4.1), so we do not reassemble.
    let flags_frag = be16(&hdr[6..8]);
    if flags_frag & (IPV4_MF | IPV4_FRAG_OFFSET) != 0 {
        return Err(DropReason::NotRoce);
    }
    check_port(&l3[hdr_len..])?;
    if internet_sum(0, hdr) != 0xffff {
        return Err(DropReason::BadIpChecksum);
    }
    let total_len = usize::from(be16(&hdr[2..4]));
    // Bytes past the total length are Ethernet padding (frames under 60 bytes) and
    // are ignored; fewer bytes than it means the frame is cut short.
    if total_len < hdr_len || total_len > l3.len() {
        return Err(DropReason::LengthMismatch);
    }
    let ip = IpRepr::V4(Ipv4Repr {
        src: Ipv4Addr::from(be32(&hdr[12..16])),
        dst: Ipv4Addr::from(be32(&hdr[16..20])),
        tos: hdr[1],
        ident: be16(&hdr[4..6]),
        dont_frag: flags_frag & IPV4_DF != 0,
        ttl: hdr[8],
    });
    Ok(Layout {
        eth,
        ip,
        ip_hdr: hdr,
        udp: &l3[hdr_len..total_len],
    })
}

fn locate_v6(eth: EthernetRepr, l3: &[u8]) -> Result<Layout<'_>, DropReason> {
    let first = *l3.first().ok_or(DropReason::Truncated)?;
    if first >> 4 != 6 {
        return Err(DropReason::NotRoce);
    }
    let hdr = l3.get(..IPV6_HEADER_LEN).ok_or(DropReason::Truncated)?;
    // Extension headers are not followed: RoCE senders do not emit them (A17.4.2).
    if hdr[6] != IP_PROTO_UDP {
        return Err(DropReason::NotRoce);
    }
    let rest = &l3[IPV6_HEADER_LEN..];
    check_port(rest)?;
    let payload_len = usize::from(be16(&hdr[4..6]));
    if payload_len > rest.len() {
        return Err(DropReason::LengthMismatch);
    }
    let word0 = be32(&hdr[0..4]);
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&hdr[8..24]);
    dst.copy_from_slice(&hdr[24..40]);
    let ip = IpRepr::V6(Ipv6Repr {
        src: Ipv6Addr::from(src),
        dst: Ipv6Addr::from(dst),
        traffic_class: (word0 >> 20) as u8,
        flow_label: word0 & MAX_FLOW_LABEL,
        hop_limit: hdr[7],
    });
    Ok(Layout {
        eth,
        ip,
        ip_hdr: hdr,
        udp: &rest[..payload_len],
    })
}

/// One's-complement sum (RFC 1071) of `data` added to `acc`, folded to 16 bits.
/// An odd last byte counts as the high byte of a word. Sums chain: a folded
/// sum is a valid `acc` for the next piece (the TAP link's GSO segments,
/// `device::fabric::tap_gso`, use it so).
pub fn internet_sum(acc: u32, data: &[u8]) -> u16 {
    let mut sum = u64::from(acc);
    let mut words = data.chunks_exact(2);
    for w in &mut words {
        sum += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        sum += u64::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The UDP checksum (RFC 768; RFC 8200 8.1 for IPv6) of `udp`, the whole datagram
/// with its checksum field zero, under `ip`'s pseudo-header. Zero goes out as
/// 0xFFFF, since zero on the wire means "no checksum".
fn udp_checksum(ip: &IpRepr, udp: &[u8]) -> u16 {
    let len = udp.len() as u32; // at most 65535: emit checked it against UDP:Length
    let mut acc = 0u32;
    match ip {
        IpRepr::V4(v4) => {
            let s = u32::from(v4.src);
            let d = u32::from(v4.dst);
            acc += (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff);
        }
        IpRepr::V6(v6) => {
            for seg in v6.src.segments().iter().chain(v6.dst.segments().iter()) {
                acc += u32::from(*seg);
            }
        }
    }
    acc += u32::from(IP_PROTO_UDP) + (len >> 16) + (len & 0xffff);
    match !internet_sum(acc, udp) {
        0 => 0xffff,
        c => c,
    }
}

impl<'a> RoceRepr<'a> {
    /// Parses an untrusted Ethernet frame (without FCS). Order: Ethernet, IP and
    /// UDP classification (else [`DropReason::NotRoce`]), IPv4 header checksum, IP and
    /// UDP lengths, ICRC (WF-10, A17.3.3), then [`TransportRepr::parse`]. Trailing
    /// Ethernet padding is ignored. Never panics.
    pub fn parse(frame: &'a [u8]) -> Result<RoceRepr<'a>, DropReason> {
        let Layout {
            eth,
            ip,
            ip_hdr,
            udp,
        } = locate(frame)?;
        let (udp_hdr, ib) = udp
            .split_at_checked(UDP_HEADER_LEN)
            .ok_or(DropReason::Truncated)?;
        if usize::from(be16(&udp_hdr[4..6])) != udp.len() {
            return Err(DropReason::LengthMismatch);
        }
        let icrc_at = ib
            .len()
            .checked_sub(ICRC_LEN)
            .filter(|&i| i >= BthRepr::LEN)
            .ok_or(DropReason::Truncated)?;
        let (pkt, icrc) = ib.split_at(icrc_at);
        let (bth, rest) = pkt.split_at(BthRepr::LEN);
        if icrc_roce(ip_hdr, udp_hdr, bth, rest).to_le_bytes() != icrc {
            return Err(DropReason::BadIcrc);
        }
        let transport = TransportRepr::parse(pkt)?;
        Ok(RoceRepr {
            eth,
            ip,
            udp_src_port: be16(&udp_hdr[0..2]),
            udp_checksum: be16(&udp_hdr[6..8]) != 0,
            transport,
        })
    }

    /// Bytes of the UDP datagram: header, transport part, ICRC.
    fn udp_len(&self) -> usize {
        UDP_HEADER_LEN + self.transport.buffer_len() + ICRC_LEN
    }

    /// Bytes of the whole frame, Ethernet header through ICRC. No Ethernet padding
    /// is added: the smallest frame (IPv4, no payload) is 58 bytes and the link
    /// (a TAP device) pads it if it needs to.
    pub fn buffer_len(&self) -> usize {
        self.eth.header_len() + self.ip.header_len() + self.udp_len()
    }

    /// Writes the whole frame into `buf`, deriving lengths, the IPv4 header
    /// checksum, the ICRC and (if [`Self::udp_checksum`]) the UDP checksum; returns
    /// its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        self.emit_inner(buf, |t, dst| {
            t.emit_payload(dst);
            Ok::<(), EmitError>(())
        })
        .map_err(|e| match e {
            EmitWithError::Emit(e) | EmitWithError::Fill(e) => e,
        })
    }

    /// Writes the whole frame like [`Self::emit`], except that the payload is not
    /// copied from `self.transport.payload` (which must be empty) but written in
    /// place by `fill`, given the `payload_len` bytes where it goes (the engine
    /// gathers a payload from memory straight into the frame, as
    /// [`PacketRepr::emit_with`](super::PacketRepr::emit_with) does for native
    /// packets).
    pub fn emit_with<E>(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<usize, EmitWithError<E>> {
        let sized = RoceRepr {
            transport: self
                .transport
                .sized_for_fill(payload_len)
                .map_err(EmitWithError::Emit)?,
            ..*self
        };
        sized.emit_inner(buf, |_, dst| {
            let (data, pad) = dst.split_at_mut(payload_len);
            fill(data)?;
            pad.fill(0);
            Ok(())
        })
    }

    /// Headers, then `fill` for the payload and pad (given the transport repr
    /// and that region), then the ICRC and UDP checksum over the result.
    fn emit_inner<E>(
        &self,
        buf: &mut [u8],
        fill: impl FnOnce(&TransportRepr<'_>, &mut [u8]) -> Result<(), E>,
    ) -> Result<usize, EmitWithError<E>> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(EmitWithError::Emit(EmitError::BufferTooSmall));
        }
        let buf = &mut buf[..len];
        let udp_len = u16::try_from(self.udp_len())
            .map_err(|_| EmitWithError::Emit(EmitError::FieldRange("UDP:Length")))?;
        let eth_len = self
            .eth
            .emit(buf, self.ip.ethertype())
            .map_err(EmitWithError::Emit)?;
        let l3 = &mut buf[eth_len..];
        let ip_len = self.ip.header_len();
        match &self.ip {
            IpRepr::V4(v4) => {
                let total = u16::try_from(IPV4_HEADER_LEN + usize::from(udp_len))
                    .map_err(|_| EmitWithError::Emit(EmitError::FieldRange("IPv4:TotalLength")))?;
                let h = &mut l3[..IPV4_HEADER_LEN];
                h[0] = 0x45;
                h[1] = v4.tos;
                set_be16(&mut h[2..4], total);
                set_be16(&mut h[4..6], v4.ident);
                set_be16(&mut h[6..8], if v4.dont_frag { IPV4_DF } else { 0 });
                h[8] = v4.ttl;
                h[9] = IP_PROTO_UDP;
                set_be16(&mut h[10..12], 0);
                set_be32(&mut h[12..16], u32::from(v4.src));
                set_be32(&mut h[16..20], u32::from(v4.dst));
                let sum = !internet_sum(0, h);
                set_be16(&mut h[10..12], sum);
            }
            IpRepr::V6(v6) => {
                if v6.flow_label > MAX_FLOW_LABEL {
                    return Err(EmitWithError::Emit(EmitError::FieldRange("IPv6:FlowLabel")));
                }
                let h = &mut l3[..IPV6_HEADER_LEN];
                let word0 = (6 << 28) | (u32::from(v6.traffic_class) << 20) | v6.flow_label;
                set_be32(&mut h[0..4], word0);
                set_be16(&mut h[4..6], udp_len);
                h[6] = IP_PROTO_UDP;
                h[7] = v6.hop_limit;
                h[8..24].copy_from_slice(&v6.src.octets());
                h[24..40].copy_from_slice(&v6.dst.octets());
            }
        }
        let (ip_hdr, udp) = l3.split_at_mut(ip_len);
        set_be16(&mut udp[0..2], self.udp_src_port);
        set_be16(&mut udp[2..4], UDP_PORT);
        set_be16(&mut udp[4..6], udp_len);
        set_be16(&mut udp[6..8], 0);
        let (payload_at, t_len) = self
            .transport
            .emit_headers(&mut udp[UDP_HEADER_LEN..])
            .map_err(EmitWithError::Emit)?;
        fill(
            &self.transport,
            &mut udp[UDP_HEADER_LEN + payload_at..UDP_HEADER_LEN + t_len],
        )
        .map_err(EmitWithError::Fill)?;
        let icrc_at = UDP_HEADER_LEN + t_len;
        let (head, icrc) = udp.split_at_mut(icrc_at);
        let (udp_hdr, ib) = head.split_at(UDP_HEADER_LEN);
        let (bth, rest) = ib.split_at(BthRepr::LEN);
        icrc.copy_from_slice(&icrc_roce(ip_hdr, udp_hdr, bth, rest).to_le_bytes());
        // The UDP checksum is masked out of the ICRC (A17.3.3), so it can be
        // computed last, over the finished datagram ICRC included.
        if self.udp_checksum {
            let c = udp_checksum(&self.ip, udp);
            set_be16(&mut udp[6..8], c);
        }
        Ok(len)
    }
}
