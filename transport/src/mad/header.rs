//! The common MAD header (IBA 13.4.2) and the SMP layouts that carry it: the
//! LID-routed SMP (class 0x01) and the directed-route SMP (class 0x81) of IBA
//! 14.2.1.1 / 14.2.1.2. A view over the 256 bytes ([`Smp`]) and a value ([`SmpRepr`]).

use super::{MadError, MAD_LEN, SMP_DATA_LEN};
use crate::wire::field::{be16, be32, be64, set_be16, set_be32, set_be64};

/// Byte ranges of the MAD header and of an SMP (IBA 13.4.2, 14.2.1). libibmad's
/// `fields.c` names the same places (`MadTRID` at bit 64, `DrSmpSLID` the upper half
/// of word 8, `DrSmpPath` at byte 128, `DrSmpRetPath` at byte 192).
mod field {
    use core::ops::Range;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    /// R bit (0x80) and the 7-bit method.
    pub const METHOD: usize = 3;
    /// For a directed-route SMP: D bit (bit 15) and a 15-bit status.
    pub const STATUS: Range<usize> = 4..6;
    /// ClassSpecific: for a directed-route SMP, hop pointer then hop count.
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const HOP_PTR: usize = 6;
    pub const HOP_CNT: usize = 7;
    pub const TID: Range<usize> = 8..16;
    pub const ATTR_ID: Range<usize> = 16..18;
    pub const ATTR_MOD: Range<usize> = 20..24;
    pub const MKEY: Range<usize> = 24..32;
    pub const DR_SLID: Range<usize> = 32..34;
    pub const DR_DLID: Range<usize> = 34..36;
    pub const DATA: Range<usize> = 64..128;
    pub const INITIAL_PATH: Range<usize> = 128..192;
    pub const RETURN_PATH: Range<usize> = 192..256;
}

/// Management class of a LID-routed SMP (IBA 13.4.4).
pub const CLASS_SUBN_LID_ROUTED: u8 = 0x01;
/// Management class of a directed-route SMP.
pub const CLASS_SUBN_DIRECTED_ROUTE: u8 = 0x81;
/// The only base version (IBA 13.4.2).
pub const BASE_VERSION: u8 = 1;
/// The only class version of the subnet management class (IBA 14.2.1).
pub const SMP_CLASS_VERSION: u8 = 1;

/// Subnet management methods (IBA 14.2.2).
pub mod method {
    pub const GET: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const GET_RESP: u8 = 0x81;
    pub const TRAP: u8 = 0x05;
    pub const TRAP_REPRESS: u8 = 0x07;
    /// The R bit: set on every response method.
    pub const RESPONSE: u8 = 0x80;
}

/// MAD status codes (IBA 13.4.7): bits 4:2 are the invalid-field code.
pub mod status {
    pub const OK: u16 = 0;
    /// Bad base or class version (code 1).
    pub const BAD_VERSION: u16 = 1 << 2;
    /// Method not supported by this class (code 2).
    pub const UNSUPPORTED_METHOD: u16 = 2 << 2;
    /// Method/attribute combination not supported (code 3).
    pub const UNSUPPORTED_METHOD_ATTR: u16 = 3 << 2;
    /// Invalid value in an attribute field or the attribute modifier (code 7).
    pub const INVALID_FIELD: u16 = 7 << 2;
}

/// The direction bit of a directed-route SMP, in the status word (IBA 14.2.1.2).
pub const DR_DIRECTION_BIT: u16 = 0x8000;

/// ClassPortInfo:RespTimeValue of the GSI agents here (PerfMgt, BM): 4.096 us *
/// 2^18, about 1 s.
pub const GSI_RESP_TIME_VALUE: u32 = 18;

/// ClassPortInfo (IBA 13.4.8.1) of a GSI class over its attribute data: the
/// versions, CapabilityMask `cap`, RespTimeValue; no redirection, no traps.
pub fn emit_class_port_info(d: &mut [u8], class_version: u8, cap: u16) {
    d.fill(0);
    if d.len() < 8 {
        return;
    }
    d[0] = BASE_VERSION;
    d[1] = class_version;
    set_be16(&mut d[2..4], cap);
    // CapabilityMask2 (27 bits) then RespTimeValue (5 bits).
    set_be32(&mut d[4..8], GSI_RESP_TIME_VALUE);
}

