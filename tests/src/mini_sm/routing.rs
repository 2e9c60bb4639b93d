//! What the mini SM computes from a discovered subnet, with no I/O: LIDs,
//! min-hop linear forwarding tables and multicast spanning trees (issue 27;
//! AD-09). The shapes follow OpenSM: `osm_lid_mgr` keeps a LID a port already
//! has when it is unique and unicast and gives the others the lowest free
//! ones; `osm_ucast_mgr`'s minhop routes each LID by a shortest path and
//! spreads equally short ones by picking the port with the fewest routes so
//! far (`osm_switch_recommend_path`'s least-used port); `osm_mcast_mgr`
//! builds one tree per group from a switch in the middle of its members.

use std::collections::{BTreeMap, HashMap, VecDeque};

use transport::mad::attr::node_type;
use transport::mad::portinfo::port_state;
use transport::mad::switch_attr::SwitchInfoRepr;
use transport::mad::switch_attr::{LFT_NO_PORT, MLID_BASE};
use transport::mad::PortInfoRepr;

/// One node the sweep found by directed route.
#[derive(Debug, Clone)]
pub struct SmNode {
    pub guid: u64,
    /// `node_type::CA` or `node_type::SWITCH`.
    pub node_type: u8,
    pub num_ports: u8,
    /// The directed route from the SM's port (the ports to leave by).
    pub path: Vec<u8>,
    /// The port the SM's SMPs enter by (NodeInfo:LocalPortNum): a CA's port.
    pub entry_port: u8,
    /// PortInfo by port number (a switch's 0..=NumPorts; a CA's at its port).
    pub ports: Vec<Option<PortInfoRepr>>,
    /// The cable's other end, (node index, port), by port number.
    pub peers: Vec<Option<(usize, u8)>>,
    pub switch_info: Option<SwitchInfoRepr>,
    /// The LID the SM gave the node (a switch's port 0, a CA's port).
    pub lid: u16,
}

impl SmNode {
    pub fn is_switch(&self) -> bool {
        self.node_type == node_type::SWITCH
    }

    /// The port whose PortInfo holds the node's LID: 0 on a switch.
    pub fn lid_port(&self) -> u8 {
        if self.is_switch() {
            0
        } else {
            self.entry_port
        }
    }

    /// Whether port `p`'s link is up (Init, Armed or Active; IBA 7.2).
    pub fn port_up(&self, p: u8) -> bool {
        self.ports
            .get(usize::from(p))
            .and_then(|x| x.as_ref())
            .is_some_and(|pi| pi.port_state >= port_state::INIT)
    }
}

/// The subnet as swept: node 0 is the SM's own.
#[derive(Debug, Clone, Default)]
pub struct Subnet {
    pub nodes: Vec<SmNode>,
}

impl Subnet {
    /// The node with `guid`.
    pub fn by_guid(&self, guid: u64) -> Option<usize> {
        self.nodes.iter().position(|n| n.guid == guid)
    }

