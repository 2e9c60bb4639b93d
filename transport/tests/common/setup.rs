//! Set-ups the engine tests share: a registered node pair, QPs of given sizes,
//! a UD QP at RTS, and the work requests several test files build alike.

use transport::verbs::{
    Access, AddressVector, AttrMask, Completion, Handle, Mtu, MwBind, QpAttr, QpCap, QpInit,
    QpState, QpType, RecvWr, SendData, SendWr, UdDest, WrOpcode,
};

use super::{bring_up, connect, send_wr, sge, ConnOpts, Net, Pair, ALL_ACCESS, MEM_BASE};

/// Two nodes of `mem_len` bytes each, all of each node's memory registered
/// with `access`, and one pair connected with `o`: (bench, pair, node 0's
/// key, node 1's key).
pub fn pair_setup(
    seed: u64,
    mem_len: usize,
    access: Access,
    o: &ConnOpts,
) -> (Net, Pair, u32, u32) {
    let mut net = Net::new(2, mem_len, seed);
    let ka = net.reg_all(0, access);
    let kb = net.reg_all(1, access);
    let p = connect(&mut net, 0, 1, o);
    (net, p, ka, kb)
}

/// Queue sizes: `wr` work requests and `sge` SGEs each way, `inline` bytes
/// of inline data.
pub fn qp_cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// What creates a QP of type `t` in node `node`'s PD whose sends and
/// receives complete on `cq`; `sig_all`: every send signaled.
pub fn qp_init(net: &Net, node: usize, t: QpType, cq: Handle, cap: QpCap, sig_all: bool) -> QpInit {
    QpInit {
        qp_type: t,
        pd: net.nodes[node].pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: sig_all,
    }
}

/// A new CQ on node `node` and a QP of type `t` on it ([`qp_init`]), in
/// Reset: (QPN, CQ).
pub fn new_qp(net: &mut Net, node: usize, t: QpType, cap: QpCap, sig_all: bool) -> (u32, Handle) {
    let cq = net.nodes[node].engine.create_cq().expect("cq");
    let init = qp_init(net, node, t, cq, cap, sig_all);
    let qp = net.nodes[node].engine.create_qp(init).expect("qp");
    (qp, cq)
}

/// A UD QP on node `node` (64 WRs, 2 SGEs, 64 bytes inline, every send
/// signaled) at RTS with Q_Key 0x11111111: (QPN, CQ).
pub fn ud_qp(net: &mut Net, node: usize) -> (u32, Handle) {
    let o = ConnOpts {
        qp_type: QpType::Ud,
        ..ConnOpts::default()
    };
    let (qp, cq) = new_qp(net, node, QpType::Ud, qp_cap(64, 2, 64), true);
    bring_up(net, node, qp, &o, 0, 0, 0x123, 0);
    (qp, cq)
}

/// Where a UD SEND goes: QP `qpn` at LID `dlid`, with the Q_Key [`ud_qp`]
/// gives its QPs, the rest of the address vector at its defaults.
pub fn ud_dest(dlid: u16, qpn: u32) -> UdDest {
    UdDest {
        av: AddressVector {
            dlid,
            ..AddressVector::default()
        },
        remote_qpn: qpn,
        remote_qkey: 0x1111_1111,
        pkey_index: None,
    }
}

/// Posts a receive of `len` bytes at `addr` (key `key`) on node `node`'s QP.
pub fn recv(net: &mut Net, node: usize, qp: u32, id: u64, addr: u64, len: u32, key: u32) {
    let r = RecvWr {
        wr_id: id,
        sges: sge(addr, len, key),
    };
    net.nodes[node].engine.post_recv(qp, r).unwrap();
}

/// A signaled RDMA WRITE of `len` bytes from `MEM_BASE` (key `lkey`) to
/// `raddr` (key `rkey`).
pub fn write_wr(id: u64, lkey: u32, len: u32, rkey: u32, raddr: u64) -> SendWr {
    let mut w = send_wr(id, WrOpcode::RdmaWrite, sge(MEM_BASE, len, lkey));
    w.rkey = rkey;
    w.remote_addr = raddr;
    w
}

/// A BIND_MW of window `mw` to `[addr, addr + len)` of MR `mr` with
/// `access`, the window's key becoming `new` (MP-06, MP-07).
pub fn bind_wr(id: u64, mw: u32, new: u32, mr: u32, addr: u64, len: u64, access: Access) -> SendWr {
    let mut w = send_wr(id, WrOpcode::BindMw, Vec::new());
    w.data = SendData::Bind(MwBind {
        mw_rkey: mw,
        new_rkey: new,
        mr_lkey: mr,
        addr,
        length: len,
        access,
    });
    w
}

/// Posts `wr` on node `node`'s QP `qp` and runs the bench until its CQ `cq`
/// holds one completion; returns it.
pub fn post_wait(net: &mut Net, node: usize, qp: u32, cq: Handle, wr: SendWr) -> Completion {
    net.nodes[node].engine.post_send(qp, wr).unwrap();
    let mut c = super::wait(net, node, cq, 1);
    c.remove(0)
}

