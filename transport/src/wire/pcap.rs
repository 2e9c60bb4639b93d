//! pcap capture files (classic libpcap format, microsecond timestamps) for the
//! capture stage (ARCHITECTURE.md §6; WF-11).
//!
//! Native InfiniBand packets are written as LINKTYPE_ERF (197) records, each a
//! 16-byte ERF header of type 21 (INFINIBAND) followed by the packet, LRH through
//! VCRC. That is the layout of Wireshark's own InfiniBand sample capture
//! (`transport/tests/data/wireshark-sample-infiniband.pcap`), and tshark 4.0 dissects it,
//! whereas it does not dissect LINKTYPE_INFINIBAND (247). RoCEv2 frames are written
//! as LINKTYPE_ETHERNET (1).
//!
//! Sans-IO friendly: [`PcapWriter`] writes into any [`std::io::Write`] the caller
//! owns, [`PcapReader`] walks a byte slice the caller has read, and timestamps come
//! from the caller (nothing here reads a clock). The reader treats its input as
//! untrusted: every length is checked before use, and bad input is an error, never a
//! panic.

use std::io::Write;
use std::time::Duration;

/// LINKTYPE_ETHERNET: RoCEv2 frames.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// LINKTYPE_ERF: native InfiniBand packets inside ERF type-21 records.
pub const LINKTYPE_ERF: u32 = 197;
/// ERF record type INFINIBAND.
pub const ERF_TYPE_INFINIBAND: u8 = 21;
/// Bytes of the ERF record header (without extension headers).
pub const ERF_HEADER_LEN: usize = 16;
/// Snapshot length written in the file header; also the largest record we write.
pub const SNAPLEN: u32 = 65_535;

/// Magic of a microsecond-resolution classic pcap file.
const MAGIC_US: u32 = 0xa1b2_c3d4;
/// Magic of a nanosecond-resolution classic pcap file (read only).
const MAGIC_NS: u32 = 0xa1b2_3c4d;
const FILE_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;
/// ERF flags byte: bit 2 "varying record length" set, capture interface 0. The
/// sample capture sets the same bit (it uses interfaces 0 and 1).
const ERF_FLAGS_VLEN: u8 = 0x04;
/// ERF type byte, bit 7: an extension header follows the record header.
const ERF_EXT_HEADER: u8 = 0x80;

/// What went wrong writing or reading a capture file.
#[derive(Debug, thiserror::Error)]
pub enum PcapError {
    /// The sink failed.
    #[error("pcap write failed: {0}")]
    Io(#[from] std::io::Error),
    /// A packet is too long for one record (more than [`SNAPLEN`] bytes with its
    /// link-layer header), or for an ERF record's 16-bit wire length.
    #[error("packet of {0} bytes does not fit one capture record")]
    TooLong(usize),
    /// A timestamp past what the 32-bit seconds field holds (year 2106).
    #[error("timestamp does not fit a 32-bit seconds field")]
    Timestamp,
    /// The file does not start with a classic pcap magic number.
    #[error("not a classic pcap file (bad magic)")]
    BadMagic,
    /// The file ends inside its 24-byte header.
    #[error("pcap file header truncated")]
    TruncatedFileHeader,
    /// The file ends inside a record header or a record's captured bytes.
    #[error("pcap record truncated at offset {0}")]
    TruncatedRecord(usize),
    /// A record's captured length exceeds the snapshot length, so the framing
    /// cannot be trusted.
    #[error("pcap record at offset {0} has an impossible captured length")]
    BadCapturedLength(usize),
    /// An ERF record shorter than its own header(s).
    #[error("ERF record at offset {0} is shorter than its header")]
    ErfTruncated(usize),
    /// An ERF record whose type is not INFINIBAND (21).
    #[error("ERF record at offset {offset} has type {erf_type}, not INFINIBAND")]
    ErfType { offset: usize, erf_type: u8 },
    /// A link type this module does not unwrap.
    #[error("unsupported pcap link type {0}")]
    UnsupportedLinkType(u32),
}

/// The link layer of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Native InfiniBand packets in ERF type-21 records (LINKTYPE_ERF).
    ErfInfiniband,
    /// Ethernet frames (LINKTYPE_ETHERNET), for RoCEv2.
    Ethernet,
}

