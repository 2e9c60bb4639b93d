//! Connections coming and going, device reset, the socket file, and the
//! vfio-user crate defects the server guards against.

mod common;

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;

use common::*;
use pci::vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSIX_IRQ_INDEX,
};
use pci::{ServeError, Server, Trigger};

const WIRE: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;

/// A client that maps memory, wires vector 0, enables MSI-X and bus
/// mastering, and leaves marks in config space and BAR2.
fn busy_client(h: &Harness) -> (pci::vfio_user::Client, std::fs::File, std::fs::File) {
    let mut c = h.connect();
    let ram = memfd(0x10000);
    c.dma_map(0, 0x10_0000, 0x10000, ram.as_raw_fd()).unwrap();
    let fd = eventfd();
    c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, WIRE, 0, 1, &[fd.as_raw_fd()])
        .unwrap();
    msix_control(&mut c, 0x8000);
    cfg_write(&mut c, 0x04, &0x0006u16.to_le_bytes());
    cfg_write(&mut c, 0x0c, &[0x10]);
    h.handle
        .bar_memory(2)
        .unwrap()
        .store_u32(0x1000, 77)
        .unwrap();
    assert_eq!(h.handle.trigger(0), Trigger::Fired);
    (c, ram, fd)
}

#[test]
fn disconnect_drops_maps_and_vectors_and_the_next_client_starts_clean() {
    let h = start(hca_like());
    let (c, _ram, fd) = busy_client(&h);
    take(&fd);

    c.shutdown().unwrap();
    drop(c);
    h.wait_for(|e| e.disconnects == 1);

    let handle = &h.handle;
    assert!(handle.memory().ranges().is_empty(), "no DMA map survives");
    assert!(handle.memory().read(0x10_0000, &mut [0; 4]).is_err());
    assert_eq!(handle.command(), 0);
    assert_eq!(handle.bar_memory(2).unwrap().load_u32(0x1000), Ok(0));
    assert_eq!(handle.trigger(0), Trigger::Disabled);
    assert_eq!(take(&fd), 0);
    assert_eq!(
        h.events.lock().unwrap().resets,
        0,
        "a disconnect is not a reset"
    );

    // The next client sees a device at power-on and gets a fresh start.
    let mut c = h.connect();
    assert_eq!(cfg_u16(&mut c, 0x00), 0x1234);
    assert_eq!(cfg_u16(&mut c, 0x04), 0);
    assert_eq!(cfg_u8(&mut c, 0x0c), 0);
    msix_control(&mut c, 0x8000);
    assert_eq!(handle.trigger(0), Trigger::Unwired, "old eventfds are gone");
    assert_eq!(handle.counters().disconnects, 1);
}

#[test]
fn device_reset_restores_power_on_state_but_keeps_dma_maps() {
    let h = start(hca_like());
    let (mut c, _ram, _fd) = busy_client(&h);

    c.reset().unwrap();
    assert_eq!(h.events.lock().unwrap().resets, 1);
    assert_eq!(h.handle.counters().resets, 1);

    assert_eq!(cfg_u16(&mut c, 0x04), 0);
    assert_eq!(cfg_u8(&mut c, 0x0c), 0);
    assert_eq!(h.handle.command(), 0);
    assert_eq!(h.handle.bar_memory(2).unwrap().load_u32(0x1000), Ok(0));
    assert_eq!(h.handle.trigger(0), Trigger::Disabled);
    assert!(
        h.handle.memory().is_mapped(0x10_0000, 0x10000),
        "guest RAM stays mapped"
    );
}

#[test]
fn malformed_versions_and_huge_region_counts_get_einval_and_the_stream_stays_in_step() {
    let h = start(hca_like());
    let mut raw = RawClient::connect(&h.path);
    // A payload without its NUL (the crate unwrapped CString::from_vec_with_nul
    // on it and panicked).
    raw.version(r#"{"capabilities":{}}"#, false);
    let (flags, error, _) = raw.recv();
    assert_eq!((flags & ERROR, error), (ERROR, libc::EINVAL as u32));
    // A VERSION claiming a 1 GiB payload: refused before it is allocated.
    let mut msg = Vec::new();
    msg.extend_from_slice(&7u16.to_le_bytes());
    msg.extend_from_slice(&VERSION.to_le_bytes());
    msg.extend_from_slice(&(1u32 << 30).to_le_bytes());
    msg.extend_from_slice(&[0; 8]);
    msg.extend_from_slice(&[0; 4]); // major, minor
    raw.stream.write_all(&msg).unwrap();
    let (flags, error, _) = raw.recv();
    assert_eq!((flags & ERROR, error), (ERROR, libc::EINVAL as u32));
    // issue 13: a REGION_READ of 2 GiB gets EINVAL, not a 2 GiB allocation and
    // reply; a REGION_WRITE of 64 MiB has its payload dropped, not held.
    let access = |region: u32, offset: u64, count: u32| {
        let mut b = Vec::new();
        b.extend_from_slice(&offset.to_le_bytes());
        b.extend_from_slice(&region.to_le_bytes());
        b.extend_from_slice(&count.to_le_bytes());
        b
    };
    raw.send(REGION_READ, &access(0, 0, 1 << 31));
    let (flags, error, _) = raw.recv();
    assert_eq!((flags & ERROR, error), (ERROR, libc::EINVAL as u32));
    let count = 64u32 << 20;
    let mut msg = Vec::new();
    msg.extend_from_slice(&8u16.to_le_bytes());
    msg.extend_from_slice(&REGION_WRITE.to_le_bytes());
    msg.extend_from_slice(&(32 + count).to_le_bytes());
    msg.extend_from_slice(&[0; 8]);
    msg.extend_from_slice(&access(0, 0x100, count));
    raw.stream.write_all(&msg).unwrap();
    let chunk = vec![0x5a; 1 << 20];
    for _ in 0..count >> 20 {
        raw.stream.write_all(&chunk).unwrap();
    }
    let (flags, error, _) = raw.recv();
    assert_eq!((flags & ERROR, error), (ERROR, libc::EINVAL as u32));
    assert!(
        h.events.lock().unwrap().writes.is_empty(),
        "nothing written"
    );
    // The stream is still in step: a plain read of config space works.
    raw.send(REGION_READ, &access(7, 2, 2));
    let (flags, _, body) = raw.recv();
    assert_eq!(flags & ERROR, 0);
    assert_eq!(body[16..18], 0x11c6u16.to_le_bytes());
}

#[test]
fn stale_socket_is_replaced_but_a_live_one_or_a_file_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.sock");
    // A server that died leaves its socket file behind.
    drop(UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    let live = Server::bind(&path, hca_like().build().unwrap()).unwrap();

    let again = Server::bind(&path, hca_like().build().unwrap());
    assert!(matches!(again, Err(ServeError::InUse(_))));

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, b"keep me").unwrap();
    let over = Server::bind(&file, hca_like().build().unwrap());
    assert!(matches!(over, Err(ServeError::NotASocket(_))));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");

    drop(live);
    assert!(!path.exists(), "the server removes its socket");
}

#[test]
fn stop_ends_serve_when_no_client_is_connected() {
    let h = start(hca_like());
    {
        let mut c = h.connect();
        assert_eq!(cfg_u16(&mut c, 0), 0x1234);
    }
    h.wait_for(|e| e.disconnects == 1);
    assert!(h.stop().is_ok());
}
