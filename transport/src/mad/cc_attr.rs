//! The congestion control class's layout and attributes (IBA Annex A10.4; issue
//! 31 item 2): class 0x21 (`IB_MCLASS_CC`), class version 2, as OpenSM's
//! `include/iba/ib_types.h` lays them out (`ib_cc_mad_t`: the common header, the
//! CC_Key at 24, 32 bytes of log data at 32, 192 bytes of management data at 64;
//! the attributes `ib_cong_info_t` .. `ib_time_stamp_t`). Every value here is
//! `parse` / `emit` over the attribute's bytes, as [`super::attr`].

use super::MAD_LEN;
use crate::wire::field::{be16, be32, be64, set_be16, set_be32, set_be64};

/// The congestion control class (IBA 13.4.4; `IB_MCLASS_CC`).
pub const CLASS_CC: u8 = 0x21;
/// Its class version: OpenSM binds and sends version 2 (`osm_congestion_control_bind`).
pub const CC_CLASS_VERSION: u8 = 2;

/// Byte offsets of a CC MAD (`ib_cc_mad_t`).
pub const CC_KEY: core::ops::Range<usize> = 24..32;
/// Where CongestionLog starts (it spans the log and management data).
pub const LOG_DATA: usize = 32;
/// Where every other attribute starts (`ib_cc_mad_get_mgt_data_ptr`).
pub const MGT_DATA: usize = 64;
/// The management data's length (`IB_CC_MGT_DATA_SIZE`).
pub const MGT_LEN: usize = MAD_LEN - MGT_DATA;

/// Attribute IDs (A10.4.3; `IB_MAD_ATTR_CONG_INFO` ..).
pub mod id {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const NOTICE: u16 = 0x0002;
    pub const CONGESTION_INFO: u16 = 0x0011;
    pub const CONGESTION_KEY_INFO: u16 = 0x0012;
    pub const CONGESTION_LOG: u16 = 0x0013;
    pub const SWITCH_CONGESTION_SETTING: u16 = 0x0014;
    pub const SWITCH_PORT_CONGESTION_SETTING: u16 = 0x0015;
    pub const CA_CONGESTION_SETTING: u16 = 0x0016;
    pub const CONGESTION_CONTROL_TABLE: u16 = 0x0017;
    pub const TIME_STAMP: u16 = 0x0018;
}

/// CongestionInfo (A10.4.3.3; `ib_cong_info_t`): capabilities and the number of
/// 64-entry blocks of the CongestionControlTable (0 on a switch).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CongestionInfo {
    pub cong_info: u8,
    pub control_table_cap: u8,
}

impl CongestionInfo {
    pub fn parse(d: &[u8; MGT_LEN]) -> CongestionInfo {
        CongestionInfo {
            cong_info: d[0],
            control_table_cap: d[2],
        }
    }
    pub fn emit(&self, d: &mut [u8; MGT_LEN]) {
        d.fill(0);
        d[0] = self.cong_info;
        d[2] = self.control_table_cap;
    }
}

/// CongestionKeyInfo (A10.4.3.4; `ib_cong_key_info_t`): the CC_Key, its protect
/// bit (the top bit of the next 16), lease period (seconds, 0 = forever) and the
/// violations counter (read-only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CongestionKeyInfo {
    pub cc_key: u64,
    pub protect: bool,
    pub lease_period: u16,
    pub violations: u16,
}

impl CongestionKeyInfo {
    pub fn parse(d: &[u8; MGT_LEN]) -> CongestionKeyInfo {
        CongestionKeyInfo {
            cc_key: be64(&d[0..8]),
            protect: d[8] & 0x80 != 0,
            lease_period: be16(&d[10..12]),
            violations: be16(&d[12..14]),
        }
    }
    pub fn emit(&self, d: &mut [u8; MGT_LEN]) {
        d.fill(0);
        set_be64(&mut d[0..8], self.cc_key);
        d[8] = u8::from(self.protect) << 7;
        set_be16(&mut d[10..12], self.lease_period);
        set_be16(&mut d[12..14], self.violations);
    }
}

/// The bytes of a 256-bit port mask (victim / credit masks, the log's port map).
pub const PORT_MASK_LEN: usize = 32;

/// Whether port `p`'s bit is set in a 256-bit mask: bit `p` counts from the
/// least significant bit of the last byte (`ib_types.h`: "bits [254..1] - ports
/// [254..1]", the whole mask one big-endian number).
pub fn port_bit(mask: &[u8; PORT_MASK_LEN], p: u8) -> bool {
    let byte = PORT_MASK_LEN - 1 - usize::from(p / 8);
    mask[byte] & (1 << (p % 8)) != 0
}

