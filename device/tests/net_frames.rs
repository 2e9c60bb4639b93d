//! The vhost-user-net backend's frame paths (virtio 1.2 §5.1.6) over a mock split
//! ring in a `GuestMemoryMmap`, without QEMU: guest TX chains become frames for
//! the TAP, frames for the guest fill its RX buffers (mergeable or not) with
//! `num_buffers` set, and every garbage chain is returned and counted.

use std::sync::atomic::Ordering;

use device::fabric::VNET_HDR_LEN;
use device::net::frames::{deliver_rx, process_tx, NetCounters, RxMode, RxOutcome};
use device::net::{config_space, tap_offload, FEATURES};
use virtio_queue::desc::split::Descriptor as SplitDescriptor;
use virtio_queue::desc::RawDescriptor;
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const NEXT: u16 = 1;
const WRITE: u16 = 2;
const MEM_SIZE: u64 = 0x10_0000;
const DATA: u64 = 0x2_0000;

fn memory() -> GuestMemoryMmap {
    GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap()
}

fn desc(addr: u64, len: u32, flags: u16, next: u16) -> RawDescriptor {
    RawDescriptor::from(SplitDescriptor::new(addr, len, flags, next))
}

fn used(mock: &MockSplitQueue<'_, GuestMemoryMmap>) -> Vec<(u32, u32)> {
    let n = mock.used().idx().load();
    (0..n)
        .map(|i| {
            let e = mock.used().ring().ref_at(usize::from(i)).unwrap().load();
            (e.id(), e.len())
        })
        .collect()
}

fn frame_bytes(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; VNET_HDR_LEN];
    f.extend((0..len).map(|i| (i % 251) as u8));
    f
}

fn c(v: &std::sync::atomic::AtomicU64) -> u64 {
    v.load(Ordering::Relaxed)
}

#[test]
fn net_tx_good_chain_becomes_one_tap_write_and_is_returned() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 16);
    let f = frame_bytes(100);
    mem.write_slice(&f[..VNET_HDR_LEN], GuestAddress(DATA))
        .unwrap();
    mem.write_slice(&f[VNET_HDR_LEN..], GuestAddress(DATA + 0x1000))
        .unwrap();
    mock.add_desc_chains(
        &[
            desc(DATA, VNET_HDR_LEN as u32, NEXT, 1),
            desc(DATA + 0x1000, 100, 0, 0),
        ],
        0,
    )
    .unwrap();
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    let mut buf = vec![0u8; 70_000];
    let mut written = Vec::new();
    let n = process_tx(&mut q, &mem, &mut buf, &counters, |b| {
        written.push(b.to_vec());
        Ok(b.len())
    });
    assert_eq!(n, 1);
    assert_eq!(written, vec![f]);
    assert_eq!(used(&mock), vec![(0, 0)]);
    assert_eq!((c(&counters.tx_frames), c(&counters.tx_bytes)), (1, 100));
    assert_eq!(counters.dropped(), 0);
}

#[test]
fn net_tx_garbage_chains_are_dropped_counted_and_returned() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 16);
    let good = frame_bytes(60);
    mem.write_slice(&good, GuestAddress(DATA)).unwrap();
    let mut bad_hdr = good.clone();
    bad_hdr[1] = 9; // unknown GSO type
    mem.write_slice(&bad_hdr, GuestAddress(DATA + 0x1000))
        .unwrap();
    let len = good.len() as u32;
    let chains = [
        // 0: device-writable descriptor in a TX chain
        desc(DATA, len, WRITE, 0),
        // 1: zero length
        desc(DATA, 0, 0, 0),
        // 2: outside guest memory
        desc(MEM_SIZE - 8, len, 0, 0),
        // 3: shorter than a vnet and an Ethernet header
        desc(DATA, 20, 0, 0),
        // 4: bad vnet header
        desc(DATA + 0x1000, len, 0, 0),
        // 5: longer than the frame buffer
        desc(DATA, 4096, 0, 0),
        // 6: a good one after all of it
        desc(DATA, len, 0, 0),
    ];
    mock.add_desc_chains(&chains, 0).unwrap();
    // 7: next outside the 16-entry table
    mock.add_desc_chains(&[desc(DATA, len, NEXT, 200)], 7)
        .unwrap();
    // 8, 9: a loop (8 -> 9 -> 8 ...)
    mock.add_desc_chains(&[desc(DATA, 8, NEXT, 9), desc(DATA, 8, NEXT, 8)], 8)
        .unwrap();
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    let mut buf = vec![0u8; 1024];
    let mut written = Vec::new();
    let n = process_tx(&mut q, &mem, &mut buf, &counters, |b| {
        written.push(b.to_vec());
        Ok(b.len())
    });
    assert_eq!(written, vec![good]);
    let u = used(&mock);
    assert_eq!(n, u.len());
    assert!(u.iter().all(|&(_, l)| l == 0), "{u:?}");
    assert_eq!(c(&counters.drop_tx_bad_desc), 5, "broken link and loop too");
    assert_eq!(c(&counters.drop_tx_short), 1);
    assert_eq!(c(&counters.drop_tx_bad_hdr), 1);
    assert_eq!(c(&counters.drop_tx_oversized), 1);
    assert_eq!(c(&counters.tx_frames), 1);
    // A second call finds nothing: no spinning on what was consumed.
    assert_eq!(
        process_tx(&mut q, &mem, &mut buf, &counters, |b| Ok(b.len())),
        0
    );
}

