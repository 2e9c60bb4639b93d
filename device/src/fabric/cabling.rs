//! Cabling in the fabric file (issue 26 item 3; ARCHITECTURE.md §6): which HCA
//! port or switch port is linked to which.
//!
//! ```toml
//! [[switch]]
//! name = "sw0"
//! guid = "0x0002c90300001000"
//! ports = 4
//! address = "127.0.0.1:19000"   # port p at UDP port 19000 + p - 1
//! # address = ["127.0.0.1:19000", "127.0.0.1:19007", ...]   # or one per port
//! # lid = 100                   # the switch's own LID in static mode
//!
//! [[link]]
//! ends = ["a", "sw0:1"]         # node a's port to switch sw0's port 1
//! ```
//!
//! A fabric with no `[[link]]` is the all-to-all fabric: every node reaches
//! every other at its address. A fabric with links is cabled: each node is on
//! exactly one link, and its port sends every packet to the other end of its
//! cable and takes datagrams only from there.
//!
//! `address` is port 1's address with the others counting up from it (a
//! 36-port switch is one line) or, when the ports' UDP ports are not
//! consecutive (tests pick free ports), an explicit list of one address per
//! port. `ports` is 1..=36: 36 is the radix of the common switch ASICs
//! (SwitchX, Switch-IB) that OpenSM and ibnetdiscover meet on real subnets,
//! and the switch process holds one socket per port; the core takes up to 254.
//!
//! Every error is one line naming the file and the switch or link.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use super::file::{parse_guid, FabricFileError, Node, MAX_UNICAST_LID};

/// The most ports a `[[switch]]` may have (module comment).
pub const MAX_SWITCH_PORTS: u8 = 36;

/// Keys a `[[switch]]` table may hold.
const SWITCH_KEYS: [&str; 5] = ["name", "guid", "ports", "address", "lid"];

/// One switch of the fabric file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchSpec {
    pub name: String,
    /// Node GUID (and every port's GUID, IBA 14.2.5.3).
    pub guid: u64,
    /// Physical ports, 1..=[`MAX_SWITCH_PORTS`].
    pub ports: u8,
    /// The UDP address of port p at index p - 1.
    pub addresses: Vec<SocketAddr>,
    /// The switch's LID (port 0) in static mode, if the file gives one.
    pub lid: Option<u16>,
}

/// One end of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum End {
    /// The one port of node `nodes()[i]`.
    Node(usize),
    /// Port `port` of switch `switches()[switch]`.
    Port { switch: usize, port: u8 },
}

/// The validated cabling.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cabling {
    switches: Vec<SwitchSpec>,
    links: Vec<(End, End)>,
    peer: HashMap<End, End>,
}

impl Cabling {
    /// Whether the fabric has links (else it is all-to-all).
    pub fn is_cabled(&self) -> bool {
        !self.links.is_empty()
    }

    pub fn switches(&self) -> &[SwitchSpec] {
        &self.switches
    }

    /// The links, in file order.
    pub fn links(&self) -> &[(End, End)] {
        &self.links
    }

    /// The switch called `name`, by index.
    pub fn switch(&self, name: &str) -> Option<(usize, &SwitchSpec)> {
        self.switches
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
    }

    /// The other end of `end`'s cable.
    pub fn peer(&self, end: End) -> Option<End> {
        self.peer.get(&end).copied()
    }

    /// The UDP address of `end`.
    pub fn address(&self, nodes: &[Node], end: End) -> Option<SocketAddr> {
        match end {
            End::Node(i) => nodes.get(i).map(|n| n.address),
            End::Port { switch, port } => self
                .switches
                .get(switch)?
                .addresses
                .get(usize::from(port).checked_sub(1)?)
                .copied(),
        }
    }

