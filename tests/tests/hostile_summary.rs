//! The doorbell summary against a live vhca (issue 12, abi::uar
//! DOORBELL_PROTOCOL, ARCHITECTURE.md §2 and §9): the device reads a producer
//! slot only when the slot's summary bit sends it there, takes the bits from
//! the shared BAR2 memory with an atomic swap, and shrugs off bits a guest sets
//! for nothing.

use std::time::Duration;

use vhca_tests::abi::bar0::reg;
use vhca_tests::abi::uar::uar;
use vhca_tests::abi::verbs::{QpState, QpType};
use vhca_tests::fixture::Node;
use vhca_tests::util::pattern;
use vhca_tests::verbs::{encode_send, wc_status};
use vhca_tests::{ConnOpts, Options, Remote, SendWr, Vhca};

/// Rounds a woken device surely ran.
const SETTLE: Duration = Duration::from_millis(300);

/// Every bit of a doorbell page's summary set at once (the header's and the
/// summary's own slots, free slots, the CQ's, QPs with nothing posted) is
/// taken in one go and changes nothing; an SQ producer index stored without
/// its bit is not fetched, WAKE or not; the bit alone then sends the WRITE.
#[test]
fn hostile_guest_summary_bits_gate_the_fetch_and_spurious_ones_are_harmless() {
    let mut v = Vhca::spawn(Options::nodes(1));
    let mut n = Node::connect(&v, 0);
    let lid = n.lid();
    let a = n.qp(QpType::Rc);
    let b = n.qp(QpType::Rc);
    let o = ConnOpts::default();
    let to = |qpn| Remote {
        lid,
        qpn,
        psn: o.sq_psn,
    };
    n.hca.qp_to_rts_from_reset(a, Some(to(b.qpn)), &o).unwrap();
    n.hca.qp_to_rts_from_reset(b, Some(to(a.qpn)), &o).unwrap();
    let src = n.region(4096, vhca_tests::Layout::Scattered, 0);
    let dst = n.region(4096, vhca_tests::Layout::Scattered, 0);
    let data = pattern(0x5a11, 1024);
    n.write(&src, 0, &data);

    let slot = n.hca.qp_slot(a);
    let page = slot.offset() - slot.offset() % u64::from(uar::PAGE_SIZE);
    let summary: Vec<u64> = (0..uar::SUMMARY_SIZE / 4)
        .map(|w| page + u64::from(uar::SUMMARY_OFFSET) + u64::from(w) * 4)
        .collect();
    let wake = |n: &mut Node| n.hca.guest_mut().bar0_write32(reg::WAKE, 1).unwrap();

    // Spurious bits: all of them.
    for &at in &summary {
        n.hca.store_bar2(at, u32::MAX).unwrap();
    }
    wake(&mut n);
    std::thread::sleep(SETTLE);
    for &at in &summary {
        let left = n.hca.guest_mut().bar2_load32(at).unwrap();
        assert_eq!(left, 0, "summary word at {at:#x} taken by the device");
    }
    assert!(n.hca.poll_cq(n.cq, 16).is_empty(), "no completion");
    for q in [a, b] {
        assert_eq!(n.hca.qp_state(q).unwrap(), Some(QpState::Rts));
    }

    // An index without its bit: never read.
    let wr = SendWr::write(7, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 1024));
    let wqe = encode_send(&wr, QpType::Rc).unwrap();
    let (_, _, pi) = n.hca.sq_geometry(a);
    n.hca.write_sq_raw(a, pi, &wqe);
    n.hca.store_bar2(slot.offset(), pi.wrapping_add(1)).unwrap();
    wake(&mut n);
    std::thread::sleep(SETTLE);
    assert!(
        n.hca.poll_cq(n.cq, 16).is_empty(),
        "an unflagged index is not fetched"
    );
    assert_ne!(n.read(&dst, 0, 1024), data, "nothing written");

    // The same index, now with its bit (and the wake protocol): sent.
    n.hca.ring_sq_raw(a, pi.wrapping_add(1)).unwrap();
    let got = n.hca.wait_cqes(n.cq, 1, Duration::from_secs(10));
    assert_eq!(got.len(), 1, "one completion once flagged");
    assert_eq!(got[0].wr_id, 7);
    assert_eq!(
        wc_status(&got[0]),
        Some(vhca_tests::abi::verbs::WcStatus::Success)
    );
    assert_eq!(n.read(&dst, 0, 1024), data);
    v.assert_alive(0);
}
