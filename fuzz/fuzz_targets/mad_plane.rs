//! The management plane's sans-IO cores (issue 26 item 7; ARCHITECTURE.md §3a,
//! §3b): an HCA's SMA (`transport::mad::Sma`) fed SMPs, time, link changes and
//! data-packet arrivals in any order, a switch (`transport::switch`) fed
//! whole packets on any port with link changes, time and trap polls, and the
//! Baseboard Management Agent (`transport::mad::bma`, AD-12) fed MADs and time.
//! The first byte picks which.
//!
//! A packet record may ask for its CRCs to be made right (the switch checks the
//! VCRC first, so raw bytes would seldom get past it) or for the bytes to be
//! wrapped as a VL15 UD SEND to QP0, so the fuzzer spends its time in the SMP
//! paths. Oracles besides "no panic, no hang": every packet the switch makes
//! parses with valid CRCs, every SMA response is 256 bytes of class 0x01/0x81
//! with the response bit set, and the SMA's pending traps stay within
//! `MAX_PENDING_TRAPS`; every BMA response is 256 bytes of class 0x05 marked a
//! response (the R bit, or a BMSend's modifier bit 0), and B_KeyViolations
//! never goes down.
#![no_main]

use libfuzzer_sys::fuzz_target;
use transport::mad::attr::{node_type, NodeDescription};
use transport::mad::bma::{bm_method, Bma, ATTR_MOD_RESPONSE, CLASS_BM};
use transport::mad::sma::{MadContext, NodeIdentity, PortState, Sma, SmaOutput, MAX_PENDING_TRAPS};
use transport::switch::{Egress, Switch, SwitchConfig, SwitchOut};
use transport::verbs::Time;
use transport::wire::crc::icrc_vcrc_native;
use transport::wire::ext::DethRepr;
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, ExtHeaders, LrhRepr, PacketRepr, TransportRepr};

const GUID: u64 = 0x0002_c903_0000_0001;

struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (a, b) = self.0.split_at_checked(n)?;
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    }
    /// Up to `n` bytes (fewer at the end of the input).
    fn upto(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        self.take(n).unwrap_or_default()
    }
}

fn check_response(mad: &[u8]) {
    assert_eq!(mad.len(), 256);
    assert!(mad[1] == 0x01 || mad[1] == 0x81, "class {:#x}", mad[1]);
    assert!(mad[3] & 0x80 != 0, "method {:#x} is not a response", mad[3]);
}

fn sma(mut r: Input) {
    let node = NodeIdentity {
        node_type: node_type::CA,
        num_ports: 1,
        system_image_guid: GUID,
        node_guid: GUID,
        device_id: 0x1af4,
        revision: 1,
        vendor_id: 0x0002c9,
        description: NodeDescription::from_text("vhca fuzz"),
    };
    let mut s = Sma::new(node, PortState::new(1, GUID + 1, 16, 64));
    let mut now = Time(1_000_000);
    s.link_up(now);
    let mut steps = 0;
    while let Some(op) = r.u8() {
        steps += 1;
        if steps > 256 {
            break;
        }
        match op % 6 {
            0 => {
                let (Some(in_port), Some(slid)) = (r.u8(), r.u16()) else {
                    return;
                };
                // Mostly a whole MAD, sometimes short (the SMA's length check).
                let len = if op & 0x80 != 0 {
                    usize::from(op & 0x7f) * 2
                } else {
                    256
                };
                let mut mad = r.upto(len).to_vec();
                if op & 0x80 == 0 {
                    mad.resize(256, 0);
                }
                match s.handle_mad(&mad, &MadContext { in_port, slid }, now) {
                    SmaOutput::Reply { mad, .. } => check_response(&mad[..]),
                    SmaOutput::ToSm(m) => assert_eq!(m.len(), 256),
                    SmaOutput::Nothing => {}
                }
            }
            1 => {
                let Some(dt) = r.u32() else { return };
                now = now.plus_ns(u64::from(dt) * 1_000);
                if s.poll_timeout().is_some_and(|t| t <= now) {
                    s.handle_timeout(now);
                }
            }
            2 => {
                // One trap per poll (the first due).
                if let Some(t) = s.poll_transmit(now) {
                    assert_eq!(t.mad.len(), 256);
                    if s.pending_traps() > MAX_PENDING_TRAPS {
                        panic!("{} traps pending", s.pending_traps());
                    }
                }
            }
            3 => while s.poll_event().is_some() {},
            4 => {
                if op & 0x40 != 0 {
                    s.link_down(now)
                } else {
                    s.link_up(now)
                }
            }
            _ => s.data_packet_received(now),
        }
        assert!(s.pending_traps() <= MAX_PENDING_TRAPS);
    }
}

/// A VL15 UD SEND Only to QP0 carrying `payload` (an SMP, mostly).
fn smp_packet(dlid: u16, slid: u16, payload: &[u8]) -> Vec<u8> {
    let repr = PacketRepr {
        lrh: LrhRepr {
            vl: 15,
            sl: 0,
            dlid,
            slid,
        },
        grh: None,
        transport: TransportRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                solicited: false,
                mig_req: false,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: 0,
                ack_req: false,
                psn: 0,
            },
            ext: ExtHeaders {
                deth: Some(DethRepr { qkey: 0, src_qp: 0 }),
                ..ExtHeaders::default()
            },
            payload,
        },
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).expect("sized by buffer_len");
    buf
}

