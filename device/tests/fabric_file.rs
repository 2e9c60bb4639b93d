//! ARCHITECTURE.md §6: the fabric file (nodes with LID, port GUID, UDP address). Every
//! bad file gives its own one-line error naming the file, the node and the problem.

use std::net::SocketAddr;

use device::fabric::{FabricFile, FabricFileError, Node, PROGRAMMATIC};

const GOOD: &str = r#"
# two nodes on one host
[[node]]
name = "a"
lid = 1
guid = "0x0002c90300000001"
address = "127.0.0.1:18515"

[[node]]
name = "b"
lid = 0xBFFF
guid = 0x0002c90300000002
address = "127.0.0.1:18516"

[[node]]
name = "c"
lid = 3
guid = "f452:1403:0010:ab01"
address = "[::1]:18517"
"#;

/// A good file with one node's line replaced.
fn variant(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from} not in GOOD");
    GOOD.replacen(from, to, 1)
}

fn err(text: &str) -> FabricFileError {
    let e = FabricFile::parse("fab.toml", text).expect_err("a bad fabric file");
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert!(msg.starts_with("fab.toml"), "names the file: {msg}");
    e
}

#[test]
fn fabric_file_section6_parses_and_looks_up() {
    let f = FabricFile::parse("fab.toml", GOOD).expect("valid");
    assert_eq!(f.file(), "fab.toml");
    assert_eq!(f.nodes().len(), 3);
    let a = f.by_name("a").expect("a");
    assert_eq!(
        *a,
        Node {
            name: "a".into(),
            lid: 1,
            guid: 0x0002_c903_0000_0001,
            address: "127.0.0.1:18515".parse().unwrap(),
        }
    );
    assert_eq!(f.by_lid(0xbfff).map(|n| n.name.as_str()), Some("b"));
    assert_eq!(f.by_lid(0xbfff).unwrap().guid, 0x0002_c903_0000_0002);
    let c = f.by_name("c").expect("c");
    assert_eq!(c.guid, 0xf452_1403_0010_ab01);
    let v6: SocketAddr = "[::1]:18517".parse().unwrap();
    assert_eq!(f.by_address(&v6).map(|n| n.lid), Some(3));
    assert!(f.by_name("d").is_none());
    assert!(f.by_lid(2).is_none());
}

#[test]
fn fabric_file_section6_load_from_disk_and_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fabric.toml");
    std::fs::write(&path, GOOD).unwrap();
    let f = FabricFile::load(&path).expect("valid");
    assert_eq!(f.file(), path.display().to_string());
    let missing = dir.path().join("nope.toml");
    let e = FabricFile::load(&missing).expect_err("missing");
    assert!(matches!(e, FabricFileError::Io { .. }), "{e}");
    assert!(e.to_string().contains("nope.toml"), "{e}");
}

#[test]
fn fabric_file_section6_duplicate_name() {
    let e = err(&variant("name = \"b\"", "name = \"a\""));
    assert!(
        matches!(&e, FabricFileError::DuplicateName { node, first: 1, .. } if node == "\"a\""),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "fab.toml: node \"a\": duplicate name (node #1 has it too)"
    );
}

#[test]
fn fabric_file_section6_duplicate_lid() {
    let e = err(&variant("lid = 3", "lid = 1"));
    assert!(
        matches!(&e, FabricFileError::DuplicateLid { node, other, lid: 1, .. } if node == "\"c\"" && other == "\"a\""),
        "{e}"
    );
}

#[test]
fn fabric_file_section6_duplicate_guid() {
    let e = err(&variant(
        "guid = 0x0002c90300000002",
        "guid = \"0002:C903:0000:0001\"",
    ));
    assert!(
        matches!(&e, FabricFileError::DuplicateGuid { node, other, guid: 0x0002_c903_0000_0001, .. } if node == "\"b\"" && other == "\"a\""),
        "{e}"
    );
}

