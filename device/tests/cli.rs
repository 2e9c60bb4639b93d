//! The `vhca` command line: every bad argument is one line naming the argument.

use clap::Parser;
use device::cli::{parse_mac, Cli, FabricMode};

fn fabric_file(dir: &std::path::Path) -> std::path::PathBuf {
    let p = dir.join("fabric.toml");
    std::fs::write(
        &p,
        "[[node]]\nname = \"a\"\nlid = 1\nguid = \"0x0002c90300000001\"\naddress = \"127.0.0.1:18515\"\n\n\
         [[node]]\nname = \"b\"\nlid = 2\nguid = \"0x0002c90300000002\"\naddress = \"127.0.0.1:18516\"\n",
    )
    .unwrap();
    p
}

fn check(args: &[&str]) -> Result<device::cli::Config, String> {
    let cli = Cli::try_parse_from(std::iter::once("vhca").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    cli.check().map_err(|e| e.to_string())
}

#[test]
fn cli_good_arguments_give_the_node_of_the_fabric_file() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let c = check(&[
        "--socket",
        sock.to_str().unwrap(),
        "--fabric",
        f.to_str().unwrap(),
        "--node",
        "b",
        "--fault",
        "drop=0.05,seed=3",
        "--log",
        "debug",
        "--busy-poll-us",
        "50",
        "--mem-budget",
        "64M",
    ])
    .unwrap();
    let FabricMode::IbUdp { node, .. } = &c.mode else {
        panic!("--fabric gives the InfiniBand mode");
    };
    assert_eq!((node.lid, node.guid), (2, 0x0002_c903_0000_0002));
    assert_eq!(c.fault.unwrap().drop, 0.05);
    assert_eq!(c.log, log::LevelFilter::Debug);
    assert_eq!(c.busy_poll, std::time::Duration::from_micros(50));
    assert_eq!(c.mem_budget, 64 << 20);
    assert_eq!(device::cli::parse_size("4096"), Ok(4096));
    assert_eq!(device::cli::parse_size("2g"), Ok(2 << 30));
    assert_eq!(device::cli::parse_size("512K"), Ok(512 << 10));
    assert!(device::cli::parse_size("99999999999G").is_err());
}

#[test]
fn cli_bad_arguments_are_one_line_errors_naming_the_argument() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let bad_toml = d.path().join("bad.toml");
    std::fs::write(&bad_toml, "[[node]]\nname = \"a\"\nlid = 0\n").unwrap();
    let sock = d.path().join("a.sock");
    let (s, fs) = (sock.to_str().unwrap(), f.to_str().unwrap());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--socket",
                "/nonexistent/dir/a.sock",
                "--fabric",
                fs,
                "--node",
                "a",
            ],
            "--socket",
        ),
        (
            vec![
                "--socket",
                d.path().to_str().unwrap(),
                "--fabric",
                fs,
                "--node",
                "a",
            ],
            "is a folder",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                "/nonexistent.toml",
                "--node",
                "a",
            ],
            "--fabric",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                bad_toml.to_str().unwrap(),
                "--node",
                "a",
            ],
            "bad.toml",
        ),
        (
            vec!["--socket", s, "--fabric", fs, "--node", "zz"],
            "--node zz: not in",
        ),
        (
            vec![
                "--socket", s, "--fabric", fs, "--node", "a", "--fault", "drop=2",
            ],
            "--fault",
        ),
        (
            vec![
                "--socket", s, "--fabric", fs, "--node", "a", "--fault", "bogus=1",
            ],
            "--fault",
        ),
        (
            vec![
                "--socket", s, "--fabric", fs, "--node", "a", "--log", "loud",
            ],
            "--log loud",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--capture",
                "/nonexistent/x.pcap",
            ],
            "--capture",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--counters-every",
                "0",
            ],
            "--counters-every",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--counters-every",
                "soon",
            ],
            "--counters-every",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--busy-poll-us",
                "2000000",
            ],
            "--busy-poll-us",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--mem-budget",
                "1M",
            ],
            "--mem-budget",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--mem-budget",
                "lots",
            ],
            "--mem-budget",
        ),
        (vec!["--fabric", fs, "--node", "a"], "--socket"),
        (
            vec!["--socket", s, "--fabric", fs, "--node", "a", "--frobnicate"],
            "--frobnicate",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--counters-format",
                "xml",
            ],
            "--counters-format",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--counters-file",
                "/nonexistent/dir/c.json",
            ],
            "--counters-file",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--counters-file",
                d.path().to_str().unwrap(),
            ],
            "is a folder",
        ),
    ];
    for (args, want) in cases {
        let e = check(&args).expect_err(&format!("{args:?} accepted"));
        if e.starts_with("error:") {
            // clap's own parse errors: a short paragraph naming the argument.
            assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
        } else {
            // Our own checks: exactly one line.
            assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
            assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
        }
    }
}

#[test]
fn cli_help_explains_every_argument() {
    let help = Cli::try_parse_from(["vhca", "--help"])
        .unwrap_err()
        .to_string();
    for arg in [
        "--socket",
        "--fabric",
        "--node",
        "--capture",
        "--fault",
        "--log",
        "--counters-every",
        "--busy-poll-us",
        "--mem-budget",
        "--tap",
        "--mac",
        "--vhost-user-net",
    ] {
        assert!(help.contains(arg), "--help lacks {arg}");
    }
    assert!(help.contains("vfio-user"));
}