/// Rewrites the ICRC and VCRC of a native packet (no GRH when LRH:LNH says so).
fn fix_crcs(pkt: &mut [u8]) {
    if pkt.len() < 8 + 12 + 6 {
        return;
    }
    let has_grh = pkt[1] & 0x3 == 0x3;
    if has_grh && pkt.len() < 8 + 40 + 12 + 6 {
        return;
    }
    let n = pkt.len();
    let (icrc, vcrc) = icrc_vcrc_native(&pkt[..n - 6], has_grh);
    pkt[n - 6..n - 2].copy_from_slice(&icrc.to_le_bytes());
    pkt[n - 2..].copy_from_slice(&vcrc.to_le_bytes());
}

fn switch(mut r: Input) {
    let Some(ports) = r.u8() else { return };
    let mut sw = Switch::new(&SwitchConfig {
        num_ports: 1 + ports % 8,
        node_guid: GUID,
        system_image_guid: GUID,
        device_id: 0x1af4,
        vendor_id: 0x0008f1,
        revision: 1,
        description: NodeDescription::from_text("vhca switch fuzz"),
        linear_fdb_cap: 256,
        multicast_fdb_cap: 64,
    });
    for p in 1..=sw.num_ports() {
        sw.link_up(p);
    }
    let mut now = Time(1_000_000);
    let mut out: Vec<SwitchOut> = Vec::new();
    let mut steps = 0;
    while let Some(op) = r.u8() {
        steps += 1;
        if steps > 256 {
            break;
        }
        match op % 4 {
            0 | 1 => {
                let (Some(in_port), Some(len)) = (r.u8(), r.u16()) else {
                    return;
                };
                let body = r.upto(usize::from(len) % 512);
                let mut pkt = if op % 4 == 1 {
                    let (Some(dlid), Some(slid)) = (r.u16(), r.u16()) else {
                        return;
                    };
                    smp_packet(dlid, slid, body)
                } else {
                    body.to_vec()
                };
                if op & 0x80 != 0 {
                    fix_crcs(&mut pkt);
                }
                out.clear();
                sw.handle_packet(&pkt, in_port, now, &mut out);
                for o in &out {
                    assert!(o.port >= 1 && o.port <= sw.num_ports(), "port {}", o.port);
                    if let Egress::New(p) = &o.packet {
                        PacketRepr::parse(p).expect("a packet the switch made parses");
                    }
                }
                now = now.plus_ns(1_000);
            }
            2 => {
                let Some(p) = r.u8() else { return };
                if op & 0x40 != 0 {
                    sw.link_down(p)
                } else {
                    sw.link_up(p)
                }
            }
            _ => {
                now = now.plus_ns(1_000_000 << (op >> 4));
                out.clear();
                sw.poll_transmit(now, &mut out);
                for o in &out {
                    assert!(o.port >= 1 && o.port <= sw.num_ports(), "port {}", o.port);
                    if let Egress::New(p) = &o.packet {
                        PacketRepr::parse(p).expect("a trap the switch made parses");
                    }
                }
                assert!(sw.pending_traps() <= MAX_PENDING_TRAPS);
            }
        }
    }
}

fn bma(mut r: Input) {
    let mut b = Bma::new();
    let mut now = Time(1_000_000);
    let mut steps = 0;
    while let Some(op) = r.u8() {
        steps += 1;
        if steps > 256 {
            break;
        }
        let before = b.bkey_info().violations;
        if op & 1 == 0 {
            // Mostly a whole MAD of the class, sometimes short or of another.
            let len = if op & 0x80 != 0 {
                usize::from(op & 0x7e)
            } else {
                256
            };
            let mut mad = r.upto(len).to_vec();
            if op & 0x80 == 0 {
                mad.resize(256, 0);
                if op & 0x40 == 0 {
                    mad[1] = CLASS_BM;
                }
            }
            if let Some(resp) = b.handle_mad(&mad, now) {
                assert_eq!(resp.len(), 256);
                assert_eq!(resp[1], CLASS_BM);
                let attr_mod = u32::from_be_bytes([resp[20], resp[21], resp[22], resp[23]]);
                assert!(
                    resp[3] & 0x80 != 0
                        || (resp[3] == bm_method::SEND && attr_mod & ATTR_MOD_RESPONSE != 0),
                    "method {:#x} is not a response",
                    resp[3]
                );
            }
        } else {
            let Some(dt) = r.u32() else { return };
            now = now.plus_ns(u64::from(dt) * 1_000);
            b.handle_timeout(now);
            assert!(b.poll_timeout().is_none_or(|t| t > now));
        }
        assert!(b.bkey_info().violations >= before);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 3 {
        0 => sma(Input(rest)),
        1 => switch(Input(rest)),
        _ => bma(Input(rest)),
    }
});
