//! The `vhca` command line (issue: the device): what the process serves, where its
//! port sits on the fabric, and the test and demo stages (capture, faults).
//!
//! Every argument is checked before anything is opened for the guest, and every
//! problem is one line naming the argument and what is wrong with it, so that a
//! script starting two devices fails at once and readably.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;

use transport::wire::roce::MacAddr;

use crate::counters_out::CountersFormat;
use crate::fabric::{FabricFile, FabricKey, FaultSpec, Node};

/// A virtual InfiniBand HCA: serves one PCI function to QEMU over vfio-user and
/// moves its port's packets over a UDP fabric (native InfiniBand, the default)
/// or, as a RoCE NIC, over a TAP device shared with the VM's virtio-net.
///
/// InfiniBand port on a UDP fabric:
///   vhca --socket /run/vhca/a.sock --fabric fabric.toml --node a
///
/// Ethernet port with RoCEv2 on TAP vhca0, and the VM's NIC on the same port:
///   vhca --socket /run/vhca/a.sock --tap vhca0 --mac 52:54:00:12:34:56 \
///        --vhost-user-net /run/vhca/a-net.sock
///
/// QEMU (>= 10.1) then attaches the HCA with
///   -device '{"driver":"vfio-user-pci","socket":{"path":"/run/vhca/a.sock","type":"unix"}}'
/// and the NIC with
///   -chardev socket,id=vn,path=/run/vhca/a-net.sock
///   -netdev vhost-user,id=n1,chardev=vn
///   -device virtio-net-pci,netdev=n1,mac=52:54:00:12:34:56
/// with guest RAM shared through a memfd backend (share=on).
///
/// An InfiniBand switch of a cabled fabric file: vhca switch --fabric FILE
/// --switch NAME (see vhca switch --help). A fabric file for a fat tree, a
/// line or a ring of switches: vhca topology (see vhca topology --help).
#[derive(Debug, Clone, Parser)]
#[command(name = "vhca", version, verbatim_doc_comment)]
pub struct Cli {
    /// --config, --print-capabilities, --socket-path (issue 28 item 2).
    #[command(flatten)]
    pub service: crate::cli_config::ServiceArgs,

    /// Path of the vfio-user UNIX socket to listen on. A stale socket file left by
    /// an earlier run is replaced; its folder must exist.
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,

    /// InfiniBand mode. Fabric file (TOML): one [[node]] table per device with
    /// name, lid, guid and UDP address. It plays the subnet manager: this device
    /// takes its LID and port GUID from its own entry and reaches the others at
    /// theirs. A top-level key_file = "FILE" (relative to the fabric file) or
    /// key = "HEX" gives the fabric key (see --fabric-key-file). A node may
    /// add lmc = N (it owns 2^N LIDs from its lid) and pkeys = ["0xffff", ...]
    /// (its P_Key table, bit 15 = full member; a top-level pkeys is every
    /// node's). The port is active while other nodes are heard (a keepalive
    /// each second; down after 5 s of silence, see --peer-silence-ms).
    /// A top-level sl2vl = [16 VLs] is the ports' SL-to-VL table (data VLs
    /// 0-7; default all 0), a [vl_arb] table with high = [[VL, weight], ...],
    /// low = [...] (weights in 64-byte units) and high_limit (4 KiB units)
    /// their VL arbitration (default: VLs in turn). With [[link]] tables
    /// (ends = ["a", "sw0:1"]) the file is cabling: the port sends every
    /// packet to its cable's other end, a node or a `vhca switch` port, and
    /// hears only from there (examples/fabric-switch.toml). The port's IB MTU
    /// is the largest the network under it carries without IP fragments
    /// (1024 on 1500 bytes, 4096 on 9000 or loopback); a top-level
    /// mtu = 256..4096 lowers it, never raises it.
    #[arg(long, value_name = "FILE", conflicts_with = "tap")]
    pub fabric: Option<PathBuf>,

    /// InfiniBand mode: this device's node name in the fabric file.
    #[arg(long, value_name = "NAME", conflicts_with = "tap")]
    pub node: Option<String>,

