//! The vfio-user message stream against the pci crate (ARCHITECTURE.md §5, §9): a
//! function shaped like the HCA (trapped BAR0 with MSI-X, BAR2 with mapped pages),
//! served by `pci::Server` on a socket in one long-lived server thread; each input
//! is one client connection that sends the VERSION handshake and then the fuzzer's
//! messages (region reads and writes, DMA map with a memfd / unmap, IRQ set,
//! reset, any other command), then hangs up. The device behind the BARs reads and
//! writes guest memory through the DMA maps, as the HCA does.
//!
//! The harness writes each message's header (ID, size), sizes each message to
//! the fixed part its command has, and clamps REGION_READ / REGION_WRITE counts
//! to 4 KiB and regions to the nine the server has: the vfio_user crate allocates
//! the client's count before the pci crate sees the access, and a message that
//! does not frame makes it take later bytes as a header whose size it allocates
//! (unbounded allocations in that crate that issue 13 lists; fuzz/README.md,
//! "Found"). Its own parsing panics on a malformed message are contained by
//! `Server::serve_one` (catch_unwind, connection dropped), so the panic hook below
//! lets those through and aborts on any other.
#![no_main]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pci::{BarSpec, Device, FunctionBuilder, Handle, Server};

const BAR_SIZE: u64 = 0x10000;
const HEADER: usize = 16;
const VERSION: u16 = 1;
const DMA_MAP: u16 = 2;
const REGION_READ: u16 = 9;
const REGION_WRITE: u16 = 10;
/// Guest memory for DMA maps: one memfd of 1 MiB.
const GUEST: u64 = 1 << 20;

/// Registers the fuzzer sees as BAR0/BAR2; a write of 8 bytes at BAR0 0x100
/// names a guest address the device then reads 64 bytes from and writes back
/// incremented (a doorbell fetch and a completion write).
struct Regs {
    regs: Vec<Vec<u8>>,
    handle: Handle,
}

impl Device for Regs {
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        let at = offset as usize;
        if let Some(r) = self.regs.get(bar).and_then(|r| r.get(at..at + data.len())) {
            data.copy_from_slice(r);
        }
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        let at = offset as usize;
        if let Some(r) = self
            .regs
            .get_mut(bar)
            .and_then(|r| r.get_mut(at..at + data.len()))
        {
            r.copy_from_slice(data);
        }
        if bar == 0 && offset == 0x100 && data.len() == 8 {
            let addr = u64::from_le_bytes(data.try_into().unwrap());
            let mut buf = [0u8; 64];
            let mem = self.handle.memory();
            if mem.read(addr, &mut buf).is_ok() {
                buf.iter_mut().for_each(|b| *b = b.wrapping_add(1));
                let _ = mem.write(addr, &buf);
                let _ = mem.fetch_add(addr & !7, 1);
            }
            let _ = self.handle.trigger(u16::from(buf[0] % 9));
        }
    }
}

struct Served {
    path: PathBuf,
    memfd: OwnedFd,
}

/// The server thread, started once per process.
fn served() -> &'static Served {
    static S: OnceLock<Served> = OnceLock::new();
    S.get_or_init(|| {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let contained = info
                .location()
                .is_some_and(|l| l.file().contains("vfio_user-"));
            if !contained {
                hook(info);
            }
        }));
        let dir = std::env::temp_dir().join(format!("vhca-fuzz-vfio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pci.sock");
        let function = FunctionBuilder::new(0x1234, 0x11c6)
            .class_code(0x0c0600)
            .bar(0, BarSpec::trapped(BAR_SIZE))
            .bar(
                2,
                BarSpec::trapped(BAR_SIZE).mmap_area(0x1000, BAR_SIZE - 0x1000),
            )
            .msix(8, 0, 0x8000, 0x9000)
            .build()
            .unwrap();
        let mut server = Server::bind(&path, function).unwrap();
        let handle = server.handle();
        std::thread::spawn(move || {
            let mut dev = Regs {
                regs: vec![vec![0; BAR_SIZE as usize]; 6],
                handle,
            };
            server.serve(&mut dev)
        });
        let memfd = memfd();
        Served { path, memfd }
    })
}

#[allow(unsafe_code)]
fn memfd() -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create takes a NUL-terminated name and flags; the result is
    // checked before it is owned.
    let fd = unsafe { libc::memfd_create(c"vhca-fuzz-guest".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: `fd` is a fresh descriptor this function owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on a descriptor we own.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), GUEST as i64) }, 0);
    fd
}

