//! The device's command line as a packaged service sees it (issue 28 item 2):
//!
//! - `--config FILE`: the options from a TOML file whose keys are the long
//!   options' names (`socket = "/run/vhca/a/vfio-user.sock"`,
//!   `busy-poll-us = 50`), so that the systemd unit `vhca@NAME` runs
//!   `vhca --config /etc/vhca/NAME.toml`. An option on the command line
//!   overrides the file's, and so does any option that conflicts with it
//!   (`--tap` on the command line drops the file's `fabric` and `node`).
//! - QEMU's vhost-user "Backend program conventions" (docs/interop/
//!   vhost-user.rst) for the RoCE port's vhost-user-net backend:
//!   `--print-capabilities` prints the backend's capabilities as JSON
//!   ([`CAPABILITIES_JSON`], `VHostUserBackendCapabilities` of
//!   docs/interop/vhost-user.json) and exits, ignoring every other argument;
//!   `--socket-path PATH` is the conventional name of `--vhost-user-net`.
//!   `--fd FDNUM` (a vhost-user socket inherited already connected) is not
//!   offered: vhost-user-backend 0.24 serves only sockets it accepts or
//!   connects itself, and vhca serves its socket again after each disconnect,
//!   which an inherited connection cannot be.
//!
//! `cli.rs` keeps the device's options; this module only adds these three
//! (flattened into `Cli`) and turns a config file into command-line tokens
//! in front of the user's, which clap then checks like any others.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::{ArgAction, CommandFactory};

use crate::cli::Cli;

/// What `--print-capabilities` prints: a vhost-user backend of type `net`
/// (the only member `VHostUserBackendCapabilities` has for that type). The
/// package's /usr/share/qemu/vhost-user/50-vhca-net.json names the same type.
pub const CAPABILITIES_JSON: &str = "{\n  \"type\": \"net\"\n}";

/// The options of this module, flattened into [`Cli`].
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServiceArgs {
    /// Read options from FILE (TOML): each key is the name of a long option
    /// without its dashes, e.g. socket = "/run/vhca/a/vfio-user.sock",
    /// busy-poll-us = 50, tap = "vhca0"; a flag is key = true. Options on the
    /// command line override the file's (and drop those they conflict with).
    /// Relative paths are relative to the working directory, as on the
    /// command line (the unit's is /). The systemd unit vhca@NAME
    /// runs vhca --config /etc/vhca/NAME.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the vhost-user backend capabilities of the RoCE port's NIC as
    /// JSON and exit, ignoring every other option (QEMU's vhost-user backend
    /// program conventions; described in /usr/share/qemu/vhost-user/).
    #[arg(long)]
    pub print_capabilities: bool,

    /// RoCE mode: the conventional name of --vhost-user-net (QEMU's
    /// vhost-user backend program conventions).
    #[arg(
        long,
        value_name = "PATH",
        requires = "tap",
        conflicts_with = "vhost_user_net"
    )]
    pub socket_path: Option<PathBuf>,
}

/// What the device's command line asks for.
#[derive(Debug)]
pub enum Invocation {
    /// `--print-capabilities`: print [`CAPABILITIES_JSON`], exit 0.
    PrintCapabilities,
    /// Run the device with these options (`--config` applied, `--socket-path`
    /// moved to `vhost_user_net`).
    Run(Box<Cli>),
}

/// Why the command line could not be read.
#[derive(Debug)]
pub enum ArgsError {
    /// clap's own error (usage, help, version): print it with its `exit()`.
    /// `from_config` lists the tokens the config file contributed, for a note.
    Clap {
        error: clap::Error,
        from_config: Option<(PathBuf, Vec<String>)>,
    },
    /// The config file: unreadable, not TOML, an unknown key or a value of the
    /// wrong kind. One line naming the file and the key.
    Config(String),
}

