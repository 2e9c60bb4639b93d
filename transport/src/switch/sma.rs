//! The switch's SMA (issue 26 item 3; AD-09): the `mad` module's handler-table shape
//! over the switch's state, with the attributes a switch answers (IBA 14.2.5, the
//! switch column): NodeDescription, NodeInfo (type switch, LocalPortNum = the
//! ingress port), SwitchInfo, PortInfo per port (modifier = port number, 0 the
//! management port), P_KeyTable and VLArbitrationTable per port,
//! SLtoVLMappingTable per (input port, output port),
//! LinearForwardingTable, MulticastForwardingTable. A bad modifier
//! answers INVALID_FIELD (IBA 13.4.7), an attribute it lacks
//! UNSUPPORTED_METHOD_ATTR, as the HCA's SMA does.
//!
//! M_Key (IBA 14.2.4; AD-12): port 0's PortInfo holds the switch's M_Key,
//! protect bits and lease, checked by the HCA SMA's code
//! ([`crate::mad::sma::mkey`]): a request that fails the check gets no response,
//! counts M_KeyViolations, starts the lease and queues trap 256 for the SM; a Get
//! at protect level 1 with the wrong key reads every port's M_Key as 0.

use super::Switch;
use super::SwitchDrop;
use crate::mad::attr::{attr_id, notice_type, trap, PkeyBlock, SlToVlTable, VlArbBlock};
use crate::mad::header::{method, status, SmpRepr, BASE_VERSION, SMP_CLASS_VERSION};
use crate::mad::sma::handlers::{self, AttrHandler, Data, Req};
use crate::mad::sma::port::set_port_info;
use crate::mad::switch_attr::{
    LftBlock, MftBlock, MftModifier, SwitchInfoRepr, LFT_BLOCK_LIDS, MFT_BLOCK_MLIDS,
    MFT_POSITION_PORTS,
};
use crate::mad::PortInfoRepr;
use crate::mad::SMP_DATA_LEN;
use crate::verbs::Time;

const INVALID: u16 = status::INVALID_FIELD;

impl Switch {
    /// Sets external port `p`'s PortInfo:MTUCap to `mtu` (1 = 256 ..
    /// 5 = 4096, IBA 14.2.5.6): what its link carries (issue 27 item 3, the
    /// underlay's MTU). NeighborMTU, the active MTU until an SM sets it (the
    /// static fabric's), follows it down; an SM's later NeighborMTU above it is
    /// refused, as on an HCA port. Port 0 (no link) and a port the switch
    /// lacks are left alone; `false` then, or for an `mtu` outside 1..=5.
    pub fn set_port_mtu_cap(&mut self, p: u8, mtu: u8) -> bool {
        if p == 0 || !(1..=5).contains(&mtu) {
            return false;
        }
        let Some(port) = self.ports.get_mut(usize::from(p)) else {
            return false;
        };
        port.info.mtu_cap = mtu;
        port.info.neighbor_mtu = port.info.neighbor_mtu.min(mtu);
        true
    }
}

/// What a switch Set changed (for the switch to note; nothing is reported yet).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SwitchSetEffects {
    /// A port whose logical state the SM changed.
    pub port_state_changed: bool,
}

type H = AttrHandler<Switch, SwitchSetEffects>;

const TABLE: &[H] = &[
    H {
        id: attr_id::NODE_DESCRIPTION,
        get: get_node_description,
        set: None,
    },
    H {
        id: attr_id::NODE_INFO,
        get: get_node_info,
        set: None,
    },
    H {
        id: attr_id::SWITCH_INFO,
        get: get_switch_info,
        set: Some(set_switch_info),
    },
    H {
        id: attr_id::PORT_INFO,
        get: get_port_info,
        set: Some(set_port_info_attr),
    },
    H {
        id: attr_id::P_KEY_TABLE,
        get: get_pkey_table,
        set: Some(set_pkey_table),
    },
    H {
        id: attr_id::SL_TO_VL_TABLE,
        get: get_sl2vl,
        set: Some(set_sl2vl),
    },
    H {
        id: attr_id::VL_ARBITRATION,
        get: get_vlarb,
        set: Some(set_vlarb),
    },
    H {
        id: attr_id::LINEAR_FORWARDING_TABLE,
        get: get_lft,
        set: Some(set_lft),
    },
    H {
        id: attr_id::MULTICAST_FORWARDING_TABLE,
        get: get_mft,
        set: Some(set_mft),
    },
];

