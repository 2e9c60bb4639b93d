//! The SMA's attribute table (ibsim's shape): one small Get and optional Set handler
//! per attribute ID, each reading or writing one port's state and returning a MAD
//! status (IBA 13.4.7) on failure.

use super::port::{set_port_info, PortInfoChanges};
use super::{NodeIdentity, Sma};
use crate::mad::attr::{attr_id, GuidInfoBlock, NodeInfoRepr, PkeyBlock, SlToVlTable, VlArbBlock};
use crate::mad::header::{status, BASE_VERSION, SMP_CLASS_VERSION};
use crate::mad::portinfo::PortInfoRepr;
use crate::mad::SMP_DATA_LEN;

/// What a handler sees of a request (an HCA's SMA and a switch's alike).
pub(crate) struct Req<'a> {
    pub attr_mod: u32,
    pub data: &'a [u8; SMP_DATA_LEN],
    /// The port the SMP arrived on.
    pub in_port: u8,
    /// False when the request's M_Key did not match (only a Get can get this far
    /// then, at protect level 0 or 1: PortInfo hides the M_Key at level 1).
    pub mkey_matched: bool,
}

/// Effects of a Set for the SMA to turn into events.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct SetEffects {
    pub port_info: Option<PortInfoChanges>,
    pub pkeys_changed: bool,
}

pub(crate) type Data = [u8; SMP_DATA_LEN];
type GetFn<S> = fn(&S, &Req) -> Result<Data, u16>;
type SetFn<S, E> = fn(&mut S, &Req, &mut E) -> Result<(), u16>;

/// One attribute's handlers over an agent's state `S` (the HCA's [`Sma`], or a
/// switch's), a Set reporting what it changed in `E`.
pub(crate) struct AttrHandler<S, E> {
    pub id: u16,
    pub get: GetFn<S>,
    /// `None`: SubnSet of this attribute answers UNSUPPORTED_METHOD_ATTR.
    pub set: Option<SetFn<S, E>>,
}

/// The handlers of attribute `id` in `table`.
pub(crate) fn lookup<S, E>(
    table: &'static [AttrHandler<S, E>],
    id: u16,
) -> Option<&'static AttrHandler<S, E>> {
    table.iter().find(|h| h.id == id)
}

/// The attributes an HCA's SMA answers (IBA 14.2.5, the CA column).
/// SMInfo is not here: the SMA hands it to the node's SM.
pub(super) const TABLE: &[AttrHandler<Sma, SetEffects>] = &[
    AttrHandler {
        id: attr_id::NODE_DESCRIPTION,
        get: get_node_description,
        set: None,
    },
    AttrHandler {
        id: attr_id::NODE_INFO,
        get: get_node_info,
        set: None,
    },
    AttrHandler {
        id: attr_id::GUID_INFO,
        get: get_guid_info,
        set: Some(set_guid_info),
    },
    AttrHandler {
        id: attr_id::PORT_INFO,
        get: get_port_info,
        set: Some(set_port_info_attr),
    },
    AttrHandler {
        id: attr_id::P_KEY_TABLE,
        get: get_pkey_table,
        set: Some(set_pkey_table),
    },
    AttrHandler {
        id: attr_id::SL_TO_VL_TABLE,
        get: get_sl2vl,
        set: Some(set_sl2vl),
    },
    AttrHandler {
        id: attr_id::VL_ARBITRATION,
        get: get_vlarb,
        set: Some(set_vlarb),
    },
];

const INVALID: u16 = status::INVALID_FIELD;

fn get_node_description(sma: &Sma, r: &Req) -> Result<Data, u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    Ok(sma.node.description.0)
}

fn get_node_info(sma: &Sma, r: &Req) -> Result<Data, u16> {
    node_info(&sma.node, sma.port.guids[0], sma.port.pkeys.len(), r)
}

/// NodeInfo of a node (an HCA's or a switch's, IBA 14.2.5.3): modifier 0, the
/// LocalPortNum the port the request arrived on.
pub(crate) fn node_info(
    n: &NodeIdentity,
    port_guid: u64,
    partition_cap: usize,
    r: &Req,
) -> Result<Data, u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    NodeInfoRepr {
        base_version: BASE_VERSION,
        class_version: SMP_CLASS_VERSION,
        node_type: n.node_type,
        num_ports: n.num_ports,
        system_image_guid: n.system_image_guid,
        node_guid: n.node_guid,
        port_guid,
        partition_cap: partition_cap.min(usize::from(u16::MAX)) as u16,
        device_id: n.device_id,
        revision: n.revision,
        local_port_num: r.in_port,
        vendor_id: n.vendor_id & 0xff_ffff,
    }
    .emit(&mut d)
    .map_err(|_| INVALID)?;
    Ok(d)
}

/// The modifier of a per-port attribute of a CA names the port; 0 means the port
/// the SMP arrived on (IBA 14.2.5.6; ibsim reads it the same way).
fn own_port(sma: &Sma, r: &Req) -> bool {
    r.attr_mod == 0 || r.attr_mod == u32::from(sma.port.info.local_port_num)
}

