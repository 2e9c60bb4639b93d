//! Property and crafted-packet tests of the native packet codec (WF-01..WF-09):
//! every opcode round-trips with and without a GRH, no input makes `parse` panic,
//! the CRCs catch what they must catch (and mask what they must mask), and every
//! native `DropReason` reason is reachable with a packet crafted to hit exactly that check.

use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use transport::wire::bth::MAX_24;
use transport::wire::crc::{icrc_native, vcrc, ICRC_LEN, VCRC_LEN};
use transport::wire::ext::{AethRepr, NakCode};
use transport::wire::opcode::Opcode;
use transport::wire::packet::pad_for;
use transport::wire::{
    AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, DropReason, ExtHeaders,
    ExtKind, FethRepr, GrhRepr, LrhRepr, OpcodeInfo, PacketRepr, RdethRepr, RethRepr,
    TransportRepr, XrcethRepr, MAX_PAYLOAD,
};

const LRH: usize = LrhRepr::LEN;
const GRH: usize = GrhRepr::LEN;
const BTH: usize = BthRepr::LEN;

// ------------------------------------------------------------------ owned packet specs

/// An owned packet description (a `PacketRepr` borrows its payload).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    lrh: LrhRepr,
    grh: Option<GrhRepr>,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: Vec<u8>,
}

impl Spec {
    fn repr(&self) -> PacketRepr<'_> {
        PacketRepr {
            lrh: self.lrh,
            grh: self.grh,
            transport: TransportRepr {
                bth: self.bth,
                ext: self.ext,
                payload: &self.payload,
            },
        }
    }

    fn info(&self) -> &'static OpcodeInfo {
        self.bth.opcode.info()
    }

    /// Offset of the BTH.
    fn bth_at(&self) -> usize {
        LRH + if self.grh.is_some() { GRH } else { 0 }
    }

    /// Offset of the payload (end of the extension headers).
    fn payload_at(&self) -> usize {
        self.bth_at() + BTH + self.info().headers_len()
    }

    fn emit(&self) -> Vec<u8> {
        let r = self.repr();
        let mut buf = vec![0xa5; r.buffer_len()];
        let n = r.emit(&mut buf).expect("a generated spec is in range");
        assert_eq!(n, buf.len());
        buf
    }

    fn with_parsed(p: &PacketRepr<'_>) -> Spec {
        Spec {
            lrh: p.lrh,
            grh: p.grh,
            bth: p.transport.bth,
            ext: p.transport.ext,
            payload: p.transport.payload.to_vec(),
        }
    }
}

/// Deterministic filler, so that a 4 KiB payload costs one strategy draw, not 4096.
fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn lrh_strategy() -> impl Strategy<Value = LrhRepr> {
    (0u8..16, 0u8..16, any::<u16>(), any::<u16>()).prop_map(|(vl, sl, dlid, slid)| LrhRepr {
        vl,
        sl,
        dlid,
        slid,
    })
}

fn grh_strategy() -> impl Strategy<Value = GrhRepr> {
    (
        any::<u8>(),
        0u32..=0xf_ffff,
        any::<u8>(),
        any::<[u8; 16]>(),
        any::<[u8; 16]>(),
    )
        .prop_map(
            |(traffic_class, flow_label, hop_limit, sgid, dgid)| GrhRepr {
                traffic_class,
                flow_label,
                hop_limit,
                sgid,
                dgid,
            },
        )
}

fn bth_strategy(opcode: Opcode) -> impl Strategy<Value = BthRepr> {
    (any::<[bool; 5]>(), any::<u16>(), 0..=MAX_24, 0..=MAX_24).prop_map(
        move |([solicited, mig_req, fecn, becn, ack_req], pkey, dest_qp, psn)| BthRepr {
            opcode,
            solicited,
            mig_req,
            pkey,
            fecn,
            becn,
            dest_qp,
            ack_req,
            psn,
        },
    )
}

fn syndrome_strategy() -> impl Strategy<Value = AethSyndrome> {
    prop_oneof![
        (0u8..32).prop_map(|credit_code| AethSyndrome::Ack { credit_code }),
        (0u8..32).prop_map(|timer_code| AethSyndrome::RnrNak { timer_code }),
        select(NakCode::ALL.to_vec()).prop_map(AethSyndrome::Nak),
    ]
}

/// Every extension header, with arbitrary in-range values.
fn all_ext_strategy() -> impl Strategy<Value = ExtHeaders> {
    (
        (0..=MAX_24, any::<u32>(), 0..=MAX_24, 0..=MAX_24),
        (any::<u64>(), any::<u32>(), any::<u32>()),
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
        (syndrome_strategy(), 0..=MAX_24, any::<u64>()),
        (any::<u32>(), any::<u32>(), 0u8..4, 0u8..16),
    )
        .prop_map(
            |(
                (ee_context, qkey, src_qp, xrc_srq),
                (va, rkey, dma_len),
                (ava, arkey, swap_add, compare),
                (syndrome, msn, orig_remote_data),
                (imm, ieth, selectivity, placement_type),
            )| ExtHeaders {
                rdeth: Some(RdethRepr { ee_context }),
                deth: Some(DethRepr { qkey, src_qp }),
                xrceth: Some(XrcethRepr { xrc_srq }),
                reth: Some(RethRepr { va, rkey, dma_len }),
                atomic_eth: Some(AtomicEthRepr {
                    va: ava,
                    rkey: arkey,
                    swap_add,
                    compare,
                }),
                aeth: Some(AethRepr { syndrome, msn }),
                atomic_ack_eth: Some(AtomicAckEthRepr { orig_remote_data }),
                imm_dt: Some(imm),
                ieth: Some(ieth),
                feth: Some(FethRepr {
                    selectivity,
                    placement_type,
                }),
                cnp: true,
            },
        )
}

