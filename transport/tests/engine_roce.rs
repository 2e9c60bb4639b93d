//! Two engines with RoCEv2 ports over the simulated fabric (WF-10): RC and UD end
//! to end in RoCEv2 frames, the receive-side address checks that replace the LID
//! checks on Ethernet, and what a UD receive reports.

mod common;

use common::*;
use transport::engine::{link::ipv4_mapped_gid, RxDrop};
use transport::verbs::{
    AttrMask, Mtu, NetworkHdr, QpAttr, QpState, RecvWr, Sge, UdDest, VerbError, WcOpcode, WcStatus,
    WrOpcode,
};
use transport::wire::roce::{IpRepr, RoceRepr, UDP_PORT};

fn sge(addr: u64, length: u32, lkey: u32) -> Vec<Sge> {
    vec![Sge { addr, length, lkey }]
}

fn recv(net: &mut Net, node: usize, qpn: u32, id: u64, addr: u64, len: u32, key: u32) {
    net.nodes[node]
        .engine
        .post_recv(
            qpn,
            RecvWr {
                wr_id: id,
                sges: sge(addr, len, key),
            },
        )
        .unwrap();
}

#[test]
fn wf_10_rc_send_write_read_atomic_travel_as_roce_v2_frames() {
    let mut net = Net::new_roce(2, 1 << 20, 3);
    net.sniffed = Some(Vec::new());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());

    // SEND, 3 packets at 1024.
    let len = 3000;
    fill(&mut net, 0, MEM_BASE, len, 7);
    recv(&mut net, 1, p.qb, 9, MEM_BASE + 0x8000, 8192, kb);
    let wr = send_wr(1, WrOpcode::Send, sge(MEM_BASE, len as u32, ka));
    net.nodes[0].engine.post_send(p.qa, wr).unwrap();
    let c = wait_cqe(&mut net, 1, p.cq_b);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, len as u32));
    assert_eq!(
        bytes(&net, 1, MEM_BASE + 0x8000, len),
        bytes(&net, 0, MEM_BASE, len)
    );
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);

    // WRITE then READ back into another place, then a fetch-and-add.
    let mut w = send_wr(2, WrOpcode::RdmaWrite, sge(MEM_BASE, 5000, ka));
    w.remote_addr = MEM_BASE + 0x2_0000;
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);
    let mut r = send_wr(3, WrOpcode::RdmaRead, sge(MEM_BASE + 0x4_0000, 5000, ka));
    r.remote_addr = MEM_BASE + 0x2_0000;
    r.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, r).unwrap();
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!((c.status, c.byte_len), (WcStatus::Success, 5000));
    assert_eq!(
        bytes(&net, 0, MEM_BASE + 0x4_0000, 5000),
        bytes(&net, 0, MEM_BASE, 5000)
    );
    let mut a = send_wr(4, WrOpcode::AtomicFetchAdd, sge(MEM_BASE + 0x5_0000, 8, ka));
    a.remote_addr = MEM_BASE + 0x6_0000;
    a.rkey = kb;
    a.swap_add = 5;
    net.nodes[0].engine.post_send(p.qa, a).unwrap();
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);

    // Every packet on the wire was a RoCEv2 frame (Ethernet/IPv4/UDP 4791 with a
    // good ICRC) between the two ports' MACs and IPv4 GIDs; each direction of
    // the connection kept one UDP source port (A17.4.3).
    let frames = net.sniffed.take().unwrap();
    assert!(frames.len() >= 12, "{} frames", frames.len());
    let mut sports = std::collections::BTreeMap::new();
    for f in &frames {
        let r = RoceRepr::parse(f).expect("a valid RoCEv2 frame");
        let (from, to) = if r.eth.src == roce_mac(1) {
            (1, 2)
        } else {
            (2, 1)
        };
        assert_eq!((r.eth.src, r.eth.dst), (roce_mac(from), roce_mac(to)));
        let IpRepr::V4(ip) = r.ip else {
            panic!("IPv4 GIDs give IPv4 frames")
        };
        assert_eq!(ipv4_mapped_gid(ip.src), roce_gid_v4(from));
        assert_eq!(ipv4_mapped_gid(ip.dst), roce_gid_v4(to));
        assert!(ip.dont_frag);
        assert_eq!(u16::from_be_bytes([f[36], f[37]]), UDP_PORT);
        assert!(r.udp_src_port >= 0xc000);
        assert_eq!(
            *sports.entry(from).or_insert(r.udp_src_port),
            r.udp_src_port
        );
    }
    assert_eq!(sports.len(), 2);
}

