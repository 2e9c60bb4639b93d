//! The QP state machine (IBA 10.3, 11.2.5; seed 001; QS-01..QS-07) as one table.
//!
//! [`TRANSITIONS`] lists every transition Modify QP may request and, for each kind of
//! QP, the attribute-mask bits that transition requires and the ones it accepts.
//! [`check_modify`] validates a Modify QP request against it and against the value
//! ranges of the attributes, as a pure function: on `Err` the caller leaves the QP
//! exactly as it was (QS-02, "all or nothing"); on `Ok` it gets the next state and
//! applies the masked attributes itself.
//!
//! # Sources, and where they disagree
//!
//! The table merges two sources. Seed 001 (IBA's Modify QP input tables, through the
//! book's notes) says what the spec requires. The guest's Linux drivers check masks
//! with `ib_modify_qp_is_ok()` and its `qp_state_table` (drivers/infiniband/core/
//! verbs.c) before anything reaches the device, so a mask Linux refuses never
//! arrives and a mask Linux accepts must not be refused here, or the guest cannot
//! drive the QP at all. The rule used: a bit is *required* only where both sources
//! require it (the seed's extra requirements would make valid Linux masks fail), and
//! a bit is *accepted* where either source allows it (except what this device does
//! not implement: resizing queues, `CAP`). Row by row:
//!
//! * Reset→Init, access flags. The seed requires "enable incoming RDMA Writes" for
//!   "RC, RD, UD" and nothing for UC; UD has no RDMA (seed 002) and the seed's own
//!   Init→RTR row lists the same flag for "RC, RD, UC", so "UD" is a slip for "UC".
//!   Linux requires `ACCESS_FLAGS` for RC and UC and refuses it for UD: so do we.
//! * Reset→Init for QP0/QP1 ([`QpKind::Smi`], [`QpKind::Gsi`]): not in the seed (it
//!   covers application QPs). Linux requires `PKEY_INDEX | QKEY` and refuses `PORT`
//!   (a special QP is bound to its port when created); ib_mad sends exactly that.
//! * Init→Init, RTS→RTS, SQD→SQD: the seed has no such rows (it says Init may only
//!   go to RTR, and RTS is entered only from RTR, SQD and SQE). Linux allows all
//!   three with optional attributes only, and real HCAs implement them (mlx5's
//!   INIT2INIT, RTS2RTS, SQD2SQD commands): allowed, with Linux's optional sets.
//! * Init→RTR, RC, `MIN_RNR_TIMER`: optional in the seed, required by Linux. Optional
//!   here (every Linux mask has it, so nothing Linux sends is refused).
//! * Init→RTR, "Remote Node Address Vector": the seed folds PMTU, Local ACK Timeout,
//!   Retry Count and RNR Retry Count into it (and notes that the two retry counts are
//!   to be dropped from that list). Here AV is `AV | PATH_MTU` as in Linux; Linux
//!   refuses `TIMEOUT`, `RETRY_CNT` and `RNR_RETRY` at Init→RTR and both sources
//!   require them at RTR→RTS, so they are not accepted at Init→RTR.
//! * "New SQ and/or RQ size" (`CAP`): optional in the seed's Init→RTR, RTR→RTS and
//!   SQD→RTS rows "if the HCA supports resizing"; Linux never accepts it; this device
//!   does not resize queues, so `CAP` is refused everywhere.
//! * `CUR_STATE`: absent from the seed's tables; Linux accepts it (optional) at
//!   RTR→RTS, RTS→RTS, SQD→RTS and SQE→RTS, the transitions whose source state the
//!   QP may have left on its own (RTS→SQE, SQD drained). Same here; when given, the
//!   value must be the QP's actual current state, else `InvalidTransition`: the
//!   consumer's view of the QP is stale and the request was made for another state.
//! * SQD→RTS: the seed *requires* (RC) "queue depth for inbound RDMA Read/Atomic"
//!   (`MAX_DEST_RD_ATOMIC`), Retry Count and RNR Retry Count, and allows AV, alt path,
//!   path migration state, initiator depth, Q_Key, P_Key index, Local ACK Timeout,
//!   minimum RNR timer and port. Linux requires nothing there and accepts only
//!   `CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE` (+ `MIN_RNR_TIMER` for RC,
//!   `QKEY` for UD); it takes the path and retry attributes at SQD→SQD instead.
//!   Requiring the seed's three bits would make every Linux SQD→RTS fail, so nothing
//!   is required; everything either source allows at SQD→RTS or SQD→SQD is accepted
//!   at both (QS-05: attributes changeable while drained).
//! * SQE→RTS: no table in the seed. Linux: UC `CUR_STATE | ACCESS_FLAGS`, UD and the
//!   special QPs `CUR_STATE | QKEY`, and a valid-but-empty entry for RC. RC has no
//!   SQE state (seed 10.1, QS-06), so here the transition does not exist for RC.
//! * Reset→Error: the seed allows entering Error "from any state" (QS-01); Linux's
//!   table has no Reset→Error entry, so a Linux guest never asks. Allowed here (mlx5
//!   firmware also has a 2ERR command from RST).

use crate::verbs::{AttrMask, Mtu, QpAttr, QpState, QpType, VerbError};

/// What the state table distinguishes a QP by: its service type, plus the two
/// special QPs ib_core opens on each IB port (QP0 for SMPs, QP1 for GMPs; both
/// UD-like, bound to their port at creation; ARCHITECTURE.md §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpKind {
    Rc = 0,
    Uc = 1,
    Ud = 2,
    /// QP1, the General Services Interface QP.
    Gsi = 3,
    /// QP0, the Subnet Management Interface QP.
    Smi = 4,
}

impl QpKind {
    /// Every kind, in table column order.
    pub const ALL: [QpKind; 5] = [QpKind::Rc, QpKind::Uc, QpKind::Ud, QpKind::Gsi, QpKind::Smi];
}

