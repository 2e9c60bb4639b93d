//! The fabric file's `[ib_cc]` table (issue 31 item 2): IBA congestion control
//! (annex A10) without a subnet manager. What OpenSM's CC manager would Set
//! with `congestion_control TRUE`: every switch's SwitchCongestionSetting and
//! every CA port's CACongestionSetting (the same entry for every SL) and
//! CongestionControlTable; an SM's CC manager may Set them again later.
//!
//! ```toml
//! [ib_cc]
//! threshold = 15          # SwitchCongestionSetting:Threshold, 0 (no marking)..15
//! packet_size = 0         # Packet_Size, 64-byte units
//! marking_rate = 0        # Marking_Rate: unmarked eligible packets between marks
//! ccti_increase = 1       # CACongestionEntry: CCTI_Increase per BECN
//! ccti_timer = 400        # CCTI_Timer, 1.024 us units
//! ccti_min = 0            # CCTI_Min
//! trigger_threshold = 0   # Trigger_Threshold (0: no events)
//! cct = "0:0,0:1,0:2"     # CCT entries shift:multiplier (OpenSM's cc_cct syntax)
//! ```
//!
//! Every key is optional (the values above are the defaults, but `cct`, whose
//! default is 128 entries, entry i an inter-packet delay of i).

use transport::mad::cc::CA_CCT_BLOCKS;
use transport::mad::cc_attr::{
    sw_control_map, CaCongestionEntry, CaCongestionSetting, CctEntry, SwitchCongestionSetting,
    CA_ENTRIES, CCT_BLOCK,
};

/// What `[ib_cc]` sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IbCc {
    pub switch: SwitchCongestionSetting,
    pub ca: CaCongestionSetting,
    pub cct: Vec<CctEntry>,
}

const KEYS: [&str; 8] = [
    "threshold",
    "packet_size",
    "marking_rate",
    "ccti_increase",
    "ccti_timer",
    "ccti_min",
    "trigger_threshold",
    "cct",
];

/// Reads `[ib_cc]`; the error says which key and why.
pub fn parse(v: &toml::Value) -> Result<IbCc, String> {
    let t = v
        .as_table()
        .ok_or("must be a table, written [ib_cc]".to_string())?;
    if let Some(k) = t.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!("unknown key `{k}` (known: {})", KEYS.join(", ")));
    }
    let int = |k: &str, max: u64, default: u64| -> Result<u64, String> {
        match t.get(k) {
            None => Ok(default),
            Some(toml::Value::Integer(n)) if (0..=max as i64).contains(n) => Ok(*n as u64),
            Some(_) => Err(format!("{k}: must be an integer from 0 to {max}")),
        }
    };
    let switch = SwitchCongestionSetting {
        control_map: sw_control_map::THRESHOLD_PACKET_SIZE | sw_control_map::MARKING_RATE,
        threshold: int("threshold", 15, 15)? as u8,
        packet_size: int("packet_size", 255, 0)? as u8,
        marking_rate: int("marking_rate", 0xffff, 0)? as u16,
        ..SwitchCongestionSetting::default()
    };
    let entry = CaCongestionEntry {
        ccti_timer: int("ccti_timer", 0xffff, 400)? as u16,
        ccti_increase: int("ccti_increase", 255, 1)? as u8,
        trigger_threshold: int("trigger_threshold", 255, 0)? as u8,
        ccti_min: int("ccti_min", 255, 0)? as u8,
    };
    let max = usize::from(CA_CCT_BLOCKS) * CCT_BLOCK;
    let cct = match t.get("cct") {
        None => (0..max as u16)
            .map(|i| CctEntry {
                shift: 0,
                multiplier: i,
            })
            .collect(),
        Some(toml::Value::String(s)) => parse_cct(s, max)?,
        Some(_) => return Err("cct: must be a string of shift:multiplier entries".into()),
    };
    Ok(IbCc {
        switch,
        ca: CaCongestionSetting {
            // QP based (Port_Control bit 0 clear), every SL's entry set.
            port_control: 0,
            control_map: 0xffff,
            entries: [entry; CA_ENTRIES],
        },
        cct,
    })
}

/// OpenSM's `cc_cct` syntax: `shift:multiplier` entries separated by commas,
/// shift 0..=3, multiplier 0..=0x3FFF, at most `max`.
fn parse_cct(s: &str, max: usize) -> Result<Vec<CctEntry>, String> {
    let mut v = Vec::new();
    for tok in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let bad =
            || format!("cct: `{tok}` is not shift:multiplier (shift 0..3, multiplier 0..16383)");
        let (a, b) = tok.split_once(':').ok_or_else(bad)?;
        let num = |x: &str| {
            let x = x.trim();
            match x.strip_prefix("0x") {
                Some(h) => u16::from_str_radix(h, 16).ok(),
                None => x.parse::<u16>().ok(),
            }
        };
        let (shift, multiplier) = (num(a).ok_or_else(bad)?, num(b).ok_or_else(bad)?);
        if shift > 3 || multiplier > 0x3fff {
            return Err(bad());
        }
        v.push(CctEntry {
            shift: shift as u8,
            multiplier,
        });
    }
    if v.is_empty() || v.len() > max {
        return Err(format!("cct: 1 to {max} entries"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> toml::Value {
        s.parse::<toml::Table>().unwrap()["ib_cc"].clone()
    }

    #[test]
    fn a10_4_defaults_and_every_key() {
        let c = parse(&table("[ib_cc]\n")).unwrap();
        assert_eq!((c.switch.threshold, c.cct.len()), (15, 128));
        assert_eq!(c.ca.entries[7].ccti_timer, 400);
        let c = parse(&table(
            "[ib_cc]\nthreshold = 8\npacket_size = 2\nmarking_rate = 3\nccti_increase = 2\n\
             ccti_timer = 150\nccti_min = 1\ntrigger_threshold = 9\ncct = \"0:0, 1:0x10,3:16383\"\n",
        ))
        .unwrap();
        assert_eq!(
            (
                c.switch.threshold,
                c.switch.packet_size,
                c.switch.marking_rate
            ),
            (8, 2, 3)
        );
        let e = c.ca.entries[0];
        assert_eq!(
            (
                e.ccti_increase,
                e.ccti_timer,
                e.ccti_min,
                e.trigger_threshold
            ),
            (2, 150, 1, 9)
        );
        assert_eq!(
            c.cct[1],
            CctEntry {
                shift: 1,
                multiplier: 16
            }
        );
        assert_eq!(c.cct[2].delay(), 16383 << 3);
    }

    #[test]
    fn a10_4_bad_values_are_refused_with_the_key() {
        for (text, why) in [
            ("threshold = 16", "threshold"),
            ("ccti_timer = -1", "ccti_timer"),
            ("cct = \"4:1\"", "4:1"),
            ("cct = \"0:16384\"", "0:16384"),
            ("cct = \"\"", "1 to 128"),
            ("cct = 3", "cct"),
            ("colour = 1", "unknown key `colour`"),
        ] {
            let e = parse(&table(&format!("[ib_cc]\n{text}\n"))).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        let many = (0..129).map(|_| "0:1").collect::<Vec<_>>().join(",");
        assert!(parse(&table(&format!("[ib_cc]\ncct = \"{many}\"\n"))).is_err());
    }
}
