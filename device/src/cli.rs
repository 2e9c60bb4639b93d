//! The `vhca` command line (issue: the device): what the process serves, where its
//! port sits on the fabric, and the test and demo stages (capture, faults).
//!
//! Every argument is checked before anything is opened for the guest, and every
//! problem is one line naming the argument and what is wrong with it, so that a
//! script starting two devices fails at once and readably.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;

use crate::fabric::{FabricFile, FaultSpec, Node};

/// A virtual InfiniBand HCA: serves one PCI function to QEMU over vfio-user and
/// moves its port's packets over a UDP fabric.
///
/// Example:
///   vhca --socket /run/vhca/a.sock --fabric fabric.toml --node a
///
/// QEMU (>= 10.1) then attaches it with
///   -device '{"driver":"vfio-user-pci","socket":{"path":"/run/vhca/a.sock","type":"unix"}}'
/// and guest RAM shared through a memfd backend.
#[derive(Debug, Clone, Parser)]
#[command(name = "vhca", version, verbatim_doc_comment)]
pub struct Cli {
    /// Path of the vfio-user UNIX socket to listen on. A stale socket file left by
    /// an earlier run is replaced; its folder must exist.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,

    /// Fabric file (TOML): one [[node]] table per device with name, lid, guid and
    /// UDP address. It plays the subnet manager: this device takes its LID and
    /// port GUID from its own entry and reaches the others at theirs. The port
    /// is native InfiniBand, each packet one UDP datagram. Needs --node; or use
    /// --tap for an Ethernet (RoCEv2) port instead.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "tap",
        conflicts_with = "tap"
    )]
    pub fabric: Option<PathBuf>,

    /// This device's node name in the fabric file.
    #[arg(long, value_name = "NAME", requires = "fabric")]
    pub node: Option<String>,

    /// Ethernet port with RoCEv2 (WF-10) on TAP device NAME (created if missing;
    /// put it on a Linux bridge). RoCEv2 frames for --mac go to the transport.
    /// The Ethernet MTU sets the path MTU (1500 -> 1024, 9000 -> 4096).
    #[arg(long, value_name = "NAME", requires = "mac")]
    pub tap: Option<String>,

    /// The Ethernet port's MAC address, e.g. 52:54:00:00:00:01 (unicast). Give
    /// the guest's NIC the same MAC: the driver pairs the port with that netdev.
    #[arg(long, value_name = "MAC", requires = "tap")]
    pub mac: Option<String>,

    /// Write every packet sent and received to FILE (pcap, ERF InfiniBand
    /// records; Wireshark and tshark dissect it without plugins).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,

    /// Inject faults on this device's link, for tests and demos:
    /// comma-separated key=value from drop, dup, reorder, corrupt (rates 0..1),
    /// delay (e.g. 100us, 2ms), delay_rate (0..1), seed (integer).
    /// Example: --fault drop=0.05,dup=0.02,reorder=0.02,seed=7
    #[arg(long, value_name = "SPEC", verbatim_doc_comment)]
    pub fault: Option<String>,

    /// Log level: error, warn, info, debug or trace. RUST_LOG, when set,
    /// overrides it (and may name modules, e.g. RUST_LOG=device::cmdq=debug).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log: String,

    /// Print the device's counters (per port and per drop reason) to stderr every
    /// SECS seconds; they are also printed when the process exits.
    #[arg(long, value_name = "SECS")]
    pub counters_every: Option<u64>,

    /// How long (microseconds) the data path keeps polling the doorbells after
    /// its last work before it sleeps and asks the driver to ring WAKE. Longer
    /// saves WAKE round trips under steady traffic; shorter leaves the CPU to
    /// others sooner (0 = sleep as soon as idle). At most 1000000.
    #[arg(long, value_name = "USECS", default_value_t = 500)]
    pub busy_poll_us: u64,
}

/// The checked configuration a device starts from.
#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub fabric: Fabric,
    pub capture: Option<PathBuf>,
    pub fault: Option<FaultSpec>,
    pub log: log::LevelFilter,
    pub counters_every: Option<Duration>,
    pub busy_poll: Duration,
}

