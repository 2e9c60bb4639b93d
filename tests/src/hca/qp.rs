//! Queue pairs: what to create one with, CREATE/MODIFY/QUERY/DESTROY_QP, and
//! the state transitions as ibverbs masks them.

use std::collections::VecDeque;

use device::abi::cmd::{
    Av, CreateQpIn, CreateQpOut, DestroyQpIn, ModifyQpIn, Opcode, Pbl, QpAttr, QpCap, QueryQpIn,
    QueryQpOut,
};
use device::abi::verbs::{access, num, qp_attr_mask as m, Mtu, QpState, QpType};
use device::abi::wqe::{wqe_const, RecvCtrl, Sge};

use crate::guest::Layout;
use crate::util::log2_ceil;

use super::{CmdError, CqH, DbSlot, Hca, Nothing, Pd, Ring, SrqH};

/// A queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpH {
    pub qpn: u32,
    pub qp_type: QpType,
}

pub(crate) struct QpSt {
    pub qp_type: QpType,
    pub sq: Ring,
    pub rq: Option<Ring>,
    pub slot: DbSlot,
    pub sq_pi: u32,
    pub rq_pi: u32,
    /// wr_ids of send WQEs posted and not yet retired, oldest first.
    pub sq_outstanding: VecDeque<u64>,
    pub rq_outstanding: u32,
    pub srqn: Option<u32>,
    pub cap: QpCap,
    pub send_cqn: u32,
    pub recv_cqn: u32,
}

/// What to create a QP with.
#[derive(Debug, Clone)]
pub struct QpInit {
    pub qp_type: QpType,
    pub pd: Pd,
    pub send_cq: CqH,
    pub recv_cq: CqH,
    pub srq: Option<SrqH>,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline: u32,
    pub sq_sig_all: bool,
    /// Ring pages: contiguous (CONTIGUOUS page list) or scattered (ONE_LEVEL).
    pub layout: Layout,
    /// UAR page of the doorbell slot (None: the first free slot).
    pub uar: Option<u32>,
    /// RD QPs: the RD domain (AD-11; CreateQpIn's `xrcdn`).
    pub rdd: u32,
}

impl QpInit {
    pub fn new(qp_type: QpType, pd: Pd, cq: CqH) -> QpInit {
        QpInit {
            qp_type,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline: 64,
            sq_sig_all: false,
            layout: Layout::Scattered,
            uar: None,
            rdd: 0,
        }
    }

    /// An RD QP in RD domain `rdd` (AD-11).
    pub fn rd(pd: Pd, cq: CqH, rdd: u32) -> QpInit {
        QpInit {
            rdd,
            ..QpInit::new(QpType::Rd, pd, cq)
        }
    }

    pub fn rc(pd: Pd, cq: CqH) -> QpInit {
        QpInit::new(QpType::Rc, pd, cq)
    }

    pub fn uc(pd: Pd, cq: CqH) -> QpInit {
        QpInit::new(QpType::Uc, pd, cq)
    }

    pub fn ud(pd: Pd, cq: CqH) -> QpInit {
        QpInit::new(QpType::Ud, pd, cq)
    }

    pub fn wr(mut self, send: u32, recv: u32) -> QpInit {
        self.max_send_wr = send;
        self.max_recv_wr = recv;
        self
    }

    pub fn sge(mut self, send: u32, recv: u32) -> QpInit {
        self.max_send_sge = send;
        self.max_recv_sge = recv;
        self
    }

    pub fn inline(mut self, n: u32) -> QpInit {
        self.max_inline = n;
        self
    }

    pub fn srq(mut self, srq: SrqH) -> QpInit {
        self.srq = Some(srq);
        self.max_recv_wr = 0;
        self
    }

    pub fn recv_cq(mut self, cq: CqH) -> QpInit {
        self.recv_cq = cq;
        self
    }

    pub fn layout(mut self, l: Layout) -> QpInit {
        self.layout = l;
        self
    }

    pub fn sig_all(mut self) -> QpInit {
        self.sq_sig_all = true;
        self
    }

    pub fn uar(mut self, uar: u32) -> QpInit {
        self.uar = Some(uar);
        self
    }
}

/// The peer of a connected QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remote {
    pub lid: u16,
    pub qpn: u32,
    /// The PSN the peer's requester starts at (our rq_psn).
    pub psn: u32,
}

