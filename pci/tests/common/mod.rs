//! Shared test scaffolding: a function served on a socket in a tempdir by a
//! server thread, a recording [`Device`], the vfio-user crate's `Client`
//! playing QEMU, and a raw client for messages the `Client` cannot send.

#![allow(dead_code)] // each test binary uses a different part

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pci::vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX;
use pci::vfio_user::Client;
use pci::{BarSpec, Device, FunctionBuilder, Handle, Server, Stopper};

pub const CONFIG: u32 = VFIO_PCI_CONFIG_REGION_INDEX;
pub const BAR_SIZE: u64 = 0x10000;
pub const MSIX_TABLE: u64 = 0x8000;
pub const MSIX_PBA: u64 = 0x9000;
pub const VECTORS: u16 = 8;

/// The HCA's shape: BAR0 trapped with MSI-X in its upper half, BAR2 with a
/// trapped first page and mapped doorbell pages after it.
pub fn hca_like() -> FunctionBuilder {
    FunctionBuilder::new(0x1234, 0x11c6)
        .subsystem(0x1234, 0x0001)
        .class_code(0x0c0600)
        .revision(2)
        .bar(0, BarSpec::trapped(BAR_SIZE))
        .bar(
            2,
            BarSpec::trapped(BAR_SIZE).mmap_area(0x1000, BAR_SIZE - 0x1000),
        )
        .msix(VECTORS, 0, MSIX_TABLE, MSIX_PBA)
}

/// What the recording device saw.
#[derive(Debug, Default)]
pub struct Events {
    pub reads: Vec<(usize, u64, usize)>,
    pub writes: Vec<(usize, u64, Vec<u8>)>,
    pub resets: u32,
    pub disconnects: u32,
}

/// A device whose trapped BARs are plain register files, recording every
/// call.
pub struct Recorder {
    regs: Vec<Vec<u8>>,
    events: Arc<Mutex<Events>>,
}

impl Recorder {
    pub fn new(events: Arc<Mutex<Events>>) -> Recorder {
        Recorder {
            regs: vec![vec![0; BAR_SIZE as usize]; 6],
            events,
        }
    }
}

impl Device for Recorder {
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        let at = offset as usize;
        data.copy_from_slice(&self.regs[bar][at..at + data.len()]);
        self.events
            .lock()
            .unwrap()
            .reads
            .push((bar, offset, data.len()));
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        let at = offset as usize;
        self.regs[bar][at..at + data.len()].copy_from_slice(data);
        self.events
            .lock()
            .unwrap()
            .writes
            .push((bar, offset, data.to_vec()));
    }

    fn reset(&mut self) {
        self.events.lock().unwrap().resets += 1;
    }

    fn disconnected(&mut self) {
        self.events.lock().unwrap().disconnects += 1;
    }
}

/// A server thread serving one function on a socket in a tempdir.
pub struct Harness {
    pub path: PathBuf,
    pub handle: Handle,
    pub events: Arc<Mutex<Events>>,
    stopper: Stopper,
    thread: Option<JoinHandle<Result<(), pci::ServeError>>>,
    _dir: tempfile::TempDir,
}

pub fn start(builder: FunctionBuilder) -> Harness {
    let _ = env_logger::builder().is_test(true).try_init();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pci.sock");
    let mut server = Server::bind(&path, builder.build().unwrap()).unwrap();
    let handle = server.handle();
    let stopper = server.stopper();
    let events = Arc::new(Mutex::new(Events::default()));
    let mut device = Recorder::new(Arc::clone(&events));
    let thread = std::thread::spawn(move || server.serve(&mut device));
    Harness {
        path,
        handle,
        events,
        stopper,
        thread: Some(thread),
        _dir: dir,
    }
}

impl Harness {
    pub fn connect(&self) -> Client {
        Client::new(&self.path).unwrap()
    }

