//! SMPs as native packets (IBA 14.2.1; AD-09): what a port's QP0 puts on the wire
//! and takes from it. An SMP travels as a UD SEND Only from QP0 to QP0 on VL15,
//! with no GRH, BTH:P_Key the default 0xFFFF (not checked at QP0, C9-41), DETH
//! Q_Key 0 (not checked at QP0, C9-48), the 256-byte MAD as payload, then ICRC and
//! VCRC.

use super::MAD_LEN;
use crate::wire::ext::DethRepr;
use crate::wire::lrh::{Lnh, Lrh, LrhRepr};
use crate::wire::opcode::Opcode;
use crate::wire::{BthRepr, ExtHeaders, PacketRepr, TransportRepr};

/// The management VL (IBA 7.6.3).
pub const VL15: u8 = 15;

/// A received QP0 packet's fields the management plane needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Qp0Packet<'a> {
    pub lrh: LrhRepr,
    /// BTH:P_Key, as received (what a delivery to the guest's QP0 keeps).
    pub pkey: u16,
    /// DETH:SrcQP.
    pub src_qp: u32,
    /// The MAD (256 bytes).
    pub mad: &'a [u8],
}

/// Why a VL15 packet is not an SMP a port takes (each counted by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Qp0PacketError {
    /// Not a valid native packet (lengths, CRCs, headers).
    #[error("not a valid packet")]
    Malformed,
    /// A GRH, or an opcode other than UD SEND Only (IBA 13.5.1: MADs on QP0
    /// are UD sends without immediate data).
    #[error("not a UD SEND Only without GRH")]
    NotUdSend,
    /// For a QP other than 0 (IBA 7.6.4: VL15 is QP0's).
    #[error("VL15 packet not for QP0")]
    NotQp0,
    /// The payload is not one MAD (IBA 13.4.1: every MAD is 256 bytes).
    #[error("payload is not a 256-byte MAD")]
    BadLength,
}

/// Reads a packet that arrived on VL15 as an SMP for QP0.
pub fn parse_qp0(pkt: &[u8]) -> Result<Qp0Packet<'_>, Qp0PacketError> {
    let view = Lrh::new_checked(pkt).map_err(|_| Qp0PacketError::Malformed)?;
    if view.lnh() != Lnh::IbaLocal {
        return Err(Qp0PacketError::NotUdSend);
    }
    let p = PacketRepr::parse(pkt).map_err(|_| Qp0PacketError::Malformed)?;
    let t = &p.transport;
    let Some(deth) = t.ext.deth else {
        return Err(Qp0PacketError::NotUdSend);
    };
    if t.bth.opcode != Opcode::UD_SEND_ONLY {
        return Err(Qp0PacketError::NotUdSend);
    }
    if t.bth.dest_qp != 0 {
        return Err(Qp0PacketError::NotQp0);
    }
    if t.payload.len() != MAD_LEN {
        return Err(Qp0PacketError::BadLength);
    }
    Ok(Qp0Packet {
        lrh: p.lrh,
        pkey: t.bth.pkey,
        src_qp: deth.src_qp,
        mad: t.payload,
    })
}

/// Builds an SMP packet from QP `src_qp` (0 for an SMA's response or trap) to
/// QP0: UD SEND Only on VL15 with this LRH's SL and LIDs, BTH:P_Key `pkey`, both
/// CRCs computed. `None` if a field is out of range (a LID the LRH cannot
/// hold is not possible; a `src_qp` above 24 bits is).
pub fn smp_packet(lrh: LrhRepr, pkey: u16, src_qp: u32, mad: &[u8; MAD_LEN]) -> Option<Vec<u8>> {
    let repr = PacketRepr {
        lrh: LrhRepr { vl: VL15, ..lrh },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey,
                fecn: false,
                becn: false,
                dest_qp: 0,
                ack_req: false,
                psn: 0,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr { qkey: 0, src_qp }),
                ..ExtHeaders::default()
            },
            payload: mad,
        },
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    let n = repr.emit(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}
