//! The InfiniBand transport engine of vhca, as a sans-IO library (ARCHITECTURE.md §3).
//!
//! Today it holds the bottom layer, [`wire`]: every IBA header as a typed view and a
//! validated `Repr`, the opcode table as data, whole-packet build and parse, the two
//! CRCs, RoCEv2 encapsulation and pcap capture files. Nothing here does I/O, reads a
//! clock or touches guest memory.

#![forbid(unsafe_code)]

pub mod budget;
pub mod engine;
pub mod memory;
pub mod mr;
pub mod psn;
pub mod qp_state;
pub mod verbs;
pub mod wire;
