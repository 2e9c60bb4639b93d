//! `vhca switch`'s counters: per port the PortCounters (IBA 16.1.3.5), the
//! packets marked FECN (IBA A10.2.1) and state, the link stages' counters,
//! every `SwitchDrop` and directed-route drop reason, the SMA's replies, trap
//! 128's sends, the BMA's and the CC agent's key counters; as text lines
//! (`--counters-format text`, the exit report) or one JSON object (`json`,
//! `--counters-file`).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use transport::mad::bma::BmaDrop;
use transport::mad::dr::DrDrop;
use transport::mad::portinfo::port_state;
use transport::switch::{Switch, SwitchDrop};

use super::{Config, Port};
use crate::counters_out::{
    link_stages, to_json, write_atomically, CountersFormat, Named, Ordered, Stage, FILE_EVERY,
};
use crate::fabric::Link as _;

/// A counter name: the reason's name in snake case.
fn snake(d: impl std::fmt::Debug) -> String {
    let mut s = String::new();
    for (i, c) in format!("{d:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_lowercase());
    }
    s
}

/// The JSON report (`Snapshot::json`).
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    time: f64,
    switch: &'a str,
    mode: &'a str,
    drops: Named,
    dr_drops: Named,
    sma: Named,
    traps: Named,
    ports: Vec<JsonPort<'a>>,
}

#[derive(serde::Serialize)]
struct JsonPort<'a> {
    port: u8,
    peer: &'a str,
    state: &'a str,
    counters: Named,
    link: Ordered<Stage>,
}

fn state_name(st: u8) -> &'static str {
    match st {
        port_state::DOWN => "Down",
        port_state::INIT => "Init",
        port_state::ARMED => "Armed",
        port_state::ACTIVE => "Active",
        _ => "?",
    }
}