/// A typed view of a 256-byte SMP (either routing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Smp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Smp<T> {
    /// Length of every SMP.
    pub const LEN: usize = MAD_LEN;

    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer, checking it holds a whole SMP: the only constructor for
    /// untrusted bytes. After it no accessor can index out of bounds.
    pub fn new_checked(buffer: T) -> Result<Self, MadError> {
        if buffer.as_ref().len() < MAD_LEN {
            return Err(MadError::Truncated);
        }
        Ok(Self { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn base_version(&self) -> u8 {
        self.b()[field::BASE_VERSION]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.b()[field::MGMT_CLASS]
    }
    pub fn class_version(&self) -> u8 {
        self.b()[field::CLASS_VERSION]
    }
    /// The method byte with its R bit.
    pub fn method(&self) -> u8 {
        self.b()[field::METHOD]
    }
    /// The whole 16-bit status word (with the D bit on a directed-route SMP).
    pub fn status_word(&self) -> u16 {
        be16(&self.b()[field::STATUS])
    }
    pub fn class_specific(&self) -> u16 {
        be16(&self.b()[field::CLASS_SPECIFIC])
    }
    pub fn hop_ptr(&self) -> u8 {
        self.b()[field::HOP_PTR]
    }
    pub fn hop_cnt(&self) -> u8 {
        self.b()[field::HOP_CNT]
    }
    pub fn tid(&self) -> u64 {
        be64(&self.b()[field::TID])
    }
    pub fn attr_id(&self) -> u16 {
        be16(&self.b()[field::ATTR_ID])
    }
    pub fn attr_mod(&self) -> u32 {
        be32(&self.b()[field::ATTR_MOD])
    }
    pub fn mkey(&self) -> u64 {
        be64(&self.b()[field::MKEY])
    }
    pub fn dr_slid(&self) -> u16 {
        be16(&self.b()[field::DR_SLID])
    }
    pub fn dr_dlid(&self) -> u16 {
        be16(&self.b()[field::DR_DLID])
    }
    /// The 64-byte SMP data (the attribute).
    pub fn data(&self) -> &[u8] {
        &self.b()[field::DATA]
    }
    pub fn initial_path(&self) -> &[u8] {
        &self.b()[field::INITIAL_PATH]
    }
    pub fn return_path(&self) -> &[u8] {
        &self.b()[field::RETURN_PATH]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Smp<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the method byte (with its R bit).
    pub fn set_method(&mut self, v: u8) {
        self.bm()[field::METHOD] = v;
    }
    pub fn set_status_word(&mut self, v: u16) {
        set_be16(&mut self.bm()[field::STATUS], v)
    }
    pub fn set_hop_ptr(&mut self, v: u8) {
        self.bm()[field::HOP_PTR] = v;
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[field::DATA]
    }
    pub fn return_path_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[field::RETURN_PATH]
    }
}

/// The common MAD header as a value (IBA 13.4.2). `status` and `class_specific` are the
/// raw words: [`SmpRepr`] splits them for a directed-route SMP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeaderRepr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    /// Method byte, R bit included.
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

/// How an SMP is routed, with the directed-route fields (IBA 14.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SmpRoute {
    /// Class 0x01: routed by the LRH's LIDs; bytes 32..64 reserved.
    Lid,
    /// Class 0x81.
    Directed(DrFields),
}

/// The directed-route fields of an SMP (IBA 14.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DrFields {
    /// D: false on the way out (SM to node), true on the way back.
    pub direction: bool,
    pub hop_ptr: u8,
    pub hop_cnt: u8,
    /// The LID-routed part before the directed part, or 0xFFFF (permissive) for none.
    pub dr_slid: u16,
    /// The LID-routed part after the directed part, or 0xFFFF for none.
    pub dr_dlid: u16,
    /// Port to leave by at each hop, index 1..=hop_cnt (index 0 unused).
    pub initial_path: [u8; 64],
    /// Port arrived on at each hop, filled in on the way out.
    pub return_path: [u8; 64],
}

/// A whole SMP as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SmpRepr {
    pub base_version: u8,
    pub class_version: u8,
    /// Method byte, R bit included.
    pub method: u8,
    /// The status (15 bits on a directed-route SMP, whose D bit is in [`DrFields`]).
    pub status: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
    pub mkey: u64,
    pub route: SmpRoute,
    /// The attribute, 64 bytes.
    pub data: [u8; SMP_DATA_LEN],
}

impl MadHeaderRepr {
    /// Length of the common header.
    pub const LEN: usize = 24;

    /// Parses the header of any MAD (at least 24 bytes).
    pub fn parse(b: &[u8]) -> Result<MadHeaderRepr, MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        Ok(MadHeaderRepr {
            base_version: b[field::BASE_VERSION],
            mgmt_class: b[field::MGMT_CLASS],
            class_version: b[field::CLASS_VERSION],
            method: b[field::METHOD],
            status: be16(&b[field::STATUS]),
            class_specific: be16(&b[field::CLASS_SPECIFIC]),
            tid: be64(&b[field::TID]),
            attr_id: be16(&b[field::ATTR_ID]),
            attr_mod: be32(&b[field::ATTR_MOD]),
        })
    }

    /// Writes the header; the reserved word (bytes 18..20) becomes 0.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), MadError> {
        if b.len() < Self::LEN {
            return Err(MadError::Truncated);
        }
        b[field::BASE_VERSION] = self.base_version;
        b[field::MGMT_CLASS] = self.mgmt_class;
        b[field::CLASS_VERSION] = self.class_version;
        b[field::METHOD] = self.method;
        set_be16(&mut b[field::STATUS], self.status);
        set_be16(&mut b[field::CLASS_SPECIFIC], self.class_specific);
        set_be64(&mut b[field::TID], self.tid);
        set_be16(&mut b[18..20], 0);
        set_be16(&mut b[field::ATTR_ID], self.attr_id);
        set_be32(&mut b[field::ATTR_MOD], self.attr_mod);
        Ok(())
    }
}

