//! UD multicast (AD-08, PV-07) between three `vhca` processes on UDP
//! loopback, driven over vfio-user: ATTACH_MCAST / DETACH_MCAST, QUERY_DEVICE's
//! max_mcast_* and delivery on the wire to every attached QP of every node
//! (the fabric carries a multicast packet to every node; ARCHITECTURE.md §6).

use std::time::Duration;

use transport::engine::{RxDrop, MAX_MCAST_GRP, MAX_MCAST_QP_ATTACH, MAX_TOTAL_MCAST_QP_ATTACH};
use vhca_tests::abi::cmd::Status;
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::cqe::Cqe;
use vhca_tests::abi::verbs::{wc_flags, QpType, WcOpcode};
use vhca_tests::abi::wqe::UdSeg;
use vhca_tests::fixture::{assert_success, Node, Region};
use vhca_tests::verbs::mcast_dest;
use vhca_tests::{ConnOpts, Layout, Options, QpH, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);
const QUIET: Duration = Duration::from_millis(400);
const MGID: [u8; 16] = [
    0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0xca, 0xfe, 0, 7,
];
const MLID: u16 = 0xc007;
const GRH: usize = 40;

fn group_dest(qkey: u32) -> UdSeg {
    mcast_dest(MGID, MLID, qkey)
}

fn ud(n: &mut Node, o: &ConnOpts) -> QpH {
    let q = n.qp(QpType::Ud);
    n.hca.qp_to_rts_from_reset(q, None, o).expect("UD to RTS");
    q
}

fn post_recv(n: &mut Node, q: QpH, r: &Region, id: u64) {
    n.hca
        .post_recv(q, &RecvWr::new(id, vec![r.mr.sge(&r.buf, 0, GRH + 256)]))
        .unwrap();
}

fn rx_drop(n: &mut Node, r: RxDrop) -> u64 {
    let v = n
        .hca
        .query_counters(CounterSet::RxDrop)
        .expect("QUERY_COUNTERS");
    let i = RxDrop::ALL.iter().position(|x| *x == r).unwrap();
    v[i]
}

/// Nothing arrives on the node's CQ for a while.
fn quiet(n: &mut Node) -> bool {
    let cq = n.cq;
    n.hca.wait_cqes(cq, 1, QUIET).is_empty()
}

/// Receives of QP `q` among `cqes`.
fn recvs_of(cqes: &[Cqe], q: QpH) -> Vec<Cqe> {
    cqes.iter()
        .filter(|c| c.qp_num == q.qpn && c.opcode == WcOpcode::Recv as u8)
        .copied()
        .collect()
}

/// Three nodes: node 0 sends from a QP that is itself attached and has a
/// second attached QP; node 1 has an attached QP and one that is not; node 2
/// one attached QP. One SEND to the group reaches the three attached QPs
/// that are not the sender, with the sender's QPN and LID, the GRH flag and
/// the MGID in the GRH; the others get nothing. After node 1's QP detaches,
/// the next SEND reaches nodes 0 and 2 only, and node 1 counts the packet
/// dropped (no attached QP, C9-58).
#[test]
fn pv_07_ad_08_multicast_to_two_nodes_and_loopback_and_detach_stops_it() {
    three_nodes(Options::nodes(3));
}

/// PV-07 with a fabric key (ARCHITECTURE.md §9): each copy of a multicast
/// datagram carries the sender's tag and number, and every receiver's
/// replay window (per sender) takes it once; the loopback copy too.
#[test]
fn pv_07_multicast_with_a_fabric_key() {
    let dir = tempfile::tempdir().expect("temporary folder");
    let key = dir.path().join("fabric.key");
    std::fs::write(&key, "5a".repeat(32) + "\n").expect("write the key file");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod 600");
    let mut opts = Options::nodes(3);
    opts.extra_args = vec!["--fabric-key-file".into(), key.display().to_string()];
    three_nodes(opts);
}

