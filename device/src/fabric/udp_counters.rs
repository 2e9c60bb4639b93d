//! What a [`UdpLink`](super::UdpLink) counts, and the socket buffer it asks
//! for (split from `udp.rs`).

use super::liveness::LivenessCounters;

/// What a [`UdpLink`] did, and every reason it dropped a packet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpCounters {
    /// Packets sent on the socket.
    pub tx_packets: u64,
    /// Bytes sent on the socket.
    pub tx_bytes: u64,
    /// GSO sends: runs of packets that left as one super-datagram.
    pub tx_gso_runs: u64,
    /// Packets to the node's own LID, looped back without the socket (AD-04).
    pub loopback_packets: u64,
    /// Packets received (socket and loopback).
    pub rx_packets: u64,
    /// Bytes received (socket and loopback).
    pub rx_bytes: u64,
    /// GRO receives: buffers that held a run of coalesced datagrams.
    pub rx_gro_runs: u64,
    /// Send: LRH:DLID is no node of the fabric file.
    pub drop_tx_unknown_dlid: u64,
    /// Send: shorter than [`MIN_PACKET_LEN`].
    pub drop_tx_short: u64,
    /// Send: longer than [`MAX_PACKET_LEN`].
    pub drop_tx_oversized: u64,
    /// Send: the socket's send buffer was full.
    pub drop_tx_would_block: u64,
    /// Send: the socket refused the datagram (the error is also returned).
    pub drop_tx_error: u64,
    /// Send: the loopback queue held [`LOOPBACK_CAPACITY`] packets.
    pub drop_loopback_full: u64,
    /// Receive: from an address that is no node of the fabric file.
    pub drop_rx_unknown_source: u64,
    /// Receive: longer than [`MAX_PACKET_LEN`] (no receive buffer holds it).
    pub drop_rx_oversized: u64,
    /// Receive: the socket reported an error for an earlier datagram (an ICMP
    /// port-unreachable from a peer that is down); skipped.
    pub rx_socket_errors: u64,
    /// Multicast packets sent (a multicast DLID, PV-07): each went to every
    /// other node of the fabric file and looped back (ARCHITECTURE.md §6).
    pub tx_multicast: u64,
    /// Keepalives and port transitions (AE-01, `liveness`).
    pub liveness: LivenessCounters,
    /// Send: the SM disabled the port (IBA 14.2.5.6), the PHY is off.
    pub drop_tx_disabled: u64,
    /// Receive: the SM disabled the port; datagrams and keepalives alike.
    pub drop_rx_disabled: u64,
}

impl UdpCounters {
    /// All packets dropped, for every reason.
    pub fn dropped(&self) -> u64 {
        self.drop_tx_unknown_dlid
            + self.drop_tx_short
            + self.drop_tx_oversized
            + self.drop_tx_would_block
            + self.drop_tx_error
            + self.drop_loopback_full
            + self.drop_rx_unknown_source
            + self.drop_rx_oversized
            + self.drop_tx_disabled
            + self.drop_rx_disabled
    }
}

impl std::fmt::Display for UdpCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tx {} ({} B, {} GSO runs) loopback {} rx {} ({} B, {} GRO runs) dropped {}: \
             tx_unknown_dlid {} tx_short {} tx_oversized {} tx_would_block {} tx_error {} \
             loopback_full {} rx_unknown_source {} rx_oversized {} rx_socket_errors {} \
             tx_multicast {} keepalives_tx {} keepalives_rx {} port_down {} port_up {} \
             tx_disabled {} rx_disabled {}",
            self.tx_packets,
            self.tx_bytes,
            self.tx_gso_runs,
            self.loopback_packets,
            self.rx_packets,
            self.rx_bytes,
            self.rx_gro_runs,
            self.dropped(),
            self.drop_tx_unknown_dlid,
            self.drop_tx_short,
            self.drop_tx_oversized,
            self.drop_tx_would_block,
            self.drop_tx_error,
            self.drop_loopback_full,
            self.drop_rx_unknown_source,
            self.drop_rx_oversized,
            self.rx_socket_errors,
            self.tx_multicast,
            self.liveness.keepalives_sent,
            self.liveness.keepalives_received,
            self.liveness.went_down,
            self.liveness.came_up,
            self.drop_tx_disabled,
            self.drop_rx_disabled,
        )
    }
}

/// Socket buffer size asked for (bytes): 1024 full-PMTU packets.
pub const SOCKET_BUFFER: usize = 4 << 20;

/// The warning for socket buffers smaller than asked for, given what the
/// kernel granted (`SO_RCVBUF`/`SO_SNDBUF` as read back: Linux doubles the
/// value asked for, after capping it at `net.core.rmem_max`/`wmem_max`):
/// one line naming the sysctls and the value to set, or `None`.
pub fn buffer_warning(rx: Option<usize>, tx: Option<usize>) -> Option<String> {
    let short = |granted: Option<usize>| granted.is_some_and(|g| g < 2 * SOCKET_BUFFER);
    let mut which = Vec::new();
    if short(rx) {
        which.push(("receive", "net.core.rmem_max", rx.unwrap_or(0) / 2));
    }
    if short(tx) {
        which.push(("send", "net.core.wmem_max", tx.unwrap_or(0) / 2));
    }
    if which.is_empty() {
        return None;
    }
    let got: Vec<String> = which
        .iter()
        .map(|(what, _, g)| format!("{what} {g}"))
        .collect();
    let fix: Vec<String> = which
        .iter()
        .map(|(_, sysctl, _)| format!("{sysctl}={SOCKET_BUFFER}"))
        .collect();
    Some(format!(
        "UDP socket buffers capped below the {SOCKET_BUFFER} bytes asked for ({} bytes): \
         bursts of full-MTU packets will overflow them and be resent as losses; \
         raise the cap: sysctl -w {}",
        got.join(", "),
        fix.join(" ")
    ))
}

#[cfg(test)]
mod buffer_tests {
    use super::*;

    #[test]
    fn a_capped_buffer_is_one_warning_naming_the_sysctl_and_the_size() {
        // Granted in full (Linux reads back twice the value): nothing to say.
        assert_eq!(
            buffer_warning(Some(2 * SOCKET_BUFFER), Some(2 * SOCKET_BUFFER)),
            None
        );
        assert_eq!(buffer_warning(None, None), None);
        // Debian's default caps, 208 KiB each.
        let w = buffer_warning(Some(425_984), Some(2 * SOCKET_BUFFER)).unwrap();
        assert!(w.contains("sysctl -w net.core.rmem_max=4194304"), "{w}");
        assert!(w.contains("receive 212992"), "{w}");
        assert!(!w.contains("wmem_max"), "{w}");
        let w = buffer_warning(Some(425_984), Some(425_984)).unwrap();
        assert!(
            w.contains("net.core.rmem_max=4194304 net.core.wmem_max=4194304"),
            "{w}"
        );
        assert_eq!(w.lines().count(), 1);
    }
}
