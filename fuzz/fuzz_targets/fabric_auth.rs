//! The fabric key stage (device/src/fabric/auth.rs; ARCHITECTURE.md §9, issue 13)
//! as a hostile network meets it (issue 25 item 7): a receiving `AuthLink` over a
//! link that hands it the fuzzer's datagrams, with the address's LID the UDP link
//! would report (or none); two senders holding the fabric key and one holding
//! another key tag packets (`AuthLink::send`, so the tags are real), and the
//! fuzzer replays, reorders, cuts, changes and forges what they sent. What must
//! hold: every datagram the stage takes from its link is delivered or counted as
//! dropped (one or the other, exactly); only a datagram a key holder sent,
//! unchanged, is delivered, and at most once per (SLID, sequence number); one
//! taken from another node's address than its SLID's is never delivered (a
//! permissive SLID, a directed-route SMP's, is the address's node). A 6-byte
//! link packet (flow control, issue 27) passes untagged and unchanged.
#![no_main]

use std::cell::RefCell;
use std::collections::{HashSet, VecDeque};
use std::os::fd::RawFd;
use std::rc::Rc;
use std::time::Duration;

use arbitrary::Arbitrary;
use device::fabric::{AuthLink, FabricKey, Link, LinkError, Received, SEQ_LEN, TAG_LEN};
use libfuzzer_sys::fuzz_target;
use transport::flow::FC_PACKET_LEN;
use transport::mad::dr::PERMISSIVE_LID as PERMISSIVE;
use vhca_fuzz::native_packet;

/// What the inner links share with the harness: datagrams waiting to be
/// received (with the LID of the address they came from), what was sent, how
/// many the receiver took, and the datagram being handed up (so the harness
/// can see its trailer).
#[derive(Default)]
struct Wire {
    rx: VecDeque<(Vec<u8>, Option<u16>)>,
    sent: Vec<Vec<u8>>,
    taken: usize,
    current: Vec<u8>,
}

struct Fake(Rc<RefCell<Wire>>);