impl From<QpType> for QpKind {
    fn from(t: QpType) -> QpKind {
        match t {
            QpType::Rc => QpKind::Rc,
            QpType::Uc => QpKind::Uc,
            QpType::Ud => QpKind::Ud,
            // SR-02: XRC's halves follow RC's table, with the masks Linux
            // asks of them made RC's (`engine::xrc::rc_mask`).
            QpType::XrcIni | QpType::XrcTgt => QpKind::Rc,
        }
    }
}

/// The attribute bits one transition requires and the ones it also accepts. `STATE`
/// is in neither: it is what selects the transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Masks {
    pub required: AttrMask,
    pub optional: AttrMask,
}

/// One row of the table: a transition and its masks per [`QpKind`] (indexed by
/// `QpKind as usize`; `None`: the transition does not exist for that kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// Source state; `None` matches every state.
    pub from: Option<QpState>,
    pub to: QpState,
    pub masks: [Option<Masks>; 5],
}

/// Ports of the device (one).
pub const NUM_PORTS: u8 = 1;
/// Entries of the port's P_Key table (one: 0xFFFF at index 0; ARCHITECTURE.md §7).
pub const PKEY_TABLE_LEN: u16 = 1;
/// Device limit on RDMA Read/Atomic depth, both as initiator (`max_rd_atomic`,
/// `max_qp_init_rd_atom`) and as responder (`max_dest_rd_atomic`, `max_qp_rd_atom`).
pub const MAX_RD_ATOMIC: u8 = 16;

/// The device and port limits attribute values are checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    pub num_ports: u8,
    pub pkey_table_len: u16,
    /// Largest `max_rd_atomic` (initiator depth).
    pub max_rd_atomic: u8,
    /// Largest `max_dest_rd_atomic` (responder resources).
    pub max_dest_rd_atomic: u8,
    /// Largest path MTU the port supports.
    pub max_mtu: Mtu,
}

impl Limits {
    /// This device's limits.
    pub const DEVICE: Limits = Limits {
        num_ports: NUM_PORTS,
        pkey_table_len: PKEY_TABLE_LEN,
        max_rd_atomic: MAX_RD_ATOMIC,
        max_dest_rd_atomic: MAX_RD_ATOMIC,
        max_mtu: Mtu::M4096,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEVICE
    }
}

// Short names for the mask bits, to keep the table readable.
const STATE: AttrMask = AttrMask::STATE;
const CUR: AttrMask = AttrMask::CUR_STATE;
const SQD_NOTIFY: AttrMask = AttrMask::EN_SQD_ASYNC_NOTIFY;
const ACCESS: AttrMask = AttrMask::ACCESS_FLAGS;
const PKEY: AttrMask = AttrMask::PKEY_INDEX;
const PORT: AttrMask = AttrMask::PORT;
const QKEY: AttrMask = AttrMask::QKEY;
const AV: AttrMask = AttrMask::AV;
const MTU: AttrMask = AttrMask::PATH_MTU;
const TIMEOUT: AttrMask = AttrMask::TIMEOUT;
const RETRY: AttrMask = AttrMask::RETRY_CNT;
const RNR_RETRY: AttrMask = AttrMask::RNR_RETRY;
const RQ_PSN: AttrMask = AttrMask::RQ_PSN;
const RD_ATOMIC: AttrMask = AttrMask::MAX_QP_RD_ATOMIC;
const ALT_PATH: AttrMask = AttrMask::ALT_PATH;
const RNR_TIMER: AttrMask = AttrMask::MIN_RNR_TIMER;
const SQ_PSN: AttrMask = AttrMask::SQ_PSN;
const DEST_RD_ATOMIC: AttrMask = AttrMask::MAX_DEST_RD_ATOMIC;
const MIG: AttrMask = AttrMask::PATH_MIG_STATE;
const DEST_QPN: AttrMask = AttrMask::DEST_QPN;

/// Every bit `ibv_qp_attr_mask` defines up to `DEST_QPN` (what [`AttrMask`] names).
pub const KNOWN_BITS: AttrMask = AttrMask((1 << 21) - 1);

/// The union of `bits`.
const fn or(bits: &[AttrMask]) -> AttrMask {
    let mut acc = 0;
    let mut i = 0;
    while i < bits.len() {
        acc |= bits[i].0;
        i += 1;
    }
    AttrMask(acc)
}

const fn some(required: AttrMask, optional: AttrMask) -> Option<Masks> {
    Some(Masks { required, optional })
}

const NO_ATTRS: Option<Masks> = some(AttrMask::NONE, AttrMask::NONE);

/// What may change while the SQ is drained (SQD→SQD and SQD→RTS), per kind: the
/// seed's SQD→RTS attributes (required and optional, minus `CAP`) together with
/// Linux's SQD→SQD and SQD→RTS optional sets. Port (RC only in the seed) can only be
/// port 1 here, but is accepted.
const DRAINED_RC: AttrMask = or(&[
    PORT,
    AV,
    MTU,
    TIMEOUT,
    RETRY,
    RNR_RETRY,
    RD_ATOMIC,
    DEST_RD_ATOMIC,
    ALT_PATH,
    ACCESS,
    PKEY,
    RNR_TIMER,
    MIG,
]);
const DRAINED_UC: AttrMask = or(&[AV, MTU, ALT_PATH, ACCESS, PKEY, MIG]);
const DRAINED_UD: AttrMask = or(&[PKEY, QKEY]);

