//! The Congestion Control Agent of a port (IBA Annex A10.4; issue 31 item 2):
//! the congestion control class (0x21) on QP1, sans-IO, for a channel adapter
//! port or a switch (port 0). OpenSM's congestion control manager
//! (`osm_congestion_control.c`, `congestion_control TRUE`) Sets
//! SwitchCongestionSetting on every switch and CACongestionSetting and the
//! CongestionControlTable (attribute modifier: the 64-entry block) on every CA
//! port, with its CC_Key; a Get of CongestionInfo, CongestionKeyInfo,
//! CongestionLog, the settings and TimeStamp reads them back.
//!
//! The CC_Key check (A10.4.1) runs as the B_Key's ([`super::bma`]) and the
//! M_Key's: a request matches when the port's CC_Key is 0 or the request
//! carries it; a Get that does not match still goes on while
//! CC_KeyProtectBit is clear (CongestionKeyInfo then reads the key as 0); any
//! other request that does not match gets no response, counts
//! CC_KeyViolations (saturating) and starts the lease, whose end clears the
//! protect bit. The bad-CC_Key notice is optional and not sent (no trap
//! destination: ClassPortInfo Set is refused).
//!
//! A Get or Set of an attribute this kind of node does not have (a switch's
//! CACongestionSetting, a CA's SwitchCongestionSetting) is answered
//! UNSUPPORTED_METHOD_ATTR, as a bad block number or a CCTI_Limit past the
//! table is INVALID_FIELD: OpenSM marks a port whose answer carries either
//! of the first as `cc_unavailable_flag` and leaves it alone.

use super::cc_attr::*;
use super::header::{emit_class_port_info, method, status, MadHeaderRepr, BASE_VERSION};
use super::lease::LeaseTimer;
use super::MAD_LEN;
use crate::verbs::Time;
use crate::wire::field::{be64, set_be16};

/// Blocks of 64 entries in a CA's CongestionControlTable: 128 entries, as
/// OpenSM's `cc_cct` option takes at most (`OSM_CCT_ENTRY_MAX`).
pub const CA_CCT_BLOCKS: u8 = 2;

/// Why the agent gave no response (each counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CcDrop {
    /// Not a 256-byte MAD of class 0x21.
    NotCc,
    /// A response or a trap: nothing here asked for it.
    Response,
    /// A bad version in a method that has no response.
    BadVersion,
    /// Failed the CC_Key check (A10.4.1): CC_KeyViolations counted.
    BadCcKey,
    /// A TrapRepress: this agent sends no traps.
    UnmatchedRepress,
}

impl CcDrop {
    /// Every reason, in counter order.
    pub const ALL: [CcDrop; 5] = [
        CcDrop::NotCc,
        CcDrop::Response,
        CcDrop::BadVersion,
        CcDrop::BadCcKey,
        CcDrop::UnmatchedRepress,
    ];
    fn index(self) -> usize {
        CcDrop::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

/// The agent's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CcCounters {
    drops: [u64; CcDrop::ALL.len()],
    /// Responses sent / with a non-zero status.
    pub replies: u64,
    pub error_replies: u64,
    /// CC_Key leases that ran out (protect bit cleared).
    pub lease_expiries: u64,
}

impl CcCounters {
    pub fn drops(&self, why: CcDrop) -> u64 {
        self.drops[why.index()]
    }
}

/// What the agent's node is: a CA port, or a switch with its physical ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcRole {
    Ca,
    Switch { num_ports: u8 },
}

/// The Congestion Control Agent of one port: the settings the manager gave
/// (read by the switch's marker and the CA's congestion control), the
/// CC_Key, the log.
#[derive(Debug, Clone)]
pub struct CcAgent {
    role: CcRole,
    key: CongestionKeyInfo,
    lease: LeaseTimer,
    counters: CcCounters,
    ca: CaCongestionSetting,
    cct: Vec<CctEntry>,
    ccti_limit: u16,
    sw: SwitchCongestionSetting,
    sw_ports: Vec<SwitchPortCongestionElement>,
    sw_log: SwitchLog,
    ca_log: CaLog,
    /// Bumped by every Set that changed a setting, so that a driver applies
    /// them again only when they changed.
    generation: u64,
}

impl CcAgent {
    /// A CA port's agent: no congestion control until a manager (or the fabric
    /// file) gives the settings and the table.
    pub fn ca() -> CcAgent {
        CcAgent::new(CcRole::Ca)
    }

    /// A switch's agent (port 0), for ports 0..=`num_ports`.
    pub fn switch(num_ports: u8) -> CcAgent {
        CcAgent::new(CcRole::Switch { num_ports })
    }

