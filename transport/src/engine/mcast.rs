//! Unreliable Datagram multicast (AD-08, PV-07): the groups this port's UD
//! QPs are attached to, the attach/detach verbs, and the delivery of an
//! incoming multicast packet (DestQP 0xFFFFFF) to every attached QP
//! (C9-58, C9-59). Membership is local to the engine: how the fabric
//! carries a group's packets to the member nodes is the link's business
//! (ARCHITECTURE.md §6).
//!
//! Bounds (ARCHITECTURE.md §9): at most `Limits::max_mcast_grp` groups,
//! `max_mcast_qp_attach` QPs per group and `max_total_mcast_qp_attach`
//! attachments in all; a guest cannot grow the table past them (the verb
//! fails with `InsufficientResources`) and a peer cannot grow it at all.

use std::collections::BTreeMap;
use std::net::Ipv6Addr;

use super::{Effects, Engine, PortConfig, RxDrop};
use crate::memory::Memory;
use crate::verbs::{QpType, Time, VerbError};
use crate::wire::PacketRepr;

/// Groups a port's QPs may be attached to (QUERY_DEVICE max_mcast_grp).
pub const MAX_MCAST_GRP: usize = 256;
/// QPs attached to one group (max_mcast_qp_attach).
pub const MAX_MCAST_QP_ATTACH: usize = 64;
/// Attachments in all, over every group (max_total_mcast_qp_attach).
pub const MAX_TOTAL_MCAST_QP_ATTACH: usize = 4096;

/// First multicast LID (IBA 4.1.3: 0xC000..=0xFFFE; 0xFFFF is permissive).
pub const MULTICAST_LID_BASE: u16 = 0xc000;

/// The DestQP of every multicast packet (C9-58).
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// Whether `lid` is a multicast LID.
pub fn is_multicast_lid(lid: u16) -> bool {
    (MULTICAST_LID_BASE..0xffff).contains(&lid)
}

/// Whether `gid` is a multicast GID: the IBA form (first byte 0xFF, 4.1.1)
/// or, on RoCE, an IPv4-mapped IPv4 multicast address (A17.4.5.1; Linux's
/// `rdma_is_multicast_addr`).
pub fn is_multicast_gid(gid: &[u8; 16]) -> bool {
    gid[0] == 0xff
        || Ipv6Addr::from(*gid)
            .to_ipv4_mapped()
            .is_some_and(|a| a.is_multicast())
}

/// One multicast group of this port.
#[derive(Debug, Clone, Default)]
struct Group {
    /// The MLID its packets carry on InfiniBand (0 on RoCE).
    mlid: u16,
    /// Attached QPs, at most `max_mcast_qp_attach`.
    qps: Vec<u32>,
}

/// The port's multicast groups, by MGID.
#[derive(Debug, Default)]
pub(crate) struct McastTable {
    groups: BTreeMap<[u8; 16], Group>,
    /// Attachments over all groups.
    total: usize,
}

impl McastTable {
    /// Detaches `qpn` from every group (its QP is destroyed).
    fn forget_qp(&mut self, qpn: u32) {
        let mut removed = 0;
        self.groups.retain(|_, g| {
            let before = g.qps.len();
            g.qps.retain(|q| *q != qpn);
            removed += before - g.qps.len();
            !g.qps.is_empty()
        });
        self.total -= removed;
    }
}

impl Engine {
    /// Attaches UD QP `qpn` to the multicast group `mgid` (AD-08). On InfiniBand `mlid` is the
    /// group's multicast LID (0xC000..=0xFFFE) and the packets of the group
    /// must carry it; on RoCE it is unused (0). Attaching a QP twice is no
    /// error. Fails with `InvalidAttr` for a QP that is not UD, a GID that is
    /// not multicast, a LID outside the multicast range or another LID than
    /// the group's; with `InsufficientResources` past the limits.
    pub fn attach_mcast(&mut self, qpn: u32, mgid: [u8; 16], mlid: u16) -> Result<(), VerbError> {
        let qp = self.qps.get(&qpn).ok_or(VerbError::InvalidHandle)?;
        if qp.init.qp_type != QpType::Ud || qpn <= 1 {
            return Err(VerbError::InvalidAttr);
        }
        let ethernet = self.port.is_ethernet();
        if !is_multicast_gid(&mgid) || (!ethernet && mgid[0] != 0xff) {
            return Err(VerbError::InvalidAttr);
        }
        let mlid = if ethernet { 0 } else { mlid };
        if !ethernet && !is_multicast_lid(mlid) {
            return Err(VerbError::InvalidAttr);
        }
        let t = &mut self.mcast;
        if let Some(g) = t.groups.get(&mgid) {
            if g.mlid != mlid {
                return Err(VerbError::InvalidAttr);
            }
            if g.qps.contains(&qpn) {
                return Ok(());
            }
            if g.qps.len() >= self.limits.max_mcast_qp_attach {
                return Err(VerbError::InsufficientResources);
            }
        } else if t.groups.len() >= self.limits.max_mcast_grp {
            return Err(VerbError::InsufficientResources);
        }
        if t.total >= self.limits.max_total_mcast_qp_attach {
            return Err(VerbError::InsufficientResources);
        }
        t.groups
            .entry(mgid)
            .or_insert_with(|| Group {
                mlid,
                qps: Vec::new(),
            })
            .qps
            .push(qpn);
        t.total += 1;
        Ok(())
    }

