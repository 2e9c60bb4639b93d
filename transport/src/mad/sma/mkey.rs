//! M_Key protection of one port's SMA (IBA 14.2.4; AD-12), shared by the HCA's
//! SMA and the switch's port 0: the check of a request's M_Key against
//! PortInfo:M_Key at PortInfo:M_KeyProtectBits, the M_KeyViolations count, and
//! the lease timer (M_KeyLeasePeriod) that clears the protection when no SM has
//! presented the key for that long after a failed check.

use crate::mad::attr::BadMkeyDetails;
use crate::mad::header::{method, SmpRepr, SmpRoute};
use crate::mad::lease::LeaseTimer;
use crate::mad::portinfo::PortInfoRepr;
use crate::verbs::Time;

/// The lease timer of one port's M_Key (IBA 14.2.4.2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MkeyLease {
    /// Started by a failed check, stopped by a match.
    timer: LeaseTimer,
}

impl MkeyLease {
    /// The M_Key check of `smp` against the port's `pi`. `Ok(matched)` lets the
    /// request on; `Err` fails it, with trap 256's data details for the SM. At
    /// protect level 0 and 1 only a Set or TrapRepress with the wrong key fails,
    /// at 2 and 3 a Get too (IBA 14.2.4.1, Table 128). A port M_Key of 0 matches
    /// everything. A failure counts M_KeyViolations (saturating) and starts the
    /// lease timer if the lease period is not 0 and the timer is not running; a
    /// matching request stops the timer.
    pub fn check(
        &mut self,
        pi: &mut PortInfoRepr,
        smp: &SmpRepr,
        now: Time,
    ) -> Result<bool, [u8; 54]> {
        if pi.mkey == 0 || smp.mkey == pi.mkey {
            self.timer.stop();
            return Ok(true);
        }
        let fails = match smp.method {
            method::GET => pi.mkey_protect_bits >= 2,
            method::SET | method::TRAP_REPRESS => true,
            _ => false,
        };
        if !fails {
            return Ok(false);
        }
        pi.mkey_violations = pi.mkey_violations.saturating_add(1);
        self.timer.start(pi.mkey_lease_period, now);
        Err(bad_mkey_details(pi.lid, smp))
    }

    /// Clears M_KeyProtectBits once the lease has run out (IBA 14.2.4.2). True
    /// when it ran out now.
    pub fn expire(&mut self, pi: &mut PortInfoRepr, now: Time) -> bool {
        let expired = self.timer.expired(now);
        if expired {
            pi.mkey_protect_bits = 0;
        }
        expired
    }

    /// When [`MkeyLease::expire`] next has work.
    pub fn deadline(&self) -> Option<Time> {
        self.timer.deadline()
    }
}

/// Trap 256's data details for an SMP that failed the check at the port of LID
/// `lid`. The return path keeps the SMP's indexing (entry i = hop i, entry 0
/// unused), cut at 30 bytes (DRPathTruncated then set by `emit`).
fn bad_mkey_details(lid: u16, smp: &SmpRepr) -> [u8; 54] {
    let (dr_notice, dr_slid, dr_hop_cnt, dr_return_path) = match &smp.route {
        SmpRoute::Lid => (false, 0, 0, [0u8; 30]),
        SmpRoute::Directed(dr) => {
            let mut p = [0u8; 30];
            let n = (usize::from(dr.hop_cnt) + 1).min(30);
            p[..n].copy_from_slice(&dr.return_path[..n]);
            (true, dr.dr_slid, dr.hop_cnt, p)
        }
    };
    BadMkeyDetails {
        lid,
        dr_slid,
        method: smp.method,
        attr_id: smp.attr_id,
        attr_mod: smp.attr_mod,
        mkey: smp.mkey,
        dr_notice,
        dr_hop_cnt,
        dr_return_path,
    }
    .emit()
}
