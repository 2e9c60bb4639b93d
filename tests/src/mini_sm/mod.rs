//! A small subnet manager in the test driver (issue 27; AD-09), on the QP0
//! of one `vhca` node, for fabrics whose file says `subnet = "sm"`.
//!
//! One sweep does what OpenSM's first heavy sweep does (`osm_state_mgr`):
//! - discovery by directed route, breadth-first from the SM's own port
//!   (hop count 0 through MAD_IFC, as ib_core hands its own port's SMPs to
//!   the device): NodeInfo of every node, SwitchInfo and PortInfo of every
//!   switch port (0..=NumPorts), PortInfo of every CA port, the cables from
//!   NodeInfo:LocalPortNum at each end;
//! - LIDs, min-hop LFTs and multicast trees ([`routing`]);
//! - the Sets (`osm_link_mgr`, `osm_ucast_mgr`, `osm_mcast_mgr`): LID, SM
//!   LID and SL on every CA and switch port 0, SwitchInfo (LinearFDBTop,
//!   MulticastFDBTop, PortStateChange cleared), every LFT and MFT block,
//!   then every live port Init -> Armed -> Active.
//!
//! Bounded: every SMP waits [`Qp0::timeout`] for its answer and is sent at
//! most [`Qp0::tries`] times; a missing answer or a bad status is an
//! [`SmError`] naming the attribute and the DR path. Traps that arrive
//! meanwhile (a switch's trap 128) are kept for [`MiniSm::wait_trap`] and
//! repressed (IBA 13.4.8.1: by the trap's TID) so that their sender stops
//! resending.

mod routing;

pub use routing::{SmNode, Subnet};

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use device::abi::cmd::{mad_ifc_flag, MadIfcIn, MadIfcOut, Opcode};
use device::abi::verbs::{QpType, WcOpcode};
use transport::mad::attr::{node_type, NodeInfoRepr, NoticeRepr};
use transport::mad::dr::hca_send;
use transport::mad::portinfo::{phys_state, port_state};
use transport::mad::switch_attr::{
    LftBlock, MftBlock, MftModifier, SwitchInfoRepr, LFT_BLOCK_LIDS, LFT_NO_PORT, MFT_BLOCK_MLIDS,
    MFT_POSITION_PORTS, MLID_BASE,
};
use transport::mad::{
    attr_id, method, status, DrFields, HcaSend, PortInfoRepr, Smp, SmpRepr, SmpRoute, MAD_LEN,
    PERMISSIVE_LID,
};

use crate::fixture::{assert_success, Node, Region};
use crate::guest::Layout;
use crate::hca::{ConnOpts, CqH, Hca, QpH, QpInit};
use crate::verbs::{ud_dest, RecvWr, SendWr};

/// Receive buffers on the SM's QP0 (each a slot of [`SLOT`] bytes).
const RECV_SLOTS: usize = 16;
/// A slot: the 40-byte GRH room of a UD receive, then the MAD.
const SLOT: usize = 512;
const GRH: usize = 40;
/// wr_id of every send (receives count from 0).
const SEND_ID: u64 = u64::MAX;

/// Where an SMP goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dest {
    /// Directed route along these ports from the SM's port (empty: its own).
    Dr(Vec<u8>),
    /// LID-routed to this LID.
    Lid(u16),
}

impl fmt::Display for Dest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dest::Dr(p) => write!(f, "DR path {p:?}"),
            Dest::Lid(l) => write!(f, "LID {l:#x}"),
        }
    }
}

/// An SMP that got no good answer: which, where, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmError(pub String);

impl fmt::Display for SmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SmError {}

/// A trap that reached the SM: the notice and the LID it came from.
#[derive(Debug, Clone, Copy)]
pub struct Trap {
    pub notice: NoticeRepr,
    pub slid: u16,
}

