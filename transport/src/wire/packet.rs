//! Whole packets: LRH \[GRH\] BTH \[extension headers\] payload pad ICRC VCRC
//! (IBA 7.7-7.8, 9.2-9.3; WF-01..WF-09).
//!
//! [`TransportRepr`] is the part from the BTH to the ICRC (exclusive); it is shared
//! by native packets ([`PacketRepr`]) and RoCEv2 frames ([`super::roce`]).

use super::bth::{Bth, BthRepr};
use super::crc::{icrc_native, icrc_vcrc_native, vcrc, SinglePassCrc, ICRC_LEN, VCRC_LEN};
use super::ext::ExtHeaders;
use super::grh::{Grh, GrhRepr};
use super::lrh::{Lnh, Lrh, LrhRepr};
use super::{DropReason, EmitError, MAX_PAYLOAD};
use crate::memory::copy_chunked;

/// Where a packet buffer should start relative to a 16-byte boundary: 12 bytes past
/// one. Then a payload after the 20-byte LRH+BTH, or the 36 bytes with a RETH, starts
/// 16-byte aligned, and the single-pass CRC folds it from its first byte instead of
/// taking an unaligned head and a tail through tables (WF-09; about 1.3x on the
/// engine benchmark). Not needed for correctness.
pub const BUFFER_ALIGN_OFFSET: usize = 12;

/// Zero bytes standing in for a payload whose length alone matters.
pub(crate) static ZEROS: [u8; MAX_PAYLOAD] = [0; MAX_PAYLOAD];

/// Why [`PacketRepr::emit_with`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitWithError<E> {
    /// The packet itself could not be written.
    Emit(EmitError),
    /// `fill` failed.
    Fill(E),
}

