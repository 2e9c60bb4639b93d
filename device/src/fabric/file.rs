//! The fabric file: which nodes exist, with their LID, port GUID and UDP address
//! (ARCHITECTURE.md §6, `ib-udp` mode). It plays the role of a subnet manager's
//! assignment: every `vhca` process of a fabric reads the same file, learns its own
//! LID and GUID from its entry, and routes a packet by its LRH:DLID to the UDP
//! address of the node holding that LID.
//!
//! ```toml
//! [[node]]
//! name = "a"
//! lid = 1
//! guid = "0x0002c90300000001"   # or an integer, or "0002:c903:0000:0001"
//! address = "127.0.0.1:18515"
//! ```
//!
//! A node may also have `lmc` and `pkeys`, and the file a top-level `pkeys` for
//! every node (AD-01, AD-05; `partition.rs`).
//!
//! A fabric that leaves the host adds a fabric key (issue 13, ARCHITECTURE.md §9),
//! shared by every node, at the top of the file, before the first `[[node]]`:
//! `key_file = "fabric.key"` (a file of 64 hex digits, readable by its owner
//! only; a relative path is taken from the fabric file's folder) or
//! `key = "<64 hex digits>"` in the file itself (which then must be kept as
//! private as a key file). Without either, datagrams are not authenticated.
//!
//! Also at the top, optionally, the ports' SL-to-VL table (AD-06):
//! `sl2vl = [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]`, the data VL of
//! SL0..SL15 (VL0..VL7); without it every SL goes on VL0. And the VL
//! arbitration tables, `[vl_arb]` with `high`, `low` and `high_limit`
//! (`vl_arb.rs`); without them every data VL takes its turn.
//!
//! A node's optional `host = "NAME"` puts it on a host with the other nodes
//! naming it; they exchange packets through shared-memory rings in the
//! top-level `shm_dir` (default `/dev/shm`; `colocated.rs`, `shm.rs`).
//!
//! `[[switch]]` and `[[link]]` tables make the file a cabling (`cabling.rs`):
//! each node's port linked to one other port, a node's or a switch's.
//!
//! The file is written by people, so every error is one line naming the file, the
//! node and the problem; the receive path later trusts this table to decide which
//! datagrams come from the fabric at all (ARCHITECTURE.md §9), so duplicates and
//! unroutable LIDs are refused here rather than discovered as misrouted packets.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::cabling::{self, Cabling};
use super::colocated::{self, Hosts};
use super::partition::{self, PortAttrs};
use super::vl_arb;
use super::FabricKey;
use crate::mgmt::SubnetMode;
use transport::engine::VlArbTables;
use transport::verbs::Mtu;

/// Top-level keys of a fabric file.
const TOP_KEYS: [&str; 14] = [
    "node",
    "key",
    "key_file",
    "pkeys",
    "sl2vl",
    "vl_arb",
    "subnet",
    "switch",
    "link",
    "flow_control",
    "rx_buffer",
    "mtu",
    "shm_dir",
    "ib_cc",
];

/// Keys a `[[node]]` table may hold.
const NODE_KEYS: [&str; 4] = ["name", "lid", "guid", "address"];

/// Keys a `[[node]]` table may hold besides those (`partition.rs`).
const OPTIONAL_NODE_KEYS: [&str; 3] = ["lmc", "pkeys", "host"];

/// Largest unicast LID; 0xC000..=0xFFFE are multicast and 0xFFFF is the permissive
/// LID (IBA 4.1.3, 7.11.1). LID 0 is reserved.
pub const MAX_UNICAST_LID: u16 = 0xbfff;

/// The file name used in errors for a fabric built with [`FabricFile::from_nodes`].
pub const PROGRAMMATIC: &str = "<programmatic>";

/// One node of the fabric: one port of one `vhca` device.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    /// A name unique in the fabric (`vhca --node NAME` picks the process's own).
    pub name: String,
    /// Unicast LID, 1..=0xBFFF.
    pub lid: u16,
    /// Port GUID (EUI-64), nonzero; GID 0 is fe80:: + this GUID (ARCHITECTURE.md §7).
    pub guid: u64,
    /// UDP address the node's `ib-udp` link is bound to.
    pub address: SocketAddr,
}

