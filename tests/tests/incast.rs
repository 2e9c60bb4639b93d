//! Lossless links (issue 27 item 4; IBA 7.9 link-level flow control): an
//! 8-to-1 incast of RC WRITEs through one `vhca switch`, real processes.
//! With flow control on, no socket's kernel buffer overflows, the switch
//! drops nothing and no sender retransmits, the data byte for byte; the same
//! run with flow control off drops and retries. Both halves use the same
//! small UDP receive buffer (`rx_buffer`, every port of the fabric), so that
//! the run without flow control overflows it on any machine, also one whose
//! `net.core.rmem_max` caps the default ask.
//!
//! `INCAST_PRINT=1` prints what each half measured.

use vhca_tests::incast::{self, Incast};

/// A receive buffer of 256 KiB asked for (the kernel doubles it).
const EXTRA: &str = "rx_buffer = 262144\n";
const DEPTH: usize = 32;
const LEN: usize = 64 << 10;

fn show(what: &str, r: &Incast) {
    if std::env::var_os("INCAST_PRINT").is_some() {
        eprintln!(
            "{what}: kernel_drops {} switch_drops {} link_drops {} retries {} probes {} \
             resent {} stalls {} goodput {:.1} MB/s fairness {:.3} elapsed {:?}",
            r.kernel_drops,
            r.switch_drops,
            r.link_drops,
            r.retries,
            r.probes,
            r.resent,
            r.stalls,
            r.total_goodput() / 1e6,
            r.fairness(),
            r.elapsed
        );
    }
}

#[test]
fn incast_8_to_1_through_a_switch_is_lossless_with_link_flow_control_and_lossy_without() {
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

#[test]
fn jain_index_is_one_for_equal_shares_and_one_over_n_for_one_taker() {
    assert!((incast::jain(&[3.0; 8]) - 1.0).abs() < 1e-12);
    let mut one = [0.0; 8];
    one[0] = 5.0;
    assert!((incast::jain(&one) - 1.0 / 8.0).abs() < 1e-12);
}
