//! The `vhca` command line: every bad argument is a clap error with the usage
//! line, naming the argument (issue 28 item 5).

mod common;

use clap::Parser;
use common::fabric_file;
use device::cli::{parse_mac, Cli, FabricMode};
use device::units::ParseArgs;

/// A clap error: `error: ...` naming the argument, then the usage line.
fn assert_clap_error(e: &str, names: &str, args: &[&str]) {
    assert!(e.starts_with("error: "), "{args:?}: {e}");
    assert!(e.contains(names), "{args:?}: {e:?} lacks {names:?}");
    assert!(
        e.contains("\nUsage: vhca "),
        "{args:?}: no usage line in {e}"
    );
}

fn check(args: &[&str]) -> Result<device::cli::Config, String> {
    let cli = Cli::parse_args(std::iter::once("vhca").chain(args.iter().copied()))
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
        "--busy-poll",
        "50us",
        "--mem-budget",
        "64M",
        "--dm-size",
        "128K",
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
    assert_eq!(c.dm_size, 128 << 10);
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
            "--log <LEVEL>",
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
        // Device memory: whole 4 KiB pages, at most DM_MAX_SIZE.
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--dm-size",
                "4097",
            ],
            "--dm-size",
        ),
        (
            vec![
                "--socket",
                s,
                "--fabric",
                fs,
                "--node",
                "a",
                "--dm-size",
                "128M",
            ],
            "--dm-size",
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
        assert_clap_error(&e, want, &args);
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
        "--busy-poll",
        "--peer-silence",
        "--no-loss-probes",
        "--no-credits",
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
        assert_clap_error(&e, want, &args);
    }
    assert_eq!(parse_mac("02-00-00-00-00-0A"), Ok([2, 0, 0, 0, 0, 10]));
}

#[test]
fn peer_silence_option_sets_the_liveness_or_turns_it_off() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let (f, sock) = (f.to_str().unwrap(), sock.to_str().unwrap());
    let base = ["--socket", sock, "--fabric", f, "--node", "a"];
    let with = |extra: &[&str]| check(&[&base[..], extra].concat());
    let s = std::time::Duration::from_secs;
    let ms = std::time::Duration::from_millis;
    assert_eq!(with(&[]).unwrap().liveness, Some((s(1), s(5))));
    let c = with(&["--peer-silence", "500ms"]).unwrap();
    assert_eq!(c.liveness, Some((ms(100), ms(500))));
    assert_eq!(with(&["--peer-silence", "0"]).unwrap().liveness, None);
    // The old spelling, in milliseconds.
    let c = with(&["--peer-silence-ms", "500"]).unwrap();
    assert_eq!(c.liveness, Some((ms(100), ms(500))));
    assert_eq!(with(&["--peer-silence-ms", "0"]).unwrap().liveness, None);
    for (arg, bad) in [
        ("--peer-silence", "50ms"),
        ("--peer-silence", "3601s"),
        ("--peer-silence", "500"),
        ("--peer-silence-ms", "50"),
        ("--peer-silence-ms", "3600001"),
    ] {
        let e = with(&[arg, bad]).expect_err(bad);
        assert_clap_error(&e, arg, &[arg, bad]);
    }
}

#[test]
fn apm_timeouts_option_defaults_to_two_and_is_bounded() {
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
    // The engine's default, which --help gives as text.
    assert_eq!(
        check(&base).unwrap().reorder_hold,
        std::time::Duration::from_nanos(transport::engine::DEFAULT_REORDER_HOLD_NS)
    );
    let with = |arg: &'static str, n: &'static str| {
        let mut v = base.to_vec();
        v.extend([arg, n]);
        check(&v)
    };
    assert_eq!(with("--reorder-hold", "0").unwrap().reorder_hold, us(0));
    assert_eq!(
        with("--reorder-hold", "10ms").unwrap().reorder_hold,
        us(10_000)
    );
    assert_eq!(with("--reorder-hold-us", "0").unwrap().reorder_hold, us(0));
    let c = with("--reorder-hold-us", "10000").unwrap();
    assert_eq!(c.reorder_hold, us(10_000));
    for arg in ["--reorder-hold", "--reorder-hold-us"] {
        let e = with(arg, "10001us").unwrap_err();
        assert_clap_error(&e, arg, &[arg]);
        assert!(e.contains("from 0 to 10ms"), "{e}");
    }
}

