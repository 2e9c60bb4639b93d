//! The requester of a QP, the first of its three state machines (as Linux rxe's
//! rxe_req.c): checks send WRs before they are queued, runs the local operations
//! (BIND_MW, LOCAL_INV) that reach the head of the send queue, segments WQEs into
//! packets, assigns their PSNs and arms the ACK timer (IBA 9.4, 9.5, 9.7;
//! OP-01..OP-10, OR-01, OR-05, RL-01, RL-02, RL-07, RL-08, RL-17). What comes back
//! (ACKs, NAKs, READ responses, atomic ACKs) and the retransmission that it or a
//! timeout starts is the completer's ([`completer`](super::completer)); both work
//! on the QP's [`Requester`] state.

use super::completer::{fail, fire_probe, retire};
use super::link;
use super::recovery::Recovery;
use super::xrc;
use super::{Ctx, Effects, Qp};
use crate::budget::{Budget, Held, Weigh};
use crate::psn;
use crate::verbs::{
    FlushSpec, QpAttr, QpState, QpType, SendData, SendFlags, SendWr, Time, VerbError, WcStatus,
    WrOpcode,
};
use crate::wire::ext::{AtomicEthRepr, DethRepr, ExtHeaders, FethRepr, RethRepr};
use crate::wire::opcode::{Opcode, Operation, Position};
use crate::wire::packet::EmitWithError;
use crate::wire::template::HeaderTemplate;
use crate::wire::{BthRepr, GrhRepr, LrhRepr, PacketRepr, TransportRepr};

/// Set AckReq at least every this many packets of a long message, so that ACKs
/// keep the send window open (RL-08).
const ACK_REQ_EVERY: u32 = 32;

/// One send WQE and its progress.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    pub len: u64,
    pub signaled: bool,
    /// PSN of its first packet, fixed once it was first sent.
    pub first_psn: u32,
    /// PSNs it takes (RL-02: a READ takes one per response packet).
    pub npkts: u32,
    /// Packets sent in the current pass.
    pub sent: u32,
    pub started: bool,
    /// READ: response bytes placed so far.
    pub resp_bytes: u64,
    pub done: Option<WcStatus>,
    /// A WQE the caller could not accept: it fails with this status when the
    /// requester reaches it (see `Engine::post_send_rejected`).
    pub rejected: Option<WcStatus>,
    /// An XRC INI QP's WQE: the XRC SRQ number its XRCETH carries (WF-06).
    pub xrc_srq: u32,
}

/// The host bytes a send WR holds once queued: the WQE and its SGE list or
/// inline data (ARCHITECTURE.md §9).
pub(super) fn wr_weight(wr: &SendWr) -> u64 {
    let heap = match &wr.data {
        SendData::Sges(s) => std::mem::size_of_val(s.as_slice()),
        SendData::Inline(d) => d.len(),
        SendData::Bind(_) | SendData::Reg(_) => 0,
    };
    (std::mem::size_of::<SendWqe>() + heap) as u64
}

impl Weigh for SendWqe {
    fn weight(&self) -> u64 {
        wr_weight(&self.wr)
    }
}

impl SendWqe {
    pub(super) fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.opcode,
            WrOpcode::RdmaRead
                | WrOpcode::AtomicCmpSwap
                | WrOpcode::AtomicFetchAdd
                | WrOpcode::Flush
                | WrOpcode::AtomicWrite
        )
    }

    /// FLUSH or ATOMIC WRITE: answered by an empty RDMA READ Response Only.
    pub(super) fn is_placement(&self) -> bool {
        matches!(self.wr.opcode, WrOpcode::Flush | WrOpcode::AtomicWrite)
    }

    pub(super) fn last_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts.saturating_sub(1))
    }

    pub(super) fn contains(&self, p: u32) -> bool {
        self.started && psn::diff(p, self.first_psn) >= 0 && psn::diff(p, self.last_psn()) <= 0
    }
}

