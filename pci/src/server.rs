//! Serving a [`Function`] on a UNIX socket with the vfio-user crate, one
//! client after another.
//!
//! `vfio_user::Server::run` handles one connection and returns when the
//! client hangs up; it has no disconnect hook, so the loop here drops the
//! client's DMA maps and eventfds after every connection (stale maps would
//! overlap the next VM's and point at dead memory, ARCHITECTURE.md §5), tells the
//! embedder, and accepts the next one.
//!
//! Defects of vfio_user 0.1.7 and what this module does about them:
//! - Fixed in the patched copy the workspace uses (vendor/vfio_user,
//!   PATCHED.md; issue 13): a VERSION payload without a NUL panicked the
//!   server, a VERSION shorter than its header overflowed a subtraction, and
//!   region accesses and VERSION allocated whatever size the client named
//!   (up to 4 GiB) before any check. Each connection still runs under
//!   `catch_unwind`, for what else the crate may panic on: a panic costs
//!   that connection, not the process. (Needs `panic = "unwind"`, the
//!   default.)
//! - Error replies carry errno 0 unless the crate itself chose EINVAL, so
//!   QEMU takes a failed request for a successful one. Region accesses
//!   therefore never fail here (unclaimed reads return all ones, unclaimed
//!   writes are dropped, both counted); a refused DMA map or SET_IRQS is
//!   logged and counted, and cannot be reported.
//! - An unknown command with a payload leaves the payload in the stream
//!   and desynchronises it; nothing outside the crate can fix that. QEMU
//!   sends only commands the crate knows unless migration is configured.
//! - The server advertises `max_msg_fds = 1`, so QEMU sends SET_IRQS one
//!   vector per message; handled like any other start/count.
//! - The sparse-mmap fd is sent only with the capability list, so a mapped
//!   BAR always describes its areas (even a wholly mapped one).
//! - `Server::new` refuses an existing path; [`Server::bind`] removes a
//!   stale socket first (never a live one or a non-socket) and binds it
//!   itself, which also lets [`Stopper`] wake the accept.

use std::fs;
use std::io;
use std::mem::size_of;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{
    vfio_region_info, vfio_region_sparse_mmap_area, VFIO_IRQ_INFO_EVENTFD,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion, SparseArea};

use crate::config::CONFIG_SIZE;
use crate::function::{Device, Function, Handle};

/// Why the server could not start or keep accepting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}: a live server is listening there")]
    InUse(PathBuf),
    #[error("{0}: exists and is not a socket")]
    NotASocket(PathBuf),
    #[error("{path}: cannot bind: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("accepting a connection failed: {0}")]
    Accept(#[source] io::Error),
}

/// A function listening on a UNIX socket for vfio-user clients (QEMU).
pub struct Server {
    inner: vfio_user::Server,
    function: Function,
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("path", &self.path)
            .field("function", &self.function)
            .finish_non_exhaustive()
    }
}

/// Stops a [`Server::serve`] loop from another thread.
#[derive(Debug, Clone)]
pub struct Stopper {
    stop: Arc<AtomicBool>,
    path: PathBuf,
}

impl Stopper {
    /// Makes `serve` return: at once if it waits for a client, else when
    /// the current client hangs up (the crate owns that connection and
    /// offers no way to cut it).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept; the loop sees the flag after this empty
        // connection ends.
        let _ = UnixStream::connect(&self.path);
    }
}

