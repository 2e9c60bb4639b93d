//! What an engine is configured with: its port (LID, GUID, GIDs, link layer,
//! P_Key table, LMC, SL-to-VL table, VL arbitration, rate) and its limits (queue depths, the
//! send and port windows, loss probes, credits, multicast, the memory budget).
//! Fixed for the engine's life but for the RoCE GID table, the SL-to-VL
//! table and the VL arbitration tables (`Engine::set_roce_gid`,
//! `Engine::set_sl2vl`, `Engine::set_vl_arb`).

use super::VlArbTables;
use super::{
    recovery, DEFAULT_DATA_VLS, DEFAULT_PORT_MBPS, DEFAULT_PORT_WINDOW, MAX_MCAST_GRP,
    MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH,
};
use crate::verbs::Mtu;

/// Well-known Q_Key of QP1 (C9-49; PV-05).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Largest message (C9-10; OP-09).
pub const MAX_MSG_SIZE: u64 = 1 << 31;
/// The permissive LID (C9-55).
pub const PERMISSIVE_LID: u16 = 0xffff;

/// The port the engine serves (AD-01, AD-05).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    pub lid: u16,
    /// LID mask control: the low `lmc` bits of a DLID are path bits (AD-01).
    pub lmc: u8,
    pub port_guid: u64,
    /// GID prefix; GID 0 = prefix:port_guid.
    pub gid_prefix: u64,
    /// P_Key table; index 0 is normally 0xFFFF (AD-05).
    pub pkeys: Vec<u16>,
    /// The port's link layer: native InfiniBand (LRH, LIDs) or Ethernet with
    /// RoCEv2 encapsulation (WF-10, annex A17).
    pub link: LinkLayer,
    /// RoCE GID table (A17.4.5): the source GIDs (IPv4-mapped or IPv6 addresses)
    /// a RoCE QP's `sgid_index` names. The guest's driver fills it from its
    /// netdev's addresses; unused on an InfiniBand port, where GID 0 is
    /// prefix:port_guid.
    pub roce_gids: Vec<Option<[u8; 16]>>,
    /// The largest path MTU the port carries (AD-03): 4096 on InfiniBand; on
    /// Ethernet what fits the link's MTU after the IP/UDP/transport headers.
    pub max_mtu: Mtu,
    /// The port's link bit rate in Mb/s: what static rate control (AD-07)
    /// paces slower paths against (`pacing`).
    pub rate_mbps: u32,
    /// SL-to-VL table (AD-06, `vl`): the data VL of each service level.
    pub sl2vl: [u8; 16],
    /// Data VLs the port has, VL0..VL(n-1) (AD-06).
    pub data_vls: u8,
    /// VL arbitration between the data VLs (AD-06, `vl`; IBA 7.6.9).
    pub vl_arb: VlArbTables,
    /// Congestion control (issue 31, `crate::cc`): off by default.
    pub cc: crate::cc::CcConfig,
    /// The link computes the ICRC and VCRC (issue 30): native packets leave
    /// the engine with both zero, and the link fills them in for a packet that
    /// goes onto a wire; a link that carries a packet through memory (the
    /// shared-memory link) leaves them out, and vouches for what it delivers
    /// ([`super::RxFrom::crcs_vouched`]). As a NIC's checksum offload, and
    /// only where the device's link stack said it can (nothing between the
    /// engine and the link reads or corrupts the CRCs). Off by default.
    pub crcs_by_link: bool,
}

/// Bytes a RoCEv2 packet adds to its payload inside the Ethernet MTU, at most:
/// IPv6 (40) + UDP (8) + BTH (12) + the largest extension headers (RETH +
/// ImmDt or AtomicETH, 28) + ICRC (4) (A17.4).
pub const ROCE_OVERHEAD: u32 = 40 + 8 + 12 + 28 + 4;

/// Entries of a RoCE port's GID table.
pub const ROCE_GID_TABLE_LEN: usize = 32;

/// What carries the port's packets (WF-10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// Native packets, LRH through VCRC.
    InfiniBand,
    /// RoCEv2 frames: Ethernet / IPv4 or IPv6 / UDP 4791 / BTH ... / ICRC.
    Ethernet {
        /// The port's MAC address.
        mac: crate::wire::roce::MacAddr,
    },
}

impl PortConfig {
    /// A port with LID `lid`, GUID `guid`, the default GID prefix and P_Key table.
    pub fn new(lid: u16, guid: u64) -> PortConfig {
        PortConfig {
            lid,
            lmc: 0,
            port_guid: guid,
            gid_prefix: 0xfe80_0000_0000_0000,
            pkeys: vec![0xffff],
            link: LinkLayer::InfiniBand,
            roce_gids: Vec::new(),
            max_mtu: Mtu::M4096,
            rate_mbps: DEFAULT_PORT_MBPS,
            sl2vl: [0; 16],
            data_vls: DEFAULT_DATA_VLS,
            vl_arb: VlArbTables::fair(DEFAULT_DATA_VLS),
            cc: crate::cc::CcConfig::default(),
            crcs_by_link: false,
        }
    }