/// Sends `msg` with `fd` attached (SCM_RIGHTS), as QEMU sends DMA_MAP.
#[allow(unsafe_code)]
fn send_with_fd(s: &UnixStream, msg: &[u8], fd: &OwnedFd) -> bool {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(size_of::<i32>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: zeroed msghdr is valid; every pointer set below outlives the call.
    let mut mh: libc::msghdr = unsafe { std::mem::zeroed() };
    mh.msg_iov = &mut iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control.as_mut_ptr().cast();
    mh.msg_controllen = space as _;
    // SAFETY: `mh` has a control buffer of CMSG_SPACE(4) bytes, so the first
    // header exists and its data holds one descriptor.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&mh);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(size_of::<i32>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), fd.as_raw_fd());
    }
    // SAFETY: a valid socket and a fully initialised msghdr.
    let n = unsafe { libc::sendmsg(s.as_raw_fd(), &mh, libc::MSG_NOSIGNAL) };
    n == msg.len() as isize
}

fn header(id: u16, command: u16, size: usize, flags: u32) -> Vec<u8> {
    let mut h = Vec::with_capacity(size);
    h.extend_from_slice(&id.to_le_bytes());
    h.extend_from_slice(&command.to_le_bytes());
    h.extend_from_slice(&(size as u32).to_le_bytes());
    h.extend_from_slice(&flags.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h
}

fn version() -> Vec<u8> {
    let caps = b"{\"capabilities\":{\"max_msg_fds\":16,\"max_data_xfer_size\":1048576}}\0";
    let mut m = header(0, VERSION, HEADER + 4 + caps.len(), 0);
    m.extend_from_slice(&0u16.to_le_bytes()); // major
    m.extend_from_slice(&2u16.to_le_bytes()); // minor
    m.extend_from_slice(caps);
    m
}

fuzz_target!(|data: &[u8]| {
    let s = served();
    let Ok(mut c) = UnixStream::connect(&s.path) else {
        return;
    };
    if c.write_all(&version()).is_err() {
        return;
    }
    // Records: command u16, flags u8 (bit 0: NO_REPLY), len u16, payload.
    let mut rest = data;
    let mut id = 1u16;
    while rest.len() >= 5 && id < 32 {
        let command = u16::from_le_bytes([rest[0], rest[1]]) % 16;
        let flags = if rest[2] & 1 != 0 { 2 } else { 0 }; // NoReply
        let len = usize::from(u16::from_le_bytes([rest[3], rest[4]])).min(rest.len() - 5);
        let mut payload = rest[5..5 + len].to_vec();
        rest = &rest[5 + len..];
        // Each message is as long as the fixed part the crate reads for its
        // command, so that one message cannot swallow the next (see above).
        // Commands the crate does not support (GET_REGION_IO_FDS, DMA_READ/WRITE,
        // DIRTY_PAGES, unknown) are refused before their payload is read: they
        // go without one.
        let fixed = match command {
            DMA_MAP | 5 => 32,
            3 => 24,
            8 => 20,
            4 | 7 | REGION_READ | REGION_WRITE => 16,
            VERSION => 4,
            _ => 0,
        };
        if fixed == 0 && command != 13 {
            payload.clear();
        } else if payload.len() < fixed || !matches!(command, REGION_WRITE | VERSION) {
            payload.resize(fixed, 0);
        }
        if matches!(command, REGION_READ | REGION_WRITE) {
            // struct vfio_user_region_access: offset u64, region u32, count u32;
            // a write carries `count` bytes after it.
            // A region past the nine the server has makes the crate refuse the
            // write before it reads its data, which then parses as the next
            // header (a client-chosen size the crate allocates): keep the
            // region in range, the pci crate still sees every one of them.
            let region = u32::from_le_bytes(payload[8..12].try_into().unwrap()) % 9;
            payload[8..12].copy_from_slice(&region.to_le_bytes());
            let mut count = u32::from_le_bytes(payload[12..16].try_into().unwrap()) % 4097;
            if command == REGION_WRITE {
                count = count.min(payload.len() as u32 - 16);
                payload.truncate(16 + count as usize);
            } else {
                payload.truncate(16);
            }
            payload[12..16].copy_from_slice(&count.to_le_bytes());
        }
        if command == VERSION {
            // The version string must be NUL-terminated JSON; the crate unwraps
            // that (contained, see above), the pci crate never sees it.
            payload.push(0);
        }
        let mut m = header(id, command, HEADER + payload.len(), flags);
        m.extend_from_slice(&payload);
        id += 1;
        let ok = if command == DMA_MAP {
            send_with_fd(&c, &m, &s.memfd)
        } else {
            c.write_all(&m).is_ok()
        };
        if !ok {
            break;
        }
    }
    // Hang up and drain the replies: the server has finished with this client
    // when it closes its end.
    let _ = c.shutdown(Shutdown::Write);
    let mut sink = Vec::new();
    let _ = c.read_to_end(&mut sink);
});
