//! A switch port the SM disables, and trap 128 (issue 26; AD-09): a SubnSet(PortInfo)
//! with PortPhysicalState Disabled (what `ibportstate <lid> <port> disable` sends)
//! takes the port's link down: the port is Down, what arrives on it is dropped
//! and counted, nothing goes out of it, the link cannot train until the SM sets
//! Polling (IBA 14.2.5.6). A link state change (Down -> Init, to Down) sets
//! SwitchInfo:PortStateChange (IBA 14.2.5.4) and sends trap 128 to the SM at port
//! 0's MasterSMLID (IBA 14.2.5.1), resent until the SM's TrapRepress, at most one
//! outstanding. Assertions are on the bytes of the SMPs and packets.

mod switch_util;

use switch_util::{
    feed, packet, set_port, set_routes, set_switch_info, smp, smp_of, switch, SW_LID,
};
use transport::mad::attr::node_type;
use transport::mad::portinfo::{phys_state, port_state};
use transport::mad::{attr_id, method, NoticeRepr, SmpRoute};
use transport::switch::{Egress, Switch, SwitchDrop, SwitchOut, MAX_TRAP_SENDS};
use transport::verbs::Time;

const SM_LID: u16 = 5;
const SM_SL: u8 = 3;
/// OpenSM's default SubnetTimeOut: 4.096 us x 2^18, about 1.07 s.
const SUBNET_TIMEOUT: u8 = 18;
const INTERVAL: u64 = 4096 << 18;

fn clear_port_state_change(sw: &mut Switch) {
    set_switch_info(sw, |si| si.port_state_change = true);
    assert!(!sw.switch_info().port_state_change);
}

fn state(sw: &Switch, p: u8) -> (u8, u8) {
    let pi = sw.port(p).unwrap().info;
    (pi.port_state, pi.port_physical_state)
}

#[test]
fn ad_09_switch_port_the_sm_disables_has_no_link_until_it_sets_polling() {
    let mut sw = switch(3, &[1, 2]);
    set_routes(&mut sw, &[(2, 2), (3, 1)]);
    let to_2 = packet(0, 2, 3, 0x22, b"to port 2");
    assert_eq!(feed(&mut sw, &to_2, 1).len(), 1, "routed while Active");
    clear_port_state_change(&mut sw);

    // ibportstate 1 2 disable: the SM's SubnSet(PortInfo:2) PortPhysicalState 3.
    set_port(&mut sw, 2, |pi| {
        pi.port_physical_state = phys_state::DISABLED
    });
    assert_eq!(state(&sw, 2), (port_state::DOWN, phys_state::DISABLED));
    assert!(sw.port_disabled(2));
    assert!(!sw.port_disabled(1) && !sw.port_disabled(0));
    assert!(sw.switch_info().port_state_change, "Active -> Down");

    // What the partner sent before it noticed: dropped, a data packet or an SMP.
    let before = *sw.port_counters(2).unwrap();
    assert!(feed(&mut sw, &packet(0, 3, 2, 0x22, b"from 2"), 2).is_empty());
    let dr = smp(method::GET, attr_id::NODE_INFO, 0, SmpRoute::Lid, [0; 64]);
    let smp_pkt = packet(15, SW_LID, 2, 0, &dr.to_bytes());
    assert!(feed(&mut sw, &smp_pkt, 2).is_empty());
    assert_eq!(sw.counters().drop_count(SwitchDrop::PortDisabled), 2);
    assert_eq!(*sw.port_counters(2).unwrap(), before, "nothing received");
    // Nothing goes out of it.
    assert!(feed(&mut sw, &to_2, 1).is_empty());
    assert_eq!(sw.counters().drop_count(SwitchDrop::EgressDown), 1);
    // The PHY is off: the link cannot train.
    sw.link_up(2);
    assert_eq!(state(&sw, 2), (port_state::DOWN, phys_state::DISABLED));

    // ibportstate 1 2 enable: Polling. Down until the link trains, then Init
    // (PortStateChange again), and the SM activates it.
    clear_port_state_change(&mut sw);
    set_port(&mut sw, 2, |pi| {
        pi.port_physical_state = phys_state::POLLING
    });
    assert_eq!(state(&sw, 2), (port_state::DOWN, phys_state::POLLING));
    assert!(!sw.port_disabled(2));
    assert!(!sw.switch_info().port_state_change, "still Down");
    sw.link_up(2);
    assert_eq!(state(&sw, 2), (port_state::INIT, phys_state::LINK_UP));
    assert!(sw.switch_info().port_state_change, "Down -> Init");
    for st in [port_state::ARMED, port_state::ACTIVE] {
        set_port(&mut sw, 2, |pi| pi.port_state = st);
    }
    let out = feed(&mut sw, &to_2, 1);
    assert_eq!(
        out,
        vec![SwitchOut {
            port: 2,
            packet: Egress::Same
        }]
    );
    assert_eq!(sw.counters().drop_count(SwitchDrop::PortDisabled), 2);
}

