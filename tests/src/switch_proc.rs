//! `vhca switch` processes (issue 26 item 3): a switch of a fabric file,
//! its counters file read as JSON, SIGTERM and the exit counters; a star
//! fabric of `vhca` HCAs cabled to one switch; an RC pair patient enough
//! for switch hops and a WRITE-then-SEND exchange checked byte for byte.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixture::{assert_success, connect_pair_with, wait_n, Node};
use crate::guest::Layout;
use crate::hca::{ConnOpts, QpH, QpInit};
use crate::process::{free_udp_ports, vhca_binary, wrapped, Build, Options, Vhca};
use crate::util::{assert_bytes, pattern};
use crate::verbs::{RecvWr, SendWr};
use device::abi::verbs::QpType;

const T: Duration = Duration::from_secs(30);

/// A running `vhca switch`, killed on drop.
pub struct SwitchProc {
    child: Option<Child>,
    stderr: PathBuf,
    counters: PathBuf,
}

impl SwitchProc {
    pub fn spawn(fabric: &Path, name: &str, dir: &Path, extra: &[&str]) -> SwitchProc {
        SwitchProc::spawn_wrapped(fabric, name, dir, extra, None)
    }

    /// [`SwitchProc::spawn`] under `wrap` (`process::wrapped`: e.g. `ip
    /// netns exec NS`).
    pub fn spawn_wrapped(
        fabric: &Path,
        name: &str,
        dir: &Path,
        extra: &[&str],
        wrap: Option<&Vec<String>>,
    ) -> SwitchProc {
        let stderr = dir.join(format!("{name}.stderr"));
        let counters = dir.join(format!("{name}.counters.json"));
        let _ = std::fs::remove_file(&counters);
        let child = wrapped(wrap, &vhca_binary(Build::Debug))
            .arg("switch")
            .arg("--fabric")
            .arg(fabric)
            .arg("--switch")
            .arg(name)
            .arg("--counters-file")
            .arg(&counters)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("the switch's stderr"))
            .spawn()
            .expect("start vhca switch");
        SwitchProc {
            child: Some(child),
            stderr,
            counters,
        }
    }

    /// The switch's process id (panics once it was stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The counters file as JSON, once it exists.
    pub fn counters(&mut self) -> Value {
        let deadline = Instant::now() + T;
        loop {
            if let Ok(t) = std::fs::read_to_string(&self.counters) {
                if let Ok(v) = serde_json::from_str(&t) {
                    return v;
                }
            }
            if let Some(s) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("vhca switch exited ({s}): {}", self.stderr_text());
            }
            assert!(
                Instant::now() < deadline,
                "no counters file: {}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the counters file shows every port in `ports` Active.
    pub fn wait_active(&mut self, ports: &[u64]) {
        let deadline = Instant::now() + T;
        loop {
            let v = self.counters();
            let active = |p: u64| {
                v["ports"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["port"] == p && x["state"] == "Active")
            };
            if ports.iter().all(|&p| active(p)) {
                return;
            }
            assert!(Instant::now() < deadline, "ports not Active: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM; the exit status and the last counters (the exit report's).
    pub fn stop(&mut self) -> (std::process::ExitStatus, Value) {
        let mut c = self.child.take().expect("running");
        crate::sys::kill(c.id(), libc::SIGTERM).expect("SIGTERM");
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(s) = c.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("vhca switch ignored SIGTERM: {}", self.stderr_text());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        (status, self.counters())
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for SwitchProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `[[switch]]` sw0 with `ports` ports at the given addresses, and a link
/// from node `n{i}` to port i + 1 for each of `nodes`.
pub fn star(ports: &[u16], nodes: usize) -> String {
    let list: Vec<String> = ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    let mut s = format!(
        "[[switch]]\nname = \"sw0\"\nguid = \"0x0002c90300009000\"\nports = {}\naddress = [{}]\nlid = 0x40\n",
        ports.len(),
        list.join(", ")
    );
    for i in 0..nodes {
        let _ = write!(s, "[[link]]\nends = [\"n{i}\", \"sw0:{}\"]\n", i + 1);
    }
    s
}

/// `nodes` HCAs on a switch of `ports` ports (node i on port i + 1), the
/// fabric file starting with `header`; returns once every cabled switch port
/// is Active.
pub fn star_fabric(nodes: usize, ports: usize, header: &str) -> (Vhca, SwitchProc) {
    star_fabric_with(nodes, ports, header, &[])
}

/// [`star_fabric`], every `vhca` started with the arguments `args` too.
pub fn star_fabric_with(
    nodes: usize,
    ports: usize,
    header: &str,
    args: &[&str],
) -> (Vhca, SwitchProc) {
    star_fabric_tail(nodes, ports, header, "", args)
}

/// [`star_fabric_with`], `tables` (e.g. `[ib_cc]` and its keys) written
/// after the switch and its links, where a TOML table may start.
pub fn star_fabric_tail(
    nodes: usize,
    ports: usize,
    header: &str,
    tables: &str,
    args: &[&str],
) -> (Vhca, SwitchProc) {
    let sw_ports = free_udp_ports(ports).unwrap();
    let opts = Options {
        top_toml: format!("{}{tables}", star(&sw_ports, nodes)),
        fabric_header: header.to_string(),
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        ..Options::nodes(nodes)
    };
    let v = Vhca::spawn(opts);
    let mut sw = SwitchProc::spawn(v.fabric_file(), "sw0", v.dir(), &[]);
    let cabled: Vec<u64> = (1..=nodes as u64).collect();
    sw.wait_active(&cabled);
    (v, sw)
}

/// An RC pair whose local ACK timeout (4.096 us * 2^17, about 0.5 s; eight
/// tries) outlasts a debug-built switch process descheduled on a loaded
/// two-CPU host, where the default 67 ms ran out of retries once.
pub fn rc_pair(a: &mut Node, b: &mut Node) -> (QpH, QpH) {
    rc_pair_with_timeout(a, b, 17)
}

/// An RC pair with local ACK timeout exponent `timeout` (4.096 us *
/// 2^timeout).
pub fn rc_pair_with_timeout(a: &mut Node, b: &mut Node, timeout: u8) -> (QpH, QpH) {
    rc_pair_with(
        a,
        b,
        &ConnOpts {
            timeout,
            ..ConnOpts::default()
        },
    )
}

/// An RC pair between `a` and `b` (each on its PD and CQ) connected with `o`.
pub fn rc_pair_with(a: &mut Node, b: &mut Node, o: &ConnOpts) -> (QpH, QpH) {
    let ia = QpInit::new(QpType::Rc, a.pd, a.cq);
    let ib = QpInit::new(QpType::Rc, b.pd, b.cq);
    connect_pair_with(a, &ia, b, &ib, o)
}

/// Over RC QP `qa` of `a` (connected to `b`): an RDMA WRITE of `len` bytes
/// of pattern `seed` into a region of b, completed and checked byte for byte
/// (`what` names it in a failure).
pub fn write_checked(a: &mut Node, b: &mut Node, qa: QpH, len: usize, seed: u64, what: &str) {
    let src = a.region(len, Layout::Scattered, 0);
    let dst = b.region(len, Layout::Scattered, 0);
    let data = pattern(seed, len);
    a.write(&src, 0, &data);
    a.hca
        .post_send(
            qa,
            &SendWr::write(1, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len)),
        )
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert_bytes(&b.read(&dst, 0, len), &data, what);
}

/// Over the connected RC pair (`qa` on `a`, `qb` on `b`): an RDMA WRITE of
/// `len` bytes of pattern `seed` from a to b, then a 3000-byte SEND of
/// pattern `seed + 1` from b to a, each checked byte for byte (`what` names
/// the pair in a failure).
pub fn write_then_send(
    a: &mut Node,
    b: &mut Node,
    (qa, qb): (QpH, QpH),
    len: usize,
    seed: u64,
    what: &str,
) {
    write_checked(a, b, qa, len, seed, &format!("WRITE {what}"));
    let inbox = a.region(4096, Layout::Contiguous, 0);
    a.hca
        .post_recv(qa, &RecvWr::new(2, vec![inbox.mr.sge(&inbox.buf, 0, 4096)]))
        .unwrap();
    let msg = pattern(seed + 1, 3000);
    let out = b.region(4096, Layout::Contiguous, 0);
    b.write(&out, 0, &msg);
    b.hca
        .post_send(qb, &SendWr::send(3).sge(out.mr.sge(&out.buf, 0, msg.len())))
        .unwrap();
    assert_success(&wait_n(&mut b.hca, b.cq, 1, T));
    assert_success(&wait_n(&mut a.hca, a.cq, 1, T));
    assert_bytes(
        &a.read(&inbox, 0, msg.len()),
        &msg,
        &format!("SEND back, {what}"),
    );
}
