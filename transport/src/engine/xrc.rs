//! Extended Reliable Connected transport (XRC; SR-02, PV-08, WF-06): XRC
//! domains, XRC SRQs, and the two halves of an XRC connection.
//!
//! An XRC connection is an RC connection whose receive side is shared: the
//! initiator (INI QP) sends as an RC requester does, with XRC opcodes (0b101 in
//! BTH:OpCode\[7:5\]) and an XRCETH naming an XRC SRQ of the target node
//! (9.3.8, o9-3.a1); the target (TGT QP) answers as an RC responder does, but
//! has no receive queue of its own: each request's XRCETH selects the SRQ whose
//! WQE the message consumes and whose CQ completes it. The SRQ must be an XRC
//! SRQ of the TGT QP's XRC domain, else the request is NAKed Invalid Request
//! (o9-24.a1, "XRC_check"; PV-08).
//!
//! How a TGT QP uses the SRQ (ARCHITECTURE.md §3): before the responder runs,
//! [`bind_target`] points the QP's receive side (`QpInit::srq`, `pd`,
//! `recv_cq`) at the SRQ the first packet of a message names (the rest of the
//! message must name the same one), so that the RC responder serves XRC
//! unchanged: a SEND takes the SRQ's WQE, scatters under the SRQ's PD and
//! completes on the SRQ's CQ; an RDMA or atomic request is checked against the
//! SRQ's PD (a TGT QP has no PD of its own in Linux verbs, `ib_create_qp` for
//! `IB_QPT_XRC_TGT` takes none). A TGT QP holds no reference on what it is
//! bound to: it is the XRC domain it belongs to, not an SRQ, that it keeps
//! (an XRC SRQ may go while TGT QPs live, as in Linux).

use std::collections::BTreeMap;

use super::{Engine, Qp};
use crate::verbs::{AttrMask, Handle, QpCap, QpInit, QpState, QpType, SendWr, VerbError};
use crate::wire::ext::{ExtHeaders, XrcethRepr};
use crate::wire::opcode::Opcode;
use crate::wire::PacketRepr;

/// What makes an SRQ an XRC SRQ: its domain and the CQ its receives complete
/// on (`ibv_srq_init_attr_ex` with `IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct XrcSrq {
    pub xrcd: Handle,
    pub cq: Handle,
}

/// The XRC domains (SR-02).
#[derive(Debug, Default)]
pub(crate) struct Xrcds {
    /// Per domain: the XRC SRQs and TGT QPs in it (destroy is refused while
    /// not 0).
    users: BTreeMap<Handle, usize>,
    next: Handle,
}

impl Xrcds {
    fn add_user(&mut self, xrcd: Handle) {
        if let Some(u) = self.users.get_mut(&xrcd) {
            *u += 1;
        }
    }

    pub(crate) fn drop_user(&mut self, xrcd: Handle) {
        if let Some(u) = self.users.get_mut(&xrcd) {
            *u = u.saturating_sub(1);
        }
    }
}

impl Engine {
    /// Opens an XRC domain (SR-02; `ibv_open_xrcd`). At most `max_pd` live,
    /// numbered from 1; a number still live is never handed out again.
    pub fn create_xrcd(&mut self) -> Result<Handle, VerbError> {
        let x = &mut self.xrcds;
        if x.users.len() >= self.limits.max_pd {
            return Err(VerbError::InsufficientResources);
        }
        // Fewer than max_pd are live, so this ends.
        loop {
            x.next = x.next.wrapping_add(1).max(1);
            if !x.users.contains_key(&x.next) {
                break;
            }
        }
        x.users.insert(x.next, 0);
        Ok(x.next)
    }

    /// Closes an XRC domain no XRC SRQ or TGT QP is in (`Busy` otherwise).
    pub fn destroy_xrcd(&mut self, xrcd: Handle) -> Result<(), VerbError> {
        match self.xrcds.users.get(&xrcd) {
            None => Err(VerbError::InvalidHandle),
            Some(&u) if u > 0 => Err(VerbError::Busy),
            Some(_) => {
                self.xrcds.users.remove(&xrcd);
                Ok(())
            }
        }
    }

