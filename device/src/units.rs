//! One syntax for durations and sizes (issue 28 item 5), for every command
//! line option (`vhca`, `vhca switch`, `vhca topology`), `--fault delay=`
//! and the fabric file's sizes, and the clap value parsers that check them,
//! so that a bad value is a clap error with the usage line that names the
//! argument.
//!
//! Durations: a number (fractions allowed) with a unit `ns`, `us` (or `µs`),
//! `ms` or `s`: `100us`, `2ms`, `1.5s`; `0` needs no unit. Sizes: bytes, or a
//! whole number with `K`, `M` or `G` (binary: 1K = 1024 bytes; `KiB`, `MiB`,
//! `GiB` too): `4096`, `256K`, `256M`, `1G`.

use std::ops::RangeInclusive;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser};

/// What `--help` says below the options of `vhca` and `vhca switch`.
pub const SYNTAX_HELP: &str =
    "Durations are a number with ns, us, ms or s (100us, 2ms, 1.5s; 0 needs \
     no unit). Sizes are bytes, or a whole number with K, M or G (binary: 1K = 1024, 256M, 1G).";

/// What `--help` says about a duration's syntax.
pub const DURATION_SYNTAX: &str = "a number with ns, us, ms or s, e.g. 100us, 2ms, 1.5s";

/// Parses a duration: a non-negative number with a unit `ns`, `us`/`µs`,
/// `ms` or `s` (`100us`, `1.5ms`, `5s`), or a bare `0`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    let split = t
        .find(|c: char| c.is_alphabetic())
        .ok_or_else(|| format!("`{s}` has no unit ({DURATION_SYNTAX})"))?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| format!("`{s}` is not a duration ({DURATION_SYNTAX})"))?;
    let unit_ns = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("`{s}` has an unknown unit ({DURATION_SYNTAX})")),
    };
    let ns = (n * unit_ns).round();
    // Below 2^64 ns (584 years): anything longer is a typo.
    if ns >= u64::MAX as f64 {
        return Err(format!("`{s}` is too long"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// A duration as [`parse_duration`] reads it, in the largest unit that
/// shows it whole (`500us`, `5s`).
pub fn show_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0".into();
    }
    for (unit, div) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns.is_multiple_of(div) {
            return format!("{}{unit}", ns / div);
        }
    }
    format!("{ns}ns")
}

/// Parses a size: bytes, or a whole number with `K`, `M` or `G` (also
/// `KiB`, `MiB`, `GiB`; powers of 1024, either case).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .filter(|b| b.ends_with(['k', 'm', 'g']))
        .unwrap_or(&lower);
    let (num, shift) = match body.as_bytes().last() {
        Some(b'k') => (&body[..body.len() - 1], 10),
        Some(b'm') => (&body[..body.len() - 1], 20),
        Some(b'g') => (&body[..body.len() - 1], 30),
        _ => (body, 0),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| {
            format!("`{s}` is not a size (bytes, or a number with K, M or G: 1K = 1024)")
        })
}