    /// InfiniBand mode: authenticate every datagram with the fabric key in
    /// FILE (64 hex digits, e.g. from `openssl rand -hex 32`; keep it mode 600),
    /// shared by every node: a 16-byte keyed MAC (BLAKE3) and a sequence number
    /// per datagram, so that whoever can reach the UDP port but lacks the key
    /// cannot inject or replay packets. Overrides the fabric file's key or
    /// key_file. Off by default (a fabric inside one host needs no key).
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "tap",
        verbatim_doc_comment
    )]
    pub fabric_key_file: Option<PathBuf>,

    /// RoCE mode: the port is Ethernet with RoCEv2, on this TAP device (opened,
    /// or created if missing; bring it up and plug it into a bridge yourself).
    /// RoCEv2 frames for --mac go to the HCA, every other frame to and from the
    /// VM's virtio-net (--vhost-user-net).
    #[arg(long, value_name = "NAME")]
    pub tap: Option<String>,

    /// RoCE mode: the port's MAC address, XX:XX:XX:XX:XX:XX (also the MAC the
    /// VM's virtio-net reports; give QEMU's virtio-net-pci the same mac=).
    #[arg(long, value_name = "MAC", requires = "tap")]
    pub mac: Option<String>,

    /// RoCE mode: serve a vhost-user-net backend on this UNIX socket for QEMU's
    /// `-netdev vhost-user` (a stale socket file is replaced; served again after
    /// each disconnect). Without it, frames for the guest are dropped.
    #[arg(long, value_name = "PATH", requires = "tap")]
    pub vhost_user_net: Option<PathBuf>,

    /// Write every packet sent and received to FILE (pcap; ERF InfiniBand
    /// records, or Ethernet frames in RoCE mode; Wireshark and tshark dissect it
    /// without plugins).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,

    /// Inject faults on this device's link, for tests and demos:
    /// comma-separated key=value from drop, dup, reorder, corrupt (rates 0..1),
    /// delay (e.g. 100us, 2ms), delay_rate (0..1), seed (integer),
    /// drop_dlid (a LID: every InfiniBand packet to it is lost, a dead path),
    /// drop_dlid_after (N: the path to drop_dlid dies after N packets to it).
    /// Example: --fault drop=0.05,dup=0.02,reorder=0.02,seed=7
    #[arg(long, value_name = "SPEC", verbatim_doc_comment)]
    pub fault: Option<String>,

    /// Log level: error, warn, info, debug or trace. RUST_LOG, when set,
    /// overrides it (and may name modules, e.g. RUST_LOG=device::cmdq=debug).
    #[arg(long, value_name = "LEVEL", default_value = "info")]
    pub log: String,

    /// Print the device's counters (per port and per drop reason) to stderr every
    /// SECS seconds, in the --counters-format; they are also printed when the
    /// process exits. Also the period of --counters-file.
    #[arg(long, value_name = "SECS")]
    pub counters_every: Option<u64>,

    /// The format of the counters printed to stderr (--counters-every and the
    /// exit report): `text` for people, or `json`, one JSON object per line.
    #[arg(long, value_name = "text|json", default_value = "text", value_parser = ["text", "json"])]
    pub counters_format: String,

    /// Keep the device's counters in FILE, one JSON object (as
    /// --counters-format json prints it), rewritten every --counters-every
    /// period (every second without it) and at exit: written beside FILE and
    /// renamed over it, so that a reader always sees a whole object. Read a
    /// running device's counters with e.g. `jq . FILE`.
    #[arg(long, value_name = "FILE")]
    pub counters_file: Option<PathBuf>,

    /// How long (microseconds) the data path keeps polling the doorbells after
    /// its last work before it sleeps and asks the driver to ring WAKE. Longer
    /// saves WAKE round trips under steady traffic; shorter leaves the CPU to
    /// others sooner (0 = sleep as soon as idle). At most 1000000.
    #[arg(long, value_name = "USECS", default_value_t = 500)]
    pub busy_poll_us: u64,

    /// RC loss recovery: `on` (default) sends a probe when nothing was
    /// acknowledged for about two round trips, so a lost tail is resent
    /// without waiting for the local ACK timeout (issue 14); `off` leaves
    /// recovery to the ACK timer and sequence NAKs alone (for comparison).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub loss_probes: String,

    /// RC end-to-end credits (RL-13): `on` (default) reports the receive
    /// queue's free WQEs in every ACK and keeps each sender within what its
    /// peer reports, so a receiver short of buffers holds its sender back
    /// instead of sending RNR NAKs; `off` sends no count and ignores the
    /// peer's (for comparison).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub credits: String,

    /// Automatic path migration (AD-10): an RC QP whose alternate path is
    /// armed moves to it after this many local ACK timeouts in a row on its
    /// primary path (at the latest at the one that would exhaust its retry
    /// count); 0: only when its peer or the guest migrates it. 0..=8.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=8))]
    pub apm_timeouts: u8,

    /// The least time (microseconds) without an acknowledgement before a loss
    /// probe, whatever the measured round trip. A busy host that deschedules
    /// a peer for milliseconds makes shorter probes spurious, and each costs
    /// throughput; longer ones recover a lost tail later (still well before
    /// the ACK timeout). Each QP raises its own floor above this one when
    /// its probes prove spurious (`--loss-probe-adapt`). 10..=1000000.
    #[arg(long, value_name = "USECS", default_value_t = 1000)]
    pub loss_probe_min_us: u64,

    /// RC loss recovery: `on` (default) lets each QP raise its probe floor
    /// above `--loss-probe-min-us` when its probes prove spurious (the
    /// original was answered too: the peer was only late) and lower it back
    /// when they prove useful; `off` keeps the floor fixed.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub loss_probe_adapt: String,

    /// RC loss recovery: `on` (default) lets a go-back answer the sequence
    /// NAKs that come within a round trip for PSNs it already resends (a
    /// reordered packet provokes two); `off` goes back again for each.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub loss_go_back_bound: String,
    /// Host memory the device may hold for its guest: MR page lists, the WQEs
    /// taken from the guest's rings, QP and responder state (bytes, or with a
    /// K, M or G suffix). Past it, registrations and QP creations fail with
    /// NO_RESOURCES (ENOMEM) and new WQEs wait in their rings; each refusal is
    /// counted (ARCHITECTURE.md §9). The device's limits (QUERY_DEVICE) never
    /// promise more. At least 4M.
    #[arg(long, value_name = "SIZE", default_value = "256M")]
    pub mem_budget: String,

    /// InfiniBand mode: after this long (milliseconds) without a datagram
    /// from any other node of the fabric the port is down (a port error
    /// event, QUERY_PORT Down) until one is heard again (port active).
    /// Every node sends a keepalive to the others each second (each fifth
    /// of this, if that is shorter). 0: the port never goes down; else
    /// 100..=3600000.
    #[arg(long, value_name = "MSECS", default_value_t = 5000)]
    pub peer_silence_ms: u64,

    /// RC request packets the port keeps in flight to each destination (a
    /// peer's LID, or GID on RoCE) over all the QPs to it (0: no bound).
    /// Each QP has its own window; this bounds their sum, so that many
    /// active QPs do not overflow the peer's receive socket buffer, and a
    /// dead peer holds only its own share (ARCHITECTURE.md §3). The default,
    /// 1024 full-MTU packets, is what the UDP link sizes its receive buffer
    /// for (4 MiB), four times one QP's largest window.
    #[arg(long, value_name = "PACKETS", default_value_t = transport::engine::DEFAULT_PORT_WINDOW)]
    pub port_window: u32,

    /// RC/XRC receive reorder hold (microseconds; 0: off): a packet that
    /// arrives one PSN ahead of the one its QP expects waits this long for
    /// the packet it overtook, so that a swap of two packets on the fabric
    /// costs no sequence NAK and go-back (or READ re-request). At most 16
    /// packets are held per port. 0..=10000.
    #[arg(long, value_name = "USECS", default_value_t = transport::engine::DEFAULT_REORDER_HOLD_NS / 1000)]
    pub reorder_hold_us: u64,
}