/// The state machine: every transition Modify QP may ask for, with the attribute
/// masks per kind (columns: RC, UC, UD, GSI, SMI). See the module docs for where
/// each entry comes from. Rows with a concrete source come first; lookup takes the
/// first match.
pub static TRANSITIONS: &[Transition] = &[
    // Reset -> Init (seed §5).
    Transition {
        from: Some(QpState::Reset),
        to: QpState::Init,
        masks: [
            some(or(&[PKEY, PORT, ACCESS]), AttrMask::NONE),
            some(or(&[PKEY, PORT, ACCESS]), AttrMask::NONE),
            some(or(&[PKEY, PORT, QKEY]), AttrMask::NONE),
            some(or(&[PKEY, QKEY]), AttrMask::NONE),
            some(or(&[PKEY, QKEY]), AttrMask::NONE),
        ],
    },
    // Init -> Init (Linux only): change what Reset -> Init set.
    Transition {
        from: Some(QpState::Init),
        to: QpState::Init,
        masks: [
            some(AttrMask::NONE, or(&[PKEY, PORT, ACCESS])),
            some(AttrMask::NONE, or(&[PKEY, PORT, ACCESS])),
            some(AttrMask::NONE, or(&[PKEY, PORT, QKEY])),
            some(AttrMask::NONE, or(&[PKEY, QKEY])),
            some(AttrMask::NONE, or(&[PKEY, QKEY])),
        ],
    },
    // Init -> RTR (seed §6).
    Transition {
        from: Some(QpState::Init),
        to: QpState::Rtr,
        masks: [
            some(
                or(&[AV, MTU, DEST_QPN, RQ_PSN, DEST_RD_ATOMIC]),
                or(&[RNR_TIMER, ALT_PATH, ACCESS, PKEY]),
            ),
            some(
                or(&[AV, MTU, DEST_QPN, RQ_PSN]),
                or(&[ALT_PATH, ACCESS, PKEY]),
            ),
            some(AttrMask::NONE, or(&[PKEY, QKEY])),
            some(AttrMask::NONE, or(&[PKEY, QKEY])),
            some(AttrMask::NONE, or(&[PKEY, QKEY])),
        ],
    },
    // RTR -> RTS (seed §7).
    Transition {
        from: Some(QpState::Rtr),
        to: QpState::Rts,
        masks: [
            some(
                or(&[TIMEOUT, RETRY, RNR_RETRY, SQ_PSN, RD_ATOMIC]),
                or(&[CUR, ALT_PATH, ACCESS, RNR_TIMER, MIG]),
            ),
            some(SQ_PSN, or(&[CUR, ALT_PATH, ACCESS, MIG])),
            some(SQ_PSN, or(&[CUR, QKEY])),
            some(SQ_PSN, or(&[CUR, QKEY])),
            some(SQ_PSN, or(&[CUR, QKEY])),
        ],
    },
    // RTS -> RTS (Linux only): change the operational attributes in place.
    Transition {
        from: Some(QpState::Rts),
        to: QpState::Rts,
        masks: [
            some(AttrMask::NONE, or(&[CUR, ACCESS, ALT_PATH, MIG, RNR_TIMER])),
            some(AttrMask::NONE, or(&[CUR, ACCESS, ALT_PATH, MIG])),
            some(AttrMask::NONE, or(&[CUR, QKEY])),
            some(AttrMask::NONE, or(&[CUR, QKEY])),
            some(AttrMask::NONE, or(&[CUR, QKEY])),
        ],
    },
    // RTS -> SQD (seed §8): only the drained-event request.
    Transition {
        from: Some(QpState::Rts),
        to: QpState::Sqd,
        masks: [
            some(AttrMask::NONE, SQD_NOTIFY),
            some(AttrMask::NONE, SQD_NOTIFY),
            some(AttrMask::NONE, SQD_NOTIFY),
            some(AttrMask::NONE, SQD_NOTIFY),
            some(AttrMask::NONE, SQD_NOTIFY),
        ],
    },
    // SQD -> RTS (seed §9; nothing required, see module docs).
    Transition {
        from: Some(QpState::Sqd),
        to: QpState::Rts,
        masks: [
            some(AttrMask::NONE, or(&[CUR, DRAINED_RC])),
            some(AttrMask::NONE, or(&[CUR, DRAINED_UC])),
            some(AttrMask::NONE, or(&[CUR, DRAINED_UD])),
            some(AttrMask::NONE, or(&[CUR, DRAINED_UD])),
            some(AttrMask::NONE, or(&[CUR, DRAINED_UD])),
        ],
    },
    // SQD -> SQD (Linux only): change attributes and stay drained.
    Transition {
        from: Some(QpState::Sqd),
        to: QpState::Sqd,
        masks: [
            some(AttrMask::NONE, DRAINED_RC),
            some(AttrMask::NONE, DRAINED_UC),
            some(AttrMask::NONE, DRAINED_UD),
            some(AttrMask::NONE, DRAINED_UD),
            some(AttrMask::NONE, DRAINED_UD),
        ],
    },
    // SQE -> RTS (seed §10.3-10.4; RC has no SQE, QS-06).
    Transition {
        from: Some(QpState::Sqe),
        to: QpState::Rts,
        masks: [
            None,
            some(AttrMask::NONE, or(&[CUR, ACCESS])),
            some(AttrMask::NONE, or(&[CUR, QKEY])),
            some(AttrMask::NONE, or(&[CUR, QKEY])),
            some(AttrMask::NONE, or(&[CUR, QKEY])),
        ],
    },
    // Any -> Reset, any -> Error, without attributes (seed §1, §5, §11; QS-01).
    Transition {
        from: None,
        to: QpState::Reset,
        masks: [NO_ATTRS; 5],
    },
    Transition {
        from: None,
        to: QpState::Error,
        masks: [NO_ATTRS; 5],
    },
];

/// The masks of the transition `from -> to` for `kind`, or `None` when Modify QP
/// cannot ask for it.
pub fn transition_masks(kind: QpKind, from: QpState, to: QpState) -> Option<Masks> {
    TRANSITIONS
        .iter()
        .find(|t| t.to == to && t.from.is_none_or(|f| f == from))
        .and_then(|t| t.masks[kind as usize])
}

/// Validates a Modify QP of a `qp_type` QP now in `cur` against the table and
/// [`Limits::DEVICE`]; returns the state the QP moves to. See [`check_modify_kind`].
pub fn check_modify(
    qp_type: QpType,
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
) -> Result<QpState, VerbError> {
    check_modify_kind(qp_type.into(), cur, attr, mask, &Limits::DEVICE)
}

