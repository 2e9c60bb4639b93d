//! The IBA congestion control agent's source side (issue 31 item 2; IBA Annex
//! A10.3): a QP's CCT index rises by CCTI_Increase per BECN up to CCTI_Limit,
//! comes down by one per CCTI_Timer to CCTI_Min, and the CCT entry at the index
//! is the QP's inter-packet delay, through the congestion-control hook
//! (`cc::Controller`) the engine's pacing gate reads.

use transport::cc::iba::{Params, TIMER_UNIT_NS};
use transport::cc::{CcConfig, CcCounters, Controller, Limit, Notification};
use transport::mad::cc::CcAgent;
use transport::mad::cc_attr::{CaCongestionEntry, CaCongestionSetting, CctEntry};
use transport::verbs::Time;

const T0: Time = Time(1_000_000);
const MBPS: u32 = 100_000;

/// SL 3: CCTI_Timer 10 (10.24 us), CCTI_Increase 2, Trigger_Threshold 6,
/// CCTI_Min 1; a 9-entry table whose entry i is IPD i*10 (shift 1: multiplier
/// 5i), CCTI_Limit 8.
fn config() -> CcConfig {
    let mut agent = CcAgent::ca();
    let mut s = CaCongestionSetting {
        port_control: 0,
        control_map: 1 << 3,
        ..CaCongestionSetting::default()
    };
    s.entries[3] = CaCongestionEntry {
        ccti_timer: 10,
        ccti_increase: 2,
        trigger_threshold: 6,
        ccti_min: 1,
    };
    agent.set_ca_setting(&s);
    let cct: Vec<CctEntry> = (0..9)
        .map(|i| CctEntry {
            shift: 1,
            multiplier: 5 * i,
        })
        .collect();
    agent.set_cct(&cct);
    CcConfig {
        iba: Some(Params::from_agent(agent.ca_setting(), agent.cct())),
        ..CcConfig::default()
    }
}

fn becn(c: &mut Controller, cfg: &CcConfig, now: Time, k: &mut CcCounters) -> bool {
    c.on_notify(cfg, MBPS, Notification::Becn { sl: 3 }, now, k)
}

#[test]
fn a10_3_1_ccti_rises_by_ccti_increase_per_becn_up_to_ccti_limit() {
    let cfg = config();
    let mut k = CcCounters::default();
    let mut c = Controller::Idle;
    assert_eq!(c.limit(), Limit::None);
    // The first BECN starts the QP at CCTI_Min 1 and adds 2: CCTI 3, IPD 30.
    assert!(becn(&mut c, &cfg, T0, &mut k));
    assert_eq!(c.limit(), Limit::Ipd(30));
    assert!(becn(&mut c, &cfg, T0, &mut k));
    assert_eq!(c.limit(), Limit::Ipd(50));
    for _ in 0..5 {
        becn(&mut c, &cfg, T0, &mut k);
    }
    assert_eq!(c.limit(), Limit::Ipd(80), "capped at CCTI_Limit 8");
    assert_eq!(
        k.rate_cuts, 4,
        "3, 5, 7, 8: a BECN at the limit cuts nothing"
    );
    let Controller::Iba(cca) = &c else {
        panic!("{c:?}")
    };
    assert_eq!(cca.ccti(), 8);
    assert_eq!(cca.triggers, 1, "Trigger_Threshold 6 crossed once");
}

#[test]
fn a10_3_1_ccti_timer_brings_the_index_down_to_ccti_min_then_stops() {
    let cfg = config();
    let mut k = CcCounters::default();
    let mut c = Controller::Idle;
    becn(&mut c, &cfg, T0, &mut k);
    becn(&mut c, &cfg, T0, &mut k); // CCTI 5
    let tick = 10 * TIMER_UNIT_NS;
    assert_eq!(c.deadline(), Some(T0.plus_ns(tick)));
    let mut now = T0;
    let mut ipds = vec![];
    while let Some(d) = c.deadline() {
        assert!(d > now, "the timer moves forward");
        now = d;
        c.on_timer(&cfg, MBPS, now, &mut k);
        ipds.push(c.limit());
    }
    assert_eq!(
        ipds,
        [
            Limit::Ipd(40),
            Limit::Ipd(30),
            Limit::Ipd(20),
            Limit::Ipd(10)
        ],
        "one step per CCTI_Timer, down to CCTI_Min 1 (IPD 10)"
    );
    assert_eq!(now, T0.plus_ns(4 * tick));
    // A BECN while the timer runs does not restart it.
    becn(&mut c, &cfg, now, &mut k); // 1 -> 3
    let d = c.deadline().unwrap();
    becn(&mut c, &cfg, now.plus_ns(tick / 2), &mut k); // 3 -> 5
    assert_eq!(c.deadline(), Some(d));
}

#[test]
fn a10_3_1_a_table_whose_floor_is_no_delay_returns_the_qp_to_idle() {
    // CCTI_Min 0 and entry 0 IPD 0: once the timer has brought the index back
    // the QP has no limit and no timer.
    let mut cfg = config();
    if let Some(p) = cfg.iba.as_mut() {
        p.sl[3].ccti_min = 0;
    }
    let mut k = CcCounters::default();
    let mut c = Controller::Idle;
    becn(&mut c, &cfg, T0, &mut k); // 0 -> 2
    let mut steps = 0;
    while let Some(d) = c.deadline() {
        c.on_timer(&cfg, MBPS, d, &mut k);
        steps += 1;
    }
    assert_eq!(steps, 2);
    assert!(matches!(c, Controller::Idle), "{c:?}");
    assert_eq!(c.limit(), Limit::None);
}

#[test]
fn a10_3_a_port_without_a_cca_ignores_becn() {
    let mut k = CcCounters::default();
    let mut c = Controller::Idle;
    assert!(!becn(&mut c, &CcConfig::default(), T0, &mut k));
    assert!(matches!(c, Controller::Idle));
    // A table of one entry (CCTI_Limit 0): BECNs change nothing.
    let mut cfg = config();
    if let Some(p) = cfg.iba.as_mut() {
        p.ipd.truncate(1);
    }
    becn(&mut c, &cfg, T0, &mut k);
    assert_eq!(c.limit(), Limit::Ipd(0));
    assert_eq!(k.rate_cuts, 0);
}
