//! M_Key protection and the traps of the switch's SMA (issue 26 items 3 and 7;
//! AD-12, IBA 14.2.4; AD-09, IBA 14.2.5.1): port 0's PortInfo holds the
//! switch's M_Key, protect bits and lease. The SM on HCA A (LID 1, switch port 1)
//! programs them; a request with the wrong key is answered, hidden or dropped per
//! protect level, counts M_KeyViolations, starts the lease and sends trap 256 to
//! the SM. A link change sends trap 128. Assertions are on the packets the
//! switch puts on the wire.

mod switch_util;

use switch_util::{dr_path, packet, smp, smp_of, switch_config};
use transport::mad::attr::{notice_type, trap};
use transport::mad::sma::MAX_PENDING_TRAPS;
use transport::mad::{
    attr_id, method, BadMkeyDetails, NoticeRepr, PortInfoRepr, SmpRepr, SmpRoute, PERMISSIVE_LID,
};
use transport::switch::{Egress, Switch, SwitchDrop, SwitchOut, MAX_TRAP_SENDS};
use transport::verbs::Time;

const T0: Time = Time(1_000_000_000);
const SM_LID: u16 = 1;
const SW_LID: u16 = 2;
const KEY: u64 = 0x00c0_ffee_0000_0001;
const BAD: u64 = 0xbad;

/// A 3-port switch with LID 2, port 1 (to the SM's HCA, LID 1) up.
fn switch() -> Switch {
    let mut sw = Switch::new(&switch_config(3));
    sw.link_up(1);
    sw.set_static_lid(SW_LID);
    assert!(sw.set_static_route(SM_LID, 1));
    sw
}

/// Sends `req` LID-routed from the SM (LID 1) into port 1; the packets out.
fn send(sw: &mut Switch, req: &SmpRepr, now: Time) -> Vec<SwitchOut> {
    let mut out = vec![];
    sw.handle_packet(
        &packet(15, SW_LID, SM_LID, 0, &req.to_bytes()),
        1,
        now,
        &mut out,
    );
    out
}

/// The one SMP the switch sent back out of port 1, LID-routed to the SM.
fn reply(out: Vec<SwitchOut>) -> SmpRepr {
    assert_eq!(out.len(), 1, "one response");
    let SwitchOut {
        port: 1,
        packet: Egress::New(b),
    } = &out[0]
    else {
        panic!("not a new packet out of port 1: {:?}", out[0]);
    };
    let (lrh, smp) = smp_of(b);
    assert_eq!((lrh.vl, lrh.dlid, lrh.slid), (15, SM_LID, SW_LID));
    smp
}

fn port_info_req(m: u8, mkey: u64, pi: Option<&PortInfoRepr>) -> SmpRepr {
    let mut d = [0u8; 64];
    if let Some(pi) = pi {
        pi.emit(&mut d).unwrap();
    }
    SmpRepr {
        mkey,
        ..smp(m, attr_id::PORT_INFO, 0, SmpRoute::Lid, d)
    }
}

/// Port 0's PortInfo as a Get with the right key reads it.
fn port0(sw: &mut Switch, now: Time) -> PortInfoRepr {
    let r = reply(send(sw, &port_info_req(method::GET, KEY, None), now));
    assert_eq!(r.status, 0);
    PortInfoRepr::parse(&r.data).unwrap()
}

/// The SM programs M_Key `KEY` at `bits` with a lease of `lease` seconds, and
/// itself as the master SM (where trap 256 goes).
fn protect(sw: &mut Switch, bits: u8, lease: u16) -> PortInfoRepr {
    let mut pi = port0(sw, T0);
    pi.mkey = KEY;
    pi.mkey_protect_bits = bits;
    pi.mkey_lease_period = lease;
    pi.master_sm_lid = SM_LID;
    let r = reply(send(sw, &port_info_req(method::SET, 0, Some(&pi)), T0));
    assert_eq!(r.status, 0);
    pi
}

/// The M_Key field (bytes 0..8 of PortInfo) of a response.
fn mkey_of(r: &SmpRepr) -> u64 {
    u64::from_be_bytes(r.data[0..8].try_into().unwrap())
}