/// Validates a Modify QP (IBA 11.2.5.2) of a `kind` QP now in `cur`; returns the
/// state the QP moves to. Pure: nothing changes on either outcome.
///
/// * `STATE` in `mask` selects the next state (`attr.state`, which must then be
///   `Some`, else `InvalidAttr`); without it the QP stays in `cur`, which must itself
///   be a transition of the table (`cur -> cur`).
/// * `InvalidTransition`: the transition is not in the table for `kind`, a required
///   bit is missing, a bit is outside required | optional | `STATE`, or `CUR_STATE`
///   is given with a value other than `cur`.
/// * `InvalidAttr`: a masked attribute's value is out of range (see
///   [`check_values`]).
pub fn check_modify_kind(
    kind: QpKind,
    cur: QpState,
    attr: &QpAttr,
    mask: AttrMask,
    limits: &Limits,
) -> Result<QpState, VerbError> {
    let next = if mask.contains(STATE) {
        attr.state.ok_or(VerbError::InvalidAttr)?
    } else {
        cur
    };
    let masks = transition_masks(kind, cur, next).ok_or(VerbError::InvalidTransition)?;
    let given = mask.without(STATE);
    if !given.contains(masks.required) {
        return Err(VerbError::InvalidTransition);
    }
    if given.without(masks.required | masks.optional) != AttrMask::NONE {
        return Err(VerbError::InvalidTransition);
    }
    if given.contains(CUR) && attr.cur_state != Some(cur) {
        return Err(VerbError::InvalidTransition);
    }
    check_values(attr, given, limits)?;
    Ok(next)
}

/// Range checks of the attributes `mask` selects (`InvalidAttr` on the first bad
/// one): PSNs and the destination QPN fit 24 bits; retry counts 0..=7; ACK timeout
/// and RNR timer codes 0..=31; port `1..=num_ports`; P_Key index within the table;
/// RDMA Read/Atomic depths within the device's; path MTU within the port's; AV's SL
/// 0..=15, source path bits 0..=127 and flow label 20 bits.
pub fn check_values(attr: &QpAttr, mask: AttrMask, limits: &Limits) -> Result<(), VerbError> {
    let bad = |bit: AttrMask, invalid: bool| mask.contains(bit) && invalid;
    let av = &attr.av;
    let av_bad =
        av.sl > 15 || av.src_path_bits > 0x7F || av.grh.is_some_and(|g| g.flow_label > 0xF_FFFF);
    if bad(RQ_PSN, attr.rq_psn > crate::psn::PSN_MASK)
        || bad(SQ_PSN, attr.sq_psn > crate::psn::PSN_MASK)
        || bad(DEST_QPN, attr.dest_qp_num > 0xFF_FFFF)
        || bad(RETRY, attr.retry_cnt > 7)
        || bad(RNR_RETRY, attr.rnr_retry > 7)
        || bad(TIMEOUT, attr.timeout > 31)
        || bad(RNR_TIMER, attr.min_rnr_timer > 31)
        || bad(PORT, attr.port_num == 0 || attr.port_num > limits.num_ports)
        || bad(PKEY, attr.pkey_index >= limits.pkey_table_len)
        || bad(RD_ATOMIC, attr.max_rd_atomic > limits.max_rd_atomic)
        || bad(
            DEST_RD_ATOMIC,
            attr.max_dest_rd_atomic > limits.max_dest_rd_atomic,
        )
        // AD-03: a path MTU above the port's MTU (on a UDP fabric what its
        // underlay carries unfragmented, issue 27) is refused, as Linux rxe's
        // rxe_qp_chk_attr refuses path_mtu > the port's max_mtu (EINVAL); one
        // between the SM's active MTU and it is taken, as there.
        || bad(MTU, attr.path_mtu > limits.max_mtu)
        || bad(AV, av_bad)
    {
        return Err(VerbError::InvalidAttr);
    }
    Ok(())
}

/// What happens to a work request posted to a queue in a given state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PostOutcome {
    /// The post verb fails at once (immediate error); nothing is queued.
    Rejected,
    /// The WQE is queued; it is processed when the state lets the queue run
    /// ([`sq_processes_new_wqes`], [`receives_packets`]).
    Queued,
    /// The WQE is queued and completes with `WR_FLUSH_ERR` (QS-07).
    Flushed,
}

/// Posting to the send queue (QS-03; seed §5-§11):
/// * Reset, Init, RTR: immediate error.
/// * RTS: queued and processed.
/// * SQD: queued, not started until the QP is back in RTS (seed §9: "new WRs can be
///   posted to both queues").
/// * SQE (UC/UD): queued and held. Seed §10.3 flushes the WQEs that were on the SQ
///   behind the failed one when the error happened; §10.4 then has software re-post
///   the corrected WR and the flushed ones and only afterwards return the QP to RTS,
///   so WRs posted while in SQE are kept for RTS, not flushed.
/// * Error: queued and flushed (seed §11: WQEs "including those posted after the
///   transition to Error" complete as flushed; QS-07).
pub fn send_post_outcome(state: QpState) -> PostOutcome {
    match state {
        QpState::Reset | QpState::Init | QpState::Rtr => PostOutcome::Rejected,
        QpState::Rts | QpState::Sqd | QpState::Sqe => PostOutcome::Queued,
        QpState::Error => PostOutcome::Flushed,
    }
}

/// Posting to the receive queue (QS-03): immediate error in Reset; from Init on
/// queued (processed from RTR on; in SQE the RQ keeps working, C10-38); flushed in
/// Error (QS-07).
pub fn recv_post_outcome(state: QpState) -> PostOutcome {
    match state {
        QpState::Reset => PostOutcome::Rejected,
        QpState::Error => PostOutcome::Flushed,
        _ => PostOutcome::Queued,
    }
}

/// Whether Post Send succeeds (does not return an immediate error) in `state`.
pub fn can_post_send(state: QpState) -> bool {
    send_post_outcome(state) != PostOutcome::Rejected
}

/// Whether Post Receive succeeds (does not return an immediate error) in `state`.
pub fn can_post_recv(state: QpState) -> bool {
    recv_post_outcome(state) != PostOutcome::Rejected
}