/// A validated fabric file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricFile {
    file: String,
    nodes: Vec<Node>,
    by_name: HashMap<String, usize>,
    /// Every LID of every node (2^LMC each, AD-01).
    by_lid: HashMap<u16, usize>,
    /// Each node's LMC and P_Key table, by node index.
    ports: Vec<PortAttrs>,
    by_address: HashMap<SocketAddr, usize>,
    /// The fabric key, if the file names one (`key` or `key_file`).
    key: Option<FabricKey>,
    /// The ports' SL-to-VL table, if the file sets one (AD-06).
    sl2vl: Option<[u8; 16]>,
    /// The ports' VL arbitration tables, if the file sets them (AD-06).
    vl_arb: Option<VlArbTables>,
    /// Who brings the ports up: the file (static) or a subnet manager.
    subnet: SubnetMode,
    /// `[[switch]]` and `[[link]]` (`cabling.rs`); empty: all-to-all.
    cabling: Cabling,
    /// `flow_control`, if the file says (issue 27 item 4).
    flow_control: Option<bool>,
    /// `rx_buffer`: the UDP receive buffer to ask for, if the file says.
    rx_buffer: Option<usize>,
    /// `mtu`: the IB MTU the ports use if the underlay carries it (issue 27
    /// item 3: lower only; `underlay::port_mtu`).
    mtu: Option<Mtu>,
    /// Each node's `host` and the ring folder (`colocated.rs`, issue 30).
    hosts: Hosts,
    /// `[ib_cc]`: IBA congestion control without an SM (issue 31, `ib_cc.rs`).
    ib_cc: Option<super::IbCc>,
}

