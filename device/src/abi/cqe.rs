//! Completion and event queue entries: what the device writes into CQ and EQ rings
//! in guest memory (ARCHITECTURE.md §2 step 5, §4), and the owner-bit convention that keeps
//! software from reading a half-written entry.

use transport::verbs::Event;

use super::layout::{entry, Entry, Section};

abi_text! {
    /// The owner (phase) bit convention of CQ and EQ rings.
    pub const OWNER_CONVENTION = "Owner bit (CQs and EQs). A ring has N = 2^log2 entries and is \
zeroed by the driver before CREATE_CQ / CREATE_EQ (or before ENABLE for EQ 0). The device \
writes its k-th entry (k = 0, 1, 2, ... free-running) into slot k mod N with owner bit \
(VHCA_OWNER_BIT) = 1 - ((k / N) mod 2): 1 on the first pass over the ring, 0 on the \
second, 1 on the third, and so on. The consumer, at free-running consumer index ci, owns \
the entry in slot ci mod N iff its owner bit equals 1 - ((ci / N) mod 2); otherwise the \
ring is empty there (a zeroed slot on the first pass, or last pass's entry). The device \
writes all other bytes of the entry first and the owner byte last, with release \
ordering; the consumer reads the owner byte, then a read barrier (dma_rmb / \
udma_from_device_barrier), then the rest. The device never overwrites an entry the \
consumer has not released: it reads the consumer index from the queue's doorbell slot; a \
CQ that would overflow gets a CQ_ERR event (CQ-03), EQ 0 a fatal stop.";
}

abi_consts! {
    /// Completion and event entry constants.
    pub mod entry_const: u32 = "VHCA" {
        /// Bytes per CQE: a cache line, room for every `ibv_wc` field without bit
        /// packing.
        CQE_SIZE = 64,
        /// Bytes per EQE.
        EQE_SIZE = 16,
        /// The owner bit in the `owner` byte of a CQE or EQE.
        OWNER_BIT = 1 << 0,
    }
}

/// The owner bit of the entry with free-running index `index` in a ring of
/// `2^log2_entries` entries: 1 on the first pass, 0 on the second, and so on (see
/// [`OWNER_CONVENTION`]). The producer writes it; the consumer at `ci` owns the
/// entry iff its owner bit equals `owner_bit(ci, log2_entries)`.
pub const fn owner_bit(index: u32, log2_entries: u32) -> u8 {
    let lap = match index.checked_shr(log2_entries) {
        Some(l) => l,
        None => 0,
    };
    ((lap & 1) ^ 1) as u8
}

abi_struct! {
    /// Completion queue entry (`struct ibv_wc`; CQ-01).
    pub struct Cqe (64) {
        /// The WQE's wr_id.
        pub wr_id: u64,
        /// Bytes received (receive completions; UD includes the 40-byte GRH space)
        /// or transferred (RDMA READ, atomics).
        pub byte_len: u32,
        /// Immediate data (VHCA_WC_FLAG_WITH_IMM), as a number (the provider gives
        /// htobe32 of it to ibverbs), or the invalidated R_Key (WITH_INV).
        pub imm_or_inv: u32,
        /// The QP the WQE belongs to.
        pub qp_num: u32,
        /// UD/GSI receives: the sender's QPN.
        pub src_qp: u32,
        /// Device detail of an error status (0 on success; not ABI).
        pub vendor_err: u32,
        /// `VHCA_WC_FLAG_*` (`ibv_wc_flags` bits).
        pub wc_flags: u32,
        /// UD/GSI receives: the sender's LID.
        pub slid: u16,
        /// GSI receives: P_Key index the packet matched.
        pub pkey_index: u16,
        /// `enum vhca_wc_status` (`ibv_wc_status`).
        pub status: u8,
        /// `enum vhca_wc_opcode` (`ibv_wc_opcode`); valid for errors too.
        pub opcode: u8,
        /// UD/GSI receives: the packet's SL.
        pub sl: u8,
        /// UD/GSI receives: the DLID's path bits (AD-01).
        pub dlid_path_bits: u8,
        /// RoCE UD/GSI receives: the source MAC of the frame.
        pub smac: [u8; 6],
        /// RoCE UD/GSI receives: `enum vhca_network_hdr` — what the first 40
        /// bytes of the receive buffer hold: IB = a GRH, IPV4 = 20 zero bytes
        /// and the frame's IPv4 header, IPV6 = the frame's IPv6 header (the
        /// layout of the kernel's `union rdma_network_hdr`).
        pub network_hdr_type: u8,
        pub rsvd0: u8,
        /// Receives into an XRC SRQ (SR-02): its number, since `qp_num` is an
        /// XRC TGT QP the consumer may not know; else zero.
        pub srqn: u32,
        pub rsvd: [u8; 11],
        /// Owner bit (VHCA_OWNER_BIT), written last.
        pub owner: u8,
    }
}

