//! Issue 17: the files a user copies from (README.md's "Your own QEMU",
//! `examples/`) are read here as the programs read them, so they cannot rot.

use std::path::{Path, PathBuf};

use clap::Parser;
use device::cli::{Cli, FabricMode};
use device::fabric::FabricFile;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// README.md's "Your own QEMU" section.
fn own_qemu_section() -> String {
    let readme = read("README.md");
    let start = readme.find("## Your own QEMU").expect("the section");
    let rest = &readme[start + 3..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end].to_string()
}

/// The JSON object of QEMU's `-device '{...}'` in `text`, after `open`
/// (which ends with the object's `{`): up to its matching `}`.
fn device_json(text: &str, open: &str) -> Value {
    let at = text.find(open).expect("a -device JSON") + open.len() - 1;
    let mut depth = 0;
    let len = text[at..]
        .char_indices()
        .find_map(|(i, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            (depth == 0).then_some(i + 1)
        })
        .expect("the object's end");
    let json = &text[at..at + len];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

#[test]
fn the_example_fabric_file_loads_as_vhca_reads_it() {
    let f = FabricFile::load(repo().join("examples/fabric.toml")).expect("examples/fabric.toml");
    let nodes: Vec<(&str, u16, u64)> = f
        .nodes()
        .iter()
        .map(|n| (n.name.as_str(), n.lid, n.guid))
        .collect();
    assert_eq!(
        nodes,
        vec![
            ("a", 1, 0x0002_c903_0000_0001),
            ("b", 2, 0x0002_c903_0000_0002)
        ]
    );
    assert!(f.key().is_none(), "the example's key lines stay comments");
    assert!(!f.cabling().is_cabled(), "the example is all-to-all");
}

#[test]
fn the_example_switch_fabric_cables_three_nodes_to_one_switch() {
    use device::fabric::End;
    let f = FabricFile::load(repo().join("examples/fabric-switch.toml"))
        .expect("examples/fabric-switch.toml");
    let c = f.cabling();
    assert_eq!(f.nodes().len(), 3);
    let (s, sw) = c.switch("sw0").expect("switch sw0");
    assert_eq!((sw.ports, sw.lid), (4, Some(100)));
    for i in 0..3 {
        let port = i as u8 + 1;
        assert_eq!(c.peer(End::Node(i)), Some(End::Port { switch: s, port }));
    }
}

#[test]
fn the_example_subnet_has_two_switches_with_a_spare_cable_and_waits_for_an_sm() {
    use device::fabric::End;
    let f = FabricFile::load(repo().join("examples/fabric-subnet.toml"))
        .expect("examples/fabric-subnet.toml");
    assert_eq!(f.subnet(), device::mgmt::SubnetMode::Sm);
    let c = f.cabling();
    let (s0, _) = c.switch("sw0").expect("switch sw0");
    let (s1, _) = c.switch("sw1").expect("switch sw1");
    let port = |switch, port| Some(End::Port { switch, port });
    assert_eq!(c.peer(End::Node(0)), port(s0, 1));
    assert_eq!(c.peer(End::Node(1)), port(s0, 2));
    assert_eq!(c.peer(End::Node(2)), port(s1, 1));
    // Two parallel cables between the switches: a path to reroute to.
    for p in [4, 5] {
        assert_eq!(
            c.peer(End::Port {
                switch: s0,
                port: p
            }),
            port(s1, p)
        );
    }
}

#[test]
fn the_readme_vhca_commands_pass_the_cli_checks() {
    let section = own_qemu_section();
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for line in section.lines().filter(|l| l.starts_with("vhca --socket")) {
        // Paths as the README gives them, rooted in a temporary folder and
        // the repository.
        let args: Vec<String> = line
            .trim_end_matches('&')
            .split_whitespace()
            .map(|a| {
                if let Some(rel) = a.strip_prefix("/tmp/vhca/") {
                    dir.path().join(rel).to_str().unwrap().to_owned()
                } else if a.starts_with("examples/") {
                    repo().join(a).to_str().unwrap().to_owned()
                } else {
                    a.to_owned()
                }
            })
            .collect();
        let cli = Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{line}: {e}"));
        let c = cli.check().unwrap_or_else(|e| panic!("{line}: {e}"));
        assert!(matches!(c.mode, FabricMode::IbUdp { .. }));
        assert!(c.counters_file.is_some());
        n += 1;
    }
    assert_eq!(n, 2, "one vhca per VM");
}

#[test]
fn the_readme_qemu_line_and_the_libvirt_domain_attach_the_same_device() {
    let section = own_qemu_section();
    for must in [
        "-object memory-backend-memfd,id=mem,size=2G,share=on",
        "-machine q35,memory-backend=mem",
        "-m 2G",
        "-accel kvm -accel tcg",
        "cargo install --locked --path device",
    ] {
        assert!(section.contains(must), "README lacks {must}");
    }
    let qemu = device_json(&section, "-device '{");
    let xml = read("examples/libvirt-domain.xml");
    let libvirt = device_json(&xml, "<qemu:arg value='{");
    for v in [&qemu, &libvirt] {
        assert_eq!(v["driver"], "vfio-user-pci");
        assert_eq!(v["socket"]["type"], "unix");
    }
    assert_eq!(qemu["socket"], libvirt["socket"], "the same socket");
    for must in [
        "<source type='memfd'/>",
        "<access mode='shared'/>",
        "xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'",
        "<qemu:arg value='-device'/>",
    ] {
        assert!(xml.contains(must), "libvirt-domain.xml lacks {must}");
    }
    // XML comments may not hold "--" (the file would not load).
    for comment in xml.split("<!--").skip(1) {
        let body = comment.split("-->").next().unwrap();
        assert!(!body.contains("--"), "'--' in an XML comment");
    }
}

/// AppArmor's file globbing, enough for examples/libvirt-apparmor.txt: `*`
/// is any run of characters but `/`, `**` any run at all.
fn aa_glob(pat: &str, path: &str) -> bool {
    if let Some(rest) = pat.strip_prefix("**") {
        return (0..=path.len()).any(|i| path.is_char_boundary(i) && aa_glob(rest, &path[i..]));
    }
    if let Some(rest) = pat.strip_prefix('*') {
        let run = path.find('/').unwrap_or(path.len());
        return (0..=run).any(|i| path.is_char_boundary(i) && aa_glob(rest, &path[i..]));
    }
    match (pat.chars().next(), path.chars().next()) {
        (None, None) => true,
        (Some(p), Some(c)) if p == c => aa_glob(&pat[p.len_utf8()..], &path[c.len_utf8()..]),
        _ => false,
    }
}

#[test]
fn the_libvirt_roce_nic_is_vhost_user_and_the_apparmor_lines_allow_both_sockets() {
    // Issue 28 item 8: the RoCE port's NIC is an <interface type='vhostuser'>
    // whose QEMU connects (mode='client') to vhca's vhost-user-net socket,
    // with a MAC vhca accepts as a port's.
    let xml = read("examples/libvirt-domain.xml");
    // (the element, not its mention in the comment above the domain)
    let body = xml.rsplit("-->").next().unwrap();
    let nic = body
        .split("<interface type='vhostuser'>")
        .nth(1)
        .and_then(|s| s.split("</interface>").next())
        .expect("a vhostuser interface");
    assert!(nic.contains("mode='client'"), "{nic}");
    assert!(nic.contains("<model type='virtio'/>"), "{nic}");
    let attr = |name: &str| {
        let at = nic.find(&format!("{name}='")).expect(name) + name.len() + 2;
        nic[at..].split('\'').next().unwrap().to_owned()
    };
    let net_sock = attr("path");
    device::cli::parse_mac(&attr("address")).expect("a port's MAC");
    let vfio_sock = device_json(&xml, "<qemu:arg value='{")["socket"]["path"]
        .as_str()
        .unwrap()
        .to_owned();
    // The AppArmor lines: QEMU's connect() to each socket is a write to its
    // path, for the README's /tmp/vhca sockets and the unit's /run/vhca/NAME.
    let rules: Vec<String> = read("examples/libvirt-apparmor.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    let writable = |p: &str| {
        rules
            .iter()
            .any(|r| r.strip_suffix(" rw,").is_some_and(|pat| aa_glob(pat, p)))
    };
    for p in [
        vfio_sock.as_str(),
        net_sock.as_str(),
        "/run/vhca/a/vfio-user.sock",
        "/run/vhca/a/net.sock",
    ] {
        assert!(writable(p), "no AppArmor rule lets QEMU connect to {p}");
    }
    assert!(!writable("/etc/shadow") && !writable("/run/vhca/a/sub/x.sock"));
}
