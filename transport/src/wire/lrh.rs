//! Local Route Header, 8 bytes (IBA 7.7; WF-01).

use super::field::{be16, header_view, set_be16};
use super::{DropReason, EmitError};

mod field {
    pub const VL_LVER: usize = 0;
    pub const SL_LNH: usize = 1;
    pub const DLID: core::ops::Range<usize> = 2..4;
    pub const PKTLEN: core::ops::Range<usize> = 4..6;
    pub const SLID: core::ops::Range<usize> = 6..8;
}

/// LRH:LNH, what follows the LRH (IBA 7.7.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lnh {
    /// Raw packet: a raw header follows, no IBA transport (0b00).
    Raw,
    /// IPv6 raw: a non-IBA IPv6 header follows (0b01).
    Ipv6Raw,
    /// IBA local: BTH follows (0b10).
    IbaLocal,
    /// IBA global: GRH then BTH follow (0b11).
    IbaGlobal,
}

impl Lnh {
    fn from_bits(b: u8) -> Lnh {
        match b & 3 {
            0 => Lnh::Raw,
            1 => Lnh::Ipv6Raw,
            2 => Lnh::IbaLocal,
            _ => Lnh::IbaGlobal,
        }
    }

    fn bits(self) -> u8 {
        match self {
            Lnh::Raw => 0,
            Lnh::Ipv6Raw => 1,
            Lnh::IbaLocal => 2,
            Lnh::IbaGlobal => 3,
        }
    }
}

header_view!(
    /// A view of the LRH.
    Lrh,
    8
);

impl<T: AsRef<[u8]>> Lrh<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Virtual lane (variant: masked out of the ICRC).
    pub fn vl(&self) -> u8 {
        self.b()[field::VL_LVER] >> 4
    }
    /// Link version; 0 is the only one defined.
    pub fn lver(&self) -> u8 {
        self.b()[field::VL_LVER] & 0xf
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        self.b()[field::SL_LNH] >> 4
    }
    /// The two reserved bits after SL (sent as 0).
    pub fn rsv2(&self) -> u8 {
        (self.b()[field::SL_LNH] >> 2) & 3
    }
    /// Link next header.
    pub fn lnh(&self) -> Lnh {
        Lnh::from_bits(self.b()[field::SL_LNH])
    }
    /// Destination LID.
    pub fn dlid(&self) -> u16 {
        be16(&self.b()[field::DLID])
    }
    /// Packet length in 4-byte words, LRH through ICRC (VCRC excluded).
    pub fn pkt_len(&self) -> u16 {
        be16(&self.b()[field::PKTLEN]) & 0x7ff
    }
    /// The five reserved bits before PktLen (sent as 0).
    pub fn rsv5(&self) -> u8 {
        self.b()[field::PKTLEN.start] >> 3
    }
    /// Source LID.
    pub fn slid(&self) -> u16 {
        be16(&self.b()[field::SLID])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Lrh<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets VL and LVer.
    pub fn set_vl_lver(&mut self, vl: u8, lver: u8) {
        self.bm()[field::VL_LVER] = (vl << 4) | (lver & 0xf);
    }
    /// Sets SL and LNH; the reserved bits become 0.
    pub fn set_sl_lnh(&mut self, sl: u8, lnh: Lnh) {
        self.bm()[field::SL_LNH] = (sl << 4) | lnh.bits();
    }
    /// Sets the destination LID.
    pub fn set_dlid(&mut self, v: u16) {
        set_be16(&mut self.bm()[field::DLID], v)
    }
    /// Sets PktLen (words); the reserved bits become 0.
    pub fn set_pkt_len(&mut self, words: u16) {
        set_be16(&mut self.bm()[field::PKTLEN], words & 0x7ff)
    }
    /// Sets the source LID.
    pub fn set_slid(&mut self, v: u16) {
        set_be16(&mut self.bm()[field::SLID], v)
    }
}

/// LRH:VL of a native packet (the high nibble of its first byte; 0 for an
/// empty buffer): what the data path reads to tell VL15 from data before any
/// parsing (IBA 7.6.4).
pub fn vl_of(pkt: &[u8]) -> u8 {
    pkt.first().map_or(0, |b| b >> 4)
}

/// A validated LRH. LVer (always 0), LNH and PktLen are derived when a whole packet
/// is written, so they are not fields here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LrhRepr {
    pub vl: u8,
    pub sl: u8,
    pub dlid: u16,
    pub slid: u16,
}

impl LrhRepr {
    /// Header length in bytes.
    pub const LEN: usize = 8;

    /// Parses a checked view: LVer must be 0 (C9-35). Reserved bits are ignored.
    pub fn parse<T: AsRef<[u8]>>(v: &Lrh<T>) -> Result<LrhRepr, DropReason> {
        if v.lver() != 0 {
            return Err(DropReason::BadLver);
        }
        Ok(LrhRepr {
            vl: v.vl(),
            sl: v.sl(),
            dlid: v.dlid(),
            slid: v.slid(),
        })
    }

    /// Writes the LRH with the given LNH and PktLen (in words).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        v: &mut Lrh<T>,
        lnh: Lnh,
        pkt_len_words: u16,
    ) -> Result<(), EmitError> {
        if self.vl > 15 {
            return Err(EmitError::FieldRange("LRH:VL"));
        }
        if self.sl > 15 {
            return Err(EmitError::FieldRange("LRH:SL"));
        }
        if pkt_len_words > 0x7ff {
            return Err(EmitError::FieldRange("LRH:PktLen"));
        }
        v.set_vl_lver(self.vl, 0);
        v.set_sl_lnh(self.sl, lnh);
        v.set_dlid(self.dlid);
        v.set_pkt_len(pkt_len_words);
        v.set_slid(self.slid);
        Ok(())
    }
}