/// Whether inbound packets addressed to the QP are processed (QS-04): from RTR on,
/// including SQD and SQE (the RQ logic keeps working, seed §9, §10.2). In Reset and
/// Init they are silently dropped; in Error too (seed §10.2).
pub fn receives_packets(state: QpState) -> bool {
    matches!(
        state,
        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
    )
}

/// Whether the SQ logic may transmit request packets: in RTS, and in SQD for the
/// messages already begun when the QP entered SQD (seed §9). Responses (ACK/NAK,
/// RDMA Read and Atomic responses) follow [`receives_packets`] instead.
pub fn sends_packets(state: QpState) -> bool {
    matches!(state, QpState::Rts | QpState::Sqd)
}

/// Whether the SQ logic may start a WQE it has not begun yet: RTS only.
pub fn sq_processes_new_wqes(state: QpState) -> bool {
    state == QpState::Rts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verbs::GlobalRoute;

    const STATES: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Error,
    ];

    /// Attributes valid for every bit, moving `cur -> next`.
    fn attr(cur: QpState, next: QpState) -> QpAttr {
        QpAttr {
            state: Some(next),
            cur_state: Some(cur),
            port_num: 1,
            pkey_index: 0,
            qkey: 0x8001_0000,
            rq_psn: 0xFF_FFFF,
            sq_psn: 0x12_3456,
            dest_qp_num: 0xFF_FFFF,
            max_rd_atomic: MAX_RD_ATOMIC,
            max_dest_rd_atomic: MAX_RD_ATOMIC,
            min_rnr_timer: 31,
            timeout: 31,
            retry_cnt: 7,
            rnr_retry: 7,
            path_mtu: Mtu::M4096,
            ..QpAttr::default()
        }
    }

    fn bits(m: AttrMask) -> impl Iterator<Item = AttrMask> {
        (0..32)
            .map(|i| AttrMask(1 << i))
            .filter(move |b| m.contains(*b))
    }

    fn all_rows() -> impl Iterator<Item = (QpKind, QpState, QpState, Masks)> {
        QpKind::ALL.into_iter().flat_map(|k| {
            STATES.into_iter().flat_map(move |f| {
                STATES
                    .into_iter()
                    .filter_map(move |t| transition_masks(k, f, t).map(|m| (k, f, t, m)))
            })
        })
    }

    /// The transitions QS-01/QS-05/QS-06 and the brief allow, written out.
    fn expected_allowed(kind: QpKind, from: QpState, to: QpState) -> bool {
        use QpState::*;
        match (from, to) {
            (_, Reset) | (_, Error) => true,
            (Reset, Init) | (Init, Init) | (Init, Rtr) | (Rtr, Rts) => true,
            (Rts, Rts) | (Rts, Sqd) | (Sqd, Rts) | (Sqd, Sqd) => true,
            (Sqe, Rts) => kind != QpKind::Rc,
            _ => false,
        }
    }

    #[test]
    fn qs_02_full_walk_with_exactly_the_required_masks() {
        use QpState::*;
        // Hand-written expectations, per kind: Reset->Init, Init->RTR, RTR->RTS.
        let walks = [
            (
                QpKind::Rc,
                [
                    PKEY | PORT | ACCESS,
                    AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC,
                    TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC,
                ],
            ),
            (
                QpKind::Uc,
                [PKEY | PORT | ACCESS, AV | MTU | DEST_QPN | RQ_PSN, SQ_PSN],
            ),
            (QpKind::Ud, [PKEY | PORT | QKEY, AttrMask::NONE, SQ_PSN]),
            (QpKind::Gsi, [PKEY | QKEY, AttrMask::NONE, SQ_PSN]),
            (QpKind::Smi, [PKEY | QKEY, AttrMask::NONE, SQ_PSN]),
        ];
        for (kind, masks) in walks {
            let mut state = Reset;
            for (next, m) in [Init, Rtr, Rts].into_iter().zip(masks) {
                assert_eq!(
                    transition_masks(kind, state, next).unwrap().required,
                    m,
                    "{kind:?} {state:?}->{next:?}"
                );
                let got =
                    check_modify_kind(kind, state, &attr(state, next), STATE | m, &Limits::DEVICE);
                assert_eq!(got, Ok(next), "{kind:?} {state:?}->{next:?}");
                state = next;
            }
        }
        // The QpType entry point walks the same way.
        let mut s = Reset;
        for (next, m) in [
            (Init, PKEY | PORT | QKEY),
            (Rtr, AttrMask::NONE),
            (Rts, SQ_PSN),
        ] {
            s = check_modify(QpType::Ud, s, &attr(s, next), STATE | m).unwrap();
        }
        assert_eq!(s, Rts);
    }

    #[test]
    fn qs_02_each_required_bit_removed_is_refused() {
        let mut checked = 0;
        for (kind, from, to, m) in all_rows() {
            for b in bits(m.required) {
                let mask = STATE | m.required.without(b);
                assert_eq!(
                    check_modify_kind(kind, from, &attr(from, to), mask, &Limits::DEVICE),
                    Err(VerbError::InvalidTransition),
                    "{kind:?} {from:?}->{to:?} without {b:?}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 30);
    }

    #[test]
    fn qs_02_each_disallowed_extra_bit_is_refused() {
        for (kind, from, to, m) in all_rows() {
            for i in 0..32 {
                let b = AttrMask(1 << i);
                if (m.required | m.optional | STATE).contains(b) {
                    continue;
                }
                let mask = STATE | m.required | b;
                assert_eq!(
                    check_modify_kind(kind, from, &attr(from, to), mask, &Limits::DEVICE),
                    Err(VerbError::InvalidTransition),
                    "{kind:?} {from:?}->{to:?} with {b:?}"
                );
            }
        }
    }

    #[test]
    fn qs_02_every_optional_bit_is_accepted_alone_and_together() {
        for (kind, from, to, m) in all_rows() {
            let a = attr(from, to);
            for b in bits(m.optional) {
                assert_eq!(
                    check_modify_kind(kind, from, &a, STATE | m.required | b, &Limits::DEVICE),
                    Ok(to),
                    "{kind:?} {from:?}->{to:?} with {b:?}"
                );
            }
            let all = STATE | m.required | m.optional;
            assert_eq!(
                check_modify_kind(kind, from, &a, all, &Limits::DEVICE),
                Ok(to)
            );
        }
    }

    #[test]
    fn qs_01_pairs_not_in_the_table_are_refused() {
        for kind in QpKind::ALL {
            for from in STATES {
                for to in STATES {
                    let allowed = expected_allowed(kind, from, to);
                    assert_eq!(
                        transition_masks(kind, from, to).is_some(),
                        allowed,
                        "{kind:?} {from:?}->{to:?}"
                    );
                    if !allowed {
                        // Whatever the mask: even the union of all known bits.
                        for mask in [STATE, STATE | KNOWN_BITS] {
                            assert_eq!(
                                check_modify_kind(
                                    kind,
                                    from,
                                    &attr(from, to),
                                    mask,
                                    &Limits::DEVICE
                                ),
                                Err(VerbError::InvalidTransition),
                                "{kind:?} {from:?}->{to:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn qs_01_any_state_to_reset_or_error_without_attributes() {
        for kind in QpKind::ALL {
            for from in STATES {
                for to in [QpState::Reset, QpState::Error] {
                    let a = attr(from, to);
                    assert_eq!(
                        check_modify_kind(kind, from, &a, STATE, &Limits::DEVICE),
                        Ok(to)
                    );
                    // No attribute goes with them.
                    assert_eq!(
                        check_modify_kind(kind, from, &a, STATE | PKEY, &Limits::DEVICE),
                        Err(VerbError::InvalidTransition)
                    );
                    assert_eq!(
                        check_modify_kind(kind, from, &a, STATE | CUR, &Limits::DEVICE),
                        Err(VerbError::InvalidTransition)
                    );
                }
            }
        }
    }

    #[test]
    fn qs_06_sqe_to_rts_refused_for_rc_allowed_for_uc_ud() {
        let a = attr(QpState::Sqe, QpState::Rts);
        assert_eq!(
            check_modify(QpType::Rc, QpState::Sqe, &a, STATE),
            Err(VerbError::InvalidTransition)
        );
        for t in [QpType::Uc, QpType::Ud] {
            assert_eq!(check_modify(t, QpState::Sqe, &a, STATE), Ok(QpState::Rts));
            assert_eq!(
                check_modify(t, QpState::Sqe, &a, STATE | CUR),
                Ok(QpState::Rts)
            );
        }
        // SQE is never entered by Modify QP.
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            for from in STATES {
                assert!(check_modify(t, from, &attr(from, QpState::Sqe), STATE).is_err());
            }
        }
    }

    #[test]
    fn qs_02_missing_state_bit_means_stay_in_the_current_state() {
        let a = QpAttr {
            state: None,
            ..attr(QpState::Rts, QpState::Rts)
        };
        assert_eq!(
            check_modify(QpType::Rc, QpState::Rts, &a, RNR_TIMER),
            Ok(QpState::Rts)
        );
        assert_eq!(
            check_modify(QpType::Ud, QpState::Init, &a, QKEY),
            Ok(QpState::Init)
        );
        assert_eq!(
            check_modify(QpType::Uc, QpState::Sqd, &a, AV),
            Ok(QpState::Sqd)
        );
        // RTR -> RTR is no transition.
        assert_eq!(
            check_modify(QpType::Rc, QpState::Rtr, &a, ACCESS),
            Err(VerbError::InvalidTransition)
        );
        // Reset -> Reset, Error -> Error: fine with nothing, refused with anything.
        assert_eq!(
            check_modify(QpType::Rc, QpState::Error, &a, AttrMask::NONE),
            Ok(QpState::Error)
        );
        assert_eq!(
            check_modify(QpType::Rc, QpState::Reset, &a, PKEY),
            Err(VerbError::InvalidTransition)
        );
        // STATE in the mask without a state value.
        assert_eq!(
            check_modify(QpType::Rc, QpState::Rts, &a, STATE),
            Err(VerbError::InvalidAttr)
        );
    }

    #[test]
    fn qs_02_cur_state_must_match_and_only_where_allowed() {
        let mut a = attr(QpState::Rtr, QpState::Rts);
        let m = STATE | SQ_PSN | CUR;
        assert_eq!(
            check_modify(QpType::Ud, QpState::Rtr, &a, m),
            Ok(QpState::Rts)
        );
        a.cur_state = Some(QpState::Rts);
        assert_eq!(
            check_modify(QpType::Ud, QpState::Rtr, &a, m),
            Err(VerbError::InvalidTransition)
        );
        a.cur_state = None;
        assert_eq!(
            check_modify(QpType::Ud, QpState::Rtr, &a, m),
            Err(VerbError::InvalidTransition)
        );
        // Without the bit, cur_state is ignored.
        assert_eq!(
            check_modify(QpType::Ud, QpState::Rtr, &a, STATE | SQ_PSN),
            Ok(QpState::Rts)
        );
        // CUR_STATE is only accepted from RTR, RTS, SQD and SQE.
        for (kind, from, _, m) in all_rows() {
            if m.optional.contains(CUR) {
                assert!(
                    matches!(
                        from,
                        QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                    ),
                    "{kind:?}"
                );
            }
        }
    }

    #[test]
    fn qs_02_out_of_range_values_are_refused() {
        use QpState::*;
        type Case = (QpType, QpState, QpState, AttrMask, fn(&mut QpAttr));
        let rc_rtr = AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC;
        let rc_rts = TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC;
        let cases: [Case; 16] = [
            (QpType::Rc, Rtr, Rts, rc_rts, |a| a.retry_cnt = 8),
            (QpType::Rc, Rtr, Rts, rc_rts, |a| a.rnr_retry = 8),
            (QpType::Rc, Rtr, Rts, rc_rts, |a| a.timeout = 32),
            (QpType::Rc, Rtr, Rts, rc_rts, |a| a.sq_psn = 1 << 24),
            (QpType::Rc, Rtr, Rts, rc_rts, |a| {
                a.max_rd_atomic = MAX_RD_ATOMIC + 1
            }),
            (QpType::Rc, Rtr, Rts, rc_rts | RNR_TIMER, |a| {
                a.min_rnr_timer = 32
            }),
            (QpType::Rc, Init, Rtr, rc_rtr, |a| a.rq_psn = 1 << 24),
            (QpType::Rc, Init, Rtr, rc_rtr, |a| a.dest_qp_num = 1 << 24),
            (QpType::Rc, Init, Rtr, rc_rtr, |a| {
                a.max_dest_rd_atomic = MAX_RD_ATOMIC + 1
            }),
            (QpType::Rc, Init, Rtr, rc_rtr, |a| a.av.sl = 16),
            (QpType::Uc, Init, Rtr, AV | MTU | DEST_QPN | RQ_PSN, |a| {
                a.av.grh = Some(GlobalRoute {
                    flow_label: 1 << 20,
                    ..GlobalRoute::default()
                })
            }),
            (QpType::Ud, Reset, Init, PKEY | PORT | QKEY, |a| {
                a.port_num = 2
            }),
            (QpType::Ud, Reset, Init, PKEY | PORT | QKEY, |a| {
                a.port_num = 0
            }),
            (QpType::Ud, Reset, Init, PKEY | PORT | QKEY, |a| {
                a.pkey_index = PKEY_TABLE_LEN
            }),
            (QpType::Uc, Reset, Init, PKEY | PORT | ACCESS, |a| {
                a.pkey_index = u16::MAX
            }),
            (QpType::Rc, Sqd, Sqd, RETRY, |a| a.retry_cnt = 0xFF),
        ];
        for (i, (t, from, to, m, spoil)) in cases.into_iter().enumerate() {
            let mut a = attr(from, to);
            assert_eq!(
                check_modify(t, from, &a, STATE | m),
                Ok(to),
                "case {i} valid"
            );
            spoil(&mut a);
            assert_eq!(
                check_modify(t, from, &a, STATE | m),
                Err(VerbError::InvalidAttr),
                "case {i}"
            );
        }
        // Unmasked attributes are not looked at.
        let a = QpAttr {
            retry_cnt: 200,
            port_num: 9,
            ..attr(Rtr, Rts)
        };
        assert_eq!(check_modify(QpType::Ud, Rtr, &a, STATE | SQ_PSN), Ok(Rts));
        // The MTU limit is the port's.
        let small = Limits {
            max_mtu: Mtu::M1024,
            ..Limits::DEVICE
        };
        let a = attr(Init, Rtr);
        assert_eq!(
            check_modify_kind(
                QpKind::Uc,
                Init,
                &a,
                STATE | AV | MTU | DEST_QPN | RQ_PSN,
                &small
            ),
            Err(VerbError::InvalidAttr)
        );
    }

    #[test]
    fn qs_02_table_is_consistent() {
        let mut seen = Vec::new();
        for t in TRANSITIONS {
            assert!(
                !seen.contains(&(t.from, t.to)),
                "duplicate row {:?}->{:?}",
                t.from,
                t.to
            );
            seen.push((t.from, t.to));
            if t.from.is_none() {
                assert!(matches!(t.to, QpState::Reset | QpState::Error));
                assert!(t.masks.iter().all(|m| *m == NO_ATTRS));
            }
            // Modify QP never targets SQE; RC never leaves it (it has none).
            assert_ne!(t.to, QpState::Sqe);
            if t.from == Some(QpState::Sqe) {
                assert!(t.masks[QpKind::Rc as usize].is_none());
            }
            for m in t.masks.iter().flatten() {
                assert_eq!(m.required.0 & m.optional.0, 0, "{:?}->{:?}", t.from, t.to);
                assert!(!m.required.contains(STATE) && !m.optional.contains(STATE));
                assert!(!m.required.contains(CUR), "CUR_STATE is never required");
                assert!(KNOWN_BITS.contains(m.required | m.optional));
                assert!(!(m.required | m.optional).contains(AttrMask::CAP));
            }
            // UD-like kinds never take connection attributes; special QPs no port.
            for k in [QpKind::Ud, QpKind::Gsi, QpKind::Smi] {
                if let Some(m) = t.masks[k as usize] {
                    let conn = or(&[
                        AV, MTU, DEST_QPN, RQ_PSN, TIMEOUT, RETRY, RNR_RETRY, ACCESS, ALT_PATH, MIG,
                    ]);
                    assert_eq!((m.required | m.optional).0 & conn.0, 0);
                }
            }
            for k in [QpKind::Gsi, QpKind::Smi] {
                if let Some(m) = t.masks[k as usize] {
                    assert!(!(m.required | m.optional).contains(PORT));
                }
            }
        }
        // Specific rows resolve before the catch-all ones: Init -> Init is not
        // shadowed, and lookups are unique.
        for (kind, from, to, _) in all_rows() {
            let n = TRANSITIONS
                .iter()
                .filter(|t| {
                    t.to == to
                        && t.from.is_none_or(|f| f == from)
                        && t.masks[kind as usize].is_some()
                })
                .count();
            assert_eq!(n, 1, "{kind:?} {from:?}->{to:?}");
        }
    }

    /// ib_core's `qp_state_table` (drivers/infiniband/core/verbs.c), written out as
    /// (kind, from, to, Linux-required, Linux-optional) for the kinds this device has:
    /// everything Linux lets through must pass here, and nothing required here may
    /// be missing from a mask Linux accepts.
    #[test]
    fn qs_02_accepts_every_mask_the_linux_table_accepts() {
        use QpKind::*;
        use QpState::*;
        let n = AttrMask::NONE;
        let mut linux: Vec<(QpKind, QpState, QpState, AttrMask, AttrMask)> = vec![
            (Rc, Reset, Init, PKEY | PORT | ACCESS, n),
            (Uc, Reset, Init, PKEY | PORT | ACCESS, n),
            (Ud, Reset, Init, PKEY | PORT | QKEY, n),
            (Gsi, Reset, Init, PKEY | QKEY, n),
            (Smi, Reset, Init, PKEY | QKEY, n),
            (Rc, Init, Init, n, PKEY | PORT | ACCESS),
            (Uc, Init, Init, n, PKEY | PORT | ACCESS),
            (Ud, Init, Init, n, PKEY | PORT | QKEY),
            (Gsi, Init, Init, n, PKEY | QKEY),
            (Smi, Init, Init, n, PKEY | QKEY),
            (
                Rc,
                Init,
                Rtr,
                AV | MTU | DEST_QPN | RQ_PSN | DEST_RD_ATOMIC | RNR_TIMER,
                ALT_PATH | ACCESS | PKEY,
            ),
            (
                Uc,
                Init,
                Rtr,
                AV | MTU | DEST_QPN | RQ_PSN,
                ALT_PATH | ACCESS | PKEY,
            ),
            (Ud, Init, Rtr, n, PKEY | QKEY),
            (Gsi, Init, Rtr, n, PKEY | QKEY),
            (Smi, Init, Rtr, n, PKEY | QKEY),
            (
                Rc,
                Rtr,
                Rts,
                TIMEOUT | RETRY | RNR_RETRY | SQ_PSN | RD_ATOMIC,
                CUR | ALT_PATH | ACCESS | RNR_TIMER | MIG,
            ),
            (Uc, Rtr, Rts, SQ_PSN, CUR | ALT_PATH | ACCESS | MIG),
            (Rc, Rts, Rts, n, CUR | ACCESS | ALT_PATH | MIG | RNR_TIMER),
            (Uc, Rts, Rts, n, CUR | ACCESS | ALT_PATH | MIG),
            (Rc, Sqd, Rts, n, CUR | ALT_PATH | ACCESS | RNR_TIMER | MIG),
            (Uc, Sqd, Rts, n, CUR | ALT_PATH | ACCESS | MIG),
            (
                Rc,
                Sqd,
                Sqd,
                n,
                PORT | AV
                    | TIMEOUT
                    | RETRY
                    | RNR_RETRY
                    | RD_ATOMIC
                    | DEST_RD_ATOMIC
                    | ALT_PATH
                    | ACCESS
                    | PKEY
                    | RNR_TIMER
                    | MIG,
            ),
            (Uc, Sqd, Sqd, n, AV | ALT_PATH | ACCESS | PKEY | MIG),
            (Uc, Sqe, Rts, n, CUR | ACCESS),
        ];
        for k in [Ud, Gsi, Smi] {
            linux.push((k, Rtr, Rts, SQ_PSN, CUR | QKEY));
            linux.push((k, Rts, Rts, n, CUR | QKEY));
            linux.push((k, Sqd, Rts, n, CUR | QKEY));
            linux.push((k, Sqd, Sqd, n, PKEY | QKEY));
            linux.push((k, Sqe, Rts, n, CUR | QKEY));
        }
        for k in QpKind::ALL {
            linux.push((k, Rts, Sqd, n, SQD_NOTIFY));
            for s in STATES {
                linux.push((k, s, Reset, n, n));
                if s != Reset {
                    linux.push((k, s, Error, n, n));
                }
            }
        }
        for (k, from, to, req, opt) in linux {
            let ours =
                transition_masks(k, from, to).unwrap_or_else(|| panic!("{k:?} {from:?}->{to:?}"));
            assert!(
                req.contains(ours.required),
                "{k:?} {from:?}->{to:?}: we require more"
            );
            assert!(
                (ours.required | ours.optional).contains(req | opt),
                "{k:?} {from:?}->{to:?}: we refuse something Linux accepts"
            );
            let a = attr(from, to);
            assert_eq!(
                check_modify_kind(k, from, &a, STATE | req, &Limits::DEVICE),
                Ok(to)
            );
            assert_eq!(
                check_modify_kind(k, from, &a, STATE | req | opt, &Limits::DEVICE),
                Ok(to)
            );
        }
    }

    #[test]
    fn qs_03_posting_rules() {
        use QpState::*;
        let send = [
            (Reset, false),
            (Init, false),
            (Rtr, false),
            (Rts, true),
            (Sqd, true),
            (Sqe, true),
            (Error, true),
        ];
        for (s, ok) in send {
            assert_eq!(can_post_send(s), ok, "{s:?}");
        }
        let recv = [
            (Reset, false),
            (Init, true),
            (Rtr, true),
            (Rts, true),
            (Sqd, true),
            (Sqe, true),
            (Error, true),
        ];
        for (s, ok) in recv {
            assert_eq!(can_post_recv(s), ok, "{s:?}");
        }
        assert_eq!(send_post_outcome(Init), PostOutcome::Rejected);
        assert_eq!(send_post_outcome(Sqd), PostOutcome::Queued);
        assert_eq!(send_post_outcome(Sqe), PostOutcome::Queued);
        assert_eq!(recv_post_outcome(Init), PostOutcome::Queued);
        assert!(STATES
            .iter()
            .all(|s| sq_processes_new_wqes(*s) == (*s == Rts)));
    }

    #[test]
    fn qs_07_error_state_flushes_new_posts() {
        assert_eq!(send_post_outcome(QpState::Error), PostOutcome::Flushed);
        assert_eq!(recv_post_outcome(QpState::Error), PostOutcome::Flushed);
        assert!(!receives_packets(QpState::Error) && !sends_packets(QpState::Error));
    }

    #[test]
    fn qs_04_inbound_packets_processed_from_rtr() {
        use QpState::*;
        for (s, rx, tx) in [
            (Reset, false, false),
            (Init, false, false),
            (Rtr, true, false),
            (Rts, true, true),
            (Sqd, true, true),
            (Sqe, true, false),
            (Error, false, false),
        ] {
            assert_eq!(receives_packets(s), rx, "{s:?}");
            assert_eq!(sends_packets(s), tx, "{s:?}");
        }
    }
}
