//! `vhca switch` (issue 26 item 3; ARCHITECTURE.md §3b): the process that
//! drives the sans-IO switch core ([`transport::switch::Switch`]) over UDP.
//!
//! One [`UdpLink`] per cabled port (`UdpLink::switch_port`: bound to the
//! port's address from the fabric file, sending to and hearing only its
//! cable's other end, with the fabric key stage on it when the file has a
//! key), one thread, one epoll: each round reads every port's received
//! packets (recvmmsg) into `Switch::handle_packet` and sends what comes out
//! through the egress ports' links (queued and sent with sendmmsg at the end
//! of the round). The keepalive protocol of `fabric::liveness` runs per port
//! and drives `Switch::link_up` / `link_down`, so an HCA's port comes up when
//! the switch runs and a port whose peer is silent goes Down. The thread
//! sleeps on epoll until a socket is readable, a link's deadline (keepalive,
//! silence) or a signal: never a busy spin. SIGTERM / SIGINT end it with the
//! counters report (per-port PortCounters, every `SwitchDrop` reason).
//!
//! [`Mode`]: in static mode (no SM; the fabric file plays it) the ports go
//! Active as soon as their link is up and the LFT comes from the cabling
//! (`Cabling::static_lft`), multicast floods the ports to nodes and one
//! spanning tree of the switch links (`Cabling::static_flood`); in SM mode
//! the ports stay Init and the tables empty until an SM programs them.

mod cli;
mod report;

use std::io::Read;
use std::net::UdpSocket;
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};

use transport::mad::portinfo::port_state;
use transport::mad::NodeDescription;
use transport::switch::cc::QueueDepth;
use transport::switch::{
    Egress, Switch, SwitchConfig, SwitchOut, MAX_LINEAR_FDB_CAP, MAX_MULTICAST_FDB_CAP,
};
use transport::verbs::{Mtu, Time};

pub use cli::SwitchCli;
pub use report::{PortSnap, Snapshot as SwitchSnapshot};

use crate::counters_out::CountersFormat;
use crate::fabric::{
    flow_grant, AuthLink, Charge, End, FabricFile, FabricKey, FlowLink, Link, UdpLink, UdpOffloads,
    MAX_PACKET_BLOCKS, TRAILER_LEN,
};
use crate::mgmt::SubnetMode;

/// Packets one port hands the core per round before the next port's turn,
/// so that one busy port cannot starve the others.
const PORT_BUDGET: usize = 64;

/// The longest sleep: the counters' period is checked at least this often.
const MAX_SLEEP: Duration = Duration::from_millis(500);

/// epoll token of the signal pipe (ports use their number).
const SIGNAL_TOKEN: u64 = 1 << 32;

/// Who owns the subnet's configuration (issue 26: one line of the fabric
/// file picks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No SM: the fabric file's cabling gives the LFT, ports go Active when
    /// their link is up.
    Static,
    /// An SM programs the switch: ports stay Init, the LFT and MFT empty,
    /// until it does.
    Sm,
}

impl Mode {
    /// The fabric file's mode (`subnet = "static" | "sm"`, the same line
    /// that decides the HCAs' ports, `mgmt::SubnetMode`).
    pub fn of(fabric: &FabricFile) -> Mode {
        match fabric.subnet() {
            SubnetMode::Static => Mode::Static,
            SubnetMode::Sm => Mode::Sm,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Static => "static",
            Mode::Sm => "sm",
        }
    }
}

/// A checked `vhca switch` command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub fabric: FabricFile,
    pub switch: String,
    pub key: Option<FabricKey>,
    pub log: log::LevelFilter,
    pub counters_every: Option<Duration>,
    pub counters_format: CountersFormat,
    pub counters_file: Option<PathBuf>,
    /// Keepalive period and silence after which a port is Down.
    pub liveness: Option<(Duration, Duration)>,
    pub mode: Mode,
    /// How long the loop polls after its last packet before it sleeps.
    pub busy_poll: Duration,
    /// `--metrics-listen` (issue 28): the Prometheus endpoint's address.
    pub metrics_listen: Option<std::net::SocketAddr>,
}

