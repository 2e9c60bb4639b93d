//! PortInfo (attribute 0x0015, IBA 14.2.5.6): 64 bytes, every field.
//!
//! The bit positions are the ones libibmad's `fields.c` reads (`IB_PORT_*_F`, true
//! bit offsets from the start of the attribute, most significant bit first): LID at
//! bit 128, PortState at 260, M_KeyProtectBits at 272, LMC at 277, NeighborMTU at
//! 288, HOQLife at 339, SubnetTimeOut at 411, RespTimeValue at 419, LinkRoundTrip
//! latency at 456; CapabilityMask2 and the extended speeds (IBA 1.2.1+) after it.

use super::MadError;
use crate::wire::field::{be16, be24, be32, be64, set_be16, set_be24, set_be32, set_be64};

/// PortInfo:PortState (IBA 14.2.5.6; the logical port state machine of IBA 7.2).
pub mod port_state {
    /// In a SubnSet: leave the state as it is.
    pub const NO_CHANGE: u8 = 0;
    pub const DOWN: u8 = 1;
    pub const INIT: u8 = 2;
    pub const ARMED: u8 = 3;
    pub const ACTIVE: u8 = 4;
}

/// PortInfo:PortPhysicalState (IBA 14.2.5.6; the physical state machine of IBA 5.6).
pub mod phys_state {
    pub const NO_CHANGE: u8 = 0;
    pub const SLEEP: u8 = 1;
    pub const POLLING: u8 = 2;
    pub const DISABLED: u8 = 3;
    pub const PORT_CONFIGURATION_TRAINING: u8 = 4;
    pub const LINK_UP: u8 = 5;
    pub const LINK_ERROR_RECOVERY: u8 = 6;
    pub const PHY_TEST: u8 = 7;
}

/// PortInfo:CapabilityMask bits (IBA 14.2.5.6; Linux `ib_port_cap_flags`).
pub mod cap {
    pub const IS_SM: u32 = 1 << 1;
    pub const IS_NOTICE_SUPPORTED: u32 = 1 << 2;
    pub const IS_TRAP_SUPPORTED: u32 = 1 << 3;
    pub const IS_AUTOMATIC_MIGRATION_SUPPORTED: u32 = 1 << 5;
    pub const IS_SL_MAPPING_SUPPORTED: u32 = 1 << 6;
    pub const IS_SM_DISABLED: u32 = 1 << 10;
    pub const IS_SYSTEM_IMAGE_GUID_SUPPORTED: u32 = 1 << 11;
    pub const IS_CM_SUPPORTED: u32 = 1 << 16;
    pub const IS_SNMP_TUNNELING_SUPPORTED: u32 = 1 << 17;
    pub const IS_DEVICE_MANAGEMENT_SUPPORTED: u32 = 1 << 19;
    pub const IS_VENDOR_CLASS_SUPPORTED: u32 = 1 << 20;
    /// The port sends trap 144 when its CapabilityMask changes.
    pub const IS_CAPABILITY_MASK_NOTICE_SUPPORTED: u32 = 1 << 22;
    pub const IS_BOOT_MANAGEMENT_SUPPORTED: u32 = 1 << 23;
    pub const IS_CLIENT_REREGISTRATION_SUPPORTED: u32 = 1 << 25;
    /// The port sends trap 144 with OtherLocalChanges for the changes its
    /// ChangeFlags name (NodeDescription; IBA 1.2.1; Linux
    /// `IB_PORT_OTHER_LOCAL_CHANGES_SUP`).
    pub const IS_OTHER_LOCAL_CHANGES_NOTICE_SUPPORTED: u32 = 1 << 26;

    /// The bits the host sets and clears (ib_core's `ib_modify_port`
    /// set/clr_port_cap_mask; mlx4's SET_PORT, mlx5's vport context): they say
    /// which agents run in software on the node, not what the port's hardware
    /// does. ib_umad's issm sets IsSM while an SM holds it open, ib_cm sets
    /// IsCommunicationManagementSupported; the others are the management
    /// classes a host agent may serve (IsSMdisabled: an SM present but
    /// disabled). Every other bit is the SMA's own.
    pub const HOST_SETTABLE: u32 = IS_SM
        | IS_SM_DISABLED
        | IS_CM_SUPPORTED
        | IS_SNMP_TUNNELING_SUPPORTED
        | IS_DEVICE_MANAGEMENT_SUPPORTED
        | IS_VENDOR_CLASS_SUPPORTED
        | IS_BOOT_MANAGEMENT_SUPPORTED;
}

