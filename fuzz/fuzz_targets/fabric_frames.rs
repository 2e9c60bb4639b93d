//! The device's frame and text parsers (device/src/fabric, device/src/net,
//! device/src/cli.rs; ARCHITECTURE.md §6, §9): frames read from a TAP (vnet
//! header, RoCEv2 classification, the guest's queue) through a `TapLink` on a
//! SEQPACKET pair playing the kernel, `classify` and `vnet_hdr_ok` alone, the
//! fabric file (TOML), the fault spec and the command line. The first byte picks
//! the parser.
#![no_main]

use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use device::cli::{parse_mac, Cli};
use device::fabric::{classify, vnet_hdr_ok, Tap, TapLink, VNET_HDR_LEN};
use device::fabric::{FabricFile, FaultSpec, Link, MAX_PACKET_LEN};
use libfuzzer_sys::fuzz_target;
use socket2::{Domain, Socket, Type};

const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];

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
    match mode % 6 {
        0 => tap_frames(rest),
        1 => {
            let _ = classify(rest, &MAC);
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
