//! recvmmsg(2) and sendmmsg(2) for the UDP link: many datagrams per system call
//! (issue 12, batched packet I/O), which std does not offer. The one `unsafe`
//! block per call hands the kernel an array of message headers that point into
//! buffers this file owns or borrows for the duration of the call; everything
//! above this file is safe code.

#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::RawFd;

use socket2::SockAddr;

/// Receive buffers and their message headers, reused for every batch.
pub struct RecvBatch {
    bufs: Vec<Box<[u8]>>,
    addrs: Vec<libc::sockaddr_storage>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `hdrs` point into `bufs` and `addrs`
// (heap memory this struct owns); they are rebuilt before every call and
// never read outside it, so moving the struct to another thread moves
// nothing that another thread could still reach.
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RecvBatch({} x {} B)", self.bufs.len(), self.buf_len())
    }
}

impl RecvBatch {
    /// `n` buffers of `len` bytes each.
    pub fn new(n: usize, len: usize) -> RecvBatch {
        RecvBatch {
            bufs: (0..n).map(|_| vec![0u8; len].into_boxed_slice()).collect(),
            // SAFETY: sockaddr_storage is plain data; all zeroes is a valid
            // (unspecified-family) value.
            addrs: (0..n).map(|_| unsafe { zeroed() }).collect(),
            iovs: Vec::with_capacity(n),
            hdrs: Vec::with_capacity(n),
        }
    }

    fn buf_len(&self) -> usize {
        self.bufs.first().map_or(0, |b| b.len())
    }

    /// Datagram `i` of the last [`RecvBatch::recv`].
    pub fn buf(&self, i: usize) -> &[u8] {
        &self.bufs[i]
    }

    /// Reads up to the batch's size of datagrams from the non-blocking socket
    /// `fd` into the buffers; returns, per datagram, its length (a datagram
    /// longer than a buffer shows as a full buffer) and its source. `Ok` with
    /// an empty list: nothing waiting.
    pub fn recv(
        &mut self,
        fd: RawFd,
        out: &mut Vec<(usize, Option<SocketAddr>)>,
    ) -> io::Result<()> {
        out.clear();
        let n = self.bufs.len();
        self.iovs.clear();
        self.hdrs.clear();
        for b in self.bufs.iter_mut() {
            self.iovs.push(libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            });
        }
        for i in 0..n {
            // SAFETY: mmsghdr is plain data; all zeroes is a valid value that
            // the fields below complete.
            let mut h: libc::mmsghdr = unsafe { zeroed() };
            h.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = &mut self.iovs[i];
            h.msg_hdr.msg_iovlen = 1;
            self.hdrs.push(h);
        }
        // SAFETY: `hdrs` holds `n` headers whose name and iovec pointers point
        // into `addrs`, `iovs` and `bufs`, all owned by `self`, alive and not
        // otherwise borrowed during the call; the kernel writes at most the
        // lengths given. MSG_DONTWAIT: never blocks; no timeout pointer.
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
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            };
        }
        for i in 0..r as usize {
            let h = &self.hdrs[i];
            let len = (h.msg_len as usize).min(self.bufs[i].len());
            // SAFETY: the kernel filled `addrs[i]` with `msg_namelen` bytes of
            // a socket address (or none: then the family is unspecified and
            // `as_socket` says so).
            let addr = unsafe { SockAddr::new(self.addrs[i], h.msg_hdr.msg_namelen) };
            out.push((len, addr.as_socket()));
        }
        Ok(())
    }
}

/// Sends `msgs` (payload, destination) on the non-blocking socket `fd` with
/// one sendmmsg; returns how many went out, in order (the kernel stops at the
/// first that fails; `Err` when the first one did).
pub fn send_batch(fd: RawFd, msgs: &[(&[u8], SocketAddr)]) -> io::Result<usize> {
    if msgs.is_empty() {
        return Ok(0);
    }
    let addrs: Vec<SockAddr> = msgs.iter().map(|(_, a)| SockAddr::from(*a)).collect();
    let mut iovs: Vec<libc::iovec> = msgs
        .iter()
        .map(|(p, _)| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        })
        .collect();
    let mut hdrs: Vec<libc::mmsghdr> = Vec::with_capacity(msgs.len());
    for (i, a) in addrs.iter().enumerate() {
        // SAFETY: plain data, completed below.
        let mut h: libc::mmsghdr = unsafe { zeroed() };
        h.msg_hdr.msg_name = a.as_ptr() as *mut libc::c_void;
        h.msg_hdr.msg_namelen = a.len();
        h.msg_hdr.msg_iov = &mut iovs[i];
        h.msg_hdr.msg_iovlen = 1;
        hdrs.push(h);
    }
    // SAFETY: every header points at an address in `addrs` and an iovec in
    // `iovs` that points at a caller's payload; all outlive the call, and the
    // kernel only reads them (the iovec's `*mut` is the C type, not a write).
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
