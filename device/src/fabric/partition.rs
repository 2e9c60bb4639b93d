//! A node's port attributes beyond its LID, as the fabric file assigns them in
//! place of a subnet manager: its LID mask control (AD-01: the port owns the
//! 2^LMC LIDs from its base LID, and a path's source path bits pick one) and its
//! P_Key table (AD-05: the partitions the port is a member of, full or limited,
//! PV-03). `lmc` and `pkeys` are optional keys of a `[[node]]`; a top-level
//! `pkeys` is the table of every node that names none.
//!
//! ```toml
//! pkeys = ["0xffff", "0x8001"]   # every node: the default partition, full member of 1
//! [[node]]
//! name = "a"
//! lid = 4
//! lmc = 2                        # LIDs 4..=7; the base LID is a multiple of 2^lmc
//! pkeys = ["0xffff", "0x0001"]   # bit 15 clear: a limited member of partition 1
//! ```

use std::ops::RangeInclusive;

/// Entries a P_Key table may have: what QUERY_PORT carries
/// (`abi::cmd::port::QueryPortOut::pkeys`).
pub const MAX_PKEYS: usize = 64;

/// The largest LID mask control (IBA 7.11.1: a 3-bit field, 2^7 LIDs).
pub const MAX_LMC: u8 = 7;

/// The default P_Key: full member of the default partition (10.9.1.2).
pub const DEFAULT_PKEY: u16 = 0xffff;

/// A node's LMC and P_Key table.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PortAttrs {
    /// LID mask control: the port owns LIDs `lid ..= lid + 2^lmc - 1`.
    pub lmc: u8,
    /// The P_Key table, index 0 first; bit 15 set is full membership.
    pub pkeys: Vec<u16>,
}

impl Default for PortAttrs {
    fn default() -> PortAttrs {
        PortAttrs {
            lmc: 0,
            pkeys: vec![DEFAULT_PKEY],
        }
    }
}

impl PortAttrs {
    /// The LIDs a port with base LID `base` owns (AD-01).
    pub fn lids(&self, base: u16) -> RangeInclusive<u16> {
        let n = 1u16 << self.lmc.min(MAX_LMC);
        base..=base.saturating_add(n - 1)
    }

    /// Why a node at base LID `lid` cannot have these attributes, if it cannot.
    pub fn check(&self, lid: u16) -> Result<(), String> {
        if self.lmc > MAX_LMC {
            return Err(format!("lmc {} is more than {MAX_LMC}", self.lmc));
        }
        let n = 1u32 << self.lmc;
        if u32::from(lid) % n != 0 {
            return Err(format!(
                "LID {lid:#x} is not a multiple of 2^lmc = {n}: the low lmc bits of a LID are path bits"
            ));
        }
        if u32::from(lid) + n - 1 > u32::from(super::MAX_UNICAST_LID) {
            return Err(format!(
                "LIDs {lid:#x}..={:#x} run past the unicast range (0xbfff)",
                u32::from(lid) + n - 1
            ));
        }
        check_pkeys(&self.pkeys)
    }
}

/// A P_Key table the port can hold: 1..=64 entries, each naming a partition
/// (low 15 bits not 0, the invalid P_Key), no partition twice (10.9.3 matches
/// by partition number, so a second entry could never be told apart).
pub fn check_pkeys(pkeys: &[u16]) -> Result<(), String> {
    if pkeys.is_empty() || pkeys.len() > MAX_PKEYS {
        return Err(format!(
            "pkeys has {} entries; a table has 1 to {MAX_PKEYS}",
            pkeys.len()
        ));
    }
    for (i, &p) in pkeys.iter().enumerate() {
        if p & 0x7fff == 0 {
            return Err(format!("pkeys[{i}] = {p:#06x} is the invalid P_Key"));
        }
        if let Some(j) = pkeys[..i].iter().position(|&q| q & 0x7fff == p & 0x7fff) {
            return Err(format!(
                "pkeys[{i}] = {p:#06x} is partition {:#06x} again (pkeys[{j}])",
                p & 0x7fff
            ));
        }
    }
    Ok(())
}

/// `lmc = N` of a node.
pub(super) fn parse_lmc(v: &toml::Value) -> Result<u8, String> {
    match v.as_integer() {
        Some(n) if (0..=i64::from(MAX_LMC)).contains(&n) => Ok(n as u8),
        Some(n) => Err(format!("lmc {n} is not 0..={MAX_LMC}")),
        None => Err("lmc must be an integer".into()),
    }
}

/// `pkeys = [...]`: integers or hex strings ("0x8001", "8001").
pub(super) fn parse_pkeys(v: &toml::Value) -> Result<Vec<u16>, String> {
    let a = v
        .as_array()
        .ok_or("pkeys must be an array of P_Keys, like [\"0xffff\", \"0x8001\"]")?;
    let mut out = Vec::with_capacity(a.len().min(MAX_PKEYS + 1));
    for (i, e) in a.iter().enumerate() {
        let p = match e {
            toml::Value::Integer(n) => u16::try_from(*n).ok(),
            toml::Value::String(s) => {
                let t = s.trim();
                let t = t
                    .strip_prefix("0x")
                    .or_else(|| t.strip_prefix("0X"))
                    .unwrap_or(t);
                (!t.is_empty() && t.len() <= 4)
                    .then(|| u16::from_str_radix(t, 16).ok())
                    .flatten()
            }
            _ => None,
        };
        let p = p.ok_or_else(|| {
            let shown = match e {
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::String(s) => format!("{s:?}"),
                other => format!("a {}", other.type_str()),
            };
            format!("pkeys[{i}] = {shown} is not a 16-bit P_Key")
        })?;
        out.push(p);
        if out.len() > MAX_PKEYS {
            break; // check_pkeys says why
        }
    }
    check_pkeys(&out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pk(s: &str) -> Result<Vec<u16>, String> {
        let t: toml::Table = toml::from_str(&format!("p = {s}")).unwrap();
        parse_pkeys(&t["p"])
    }

    #[test]
    fn ad_05_pkey_lists() {
        assert_eq!(pk("[\"0xffff\", \"8001\", 5]"), Ok(vec![0xffff, 0x8001, 5]));
        assert!(pk("[]").unwrap_err().contains("1 to 64"));
        assert!(pk("[\"0x8000\"]").unwrap_err().contains("invalid P_Key"));
        assert!(pk("[\"0x8001\", \"0x0001\"]")
            .unwrap_err()
            .contains("again"));
        assert!(pk("[70000]").unwrap_err().contains("16-bit"));
        assert!(pk("[\"0x10000\"]").unwrap_err().contains("16-bit"));
        assert!(pk("\"0xffff\"").unwrap_err().contains("array"));
        let many: Vec<String> = (1..=65).map(|i| i.to_string()).collect();
        assert!(pk(&format!("[{}]", many.join(",")))
            .unwrap_err()
            .contains("65"));
    }

    #[test]
    fn ad_01_lmc_ranges() {
        let a = PortAttrs {
            lmc: 2,
            ..PortAttrs::default()
        };
        assert_eq!(a.lids(8), 8..=11);
        assert!(a.check(8).is_ok());
        assert!(a.check(9).unwrap_err().contains("multiple"));
        assert!(a.check(0xbffc).is_ok());
        let b = PortAttrs {
            lmc: 7,
            ..PortAttrs::default()
        };
        assert!(b.check(0xbf80).is_ok());
        assert_eq!(PortAttrs::default().lids(3), 3..=3);
    }
}
