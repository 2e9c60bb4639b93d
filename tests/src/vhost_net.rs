//! A vhost-user-net client for the RoCE port's backend (`vhca --vhost-user-net`),
//! playing QEMU's `-netdev vhost-user` with the `vhost` crate's frontend: it
//! declares a guest memory table of memfd regions and sets up the TX queue of a
//! split ring (virtio 1.2 §2.7) in that memory, so that tests can send a frame
//! and see the backend read it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use vhost::vhost_user::Frontend;
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

use crate::sys::SharedMap;

/// The TX queue (virtio 1.2 §5.1.2: transmitq1).
pub const TX_QUEUE: usize = 1;
/// Entries of the test's TX ring.
pub const QUEUE_SIZE: u16 = 16;
/// VIRTIO_F_VERSION_1.
const VERSION_1: u64 = 1 << 32;
/// `virtio_net_hdr_v1`.
const VNET_HDR_LEN: usize = 12;

/// A connected vhost-user-net frontend.
pub struct NetClient {
    pub frontend: Frontend,
    kick: EventFd,
    call: EventFd,
}

impl NetClient {
    /// Connects to `socket` (retrying while the backend is between two
    /// clients, at most `within`) and negotiates virtio 1.
    pub fn connect(socket: &Path, within: Duration) -> io::Result<NetClient> {
        let deadline = Instant::now() + within;
        let frontend = loop {
            match Frontend::connect(socket, 2) {
                Ok(f) => break f,
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!("{}: {e}", socket.display())))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        frontend.set_owner().map_err(io::Error::other)?;
        let offered = frontend.get_features().map_err(io::Error::other)?;
        assert!(offered & VERSION_1 != 0, "{offered:#x}");
        frontend.set_features(VERSION_1).map_err(io::Error::other)?;
        Ok(NetClient {
            frontend,
            kick: EventFd::new(libc::EFD_NONBLOCK).map_err(io::Error::other)?,
            call: EventFd::new(libc::EFD_NONBLOCK).map_err(io::Error::other)?,
        })
    }

    /// Declares one region of guest memory at guest address 0: `size` bytes
    /// of `file` (which may be shorter: that is for the backend to refuse).
    /// The frontend's "user address" is the guest address (only the backend's
    /// translation of ring addresses uses it).
    pub fn set_memory(&mut self, file: &File, size: u64) -> io::Result<()> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: size,
            userspace_addr: 0,
            mmap_offset: 0,
            mmap_handle: file.as_raw_fd(),
        };
        self.frontend
            .set_mem_table(&[region])
            .map(|_| ())
            .map_err(io::Error::other)
    }

    /// A request with a reply: fails once the backend has dropped the
    /// connection.
    pub fn ping(&mut self) -> io::Result<u64> {
        self.frontend.get_features().map_err(io::Error::other)
    }

    /// Sets up the TX ring at guest address `ring` (descriptors, then the
    /// available and used rings) and starts the queue.
    pub fn start_tx(&mut self, ring: u64) -> io::Result<()> {
        let (desc, avail, used) = tx_layout(ring);
        let f = &mut self.frontend;
        f.set_vring_num(TX_QUEUE, QUEUE_SIZE)
            .map_err(io::Error::other)?;
        f.set_vring_addr(
            TX_QUEUE,
            &VringConfigData {
                queue_max_size: QUEUE_SIZE,
                queue_size: QUEUE_SIZE,
                flags: 0,
                desc_table_addr: desc,
                used_ring_addr: used,
                avail_ring_addr: avail,
                log_addr: None,
            },
        )
        .map_err(io::Error::other)?;
        f.set_vring_base(TX_QUEUE, 0).map_err(io::Error::other)?;
        f.set_vring_call(TX_QUEUE, &self.call)
            .map_err(io::Error::other)?;
        f.set_vring_kick(TX_QUEUE, &self.kick)
            .map_err(io::Error::other)
    }

    /// Rings the TX queue's kick.
    pub fn kick_tx(&self) -> io::Result<()> {
        self.kick.write(1)
    }
}

/// Guest addresses of the TX ring's parts from `ring`: descriptors (16 bytes
/// each), available ring, used ring (4-byte aligned).
fn tx_layout(ring: u64) -> (u64, u64, u64) {
    let n = u64::from(QUEUE_SIZE);
    let desc = ring;
    let avail = desc + 16 * n;
    let used = (avail + 6 + 2 * n + 3) & !3;
    (desc, avail, used)
}

/// Writes into `mem` (mapping guest address 0 on) one TX chain at `ring`
/// holding a 60-byte broadcast frame (behind a zero vnet header) at guest
/// address `frame`, and makes it available.
pub fn post_tx_frame(mem: &SharedMap, ring: u64, frame: u64) {
    let (desc, avail, _) = tx_layout(ring);
    let mut data = vec![0u8; VNET_HDR_LEN];
    data.extend_from_slice(&[0xff; 6]);
    data.extend_from_slice(&[0x52, 0x54, 0x00, 0x00, 0x00, 0x02]);
    data.extend_from_slice(&0x88b5u16.to_be_bytes());
    data.resize(VNET_HDR_LEN + 60, 0xa5);
    mem.write(frame as usize, &data);
    let mut d = Vec::with_capacity(16);
    d.extend_from_slice(&frame.to_le_bytes());
    d.extend_from_slice(&(data.len() as u32).to_le_bytes());
    d.extend_from_slice(&0u16.to_le_bytes());
    d.extend_from_slice(&0u16.to_le_bytes());
    mem.write(desc as usize, &d);
    // avail: flags 0, ring[0] = 0, then idx 1.
    mem.write(avail as usize, &0u16.to_le_bytes());
    mem.write(avail as usize + 4, &0u16.to_le_bytes());
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    mem.write(avail as usize + 2, &1u16.to_le_bytes());
}
