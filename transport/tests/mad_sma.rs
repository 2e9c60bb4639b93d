//! The Subnet Management Agent (issue 26 items 1/8; AD-09, AD-12): every attribute's
//! SubnGet and SubnSet, the MAD status codes, the port state machine driven by the
//! SM, directed route end to end, M_Key protection and its lease, traps and
//! TrapRepress, events out. Assertions are on the bytes of the response MAD.

mod common;

use common::Rng;
use transport::mad::attr::{node_type, trap, trap144_change};
use transport::mad::dr::{hca_receive, hca_send, switch_hop};
use transport::mad::header::{CLASS_SUBN_DIRECTED_ROUTE, CLASS_SUBN_LID_ROUTED};
use transport::mad::portinfo::{cap, phys_state, port_state};
use transport::mad::HostCapError;
use transport::mad::{
    attr_id, method, status, BadMkeyDetails, DrDrop, DrFields, HcaDeliver, HcaSend, MadContext,
    NodeDescription, NodeIdentity, NoticeRepr, PortInfoRepr, PortState, ReplyRoute, Sma, SmaDrop,
    SmaEvent, SmaOutput, Smp, SmpRepr, SmpRoute, SwitchHop, Trap144Details, MAD_LEN,
    PERMISSIVE_LID,
};
use transport::verbs::Time;

const NODE_GUID: u64 = 0x0002_c903_00ab_cd00;
const PORT_GUID: u64 = 0x0002_c903_00ab_cd01;
const CTX: MadContext = MadContext {
    in_port: 1,
    slid: 0x0001,
};
const T0: Time = Time(1_000_000_000);

fn node(ty: u8) -> NodeIdentity {
    NodeIdentity {
        node_type: ty,
        num_ports: 1,
        system_image_guid: NODE_GUID,
        node_guid: NODE_GUID,
        device_id: 0x1af4,
        revision: 1,
        vendor_id: 0x0002c9,
        description: NodeDescription::from_text("vhca0 HCA-1"),
    }
}

/// An HCA's SMA whose link is up: port in Init, waiting for an SM.
fn sma() -> Sma {
    let mut s = Sma::new(node(node_type::CA), PortState::new(1, PORT_GUID, 16, 64));
    s.link_up(T0);
    while s.poll_event().is_some() {}
    s
}

fn smp(m: u8, attr: u16, modifier: u32, mkey: u64, data: [u8; 64]) -> SmpRepr {
    SmpRepr {
        base_version: 1,
        class_version: 1,
        method: m,
        status: 0,
        tid: 0x0000_0001_0000_0042,
        attr_id: attr,
        attr_mod: modifier,
        mkey,
        route: SmpRoute::Lid,
        data,
    }
}

/// Sends a request, expects a response; returns its bytes and route.
fn ask(s: &mut Sma, req: &SmpRepr, now: Time) -> ([u8; MAD_LEN], ReplyRoute) {
    match s.handle_mad(&req.to_bytes(), &CTX, now) {
        SmaOutput::Reply { mad, route } => (*mad, route),
        o => panic!("expected a response, got {o:?}"),
    }
}

fn get(s: &mut Sma, attr: u16, modifier: u32) -> [u8; MAD_LEN] {
    ask(s, &smp(method::GET, attr, modifier, 0, [0; 64]), T0).0
}

fn set(s: &mut Sma, attr: u16, modifier: u32, data: [u8; 64]) -> [u8; MAD_LEN] {
    ask(s, &smp(method::SET, attr, modifier, 0, data), T0).0
}

fn status_of(b: &[u8; MAD_LEN]) -> u16 {
    u16::from_be_bytes([b[4], b[5]]) & 0x7fff
}

fn data(b: &[u8; MAD_LEN]) -> [u8; 64] {
    b[64..128].try_into().unwrap()
}

fn port_info(s: &mut Sma) -> PortInfoRepr {
    PortInfoRepr::parse(&data(&get(s, attr_id::PORT_INFO, 0))).unwrap()
}

fn set_port_info(s: &mut Sma, pi: &PortInfoRepr) -> [u8; MAD_LEN] {
    let mut d = [0u8; 64];
    pi.emit(&mut d).unwrap();
    set(s, attr_id::PORT_INFO, 1, d)
}

/// The SM's first Set: LID 5, SM LID 1 at SL 0.
fn configure(s: &mut Sma) {
    let mut pi = port_info(s);
    pi.lid = 5;
    pi.master_sm_lid = 1;
    let r = set_port_info(s, &pi);
    assert_eq!(status_of(&r), 0);
    while s.poll_event().is_some() {}
}

#[test]
fn ad_09_get_node_description() {
    let mut s = sma();
    let r = get(&mut s, attr_id::NODE_DESCRIPTION, 0);
    assert_eq!(r[3], method::GET_RESP);
    assert_eq!(status_of(&r), 0);
    assert_eq!(&r[64..75], b"vhca0 HCA-1");
    assert!(r[75..128].iter().all(|b| *b == 0));
    assert_eq!(
        &r[8..16],
        &0x0000_0001_0000_0042u64.to_be_bytes(),
        "TID echoed"
    );
}

#[test]
fn ad_09_get_node_info_reports_the_node_and_arrival_port() {
    let mut s = sma();
    let r = get(&mut s, attr_id::NODE_INFO, 0);
    assert_eq!(status_of(&r), 0);
    let d = &r[64..];
    assert_eq!(&d[0..4], &[1, 1, node_type::CA, 1]);
    assert_eq!(&d[12..20], &NODE_GUID.to_be_bytes());
    assert_eq!(&d[20..28], &PORT_GUID.to_be_bytes());
    assert_eq!(&d[28..30], &64u16.to_be_bytes(), "PartitionCap");
    assert_eq!(d[36], 1, "LocalPortNum");
    assert_eq!(&d[37..40], &[0x00, 0x02, 0xc9]);
}