/// Why a fabric file was refused. Every message is one line: file, node, problem.
#[derive(Debug, thiserror::Error)]
pub enum FabricFileError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    /// The text is not TOML.
    #[error("{file}:{line}: not valid TOML: {message}")]
    Syntax {
        file: String,
        line: usize,
        message: String,
    },
    /// No `[[node]]` at all.
    #[error("{file}: no nodes: a fabric file lists at least one [[node]]")]
    Empty { file: String },
    /// A top-level key other than `node`.
    #[error(
        "{file}: unknown top-level key `{key}` (known: [[node]] tables, key, key_file, pkeys, sl2vl, [vl_arb], subnet, [[switch]], [[link]], flow_control, rx_buffer, mtu, shm_dir, [ib_cc])"
    )]
    UnknownTopKey { file: String, key: String },
    /// `key` or `key_file` that does not give a usable fabric key.
    #[error("{file}: {message}")]
    BadKey { file: String, message: String },
    /// `node` is not an array of tables.
    #[error("{file}: `node` must be an array of tables, written [[node]]")]
    NotNodeArray { file: String },
    /// A key a node table does not have.
    #[error(
        "{file}: node {node}: unknown key `{key}` (known: name, lid, guid, address, lmc, pkeys, host)"
    )]
    UnknownKey {
        file: String,
        node: String,
        key: String,
    },
    /// A required key is absent.
    #[error("{file}: node {node}: missing key `{key}`")]
    MissingKey {
        file: String,
        node: String,
        key: &'static str,
    },
    /// A value of the wrong TOML type.
    #[error("{file}: node {node}: {message}")]
    BadValue {
        file: String,
        node: String,
        message: String,
    },
    /// `name = ""`.
    #[error("{file}: node {node}: empty name")]
    EmptyName { file: String, node: String },
    /// A LID outside 1..=0xBFFF.
    #[error("{file}: node {node}: LID {lid} is {why}; a node needs a unicast LID, 1..=0xBFFF")]
    BadLid {
        file: String,
        node: String,
        lid: i64,
        why: &'static str,
    },
    /// A GUID that does not parse or is 0.
    #[error("{file}: node {node}: bad port GUID `{value}`: {why}")]
    BadGuid {
        file: String,
        node: String,
        value: String,
        why: &'static str,
    },
    /// An address that is not `ip:port` or cannot be sent to.
    #[error("{file}: node {node}: bad UDP address `{value}`: {why}")]
    BadAddress {
        file: String,
        node: String,
        value: String,
        why: &'static str,
    },
    /// Two nodes with one name.
    #[error("{file}: node {node}: duplicate name (node #{first} has it too)")]
    DuplicateName {
        file: String,
        node: String,
        first: usize,
    },
    /// Two nodes with one LID.
    #[error("{file}: node {node}: LID {lid:#x} is already node {other}'s")]
    DuplicateLid {
        file: String,
        node: String,
        other: String,
        lid: u16,
    },
    /// Two nodes with one port GUID.
    #[error("{file}: node {node}: port GUID {guid:#018x} is already node {other}'s")]
    DuplicateGuid {
        file: String,
        node: String,
        other: String,
        guid: u64,
    },
    /// Two nodes with one UDP address.
    #[error("{file}: node {node}: UDP address {address} is already node {other}'s")]
    DuplicateAddress {
        file: String,
        node: String,
        other: String,
        address: SocketAddr,
    },
    /// An `lmc` or `pkeys` the port cannot have (`partition.rs`); `node` is
    /// `(all nodes)` for the top-level `pkeys`.
    #[error("{file}: node {node}: {message}")]
    BadPort {
        file: String,
        node: String,
        message: String,
    },
    /// An `sl2vl` table that is not 16 data VLs of the port (AD-06).
    #[error("{file}: sl2vl: {why}")]
    BadSl2vl { file: String, why: String },
    /// A `[vl_arb]` table the ports cannot arbitrate with (AD-06, `vl_arb.rs`).
    #[error("{file}: vl_arb: {why}")]
    BadVlArb { file: String, why: String },
    /// `subnet` other than "static" or "sm" (issue 26: who brings the ports up).
    #[error("{file}: subnet: {why}")]
    BadSubnet { file: String, why: String },
    /// `mtu` that is no IB MTU.
    #[error("{file}: mtu: {why}")]
    BadMtu { file: String, why: String },
    /// A `[[switch]]` or `[[link]]` that does not cable the fabric (`cabling.rs`).
    #[error("{file}: {what}")]
    Cabling { file: String, what: String },
    /// `flow_control` not a boolean, or `rx_buffer` not a byte count.
    #[error("{file}: {key}: {why}")]
    BadLinkKey {
        file: String,
        key: &'static str,
        why: &'static str,
    },
    /// An `[ib_cc]` table the ports cannot run (issue 31, `ib_cc.rs`).
    #[error("{file}: ib_cc: {why}")]
    BadIbCc { file: String, why: String },
}

/// A node's fields as TOML gives them, before the range checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: String,
    lid: i64,
    guid: RawGuid,
    address: String,
}

/// TOML integers are i64, so a GUID with bit 63 set must be written as a string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawGuid {
    Int(i64),
    Str(String),
}

/// How a node is named in errors: `"a"`, or `#3` (1-based) before its name is known.
struct Label<'a>(Option<&'a str>, usize);

impl fmt::Display for Label<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(name) => write!(f, "{name:?}"),
            None => write!(f, "#{}", self.1 + 1),
        }
    }
}