/// Keeps exactly the headers `info`'s row lists.
fn restrict(all: ExtHeaders, info: &OpcodeInfo) -> ExtHeaders {
    fn keep<T>(v: Option<T>, on: bool) -> Option<T> {
        v.filter(|_| on)
    }
    ExtHeaders {
        rdeth: keep(all.rdeth, info.has(ExtKind::Rdeth)),
        deth: keep(all.deth, info.has(ExtKind::Deth)),
        xrceth: keep(all.xrceth, info.has(ExtKind::Xrceth)),
        reth: keep(all.reth, info.has(ExtKind::Reth)),
        atomic_eth: keep(all.atomic_eth, info.has(ExtKind::AtomicEth)),
        aeth: keep(all.aeth, info.has(ExtKind::Aeth)),
        atomic_ack_eth: keep(all.atomic_ack_eth, info.has(ExtKind::AtomicAckEth)),
        imm_dt: keep(all.imm_dt, info.has(ExtKind::ImmDt)),
        ieth: keep(all.ieth, info.has(ExtKind::Ieth)),
        feth: keep(all.feth, info.has(ExtKind::Feth)),
        cnp: info.has(ExtKind::CnpPad),
    }
}

/// A valid packet for `opcode`, with or without a GRH, payload up to `max_payload`
/// bytes when the row allows a payload.
fn spec_strategy(opcode: Opcode, grh: bool, max_payload: usize) -> BoxedStrategy<Spec> {
    let info = opcode.info();
    let max = if info.payload { max_payload } else { 0 };
    let grh_s = if grh {
        grh_strategy().prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    };
    (
        lrh_strategy(),
        grh_s,
        bth_strategy(opcode),
        all_ext_strategy(),
        0..=max,
        any::<u64>(),
    )
        .prop_map(move |(lrh, grh, bth, ext, len, seed)| Spec {
            lrh,
            grh,
            bth,
            ext: restrict(ext, info),
            payload: fill(len, seed),
        })
        .boxed()
}

/// A valid packet of any opcode, with or without a GRH.
fn any_spec(max_payload: usize) -> BoxedStrategy<Spec> {
    (select(Opcode::all().collect::<Vec<_>>()), any::<bool>())
        .prop_flat_map(move |(op, grh)| spec_strategy(op, grh, max_payload))
        .boxed()
}

