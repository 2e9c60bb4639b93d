//! The `vhca` command line (issue: the device): what the process serves, where its
//! port sits on the fabric, and the test and demo stages (capture, faults).
//!
//! Every argument is checked before anything is opened for the guest, and every
//! problem is one line naming the argument and what is wrong with it, so that a
//! script starting two devices fails at once and readably.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{ArgAction, ArgGroup, Parser};

pub use transport::cc::dcqcn::Params as DcqcnParams;
use transport::wire::roce::MacAddr;

use crate::counters_out::CountersFormat;
use crate::fabric::{FabricFile, FabricKey, FaultSpec, Node};
use crate::units::{self, duration_in, legacy_duration_in, on_off, usage_error};

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
#[command(after_help = units::SYNTAX_HELP)]
// The InfiniBand options and the RoCE ones exclude each other: each option
// names the other group (an option's own conflicts, which --config reads
// through clap's get_arg_conflicts_with to let a file's option give way to
// the command line's; a group's conflicts have no getter).
#[command(group(ArgGroup::new("ib").args(["fabric", "node", "fabric_key_file"]).multiple(true)))]
#[command(group(ArgGroup::new("roce").args(["tap", "mac", "vhost_user_net"]).multiple(true)))]
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
    /// each second; down after 5 s of silence, see --peer-silence).
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
    #[arg(long, value_name = "FILE", requires = "node", conflicts_with = "roce")]
    pub fabric: Option<PathBuf>,

    /// InfiniBand mode: this device's node name in the fabric file.
    #[arg(
        long,
        value_name = "NAME",
        requires = "fabric",
        conflicts_with = "roce"
    )]
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
        verbatim_doc_comment,
        conflicts_with = "roce"
    )]
    pub fabric_key_file: Option<PathBuf>,

    /// RoCE mode: the port is Ethernet with RoCEv2, on this TAP device (opened,
    /// or created if missing; bring it up and plug it into a bridge yourself).
    /// RoCEv2 frames for --mac go to the HCA, every other frame to and from the
    /// VM's virtio-net (--vhost-user-net).
    #[arg(long, value_name = "NAME", requires = "mac", conflicts_with = "ib", value_parser = parse_tap)]
    pub tap: Option<String>,

    /// RoCE mode: the port's MAC address, XX:XX:XX:XX:XX:XX (also the MAC the
    /// VM's virtio-net reports; give QEMU's virtio-net-pci the same mac=).
    #[arg(long, value_name = "MAC", requires = "tap", conflicts_with = "ib", value_parser = parse_mac)]
    pub mac: Option<MacAddr>,

    /// RoCE mode: serve a vhost-user-net backend on this UNIX socket for QEMU's
    /// `-netdev vhost-user` (a stale socket file is replaced; served again after
    /// each disconnect). Without it, frames for the guest are dropped.
    #[arg(long, value_name = "PATH", requires = "tap", conflicts_with = "ib")]
    pub vhost_user_net: Option<PathBuf>,

    /// RoCE mode: DCQCN congestion control (issue 31; README "Congestion
    /// control"). The port's RoCE frames become ECN-capable (ECT(0)); a
    /// frame that arrives marked CE is answered with a CNP to its source QP,
    /// and a QP that receives CNPs cuts and recovers its send rate. `--dcqcn`
    /// alone takes mlx5's defaults; `--dcqcn=NAME=VALUE,...` sets mlx5's
    /// parameters by name (rp_clamp_tgt_rate, rp_clamp_tgt_rate_ati,
    /// rp_time_reset, rp_byte_reset, rp_threshold, rp_ai_rate, rp_max_rate,
    /// rp_hai_rate, rp_min_dec_fac, rp_min_rate, rp_rate_to_set_on_first_cnp,
    /// rp_dce_tcp_g, rp_dce_tcp_rtt, rp_rate_reduce_monitor_period,
    /// rp_initial_alpha_value, rp_gd, np_min_time_between_cnps, np_cnp_dscp,
    /// np_cnp_prio_mode, np_cnp_prio), e.g. --dcqcn=rp_clamp_tgt_rate=1.
    /// The parameters in force are logged at start.
    #[arg(
        long,
        value_name = "PARAMS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        requires = "tap",
        conflicts_with = "ib",
        value_parser = parse_dcqcn
    )]
    pub dcqcn: Option<DcqcnParams>,

    /// Write every packet sent and received to FILE (pcap; ERF InfiniBand
    /// records, or Ethernet frames in RoCE mode; Wireshark and tshark dissect it
    /// without plugins).
    #[arg(long, value_name = "FILE")]
    pub capture: Option<PathBuf>,

    /// Inject faults on this device's link, for tests and demos:
    /// comma-separated key=value from drop, dup, reorder, corrupt (rates 0..1),
    /// delay (ns, us, ms or s, e.g. 100us, 2ms), delay_rate (0..1), seed (integer),
    /// drop_dlid (a LID: every InfiniBand packet to it is lost, a dead path),
    /// drop_dlid_after (N: the path to drop_dlid dies after N packets to it).
    /// Example: --fault drop=0.05,dup=0.02,reorder=0.02,seed=7
    #[arg(long, value_name = "SPEC", verbatim_doc_comment, value_parser = parse_fault)]
    pub fault: Option<FaultSpec>,

    /// Log level: error, warn, info, debug or trace. RUST_LOG, when set,
    /// overrides it (and may name modules, e.g. RUST_LOG=device::cmdq=debug).
    #[arg(long, value_name = "LEVEL", default_value = "info", value_parser = parse_log)]
    pub log: log::LevelFilter,

    /// Print the device's counters (per port and per drop reason) to stderr every
    /// DURATION (e.g. 1s, 500ms; a bare number counts seconds), in the
    /// --counters-format; they are also printed when the process exits. Also
    /// the period of --counters-file. At least 100ms.
    #[arg(long, value_name = "DURATION", value_parser = counters_every())]
    pub counters_every: Option<Duration>,

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

    /// How long the data path keeps polling the doorbells after its last
    /// work before it sleeps and asks the driver to ring WAKE (a duration,
    /// e.g. 500us, 1ms). Longer saves WAKE round trips under steady traffic;
    /// shorter leaves the CPU to others sooner (0 = sleep as soon as idle).
    /// At most 1s.
    #[arg(long, value_name = "DURATION", default_value = "500us", value_parser = busy_poll())]
    pub busy_poll: Duration,

    /// The old spelling of --busy-poll: microseconds.
    #[arg(long, value_name = "USECS", hide = true, conflicts_with = "busy_poll", value_parser = busy_poll_us())]
    pub busy_poll_us: Option<Duration>,

    /// RC loss recovery: no probes. By default a probe goes out when nothing
    /// was acknowledged for about two round trips, so a lost tail is resent
    /// without waiting for the local ACK timeout (issue 14); with this flag
    /// recovery is left to the ACK timer and sequence NAKs (for comparison).
    #[arg(long = "no-loss-probes", action = ArgAction::SetFalse)]
    pub loss_probes: bool,

    /// The old form of --no-loss-probes: `--loss-probes on|off`.
    #[arg(long = "loss-probes", value_name = "on|off", hide = true, conflicts_with = "loss_probes", value_parser = on_off())]
    pub loss_probes_on_off: Option<bool>,

    /// RC end-to-end credits (RL-13) off. By default every ACK reports the
    /// receive queue's free WQEs and each sender keeps within what its peer
    /// reports, so a receiver short of buffers holds its sender back instead
    /// of sending RNR NAKs; with this flag no count is sent and the peer's
    /// is ignored (for comparison).
    #[arg(long = "no-credits", action = ArgAction::SetFalse)]
    pub credits: bool,

    /// The old form of --no-credits: `--credits on|off`.
    #[arg(long = "credits", value_name = "on|off", hide = true, conflicts_with = "credits", value_parser = on_off())]
    pub credits_on_off: Option<bool>,

    /// On-demand paging (issue 29) off: REG_MR with the ODP flag and the ODP
    /// commands answer NOT_SUPPORTED and QUERY_DEVICE's odp_caps is 0. By
    /// default the guest may register ODP MRs, whose pages it maps when the
    /// device reports a page fault.
    #[arg(long = "no-odp", action = ArgAction::SetFalse)]
    pub odp: bool,

    /// Automatic path migration (AD-10): an RC QP whose alternate path is
    /// armed moves to it after this many local ACK timeouts in a row on its
    /// primary path (at the latest at the one that would exhaust its retry
    /// count); 0: only when its peer or the guest migrates it. 0..=8.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=8))]
    pub apm_timeouts: u8,

    /// The least time without an acknowledgement before a loss probe (a
    /// duration, e.g. 1ms, 500us), whatever the measured round trip. A busy
    /// host that deschedules a peer for milliseconds makes shorter probes
    /// spurious, and each costs throughput; longer ones recover a lost tail
    /// later (still well before the ACK timeout). Each QP raises its own
    /// floor above this one when its probes prove spurious (unless
    /// `--no-loss-probe-adapt`). From 10us to 1s.
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = loss_probe_min())]
    pub loss_probe_min: Duration,

    /// The old spelling of --loss-probe-min: microseconds.
    #[arg(long, value_name = "USECS", hide = true, conflicts_with = "loss_probe_min", value_parser = loss_probe_min_us())]
    pub loss_probe_min_us: Option<Duration>,

    /// RC loss recovery: keep the probe floor fixed. By default each QP
    /// raises its probe floor above `--loss-probe-min` when its probes prove
    /// spurious (the original was answered too: the peer was only late) and
    /// lowers it back when they prove useful.
    #[arg(long = "no-loss-probe-adapt", action = ArgAction::SetFalse)]
    pub loss_probe_adapt: bool,

    /// The old form of --no-loss-probe-adapt: `--loss-probe-adapt on|off`.
    #[arg(long = "loss-probe-adapt", value_name = "on|off", hide = true, conflicts_with = "loss_probe_adapt", value_parser = on_off())]
    pub loss_probe_adapt_on_off: Option<bool>,

    /// RC loss recovery: go back again for every sequence NAK. By default a
    /// go-back answers the sequence NAKs that come within a round trip for
    /// PSNs it already resends (a reordered packet provokes two).
    #[arg(long = "no-loss-go-back-bound", action = ArgAction::SetFalse)]
    pub loss_go_back_bound: bool,

    /// The old form of --no-loss-go-back-bound: `--loss-go-back-bound on|off`.
    #[arg(long = "loss-go-back-bound", value_name = "on|off", hide = true, conflicts_with = "loss_go_back_bound", value_parser = on_off())]
    pub loss_go_back_bound_on_off: Option<bool>,
    /// Host memory the device may hold for its guest: MR page lists, the WQEs
    /// taken from the guest's rings, QP and responder state (bytes, or with a
    /// K, M or G suffix: binary, 1K = 1024). Past it, registrations and QP creations fail with
    /// NO_RESOURCES (ENOMEM) and new WQEs wait in their rings; each refusal is
    /// counted (ARCHITECTURE.md §9). The device's limits (QUERY_DEVICE) never
    /// promise more. At least 4M.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = units::size_at_least(MIN_MEM_BUDGET))]
    pub mem_budget: u64,

    /// Device memory (`ibv_alloc_dm`; issue 29 item 2): bytes of memory in
    /// the device (BAR4) that guest processes allocate, map and register as
    /// MRs (`ibv_reg_dm_mr`), the target of RDMA and atomics like any MR
    /// (bytes, or with a K or M suffix). A multiple of 4K, at most 64M; 0:
    /// none (`ibv_devinfo -v` shows max_dm_size 0). It is host memory of
    /// this process, shared with the VM.
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = dm_size())]
    pub dm_size: u32,

    /// InfiniBand mode: after this long (a duration, e.g. 5s, 500ms) without
    /// a datagram from any other node of the fabric the port is down (a port
    /// error event, QUERY_PORT Down) until one is heard again (port active).
    /// Every node sends a keepalive to the others each second (each fifth
    /// of this, if that is shorter). 0: the port never goes down; else
    /// from 100ms to 3600s.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = peer_silence())]
    pub peer_silence: Duration,

    /// The old spelling of --peer-silence: milliseconds.
    #[arg(long, value_name = "MSECS", hide = true, conflicts_with = "peer_silence", value_parser = peer_silence_ms())]
    pub peer_silence_ms: Option<Duration>,

    /// RC request packets the port keeps in flight to each destination (a
    /// peer's LID, or GID on RoCE) over all the QPs to it (0: no bound).
    /// Each QP has its own window; this bounds their sum, so that many
    /// active QPs do not overflow the peer's receive socket buffer, and a
    /// dead peer holds only its own share (ARCHITECTURE.md §3). The default,
    /// 1024 full-MTU packets, is what the UDP link sizes its receive buffer
    /// for (4 MiB), four times one QP's largest window.
    #[arg(long, value_name = "PACKETS", default_value_t = transport::engine::DEFAULT_PORT_WINDOW)]
    pub port_window: u32,

    /// RC/XRC receive reorder hold (a duration, e.g. 50us; 0: off): a packet
    /// that arrives one PSN ahead of the one its QP expects waits this long
    /// for the packet it overtook, so that a swap of two packets on the
    /// fabric costs no sequence NAK and go-back (or READ re-request). At
    /// most 16 packets are held per port. At most 10ms.
    #[arg(long, value_name = "DURATION", default_value = "50us", value_parser = reorder_hold())]
    pub reorder_hold: Duration,

    /// The old spelling of --reorder-hold: microseconds.
    #[arg(long, value_name = "USECS", hide = true, conflicts_with = "reorder_hold", value_parser = reorder_hold_us())]
    pub reorder_hold_us: Option<Duration>,

    /// Serve the counters to Prometheus at http://ADDR/metrics (e.g.
    /// 127.0.0.1:9464; port 0 picks a free port, which the log names): every
    /// counter of the text and JSON reports as labelled metrics
    /// (`vhca_port_packets_total{dir="rx"}`,
    /// `vhca_drops_total{layer="wire",reason="bad_icrc"}`, ...). One thread,
    /// one connection at a time, each bounded to 2 s and an 8 KiB request;
    /// no authentication, so bind it to loopback or a management network.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
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

