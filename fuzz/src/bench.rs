//! The engine bench of `engine_packets` and `wqe_decode`: one engine with RC, UC and
//! UD QPs in every state (Reset, Init, RTR, RTS, SQD, SQE, Error; 10.3.1), some on an
//! SRQ, one MR over a window of memory whose outside must stay untouched. With a
//! [`Setup`] (issue 25 item 7) it also holds what came later: RD QPs on an EE
//! context in an RD domain (AD-11), an XRC domain with an XRC SRQ, a TGT and an INI
//! QP (SR-02), UD QPs attached to multicast groups (AD-09/PV-07), an RC QP with an
//! alternate path (AD-10), and a port whose SLs, data VLs, VL arbitration tables,
//! link rate, static rates, end-to-end credits (RL-13) and receive reorder hold
//! the input chooses.

use arbitrary::Arbitrary;
use transport::engine::{Engine, Limits, PortConfig, VlArbEntry, VlArbTables};
use transport::memory::VecMemory;
use transport::verbs::{
    Access, AddressVector, AttrMask, EecAttr, GlobalRoute, Handle, MigState, Mtu, QpAttr, QpCap,
    QpInit, QpState, QpType, RdQpAttr, RdQpInit, RecvWr, SendData, SendFlags, SendWr, Sge, Time,
    UdDest, WrOpcode,
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

/// Multicast groups of the bench: MGID `ff12:401b::<i>`, MLID `0xc000 + i`.
pub const MCAST_GROUPS: u8 = 4;
/// The remote EECN the bench's EE context is connected to.
pub const PEER_EECN: u32 = 0x40;

pub fn mgid(i: u8) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..4].copy_from_slice(&[0xff, 0x12, 0x40, 0x1b]);
    g[15] = i % MCAST_GROUPS;
    g
}

pub fn mlid(i: u8) -> u16 {
    transport::engine::MULTICAST_LID_BASE + u16::from(i % MCAST_GROUPS)
}

/// The port and engine options the input chooses (issue 25 item 7). Values
/// the engine refuses (an SL-to-VL table past the data VLs, arbitration tables
/// that starve a VL) fall back as `Engine::new` documents, which is itself
/// worth reaching.
#[derive(Arbitrary, Debug, Default, Clone)]
pub struct Setup {
    /// Data VLs, 1..=15 (AD-06).
    pub data_vls: u8,
    /// SL-to-VL table (each entry taken modulo 16).
    pub sl2vl: [u8; 16],
    /// VL arbitration: (VL, weight) entries of the high and low tables.
    pub high: Vec<(u8, u8)>,
    pub low: Vec<(u8, u8)>,
    pub high_limit: u8,
    /// The port's link rate in units of 100 Mb/s (0: the default).
    pub rate: u8,
    /// The connected QPs' static rate (IBV_RATE_*, pacing AD-07) and SL.
    pub static_rate: u8,
    pub sl: u8,
    /// End-to-end credits off (RL-13; on by default).
    pub no_credits: bool,
    /// The receive reorder hold in microseconds (0: off; engine::reorder).
    pub hold_us: u8,
}

impl Setup {
    fn port(&self, mut p: PortConfig) -> PortConfig {
        if self.data_vls != 0 {
            p.data_vls = self.data_vls.clamp(1, 15);
            p.sl2vl = self.sl2vl.map(|v| v % 16);
            let t = |v: &[(u8, u8)]| {
                v.iter()
                    .take(70)
                    .map(|&(vl, weight)| VlArbEntry {
                        vl: vl % 16,
                        weight,
                    })
                    .collect()
            };
            if !self.high.is_empty() || !self.low.is_empty() {
                p.vl_arb = VlArbTables {
                    high: t(&self.high),
                    low: t(&self.low),
                    high_limit: self.high_limit,
                };
            }
        }
        if self.rate != 0 {
            p.rate_mbps = u32::from(self.rate) * 100;
        }
        p
    }

