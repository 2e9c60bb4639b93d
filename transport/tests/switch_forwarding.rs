//! The switch's forwarding and its SMA's attributes (issue 26 item 3; AD-09):
//! multicast through the MulticastForwardingTable, every drop counted per reason and
//! in the port counters, the MAD status of a bad modifier, SwitchInfo's layout and
//! PortStateChange, an Armed port going Active on data. An SM on port 1 talks to
//! the switch by directed route (one hop); assertions are on the bytes.

mod switch_util;

use switch_util::{
    dr_path, feed, packet, set_ok, set_port, set_switch_info, sm, sm_raw, smp, switch,
    switch_config, SW_LID,
};
use transport::mad::dr::DrDrop;
use transport::mad::portinfo::port_state;
use transport::mad::switch_attr::{LftBlock, MftBlock, MftModifier, SwitchInfoRepr};
use transport::mad::{attr_id, method, status, SmpRepr, SmpRoute, PERMISSIVE_LID};
use transport::switch::{Egress, Switch, SwitchDrop, SwitchOut};

fn ports(out: &[SwitchOut]) -> Vec<u8> {
    let mut v: Vec<u8> = out.iter().map(|o| o.port).collect();
    v.sort();
    v
}

#[test]
fn ad_09_switch_multicast_through_the_mft_to_every_port_but_the_ingress() {
    let mut sw = switch(20, &[1, 2, 3, 5, 17]);
    // MLID 0xC001 (block 0, index 1): ports 1, 2, 5 in position 0; port 17 (and a
    // port 31 the switch does not have) in position 1.
    let mut blk = MftBlock([0; 32]);
    blk.0[1] = 1 << 1 | 1 << 2 | 1 << 5;
    let mut d = [0u8; 64];
    blk.emit(&mut d).unwrap();
    set_ok(&mut sw, attr_id::MULTICAST_FORWARDING_TABLE, 0, d);
    blk.0[1] = 1 << (17 - 16) | 1 << (31 - 16);
    blk.emit(&mut d).unwrap();
    let pos1 = MftModifier {
        position: 1,
        block: 0,
    }
    .to_u32();
    assert_eq!(pos1, 0x1000_0000);
    let r = set_ok(&mut sw, attr_id::MULTICAST_FORWARDING_TABLE, pos1, d);
    assert_eq!(&r.data[2..4], &[0x00, 0x02], "port 31 is not kept");
    let r = sm(
        &mut sw,
        method::GET,
        attr_id::MULTICAST_FORWARDING_TABLE,
        0,
        [0; 64],
    );
    assert_eq!(&r.data[2..4], &[0x00, 0x26]);

    let pkt = packet(0, 0xc001, 9, 0xff_ffff, b"to the group");
    let out = feed(&mut sw, &pkt, 2);
    assert_eq!(ports(&out), vec![1, 5, 17], "every member but the ingress");
    assert!(out.iter().all(|o| o.packet == Egress::Same));
    let out = feed(&mut sw, &pkt, 3);
    assert_eq!(ports(&out), vec![1, 2, 5, 17], "a sender outside the group");

    // A member whose link went down is skipped and counted; the rest still get it.
    sw.link_down(5);
    let out = feed(&mut sw, &pkt, 2);
    assert_eq!(ports(&out), vec![1, 17]);
    assert_eq!(sw.counters().drop_count(SwitchDrop::EgressDown), 1);
    assert_eq!(sw.port_counters(5).unwrap().xmit_discards, 1);

    // An MLID with no members, and one past MulticastFDBCap (64): no route.
    assert!(feed(&mut sw, &packet(0, 0xc002, 9, 0xff_ffff, b"x"), 2).is_empty());
    assert!(feed(&mut sw, &packet(0, 0xc040, 9, 0xff_ffff, b"x"), 2).is_empty());
    assert_eq!(sw.counters().drop_count(SwitchDrop::NoRoute), 2);
}

