//! Extension transport headers (IBA 9.3; WF-05, WF-06, WF-07): RDETH, DETH, XRCETH,
//! RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, EOETH, FETH and the CNP's
//! reserved block. Which of them a packet carries, and in which order, is the
//! opcode table's business ([`super::opcode`]).

use super::field::{be16, be24, be32, be64, header_view, set_be16, set_be24, set_be32, set_be64};
use super::opcode::OpcodeInfo;
use super::{DropReason, EmitError};

/// The kinds of extension header the opcode table can list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtKind {
    Rdeth,
    Deth,
    Xrceth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    Feth,
    CnpPad,
}

impl ExtKind {
    /// Length on the wire.
    #[allow(clippy::len_without_is_empty)] // a header kind has a size, never "empty"
    pub const fn len(self) -> usize {
        match self {
            ExtKind::Rdeth | ExtKind::Xrceth | ExtKind::Aeth => 4,
            ExtKind::ImmDt | ExtKind::Ieth | ExtKind::Feth => 4,
            ExtKind::Deth | ExtKind::AtomicAckEth => 8,
            ExtKind::Reth | ExtKind::CnpPad => 16,
            ExtKind::AtomicEth => 28,
        }
    }
}

fn u24(v: u32, what: &'static str) -> Result<u32, EmitError> {
    if v > 0xff_ffff {
        Err(EmitError::FieldRange(what))
    } else {
        Ok(v)
    }
}

// ---------------------------------------------------------------- RDETH (9.3.1)

header_view!(
    /// Reliable Datagram ETH: Resv8 + EE context (9.3.1).
    Rdeth,
    4
);

