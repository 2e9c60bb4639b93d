//! Verb-level types shared by the engine and its callers: work requests,
//! completions, QP attributes, async events and verb errors.
//!
//! Completion statuses and opcodes carry libibverbs' numbers (`enum ibv_wc_status`,
//! `enum ibv_wc_opcode`) so that the guest driver maps them one to one; access flags
//! and QP attribute masks carry `ibv_access_flags` / `ibv_qp_attr_mask` bits.

use crate::wire::grh::GrhRepr;

/// Identifies an object the engine owns (PD, CQ, SRQ). QPs are named by their QPN.
pub type Handle = u32;

/// A point in time, in nanoseconds since an origin the caller picks. The engine never
/// reads a clock (ARCHITECTURE.md §3): every input that may start or fire a timer takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

impl Time {
    /// `self + ns`, saturating.
    pub fn plus_ns(self, ns: u64) -> Time {
        Time(self.0.saturating_add(ns))
    }
}

/// Transport service of a QP (IBA 3.5.x; verbs `ibv_qp_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
    /// XRC initiator (SR-02): the send half of an XRC connection; each send
    /// WR names the XRC SRQ it lands in at the target (XRCETH, WF-06). No
    /// receive queue.
    XrcIni,
    /// XRC target (SR-02): the receive half; no send or receive queue of its
    /// own: each request's XRCETH names an XRC SRQ of the target's XRC domain
    /// (PV-08), whose WQEs and CQ the message uses.
    XrcTgt,
}

impl QpType {
    /// Acknowledged, PSN-checked and retried as RC is: RC and both XRC
    /// halves (IBA 9.7; XRC is RC with the receive side shared, SR-02).
    pub fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcIni | QpType::XrcTgt)
    }

    /// An XRC INI or TGT QP (SR-02).
    pub fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcIni | QpType::XrcTgt)
    }
}

/// QP states (IBA 10.3.1, seed 001; QS-01), numbered as `ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Error = 6,
}

/// Memory access rights (`ibv_access_flags` bits; MP-04).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    pub const REMOTE_READ: Access = Access(1 << 2);
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    pub const MW_BIND: Access = Access(1 << 4);
    /// A remote FLUSH of placement type global visibility may target this MR
    /// (IBA 1.5 Memory Placement Extensions; `IBV_ACCESS_FLUSH_GLOBAL`).
    pub const FLUSH_GLOBAL: Access = Access(1 << 8);
    /// A remote FLUSH of placement type persistence may target this MR
    /// (`IBV_ACCESS_FLUSH_PERSISTENT`).
    pub const FLUSH_PERSISTENT: Access = Access(1 << 9);

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// One scatter/gather element: `length` bytes at virtual address `addr` of the MR
/// named by `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// Address vector (IBA 10.2.1; AD-02): where a UD send goes, or a connected QP's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AddressVector {
    pub dlid: u16,
    pub sl: u8,
    /// Low bits added to the port's LID to make the SLID (LMC path bits).
    pub src_path_bits: u8,
    pub static_rate: u8,
    /// Send a GRH with these fields (SGID comes from the port's GID table).
    /// A RoCE port always sends one: its fields become the IP header (A17.4).
    pub grh: Option<GlobalRoute>,
    /// RoCE port: the destination MAC, resolved by the guest's driver from the
    /// DGID (the next hop); unused on InfiniBand.
    pub dmac: [u8; 6],
}

