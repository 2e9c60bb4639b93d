//! Issue 28 item 2: `vhca --config FILE` (the systemd unit's command line) and
//! QEMU's vhost-user backend program conventions (`--print-capabilities`,
//! `--socket-path`).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::fabric_file;
use device::cli::FabricMode;
use device::cli_config::{config_tokens, parse, ArgsError, Invocation, CAPABILITIES_JSON};

/// A config file in `dir` with `body`; returns its path.
fn config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("vhca.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// `vhca ARGS` through the device's parser and `Cli::check`.
fn run(args: &[&str]) -> Result<device::cli::Config, String> {
    match parse(std::iter::once("vhca").chain(args.iter().copied())) {
        Ok(Invocation::Run(cli)) => cli.check().map_err(|e| e.to_string()),
        Ok(Invocation::PrintCapabilities) => Err("capabilities".into()),
        Err(ArgsError::Config(m)) => Err(m),
        Err(ArgsError::Clap { error, .. }) => Err(error.to_string()),
    }
}

#[test]
fn config_file_gives_the_options_and_the_command_line_overrides_them() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let c = config(
        d.path(),
        &format!(
            "socket = {:?}\nfabric = {:?}\nnode = \"b\"\nbusy-poll-us = 50\nmem-budget = \"64M\"\n\
             apm-timeouts = 3\n",
            sock.to_str().unwrap(),
            f.to_str().unwrap()
        ),
    );
    let cs = c.to_str().unwrap();
    let cfg = run(&["--config", cs]).unwrap();
    assert_eq!(cfg.socket, sock);
    let FabricMode::IbUdp { node, .. } = &cfg.mode else {
        panic!("the file's fabric gives the InfiniBand mode");
    };
    assert_eq!(node.lid, 2);
    assert_eq!(cfg.busy_poll, std::time::Duration::from_micros(50));
    assert_eq!((cfg.mem_budget, cfg.apm_timeouts), (64 << 20, 3));

    // The command line wins over the file, in either order and in --k=v form.
    let cfg = run(&["--busy-poll-us", "7", "--config", cs, "--node=a"]).unwrap();
    assert_eq!(cfg.busy_poll, std::time::Duration::from_micros(7));
    let FabricMode::IbUdp { node, .. } = &cfg.mode else {
        panic!("InfiniBand mode");
    };
    assert_eq!(node.lid, 1);
    // A value of the file that is out of range is the option's usual error.
    let bad = config(
        d.path(),
        &format!("socket = {:?}\nbusy-poll-us = 2000000\n", sock),
    );
    let e = run(&[
        "--config",
        bad.to_str().unwrap(),
        "--tap",
        "t0",
        "--mac",
        "52:54:00:00:00:01",
    ])
    .unwrap_err();
    assert!(
        e.contains("'2000000'") && e.contains("--busy-poll-us"),
        "{e}"
    );
}

#[test]
fn config_file_options_conflicting_with_the_command_line_give_way() {
    // The file says InfiniBand (fabric, node); the command line says RoCE:
    // --tap conflicts with --fabric and --node, so those of the file drop out
    // instead of making the command line an error.
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let c = config(
        d.path(),
        &format!("socket = {sock:?}\nfabric = {f:?}\nnode = \"a\"\n"),
    );
    let cfg = run(&[
        "--config",
        c.to_str().unwrap(),
        "--tap",
        "vhca0",
        "--mac",
        "52:54:00:12:34:56",
    ])
    .unwrap();
    assert!(
        matches!(cfg.mode, FabricMode::Roce { .. }),
        "{:?}",
        cfg.mode
    );
    // Without the command line's --tap, the file's mode stands.
    let cfg = run(&["--config", c.to_str().unwrap()]).unwrap();
    assert!(matches!(cfg.mode, FabricMode::IbUdp { .. }));
}

#[test]
fn config_file_problems_are_one_line_naming_the_file_and_key() {
    let d = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str]); 6] = [
        ("sockt = \"/tmp/a.sock\"\n", &["unknown key `sockt`"]),
        (
            "busy_poll_us = 5\n",
            &["unknown key `busy_poll_us`", "did you mean busy-poll-us?"],
        ),
        ("config = \"other.toml\"\n", &["unknown key `config`"]),
        ("help = true\n", &["unknown key `help`"]),
        ("node = [\"a\", \"b\"]\n", &["`node` takes one value"]),
        ("socket = \"/tmp/a.sock\"\nnode = \n", &["line 2"]),
    ];
    for (body, wants) in cases {
        let c = config(d.path(), body);
        let e = run(&["--config", c.to_str().unwrap()]).unwrap_err();
        assert!(!e.trim_end().contains('\n'), "one line: {e:?}");
        assert!(e.contains(c.to_str().unwrap()), "names the file: {e}");
        for w in wants {
            assert!(e.contains(w), "{body:?}: {e}");
        }
    }
    let missing = d.path().join("missing.toml");
    let e = run(&["--config", missing.to_str().unwrap()]).unwrap_err();
    assert!(e.contains("missing.toml"), "{e}");
    let c = config(d.path(), "");
    let e = run(&[
        "--config",
        c.to_str().unwrap(),
        "--config",
        c.to_str().unwrap(),
    ])
    .unwrap_err();
    assert!(e.contains("--config given twice"), "{e}");
}

