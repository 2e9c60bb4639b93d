//! `vhca-man`: writes the man page vhca(1), generated from the `vhca` command
//! line definition (`device::cli::Cli`, the one `vhca --help` prints), to
//! stdout or to the file named by its one argument:
//!
//! ```sh
//! vhca-man > /usr/local/share/man/man1/vhca.1
//! man -l vhca.1
//! ```

use std::io::Write;

fn main() {
    let page = device::cli::man_page();
    let r = match std::env::args_os().nth(1) {
        Some(path) => std::fs::write(&path, &page),
        None => std::io::stdout().lock().write_all(&page),
    };
    if let Err(e) = r {
        eprintln!("vhca-man: {e}");
        std::process::exit(1);
    }
}
