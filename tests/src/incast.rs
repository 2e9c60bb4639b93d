//! An 8-to-1 incast through one `vhca switch` (issue 27 item 4): eight
//! `vhca` senders each RDMA WRITE `depth` messages of `len` bytes over RC
//! to one receiver at once, through a switch of nine ports, with link flow
//! control (IBA 7.9) on or off in the fabric file. What it measures: every
//! socket's kernel drops (the HCAs' and the switch ports'), the switch's
//! drops, the senders' transport retries, and each sender's goodput. Used
//! by `tests/tests/incast.rs` and `scripts/bench-incast.sh`.
//!
//! [`run_setup`] adds IBA congestion control (issue 31 item 2: the fabric
//! file's `[ib_cc]`, read by the switch and every node) with its counters
//! (FECN marked at the switch, seen at the receiver, BECNs and rate cuts at
//! the senders), and a victim flow: a second RC QP of sender n0 to a tenth
//! node, n9, on an idle switch port, whose 8-byte WRITEs wait behind n0's
//! incast packets for the credit of n0's link (head-of-line blocking, as in
//! `transport/tests/sim_ib_incast.rs`); its round trips are timed unloaded
//! (before the incast, same fabric) and during the incast. Used by
//! `scripts/bench-cc-ib.sh` (`tests/examples/cc_ib_bench.rs`).

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixture::{connect_pair_with, Node, Region};
use crate::guest::Layout;
use crate::hca::{ConnOpts, CqH, QpH, QpInit};
use crate::switch_proc::{rc_pair_with_timeout, star_fabric_tail};
use crate::util::{assert_bytes, pattern};
use crate::verbs::SendWr;
use device::abi::verbs::QpType;

/// Senders.
pub const SENDERS: usize = 8;

/// What one incast run measured.
#[derive(Debug, Clone, Default)]
pub struct Incast {
    /// Datagrams the kernel dropped at full receive buffers, every socket
    /// (nine HCAs, nine switch ports).
    pub kernel_drops: u64,
    /// The switch's drops, every reason.
    pub switch_drops: u64,
    /// Drops of the links' own (UDP and flow-control stages: queue full,
    /// head-of-queue lifetime), all nodes and switch ports.
    pub link_drops: u64,
    /// The senders' RC retries (9.7.4.1.3): `retransmits` + `timeouts`.
    pub retries: u64,
    /// The senders' loss probes (not retries, RL-10): a probe is sent
    /// when nothing was acknowledged for a probe timeout, loss or not.
    pub probes: u64,
    /// Request packets the senders sent again (go-backs and probes).
    pub resent: u64,
    /// Times a packet waited for link credit, all ports.
    pub stalls: u64,
    /// Each sender's goodput, bytes per second from the posts to its last
    /// completion.
    pub goodput: Vec<f64>,
    /// From the posts to the last completion.
    pub elapsed: Duration,
    /// Data packets the switch marked FECN, all ports (IBA A10.2.1).
    pub fecn_marked: u64,
    /// The most 64-byte blocks the bottleneck (the receiver's switch port)
    /// held waiting for credit (its flow stage's `queue_max_blocks`).
    pub queue_max_blocks: u64,
    /// Requests the receiver got marked FECN (`cc_fecn_seen`).
    pub fecn_seen: u64,
    /// BECNs that reached the senders' QPs (`cc_becns_received`).
    pub becns: u64,
    /// The senders' CCTI rises (`cc_rate_cuts`).
    pub rate_cuts: u64,
    /// The victim's round trips, when [`Setup::victim`].
    pub victim: Option<Victim>,
}

/// The victim flow's round trips: 8-byte RC WRITEs from n0 to n9, one at a
/// time, each timed from its post to its completion (the ACK's return) as
/// the driver sees it.
#[derive(Debug, Clone, Default)]
pub struct Victim {
    /// Before the incast, on the same fabric.
    pub unloaded: Vec<Duration>,
    /// While the incast runs.
    pub loaded: Vec<Duration>,
}

