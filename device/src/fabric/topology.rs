//! Fabric files for common topologies (issue 27 item 1): `vhca topology`
//! writes the `[[node]]`, `[[switch]]` and `[[link]]` tables of a two-level
//! fat tree, a line or a ring of switches, so nobody cables 100 links by hand.
//!
//! Sans-IO: [`generate`] turns a [`Topology`] into the file's text. Names,
//! GUIDs and LIDs are unique by construction: HCAs `n0`, `n1`, ... (LIDs 1..,
//! GUIDs 0x0002c90300000001..), switches after them (`leaf*`/`spine*` or
//! `sw*`, the LIDs that follow, GUIDs 0x0002c90300100001..). With an LMC
//! (`--lmc`, AD-01) HCA k owns the 2^LMC LIDs from (k + 1) * 2^LMC (a base LID
//! is a multiple of 2^LMC) and the switches take the LIDs after the last
//! HCA's; on a fat tree with 2^LMC a multiple of the spines, LID base + j of
//! every HCA crosses spine j (`Cabling::static_lft`), so base and base + 1
//! are disjoint paths for automatic path migration (AD-10). UDP addresses are
//! 127.0.0.1 from the base port on: the HCAs first, then each switch's ports
//! in a consecutive block (its `address` is port 1's), so no two overlap.
//!
//! Across hosts (issue 27 item 3): with `hosts` (one underlay address per
//! machine) the switches are dealt out in blocks, the first leaves (or
//! switches of a line) to the first host and so on, the spines likewise, and
//! each HCA lives with its switch; every host counts its own UDP ports up
//! from the base. A fabric that leaves one host wants a fabric key
//! (`key_file`), so the generator can name one.
//!
//! Port layout (each switch's port count is derived, at most
//! [`MAX_SWITCH_PORTS`]):
//! - fat tree: leaf i has ports 1..=H for its HCAs and H+1..=H+S for spines
//!   0..S; spine j's port i+1 goes to leaf i;
//! - line and ring: switch i has ports 1..=H for its HCAs, H+1 toward switch
//!   i-1 and H+2 toward switch i+1 (the ring closes sw(n-1):H+2 to sw0:H+1).
//!
//! Static mode works on every shape: the switches route unicast by shortest
//! paths and flood multicast along one spanning tree of the switch links
//! (`Cabling::static_flood`), so the fat tree's and the ring's loops carry no
//! multicast storm.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::cabling::MAX_SWITCH_PORTS;
use super::file::MAX_UNICAST_LID;
use super::partition::MAX_LMC;
use crate::mgmt::SubnetMode;

/// The first HCA's GUID; HCA k has this + k.
const NODE_GUID_BASE: u64 = 0x0002_c903_0000_0001;
/// The first switch's GUID; switch i has this + i.
const SWITCH_GUID_BASE: u64 = 0x0002_c903_0010_0001;

/// Which topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Every leaf cabled once to every spine, `hosts_per_leaf` HCAs per leaf.
    FatTree {
        leaves: usize,
        spines: usize,
        hosts_per_leaf: usize,
    },
    /// Switches in a row, each cabled to the next, `hosts` HCAs on each.
    Line { switches: usize, hosts: usize },
    /// A line whose last switch is cabled back to the first (3 or more).
    Ring { switches: usize, hosts: usize },
}

/// A topology to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub shape: Shape,
    /// The first UDP port on each host; the rest count up from it.
    pub base_port: u16,
    pub subnet: SubnetMode,
    /// The hosts' underlay addresses, switches dealt out over them in
    /// blocks; empty: everything on 127.0.0.1.
    pub hosts: Vec<IpAddr>,
    /// A fabric key file for the top-level `key_file` (ARCHITECTURE.md §9).
    pub key_file: Option<String>,
    /// Every HCA's LID mask control (AD-01): 2^lmc LIDs each.
    pub lmc: u8,
}

impl Topology {
    /// `shape` on 127.0.0.1 from `base_port`, no key.
    pub fn new(shape: Shape, base_port: u16, subnet: SubnetMode) -> Topology {
        Topology {
            shape,
            base_port,
            subnet,
            hosts: Vec::new(),
            key_file: None,
            lmc: 0,
        }
    }
}

/// Why a topology cannot be written: one line naming the argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TopologyError(pub String);