impl<T: AsRef<[u8]>> Rdeth<T> {
    /// EE context.
    pub fn ee_context(&self) -> u32 {
        be24(&self.buffer.as_ref()[1..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Rdeth<T> {
    /// Sets the EE context; Resv8 becomes 0 (o9-2).
    pub fn set_ee_context(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[0] = 0;
        set_be24(&mut b[1..4], v)
    }
}

/// A validated RDETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RdethRepr {
    pub ee_context: u32,
}

// ---------------------------------------------------------------- DETH (9.3.2)

header_view!(
    /// Datagram ETH: Q_Key, Resv8, SrcQP (9.3.2).
    Deth,
    8
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// Q_Key.
    pub fn qkey(&self) -> u32 {
        be32(&self.buffer.as_ref()[0..4])
    }
    /// Source QP.
    pub fn src_qp(&self) -> u32 {
        be24(&self.buffer.as_ref()[5..8])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Sets Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[0..4], v)
    }
    /// Sets SrcQP; Resv8 becomes 0 (C9-8).
    pub fn set_src_qp(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[4] = 0;
        set_be24(&mut b[5..8], v)
    }
}

/// A validated DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    pub qkey: u32,
    pub src_qp: u32,
}

// ---------------------------------------------------------------- XRCETH (9.3.8)

header_view!(
    /// XRC ETH: Resv8 + XRC SRQ number (9.3.8).
    Xrceth,
    4
);

impl<T: AsRef<[u8]>> Xrceth<T> {
    /// XRC SRQ number.
    pub fn xrc_srq(&self) -> u32 {
        be24(&self.buffer.as_ref()[1..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Xrceth<T> {
    /// Sets the XRC SRQ; Resv8 becomes 0.
    pub fn set_xrc_srq(&mut self, v: u32) {
        let b = self.buffer.as_mut();
        b[0] = 0;
        set_be24(&mut b[1..4], v)
    }
}

/// A validated XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcethRepr {
    pub xrc_srq: u32,
}

// ---------------------------------------------------------------- RETH (9.3.3)

header_view!(
    /// RDMA ETH: VA, R_Key, DMALen (9.3.3).
    Reth,
    16
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// Virtual address; any byte alignment.
    pub fn va(&self) -> u64 {
        be64(&self.buffer.as_ref()[0..8])
    }
    /// R_Key.
    pub fn rkey(&self) -> u32 {
        be32(&self.buffer.as_ref()[8..12])
    }
    /// DMA length, 0..=2^31 (C9-9).
    pub fn dma_len(&self) -> u32 {
        be32(&self.buffer.as_ref()[12..16])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Sets VA.
    pub fn set_va(&mut self, v: u64) {
        set_be64(&mut self.buffer.as_mut()[0..8], v)
    }
    /// Sets R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[8..12], v)
    }
    /// Sets DMALen.
    pub fn set_dma_len(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[12..16], v)
    }
}

/// A validated RETH. DMALen above 2^31 is representable: rejecting it is the
/// responder's job (C9-9, an invalid request NAK), not the codec's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

// ---------------------------------------------------------------- AtomicETH (9.3.4)

header_view!(
    /// Atomic ETH: VA, R_Key, SwapDt (or AddDt), CmpDt (9.3.4).
    AtomicEth,
    28
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// Virtual address (must be 8-byte aligned: the responder checks).
    pub fn va(&self) -> u64 {
        be64(&self.buffer.as_ref()[0..8])
    }
    /// R_Key.
    pub fn rkey(&self) -> u32 {
        be32(&self.buffer.as_ref()[8..12])
    }
    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub fn swap_add(&self) -> u64 {
        be64(&self.buffer.as_ref()[12..20])
    }
    /// Compare data.
    pub fn compare(&self) -> u64 {
        be64(&self.buffer.as_ref()[20..28])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Sets VA.
    pub fn set_va(&mut self, v: u64) {
        set_be64(&mut self.buffer.as_mut()[0..8], v)
    }
    /// Sets R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[8..12], v)
    }
    /// Sets swap/add data.
    pub fn set_swap_add(&mut self, v: u64) {
        set_be64(&mut self.buffer.as_mut()[12..20], v)
    }
    /// Sets compare data.
    pub fn set_compare(&mut self, v: u64) {
        set_be64(&mut self.buffer.as_mut()[20..28], v)
    }
}

/// A validated AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

// ---------------------------------------------------------------- AETH (9.3.5)

header_view!(
    /// ACK ETH: Syndrome + MSN (9.3.5).
    Aeth,
    4
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// The raw syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// Message sequence number.
    pub fn msn(&self) -> u32 {
        be24(&self.buffer.as_ref()[1..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Sets the raw syndrome byte.
    pub fn set_syndrome(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v
    }
    /// Sets MSN.
    pub fn set_msn(&mut self, v: u32) {
        set_be24(&mut self.buffer.as_mut()[1..4], v)
    }
}

/// NAK codes (IBA Table 45; RL-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
}

impl NakCode {
    /// Every NAK code.
    pub const ALL: [NakCode; 5] = [
        NakCode::PsnSequenceError,
        NakCode::InvalidRequest,
        NakCode::RemoteAccessError,
        NakCode::RemoteOperationalError,
        NakCode::InvalidRdRequest,
    ];

    fn code(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }
}

/// The decoded AETH syndrome (IBA Table 44): bits \[6:5\] say ACK, RNR NAK or NAK,
/// bits \[4:0\] carry the credit count, the RNR timer or the NAK code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// ACK with a 5-bit credit count code (31 = no credit count; RL-13).
    Ack { credit_code: u8 },
    /// RNR NAK with a 5-bit timer code (RL-11).
    RnrNak { timer_code: u8 },
    /// NAK with an error code (RL-12).
    Nak(NakCode),
}

/// Credit code 31: the responder does not report a credit count (9.7.7.2).
pub const CREDIT_CODE_INVALID: u8 = 31;

/// Credits for each credit code 0..=30 (IBA Table 46).
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// RNR NAK timer for each timer code, in microseconds (IBA Table 47); code 0 is the
/// longest, 655.36 ms.
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
    5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122_880, 163_840, 245_760,
    327_680, 491_520,
];

impl AethSyndrome {
    /// Decodes a syndrome byte; a reserved encoding is `None`.
    pub fn from_u8(b: u8) -> Option<AethSyndrome> {
        if b & 0x80 != 0 {
            return None; // bit 7 is reserved
        }
        let low = b & 0x1f;
        match (b >> 5) & 3 {
            0 => Some(AethSyndrome::Ack { credit_code: low }),
            1 => Some(AethSyndrome::RnrNak { timer_code: low }),
            3 => NakCode::ALL
                .iter()
                .find(|c| c.code() == low)
                .map(|c| AethSyndrome::Nak(*c)),
            _ => None,
        }
    }

    /// Encodes the syndrome byte.
    pub fn to_u8(self) -> u8 {
        match self {
            AethSyndrome::Ack { credit_code } => credit_code & 0x1f,
            AethSyndrome::RnrNak { timer_code } => 0x20 | (timer_code & 0x1f),
            AethSyndrome::Nak(c) => 0x60 | c.code(),
        }
    }

    /// The credit count an ACK grants, `None` for "no credit count" or a NAK.
    pub fn credits(self) -> Option<u32> {
        match self {
            AethSyndrome::Ack { credit_code } => CREDITS.get(usize::from(credit_code)).copied(),
            _ => None,
        }
    }

    /// The RNR NAK timer in microseconds.
    pub fn rnr_timer_us(self) -> Option<u32> {
        match self {
            AethSyndrome::RnrNak { timer_code } => {
                RNR_TIMER_US.get(usize::from(timer_code)).copied()
            }
            _ => None,
        }
    }
}

/// A validated AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: AethSyndrome,
    pub msn: u32,
}

// ---------------------------------------------------------------- AtomicAckETH (9.3.5.3)

header_view!(
    /// Atomic ACK ETH: the original remote data (9.3.5.3).
    AtomicAckEth,
    8
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// Original remote data.
    pub fn orig_remote_data(&self) -> u64 {
        be64(&self.buffer.as_ref()[0..8])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Sets the original remote data.
    pub fn set_orig_remote_data(&mut self, v: u64) {
        set_be64(&mut self.buffer.as_mut()[0..8], v)
    }
}

/// A validated AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    pub orig_remote_data: u64,
}

// ---------------------------------------------------------------- ImmDt, IETH (9.3.6, 9.3.7)

header_view!(
    /// Immediate data, 4 bytes (9.3.6).
    ImmDt,
    4
);

header_view!(
    /// Invalidate ETH: the R_Key to invalidate (9.3.7).
    Ieth,
    4
);

impl<T: AsRef<[u8]>> ImmDt<T> {
    /// The immediate data, as sent.
    pub fn value(&self) -> u32 {
        be32(&self.buffer.as_ref()[0..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    /// Sets the immediate data.
    pub fn set_value(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[0..4], v)
    }
}

impl<T: AsRef<[u8]>> Ieth<T> {
    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        be32(&self.buffer.as_ref()[0..4])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    /// Sets the R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[0..4], v)
    }
}

// ---------------------------------------------------------------- EOETH (9.3.9)

header_view!(
    /// Extended Opcode ETH: Resv16, ExtOpcode, response data length, offset (9.3.9).
    Eoeth,
    12
);

impl<T: AsRef<[u8]>> Eoeth<T> {
    /// Extended opcode.
    pub fn ext_opcode(&self) -> u16 {
        be16(&self.buffer.as_ref()[2..4])
    }
    /// Response data length (GET).
    pub fn resp_data_len(&self) -> u32 {
        be32(&self.buffer.as_ref()[4..8])
    }
    /// Offset of the part already done in a multi-packet request.
    pub fn offset(&self) -> u32 {
        be32(&self.buffer.as_ref()[8..12])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Eoeth<T> {
    /// Sets the extended opcode; Resv16 becomes 0.
    pub fn set_ext_opcode(&mut self, v: u16) {
        let b = self.buffer.as_mut();
        set_be16(&mut b[0..2], 0);
        set_be16(&mut b[2..4], v)
    }
    /// Sets the response data length.
    pub fn set_resp_data_len(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[4..8], v)
    }
    /// Sets the offset.
    pub fn set_offset(&mut self, v: u32) {
        set_be32(&mut self.buffer.as_mut()[8..12], v)
    }
}

/// A validated EOETH. No opcode row carries it yet: the seeds define the header but
/// not the GET/PUT opcode values (OP-12, tier 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EoethRepr {
    pub ext_opcode: u16,
    pub resp_data_len: u32,
    pub offset: u32,
}

impl EoethRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(v: &Eoeth<T>) -> EoethRepr {
        EoethRepr {
            ext_opcode: v.ext_opcode(),
            resp_data_len: v.resp_data_len(),
            offset: v.offset(),
        }
    }

