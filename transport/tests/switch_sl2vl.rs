//! The switch's SLtoVLMappingTable (issue 26; AD-09; IBA 14.2.5.8, 7.6.6): one
//! table per (input port, output port), the modifier's bits 15..8 and 7..0,
//! read and written by the SM; a data packet leaves on the VL its SL maps to in
//! the table of the port it came in on and the port it goes out of, LRH:VL
//! rewritten and the VCRC computed again, the ICRC untouched; a VL the egress
//! port does not operate, or VL15, discards it (counted). Assertions are on the
//! bytes on the wire.

mod switch_util;

use switch_util::{feed, packet_sl, set_ok, set_port, set_routes, sm, switch};
use transport::mad::attr_id;
use transport::mad::method;
use transport::switch::{Egress, Switch, SwitchDrop};
use transport::wire::PacketRepr;

/// A UD SEND on `vl` at service level `sl` to `dlid`.
fn data(vl: u8, sl: u8, dlid: u16) -> Vec<u8> {
    packet_sl(vl, sl, dlid, 9, 0x22, b"sl2vl")
}

/// Ports 1..=3 Active, LID 2 by port 2, LID 3 by port 3.
fn fabric() -> Switch {
    let mut sw = switch(4, &[1, 2, 3]);
    set_routes(&mut sw, &[(2, 2), (3, 3)]);
    sw
}

fn table(sw: &mut Switch, in_port: u32, out_port: u32) -> [u8; 8] {
    let r = sm(
        sw,
        method::GET,
        attr_id::SL_TO_VL_TABLE,
        in_port << 8 | out_port,
        [0; 64],
    );
    assert_eq!(r.status, 0);
    r.data[..8].try_into().unwrap()
}

/// What leaves the switch for `pkt` arriving on `in_port`: (egress port, bytes).
fn forward(sw: &mut Switch, pkt: &[u8], in_port: u8) -> Option<(u8, Vec<u8>)> {
    let out = feed(sw, pkt, in_port);
    assert!(out.len() <= 1);
    let o = out.into_iter().next()?;
    let bytes = match o.packet {
        Egress::Same => pkt.to_vec(),
        Egress::New(b) => b.to_vec(),
    };
    Some((o.port, bytes))
}

#[test]
fn ad_09_switch_sl2vl_of_input_and_output_port_picks_the_vl_on_the_wire() {
    let mut sw = fabric();
    // Every table starts SL -> VL0, as an HCA port's does.
    assert_eq!(table(&mut sw, 1, 2), [0; 8]);
    // The SM maps SL n -> VL n % 8 from port 1 to port 2 (SL0 in the high
    // nibble of byte 0); the other pairs keep theirs.
    let mut d = [0u8; 64];
    d[..8].copy_from_slice(&[0x01, 0x23, 0x45, 0x67, 0x01, 0x23, 0x45, 0x67]);
    let r = set_ok(&mut sw, attr_id::SL_TO_VL_TABLE, 1 << 8 | 2, d);
    assert_eq!(&r.data[..8], &d[..8], "the response carries the table");
    assert_eq!(table(&mut sw, 1, 2), d[..8]);
    assert_eq!(table(&mut sw, 2, 1), [0; 8], "per (in, out): not (2, 1)");
    assert_eq!(table(&mut sw, 1, 3), [0; 8], "nor (1, 3)");

    // SL 5 from port 1 to port 2: VL 5 on the wire, LRH byte 0's high nibble;
    // only that byte and the VCRC differ, and both CRCs check.
    let pkt = data(0, 5, 2);
    let (port, b) = forward(&mut sw, &pkt, 1).expect("forwarded");
    assert_eq!(port, 2);
    assert_eq!(b[0] >> 4, 5);
    let n = pkt.len();
    assert_eq!(&b[1..n - 2], &pkt[1..n - 2]);
    assert_ne!(&b[n - 2..], &pkt[n - 2..], "the VCRC covers the VL");
    let p = PacketRepr::parse(&b).expect("VCRC and ICRC good");
    assert_eq!((p.lrh.vl, p.lrh.sl), (5, 5));
    // The same packet to port 3: table (1, 3) says VL0, as it came: the same
    // bytes, not copied.
    let out = feed(&mut sw, &data(0, 5, 3), 1);
    assert_eq!(out[0].packet, Egress::Same);
    // Arriving on VL 5 for port 3: back to VL0.
    let (_, b) = forward(&mut sw, &data(5, 5, 3), 1).unwrap();
    assert_eq!(PacketRepr::parse(&b).unwrap().lrh.vl, 0);

    // Port 2 operates VL0-1 only (OperationalVLs 2): SL 5 -> VL 5 is
    // discarded (IBA 7.6.6), SL 1 -> VL 1 goes.
    set_port(&mut sw, 2, |pi| pi.operational_vls = 2);
    let discards = sw.port_counters(2).unwrap().xmit_discards;
    assert!(forward(&mut sw, &data(0, 5, 2), 1).is_none());
    let (_, b) = forward(&mut sw, &data(0, 1, 2), 1).unwrap();
    assert_eq!(b[0] >> 4, 1);
    // An SL the SM maps to VL15 is discarded too.
    d[0] = 0xf1;
    set_ok(&mut sw, attr_id::SL_TO_VL_TABLE, 1 << 8 | 2, d);
    assert!(forward(&mut sw, &data(0, 0, 2), 1).is_none());
    let c = sw.counters().drop_count(SwitchDrop::EgressVlNotOperational);
    assert_eq!(c, 2);
    assert_eq!(sw.port_counters(2).unwrap().xmit_discards, discards + 2);
}