#[test]
fn ad_09_switch_drops_are_counted_per_reason() {
    // Ports 1, 2 Active; 3 trained but left in Init; 4 has no link.
    let mut sw = switch(4, &[1, 2]);
    sw.link_up(3);
    let mut lft = LftBlock([0xff; 64]);
    lft.0[2] = 2;
    lft.0[3] = 3;
    lft.0[4] = 4;
    let mut d = [0u8; 64];
    lft.emit(&mut d).unwrap();
    set_ok(&mut sw, attr_id::LINEAR_FORWARDING_TABLE, 0, d);
    let c = |sw: &Switch, why| sw.counters().drop_count(why);

    // Forwarded: LID 2 by port 2, the bytes as they came.
    let ok = packet(0, 2, 9, 0x22, b"data");
    let out = feed(&mut sw, &ok, 1);
    assert_eq!(
        out,
        vec![SwitchOut {
            port: 2,
            packet: Egress::Same
        }]
    );

    // LFT entry 255, above LinearFDBTop (63), past the table, LID 0, permissive.
    for dlid in [5, 64, 300, 0, PERMISSIVE_LID] {
        assert!(
            feed(&mut sw, &packet(0, dlid, 9, 0x22, b"x"), 1).is_empty(),
            "DLID {dlid:#x}"
        );
    }
    assert_eq!(c(&sw, SwitchDrop::NoRoute), 5);

    // Egress in Init (data only between Active ports) and egress without a link.
    assert!(feed(&mut sw, &packet(0, 3, 9, 0x22, b"x"), 1).is_empty());
    assert_eq!(c(&sw, SwitchDrop::EgressNotActive), 1);
    assert_eq!(sw.port_counters(3).unwrap().xmit_discards, 1);
    assert!(feed(&mut sw, &packet(0, 4, 9, 0x22, b"x"), 1).is_empty());
    assert_eq!(c(&sw, SwitchDrop::EgressDown), 1);
    assert_eq!(sw.port_counters(4).unwrap().xmit_discards, 1);

    // Data arriving on the Init port.
    assert!(feed(&mut sw, &ok, 3).is_empty());
    assert_eq!(c(&sw, SwitchDrop::IngressNotActive), 1);

    // A data packet on VL15 (not an SMP: QP 0x22).
    assert!(feed(&mut sw, &packet(15, 2, 9, 0x22, b"x"), 1).is_empty());
    assert_eq!(c(&sw, SwitchDrop::Vl15NotSmp), 1);
    assert_eq!(sw.port_counters(1).unwrap().vl15_dropped, 1);

    // A bad VCRC, a short packet, and a length that disagrees with LRH:PktLen.
    let mut bad = ok.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert!(feed(&mut sw, &bad, 1).is_empty());
    assert!(feed(&mut sw, &ok[..6], 1).is_empty());
    assert!(feed(&mut sw, &ok[..ok.len() - 4], 1).is_empty());
    assert_eq!(c(&sw, SwitchDrop::Malformed), 3);
    assert_eq!(sw.port_counters(1).unwrap().rcv_errors, 3);

    // A port the switch does not have; data for the switch's own LID.
    assert!(feed(&mut sw, &ok, 0).is_empty());
    assert!(feed(&mut sw, &ok, 5).is_empty());
    assert_eq!(c(&sw, SwitchDrop::NoSuchPort), 2);
    assert!(feed(&mut sw, &packet(0, SW_LID, 9, 0x22, b"x"), 1).is_empty());
    assert_eq!(c(&sw, SwitchDrop::ToSwitch), 1);

    // A directed-route SMP whose pointer was not moved by its sender (C14-9:1).
    let req = smp(
        method::GET,
        attr_id::NODE_INFO,
        0,
        SmpRoute::Directed(dr_path(&[1])),
        [0; 64],
    );
    assert!(feed(
        &mut sw,
        &packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &req.to_bytes()),
        1
    )
    .is_empty());
    assert_eq!(c(&sw, SwitchDrop::BadDrPath), 1);
    assert_eq!(sw.counters().dr_drops[DrDrop::BadHopPointer.index()], 1);
    // Past the end of the directed part with no LID-routed tail (C14-9:5).
    let mut path = dr_path(&[1]);
    path.hop_ptr = 2;
    let req = smp(
        method::GET,
        attr_id::NODE_INFO,
        0,
        SmpRoute::Directed(path),
        [0; 64],
    );
    let pkt = packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &req.to_bytes());
    assert!(feed(&mut sw, &pkt, 1).is_empty());
    assert_eq!(sw.counters().dr_drops[DrDrop::BadHopPointer.index()], 2);

    // The receive side counted every packet that got past the link checks.
    let p1 = sw.port_counters(1).unwrap();
    assert!(p1.rcv_packets > 0 && p1.rcv_data_words >= p1.rcv_packets * 7);
}

