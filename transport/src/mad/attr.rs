//! The SMP attributes other than PortInfo (IBA 14.2.5): one value type each with
//! `parse` (from the 64-byte SMP data) and `emit`. Offsets are the ones libibmad's
//! `fields.c` reads (`IB_NODE_*_F`, `IB_SMINFO_*_F`, `IB_NOTICE_*_F`).

use super::{MadError, SMP_DATA_LEN};
use crate::wire::field::{be16, be24, be32, be64, set_be16, set_be24, set_be32, set_be64};

/// Attribute IDs of the subnet management class (IBA 14.2.5).
pub mod attr_id {
    /// Notice (0x0002): traps and TrapRepress.
    pub const NOTICE: u16 = 0x0002;
    /// NodeDescription (0x0010).
    pub const NODE_DESCRIPTION: u16 = 0x0010;
    /// NodeInfo (0x0011).
    pub const NODE_INFO: u16 = 0x0011;
    /// SwitchInfo (0x0012): a switch's SMA (issue 26 item 3).
    pub const SWITCH_INFO: u16 = 0x0012;
    /// GUIDInfo (0x0014).
    pub const GUID_INFO: u16 = 0x0014;
    /// PortInfo (0x0015).
    pub const PORT_INFO: u16 = 0x0015;
    /// P_KeyTable (0x0016).
    pub const P_KEY_TABLE: u16 = 0x0016;
    /// SLtoVLMappingTable (0x0017).
    pub const SL_TO_VL_TABLE: u16 = 0x0017;
    /// VLArbitrationTable (0x0018).
    pub const VL_ARBITRATION: u16 = 0x0018;
    /// LinearForwardingTable (0x0019): a switch's, 64 LIDs a block (IBA 14.2.5.10).
    pub const LINEAR_FORWARDING_TABLE: u16 = 0x0019;
    /// MulticastForwardingTable (0x001B): a switch's, 32 MLIDs x 16 ports a block
    /// (IBA 14.2.5.12).
    pub const MULTICAST_FORWARDING_TABLE: u16 = 0x001b;
    /// SMInfo (0x0020): answered by the SM, not the SMA.
    pub const SM_INFO: u16 = 0x0020;
}

fn check(data: &[u8], len: usize) -> Result<(), MadError> {
    if data.len() < len {
        Err(MadError::Truncated)
    } else {
        Ok(())
    }
}

/// NodeDescription (0x0010): 64 bytes of UTF-8, NUL padded (IBA 14.2.5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeDescription(pub [u8; SMP_DATA_LEN]);

impl NodeDescription {
    pub const LEN: usize = SMP_DATA_LEN;

    /// A description from text, cut at 64 bytes.
    pub fn from_text(s: &str) -> NodeDescription {
        let mut d = [0u8; SMP_DATA_LEN];
        let n = s.len().min(SMP_DATA_LEN);
        d[..n].copy_from_slice(&s.as_bytes()[..n]);
        NodeDescription(d)
    }
    pub fn parse(data: &[u8]) -> Result<Self, MadError> {
        check(data, Self::LEN)?;
        let mut d = [0u8; SMP_DATA_LEN];
        d.copy_from_slice(&data[..Self::LEN]);
        Ok(NodeDescription(d))
    }
    pub fn emit(&self, data: &mut [u8]) -> Result<(), MadError> {
        check(data, Self::LEN)?;
        data[..Self::LEN].copy_from_slice(&self.0);
        Ok(())
    }
}

/// NodeInfo:NodeType (IBA 14.2.5.3).
pub mod node_type {
    pub const CA: u8 = 1;
    pub const SWITCH: u8 = 2;
    pub const ROUTER: u8 = 3;
}

/// NodeInfo (0x0011), 40 bytes (IBA 14.2.5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeInfoRepr {
    pub base_version: u8,
    pub class_version: u8,
    pub node_type: u8,
    pub num_ports: u8,
    pub system_image_guid: u64,
    pub node_guid: u64,
    pub port_guid: u64,
    pub partition_cap: u16,
    pub device_id: u16,
    pub revision: u32,
    /// The port the SMP arrived on (IBA 14.2.5.3: filled in per request, not stored).
    pub local_port_num: u8,
    /// 24 bits.
    pub vendor_id: u32,
}

