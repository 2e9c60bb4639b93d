//! A deterministic corpus of native packets for dissector cross-checks (WF-11) and
//! codec tests (WF-01..WF-09).
//!
//! Every opcode of the table ([`super::opcode::TABLE`]) appears with and without a
//! GRH; opcodes with a payload appear with payloads of 0, 1, 2, 3 and 4 bytes (every
//! pad count, 9.2.5) and of 4096 bytes (the largest PMTU, 7.7.8). Field values
//! walk the edges (PSN 0 and 0xFFFFFF, the permissive and multicast LIDs, P_Key
//! 0xFFFF and limited-member keys, every SL, every data VL) and mix in values from
//! a small LCG, so that two packets rarely share a value by accident. A final block
//! sends an RC ACKNOWLEDGE for every defined AETH syndrome (IBA Table 44).
//!
//! Each packet comes with the values a dissector should show, taken from the
//! `Repr`s it was built from, not from the emitted bytes.

use super::ext::{
    AethRepr, AethSyndrome, AtomicAckEthRepr, AtomicEthRepr, DethRepr, ExtHeaders, ExtKind,
    FethRepr, NakCode, RdethRepr, RethRepr, XrcethRepr,
};
use super::opcode::{Opcode, OpcodeInfo, Operation, TABLE};
use super::packet::{PacketRepr, TransportRepr};
use super::{BthRepr, GrhRepr, LrhRepr, MAX_PAYLOAD};

/// The values a packet was built with, as a dissector should report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// Opcode row name, for messages.
    pub name: &'static str,
    /// BTH:OpCode.
    pub opcode: u8,
    /// BTH:PSN.
    pub psn: u32,
    /// BTH:DestQP.
    pub dest_qp: u32,
    /// BTH:P_Key.
    pub pkey: u16,
    /// LRH:SLID.
    pub slid: u16,
    /// LRH:DLID.
    pub dlid: u16,
    /// LRH:SL.
    pub sl: u8,
    /// LRH:VL.
    pub vl: u8,
    /// LRH:PktLen in 4-byte words, LRH through ICRC (7.7.8).
    pub pkt_len: u16,
    /// Payload bytes, pad excluded.
    pub payload_len: usize,
    /// Whether a GRH follows the LRH.
    pub has_grh: bool,
    /// The GRH, when present.
    pub grh: Option<GrhRepr>,
    /// The BTH as built.
    pub bth: BthRepr,
    /// The extension headers as built (AETH syndrome, ImmDt, ...).
    pub ext: ExtHeaders,
}

/// One packet of the corpus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorpusPacket {
    /// The whole native packet, LRH through VCRC.
    pub bytes: Vec<u8>,
    /// The payload it carries.
    pub payload: Vec<u8>,
    /// What it should decode to.
    pub expected: Expected,
}

/// Payload lengths for opcodes that carry one: every pad count (9.2.5) and the
/// largest PMTU.
pub const PAYLOAD_LENS: [usize; 6] = [0, 1, 2, 3, 4, MAX_PAYLOAD];

/// First payload bytes of every packet. Wireshark's IB dissector guesses IPoIB when
/// payload bytes 2..4 (pad included) are zero and then reads bytes 0..2 as an
/// EtherType; that guess has no IBA meaning, so the corpus keeps byte 2 non-zero and
/// puts an unregistered EtherType (0x5AA5, or 0x5A00 for a 1-byte payload) in front,
/// so that the dissector shows the payload as data (WF-11).
const PAYLOAD_MARK: [u8; 4] = [0x5a, 0xa5, 0x5a, 0xa5];

/// A 64-bit LCG (Knuth's MMIX constants): deterministic and crate-free.
struct Lcg(u64);

impl Lcg {
    fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 32) as u32
    }
    fn next_u64(&mut self) -> u64 {
        (u64::from(self.next_u32()) << 32) | u64::from(self.next_u32())
    }
    fn bit(&mut self) -> bool {
        self.next_u32() & 0x100 != 0
    }
}