fn cfg(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------------------------ CRC fix-ups

fn be16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Recomputes the VCRC (last 2 bytes, little-endian) over everything before it.
fn fix_vcrc(buf: &mut [u8]) {
    let n = buf.len() - VCRC_LEN;
    let v = vcrc(&buf[..n]);
    buf[n..].copy_from_slice(&v.to_le_bytes());
}

/// Recomputes the ICRC (4 bytes before the VCRC) and then the VCRC.
fn fix_icrc_vcrc(buf: &mut [u8], has_grh: bool) {
    let icrc_at = buf.len() - VCRC_LEN - ICRC_LEN;
    let c = icrc_native(&buf[..icrc_at], has_grh);
    buf[icrc_at..icrc_at + ICRC_LEN].copy_from_slice(&c.to_le_bytes());
    fix_vcrc(buf);
}

/// Makes a packet of `body` (LRH up to the ICRC, exclusive, a multiple of 4 bytes and
/// at least the LRH): sets LRH:PktLen and, with a GRH, GRH:PayLen to fit, then
/// appends the ICRC (zero when the body is too short to hold the headers the ICRC
/// masks) and the VCRC.
fn seal(body: &[u8], has_grh: bool) -> Vec<u8> {
    assert!(body.len() >= LRH && body.len().is_multiple_of(4));
    let mut b = body.to_vec();
    let words = ((b.len() + ICRC_LEN) / 4) as u16;
    b[4..6].copy_from_slice(&words.to_be_bytes());
    if has_grh && b.len() >= LRH + 6 {
        let pay_len = (b.len() + ICRC_LEN).saturating_sub(LRH + GRH) as u16;
        b[LRH + 4..LRH + 6].copy_from_slice(&pay_len.to_be_bytes());
    }
    let hdr = LRH + if has_grh { GRH } else { 0 } + BTH;
    let icrc = if b.len() >= hdr {
        icrc_native(&b, has_grh)
    } else {
        0
    };
    b.extend_from_slice(&icrc.to_le_bytes());
    b.extend_from_slice(&[0, 0]);
    fix_vcrc(&mut b);
    b
}

/// Everything from the LRH up to the ICRC (exclusive).
fn body_of(pkt: &[u8]) -> &[u8] {
    &pkt[..pkt.len() - ICRC_LEN - VCRC_LEN]
}

/// Recomputes whichever CRCs the (possibly damaged) LRH lets us recompute, leaving
/// PktLen as it is: makes random damage reach the checks behind the CRCs.
fn reseal_in_place(buf: &mut [u8]) {
    if buf.len() < LRH + VCRC_LEN {
        return;
    }
    let has_grh = buf[1] & 3 == 3;
    let hdr = LRH + if has_grh { GRH } else { 0 } + BTH;
    if buf.len() >= hdr + ICRC_LEN + VCRC_LEN {
        fix_icrc_vcrc(buf, has_grh);
    } else {
        fix_vcrc(buf);
    }
}

// ------------------------------------------------------------------ WF-01..08: round trip

fn check_round_trip(s: &Spec) -> Result<(), TestCaseError> {
    let r = s.repr();
    let n = r.buffer_len();
    let mut buf = vec![0x5a; n + 7];
    let written = r
        .emit(&mut buf)
        .map_err(|e| TestCaseError::fail(format!("emit: {e}")))?;
    prop_assert_eq!(written, n, "emit length == buffer_len");
    prop_assert!(buf[n..].iter().all(|&b| b == 0x5a), "wrote past buffer_len");
    let pkt = &buf[..n];

    // Sizes: LRH [GRH] BTH ext payload pad ICRC VCRC.
    let pad = pad_for(s.payload.len());
    let hdr = s.payload_at();
    prop_assert_eq!(n, hdr + s.payload.len() + pad + ICRC_LEN + VCRC_LEN);
    prop_assert_eq!((n - VCRC_LEN) % 4, 0);
    // LRH: LVer 0, LNH, PktLen in words LRH..ICRC, reserved bits 0.
    prop_assert_eq!(pkt[0], s.lrh.vl << 4);
    let lnh = if s.grh.is_some() { 3 } else { 2 };
    prop_assert_eq!(pkt[1], (s.lrh.sl << 4) | lnh);
    prop_assert_eq!(usize::from(be16_at(pkt, 4)), (n - VCRC_LEN) / 4);
    if s.grh.is_some() {
        prop_assert_eq!(pkt[LRH] >> 4, 6, "IPVer");
        prop_assert_eq!(pkt[LRH + 6], 0x1b, "NxtHdr");
        prop_assert_eq!(
            usize::from(be16_at(pkt, LRH + 4)),
            n - VCRC_LEN - LRH - GRH,
            "GRH:PayLen"
        );
    }
    // BTH: PadCnt, TVer 0, reserved bits 0 (WF-03, WF-08).
    let b = s.bth_at();
    prop_assert_eq!(pkt[b], s.bth.opcode.as_u8());
    prop_assert_eq!(usize::from((pkt[b + 1] >> 4) & 3), pad, "PadCnt");
    prop_assert_eq!(pkt[b + 1] & 0xf, 0, "TVer");
    prop_assert_eq!(pkt[b + 4] & 0x3f, 0, "Resv6");
    prop_assert_eq!(pkt[b + 8] & 0x7f, 0, "Resv7");
    // Payload in place, pad zero.
    prop_assert_eq!(&pkt[hdr..hdr + s.payload.len()], &s.payload[..]);
    let pad_at = hdr + s.payload.len();
    prop_assert!(pkt[pad_at..pad_at + pad].iter().all(|&x| x == 0), "pad");
    // CRCs.
    let icrc_at = n - VCRC_LEN - ICRC_LEN;
    prop_assert_eq!(
        &pkt[icrc_at..icrc_at + ICRC_LEN],
        &icrc_native(&pkt[..icrc_at], s.grh.is_some()).to_le_bytes()[..]
    );
    prop_assert_eq!(
        &pkt[n - VCRC_LEN..],
        &vcrc(&pkt[..n - VCRC_LEN]).to_le_bytes()[..]
    );

    let parsed = PacketRepr::parse(pkt).map_err(|e| TestCaseError::fail(format!("parse: {e}")))?;
    prop_assert_eq!(parsed, r);
    Ok(())
}

#[test]
fn wf_01_wf_02_wf_03_wf_04_wf_05_wf_06_wf_07_wf_08_every_opcode_round_trips_with_and_without_grh() {
    for op in Opcode::all() {
        for grh in [false, true] {
            let mut runner = TestRunner::new(Config {
                cases: 40,
                failure_persistence: None,
                ..Config::default()
            });
            let strat = spec_strategy(op, grh, MAX_PAYLOAD);
            if let Err(e) = runner.run(&strat, |s| check_round_trip(&s)) {
                panic!("{op:?} grh={grh}: {e}");
            }
        }
    }
}

#[test]
fn wf_08_pad_count_for_every_payload_length_modulo_4() {
    for len in [0, 1, 2, 3, 4, 5, 6, 7, 4093, 4094, 4095, 4096] {
        let s = craft(Opcode::RC_SEND_ONLY, false, len);
        let pkt = s.emit();
        let pad = (pkt[LRH + 1] >> 4) & 3;
        assert_eq!(usize::from(pad), (4 - len % 4) % 4, "len {len}");
        let p = PacketRepr::parse(&pkt).unwrap();
        assert_eq!(
            p.transport.payload,
            &s.payload[..],
            "pad stripped, len {len}"
        );
    }
}

// ------------------------------------------------------------------ WF-09: robustness

/// Parses and, on success, checks that the result re-emits and re-parses to itself.
fn parse_is_sound(buf: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(p) = PacketRepr::parse(buf) {
        let s = Spec::with_parsed(&p);
        let again = s.emit();
        let q = PacketRepr::parse(&again)
            .map_err(|e| TestCaseError::fail(format!("re-parse of a parsed packet: {e}")))?;
        prop_assert_eq!(q, p);
    }
    Ok(())
}

proptest! {
    #![proptest_config(cfg(1024))]

    #[test]
    fn wf_09_arbitrary_bytes_never_panic(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..9000),
        lnh in 0u8..4,
    ) {
        parse_is_sound(&bytes)?;
        // The same bytes with PktLen, LVer, LNH and both CRCs made consistent, so that
        // they get past the link checks and into the GRH and transport parsers.
        let n = bytes.len().min(2047 * 4 + VCRC_LEN);
        if n >= LRH + VCRC_LEN && (n - VCRC_LEN).is_multiple_of(4) {
            bytes.truncate(n);
            bytes[0] &= 0xf0;
            bytes[1] = (bytes[1] & 0xfc) | lnh;
            let words = ((n - VCRC_LEN) / 4) as u16;
            bytes[4..6].copy_from_slice(&words.to_be_bytes());
            if lnh == 3 && n >= LRH + GRH {
                bytes[LRH] = 0x60 | (bytes[LRH] & 0xf);
                bytes[LRH + 6] = 0x1b;
                let pay_len = (n - VCRC_LEN - LRH - GRH) as u16;
                bytes[LRH + 4..LRH + 6].copy_from_slice(&pay_len.to_be_bytes());
            }
            let tver_at = if lnh == 3 { LRH + GRH + 1 } else { LRH + 1 };
            if let Some(b) = bytes.get_mut(tver_at) {
                *b &= 0xf0;
            }
            reseal_in_place(&mut bytes);
            parse_is_sound(&bytes)?;
        }
    }
}