impl LinkType {
    /// The LINKTYPE_ number in the file header.
    pub const fn number(self) -> u32 {
        match self {
            LinkType::ErfInfiniband => LINKTYPE_ERF,
            LinkType::Ethernet => LINKTYPE_ETHERNET,
        }
    }

    /// The link type for a LINKTYPE_ number, if this module handles it.
    pub const fn from_number(n: u32) -> Option<LinkType> {
        match n {
            LINKTYPE_ERF => Some(LinkType::ErfInfiniband),
            LINKTYPE_ETHERNET => Some(LinkType::Ethernet),
            _ => None,
        }
    }
}

/// Splits a timestamp into whole seconds (32 bits, as pcap stores them) and
/// microseconds.
fn split_ts(ts: Duration) -> Result<(u32, u32), PcapError> {
    let secs = u32::try_from(ts.as_secs()).map_err(|_| PcapError::Timestamp)?;
    Ok((secs, ts.subsec_micros()))
}

/// The ERF timestamp: 64-bit fixed point, seconds in the upper 32 bits and the
/// binary fraction of a second in the lower 32, stored little-endian (ERF spec;
/// matches the sample capture, whose fractions give back its pcap microseconds).
/// The fraction is rounded up so that a reader truncating it back to microseconds
/// gets the same value as the pcap record header.
fn erf_timestamp(secs: u32, micros: u32) -> u64 {
    let frac = (u64::from(micros) << 32).div_ceil(1_000_000);
    (u64::from(secs) << 32) | frac
}

/// Writes a classic little-endian microsecond pcap file into `W`.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    sink: W,
    link: LinkType,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the 24-byte file header for `link` and returns the writer.
    pub fn new(mut sink: W, link: LinkType) -> Result<PcapWriter<W>, PcapError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        h[0..4].copy_from_slice(&MAGIC_US.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes()); // version 2.4
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_le_bytes());
        h[20..24].copy_from_slice(&link.number().to_le_bytes());
        sink.write_all(&h)?;
        Ok(PcapWriter { sink, link })
    }

    /// A writer for native InfiniBand packets (LINKTYPE_ERF).
    pub fn infiniband(sink: W) -> Result<PcapWriter<W>, PcapError> {
        PcapWriter::new(sink, LinkType::ErfInfiniband)
    }

    /// A writer for Ethernet (RoCEv2) frames.
    pub fn ethernet(sink: W) -> Result<PcapWriter<W>, PcapError> {
        PcapWriter::new(sink, LinkType::Ethernet)
    }

    /// This file's link type.
    pub fn link_type(&self) -> LinkType {
        self.link
    }

    /// Writes one record: `packet` is a native IB packet (LRH through VCRC) for an
    /// ERF file, a whole Ethernet frame for an Ethernet file. `ts` is the time
    /// since the Unix epoch, supplied by the caller.
    pub fn write_packet(&mut self, ts: Duration, packet: &[u8]) -> Result<(), PcapError> {
        let (secs, micros) = split_ts(ts)?;
        let extra = match self.link {
            LinkType::ErfInfiniband => ERF_HEADER_LEN,
            LinkType::Ethernet => 0,
        };
        let caplen = packet
            .len()
            .checked_add(extra)
            .filter(|&n| n <= SNAPLEN as usize)
            .ok_or(PcapError::TooLong(packet.len()))?;
        let mut rec = [0u8; RECORD_HEADER_LEN + ERF_HEADER_LEN];
        rec[0..4].copy_from_slice(&secs.to_le_bytes());
        rec[4..8].copy_from_slice(&micros.to_le_bytes());
        // caplen <= SNAPLEN, so it fits a u32 (and, for ERF, rlen a u16 below).
        rec[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        rec[12..16].copy_from_slice(&(caplen as u32).to_le_bytes());
        let head = if self.link == LinkType::ErfInfiniband {
            let e = &mut rec[RECORD_HEADER_LEN..];
            e[0..8].copy_from_slice(&erf_timestamp(secs, micros).to_le_bytes());
            e[8] = ERF_TYPE_INFINIBAND;
            e[9] = ERF_FLAGS_VLEN;
            // rlen is the record length rounded up to 8 bytes, like the sample's,
            // although the padding itself is not written (the pcap caplen says
            // where the record ends). rlen, lctr and wlen are big-endian.
            let rlen = caplen.div_ceil(8) * 8;
            let rlen = u16::try_from(rlen).map_err(|_| PcapError::TooLong(packet.len()))?;
            e[10..12].copy_from_slice(&rlen.to_be_bytes());
            e[12..14].copy_from_slice(&0u16.to_be_bytes()); // lctr: nothing lost
            e[14..16].copy_from_slice(&(packet.len() as u16).to_be_bytes()); // wlen
            &rec[..]
        } else {
            &rec[..RECORD_HEADER_LEN]
        };
        self.sink.write_all(head)?;
        self.sink.write_all(packet)?;
        Ok(())
    }

    /// Flushes the sink.
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.sink.flush()?;
        Ok(())
    }

    /// The sink back.
    pub fn into_inner(self) -> W {
        self.sink
    }
}

