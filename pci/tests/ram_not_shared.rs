//! Issue 17: guest RAM QEMU hands over without a file descriptor (no memory
//! backend, so nothing the device can map) is one error naming `share=on`,
//! once per client; ROMs without an fd are not.

mod common;

use std::sync::Mutex;

use common::*;

/// The log records of this test binary (its only test installs it first).
static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Recorder;

impl log::Log for Recorder {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if let Ok(mut v) = RECORDS.lock() {
            v.push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

fn errors_naming_share_on() -> usize {
    RECORDS
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| *l == log::Level::Error && m.contains("share=on"))
        .count()
}

fn map_without_fd(raw: &mut RawClient, iova: u64, size: u64) {
    raw.dma_map_without_fd(iova, size);
    let (flags, error, _) = raw.recv();
    assert_eq!(flags & (REPLY | ERROR), REPLY, "accepted, error {error}");
}

#[test]
fn guest_ram_without_an_fd_is_one_error_naming_share_on_per_client() {
    log::set_logger(&Recorder).expect("the first logger of this binary");
    log::set_max_level(log::LevelFilter::Debug);
    let h = start(hca_like());
    let mut raw = RawClient::connect(&h.path);
    raw.version(r#"{"capabilities":{"max_msg_fds":8}}"#, true);
    let (flags, _, _) = raw.recv();
    assert_eq!(flags & ERROR, 0);

    // An option ROM: no fd, as with share=on too.
    map_without_fd(&mut raw, 0xc0000, 0x20000);
    assert_eq!(errors_naming_share_on(), 0);
    // RAM at guest address 0 without an fd: QEMU without a memory backend.
    map_without_fd(&mut raw, 0, 0x1000_0000);
    assert_eq!(errors_naming_share_on(), 1);
    map_without_fd(&mut raw, 0, 0xc0000);
    assert_eq!(errors_naming_share_on(), 1, "once per client");
    assert_eq!(h.handle.counters().maps_without_fd, 3);
}
