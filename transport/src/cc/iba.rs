//! The InfiniBand congestion control agent's source side (IBA Annex A10.3;
//! issue 31 item 2): a QP that gets a BECN (on an ACK, or in a CN packet)
//! moves up its port's CongestionControlTable, and a timer brings it back.
//!
//! Per QP (CACongestionSetting:Port_Control bit 0 clear, "QP based"), with the
//! parameters of the QP's SL (its CACongestionEntry, A10.4.3.8):
//!
//! - a BECN adds CCTI_Increase to the QP's CCT index (CCTI), at most
//!   CCTI_Limit (A10.3.1.1);
//! - every CCTI_Timer (1.024 us units) the CCTI goes down by one, never below
//!   CCTI_Min (A10.3.1.2); the timer runs only while the CCTI is above the
//!   minimum (a running timer at the minimum changes nothing);
//! - the CCT entry at the CCTI gives the inter-packet delay, CCT_Multiplier
//!   shifted left by CCT_Shift (A10.3.1.3), applied as IBA 9.11 counts static
//!   rate's IPD ([`super::Limit::Ipd`]): entry 0 is usually 0, no delay.
//! - reaching the SL's Trigger_Threshold counts an event (the CA's
//!   CongestionLog, A10.4.3.5).
//!
//! Not modelled: SL/port based control (Port_Control bit 0 set: one CCTI per
//! SL shared by the port's QPs); such a port runs per QP with the same
//! parameters.

use super::{CcCounters, Limit};
use crate::mad::cc_attr::{CaCongestionEntry, CaCongestionSetting, CctEntry, CA_ENTRIES};
use crate::verbs::Time;

/// A timer tick of CCTI_Timer (A10.4.3.8): 1.024 us.
pub const TIMER_UNIT_NS: u64 = 1024;

/// The port's CCA parameters: CACongestionSetting and the CCT, as the CC
/// manager (or the fabric file) set them through the port's CC agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params {
    pub port_control: u16,
    /// Per SL.
    pub sl: [CaCongestionEntry; CA_ENTRIES],
    /// The IPD of each CCT entry, index 0 to CCTI_Limit.
    pub ipd: Vec<u32>,
}

impl Params {
    /// The parameters a CC agent holds: its CACongestionSetting and its table up
    /// to CCTI_Limit.
    pub fn from_agent(setting: &CaCongestionSetting, cct: &[CctEntry]) -> Params {
        Params {
            port_control: setting.port_control,
            sl: setting.entries,
            ipd: cct.iter().map(CctEntry::delay).collect(),
        }
    }

    /// CCTI_Limit: the last index of the table (0 with no table).
    pub fn ccti_limit(&self) -> u16 {
        self.ipd.len().saturating_sub(1) as u16
    }

    fn entry(&self, sl: u8) -> &CaCongestionEntry {
        &self.sl[usize::from(sl & 0xf)]
    }

    fn ipd_at(&self, ccti: u16) -> u32 {
        self.ipd.get(usize::from(ccti)).copied().unwrap_or(0)
    }
}

/// One QP's CCA state: its SL, CCTI, the timer, the IPD now in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cca {
    sl: u8,
    ccti: u16,
    timer_at: Option<Time>,
    ipd: u32,
    /// Trigger_Threshold events (A10.4.3.5) of this QP.
    pub triggers: u64,
}

impl Cca {
    /// A QP on `sl` that got its first BECN: it starts at the SL's CCTI_Min.
    pub fn new(p: &Params, sl: u8) -> Cca {
        let ccti = u16::from(p.entry(sl).ccti_min).min(p.ccti_limit());
        Cca {
            sl: sl & 0xf,
            ccti,
            timer_at: None,
            ipd: p.ipd_at(ccti),
            triggers: 0,
        }
    }

    pub fn ccti(&self) -> u16 {
        self.ccti
    }

    /// The QP's limit: the IPD of the CCT entry at its CCTI.
    pub fn limit(&self) -> Limit {
        Limit::Ipd(self.ipd)
    }

    /// When the CCTI next goes down, if it is above the minimum.
    pub fn deadline(&self) -> Option<Time> {
        self.timer_at
    }

    /// A BECN for the QP at `now` (A10.3.1.1): CCTI up by CCTI_Increase, at
    /// most CCTI_Limit; the timer starts if it was not running.
    pub fn on_becn(&mut self, p: &Params, now: Time, c: &mut CcCounters) {
        let e = *p.entry(self.sl);
        let before = self.ccti;
        self.ccti = self
            .ccti
            .saturating_add(u16::from(e.ccti_increase))
            .min(p.ccti_limit());
        if self.ccti > before {
            c.rate_cuts += 1;
        }
        let trig = u16::from(e.trigger_threshold);
        if trig != 0 && before < trig && self.ccti >= trig {
            self.triggers += 1;
        }
        self.ipd = p.ipd_at(self.ccti);
        if self.timer_at.is_none() {
            self.arm(p, now);
        }
    }

    /// The timer ran out at `now` (A10.3.1.2): CCTI down by one, not below
    /// CCTI_Min; the timer starts again while above it.
    pub fn on_timer(&mut self, p: &Params, now: Time) {
        self.timer_at = None;
        let min = u16::from(p.entry(self.sl).ccti_min);
        if self.ccti > min {
            self.ccti -= 1;
        }
        self.ccti = self.ccti.min(p.ccti_limit());
        self.ipd = p.ipd_at(self.ccti);
        self.arm(p, now);
    }

    /// Whether the QP is back where it started (no delay, no timer): the
    /// engine may drop the state.
    pub fn at_rest(&self, p: &Params) -> bool {
        self.timer_at.is_none()
            && self.ipd == 0
            && self.ccti <= u16::from(p.entry(self.sl).ccti_min)
    }

    fn arm(&mut self, p: &Params, now: Time) {
        let e = p.entry(self.sl);
        // CCTI_Timer 0: the index never comes down (the manager's choice).
        if self.ccti > u16::from(e.ccti_min) && e.ccti_timer != 0 {
            self.timer_at = Some(now.plus_ns(u64::from(e.ccti_timer) * TIMER_UNIT_NS));
        }
    }
}