impl NodeInfoRepr {
    pub const LEN: usize = 40;

    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        Ok(NodeInfoRepr {
            base_version: d[0],
            class_version: d[1],
            node_type: d[2],
            num_ports: d[3],
            system_image_guid: be64(&d[4..12]),
            node_guid: be64(&d[12..20]),
            port_guid: be64(&d[20..28]),
            partition_cap: be16(&d[28..30]),
            device_id: be16(&d[30..32]),
            revision: be32(&d[32..36]),
            local_port_num: d[36],
            vendor_id: be24(&d[37..40]),
        })
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        if self.vendor_id > 0xff_ffff {
            return Err(MadError::FieldRange("NodeInfo:VendorID"));
        }
        d[0] = self.base_version;
        d[1] = self.class_version;
        d[2] = self.node_type;
        d[3] = self.num_ports;
        set_be64(&mut d[4..12], self.system_image_guid);
        set_be64(&mut d[12..20], self.node_guid);
        set_be64(&mut d[20..28], self.port_guid);
        set_be16(&mut d[28..30], self.partition_cap);
        set_be16(&mut d[30..32], self.device_id);
        set_be32(&mut d[32..36], self.revision);
        d[36] = self.local_port_num;
        set_be24(&mut d[37..40], self.vendor_id);
        Ok(())
    }
}

/// One GUIDInfo block (0x0014): 8 GUIDs; the modifier is the block number (IBA 14.2.5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GuidInfoBlock(pub [u64; 8]);

impl GuidInfoBlock {
    pub const LEN: usize = 64;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut g = [0u64; 8];
        for (i, v) in g.iter_mut().enumerate() {
            *v = be64(&d[i * 8..i * 8 + 8]);
        }
        Ok(GuidInfoBlock(g))
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        for (i, v) in self.0.iter().enumerate() {
            set_be64(&mut d[i * 8..i * 8 + 8], *v);
        }
        Ok(())
    }
}

/// One P_KeyTable block (0x0016): 32 P_Keys; the modifier's low 16 bits are the block
/// number (IBA 14.2.5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PkeyBlock(pub [u16; 32]);

impl PkeyBlock {
    pub const LEN: usize = 64;
    pub const ENTRIES: usize = 32;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut p = [0u16; 32];
        for (i, v) in p.iter_mut().enumerate() {
            *v = be16(&d[i * 2..i * 2 + 2]);
        }
        Ok(PkeyBlock(p))
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        for (i, v) in self.0.iter().enumerate() {
            set_be16(&mut d[i * 2..i * 2 + 2], *v);
        }
        Ok(())
    }
}

/// SLtoVLMappingTable (0x0017): the VL of each SL, 4 bits each, SL0 in the high
/// nibble of byte 0 (IBA 14.2.5.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SlToVlTable(pub [u8; 16]);

impl SlToVlTable {
    pub const LEN: usize = 8;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut t = [0u8; 16];
        for (sl, v) in t.iter_mut().enumerate() {
            let byte = d[sl / 2];
            *v = if sl % 2 == 0 { byte >> 4 } else { byte & 0xf };
        }
        Ok(SlToVlTable(t))
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        if self.0.iter().any(|v| *v > 15) {
            return Err(MadError::FieldRange("SLtoVL:VL"));
        }
        for (i, byte) in d[..Self::LEN].iter_mut().enumerate() {
            *byte = (self.0[2 * i] << 4) | self.0[2 * i + 1];
        }
        Ok(())
    }
}

/// One VLArbitrationTable entry: a VL (low nibble of byte 0) and its weight (IBA 14.2.5.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlArbEntry {
    pub vl: u8,
    pub weight: u8,
}

/// One VLArbitrationTable block (0x0018): 32 entries. The modifier's upper 16 bits
/// pick the block: 1 low priority 0-31, 2 low 32-63, 3 high 0-31, 4 high 32-63.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlArbBlock(pub [VlArbEntry; 32]);

impl VlArbBlock {
    pub const LEN: usize = 64;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut b = VlArbBlock::default();
        for (i, e) in b.0.iter_mut().enumerate() {
            e.vl = d[2 * i] & 0xf;
            e.weight = d[2 * i + 1];
        }
        Ok(b)
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        for (i, e) in self.0.iter().enumerate() {
            if e.vl > 15 {
                return Err(MadError::FieldRange("VLArb:VL"));
            }
            d[2 * i] = e.vl;
            d[2 * i + 1] = e.weight;
        }
        Ok(())
    }
}