    fn new(role: CcRole) -> CcAgent {
        let (cct, ports) = match role {
            CcRole::Ca => (usize::from(CA_CCT_BLOCKS) * CCT_BLOCK, 0),
            CcRole::Switch { num_ports } => (0, usize::from(num_ports) + 1),
        };
        CcAgent {
            role,
            key: CongestionKeyInfo::default(),
            lease: LeaseTimer::default(),
            counters: CcCounters::default(),
            ca: CaCongestionSetting::default(),
            cct: vec![CctEntry::default(); cct],
            ccti_limit: 0,
            sw: SwitchCongestionSetting::default(),
            sw_ports: vec![SwitchPortCongestionElement::default(); ports],
            sw_log: SwitchLog::default(),
            ca_log: CaLog::default(),
            generation: 0,
        }
    }

    pub fn role(&self) -> CcRole {
        self.role
    }
    pub fn counters(&self) -> &CcCounters {
        &self.counters
    }
    /// The counters by name, as the device's management counters and
    /// `vhca switch`'s report give them: the drops by reason, the responses,
    /// the lease expiries and CC_KeyViolations.
    pub fn named_counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        let mut v: Vec<(&'static str, u64)> = CcDrop::ALL
            .iter()
            .map(|&d| {
                let name = match d {
                    CcDrop::NotCc => "cca_drop_not_cc",
                    CcDrop::Response => "cca_drop_response",
                    CcDrop::BadVersion => "cca_drop_bad_version",
                    CcDrop::BadCcKey => "cca_drop_bad_cc_key",
                    CcDrop::UnmatchedRepress => "cca_drop_unmatched_repress",
                };
                (name, c.drops(d))
            })
            .collect();
        v.extend([
            ("cca_replies", c.replies),
            ("cca_error_replies", c.error_replies),
            ("cca_lease_expiries", c.lease_expiries),
            ("cc_key_violations", u64::from(self.key.violations)),
        ]);
        v
    }
    pub fn key_info(&self) -> &CongestionKeyInfo {
        &self.key
    }
    pub fn generation(&self) -> u64 {
        self.generation
    }
    /// CACongestionSetting as the manager left it.
    pub fn ca_setting(&self) -> &CaCongestionSetting {
        &self.ca
    }
    /// The CongestionControlTable up to CCTI_Limit (empty while the limit is
    /// 0 and entry 0 is 0: no table).
    pub fn cct(&self) -> &[CctEntry] {
        let n = (usize::from(self.ccti_limit) + 1).min(self.cct.len());
        &self.cct[..n]
    }
    pub fn ccti_limit(&self) -> u16 {
        self.ccti_limit
    }
    pub fn switch_setting(&self) -> &SwitchCongestionSetting {
        &self.sw
    }
    /// Port `p`'s SwitchPortCongestionSettingElement, if the switch has it.
    pub fn port_setting(&self, p: u8) -> Option<&SwitchPortCongestionElement> {
        self.sw_ports.get(usize::from(p))
    }

    /// Sets CACongestionSetting without a manager (the fabric file).
    pub fn set_ca_setting(&mut self, s: &CaCongestionSetting) {
        self.ca.apply(s);
        self.generation += 1;
    }
    /// Sets the CongestionControlTable without a manager: `entries` from CCTI 0,
    /// CCTI_Limit the last one (at most the table's size).
    pub fn set_cct(&mut self, entries: &[CctEntry]) {
        let n = entries.len().min(self.cct.len());
        self.cct[..n].copy_from_slice(&entries[..n]);
        self.ccti_limit = n.saturating_sub(1) as u16;
        self.generation += 1;
    }
    /// Sets SwitchCongestionSetting without a manager (the fabric file).
    pub fn set_switch_setting(&mut self, s: &SwitchCongestionSetting) {
        self.sw.apply(s);
        self.generation += 1;
    }

    /// Logs a packet the switch marked on `port` (A10.4.3.5): the port's bit
    /// in the map, the event first in the list (15 kept), the counter.
    pub fn log_switch_event(&mut self, port: u8, e: SwitchLogEvent) {
        set_port_bit(&mut self.sw_log.port_map, port);
        self.sw_log.events.insert(0, e);
        self.sw_log.events.truncate(SWITCH_LOG_EVENTS);
        self.sw_log.event_counter = self.sw_log.event_counter.saturating_add(1);
    }

