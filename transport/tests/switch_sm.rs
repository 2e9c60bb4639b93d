//! The switch's sans-IO core brought up by an SM (issue 26 item 3; AD-09): a fabric
//! of HCA A (the SM's node) on switch port 1, HCA B on port 2 and nothing on port 3,
//! each HCA with the `mad` module's SMA. The SM discovers it by directed route,
//! assigns LIDs, programs the LFT, moves the ports to Active, then data flows by
//! DLID. Assertions are on the bytes of the SMPs and packets on the wire.

mod common;
mod switch_util;

use common::Rng;
use switch_util::{dr_path, packet, smp, smp_of, switch_config, SW_GUID};
use transport::mad::attr::node_type;
use transport::mad::dr::hca_send;
use transport::mad::portinfo::{cap, port_state};
use transport::mad::switch_attr::{LftBlock, SwitchInfoRepr};
use transport::mad::{
    attr_id, method, status, HcaSend, MadContext, NodeDescription, NodeIdentity, NoticeRepr,
    PortInfoRepr, PortState, ReplyRoute, Sma, SmaOutput, Smp, SmpRepr, SmpRoute, PERMISSIVE_LID,
};
use transport::switch::{Egress, Switch, SwitchDrop, SwitchOut};
use transport::verbs::Time;
use transport::wire::PacketRepr;

const T0: Time = Time(1_000_000_000);
const A_LID: u16 = 1;
const SW_LID: u16 = 2;
const B_LID: u16 = 3;

fn hca(guid: u64) -> Sma {
    let node = NodeIdentity {
        node_type: node_type::CA,
        num_ports: 1,
        system_image_guid: guid,
        node_guid: guid,
        device_id: 0x1af4,
        revision: 1,
        vendor_id: 0x0002c9,
        description: NodeDescription::from_text("hca"),
    };
    let mut s = Sma::new(node, PortState::new(1, guid + 1, 1, 64));
    s.link_up(T0);
    while s.poll_event().is_some() {}
    s
}

/// Switch port 1 is cabled to A, port 2 to B, port 3 to nothing.
struct Fabric {
    sw: Switch,
    a: Sma,
    b: Sma,
    /// Data packets that reached A and B.
    a_data: Vec<Vec<u8>>,
    b_data: Vec<Vec<u8>>,
}

impl Fabric {
    fn new() -> Fabric {
        let mut sw = Switch::new(&switch_config(3));
        sw.link_up(1);
        sw.link_up(2);
        let mut a = hca(0xa00);
        // The SM runs on A: responses reaching A go to it.
        a.set_capability_mask(a.port().info.capability_mask | cap::IS_SM);
        Fabric {
            sw,
            a,
            b: hca(0xb00),
            a_data: vec![],
            b_data: vec![],
        }
    }

    /// Carries `pkt` into switch port `in_port` and everything that follows, until
    /// the fabric is quiet. Returns what A's SM received.
    fn inject(&mut self, pkt: Vec<u8>, in_port: u8) -> Vec<SmpRepr> {
        let mut to_sm = vec![];
        let mut queue = vec![(pkt, in_port)];
        while let Some((pkt, port)) = queue.pop() {
            let mut out = vec![];
            self.sw.handle_packet(&pkt, port, T0, &mut out);
            for SwitchOut {
                port,
                packet: egress,
            } in out
            {
                let bytes = match egress {
                    Egress::Same => pkt.clone(),
                    Egress::New(b) => b.into_vec(),
                };
                let vl = bytes[0] >> 4;
                let (hca, data, lid) = match port {
                    1 => (&mut self.a, &mut self.a_data, A_LID),
                    2 => (&mut self.b, &mut self.b_data, B_LID),
                    _ => continue, // no cable
                };
                if vl != 15 {
                    data.push(bytes);
                    continue;
                }
                let (lrh, _) = smp_of(&bytes);
                let mad = PacketRepr::parse(&bytes)
                    .unwrap()
                    .transport
                    .payload
                    .to_vec();
                let ctx = MadContext {
                    in_port: 1,
                    slid: lrh.slid,
                };
                match hca.handle_mad(&mad, &ctx, T0) {
                    SmaOutput::ToSm(m) => {
                        to_sm.push(SmpRepr::parse(&Smp::new_checked(&m[..]).unwrap()).unwrap())
                    }
                    SmaOutput::Reply { mad, route } => {
                        let (dlid, slid) = match route {
                            ReplyRoute::Directed(_) => (PERMISSIVE_LID, PERMISSIVE_LID),
                            ReplyRoute::Lid(l) => (l, lid),
                            ReplyRoute::LocalSm => unreachable!("no local SM on a far node"),
                        };
                        queue.push((packet(15, dlid, slid, 0, &mad[..]), port));
                    }
                    SmaOutput::Nothing => {}
                }
            }
        }
        to_sm
    }