abi_enum! {
    /// Network header types of a receive completion (`enum rdma_network_type`).
    pub enum NetworkHdr: u8 = "VHCA_NETWORK_HDR" {
        /// A GRH (or nothing: WC flag GRH clear).
        Ib = 0,
        /// RoCEv2 over IPv4.
        Ipv4 = 2,
        /// RoCEv2 over IPv6.
        Ipv6 = 3,
    }
}

abi_enum! {
    /// EQE types: asynchronous events numbered as `enum ibv_event_type` (and the
    /// kernel's `enum ib_event_type`, the same numbers), then the two kinds of
    /// notification.
    pub enum EqeType: u8 = "VHCA_EQE" {
        /// object = CQN (CQ-03 overflow).
        CqErr = 0,
        /// object = QPN.
        QpFatal = 1,
        /// object = QPN.
        QpReqErr = 2,
        /// object = QPN.
        QpAccessErr = 3,
        /// object = QPN (QS-08).
        CommEst = 4,
        /// object = QPN (QS-05).
        SqDrained = 5,
        /// object = QPN (AD-10).
        PathMig = 6,
        /// object = QPN: a MigReq on the QP's alternate path while it was
        /// not Armed, so the migration the peer asked for failed (AD-10).
        PathMigErr = 7,
        /// object = 0.
        DeviceFatal = 8,
        /// object = port.
        PortActive = 9,
        /// object = port.
        PortErr = 10,
        /// object = port.
        LidChange = 11,
        /// object = port.
        PkeyChange = 12,
        /// object = port.
        SmChange = 13,
        /// object = SRQN.
        SrqErr = 14,
        /// object = SRQN (SR-01).
        SrqLimitReached = 15,
        /// object = QPN.
        QpLastWqeReached = 16,
        /// object = port.
        ClientReregister = 17,
        /// object = port.
        GidChange = 18,
        /// object = QPN (WQ); not sent.
        WqFatal = 19,
        /// An armed CQ has a completion for it (CQ-02): object = CQN.
        Completion = 0x80,
        /// A command with VHCA_CMD_F_EVENT completed (EQ 0 only): object = its
        /// token, data = its status.
        CommandDone = 0x81,
        /// An ODP MR's pages are not present (issue 29): the entry is a
        /// `struct vhca_eqe_page_fault`. On EQ 0.
        PageFault = 0x82,
    }
}

impl EqeType {
    /// The EQE type of an engine event (exhaustive, so a new engine event must be
    /// given a number here).
    pub fn of_event(e: &Event) -> EqeType {
        match e {
            Event::QpFatal { .. } => EqeType::QpFatal,
            Event::QpRequestError { .. } => EqeType::QpReqErr,
            Event::QpAccessError { .. } => EqeType::QpAccessErr,
            Event::CommEstablished { .. } => EqeType::CommEst,
            Event::SqDrained { .. } => EqeType::SqDrained,
            Event::SrqLimitReached { .. } => EqeType::SrqLimitReached,
            Event::PortActive => EqeType::PortActive,
            Event::PortError => EqeType::PortErr,
            Event::PathMigrated { .. } => EqeType::PathMig,
            Event::PathMigrationError { .. } => EqeType::PathMigErr,
            Event::PageFault(_) => EqeType::PageFault,
        }
    }
}