    /// Logs a CA event: a QP's CCTI reached its SL's Trigger_Threshold.
    pub fn log_ca_event(&mut self, e: CaLogEvent) {
        self.ca_log.event_map |= 1 << (e.sl & 0xf);
        self.ca_log.events.insert(0, e);
        self.ca_log.events.truncate(CA_LOG_EVENTS);
        self.ca_log.event_counter = self.ca_log.event_counter.saturating_add(1);
    }

    /// Handles one CC MAD that arrived on QP1: the response to send back, or
    /// `None` (dropped, counted). Never panics.
    pub fn handle_mad(&mut self, mad: &[u8], now: Time) -> Option<Box<[u8; MAD_LEN]>> {
        self.handle_timeout(now);
        let Ok(req) = <[u8; MAD_LEN]>::try_from(mad) else {
            return self.drop(CcDrop::NotCc);
        };
        let Ok(h) = MadHeaderRepr::parse(&req) else {
            return self.drop(CcDrop::NotCc);
        };
        if h.mgmt_class != CLASS_CC {
            return self.drop(CcDrop::NotCc);
        }
        if h.method & method::RESPONSE != 0 || h.method == method::TRAP {
            return self.drop(CcDrop::Response);
        }
        let has_response = matches!(h.method, method::GET | method::SET);
        if h.base_version != BASE_VERSION || h.class_version != CC_CLASS_VERSION {
            if !has_response {
                return self.drop(CcDrop::BadVersion);
            }
            return self.reply(req, status::BAD_VERSION);
        }
        let Some(matched) = self.check_key(&h, be64(&req[CC_KEY])) else {
            self.lease.start(self.key.lease_period, now);
            return self.drop(CcDrop::BadCcKey);
        };
        match h.method {
            method::GET | method::SET => {
                let mut out = req;
                let st = self.get_or_set(&h, &mut out, matched, now);
                if st != status::OK {
                    out = req;
                }
                self.reply(out, st)
            }
            method::TRAP_REPRESS => self.drop(CcDrop::UnmatchedRepress),
            _ => self.reply(req, status::UNSUPPORTED_METHOD),
        }
    }

    /// `Some(matched)` lets the request on (a Get may go on unmatched while
    /// the key is unprotected); `None` fails it and counts CC_KeyViolations.
    fn check_key(&mut self, h: &MadHeaderRepr, key: u64) -> Option<bool> {
        let k = &mut self.key;
        if k.cc_key == 0 || key == k.cc_key {
            self.lease.stop();
            return Some(true);
        }
        if h.method == method::GET && !k.protect {
            return Some(false);
        }
        k.violations = k.violations.saturating_add(1);
        None
    }

    /// Fills `mad`'s attribute data for a Get, applies a Set and reads the
    /// attribute back; the status.
    fn get_or_set(
        &mut self,
        h: &MadHeaderRepr,
        mad: &mut [u8; MAD_LEN],
        matched: bool,
        now: Time,
    ) -> u16 {
        let set = h.method == method::SET;
        let is_ca = self.role == CcRole::Ca;
        let mut d = [0u8; MGT_LEN];
        d.copy_from_slice(&mad[MGT_DATA..]);
        let st = match h.attr_id {
            id::CLASS_PORT_INFO if !set && h.attr_mod == 0 => {
                // Capability mask 0: no traps.
                emit_class_port_info(&mut d, CC_CLASS_VERSION, 0);
                status::OK
            }
            id::CONGESTION_INFO if !set => {
                let cap = if is_ca { CA_CCT_BLOCKS } else { 0 };
                CongestionInfo {
                    cong_info: 0,
                    control_table_cap: cap,
                }
                .emit(&mut d);
                status::OK
            }
            id::CONGESTION_KEY_INFO => {
                if set {
                    // CC_KeyViolations (A10.4.3.4, as ibccconfig quotes it):
                    // "setting the counter to a value other than zero results
                    // in the counter being left unchanged"; zero clears it.
                    let new = CongestionKeyInfo::parse(&d);
                    let violations = if new.violations == 0 {
                        0
                    } else {
                        self.key.violations
                    };
                    self.key = CongestionKeyInfo { violations, ..new };
                }
                let mut shown = self.key;
                if !matched {
                    shown.cc_key = 0;
                }
                shown.emit(&mut d);
                status::OK
            }
            id::CONGESTION_LOG if !set => return self.get_log(mad, now),
            id::SWITCH_CONGESTION_SETTING if !is_ca => {
                if set {
                    self.sw.apply(&SwitchCongestionSetting::parse(&d));
                    self.generation += 1;
                }
                self.sw.emit(&mut d);
                status::OK
            }
            id::SWITCH_PORT_CONGESTION_SETTING if !is_ca => {
                self.switch_port_block(h.attr_mod, set, &mut d)
            }
            id::CA_CONGESTION_SETTING if is_ca => {
                if set {
                    self.ca.apply(&CaCongestionSetting::parse(&d));
                    self.generation += 1;
                }
                self.ca.emit(&mut d);
                status::OK
            }
            id::CONGESTION_CONTROL_TABLE if is_ca => self.cct_block(h.attr_mod, set, &mut d),
            id::TIME_STAMP if !set => {
                d.fill(0);
                d[0..4].copy_from_slice(&time_stamp(now.0).to_be_bytes());
                status::OK
            }
            _ => status::UNSUPPORTED_METHOD_ATTR,
        };
        mad[MGT_DATA..].copy_from_slice(&d);
        st
    }

