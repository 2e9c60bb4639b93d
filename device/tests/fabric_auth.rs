//! The fabric key stage (issue 13, ARCHITECTURE.md §9): two `AuthLink`s with one
//! key exchange packets unchanged, over queues and over UDP on 127.0.0.1; a
//! datagram forged without the key, a bit-flipped one, a truncated one, a
//! replayed one and one from a peer with another key (or none) are dropped and
//! counted per reason; the key comes from a key file, the fabric file or
//! `--fabric-key-file`.

mod common;

use std::os::fd::RawFd;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use clap::Parser;
use common::{drain, recv_within, ud_packet, RecordingLink};
use device::cli::{Cli, FabricMode};
use device::fabric::{
    AuthCounters, AuthLink, FabricFile, FabricKey, Link, LinkError, Received, MAX_AHEAD,
    MAX_PACKET_LEN, MIN_PACKET_LEN, REPLAY_WINDOW, TAG_LEN, TRAILER_LEN,
};

const T0: Duration = Duration::from_secs(1_700_000_000);
const KEY_HEX: &str = "4f1c2d3e5a6b7c8d9e0f112233445566778899aabbccddeeff0011223344aa55";

fn key() -> FabricKey {
    FabricKey::from_hex(KEY_HEX).unwrap()
}

fn other_key() -> FabricKey {
    FabricKey::from_bytes([0x5a; 32])
}

/// A stage over a queue link: what it sends is in `inner().sent`.
fn queue_stage(k: &FabricKey) -> AuthLink<RecordingLink> {
    AuthLink::new(RecordingLink::default(), k)
}

/// The datagrams `from` sent since the last call, taken out of its queue.
fn take_sent(from: &mut AuthLink<RecordingLink>) -> Vec<Vec<u8>> {
    from.inner_mut().sent.drain(..).map(|(_, d)| d).collect()
}

/// Hands `datagrams` to `to` and returns the packets it delivers.
fn deliver(to: &mut AuthLink<RecordingLink>, datagrams: &[Vec<u8>]) -> Vec<Vec<u8>> {
    deliver_at(to, T0, datagrams)
}

/// [`deliver`] with the receiver's clock at `now`.
fn deliver_at(
    to: &mut AuthLink<RecordingLink>,
    now: Duration,
    datagrams: &[Vec<u8>],
) -> Vec<Vec<u8>> {
    to.inner_mut().inbox.extend(datagrams.iter().cloned());
    let mut buf = vec![0; MAX_PACKET_LEN];
    let mut out = Vec::new();
    loop {
        match to.recv(now, &mut buf).unwrap() {
            Some(n) => out.push(buf[..n].to_vec()),
            None if to.inner().inbox.is_empty() => break,
            // A call stops after a budget of drops, so that a flood cannot hold
            // the caller; the stage then asks to be called again at once.
            None => assert_eq!(to.poll_timeout(), Some(Duration::ZERO)),
        }
    }
    assert_eq!(to.poll_timeout(), None);
    out
}

#[test]
fn auth_same_key_passes_packets_unchanged_with_a_trailer_on_the_wire() {
    let k = key();
    let mut a = queue_stage(&k);
    let mut b = queue_stage(&k);
    let packets: Vec<Vec<u8>> = (0..50u32)
        .map(|i| ud_packet(1, 2, i, &vec![i as u8; (i as usize * 83) % 4097]))
        .collect();
    // Batched like a port round: the stage forwards begin/end to the link.
    a.begin_sends();
    for p in &packets {
        a.send(T0, p).unwrap();
    }
    a.end_sends().unwrap();
    let wire = take_sent(&mut a);
    assert_eq!(wire.len(), packets.len());
    for (w, p) in wire.iter().zip(&packets) {
        assert_eq!(w.len(), p.len() + TRAILER_LEN);
        assert_eq!(
            &w[..p.len()],
            &p[..],
            "the packet goes out in front, unchanged"
        );
    }
    // Sequence numbers: from the first send's time, one up per datagram.
    let seqs: Vec<u64> = wire
        .iter()
        .map(|w| {
            let m = w.len() - TRAILER_LEN;
            u64::from_be_bytes(w[m..m + 8].try_into().unwrap())
        })
        .collect();
    let t0 = T0.as_nanos() as u64;
    assert_eq!(seqs, (t0..t0 + 50).collect::<Vec<_>>());
    assert_eq!(deliver(&mut b, &wire), packets);
    let c = *b.counters();
    assert_eq!((c.rx_verified, c.dropped()), (50, 0), "{c:?}");
    assert_eq!(a.counters().tx_tagged, 50);
    // The report line names the key by id only, with the counters.
    let r = b.report().unwrap();
    assert!(r.contains(&format!("auth (key {})", k.id())), "{r}");
    assert!(r.contains("rx_verified 50"), "{r}");
    assert!(!r.contains(&KEY_HEX[..16]), "{r}");
}