/// The switch core as the fabric file describes switch `name` and `mode`
/// sets it up: identity, and in static mode its LID, LFT, MFT flooding and
/// the file's SL-to-VL table on every port pair.
pub fn build_core(fabric: &FabricFile, name: &str, mode: Mode) -> Option<Switch> {
    let c = fabric.cabling();
    let (s, spec) = c.switch(name)?;
    let mut sw = Switch::new(&SwitchConfig {
        num_ports: spec.ports,
        node_guid: spec.guid,
        system_image_guid: spec.guid,
        device_id: 0,
        // The OUI an EUI-64 GUID starts with.
        vendor_id: (spec.guid >> 40) as u32 & 0xff_ffff,
        revision: 0,
        description: NodeDescription::from_text(&format!("vhca switch {name}")),
        linear_fdb_cap: MAX_LINEAR_FDB_CAP,
        multicast_fdb_cap: MAX_MULTICAST_FDB_CAP,
    });
    // Issue 31: the file's IBA congestion control (an SM's CC manager may
    // Set it again).
    if let Some(c) = fabric.ib_cc() {
        sw.cc_agent_mut().set_switch_setting(&c.switch);
    }
    if mode == Mode::Static {
        sw.set_static_lid(spec.lid.unwrap_or(0));
        let nodes = fabric.nodes();
        let lids = |i: usize| -> Vec<u16> {
            let n = &nodes[i];
            match fabric.port_attrs(&n.name) {
                Some(a) => a.lids(n.lid).collect(),
                None => vec![n.lid],
            }
        };
        for (lid, port) in c.static_lft(s, nodes.len(), lids) {
            sw.set_static_route(lid, port);
        }
        sw.set_static_flood(&c.static_flood(s));
        if let Some(t) = fabric.sl2vl() {
            sw.set_static_sl2vl(transport::mad::SlToVlTable(t));
        }
    }
    Some(sw)
}

/// One port's link and what the report says of it.
struct Port {
    num: u8,
    /// The port's link; its flow-control stage (IBA 7.9) is off when the
    /// fabric file turns it off.
    link: FlowLink<Box<dyn Link>>,
    /// The cable's other end, for the report.
    peer: String,
    /// Static mode, a port cabled to a node: the node's LIDs, the only SLIDs
    /// its data packets may carry (below).
    slids: Option<RangeInclusive<u16>>,
    /// Data packets dropped for another SLID.
    spoofed: u64,
    /// What the link was last told of the SM's PortPhysicalState Disabled.
    disabled: bool,
    /// The IB MTU the port's underlay carries (issue 27 item 3).
    mtu: Mtu,
}