/// The SM's QP0 on its node: SMPs out, answers and traps in.
pub struct Qp0 {
    qp: QpH,
    cq: CqH,
    buf: Region,
    posted: u64,
    next_tid: u64,
    /// How long one try waits for its answer.
    pub timeout: Duration,
    /// Sends of one SMP at most.
    pub tries: u32,
    traps: VecDeque<Trap>,
    /// TrapRepresses to send: the MAD and the trap's sender.
    represses: Vec<([u8; MAD_LEN], u16)>,
    /// What went through: requests, resends, answers that matched no
    /// request (a late answer to a resent one), traps.
    pub sent: u64,
    pub resent: u64,
    pub stale: u64,
    pub traps_seen: u64,
}

impl Qp0 {
    /// QP0 of `node` to RTS with its own CQ (the node's CQ stays the test's),
    /// its receives posted.
    pub fn new(node: &mut Node) -> Qp0 {
        let cq = node.hca.create_cq(8, 0).expect("CREATE_CQ for QP0");
        let qp = node
            .hca
            .create_qp(&QpInit::new(QpType::Smi, node.pd, cq))
            .expect("QP0");
        assert_eq!(qp.qpn, 0, "the SMI's QP is QP0");
        node.hca
            .qp_to_rts_from_reset(qp, None, &ConnOpts::default())
            .expect("QP0 to RTS");
        let buf = node.region((RECV_SLOTS + 1) * SLOT, Layout::Contiguous, 0);
        let mut q = Qp0 {
            qp,
            cq,
            buf,
            posted: 0,
            next_tid: 0x2700_0000_0000,
            timeout: Duration::from_millis(500),
            tries: 4,
            traps: VecDeque::new(),
            represses: Vec::new(),
            sent: 0,
            resent: 0,
            stale: 0,
            traps_seen: 0,
        };
        for _ in 0..RECV_SLOTS {
            q.post_recv(&mut node.hca);
        }
        q
    }

    fn post_recv(&mut self, hca: &mut Hca) {
        let slot = (self.posted % RECV_SLOTS as u64) as usize;
        let sge = self.buf.mr.sge(&self.buf.buf, (slot + 1) * SLOT, SLOT);
        hca.post_recv(self.qp, &RecvWr::new(self.posted, vec![sge]))
            .expect("post a QP0 receive");
        self.posted += 1;
    }

    /// Sends one MAD out of QP0 to `dlid` (0xFFFF for a directed route) and
    /// waits for the send's completion; answers that arrive meanwhile go to
    /// `got`.
    fn send(
        &mut self,
        hca: &mut Hca,
        mad: &[u8; MAD_LEN],
        dlid: u16,
        got: &mut Vec<SmpRepr>,
    ) -> Result<(), SmError> {
        hca.guest().buf_write(&self.buf.buf, 0, mad);
        let w = SendWr::send(SEND_ID)
            .sge(self.buf.mr.sge(&self.buf.buf, 0, MAD_LEN))
            .ud(ud_dest(dlid, 0, 0));
        hca.post_send(self.qp, &w)
            .map_err(|e| SmError(format!("post on QP0: {e:?}")))?;
        let deadline = Instant::now() + self.timeout;
        while !self.poll(hca, deadline, got) {
            if Instant::now() >= deadline {
                return Err(SmError(format!(
                    "QP0's send to LID {dlid:#x} did not complete in {:?}",
                    self.timeout
                )));
            }
        }
        Ok(())
    }

