//! The fabric file's VL arbitration tables (AD-06; IBA 7.6.9, 14.2.5.9): what
//! a subnet manager programs into every port's VLArbitration attribute and
//! PortInfo:LimitOfHighPriority, given here in its place. An optional
//! top-level table; without it every data VL takes its turn a packet at a
//! time (`transport::engine::VlArbTables::fair`).
//!
//! ```toml
//! [vl_arb]
//! high = [[1, 32]]           # [VL, weight]: weight in 64-byte units, 0..=255 (0: skip)
//! low = [[0, 48], [1, 16]]   # VL0 three times VL1's bytes while both have packets
//! high_limit = 1             # 4 KiB of high priority at most before a low packet; 0: one packet; 255: no limit
//! ```

use transport::engine::{VlArbEntry, VlArbTables, DEFAULT_DATA_VLS, MAX_VL_ARB_ENTRIES};

/// Keys the `[vl_arb]` table may hold.
const KEYS: [&str; 3] = ["high", "low", "high_limit"];

/// The `[vl_arb]` table `v` for ports whose SL-to-VL table is `sl2vl`; the
/// error is one line saying what is wrong (the caller names the file).
pub(crate) fn parse(v: &toml::Value, sl2vl: &[u8; 16]) -> Result<VlArbTables, String> {
    let t = v
        .as_table()
        .ok_or("not a table (write [vl_arb] with high, low and high_limit)")?;
    if let Some(k) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key `{k}` (known: high, low, high_limit)"));
    }
    let tables = VlArbTables {
        high: entries(t.get("high"), "high")?,
        low: entries(t.get("low"), "low")?,
        high_limit: match t.get("high_limit") {
            None => 0,
            Some(x) => x
                .as_integer()
                .and_then(|x| u8::try_from(x).ok())
                .ok_or_else(|| {
                    format!(
                        "high_limit: {} is not 0..=255 (units of 4 KiB; 255: no limit)",
                        show(x)
                    )
                })?,
        },
    };
    tables
        .check(DEFAULT_DATA_VLS, sl2vl)
        .map_err(|e| e.to_string())?;
    Ok(tables)
}

/// One table: an array of `[VL, weight]` pairs (absent: empty).
fn entries(v: Option<&toml::Value>, name: &str) -> Result<Vec<VlArbEntry>, String> {
    let Some(v) = v else {
        return Ok(Vec::new());
    };
    let a = v
        .as_array()
        .ok_or_else(|| format!("{name}: not an array of [VL, weight] pairs"))?;
    if a.len() > MAX_VL_ARB_ENTRIES {
        return Err(format!(
            "{name}: {} entries, at most {MAX_VL_ARB_ENTRIES}",
            a.len()
        ));
    }
    a.iter()
        .enumerate()
        .map(|(i, e)| {
            let pair = e.as_array().filter(|p| p.len() == 2).ok_or_else(|| {
                format!("{name} entry {i}: {} is not a [VL, weight] pair", show(e))
            })?;
            let int = |x: &toml::Value, what: &str, max: u8| {
                x.as_integer()
                    .and_then(|n| u8::try_from(n).ok())
                    .filter(|&n| n <= max)
                    .ok_or_else(|| format!("{name} entry {i}: {what} {} is not 0..={max}", show(x)))
            };
            Ok(VlArbEntry {
                vl: int(&pair[0], "VL", DEFAULT_DATA_VLS - 1)?,
                weight: int(&pair[1], "weight", u8::MAX)?,
            })
        })
        .collect()
}

/// A TOML value as the file writes it, for an error message.
fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::Array(a) => {
            let items: Vec<String> = a.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        toml::Value::String(s) => format!("{s:?}"),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(x) => x.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::Table(_) => "a table".into(),
    }
}
