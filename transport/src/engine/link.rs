//! The engine's packets on the port's link layer (WF-10). On an InfiniBand port
//! a packet is native, LRH through VCRC. On an Ethernet port it is a RoCEv2
//! frame: the Ethernet header takes the place of the LRH and the IP header that
//! of the GRH (annex A17.4), so the engine keeps building and checking one
//! `PacketRepr` and only its outer headers are translated here:
//!
//! - receive: a frame is parsed and validated by `wire::roce`, must be addressed
//!   to the port's MAC, and becomes a `PacketRepr` whose GRH holds the IP
//!   addresses as GIDs (IPv4 as IPv4-mapped IPv6, A17.4.5.1) and whose LRH is
//!   unused (LID checks do not apply on Ethernet, A17.4.2);
//! - transmit: the GRH the QP's path asks for becomes the IP header (its SGID
//!   from the port's GID table by `sgid_index`), the path's MAC the Ethernet
//!   destination, and the UDP source port comes from the flow label (A17.4.3).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{LinkLayer, PortConfig, RxDrop};
use crate::verbs::NetworkHdr;
use crate::wire::packet::EmitWithError;
use crate::wire::roce::{EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, MacAddr, RoceRepr};
use crate::wire::template::ParseMemo;
use crate::wire::{DropReason, EmitError, GrhRepr, LrhRepr, PacketRepr};

/// What a RoCE frame carried besides its transport part: a UD receive reports it
/// (the receiver's stack answers the sender from it, as Linux's
/// `ib_init_ah_attr_from_wc` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RoceRx {
    /// The frame's source MAC.
    pub smac: MacAddr,
    /// IPv4 or IPv6.
    pub net: NetworkHdr,
    /// The 40 bytes a UD receive buffer starts with, in the layout of the
    /// kernel's `union rdma_network_hdr`: IPv4 = 20 zero bytes and the IPv4
    /// header, IPv6 = the IPv6 header.
    pub hdr: [u8; 40],
}

/// Why a received buffer did not become a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drop {
    /// A wire-level check failed.
    Wire(DropReason),
    /// A transport-level check failed.
    Rx(RxDrop),
}

/// An IPv4 address as a GID: ::ffff:a.b.c.d (A17.4.5.1).
pub fn ipv4_mapped_gid(a: Ipv4Addr) -> [u8; 16] {
    a.to_ipv6_mapped().octets()
}

/// The IPv4 address of an IPv4-mapped GID.
fn mapped_v4(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    Ipv6Addr::from(*gid).to_ipv4_mapped()
}

