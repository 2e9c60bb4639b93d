//! The BTH opcode table (IBA 9.2.1, Table 38; C9-2; WF-04), as data.
//!
//! Bits \[7:5\] of an opcode name the service, bits \[4:0\] the operation; one row per
//! defined opcode says which extension headers follow the BTH, in wire order, whether
//! a payload follows them, and where the packet stands in its message. Everything
//! that builds or parses a packet reads this table; nothing else decides which
//! headers an opcode carries.

use super::ext::ExtKind as E;
pub use super::ext::ExtKind;

/// Transport service of an opcode (bits \[7:5\]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Reliable Connection, 0b000.
    Rc,
    /// Unreliable Connection, 0b001.
    Uc,
    /// Reliable Datagram, 0b010.
    Rd,
    /// Unreliable Datagram, 0b011.
    Ud,
    /// Congestion notification (CNP, 0x81), 0b100.
    Cnp,
    /// Extended Reliable Connection, 0b101.
    Xrc,
}

/// What an opcode does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    Send,
    SendWithImmediate,
    SendWithInvalidate,
    RdmaWrite,
    RdmaWriteWithImmediate,
    RdmaReadRequest,
    RdmaReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Resync,
    /// IBA 1.5 memory placement extension.
    Flush,
    /// IBA 1.5 memory placement extension.
    AtomicWrite,
    CongestionNotification,
}

/// Where a packet stands in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

/// Which side of an operation sends a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Sent by a requester (SEND, WRITE, READ request, atomics, RESYNC, FLUSH).
    Request,
    /// Sent by a responder (ACK, atomic ACK, READ response).
    Response,
    /// Neither: a congestion notification.
    Notification,
}

/// One row of the opcode table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub opcode: u8,
    pub name: &'static str,
    pub service: Service,
    pub operation: Operation,
    pub position: Position,
    /// Extension headers after the BTH, in wire order.
    pub headers: &'static [ExtKind],
    /// Whether a payload follows the extension headers.
    pub payload: bool,
}

impl OpcodeInfo {
    /// Request, response or notification.
    pub const fn direction(&self) -> Direction {
        match self.operation {
            Operation::RdmaReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge => {
                Direction::Response
            }
            Operation::CongestionNotification => Direction::Notification,
            _ => Direction::Request,
        }
    }

    /// Total length of the extension headers.
    pub fn headers_len(&self) -> usize {
        self.headers.iter().map(|h| h.len()).sum()
    }

    /// Whether this packet carries ImmDt.
    pub fn has(&self, kind: ExtKind) -> bool {
        self.headers.contains(&kind)
    }

    /// First or Only: the packet starts a message.
    pub fn starts_message(&self) -> bool {
        matches!(self.position, Position::First | Position::Only)
    }

    /// Last or Only: the packet ends a message.
    pub fn ends_message(&self) -> bool {
        matches!(self.position, Position::Last | Position::Only)
    }
}

/// A BTH opcode that the table defines. Holding one proves the row exists.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(u8);

impl core::fmt::Debug for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}(0x{:02x})", self.info().name, self.0)
    }
}

impl Opcode {
    /// The opcode for a byte, if the table defines it.
    pub fn from_u8(b: u8) -> Option<Opcode> {
        (INDEX[usize::from(b)] != NONE).then_some(Opcode(b))
    }

    /// The opcode byte.
    pub const fn as_u8(self) -> u8 {
        self.0
    }

    /// This opcode's row.
    pub fn info(self) -> &'static OpcodeInfo {
        &TABLE[usize::from(INDEX[usize::from(self.0)])]
    }

    /// The XRC opcode of an RC one (0b101 instead of 0b000 in \[7:5\], the
    /// same operation and position, Table 38: every XRC opcode is its RC
    /// opcode's low five bits; SR-02, WF-06); `None` for an operation XRC does
    /// not have (FLUSH, ATOMIC WRITE) or an opcode not of RC.
    pub fn to_xrc(self) -> Option<Opcode> {
        if self.info().service != Service::Rc {
            return None;
        }
        let x = Opcode::from_u8(0xa0 | (self.0 & 0x1f))?;
        (x.info().operation == self.info().operation && x.info().position == self.info().position)
            .then_some(x)
    }

    /// Every defined opcode, in table order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        TABLE.iter().map(|r| Opcode(r.opcode))
    }
}