    /// Takes what QP0's CQ has until `deadline` (or the first completion):
    /// answers into `got`; traps kept, their TrapRepress queued. True once a
    /// send completed.
    fn poll(&mut self, hca: &mut Hca, deadline: Instant, got: &mut Vec<SmpRepr>) -> bool {
        let wait = deadline.saturating_duration_since(Instant::now());
        let mut sent = false;
        for c in hca.wait_cqes(self.cq, 1, wait) {
            assert_success(&[c]);
            if c.wr_id == SEND_ID {
                sent = true;
                continue;
            }
            assert_eq!(c.opcode, WcOpcode::Recv as u8);
            let slot = (c.wr_id % RECV_SLOTS as u64) as usize;
            let b = hca
                .guest()
                .buf_read(&self.buf.buf, (slot + 1) * SLOT + GRH, MAD_LEN);
            self.post_recv(hca);
            let Some(smp) = Smp::new_checked(&b[..])
                .ok()
                .and_then(|v| SmpRepr::parse(&v).ok())
            else {
                self.stale += 1;
                continue;
            };
            if smp.method == method::TRAP {
                self.traps_seen += 1;
                if let Ok(notice) = NoticeRepr::parse(&smp.data) {
                    self.traps.push_back(Trap {
                        notice,
                        slid: c.slid,
                    });
                }
                // IBA 13.4.8.1: the SM answers a trap with TrapRepress, the
                // same TID and attribute, LID-routed back to its sender.
                let repress = SmpRepr {
                    method: method::TRAP_REPRESS,
                    route: SmpRoute::Lid,
                    ..smp
                };
                self.represses.push((repress.to_bytes(), c.slid));
                continue;
            }
            got.push(smp);
        }
        sent
    }

    /// Sends the queued TrapRepresses (one at a time: the send buffer is one).
    fn flush_represses(&mut self, hca: &mut Hca, got: &mut Vec<SmpRepr>) -> Result<(), SmError> {
        while let Some((mad, dlid)) = self.represses.pop() {
            self.send(hca, &mad, dlid, got)?;
        }
        Ok(())
    }

    /// One request to `dest`, resent until answered (at most `tries` sends
    /// of `timeout` each): the answer, or an error naming it and the path.
    pub fn request(
        &mut self,
        hca: &mut Hca,
        m: u8,
        attr: u16,
        attr_mod: u32,
        data: [u8; 64],
        dest: &Dest,
    ) -> Result<SmpRepr, SmError> {
        let what = || {
            let verb = if m == method::SET {
                "SubnSet"
            } else {
                "SubnGet"
            };
            format!(
                "{verb}({}) modifier {attr_mod} along {dest}",
                attr_name(attr)
            )
        };
        self.next_tid += 1;
        let mut req = SmpRepr {
            base_version: 1,
            class_version: 1,
            method: m,
            status: 0,
            tid: self.next_tid,
            attr_id: attr,
            attr_mod,
            mkey: 0,
            route: SmpRoute::Lid,
            data,
        };
        let dlid = match dest {
            Dest::Lid(l) => *l,
            Dest::Dr(path) => {
                let mut d = DrFields::outgoing(path)
                    .ok_or_else(|| SmError(format!("{}: path too long", what())))?;
                // The SMI's outgoing half (C14-9:1, ib_core's smi.c): the
                // pointer to 1; hop count 0 stays on this node.
                let to = hca_send(&mut d, path.first().copied().unwrap_or(1))
                    .map_err(|e| SmError(format!("{}: {e}", what())))?;
                req.route = SmpRoute::Directed(d);
                if to == HcaSend::Local {
                    self.sent += 1;
                    return self
                        .local(hca, &req)
                        .map_err(|e| SmError(format!("{}: {e}", what())));
                }
                PERMISSIVE_LID
            }
        };
        let bytes = req.to_bytes();
        let mut got = Vec::new();
        for n in 0..self.tries {
            self.sent += 1;
            self.resent += u64::from(n > 0);
            self.flush_represses(hca, &mut got)?;
            self.send(hca, &bytes, dlid, &mut got)?;
            let deadline = Instant::now() + self.timeout;
            loop {
                if let Some(i) = got.iter().position(|r| r.tid == req.tid) {
                    let r = got.swap_remove(i);
                    self.stale += got.len() as u64;
                    got.clear();
                    self.flush_represses(hca, &mut got)?;
                    self.stale += got.len() as u64;
                    return check_answer(r).map_err(|e| SmError(format!("{}: {e}", what())));
                }
                self.stale += got.len() as u64;
                got.clear();
                if Instant::now() >= deadline {
                    break;
                }
                self.poll(hca, deadline, &mut got);
            }
        }
        Err(SmError(format!(
            "{}: no answer to {} sends of {:?} each",
            what(),
            self.tries,
            self.timeout
        )))
    }