/// The link-layer content of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A native IB packet unwrapped from its ERF record (LRH through VCRC when
    /// complete).
    Infiniband(&'a [u8]),
    /// An Ethernet frame.
    Ethernet(&'a [u8]),
}

impl<'a> Frame<'a> {
    /// The packet or frame bytes.
    pub fn bytes(&self) -> &'a [u8] {
        match *self {
            Frame::Infiniband(b) | Frame::Ethernet(b) => b,
        }
    }
}

/// One record of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Time since the Unix epoch, from the pcap record header.
    pub timestamp: Duration,
    /// The file's LINKTYPE_ number.
    pub link_type: u32,
    /// The packet or frame.
    pub frame: Frame<'a>,
    /// Whether the capture holds fewer bytes than were on the wire (pcap caplen
    /// below origlen, or ERF wlen beyond the captured bytes).
    pub truncated: bool,
}

/// Reads a classic pcap file from a byte slice: either byte order, microsecond or
/// nanosecond timestamps. Iterating yields one `Result` per record; after an
/// error in the record framing the iterator ends, because nothing after it can be
/// located. An ERF record of another type is an error item and iteration goes on.
#[derive(Debug, Clone)]
pub struct PcapReader<'a> {
    data: &'a [u8],
    pos: usize,
    big_endian: bool,
    nanos: bool,
    snaplen: u32,
    link_type: u32,
    done: bool,
}