    /// Writes into a view.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Eoeth<T>) {
        v.set_ext_opcode(self.ext_opcode);
        v.set_resp_data_len(self.resp_data_len);
        v.set_offset(self.offset);
    }
}

// ---------------------------------------------------------------- FETH (IBA 1.5 FLUSH)

header_view!(
    /// Flush ETH: selectivity level and placement type of a FLUSH (IBA 1.5).
    Feth,
    4
);

impl<T: AsRef<[u8]>> Feth<T> {
    /// Placement type, bits \[3:0\].
    pub fn placement_type(&self) -> u8 {
        self.buffer.as_ref()[3] & 0xf
    }
    /// Selectivity level, bits \[5:4\].
    pub fn selectivity(&self) -> u8 {
        (self.buffer.as_ref()[3] >> 4) & 3
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    /// Sets both fields; reserved bits become 0.
    pub fn set(&mut self, selectivity: u8, placement_type: u8) {
        let b = self.buffer.as_mut();
        b[..3].fill(0);
        b[3] = ((selectivity & 3) << 4) | (placement_type & 0xf);
    }
}

/// A validated FETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FethRepr {
    pub selectivity: u8,
    pub placement_type: u8,
}

header_view!(
    /// The CNP's 16 reserved bytes (RoCEv2 annex A17), sent as 0.
    CnpPad,
    16
);

// ---------------------------------------------------------------- all of them

/// The extension headers of one packet. Exactly those the opcode's row lists are
/// `Some`; [`ExtHeaders::emit`] refuses any other combination.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ExtHeaders {
    pub rdeth: Option<RdethRepr>,
    pub deth: Option<DethRepr>,
    pub xrceth: Option<XrcethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    pub imm_dt: Option<u32>,
    pub ieth: Option<u32>,
    pub feth: Option<FethRepr>,
    /// Present (all-zero on the wire) exactly for the CNP.
    pub cnp: bool,
}

