//! Lossless links (issue 27 item 4; IBA 7.9 link-level flow control): an
//! 8-to-1 incast of RC WRITEs through one `vhca switch`, real processes.
//! With flow control on, no socket's kernel buffer overflows, the switch
//! drops nothing and no sender retransmits, the data byte for byte; the same
//! run with flow control off drops and retries. Both halves use the same
//! small UDP receive buffer (`rx_buffer`, every port of the fabric), so that
//! the run without flow control overflows it on any machine, also one whose
//! `net.core.rmem_max` caps the default ask.
//!
//! IBA congestion control between the processes (issue 31 item 2, annex
//! A10): the same incast with the fabric file's `[ib_cc]` marks FECN at the
//! switch, the receiver sees it and the senders get BECNs and cut their
//! rates; without `[ib_cc]` none of it happens.
//!
//! `INCAST_PRINT=1` prints what each half measured.

use std::sync::Mutex;

use vhca_tests::incast::{self, Incast, Setup};

/// One incast at a time: each is ten processes on a 2-core host, and two at
/// once (the test harness runs a file's tests in parallel) starved a
/// receiver past its switch port's HOQLife (268 ms), which then discarded
/// packets (IBA 18.2.5.4), in a loaded CI run.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A receive buffer of 256 KiB asked for (the kernel doubles it).
const EXTRA: &str = "rx_buffer = 262144\n";
const DEPTH: usize = 32;
const LEN: usize = 64 << 10;

fn show(what: &str, r: &Incast) {
    if std::env::var_os("INCAST_PRINT").is_some() {
        eprintln!(
            "{what}: kernel_drops {} switch_drops {} link_drops {} retries {} probes {} \
             resent {} stalls {} goodput {:.1} MB/s fairness {:.3} elapsed {:?} \
             fecn_marked {} fecn_seen {} becns {} rate_cuts {}",
            r.kernel_drops,
            r.switch_drops,
            r.link_drops,
            r.retries,
            r.probes,
            r.resent,
            r.stalls,
            r.total_goodput() / 1e6,
            r.fairness(),
            r.elapsed,
            r.fecn_marked,
            r.fecn_seen,
            r.becns,
            r.rate_cuts
        );
    }
}

#[test]
fn incast_8_to_1_through_a_switch_is_lossless_with_link_flow_control_and_lossy_without() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let extra = std::env::var("INCAST_EXTRA").unwrap_or(EXTRA.into());
    let on = incast::run(true, &extra, DEPTH, LEN);
    show("flow control on", &on);
    let off = incast::run(false, &extra, DEPTH, LEN);
    show("flow control off", &off);
    assert_eq!(on.kernel_drops, 0, "kernel drops with flow control: {on:?}");
    assert_eq!(on.switch_drops, 0, "switch drops with flow control: {on:?}");
    assert_eq!(on.link_drops, 0, "link drops with flow control: {on:?}");
    assert_eq!(on.retries, 0, "retries with flow control: {on:?}");
    assert_eq!(on.resent, 0, "packets resent with flow control: {on:?}");
    assert!(on.stalls > 0, "the incast never waited for credit: {on:?}");
    assert!(
        off.kernel_drops + off.switch_drops + off.link_drops > 0,
        "no drops without flow control: {off:?}"
    );
    assert!(off.retries > 0, "no retries without flow control: {off:?}");
    assert_eq!(off.stalls, 0, "no credit without flow control: {off:?}");
}

/// A10.2.1 (the switch marks FECN past its threshold), A10.2.2 (the
/// destination answers with BECN on its ACKs), A10.3.1 (the source's CCTI
/// rises per BECN), between real processes: `[ib_cc]` in the fabric file
/// reaches the switch and every node, and the marks show in the switch's
/// counters (`fecn_marked`) and the ports' (`cc_fecn_seen`,
/// `cc_becns_received`, `cc_rate_cuts`). Not timed: any incast that queues
/// at the receiver's switch port marks.
#[test]
fn a10_2_incast_through_a_switch_with_ib_cc_marks_fecn_and_senders_cut_on_becn_and_without_none() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let setup = |tables| Setup {
        flow_control: true,
        extra: "",
        tables,
        depth: 16,
        laps: 1,
        len: LEN,
        victim: 0,
    };
    let on = incast::run_setup(&setup("[ib_cc]\nthreshold = 15\n"));
    show("ib_cc on", &on);
    let off = incast::run_setup(&setup(""));
    show("ib_cc off", &off);
    assert!(on.fecn_marked > 0, "the switch marked no FECN: {on:?}");
    assert!(
        on.fecn_seen > 0 && on.fecn_seen <= on.fecn_marked,
        "the receiver saw {} of {} FECN marks: {on:?}",
        on.fecn_seen,
        on.fecn_marked
    );
    assert!(on.becns > 0, "no BECN reached a sender: {on:?}");
    assert!(on.rate_cuts > 0, "no sender cut its rate: {on:?}");
    for (what, n) in [
        ("fecn_marked", off.fecn_marked),
        ("cc_fecn_seen", off.fecn_seen),
        ("cc_becns_received", off.becns),
        ("cc_rate_cuts", off.rate_cuts),
    ] {
        assert_eq!(n, 0, "{what} without [ib_cc]: {off:?}");
    }
    // Lossless both ways (IBA 7.9): congestion control only paces.
    for r in [&on, &off] {
        assert_eq!(r.kernel_drops + r.switch_drops + r.link_drops, 0, "{r:?}");
    }
}

#[test]
fn jain_index_is_one_for_equal_shares_and_one_over_n_for_one_taker() {
    assert!((incast::jain(&[3.0; 8]) - 1.0).abs() < 1e-12);
    let mut one = [0.0; 8];
    one[0] = 5.0;
    assert!((incast::jain(&one) - 1.0 / 8.0).abs() < 1e-12);
}