/// Every PortInfo field (IBA 14.2.5.6), in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PortInfoRepr {
    pub mkey: u64,
    pub gid_prefix: u64,
    pub lid: u16,
    pub master_sm_lid: u16,
    pub capability_mask: u32,
    pub diag_code: u16,
    /// Seconds; 0 means the lease never expires (AD-12).
    pub mkey_lease_period: u16,
    pub local_port_num: u8,
    pub link_width_enabled: u8,
    pub link_width_supported: u8,
    pub link_width_active: u8,
    /// 4 bits.
    pub link_speed_supported: u8,
    /// 4 bits ([`port_state`]).
    pub port_state: u8,
    /// 4 bits ([`phys_state`]).
    pub port_physical_state: u8,
    /// 4 bits: 0 no change, 1 sleep, 2 polling.
    pub link_down_default_state: u8,
    /// 2 bits (IBA 14.2.4.1, AD-12).
    pub mkey_protect_bits: u8,
    /// 3 bits.
    pub lmc: u8,
    /// 4 bits.
    pub link_speed_active: u8,
    /// 4 bits.
    pub link_speed_enabled: u8,
    /// 4 bits, the IBA MTU code (1 = 256 .. 5 = 4096).
    pub neighbor_mtu: u8,
    /// 4 bits.
    pub master_sm_sl: u8,
    /// 4 bits: 1 VL0, 2 VL0-1, 3 VL0-3, 4 VL0-7, 5 VL0-14.
    pub vl_cap: u8,
    /// 4 bits.
    pub init_type: u8,
    pub vl_high_limit: u8,
    pub vl_arbitration_high_cap: u8,
    pub vl_arbitration_low_cap: u8,
    /// 4 bits.
    pub init_type_reply: u8,
    /// 4 bits, MTU code.
    pub mtu_cap: u8,
    /// 3 bits.
    pub vl_stall_count: u8,
    /// 5 bits.
    pub hoq_life: u8,
    /// 4 bits, coded as `vl_cap`.
    pub operational_vls: u8,
    pub partition_enforcement_inbound: bool,
    pub partition_enforcement_outbound: bool,
    pub filter_raw_inbound: bool,
    pub filter_raw_outbound: bool,
    pub mkey_violations: u16,
    pub pkey_violations: u16,
    pub qkey_violations: u16,
    pub guid_cap: u8,
    pub client_reregister: bool,
    /// 2 bits.
    pub multicast_pkey_trap_suppression: u8,
    /// 5 bits: 4.096 us * 2^SubnetTimeOut.
    pub subnet_timeout: u8,
    /// 5 bits.
    pub resp_time_value: u8,
    /// 4 bits (a threshold).
    pub local_phy_errors: u8,
    /// 4 bits (a threshold).
    pub overrun_errors: u8,
    pub max_credit_hint: u16,
    /// 24 bits.
    pub link_round_trip_latency: u32,
    pub capability_mask2: u16,
    /// 4 bits.
    pub link_speed_ext_active: u8,
    /// 4 bits.
    pub link_speed_ext_supported: u8,
    /// 5 bits.
    pub link_speed_ext_enabled: u8,
}

fn hi(b: u8) -> u8 {
    b >> 4
}
fn lo(b: u8) -> u8 {
    b & 0xf
}
fn nib(h: u8, l: u8) -> u8 {
    (h << 4) | (l & 0xf)
}

impl PortInfoRepr {
    pub const LEN: usize = 64;

    pub fn parse(d: &[u8]) -> Result<Self, MadError> {
        if d.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(PortInfoRepr {
            mkey: be64(&d[0..8]),
            gid_prefix: be64(&d[8..16]),
            lid: be16(&d[16..18]),
            master_sm_lid: be16(&d[18..20]),
            capability_mask: be32(&d[20..24]),
            diag_code: be16(&d[24..26]),
            mkey_lease_period: be16(&d[26..28]),
            local_port_num: d[28],
            link_width_enabled: d[29],
            link_width_supported: d[30],
            link_width_active: d[31],
            link_speed_supported: hi(d[32]),
            port_state: lo(d[32]),
            port_physical_state: hi(d[33]),
            link_down_default_state: lo(d[33]),
            mkey_protect_bits: d[34] >> 6,
            lmc: d[34] & 7,
            link_speed_active: hi(d[35]),
            link_speed_enabled: lo(d[35]),
            neighbor_mtu: hi(d[36]),
            master_sm_sl: lo(d[36]),
            vl_cap: hi(d[37]),
            init_type: lo(d[37]),
            vl_high_limit: d[38],
            vl_arbitration_high_cap: d[39],
            vl_arbitration_low_cap: d[40],
            init_type_reply: hi(d[41]),
            mtu_cap: lo(d[41]),
            vl_stall_count: d[42] >> 5,
            hoq_life: d[42] & 0x1f,
            operational_vls: hi(d[43]),
            partition_enforcement_inbound: d[43] & 8 != 0,
            partition_enforcement_outbound: d[43] & 4 != 0,
            filter_raw_inbound: d[43] & 2 != 0,
            filter_raw_outbound: d[43] & 1 != 0,
            mkey_violations: be16(&d[44..46]),
            pkey_violations: be16(&d[46..48]),
            qkey_violations: be16(&d[48..50]),
            guid_cap: d[50],
            client_reregister: d[51] & 0x80 != 0,
            multicast_pkey_trap_suppression: (d[51] >> 5) & 3,
            subnet_timeout: d[51] & 0x1f,
            resp_time_value: d[52] & 0x1f,
            local_phy_errors: hi(d[53]),
            overrun_errors: lo(d[53]),
            max_credit_hint: be16(&d[54..56]),
            link_round_trip_latency: be24(&d[57..60]),
            capability_mask2: be16(&d[60..62]),
            link_speed_ext_active: hi(d[62]),
            link_speed_ext_supported: lo(d[62]),
            link_speed_ext_enabled: d[63] & 0x1f,
        })
    }