/// Edge values first, then LCG values: `n`-th value of a walk over `edges`.
fn pick_u32(n: usize, edges: &[u32], rng: &mut Lcg, mask: u32) -> u32 {
    let v = rng.next_u32() & mask;
    edges.get(n % (edges.len() * 2)).copied().unwrap_or(v)
}

const PSN_EDGES: [u32; 6] = [0, 0xff_ffff, 1, 0x7f_ffff, 0x80_0000, 0xff_fffe];
// DestQP 0 and 1 are the management QPs, whose payload is a MAD (IBA 13.4); a MAD
// is not what the corpus carries, so they appear only on opcodes without payload.
const QPN_EDGES: [u32; 5] = [0xff_ffff, 2, 0x12_3456, 0x80_0000, 0x00_0100];
const QPN_MGMT: [u32; 2] = [0, 1];
const PKEY_EDGES: [u32; 5] = [0xffff, 0x7fff, 0x8001, 0x0001, 0xabcd];
// Unicast LIDs 0x0001..=0xBFFF, multicast 0xC000..=0xFFFE, permissive 0xFFFF (4.1.3).
const LID_EDGES: [u32; 6] = [0x0001, 0xbfff, 0xffff, 0x0042, 0x1234, 0x0800];
const DLID_MCAST: [u32; 3] = [0xc000, 0xfffe, 0xc123];

/// Credit codes 0..=31, RNR timer codes 0..=31 and the five NAK codes: every
/// defined AETH syndrome (IBA Table 44).
pub fn all_aeth_syndromes() -> Vec<AethSyndrome> {
    let mut v: Vec<AethSyndrome> = (0..32)
        .map(|c| AethSyndrome::Ack { credit_code: c })
        .collect();
    v.extend((0..32).map(|t| AethSyndrome::RnrNak { timer_code: t }));
    v.extend(NakCode::ALL.iter().map(|c| AethSyndrome::Nak(*c)));
    v
}

struct Gen {
    rng: Lcg,
    n: usize,
    out: Vec<CorpusPacket>,
}

impl Gen {
    fn ext_for(&mut self, info: &OpcodeInfo, syndrome: Option<AethSyndrome>) -> ExtHeaders {
        let n = self.n;
        let rng = &mut self.rng;
        let mut h = ExtHeaders::default();
        for kind in info.headers {
            match kind {
                ExtKind::Rdeth => {
                    h.rdeth = Some(RdethRepr {
                        ee_context: pick_u32(n, &[0, 0xff_ffff, 7], rng, 0xff_ffff),
                    })
                }
                ExtKind::Deth => {
                    h.deth = Some(DethRepr {
                        // 0x8000_0000 and up are controlled Q_Keys (10.2.4).
                        qkey: pick_u32(n, &[0, 0xffff_ffff, 0x8001_0000, 0x1111_1111], rng, !0),
                        // SrcQP 0/1 would say the payload is a MAD (see QPN_EDGES).
                        src_qp: pick_u32(n, &[0xff_ffff, 2, 0x65_4321], rng, 0xff_ffff).max(2),
                    })
                }
                ExtKind::Xrceth => {
                    h.xrceth = Some(XrcethRepr {
                        xrc_srq: pick_u32(n, &[0, 0xff_ffff, 0x3c], rng, 0xff_ffff),
                    })
                }
                ExtKind::Reth => {
                    let va = match n % 5 {
                        0 => 0,
                        1 => u64::MAX,
                        2 => 0x7f00_dead_beef_0001,
                        _ => rng.next_u64(),
                    };
                    h.reth = Some(RethRepr {
                        va,
                        rkey: pick_u32(n, &[0, 0xffff_ffff, 0x1234_5678], rng, !0),
                        // 2^31 is the largest DMA length (C9-9).
                        dma_len: pick_u32(n, &[0, 4096, 0x8000_0000, 1, 8], rng, 0x7fff_ffff),
                    })
                }
                ExtKind::AtomicEth => {
                    h.atomic_eth = Some(AtomicEthRepr {
                        va: rng.next_u64() & !7, // atomics are 8-byte aligned (9.4.5)
                        rkey: rng.next_u32(),
                        swap_add: if n.is_multiple_of(3) {
                            u64::MAX
                        } else {
                            rng.next_u64()
                        },
                        compare: if n % 3 == 1 { 0 } else { rng.next_u64() },
                    })
                }
                ExtKind::Aeth => {
                    let all = all_aeth_syndromes();
                    let syndrome = syndrome.unwrap_or(all[n % all.len()]);
                    h.aeth = Some(AethRepr {
                        syndrome,
                        msn: pick_u32(n, &[0, 0xff_ffff, 1], rng, 0xff_ffff),
                    })
                }
                ExtKind::AtomicAckEth => {
                    h.atomic_ack_eth = Some(AtomicAckEthRepr {
                        orig_remote_data: if n.is_multiple_of(2) {
                            0
                        } else {
                            rng.next_u64()
                        },
                    })
                }
                ExtKind::ImmDt => {
                    h.imm_dt = Some(pick_u32(n, &[0, 0xffff_ffff, 0xdead_beef], rng, !0))
                }
                ExtKind::Ieth => h.ieth = Some(pick_u32(n, &[0, 0xffff_ffff], rng, !0)),
                ExtKind::Feth => {
                    h.feth = Some(FethRepr {
                        selectivity: (n % 4) as u8,
                        placement_type: ((n / 4) % 16) as u8,
                    })
                }
                ExtKind::CnpPad => h.cnp = true,
            }
        }
        h
    }

