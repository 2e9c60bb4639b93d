//! The InfiniBand wire format (IBA Vol.1 ch. 7.7-7.8, 8.3, 9.2-9.3; features WF-01..WF-11).
//!
//! Two levels per header, after smoltcp: a typed view over bytes (`Lrh<T>`, `Bth<T>`,
//! ...) whose `new_checked` is the only way untrusted bytes come in, and a small
//! validated value (`LrhRepr`, `BthRepr`, ...) with `parse` and `emit`. A whole
//! packet is a [`PacketRepr`]: [`PacketRepr::parse`] checks everything a link and a
//! transport layer check before any queue pair is looked at, and returns a typed
//! [`DropReason`] reason for a bad packet; it never panics on any input.

pub(crate) mod field;

pub mod bth;
pub mod corpus;
pub mod crc;
pub mod ext;
pub mod grh;
pub mod lrh;
pub mod opcode;
pub mod packet;
pub mod pcap;
pub mod roce;
pub mod template;

pub use bth::{Bth, BthRepr};
pub use ext::{
    Aeth, AethRepr, AethSyndrome, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, CnpPad,
    Deth, DethRepr, Eoeth, EoethRepr, ExtHeaders, Feth, FethRepr, Ieth, ImmDt, NakCode, Rdeth,
    RdethRepr, Reth, RethRepr, Xrceth, XrcethRepr,
};
pub use grh::{Grh, GrhRepr};
pub use lrh::{vl_of, Lnh, Lrh, LrhRepr};
pub use opcode::{ExtKind, OpcodeInfo, Operation, Position, Service};
pub use packet::{fill_crcs, PacketRepr, TransportRepr};

/// Largest payload of one packet: the largest PMTU (IBA 7.7.8, AD-03).
pub const MAX_PAYLOAD: usize = 4096;

/// The longest native packet, LRH through VCRC: LRH:PktLen counts LRH through ICRC
/// in 4-byte words in 11 bits (IBA 7.7.8), and the 2-byte VCRC follows. A receive
/// buffer of this size always suffices.
pub const MAX_PACKET_LEN: usize = 0x7ff * 4 + 2;

/// Why a packet was dropped before it reached a queue pair. Every variant is a
/// silent drop (C9-35, PV-10): the caller counts it and sends nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DropReason {
    /// The buffer ends inside a header.
    #[error("packet truncated inside a header")]
    Truncated,
    /// LRH:PktLen, GRH:PayLen or the UDP/IP length disagrees with the bytes present,
    /// or an opcode without payload carries payload.
    #[error("length fields disagree with the packet's size")]
    LengthMismatch,
    /// LRH:LVer is not 0 (checked by the link layer, C9-35).
    #[error("LRH:LVer is not 0")]
    BadLver,
    /// LRH:LNH says raw packet (no IBA transport header, C9-34); raw datagrams are
    /// OP-14, not supported.
    #[error("raw packet (LRH:LNH without BTH) is not supported")]
    RawPacket,
    /// GRH:IPVer is not 6.
    #[error("GRH:IPVer is not 6")]
    BadIpVer,
    /// GRH:NxtHdr is not 0x1B (IBA transport) although LRH:LNH says BTH follows.
    #[error("GRH:NxtHdr is not 0x1B")]
    BadNextHeader,
    /// BTH:TVer is not 0 (C9-36, PV-01).
    #[error("BTH:TVer is not 0")]
    BadTver,
    /// The BTH opcode is reserved or manufacturer-specific (C9-2).
    #[error("unknown or reserved BTH opcode")]
    UnknownOpcode,
    /// BTH:PadCnt is not what the packet's length needs, or pads an opcode that
    /// carries no payload (WF-08).
    #[error("BTH:PadCnt does not fit the payload")]
    BadPadCount,
    /// The AETH syndrome uses a reserved encoding.
    #[error("reserved AETH syndrome")]
    ReservedSyndrome,
    /// The invariant CRC does not match (WF-09).
    #[error("bad ICRC")]
    BadIcrc,
    /// The variant CRC does not match (WF-09).
    #[error("bad VCRC")]
    BadVcrc,
    /// RoCEv2: the frame is not Ethernet/IPv4 or IPv6/UDP to port 4791.
    #[error("not a RoCEv2 frame")]
    NotRoce,
    /// RoCEv2: the IPv4 header checksum is wrong.
    #[error("bad IPv4 header checksum")]
    BadIpChecksum,
}

impl DropReason {
    /// Every drop reason, in a stable order: the index of a reason in this list is its
    /// counter's index.
    pub const ALL: [DropReason; 14] = [
        DropReason::Truncated,
        DropReason::LengthMismatch,
        DropReason::BadLver,
        DropReason::RawPacket,
        DropReason::BadIpVer,
        DropReason::BadNextHeader,
        DropReason::BadTver,
        DropReason::UnknownOpcode,
        DropReason::BadPadCount,
        DropReason::ReservedSyndrome,
        DropReason::BadIcrc,
        DropReason::BadVcrc,
        DropReason::NotRoce,
        DropReason::BadIpChecksum,
    ];

    /// The reason's counter name in snake case: the name in the device's
    /// reports, metrics and QUERY_COUNTERS name lists.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::LengthMismatch => "length_mismatch",
            DropReason::BadLver => "bad_lver",
            DropReason::RawPacket => "raw_packet",
            DropReason::BadIpVer => "bad_ip_ver",
            DropReason::BadNextHeader => "bad_next_header",
            DropReason::BadTver => "bad_tver",
            DropReason::UnknownOpcode => "unknown_opcode",
            DropReason::BadPadCount => "bad_pad_count",
            DropReason::ReservedSyndrome => "reserved_syndrome",
            DropReason::BadIcrc => "bad_icrc",
            DropReason::BadVcrc => "bad_vcrc",
            DropReason::NotRoce => "not_roce",
            DropReason::BadIpChecksum => "bad_ip_checksum",
        }
    }

    /// This reason's index in [`DropReason::ALL`].
    pub fn index(self) -> usize {
        DropReason::ALL.iter().position(|d| *d == self).unwrap_or(0)
    }
}

/// Why a `Repr` could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The output buffer is smaller than [`PacketRepr::buffer_len`].
    #[error("output buffer too small")]
    BufferTooSmall,
    /// The extension headers present are not the ones the opcode's row lists.
    #[error("extension headers do not match the opcode")]
    HeadersMismatch,
    /// Payload given for an opcode without payload, or longer than the maximum.
    #[error("payload not allowed or too long for this opcode")]
    BadPayload,
    /// A field value does not fit its width (a LID, QPN or PSN over range, ...).
    #[error("field value out of range: {0}")]
    FieldRange(&'static str),
}

/// Counters for every drop reason (ARCHITECTURE.md §3: "every drop reason has a counter").
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DropCounters([u64; DropReason::ALL.len()]);

impl DropCounters {
    /// Counts one drop.
    pub fn count(&mut self, reason: DropReason) {
        self.0[reason.index()] += 1;
    }

    /// The count for one reason.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }

    /// Every counter by its reason's [`name`](DropReason::name), zeros
    /// included, in [`DropReason::ALL`] order.
    pub fn named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|r| r.name())
            .zip(self.0.iter().copied())
    }

    /// All non-zero counters, by reason.
    pub fn iter(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .copied()
            .zip(self.0.iter().copied())
            .filter(|(_, n)| *n != 0)
    }
}