/// `--fabric FILE --node a` in a fresh folder, and the folder.
fn ib_base() -> (tempfile::TempDir, Vec<String>) {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let base = ["--socket", sock.to_str().unwrap()]
        .into_iter()
        .chain(["--fabric", f.to_str().unwrap(), "--node", "a"])
        .map(str::to_owned)
        .collect();
    (d, base)
}

fn check_with(base: &[String], extra: &[&str]) -> Result<device::cli::Config, String> {
    let mut v: Vec<&str> = base.iter().map(String::as_str).collect();
    v.extend_from_slice(extra);
    check(&v)
}

#[test]
fn durations_have_one_syntax_and_the_old_integer_spellings_keep_their_unit() {
    use std::time::Duration;
    let (_d, base) = ib_base();
    let us = Duration::from_micros;
    // (new spelling, old spelling with a bare number in its old unit, what
    // both give)
    let busy = |c: &device::cli::Config| c.busy_poll;
    let silence = |c: &device::cli::Config| c.liveness.map_or(Duration::ZERO, |l| l.1);
    let probe = |c: &device::cli::Config| c.loss_probe_min;
    let hold = |c: &device::cli::Config| c.reorder_hold;
    let every = |c: &device::cli::Config| c.counters_every.unwrap();
    type Get = dyn Fn(&device::cli::Config) -> Duration;
    let cases: [(&str, &str, &str, &str, Duration, &Get); 6] = [
        ("--busy-poll", "50us", "--busy-poll-us", "50", us(50), &busy),
        (
            "--busy-poll",
            "1.5ms",
            "--busy-poll-us",
            "1500",
            us(1500),
            &busy,
        ),
        (
            "--peer-silence",
            "2s",
            "--peer-silence-ms",
            "2000",
            us(2_000_000),
            &silence,
        ),
        (
            "--loss-probe-min",
            "5ms",
            "--loss-probe-min-us",
            "5000",
            us(5000),
            &probe,
        ),
        (
            "--reorder-hold",
            "20us",
            "--reorder-hold-us",
            "20",
            us(20),
            &hold,
        ),
        (
            "--counters-every",
            "2s",
            "--counters-every",
            "2",
            us(2_000_000),
            &every,
        ),
    ];
    for (new, v_new, old, v_old, want, get) in cases {
        assert_eq!(
            get(&check_with(&base, &[new, v_new]).unwrap()),
            want,
            "{new} {v_new}"
        );
        assert_eq!(
            get(&check_with(&base, &[old, v_old]).unwrap()),
            want,
            "{old} {v_old}"
        );
    }
    // The old spelling takes a unit too.
    let c = check_with(&base, &["--busy-poll-us", "1ms"]).unwrap();
    assert_eq!(c.busy_poll, us(1000));
    let c = check_with(&base, &["--counters-every", "500ms"]).unwrap();
    assert_eq!(c.counters_every, Some(us(500_000)));
    // Both spellings at once: which one is meant?
    let e = check_with(&base, &["--busy-poll", "5us", "--busy-poll-us", "5"]).unwrap_err();
    assert_clap_error(&e, "--busy-poll-us", &[]);
    assert!(e.contains("cannot be used with"), "{e}");
    // The old spellings are not in --help (the new ones are).
    let help = Cli::try_parse_from(["vhca", "--help"])
        .unwrap_err()
        .to_string();
    assert!(help.contains("--busy-poll <DURATION>") && !help.contains("--busy-poll-us"));
    assert!(
        help.contains(device::units::SYNTAX_HELP),
        "--help says the units"
    );
}