#[test]
fn auth_forged_flipped_truncated_and_replayed_datagrams_are_dropped_per_reason() {
    let k = key();
    let mut a = queue_stage(&k);
    let mut b = queue_stage(&k);
    let p = ud_packet(1, 2, 7, b"seven");
    a.send(T0, &p).unwrap();
    let good = take_sent(&mut a).pop().unwrap();
    assert_eq!(
        deliver(&mut b, std::slice::from_ref(&good)),
        vec![p.clone()]
    );

    // Replay of the datagram just accepted: a good tag, a seen number.
    assert!(deliver(&mut b, std::slice::from_ref(&good)).is_empty());
    assert_eq!(b.counters().drop_rx_replay, 1);

    // A forger without the key: the plain packet (untagged), and the packet
    // with a guessed trailer (a fresh sequence number, a made-up tag).
    let mut guessed = p.clone();
    guessed.extend_from_slice(&(T0.as_nanos() as u64 + 1000).to_be_bytes());
    guessed.extend_from_slice(&[0xa5; TAG_LEN]);
    assert!(deliver(&mut b, &[p.clone(), guessed]).is_empty());
    assert_eq!(b.counters().drop_rx_untagged, 1);
    assert_eq!(b.counters().drop_rx_bad_tag, 1);

    // Every single bit flipped, one datagram each: packet, number and tag are
    // all covered, so every one fails the tag.
    let flipped: Vec<Vec<u8>> = (0..good.len() * 8)
        .map(|bit| {
            let mut d = good.clone();
            d[bit / 8] ^= 1 << (bit % 8);
            d
        })
        .collect();
    let before = *b.counters();
    assert!(deliver(&mut b, &flipped).is_empty());
    let c = *b.counters();
    let bad = c.drop_rx_bad_tag - before.drop_rx_bad_tag;
    let untagged = c.drop_rx_untagged - before.drop_rx_untagged;
    // A flip in LRH:PktLen can make the datagram look like one untagged
    // packet; it is dropped either way, and nothing else gets through.
    assert_eq!(bad + untagged, flipped.len() as u64, "{c:?}");
    assert_eq!(c.rx_verified, 1);

    // Truncated: one byte short (the tag no longer verifies), and shorter than
    // any packet with a trailer.
    let one_short = good[..good.len() - 1].to_vec();
    let tiny = good[..MIN_PACKET_LEN + TRAILER_LEN - 1].to_vec();
    let empty = Vec::new();
    let before = *b.counters();
    assert!(deliver(&mut b, &[one_short, tiny, empty]).is_empty());
    let c = *b.counters();
    assert_eq!(c.drop_rx_bad_tag - before.drop_rx_bad_tag, 1, "{c:?}");
    assert_eq!(c.drop_rx_short - before.drop_rx_short, 2, "{c:?}");
    assert_eq!(c.rx_verified, 1);

    // The good stream goes on afterwards.
    let q = ud_packet(1, 2, 8, b"eight");
    a.send(T0, &q).unwrap();
    assert_eq!(deliver(&mut b, &take_sent(&mut a)), vec![q]);
}

#[test]
fn auth_a_peer_with_another_key_or_none_gets_nothing_through() {
    let mut a = queue_stage(&key());
    let mut stranger = queue_stage(&other_key());
    for i in 0..20 {
        stranger.send(T0, &ud_packet(3, 1, i, b"hello")).unwrap();
    }
    assert!(deliver(&mut a, &take_sent(&mut stranger)).is_empty());
    assert_eq!(a.counters().drop_rx_bad_tag, 20);
    // And a keyed node's datagrams are nothing to the stranger either.
    a.send(T0, &ud_packet(1, 3, 1, b"hi")).unwrap();
    assert!(deliver(&mut stranger, &take_sent(&mut a)).is_empty());
    assert_eq!(stranger.counters().drop_rx_bad_tag, 1);
    // A node without a key sends plain packets: untagged.
    let plain: Vec<Vec<u8>> = (0..5).map(|i| ud_packet(4, 1, i, b"plain")).collect();
    assert!(deliver(&mut a, &plain).is_empty());
    assert_eq!(a.counters().drop_rx_untagged, 5);
    assert_eq!(a.counters().rx_verified, 0);
}