/// One switch of the plan: name, port count and host (index into the
/// hosts).
struct Sw {
    name: String,
    ports: usize,
    host: usize,
}

/// Block `i` of `n` dealt over `hosts` machines: the first n/hosts to host
/// 0, and so on (a leaf, spine or switch of a line goes with its block).
fn host_of(i: usize, n: usize, hosts: usize) -> usize {
    i * hosts / n.max(1)
}

/// The fabric file's text for `t`.
pub fn generate(t: &Topology) -> Result<String, TopologyError> {
    let bad = |s: String| Err(TopologyError(s));
    let need = |what: &str, n: usize, min: usize| {
        if n < min {
            Err(TopologyError(format!("--{what} {n}: at least {min}")))
        } else {
            Ok(())
        }
    };
    let fits = |who: String, ports: usize| {
        if ports > usize::from(MAX_SWITCH_PORTS) {
            Err(TopologyError(format!(
                "{who} would need {ports} ports: a switch has at most {MAX_SWITCH_PORTS}"
            )))
        } else {
            Ok(())
        }
    };
    let nhosts = t.hosts.len().max(1);
    if let Some(k) = &t.key_file {
        if k.is_empty() || k.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
            return bad(format!(
                "--key-file {k:?}: a path without quotes, backslashes or control characters"
            ));
        }
    }
    // Nodes (by switch index) and switches; links as pairs of ends.
    let mut hosts_of: Vec<usize> = Vec::new();
    let mut sws: Vec<Sw> = Vec::new();
    let mut links: Vec<(String, String)> = Vec::new();
    match t.shape {
        Shape::FatTree {
            leaves,
            spines,
            hosts_per_leaf: h,
        } => {
            need("leaves", leaves, 1)?;
            need("spines", spines, 1)?;
            need("hosts-per-leaf", h, 1)?;
            fits(
                format!("a leaf with {h} hosts and {spines} spines"),
                h + spines,
            )?;
            fits(format!("a spine with {leaves} leaves"), leaves)?;
            for i in 0..leaves {
                sws.push(Sw {
                    name: format!("leaf{i}"),
                    ports: h + spines,
                    host: host_of(i, leaves, nhosts),
                });
                hosts_of.push(h);
            }
            for j in 0..spines {
                sws.push(Sw {
                    name: format!("spine{j}"),
                    ports: leaves,
                    host: host_of(j, spines, nhosts),
                });
                hosts_of.push(0);
                for i in 0..leaves {
                    links.push((
                        format!("leaf{i}:{}", h + 1 + j),
                        format!("spine{j}:{}", i + 1),
                    ));
                }
            }
        }
        Shape::Line { switches, hosts } | Shape::Ring { switches, hosts } => {
            let ring = matches!(t.shape, Shape::Ring { .. });
            need("switches", switches, if ring { 3 } else { 1 })?;
            need("hosts", hosts, 1)?;
            fits(
                format!("a switch with {hosts} hosts and 2 neighbours"),
                hosts + 2,
            )?;
            for i in 0..switches {
                sws.push(Sw {
                    name: format!("sw{i}"),
                    ports: hosts + 2,
                    host: host_of(i, switches, nhosts),
                });
                hosts_of.push(hosts);
                if i + 1 < switches {
                    links.push((
                        format!("sw{i}:{}", hosts + 2),
                        format!("sw{}:{}", i + 1, hosts + 1),
                    ));
                }
            }
            if ring {
                links.push((
                    format!("sw{}:{}", switches - 1, hosts + 2),
                    format!("sw0:{}", hosts + 1),
                ));
            }
        }
    }
    let nodes: usize = hosts_of.iter().sum();
    let ips: Vec<IpAddr> = if t.hosts.is_empty() {
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]
    } else {
        t.hosts.clone()
    };
    // Each node's host is its switch's; each host counts its own ports.
    let node_host: Vec<usize> = sws
        .iter()
        .zip(&hosts_of)
        .flat_map(|(sw, &h)| std::iter::repeat_n(sw.host, h))
        .collect();
    let mut used = vec![0usize; nhosts];
    for &h in &node_host {
        used[h] += 1;
    }
    for sw in &sws {
        used[sw.host] += sw.ports;
    }
    let ports = used.iter().copied().max().unwrap_or(0);
    let base = usize::from(t.base_port);
    if base == 0 {
        return bad("--base-port 0: UDP ports start at 1".into());
    }
    if base + ports - 1 > usize::from(u16::MAX) {
        return bad(format!(
            "--base-port {base}: {ports} UDP ports ({} HCAs and the switches' ports{}) from {base} pass 65535; at most --base-port {}",
            if nhosts == 1 { nodes.to_string() } else { "the busiest host's".into() },
            if nhosts == 1 { "" } else { " on one host" },
            (usize::from(u16::MAX) + 1).saturating_sub(ports)
        ));
    }
    if t.lmc > MAX_LMC {
        return bad(format!("--lmc {}: at most {MAX_LMC}", t.lmc));
    }
    // HCA k at (k + 1) << lmc, the switches from the next multiple on.
    let stride = 1usize << t.lmc;
    let first_switch_lid = (nodes + 1) * stride;
    if first_switch_lid + sws.len() - 1 > usize::from(MAX_UNICAST_LID) {
        return bad(format!(
            "{nodes} HCAs with {stride} LIDs each and {} switches need more LIDs than the {MAX_UNICAST_LID} unicast ones",
            sws.len()
        ));
    }
    let where_ = ips
        .iter()
        .map(|ip| ip.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut s = String::new();
    let _ = writeln!(s, "# {}", describe(t));
    let _ = writeln!(
        s,
        "# Written by `vhca topology` (issue 27): {nodes} HCAs n0..n{}, {} switches, UDP ports from {base} on {where_}.",
        nodes - 1,
        sws.len(),
    );
    let subnet = match t.subnet {
        SubnetMode::Static => "static",
        SubnetMode::Sm => "sm",
    };
    let _ = writeln!(s, "subnet = \"{subnet}\"");
    if let Some(k) = &t.key_file {
        let _ = writeln!(s, "key_file = \"{k}\"");
    }
    let mut next = vec![base; nhosts];
    let mut take = |h: usize, n: usize| {
        let a = SocketAddr::new(ips[h], next[h] as u16);
        next[h] += n;
        a
    };
    for (k, &h) in node_host.iter().enumerate() {
        let _ = write!(
            s,
            "\n[[node]]\nname = \"n{k}\"\nlid = {}\nguid = \"{:#018x}\"\naddress = \"{}\"\n",
            (k + 1) * stride,
            NODE_GUID_BASE + k as u64,
            take(h, 1)
        );
        if t.lmc > 0 {
            let _ = writeln!(s, "lmc = {}", t.lmc);
        }
    }
    for (i, sw) in sws.iter().enumerate() {
        let _ = write!(
            s,
            "\n[[switch]]\nname = \"{}\"\nguid = \"{:#018x}\"\nports = {}\naddress = \"{}\"\nlid = {}\n",
            sw.name,
            SWITCH_GUID_BASE + i as u64,
            sw.ports,
            take(sw.host, sw.ports),
            first_switch_lid + i
        );
    }
    let mut k = 0;
    for (i, sw) in sws.iter().enumerate() {
        for p in 1..=hosts_of[i] {
            let _ = write!(s, "\n[[link]]\nends = [\"n{k}\", \"{}:{p}\"]\n", sw.name);
            k += 1;
        }
    }
    for (a, b) in &links {
        let _ = write!(s, "\n[[link]]\nends = [\"{a}\", \"{b}\"]\n");
    }
    Ok(s)
}