/// The switch with LID 1, its SM at LID 5 through port 1.
fn switch_with_sm() -> Switch {
    let mut sw = switch(3, &[1, 2]);
    set_routes(&mut sw, &[(SM_LID, 1)]);
    // The link changes before the SM took the switch over (ports 1 and 2
    // up): nobody to tell, each counted, nothing queued.
    let mut out = vec![];
    sw.poll_transmit(Time(0), &mut out);
    assert!(out.is_empty());
    assert_eq!(sw.counters().traps_no_sm, 2);
    assert_eq!(sw.pending_traps(), 0);
    set_port(&mut sw, 0, |pi| {
        pi.master_sm_lid = SM_LID;
        pi.master_sm_sl = SM_SL;
        pi.subnet_timeout = SUBNET_TIMEOUT;
    });
    assert_eq!(sw.poll_timeout(), None, "no change since");
    sw
}

/// A trap as sent: egress port, LRH (VL, SL, DLID, SLID), TID, Notice.
type Trap = (u8, (u8, u8, u16, u16), u64, NoticeRepr);

/// What `poll_transmit` at `now` sends.
fn trap_at(sw: &mut Switch, now: Time) -> Option<Trap> {
    let mut out = vec![];
    sw.poll_transmit(now, &mut out);
    assert!(out.len() <= 1, "one trap outstanding at most");
    let o = out.pop()?;
    let Egress::New(b) = &o.packet else {
        panic!("a trap is a new packet")
    };
    let (lrh, smp) = smp_of(b);
    assert_eq!((smp.method, smp.attr_id), (method::TRAP, attr_id::NOTICE));
    // The Notice on the wire (IBA 13.4.8.2): IsGeneric|Type, ProducerType,
    // TrapNumber, IssuerLID; trap 128's details start with the switch's LID.
    assert_eq!(&smp.data[..8], &[0x81, 0, 0, 2, 0, 128, 0, SW_LID as u8]);
    assert_eq!(&smp.data[10..12], &SW_LID.to_be_bytes());
    let n = NoticeRepr::parse(&smp.data).unwrap();
    Some((o.port, (lrh.vl, lrh.sl, lrh.dlid, lrh.slid), smp.tid, n))
}

fn repress(sw: &mut Switch, tid: u64) -> Vec<SwitchOut> {
    let mut r = smp(
        method::TRAP_REPRESS,
        attr_id::NOTICE,
        0,
        SmpRoute::Lid,
        [0; 64],
    );
    r.tid = tid;
    feed(sw, &packet(15, SW_LID, SM_LID, 0, &r.to_bytes()), 1)
}