impl Server {
    /// Listens on `path`, first removing a stale socket left there by a
    /// server that died.
    pub fn bind(path: impl AsRef<Path>, function: Function) -> Result<Server, ServeError> {
        let path = path.as_ref().to_path_buf();
        remove_stale_socket(&path)?;
        let listener = UnixListener::bind(&path).map_err(|source| ServeError::Bind {
            path: path.clone(),
            source,
        })?;
        let inner = vfio_user::Server::from_owned_fd(
            OwnedFd::from(listener),
            true,
            irqs(&function),
            regions(&function),
        );
        Ok(Server {
            inner,
            function,
            path,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The embedder's handle to guest memory, BAR memory and MSI-X.
    pub fn handle(&self) -> Handle {
        self.function.handle()
    }

    /// A way to end [`Server::serve`] from another thread.
    pub fn stopper(&self) -> Stopper {
        Stopper {
            stop: Arc::clone(&self.stop),
            path: self.path.clone(),
        }
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves clients one after another until stopped. Blocks.
    pub fn serve(&mut self, device: &mut dyn Device) -> Result<(), ServeError> {
        while !self.stop.load(Ordering::Acquire) {
            self.serve_one(device)?;
        }
        Ok(())
    }

    /// Accepts one client, serves it until it hangs up, then drops its DMA
    /// maps and eventfds, resets the function and calls
    /// [`Device::disconnected`]. An error is returned only if accepting
    /// failed; a connection that breaks is an ordinary end.
    pub fn serve_one(&mut self, device: &mut dyn Device) -> Result<(), ServeError> {
        let inner = &self.inner;
        let mut backend = Backend {
            function: &mut self.function,
            device: &mut *device,
        };
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| inner.run(&mut backend)));
        match outcome {
            Ok(Ok(())) => log::info!("pci: client hung up"),
            Ok(Err(vfio_user::Error::SocketAccept(e))) => return Err(ServeError::Accept(e)),
            Ok(Err(e)) => log::warn!("pci: connection ended: {e}"),
            Err(_) => log::error!(
                "pci: the vfio-user crate panicked on a client message; connection dropped"
            ),
        }
        self.function.disconnect();
        device.disconnected();
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Removes `path` if it is a socket nobody listens on.
fn remove_stale_socket(path: &Path) -> Result<(), ServeError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ServeError::Bind {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    if !meta.file_type().is_socket() {
        return Err(ServeError::NotASocket(path.to_path_buf()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ServeError::InUse(path.to_path_buf()));
    }
    log::info!("pci: removing stale socket {}", path.display());
    fs::remove_file(path).map_err(|source| ServeError::Bind {
        path: path.to_path_buf(),
        source,
    })
}

/// The 9 regions QEMU asks for: BARs 0-5, ROM (none), config space, VGA
/// (none). A BAR with mapped areas carries its memfd and sparse areas.
fn regions(function: &Function) -> Vec<ServerRegion> {
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| {
            let mut info = vfio_region_info {
                argsz: size_of::<vfio_region_info>() as u32,
                index,
                ..Default::default()
            };
            let mut sparse_areas = Vec::new();
            let mut mmap_fd = None;
            if index == VFIO_PCI_CONFIG_REGION_INDEX {
                info.size = CONFIG_SIZE as u64;
                info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            } else if let Some(bar) = function.bars.get(index as usize).and_then(Option::as_ref) {
                info.size = bar.spec.size;
                info.flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
                if let Some(memory) = &bar.memory {
                    // The memfd holds the BAR from its offset 0.
                    info.flags |= VFIO_REGION_INFO_FLAG_MMAP;
                    info.offset = 0;
                    mmap_fd = memory.raw_fd();
                    sparse_areas = bar
                        .spec
                        .mmap
                        .iter()
                        .map(|r| SparseArea {
                            area: vfio_region_sparse_mmap_area {
                                offset: r.start,
                                size: r.end - r.start,
                            },
                        })
                        .collect();
                }
            }
            ServerRegion {
                region_info: info,
                sparse_areas,
                mmap_fd,
            }
        })
        .collect()
}

/// The 5 interrupt indices: INTx, MSI, MSI-X, error, request. MSI-X has
/// the vectors; the error interrupt has one (see `Function::set_irqs`).
fn irqs(function: &Function) -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| IrqInfo {
            index,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: match index {
                VFIO_PCI_MSIX_IRQ_INDEX => function.msix_vectors().into(),
                VFIO_PCI_ERR_IRQ_INDEX => 1,
                _ => 0,
            },
        })
        .collect()
}

/// The crate's callbacks, for the duration of one connection.
struct Backend<'a> {
    function: &'a mut Function,
    device: &'a mut dyn Device,
}

/// Test-only (issue 13, ARCHITECTURE.md §9): with `VHCA_TEST_PANIC=vfio:NAME`
/// in the environment, the first message of kind NAME (`region_read`,
/// `region_write`, `dma_map`, `dma_unmap`, `reset`, `set_irqs`) panics in its
/// handler, once, so that tests can show what such a panic costs (the
/// connection, not the process). Unset, it costs a load and a compare.
fn test_panic(message: &str) {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<String>> = OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);
    let armed = ARMED.get_or_init(|| {
        std::env::var("VHCA_TEST_PANIC")
            .ok()
            .and_then(|v| v.strip_prefix("vfio:").map(str::to_string))
    });
    if armed.as_deref() == Some(message) && !FIRED.swap(true, Ordering::AcqRel) {
        panic!("VHCA_TEST_PANIC: a test panic in the {message} handler");
    }
}

impl ServerBackend for Backend<'_> {
    fn connected(&mut self, stream: &UnixStream) {
        use std::os::fd::AsFd;
        let pid = crate::peer::peer_pid(stream.as_fd());
        log::debug!("pci: client connected (pid {pid:?})");
        self.function.connected(pid);
    }

    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        test_panic("region_read");
        log::trace!("pci: region {region} read 0x{offset:x} +{}", data.len());
        self.function.region_read(region, offset, data, self.device);
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        test_panic("region_write");
        log::trace!("pci: region {region} write 0x{offset:x} {data:02x?}");
        self.function
            .region_write(region, offset, data, self.device);
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<fs::File>,
    ) -> io::Result<()> {
        test_panic("dma_map");
        log::debug!("pci: DMA map 0x{address:x} +0x{size:x} at fd offset 0x{offset:x} {flags:?}");
        let writable = flags.contains(DmaMapFlags::WRITE);
        self.function
            .dma_map(address, size, fd, offset, writable)
            .map_err(|e| {
                log::warn!("pci: {e}");
                // An errno for the reply (QEMU prints it: "error Success"
                // without one); the reason is in our log.
                io::Error::from_raw_os_error(libc::EINVAL)
            })
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        test_panic("dma_unmap");
        log::debug!("pci: DMA unmap 0x{address:x} +0x{size:x} {flags:?}");
        let all = flags.contains(DmaUnmapFlags::UNMAP_ALL);
        self.function.dma_unmap(address, size, all).map_err(|e| {
            log::warn!("pci: {e}");
            io::Error::other(e)
        })
    }

    fn reset(&mut self) -> io::Result<()> {
        test_panic("reset");
        log::info!("pci: device reset");
        self.function.reset();
        self.device.reset();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<fs::File>,
    ) -> io::Result<()> {
        test_panic("set_irqs");
        log::debug!(
            "pci: SET_IRQS index {index} flags 0x{flags:x} start {start} count {count} fds {}",
            fds.len()
        );
        self.function
            .set_irqs(index, flags, start, count, fds)
            .map_err(|e| {
                log::warn!("pci: SET_IRQS index {index} start {start} count {count} flags 0x{flags:x}: {e}");
                io::Error::new(io::ErrorKind::InvalidInput, e)
            })
    }
}
