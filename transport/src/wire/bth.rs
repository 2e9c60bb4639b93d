//! Base Transport Header, 12 bytes (IBA 9.2; WF-03).

use super::field::{be16, be24, header_view, set_be16, set_be24};
use super::opcode::Opcode;
use super::{DropReason, EmitError};

mod field {
    pub const OPCODE: usize = 0;
    pub const SE_M_PAD_TVER: usize = 1;
    pub const PKEY: core::ops::Range<usize> = 2..4;
    /// F, B and Resv6: the variant byte masked out of the ICRC (9.2.11).
    pub const FB_RESV6: usize = 4;
    pub const DESTQP: core::ops::Range<usize> = 5..8;
    pub const A_RESV7: usize = 8;
    pub const PSN: core::ops::Range<usize> = 9..12;
}

/// Offset of the variant byte (F, B, Resv6) inside the BTH, for the ICRC mask.
pub(crate) const VARIANT_BYTE: usize = field::FB_RESV6;

/// Largest 24-bit value (QPN, PSN, MSN).
pub const MAX_24: u32 = 0xff_ffff;

header_view!(
    /// A view of the BTH.
    Bth,
    12
);

impl<T: AsRef<[u8]>> Bth<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The raw opcode byte.
    pub fn opcode(&self) -> u8 {
        self.b()[field::OPCODE]
    }
    /// Solicited event (9.2.3).
    pub fn solicited(&self) -> bool {
        self.b()[field::SE_M_PAD_TVER] & 0x80 != 0
    }
    /// MigReq (9.2.4).
    pub fn mig_req(&self) -> bool {
        self.b()[field::SE_M_PAD_TVER] & 0x40 != 0
    }
    /// Pad count, 0..=3 (9.2.5).
    pub fn pad_count(&self) -> usize {
        usize::from((self.b()[field::SE_M_PAD_TVER] >> 4) & 3)
    }
    /// Transport header version (9.2.6).
    pub fn tver(&self) -> u8 {
        self.b()[field::SE_M_PAD_TVER] & 0xf
    }
    /// Partition key (9.2.7).
    pub fn pkey(&self) -> u16 {
        be16(&self.b()[field::PKEY])
    }
    /// FECN (9.2.9).
    pub fn fecn(&self) -> bool {
        self.b()[field::FB_RESV6] & 0x80 != 0
    }
    /// BECN (9.2.10).
    pub fn becn(&self) -> bool {
        self.b()[field::FB_RESV6] & 0x40 != 0
    }
    /// Resv6 (9.2.11), ignored on receive.
    pub fn resv6(&self) -> u8 {
        self.b()[field::FB_RESV6] & 0x3f
    }
    /// Destination QP (9.2.8).
    pub fn dest_qp(&self) -> u32 {
        be24(&self.b()[field::DESTQP])
    }
    /// AckReq (9.2.12).
    pub fn ack_req(&self) -> bool {
        self.b()[field::A_RESV7] & 0x80 != 0
    }
    /// Resv7 (9.2.13), ignored on receive but covered by the ICRC.
    pub fn resv7(&self) -> u8 {
        self.b()[field::A_RESV7] & 0x7f
    }
    /// Packet sequence number (9.2.14).
    pub fn psn(&self) -> u32 {
        be24(&self.b()[field::PSN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the opcode byte.
    pub fn set_opcode(&mut self, v: u8) {
        self.bm()[field::OPCODE] = v
    }
    /// Sets SE, M, PadCnt and TVer.
    pub fn set_se_m_pad_tver(&mut self, se: bool, m: bool, pad: usize, tver: u8) {
        self.bm()[field::SE_M_PAD_TVER] =
            (u8::from(se) << 7) | (u8::from(m) << 6) | (((pad & 3) as u8) << 4) | (tver & 0xf)
    }
    /// Sets the P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        set_be16(&mut self.bm()[field::PKEY], v)
    }
    /// Sets F and B; Resv6 becomes 0 (C9-6).
    pub fn set_fecn_becn(&mut self, f: bool, b: bool) {
        self.bm()[field::FB_RESV6] = (u8::from(f) << 7) | (u8::from(b) << 6)
    }
    /// Sets DestQP.
    pub fn set_dest_qp(&mut self, v: u32) {
        set_be24(&mut self.bm()[field::DESTQP], v)
    }
    /// Sets AckReq; Resv7 becomes 0 (C9-7).
    pub fn set_ack_req(&mut self, a: bool) {
        self.bm()[field::A_RESV7] = u8::from(a) << 7
    }
    /// Sets the PSN.
    pub fn set_psn(&mut self, v: u32) {
        set_be24(&mut self.bm()[field::PSN], v)
    }
}

/// A validated BTH. TVer (0) and PadCnt (from the payload's length) are derived when a
/// whole packet is written; reserved fields are sent as 0 and ignored on receive
/// (C9-6, C9-7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub mig_req: bool,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
}

impl BthRepr {
    /// Header length in bytes.
    pub const LEN: usize = 12;

    /// Parses a checked view: TVer must be 0 (C9-36) and the opcode defined (C9-2).
    pub fn parse<T: AsRef<[u8]>>(v: &Bth<T>) -> Result<BthRepr, DropReason> {
        if v.tver() != 0 {
            return Err(DropReason::BadTver);
        }
        let opcode = Opcode::from_u8(v.opcode()).ok_or(DropReason::UnknownOpcode)?;
        Ok(BthRepr {
            opcode,
            solicited: v.solicited(),
            mig_req: v.mig_req(),
            pkey: v.pkey(),
            fecn: v.fecn(),
            becn: v.becn(),
            dest_qp: v.dest_qp(),
            ack_req: v.ack_req(),
            psn: v.psn(),
        })
    }

    /// Writes the BTH with the given pad count.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        v: &mut Bth<T>,
        pad_count: usize,
    ) -> Result<(), EmitError> {
        if self.dest_qp > MAX_24 {
            return Err(EmitError::FieldRange("BTH:DestQP"));
        }
        if self.psn > MAX_24 {
            return Err(EmitError::FieldRange("BTH:PSN"));
        }
        v.set_opcode(self.opcode.as_u8());
        v.set_se_m_pad_tver(self.solicited, self.mig_req, pad_count, 0);
        v.set_pkey(self.pkey);
        v.set_fecn_becn(self.fecn, self.becn);
        v.set_dest_qp(self.dest_qp);
        v.set_ack_req(self.ack_req);
        v.set_psn(self.psn);
        Ok(())
    }
}