fn label(name: &str, index: usize) -> String {
    Label(Some(name).filter(|n| !n.is_empty()), index).to_string()
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Folds a possibly multi-line message into one line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub(super) fn parse_guid(s: &str) -> Option<u64> {
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    // ibstat and the kernel print GUIDs as 0002:c903:0000:0001; accept that too.
    let digits: String = t.chars().filter(|&c| c != ':').collect();
    if digits.is_empty() || digits.len() > 16 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(&digits, 16).ok()
}

impl FabricFile {
    /// Reads and validates the fabric file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<FabricFile, FabricFileError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let io = |source| FabricFileError::Io {
            file: file.clone(),
            source,
        };
        let text = std::fs::read_to_string(path).map_err(io)?;
        // A key written in the fabric file is as secret as a key file: its
        // permissions go with the key (FabricKey::permission_warning).
        let mode = std::fs::metadata(path).map_err(io)?.permissions().mode();
        FabricFile::parse_at(&file, &text, Some((path, mode)))
    }

    /// Validates `text`; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<FabricFile, FabricFileError> {
        FabricFile::parse_at(file, text, None)
    }

    /// [`FabricFile::parse`] of the text of the file at `origin`'s path, which has
    /// `origin`'s permission bits.
    fn parse_at(
        file: &str,
        text: &str,
        origin: Option<(&Path, u32)>,
    ) -> Result<FabricFile, FabricFileError> {
        let f = || file.to_string();
        let table: toml::Table = toml::from_str(text).map_err(|e| FabricFileError::Syntax {
            file: f(),
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            message: one_line(e.message()),
        })?;
        if let Some(key) = table.keys().find(|k| !TOP_KEYS.contains(&k.as_str())) {
            return Err(FabricFileError::UnknownTopKey {
                file: f(),
                key: key.clone(),
            });
        }
        let key = Self::key_from_toml(file, &table, origin)?;
        let bad_port = |node: String| {
            move |message| FabricFileError::BadPort {
                file: f(),
                node: node.clone(),
                message,
            }
        };
        let default_port = match table.get("pkeys") {
            None => PortAttrs::default(),
            Some(v) => PortAttrs {
                pkeys: partition::parse_pkeys(v).map_err(bad_port("(all nodes)".into()))?,
                ..PortAttrs::default()
            },
        };
        let raw = match table.get("node") {
            None => return Err(FabricFileError::Empty { file: f() }),
            Some(toml::Value::Array(a)) => a,
            Some(_) => return Err(FabricFileError::NotNodeArray { file: f() }),
        };
        let mut nodes = Vec::with_capacity(raw.len());
        let mut ports = Vec::with_capacity(raw.len());
        let mut hosts = Vec::with_capacity(raw.len());
        for (i, v) in raw.iter().enumerate() {
            let node = Self::node_from_toml(file, i, v)?;
            let t = v.as_table();
            let opt = |k: &str| t.and_then(|t| t.get(k));
            let bad = bad_port(label(&node.name, i));
            let mut port = default_port.clone();
            if let Some(v) = opt("lmc") {
                port.lmc = partition::parse_lmc(v).map_err(&bad)?;
            }
            if let Some(v) = opt("pkeys") {
                port.pkeys = partition::parse_pkeys(v).map_err(&bad)?;
            }
            hosts.push(match opt("host") {
                None => None,
                Some(v) => Some(colocated::parse_host(v).map_err(&bad)?),
            });
            nodes.push(node);
            ports.push(port);
        }
        let mut fabric = FabricFile::validated(file, nodes, ports)?;
        fabric.key = key;
        fabric.hosts.host = hosts;
        if let Some(v) = table.get("shm_dir") {
            fabric.hosts.dir = Some(colocated::parse_dir(file, v)?);
        }
        fabric.sl2vl = sl2vl_from_toml(file, &table)?;
        if let Some(v) = table.get("vl_arb") {
            let sl2vl = fabric.sl2vl.unwrap_or_default();
            let tables = vl_arb::parse(v, &sl2vl)
                .map_err(|why| FabricFileError::BadVlArb { file: f(), why })?;
            fabric.vl_arb = Some(tables);
        }
        fabric.subnet = match table.get("subnet") {
            None => SubnetMode::Static,
            Some(toml::Value::String(v)) if v == "static" => SubnetMode::Static,
            Some(toml::Value::String(v)) if v == "sm" => SubnetMode::Sm,
            Some(v) => {
                let why = match v {
                    toml::Value::String(s) => format!("\"{s}\" is neither \"static\" nor \"sm\""),
                    _ => "must be the string \"static\" or \"sm\"".into(),
                };
                return Err(FabricFileError::BadSubnet { file: f(), why });
            }
        };
        fabric.cabling = cabling::parse(file, &table, &fabric.nodes)?;
        fabric.flow_control = match table.get("flow_control") {
            None => None,
            Some(toml::Value::Boolean(b)) => Some(*b),
            Some(_) => {
                return Err(FabricFileError::BadLinkKey {
                    file: f(),
                    key: "flow_control",
                    why: "must be true or false",
                })
            }
        };
        // Bytes, or a size in the options' syntax ("256K", crate::units).
        let size = |v: &toml::Value| match v {
            toml::Value::Integer(n) => u64::try_from(*n).ok(),
            toml::Value::String(s) => crate::units::parse_size(s).ok(),
            _ => None,
        };
        fabric.rx_buffer = match table.get("rx_buffer").map(size) {
            None => None,
            Some(Some(n)) if (4096..=1 << 30).contains(&n) => Some(n as usize),
            Some(_) => {
                return Err(FabricFileError::BadLinkKey {
                    file: f(),
                    key: "rx_buffer",
                    why: "must be a byte count or a size (\"256K\", binary units) from 4K to 1G",
                })
            }
        };
        if let Some(v) = table.get("ib_cc") {
            let c = super::ib_cc::parse(v)
                .map_err(|why| FabricFileError::BadIbCc { file: f(), why })?;
            fabric.ib_cc = Some(c);
        }
        fabric.mtu = match table.get("mtu") {
            None => None,
            Some(v) => {
                Some(mtu_from_toml(v).map_err(|why| FabricFileError::BadMtu { file: f(), why })?)
            }
        };
        Ok(fabric)
    }

    /// The fabric key named by `key` or `key_file`, if any.
    fn key_from_toml(
        file: &str,
        t: &toml::Table,
        origin: Option<(&Path, u32)>,
    ) -> Result<Option<FabricKey>, FabricFileError> {
        let bad = |message: String| FabricFileError::BadKey {
            file: file.to_string(),
            message,
        };
        let text = |k: &str| match t.get(k) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(bad(format!("`{k}` must be a string"))),
        };
        match (text("key")?, text("key_file")?) {
            (Some(_), Some(_)) => Err(bad("give `key` or `key_file`, not both".into())),
            (Some(hex), None) => {
                let k = FabricKey::from_hex(&hex).map_err(|e| bad(format!("`key`: {e}")))?;
                Ok(Some(match origin {
                    Some((path, mode)) => k.with_source(path, mode),
                    None => k,
                }))
            }
            (None, Some(p)) => {
                let mut path = PathBuf::from(&p);
                if path.is_relative() {
                    // Relative to the fabric file, wherever vhca was started.
                    if let Some(dir) = Path::new(file).parent() {
                        path = dir.join(path);
                    }
                }
                FabricKey::load(&path)
                    .map(Some)
                    .map_err(|e| bad(format!("`key_file`: {e}")))
            }
            (None, None) => Ok(None),
        }
    }

    /// A fabric from nodes built in code (tests, a CLI that takes `--peer`), checked
    /// like a file; errors name the file [`PROGRAMMATIC`].
    pub fn from_nodes(nodes: Vec<Node>) -> Result<FabricFile, FabricFileError> {
        let ports = vec![PortAttrs::default(); nodes.len()];
        FabricFile::validated(PROGRAMMATIC, nodes, ports)
    }

    /// [`FabricFile::from_nodes`] with each node's LMC and P_Key table (AD-01,
    /// AD-05), `ports[i]` for `nodes[i]` (missing ones: the defaults).
    pub fn from_nodes_with_ports(
        nodes: Vec<Node>,
        mut ports: Vec<PortAttrs>,
    ) -> Result<FabricFile, FabricFileError> {
        ports.resize(nodes.len(), PortAttrs::default());
        FabricFile::validated(PROGRAMMATIC, nodes, ports)
    }

    fn node_from_toml(file: &str, i: usize, v: &toml::Value) -> Result<Node, FabricFileError> {
        let t = v.as_table().ok_or_else(|| FabricFileError::NotNodeArray {
            file: file.to_string(),
        })?;
        let name = t.get("name").and_then(|n| n.as_str());
        let node = Label(name.filter(|n| !n.is_empty()), i).to_string();
        // Keys are checked by hand before serde so that the error can name the node
        // (serde's deny_unknown_fields, kept as a backstop, cannot).
        if let Some(key) = t
            .keys()
            .find(|k| !NODE_KEYS.contains(&k.as_str()) && !OPTIONAL_NODE_KEYS.contains(&k.as_str()))
        {
            return Err(FabricFileError::UnknownKey {
                file: file.to_string(),
                node,
                key: key.clone(),
            });
        }
        if let Some(key) = NODE_KEYS.into_iter().find(|k| !t.contains_key(*k)) {
            return Err(FabricFileError::MissingKey {
                file: file.to_string(),
                node,
                key,
            });
        }
        // The optional keys are read by the caller (`partition.rs`).
        let mut required = t.clone();
        for k in OPTIONAL_NODE_KEYS {
            required.remove(k);
        }
        let raw: RawNode =
            toml::Value::Table(required)
                .try_into()
                .map_err(|e: toml::de::Error| FabricFileError::BadValue {
                    file: file.to_string(),
                    node: node.clone(),
                    message: one_line(e.message()),
                })?;
        let lid = u16::try_from(raw.lid).map_err(|_| FabricFileError::BadLid {
            file: file.to_string(),
            node: node.clone(),
            lid: raw.lid,
            why: if raw.lid < 0 {
                "negative"
            } else {
                "wider than 16 bits"
            },
        })?;
        let guid = match raw.guid {
            RawGuid::Int(g) => u64::try_from(g).map_err(|_| FabricFileError::BadGuid {
                file: file.to_string(),
                node: node.clone(),
                value: g.to_string(),
                why: "negative (write a GUID with bit 63 set as a hex string)",
            })?,
            RawGuid::Str(s) => parse_guid(&s).ok_or_else(|| FabricFileError::BadGuid {
                file: file.to_string(),
                node: node.clone(),
                value: s.clone(),
                why: "not 1 to 16 hex digits (optionally 0x-prefixed, colons allowed)",
            })?,
        };
        let address: SocketAddr =
            raw.address
                .trim()
                .parse()
                .map_err(|_| FabricFileError::BadAddress {
                    file: file.to_string(),
                    node: node.clone(),
                    value: raw.address.clone(),
                    why: "not ip:port (IPv6 as [ip]:port; host names are not resolved)",
                })?;
        Ok(Node {
            name: raw.name,
            lid,
            guid,
            address,
        })
    }

    /// Range checks on each node, then the uniqueness checks, then the indexes.
    fn validated(
        file: &str,
        nodes: Vec<Node>,
        ports: Vec<PortAttrs>,
    ) -> Result<FabricFile, FabricFileError> {
        let f = || file.to_string();
        if nodes.is_empty() {
            return Err(FabricFileError::Empty { file: f() });
        }
        let mut by_name: HashMap<String, usize> = HashMap::with_capacity(nodes.len());
        let mut by_lid: HashMap<u16, usize> = HashMap::with_capacity(nodes.len());
        let mut by_guid: HashMap<u64, usize> = HashMap::with_capacity(nodes.len());
        let mut by_address: HashMap<SocketAddr, usize> = HashMap::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            let node = label(&n.name, i);
            if n.name.is_empty() {
                return Err(FabricFileError::EmptyName { file: f(), node });
            }
            let bad_lid = |why| FabricFileError::BadLid {
                file: f(),
                node: node.clone(),
                lid: i64::from(n.lid),
                why,
            };
            match n.lid {
                0 => return Err(bad_lid("reserved (LID 0)")),
                0xffff => return Err(bad_lid("the permissive LID (0xFFFF)")),
                l if l > MAX_UNICAST_LID => {
                    return Err(bad_lid("multicast (0xC000..=0xFFFE)"));
                }
                _ => {}
            }
            if n.guid == 0 {
                return Err(FabricFileError::BadGuid {
                    file: f(),
                    node,
                    value: "0".into(),
                    why: "0 is not a valid EUI-64",
                });
            }
            let bad_addr = |why| FabricFileError::BadAddress {
                file: f(),
                node: node.clone(),
                value: n.address.to_string(),
                why,
            };
            if n.address.port() == 0 {
                return Err(bad_addr("port 0 cannot be sent to"));
            }
            if n.address.ip().is_unspecified() {
                return Err(bad_addr("an unspecified IP cannot be sent to"));
            }
            if n.address.ip().is_multicast() {
                return Err(bad_addr("a multicast IP is not a node"));
            }
            if let Some(&first) = by_name.get(&n.name) {
                return Err(FabricFileError::DuplicateName {
                    file: f(),
                    node,
                    first: first + 1,
                });
            }
            let port = &ports[i];
            port.check(n.lid)
                .map_err(|message| FabricFileError::BadPort {
                    file: f(),
                    node: node.clone(),
                    message,
                })?;
            // AD-01: every LID of the node's range is its own.
            if let Some((lid, j)) = port
                .lids(n.lid)
                .find_map(|l| by_lid.get(&l).map(|&j| (l, j)))
            {
                return Err(FabricFileError::DuplicateLid {
                    file: f(),
                    node,
                    other: label(&nodes[j].name, j),
                    lid,
                });
            }
            if let Some(&j) = by_guid.get(&n.guid) {
                return Err(FabricFileError::DuplicateGuid {
                    file: f(),
                    node,
                    other: label(&nodes[j].name, j),
                    guid: n.guid,
                });
            }
            if let Some(&j) = by_address.get(&n.address) {
                return Err(FabricFileError::DuplicateAddress {
                    file: f(),
                    node,
                    other: label(&nodes[j].name, j),
                    address: n.address,
                });
            }
            by_name.insert(n.name.clone(), i);
            for l in port.lids(n.lid) {
                by_lid.insert(l, i);
            }
            by_guid.insert(n.guid, i);
            by_address.insert(n.address, i);
        }
        Ok(FabricFile {
            file: f(),
            nodes,
            by_name,
            by_lid,
            ports,
            by_address,
            key: None,
            sl2vl: None,
            vl_arb: None,
            subnet: SubnetMode::Static,
            cabling: Cabling::default(),
            flow_control: None,
            rx_buffer: None,
            mtu: None,
            hosts: Hosts::default(),
            ib_cc: None,
        })
    }

    /// The file name the fabric was read from ([`PROGRAMMATIC`] if built in code).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// All nodes, in file order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The fabric key the file names (`key` or `key_file`), if any.
    pub fn key(&self) -> Option<&FabricKey> {
        self.key.as_ref()
    }

    /// The SL-to-VL table every node's port uses (AD-06), if the file sets
    /// one; without, every SL goes on VL0.
    pub fn sl2vl(&self) -> Option<[u8; 16]> {
        self.sl2vl
    }

    /// The VL arbitration tables every node's port uses (AD-06), if the file
    /// sets them (`[vl_arb]`); without, every data VL in turn.
    pub fn vl_arb(&self) -> Option<&VlArbTables> {
        self.vl_arb.as_ref()
    }

    /// Who brings the ports up (`subnet`; ARCHITECTURE.md §6).
    pub fn subnet(&self) -> SubnetMode {
        self.subnet
    }

    /// The IB MTU the file asks for (`mtu`), if any: the ports use it when
    /// their underlay carries it, and refuse to start when not (issue 27).
    pub fn mtu(&self) -> Option<Mtu> {
        self.mtu
    }

    /// The cabling (`[[switch]]`, `[[link]]`); without links, all-to-all.
    pub fn cabling(&self) -> &Cabling {
        &self.cabling
    }

    /// Whether cabled ports run IBA 7.9 link flow control (`flow_control`;
    /// issue 27 item 4): on by default in a cabled fabric, never without
    /// cables (no link partner to exchange credit with).
    pub fn flow_control(&self) -> bool {
        self.cabling.is_cabled() && self.flow_control.unwrap_or(true)
    }

    /// The data VLs a port's flow control grants credit on: VL0 up to the
    /// highest VL the `sl2vl` table uses (VL0 alone without one).
    pub fn data_vls(&self) -> u8 {
        self.sl2vl
            .map_or(1, |t| t.iter().copied().max().unwrap_or(0) + 1)
    }

    /// The UDP receive buffer every port asks for (`rx_buffer`), if the
    /// file sets one; else the link's default.
    pub fn rx_buffer(&self) -> Option<usize> {
        self.rx_buffer
    }

    /// Which nodes share a host (`host`) and where their rings go
    /// (`shm_dir`): the shared-memory link's (`shm.rs`, issue 30).
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// The same fabric with node `i` on host `hosts[i]` and the rings in
    /// `dir` (a fabric built in code: tests, benchmarks).
    pub fn with_hosts(mut self, hosts: Vec<Option<String>>, dir: Option<PathBuf>) -> FabricFile {
        self.hosts = Hosts { host: hosts, dir };
        self
    }

    /// `[ib_cc]`: the IBA congestion control the switches and CA ports start
    /// with (issue 31), if the file sets it.
    pub fn ib_cc(&self) -> Option<&super::IbCc> {
        self.ib_cc.as_ref()
    }

    /// The node called `name`.
    pub fn by_name(&self, name: &str) -> Option<&Node> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }

    /// The node holding unicast LID `lid`: its base LID or another of its
    /// 2^LMC LIDs (AD-01).
    pub fn by_lid(&self, lid: u16) -> Option<&Node> {
        self.by_lid.get(&lid).map(|&i| &self.nodes[i])
    }

    /// The LMC and P_Key table of the node called `name` (AD-01, AD-05).
    pub fn port_attrs(&self, name: &str) -> Option<&PortAttrs> {
        self.by_name.get(name).map(|&i| &self.ports[i])
    }

    /// The node bound to UDP address `addr` (the receive path's source check).
    pub fn by_address(&self, addr: &SocketAddr) -> Option<&Node> {
        self.by_address.get(addr).map(|&i| &self.nodes[i])
    }
}

