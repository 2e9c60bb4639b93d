//! A device reset in the middle of traffic (issue 25 item 7; device/src/run.rs
//! `Core::reset`, ARCHITECTURE.md §4 "reset"): the `cmdq` bench's records (a
//! bring-up, posted WQEs, doorbells, data-path rounds) run up to the fuzzer's
//! reset point, where the command at hand may be a staged one left in progress
//! with its pieces prepared; one data-path round puts packets on the loopback
//! link; then the device resets (a new engine, every object dropped, a new
//! command queue, the link and its packets in flight kept). What must hold: the
//! reset leaves no QP, CQ, SRQ or EQ but EQ 0 and no context the window shows;
//! the packets from before and the stale prepared pieces reach the new device
//! harmlessly; and the same records, run again from the start on the reset
//! device (the driver's second bring-up), complete as the queue's own checks
//! demand, nothing panicking.
#![no_main]

use device::abi::bar0::{CtxStatus, CtxTable};
use device::context::snapshot_with_doorbells;
use device::glue::VecDoorbells;
use libfuzzer_sys::fuzz_target;
use vhca_fuzz::cmdq::{Dev, Op, Ops, UARS};

fuzz_target!(|data: &[u8]| {
    let Some((&at, records)) = data.split_first() else {
        return;
    };
    let mut d = Dev::new();
    for (i, op) in Ops(records).take(256).enumerate() {
        let ok = if i == usize::from(at) {
            let ok = d.begin(op);
            if !ok {
                return;
            }
            // Traffic in flight: one round moves doorbelled WQEs onto the link.
            d.apply(Op::Run(1));
            break;
        } else {
            d.apply(op)
        };
        if !ok {
            return;
        }
    }
    d.reset();
    assert!(d.hca.qps.is_empty() && d.hca.cqs.is_empty() && d.hca.srqs.is_empty());
    assert_eq!(d.hca.eqs.keys().copied().collect::<Vec<_>>(), vec![0]);
    let db = VecDoorbells::new(UARS);
    for t in [CtxTable::Qpc, CtxTable::Cqc, CtxTable::Srqc, CtxTable::Mpt] {
        for i in 0..8 {
            let (st, _) = snapshot_with_doorbells(&d.hca, &db, t, i);
            assert_eq!(st, CtxStatus::NoObject, "{t:?} {i} after the reset");
        }
    }
    // The old packets arrive at the new engine.
    d.apply(Op::Run(3));
    // The driver's second bring-up: the same records from the start.
    for op in Ops(records).take(256) {
        if !d.apply(op) {
            return;
        }
    }
    d.finish();
});