/// Requester state of a QP: its send queue, PSNs and timers. The requester
/// fills it as it sends; the completer updates it as responses come or timers
/// fire, hence the fields and helpers open to `super`.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    pub wqes: Held<SendWqe>,
    pub max_wr: usize,
    /// Index of the WQE being transmitted; all before it are fully sent.
    pub cur: usize,
    pub next_psn: u32,
    /// Oldest unacknowledged PSN.
    pub una: u32,
    /// Point of maximum advance: the PSN after the highest one ever sent. A go-back
    /// lowers `next_psn`, not this; the responder may answer a retried request
    /// with any PSN up to here (seed 004 §4, 9.7.4.1.3).
    pub hwm: u32,
    pub(super) retry_left: u8,
    pub(super) rnr_left: u8,
    pub(super) ack_deadline: Option<Time>,
    pub(super) rnr_deadline: Option<Time>,
    pub(super) rnr_psn: u32,
    /// PSN a go-back already restarted from: further evidence of the same gap
    /// (out-of-order responses, duplicate NAKs) does not rewind again.
    pub(super) rewound_to: Option<u32>,
    /// Early loss detection and the congestion window (issue 14).
    pub(super) rec: Recovery,
    /// The missing ATOMIC responses last asked for again (issue 30).
    pub(super) atomic_gap: super::atomic_gap::AtomicGap,
    /// End-to-end credits (RL-13).
    pub(super) credits: super::credits::Credits,
    /// Static rate control (AD-07, `pacing`): no request packet before this.
    pub(super) pace_at: Option<Time>,
    /// The time the last paced packet was due (`pacing::base`).
    pub(super) pace_due: Option<Time>,
    /// UD: the pacing times per destination (`pacing::Dests`).
    pub(super) dests: super::pacing::Dests,
    /// Congestion control (issue 31, `crate::cc`): the QP's reaction and
    /// notification points; its limit is one more on the pacing gate.
    pub(super) cc: crate::cc::QpCc,
    /// The headers of the last MIDDLE packet built in full, for the ones
    /// after it (issue 30, `wire::template`): a cache of a pure function of
    /// what it is checked against at each use, nothing to invalidate.
    pub(super) template: Option<HeaderTemplate>,
}

impl Requester {
    pub fn new(max_wr: usize, budget: &Budget, limits: &super::Limits) -> Requester {
        Requester {
            wqes: Held::new(budget),
            max_wr,
            rec: Recovery::new(limits),
            credits: super::credits::Credits::new(limits),
            ..Requester::default()
        }
    }

    /// RTR→RTS: the first packet carries the SQ start PSN.
    pub fn start(&mut self, sq_psn: u32, attr: &QpAttr) {
        self.next_psn = sq_psn;
        self.una = sq_psn;
        self.hwm = sq_psn;
        // RL-13: a new connection knows no credit count yet.
        self.credits.reset();
        self.resume(attr);
    }

    /// (Re)entering RTS: counters reloaded.
    pub fn resume(&mut self, attr: &QpAttr) {
        self.retry_left = attr.retry_cnt;
        self.rnr_left = attr.rnr_retry;
    }

    pub fn post(&mut self, wr: SendWr, sig_all: bool) {
        self.post_with(wr, sig_all, None);
    }

    /// Queues `wr`; with `rejected`, as a WQE that fails with that status in turn.
    pub fn post_with(&mut self, wr: SendWr, sig_all: bool, rejected: Option<WcStatus>) {
        let len = match (&wr.data, wr.opcode) {
            // FLUSH: the length of the range (`compare`); ATOMIC WRITE: its word.
            (_, WrOpcode::Flush) => wr.compare,
            (_, WrOpcode::AtomicWrite) => 8,
            (SendData::Inline(d), _) => d.len() as u64,
            (SendData::Sges(s), _) => s.iter().map(|s| u64::from(s.length)).sum(),
            (SendData::Bind(_) | SendData::Reg(_), _) => 0,
        };
        let signaled = sig_all || wr.flags.contains(SendFlags::SIGNALED);
        self.wqes.push_back(SendWqe {
            wr,
            len,
            signaled,
            first_psn: 0,
            npkts: 0,
            sent: 0,
            started: false,
            resp_bytes: 0,
            done: None,
            rejected,
            xrc_srq: 0,
        });
    }

    /// The next time a timer of this requester fires.
    pub fn deadline(&self) -> Option<Time> {
        // A plain fold: this runs for every packet in and out (`arm`), and
        // an iterator over an array of options did not compile to one.
        let min = |a: Option<Time>, b: Option<Time>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        };
        let t = min(self.ack_deadline, self.rnr_deadline);
        let t = min(t, self.rec.probe_at);
        let t = min(t, self.pace_at);
        min(t, self.cc.rp.deadline())
    }

    /// Index of the unfinished WQE whose PSN range holds `p`.
    pub(super) fn open_wqe(&self, p: u32) -> Option<usize> {
        self.wqes
            .iter()
            .position(|w| w.contains(p) && w.done.is_none())
    }

    fn outstanding(&self) -> u32 {
        psn::diff(self.next_psn, self.una).max(0) as u32
    }

    /// PSNs sent at least once and not acknowledged yet (what the ACK timer
    /// covers, even while a go-back resends them).
    pub(super) fn unacked(&self) -> u32 {
        psn::diff(self.hwm, self.una).max(0) as u32
    }

    /// PSNs sent and not answered yet, as the probe timer counts them
    /// (`recovery`, "A tail's floor"): [`Requester::unacked`] less the
    /// READ/ATOMICs past `una` that their responses completed out of order
    /// while missing ATOMIC responses are asked for again (`atomic_gap`). A
    /// probe or go-back then resends only what is missing
    /// (`completer::resent_from`), a packet or a few, whatever the PSNs
    /// between. Scanned only in that state (issue 30), which lasts a round
    /// trip and holds at most max_rd_atomic READ/ATOMICs (RL-07).
    pub(super) fn unanswered(&self) -> u32 {
        let n = self.unacked();
        if !self.atomic_gap.asked() {
            return n;
        }
        let done: u32 = self
            .wqes
            .iter()
            .take_while(|w| w.started && psn::diff(w.first_psn, self.hwm) < 0)
            .filter(|w| w.done.is_some() && psn::diff(w.first_psn, self.una) >= 0)
            .map(|w| w.npkts)
            .sum();
        n.saturating_sub(done).max(1)
    }
}