#[test]
fn ad_12_switch_mkey_level_1_get_hides_the_key_and_a_bad_set_gets_no_response() {
    let mut sw = switch();
    let pi = protect(&mut sw, 1, 0);
    // A Get with the wrong key is answered with PortInfo:M_Key read as 0.
    let r = reply(send(&mut sw, &port_info_req(method::GET, BAD, None), T0));
    assert_eq!((r.method, r.status), (method::GET_RESP, 0));
    assert_eq!(mkey_of(&r), 0, "M_Key hidden");
    assert_eq!(&r.data[16..18], &SW_LID.to_be_bytes(), "the LID is there");
    // The key reads with the key.
    let r = reply(send(&mut sw, &port_info_req(method::GET, KEY, None), T0));
    assert_eq!(mkey_of(&r), KEY);
    // A Set with the wrong key: nothing on the wire, nothing changed.
    let changed = PortInfoRepr { lid: 77, ..pi };
    let out = send(
        &mut sw,
        &port_info_req(method::SET, BAD, Some(&changed)),
        T0,
    );
    assert!(out.is_empty(), "no response: {out:?}");
    assert_eq!(sw.counters().drop_count(SwitchDrop::BadMkey), 1);
    assert_eq!(sw.port_counters(1).unwrap().vl15_dropped, 1);
    let now = port0(&mut sw, T0);
    assert_eq!(now.lid, SW_LID);
    assert_eq!(now.mkey_violations, 1);
    // With the key the Set goes through (its response already from LID 77).
    let out = send(
        &mut sw,
        &port_info_req(method::SET, KEY, Some(&changed)),
        T0,
    );
    let Egress::New(b) = &out[0].packet else {
        panic!("no response")
    };
    let (lrh, r) = smp_of(b);
    assert_eq!((lrh.slid, r.status), (77, 0));
    assert_eq!(sw.lid(), 77);
}

#[test]
fn ad_12_switch_mkey_level_0_get_reads_the_key_levels_2_and_3_drop_it() {
    let mut sw = switch();
    protect(&mut sw, 0, 0);
    let r = reply(send(&mut sw, &port_info_req(method::GET, BAD, None), T0));
    assert_eq!(mkey_of(&r), KEY, "level 0 hides nothing");
    for bits in [2, 3] {
        let mut sw = switch();
        protect(&mut sw, bits, 0);
        // Any attribute, not only PortInfo: the check is the SMA's.
        let req = SmpRepr {
            mkey: BAD,
            ..smp(method::GET, attr_id::NODE_INFO, 0, SmpRoute::Lid, [0; 64])
        };
        assert!(send(&mut sw, &req, T0).is_empty(), "level {bits}");
        assert_eq!(sw.counters().drop_count(SwitchDrop::BadMkey), 1);
        let ok = SmpRepr { mkey: KEY, ..req };
        assert_eq!(reply(send(&mut sw, &ok, T0)).status, 0);
    }
}

#[test]
fn ad_12_switch_bad_mkey_sends_trap_256_until_the_sm_represses_it() {
    let mut sw = switch();
    let pi = protect(&mut sw, 1, 0);
    let mut out = vec![];
    sw.poll_transmit(T0, &mut out);
    assert!(out.is_empty(), "no trap while every request had the key");
    let bad = port_info_req(method::SET, BAD, Some(&pi));
    assert!(send(&mut sw, &bad, T0).is_empty());
    sw.poll_transmit(T0, &mut out);
    let trap = reply(std::mem::take(&mut out));
    assert_eq!((trap.method, trap.attr_id), (method::TRAP, attr_id::NOTICE));
    assert_eq!(trap.mkey, KEY, "a trap carries the port's M_Key");
    let n = NoticeRepr::parse(&trap.data).unwrap();
    assert!(n.is_generic);
    assert_eq!(
        (n.notice_type, n.trap_number, n.issuer_lid),
        (notice_type::SECURITY, trap::BAD_MKEY, SW_LID)
    );
    assert_eq!(n.producer_type, 2, "a switch");
    let d = BadMkeyDetails::parse(&n.data_details);
    assert_eq!(
        (d.lid, d.method, d.attr_id, d.mkey, d.dr_notice),
        (SW_LID, method::SET, attr_id::PORT_INFO, BAD, false)
    );
    // Not again within the resend interval; again after it.
    sw.poll_transmit(T0.plus_ns(1), &mut out);
    assert!(out.is_empty());
    let later = sw.poll_timeout().expect("a resend is due");
    sw.poll_transmit(later, &mut out);
    assert_eq!(reply(std::mem::take(&mut out)).tid, trap.tid);
    // A TrapRepress with the wrong key is itself refused (and counted).
    let repress = SmpRepr {
        method: method::TRAP_REPRESS,
        mkey: BAD,
        ..trap
    };
    assert!(send(&mut sw, &repress, later).is_empty());
    assert_eq!(sw.pending_traps(), 2, "and raised another trap 256");
    // With the key it stops the trap it names: no response, no more resends of it.
    let repress = SmpRepr {
        mkey: KEY,
        ..repress
    };
    assert!(send(&mut sw, &repress, later).is_empty());
    assert_eq!(sw.counters().traps_repressed, 1);
    assert_eq!(sw.pending_traps(), 1);
    let unmatched = SmpRepr {
        tid: 0x4242,
        ..repress
    };
    assert!(send(&mut sw, &unmatched, later).is_empty());
    assert_eq!(sw.counters().drop_count(SwitchDrop::UnmatchedRepress), 1);
}