/// A size as [`parse_size`] reads it (`256M`, `4096`).
pub fn show_size(n: u64) -> String {
    for (unit, shift) in [("G", 30), ("M", 20), ("K", 10)] {
        if n != 0 && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// The clap value parser of a duration within `range` (and `0` besides,
/// when `zero` is true: "off").
pub fn duration_in(
    range: RangeInclusive<Duration>,
    zero: bool,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| checked_duration(parse_duration(s)?, &range, zero)
}

/// The value parser of an option's old spelling (`--busy-poll-us 50`): a
/// bare whole number counts in `unit`, anything else is a duration; then
/// as [`duration_in`].
pub fn legacy_duration_in(
    unit: Duration,
    range: RangeInclusive<Duration>,
    zero: bool,
) -> impl Fn(&str) -> Result<Duration, String> + Clone + Send + Sync + 'static {
    move |s| {
        let d = match s.trim().parse::<u32>() {
            Ok(n) => unit * n,
            Err(_) => parse_duration(s)?,
        };
        checked_duration(d, &range, zero)
    }
}

fn checked_duration(
    d: Duration,
    range: &RangeInclusive<Duration>,
    zero: bool,
) -> Result<Duration, String> {
    if range.contains(&d) || (zero && d.is_zero()) {
        return Ok(d);
    }
    let (lo, hi) = (show_duration(*range.start()), show_duration(*range.end()));
    Err(if zero {
        format!("0 (off) or from {lo} to {hi}")
    } else {
        format!("from {lo} to {hi}")
    })
}

/// The clap value parser of a size of at least `min` bytes.
pub fn size_at_least(
    min: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| match parse_size(s)? {
        n if n >= min => Ok(n),
        _ => Err(format!("at least {}", show_size(min))),
    }
}

/// The value parser of an old `--xyz on|off` option, kept (hidden) beside
/// its `--no-xyz` flag so that existing scripts still run.
pub fn on_off() -> impl TypedValueParser<Value = bool> {
    PossibleValuesParser::new(["on", "off"]).map(|s| s == "on")
}

/// `Cli::parse_args(args)` for `vhca`, `vhca switch` and `vhca topology`:
/// clap's `try_parse_from` (the first argument is the program), but a bad
/// value's error carries the usage line too (clap adds it to missing or
/// conflicting arguments, not to values): of the subcommand named in `args`,
/// if any.
pub trait ParseArgs: clap::Parser {
    fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::error::{ContextKind, ContextValue};
        let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
        Self::try_parse_from(&args).map_err(|mut e| {
            if e.use_stderr() && e.get(ContextKind::Usage).is_none() {
                let sub = args.iter().skip(1).find_map(|a| a.to_str());
                let usage = command_of::<Self>(sub).render_usage();
                e.insert(ContextKind::Usage, ContextValue::StyledStr(usage));
            }
            e
        })
    }
}

impl<P: clap::Parser> ParseArgs for P {}

/// `P`'s command, or its subcommand `sub` if it has one of that name.
fn command_of<P: clap::CommandFactory>(sub: Option<&str>) -> clap::Command {
    let mut cmd = P::command();
    cmd.build();
    match sub.and_then(|s| cmd.find_subcommand(s)) {
        Some(s) => s.clone(),
        None => cmd,
    }
}

/// A problem found after parsing (one needing several values, or a file),
/// as a clap error with the usage line of `P` (or of its subcommand `sub`),
/// exit status 2.
pub fn usage_error<P: clap::CommandFactory>(
    sub: Option<&str>,
    message: impl std::fmt::Display,
) -> clap::Error {
    command_of::<P>(sub).error(clap::error::ErrorKind::ValueValidation, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_unit_and_show_in_the_largest_whole_one() {
        let us = Duration::from_micros;
        assert_eq!(parse_duration("100us"), Ok(us(100)));
        assert_eq!(parse_duration("100µs"), Ok(us(100)));
        assert_eq!(parse_duration("2ms"), Ok(us(2000)));
        assert_eq!(parse_duration("1.5s"), Ok(us(1_500_000)));
        assert_eq!(parse_duration("250ns"), Ok(Duration::from_nanos(250)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for bad in ["100", "1h", "-1ms", "ms", "1e400s", "99999999999s", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        for d in [us(500), us(1_000_000), us(1500), Duration::from_nanos(7)] {
            assert_eq!(parse_duration(&show_duration(d)), Ok(d));
        }
        assert_eq!(show_duration(us(5_000_000)), "5s");
    }

    #[test]
    fn sizes_are_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("256K"), Ok(256 << 10));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        for bad in ["lots", "1.5M", "-1", "99999999999G", "4iB", "M", ""] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
        assert_eq!(show_size(256 << 20), "256M");
        assert_eq!(show_size(4097), "4097");
    }

    #[test]
    fn the_old_integer_spelling_counts_in_its_own_unit() {
        let p = legacy_duration_in(
            Duration::from_millis(1),
            Duration::from_millis(100)..=Duration::from_secs(3600),
            true,
        );
        assert_eq!(p("500"), Ok(Duration::from_millis(500)));
        assert_eq!(p("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(p("0"), Ok(Duration::ZERO));
        assert_eq!(p("50").unwrap_err(), "0 (off) or from 100ms to 3600s");
    }
}
