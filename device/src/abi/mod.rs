//! The device ABI: everything the guest driver and the device agree on (ARCHITECTURE.md
//! §4), defined once, here, and generated into `guest-driver/include/vhca_abi.h`
//! by [`c_header`] (`cargo run -p device --bin vhca-abi-header`).
//!
//! Models: Alibaba erdma and VMware pvrdma (one header for the device interface,
//! command queue, doorbells), Mellanox mlx5 (owner bits, page lists). One file per
//! topic:
//!
//! - [`ident`]: PCI identity, ABI version, BARs, MSI-X placement;
//! - [`bar0`]: the trapped register file (bring-up, command queue and EQ 0
//!   registers, WAKE, the read-only context window);
//! - [`uar`]: BAR2 doorbell pages and the sleep/wake protocol of a polling device;
//! - [`verbs`]: numbers shared with ibverbs (QP types and states, opcodes, statuses,
//!   flags, attribute masks);
//! - [`cmd`]: the command queue, statuses, opcodes and every command's parameters;
//! - [`wqe`]: send and receive work queue entries;
//! - [`cqe`]: completion and event queue entries, the owner-bit convention;
//! - [`context`]: context-table records for the BAR0 window;
//! - [`counters`]: QUERY_COUNTERS sets and their names.
//!
//! The structs, enums and constants are made by the macros of [`layout`], which
//! check sizes and alignment at compile time and describe each item for the C
//! generator ([`header`]).

#[macro_use]
pub mod layout;

pub mod bar0;
pub mod cmd;
pub mod context;
pub mod counters;
pub mod cqe;
pub mod header;
pub mod ident;
pub mod uar;
pub mod verbs;
pub mod wqe;

pub use header::c_header;

use layout::{Entry, Section, StructEntry};

/// The ABI's topics, in header order (a struct comes after the structs it uses).
pub fn sections() -> Vec<Section> {
    vec![
        ident::section(),
        bar0::section(),
        uar::section(),
        verbs::section(),
        cmd::section(),
        wqe::section(),
        cqe::section(),
        context::section(),
        counters::section(),
    ]
}

/// Every ABI struct, in header order.
pub fn structs() -> Vec<StructEntry> {
    sections()
        .into_iter()
        .flat_map(|s| s.entries)
        .filter_map(|e| match e {
            Entry::Struct(s) => Some(s),
            _ => None,
        })
        .collect()
}
