//! Which nodes of a fabric share a host (issue 30 item 1): a node's optional
//! `host = "NAME"` in the fabric file. Nodes with the same host name exchange
//! packets through shared-memory rings (`shm.rs`, ARCHITECTURE.md §6) instead
//! of UDP; a node without one, or on another host, stays on UDP. The rings are
//! files in `shm_dir` (top level, default `/dev/shm`).

use std::path::{Path, PathBuf};

use super::file::FabricFileError;

/// Where the ring files go when the fabric file does not say (`shm_dir`).
pub const DEFAULT_SHM_DIR: &str = "/dev/shm";

/// The longest host name: a label, not a path.
const MAX_HOST_LEN: usize = 64;

/// The nodes' host names and the ring folder of a fabric file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hosts {
    /// `host` of each node, by node index (`None`: not said, UDP only).
    pub(super) host: Vec<Option<String>>,
    /// `shm_dir`, if the file says.
    pub(super) dir: Option<PathBuf>,
}

impl Hosts {
    /// The host of node `i`, if the file names one.
    pub fn host(&self, i: usize) -> Option<&str> {
        self.host.get(i).and_then(|h| h.as_deref())
    }

    /// The nodes other than `i` on `i`'s host (none when `i` names no host).
    pub fn co_located(&self, i: usize) -> Vec<usize> {
        let Some(mine) = self.host(i) else {
            return Vec::new();
        };
        (0..self.host.len())
            .filter(|&j| j != i && self.host(j) == Some(mine))
            .collect()
    }

    /// The folder of the ring files.
    pub fn dir(&self) -> &Path {
        self.dir
            .as_deref()
            .unwrap_or_else(|| Path::new(DEFAULT_SHM_DIR))
    }
}

/// A node's `host` value: a short name of letters, digits, `-`, `_` and `.`
/// (it names no file, but it is written by people: refuse what is surely a
/// typo rather than silently putting the node on its own host).
pub(super) fn parse_host(v: &toml::Value) -> Result<String, String> {
    let s = v.as_str().ok_or("`host` must be a string")?;
    let ok = !s.is_empty()
        && s.len() <= MAX_HOST_LEN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(format!(
            "`host` \"{s}\" must be 1 to {MAX_HOST_LEN} letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(s.to_string())
}

/// The top-level `shm_dir`: a folder, relative to the fabric file's own.
pub(super) fn parse_dir(file: &str, v: &toml::Value) -> Result<PathBuf, FabricFileError> {
    let bad = || FabricFileError::BadLinkKey {
        file: file.to_string(),
        key: "shm_dir",
        why: "must be a non-empty string naming a folder",
    };
    let s = v.as_str().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    let mut p = PathBuf::from(s);
    if p.is_relative() {
        if let Some(d) = Path::new(file).parent() {
            p = d.join(p);
        }
    }
    Ok(p)
}