/// SMInfo (0x0020), 21 bytes (IBA 14.2.5.13). The SMA passes it to the SM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmInfoRepr {
    pub guid: u64,
    pub sm_key: u64,
    pub act_count: u32,
    /// 4 bits.
    pub priority: u8,
    /// 4 bits: 0 not active, 1 discovering, 2 standby, 3 master.
    pub sm_state: u8,
}

impl SmInfoRepr {
    pub const LEN: usize = 21;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        Ok(SmInfoRepr {
            guid: be64(&d[0..8]),
            sm_key: be64(&d[8..16]),
            act_count: be32(&d[16..20]),
            priority: d[20] >> 4,
            sm_state: d[20] & 0xf,
        })
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        if self.priority > 15 || self.sm_state > 15 {
            return Err(MadError::FieldRange("SMInfo:Priority/SMState"));
        }
        set_be64(&mut d[0..8], self.guid);
        set_be64(&mut d[8..16], self.sm_key);
        set_be32(&mut d[16..20], self.act_count);
        d[20] = (self.priority << 4) | self.sm_state;
        Ok(())
    }
}

/// Notice:Type (IBA 13.4.8.2).
pub mod notice_type {
    pub const FATAL: u8 = 0;
    pub const URGENT: u8 = 1;
    pub const SECURITY: u8 = 2;
    pub const SUBNET_MANAGEMENT: u8 = 3;
    pub const INFO: u8 = 4;
}

/// Generic trap numbers an SMA sends (IBA 14.2.5.1).
pub mod trap {
    /// Link state of at least one port of a switch changed (switches only).
    pub const LINK_STATE_CHANGE: u16 = 128;
    /// The port's CapabilityMask changed, or (OtherLocalChanges set) another
    /// local attribute its ChangeFlags name, such as NodeDescription (IBA 1.2.1
    /// 14.2.5.1; [`Trap144Details`]).
    pub const LOCAL_CHANGES: u16 = 144;
    /// A SubnGet/SubnSet/TrapRepress failed the M_Key check (AD-12).
    pub const BAD_MKEY: u16 = 256;
}

/// Notice (0x0002) as an SMP carries it: the 64 bytes up to the data details; the
/// IssuerGID (bytes 64..80) exists only in SA reports (IBA 13.4.8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NoticeRepr {
    pub is_generic: bool,
    /// 7 bits ([`notice_type`]).
    pub notice_type: u8,
    /// 24 bits: the producer's node type when generic, the vendor ID otherwise.
    pub producer_type: u32,
    /// Trap number (generic) or device ID (vendor).
    pub trap_number: u16,
    pub issuer_lid: u16,
    pub toggle: bool,
    /// 15 bits.
    pub count: u16,
    /// 54 bytes, per trap number.
    pub data_details: [u8; 54],
}

impl NoticeRepr {
    pub const LEN: usize = 64;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut data_details = [0u8; 54];
        data_details.copy_from_slice(&d[10..64]);
        Ok(NoticeRepr {
            is_generic: d[0] & 0x80 != 0,
            notice_type: d[0] & 0x7f,
            producer_type: be24(&d[1..4]),
            trap_number: be16(&d[4..6]),
            issuer_lid: be16(&d[6..8]),
            toggle: d[8] & 0x80 != 0,
            count: be16(&d[8..10]) & 0x7fff,
            data_details,
        })
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        if self.notice_type > 0x7f || self.producer_type > 0xff_ffff || self.count > 0x7fff {
            return Err(MadError::FieldRange("Notice"));
        }
        d[0] = (u8::from(self.is_generic) << 7) | self.notice_type;
        set_be24(&mut d[1..4], self.producer_type);
        set_be16(&mut d[4..6], self.trap_number);
        set_be16(&mut d[6..8], self.issuer_lid);
        set_be16(&mut d[8..10], (u16::from(self.toggle) << 15) | self.count);
        d[10..64].copy_from_slice(&self.data_details);
        Ok(())
    }
}

/// Trap 128's data details: the LID of the switch whose link state changed.
pub fn trap128_details(switch_lid: u16) -> [u8; 54] {
    let mut d = [0u8; 54];
    set_be16(&mut d[0..2], switch_lid);
    d
}