/// The man page vhca(1) in roff, from the same definition as `--help`
/// (the `vhca-man` binary writes it).
pub fn man_page() -> Vec<u8> {
    use clap::CommandFactory;
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .expect("rendering into a Vec cannot fail");
    out
}

/// The smallest `--mem-budget`: room for the GSI QP, some MRs and WQEs.
pub const MIN_MEM_BUDGET: u64 = 4 << 20;

/// Parses a size: bytes, or a number with a K, M or G suffix (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.eq_ignore_ascii_case(&'k') => (&t[..i], 10),
        Some((i, c)) if c.eq_ignore_ascii_case(&'m') => (&t[..i], 20),
        Some((i, c)) if c.eq_ignore_ascii_case(&'g') => (&t[..i], 30),
        _ => (t, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("{s}: not a size (bytes, or a number with K, M or G)"))
}

/// Where the port's packets go.
#[derive(Debug, Clone)]
pub enum FabricMode {
    /// Native InfiniBand packets over UDP, nodes from a fabric file (`ib-udp`);
    /// with a fabric key, every datagram is authenticated (issue 13).
    IbUdp {
        fabric: Box<FabricFile>,
        node: Node,
        key: Option<FabricKey>,
    },
    /// Ethernet with RoCEv2 on a TAP shared with the guest's virtio-net (`roce`,
    /// WF-10).
    Roce {
        tap: String,
        mac: MacAddr,
        vhost_user_net: Option<PathBuf>,
    },
}