#[test]
fn ad_09_guid_info_get_and_set_keep_the_port_guid() {
    let mut s = sma();
    let r = get(&mut s, attr_id::GUID_INFO, 0);
    assert_eq!(&r[64..72], &PORT_GUID.to_be_bytes());
    let mut d = [0u8; 64];
    for i in 0..8 {
        d[i * 8..i * 8 + 8].copy_from_slice(&(0x1000 + i as u64).to_be_bytes());
    }
    let r = set(&mut s, attr_id::GUID_INFO, 0, d);
    assert_eq!(status_of(&r), 0);
    assert_eq!(&r[64..72], &PORT_GUID.to_be_bytes(), "GUID 0 is read-only");
    assert_eq!(&r[72..80], &0x1001u64.to_be_bytes());
    let r = set(&mut s, attr_id::GUID_INFO, 1, d);
    assert_eq!(&r[64..72], &0x1000u64.to_be_bytes(), "block 1, entry 8");
    // GUIDCap 16: two blocks.
    assert_eq!(
        status_of(&get(&mut s, attr_id::GUID_INFO, 2)),
        status::INVALID_FIELD
    );
}

#[test]
fn ad_09_portinfo_get_reports_the_port() {
    let mut s = sma();
    let r = get(&mut s, attr_id::PORT_INFO, 0);
    assert_eq!(status_of(&r), 0);
    let d = &r[64..];
    assert_eq!(
        &d[8..16],
        &0xfe80_0000_0000_0000u64.to_be_bytes(),
        "GID prefix"
    );
    assert_eq!(d[32] & 0xf, port_state::INIT, "PortState");
    assert_eq!(d[33] >> 4, phys_state::LINK_UP, "PortPhysicalState");
    assert_eq!(d[28], 1, "LocalPortNum");
    assert_eq!(d[41] & 0xf, 5, "MTUCap 4096");
    assert_eq!(d[37] >> 4, 4, "VLCap VL0-7");
    assert_eq!(d[50], 16, "GUIDCap");
    // The port's own number works as the modifier too; another port does not.
    assert_eq!(data(&get(&mut s, attr_id::PORT_INFO, 1)), data(&r));
    assert_eq!(
        status_of(&get(&mut s, attr_id::PORT_INFO, 2)),
        status::INVALID_FIELD
    );
}

#[test]
fn ad_09_portinfo_set_lid_sm_and_prefix_raises_events() {
    let mut s = sma();
    let mut pi = port_info(&mut s);
    pi.lid = 0x0021;
    pi.lmc = 1;
    pi.master_sm_lid = 0x0003;
    pi.master_sm_sl = 2;
    pi.gid_prefix = 0xfe80_0000_0000_1234;
    pi.subnet_timeout = 10;
    pi.client_reregister = true;
    let r = set_port_info(&mut s, &pi);
    assert_eq!(status_of(&r), 0);
    assert_eq!(r[3], method::GET_RESP);
    let d = &r[64..];
    assert_eq!(&d[16..18], &[0x00, 0x21], "LID");
    assert_eq!(&d[18..20], &[0x00, 0x03], "MasterSMLID");
    assert_eq!(d[34] & 7, 1, "LMC");
    assert_eq!(d[36] & 0xf, 2, "MasterSMSL");
    assert_eq!(d[51] & 0x1f, 10, "SubnetTimeOut");
    assert_eq!(d[51] & 0x80, 0, "ClientReregister reads 0");
    let mut ev = vec![];
    while let Some(e) = s.poll_event() {
        ev.push(e);
    }
    assert_eq!(
        ev,
        vec![
            SmaEvent::LidChanged { lid: 0x21, lmc: 1 },
            SmaEvent::SmChanged {
                sm_lid: 3,
                sm_sl: 2
            },
            SmaEvent::GidPrefixChanged(0xfe80_0000_0000_1234),
            SmaEvent::ClientReregister,
        ]
    );
    // The same Set again changes nothing but the reregistration request.
    set_port_info(&mut s, &pi);
    assert_eq!(s.poll_event(), Some(SmaEvent::ClientReregister));
    assert_eq!(s.poll_event(), None);
}

#[test]
fn ad_09_portinfo_set_with_an_invalid_field_changes_nothing() {
    let mut s = sma();
    let before = port_info(&mut s);
    for bad in [
        PortInfoRepr {
            neighbor_mtu: 6,
            lid: 9,
            ..before
        },
        PortInfoRepr {
            operational_vls: 5,
            lid: 9,
            ..before
        },
        PortInfoRepr {
            lid: 0xc000,
            ..before
        },
        PortInfoRepr {
            port_physical_state: phys_state::SLEEP,
            lid: 9,
            ..before
        },
        PortInfoRepr {
            link_width_enabled: 0x10,
            lid: 9,
            ..before
        },
    ] {
        let r = set_port_info(&mut s, &bad);
        assert_eq!(status_of(&r), status::INVALID_FIELD, "{bad:?}");
        assert_eq!(PortInfoRepr::parse(&data(&r)).unwrap(), before);
    }
    assert_eq!(s.poll_event(), None);
    assert_eq!(s.counters().error_replies, 5);
}