impl<'a> PcapReader<'a> {
    /// Checks the file header. Fails on a bad magic, a short header or a link
    /// type other than ERF or Ethernet.
    pub fn new(data: &'a [u8]) -> Result<PcapReader<'a>, PcapError> {
        let h = data
            .get(..FILE_HEADER_LEN)
            .ok_or(PcapError::TruncatedFileHeader)?;
        let magic_le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let magic_be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let (big_endian, nanos) = match (magic_le, magic_be) {
            (MAGIC_US, _) => (false, false),
            (MAGIC_NS, _) => (false, true),
            (_, MAGIC_US) => (true, false),
            (_, MAGIC_NS) => (true, true),
            _ => return Err(PcapError::BadMagic),
        };
        let mut r = PcapReader {
            data,
            pos: FILE_HEADER_LEN,
            big_endian,
            nanos,
            snaplen: 0,
            link_type: 0,
            done: false,
        };
        r.snaplen = r.u32_at(&h[16..20]);
        // The upper bits of the link-type word may carry FCS information; the
        // link type itself is the low 16 bits.
        r.link_type = r.u32_at(&h[20..24]) & 0xffff;
        if LinkType::from_number(r.link_type).is_none() {
            return Err(PcapError::UnsupportedLinkType(r.link_type));
        }
        Ok(r)
    }

    fn u32_at(&self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        if self.big_endian {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        }
    }

    /// The file's LINKTYPE_ number.
    pub fn link_type(&self) -> u32 {
        self.link_type
    }

    /// The file's snapshot length.
    pub fn snaplen(&self) -> u32 {
        self.snaplen
    }

    fn next_record(&mut self) -> Result<Option<Record<'a>>, PcapError> {
        let at = self.pos;
        if at >= self.data.len() {
            return Ok(None);
        }
        let h = self
            .data
            .get(at..at + RECORD_HEADER_LEN)
            .ok_or(PcapError::TruncatedRecord(at))?;
        let secs = self.u32_at(&h[0..4]);
        let sub = self.u32_at(&h[4..8]);
        let caplen = self.u32_at(&h[8..12]);
        let origlen = self.u32_at(&h[12..16]);
        // A caplen beyond the snapshot length (or an absurd one when the header's
        // snaplen is 0) means the framing is corrupt; refuse before slicing.
        let limit = if self.snaplen == 0 {
            0x0400_0000
        } else {
            self.snaplen.max(SNAPLEN)
        };
        if caplen > limit {
            return Err(PcapError::BadCapturedLength(at));
        }
        let body_at = at + RECORD_HEADER_LEN;
        let body_end = body_at
            .checked_add(caplen as usize)
            .ok_or(PcapError::TruncatedRecord(at))?;
        let body = self
            .data
            .get(body_at..body_end)
            .ok_or(PcapError::TruncatedRecord(at))?;
        self.pos = body_end;
        let nanos = if self.nanos {
            sub
        } else {
            sub.saturating_mul(1000)
        };
        let timestamp = Duration::from_secs(u64::from(secs)) + Duration::from_nanos(nanos.into());
        let pcap_truncated = caplen < origlen;
        let (frame, truncated) = match LinkType::from_number(self.link_type) {
            Some(LinkType::Ethernet) => (Frame::Ethernet(body), pcap_truncated),
            Some(LinkType::ErfInfiniband) => {
                let (pkt, erf_truncated) = unwrap_erf(body, at)?;
                (Frame::Infiniband(pkt), pcap_truncated || erf_truncated)
            }
            None => return Err(PcapError::UnsupportedLinkType(self.link_type)),
        };
        Ok(Some(Record {
            timestamp,
            link_type: self.link_type,
            frame,
            truncated,
        }))
    }
}

/// Unwraps the IB packet from an ERF record: checks type 21, skips any extension
/// headers, and cuts the packet at ERF wlen (padding up to rlen may follow it).
/// Returns the packet and whether fewer than wlen bytes were captured.
fn unwrap_erf(rec: &[u8], offset: usize) -> Result<(&[u8], bool), PcapError> {
    let h = rec
        .get(..ERF_HEADER_LEN)
        .ok_or(PcapError::ErfTruncated(offset))?;
    let erf_type = h[8];
    if erf_type & 0x7f != ERF_TYPE_INFINIBAND {
        return Err(PcapError::ErfType {
            offset,
            erf_type: erf_type & 0x7f,
        });
    }
    let wlen = usize::from(u16::from_be_bytes([h[14], h[15]]));
    let mut at = ERF_HEADER_LEN;
    // Each 8-byte extension header's first bit says whether another follows.
    let mut more = erf_type & ERF_EXT_HEADER != 0;
    while more {
        let ext = rec.get(at..at + 8).ok_or(PcapError::ErfTruncated(offset))?;
        more = ext[0] & 0x80 != 0;
        at += 8;
    }
    let rest = &rec[at..];
    if wlen <= rest.len() {
        Ok((&rest[..wlen], false))
    } else {
        Ok((rest, true))
    }
}