/// The topology in words, for the file's first line.
fn describe(t: &Topology) -> String {
    match t.shape {
        Shape::FatTree {
            leaves,
            spines,
            hosts_per_leaf,
        } => format!(
            "A two-level fat tree: {leaves} leaves, {spines} spines, {hosts_per_leaf} HCAs per leaf."
        ),
        Shape::Line { switches, hosts } => {
            format!("A line of {switches} switches, {hosts} HCAs on each.")
        }
        Shape::Ring { switches, hosts } => {
            format!("A ring of {switches} switches, {hosts} HCAs on each.")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::super::cabling::{Cabling, End};
    use super::super::FabricFile;
    use super::*;

    fn fat(l: usize, s: usize, h: usize) -> Topology {
        Topology::new(
            Shape::FatTree {
                leaves: l,
                spines: s,
                hosts_per_leaf: h,
            },
            30000,
            SubnetMode::Static,
        )
    }

    fn ring(n: usize, h: usize) -> Topology {
        Topology::new(
            Shape::Ring {
                switches: n,
                hosts: h,
            },
            30000,
            SubnetMode::Static,
        )
    }

    fn line(n: usize, h: usize) -> Topology {
        Topology {
            shape: Shape::Line {
                switches: n,
                hosts: h,
            },
            ..ring(n, h)
        }
    }

    /// Parses `t`'s text and checks what every shape must have: each node on
    /// exactly one link, every address distinct and in the announced range,
    /// and every switch's static LFT reaching every node's LID.
    fn checked(t: &Topology, nodes: usize, switches: usize, links: usize) -> FabricFile {
        let text = generate(t).unwrap();
        let f = FabricFile::parse("gen", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let c = f.cabling();
        assert_eq!(f.nodes().len(), nodes);
        assert_eq!(c.switches().len(), switches);
        assert_eq!(c.links().len(), links);
        for i in 0..nodes {
            let on = c
                .links()
                .iter()
                .filter(|(a, b)| *a == End::Node(i) || *b == End::Node(i))
                .count();
            assert_eq!(on, 1, "node {i}");
        }
        let mut addrs: Vec<u16> = f.nodes().iter().map(|n| n.address.port()).collect();
        for sw in c.switches() {
            addrs.extend(sw.addresses.iter().map(|a| a.port()));
        }
        let total = addrs.len();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), total, "an address used twice");
        assert_eq!(addrs[0], t.base_port);
        assert_eq!(
            usize::from(addrs[total - 1]),
            usize::from(t.base_port) + total - 1
        );
        let lids = |i: usize| -> Vec<u16> {
            let n = &f.nodes()[i];
            f.port_attrs(&n.name).unwrap().lids(n.lid).collect()
        };
        for s in 0..switches {
            let lft = c.static_lft(s, nodes, lids);
            for (i, n) in f.nodes().iter().enumerate() {
                for lid in lids(i) {
                    assert!(
                        lft.iter().any(|&(l, p)| l == lid && p != 0),
                        "switch {} does not reach {}'s LID {lid}",
                        c.switches()[s].name,
                        n.name
                    );
                }
            }
        }
        f
    }

    #[test]
    fn a_fat_tree_cables_every_leaf_to_every_spine_and_routes_every_lid() {
        let f = checked(&fat(4, 2, 4), 16, 6, 16 + 4 * 2);
        let c = f.cabling();
        let ports: Vec<(&str, u8)> = c
            .switches()
            .iter()
            .map(|s| (s.name.as_str(), s.ports))
            .collect();
        assert_eq!(
            ports,
            [
                ("leaf0", 6),
                ("leaf1", 6),
                ("leaf2", 6),
                ("leaf3", 6),
                ("spine0", 4),
                ("spine1", 4)
            ]
        );
        // Leaf 2's port 6 goes to spine 1's port 3.
        assert_eq!(
            c.peer(End::Port { switch: 2, port: 6 }),
            Some(End::Port { switch: 5, port: 3 })
        );
        // Leaf 0 spreads the other leaves' HCAs over both spines: n4 (index
        // 4) by port 5 to spine 0, n5 by port 6 to spine 1, and so on.
        let lids = |i: usize| vec![f.nodes()[i].lid];
        let lft = c.static_lft(0, 16, lids);
        for i in 4..16u16 {
            assert!(lft.contains(&(i + 1, 5 + (i % 2) as u8)), "n{i}: {lft:?}");
        }
        // A spine reaches leaf i's HCAs by its port i + 1.
        let lft = c.static_lft(5, 16, lids);
        for i in 0..16u16 {
            assert!(lft.contains(&(i + 1, (i / 4 + 1) as u8)), "n{i}: {lft:?}");
        }
        assert_eq!(f.subnet(), SubnetMode::Static);
        let sm = Topology {
            subnet: SubnetMode::Sm,
            ..fat(2, 1, 1)
        };
        assert_eq!(checked(&sm, 2, 3, 4).subnet(), SubnetMode::Sm);
    }

    #[test]
    fn two_hosts_get_half_the_switches_each_and_their_nodes_follow_their_leaf() {
        let a: IpAddr = "10.77.0.1".parse().unwrap();
        let b: IpAddr = "10.77.0.2".parse().unwrap();
        let t = Topology {
            hosts: vec![a, b],
            key_file: Some("/tmp/fabric.key".into()),
            ..fat(4, 2, 2)
        };
        let text = generate(&t).unwrap();
        assert!(
            text.contains("\nkey_file = \"/tmp/fabric.key\"\n"),
            "{text}"
        );
        // Parsed without the key line (the key file does not exist here).
        let f = FabricFile::parse("gen", &text.replace("key_file = \"/tmp/fabric.key\"\n", ""))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let c = f.cabling();
        // leaf0, leaf1 and spine0 on a; leaf2, leaf3 and spine1 on b; each
        // leaf's two HCAs with it.
        let host: Vec<IpAddr> = c.switches().iter().map(|s| s.addresses[0].ip()).collect();
        assert_eq!(host, [a, a, b, b, a, b]);
        for (i, n) in f.nodes().iter().enumerate() {
            assert_eq!(n.address.ip(), if i < 4 { a } else { b }, "n{i}");
        }
        // Each host numbers its own ports from the base, none twice.
        for ip in [a, b] {
            let mut ports: Vec<u16> = f
                .nodes()
                .iter()
                .map(|n| n.address)
                .chain(
                    c.switches()
                        .iter()
                        .flat_map(|s| s.addresses.iter().copied()),
                )
                .filter(|x| x.ip() == ip)
                .map(|x| x.port())
                .collect();
            ports.sort_unstable();
            let want: Vec<u16> = (30000..30000 + ports.len() as u16).collect();
            assert_eq!(ports, want, "{ip}");
        }
        for (k, why) in [("a\"b", "--key-file"), ("", "--key-file")] {
            let t = Topology {
                key_file: Some(k.into()),
                ..fat(1, 1, 1)
            };
            let e = generate(&t).unwrap_err().to_string();
            assert!(e.contains(why) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn ad_01_an_lmc_fat_tree_gives_each_hca_aligned_lids_and_base_plus_j_crosses_spine_j() {
        let t = Topology {
            lmc: 1,
            ..fat(4, 2, 4)
        };
        let f = checked(&t, 16, 6, 24);
        for (k, n) in f.nodes().iter().enumerate() {
            assert_eq!(n.lid, (k as u16 + 1) * 2, "{}", n.name);
            assert_eq!(f.port_attrs(&n.name).unwrap().lmc, 1);
        }
        let c = f.cabling();
        // The switches' LIDs follow the last HCA's (n15: 32, 33).
        let sw: Vec<Option<u16>> = c.switches().iter().map(|s| s.lid).collect();
        assert_eq!(sw, [34, 35, 36, 37, 38, 39].map(Some));
        // Leaf 0 sends every other leaf's HCA's base LID up to spine 0 (port
        // 5) and base + 1 to spine 1 (port 6).
        let lids = |i: usize| vec![f.nodes()[i].lid, f.nodes()[i].lid + 1];
        let lft = c.static_lft(0, 16, lids);
        for n in &f.nodes()[4..] {
            assert!(lft.contains(&(n.lid, 5)), "{}: {lft:?}", n.name);
            assert!(lft.contains(&(n.lid + 1, 6)), "{}: {lft:?}", n.name);
        }
        // Too many LIDs, and an LMC past 7.
        let e = generate(&Topology {
            lmc: 7,
            ..fat(36, 1, 35)
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("1260 HCAs with 128 LIDs each and 37 switches need more LIDs"),
            "{e}"
        );
        let e = generate(&Topology {
            lmc: 8,
            ..fat(2, 2, 2)
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "--lmc 8: at most 7");
    }

    #[test]
    fn a_line_and_a_ring_of_switches_route_every_lid() {
        checked(&line(1, 3), 3, 1, 3);
        checked(&line(5, 2), 10, 5, 10 + 4);
        let f = checked(&ring(5, 2), 10, 5, 10 + 5);
        // The ring closes: sw4's port 4 to sw0's port 3.
        assert_eq!(
            f.cabling().peer(End::Port { switch: 4, port: 4 }),
            Some(End::Port { switch: 0, port: 3 })
        );
        // On a ring of 5 the LFT takes the short way round: sw0 reaches sw4's
        // HCAs (LIDs 9, 10) by its port 3, straight to sw4.
        let lids = |i: usize| vec![f.nodes()[i].lid];
        let lft = f.cabling().static_lft(0, 10, lids);
        assert!(lft.contains(&(9, 3)) && lft.contains(&(10, 3)), "{lft:?}");
    }

    /// Floods one multicast packet from node `from` as the static-mode
    /// switches do (out of each of `ports(switch)` but the ingress port) and
    /// counts the copies each node gets; `None` if the packet is still going
    /// round after 10000 hops (a loop).
    fn flood(
        c: &Cabling,
        nodes: usize,
        from: usize,
        ports: impl Fn(usize) -> Vec<u8>,
    ) -> Option<Vec<usize>> {
        let mut got = vec![0; nodes];
        let Some(End::Port { switch, port }) = c.peer(End::Node(from)) else {
            panic!("node {from} is not on a switch");
        };
        let mut queue = VecDeque::from([(switch, port)]);
        let mut hops = 0;
        while let Some((s, in_port)) = queue.pop_front() {
            for q in ports(s).into_iter().filter(|&q| q != in_port) {
                hops += 1;
                if hops > 10_000 {
                    return None;
                }
                match c.peer(End::Port { switch: s, port: q }) {
                    Some(End::Node(i)) => got[i] += 1,
                    Some(End::Port { switch, port }) => queue.push_back((switch, port)),
                    None => {}
                }
            }
        }
        Some(got)
    }

    #[test]
    fn static_multicast_floods_a_spanning_tree_so_loops_deliver_each_node_once() {
        for (t, nodes) in [(fat(4, 2, 4), 16), (ring(5, 2), 10), (line(3, 2), 6)] {
            let f = FabricFile::parse("gen", &generate(&t).unwrap()).unwrap();
            let c = f.cabling();
            for from in 0..nodes {
                let got = flood(c, nodes, from, |s| c.static_flood(s))
                    .unwrap_or_else(|| panic!("{t:?}: node {from}'s multicast loops"));
                let want: Vec<usize> = (0..nodes).map(|i| usize::from(i != from)).collect();
                assert_eq!(got, want, "{t:?}: from node {from}");
            }
        }
        // Why not every cabled port: the fat tree's leaf-spine-leaf-spine
        // cycles and the ring carry the packet round forever.
        for t in [fat(4, 2, 4), ring(5, 2)] {
            let f = FabricFile::parse("gen", &generate(&t).unwrap()).unwrap();
            let c = f.cabling();
            let every = |s: usize| -> Vec<u8> {
                (1..=c.switches()[s].ports)
                    .filter(|&p| c.peer(End::Port { switch: s, port: p }).is_some())
                    .collect()
            };
            assert_eq!(flood(c, f.nodes().len(), 0, every), None, "{t:?}");
        }
    }

    #[test]
    fn bad_arguments_are_one_line_errors() {
        for (t, why) in [
            (fat(0, 2, 4), "--leaves 0: at least 1"),
            (fat(2, 0, 4), "--spines 0: at least 1"),
            (fat(2, 2, 0), "--hosts-per-leaf 0: at least 1"),
            (
                fat(2, 2, 35),
                "a leaf with 35 hosts and 2 spines would need 37 ports: a switch has at most 36",
            ),
            (fat(37, 1, 1), "a spine with 37 leaves would need 37 ports"),
            (ring(2, 1), "--switches 2: at least 3"),
            (line(0, 1), "--switches 0: at least 1"),
            (line(2, 0), "--hosts 0: at least 1"),
            (line(2, 35), "would need 37 ports"),
            (
                Topology {
                    base_port: 65500,
                    ..fat(4, 2, 4)
                },
                "--base-port 65500: 48 UDP ports (16 HCAs and the switches' ports) from 65500 pass 65535; at most --base-port 65488",
            ),
            (
                Topology {
                    base_port: 0,
                    ..line(1, 1)
                },
                "--base-port 0: UDP ports start at 1",
            ),
        ] {
            let e = generate(&t).unwrap_err().to_string();
            assert!(e.contains(why) && !e.contains('\n'), "{t:?}: {e}");
        }
        // The last base port that fits does.
        let t = Topology {
            base_port: 65488,
            ..fat(4, 2, 4)
        };
        checked(&t, 16, 6, 24);
    }
}