const NONE: u8 = u8::MAX;

const fn build_index(t: &[OpcodeInfo]) -> [u8; 256] {
    let mut idx = [NONE; 256];
    let mut i = 0;
    while i < t.len() {
        // A duplicate row would make the table ambiguous: fail the build.
        assert!(idx[t[i].opcode as usize] == NONE, "duplicate opcode row");
        idx[t[i].opcode as usize] = i as u8;
        i += 1;
    }
    idx
}

static INDEX: [u8; 256] = build_index(TABLE);

macro_rules! opcode_table {
    ($( $name:ident = $code:literal, $svc:ident, $op:ident, $pos:ident, [$($h:ident),*], $payload:literal; )*) => {
        impl Opcode {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Opcode = Opcode($code);
            )*
        }

        /// The opcode table, one row per defined opcode.
        pub const TABLE: &[OpcodeInfo] = &[
            $(OpcodeInfo {
                opcode: $code,
                name: stringify!($name),
                service: Service::$svc,
                operation: Operation::$op,
                position: Position::$pos,
                headers: &[$(E::$h),*],
                payload: $payload,
            },)*
        ];
    };
}

opcode_table! {
    // Reliable Connection, 0b000 (IBA Table 38).
    RC_SEND_FIRST = 0x00, Rc, Send, First, [], true;
    RC_SEND_MIDDLE = 0x01, Rc, Send, Middle, [], true;
    RC_SEND_LAST = 0x02, Rc, Send, Last, [], true;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, Rc, SendWithImmediate, Last, [ImmDt], true;
    RC_SEND_ONLY = 0x04, Rc, Send, Only, [], true;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05, Rc, SendWithImmediate, Only, [ImmDt], true;
    RC_RDMA_WRITE_FIRST = 0x06, Rc, RdmaWrite, First, [Reth], true;
    RC_RDMA_WRITE_MIDDLE = 0x07, Rc, RdmaWrite, Middle, [], true;
    RC_RDMA_WRITE_LAST = 0x08, Rc, RdmaWrite, Last, [], true;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, Rc, RdmaWriteWithImmediate, Last, [ImmDt], true;
    RC_RDMA_WRITE_ONLY = 0x0a, Rc, RdmaWrite, Only, [Reth], true;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, Rc, RdmaWriteWithImmediate, Only, [Reth, ImmDt], true;
    RC_RDMA_READ_REQUEST = 0x0c, Rc, RdmaReadRequest, Only, [Reth], false;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, Rc, RdmaReadResponse, First, [Aeth], true;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e, Rc, RdmaReadResponse, Middle, [], true;
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, Rc, RdmaReadResponse, Last, [Aeth], true;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10, Rc, RdmaReadResponse, Only, [Aeth], true;
    RC_ACKNOWLEDGE = 0x11, Rc, Acknowledge, Only, [Aeth], false;
    RC_ATOMIC_ACKNOWLEDGE = 0x12, Rc, AtomicAcknowledge, Only, [Aeth, AtomicAckEth], false;
    RC_COMPARE_SWAP = 0x13, Rc, CompareSwap, Only, [AtomicEth], false;
    RC_FETCH_ADD = 0x14, Rc, FetchAdd, Only, [AtomicEth], false;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16, Rc, SendWithInvalidate, Last, [Ieth], true;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17, Rc, SendWithInvalidate, Only, [Ieth], true;
    RC_FLUSH = 0x1c, Rc, Flush, Only, [Feth, Reth], false;
    RC_ATOMIC_WRITE = 0x1d, Rc, AtomicWrite, Only, [Reth], true;

    // Unreliable Connection, 0b001.
    UC_SEND_FIRST = 0x20, Uc, Send, First, [], true;
    UC_SEND_MIDDLE = 0x21, Uc, Send, Middle, [], true;
    UC_SEND_LAST = 0x22, Uc, Send, Last, [], true;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, Uc, SendWithImmediate, Last, [ImmDt], true;
    UC_SEND_ONLY = 0x24, Uc, Send, Only, [], true;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25, Uc, SendWithImmediate, Only, [ImmDt], true;
    UC_RDMA_WRITE_FIRST = 0x26, Uc, RdmaWrite, First, [Reth], true;
    UC_RDMA_WRITE_MIDDLE = 0x27, Uc, RdmaWrite, Middle, [], true;
    UC_RDMA_WRITE_LAST = 0x28, Uc, RdmaWrite, Last, [], true;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, Uc, RdmaWriteWithImmediate, Last, [ImmDt], true;
    UC_RDMA_WRITE_ONLY = 0x2a, Uc, RdmaWrite, Only, [Reth], true;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b, Uc, RdmaWriteWithImmediate, Only, [Reth, ImmDt], true;

    // Reliable Datagram, 0b010: RDETH always, DETH in requests.
    RD_SEND_FIRST = 0x40, Rd, Send, First, [Rdeth, Deth], true;
    RD_SEND_MIDDLE = 0x41, Rd, Send, Middle, [Rdeth, Deth], true;
    RD_SEND_LAST = 0x42, Rd, Send, Last, [Rdeth, Deth], true;
    RD_SEND_LAST_WITH_IMMEDIATE = 0x43, Rd, SendWithImmediate, Last, [Rdeth, Deth, ImmDt], true;
    RD_SEND_ONLY = 0x44, Rd, Send, Only, [Rdeth, Deth], true;
    RD_SEND_ONLY_WITH_IMMEDIATE = 0x45, Rd, SendWithImmediate, Only, [Rdeth, Deth, ImmDt], true;
    RD_RDMA_WRITE_FIRST = 0x46, Rd, RdmaWrite, First, [Rdeth, Deth, Reth], true;
    RD_RDMA_WRITE_MIDDLE = 0x47, Rd, RdmaWrite, Middle, [Rdeth, Deth], true;
    RD_RDMA_WRITE_LAST = 0x48, Rd, RdmaWrite, Last, [Rdeth, Deth], true;
    RD_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x49, Rd, RdmaWriteWithImmediate, Last, [Rdeth, Deth, ImmDt], true;
    RD_RDMA_WRITE_ONLY = 0x4a, Rd, RdmaWrite, Only, [Rdeth, Deth, Reth], true;
    RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x4b, Rd, RdmaWriteWithImmediate, Only, [Rdeth, Deth, Reth, ImmDt], true;
    RD_RDMA_READ_REQUEST = 0x4c, Rd, RdmaReadRequest, Only, [Rdeth, Deth, Reth], false;
    RD_RDMA_READ_RESPONSE_FIRST = 0x4d, Rd, RdmaReadResponse, First, [Rdeth, Aeth], true;
    RD_RDMA_READ_RESPONSE_MIDDLE = 0x4e, Rd, RdmaReadResponse, Middle, [Rdeth], true;
    RD_RDMA_READ_RESPONSE_LAST = 0x4f, Rd, RdmaReadResponse, Last, [Rdeth, Aeth], true;
    RD_RDMA_READ_RESPONSE_ONLY = 0x50, Rd, RdmaReadResponse, Only, [Rdeth, Aeth], true;
    RD_ACKNOWLEDGE = 0x51, Rd, Acknowledge, Only, [Rdeth, Aeth], false;
    RD_ATOMIC_ACKNOWLEDGE = 0x52, Rd, AtomicAcknowledge, Only, [Rdeth, Aeth, AtomicAckEth], false;
    RD_COMPARE_SWAP = 0x53, Rd, CompareSwap, Only, [Rdeth, Deth, AtomicEth], false;
    RD_FETCH_ADD = 0x54, Rd, FetchAdd, Only, [Rdeth, Deth, AtomicEth], false;
    RD_RESYNC = 0x55, Rd, Resync, Only, [Rdeth, Deth], false;

    // Unreliable Datagram, 0b011: single-packet messages only (C9-12).
    UD_SEND_ONLY = 0x64, Ud, Send, Only, [Deth], true;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65, Ud, SendWithImmediate, Only, [Deth, ImmDt], true;

    // Congestion Notification Packet, 0b100 (RoCEv2 annex A17): 16 reserved bytes.
    CNP = 0x81, Cnp, CongestionNotification, Only, [CnpPad], false;

    // Extended Reliable Connection, 0b101: XRCETH in requests only.
    XRC_SEND_FIRST = 0xa0, Xrc, Send, First, [Xrceth], true;
    XRC_SEND_MIDDLE = 0xa1, Xrc, Send, Middle, [Xrceth], true;
    XRC_SEND_LAST = 0xa2, Xrc, Send, Last, [Xrceth], true;
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xa3, Xrc, SendWithImmediate, Last, [Xrceth, ImmDt], true;
    XRC_SEND_ONLY = 0xa4, Xrc, Send, Only, [Xrceth], true;
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xa5, Xrc, SendWithImmediate, Only, [Xrceth, ImmDt], true;
    XRC_RDMA_WRITE_FIRST = 0xa6, Xrc, RdmaWrite, First, [Xrceth, Reth], true;
    XRC_RDMA_WRITE_MIDDLE = 0xa7, Xrc, RdmaWrite, Middle, [Xrceth], true;
    XRC_RDMA_WRITE_LAST = 0xa8, Xrc, RdmaWrite, Last, [Xrceth], true;
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xa9, Xrc, RdmaWriteWithImmediate, Last, [Xrceth, ImmDt], true;
    XRC_RDMA_WRITE_ONLY = 0xaa, Xrc, RdmaWrite, Only, [Xrceth, Reth], true;
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xab, Xrc, RdmaWriteWithImmediate, Only, [Xrceth, Reth, ImmDt], true;
    XRC_RDMA_READ_REQUEST = 0xac, Xrc, RdmaReadRequest, Only, [Xrceth, Reth], false;
    XRC_RDMA_READ_RESPONSE_FIRST = 0xad, Xrc, RdmaReadResponse, First, [Aeth], true;
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xae, Xrc, RdmaReadResponse, Middle, [], true;
    XRC_RDMA_READ_RESPONSE_LAST = 0xaf, Xrc, RdmaReadResponse, Last, [Aeth], true;
    XRC_RDMA_READ_RESPONSE_ONLY = 0xb0, Xrc, RdmaReadResponse, Only, [Aeth], true;
    XRC_ACKNOWLEDGE = 0xb1, Xrc, Acknowledge, Only, [Aeth], false;
    XRC_ATOMIC_ACKNOWLEDGE = 0xb2, Xrc, AtomicAcknowledge, Only, [Aeth, AtomicAckEth], false;
    XRC_COMPARE_SWAP = 0xb3, Xrc, CompareSwap, Only, [Xrceth, AtomicEth], false;
    XRC_FETCH_ADD = 0xb4, Xrc, FetchAdd, Only, [Xrceth, AtomicEth], false;
    XRC_SEND_LAST_WITH_INVALIDATE = 0xb6, Xrc, SendWithInvalidate, Last, [Xrceth, Ieth], true;
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xb7, Xrc, SendWithInvalidate, Only, [Xrceth, Ieth], true;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wf_04_service_bits_match_the_service_column() {
        for row in TABLE {
            let svc = match row.opcode >> 5 {
                0 => Service::Rc,
                1 => Service::Uc,
                2 => Service::Rd,
                3 => Service::Ud,
                4 => Service::Cnp,
                5 => Service::Xrc,
                _ => panic!("{} has no service", row.name),
            };
            assert_eq!(row.service, svc, "{}", row.name);
        }
    }

    #[test]
    fn wf_04_reserved_opcodes_are_unknown() {
        for b in [
            0x15u8, 0x18, 0x1b, 0x1e, 0x1f, 0x2c, 0x56, 0x60, 0x63, 0x66, 0x80, 0xb5, 0xc0, 0xff,
        ] {
            assert!(Opcode::from_u8(b).is_none(), "0x{b:02x}");
        }
        assert_eq!(Opcode::all().count(), TABLE.len());
    }

    #[test]
    fn wf_05_header_rules_hold_for_every_row() {
        for row in TABLE {
            let op = row.operation;
            // C9-24: AETH in READ response first/last/only, not middle.
            if op == Operation::RdmaReadResponse {
                assert_eq!(
                    row.has(ExtKind::Aeth),
                    row.position != Position::Middle,
                    "{}",
                    row.name
                );
            }
            // RETH exactly in the first packet of a WRITE and in READ requests.
            let wants_reth = matches!(op, Operation::RdmaWrite | Operation::RdmaWriteWithImmediate)
                && row.starts_message()
                || matches!(
                    op,
                    Operation::RdmaReadRequest | Operation::Flush | Operation::AtomicWrite
                );
            assert_eq!(row.has(ExtKind::Reth), wants_reth, "{}", row.name);
            // ImmDt only in the last/only packet of *_WITH_IMMEDIATE.
            let wants_imm = matches!(
                op,
                Operation::SendWithImmediate | Operation::RdmaWriteWithImmediate
            ) && row.ends_message();
            assert_eq!(row.has(ExtKind::ImmDt), wants_imm, "{}", row.name);
            assert_eq!(
                row.has(ExtKind::Rdeth),
                row.service == Service::Rd,
                "{}",
                row.name
            );
            let xrc_req = row.service == Service::Xrc && row.direction() == Direction::Request;
            assert_eq!(row.has(ExtKind::Xrceth), xrc_req, "{}", row.name);
            if xrc_req {
                assert_eq!(
                    row.headers[0],
                    ExtKind::Xrceth,
                    "{}: XRCETH follows the BTH",
                    row.name
                );
            }
        }
    }

    #[test]
    fn wf06_every_xrc_opcode_is_its_rc_opcode_with_service_0b101() {
        let mut mapped = 0;
        for op in Opcode::all().filter(|o| o.info().service == Service::Rc) {
            let rc = op.info();
            match op.to_xrc() {
                Some(x) => {
                    mapped += 1;
                    let xi = x.info();
                    assert_eq!(x.as_u8() >> 5, 0b101, "{}", rc.name);
                    assert_eq!(xi.service, Service::Xrc, "{}", rc.name);
                    assert_eq!((xi.operation, xi.position), (rc.operation, rc.position));
                    // The same headers, with XRCETH first in requests (WF-06).
                    let extra = usize::from(xi.direction() == Direction::Request);
                    assert_eq!(xi.headers.len(), rc.headers.len() + extra, "{}", xi.name);
                }
                // IBA 1.5's FLUSH and ATOMIC WRITE have no XRC opcode here.
                None => assert!(
                    matches!(rc.operation, Operation::Flush | Operation::AtomicWrite),
                    "{} has no XRC opcode",
                    rc.name
                ),
            }
        }
        // Every XRC opcode of the table is reached from RC.
        assert_eq!(
            mapped,
            Opcode::all()
                .filter(|o| o.info().service == Service::Xrc)
                .count()
        );
        assert_eq!(Opcode::UD_SEND_ONLY.to_xrc(), None);
    }
}