    /// The egress port of switch `s` toward every LID of the fabric (static
    /// mode, no SM): a breadth-first search over the switches from each
    /// node's cable (and from each switch that has a LID), so each LID leaves
    /// by a port of a shortest path. Where several ports start a shortest path
    /// (a fat tree's spines) the LIDs are spread over them: node i's j-th LID
    /// (`lids(i)`, 2^LMC of them from its base, AD-01) takes the
    /// ((i * 2^LMC + j) mod n)-th of the n ports. With LMC 0 that is node i
    /// by the (i mod n)-th, so a leaf's uplinks share the load as an SM's
    /// min-hop balancing would instead of all traffic crossing the first spine
    /// (issue 27). With 2^LMC a multiple of n, LID base + j of every node
    /// crosses the (j mod n)-th of the n ports from every switch, as OpenSM's
    /// ftree and updn give an LMC port disjoint paths: a connection between
    /// base LIDs has its requests and its ACKs on one spine and one between
    /// base + 1 LIDs on the next, so an alternate path (AD-10) on the other
    /// LIDs survives the loss of the primary path's spine. Every hop gets one
    /// nearer the destination, so no route loops. A LID not reachable from
    /// `s` has no entry. The switch's own LID maps to port 0.
    pub fn static_lft(
        &self,
        s: usize,
        nodes: usize,
        lids: impl Fn(usize) -> Vec<u16>,
    ) -> Vec<(u16, u8)> {
        let mut out = Vec::new();
        for i in 0..nodes {
            if let Some(End::Port { switch, port }) = self.peer(End::Node(i)) {
                let next = self.shortest_next(s, switch, port);
                let lids = lids(i);
                let per_node = lids.len();
                for (j, l) in lids.into_iter().enumerate() {
                    if let Some(&p) = next.get((i * per_node + j) % next.len().max(1)) {
                        out.push((l, p));
                    }
                }
            }
        }
        for (t, sw) in self.switches.iter().enumerate() {
            if let Some(lid) = sw.lid {
                let next = self.shortest_next(s, t, 0);
                if let Some(&p) = next.get(t % next.len().max(1)) {
                    out.push((lid, p));
                }
            }
        }
        out
    }

    /// The ports switch `s` floods multicast out of in static mode (no SM to
    /// program the MFT): every port cabled to a node, and of the switch-to-
    /// switch cables only those on one spanning tree of the switches (a
    /// breadth-first tree from the lowest-numbered switch of each connected
    /// part). A switch never sends a packet back out of its ingress port, so
    /// on a tree each node gets each multicast packet once; flooding every
    /// cabled port instead would send it round a ring or a fat tree's
    /// leaf-spine loops forever (LRH has no hop count, IBA 7.7; issue 27).
    pub fn static_flood(&self, s: usize) -> Vec<u8> {
        let n = self.switches.len();
        let mut seen = vec![false; n];
        let mut tree: Vec<End> = Vec::new();
        for root in 0..n {
            if seen[root] {
                continue;
            }
            seen[root] = true;
            let mut queue = VecDeque::from([root]);
            while let Some(u) = queue.pop_front() {
                for p in 1..=self.switches[u].ports {
                    let here = End::Port { switch: u, port: p };
                    if let Some(there @ End::Port { switch: v, .. }) = self.peer(here) {
                        if !seen[v] {
                            seen[v] = true;
                            tree.extend([here, there]);
                            queue.push_back(v);
                        }
                    }
                }
            }
        }
        let Some(spec) = self.switches.get(s) else {
            return Vec::new();
        };
        (1..=spec.ports)
            .filter(|&p| {
                let here = End::Port { switch: s, port: p };
                match self.peer(here) {
                    Some(End::Node(_)) => true,
                    Some(End::Port { .. }) => tree.contains(&here),
                    None => false,
                }
            })
            .collect()
    }

    /// The ports of switch `s` that start a shortest path toward port `port`
    /// of switch `dest` (0: the switch itself), in port order; none if no
    /// cable leads there.
    fn shortest_next(&self, s: usize, dest: usize, port: u8) -> Vec<u8> {
        if s == dest {
            return vec![port];
        }
        let dist = self.hops_from(dest);
        let Some(d) = dist.get(s).copied().flatten() else {
            return Vec::new();
        };
        (1..=self.switches[s].ports)
            .filter(|&p| {
                matches!(
                    self.peer(End::Port { switch: s, port: p }),
                    Some(End::Port { switch: v, .. }) if dist[v] == Some(d - 1)
                )
            })
            .collect()
    }