impl<'a> Iterator for PcapReader<'a> {
    type Item = Result<Record<'a>, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            // The record was framed correctly; only its content is foreign.
            Err(e @ PcapError::ErfType { .. }) | Err(e @ PcapError::ErfTruncated(_)) => {
                Some(Err(e))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: u64, micros: u32) -> Duration {
        Duration::from_secs(secs) + Duration::from_micros(micros.into())
    }

    #[test]
    fn wf_11_erf_writer_reader_round_trip() {
        let pkts: Vec<Vec<u8>> = (0..20usize)
            .map(|n| (0..n * 7 + 1).map(|i| (i * 31 + n) as u8).collect())
            .collect();
        let mut w = PcapWriter::infiniband(Vec::new()).unwrap();
        for (i, p) in pkts.iter().enumerate() {
            w.write_packet(ts(1_700_000_000 + i as u64, i as u32 * 1001), p)
                .unwrap();
        }
        let file = w.into_inner();
        let r = PcapReader::new(&file).unwrap();
        assert_eq!(r.link_type(), LINKTYPE_ERF);
        let recs: Vec<_> = r.map(|r| r.unwrap()).collect();
        assert_eq!(recs.len(), pkts.len());
        for (i, (rec, p)) in recs.iter().zip(&pkts).enumerate() {
            assert_eq!(rec.frame, Frame::Infiniband(p));
            assert_eq!(rec.timestamp, ts(1_700_000_000 + i as u64, i as u32 * 1001));
            assert!(!rec.truncated);
        }
    }

