//! The Congestion Control Agent (issue 31 item 2; IBA Annex A10.4): the class
//! 0x21 MADs OpenSM's congestion control manager sends (SwitchCongestionSetting,
//! CACongestionSetting, CongestionControlTable by block), the reads back, the
//! CC_Key check (A10.4.1) and the statuses of what a node does not have.
//! Assertions are on the MAD bytes in OpenSM's layout (`ib_cc_mad_t`: CC_Key at
//! 24, log data at 32, management data at 64).

use transport::mad::cc::{CcAgent, CcDrop, CA_CCT_BLOCKS};
use transport::mad::cc_attr::{id, CctEntry, SwitchLogEvent, CLASS_CC};
use transport::mad::MAD_LEN;
use transport::verbs::Time;

const T0: Time = Time(5_000_000_000);
const KEY: u64 = 0x0c0c_0000_cafe_0021;
const GET: u8 = 0x01;
const SET: u8 = 0x02;

/// A CC MAD as `cc_mad_post` builds it: version 1 / class 0x21 / version 2,
/// `method`, attribute, modifier, the CC_Key, management data at 64.
fn cc(method: u8, attr: u16, modifier: u32, key: u64, data: &[u8]) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[0] = 1;
    m[1] = CLASS_CC;
    m[2] = 2;
    m[3] = method;
    m[8..16].copy_from_slice(&0x7a93u64.to_be_bytes());
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m[20..24].copy_from_slice(&modifier.to_be_bytes());
    m[24..32].copy_from_slice(&key.to_be_bytes());
    m[64..64 + data.len()].copy_from_slice(data);
    m
}

fn status(r: &[u8; MAD_LEN]) -> u16 {
    u16::from_be_bytes([r[4], r[5]])
}

fn ask(a: &mut CcAgent, m: [u8; MAD_LEN]) -> Box<[u8; MAD_LEN]> {
    let r = a.handle_mad(&m, T0).expect("a GetResp");
    assert_eq!(r[3], 0x81, "GetResp");
    assert_eq!(r[8..24], m[8..24], "TID and attribute echoed");
    r
}

/// CACongestionSetting bytes (`ib_ca_cong_setting_t`): Port_Control,
/// Control_Map, then per SL CCTI_Timer, CCTI_Increase, Trigger_Threshold,
/// CCTI_Min.
fn ca_setting(port_control: u16, map: u16, per_sl: impl Fn(usize) -> (u16, u8, u8, u8)) -> Vec<u8> {
    let mut d = vec![0u8; 4 + 16 * 8];
    d[0..2].copy_from_slice(&port_control.to_be_bytes());
    d[2..4].copy_from_slice(&map.to_be_bytes());
    for sl in 0..16 {
        let (timer, inc, trig, min) = per_sl(sl);
        let b = &mut d[4 + 8 * sl..12 + 8 * sl];
        b[0..2].copy_from_slice(&timer.to_be_bytes());
        b[2] = inc;
        b[3] = trig;
        b[4] = min;
    }
    d
}

/// A CongestionControlTable block: CCTI_Limit, then 64 shift:multiplier words.
fn cct_block(limit: u16, first_entry: u16) -> Vec<u8> {
    let mut d = vec![0u8; 4 + 128];
    d[0..2].copy_from_slice(&limit.to_be_bytes());
    for i in 0..64u16 {
        let w = (1u16 << 14) | (first_entry + i);
        d[4 + 2 * i as usize..6 + 2 * i as usize].copy_from_slice(&w.to_be_bytes());
    }
    d
}

#[test]
fn a10_4_3_8_ca_congestion_setting_set_applies_the_control_maps_sls_and_reads_back() {
    let mut a = CcAgent::ca();
    let d = ca_setting(1, 0x0003, |sl| (150 + sl as u16, 1 + sl as u8, 10, 0));
    let r = ask(&mut a, cc(SET, id::CA_CONGESTION_SETTING, 0, 0, &d));
    assert_eq!(status(&r), 0);
    // SL 0 and 1 taken; SL 2 (not in the map) stays 0.
    assert_eq!(r[64..66], [0, 1], "Port_Control: SL/port based");
    assert_eq!(r[68..70], 150u16.to_be_bytes(), "SL0 CCTI_Timer");
    assert_eq!(r[76..78], 151u16.to_be_bytes(), "SL1 CCTI_Timer");
    assert_eq!(r[78], 2, "SL1 CCTI_Increase");
    assert_eq!(r[84..92], [0; 8], "SL2 untouched");
    let s = a.ca_setting();
    assert_eq!(s.entries[1].ccti_increase, 2);
    assert_eq!(s.entries[2].ccti_timer, 0);
    let g = ask(&mut a, cc(GET, id::CA_CONGESTION_SETTING, 0, 0, &[]));
    assert_eq!(g[64..200], r[64..200], "a Get reads what the Set left");
}