/// Local ACK timeout: 4.096 us * 2^timeout (IBA 11.2.4.2); 0 means none.
pub(super) fn ack_timeout_ns(attr: &QpAttr) -> Option<u64> {
    (attr.timeout != 0).then(|| 4096u64 << attr.timeout.min(31))
}

/// Largest payload of one packet of this QP: the path MTU of a connected QP, the
/// port's MTU for UD (a UD message is one packet, C9-12).
fn pmtu_of(qp: &Qp) -> usize {
    if qp.init.qp_type == QpType::Ud {
        crate::wire::MAX_PAYLOAD
    } else {
        qp.attr.path_mtu.bytes()
    }
}

/// Checks a WR against the QP before it is queued (immediate errors).
pub(crate) fn validate_wr(qp: &Qp, wr: &SendWr, max_inline: u32) -> Result<(), VerbError> {
    let t = qp.init.qp_type;
    let ok = match wr.opcode {
        WrOpcode::Send | WrOpcode::SendWithImm => true,
        WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => t != QpType::Ud,
        WrOpcode::RdmaRead | WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd => {
            matches!(t, QpType::Rc | QpType::XrcIni)
        }
        // IBA 1.5 MPE: FLUSH and ATOMIC WRITE are RC operations (opcodes 0x1c, 0x1d).
        WrOpcode::Flush | WrOpcode::AtomicWrite => t == QpType::Rc,
        // OP-03: SEND with Invalidate exists for RC (and XRC) only (Table 38).
        WrOpcode::SendWithInv => matches!(t, QpType::Rc | QpType::XrcIni),
        // MP-07, MP-08: LOCAL_INV and REG_MR send nothing; any service may
        // carry them.
        WrOpcode::LocalInv | WrOpcode::RegMr => true,
        // MP-06, MP-07: windows are bound through connected QPs (a type 2
        // window is associated with its QP; UD has no R_Key use).
        WrOpcode::BindMw => t != QpType::Ud,
    };
    if !ok {
        return Err(VerbError::InvalidWr);
    }
    if (wr.opcode == WrOpcode::BindMw) != matches!(wr.data, SendData::Bind(_)) {
        // A bind carries exactly its bind, and only a bind carries one.
        return Err(VerbError::InvalidWr);
    }
    if (wr.opcode == WrOpcode::RegMr) != matches!(wr.data, SendData::Reg(_)) {
        // Likewise a registration (MP-08).
        return Err(VerbError::InvalidWr);
    }
    if is_local_op(wr.opcode) {
        return Ok(());
    }
    if t == QpType::Ud && wr.ud.is_none() {
        return Err(VerbError::InvalidWr);
    }
    match &wr.data {
        SendData::Inline(d) => {
            if d.len() > max_inline as usize || d.len() > qp.init.cap.max_inline_data as usize {
                return Err(VerbError::InvalidWr);
            }
        }
        SendData::Sges(s) => {
            if s.len() > qp.init.cap.max_send_sge as usize {
                return Err(VerbError::MaxSgeExceeded);
            }
        }
        SendData::Bind(_) | SendData::Reg(_) => return Err(VerbError::InvalidWr),
    }
    Ok(())
}