/// The cabled ports of switch `name`, bound and keyed.
fn open_ports(cfg: &Config) -> Result<Vec<Port>, Box<dyn std::error::Error>> {
    let c = cfg.fabric.cabling();
    let (s, spec) = c.switch(&cfg.switch).ok_or("no such switch")?;
    let mut ports = Vec::new();
    for p in 1..=spec.ports {
        let here = End::Port { switch: s, port: p };
        let Some(peer) = c.peer(here) else {
            continue; // Uncabled: no socket, the port stays Down.
        };
        let address = spec.addresses[usize::from(p) - 1];
        let socket = UdpSocket::bind(address).map_err(|e| {
            format!(
                "switch {} port {p}: cannot bind UDP {address}: {e}",
                cfg.switch
            )
        })?;
        let mut udp = UdpLink::switch_port(&cfg.fabric, &cfg.switch, p, socket, UdpOffloads::ALL)?;
        udp.set_liveness(cfg.liveness);
        if let Some(b) = cfg.fabric.rx_buffer() {
            udp.set_recv_buffer(b);
        }
        let rcvbuf = udp.recv_buffer();
        // Issue 27 item 3: the port's MTUCap is what its cable's underlay
        // carries unfragmented, the key's trailer included.
        let trailer = if cfg.key.is_some() { TRAILER_LEN } else { 0 };
        let mtu = udp.port_mtu(trailer)?;
        let link: Box<dyn Link> = match &cfg.key {
            Some(k) => Box::new(AuthLink::new(udp, k)),
            None => Box::new(udp),
        };
        let link = if cfg.fabric.flow_control() {
            // IBA 7.9: the port grants what its socket's receive buffer
            // holds. Its egress queue never needs more than every port's
            // grant together (each packet in it is charged to an ingress
            // buffer until it leaves), so that is its bound.
            let vls = cfg.fabric.data_vls();
            let grant = flow_grant(rcvbuf.unwrap_or(0), vls);
            let all_ingress = u32::from(spec.ports) * u32::from(grant.capacity[0]) * u32::from(vls);
            let mut l = FlowLink::new(link, grant, all_ingress + MAX_PACKET_BLOCKS, false);
            // IBA 18.2.5.4: a packet stuck at the head of an egress queue
            // (a partner that grants no credit) is discarded after the
            // port's HOQLife, 4.096 us * 2^HOQLife: OpenSM's defaults, 0x10
            // toward a CA (leaf_head_of_queue_lifetime, 268 ms) and 0x12
            // toward a switch (head_of_queue_lifetime, 1.07 s).
            let hoq = if matches!(peer, End::Node(_)) {
                0x10
            } else {
                0x12
            };
            l.set_hoq_life(Some(Duration::from_nanos(4096 << hoq)));
            l
        } else {
            FlowLink::off(link)
        };
        // ARCHITECTURE.md §9: a node's UDP address is its identity, and an HCA
        // drops a packet whose SLID is not its sender's. Behind a switch the
        // HCA cannot tell the sender, so the switch port the node is cabled
        // to checks instead: in static mode, where the file gives the LIDs,
        // a data packet must carry one of the node's. (VL15 passes: a
        // directed-route SMP's SLID is the permissive LID.)
        let slids = match peer {
            End::Node(i) if cfg.mode == Mode::Static => {
                let n = &cfg.fabric.nodes()[i];
                Some(match cfg.fabric.port_attrs(&n.name) {
                    Some(a) => a.lids(n.lid),
                    None => n.lid..=n.lid,
                })
            }
            _ => None,
        };
        let peer = match peer {
            End::Node(i) => cfg.fabric.nodes()[i].name.clone(),
            End::Port { switch, port } => format!("{}:{port}", c.switches()[switch].name),
        };
        ports.push(Port {
            num: p,
            link,
            peer,
            slids,
            spoofed: 0,
            disabled: false,
            mtu,
        });
    }
    Ok(ports)
}

fn now() -> Duration {
    crate::run::now()
}

