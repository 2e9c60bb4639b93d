//! A packet's headers kept to build the packets after it (issue 30).
//!
//! The MIDDLE packets of a message differ from one another only in BTH:PSN
//! and BTH:AckReq (IBA 9.2: same LRH, GRH, P_Key, destination QP, opcode
//! and, at the path MTU, length). Building each from a [`PacketRepr`] costs
//! ~450 instructions of header emission a packet; a [`HeaderTemplate`] holds
//! the bytes one build wrote and writes them again for a packet that
//! [`HeaderTemplate::matches`], patching those two fields.
//!
//! The headers [`PacketRepr::emit_with_crcs`] writes are a function of the
//! packet's repr, its payload length and the CRC choice alone, so a packet
//! equal to the template's in all of them but PSN and AckReq gets the bytes
//! a full build would write: the template is a cache of a pure function,
//! with nothing to invalidate. Debug builds check that on every use
//! (`debug_check`).
//!
//! [`ParseMemo`] is the same on the receive side: a native packet whose CRCs
//! its link vouches for is parsed from its header bytes and length alone
//! ([`PacketRepr::parse_vouched`]), so one whose bytes are the last parsed
//! packet's but for PSN and AckReq parses to the same repr with those two
//! fields read.

use super::bth::{Bth, BthRepr};
use super::crc::{ICRC_LEN, VCRC_LEN};
use super::grh::GrhRepr;
use super::lrh::LrhRepr;
use super::opcode::Position;
use super::packet::{fill_and_seal, EmitWithError, PacketRepr};
use super::{DropReason, EmitError};

/// Header bytes a template holds: LRH, GRH, BTH and the longest extension
/// headers a data packet carries (RDETH, DETH, RETH, ImmDt).
const MAX_HEAD: usize = LrhRepr::LEN + GrhRepr::LEN + BthRepr::LEN + 32;

/// The headers of one built packet ([`Self::capture`]) and what they were
/// built from.
#[derive(Debug, Clone)]
pub struct HeaderTemplate {
    /// The headers built from, PSN 0 and AckReq clear (the fields a use
    /// patches).
    key: PacketRepr<'static>,
    payload_len: usize,
    crcs: bool,
    head: [u8; MAX_HEAD],
    /// Where the payload starts (the headers' length).
    payload_at: usize,
}

/// Where the BTH starts in a native packet with or without a GRH.
fn bth_at(grh: bool) -> usize {
    LrhRepr::LEN + if grh { GrhRepr::LEN } else { 0 }
}

