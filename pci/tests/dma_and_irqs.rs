//! Guest memory from DMA_MAP and MSI-X vectors from SET_IRQS, as the
//! embedder's data path uses them.

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use common::*;
use pci::vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
    VFIO_PCI_MSIX_IRQ_INDEX,
};
use pci::{DmaError, Trigger};

const RAM: u64 = 0x1_0000_0000;
const RAM_SIZE: u64 = 2 << 20;
const MSIX: u32 = VFIO_PCI_MSIX_IRQ_INDEX;
const WIRE: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;

#[test]
fn dma_map_gives_the_embedder_checked_guest_memory() {
    let h = start(hca_like());
    let mut c = h.connect();
    let ram = memfd(RAM_SIZE);
    c.dma_map(0, RAM, RAM_SIZE, ram.as_raw_fd()).unwrap();
    let mem = h.handle.memory();
    assert_eq!(mem.ranges(), vec![(RAM, RAM_SIZE)]);

    // The guest's stores are visible to the device and the other way round.
    ram.write_all_at(b"wqe!", 0x1000).unwrap();
    let mut buf = [0u8; 4];
    mem.read(RAM + 0x1000, &mut buf).unwrap();
    assert_eq!(&buf, b"wqe!");
    mem.write(RAM + 0x2000, b"cqe").unwrap();
    let mut on_ram = [0u8; 3];
    ram.read_exact_at(&mut on_ram, 0x2000).unwrap();
    assert_eq!(&on_ram, b"cqe");

    // 64-bit atomics, in guest byte order (little-endian).
    ram.write_all_at(&5u64.to_le_bytes(), 0x3000).unwrap();
    assert_eq!(
        mem.compare_swap(RAM + 0x3000, 4, 9),
        Ok(5),
        "no swap on mismatch"
    );
    assert_eq!(mem.compare_swap(RAM + 0x3000, 5, 9), Ok(5));
    assert_eq!(mem.fetch_add(RAM + 0x3000, 3), Ok(9));
    let mut word = [0u8; 8];
    ram.read_exact_at(&mut word, 0x3000).unwrap();
    assert_eq!(u64::from_le_bytes(word), 12);

    // Outside the map, across its end, misaligned: errors, not faults.
    let end = RAM + RAM_SIZE;
    assert_eq!(
        mem.read(end - 4, &mut [0; 8]),
        Err(DmaError::Unmapped {
            addr: end - 4,
            len: 8
        })
    );
    assert!(mem.write(end - 4, &[1; 8]).is_err());
    let mut tail = [0u8; 4];
    ram.read_exact_at(&mut tail, RAM_SIZE - 4).unwrap();
    assert_eq!(tail, [0; 4], "a refused write changes nothing");
    assert!(mem.read(0, &mut buf).is_err());
    assert_eq!(
        mem.fetch_add(end, 1),
        Err(DmaError::Unmapped { addr: end, len: 8 })
    );
    assert_eq!(
        mem.compare_swap(RAM + 4, 0, 1),
        Err(DmaError::Misaligned { addr: RAM + 4 })
    );
}

#[test]
fn dma_map_honours_the_file_offset() {
    let h = start(hca_like());
    let mut c = h.connect();
    let ram = memfd(0x4000);
    ram.write_all_at(b"page2", 0x2000).unwrap();
    c.dma_map(0x2000, 0x8000_0000, 0x2000, ram.as_raw_fd())
        .unwrap();
    let mut buf = [0u8; 5];
    h.handle.memory().read(0x8000_0000, &mut buf).unwrap();
    assert_eq!(&buf, b"page2");

    // A map reaching past the end of its fd would fault on access: refused.
    c.dma_map(0x2000, 0x9000_0000, 0x4000, ram.as_raw_fd())
        .unwrap();
    assert!(!h.handle.memory().is_mapped(0x9000_0000, 1));
    assert_eq!(h.handle.counters().map_errors, 1);
}