    /// Every switch's distance in switch-to-switch hops from switch `dest`
    /// (breadth-first), `None` where no cable leads.
    fn hops_from(&self, dest: usize) -> Vec<Option<usize>> {
        let mut dist: Vec<Option<usize>> = vec![None; self.switches.len()];
        dist[dest] = Some(0);
        let mut queue = VecDeque::from([dest]);
        while let Some(u) = queue.pop_front() {
            let du = dist[u].unwrap_or(0);
            for p in 1..=self.switches[u].ports {
                if let Some(End::Port { switch: v, .. }) =
                    self.peer(End::Port { switch: u, port: p })
                {
                    if dist[v].is_none() {
                        dist[v] = Some(du + 1);
                        queue.push_back(v);
                    }
                }
            }
        }
        dist
    }
}

fn err(file: &str, what: String) -> FabricFileError {
    FabricFileError::Cabling {
        file: file.to_string(),
        what,
    }
}

/// Reads `[[switch]]` and `[[link]]` from the fabric file's top-level table,
/// given its validated nodes.
pub(super) fn parse(
    file: &str,
    table: &toml::Table,
    nodes: &[Node],
) -> Result<Cabling, FabricFileError> {
    let tables = |key: &str| -> Result<Vec<&toml::Table>, FabricFileError> {
        match table.get(key) {
            None => Ok(Vec::new()),
            Some(toml::Value::Array(a)) => a
                .iter()
                .map(|v| v.as_table())
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    err(
                        file,
                        format!("`{key}` must be an array of tables, written [[{key}]]"),
                    )
                }),
            Some(_) => Err(err(
                file,
                format!("`{key}` must be an array of tables, written [[{key}]]"),
            )),
        }
    };
    let mut switches: Vec<SwitchSpec> = Vec::new();
    for (i, t) in tables("switch")?.into_iter().enumerate() {
        let sw = switch_from_toml(file, i, t)?;
        let bad = |what: String| err(file, format!("switch {:?}: {what}", sw.name));
        if nodes.iter().any(|n| n.name == sw.name) || switches.iter().any(|s| s.name == sw.name) {
            return Err(bad("name already taken by another node or switch".into()));
        }
        if let Some(n) = nodes.iter().find(|n| n.guid == sw.guid) {
            return Err(bad(format!(
                "GUID {:#018x} is already node {:?}'s",
                sw.guid, n.name
            )));
        }
        if let Some(o) = switches.iter().find(|s| s.guid == sw.guid) {
            return Err(bad(format!(
                "GUID {:#018x} is already switch {:?}'s",
                sw.guid, o.name
            )));
        }
        if let Some(lid) = sw.lid {
            if let Some(n) = nodes.iter().find(|n| n.lid == lid) {
                return Err(bad(format!("LID {lid:#x} is already node {:?}'s", n.name)));
            }
            if let Some(o) = switches.iter().find(|s| s.lid == Some(lid)) {
                return Err(bad(format!(
                    "LID {lid:#x} is already switch {:?}'s",
                    o.name
                )));
            }
        }
        for (p, a) in sw.addresses.iter().enumerate() {
            let other = nodes
                .iter()
                .find(|n| n.address == *a)
                .map(|n| format!("node {:?}", n.name))
                .or_else(|| {
                    switches
                        .iter()
                        .find(|s| s.addresses.contains(a))
                        .map(|s| format!("switch {:?}", s.name))
                });
            let twice = sw.addresses[..p]
                .contains(a)
                .then(|| "another of its ports".to_string());
            if let Some(o) = other.or(twice) {
                return Err(bad(format!(
                    "port {}'s UDP address {a} is already {o}'s",
                    p + 1
                )));
            }
        }
        switches.push(sw);
    }
    let mut c = Cabling {
        switches,
        ..Cabling::default()
    };
    let mut first: HashMap<End, usize> = HashMap::new();
    for (i, t) in tables("link")?.into_iter().enumerate() {
        let text = t.get("ends").map_or("(no ends)".into(), show);
        let bad = |what: String| err(file, format!("link #{} {text}: {what}", i + 1));
        if let Some(k) = t.keys().find(|k| *k != "ends") {
            return Err(bad(format!("unknown key `{k}` (known: ends)")));
        }
        let ends = t
            .get("ends")
            .and_then(|v| v.as_array())
            .filter(|a| a.len() == 2)
            .and_then(|a| Some([a[0].as_str()?, a[1].as_str()?]))
            .ok_or_else(|| {
                bad("`ends` must be two strings: a node's name or a switch's \"name:port\"".into())
            })?;
        let mut pair = [End::Node(0); 2];
        for (slot, e) in pair.iter_mut().zip(ends) {
            *slot = c
                .end(e, nodes)
                .map_err(|w| bad(format!("end {e:?}: {w}")))?;
        }
        let same_box = match pair {
            [End::Node(a), End::Node(b)] => a == b,
            [End::Port { switch: a, .. }, End::Port { switch: b, .. }] => a == b,
            _ => false,
        };
        if same_box {
            return Err(bad("links a node or switch to itself".into()));
        }
        for (e, name) in pair.iter().zip(ends) {
            if let Some(j) = first.get(e) {
                return Err(bad(format!(
                    "end {name:?} is already cabled by link #{}",
                    j + 1
                )));
            }
            first.insert(*e, i);
        }
        c.peer.insert(pair[0], pair[1]);
        c.peer.insert(pair[1], pair[0]);
        c.links.push((pair[0], pair[1]));
    }
    if c.is_cabled() {
        if let Some(n) = (0..nodes.len()).find(|&i| c.peer(End::Node(i)).is_none()) {
            return Err(err(
                file,
                format!(
                    "node {:?} is on no [[link]]: in a cabled fabric every node is on exactly one",
                    nodes[n].name
                ),
            ));
        }
    } else if let Some(s) = c.switches.first() {
        return Err(err(
            file,
            format!(
                "switch {:?} is on no [[link]]: cable it (a fabric without links is all-to-all)",
                s.name
            ),
        ));
    }
    Ok(c)
}

