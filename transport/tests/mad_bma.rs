//! The Baseboard Management Agent (issue 26 item 1; AD-12, IBA 16.2): BKeyInfo
//! Get/Set, the B_Key check and its lease, and the status every baseboard
//! command gets on a virtual HCA. Assertions are on the MAD bytes (libibmad's
//! layout: B_Key at 24, attribute data at 64).

use transport::mad::bma::{bm_attr, Bma, BmaDrop, CLASS_BM};
use transport::mad::MAD_LEN;
use transport::verbs::Time;

const T0: Time = Time(5_000_000_000);
const KEY: u64 = 0x0b0b_0000_cafe_0001;
const BAD: u64 = 0xbad;

/// A BM MAD: `method`, attribute, modifier, the B_Key, attribute data.
fn bm(method: u8, attr: u16, modifier: u32, bkey: u64, data: &[u8]) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    m[0] = 1;
    m[1] = CLASS_BM;
    m[2] = 1;
    m[3] = method;
    m[8..16].copy_from_slice(&0x1234_5678_9abc_def0u64.to_be_bytes());
    m[16..18].copy_from_slice(&attr.to_be_bytes());
    m[20..24].copy_from_slice(&modifier.to_be_bytes());
    m[24..32].copy_from_slice(&bkey.to_be_bytes());
    m[64..64 + data.len()].copy_from_slice(data);
    m
}

/// BKeyInfo's bytes: B_Key, protect bit, lease period, violations.
fn bkey_info(bkey: u64, protect: bool, lease: u16, violations: u16) -> [u8; 14] {
    let mut d = [0u8; 14];
    d[0..8].copy_from_slice(&bkey.to_be_bytes());
    d[8] = if protect { 0x80 } else { 0 };
    d[10..12].copy_from_slice(&lease.to_be_bytes());
    d[12..14].copy_from_slice(&violations.to_be_bytes());
    d
}

fn status(r: &[u8; MAD_LEN]) -> u16 {
    u16::from_be_bytes([r[4], r[5]])
}

fn get(b: &mut Bma, key: u64, now: Time) -> Box<[u8; MAD_LEN]> {
    b.handle_mad(&bm(0x01, bm_attr::BKEY_INFO, 0, key, &[]), now)
        .expect("a BMGetResp")
}

fn set(b: &mut Bma, key: u64, info: [u8; 14], now: Time) -> Option<Box<[u8; MAD_LEN]>> {
    b.handle_mad(&bm(0x02, bm_attr::BKEY_INFO, 0, key, &info), now)
}

/// A BMA whose manager set B_Key `KEY` with the protect bit and lease given.
fn protected(protect: bool, lease: u16) -> Bma {
    let mut b = Bma::new();
    let r = set(&mut b, 0, bkey_info(KEY, protect, lease, 0), T0).expect("a response");
    assert_eq!(status(&r), 0);
    b
}

#[test]
fn ad_12_bkeyinfo_get_and_set_on_the_wire() {
    let mut b = Bma::new();
    let r = get(&mut b, 0, T0);
    assert_eq!(&r[0..4], &[1, CLASS_BM, 1, 0x81], "BMGetResp");
    assert_eq!(status(&r), 0);
    assert_eq!(&r[8..18], &bm(0x01, bm_attr::BKEY_INFO, 0, 0, &[])[8..18]);
    assert_eq!(&r[64..78], &[0; 14], "no B_Key yet");
    // A Set with B_Key 0 on the port (anyone may) takes the key; the response
    // carries BKeyInfo as it now is.
    let r = set(&mut b, 0, bkey_info(KEY, true, 5, 0), T0).unwrap();
    assert_eq!(r[3], 0x81);
    assert_eq!(status(&r), 0);
    assert_eq!(&r[64..78], &bkey_info(KEY, true, 5, 0));
    assert!(r[78..].iter().all(|&x| x == 0));
    let r = get(&mut b, KEY, T0);
    assert_eq!(&r[64..78], &bkey_info(KEY, true, 5, 0));
    // A modifier other than 0 is an invalid field.
    let r = b
        .handle_mad(&bm(0x01, bm_attr::BKEY_INFO, 7, KEY, &[]), T0)
        .unwrap();
    assert_eq!(status(&r), 0x001c);
}

#[test]
fn ad_12_bkey_protect_bit_hides_the_key_from_a_get() {
    let mut b = protected(true, 0);
    let r = get(&mut b, BAD, T0);
    assert_eq!(status(&r), 0, "a Get is answered");
    assert_eq!(&r[64..78], &bkey_info(0, true, 0, 0), "B_Key read as 0");
    // Unprotected, a Get with any key reads the key; no violation either way.
    let mut b = protected(false, 0);
    let r = get(&mut b, BAD, T0);
    assert_eq!(&r[64..78], &bkey_info(KEY, false, 0, 0));
    assert_eq!(b.bkey_info().violations, 0);
}

#[test]
fn ad_12_bkey_mismatch_on_set_or_send_gets_no_response_and_counts() {
    let mut b = protected(true, 0);
    assert!(set(&mut b, BAD, bkey_info(BAD, false, 0, 0), T0).is_none());
    let send = bm(0x03, bm_attr::WRITE_VPD, 0, BAD, &[]);
    assert!(b.handle_mad(&send, T0).is_none());
    assert_eq!(b.counters().drops(BmaDrop::BadBkey), 2);
    let r = get(&mut b, KEY, T0);
    assert_eq!(&r[64..78], &bkey_info(KEY, true, 0, 2), "B_KeyViolations 2");
    // B_KeyViolations is read-only: a Set with the key leaves it.
    let r = set(&mut b, KEY, bkey_info(KEY, true, 0, 0), T0).unwrap();
    assert_eq!(&r[76..78], &2u16.to_be_bytes());
}

