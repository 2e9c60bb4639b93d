//! The RoCE port's vhost-user-net backend (device/src/net/backend.rs; ARCHITECTURE.md
//! §6, §9; issue 25 item 7): its event loop, `NetBackend::handle_event` for a
//! kick on RX, a kick on TX and the to-guest eventfd, driven on this thread
//! (no daemon, no worker) over vrings set up as the `vhost-user-backend` crate
//! sets them up from the protocol (size, addresses, EVENT_IDX, ready, enabled),
//! on guest memory mapped from a memfd exactly as its SET_MEM_TABLE handler maps
//! it (`MmapRegion::from_file` at the region's file offset, the backend told
//! through `update_memory`). The memfd is whole, short (the region runs past
//! its end), mapped at an offset past its end, or cut short after the mapping
//! (a frontend that truncates its memory file): the vhost-user frontend is the
//! VMM, which is trusted no more than the guest. The TAP is a SEQPACKET pair
//! playing the kernel; frames for the guest come through the data path's
//! `TapLink` into the `ToGuest` queue. The fuzzer writes the rings and buffers
//! (only where the file has bytes: the harness itself must not fault), kicks,
//! sends frames, stops and restarts the rings, and maps memory again. Nothing
//! may panic or fault.
//!
//! What is not here: the vhost-user message parsing itself (the `vhost` crate's
//! `BackendReqHandler`), which runs only behind `VhostUserDaemon`'s threads.
#![no_main]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use arbitrary::Arbitrary;
use device::fabric::{Link, Tap, TapLink};
use device::net::backend::{RX_QUEUE, TO_GUEST_EVENT, TX_QUEUE};
use device::net::{NetBackend, NetCounters, FEATURES};
use libfuzzer_sys::fuzz_target;
use socket2::{Domain, Socket, Type};
use vhost_user_backend::{VhostUserBackend, VringRwLock, VringT};
use vm_memory::mmap::MmapRegion;
use vm_memory::{FileOffset, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap, GuestRegionMmap};
use vmm_sys_util::epoll::EventSet;

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
const PAGE: u64 = 4096;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum FileMode {
    Whole,
    /// The file `k` pages shorter than the region.
    Short(u8),
    /// The region mapped `k` pages into a file only as long as the region.
    PastEnd(u8),
    /// Whole when mapped, then cut to `k` pages.
    CutAfter(u8),
}

#[derive(Arbitrary, Debug)]
struct RingSetup {
    log2_size: u8,
    desc: u16,
    avail: u16,
    used: u16,
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// Guest memory write at `addr` (clipped to the file's bytes).
    Poke { addr: u16, bytes: Vec<u8> },
    /// A kick on RX (`rx`) or TX.
    Kick { rx: bool },
    /// A frame from the network (vnet header first) into the TAP, read by the
    /// data path, then the to-guest event.
    FromTap(Vec<u8>),
    /// GET_VRING_BASE of RX: the driver stopped (`stop_vring`, detach).
    Stop,
    /// The ring enabled or disabled (SET_VRING_ENABLE).
    Enable { rx: bool, on: bool },
    /// SET_MEM_TABLE again: the same file mapped anew.
    Remap,
}

#[derive(Arbitrary, Debug)]
struct Input {
    pages: u8,
    file: FileMode,
    features: u64,
    event_idx: bool,
    rings: [RingSetup; 2],
    ops: Vec<Op>,
}