#[test]
fn a_bad_duration_or_size_is_a_clap_error_naming_the_argument_and_the_units() {
    let (_d, base) = ib_base();
    for (args, names, why) in [
        (
            &["--busy-poll", "50"][..],
            "--busy-poll <DURATION>",
            "has no unit",
        ),
        (
            &["--busy-poll", "5h"],
            "--busy-poll <DURATION>",
            "unknown unit",
        ),
        (
            &["--busy-poll=-5us"],
            "--busy-poll <DURATION>",
            "not a duration",
        ),
        (
            &["--busy-poll", "2s"],
            "--busy-poll <DURATION>",
            "from 0 to 1s",
        ),
        (
            &["--busy-poll-us", "2000000"],
            "--busy-poll-us",
            "from 0 to 1s",
        ),
        (&["--counters-every", "0"], "--counters-every", "from 100ms"),
        (
            &["--counters-every", "soon"],
            "--counters-every",
            "is not a duration",
        ),
        (
            &["--loss-probe-min", "1us"],
            "--loss-probe-min",
            "from 10us to 1s",
        ),
        (
            &["--mem-budget", "1M"],
            "--mem-budget <SIZE>",
            "at least 4M",
        ),
        (
            &["--mem-budget", "lots"],
            "--mem-budget <SIZE>",
            "1K = 1024",
        ),
        (&["--fault", "delay=100"], "--fault <SPEC>", "has no unit"),
        (
            &["--fault", "delay=61s"],
            "--fault <SPEC>",
            "longer than 60s",
        ),
        (&["--apm-timeouts", "9"], "--apm-timeouts <N>", "0..=8"),
        (&["--log", "loud"], "--log <LEVEL>", "not a level"),
    ] {
        let e = check_with(&base, args).expect_err(&format!("{args:?} accepted"));
        assert_clap_error(&e, names, args);
        assert!(e.contains(why), "{args:?}: {e:?} lacks {why:?}");
    }
    let c = check_with(&base, &["--mem-budget", "1G", "--fault", "delay=1.5ms"]).unwrap();
    assert_eq!(c.mem_budget, 1 << 30);
    assert_eq!(
        c.fault.unwrap().delay,
        std::time::Duration::from_micros(1500)
    );
}

#[test]
fn feature_switches_are_no_flags_and_the_old_on_off_form_still_works() {
    let (_d, base) = ib_base();
    type Get = fn(&device::cli::Config) -> bool;
    let cases: [(&str, &str, Get); 4] = [
        ("--no-loss-probes", "--loss-probes", |c| c.loss_probes),
        ("--no-credits", "--credits", |c| c.credits),
        ("--no-loss-probe-adapt", "--loss-probe-adapt", |c| {
            c.loss_probe_adapt
        }),
        ("--no-loss-go-back-bound", "--loss-go-back-bound", |c| {
            c.loss_go_back_bound
        }),
    ];
    let default = check_with(&base, &[]).unwrap();
    for (no, old, get) in cases {
        assert!(get(&default), "{old} is on by default");
        assert!(!get(&check_with(&base, &[no]).unwrap()), "{no}");
        assert!(
            !get(&check_with(&base, &[old, "off"]).unwrap()),
            "{old} off"
        );
        assert!(get(&check_with(&base, &[old, "on"]).unwrap()), "{old} on");
        let e = check_with(&base, &[old, "maybe"]).unwrap_err();
        assert_clap_error(&e, old, &[old, "maybe"]);
        assert!(e.contains("[possible values: on, off]"), "{e}");
        let e = check_with(&base, &[no, old, "on"]).unwrap_err();
        assert_clap_error(&e, no, &[no, old, "on"]);
        // A flag takes no value.
        let e = check_with(&base, &[&format!("{no}=off")]).unwrap_err();
        assert_clap_error(&e, no, &[no]);
    }
}

