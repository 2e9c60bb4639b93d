//! Real `vhca` processes: the binary, a fabric file for N nodes on UDP loopback,
//! sockets, stderr logs and captures in a temporary folder, kill on drop.
//!
//! The binary is `$VHCA_BIN` when set; otherwise this builds it once per test
//! process with the cargo that runs the tests (`$CARGO`), into the same target
//! folder (`$CARGO_TARGET_DIR`, else the workspace's `target/`):
//!
//! - [`Build::Debug`]: `cargo build -p device --bin vhca` → `target/debug/vhca`;
//! - [`Build::Optimized`]: the same with the workspace's `vhca-test` profile
//!   (Cargo.toml: release without LTO, with debug assertions and overflow
//!   checks, so a device bug still panics) → `target/vhca-test/vhca`; for the
//!   heavy tests (fuzzing, 256 MiB under faults).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::UdpSocket;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Which build of the binary to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Build {
    /// The dev profile (`target/debug/vhca`).
    Debug,
    /// Optimised, with debug assertions and overflow checks (`target/vhca-test/vhca`).
    Optimized,
}

/// The workspace root (this crate's parent folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) if !d.is_empty() => {
            let d = PathBuf::from(d);
            if d.is_absolute() {
                d
            } else {
                workspace_root().join(d)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// The `vhca` binary for `build`: `$VHCA_BIN`, or built once per process.
/// Panics with cargo's output if the build fails.
pub fn vhca_binary(build: Build) -> PathBuf {
    if let Some(p) = std::env::var_os("VHCA_BIN") {
        if !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    static BUILT: OnceLock<Mutex<HashMap<Build, Result<PathBuf, String>>>> = OnceLock::new();
    let cache = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    let r = cache.entry(build).or_insert_with(|| cargo_build(build));
    match r {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

fn cargo_build(build: Build) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = workspace_root();
    let target = target_dir();
    let mut cmd = Command::new(&cargo);
    cmd.arg("build")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .args(["-p", "device", "--bin", "vhca"])
        .env("CARGO_TARGET_DIR", &target);
    let out = match build {
        Build::Debug => target.join("debug").join("vhca"),
        Build::Optimized => {
            cmd.args(["--profile", "vhca-test"]);
            target.join("vhca-test").join("vhca")
        }
    };
    let started = Instant::now();
    eprintln!("vhca-tests: building vhca ({build:?}): {cmd:?}");
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !o.status.success() {
        return Err(format!(
            "building vhca ({build:?}) failed ({}):\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    if !out.exists() {
        return Err(format!("cargo built, but {} is missing", out.display()));
    }
    eprintln!(
        "vhca-tests: vhca ({build:?}) ready in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(out)
}

/// How to start a fabric of `vhca` processes.
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes (processes), named `n0`, `n1`, ...
    pub nodes: usize,
    pub build: Build,
    /// `--fault SPEC` for every node (`faults` overrides per node).
    pub fault: Option<String>,
    /// Per-node `--fault`, by index (wins over `fault`).
    pub faults: HashMap<usize, String>,
    /// `--capture` into the run folder for every node.
    pub capture: bool,
    /// `--log LEVEL`.
    pub log: String,
    /// More arguments for every node.
    pub extra_args: Vec<String>,
    /// Environment variables for every node (test-only hooks such as
    /// `VHCA_TEST_PANIC`).
    pub env: Vec<(String, String)>,
    /// How long a process may take to create its socket.
    pub startup_timeout: Duration,
    /// Watchdog: after this long the processes are killed, so that a test
    /// blocked on a device that stopped answering fails instead of hanging
    /// (`$VHCA_TEST_TIMEOUT` seconds, default 300).
    pub watchdog: Duration,
    /// Per-node base LID, by index (default [`BASE_LID`] + index); with an
    /// `lmc` in `node_toml` it must be a multiple of 2^lmc (AD-01).
    pub lids: HashMap<usize, u16>,
    /// Extra lines of a node's `[[node]]` table (`lmc`, `pkeys`), by index.
    pub node_toml: HashMap<usize, String>,
    /// Top-level lines of the fabric file (a `pkeys` for every node).
    pub top_toml: String,
    /// Top-level lines of the fabric file before the nodes (e.g. the
    /// SL-to-VL table, `sl2vl = [...]`, AD-06).
    pub fabric_header: String,
    /// A whole fabric file (e.g. `vhca topology`'s, issue 27) instead of the
    /// one written from the fields above: its nodes must be `n0`, `n1`, ...,
    /// `nodes` of them; their LIDs, GUIDs and UDP ports come from it.
    pub fabric_text: Option<String>,
    /// A command that runs node i's process, by index: the binary and its
    /// arguments follow it (`ip netns exec NS` puts the node in a network
    /// namespace, issue 27 item 3). It must exec the binary, so that the
    /// process id is the node's.
    pub wrap: HashMap<usize, Vec<String>>,
    /// The nodes' UDP ports on the first try, one per node (a test of the
    /// retry when one is taken); empty: chosen free.
    pub first_ports: Vec<u16>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            nodes: 1,
            build: Build::Debug,
            fault: None,
            faults: HashMap::new(),
            capture: false,
            log: std::env::var("VHCA_TEST_LOG").unwrap_or_else(|_| "info".into()),
            extra_args: Vec::new(),
            env: Vec::new(),
            startup_timeout: Duration::from_secs(20),
            watchdog: Duration::from_secs(
                std::env::var("VHCA_TEST_TIMEOUT")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(300),
            ),
            lids: HashMap::new(),
            node_toml: HashMap::new(),
            top_toml: String::new(),
            fabric_header: String::new(),
            fabric_text: None,
            wrap: HashMap::new(),
            first_ports: Vec::new(),
        }
    }
}

impl Options {
    pub fn nodes(n: usize) -> Options {
        Options {
            nodes: n,
            ..Options::default()
        }
    }

    pub fn build(mut self, b: Build) -> Options {
        self.build = b;
        self
    }

    pub fn fault(mut self, spec: &str) -> Options {
        self.fault = Some(spec.to_string());
        self
    }

    pub fn capture(mut self) -> Options {
        self.capture = true;
        self
    }

    /// Top-level fabric file lines (`fabric_header`).
    pub fn fabric_header(mut self, text: &str) -> Options {
        self.fabric_header = text.to_string();
        self
    }
}

/// One node of the fabric file and where its process keeps its files.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub name: String,
    pub lid: u16,
    pub guid: u64,
    pub udp_port: u16,
    pub socket: PathBuf,
    /// stderr of the current process (each start appends).
    pub stderr: PathBuf,
    pub capture: Option<PathBuf>,
}

/// A fabric of running `vhca` processes; every one is killed on drop.
pub struct Vhca {
    dir: tempfile::TempDir,
    fabric: PathBuf,
    bin: PathBuf,
    opts: Options,
    nodes: Vec<NodeInfo>,
    procs: Vec<Option<Child>>,
    watch: Arc<Watch>,
}

/// What the watchdog thread shares with [`Vhca`]: the pids it may kill (only
/// children not yet reaped, so never a reused pid) and the stop flag.
#[derive(Debug, Default)]
struct Watch {
    pids: Mutex<Vec<Option<u32>>>,
    done: AtomicBool,
    fired: AtomicBool,
}

impl Watch {
    fn set(&self, i: usize, pid: Option<u32>) {
        let mut p = self.pids.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() <= i {
            p.resize(i + 1, None);
        }
        p[i] = pid;
    }

    fn start(self: &Arc<Self>, after: Duration) {
        let w = Arc::clone(self);
        std::thread::spawn(move || {
            let deadline = Instant::now() + after;
            while !w.done.load(Ordering::Acquire) {
                if Instant::now() > deadline {
                    w.fired.store(true, Ordering::Release);
                    let p = w.pids.lock().unwrap_or_else(|e| e.into_inner());
                    for pid in p.iter().flatten() {
                        eprintln!("vhca-tests: watchdog: {after:?} passed, killing pid {pid}");
                        let _ = crate::sys::kill(*pid, libc::SIGKILL);
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
    }
}

impl std::fmt::Debug for Vhca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vhca")
            .field("dir", &self.dir.path())
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// First LID given to node 0; node i has LID BASE_LID + i.
pub const BASE_LID: u16 = 0x11;

/// Port GUID of node `i`.
pub fn node_guid(i: usize) -> u64 {
    0x0002_c903_00ab_0000 + i as u64 + 1
}

/// `n` distinct UDP ports on 127.0.0.1 the OS had free (all held at once while
/// choosing, so they differ; a small race with other programs remains), and
/// none handed out before by this process: a switch's ports chosen and
/// released before the nodes' are chosen (`star_fabric`) could otherwise come
/// back from the OS as a node's port, and the node's bind fail.
pub fn free_udp_ports(n: usize) -> io::Result<Vec<u16>> {
    use std::collections::HashSet;
    use std::sync::Mutex;
    /// Every port handed out so far; bounded: forgotten at 10 000 (a test
    /// binary uses a few hundred).
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    if given.len() + n > 10_000 {
        given.clear();
    }
    // Held until the end, so the OS hands out a different one each bind;
    // a port given before is skipped (rare: the OS picks at random from
    // tens of thousands), at most 256 times.
    let mut held = Vec::new();
    let mut ports = Vec::with_capacity(n);
    while ports.len() < n {
        if held.len() > n + 256 {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("no {n} UDP ports free that were not handed out before"),
            ));
        }
        let s = UdpSocket::bind("127.0.0.1:0")?;
        let port = s.local_addr()?.port();
        held.push(s);
        if given.insert(port) {
            ports.push(port);
        }
    }
    Ok(ports)
}

/// The first of `n` consecutive UDP ports on 127.0.0.1 that were all free
/// (bound at once to check, then released; a small race with other programs
/// remains), for a fabric file whose addresses count up from one base
/// (`vhca topology --base-port`).
pub fn free_udp_range(n: u16) -> io::Result<u16> {
    // Start where concurrent test binaries are unlikely to collide: by pid.
    let span = 20000u32.saturating_sub(u32::from(n)).max(1);
    let mut base = 30000 + (std::process::id() * 97) % span;
    for _ in 0..200 {
        let b = base as u16;
        let held: io::Result<Vec<UdpSocket>> = (0..n)
            .map(|k| UdpSocket::bind(("127.0.0.1", b + k)))
            .collect();
        if held.is_ok() {
            return Ok(b);
        }
        base = 30000 + (base - 30000 + u32::from(n) + 13) % span;
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("no {n} consecutive free UDP ports in 30000..50000"),
    ))
}

/// The fabric file [`Vhca::spawn`] writes for `nodes` when the caller gave
/// none (`Options::fabric_text`).
fn generated_fabric(opts: &Options, nodes: &[NodeInfo]) -> String {
    format!(
        "{}\n{}",
        opts.fabric_header,
        fabric_toml_with(nodes, &opts.top_toml, &opts.node_toml)
    )
}

/// A command that runs `bin`, under `wrap` (a command and its arguments that
/// exec the binary after them) if given.
pub fn wrapped(wrap: Option<&Vec<String>>, bin: &Path) -> Command {
    match wrap.and_then(|w| w.split_first()) {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    }
}

/// The fabric file text for `nodes`.
pub fn fabric_toml(nodes: &[NodeInfo]) -> String {
    fabric_toml_with(nodes, "", &HashMap::new())
}

/// The fabric file text for `nodes`, with `top` lines before the nodes and
/// `extra[i]` lines in node i's table (AD-01, AD-05: `lmc`, `pkeys`).
pub fn fabric_toml_with(nodes: &[NodeInfo], top: &str, extra: &HashMap<usize, String>) -> String {
    let mut s = format!("# written by vhca-tests\n{top}\n");
    for (i, n) in nodes.iter().enumerate() {
        let _ = write!(
            s,
            "\n[[node]]\nname = \"{}\"\nlid = {}\nguid = \"{:#018x}\"\naddress = \"127.0.0.1:{}\"\n{}\n",
            n.name,
            n.lid,
            n.guid,
            n.udp_port,
            extra.get(&i).map_or("", |e| e.as_str())
        );
    }
    s
}

impl Vhca {
    /// Writes the fabric file and starts every node; returns once every socket
    /// exists. Panics (with the process's stderr) if one does not start.
    pub fn spawn(opts: Options) -> Vhca {
        crate::init_logging();
        assert!(opts.nodes >= 1, "a fabric has at least one node");
        let bin = vhca_binary(opts.build);
        let dir = tempfile::Builder::new()
            .prefix("vhca-tests-")
            .tempdir()
            .expect("create a temporary folder");
        let ports = if opts.first_ports.len() == opts.nodes {
            opts.first_ports.clone()
        } else {
            free_udp_ports(opts.nodes).expect("pick free UDP ports")
        };
        let mut nodes: Vec<NodeInfo> = (0..opts.nodes)
            .map(|i| {
                let name = format!("n{i}");
                NodeInfo {
                    lid: opts.lids.get(&i).copied().unwrap_or(BASE_LID + i as u16),
                    guid: node_guid(i),
                    udp_port: ports[i],
                    socket: dir.path().join(format!("{name}.sock")),
                    stderr: dir.path().join(format!("{name}.stderr")),
                    capture: opts
                        .capture
                        .then(|| dir.path().join(format!("{name}.pcap"))),
                    name,
                }
            })
            .collect();
        let fabric = dir.path().join("fabric.toml");
        let text = match &opts.fabric_text {
            Some(t) => {
                let f = device::fabric::FabricFile::parse("fabric_text", t)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(f.nodes().len(), opts.nodes, "nodes in fabric_text");
                for (i, n) in nodes.iter_mut().enumerate() {
                    let given = f
                        .by_name(&n.name)
                        .unwrap_or_else(|| panic!("fabric_text has no node {}", n.name));
                    n.lid = given.lid;
                    n.guid = given.guid;
                    n.udp_port = given.address.port();
                    assert!(!opts.lids.contains_key(&i), "lids with fabric_text");
                }
                t.clone()
            }
            None => generated_fabric(&opts, &nodes),
        };
        std::fs::write(&fabric, text).expect("write the fabric file");
        let watch = Arc::new(Watch::default());
        watch.start(opts.watchdog);
        let mut v = Vhca {
            dir,
            fabric,
            bin,
            procs: (0..nodes.len()).map(|_| None).collect(),
            nodes,
            opts,
            watch,
        };
        // The ports were free when chosen and released for the nodes to
        // bind; another process (another test's `vhca` or switch binding
        // port 0) can take one in between. Such a node exits at once saying
        // so: the fabric gets new ports, up to 3 times, when this spawn
        // chose them (not a caller's `fabric_text`).
        for attempt in 1.. {
            for i in 0..v.nodes.len() {
                v.start(i);
            }
            let failed = (0..v.nodes.len()).find_map(|i| v.try_wait_socket(i).err());
            let Some(why) = failed else {
                return v;
            };
            let retry = attempt < 3
                && v.opts.fabric_text.is_none()
                && why.contains("Address already in use");
            if !retry {
                panic!("{why}");
            }
            eprintln!("vhca-tests: a node's UDP port was taken before it bound it; new ports (attempt {attempt}):\n{why}");
            for i in 0..v.nodes.len() {
                v.kill(i);
                let _ = std::fs::remove_file(&v.nodes[i].stderr);
            }
            let ports = free_udp_ports(v.nodes.len()).expect("pick free UDP ports");
            for (n, p) in v.nodes.iter_mut().zip(ports) {
                n.udp_port = p;
            }
            std::fs::write(&v.fabric, generated_fabric(&v.opts, &v.nodes))
                .expect("write the fabric file");
        }
        unreachable!("the loop returns or panics")
    }

    /// Starts node `i`'s process (it must not be running).
    fn start(&mut self, i: usize) {
        assert!(self.procs[i].is_none(), "node {i} is running");
        let n = &self.nodes[i];
        // A restarted node must not be mistaken as ready by its old socket.
        let _ = std::fs::remove_file(&n.socket);
        let stderr = File::options()
            .create(true)
            .append(true)
            .open(&n.stderr)
            .expect("open the stderr log");
        let mut cmd = wrapped(self.opts.wrap.get(&i), &self.bin);
        cmd.arg("--socket")
            .arg(&n.socket)
            .arg("--fabric")
            .arg(&self.fabric)
            .arg("--node")
            .arg(&n.name)
            .arg("--log")
            .arg(&self.opts.log);
        if let Some(c) = &n.capture {
            cmd.arg("--capture").arg(c);
        }
        if let Some(f) = self.opts.faults.get(&i).or(self.opts.fault.as_ref()) {
            cmd.arg("--fault").arg(f);
        }
        cmd.args(&self.opts.extra_args)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.bin.display()));
        log::info!("started {} as pid {}", n.name, child.id());
        self.watch.set(i, Some(child.id()));
        self.procs[i] = Some(child);
    }

    fn wait_socket(&mut self, i: usize) {
        if let Err(why) = self.try_wait_socket(i) {
            panic!("{why}");
        }
    }

    /// [`Self::wait_socket`], saying why instead of panicking.
    fn try_wait_socket(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + self.opts.startup_timeout;
        loop {
            let is_socket = std::fs::symlink_metadata(&self.nodes[i].socket)
                .map(|m| m.file_type().is_socket())
                .unwrap_or(false);
            // The file appears at bind(), the listen() follows: a connect in
            // between is refused. Ready is listening.
            let pid = self.procs[i].as_ref().map(Child::id);
            if is_socket && listening(&self.nodes[i].socket, pid) {
                return Ok(());
            }
            if let Some(status) = self.procs[i]
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                return Err(format!(
                    "vhca {} exited ({status}) before creating its socket; stderr:\n{}",
                    self.nodes[i].name,
                    self.stderr_tail(i, 8192)
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "vhca {} did not create {} within {:?}; stderr:\n{}",
                    self.nodes[i].name,
                    self.nodes[i].socket.display(),
                    self.opts.startup_timeout,
                    self.stderr_tail(i, 8192)
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn node(&self, i: usize) -> &NodeInfo {
        &self.nodes[i]
    }

    pub fn socket(&self, i: usize) -> &Path {
        &self.nodes[i].socket
    }

    pub fn lid(&self, i: usize) -> u16 {
        self.nodes[i].lid
    }

    pub fn guid(&self, i: usize) -> u64 {
        self.nodes[i].guid
    }

    pub fn fabric_file(&self) -> &Path {
        &self.fabric
    }

    /// The run folder (sockets, fabric file, logs, captures).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Process id of node `i` (panics if it is not running).
    pub fn pid(&self, i: usize) -> u32 {
        self.procs[i].as_ref().expect("node is running").id()
    }

    /// Whether the watchdog fired (the test took too long).
    pub fn watchdog_fired(&self) -> bool {
        self.watch.fired.load(Ordering::Acquire)
    }

    /// Whether node `i`'s process is still running.
    pub fn alive(&mut self, i: usize) -> bool {
        match self.procs[i].as_mut() {
            None => false,
            Some(c) => matches!(c.try_wait(), Ok(None)),
        }
    }

    /// Panics with its stderr unless node `i` is running.
    pub fn assert_alive(&mut self, i: usize) {
        if !self.alive(i) {
            let status = self.procs[i]
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            panic!(
                "vhca {} is not running ({status:?}); stderr:\n{}",
                self.nodes[i].name,
                self.stderr_tail(i, 16384)
            );
        }
    }

    /// Kills node `i` at once (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.procs[i].take() {
            self.watch.set(i, None);
            let _ = c.kill();
            let _ = c.wait();
            log::info!("killed {}", self.nodes[i].name);
        }
    }

    /// Stops node `i` politely (SIGTERM, so it can flush its capture and print
    /// its counters), then SIGKILL after `grace`. Returns its exit status.
    pub fn stop(&mut self, i: usize, grace: Duration) -> Option<std::process::ExitStatus> {
        let mut c = self.procs[i].take()?;
        self.watch.set(i, None);
        let _ = crate::sys::kill(c.id(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts node `i` again (same name, LID, GUID and UDP port) after
    /// [`kill`](Self::kill) or [`stop`](Self::stop), and waits for its socket.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.start(i);
        self.wait_socket(i);
    }

    /// Open file descriptors of node `i` (entries of /proc/PID/fd).
    pub fn fd_count(&self, i: usize) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid(i)))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Resident set size of node `i` in KiB (VmRSS of /proc/PID/status).
    pub fn rss_kib(&self, i: usize) -> u64 {
        rss_kib(self.pid(i))
    }

    /// CPU time node `i` used so far, user and system, in clock ticks.
    pub fn cpu_ticks(&self, i: usize) -> u64 {
        cpu_ticks(self.pid(i))
    }

    /// Threads of node `i` (entries of /proc/PID/task).
    pub fn thread_count(&self, i: usize) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.pid(i)))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Everything node `i` wrote to stderr (all its starts).
    pub fn stderr(&self, i: usize) -> String {
        std::fs::read(&self.nodes[i].stderr)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last `max` bytes of node `i`'s stderr.
    pub fn stderr_tail(&self, i: usize, max: u64) -> String {
        let Ok(mut f) = File::open(&self.nodes[i].stderr) else {
            return String::new();
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
        let mut b = Vec::new();
        let _ = f.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    }
}

impl Drop for Vhca {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        self.watch.done.store(true, Ordering::Release);
        if self.watch.fired.load(Ordering::Acquire) {
            eprintln!("vhca-tests: the watchdog killed the processes of this test");
        }
        for i in 0..self.procs.len() {
            self.watch.set(i, None);
            if let Some(mut c) = self.procs[i].take() {
                let exited = c.try_wait().ok().flatten();
                let _ = c.kill();
                let _ = c.wait();
                if let Some(s) = exited {
                    eprintln!(
                        "vhca-tests: {} had exited on its own: {s}",
                        self.nodes[i].name
                    );
                }
            }
            if panicking || std::env::var_os("VHCA_TEST_STDERR").is_some() {
                eprintln!(
                    "---- vhca {} stderr (tail) ----\n{}",
                    self.nodes[i].name,
                    self.stderr_tail(i, 6000)
                );
            }
        }
        if std::env::var_os("VHCA_KEEP").is_some() {
            let p = std::mem::replace(
                &mut self.dir,
                tempfile::tempdir().expect("a temporary folder"),
            )
            .keep();
            eprintln!("vhca-tests: kept the run folder {}", p.display());
        }
    }
}

/// Whether a Unix socket bound at `path` by process `pid` listens
/// (`/proc/PID/net/unix` shows its flags as `__SO_ACCEPTCON`, 0x10000): the
/// process's own network namespace's table, which is not the test's when the
/// node runs in another (`Options::wrap`, `ip netns exec`). Where that file
/// cannot be read, a socket file counts as listening.
fn listening(path: &Path, pid: Option<u32>) -> bool {
    let file = pid.map_or("/proc/net/unix".into(), |p| format!("/proc/{p}/net/unix"));
    let Ok(table) = std::fs::read_to_string(file) else {
        return true;
    };
    let want = path.to_string_lossy();
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8
            && f[7] == want
            && u32::from_str_radix(f[3], 16).is_ok_and(|flags| flags & 0x1_0000 != 0)
    })
}

/// Resident set size of process `pid` in KiB (VmRSS of /proc/PID/status);
/// 0 if it is gone.
pub fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CPU time of process `pid` so far in nanoseconds: the sum over its
/// threads of /proc/PID/task/TID/schedstat's first field (time on a CPU;
/// exact, where /proc/PID/stat counts whole clock ticks of 10 ms); 0 if it is
/// gone.
pub fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU time of process `pid` so far, user and system, in clock ticks
/// (`/proc/PID/stat`; 100 a second on Linux); 0 if it is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    get(11) + get(12)
}

#[cfg(test)]
mod port_tests {
    use super::free_udp_ports;
    use std::collections::HashSet;

    /// A switch's ports picked before the nodes' must not come back as a
    /// node's port (an intermittent bind failure in `star_fabric`): over 300
    /// picks (1 200 ports, where the OS's random choice repeats a port a
    /// dozen times on average), no port is handed out twice.
    #[test]
    fn free_udp_ports_never_hands_out_a_port_twice_in_one_process() {
        let mut seen = HashSet::new();
        for _ in 0..300 {
            for p in free_udp_ports(4).unwrap() {
                assert!(seen.insert(p), "port {p} handed out twice");
            }
        }
    }
}
