//! The vhca device (ARCHITECTURE.md §1): today its fabric layer only, [`fabric`]
//! (ARCHITECTURE.md §6). The register map, command queue, context tables and the `vhca`
//! binary arrive with the device issue.

// Denied, not forbidden: `fabric::tap_sys` holds the TUN ioctls, each in a small
// wrapper with its SAFETY argument, and allows it for that file alone.
#![deny(unsafe_code)]

pub mod abi;
pub mod caps;
pub mod cli;
pub mod cmdq;
pub mod context;
pub mod convert;
pub mod datapath;
pub mod fabric;
pub mod glue;
pub mod hca;
pub mod net;
pub mod port;
pub mod ring;
pub mod run;