/// The size syntax of every option lives in [`crate::units`].
pub use crate::units::parse_size;

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
    /// Not `--no-credits`.
    pub credits: bool,
    /// `--apm-timeouts` (AD-10).
    pub apm_timeouts: u8,
    /// Not `--no-odp` (issue 29).
    pub odp: bool,
    pub loss_probe_min: Duration,
    /// Not `--no-loss-probe-adapt`.
    pub loss_probe_adapt: bool,
    /// Not `--no-loss-go-back-bound`.
    pub loss_go_back_bound: bool,
    /// Host bytes the device may hold for its guest (`--mem-budget`).
    pub mem_budget: u64,
    /// `--dm-size`: bytes of device memory, 0 for none.
    pub dm_size: u32,
    /// `--peer-silence` (AE-01): the keepalive period and the silence
    /// after which the ib-udp port is down; `None`: never down.
    pub liveness: Option<(Duration, Duration)>,
    /// `--port-window`.
    pub port_window: u32,
    /// `--reorder-hold`.
    pub reorder_hold: Duration,
    /// `--metrics-listen` (issue 28): the Prometheus endpoint's address.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `--dcqcn` (issue 31): DCQCN on the RoCE port, with these parameters.
    pub dcqcn: Option<DcqcnParams>,
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

/// `--tap NAME`: an interface name.
fn parse_tap(tap: &str) -> Result<String, String> {
    if tap.is_empty() || tap.len() >= 16 || tap.contains(['/', ' ', '\0']) {
        return Err("not an interface name (1 to 15 characters, no '/' or space)".into());
    }
    Ok(tap.to_string())
}

