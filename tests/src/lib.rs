//! The userspace test driver of vhca (ARCHITECTURE.md §8, "device" tier): plays the
//! guest against real `vhca` processes over their vfio-user sockets.
//!
//! - [`process`]: [`Vhca::spawn`] starts N processes on a fabric file on UDP
//!   loopback (sockets, logs, captures in a temporary folder; killed on drop;
//!   a watchdog kills them if a test hangs).
//! - [`guest`]: [`Guest`] is QEMU's side of the socket: a memfd as guest RAM,
//!   DMA-mapped; config space; BAR0 by messages, BAR2 mapped; MSI-X vectors as
//!   eventfds; a page allocator (contiguous and deliberately scattered pages).
//! - [`hca`]: [`Hca`] is the driver: bring-up by abi::bar0's rules, the command
//!   queue, a typed wrapper per command, QP state helpers.
//! - [`verbs`]: WQEs into rings, doorbells with the asleep/WAKE protocol, CQEs and
//!   EQEs by the owner bit, arming, MSI-X waits; raw ring and doorbell access for
//!   fuzzing.
//! - [`fixture`]: shortcuts the integration tests share.
//! - [`switch_proc`], [`fat_tree`]: `vhca switch` processes, and a generated
//!   fat tree of them with its HCAs.
//! - [`mini_sm`]: a small subnet manager on a node's QP0 (directed-route
//!   discovery, LIDs, min-hop LFTs, multicast trees, port activation).
//! - [`netns`]: two network namespaces joined by a veth, standing for two hosts.
//! - [`bench_tsv`]: the benchmark examples' machine-readable figures.
//! - [`ecn_switch`]: the logic of `ecn-switch`, a rate-limited RED/ECN-marking
//!   switch between TAP devices (issue 31's RoCE bottleneck where the kernel
//!   has no marking qdisc).
//!
//! Everything is written against `device::abi`, the one source of the ABI.
//!
//! Environment: `VHCA_BIN` (a prebuilt binary), `VHCA_TEST_LOG` (the device's
//! `--log`), `VHCA_TEST_SEED` (replay a random test), `VHCA_TEST_TIMEOUT`
//! (watchdog seconds), `VHCA_KEEP` (keep the run folder), `VHCA_TEST_STDERR`
//! (print the devices' stderr at the end), `VHCA_REQUIRE_TSHARK`.

pub mod bench_tsv;
pub mod ecn_switch;
pub mod fat_tree;
pub mod fixture;
pub mod guest;
pub mod hca;
pub mod incast;
pub mod mini_sm;
pub mod netns;
pub mod process;
pub mod switch_proc;
pub mod sys;
pub mod util;
pub mod verbs;
pub mod vhost_net;

pub use device::abi;
pub use guest::{Buf, Guest, GuestOptions, Layout};
pub use hca::{
    CmdError, ConnOpts, CqH, EqH, Hca, HcaConfig, Mr, Nothing, PblKind, Pd, QpH, QpInit, Remote,
    SrqH,
};
pub use process::{Build, Options, Vhca};
pub use verbs::{RecvWr, SendWr};

/// Logs of the test driver to stderr, by `RUST_LOG` (once per process).
pub fn init_logging() {
    let _ = env_logger::builder().is_test(true).try_init();
}