#[test]
fn auth_reordering_within_the_window_passes_older_is_a_replay() {
    let k = key();
    let mut a = queue_stage(&k);
    let mut b = queue_stage(&k);
    let n = REPLAY_WINDOW as usize + 10;
    for i in 0..n {
        a.send(T0, &ud_packet(1, 2, i as u32, b"x")).unwrap();
    }
    let wire = take_sent(&mut a);
    // The newest first, then the rest: all but the 10 that fell out of the
    // window pass, each once.
    let mut order = vec![wire[n - 1].clone()];
    order.extend(wire[..n - 1].iter().rev().cloned());
    let got = deliver(&mut b, &order);
    assert_eq!(got.len(), REPLAY_WINDOW as usize, "{:?}", b.counters());
    assert_eq!(b.counters().drop_rx_replay, 10);
    assert!(deliver(&mut b, &wire).is_empty());
    assert_eq!(b.counters().drop_rx_replay, 10 + n as u64);
}

#[test]
fn auth_a_restarted_sender_numbers_above_its_earlier_run() {
    let k = key();
    let mut b = queue_stage(&k);
    let mut a = queue_stage(&k);
    for i in 0..100 {
        a.send(T0, &ud_packet(1, 2, i, b"first run")).unwrap();
    }
    assert_eq!(deliver(&mut b, &take_sent(&mut a)).len(), 100);
    // The same node started again a millisecond later: a new stage, numbers
    // from its own start time, accepted by the receiver that remembers the
    // first run's numbers.
    let mut a2 = queue_stage(&k);
    let later = T0 + Duration::from_millis(1);
    a2.send(later, &ud_packet(1, 2, 0, b"second run")).unwrap();
    assert_eq!(deliver(&mut b, &take_sent(&mut a2)).len(), 1);
    assert_eq!(b.counters().dropped(), 0);
    // A reset of the device (Link::clear) keeps the numbering going.
    let before = a2.next_seq();
    a2.clear();
    a2.send(later, &ud_packet(1, 2, 1, b"after reset")).unwrap();
    assert_eq!(a2.next_seq(), before + 1);
    assert_eq!(deliver(&mut b, &take_sent(&mut a2)).len(), 1);
}

/// Issue 25 item 4: a node holding the key forges the victim's address and
/// LRH:SLID on one datagram numbered near 2^64. It is dropped and counted
/// (more than MAX_AHEAD ahead of the receiver's clock) before it moves the
/// victim's window, so the victim's genuine datagrams, before and after it,
/// are still accepted.
#[test]
fn auth_a_forged_far_future_sequence_number_does_not_shut_out_the_victim() {
    let k = key();
    let mut victim = queue_stage(&k);
    let mut b = queue_stage(&k);
    victim.send(T0, &ud_packet(1, 2, 0, b"before")).unwrap();
    assert_eq!(deliver(&mut b, &take_sent(&mut victim)).len(), 1);
    // The forger's stage with its clock near the end of time numbers its
    // datagram u64::MAX - 10; the packet names the victim (SLID 1).
    let mut forger = queue_stage(&k);
    forger
        .send(
            Duration::from_nanos(u64::MAX - 10),
            &ud_packet(1, 2, 0, b"forged"),
        )
        .unwrap();
    let forged = take_sent(&mut forger);
    assert!(deliver(&mut b, &forged).is_empty());
    let c = *b.counters();
    assert_eq!((c.drop_rx_future, c.dropped()), (1, 1), "{c:?}");
    // The device set counts it with the replay window's refusals.
    let h = c.into_device(Default::default());
    assert_eq!(h.fabric_key_rx_replay, 1);
    // The victim goes on, a millisecond later and at its next numbers.
    let after: Vec<Vec<u8>> = (1..20u32).map(|i| ud_packet(1, 2, i, b"after")).collect();
    let later = T0 + Duration::from_millis(1);
    for p in &after {
        victim.send(later, p).unwrap();
    }
    assert_eq!(
        deliver_at(&mut b, later, &take_sent(&mut victim)),
        after,
        "{:?}",
        b.counters()
    );
    assert_eq!(b.counters().dropped(), 1);
    assert!(b.report().unwrap().contains("drop_rx_future 1"));
}

