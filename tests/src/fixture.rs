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

/// What [`transfer_rate`] moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// RDMA WRITE from `local` (on the node posting) to `remote`.
    Write,
    /// RDMA READ of `remote` into `local`.
    Read,
    /// 8-byte FETCH_ADD of 1 to the first word of `remote`, each result
    /// into its own 8 bytes of `local` (as `ib_atomic_bw`; `msg` 8).
    FetchAdd,
    /// 8-byte COMPARE_SWAP of the first word of `remote` from the WR's index
    /// to the next (one QP: each finds the value the one before stored).
    CmpSwap,
}

/// RC WRITEs, READs or ATOMICs of `msg` bytes between `local` (on `a`) and
/// `remote`, spread round robin over `qps` (each with up to `per_qp`
/// outstanding), cycling over `slots` message-sized slots, `total` in all;
/// returns bytes/s (for ATOMICs, 8 bytes per operation).
/// Every completion must succeed. (Benchmarks: the device's figures and the
/// RC-under-loss figures.)
#[allow(clippy::too_many_arguments)]
pub fn transfer_rate(
    a: &mut Node,
    qps: &[QpH],
    op: Transfer,
    local: &Region,
    remote: &Region,
    msg: usize,
    slots: usize,
    total: usize,
    per_qp: usize,
) -> f64 {
    let mut outstanding = vec![0usize; qps.len()];
    let index: std::collections::HashMap<u32, usize> =
        qps.iter().enumerate().map(|(i, q)| (q.qpn, i)).collect();
    let (mut posted, mut done, mut next) = (0usize, 0usize, 0usize);
    let t = std::time::Instant::now();
    while done < total {
        // Fill every QP's window, round robin from where the last pass ended.
        let mut idle_pass = 0;
        while posted < total && idle_pass < qps.len() {
            let i = next % qps.len();
            next += 1;
            if outstanding[i] >= per_qp {
                idle_pass += 1;
                continue;
            }
            idle_pass = 0;
            let off = (posted % slots) * msg;
            let sges = vec![local.mr.sge(&local.buf, off, msg)];
            let wr = match op {
                Transfer::Write => {
                    crate::SendWr::write(i as u64, remote.buf.va(off), remote.mr.rkey)
                }
                Transfer::Read => crate::SendWr::read(i as u64, remote.buf.va(off), remote.mr.rkey),
                Transfer::FetchAdd => {
                    crate::SendWr::fetch_add(i as u64, remote.buf.va(0), remote.mr.rkey, 1)
                }
                Transfer::CmpSwap => crate::SendWr::cmp_swap(
                    i as u64,
                    remote.buf.va(0),
                    remote.mr.rkey,
                    posted as u64,
                    posted as u64 + 1,
                ),
            };
            a.hca.post_send(qps[i], &wr.sges(sges)).unwrap();
            outstanding[i] += 1;
            posted += 1;
        }
        let mut got = a.hca.poll_cq(a.cq, 64);
        if got.is_empty() {
            got = a.hca.wait_cqes(a.cq, 1, Duration::from_secs(30));
            assert!(!got.is_empty(), "RC {op:?} stalled at {done} of {total}");
        }
        assert_success(&got);
        for c in &got {
            outstanding[index[&c.qp_num]] -= 1;
        }
        done += got.len();
    }
    (total * msg) as f64 / t.elapsed().as_secs_f64()
}

/// Benchmarks: node 0 and node 1 of `v`, an RC pair between them with room
/// for 512 WRs each way, and a source region on node 0 and a destination on
/// node 1 of `slots` messages of `msg` bytes each.
pub fn bench_pair(v: &Vhca, msg: usize, slots: usize) -> (Node, Node, QpH, QpH, Region, Region) {
    let mut a = Node::connect(v, 0);
    let mut b = Node::connect(v, 1);
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq).wr(512, 512);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq).wr(512, 512);
    let (qa, qb) = connect_pair_with(&mut a, &ia, &mut b, &ib, &ConnOpts::default());
    let src = a.region(msg * slots, Layout::Contiguous, 0);
    let dst = b.region(msg * slots, Layout::Contiguous, 0);
    (a, b, qa, qb, src, dst)
}

