//! WF-11 / ARCHITECTURE.md §6 capture stage: every packet sent and received through a
//! link goes to an ERF pcap file, which parses back with
//! `transport::wire::pcap::PcapReader` into exactly what was sent and received,
//! with the caller's timestamps.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{recv_within, ud_packet, RecordingLink};
use device::fabric::{CaptureCounters, CaptureLink, FaultLink, Link};
use transport::wire::pcap::{Frame, PcapReader, LINKTYPE_ERF};
use transport::wire::PacketRepr;

const T0: Duration = Duration::from_secs(1_700_000_000);

/// Reads a capture back as (timestamp, packet) pairs.
fn read_capture(bytes: &[u8]) -> Vec<(Duration, Vec<u8>)> {
    let r = PcapReader::new(bytes).expect("a pcap file");
    assert_eq!(r.link_type(), LINKTYPE_ERF);
    r.map(|rec| {
        let rec = rec.expect("a good record");
        assert!(!rec.truncated);
        let Frame::Infiniband(p) = rec.frame else {
            panic!("not an InfiniBand record: {rec:?}")
        };
        (rec.timestamp, p.to_vec())
    })
    .collect()
}

#[test]
fn capture_wf11_records_udp_traffic_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let (a, mut b, _fabric) = common::udp_pair(dir.path());
    let path = dir.path().join("a.pcap");
    let mut a = CaptureLink::create(a, &path).expect("capture file");
    let mut expected = Vec::new();
    let mut t = T0 + Duration::from_micros(123);
    let tick = |t: &mut Duration| {
        *t += Duration::from_micros(1_001);
        *t
    };

    // a -> b, several sizes (payload 0..4096, pad 0..3).
    for (i, len) in [0usize, 1, 2, 3, 4, 4096].into_iter().enumerate() {
        let now = tick(&mut t);
        let p = ud_packet(1, 2, i as u32, &vec![0x5a; len]);
        a.send(now, &p).unwrap();
        expected.push((now, p.clone()));
        assert_eq!(recv_within(&mut b, now), Some(p));
    }
    // b -> a, received through the capture.
    for i in 0..3u32 {
        let p = ud_packet(2, 1, 100 + i, b"reply");
        b.send(t, &p).unwrap();
        let now = tick(&mut t);
        let got = recv_within(&mut a, now).expect("b's packet");
        assert_eq!(got, p);
        expected.push((now, p));
    }
    // AD-04 loopback: recorded once sent and once received.
    let me = ud_packet(1, 1, 7, b"self");
    let now = tick(&mut t);
    a.send(now, &me).unwrap();
    expected.push((now, me.clone()));
    let now = tick(&mut t);
    assert_eq!(recv_within(&mut a, now), Some(me.clone()));
    expected.push((now, me));

    assert_eq!(
        *a.counters(),
        CaptureCounters {
            tx_records: 7,
            rx_records: 4,
            errors: 0
        }
    );
    let (link, _file) = a.into_parts().unwrap();
    assert_eq!(link.counters().tx_packets, 6);
    let got = read_capture(&std::fs::read(&path).unwrap());
    assert_eq!(got, expected);
    for (_, p) in &got {
        PacketRepr::parse(p).expect("captured packets are intact");
    }
}

#[test]
fn capture_wf11_position_decides_before_or_after_faults() {
    let pkts: Vec<Vec<u8>> = (0..10).map(|i| ud_packet(1, 2, i, b"x")).collect();
    let drop_all = "drop=1,seed=1".parse().unwrap();

    // Outside the fault stage: what the engine sent.
    let mut outer = CaptureLink::new(
        FaultLink::new(RecordingLink::default(), drop_all),
        Vec::new(),
    )
    .unwrap();
    for (i, p) in pkts.iter().enumerate() {
        outer.send(T0 + Duration::from_micros(i as u64), p).unwrap();
    }
    let (fault, file) = outer.into_parts().unwrap();
    assert!(fault.inner().sent.is_empty());
    let got = read_capture(&file);
    assert_eq!(got.len(), 10);
    assert!(got.iter().zip(&pkts).all(|((_, g), p)| g == p));

    // Inside: what went on the wire.
    let inner = CaptureLink::new(RecordingLink::default(), Vec::new()).unwrap();
    let mut f = FaultLink::new(inner, drop_all);
    for p in &pkts {
        f.send(T0, p).unwrap();
    }
    let (_, file) = f.into_inner().into_parts().unwrap();
    assert!(read_capture(&file).is_empty());
}

/// A sink that takes the file header and then fails.
struct FullDisk(usize);

impl Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0 >= 24 {
            return Err(std::io::Error::other("disk full"));
        }
        let n = buf.len().min(24 - self.0);
        self.0 += n;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn capture_wf11_failure_is_counted_and_the_packet_still_goes() {
    let mut c = CaptureLink::new(RecordingLink::default(), FullDisk(0)).unwrap();
    let p = ud_packet(1, 2, 0, b"still");
    c.send(T0, &p).unwrap();
    c.inner_mut().inbox.push_back(p.clone());
    let mut buf = vec![0; device::fabric::MAX_PACKET_LEN];
    assert_eq!(c.recv(T0, &mut buf).unwrap(), Some(p.len()));
    assert_eq!(
        *c.counters(),
        CaptureCounters {
            tx_records: 0,
            rx_records: 0,
            errors: 2
        }
    );
    assert_eq!(c.inner().sent, vec![(T0, p)]);
}

#[test]
fn capture_is_flushed_by_a_deadline_so_a_running_capture_reads_whole() {
    // Issue 17: `tshark -r` of a running device's capture. Records wait in a
    // buffer; the link's deadline says when they must reach the file, even
    // if no other packet ever comes.
    let dir = tempfile::tempdir().unwrap();
    let (a, mut b, _fabric) = common::udp_pair(dir.path());
    let path = dir.path().join("a.pcap");
    let mut a = CaptureLink::create(a, &path).expect("capture file");
    assert_eq!(a.poll_timeout(), None, "nothing buffered, no deadline");
    let p = ud_packet(1, 2, 7, b"hello");
    a.send(T0, &p).unwrap();
    assert_eq!(recv_within(&mut b, T0), Some(p.clone()));
    let due = T0 + device::fabric::CAPTURE_FLUSH_AFTER;
    assert_eq!(a.poll_timeout(), Some(due));
    // Before the deadline the record may still be buffered; at it, it is in
    // the file, whole.
    a.handle_timeout(due - Duration::from_millis(1)).unwrap();
    a.handle_timeout(due).unwrap();
    assert_eq!(a.poll_timeout(), None);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(read_capture(&on_disk), vec![(T0, p.clone())]);
    // A device reset flushes too.
    a.send(due, &p).unwrap();
    a.clear();
    assert_eq!(read_capture(&std::fs::read(&path).unwrap()).len(), 2);
}
