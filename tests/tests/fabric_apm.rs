//! Failures in a generated fat tree (issue 27 item 5): automatic path
//! migration (AD-10) over two spines' disjoint paths, and a killed HCA
//! noticed by its leaf.
//!
//! `vhca topology fat-tree --lmc 1` with 2 leaves, 2 spines and 2 HCAs per
//! leaf: every HCA owns LIDs base and base + 1, and the static LFTs send base
//! LIDs through spine 0 and base + 1 through spine 1, both ways
//! (`Cabling::static_lft`). RC connections between HCAs on different leaves
//! have their primary path on one spine and their alternate, armed, on the
//! other. Spine 0's process is killed: the connections whose primary path
//! crossed it migrate to the alternate at their second ACK timeout (the
//! engine's `apm_timeouts`, AD-10), with nothing lost, and both ends get the
//! path migrated event; those whose primary crossed spine 1 see nothing.

use std::time::{Duration, Instant};

use serde_json::Value;
use vhca_tests::abi::cmd::QpAttr;
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::cqe::EqeType;
use vhca_tests::abi::verbs::qp_attr_mask as m;
use vhca_tests::fat_tree::fat_tree;
use vhca_tests::fixture::{alt_path, Node};
use vhca_tests::hca::QpH;
use vhca_tests::switch_proc::{rc_pair, write_then_send, SwitchProc};
use vhca_tests::Options;

const LEAVES: usize = 2;
const SPINES: usize = 2;
const HOSTS: usize = 2;
const NODES: usize = LEAVES * HOSTS;
const T: Duration = Duration::from_secs(30);
/// The switches' keepalive silence before a port is Down.
const SILENCE: [&str; 2] = ["--peer-silence", "500ms"];

/// Path migration states (QUERY_QP's `path_mig_state`).
const MIGRATED: u8 = 0;
const REARM: u8 = 1;
const ARMED: u8 = 2;

fn mig(state: u8) -> QpAttr {
    QpAttr {
        path_mig_state: state,
        ..QpAttr::default()
    }
}

/// Loads QP `q`'s alternate path to `dlid` from the port's second LID and
/// arms it, with the primary path's patient ACK timeout (`rc_pair`'s 17:
/// about 0.5 s) so that only the dead spine makes it time out.
fn arm_alt(n: &mut Node, q: QpH, dlid: u16) {
    let mut alt = alt_path(dlid);
    alt.timeout = 17;
    n.hca
        .modify_qp_alt(q, m::ALT_PATH | m::PATH_MIG_STATE, &mig(ARMED), &alt)
        .expect("load and arm the alternate path");
}

/// QUERY_QP of `q` on `n`: (path migration state, primary DLID, alternate DLID).
fn paths(n: &mut Node, q: QpH) -> (u8, u16, u16) {
    let s = n.hca.query_qp(q).unwrap();
    (
        s.attr.path_mig_state,
        s.attr.ah_attr.dlid,
        s.alt.ah_attr.dlid,
    )
}

fn port_counter(n: &mut Node, name: &str) -> u64 {
    n.hca
        .counter(CounterSet::Port, name)
        .unwrap()
        .unwrap_or_else(|| panic!("no port counter {name}"))
}

fn port(c: &Value, p: u64) -> &Value {
    c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["port"] == p)
        .unwrap_or_else(|| panic!("no port {p}: {c}"))
}