/// `--fault SPEC`.
/// `--dcqcn[=NAME=VALUE,...]`: mlx5's DCQCN parameters, defaults for those
/// not named.
pub fn parse_dcqcn(spec: &str) -> Result<DcqcnParams, String> {
    let mut p = DcqcnParams::default();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (name, value) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not NAME=VALUE"))?;
        let v = value
            .trim()
            .parse::<u32>()
            .map_err(|_| format!("{name}={value}: not a number"))?;
        p.set(name.trim(), v)?;
    }
    Ok(p)
}

fn parse_fault(spec: &str) -> Result<FaultSpec, String> {
    spec.parse::<FaultSpec>().map_err(|e| e.to_string())
}

/// `--log LEVEL` (`vhca` and `vhca switch`).
pub(crate) fn parse_log(level: &str) -> Result<log::LevelFilter, String> {
    level
        .parse::<log::LevelFilter>()
        .map_err(|_| "not a level (error, warn, info, debug, trace, off)".into())
}

// The durations' ranges, shared by `vhca` and `vhca switch`; each old
// `--*-us`/`--*-ms` spelling takes the same range and a bare number in its
// old unit.
const US: Duration = Duration::from_micros(1);
const MS: Duration = Duration::from_millis(1);
const BUSY_POLL: std::ops::RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(1);
const PEER_SILENCE: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(3600);