/// The long names (and aliases) a token list gives, up to `--`.
fn longs_given(args: &[OsString]) -> Vec<String> {
    args.iter()
        .take_while(|a| a.as_os_str() != "--")
        .filter_map(|a| a.to_str()?.strip_prefix("--").map(str::to_owned))
        .map(|s| s.split('=').next().unwrap_or_default().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `--config FILE` or `--config=FILE` in `args` (up to `--`); an error if
/// given twice or without a value.
fn config_path(args: &[OsString]) -> Result<Option<PathBuf>, ArgsError> {
    let mut found = None;
    let mut it = args.iter().take_while(|a| a.as_os_str() != "--");
    while let Some(a) = it.next() {
        let path = if a == "--config" {
            match it.next() {
                Some(v) => PathBuf::from(v),
                None => return Err(ArgsError::Config("--config needs a FILE".into())),
            }
        } else if let Some(v) = a.to_str().and_then(|s| s.strip_prefix("--config=")) {
            PathBuf::from(v)
        } else {
            continue;
        };
        if found.replace(path).is_some() {
            return Err(ArgsError::Config("--config given twice".into()));
        }
    }
    Ok(found)
}

/// One TOML value as the text of an option's value.
fn scalar(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Datetime(d) => Some(d.to_string()),
        toml::Value::Array(_) | toml::Value::Table(_) => None,
    }
}

/// The command-line tokens for the options of config file `path` (text
/// `text`), leaving out those the command line `given` (long names) sets or
/// conflicts with.
pub fn config_tokens(path: &Path, text: &str, given: &[String]) -> Result<Vec<String>, String> {
    let file = path.display();
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        // toml's message spans several lines (a snippet); keep it one.
        let msg = e.message().to_owned();
        match e.span() {
            Some(s) => {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!("--config {file}: line {line}: {msg}")
            }
            None => format!("--config {file}: {msg}"),
        }
    })?;
    let mut cmd = Cli::command();
    cmd.build();
    let by_long = |name: &str| {
        cmd.get_arguments()
            .find(|a| {
                a.get_long() == Some(name)
                    || a.get_all_aliases().is_some_and(|al| al.contains(&name))
            })
            .cloned()
    };
    let given_args: Vec<clap::Arg> = given.iter().filter_map(|n| by_long(n)).collect();
    let given_ids: HashSet<&str> = given_args.iter().map(|a| a.get_id().as_str()).collect();
    let mut out = Vec::new();
    for (key, value) in &table {
        let arg = by_long(key)
            .filter(|a| !matches!(a.get_id().as_str(), "config" | "print_capabilities"))
            .filter(|a| a.get_long() == Some(key.as_str()))
            .filter(|a| {
                matches!(
                    a.get_action(),
                    ArgAction::Set | ArgAction::Append | ArgAction::SetTrue | ArgAction::SetFalse
                )
            })
            .ok_or_else(|| {
                let hint = by_long(&key.replace('_', "-"))
                    .and_then(|a| a.get_long().map(|l| format!(" (did you mean {l}?)")))
                    .unwrap_or_default();
                format!(
                    "--config {file}: unknown key `{key}`{hint}: the keys are the long \
                     options of vhca --help without their dashes"
                )
            })?;
        let id = arg.get_id().as_str();
        let overridden = given_ids.contains(id)
            || cmd
                .get_arg_conflicts_with(&arg)
                .iter()
                .any(|c| given_ids.contains(c.get_id().as_str()))
            || given_args.iter().any(|g| {
                cmd.get_arg_conflicts_with(g)
                    .iter()
                    .any(|c| c.get_id() == arg.get_id())
            });
        if overridden {
            continue;
        }
        match arg.get_action() {
            ArgAction::SetTrue | ArgAction::SetFalse => match value {
                toml::Value::Boolean(true) => out.push(format!("--{key}")),
                toml::Value::Boolean(false) => {}
                _ => return Err(format!("--config {file}: `{key}` is a flag: true or false")),
            },
            action => {
                let items: Vec<&toml::Value> = match value {
                    toml::Value::Array(a) if matches!(action, ArgAction::Append) => {
                        a.iter().collect()
                    }
                    v => vec![v],
                };
                for v in items {
                    let s = scalar(v).ok_or_else(|| {
                        format!("--config {file}: `{key}` takes one value (a string or a number)")
                    })?;
                    // `--key=VALUE`: a value starting with '-' stays a value.
                    out.push(format!("--{key}={s}"));
                }
            }
        }
    }
    Ok(out)
}

/// Reads the device's command line `args` (with the program name first):
/// `--print-capabilities` anywhere before `--` wins over everything; else
/// `--config FILE`'s options go in front of the others and clap parses the
/// lot.
pub fn parse<I, T>(args: I) -> Result<Invocation, ArgsError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let (prog, rest) = match args.split_first() {
        Some((p, r)) => (p.clone(), r.to_vec()),
        None => (OsString::from("vhca"), Vec::new()),
    };
    if rest
        .iter()
        .take_while(|a| a.as_os_str() != "--")
        .any(|a| a == OsStr::new("--print-capabilities"))
    {
        return Ok(Invocation::PrintCapabilities);
    }
    let mut from_config = None;
    let mut full = vec![prog];
    if let Some(path) = config_path(&rest)? {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ArgsError::Config(format!("--config {}: {e}", path.display())))?;
        let tokens = config_tokens(&path, &text, &longs_given(&rest)).map_err(ArgsError::Config)?;
        full.extend(tokens.iter().map(OsString::from));
        from_config = Some((path, tokens));
    }
    full.extend(rest);
    // units::ParseArgs: clap's error with the usage line, as without --config.
    let mut cli = <Cli as crate::units::ParseArgs>::parse_args(full)
        .map_err(|error| ArgsError::Clap { error, from_config })?;
    if let Some(p) = cli.service.socket_path.take() {
        cli.vhost_user_net = Some(p);
    }
    Ok(Invocation::Run(Box::new(cli)))
}

/// `parse` for `main`: prints what it must and exits where the command line
/// says so (capabilities, help, version, errors: status 2).
pub fn parse_or_exit() -> Cli {
    match parse(std::env::args_os()) {
        Ok(Invocation::Run(cli)) => *cli,
        Ok(Invocation::PrintCapabilities) => {
            println!("{CAPABILITIES_JSON}");
            std::process::exit(0);
        }
        Err(ArgsError::Config(msg)) => {
            eprintln!("vhca: {msg}");
            std::process::exit(2);
        }
        Err(ArgsError::Clap { error, from_config }) => {
            if let Some((path, tokens)) = from_config.filter(|_| error.use_stderr()) {
                let _ = error.print();
                eprintln!(
                    "vhca: (with the options of --config {}: {})",
                    path.display(),
                    tokens.join(" ")
                );
                std::process::exit(2);
            }
            error.exit()
        }
    }
}
