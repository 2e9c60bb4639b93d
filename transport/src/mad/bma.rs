//! The Baseboard Management Agent of a port (IBA 16.2; AD-12): the baseboard
//! management class (0x05, `IB_MGMT_CLASS_BM` in Linux's `include/rdma/ib_mad.h`)
//! on QP1, sans-IO. It answers BKeyInfo (Get and Set) and ClassPortInfo (Get),
//! guards the class with the B_Key and its lease, and refuses with a status every
//! baseboard attribute a virtual HCA has no hardware behind (VPD, power, module
//! state, the IB-ML bridges: UNSUPPORTED_METHOD_ATTR).
//!
//! The layout is libibmad's (`libibmad/mad.h`: `IB_BM_BKEY_OFFS` 24, 32 reserved
//! bytes, `IB_BM_DATA_OFFS` 64; attribute IDs `enum BM_ATTR_ID`, BKeyInfo 0x10,
//! WriteVPD 0x20 .. OEM 0x2F). BKeyInfo (opa-ff `IbAccess/Common/Inc/ib_bm.h`
//! `BKEY_INFO`): B_Key (8 bytes), B_KeyProtectBit (the top bit of the next 16),
//! B_KeyLeasePeriod (16, seconds, 0 = forever), B_KeyViolations (16, read-only).
//!
//! The B_Key check, as opa-ff's BMA (`IbAccess/Common/Ibt/Bma`, `BmaThreadCallback`)
//! does it: a request matches when the port's B_Key is 0, the request carries it,
//! or it is a BMGet and B_KeyProtectBit is clear. A BMGet that does not match is
//! answered with BKeyInfo's B_Key read as 0; any other request that does not match
//! gets no response, counts B_KeyViolations (saturating at 0xFFFF) and starts the
//! lease (the same [`LeaseTimer`] as the M_Key's, IBA 14.2.4.2): when it runs out,
//! B_KeyProtectBit is cleared, so a new manager can read the key, as an M_Key's
//! protect bits are cleared. The bad-B_Key notice (trap 259, opa-ff
//! `BMA_TRAP_BAD_BKEY`) is optional (OpenSM's `IB_AE_BKEY_TRAP`: "This event is
//! optional") and not sent: this agent has no trap destination (ClassPortInfo
//! Set is refused).
//!
//! BMSend (method 0x03) carries the baseboard commands; bit 0 of the attribute
//! modifier tells a request (0) from a response (1) (`IB_BM_ATTR_MOD_RESP`;
//! Linux's `ib_response_mad`). A request is answered with a BMSend response with
//! UNSUPPORTED_METHOD_ATTR, as opa-ff does for the commands it does not support.

use super::header::{emit_class_port_info, method, status, MadHeaderRepr, BASE_VERSION};
use super::lease::LeaseTimer;
use super::MAD_LEN;
use crate::verbs::Time;
use crate::wire::field::{be16, be64, set_be16, set_be32, set_be64};

/// The baseboard management class (IBA 13.4.4; `IB_MGMT_CLASS_BM`).
pub const CLASS_BM: u8 = 0x05;
/// Its only class version.
pub const BM_CLASS_VERSION: u8 = 1;

/// Baseboard management methods besides Get, Set, GetResp, Trap, TrapRepress.
pub mod bm_method {
    /// BMSend: a baseboard command or its response (attribute modifier bit 0).
    pub const SEND: u8 = 0x03;
}

/// Attribute modifier bit 0 of a BMSend: set on a response (`IB_BM_ATTR_MOD_RESP`).
pub const ATTR_MOD_RESPONSE: u32 = 1;

/// Baseboard management attribute IDs (libibmad `enum BM_ATTR_ID`; opa-ff
/// `BM_ATTRIB_ID_*`).
pub mod bm_attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const NOTICE: u16 = 0x0002;
    pub const BKEY_INFO: u16 = 0x0010;
    pub const WRITE_VPD: u16 = 0x0020;
    /// The last of the baseboard commands (0x20..=0x2F: VPD, IB-ML reset, power
    /// control, module state and status, the IB-ML/CME/MME bridges, OEM).
    pub const OEM: u16 = 0x002f;
}

