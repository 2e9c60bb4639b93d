//! The IP network under a UDP link (issue 27 item 3): how large an IB MTU
//! its datagrams can carry without IP fragmentation, and the socket setup
//! that keeps them from being fragmented.
//!
//! A native packet is one UDP datagram (ARCHITECTURE.md §6). An IP datagram
//! longer than the interface's MTU would be cut into fragments, and one lost
//! fragment loses the packet; a fabric across hosts on an ordinary 1500-byte
//! network would lose a 4096-byte-MTU packet for every lost 1500-byte frame,
//! and pay the reassembly. So the port's MTU follows the underlay instead,
//! as a RoCE NIC's follows its Ethernet MTU: [`ib_mtu_for`] picks the
//! largest IB MTU whose biggest packet fits (1024 on 1500, 4096 on 9000),
//! and every socket sets `IP_PMTUDISC_DO` (ip(7)): the kernel never
//! fragments, and a datagram too big for the path is refused (EMSGSIZE,
//! counted by the link as a send error) instead.
//!
//! [`ib_mtu_for`] is pure arithmetic over the packet layout; [`path_mtu`] is
//! the one place that asks the kernel what an interface carries.

#![allow(unsafe_code)]

use std::io;
use std::mem::size_of;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use transport::verbs::Mtu;
use transport::wire::crc::{ICRC_LEN, VCRC_LEN};
use transport::wire::{BthRepr, GrhRepr, LrhRepr};

/// The loopback interface's MTU on Linux (`lo`): a fabric on one host.
pub const LOOPBACK_MTU: u32 = 65_536;

/// The largest extension headers of a packet that carries a payload (IBA
/// 9.3): RDETH (4) + DETH (8) + RETH (16) + ImmDt (4), a reliable-datagram
/// RDMA WRITE First or Only with Immediate. (AtomicETH, 28 bytes, comes
/// without a payload.) A unit test checks it against the opcode table.
pub const MAX_EXT_HEADERS: usize = 4 + 8 + 16 + 4;

/// The most bytes a native packet carries besides its payload: LRH (IBA
/// 7.7), GRH (8.3), BTH (9.2), [`MAX_EXT_HEADERS`], ICRC and VCRC (7.8).
/// A payload is at most the path MTU and the pad (BTH:PadCnt) brings it to
/// a multiple of 4, which every MTU already is.
pub const MAX_PACKET_OVERHEAD: usize =
    LrhRepr::LEN + GrhRepr::LEN + BthRepr::LEN + MAX_EXT_HEADERS + ICRC_LEN + VCRC_LEN;

/// UDP header (RFC 768).
pub const UDP_HEADER: usize = 8;
/// IPv4 header without options (RFC 791; the socket sends none).
pub const IPV4_HEADER: usize = 20;
/// IPv6 header (RFC 8200; no extension headers).
pub const IPV6_HEADER: usize = 40;

/// The largest IB MTU (256..4096) whose biggest packet, plus `trailer`
/// bytes a link stage adds to each datagram (the fabric key's
/// [`super::TRAILER_LEN`], or 0), fits one IP datagram of `underlay_mtu`
/// bytes over IPv6 (`ipv6`) or IPv4; `None` when not even 256 fits.
pub fn ib_mtu_for(underlay_mtu: u32, ipv6: bool, trailer: usize) -> Option<Mtu> {
    let ip = if ipv6 { IPV6_HEADER } else { IPV4_HEADER };
    let room =
        (underlay_mtu as usize).checked_sub(ip + UDP_HEADER + trailer + MAX_PACKET_OVERHEAD)?;
    [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512, Mtu::M256]
        .into_iter()
        .find(|m| m.bytes() <= room)
}

/// The IB MTU a port uses (issue 27 item 3): the largest its underlay of
/// `underlay_mtu` bytes carries ([`ib_mtu_for`]), or the fabric file's
/// `mtu` (`wanted`) if that is lower: a user may lower it, never raise it
/// past what the network carries without fragments. The error is one line.
pub fn port_mtu(
    underlay_mtu: u32,
    ipv6: bool,
    trailer: usize,
    wanted: Option<Mtu>,
) -> Result<Mtu, String> {
    let cap = ib_mtu_for(underlay_mtu, ipv6, trailer).ok_or_else(|| {
        format!("the underlay's MTU of {underlay_mtu} bytes cannot carry even a 256-byte IB MTU")
    })?;
    match wanted {
        Some(w) if w > cap => Err(format!(
            "mtu = {} in the fabric file, but the underlay's MTU of {underlay_mtu} bytes \
             carries at most {} without IP fragmentation",
            w.bytes(),
            cap.bytes()
        )),
        Some(w) => Ok(w),
        None => Ok(cap),
    }
}