#[test]
fn ad_09_switch_bad_modifiers_get_the_mad_status() {
    let mut sw = switch(20, &[1]);
    let st = |sw: &mut Switch, m, attr, modifier| sm(sw, m, attr, modifier, [0; 64]).status;
    use method::{GET, SET};
    // PortInfo: ports 0..=20.
    assert_eq!(st(&mut sw, GET, attr_id::PORT_INFO, 20), status::OK);
    assert_eq!(
        st(&mut sw, GET, attr_id::PORT_INFO, 21),
        status::INVALID_FIELD
    );
    // LFT: LinearFDBCap 256 is blocks 0..=3.
    assert_eq!(
        st(&mut sw, GET, attr_id::LINEAR_FORWARDING_TABLE, 3),
        status::OK
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::LINEAR_FORWARDING_TABLE, 4),
        status::INVALID_FIELD
    );
    assert_eq!(
        st(&mut sw, SET, attr_id::LINEAR_FORWARDING_TABLE, 4),
        status::INVALID_FIELD
    );
    // MFT: MulticastFDBCap 64 is blocks 0..=1; 20 ports are positions 0..=1; the
    // reserved bits must be 0.
    let mft = attr_id::MULTICAST_FORWARDING_TABLE;
    assert_eq!(st(&mut sw, GET, mft, 0x1000_0001), status::OK);
    assert_eq!(st(&mut sw, GET, mft, 2), status::INVALID_FIELD);
    assert_eq!(st(&mut sw, GET, mft, 0x2000_0000), status::INVALID_FIELD);
    assert_eq!(st(&mut sw, GET, mft, 1 << 9), status::INVALID_FIELD);
    assert_eq!(st(&mut sw, SET, mft, 0x2000_0000), status::INVALID_FIELD);
    // SwitchInfo, NodeInfo, NodeDescription: modifier 0 only.
    assert_eq!(
        st(&mut sw, GET, attr_id::SWITCH_INFO, 1),
        status::INVALID_FIELD
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::NODE_INFO, 1),
        status::INVALID_FIELD
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::NODE_DESCRIPTION, 1),
        status::INVALID_FIELD
    );
    // P_KeyTable: port 0's 64 P_Keys are blocks 0..=1 (modifier: port << 16 |
    // block); an external port has none (PartitionEnforcementCap 0).
    assert_eq!(st(&mut sw, GET, attr_id::P_KEY_TABLE, 1), status::OK);
    assert_eq!(
        st(&mut sw, GET, attr_id::P_KEY_TABLE, 2),
        status::INVALID_FIELD
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::P_KEY_TABLE, 1 << 16),
        status::INVALID_FIELD
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::P_KEY_TABLE, 21 << 16),
        status::INVALID_FIELD
    );
    // VLArbitrationTable: block 1..=4 << 16 | port 0..=20.
    assert_eq!(
        st(&mut sw, GET, attr_id::VL_ARBITRATION, 4 << 16 | 20),
        status::OK
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::VL_ARBITRATION, 5 << 16),
        status::INVALID_FIELD
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::VL_ARBITRATION, 1 << 16 | 21),
        status::INVALID_FIELD
    );
    // SLtoVLMappingTable: input port 0..=20 << 8 | output port 0..=20.
    assert_eq!(
        st(&mut sw, GET, attr_id::SL_TO_VL_TABLE, 20 << 8 | 20),
        status::OK
    );
    for bad in [21 << 8, 21, 1 << 16] {
        assert_eq!(
            st(&mut sw, GET, attr_id::SL_TO_VL_TABLE, bad),
            status::INVALID_FIELD,
            "{bad:#x}"
        );
    }
    // A LinearFDBTop past the table is refused whole.
    let r = set_switch_info(&mut sw, |si| {
        si.linear_fdb_top = 256;
        si.life_time_value = 9;
    });
    assert_eq!(r.status, status::INVALID_FIELD);
    assert_eq!(sw.switch_info().linear_fdb_top, 63);
    assert_eq!(sw.switch_info().life_time_value, 0);
    // Attributes and methods a switch does not have.
    assert_eq!(
        st(&mut sw, SET, attr_id::NODE_INFO, 0),
        status::UNSUPPORTED_METHOD_ATTR
    );
    assert_eq!(
        st(&mut sw, GET, attr_id::SM_INFO, 0),
        status::UNSUPPORTED_METHOD_ATTR
    );
    assert_eq!(
        st(&mut sw, 0x04, attr_id::NODE_INFO, 0),
        status::UNSUPPORTED_METHOD
    );

    // On the wire: a directed-route response's status word carries D (0x8000) and
    // INVALID_FIELD (7 << 2); the method is GetResp.
    let (raw, _) = sm_raw(&mut sw, GET, attr_id::PORT_INFO, 21, [0; 64]);
    assert_eq!(raw[3], method::GET_RESP);
    assert_eq!(&raw[4..6], &[0x80, 0x1c]);
    assert_eq!(&raw[16..18], &attr_id::PORT_INFO.to_be_bytes());
    assert_eq!(&raw[20..24], &21u32.to_be_bytes());
    let before = sw.counters().sma_error_replies;
    sm(&mut sw, GET, attr_id::PORT_INFO, 22, [0; 64]);
    assert_eq!(sw.counters().sma_error_replies, before + 1);
}