#[test]
fn ad_09_port_state_init_armed_active_set_by_the_sm() {
    let mut s = sma();
    configure(&mut s);
    let mut pi = port_info(&mut s);
    assert_eq!(pi.port_state, port_state::INIT);
    pi.port_state = port_state::ARMED;
    let r = set_port_info(&mut s, &pi);
    assert_eq!((status_of(&r), r[64 + 32] & 0xf), (0, port_state::ARMED));
    assert_eq!(
        s.poll_event(),
        Some(SmaEvent::PortStateChanged(port_state::ARMED))
    );
    pi.port_state = port_state::ACTIVE;
    let r = set_port_info(&mut s, &pi);
    assert_eq!((status_of(&r), r[64 + 32] & 0xf), (0, port_state::ACTIVE));
    assert_eq!(
        s.poll_event(),
        Some(SmaEvent::PortStateChanged(port_state::ACTIVE))
    );
    // Repeating Active is no change.
    let r = set_port_info(&mut s, &pi);
    assert_eq!(status_of(&r), 0);
    assert_eq!(s.poll_event(), None);
    // Down from Active: the port goes down, the PHY back to Polling.
    pi.port_state = port_state::DOWN;
    let r = set_port_info(&mut s, &pi);
    assert_eq!(r[64 + 32] & 0xf, port_state::DOWN);
    assert_eq!(r[64 + 33] >> 4, phys_state::POLLING);
    assert_eq!(
        s.poll_event(),
        Some(SmaEvent::PortStateChanged(port_state::DOWN))
    );
    s.link_up(T0);
    assert_eq!(port_info(&mut s).port_state, port_state::INIT);
}

#[test]
fn ad_09_port_state_invalid_transitions_are_rejected() {
    let mut s = sma();
    let pi = port_info(&mut s);
    for (req, why) in [
        (port_state::ACTIVE, "Init -> Active skips Armed"),
        (5, "ActiveDefer / reserved"),
    ] {
        let r = set_port_info(
            &mut s,
            &PortInfoRepr {
                port_state: req,
                ..pi
            },
        );
        assert_eq!(status_of(&r), status::INVALID_FIELD, "{why}");
        assert_eq!(r[64 + 32] & 0xf, port_state::INIT, "{why}");
    }
    assert_eq!(s.poll_event(), None);
    // Init is the link's to set: an Armed port cannot be sent back to it.
    set_port_info(
        &mut s,
        &PortInfoRepr {
            port_state: port_state::ARMED,
            ..pi
        },
    );
    let r = set_port_info(
        &mut s,
        &PortInfoRepr {
            port_state: port_state::INIT,
            ..pi
        },
    );
    assert_eq!(status_of(&r), status::INVALID_FIELD);
    assert_eq!(r[64 + 32] & 0xf, port_state::ARMED);
    // A Down port cannot be armed.
    s.link_down(T0);
    let r = set_port_info(
        &mut s,
        &PortInfoRepr {
            port_state: port_state::ARMED,
            ..pi
        },
    );
    assert_eq!(status_of(&r), status::INVALID_FIELD);
}

#[test]
fn ad_09_armed_port_goes_active_on_the_first_data_packet() {
    let mut s = sma();
    let mut pi = port_info(&mut s);
    pi.port_state = port_state::ARMED;
    set_port_info(&mut s, &pi);
    while s.poll_event().is_some() {}
    s.data_packet_received(T0);
    assert_eq!(
        s.poll_event(),
        Some(SmaEvent::PortStateChanged(port_state::ACTIVE))
    );
    assert_eq!(
        get(&mut s, attr_id::PORT_INFO, 0)[64 + 32] & 0xf,
        port_state::ACTIVE
    );
}

#[test]
fn ad_09_physical_state_disabled_holds_the_port_down() {
    let mut s = sma();
    let pi = port_info(&mut s);
    let r = set_port_info(
        &mut s,
        &PortInfoRepr {
            port_physical_state: phys_state::DISABLED,
            ..pi
        },
    );
    assert_eq!(
        (r[64 + 32] & 0xf, r[64 + 33] >> 4),
        (port_state::DOWN, phys_state::DISABLED)
    );
    s.link_up(T0);
    assert_eq!(port_info(&mut s).port_state, port_state::DOWN);
    set_port_info(
        &mut s,
        &PortInfoRepr {
            port_physical_state: phys_state::POLLING,
            port_state: port_state::NO_CHANGE,
            ..pi
        },
    );
    s.link_up(T0);
    assert_eq!(port_info(&mut s).port_state, port_state::INIT);
}

#[test]
fn ad_09_pkey_table_get_set_and_event() {
    let mut s = sma();
    let r = get(&mut s, attr_id::P_KEY_TABLE, 0);
    assert_eq!(&r[64..68], &[0xff, 0xff, 0, 0], "default P_Key alone");
    let mut d = [0u8; 64];
    d[0..2].copy_from_slice(&0xffffu16.to_be_bytes());
    d[2..4].copy_from_slice(&0x8001u16.to_be_bytes());
    d[62..64].copy_from_slice(&0x7fffu16.to_be_bytes());
    let r = set(&mut s, attr_id::P_KEY_TABLE, 1, d);
    assert_eq!(status_of(&r), 0);
    assert_eq!(data(&r), d);
    assert_eq!(s.poll_event(), Some(SmaEvent::PkeyTableChanged));
    assert_eq!(data(&get(&mut s, attr_id::P_KEY_TABLE, 1)), d);
    // PartitionCap 64: two blocks; the upper 16 modifier bits (a switch port) ignored.
    assert_eq!(data(&get(&mut s, attr_id::P_KEY_TABLE, 0x0001_0001)), d);
    assert_eq!(
        status_of(&get(&mut s, attr_id::P_KEY_TABLE, 2)),
        status::INVALID_FIELD
    );
    // Writing the same block again raises no event.
    set(&mut s, attr_id::P_KEY_TABLE, 1, d);
    assert_eq!(s.poll_event(), None);
}