#[test]
fn ad_12_bkey_lease_expiry_clears_the_protect_bit() {
    let mut b = protected(true, 3);
    assert_eq!(b.poll_timeout(), None);
    assert!(set(&mut b, BAD, bkey_info(0, false, 0, 0), T0).is_none());
    let due = T0.plus_ns(3_000_000_000);
    assert_eq!(b.poll_timeout(), Some(due));
    // A later failure does not restart it.
    assert!(set(
        &mut b,
        BAD,
        bkey_info(0, false, 0, 0),
        T0.plus_ns(2_000_000_000)
    )
    .is_none());
    assert_eq!(b.poll_timeout(), Some(due));
    let r = get(&mut b, BAD, Time(due.0 - 1));
    assert_eq!(&r[64..72], &[0; 8], "still protected");
    b.handle_timeout(due);
    assert_eq!(b.counters().lease_expiries, 1);
    let r = get(&mut b, BAD, due);
    assert_eq!(&r[64..78], &bkey_info(KEY, false, 3, 2), "the key shows");
    // The key still guards a Set.
    assert!(set(&mut b, BAD, bkey_info(0, false, 0, 0), due).is_none());
}

#[test]
fn ad_12_a_matching_bkey_stops_the_lease() {
    let mut b = protected(true, 3);
    assert!(set(&mut b, BAD, bkey_info(0, false, 0, 0), T0).is_none());
    get(&mut b, KEY, T0.plus_ns(1_000_000_000));
    assert_eq!(b.poll_timeout(), None);
    let late = T0.plus_ns(10_000_000_000);
    b.handle_timeout(late);
    assert_eq!(b.counters().lease_expiries, 0);
    assert_eq!(&get(&mut b, BAD, late)[64..72], &[0; 8]);
}

#[test]
fn ad_12_baseboard_commands_a_virtual_hca_lacks_get_a_status() {
    let mut b = protected(true, 0);
    // Every BMSend command (WriteVPD 0x20 .. OEM 0x2F): a BMSend response (the
    // modifier's bit 0 set), UNSUPPORTED_METHOD_ATTR.
    for attr in bm_attr::WRITE_VPD..=bm_attr::OEM {
        let r = b.handle_mad(&bm(0x03, attr, 0, KEY, &[9; 8]), T0).unwrap();
        assert_eq!(r[3], 0x03, "attr {attr:#x}");
        assert_eq!(&r[20..24], &1u32.to_be_bytes());
        assert_eq!(status(&r), 0x000c);
        assert_eq!(&r[64..72], &[9; 8], "the request's data back");
    }
    // By Get, the same attributes and Notice: UNSUPPORTED_METHOD_ATTR.
    for attr in [bm_attr::NOTICE, 0x0021, 0x0050] {
        let r = b.handle_mad(&bm(0x01, attr, 0, KEY, &[]), T0).unwrap();
        assert_eq!((r[3], status(&r)), (0x81, 0x000c), "attr {attr:#x}");
    }
    // ClassPortInfo: Get answers the versions and RespTimeValue; Set refused.
    let r = b
        .handle_mad(&bm(0x01, bm_attr::CLASS_PORT_INFO, 0, KEY, &[]), T0)
        .unwrap();
    assert_eq!(status(&r), 0);
    assert_eq!(&r[64..72], &[1, 1, 0, 0, 0, 0, 0, 18]);
    let r = b
        .handle_mad(&bm(0x02, bm_attr::CLASS_PORT_INFO, 0, KEY, &[]), T0)
        .unwrap();
    assert_eq!(status(&r), 0x000c);
    // A method the class lacks (Report) and a bad class version.
    let r = b
        .handle_mad(&bm(0x06, bm_attr::BKEY_INFO, 0, KEY, &[]), T0)
        .unwrap();
    assert_eq!((r[3], status(&r)), (0x81, 0x0008));
    let mut v2 = bm(0x01, bm_attr::BKEY_INFO, 0, KEY, &[]);
    v2[2] = 2;
    assert_eq!(status(&b.handle_mad(&v2, T0).unwrap()), 0x0004);
}

#[test]
fn ad_12_bma_drops_what_gets_no_response_and_counts_it() {
    let mut b = Bma::new();
    let resp = bm(0x81, bm_attr::BKEY_INFO, 0, 0, &[]);
    let send_resp = bm(0x03, bm_attr::WRITE_VPD, 1, 0, &[]);
    let trap = bm(0x05, bm_attr::NOTICE, 0, 0, &[]);
    for m in [resp, send_resp, trap] {
        assert!(b.handle_mad(&m, T0).is_none());
    }
    assert_eq!(b.counters().drops(BmaDrop::Response), 3);
    assert!(b
        .handle_mad(&bm(0x07, bm_attr::NOTICE, 0, 0, &[]), T0)
        .is_none());
    assert_eq!(b.counters().drops(BmaDrop::UnmatchedRepress), 1);
    let mut perf = bm(0x01, 1, 0, 0, &[]);
    perf[1] = 0x04;
    assert!(b.handle_mad(&perf, T0).is_none());
    assert!(b.handle_mad(&perf[..100], T0).is_none());
    assert_eq!(b.counters().drops(BmaDrop::NotBm), 2);
    let mut v2 = trap;
    v2[0] = 2;
    v2[3] = 0x07;
    assert!(b.handle_mad(&v2, T0).is_none());
    assert_eq!(b.counters().drops(BmaDrop::BadVersion), 1);
}
