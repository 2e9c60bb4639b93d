//! Helpers shared by the switch tests (issue 26 item 3): packets and SMPs as they
//! are on the wire.

#![allow(dead_code)]

use transport::mad::portinfo::port_state;
use transport::mad::switch_attr::SwitchInfoRepr;
use transport::mad::{
    attr_id, method, status, DrFields, NodeDescription, PortInfoRepr, Smp, SmpRepr, SmpRoute,
    PERMISSIVE_LID,
};
use transport::switch::{Egress, Switch, SwitchConfig, SwitchOut};
use transport::verbs::Time;
use transport::wire::ext::DethRepr;
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};

pub const SW_GUID: u64 = 0x0008_f104_0001_0000;

/// The switch's LID in [`switch`].
pub const SW_LID: u16 = 1;

/// The time [`feed`] hands the switch.
pub const T_SM: Time = Time(5_000_000_000);

pub fn switch_config(num_ports: u8) -> SwitchConfig {
    SwitchConfig {
        num_ports,
        node_guid: SW_GUID,
        system_image_guid: SW_GUID,
        device_id: 0x1af4,
        vendor_id: 0x0008f1,
        revision: 1,
        description: NodeDescription::from_text("vhca switch 0"),
        linear_fdb_cap: 256,
        multicast_fdb_cap: 64,
    }
}

/// A whole native packet: UD SEND Only on `vl` (QP0 with Q_Key 0 for an SMP).
pub fn packet(vl: u8, dlid: u16, slid: u16, dest_qp: u32, payload: &[u8]) -> Vec<u8> {
    packet_sl(vl, 0, dlid, slid, dest_qp, payload)
}

/// [`packet`] at service level `sl`.
pub fn packet_sl(vl: u8, sl: u8, dlid: u16, slid: u16, dest_qp: u32, payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        lrh: LrhRepr { vl, sl, dlid, slid },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp,
                ack_req: false,
                psn: 7,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: if dest_qp == 0 { 0 } else { 0x1111_1111 },
                    src_qp: 0x12,
                }),
                ..ExtHeaders::default()
            },
            payload,
        },
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).unwrap();
    buf
}

/// The LRH and SMP of a packet the switch sent (its CRCs checked on the way).
pub fn smp_of(pkt: &[u8]) -> (LrhRepr, SmpRepr) {
    let p = PacketRepr::parse(pkt).expect("a valid packet");
    let smp = SmpRepr::parse(&Smp::new_checked(p.transport.payload).unwrap()).unwrap();
    (p.lrh, smp)
}

pub fn dr_path(hops: &[u8]) -> DrFields {
    DrFields::outgoing(hops).expect("a path of at most 63 hops")
}

pub fn smp(m: u8, attr: u16, modifier: u32, route: SmpRoute, data: [u8; 64]) -> SmpRepr {
    SmpRepr {
        base_version: 1,
        class_version: 1,
        method: m,
        status: 0,
        tid: 0x0000_0001_0000_0099,
        attr_id: attr,
        attr_mod: modifier,
        mkey: 0,
        route,
        data,
    }
}

/// What the switch sends for `pkt` arriving on `port`.
pub fn feed(sw: &mut Switch, pkt: &[u8], port: u8) -> Vec<SwitchOut> {
    let mut out = vec![];
    sw.handle_packet(pkt, port, T_SM, &mut out);
    out
}

/// The SM on port 1's neighbour: a one-hop directed-route SMP (the pointer already
/// moved by the sender, C14-9:1), and the response's raw MAD and value.
pub fn sm_raw(
    sw: &mut Switch,
    m: u8,
    attr: u16,
    modifier: u32,
    data: [u8; 64],
) -> (Vec<u8>, SmpRepr) {
    let mut d = dr_path(&[1]);
    d.hop_ptr = 1;
    let req = smp(m, attr, modifier, SmpRoute::Directed(d), data);
    let out = feed(
        sw,
        &packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &req.to_bytes()),
        1,
    );
    assert_eq!(out.len(), 1, "one response");
    assert_eq!(out[0].port, 1, "back out of the ingress port");
    let Egress::New(b) = &out[0].packet else {
        panic!("a response is a new packet")
    };
    let (lrh, resp) = smp_of(b);
    assert_eq!((lrh.vl, lrh.dlid), (15, PERMISSIVE_LID));
    // LRH 8 + BTH 12 + DETH 8: the MAD.
    (b[28..28 + 256].to_vec(), resp)
}

pub fn sm(sw: &mut Switch, m: u8, attr: u16, modifier: u32, data: [u8; 64]) -> SmpRepr {
    sm_raw(sw, m, attr, modifier, data).1
}

pub fn set_ok(sw: &mut Switch, attr: u16, modifier: u32, data: [u8; 64]) -> SmpRepr {
    let r = sm(sw, method::SET, attr, modifier, data);
    assert_eq!(r.status, status::OK, "SubnSet({attr:#x}, {modifier:#x})");
    r
}

pub fn set_port(sw: &mut Switch, p: u8, f: impl Fn(&mut PortInfoRepr)) {
    let mut pi =
        PortInfoRepr::parse(&sm(sw, method::GET, attr_id::PORT_INFO, p.into(), [0; 64]).data)
            .unwrap();
    f(&mut pi);
    let mut d = [0u8; 64];
    pi.emit(&mut d).unwrap();
    set_ok(sw, attr_id::PORT_INFO, p.into(), d);
}

pub fn set_switch_info(sw: &mut Switch, f: impl Fn(&mut SwitchInfoRepr)) -> SmpRepr {
    let mut si =
        SwitchInfoRepr::parse(&sm(sw, method::GET, attr_id::SWITCH_INFO, 0, [0; 64]).data).unwrap();
    f(&mut si);
    let mut d = [0u8; 64];
    si.emit(&mut d).unwrap();
    sm(sw, method::SET, attr_id::SWITCH_INFO, 0, d)
}

/// A switch of `n` ports whose links `linked` are up and Active, LID 1, LinearFDBTop 63.
pub fn switch(n: u8, linked: &[u8]) -> Switch {
    let mut sw = Switch::new(&switch_config(n));
    for &p in linked {
        sw.link_up(p);
    }
    set_port(&mut sw, 0, |pi| pi.lid = SW_LID);
    let r = set_switch_info(&mut sw, |si| si.linear_fdb_top = 63);
    assert_eq!(r.status, status::OK);
    for st in [port_state::ARMED, port_state::ACTIVE] {
        for &p in linked {
            set_port(&mut sw, p, |pi| pi.port_state = st);
        }
    }
    sw
}

/// LID `lid` -> port `port` in the LFT's block 0 (LIDs 0..=63), every other
/// entry 255, by the SM's SubnSet.
pub fn set_routes(sw: &mut Switch, routes: &[(u16, u8)]) {
    let mut lft = transport::mad::switch_attr::LftBlock([0xff; 64]);
    for &(lid, port) in routes {
        lft.0[usize::from(lid)] = port;
    }
    let mut d = [0u8; 64];
    lft.emit(&mut d).unwrap();
    set_ok(sw, attr_id::LINEAR_FORWARDING_TABLE, 0, d);
}