/// What a connected QP's Init, RTR and RTS take on the bench: port 1, P_Key
/// index 0, every access; path MTU 1024 along `av` to QP `dest_qpn`, `psn`
/// both ways, 4 READs/atomics each way, RNR timer 1, ACK timeout 10, 7
/// retries of each kind. The state is [`walk_to_rts`]'s to set.
pub fn rc_attr(av: AddressVector, dest_qpn: u32, psn: u32) -> QpAttr {
    QpAttr {
        port_num: 1,
        access: ALL_ACCESS,
        path_mtu: Mtu::M1024,
        dest_qp_num: dest_qpn,
        rq_psn: psn,
        sq_psn: psn,
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        av,
        ..QpAttr::default()
    }
}

/// The attributes an RC QP's RTR -> RTS needs (QS-02).
pub const RC_RTS_MASK: AttrMask = AttrMask(
    AttrMask::STATE.0
        | AttrMask::TIMEOUT.0
        | AttrMask::RETRY_CNT.0
        | AttrMask::RNR_RETRY.0
        | AttrMask::SQ_PSN.0
        | AttrMask::MAX_QP_RD_ATOMIC.0,
);

/// Takes node `node`'s QP `qpn` from Reset through Init (state, P_Key
/// index, port, access) and RTR (mask `rtr`) to RTS (mask `rts`) with the
/// attributes `a`.
pub fn walk_to_rts(net: &mut Net, node: usize, qpn: u32, a: &QpAttr, rtr: AttrMask, rts: AttrMask) {
    let now = net.now;
    let e = &mut net.nodes[node].engine;
    let init = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    for (state, mask) in [
        (QpState::Init, init),
        (QpState::Rtr, rtr),
        (QpState::Rts, rts),
    ] {
        let a = QpAttr {
            state: Some(state),
            ..*a
        };
        e.modify_qp(qpn, &a, mask, now)
            .unwrap_or_else(|err| panic!("QP {qpn} to {state:?}: {err:?}"));
    }
}

/// Init -> RTR -> RTS with the masks Linux's `qp_state_table` asks of each
/// XRC half (an INI QP no responder attributes, a TGT QP no requester ones).
pub fn bring_up_xrc(
    net: &mut Net,
    node: usize,
    qpn: u32,
    ty: QpType,
    peer_lid: u16,
    peer_qpn: u32,
) {
    let av = AddressVector {
        dlid: peer_lid,
        ..AddressVector::default()
    };
    let rtr =
        AttrMask::STATE | AttrMask::AV | AttrMask::PATH_MTU | AttrMask::DEST_QPN | AttrMask::RQ_PSN;
    let (rtr, rts) = if ty == QpType::XrcTgt {
        let rtr = rtr | AttrMask::MAX_DEST_RD_ATOMIC | AttrMask::MIN_RNR_TIMER;
        (rtr, AttrMask::STATE | AttrMask::TIMEOUT | AttrMask::SQ_PSN)
    } else {
        (rtr, RC_RTS_MASK)
    };
    walk_to_rts(net, node, qpn, &rc_attr(av, peer_qpn, 0x10), rtr, rts);
}

/// Node 1's XRC side: a domain, its CQ, and a TGT QP in it.
pub struct XrcTarget {
    pub xrcd: Handle,
    pub cq: Handle,
    pub tgt: u32,
}

/// Node 0's INI QP and its CQ.
pub struct XrcInitiator {
    pub ini: u32,
    pub cq: Handle,
}

/// An XRC INI QP on node 0 (LID 1) connected to a TGT QP in a new XRC domain
/// of node 1 (LID 2), both at RTS (SR-02); the XRC SRQs are the test's.
pub fn xrc_pair(net: &mut Net) -> (XrcInitiator, XrcTarget) {
    let t = {
        let e = &mut net.nodes[1].engine;
        let xrcd = e.create_xrcd().expect("xrcd");
        let cq = e.create_cq().expect("cq");
        let tgt = e.create_xrc_tgt_qp(xrcd).expect("tgt qp");
        XrcTarget { xrcd, cq, tgt }
    };
    let i = {
        let n = &mut net.nodes[0];
        let cq = n.engine.create_cq().expect("cq");
        let ini = n
            .engine
            .create_qp(QpInit {
                qp_type: QpType::XrcIni,
                pd: n.pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 64,
                    max_send_sge: 4,
                    max_inline_data: 64,
                    ..QpCap::default()
                },
                sq_sig_all: false,
            })
            .expect("ini qp");
        XrcInitiator { ini, cq }
    };
    bring_up_xrc(net, 0, i.ini, QpType::XrcIni, 2, t.tgt);
    bring_up_xrc(net, 1, t.tgt, QpType::XrcTgt, 1, i.ini);
    (i, t)
}