#[test]
fn ad_09_switch_port0_pkeys_and_vlarb_per_port_read_back() {
    let mut sw = switch(4, &[1]);
    let r = sm(&mut sw, method::GET, attr_id::P_KEY_TABLE, 0, [0; 64]);
    assert_eq!(
        &r.data[0..4],
        &[0xff, 0xff, 0, 0],
        "the default P_Key alone"
    );
    let mut d = [0u8; 64];
    d[0..6].copy_from_slice(&[0xff, 0xff, 0x80, 0x01, 0x7f, 0xff]);
    let r = set_ok(&mut sw, attr_id::P_KEY_TABLE, 0, d);
    assert_eq!(r.data, d);
    assert_eq!(&sw.port(0).unwrap().pkeys[..3], &[0xffff, 0x8001, 0x7fff]);
    // VLArbitration low block 1 of port 3: (VL, weight) pairs.
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&[0x01, 0x40, 0x02, 0x20]);
    let r = set_ok(&mut sw, attr_id::VL_ARBITRATION, 1 << 16 | 3, d);
    assert_eq!(&r.data[0..4], &[0x01, 0x40, 0x02, 0x20]);
    let other = sm(
        &mut sw,
        method::GET,
        attr_id::VL_ARBITRATION,
        1 << 16 | 2,
        [0; 64],
    );
    assert_ne!(&other.data[0..4], &[0x01, 0x40, 0x02, 0x20], "per port");
}

