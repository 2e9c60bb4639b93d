//! The few Linux calls a TAP device needs that std does not offer: the TUN ioctls
//! (`linux/if_tun.h`) and `fcntl(F_SETFL, O_NONBLOCK)`. Each `unsafe` block is one
//! system call on a descriptor we own, with arguments whose layout is fixed by the
//! kernel ABI; everything above this file is safe code.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::raw::{c_int, c_short, c_uint, c_ulong};

use vmm_sys_util::ioctl::{ioctl_with_mut_ref, ioctl_with_ref, ioctl_with_val};

/// `_IOW('T', 202, int)`: attach the descriptor to a named TUN/TAP interface.
const TUNSETIFF: c_ulong = 0x4004_54ca;
/// `_IOW('T', 208, unsigned int)`: the offloads the reader accepts (TUN_F_*).
const TUNSETOFFLOAD: c_ulong = 0x4004_54d0;
/// `_IOW('T', 216, int)`: the length of the virtio-net header before each frame.
const TUNSETVNETHDRSZ: c_ulong = 0x4004_54d8;

/// TUNSETIFF flags: a TAP (Ethernet frames), no packet-info prefix, a
/// virtio_net_hdr before every frame.
const IFF_TAP: c_short = 0x0002;
const IFF_NO_PI: c_short = 0x1000;
const IFF_VNET_HDR: c_short = 0x4000;

/// TUNSETOFFLOAD bits (`linux/if_tun.h`): what the kernel may hand us in a
/// frame's virtio_net_hdr (a partial checksum, a TCP GSO super-frame).
pub const TUN_F_CSUM: c_uint = 0x01;
pub const TUN_F_TSO4: c_uint = 0x02;
pub const TUN_F_TSO6: c_uint = 0x04;
pub const TUN_F_TSO_ECN: c_uint = 0x08;
/// UDP segmentation offload (Linux 6.2+): UDP GSO super-frames may be read
/// whole (`VIRTIO_NET_HDR_GSO_UDP_L4`); the kernel takes them only together and
/// with TUN_F_CSUM.
pub const TUN_F_USO4: c_uint = 0x20;
pub const TUN_F_USO6: c_uint = 0x40;

/// Longest interface name with its NUL (`IFNAMSIZ`).
pub const IFNAMSIZ: usize = 16;

/// `struct ifreq` as TUNSETIFF reads and writes it: the name, then the flags in
/// the union, padded to the union's 24 bytes (40 in all on every Linux ABI).
#[repr(C)]
struct IfReq {
    name: [u8; IFNAMSIZ],
    flags: c_short,
    _pad: [u8; 22],
}

fn check(ret: c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// TUNSETIFF on a fresh `/dev/net/tun` descriptor: attaches it to TAP `name`
/// (created if it does not exist) with vnet headers. Returns the name the
/// kernel used.
pub fn set_iff_tap<F: AsRawFd>(fd: &F, name: &str) -> io::Result<String> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name must be 1 to 15 bytes without NUL",
        ));
    }
    let mut req = IfReq {
        name: [0; IFNAMSIZ],
        flags: IFF_TAP | IFF_NO_PI | IFF_VNET_HDR,
        _pad: [0; 22],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq`; `req` is a live,
    // exclusively borrowed value of that layout (40 bytes) for the whole call.
    check(unsafe { ioctl_with_mut_ref(fd, TUNSETIFF, &mut req) })?;
    let end = req.name.iter().position(|&b| b == 0).unwrap_or(IFNAMSIZ);
    Ok(String::from_utf8_lossy(&req.name[..end]).into_owned())
}

/// TUNSETVNETHDRSZ: every frame read or written carries a header of `len` bytes.
pub fn set_vnet_hdr_len<F: AsRawFd>(fd: &F, len: c_int) -> io::Result<()> {
    // SAFETY: TUNSETVNETHDRSZ reads one `int` through the pointer; `len` lives on
    // the stack for the whole call and is not written.
    check(unsafe { ioctl_with_ref(fd, TUNSETVNETHDRSZ, &len) })
}

/// TUNSETOFFLOAD: the TUN_F_* offloads frames read from the TAP may use.
pub fn set_offload<F: AsRawFd>(fd: &F, flags: c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
    check(unsafe { ioctl_with_val(fd, TUNSETOFFLOAD, c_ulong::from(flags)) })
}

/// Makes reads and writes on `fd` return `WouldBlock` instead of sleeping.
pub fn set_nonblocking<F: AsFd>(fd: &F) -> io::Result<()> {
    let raw = fd.as_fd().as_raw_fd();
    // SAFETY: fcntl(F_GETFL) on a descriptor the borrow keeps open; no memory is
    // passed.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    check(flags)?;
    // SAFETY: as above, with an integer argument.
    check(unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) })
}