#[test]
fn net_tx_tap_error_is_counted() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 4);
    mem.write_slice(&frame_bytes(60), GuestAddress(DATA))
        .unwrap();
    mock.add_desc_chains(&[desc(DATA, 72, 0, 0)], 0).unwrap();
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    let mut buf = vec![0u8; 1024];
    process_tx(&mut q, &mem, &mut buf, &counters, |_| {
        Err(std::io::Error::from_raw_os_error(5))
    });
    assert_eq!(c(&counters.drop_tx_tap_error), 1);
    assert_eq!(used(&mock), vec![(0, 0)]);
}

const MERGE: RxMode = RxMode {
    mergeable: true,
    guest_csum: true,
};
const PLAIN: RxMode = RxMode {
    mergeable: false,
    guest_csum: false,
};

#[test]
fn net_rx_mergeable_frame_spans_buffers_with_num_buffers_set() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 16);
    let bufs: Vec<RawDescriptor> = (0..3)
        .map(|i| desc(DATA + i * 0x1000, 1500, WRITE, 0))
        .collect();
    mock.add_desc_chains(&bufs, 0).unwrap();
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    let mut f = frame_bytes(2000);
    f[0] = 2; // DATA_VALID: kept with GUEST_CSUM
    let want = f.clone();
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, MERGE, &counters),
        RxOutcome::Delivered
    );
    assert_eq!(
        used(&mock),
        vec![(0, 1500), (1, (want.len() - 1500) as u32)]
    );
    let mut got = vec![0u8; want.len()];
    mem.read_slice(&mut got[..1500], GuestAddress(DATA))
        .unwrap();
    mem.read_slice(&mut got[1500..], GuestAddress(DATA + 0x1000))
        .unwrap();
    assert_eq!(u16::from_le_bytes([got[10], got[11]]), 2, "num_buffers");
    assert_eq!(got[0], 2);
    assert_eq!(&got[12..], &want[12..]);
    assert_eq!(c(&counters.rx_frames), 1);
    // The third buffer is still the guest's, for the next frame.
    assert_eq!(q.next_avail(), 2);
}

#[test]
fn net_rx_without_enough_buffers_waits_and_keeps_the_ring_intact() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 16);
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    let mut f = frame_bytes(3000);
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, MERGE, &counters),
        RxOutcome::NoBuffers
    );
    mock.add_desc_chains(&[desc(DATA, 1500, WRITE, 0)], 0)
        .unwrap();
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, MERGE, &counters),
        RxOutcome::NoBuffers
    );
    assert_eq!(q.next_avail(), 0, "the posted buffer is put back");
    assert!(used(&mock).is_empty());
    mock.add_desc_chains(&[desc(DATA + 0x1000, 1500, WRITE, 0)], 1)
        .unwrap();
    mock.add_desc_chains(&[desc(DATA + 0x2000, 1500, WRITE, 0)], 2)
        .unwrap();
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, MERGE, &counters),
        RxOutcome::Delivered
    );
    assert_eq!(used(&mock).len(), 3);
    assert_eq!(counters.dropped(), 0);
}

