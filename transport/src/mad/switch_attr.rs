//! The SMP attributes only a switch has (issue 26 item 3; AD-09): SwitchInfo
//! (0x0012, IBA 14.2.5.4), LinearForwardingTable (0x0019, IBA 14.2.5.10) and
//! MulticastForwardingTable (0x001B, IBA 14.2.5.12), each a value with `parse` /
//! `emit` over the 64-byte SMP data. Offsets are the ones libibmad's `fields.c`
//! reads (`IB_SW_*_F`), which is what OpenSM and `smpquery switchinfo` see.

use super::{MadError, SMP_DATA_LEN};
use crate::wire::field::{be16, set_be16};

fn check(data: &[u8], len: usize) -> Result<(), MadError> {
    if data.len() < len {
        Err(MadError::Truncated)
    } else {
        Ok(())
    }
}

/// The first multicast LID (IBA 4.1: 0xC000..=0xFFFE are multicast, 0xFFFF is
/// permissive).
pub const MLID_BASE: u16 = 0xc000;
/// LIDs per LinearForwardingTable block.
pub const LFT_BLOCK_LIDS: usize = 64;
/// MLIDs per MulticastForwardingTable block.
pub const MFT_BLOCK_MLIDS: usize = 32;
/// Ports per MulticastForwardingTable port mask (one "position").
pub const MFT_POSITION_PORTS: usize = 16;
/// An LFT entry naming no port: the packet is discarded (IBA 14.2.5.10; also what an
/// entry past LinearFDBTop means).
pub const LFT_NO_PORT: u8 = 0xff;

/// SwitchInfo (0x0012), 20 bytes used of the 64 (IBA 14.2.5.4).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SwitchInfoRepr {
    /// Entries the LFT can hold (RO).
    pub linear_fdb_cap: u16,
    /// Entries a random FDB can hold: 0, this switch has none (RO).
    pub random_fdb_cap: u16,
    /// MLIDs the MFT can hold (RO).
    pub multicast_fdb_cap: u16,
    /// The highest LID the LFT forwards; unicast DLIDs above it are discarded.
    pub linear_fdb_top: u16,
    pub default_port: u8,
    pub default_mcast_primary_port: u8,
    pub default_mcast_not_primary_port: u8,
    /// 5 bits: the head-of-queue lifetime exponent.
    pub life_time_value: u8,
    /// Set by the switch when a port's state changed; the SM clears it by writing 1.
    pub port_state_change: bool,
    /// 2 bits.
    pub optimized_sl2vl_programming: u8,
    pub lids_per_port: u16,
    /// P_Keys the switch can enforce on its external ports (RO).
    pub partition_enforcement_cap: u16,
    pub inbound_enforcement_cap: bool,
    pub outbound_enforcement_cap: bool,
    pub filter_raw_inbound_cap: bool,
    pub filter_raw_outbound_cap: bool,
    /// Port 0 is an enhanced port 0 (RO).
    pub enhanced_port0: bool,
    /// The highest MLID the MFT forwards (0xBFFF and below: none).
    pub multicast_fdb_top: u16,
}

