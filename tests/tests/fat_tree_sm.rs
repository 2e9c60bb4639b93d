//! A fat tree brought up by a subnet manager (issue 27 "Done when", first
//! bullet; AD-09): `vhca topology fat-tree --subnet sm` (4 leaves of 4 HCAs,
//! 2 spines: 16 `vhca` HCAs and 6 `vhca switch` processes), every port
//! waiting in Init, and the test driver's mini SM (`vhca_tests::mini_sm`) on
//! node 0's QP0 sweeping it by directed route: LIDs, min-hop LFTs, a
//! multicast tree, every port Active. Then what the SM set is what the
//! fabric does: the ports read Active (QUERY_PORT, the switches' SMAs), the
//! LFTs read back as computed, RC between every two HCAs on different leaves
//! is byte-exact, a UD multicast reaches exactly the group (the switch
//! counters show nothing went down a port off the tree), and no switch
//! dropped a packet. A switch port disabled through its SMA (`ibportstate
//! disable`) brings trap 128 from both ends of the cable to the SM (an SMP
//! through it is an error naming its path after bounded tries), the SM
//! routes around the cable, and RC on a pair whose path crossed it carries
//! on byte-exact.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use transport::mad::portinfo::port_state;
use transport::mad::switch_attr::LFT_NO_PORT;
use transport::mad::{attr_id, method};
use vhca_tests::abi::cqe::Cqe;
use vhca_tests::abi::verbs::{PortState, QpType, WcOpcode};
use vhca_tests::fat_tree::{port_counter, FatTree, Shape};
use vhca_tests::fixture::{assert_success, Node};
use vhca_tests::mini_sm::{Dest, MiniSm};
use vhca_tests::switch_proc::{rc_pair, write_checked, write_then_send, SwitchProc};
use vhca_tests::util::{assert_bytes, pattern};
use vhca_tests::verbs::mcast_dest;
use vhca_tests::{ConnOpts, Layout, QpH, RecvWr, SendWr};

const SHAPE: Shape = Shape {
    leaves: 4,
    spines: 2,
    hosts: 4,
};
const T: Duration = Duration::from_secs(30);
/// The re-route test's switches: a port whose partner is silent this long
/// is Down (5 s by default), so that the far end of a disabled cable goes
/// Down (and traps) sooner; not so short that a loaded host flaps links.
const SILENCE: &str = "2500ms";
const MLID: u16 = 0xc001;
const MGID: [u8; 16] = [
    0xff, 0x12, 0x40, 0x1b, 0, 0, 0, 0, 0, 0, 0, 0, 0xca, 0xfe, 0, 27,
];
/// The group: n1 (leaf 0), n6 (leaf 1), n11 (leaf 2); leaf 3 has none.
const MEMBERS: [usize; 3] = [1, 6, 11];
/// Not in the group, with a QP attached to its MGID all the same: n2 on
/// the sender's leaf, n13 on leaf 3.
const STRANGERS: [usize; 2] = [2, 13];
const GRH: usize = 40;
/// The SL the SM tells every port to reach it on.
const SM_SL: u8 = 1;

/// One fat tree at a time: each is 22 processes on a 2-core host.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

struct Fabric {
    tree: FatTree,
    hcas: Vec<Node>,
    sm: MiniSm,
}

impl Fabric {
    /// The switches by name, as the SM found them (node indices).
    fn switch_index(&self, leaf: Option<usize>, spine: Option<usize>) -> usize {
        // A leaf's LID-port 0 PortInfo says nothing of its name: find it by
        // the HCAs cabled to it (leaf i holds nodes i*hosts..) or, for a
        // spine, by the leaf port it is cabled to.
        let s = &self.sm.subnet;
        if let Some(i) = leaf {
            let ca = s.by_lid(self.hcas[i * SHAPE.hosts].lid()).unwrap();
            return s.nodes[ca].peers[1].unwrap().0;
        }
        let l0 = self.switch_index(Some(0), None);
        let port = (SHAPE.hosts + 1 + spine.unwrap()) as u8;
        s.nodes[l0].peers[usize::from(port)].unwrap().0
    }