pub(crate) fn busy_poll() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    duration_in(BUSY_POLL, false)
}
pub(crate) fn busy_poll_us() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    legacy_duration_in(US, BUSY_POLL, false)
}
/// `--counters-every`: a bare number counts seconds, its old unit.
pub(crate) fn counters_every() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    let s = Duration::from_secs(1);
    legacy_duration_in(s, Duration::from_millis(100)..=s * 86_400, false)
}
pub(crate) fn peer_silence() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    duration_in(PEER_SILENCE, true)
}
pub(crate) fn peer_silence_ms() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    legacy_duration_in(MS, PEER_SILENCE, true)
}
fn loss_probe_min() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    duration_in(US * 10..=Duration::from_secs(1), false)
}
fn loss_probe_min_us() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    legacy_duration_in(US, US * 10..=Duration::from_secs(1), false)
}
fn dm_size() -> impl Fn(&str) -> Result<u32, String> + Clone + Send + Sync {
    |s| {
        let max = u64::from(crate::abi::ident::bar::DM_MAX_SIZE);
        match units::parse_size(s)? {
            n if n <= max && n.is_multiple_of(4096) => Ok(n as u32),
            _ => Err(format!(
                "0 (none) or a multiple of 4K up to {}",
                units::show_size(max)
            )),
        }
    }
}
fn reorder_hold() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    duration_in(Duration::ZERO..=MS * 10, false)
}
fn reorder_hold_us() -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync {
    legacy_duration_in(US, Duration::ZERO..=MS * 10, false)
}