/// Trap 144's ChangeFlags (the low bits of its data details' bytes 10..12;
/// OpenSM's `TRAP_144_MASK_*`).
pub mod trap144_change {
    pub const NODE_DESCRIPTION: u16 = 1 << 0;
    pub const LINK_WIDTH_ENABLED: u16 = 1 << 1;
    pub const LINK_SPEED_ENABLED: u16 = 1 << 2;
}

/// Trap 144's data details (IBA 1.2.1 14.2.5.1), as OpenSM's `ntc_144` and
/// infiniband-diags' `ibsendtrap` lay them out: reserved(2) LIDADDR(2)
/// reserved(1) 7 reserved bits and OtherLocalChanges(1) CapabilityMask(4)
/// ChangeFlags(2) CapabilityMask2(2). With OtherLocalChanges clear the trap
/// reports a new CapabilityMask; set, the change is what ChangeFlags name
/// ([`trap144_change`]) and CapabilityMask is the current one (OpenSM then
/// re-reads NodeDescription without a heavy sweep when only that changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Trap144Details {
    pub lid: u16,
    pub other_local_changes: bool,
    pub capability_mask: u32,
    pub change_flags: u16,
    pub capability_mask2: u16,
}

impl Trap144Details {
    pub fn parse(d: &[u8; 54]) -> Trap144Details {
        Trap144Details {
            lid: be16(&d[2..4]),
            other_local_changes: d[5] & 1 != 0,
            capability_mask: be32(&d[6..10]),
            change_flags: be16(&d[10..12]),
            capability_mask2: be16(&d[12..14]),
        }
    }
    pub fn emit(&self) -> [u8; 54] {
        let mut d = [0u8; 54];
        set_be16(&mut d[2..4], self.lid);
        d[5] = u8::from(self.other_local_changes);
        set_be32(&mut d[6..10], self.capability_mask);
        set_be16(&mut d[10..12], self.change_flags);
        set_be16(&mut d[12..14], self.capability_mask2);
        d
    }
}

/// Trap 256's data details (IBA 14.2.5.1), as libibmad and
/// OpenSM's `ntc_256` lay them out: reserved(2) LIDADDR(2) DRSLID(2) Method(1)
/// reserved(1) AttributeID(2) AttributeModifier(4) M_Key(8) reserved(1)
/// DRNotice|DRPathTruncated|DRHopCount(1) DRNoticeReturnPath(30).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BadMkeyDetails {
    pub lid: u16,
    pub dr_slid: u16,
    pub method: u8,
    pub attr_id: u16,
    pub attr_mod: u32,
    pub mkey: u64,
    /// Set when the offending SMP was directed-route.
    pub dr_notice: bool,
    pub dr_hop_cnt: u8,
    /// The return path, cut at 30 hops (DRPathTruncated then set).
    pub dr_return_path: [u8; 30],
}

impl BadMkeyDetails {
    pub fn parse(d: &[u8; 54]) -> BadMkeyDetails {
        let mut dr_return_path = [0u8; 30];
        dr_return_path.copy_from_slice(&d[24..54]);
        BadMkeyDetails {
            lid: be16(&d[2..4]),
            dr_slid: be16(&d[4..6]),
            method: d[6],
            attr_id: be16(&d[8..10]),
            attr_mod: be32(&d[10..14]),
            mkey: be64(&d[14..22]),
            dr_notice: d[23] & 0x80 != 0,
            dr_hop_cnt: d[23] & 0x3f,
            dr_return_path,
        }
    }
    pub fn emit(&self) -> [u8; 54] {
        let mut d = [0u8; 54];
        set_be16(&mut d[2..4], self.lid);
        set_be16(&mut d[4..6], self.dr_slid);
        d[6] = self.method;
        set_be16(&mut d[8..10], self.attr_id);
        set_be32(&mut d[10..14], self.attr_mod);
        set_be64(&mut d[14..22], self.mkey);
        let hops = self.dr_hop_cnt.min(30);
        let truncated = self.dr_hop_cnt > 30;
        d[23] = (u8::from(self.dr_notice) << 7) | (u8::from(truncated) << 6) | (hops & 0x3f);
        d[24..54].copy_from_slice(&self.dr_return_path);
        d
    }
}