impl ExtHeaders {
    fn present(&self, kind: ExtKind) -> bool {
        match kind {
            ExtKind::Rdeth => self.rdeth.is_some(),
            ExtKind::Deth => self.deth.is_some(),
            ExtKind::Xrceth => self.xrceth.is_some(),
            ExtKind::Reth => self.reth.is_some(),
            ExtKind::AtomicEth => self.atomic_eth.is_some(),
            ExtKind::Aeth => self.aeth.is_some(),
            ExtKind::AtomicAckEth => self.atomic_ack_eth.is_some(),
            ExtKind::ImmDt => self.imm_dt.is_some(),
            ExtKind::Ieth => self.ieth.is_some(),
            ExtKind::Feth => self.feth.is_some(),
            ExtKind::CnpPad => self.cnp,
        }
    }

    /// Whether the headers present are exactly those `info` lists.
    pub fn matches(&self, info: &OpcodeInfo) -> bool {
        // Runs on every emit (WF-09): compare one presence bitmask with the opcode
        // row's (at most three kinds) instead of scanning the row per kind.
        let want = info.headers.iter().fold(0u16, |m, k| m | 1 << (*k as u16));
        const KINDS: [ExtKind; 11] = [
            ExtKind::Rdeth,
            ExtKind::Deth,
            ExtKind::Xrceth,
            ExtKind::Reth,
            ExtKind::AtomicEth,
            ExtKind::Aeth,
            ExtKind::AtomicAckEth,
            ExtKind::ImmDt,
            ExtKind::Ieth,
            ExtKind::Feth,
            ExtKind::CnpPad,
        ];
        let have = KINDS
            .iter()
            .fold(0u16, |m, k| m | u16::from(self.present(*k)) << (*k as u16));
        have == want
    }

