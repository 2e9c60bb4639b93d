//! The InfiniBand transport engine of vhca, as a sans-IO library (ARCHITECTURE.md §3).
//!
//! - [`wire`]: every IBA header as a typed view and a validated `Repr`, the opcode
//!   table as data, whole-packet build and parse, the two CRCs, RoCEv2
//!   encapsulation and pcap capture files.
//! - [`engine`]: PDs, MRs, CQs, SRQs and QPs of RC, UC and UD (requester,
//!   completer, responder, loss recovery), driven by verbs, received packets and
//!   timer firings; [`mr`] its memory protection, [`qp_state`] the Modify QP
//!   table, [`verbs`] its API types, [`memory`] the guest-memory trait,
//!   [`budget`] the host memory a guest may make it hold (ARCHITECTURE.md §9),
//!   [`psn`] 24-bit sequence arithmetic.
//! - [`mad`]: the management plane's core: MAD and SMP codecs, directed route and
//!   the Subnet Management Agent of a port (issue 26; AD-09, AD-12).
//!
//! Nothing here does I/O, reads a clock or touches guest memory other than
//! through the caller's [`memory::Memory`].

#![forbid(unsafe_code)]

pub mod budget;
pub mod cc;
pub mod engine;
pub mod flow;
pub mod mad;
pub mod memory;
pub mod mr;
pub mod psn;
pub mod qp_state;
pub mod switch;
pub mod verbs;
pub mod wire;
