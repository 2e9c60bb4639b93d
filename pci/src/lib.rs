//! A generic PCI Express function served to QEMU over vfio-user
//! (ARCHITECTURE.md §1, §5). It knows nothing of InfiniBand: the embedder
//! describes the function with a [`FunctionBuilder`], implements [`Device`]
//! for its trapped BAR registers, and runs a [`Server`] on one thread while
//! its data path uses a [`Handle`] on others.
//!
//! ```no_run
//! use pci::{BarSpec, Device, FunctionBuilder, Server};
//!
//! struct Regs;
//! impl Device for Regs {
//!     fn bar_read(&mut self, _bar: usize, _offset: u64, data: &mut [u8]) { data.fill(0) }
//!     fn bar_write(&mut self, _bar: usize, _offset: u64, _data: &[u8]) {}
//! }
//!
//! let function = FunctionBuilder::new(0x1234, 0x11c6)
//!     .class_code(0x0c0600)
//!     .bar(0, BarSpec::trapped(0x10000))
//!     .bar(2, BarSpec::mapped(0x10000))
//!     .msix(8, 0, 0x8000, 0x9000)
//!     .build()?;
//! let mut server = Server::bind("/run/vhca.sock", function)?;
//! let handle = server.handle(); // to the data path thread
//! std::thread::spawn(move || {
//!     let doorbells = handle.bar_memory(2).unwrap();
//!     if doorbells.load_u32(0) == Ok(1) {
//!         handle.trigger(1);
//!     }
//! });
//! server.serve(&mut Regs)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What lives where:
//! - [`config`]: the 4 KiB config space with read-only / read-write /
//!   write-1-to-clear masks; `caps`: PCIe, PM and MSI-X capabilities.
//! - [`bar`]: BAR layouts (trapped and mapped pages) and [`BarMemory`].
//! - [`msix`]: vectors as eventfds, the PBA, the table.
//! - [`dma`]: guest memory from DMA_MAP ([`DmaMemory`]).
//! - `function`: the builder, [`Function`], [`Handle`], [`Device`].
//! - `server`: the accept loop around the vfio-user crate and the crate
//!   defects it guards against.

pub mod bar;
mod caps;
pub mod config;
pub mod dma;
mod function;
pub mod msix;
mod peer;
mod server;
mod sync;

pub use bar::{BarError, BarMemory, BarSpec, PAGE_SIZE};
pub use dma::{seal_and_check_size, DmaError, DmaMemory, DmaView, GuestMemoryMmap, MapError};
pub use function::{
    BuildError, Device, Function, FunctionBuilder, FunctionCounters, Handle, MAX_VECTORS,
    NOT_SHARED_HINT, NUM_BARS,
};
pub use msix::{MsixCounters, Trigger};
pub use server::{ServeError, Server, Stopper};

/// Re-exported so that embedders and tests name the same versions.
pub use {vfio_bindings, vfio_user, vm_memory};