    /// The SM on A sends a directed-route SMP along `hops` and returns the response.
    fn dr(
        &mut self,
        m: u8,
        attr: u16,
        modifier: u32,
        hops: &[u8],
        data: [u8; 64],
    ) -> Option<SmpRepr> {
        let mut req = smp(m, attr, modifier, SmpRoute::Directed(dr_path(hops)), data);
        let SmpRoute::Directed(d) = &mut req.route else {
            unreachable!()
        };
        match hca_send(d, 1).unwrap() {
            HcaSend::Port => {}
            HcaSend::Local => {
                // Hop count 0: A's own SMA answers its SM.
                let ctx = MadContext {
                    in_port: 1,
                    slid: PERMISSIVE_LID,
                };
                return match self.a.handle_mad(&req.to_bytes(), &ctx, T0) {
                    SmaOutput::Reply {
                        mad,
                        route: ReplyRoute::LocalSm,
                    } => Some(SmpRepr::parse(&Smp::new_checked(&mad[..]).unwrap()).unwrap()),
                    o => panic!("unexpected {o:?}"),
                };
            }
            HcaSend::LidRouted => unreachable!(),
        }
        let resp = self.inject(
            packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &req.to_bytes()),
            1,
        );
        assert!(resp.len() <= 1);
        resp.into_iter().next()
    }

    fn set_port_info(
        &mut self,
        hops: &[u8],
        modifier: u32,
        f: impl Fn(&mut PortInfoRepr),
    ) -> SmpRepr {
        let got = self
            .dr(method::GET, attr_id::PORT_INFO, modifier, hops, [0; 64])
            .unwrap();
        let mut pi = PortInfoRepr::parse(&got.data).unwrap();
        f(&mut pi);
        let mut d = [0u8; 64];
        pi.emit(&mut d).unwrap();
        let r = self
            .dr(method::SET, attr_id::PORT_INFO, modifier, hops, d)
            .unwrap();
        assert_eq!(
            r.status,
            status::OK,
            "SubnSet(PortInfo) along {hops:?} mod {modifier}"
        );
        r
    }

    /// Discovery, LIDs, LFT, ports Active: what OpenSM does on its first sweep.
    fn bring_up(&mut self) {
        for (hops, modifier, lid) in [
            (&[][..], 0, A_LID),
            (&[1][..], 0, SW_LID),
            (&[1, 2][..], 0, B_LID),
        ] {
            self.set_port_info(hops, modifier, |pi| {
                pi.lid = lid;
                pi.master_sm_lid = A_LID;
            });
        }
        let mut si = SwitchInfoRepr::parse(
            &self
                .dr(method::GET, attr_id::SWITCH_INFO, 0, &[1], [0; 64])
                .unwrap()
                .data,
        )
        .unwrap();
        si.linear_fdb_top = B_LID;
        si.life_time_value = 18;
        let mut d = [0u8; 64];
        si.emit(&mut d).unwrap();
        let r = self
            .dr(method::SET, attr_id::SWITCH_INFO, 0, &[1], d)
            .unwrap();
        assert_eq!(r.status, status::OK);
        let mut lft = LftBlock([0xff; 64]);
        lft.0[usize::from(A_LID)] = 1;
        lft.0[usize::from(SW_LID)] = 0;
        lft.0[usize::from(B_LID)] = 2;
        lft.emit(&mut d).unwrap();
        let r = self
            .dr(method::SET, attr_id::LINEAR_FORWARDING_TABLE, 0, &[1], d)
            .unwrap();
        assert_eq!(r.status, status::OK);
        assert_eq!(r.data, d, "the LFT block reads back as set");
        for st in [port_state::ARMED, port_state::ACTIVE] {
            for (hops, modifier) in [(&[][..], 0), (&[1][..], 1), (&[1][..], 2), (&[1, 2][..], 0)] {
                self.set_port_info(hops, modifier, |pi| pi.port_state = st);
            }
        }
    }
}