#[test]
fn dma_unmap_revokes_access_and_unknown_ranges_are_accepted() {
    let h = start(hca_like());
    let mut c = h.connect();
    let ram = memfd(RAM_SIZE);
    c.dma_map(0, RAM, RAM_SIZE, ram.as_raw_fd()).unwrap();
    assert!(h.handle.memory().is_mapped(RAM, 8));

    c.dma_unmap(RAM, RAM_SIZE).unwrap();
    assert!(h.handle.memory().read(RAM, &mut [0; 8]).is_err());
    assert!(h.handle.memory().ranges().is_empty());

    c.dma_unmap(0x5000_0000, 0x1000).unwrap();
    assert_eq!(cfg_u16(&mut c, 0), 0x1234, "the server still answers");
}

#[test]
fn guest_ram_the_client_maps_private_is_refused_and_shared_ram_is_served() {
    // QEMU without share=on maps its memfd private: the guest's stores stay
    // in copy-on-write pages the device would never see (issue 17).
    let h = start(hca_like());
    let mut c = h.connect();
    let private = memfd(RAM_SIZE);
    let _p = ClientMap::new(&private, RAM_SIZE as usize, false);
    // (The crate's client does not report the error reply; the counters do.)
    let _ = c.dma_map(0, RAM, RAM_SIZE, private.as_raw_fd());
    assert!(!h.handle.memory().is_mapped(RAM, 1));
    let n = h.handle.counters();
    assert_eq!((n.maps_not_shared, n.map_errors), (1, 1));
    assert!(pci::NOT_SHARED_HINT.contains("share=on"));

    let shared = memfd(RAM_SIZE);
    let _s = ClientMap::new(&shared, RAM_SIZE as usize, true);
    c.dma_map(0, RAM, RAM_SIZE, shared.as_raw_fd()).unwrap();
    assert!(h.handle.memory().is_mapped(RAM, RAM_SIZE as usize));
    assert_eq!(h.handle.counters().maps_not_shared, 1);
}