    #[test]
    fn wf_11_erf_record_layout_matches_the_sample_capture() {
        // Frame 1 of the sample: 290-byte packet at 1210794479.499693 s; its ERF
        // header is 60ea eb7f ef41 2b48 | 15 | 05 | 0138 | 0000 | 0122.
        let pkt = [0u8; 290];
        let mut w = PcapWriter::infiniband(Vec::new()).unwrap();
        w.write_packet(ts(1_210_794_479, 499_693), &pkt).unwrap();
        let f = w.into_inner();
        assert_eq!(&f[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(&f[20..24], &197u32.to_le_bytes());
        let rec = &f[24..];
        assert_eq!(&rec[8..16], &[0x32, 1, 0, 0, 0x32, 1, 0, 0], "caplen 306");
        let erf = &rec[16..32];
        // The sample's capture card had more precision than a microsecond, so
        // compare the seconds and the microseconds the fraction encodes.
        let t = u64::from_le_bytes(erf[..8].try_into().unwrap());
        assert_eq!(t >> 32, 1_210_794_479);
        assert_eq!(((t & 0xffff_ffff) * 1_000_000) >> 32, 499_693);
        assert_eq!(&erf[8..], &[21, 0x04, 0x01, 0x38, 0, 0, 0x01, 0x22]);
        assert_eq!(f.len(), 24 + 16 + 16 + 290, "no padding written");
    }

    #[test]
    fn wf_11_ethernet_round_trip() {
        let frame: Vec<u8> = (0..60u8).collect();
        let mut w = PcapWriter::ethernet(Vec::new()).unwrap();
        w.write_packet(ts(5, 6), &frame).unwrap();
        let f = w.into_inner();
        let mut r = PcapReader::new(&f).unwrap();
        assert_eq!(r.link_type(), LINKTYPE_ETHERNET);
        let rec = r.next().unwrap().unwrap();
        assert_eq!(rec.frame, Frame::Ethernet(&frame));
        assert_eq!(rec.timestamp, ts(5, 6));
        assert!(r.next().is_none());
    }

    #[test]
    fn wf_11_writer_refuses_what_does_not_fit() {
        let mut w = PcapWriter::infiniband(Vec::new()).unwrap();
        let big = vec![0u8; SNAPLEN as usize];
        assert!(matches!(
            w.write_packet(ts(0, 0), &big),
            Err(PcapError::TooLong(_))
        ));
        assert!(matches!(
            w.write_packet(Duration::from_secs(1 << 33), &[0; 4]),
            Err(PcapError::Timestamp)
        ));
    }

    #[test]
    fn wf_11_reader_checks_erf_type_and_wlen() {
        let mut w = PcapWriter::infiniband(Vec::new()).unwrap();
        w.write_packet(ts(1, 0), &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let good = w.into_inner();
        // Another ERF type (2 = Ethernet) is an error item.
        let mut f = good.clone();
        f[24 + 16 + 8] = 2;
        let items: Vec<_> = PcapReader::new(&f).unwrap().collect();
        assert!(matches!(
            items[..],
            [Err(PcapError::ErfType { erf_type: 2, .. })]
        ));
        // wlen beyond the captured bytes: the packet is what is there, marked truncated.
        let mut f = good.clone();
        f[24 + 16 + 15] = 200;
        let rec = PcapReader::new(&f).unwrap().next().unwrap().unwrap();
        assert!(rec.truncated);
        assert_eq!(rec.frame.bytes().len(), 8);
        // Shorter wlen: cut there (the rest is ERF padding).
        let mut f = good;
        f[24 + 16 + 15] = 3;
        let rec = PcapReader::new(&f).unwrap().next().unwrap().unwrap();
        assert_eq!(rec.frame.bytes(), &[1, 2, 3]);
    }

    #[test]
    fn wf_11_reader_rejects_bad_headers() {
        assert!(matches!(
            PcapReader::new(&[0xd4, 0xc3]),
            Err(PcapError::TruncatedFileHeader)
        ));
        assert!(matches!(
            PcapReader::new(&[0u8; 24]),
            Err(PcapError::BadMagic)
        ));
        let mut h = PcapWriter::ethernet(Vec::new()).unwrap().into_inner();
        h[20] = 247; // LINKTYPE_INFINIBAND: not unwrapped here
        assert!(matches!(
            PcapReader::new(&h),
            Err(PcapError::UnsupportedLinkType(247))
        ));
    }

    /// Tiny deterministic generator, so the fuzz loop needs no crate.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 33) as u32
        }
    }

    #[test]
    fn wf_11_reader_never_panics_on_garbage() {
        let mut w = PcapWriter::infiniband(Vec::new()).unwrap();
        for i in 0..8u8 {
            w.write_packet(ts(u64::from(i), 0), &[i; 40]).unwrap();
        }
        let base = w.into_inner();
        let mut rng = Lcg(7);
        for round in 0..20_000u32 {
            let mut f = if round.is_multiple_of(4) {
                // Pure noise behind a valid magic, either byte order.
                let n = (rng.next() % 300) as usize;
                let mut v: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                if v.len() >= 4 {
                    let m = if round.is_multiple_of(8) {
                        MAGIC_US.to_le_bytes()
                    } else {
                        MAGIC_NS.to_be_bytes()
                    };
                    v[..4].copy_from_slice(&m);
                }
                v
            } else {
                base.clone()
            };
            // Corrupt a few bytes and maybe cut the file short.
            for _ in 0..(rng.next() % 6) {
                if !f.is_empty() {
                    let i = rng.next() as usize % f.len();
                    f[i] = rng.next() as u8;
                }
            }
            if round.is_multiple_of(3) && !f.is_empty() {
                let cut = rng.next() as usize % f.len();
                f.truncate(cut);
            }
            if let Ok(r) = PcapReader::new(&f) {
                for rec in r.take(10_000).flatten() {
                    assert!(rec.frame.bytes().len() <= f.len());
                }
            }
        }
    }
}