/// `pkt`'s headers: the repr without its payload, which is all the bytes
/// before the payload say.
fn headers_of(pkt: &PacketRepr<'_>) -> PacketRepr<'static> {
    PacketRepr {
        lrh: pkt.lrh,
        grh: pkt.grh,
        transport: super::TransportRepr {
            bth: pkt.transport.bth,
            ext: pkt.transport.ext,
            payload: &[],
        },
    }
}

/// `b` with the fields a template patches cleared.
fn unpatched(b: &BthRepr) -> BthRepr {
    BthRepr {
        psn: 0,
        ack_req: false,
        ..*b
    }
}

impl HeaderTemplate {
    /// The template of `pkt`, just built into `buf` by
    /// [`PacketRepr::emit_with_crcs`] with `payload_len` and `crcs`, which
    /// returned `len`; `None` for headers longer than a template holds or a
    /// repr that carried its payload.
    pub fn capture(
        pkt: &PacketRepr<'_>,
        payload_len: usize,
        crcs: bool,
        buf: &[u8],
        len: usize,
    ) -> Option<HeaderTemplate> {
        let payload_at = pkt.payload_at();
        if !pkt.transport.payload.is_empty() || payload_at > MAX_HEAD {
            return None;
        }
        let mut head = [0u8; MAX_HEAD];
        head[..payload_at].copy_from_slice(buf.get(..payload_at)?);
        let mut key = headers_of(pkt);
        key.transport.bth = unpatched(&pkt.transport.bth);
        let t = HeaderTemplate {
            key,
            payload_len,
            crcs,
            head,
            payload_at,
        };
        (buf.len() >= len && t.len() == len).then_some(t)
    }

    /// Where the ICRC goes: after the payload and its pad.
    fn hdr_end(&self) -> usize {
        self.payload_at + self.payload_len + super::packet::pad_for(self.payload_len)
    }

    /// The whole packet's length, LRH through VCRC.
    fn len(&self) -> usize {
        self.hdr_end() + ICRC_LEN + VCRC_LEN
    }

    /// Whether [`PacketRepr::emit_with_crcs`] would write this template's
    /// headers for `pkt`, `payload_len` and `crcs`, but for PSN and AckReq.
    pub fn matches(&self, pkt: &PacketRepr<'_>, payload_len: usize, crcs: bool) -> bool {
        payload_len == self.payload_len
            && crcs == self.crcs
            && pkt.transport.payload.is_empty()
            && pkt.lrh == self.key.lrh
            && unpatched(&pkt.transport.bth) == self.key.transport.bth
            && pkt.grh == self.key.grh
            && pkt.transport.ext == self.key.transport.ext
    }

    /// Builds `pkt`, which [`Self::matches`], into `buf` as
    /// [`PacketRepr::emit_with_crcs`] would: these headers with its PSN and
    /// AckReq, the payload written in place by `fill`, then the CRCs.
    pub fn emit_with<E>(
        &self,
        pkt: &PacketRepr<'_>,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<usize, EmitWithError<E>> {
        debug_assert!(self.matches(pkt, self.payload_len, self.crcs));
        // The one check of the full build the patched fields need.
        if pkt.transport.bth.psn > 0x00ff_ffff {
            return Err(EmitWithError::Emit(EmitError::FieldRange("BTH:PSN")));
        }
        let len = self.len();
        let buf = buf
            .get_mut(..len)
            .ok_or(EmitWithError::Emit(EmitError::BufferTooSmall))?;
        buf[..self.payload_at].copy_from_slice(&self.head[..self.payload_at]);
        let grh = self.key.grh.is_some();
        let mut bth = Bth::new_unchecked(&mut buf[bth_at(grh)..self.payload_at]);
        bth.set_ack_req(pkt.transport.bth.ack_req);
        bth.set_psn(pkt.transport.bth.psn);
        #[cfg(debug_assertions)]
        self.debug_check(pkt, buf);
        let (at, end) = (self.payload_at, self.hdr_end());
        fill_and_seal(buf, at, end, grh, self.payload_len, fill, self.crcs)?;
        Ok(len)
    }

    /// Debug builds: the headers written are those of a full build.
    #[cfg(debug_assertions)]
    fn debug_check(&self, pkt: &PacketRepr<'_>, built: &[u8]) {
        let mut full = vec![0u8; self.len()];
        let none = |_: &mut [u8]| Ok::<(), ()>(());
        let len = pkt.emit_with_crcs(&mut full, self.payload_len, none, false);
        assert_eq!(len, Ok(self.len()), "template length");
        let n = self.payload_at;
        assert_eq!(&built[..n], &full[..n], "template headers of {pkt:?}");
    }
}

/// The last packet [`ParseMemo::parse_vouched`] parsed in full.
#[derive(Debug, Clone, Copy)]
struct Parsed {
    head: [u8; MAX_HEAD],
    /// Where the payload starts (the headers' length).
    payload_at: usize,
    len: usize,
    payload_len: usize,
    /// The repr, its payload empty.
    pkt: PacketRepr<'static>,
}

/// Parses the native packets a link vouches the CRCs of, reusing the last
/// full parse for a packet with the same headers but for PSN and AckReq
/// (module docs).
#[derive(Debug, Clone, Default)]
pub struct ParseMemo {
    last: Option<Parsed>,
}

impl ParseMemo {
    /// [`PacketRepr::parse_vouched`] of `buf`.
    pub fn parse_vouched<'a>(&mut self, buf: &'a [u8]) -> Result<PacketRepr<'a>, DropReason> {
        if let Some(pkt) = self.last.as_ref().and_then(|p| p.reuse(buf)) {
            debug_assert_eq!(Ok(pkt), PacketRepr::parse_vouched(buf), "parse memo");
            return Ok(pkt);
        }
        let pkt = PacketRepr::parse_vouched(buf)?;
        // Only a MIDDLE packet is kept: the packets that repeat a header
        // are the middle of a message (an ACK carries a new MSN, a FIRST
        // packet a new RETH), and keeping costs a copy.
        if pkt.transport.bth.opcode.info().position == Position::Middle {
            self.last = Parsed::capture(&pkt, buf);
        }
        Ok(pkt)
    }
}

