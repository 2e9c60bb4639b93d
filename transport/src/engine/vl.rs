//! Virtual lanes (AD-06; IBA 3.5.x and 7.6, seed 002 "虚拟通道"): a port has
//! data VLs VL0..VLn-1 and the management VL15. A packet's service level (the
//! path's SL) picks its data VL through the port's SL-to-VL table (default:
//! every SL on VL0, as a port is before a subnet manager programs it);
//! packets of QP0 (SMPs) go on VL15 whatever their SL, and VL15 carries
//! nothing else.
//!
//! Arbitration between data VLs follows the spec's VL arbiter (IBA 7.6.9,
//! PortInfo:VLArbitrationHigh/Low and LimitOfHighPriority): VL15 above all;
//! then a high-priority and a low-priority table of (VL, weight) entries,
//! each worked through in turn, an entry sending packets of its VL while its
//! weight (in 64-byte units) is not used up, an entry whose VL has nothing to
//! send giving up its turn; the high-priority table goes first, but after
//! LimitOfHighPriority x 4 KiB of high-priority bytes (0: one packet; 255:
//! no limit) a low-priority packet that is ready goes before the next
//! high-priority one. The arbiter never idles the link: a table with nothing
//! ready lets the other go. The default tables (`VlArbTables::fair`) give
//! every data VL weight 1 in the low-priority table: a packet per VL in turn.
//! It costs nothing while every SL maps to VL0 (`Engine::vl_arb` off).

use super::{Engine, PortConfig, Qp, RxDrop};
use crate::verbs::{QpType, VerbError};
use crate::wire::PacketRepr;

/// The management VL (IBA 7.6.3): QP0 only.
pub const VL15: u8 = 15;

/// Data VLs a port has unless configured otherwise (VL0..VL7; QUERY_PORT's
/// `max_vl_num` 4).
pub const DEFAULT_DATA_VLS: u8 = 8;

/// The VL of a packet of QP `qpn` at service level `sl`.
pub(crate) fn tx_vl(port: &PortConfig, qpn: u32, sl: u8) -> u8 {
    if qpn == 0 {
        return VL15;
    }
    port.sl2vl[usize::from(sl & 0xf)]
}

/// The SL of the packet a QP sends next: its path's, or for UD the address
/// vector of the WQE being sent (AD-02).
pub(crate) fn next_sl(qp: &Qp) -> u8 {
    if qp.init.qp_type == QpType::Ud {
        if let Some(ud) = qp.req.wqes.get(qp.req.cur).and_then(|w| w.wr.ud.as_ref()) {
            return ud.av.sl;
        }
    }
    qp.attr.av.sl
}

/// The transmit schedule lane of `qp` (`schedule`): the VL of the packet it
/// sends next while VL arbitration is on (`vl_arb`), else 0.
pub(crate) fn lane(vl_arb: bool, port: &PortConfig, qp: &Qp) -> u8 {
    if vl_arb {
        tx_vl(port, qp.qpn, next_sl(qp))
    } else {
        0
    }
}

/// The VL rules of a received native packet, before its QP is looked up:
/// VL15 is for QP0 only and QP0 only on VL15 (seed 002: SMPs use VL15 only and
/// VL15 is not a data VL); a data VL the port does not have is refused like
/// one the link never negotiated.
pub(crate) fn check_rx(port: &PortConfig, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
    let vl = pkt.lrh.vl;
    let qp0 = pkt.transport.bth.dest_qp == 0;
    match (vl == VL15, qp0) {
        (true, false) => Err(RxDrop::Vl15NotQp0),
        (false, true) => Err(RxDrop::Qp0NotVl15),
        (false, false) if vl >= port.data_vls => Err(RxDrop::UnsupportedVl),
        _ => Ok(()),
    }
}

/// Checks an SL-to-VL table for a port of `data_vls` data VLs: every entry
/// names one of them.
pub(crate) fn check_table(table: &[u8; 16], data_vls: u8) -> Result<(), VerbError> {
    if data_vls == 0 || data_vls > 15 || table.iter().any(|&v| v >= data_vls) {
        return Err(VerbError::InvalidAttr);
    }
    Ok(())
}

