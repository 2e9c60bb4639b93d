//! The device's limits follow its memory budget (ARCHITECTURE.md §9): what
//! QUERY_DEVICE and BAR0's CAP_* registers promise (ibv_devinfo's max_qp,
//! max_mr, max_qp_wr) fits in `--mem-budget`.

use device::caps::Caps;
use transport::budget::{mr_bytes, qp_bytes, recv_wqe_bytes};
use transport::engine::Limits;

#[test]
fn caps_never_promise_more_than_the_memory_budget_holds() {
    let l = Limits::default();
    let big = Caps::from_limits(&l);
    println!(
        "default budget {} MiB: max_qp {} (a QP reserves {} bytes), max_mr {}, max_qp_wr {}",
        l.mem_budget >> 20,
        big.max_qp,
        qp_bytes(l.max_rd_atomic),
        big.max_mr,
        big.max_qp_wr
    );
    // The default budget does not cut the engine's own limits.
    assert_eq!(big.max_qp as usize, l.max_qp);
    assert_eq!(big.max_qp_wr, l.max_qp_wr);
    let small = Limits {
        mem_budget: 4 << 20,
        ..l
    };
    let c = Caps::from_limits(&small);
    println!(
        "4 MiB budget: max_qp {}, max_mr {}, max_qp_wr {}",
        c.max_qp, c.max_mr, c.max_qp_wr
    );
    assert!(c.max_qp < big.max_qp);
    assert!(u64::from(c.max_qp) * qp_bytes(l.max_rd_atomic) <= small.mem_budget);
    assert!(u64::from(c.max_mr) * mr_bytes(0) <= small.mem_budget);
    assert!(u64::from(c.max_qp_wr) * recv_wqe_bytes(1) <= small.mem_budget);
}