/// One port in a snapshot.
#[derive(Debug, Clone)]
pub struct PortSnap {
    pub num: u8,
    pub peer: String,
    pub state: &'static str,
    pub counters: Vec<(&'static str, u64)>,
    /// The link stages' report lines.
    pub link: String,
}

/// The switch's counters at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub time: Duration,
    pub switch: String,
    pub mode: &'static str,
    pub ports: Vec<PortSnap>,
    pub drops: Vec<(String, u64)>,
    pub dr_drops: Vec<(String, u64)>,
    pub sma_replies: u64,
    pub sma_error_replies: u64,
    /// The SMA's traps (trap 128 on a link change, trap 256 on a failed
    /// M_Key check), each reason a trap was not sent counted.
    pub traps: [(&'static str, u64); 5],
    /// M_Key lease expiries and port 0's M_KeyViolations, the BMA's B_Key
    /// drops and B_KeyViolations (AD-12), the CC agent's counters (IBA
    /// A10.4: its drops, responses, CC_KeyViolations).
    pub agent_keys: Vec<(&'static str, u64)>,
}

/// A port's counters: PortCounters, `spoofed_slid` (dropped before the core)
/// and the data packets the port marked FECN (IBA A10.2.1).
fn port_counters(core: &Switch, num: u8, spoofed: u64) -> Vec<(&'static str, u64)> {
    let pc = core.port_counters(num).copied().unwrap_or_default();
    vec![
        ("xmit_packets", pc.xmit_packets),
        ("rcv_packets", pc.rcv_packets),
        ("xmit_data_words", pc.xmit_data_words),
        ("rcv_data_words", pc.rcv_data_words),
        ("rcv_errors", pc.rcv_errors),
        ("xmit_discards", pc.xmit_discards),
        ("vl15_dropped", pc.vl15_dropped),
        // Dropped before the core (ARCHITECTURE.md §9).
        ("spoofed_slid", spoofed),
        // IBA A10.2.1: data packets this port marked FECN as they joined
        // its output queue (issue 31).
        ("fecn_marked", core.fecn_marked(num)),
    ]
}

/// The management agents' key counters: the SMA's M_Key, the BMA's B_Key
/// (AD-12), and every counter of the CC agent (IBA A10.4).
fn agent_counters(core: &Switch) -> Vec<(&'static str, u64)> {
    let c = core.counters();
    let mut v = vec![
        ("lease_expiries", c.lease_expiries),
        (
            "mkey_violations",
            core.port(0)
                .map_or(0, |p| u64::from(p.info.mkey_violations)),
        ),
        (
            "bma_drop_bad_bkey",
            core.bma().counters().drops(BmaDrop::BadBkey),
        ),
        (
            "bkey_violations",
            u64::from(core.bma().bkey_info().violations),
        ),
    ];
    v.extend(core.cc_agent().named_counters());
    v
}

pub(super) fn snapshot(cfg: &Config, core: &Switch, ports: &[Port]) -> Snapshot {
    let c = core.counters();
    Snapshot {
        time: crate::run::now(),
        switch: cfg.switch.clone(),
        mode: cfg.mode.name(),
        ports: ports
            .iter()
            .map(|p| PortSnap {
                num: p.num,
                peer: p.peer.clone(),
                state: state_name(core.port(p.num).map_or(0, |s| s.info.port_state)),
                counters: port_counters(core, p.num, p.spoofed),
                link: p.link.report().unwrap_or_default(),
            })
            .collect(),
        drops: SwitchDrop::ALL
            .iter()
            .map(|d| (snake(d), c.drop_count(*d)))
            .collect(),
        dr_drops: DrDrop::ALL
            .iter()
            .map(|d| (snake(d), c.dr_drops[d.index()]))
            .collect(),
        sma_replies: c.sma_replies,
        sma_error_replies: c.sma_error_replies,
        traps: [
            ("sent", c.traps_sent),
            ("repressed", c.traps_repressed),
            ("abandoned", c.traps_abandoned),
            ("no_sm", c.traps_no_sm),
            ("queue_full", c.traps_queue_full),
        ],
        agent_keys: agent_counters(core),
    }
}

impl Snapshot {
    /// A line per part: the switch's drops, then each port.
    pub fn text(&self) -> String {
        let words = |v: &[(String, u64)]| -> String {
            v.iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut s = format!(
            "switch {} ({}): drops: {}\nswitch {} dr_drops: {} sma_replies {} sma_error_replies {} {}\n\
             switch {} traps: {}\n",
            self.switch,
            self.mode,
            words(&self.drops),
            self.switch,
            words(&self.dr_drops),
            self.sma_replies,
            self.sma_error_replies,
            words(
                &self
                    .agent_keys
                    .iter()
                    .map(|(k, v)| (k.to_string(), *v))
                    .collect::<Vec<_>>()
            ),
            self.switch,
            words(&self.traps.map(|(k, v)| (k.to_string(), v)))
        );
        for p in &self.ports {
            let pc: Vec<(String, u64)> = p
                .counters
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect();
            let _ = writeln!(
                s,
                "port {} ({}, cabled to {}): {}",
                p.num,
                p.state,
                p.peer,
                words(&pc)
            );
            for l in p.link.lines() {
                let _ = writeln!(s, "port {} {l}", p.num);
            }
        }
        s.trim_end().to_string()
    }

    /// One JSON object, without a newline: `time`, `switch`, `mode`,
    /// `drops`, `dr_drops`, `sma`, `traps`, and `ports`, an array of
    /// `{"port", "peer", "state", "counters", "link"}` (serde, issue 28).
    pub fn json(&self) -> String {
        let pairs = |v: &[(String, u64)]| Named(v.to_vec());
        let statics =
            |v: &[(&str, u64)]| Named(v.iter().map(|(k, n)| (k.to_string(), *n)).collect());
        let sma: Vec<(&str, u64)> = [
            ("replies", self.sma_replies),
            ("error_replies", self.sma_error_replies),
        ]
        .into_iter()
        .chain(self.agent_keys.iter().copied())
        .collect();
        to_json(&JsonReport {
            time: self.time.as_secs_f64(),
            switch: &self.switch,
            mode: self.mode,
            drops: pairs(&self.drops),
            dr_drops: pairs(&self.dr_drops),
            sma: statics(&sma),
            traps: statics(&self.traps),
            ports: self
                .ports
                .iter()
                .map(|p| JsonPort {
                    port: p.num,
                    peer: &p.peer,
                    state: p.state,
                    counters: statics(&p.counters),
                    link: link_stages(&p.link),
                })
                .collect(),
        })
    }

    fn render(&self, f: CountersFormat) -> String {
        match f {
            CountersFormat::Text => self.text(),
            CountersFormat::Json => self.json(),
        }
    }
}

/// The periodic log and the counters file. The file is small and written
/// by the switch's one thread (atomically, `write_atomically`); a failed
/// write is logged once until one succeeds.
pub(super) struct Output {
    every: Option<Duration>,
    format: CountersFormat,
    file: Option<PathBuf>,
    last_log: Instant,
    last_file: Option<Instant>,
    failing: bool,
    /// `--metrics-listen`: where the copy the endpoint serves is put
    /// (`metrics::listen_switch`), and when it was last.
    metrics: Option<crate::metrics::SwitchSlot>,
    last_publish: Option<Instant>,
}

impl Output {
    pub(super) fn new(cfg: &Config) -> Output {
        Output {
            every: cfg.counters_every,
            format: cfg.counters_format,
            file: cfg.counters_file.clone(),
            last_log: Instant::now(),
            last_file: None,
            failing: false,
            metrics: None,
            last_publish: None,
        }
    }

    /// Puts a copy of the counters into `slot` as the switch runs, at most
    /// once per `metrics::SNAPSHOT_EVERY` (the loop runs at least every
    /// `MAX_SLEEP`), for the Prometheus endpoint's thread: the switch's one
    /// thread never waits for a client.
    pub(super) fn publish_to(&mut self, slot: crate::metrics::SwitchSlot) {
        self.metrics = Some(slot);
    }

    /// Prints and writes what is due; `snap` is called only then.
    pub(super) fn tick(&mut self, snap: impl FnOnce() -> Snapshot) {
        let now = Instant::now();
        let log_due = self.every.is_some_and(|e| now - self.last_log >= e);
        let period = self.every.unwrap_or(FILE_EVERY);
        let file_due = self.file.is_some() && self.last_file.is_none_or(|t| now - t >= period);
        let publish_due = self.metrics.is_some()
            && self
                .last_publish
                .is_none_or(|t| now - t >= crate::metrics::SNAPSHOT_EVERY);
        if !log_due && !file_due && !publish_due {
            return;
        }
        let s = snap();
        if let (true, Some(m)) = (publish_due, &self.metrics) {
            self.last_publish = Some(now);
            *m.lock().unwrap_or_else(|p| p.into_inner()) = Some(s.clone());
        }
        if log_due {
            self.last_log = now;
            eprintln!("{}", s.render(self.format));
        }
        if file_due {
            self.last_file = Some(now);
            self.write(&s);
        }
    }

    fn write(&mut self, s: &Snapshot) {
        let Some(f) = &self.file else { return };
        match write_atomically(f, &(s.json() + "\n")) {
            Ok(()) => self.failing = false,
            Err(e) if !self.failing => {
                self.failing = true;
                log::warn!("switch: --counters-file {}: {e}", f.display());
            }
            Err(_) => {}
        }
    }

    /// The exit report: stderr, and the file once more.
    pub(super) fn report(&mut self, s: &Snapshot) {
        eprintln!("{}", s.render(self.format));
        self.write(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28 item 2: the switch's JSON is built by serde and keeps its
    /// keys (images/fabric-tests.sh greps `"rcv_packets":N` and `"traps":{`).
    #[test]
    fn the_switch_json_is_valid_and_keeps_its_keys() {
        let s = Snapshot {
            time: Duration::from_millis(2_250),
            switch: "sw\"0".into(),
            mode: "static",
            ports: vec![PortSnap {
                num: 1,
                peer: "n0".into(),
                state: "Active",
                counters: vec![("xmit_packets", 4), ("rcv_packets", 5)],
                link: "udp sw0:1: tx 4 (40 B, 1 GSO runs)\nflow: fc_tx 2".into(),
            }],
            drops: vec![("malformed".into(), 1)],
            dr_drops: vec![("bad_hop_pointer".into(), 0)],
            sma_replies: 3,
            sma_error_replies: 0,
            traps: [
                ("sent", 1),
                ("repressed", 0),
                ("abandoned", 0),
                ("no_sm", 0),
                ("queue_full", 0),
            ],
            agent_keys: vec![
                ("lease_expiries", 0),
                ("mkey_violations", 0),
                ("bma_drop_bad_bkey", 0),
                ("bkey_violations", 0),
            ],
        };
        let j = s.json();
        assert!(
            j.contains("\"rcv_packets\":5") && j.contains("\"traps\":{\"sent\":1,"),
            "{j}"
        );
        let v: serde_json::Value = serde_json::from_str(&j).expect("valid JSON");
        assert_eq!(v["time"], 2.25);
        assert_eq!(v["switch"], "sw\"0");
        assert_eq!(v["mode"], "static");
        assert_eq!(v["drops"]["malformed"], 1);
        assert_eq!(v["dr_drops"]["bad_hop_pointer"], 0);
        assert_eq!(v["sma"]["replies"], 3);
        assert_eq!(v["sma"]["bkey_violations"], 0);
        let p = &v["ports"][0];
        assert_eq!(
            (p["port"].as_u64(), p["peer"].as_str()),
            (Some(1), Some("n0"))
        );
        assert_eq!(p["state"], "Active");
        assert_eq!(p["counters"]["xmit_packets"], 4);
        assert_eq!(p["link"]["udp"]["tx_bytes"], 40);
        assert_eq!(p["link"]["flow"]["fc_tx"], 2);
        assert_eq!(v.as_object().unwrap().len(), 8, "{v}");
    }

    /// A 4-port switch with its CC_Key protected (an SM's CongestionKeyInfo
    /// Set) and marking at threshold 15 (SwitchCongestionSetting), as
    /// OpenSM's CC manager and ibccconfig leave it in images/subnet-tests.sh.
    fn cc_switch() -> Switch {
        use transport::mad::cc_attr::{
            id, sw_control_map, SwitchCongestionSetting, CC_KEY, CLASS_CC,
        };
        use transport::mad::NodeDescription;
        use transport::switch::SwitchConfig;
        let mut sw = Switch::new(&SwitchConfig {
            num_ports: 4,
            node_guid: 0x0200_0000_0000_0b00,
            system_image_guid: 0x0200_0000_0000_0b00,
            device_id: 0,
            vendor_id: 0x02_0000,
            revision: 0,
            description: NodeDescription::from_text("sw0"),
            linear_fdb_cap: 64,
            multicast_fdb_cap: 32,
        });
        let t = transport::verbs::Time(1);
        let mad = |method: u8, key: u64, data: &[u8]| {
            let mut m = [0u8; 256];
            m[..4].copy_from_slice(&[1, CLASS_CC, 2, method]);
            m[16..18].copy_from_slice(&id::CONGESTION_KEY_INFO.to_be_bytes());
            m[CC_KEY].copy_from_slice(&key.to_be_bytes());
            m[64..64 + data.len()].copy_from_slice(data);
            m
        };
        let mut k = [0u8; 14];
        k[..8].copy_from_slice(&0xcc01u64.to_be_bytes());
        k[8] = 0x80;
        let a = sw.cc_agent_mut();
        assert!(a.handle_mad(&mad(0x02, 0, &k), t).is_some(), "key set");
        assert!(a.handle_mad(&mad(0x01, 0xbad, &[]), t).is_none(), "bad key");
        a.set_switch_setting(&SwitchCongestionSetting {
            control_map: sw_control_map::THRESHOLD_PACKET_SIZE,
            threshold: 15,
            ..SwitchCongestionSetting::default()
        });
        sw
    }

    /// Issue 31 item 2: the switch's report carries what an SM's CC manager
    /// and the data path did to it: per port the packets marked FECN (IBA
    /// A10.2.1), and the CC agent's drops and CC_KeyViolations (A10.4.1).
    #[test]
    fn a10_switch_report_has_fecn_marked_per_port_and_the_cc_agents_counters() {
        use transport::switch::cc::QueueDepth;
        use transport::wire::opcode::Opcode;
        use transport::wire::{BthRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};
        let mut sw = cc_switch();
        let repr = PacketRepr {
            lrh: LrhRepr {
                vl: 0,
                sl: 0,
                dlid: 3,
                slid: 2,
            },
            grh: None,
            transport: TransportRepr {
                bth: BthRepr {
                    opcode: Opcode::RC_SEND_ONLY,
                    solicited: false,
                    mig_req: false,
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    dest_qp: 0x44,
                    ack_req: true,
                    psn: 7,
                },
                ext: ExtHeaders::default(),
                payload: &[0x5a; 512],
            },
        };
        let mut pkt = vec![0u8; repr.buffer_len()];
        repr.emit(&mut pkt).unwrap();
        let full = QueueDepth {
            blocks: 100,
            limit: 100,
        };
        let t = transport::verbs::Time(2);
        assert!(sw.cc_mark(2, &pkt, full, t).is_some(), "marked");
        let ports = port_counters(&sw, 2, 0);
        assert!(ports.contains(&("fecn_marked", 1)), "{ports:?}");
        assert!(port_counters(&sw, 1, 0).contains(&("fecn_marked", 0)));
        let agents = agent_counters(&sw);
        for want in [
            ("cca_drop_bad_cc_key", 1),
            ("cc_key_violations", 1),
            ("cca_replies", 1),
        ] {
            assert!(agents.contains(&want), "{want:?} in {agents:?}");
        }
    }
}