impl Cabling {
    /// The end a link names: a node's name, or a switch's `name:port`.
    fn end(&self, text: &str, nodes: &[Node]) -> Result<End, String> {
        if let Some(i) = nodes.iter().position(|n| n.name == text) {
            return Ok(End::Node(i));
        }
        let Some((name, port)) = text.rsplit_once(':') else {
            return Err(match self.switch(text) {
                Some(_) => "a switch end names its port: \"switch:port\"".into(),
                None => "no node or switch of that name".into(),
            });
        };
        let Some((s, sw)) = self.switch(name) else {
            return Err(format!("no switch {name:?}"));
        };
        match port.trim().parse::<u8>() {
            Ok(p) if (1..=sw.ports).contains(&p) => Ok(End::Port { switch: s, port: p }),
            _ => Err(format!(
                "port {port:?} is not one of switch {name:?}'s ports 1..={}",
                sw.ports
            )),
        }
    }
}

/// One `[[switch]]` table.
fn switch_from_toml(file: &str, i: usize, t: &toml::Table) -> Result<SwitchSpec, FabricFileError> {
    let name = t
        .get("name")
        .and_then(|v| v.as_str())
        .unwrap_or("")
        .to_string();
    let label = if name.is_empty() {
        format!("#{}", i + 1)
    } else {
        format!("{name:?}")
    };
    let bad = |what: String| err(file, format!("switch {label}: {what}"));
    if let Some(k) = t.keys().find(|k| !SWITCH_KEYS.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown key `{k}` (known: {})",
            SWITCH_KEYS.join(", ")
        )));
    }
    for k in ["name", "guid", "ports", "address"] {
        if !t.contains_key(k) {
            return Err(bad(format!("missing key `{k}`")));
        }
    }
    if name.is_empty() || name.contains(':') {
        return Err(bad("`name` must be a non-empty string without ':'".into()));
    }
    let guid = match &t["guid"] {
        toml::Value::Integer(g) => u64::try_from(*g).ok(),
        toml::Value::String(s) => parse_guid(s),
        _ => None,
    }
    .filter(|&g| g != 0)
    .ok_or_else(|| {
        bad(format!(
            "bad GUID {}: a nonzero EUI-64, as for a node",
            show(&t["guid"])
        ))
    })?;
    let ports = t["ports"]
        .as_integer()
        .and_then(|p| u8::try_from(p).ok())
        .filter(|p| (1..=MAX_SWITCH_PORTS).contains(p))
        .ok_or_else(|| {
            bad(format!(
                "ports = {}: a switch has 1..={MAX_SWITCH_PORTS} ports",
                show(&t["ports"])
            ))
        })?;
    let addr = |v: &toml::Value| -> Result<SocketAddr, FabricFileError> {
        let a: SocketAddr = v
            .as_str()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                bad(format!(
                    "bad UDP address {}: ip:port (IPv6 as [ip]:port)",
                    show(v)
                ))
            })?;
        if a.port() == 0 || a.ip().is_unspecified() || a.ip().is_multicast() {
            return Err(bad(format!("UDP address {a} cannot be sent to")));
        }
        Ok(a)
    };
    let addresses = match &t["address"] {
        toml::Value::Array(list) => {
            if list.len() != usize::from(ports) {
                return Err(bad(format!("{} addresses for {ports} ports", list.len())));
            }
            list.iter().map(addr).collect::<Result<Vec<_>, _>>()?
        }
        v => {
            let base = addr(v)?;
            if u32::from(base.port()) + u32::from(ports) - 1 > u32::from(u16::MAX) {
                return Err(bad(format!("ports from {base} on pass UDP port 65535")));
            }
            (0..u16::from(ports))
                .map(|p| SocketAddr::new(base.ip(), base.port() + p))
                .collect()
        }
    };
    let lid = match t.get("lid") {
        None => None,
        Some(v) => Some(
            v.as_integer()
                .and_then(|l| u16::try_from(l).ok())
                .filter(|l| (1..=MAX_UNICAST_LID).contains(l))
                .ok_or_else(|| bad(format!("lid = {}: a unicast LID, 1..=0xBFFF", show(v))))?,
        ),
    };
    Ok(SwitchSpec {
        name,
        guid,
        ports,
        addresses,
        lid,
    })
}