/// Parses one received buffer as the port's link layer carries packets;
/// `crcs_vouched`: a native packet's CRCs are not checked (its link carried
/// it through memory, `RxFrom::crcs_vouched`).
pub(crate) fn parse<'a>(
    port: &PortConfig,
    buf: &'a [u8],
    crcs_vouched: bool,
    memo: &mut ParseMemo,
) -> Result<(PacketRepr<'a>, Option<RoceRx>), Drop> {
    let mac = match port.link {
        LinkLayer::InfiniBand => {
            let p = if crcs_vouched {
                // Issue 30: most such packets repeat the last one's headers.
                memo.parse_vouched(buf)
            } else {
                PacketRepr::parse(buf)
            };
            return p.map(|p| (p, None)).map_err(Drop::Wire);
        }
        LinkLayer::Ethernet { mac } => mac,
    };
    let f = RoceRepr::parse(buf).map_err(Drop::Wire)?;
    let ip_at = f.eth.header_len();
    let mut hdr = [0u8; 40];
    let (grh, net) = match f.ip {
        IpRepr::V4(v4) => {
            // Parse checked that a whole IPv4 header is there.
            let h = buf
                .get(ip_at..ip_at + 20)
                .ok_or(Drop::Wire(DropReason::Truncated))?;
            hdr[20..].copy_from_slice(h);
            let g = GrhRepr {
                traffic_class: v4.tos,
                flow_label: 0,
                hop_limit: v4.ttl,
                sgid: ipv4_mapped_gid(v4.src),
                dgid: ipv4_mapped_gid(v4.dst),
            };
            (g, NetworkHdr::Ipv4)
        }
        IpRepr::V6(v6) => {
            let h = buf
                .get(ip_at..ip_at + 40)
                .ok_or(Drop::Wire(DropReason::Truncated))?;
            hdr.copy_from_slice(h);
            let g = GrhRepr {
                traffic_class: v6.traffic_class,
                flow_label: v6.flow_label,
                hop_limit: v6.hop_limit,
                sgid: v6.src.octets(),
                dgid: v6.dst.octets(),
            };
            (g, NetworkHdr::Ipv6)
        }
    };
    // The link hands over only frames for this port; a frame for another MAC
    // that gets here anyway is not ours to answer. A multicast frame is for
    // every port whose group's IP address maps to its MAC (PV-07).
    if f.eth.dst != mac && multicast_mac(&grh.dgid) != Some(f.eth.dst) {
        return Err(Drop::Rx(RxDrop::BadDmac));
    }
    let pkt = PacketRepr {
        // Unused on Ethernet: the engine checks addresses instead of LIDs.
        lrh: LrhRepr {
            vl: 0,
            sl: 0,
            dlid: 0,
            slid: 0,
        },
        grh: Some(grh),
        transport: f.transport,
    };
    let rx = RoceRx {
        smac: f.eth.src,
        net,
        hdr,
    };
    Ok((pkt, Some(rx)))
}

/// The Ethernet MAC of a multicast GID on RoCE (PV-07): an IPv4-mapped IPv4
/// multicast address maps to 01:00:5E and its low 23 bits (RFC 1112), an IPv6
/// multicast address (first byte 0xFF, also an IBA MGID) to 33:33 and its low
/// 32 bits (RFC 2464), as Linux's `ip_eth_mc_map` / `ipv6_eth_mc_map`.
/// `None` for a unicast GID.
pub fn multicast_mac(gid: &[u8; 16]) -> Option<MacAddr> {
    if let Some(v4) = mapped_v4(gid) {
        let o = v4.octets();
        return v4
            .is_multicast()
            .then_some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]);
    }
    (gid[0] == 0xff).then_some([0x33, 0x33, gid[12], gid[13], gid[14], gid[15]])
}

/// The source GID of index `sgid_index`: on InfiniBand GID 0 (the only one);
/// on Ethernet the table entry the driver set, if any.
pub(crate) fn source_gid(port: &PortConfig, sgid_index: u8) -> Option<[u8; 16]> {
    match port.link {
        LinkLayer::InfiniBand => Some(port.gid()),
        LinkLayer::Ethernet { .. } => port
            .roce_gids
            .get(usize::from(sgid_index))
            .copied()
            .flatten(),
    }
}

/// The RoCEv2 UDP source port of a flow (A17.4.3: the source port carries
/// entropy for ECMP and must stay constant for a QP's flow so that its packets
/// stay in order). The flow label, or one derived from the QP numbers when the
/// path has none, folded into the 14 low bits of a port in 0xC000..=0xFFFF —
/// the same mapping Linux uses, so a flow hashes alike from either end's stack.
pub(crate) fn udp_source_port(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label & 0xf_ffff != 0 {
        flow_label & 0xf_ffff
    } else {
        let mut v = u64::from(lqpn) * u64::from(rqpn);
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xf_ffff) as u32
    };
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

/// The IP header of a RoCE frame for a packet with GRH `g` (A17.4.1, A17.4.2):
/// IPv4 when both GIDs are IPv4-mapped, IPv6 when neither is.
fn ip_of(g: &GrhRepr) -> Option<IpRepr> {
    match (mapped_v4(&g.sgid), mapped_v4(&g.dgid)) {
        (Some(src), Some(dst)) => Some(IpRepr::V4(Ipv4Repr {
            src,
            dst,
            tos: g.traffic_class,
            ident: 0,
            // A17.4.1: RoCE packets are never fragmented.
            dont_frag: true,
            ttl: g.hop_limit,
        })),
        (None, None) => Some(IpRepr::V6(Ipv6Repr {
            src: Ipv6Addr::from(g.sgid),
            dst: Ipv6Addr::from(g.dgid),
            traffic_class: g.traffic_class,
            flow_label: g.flow_label & 0xf_ffff,
            hop_limit: g.hop_limit,
        })),
        _ => None,
    }
}