#[test]
fn a10_4_3_9_cct_blocks_by_attribute_modifier_set_ccti_limit_and_entries() {
    let mut a = CcAgent::ca();
    for block in 0..u32::from(CA_CCT_BLOCKS) {
        let d = cct_block(127, block as u16 * 64);
        let r = ask(&mut a, cc(SET, id::CONGESTION_CONTROL_TABLE, block, 0, &d));
        assert_eq!(status(&r), 0);
        assert_eq!(r[64..64 + d.len()], d[..], "block {block} read back");
    }
    assert_eq!(a.ccti_limit(), 127);
    assert_eq!(a.cct().len(), 128);
    assert_eq!(
        a.cct()[70],
        CctEntry {
            shift: 1,
            multiplier: 70
        }
    );
    assert_eq!(a.cct()[70].delay(), 140, "multiplier << shift");
    let g = ask(&mut a, cc(GET, id::CONGESTION_CONTROL_TABLE, 1, 0, &[]));
    assert_eq!(g[64..66], 127u16.to_be_bytes());
    assert_eq!(
        g[68..70],
        ((1u16 << 14) | 64).to_be_bytes(),
        "entry 64 heads block 1"
    );
}

#[test]
fn a10_4_3_9_cct_block_or_limit_past_the_table_is_an_invalid_field() {
    let mut a = CcAgent::ca();
    let r = ask(
        &mut a,
        cc(SET, id::CONGESTION_CONTROL_TABLE, 2, 0, &cct_block(1, 0)),
    );
    assert_eq!(status(&r), 7 << 2, "block 2 of a 2-block table");
    let r = ask(
        &mut a,
        cc(SET, id::CONGESTION_CONTROL_TABLE, 0, 0, &cct_block(128, 0)),
    );
    assert_eq!(status(&r), 7 << 2, "CCTI_Limit 128 of 128 entries");
    assert_eq!(a.ccti_limit(), 0, "nothing taken");
    assert_eq!(a.cct()[0], CctEntry::default());
    let info = ask(&mut a, cc(GET, id::CONGESTION_INFO, 0, 0, &[]));
    assert_eq!(info[66], CA_CCT_BLOCKS, "CongestionInfo:ControlTableCap");
}

#[test]
fn a10_4_3_6_switch_congestion_setting_applies_only_what_control_map_names() {
    let mut a = CcAgent::switch(8);
    let mut d = vec![0u8; 76];
    // Control_Map: victim mask and threshold/packet size only.
    d[0..4].copy_from_slice(&0b0_0101u32.to_be_bytes());
    d[35] = 0b0000_0110; // victim mask: ports 1 and 2
    d[67] = 0xff; // credit mask (not in the map)
    d[68] = 0xf0; // Threshold 15
    d[69] = 2; // Packet_Size: 128 bytes
    d[74..76].copy_from_slice(&9u16.to_be_bytes()); // Marking_Rate (not in the map)
    let r = ask(&mut a, cc(SET, id::SWITCH_CONGESTION_SETTING, 0, 0, &d));
    assert_eq!(status(&r), 0);
    let s = a.switch_setting();
    assert_eq!(s.threshold, 15);
    assert_eq!(s.packet_size, 2);
    assert_eq!(s.marking_rate, 0, "Marking_Rate not in the Control_Map");
    assert_eq!(s.credit_mask, [0; 32], "Credit_Mask not in the Control_Map");
    assert_eq!(r[99], 0b110, "victim mask read back");
    assert_eq!(r[132..134], [0xf0, 2]);
    // A CA has no SwitchCongestionSetting, a switch no CACongestionSetting.
    let mut ca = CcAgent::ca();
    let r = ask(&mut ca, cc(SET, id::SWITCH_CONGESTION_SETTING, 0, 0, &d));
    assert_eq!(status(&r), 3 << 2, "UNSUPPORTED_METHOD_ATTR");
    let r = ask(&mut a, cc(GET, id::CA_CONGESTION_SETTING, 0, 0, &[]));
    assert_eq!(status(&r), 3 << 2);
    let r = ask(&mut a, cc(GET, id::CONGESTION_CONTROL_TABLE, 0, 0, &[]));
    assert_eq!(status(&r), 3 << 2);
}