/// Entries a VL arbitration table may have (IBA 14.2.5.9: two blocks of 32
/// for each of the high- and the low-priority table).
pub const MAX_VL_ARB_ENTRIES: usize = 64;

/// LimitOfHighPriority meaning "no limit" (IBA 14.2.5.6).
pub const HIGH_LIMIT_UNLIMITED: u8 = 255;

/// Bytes per unit of an entry's weight (IBA 7.6.9).
pub const VL_ARB_WEIGHT_UNIT: u32 = 64;

/// Bytes per unit of LimitOfHighPriority (IBA 14.2.5.6).
pub const HIGH_LIMIT_UNIT: u32 = 4096;

/// One entry of a VLArbitration table (AD-06, IBA 7.6.9): a data VL and how
/// many 64-byte units it may send when the entry is active; weight 0 skips
/// the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VlArbEntry {
    pub vl: u8,
    pub weight: u8,
}

/// A port's VL arbitration configuration (AD-06, IBA 7.6.9): the high- and
/// low-priority tables and LimitOfHighPriority (units of 4 KiB; 0: one
/// packet; [`HIGH_LIMIT_UNLIMITED`]: the low-priority table goes only when the
/// high-priority one has nothing ready).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlArbTables {
    pub high: Vec<VlArbEntry>,
    pub low: Vec<VlArbEntry>,
    pub high_limit: u8,
}

impl VlArbTables {
    /// The default: every one of `data_vls` data VLs once in the low-priority
    /// table with weight 1, so VLs with something to send take turns a
    /// packet each; no high-priority table.
    pub fn fair(data_vls: u8) -> VlArbTables {
        VlArbTables {
            high: Vec::new(),
            low: (0..data_vls.min(15))
                .map(|vl| VlArbEntry { vl, weight: 1 })
                .collect(),
            high_limit: 0,
        }
    }

    /// Checks the tables for a port of `data_vls` data VLs whose SL-to-VL
    /// table is `sl2vl`: at most [`MAX_VL_ARB_ENTRIES`] entries per table,
    /// every entry a data VL of the port (VL15 is above arbitration, IBA
    /// 7.6.9), and every VL the SL-to-VL table uses in an entry of nonzero
    /// weight (a VL without one would never send: its QPs would hang).
    pub fn check(&self, data_vls: u8, sl2vl: &[u8; 16]) -> Result<(), VlArbError> {
        for (name, t) in [("high", &self.high), ("low", &self.low)] {
            if t.len() > MAX_VL_ARB_ENTRIES {
                return Err(VlArbError::TooManyEntries {
                    table: name,
                    len: t.len(),
                });
            }
            if let Some((i, e)) = t.iter().enumerate().find(|(_, e)| e.vl >= data_vls) {
                return Err(VlArbError::NotADataVl {
                    table: name,
                    entry: i,
                    vl: e.vl,
                    data_vls,
                });
            }
        }
        let served = |vl: u8| {
            self.high
                .iter()
                .chain(&self.low)
                .any(|e| e.vl == vl && e.weight > 0)
        };
        if let Some((sl, &vl)) = sl2vl.iter().enumerate().find(|(_, &vl)| !served(vl)) {
            return Err(VlArbError::Unserved { sl: sl as u8, vl });
        }
        Ok(())
    }
}

/// Why a VL arbitration configuration was refused (AD-06).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VlArbError {
    #[error("the {table}-priority table has {len} entries, at most {MAX_VL_ARB_ENTRIES}")]
    TooManyEntries { table: &'static str, len: usize },
    #[error(
        "{table}-priority entry {entry}: VL {vl} is not a data VL of the port (0..={})",
        data_vls.saturating_sub(1)
    )]
    NotADataVl {
        table: &'static str,
        entry: usize,
        vl: u8,
        data_vls: u8,
    },
    #[error(
        "SL {sl} goes on VL {vl}, which no entry of nonzero weight serves: it would never send"
    )]
    Unserved { sl: u8, vl: u8 },
}

/// Where the arbiter is in one table: the active entry and the bytes its
/// weight still allows (may go below zero: a packet started within the
/// weight is sent whole, IBA 7.6.9).
#[derive(Debug, Clone, Copy)]
struct Cursor {
    entry: usize,
    left: i64,
}

