//! A two-level fat tree of real processes (issue 27): the fabric file
//! `vhca topology fat-tree` writes, its `vhca` HCAs and its `vhca switch`
//! leaves and spines, and the switches' counters read from their JSON.

use std::process::{Command, ExitStatus};

use serde_json::Value;

use crate::process::{free_udp_range, vhca_binary, Build, Options, Vhca};
use crate::switch_proc::SwitchProc;

/// `vhca topology ARGS`: (exit status, stdout, stderr).
pub fn vhca_topology(args: &[&str]) -> (ExitStatus, String, String) {
    let out = Command::new(vhca_binary(Build::Debug))
        .arg("topology")
        .args(args)
        .output()
        .expect("run vhca topology");
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Counter `name` of port `port` in a switch's counters JSON.
pub fn port_counter(v: &Value, port: u64, name: &str) -> u64 {
    v["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["port"] == port)
        .unwrap_or_else(|| panic!("no port {port} in {v}"))["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {name} on port {port}: {v}"))
}

/// The shape: `leaves` leaf switches with `hosts` HCAs each (leaf i's HCA k
/// is node i * hosts + k, on leaf port k + 1), `spines` spines (spine j on
/// leaf port hosts + 1 + j, leaf i on spine port i + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub leaves: usize,
    pub spines: usize,
    pub hosts: usize,
}

impl Shape {
    pub fn nodes(&self) -> usize {
        self.leaves * self.hosts
    }

    /// The leaf HCA `i` hangs off.
    pub fn leaf_of(&self, i: usize) -> usize {
        i / self.hosts
    }

    /// The leaf's ports (HCAs, then spines).
    pub fn leaf_ports(&self) -> Vec<u64> {
        (1..=(self.hosts + self.spines) as u64).collect()
    }

    /// The spine's ports (one per leaf).
    pub fn spine_ports(&self) -> Vec<u64> {
        (1..=self.leaves as u64).collect()
    }
}

/// The running fat tree: the HCAs (not yet connected to) and the switches.
pub struct FatTree {
    pub shape: Shape,
    pub v: Vhca,
    pub leaves: Vec<SwitchProc>,
    pub spines: Vec<SwitchProc>,
}

impl FatTree {
    /// Generates the fabric file (`subnet` "static" or "sm") on free UDP
    /// ports and starts every process; `switch_args` go to each switch.
    pub fn spawn(shape: Shape, subnet: &str, switch_args: &[&str]) -> FatTree {
        FatTree::spawn_with(
            shape,
            &["--subnet", subnet],
            Options::default(),
            switch_args,
        )
    }

    /// As [`FatTree::spawn`], with further generator arguments (`more`: the
    /// subnet mode, `--lmc 1`, ...) and the HCAs started with `opts` (whose
    /// `nodes` and `fabric_text` are set here).
    pub fn spawn_with(shape: Shape, more: &[&str], opts: Options, switch_args: &[&str]) -> FatTree {
        let Shape {
            leaves,
            spines,
            hosts,
        } = shape;
        let ports = shape.nodes() + leaves * (hosts + spines) + spines * leaves;
        let base = free_udp_range(ports as u16).expect("free UDP ports");
        let dims = [leaves, spines, hosts, usize::from(base)].map(|n| n.to_string());
        let mut args = vec![
            "fat-tree",
            "--leaves",
            &dims[0],
            "--spines",
            &dims[1],
            "--hosts-per-leaf",
            &dims[2],
            "--base-port",
            &dims[3],
        ];
        args.extend_from_slice(more);
        let (status, text, err) = vhca_topology(&args);
        assert!(status.success(), "vhca topology {args:?}: {status}: {err}");
        let v = Vhca::spawn(Options {
            nodes: shape.nodes(),
            fabric_text: Some(text),
            ..opts
        });
        let sw = |name: String| SwitchProc::spawn(v.fabric_file(), &name, v.dir(), switch_args);
        let leaves = (0..leaves).map(|i| sw(format!("leaf{i}"))).collect();
        let spines = (0..spines).map(|j| sw(format!("spine{j}"))).collect();
        FatTree {
            shape,
            v,
            leaves,
            spines,
        }
    }
}

/// A static-mode fat tree (`leaves`, `spines`, `hosts` HCAs per leaf; `more`:
/// further generator arguments such as `--lmc 1`), its HCAs started with
/// `opts`, one `vhca switch` per switch with `switch_args`; returned once
/// every switch port is Active, the switches leaf0.. then spine0...
pub fn fat_tree(
    (leaves, spines, hosts): (usize, usize, usize),
    more: &[&str],
    opts: Options,
    switch_args: &[&str],
) -> (Vhca, Vec<SwitchProc>) {
    let shape = Shape {
        leaves,
        spines,
        hosts,
    };
    let FatTree {
        v,
        leaves: mut switches,
        spines: mut up,
        ..
    } = FatTree::spawn_with(shape, more, opts, switch_args);
    for sw in &mut switches {
        sw.wait_active(&shape.leaf_ports());
    }
    for sw in &mut up {
        sw.wait_active(&shape.spine_ports());
    }
    switches.append(&mut up);
    (v, switches)
}