/// Issue 25 item 4: a forged number within MAX_AHEAD of the receiver's clock
/// passes (nothing tells it from a sender with a clock ahead) and holds the
/// victim's datagrams back, but only until the victim's numbers, which follow
/// its clock, pass it: at most MAX_AHEAD, not until a restart.
#[test]
fn auth_a_forged_number_within_the_bound_holds_the_victim_back_at_most_max_ahead() {
    let k = key();
    let mut victim = queue_stage(&k);
    let mut b = queue_stage(&k);
    let mut forger = queue_stage(&k);
    let edge = T0 + MAX_AHEAD;
    forger.send(edge, &ud_packet(1, 2, 0, b"forged")).unwrap();
    assert_eq!(deliver(&mut b, &take_sent(&mut forger)).len(), 1);
    // Held back meanwhile: older than the window below the forged number.
    victim.send(T0, &ud_packet(1, 2, 1, b"held")).unwrap();
    assert!(deliver(&mut b, &take_sent(&mut victim)).is_empty());
    assert_eq!(b.counters().drop_rx_replay, 1);
    // Once the victim's clock has passed it, its datagrams flow again.
    let t = edge + Duration::from_millis(1);
    let p = ud_packet(1, 2, 2, b"flows");
    victim.send(t, &p).unwrap();
    assert_eq!(deliver_at(&mut b, t, &take_sent(&mut victim)), vec![p]);
}

#[test]
fn auth_oversized_packets_are_dropped_on_send_not_truncated() {
    let mut a = queue_stage(&key());
    let big = vec![0u8; MAX_PACKET_LEN - TRAILER_LEN + 1];
    a.send(T0, &big).unwrap();
    assert!(take_sent(&mut a).is_empty());
    assert_eq!(a.counters().drop_tx_oversized, 1);
    let fits = vec![0u8; MAX_PACKET_LEN - TRAILER_LEN];
    a.send(T0, &fits).unwrap();
    assert_eq!(take_sent(&mut a)[0].len(), MAX_PACKET_LEN);
}

#[test]
fn auth_over_udp_same_key_exchanges_another_key_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _fabric) = common::udp_pair(dir.path());
    let k = key();
    let mut a = AuthLink::new(a, &k);
    let mut b = AuthLink::new(b, &k);
    for i in 0..20u32 {
        let ab = ud_packet(1, 2, i, &vec![i as u8; 4096]);
        let ba = ud_packet(2, 1, 100 + i, &vec![!(i as u8); i as usize]);
        a.send(T0, &ab).unwrap();
        b.send(T0, &ba).unwrap();
        assert_eq!(recv_within(&mut b, T0).as_deref(), Some(&ab[..]));
        assert_eq!(recv_within(&mut a, T0).as_deref(), Some(&ba[..]));
    }
    // On the socket the datagrams carried the trailer.
    assert_eq!(
        a.inner().counters().tx_bytes,
        20 * (ud_packet(1, 2, 0, &[0; 4096]).len() + TRAILER_LEN) as u64
    );
    // A packet to the own LID loops back through the stage too.
    let own = ud_packet(1, 1, 5, b"self");
    a.send(T0, &own).unwrap();
    assert_eq!(recv_within(&mut a, T0), Some(own));

    // b's key changes (a peer configured with another key): a gets nothing.
    let mut b_wrong = AuthLink::new(b.into_inner(), &other_key());
    for i in 0..10 {
        b_wrong
            .send(T0, &ud_packet(2, 1, 200 + i, b"wrong key"))
            .unwrap();
    }
    assert!(drain(&mut a, T0).is_empty());
    let c: AuthCounters = *a.counters();
    assert_eq!(c.drop_rx_bad_tag, 10, "{c:?}");
    assert_eq!(c.rx_verified, 21);
}