#[test]
fn ad_09_sl_to_vl_table_get_set() {
    let mut s = sma();
    assert_eq!(&get(&mut s, attr_id::SL_TO_VL_TABLE, 0)[64..72], &[0; 8]);
    let mut d = [0u8; 64];
    d[..8].copy_from_slice(&[0x01, 0x23, 0x45, 0x67, 0x01, 0x23, 0x45, 0x6f]);
    let r = set(&mut s, attr_id::SL_TO_VL_TABLE, 0, d);
    assert_eq!(status_of(&r), 0);
    assert_eq!(&r[64..72], &d[..8]);
    assert_eq!(
        status_of(&get(&mut s, attr_id::SL_TO_VL_TABLE, 0x0101)),
        status::INVALID_FIELD
    );
}

#[test]
fn ad_09_vl_arbitration_table_four_blocks() {
    let mut s = sma();
    let r = get(&mut s, attr_id::VL_ARBITRATION, 1 << 16);
    assert_eq!(&r[64..70], &[0, 1, 1, 1, 2, 1], "fair low-priority default");
    for block in 1..=4u32 {
        let mut d = [0u8; 64];
        for i in 0..32 {
            d[2 * i] = (i as u8 + block as u8) & 7;
            d[2 * i + 1] = (block * 10) as u8 + i as u8;
        }
        let r = set(&mut s, attr_id::VL_ARBITRATION, block << 16, d);
        assert_eq!(status_of(&r), 0, "block {block}");
        assert_eq!(data(&r), d);
    }
    for block in 1..=4u32 {
        let r = get(&mut s, attr_id::VL_ARBITRATION, block << 16);
        assert_eq!(
            r[64 + 1],
            (block * 10) as u8,
            "block {block} kept its own entries"
        );
    }
    assert_eq!(
        status_of(&get(&mut s, attr_id::VL_ARBITRATION, 0)),
        status::INVALID_FIELD
    );
    assert_eq!(
        status_of(&get(&mut s, attr_id::VL_ARBITRATION, 5 << 16)),
        status::INVALID_FIELD
    );
}

#[test]
fn ad_09_status_codes_for_version_method_and_attribute() {
    let mut s = sma();
    let mut req = smp(method::GET, attr_id::NODE_INFO, 0, 0, [0; 64]);
    req.class_version = 2;
    assert_eq!(status_of(&ask(&mut s, &req, T0).0), status::BAD_VERSION);
    req.class_version = 1;
    req.base_version = 2;
    assert_eq!(status_of(&ask(&mut s, &req, T0).0), status::BAD_VERSION);
    let req = smp(0x03, attr_id::NODE_INFO, 0, 0, [0; 64]); // Send: not an SMP method
    let r = ask(&mut s, &req, T0).0;
    assert_eq!(
        (r[3], status_of(&r)),
        (method::GET_RESP, status::UNSUPPORTED_METHOD)
    );
    let req = smp(method::GET, 0x0099, 0, 0, [0; 64]);
    assert_eq!(
        status_of(&ask(&mut s, &req, T0).0),
        status::UNSUPPORTED_METHOD_ATTR
    );
    let req = smp(method::SET, attr_id::NODE_INFO, 0, 0, [0; 64]);
    assert_eq!(
        status_of(&ask(&mut s, &req, T0).0),
        status::UNSUPPORTED_METHOD_ATTR
    );
    assert_eq!(
        status_of(&get(&mut s, attr_id::NODE_INFO, 1)),
        status::INVALID_FIELD
    );
    assert_eq!(
        status_of(&get(&mut s, attr_id::NODE_DESCRIPTION, 1)),
        status::INVALID_FIELD
    );
    assert_eq!(s.counters().error_replies, 7);
}

#[test]
fn ad_09_sminfo_and_responses_go_to_the_nodes_sm() {
    let mut s = sma();
    let req = smp(method::GET, attr_id::SM_INFO, 0, 0, [0; 64]);
    // Without IsSM too: the device cannot see the guest's SM set it, so the
    // guest's MAD layer decides (its SM's agent, or an unclaimed request's
    // UNSUPPORTED_METHOD_ATTR).
    assert_eq!(
        s.handle_mad(&req.to_bytes(), &CTX, T0),
        SmaOutput::ToSm(Box::new(req.to_bytes()))
    );
    // A response reaches QP0 without IsSM (the answer to ibnetdiscover's or
    // smpquery's request), and so does a trap (as mlx4's firmware passes it).
    let resp = smp(method::GET_RESP, attr_id::NODE_INFO, 0, 0, [7; 64]);
    assert_eq!(
        s.handle_mad(&resp.to_bytes(), &CTX, T0),
        SmaOutput::ToSm(Box::new(resp.to_bytes()))
    );
    let trap = smp(method::TRAP, attr_id::NOTICE, 0, 0, [0; 64]);
    assert_eq!(
        s.handle_mad(&trap.to_bytes(), &CTX, T0),
        SmaOutput::ToSm(Box::new(trap.to_bytes()))
    );
    let mask = s.port().info.capability_mask | cap::IS_SM;
    s.set_capability_mask(mask);
    match s.handle_mad(&req.to_bytes(), &CTX, T0) {
        SmaOutput::ToSm(b) => assert_eq!(*b, req.to_bytes()),
        o => panic!("{o:?}"),
    }
    assert!(matches!(
        s.handle_mad(&resp.to_bytes(), &CTX, T0),
        SmaOutput::ToSm(_)
    ));
    assert_eq!(
        get(&mut s, attr_id::PORT_INFO, 0)[64 + 23] & 2,
        2,
        "IsSM in CapabilityMask"
    );
}