/// Pad bytes that bring a payload to a 4-byte boundary (9.2.5, WF-08).
pub const fn pad_for(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

/// The part of building a packet after its headers (`buf` is the whole
/// packet, headers written): the payload by `fill` at `payload_at`, the pad,
/// then at `hdr_end` the ICRC and VCRC, or zeros without `crcs`
/// ([`PacketRepr::emit_with_crcs`], [`super::template::HeaderTemplate`]).
pub(crate) fn fill_and_seal<E>(
    buf: &mut [u8],
    payload_at: usize,
    hdr_end: usize,
    grh: bool,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    crcs: bool,
) -> Result<(), EmitWithError<E>> {
    let pad = pad_for(payload_len);
    let (head, rest) = buf.split_at_mut(payload_at);
    fill(&mut rest[..payload_len]).map_err(EmitWithError::Fill)?;
    rest[payload_len..payload_len + pad].fill(0);
    let (icrc, v) = if crcs {
        SinglePassCrc::headers(head, grh).finish(&rest[..payload_len], pad)
    } else {
        (0, 0)
    };
    buf[hdr_end..hdr_end + ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
    buf[hdr_end + ICRC_LEN..hdr_end + ICRC_LEN + VCRC_LEN].copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// The transport part of a packet: BTH, extension headers and payload, with pad
/// and ICRC left to the encapsulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransportRepr<'a> {
    pub bth: BthRepr,
    pub ext: ExtHeaders,
    pub payload: &'a [u8],
}

impl<'a> TransportRepr<'a> {
    /// Parses `buf`, which runs from the BTH to the ICRC (exclusive) and whose
    /// CRCs the caller has already checked. Checks TVer (C9-36), the opcode (C9-2),
    /// the headers the opcode needs, and the pad count (WF-08).
    pub fn parse(buf: &'a [u8]) -> Result<TransportRepr<'a>, DropReason> {
        let bth_view = Bth::new_checked(buf)?;
        let bth = BthRepr::parse(&bth_view)?;
        let info = bth.opcode.info();
        let hdr_end = BthRepr::LEN + info.headers_len();
        let ext_bytes = buf
            .get(BthRepr::LEN..hdr_end)
            .ok_or(DropReason::Truncated)?;
        let ext = ExtHeaders::parse(info, ext_bytes)?;
        let rest = &buf[hdr_end..];
        let pad = bth_view.pad_count();
        if !rest.len().is_multiple_of(4) {
            return Err(DropReason::BadPadCount);
        }
        let payload = if info.payload {
            let len = rest.len().checked_sub(pad).ok_or(DropReason::BadPadCount)?;
            if len > MAX_PAYLOAD {
                return Err(DropReason::LengthMismatch);
            }
            &rest[..len]
        } else {
            if !rest.is_empty() {
                return Err(DropReason::LengthMismatch);
            }
            if pad != 0 {
                return Err(DropReason::BadPadCount);
            }
            rest
        };
        Ok(TransportRepr { bth, ext, payload })
    }

    /// Bytes from the BTH to the ICRC (exclusive), pad included.
    pub fn buffer_len(&self) -> usize {
        BthRepr::LEN
            + self.bth.opcode.info().headers_len()
            + self.payload.len()
            + pad_for(self.payload.len())
    }

    /// Writes BTH, extension headers, payload and zero pad into `buf`, which must
    /// hold [`Self::buffer_len`] bytes; returns that length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let (at, len) = self.emit_headers(buf)?;
        self.emit_payload(&mut buf[at..len]);
        Ok(len)
    }

    /// The checks of [`Self::emit`] and its BTH and extension headers; returns
    /// where the payload starts and the whole length.
    pub(crate) fn emit_headers(&self, buf: &mut [u8]) -> Result<(usize, usize), EmitError> {
        let info = self.bth.opcode.info();
        if (!info.payload && !self.payload.is_empty()) || self.payload.len() > MAX_PAYLOAD {
            return Err(EmitError::BadPayload);
        }
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(EmitError::BufferTooSmall);
        }
        let pad = pad_for(self.payload.len());
        self.bth
            .emit(&mut Bth::new_unchecked(&mut buf[..BthRepr::LEN]), pad)?;
        let at = BthRepr::LEN + self.ext.emit(info, &mut buf[BthRepr::LEN..])?;
        Ok((at, len))
    }

    /// For an `emit_with` (whose payload is written in place by a `fill`): the
    /// same repr with a payload of `payload_len` bytes, whose headers are then
    /// written (only the payload's length is read). `self.payload` must be
    /// empty.
    pub(crate) fn sized_for_fill(
        &self,
        payload_len: usize,
    ) -> Result<TransportRepr<'a>, EmitError> {
        if !self.payload.is_empty() || payload_len > MAX_PAYLOAD {
            return Err(EmitError::BadPayload);
        }
        Ok(TransportRepr {
            payload: &ZEROS[..payload_len],
            ..*self
        })
    }

    /// Copies the payload and zero pad into `buf`, which holds exactly them.
    pub(crate) fn emit_payload(&self, buf: &mut [u8]) {
        let (data, pad) = buf.split_at_mut(self.payload.len());
        // In `COPY_CHUNK` pieces: a whole payload in one memcpy is `rep movsb`,
        // about 1.5x slower here when the payload and its place in the packet
        // are not mutually aligned, which is the usual case (WF-09).
        copy_chunked(data, self.payload);
        pad.fill(0);
    }
}

/// Whether a packet's ICRC and VCRC are both right, by the single-pass CRC; false
/// when either is wrong or the packet is too short or not IBA transport.
fn fast_crc_check(lrh: &Lrh<&[u8]>, pkt: &[u8], vcrc_bytes: &[u8]) -> bool {
    let has_grh = match lrh.lnh() {
        Lnh::IbaLocal => false,
        Lnh::IbaGlobal => true,
        Lnh::Raw | Lnh::Ipv6Raw => return false,
    };
    let hdr = LrhRepr::LEN + if has_grh { GrhRepr::LEN } else { 0 } + BthRepr::LEN;
    let Some(icrc_at) = pkt.len().checked_sub(ICRC_LEN).filter(|&i| i >= hdr) else {
        return false;
    };
    let (icrc, v) = icrc_vcrc_native(&pkt[..icrc_at], has_grh);
    icrc.to_le_bytes() == pkt[icrc_at..] && v.to_le_bytes() == vcrc_bytes
}