/// A TOML value as the file wrote it, for errors (strings quoted, arrays of
/// them), or its type.
fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        other => format!("a {}", other.type_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::FabricFile;
    use super::*;

    /// Nodes a, b, c and a 4-port switch sw0 at 127.0.0.1:19000..=19003.
    const BASE: &str = r#"
[[node]]
name = "a"
lid = 1
guid = 1
address = "127.0.0.1:18001"
[[node]]
name = "b"
lid = 2
guid = 2
address = "127.0.0.1:18002"
[[node]]
name = "c"
lid = 3
guid = 3
address = "127.0.0.1:18003"
"#;
    const SW: &str = r#"
[[switch]]
name = "sw0"
guid = "0x100"
ports = 4
address = "127.0.0.1:19000"
"#;

    fn link(a: &str, b: &str) -> String {
        format!("[[link]]\nends = [\"{a}\", \"{b}\"]\n")
    }

    fn star() -> String {
        format!(
            "{BASE}{SW}{}{}{}",
            link("a", "sw0:1"),
            link("b", "sw0:2"),
            link("c", "sw0:4")
        )
    }

    /// Asserts `text` is refused with one line starting `f: ` that holds `why`.
    fn refused(text: &str, why: &str) {
        let e = FabricFile::parse("f", text).unwrap_err().to_string();
        assert!(
            e.starts_with("f: ") && e.contains(why) && !e.contains('\n'),
            "{e}"
        );
    }

    #[test]
    fn no_link_is_the_all_to_all_fabric() {
        let f = FabricFile::parse("f", BASE).unwrap();
        assert!(!f.cabling().is_cabled());
        assert!(f.cabling().switches().is_empty());
    }

    #[test]
    fn a_star_cables_each_node_to_its_switch_port() {
        let f = FabricFile::parse("f", &star()).unwrap();
        let c = f.cabling();
        assert!(c.is_cabled());
        let sw = &c.switches()[0];
        assert_eq!(sw.ports, 4);
        assert_eq!(sw.addresses[3], "127.0.0.1:19003".parse().unwrap());
        assert_eq!(c.peer(End::Node(2)), Some(End::Port { switch: 0, port: 4 }));
        assert_eq!(c.peer(End::Port { switch: 0, port: 1 }), Some(End::Node(0)));
        assert_eq!(c.peer(End::Port { switch: 0, port: 3 }), None);
        assert_eq!(
            c.address(f.nodes(), End::Port { switch: 0, port: 2 }),
            Some("127.0.0.1:19001".parse().unwrap())
        );
        let lids = |i: usize| vec![f.nodes()[i].lid];
        let mut lft = c.static_lft(0, 3, lids);
        lft.sort();
        assert_eq!(lft, vec![(1, 1), (2, 2), (3, 4)]);
    }

    #[test]
    fn an_address_list_names_each_port() {
        let sw = SW.replace(
            "address = \"127.0.0.1:19000\"",
            "address = [\"127.0.0.1:19000\", \"127.0.0.1:19010\", \"127.0.0.1:19005\", \"127.0.0.1:19020\"]",
        );
        let f = FabricFile::parse(
            "f",
            &format!(
                "{BASE}{sw}{}{}{}",
                link("a", "sw0:1"),
                link("b", "sw0:2"),
                link("c", "sw0:4")
            ),
        )
        .unwrap();
        assert_eq!(
            f.cabling().switches()[0].addresses[1],
            "127.0.0.1:19010".parse().unwrap()
        );
        let short = SW.replace(
            "address = \"127.0.0.1:19000\"",
            "address = [\"127.0.0.1:19000\"]",
        );
        refused(
            &format!("{BASE}{short}"),
            "switch \"sw0\": 1 addresses for 4 ports",
        );
    }

    #[test]
    fn static_lft_takes_the_shortest_path_over_switches() {
        // a - sw0 - sw1 - b, and c on sw1; sw1 has LID 9.
        let text = format!(
            "{BASE}{SW}[[switch]]\nname = \"sw1\"\nguid = 0x200\nports = 3\naddress = \"127.0.0.1:19100\"\nlid = 9\n{}{}{}{}",
            link("a", "sw0:1"),
            link("sw0:4", "sw1:1"),
            link("b", "sw1:2"),
            link("c", "sw1:3"),
        );
        let f = FabricFile::parse("f", &text).unwrap();
        let c = f.cabling();
        let lids = |i: usize| vec![f.nodes()[i].lid];
        let mut lft0 = c.static_lft(0, 3, lids);
        lft0.sort();
        assert_eq!(lft0, vec![(1, 1), (2, 4), (3, 4), (9, 4)]);
        let mut lft1 = c.static_lft(1, 3, lids);
        lft1.sort();
        assert_eq!(lft1, vec![(1, 1), (2, 2), (3, 3), (9, 0)]);
    }

    /// The switches a packet to `dlid` crosses from node `from`, following
    /// each switch's static LFT hop by hop (`None` if it is dropped or loops).
    fn trace(f: &FabricFile, from: usize, dlid: u16) -> Option<Vec<String>> {
        let c = f.cabling();
        let lids = |i: usize| -> Vec<u16> {
            let n = &f.nodes()[i];
            f.port_attrs(&n.name).unwrap().lids(n.lid).collect()
        };
        let mut at = c.peer(End::Node(from))?;
        let mut path = Vec::new();
        while let End::Port { switch, .. } = at {
            path.push(c.switches()[switch].name.clone());
            if path.len() > c.switches().len() {
                return None;
            }
            let lft = c.static_lft(switch, f.nodes().len(), lids);
            let &(_, out) = lft.iter().find(|&&(l, _)| l == dlid)?;
            at = c.peer(End::Port { switch, port: out })?;
        }
        // Delivered to the node that owns `dlid`.
        let End::Node(i) = at else { return None };
        lids(i).contains(&dlid).then_some(path)
    }

    #[test]
    fn ad_01_static_lft_sends_an_lmc_ports_lids_through_disjoint_spines_both_ways() {
        // Two leaves, two spines; a (LIDs 2, 3) on leaf0, b (LIDs 4, 5) on
        // leaf1, c (LIDs 8..=11, LMC 2) on leaf1.
        let text = format!(
            "{}{}{}{}{}{}{}{}{}{}{}",
            BASE.replace("lid = 1\n", "lid = 2\nlmc = 1\n")
                .replace("lid = 2\nguid = 2", "lid = 4\nlmc = 1\nguid = 2")
                .replace("lid = 3\n", "lid = 8\nlmc = 2\n"),
            "[[switch]]\nname = \"leaf0\"\nguid = 0x100\nports = 3\naddress = \"127.0.0.1:19000\"\n",
            "[[switch]]\nname = \"leaf1\"\nguid = 0x101\nports = 4\naddress = \"127.0.0.1:19010\"\n",
            "[[switch]]\nname = \"spine0\"\nguid = 0x102\nports = 2\naddress = \"127.0.0.1:19020\"\n",
            "[[switch]]\nname = \"spine1\"\nguid = 0x103\nports = 2\naddress = \"127.0.0.1:19030\"\n",
            link("a", "leaf0:1"),
            link("b", "leaf1:1"),
            link("c", "leaf1:4"),
            link("leaf0:2", "spine0:1") + &link("leaf1:2", "spine0:2"),
            link("leaf0:3", "spine1:1"),
            link("leaf1:3", "spine1:2"),
        );
        let f = FabricFile::parse("f", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let via = |from: usize, dlid: u16| trace(&f, from, dlid).map(|p| p.join(" "));
        // Base LIDs cross spine 0 and base + 1 spine 1, each way: the
        // requests and the ACKs of a connection share a spine, and its other
        // LIDs' path shares none of them.
        for (from, dlid, want) in [
            (0, 4, "leaf0 spine0 leaf1"),
            (0, 5, "leaf0 spine1 leaf1"),
            (1, 2, "leaf1 spine0 leaf0"),
            (1, 3, "leaf1 spine1 leaf0"),
            (0, 8, "leaf0 spine0 leaf1"),
            (0, 9, "leaf0 spine1 leaf1"),
            (0, 10, "leaf0 spine0 leaf1"),
            (0, 11, "leaf0 spine1 leaf1"),
            (2, 2, "leaf1 spine0 leaf0"),
            (2, 3, "leaf1 spine1 leaf0"),
            (1, 8, "leaf1"),
        ] {
            assert_eq!(via(from, dlid).as_deref(), Some(want), "{from} -> {dlid}");
        }
    }

    #[test]
    fn two_hcas_back_to_back_need_no_switch() {
        let text = format!("{BASE}{}", link("a", "b")).replace("name = \"c\"", "name = \"c\"");
        refused(
            &text,
            "node \"c\" is on no [[link]]: in a cabled fabric every node is on exactly one",
        );
        let two = BASE
            .split("[[node]]\nname = \"c\"")
            .next()
            .unwrap()
            .to_string();
        let f = FabricFile::parse("f", &format!("{two}{}", link("a", "b"))).unwrap();
        assert_eq!(f.cabling().peer(End::Node(0)), Some(End::Node(1)));
    }

    #[test]
    fn every_link_error_is_one_line_naming_the_link() {
        let s = format!("{BASE}{SW}");
        let rest = format!("{}{}", link("b", "sw0:2"), link("c", "sw0:4"));
        // An end used twice.
        refused(
            &format!("{s}{}{}{rest}", link("a", "sw0:1"), link("sw0:1", "sw0:3"))
                .replace("sw0:3", "b"),
            "link #2 [\"sw0:1\", \"b\"]: end \"sw0:1\" is already cabled by link #1",
        );
        refused(
            &format!("{s}{}{}{rest}", link("a", "sw0:1"), link("a", "sw0:3")),
            "end \"a\" is already cabled by link #1",
        );
        // Unknown node or switch.
        refused(
            &format!("{s}{}{rest}", link("x", "sw0:1")),
            "link #1 [\"x\", \"sw0:1\"]: end \"x\": no node or switch of that name",
        );
        refused(
            &format!("{s}{}{rest}", link("a", "sw9:1")),
            "end \"sw9:1\": no switch \"sw9\"",
        );
        refused(
            &format!("{s}{}{rest}", link("a", "sw0")),
            "end \"sw0\": a switch end names its port",
        );
        // A port out of range.
        refused(
            &format!("{s}{}{rest}", link("a", "sw0:5")),
            "end \"sw0:5\": port \"5\" is not one of switch \"sw0\"'s ports 1..=4",
        );
        refused(
            &format!("{s}{}{rest}", link("a", "sw0:0")),
            "port \"0\" is not one of",
        );
        // A link to itself.
        refused(
            &format!("{s}{}{}{rest}", link("a", "sw0:1"), link("sw0:3", "sw0:3")),
            "link #2 [\"sw0:3\", \"sw0:3\"]: links a node or switch to itself",
        );
        refused(
            &format!("{s}{}{}{rest}", link("a", "sw0:1"), link("sw0:3", "sw0:4")),
            "links a node or switch to itself",
        );
        refused(
            &format!("{BASE}{}", link("a", "a")),
            "link #1 [\"a\", \"a\"]: links a node or switch to itself",
        );
        // Not two string ends, an unknown key.
        refused(
            &format!("{s}[[link]]\nends = [\"a\"]\n{rest}"),
            "link #1 [\"a\"]: `ends` must be two strings",
        );
        refused(
            &format!("{s}[[link]]\nends = [\"a\", \"sw0:1\"]\nspeed = 4\n{rest}"),
            "unknown key `speed`",
        );
        // A node on no link.
        refused(&format!("{s}{rest}"), "node \"a\" is on no [[link]]");
        refused(&format!("{BASE}{SW}"), "switch \"sw0\" is on no [[link]]");
        refused(
            &format!("link = 1\n{BASE}"),
            "`link` must be an array of tables",
        );
    }

    #[test]
    fn every_switch_error_is_one_line_naming_the_switch() {
        let cabled = |sw: &str| {
            format!(
                "{BASE}{sw}{}{}{}",
                link("a", "sw0:1"),
                link("b", "sw0:2"),
                link("c", "sw0:4")
            )
        };
        for (from, to, why) in [
            (
                "ports = 4",
                "ports = 37",
                "switch \"sw0\": ports = 37: a switch has 1..=36 ports",
            ),
            (
                "ports = 4",
                "ports = 0",
                "ports = 0: a switch has 1..=36 ports",
            ),
            ("guid = \"0x100\"", "guid = 0", "switch \"sw0\": bad GUID 0"),
            (
                "guid = \"0x100\"",
                "guid = 2",
                "GUID 0x0000000000000002 is already node \"b\"'s",
            ),
            ("name = \"sw0\"", "name = \"a\"", "name already taken"),
            (
                "address = \"127.0.0.1:19000\"",
                "address = \"127.0.0.1:18002\"",
                "port 1's UDP address 127.0.0.1:18002 is already node \"b\"'s",
            ),
            (
                "address = \"127.0.0.1:19000\"",
                "address = \"127.0.0.1:65534\"",
                "pass UDP port 65535",
            ),
            (
                "address = \"127.0.0.1:19000\"",
                "address = \"nowhere\"",
                "bad UDP address \"nowhere\"",
            ),
            (
                "ports = 4",
                "ports = 4\nlid = 2",
                "LID 0x2 is already node \"b\"'s",
            ),
            (
                "ports = 4",
                "ports = 4\nlid = 49152",
                "lid = 49152: a unicast LID",
            ),
            (
                "ports = 4",
                "ports = 4\nspeed = 1",
                "switch \"sw0\": unknown key `speed`",
            ),
            ("ports = 4\n", "", "switch \"sw0\": missing key `ports`"),
        ] {
            refused(&cabled(&SW.replace(from, to)), why);
        }
    }
}
