//! DCQCN's reaction point (Zhu et al., "Congestion Control for Large-Scale
//! RDMA Deployments", SIGCOMM 2015), with the parameters, units and defaults
//! of mlx5 (Linux `drivers/infiniband/hw/mlx5/cong.c`, the `rp_*`/`np_*`
//! entries of its debugfs `cc_params`; NVIDIA's "DCQCN parameters").
//!
//! Per QP: a current rate `rc` and a target rate `rt` (a QP starts at line
//! rate, unlimited, and the controller exists from its first CNP on), and
//! `alpha`, the estimate of the fraction of marked packets (10-bit fixed
//! point, 1024 = 1).
//!
//! - **Cut** (a CNP, at most one cut per `rp_rate_reduce_monitor_period`; a
//!   CNP inside the period cuts at its end): `rt = rc` (on the first CNP,
//!   with `rp_clamp_tgt_rate`, or with `rp_clamp_tgt_rate_ati` when the
//!   timer raised the rate since the last cut), then
//!   `rc -= rc * alpha / 2^rp_gd` (`rp_gd` 11: `rc * (1 - alpha/2)`), never
//!   below `rp_min_dec_fac`% of the old rate nor `rp_min_rate`. The first CNP
//!   sets `alpha` to `rp_initial_alpha_value` (and the rates to
//!   `rp_rate_to_set_on_first_cnp` when that is not 0).
//! - **Alpha** is updated once every `rp_dce_tcp_rtt`: `alpha = g*alpha +
//!   (1 - g)` when a CNP came in the period, `g*alpha` when none did, `g =
//!   rp_dce_tcp_g / 1024`. Computed lazily when the RP next looks at it (the
//!   periods that passed since), not by a timer per microsecond.
//! - **Increase**: the rate-increase timer (`rp_time_reset`) and the byte
//!   counter (`rp_byte_reset` bytes sent) each count stages since the last
//!   cut; each expiry raises the rate: while both stage counts are at most
//!   `rp_threshold`, fast recovery (`rc = (rc + rt) / 2`); once one is past
//!   it, additive increase (`rt += rp_ai_rate` first); once both are, hyper
//!   increase (`rt += rp_hai_rate`). `rt` and `rc` stay at most
//!   `rp_max_rate` (0: line rate). Back at the maximum the QP is unlimited
//!   and its timer stops.

use super::{CcCounters, Limit};
use crate::verbs::Time;

