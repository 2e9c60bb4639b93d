//! The `vhca` command line: every bad argument is one line naming the argument.

use clap::Parser;
use device::cli::Cli;

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
    ])
    .unwrap();
    let device::cli::Fabric::Udp { node, .. } = &c.fabric else {
        panic!("a UDP fabric")
    };
    assert_eq!((node.lid, node.guid), (2, 0x0002_c903_0000_0002));
    assert_eq!(c.fault.unwrap().drop, 0.05);
    assert_eq!(c.log, log::LevelFilter::Debug);
    assert_eq!(c.busy_poll, std::time::Duration::from_micros(50));
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
        (vec!["--fabric", fs, "--node", "a"], "--socket"),
        (
            vec!["--socket", s, "--fabric", fs, "--node", "a", "--frobnicate"],
            "--frobnicate",
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
    ] {
        assert!(help.contains(arg), "--help lacks {arg}");
    }
    assert!(help.contains("vfio-user"));
}

/// WF-10: `--tap NAME --mac MAC` makes an Ethernet port instead of the UDP
/// fabric; the two modes exclude each other and a bad MAC or name is one line.
#[test]
fn cli_tap_mode_takes_a_tap_and_a_unicast_mac() {
    let d = tempfile::tempdir().unwrap();
    let f = fabric_file(d.path());
    let sock = d.path().join("a.sock");
    let (s, fs) = (sock.to_str().unwrap(), f.to_str().unwrap());
    let c = check(&[
        "--socket",
        s,
        "--tap",
        "vtap0",
        "--mac",
        "52:54:00:aB:cd:01",
    ])
    .unwrap();
    let device::cli::Fabric::Tap { name, mac } = &c.fabric else {
        panic!("a TAP port")
    };
    assert_eq!(
        (name.as_str(), *mac),
        ("vtap0", [0x52, 0x54, 0, 0xab, 0xcd, 1])
    );
    for (args, needle) in [
        (vec!["--socket", s, "--tap", "vtap0"], "--mac"),
        (vec!["--socket", s, "--mac", "52:54:00:00:00:01"], "--tap"),
        (
            vec![
                "--socket",
                s,
                "--tap",
                "vtap0",
                "--mac",
                "01:00:5e:00:00:01",
            ],
            "--mac 01:00:5e",
        ),
        (
            vec!["--socket", s, "--tap", "vtap0", "--mac", "52:54:00:00:01"],
            "--mac",
        ),
        (
            vec!["--socket", s, "--tap", "a/b", "--mac", "52:54:00:00:00:01"],
            "--tap a/b",
        ),
        (
            vec![
                "--socket",
                s,
                "--tap",
                "t",
                "--mac",
                "52:54:00:00:00:01",
                "--fabric",
                fs,
            ],
            "--fabric",
        ),
        (vec!["--socket", s], "--fabric"),
    ] {
        let e = check(&args).unwrap_err();
        assert!(e.contains(needle), "{args:?}: {e}");
    }
}