/// The GRH part of an address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// Send work request opcodes (`ibv_wr_opcode` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WrOpcode {
    RdmaWrite = 0,
    RdmaWriteWithImm = 1,
    Send = 2,
    SendWithImm = 3,
    RdmaRead = 4,
    AtomicCmpSwap = 5,
    AtomicFetchAdd = 6,
    /// Invalidate the R_Key `imm_or_inv`: a type 2 memory window's (MP-07) or
    /// a fast-registration MR's (MP-08).
    LocalInv = 7,
    /// Bind a memory window: `data` is [`SendData::Bind`] (MP-06, MP-07).
    BindMw = 8,
    SendWithInv = 9,
    /// RDMA FLUSH (IBA 1.5 MPE, RC only): `remote_addr`/`rkey` and the length
    /// in `compare`; placement type and selectivity level in `imm_or_inv`, as
    /// the FETH carries them ([`FlushSpec`]). No data.
    Flush = 14,
    /// RDMA ATOMIC WRITE (IBA 1.5 MPE, RC only): the 8 bytes of `swap_add`
    /// (little-endian, i.e. the bytes as the consumer gave them) land at the
    /// 8-byte aligned `remote_addr` in one single-copy-atomic store.
    AtomicWrite = 15,
    /// Fast registration of a memory region (MP-08; the kernel's `IB_WR_REG_MR`,
    /// 0x20): `data` is [`SendData::Reg`]. Sends nothing.
    RegMr = 32,
}

/// What a FLUSH asks, as `SendWr::imm_or_inv` carries it: bits \[3:0\] the
/// placement type (`IBV_FLUSH_GLOBAL` 1, `IBV_FLUSH_PERSISTENT` 2), bits \[5:4\]
/// the selectivity level (`IBV_FLUSH_RANGE` 0, `IBV_FLUSH_MR` 1): FETH's layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlushSpec {
    pub placement_type: u8,
    pub selectivity: u8,
}

impl FlushSpec {
    pub const TYPE_GLOBAL: u8 = 1;
    pub const TYPE_PERSISTENT: u8 = 2;
    pub const LEVEL_RANGE: u8 = 0;
    pub const LEVEL_MR: u8 = 1;

    pub fn from_bits(v: u32) -> FlushSpec {
        FlushSpec {
            placement_type: (v & 0xf) as u8,
            selectivity: ((v >> 4) & 3) as u8,
        }
    }

    pub fn bits(self) -> u32 {
        u32::from(self.placement_type & 0xf) | (u32::from(self.selectivity & 3) << 4)
    }
}

/// Memory window types (`enum ibv_mw_type` numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MwType {
    /// Bound to a PD; bound, rebound and unbound (length 0) by bind only (MP-06).
    Type1 = 1,
    /// Type 2B: bound to one QP and its PD; invalidated locally or remotely;
    /// the QP may be destroyed, which frees the window (MP-07).
    Type2 = 2,
    /// Type 2A (IBA 10.6.7.2.4; seed 003 "Type 2A"): bound to one QP (its QPN
    /// is the association, not the PD); invalidated locally or remotely; the
    /// QP cannot be destroyed while such a window is bound to it (MP-07).
    /// Not an `ibv_mw_type` number: Linux verbs know only "type 2".
    Type2A = 3,
}

impl MwType {
    /// Type 2A or 2B: user key byte, no zero-length bind, invalidatable,
    /// bound to one QP (seed 003 table).
    pub const fn is_type2(self) -> bool {
        matches!(self, MwType::Type2 | MwType::Type2A)
    }
}

/// What a BIND_MW work request asks (`struct ibv_mw_bind_info` plus the keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window's current R_Key.
    pub mw_rkey: u32,
    /// Its R_Key after the bind: same index, the consumer's new key byte.
    pub new_rkey: u32,
    /// The MR the window lands in (it needs [`Access::MW_BIND`]).
    pub mr_lkey: u32,
    pub addr: u64,
    pub length: u64,
    /// Remote rights the window grants.
    pub access: Access,
}

/// What a fast-registration work request asks (MP-08; the kernel's
/// `struct ib_reg_wr` with the page list `ib_map_mr_sg` built): the MR named by
/// the index of `key` becomes valid with this translation and these rights,
/// under `key` (its 8-bit key is the consumer's, o9-5.2.2 / seed 003 "Memory
/// Key").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FastReg {
    /// The MR's L_Key and R_Key once registered: the index of the MR (from
    /// its allocation) and a new key byte.
    pub key: u32,
    pub access: Access,
    pub iova: u64,
    pub length: u64,
    /// log2 of the page size of the list.
    pub page_shift: u8,
    /// Physical address of the page list: `npages` little-endian 64-bit page
    /// addresses, read when the work request is executed (as mlx5's MTT list).
    pub page_list: u64,
    pub npages: u32,
}