fn time(d: Duration) -> Time {
    Time(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Runs the switch of `cfg` until SIGTERM or SIGINT; then prints the counters.
pub fn run(cfg: &Config) -> Result<(), Box<dyn std::error::Error>> {
    let mut core = build_core(&cfg.fabric, &cfg.switch, cfg.mode).ok_or("no such switch")?;
    let mut ports = open_ports(cfg)?;
    for p in &ports {
        core.set_port_mtu_cap(p.num, p.mtu as u8);
    }
    if let Some(k) = &cfg.key {
        if let Some(w) = k.permission_warning() {
            log::warn!("fabric: {w}");
        }
        log::info!(
            "fabric: datagrams authenticated with fabric key {} from {}",
            k.id(),
            k.source()
        );
    }
    let (sig_rx, sig_tx) = UnixStream::pair()?;
    sig_rx.set_nonblocking(true)?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::low_level::pipe::register(sig, sig_tx.try_clone()?)?;
    }
    let epoll = Epoll::new()?;
    epoll.ctl(
        ControlOperation::Add,
        sig_rx.as_raw_fd(),
        EpollEvent::new(EventSet::IN, SIGNAL_TOKEN),
    )?;
    for (i, p) in ports.iter().enumerate() {
        epoll.ctl(
            ControlOperation::Add,
            p.link.raw_fd(),
            EpollEvent::new(EventSet::IN, i as u64),
        )?;
    }
    let mut counters = report::Output::new(cfg);
    if let Some(addr) = cfg.metrics_listen {
        counters.publish_to(crate::metrics::listen_switch(addr)?);
    }
    log::info!(
        "switch {} ({} mode, LID {:#x}): {} of {} ports cabled",
        cfg.switch,
        cfg.mode.name(),
        core.lid(),
        ports.len(),
        core.num_ports()
    );
    let mut events = vec![EpollEvent::default(); ports.len() + 1];
    let mut busy = crate::run::sleep::BusyPoll::new(cfg.busy_poll);
    let mut out: Vec<SwitchOut> = Vec::new();
    let mut back: Vec<(Vec<u8>, Option<Charge>)> = Vec::new();
    let mut freed: Vec<Charge> = Vec::new();
    // Which `ports` index is port number p.
    let mut index = vec![usize::MAX; usize::from(core.num_ports()) + 1];
    for (i, p) in ports.iter().enumerate() {
        index[usize::from(p.num)] = i;
    }
    loop {
        let t = now();
        for p in ports.iter_mut() {
            follow_disabled(&core, p);
            if let Err(e) = p.link.handle_timeout(t) {
                log::debug!("switch: port {}: {e}", p.num);
            }
            follow_link(&mut core, p, cfg.mode);
        }
        for p in ports.iter_mut() {
            p.link.begin_sends();
        }
        let mut work = false;
        for i in 0..ports.len() {
            let (before, rest) = ports.split_at_mut(i);
            let (me, after) = rest.split_at_mut(1);
            let Port {
                num: in_port,
                link,
                slids,
                spoofed,
                ..
            } = &mut me[0];
            let in_port = *in_port;
            back.clear();
            let got = link.recv_batch(t, PORT_BUDGET, &mut |r| {
                // IBA 7.9: the packet holds its blocks of this port's
                // buffer until it has left by its egress port (the charge
                // travels with it; with several copies, the last), or at
                // once when it goes nowhere.
                let charge = Charge {
                    port: in_port,
                    vl: transport::wire::vl_of(r.packet),
                    len: r.packet.len() as u16,
                };
                if slids.as_ref().is_some_and(|l| spoofed_slid(r.packet, l)) {
                    *spoofed += 1;
                    freed.push(charge);
                    return;
                }
                out.clear();
                core.handle_packet(r.packet, in_port, time(t), &mut out);
                let last = out.len().checked_sub(1);
                if last.is_none() {
                    freed.push(charge);
                }
                for (k, o) in out.drain(..).enumerate() {
                    let charge = (Some(k) == last).then_some(charge);
                    let bytes: &[u8] = match &o.packet {
                        Egress::Same => r.packet,
                        Egress::New(b) => b,
                    };
                    if o.port == in_port {
                        back.push((bytes.to_vec(), charge));
                        continue;
                    }
                    let j = index
                        .get(usize::from(o.port))
                        .copied()
                        .unwrap_or(usize::MAX);
                    let egress = if j < i {
                        before.get_mut(j)
                    } else {
                        after.get_mut(j.wrapping_sub(i + 1))
                    };
                    // The core sends only out of ports whose link is up, and
                    // only cabled ports have one.
                    match egress {
                        Some(e) => {
                            // IBA A10.2.1: FECN on what joins a queue past
                            // the port's threshold.
                            let (blocks, limit) = e.link.queue_depth();
                            let q = QueueDepth { blocks, limit };
                            let marked = core.cc_mark(o.port, bytes, q, time(t));
                            let bytes = marked.as_deref().unwrap_or(bytes);
                            if let Err(err) = e.link.send_charged(t, bytes, charge) {
                                log::debug!("switch: port {}: {err}", e.num);
                            }
                        }
                        None => freed.extend(charge),
                    }
                }
            });
            match got {
                Ok(n) => work |= n > 0,
                Err(e) => log::warn!("switch: port {in_port}: receive: {e}"),
            }
            for (b, charge) in &back {
                let _ = link.send_charged(t, b, *charge);
            }
        }
        // The core's timers, once a round after what the ports brought: the
        // SMA's traps (trap 128 on a link change, AD-09; trap 256 on a failed
        // M_Key check, AD-12) first sent or resent out of the port the LFT
        // names, and the M_Key and B_Key leases.
        out.clear();
        core.poll_transmit(time(t), &mut out);
        for o in out.drain(..) {
            let (Egress::New(bytes), Some(p)) = (
                &o.packet,
                index
                    .get(usize::from(o.port))
                    .and_then(|&j| ports.get_mut(j)),
            ) else {
                continue;
            };
            if let Err(err) = p.link.send(t, bytes) {
                log::debug!("switch: port {}: {err}", p.num);
            }
        }
        // The packets that left (or were dropped) free their blocks at
        // their ingress ports, which grant them again (IBA 7.9.3).
        for p in ports.iter_mut() {
            p.link.take_released(&mut freed);
        }
        for c in freed.drain(..) {
            if let Some(p) = index
                .get(usize::from(c.port))
                .and_then(|&j| ports.get_mut(j))
            {
                p.link.free(c.vl, usize::from(c.len));
            }
        }
        for p in ports.iter_mut() {
            if let Err(e) = p.link.end_sends() {
                log::debug!("switch: port {}: {e}", p.num);
            }
        }
        counters.tick(|| report::snapshot(cfg, &core, &ports));
        if work {
            busy.worked();
            continue;
        }
        if busy.poll_again("switch") {
            continue;
        }
        // The core's clock is the run's (`time`): nanoseconds of `now()`.
        let core_wake = core.poll_timeout().map(|at| Duration::from_nanos(at.0));
        let wake = ports
            .iter()
            .filter_map(|p| p.link.poll_timeout())
            .chain(core_wake)
            .min()
            .map_or(MAX_SLEEP, |d| d.saturating_sub(now()))
            .min(MAX_SLEEP);
        match crate::run::sleep::wait(&epoll, wake, &mut events) {
            Ok(n) => {
                if events[..n].iter().any(|e| e.data() == SIGNAL_TOKEN) {
                    let mut b = [0u8; 16];
                    let _ = (&sig_rx).read(&mut b);
                    log::info!("switch {}: signal: stopping", cfg.switch);
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    for p in ports.iter_mut() {
        let _ = p.link.flush();
    }
    counters.report(&report::snapshot(cfg, &core, &ports));
    Ok(())
}

/// Whether `pkt` is a data packet (not VL15) whose LRH:SLID is not one of
/// `lids`. A packet too short for an LRH is the core's to drop as malformed.
fn spoofed_slid(pkt: &[u8], lids: &RangeInclusive<u16>) -> bool {
    transport::wire::Lrh::new_checked(pkt)
        .is_ok_and(|l| l.vl() != transport::switch::VL15 && !lids.contains(&l.slid()))
}

/// The SM's PortPhysicalState into port `p`'s link (IBA 14.2.5.6): Disabled
/// turns the PHY off (no keepalives, nothing sent or taken, the partner goes
/// Down after its silence), Polling on again (the link trains when the
/// partner is heard, then `follow_link` brings the port to Init).
fn follow_disabled(core: &Switch, p: &mut Port) {
    let disabled = core.port_disabled(p.num);
    if disabled != p.disabled {
        log::info!(
            "switch: port {} {} by the SM (cabled to {})",
            p.num,
            if disabled { "disabled" } else { "enabled" },
            p.peer
        );
        p.link.set_disabled(disabled);
        p.disabled = disabled;
    }
}

/// Port `p`'s link state into the core: up -> `link_up` (and in static mode
/// Active at once, as the file's SM would make it), down -> `link_down`.
fn follow_link(core: &mut Switch, p: &Port, mode: Mode) {
    let down = core
        .port(p.num)
        .is_none_or(|s| s.info.port_state == port_state::DOWN);
    if p.link.is_up() && down {
        log::info!("switch: port {} up (cabled to {})", p.num, p.peer);
        core.link_up(p.num);
        if mode == Mode::Static {
            core.activate(p.num);
        }
    } else if !p.link.is_up() && !down {
        log::info!("switch: port {} down (cabled to {}: silent)", p.num, p.peer);
        core.link_down(p.num);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FABRIC: &str = r#"
[[node]]
name = "a"
lid = 4
lmc = 1
guid = 1
address = "127.0.0.1:18001"
[[node]]
name = "b"
lid = 6
guid = 2
address = "127.0.0.1:18002"
[[switch]]
name = "sw0"
guid = "0x0002c90300009000"
ports = 3
address = "127.0.0.1:19000"
lid = 9
[[link]]
ends = ["a", "sw0:3"]
[[link]]
ends = ["b", "sw0:1"]
"#;

    fn lft(sw: &Switch, lid: u16) -> Option<u8> {
        // What a data packet to `lid` would do, read through the SMA's view.
        let top = sw.switch_info().linear_fdb_top;
        (lid <= top).then_some(())?;
        let mut out = Vec::new();
        let mut sw = sw.clone();
        for p in 1..=3 {
            sw.link_up(p);
            sw.activate(p);
        }
        let pkt = data_packet(lid);
        sw.handle_packet(&pkt, 2, Time(0), &mut out);
        out.first().map(|o| o.port)
    }

    fn data_packet(dlid: u16) -> Vec<u8> {
        data_packet_on(dlid, 0, 0)
    }

    fn data_packet_on(dlid: u16, sl: u8, vl: u8) -> Vec<u8> {
        use transport::wire::opcode::Opcode;
        use transport::wire::{BthRepr, DethRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};
        let repr = PacketRepr {
            lrh: LrhRepr {
                vl,
                sl,
                dlid,
                slid: 0x20,
            },
            grh: None,
            transport: TransportRepr {
                bth: BthRepr {
                    opcode: Opcode::UD_SEND_ONLY,
                    solicited: false,
                    mig_req: false,
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    dest_qp: 5,
                    ack_req: false,
                    psn: 0,
                },
                ext: ExtHeaders {
                    deth: Some(DethRepr { qkey: 1, src_qp: 2 }),
                    ..ExtHeaders::default()
                },
                payload: b"x",
            },
        };
        let mut b = vec![0; repr.buffer_len()];
        repr.emit(&mut b).unwrap();
        b
    }

    #[test]
    fn static_mode_routes_every_lid_of_every_node_and_sm_mode_leaves_it_to_the_sm() {
        let f = FabricFile::parse("f", FABRIC).unwrap();
        let sw = build_core(&f, "sw0", Mode::Static).unwrap();
        assert_eq!(sw.lid(), 9);
        // a's two LIDs (LMC 1) by port 3, b's by port 1.
        assert_eq!(
            [4, 5, 6, 7].map(|l| lft(&sw, l)),
            [Some(3), Some(3), Some(1), None]
        );
        let sw = build_core(&f, "sw0", Mode::Sm).unwrap();
        assert_eq!((sw.lid(), sw.switch_info().linear_fdb_top), (0, 0));
        assert!(build_core(&f, "sw1", Mode::Static).is_none());
    }

    #[test]
    fn a10_4_3_6_the_files_ib_cc_is_the_switchs_congestion_setting_and_it_marks() {
        // No [ib_cc]: no marking, whatever the queue.
        let f = FabricFile::parse("f", FABRIC).unwrap();
        let mut sw = build_core(&f, "sw0", Mode::Static).unwrap();
        let full = transport::switch::cc::QueueDepth {
            blocks: 100,
            limit: 100,
        };
        assert!(sw.cc_mark(1, &data_packet(6), full, Time(0)).is_none());
        // TOML: a table's keys end at the next table, so [ib_cc] goes last.
        let text = format!("{FABRIC}\n[ib_cc]\nthreshold = 8\n");
        let f = FabricFile::parse("f", &text).unwrap();
        for mode in [Mode::Static, Mode::Sm] {
            let mut sw = build_core(&f, "sw0", mode).unwrap();
            assert_eq!(sw.cc_agent().switch_setting().threshold, 8);
            let half = transport::switch::cc::QueueDepth {
                blocks: 51,
                limit: 100,
            };
            let m = sw
                .cc_mark(1, &data_packet(6), half, Time(0))
                .expect("marked");
            assert_eq!(m[8 + 4] & 0x80, 0x80, "BTH:FECN");
        }
    }

    #[test]
    fn ad_06_static_mode_switch_keeps_the_files_sl_to_vl_on_the_wire() {
        // The file maps SL 3 to VL 3 (its nodes send SL 3 on VL 3): the
        // switch forwards the packet on VL 3, as sent, not on VL 0.
        let text = format!("sl2vl = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]\n{FABRIC}");
        let f = FabricFile::parse("f", &text).unwrap();
        for (mode, want_vl) in [(Mode::Static, 3), (Mode::Sm, 0)] {
            let mut sw = build_core(&f, "sw0", mode).unwrap();
            for p in 1..=3 {
                sw.link_up(p);
                sw.activate(p);
            }
            if mode == Mode::Sm {
                // An SM's routes, without its SL2VL tables (all VL0).
                assert!(sw.set_static_route(6, 1));
            }
            let pkt = data_packet_on(6, 3, 3);
            let mut out = Vec::new();
            sw.handle_packet(&pkt, 3, Time(0), &mut out);
            assert_eq!(out.len(), 1, "{mode:?}");
            let bytes: &[u8] = match &out[0].packet {
                Egress::Same => &pkt,
                Egress::New(b) => b,
            };
            assert_eq!((out[0].port, bytes[0] >> 4), (1, want_vl), "{mode:?}");
        }
    }

    #[test]
    fn a_port_whose_link_comes_up_is_active_in_static_mode_and_init_in_sm_mode() {
        let f = FabricFile::parse("f", FABRIC).unwrap();
        for (mode, want) in [
            (Mode::Static, port_state::ACTIVE),
            (Mode::Sm, port_state::INIT),
        ] {
            let mut core = build_core(&f, "sw0", mode).unwrap();
            let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
            let at = sock.local_addr().unwrap();
            let text = FABRIC.replace(
                "address = \"127.0.0.1:19000\"",
                &format!("address = [\"{at}\", \"127.0.0.1:1\", \"127.0.0.1:2\"]"),
            );
            let f2 = FabricFile::parse("f", &text).unwrap();
            let mut link = UdpLink::switch_port(&f2, "sw0", 1, sock, UdpOffloads::NONE).unwrap();
            link.set_liveness(None); // no keepalives: up from the start
            let p = Port {
                num: 1,
                link: FlowLink::off(Box::new(link)),
                peer: "b".into(),
                slids: None,
                spoofed: 0,
                disabled: false,
                mtu: Mtu::M4096,
            };
            follow_link(&mut core, &p, mode);
            assert_eq!(core.port(1).unwrap().info.port_state, want, "{mode:?}");
        }
    }
}