    /// The same port on an Ethernet link of MTU `eth_mtu` bytes: the largest
    /// IB MTU whose packets fit (1500 -> 1024, 9000 -> 4096, as RoCE NICs and
    /// Linux rxe map them).
    pub fn with_ethernet_mtu(mut self, eth_mtu: u32) -> PortConfig {
        let room = eth_mtu.saturating_sub(ROCE_OVERHEAD) as usize;
        self.max_mtu = [Mtu::M4096, Mtu::M2048, Mtu::M1024, Mtu::M512]
            .into_iter()
            .find(|m| m.bytes() <= room)
            .unwrap_or(Mtu::M256);
        self
    }

    /// A RoCEv2 port with MAC `mac`: no LID, the port GUID is the MAC's EUI-64
    /// (as RoCE adapters derive it), an empty GID table of
    /// [`ROCE_GID_TABLE_LEN`] entries.
    pub fn ethernet(mac: crate::wire::roce::MacAddr) -> PortConfig {
        let guid = u64::from_be_bytes([
            mac[0] ^ 0x02,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ]);
        PortConfig {
            link: LinkLayer::Ethernet { mac },
            roce_gids: vec![None; ROCE_GID_TABLE_LEN],
            ..PortConfig::new(0, guid)
        }
        .with_ethernet_mtu(1500)
    }

    /// `true` on a RoCE port.
    pub fn is_ethernet(&self) -> bool {
        matches!(self.link, LinkLayer::Ethernet { .. })
    }

    /// GID 0 (AD-01).
    pub fn gid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[..8].copy_from_slice(&self.gid_prefix.to_be_bytes());
        g[8..].copy_from_slice(&self.port_guid.to_be_bytes());
        g
    }
}

/// Sizes the engine accepts (QS-09 "caps exceeded").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_qp: usize,
    pub max_cq: usize,
    pub max_srq: usize,
    pub max_mr: usize,
    pub max_pd: usize,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    /// The largest CQ the device offers (CAP_MAX_CQE). The engine does not use
    /// it: a CQ's depth is its consumer's (ARCHITECTURE.md §4 "who owns what").
    pub max_cqe: u32,
    pub max_inline: u32,
    pub max_rd_atomic: u8,
    /// Unacknowledged packets a requester keeps in flight (a design choice well
    /// under the spec's 2^23 bound, RL-17: loss recovery resends at most this many).
    pub send_window: u32,
    /// Loss probes before the ACK timeout (`recovery`, issue 14). Off, the
    /// ACK timer alone recovers a lost tail (what the timer tests assert).
    pub loss_probes: bool,
    /// The least time without acknowledgement before a probe, whatever the
    /// measured round trip: on a host that can deschedule a peer for
    /// milliseconds, shorter probes are mostly spurious (`recovery`).
    pub min_probe_timeout_ns: u64,
    /// Each RC requester learns its own probe floor from
    /// `min_probe_timeout_ns` up: a spurious probe doubles it, a useful one
    /// lowers it (`recovery`). Off, the floor stays `min_probe_timeout_ns`.
    pub adaptive_probe_floor: bool,
    /// A sequence NAK for a PSN the go-back under way already resends, within
    /// a round trip of its start, does not restart it (`recovery`). Off, every
    /// sequence NAK for another PSN goes back again.
    pub bounded_go_back: bool,
    /// Host bytes the engine may hold for its guest: page lists, WQEs, QP and
    /// responder state (`budget`, ARCHITECTURE.md §9).
    pub mem_budget: u64,
    /// Multicast groups the port's QPs may be attached to (AD-08).
    pub max_mcast_grp: usize,
    /// QPs attached to one multicast group (AD-08).
    pub max_mcast_qp_attach: usize,
    /// Multicast attachments over all groups (AD-08).
    pub max_total_mcast_qp_attach: usize,
    /// End-to-end credits of RC (`credits`, RL-13): ACKs report the receive
    /// queue and requesters keep to what their peer reports. Off, ACKs carry
    /// no count (code 31) and counts received are ignored.
    pub credits: bool,
    /// ACK timeouts in a row without progress after which an Armed RC
    /// requester migrates to its alternate path (AD-10, `apm`; vhca policy);
    /// 0: never on its own.
    pub apm_timeouts: u8,
    /// RC request packets in flight over all QPs (`port_window`; 0: no bound).
    pub port_window: u32,
    /// How long an RC/XRC packet one PSN ahead of its QP's expected one is
    /// held for the packet it overtook (`reorder`, vhca policy); 0: never.
    pub reorder_hold_ns: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_qp: 1 << 14,
            max_cq: 1 << 14,
            max_srq: 1 << 12,
            max_mr: 1 << 16,
            max_pd: 1 << 12,
            max_qp_wr: 1 << 14,
            max_sge: 32,
            max_cqe: 1 << 20,
            max_inline: 256,
            max_rd_atomic: 16,
            send_window: 256,
            loss_probes: true,
            min_probe_timeout_ns: recovery::MIN_PTO_NS,
            adaptive_probe_floor: true,
            bounded_go_back: true,
            mem_budget: crate::budget::DEFAULT_LIMIT,
            max_mcast_grp: MAX_MCAST_GRP,
            max_mcast_qp_attach: MAX_MCAST_QP_ATTACH,
            max_total_mcast_qp_attach: MAX_TOTAL_MCAST_QP_ATTACH,
            credits: true,
            apm_timeouts: 2,
            port_window: DEFAULT_PORT_WINDOW,
            reorder_hold_ns: super::reorder::DEFAULT_HOLD_NS,
        }
    }
}