/// Send work request flags (`ibv_send_flags` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    pub const FENCE: SendFlags = SendFlags(1);
    pub const SIGNALED: SendFlags = SendFlags(1 << 1);
    pub const SOLICITED: SendFlags = SendFlags(1 << 2);
    pub const INLINE: SendFlags = SendFlags(1 << 3);

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// Payload of a send WR: a gather list, or data carried inline in the WQE.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SendData {
    Sges(Vec<Sge>),
    Inline(Vec<u8>),
    /// BIND_MW: no data, the bind (MP-06, MP-07).
    Bind(MwBind),
    /// REG_MR: no data, the registration (MP-08).
    Reg(FastReg),
}

/// Where a UD send goes (per WR; AD-02).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdDest {
    pub av: AddressVector,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    /// QP1 (GSI) only: the port P_Key table entry whose P_Key the send
    /// carries (IBA 11.4.1.1 Post Send's P_Key index of a GSI WR; Linux's
    /// `ib_ud_wr.pkey_index`), so that the GSI answers in the partition a
    /// request came in (PV-03, C9-42); `None`, and on any other QP, the
    /// QP's own P_Key index (AD-05). An index past the table completes the
    /// WR with `LocQpOpErr`.
    pub pkey_index: Option<u16>,
}

/// A send work request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub flags: SendFlags,
    pub data: SendData,
    /// Immediate data (WITH_IMM) or the R_Key to invalidate (SEND_WITH_INV).
    pub imm_or_inv: u32,
    /// RDMA and atomic target.
    pub remote_addr: u64,
    pub rkey: u32,
    /// CmpSwap compare value.
    pub compare: u64,
    /// CmpSwap swap value, or FetchAdd add value.
    pub swap_add: u64,
    /// UD only.
    pub ud: Option<UdDest>,
}

/// A receive work request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// Completion statuses, numbered as `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

/// Completion opcodes, numbered as `ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Flush = 8,
    AtomicWrite = 9,
    /// A fast registration (MP-08; the kernel's `IB_WC_REG_MR`).
    RegMr = 10,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// Completion flags (`ibv_wc_flags` bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    pub const GRH: WcFlags = WcFlags(1);
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    pub const WITH_INV: WcFlags = WcFlags(1 << 3);

    /// Whether every bit of `other` is set here.
    pub fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A work completion (CQ-01), the fields of `struct ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Completion {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// Immediate data (host order) or the invalidated R_Key, per `flags`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub flags: WcFlags,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
    /// Whether the message asked for a solicited event (OP-10).
    pub solicited: bool,
    /// RoCE UD receives: the frame's source MAC.
    pub smac: Option<[u8; 6]>,
    /// UD receives: what the 40-byte header space of the buffer holds.
    pub network_hdr: NetworkHdr,
    /// Receives of an XRC TGT QP: the XRC SRQ whose WQE completed (SR-02;
    /// the consumer knows the SRQ, not the TGT QP).
    pub xrc_srq: Option<Handle>,
}

/// What a UD receive buffer's first 40 bytes hold (`enum rdma_network_type`):
/// a GRH on InfiniBand, the IP header of a RoCEv2 frame on Ethernet (WF-10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum NetworkHdr {
    #[default]
    Ib,
    Ipv4,
    Ipv6,
}

impl Completion {
    /// A completion with the fields every completion has; the rest zero, for the
    /// caller to fill where its opcode has them.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Completion {
        Completion {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            flags: WcFlags(0),
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            solicited: false,
            smac: None,
            network_hdr: NetworkHdr::Ib,
            xrc_srq: None,
        }
    }
}

/// QP attribute mask bits (`ibv_qp_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AttrMask(pub u32);

impl AttrMask {
    pub const STATE: AttrMask = AttrMask(1);
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    pub const PORT: AttrMask = AttrMask(1 << 5);
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    pub const AV: AttrMask = AttrMask(1 << 7);
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    pub const CAP: AttrMask = AttrMask(1 << 19);
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    /// No bits.
    pub const NONE: AttrMask = AttrMask(0);