#[test]
fn fabric_file_section6_duplicate_address() {
    let e = err(&variant("127.0.0.1:18516", "127.0.0.1:18515"));
    assert!(
        matches!(&e, FabricFileError::DuplicateAddress { node, other, .. } if node == "\"b\"" && other == "\"a\""),
        "{e}"
    );
    assert!(e.to_string().contains("127.0.0.1:18515"), "{e}");
}

#[test]
fn fabric_file_section6_lid_zero_multicast_permissive_and_range() {
    for (lid, why) in [
        ("0", "reserved"),
        ("0xC000", "multicast"),
        ("0xFFFE", "multicast"),
        ("0xFFFF", "permissive"),
        ("65536", "wider than 16 bits"),
        ("-1", "negative"),
    ] {
        let e = err(&variant("lid = 3", &format!("lid = {lid}")));
        assert!(
            matches!(&e, FabricFileError::BadLid { node, .. } if node == "\"c\""),
            "{lid}: {e}"
        );
        assert!(e.to_string().contains(why), "{lid}: {e}");
    }
}

#[test]
fn fabric_file_section6_bad_address() {
    for (addr, why) in [
        ("127.0.0.1", "not ip:port"),
        ("localhost:18515", "not ip:port"),
        ("127.0.0.1:99999", "not ip:port"),
        ("127.0.0.1:0", "port 0"),
        ("0.0.0.0:18515", "unspecified"),
        ("239.1.1.1:18515", "multicast"),
    ] {
        let e = err(&variant("127.0.0.1:18516", addr));
        assert!(
            matches!(&e, FabricFileError::BadAddress { node, .. } if node == "\"b\""),
            "{addr}: {e}"
        );
        assert!(e.to_string().contains(why), "{addr}: {e}");
    }
}

#[test]
fn fabric_file_section6_bad_guid() {
    for guid in ["\"0xZZ\"", "\"\"", "\"0x10000000000000000\"", "0", "-5"] {
        let e = err(&variant(
            "guid = \"0x0002c90300000001\"",
            &format!("guid = {guid}"),
        ));
        assert!(
            matches!(&e, FabricFileError::BadGuid { node, .. } if node == "\"a\""),
            "{guid}: {e}"
        );
    }
}

#[test]
fn fabric_file_section6_unknown_keys() {
    let e = err(&variant("lid = 3", "lid = 3\nmtu = 4096"));
    assert!(
        matches!(&e, FabricFileError::UnknownKey { node, key, .. } if node == "\"c\"" && key == "mtu"),
        "{e}"
    );
    let e = err(&format!("subnet_prefix = 1\n{GOOD}"));
    assert!(
        matches!(&e, FabricFileError::UnknownTopKey { key, .. } if key == "subnet_prefix"),
        "{e}"
    );
    // A misspelt table name is an unknown top-level key too.
    let e = err(&GOOD.replace("[[node]]", "[[nodes]]"));
    assert!(
        matches!(&e, FabricFileError::UnknownTopKey { key, .. } if key == "nodes"),
        "{e}"
    );
}

#[test]
fn fabric_file_section6_empty_file() {
    for text in ["", "   \n# nothing here\n"] {
        let e = err(text);
        assert!(matches!(e, FabricFileError::Empty { .. }), "{e}");
    }
    assert!(matches!(err("node = []"), FabricFileError::Empty { .. }));
    assert!(matches!(
        err("node = 3"),
        FabricFileError::NotNodeArray { .. }
    ));
}