#[test]
fn ad_09_switch_info_layout_and_port_state_change() {
    let si = SwitchInfoRepr {
        linear_fdb_cap: 0x0102,
        random_fdb_cap: 0x0304,
        multicast_fdb_cap: 0x0506,
        linear_fdb_top: 0x0708,
        default_port: 0x09,
        default_mcast_primary_port: 0x0a,
        default_mcast_not_primary_port: 0x0b,
        life_time_value: 0x13,
        port_state_change: true,
        optimized_sl2vl_programming: 2,
        lids_per_port: 0x0c0d,
        partition_enforcement_cap: 0x0e0f,
        inbound_enforcement_cap: true,
        outbound_enforcement_cap: false,
        filter_raw_inbound_cap: true,
        filter_raw_outbound_cap: false,
        enhanced_port0: true,
        multicast_fdb_top: 0xc010,
    };
    let mut d = [0u8; 64];
    si.emit(&mut d).unwrap();
    // libibmad's IB_SW_* offsets: LifeTime bits 88..93, StateChange bit 93,
    // OptSLtoVLMapping 94..96, the enforcement caps and EnhancedPort0 bits 128..133,
    // MulticastFDBTop at bit 144.
    assert_eq!(
        &d[..20],
        &[
            1,
            2,
            3,
            4,
            5,
            6,
            7,
            8,
            9,
            0xa,
            0xb,
            0x13 << 3 | 0x4 | 2,
            0xc,
            0xd,
            0xe,
            0xf,
            0xa8,
            0,
            0xc0,
            0x10
        ]
    );
    assert_eq!(SwitchInfoRepr::parse(&d).unwrap(), si);
    assert!(SwitchInfoRepr {
        life_time_value: 32,
        ..si
    }
    .emit(&mut d)
    .is_err());
    assert_eq!(
        MftModifier::parse(0xf000_01ff),
        MftModifier {
            position: 15,
            block: 511
        }
    );

    // PortStateChange: set when a link comes up, cleared by the SM writing 1.
    let mut sw = Switch::new(&switch_config(4));
    assert_eq!(sm_port0_ready(&mut sw).data[11] & 0x04, 0x04);
    let r = set_switch_info(&mut sw, |si| assert!(si.port_state_change));
    assert_eq!(r.data[11] & 0x04, 0, "cleared by writing 1");
    let r = set_switch_info(&mut sw, |si| si.port_state_change = false);
    assert_eq!(r.data[11] & 0x04, 0);
    // The SM moving a port sets it again.
    set_port(&mut sw, 1, |pi| pi.port_state = port_state::ARMED);
    assert!(sw.switch_info().port_state_change);
    // Capabilities are read-only.
    let r = set_switch_info(&mut sw, |si| si.linear_fdb_cap = 7);
    assert_eq!(&r.data[0..2], &256u16.to_be_bytes());
}

/// Links up on port 1 (for the SM) and the SwitchInfo as read then.
fn sm_port0_ready(sw: &mut Switch) -> SmpRepr {
    sw.link_up(1);
    sm(sw, method::GET, attr_id::SWITCH_INFO, 0, [0; 64])
}

#[test]
fn ad_09_switch_armed_port_goes_active_on_the_first_data_packet() {
    let mut sw = switch(3, &[1, 2]);
    // Port 3 trains and the SM arms it.
    sw.link_up(3);
    set_port(&mut sw, 3, |pi| pi.port_state = port_state::ARMED);
    let mut lft = LftBlock([0xff; 64]);
    lft.0[2] = 2;
    lft.0[3] = 3;
    let mut d = [0u8; 64];
    lft.emit(&mut d).unwrap();
    set_ok(&mut sw, attr_id::LINEAR_FORWARDING_TABLE, 0, d);
    // Towards the Armed port: not yet (data only to Active ports).
    assert!(feed(&mut sw, &packet(0, 3, 9, 0x22, b"x"), 1).is_empty());
    // From the Armed port: it becomes Active and the packet goes on (IBA 7.2).
    let out = feed(&mut sw, &packet(0, 2, 9, 0x22, b"x"), 3);
    assert_eq!(ports(&out), vec![2]);
    assert_eq!(sw.port(3).unwrap().info.port_state, port_state::ACTIVE);
    assert_eq!(
        ports(&feed(&mut sw, &packet(0, 3, 9, 0x22, b"x"), 1)),
        vec![3]
    );
}