/// Answers a SubnGet / SubnSet (or refuses another method) addressed to this switch:
/// `Ok(Some)` the request turned into its SubnGetResp, route fields untouched (the
/// caller turns a directed-route one around); `Ok(None)` a TrapRepress that stopped
/// a trap; `Err` what gets no response, counted by the caller: a response or trap
/// (no SM here), a bad version in a method with no response, a failed M_Key check,
/// a TrapRepress naming no pending trap. The checks in the HCA SMA's order.
pub(super) fn answer(
    sw: &mut Switch,
    mut smp: SmpRepr,
    in_port: u8,
    now: Time,
) -> Result<Option<SmpRepr>, SwitchDrop> {
    if smp.method & method::RESPONSE != 0 || smp.method == method::TRAP {
        return Err(SwitchDrop::NoSm);
    }
    let is_request = matches!(smp.method, method::GET | method::SET);
    let st = if smp.base_version != BASE_VERSION || smp.class_version != SMP_CLASS_VERSION {
        if !is_request {
            return Err(SwitchDrop::NoSm);
        }
        status::BAD_VERSION
    } else {
        let mkey_matched = check_mkey(sw, &smp, now)?;
        if smp.method == method::TRAP_REPRESS {
            return match sw.traps.repress(&smp) {
                Ok(()) => {
                    sw.counters.traps_repressed += 1;
                    Ok(None)
                }
                Err(_) => Err(SwitchDrop::UnmatchedRepress),
            };
        }
        if !is_request {
            status::UNSUPPORTED_METHOD
        } else {
            get_or_set(sw, &mut smp, in_port, mkey_matched)
        }
    };
    if st != status::OK {
        sw.counters.sma_error_replies += 1;
    }
    smp.method = method::GET_RESP;
    smp.status = st;
    Ok(Some(smp))
}

/// The M_Key check against port 0's PortInfo ([`crate::mad::sma::mkey`]); a
/// failure queues trap 256 (IBA 14.2.5.1) for the SM named in port 0's PortInfo.
fn check_mkey(sw: &mut Switch, smp: &SmpRepr, now: Time) -> Result<bool, SwitchDrop> {
    match sw.lease.check(&mut sw.ports[0].info, smp, now) {
        Ok(matched) => Ok(matched),
        Err(details) => {
            sw.queue_trap((notice_type::SECURITY, trap::BAD_MKEY), details, now);
            Err(SwitchDrop::BadMkey)
        }
    }
}

/// A Get or Set through the attribute table; the status of the response, its
/// data put in `smp`.
fn get_or_set(sw: &mut Switch, smp: &mut SmpRepr, in_port: u8, mkey_matched: bool) -> u16 {
    let Some(h) = handlers::lookup(TABLE, smp.attr_id) else {
        return status::UNSUPPORTED_METHOD_ATTR;
    };
    let req = Req {
        attr_mod: smp.attr_mod,
        data: &smp.data,
        in_port,
        mkey_matched,
    };
    let mut st = status::OK;
    if smp.method == method::SET {
        let Some(set) = h.set else {
            return status::UNSUPPORTED_METHOD_ATTR;
        };
        let mut fx = SwitchSetEffects::default();
        if let Err(e) = set(sw, &req, &mut fx) {
            st = e;
        }
        if fx.port_state_changed {
            sw.info.port_state_change = true;
        }
    }
    // The response to a Set carries the attribute as it is now.
    match (h.get)(sw, &req) {
        Ok(d) => smp.data = d,
        Err(e) if st == status::OK => st = e,
        Err(_) => {}
    }
    st
}

