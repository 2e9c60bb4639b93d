//! The RoCE port's NIC (ARCHITECTURE.md §6, WF-10): a vhost-user-net backend for the
//! VM's stock `virtio-net-pci`, on the same TAP as the HCA's RoCEv2 frames, as one
//! port of a real RoCE adapter carries both.
//!
//! - [`frames`]: the virtio-net frame paths over a split ring (guest TX to the
//!   TAP, frames from the TAP into the guest's RX buffers), with every guest
//!   descriptor checked;
//! - [`backend`]: the `VhostUserBackend` (features, config, events);
//! - [`spawn`]: the thread that serves the socket, again after each disconnect
//!   (a guest reboot or a QEMU restart).
//!
//! Guest TX goes straight to the TAP from the backend's thread (one write is one
//! frame). Frames for the guest are read by the data path's
//! [`TapLink`](crate::fabric::TapLink) and handed over through the bounded
//! [`ToGuest`](crate::fabric::ToGuest) queue and its eventfd.

pub mod backend;
pub mod frames;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use vhost::vhost_user::{Error as VhostUserError, Listener};
use vhost_user_backend::VhostUserDaemon;
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

pub use backend::{config_space, tap_offload, NetBackend, FEATURES};
pub use frames::NetCounters;

use crate::fabric::{format_mac, Tap};

/// Pause after a failed serve (socket folder gone, listener error) before the next
/// attempt, so that a persistent failure costs no CPU.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Starts serving vhost-user-net on `path` for the NIC side of `tap`; returns the
/// counters. The socket file is replaced if it exists (a stale one from an earlier
/// run), like the vfio-user socket.
pub fn spawn(tap: Arc<Tap>, path: &Path) -> std::io::Result<Arc<NetCounters>> {
    let counters = Arc::new(NetCounters::default());
    let c = Arc::clone(&counters);
    let path = path.to_path_buf();
    log::info!(
        "net: vhost-user-net on {} (give QEMU's virtio-net-pci mac={})",
        path.display(),
        format_mac(&tap.mac())
    );
    std::thread::Builder::new()
        .name("vhca-net".into())
        .spawn(move || loop {
            match serve_one(&tap, &c, &path) {
                Ok(Ok(())) => log::info!("net: vhost-user-net client gone; serving again"),
                // A client's fault (a refused memory table, a bad message) or
                // a contained panic: logged, and the next client is served at
                // once.
                Ok(Err(e)) => log::warn!("net: vhost-user-net client dropped: {e}; serving again"),
                Err(e) => {
                    log::warn!("net: vhost-user-net on {}: {e}", path.display());
                    std::thread::sleep(RETRY_PAUSE);
                }
            }
        })?;
    Ok(counters)
}

/// Serves one QEMU connection, from accept to disconnect: `Err` if no client
/// could be accepted (the caller pauses), `Ok(Err)` if the connection ended
/// in an error.
fn serve_one(
    tap: &Arc<Tap>,
    counters: &Arc<NetCounters>,
    path: &PathBuf,
) -> Result<Result<(), String>, String> {
    let backend = Arc::new(NetBackend::new(Arc::clone(tap), Arc::clone(counters)));
    let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
    let mut daemon = VhostUserDaemon::new("vhca-net-vu".into(), Arc::clone(&backend), mem)
        .map_err(|e| e.to_string())?;
    for h in daemon.get_epoll_handlers() {
        h.register_listener(
            tap.to_guest().event().as_raw_fd(),
            EventSet::IN,
            u64::from(backend::TO_GUEST_EVENT),
        )
        .map_err(|e| format!("epoll: {e}"))?;
    }
    // `VhostUserDaemon::serve`, in its steps, so that the backend holds the
    // connection's shutdown handle (a panic in the worker ends it).
    let mut listener = Listener::new(path, true).map_err(|e| e.to_string())?;
    daemon.start(&mut listener).map_err(|e| e.to_string())?;
    backend.set_shutdown(daemon.shutdown_handle());
    let r = daemon.wait();
    backend.set_shutdown(None);
    backend.detach();
    backend.stop_worker();
    Ok(match r {
        _ if backend.failed() => Err("a panic in its worker".into()),
        Ok(())
        | Err(vhost_user_backend::Error::HandleRequest(
            VhostUserError::Disconnected | VhostUserError::PartialMessage,
        )) => Ok(()),
        Err(e) => Err(e.to_string()),
    })
}
