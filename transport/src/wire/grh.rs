//! Global Route Header, 40 bytes (IBA 8.3; WF-02).

use super::field::{be16, be32, header_view, set_be16, set_be32};
use super::{DropReason, EmitError};

mod field {
    pub const VER_TC_FL: core::ops::Range<usize> = 0..4;
    pub const PAYLEN: core::ops::Range<usize> = 4..6;
    pub const NXTHDR: usize = 6;
    pub const HOPLMT: usize = 7;
    pub const SGID: core::ops::Range<usize> = 8..24;
    pub const DGID: core::ops::Range<usize> = 24..40;
}

/// GRH:NxtHdr value saying an IBA transport header (BTH) follows.
pub const NEXT_HEADER_IBA: u8 = 0x1b;

header_view!(
    /// A view of the GRH.
    Grh,
    40
);

impl<T: AsRef<[u8]>> Grh<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn word0(&self) -> u32 {
        be32(&self.b()[field::VER_TC_FL])
    }
    /// IP version; 6 for IBA.
    pub fn ip_ver(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class (variant).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label, 20 bits (variant).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xf_ffff
    }
    /// Bytes after the GRH up to and including the ICRC.
    pub fn pay_len(&self) -> u16 {
        be16(&self.b()[field::PAYLEN])
    }
    /// Next header; 0x1B for IBA transport.
    pub fn next_header(&self) -> u8 {
        self.b()[field::NXTHDR]
    }
    /// Hop limit (variant).
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOPLMT]
    }
    /// Source GID.
    pub fn sgid(&self) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(&self.b()[field::SGID]);
        g
    }
    /// Destination GID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(&self.b()[field::DGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Grh<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets IPVer, TClass and FlowLabel.
    pub fn set_ver_tc_fl(&mut self, ver: u8, tc: u8, fl: u32) {
        let w = (u32::from(ver) << 28) | (u32::from(tc) << 20) | (fl & 0xf_ffff);
        set_be32(&mut self.bm()[field::VER_TC_FL], w)
    }
    /// Sets PayLen.
    pub fn set_pay_len(&mut self, v: u16) {
        set_be16(&mut self.bm()[field::PAYLEN], v)
    }
    /// Sets NxtHdr.
    pub fn set_next_header(&mut self, v: u8) {
        self.bm()[field::NXTHDR] = v
    }
    /// Sets HopLmt.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.bm()[field::HOPLMT] = v
    }
    /// Sets the source GID.
    pub fn set_sgid(&mut self, g: &[u8; 16]) {
        self.bm()[field::SGID].copy_from_slice(g)
    }
    /// Sets the destination GID.
    pub fn set_dgid(&mut self, g: &[u8; 16]) {
        self.bm()[field::DGID].copy_from_slice(g)
    }
}

/// A validated GRH in front of a BTH. IPVer (6), NxtHdr (0x1B) and PayLen are fixed
/// or derived, so they are not fields here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    pub traffic_class: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
}

impl GrhRepr {
    /// Header length in bytes.
    pub const LEN: usize = 40;

    /// Parses a checked view of a GRH followed by an IBA transport header.
    /// PayLen is checked by the caller, who knows the packet's length.
    pub fn parse<T: AsRef<[u8]>>(v: &Grh<T>) -> Result<GrhRepr, DropReason> {
        if v.ip_ver() != 6 {
            return Err(DropReason::BadIpVer);
        }
        if v.next_header() != NEXT_HEADER_IBA {
            return Err(DropReason::BadNextHeader);
        }
        Ok(GrhRepr {
            traffic_class: v.traffic_class(),
            flow_label: v.flow_label(),
            hop_limit: v.hop_limit(),
            sgid: v.sgid(),
            dgid: v.dgid(),
        })
    }

    /// Writes the GRH with the given PayLen.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        v: &mut Grh<T>,
        pay_len: u16,
    ) -> Result<(), EmitError> {
        if self.flow_label > 0xf_ffff {
            return Err(EmitError::FieldRange("GRH:FlowLabel"));
        }
        v.set_ver_tc_fl(6, self.traffic_class, self.flow_label);
        v.set_pay_len(pay_len);
        v.set_next_header(NEXT_HEADER_IBA);
        v.set_hop_limit(self.hop_limit);
        v.set_sgid(&self.sgid);
        v.set_dgid(&self.dgid);
        Ok(())
    }
}