#[test]
fn infiniband_and_roce_options_are_groups_that_exclude_each_other() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let (s, fs) = (sock.to_str().unwrap(), f.to_str().unwrap());
    let m = "02:00:00:00:00:01";
    for (args, names, why) in [
        (
            &["--socket", s, "--tap", "t0", "--mac", m, "--node", "a"][..],
            "--tap <NAME>",
            "cannot be used with",
        ),
        (
            &["--socket", s, "--fabric", fs, "--node", "a", "--mac", m],
            "--mac <MAC>",
            "cannot be used with",
        ),
        (
            &["--socket", s, "--tap", "t0"],
            "--mac <MAC>",
            "required arguments were not provided",
        ),
        (
            &["--socket", s, "--node", "a"],
            "--fabric <FILE>",
            "required arguments were not provided",
        ),
        (
            &["--socket", s],
            "--fabric FILE --node NAME (InfiniBand) or --tap NAME --mac MAC (RoCE)",
            "give",
        ),
    ] {
        let e = check(args).expect_err(&format!("{args:?} accepted"));
        assert_clap_error(&e, names, args);
        assert!(e.contains(why), "{args:?}: {e:?} lacks {why:?}");
    }
}

#[test]
fn the_vhca_binary_reports_a_bad_argument_with_the_usage_line_and_exit_status_2() {
    let (_d, base) = ib_base();
    for extra in [&["--busy-poll", "9s"][..], &["--node", "zz"]] {
        let mut args = base.clone();
        if extra[0] == "--node" {
            // The fabric file has no node zz: found after parsing.
            args.truncate(args.len() - 2);
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vhca"))
            .args(&args)
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert_clap_error(&err, extra[0], extra);
    }
}

#[test]
fn no_odp_turns_on_demand_paging_off_and_it_is_on_by_default() {
    // Issue 29: a --no-xyz switch without a value, like the others.
    let (_d, base) = ib_base();
    assert!(check_with(&base, &[]).unwrap().odp);
    assert!(!check_with(&base, &["--no-odp"]).unwrap().odp);
    let e = check_with(&base, &["--no-odp=off"]).unwrap_err();
    assert_clap_error(&e, "--no-odp", &["--no-odp"]);
    let mut caps = device::caps::Caps::default();
    assert_ne!(caps.odp_caps(), 0);
    caps.odp = false;
    assert_eq!(caps.odp_caps(), 0, "nothing advertised with ODP off");
}

#[test]
fn dcqcn_takes_mlx5s_defaults_or_named_parameters_and_refuses_bad_ones() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("a.sock");
    let base = [
        "--socket",
        sock.to_str().unwrap(),
        "--tap",
        "vhca0",
        "--mac",
        "52:54:00:ab:cd:01",
    ];
    let with = |extra: &[&str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        check(&v)
    };
    // Off unless asked for.
    assert_eq!(with(&[]).unwrap().dcqcn, None);
    let on = with(&["--dcqcn"]).unwrap().dcqcn.expect("on");
    assert_eq!(on, device::cli::DcqcnParams::default());
    assert_eq!((on.rp_time_reset, on.np_min_time_between_cnps), (300, 4));
    let set = with(&["--dcqcn=rp_clamp_tgt_rate=1,np_cnp_dscp=26"])
        .unwrap()
        .dcqcn
        .unwrap();
    assert_eq!((set.rp_clamp_tgt_rate, set.np_cnp_dscp), (1, 26));
    assert_eq!(set.rp_ai_rate, on.rp_ai_rate);
    for (bad, says) in [
        ("--dcqcn=rp_gd=16", "out of range"),
        ("--dcqcn=rp_nonsense=1", "unknown DCQCN parameter"),
        ("--dcqcn=rp_ai_rate", "not NAME=VALUE"),
        ("--dcqcn=rp_ai_rate=fast", "not a number"),
    ] {
        let e = with(&[bad]).unwrap_err();
        assert_clap_error(&e, "--dcqcn", &[bad]);
        assert!(e.contains(says), "{bad}: {e}");
    }
    // RoCE only: DCQCN is an Ethernet port's.
    let f = fabric_file(d.path());
    let e = check(&[
        "--socket",
        sock.to_str().unwrap(),
        "--fabric",
        f.to_str().unwrap(),
        "--node",
        "a",
        "--dcqcn",
    ])
    .unwrap_err();
    assert!(e.starts_with("error: "), "{e}");
}