    /// The node with `lid`.
    pub fn by_lid(&self, lid: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.lid == lid)
    }

    /// The far end of node `i`'s port `p` when the link is up at both ends.
    pub fn live_peer(&self, i: usize, p: u8) -> Option<(usize, u8)> {
        let (j, q) = (*self.nodes[i].peers.get(usize::from(p))?)?;
        (self.nodes[i].port_up(p) && self.nodes[j].port_up(q)).then_some((j, q))
    }

    /// The switches, in discovery order.
    pub fn switches(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| self.nodes[i].is_switch())
    }

    /// Gives every node a LID (`osm_lid_mgr`): the one its port already has
    /// when it is unicast and no earlier node holds it, else the lowest free
    /// one. LMC 0: one LID a port.
    pub fn assign_lids(&mut self) {
        let mut taken = vec![false; usize::from(MLID_BASE)];
        taken[0] = true;
        let mut want: Vec<Option<u16>> = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let have = n.ports[usize::from(n.lid_port())]
                .as_ref()
                .map_or(0, |pi| pi.lid);
            let keep = (have != 0 && have < MLID_BASE && !taken[usize::from(have)]).then(|| {
                taken[usize::from(have)] = true;
                have
            });
            want.push(keep);
        }
        let mut next = 1usize;
        for (n, w) in self.nodes.iter_mut().zip(want) {
            n.lid = match w {
                Some(l) => l,
                None => {
                    while taken[next] {
                        next += 1;
                    }
                    taken[next] = true;
                    next as u16
                }
            };
        }
    }

    /// Hops between switches over live links: `dist[t][s]` from switch `s`
    /// to switch `t` (usize::MAX where no path), by node index.
    fn switch_distances(&self) -> HashMap<usize, HashMap<usize, usize>> {
        let mut all = HashMap::new();
        for t in self.switches() {
            let mut d = HashMap::from([(t, 0usize)]);
            let mut q = VecDeque::from([t]);
            while let Some(s) = q.pop_front() {
                for p in 1..=self.nodes[s].num_ports {
                    let Some((n, _)) = self.live_peer(s, p) else {
                        continue;
                    };
                    if self.nodes[n].is_switch() && !d.contains_key(&n) {
                        d.insert(n, d[&s] + 1);
                        q.push_back(n);
                    }
                }
            }
            all.insert(t, d);
        }
        all
    }

    /// Where each LID ends: (the switch it hangs off, the port there; 0 for
    /// the switch's own LID), for every node with a live link.
    fn lid_homes(&self) -> BTreeMap<u16, (usize, u8)> {
        let mut homes = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.is_switch() {
                homes.insert(n.lid, (i, 0));
            } else if let Some((s, p)) = self.live_peer(i, n.entry_port) {
                if self.nodes[s].is_switch() {
                    homes.insert(n.lid, (s, p));
                }
            }
        }
        homes
    }

    /// Min-hop LFTs (`osm_ucast_mgr` minhop): for each switch (by node
    /// index), entry `lid` the port of a shortest path, LIDs taken in order
    /// and equally short ports spread by the fewest routes so far (ties: the
    /// lowest port). Each table runs to the highest LID; a LID with no path
    /// is `LFT_NO_PORT`.
    pub fn min_hop_lfts(&self) -> BTreeMap<usize, Vec<u8>> {
        let dist = self.switch_distances();
        let homes = self.lid_homes();
        let top = homes.keys().next_back().copied().unwrap_or(0);
        let mut lfts = BTreeMap::new();
        for s in self.switches() {
            let mut lft = vec![LFT_NO_PORT; usize::from(top) + 1];
            let mut load = vec![0usize; usize::from(self.nodes[s].num_ports) + 1];
            for (&lid, &(t, port)) in &homes {
                if t == s {
                    lft[usize::from(lid)] = port;
                    continue;
                }
                let Some(&here) = dist[&t].get(&s) else {
                    continue; // no path: discarded
                };
                let best = (1..=self.nodes[s].num_ports)
                    .filter(|&p| {
                        self.live_peer(s, p).is_some_and(|(n, _)| {
                            self.nodes[n].is_switch() && dist[&t].get(&n) == Some(&(here - 1))
                        })
                    })
                    .min_by_key(|&p| (load[usize::from(p)], p));
                if let Some(p) = best {
                    load[usize::from(p)] += 1;
                    lft[usize::from(lid)] = p;
                }
            }
            lfts.insert(s, lft);
        }
        lfts
    }

    /// The multicast tree of a group of CAs (`osm_mcast_mgr`): rooted at the
    /// switch nearest, at its farthest, to the switches the members hang off
    /// (ties: the first found), a breadth-first tree of shortest paths from
    /// it, pruned to the branches that lead to members. Per switch (by node
    /// index) the MFT port mask (bit p: port p) for the group's MLID; a
    /// switch on no branch has none.
    pub fn mcast_masks(&self, members: &[usize]) -> BTreeMap<usize, u64> {
        let dist = self.switch_distances();
        let mut leaf_of: Vec<(usize, u8)> = Vec::new();
        for &m in members {
            if let Some((s, p)) = self.live_peer(m, self.nodes[m].entry_port) {
                leaf_of.push((s, p));
            }
        }
        let mut masks = BTreeMap::new();
        let Some(root) = self
            .switches()
            .filter(|&r| leaf_of.iter().all(|(s, _)| dist[s].contains_key(&r)))
            .min_by_key(|&r| leaf_of.iter().map(|(s, _)| dist[s][&r]).max())
        else {
            return masks;
        };
        // Parent (switch, its port down, the child's port up) by breadth-first search.
        let mut parent: HashMap<usize, (usize, u8, u8)> = HashMap::new();
        let mut seen = HashMap::from([(root, ())]);
        let mut q = VecDeque::from([root]);
        while let Some(s) = q.pop_front() {
            for p in 1..=self.nodes[s].num_ports {
                let Some((n, np)) = self.live_peer(s, p) else {
                    continue;
                };
                if self.nodes[n].is_switch() && seen.insert(n, ()).is_none() {
                    parent.insert(n, (s, p, np));
                    q.push_back(n);
                }
            }
        }
        for &(s, p) in &leaf_of {
            *masks.entry(s).or_insert(0u64) |= 1 << p;
            let mut c = s;
            while let Some(&(up, down, upport)) = parent.get(&c) {
                *masks.entry(c).or_insert(0) |= 1 << upport;
                *masks.entry(up).or_insert(0) |= 1 << down;
                c = up;
            }
        }
        masks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pi(lid: u16, state: u8) -> Option<PortInfoRepr> {
        Some(PortInfoRepr {
            lid,
            port_state: state,
            ..PortInfoRepr::default()
        })
    }

    /// A fat tree as the sweep would find it: leaves 0..l with h CAs on
    /// ports 1..=h, spine j on leaf port h+1+j and its own port i+1.
    fn fat_tree(l: usize, s: usize, h: usize) -> Subnet {
        let mut nodes = Vec::new();
        let sw = |ports: usize| SmNode {
            guid: 0,
            node_type: node_type::SWITCH,
            num_ports: ports as u8,
            path: vec![],
            entry_port: 1,
            ports: (0..=ports).map(|_| pi(0, port_state::INIT)).collect(),
            peers: vec![None; ports + 1],
            switch_info: None,
            lid: 0,
        };
        for _ in 0..l {
            nodes.push(sw(h + s));
        }
        for _ in 0..s {
            nodes.push(sw(l));
        }
        let link = |nodes: &mut Vec<SmNode>, a: (usize, u8), b: (usize, u8)| {
            nodes[a.0].peers[usize::from(a.1)] = Some(b);
            nodes[b.0].peers[usize::from(b.1)] = Some(a);
        };
        for i in 0..l {
            for j in 0..s {
                link(&mut nodes, (i, (h + 1 + j) as u8), (l + j, (i + 1) as u8));
            }
            for k in 0..h {
                let ca = nodes.len();
                nodes.push(SmNode {
                    guid: ca as u64,
                    node_type: node_type::CA,
                    num_ports: 1,
                    path: vec![],
                    entry_port: 1,
                    ports: vec![None, pi((i * h + k + 1) as u16, port_state::INIT)],
                    peers: vec![None; 2],
                    switch_info: None,
                    lid: 0,
                });
                link(&mut nodes, (ca, 1), (i, (k + 1) as u8));
            }
        }
        let mut s = Subnet { nodes };
        s.assign_lids();
        s
    }

    #[test]
    fn lids_kept_when_unique_and_the_rest_get_the_lowest_free_ones() {
        let mut t = fat_tree(2, 1, 2);
        // Two CAs claim LID 1: the second is renumbered past the kept ones.
        let ca = t.nodes.iter().rposition(|n| !n.is_switch()).unwrap();
        t.nodes[ca].ports[1].as_mut().unwrap().lid = 1;
        t.assign_lids();
        let mut lids: Vec<u16> = t.nodes.iter().map(|n| n.lid).collect();
        // The other CAs keep 1..=3; the switches, with none, get 4..=6.
        assert_eq!(lids[..3], [4, 5, 6]);
        assert_eq!(t.nodes[ca].lid, 7);
        lids.sort_unstable();
        assert_eq!(lids, (1..=7).collect::<Vec<u16>>());
    }

    #[test]
    fn min_hop_spreads_remote_lids_over_both_spines_and_keeps_local_ones() {
        let t = fat_tree(4, 2, 4);
        let lfts = t.min_hop_lfts();
        let leaf0 = &lfts[&0];
        for (lid, want) in [(1u16, 1u8), (2, 2), (3, 3), (4, 4)] {
            assert_eq!(leaf0[usize::from(lid)], want, "LID {lid}");
        }
        let remote: Vec<u8> = (5..=16).map(|l| leaf0[l]).collect();
        assert_eq!(remote.iter().filter(|&&p| p == 5).count(), 6, "{remote:?}");
        assert_eq!(remote.iter().filter(|&&p| p == 6).count(), 6, "{remote:?}");
        let own = t.nodes[0].lid;
        assert_eq!(leaf0[usize::from(own)], 0, "the switch's own LID: port 0");
        // A spine reaches leaf i's CAs by port i + 1 only.
        let spine = &lfts[&4];
        for (lid, &port) in spine.iter().enumerate().take(17).skip(1) {
            assert_eq!(port, ((lid - 1) / 4 + 1) as u8, "spine 0 to LID {lid}");
        }
    }

    #[test]
    fn min_hop_routes_around_a_dead_link() {
        let mut t = fat_tree(4, 2, 4);
        // Leaf 1's cable to spine 0 (leaf port 5) goes down.
        t.nodes[1].ports[5].as_mut().unwrap().port_state = port_state::DOWN;
        let lfts = t.min_hop_lfts();
        for lid in 5..=8 {
            let (leaf0, spine0) = (&lfts[&0], &lfts[&4]);
            assert_eq!(leaf0[lid], 6, "leaf 0 to leaf 1's LID {lid}: spine 1");
            let p = spine0[lid];
            assert!(
                p != 2 && p != LFT_NO_PORT,
                "spine 0 to LID {lid}: by another leaf, not {p}"
            );
        }
        for lid in (1..=4).chain(9..=16) {
            assert_eq!(lfts[&1][lid], 6, "leaf 1 to LID {lid}: spine 1 only");
        }
    }

    #[test]
    fn mcast_tree_reaches_the_members_only() {
        let t = fat_tree(4, 2, 4);
        // CAs are nodes 6.. in leaf order: members on leaves 0, 1, 2.
        let ca = |lid: u16| t.by_lid(lid).unwrap();
        let m = t.mcast_masks(&[ca(2), ca(6), ca(11)]);
        assert_eq!(m[&0], 1 << 2 | 1 << 5, "leaf 0: member port 2, spine 0");
        assert_eq!(m[&1], 1 << 2 | 1 << 5);
        assert_eq!(m[&2], 1 << 3 | 1 << 5);
        assert_eq!(m[&4], 0b1110, "spine 0: down to leaves 0, 1, 2");
        assert!(!m.contains_key(&3) && !m.contains_key(&5), "{m:?}");
    }
}