/// An SM three hops away (two switches) reads NodeInfo by directed route; the
/// response walks the return path back.
#[test]
fn ad_09_directed_route_get_through_two_switches_and_back() {
    let mut s = sma();
    let mut initial_path = [0u8; 64];
    initial_path[1..4].copy_from_slice(&[1, 3, 5]);
    let mut dr = DrFields {
        direction: false,
        hop_ptr: 0,
        hop_cnt: 3,
        dr_slid: PERMISSIVE_LID,
        dr_dlid: PERMISSIVE_LID,
        initial_path,
        return_path: [0; 64],
    };
    assert_eq!(hca_send(&mut dr, 1), Ok(HcaSend::Port));
    assert_eq!(switch_hop(&mut dr, 1, 8), Ok(SwitchHop::Forward(3)));
    assert_eq!(switch_hop(&mut dr, 2, 8), Ok(SwitchHop::Forward(5)));
    let mut req = smp(method::GET, attr_id::NODE_INFO, 0, 0, [0; 64]);
    req.route = SmpRoute::Directed(dr);
    let bytes = req.to_bytes();
    assert_eq!(
        (bytes[1], bytes[6], bytes[7]),
        (CLASS_SUBN_DIRECTED_ROUTE, 3, 3)
    );
    let (r, route) = ask(&mut s, &req, T0);
    assert_eq!(route, ReplyRoute::Directed(1));
    assert_eq!(r[1], CLASS_SUBN_DIRECTED_ROUTE);
    assert_eq!(r[3], method::GET_RESP);
    assert_eq!(&r[4..6], &[0x80, 0x00], "D set, status 0");
    assert_eq!(
        (r[6], r[7]),
        (3, 3),
        "pointer back at hop_cnt for the first hop home"
    );
    assert_eq!(
        &r[192..196],
        &[0, 1, 2, 1],
        "return path: S1 in 1, S2 in 2, HCA in 1"
    );
    assert_eq!(&r[64 + 12..64 + 20], &NODE_GUID.to_be_bytes());
    let SmpRoute::Directed(mut back) = SmpRepr::parse(&Smp::new_checked(&r[..]).unwrap())
        .unwrap()
        .route
    else {
        panic!("not directed");
    };
    assert_eq!(switch_hop(&mut back, 5, 8), Ok(SwitchHop::Forward(2)));
    assert_eq!(switch_hop(&mut back, 3, 8), Ok(SwitchHop::Forward(1)));
    assert_eq!(hca_receive(&mut back, 1), Ok(HcaDeliver::Sm));
    assert_eq!(back.hop_ptr, 0);
}

#[test]
fn ad_09_directed_route_hop_count_zero_answers_the_local_sm() {
    let mut s = sma();
    let mut req = smp(method::GET, attr_id::PORT_INFO, 0, 0, [0; 64]);
    let mut dr = DrFields {
        direction: false,
        hop_ptr: 0,
        hop_cnt: 0,
        dr_slid: PERMISSIVE_LID,
        dr_dlid: PERMISSIVE_LID,
        initial_path: [0; 64],
        return_path: [0; 64],
    };
    assert_eq!(hca_send(&mut dr, 1), Ok(HcaSend::Local));
    req.route = SmpRoute::Directed(dr);
    let (r, route) = ask(&mut s, &req, T0);
    assert_eq!(route, ReplyRoute::LocalSm);
    assert_eq!((r[4], r[6], r[7]), (0x80, 0, 0));
}

#[test]
fn ad_09_directed_route_through_a_lid_routed_tail_answers_by_lid() {
    let mut s = sma();
    let mut initial_path = [0u8; 64];
    initial_path[1] = 3;
    let mut return_path = [0u8; 64];
    return_path[1] = 4;
    let mut req = smp(method::GET, attr_id::NODE_DESCRIPTION, 0, 0, [0; 64]);
    // The directed part (one hop) ended at a switch that LID-routed it here.
    req.route = SmpRoute::Directed(DrFields {
        direction: false,
        hop_ptr: 2,
        hop_cnt: 1,
        dr_slid: PERMISSIVE_LID,
        dr_dlid: 5,
        initial_path,
        return_path,
    });
    let ctx = MadContext {
        in_port: 1,
        slid: 0x0030,
    };
    let SmaOutput::Reply { mad, route } = s.handle_mad(&req.to_bytes(), &ctx, T0) else {
        panic!("no reply");
    };
    assert_eq!(
        route,
        ReplyRoute::Lid(0x0030),
        "back to the switch that ended the DR part"
    );
    assert_eq!(
        (mad[4], mad[6], mad[7]),
        (0x80, 2, 1),
        "D set, pointer left for the switch"
    );
    assert_eq!(&mad[64..75], b"vhca0 HCA-1");
}

