//! The vhca device (design.md §1): today its fabric layer only, [`fabric`]
//! (design.md §6). The register map, command queue, context tables and the `vhca`
//! binary arrive with the device issue.

// Unsafe only in small wrappers with a SAFETY comment, allowed one by one (the
// TAP's TUNSETIFF ioctl).
#![deny(unsafe_code)]

pub mod abi;
pub mod cli;
pub mod cmdq;
pub mod context;
pub mod datapath;
pub mod fabric;
pub mod glue;
pub mod hca;
pub mod port;
pub mod ring;
pub mod run;