impl Cursor {
    /// The cursor of a table before its first packet: entry 0, full weight.
    fn start(table: &[VlArbEntry]) -> Cursor {
        Cursor {
            entry: 0,
            left: table.first().map_or(0, weight_bytes),
        }
    }

    /// The VL of the active entry if it has weight left and its VL is in
    /// `ready`, else of the next entry that has (an entry passed over, or
    /// used up, loses the weight it had left; the next one starts with its
    /// full weight, IBA 7.6.9). `None`, and nothing moves, if no entry of
    /// nonzero weight has its VL ready.
    fn pick(&mut self, table: &[VlArbEntry], ready: u16) -> Option<u8> {
        let is_ready = |e: &VlArbEntry| ready & (1u16 << (e.vl & 0xf)) != 0;
        if !table.iter().any(|e| e.weight > 0 && is_ready(e)) {
            return None;
        }
        let n = table.len();
        for _ in 0..=n {
            let e = table.get(self.entry)?;
            if self.left > 0 && is_ready(e) {
                return Some(e.vl);
            }
            self.entry = (self.entry + 1) % n;
            self.left = weight_bytes(&table[self.entry]);
        }
        None
    }
}

fn weight_bytes(e: &VlArbEntry) -> i64 {
    i64::from(e.weight) * i64::from(VL_ARB_WEIGHT_UNIT)
}

/// Which table the last pick came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Vl15,
    High,
    Low,
}

/// The VL arbiter of a port (AD-06, IBA 7.6.9): [`Arbiter::pick`] names the
/// VL whose packet goes next among those ready, [`Arbiter::sent`] charges a
/// packet sent to the entry that picked it.
#[derive(Debug, Clone)]
pub(crate) struct Arbiter {
    tables: VlArbTables,
    high: Cursor,
    low: Cursor,
    /// High-priority bytes sent since a low-priority packet last had its
    /// opportunity (LimitOfHighPriority).
    high_bytes: u64,
    picked: Option<(Source, u8)>,
}

impl Arbiter {
    pub(crate) fn new(tables: VlArbTables) -> Arbiter {
        Arbiter {
            high: Cursor::start(&tables.high),
            low: Cursor::start(&tables.low),
            tables,
            high_bytes: 0,
            picked: None,
        }
    }

    /// Whether LimitOfHighPriority lets another high-priority packet go
    /// before a ready low-priority one.
    fn high_allowed(&self) -> bool {
        match self.tables.high_limit {
            HIGH_LIMIT_UNLIMITED => true,
            0 => self.high_bytes == 0,
            l => self.high_bytes < u64::from(l) * u64::from(HIGH_LIMIT_UNIT),
        }
    }

    /// The VL to send from next, given the VLs with a packet ready (bit `vl`
    /// of `ready`); `None` if no table serves any of them.
    pub(crate) fn pick(&mut self, ready: u16) -> Option<u8> {
        self.picked = None;
        if ready & (1 << VL15) != 0 {
            self.picked = Some((Source::Vl15, VL15));
            return Some(VL15);
        }
        let high_first = self.high_allowed();
        let order = if high_first {
            [Source::High, Source::Low]
        } else {
            [Source::Low, Source::High]
        };
        for from in order {
            let vl = match from {
                Source::High => self.high.pick(&self.tables.high, ready),
                _ => self.low.pick(&self.tables.low, ready),
            };
            if from == Source::High && vl.is_none() {
                // Nothing of high priority waits: no burst to limit.
                self.high_bytes = 0;
            }
            if let Some(vl) = vl {
                self.picked = Some((from, vl));
                return Some(vl);
            }
        }
        None
    }

    /// A packet of `len` bytes went on VL `vl`: charged to the entry that
    /// picked it (a packet of another VL, sent because the picked VL's QPs
    /// had nothing after all, is not charged to any entry).
    pub(crate) fn sent(&mut self, vl: u8, len: usize) {
        let Some((from, picked)) = self.picked.take() else {
            return;
        };
        if picked != vl {
            return;
        }
        let len = len as u64;
        match from {
            Source::Vl15 => {}
            Source::High => {
                self.high.left -= len as i64;
                self.high_bytes += len;
            }
            Source::Low => {
                self.low.left -= len as i64;
                self.high_bytes = 0;
            }
        }
    }
}