#[test]
fn ad_09_switch_sends_trap_128_to_its_sm_on_a_link_change_until_repressed() {
    let mut sw = switch_with_sm();
    let t1 = Time(10_000_000_000);
    sw.link_down(2);
    assert_eq!(sw.poll_timeout(), Some(Time(0)), "due at once");
    let (port, lrh, tid, n) = trap_at(&mut sw, t1).expect("trap 128");
    assert_eq!(port, 1, "by the LFT toward the SM");
    assert_eq!(lrh, (15, SM_SL, SM_LID, SW_LID));
    assert_eq!(
        (n.trap_number, n.producer_type, n.issuer_lid),
        (128, u32::from(node_type::SWITCH), SW_LID)
    );
    // Resent every SubnetTimeOut with the same TID until repressed.
    assert_eq!(sw.poll_timeout(), Some(t1.plus_ns(INTERVAL)));
    assert!(trap_at(&mut sw, t1.plus_ns(INTERVAL - 1)).is_none());
    let t2 = t1.plus_ns(INTERVAL);
    assert_eq!(trap_at(&mut sw, t2).map(|t| t.2), Some(tid));
    // Another change while it is outstanding: no second trap now.
    sw.link_up(2);
    assert!(trap_at(&mut sw, t2).is_none());
    assert_eq!(sw.counters().traps_sent, 2);
    assert_eq!(sw.pending_traps(), 1, "one trap 128 outstanding");
    // A TrapRepress naming another TID: counted, the trap stays.
    assert!(repress(&mut sw, tid + 1).is_empty());
    assert_eq!(sw.counters().drop_count(SwitchDrop::UnmatchedRepress), 1);
    assert_eq!(sw.pending_traps(), 1);
    // The SM's TrapRepress: no response, the trap stops.
    assert!(repress(&mut sw, tid).is_empty());
    assert_eq!(sw.counters().traps_repressed, 1);
    // The change made meanwhile goes out now, with a new TID.
    let (_, _, tid2, _) = trap_at(&mut sw, t2).expect("the later change");
    assert_ne!(tid2, tid);
    assert!(repress(&mut sw, tid2).is_empty());
    assert_eq!(sw.poll_timeout(), None);
    // A Disabled set by the SM is a link change too.
    set_port(&mut sw, 2, |pi| {
        pi.port_physical_state = phys_state::DISABLED
    });
    assert!(trap_at(&mut sw, t2).is_some());
}

#[test]
fn ad_09_switch_gives_up_an_unrepressed_trap_after_max_sends() {
    let mut sw = switch_with_sm();
    sw.link_down(2);
    let mut now = Time(10_000_000_000);
    let mut sends = 0;
    while let Some(t) = sw.poll_timeout() {
        now = Time(now.0.max(t.0));
        if trap_at(&mut sw, now).is_some() {
            sends += 1;
        }
        assert!(sends <= MAX_TRAP_SENDS, "bounded");
    }
    assert_eq!(sends, MAX_TRAP_SENDS);
    let c = sw.counters();
    assert_eq!(
        (c.traps_sent, c.traps_abandoned, c.traps_repressed),
        (8, 1, 0)
    );
    assert_eq!(sw.pending_traps(), 0);
}

#[test]
fn ad_09_switch_a_change_during_a_given_up_trap_128_goes_out_after_it() {
    let mut sw = switch_with_sm();
    sw.link_down(2);
    let mut now = Time(10_000_000_000);
    let (_, _, tid, _) = trap_at(&mut sw, now).expect("trap 128");
    // The link comes back while the first is unanswered: no second trap 128.
    sw.link_up(2);
    assert_eq!(sw.pending_traps(), 1);
    let mut tids = vec![];
    // Bounded: a queue that never gives up fails here rather than spinning.
    for _ in 0..2 * MAX_TRAP_SENDS {
        if sw.counters().traps_abandoned > 0 {
            break;
        }
        now = sw.poll_timeout().expect("a resend or the give-up is due");
        if let Some(t) = trap_at(&mut sw, now) {
            tids.push(t.2);
        }
    }
    // Resent to the bound; the round that gives it up sends the change made
    // meanwhile at once, with a new TID.
    let tid2 = tids.pop().expect("the later change");
    assert_eq!(tids, vec![tid; MAX_TRAP_SENDS as usize - 1], "resends");
    assert_ne!(tid2, tid);
    assert_eq!(sw.pending_traps(), 1);
    assert!(repress(&mut sw, tid2).is_empty());
    assert_eq!(sw.pending_traps(), 0);
    let c = sw.counters();
    assert_eq!(
        (c.traps_sent, c.traps_abandoned, c.traps_repressed),
        (u64::from(MAX_TRAP_SENDS) + 1, 1, 1)
    );
}