    fn limits(&self) -> Limits {
        Limits {
            credits: !self.no_credits,
            reorder_hold_ns: u64::from(self.hold_us) * 1000,
            ..Limits::default()
        }
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
    pub setup: Setup,
    /// RD QPs (AD-11), after the QPs of `qps` in the packet targets' table.
    pub rd: Vec<u32>,
    /// The EE context of the RD QPs, its domain.
    pub eecn: u32,
    pub rdd: Handle,
    /// The XRC SRQ (its number is what XRCETH names) and the INI QP.
    pub xrc_srq: Handle,
    pub xrc_ini: u32,
    /// The RC QP with an alternate path loaded (AD-10).
    pub apm_qp: u32,
    pd: Handle,
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
        Bench::with(roce, &Setup::default())
    }

    pub fn with(roce: bool, setup: &Setup) -> Bench {
        let port = if roce {
            let mut p = PortConfig::ethernet(OUR_MAC);
            p.roce_gids[0] = Some(gid(1, true));
            p.roce_gids[1] = Some(gid(1, false));
            p
        } else {
            PortConfig::new(OUR_LID, 0x0002_c903_0000_0001)
        };
        let mut e = Engine::new(setup.port(port), setup.limits());
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
            setup: setup.clone(),
            rd: Vec::new(),
            eecn: 0,
            rdd: 0,
            xrc_srq: 0,
            xrc_ini: 0,
            apm_qp: 0,
            pd,
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
        b.add_later();
        b
    }

