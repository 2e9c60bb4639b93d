//! Issue 30: a port whose link computes the CRCs (`PortConfig::crcs_by_link`,
//! set by the device where the shared-memory link carries its packets
//! through memory): the engine builds native packets with ICRC and VCRC left
//! zero, and takes such a packet only when the link vouches for it
//! (`RxFrom::crcs_vouched`); without that it drops it as any bad-CRC packet
//! (WF-09), and `wire::fill_crcs` makes it a packet the checking parse takes.

mod common;

use common::*;
use transport::engine::{Limits, PortConfig, RxFrom};
use transport::verbs::{Sge, WcOpcode, WcStatus, WrOpcode};
use transport::wire::DropReason as WireDrop;

#[test]
fn wf_09_crcs_by_link_packets_leave_without_crcs_and_are_taken_only_when_vouched() {
    let ports = (1..=2u16)
        .map(|lid| PortConfig {
            crcs_by_link: true,
            ..PortConfig::new(lid, u64::from(lid))
        })
        .collect();
    let mut net = Net::with_ports(ports, 1 << 20, 9, Limits::default());
    let ka = net.reg_all(0, ALL_ACCESS);
    let kb = net.reg_all(1, ALL_ACCESS);
    let p = connect(&mut net, 0, 1, &ConnOpts::default());
    let len = 10_000;
    fill(&mut net, 0, MEM_BASE, len, 5);
    let mut w = send_wr(
        1,
        WrOpcode::RdmaWrite,
        vec![Sge {
            addr: MEM_BASE,
            length: len as u32,
            lkey: ka,
        }],
    );
    w.remote_addr = MEM_BASE + 0x2_0000;
    w.rkey = kb;
    net.nodes[0].engine.post_send(p.qa, w).unwrap();
    let sent = take_sent(&mut net, 0);
    assert!(sent.len() >= 3, "{} packets", sent.len());
    for s in &sent {
        assert_eq!(s[s.len() - 6..], [0; 6], "no ICRC, no VCRC");
    }
    let now = net.now;
    // Unvouched (a wire): each is a bad VCRC, dropped before the transport.
    let b = &mut net.nodes[1];
    for s in &sent {
        b.engine.handle_packet_from(s, Some(1), &mut b.mem, now);
    }
    let w = &b.engine.counters().wire_drops;
    assert_eq!(w.get(WireDrop::BadVcrc), sent.len() as u64);
    assert_eq!(bytes(&net, 1, MEM_BASE + 0x2_0000, len), vec![0; len]);
    assert!(
        take_sent(&mut net, 1).is_empty(),
        "no ACK for what was dropped"
    );
    // Vouched (memory): placed and acknowledged, the ACK without CRCs too.
    let vouched = RxFrom {
        src_lid: Some(1),
        crcs_vouched: true,
    };
    let b = &mut net.nodes[1];
    for s in &sent {
        b.engine.handle_received(s, vouched, &mut b.mem, now);
    }
    assert_eq!(
        bytes(&net, 0, MEM_BASE, len),
        bytes(&net, 1, MEM_BASE + 0x2_0000, len)
    );
    let acks = take_sent(&mut net, 1);
    assert!(!acks.is_empty());
    let from_b = RxFrom {
        src_lid: Some(2),
        crcs_vouched: true,
    };
    let a = &mut net.nodes[0];
    for k in &acks {
        assert_eq!(k[k.len() - 6..], [0; 6]);
        a.engine.handle_received(k, from_b, &mut a.mem, now);
    }
    let c = wait_cqe(&mut net, 0, p.cq_a);
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    // On a wire after all: the link fills the CRCs in, and the checking
    // parse takes the packet with the fields it had.
    for s in &sent {
        let mut filled = s.clone();
        transport::wire::fill_crcs(&mut filled).unwrap();
        assert_ne!(filled[filled.len() - 6..], [0; 6]);
        let checked = transport::wire::PacketRepr::parse(&filled).unwrap();
        assert_eq!(
            checked,
            transport::wire::PacketRepr::parse_vouched(s).unwrap()
        );
    }
}