    /// The SM's own port: the SMP through MAD_IFC, as ib_core hands a
    /// hop-count-0 directed route to the device's `process_mad`.
    fn local(&mut self, hca: &mut Hca, req: &SmpRepr) -> Result<SmpRepr, String> {
        let mut mad = [0u8; 256];
        mad.copy_from_slice(&req.to_bytes()[..]);
        let input = MadIfcIn {
            port: 1,
            slid: PERMISSIVE_LID,
            mad,
            ..Default::default()
        };
        let out: MadIfcOut = hca
            .cmd(Opcode::MadIfc, &input)
            .map_err(|e| format!("MAD_IFC: {e}"))?;
        if out.flags & mad_ifc_flag::REPLY == 0 {
            return Err(format!("MAD_IFC made no reply (flags {:#x})", out.flags));
        }
        let r = Smp::new_checked(&out.mad[..])
            .ok()
            .and_then(|v| SmpRepr::parse(&v).ok())
            .ok_or("MAD_IFC's reply is no SMP")?;
        check_answer(r)
    }

    /// The next trap that came in, waiting up to `timeout` for one.
    pub fn wait_trap(&mut self, hca: &mut Hca, timeout: Duration) -> Result<Option<Trap>, SmError> {
        let deadline = Instant::now() + timeout;
        let mut got = Vec::new();
        loop {
            self.flush_represses(hca, &mut got)?;
            if let Some(t) = self.traps.pop_front() {
                self.stale += got.len() as u64;
                return Ok(Some(t));
            }
            if Instant::now() >= deadline {
                self.stale += got.len() as u64;
                return Ok(None);
            }
            self.poll(hca, deadline, &mut got);
        }
    }
}

fn check_answer(r: SmpRepr) -> Result<SmpRepr, String> {
    if r.method != method::GET_RESP {
        return Err(format!("answered with method {:#x}", r.method));
    }
    if r.status != status::OK {
        return Err(format!("status {:#x}", r.status));
    }
    Ok(r)
}

fn attr_name(a: u16) -> &'static str {
    match a {
        attr_id::NODE_INFO => "NodeInfo",
        attr_id::SWITCH_INFO => "SwitchInfo",
        attr_id::PORT_INFO => "PortInfo",
        attr_id::LINEAR_FORWARDING_TABLE => "LinearForwardingTable",
        attr_id::MULTICAST_FORWARDING_TABLE => "MulticastForwardingTable",
        _ => "attribute",
    }
}

/// A node to probe: its directed route and the (node, port) it was
/// reached through.
type Probe = (Vec<u8>, Option<(usize, u8)>);

/// A multicast group the SM programs: its MLID and member CAs' LIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub mlid: u16,
    pub members: Vec<u16>,
}

/// The SM: its QP0, the subnet as last swept and what it programmed.
pub struct MiniSm {
    pub qp0: Qp0,
    pub subnet: Subnet,
    /// The LFT set on each switch (by node index), entry = LID.
    pub lfts: BTreeMap<usize, Vec<u8>>,
    /// The MFT mask set on each switch (by node index) per MLID.
    pub mfts: BTreeMap<usize, BTreeMap<u16, u64>>,
    pub groups: Vec<Group>,
    /// The SL the CAs are told to reach the SM on.
    pub sm_sl: u8,
}

impl MiniSm {
    pub fn new(node: &mut Node) -> MiniSm {
        MiniSm {
            qp0: Qp0::new(node),
            subnet: Subnet::default(),
            lfts: BTreeMap::new(),
            mfts: BTreeMap::new(),
            groups: Vec::new(),
            sm_sl: 0,
        }
    }

    /// The SM's LID (its own node's, once swept).
    pub fn lid(&self) -> u16 {
        self.subnet.nodes.first().map_or(0, |n| n.lid)
    }