    /// Whether every bit of `other` is set here.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// The bits set in `self` and not in `other`.
    pub const fn without(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }
}

impl core::ops::BitOr for AttrMask {
    type Output = AttrMask;
    fn bitor(self, rhs: AttrMask) -> AttrMask {
        AttrMask(self.0 | rhs.0)
    }
}

/// Path MTU (IBA 7.7.8; AD-03), numbered as `ibv_mtu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum Mtu {
    M256 = 1,
    M512 = 2,
    M1024 = 3,
    #[default]
    M2048 = 4,
    M4096 = 5,
}

impl Mtu {
    /// Bytes.
    pub const fn bytes(self) -> usize {
        128 << (self as u8)
    }
}

/// QP attributes (`struct ibv_qp_attr`), valid where `AttrMask` says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttr {
    pub state: Option<QpState>,
    pub cur_state: Option<QpState>,
    pub path_mtu: Mtu,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub access: Access,
    pub pkey_index: u16,
    pub port_num: u8,
    pub av: AddressVector,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout; 0 = infinite (RL-10).
    pub timeout: u8,
    /// Transport retries, 0..=7; 7 means seven (RL-10).
    pub retry_cnt: u8,
    /// RNR retries, 0..=7; 7 means infinite (RL-11).
    pub rnr_retry: u8,
    pub en_sqd_async_notify: bool,
    /// The alternate path (AD-10, `ALT_PATH`; seed 001 "Alternate Path
    /// Address Information", RC and UC): its address vector, ...
    pub alt_av: AddressVector,
    /// ... its P_Key index, ...
    pub alt_pkey_index: u16,
    /// ... its port, ...
    pub alt_port_num: u8,
    /// ... and its Local ACK Timeout exponent (as `timeout`).
    pub alt_timeout: u8,
    /// Path migration state (AD-10, `PATH_MIG_STATE`; IBA 17.2.8).
    pub path_mig_state: MigState,
}

/// Path migration states (IBA 17.2.8; AD-10), numbered as `ibv_mig_state`.
/// Migrated: the QP uses its (primary) path and has no armed alternate.
/// Rearm: the consumer loaded an alternate path and asks to arm it. Armed:
/// both ends may migrate to the alternate path (vhca arms a Rearm request at
/// once: loading the alternate path needs no work of the CA, `engine::apm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum MigState {
    #[default]
    Migrated = 0,
    Rearm = 1,
    Armed = 2,
}

/// QP sizes asked for at creation (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// Create-QP parameters (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpInit {
    pub qp_type: QpType,
    pub pd: Handle,
    pub send_cq: Handle,
    pub recv_cq: Handle,
    pub srq: Option<Handle>,
    pub cap: QpCap,
    /// Every send WR completes, signaled or not.
    pub sq_sig_all: bool,
}

/// Why a verb was refused. Nothing changed when a verb returns one of these
/// (QS-02, QS-09: "all or nothing").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum VerbError {
    #[error("insufficient resources")]
    InsufficientResources,
    #[error("invalid handle or number")]
    InvalidHandle,
    #[error("invalid protection domain")]
    InvalidPd,
    #[error("invalid completion queue")]
    InvalidCq,
    #[error("invalid shared receive queue")]
    InvalidSrq,
    #[error("requested work requests exceed the device's capability")]
    MaxWrExceeded,
    #[error("requested scatter/gather elements exceed the device's capability")]
    MaxSgeExceeded,
    #[error("invalid attribute value")]
    InvalidAttr,
    #[error("invalid state transition or attribute mask")]
    InvalidTransition,
    #[error("queue is full")]
    QueueFull,
    #[error("work request not allowed in the QP's state or service")]
    InvalidWr,
    #[error("resource is in use")]
    Busy,
    #[error("operation not supported")]
    NotSupported,
}

