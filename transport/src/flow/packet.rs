//! The flow-control packet (IBA 7.9.4), the one link packet a port sends:
//! six bytes, not routed, not forwarded, meaning only to the port at the
//! other end of the link.
//!
//! ```text
//!  byte 0         byte 1   byte 2        byte 3   bytes 4-5
//! +----+---------+--------+----+-------+--------+-----------+
//! | Op | FCTBS (12 bits)  | VL | FCCL (12 bits) |  LPCRC    |
//! +----+---------+--------+----+-------+--------+-----------+
//! ```
//!
//! Op 0 is a normal flow-control packet, Op 1 the one a port sends while its
//! link initialises (7.9.4.1); the other Ops are reserved, and a packet with
//! one is dropped. LPCRC is the link packet's CRC-16 over the first four
//! bytes, the VCRC's polynomial and rules (7.9.4.2, 7.8.2), so it goes on
//! the wire as the VCRC does, least significant byte first (`wire::crc`: the
//! real-hardware capture of `tests/capture_vectors.rs` fixes the VCRC's
//! order); a packet whose LPCRC does not match is dropped.

use crate::wire::crc::vcrc;

/// Bytes of a flow-control packet (IBA 7.9.4).
pub const FC_PACKET_LEN: usize = 6;

/// Op of a flow-control packet (IBA 7.9.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FcOp {
    /// Normal flow-control packet (Op 0).
    Normal,
    /// Flow-control init packet (Op 1): sent while the link initialises;
    /// carries the same fields.
    Init,
}

/// A decoded flow-control packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FcPacket {
    pub op: FcOp,
    /// Flow Control Total Blocks Sent on `vl` since link initialisation,
    /// mod 4096 (IBA 7.9.3).
    pub fctbs: u16,
    /// The data VL the packet is about (never 15: VL15 is not flow
    /// controlled, 7.9.1).
    pub vl: u8,
    /// Flow Control Credit Limit the receiver grants on `vl`, mod 4096.
    pub fccl: u16,
}

/// Why a received link packet was dropped (each is a counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FcError {
    /// Not [`FC_PACKET_LEN`] bytes.
    #[error("flow-control packet of the wrong length")]
    Length,
    /// The LPCRC does not match the first four bytes (IBA 7.9.4.2).
    #[error("flow-control packet with a bad LPCRC")]
    Lpcrc,
    /// A reserved Op (IBA 7.9.4.1).
    #[error("flow-control packet with a reserved Op")]
    Op,
    /// About VL15, which has no flow control (IBA 7.9.1).
    #[error("flow-control packet for VL15")]
    Vl15,
}

impl FcPacket {
    /// The packet's six bytes, LPCRC included.
    pub fn encode(&self) -> [u8; FC_PACKET_LEN] {
        let op: u8 = match self.op {
            FcOp::Normal => 0,
            FcOp::Init => 1,
        };
        let fctbs = self.fctbs & 0xfff;
        let fccl = self.fccl & 0xfff;
        let mut b = [0u8; FC_PACKET_LEN];
        b[0] = (op << 4) | (fctbs >> 8) as u8;
        b[1] = fctbs as u8;
        b[2] = ((self.vl & 0xf) << 4) | (fccl >> 8) as u8;
        b[3] = fccl as u8;
        let crc = vcrc(&b[..4]);
        b[4..6].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a received link packet: length, LPCRC, Op, VL.
    pub fn decode(b: &[u8]) -> Result<FcPacket, FcError> {
        if b.len() != FC_PACKET_LEN {
            return Err(FcError::Length);
        }
        if vcrc(&b[..4]).to_le_bytes() != b[4..6] {
            return Err(FcError::Lpcrc);
        }
        let op = match b[0] >> 4 {
            0 => FcOp::Normal,
            1 => FcOp::Init,
            _ => return Err(FcError::Op),
        };
        let vl = b[2] >> 4;
        if vl == super::VL15 {
            return Err(FcError::Vl15);
        }
        Ok(FcPacket {
            op,
            fctbs: u16::from(b[0] & 0xf) << 8 | u16::from(b[1]),
            vl,
            fccl: u16::from(b[2] & 0xf) << 8 | u16::from(b[3]),
        })
    }
}
