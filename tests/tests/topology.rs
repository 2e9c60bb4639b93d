//! `vhca topology` on real processes (issue 27 items 1-2): the fabric file
//! the binary generates for a static-mode two-level fat tree (4 leaves with
//! 4 HCAs each, 2 spines: 16 `vhca` HCAs and 6 `vhca switch` processes)
//! carries RC WRITE and SEND between every two HCAs on different leaves byte
//! for byte,
//! with no SM: every switch forwards by the LFT computed from the cabling,
//! every port of every switch carried packets both ways (the leaves spread
//! their destinations over both spines), and no switch dropped one. Bad
//! arguments get clap's error with the usage line and exit status 2.

use std::time::Instant;

use vhca_tests::abi::verbs::PortState;
use vhca_tests::fat_tree::{port_counter as counter, vhca_topology as topology, FatTree, Shape};
use vhca_tests::fixture::Node;
use vhca_tests::switch_proc::{rc_pair, write_then_send, SwitchProc};

const LEAVES: usize = 4;
const SPINES: usize = 2;
const HOSTS: usize = 4;

#[test]
fn a_generated_static_fat_tree_of_16_hcas_and_6_switches_carries_rc_between_leaves_byte_exact() {
    let started = Instant::now();
    let shape = Shape {
        leaves: LEAVES,
        spines: SPINES,
        hosts: HOSTS,
    };
    let nodes = shape.nodes();
    let FatTree {
        v,
        mut leaves,
        mut spines,
        ..
    } = FatTree::spawn(shape, "static", &[]);
    let leaf_ports = shape.leaf_ports();
    let spine_ports = shape.spine_ports();
    for l in &mut leaves {
        l.wait_active(&leaf_ports);
    }
    for s in &mut spines {
        s.wait_active(&spine_ports);
    }
    let mut hcas: Vec<Node> = (0..nodes).map(|i| Node::connect(&v, i)).collect();
    for (i, n) in hcas.iter_mut().enumerate() {
        assert_eq!(
            n.hca.query_port(1).unwrap().state,
            PortState::Active.raw(),
            "n{i}"
        );
        assert_eq!(n.lid(), i as u16 + 1, "n{i}'s LID from the generated file");
    }
    // Every HCA with every HCA of every other leaf: 96 RC pairs, each leaf
    // reaching HCA j of another leaf by spine j mod 2 (the static LFT's
    // spread over equally short ports).
    let len = 16 << 10;
    let leaf = |i: usize| i / HOSTS;
    let pairs: Vec<(usize, usize)> = (0..nodes)
        .flat_map(|i| (i + 1..nodes).map(move |j| (i, j)))
        .filter(|&(i, j)| leaf(i) != leaf(j))
        .collect();
    assert_eq!(pairs.len(), 96);
    for &(i, j) in &pairs {
        let (a, b) = (leaf(i), leaf(j));
        let (lo, hi) = hcas.split_at_mut(j);
        let (na, nb) = (&mut lo[i], &mut hi[0]);
        let qs = rc_pair(na, nb);
        let seed = 0x2700 + (i * nodes + j) as u64 * 2;
        write_then_send(
            na,
            nb,
            qs,
            len,
            seed,
            &format!("n{i} (leaf{a}) -> n{j} (leaf{b})"),
        );
    }
    drop(hcas);
    // Every port of every switch carried packets both ways, and no switch
    // dropped one: a spine forwards all it takes in.
    let stopped = |sw: &mut SwitchProc, name: String, ports: &[u64]| -> (u64, u64) {
        let (status, c) = sw.stop();
        assert!(status.success(), "{name}: {status}");
        for (k, n) in c["drops"].as_object().unwrap() {
            assert_eq!(n, 0, "{name} drop {k}: {c}");
        }
        let (mut rcv, mut xmit) = (0, 0);
        for &p in ports {
            let (r, x) = (
                counter(&c, p, "rcv_packets"),
                counter(&c, p, "xmit_packets"),
            );
            assert!(r > 0 && x > 0, "{name} port {p}: rcv {r}, xmit {x}: {c}");
            rcv += r;
            xmit += x;
        }
        (rcv, xmit)
    };
    for (j, s) in spines.iter_mut().enumerate() {
        let (rcv, xmit) = stopped(s, format!("spine{j}"), &spine_ports);
        assert_eq!(rcv, xmit, "spine{j} forwards every packet it takes in");
        // Each WRITE to an HCA j with j mod 2 = this spine crossed it: at
        // least len / 4096 packets each (more at a smaller MTU).
        let writes = pairs.iter().filter(|&&(_, d)| d % SPINES == j).count();
        assert!(
            rcv >= (writes * len / 4096) as u64,
            "spine{j}: {rcv} packets for {writes} WRITEs"
        );
    }
    for (i, l) in leaves.iter_mut().enumerate() {
        stopped(l, format!("leaf{i}"), &leaf_ports);
    }
    eprintln!("fat tree test took {:?}", started.elapsed());
}

#[test]
fn vhca_topology_refuses_bad_arguments_with_the_usage_line_and_status_2() {
    for (args, why) in [
        (
            &[
                "fat-tree",
                "--leaves",
                "0",
                "--spines",
                "2",
                "--hosts-per-leaf",
                "4",
            ][..],
            "error: --leaves 0: at least 1",
        ),
        (
            &[
                "fat-tree",
                "--leaves",
                "2",
                "--spines",
                "2",
                "--hosts-per-leaf",
                "35",
            ],
            "would need 37 ports: a switch has at most 36",
        ),
        (
            &[
                "ring",
                "--switches",
                "4",
                "--hosts",
                "2",
                "--base-port",
                "65530",
            ],
            "pass 65535",
        ),
    ] {
        let (status, out, err) = topology(args);
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: wrote {out}");
        assert!(err.contains(why), "{args:?}: {err}");
        let usage = format!("\nUsage: vhca topology {} ", args[0]);
        assert!(err.contains(&usage), "{args:?}: {err}");
    }
}