impl Link for Fake {
    fn send(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        self.0.borrow_mut().sent.push(packet.to_vec());
        Ok(())
    }
    fn recv_batch(
        &mut self,
        _now: Duration,
        max: usize,
        deliver: &mut dyn FnMut(Received<'_>),
    ) -> Result<usize, LinkError> {
        let mut n = 0;
        while n < max {
            let Some((d, src_lid)) = self.0.borrow_mut().rx.pop_front() else {
                break;
            };
            {
                let mut w = self.0.borrow_mut();
                w.taken += 1;
                w.current = d.clone();
            }
            deliver(Received {
                packet: &d,
                lent: None,
                src_lid,
                crcs_vouched: false,
            });
            n += 1;
        }
        Ok(n)
    }
    fn raw_fd(&self) -> RawFd {
        -1
    }
    fn poll_timeout(&self) -> Option<Duration> {
        None
    }
    fn handle_timeout(&mut self, _now: Duration) -> Result<(), LinkError> {
        Ok(())
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// Sender `who` (0 and 1: the fabric key, LIDs 2 and 3; 2: another key,
    /// LID 4) sends a native packet from its LID (or the fuzzer's SLID) to LID
    /// 1 around `transport`, at `now_ms`.
    Send {
        who: u8,
        slid: Option<u16>,
        now_ms: u32,
        transport: Vec<u8>,
    },
    /// Datagram `idx` of those sent, changed (byte `at` XOR `x`), cut to `cut`
    /// bytes (0: whole), taken from the address of LID `from` (None: unknown).
    Deliver {
        idx: u16,
        at: u16,
        x: u8,
        cut: u16,
        from: Option<u16>,
    },
    /// Any bytes, from LID `from`.
    Raw { bytes: Vec<u8>, from: Option<u16> },
    /// The receiver takes up to `max` datagrams.
    Recv(u8),
}

const KEY_A: [u8; 32] = [7; 32];
const KEY_B: [u8; 32] = [9; 32];

fuzz_target!(|ops: Vec<Op>| {
    let rx_wire = Rc::new(RefCell::new(Wire::default()));
    let mut rx = AuthLink::new(Fake(rx_wire.clone()), &FabricKey::from_bytes(KEY_A));
    let tx_wires: Vec<_> = (0..3)
        .map(|_| Rc::new(RefCell::new(Wire::default())))
        .collect();
    let mut txs: Vec<_> = tx_wires
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let key = if i == 2 { KEY_B } else { KEY_A };
            AuthLink::new(Fake(w.clone()), &FabricKey::from_bytes(key))
        })
        .collect();
    // Every datagram a fabric key holder sent (the only ones that may pass),
    // every datagram sent (for replays), and the (SLID, seq) delivered.
    let mut genuine: HashSet<Vec<u8>> = HashSet::new();
    let mut history: Vec<Vec<u8>> = Vec::new();
    let mut delivered: HashSet<(u16, u64)> = HashSet::new();
    let now = Duration::from_secs(1_700_000_000);
    for op in ops.iter().take(256) {
        match op {
            Op::Send {
                who,
                slid,
                now_ms,
                transport,
            } => {
                let i = usize::from(*who % 3);
                let lid = slid.unwrap_or(2 + i as u16);
                let p = native_packet(lid, 1, 0, None, transport);
                let t = now + Duration::from_millis(u64::from(*now_ms));
                let _ = txs[i].send(t, &p);
                let sent = std::mem::take(&mut tx_wires[i].borrow_mut().sent);
                for d in sent {
                    if i < 2 {
                        genuine.insert(d.clone());
                    }
                    if history.len() < 1024 {
                        history.push(d);
                    }
                }
            }
            Op::Deliver {
                idx,
                at,
                x,
                cut,
                from,
            } => {
                if history.is_empty() {
                    continue;
                }
                let mut d = history[usize::from(*idx) % history.len()].clone();
                if !d.is_empty() {
                    let n = d.len();
                    d[usize::from(*at) % n] ^= x;
                }
                if *cut != 0 {
                    d.truncate(usize::from(*cut));
                }
                rx_wire.borrow_mut().rx.push_back((d, *from));
            }
            Op::Raw { bytes, from } => {
                rx_wire.borrow_mut().rx.push_back((bytes.clone(), *from));
            }
            Op::Recv(max) => {
                let before = (rx.counters().dropped(), rx_wire.borrow().taken);
                let (mut got, mut links) = (0usize, 0usize);
                let r = rx.recv_batch(now, usize::from(*max), &mut |r| {
                    let w = rx_wire.borrow();
                    let d = &w.current;
                    if r.packet.len() == FC_PACKET_LEN {
                        // A link packet (IBA 7.9.4 flow control) passes as
                        // it came, untagged like a keepalive, and is not
                        // counted as data delivered: the flow stage outside
                        // takes it from the cable's peer only.
                        assert_eq!(d.as_slice(), r.packet, "a link packet changed");
                        links += 1;
                        return;
                    }
                    got += 1;
                    assert!(genuine.contains(d), "a datagram no key holder sent passed");
                    assert!(d.len() == r.packet.len() + SEQ_LEN + TAG_LEN);
                    assert_eq!(&d[..r.packet.len()], r.packet);
                    let slid = u16::from_be_bytes([d[6], d[7]]);
                    // A permissive SLID (a directed-route SMP) is the sender
                    // the link names, whose window it shares.
                    let sender = match r.src_lid {
                        Some(s) if slid == PERMISSIVE => s,
                        Some(s) => {
                            assert_eq!(s, slid, "delivered from another node's address");
                            s
                        }
                        None => slid,
                    };
                    let m = r.packet.len();
                    let seq = u64::from_be_bytes(d[m..m + SEQ_LEN].try_into().unwrap());
                    assert!(delivered.insert((sender, seq)), "a replay passed");
                });
                assert_eq!(r.ok(), Some(got));
                let taken = rx_wire.borrow().taken - before.1;
                let dropped = (rx.counters().dropped() - before.0) as usize;
                assert_eq!(
                    taken,
                    got + links + dropped,
                    "a datagram neither delivered nor counted"
                );
            }
        }
    }
});
