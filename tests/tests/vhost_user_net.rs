//! The RoCE port's vhost-user-net backend against a hostile client (issue 25
//! item 2): a `vhca` in RoCE mode (`--tap`, `--vhost-user-net`) on a TAP of its
//! own, and the `vhost` crate's frontend playing QEMU. Guest memory the backend
//! cannot seal against shrinking, or that is shorter than the client declares,
//! is refused as on the vfio-user path (no SIGBUS); a panic in the backend's
//! worker costs its connection only; the HCA on the vfio-user socket serves on
//! throughout.
//!
//! A TAP needs CAP_NET_ADMIN: without it these tests say SKIP and pass, unless
//! `VHCA_REQUIRE_TAP=1`.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use vhca_tests::sys::{memfd, SharedMap};
use vhca_tests::vhost_net::{post_tx_frame, NetClient};
use vhca_tests::{Build, Guest, GuestOptions, Hca};

const MIB: u64 = 1 << 20;
/// Where the TX ring and its frame go: past the first MiB, so that a file cut
/// to 1 MiB no longer backs them.
const RING: u64 = 8 * MIB;
const FRAME: u64 = RING + 4096;
const WAIT: Duration = Duration::from_secs(10);

/// A `vhca` in RoCE mode; killed when dropped.
struct RoceVhca {
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for RoceVhca {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RoceVhca {
    /// Starts one with `env`; `None` (after a SKIP line) without the right to
    /// make a TAP.
    fn spawn(env: &[(&str, &str)]) -> Option<RoceVhca> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let tap = format!(
            "vhu{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let dir = tempfile::tempdir().unwrap();
        let stderr = File::create(dir.path().join("stderr")).unwrap();
        let mut cmd = Command::new(vhca_tests::process::vhca_binary(Build::Debug));
        cmd.arg("--socket")
            .arg(dir.path().join("hca.sock"))
            .args(["--tap", &tap, "--mac", "52:54:00:00:00:01"])
            .arg("--vhost-user-net")
            .arg(dir.path().join("net.sock"))
            .arg("--counters-file")
            .arg(dir.path().join("counters.json"))
            .args(["--log", "info"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut v = RoceVhca {
            child: cmd.spawn().expect("spawn vhca"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !(v.path("hca.sock").exists() && v.path("net.sock").exists()) {
            if let Some(status) = v.child.try_wait().unwrap() {
                let log = v.stderr();
                let required = std::env::var_os("VHCA_REQUIRE_TAP").is_some_and(|v| v == "1");
                if !required && (log.contains("Operation not permitted") || log.contains("EPERM")) {
                    println!("SKIP: no TAP without CAP_NET_ADMIN: {log}");
                    return None;
                }
                panic!("vhca exited ({status}) before serving: {log}");
            }
            assert!(
                Instant::now() < deadline,
                "vhca not serving: {}",
                v.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(v)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.path("stderr")).unwrap_or_default()
    }

    /// Panics (with the log) if the process has exited.
    fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("vhca died ({status}); stderr:\n{}", self.stderr());
        }
    }

    /// The backend's counter `name` once it satisfies `ok`, the process
    /// staying alive meanwhile.
    fn net_counter(&mut self, name: &str, ok: impl Fn(u64) -> bool) -> u64 {
        let deadline = Instant::now() + WAIT;
        loop {
            self.assert_alive();
            let got = std::fs::read_to_string(self.path("counters.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v["vhost_user_net"][name].as_u64());
            if let Some(n) = got.filter(|&n| ok(n)) {
                return n;
            }
            assert!(
                Instant::now() < deadline,
                "vhost_user_net.{name} = {got:?} after {WAIT:?}; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The HCA on the vfio-user socket comes up and answers a command.
    fn assert_hca_serves(&mut self) {
        let g = Guest::connect(&self.path("hca.sock"), GuestOptions::default())
            .expect("vfio-user connect");
        let mut h = Hca::bring_up(g).expect("bring-up");
        h.query_port(1).expect("QUERY_PORT");
        self.assert_alive();
    }

    /// Frames the backend took from guest TX rings: sent, or refused by
    /// the TAP (either way read from guest memory).
    fn frames_taken(&mut self) -> u64 {
        self.net_counter("tx", |_| true) + self.net_counter("dropped", |_| true)
    }

    /// Waits until more than `before` frames were taken, the process alive.
    fn wait_taken(&mut self, before: u64) {
        let deadline = Instant::now() + WAIT;
        while self.frames_taken() <= before {
            assert!(Instant::now() < deadline, "{}", self.stderr());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A client with good memory sends one frame, which the backend takes.
    fn assert_net_serves(&mut self) {
        let before = self.frames_taken();
        let file = memory_with_a_frame(c"vhost-ok");
        let mut c = connect(&net_sock(self));
        c.set_memory(&file, 16 * MIB).unwrap();
        c.start_tx(RING).unwrap();
        c.kick_tx().unwrap();
        self.wait_taken(before);
    }
}

/// 16 MiB of sealable memfd with one TX frame posted at [`RING`].
fn memory_with_a_frame(name: &std::ffi::CStr) -> File {
    let file = memfd(name, 16 * MIB).unwrap();
    let mem = SharedMap::new(&file, 0, (16 * MIB) as usize).unwrap();
    post_tx_frame(&mem, RING, FRAME);
    file
}

/// Waits until `client`'s connection is gone (a request fails), at most WAIT.
fn assert_dropped(c: &mut NetClient, what: &str) {
    let deadline = Instant::now() + WAIT;
    while c.ping().is_ok() {
        assert!(Instant::now() < deadline, "{what}: the connection stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn net_sock(v: &RoceVhca) -> PathBuf {
    v.path("net.sock")
}

fn connect(p: &Path) -> NetClient {
    NetClient::connect(p, WAIT).expect("vhost-user connect")
}

/// Issue 25 item 2: a memory table that declares 16 MiB backed by a 1 MiB
/// memfd is refused (counted, logged, the connection dropped) before any
/// descriptor is read from it; before, the first kick read the ring past the
/// end of the file and SIGBUS killed the whole vhca, its HCA with it.
#[test]
fn vhost_user_net_a_region_longer_than_its_memfd_is_refused_and_the_hca_serves_on() {
    let Some(mut v) = RoceVhca::spawn(&[]) else {
        return;
    };
    let short = memfd(c"vhost-short", MIB).unwrap();
    let mut c = connect(&net_sock(&v));
    // Set up as if accepted: on a backend that took the table, the kick
    // reads the ring at 8 MiB, past the file's end.
    let _ = c.set_memory(&short, 16 * MIB);
    let _ = c.start_tx(RING);
    let _ = c.kick_tx();
    std::thread::sleep(Duration::from_millis(300));
    v.assert_alive();
    assert_dropped(&mut c, "a memory table longer than its file");
    assert_eq!(v.net_counter("mem_refused", |n| n >= 1), 1);
    let log = v.stderr();
    assert!(
        log.contains("vhost-user memory table refused") && log.contains("past the end of the file"),
        "{log}"
    );
    v.assert_hca_serves();
    v.assert_net_serves();
    v.assert_alive();
}

/// Issue 25 item 2: memory the backend took is sealed against shrinking, as
/// on the vfio-user path: the client's later truncation fails, and the
/// backend reads the ring where the file used to end without a SIGBUS.
#[test]
fn vhost_user_net_a_memfd_truncated_after_the_table_cannot_shrink_and_the_hca_serves_on() {
    let Some(mut v) = RoceVhca::spawn(&[]) else {
        return;
    };
    let file = memory_with_a_frame(c"vhost-trunc");
    let mut c = connect(&net_sock(&v));
    c.set_memory(&file, 16 * MIB).unwrap();
    c.ping().expect("table accepted");
    let before = v.frames_taken();
    // The client cuts its memory to 1 MiB, then sends from 8 MiB.
    let truncated = file.set_len(MIB);
    c.start_tx(RING).unwrap();
    c.kick_tx().unwrap();
    v.wait_taken(before);
    let e = truncated.expect_err("the backend sealed the memfd against shrinking");
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    v.assert_hca_serves();
    v.assert_alive();
}

/// Issue 25 item 2: a panic in the backend's worker thread (the test-only
/// `VHCA_TEST_PANIC=net:tx`, once, at the first TX kick) is contained as on
/// the device's other threads: logged as an internal error, counted, the
/// connection dropped; the process, its HCA and the next client carry on.
#[test]
fn vhost_user_net_a_panic_in_the_worker_costs_the_connection_only() {
    let Some(mut v) = RoceVhca::spawn(&[("VHCA_TEST_PANIC", "net:tx")]) else {
        return;
    };
    let file = memory_with_a_frame(c"vhost-panic");
    let mut c = connect(&net_sock(&v));
    c.set_memory(&file, 16 * MIB).unwrap();
    c.start_tx(RING).unwrap();
    c.kick_tx().unwrap();
    assert_dropped(&mut c, "after a panic in the worker");
    assert_eq!(v.net_counter("worker_panics", |n| n >= 1), 1);
    let log = v.stderr();
    assert!(
        log.contains("internal error in the vhost-user-net worker"),
        "{log}"
    );
    v.assert_hca_serves();
    v.assert_net_serves();
    v.assert_alive();
}