#[test]
fn ad_09_switch_discovered_by_directed_route() {
    let mut f = Fabric::new();
    // NodeInfo of the switch, one hop out of A.
    let r = f
        .dr(method::GET, attr_id::NODE_INFO, 0, &[1], [0; 64])
        .unwrap();
    assert_eq!(r.method, method::GET_RESP);
    assert_eq!(r.status, status::OK);
    let d = &r.data;
    assert_eq!(d[2], node_type::SWITCH, "NodeType");
    assert_eq!(d[3], 3, "NumPorts");
    assert_eq!(&d[12..20], &SW_GUID.to_be_bytes(), "NodeGUID");
    assert_eq!(&d[20..28], &SW_GUID.to_be_bytes(), "PortGUID: port 0's");
    assert_eq!(d[36], 1, "LocalPortNum: the port the SMP came in on");
    let SmpRoute::Directed(dr) = r.route else {
        panic!()
    };
    assert!(dr.direction);
    assert_eq!(dr.hop_ptr, 0, "the response reached the SM");
    assert_eq!(dr.return_path[1], 1);

    // SwitchInfo as OpenSM reads it (libibmad's IB_SW_* offsets).
    let r = f
        .dr(method::GET, attr_id::SWITCH_INFO, 0, &[1], [0; 64])
        .unwrap();
    assert_eq!(r.status, status::OK);
    assert_eq!(&r.data[0..2], &256u16.to_be_bytes(), "LinearFDBCap");
    assert_eq!(&r.data[4..6], &64u16.to_be_bytes(), "MulticastFDBCap");
    assert_eq!(&r.data[6..8], &[0, 0], "LinearFDBTop");
    assert_eq!(
        r.data[11] & 0x04,
        0x04,
        "PortStateChange: links 1 and 2 came up"
    );
    // Reserved without IsMulticastFDBTopSupported (IBA 14.2.5.4): 0, so
    // `ibroute -M` dumps the MFT up to MulticastFDBCap.
    assert_eq!(&r.data[18..20], &[0, 0], "MulticastFDBTop: reserved");

    // PortInfo of each switch port: base port 0 is always up (Active, as ibsim's),
    // 1 and 2 trained (Init), 3 has no cable (Down).
    for (p, st) in [
        (0u32, port_state::ACTIVE),
        (1, port_state::INIT),
        (2, port_state::INIT),
        (3, port_state::DOWN),
    ] {
        let r = f
            .dr(method::GET, attr_id::PORT_INFO, p, &[1], [0; 64])
            .unwrap();
        assert_eq!(r.status, status::OK);
        assert_eq!(r.data[32] & 0x0f, st, "PortState of switch port {p}");
        assert_eq!(
            r.data[28], 1,
            "LocalPortNum: the port the request came in on"
        );
    }

    // A hop on through port 2 reaches B's SMA; the response retraces the switch.
    let r = f
        .dr(method::GET, attr_id::NODE_INFO, 0, &[1, 2], [0; 64])
        .unwrap();
    assert_eq!(r.data[2], node_type::CA);
    assert_eq!(&r.data[12..20], &0xb00u64.to_be_bytes());
    let SmpRoute::Directed(dr) = r.route else {
        panic!()
    };
    assert_eq!((dr.return_path[1], dr.return_path[2]), (1, 1));
    assert_eq!(f.sw.port_counters(2).unwrap().xmit_packets, 1);
    assert_eq!(f.sw.port_counters(2).unwrap().rcv_packets, 1);

    // Through port 3 nothing answers: the link is down, the SMP counted.
    assert!(f
        .dr(method::GET, attr_id::NODE_INFO, 0, &[1, 3], [0; 64])
        .is_none());
    assert_eq!(f.sw.counters().drop_count(SwitchDrop::EgressDown), 1);
    assert_eq!(f.sw.port_counters(3).unwrap().xmit_discards, 1);
}