/// The checked configuration a device starts from.
#[derive(Debug, Clone)]
pub struct Config {
    pub socket: PathBuf,
    pub mode: FabricMode,
    pub capture: Option<PathBuf>,
    pub fault: Option<FaultSpec>,
    pub log: log::LevelFilter,
    pub counters_every: Option<Duration>,
    /// `--counters-format`.
    pub counters_format: CountersFormat,
    /// `--counters-file`.
    pub counters_file: Option<PathBuf>,
    pub busy_poll: Duration,
    pub loss_probes: bool,
    /// `--credits on`.
    pub credits: bool,
    /// `--apm-timeouts` (AD-10).
    pub apm_timeouts: u8,
    pub loss_probe_min: Duration,
    /// `--loss-probe-adapt on`.
    pub loss_probe_adapt: bool,
    /// `--loss-go-back-bound on`.
    pub loss_go_back_bound: bool,
    /// Host bytes the device may hold for its guest (`--mem-budget`).
    pub mem_budget: u64,
    /// `--peer-silence-ms` (AE-01): the keepalive period and the silence
    /// after which the ib-udp port is down; `None`: never down.
    pub liveness: Option<(Duration, Duration)>,
    /// `--port-window`.
    pub port_window: u32,
    /// `--reorder-hold-us`.
    pub reorder_hold: Duration,
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

/// Parses `XX:XX:XX:XX:XX:XX` (hex, either case; `-` also accepted).
pub fn parse_mac(s: &str) -> Result<MacAddr, String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    let bad = || format!("{s}: not a MAC address (expected XX:XX:XX:XX:XX:XX)");
    if parts.len() != 6 {
        return Err(bad());
    }
    let mut mac = [0u8; 6];
    for (b, p) in mac.iter_mut().zip(&parts) {
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if mac[0] & 1 != 0 {
        return Err(format!("{s}: a multicast address cannot be a port's MAC"));
    }
    if mac == [0; 6] {
        return Err(format!("{s}: the all-zero address cannot be a port's MAC"));
    }
    Ok(mac)
}

fn check_socket_path(arg: &str, p: &Path) -> Result<(), CliError> {
    if p.as_os_str().is_empty() {
        return Err(CliError(format!("{arg}: empty path")));
    }
    parent_exists(arg, p)?;
    if p.is_dir() {
        return Err(CliError(format!(
            "{arg} {}: is a folder; give the path of the socket file to create",
            p.display()
        )));
    }
    Ok(())
}

/// `--log LEVEL` (`vhca` and `vhca switch`).
pub(crate) fn check_log(level: &str) -> Result<log::LevelFilter, CliError> {
    level.parse::<log::LevelFilter>().map_err(|_| {
        CliError(format!(
            "--log {level}: not a level (error, warn, info, debug, trace, off)"
        ))
    })
}

/// `--counters-every SECS` (`vhca` and `vhca switch`).
pub(crate) fn check_counters_every(secs: Option<u64>) -> Result<Option<Duration>, CliError> {
    match secs {
        Some(0) => Err(CliError(
            "--counters-every 0: give a period of at least 1 second".into(),
        )),
        s => Ok(s.map(Duration::from_secs)),
    }
}

/// `--peer-silence-ms` (AE-01; `vhca` and `vhca switch`): the keepalive
/// period and the silence after which the link is down, or none.
pub(crate) fn check_peer_silence(ms: u64) -> Result<Option<(Duration, Duration)>, CliError> {
    match ms {
        0 => Ok(None),
        ms if (100..=3_600_000).contains(&ms) => {
            let dead = Duration::from_millis(ms);
            Ok(Some((Duration::from_secs(1).min(dead / 5), dead)))
        }
        ms => Err(CliError(format!(
            "--peer-silence-ms {ms}: 0 (never down) or 100 to 3600000"
        ))),
    }
}

impl Cli {
    /// The fabric mode: `--fabric`/`--node` or `--tap`/`--mac`.
    fn mode(&self) -> Result<FabricMode, CliError> {
        if let Some(tap) = &self.tap {
            if tap.is_empty() || tap.len() >= 16 || tap.contains(['/', ' ', '\0']) {
                return Err(CliError(format!(
                    "--tap {tap}: not an interface name (1 to 15 characters, no '/' or space)"
                )));
            }
            let Some(mac) = &self.mac else {
                return Err(CliError(
                    "--tap needs --mac XX:XX:XX:XX:XX:XX (the port's MAC address)".into(),
                ));
            };
            let mac = parse_mac(mac).map_err(|e| CliError(format!("--mac {e}")))?;
            if let Some(p) = &self.vhost_user_net {
                check_socket_path("--vhost-user-net", p)?;
                if *p == self.socket {
                    return Err(CliError(format!(
                        "--vhost-user-net {}: the same path as --socket",
                        p.display()
                    )));
                }
            }
            return Ok(FabricMode::Roce {
                tap: tap.clone(),
                mac,
                vhost_user_net: self.vhost_user_net.clone(),
            });
        }
        let (Some(file), Some(name)) = (&self.fabric, &self.node) else {
            return Err(CliError(
                "give --fabric FILE --node NAME (InfiniBand) or --tap NAME --mac MAC (RoCE)".into(),
            ));
        };
        let fabric = FabricFile::load(file).map_err(|e| CliError(format!("--fabric {e}")))?;
        let node = fabric.by_name(name).cloned().ok_or_else(|| {
            let names: Vec<&str> = fabric.nodes().iter().map(|n| n.name.as_str()).collect();
            CliError(format!(
                "--node {}: not in {} (its nodes: {})",
                name,
                fabric.file(),
                names.join(", ")
            ))
        })?;
        let key = match &self.fabric_key_file {
            Some(p) => Some(
                FabricKey::load(p)
                    .map_err(|e| CliError(format!("--fabric-key-file {}: {e}", p.display())))?,
            ),
            None => fabric.key().cloned(),
        };
        Ok(FabricMode::IbUdp {
            fabric: Box::new(fabric),
            node,
            key,
        })
    }