macro_rules! params {
    ($($(#[$m:meta])* $name:ident: $default:literal, $min:literal..=$max:literal;)*) => {
        /// DCQCN's parameters, named, in the units and with the defaults of
        /// mlx5 (reaction point `rp_*`, notification point `np_*`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct Params {
            $($(#[$m])* pub $name: u32,)*
        }

        impl Default for Params {
            fn default() -> Params {
                Params { $($name: $default,)* }
            }
        }

        impl Params {
            /// Every parameter with its name, in mlx5's order.
            pub fn named(&self) -> Vec<(&'static str, u32)> {
                vec![$((stringify!($name), self.$name),)*]
            }

            /// Sets parameter `name` to `value`, checked against its range.
            pub fn set(&mut self, name: &str, value: u32) -> Result<(), String> {
                match name {
                    $(stringify!($name) => {
                        if !($min..=$max).contains(&value) {
                            return Err(format!(
                                "DCQCN parameter {name}={value} is out of range {}..={}",
                                $min, $max
                            ));
                        }
                        self.$name = value;
                    })*
                    _ => {
                        let known: Vec<&str> = vec![$(stringify!($name),)*];
                        return Err(format!(
                            "unknown DCQCN parameter {name:?} (known: {})",
                            known.join(", ")
                        ));
                    }
                }
                Ok(())
            }
        }
    };
}

params! {
    /// 1: every CNP sets the target rate to the current rate.
    rp_clamp_tgt_rate: 0, 0..=1;
    /// 1: a CNP sets the target rate to the current rate when the timer
    /// raised the rate since the last cut.
    rp_clamp_tgt_rate_ati: 1, 0..=1;
    /// Rate-increase timer, us.
    rp_time_reset: 300, 1..=131_071;
    /// Bytes sent per rate-increase stage; 0: no byte counter.
    rp_byte_reset: 32_767, 0..=32_767;
    /// Stages of fast recovery before additive increase.
    rp_threshold: 1, 1..=31;
    /// Additive increase, Mb/s.
    rp_ai_rate: 5, 1..=400_000;
    /// Highest rate, Mb/s; 0: the port's.
    rp_max_rate: 0, 0..=400_000;
    /// Hyper increase, Mb/s.
    rp_hai_rate: 50, 1..=400_000;
    /// A cut keeps at least this % of the rate.
    rp_min_dec_fac: 50, 1..=100;
    /// Lowest rate, Mb/s.
    rp_min_rate: 1, 1..=400_000;
    /// The rate the first CNP sets, Mb/s; 0: cut by the formula.
    rp_rate_to_set_on_first_cnp: 0, 0..=400_000;
    /// Alpha's gain g, in 1/1024.
    rp_dce_tcp_g: 1019, 0..=1023;
    /// Alpha update period, us.
    rp_dce_tcp_rtt: 1, 1..=131_071;
    /// Shortest time between two cuts, us.
    rp_rate_reduce_monitor_period: 4, 1..=131_071;
    /// Alpha on the first CNP, in 1/1024.
    rp_initial_alpha_value: 1023, 0..=1023;
    /// log2 of the divisor of alpha in a cut (11: alpha/2, alpha being in 1/1024).
    rp_gd: 11, 0..=15;
    /// Shortest time between two CNPs to one QP, us.
    np_min_time_between_cnps: 4, 0..=4095;
    /// DSCP of the CNPs sent.
    np_cnp_dscp: 48, 0..=63;
    /// 1: CNPs use `np_cnp_prio`; 0: the marked packet's priority (vhca
    /// sends untagged frames: kept for the name only).
    np_cnp_prio_mode: 1, 0..=1;
    /// 802.1p priority of the CNPs sent (untagged on vhca: kept for the name).
    np_cnp_prio: 6, 0..=7;
}

const US: u64 = 1_000;

impl Params {
    /// The highest rate, kb/s, on a port of `port_mbps`.
    fn max_kbps(&self, port_mbps: u32) -> u64 {
        let line = u64::from(port_mbps) * 1_000;
        match self.rp_max_rate {
            0 => line,
            m => line.min(u64::from(m) * 1_000),
        }
    }

    /// The notification point's interval between CNPs to one QP, ns.
    pub fn cnp_gap_ns(&self) -> u64 {
        u64::from(self.np_min_time_between_cnps) * US
    }

    /// The IP DS byte of a CNP: `np_cnp_dscp`, not ECN-capable.
    pub fn cnp_tos(&self) -> u8 {
        ((self.np_cnp_dscp & 0x3f) as u8) << 2
    }
}

/// ECT(0), the ECN codepoint of an ECN-capable RoCE frame (RFC 3168).
pub const ECT0: u8 = 0b10;
/// Congestion Experienced (RFC 3168): what the notification point answers.
pub const CE: u8 = 0b11;

/// Alpha's 1 (its fixed point: 20 bits of fraction).
const ALPHA_ONE: u64 = 1 << 20;

/// One QP's reaction point.
#[derive(Debug, Clone)]
pub struct Rp {
    /// Current rate, kb/s.
    rc: u64,
    /// Target rate, kb/s.
    rt: u64,
    /// Congestion estimate in 1/2^20 ([`ALPHA_ONE`]): the parameters' 1/1024
    /// with 10 more bits, so that many decays in a row of a small alpha do
    /// not truncate it to 0 (it would then cut nothing).
    alpha: u64,
    /// Start of the current alpha period.
    alpha_at: Time,
    /// A CNP came in the current alpha period.
    cnp_in_period: bool,
    /// Stages counted by the timer and the byte counter since the last cut.
    t_stage: u32,
    b_stage: u32,
    /// Bytes counted towards the next byte stage.
    bytes: u64,
    /// The timer raised the rate since the last cut (`rp_clamp_tgt_rate_ati`).
    timer_raised: bool,
    /// The last cut.
    last_cut: Option<Time>,
    /// A CNP came within the monitor period after the last cut: the cut due
    /// at the period's end.
    cut_pending: Option<Time>,
    /// The rate-increase timer, while below the highest rate.
    increase_at: Option<Time>,
}

impl Rp {
    /// A reaction point at line rate, before its first CNP.
    pub fn new(p: &Params, port_mbps: u32, now: Time) -> Rp {
        let max = p.max_kbps(port_mbps);
        Rp {
            rc: max,
            rt: max,
            alpha: u64::from(p.rp_initial_alpha_value) << 10,
            alpha_at: now,
            cnp_in_period: false,
            t_stage: 0,
            b_stage: 0,
            bytes: 0,
            timer_raised: false,
            last_cut: None,
            cut_pending: None,
            increase_at: None,
        }
    }

    /// Current rate, kb/s.
    pub fn rate_kbps(&self) -> u64 {
        self.rc
    }

    /// Target rate, kb/s.
    pub fn target_kbps(&self) -> u64 {
        self.rt
    }

    /// Alpha, in 1/1024, as of its last update.
    pub fn alpha(&self) -> u64 {
        self.alpha >> 10
    }

    pub(super) fn limit(&self) -> Limit {
        if self.increase_at.is_none() && self.cut_pending.is_none() {
            Limit::None // back at the highest rate (or never cut)
        } else {
            Limit::Kbps(self.rc)
        }
    }

    pub(super) fn deadline(&self) -> Option<Time> {
        [self.increase_at, self.cut_pending]
            .into_iter()
            .flatten()
            .min()
    }

    /// Brings alpha up to `now`: one update per `rp_dce_tcp_rtt` period that
    /// ended since the last.
    fn catch_up_alpha(&mut self, p: &Params, now: Time) {
        let period = u64::from(p.rp_dce_tcp_rtt.max(1)) * US;
        let k = now.0.saturating_sub(self.alpha_at.0) / period;
        if k == 0 {
            return;
        }
        let g = u64::from(p.rp_dce_tcp_g);
        self.alpha = if self.cnp_in_period {
            (g * self.alpha + (1024 - g) * ALPHA_ONE) / 1024
        } else {
            g * self.alpha / 1024
        };
        // The periods after it had no CNP: alpha decays; past 0 no more work.
        for _ in 1..k.min(1 << 16) {
            if self.alpha == 0 {
                break;
            }
            self.alpha = g * self.alpha / 1024;
        }
        self.alpha_at = self.alpha_at.plus_ns(k * period);
        self.cnp_in_period = false;
    }

    pub(super) fn on_cnp(&mut self, p: &Params, port_mbps: u32, now: Time, c: &mut CcCounters) {
        self.catch_up_alpha(p, now);
        let period = u64::from(p.rp_rate_reduce_monitor_period) * US;
        match self.last_cut {
            Some(t) if now.0 < t.0.saturating_add(period) => {
                self.cut_pending = Some(t.plus_ns(period));
            }
            _ => self.cut(p, port_mbps, now, c),
        }
        self.cnp_in_period = true;
    }

    fn cut(&mut self, p: &Params, port_mbps: u32, now: Time, c: &mut CcCounters) {
        let max = p.max_kbps(port_mbps);
        let min = u64::from(p.rp_min_rate) * 1_000;
        let first = self.last_cut.is_none();
        if first && p.rp_rate_to_set_on_first_cnp != 0 {
            self.rc = (u64::from(p.rp_rate_to_set_on_first_cnp) * 1_000).clamp(min.min(max), max);
            self.rt = self.rc;
        } else {
            if first
                || p.rp_clamp_tgt_rate == 1
                || (p.rp_clamp_tgt_rate_ati == 1 && self.timer_raised)
            {
                self.rt = self.rc;
            }
            // alpha (1/2^20) over 2^rp_gd (rp_gd counts alpha in 1/1024).
            let dec = ((u128::from(self.rc) * u128::from(self.alpha)) >> (p.rp_gd + 10)) as u64;
            let floor = self.rc * u64::from(p.rp_min_dec_fac) / 100;
            self.rc = self.rc.saturating_sub(dec).max(floor).max(min.min(max));
        }
        c.rate_cuts += 1;
        self.t_stage = 0;
        self.b_stage = 0;
        self.bytes = 0;
        self.timer_raised = false;
        self.last_cut = Some(now);
        self.cut_pending = None;
        self.increase_at = Some(now.plus_ns(u64::from(p.rp_time_reset) * US));
    }

    pub(super) fn on_timer(&mut self, p: &Params, port_mbps: u32, now: Time, c: &mut CcCounters) {
        self.catch_up_alpha(p, now);
        if self.cut_pending.is_some_and(|t| t <= now) {
            self.cut(p, port_mbps, now, c);
            return;
        }
        if self.increase_at.is_some_and(|t| t <= now) {
            self.t_stage = self.t_stage.saturating_add(1);
            self.timer_raised = true;
            self.increase(p, port_mbps, now);
        }
    }

    pub(super) fn on_sent(&mut self, p: &Params, port_mbps: u32, len: usize, now: Time) {
        if p.rp_byte_reset == 0 || self.increase_at.is_none() {
            return;
        }
        self.bytes += len as u64;
        if self.bytes >= u64::from(p.rp_byte_reset) {
            // One stage per packet at most, whatever the packet's size.
            self.bytes %= u64::from(p.rp_byte_reset);
            self.b_stage = self.b_stage.saturating_add(1);
            self.increase(p, port_mbps, now);
        }
    }

    /// One increase event (timer or byte counter).
    fn increase(&mut self, p: &Params, port_mbps: u32, now: Time) {
        let max = p.max_kbps(port_mbps);
        let th = p.rp_threshold;
        if self.t_stage.max(self.b_stage) <= th {
            // Fast recovery: towards the target.
        } else if self.t_stage.min(self.b_stage) > th {
            self.rt += u64::from(p.rp_hai_rate) * 1_000; // hyper increase
        } else {
            self.rt += u64::from(p.rp_ai_rate) * 1_000; // additive increase
        }
        self.rt = self.rt.min(max);
        self.rc = (self.rc + self.rt).div_ceil(2).min(max);
        self.increase_at = if self.rc >= max {
            None // back at the highest rate: unlimited, no timer
        } else {
            Some(now.plus_ns(u64::from(p.rp_time_reset) * US))
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORT: u32 = 40_000;

    #[test]
    fn defaults_are_mlx5s() {
        let p = Params::default();
        let n = p.named();
        assert_eq!(n.len(), 20);
        assert!(n.contains(&("rp_time_reset", 300)));
        assert!(n.contains(&("rp_dce_tcp_g", 1019)));
        assert!(n.contains(&("rp_gd", 11)));
        assert!(n.contains(&("np_cnp_dscp", 48)));
        let mut q = p;
        assert!(q.set("rp_ai_rate", 10).is_ok());
        assert_eq!(q.rp_ai_rate, 10);
        assert!(q.set("rp_gd", 16).unwrap_err().contains("out of range"));
        assert!(q.set("rp_nonsense", 1).unwrap_err().contains("unknown"));
        assert_eq!(p.cnp_tos(), 48 << 2);
    }

    #[test]
    fn the_first_cnp_cuts_by_alpha_over_two_and_the_monitor_period_spaces_cuts() {
        let p = Params::default();
        let mut c = CcCounters::default();
        let mut rp = Rp::new(&p, PORT, Time(0));
        assert_eq!(rp.limit(), Limit::None);
        rp.on_cnp(&p, PORT, Time(0), &mut c);
        // alpha 1023/1024: rc * (1 - alpha/2), nearly half.
        let cut = 40_000_000 - 40_000_000 * 1023 / 2048;
        assert_eq!(rp.rate_kbps(), cut);
        assert_eq!(rp.target_kbps(), 40_000_000);
        assert_eq!(rp.limit(), Limit::Kbps(cut));
        assert_eq!(c.rate_cuts, 1);
        // A CNP within 4 us waits for the period's end.
        rp.on_cnp(&p, PORT, Time(2_000), &mut c);
        assert_eq!(c.rate_cuts, 1);
        assert_eq!(rp.deadline(), Some(Time(4_000)));
        rp.on_timer(&p, PORT, Time(4_000), &mut c);
        assert_eq!(c.rate_cuts, 2);
        assert!(rp.rate_kbps() < cut);
    }

    #[test]
    fn alpha_decays_without_cnps_and_rises_with_them() {
        let p = Params::default();
        let mut c = CcCounters::default();
        let mut rp = Rp::new(&p, PORT, Time(0));
        rp.on_cnp(&p, PORT, Time(0), &mut c);
        // 200 periods of 1 us, the first with the CNP: alpha falls well below
        // its start.
        rp.on_timer(&p, PORT, Time(200_000), &mut c);
        let a = rp.alpha();
        assert!(a < 400, "{a}");
        rp.on_cnp(&p, PORT, Time(200_500), &mut c);
        rp.on_timer(&p, PORT, Time(201_000), &mut c);
        assert!(rp.alpha() > g_times(a, 1), "{} vs {a}", rp.alpha());
    }

    fn g_times(a: u64, k: u32) -> u64 {
        let mut a = a;
        for _ in 0..k {
            a = 1019 * a / 1024;
        }
        a
    }

    #[test]
    fn recovery_goes_fast_then_additive_then_hyper_back_to_line_rate() {
        let p = Params::default();
        let mut c = CcCounters::default();
        let mut rp = Rp::new(&p, PORT, Time(0));
        rp.on_cnp(&p, PORT, Time(0), &mut c);
        let cut = rp.rate_kbps();
        // Timer stage 1 (<= threshold 1): fast recovery halfway to the target.
        rp.on_timer(&p, PORT, Time(300_000), &mut c);
        assert_eq!(rp.rate_kbps(), (cut + 40_000_000) / 2);
        assert_eq!(rp.target_kbps(), 40_000_000);
        // Another CNP: the timer raised the rate, so the target clamps to it.
        rp.on_cnp(&p, PORT, Time(301_000), &mut c);
        let rt = rp.target_kbps();
        assert!(rt < 40_000_000);
        // Timer stages 1, 2: fast recovery, then additive (+5 Mb/s).
        let mut now = 301_000;
        now += 300_000;
        rp.on_timer(&p, PORT, Time(now), &mut c);
        assert_eq!(rp.target_kbps(), rt);
        now += 300_000;
        rp.on_timer(&p, PORT, Time(now), &mut c);
        assert_eq!(rp.target_kbps(), rt + 5_000);
        // Bytes: two byte stages, then both counts past the threshold: hyper.
        rp.on_sent(&p, PORT, 32_767, Time(now));
        assert_eq!(rp.target_kbps(), rt + 10_000);
        rp.on_sent(&p, PORT, 32_767, Time(now));
        assert_eq!(rp.target_kbps(), rt + 60_000);
        // Enough increases bring it back to line rate: no limit, no timer.
        for _ in 0..2_000 {
            rp.on_sent(&p, PORT, 32_767, Time(now));
        }
        assert_eq!(rp.limit(), Limit::None);
        assert_eq!(rp.deadline(), None);
    }

    #[test]
    fn a_cut_keeps_min_dec_fac_and_min_rate() {
        // rp_gd 10: alpha ~ 1 cuts to ~0 without the bounds.
        let mut p = Params {
            rp_gd: 10,
            ..Params::default()
        };
        let mut c = CcCounters::default();
        let mut rp = Rp::new(&p, PORT, Time(0));
        rp.on_cnp(&p, PORT, Time(0), &mut c);
        assert_eq!(rp.rate_kbps(), 20_000_000); // 50%
        p.rp_min_dec_fac = 1;
        p.rp_min_rate = 15_000;
        rp.on_cnp(&p, PORT, Time(10_000), &mut c);
        assert_eq!(rp.rate_kbps(), 15_000_000);
        // rate_to_set_on_first_cnp sets both rates on the first CNP.
        p.rp_rate_to_set_on_first_cnp = 1_000;
        p.rp_min_rate = 1;
        let mut rp = Rp::new(&p, PORT, Time(0));
        rp.on_cnp(&p, PORT, Time(0), &mut c);
        assert_eq!((rp.rate_kbps(), rp.target_kbps()), (1_000_000, 1_000_000));
    }
}