#[test]
fn net_rx_without_mrg_rxbuf_one_chain_per_frame() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 16);
    // One chain of two descriptors (header, data), as Linux's big-packet mode.
    mock.add_desc_chains(
        &[
            desc(DATA, VNET_HDR_LEN as u32, WRITE | NEXT, 1),
            desc(DATA + 0x1000, 1000, WRITE, 0),
        ],
        0,
    )
    .unwrap();
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    // Too big for the chain: dropped, and the chain stays for the next frame.
    let mut big = frame_bytes(1500);
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut big, PLAIN, &counters),
        RxOutcome::Dropped
    );
    assert_eq!(c(&counters.drop_rx_too_big), 1);
    assert_eq!(q.next_avail(), 0);
    let mut f = frame_bytes(500);
    f[0] = 2; // DATA_VALID without GUEST_CSUM: cleared
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, PLAIN, &counters),
        RxOutcome::Delivered
    );
    assert_eq!(used(&mock), vec![(0, (VNET_HDR_LEN + 500) as u32)]);
    let mut hdr = [0u8; VNET_HDR_LEN];
    mem.read_slice(&mut hdr, GuestAddress(DATA)).unwrap();
    assert_eq!((hdr[0], u16::from_le_bytes([hdr[10], hdr[11]])), (0, 1));
}

#[test]
fn net_rx_garbage_chains_are_returned_empty_and_counted() {
    let mem = memory();
    let mock = MockSplitQueue::new(&mem, 16);
    mock.add_desc_chains(
        &[
            // device-readable in an RX chain
            desc(DATA, 1500, 0, 0),
            // outside guest memory
            desc(MEM_SIZE - 100, 1500, WRITE, 0),
            // zero length
            desc(DATA, 0, WRITE, 0),
            // a good one
            desc(DATA + 0x1000, 1500, WRITE, 0),
        ],
        0,
    )
    .unwrap();
    let mut q: Queue = mock.create_queue().unwrap();
    let counters = NetCounters::default();
    let mut f = frame_bytes(100);
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, MERGE, &counters),
        RxOutcome::Delivered
    );
    let u = used(&mock);
    assert_eq!(&u[..3], &[(0, 0), (1, 0), (2, 0)]);
    assert_eq!(u[3], (3, f.len() as u32));
    assert_eq!(c(&counters.drop_rx_bad_desc), 3);
    // Only garbage left and a frame waiting: the garbage goes back, the frame
    // waits for buffers, nothing loops.
    mock.add_desc_chains(&[desc(DATA, 1500, 0, 0)], 4).unwrap();
    assert_eq!(
        deliver_rx(&mut q, &mem, &mut f, MERGE, &counters),
        RxOutcome::NoBuffers
    );
    assert_eq!(used(&mock).len(), 5);
    assert_eq!(c(&counters.drop_rx_bad_desc), 4);
}

#[test]
fn net_features_config_and_tap_offloads_follow_the_guest() {
    use virtio_bindings::virtio_net::*;
    for bit in [
        VIRTIO_NET_F_MAC,
        VIRTIO_NET_F_MTU,
        VIRTIO_NET_F_STATUS,
        VIRTIO_NET_F_MRG_RXBUF,
        VIRTIO_NET_F_CSUM,
        VIRTIO_NET_F_GUEST_CSUM,
        VIRTIO_NET_F_HOST_TSO4,
        VIRTIO_NET_F_GUEST_TSO6,
    ] {
        assert_ne!(FEATURES & (1 << bit), 0, "bit {bit}");
    }
    assert_ne!(FEATURES & (1 << 32), 0, "VIRTIO_F_VERSION_1");
    // Not offered: QEMU would send SET_VRING_ENABLE before acking it.
    assert_eq!(FEATURES & (1 << 30), 0, "VHOST_USER_F_PROTOCOL_FEATURES");
    let cfg = config_space([2, 0, 0, 0, 0, 9], 9000);
    assert_eq!(&cfg[..6], &[2, 0, 0, 0, 0, 9]);
    assert_eq!(u16::from_le_bytes([cfg[6], cfg[7]]), 1, "link up");
    assert_eq!(u16::from_le_bytes([cfg[10], cfg[11]]), 9000);
    assert_eq!(tap_offload(0), 0);
    // TSO without GUEST_CSUM is no offload at all (a TSO frame has a partial
    // checksum).
    assert_eq!(tap_offload(1 << VIRTIO_NET_F_GUEST_TSO4), 0);
    assert_eq!(
        tap_offload(
            1 << VIRTIO_NET_F_GUEST_CSUM
                | 1 << VIRTIO_NET_F_GUEST_TSO4
                | 1 << VIRTIO_NET_F_GUEST_TSO6
        ),
        device::fabric::TUN_F_CSUM | device::fabric::TUN_F_TSO4 | device::fabric::TUN_F_TSO6
    );
}