impl SwitchInfoRepr {
    pub const LEN: usize = 20;

    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        Ok(SwitchInfoRepr {
            linear_fdb_cap: be16(&d[0..2]),
            random_fdb_cap: be16(&d[2..4]),
            multicast_fdb_cap: be16(&d[4..6]),
            linear_fdb_top: be16(&d[6..8]),
            default_port: d[8],
            default_mcast_primary_port: d[9],
            default_mcast_not_primary_port: d[10],
            life_time_value: d[11] >> 3,
            port_state_change: d[11] & 0x04 != 0,
            optimized_sl2vl_programming: d[11] & 0x03,
            lids_per_port: be16(&d[12..14]),
            partition_enforcement_cap: be16(&d[14..16]),
            inbound_enforcement_cap: d[16] & 0x80 != 0,
            outbound_enforcement_cap: d[16] & 0x40 != 0,
            filter_raw_inbound_cap: d[16] & 0x20 != 0,
            filter_raw_outbound_cap: d[16] & 0x10 != 0,
            enhanced_port0: d[16] & 0x08 != 0,
            multicast_fdb_top: be16(&d[18..20]),
        })
    }

    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        if self.life_time_value > 0x1f {
            return Err(MadError::FieldRange("SwitchInfo:LifeTimeValue"));
        }
        if self.optimized_sl2vl_programming > 3 {
            return Err(MadError::FieldRange(
                "SwitchInfo:OptimizedSLtoVLMappingProgramming",
            ));
        }
        set_be16(&mut d[0..2], self.linear_fdb_cap);
        set_be16(&mut d[2..4], self.random_fdb_cap);
        set_be16(&mut d[4..6], self.multicast_fdb_cap);
        set_be16(&mut d[6..8], self.linear_fdb_top);
        d[8] = self.default_port;
        d[9] = self.default_mcast_primary_port;
        d[10] = self.default_mcast_not_primary_port;
        d[11] = self.life_time_value << 3
            | u8::from(self.port_state_change) << 2
            | self.optimized_sl2vl_programming;
        set_be16(&mut d[12..14], self.lids_per_port);
        set_be16(&mut d[14..16], self.partition_enforcement_cap);
        d[16] = u8::from(self.inbound_enforcement_cap) << 7
            | u8::from(self.outbound_enforcement_cap) << 6
            | u8::from(self.filter_raw_inbound_cap) << 5
            | u8::from(self.filter_raw_outbound_cap) << 4
            | u8::from(self.enhanced_port0) << 3;
        d[17] = 0;
        set_be16(&mut d[18..20], self.multicast_fdb_top);
        Ok(())
    }
}

/// One LinearForwardingTable block (0x0019): the egress port of 64 consecutive
/// LIDs, LID `block * 64 + i` at byte `i`; the modifier is the block number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LftBlock(pub [u8; LFT_BLOCK_LIDS]);

impl LftBlock {
    pub const LEN: usize = SMP_DATA_LEN;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut b = [0u8; LFT_BLOCK_LIDS];
        b.copy_from_slice(&d[..Self::LEN]);
        Ok(LftBlock(b))
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        d[..Self::LEN].copy_from_slice(&self.0);
        Ok(())
    }
}

/// One MulticastForwardingTable block (0x001B): for 32 consecutive MLIDs, a 16-bit
/// mask of ports `position * 16 + bit` (big-endian, bit 0 the lowest port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MftBlock(pub [u16; MFT_BLOCK_MLIDS]);

impl MftBlock {
    pub const LEN: usize = SMP_DATA_LEN;
    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        check(d, Self::LEN)?;
        let mut b = [0u16; MFT_BLOCK_MLIDS];
        for (i, v) in b.iter_mut().enumerate() {
            *v = be16(&d[2 * i..2 * i + 2]);
        }
        Ok(MftBlock(b))
    }
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        check(d, Self::LEN)?;
        for (i, v) in self.0.iter().enumerate() {
            set_be16(&mut d[2 * i..2 * i + 2], *v);
        }
        Ok(())
    }
}

/// The MulticastForwardingTable modifier (IBA 14.2.5.12): bits 31..28 the port
/// position (ports `position * 16 ..`), bits 8..0 the block (MLIDs `0xC000 + block
/// * 32 ..`); the bits between are reserved. OpenSM builds it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MftModifier {
    pub position: u8,
    pub block: u16,
}

impl MftModifier {
    pub fn parse(attr_mod: u32) -> MftModifier {
        MftModifier {
            position: (attr_mod >> 28) as u8,
            block: (attr_mod & 0x1ff) as u16,
        }
    }
    pub fn to_u32(self) -> u32 {
        (u32::from(self.position & 0xf) << 28) | u32::from(self.block & 0x1ff)
    }
}
