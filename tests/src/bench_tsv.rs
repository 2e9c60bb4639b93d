//! Machine-readable benchmark figures (issue 28 item 7): with
//! `VHCA_BENCH_TSV=FILE` a benchmark example appends one row per figure it
//! prints, `figure TAB series TAB x TAB stat TAB value TAB unit`, which its
//! `scripts/bench-*.sh` turns into `bench-results/NAME.tsv` (adding the
//! date, command and commit) for `scripts/plot-benchmarks.py`. Without the
//! variable nothing is written, and the printed lines stay what a reader
//! reads.

use std::fmt::Display;
use std::io::Write;

/// Appends one figure to `$VHCA_BENCH_TSV` (if set): `figure` names the
/// measurement (e.g. `aggregate-write`), `series` the line it belongs to
/// (e.g. `vhca`), `x` its abscissa (a QP count, a loss rate; empty for a
/// single figure), `stat` what the value is (`one` for one run's figure, or
/// `ratio` for one against the same run's baseline). A failure to write is
/// reported on stderr and does not stop the benchmark.
pub fn row(figure: &str, series: &str, x: impl Display, stat: &str, value: f64, unit: &str) {
    let Some(path) = std::env::var_os("VHCA_BENCH_TSV") else {
        return;
    };
    let line = format!("{figure}\t{series}\t{x}\t{stat}\t{value}\t{unit}\n");
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = r {
        eprintln!("VHCA_BENCH_TSV {}: {e}", path.to_string_lossy());
    }
}