/// Asynchronous events (IBA 11.6.3; AE-01) the engine raises, affiliated with a
/// QP or SRQ, or the port. Completion events of armed CQs (CQ-02) and the CQ
/// error of an overflow (CQ-03) are not among them: a CQ's arming and depth
/// belong to its consumer, the device's CQ ring (ARCHITECTURE.md §4 "who owns
/// what"). `PathMigrated`: the QP moved to its alternate path (AD-10,
/// `IBV_EVENT_PATH_MIG`), its requester after ACK timeouts on the primary path
/// or its responder on a MigReq packet on the alternate path (IBA 17.2.8).
/// `PathMigrationError`: the peer asked for a migration (MigReq = 1 on this
/// QP's alternate path) that the QP could not take, not being Armed
/// (`IBV_EVENT_PATH_MIG_ERR`; AD-10, AE-01).
/// `PageFault`: pages of an ODP MR are not present (issue 29).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Event {
    QpFatal { qpn: u32 },
    QpRequestError { qpn: u32 },
    QpAccessError { qpn: u32 },
    CommEstablished { qpn: u32 },
    SqDrained { qpn: u32 },
    SrqLimitReached { srq: Handle },
    PortActive,
    PortError,
    PathMigrated { qpn: u32 },
    PathMigrationError { qpn: u32 },
    PageFault(PageFault),
}

/// A page fault event (issue 29): `npages` 4 KiB pages from virtual page
/// `vpn` (va >> 12) of ODP MR `key` are not present; `write` when the device
/// must write them, `responder` when an incoming request met them (else the
/// QP's own send queue). The guest answers with a MAP or a FAULT_FAIL of the
/// pages ([`crate::engine::Engine::odp_map`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PageFault {
    pub qpn: u32,
    pub key: u32,
    pub vpn: u64,
    pub npages: u32,
    pub write: bool,
    pub responder: bool,
}

/// The GRH of a received UD message, as `ibv_grh` puts it in the receive buffer's
/// first 40 bytes.
pub type ReceivedGrh = GrhRepr;

/// Where a Reliable Datagram send WR goes (AD-11; IBA 9.7.x, seed 002 "Reliable
/// Datagram": every WR names the EE context it travels on): the local EE
/// context, the destination QP and the Q_Key the destination checks (C9-50).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdDest {
    /// The local EE context (EECN) that carries the message.
    pub eecn: u32,
    pub remote_qpn: u32,
    /// A Q_Key with its high bit set means "use the QP's own" (as UD, PV-05).
    pub remote_qkey: u32,
}

/// Create-QP parameters of an RD QP (AD-11): as [`QpInit`] for the queues, and
/// the RD domain it belongs to (seed 001 "invalid RDD": an RD QP is created in
/// an RDD). No SRQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdQpInit {
    pub pd: Handle,
    pub rdd: Handle,
    pub send_cq: Handle,
    pub recv_cq: Handle,
    pub cap: QpCap,
    pub sq_sig_all: bool,
}

/// What a modify of an RD QP sets (AD-11): the state it moves to, and the
/// Q_Key and remote access rights it sets on the transitions that take them
/// (seed 001 table: Q_Key and RDMA enables for RD at Reset->Init and after).
/// An RD QP has no path, PSNs or timers: those are its EE contexts'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdQpAttr {
    pub state: QpState,
    pub qkey: Option<u32>,
    pub access: Option<Access>,
}

/// EE context attributes (AD-11; IBA 11.2.x Modify EEC, seed 001: the EEC moves
/// through Reset, Init, RTR, RTS and Error like a QP, but has no SQE). A
/// modify to `state` takes the fields that transition sets: Reset->Init the
/// P_Key index; Init->RTR the path (`av`, `path_mtu`), the remote EECN, the
/// receive PSN and the RNR NAK timer; RTR->RTS the send PSN, the local ACK
/// timeout and the retry counts. Other fields are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EecAttr {
    pub pkey_index: u16,
    pub av: AddressVector,
    pub path_mtu: Mtu,
    pub remote_eecn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent: 4.096 us * 2^timeout; 0 = infinite (RL-10).
    pub timeout: u8,
    /// Transport retries, 0..=7 (RL-10).
    pub retry_cnt: u8,
    /// RNR retries, 0..=7; 7 means infinite (RL-11).
    pub rnr_retry: u8,
}