fn memfd(len: u64) -> File {
    // Sealable, as QEMU's memory-backend-memfd: `update_memory` seals it
    // against shrinking (issue 25 item 2) and refuses a file it cannot seal,
    // so an unsealable one would never reach the rings.
    // SAFETY: memfd_create with a NUL-terminated name and no flags we rely on;
    // the returned descriptor is new and owned by the File alone.
    let fd = unsafe {
        libc::memfd_create(
            c"vhca-fuzz-guest".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(len).unwrap();
    f
}

/// The mapping `set_mem_table` makes of one region of `size` bytes at file
/// offset `offset` (vhost's `VhostUserMemoryRegion::mmap_region`).
fn map(file: &File, offset: u64, size: u64) -> Option<GuestMemoryMmap> {
    let f = file.try_clone().ok()?;
    let r = MmapRegion::from_file(FileOffset::new(f, offset), size as usize).ok()?;
    let g = GuestRegionMmap::new(r, GuestAddress(0))?;
    GuestMemoryMmap::from_regions(vec![g]).ok()
}

fuzz_target!(|input: Input| {
    let pages = u64::from(input.pages % 16) + 1;
    let size = pages * PAGE;
    let (file_len, offset) = match input.file {
        FileMode::Whole | FileMode::CutAfter(_) => (size, 0),
        FileMode::Short(k) => (size.saturating_sub((u64::from(k) % pages + 1) * PAGE), 0),
        FileMode::PastEnd(k) => (size, (u64::from(k) % pages + 1) * PAGE),
    };
    let file = memfd(file_len);
    // Bytes of the region the file has (the harness writes only there).
    let mut backed = file_len.saturating_sub(offset).min(size);

    let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    let _ = b.set_nonblocking(true);
    let tap = Arc::new(Tap::from_fd(OwnedFd::from(a), "fuzz0", MAC, 1500).unwrap());
    let mut link = TapLink::new(Arc::clone(&tap));
    let backend = NetBackend::new(Arc::clone(&tap), Arc::new(NetCounters::default()));
    backend.acked_features(input.features & FEATURES);
    backend.set_event_idx(input.event_idx);

    let Some(mem) = map(&file, offset, size) else {
        return;
    };
    let atomic = GuestMemoryAtomic::new(mem);
    let mut mapped = backend.update_memory(atomic.clone()).is_ok();
    if let FileMode::CutAfter(k) = input.file {
        // A sealed file (F_SEAL_SHRINK) refuses; then nothing changed.
        let keep = (u64::from(k) % pages) * PAGE;
        if file.set_len(keep).is_ok() {
            backed = keep;
        }
    }
    let vrings: Vec<VringRwLock<GuestMemoryAtomic<GuestMemoryMmap>>> = input
        .rings
        .iter()
        .map(|r| {
            let v = VringRwLock::new(atomic.clone(), 1024).unwrap();
            v.set_queue_size(1 << (r.log2_size % 11));
            let _ = v.set_queue_info(u64::from(r.desc), u64::from(r.avail), u64::from(r.used));
            v.set_queue_event_idx(input.event_idx);
            v.set_queue_ready(true);
            v.set_enabled(true);
            v
        })
        .collect();
    let now = Duration::from_secs(1);
    let mut buf = vec![0u8; 65536];
    for op in input.ops.iter().take(64) {
        match op {
            Op::Poke { addr, bytes } => {
                let at = u64::from(*addr);
                let n = (bytes.len() as u64).min(backed.saturating_sub(at));
                if n > 0 {
                    let _ = file.write_at(&bytes[..n as usize], offset + at);
                }
            }
            Op::Kick { rx } => {
                let ev = if *rx { RX_QUEUE } else { TX_QUEUE };
                let _ = backend.handle_event(ev, EventSet::IN, &vrings, 0);
            }
            Op::FromTap(frame) => {
                let _ = (&b).write(frame);
                let _ = link.recv_batch(now, 16, &mut |_| {});
                let _ = backend.handle_event(TO_GUEST_EVENT, EventSet::IN, &vrings, 0);
            }
            Op::Stop => {
                let _ = backend.stop_vring(u32::from(RX_QUEUE));
            }
            Op::Enable { rx, on } => vrings[usize::from(!*rx)].set_enabled(*on),
            Op::Remap => {
                if let Some(m) = map(&file, offset, size) {
                    atomic.lock().unwrap().replace(m);
                    mapped = backend.update_memory(atomic.clone()).is_ok();
                }
            }
        }
        // What the guest sent leaves through the TAP: drain it.
        while (&b).read(&mut buf).is_ok_and(|n| n > 0) {}
    }
    let _ = mapped;
    backend.detach();
});