/// The MTU of the interface that carries datagrams from `local` (the
/// port's bound address; its port is not used) to each of `peers`: the
/// smallest of the route MTUs the kernel reports (`IP_MTU` / `IPV6_MTU` on
/// a socket connected to the peer, ip(7), ipv6(7)). No packet is sent:
/// connecting a UDP socket only looks up the route. A peer with no route
/// from `local` now (the kernel refuses the connect) is left out, with a
/// log line: nothing reaches it until a route exists, and a route that then
/// carries less gets its too-big datagrams refused and counted, never
/// fragmented. No peers, or none routable: the interface of `local` itself.
pub fn path_mtu(local: SocketAddr, peers: &[SocketAddr]) -> io::Result<u32> {
    let mut min = None::<u32>;
    for &peer in peers {
        match route_mtu(local, peer) {
            Ok(m) => min = Some(min.map_or(m, |x| x.min(m))),
            Err(e) => log::warn!(
                "fabric: no route from {} to {peer} ({e}): its MTU is not counted",
                local.ip()
            ),
        }
    }
    match min {
        Some(m) => Ok(m),
        None => route_mtu(local, local),
    }
}

/// The MTU of the route from `local` to `peer`.
fn route_mtu(local: SocketAddr, peer: SocketAddr) -> io::Result<u32> {
    let mut from = local;
    from.set_port(0);
    let s = UdpSocket::bind(from)?;
    s.connect(peer)?;
    let m = if peer.is_ipv6() {
        get_int(s.as_raw_fd(), libc::IPPROTO_IPV6, libc::IPV6_MTU)?
    } else {
        get_int(s.as_raw_fd(), libc::IPPROTO_IP, libc::IP_MTU)?
    };
    Ok(u32::try_from(m).unwrap_or(0))
}

/// Sets `IP_PMTUDISC_DO` (or `IPV6_PMTUDISC_DO`) on `socket`: its
/// datagrams go out with DF and are never fragmented; one longer than the
/// path MTU fails with EMSGSIZE (ip(7) IP_MTU_DISCOVER).
pub fn set_dont_fragment(socket: &UdpSocket) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    if socket.local_addr()?.is_ipv6() {
        set_int(
            fd,
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
        // A dual-stack socket may send IPv4 too.
        let _ = set_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        );
        Ok(())
    } else {
        set_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    }
}

/// Whether `socket` has `IP_PMTUDISC_DO` (or the IPv6 one) set.
pub fn is_dont_fragment(socket: &UdpSocket) -> io::Result<bool> {
    let fd = socket.as_raw_fd();
    Ok(if socket.local_addr()?.is_ipv6() {
        get_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU_DISCOVER)? == libc::IPV6_PMTUDISC_DO
    } else {
        get_int(fd, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER)? == libc::IP_PMTUDISC_DO
    })
}

