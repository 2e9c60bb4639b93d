//! `vhca switch`'s command line: which switch of which fabric file, and the
//! counters and log options `vhca` has. Every problem is a clap error with
//! the usage line, naming the argument.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use super::{Config, Mode};
use crate::cli::{
    busy_poll, busy_poll_us, counters_every, liveness, parse_log, peer_silence, peer_silence_ms,
    CliError,
};
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
#[command(after_help = crate::units::SYNTAX_HELP)]
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
    #[arg(long, value_name = "LEVEL", default_value = "info", value_parser = parse_log)]
    pub log: log::LevelFilter,

    /// Print the counters (per port, per drop reason) to stderr every
    /// DURATION (e.g. 1s, 500ms; a bare number counts seconds); they are
    /// also printed at exit (SIGTERM, SIGINT). At least 100ms.
    #[arg(long, value_name = "DURATION", value_parser = counters_every())]
    pub counters_every: Option<Duration>,

    /// `text` or `json` (one object per line) for the printed counters.
    #[arg(long, value_name = "text|json", default_value = "text", value_parser = ["text", "json"])]
    pub counters_format: String,

    /// Keep the counters in FILE, one JSON object rewritten atomically every
    /// --counters-every period (every second without it) and at exit.
    #[arg(long, value_name = "FILE")]
    pub counters_file: Option<PathBuf>,

    /// After this long (a duration, e.g. 5s, 500ms) without a datagram from
    /// a port's cable peer the port is Down; a keepalive goes to each peer
    /// every second (each fifth of this, if shorter). 0: no keepalives,
    /// every cabled port up from the start; else from 100ms to 3600s.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = peer_silence())]
    pub peer_silence: Duration,

    /// The old spelling of --peer-silence: milliseconds.
    #[arg(long, value_name = "MSECS", hide = true, conflicts_with = "peer_silence", value_parser = peer_silence_ms())]
    pub peer_silence_ms: Option<Duration>,

    /// How long (a duration, e.g. 500us) the switch keeps polling its ports
    /// after the last packet before it sleeps on epoll: a packet that finds
    /// the switch awake saves a wake-up per hop (0 = sleep as soon as idle;
    /// polling yields the CPU each turn and stops while the CPU is
    /// contended). At most 1s.
    #[arg(long, value_name = "DURATION", default_value = "500us", value_parser = busy_poll())]
    pub busy_poll: Duration,

    /// The old spelling of --busy-poll: microseconds.
    #[arg(long, value_name = "USECS", hide = true, conflicts_with = "busy_poll", value_parser = busy_poll_us())]
    pub busy_poll_us: Option<Duration>,

    /// Serve the switch's counters to Prometheus at http://ADDR/metrics
    /// (as `vhca --metrics-listen`; port 0 picks a free port, which the log
    /// names): `vhca_switch_port_<counter>_total{port}`,
    /// `vhca_switch_drops_total{reason}`, ... No authentication: bind it to
    /// loopback or a management network.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
}

impl SwitchCli {
    /// Checks what clap's parsers could not; opens nothing but the fabric
    /// (and key) file. The error is clap's, with the usage line.
    pub fn check(&self) -> Result<Config, clap::Error> {
        self.checked()
            .map_err(|e| crate::units::usage_error::<SwitchCli>(None, e))
    }

    fn checked(&self) -> Result<Config, CliError> {
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
        let mode = Mode::of(&fabric);
        Ok(Config {
            fabric,
            switch: self.switch.clone(),
            key,
            log: self.log,
            counters_every: self.counters_every,
            counters_format,
            counters_file: self.counters_file.clone(),
            liveness: liveness(self.peer_silence_ms.unwrap_or(self.peer_silence)),
            mode,
            busy_poll: self.busy_poll_us.unwrap_or(self.busy_poll),
            metrics_listen: self.metrics_listen,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::ParseArgs;
    use std::time::Duration;

    fn cli(args: &[&str]) -> Result<Config, String> {
        let example = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/fabric-switch.toml"
        );
        let mut argv = vec!["vhca switch", "--fabric", example];
        argv.extend_from_slice(args);
        SwitchCli::parse_args(argv)
            .map_err(|e| e.to_string())?
            .check()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn vhca_switch_arguments_are_checked_with_the_usage_line() {
        let c = cli(&["--switch", "sw0"]).unwrap();
        assert_eq!((c.switch.as_str(), c.mode), ("sw0", Mode::Static));
        assert_eq!(
            c.liveness,
            Some((Duration::from_secs(1), Duration::from_secs(5)))
        );
        assert_eq!(c.busy_poll, Duration::from_micros(500));
        let help = SwitchCli::try_parse_from(["vhca switch", "--help"]).unwrap_err();
        assert!(help.to_string().contains(crate::units::SYNTAX_HELP));
        let c = cli(&["--switch", "sw0", "--busy-poll", "0"]).unwrap();
        assert_eq!(c.busy_poll, Duration::ZERO);
        // The old spellings, a bare number in their old unit.
        let c = cli(&["--switch", "sw0", "--busy-poll-us", "20"]).unwrap();
        assert_eq!(c.busy_poll, Duration::from_micros(20));
        let c = cli(&["--switch", "sw0", "--peer-silence-ms", "500"]).unwrap();
        assert_eq!(c.liveness.unwrap().1, Duration::from_millis(500));
        let c = cli(&["--switch", "sw0", "--peer-silence", "0"]).unwrap();
        assert_eq!(c.liveness, None);
        let c = cli(&["--switch", "sw0", "--counters-every", "250ms"]).unwrap();
        assert_eq!(c.counters_every, Some(Duration::from_millis(250)));
        for (args, why) in [
            (
                &["--switch", "sw0", "--busy-poll-us", "1000001"][..],
                "'--busy-poll-us <USECS>': from 0 to 1s",
            ),
            (
                &["--switch", "sw0", "--busy-poll", "2s"][..],
                "'--busy-poll <DURATION>': from 0 to 1s",
            ),
            (&["--switch", "sw1"], "--switch sw1: not in "),
            (
                &["--switch", "sw0", "--peer-silence-ms", "50"],
                "'--peer-silence-ms <MSECS>': 0 (off) or from 100ms to 3600s",
            ),
            (
                &["--switch", "sw0", "--peer-silence", "50ms"],
                "'--peer-silence <DURATION>': 0 (off) or from 100ms",
            ),
            (
                &["--switch", "sw0", "--counters-every", "0"],
                "'--counters-every <DURATION>'",
            ),
            (
                &["--switch", "sw0", "--log", "loud"],
                "'--log <LEVEL>': not a level",
            ),
        ] {
            let e = cli(args).unwrap_err();
            assert!(e.contains(why), "{args:?}: {e}");
            assert!(e.contains("\nUsage: vhca switch "), "{args:?}: {e}");
        }
    }
}