#[test]
fn ad_09_bad_directed_route_and_hostile_bytes_are_counted_drops() {
    let mut s = sma();
    let mut req = smp(method::GET, attr_id::NODE_INFO, 0, 0, [0; 64]);
    req.route = SmpRoute::Directed(DrFields {
        direction: false,
        hop_ptr: 1,
        hop_cnt: 3,
        dr_slid: PERMISSIVE_LID,
        dr_dlid: PERMISSIVE_LID,
        initial_path: [1; 64],
        return_path: [0; 64],
    });
    assert_eq!(s.handle_mad(&req.to_bytes(), &CTX, T0), SmaOutput::Nothing);
    assert_eq!(s.counters().drops(SmaDrop::BadDrPath), 1);
    assert_eq!(
        s.counters().dr_drops(DrDrop::BadHopPointer),
        1,
        "an HCA is no intermediate hop"
    );
    assert_eq!(s.handle_mad(&[1u8; 100], &CTX, T0), SmaOutput::Nothing);
    assert_eq!(s.counters().drops(SmaDrop::Truncated), 1);
    let mut b = req.to_bytes();
    b[1] = 0x04;
    assert_eq!(s.handle_mad(&b, &CTX, T0), SmaOutput::Nothing);
    assert_eq!(s.counters().drops(SmaDrop::NotSmp), 1);
    // Random SMPs of both classes: answered or counted, never a panic, and the
    // pending traps and events stay bounded.
    let mut rng = Rng::new(26);
    for i in 0..20_000 {
        let mut b = [0u8; MAD_LEN];
        for byte in b.iter_mut() {
            *byte = rng.next() as u8;
        }
        b[0] = 1;
        b[1] = if i % 2 == 0 {
            CLASS_SUBN_LID_ROUTED
        } else {
            CLASS_SUBN_DIRECTED_ROUTE
        };
        b[2] = 1;
        b[3] &= 0x07;
        b[16] = 0;
        let _ = s.handle_mad(&b, &CTX, Time(i));
        assert!(s.pending_traps() <= transport::mad::sma::MAX_PENDING_TRAPS);
    }
}

// ---- M_Key (AD-12) ----

/// Programs M_Key 0xKEY with the given protect bits and lease (seconds).
fn protect(s: &mut Sma, bits: u8, lease: u16) -> PortInfoRepr {
    configure(s);
    let mut pi = port_info(s);
    pi.mkey = 0x00c0_ffee;
    pi.mkey_protect_bits = bits;
    pi.mkey_lease_period = lease;
    assert_eq!(status_of(&set_port_info(s, &pi)), 0);
    pi
}

fn get_with(s: &mut Sma, mkey: u64, now: Time) -> SmaOutput {
    let req = smp(method::GET, attr_id::PORT_INFO, 0, mkey, [0; 64]);
    s.handle_mad(&req.to_bytes(), &CTX, now)
}

fn set_with(s: &mut Sma, pi: &PortInfoRepr, mkey: u64, now: Time) -> SmaOutput {
    let mut d = [0u8; 64];
    pi.emit(&mut d).unwrap();
    let req = smp(method::SET, attr_id::PORT_INFO, 0, mkey, d);
    s.handle_mad(&req.to_bytes(), &CTX, now)
}

fn reply_mkey(o: &SmaOutput) -> Option<u64> {
    match o {
        SmaOutput::Reply { mad, .. } => Some(u64::from_be_bytes(mad[64..72].try_into().unwrap())),
        _ => None,
    }
}

#[test]
fn ad_12_mkey_protect_level_0_get_reads_the_key_set_fails() {
    let mut s = sma();
    let pi = protect(&mut s, 0, 0);
    assert_eq!(reply_mkey(&get_with(&mut s, 0xbad, T0)), Some(0x00c0_ffee));
    let changed = PortInfoRepr { lid: 77, ..pi };
    assert_eq!(set_with(&mut s, &changed, 0xbad, T0), SmaOutput::Nothing);
    assert_eq!(s.counters().drops(SmaDrop::BadMkey), 1);
    assert_eq!(port_info(&mut s).lid, 5, "the bad Set changed nothing");
    assert_eq!(port_info(&mut s).mkey_violations, 1);
    // With the key the Set goes through.
    assert!(reply_mkey(&set_with(&mut s, &changed, 0x00c0_ffee, T0)).is_some());
    assert_eq!(port_info(&mut s).lid, 77);
}

#[test]
fn ad_12_mkey_protect_level_1_get_hides_the_key() {
    let mut s = sma();
    protect(&mut s, 1, 0);
    assert_eq!(reply_mkey(&get_with(&mut s, 0xbad, T0)), Some(0));
    assert_eq!(
        reply_mkey(&get_with(&mut s, 0x00c0_ffee, T0)),
        Some(0x00c0_ffee)
    );
}

#[test]
fn ad_12_mkey_protect_levels_2_and_3_fail_a_get() {
    for bits in [2, 3] {
        let mut s = sma();
        protect(&mut s, bits, 0);
        assert_eq!(
            get_with(&mut s, 0xbad, T0),
            SmaOutput::Nothing,
            "level {bits}"
        );
        assert_eq!(s.counters().drops(SmaDrop::BadMkey), 1);
        assert!(reply_mkey(&get_with(&mut s, 0x00c0_ffee, T0)).is_some());
    }
}

#[test]
fn ad_12_mkey_lease_expiry_clears_protection() {
    let mut s = sma();
    let pi = protect(&mut s, 2, 3);
    assert_eq!(s.poll_timeout(), None);
    // The failed check starts the 3 s lease.
    assert_eq!(get_with(&mut s, 0xbad, T0), SmaOutput::Nothing);
    let due = T0.plus_ns(3_000_000_000);
    assert_eq!(s.poll_timeout().map(|t| t <= due), Some(true));
    // More failures do not restart it.
    assert_eq!(
        get_with(&mut s, 0xbad, T0.plus_ns(2_000_000_000)),
        SmaOutput::Nothing
    );
    assert_eq!(get_with(&mut s, 0xbad, Time(due.0 - 1)), SmaOutput::Nothing);
    s.handle_timeout(due);
    assert_eq!(s.counters().lease_expiries, 1);
    // Protection is cleared: a Get with the wrong key reads everything, the key too.
    let got = reply_mkey(&get_with(&mut s, 0xbad, due));
    assert_eq!(got, Some(0x00c0_ffee));
    assert_eq!(port_info(&mut s).mkey_protect_bits, 0);
    // A Set still needs the key (level 0).
    assert_eq!(set_with(&mut s, &pi, 0xbad, due), SmaOutput::Nothing);
}