impl Engine {
    /// Places every scheduled QP again, in its order, after the lanes' VLs
    /// changed (SL-to-VL table, arbitration tables): O(scheduled QPs), once
    /// per configuration change. Dead entries go.
    pub(crate) fn relane(&mut self) {
        for e in self.schedule.take_all() {
            if let Some(qp) = self.qps.get_mut(&e.qpn) {
                if qp.scheduled && e.live(&qp.sched) {
                    let lane = lane(self.vl_arb, &self.port, qp);
                    self.schedule.push_back(&mut qp.sched, lane, e.qpn);
                }
            }
        }
    }

    /// VL arbitration (AD-06): the VL whose lane goes first for the next
    /// packet, among the lanes that have a QP; `None` with arbitration off
    /// (lane 0 holds every QP). O(1): the arbiter sees which lanes are not
    /// empty, never the QPs.
    pub(crate) fn vl_pick(&mut self) -> Option<u8> {
        if !self.vl_arb {
            return None;
        }
        self.schedule.step();
        self.arbiter.pick(self.schedule.ready())
    }

    /// The next entry of the transmit schedule: the picked VL's lane's
    /// first, else (that lane is empty: its QPs had nothing after all) the
    /// first of the lowest lane that has one. Returns the QP and whether it
    /// is to be passed over (`skip`: a dead entry, or a QP found in a lane
    /// that is not its VL's any more, queued again in its own; the caller's
    /// loop does not count it).
    pub(crate) fn next_scheduled(&mut self, picked: Option<u8>) -> Option<(u32, bool)> {
        let ready = self.schedule.ready();
        let lane_now = picked
            .filter(|&v| ready & (1 << (v & 0xf)) != 0)
            .or_else(|| self.schedule.first_ready())?;
        let e = self.schedule.pop_front(lane_now)?;
        let Some(qp) = self.qps.get_mut(&e.qpn) else {
            return Some((e.qpn, true)); // destroyed
        };
        if !qp.scheduled || !e.live(&qp.sched) {
            return Some((e.qpn, true));
        }
        let own = lane(self.vl_arb, &self.port, qp);
        if own != lane_now {
            self.schedule.push_back(&mut qp.sched, own, e.qpn);
            return Some((e.qpn, true));
        }
        Some((e.qpn, false))
    }

    /// Steps the transmit schedule took (QPs queued, taken, moved; arbiter
    /// picks): for tests that show it costs O(1) per packet sent, whatever
    /// the number of QPs (AD-06, issue 25).
    pub fn schedule_work(&self) -> u64 {
        self.schedule.work()
    }

    /// Charges a packet just built into `buf[..len]` to the arbiter: LRH
    /// byte 0 holds the VL it goes on (AD-06).
    pub(crate) fn vl_sent(&mut self, buf: &[u8], len: usize) {
        let vl = crate::wire::vl_of(buf);
        self.arbiter.sent(vl, len);
    }
}

