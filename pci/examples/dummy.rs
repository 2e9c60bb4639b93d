//! Serves a dummy PCI function on a vfio-user socket, for booting a QEMU
//! guest against `pci` before the HCA exists:
//!
//! ```text
//! cargo run -p pci --example dummy -- /tmp/dummy.sock
//! qemu-system-x86_64 ... \
//!   -object memory-backend-memfd,id=mem,size=1G,share=on -machine q35,memory-backend=mem \
//!   -device '{"driver":"vfio-user-pci","socket":{"path":"/tmp/dummy.sock","type":"unix"}}'
//! ```
//!
//! Vendor 0x1234, device 0x11c6 (placeholders), class 0x0c0600. BAR0 is
//! 64 KiB, trapped, with MSI-X (8 vectors) at 0x8000 and its PBA at 0x9000;
//! BAR2 is 64 KiB, mapped into the guest. BAR0 registers:
//!
//! | offset | access | meaning |
//! |---|---|---|
//! | 0x00 | RO 32 | 0x44554d59 ("DUMY") |
//! | 0x08 | RW 64 | scratch |
//! | 0x10 | WO 8+ | fire the MSI-X vector written |
//! | 0x18 | RO 32 | doorbells seen by the poller (BAR2 offset 0 changes) |
//!
//! A poller thread watches BAR2's first dword and fires vector 1 when the
//! guest changes it, as the HCA will do with its doorbell pages.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pci::{BarSpec, Device, FunctionBuilder, Handle, Server};

const ID: u32 = 0x4455_4d59;

struct Dummy {
    handle: Handle,
    scratch: [u8; 8],
    doorbells: Arc<AtomicU32>,
}

impl Device for Dummy {
    fn bar_read(&mut self, bar: usize, offset: u64, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            let at = offset + i as u64;
            *byte = match (bar, at) {
                (0, 0x00..=0x03) => ID.to_le_bytes()[at as usize],
                (0, 0x08..=0x0f) => self.scratch[at as usize - 0x08],
                (0, 0x18..=0x1b) => {
                    self.doorbells.load(Ordering::Relaxed).to_le_bytes()[at as usize - 0x18]
                }
                _ => 0,
            };
        }
    }

    fn bar_write(&mut self, bar: usize, offset: u64, data: &[u8]) {
        match (bar, offset) {
            (0, 0x10) => {
                let vector = data.first().copied().unwrap_or(0);
                let outcome = self.handle.trigger(vector.into());
                log::info!("dummy: fire vector {vector}: {outcome:?}");
            }
            (0, 0x08..=0x0f) => {
                for (i, &byte) in data.iter().enumerate() {
                    if let Some(slot) = self.scratch.get_mut(offset as usize - 0x08 + i) {
                        *slot = byte;
                    }
                }
            }
            _ => log::info!("dummy: write to BAR{bar} 0x{offset:x} ignored"),
        }
    }

    fn reset(&mut self) {
        self.scratch = [0; 8];
        log::info!("dummy: reset");
    }

    fn disconnected(&mut self) {
        self.scratch = [0; 8];
        log::info!("dummy: client gone");
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: dummy SOCKET_PATH");
        std::process::exit(2);
    };

    let function = FunctionBuilder::new(0x1234, 0x11c6)
        .class_code(0x0c0600)
        .bar(0, BarSpec::trapped(0x10000))
        .bar(2, BarSpec::mapped(0x10000))
        .msix(8, 0, 0x8000, 0x9000)
        .build()?;
    let mut server = Server::bind(&path, function)?;
    let handle = server.handle();
    let doorbells = Arc::new(AtomicU32::new(0));

    // The data path: poll the mapped doorbell, interrupt on change. It
    // lives as long as the process.
    {
        let handle = handle.clone();
        let doorbells = Arc::clone(&doorbells);
        std::thread::spawn(move || {
            let bar = handle.bar_memory(2).expect("BAR2 is mapped");
            let mut last = 0;
            loop {
                let now = bar.load_u32(0).unwrap_or(0);
                if now != last {
                    last = now;
                    doorbells.fetch_add(1, Ordering::Relaxed);
                    let outcome = handle.trigger(1);
                    log::info!("dummy: doorbell {now}: vector 1 {outcome:?}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
    }

    log::info!("dummy: serving on {}", server.path().display());
    let mut device = Dummy {
        handle,
        scratch: [0; 8],
        doorbells,
    };
    server.serve(&mut device)?;
    Ok(())
}