/// A switch a static subnet sets up (no SM; `vhca switch` from the fabric
/// file): its LID, LFT entries, MFT flooding and Active ports through the
/// start-up interface, read back by an SM as if it had programmed them.
#[test]
fn ad_09_switch_static_start_up_routes_floods_and_activates() {
    let mut sw = Switch::new(&switch_config(4));
    for p in [1, 2, 3] {
        sw.link_up(p);
        sw.activate(p);
    }
    sw.activate(4); // Down: stays Down
    assert_eq!(sw.port(4).unwrap().info.port_state, port_state::DOWN);
    assert_eq!(sw.port(2).unwrap().info.port_state, port_state::ACTIVE);
    sw.set_static_lid(9);
    assert_eq!(sw.lid(), 9);
    assert!(sw.set_static_route(0x11, 2));
    assert!(sw.set_static_route(0x12, 3));
    assert!(!sw.set_static_route(0, 1), "LID 0 has no route");
    assert!(!sw.set_static_route(0x13, 5), "no port 5");
    assert!(!sw.set_static_route(0xc000, 1), "past the LFT");
    assert_eq!(sw.switch_info().linear_fdb_top, 0x12);
    // Unicast through the entries.
    let to_12 = packet(0, 0x12, 0x11, 5, b"data");
    let out = feed(&mut sw, &to_12, 2);
    assert_eq!((ports(&out), &out[0].packet), (vec![3], &Egress::Same));
    let out = feed(&mut sw, &packet(0, 0x13, 0x11, 5, b"x"), 2);
    assert!(out.is_empty());
    assert_eq!(sw.counters().drop_count(SwitchDrop::NoRoute), 1);
    // The SM reads the LFT block as programmed.
    let b = LftBlock::parse(
        &sm(
            &mut sw,
            method::GET,
            attr_id::LINEAR_FORWARDING_TABLE,
            0,
            [0; 64],
        )
        .data,
    )
    .unwrap();
    assert_eq!((b.0[0x11], b.0[0x12], b.0[0x13]), (2, 3, 255));
    // Multicast floods every flooded port but the ingress; port 4 is Down.
    sw.set_static_flood(&[1, 2, 3, 4]);
    let out = feed(&mut sw, &packet(0, 0xc001, 0x11, 0xffffff, b"mc"), 2);
    assert_eq!(ports(&out), vec![1, 3]);
    assert_eq!(sw.counters().drop_count(SwitchDrop::EgressDown), 1);
}

#[test]
fn ad_09_switch_node_description_get_reads_the_configured_text() {
    let mut sw = switch(4, &[1]);
    let (raw, r) = sm_raw(&mut sw, method::GET, attr_id::NODE_DESCRIPTION, 0, [0; 64]);
    assert_eq!((r.method, r.status), (method::GET_RESP, status::OK));
    // The 64-byte NodeString (IBA 14.2.5.2), NUL-padded, at the MAD's byte 64.
    let text = b"vhca switch 0";
    assert_eq!(&raw[64..64 + text.len()], text);
    assert!(raw[64 + text.len()..128].iter().all(|&b| b == 0));
    // Read-only: a SubnSet is UNSUPPORTED_METHOD_ATTR.
    let r = sm(
        &mut sw,
        method::SET,
        attr_id::NODE_DESCRIPTION,
        0,
        [b'x'; 64],
    );
    assert_eq!(r.status, status::UNSUPPORTED_METHOD_ATTR);
    let r = sm(&mut sw, method::GET, attr_id::NODE_DESCRIPTION, 0, [0; 64]);
    assert_eq!(&r.data[..text.len()], text, "unchanged");
}

#[test]
fn ad_09_switch_external_port_set_ignores_port_0s_fields() {
    // ibportstate's Set on an external port carries LID and SMLID 0x1234
    // (IBA 14.2.5.6: those fields, like M_Key, GidPrefix, LMC and
    // MasterSMSL, are port 0's): the GetResp reads them as they were.
    let mut sw = switch(4, &[1, 2]);
    let get = |sw: &mut Switch, p: u8| {
        transport::mad::portinfo::PortInfoRepr::parse(
            &sm(sw, method::GET, attr_id::PORT_INFO, p.into(), [0; 64]).data,
        )
        .unwrap()
    };
    let before = get(&mut sw, 2);
    set_port(&mut sw, 2, |pi| {
        pi.lid = 0x1234;
        pi.master_sm_lid = 0x1234;
        pi.lmc = 3;
        pi.mkey = 0x55;
        pi.gid_prefix = 0x66;
    });
    let after = get(&mut sw, 2);
    assert_eq!(
        (
            after.lid,
            after.master_sm_lid,
            after.lmc,
            after.mkey,
            after.gid_prefix
        ),
        (
            before.lid,
            before.master_sm_lid,
            before.lmc,
            before.mkey,
            before.gid_prefix
        )
    );
    // Port 0 takes them (its LID is the switch's).
    set_port(&mut sw, 0, |pi| pi.master_sm_lid = 0x1234);
    assert_eq!(get(&mut sw, 0).master_sm_lid, 0x1234);
}