    fn get(
        &mut self,
        hca: &mut Hca,
        attr: u16,
        attr_mod: u32,
        path: &[u8],
    ) -> Result<[u8; 64], SmError> {
        let d = Dest::Dr(path.to_vec());
        Ok(self
            .qp0
            .request(hca, method::GET, attr, attr_mod, [0; 64], &d)?
            .data)
    }

    fn set(
        &mut self,
        hca: &mut Hca,
        attr: u16,
        attr_mod: u32,
        path: &[u8],
        data: [u8; 64],
    ) -> Result<[u8; 64], SmError> {
        let d = Dest::Dr(path.to_vec());
        Ok(self
            .qp0
            .request(hca, method::SET, attr, attr_mod, data, &d)?
            .data)
    }

    fn port_info(&mut self, hca: &mut Hca, path: &[u8], p: u8) -> Result<PortInfoRepr, SmError> {
        let d = self.get(hca, attr_id::PORT_INFO, u32::from(p), path)?;
        PortInfoRepr::parse(&d).map_err(|e| SmError(format!("PortInfo along {path:?}: {e}")))
    }

    /// Discovery by directed route, breadth-first from the SM's port (see
    /// the module's comment). Ports whose link is down are not followed.
    pub fn discover(&mut self, hca: &mut Hca) -> Result<Subnet, SmError> {
        let mut s = Subnet::default();
        // (the path to a node, the switch port it was reached by)
        let mut queue: VecDeque<Probe> = VecDeque::from([(Vec::new(), None)]);
        while let Some((path, from)) = queue.pop_front() {
            let d = self.get(hca, attr_id::NODE_INFO, 0, &path)?;
            let ni = NodeInfoRepr::parse(&d)
                .map_err(|e| SmError(format!("NodeInfo along {path:?}: {e}")))?;
            let here = ni.local_port_num;
            let i = match s.by_guid(ni.node_guid) {
                Some(i) => i,
                None => {
                    let n = usize::from(ni.num_ports);
                    let mut node = SmNode {
                        guid: ni.node_guid,
                        node_type: ni.node_type,
                        num_ports: ni.num_ports,
                        path: path.clone(),
                        entry_port: here,
                        ports: vec![None; n + 1],
                        peers: vec![None; n + 1],
                        switch_info: None,
                        lid: 0,
                    };
                    let i = s.nodes.len();
                    if ni.node_type == node_type::SWITCH {
                        let d = self.get(hca, attr_id::SWITCH_INFO, 0, &path)?;
                        node.switch_info = SwitchInfoRepr::parse(&d).ok();
                        for p in 0..=ni.num_ports {
                            let pi = self.port_info(hca, &path, p)?;
                            if p != 0 && p != here && pi.port_state >= port_state::INIT {
                                let mut next = path.clone();
                                next.push(p);
                                queue.push_back((next, Some((i, p))));
                            }
                            node.ports[usize::from(p)] = Some(pi);
                        }
                    } else {
                        if usize::from(here) > n || here == 0 {
                            return Err(SmError(format!(
                                "NodeInfo along {path:?}: LocalPortNum {here} of {n} ports"
                            )));
                        }
                        let pi = self.port_info(hca, &path, 0)?;
                        // Only the SM's own CA leads on: an HCA is never
                        // an intermediate hop (IBA 14.2.2.2).
                        if path.is_empty() && pi.port_state >= port_state::INIT {
                            queue.push_back((vec![here], Some((i, here))));
                        }
                        node.ports[usize::from(here)] = Some(pi);
                    }
                    s.nodes.push(node);
                    i
                }
            };
            if let Some((f, fp)) = from {
                if usize::from(here) < s.nodes[i].peers.len() {
                    s.nodes[f].peers[usize::from(fp)] = Some((i, here));
                    s.nodes[i].peers[usize::from(here)] = Some((f, fp));
                }
            }
        }
        Ok(s)
    }