#[test]
fn ad_12_a_matching_mkey_stops_the_lease() {
    let mut s = sma();
    protect(&mut s, 2, 3);
    assert_eq!(get_with(&mut s, 0xbad, T0), SmaOutput::Nothing);
    assert!(reply_mkey(&get_with(&mut s, 0x00c0_ffee, T0.plus_ns(1_000_000_000))).is_some());
    let late = T0.plus_ns(10_000_000_000);
    s.handle_timeout(late);
    assert_eq!(s.counters().lease_expiries, 0);
    assert_eq!(
        get_with(&mut s, 0xbad, late),
        SmaOutput::Nothing,
        "still protected"
    );
}

#[test]
fn ad_12_bad_mkey_sends_trap_256_to_the_sm() {
    let mut s = sma();
    let pi = protect(&mut s, 1, 0);
    // Drain the traps of the set-up (none: every Set had the key).
    assert!(s.poll_transmit(T0).is_none());
    assert_eq!(set_with(&mut s, &pi, 0xbad, T0), SmaOutput::Nothing);
    let t = s.poll_transmit(T0).expect("trap 256");
    assert_eq!((t.dlid, t.sl), (1, 0));
    let b = &*t.mad;
    assert_eq!(&b[0..4], &[1, CLASS_SUBN_LID_ROUTED, 1, method::TRAP]);
    assert_eq!(&b[16..18], &attr_id::NOTICE.to_be_bytes());
    assert_eq!(
        &b[24..32],
        &0x00c0_ffeeu64.to_be_bytes(),
        "the port's M_Key"
    );
    let n = NoticeRepr::parse(&b[64..128]).unwrap();
    assert!(n.is_generic);
    assert_eq!(
        (n.notice_type, n.trap_number, n.issuer_lid),
        (2, trap::BAD_MKEY, 5)
    );
    assert_eq!(n.producer_type, u32::from(node_type::CA));
    let d = BadMkeyDetails::parse(&n.data_details);
    assert_eq!(
        (d.method, d.attr_id, d.mkey, d.dr_notice),
        (method::SET, attr_id::PORT_INFO, 0xbad, false)
    );
}

// ---- traps and TrapRepress ----

#[test]
fn ad_09_trap_repeats_until_trap_repress() {
    let mut s = sma();
    let pi = protect(&mut s, 0, 0);
    set_with(&mut s, &pi, 0xbad, T0);
    let first = s.poll_transmit(T0).unwrap();
    assert!(s.poll_transmit(T0).is_none(), "one send per interval");
    let tid = u64::from_be_bytes(first.mad[8..16].try_into().unwrap());
    // SubnetTimeOut 18: 4.096 us * 2^18, about 1.07 s.
    let next = s.poll_timeout().unwrap();
    assert_eq!(next, T0.plus_ns(4096 << 18));
    let again = s.poll_transmit(next).unwrap();
    assert_eq!(again.mad, first.mad, "the same trap, same TID");
    assert_eq!(s.counters().traps_sent, 2);
    // A TrapRepress for another TID does not stop it.
    let mut rep = smp(
        method::TRAP_REPRESS,
        attr_id::NOTICE,
        0,
        0x00c0_ffee,
        first.mad[64..128].try_into().unwrap(),
    );
    rep.tid = tid + 1;
    assert_eq!(
        s.handle_mad(&rep.to_bytes(), &CTX, next),
        SmaOutput::Nothing
    );
    assert_eq!(s.counters().drops(SmaDrop::UnmatchedRepress), 1);
    assert_eq!(s.pending_traps(), 1);
    // The SM's TrapRepress (same TID, no response) stops it.
    rep.tid = tid;
    assert_eq!(
        s.handle_mad(&rep.to_bytes(), &CTX, next),
        SmaOutput::Nothing
    );
    assert_eq!((s.pending_traps(), s.counters().traps_repressed), (0, 1));
    assert!(s.poll_transmit(next.plus_ns(10_000_000_000)).is_none());
    assert_eq!(s.poll_timeout(), None);
}

#[test]
fn ad_12_trap_repress_with_a_bad_mkey_is_refused() {
    let mut s = sma();
    let pi = protect(&mut s, 0, 0);
    set_with(&mut s, &pi, 0xbad, T0);
    let t = s.poll_transmit(T0).unwrap();
    let mut rep = smp(method::TRAP_REPRESS, attr_id::NOTICE, 0, 0xbad, [0; 64]);
    rep.tid = u64::from_be_bytes(t.mad[8..16].try_into().unwrap());
    assert_eq!(s.handle_mad(&rep.to_bytes(), &CTX, T0), SmaOutput::Nothing);
    assert_eq!(s.counters().drops(SmaDrop::BadMkey), 2);
    assert_eq!(
        s.pending_traps(),
        2,
        "the trap stays, and the refusal queued another"
    );
}