/// Sets port `p`'s bit of a 256-bit mask.
pub fn set_port_bit(mask: &mut [u8; PORT_MASK_LEN], p: u8) {
    let byte = PORT_MASK_LEN - 1 - usize::from(p / 8);
    mask[byte] |= 1 << (p % 8);
}

/// SwitchCongestionSetting:Control_Map bits (A10.4.3.6): which parts of a Set
/// are applied.
pub mod sw_control_map {
    pub const VICTIM_MASK: u32 = 1 << 0;
    pub const CREDIT_MASK: u32 = 1 << 1;
    pub const THRESHOLD_PACKET_SIZE: u32 = 1 << 2;
    pub const CS_THRESHOLD_RETURN_DELAY: u32 = 1 << 3;
    pub const MARKING_RATE: u32 = 1 << 4;
}

/// SwitchCongestionSetting (A10.4.3.6; `ib_sw_cong_setting_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SwitchCongestionSetting {
    pub control_map: u32,
    pub victim_mask: [u8; PORT_MASK_LEN],
    pub credit_mask: [u8; PORT_MASK_LEN],
    /// 4 bits: 0 marks nothing, 15 marks most aggressively.
    pub threshold: u8,
    /// 64-byte units: smaller packets are never marked.
    pub packet_size: u8,
    /// 4 bits.
    pub cs_threshold: u8,
    pub cs_return_delay: u16,
    /// The mean number of eligible packets between two marked ones.
    pub marking_rate: u16,
}

impl SwitchCongestionSetting {
    pub fn parse(d: &[u8; MGT_LEN]) -> SwitchCongestionSetting {
        let mut v = [0u8; PORT_MASK_LEN];
        let mut c = [0u8; PORT_MASK_LEN];
        v.copy_from_slice(&d[4..36]);
        c.copy_from_slice(&d[36..68]);
        SwitchCongestionSetting {
            control_map: be32(&d[0..4]),
            victim_mask: v,
            credit_mask: c,
            threshold: d[68] >> 4,
            packet_size: d[69],
            cs_threshold: d[70] >> 4,
            cs_return_delay: be16(&d[72..74]),
            marking_rate: be16(&d[74..76]),
        }
    }
    pub fn emit(&self, d: &mut [u8; MGT_LEN]) {
        d.fill(0);
        set_be32(&mut d[0..4], self.control_map);
        d[4..36].copy_from_slice(&self.victim_mask);
        d[36..68].copy_from_slice(&self.credit_mask);
        d[68] = (self.threshold & 0xf) << 4;
        d[69] = self.packet_size;
        d[70] = (self.cs_threshold & 0xf) << 4;
        set_be16(&mut d[72..74], self.cs_return_delay);
        set_be16(&mut d[74..76], self.marking_rate);
    }

    /// Applies the parts of `new` its Control_Map names (A10.4.3.6); the
    /// stored Control_Map is the union of what was ever set.
    pub fn apply(&mut self, new: &SwitchCongestionSetting) {
        let m = new.control_map;
        if m & sw_control_map::VICTIM_MASK != 0 {
            self.victim_mask = new.victim_mask;
        }
        if m & sw_control_map::CREDIT_MASK != 0 {
            self.credit_mask = new.credit_mask;
        }
        if m & sw_control_map::THRESHOLD_PACKET_SIZE != 0 {
            self.threshold = new.threshold & 0xf;
            self.packet_size = new.packet_size;
        }
        if m & sw_control_map::CS_THRESHOLD_RETURN_DELAY != 0 {
            self.cs_threshold = new.cs_threshold & 0xf;
            self.cs_return_delay = new.cs_return_delay;
        }
        if m & sw_control_map::MARKING_RATE != 0 {
            self.marking_rate = new.marking_rate;
        }
        self.control_map |= m & 0x1f;
    }
}

/// One SwitchPortCongestionSettingElement (A10.4.3.7;
/// `ib_sw_port_cong_setting_element_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SwitchPortCongestionElement {
    pub valid: bool,
    /// false: congestion control parameters; true: credit starvation.
    pub control_type: bool,
    /// 4 bits.
    pub threshold: u8,
    pub packet_size: u8,
    /// Control type 0: the port's Marking_Rate.
    pub cong_parm: u16,
}

/// The ports one SwitchPortCongestionSetting block holds (attribute modifier:
/// the block, ports `32 * block ..`).
pub const SW_PORT_BLOCK: usize = 32;