fn get_node_description(sw: &Switch, r: &Req) -> Result<Data, u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    Ok(sw.node.description.0)
}

/// Every port of a switch shares port 0's GUID (IBA 14.2.5.3 PortGUID).
fn get_node_info(sw: &Switch, r: &Req) -> Result<Data, u16> {
    handlers::node_info(&sw.node, sw.ports[0].guids[0], sw.ports[0].pkeys.len(), r)
}

fn get_switch_info(sw: &Switch, r: &Req) -> Result<Data, u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    sw.info.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

/// The SM's fields of SwitchInfo; the capabilities are read-only and ignored.
/// PortStateChange is cleared by writing 1 (IBA 14.2.5.4). A LinearFDBTop past the
/// table is refused whole.
fn set_switch_info(sw: &mut Switch, r: &Req, _fx: &mut SwitchSetEffects) -> Result<(), u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    let req = SwitchInfoRepr::parse(r.data).map_err(|_| INVALID)?;
    if usize::from(req.linear_fdb_top) >= sw.lft.len() {
        return Err(INVALID);
    }
    let i = &mut sw.info;
    i.linear_fdb_top = req.linear_fdb_top;
    i.default_port = req.default_port;
    i.default_mcast_primary_port = req.default_mcast_primary_port;
    i.default_mcast_not_primary_port = req.default_mcast_not_primary_port;
    i.life_time_value = req.life_time_value;
    i.optimized_sl2vl_programming = req.optimized_sl2vl_programming;
    // MulticastFDBTop is reserved without IsMulticastFDBTopSupported: a
    // Set's value is ignored, as any reserved field's.
    if req.port_state_change {
        i.port_state_change = false;
    }
    Ok(())
}

/// PortInfo's modifier on a switch names the port, 0 the management port
/// (IBA 14.2.5.6); past NumPorts is INVALID_FIELD.
fn port_index(sw: &Switch, r: &Req) -> Result<usize, u16> {
    let p = r.attr_mod as usize;
    if p >= sw.ports.len() {
        return Err(INVALID);
    }
    Ok(p)
}