    /// A sweep: discovery, LIDs (the ones the ports have kept), routes and
    /// groups computed and every table block that changed set, every live
    /// port brought to Active. After a change (a trap 128) the same sweep
    /// routes around a link that went down; ports already Active stay.
    pub fn sweep(&mut self, hca: &mut Hca) -> Result<(), SmError> {
        let mut s = self.discover(hca)?;
        s.assign_lids();
        // What was set is kept by switch: node indices follow this
        // sweep's discovery order.
        self.lfts = reindex(std::mem::take(&mut self.lfts), &self.subnet, &s);
        self.mfts = reindex(std::mem::take(&mut self.mfts), &self.subnet, &s);
        self.subnet = s;
        self.program(hca)?;
        for st in [port_state::ARMED, port_state::ACTIVE] {
            self.set_port_states(hca, st)?;
        }
        Ok(())
    }

    /// Adds a group for the next sweep's MFTs.
    pub fn add_group(&mut self, mlid: u16, members: &[u16]) {
        assert!((MLID_BASE..PERMISSIVE_LID).contains(&mlid), "{mlid:#x}");
        self.groups.push(Group {
            mlid,
            members: members.to_vec(),
        });
    }

    /// LIDs and SM on the ports, then SwitchInfo, the LFTs and the MFTs
    /// (`osm_link_mgr`, `osm_ucast_mgr`, `osm_mcast_mgr`). A table is set
    /// block by block where it differs from what this SM set before.
    fn program(&mut self, hca: &mut Hca) -> Result<(), SmError> {
        let sm_lid = self.lid();
        for i in 0..self.subnet.nodes.len() {
            let n = &self.subnet.nodes[i];
            let (path, p, lid) = (n.path.clone(), n.lid_port(), n.lid);
            // PortInfo's modifier: a switch's port number (0 here), 0 on a
            // CA (the port the SMP came in by).
            let mut pi = n.ports[usize::from(p)].expect("PortInfo read in discovery");
            if (pi.lid, pi.master_sm_lid, pi.master_sm_sl, pi.lmc) == (lid, sm_lid, self.sm_sl, 0) {
                continue;
            }
            pi.lid = lid;
            pi.lmc = 0;
            pi.master_sm_lid = sm_lid;
            pi.master_sm_sl = self.sm_sl;
            pi.port_state = port_state::NO_CHANGE;
            pi.port_physical_state = phys_state::NO_CHANGE;
            let mut d = [0u8; 64];
            pi.emit(&mut d).expect("PortInfo emits");
            let got = self.set(hca, attr_id::PORT_INFO, 0, &path, d)?;
            self.subnet.nodes[i].ports[usize::from(p)] = PortInfoRepr::parse(&got).ok();
        }
        let lfts = self.subnet.min_hop_lfts();
        let mut mfts: BTreeMap<usize, BTreeMap<u16, u64>> = BTreeMap::new();
        for g in self.groups.clone() {
            let members: Vec<usize> = g
                .members
                .iter()
                .filter_map(|&l| self.subnet.by_lid(l))
                .collect();
            for (s, mask) in self.subnet.mcast_masks(&members) {
                mfts.entry(s).or_default().insert(g.mlid, mask);
            }
        }
        let mlid_top = self.groups.iter().map(|g| g.mlid).max();
        for s in self.subnet.switches().collect::<Vec<_>>() {
            let path = self.subnet.nodes[s].path.clone();
            let lft = &lfts[&s];
            let mut si = self.subnet.nodes[s].switch_info.unwrap_or_default();
            si.linear_fdb_top = (lft.len() - 1) as u16;
            si.multicast_fdb_top = mlid_top.unwrap_or(MLID_BASE - 1);
            // Writing 1 clears PortStateChange (IBA 14.2.5.4).
            si.port_state_change = true;
            let mut d = [0u8; 64];
            si.emit(&mut d).expect("SwitchInfo emits");
            let got = self.set(hca, attr_id::SWITCH_INFO, 0, &path, d)?;
            self.subnet.nodes[s].switch_info = SwitchInfoRepr::parse(&got).ok();
            let old = self.lfts.get(&s).cloned();
            for (b, chunk) in lft.chunks(LFT_BLOCK_LIDS).enumerate() {
                let mut blk = LftBlock([LFT_NO_PORT; LFT_BLOCK_LIDS]);
                blk.0[..chunk.len()].copy_from_slice(chunk);
                let was = old.as_deref().map(|o| lft_block(o, b));
                if was == Some(blk) {
                    continue;
                }
                blk.emit(&mut d).expect("LFT block emits");
                self.set(hca, attr_id::LINEAR_FORWARDING_TABLE, b as u32, &path, d)?;
            }
            let want = mfts.remove(&s).unwrap_or_default();
            let had = self.mfts.get(&s).cloned().unwrap_or_default();
            let ports = usize::from(self.subnet.nodes[s].num_ports);
            for mlid in want.keys().chain(had.keys()).copied().collect::<Vec<_>>() {
                let block = (mlid - MLID_BASE) / MFT_BLOCK_MLIDS as u16;
                for pos in 0..=(ports / MFT_POSITION_PORTS) as u8 {
                    let blk = mft_block(&want, block, pos);
                    if blk == mft_block(&had, block, pos) && self.mfts.contains_key(&s) {
                        continue;
                    }
                    blk.emit(&mut d).expect("MFT block emits");
                    let m = MftModifier {
                        position: pos,
                        block,
                    };
                    self.set(
                        hca,
                        attr_id::MULTICAST_FORWARDING_TABLE,
                        m.to_u32(),
                        &path,
                        d,
                    )?;
                }
            }
            self.mfts.insert(s, want);
            self.lfts.insert(s, lft.clone());
        }
        Ok(())
    }