/// PV-07 through `vhca switch` (issue 26 item 3; AD-09): each node sends one
/// copy down its cable (and loops one back); the switch, with no SM, floods
/// it out of every other cabled port; the rest is as on the all-to-all
/// fabric.
#[test]
fn pv_07_ad_09_multicast_through_a_switch() {
    let (v, mut sw) = vhca_tests::switch_proc::star_fabric(3, 3, "");
    three_nodes_on(&v);
    let (_, c) = sw.stop();
    // Node 0's two SENDs in on port 1, out of ports 2 and 3 each.
    let port = |p: u64| {
        let all = c["ports"].as_array().unwrap();
        all.iter().find(|x| x["port"] == p).unwrap()["counters"].clone()
    };
    assert_eq!(
        (
            port(1)["rcv_packets"].as_u64(),
            port(1)["xmit_packets"].as_u64()
        ),
        (Some(2), Some(0)),
        "{c}"
    );
    for p in [2, 3] {
        assert_eq!(port(p)["xmit_packets"], 2, "{c}");
    }
    for (k, n) in c["drops"].as_object().unwrap() {
        assert_eq!(n, 0, "switch drop {k}: {c}");
    }
}

fn three_nodes(opts: Options) {
    three_nodes_on(&Vhca::spawn(opts));
}

fn three_nodes_on(v: &Vhca) {
    let mut n: Vec<Node> = (0..3).map(|i| Node::connect(v, i)).collect();
    let o = ConnOpts::default();
    let attr = n[0].hca.query_device().expect("QUERY_DEVICE");
    assert_eq!(
        (
            attr.max_mcast_grp,
            attr.max_mcast_qp_attach,
            attr.max_total_mcast_qp_attach
        ),
        (
            MAX_MCAST_GRP as u32,
            MAX_MCAST_QP_ATTACH as u32,
            MAX_TOTAL_MCAST_QP_ATTACH as u32
        )
    );
    let s = ud(&mut n[0], &o);
    let a0 = ud(&mut n[0], &o);
    let a1 = ud(&mut n[1], &o);
    let u1 = ud(&mut n[1], &o);
    let a2 = ud(&mut n[2], &o);
    // An RC QP cannot join; a unicast GID or LID is no group.
    let rc = n[1].qp(QpType::Rc);
    let bad = |r: Result<(), vhca_tests::hca::CmdError>| r.err().and_then(|e| e.status());
    assert_eq!(
        bad(n[1].hca.attach_mcast(rc.qpn, MGID, MLID)),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(n[1].hca.attach_mcast(a1.qpn, [0xfe; 16], MLID)),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(n[1].hca.attach_mcast(a1.qpn, MGID, 5)),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(n[1].hca.detach_mcast(a1.qpn, MGID, MLID)),
        Some(Status::BadParam)
    );
    for (i, q) in [(0, s), (0, a0), (1, a1), (2, a2)] {
        n[i].hca
            .attach_mcast(q.qpn, MGID, MLID)
            .expect("ATTACH_MCAST");
    }
    let regions: Vec<Region> = (0..3)
        .map(|i| n[i].region(4 * 4096, Layout::Scattered, 0))
        .collect();
    // Four receive buffers of 4 KiB per node: one per QP below.
    for (i, q, k) in [(0, s, 0), (0, a0, 1), (1, a1, 0), (1, u1, 1), (2, a2, 0)] {
        let (r, off) = (&regions[i], k * 4096);
        n[i].hca
            .post_recv(
                q,
                &RecvWr::new(k as u64, vec![r.mr.sge(&r.buf, off, GRH + 256)]),
            )
            .unwrap();
    }
    let src = n[0].region(4096, Layout::Contiguous, 0);
    let data: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
    n[0].write(&src, 0, &data);
    let send = SendWr::send(1).sges(vec![src.mr.sge(&src.buf, 0, data.len())]);
    n[0].hca
        .post_send(s, &send.clone().ud(group_dest(o.qkey)))
        .unwrap();

    let got0 = n[0].cqes(2, T);
    assert_success(&got0);
    assert_eq!(recvs_of(&got0, s).len(), 0, "the sender gets no copy");
    let got1 = n[1].cqes(1, T);
    let got2 = n[2].cqes(1, T);
    let lid0 = n[0].lid();
    for (i, cqes, q, k) in [(0, &got0, a0, 1), (1, &got1, a1, 0), (2, &got2, a2, 0)] {
        let r = recvs_of(cqes, q);
        assert_eq!(r.len(), 1, "node {i}: {cqes:?}");
        let c = &r[0];
        assert_eq!((c.src_qp, c.slid), (s.qpn, lid0), "node {i}");
        assert_eq!(c.byte_len as usize, GRH + data.len());
        assert_ne!(c.wc_flags & wc_flags::GRH, 0, "multicast carries a GRH");
        let (reg, off) = (&regions[i], k * 4096);
        assert_eq!(&n[i].read(reg, off + 24, 16)[..], &MGID[..], "DGID = MGID");
        assert_eq!(n[i].read(reg, off + GRH, data.len()), data, "node {i}");
    }
    assert!(quiet(&mut n[1]), "a QP that is not attached gets nothing");

    // Detach node 1's QP: it no longer receives; the others do.
    n[1].hca
        .detach_mcast(a1.qpn, MGID, MLID)
        .expect("DETACH_MCAST");
    let before = rx_drop(&mut n[1], RxDrop::Multicast);
    post_recv(&mut n[1], a1, &regions[1], 9);
    let (r0, off0) = (&regions[0], 2 * 4096);
    n[0].hca
        .post_recv(
            a0,
            &RecvWr::new(2, vec![r0.mr.sge(&r0.buf, off0, GRH + 256)]),
        )
        .unwrap();
    let (r2, off2) = (&regions[2], 2 * 4096);
    n[2].hca
        .post_recv(
            a2,
            &RecvWr::new(2, vec![r2.mr.sge(&r2.buf, off2, GRH + 256)]),
        )
        .unwrap();
    n[0].hca.post_send(s, &send.ud(group_dest(o.qkey))).unwrap();
    let got0 = n[0].cqes(2, T);
    assert_eq!(recvs_of(&got0, a0).len(), 1);
    assert_eq!(recvs_of(&n[2].cqes(1, T), a2).len(), 1);
    assert!(quiet(&mut n[1]), "detached");
    assert_eq!(rx_drop(&mut n[1], RxDrop::Multicast), before + 1);
}