fn get_port_info(sw: &Switch, r: &Req) -> Result<Data, u16> {
    let p = port_index(sw, r)?;
    let mut pi: PortInfoRepr = sw.ports[p].info;
    // LocalPortNum: the port the SMP arrived on (IBA 14.2.5.6).
    pi.local_port_num = r.in_port;
    // IBA 14.2.4.1 (AD-12): at protect level 1 a Get with the wrong M_Key
    // succeeds but reads PortInfo:M_Key as 0; port 0's level protects the switch.
    if !r.mkey_matched && sw.ports[0].info.mkey_protect_bits == 1 {
        pi.mkey = 0;
    }
    pi.client_reregister = false;
    let mut d = [0u8; SMP_DATA_LEN];
    pi.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_port_info_attr(sw: &mut Switch, r: &Req, fx: &mut SwitchSetEffects) -> Result<(), u16> {
    let p = port_index(sw, r)?;
    let req = PortInfoRepr::parse(r.data).map_err(|_| INVALID)?;
    let kept = sw.ports[p].info;
    let ch = set_port_info(&mut sw.ports[p], &req)?;
    if p != 0 {
        // IBA 14.2.5.6: on a switch's external ports the addressing and
        // management fields (M_Key and its protection and lease, GidPrefix,
        // LID, LMC, MasterSMLID, MasterSMSL) are port 0's business and
        // ignored in a Set (ibportstate writes 0x1234 into LID and SMLID).
        let i = &mut sw.ports[p].info;
        i.mkey = kept.mkey;
        i.mkey_protect_bits = kept.mkey_protect_bits;
        i.mkey_lease_period = kept.mkey_lease_period;
        i.gid_prefix = kept.gid_prefix;
        i.lid = kept.lid;
        i.lmc = kept.lmc;
        i.master_sm_lid = kept.master_sm_lid;
        i.master_sm_sl = kept.master_sm_sl;
    }
    fx.port_state_changed |= ch.state;
    if ch.state && sw.port_disabled(p as u8) {
        // Disabled took the link down (IBA 14.2.5.6): a link state change,
        // reported to the SM by trap 128 as one the link made.
        sw.link_trap();
    }
    Ok(())
}

/// P_KeyTable's modifier on a switch: bits 31..16 the port, 15..0 the block
/// (IBA 14.2.5.7; OpenSM builds it so). Port 0's table is NodeInfo:PartitionCap
/// long; an external port's SwitchInfo:PartitionEnforcementCap long, which is 0
/// here (no enforcement), so naming one is INVALID_FIELD.
fn pkey_at(sw: &Switch, r: &Req) -> Result<(usize, usize), u16> {
    let (port, block) = ((r.attr_mod >> 16) as usize, (r.attr_mod & 0xffff) as usize);
    let len = match port {
        0 => sw.ports[0].pkeys.len(),
        p if p < sw.ports.len() => usize::from(sw.info.partition_enforcement_cap),
        _ => return Err(INVALID),
    };
    if block * PKEYS_PER_BLOCK >= len.min(sw.ports[port].pkeys.len()) {
        return Err(INVALID);
    }
    Ok((port, block))
}

const PKEYS_PER_BLOCK: usize = 32;

fn get_pkey_table(sw: &Switch, r: &Req) -> Result<Data, u16> {
    let (port, block) = pkey_at(sw, r)?;
    let mut b = PkeyBlock([0; PKEYS_PER_BLOCK]);
    for (i, v) in b.0.iter_mut().enumerate() {
        *v = sw.ports[port]
            .pkeys
            .get(block * PKEYS_PER_BLOCK + i)
            .copied()
            .unwrap_or(0);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    b.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_pkey_table(sw: &mut Switch, r: &Req, _fx: &mut SwitchSetEffects) -> Result<(), u16> {
    let (port, block) = pkey_at(sw, r)?;
    let b = PkeyBlock::parse(r.data).map_err(|_| INVALID)?;
    for (i, v) in b.0.iter().enumerate() {
        if let Some(slot) = sw.ports[port].pkeys.get_mut(block * PKEYS_PER_BLOCK + i) {
            *slot = *v;
        }
    }
    Ok(())
}

/// SLtoVLMappingTable's modifier on a switch: bits 15..8 the input port, 7..0
/// the output port, each 0..=NumPorts, the rest 0 (IBA 14.2.5.8; ibsim's
/// do_sl2vl and OpenSM's osm_slvl_rcv read it so).
fn sl2vl_at(sw: &Switch, r: &Req) -> Result<(u8, u8), u16> {
    let (i, o) = ((r.attr_mod >> 8) as u8, r.attr_mod as u8);
    if r.attr_mod >> 16 != 0 || sw.sl2vl(i, o).is_none() {
        return Err(INVALID);
    }
    Ok((i, o))
}

fn get_sl2vl(sw: &Switch, r: &Req) -> Result<Data, u16> {
    let (i, o) = sl2vl_at(sw, r)?;
    let mut d = [0u8; SMP_DATA_LEN];
    sw.sl2vl(i, o)
        .ok_or(INVALID)?
        .emit(&mut d)
        .map_err(|_| INVALID)?;
    Ok(d)
}

fn set_sl2vl(sw: &mut Switch, r: &Req, _fx: &mut SwitchSetEffects) -> Result<(), u16> {
    let (i, o) = sl2vl_at(sw, r)?;
    let t = SlToVlTable::parse(r.data).map_err(|_| INVALID)?;
    *sw.sl2vl_mut(i, o).ok_or(INVALID)? = t;
    Ok(())
}

/// VLArbitrationTable's modifier on a switch: bits 31..16 the block 1..=4, 15..0
/// the port (IBA 14.2.5.9; ibsim reads it so).
fn vlarb_at(sw: &Switch, r: &Req) -> Result<(usize, usize), u16> {
    let (block, port) = ((r.attr_mod >> 16) as usize, (r.attr_mod & 0xffff) as usize);
    if !(1..=4).contains(&block) || port >= sw.ports.len() {
        return Err(INVALID);
    }
    Ok((port, block - 1))
}

fn get_vlarb(sw: &Switch, r: &Req) -> Result<Data, u16> {
    let (port, b) = vlarb_at(sw, r)?;
    let mut d = [0u8; SMP_DATA_LEN];
    sw.ports[port].vlarb[b].emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_vlarb(sw: &mut Switch, r: &Req, _fx: &mut SwitchSetEffects) -> Result<(), u16> {
    let (port, b) = vlarb_at(sw, r)?;
    sw.ports[port].vlarb[b] = VlArbBlock::parse(r.data).map_err(|_| INVALID)?;
    Ok(())
}

/// The LFT block a modifier names: within LinearFDBCap, else INVALID_FIELD.
fn lft_block(sw: &Switch, r: &Req) -> Result<usize, u16> {
    let b = r.attr_mod as usize;
    if b >= sw.lft.len() / LFT_BLOCK_LIDS {
        return Err(INVALID);
    }
    Ok(b)
}

fn get_lft(sw: &Switch, r: &Req) -> Result<Data, u16> {
    let b = lft_block(sw, r)?;
    let mut blk = LftBlock([0; LFT_BLOCK_LIDS]);
    blk.0
        .copy_from_slice(&sw.lft[b * LFT_BLOCK_LIDS..(b + 1) * LFT_BLOCK_LIDS]);
    let mut d = [0u8; SMP_DATA_LEN];
    blk.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_lft(sw: &mut Switch, r: &Req, _fx: &mut SwitchSetEffects) -> Result<(), u16> {
    let b = lft_block(sw, r)?;
    let blk = LftBlock::parse(r.data).map_err(|_| INVALID)?;
    sw.lft[b * LFT_BLOCK_LIDS..(b + 1) * LFT_BLOCK_LIDS].copy_from_slice(&blk.0);
    Ok(())
}

/// The MFT block and position a modifier names: the block within MulticastFDBCap,
/// the position within the switch's ports (0..=NumPorts), reserved bits zero.
fn mft_at(sw: &Switch, r: &Req) -> Result<MftModifier, u16> {
    let m = MftModifier::parse(r.attr_mod);
    if m.to_u32() != r.attr_mod
        || usize::from(m.block) >= sw.mft_mlids() / MFT_BLOCK_MLIDS
        || usize::from(m.position) >= sw.mft_positions()
    {
        return Err(INVALID);
    }
    Ok(m)
}

fn get_mft(sw: &Switch, r: &Req) -> Result<Data, u16> {
    let m = mft_at(sw, r)?;
    let mut blk = MftBlock([0; MFT_BLOCK_MLIDS]);
    for (i, v) in blk.0.iter_mut().enumerate() {
        *v = sw.mft_mask(usize::from(m.block) * MFT_BLOCK_MLIDS + i, m.position);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    blk.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_mft(sw: &mut Switch, r: &Req, _fx: &mut SwitchSetEffects) -> Result<(), u16> {
    let m = mft_at(sw, r)?;
    let blk = MftBlock::parse(r.data).map_err(|_| INVALID)?;
    // Bits for ports the switch does not have are kept as 0.
    let first_port = usize::from(m.position) * MFT_POSITION_PORTS;
    let valid: u16 = (0..MFT_POSITION_PORTS)
        .filter(|b| first_port + b < sw.ports.len())
        .fold(0, |acc, b| acc | 1 << b);
    for (i, v) in blk.0.iter().enumerate() {
        sw.set_mft_mask(
            usize::from(m.block) * MFT_BLOCK_MLIDS + i,
            m.position,
            v & valid,
        );
    }
    Ok(())
}