/// Builds the next request packet of this QP, if any.
pub(crate) fn poll_transmit(qp: &mut Qp, cx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
    if !matches!(qp.state, QpState::Rts | QpState::Sqd) || qp.req.rnr_deadline.is_some() {
        return None;
    }
    if qp.odp.sq_waits() {
        return None; // issue 29: the send queue waits for a page (`odp`)
    }
    // AD-07: a paced path's next packet waits for its time (the timer heap
    // holds it: `pace_at` is a requester deadline); a UD WQE's, for its
    // destination's.
    let r = &mut qp.req;
    let head_due = r
        .wqes
        .get(r.cur)
        .and_then(|w| w.wr.ud.as_ref())
        .and_then(|u| r.dests.due(&u.av));
    if super::pacing::waiting_for(r, head_due, cx.now) {
        return None;
    }
    if !run_local_ops(qp, cx) {
        return None;
    }
    let is_rc = qp.init.qp_type.is_reliable();
    if is_rc && qp.req.rec.probe_due {
        // The probe timer fired and what arrived since acknowledged nothing.
        fire_probe(qp, cx.now, cx.counters);
    }
    if is_rc {
        if let Some(p) = qp.req.rec.pending_probe.take() {
            // A tail probe (`recovery`): the packet at `p` again, outside the
            // send sequence and the window.
            if let Some(i) = qp.req.open_wqe(p) {
                let k = psn::diff(p, qp.req.wqes[i].first_psn).max(0) as u32;
                qp.req.rec.force_ack_req = true;
                if let Ok(len) = build_request(qp, i, k, false, cx, buf) {
                    return Some(len);
                }
            }
        }
    }
    if is_rc {
        if let Some(p) = qp.req.rec.pending_copy.take() {
            // The second copy of a go-back's first packet
            // (`Recovery::copy_first`), outside the send sequence and the
            // window, unless something acknowledged it meanwhile.
            if psn::diff(p, qp.req.una) >= 0 {
                if let Some(i) = qp.req.open_wqe(p) {
                    let k = psn::diff(p, qp.req.wqes[i].first_psn).max(0) as u32;
                    if let Ok(len) = build_request(qp, i, k, false, cx, buf) {
                        return Some(len);
                    }
                }
            }
        }
    }
    if is_rc && !qp.req.rec.may_send(qp.req.outstanding()) {
        return None;
    }
    if is_rc && !super::port_window::may_start(qp) {
        return None; // ARCHITECTURE.md §3: the port window
    }
    // A go-back passes over what needs no resend (`completer::resent_from`),
    // and over local operations: those that ran are skipped, those that did
    // not run now (or must wait) before anything after them is sent.
    let pmtu_bytes = pmtu_of(qp) as u64;
    while let Some(w) = qp.req.wqes.get(qp.req.cur) {
        if is_local_op(w.wr.opcode) && w.rejected.is_none() {
            if !run_local_ops(qp, cx) {
                return None;
            }
            continue;
        }
        // A READ/ATOMIC a go-back asks for again asks only for what has not
        // come by now (RL-14), not by the go-back: responses of the old
        // stream keep arriving after it (issue 14).
        let from = super::completer::resent_from(w, pmtu_bytes);
        if w.is_rd_atomic() && w.sent < from {
            let cur = qp.req.cur;
            qp.req.wqes[cur].sent = from;
            continue;
        }
        if !(w.started && w.npkts > 0 && w.sent >= w.npkts) {
            break;
        }
        // Its PSNs stay its own: the next WQE starts after them.
        qp.req.next_psn = psn::add(w.last_psn(), 1);
        qp.req.cur += 1;
    }
    let i = qp.req.cur;
    let w = qp.req.wqes.get(i)?;
    let pmtu = pmtu_of(qp);
    if let Some(status) = w.rejected {
        // A local error (or a WQE the caller could not accept) fails only once
        // everything before it has completed: `fail` takes the earlier WQEs as
        // acknowledged, which only a response may say. Until then nothing more
        // is sent.
        if i == 0 {
            fail(qp, i, status, cx.fx);
        }
        return None;
    }
    if w.sent == 0 && !w.started {
        if qp.state == QpState::Sqd {
            return None; // QS-05: no new message while draining
        }
        // Only a fenced WQE or a new READ/ATOMIC needs the count: skip the scan for
        // plain SEND/WRITE, which may stand behind hundreds of unacknowledged WQEs.
        let earlier_rd = if w.wr.flags.contains(SendFlags::FENCE) || w.is_rd_atomic() {
            // RL-07: the responder keeps its last max_dest_rd_atomic READ/ATOMICs
            // by arrival; a later one that already completed still occupies a slot
            // while an older one waits for (re-requested) responses. Count every
            // READ/ATOMIC from the oldest unfinished one on, or the new request
            // evicts the older one's saved state and its retry is never answered.
            let q = &qp.req.wqes;
            match q
                .iter()
                .take(i)
                .position(|x| x.is_rd_atomic() && x.done.is_none())
            {
                Some(o) => q
                    .iter()
                    .take(i)
                    .skip(o)
                    .filter(|x| x.is_rd_atomic())
                    .count(),
                None => 0,
            }
        } else {
            0
        };
        if w.wr.flags.contains(SendFlags::FENCE) && earlier_rd > 0 {
            return None; // OR-05
        }
        if w.is_rd_atomic() && earlier_rd >= usize::from(qp.attr.max_rd_atomic.max(1)) {
            return None; // RL-07
        }
        if w.len > super::MAX_MSG_SIZE
            || (qp.init.qp_type == QpType::Ud && w.len > pmtu as u64)
            || (matches!(
                w.wr.opcode,
                WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd
            ) && w.len < 8)
        {
            local_error(qp, i, WcStatus::LocLenErr, cx.fx);
            return None;
        }
    }
    if !qp.req.wqes[i].started && !super::credits::may_start(qp, i, cx.counters) {
        return None; // RL-13
    }
    let w = &mut qp.req.wqes[i];
    if w.sent == 0 {
        if !w.started {
            w.npkts = match w.wr.opcode {
                WrOpcode::RdmaRead => psn::read_packets(w.len, pmtu),
                WrOpcode::AtomicCmpSwap
                | WrOpcode::AtomicFetchAdd
                | WrOpcode::Flush
                | WrOpcode::AtomicWrite => 1,
                _ => (w.len.div_ceil(pmtu as u64)).max(1) as u32,
            };
            w.started = true;
            // `recovery`: READs in flight (0 for another message).
            let n = match w.wr.opcode {
                WrOpcode::RdmaRead => w.npkts,
                WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd => {
                    u32::from(qp.attr.max_rd_atomic)
                }
                _ => 0,
            };
            qp.req.rec.on_read_sent(n);
        }
        // A WQE sent again from its start gets the same PSNs: sizes are fixed.
        w.first_psn = qp.req.next_psn;
    }
    let k = qp.req.wqes[i].sent;
    match build_request(qp, i, k, true, cx, buf) {
        Ok(len) => Some(len),
        Err(BuildErr::Status(status)) => {
            local_error(qp, i, status, cx.fx);
            None
        }
        Err(BuildErr::Fault(f)) => {
            // Issue 29: nothing was sent; the queue waits here for the page.
            super::odp::requester_fault(qp, f, cx);
            None
        }
    }
}