    /// Every live port (a switch's external ports with a cable up, every
    /// CA's) to `st` where it is not there yet; Active is not taken back to
    /// Armed.
    fn set_port_states(&mut self, hca: &mut Hca, st: u8) -> Result<(), SmError> {
        for i in 0..self.subnet.nodes.len() {
            let n = &self.subnet.nodes[i];
            let ports: Vec<u8> = if n.is_switch() {
                (1..=n.num_ports)
                    .filter(|&p| self.subnet.live_peer(i, p).is_some())
                    .collect()
            } else {
                vec![n.entry_port]
            };
            let path = n.path.clone();
            let modifier = |p: u8| if n.is_switch() { u32::from(p) } else { 0 };
            let todo: Vec<(u8, u32)> = ports.iter().map(|&p| (p, modifier(p))).collect();
            for (p, m) in todo {
                let Some(mut pi) = self.subnet.nodes[i].ports[usize::from(p)] else {
                    continue;
                };
                if pi.port_state >= st || pi.port_state < port_state::INIT {
                    continue;
                }
                pi.port_state = st;
                pi.port_physical_state = phys_state::NO_CHANGE;
                let mut d = [0u8; 64];
                pi.emit(&mut d).expect("PortInfo emits");
                let got = self.set(hca, attr_id::PORT_INFO, m, &path, d)?;
                let now = PortInfoRepr::parse(&got)
                    .map_err(|e| SmError(format!("PortInfo along {path:?}: {e}")))?;
                if now.port_state != st {
                    return Err(SmError(format!(
                        "SubnSet(PortInfo) port {p} along {path:?}: state {} after asking {st}",
                        now.port_state
                    )));
                }
                self.subnet.nodes[i].ports[usize::from(p)] = Some(now);
            }
        }
        Ok(())
    }

    /// SubnGet(PortInfo) of port `p` of node `i`, by directed route.
    pub fn read_port(&mut self, hca: &mut Hca, i: usize, p: u8) -> Result<PortInfoRepr, SmError> {
        let n = &self.subnet.nodes[i];
        let (path, m) = (n.path.clone(), if n.is_switch() { p } else { 0 });
        self.port_info(hca, &path, m)
    }