#[test]
fn socket_path_is_the_conventional_name_of_vhost_user_net() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("a.sock");
    let net = d.path().join("net.sock");
    let (s, n) = (sock.to_str().unwrap(), net.to_str().unwrap());
    let roce = ["--tap", "vhca0", "--mac", "52:54:00:12:34:56"];
    let mut args = vec!["--socket", s, "--socket-path", n];
    args.extend(roce);
    let cfg = run(&args).unwrap();
    let FabricMode::Roce { vhost_user_net, .. } = &cfg.mode else {
        panic!("RoCE mode");
    };
    assert_eq!(vhost_user_net.as_deref(), Some(net.as_path()));
    // Not both names at once, and only in RoCE mode (as --vhost-user-net).
    let mut both = args.clone();
    both.extend(["--vhost-user-net", n]);
    let e = run(&both).unwrap_err();
    assert!(
        e.contains("--socket-path") && e.contains("--vhost-user-net"),
        "{e}"
    );
    let e = run(&["--socket", s, "--socket-path", n]).unwrap_err();
    assert!(e.contains("--tap"), "{e}");
}

#[test]
fn print_capabilities_prints_the_vhost_user_json_and_ignores_the_rest() {
    // vhost-user.rst, "Backend program conventions": output the capabilities
    // as JSON and exit successfully; other options and arguments are ignored
    // (here: no --socket, an unknown option, a missing config file).
    let out = Command::new(env!("CARGO_BIN_EXE_vhca"))
        .args([
            "--no-such-option",
            "--config",
            "/nonexistent/vhca.toml",
            "--print-capabilities",
        ])
        .output()
        .expect("run vhca");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim_end(), CAPABILITIES_JSON);
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    // VHostUserBackendCapabilities: the base member `type`, a
    // VHostUserBackendType; `net` has no further members in the schema.
    assert_eq!(v, serde_json::json!({"type": "net"}));
    // After `--` it is an argument, not the option.
    let out = Command::new(env!("CARGO_BIN_EXE_vhca"))
        .args(["--", "--print-capabilities"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn the_vhca_binary_reads_its_config_file_and_names_it_in_errors() {
    // `vhca --config FILE` as the unit runs it: a value of the file clap
    // rejects is clap's error plus a note naming the file.
    let d = tempfile::tempdir().unwrap();
    let c = config(d.path(), "socket = \"/tmp/x.sock\"\napm-timeouts = 99\n");
    let out = Command::new(env!("CARGO_BIN_EXE_vhca"))
        .args(["--config", c.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--apm-timeouts"), "{err}");
    assert!(
        err.contains(&format!("with the options of --config {}", c.display())),
        "{err}"
    );
}

fn packaging(file: &str) -> (PathBuf, String) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packaging")
        .join(file);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p, text)
}

#[test]
fn the_packaged_unit_config_and_vhost_user_description_agree_with_vhca() {
    // The unit runs vhca on /etc/vhca/NAME.toml and gives it /run/vhca/NAME,
    // where the example config puts the sockets.
    let (_, unit) = packaging("vhca@.service");
    let lines: Vec<&str> = unit.lines().collect();
    assert!(lines.contains(&"ExecStart=/usr/bin/vhca --config /etc/vhca/%i.toml"));
    assert!(lines.contains(&"RuntimeDirectory=vhca/%i"));
    // Every key of the example, the commented ones too, is a vhca option.
    let (path, text) = packaging("example.toml");
    let tokens = config_tokens(&path, &text, &[]).unwrap();
    assert!(tokens.contains(&"--socket=/run/vhca/example/vfio-user.sock".to_owned()));
    let uncommented: Vec<&str> = text
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(r) if r.starts_with(|c: char| c.is_ascii_lowercase()) && r.contains(" = ") => r,
            _ => l,
        })
        .collect();
    assert!(uncommented.len() > 5);
    let all = config_tokens(&path, &uncommented.join("\n"), &[]).unwrap();
    for key in [
        "--tap=",
        "--mac=",
        "--vhost-user-net=/run/vhca/example/",
        "--counters-every=",
    ] {
        assert!(all.iter().any(|t| t.starts_with(key)), "{key} in {all:?}");
    }
    // QEMU's description names the binary the package installs and the type
    // --print-capabilities prints.
    let (_, json) = packaging("50-vhca-net.json");
    let desc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let caps: serde_json::Value = serde_json::from_str(CAPABILITIES_JSON).unwrap();
    assert_eq!(desc["type"], caps["type"]);
    assert_eq!(desc["binary"], "/usr/bin/vhca");
    assert!(desc["description"].is_string());
}
