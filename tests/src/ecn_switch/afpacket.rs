//! The system calls of `ecn-switch`, in small wrappers: an AF_PACKET socket
//! bound to one network device (the kernel side of a TAP: what the TAP's
//! owner writes is received here, what is sent here the owner reads),
//! `ppoll` over several, and a SIGTERM/SIGINT flag.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use device::fabric::set_int_sockopt;

// <linux/if_packet.h>, <asm-generic/socket.h>: spelt out here rather than
// through libc's module paths, which move between its versions.
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Bytes of the virtio-net header in front of every frame of a socket opened
/// with `vnet_hdr` (struct virtio_net_hdr, without num_buffers).
pub const VNET_HDR_LEN: usize = 10;

/// A raw packet socket on one device, non-blocking.
#[derive(Debug)]
pub struct PacketSock {
    fd: OwnedFd,
    pub name: String,
}

impl PacketSock {
    /// Opens a socket for every frame of device `name`, not seeing its own
    /// sends (PACKET_IGNORE_OUTGOING); with `vnet_hdr`, frames carry a
    /// virtio-net header (GSO and checksum offload state: a TAP owner's
    /// offloaded frame passes through whole, as a bridge passes it).
    pub fn open(name: &str, vnet_hdr: bool, buf_bytes: i32) -> io::Result<PacketSock> {
        let cname = CString::new(name).map_err(|_| io::Error::other("NUL in device name"))?;
        // SAFETY: a valid NUL-terminated string for the call.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no network device {name}"),
            ));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) takes no pointers; -1 is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        set_int_sockopt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        if vnet_hdr {
            set_int_sockopt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, 1)?;
        }
        set_int_sockopt(raw, libc::SOL_SOCKET, SO_RCVBUFFORCE, buf_bytes)?;
        set_int_sockopt(raw, libc::SOL_SOCKET, SO_SNDBUFFORCE, buf_bytes)?;
        // SAFETY: an all-zero sockaddr_ll is a valid value of the plain struct.
        let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sa.sll_family = libc::AF_PACKET as u16;
        sa.sll_protocol = proto;
        sa.sll_ifindex = ifindex as i32;
        // SAFETY: `sa` is a sockaddr_ll of the size passed, read by the kernel only.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PacketSock {
            fd,
            name: name.to_string(),
        })
    }

    /// One frame into `buf`: Ok(Some(len)), Ok(None) if nothing is waiting;
    /// a frame longer than `buf` is Err(InvalidData) (MSG_TRUNC), consumed.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        // SAFETY: `buf` is writable for its length, which is passed.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(None),
                _ => Err(e),
            };
        }
        let n = n as usize;
        if n > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "frame truncated",
            ));
        }
        Ok(Some(n))
    }

    /// Sends one frame out of the device.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is readable for its length, which is passed.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Frames the kernel dropped for this socket since the last call (its
    /// receive buffer was full): PACKET_STATISTICS, which resets on reading.
    pub fn take_drops(&self) -> u64 {
        let mut st = [0u32; 2]; // struct tpacket_stats { tp_packets, tp_drops }
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` is writable for `len` bytes, and `len` is ours.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                st.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r < 0 {
            0
        } else {
            u64::from(st[1])
        }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Waits up to `timeout` for any of `fds` to be readable; sets `ready[i]`.
/// Ok(false) on a timeout or a signal (the caller looks at [`stop_requested`]).
pub fn poll_readable(fds: &[RawFd], timeout: Duration, ready: &mut [bool]) -> io::Result<bool> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `p` holds `p.len()` pollfds, `ts` a valid timespec; no signal
    // mask is passed.
    let r = unsafe {
        libc::ppoll(
            p.as_mut_ptr(),
            p.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    for (i, q) in p.iter().enumerate() {
        ready[i] = q.revents & (libc::POLLIN | libc::POLLERR) != 0;
    }
    Ok(r > 0)
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGTERM and SIGINT set a flag ([`stop_requested`]) instead of killing.
pub fn install_stop_handler() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is
        // async-signal-safe.
        unsafe {
            libc::signal(sig, on_stop as *const () as libc::sighandler_t);
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