impl Parsed {
    fn capture(pkt: &PacketRepr<'_>, buf: &[u8]) -> Option<Parsed> {
        let payload_at = pkt.payload_at();
        let payload_len = pkt.transport.payload.len();
        let head = buf.get(..payload_at).filter(|_| payload_at <= MAX_HEAD)?;
        let mut h = [0u8; MAX_HEAD];
        h[..payload_at].copy_from_slice(head);
        Some(Parsed {
            head: h,
            payload_at,
            len: buf.len(),
            payload_len,
            pkt: headers_of(pkt),
        })
    }

    /// The parse of `buf` if its bytes are this packet's but for BTH:AckReq
    /// (the top bit of BTH byte 8; the rest of that byte is reserved and
    /// compared) and BTH:PSN (bytes 9-11).
    fn reuse<'a>(&self, buf: &'a [u8]) -> Option<PacketRepr<'a>> {
        // BTH byte 8: AckReq; the PSN follows.
        let (a, h) = (bth_at(self.pkt.grh.is_some()) + 8, &self.head);
        let same = buf.len() == self.len
            && buf.get(..a)? == &h[..a]
            && (buf[a] ^ h[a]) & 0x7f == 0
            && buf.get(a + 4..self.payload_at)? == &h[a + 4..self.payload_at];
        if !same {
            return None;
        }
        let mut pkt = self.pkt;
        let bth = &mut pkt.transport.bth;
        bth.ack_req = buf[a] & 0x80 != 0;
        bth.psn = u32::from_be_bytes([0, buf[a + 1], buf[a + 2], buf[a + 3]]);
        let payload = buf.get(self.payload_at..self.payload_at + self.payload_len)?;
        Some(PacketRepr {
            transport: super::TransportRepr {
                payload,
                ..pkt.transport
            },
            ..pkt
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::opcode::Opcode;
    use crate::wire::RethRepr;

    /// The headers of a packet of the codec tests' corpus
    /// (`wire::corpus`) with opcode `op`, with or without a GRH, at `psn`
    /// and `ack_req`.
    fn pkt(op: Opcode, psn: u32, ack_req: bool, grh: bool) -> PacketRepr<'static> {
        static HEADERS: std::sync::OnceLock<Vec<PacketRepr<'static>>> = std::sync::OnceLock::new();
        let all = HEADERS.get_or_init(|| {
            crate::wire::corpus::corpus()
                .iter()
                .filter_map(|c| PacketRepr::parse(&c.bytes).ok().map(|p| headers_of(&p)))
                .collect()
        });
        let mut p = *all
            .iter()
            .find(|p| p.transport.bth.opcode == op && p.grh.is_some() == grh)
            .expect("the corpus has every opcode with and without a GRH");
        p.transport.bth.psn = psn;
        p.transport.bth.ack_req = ack_req;
        p
    }

    fn full(p: &PacketRepr<'_>, n: usize, crcs: bool, byte: u8) -> Vec<u8> {
        let mut buf = vec![0xee; 4200];
        let fill = |d: &mut [u8]| -> Result<(), ()> {
            d.fill(byte);
            Ok(())
        };
        let len = p.emit_with_crcs(&mut buf, n, fill, crcs).unwrap();
        buf.truncate(len);
        buf
    }

    /// A templated packet is byte for byte the full build of the same packet,
    /// with and without GRH, CRCs and pad, whatever PSN and AckReq.
    #[test]
    fn templated_packets_are_the_full_build() {
        for grh in [false, true] {
            for crcs in [false, true] {
                for n in [4096, 256, 7] {
                    let first = pkt(Opcode::RC_RDMA_WRITE_MIDDLE, 5, false, grh);
                    let built = full(&first, n, crcs, 0x11);
                    let t = HeaderTemplate::capture(&first, n, crcs, &built, built.len()).unwrap();
                    for (psn, ack) in [(6, false), (0xff_ffff, true), (0, false)] {
                        let next = pkt(Opcode::RC_RDMA_WRITE_MIDDLE, psn, ack, grh);
                        assert!(t.matches(&next, n, crcs));
                        let mut buf = vec![0xee; 4200];
                        let fill = |d: &mut [u8]| -> Result<(), ()> {
                            d.fill(0x22);
                            Ok(())
                        };
                        let len = t.emit_with(&next, &mut buf, fill).unwrap();
                        assert_eq!(&buf[..len], &full(&next, n, crcs, 0x22)[..]);
                        let parsed = if crcs {
                            PacketRepr::parse(&buf[..len])
                        } else {
                            PacketRepr::parse_vouched(&buf[..len])
                        };
                        assert_eq!(parsed.unwrap().transport.bth.psn, psn);
                    }
                }
            }
        }
    }

    /// Anything else that differs is a miss: the template never writes
    /// headers of another packet.
    #[test]
    fn any_other_difference_misses() {
        let first = pkt(Opcode::RC_RDMA_WRITE_MIDDLE, 5, false, true);
        let built = full(&first, 4096, false, 0);
        let t = HeaderTemplate::capture(&first, 4096, false, &built, built.len()).unwrap();
        assert!(!t.matches(&first, 4095, false));
        assert!(!t.matches(&first, 4096, true));
        let mut p = first;
        p.lrh.dlid ^= 1;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.lrh.vl ^= 1;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.grh = None;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        if let Some(g) = p.grh.as_mut() {
            g.dgid[15] ^= 1;
        }
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.transport.bth.opcode = Opcode::RC_RDMA_WRITE_LAST;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.transport.bth.mig_req ^= true;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.transport.bth.pkey ^= 1;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.transport.bth.dest_qp ^= 1;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.transport.bth.fecn ^= true;
        assert!(!t.matches(&p, 4096, false));
        let mut p = first;
        p.transport.ext.reth = Some(RethRepr {
            va: 1,
            rkey: 2,
            dma_len: 3,
        });
        assert!(!t.matches(&p, 4096, false));
    }

    #[test]
    fn a_short_buffer_is_an_error_not_a_panic() {
        let first = pkt(Opcode::RC_SEND_MIDDLE, 1, false, false);
        let built = full(&first, 256, true, 0);
        let t = HeaderTemplate::capture(&first, 256, true, &built, built.len()).unwrap();
        let mut buf = vec![0; built.len() - 1];
        let r = t.emit_with(&first, &mut buf, |_| Ok::<(), ()>(()));
        assert_eq!(r, Err(EmitWithError::Emit(EmitError::BufferTooSmall)));
        // A PSN past 24 bits is refused as the full build refuses it.
        let mut big = first;
        big.transport.bth.psn = 1 << 24;
        let mut buf = vec![0; built.len()];
        let r = t.emit_with(&big, &mut buf, |_| Ok::<(), ()>(()));
        let full = big.emit_with_crcs(&mut buf, 256, |_| Ok::<(), ()>(()), true);
        assert_eq!(r, full);
        assert!(r.is_err());
    }

    /// The memo's parse is the full parse, for packets that reuse it and
    /// for every other byte changed (which must not).
    #[test]
    fn memo_parses_as_the_full_parse() {
        for grh in [false, true] {
            let mut memo = ParseMemo::default();
            let first = pkt(Opcode::RC_RDMA_WRITE_MIDDLE, 5, false, grh);
            let a = full(&first, 256, false, 0x33);
            assert_eq!(memo.parse_vouched(&a), PacketRepr::parse_vouched(&a));
            for (psn, ack) in [(6, true), (0xff_ffff, false)] {
                let b = full(
                    &pkt(Opcode::RC_RDMA_WRITE_MIDDLE, psn, ack, grh),
                    256,
                    false,
                    9,
                );
                let got = memo.parse_vouched(&b).unwrap();
                assert_eq!(Ok(got), PacketRepr::parse_vouched(&b));
                assert_eq!(
                    (got.transport.bth.psn, got.transport.bth.ack_req),
                    (psn, ack)
                );
                assert_eq!(got.transport.payload, &[9u8; 256][..]);
            }
            // Every header byte flipped in turn: whatever the full parse
            // says (a drop or another packet), the memo says the same.
            let n = first.payload_at();
            for i in 0..n {
                for bit in [0x01, 0x40, 0x80] {
                    let mut c = a.clone();
                    c[i] ^= bit;
                    assert_eq!(
                        memo.parse_vouched(&c),
                        PacketRepr::parse_vouched(&c),
                        "byte {i}"
                    );
                    memo.parse_vouched(&a).unwrap();
                }
            }
            // Another length.
            let short = &a[..a.len() - 4];
            assert_eq!(memo.parse_vouched(short), PacketRepr::parse_vouched(short));
        }
    }
}