/// Byte offsets in a BM MAD (libibmad `IB_BM_BKEY_OFFS`, `IB_BM_DATA_OFFS`).
const BKEY: core::ops::Range<usize> = 24..32;
const DATA: usize = 64;
const STATUS: core::ops::Range<usize> = 4..6;
const METHOD: usize = 3;
const ATTR_MOD: core::ops::Range<usize> = 20..24;

/// BKeyInfo (IBA 16.2; opa-ff `BKEY_INFO`) as a value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct BKeyInfo {
    pub bkey: u64,
    pub protect: bool,
    /// Seconds; 0: the lease never runs out.
    pub lease_period: u16,
    /// Read-only: a Set leaves it.
    pub violations: u16,
}

impl BKeyInfo {
    /// Reads BKeyInfo from the attribute data (its first 14 bytes).
    pub fn parse(d: &[u8; MAD_LEN - DATA]) -> BKeyInfo {
        BKeyInfo {
            bkey: be64(&d[0..8]),
            protect: d[8] & 0x80 != 0,
            lease_period: be16(&d[10..12]),
            violations: be16(&d[12..14]),
        }
    }

    /// Writes BKeyInfo over the attribute data; the rest of it becomes 0.
    pub fn emit(&self, d: &mut [u8; MAD_LEN - DATA]) {
        d.fill(0);
        set_be64(&mut d[0..8], self.bkey);
        d[8] = u8::from(self.protect) << 7;
        set_be16(&mut d[10..12], self.lease_period);
        set_be16(&mut d[12..14], self.violations);
    }
}

/// Why the BMA gave no response (each counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BmaDrop {
    /// Not a 256-byte MAD of class 0x05.
    NotBm,
    /// A response, a trap, or a BMSend response: nothing here asked for it.
    Response,
    /// A bad version in a method that has no response.
    BadVersion,
    /// Failed the B_Key check: B_KeyViolations counted.
    BadBkey,
    /// A TrapRepress: this agent sends no traps.
    UnmatchedRepress,
}

impl BmaDrop {
    /// Every reason, in counter order.
    pub const ALL: [BmaDrop; 5] = [
        BmaDrop::NotBm,
        BmaDrop::Response,
        BmaDrop::BadVersion,
        BmaDrop::BadBkey,
        BmaDrop::UnmatchedRepress,
    ];
    fn index(self) -> usize {
        BmaDrop::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

/// The BMA's counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BmaCounters {
    drops: [u64; BmaDrop::ALL.len()],
    /// Responses sent / with a non-zero status.
    pub replies: u64,
    pub error_replies: u64,
    /// B_Key leases that ran out (B_KeyProtectBit cleared).
    pub lease_expiries: u64,
}

impl BmaCounters {
    pub fn drops(&self, why: BmaDrop) -> u64 {
        self.drops[why.index()]
    }
}

/// The Baseboard Management Agent of one port.
#[derive(Debug, Clone, Default)]
pub struct Bma {
    info: BKeyInfo,
    lease: LeaseTimer,
    counters: BmaCounters,
}

impl Bma {
    pub fn new() -> Bma {
        Bma::default()
    }

    /// BKeyInfo as it is now.
    pub fn bkey_info(&self) -> &BKeyInfo {
        &self.info
    }

    pub fn counters(&self) -> &BmaCounters {
        &self.counters
    }

