//! The engine bench of `engine_packets` and `wqe_decode`: one engine with RC, UC and
//! UD QPs in every state (Reset, Init, RTR, RTS, SQD, SQE, Error; 10.3.1), some on an
//! SRQ, one MR over a window of memory whose outside must stay untouched.

use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::VecMemory;
use transport::verbs::{
    Access, AddressVector, AttrMask, GlobalRoute, Handle, Mtu, QpAttr, QpCap, QpInit, QpState,
    QpType, RecvWr, SendData, SendFlags, SendWr, Sge, Time, UdDest, WrOpcode,
};

use crate::{native_packet, roce_frame};

pub const BASE: u64 = 0x10_0000;
pub const MEM: usize = 64 * 1024;
/// The registered window of memory: everything outside stays zero.
pub const MR_OFF: u64 = 16 * 1024;
pub const MR_LEN: u64 = 32 * 1024;
pub const OUR_LID: u16 = 1;
pub const PEER_LID: u16 = 2;
pub const OUR_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
pub const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// Every QP's SQ and RQ PSN: packets name PSNs relative to it. Close to the wrap
/// so that the 24-bit arithmetic (9.7.1) is exercised by short sequences.
pub const PSN: u32 = 0xff_fff0;
pub const QKEY: u32 = 0x1111_1111;
/// Remote QPNs of the connected QPs: 0x100 + index.
pub const PEER_QPN: u32 = 0x100;

pub fn gid(i: u8, v4: bool) -> [u8; 16] {
    if v4 {
        std::net::Ipv4Addr::new(10, 0, 0, i)
            .to_ipv6_mapped()
            .octets()
    } else {
        std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(i)).octets()
    }
}

pub struct Bench {
    pub e: Engine,
    pub mem: VecMemory,
    pub qps: Vec<(u32, QpType)>,
    pub cqs: Vec<Handle>,
    pub lkey: u32,
    pub roce: bool,
    pub now: Time,
    pub buf: Vec<u8>,
}

pub fn av(roce: bool, ipv6: bool) -> AddressVector {
    if roce {
        AddressVector {
            grh: Some(GlobalRoute {
                dgid: gid(2, !ipv6),
                flow_label: 0,
                sgid_index: u8::from(ipv6),
                hop_limit: 64,
                traffic_class: 0,
            }),
            dmac: PEER_MAC,
            ..AddressVector::default()
        }
    } else {
        AddressVector {
            dlid: PEER_LID,
            ..AddressVector::default()
        }
    }
}

impl Bench {
    pub fn new(roce: bool) -> Bench {
        let port = if roce {
            let mut p = PortConfig::ethernet(OUR_MAC);
            p.roce_gids[0] = Some(gid(1, true));
            p.roce_gids[1] = Some(gid(1, false));
            p
        } else {
            PortConfig::new(OUR_LID, 0x0002_c903_0000_0001)
        };
        let mut e = Engine::new(port, Limits::default());
        let mem = VecMemory::new(BASE, MEM);
        let pd = e.mrs().alloc_pd().unwrap();
        let all = Access(1 | 2 | 4 | 8) | Access::MW_BIND;
        let pages = (0..MR_LEN / 4096)
            .map(|i| BASE + MR_OFF + i * 4096)
            .collect();
        let lkey = e
            .mrs()
            .reg_mr(pd, BASE + MR_OFF, MR_LEN, all, 4096, pages)
            .unwrap();
        // A second, read-only MR over the first page of the window.
        e.mrs()
            .reg_mr(pd, 0x1000, 4096, Access(0), 4096, vec![BASE + MR_OFF])
            .unwrap();
        let srq = e.create_srq(pd, 64, 2, 4).unwrap();
        for i in 0..8 {
            e.post_srq_recv(srq, recv(i, lkey, 512 * i, 512)).unwrap();
        }
        let mut b = Bench {
            e,
            mem,
            qps: Vec::new(),
            cqs: Vec::new(),
            lkey,
            roce,
            now: Time(0),
            buf: vec![0; 8192],
        };
        let states = [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Error,
        ];
        for t in [QpType::Rc, QpType::Uc, QpType::Ud] {
            for s in states {
                for with_srq in [false, true] {
                    if with_srq && s != QpState::Rts {
                        continue;
                    }
                    b.add_qp(pd, t, s, with_srq.then_some(srq));
                }
            }
        }
        b
    }