proptest! {
    #![proptest_config(cfg(128))]

    #[test]
    fn wf_09_every_truncation_of_a_valid_packet_fails_cleanly(s in any_spec(1024)) {
        let pkt = s.emit();
        prop_assert!(PacketRepr::parse(&pkt).is_ok());
        for k in 0..pkt.len() {
            let r = PacketRepr::parse(&pkt[..k]);
            let want = if k < LRH { DropReason::Truncated } else { DropReason::LengthMismatch };
            prop_assert_eq!(r, Err(want), "cut to {} bytes", k);
        }
        // Truncations with the length fields and CRCs made consistent again: the
        // parser must find the cut headers or the shortened payload.
        let body = body_of(&pkt);
        let hdr = s.payload_at();
        let pad = pad_for(s.payload.len());
        for cut in (LRH..=body.len()).step_by(4) {
            let t = seal(&body[..cut], s.grh.is_some());
            let r = PacketRepr::parse(&t);
            if cut < hdr {
                prop_assert_eq!(r, Err(DropReason::Truncated), "cut to {}", cut);
            } else if cut - hdr < pad {
                prop_assert_eq!(r, Err(DropReason::BadPadCount), "cut to {}", cut);
            } else {
                let p = r.map_err(|e| TestCaseError::fail(format!("cut to {cut}: {e}")))?;
                let mut want = s.clone();
                want.payload.truncate(cut - hdr - pad);
                prop_assert_eq!(Spec::with_parsed(&p), want);
            }
        }
    }

    #[test]
    fn wf_09_random_bit_flips_never_panic(
        s in any_spec(MAX_PAYLOAD),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..16),
    ) {
        let mut pkt = s.emit();
        for (i, bit) in &flips {
            let at = i.index(pkt.len());
            pkt[at] ^= 1 << bit;
        }
        // Raw damage: almost always the VCRC or the length check.
        parse_is_sound(&pkt)?;
        // Damage behind consistent CRCs: reaches every later check.
        reseal_in_place(&mut pkt);
        parse_is_sound(&pkt)?;
    }
}

// ------------------------------------------------------------------ WF-09: what the CRCs cover

/// Byte `at`, bit `bit`, within LRH:PktLen?
fn in_pkt_len(at: usize, bit: u8) -> bool {
    (at == 4 && bit < 3) || at == 5
}