/// Sets the ECN field (the DS byte's low 2 bits) of an IP header.
fn set_ecn(ip: &mut IpRepr, ecn: u8) {
    let ds = match ip {
        IpRepr::V4(v) => &mut v.tos,
        IpRepr::V6(v) => &mut v.traffic_class,
    };
    *ds = (*ds & !3) | (ecn & 3);
}

/// Writes `pkt` as the port's link layer carries it, its payload written in
/// place by `fill` (see `PacketRepr::emit_with`). On Ethernet `dmac` is the next
/// hop and `udp_sport` the flow's UDP source port; a packet without a GRH, or
/// whose GIDs mix IPv4 and IPv6, cannot be framed (`EmitError::FieldRange`).
pub(crate) fn emit_with<E>(
    port: &PortConfig,
    pkt: &PacketRepr<'_>,
    dmac: MacAddr,
    udp_sport: u16,
    buf: &mut [u8],
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
) -> Result<usize, EmitWithError<E>> {
    let mac = match port.link {
        // Issue 30: the link computes the CRCs where it needs them.
        LinkLayer::InfiniBand => {
            return pkt.emit_with_crcs(buf, payload_len, fill, !port.crcs_by_link)
        }
        LinkLayer::Ethernet { mac } => mac,
    };
    let no_route = EmitWithError::Emit(EmitError::FieldRange("RoCE path (GRH)"));
    let mut ip = pkt.grh.as_ref().and_then(ip_of).ok_or(no_route)?;
    if port.cc.ecn_capable() && pkt.transport.bth.opcode != crate::wire::opcode::Opcode::CNP {
        // Issue 31: with congestion control on, the port's frames are
        // ECN-capable (ECT(0), RFC 3168) so that a congested hop marks them
        // CE rather than drops them; a CNP is not (A17.9, as mlx5 sends it).
        set_ecn(&mut ip, crate::cc::dcqcn::ECT0);
    }
    let frame = RoceRepr {
        eth: EthernetRepr {
            dst: dmac,
            src: mac,
            vlan: None,
        },
        ip,
        udp_src_port: udp_sport,
        udp_checksum: false,
        transport: pkt.transport,
    };
    frame.emit_with(buf, payload_len, fill)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_source_port_is_in_the_roce_range_and_stable() {
        for (fl, a, b) in [(0, 2, 3), (0x12345, 7, 9), (0, 0xffffff, 0xffffff)] {
            let p = udp_source_port(fl, a, b);
            assert!(p >= 0xc000);
            assert_eq!(p, udp_source_port(fl, a, b));
        }
        // A17.4.3: the flow label decides when there is one.
        assert_eq!(udp_source_port(5, 1, 2), udp_source_port(5, 3, 4));
        assert_ne!(udp_source_port(0, 1, 2), udp_source_port(0, 1, 3));
    }

    #[test]
    fn gids_pick_the_ip_version() {
        let v4 = ipv4_mapped_gid(Ipv4Addr::new(10, 0, 0, 1));
        let v6 = Ipv6Addr::new(0xfe80, 0, 0, 0, 1, 2, 3, 4).octets();
        let g = |sgid, dgid| GrhRepr {
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            sgid,
            dgid,
        };
        assert!(matches!(ip_of(&g(v4, v4)), Some(IpRepr::V4(_))));
        assert!(matches!(ip_of(&g(v6, v6)), Some(IpRepr::V6(_))));
        assert_eq!(ip_of(&g(v4, v6)), None);
    }
}