/// PV-07: a packet to the multicast QPN without a GRH is dropped at every
/// receiver and counted (C9-43.1.1); the receive stays posted.
#[test]
fn pv_07_multicast_without_grh_is_dropped_and_counted() {
    let v = Vhca::spawn(Options::nodes(2));
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let o = ConnOpts::default();
    let s = ud(&mut a, &o);
    let r = ud(&mut b, &o);
    b.hca.attach_mcast(r.qpn, MGID, MLID).unwrap();
    let reg = b.region(4096, Layout::Scattered, 0);
    post_recv(&mut b, r, &reg, 1);
    let mut dest = group_dest(o.qkey);
    dest.av.is_global = 0;
    a.hca
        .post_send(s, &SendWr::send(1).inline(b"no grh").ud(dest))
        .unwrap();
    assert_success(&a.cqes(1, T));
    assert!(quiet(&mut b));
    assert_eq!(rx_drop(&mut b, RxDrop::McastNoGrh), 1);
    a.hca
        .post_send(s, &SendWr::send(2).inline(b"grh").ud(group_dest(o.qkey)))
        .unwrap();
    assert_success(&a.cqes(1, T));
    let c = b.cqes(1, T);
    assert_eq!((c[0].wr_id, c[0].byte_len as usize), (1, GRH + 3));
}