#[test]
fn auth_key_files_fabric_file_keys_and_the_command_line() {
    let d = tempfile::tempdir().unwrap();
    let key_path = d.path().join("fabric.key");
    std::fs::write(&key_path, format!("{KEY_HEX}\n")).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let k = FabricKey::load(&key_path).unwrap();
    assert_eq!(k, key());
    assert_eq!(k.permission_warning(), None);
    // World-readable: loaded, with a warning for the log.
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = FabricKey::load(&key_path)
        .unwrap()
        .permission_warning()
        .unwrap();
    assert!(
        w.contains("readable by everyone") && w.contains("chmod 600"),
        "{w}"
    );
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();

    let nodes = "[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:18515\"\n";
    let write = |name: &str, text: String| {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    };
    // key_file relative to the fabric file's folder.
    let f = write("rel.toml", format!("key_file = \"fabric.key\"\n{nodes}"));
    assert_eq!(FabricFile::load(&f).unwrap().key(), Some(&key()));
    // key inline; the fabric file's permissions count for it.
    let f = write("inline.toml", format!("key = \"{KEY_HEX}\"\n{nodes}"));
    let fabric = FabricFile::load(&f).unwrap();
    assert_eq!(fabric.key(), Some(&key()));
    assert_eq!(fabric.key().unwrap().permission_warning(), None);
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
    let w = FabricFile::load(&f)
        .unwrap()
        .key()
        .unwrap()
        .permission_warning();
    assert!(w.unwrap().contains("its group"));
    // None: no key.
    let plain = write("plain.toml", nodes.to_string());
    assert_eq!(FabricFile::load(&plain).unwrap().key(), None);
    // Refused, one line naming the file and the problem.
    for (text, want) in [
        (
            format!("key = \"{KEY_HEX}\"\nkey_file = \"fabric.key\"\n{nodes}"),
            "not both",
        ),
        (format!("key = \"abcd\"\n{nodes}"), "64 hex digits"),
        (format!("key = 5\n{nodes}"), "must be a string"),
        (
            format!("key_file = \"missing.key\"\n{nodes}"),
            "cannot read",
        ),
        (
            format!("key = \"{}\"\n{nodes}", "0".repeat(64)),
            "placeholder",
        ),
        (
            format!("secret = 1\n{nodes}"),
            "unknown top-level key `secret`",
        ),
    ] {
        let f = write("bad.toml", text);
        let e = FabricFile::load(&f).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("bad.toml"), "{e}");
        assert!(!e.contains('\n') && !e.contains(KEY_HEX), "{e}");
    }
    // A key file that is not one is not read whole.
    let huge = write("huge.key", "a".repeat(1 << 20));
    let e = FabricKey::load(&huge).unwrap_err().to_string();
    assert!(e.contains("longer than"), "{e}");

    // --fabric-key-file wins over the fabric file's key; the key of the mode.
    let other = write("other.key", "11".repeat(32));
    let inline = d.path().join("inline.toml");
    let sock = d.path().join("a.sock");
    let cli = |extra: &[&str]| {
        let mut args = vec![
            "vhca",
            "--socket",
            sock.to_str().unwrap(),
            "--fabric",
            inline.to_str().unwrap(),
            "--node",
            "a",
        ];
        args.extend_from_slice(extra);
        Cli::try_parse_from(args)
            .map_err(|e| e.to_string())
            .and_then(|c| c.check().map_err(|e| e.to_string()))
    };
    let key_of = |c: device::cli::Config| match c.mode {
        FabricMode::IbUdp { key, .. } => key,
        FabricMode::Roce { .. } => panic!("InfiniBand mode"),
    };
    assert_eq!(key_of(cli(&[]).unwrap()), Some(key()));
    let over = key_of(cli(&["--fabric-key-file", other.to_str().unwrap()]).unwrap());
    assert_eq!(over, Some(FabricKey::from_bytes([0x11; 32])));
    let e = cli(&["--fabric-key-file", "/nonexistent/k"]).unwrap_err();
    assert!(
        e.starts_with("error: --fabric-key-file /nonexistent/k:"),
        "{e}"
    );
    let e = Cli::try_parse_from([
        "vhca",
        "--socket",
        "s",
        "--tap",
        "t0",
        "--mac",
        "52:54:00:00:00:01",
        "--fabric-key-file",
        "k",
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("--fabric-key-file") && e.contains("--tap"),
        "{e}"
    );
}