/// AD-06: the top-level `sl2vl = [vl of SL0, ..., vl of SL15]`, the table a
/// subnet manager would program into every port (seed 002 "虚拟通道"): 16
/// data VLs of the engine's ports (VL15 is not one).
fn sl2vl_from_toml(file: &str, table: &toml::Table) -> Result<Option<[u8; 16]>, FabricFileError> {
    let Some(v) = table.get("sl2vl") else {
        return Ok(None);
    };
    let bad = |why: String| FabricFileError::BadSl2vl {
        file: file.to_string(),
        why,
    };
    let a = v
        .as_array()
        .ok_or_else(|| bad("not an array of 16 VLs".into()))?;
    if a.len() != 16 {
        return Err(bad(format!("{} entries, not 16 (one per SL)", a.len())));
    }
    let vls = transport::engine::DEFAULT_DATA_VLS;
    let mut out = [0u8; 16];
    for (sl, (slot, e)) in out.iter_mut().zip(a).enumerate() {
        *slot = e
            .as_integer()
            .and_then(|x| u8::try_from(x).ok())
            .filter(|&x| x < vls)
            .ok_or_else(|| {
                let got = e
                    .as_integer()
                    .map_or("a non-integer".into(), |x| x.to_string());
                bad(format!("SL {sl}: {got} is not a data VL (0..={})", vls - 1))
            })?;
    }
    Ok(Some(out))
}

/// A TOML value as the file wrote it, for an error.
fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("\"{s}\""),
        toml::Value::Integer(n) => n.to_string(),
        other => other.type_str().to_string(),
    }
}

/// `mtu = 256 | 512 | 1024 | 2048 | 4096` (IBA 7.7.3's MTUs).
fn mtu_from_toml(v: &toml::Value) -> Result<Mtu, String> {
    let all = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];
    v.as_integer()
        .and_then(|n| all.into_iter().find(|m| m.bytes() as i64 == n))
        .ok_or_else(|| format!("{} is not one of 256, 512, 1024, 2048, 4096", toml_text(v)))
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