/// Writes the ICRC and VCRC of the native packet in `buf` (LRH through VCRC),
/// which its sender left out ([`PacketRepr::emit_with_crcs`]): a link that
/// carries packets through memory fills them in for a packet that leaves on a
/// wire after all (issue 30). Refuses, leaving `buf` as it was, what is not a
/// whole IBA transport packet of `buf`'s length.
pub fn fill_crcs(buf: &mut [u8]) -> Result<(), DropReason> {
    let lrh = Lrh::new_checked(&*buf)?;
    let crc_end = usize::from(lrh.pkt_len()) * 4;
    let has_grh = match lrh.lnh() {
        Lnh::IbaLocal => false,
        Lnh::IbaGlobal => true,
        Lnh::Raw | Lnh::Ipv6Raw => return Err(DropReason::RawPacket),
    };
    if crc_end + VCRC_LEN != buf.len() {
        return Err(DropReason::LengthMismatch);
    }
    let hdr = LrhRepr::LEN + if has_grh { GrhRepr::LEN } else { 0 } + BthRepr::LEN;
    let icrc_at = crc_end
        .checked_sub(ICRC_LEN)
        .filter(|&i| i >= hdr)
        .ok_or(DropReason::Truncated)?;
    let (icrc, v) = icrc_vcrc_native(&buf[..icrc_at], has_grh);
    buf[icrc_at..crc_end].copy_from_slice(&icrc.to_le_bytes());
    buf[crc_end..].copy_from_slice(&v.to_le_bytes());
    Ok(())
}

/// A whole native InfiniBand packet, LRH through VCRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PacketRepr<'a> {
    pub lrh: LrhRepr,
    pub grh: Option<GrhRepr>,
    pub transport: TransportRepr<'a>,
}