/// A link that hands out queued datagrams with the sender's LID it names for
/// each, as the UDP link does from the source address.
#[derive(Default)]
struct FromLink {
    inbox: std::collections::VecDeque<(Vec<u8>, Option<u16>)>,
}

impl Link for FromLink {
    fn send(&mut self, _now: Duration, _packet: &[u8]) -> Result<(), LinkError> {
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
            let Some((p, src_lid)) = self.inbox.pop_front() else {
                break;
            };
            deliver(Received {
                packet: &p,
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

/// Packets as lent, each with the sender's LID the link named.
type Lent = Vec<(Vec<u8>, Option<u16>)>;

/// Everything `to` delivers in one call of `recv_batch(max)`, with the sender
/// LIDs, and the count it returned.
fn batch(to: &mut impl Link, max: usize) -> (usize, Lent) {
    let mut out = Vec::new();
    let n = to
        .recv_batch(T0, max, &mut |r| out.push((r.packet.to_vec(), r.src_lid)))
        .unwrap();
    (n, out)
}

#[test]
fn auth_recv_batch_lends_verified_packets_with_their_sender_and_bounds_the_drops_per_call() {
    // Issue 12's lending receive path with the key on: each datagram is
    // checked in the inner link's buffer and lent on without its trailer,
    // with the sender's LID the inner link named; a flood of forgeries stops
    // a call after the drop budget (256) and the stage asks to be called
    // again at once, so the caller's loop goes on (ARCHITECTURE.md §9).
    let k = key();
    let mut a = queue_stage(&k);
    let packets: Vec<Vec<u8>> = (0..5u32)
        .map(|i| ud_packet(1, 2, i, &[i as u8; 64]))
        .collect();
    for p in &packets {
        a.send(T0, p).unwrap();
    }
    let wire = take_sent(&mut a);
    let mut forged = wire[0].clone();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    let mut b = AuthLink::new(FromLink::default(), &k);
    b.inner_mut()
        .inbox
        .extend((0..300).map(|_| (forged.clone(), Some(1))));
    b.inner_mut()
        .inbox
        .extend(wire.iter().map(|w| (w.clone(), Some(1))));
    let (n, got) = batch(&mut b, 64);
    assert_eq!((n, got.len()), (0, 0));
    assert_eq!(b.counters().drop_rx_bad_tag, 256);
    assert_eq!(
        b.inner().inbox.len(),
        300 - 256 + 5,
        "no more read than the budget"
    );
    assert_eq!(b.poll_timeout(), Some(Duration::ZERO));
    // The next call: the rest of the flood, then the good ones, up to `max`.
    let (n, got) = batch(&mut b, 3);
    assert_eq!(n, 3);
    let want: Vec<(Vec<u8>, Option<u16>)> = packets.iter().map(|p| (p.clone(), Some(1))).collect();
    assert_eq!(got, want[..3]);
    assert_eq!(b.poll_timeout(), None);
    let (n, got) = batch(&mut b, 64);
    assert_eq!((n, &got[..]), (2, &want[3..]));
    let c = *b.counters();
    assert_eq!(
        (c.rx_verified, c.drop_rx_bad_tag, c.dropped()),
        (5, 300, 300)
    );
    assert_eq!(batch(&mut b, 64).0, 0);
}

#[test]
fn auth_a_datagram_replayed_from_another_nodes_address_is_dropped_and_spares_the_window() {
    // A forger who captured node 1's datagram sends it from node 3's address
    // (a UDP source address is forged easily): the tag is good, but the link
    // names node 3 while the tagged LRH:SLID is 1. It is dropped before it
    // marks any window, so node 1's own copy, arriving after it, still passes,
    // and node 3's window does not jump to node 1's numbers.
    let k = key();
    let mut one = queue_stage(&k);
    // Numbers above node 3's, within MAX_AHEAD of the receiver's clock (T0).
    let later = T0 + Duration::from_secs(1);
    one.send(later, &ud_packet(1, 2, 1, b"from one")).unwrap();
    let d = take_sent(&mut one).pop().unwrap();
    let mut three = queue_stage(&k);
    three.send(T0, &ud_packet(3, 2, 1, b"from three")).unwrap();
    let d3 = take_sent(&mut three).pop().unwrap();

    let mut b = AuthLink::new(FromLink::default(), &k);
    b.inner_mut().inbox.push_back((d.clone(), Some(3)));
    b.inner_mut().inbox.push_back((d.clone(), Some(1)));
    b.inner_mut().inbox.push_back((d3, Some(3)));
    let (n, got) = batch(&mut b, 64);
    assert_eq!(n, 2);
    assert_eq!(
        got,
        vec![
            (ud_packet(1, 2, 1, b"from one"), Some(1)),
            (ud_packet(3, 2, 1, b"from three"), Some(3)),
        ]
    );
    let c = *b.counters();
    assert_eq!((c.drop_rx_wrong_sender, c.dropped()), (1, 1), "{c:?}");
    // A link that cannot name the sender (None): the tagged SLID's window.
    b.inner_mut().inbox.push_back((d, None));
    assert_eq!(batch(&mut b, 64).0, 0);
    assert_eq!(b.counters().drop_rx_replay, 1);
}

#[test]
fn auth_over_udp_packets_built_in_the_lent_send_buffer_keep_their_gso_runs() {
    // Issue 12: while batching, the UDP link lends its send buffer; the stage
    // lends it on short of the trailer (same start, so the CRC fold's
    // alignment, WF-09), writes the trailer after the packet and sends it from
    // the buffer: no copy. Every datagram grows by the same 24 bytes, so runs
    // of same-size packets still leave as GSO sends and arrive whole.
    let dir = tempfile::tempdir().unwrap();
    let (a, b, _fabric) = common::udp_pair(dir.path());
    let k = key();
    let (mut a, mut b) = (AuthLink::new(a, &k), AuthLink::new(b, &k));
    assert!(a.inner().offloads().gso, "the host kernel has UDP GSO");
    assert!(a.send_buffer().is_none(), "only while batching");
    // Two RDMA WRITEs' worth: a longer first, 18 PMTU middles, a shorter last.
    let mut pkts = Vec::new();
    for m in 0..2u32 {
        pkts.push(ud_packet(1, 2, m * 100, &[0xf0; 1100]));
        for i in 1..19 {
            pkts.push(ud_packet(1, 2, m * 100 + i, &vec![i as u8; 1024]));
        }
        pkts.push(ud_packet(1, 2, m * 100 + 19, &[0x0f; 200]));
    }
    let own = ud_packet(1, 1, 500, b"to myself");
    a.begin_sends();
    for p in &pkts {
        let buf = a.send_buffer().expect("lent while batching");
        assert_eq!(buf.as_ptr() as usize % 16, 12);
        assert_eq!(buf.len(), MAX_PACKET_LEN - TRAILER_LEN);
        buf[..p.len()].copy_from_slice(p);
        a.send_from_buffer(T0, p.len()).unwrap();
    }
    // Built longer than the buffer lent: dropped, nothing sent.
    a.send_buffer().unwrap();
    a.send_from_buffer(T0, MAX_PACKET_LEN - TRAILER_LEN + 1)
        .unwrap();
    // Sent without a buffer lent: dropped.
    a.send_from_buffer(T0, 64).unwrap();
    // Looped back to the own LID from the lent buffer, tagged too.
    let buf = a.send_buffer().unwrap();
    buf[..own.len()].copy_from_slice(&own);
    a.send_from_buffer(T0, own.len()).unwrap();
    a.end_sends().unwrap();
    let got = drain(&mut b, T0);
    assert_eq!(got, pkts);
    let (ca, cu) = (*a.counters(), *a.inner().counters());
    assert_eq!(
        (ca.tx_tagged, ca.drop_tx_oversized, ca.drop_tx_not_lent),
        (41, 1, 1),
        "{ca:?}"
    );
    // Each WRITE's 18 middles and its last leave as one GSO run.
    assert_eq!((cu.tx_packets, cu.tx_gso_runs), (40, 2), "{cu:?}");
    let wire: usize = pkts.iter().map(|p| p.len() + TRAILER_LEN).sum();
    assert_eq!(cu.tx_bytes, wire as u64);
    let cb = *b.counters();
    assert_eq!((cb.rx_verified, cb.dropped()), (40, 0), "{cb:?}");
    assert_eq!(recv_within(&mut a, T0).as_deref(), Some(&own[..]));
}
