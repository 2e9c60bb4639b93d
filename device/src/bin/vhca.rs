//! `vhca`: serves one virtual InfiniBand HCA to QEMU over vfio-user (see
//! `vhca --help` and ARCHITECTURE.md); `vhca switch` runs an InfiniBand
//! switch of a fabric file (see `vhca switch --help`); `vhca topology`
//! writes a fabric file for a fat tree, a line or a ring of switches.

use clap::Parser;
use device::switch_proc::SwitchCli;
use device::topology_cli::TopologyCli;

fn init_log(level: log::LevelFilter) {
    env_logger::Builder::new()
        .filter_level(level)
        .parse_env("RUST_LOG")
        .format_timestamp_micros()
        .init();
}

fn main() {
    // `vhca switch ...`: a subcommand in front of the device's own options,
    // which stay as they are (no `vhca device` to type).
    if std::env::args_os().nth(1).is_some_and(|a| a == "switch") {
        let cli = SwitchCli::parse_from(std::env::args_os().skip(1));
        let config = match cli.check() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("vhca switch: {e}");
                std::process::exit(2);
            }
        };
        init_log(config.log);
        if let Err(e) = device::switch_proc::run(&config) {
            eprintln!("vhca switch: {e}");
            std::process::exit(1);
        }
        return;
    }
    // `vhca topology SHAPE ...`: a fabric file to stdout (issue 27).
    if std::env::args_os().nth(1).is_some_and(|a| a == "topology") {
        let cli = TopologyCli::parse_from(std::env::args_os().skip(1));
        match cli.text() {
            Ok(t) => print!("{t}"),
            Err(e) => {
                eprintln!("vhca topology: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    let cli = device::cli_config::parse_or_exit();
    let config = match cli.check() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vhca: {e}");
            std::process::exit(2);
        }
    };
    init_log(config.log);
    if let Err(e) = device::run::serve(&config) {
        eprintln!("vhca: {e}");
        std::process::exit(1);
    }
}