    /// Writes all 64 bytes (reserved bits as 0). Fails if a field does not fit its width.
    pub fn emit(&self, d: &mut [u8]) -> Result<(), MadError> {
        if d.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        let nibbles = [
            self.link_speed_supported,
            self.port_state,
            self.port_physical_state,
            self.link_down_default_state,
            self.link_speed_active,
            self.link_speed_enabled,
            self.neighbor_mtu,
            self.master_sm_sl,
            self.vl_cap,
            self.init_type,
            self.init_type_reply,
            self.mtu_cap,
            self.operational_vls,
            self.local_phy_errors,
            self.overrun_errors,
            self.link_speed_ext_active,
            self.link_speed_ext_supported,
        ];
        if nibbles.iter().any(|v| *v > 15)
            || self.mkey_protect_bits > 3
            || self.lmc > 7
            || self.vl_stall_count > 7
            || self.hoq_life > 31
            || self.multicast_pkey_trap_suppression > 3
            || self.subnet_timeout > 31
            || self.resp_time_value > 31
            || self.link_round_trip_latency > 0xff_ffff
            || self.link_speed_ext_enabled > 31
        {
            return Err(MadError::FieldRange("PortInfo"));
        }
        d[..Self::LEN].fill(0);
        set_be64(&mut d[0..8], self.mkey);
        set_be64(&mut d[8..16], self.gid_prefix);
        set_be16(&mut d[16..18], self.lid);
        set_be16(&mut d[18..20], self.master_sm_lid);
        set_be32(&mut d[20..24], self.capability_mask);
        set_be16(&mut d[24..26], self.diag_code);
        set_be16(&mut d[26..28], self.mkey_lease_period);
        d[28] = self.local_port_num;
        d[29] = self.link_width_enabled;
        d[30] = self.link_width_supported;
        d[31] = self.link_width_active;
        d[32] = nib(self.link_speed_supported, self.port_state);
        d[33] = nib(self.port_physical_state, self.link_down_default_state);
        d[34] = (self.mkey_protect_bits << 6) | self.lmc;
        d[35] = nib(self.link_speed_active, self.link_speed_enabled);
        d[36] = nib(self.neighbor_mtu, self.master_sm_sl);
        d[37] = nib(self.vl_cap, self.init_type);
        d[38] = self.vl_high_limit;
        d[39] = self.vl_arbitration_high_cap;
        d[40] = self.vl_arbitration_low_cap;
        d[41] = nib(self.init_type_reply, self.mtu_cap);
        d[42] = (self.vl_stall_count << 5) | self.hoq_life;
        d[43] = (self.operational_vls << 4)
            | (u8::from(self.partition_enforcement_inbound) << 3)
            | (u8::from(self.partition_enforcement_outbound) << 2)
            | (u8::from(self.filter_raw_inbound) << 1)
            | u8::from(self.filter_raw_outbound);
        set_be16(&mut d[44..46], self.mkey_violations);
        set_be16(&mut d[46..48], self.pkey_violations);
        set_be16(&mut d[48..50], self.qkey_violations);
        d[50] = self.guid_cap;
        d[51] = (u8::from(self.client_reregister) << 7)
            | (self.multicast_pkey_trap_suppression << 5)
            | self.subnet_timeout;
        d[52] = self.resp_time_value;
        d[53] = nib(self.local_phy_errors, self.overrun_errors);
        set_be16(&mut d[54..56], self.max_credit_hint);
        set_be24(&mut d[57..60], self.link_round_trip_latency);
        set_be16(&mut d[60..62], self.capability_mask2);
        d[62] = nib(self.link_speed_ext_active, self.link_speed_ext_supported);
        d[63] = self.link_speed_ext_enabled;
        Ok(())
    }
}