#[test]
fn ad_09_switch_sm_programs_lft_then_data_flows_by_dlid() {
    let mut f = Fabric::new();
    // Before the SM: a data packet from A is dropped at the Init ingress port.
    let data = packet(0, B_LID, A_LID, 0x22, b"hello, B");
    assert!(f.inject(data.clone(), 1).is_empty());
    assert!(f.b_data.is_empty());
    assert_eq!(f.sw.counters().drop_count(SwitchDrop::IngressNotActive), 1);

    f.bring_up();
    assert_eq!(f.sw.lid(), SW_LID);
    for p in 1..=2 {
        assert_eq!(f.sw.port(p).unwrap().info.port_state, port_state::ACTIVE);
    }
    assert_eq!(f.sw.switch_info().linear_fdb_top, B_LID);

    let before = *f.sw.port_counters(2).unwrap();
    f.inject(data.clone(), 1);
    assert_eq!(f.b_data, vec![data.clone()], "forwarded byte for byte");
    let after = *f.sw.port_counters(2).unwrap();
    assert_eq!(after.xmit_packets - before.xmit_packets, 1);
    assert_eq!(
        after.xmit_data_words - before.xmit_data_words,
        (data.len() as u64 - 2) / 4
    );
    // And back from B to A.
    let back = packet(0, A_LID, B_LID, 0x22, b"hello, A");
    f.inject(back.clone(), 2);
    assert_eq!(f.a_data, vec![back]);

    // A LID-routed SMP to the switch's LID is answered LID-routed to its SLID.
    let req = smp(method::GET, attr_id::NODE_INFO, 0, SmpRoute::Lid, [0; 64]);
    let resp = f.inject(packet(15, SW_LID, A_LID, 0, &req.to_bytes()), 1);
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].data[2], node_type::SWITCH);
    assert_eq!(resp[0].status, status::OK);
    // A LID-routed SMP to B goes through and B answers LID-routed.
    let resp = f.inject(packet(15, B_LID, A_LID, 0, &req.to_bytes()), 1);
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].data[2], node_type::CA);
    assert_eq!(&resp[0].data[12..20], &0xb00u64.to_be_bytes());
}

#[test]
fn ad_09_switch_forwards_smps_through_ports_that_are_not_active() {
    let mut f = Fabric::new();
    // Only the LIDs and the LFT; the ports stay in Init.
    let mut sw = Switch::new(&switch_config(3));
    std::mem::swap(&mut sw, &mut f.sw);
    f.sw.link_up(1);
    f.sw.link_up(2);
    for (hops, lid) in [(&[1][..], SW_LID), (&[1, 2][..], B_LID)] {
        f.set_port_info(hops, 0, |pi| pi.lid = lid);
    }
    let mut si = SwitchInfoRepr::parse(
        &f.dr(method::GET, attr_id::SWITCH_INFO, 0, &[1], [0; 64])
            .unwrap()
            .data,
    )
    .unwrap();
    si.linear_fdb_top = B_LID;
    // Reserved without IsMulticastFDBTopSupported: a value set is ignored.
    si.multicast_fdb_top = 0xc010;
    let mut d = [0u8; 64];
    si.emit(&mut d).unwrap();
    let back = f.dr(method::SET, attr_id::SWITCH_INFO, 0, &[1], d).unwrap();
    assert_eq!(
        &back.data[18..20],
        &[0, 0],
        "MulticastFDBTop stays reserved"
    );
    let mut lft = LftBlock([0xff; 64]);
    lft.0[1] = 1;
    lft.0[3] = 2;
    lft.emit(&mut d).unwrap();
    f.dr(method::SET, attr_id::LINEAR_FORWARDING_TABLE, 0, &[1], d)
        .unwrap();
    // VL15 passes Init ports (IBA 7.2), data does not.
    let req = smp(method::GET, attr_id::NODE_INFO, 0, SmpRoute::Lid, [0; 64]);
    let resp = f.inject(packet(15, B_LID, A_LID, 0, &req.to_bytes()), 1);
    assert_eq!(resp.len(), 1);
    let _ = f.inject(packet(0, B_LID, A_LID, 0x22, b"data"), 1);
    assert!(f.b_data.is_empty());
    assert_eq!(f.sw.counters().drop_count(SwitchDrop::IngressNotActive), 1);
}