/// Waits until switch `sw`'s counters file shows `what` (`ok`); the counters
/// then.
fn wait_for(sw: &mut SwitchProc, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + T;
    loop {
        let c = sw.counters();
        if ok(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "never {what}: {c}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until switch `sw`'s port `p` is Down; its counters then.
fn wait_down(sw: &mut SwitchProc, p: u64) -> Value {
    wait_for(sw, &format!("port {p} Down"), |c| {
        port(c, p)["state"] == "Down"
    })
}

#[test]
fn ad_10_a_dead_spine_migrates_its_connections_to_the_other_spine_within_two_ack_timeouts() {
    let (mut v, mut switches) = fat_tree(
        (LEAVES, SPINES, HOSTS),
        &["--lmc", "1"],
        Options::default(),
        &SILENCE,
    );
    let mut spines = switches.split_off(LEAVES);
    let mut leaves = switches;
    let mut hcas: Vec<Node> = (0..NODES).map(|i| Node::connect(&v, i)).collect();
    // n0, n1 on leaf0 and n2, n3 on leaf1; n_k's LIDs from (k + 1) * 2.
    let lid = |k: usize| (k as u16 + 1) * 2;
    for (k, n) in hcas.iter_mut().enumerate() {
        assert_eq!(n.lid(), lid(k), "n{k}");
    }
    // Connections (requester, responder): primary on the base LIDs (spine 0)
    // for the first two, on base + 1 (spine 1) for the last two; each
    // alternate path on the other LIDs, armed.
    let on_spine0 = [(0, 2), (1, 3)];
    let on_spine1 = [(0, 3), (1, 2)];
    let mut qps: Vec<((usize, QpH), (usize, QpH))> = Vec::new();
    for &(i, j) in on_spine0.iter().chain(&on_spine1) {
        let (lo, hi) = hcas.split_at_mut(j);
        let (na, nb) = (&mut lo[i], &mut hi[0]);
        let (qa, qb) = rc_pair(na, nb);
        arm_alt(na, qa, lid(j) + 1);
        arm_alt(nb, qb, lid(i) + 1);
        if on_spine1.contains(&(i, j)) {
            // The consumers move these to base + 1 and re-arm the way back
            // (17.2.8: Migrated, then Rearm with the old primary as the
            // alternate).
            for (n, q) in [(&mut *na, qa), (&mut *nb, qb)] {
                n.hca
                    .modify_qp(q, m::PATH_MIG_STATE, &mig(MIGRATED))
                    .unwrap();
                n.hca.modify_qp(q, m::PATH_MIG_STATE, &mig(REARM)).unwrap();
            }
            assert_eq!(paths(na, qa), (ARMED, lid(j) + 1, lid(j)));
            assert_eq!(paths(nb, qb), (ARMED, lid(i) + 1, lid(i)));
        } else {
            assert_eq!(paths(na, qa), (ARMED, lid(j), lid(j) + 1));
            assert_eq!(paths(nb, qb), (ARMED, lid(i), lid(i) + 1));
        }
        qps.push(((i, qa), (j, qb)));
    }
    let exchange = |hcas: &mut Vec<Node>, seed: u64, what: &str| {
        for (k, &((i, qa), (j, qb))) in qps.iter().enumerate() {
            let (lo, hi) = hcas.split_at_mut(j);
            let seed = seed + 2 * k as u64;
            let what = format!("{what}: n{i} -> n{j}");
            write_then_send(&mut lo[i], &mut hi[0], (qa, qb), 256 << 10, seed, &what);
        }
    };
    exchange(&mut hcas, 0x5100, "both spines up");
    // Both spines carried traffic (their counters files, once rewritten).
    for s in &mut spines {
        wait_for(s, "packets in on both ports", |c| {
            [1, 2].iter().all(|&p| {
                port(c, p)["counters"]["rcv_packets"]
                    .as_u64()
                    .is_some_and(|n| n > 0)
            })
        });
    }
    let before: Vec<(u64, u64)> = hcas
        .iter_mut()
        .map(|n| {
            (
                port_counter(n, "timeouts"),
                port_counter(n, "path_migrations"),
            )
        })
        .collect();
    // Each HCA has one spine-1 connection its consumer migrated.
    assert!(before.iter().all(|&(_, m)| m == 1), "{before:?}");

    // Spine 0 dies (SIGKILL: no goodbye on any cable).
    drop(spines.remove(0));
    exchange(&mut hcas, 0x5200, "spine0 dead");
    // Each end of each spine-0 connection migrated once, with the event; the
    // requester after at most 2 ACK timeouts (AD-10: `apm_timeouts`), not the
    // 8 of its retry count.
    for &((i, qa), (j, qb)) in &qps[..2] {
        for (k, q, peer) in [(i, qa, j), (j, qb, i)] {
            let e = hcas[k]
                .hca
                .wait_async_event(T, |e| e.kind == EqeType::PathMig.raw())
                .unwrap_or_else(|| panic!("no path migrated event at n{k}"));
            assert_eq!(e.object, q.qpn, "n{k}");
            assert_eq!(
                paths(&mut hcas[k], q),
                (MIGRATED, lid(peer) + 1, lid(peer)),
                "n{k}"
            );
        }
    }
    // The spine-1 connections are undisturbed: still Armed on base + 1.
    for &((i, qa), (j, qb)) in &qps[2..] {
        assert_eq!(paths(&mut hcas[i], qa), (ARMED, lid(j) + 1, lid(j)));
        assert_eq!(paths(&mut hcas[j], qb), (ARMED, lid(i) + 1, lid(i)));
    }
    for (k, n) in hcas.iter_mut().enumerate() {
        let timeouts = port_counter(n, "timeouts") - before[k].0;
        let migrations = port_counter(n, "path_migrations") - before[k].1;
        assert_eq!(migrations, 1, "n{k}: one spine-0 connection each");
        // n0 and n1 requested on a spine-0 connection; n2 and n3 answered
        // and followed the MigReq without a timeout of their own.
        let most = if k < 2 { 2 } else { 0 };
        assert!(
            timeouts <= most && (k >= 2 || timeouts > 0),
            "n{k}: {timeouts} ACK timeouts before and after the migration"
        );
    }
    // A third round on the paths that are left, byte-exact.
    exchange(&mut hcas, 0x5300, "after the migration");

    // An HCA killed: its leaf's port goes Down, and the leaf raises trap 128
    // (AD-09) for it; static mode has no SM to send it to, so it is counted
    // as such. (The kill of spine 0 took leaf1's port 3 down first.)
    let c = wait_down(&mut leaves[1], 3);
    let traps = c["traps"]["no_sm"].as_u64().unwrap();
    let n3 = hcas.pop();
    drop(n3);
    v.kill(3);
    let c = wait_down(&mut leaves[1], 2);
    let after = c["traps"]["no_sm"].as_u64().unwrap();
    assert!(after > traps, "no trap 128 for leaf1's port 2: {c}");
    assert_eq!(port(&c, 1)["state"], "Active", "{c}");
}
