//! recvmmsg(2) and sendmmsg(2) for the UDP link: many datagrams per system call
//! (issue 12, batched packet I/O), which std does not offer, with UDP GSO and
//! GRO (udp(7): `UDP_SEGMENT`, `UDP_GRO`) where the kernel has them: one
//! sendmmsg message may carry a run of same-size packets to one peer that the
//! kernel segments as late as it can (on loopback not at all), and one received
//! buffer may hold a run of coalesced datagrams with their segment size. The one
//! `unsafe` block per call hands the kernel an array of message headers that
//! point into buffers this file owns or borrows for the duration of the call;
//! everything above this file is safe code.

#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::RawFd;

use socket2::SockAddr;

/// Control-message space per received message: one `UDP_GRO` int, 8-byte
/// aligned (CMSG_SPACE(4) is 24 on 64-bit Linux; 32 leaves room).
const RX_CMSG_SPACE: usize = 32;

/// One received buffer's control space, aligned as `cmsghdr` needs.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf([u8; RX_CMSG_SPACE]);

/// What one message of a [`RecvBatch::recv`] held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes received (a datagram longer than the buffer shows as a full one).
    pub len: usize,
    /// The sender, if the kernel gave an address of a family we know.
    pub from: Option<SocketAddr>,
    /// With `UDP_GRO`: the datagrams were coalesced and each but the last is
    /// this long (udp(7)). `None`: one datagram.
    pub segment: Option<usize>,
}