/// Attributes for bringing a QP to RTS.
#[derive(Debug, Clone, Copy)]
pub struct ConnOpts {
    /// `enum vhca_mtu`; None: the port's active MTU.
    pub mtu: Option<u8>,
    /// Our requester's first PSN.
    pub sq_psn: u32,
    /// Local ACK timeout exponent (4.096 us * 2^timeout).
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub access: u32,
    pub qkey: u32,
    pub sl: u8,
}

impl Default for ConnOpts {
    fn default() -> ConnOpts {
        ConnOpts {
            mtu: None,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            access: access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC
                | access::FLUSH_GLOBAL
                | access::FLUSH_PERSISTENT,
            qkey: 0x1111_1111,
            sl: 0,
        }
    }
}

impl Hca {
    /// Creates a QP (in Reset) with rings sized for `init`.
    pub fn create_qp(&mut self, init: &QpInit) -> Result<QpH, CmdError> {
        let ud = matches!(init.qp_type, QpType::Ud | QpType::Gsi | QpType::Smi);
        let xrc = init.qp_type == QpType::XrcIni;
        let rd = init.qp_type == QpType::Rd;
        let headers = 16 + if ud { 48 } else { 0 } + if xrc || rd { 16 } else { 0 } + 32;
        let data = (init.max_send_sge * Sge::SIZE as u32).max(init.max_inline);
        let sq_shift = log2_ceil(u64::from(headers + data)).max(wqe_const::SQ_MIN_WQE_SHIFT);
        assert!(sq_shift <= wqe_const::MAX_WQE_SHIFT, "send WQE too large");
        let rq_shift = log2_ceil(u64::from(
            RecvCtrl::SIZE as u32 + init.max_recv_sge.max(1) * Sge::SIZE as u32,
        ))
        .max(wqe_const::RQ_MIN_WQE_SHIFT);
        let log2_sq = log2_ceil(u64::from(init.max_send_wr.max(1)));
        let sq = self.alloc_ring(log2_sq, sq_shift, init.layout);
        let (rq, log2_rq) = if init.srq.is_some() || xrc {
            (None, 0)
        } else {
            let l = log2_ceil(u64::from(init.max_recv_wr.max(1)));
            (Some(self.alloc_ring(l, rq_shift, init.layout)), l)
        };
        let slot = self.alloc_slot(init.uar);
        self.clear_slot(slot)?;
        let cap = QpCap {
            max_send_wr: init.max_send_wr,
            max_recv_wr: if init.srq.is_some() || xrc {
                0
            } else {
                init.max_recv_wr
            },
            max_send_sge: init.max_send_sge,
            max_recv_sge: if xrc { 0 } else { init.max_recv_sge },
            max_inline_data: init.max_inline,
        };
        let input = CreateQpIn {
            qp_type: init.qp_type.raw(),
            sq_sig_all: u8::from(init.sq_sig_all),
            sq_wqe_shift: sq_shift as u8,
            rq_wqe_shift: rq_shift as u8,
            log2_sq_size: log2_sq as u8,
            log2_rq_size: log2_rq as u8,
            port: num::PORT as u8,
            rsvd0: 0,
            pdn: init.pd.0,
            send_cqn: init.send_cq.cqn,
            recv_cqn: init.recv_cq.cqn,
            srqn: init.srq.map_or(num::NONE, |s| s.srqn),
            cap,
            uar: slot.uar,
            db_slot: slot.slot,
            rsvd1: [0; 2],
            xrcdn: init.rdd,
            sq: sq.pbl,
            rq: rq.as_ref().map_or(Pbl::default(), |r| r.pbl),
        };
        match self.cmd::<_, CreateQpOut>(Opcode::CreateQp, &input) {
            Ok(o) => {
                self.qps.insert(
                    o.qpn,
                    QpSt {
                        qp_type: init.qp_type,
                        sq,
                        rq,
                        slot,
                        sq_pi: 0,
                        rq_pi: 0,
                        sq_outstanding: VecDeque::new(),
                        rq_outstanding: 0,
                        srqn: init.srq.map(|s| s.srqn),
                        cap: o.cap,
                        send_cqn: init.send_cq.cqn,
                        recv_cqn: init.recv_cq.cqn,
                    },
                );
                Ok(QpH {
                    qpn: o.qpn,
                    qp_type: init.qp_type,
                })
            }
            Err(e) => {
                self.free_ring(&sq);
                if let Some(r) = &rq {
                    self.free_ring(r);
                }
                self.free_slot(slot);
                Err(e)
            }
        }
    }