impl SwitchPortCongestionElement {
    pub fn parse(d: &[u8]) -> SwitchPortCongestionElement {
        SwitchPortCongestionElement {
            valid: d[0] & 0x80 != 0,
            control_type: d[0] & 0x40 != 0,
            threshold: d[0] & 0xf,
            packet_size: d[1],
            cong_parm: be16(&d[2..4]),
        }
    }
    pub fn emit(&self, d: &mut [u8]) {
        d[0] =
            u8::from(self.valid) << 7 | u8::from(self.control_type) << 6 | (self.threshold & 0xf);
        d[1] = self.packet_size;
        set_be16(&mut d[2..4], self.cong_parm);
    }
}

/// CACongestionSetting:Port_Control bit 0 (A10.4.3.8): 0 QP based, 1 SL/port based.
pub const PORT_CONTROL_SL_BASED: u16 = 1;
/// The SLs (one CACongestionEntry each).
pub const CA_ENTRIES: usize = 16;

/// One CACongestionEntry (A10.4.3.8; `ib_ca_cong_entry_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CaCongestionEntry {
    /// 1.024 us units: each time it runs out, CCTI goes down by one.
    pub ccti_timer: u16,
    /// Added to CCTI per BECN.
    pub ccti_increase: u8,
    /// CCTI at which the CA logs an event.
    pub trigger_threshold: u8,
    /// CCTI's floor.
    pub ccti_min: u8,
}

/// CACongestionSetting (A10.4.3.8; `ib_ca_cong_setting_t`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CaCongestionSetting {
    pub port_control: u16,
    /// One bit per SL: which entries a Set changes.
    pub control_map: u16,
    pub entries: [CaCongestionEntry; CA_ENTRIES],
}

impl CaCongestionSetting {
    pub fn parse(d: &[u8; MGT_LEN]) -> CaCongestionSetting {
        let mut entries = [CaCongestionEntry::default(); CA_ENTRIES];
        for (i, e) in entries.iter_mut().enumerate() {
            let b = &d[4 + 8 * i..12 + 8 * i];
            *e = CaCongestionEntry {
                ccti_timer: be16(&b[0..2]),
                ccti_increase: b[2],
                trigger_threshold: b[3],
                ccti_min: b[4],
            };
        }
        CaCongestionSetting {
            port_control: be16(&d[0..2]),
            control_map: be16(&d[2..4]),
            entries,
        }
    }
    pub fn emit(&self, d: &mut [u8; MGT_LEN]) {
        d.fill(0);
        set_be16(&mut d[0..2], self.port_control);
        set_be16(&mut d[2..4], self.control_map);
        for (i, e) in self.entries.iter().enumerate() {
            let b = &mut d[4 + 8 * i..12 + 8 * i];
            set_be16(&mut b[0..2], e.ccti_timer);
            b[2] = e.ccti_increase;
            b[3] = e.trigger_threshold;
            b[4] = e.ccti_min;
        }
    }

    /// Applies a Set: Port_Control, and the entries of the SLs its
    /// Control_Map names (A10.4.3.8).
    pub fn apply(&mut self, new: &CaCongestionSetting) {
        self.port_control = new.port_control & PORT_CONTROL_SL_BASED;
        for sl in 0..CA_ENTRIES {
            if new.control_map & (1 << sl) != 0 {
                self.entries[sl] = new.entries[sl];
            }
        }
        self.control_map |= new.control_map;
    }
}

/// One CongestionControlTableEntry (A10.4.3.9; `ib_cc_tbl_entry_t`): the
/// inter-packet delay is `CCT_Multiplier << CCT_Shift` (A10.3.1.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CctEntry {
    /// 2 bits.
    pub shift: u8,
    /// 14 bits.
    pub multiplier: u16,
}

impl CctEntry {
    pub fn from_word(w: u16) -> CctEntry {
        CctEntry {
            shift: (w >> 14) as u8,
            multiplier: w & 0x3fff,
        }
    }
    pub fn word(&self) -> u16 {
        u16::from(self.shift & 3) << 14 | (self.multiplier & 0x3fff)
    }
    /// The injection rate delay this entry gives, in the table's units.
    pub fn delay(&self) -> u32 {
        u32::from(self.multiplier & 0x3fff) << (self.shift & 3)
    }
}

/// Entries of one CongestionControlTable block (attribute modifier: the block).
pub const CCT_BLOCK: usize = 64;

/// One CongestionControlTable block (A10.4.3.9; `ib_cc_tbl_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CctBlock {
    pub ccti_limit: u16,
    pub entries: [CctEntry; CCT_BLOCK],
}

impl Default for CctBlock {
    fn default() -> CctBlock {
        CctBlock {
            ccti_limit: 0,
            entries: [CctEntry::default(); CCT_BLOCK],
        }
    }
}