/// The smallest and the largest of `xs` (the benches' min-max columns over
/// rounds); (inf, -inf) when empty.
pub fn min_max(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

/// The `q` quantile (0..=1) of `v` (nearest rank); zero when empty.
pub fn quantile(v: &[Duration], q: f64) -> Duration {
    let mut s = v.to_vec();
    s.sort();
    match s.len() {
        0 => Duration::ZERO,
        n => s[((n as f64 * q).ceil() as usize).clamp(1, n) - 1],
    }
}

impl Victim {
    /// p99 during the incast over p99 unloaded.
    pub fn p99_ratio(&self) -> f64 {
        quantile(&self.loaded, 0.99).as_secs_f64()
            / quantile(&self.unloaded, 0.99).as_secs_f64().max(1e-9)
    }
}

/// One incast's set-up.
#[derive(Debug, Clone)]
pub struct Setup<'a> {
    /// Link flow control (IBA 7.9) in the fabric file.
    pub flow_control: bool,
    /// More top-level fabric lines (e.g. `rx_buffer = ...`).
    pub extra: &'a str,
    /// Tables after the switch (e.g. `[ib_cc]` and its keys).
    pub tables: &'a str,
    /// WRITEs per sender outstanding (and the slots of its regions).
    pub depth: usize,
    /// Times each sender writes its `depth` slots: as a WRITE completes the
    /// next is posted, `depth * laps` in all (1: `depth` WRITEs).
    pub laps: usize,
    /// Bytes per WRITE.
    pub len: usize,
    /// Round trips of the victim timed before the incast (0: no victim);
    /// during the incast it runs until the last sender completes.
    pub victim: usize,
}

/// The victim's gap between a completion and the next post: the driver
/// spins while a WRITE is out, so a gap leaves the host's two CPUs to the
/// processes most of the time.
const VICTIM_GAP: Duration = Duration::from_micros(500);

impl Incast {
    /// Jain's fairness index of the senders' goodputs: 1 when all are equal,
    /// 1/n when one sender has it all.
    pub fn fairness(&self) -> f64 {
        jain(&self.goodput)
    }

    /// Sum of the senders' goodputs.
    pub fn total_goodput(&self) -> f64 {
        self.goodput.iter().sum()
    }
}

/// Jain's fairness index (sum x)^2 / (n sum x^2).
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * q)
}

/// The value after `name` on the last line starting with `prefix` in `text`.
fn counter_after(text: &str, prefix: &str, name: &str) -> Option<u64> {
    let line = text.lines().rev().find(|l| l.starts_with(prefix))?;
    let mut w = line.split_whitespace();
    w.find(|x| x.trim_end_matches(':') == name)?;
    w.next()?.trim_end_matches(':').parse().ok()
}

/// Sums `key` of stage `stage` over the switch counters' ports.
fn switch_link_sum(c: &Value, stage: &str, key: &str) -> u64 {
    c["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["link"][stage][key].as_u64())
                .sum()
        })
        .unwrap_or(0)
}

/// Runs the incast: flow control as `flow_control`, more top-level fabric
/// lines in `extra` (e.g. `rx_buffer = ...`), `depth` WRITEs of `len` bytes
/// per sender, each checked byte for byte at the receiver.
pub fn run(flow_control: bool, extra: &str, depth: usize, len: usize) -> Incast {
    run_setup(&Setup {
        flow_control,
        extra,
        tables: "",
        depth,
        laps: 1,
        len,
        victim: 0,
    })
}

/// A victim WRITE of n0's: the QP, its CQ, the 8 bytes and where they go.
struct VictimQp {
    qp: QpH,
    cq: CqH,
    wr: SendWr,
}

/// Posts the victim's WRITE and waits for its completion (spinning, so that
/// the time is the round trip's, not a sleep's).
fn victim_round_trip(n0: &mut Node, v: &VictimQp) -> Duration {
    let t = Instant::now();
    n0.hca
        .post_send(v.qp, &v.wr)
        .expect("post the victim's WRITE");
    let deadline = t + Duration::from_secs(30);
    loop {
        if let Some(c) = n0.hca.poll_cq(v.cq, 1).first() {
            assert_eq!(c.status, 0, "victim WRITE completed in error: {c:?}");
            return t.elapsed();
        }
        assert!(Instant::now() < deadline, "victim WRITE not completed");
        std::thread::yield_now();
    }
}

