//! Shortcuts the integration tests share: a brought-up node with a PD and a CQ,
//! registered buffers, connected QP pairs, waiting for completions.

use std::time::Duration;

use device::abi::cqe::Cqe;
use device::abi::verbs::{access, QpType, WcStatus};

use crate::guest::{Buf, Guest, GuestOptions, Layout};
use crate::hca::{ConnOpts, CqH, Hca, HcaConfig, Mr, PblKind, Pd, QpH, QpInit, Remote};
use crate::process::Vhca;
use crate::util::{assert_bytes, pattern};
use crate::verbs::{wc_status, RecvWr, SendWr};

/// Every access right.
pub const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// A guest connected to one node, brought up, with a PD and a CQ.
#[derive(Debug)]
pub struct Node {
    pub hca: Hca,
    pub pd: Pd,
    pub cq: CqH,
}

/// A buffer and the MR over it.
#[derive(Debug, Clone)]
pub struct Region {
    pub buf: Buf,
    pub mr: Mr,
}

impl Node {
    /// Connects to node `i` of `v` with default options.
    pub fn connect(v: &Vhca, i: usize) -> Node {
        Node::connect_with(v, i, GuestOptions::default(), HcaConfig::default())
    }

    pub fn connect_with(v: &Vhca, i: usize, go: GuestOptions, hc: HcaConfig) -> Node {
        let g =
            Guest::connect(v.socket(i), go).unwrap_or_else(|e| panic!("connect to node {i}: {e}"));
        let mut hca = Hca::bring_up_with(g, hc).unwrap_or_else(|e| panic!("node {i}: {e}"));
        let pd = hca.alloc_pd().expect("ALLOC_PD");
        let cq = hca.create_cq(12, 0).expect("CREATE_CQ");
        Node { hca, pd, cq }
    }

    /// A node over a brought-up HCA: allocates its PD and CQ.
    pub fn from_hca(mut hca: Hca) -> Node {
        let pd = hca.alloc_pd().expect("ALLOC_PD");
        let cq = hca.create_cq(12, 0).expect("CREATE_CQ");
        Node { hca, pd, cq }
    }

    pub fn lid(&self) -> u16 {
        self.hca.lid()
    }

    /// A zeroed buffer with an MR over it (all rights).
    pub fn region(&mut self, len: usize, layout: Layout, first_off: usize) -> Region {
        let buf = self.hca.guest_mut().alloc_buf(len, layout, first_off);
        let kind = if buf.pages.len() > 256 {
            PblKind::TwoLevel
        } else if layout == Layout::Contiguous {
            PblKind::Contiguous
        } else {
            PblKind::OneLevel
        };
        let mr = self
            .hca
            .reg_mr(self.pd, &buf, ALL_ACCESS, kind)
            .unwrap_or_else(|e| panic!("REG_MR of {len} bytes: {e}"));
        Region { buf, mr }
    }

    /// A QP with this node's PD and CQ.
    pub fn qp(&mut self, t: QpType) -> QpH {
        let init = QpInit::new(t, self.pd, self.cq);
        self.hca.create_qp(&init).expect("CREATE_QP")
    }

    pub fn write(&self, r: &Region, off: usize, data: &[u8]) {
        self.hca.guest().buf_write(&r.buf, off, data);
    }

    pub fn read(&self, r: &Region, off: usize, len: usize) -> Vec<u8> {
        self.hca.guest().buf_read(&r.buf, off, len)
    }

    /// Waits for `n` CQEs on the node's CQ; panics after `timeout` with what came.
    pub fn cqes(&mut self, n: usize, timeout: Duration) -> Vec<Cqe> {
        wait_n(&mut self.hca, self.cq, n, timeout)
    }
}

/// Waits for exactly `n` CQEs on `cq`; panics after `timeout` with what came.
pub fn wait_n(hca: &mut Hca, cq: CqH, n: usize, timeout: Duration) -> Vec<Cqe> {
    let got = hca.wait_cqes(cq, n, timeout);
    assert_eq!(
        got.len(),
        n,
        "waited {timeout:?} for {n} CQEs on CQ {}, got {}: {got:#?}",
        cq.cqn,
        got.len()
    );
    got
}

/// Asserts every CQE succeeded.
#[track_caller]
pub fn assert_success(cqes: &[Cqe]) {
    for c in cqes {
        assert_eq!(
            c.status,
            WcStatus::Success.raw(),
            "CQE wr_id {:#x} qp {} failed: {:?} (vendor_err {:#x}): {c:?}",
            c.wr_id,
            c.qp_num,
            wc_status(c),
            c.vendor_err
        );
    }
}