    fn switch_proc(&mut self, idx: usize) -> &mut SwitchProc {
        for i in 0..SHAPE.leaves {
            if self.switch_index(Some(i), None) == idx {
                return &mut self.tree.leaves[i];
            }
        }
        for j in 0..SHAPE.spines {
            if self.switch_index(None, Some(j)) == idx {
                return &mut self.tree.spines[j];
            }
        }
        panic!("no switch {idx}")
    }
}

/// The fat tree in SM mode, every link trained (Init), swept by the mini SM
/// on node 0 with the group [`MEMBERS`] at [`MLID`].
fn bring_up(switch_args: &[&str]) -> Fabric {
    let mut tree = FatTree::spawn(SHAPE, "sm", switch_args);
    let mut hcas: Vec<Node> = (0..SHAPE.nodes())
        .map(|i| Node::connect(&tree.v, i))
        .collect();
    // No SM yet: every link trains and waits in Init.
    let deadline = Instant::now() + T;
    for (i, n) in hcas.iter_mut().enumerate() {
        loop {
            let p = n.hca.query_port(1).unwrap();
            if (p.state, p.phys_state) == (PortState::Init.raw(), 5) {
                break;
            }
            assert!(Instant::now() < deadline, "n{i}: {p:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for (sws, ports) in [
        (&mut tree.leaves, SHAPE.leaf_ports()),
        (&mut tree.spines, SHAPE.spine_ports()),
    ] {
        for sw in sws.iter_mut() {
            wait_states(sw, &ports, "Init");
        }
    }
    let mut sm = MiniSm::new(&mut hcas[0]);
    sm.sm_sl = SM_SL;
    let lids: Vec<u16> = MEMBERS.iter().map(|&i| hcas[i].lid()).collect();
    sm.add_group(MLID, &lids);
    let t = Instant::now();
    sm.sweep(&mut hcas[0].hca)
        .unwrap_or_else(|e| panic!("the sweep: {e}"));
    eprintln!(
        "sweep: {:?}, {} SMPs ({} resent, {} stale answers)",
        t.elapsed(),
        sm.qp0.sent,
        sm.qp0.resent,
        sm.qp0.stale
    );
    Fabric { tree, hcas, sm }
}

/// Waits until the counters file shows every port of `ports` in `state`.
fn wait_states(sw: &mut SwitchProc, ports: &[u64], state: &str) {
    let deadline = Instant::now() + T;
    loop {
        let v = sw.counters();
        let all = v["ports"].as_array().unwrap();
        let ok = |p: u64| all.iter().any(|x| x["port"] == p && x["state"] == state);
        if ports.iter().all(|&p| ok(p)) {
            return;
        }
        assert!(Instant::now() < deadline, "ports not {state}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every switch's counters from a file written after this call began (the
/// files are rewritten each second).
fn fresh_counters(f: &mut Fabric) -> BTreeMap<usize, Value> {
    let idx: Vec<usize> = f.sm.subnet.switches().collect();
    let stale: BTreeMap<usize, f64> = idx
        .iter()
        .map(|&s| (s, f.switch_proc(s).counters()["time"].as_f64().unwrap()))
        .collect();
    let deadline = Instant::now() + T;
    let mut out = BTreeMap::new();
    while out.len() < idx.len() {
        for &s in &idx {
            if out.contains_key(&s) {
                continue;
            }
            let c = f.switch_proc(s).counters();
            if c["time"].as_f64().unwrap() > stale[&s] {
                out.insert(s, c);
            }
        }
        assert!(Instant::now() < deadline, "counters files not rewritten");
        std::thread::sleep(Duration::from_millis(50));
    }
    out
}

fn ud_qp(n: &mut Node) -> QpH {
    let q = n.qp(QpType::Ud);
    n.hca
        .qp_to_rts_from_reset(q, None, &ConnOpts::default())
        .expect("UD to RTS");
    q
}

fn recvs(cqes: &[Cqe]) -> usize {
    cqes.iter()
        .filter(|c| c.opcode == WcOpcode::Recv as u8)
        .count()
}

#[test]
fn ad_09_a_mini_sm_brings_up_a_16_hca_6_switch_fat_tree_with_lft_and_mft_forwarding() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let mut f = bring_up(&[]);
    let sm_lid = f.sm.lid();
    // Discovery found the generated fabric: 16 CAs, 6 switches, and every
    // cable at both ends.
    let s = f.sm.subnet.clone();
    assert_eq!(s.nodes.len(), 22);
    assert_eq!(s.switches().count(), 6);
    let cables: usize = s
        .nodes
        .iter()
        .map(|n| n.peers.iter().flatten().count())
        .sum();
    assert_eq!(cables, 2 * (16 + 4 * 2), "16 HCA cables, 8 leaf-spine");
    // Every port Active, with the LID the SM gave (the ports' own kept), the
    // SM's LID and SL; every cabled switch port Active by its SMA.
    for (i, n) in f.hcas.iter_mut().enumerate() {
        let p = n.hca.query_port(1).unwrap();
        assert_eq!(
            (p.state, p.lid, p.sm_lid, p.sm_sl),
            (PortState::Active.raw(), i as u16 + 1, sm_lid, SM_SL),
            "n{i}"
        );
    }
    for sw in s.switches() {
        for p in 1..=s.nodes[sw].num_ports {
            let pi = f.sm.read_port(&mut f.hcas[0].hca, sw, p).unwrap();
            assert_eq!(pi.port_state, port_state::ACTIVE, "switch {sw} port {p}");
        }
        // The LFT reads back as the SM computed it.
        let got = f.sm.read_lft(&mut f.hcas[0].hca, sw).unwrap();
        assert_eq!(got, f.sm.lfts[&sw], "switch {sw}'s LFT");
    }
    // Min-hop spread: each leaf reaches the other leaves' 12 HCAs half by
    // one spine, half by the other.
    for l in 0..SHAPE.leaves {
        let lft = f.sm.lfts[&f.switch_index(Some(l), None)].clone();
        for j in 0..SHAPE.spines {
            let port = (SHAPE.hosts + 1 + j) as u8;
            let n = (1..=16usize)
                .filter(|&lid| SHAPE.leaf_of(lid - 1) != l && lft[lid] == port)
                .count();
            assert_eq!(n, 6, "leaf{l} by spine{j}: {lft:?}");
        }
    }

    // Multicast: n1 sends 3 datagrams to the group from a QP that is not
    // attached; n6 and n11 take them, n2 and n13 (attached, not members)
    // nothing; the switches sent copies down the tree's ports only.
    let mut attached = BTreeMap::new();
    for i in MEMBERS[1..].iter().chain(&STRANGERS).copied() {
        let n = &mut f.hcas[i];
        let q = ud_qp(n);
        n.hca.attach_mcast(q.qpn, MGID, MLID).expect("ATTACH_MCAST");
        let r = n.region(4 * 4096, Layout::Contiguous, 0);
        for k in 0..4 {
            n.hca
                .post_recv(
                    q,
                    &RecvWr::new(k, vec![r.mr.sge(&r.buf, k as usize * 4096, 4096)]),
                )
                .unwrap();
        }
        attached.insert(i, r);
    }
    let before = fresh_counters(&mut f);
    let sender = MEMBERS[0];
    let sq = ud_qp(&mut f.hcas[sender]);
    let data = pattern(0x27_0c, 1000);
    let src = f.hcas[sender].region(4096, Layout::Contiguous, 0);
    f.hcas[sender].write(&src, 0, &data);
    let dest = mcast_dest(MGID, MLID, ConnOpts::default().qkey);
    const SENDS: u64 = 3;
    for k in 0..SENDS {
        let w = SendWr::send(k)
            .sge(src.mr.sge(&src.buf, 0, data.len()))
            .ud(dest);
        f.hcas[sender].hca.post_send(sq, &w).unwrap();
    }
    assert_success(&f.hcas[sender].cqes(SENDS as usize, T));
    for &i in &MEMBERS[1..] {
        let cq = f.hcas[i].cq;
        let c = f.hcas[i].hca.wait_cqes(cq, SENDS as usize, T);
        if c.len() < SENDS as usize {
            let all = fresh_counters(&mut f);
            panic!("n{i}: {c:?}; {all:#?}");
        }
        assert_success(&c);
        assert_eq!(recvs(&c), SENDS as usize, "n{i}");
        for k in 0..SENDS as usize {
            let got = f.hcas[i].read(&attached[&i], k * 4096 + GRH, data.len());
            assert_bytes(&got, &data, &format!("multicast copy {k} at n{i}"));
        }
    }
    let after = fresh_counters(&mut f);
    for &i in &STRANGERS {
        let cq = f.hcas[i].cq;
        let c = f.hcas[i].hca.wait_cqes(cq, 1, Duration::from_millis(200));
        assert!(c.is_empty(), "n{i} is no member and got {c:?}");
    }
    // Per switch port, the copies it sent: the SM's tree, less the port a
    // copy came in by; none anywhere else.
    let mut want: BTreeMap<(usize, u8), u64> = BTreeMap::new();
    let ca = s.by_lid(f.hcas[sender].lid()).unwrap();
    let mut queue = vec![s.nodes[ca].peers[1].unwrap()];
    while let Some((sw, in_port)) = queue.pop() {
        let mask = f.sm.mfts[&sw][&MLID];
        for p in 1..=s.nodes[sw].num_ports {
            if p == in_port || mask & 1 << p == 0 {
                continue;
            }
            want.insert((sw, p), SENDS);
            let (next, np) = s.nodes[sw].peers[usize::from(p)].unwrap();
            if s.nodes[next].is_switch() {
                queue.push((next, np));
            }
        }
    }
    assert_eq!(
        want.len(),
        5,
        "leaf0 up, spine0 down 2, 2 leaves to members: {want:?}"
    );
    for sw in s.switches() {
        for p in 1..=s.nodes[sw].num_ports {
            let x = |c: &Value| port_counter(c, u64::from(p), "xmit_packets");
            let sent = x(&after[&sw]) - x(&before[&sw]);
            let w = want.get(&(sw, p)).copied().unwrap_or(0);
            assert_eq!(
                sent, w,
                "switch {sw} port {p}: {sent} copies; the tree {:?}; sent {want:?}",
                f.sm.mfts
            );
        }
    }
    for &i in &STRANGERS {
        let (sw, p) = s.nodes[s.by_lid(f.hcas[i].lid()).unwrap()].peers[1].unwrap();
        assert!(!want.contains_key(&(sw, p)), "n{i}'s port is off the tree");
    }

    // Unicast by the SM's LFTs: every HCA with every HCA on another leaf.
    let nodes = SHAPE.nodes();
    let len = 16 << 10;
    let pairs: Vec<(usize, usize)> = (0..nodes)
        .flat_map(|i| (i + 1..nodes).map(move |j| (i, j)))
        .filter(|&(i, j)| SHAPE.leaf_of(i) != SHAPE.leaf_of(j))
        .collect();
    assert_eq!(pairs.len(), 96);
    for &(i, j) in &pairs {
        let (lo, hi) = f.hcas.split_at_mut(j);
        let (na, nb) = (&mut lo[i], &mut hi[0]);
        let qs = rc_pair(na, nb);
        let seed = 0x2709 + (i * nodes + j) as u64 * 2;
        write_then_send(na, nb, qs, len, seed, &format!("n{i} -> n{j}"));
    }
    // Every packet arrived or is a counted drop: no switch counted one.
    drop(f.hcas);
    for (k, sw) in f
        .tree
        .leaves
        .iter_mut()
        .chain(f.tree.spines.iter_mut())
        .enumerate()
    {
        let (status, c) = sw.stop();
        assert!(status.success(), "switch {k}: {status}");
        for (reason, n) in c["drops"].as_object().unwrap() {
            assert_eq!(n, 0, "switch {k} drop {reason}: {c}");
        }
    }
    eprintln!("SM fat tree test took {:?}", started.elapsed());
}

#[test]
fn ad_09_a_switch_port_disabled_by_its_sma_traps_to_the_sm_which_routes_rc_around_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let mut f = bring_up(&["--peer-silence", SILENCE]);
    let s = f.sm.subnet.clone();
    // Leaf 1's cable to a spine that neither the SM's directed route to
    // leaf 1 nor leaf 1's route to the SM takes (so the Set's answer and
    // the trap come back).
    let leaf1 = f.switch_index(Some(1), None);
    let lft1 = f.sm.lfts[&leaf1].clone();
    let to_sm = lft1[usize::from(f.sm.lid())];
    let entry = s.nodes[leaf1].entry_port;
    let cut = (SHAPE.hosts as u8 + 1..=(SHAPE.hosts + SHAPE.spines) as u8)
        .find(|&p| p != to_sm && p != entry)
        .expect("a spine port off the SM's paths");
    let (spine, spine_port) = s.nodes[leaf1].peers[usize::from(cut)].unwrap();
    // A pair whose path crosses it: n4 (leaf 1) to the first HCA of
    // leaves 2-3 that leaf 1 reaches by that port.
    let a = SHAPE.hosts;
    let b = (2 * SHAPE.hosts..SHAPE.nodes())
        .find(|&j| lft1[usize::from(f.hcas[j].lid())] == cut)
        .expect("a destination by the cable");
    let (lo, hi) = f.hcas.split_at_mut(b);
    let (na, nb) = (&mut lo[a], &mut hi[0]);
    let (qa, qb) = rc_pair(na, nb);
    let len = 64 << 10;
    write_checked(na, nb, qa, len, 0x2780, "before the cut");

    f.sm.disable_port(&mut f.hcas[0].hca, leaf1, cut).unwrap();
    // Trap 128 from leaf 1 at once, and from the spine when its port has
    // heard nothing for the silence period; each repressed.
    let lid_of = |i: usize| s.nodes[i].lid;
    let mut from: Vec<u16> = Vec::new();
    while !(from.contains(&lid_of(leaf1)) && from.contains(&lid_of(spine))) {
        let t =
            f.sm.wait_trap(&mut f.hcas[0].hca, Duration::from_secs(10))
                .unwrap()
                .unwrap_or_else(|| panic!("no trap 128 from both ends; had {from:?}"));
        assert_eq!((t.notice.trap_number, t.slid), (128, t.notice.issuer_lid));
        from.push(t.notice.issuer_lid);
    }
    let pi =
        f.sm.read_port(&mut f.hcas[0].hca, spine, spine_port)
            .unwrap();
    assert_eq!(pi.port_state, port_state::DOWN, "the spine's end is Down");
    // Through the dead cable nothing answers: after its bounded tries the
    // SMP is an error that names its directed route.
    let mut dead = s.nodes[leaf1].path.clone();
    dead.push(cut);
    (f.sm.qp0.tries, f.sm.qp0.timeout) = (2, Duration::from_millis(200));
    let t = Instant::now();
    let e =
        f.sm.qp0
            .request(
                &mut f.hcas[0].hca,
                method::GET,
                attr_id::NODE_INFO,
                0,
                [0; 64],
                &Dest::Dr(dead.clone()),
            )
            .expect_err("an answer through a disabled port");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(
        e.to_string(),
        format!("SubnGet(NodeInfo) modifier 0 along DR path {dead:?}: no answer to 2 sends of 200ms each")
    );
    (f.sm.qp0.tries, f.sm.qp0.timeout) = (4, Duration::from_millis(500));
    // The SM routes around it: leaf 1 takes the other spine to b, and no
    // switch names the dead ports any more.
    f.sm.sweep(&mut f.hcas[0].hca)
        .unwrap_or_else(|e| panic!("the sweep after the trap: {e}"));
    // The sweep numbers the nodes afresh.
    let now_at = |i: usize| f.sm.subnet.by_guid(s.nodes[i].guid).unwrap();
    let (leaf1, spine) = (now_at(leaf1), now_at(spine));
    let lft1 = f.sm.read_lft(&mut f.hcas[0].hca, leaf1).unwrap();
    assert_eq!(lft1, f.sm.lfts[&leaf1], "leaf 1's LFT as the SM set it");
    let now = lft1[usize::from(f.hcas[b].lid())];
    assert!(
        now != cut && now != LFT_NO_PORT,
        "leaf 1 to n{b}: port {now}"
    );
    assert!(!lft1.contains(&cut), "leaf 1 still routes by port {cut}");
    let lft_spine = f.sm.read_lft(&mut f.hcas[0].hca, spine).unwrap();
    assert!(!lft_spine.contains(&spine_port), "{lft_spine:?}");
    // The same RC pair carries on, byte-exact, on the new path.
    let (lo, hi) = f.hcas.split_at_mut(b);
    let (na, nb) = (&mut lo[a], &mut hi[0]);
    write_then_send(na, nb, (qa, qb), len, 0x2782, "after the cut");
    eprintln!(
        "re-route test took {:?} ({} SMPs)",
        started.elapsed(),
        f.sm.qp0.sent
    );
}