impl SmpRepr {
    /// Parses a checked view. Only the class is checked here (an SMP is class 0x01 or
    /// 0x81): versions are the SMA's to answer with `BAD_VERSION` (IBA 13.4.7).
    /// Reserved bytes are ignored.
    pub fn parse<T: AsRef<[u8]>>(v: &Smp<T>) -> Result<SmpRepr, MadError> {
        let route = match v.mgmt_class() {
            CLASS_SUBN_LID_ROUTED => SmpRoute::Lid,
            CLASS_SUBN_DIRECTED_ROUTE => {
                let mut initial_path = [0u8; 64];
                initial_path.copy_from_slice(v.initial_path());
                let mut return_path = [0u8; 64];
                return_path.copy_from_slice(v.return_path());
                SmpRoute::Directed(DrFields {
                    direction: v.status_word() & DR_DIRECTION_BIT != 0,
                    hop_ptr: v.hop_ptr(),
                    hop_cnt: v.hop_cnt(),
                    dr_slid: v.dr_slid(),
                    dr_dlid: v.dr_dlid(),
                    initial_path,
                    return_path,
                })
            }
            _ => return Err(MadError::NotSmp),
        };
        let status = match route {
            SmpRoute::Lid => v.status_word(),
            SmpRoute::Directed(_) => v.status_word() & !DR_DIRECTION_BIT,
        };
        let mut data = [0u8; SMP_DATA_LEN];
        data.copy_from_slice(v.data());
        Ok(SmpRepr {
            base_version: v.base_version(),
            class_version: v.class_version(),
            method: v.method(),
            status,
            tid: v.tid(),
            attr_id: v.attr_id(),
            attr_mod: v.attr_mod(),
            mkey: v.mkey(),
            route,
            data,
        })
    }

    /// The management class this SMP is sent in.
    pub fn mgmt_class(&self) -> u8 {
        match self.route {
            SmpRoute::Lid => CLASS_SUBN_LID_ROUTED,
            SmpRoute::Directed(_) => CLASS_SUBN_DIRECTED_ROUTE,
        }
    }

    /// Writes all 256 bytes (reserved ones as 0).
    pub fn emit(&self, b: &mut [u8]) -> Result<(), MadError> {
        if b.len() < MAD_LEN {
            return Err(MadError::Truncated);
        }
        let (status, class_specific) = match &self.route {
            SmpRoute::Lid => (self.status, 0),
            SmpRoute::Directed(dr) => {
                if self.status & DR_DIRECTION_BIT != 0 {
                    return Err(MadError::FieldRange("DR SMP status"));
                }
                let d = if dr.direction { DR_DIRECTION_BIT } else { 0 };
                (
                    self.status | d,
                    u16::from_be_bytes([dr.hop_ptr, dr.hop_cnt]),
                )
            }
        };
        b[..MAD_LEN].fill(0);
        MadHeaderRepr {
            base_version: self.base_version,
            mgmt_class: self.mgmt_class(),
            class_version: self.class_version,
            method: self.method,
            status,
            class_specific,
            tid: self.tid,
            attr_id: self.attr_id,
            attr_mod: self.attr_mod,
        }
        .emit(b)?;
        set_be64(&mut b[field::MKEY], self.mkey);
        if let SmpRoute::Directed(dr) = &self.route {
            set_be16(&mut b[field::DR_SLID], dr.dr_slid);
            set_be16(&mut b[field::DR_DLID], dr.dr_dlid);
            b[field::INITIAL_PATH].copy_from_slice(&dr.initial_path);
            b[field::RETURN_PATH].copy_from_slice(&dr.return_path);
        }
        b[field::DATA].copy_from_slice(&self.data);
        Ok(())
    }

    /// The SMP as 256 bytes.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        // The buffer is MAD_LEN long and a DR status never carries the D bit once
        // parsed, so this cannot fail for a parsed value; a hand-built value with the
        // D bit in `status` keeps it out of the word (the field wins).
        if self.emit(&mut b).is_err() {
            let mut fixed = *self;
            fixed.status &= !DR_DIRECTION_BIT;
            let _ = fixed.emit(&mut b);
        }
        b
    }
}
