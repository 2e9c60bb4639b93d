//! `vhca`: serves one virtual InfiniBand HCA to QEMU over vfio-user (see
//! `vhca --help` and ARCHITECTURE.md); `vhca switch` runs an InfiniBand
//! switch of a fabric file (see `vhca switch --help`); `vhca topology`
//! writes a fabric file for a fat tree, a line or a ring of switches.

use device::switch_proc::SwitchCli;
use device::topology_cli::TopologyCli;
use device::units::ParseArgs;

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
        // clap's errors (usage line, exit status 2) for bad arguments.
        let cli = SwitchCli::parse_args(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit());
        let config = cli.check().unwrap_or_else(|e| e.exit());
        init_log(config.log);
        if let Err(e) = device::switch_proc::run(&config) {
            eprintln!("vhca switch: {e}");
            std::process::exit(1);
        }
        return;
    }
    // `vhca topology SHAPE ...`: a fabric file to stdout (issue 27).
    if std::env::args_os().nth(1).is_some_and(|a| a == "topology") {
        let cli = TopologyCli::parse_args(std::env::args_os().skip(1)).unwrap_or_else(|e| e.exit());
        print!("{}", cli.text().unwrap_or_else(|e| e.exit()));
        return;
    }
    let cli = device::cli_config::parse_or_exit();
    let config = cli.check().unwrap_or_else(|e| e.exit());
    init_log(config.log);
    if let Err(e) = device::run::serve(&config) {
        eprintln!("vhca: {e}");
        std::process::exit(1);
    }
}