    /// Whether an XRC domain is open.
    pub fn xrcd_exists(&self, xrcd: Handle) -> bool {
        self.xrcds.users.contains_key(&xrcd)
    }

    /// Creates an XRC SRQ (SR-02): an SRQ of `pd` (whose MRs its receive
    /// buffers are in) in XRC domain `xrcd`, whose receives complete on `cq`.
    /// Its handle is the SRQ number an initiator names in XRCETH
    /// (`ibv_get_srq_num`). The CQ and the domain cannot go while it exists.
    pub fn create_xrc_srq(
        &mut self,
        pd: Handle,
        xrcd: Handle,
        cq: Handle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<Handle, VerbError> {
        if !self.xrcd_exists(xrcd) {
            return Err(VerbError::InvalidHandle);
        }
        if !self.cqs.contains_key(&cq) {
            return Err(VerbError::InvalidCq);
        }
        let h = self.create_srq(pd, max_wr, max_sge, limit)?;
        if let Some(s) = self.srqs.get_mut(&h) {
            s.xrc = Some(XrcSrq { xrcd, cq });
        }
        if let Some(c) = self.cqs.get_mut(&cq) {
            c.users += 1;
        }
        self.xrcds.add_user(xrcd);
        Ok(h)
    }

    /// What a destroyed XRC SRQ held: its CQ and its domain.
    pub(super) fn release_xrc_srq(&mut self, x: XrcSrq) {
        if let Some(c) = self.cqs.get_mut(&x.cq) {
            c.users = c.users.saturating_sub(1);
        }
        self.xrcds.drop_user(x.xrcd);
    }

    /// An XRC SRQ's domain and CQ; `None` for an SRQ that is not XRC.
    pub fn xrc_srq(&self, srq: Handle) -> Result<Option<(Handle, Handle)>, VerbError> {
        let s = self.srqs.get(&srq).ok_or(VerbError::InvalidSrq)?;
        Ok(s.xrc.map(|x| (x.xrcd, x.cq)))
    }

    /// Creates an XRC TGT QP in `xrcd` (SR-02), in Reset: no send queue, no
    /// receive queue, no PD or CQ of its own (see the module doc). `max_rd_atomic`
    /// responder resources are reserved as for any QP.
    pub fn create_xrc_tgt_qp(&mut self, xrcd: Handle) -> Result<u32, VerbError> {
        if !self.xrcd_exists(xrcd) {
            return Err(VerbError::InvalidHandle);
        }
        let init = QpInit {
            qp_type: QpType::XrcTgt,
            pd: 0,
            send_cq: 0,
            recv_cq: 0,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        };
        let qpn = self.create_qp_numbered(init, None, Some(xrcd))?;
        self.xrcds.add_user(xrcd);
        Ok(qpn)
    }

    /// The XRC domain of a TGT QP; `None` for other QPs.
    pub fn qp_xrcd(&self, qpn: u32) -> Result<Option<Handle>, VerbError> {
        let qp = self.qps.get(&qpn).ok_or(VerbError::InvalidHandle)?;
        Ok(qp.xrcd)
    }

    /// Posts a send WR to an XRC INI QP (SR-02): its packets carry XRCETH
    /// with `remote_srqn`, the XRC SRQ of the target node it lands in (WF-06;
    /// `ibv_send_wr.qp_type.xrc.remote_srqn`). Refused (`InvalidWr`) on any
    /// other QP, as [`Engine::post_send`] is on an INI QP.
    pub fn post_send_xrc(
        &mut self,
        qpn: u32,
        wr: SendWr,
        remote_srqn: u32,
    ) -> Result<(), VerbError> {
        self.post_send_to(qpn, wr, Some(remote_srqn))
    }
}

/// Checks that a send WR's XRC SRQ number fits its QP: an INI QP needs one of
/// 24 bits (XRCETH:XRCSRQ, 9.3.8.2), no other QP takes one, a TGT QP sends
/// nothing.
pub(crate) fn check_post(qp_type: QpType, remote_srqn: Option<u32>) -> Result<(), VerbError> {
    match (qp_type, remote_srqn) {
        (QpType::XrcIni, Some(n)) if n <= 0xff_ffff => Ok(()),
        (QpType::XrcIni, Some(_)) => Err(VerbError::InvalidAttr),
        (QpType::XrcTgt, _) | (QpType::XrcIni, None) | (_, Some(_)) => Err(VerbError::InvalidWr),
        _ => Ok(()),
    }
}

/// An INI QP's request: the RC opcode's XRC twin and XRCETH with the SRQ
/// number of its WQE (o9-3.a1, WF-06). `None` for an operation XRC has no
/// opcode for (FLUSH, ATOMIC WRITE: `validate_wr` refuses them first).
pub(crate) fn request(op: Opcode, mut ext: ExtHeaders, srqn: u32) -> Option<(Opcode, ExtHeaders)> {
    let x = op.to_xrc()?;
    ext.xrceth = Some(XrcethRepr { xrc_srq: srqn });
    Some((x, ext))
}

/// A TGT QP's response: the XRC twin of the RC response opcode.
pub(crate) fn response(op: Opcode) -> Opcode {
    op.to_xrc().unwrap_or(op)
}

/// The TGT QP check of o9-24.a1 (PV-08) and the binding it allows: the XRC
/// SRQ the request's XRCETH names exists and is in the QP's XRC domain; then
/// the QP's receive side is that SRQ's (see the module doc). Returns whether
/// the check passed; on failure nothing changes and the caller NAKs Invalid
/// Request.
///
/// The binding is made at a message's first packet only (`in_message`
/// false and a First/Only opcode): the rest of a message scatters under the
/// PD and completes on the CQ its first packet chose, so a packet of it
/// (or a duplicate arriving in between) that names another SRQ fails the
/// check and changes nothing (issue 25; a message is one WQE's, 9.3.8).
pub(crate) fn bind_target(
    qp: &mut Qp,
    pkt: &PacketRepr<'_>,
    in_message: bool,
    srqs: &std::collections::HashMap<Handle, super::Srq>,
) -> bool {
    let Some(x) = pkt.transport.ext.xrceth else {
        return false;
    };
    if in_message || !pkt.transport.bth.opcode.info().starts_message() {
        return qp.init.srq == Some(x.xrc_srq);
    }
    let Some(srq) = srqs.get(&x.xrc_srq) else {
        return false;
    };
    match srq.xrc {
        Some(b) if Some(b.xrcd) == qp.xrcd => {
            qp.init.srq = Some(x.xrc_srq);
            qp.init.pd = srq.pd;
            qp.init.recv_cq = b.cq;
            true
        }
        _ => false,
    }
}

/// The modify-QP masks of the XRC halves, as Linux's `qp_state_table` has
/// them, made into the RC masks the transition table checks: an INI QP has no
/// receive side, so Init->RTR does not ask for its responder attributes
/// (MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER); a TGT QP no send side, so RTR->RTS
/// does not ask for its requester attributes (RETRY_CNT, RNR_RETRY,
/// MAX_QP_RD_ATOMIC). The missing bits are added with the values of `attr`
/// as given (zero when the caller left them unset: nothing uses them).
pub(crate) fn rc_mask(
    qp_type: QpType,
    from: QpState,
    attr_state: Option<QpState>,
    mask: AttrMask,
) -> AttrMask {
    let to = if mask.contains(AttrMask::STATE) {
        attr_state
    } else {
        None
    };
    match (qp_type, from, to) {
        (QpType::XrcIni, QpState::Init, Some(QpState::Rtr)) => {
            mask | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER
        }
        (QpType::XrcTgt, QpState::Rtr, Some(QpState::Rts)) => {
            mask | AttrMask::RETRY_CNT | AttrMask::RNR_RETRY | AttrMask::MAX_QP_RD_ATOMIC
        }
        _ => mask,
    }
}