#[test]
fn ad_12_switch_bad_mkey_directed_route_trap_carries_the_return_path() {
    let mut sw = switch();
    protect(&mut sw, 1, 0);
    // A directed-route Set from an SM one hop away (initial path [_, 1]) arrives
    // on port 1 with the hop pointer at 1.
    let mut req = smp(
        method::SET,
        attr_id::PORT_INFO,
        0,
        SmpRoute::Directed(dr_path(&[1])),
        [0; 64],
    );
    req.mkey = BAD;
    if let SmpRoute::Directed(d) = &mut req.route {
        d.hop_ptr = 1;
    }
    let mut out = vec![];
    sw.handle_packet(
        &packet(15, PERMISSIVE_LID, PERMISSIVE_LID, 0, &req.to_bytes()),
        1,
        T0,
        &mut out,
    );
    assert!(out.is_empty(), "no response: {out:?}");
    sw.poll_transmit(T0, &mut out);
    let trap = reply(out);
    let d = BadMkeyDetails::parse(&NoticeRepr::parse(&trap.data).unwrap().data_details);
    assert!(d.dr_notice);
    assert_eq!(d.dr_hop_cnt, 1);
    assert_eq!(d.dr_return_path[1], 1, "the switch's ingress port");
}

#[test]
fn ad_12_switch_mkey_lease_expiry_clears_protection() {
    let mut sw = switch();
    protect(&mut sw, 2, 3);
    assert_eq!(sw.poll_timeout(), None);
    let bad_get = port_info_req(method::GET, BAD, None);
    assert!(send(&mut sw, &bad_get, T0).is_empty());
    let due = T0.plus_ns(3_000_000_000);
    assert!(sw.poll_timeout().is_some_and(|t| t <= due));
    // A failure before the end does not restart the lease.
    assert!(send(&mut sw, &bad_get, T0.plus_ns(2_000_000_000)).is_empty());
    assert!(send(&mut sw, &bad_get, Time(due.0 - 1)).is_empty());
    assert_eq!(sw.counters().lease_expiries, 0);
    let mut out = vec![];
    sw.poll_transmit(due, &mut out);
    assert_eq!(sw.counters().lease_expiries, 1);
    // Protect bits 0 now: a Get with the wrong key is answered, the key shown.
    let r = reply(send(&mut sw, &bad_get, due));
    assert_eq!(mkey_of(&r), KEY);
    assert_eq!(r.data[34] >> 6, 0, "M_KeyProtectBits cleared");
}

#[test]
fn ad_12_switch_a_matching_mkey_stops_the_lease() {
    let mut sw = switch();
    protect(&mut sw, 2, 3);
    let bad_get = port_info_req(method::GET, BAD, None);
    assert!(send(&mut sw, &bad_get, T0).is_empty());
    port0(&mut sw, T0.plus_ns(1_000_000_000));
    let late = T0.plus_ns(10_000_000_000);
    let mut out = vec![];
    sw.poll_transmit(late, &mut out);
    assert_eq!(sw.counters().lease_expiries, 0);
    assert!(send(&mut sw, &bad_get, late).is_empty(), "still protected");
}

