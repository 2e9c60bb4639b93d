//! Automatic path migration (AD-10) on the bench: two nodes whose ports have
//! LMC 1, so each owns its base LID and base LID + 1 (AD-01); a QP pair whose
//! primary path uses the base LIDs and whose alternate path uses the second
//! ones (source path bits 1); a dead path (every packet to one DLID lost,
//! the rest sniffed); the migration state as the consumer queries it.

use super::{connect, ConnOpts, Net, Pair};
use transport::engine::{Limits, PortConfig};
use transport::verbs::{AddressVector, AttrMask, Event, MigState, QpAttr};
use transport::wire::PacketRepr;

/// Two nodes of base LIDs `lid_a` and `lid_b` (multiples of 2), LMC 1.
pub fn lmc_net(lid_a: u16, lid_b: u16, seed: u64, limits: Limits) -> Net {
    let port = |lid: u16| {
        let mut p = PortConfig::new(lid, 0x0002_c903_0000_0000 + u64::from(lid));
        p.lmc = 1;
        p
    };
    Net::with_ports(vec![port(lid_a), port(lid_b)], 0x40_0000, seed, limits)
}

/// The alternate path to the node of base LID `remote`: its second LID, from
/// this node's second LID; with migration state `mig`.
pub fn alt_attr(remote: u16, mig: MigState) -> QpAttr {
    QpAttr {
        alt_av: AddressVector {
            dlid: remote + 1,
            src_path_bits: 1,
            ..AddressVector::default()
        },
        alt_port_num: 1,
        alt_pkey_index: 0,
        alt_timeout: ConnOpts::default().timeout,
        path_mig_state: mig,
        ..QpAttr::default()
    }
}

/// RTS -> RTS loading the alternate path to `remote` and setting `mig`.
pub fn load_alt(net: &mut Net, node: usize, qpn: u32, remote: u16, mig: MigState) {
    modify_alt(net, node, qpn, &alt_attr(remote, mig));
}

/// RTS -> RTS arming (Rearm) the alternate path `av`.
pub fn arm_with(net: &mut Net, node: usize, qpn: u32, av: AddressVector) {
    let a = QpAttr {
        alt_av: av,
        ..alt_attr(0, MigState::Rearm)
    };
    modify_alt(net, node, qpn, &a);
}

fn modify_alt(net: &mut Net, node: usize, qpn: u32, a: &QpAttr) {
    let now = net.now;
    net.nodes[node]
        .engine
        .modify_qp(qpn, a, AttrMask::ALT_PATH | AttrMask::PATH_MIG_STATE, now)
        .expect("alt path");
}

/// A QP pair between nodes 0 and 1 (base LIDs `lid_a`, `lid_b`) whose ends
/// load their alternate paths with migration states `mig_a` and `mig_b`.
pub fn alt_pair(
    net: &mut Net,
    o: &ConnOpts,
    (lid_a, lid_b): (u16, u16),
    mig_a: MigState,
    mig_b: MigState,
) -> Pair {
    let p = connect(net, 0, 1, o);
    load_alt(net, 0, p.qa, lid_b, mig_a);
    load_alt(net, 1, p.qb, lid_a, mig_b);
    p
}

/// The migration state and the primary path's DLID of QP `qpn` of `node`.
pub fn mig_state(net: &Net, node: usize, qpn: u32) -> (MigState, u16) {
    let (_, a, _) = net.nodes[node].engine.query_qp(qpn).expect("query");
    (a.path_mig_state, a.av.dlid)
}

/// The asynchronous events `node` raised since the last call.
pub fn events(net: &mut Net, node: usize) -> Vec<Event> {
    std::iter::from_fn(|| net.nodes[node].engine.poll_event()).collect()
}

/// Every packet to `dlid` is lost from now on (a dead path); every packet is
/// sniffed (see [`wire`]).
pub fn kill_dlid(net: &mut Net, dlid: u16) {
    net.sniffed = Some(Vec::new());
    net.lose = Some(Box::new(move |b: &[u8]| {
        PacketRepr::parse(b).is_ok_and(|p| p.lrh.dlid == dlid)
    }));
}

/// (DLID, MigReq) of every packet sniffed since the last call.
pub fn wire(net: &mut Net) -> Vec<(u16, bool)> {
    net.sniffed
        .take()
        .unwrap_or_default()
        .iter()
        .filter_map(|b| PacketRepr::parse(b).ok())
        .map(|p| (p.lrh.dlid, p.transport.bth.mig_req))
        .collect()
}

/// Both ends of `p` migrated (17.2.8): Migrated, on the alternate paths
/// (the peers' second LIDs), each with exactly one path migrated event.
pub fn assert_both_migrated(net: &mut Net, p: &Pair, (lid_a, lid_b): (u16, u16)) {
    assert_eq!(mig_state(net, 0, p.qa), (MigState::Migrated, lid_b + 1));
    assert_eq!(mig_state(net, 1, p.qb), (MigState::Migrated, lid_a + 1));
    assert_eq!(events(net, 0), vec![Event::PathMigrated { qpn: p.qa }]);
    assert_eq!(events(net, 1), vec![Event::PathMigrated { qpn: p.qb }]);
}
