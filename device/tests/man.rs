//! Issue 17: the man page vhca(1) comes from the command-line definition, so
//! every option `vhca --help` knows is in it.

use std::process::Command;

use clap::CommandFactory;
use device::cli::Cli;

/// `--counters-file` as roff writes it (`\-\-counters\-file`).
fn roff(long: &str) -> String {
    format!("--{long}").replace('-', "\\-")
}

#[test]
fn the_man_page_names_every_option_and_is_written_where_asked() {
    let out = Command::new(env!("CARGO_BIN_EXE_vhca-man"))
        .output()
        .expect("run vhca-man");
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).expect("roff is text");
    assert!(page.contains(".TH vhca 1"), "a section 1 page");
    assert!(page.contains(".SH OPTIONS"));
    // Every option but the hidden old spellings (`--busy-poll-us`, kept for
    // scripts; --help and the page give `--busy-poll`).
    let longs: Vec<String> = Cli::command()
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect();
    assert!(longs.len() >= 15, "{longs:?}");
    for long in &longs {
        assert!(page.contains(&roff(long)), "--{long} not in the man page");
    }
    // Its help text too, not just the name (the first words of each).
    for a in Cli::command().get_arguments().filter(|a| !a.is_hide_set()) {
        if let Some(help) = a.get_help() {
            let first: String = help.to_string().chars().take(20).collect();
            let first = first.replace('-', "\\-").replace('\'', "\\*(Aq");
            assert!(page.contains(&first), "help of {:?}: {first:?}", a.get_id());
        }
    }
    // The syntax of durations and sizes, as --help gives it (issue 28 item 5).
    assert!(
        page.contains(device::units::SYNTAX_HELP),
        "no syntax of durations"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("vhca.1");
    let st = Command::new(env!("CARGO_BIN_EXE_vhca-man"))
        .arg(&file)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), page);
}