#[test]
fn wf_10_rc_over_ipv6_gids_and_a_lossy_fabric_is_byte_exact() {
    for seed in 0..8 {
        let mut net = Net::new_roce(2, 1 << 20, seed);
        net.faults.drop = 0.05;
        net.faults.reorder = 0.02;
        net.faults.duplicate = 0.02;
        let ka = net.reg_all(0, ALL_ACCESS);
        let kb = net.reg_all(1, ALL_ACCESS);
        net.sniffed = Some(Vec::new());
        let o = ConnOpts::default();
        let v6 = connect_with_av(&mut net, &o, 1);
        let len = 20_000;
        fill(&mut net, 0, MEM_BASE, len, seed as u8);
        let mut w = send_wr(1, WrOpcode::RdmaWrite, sge(MEM_BASE, len as u32, ka));
        w.remote_addr = MEM_BASE + 0x4_0000;
        w.rkey = kb;
        net.nodes[0].engine.post_send(v6.qa, w).unwrap();
        let c = wait_cqe(&mut net, 0, v6.cq_a);
        assert_eq!(c.status, WcStatus::Success, "seed {seed}");
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x4_0000, len),
            bytes(&net, 0, MEM_BASE, len),
            "seed {seed}"
        );
        let frames = net.sniffed.take().unwrap();
        assert!(frames
            .iter()
            .all(|f| matches!(RoceRepr::parse(f).map(|r| r.ip), Ok(IpRepr::V6(_)))));
    }
}

/// Creates an RC pair between nodes 0 and 1 whose paths use GID `gid_index`.
fn connect_with_av(net: &mut Net, o: &ConnOpts, gid_index: u8) -> Pair {
    let p = connect(net, 0, 1, o);
    for (node, qpn, peer, remote) in [(0usize, p.qa, 2usize, p.qb), (1, p.qb, 1, p.qa)] {
        let now = net.now;
        let e = &mut net.nodes[node].engine;
        back_to_init(e, qpn, now);
        let rtr = QpAttr {
            state: Some(QpState::Rtr),
            path_mtu: Mtu::M1024,
            dest_qp_num: remote,
            rq_psn: 7,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            av: roce_av(peer, gid_index),
            ..QpAttr::default()
        };
        let m = RC_RTR_MASK;
        e.modify_qp(qpn, &rtr, m, now).unwrap();
        let rts = QpAttr {
            state: Some(QpState::Rts),
            sq_psn: 7,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        let m = AttrMask::STATE
            | AttrMask::TIMEOUT
            | AttrMask::RETRY_CNT
            | AttrMask::RNR_RETRY
            | AttrMask::SQ_PSN
            | AttrMask::MAX_QP_RD_ATOMIC;
        e.modify_qp(qpn, &rts, m, now).unwrap();
    }
    p
}

#[test]
fn wf_10_ud_receive_holds_the_ip_header_and_reports_smac() {
    for gid_index in [0u8, 1] {
        let mut net = Net::new_roce(2, 1 << 20, 5);
        let ka = net.reg_all(0, ALL_ACCESS);
        let kb = net.reg_all(1, ALL_ACCESS);
        let o = ConnOpts {
            qp_type: transport::verbs::QpType::Ud,
            ..ConnOpts::default()
        };
        let p = connect(&mut net, 0, 1, &o);
        fill(&mut net, 0, MEM_BASE, 100, 3);
        recv(&mut net, 1, p.qb, 5, MEM_BASE + 0x1000, 1024, kb);
        let mut wr = send_wr(1, WrOpcode::Send, sge(MEM_BASE, 100, ka));
        wr.ud = Some(UdDest {
            av: roce_av(2, gid_index),
            remote_qpn: p.qb,
            remote_qkey: 0x1111_1111,
            pkey_index: None,
        });
        net.nodes[0].engine.post_send(p.qa, wr).unwrap();
        let c = wait_cqe(&mut net, 1, p.cq_b);
        assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv));
        assert_eq!(c.byte_len, 140, "40 bytes of header space + payload");
        assert_eq!(c.smac, Some(roce_mac(1)));
        assert_eq!(c.src_qp, p.qa);
        let hdr = bytes(&net, 1, MEM_BASE + 0x1000, 40);
        if gid_index == 0 {
            // union rdma_network_hdr: 20 zero bytes, then the IPv4 header.
            assert_eq!(c.network_hdr, NetworkHdr::Ipv4);
            assert_eq!(&hdr[..20], &[0; 20]);
            assert_eq!(hdr[20], 0x45);
            assert_eq!(&hdr[32..36], &[10, 0, 0, 1]);
            assert_eq!(&hdr[36..40], &[10, 0, 0, 2]);
        } else {
            assert_eq!(c.network_hdr, NetworkHdr::Ipv6);
            assert_eq!(hdr[0] >> 4, 6);
            assert_eq!(hdr[6], 17, "next header UDP");
            assert_eq!(&hdr[8..24], &roce_gid_v6(1));
            assert_eq!(&hdr[24..40], &roce_gid_v6(2));
        }
        assert_eq!(
            bytes(&net, 1, MEM_BASE + 0x1000 + 40, 100),
            bytes(&net, 0, MEM_BASE, 100)
        );
    }
}

