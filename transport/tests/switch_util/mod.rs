//! Helpers shared by the switch tests (issue 26 item 3): packets and SMPs as they
//! are on the wire.

#![allow(dead_code)]

use transport::mad::{DrFields, NodeDescription, Smp, SmpRepr, SmpRoute};
use transport::switch::SwitchConfig;
use transport::wire::ext::DethRepr;
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};

pub const SW_GUID: u64 = 0x0008_f104_0001_0000;

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
    let repr = PacketRepr {
        lrh: LrhRepr {
            vl,
            sl: 0,
            dlid,
            slid,
        },
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