#[test]
fn cli_tap_mode_gives_an_ethernet_port_with_its_mac_and_nic_socket() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("a.sock");
    let net = d.path().join("a-net.sock");
    let c = check(&[
        "--socket",
        sock.to_str().unwrap(),
        "--tap",
        "vhca0",
        "--mac",
        "52:54:00:AB:cd:01",
        "--vhost-user-net",
        net.to_str().unwrap(),
    ])
    .unwrap();
    let FabricMode::Roce {
        tap,
        mac,
        vhost_user_net,
    } = c.mode
    else {
        panic!("--tap gives the RoCE mode");
    };
    assert_eq!(tap, "vhca0");
    assert_eq!(mac, [0x52, 0x54, 0x00, 0xab, 0xcd, 0x01]);
    assert_eq!(vhost_user_net.as_deref(), Some(net.as_path()));
    // The NIC socket is optional.
    let c = check(&[
        "--socket",
        sock.to_str().unwrap(),
        "--tap",
        "t0",
        "--mac",
        "02:00:00:00:00:01",
    ]);
    assert!(matches!(
        c.unwrap().mode,
        FabricMode::Roce {
            vhost_user_net: None,
            ..
        }
    ));
}

#[test]
fn cli_tap_mode_errors_name_the_argument() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let s = sock.to_str().unwrap();
    let fs = f.to_str().unwrap();
    let m = "02:00:00:00:00:01";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--socket", s, "--tap", "t0"], "--mac"),
        (
            vec!["--socket", s, "--tap", "t0", "--mac", "02:00:00:00:00"],
            "--mac",
        ),
        (
            vec!["--socket", s, "--tap", "t0", "--mac", "zz:00:00:00:00:01"],
            "--mac",
        ),
        (
            vec!["--socket", s, "--tap", "t0", "--mac", "01:00:5e:00:00:01"],
            "--mac",
        ),
        (
            vec!["--socket", s, "--tap", "t0", "--mac", "00:00:00:00:00:00"],
            "--mac",
        ),
        (
            vec!["--socket", s, "--tap", "a-very-long-tap-name", "--mac", m],
            "--tap",
        ),
        (
            vec!["--socket", s, "--tap", "t0", "--mac", m, "--fabric", fs],
            "--fabric",
        ),
        (
            vec!["--socket", s, "--tap", "t0", "--mac", m, "--node", "a"],
            "--node",
        ),
        (vec!["--socket", s, "--mac", m], "--tap"),
        (
            vec!["--socket", s, "--vhost-user-net", "/tmp/x.sock"],
            "--tap",
        ),
        (vec!["--socket", s], "--fabric"),
        (vec!["--socket", s, "--fabric", fs], "--node"),
        (
            vec![
                "--socket",
                s,
                "--tap",
                "t0",
                "--mac",
                m,
                "--vhost-user-net",
                "/nonexistent/x.sock",
            ],
            "--vhost-user-net",
        ),
        (
            vec![
                "--socket",
                s,
                "--tap",
                "t0",
                "--mac",
                m,
                "--vhost-user-net",
                s,
            ],
            "--vhost-user-net",
        ),
    ];
    for (args, want) in cases {
        let e = check(&args).expect_err(&format!("{args:?} accepted"));
        if !e.starts_with("error:") {
            assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
        }
        assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
    }
    assert_eq!(parse_mac("02-00-00-00-00-0A"), Ok([2, 0, 0, 0, 0, 10]));
}

#[test]
fn ae_01_peer_silence_sets_the_liveness_or_turns_it_off() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let (f, sock) = (f.to_str().unwrap(), sock.to_str().unwrap());
    let base = ["--socket", sock, "--fabric", f, "--node", "a"];
    let with = |extra: &[&str]| check(&[&base[..], extra].concat());
    let s = std::time::Duration::from_secs;
    let ms = std::time::Duration::from_millis;
    assert_eq!(with(&[]).unwrap().liveness, Some((s(1), s(5))));
    let c = with(&["--peer-silence-ms", "500"]).unwrap();
    assert_eq!(c.liveness, Some((ms(100), ms(500))));
    assert_eq!(with(&["--peer-silence-ms", "0"]).unwrap().liveness, None);
    for bad in ["50", "3600001"] {
        let e = with(&["--peer-silence-ms", bad]).expect_err(bad);
        assert!(e.contains("--peer-silence-ms") && !e.contains('\n'), "{e}");
    }
}

#[test]
fn ad_10_apm_timeouts_default_two_and_bounded() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let base = [
        "--socket",
        sock.to_str().unwrap(),
        "--fabric",
        f.to_str().unwrap(),
        "--node",
        "a",
    ];
    assert_eq!(check(&base).unwrap().apm_timeouts, 2);
    let with = |n: &'static str| {
        let mut v = base.to_vec();
        v.extend(["--apm-timeouts", n]);
        check(&v)
    };
    assert_eq!(with("0").unwrap().apm_timeouts, 0);
    assert_eq!(with("5").unwrap().apm_timeouts, 5);
    let e = with("9").unwrap_err();
    assert!(e.contains("--apm-timeouts"), "{e}");
}

#[test]
fn reorder_hold_defaults_to_50_us_and_is_bounded() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let base = [
        "--socket",
        sock.to_str().unwrap(),
        "--fabric",
        f.to_str().unwrap(),
        "--node",
        "a",
    ];
    let us = std::time::Duration::from_micros;
    assert_eq!(check(&base).unwrap().reorder_hold, us(50));
    let with = |n: &'static str| {
        let mut v = base.to_vec();
        v.extend(["--reorder-hold-us", n]);
        check(&v)
    };
    assert_eq!(with("0").unwrap().reorder_hold, us(0));
    assert_eq!(with("10000").unwrap().reorder_hold, us(10_000));
    let e = with("10001").unwrap_err();
    assert!(e.contains("--reorder-hold-us") && !e.contains('\n'), "{e}");
}