/// Without fixing any CRC, every single-bit error is caught: as a length mismatch
/// when it hits PktLen, by the VCRC everywhere else (VCRC bytes included).
fn check_flip_caught(s: &Spec, pkt: &[u8], at: usize, bit: u8) -> Result<(), TestCaseError> {
    let mut p = pkt.to_vec();
    p[at] ^= 1 << bit;
    let want = if in_pkt_len(at, bit) {
        DropReason::LengthMismatch
    } else {
        DropReason::BadVcrc
    };
    prop_assert_eq!(
        PacketRepr::parse(&p),
        Err(want),
        "{:?} byte {} bit {}",
        s.bth.opcode,
        at,
        bit
    );
    Ok(())
}

/// What parse must say once bit `bit` of byte `at` (before the VCRC) is flipped and
/// the VCRC recomputed.
enum Expect {
    /// A specific drop reason.
    Fails(DropReason),
    /// Some drop, reason depending on the other bytes (an LNH flip re-frames the
    /// packet: a GRH appears or disappears).
    FailsSomehow,
    /// A variant field or a reserved bit: the ICRC does not cover it, and the packet
    /// parses to this.
    Parses(Box<Spec>),
}

fn expect_after_flip(s: &Spec, at: usize, bit: u8) -> Expect {
    use Expect::*;
    let g = s.grh.is_some();
    let m = 1u8 << bit;
    let bth = s.bth_at();
    let mut t = s.clone();
    // With a GRH the whole LRH is variant (7.8.1): a router rewrites it.
    let lrh_variant = |t: Spec| {
        if g {
            Parses(Box::new(t))
        } else {
            Fails(DropReason::BadIcrc)
        }
    };
    match at {
        0 if bit >= 4 => {
            t.lrh.vl ^= m >> 4; // VL: variant in every packet
            Parses(Box::new(t))
        }
        0 => Fails(DropReason::BadLver),
        1 if bit >= 4 => {
            t.lrh.sl ^= m >> 4;
            lrh_variant(t)
        }
        1 if bit >= 2 => lrh_variant(t), // reserved, ignored on receive
        1 if bit == 1 => Fails(DropReason::RawPacket), // LNH 2->0 or 3->1
        1 => FailsSomehow,               // LNH 2<->3
        2 | 3 => {
            t.lrh.dlid ^= u16::from(m) << (8 * (3 - at));
            lrh_variant(t)
        }
        4 | 5 if in_pkt_len(at, bit) => Fails(DropReason::LengthMismatch),
        4 => lrh_variant(t), // reserved bits before PktLen
        6 | 7 => {
            t.lrh.slid ^= u16::from(m) << (8 * (7 - at));
            lrh_variant(t)
        }
        _ if g && at < LRH + GRH => {
            let grh = t.grh.as_mut().expect("has a GRH");
            match at - LRH {
                0 if bit >= 4 => return Fails(DropReason::BadIpVer),
                0 => grh.traffic_class ^= m << 4,
                1 if bit >= 4 => grh.traffic_class ^= m >> 4,
                1 => grh.flow_label ^= u32::from(m) << 16,
                2 => grh.flow_label ^= u32::from(m) << 8,
                3 => grh.flow_label ^= u32::from(m),
                4 | 5 => return Fails(DropReason::LengthMismatch), // PayLen
                6 => return Fails(DropReason::BadNextHeader),
                7 => grh.hop_limit ^= m,
                _ => return Fails(DropReason::BadIcrc), // SGID, DGID
            }
            Parses(Box::new(t))
        }
        _ if at == bth + 4 => {
            // F, B, Resv6: the BTH's variant byte.
            match bit {
                7 => t.bth.fecn = !t.bth.fecn,
                6 => t.bth.becn = !t.bth.becn,
                _ => {}
            }
            Parses(Box::new(t))
        }
        // Rest of the BTH, extension headers, payload, pad, the ICRC itself.
        _ => Fails(DropReason::BadIcrc),
    }
}