fn is_local_op(op: WrOpcode) -> bool {
    matches!(op, WrOpcode::BindMw | WrOpcode::LocalInv | WrOpcode::RegMr)
}

/// Executes BIND_MW, LOCAL_INV and REG_MR work requests (MP-06..MP-08) that reached the
/// head of the send queue: a local operation sends no packet (seed 003: "硬件并
/// 不会发送任何数据包") and takes effect only once every earlier WQE has
/// completed, so that it is ordered after them (IBA 10.6.7.2; as rxe, which
/// runs them when the requester reaches them) and WQEs after it see its
/// effect. Returns whether the requester may go on to the WQE at `cur`: false
/// while a local operation waits for earlier WQEs (or the SQ drains, QS-05) or
/// after one failed (MW_BIND_ERR / LOC_PROT_ERR, then the QP fails as on any
/// local send error: RC to Error, UC/UD to SQE; QS-06).
///
/// A REG_MR without FENCE runs as soon as the requester reaches it, earlier
/// WQEs still unacknowledged (MP-08): it only makes a free MR valid, which no
/// earlier WQE may use, so running it early is not observable, and it spares
/// kernel ULPs (REG_MR + SEND per I/O) a round trip per request. It stays in
/// the queue, done, and completes in order (`retire`); a go-back passes over
/// it (`skip_done_local_op`). A failure there fails in turn, as a local error.
fn run_local_ops(qp: &mut Qp, cx: &mut Ctx<'_>) -> bool {
    loop {
        if skip_done_local_op(qp) {
            continue;
        }
        let i = qp.req.cur;
        let Some(w) = qp.req.wqes.get(i) else {
            return true;
        };
        if !is_local_op(w.wr.opcode) || w.rejected.is_some() {
            return true;
        }
        let early = w.wr.opcode == WrOpcode::RegMr && !w.wr.flags.contains(SendFlags::FENCE);
        if (i != 0 && !early) || qp.state == QpState::Sqd {
            return false;
        }
        let (pd, qpn) = (qp.init.pd, qp.qpn);
        let res = match (&w.wr.opcode, &w.wr.data) {
            (WrOpcode::BindMw, SendData::Bind(b)) => {
                cx.mrs.bind_mw(pd, qpn, b).map_err(|e| e.status(true))
            }
            (WrOpcode::LocalInv, _) => cx
                .mrs
                .invalidate(pd, qpn, w.wr.imm_or_inv)
                .map_err(|e| e.status(false)),
            // MP-08: the page list is read now, in send-queue order.
            (WrOpcode::RegMr, SendData::Reg(r)) => {
                cx.mrs.fast_reg(pd, r, &*cx.mem).map_err(|e| e.status())
            }
            _ => Err(WcStatus::LocQpOpErr),
        };
        match res {
            Ok(()) if i != 0 => {
                // Done, not started: it holds no PSN (`SendWqe::contains`).
                qp.req.wqes[i].done = Some(WcStatus::Success);
                qp.req.cur += 1;
            }
            Ok(()) => {
                let w = &mut qp.req.wqes[0];
                w.started = true;
                w.done = Some(WcStatus::Success);
                retire(qp, cx.fx);
            }
            Err(status) => {
                log::debug!(
                    "QP {qpn}: {:?} failed: {status:?}",
                    qp.req.wqes[i].wr.opcode
                );
                if i == 0 {
                    fail(qp, 0, status, cx.fx);
                } else {
                    local_error(qp, i, status, cx.fx);
                }
                return false;
            }
        }
    }
}

/// Moves `cur` past a local operation at `cur` that already ran (a REG_MR run
/// early, met again after a go-back): it is not run twice. Returns whether it
/// did.
fn skip_done_local_op(qp: &mut Qp) -> bool {
    match qp.req.wqes.get(qp.req.cur) {
        Some(w) if is_local_op(w.wr.opcode) && w.done.is_some() => {
            qp.req.cur += 1;
            true
        }
        _ => false,
    }
}

