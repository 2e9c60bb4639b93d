//! The capture stage (ARCHITECTURE.md §6, WF-11): every packet sent and received through
//! the wrapped link goes to a pcap file that Wireshark and tshark dissect without
//! plugins: LINKTYPE_ERF records (ERF type 21, INFINIBAND) for native packets,
//! LINKTYPE_ETHERNET for RoCEv2 frames (a TAP link). The writer is
//! `transport::wire::pcap::PcapWriter`; timestamps are the caller's `now`.
//!
//! Where it sits decides what it sees: outside a [`FaultLink`](super::FaultLink) it
//! records what the engine sent; inside, what went onto the wire after the faults.
//!
//! A capture failure (disk full) must not take the port down: it is logged and
//! counted, and the packet still goes through.
//!
//! Records are buffered, and the buffer is written out at most [`FLUSH_AFTER`]
//! after its oldest record (a link deadline, so it happens while the device
//! is idle too) and at a device reset: `tshark -r` or the project's reader of
//! a running capture sees every packet but the last fraction of a second
//! (issue 17).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::time::Duration;

use transport::wire::pcap::{LinkType, PcapError, PcapWriter};

use super::{Link, LinkError, Received, MAX_PACKET_LEN};

/// How long a record may wait in the buffer before the file gets it.
pub const FLUSH_AFTER: Duration = Duration::from_millis(200);

/// What a [`CaptureLink`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CaptureCounters {
    /// Records of sent packets.
    pub tx_records: u64,
    /// Records of received packets.
    pub rx_records: u64,
    /// Packets that could not be written (the link carried them anyway).
    pub errors: u64,
}

/// A [`Link`] that records its traffic to a pcap file.
#[derive(Debug)]
pub struct CaptureLink<L, W: Write> {
    inner: L,
    pcap: PcapWriter<W>,
    counters: CaptureCounters,
    /// When the oldest record not yet flushed was written.
    unflushed_since: Option<Duration>,
    /// Where a packet vouched for without CRCs gets them before it is
    /// recorded (issue 30); allocated at the first such packet.
    crcs: Vec<u8>,
}

impl<L: Link> CaptureLink<L, BufWriter<File>> {
    /// Captures native packets into a new file at `path` (truncating an existing
    /// one).
    pub fn create(inner: L, path: impl AsRef<Path>) -> Result<Self, PcapError> {
        CaptureLink::create_as(inner, path, LinkType::ErfInfiniband)
    }

    /// Captures into a new file at `path` with records of `link` type: the link
    /// layer of the packets `inner` carries (Ethernet for a TAP link).
    pub fn create_as(inner: L, path: impl AsRef<Path>, link: LinkType) -> Result<Self, PcapError> {
        let file = File::create(path.as_ref())?;
        log::info!(
            "fabric: capturing to {} ({link:?})",
            path.as_ref().display()
        );
        CaptureLink::new_as(inner, BufWriter::new(file), link)
    }
}

impl<L: Link, W: Write> CaptureLink<L, W> {
    /// Captures native packets into `sink`; writes the pcap file header at once.
    pub fn new(inner: L, sink: W) -> Result<Self, PcapError> {
        CaptureLink::new_as(inner, sink, LinkType::ErfInfiniband)
    }

    /// Captures packets of `link` type into `sink`.
    pub fn new_as(inner: L, sink: W, link: LinkType) -> Result<Self, PcapError> {
        Ok(CaptureLink {
            inner,
            pcap: PcapWriter::new(sink, link)?,
            counters: CaptureCounters::default(),
            unflushed_since: None,
            crcs: Vec::new(),
        })
    }

    /// What was written so far.
    pub fn counters(&self) -> &CaptureCounters {
        &self.counters
    }

    /// The wrapped link.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// The wrapped link, mutably.
    pub fn inner_mut(&mut self) -> &mut L {
        &mut self.inner
    }

    /// Pushes buffered records to the sink (a reader sees them after this).
    pub fn flush(&mut self) -> Result<(), PcapError> {
        self.unflushed_since = None;
        self.pcap.flush()
    }