/// Where the port is. One per process, so the size difference of the variants
/// costs nothing.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Fabric {
    /// Native InfiniBand over UDP: the fabric file and this device's node.
    Udp { fabric: FabricFile, node: Node },
    /// Ethernet with RoCEv2 on a TAP device (WF-10).
    Tap {
        name: String,
        mac: transport::wire::roce::MacAddr,
    },
}

/// A problem with the command line, as one line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CliError(pub String);

fn parent_exists(arg: &str, p: &Path) -> Result<(), CliError> {
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if parent.is_dir() {
        Ok(())
    } else {
        Err(CliError(format!(
            "{arg} {}: folder {} does not exist",
            p.display(),
            parent.display()
        )))
    }
}

impl Cli {
    /// Checks every argument; opens nothing but the fabric file.
    pub fn check(&self) -> Result<Config, CliError> {
        if self.socket.as_os_str().is_empty() {
            return Err(CliError("--socket: empty path".into()));
        }
        parent_exists("--socket", &self.socket)?;
        if self.socket.is_dir() {
            return Err(CliError(format!(
                "--socket {}: is a folder; give the path of the socket file to create",
                self.socket.display()
            )));
        }
        let fabric = match (&self.fabric, &self.node, &self.tap, &self.mac) {
            (Some(file), Some(name), None, None) => {
                let fabric =
                    FabricFile::load(file).map_err(|e| CliError(format!("--fabric {e}")))?;
                let node = fabric.by_name(name).cloned().ok_or_else(|| {
                    let names: Vec<&str> = fabric.nodes().iter().map(|n| n.name.as_str()).collect();
                    CliError(format!(
                        "--node {}: not in {} (its nodes: {})",
                        name,
                        fabric.file(),
                        names.join(", ")
                    ))
                })?;
                Fabric::Udp { fabric, node }
            }
            (Some(_), None, _, _) => return Err(CliError("--fabric needs --node".into())),
            (None, _, Some(name), Some(mac)) => {
                if name.is_empty() || name.len() > 15 || name.contains('/') {
                    return Err(CliError(format!(
                        "--tap {name}: an interface name of 1 to 15 characters without '/'"
                    )));
                }
                let mac = crate::fabric::parse_mac(mac).ok_or_else(|| {
                    CliError(format!(
                        "--mac {mac}: not a unicast MAC address like 52:54:00:00:00:01"
                    ))
                })?;
                Fabric::Tap {
                    name: name.clone(),
                    mac,
                }
            }
            (None, _, Some(_), None) => return Err(CliError("--tap needs --mac".into())),
            _ => {
                return Err(CliError(
                    "give either --fabric FILE --node NAME (InfiniBand over UDP) or \
                     --tap NAME --mac MAC (RoCEv2 on Ethernet)"
                        .into(),
                ))
            }
        };
        if let Some(c) = &self.capture {
            parent_exists("--capture", c)?;
        }
        let fault = match &self.fault {
            Some(s) => Some(
                s.parse::<FaultSpec>()
                    .map_err(|e| CliError(format!("--fault {s}: {e}")))?,
            ),
            None => None,
        };
        let log = self.log.parse::<log::LevelFilter>().map_err(|_| {
            CliError(format!(
                "--log {}: not a level (error, warn, info, debug, trace, off)",
                self.log
            ))
        })?;
        let counters_every = match self.counters_every {
            Some(0) => {
                return Err(CliError(
                    "--counters-every 0: give a period of at least 1 second".into(),
                ))
            }
            Some(s) => Some(Duration::from_secs(s)),
            None => None,
        };
        if self.busy_poll_us > 1_000_000 {
            return Err(CliError(format!(
                "--busy-poll-us {}: at most 1000000 (one second)",
                self.busy_poll_us
            )));
        }
        Ok(Config {
            busy_poll: Duration::from_micros(self.busy_poll_us),
            socket: self.socket.clone(),
            fabric,
            capture: self.capture.clone(),
            fault,
            log,
            counters_every,
        })
    }
}
