//! The switch's trap 128 (IBA 14.2.5.1 "Link State of at least one port of
//! switch at <LIDADDR> has changed"): when a port's link state machine moves it
//! (Down -> Init, or to Down: the transitions that set SwitchInfo:PortStateChange,
//! IBA 14.2.5.4) the switch tells its SM at port 0's MasterSMLID, which OpenSM
//! answers with a heavy sweep (its trap 128 handler) instead of waiting for its
//! next light sweep to read PortStateChange.
//!
//! Bounded (issue 26 item 7): one trap outstanding at a time, resent every
//! PortInfo:SubnetTimeOut (at least [`MIN_TRAP_RESEND_NS`]) until the SM's
//! TrapRepress names its TID (IBA 13.4.8.1), and given up (counted) after
//! [`MAX_TRAP_SENDS`] sends. A change while one is outstanding sends one more
//! after it is repressed or given up (the first may predate what the SM read).

use crate::mad::attr::{attr_id, node_type, notice_type, trap, trap128_details, NoticeRepr};
use crate::mad::header::{method, SmpRepr, SmpRoute, BASE_VERSION, SMP_CLASS_VERSION};
use crate::mad::sma::MIN_TRAP_RESEND_NS;
use crate::mad::SMP_DATA_LEN;
use crate::verbs::Time;

/// Sends of one trap before the switch stops waiting for its TrapRepress.
pub const MAX_TRAP_SENDS: u32 = 8;

/// What the trap machinery did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TrapCounters {
    /// Trap sends, resends included.
    pub sent: u64,
    /// Traps the SM repressed.
    pub repressed: u64,
    /// Traps given up after [`MAX_TRAP_SENDS`] sends unrepressed.
    pub abandoned: u64,
    /// Link state changes with no SM to tell (MasterSMLID or the switch's LID 0).
    pub no_sm: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    tid: u64,
    next_send: Time,
    sends: u32,
}

/// The switch's trap 128 state.
#[derive(Debug, Clone, Default)]
pub(super) struct Traps {
    /// A link state change not yet reported.
    wanted: bool,
    pending: Option<Pending>,
    next_tid: u64,
    pub counters: TrapCounters,
}

/// Where a trap goes: port 0's SM fields and LID, its SubnetTimeOut and M_Key.
#[derive(Debug, Clone, Copy)]
pub(super) struct TrapTarget {
    pub switch_lid: u16,
    pub sm_lid: u16,
    pub subnet_timeout: u8,
    pub mkey: u64,
}

impl Traps {
    /// A port's link state machine moved it.
    pub fn link_state_changed(&mut self) {
        self.wanted = true;
    }

    fn interval(t: &TrapTarget) -> u64 {
        // 4.096 us x 2^SubnetTimeOut, as the HCA's SMA resends its traps.
        (4096u64 << t.subnet_timeout.min(31)).max(MIN_TRAP_RESEND_NS)
    }

    /// When [`Traps::poll`] has work: a wanted trap with no other outstanding
    /// (at once), or the outstanding one's resend.
    pub fn deadline(&self, t: &TrapTarget) -> Option<Time> {
        match self.pending {
            Some(p) => Some(p.next_send),
            None if self.wanted && t.sm_lid != 0 && t.switch_lid != 0 => Some(Time(0)),
            None => None,
        }
    }

    /// The trap to send at `now`, if one is due.
    pub fn poll(&mut self, now: Time, t: &TrapTarget) -> Option<SmpRepr> {
        if let Some(p) = &mut self.pending {
            if p.next_send > now {
                return None;
            }
            if p.sends >= MAX_TRAP_SENDS {
                self.pending = None;
                self.counters.abandoned += 1;
                return self.poll(now, t);
            }
        } else {
            if !self.wanted {
                return None;
            }
            if t.sm_lid == 0 || t.switch_lid == 0 {
                // No SM has taken the switch over: nobody to tell. The SM
                // reads PortStateChange when it comes.
                self.wanted = false;
                self.counters.no_sm += 1;
                return None;
            }
            self.wanted = false;
            self.next_tid = self.next_tid.wrapping_add(1).max(1);
            self.pending = Some(Pending {
                tid: self.next_tid,
                next_send: now,
                sends: 0,
            });
        }
        let p = self.pending.as_mut()?;
        p.sends += 1;
        p.next_send = now.plus_ns(Self::interval(t));
        self.counters.sent += 1;
        let notice = NoticeRepr {
            is_generic: true,
            notice_type: notice_type::URGENT,
            producer_type: u32::from(node_type::SWITCH),
            trap_number: trap::LINK_STATE_CHANGE,
            issuer_lid: t.switch_lid,
            toggle: false,
            count: 0,
            data_details: trap128_details(t.switch_lid),
        };
        let mut data = [0u8; SMP_DATA_LEN];
        // In-range values: emit cannot fail on 64 bytes.
        let _ = notice.emit(&mut data);
        Some(SmpRepr {
            base_version: BASE_VERSION,
            class_version: SMP_CLASS_VERSION,
            method: method::TRAP,
            status: 0,
            tid: p.tid,
            attr_id: attr_id::NOTICE,
            attr_mod: 0,
            mkey: t.mkey,
            route: SmpRoute::Lid,
            data,
        })
    }

    /// A TrapRepress (IBA 13.4.8.1): true if it names the outstanding trap,
    /// which then stops.
    pub fn repress(&mut self, smp: &SmpRepr) -> bool {
        match self.pending {
            Some(p) if smp.attr_id == attr_id::NOTICE && smp.tid == p.tid => {
                self.pending = None;
                self.counters.repressed += 1;
                true
            }
            _ => false,
        }
    }

    /// Whether a trap is outstanding.
    pub fn outstanding(&self) -> bool {
        self.pending.is_some()
    }
}