#[test]
fn a10_4_3_7_switch_port_setting_takes_valid_elements_of_its_block() {
    let mut a = CcAgent::switch(8);
    let mut d = vec![0u8; 128];
    // Port 3: valid, congestion control, threshold 12, 64-byte packets, rate 4.
    d[12..16].copy_from_slice(&[0x80 | 12, 1, 0, 4]);
    // Port 4: not valid: ignored.
    d[16..20].copy_from_slice(&[0x0f, 1, 0, 4]);
    let r = ask(
        &mut a,
        cc(SET, id::SWITCH_PORT_CONGESTION_SETTING, 0, 0, &d),
    );
    assert_eq!(status(&r), 0);
    let p3 = a.port_setting(3).unwrap();
    assert!(p3.valid && !p3.control_type);
    assert_eq!((p3.threshold, p3.packet_size, p3.cong_parm), (12, 1, 4));
    assert!(!a.port_setting(4).unwrap().valid);
    assert_eq!(r[76..80], [0x8c, 1, 0, 4]);
    assert_eq!(r[80..84], [0; 4], "port 4 reads as it is (unset)");
    assert_eq!(r[100..104], [0; 4], "port 9 does not exist");
    let r = ask(
        &mut a,
        cc(GET, id::SWITCH_PORT_CONGESTION_SETTING, 1, 0, &[]),
    );
    assert_eq!(status(&r), 7 << 2, "block 1 of a 9-port (0..=8) switch");
}

#[test]
fn a10_4_1_wrong_cc_key_is_dropped_counted_and_the_lease_clears_protection() {
    let mut a = CcAgent::ca();
    // The manager takes the port: CC_Key, protect bit, 10 s lease.
    let mut k = vec![0u8; 14];
    k[0..8].copy_from_slice(&KEY.to_be_bytes());
    k[8] = 0x80;
    k[10..12].copy_from_slice(&10u16.to_be_bytes());
    let r = ask(&mut a, cc(SET, id::CONGESTION_KEY_INFO, 0, 0, &k));
    assert_eq!(status(&r), 0);
    assert_eq!(r[64..72], KEY.to_be_bytes());
    // A Set with the wrong key: no response, counted, nothing changed.
    let d = ca_setting(1, 0xffff, |_| (1, 1, 1, 1));
    assert!(a
        .handle_mad(&cc(SET, id::CA_CONGESTION_SETTING, 0, 0xbad, &d), T0)
        .is_none());
    assert_eq!(a.counters().drops(CcDrop::BadCcKey), 1);
    assert_eq!(a.key_info().violations, 1);
    assert_eq!(a.ca_setting().control_map, 0, "the Set was not applied");
    // A Get with the wrong key while protected: dropped too.
    assert!(a
        .handle_mad(&cc(GET, id::CONGESTION_KEY_INFO, 0, 0xbad, &[]), T0)
        .is_none());
    assert_eq!(a.key_info().violations, 2);
    // The right key goes through and reads the violations.
    let r = ask(&mut a, cc(GET, id::CONGESTION_KEY_INFO, 0, KEY, &[]));
    assert_eq!(r[76..78], 2u16.to_be_bytes(), "CC_KeyViolations");
    // Another bad one starts the lease; 10 s on, the protect bit is clear, so
    // a Get with the wrong key goes on, the key read as 0.
    let _ = a.handle_mad(&cc(SET, id::CONGESTION_KEY_INFO, 0, 1, &k), T0);
    assert_eq!(a.poll_timeout(), Some(T0.plus_ns(10_000_000_000)));
    let later = T0.plus_ns(10_000_000_000);
    let r = a
        .handle_mad(&cc(GET, id::CONGESTION_KEY_INFO, 0, 0xbad, &[]), later)
        .expect("unprotected: a Get goes on");
    assert_eq!(r[64..72], [0; 8], "the key reads as 0 to a non-holder");
    assert_eq!(r[72], 0, "protect bit cleared");
    assert_eq!(a.counters().lease_expiries, 1);
}