fn send_one(net: &mut Net, p: &Pair, ka: u32, kb: u32, id: u64) {
    recv(net, 1, p.qb, id, MEM_BASE + 0x8000, 64, kb);
    let wr = send_wr(id, WrOpcode::Send, sge(MEM_BASE, 32, ka));
    net.nodes[0].engine.post_send(p.qa, wr).unwrap();
}

fn dropped(net: &Net, node: usize, r: RxDrop) -> u64 {
    net.nodes[node].engine.counters().dropped(r)
}

/// A17.4.5: on Ethernet the destination MAC and IP and, for a connected QP, the
/// source IP take the place of the LID checks (C9-53, C9-54): a frame failing
/// them is dropped and counted, never delivered.
#[test]
fn wf_10_frames_to_another_mac_or_address_are_dropped_and_counted() {
    let mut net = Net::new_roce(2, 1 << 20, 9);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    net.sniffed = Some(Vec::new());
    send_one(&mut net, &p, ka, kb, 1);
    assert_eq!(wait_cqe(&mut net, 1, p.cq_b).status, WcStatus::Success);
    let frames = net.sniffed.take().unwrap();
    let req = frames
        .iter()
        .find(|f| f[..6] == roce_mac(2))
        .expect("the SEND")
        .clone();

    // Another MAC: the Ethernet header is outside the ICRC, so the frame is
    // otherwise valid.
    let mut other = req.clone();
    other[5] ^= 0x40;
    let rx_before = net.nodes[1].engine.counters().rx_packets;
    let now = net.now;
    let n = &mut net.nodes[1];
    n.engine.handle_packet(&other, &mut n.mem, now);
    assert_eq!(dropped(&net, 1, RxDrop::BadDmac), 1);
    assert_eq!(net.nodes[1].engine.counters().rx_packets, rx_before + 1);

    // The destination IP is no longer one of node 2's GIDs.
    net.nodes[1].engine.set_roce_gid(0, None).unwrap();
    send_one(&mut net, &p, ka, kb, 2);
    net.run_until(20_000, |n| dropped(n, 1, RxDrop::BadGid) > 0);
    assert!(dropped(&net, 1, RxDrop::BadGid) > 0);
    assert!(net.poll(1, p.cq_b).is_none(), "nothing delivered");
    net.nodes[1]
        .engine
        .set_roce_gid(0, Some(roce_gid_v4(2)))
        .unwrap();
    // The retransmission gets through once the address is back.
    assert_eq!(wait_cqe(&mut net, 1, p.cq_b).status, WcStatus::Success);
    assert_eq!(wait_cqe(&mut net, 0, p.cq_a).status, WcStatus::Success);

    // A connected QP takes packets only from its path's DGID.
    let bad_before = dropped(&net, 1, RxDrop::BadGid);
    let elsewhere = ipv4_mapped_gid(std::net::Ipv4Addr::new(10, 0, 0, 77));
    net.nodes[0]
        .engine
        .set_roce_gid(0, Some(elsewhere))
        .unwrap();
    send_one(&mut net, &p, ka, kb, 3);
    net.run_until(20_000, |n| dropped(n, 1, RxDrop::BadGid) > bad_before);
    assert!(dropped(&net, 1, RxDrop::BadGid) > bad_before);
    assert!(net.poll(1, p.cq_b).is_none());
}

/// A path whose source GID entry is gone cannot be framed: counted, and the WQE
/// completes in error instead of sending from a zero address.
#[test]
fn wf_10_a_send_without_its_source_gid_fails_with_no_route() {
    let mut net = Net::new_roce(2, 1 << 20, 11);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    net.nodes[0].engine.set_roce_gid(0, None).unwrap();
    send_one(&mut net, &p, ka, kb, 1);
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(c.status, WcStatus::LocQpOpErr);
    assert_eq!(net.nodes[0].engine.counters().tx_no_route, 1);
}

