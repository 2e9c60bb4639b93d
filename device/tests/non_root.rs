//! Issue 17: a user without root who asks for what needs root (a TAP) gets
//! one line saying so and what to do, not a bare "Operation not permitted".
//! Run as root, the test drops to uid/gid 65534 with setpriv(1).

use std::process::Command;

#[test]
fn a_tap_without_root_is_one_line_naming_root_and_the_way_around_it() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("a.sock");
    let vhca = env!("CARGO_BIN_EXE_vhca");
    let args = [
        "--socket",
        sock.to_str().unwrap(),
        "--tap",
        "vhcanr0",
        "--mac",
        "52:54:00:00:00:01",
    ];
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", vhca]);
        c
    } else {
        Command::new(vhca)
    };
    let out = match cmd.args(args).output() {
        Ok(o) => o,
        Err(e) if root => panic!("setpriv (util-linux) is needed to drop root: {e}"),
        Err(e) => panic!("{vhca}: {e}"),
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("vhca: TAP vhcanr0: "), "{err}");
    assert!(
        lines[0].contains("created by root (CAP_NET_ADMIN)"),
        "{err}"
    );
    assert!(
        lines[0].contains("sudo ip tuntap add vhcanr0 mode tap user"),
        "{err}"
    );
}