#[test]
fn ad_09_pending_traps_are_bounded_and_need_an_sm_lid() {
    let mut s = sma();
    // No SM LID yet: a violation cannot be reported.
    let mut pi = port_info(&mut s);
    pi.mkey = 9;
    set_port_info(&mut s, &pi);
    set_with(&mut s, &pi, 0xbad, T0);
    assert_eq!(s.counters().drops(SmaDrop::NoSmLid), 1);
    assert_eq!(s.pending_traps(), 0);
    pi.master_sm_lid = 1;
    set_with(&mut s, &pi, 9, T0);
    for _ in 0..20 {
        set_with(&mut s, &pi, 0xbad, T0);
    }
    assert_eq!(s.pending_traps(), transport::mad::sma::MAX_PENDING_TRAPS);
    assert_eq!(s.counters().drops(SmaDrop::TrapQueueFull), 20 - 8);
    // The Set with the key wrote M_KeyViolations back to 0; 20 since.
    assert_eq!(port_info(&mut s).mkey_violations, 20);
}

#[test]
fn ad_09_switch_link_state_change_sends_trap_128() {
    let mut s = Sma::new(node(node_type::SWITCH), PortState::new(1, PORT_GUID, 1, 32));
    s.link_up(T0);
    assert_eq!(s.counters().drops(SmaDrop::NoSmLid), 1, "no SM yet to tell");
    configure(&mut s);
    s.link_down(T0);
    let t = s.poll_transmit(T0).expect("trap 128");
    let n = NoticeRepr::parse(&t.mad[64..128]).unwrap();
    assert_eq!((n.notice_type, n.trap_number), (1, trap::LINK_STATE_CHANGE));
    assert_eq!(n.producer_type, u32::from(node_type::SWITCH));
    assert_eq!(&n.data_details[0..2], &[0, 5], "the switch's LID");
    assert_eq!(
        s.poll_event(),
        Some(SmaEvent::PortStateChanged(port_state::DOWN))
    );
    // An HCA reports no trap 128: its neighbour does.
    let mut h = sma();
    configure(&mut h);
    h.link_down(T0);
    assert!(h.poll_transmit(T0).is_none());
}

/// The trap 144 `s` sends now, as its Notice's data details.
fn sent_trap_144(s: &mut Sma) -> Trap144Details {
    let t = s.poll_transmit(T0).expect("trap 144");
    assert_eq!(t.dlid, 1);
    let v = Smp::new_checked(&t.mad[..]).unwrap();
    let smp = SmpRepr::parse(&v).unwrap();
    assert_eq!((smp.method, smp.attr_id), (method::TRAP, attr_id::NOTICE));
    let n = NoticeRepr::parse(&smp.data).unwrap();
    assert_eq!((n.trap_number, n.notice_type), (trap::LOCAL_CHANGES, 4));
    assert!(s.poll_transmit(T0).is_none(), "one trap");
    Trap144Details::parse(&n.data_details)
}

/// The host's agents (ib_core's modify_port) in CapabilityMask; trap 144 only
/// from a port that advertises it (IsCapabilityMaskNoticeSupported,
/// IsOtherLocalChangesNoticeSupported), and refusals that change nothing.
#[test]
fn ad_09_host_capabilities_and_node_description_trap_144_when_the_port_supports_it() {
    let mut s = sma();
    configure(&mut s);
    let base = s.port().info.capability_mask;
    // This port does not advertise trap 144: the change, no trap.
    assert_eq!(
        s.modify_host_capabilities(cap::IS_SM, 0, T0),
        Ok(base | cap::IS_SM)
    );
    assert!(!s.set_node_description(NodeDescription::from_text("vhca0 HCA-1"), T0));
    assert!(s.set_node_description(NodeDescription::from_text("x"), T0));
    assert!(s.poll_transmit(T0).is_none());
    assert_eq!(&get(&mut s, attr_id::NODE_DESCRIPTION, 0)[64..66], b"x\0");
    // Advertised: a CapabilityMask change sends the new mask ...
    let notices =
        cap::IS_CAPABILITY_MASK_NOTICE_SUPPORTED | cap::IS_OTHER_LOCAL_CHANGES_NOTICE_SUPPORTED;
    s.set_capability_mask(base | cap::IS_SM | notices);
    let m = s.modify_host_capabilities(cap::IS_VENDOR_CLASS_SUPPORTED, cap::IS_SM, T0);
    assert_eq!(m, Ok(base | notices | cap::IS_VENDOR_CLASS_SUPPORTED));
    let d = sent_trap_144(&mut s);
    assert_eq!(
        (
            d.lid,
            d.other_local_changes,
            d.capability_mask,
            d.change_flags
        ),
        (5, false, base | notices | cap::IS_VENDOR_CLASS_SUPPORTED, 0)
    );
    // ... a NodeDescription change OtherLocalChanges and its flag.
    assert!(s.set_node_description(NodeDescription::from_text("y"), T0));
    let d = sent_trap_144(&mut s);
    assert!(d.other_local_changes);
    assert_eq!(d.change_flags, trap144_change::NODE_DESCRIPTION);
    // Refused: an SMA bit, a bit both set and cleared; nothing changes.
    let before = s.port().info.capability_mask;
    assert_eq!(
        s.modify_host_capabilities(cap::IS_TRAP_SUPPORTED, 0, T0),
        Err(HostCapError::NotHostSettable(cap::IS_TRAP_SUPPORTED))
    );
    assert_eq!(
        s.modify_host_capabilities(cap::IS_SM, cap::IS_SM, T0),
        Err(HostCapError::SetAndClear(cap::IS_SM))
    );
    assert_eq!(s.port().info.capability_mask, before);
    assert!(s.poll_transmit(T0).is_none());
}
