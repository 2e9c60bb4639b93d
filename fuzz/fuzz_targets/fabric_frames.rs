//! The device's frame and text parsers (device/src/fabric, device/src/net,
//! device/src/cli.rs; ARCHITECTURE.md §6, §9): frames read from a TAP (vnet
//! header, RoCEv2 classification, the guest's queue) through a `TapLink` on a
//! SEQPACKET pair playing the kernel, `classify` and `vnet_hdr_ok` alone, the
//! fabric file (TOML), the fault spec and the command line, and the virtio-net
//! paths of the vhost-user-net backend (`process_tx`, `deliver_rx`) over a split
//! ring whose descriptors the guest (the fuzzer) wrote. The first byte picks the
//! parser.
#![no_main]

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use device::cli::{parse_mac, Cli};
use device::fabric::{classify, vnet_hdr_ok, Tap, TapLink, VNET_HDR_LEN};
use device::fabric::{End, FabricFile, FaultSpec, Link, MAX_PACKET_LEN};
use libfuzzer_sys::fuzz_target;
use socket2::{Domain, Socket, Type};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
/// Guest RAM of the virtio mode, and where the frame bytes are placed in it.
const VIRTIO_MEM: usize = 0x10_0000;
const DATA: u64 = 0x2_0000;

/// Records: mode u8 (bit 0 TX, bit 1 mergeable, bit 2 GUEST_CSUM), descriptors
/// n u8 then n x (addr u64, len u32, flags u16, next u16), heads n u8 then n x
/// u16, then the frame (RX: the frame offered; TX: the bytes at DATA).
fn virtio(data: &[u8]) {
    use device::net::frames::{deliver_rx, process_tx, NetCounters, RxMode};
    use virtio_queue::desc::split::Descriptor;
    use virtio_queue::desc::RawDescriptor;
    use virtio_queue::mock::MockSplitQueue;
    use virtio_queue::Queue;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    let mut r = data;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (a, b) = r.split_at_checked(n)?;
        r = b;
        Some(a)
    };
    let Some(&[mode, ndesc]) = take(2).map(|b| <&[u8; 2]>::try_from(b).unwrap()) else {
        return;
    };
    let mem = GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), VIRTIO_MEM)]).unwrap();
    let mock = MockSplitQueue::new(&mem, 16);
    for i in 0..u16::from(ndesc % 17) {
        let Some(d) = take(16) else { return };
        let addr = u64::from_le_bytes(d[0..8].try_into().unwrap());
        let len = u32::from_le_bytes(d[8..12].try_into().unwrap());
        let flags = u16::from_le_bytes([d[12], d[13]]);
        let next = u16::from_le_bytes([d[14], d[15]]);
        let _ = mock.desc_table().store(
            i,
            RawDescriptor::from(Descriptor::new(addr, len, flags, next)),
        );
    }
    let Some(&[nheads]) = take(1).map(|b| <&[u8; 1]>::try_from(b).unwrap()) else {
        return;
    };
    let nheads = u16::from(nheads % 17);
    for i in 0..nheads {
        let Some(h) = take(2) else { return };
        let _ = mock
            .avail()
            .ring()
            .ref_at(usize::from(i))
            .map(|e| e.store(u16::from_le_bytes([h[0], h[1]])));
    }
    mock.avail().idx().store(nheads);
    let frame = r;
    let Ok(mut q) = mock.create_queue::<Queue>() else {
        return;
    };
    let counters = NetCounters::default();
    if mode & 1 != 0 {
        let _ = mem.write_slice(&frame[..frame.len().min(0x1_0000)], GuestAddress(DATA));
        let mut buf = vec![0u8; VNET_HDR_LEN + device::fabric::MAX_FRAME_LEN];
        process_tx(&mut q, &mem, &mut buf, &counters, |b| Ok(b.len()));
    } else {
        let mut f = frame.to_vec();
        let rx = RxMode {
            mergeable: mode & 2 != 0,
            guest_csum: mode & 4 != 0,
        };
        deliver_rx(&mut q, &mem, &mut f, rx, &counters);
    }
}

fn tap_frames(data: &[u8]) {
    let (a, b) = Socket::pair(Domain::UNIX, Type::SEQPACKET, None).unwrap();
    let _ = b.set_send_buffer_size(1 << 20);
    let tap = Tap::from_fd(OwnedFd::from(a), "fuzz0", MAC, 1500).unwrap();
    let attached = data.first().is_some_and(|f| f & 1 != 0);
    tap.to_guest().set_attached(attached);
    let mut link = TapLink::new(Arc::new(tap));
    // Records: len u16 LE, then the frame as the kernel hands it (vnet header
    // first).
    let mut rest = data.get(1..).unwrap_or_default();
    let mut n = 0;
    while rest.len() >= 2 && n < 32 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        if (&b).write_all(&rest[2..2 + len]).is_err() {
            break;
        }
        rest = &rest[2 + len..];
        n += 1;
    }
    let mut buf = vec![0; MAX_PACKET_LEN];
    let now = Duration::from_secs(1);
    for _ in 0..=n {
        if let Ok(Some(len)) = link.recv(now, &mut buf) {
            // What reaches the engine goes back out (the port's own frames
            // loop back, multicast too).
            assert!(len <= buf.len());
            let _ = link.send(now, &buf[..len]);
        }
    }
    while link.tap().to_guest().pop().is_some() {}
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 7 {
        0 => tap_frames(rest),
        6 => virtio(rest),
        1 => {
            let _ = classify(rest);
            if let Some((h, frame)) = rest.split_first_chunk::<{ VNET_HDR_LEN }>() {
                let _ = vnet_hdr_ok(h, frame.len());
            }
        }
        2 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                if let Ok(f) = FabricFile::parse("fuzz.toml", text) {
                    // What parsed is consistent: every node is found by its keys.
                    for n in f.nodes() {
                        assert!(f.by_name(&n.name).is_some());
                        assert!(f.by_lid(n.lid).is_some());
                        assert!(f.by_address(&n.address).is_some());
                    }
                    // Cabling (issue 26): links pair their ends both ways, a
                    // cabled fabric leaves no node out, and the static LFT of
                    // every switch is computed without a panic.
                    let c = f.cabling();
                    for &(x, y) in c.links() {
                        assert_eq!((c.peer(x), c.peer(y)), (Some(y), Some(x)));
                        assert!(c.address(f.nodes(), x).is_some());
                    }
                    if c.is_cabled() {
                        for i in 0..f.nodes().len() {
                            assert!(c.peer(End::Node(i)).is_some());
                        }
                    }
                    for s in 0..c.switches().len() {
                        let lft = c.static_lft(s, f.nodes().len(), |i| vec![f.nodes()[i].lid]);
                        let ports = c.switches()[s].ports;
                        assert!(lft.iter().all(|&(_, p)| p <= ports));
                    }
                }
            }
        }
        3 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                if let Ok(spec) = text.parse::<FaultSpec>() {
                    // The logged form reads back as the same spec.
                    let again: FaultSpec = spec.to_string().parse().expect("round trip");
                    assert_eq!(again.to_string(), spec.to_string());
                }
                let _ = parse_mac(text);
            }
        }
        _ => {
            // A command line: arguments separated by NUL bytes.
            if let Ok(text) = std::str::from_utf8(rest) {
                let args = std::iter::once("vhca").chain(text.split('\0'));
                if let Ok(cli) = Cli::try_parse_from(args) {
                    let _ = cli.check();
                }
            }
        }
    }
});