/// A local error on WQE `i` (a bad L_Key, a length past the limits): it fails
/// now if it is the oldest, else once the WQEs before it have completed.
fn local_error(qp: &mut Qp, i: usize, status: WcStatus, fx: &mut Effects) {
    if i == 0 {
        fail(qp, i, status, fx);
    } else if let Some(w) = qp.req.wqes.get_mut(i) {
        w.rejected = Some(status);
    }
}

/// Builds packet `k` of WQE `i`. With `advance`, the packet is the next of the
/// send sequence (the WQE's progress, `next_psn` and the point of maximum
/// advance move past it); without, it is a probe resent outside the sequence
/// (`recovery`), which changes nothing but the probe's own state.
/// Why a request packet was not built.
enum BuildErr {
    /// The WQE fails with this status.
    Status(WcStatus),
    /// A page of an ODP MR of its gather list is not present (issue 29).
    Fault(crate::mr::OdpFault),
}

impl From<WcStatus> for BuildErr {
    fn from(s: WcStatus) -> BuildErr {
        BuildErr::Status(s)
    }
}

fn build_request(
    qp: &mut Qp,
    i: usize,
    k: u32,
    advance: bool,
    cx: &mut Ctx<'_>,
    buf: &mut [u8],
) -> Result<usize, BuildErr> {
    let pmtu = pmtu_of(qp);
    let qpn = qp.qpn;
    let pd = qp.init.pd;
    let qkey_own = qp.attr.qkey;
    let w = &qp.req.wqes[i];
    let psn_k = psn::add(w.first_psn, k);
    let (op, payload_len, ext, adv) = match w.wr.opcode {
        WrOpcode::RdmaRead => {
            // One request for the rest of the READ (RL-14 on a retry).
            let done = u64::from(k) * pmtu as u64;
            let reth = RethRepr {
                va: w.wr.remote_addr.wrapping_add(done),
                rkey: w.wr.rkey,
                dma_len: (w.len - done.min(w.len)) as u32,
            };
            let ext = ExtHeaders {
                reth: Some(reth),
                ..Default::default()
            };
            (Opcode::RC_RDMA_READ_REQUEST, 0, ext, w.npkts - k)
        }
        WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd => {
            let ext = ExtHeaders {
                atomic_eth: Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: w.wr.swap_add,
                    compare: w.wr.compare,
                }),
                ..Default::default()
            };
            let op = if w.wr.opcode == WrOpcode::AtomicCmpSwap {
                Opcode::RC_COMPARE_SWAP
            } else {
                Opcode::RC_FETCH_ADD
            };
            (op, 0, ext, 1)
        }
        WrOpcode::Flush => {
            let spec = FlushSpec::from_bits(w.wr.imm_or_inv);
            let ext = ExtHeaders {
                feth: Some(FethRepr {
                    selectivity: spec.selectivity,
                    placement_type: spec.placement_type,
                }),
                reth: Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len as u32,
                }),
                ..Default::default()
            };
            (Opcode::RC_FLUSH, 0, ext, 1)
        }
        WrOpcode::AtomicWrite => {
            let ext = ExtHeaders {
                reth: Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: 8,
                }),
                ..Default::default()
            };
            (Opcode::RC_ATOMIC_WRITE, 8, ext, 1)
        }
        _ => {
            let offset = u64::from(k) * pmtu as u64;
            let n = (w.len - offset.min(w.len)).min(pmtu as u64) as usize;
            let first = k == 0;
            let last = k + 1 == w.npkts;
            let op = data_opcode(qp.init.qp_type, w.wr.opcode, first, last);
            let mut ext = ExtHeaders::default();
            let info = op.info();
            if info.has(crate::wire::ExtKind::Reth) {
                ext.reth = Some(RethRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    dma_len: w.len as u32,
                });
            }
            if info.has(crate::wire::ExtKind::ImmDt) {
                ext.imm_dt = Some(w.wr.imm_or_inv);
            }
            if info.has(crate::wire::ExtKind::Ieth) {
                // OP-03: the R_Key to invalidate, in the last/only packet.
                ext.ieth = Some(w.wr.imm_or_inv);
            }
            if let Some(ud) = &w.wr.ud {
                // PV-05: a Q_Key with its high bit set means "use the QP's own".
                let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                    qkey_own
                } else {
                    ud.remote_qkey
                };
                ext.deth = Some(DethRepr { qkey, src_qp: qpn });
            }
            (op, n, ext, 1)
        }
    };
    let w = &qp.req.wqes[i];
    let (op, ext) = if qp.init.qp_type == QpType::XrcIni {
        // SR-02, WF-06: the XRC opcode and the target's XRC SRQ.
        xrc::request(op, ext, w.xrc_srq).ok_or(WcStatus::LocQpOpErr)?
    } else {
        (op, ext)
    };
    let last_pkt = k + adv >= w.npkts;
    let info = op.info();
    let (av, dest_qp) = match &w.wr.ud {
        Some(ud) => (ud.av, ud.remote_qpn),
        None => (qp.attr.av, qp.attr.dest_qp_num),
    };
    let in_flight = psn::diff(psn::add(psn_k, adv), qp.req.una).max(0) as u32;
    let ack_req = qp.init.qp_type.is_reliable()
        && (last_pkt
            || psn::add(psn_k, 1).is_multiple_of(ACK_REQ_EVERY)
            || qp.req.rec.ack_req_due(in_flight));
    let solicited = w.wr.flags.contains(SendFlags::SOLICITED)
        && info.ends_message()
        && matches!(
            info.operation,
            Operation::Send
                | Operation::SendWithImmediate
                | Operation::SendWithInvalidate
                | Operation::RdmaWriteWithImmediate
        );
    let grh = av.grh.map(|g| GrhRepr {
        traffic_class: g.traffic_class,
        flow_label: g.flow_label,
        hop_limit: g.hop_limit,
        // A missing RoCE entry leaves a zero SGID; `link::emit_with` then
        // refuses the packet (no route).
        sgid: link::source_gid(cx.port, g.sgid_index).unwrap_or_default(),
        dgid: g.dgid,
    });
    let udp_sport = link::udp_source_port(av.grh.map_or(0, |g| g.flow_label), qp.qpn, dest_qp);
    // AD-05, PV-03: a GSI WR may name the entry of its P_Key (IBA 11.4.1.1;
    // the partition a request came in); an index past the table is a WR the
    // QP cannot carry out.
    let pkey = match w.wr.ud.and_then(|u| u.pkey_index).filter(|_| qpn == 1) {
        Some(i) => *cx
            .port
            .pkeys
            .get(usize::from(i))
            .ok_or(WcStatus::LocQpOpErr)?,
        None => cx
            .port
            .pkeys
            .get(usize::from(qp.attr.pkey_index))
            .copied()
            .unwrap_or(0xffff),
    };
    let pkt = PacketRepr {
        lrh: LrhRepr {
            vl: super::vl::tx_vl(cx.port, qpn, av.sl), // AD-06
            sl: av.sl & 0xf,
            dlid: av.dlid,
            slid: cx.port.slid(av.src_path_bits),
        },
        grh,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: op,
                solicited,
                mig_req: qp.apm.migreq, // AD-10, 9.2.4
                pkey,
                fecn: false,
                becn: false,
                dest_qp,
                ack_req,
                psn: if qp.init.qp_type == QpType::Ud {
                    qp.req.next_psn
                } else {
                    psn_k
                },
            },
            ext,
            payload: &[],
        },
    };
    // The payload goes from memory straight into the packet (no staging copy).
    let offset = u64::from(k) * pmtu as u64;
    let data = &w.wr.data;
    let word = (w.wr.opcode == WrOpcode::AtomicWrite).then(|| w.wr.swap_add.to_le_bytes());
    let mrs = &*cx.mrs;
    let mem = &*cx.mem;
    // PV-07: a multicast group's frames go to its Ethernet multicast MAC.
    let dmac = av
        .grh
        .and_then(|g| link::multicast_mac(&g.dgid))
        .unwrap_or(av.dmac);
    // Issue 30: a payload gathered from memory goes straight into the
    // co-located peer's ring slot, where the link gives one.
    let in_slot = match data {
        SendData::Sges(_) if word.is_none() => {
            super::io::payload_slot(&mut cx.tx_slots, cx.port, &pkt, payload_len)
        }
        _ => None,
    };
    let slotted = in_slot.is_some();
    let fill = |dst: &mut [u8]| {
        match data {
            // ATOMIC WRITE: its 8 bytes come from the WQE, not from memory.
            _ if word.is_some() => {
                let src = word.as_ref().ok_or(WcStatus::LocLenErr)?;
                dst.copy_from_slice(src.get(..dst.len()).ok_or(WcStatus::LocLenErr)?);
                Ok(())
            }
            SendData::Inline(d) => {
                let at = offset as usize;
                let src = d.get(at..at + dst.len()).ok_or(WcStatus::LocLenErr)?;
                dst.copy_from_slice(src);
                Ok(())
            }
            SendData::Sges(s) => {
                let dst =
                    in_slot.map_or(crate::memory::Dst::Bytes(dst), crate::memory::Dst::Volatile);
                mrs.gather(mem, pd, s, offset, dst).map_err(|e| match e {
                    crate::mr::CopyError::PageFault(f) => BuildErr::Fault(f),
                    e => BuildErr::Status(super::access::local_status(e)),
                })
            }
            // A bind or registration sends no packet; it never gets here.
            SendData::Bind(_) | SendData::Reg(_) => Err(WcStatus::LocQpOpErr.into()),
        }
    };
    // Issue 30: a native packet whose headers are the last MIDDLE packet's
    // but for PSN and AckReq is built from them (`wire::template`).
    let native = !cx.port.is_ethernet();
    let crcs = !cx.port.crcs_by_link;
    let template = qp
        .req
        .template
        .as_ref()
        .filter(|t| native && t.matches(&pkt, payload_len, crcs));
    let built = match template {
        Some(t) => t.emit_with(&pkt, buf, fill),
        None => link::emit_with(cx.port, &pkt, dmac, udp_sport, buf, payload_len, fill),
    };
    if let (None, Ok(len)) = (template, &built) {
        if native && info.position == Position::Middle {
            qp.req.template = HeaderTemplate::capture(&pkt, payload_len, crcs, buf, *len);
        }
    }
    let len = built.map_err(|e| match e {
        EmitWithError::Fill(st) => st,
        // RoCE: no route for the path (its GID entry went away); the WQE
        // fails like a send to an unusable address.
        EmitWithError::Emit(_) if cx.port.is_ethernet() => {
            cx.counters.tx_no_route += 1;
            WcStatus::LocQpOpErr.into()
        }
        EmitWithError::Emit(_) => WcStatus::LocLenErr.into(),
    })?;
    cx.tx_in_slot = slotted;
    // AD-07: a path slower than the port spaces its packets, and so does a
    // congestion controller's limit (`pacing`, issue 31).
    let ud = qp.init.qp_type == QpType::Ud;
    super::pacing::after_send(&mut qp.req, cx.port, &av, ud, len, cx.now);
    // Advance.
    let timeout = ack_timeout_ns(&qp.attr);
    let r = &mut qp.req;
    if !advance {
        cx.counters.resent_packets += 1;
        let unacked = r.unanswered();
        r.rec
            .on_send(psn_k, ack_req, false, unacked, cx.now, timeout);
        return Ok(len);
    }
    r.wqes[i].sent += adv;
    r.next_psn = psn::add(psn_k, adv);
    let new = psn::diff(psn_k, r.hwm) >= 0;
    if psn::diff(r.next_psn, r.hwm) > 0 {
        r.hwm = r.next_psn;
    }
    if qp.init.qp_type.is_reliable() {
        if !new {
            cx.counters.resent_packets += 1;
        }
        let unacked = r.unanswered();
        r.rec.on_send(psn_k, ack_req, new, unacked, cx.now, timeout);
        if !new {
            r.rec.on_resend(psn_k);
        }
    }
    let w = &mut r.wqes[i];
    if w.sent >= w.npkts {
        w.sent = w.npkts;
        r.cur += 1;
        if !qp.init.qp_type.is_reliable() {
            // UC/UD complete once sent: nothing will acknowledge them.
            w.done = Some(WcStatus::Success);
            r.una = r.next_psn;
        }
    }
    if qp.init.qp_type.is_reliable() && r.ack_deadline.is_none() {
        r.ack_deadline = timeout.map(|t| cx.now.plus_ns(t));
    }
    if !qp.init.qp_type.is_reliable() {
        retire(qp, cx.fx);
    }
    Ok(len)
}