/// Runs the incast as `o` says.
pub fn run_setup(o: &Setup) -> Incast {
    let (depth, len) = (o.depth, o.len);
    let header = format!("flow_control = {}\n{}", o.flow_control, o.extra);
    // The receiver n8, and the victim's peer n9 when there is a victim.
    let n = SENDERS + 1 + usize::from(o.victim > 0);
    // Loss probes off: a probe fires when nothing was acknowledged for a
    // probe timeout (1 ms floor), which an 8-to-1 incast's queueing delay
    // exceeds with or without loss; left on, they resend packets that were
    // only late and the count would not tell loss from delay. Off, every
    // resend is the spec's recovery from a loss (a sequence NAK's go-back,
    // the local ACK timeout; 9.7.4.1.3).
    let (mut v, mut sw) = star_fabric_tail(n, n, &header, o.tables, &["--no-loss-probes"]);
    let mut nodes: Vec<Node> = (0..n).map(|i| Node::connect(&v, i)).collect();
    let (senders, rest) = nodes.split_at_mut(SENDERS);
    let (rx, peer) = rest.split_at_mut(1);
    let rx = &mut rx[0];
    let total = depth * len;
    let mut posted = Vec::new();
    for (i, s) in senders.iter_mut().enumerate() {
        // Local ACK timeout 4.096 us * 2^19, about 2 s: it outlasts the
        // incast's queueing (with flow control at most the senders' link
        // queues and switch buffers, a few hundred packets at the
        // receiver's rate) plus a debug-built process descheduled on a
        // loaded two-CPU host, so an ACK timeout means a loss, not a delay.
        let (qa, _qb) = rc_pair_with_timeout(s, rx, 19);
        let src = s.region(total, Layout::Scattered, 0);
        let dst = rx.region(total, Layout::Scattered, 0);
        let data = pattern(0x1ca5_7000 + i as u64, total);
        s.write(&src, 0, &data);
        posted.push((qa, src, dst, data));
    }
    let victim = peer.first_mut().map(|p| {
        let n0 = &mut senders[0];
        let cq = n0.hca.create_cq(12, 0).expect("the victim's CQ");
        // Its own CQ, so that its completions are told from the incast's.
        let ia = QpInit::new(QpType::Rc, n0.pd, cq);
        let ib = QpInit::new(QpType::Rc, p.pd, p.cq);
        let (qp, _) = connect_pair_with(
            n0,
            &ia,
            p,
            &ib,
            &ConnOpts {
                timeout: 19,
                ..ConnOpts::default()
            },
        );
        let src = n0.region(8, Layout::Contiguous, 0);
        let dst = p.region(8, Layout::Contiguous, 0);
        let wr =
            SendWr::write(u64::MAX, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 8));
        let v = VictimQp { qp, cq, wr };
        let unloaded = (0..o.victim)
            .map(|_| victim_round_trip(n0, &v))
            .collect::<Vec<_>>();
        (v, unloaded)
    });
    let mut loaded = Vec::new();
    // The victim's WRITE in flight (posted when), or when the next is due.
    let mut victim_out: Option<Instant> = None;
    let mut victim_next = Instant::now();
    // WRITE `k` of a sender: slot `k % depth` of its regions (a later lap
    // writes the same bytes again).
    let write = |k: usize, (_, src, dst, _): &(QpH, Region, Region, Vec<u8>)| {
        let at = (k % depth) * len;
        SendWr::write(k as u64, dst.buf.va(at), dst.mr.rkey).sge(src.mr.sge(&src.buf, at, len))
    };
    let writes = depth * o.laps.max(1);
    let start = Instant::now();
    for (s, p) in senders.iter_mut().zip(&posted) {
        for k in 0..depth {
            s.hca.post_send(p.0, &write(k, p)).expect("post WRITE");
        }
    }
    let mut sent = [depth; SENDERS];
    let mut done = [0usize; SENDERS];
    let mut took = [Duration::ZERO; SENDERS];
    let deadline = start + Duration::from_secs(240);
    while done.iter().any(|&d| d < writes) {
        let mut got_any = false;
        for (i, s) in senders.iter_mut().enumerate() {
            if done[i] == writes {
                continue;
            }
            for c in s.hca.poll_cq(s.cq, depth) {
                assert_eq!(c.status, 0, "sender n{i}: WRITE completed in error: {c:?}");
                done[i] += 1;
                got_any = true;
                if sent[i] < writes {
                    let p = &posted[i];
                    s.hca
                        .post_send(p.0, &write(sent[i], p))
                        .expect("post WRITE");
                    sent[i] += 1;
                }
            }
            if done[i] == writes {
                took[i] = start.elapsed();
            }
        }
        if let Some((vq, _)) = &victim {
            let n0 = &mut senders[0];
            if let Some(t) = victim_out {
                if let Some(c) = n0.hca.poll_cq(vq.cq, 1).first() {
                    assert_eq!(c.status, 0, "victim WRITE completed in error: {c:?}");
                    loaded.push(t.elapsed());
                    victim_out = None;
                    victim_next = Instant::now() + VICTIM_GAP;
                }
            } else if Instant::now() >= victim_next {
                n0.hca
                    .post_send(vq.qp, &vq.wr)
                    .expect("post the victim's WRITE");
                victim_out = Some(Instant::now());
            }
        }
        assert!(
            Instant::now() < deadline,
            "incast not done: completions {done:?} of {writes}"
        );
        if victim_out.is_some() {
            // Timing the victim: spin (yielding), as unloaded.
            std::thread::yield_now();
        } else if !got_any {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    if let (Some((vq, _)), Some(_)) = (&victim, victim_out) {
        // The last one, left out of the figures (it ran past the incast).
        let n0 = &mut senders[0];
        let deadline = Instant::now() + Duration::from_secs(30);
        while n0.hca.poll_cq(vq.cq, 1).is_empty() {
            assert!(Instant::now() < deadline, "victim WRITE not completed");
            std::thread::yield_now();
        }
    }
    let elapsed = start.elapsed();
    for (i, (_, _, dst, data)) in posted.iter().enumerate() {
        assert_bytes(&rx.read(dst, 0, total), data, &format!("n{i} -> n8"));
    }
    let (mut retries, mut probes, mut resent, mut becns, mut rate_cuts) = (0, 0, 0, 0, 0);
    for s in senders.iter_mut() {
        let mut c = |name| s.hca.port_counter(name).unwrap().unwrap_or(0);
        retries += c("retransmits") + c("timeouts");
        probes += c("loss_probes");
        resent += c("resent_packets");
        becns += c("cc_becns_received");
        rate_cuts += c("cc_rate_cuts");
    }
    let fecn_seen = rx.hca.port_counter("cc_fecn_seen").unwrap().unwrap_or(0);
    drop(posted);
    drop(nodes);
    let (mut kernel_drops, mut link_drops, mut stalls) = (0, 0, 0);
    for i in 0..n {
        v.stop(i, Duration::from_secs(5));
        let r = v.stderr(i);
        kernel_drops += counter_after(&r, "udp ", "rx_kernel_drops").expect("udp report");
        link_drops += counter_after(&r, "udp ", "dropped").unwrap_or(0);
        stalls += counter_after(&r, "flow:", "stalled").unwrap_or(0);
        link_drops += counter_after(&r, "flow:", "drop_tx_queue_full").unwrap_or(0);
        link_drops += counter_after(&r, "flow:", "drop_tx_hoq").unwrap_or(0);
    }
    let (status, c) = sw.stop();
    assert!(status.success(), "switch: {status}");
    kernel_drops += switch_link_sum(&c, "udp", "rx_kernel_drops");
    link_drops += switch_link_sum(&c, "udp", "dropped");
    link_drops += switch_link_sum(&c, "flow", "drop_tx_queue_full");
    // IBA 18.2.5.4: a switch port discards what waited at the head of its
    // queue past the port's HOQLife.
    link_drops += switch_link_sum(&c, "flow", "drop_tx_hoq");
    stalls += switch_link_sum(&c, "flow", "stalled");
    let fecn_marked = c["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| p["counters"]["fecn_marked"].as_u64())
                .sum()
        })
        .unwrap_or(0);
    let queue_max_blocks = c["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["port"] == SENDERS as u64 + 1))
        .and_then(|p| p["link"]["flow"]["queue_max_blocks"].as_u64())
        .unwrap_or(0);
    let switch_drops = c["drops"]
        .as_object()
        .map(|d| d.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    Incast {
        kernel_drops,
        switch_drops,
        link_drops,
        retries,
        probes,
        resent,
        stalls,
        goodput: took
            .iter()
            .map(|t| (writes * len) as f64 / t.as_secs_f64().max(1e-9))
            .collect(),
        elapsed,
        fecn_marked,
        queue_max_blocks,
        fecn_seen,
        becns,
        rate_cuts,
        victim: victim.map(|(_, unloaded)| Victim { unloaded, loaded }),
    }
}