#[test]
fn dma_map_without_fd_is_accepted_and_ignored() {
    let h = start(hca_like());
    let mut raw = RawClient::connect(&h.path);
    raw.version(r#"{"capabilities":{"max_msg_fds":8}}"#, true);
    let (flags, _, _) = raw.recv();
    assert_eq!(flags & ERROR, 0);

    raw.dma_map_without_fd(0xc0000, 0x20000);
    let (flags, error, _) = raw.recv();
    assert_eq!(flags & (REPLY | ERROR), REPLY, "success, error {error}");
    assert_eq!(h.handle.counters().maps_without_fd, 1);
    assert!(h.handle.memory().ranges().is_empty());
}

#[test]
fn msix_vectors_fire_their_eventfds_and_can_be_unwired_and_rewired() {
    let h = start(hca_like());
    let mut c = h.connect();
    assert_eq!(h.handle.msix_vectors(), VECTORS);
    assert_eq!(h.handle.trigger(3), Trigger::Disabled);
    msix_control(&mut c, 0x8000);
    assert_eq!(h.handle.trigger(3), Trigger::Unwired);
    assert_eq!(h.handle.trigger(VECTORS), Trigger::NoSuchVector);

    let first = eventfd();
    c.set_irqs(MSIX, WIRE, 3, 1, &[first.as_raw_fd()]).unwrap();
    assert_eq!(h.handle.trigger(3), Trigger::Fired);
    assert_eq!(h.handle.trigger(3), Trigger::Fired);
    assert_eq!(take(&first), 2);

    // QEMU unwires a vector with a count and no fd (its fd -1).
    c.set_irqs(MSIX, WIRE, 3, 1, &[]).unwrap();
    assert_eq!(h.handle.trigger(3), Trigger::Unwired);
    assert_eq!(take(&first), 0);

    // ...and rewires it, to its own eventfd when the guest masks it.
    let second = eventfd();
    c.set_irqs(MSIX, WIRE, 3, 1, &[second.as_raw_fd()]).unwrap();
    assert_eq!(h.handle.trigger(3), Trigger::Fired);
    assert_eq!((take(&first), take(&second)), (0, 1));

    // All vectors in one message.
    let all: Vec<_> = (0..VECTORS).map(|_| eventfd()).collect();
    let fds: Vec<_> = all.iter().map(|f| f.as_raw_fd()).collect();
    c.set_irqs(MSIX, WIRE, 0, VECTORS.into(), &fds).unwrap();
    for v in 0..VECTORS {
        assert_eq!(h.handle.trigger(v), Trigger::Fired);
    }
    assert!(all.iter().all(|f| take(f) == 1));

    // SET_IRQS with DATA_NONE fires from the device side (a loopback test).
    let none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    c.set_irqs(MSIX, none, 5, 1, &[]).unwrap();
    assert_eq!(take(&all[5]), 1);

    // ...and with count 0 unwires every vector (MSI-X disable).
    c.set_irqs(MSIX, none, 0, 0, &[]).unwrap();
    assert_eq!(h.handle.trigger(0), Trigger::Unwired);

    let counters = h.handle.msix_counters();
    assert_eq!(counters.fired, 12);
    assert_eq!(counters.unwired, 3);
    assert_eq!(counters.disabled, 1);
}

#[test]
fn function_mask_holds_a_vector_pending_until_cleared() {
    let h = start(hca_like());
    let mut c = h.connect();
    let fd = eventfd();
    c.set_irqs(MSIX, WIRE, 5, 1, &[fd.as_raw_fd()]).unwrap();
    msix_control(&mut c, 0xc000);

    assert_eq!(h.handle.trigger(5), Trigger::Pending);
    assert_eq!(take(&fd), 0);
    let mut pba = [0u8; 8];
    c.region_read(0, MSIX_PBA, &mut pba).unwrap();
    assert_eq!(pba[0], 1 << 5);

    msix_control(&mut c, 0x8000);
    assert_eq!(take(&fd), 1, "sent on unmask");
    c.region_read(0, MSIX_PBA, &mut pba).unwrap();
    assert_eq!(pba[0], 0);
}

#[test]
fn data_path_runs_while_the_server_handles_messages() {
    let h = start(hca_like());
    let mut c = h.connect();
    let ram = memfd(RAM_SIZE);
    c.dma_map(0, RAM, RAM_SIZE, ram.as_raw_fd()).unwrap();
    let fd = eventfd();
    c.set_irqs(MSIX, WIRE, 0, 1, &[fd.as_raw_fd()]).unwrap();
    msix_control(&mut c, 0x8000);

    const N: u64 = 20_000;
    let handle = h.handle.clone();
    let data_path = std::thread::spawn(move || {
        let doorbells = handle.bar_memory(2).unwrap();
        for i in 0..N {
            handle.memory().fetch_add(RAM + 0x100, 1).unwrap();
            doorbells.store_u32(0x1000, i as u32).unwrap();
            if i % 1000 == 0 {
                assert_eq!(handle.trigger(0), Trigger::Fired);
            }
        }
    });
    // Meanwhile the vfio-user thread keeps answering, and remaps other memory.
    let other = memfd(0x10000);
    for i in 0..200u64 {
        assert_eq!(cfg_u16(&mut c, 0), 0x1234);
        c.dma_map(0, 0x4000_0000 + i * 0x10000, 0x10000, other.as_raw_fd())
            .unwrap();
        c.dma_unmap(0x4000_0000 + i * 0x10000, 0x10000).unwrap();
    }
    data_path.join().unwrap();

    let mut word = [0u8; 8];
    ram.read_exact_at(&mut word, 0x100).unwrap();
    assert_eq!(u64::from_le_bytes(word), N);
    assert_eq!(take(&fd), N / 1000);
}