/// Receive buffers and their message headers, reused for every batch. The
/// headers are made once: a call that finds the socket empty (the shared-
/// memory link polls its UDP socket every round for doorbells and fallback
/// traffic) costs the system call, not a rebuild of every header.
pub struct RecvBatch {
    bufs: Vec<Box<[u8]>>,
    addrs: Vec<libc::sockaddr_storage>,
    /// Reached only through `hdrs`' pointers (by the kernel and
    /// `gro_segment`): kept for them.
    #[allow(dead_code)]
    cmsgs: Vec<CmsgBuf>,
    #[allow(dead_code)]
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    /// Headers from the front whose in/out lengths the kernel may have
    /// changed since they were last set (the messages the last call filled).
    dirty: usize,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` point into `bufs`, `addrs`,
// `cmsgs` and `iovs` (heap blocks this struct owns, made in `new` and never
// grown, so they never move); they are read only during `recv`, so moving the
// struct to another thread moves nothing that another thread could still
// reach.
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecvBatch({} x {} B)", self.bufs.len(), self.buf_len())
    }
}

impl RecvBatch {
    /// `n` buffers of `len` bytes each.
    pub fn new(n: usize, len: usize) -> RecvBatch {
        let mut bufs: Vec<Box<[u8]>> = (0..n).map(|_| vec![0u8; len].into_boxed_slice()).collect();
        // SAFETY: sockaddr_storage is plain data; all zeroes is a valid
        // (unspecified-family) value.
        let mut addrs: Vec<libc::sockaddr_storage> = (0..n).map(|_| unsafe { zeroed() }).collect();
        let mut cmsgs = vec![CmsgBuf([0; RX_CMSG_SPACE]); n];
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let hdrs = (0..n)
            .map(|i| {
                // SAFETY: mmsghdr is plain data; all zeroes is a valid value
                // that the fields below complete.
                let mut h: libc::mmsghdr = unsafe { zeroed() };
                h.msg_hdr.msg_name = (&mut addrs[i] as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_iov = &mut iovs[i];
                h.msg_hdr.msg_iovlen = 1;
                h.msg_hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
                h
            })
            .collect();
        RecvBatch {
            bufs,
            addrs,
            cmsgs,
            iovs,
            hdrs,
            dirty: n,
        }
    }

    /// Bytes each buffer holds.
    pub fn buf_len(&self) -> usize {
        self.bufs.first().map_or(0, |b| b.len())
    }

    /// Message `i` of the last [`RecvBatch::recv`].
    pub fn buf(&self, i: usize) -> &[u8] {
        &self.bufs[i]
    }

    /// Reads up to the batch's size of messages from the non-blocking socket
    /// `fd` into the buffers; returns what each held. `Ok` with an empty list:
    /// nothing waiting.
    pub fn recv(&mut self, fd: RawFd, out: &mut Vec<RecvMeta>) -> io::Result<()> {
        out.clear();
        let n = self.hdrs.len();
        // The kernel writes back the name and control lengths, the flags and
        // the length of each message it fills: only those are set again.
        for h in &mut self.hdrs[..self.dirty] {
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_controllen = RX_CMSG_SPACE as _;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        self.dirty = n;
        // SAFETY: `hdrs` holds `n` headers whose name, iovec and control
        // pointers point into `addrs`, `iovs`, `bufs` and `cmsgs` (`new`),
        // all owned by `self`, never moved, and not otherwise borrowed during
        // the call; the kernel writes at most the lengths given. MSG_DONTWAIT:
        // never blocks; no timeout pointer.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            // A failed call fills no message (recvmmsg(2)); every header is
            // set again next time all the same.
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            };
        }
        self.dirty = r as usize;
        for i in 0..r as usize {
            let h = &self.hdrs[i];
            let len = (h.msg_len as usize).min(self.bufs[i].len());
            // SAFETY: the kernel filled `addrs[i]` with `msg_namelen` bytes of
            // a socket address (or none: then the family is unspecified and
            // `as_socket` says so).
            let addr = unsafe { SockAddr::new(self.addrs[i], h.msg_hdr.msg_namelen) };
            out.push(RecvMeta {
                len,
                from: addr.as_socket(),
                segment: gro_segment(&h.msg_hdr),
            });
        }
        Ok(())
    }
}

/// The `UDP_GRO` segment size in a received message's control data, if any.
fn gro_segment(m: &libc::msghdr) -> Option<usize> {
    // SAFETY: `m` is a header the kernel just filled: `msg_control` points at
    // `msg_controllen` bytes of control messages (in a buffer of ours that is
    // still alive), which the CMSG_* macros walk without leaving it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP
                && (*c).cmsg_type == libc::UDP_GRO
                && (*c).cmsg_len as usize
                    >= libc::CMSG_LEN(size_of::<libc::c_int>() as u32) as usize
            {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok().filter(|&s| s > 0);
            }
            c = libc::CMSG_NXTHDR(m, c);
        }
    }
    None
}

/// One message of a [`send_batch`]: packets that go out back to back to one
/// destination, as one datagram each (`gso: None`, then `parts` holds one
/// packet) or as one UDP GSO super-datagram that the kernel cuts every `gso`
/// bytes (every part but the last exactly `gso` long).
#[derive(Debug, Clone)]
pub struct OutMsg<'a> {
    pub parts: Vec<&'a [u8]>,
    pub to: SocketAddr,
    pub gso: Option<u16>,
}

/// Control space for one `UDP_SEGMENT` u16 (CMSG_SPACE(2) is 24 on 64-bit).
const TX_CMSG_SPACE: usize = 32;

/// Sends `msgs` on the non-blocking socket `fd` with one sendmmsg; returns how
/// many messages went out, in order (the kernel stops at the first that fails;
/// `Err` when the first one did).
pub fn send_batch(fd: RawFd, msgs: &[OutMsg<'_>]) -> io::Result<usize> {
    if msgs.is_empty() {
        return Ok(0);
    }
    let addrs: Vec<SockAddr> = msgs.iter().map(|m| SockAddr::from(m.to)).collect();
    let mut iovs: Vec<Vec<libc::iovec>> = msgs
        .iter()
        .map(|m| {
            m.parts
                .iter()
                .map(|p| libc::iovec {
                    iov_base: p.as_ptr() as *mut libc::c_void,
                    iov_len: p.len(),
                })
                .collect()
        })
        .collect();
    let mut cmsgs = vec![CmsgBuf([0; TX_CMSG_SPACE]); msgs.len()];
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(msgs.len());
    for (i, a) in addrs.iter().enumerate() {
        // SAFETY: plain data, completed below.
        let mut h: libc::mmsghdr = unsafe { zeroed() };
        h.msg_hdr.msg_name = a.as_ptr() as *mut libc::c_void;
        h.msg_hdr.msg_namelen = a.len();
        h.msg_hdr.msg_iov = iovs[i].as_mut_ptr();
        h.msg_hdr.msg_iovlen = iovs[i].len() as _;
        if let Some(seg) = msgs[i].gso {
            h.msg_hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is a pure size computation.
            h.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u16>() as u32) } as _;
            // SAFETY: the control buffer is TX_CMSG_SPACE bytes, 8-aligned,
            // more than CMSG_SPACE(2); CMSG_FIRSTHDR of a header whose
            // controllen is that size points at its start, and CMSG_DATA
            // inside it, with room for the u16 written unaligned.
            unsafe {
                let c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                (*c).cmsg_level = libc::SOL_UDP;
                (*c).cmsg_type = libc::UDP_SEGMENT;
                (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
            }
        }
        hdrs.push(h);
    }
    // SAFETY: every header points at an address in `addrs`, iovecs in `iovs`
    // that point at the caller's payloads, and control data in `cmsgs`; all
    // outlive the call, and the kernel only reads them (the iovec's `*mut` is
    // the C type, not a write).
    let r = unsafe {
        libc::sendmmsg(
            fd,
            hdrs.as_mut_ptr(),
            hdrs.len() as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Sets an int socket option at level SOL_UDP (`UDP_SEGMENT`, `UDP_GRO`).
pub fn set_udp_opt(fd: RawFd, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    super::underlay::set_int(fd, libc::SOL_UDP, opt, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    /// `recv` until it returns something (loopback delivers at once, but
    /// not by contract), for at most a second.
    fn recv_some(rx: &mut RecvBatch, fd: RawFd) -> Vec<RecvMeta> {
        let mut out = Vec::new();
        let end = Instant::now() + Duration::from_secs(1);
        while out.is_empty() && Instant::now() < end {
            rx.recv(fd, &mut out).expect("recvmmsg");
        }
        out
    }

    /// The headers are made once and only the lengths the kernel wrote back
    /// are set again: a datagram without control data (the kernel then
    /// writes a control length of 0) must not leave the next message's
    /// `UDP_GRO` segment size cut off, nor an empty call anything stale.
    #[test]
    fn reused_headers_keep_each_message_whole() {
        let rx_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        set_udp_opt(rx_sock.as_raw_fd(), libc::UDP_GRO, 1).expect("UDP_GRO (Linux 5.0+)");
        rx_sock.set_nonblocking(true).unwrap();
        let to = rx_sock.local_addr().unwrap();
        let from = tx_sock.local_addr().unwrap();
        let (fd, tfd) = (rx_sock.as_raw_fd(), tx_sock.as_raw_fd());
        let mut rx = RecvBatch::new(4, 4096);
        let mut none = Vec::new();
        rx.recv(fd, &mut none).unwrap();
        assert!(none.is_empty());
        for round in 0..3 {
            // One plain datagram: no control data comes with it.
            let plain = vec![round as u8; 100];
            let msg = OutMsg {
                parts: vec![&plain],
                to,
                gso: None,
            };
            assert_eq!(send_batch(tfd, &[msg]).unwrap(), 1);
            let got = recv_some(&mut rx, fd);
            assert_eq!(got.len(), 1, "round {round}");
            assert_eq!(
                (got[0].len, got[0].from, got[0].segment),
                (100, Some(from), None)
            );
            assert_eq!(&rx.buf(0)[..100], &plain[..]);
            // Three segments of 500 bytes sent as one GSO message: on
            // loopback a GRO socket gets them as one buffer with the size.
            let seg = [vec![1u8; 500], vec![2u8; 500], vec![3u8; 500]];
            let msg = OutMsg {
                parts: seg.iter().map(|s| &s[..]).collect(),
                to,
                gso: Some(500),
            };
            assert_eq!(send_batch(tfd, &[msg]).unwrap(), 1);
            let got = recv_some(&mut rx, fd);
            assert_eq!(got.len(), 1, "round {round}");
            assert_eq!(
                (got[0].len, got[0].from, got[0].segment),
                (1500, Some(from), Some(500)),
                "round {round}"
            );
            rx.recv(fd, &mut none).unwrap();
            assert!(none.is_empty());
        }
    }
}