/// Creates a QP on each side and brings both to RTS toward each other (RC and
/// UC; for UD each is simply made ready). PSNs differ per side.
pub fn connect_pair(a: &mut Node, b: &mut Node, t: QpType) -> (QpH, QpH) {
    let ia = QpInit::new(t, a.pd, a.cq);
    let ib = QpInit::new(t, b.pd, b.cq);
    connect_pair_with(a, &ia, b, &ib, &ConnOpts::default())
}

pub fn connect_pair_with(
    a: &mut Node,
    ia: &QpInit,
    b: &mut Node,
    ib: &QpInit,
    o: &ConnOpts,
) -> (QpH, QpH) {
    let qa = a.hca.create_qp(ia).expect("CREATE_QP a");
    let qb = b.hca.create_qp(ib).expect("CREATE_QP b");
    connect_qps(&mut a.hca, qa, &mut b.hca, qb, o);
    (qa, qb)
}

/// Brings two existing QPs (in Reset) to RTS toward each other.
pub fn connect_qps(a: &mut Hca, qa: QpH, b: &mut Hca, qb: QpH, o: &ConnOpts) {
    let psn_a = 0x10_0000 ^ (qa.qpn * 7919) & 0xff_ffff;
    let psn_b = 0x20_0000 ^ (qb.qpn * 104_729) & 0xff_ffff;
    let oa = ConnOpts {
        sq_psn: psn_a,
        ..*o
    };
    let ob = ConnOpts {
        sq_psn: psn_b,
        ..*o
    };
    let ra = Remote {
        lid: b.lid(),
        qpn: qb.qpn,
        psn: psn_b,
    };
    let rb = Remote {
        lid: a.lid(),
        qpn: qa.qpn,
        psn: psn_a,
    };
    a.qp_to_rts_from_reset(qa, Some(ra), &oa)
        .unwrap_or_else(|e| panic!("QP {} to RTS: {e}", qa.qpn));
    b.qp_to_rts_from_reset(qb, Some(rb), &ob)
        .unwrap_or_else(|e| panic!("QP {} to RTS: {e}", qb.qpn));
}

/// Brings a QP on one HCA to RTS toward another QP on the same HCA (loopback
/// through the device's own LID).
pub fn connect_loopback(h: &mut Hca, qa: QpH, qb: QpH, o: &ConnOpts) {
    let lid = h.lid();
    let oa = ConnOpts {
        sq_psn: 0x123,
        ..*o
    };
    let ob = ConnOpts {
        sq_psn: 0x456,
        ..*o
    };
    h.qp_to_rts_from_reset(
        qa,
        Some(Remote {
            lid,
            qpn: qb.qpn,
            psn: 0x456,
        }),
        &oa,
    )
    .expect("loopback QP a to RTS");
    h.qp_to_rts_from_reset(
        qb,
        Some(Remote {
            lid,
            qpn: qa.qpn,
            psn: 0x123,
        }),
        &ob,
    )
    .expect("loopback QP b to RTS");
}

/// A loopback RC pair on one node moves 1 MiB of WRITE and a SEND, verified.
pub fn clean_transfer(n: &mut Node) {
    let q1 = n.qp(QpType::Rc);
    let q2 = n.qp(QpType::Rc);
    connect_loopback(&mut n.hca, q1, q2, &ConnOpts::default());
    let len = 1 << 20;
    let src = n.region(len, Layout::Scattered, 0);
    let dst = n.region(len, Layout::Scattered, 0);
    let d = pattern(0xc1ea, len);
    n.write(&src, 0, &d);
    n.hca
        .post_recv(q2, &RecvWr::new(7, vec![dst.mr.sge(&dst.buf, 0, 4096)]))
        .unwrap();
    n.hca
        .post_send_batch(
            q1,
            &[
                SendWr::write(1, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len)),
                SendWr::send(2).sge(src.mr.sge(&src.buf, 0, 100)),
            ],
        )
        .unwrap();
    let c = n.cqes(3, Duration::from_secs(30));
    assert_success(&c);
    // The SEND overwrote the first 100 bytes with the same bytes.
    assert_bytes(&n.read(&dst, 0, len), &d, "clean QP after the fuzzing");
}
