//! The wire parsers (transport/src/wire): native packets, RoCEv2 frames, the
//! transport part alone and pcap files. Whatever parses must emit, and what is
//! emitted must parse back to the same repr (WF-01..WF-10).
#![no_main]

use libfuzzer_sys::fuzz_target;
use transport::wire::pcap::PcapReader;
use transport::wire::roce::RoceRepr;
use transport::wire::{PacketRepr, TransportRepr};
use vhca_fuzz::{fix_native, fix_roce};

fn native_round_trip(buf: &[u8]) {
    let Ok(p) = PacketRepr::parse(buf) else {
        return;
    };
    let mut out = vec![0; p.buffer_len()];
    let n = p.emit(&mut out).expect("a parsed packet emits");
    assert_eq!(n, out.len());
    let q = PacketRepr::parse(&out).expect("an emitted packet parses");
    assert_eq!(p, q, "native packet round trip");
}

fn roce_round_trip(buf: &[u8]) {
    let Ok(r) = RoceRepr::parse(buf) else {
        return;
    };
    let mut out = vec![0; r.buffer_len()];
    let n = r.emit(&mut out).expect("a parsed frame emits");
    assert_eq!(n, out.len());
    let q = RoceRepr::parse(&out).expect("an emitted frame parses");
    assert_eq!(r, q, "RoCEv2 frame round trip");
}

fn transport_round_trip(buf: &[u8]) {
    let Ok(t) = TransportRepr::parse(buf) else {
        return;
    };
    let mut out = vec![0; t.buffer_len()];
    let n = t.emit(&mut out).expect("a parsed transport part emits");
    assert_eq!(n, out.len());
    let q = TransportRepr::parse(&out).expect("an emitted transport part parses");
    assert_eq!(t, q, "transport round trip");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    match mode % 5 {
        0 => {
            native_round_trip(&buf);
            roce_round_trip(&buf);
        }
        1 => {
            fix_native(&mut buf);
            native_round_trip(&buf);
        }
        2 => {
            fix_roce(&mut buf);
            roce_round_trip(&buf);
        }
        3 => transport_round_trip(&buf),
        _ => {
            if let Ok(r) = PcapReader::new(&buf) {
                for rec in r.take(1024) {
                    let Ok(rec) = rec else { continue };
                    let bytes = rec.frame.bytes();
                    native_round_trip(bytes);
                    roce_round_trip(bytes);
                }
            }
        }
    }
});