/// `n` 8-byte SEND ping-pongs over the connected RC pair (`qa` on `a`, `qb`
/// on `b`), the driver spinning on the CQs (yielding between polls); the
/// round trips' median. (Benchmarks: one switch hop, the fat tree's hops.)
pub fn ping_pong_p50(a: &mut Node, qa: QpH, b: &mut Node, qb: QpH, n: usize) -> Duration {
    let sge = |r: &Region| vec![r.mr.sge(&r.buf, 0, 8)];
    let sbuf = a.region(4096, Layout::Contiguous, 0);
    let rbuf_a = a.region(4096, Layout::Contiguous, 0);
    let rbuf_b = b.region(4096, Layout::Contiguous, 0);
    let mut rtt = Vec::with_capacity(n);
    for i in 0..n as u64 {
        b.hca
            .post_recv(qb, &RecvWr::new(i, vec![rbuf_b.mr.sge(&rbuf_b.buf, 0, 64)]))
            .unwrap();
        a.hca
            .post_recv(qa, &RecvWr::new(i, vec![rbuf_a.mr.sge(&rbuf_a.buf, 0, 64)]))
            .unwrap();
        let t = std::time::Instant::now();
        a.hca
            .post_send(qa, &SendWr::send(i).sges(sge(&sbuf)))
            .unwrap();
        while b.hca.poll_cq(b.cq, 4).is_empty() {
            std::thread::yield_now();
        }
        b.hca
            .post_send(qb, &SendWr::send(i).sges(sge(&rbuf_b)))
            .unwrap();
        let mut seen = 0;
        while seen < 2 {
            seen += a.hca.poll_cq(a.cq, 4).len();
            std::thread::yield_now();
        }
        rtt.push(t.elapsed());
        // B's own SEND completion.
        while b.hca.poll_cq(b.cq, 4).is_empty() {
            std::thread::yield_now();
        }
    }
    rtt.sort();
    rtt[n / 2]
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

/// AD-10 between two nodes whose ports have LMC 1 (AD-01): base LIDs `lids`
/// (multiples of 2), each node owning its base LID and base LID + 1, so a
/// QP pair has two paths; `fault_a`: node 0's `--fault` (e.g. a dead path,
/// `drop_dlid=LID`).
pub fn lmc_pair_options(lids: (u16, u16), fault_a: Option<String>) -> crate::Options {
    crate::Options {
        lids: [(0, lids.0), (1, lids.1)].into(),
        node_toml: [(0, "lmc = 1".to_string()), (1, "lmc = 1".to_string())].into(),
        faults: fault_a.into_iter().map(|f| (0, f)).collect(),
        ..crate::Options::nodes(2)
    }
}

/// The alternate path to `dlid` from this port's second LID (source path
/// bits 1), Local ACK Timeout 14.
pub fn alt_path(dlid: u16) -> device::abi::cmd::AltPath {
    use device::abi::cmd::{AltPath, Av};
    let mut alt = AltPath::from_bytes(&[0; AltPath::SIZE]);
    alt.ah_attr = Av {
        dlid,
        src_path_bits: 1,
        port_num: 1,
        ..Av::default()
    };
    alt.port_num = 1;
    alt.timeout = 14;
    alt
}

/// RTS -> RTS loading QP `q`'s alternate path to `dlid` (see [`alt_path`])
/// with path migration state `state` (0 Migrated, 1 Rearm, 2 Armed).
pub fn load_alt(n: &mut Node, q: QpH, state: u8, dlid: u16) {
    use device::abi::verbs::qp_attr_mask as m;
    let a = device::abi::cmd::QpAttr {
        path_mig_state: state,
        ..device::abi::cmd::QpAttr::default()
    };
    n.hca
        .modify_qp_alt(q, m::ALT_PATH | m::PATH_MIG_STATE, &a, &alt_path(dlid))
        .expect("load the alternate path");
}
