//! Helpers shared by the fabric tests: real packets built with `PacketRepr`, a
//! recording link, and fabrics on 127.0.0.1 with OS-chosen ports.

#![allow(dead_code)] // each test file uses a different subset

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use device::fabric::{FabricFile, Link, LinkError, Received, UdpLink, MAX_PACKET_LEN};
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, DethRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};

/// A UD SEND Only packet (LRH, BTH, DETH, payload, ICRC, VCRC) from `slid` to
/// `dlid`; `psn` and the payload make every packet of a test distinct.
pub fn ud_packet(slid: u16, dlid: u16, psn: u32, payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        lrh: LrhRepr {
            vl: 0,
            sl: 0,
            dlid,
            slid,
        },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 2,
                ack_req: false,
                psn,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: 0x1111_1111,
                    src_qp: 3,
                }),
                ..ExtHeaders::default()
            },
            payload,
        },
    };
    let mut buf = vec![0; repr.buffer_len()];
    let n = repr.emit(&mut buf).expect("a valid UD packet");
    buf.truncate(n);
    buf
}

/// Binds `n` sockets on 127.0.0.1 with ports the OS picks.
pub fn loopback_sockets(n: usize) -> Vec<(UdpSocket, SocketAddr)> {
    (0..n)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
            let a = s.local_addr().expect("local_addr");
            (s, a)
        })
        .collect()
}

/// Two UdpLinks "a" (LID 1) and "b" (LID 2) on 127.0.0.1, through a fabric file
/// written to disk with the ports the OS chose.
pub fn udp_pair(dir: &std::path::Path) -> (UdpLink, UdpLink, FabricFile) {
    let mut socks = loopback_sockets(2);
    let (sb, ab) = socks.pop().expect("two sockets");
    let (sa, aa) = socks.pop().expect("two sockets");
    let text = format!(
        "[[node]]\nname = \"a\"\nlid = 1\nguid = \"0x0002c90300000001\"\naddress = \"{aa}\"\n\n\
         [[node]]\nname = \"b\"\nlid = 2\nguid = 0x0002c90300000002\naddress = \"{ab}\"\n"
    );
    let path = dir.join("fabric.toml");
    std::fs::write(&path, text).expect("write fabric file");
    let fabric = FabricFile::load(&path).expect("valid fabric file");
    let mut a = UdpLink::from_socket(&fabric, "a", sa).expect("link a");
    let mut b = UdpLink::from_socket(&fabric, "b", sb).expect("link b");
    // No keepalives (AE-01): the tests of these links look at their packets
    // and deadlines alone.
    a.set_liveness(None);
    b.set_liveness(None);
    (a, b, fabric)
}

/// Receives one packet, polling for at most 2 s (loopback UDP delivers in
/// microseconds; the bound keeps a lost packet from hanging the test).
pub fn recv_within(link: &mut impl Link, now: Duration) -> Option<Vec<u8>> {
    let mut buf = vec![0; MAX_PACKET_LEN];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        if let Some(n) = link.recv(now, &mut buf).expect("recv") {
            return Some(buf[..n].to_vec());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// Drains what a link has now, after giving loopback UDP time to deliver, with
/// the sender's LID the link names for each packet.
/// A received packet's bytes, also of one lent in place (`Received::lent`).
pub fn whole(r: &device::fabric::Received<'_>) -> Vec<u8> {
    let mut b = vec![0; r.len()];
    r.copy_to(&mut b);
    b
}

pub fn drain_from(link: &mut impl Link, now: Duration) -> Vec<(Vec<u8>, Option<u16>)> {
    std::thread::sleep(Duration::from_millis(50));
    let mut out = Vec::new();
    while link
        .recv_batch(now, 16, &mut |r| out.push((whole(&r), r.src_lid)))
        .expect("recv")
        > 0
    {}
    out
}

/// Drains what a link has now, after giving loopback UDP time to deliver.
pub fn drain(link: &mut impl Link, now: Duration) -> Vec<Vec<u8>> {
    std::thread::sleep(Duration::from_millis(50));
    let mut buf = vec![0; MAX_PACKET_LEN];
    let mut out = Vec::new();
    while let Some(n) = link.recv(now, &mut buf).expect("recv") {
        out.push(buf[..n].to_vec());
    }
    out
}

/// A link that records what is sent through it and hands out queued packets: the
/// fault stage's statistics need no sockets.
#[derive(Debug, Default)]
pub struct RecordingLink {
    pub sent: Vec<(Duration, Vec<u8>)>,
    pub inbox: std::collections::VecDeque<Vec<u8>>,
}

impl Link for RecordingLink {
    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.sent.push((now, packet.to_vec()));
        Ok(())
    }
    fn recv_batch(
        &mut self,
        _now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        while n < max {
            let Some(p) = self.inbox.pop_front() else {
                break;
            };
            deliver(Received {
                packet: &p,
                lent: None,
                src_lid: None,
                crcs_vouched: false,
            });
            n += 1;
        }
        Ok(n)
    }
    fn raw_fd(&self) -> RawFd {
        // No descriptor: tests poll it directly.
        -1
    }
    fn poll_timeout(&self) -> Option<Duration> {
        None
    }
    fn handle_timeout(&mut self, _now: Duration) -> Result<(), LinkError> {
        Ok(())
    }
}

/// A fabric file in `dir` with two nodes, a (LID 1) and b (LID 2), for the
/// command-line tests (cli.rs, cli_config.rs), which parse it but open no
/// socket.
pub fn fabric_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("fabric.toml");
    std::fs::write(
        &p,
        "[[node]]\nname = \"a\"\nlid = 1\nguid = \"0x0002c90300000001\"\naddress = \"127.0.0.1:18515\"\n\n\
         [[node]]\nname = \"b\"\nlid = 2\nguid = \"0x0002c90300000002\"\naddress = \"127.0.0.1:18516\"\n",
    )
    .unwrap();
    p
}

/// Whether the test runs as root (a real TAP, a bridge: CI runs as root).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