impl CctBlock {
    pub fn parse(d: &[u8; MGT_LEN]) -> CctBlock {
        let mut entries = [CctEntry::default(); CCT_BLOCK];
        for (i, e) in entries.iter_mut().enumerate() {
            *e = CctEntry::from_word(be16(&d[4 + 2 * i..6 + 2 * i]));
        }
        CctBlock {
            ccti_limit: be16(&d[0..2]),
            entries,
        }
    }
    pub fn emit(&self, d: &mut [u8; MGT_LEN]) {
        d.fill(0);
        set_be16(&mut d[0..2], self.ccti_limit);
        for (i, e) in self.entries.iter().enumerate() {
            set_be16(&mut d[4 + 2 * i..6 + 2 * i], e.word());
        }
    }
}

/// CongestionLog:LogType (A10.4.3.5).
pub mod log_type {
    pub const SWITCH: u8 = 1;
    pub const CA: u8 = 2;
}

/// One switch CongestionLogEvent (`ib_cong_log_event_sw_t`): a packet the
/// switch marked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SwitchLogEvent {
    pub slid: u16,
    pub dlid: u16,
    pub sl: u8,
    pub time_stamp: u32,
}

/// One CA CongestionLogEvent (`ib_cong_log_event_ca_t`): a QP whose CCTI
/// reached the SL's Trigger_Threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct CaLogEvent {
    pub local_qp: u32,
    pub remote_qp: u32,
    pub sl: u8,
    pub service_type: u8,
    pub remote_lid: u16,
    pub time_stamp: u32,
}

/// The events a switch log holds (`entry_list[15]`).
pub const SWITCH_LOG_EVENTS: usize = 15;
/// The events a CA log holds (`log_event[13]`).
pub const CA_LOG_EVENTS: usize = 13;
/// The bytes CongestionLog spans (log data and management data).
pub const LOG_LEN: usize = MAD_LEN - LOG_DATA;

/// A switch's CongestionLog (A10.4.3.5), written from [`LOG_DATA`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchLog {
    pub event_counter: u16,
    pub time_stamp: u32,
    pub port_map: [u8; PORT_MASK_LEN],
    /// Most recent first, at most [`SWITCH_LOG_EVENTS`].
    pub events: Vec<SwitchLogEvent>,
}

impl SwitchLog {
    pub fn emit(&self, d: &mut [u8; LOG_LEN]) {
        d.fill(0);
        d[0] = log_type::SWITCH;
        set_be16(&mut d[2..4], self.event_counter);
        set_be32(&mut d[4..8], self.time_stamp);
        d[8..40].copy_from_slice(&self.port_map);
        for (i, e) in self.events.iter().take(SWITCH_LOG_EVENTS).enumerate() {
            let b = &mut d[40 + 12 * i..52 + 12 * i];
            set_be16(&mut b[0..2], e.slid);
            set_be16(&mut b[2..4], e.dlid);
            set_be32(&mut b[4..8], u32::from(e.sl & 0xf) << 28);
            set_be32(&mut b[8..12], e.time_stamp);
        }
    }
}

/// A CA's CongestionLog (A10.4.3.5), written from [`LOG_DATA`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaLog {
    pub event_counter: u16,
    /// One bit per SL that logged an event.
    pub event_map: u16,
    pub time_stamp: u32,
    /// Most recent first, at most [`CA_LOG_EVENTS`].
    pub events: Vec<CaLogEvent>,
}

impl CaLog {
    pub fn emit(&self, d: &mut [u8; LOG_LEN]) {
        d.fill(0);
        d[0] = log_type::CA;
        set_be16(&mut d[2..4], self.event_counter);
        set_be16(&mut d[4..6], self.event_map);
        set_be32(&mut d[8..12], self.time_stamp);
        for (i, e) in self.events.iter().take(CA_LOG_EVENTS).enumerate() {
            let b = &mut d[12 + 16 * i..28 + 16 * i];
            set_be32(&mut b[0..4], (e.local_qp & 0xff_ffff) << 8);
            set_be32(
                &mut b[4..8],
                (e.remote_qp & 0xff_ffff) << 8
                    | u32::from(e.sl & 0xf) << 4
                    | u32::from(e.service_type & 0xf),
            );
            set_be16(&mut b[8..10], e.remote_lid);
            set_be32(&mut b[12..16], e.time_stamp);
        }
    }
}

/// TimeStamp (A10.4.3.10): a free-running clock in 1.024 us units.
pub fn time_stamp(now_ns: u64) -> u32 {
    (now_ns / 1024) as u32
}