impl<'a> PacketRepr<'a> {
    /// Parses an untrusted packet, LRH through VCRC, in the order a link layer then
    /// a transport layer check it (C9-34, C9-35): length, VCRC, LVer, LNH, GRH,
    /// ICRC, then [`TransportRepr::parse`]. Never panics.
    pub fn parse(buf: &'a [u8]) -> Result<PacketRepr<'a>, DropReason> {
        Self::parse_as(buf, true)
    }

    /// Parses a packet whose ICRC and VCRC its link vouches for: a packet that
    /// crossed memory, not a wire, and whose sender left both CRCs out
    /// ([`Self::emit_with_crcs`]; the shared-memory link, issue 30). Every other
    /// check of [`Self::parse`] is made. Never panics.
    pub fn parse_vouched(buf: &'a [u8]) -> Result<PacketRepr<'a>, DropReason> {
        Self::parse_as(buf, false)
    }

    fn parse_as(buf: &'a [u8], check_crcs: bool) -> Result<PacketRepr<'a>, DropReason> {
        let lrh_view = Lrh::new_checked(buf)?;
        let crc_end = usize::from(lrh_view.pkt_len()) * 4; // LRH through ICRC
        if crc_end + VCRC_LEN != buf.len() {
            return Err(DropReason::LengthMismatch);
        }
        let (pkt, vcrc_bytes) = buf.split_at(crc_end);
        // Fast path: both CRCs in one pass (WF-09). It assumes the ICRC is right, so
        // it proves both only when both match; any other packet takes the reference
        // checks below, which keep the link layer's order (VCRC first, C9-35).
        let crcs_ok = !check_crcs || fast_crc_check(&lrh_view, pkt, vcrc_bytes);
        if !crcs_ok && vcrc(pkt).to_le_bytes() != vcrc_bytes {
            return Err(DropReason::BadVcrc);
        }
        let lrh = LrhRepr::parse(&lrh_view)?;
        let has_grh = match lrh_view.lnh() {
            Lnh::IbaLocal => false,
            Lnh::IbaGlobal => true,
            Lnh::Raw | Lnh::Ipv6Raw => return Err(DropReason::RawPacket),
        };
        let mut at = LrhRepr::LEN;
        let grh = if has_grh {
            let v = Grh::new_checked(&pkt[at..])?;
            let grh = GrhRepr::parse(&v)?;
            at += GrhRepr::LEN;
            if usize::from(v.pay_len()) != crc_end - at {
                return Err(DropReason::LengthMismatch);
            }
            Some(grh)
        } else {
            None
        };
        let icrc_at = crc_end
            .checked_sub(ICRC_LEN)
            .filter(|&i| i >= at + BthRepr::LEN)
            .ok_or(DropReason::Truncated)?;
        if !crcs_ok && icrc_native(&pkt[..icrc_at], has_grh).to_le_bytes() != pkt[icrc_at..] {
            return Err(DropReason::BadIcrc);
        }
        let transport = TransportRepr::parse(&pkt[at..icrc_at])?;
        Ok(PacketRepr {
            lrh,
            grh,
            transport,
        })
    }

    /// Bytes of the whole packet, LRH through VCRC.
    pub fn buffer_len(&self) -> usize {
        LrhRepr::LEN
            + self.grh.map_or(0, |_| GrhRepr::LEN)
            + self.transport.buffer_len()
            + ICRC_LEN
            + VCRC_LEN
    }

    /// Writes the whole packet like [`Self::emit`], except that the payload is not
    /// copied from `self.transport.payload` (which must be empty) but written in
    /// place by `fill`, given the `payload_len` bytes where it goes: the device and
    /// the engine gather a payload from memory straight into the packet, with no
    /// staging copy. An error from `fill` is returned as is.
    pub fn emit_with<E>(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Result<usize, EmitWithError<E>> {
        self.emit_with_crcs(buf, payload_len, fill, true)
    }

    /// [`Self::emit_with`]; without `crcs` the ICRC and VCRC are left zero, for
    /// a link that carries the packet through memory (no wire to corrupt it)
    /// and fills them in itself if the packet leaves on a wire after all
    /// ([`fill_crcs`]; the shared-memory link, issue 30).
    pub fn emit_with_crcs<E>(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
        crcs: bool,
    ) -> Result<usize, EmitWithError<E>> {
        let sized = PacketRepr {
            transport: self
                .transport
                .sized_for_fill(payload_len)
                .map_err(EmitWithError::Emit)?,
            ..*self
        };
        let len = sized.buffer_len();
        if buf.len() < len {
            return Err(EmitWithError::Emit(EmitError::BufferTooSmall));
        }
        let buf = &mut buf[..len];
        let (payload_at, hdr_end) = sized.emit_headers(buf).map_err(EmitWithError::Emit)?;
        let grh = self.grh.is_some();
        fill_and_seal(buf, payload_at, hdr_end, grh, payload_len, fill, crcs)?;
        Ok(len)
    }

    /// Where a native packet's payload starts: after LRH, GRH, BTH and the
    /// extension headers its opcode has.
    pub fn payload_at(&self) -> usize {
        LrhRepr::LEN
            + self.grh.map_or(0, |_| GrhRepr::LEN)
            + BthRepr::LEN
            + self.transport.bth.opcode.info().headers_len()
    }

    /// Writes LRH, GRH and the transport headers (not the payload) for a packet of
    /// `self`'s payload length; returns where the payload starts and where the ICRC
    /// goes.
    fn emit_headers(&self, buf: &mut [u8]) -> Result<(usize, usize), EmitError> {
        let len = self.buffer_len();
        let crc_end = len - VCRC_LEN;
        let lnh = if self.grh.is_some() {
            Lnh::IbaGlobal
        } else {
            Lnh::IbaLocal
        };
        let words = u16::try_from(crc_end / 4).map_err(|_| EmitError::FieldRange("LRH:PktLen"))?;
        self.lrh.emit(
            &mut Lrh::new_unchecked(&mut buf[..LrhRepr::LEN]),
            lnh,
            words,
        )?;
        let mut at = LrhRepr::LEN;
        if let Some(grh) = &self.grh {
            let pay_len = (crc_end - at - GrhRepr::LEN) as u16;
            grh.emit(
                &mut Grh::new_unchecked(&mut buf[at..at + GrhRepr::LEN]),
                pay_len,
            )?;
            at += GrhRepr::LEN;
        }
        let (payload_at, t_len) = self.transport.emit_headers(&mut buf[at..])?;
        Ok((at + payload_at, at + t_len))
    }

    /// Writes the whole packet with both CRCs into `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EmitError> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(EmitError::BufferTooSmall);
        }
        let buf = &mut buf[..len];
        let (payload_at, icrc_at) = self.emit_headers(buf)?;
        // Both CRCs in one pass over LRH..pad (WF-09; IBA 7.8.1, 7.8.2). The CRC
        // reads the payload from the caller's slice (the same bytes the copy then
        // writes), so the copy does not wait for it.
        let crcs = SinglePassCrc::headers(&buf[..payload_at], self.grh.is_some());
        let payload = self.transport.payload;
        let (icrc, v) = crcs.finish(payload, pad_for(payload.len()));
        self.transport.emit_payload(&mut buf[payload_at..icrc_at]);
        buf[icrc_at..icrc_at + ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
        buf[icrc_at + ICRC_LEN..].copy_from_slice(&v.to_le_bytes());
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::opcode::Opcode;

    #[test]
    fn wf_09_emit_with_fills_in_place_like_emit() {
        let payload: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        for grh in [
            None,
            Some(GrhRepr {
                traffic_class: 1,
                flow_label: 2,
                hop_limit: 3,
                sgid: [4; 16],
                dgid: [5; 16],
            }),
        ] {
            let mut p = PacketRepr {
                lrh: LrhRepr {
                    vl: 0,
                    sl: 1,
                    dlid: 2,
                    slid: 3,
                },
                grh,
                transport: TransportRepr {
                    bth: BthRepr {
                        opcode: Opcode::RC_SEND_ONLY,
                        solicited: false,
                        mig_req: false,
                        pkey: 0xffff,
                        fecn: false,
                        becn: false,
                        dest_qp: 9,
                        ack_req: true,
                        psn: 5,
                    },
                    ext: Default::default(),
                    payload: &payload,
                },
            };
            let mut a = vec![0u8; 2000];
            let n = p.emit(&mut a).unwrap();
            p.transport.payload = &[];
            let mut b = vec![0xeeu8; 2000];
            let m = p
                .emit_with(&mut b, payload.len(), |dst| {
                    dst.copy_from_slice(&payload);
                    Ok::<(), ()>(())
                })
                .unwrap();
            assert_eq!(a[..n], b[..m]);
            assert!(PacketRepr::parse(&b[..m]).is_ok());
            assert_eq!(
                p.emit_with(&mut b, 10, |_| Err(7)),
                Err(EmitWithError::Fill(7))
            );
        }
    }

    /// Issue 30: a packet built without its CRCs (for a memory link) is
    /// dropped by the checking parse, taken by the vouched one with the same
    /// fields, and `fill_crcs` makes it byte for byte the packet `emit`
    /// builds, which the checking parse takes (WF-09 on the wire: every
    /// packet that leaves on one has both CRCs).
    #[test]
    fn wf_09_a_packet_left_without_crcs_is_refused_unless_vouched_and_fill_crcs_completes_it() {
        let payload: Vec<u8> = (0..777u32).map(|i| (i * 13) as u8).collect();
        for grh in [
            None,
            Some(GrhRepr {
                traffic_class: 7,
                flow_label: 8,
                hop_limit: 9,
                sgid: [1; 16],
                dgid: [2; 16],
            }),
        ] {
            let mut p = PacketRepr {
                lrh: LrhRepr {
                    vl: 1,
                    sl: 2,
                    dlid: 3,
                    slid: 4,
                },
                grh,
                transport: TransportRepr {
                    bth: BthRepr {
                        opcode: Opcode::RC_RDMA_WRITE_ONLY,
                        solicited: false,
                        mig_req: true,
                        pkey: 0x8001,
                        fecn: false,
                        becn: false,
                        dest_qp: 0x12,
                        ack_req: true,
                        psn: 0x77,
                    },
                    ext: crate::wire::ExtHeaders {
                        reth: Some(crate::wire::RethRepr {
                            va: 0x1000,
                            rkey: 5,
                            dma_len: 777,
                        }),
                        ..Default::default()
                    },
                    payload: &payload,
                },
            };
            let mut with = vec![0u8; 2000];
            let n = p.emit(&mut with).unwrap();
            p.transport.payload = &[];
            let mut without = vec![0xeeu8; 2000];
            let fill = |dst: &mut [u8]| {
                dst.copy_from_slice(&payload);
                Ok::<(), ()>(())
            };
            let m = p
                .emit_with_crcs(&mut without, payload.len(), fill, false)
                .unwrap();
            let without = &mut without[..m];
            assert_eq!(m, n);
            assert_eq!(without[n - 6..], [0; 6], "ICRC and VCRC left zero");
            assert_eq!(without[..n - 6], with[..n - 6]);
            assert_eq!(PacketRepr::parse(without), Err(DropReason::BadVcrc));
            let vouched = PacketRepr::parse_vouched(without).unwrap();
            assert_eq!(vouched, PacketRepr::parse(&with[..n]).unwrap());
            fill_crcs(without).unwrap();
            assert_eq!(without[..], with[..n]);
            assert!(PacketRepr::parse(without).is_ok());
            // What is not a whole packet of its buffer's length is refused
            // and left as it was.
            let mut short = with[..n - 1].to_vec();
            assert_eq!(fill_crcs(&mut short), Err(DropReason::LengthMismatch));
            assert_eq!(short[..], with[..n - 1]);
        }
    }
}