fn guid_block(sma: &Sma, r: &Req) -> Result<usize, u16> {
    let block = r.attr_mod as usize;
    if block >= sma.port.guid_blocks() {
        return Err(INVALID);
    }
    Ok(block)
}

fn get_guid_info(sma: &Sma, r: &Req) -> Result<Data, u16> {
    let block = guid_block(sma, r)?;
    let mut g = GuidInfoBlock([0; 8]);
    for (i, v) in g.0.iter_mut().enumerate() {
        *v = sma.port.guids.get(block * 8 + i).copied().unwrap_or(0);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    g.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

/// GUIDInfo entries past GUIDCap are ignored; entry 0 is the port GUID and stays.
fn set_guid_info(sma: &mut Sma, r: &Req, _fx: &mut SetEffects) -> Result<(), u16> {
    let block = guid_block(sma, r)?;
    let g = GuidInfoBlock::parse(r.data).map_err(|_| INVALID)?;
    for (i, v) in g.0.iter().enumerate() {
        let idx = block * 8 + i;
        if idx == 0 {
            continue;
        }
        if let Some(slot) = sma.port.guids.get_mut(idx) {
            *slot = *v;
        }
    }
    Ok(())
}

fn get_port_info(sma: &Sma, r: &Req) -> Result<Data, u16> {
    if !own_port(sma, r) {
        return Err(INVALID);
    }
    let mut pi = sma.port.info;
    // IBA 14.2.4.1 (AD-12): at protect level 1 a Get with the wrong M_Key succeeds
    // but reads PortInfo:M_Key as 0 (at level 0 it reads the key).
    if !r.mkey_matched && pi.mkey_protect_bits == 1 {
        pi.mkey = 0;
    }
    pi.client_reregister = false;
    let mut d = [0u8; SMP_DATA_LEN];
    pi.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_port_info_attr(sma: &mut Sma, r: &Req, fx: &mut SetEffects) -> Result<(), u16> {
    if !own_port(sma, r) {
        return Err(INVALID);
    }
    let req = PortInfoRepr::parse(r.data).map_err(|_| INVALID)?;
    fx.port_info = Some(set_port_info(&mut sma.port, &req)?);
    Ok(())
}

/// P_KeyTable's modifier: block number in the low 16 bits (the upper 16 name a
/// switch port, IBA 14.2.5.7; a CA ignores them).
fn pkey_block(sma: &Sma, r: &Req) -> Result<usize, u16> {
    let block = (r.attr_mod & 0xffff) as usize;
    if block >= sma.port.pkey_blocks() {
        return Err(INVALID);
    }
    Ok(block)
}

fn get_pkey_table(sma: &Sma, r: &Req) -> Result<Data, u16> {
    let block = pkey_block(sma, r)?;
    let mut p = PkeyBlock([0; 32]);
    for (i, v) in p.0.iter_mut().enumerate() {
        *v = sma.port.pkeys.get(block * 32 + i).copied().unwrap_or(0);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    p.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_pkey_table(sma: &mut Sma, r: &Req, fx: &mut SetEffects) -> Result<(), u16> {
    let block = pkey_block(sma, r)?;
    let p = PkeyBlock::parse(r.data).map_err(|_| INVALID)?;
    for (i, v) in p.0.iter().enumerate() {
        if let Some(slot) = sma.port.pkeys.get_mut(block * 32 + i) {
            if *slot != *v {
                *slot = *v;
                fx.pkeys_changed = true;
            }
        }
    }
    Ok(())
}

/// SLtoVLMappingTable of a CA: modifier 0 (a switch's names input and output ports,
/// IBA 14.2.5.8).
fn get_sl2vl(sma: &Sma, r: &Req) -> Result<Data, u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    let mut d = [0u8; SMP_DATA_LEN];
    sma.port.sl2vl.emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_sl2vl(sma: &mut Sma, r: &Req, _fx: &mut SetEffects) -> Result<(), u16> {
    if r.attr_mod != 0 {
        return Err(INVALID);
    }
    sma.port.sl2vl = SlToVlTable::parse(r.data).map_err(|_| INVALID)?;
    Ok(())
}

/// VLArbitrationTable: the modifier's upper 16 bits pick block 1..=4 (IBA 14.2.5.9);
/// a CA ignores the lower 16 (a switch's port).
fn vlarb_block(r: &Req) -> Result<usize, u16> {
    match r.attr_mod >> 16 {
        b @ 1..=4 => Ok(b as usize - 1),
        _ => Err(INVALID),
    }
}

fn get_vlarb(sma: &Sma, r: &Req) -> Result<Data, u16> {
    let b = vlarb_block(r)?;
    let mut d = [0u8; SMP_DATA_LEN];
    sma.port.vlarb[b].emit(&mut d).map_err(|_| INVALID)?;
    Ok(d)
}

fn set_vlarb(sma: &mut Sma, r: &Req, _fx: &mut SetEffects) -> Result<(), u16> {
    let b = vlarb_block(r)?;
    sma.port.vlarb[b] = VlArbBlock::parse(r.data).map_err(|_| INVALID)?;
    Ok(())
}