    /// Waits up to 5 s for the device to have seen `what`.
    pub fn wait_for(&self, what: impl Fn(&Events) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !what(&self.events.lock().unwrap()) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the device"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops the server (no client may be connected) and returns what
    /// `serve` returned.
    pub fn stop(mut self) -> Result<(), pci::ServeError> {
        self.stopper.stop();
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stopper.stop();
    }
}

pub fn cfg_read(c: &mut Client, offset: u64, len: usize) -> Vec<u8> {
    let mut data = vec![0; len];
    c.region_read(CONFIG, offset, &mut data).unwrap();
    data
}

pub fn cfg_u8(c: &mut Client, offset: u64) -> u8 {
    cfg_read(c, offset, 1)[0]
}

pub fn cfg_u16(c: &mut Client, offset: u64) -> u16 {
    u16::from_le_bytes(cfg_read(c, offset, 2).try_into().unwrap())
}

pub fn cfg_u32(c: &mut Client, offset: u64) -> u32 {
    u32::from_le_bytes(cfg_read(c, offset, 4).try_into().unwrap())
}

pub fn cfg_write(c: &mut Client, offset: u64, data: &[u8]) {
    c.region_write(CONFIG, offset, data).unwrap();
}

/// The capability list as (ID, offset), walked as a guest walks it.
pub fn capabilities(c: &mut Client) -> Vec<(u8, u64)> {
    let mut found = Vec::new();
    let mut at = u64::from(cfg_u8(c, 0x34));
    // 48 capabilities fill 0x40..0x100: more means a loop.
    while at != 0 && found.len() < 48 {
        found.push((cfg_u8(c, at), at));
        at = u64::from(cfg_u8(c, at + 1));
    }
    found
}

pub fn capability(c: &mut Client, id: u8) -> u64 {
    capabilities(c)
        .into_iter()
        .find(|&(i, _)| i == id)
        .map(|(_, at)| at)
        .expect("capability present")
}

/// Sets the MSI-X Message Control bits (enable 0x8000, function mask 0x4000).
pub fn msix_control(c: &mut Client, bits: u16) {
    let at = capability(c, 0x11);
    cfg_write(c, at + 2, &bits.to_le_bytes());
}

pub fn memfd(size: u64) -> File {
    // Sealable, as QEMU's memory-backend-memfd: the server seals it against
    // shrinking and refuses a file it cannot seal.
    // SAFETY: the name is a valid C string; memfd_create returns a new
    // descriptor or -1.
    let fd = unsafe {
        libc::memfd_create(
            c"guest-ram".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0);
    // SAFETY: the descriptor was just created and has no other owner.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.set_len(size).unwrap();
    file
}

pub fn eventfd() -> File {
    // SAFETY: eventfd takes no pointers and returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: the descriptor was just created and has no other owner.
    File::from(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads and clears an eventfd's counter; 0 if it was not signalled.
pub fn take(eventfd: &File) -> u64 {
    let mut buf = [0u8; 8];
    match (&*eventfd).read(&mut buf) {
        Ok(8) => u64::from_ne_bytes(buf),
        _ => 0,
    }
}

/// A vfio-user client speaking raw messages, for what `Client` cannot send
/// (a DMA map without an fd, a malformed VERSION).
pub struct RawClient {
    pub stream: UnixStream,
    next_id: u16,
}

pub const VERSION: u16 = 1;
pub const DMA_MAP: u16 = 2;
pub const REGION_READ: u16 = 9;
pub const REGION_WRITE: u16 = 10;
pub const REPLY: u32 = 1;
pub const ERROR: u32 = 1 << 5;

impl RawClient {
    pub fn connect(path: &Path) -> RawClient {
        RawClient {
            stream: UnixStream::connect(path).unwrap(),
            next_id: 0,
        }
    }

    /// Sends header + body; returns the message ID.
    pub fn send(&mut self, command: u16, body: &[u8]) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut msg = Vec::new();
        msg.extend_from_slice(&id.to_le_bytes());
        msg.extend_from_slice(&command.to_le_bytes());
        msg.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes()); // flags: command
        msg.extend_from_slice(&0u32.to_le_bytes()); // error
        msg.extend_from_slice(body);
        self.stream.write_all(&msg).unwrap();
        id
    }

    /// Reads one reply: (flags, error, body).
    pub fn recv(&mut self) -> (u32, u32, Vec<u8>) {
        let mut header = [0u8; 16];
        self.stream.read_exact(&mut header).unwrap();
        let size = u32::from_le_bytes(header[4..8].try_into().unwrap()) as usize;
        let flags = u32::from_le_bytes(header[8..12].try_into().unwrap());
        let error = u32::from_le_bytes(header[12..16].try_into().unwrap());
        let mut body = vec![0; size - 16];
        self.stream.read_exact(&mut body).unwrap();
        (flags, error, body)
    }

    /// VERSION 0.1 with `json`, NUL-terminated or not.
    pub fn version(&mut self, json: &str, nul: bool) {
        let mut body = Vec::new();
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(json.as_bytes());
        if nul {
            body.push(0);
        }
        self.send(VERSION, &body);
    }

    /// DMA_MAP read-write of `size` bytes at `iova`, with no fd attached.
    pub fn dma_map_without_fd(&mut self, iova: u64, size: u64) {
        let mut body = Vec::new();
        body.extend_from_slice(&32u32.to_le_bytes()); // argsz
        body.extend_from_slice(&3u32.to_le_bytes()); // READ | WRITE
        body.extend_from_slice(&0u64.to_le_bytes()); // offset
        body.extend_from_slice(&iova.to_le_bytes());
        body.extend_from_slice(&size.to_le_bytes());
        self.send(DMA_MAP, &body);
    }

    pub fn raw_fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }
}

/// `file`'s first `len` bytes mapped into this process, as QEMU maps guest
/// RAM: `shared` as with `share=on`, else private (copy-on-write).
pub struct ClientMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl ClientMap {
    pub fn new(file: &File, len: usize, shared: bool) -> ClientMap {
        use std::os::fd::AsRawFd;
        let flags = if shared {
            libc::MAP_SHARED
        } else {
            libc::MAP_PRIVATE
        };
        // SAFETY: a new mapping at an address the kernel picks, of a file
        // this process holds open; nothing else in the process is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        ClientMap { ptr, len }
    }
}

impl Drop for ClientMap {
    fn drop(&mut self) {
        // SAFETY: the mapping was created by `new` with this length and is
        // unmapped once; nothing holds a reference into it.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