    /// The sizes CREATE_QP granted.
    pub fn qp_cap(&self, qp: QpH) -> QpCap {
        self.qps.get(&qp.qpn).map_or(QpCap::default(), |q| q.cap)
    }

    /// The (send, receive) CQNs a QP was created with.
    pub fn qp_cqs(&self, qp: QpH) -> (u32, u32) {
        self.qps
            .get(&qp.qpn)
            .map_or((0, 0), |q| (q.send_cqn, q.recv_cqn))
    }

    /// MODIFY_QP with a raw mask and attributes. Going to Reset forgets the
    /// WQEs the driver had posted (the device discards them too).
    pub fn modify_qp(&mut self, qp: QpH, mask: u32, attr: &QpAttr) -> Result<(), CmdError> {
        let alt = device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]);
        self.modify_qp_alt(qp, mask, attr, &alt)
    }

    /// MODIFY_QP with an alternate path too (AD-10; read with `ALT_PATH`).
    pub fn modify_qp_alt(
        &mut self,
        qp: QpH,
        mask: u32,
        attr: &QpAttr,
        alt: &device::abi::cmd::AltPath,
    ) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(
            Opcode::ModifyQp,
            &ModifyQpIn {
                qpn: qp.qpn,
                attr_mask: mask,
                attr: *attr,
                alt: *alt,
            },
        )?;
        if mask & m::STATE != 0 && attr.qp_state == QpState::Reset.raw() {
            if let Some(q) = self.qps.get_mut(&qp.qpn) {
                q.sq_outstanding.clear();
                q.rq_outstanding = 0;
            }
        }
        Ok(())
    }

    /// Moves a QP to `state` with no other attribute.
    pub fn set_qp_state(&mut self, qp: QpH, state: QpState) -> Result<(), CmdError> {
        let attr = QpAttr {
            qp_state: state.raw(),
            ..QpAttr::default()
        };
        self.modify_qp(qp, m::STATE, &attr)
    }

    pub fn query_qp(&mut self, qp: QpH) -> Result<QueryQpOut, CmdError> {
        self.cmd(Opcode::QueryQp, &QueryQpIn { qpn: qp.qpn })
    }

    /// The QP's state as QUERY_QP reports it.
    pub fn qp_state(&mut self, qp: QpH) -> Result<Option<QpState>, CmdError> {
        Ok(QpState::from_raw(self.query_qp(qp)?.attr.qp_state))
    }

    pub fn destroy_qp(&mut self, qp: QpH) -> Result<(), CmdError> {
        self.cmd::<_, Nothing>(Opcode::DestroyQp, &DestroyQpIn { qpn: qp.qpn })?;
        if let Some(s) = self.qps.remove(&qp.qpn) {
            self.free_ring(&s.sq);
            if let Some(r) = &s.rq {
                self.free_ring(r);
            }
            self.free_slot(s.slot);
        }
        Ok(())
    }

    fn path_mtu(&self, o: &ConnOpts) -> u8 {
        o.mtu.unwrap_or(if self.port.active_mtu == 0 {
            Mtu::M1024.raw()
        } else {
            self.port.active_mtu
        })
    }

    /// Reset → Init (RC, UC: access flags; UD: Q_Key), as ibverbs masks it.
    pub fn qp_to_init(&mut self, qp: QpH, o: &ConnOpts) -> Result<(), CmdError> {
        let mut a = QpAttr {
            qp_state: QpState::Init.raw(),
            pkey_index: 0,
            port_num: num::PORT as u8,
            ..QpAttr::default()
        };
        let mask = match qp.qp_type {
            QpType::Rc | QpType::Uc | QpType::XrcIni | QpType::XrcTgt => {
                a.qp_access_flags = o.access;
                m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS
            }
            QpType::Ud => {
                a.qkey = o.qkey;
                m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY
            }
            QpType::Gsi | QpType::Smi => {
                a.qkey = o.qkey;
                m::STATE | m::PKEY_INDEX | m::QKEY
            }
            // AD-11: a Q_Key and the remote access rights.
            QpType::Rd => {
                a.qkey = o.qkey;
                a.qp_access_flags = o.access;
                m::STATE | m::QKEY | m::ACCESS_FLAGS
            }
        };
        self.modify_qp(qp, mask, &a)
    }

    /// Init → RTR toward `remote` (RC, UC), or plain (UD).
    pub fn qp_to_rtr(
        &mut self,
        qp: QpH,
        remote: Option<Remote>,
        o: &ConnOpts,
    ) -> Result<(), CmdError> {
        let mut a = QpAttr {
            qp_state: QpState::Rtr.raw(),
            ..QpAttr::default()
        };
        let mask = match qp.qp_type {
            QpType::Rc | QpType::Uc | QpType::XrcIni | QpType::XrcTgt => {
                let r = remote.expect("a connected QP needs its remote");
                a.path_mtu = self.path_mtu(o);
                a.dest_qp_num = r.qpn;
                a.rq_psn = r.psn & 0xff_ffff;
                a.ah_attr = Av {
                    dlid: r.lid,
                    sl: o.sl,
                    port_num: num::PORT as u8,
                    ..Av::default()
                };
                let base = m::STATE | m::AV | m::PATH_MTU | m::DEST_QPN | m::RQ_PSN;
                // Linux's qp_state_table: an XRC_INI QP has no responder attributes.
                if matches!(qp.qp_type, QpType::Rc | QpType::XrcTgt) {
                    a.max_dest_rd_atomic = o.max_dest_rd_atomic;
                    a.min_rnr_timer = o.min_rnr_timer;
                    base | m::MAX_DEST_RD_ATOMIC | m::MIN_RNR_TIMER
                } else {
                    base
                }
            }
            _ => m::STATE,
        };
        self.modify_qp(qp, mask, &a)
    }

    /// RTR → RTS.
    pub fn qp_to_rts(&mut self, qp: QpH, o: &ConnOpts) -> Result<(), CmdError> {
        let mut a = QpAttr {
            qp_state: QpState::Rts.raw(),
            sq_psn: o.sq_psn & 0xff_ffff,
            ..QpAttr::default()
        };
        let mask = if matches!(qp.qp_type, QpType::Rc | QpType::XrcIni) {
            a.timeout = o.timeout;
            a.retry_cnt = o.retry_cnt;
            a.rnr_retry = o.rnr_retry;
            a.max_rd_atomic = o.max_rd_atomic;
            m::STATE | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC
        } else if qp.qp_type == QpType::XrcTgt {
            // Linux's qp_state_table: an XRC_TGT QP has no requester attributes.
            a.timeout = o.timeout;
            m::STATE | m::TIMEOUT | m::SQ_PSN
        } else if qp.qp_type == QpType::Rd {
            // AD-11: the send PSN is the EE context's (MODIFY_EEC).
            m::STATE
        } else {
            m::STATE | m::SQ_PSN
        };
        self.modify_qp(qp, mask, &a)
    }

    /// CREATE_QP of an XRC_TGT QP in `xrcdn` (SR-02): no rings, slot, PD or CQ.
    pub fn create_xrc_tgt_qp(&mut self, xrcdn: u32) -> Result<QpH, CmdError> {
        let input = CreateQpIn {
            qp_type: QpType::XrcTgt.raw(),
            sq_sig_all: 0,
            sq_wqe_shift: 0,
            rq_wqe_shift: 0,
            log2_sq_size: 0,
            log2_rq_size: 0,
            port: num::PORT as u8,
            rsvd0: 0,
            pdn: num::NONE,
            send_cqn: num::NONE,
            recv_cqn: num::NONE,
            srqn: num::NONE,
            cap: QpCap::default(),
            uar: 0,
            db_slot: 0,
            rsvd1: [0; 2],
            xrcdn,
            sq: Pbl::default(),
            rq: Pbl::default(),
        };
        let o = self.cmd::<_, CreateQpOut>(Opcode::CreateQp, &input)?;
        Ok(QpH {
            qpn: o.qpn,
            qp_type: QpType::XrcTgt,
        })
    }

    /// Reset → Init → RTR → RTS (RC/UC toward `remote`; UD ignores it).
    pub fn qp_to_rts_from_reset(
        &mut self,
        qp: QpH,
        remote: Option<Remote>,
        o: &ConnOpts,
    ) -> Result<(), CmdError> {
        self.qp_to_init(qp, o)?;
        self.qp_to_rtr(qp, remote, o)?;
        self.qp_to_rts(qp, o)
    }
}
