//! The vhost-user-net backend's event loop (`NetBackend::handle_event`, device::net)
//! against a hostile guest ring, on this thread without the daemon: the vrings
//! set up as `vhost-user-backend` sets them from the protocol, the TAP a
//! SEQPACKET pair. Found by the `net_backend` fuzz target (issue 25 item 7).

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use device::fabric::Tap;
use device::net::backend::TX_QUEUE;
use device::net::{NetBackend, NetCounters};
use socket2::{Domain, Socket, Type};
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use vm_memory::mmap::MmapRegion;
use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap, GuestRegionMmap,
};
use vmm_sys_util::epoll::EventSet;

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;

/// Guest memory as QEMU's memory-backend-memfd gives it: one region backed by a
/// sealable memfd (the backend refuses memory it cannot seal against
/// shrinking, issue 25 item 2).
fn guest_memory(len: u64) -> GuestMemoryMmap {
    // SAFETY: memfd_create with a NUL-terminated name; the descriptor it
    // returns is new and owned by the File alone.
    let fd = unsafe {
        libc::memfd_create(
            c"vhca-test-guest".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len).unwrap();
    let region = MmapRegion::from_file(FileOffset::new(file, 0), len as usize).unwrap();
    let region = GuestRegionMmap::new(region, GuestAddress(0)).unwrap();
    GuestMemoryMmap::from_regions(vec![region]).unwrap()
}

/// A guest whose TX avail index claims more buffers than the ring holds
/// (virtio 1.2 §2.7.6: idx - last_avail never exceeds the queue size): no
/// chain can be popped, yet with EVENT_IDX the re-enabled notification keeps
/// saying "more" (avail idx != next avail). The TX kick must return (the
/// worker thread serves RX and the to-guest queue too); it used to spin
/// forever, re-enabling notifications.
#[test]
fn a_tx_kick_on_a_ring_whose_avail_index_is_past_its_size_returns() {
    let (a, _b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    let tap = Arc::new(Tap::from_fd(OwnedFd::from(a), "test0", MAC, 1500).unwrap());
    let backend = NetBackend::new(tap, Arc::new(NetCounters::default()));
    let mem = guest_memory(0x1_0000);
    // avail.flags 0, avail.idx 0x1000 on a ring of 256.
    mem.write_obj(0x1000u16, GuestAddress(AVAIL + 2)).unwrap();
    let atomic = GuestMemoryAtomic::new(mem);
    backend.set_event_idx(true);
    backend.update_memory(atomic.clone()).unwrap();
    let vrings: Vec<_> = (0..2)
        .map(|_| {
            let v = VringRwLock::new(atomic.clone(), 1024).unwrap();
            v.set_queue_size(256);
            v.set_queue_info(DESC, AVAIL, USED).unwrap();
            v.set_queue_event_idx(true);
            v.set_queue_ready(true);
            v.set_enabled(true);
            v
        })
        .collect();
    let (done, wait) = mpsc::channel();
    std::thread::spawn(move || {
        let r = backend.handle_event(TX_QUEUE, EventSet::IN, &vrings, 0);
        let _ = done.send(r.is_ok());
    });
    assert_eq!(
        wait.recv_timeout(Duration::from_secs(10)),
        Ok(true),
        "the TX kick did not return (spinning on the broken ring)"
    );
}