/// Whatever arrives, the switch never panics, and every packet either goes out or
/// is counted as a drop.
#[test]
fn ad_09_switch_every_packet_goes_out_or_is_counted() {
    let mut f = Fabric::new();
    f.bring_up();
    let mut rng = Rng::new(26);
    let base = [
        packet(0, B_LID, A_LID, 0x22, b"abcd"),
        packet(
            15,
            SW_LID,
            A_LID,
            0,
            &smp(method::GET, attr_id::NODE_INFO, 0, SmpRoute::Lid, [0; 64]).to_bytes(),
        ),
        packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &{
            let mut r = smp(
                method::GET,
                attr_id::NODE_INFO,
                0,
                SmpRoute::Directed(dr_path(&[1, 2])),
                [0; 64],
            );
            if let SmpRoute::Directed(d) = &mut r.route {
                d.hop_ptr = 1;
            }
            r.to_bytes()
        }),
    ];
    for _ in 0..20_000 {
        let mut pkt = base[rng.below(3) as usize].clone();
        for _ in 0..rng.below(4) {
            let i = rng.below(pkt.len() as u64) as usize;
            pkt[i] = rng.next() as u8;
        }
        if rng.chance(0.1) {
            pkt.truncate(rng.below(pkt.len() as u64) as usize);
        }
        let drops: u64 = f.sw.counters().drops.iter().sum();
        let mut out = vec![];
        let port = rng.below(5) as u8;
        f.sw.handle_packet(&pkt, port, T0, &mut out);
        let drops_after: u64 = f.sw.counters().drops.iter().sum();
        assert!(
            !out.is_empty() || drops_after > drops,
            "a packet neither forwarded nor counted: {pkt:02x?} on port {port}"
        );
    }
}

/// A directed part that ends at the switch and a LID-routed tail to B (DrDLID =
/// B's LID, IBA 14.2.1.2): the switch LID-routes the request on; B answers
/// LID-routed to the switch, which turns the response back onto the directed
/// path (C14-13:1) to the SM.
#[test]
fn ad_09_switch_lid_routed_tail_and_the_way_back() {
    let mut f = Fabric::new();
    f.bring_up();
    let mut path = dr_path(&[1]);
    path.dr_dlid = B_LID;
    let mut req = smp(
        method::GET,
        attr_id::NODE_INFO,
        0,
        SmpRoute::Directed(path),
        [0; 64],
    );
    let SmpRoute::Directed(d) = &mut req.route else {
        unreachable!()
    };
    assert_eq!(hca_send(d, 1), Ok(HcaSend::Port));
    let resp = f.inject(
        packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &req.to_bytes()),
        1,
    );
    assert_eq!(resp.len(), 1, "the response reached the SM");
    let r = &resp[0];
    assert_eq!(r.status, status::OK);
    assert_eq!(r.data[2], node_type::CA);
    assert_eq!(&r.data[12..20], &0xb00u64.to_be_bytes(), "B answered");
    let SmpRoute::Directed(d) = r.route else {
        panic!()
    };
    assert!(d.direction);
    assert_eq!(d.hop_ptr, 0);
    assert_eq!(d.dr_dlid, B_LID);
    assert_eq!(f.sw.counters().drops.iter().sum::<u64>(), 0);
}