/// The encoding of a number of data VLs in PortInfo:VLCap and verbs'
/// `max_vl_num` (1: VL0, 2: VL0-1, 3: VL0-3, 4: VL0-7, 5: VL0-14).
pub fn vl_cap(data_vls: u8) -> u8 {
    match data_vls {
        0 | 1 => 1,
        2..=3 => 2,
        4..=7 => 3,
        8..=14 => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, Limits};

    /// AD-06: a port configured with a table past its data VLs is not
    /// trusted: every SL goes on VL0 (and the engine does not panic).
    #[test]
    fn a_bad_configured_table_falls_back_to_vl0() {
        let mut port = PortConfig::new(1, 1);
        port.sl2vl[4] = 9;
        let e = Engine::new(port, Limits::default());
        assert_eq!(e.port().sl2vl, [0; 16]);
        assert_eq!(tx_vl(e.port(), 5, 4), 0);
        assert_eq!(tx_vl(e.port(), 0, 4), VL15);
        let mut port = PortConfig::new(1, 1);
        port.sl2vl[4] = 3;
        let e = Engine::new(port, Limits::default());
        assert_eq!(tx_vl(e.port(), 5, 4), 3);
        assert_eq!(vl_cap(8), 4);
        assert_eq!(vl_cap(1), 1);
        assert_eq!(vl_cap(15), 5);
    }

    fn e(vl: u8, weight: u8) -> VlArbEntry {
        VlArbEntry { vl, weight }
    }

    /// Runs the arbiter `n` times with VLs `ready` always ready and packets
    /// of `len` bytes; the VLs in the order they went.
    fn run(a: &mut Arbiter, ready: u16, len: usize, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                let vl = a.pick(ready).expect("a VL");
                a.sent(vl, len);
                vl
            })
            .collect()
    }

    /// AD-06 (IBA 7.6.9): an entry sends while its weight (64-byte units)
    /// is not used up, a packet that starts within it going whole; VL15
    /// before everything; an entry whose VL has nothing ready is passed
    /// over and nothing is picked when no table serves a ready VL.
    #[test]
    fn ad_06_arbiter_weights_and_vl15() {
        let t = VlArbTables {
            high: Vec::new(),
            low: vec![e(0, 48), e(1, 0), e(1, 16)],
            high_limit: 0,
        };
        let mut a = Arbiter::new(t);
        // 1050-byte packets: 3072 bytes of weight send 3, 1024 send 1.
        assert_eq!(run(&mut a, 0b11, 1050, 8), [0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(run(&mut a, 0b10, 1050, 3), [1, 1, 1]);
        assert_eq!(a.pick(0b100), None);
        assert_eq!(a.pick(1 << VL15 | 0b11), Some(VL15));
        a.sent(VL15, 30);
        let mut f = Arbiter::new(VlArbTables::fair(8));
        assert_eq!(run(&mut f, 0b1101, 1050, 6), [0, 2, 3, 0, 2, 3]);
    }

    /// AD-06 (IBA 14.2.5.6): LimitOfHighPriority bounds the high-priority
    /// bytes before a ready low-priority packet goes (0: one packet; 255:
    /// none while high priority has a packet ready).
    #[test]
    fn ad_06_arbiter_high_limit() {
        let tables = |limit| VlArbTables {
            high: vec![e(1, 255)],
            low: vec![e(0, 1)],
            high_limit: limit,
        };
        let mut a = Arbiter::new(tables(0));
        assert_eq!(run(&mut a, 0b11, 1050, 4), [1, 0, 1, 0]);
        // 4096 bytes of high priority: four 1050-byte packets, then one low.
        let mut a = Arbiter::new(tables(1));
        assert_eq!(run(&mut a, 0b11, 1050, 10), [1, 1, 1, 1, 0, 1, 1, 1, 1, 0]);
        let mut a = Arbiter::new(tables(HIGH_LIMIT_UNLIMITED));
        assert_eq!(run(&mut a, 0b11, 1050, 5), [1; 5]);
        // Nothing of high priority ready: low goes, the link never idles.
        assert_eq!(run(&mut a, 0b01, 1050, 2), [0, 0]);
    }

    /// AD-06: the table checks: entries past 64, a VL the port lacks (VL15
    /// included) and an SL whose VL no entry of nonzero weight serves.
    #[test]
    fn ad_06_arbitration_table_checks() {
        let sl2vl = [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(VlArbTables::fair(8).check(8, &sl2vl), Ok(()));
        let mut t = VlArbTables::fair(8);
        t.low.push(e(VL15, 1));
        assert!(matches!(
            t.check(8, &sl2vl),
            Err(VlArbError::NotADataVl {
                vl: 15,
                entry: 8,
                ..
            })
        ));
        let t = VlArbTables {
            high: vec![e(0, 1); MAX_VL_ARB_ENTRIES + 1],
            low: vec![e(1, 1)],
            high_limit: 0,
        };
        assert!(matches!(
            t.check(8, &sl2vl),
            Err(VlArbError::TooManyEntries { table: "high", .. })
        ));
        let t = VlArbTables {
            high: vec![e(1, 0)],
            low: vec![e(0, 4)],
            high_limit: 0,
        };
        assert_eq!(
            t.check(8, &sl2vl),
            Err(VlArbError::Unserved { sl: 1, vl: 1 })
        );
        let e = Engine::new(
            PortConfig {
                sl2vl,
                vl_arb: t,
                ..PortConfig::new(1, 1)
            },
            Limits::default(),
        );
        assert_eq!(e.port().vl_arb, VlArbTables::fair(8));
    }
}
