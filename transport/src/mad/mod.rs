//! The management plane's sans-IO core (issue 26 items 1 and 8; AD-09, AD-12):
//! management datagrams of the subnet management class, directed-route processing
//! and the Subnet Management Agent of a port, beside the engine and independent of it.
//!
//! - [`header`]: the common MAD header (IBA 13.4.2) and the SMP layouts (LID-routed
//!   class 0x01, directed-route class 0x81, IBA 14.2.1) as a typed view over bytes
//!   and a value with `parse` / `emit` (smoltcp's shape, as [`crate::wire`]).
//! - [`attr`], [`portinfo`]: the SMP attributes (IBA 14.2.5).
//! - [`switch_attr`]: the attributes only a switch has (SwitchInfo, the forwarding
//!   tables).
//! - [`dr`]: the directed-route rules (IBA 14.2.2) for an HCA endpoint and for a
//!   switch hop, as pure functions.
//! - [`packet`]: an SMP as a native packet (UD SEND Only to QP0 on VL15).
//! - [`sma`]: the SMA: an attribute table of small handlers over one port's state,
//!   M_Key protection with its lease, traps, and events out.
//! - [`cc`], [`cc_attr`]: the Congestion Control Agent (class 0x21 on QP1, IBA
//!   Annex A10.4) of a CA port or a switch, and the class's attributes.
//! - [`bma`]: the Baseboard Management Agent (class 0x05 on QP1): BKeyInfo and
//!   the B_Key with its lease (AD-12).
//!
//! Nothing here does I/O or reads a clock: an SMP comes in with the port's context
//! and `now`, a response, traps and events come out (ARCHITECTURE.md §3a). Not yet
//! wired to the device's QP0, the guest driver or a switch.

pub mod attr;
pub mod bma;
pub mod cc;
pub mod cc_attr;
pub mod dr;
pub mod header;
pub(crate) mod lease;
pub mod packet;
pub mod portinfo;
pub mod sma;
pub mod switch_attr;

pub use attr::{
    attr_id, BadMkeyDetails, GuidInfoBlock, NodeDescription, NodeInfoRepr, NoticeRepr, PkeyBlock,
    SlToVlTable, SmInfoRepr, Trap144Details, VlArbBlock, VlArbEntry,
};
pub use dr::{DrDrop, HcaDeliver, HcaSend, SwitchHop, PERMISSIVE_LID};
pub use header::{method, status, DrFields, MadHeaderRepr, Smp, SmpRepr, SmpRoute};
pub use packet::{parse_qp0, smp_packet, Qp0Packet, Qp0PacketError};
pub use portinfo::PortInfoRepr;
pub use sma::{
    HostCapError, MadContext, NodeIdentity, PortState, ReplyRoute, Sma, SmaCounters, SmaDrop,
    SmaEvent, SmaOutput, TrapOut,
};

/// Every MAD is 256 bytes (IBA 13.4.1).
pub const MAD_LEN: usize = 256;
/// The SMP data (the attribute) is 64 bytes (IBA 14.2.1).
pub const SMP_DATA_LEN: usize = 64;

/// Why bytes could not be read as, or a value written as, a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MadError {
    /// The buffer is shorter than the MAD or attribute.
    #[error("MAD truncated")]
    Truncated,
    /// The management class is neither 0x01 nor 0x81.
    #[error("not a subnet management packet")]
    NotSmp,
    /// A field value does not fit its width.
    #[error("field value out of range: {0}")]
    FieldRange(&'static str),
}