    /// SubnSet(PortInfo) PortPhysicalState Disabled on switch `i`'s port
    /// `p`, as `ibportstate <lid> <port> disable` does (IBA 14.2.5.6).
    pub fn disable_port(&mut self, hca: &mut Hca, i: usize, p: u8) -> Result<(), SmError> {
        let mut pi = self.read_port(hca, i, p)?;
        pi.port_state = port_state::NO_CHANGE;
        pi.port_physical_state = phys_state::DISABLED;
        let mut d = [0u8; 64];
        pi.emit(&mut d).expect("PortInfo emits");
        let path = self.subnet.nodes[i].path.clone();
        self.set(hca, attr_id::PORT_INFO, u32::from(p), &path, d)?;
        Ok(())
    }

    /// Switch `i`'s LFT as it reads back, up to its LinearFDBTop.
    pub fn read_lft(&mut self, hca: &mut Hca, i: usize) -> Result<Vec<u8>, SmError> {
        let path = self.subnet.nodes[i].path.clone();
        let si = SwitchInfoRepr::parse(&self.get(hca, attr_id::SWITCH_INFO, 0, &path)?)
            .map_err(|e| SmError(format!("SwitchInfo along {path:?}: {e}")))?;
        let top = usize::from(si.linear_fdb_top);
        let mut lft = Vec::new();
        for b in 0..=top / LFT_BLOCK_LIDS {
            let d = self.get(hca, attr_id::LINEAR_FORWARDING_TABLE, b as u32, &path)?;
            lft.extend_from_slice(&d);
        }
        lft.truncate(top + 1);
        Ok(lft)
    }

    /// The next trap, waiting up to `timeout` (answering with TrapRepress).
    pub fn wait_trap(&mut self, hca: &mut Hca, timeout: Duration) -> Result<Option<Trap>, SmError> {
        self.qp0.wait_trap(hca, timeout)
    }
}

/// `m` keyed by node index in `old`, keyed by the same nodes' indices in
/// `new` (by GUID); nodes `new` lacks are dropped.
fn reindex<T>(m: BTreeMap<usize, T>, old: &Subnet, new: &Subnet) -> BTreeMap<usize, T> {
    m.into_iter()
        .filter_map(|(i, v)| Some((new.by_guid(old.nodes.get(i)?.guid)?, v)))
        .collect()
}

fn lft_block(lft: &[u8], b: usize) -> LftBlock {
    let mut blk = LftBlock([LFT_NO_PORT; LFT_BLOCK_LIDS]);
    let from = (b * LFT_BLOCK_LIDS).min(lft.len());
    let to = ((b + 1) * LFT_BLOCK_LIDS).min(lft.len());
    blk.0[..to - from].copy_from_slice(&lft[from..to]);
    blk
}

/// MFT block `block` at port position `pos` of the masks in `t`.
fn mft_block(t: &BTreeMap<u16, u64>, block: u16, pos: u8) -> MftBlock {
    let mut blk = MftBlock([0; MFT_BLOCK_MLIDS]);
    for (k, v) in blk.0.iter_mut().enumerate() {
        let mlid = MLID_BASE + block * MFT_BLOCK_MLIDS as u16 + k as u16;
        let mask = t.get(&mlid).copied().unwrap_or(0);
        *v = (mask >> (usize::from(pos) * MFT_POSITION_PORTS)) as u16;
    }
    blk
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(guid: u64) -> SmNode {
        SmNode {
            guid,
            node_type: node_type::SWITCH,
            num_ports: 0,
            path: vec![],
            entry_port: 0,
            ports: vec![],
            peers: vec![],
            switch_info: None,
            lid: 0,
        }
    }

    #[test]
    fn what_was_set_follows_the_switch_when_a_sweep_numbers_it_afresh() {
        let old = Subnet {
            nodes: vec![node(0xa), node(0xb), node(0xc)],
        };
        // The next discovery found 0xc first, and 0xb no more.
        let new = Subnet {
            nodes: vec![node(0xc), node(0xa)],
        };
        let set = BTreeMap::from([(0, "a"), (1, "b"), (2, "c")]);
        assert_eq!(
            reindex(set, &old, &new),
            BTreeMap::from([(0, "c"), (1, "a")])
        );
    }
}
