//! The vhca device (ARCHITECTURE.md §1): the HCA a guest sees and the `vhca`
//! binary that serves it.
//!
//! - [`abi`]: the guest-visible interface, defined once (the C header is
//!   generated from it, ARCHITECTURE.md §4); [`caps`] the device's limits.
//! - [`cmdq`]: the command queue, one handler file per object family;
//!   [`hca`] the device-resident tables; [`context`] BAR0's context window;
//!   [`dm`] device memory and the address window the engine reaches it by.
//! - [`datapath`]: doorbells, WQE fetch, CQE/EQE writes, interrupts, over
//!   checked guest rings ([`ring`]); [`convert`] ABI <-> engine values.
//! - [`port`]: the transport engine and its link; [`fabric`] the links (UDP,
//!   TAP) and stages (faults, capture, fabric key; ARCHITECTURE.md §6); [`net`]
//!   the RoCE port's vhost-user-net backend for the guest's NIC.
//! - [`switch_proc`]: `vhca switch`, the process that drives the sans-IO
//!   switch core over UDP (issue 26 item 3).
//! - [`run`]: threads, BAR0 registers and the sleep protocol; [`glue`] guest
//!   memory, BAR2 and MSI-X over the `pci` crate; [`cli`] the command line,
//!   [`cli_config`] its `--config` file and the vhost-user backend conventions.

// Denied, not forbidden: `fabric::tap_sys` holds the TUN ioctls, each in a small
// wrapper with its SAFETY argument, and allows it for that file alone (so do
// `fabric::udp_sys` and `run::sleep`'s `epoll_pwait2`).
#![deny(unsafe_code)]

pub mod abi;
pub mod caps;
pub mod cli;
pub mod cli_config;
pub mod cmdq;
pub mod context;
pub mod convert;
pub mod copy_tune;
pub mod counters_out;
pub mod datapath;
pub mod dm;
pub mod fabric;
pub mod glue;
pub mod hca;
pub mod metrics;
pub mod mgmt;
pub mod net;
mod panic_text;
pub mod port;
pub mod ring;
pub mod run;
pub mod switch_proc;
pub mod topology_cli;
pub mod units;