    /// Detaches `qpn` from `mgid` (AD-08): from then on the group's packets
    /// no longer reach it. `InvalidAttr` when it was not attached (with
    /// that LID on InfiniBand).
    pub fn detach_mcast(&mut self, qpn: u32, mgid: [u8; 16], mlid: u16) -> Result<(), VerbError> {
        if !self.qps.contains_key(&qpn) {
            return Err(VerbError::InvalidHandle);
        }
        let ethernet = self.port.is_ethernet();
        let t = &mut self.mcast;
        let g = t.groups.get_mut(&mgid).ok_or(VerbError::InvalidAttr)?;
        let at = g.qps.iter().position(|q| *q == qpn);
        let Some(at) = at.filter(|_| ethernet || g.mlid == mlid) else {
            return Err(VerbError::InvalidAttr);
        };
        g.qps.swap_remove(at);
        if g.qps.is_empty() {
            t.groups.remove(&mgid);
        }
        t.total -= 1;
        Ok(())
    }

    /// The QPs attached to `mgid`, in attach order (tests, diagnostics).
    pub fn mcast_members(&self, mgid: &[u8; 16]) -> Vec<u32> {
        self.mcast
            .groups
            .get(mgid)
            .map(|g| g.qps.clone())
            .unwrap_or_default()
    }

    /// Called by `destroy_qp`: a destroyed QP leaves its groups.
    pub(super) fn mcast_forget_qp(&mut self, qpn: u32) {
        self.mcast.forget_qp(qpn);
    }

    /// Delivers a multicast packet (DestQP 0xFFFFFF) that passed the link's
    /// checks: it is valid only with a GRH (C9-43.1.1), a multicast DGID and
    /// at least one local QP attached to that DGID (C9-58), and on
    /// InfiniBand only to the group's MLID; then a copy goes to every
    /// attached QP (C9-59) through that QP's own header checks (state,
    /// service, P_Key, Q_Key). The sending QP itself, when attached, gets
    /// no copy (its own packet looped back; Linux's
    /// IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK behaviour, which the seeds'
    /// multicast sections leave open): other QPs of the node do.
    pub(super) fn deliver_multicast(
        &mut self,
        pkt: &PacketRepr<'_>,
        roce: Option<super::link::RoceRx>,
        mem: &mut dyn Memory,
        now: Time,
    ) {
        let Some(grh) = pkt.grh.as_ref() else {
            self.count_drop(RxDrop::McastNoGrh); // C9-43.1.1
            return;
        };
        if !is_multicast_gid(&grh.dgid) {
            self.count_drop(RxDrop::McastBadDgid); // C9-58
            return;
        }
        let Some(group) = self.mcast.groups.get(&grh.dgid) else {
            self.count_drop(RxDrop::Multicast); // C9-58: no attached QP
            return;
        };
        if roce.is_none() && pkt.lrh.dlid != group.mlid {
            self.count_drop(RxDrop::BadDlid);
            return;
        }
        let mut members = std::mem::take(&mut self.mcast_scratch);
        members.clear();
        members.extend_from_slice(&group.qps);
        let src_qp = pkt.transport.ext.deth.map(|d| d.src_qp);
        let own = from_this_port(&self.port, pkt);
        let mut fx = Effects::default();
        for &qpn in &members {
            if own && src_qp == Some(qpn) {
                self.counters.mcast_own_skipped += 1;
                continue;
            }
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if let Err(r) = super::io::check_headers(&self.port, qp, pkt, true) {
                log::debug!("drop multicast copy for QP {qpn}: {r:?}");
                self.counters.drop(r);
                continue;
            }
            self.counters.mcast_rx_copies += 1;
            let mut ctx = super::engine_ctx!(self, mem, &mut fx, now, roce);
            super::responder::handle_request(qp, pkt, &mut ctx);
        }
        self.mcast_scratch = members;
        self.finish(fx);
    }

    fn count_drop(&mut self, r: RxDrop) {
        log::debug!("drop multicast packet: {r:?}");
        self.counters.drop(r);
    }
}

/// Whether the packet was sent by this port (looped back): its SLID is one
/// of the port's LIDs on InfiniBand, its SGID one of the port's GIDs on RoCE.
fn from_this_port(port: &PortConfig, pkt: &PacketRepr<'_>) -> bool {
    if port.is_ethernet() {
        let sgid = pkt.grh.as_ref().map(|g| g.sgid);
        return port.roce_gids.iter().flatten().any(|g| Some(*g) == sgid);
    }
    let mask = !((1u16 << port.lmc.min(7)) - 1);
    pkt.lrh.slid & mask == port.lid & mask
}