    /// Parses the headers `info` lists from the start of `buf`. The caller has
    /// checked that `buf` holds `info.headers_len()` bytes; a short buffer is still
    /// a [`DropReason::Truncated`], never a panic.
    pub fn parse(info: &OpcodeInfo, buf: &[u8]) -> Result<ExtHeaders, DropReason> {
        let mut h = ExtHeaders::default();
        let mut at = 0;
        for kind in info.headers {
            let b = buf.get(at..at + kind.len()).ok_or(DropReason::Truncated)?;
            match kind {
                ExtKind::Rdeth => {
                    let v = Rdeth::new_unchecked(b);
                    h.rdeth = Some(RdethRepr {
                        ee_context: v.ee_context(),
                    });
                }
                ExtKind::Deth => {
                    let v = Deth::new_unchecked(b);
                    h.deth = Some(DethRepr {
                        qkey: v.qkey(),
                        src_qp: v.src_qp(),
                    });
                }
                ExtKind::Xrceth => {
                    h.xrceth = Some(XrcethRepr {
                        xrc_srq: Xrceth::new_unchecked(b).xrc_srq(),
                    });
                }
                ExtKind::Reth => {
                    let v = Reth::new_unchecked(b);
                    h.reth = Some(RethRepr {
                        va: v.va(),
                        rkey: v.rkey(),
                        dma_len: v.dma_len(),
                    });
                }
                ExtKind::AtomicEth => {
                    let v = AtomicEth::new_unchecked(b);
                    h.atomic_eth = Some(AtomicEthRepr {
                        va: v.va(),
                        rkey: v.rkey(),
                        swap_add: v.swap_add(),
                        compare: v.compare(),
                    });
                }
                ExtKind::Aeth => {
                    let v = Aeth::new_unchecked(b);
                    let syndrome =
                        AethSyndrome::from_u8(v.syndrome()).ok_or(DropReason::ReservedSyndrome)?;
                    h.aeth = Some(AethRepr {
                        syndrome,
                        msn: v.msn(),
                    });
                }
                ExtKind::AtomicAckEth => {
                    h.atomic_ack_eth = Some(AtomicAckEthRepr {
                        orig_remote_data: AtomicAckEth::new_unchecked(b).orig_remote_data(),
                    });
                }
                ExtKind::ImmDt => h.imm_dt = Some(ImmDt::new_unchecked(b).value()),
                ExtKind::Ieth => h.ieth = Some(Ieth::new_unchecked(b).rkey()),
                ExtKind::Feth => {
                    let v = Feth::new_unchecked(b);
                    h.feth = Some(FethRepr {
                        selectivity: v.selectivity(),
                        placement_type: v.placement_type(),
                    });
                }
                ExtKind::CnpPad => h.cnp = true,
            }
            at += kind.len();
        }
        Ok(h)
    }