    /// Checks every argument; opens nothing but the fabric file.
    pub fn check(&self) -> Result<Config, CliError> {
        check_socket_path("--socket", &self.socket)?;
        let mode = self.mode()?;
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
        let log = check_log(&self.log)?;
        let counters_every = check_counters_every(self.counters_every)?;
        let counters_format = self
            .counters_format
            .parse::<CountersFormat>()
            .map_err(|e| CliError(format!("--counters-format {e}")))?;
        if let Some(f) = &self.counters_file {
            parent_exists("--counters-file", f)?;
            if f.is_dir() {
                return Err(CliError(format!(
                    "--counters-file {}: is a folder; give the path of the file to write",
                    f.display()
                )));
            }
        }
        if !(10..=1_000_000).contains(&self.loss_probe_min_us) {
            return Err(CliError(format!(
                "--loss-probe-min-us {}: from 10 to 1000000",
                self.loss_probe_min_us
            )));
        }
        if self.reorder_hold_us > 10_000 {
            return Err(CliError(format!(
                "--reorder-hold-us {}: from 0 to 10000",
                self.reorder_hold_us
            )));
        }
        if self.busy_poll_us > 1_000_000 {
            return Err(CliError(format!(
                "--busy-poll-us {}: at most 1000000 (one second)",
                self.busy_poll_us
            )));
        }
        let liveness = check_peer_silence(self.peer_silence_ms)?;
        let mem_budget =
            parse_size(&self.mem_budget).map_err(|e| CliError(format!("--mem-budget {e}")))?;
        if mem_budget < MIN_MEM_BUDGET {
            return Err(CliError(format!(
                "--mem-budget {}: at least 4M",
                self.mem_budget
            )));
        }
        Ok(Config {
            liveness,
            mem_budget,
            busy_poll: Duration::from_micros(self.busy_poll_us),
            loss_probes: self.loss_probes == "on",
            credits: self.credits == "on",
            apm_timeouts: self.apm_timeouts,
            loss_probe_min: Duration::from_micros(self.loss_probe_min_us),
            loss_probe_adapt: self.loss_probe_adapt == "on",
            loss_go_back_bound: self.loss_go_back_bound == "on",
            socket: self.socket.clone(),
            mode,
            capture: self.capture.clone(),
            fault,
            log,
            counters_every,
            counters_format,
            counters_file: self.counters_file.clone(),
            port_window: self.port_window,
            reorder_hold: Duration::from_micros(self.reorder_hold_us),
        })
    }
}