/// `--peer-silence` (AE-01; `vhca` and `vhca switch`): the keepalive
/// period and the silence after which the link is down, or none (0).
pub(crate) fn liveness(dead: Duration) -> Option<(Duration, Duration)> {
    (!dead.is_zero()).then(|| (Duration::from_secs(1).min(dead / 5), dead))
}

impl Cli {
    /// The fabric mode: `--fabric`/`--node` or `--tap`/`--mac` (the groups
    /// `ib` and `roce` keep them apart).
    fn mode(&self) -> Result<FabricMode, CliError> {
        if let (Some(tap), Some(mac)) = (&self.tap, self.mac) {
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

    /// Checks what clap's parsers could not (files, and values that need
    /// each other); opens nothing but the fabric file. The error is clap's,
    /// with the usage line.
    pub fn check(&self) -> Result<Config, clap::Error> {
        if self.fabric.is_none() && self.tap.is_none() {
            return Err(<Cli as clap::CommandFactory>::command().error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "give --fabric FILE --node NAME (InfiniBand) or --tap NAME --mac MAC (RoCE)",
            ));
        }
        self.checked().map_err(|e| usage_error::<Cli>(None, e))
    }

    fn checked(&self) -> Result<Config, CliError> {
        check_socket_path("--socket", &self.socket)?;
        let mode = self.mode()?;
        if let Some(c) = &self.capture {
            parent_exists("--capture", c)?;
        }
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
        // An old spelling, when given, wins over the new one's default (clap
        // refuses both given).
        let on = |flag: bool, old: Option<bool>| old.unwrap_or(flag);
        Ok(Config {
            liveness: liveness(self.peer_silence_ms.unwrap_or(self.peer_silence)),
            mem_budget: self.mem_budget,
            dm_size: self.dm_size,
            busy_poll: self.busy_poll_us.unwrap_or(self.busy_poll),
            loss_probes: on(self.loss_probes, self.loss_probes_on_off),
            credits: on(self.credits, self.credits_on_off),
            apm_timeouts: self.apm_timeouts,
            odp: self.odp,
            loss_probe_min: self.loss_probe_min_us.unwrap_or(self.loss_probe_min),
            loss_probe_adapt: on(self.loss_probe_adapt, self.loss_probe_adapt_on_off),
            loss_go_back_bound: on(self.loss_go_back_bound, self.loss_go_back_bound_on_off),
            socket: self.socket.clone(),
            mode,
            capture: self.capture.clone(),
            fault: self.fault,
            log: self.log,
            counters_every: self.counters_every,
            counters_format,
            counters_file: self.counters_file.clone(),
            port_window: self.port_window,
            reorder_hold: self.reorder_hold_us.unwrap_or(self.reorder_hold),
            metrics_listen: self.metrics_listen,
            dcqcn: self.dcqcn,
        })
    }
}
