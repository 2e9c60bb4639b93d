//! Unit tests of `file.rs` (split off to keep that file under 1000 lines).
use super::*;

#[test]
fn guid_forms() {
    assert_eq!(
        parse_guid("0x0002c90300000001"),
        Some(0x0002_c903_0000_0001)
    );
    assert_eq!(
        parse_guid("0002:c903:0000:0001"),
        Some(0x0002_c903_0000_0001)
    );
    assert_eq!(parse_guid("FFFFFFFFFFFFFFFF"), Some(u64::MAX));
    assert_eq!(parse_guid("0x"), None);
    assert_eq!(parse_guid("0x1_0000_0000_0000_0000"), None);
    assert_eq!(parse_guid("00010000000000000000"), None);
    assert_eq!(parse_guid("xyz"), None);
}

#[test]
fn lines() {
    assert_eq!(line_of("a\nb\nc", 0), 1);
    assert_eq!(line_of("a\nb\nc", 2), 2);
    assert_eq!(line_of("a\nb\nc", 99), 3);
}
/// AD-06: the fabric file's `sl2vl` table: absent, every SL on VL0; set,
/// 16 data VLs; anything else refused with one line naming the problem.
#[test]
fn ad_06_sl2vl_table() {
    let node = "[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:1\"\n";
    let f = FabricFile::parse("f", node).unwrap();
    assert_eq!(f.sl2vl(), None);
    let text = format!("sl2vl = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]\n{node}");
    let f = FabricFile::parse("f", &text).unwrap();
    assert_eq!(
        f.sl2vl(),
        Some([0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7])
    );
    for (table, why) in [
        ("[0, 1]", "2 entries, not 16"),
        (
            "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15]",
            "SL 15: 15 is not a data VL",
        ),
        (
            "[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1]",
            "SL 15: -1 is not",
        ),
        (
            "[0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0]",
            "SL 8: 8 is not",
        ),
        ("\"x\"", "not an array"),
    ] {
        refused(&format!("sl2vl = {table}\n{node}"), "f: sl2vl: ", why);
    }
}

/// AD-06: the fabric file's `[vl_arb]` tables: absent, none (every data
/// VL in turn); set, the (VL, weight) entries and LimitOfHighPriority as
/// written; a table the ports cannot arbitrate with is refused with one
/// line naming the problem.
#[test]
fn ad_06_vl_arb_tables() {
    use transport::engine::VlArbEntry;
    let node = "[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:1\"\n";
    let f = FabricFile::parse("f", node).unwrap();
    assert_eq!(f.vl_arb(), None);
    let sl2vl = "sl2vl = [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]\n";
    let good = "[vl_arb]\nhigh = [[2, 8]]\nlow = [[0, 48], [1, 16]]\nhigh_limit = 4\n";
    let f = FabricFile::parse("f", &format!("{sl2vl}{node}{good}")).unwrap();
    let e = |vl, weight| VlArbEntry { vl, weight };
    assert_eq!(
        f.vl_arb(),
        Some(&VlArbTables {
            high: vec![e(2, 8)],
            low: vec![e(0, 48), e(1, 16)],
            high_limit: 4,
        })
    );
    let many = format!("low = [{}]", vec!["[0, 1]"; 65].join(", "));
    for (table, why) in [
        (
            "low = [[0, 1], [1, 1]]",
            "SL 15 goes on VL 2, which no entry",
        ),
        ("low = [[0, 1], [2, 1], [1, 0]]", "SL 1 goes on VL 1"),
        (
            "low = [[0, 1], [1, 1], [2, 1], [15, 1]]",
            "low entry 3: VL 15 is not 0..=7",
        ),
        (
            "low = [[0, 1], [1, 1], [2, 256]]",
            "low entry 2: weight 256 is not 0..=255",
        ),
        ("high = [[0, -1]]", "high entry 0: weight -1 is not"),
        (
            "high = [0, 1]",
            "high entry 0: 0 is not a [VL, weight] pair",
        ),
        ("high = [[0, 1, 2]]", "is not a [VL, weight] pair"),
        ("low = 3", "low: not an array"),
        (&many, "low: 65 entries, at most 64"),
        (
            "low = [[0, 1], [1, 1], [2, 1]]\nhigh_limit = 256",
            "high_limit: 256 is not",
        ),
        ("weights = [[0, 1]]", "unknown key `weights`"),
    ] {
        let text = format!("{sl2vl}{node}[vl_arb]\n{table}\n");
        refused(&text, "f: vl_arb: ", why);
    }
    refused(&format!("vl_arb = 1\n{node}"), "f: vl_arb: ", "not a table");
}

/// Asserts that `text` is refused with one line that starts with
/// `prefix` and names `why`.
fn refused(text: &str, prefix: &str, why: &str) {
    let e = FabricFile::parse("f", text).unwrap_err().to_string();
    assert!(
        e.starts_with(prefix) && e.contains(why) && !e.contains('\n'),
        "{text}: {e}"
    );
}