    /// CongestionLog Get (A10.4.3.5): the log from byte 32; the events and
    /// the counter start again ("since the log was last sent").
    fn get_log(&mut self, mad: &mut [u8; MAD_LEN], now: Time) -> u16 {
        let mut d = [0u8; LOG_LEN];
        let ts = time_stamp(now.0);
        match self.role {
            CcRole::Ca => {
                self.ca_log.time_stamp = ts;
                self.ca_log.emit(&mut d);
                self.ca_log = CaLog::default();
            }
            CcRole::Switch { .. } => {
                self.sw_log.time_stamp = ts;
                self.sw_log.emit(&mut d);
                self.sw_log = SwitchLog::default();
            }
        }
        mad[LOG_DATA..].copy_from_slice(&d);
        status::OK
    }

    /// SwitchPortCongestionSetting of block `block` (ports `32 * block ..`):
    /// a Set takes the elements whose Valid bit is set (A10.4.3.7).
    fn switch_port_block(&mut self, block: u32, set: bool, d: &mut [u8; MGT_LEN]) -> u16 {
        let first = (block as usize).saturating_mul(SW_PORT_BLOCK);
        if first >= self.sw_ports.len() {
            return status::INVALID_FIELD;
        }
        for i in 0..SW_PORT_BLOCK {
            let b = &mut d[4 * i..4 * i + 4];
            let Some(port) = self.sw_ports.get_mut(first + i) else {
                b.fill(0);
                continue;
            };
            if set {
                let e = SwitchPortCongestionElement::parse(b);
                if e.valid {
                    *port = e;
                }
            }
            port.emit(b);
        }
        d[4 * SW_PORT_BLOCK..].fill(0);
        if set {
            self.generation += 1;
        }
        status::OK
    }

    /// CongestionControlTable block `block` (A10.4.3.9): a Set takes its
    /// CCTI_Limit and its 64 entries; a block or limit past the table is an
    /// invalid field.
    fn cct_block(&mut self, block: u32, set: bool, d: &mut [u8; MGT_LEN]) -> u16 {
        if block >= u32::from(CA_CCT_BLOCKS) {
            return status::INVALID_FIELD;
        }
        let first = block as usize * CCT_BLOCK;
        if set {
            let new = CctBlock::parse(d);
            if usize::from(new.ccti_limit) >= self.cct.len() {
                return status::INVALID_FIELD;
            }
            self.ccti_limit = new.ccti_limit;
            self.cct[first..first + CCT_BLOCK].copy_from_slice(&new.entries);
            self.generation += 1;
        }
        let mut shown = CctBlock {
            ccti_limit: self.ccti_limit,
            ..CctBlock::default()
        };
        shown
            .entries
            .copy_from_slice(&self.cct[first..first + CCT_BLOCK]);
        shown.emit(d);
        status::OK
    }

    /// The GetResp: the status, the attribute data (the request's on failure).
    fn reply(&mut self, mut mad: [u8; MAD_LEN], st: u16) -> Option<Box<[u8; MAD_LEN]>> {
        mad[3] = method::GET_RESP;
        set_be16(&mut mad[4..6], st);
        self.counters.replies += 1;
        if st != status::OK {
            self.counters.error_replies += 1;
        }
        Some(Box::new(mad))
    }

    fn drop(&mut self, why: CcDrop) -> Option<Box<[u8; MAD_LEN]>> {
        self.counters.drops[why.index()] += 1;
        None
    }

    /// When the CC_Key lease runs out, if it runs.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.lease.deadline()
    }

    /// Clears CC_KeyProtectBit once the lease has run out.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.lease.expired(now) {
            self.key.protect = false;
            self.counters.lease_expiries += 1;
        }
    }
}
