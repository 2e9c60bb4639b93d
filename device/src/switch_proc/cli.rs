//! `vhca switch`'s command line: which switch of which fabric file, and the
//! counters and log options `vhca` has. Every problem is one line naming the
//! argument.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::{Config, Mode};
use crate::cli::{check_counters_every, check_log, check_peer_silence, CliError};
use crate::counters_out::CountersFormat;
use crate::fabric::{FabricFile, FabricKey};

/// An InfiniBand switch for a vhca fabric: one UDP socket per cabled port
/// (its address from the fabric file), forwarding by DLID through the
/// linear forwarding table, multicast through the multicast table, subnet
/// management packets (VL15, directed route) answered by the switch's own
/// SMA.
///
///   vhca switch --fabric examples/fabric-switch.toml --switch sw0
///
/// The fabric file's [[switch]] table names the switch (name, guid, ports,
/// address of port 1 or one per port, optional lid) and its [[link]] tables
/// the cables (ends = ["a", "sw0:1"]). Without a subnet manager (static
/// mode) the ports are Active as soon as their cable's other end is heard
/// and the forwarding table comes from the cabling: each node's LIDs leave
/// by the port of a shortest path; multicast goes out every port cabled to
/// an HCA and the switch links of one spanning tree of the switches.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "vhca switch",
    bin_name = "vhca switch",
    version,
    verbatim_doc_comment
)]
pub struct SwitchCli {
    /// The fabric file (TOML) with the [[switch]] and [[link]] tables.
    #[arg(long, value_name = "FILE")]
    pub fabric: PathBuf,

    /// The switch's name in the fabric file.
    #[arg(long, value_name = "NAME")]
    pub switch: String,

    /// Authenticate every datagram on every port with the fabric key in
    /// FILE (as `vhca --fabric-key-file`); overrides the fabric file's key.
    #[arg(long, value_name = "FILE")]
    pub fabric_key_file: Option<PathBuf>,

    /// Log level: error, warn, info, debug or trace (RUST_LOG overrides).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log: String,

    /// Print the counters (per port, per drop reason) to stderr every SECS
    /// seconds; they are also printed at exit (SIGTERM, SIGINT).
    #[arg(long, value_name = "SECS")]
    pub counters_every: Option<u64>,

    /// `text` or `json` (one object per line) for the printed counters.
    #[arg(long, value_name = "text|json", default_value = "text", value_parser = ["text", "json"])]
    pub counters_format: String,

    /// Keep the counters in FILE, one JSON object rewritten atomically every
    /// --counters-every period (every second without it) and at exit.
    #[arg(long, value_name = "FILE")]
    pub counters_file: Option<PathBuf>,

    /// After this long (milliseconds) without a datagram from a port's
    /// cable peer the port is Down; a keepalive goes to each peer every
    /// second (each fifth of this, if shorter). 0: no keepalives, every
    /// cabled port up from the start; else 100..=3600000.
    #[arg(long, value_name = "MSECS", default_value_t = 5000)]
    pub peer_silence_ms: u64,

    /// How long (microseconds) the switch keeps polling its ports after the
    /// last packet before it sleeps on epoll: a packet that finds the switch
    /// awake saves a wake-up per hop (0 = sleep as soon as idle; polling
    /// yields the CPU each turn and stops while the CPU is contended). At
    /// most 1000000.
    #[arg(long, value_name = "USECS", default_value_t = 500)]
    pub busy_poll_us: u64,

    /// Serve the switch's counters to Prometheus at http://ADDR/metrics
    /// (as `vhca --metrics-listen`; port 0 picks a free port, which the log
    /// names): `vhca_switch_port_<counter>_total{port}`,
    /// `vhca_switch_drops_total{reason}`, ... No authentication: bind it to
    /// loopback or a management network.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl SwitchCli {
    /// Checks every argument; opens nothing but the fabric (and key) file.
    pub fn check(&self) -> Result<Config, CliError> {
        let fabric =
            FabricFile::load(&self.fabric).map_err(|e| CliError(format!("--fabric {e}")))?;
        if fabric.cabling().switch(&self.switch).is_none() {
            let names: Vec<&str> = fabric
                .cabling()
                .switches()
                .iter()
                .map(|s| s.name.as_str())
                .collect();
            return Err(CliError(format!(
                "--switch {}: not in {} (its switches: {})",
                self.switch,
                fabric.file(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            )));
        }
        let key = match &self.fabric_key_file {
            Some(p) => Some(
                FabricKey::load(p)
                    .map_err(|e| CliError(format!("--fabric-key-file {}: {e}", p.display())))?,
            ),
            None => fabric.key().cloned(),
        };
        let log = check_log(&self.log)?;
        let counters_every = check_counters_every(self.counters_every)?;
        let counters_format = self
            .counters_format
            .parse::<CountersFormat>()
            .map_err(|e| CliError(format!("--counters-format {e}")))?;
        if let Some(f) = &self.counters_file {
            if f.is_dir() {
                return Err(CliError(format!(
                    "--counters-file {}: is a folder; give the path of the file to write",
                    f.display()
                )));
            }
        }
        let liveness = check_peer_silence(self.peer_silence_ms)?;
        if self.busy_poll_us > 1_000_000 {
            return Err(CliError(format!(
                "--busy-poll-us {}: at most 1000000 (one second)",
                self.busy_poll_us
            )));
        }
        let mode = Mode::of(&fabric);
        Ok(Config {
            fabric,
            switch: self.switch.clone(),
            key,
            log,
            counters_every,
            counters_format,
            counters_file: self.counters_file.clone(),
            liveness,
            mode,
            busy_poll: Duration::from_micros(self.busy_poll_us),
            metrics_listen: self.metrics_listen,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cli(args: &[&str]) -> Result<Config, String> {
        let example = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/fabric-switch.toml"
        );
        let mut argv = vec!["vhca switch", "--fabric", example];
        argv.extend_from_slice(args);
        SwitchCli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .check()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn vhca_switch_arguments_are_checked_with_one_line_each() {
        let c = cli(&["--switch", "sw0"]).unwrap();
        assert_eq!((c.switch.as_str(), c.mode), ("sw0", Mode::Static));
        assert_eq!(
            c.liveness,
            Some((Duration::from_secs(1), Duration::from_secs(5)))
        );
        assert_eq!(c.busy_poll, Duration::from_micros(500));
        let c = cli(&["--switch", "sw0", "--busy-poll-us", "0"]).unwrap();
        assert_eq!(c.busy_poll, Duration::ZERO);
        for (args, why) in [
            (
                &["--switch", "sw0", "--busy-poll-us", "1000001"][..],
                "--busy-poll-us 1000001: at most 1000000",
            ),
            (&["--switch", "sw1"], "--switch sw1: not in "),
            (
                &["--switch", "sw0", "--peer-silence-ms", "50"],
                "--peer-silence-ms 50: 0 (never down) or 100",
            ),
            (
                &["--switch", "sw0", "--counters-every", "0"],
                "--counters-every 0",
            ),
            (
                &["--switch", "sw0", "--log", "loud"],
                "--log loud: not a level",
            ),
        ] {
            let e = cli(args).unwrap_err();
            assert!(e.contains(why) && e.lines().count() == 1, "{args:?}: {e}");
        }
    }
}
