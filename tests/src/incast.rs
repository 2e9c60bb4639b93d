//! An 8-to-1 incast through one `vhca switch` (issue 27 item 4): eight
//! `vhca` senders each RDMA WRITE `depth` messages of `len` bytes over RC
//! to one receiver at once, through a switch of nine ports, with link flow
//! control (IBA 7.9) on or off in the fabric file. What it measures: every
//! socket's kernel drops (the HCAs' and the switch ports'), the switch's
//! drops, the senders' transport retries, and each sender's goodput. Used
//! by `tests/tests/incast.rs` and `scripts/bench-incast.sh`.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixture::Node;
use crate::guest::Layout;
use crate::switch_proc::{rc_pair_with_timeout, star_fabric_with};
use crate::util::{assert_bytes, pattern};
use crate::verbs::SendWr;

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
    /// Drops of the links' own (UDP and flow-control stages), all nodes.
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
}

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
    let header = format!("flow_control = {flow_control}\n{extra}");
    let n = SENDERS + 1;
    // Loss probes off: a probe fires when nothing was acknowledged for a
    // probe timeout (1 ms floor), which an 8-to-1 incast's queueing delay
    // exceeds with or without loss; left on, they resend packets that were
    // only late and the count would not tell loss from delay. Off, every
    // resend is the spec's recovery from a loss (a sequence NAK's go-back,
    // the local ACK timeout; 9.7.4.1.3).
    let (mut v, mut sw) = star_fabric_with(n, n, &header, &["--no-loss-probes"]);
    let mut nodes: Vec<Node> = (0..n).map(|i| Node::connect(&v, i)).collect();
    let (senders, rx) = nodes.split_at_mut(SENDERS);
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
    let start = Instant::now();
    for (s, (qa, src, dst, _)) in senders.iter_mut().zip(&posted) {
        for k in 0..depth {
            let wr = SendWr::write(k as u64, dst.buf.va(k * len), dst.mr.rkey).sge(src.mr.sge(
                &src.buf,
                k * len,
                len,
            ));
            s.hca.post_send(*qa, &wr).expect("post WRITE");
        }
    }
    let mut done = [0usize; SENDERS];
    let mut took = [Duration::ZERO; SENDERS];
    let deadline = start + Duration::from_secs(240);
    while done.iter().any(|&d| d < depth) {
        let mut got_any = false;
        for (i, s) in senders.iter_mut().enumerate() {
            if done[i] == depth {
                continue;
            }
            for c in s.hca.poll_cq(s.cq, depth - done[i]) {
                assert_eq!(c.status, 0, "sender n{i}: WRITE completed in error: {c:?}");
                done[i] += 1;
                got_any = true;
            }
            if done[i] == depth {
                took[i] = start.elapsed();
            }
        }
        assert!(
            Instant::now() < deadline,
            "incast not done: completions {done:?} of {depth}"
        );
        if !got_any {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let elapsed = start.elapsed();
    for (i, (_, _, dst, data)) in posted.iter().enumerate() {
        assert_bytes(&rx.read(dst, 0, total), data, &format!("n{i} -> n8"));
    }
    let (mut retries, mut probes, mut resent) = (0, 0, 0);
    for s in senders.iter_mut() {
        let mut c = |name| s.hca.port_counter(name).unwrap().unwrap_or(0);
        retries += c("retransmits") + c("timeouts");
        probes += c("loss_probes");
        resent += c("resent_packets");
    }
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
    }
    let (status, c) = sw.stop();
    assert!(status.success(), "switch: {status}");
    kernel_drops += switch_link_sum(&c, "udp", "rx_kernel_drops");
    link_drops += switch_link_sum(&c, "udp", "dropped");
    link_drops += switch_link_sum(&c, "flow", "drop_tx_queue_full");
    stalls += switch_link_sum(&c, "flow", "stalled");
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
            .map(|t| total as f64 / t.as_secs_f64().max(1e-9))
            .collect(),
        elapsed,
    }
}