    pub fn add_qp(&mut self, pd: Handle, t: QpType, target: QpState, srq: Option<Handle>) {
        let cq = self.e.create_cq().unwrap();
        self.cqs.push(cq);
        let qpn = self
            .e
            .create_qp(QpInit {
                qp_type: t,
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 2,
                    max_recv_sge: 2,
                    max_inline_data: 64,
                },
                sq_sig_all: true,
            })
            .unwrap();
        let idx = self.qps.len() as u32;
        self.qps.push((qpn, t));
        let ud = t == QpType::Ud;
        let mut a = QpAttr {
            state: Some(QpState::Init),
            port_num: 1,
            qkey: QKEY,
            access: Access(1 | 2 | 4 | 8) | Access::FLUSH_GLOBAL | Access::FLUSH_PERSISTENT,
            ..QpAttr::default()
        };
        let walk: &[QpState] = match target {
            QpState::Reset => &[],
            QpState::Init => &[QpState::Init],
            QpState::Rtr => &[QpState::Init, QpState::Rtr],
            QpState::Rts | QpState::Sqe => &[QpState::Init, QpState::Rtr, QpState::Rts],
            QpState::Sqd => &[QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd],
            QpState::Error => &[QpState::Init, QpState::Error],
        };
        for &s in walk {
            a.state = Some(s);
            let mask = match s {
                QpState::Init if ud => {
                    AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::QKEY
                }
                QpState::Init => {
                    AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS
                }
                QpState::Rtr => {
                    a.path_mtu = Mtu::M1024;
                    a.dest_qp_num = PEER_QPN + idx;
                    a.rq_psn = PSN;
                    a.max_dest_rd_atomic = 4;
                    a.min_rnr_timer = 1;
                    a.av = av(self.roce, false);
                    match t {
                        QpType::Ud => AttrMask::STATE,
                        QpType::Uc => {
                            AttrMask::STATE
                                | AttrMask::AV
                                | AttrMask::PATH_MTU
                                | AttrMask::DEST_QPN
                                | AttrMask::RQ_PSN
                        }
                        QpType::Rc | QpType::XrcIni | QpType::XrcTgt => {
                            AttrMask::STATE
                                | AttrMask::AV
                                | AttrMask::PATH_MTU
                                | AttrMask::DEST_QPN
                                | AttrMask::RQ_PSN
                                | AttrMask::MAX_DEST_RD_ATOMIC
                                | AttrMask::MIN_RNR_TIMER
                        }
                    }
                }
                QpState::Rts => {
                    a.sq_psn = PSN;
                    a.timeout = 8;
                    a.retry_cnt = 3;
                    a.rnr_retry = 3;
                    a.max_rd_atomic = 4;
                    if t == QpType::Rc {
                        AttrMask::STATE
                            | AttrMask::TIMEOUT
                            | AttrMask::RETRY_CNT
                            | AttrMask::RNR_RETRY
                            | AttrMask::SQ_PSN
                            | AttrMask::MAX_QP_RD_ATOMIC
                    } else {
                        AttrMask::STATE | AttrMask::SQ_PSN
                    }
                }
                _ => AttrMask::STATE,
            };
            self.e.modify_qp(qpn, &a, mask, self.now).unwrap();
        }
        if srq.is_none() && matches!(target, QpState::Init | QpState::Rtr | QpState::Rts) {
            for i in 0..4 {
                let _ = self
                    .e
                    .post_recv(qpn, recv(i, self.lkey, 4096 + 1024 * i, 1024));
            }
        }
        if target == QpState::Sqe && t != QpType::Rc {
            // SQE is entered only by a send error on UC/UD (10.3.1): a bad L_Key.
            let mut wr = self.send_wr(idx as usize, WrOpcode::Send, 0, 16);
            if let SendData::Sges(s) = &mut wr.data {
                s[0].lkey ^= 0xff;
            }
            let _ = self.e.post_send(qpn, wr);
            self.transmit(8);
        }
        // The bench is what it claims: every QP in the state it was built for
        // (SQE exists only for UC and UD; an RC send error goes to Error).
        let want = if target == QpState::Sqe && t == QpType::Rc {
            QpState::Rts
        } else {
            target
        };
        assert_eq!(self.e.query_qp(qpn).unwrap().0, want, "{t:?} QP state");
    }

    pub fn send_wr(&self, idx: usize, op: WrOpcode, off: u32, len: u32) -> SendWr {
        let (_, t) = self.qps[idx];
        SendWr {
            wr_id: idx as u64,
            opcode: op,
            flags: SendFlags::SIGNALED,
            data: SendData::Sges(vec![Sge {
                addr: BASE + MR_OFF + u64::from(off),
                length: len,
                lkey: self.lkey,
            }]),
            imm_or_inv: 0,
            remote_addr: 0x2000_0000,
            rkey: 0x1234,
            compare: 0,
            swap_add: 1,
            ud: (t == QpType::Ud).then(|| UdDest {
                av: av(self.roce, false),
                remote_qpn: PEER_QPN,
                remote_qkey: QKEY,
                pkey_index: None,
            }),
        }
    }

    pub fn transmit(&mut self, n: u8) {
        for _ in 0..n {
            if self
                .e
                .poll_transmit(&mut self.mem, self.now, &mut self.buf)
                .is_none()
            {
                break;
            }
        }
        for &cq in &self.cqs {
            while self.e.poll_cq(cq).is_some() {}
        }
        while self.e.poll_event().is_some() {}
    }

    pub fn packet(&mut self, qp: u8, flags: u8, psn: u8, bytes: &[u8]) {
        let mut t = bytes.to_vec();
        if t.len() < 12 {
            t.resize(12, 0);
        }
        let (qpn, _) = self.qps[usize::from(qp) % self.qps.len()];
        if flags & 1 == 0 {
            t[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        }
        if flags & 2 == 0 {
            t[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
        }
        if flags & 4 == 0 {
            let p = PSN.wrapping_add(u32::from(psn)) & 0xff_ffff;
            t[9..12].copy_from_slice(&p.to_be_bytes()[1..]);
        }
        let pkt = if self.roce {
            let v4 = flags & 16 == 0;
            roce_frame(PEER_MAC, OUR_MAC, gid(2, v4), gid(1, v4), 0xc000, &t)
        } else {
            let grh = (flags & 8 != 0).then(|| {
                let mut ours = [0u8; 16];
                ours[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
                ours[8..].copy_from_slice(&0x0002_c903_0000_0001u64.to_be_bytes());
                let mut peer = ours;
                peer[15] = 2;
                (peer, ours)
            });
            native_packet(PEER_LID, OUR_LID, 0, grh, &t)
        };
        self.e.handle_packet(&pkt, &mut self.mem, self.now);
    }
}

pub fn recv(id: u64, lkey: u32, off: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        sges: vec![Sge {
            addr: BASE + MR_OFF + off,
            length: len,
            lkey,
        }],
    }
}

pub const OPCODES: [WrOpcode; 13] = [
    WrOpcode::RdmaWrite,
    WrOpcode::RdmaWriteWithImm,
    WrOpcode::Send,
    WrOpcode::SendWithImm,
    WrOpcode::RdmaRead,
    WrOpcode::AtomicCmpSwap,
    WrOpcode::AtomicFetchAdd,
    WrOpcode::LocalInv,
    WrOpcode::SendWithInv,
    WrOpcode::Flush,
    WrOpcode::AtomicWrite,
    WrOpcode::Send,
    WrOpcode::RdmaRead,
];