#[test]
fn a10_4_3_4_cc_key_violations_set_to_zero_clears_and_nonzero_leaves_it() {
    let mut a = CcAgent::ca();
    let mut k = vec![0u8; 14];
    k[0..8].copy_from_slice(&KEY.to_be_bytes());
    k[8] = 0x80;
    let _ = ask(&mut a, cc(SET, id::CONGESTION_KEY_INFO, 0, 0, &k));
    for _ in 0..3 {
        assert!(a
            .handle_mad(&cc(GET, id::CONGESTION_KEY_INFO, 0, 0xbad, &[]), T0)
            .is_none());
    }
    assert_eq!(a.key_info().violations, 3);
    // ibccconfig's "<cckeyviolations>": a non-zero value leaves the counter.
    k[12..14].copy_from_slice(&1u16.to_be_bytes());
    let r = ask(&mut a, cc(SET, id::CONGESTION_KEY_INFO, 0, KEY, &k));
    assert_eq!(r[76..78], 3u16.to_be_bytes(), "left unchanged");
    // Zero clears it, the rest of the Set applied as ever.
    k[12..14].copy_from_slice(&0u16.to_be_bytes());
    let r = ask(&mut a, cc(SET, id::CONGESTION_KEY_INFO, 0, KEY, &k));
    assert_eq!(r[76..78], [0, 0], "cleared");
    assert_eq!(a.key_info().violations, 0);
    assert_eq!(r[64..72], KEY.to_be_bytes());
    assert!(a.key_info().protect);
}

#[test]
fn a10_4_bad_version_method_and_attribute_get_the_statuses_and_junk_is_counted() {
    let mut a = CcAgent::ca();
    let mut m = cc(GET, id::CONGESTION_INFO, 0, 0, &[]);
    m[2] = 1;
    assert_eq!(
        status(&ask(&mut a, m)),
        1 << 2,
        "class version 1: BAD_VERSION"
    );
    assert_eq!(
        status(&ask(&mut a, cc(0x06, id::CONGESTION_INFO, 0, 0, &[]))),
        2 << 2
    );
    assert_eq!(
        status(&ask(&mut a, cc(GET, 0x0030, 0, 0, &[]))),
        3 << 2,
        "no such attribute"
    );
    assert_eq!(
        status(&ask(&mut a, cc(SET, id::TIME_STAMP, 0, 0, &[]))),
        3 << 2
    );
    assert_eq!(
        status(&ask(&mut a, cc(SET, id::CONGESTION_INFO, 0, 0, &[]))),
        3 << 2
    );
    assert_eq!(a.counters().error_replies, 5);
    assert!(a.handle_mad(&[0u8; 100], T0).is_none());
    let mut pma = cc(GET, id::CONGESTION_INFO, 0, 0, &[]);
    pma[1] = 0x04;
    assert!(a.handle_mad(&pma, T0).is_none());
    assert_eq!(a.counters().drops(CcDrop::NotCc), 2);
    assert!(a
        .handle_mad(&cc(0x81, id::CONGESTION_INFO, 0, 0, &[]), T0)
        .is_none());
    assert_eq!(a.counters().drops(CcDrop::Response), 1);
}

#[test]
fn a10_4_3_5_switch_congestion_log_reports_marks_and_starts_again_after_a_get() {
    let mut a = CcAgent::switch(8);
    for i in 0..20u16 {
        a.log_switch_event(
            3,
            SwitchLogEvent {
                slid: 10 + i,
                dlid: 2,
                sl: 5,
                time_stamp: u32::from(i),
            },
        );
    }
    let r = ask(&mut a, cc(GET, id::CONGESTION_LOG, 0, 0, &[]));
    assert_eq!(status(&r), 0);
    assert_eq!(r[32], 1, "LogType: switch");
    assert_eq!(r[34..36], 20u16.to_be_bytes(), "events since last read");
    assert_eq!(r[40 + 31], 1 << 3, "port 3 in the port map");
    assert_eq!(r[72..74], 29u16.to_be_bytes(), "most recent first: SLID 29");
    assert_eq!(r[76] >> 4, 5, "SL");
    assert_eq!(
        r[72 + 12 * 14..74 + 12 * 14],
        15u16.to_be_bytes(),
        "15 kept"
    );
    let r = ask(&mut a, cc(GET, id::CONGESTION_LOG, 0, 0, &[]));
    assert_eq!(r[34..36], [0, 0], "the counter starts again");
    assert_eq!(r[72..74], [0, 0]);
    let ts = ask(&mut a, cc(GET, id::TIME_STAMP, 0, 0, &[]));
    assert_eq!(
        ts[64..68],
        ((T0.0 / 1024) as u32).to_be_bytes(),
        "1.024 us units"
    );
}
