//! CQ and SRQ handles after the handle counter wraps (issue 13: "handle
//! counters that wrap into live handles").

use super::*;

#[test]
fn a_wrapped_handle_counter_skips_live_cqs_and_srqs() {
    let mut e = Engine::new(PortConfig::new(1, 1), Limits::default());
    let pd = e.mrs().alloc_pd().unwrap();
    let cq = e.create_cq().unwrap();
    let srq = e.create_srq(pd, 16, 1, 0).unwrap();
    assert_eq!((cq, srq), (1, 2));
    // 2^32 - 3 creations later (a create/destroy loop): the counter is about
    // to wrap onto the live CQ and SRQ.
    e.next_handle = u32::MAX - 1;
    let a = e.create_cq().unwrap();
    let b = e.create_cq().unwrap();
    let c = e.create_cq().unwrap();
    assert_eq!((a, b), (u32::MAX - 1, u32::MAX));
    assert_eq!(c, 3, "0 is never a handle; 1 and 2 are live");
    // Every live object is still the one it was.
    e.destroy_cq(a).unwrap();
    e.destroy_cq(b).unwrap();
    e.destroy_cq(c).unwrap();
    e.destroy_cq(cq).unwrap();
    e.destroy_srq(srq).unwrap();
    assert_eq!(e.destroy_cq(cq), Err(VerbError::InvalidCq));
}