/// Sets an int socket option (setsockopt(2)); also the tests' `ecn-switch`.
pub fn set_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a live c_int of the length passed; the
    // kernel only reads it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn get_int(fd: RawFd, level: libc::c_int, opt: libc::c_int) -> io::Result<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are live locals; the kernel writes at most `len`
    // bytes (a c_int) into `v` and the length written into `len`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use transport::wire::opcode::Opcode;

    #[test]
    fn max_ext_headers_is_the_largest_of_any_packet_with_a_payload() {
        let largest = Opcode::all()
            .map(|o| o.info())
            .filter(|i| i.payload)
            .map(|i| i.headers_len())
            .max()
            .unwrap();
        assert_eq!(MAX_EXT_HEADERS, largest);
        assert_eq!(MAX_PACKET_OVERHEAD, 8 + 40 + 12 + 32 + 4 + 2);
    }

    #[test]
    fn ethernet_1500_carries_1024_and_9000_carries_4096() {
        for ipv6 in [false, true] {
            for trailer in [0, super::super::TRAILER_LEN] {
                assert_eq!(ib_mtu_for(1500, ipv6, trailer), Some(Mtu::M1024));
                assert_eq!(ib_mtu_for(9000, ipv6, trailer), Some(Mtu::M4096));
                assert_eq!(ib_mtu_for(LOOPBACK_MTU, ipv6, trailer), Some(Mtu::M4096));
            }
        }
    }

    #[test]
    fn the_biggest_packet_fits_exactly_at_the_boundary() {
        // IPv4 + UDP + keyed trailer + overhead + 2048 bytes of payload:
        // one byte less and 2048 no longer fits.
        let need = (IPV4_HEADER + UDP_HEADER + 24 + MAX_PACKET_OVERHEAD + 2048) as u32;
        assert_eq!(ib_mtu_for(need, false, 24), Some(Mtu::M2048));
        assert_eq!(ib_mtu_for(need - 1, false, 24), Some(Mtu::M1024));
        // The same underlay over IPv6 has 20 bytes less room.
        assert_eq!(ib_mtu_for(need, true, 24), Some(Mtu::M1024));
        assert_eq!(ib_mtu_for(need + 20, true, 24), Some(Mtu::M2048));
    }

    #[test]
    fn an_underlay_too_small_for_256_has_no_mtu() {
        // IPv4's minimum MTU (RFC 791: 68) cannot carry a 256-byte payload.
        assert_eq!(ib_mtu_for(68, false, 0), None);
        assert_eq!(ib_mtu_for(0, true, 24), None);
        let need = (IPV6_HEADER + UDP_HEADER + MAX_PACKET_OVERHEAD + 256) as u32;
        assert_eq!(ib_mtu_for(need, true, 0), Some(Mtu::M256));
        assert_eq!(ib_mtu_for(need - 1, true, 0), None);
    }

    #[test]
    fn fabric_file_mtu_lowers_but_never_raises_the_port_mtu() {
        assert_eq!(port_mtu(9000, false, 24, None), Ok(Mtu::M4096));
        assert_eq!(port_mtu(9000, false, 24, Some(Mtu::M1024)), Ok(Mtu::M1024));
        assert_eq!(port_mtu(1500, false, 24, Some(Mtu::M1024)), Ok(Mtu::M1024));
        assert_eq!(port_mtu(1500, false, 24, Some(Mtu::M512)), Ok(Mtu::M512));
        let e = port_mtu(1500, false, 24, Some(Mtu::M2048)).unwrap_err();
        assert_eq!(
            e,
            "mtu = 2048 in the fabric file, but the underlay's MTU of 1500 bytes \
             carries at most 1024 without IP fragmentation"
        );
        assert!(!e.contains('\n'));
        assert!(port_mtu(100, false, 0, None)
            .unwrap_err()
            .contains("cannot carry even a 256-byte IB MTU"));
    }

    #[test]
    fn path_mtu_of_loopback_is_lo_mtu() {
        // `lo` is 65536; IP_MTU reports at most 65535, the largest IPv4
        // datagram (the kernel's IP_MAX_MTU).
        let lo = "127.0.0.1:0".parse().unwrap();
        let m = path_mtu(lo, &["127.0.0.1:9".parse().unwrap()]).unwrap();
        assert!((65_535..=LOOPBACK_MTU).contains(&m), "{m}");
        // No peers: the bound address's interface.
        assert_eq!(path_mtu(lo, &[]).unwrap(), m);
        assert_eq!(ib_mtu_for(m, false, 24), Some(Mtu::M4096));
    }

    #[test]
    fn a_peer_without_a_route_is_left_out_of_the_path_mtu() {
        // From a loopback address the kernel routes nothing to TEST-NET-1
        // (connect fails): that peer does not count, and without any
        // routable peer the bound address's interface does.
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let off: SocketAddr = "192.0.2.1:9".parse().unwrap();
        assert!(route_mtu(lo, off).is_err());
        let m = path_mtu(lo, &[off, "127.0.0.1:9".parse().unwrap()]).unwrap();
        assert!(m >= 65_535, "{m}");
        assert_eq!(path_mtu(lo, &[off]).unwrap(), m);
    }

    #[test]
    fn dont_fragment_is_set_by_set_dont_fragment() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!is_dont_fragment(&s).unwrap());
        set_dont_fragment(&s).unwrap();
        assert!(is_dont_fragment(&s).unwrap());
        // The refusal of a datagram over the path MTU is checked across a
        // 1500-byte veth in tests/tests/underlay.rs.
    }
}