/// On Ethernet a path must be global with a GID-table SGID, and its MTU must
/// fit the link (1500 -> 1024, AD-03); an InfiniBand port refuses SET_GID.
#[test]
fn wf_10_roce_paths_are_global_and_fit_the_ethernet_mtu() {
    let mut net = Net::new_roce(2, 1 << 20, 13);
    let o = ConnOpts::default();
    let p = connect(&mut net, 0, 1, &o);
    let e = &mut net.nodes[0].engine;
    back_to_init(e, p.qa, net.now);
    let rtr = |av, mtu| QpAttr {
        state: Some(QpState::Rtr),
        path_mtu: mtu,
        dest_qp_num: p.qb,
        av,
        ..QpAttr::default()
    };
    let m = RC_RTR_MASK;
    let local = transport::verbs::AddressVector {
        dlid: 2,
        ..Default::default()
    };
    let mut far = roce_av(2, 0);
    if let Some(g) = far.grh.as_mut() {
        g.sgid_index = 200;
    }
    for (attr, why) in [
        (rtr(local, Mtu::M1024), "no GRH"),
        (rtr(far, Mtu::M1024), "SGID index past the table"),
        (
            rtr(roce_av(2, 0), Mtu::M2048),
            "MTU over the 1500-byte link",
        ),
    ] {
        assert_eq!(
            e.modify_qp(p.qa, &attr, m, net.now),
            Err(VerbError::InvalidAttr),
            "{why}"
        );
    }
    e.modify_qp(p.qa, &rtr(roce_av(2, 0), Mtu::M1024), m, net.now)
        .unwrap();

    let mut ib = Net::new(1, 4096, 1);
    assert_eq!(
        ib.nodes[0].engine.set_roce_gid(0, Some(roce_gid_v4(1))),
        Err(VerbError::NotSupported)
    );
}

/// Bad input on a RoCE port (WF-10, PV-10): a frame with a bad ICRC, cut short,
/// not RoCE at all, or with a broken IPv4 header checksum is dropped and counted
/// by reason, and the connection goes on.
#[test]
fn wf_10_malformed_roce_frames_are_dropped_by_reason() {
    use transport::wire::DropReason;
    let mut net = Net::new_roce(2, 1 << 20, 17);
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    net.sniffed = Some(Vec::new());
    send_one(&mut net, &p, ka, kb, 1);
    assert_eq!(wait_cqe(&mut net, 1, p.cq_b).status, WcStatus::Success);
    let good = net
        .sniffed
        .take()
        .unwrap()
        .into_iter()
        .find(|f| f[..6] == roce_mac(2))
        .expect("the SEND");
    let mut bad_icrc = good.clone();
    let last = bad_icrc.len() - 5;
    bad_icrc[last] ^= 1; // a payload byte: the ICRC no longer matches
    let mut not_roce = good.clone();
    not_roce[37] = 0; // UDP destination port no longer 4791
    let mut bad_ipsum = good.clone();
    bad_ipsum[14 + 10] ^= 0xff; // IPv4 header checksum
    let cases = [
        (bad_icrc, DropReason::BadIcrc),
        (good[..30].to_vec(), DropReason::Truncated),
        (not_roce, DropReason::NotRoce),
        (bad_ipsum, DropReason::BadIpChecksum),
    ];
    for (frame, why) in cases {
        let before = net.nodes[1].engine.counters().wire_drops.get(why);
        let now = net.now;
        let n = &mut net.nodes[1];
        n.engine.handle_packet(&frame, &mut n.mem, now);
        assert_eq!(
            net.nodes[1].engine.counters().wire_drops.get(why),
            before + 1,
            "{why:?}"
        );
    }
    // The QP is unharmed.
    send_one(&mut net, &p, ka, kb, 2);
    assert_eq!(wait_cqe(&mut net, 1, p.cq_b).status, WcStatus::Success);
}

/// WF-10 / AD-03: the Ethernet MTU bounds the path MTU as RoCE NICs map it
/// (the largest IB MTU whose packets fit with IPv6/UDP/BTH/extension headers
/// and ICRC).
#[test]
fn wf_10_ethernet_mtu_sets_the_path_mtu() {
    use transport::engine::PortConfig;
    let mac = roce_mac(1);
    for (eth, ib) in [
        (1500, Mtu::M1024),
        (9000, Mtu::M4096),
        (4200, Mtu::M4096),
        (4000, Mtu::M2048),
        (1000, Mtu::M512),
        (68, Mtu::M256),
    ] {
        assert_eq!(
            PortConfig::ethernet(mac).with_ethernet_mtu(eth).max_mtu,
            ib,
            "MTU {eth}"
        );
    }
    assert_eq!(
        PortConfig::ethernet(mac).max_mtu,
        Mtu::M1024,
        "default 1500"
    );
}

/// Takes a QP back through Reset to Init with every remote right.
fn back_to_init(e: &mut transport::engine::Engine, qpn: u32, now: transport::verbs::Time) {
    let reset = QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    };
    e.modify_qp(qpn, &reset, AttrMask::STATE, now).unwrap();
    let init = QpAttr {
        state: Some(QpState::Init),
        port_num: 1,
        access: ALL_ACCESS,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    e.modify_qp(qpn, &init, m, now).unwrap();
}