    /// Flushes, logging and counting a failure like a record's.
    fn flush_counted(&mut self) {
        if let Err(e) = self.flush() {
            if self.counters.errors == 0 {
                log::warn!("fabric: capture flush failed: {e}");
            }
            self.counters.errors += 1;
        }
    }

    /// Flushes and gives back the wrapped link and the sink.
    pub fn into_parts(mut self) -> Result<(L, W), PcapError> {
        self.pcap.flush()?;
        Ok((self.inner, self.pcap.into_inner()))
    }

    fn record(&mut self, now: Duration, packet: &[u8]) -> bool {
        self.unflushed_since.get_or_insert(now);
        record(&mut self.pcap, &mut self.counters, now, packet)
    }
}

/// Writes one record; a failure is logged once and counted, and the packet goes
/// on uncaptured.
fn record<W: Write>(
    pcap: &mut PcapWriter<W>,
    counters: &mut CaptureCounters,
    now: Duration,
    packet: &[u8],
) -> bool {
    match pcap.write_packet(now, packet) {
        Ok(()) => true,
        Err(e) => {
            if counters.errors == 0 {
                log::warn!("fabric: capture failed, packets go on uncaptured: {e}");
            }
            counters.errors += 1;
            false
        }
    }
}

impl<L: Link, W: Write> Link for CaptureLink<L, W> {
    fn flush(&mut self) -> Result<(), LinkError> {
        self.unflushed_since = None;
        self.pcap
            .flush()
            .map_err(|e| LinkError::Io(std::io::Error::other(e.to_string())))?;
        self.inner.flush()
    }

    fn send(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        if self.record(now, packet) {
            self.counters.tx_records += 1;
        }
        self.inner.send(now, packet)
    }

    fn recv_batch(
        &mut self,
        now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        // Each packet is recorded from the inner link's buffer on its way to
        // the caller (the pcap writer copies it into its own buffer).
        let Self {
            inner,
            pcap,
            counters,
            unflushed_since,
            crcs,
        } = self;
        inner.recv_batch(now, max, &mut |r| {
            unflushed_since.get_or_insert(now);
            // Issue 30: a packet that crossed memory without its CRCs is
            // recorded as a wire would carry it, with them.
            let mut p = r.packet;
            if r.crcs_vouched {
                crcs.resize(MAX_PACKET_LEN, 0);
                if let Some(c) = crcs.get_mut(..p.len()) {
                    c.copy_from_slice(p);
                    if transport::wire::fill_crcs(c).is_ok() {
                        p = c;
                    }
                }
            }
            if record(pcap, counters, now, p) {
                counters.rx_records += 1;
            }
            deliver(r)
        })
    }

    fn raw_fd(&self) -> RawFd {
        self.inner.raw_fd()
    }

    fn poll_timeout(&self) -> Option<Duration> {
        let flush = self.unflushed_since.map(|t| t + FLUSH_AFTER);
        match (self.inner.poll_timeout(), flush) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Duration) -> Result<(), LinkError> {
        if self.unflushed_since.is_some_and(|t| now >= t + FLUSH_AFTER) {
            self.flush_counted();
        }
        self.inner.handle_timeout(now)
    }

    fn report(&self) -> Option<String> {
        self.inner.report()
    }

    fn auth_counters(&self) -> Option<super::AuthCounters> {
        self.inner.auth_counters()
    }

    fn is_up(&self) -> bool {
        self.inner.is_up()
    }

    fn single_peer(&self) -> bool {
        self.inner.single_peer()
    }
    fn set_sleeping(&mut self, sleeping: bool) {
        self.inner.set_sleeping(sleeping)
    }

    fn set_disabled(&mut self, disabled: bool) {
        self.inner.set_disabled(disabled)
    }

    fn tx_room(&mut self, now: Duration) -> bool {
        self.inner.tx_room(now)
    }

    fn send_link_packet(&mut self, now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.inner.send_link_packet(now, packet)
    }

    fn clear(&mut self) {
        // A device reset (the driver unloaded): the data path may not run
        // the link again for a while.
        self.flush_counted();
        self.inner.clear()
    }

    fn begin_sends(&mut self) {
        self.inner.begin_sends()
    }

    fn end_sends(&mut self) -> Result<(), LinkError> {
        self.inner.end_sends()
    }
}