    fn push(
        &mut self,
        info: &'static OpcodeInfo,
        has_grh: bool,
        payload_len: usize,
        syndrome: Option<AethSyndrome>,
    ) {
        let n = self.n;
        let Some(opcode) = Opcode::from_u8(info.opcode) else {
            return; // cannot happen: the row comes from the table
        };
        let payload: Vec<u8> = (0..payload_len)
            .map(|i| {
                PAYLOAD_MARK
                    .get(i)
                    .copied()
                    .unwrap_or(self.rng.next_u32() as u8)
            })
            .collect();
        let qpn_edges: &[u32] = if !info.payload && n % 7 == 3 {
            &QPN_MGMT
        } else {
            &QPN_EDGES
        };
        let rng = &mut self.rng;
        let dest_qp = pick_u32(n, qpn_edges, rng, 0xff_ffff);
        // Keep DestQP off 0/1 for payload-carrying opcodes: those QPs only carry
        // MADs.
        let dest_qp = if info.payload && dest_qp < 2 {
            dest_qp + 2
        } else {
            dest_qp
        };
        let dlid_edges: &[u32] = if n % 11 == 5 { &DLID_MCAST } else { &LID_EDGES };
        let lrh = LrhRepr {
            // Data VLs 0..=14; VL15 is reserved for subnet management (7.6.4).
            vl: (n % 15) as u8,
            sl: ((n / 3) % 16) as u8,
            dlid: pick_u32(n, dlid_edges, rng, 0xbfff) as u16,
            slid: pick_u32(n + 1, &LID_EDGES, rng, 0xbfff) as u16,
        };
        let grh = has_grh.then(|| {
            let mut sgid = [0u8; 16];
            let mut dgid = [0u8; 16];
            // Link-local and global prefixes (8.3.3), then LCG GUIDs.
            sgid[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
            dgid[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
            sgid[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
            dgid[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
            GrhRepr {
                traffic_class: (n * 37) as u8,
                flow_label: pick_u32(n, &[0, 0xf_ffff, 1], rng, 0xf_ffff),
                hop_limit: if n.is_multiple_of(2) {
                    0xff
                } else {
                    (n % 64) as u8
                },
                sgid,
                dgid,
            }
        });
        let bth = BthRepr {
            opcode,
            solicited: rng.bit(),
            mig_req: rng.bit(),
            pkey: pick_u32(n, &PKEY_EDGES, rng, 0xffff) as u16,
            fecn: rng.bit(),
            becn: rng.bit(),
            dest_qp,
            ack_req: rng.bit(),
            psn: pick_u32(n, &PSN_EDGES, rng, 0xff_ffff),
        };
        let ext = self.ext_for(info, syndrome);
        let repr = PacketRepr {
            lrh,
            grh,
            transport: TransportRepr {
                bth,
                ext,
                payload: &payload,
            },
        };
        let mut bytes = vec![0u8; repr.buffer_len()];
        // The corpus is built from values the table and the ranges above allow, so
        // an emit error is a bug in the codec or here; skip the packet rather than
        // panic in library code, and let the tests notice the missing coverage.
        let Ok(len) = repr.emit(&mut bytes) else {
            self.n += 1;
            return;
        };
        bytes.truncate(len);
        let pkt_len = ((len - super::crc::VCRC_LEN) / 4) as u16;
        self.out.push(CorpusPacket {
            expected: Expected {
                name: info.name,
                opcode: info.opcode,
                psn: bth.psn,
                dest_qp,
                pkey: bth.pkey,
                slid: lrh.slid,
                dlid: lrh.dlid,
                sl: lrh.sl,
                vl: lrh.vl,
                pkt_len,
                payload_len,
                has_grh,
                grh,
                bth,
                ext,
            },
            bytes,
            payload,
        });
        self.n += 1;
    }
}

/// Builds the corpus. Deterministic: every call returns the same packets.
pub fn corpus() -> Vec<CorpusPacket> {
    let mut g = Gen {
        rng: Lcg(0x5eed_0b5e_55ed_1b0b),
        n: 0,
        out: Vec::new(),
    };
    for info in TABLE {
        for has_grh in [false, true] {
            let lens: &[usize] = if info.payload { &PAYLOAD_LENS } else { &[0] };
            for &len in lens {
                // READ responses normally carry an ACK syndrome; the other AETH
                // kinds are covered below and by the walk in `ext_for`.
                let syndrome = (info.operation == Operation::RdmaReadResponse)
                    .then_some(AethSyndrome::Ack { credit_code: 31 });
                g.push(info, has_grh, len, syndrome);
            }
        }
    }
    let ack = Opcode::RC_ACKNOWLEDGE.info();
    for (i, s) in all_aeth_syndromes().into_iter().enumerate() {
        g.push(ack, i % 2 == 1, 0, Some(s));
    }
    g.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wf_11_corpus_covers_every_opcode_grh_and_payload_length() {
        let c = corpus();
        for info in TABLE {
            for grh in [false, true] {
                let lens: &[usize] = if info.payload { &PAYLOAD_LENS } else { &[0] };
                for &len in lens {
                    assert!(
                        c.iter().any(|p| p.expected.opcode == info.opcode
                            && p.expected.has_grh == grh
                            && p.expected.payload_len == len),
                        "{} grh={grh} len={len} missing",
                        info.name
                    );
                }
            }
        }
        for s in all_aeth_syndromes() {
            assert!(c
                .iter()
                .any(|p| p.expected.ext.aeth.map(|a| a.syndrome) == Some(s)));
        }
        for psn in [0, 0xff_ffff] {
            assert!(c.iter().any(|p| p.expected.psn == psn));
        }
        assert_eq!(corpus(), c, "deterministic");
    }

    #[test]
    fn wf_09_corpus_packets_parse_back_to_their_values() {
        for p in corpus() {
            let e = &p.expected;
            let r = PacketRepr::parse(&p.bytes).unwrap_or_else(|d| panic!("{}: {d}", e.name));
            assert_eq!(r.transport.bth, e.bth, "{}", e.name);
            assert_eq!(r.transport.ext, e.ext, "{}", e.name);
            assert_eq!(r.transport.payload, &p.payload[..], "{}", e.name);
            assert_eq!(r.grh, e.grh, "{}", e.name);
            assert_eq!(
                (r.lrh.slid, r.lrh.dlid, r.lrh.sl, r.lrh.vl),
                (e.slid, e.dlid, e.sl, e.vl)
            );
            assert_eq!(usize::from(e.pkt_len) * 4 + 2, p.bytes.len());
        }
    }
}