    /// Handles one BM MAD that arrived on QP1: the response to send back to the
    /// requester (its LID and QP), or `None` (dropped, counted). Never panics.
    pub fn handle_mad(&mut self, mad: &[u8], now: Time) -> Option<Box<[u8; MAD_LEN]>> {
        self.handle_timeout(now);
        let Ok(req) = <[u8; MAD_LEN]>::try_from(mad) else {
            return self.drop(BmaDrop::NotBm);
        };
        let Ok(h) = MadHeaderRepr::parse(&req) else {
            return self.drop(BmaDrop::NotBm);
        };
        if h.mgmt_class != CLASS_BM {
            return self.drop(BmaDrop::NotBm);
        }
        let send_resp = h.method == bm_method::SEND && h.attr_mod & ATTR_MOD_RESPONSE != 0;
        if h.method & method::RESPONSE != 0 || h.method == method::TRAP || send_resp {
            return self.drop(BmaDrop::Response);
        }
        let has_response = matches!(h.method, method::GET | method::SET | bm_method::SEND);
        if h.base_version != BASE_VERSION || h.class_version != BM_CLASS_VERSION {
            if !has_response {
                return self.drop(BmaDrop::BadVersion);
            }
            return self.reply(req, &h, status::BAD_VERSION, None);
        }
        let Some(matched) = self.check_bkey(&h, be64(&req[BKEY])) else {
            self.lease.start(self.info.lease_period, now);
            return self.drop(BmaDrop::BadBkey);
        };
        match h.method {
            method::GET | method::SET => {
                let mut data: [u8; MAD_LEN - DATA] = [0; MAD_LEN - DATA];
                data.copy_from_slice(&req[DATA..]);
                let st = self.get_or_set(&h, &mut data, matched);
                self.reply(req, &h, st, (st == status::OK).then_some(data))
            }
            bm_method::SEND => self.reply(req, &h, status::UNSUPPORTED_METHOD_ATTR, None),
            method::TRAP_REPRESS => self.drop(BmaDrop::UnmatchedRepress),
            _ => self.reply(req, &h, status::UNSUPPORTED_METHOD, None),
        }
    }

    /// `Some(matched)` lets the request on (a BMGet may go on unmatched);
    /// `None` fails it and counts B_KeyViolations.
    fn check_bkey(&mut self, h: &MadHeaderRepr, key: u64) -> Option<bool> {
        let i = &mut self.info;
        if i.bkey == 0 || key == i.bkey {
            self.lease.stop();
            return Some(true);
        }
        if h.method == method::GET {
            // Unprotected, a Get reads the key; protected, it reads 0.
            return Some(!i.protect);
        }
        i.violations = i.violations.saturating_add(1);
        None
    }

    fn get_or_set(
        &mut self,
        h: &MadHeaderRepr,
        data: &mut [u8; MAD_LEN - DATA],
        matched: bool,
    ) -> u16 {
        match (h.attr_id, h.method) {
            (bm_attr::BKEY_INFO, m) => {
                if h.attr_mod != 0 {
                    return status::INVALID_FIELD;
                }
                if m == method::SET {
                    let new = BKeyInfo::parse(data);
                    self.info = BKeyInfo {
                        violations: self.info.violations,
                        ..new
                    };
                }
                let mut shown = self.info;
                if !matched {
                    shown.bkey = 0;
                }
                shown.emit(data);
                status::OK
            }
            (bm_attr::CLASS_PORT_INFO, method::GET) => {
                if h.attr_mod != 0 {
                    return status::INVALID_FIELD;
                }
                // Capability mask 0: no traps.
                emit_class_port_info(data, BM_CLASS_VERSION, 0);
                status::OK
            }
            // ClassPortInfo Set (no trap destination to keep), Notice (no
            // traps), the baseboard commands by Get/Set (they go by BMSend) and
            // anything else.
            _ => status::UNSUPPORTED_METHOD_ATTR,
        }
    }

    /// The response: a BMGetResp, or for a BMSend a BMSend with the response
    /// bit in the attribute modifier; the status, and the attribute data (the
    /// request's on failure).
    fn reply(
        &mut self,
        mut mad: [u8; MAD_LEN],
        h: &MadHeaderRepr,
        st: u16,
        data: Option<[u8; MAD_LEN - DATA]>,
    ) -> Option<Box<[u8; MAD_LEN]>> {
        if h.method == bm_method::SEND {
            set_be32(&mut mad[ATTR_MOD], h.attr_mod | ATTR_MOD_RESPONSE);
        } else {
            mad[METHOD] = method::GET_RESP;
        }
        set_be16(&mut mad[STATUS], st);
        if let Some(d) = data {
            mad[DATA..].copy_from_slice(&d);
        }
        self.counters.replies += 1;
        if st != status::OK {
            self.counters.error_replies += 1;
        }
        Some(Box::new(mad))
    }

    fn drop(&mut self, why: BmaDrop) -> Option<Box<[u8; MAD_LEN]>> {
        self.counters.drops[why.index()] += 1;
        None
    }

    /// When the B_Key lease runs out, if it runs.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.lease.deadline()
    }

    /// Clears B_KeyProtectBit once the lease has run out.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.lease.expired(now) {
            self.info.protect = false;
            self.counters.lease_expiries += 1;
        }
    }
}