    /// What the bench gained with issue 25 item 7: RD, XRC, multicast
    /// attachments and an alternate path. Each piece is built through the
    /// engine's public verbs, as transport/tests/engine_{rd,xrc,mcast,apm}.rs do.
    fn add_later(&mut self) {
        let now = self.now;
        // RD (AD-11): a domain, an EE context at RTS towards the peer, two RD
        // QPs at RTS with receives posted.
        self.rdd = self.e.alloc_rdd().unwrap();
        self.eecn = self.e.create_eec(self.rdd).unwrap();
        let ea = EecAttr {
            pkey_index: 0,
            av: av(self.roce, false),
            path_mtu: Mtu::M1024,
            remote_eecn: PEER_EECN,
            rq_psn: PSN,
            sq_psn: PSN,
            min_rnr_timer: 1,
            timeout: 8,
            retry_cnt: 3,
            rnr_retry: 3,
        };
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            self.e.modify_eec(self.eecn, st, &ea, now).unwrap();
        }
        for _ in 0..2 {
            let cq = self.e.create_cq().unwrap();
            self.cqs.push(cq);
            let qpn = self
                .e
                .create_rd_qp(RdQpInit {
                    pd: self.pd,
                    rdd: self.rdd,
                    send_cq: cq,
                    recv_cq: cq,
                    cap: cap(),
                    sq_sig_all: true,
                })
                .unwrap();
            for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
                let a = RdQpAttr {
                    state: st,
                    qkey: Some(QKEY),
                    access: Some(Access(1 | 2 | 4 | 8)),
                };
                self.e.modify_rd_qp(qpn, &a).unwrap();
            }
            for i in 0..4 {
                let r = recv(i, self.lkey, 8192 + 1024 * i, 1024);
                self.e.post_recv_rd(qpn, r).unwrap();
            }
            self.rd.push(qpn);
        }
        // XRC (SR-02): a domain, an XRC SRQ with receives, a TGT QP and an
        // INI QP at RTS.
        let xrcd = self.e.create_xrcd().unwrap();
        let cq = self.e.create_cq().unwrap();
        self.cqs.push(cq);
        self.xrc_srq = self.e.create_xrc_srq(self.pd, xrcd, cq, 64, 2, 4).unwrap();
        for i in 0..8 {
            let r = recv(i, self.lkey, 16384 + 512 * i, 512);
            self.e.post_srq_recv(self.xrc_srq, r).unwrap();
        }
        let tgt = self.e.create_xrc_tgt_qp(xrcd).unwrap();
        let idx = self.qps.len() as u32;
        self.qps.push((tgt, QpType::XrcTgt));
        self.walk(tgt, QpType::XrcTgt, PEER_QPN + idx, QpState::Rts);
        let ini = self.add_qp(self.pd, QpType::XrcIni, QpState::Rts, None);
        self.xrc_ini = ini;
        // Multicast (AD-09): the RTS UD QPs in groups 0 and 1.
        let uds: Vec<u32> = self
            .qps
            .iter()
            .filter(|&&(q, t)| {
                t == QpType::Ud && self.e.query_qp(q).is_ok_and(|s| s.0 == QpState::Rts)
            })
            .map(|&(q, _)| q)
            .collect();
        for (i, q) in uds.into_iter().enumerate() {
            let g = i as u8 % 2;
            self.e.attach_mcast(q, mgid(g), mlid(g)).unwrap();
        }
        // APM (AD-10): an RC QP at RTS whose alternate path is loaded and armed.
        self.apm_qp = self.add_qp(self.pd, QpType::Rc, QpState::Rts, None);
        self.alt(self.apm_qp, MigState::Armed, true);
    }

    /// Loads (when `load`) the alternate path of `qpn` (to the peer's second
    /// LID, or on RoCE its IPv6 GID) and sets migration state `mig` (AD-10).
    pub fn alt(&mut self, qpn: u32, mig: MigState, load: bool) {
        let mut alt_av = av(self.roce, true);
        if !self.roce {
            alt_av.dlid = PEER_LID + 1;
        }
        alt_av.sl = self.setup.sl % 16;
        let a = QpAttr {
            alt_av,
            alt_port_num: 1,
            alt_pkey_index: 0,
            alt_timeout: 8,
            path_mig_state: mig,
            ..QpAttr::default()
        };
        let mask = if load {
            AttrMask::PATH_MIG_STATE | AttrMask::ALT_PATH
        } else {
            AttrMask::PATH_MIG_STATE
        };
        let _ = self.e.modify_qp(qpn, &a, mask, self.now);
    }

    pub fn add_qp(&mut self, pd: Handle, t: QpType, target: QpState, srq: Option<Handle>) -> u32 {
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
                cap: cap(),
                sq_sig_all: true,
            })
            .unwrap();
        let idx = self.qps.len() as u32;
        self.qps.push((qpn, t));
        self.walk(qpn, t, PEER_QPN + idx, target);
        if srq.is_none()
            && t != QpType::XrcIni
            && matches!(target, QpState::Init | QpState::Rtr | QpState::Rts)
        {
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
        qpn
    }

    /// Walks QP `qpn` of type `t` from Reset to `target`, connected to `dest`,
    /// with the masks Linux's `qp_state_table` asks of each type (an XRC TGT QP
    /// no requester attributes, an INI QP no responder ones).
    fn walk(&mut self, qpn: u32, t: QpType, dest: u32, target: QpState) {
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
                    a.dest_qp_num = dest;
                    a.rq_psn = PSN;
                    a.max_dest_rd_atomic = 4;
                    a.min_rnr_timer = 1;
                    a.av = av(self.roce, false);
                    a.av.static_rate = self.setup.static_rate;
                    a.av.sl = self.setup.sl % 16;
                    match t {
                        QpType::Ud => AttrMask::STATE,
                        QpType::Uc | QpType::XrcIni => {
                            AttrMask::STATE
                                | AttrMask::AV
                                | AttrMask::PATH_MTU
                                | AttrMask::DEST_QPN
                                | AttrMask::RQ_PSN
                        }
                        QpType::Rc | QpType::XrcTgt => {
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
                    if t == QpType::XrcTgt {
                        AttrMask::STATE | AttrMask::TIMEOUT | AttrMask::SQ_PSN
                    } else if matches!(t, QpType::Rc | QpType::XrcIni) {
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

    /// The QPN of packet target `i`: the QPs of `qps`, then the RD QPs.
    pub fn target(&self, i: u8) -> (u32, Option<QpType>) {
        let i = usize::from(i) % (self.qps.len() + self.rd.len());
        match self.qps.get(i) {
            Some(&(q, t)) => (q, Some(t)),
            None => (self.rd[i - self.qps.len()], None),
        }
    }

    /// A transport part to target `qp` (see `engine_packets`' `Op::Packet` for
    /// `flags`), on SL `sl` (its VL from the port's SL-to-VL table).
    pub fn packet(&mut self, qp: u8, flags: u8, psn: u8, sl: u8, bytes: &[u8]) {
        let mut t = bytes.to_vec();
        if t.len() < 12 {
            t.resize(12, 0);
        }
        let (qpn, ty) = self.target(qp);
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
        if flags & 32 != 0 {
            // The extended header after the BTH names what the QP needs:
            // RDETH our EECN and DETH the Q_Key (RD, 9.3.3/9.3.4), XRCETH the
            // XRC SRQ (9.3.8.2), DETH the Q_Key (UD).
            let ext: &[u32] = match ty {
                None => &[self.eecn, QKEY],
                Some(QpType::XrcTgt) => &[self.xrc_srq],
                Some(QpType::Ud) => &[QKEY],
                _ => &[],
            };
            for (k, v) in ext.iter().enumerate() {
                let at = 12 + 4 * k;
                if t.len() < at + 4 {
                    t.resize(at + 4, 0);
                }
                t[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
        }
        // Bit 6: from the peer's alternate path (its second LID, or on RoCE its
        // IPv6 GID), as an APM peer that migrated sends (AD-10).
        let alt = flags & 64 != 0;
        let pkt = if self.roce {
            let v4 = flags & 16 == 0 && !alt;
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
            let slid = if alt { PEER_LID + 1 } else { PEER_LID };
            let mut p = native_packet(slid, OUR_LID, sl, grh, &t);
            self.set_vl(&mut p, sl);
            p
        };
        self.e.handle_packet(&pkt, &mut self.mem, self.now);
    }

    /// A datagram to multicast group `g` (MLID, GRH with the MGID, DestQP
    /// 0xFFFFFF; 10.5.2, PV-07) around the transport part `bytes`; on RoCE to
    /// the group's IPv6 address and multicast MAC.
    pub fn mcast_packet(&mut self, g: u8, sl: u8, bytes: &[u8]) {
        let mut t = bytes.to_vec();
        if t.len() < 20 {
            t.resize(20, 0);
        }
        t[5..8].copy_from_slice(&[0xff; 3]);
        t[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
        t[12..16].copy_from_slice(&QKEY.to_be_bytes());
        let pkt = if self.roce {
            let dmac = transport::engine::link::multicast_mac(&mgid(g)).unwrap_or(OUR_MAC);
            roce_frame(PEER_MAC, dmac, gid(2, false), mgid(g), 0xc000, &t)
        } else {
            let mut peer = [0u8; 16];
            peer[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
            peer[8..].copy_from_slice(&0x0002_c903_0000_0002u64.to_be_bytes());
            let mut p = native_packet(PEER_LID, mlid(g), sl, Some((peer, mgid(g))), &t);
            self.set_vl(&mut p, sl);
            p
        };
        self.e.handle_packet(&pkt, &mut self.mem, self.now);
    }

    /// LRH:VL of a native packet from the port's SL-to-VL table (the VL the
    /// peer would use), CRCs fixed again.
    fn set_vl(&self, p: &mut Vec<u8>, sl: u8) {
        let vl = self.e.port().sl2vl[usize::from(sl % 16)] & 0xf;
        if vl != 0 && !p.is_empty() {
            p[0] = (p[0] & 0x0f) | vl << 4;
            crate::fix_native(p);
        }
    }
}

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
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