    /// Writes the headers `info` lists, in its order, to the start of `buf`;
    /// returns the bytes written.
    pub fn emit(&self, info: &OpcodeInfo, buf: &mut [u8]) -> Result<usize, EmitError> {
        if !self.matches(info) {
            return Err(EmitError::HeadersMismatch);
        }
        let total = info.headers_len();
        if buf.len() < total {
            return Err(EmitError::BufferTooSmall);
        }
        let mut at = 0;
        for kind in info.headers {
            let b = &mut buf[at..at + kind.len()];
            // `matches` above proved each listed header is present.
            match kind {
                ExtKind::Rdeth => {
                    let r = self.rdeth.ok_or(EmitError::HeadersMismatch)?;
                    Rdeth::new_unchecked(b).set_ee_context(u24(r.ee_context, "RDETH:EEC")?);
                }
                ExtKind::Deth => {
                    let r = self.deth.ok_or(EmitError::HeadersMismatch)?;
                    let mut v = Deth::new_unchecked(b);
                    v.set_qkey(r.qkey);
                    v.set_src_qp(u24(r.src_qp, "DETH:SrcQP")?);
                }
                ExtKind::Xrceth => {
                    let r = self.xrceth.ok_or(EmitError::HeadersMismatch)?;
                    Xrceth::new_unchecked(b).set_xrc_srq(u24(r.xrc_srq, "XRCETH:XRCSRQ")?);
                }
                ExtKind::Reth => {
                    let r = self.reth.ok_or(EmitError::HeadersMismatch)?;
                    let mut v = Reth::new_unchecked(b);
                    v.set_va(r.va);
                    v.set_rkey(r.rkey);
                    v.set_dma_len(r.dma_len);
                }
                ExtKind::AtomicEth => {
                    let r = self.atomic_eth.ok_or(EmitError::HeadersMismatch)?;
                    let mut v = AtomicEth::new_unchecked(b);
                    v.set_va(r.va);
                    v.set_rkey(r.rkey);
                    v.set_swap_add(r.swap_add);
                    v.set_compare(r.compare);
                }
                ExtKind::Aeth => {
                    let r = self.aeth.ok_or(EmitError::HeadersMismatch)?;
                    let mut v = Aeth::new_unchecked(b);
                    v.set_syndrome(r.syndrome.to_u8());
                    v.set_msn(u24(r.msn, "AETH:MSN")?);
                }
                ExtKind::AtomicAckEth => {
                    let r = self.atomic_ack_eth.ok_or(EmitError::HeadersMismatch)?;
                    AtomicAckEth::new_unchecked(b).set_orig_remote_data(r.orig_remote_data);
                }
                ExtKind::ImmDt => {
                    let r = self.imm_dt.ok_or(EmitError::HeadersMismatch)?;
                    ImmDt::new_unchecked(b).set_value(r);
                }
                ExtKind::Ieth => {
                    let r = self.ieth.ok_or(EmitError::HeadersMismatch)?;
                    Ieth::new_unchecked(b).set_rkey(r);
                }
                ExtKind::Feth => {
                    let r = self.feth.ok_or(EmitError::HeadersMismatch)?;
                    if r.selectivity > 3 || r.placement_type > 15 {
                        return Err(EmitError::FieldRange("FETH"));
                    }
                    Feth::new_unchecked(b).set(r.selectivity, r.placement_type);
                }
                ExtKind::CnpPad => b.fill(0),
            }
            at += kind.len();
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wf_05_aeth_syndrome_decodes_every_defined_encoding() {
        for b in 0u8..=255 {
            match AethSyndrome::from_u8(b) {
                Some(s) => assert_eq!(s.to_u8(), b),
                None => {
                    assert!(b & 0x80 != 0 || (b >> 5) & 3 == 2 || (b >> 5) == 3 && b & 0x1f > 4)
                }
            }
        }
        assert_eq!(AethSyndrome::from_u8(0x1f).unwrap().credits(), None);
        assert_eq!(AethSyndrome::from_u8(0x05).unwrap().credits(), Some(6));
        assert_eq!(
            AethSyndrome::from_u8(0x20).unwrap().rnr_timer_us(),
            Some(655_360)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x3f).unwrap().rnr_timer_us(),
            Some(491_520)
        );
        assert_eq!(
            AethSyndrome::from_u8(0x61),
            Some(AethSyndrome::Nak(NakCode::InvalidRequest))
        );
    }

    #[test]
    fn wf_07_eoeth_round_trips() {
        let r = EoethRepr {
            ext_opcode: 0xbeef,
            resp_data_len: 0x1234_5678,
            offset: 4096,
        };
        let mut b = [0xffu8; 12];
        r.emit(&mut Eoeth::new_unchecked(&mut b[..]));
        assert_eq!(&b[..2], &[0, 0], "Resv16 sent as 0");
        assert_eq!(EoethRepr::parse(&Eoeth::new_checked(&b[..]).unwrap()), r);
        assert_eq!(
            Eoeth::new_checked(&b[..11]).unwrap_err(),
            DropReason::Truncated
        );
    }
}