/// The opcode of a SEND or WRITE packet by position (Table 38).
fn data_opcode(t: QpType, op: WrOpcode, first: bool, last: bool) -> Opcode {
    use WrOpcode::*;
    let rc = t.is_reliable();
    let pick = |rc_op: Opcode, uc_op: Opcode| if rc { rc_op } else { uc_op };
    if t == QpType::Ud {
        return if op == SendWithImm {
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        } else {
            Opcode::UD_SEND_ONLY
        };
    }
    match (op, first, last) {
        (Send | SendWithImm | SendWithInv, true, false) => {
            pick(Opcode::RC_SEND_FIRST, Opcode::UC_SEND_FIRST)
        }
        (Send | SendWithImm | SendWithInv, false, false) => {
            pick(Opcode::RC_SEND_MIDDLE, Opcode::UC_SEND_MIDDLE)
        }
        // OP-03: RC only (validate_wr); IETH in the last or only packet.
        (SendWithInv, false, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        (SendWithInv, true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        (Send, false, true) => pick(Opcode::RC_SEND_LAST, Opcode::UC_SEND_LAST),
        (Send, true, true) => pick(Opcode::RC_SEND_ONLY, Opcode::UC_SEND_ONLY),
        (SendWithImm, false, true) => pick(
            Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
            Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
        ),
        (SendWithImm, true, true) => pick(
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
        ),
        (_, true, false) => pick(Opcode::RC_RDMA_WRITE_FIRST, Opcode::UC_RDMA_WRITE_FIRST),
        (_, false, false) => pick(Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::UC_RDMA_WRITE_MIDDLE),
        (RdmaWriteWithImm, false, true) => pick(
            Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        ),
        (RdmaWriteWithImm, true, true) => pick(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        ),
        (_, false, true) => pick(Opcode::RC_RDMA_WRITE_LAST, Opcode::UC_RDMA_WRITE_LAST),
        (_, true, true) => pick(Opcode::RC_RDMA_WRITE_ONLY, Opcode::UC_RDMA_WRITE_ONLY),
    }
}
