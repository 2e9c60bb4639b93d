//! A switch's congestion marking (IBA Annex A10.2.1; issue 31 item 2): a data
//! packet leaving by a port whose output queue is past the port's threshold
//! gets BTH:FECN set, as the SwitchCongestionSetting (or the port's
//! SwitchPortCongestionSetting element) the congestion control manager gave
//! says, and the mark is logged in the CongestionLog.
//!
//! - Threshold (4 bits, A10.4.3.6): 0 marks nothing; 1..=15 mark more and
//!   more readily. Here the port marks once its queue holds more than
//!   `(16 - Threshold) / 16` of what it may hold: 15 marks past a sixteenth,
//!   1 only when it is (nearly) full. The annex leaves the mapping to the
//!   implementation.
//! - Packet_Size (64-byte units): shorter packets are not marked.
//! - Marking_Rate: the number of eligible packets left unmarked between two
//!   marked ones (0: every eligible packet).
//! - A port's element, when Valid with Control_Type 0, takes the place of the
//!   switch-wide threshold, packet size and marking rate (A10.4.3.7).
//!
//! FECN sits in the BTH byte the ICRC treats as variant (IBA 7.8.1, 9.2.9:
//! "not included in the invariant CRC"), so only the VCRC is computed again.
//! Not modelled: telling a root of congestion from a victim (the Victim_Mask
//! is kept and read back, but every port past its threshold marks; a UDP port
//! has no line rate, so its queue only grows while its partner withholds
//! credit) and credit starvation (Credit_Mask, CS_Threshold).

use crate::mad::cc::CcAgent;
use crate::mad::cc_attr::{time_stamp, SwitchLogEvent};
use crate::verbs::Time;
use crate::wire::crc::vcrc;
use crate::wire::lrh::{Lnh, Lrh};
use crate::wire::opcode::Opcode;
use crate::wire::{Bth, BthRepr};

const VCRC_LEN: usize = 2;
const LRH_LEN: usize = 8;
const GRH_LEN: usize = 40;
/// A credit block (IBA 7.9.4): 64 bytes.
pub const BLOCK: usize = 64;

/// What the marker needs of an egress port's output queue: what it holds and
/// what it may hold, in 64-byte credit blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepth {
    pub blocks: u32,
    pub limit: u32,
}

/// The marking parameters in force on one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortMarking {
    pub threshold: u8,
    pub min_blocks: u8,
    pub marking_rate: u16,
}

impl PortMarking {
    /// The port's element if Valid for congestion control, else the switch's
    /// setting.
    pub fn of(agent: &CcAgent, port: u8) -> PortMarking {
        if let Some(e) = agent
            .port_setting(port)
            .filter(|e| e.valid && !e.control_type)
        {
            return PortMarking {
                threshold: e.threshold,
                min_blocks: e.packet_size,
                marking_rate: e.cong_parm,
            };
        }
        let s = agent.switch_setting();
        PortMarking {
            threshold: s.threshold,
            min_blocks: s.packet_size,
            marking_rate: s.marking_rate,
        }
    }

    /// Whether a queue this deep is past the threshold.
    pub fn congested(&self, q: QueueDepth) -> bool {
        if self.threshold == 0 || q.limit == 0 {
            return false;
        }
        let t = u64::from(self.threshold.min(15));
        u64::from(q.blocks) * 16 > u64::from(q.limit) * (16 - t)
    }
}

/// The marker's state: per port, the eligible packets since the last mark.
#[derive(Debug, Clone, Default)]
pub struct Marker {
    since_mark: Vec<u16>,
    /// Packets marked, per port.
    pub marked: Vec<u64>,
}

impl Marker {
    pub fn new(num_ports: u8) -> Marker {
        let n = usize::from(num_ports) + 1;
        Marker {
            since_mark: vec![0; n],
            marked: vec![0; n],
        }
    }

    /// Marks `pkt` (LRH through VCRC) leaving by `port` if the port's queue is
    /// past its threshold and the packet is eligible: the marked bytes, or
    /// `None` to send it as it is. A packet already marked, a packet without a
    /// BTH (raw), a CN packet, VL15 and malformed bytes are left alone.
    pub fn mark(
        &mut self,
        agent: &mut CcAgent,
        port: u8,
        pkt: &[u8],
        q: QueueDepth,
        now: Time,
    ) -> Option<Box<[u8]>> {
        let p = usize::from(port);
        if p >= self.since_mark.len() {
            return None;
        }
        let m = PortMarking::of(agent, port);
        if !m.congested(q) || pkt.len() < usize::from(m.min_blocks) * BLOCK {
            return None;
        }
        let lrh = Lrh::new_checked(pkt).ok()?;
        let bth_at = match lrh.lnh() {
            Lnh::IbaLocal => LRH_LEN,
            Lnh::IbaGlobal => LRH_LEN + GRH_LEN,
            _ => return None,
        };
        let words = usize::from(lrh.pkt_len());
        if lrh.vl() == 15 || words * 4 + VCRC_LEN != pkt.len() || bth_at + BthRepr::LEN > words * 4
        {
            return None;
        }
        let bth = Bth::new_unchecked(&pkt[bth_at..]);
        if bth.fecn() || bth.opcode() == Opcode::CNP.as_u8() {
            return None;
        }
        if self.since_mark[p] < m.marking_rate {
            self.since_mark[p] += 1;
            return None;
        }
        self.since_mark[p] = 0;
        let mut b = pkt.to_vec().into_boxed_slice();
        let mut v = Bth::new_unchecked(&mut b[bth_at..]);
        let becn = v.becn();
        v.set_fecn_becn(true, becn);
        let crc = vcrc(&b[..words * 4]).to_le_bytes();
        b[words * 4..].copy_from_slice(&crc);
        self.marked[p] = self.marked[p].saturating_add(1);
        agent.log_switch_event(
            port,
            SwitchLogEvent {
                slid: lrh.slid(),
                dlid: lrh.dlid(),
                sl: lrh.sl(),
                time_stamp: time_stamp(now.0),
            },
        );
        Some(b)
    }
}

impl super::Switch {
    /// The Congestion Control Agent (its settings and log).
    pub fn cc_agent(&self) -> &CcAgent {
        &self.cca
    }
    pub fn cc_agent_mut(&mut self) -> &mut CcAgent {
        &mut self.cca
    }

    /// Packets port `p` marked with FECN ([`Marker`]).
    pub fn fecn_marked(&self, p: u8) -> u64 {
        self.marker.marked.get(usize::from(p)).copied().unwrap_or(0)
    }

    /// Congestion marking (IBA A10.2.1) of a data packet the core sends out of
    /// `port`, given that port's output queue: the bytes with BTH:FECN set
    /// (and the VCRC computed again) when the port is past its threshold, or
    /// `None` to send it as it is. The driver calls it as it queues.
    pub fn cc_mark(&mut self, port: u8, pkt: &[u8], q: QueueDepth, now: Time) -> Option<Box<[u8]>> {
        self.marker.mark(&mut self.cca, port, pkt, q, now)
    }
}
