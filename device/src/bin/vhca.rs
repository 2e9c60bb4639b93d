//! `vhca`: serves one virtual InfiniBand HCA to QEMU over vfio-user (see
//! `vhca --help` and ARCHITECTURE.md).

use clap::Parser;
use device::cli::Cli;

fn main() {
    let cli = Cli::parse();
    let config = match cli.check() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vhca: {e}");
            std::process::exit(2);
        }
    };
    env_logger::Builder::new()
        .filter_level(config.log)
        .parse_env("RUST_LOG")
        .format_timestamp_micros()
        .init();
    if let Err(e) = device::run::serve(&config) {
        eprintln!("vhca: {e}");
        std::process::exit(1);
    }
}