/// Traps cross the subnet to the SM (AD-12, AD-09): B's SMA answers a SubnSet
/// with the wrong M_Key with nothing and sends trap 256, LID-routed through the
/// switch to the SM on A, whose TrapRepress goes back through the switch and
/// stops it; the switch's own trap 128 (a link change) reaches the SM the same
/// way. Every hop is a packet through `Switch::handle_packet`.
#[test]
fn ad_12_traps_cross_the_switch_to_the_sm_and_the_repress_comes_back() {
    let mut f = Fabric::new();
    f.bring_up();
    const KEY: u64 = 0x5eed;
    f.set_port_info(&[1, 2], 0, |pi| {
        pi.mkey = KEY;
        pi.mkey_protect_bits = 1;
    });
    // A stranger's LID-routed Set without the key: no response reaches anyone.
    let mut pi = PortInfoRepr::parse(
        &f.dr(method::GET, attr_id::PORT_INFO, 0, &[1, 2], [0; 64])
            .unwrap()
            .data,
    )
    .unwrap();
    pi.lid = 0x99;
    let mut d = [0u8; 64];
    pi.emit(&mut d).unwrap();
    let bad = SmpRepr {
        mkey: 0xbad,
        ..smp(method::SET, attr_id::PORT_INFO, 0, SmpRoute::Lid, d)
    };
    assert!(f
        .inject(packet(15, B_LID, A_LID, 0, &bad.to_bytes()), 1)
        .is_empty());
    assert_eq!(f.b.port().info.lid, B_LID);
    // B's trap 256 goes to its SM's LID, through switch port 2.
    let t = f.b.poll_transmit(T0).expect("trap 256");
    assert_eq!(t.dlid, A_LID);
    let got = f.inject(packet(15, t.dlid, B_LID, 0, &t.mad[..]), 2);
    assert_eq!(got.len(), 1, "the trap reached the SM");
    let trap = got[0];
    assert_eq!((trap.method, trap.attr_id), (method::TRAP, attr_id::NOTICE));
    let n = NoticeRepr::parse(&trap.data).unwrap();
    assert_eq!((n.trap_number, n.issuer_lid), (256, B_LID));
    // The SM's TrapRepress, with B's M_Key, LID-routed back through port 1.
    let repress = SmpRepr {
        method: method::TRAP_REPRESS,
        mkey: KEY,
        ..trap
    };
    assert_eq!(f.b.pending_traps(), 1);
    assert!(f
        .inject(packet(15, B_LID, A_LID, 0, &repress.to_bytes()), 1)
        .is_empty());
    assert_eq!(f.b.pending_traps(), 0);
    assert_eq!(f.b.counters().traps_repressed, 1);

    // The switch's trap 128: port 3's link comes up; the trap leaves port 1
    // for the SM on A.
    f.sw.link_up(3);
    let mut out = vec![];
    f.sw.poll_transmit(T0, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].port, 1);
    let Egress::New(b) = &out[0].packet else {
        panic!("a trap is a new packet")
    };
    let (lrh, _) = smp_of(b);
    assert_eq!((lrh.vl, lrh.dlid, lrh.slid), (15, A_LID, SW_LID));
    let mad = PacketRepr::parse(b).unwrap().transport.payload.to_vec();
    let ctx = MadContext {
        in_port: 1,
        slid: lrh.slid,
    };
    let SmaOutput::ToSm(m) = f.a.handle_mad(&mad, &ctx, T0) else {
        panic!("a trap is the SM's")
    };
    let trap = SmpRepr::parse(&Smp::new_checked(&m[..]).unwrap()).unwrap();
    let n = NoticeRepr::parse(&trap.data).unwrap();
    assert_eq!(
        (n.trap_number, n.issuer_lid, n.producer_type),
        (128, SW_LID, 2)
    );
    // Repressed through the LFT's entry for the switch's own LID.
    let repress = SmpRepr {
        method: method::TRAP_REPRESS,
        ..trap
    };
    assert!(f
        .inject(packet(15, SW_LID, A_LID, 0, &repress.to_bytes()), 1)
        .is_empty());
    assert_eq!(f.sw.pending_traps(), 0);
}

/// Issue 27 item 3: a switch port's MTUCap is what its link's underlay
/// carries (`Switch::set_port_mtu_cap`); OpenSM reads it by directed route,
/// its NeighborMTU (the active MTU) starts there, and a NeighborMTU above it
/// is refused (IBA 14.2.5.6: NeighborMTU no larger than MTUCap).
#[test]
fn switch_port_mtu_cap_follows_the_underlay_and_bounds_neighbor_mtu() {
    let mut f = Fabric::new();
    assert!(f.sw.set_port_mtu_cap(2, 3)); // 1024: a 1500-byte underlay
    assert!(!f.sw.set_port_mtu_cap(0, 3), "port 0 has no link");
    assert!(!f.sw.set_port_mtu_cap(9, 3), "no port 9");
    assert!(!f.sw.set_port_mtu_cap(1, 6), "no IB MTU 6");
    let get = |f: &mut Fabric, p: u32| {
        let r = f
            .dr(method::GET, attr_id::PORT_INFO, p, &[1], [0; 64])
            .unwrap();
        PortInfoRepr::parse(&r.data).unwrap()
    };
    let p2 = get(&mut f, 2);
    assert_eq!((p2.mtu_cap, p2.neighbor_mtu), (3, 3));
    let p1 = get(&mut f, 1);
    assert_eq!((p1.mtu_cap, p1.neighbor_mtu), (5, 5), "port 1 on loopback");
    let mut pi = p2;
    pi.neighbor_mtu = 4;
    let mut d = [0u8; 64];
    pi.emit(&mut d).unwrap();
    let r = f.dr(method::SET, attr_id::PORT_INFO, 2, &[1], d).unwrap();
    assert_eq!(
        r.status,
        status::INVALID_FIELD,
        "NeighborMTU 2048 > MTUCap 1024"
    );
    f.set_port_info(&[1], 2, |pi| pi.neighbor_mtu = 2);
    assert_eq!(get(&mut f, 2).neighbor_mtu, 2);
}