#[test]
fn fabric_file_section6_missing_key_wrong_type_empty_name() {
    let e = err(&variant("guid = 0x0002c90300000002\n", ""));
    assert!(
        matches!(&e, FabricFileError::MissingKey { node, key: "guid", .. } if node == "\"b\""),
        "{e}"
    );
    // Without a name, the node is named by its position.
    let e = err(&variant("name = \"c\"\n", ""));
    assert!(
        matches!(&e, FabricFileError::MissingKey { node, key: "name", .. } if node == "#3"),
        "{e}"
    );
    let e = err(&variant("lid = 3", "lid = \"three\""));
    assert!(
        matches!(&e, FabricFileError::BadValue { node, .. } if node == "\"c\""),
        "{e}"
    );
    let e = err(&variant("name = \"c\"", "name = \"\""));
    assert!(
        matches!(&e, FabricFileError::EmptyName { node, .. } if node == "#3"),
        "{e}"
    );
}

#[test]
fn fabric_file_section6_syntax_error_names_the_line() {
    let e = err(&variant("lid = 3", "lid = = 3"));
    let line = GOOD.lines().position(|l| l == "lid = 3").unwrap() + 1;
    assert!(
        matches!(&e, FabricFileError::Syntax { line: l, .. } if *l == line),
        "{e}"
    );
}

#[test]
fn fabric_file_section6_programmatic_is_validated_alike() {
    let node = |name: &str, lid, guid, port| Node {
        name: name.into(),
        lid,
        guid,
        address: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let f =
        FabricFile::from_nodes(vec![node("a", 1, 1, 1000), node("b", 2, 2, 1001)]).expect("valid");
    assert_eq!(f.file(), PROGRAMMATIC);
    assert_eq!(f.by_lid(2).unwrap().name, "b");
    let e = FabricFile::from_nodes(vec![node("a", 1, 1, 1000), node("b", 2, 1, 1001)])
        .expect_err("duplicate GUID");
    assert!(matches!(e, FabricFileError::DuplicateGuid { .. }), "{e}");
    assert!(e.to_string().starts_with(PROGRAMMATIC), "{e}");
    assert!(matches!(
        FabricFile::from_nodes(vec![]),
        Err(FabricFileError::Empty { .. })
    ));
}

/// Issue 26: `subnet` picks who brings the ports up (static by default).
#[test]
fn fabric_file_section6_subnet_mode_static_or_sm() {
    use device::mgmt::SubnetMode;
    let f = FabricFile::parse("fab.toml", GOOD).unwrap();
    assert_eq!(f.subnet(), SubnetMode::Static);
    let f = FabricFile::parse("fab.toml", &format!("subnet = \"sm\"\n{GOOD}")).unwrap();
    assert_eq!(f.subnet(), SubnetMode::Sm);
    let f = FabricFile::parse("fab.toml", &format!("subnet = \"static\"\n{GOOD}")).unwrap();
    assert_eq!(f.subnet(), SubnetMode::Static);
    for bad in ["\"opensm\"", "1", "[\"sm\"]"] {
        let e = err(&format!("subnet = {bad}\n{GOOD}"));
        assert!(matches!(&e, FabricFileError::BadSubnet { .. }), "{e}");
        assert!(
            e.to_string().contains("\"static\" or") || e.to_string().contains("nor \"sm\""),
            "{e}"
        );
    }
}

/// Issue 27 item 3: a top-level `mtu` asks for a lower IB MTU than the
/// underlay carries (the port refuses a higher one when it starts,
/// `underlay::port_mtu`); anything but an IB MTU is a one-line error.
#[test]
fn fabric_file_mtu_is_an_ib_mtu() {
    let f = FabricFile::parse("fab.toml", GOOD).unwrap();
    assert_eq!(f.mtu(), None);
    let f = FabricFile::parse("fab.toml", &format!("mtu = 1024\n{GOOD}")).unwrap();
    assert_eq!(f.mtu(), Some(transport::verbs::Mtu::M1024));
    for bad in ["1500", "0", "\"1024\"", "-256"] {
        let e = err(&format!("mtu = {bad}\n{GOOD}"));
        assert!(matches!(&e, FabricFileError::BadMtu { .. }), "{e}");
        assert!(
            e.to_string()
                .ends_with("is not one of 256, 512, 1024, 2048, 4096"),
            "{e}"
        );
    }
}