abi_struct! {
    /// Event queue entry.
    pub struct Eqe (16) {
        /// `enum vhca_eqe_type`.
        pub kind: u8,
        pub rsvd0: u8,
        pub rsvd1: u16,
        /// CQN, QPN, SRQN, port or command token, per `kind`.
        pub object: u32,
        /// COMMAND_DONE: the status; otherwise 0.
        pub data: u32,
        pub rsvd2: [u8; 3],
        /// Owner bit (VHCA_OWNER_BIT), written last.
        pub owner: u8,
    }
}

abi_consts! {
    /// `struct vhca_eqe_page_fault` `flags`.
    pub mod page_fault_flags: u8 = "VHCA_PAGE_FAULT" {
        /// The device needs to write the pages (else only read them).
        WRITE = 1 << 0,
        /// Raised by an incoming request (responder); else by the QP's own
        /// send queue (requester).
        RESPONDER = 1 << 1,
        /// Unused (0).
        PREFETCHABLE = 1 << 2,
    }
}

abi_struct! {
    /// A PAGE_FAULT event (`kind` = `VHCA_EQE_PAGE_FAULT`; issue 29): `npages`
    /// 4 KiB pages from `vpn` on of the ODP MR `key` are not present. The guest
    /// answers with MAP_ODP covering them, or ODP_FAULT_FAIL. The device raises
    /// at most one fault per (QP, key, page range) until it is resolved (MAP_ODP,
    /// ODP_FAULT_FAIL, the QP destroyed or in Error).
    pub struct EqePageFault (16) {
        /// `VHCA_EQE_PAGE_FAULT`.
        pub kind: u8,
        /// `VHCA_PAGE_FAULT_*`.
        pub flags: u8,
        /// Pages from `vpn` on (>= 1).
        pub npages: u16,
        /// The MR's L_Key / R_Key.
        pub key: u32,
        /// vpn = va >> 12, 48 bits: the low 32.
        pub vpn_lo: u32,
        /// The high 16 bits of vpn.
        pub vpn_hi: u16,
        pub rsvd: u8,
        /// Owner bit (VHCA_OWNER_BIT), written last.
        pub owner: u8,
    }
}

impl EqePageFault {
    /// The entry of an engine page fault event (issue 29), owner bit clear;
    /// `None` for another event.
    pub fn of_event(e: &Event) -> Option<EqePageFault> {
        let Event::PageFault(transport::verbs::PageFault {
            key,
            vpn,
            npages,
            write,
            responder,
            ..
        }) = *e
        else {
            return None;
        };
        let mut flags = 0;
        if write {
            flags |= page_fault_flags::WRITE;
        }
        if responder {
            flags |= page_fault_flags::RESPONDER;
        }
        Some(EqePageFault {
            kind: EqeType::PageFault.raw(),
            flags,
            // A fault names at most transport::mr::MAX_FAULT_PAGES (512).
            npages: u16::try_from(npages).unwrap_or(u16::MAX),
            key,
            vpn_lo: vpn as u32,
            vpn_hi: (vpn >> 32) as u16,
            rsvd: 0,
            owner: 0,
        })
    }
}

/// Completion and event entries.
pub fn section() -> Section {
    Section {
        title: "Completion and event queue entries",
        entries: vec![
            Entry::Text(OWNER_CONVENTION),
            Entry::Consts(entry_const::layout()),
            Entry::Struct(entry::<Cqe>()),
            Entry::Enum(NetworkHdr::layout()),
            Entry::Enum(EqeType::layout()),
            Entry::Struct(entry::<Eqe>()),
            Entry::Consts(page_fault_flags::layout()),
            Entry::Struct(entry::<EqePageFault>()),
        ],
    }
}