#[test]
fn ad_09_switch_link_change_sends_trap_128_until_the_sm_represses_it() {
    let mut sw = switch();
    // No SM known yet: a link change queues nothing (counted).
    let before = sw.counters().traps_no_sm;
    sw.link_up(2);
    assert_eq!(sw.pending_traps(), 0);
    assert_eq!(sw.counters().traps_no_sm, before + 1);
    // The SM sets itself as master SM (no M_Key: protect level 0, key 0).
    let mut pi = port0(&mut sw, T0);
    pi.master_sm_lid = SM_LID;
    pi.mkey = 0;
    assert_eq!(
        reply(send(&mut sw, &port_info_req(method::SET, 0, Some(&pi)), T0)).status,
        0
    );
    sw.link_down(2);
    let mut out = vec![];
    sw.poll_transmit(T0, &mut out);
    let trap = reply(std::mem::take(&mut out));
    assert_eq!((trap.method, trap.attr_id), (method::TRAP, attr_id::NOTICE));
    let n = NoticeRepr::parse(&trap.data).unwrap();
    assert!(n.is_generic);
    assert_eq!(
        (n.notice_type, n.producer_type, n.trap_number, n.issuer_lid),
        (notice_type::URGENT, 2, trap::LINK_STATE_CHANGE, SW_LID)
    );
    assert_eq!(&n.data_details[0..2], &SW_LID.to_be_bytes(), "LIDADDR");
    // SwitchInfo:PortStateChange is set too.
    assert!(sw.switch_info().port_state_change);
    // Resent until repressed; the TrapRepress gets no response.
    let later = sw.poll_timeout().unwrap();
    sw.poll_transmit(later, &mut out);
    assert_eq!(reply(std::mem::take(&mut out)).tid, trap.tid);
    let repress = SmpRepr {
        method: method::TRAP_REPRESS,
        ..trap
    };
    assert!(send(&mut sw, &repress, later).is_empty());
    assert_eq!(sw.pending_traps(), 0);
    assert_eq!(sw.counters().traps_repressed, 1);
    sw.poll_transmit(T0.plus_ns(100_000_000_000), &mut out);
    assert!(out.is_empty(), "no more resends");
    assert_eq!(sw.poll_timeout(), None);
}

/// The switch's traps share one bounded queue (issue 26 item 7): trap 256,
/// like trap 128, is given up after `MAX_TRAP_SENDS` sends the SM never
/// represses (counted), and a bad key past `MAX_PENDING_TRAPS` pending queues
/// nothing (counted) while the queue holds.
#[test]
fn ad_12_switch_trap_256_is_given_up_after_max_sends_and_the_queue_is_bounded() {
    let mut sw = switch();
    let pi = protect(&mut sw, 1, 0);
    let bad = port_info_req(method::SET, BAD, Some(&pi));
    assert!(send(&mut sw, &bad, T0).is_empty());
    let mut now = T0;
    let mut sends = 0;
    while let Some(t) = sw.poll_timeout() {
        now = Time(now.0.max(t.0));
        let mut out = vec![];
        sw.poll_transmit(now, &mut out);
        for o in out {
            let Egress::New(b) = &o.packet else {
                panic!("a trap is a new packet")
            };
            let (_, smp) = smp_of(b);
            assert_eq!(smp.method, method::TRAP);
            sends += 1;
        }
        assert!(sends <= MAX_TRAP_SENDS, "bounded");
    }
    assert_eq!(sends, MAX_TRAP_SENDS);
    let c = sw.counters();
    assert_eq!(
        (c.traps_sent, c.traps_abandoned, c.traps_repressed),
        (u64::from(MAX_TRAP_SENDS), 1, 0)
    );
    assert_eq!(sw.pending_traps(), 0);

    for _ in 0..=MAX_PENDING_TRAPS {
        assert!(send(&mut sw, &bad, now).is_empty());
    }
    assert_eq!(sw.pending_traps(), MAX_PENDING_TRAPS);
    assert_eq!(sw.counters().traps_queue_full, 1);
    // A link change finds the queue full too (an SM is known: not no_sm).
    let no_sm = sw.counters().traps_no_sm;
    sw.link_up(2);
    assert_eq!(sw.counters().traps_queue_full, 2);
    assert_eq!(sw.counters().traps_no_sm, no_sm);
}