fn check_flip_with_vcrc_fixed(
    s: &Spec,
    pkt: &[u8],
    at: usize,
    bit: u8,
) -> Result<(), TestCaseError> {
    let mut p = pkt.to_vec();
    p[at] ^= 1 << bit;
    fix_vcrc(&mut p);
    let r = PacketRepr::parse(&p);
    let op = s.bth.opcode;
    let g = s.grh.is_some();
    match expect_after_flip(s, at, bit) {
        Expect::Fails(d) => {
            prop_assert_eq!(r, Err(d), "{:?} grh={} byte {} bit {}", op, g, at, bit)
        }
        Expect::FailsSomehow => {
            prop_assert!(r.is_err(), "{:?} grh={} byte {} bit {}", op, g, at, bit)
        }
        Expect::Parses(want) => {
            let p = r.map_err(|e| {
                TestCaseError::fail(format!("{op:?} grh={g} byte {at} bit {bit}: {e}"))
            })?;
            prop_assert_eq!(
                Spec::with_parsed(&p),
                *want,
                "{:?} grh={} byte {} bit {}",
                op,
                g,
                at,
                bit
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cfg(64))]

    /// Small packets, every bit.
    #[test]
    fn wf_09_every_single_bit_flip_is_caught_and_the_icrc_masks_exactly_the_variant_fields(
        s in any_spec(40),
    ) {
        let pkt = s.emit();
        for at in 0..pkt.len() {
            for bit in 0..8 {
                check_flip_caught(&s, &pkt, at, bit)?;
                if at < pkt.len() - VCRC_LEN {
                    check_flip_with_vcrc_fixed(&s, &pkt, at, bit)?;
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(cfg(1024))]

    /// Packets up to the largest payload, one random bit each, biased to the headers.
    #[test]
    fn wf_09_a_single_bit_flip_anywhere_in_a_large_packet_is_caught(
        s in any_spec(MAX_PAYLOAD),
        i in any::<prop::sample::Index>(),
        head in any::<bool>(),
        bit in 0u8..8,
    ) {
        let pkt = s.emit();
        let at = if head { i.index(s.payload_at() + 4) } else { i.index(pkt.len()) };
        check_flip_caught(&s, &pkt, at, bit)?;
        if at < pkt.len() - VCRC_LEN {
            check_flip_with_vcrc_fixed(&s, &pkt, at, bit)?;
        }
    }
}

// ------------------------------------------------------------------ crafted drops

/// A packet with fixed, recognisable field values.
fn craft(op: Opcode, grh: bool, payload_len: usize) -> Spec {
    let info = op.info();
    let all = ExtHeaders {
        rdeth: Some(RdethRepr {
            ee_context: 0x0a_0b0c,
        }),
        deth: Some(DethRepr {
            qkey: 0x1111_2222,
            src_qp: 0x33_4455,
        }),
        xrceth: Some(XrcethRepr { xrc_srq: 0x00_0777 }),
        reth: Some(RethRepr {
            va: 0x1000_2000_3000_4000,
            rkey: 0x5566_7788,
            dma_len: payload_len as u32,
        }),
        atomic_eth: Some(AtomicEthRepr {
            va: 0x8000,
            rkey: 0x99,
            swap_add: 1,
            compare: 2,
        }),
        aeth: Some(AethRepr {
            syndrome: AethSyndrome::Ack { credit_code: 31 },
            msn: 0x12_3456,
        }),
        atomic_ack_eth: Some(AtomicAckEthRepr {
            orig_remote_data: 42,
        }),
        imm_dt: Some(0xdead_beef),
        ieth: Some(0x0bad_cafe),
        feth: Some(FethRepr {
            selectivity: 1,
            placement_type: 2,
        }),
        cnp: true,
    };
    Spec {
        lrh: LrhRepr {
            vl: 1,
            sl: 2,
            dlid: 0x0011,
            slid: 0x0022,
        },
        grh: grh.then_some(GrhRepr {
            traffic_class: 0x40,
            flow_label: 0x1_2345,
            hop_limit: 64,
            sgid: [0xfe; 16],
            dgid: [0x80; 16],
        }),
        bth: BthRepr {
            opcode: op,
            solicited: false,
            mig_req: true,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0x00_0102,
            ack_req: true,
            psn: 0x00_0304,
        },
        ext: restrict(all, info),
        payload: if info.payload {
            fill(payload_len, 7)
        } else {
            Vec::new()
        },
    }
}

/// Emits `s`, lets `patch` change bytes of the body (LRH up to the ICRC), then
/// recomputes both CRCs (but not the length fields).
fn patched(s: &Spec, patch: impl FnOnce(&mut [u8])) -> Vec<u8> {
    let mut pkt = s.emit();
    let n = pkt.len() - ICRC_LEN - VCRC_LEN;
    patch(&mut pkt[..n]);
    fix_icrc_vcrc(&mut pkt, s.grh.is_some());
    pkt
}

struct Case {
    what: String,
    pkt: Vec<u8>,
    want: DropReason,
}

/// Packets crafted so that one specific check fires.
fn crafted() -> Vec<Case> {
    let mut v = Vec::new();
    let mut add = |what: String, pkt: Vec<u8>, want: DropReason| v.push(Case { what, pkt, want });
    let send = |g| craft(Opcode::RC_SEND_ONLY, g, 13);

    for g in [false, true] {
        let s = send(g);
        let b = s.bth_at();
        // WF-01: LVer (checked by the link layer, before the ICRC).
        for lver in [1u8, 8, 15] {
            add(
                format!("LVer {lver} grh={g}"),
                patched(&s, |p| p[0] = (p[0] & 0xf0) | lver),
                DropReason::BadLver,
            );
        }
        // WF-01: LNH raw (0b00) and IPv6 raw (0b01).
        for lnh in [0u8, 1] {
            add(
                format!("LNH {lnh} grh={g}"),
                patched(&s, |p| p[1] = (p[1] & 0xfc) | lnh),
                DropReason::RawPacket,
            );
        }
        // WF-01: PktLen one word off (the buffer is as long as before).
        let pkt = s.emit();
        for delta in [-1i32, 1] {
            let mut p = pkt.clone();
            let w = (i32::from(be16_at(&p, 4)) + delta) as u16;
            p[4..6].copy_from_slice(&w.to_be_bytes());
            fix_vcrc(&mut p);
            add(
                format!("PktLen {delta:+} grh={g}"),
                p,
                DropReason::LengthMismatch,
            );
        }
        // ... and a buffer one word longer than PktLen says.
        let mut p = pkt.clone();
        p.extend_from_slice(&[0; 4]);
        add(
            format!("4 extra bytes grh={g}"),
            p,
            DropReason::LengthMismatch,
        );
        // WF-03: TVer (behind a good ICRC).
        for tver in [1u8, 15] {
            add(
                format!("TVer {tver} grh={g}"),
                patched(&s, |p| p[b + 1] = (p[b + 1] & 0xf0) | tver),
                DropReason::BadTver,
            );
        }
        // WF-04: every opcode the table does not define.
        for op in 0..=255u8 {
            if Opcode::from_u8(op).is_none() {
                add(
                    format!("opcode 0x{op:02x} grh={g}"),
                    patched(&s, |p| p[b] = op),
                    DropReason::UnknownOpcode,
                );
            }
        }
        // WF-04: payload on opcodes without payload.
        for op in [
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_ATOMIC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_REQUEST,
            Opcode::RC_COMPARE_SWAP,
            Opcode::RD_ACKNOWLEDGE,
            Opcode::XRC_ACKNOWLEDGE,
            Opcode::CNP,
        ] {
            let a = craft(op, g, 0);
            let mut body = body_of(&a.emit()).to_vec();
            body.extend_from_slice(&[1, 2, 3, 4]);
            add(
                format!("4 payload bytes on {op:?} grh={g}"),
                seal(&body, g),
                DropReason::LengthMismatch,
            );
        }
        // A payload over the largest PMTU.
        let mut body = body_of(&craft(Opcode::RC_SEND_ONLY, g, 4096).emit()).to_vec();
        body.extend_from_slice(&[0; 4]);
        add(
            format!("4100-byte payload grh={g}"),
            seal(&body, g),
            DropReason::LengthMismatch,
        );
        // WF-08: a pad count larger than the bytes after the headers, or any pad on
        // an opcode without payload.
        for (op, pad) in [
            (Opcode::RC_SEND_ONLY, 1u8),
            (Opcode::RC_SEND_ONLY, 3),
            (Opcode::UD_SEND_ONLY, 2),
            (Opcode::RC_ACKNOWLEDGE, 1),
            (Opcode::RC_RDMA_READ_REQUEST, 3),
            (Opcode::CNP, 2),
        ] {
            let e = craft(op, g, 0);
            let eb = e.bth_at();
            add(
                format!("PadCnt {pad} on empty {op:?} grh={g}"),
                patched(&e, |p| p[eb + 1] = (p[eb + 1] & 0xcf) | (pad << 4)),
                DropReason::BadPadCount,
            );
        }
        // WF-05: reserved AETH syndromes, wherever the AETH sits.
        for op in [
            Opcode::RC_ACKNOWLEDGE,
            Opcode::RC_RDMA_READ_RESPONSE_ONLY,
            Opcode::RD_ACKNOWLEDGE,
            Opcode::XRC_ATOMIC_ACKNOWLEDGE,
        ] {
            let a = craft(op, g, 8);
            let aeth_at = a.bth_at()
                + BTH
                + if a.info().has(ExtKind::Rdeth) {
                    ExtKind::Rdeth.len()
                } else {
                    0
                };
            for syn in 0..=255u8 {
                if AethSyndrome::from_u8(syn).is_none() {
                    add(
                        format!("AETH syndrome 0x{syn:02x} on {op:?} grh={g}"),
                        patched(&a, |p| p[aeth_at] = syn),
                        DropReason::ReservedSyndrome,
                    );
                }
            }
        }
        // WF-09: ICRC, with a good VCRC: damage in the ICRC, in the payload, in the
        // BTH, in an invariant LRH field of a local packet.
        let n = pkt.len();
        for at in [n - 6, n - 3, s.payload_at() + 2, b, b + 11, 16.min(b + 1)] {
            let mut p = pkt.clone();
            p[at] ^= 0x10;
            fix_vcrc(&mut p);
            add(format!("byte {at} flipped grh={g}"), p, DropReason::BadIcrc);
        }
        if !g {
            let mut p = pkt.clone();
            p[2] ^= 0x01; // DLID
            fix_vcrc(&mut p);
            add("DLID flipped, no GRH".into(), p, DropReason::BadIcrc);
        }
        // WF-09: VCRC.
        for at in [n - 2, n - 1, 0, 7, s.payload_at()] {
            let mut p = pkt.clone();
            p[at] ^= 0x80;
            add(
                format!("byte {at} flipped raw grh={g}"),
                p,
                DropReason::BadVcrc,
            );
        }
        // Truncated: the buffer, the GRH, the BTH, the extension headers.
        for n in 0..LRH {
            add(
                format!("{n} bytes"),
                pkt[..n].to_vec(),
                DropReason::Truncated,
            );
        }
        add(
            format!("LRH only grh={g}"),
            seal(&pkt[..LRH], g),
            DropReason::Truncated,
        );
        add(
            format!("LRH + 8 grh={g}"),
            seal(&pkt[..LRH + 8], g),
            DropReason::Truncated,
        );
        add(
            format!("BTH cut grh={g}"),
            seal(&pkt[..b + 8], g),
            DropReason::Truncated,
        );
        for op in [
            Opcode::RC_RDMA_WRITE_ONLY,
            Opcode::RD_SEND_ONLY,
            Opcode::RC_COMPARE_SWAP,
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE,
            Opcode::CNP,
        ] {
            let e = craft(op, g, 0);
            let ep = e.emit();
            let cut = e.payload_at() - 4;
            add(
                format!("extension headers of {op:?} cut grh={g}"),
                seal(&ep[..cut], g),
                DropReason::Truncated,
            );
        }
    }

    // WF-02: GRH IPVer, NxtHdr, PayLen (the LRH says GRH).
    let s = send(true);
    for ver in [0u8, 4, 7, 15] {
        add(
            format!("IPVer {ver}"),
            patched(&s, |p| p[LRH] = (ver << 4) | (p[LRH] & 0xf)),
            DropReason::BadIpVer,
        );
    }
    for nh in [0x00u8, 0x11, 0x1a, 0x1c, 0x3b, 0xff] {
        add(
            format!("NxtHdr 0x{nh:02x}"),
            patched(&s, |p| p[LRH + 6] = nh),
            DropReason::BadNextHeader,
        );
    }
    for delta in [-4i32, -1, 1, 4, 0x100] {
        add(
            format!("PayLen {delta:+}"),
            patched(&s, |p| {
                let v = (i32::from(be16_at(p, LRH + 4)) + delta) as u16;
                p[LRH + 4..LRH + 6].copy_from_slice(&v.to_be_bytes());
            }),
            DropReason::LengthMismatch,
        );
    }
    // The LRH says GRH, the packet has none (the BTH is read as a GRH).
    let local = craft(Opcode::RC_SEND_ONLY, false, 64);
    add(
        "LNH global without GRH".into(),
        patched(&local, |p| p[1] |= 3),
        DropReason::BadIpVer,
    );
    v
}

fn check_reason(want: DropReason) {
    let cases: Vec<Case> = crafted().into_iter().filter(|c| c.want == want).collect();
    assert!(!cases.is_empty(), "no crafted packet for {want:?}");
    for c in cases {
        assert_eq!(PacketRepr::parse(&c.pkt), Err(want), "{}", c.what);
    }
}

#[test]
fn wf_01_bad_lver_is_dropped() {
    check_reason(DropReason::BadLver);
}

#[test]
fn wf_01_raw_lnh_is_dropped() {
    check_reason(DropReason::RawPacket);
}

#[test]
fn wf_02_bad_ip_version_is_dropped() {
    check_reason(DropReason::BadIpVer);
}

#[test]
fn wf_02_bad_next_header_is_dropped() {
    check_reason(DropReason::BadNextHeader);
}

#[test]
fn wf_03_bad_tver_is_dropped() {
    check_reason(DropReason::BadTver);
}

#[test]
fn wf_04_unknown_opcodes_are_dropped() {
    check_reason(DropReason::UnknownOpcode);
}

#[test]
fn wf_01_wf_02_wf_04_length_mismatches_are_dropped() {
    check_reason(DropReason::LengthMismatch);
}

#[test]
fn wf_08_bad_pad_count_is_dropped() {
    check_reason(DropReason::BadPadCount);
}

#[test]
fn wf_05_reserved_aeth_syndromes_are_dropped() {
    check_reason(DropReason::ReservedSyndrome);
}

#[test]
fn wf_09_bad_icrc_is_dropped() {
    check_reason(DropReason::BadIcrc);
}

#[test]
fn wf_09_bad_vcrc_is_dropped() {
    check_reason(DropReason::BadVcrc);
}

#[test]
fn wf_01_wf_02_wf_03_wf_05_truncated_headers_are_dropped() {
    check_reason(DropReason::Truncated);
}

#[test]
fn wf_09_every_native_drop_reason_is_reached_by_a_crafted_packet() {
    let cases = crafted();
    for d in DropReason::ALL {
        if matches!(d, DropReason::NotRoce | DropReason::BadIpChecksum) {
            continue; // RoCEv2 only
        }
        assert!(cases.iter().any(|c| c.want == d), "{d:?} never reached");
    }
    for c in &cases {
        assert_eq!(PacketRepr::parse(&c.pkt), Err(c.want), "{}", c.what);
    }
}

#[test]
fn wf_05_every_defined_aeth_syndrome_round_trips_in_a_packet() {
    let a = craft(Opcode::RC_ACKNOWLEDGE, false, 0);
    for syn in 0..=255u8 {
        if let Some(sd) = AethSyndrome::from_u8(syn) {
            let mut s = a.clone();
            s.ext.aeth = Some(AethRepr {
                syndrome: sd,
                msn: 1,
            });
            let pkt = s.emit();
            assert_eq!(pkt[LRH + BTH], syn);
            let p = PacketRepr::parse(&pkt).unwrap();
            assert_eq!(Spec::with_parsed(&p), s);
        }
    }
}
