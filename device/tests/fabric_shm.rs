//! The shared-memory link (issue 30 item 1, ARCHITECTURE.md §6): nodes the
//! fabric file puts on one host exchange packets through rings in files both
//! map, the others stay on UDP; a peer that scribbles on a ring, dies or
//! stalls costs only its own traffic, counted.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::{drain_from, loopback_sockets, ud_packet, whole};
use device::fabric::{
    shm_ring_path, FabricFile, Link, ShmLink, UdpLink, SHM_CORRUPT_BACKOFF, SHM_HOLD_MAX,
    SHM_RING_BYTES, SHM_SLOTS, SHM_STALL_AFTER,
};

/// The layout offsets of `shm_ring.rs` a scribbling peer would write to.
const OFF_TAIL: u64 = 64;
const OFF_SLOTS: u64 = 4096;

fn t(ms: u64) -> Duration {
    Duration::from_secs(1_800_000_000) + Duration::from_millis(ms)
}

/// A fabric of `hosts.len()` nodes "n0", "n1", ... (LID i+1) on 127.0.0.1,
/// node i on host `hosts[i]` (`None`: no `host`, UDP only), rings in `dir`;
/// and each node's link (an [`ShmLink`] over its UDP link).
fn fabric(dir: &Path, hosts: &[Option<&str>]) -> (FabricFile, Vec<ShmLink>) {
    let socks = loopback_sockets(hosts.len());
    let mut text = format!("shm_dir = \"{}\"\n", dir.display());
    for (i, ((_, a), h)) in socks.iter().zip(hosts).enumerate() {
        text += &format!(
            "[[node]]\nname = \"n{i}\"\nlid = {}\nguid = {}\naddress = \"{a}\"\n",
            i + 1,
            0x0002_c903_0000_0001u64 + i as u64
        );
        if let Some(h) = h {
            text += &format!("host = \"{h}\"\n");
        }
    }
    let path = dir.join("fabric.toml");
    std::fs::write(&path, text).unwrap();
    let f = FabricFile::load(&path).unwrap();
    let links = socks
        .into_iter()
        .enumerate()
        .map(|(i, (s, _))| {
            let mut u = UdpLink::from_socket(&f, &format!("n{i}"), s).unwrap();
            u.set_liveness(None);
            ShmLink::new(u).unwrap()
        })
        .collect();
    (f, links)
}

fn path(f: &FabricFile, from: usize, to: usize) -> std::path::PathBuf {
    shm_ring_path(f, &f.nodes()[from], &f.nodes()[to])
}

/// Writes `bytes` at `off` of a ring file, as a hostile peer can.
fn scribble(path: &Path, off: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, off).unwrap();
}

#[test]
fn fabric_file_host_puts_nodes_on_one_host_and_refuses_a_bad_host() {
    let dir = tempfile::tempdir().unwrap();
    let (f, links) = fabric(dir.path(), &[Some("h1"), Some("h1"), None, Some("h2")]);
    assert_eq!(f.hosts().co_located(0), vec![1]);
    assert_eq!(f.hosts().co_located(2), Vec::<usize>::new());
    assert_eq!(f.hosts().co_located(3), Vec::<usize>::new());
    assert_eq!(f.hosts().dir(), dir.path());
    let peers: Vec<usize> = links.iter().map(ShmLink::ring_peers).collect();
    assert_eq!(peers, vec![1, 1, 0, 0]);
    // Each node made its receive ring, of the documented size.
    let len = std::fs::metadata(path(&f, 1, 0)).unwrap().len();
    assert_eq!(len, SHM_RING_BYTES as u64);
    let bad =
        "[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:9\"\nhost = \"a b\"\n";
    let e = FabricFile::parse("f.toml", bad).unwrap_err().to_string();
    assert!(e.contains("node \"a\"") && e.contains("`host`"), "{e}");
    let bad = "[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:9\"\nhost = 3\n";
    assert!(FabricFile::parse("f.toml", bad).is_err());
    // Closing a link removes its rings.
    drop(links);
    assert!(!path(&f, 1, 0).exists());
}

#[test]
fn shm_link_carries_packets_between_co_located_nodes_through_the_ring_with_the_senders_lid() {
    let dir = tempfile::tempdir().unwrap();
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    let pkts: Vec<Vec<u8>> = (0..40)
        .map(|i| ud_packet(1, 2, i, &[i as u8; 300]))
        .collect();
    for p in &pkts {
        l[0].send(t(0), p).unwrap();
    }
    let got = drain_from(&mut l[1], t(1));
    assert_eq!(got.len(), pkts.len());
    for (g, p) in got.iter().zip(&pkts) {
        assert_eq!((&g.0, g.1), (p, Some(1)));
    }
    let c = *l[0].counters();
    assert_eq!((c.tx_packets, c.tx_udp_fallback), (40, 0));
    // Nothing went on the socket.
    assert_eq!(l[0].udp().counters().tx_packets, 0);
    assert_eq!(l[1].counters().rx_packets, 40);
}

#[test]
fn shm_link_in_a_mixed_fabric_reaches_the_ring_node_and_the_udp_node() {
    let dir = tempfile::tempdir().unwrap();
    // n0 and n1 share host h; n2 is elsewhere (no host): UDP.
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h"), None]);
    l[0].send(t(0), &ud_packet(1, 2, 1, b"to the ring node"))
        .unwrap();
    l[0].send(t(0), &ud_packet(1, 3, 2, b"to the udp node"))
        .unwrap();
    l[2].send(t(0), &ud_packet(3, 1, 3, b"from the udp node"))
        .unwrap();
    let at1 = drain_from(&mut l[1], t(1));
    let at2 = drain_from(&mut l[2], t(1));
    let at0 = drain_from(&mut l[0], t(1));
    assert_eq!(
        at1,
        vec![(ud_packet(1, 2, 1, b"to the ring node"), Some(1))]
    );
    assert_eq!(at2, vec![(ud_packet(1, 3, 2, b"to the udp node"), Some(1))]);
    assert_eq!(
        at0,
        vec![(ud_packet(3, 1, 3, b"from the udp node"), Some(3))]
    );
    assert_eq!(l[0].counters().tx_packets, 1);
    assert_eq!(l[0].udp().counters().tx_packets, 1);
}

#[test]
fn shm_link_sends_over_udp_until_the_peers_ring_exists() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    // n1's receive ring is gone (n1 not started yet, say).
    std::fs::remove_file(path(&f, 0, 1)).unwrap();
    l[0].send(t(0), &ud_packet(1, 2, 1, b"early")).unwrap();
    assert_eq!(l[0].counters().tx_udp_fallback, 1);
    let got = drain_from(&mut l[1], t(1));
    assert_eq!(got, vec![(ud_packet(1, 2, 1, b"early"), Some(1))]);
}

#[test]
fn shm_doorbell_wakes_a_sleeping_receiver_once_and_is_never_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    // n1 polls (busy): an empty round asks for no doorbell, so packets sent
    // while it polls cost its peer no datagram (issue 30).
    assert!(drain_from(&mut l[1], t(0)).is_empty());
    l[0].send(t(0), &ud_packet(1, 2, 9, b"polled")).unwrap();
    assert_eq!(
        l[0].counters().doorbells_tx,
        0,
        "a polling receiver gets none"
    );
    assert_eq!(drain_from(&mut l[1], t(0)).len(), 1);
    // n1's data path is about to sleep: it asks for doorbells.
    l[1].set_sleeping(true);
    assert_eq!(l[1].poll_timeout(), None, "asleep: nothing but the fd");
    l[0].send(t(1), &ud_packet(1, 2, 1, b"one")).unwrap();
    l[0].send(t(1), &ud_packet(1, 2, 2, b"two")).unwrap();
    assert_eq!(l[0].counters().doorbells_tx, 1, "one doorbell per sleep");
    // The doorbell made n1's descriptor readable.
    let mut pfd = libc::pollfd {
        fd: l[1].raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of a descriptor the link owns, for 2 s at most.
    let ready = unsafe { libc::poll(&mut pfd, 1, 2000) };
    assert_eq!(ready, 1);
    assert_eq!(l[1].poll_timeout(), Some(Duration::ZERO), "packets wait");
    l[1].set_sleeping(false);
    let got = drain_from(&mut l[1], t(2));
    assert_eq!(got.len(), 2);
    assert_eq!(l[1].counters().doorbells_rx, 1);
    // Awake again: no doorbell, however many packets.
    l[0].send(t(2), &ud_packet(1, 2, 3, b"three")).unwrap();
    assert_eq!(l[0].counters().doorbells_tx, 1);
    // Asleep again: the next packet rings.
    assert_eq!(drain_from(&mut l[1], t(3)).len(), 1);
    l[1].set_sleeping(true);
    l[0].send(t(3), &ud_packet(1, 2, 4, b"four")).unwrap();
    assert_eq!(l[0].counters().doorbells_tx, 2);
}

#[test]
fn shm_corrupt_tail_is_counted_and_dropped_other_peers_go_on_and_the_ring_is_remade() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut l) = fabric(dir.path(), &[Some("h"), Some("h"), Some("h")]);
    // n1 publishes one packet, then writes a tail far past the ring.
    l[1].send(t(0), &ud_packet(2, 1, 1, b"fine")).unwrap();
    scribble(&path(&f, 1, 0), OFF_TAIL, &(1u64 << 40).to_le_bytes());
    l[2].send(t(0), &ud_packet(3, 1, 2, b"from n2")).unwrap();
    let got = drain_from(&mut l[0], t(1));
    assert_eq!(got, vec![(ud_packet(3, 1, 2, b"from n2"), Some(3))]);
    let c = *l[0].counters();
    assert_eq!((c.corrupt_index, c.corrupt_length), (1, 0));
    // n1's ring stays unread; n2's goes on.
    l[1].send(t(2), &ud_packet(2, 1, 3, b"lost")).unwrap();
    l[2].send(t(2), &ud_packet(3, 1, 4, b"n2 again")).unwrap();
    let got = drain_from(&mut l[0], t(3));
    assert_eq!(got, vec![(ud_packet(3, 1, 4, b"n2 again"), Some(3))]);
    // After the backoff the ring is made again and n1 reopens it.
    let later = t(3) + SHM_CORRUPT_BACKOFF;
    assert!(l[0].poll_timeout().is_some_and(|d| d <= later));
    l[0].handle_timeout(later).unwrap();
    assert_eq!(l[0].counters().rings_remade, 1);
    l[1].send(later, &ud_packet(2, 1, 5, b"back")).unwrap();
    let got = drain_from(&mut l[0], later);
    assert_eq!(got, vec![(ud_packet(2, 1, 5, b"back"), Some(2))]);
    assert_eq!(l[1].counters().tx_opens, 2);
}

#[test]
fn shm_corrupt_slot_length_is_counted_and_dropped_without_reading_past_the_slot() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    l[1].send(t(0), &ud_packet(2, 1, 1, b"x")).unwrap();
    for len in [u32::MAX, 0] {
        scribble(&path(&f, 1, 0), OFF_SLOTS, &len.to_le_bytes());
        assert!(drain_from(&mut l[0], t(1)).is_empty());
    }
    // Found once: the ring is unread from then on.
    assert_eq!(l[0].counters().corrupt_length, 1);
}

#[test]
fn shm_corrupt_head_makes_the_producer_drop_its_own_packets_to_that_peer_only() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut l) = fabric(dir.path(), &[Some("h"), Some("h"), Some("h")]);
    l[0].send(t(0), &ud_packet(1, 2, 1, b"open")).unwrap();
    // n1 (the consumer) writes a head ahead of the tail.
    scribble(&path(&f, 0, 1), 128, &7u64.to_le_bytes());
    l[0].send(t(1), &ud_packet(1, 2, 2, b"dropped")).unwrap();
    l[0].send(t(1), &ud_packet(1, 3, 3, b"n2")).unwrap();
    let c = *l[0].counters();
    assert_eq!((c.corrupt_index, c.drop_tx_corrupt), (1, 1));
    assert_eq!(
        drain_from(&mut l[2], t(2)),
        vec![(ud_packet(1, 3, 3, b"n2"), Some(1))]
    );
}

#[test]
fn shm_peer_killed_mid_stream_costs_only_its_own_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let (_f, l) = fabric(dir.path(), &[Some("h"), Some("h"), Some("h")]);
    let [mut n0, mut n1, n2]: [ShmLink; 3] = l.try_into().unwrap();
    n0.send(t(0), &ud_packet(1, 2, 0, b"before")).unwrap();
    assert_eq!(drain_from(&mut n1, t(0)).len(), 1);
    // n2 dies: it runs no more code, its rings stay (no Drop: a SIGKILL).
    std::mem::forget(n2);
    // n0 streams to n2 past a ring's worth, and to n1 all along.
    let total = SHM_SLOTS + 300;
    for i in 0..total {
        let now = t(i);
        n0.send(now, &ud_packet(1, 3, i as u32, &[1; 200])).unwrap();
        n0.send(now, &ud_packet(1, 2, i as u32, &[2; 200])).unwrap();
        let got = drain_from_now(&mut n1, now);
        assert_eq!(got, 1, "n1 lost a packet at {i}");
    }
    let c = *n0.counters();
    assert_eq!(c.drop_tx_full, total - SHM_SLOTS);
    assert!(total - SHM_SLOTS > SHM_STALL_AFTER.as_millis() as u64);
    assert_eq!(c.peer_stalls, 1, "{c}");
    assert!(n0.report().unwrap().contains("peer_stalls 1"));
}

#[test]
fn shm_full_ring_holds_the_producer_instead_of_dropping() {
    let dir = tempfile::tempdir().unwrap();
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    let (a, b) = l.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    // The producer asks before each packet, as the port does.
    let mut sent = 0u64;
    let now = t(0);
    while a.tx_room(now) {
        a.send(now, &ud_packet(1, 2, sent as u32, &[3; 100]))
            .unwrap();
        sent += 1;
        assert!(sent <= SHM_SLOTS, "the ring's room is its slots");
    }
    assert_eq!(sent, SHM_SLOTS);
    // Held while the consumer is slow, for less than the bound; a sleeping
    // data path is told to look again soon.
    let later = now + SHM_HOLD_MAX / 2;
    assert!(!a.tx_room(later));
    assert!(a
        .poll_timeout()
        .is_some_and(|d| d > later && d < now + SHM_HOLD_MAX));
    // One slot drained: room again, nothing was dropped.
    assert_eq!(b.recv_batch(later, 1, &mut |_| {}).unwrap(), 1);
    assert!(a.tx_room(later));
    let c = *a.counters();
    assert_eq!(
        (c.drop_tx_full, c.tx_hold_timeouts, c.tx_packets),
        (0, 0, SHM_SLOTS)
    );
    let mut rest = 0;
    for _ in 0..SHM_SLOTS {
        rest += drain_from_now(b, later) as u64;
    }
    assert_eq!(rest, SHM_SLOTS - 1);
}

#[test]
fn shm_dead_peer_holds_the_others_at_most_hold_max() {
    let dir = tempfile::tempdir().unwrap();
    let (_f, l) = fabric(dir.path(), &[Some("h"), Some("h"), Some("h")]);
    let [mut n0, mut n1, n2]: [ShmLink; 3] = l.try_into().unwrap();
    std::mem::forget(n2); // killed: its rings stay, undrained
    let now = t(0);
    for i in 0..SHM_SLOTS {
        assert!(n0.tx_room(now));
        n0.send(now, &ud_packet(1, 3, i as u32, b"to n2")).unwrap();
    }
    // n2's full ring holds n0's port (a packet's ring is known only once
    // built), but only up to the bound; then n1's traffic flows and n2's
    // is dropped and counted, and it is not held for again.
    assert!(!n0.tx_room(now));
    assert!(!n0.tx_room(now + SHM_HOLD_MAX / 2));
    let after = now + SHM_HOLD_MAX;
    assert!(n0.tx_room(after));
    assert_eq!(n0.counters().tx_hold_timeouts, 1);
    assert_eq!(n0.poll_timeout(), None, "no recheck while nothing is held");
    for i in 0..100u64 {
        let at = after + Duration::from_micros(i);
        assert!(n0.tx_room(at), "held again at {i}");
        n0.send(at, &ud_packet(1, 3, i as u32, b"to n2")).unwrap();
        n0.send(at, &ud_packet(1, 2, i as u32, b"to n1")).unwrap();
        assert_eq!(drain_from_now(&mut n1, at), 1);
    }
    let c = *n0.counters();
    assert_eq!((c.drop_tx_full, c.tx_hold_timeouts), (100, 1), "{c}");
    assert!(n0.report().unwrap().contains("tx_hold_timeouts 1"));
}

/// What a link has now, without waiting (rings deliver at once).
fn drain_from_now(link: &mut impl Link, now: Duration) -> usize {
    link.recv_batch(now, 64, &mut |_| {}).unwrap()
}

#[test]
fn shm_ring_kept_closed_by_its_consumer_sends_over_udp_and_reopens_at_most_every_10ms() {
    let dir = tempfile::tempdir().unwrap();
    let (f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    l[0].send(t(0), &ud_packet(1, 2, 0, b"ring")).unwrap();
    // n1 (the consumer) sets `closed` and leaves it set.
    scribble(&path(&f, 0, 1), 256, &1u32.to_le_bytes());
    for i in 0..100u64 {
        // 100 packets within 1 ms.
        let now = t(1) + Duration::from_micros(10 * i);
        l[0].send(now, &ud_packet(1, 2, i as u32 + 1, b"udp"))
            .unwrap();
    }
    let c = *l[0].counters();
    assert_eq!((c.tx_packets, c.tx_udp_fallback), (1, 100));
    assert_eq!(c.tx_opens, 1, "no reopen per packet");
    assert_eq!(drain_from(&mut l[1], t(2)).len(), 101);
}

/// Everything a link delivers now: (packet, its sender's LID, whether the
/// link vouched for its CRCs).
fn drain_vouched(link: &mut impl Link, now: Duration) -> Vec<(Vec<u8>, Option<u16>, bool)> {
    std::thread::sleep(Duration::from_millis(50));
    let mut out = Vec::new();
    while link
        .recv_batch(now, 16, &mut |r| {
            out.push((whole(&r), r.src_lid, r.crcs_vouched))
        })
        .expect("recv")
        > 0
    {}
    out
}

/// `ud_packet` as an engine with `PortConfig::crcs_by_link` builds it: ICRC
/// and VCRC zero.
fn without_crcs(mut p: Vec<u8>) -> Vec<u8> {
    let n = p.len();
    p[n - 6..].fill(0);
    p
}

/// Issue 30 (WF-09 on the wire): a link with rings takes the CRCs from the
/// engine; a ring packet goes without them, marked, and arrives vouched for;
/// one that leaves on UDP (another host, the node's own LID) gets them
/// filled in, so the UDP node takes it as any packet. A link without rings,
/// and the stages that read or change packets, say no; without the offer a
/// ring packet is not vouched for.
#[test]
fn shm_link_takes_the_crcs_leaves_them_out_on_the_rings_and_fills_them_in_for_udp() {
    use device::fabric::{CaptureLink, FaultLink, FaultSpec};
    let dir = tempfile::tempdir().unwrap();
    // n0 and n1 share host h; n2 is elsewhere (no host): UDP.
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h"), None]);
    assert!(!l[2].take_crcs(), "no rings: nothing to gain");
    assert!(l[0].take_crcs());
    let to_ring = ud_packet(1, 2, 1, b"to the ring node");
    let to_udp = ud_packet(1, 3, 2, b"to the udp node");
    let to_self = ud_packet(1, 1, 3, b"to its own LID");
    for p in [&to_ring, &to_udp, &to_self] {
        l[0].send(t(0), &without_crcs(p.clone())).unwrap();
    }
    let at1 = drain_vouched(&mut l[1], t(1));
    assert_eq!(at1, vec![(without_crcs(to_ring.clone()), Some(1), true)]);
    let at2 = drain_vouched(&mut l[2], t(1));
    assert_eq!(at2, vec![(to_udp.clone(), Some(1), false)]);
    let at0 = drain_vouched(&mut l[0], t(1));
    assert_eq!(at0, vec![(to_self.clone(), Some(1), false)]);
    let c = *l[0].counters();
    assert_eq!((c.tx_packets, c.tx_crcs_filled), (1, 2));
    assert_eq!(l[1].counters().rx_crcs_vouched, 1);
    // n1 did not take the CRCs: its ring packets carry them and are not
    // vouched for.
    l[1].send(t(2), &ud_packet(2, 1, 4, b"back")).unwrap();
    let back = drain_vouched(&mut l[0], t(3));
    assert_eq!(back, vec![(ud_packet(2, 1, 4, b"back"), Some(2), false)]);
    assert_eq!(l[0].counters().rx_crcs_vouched, 0);
    // Stages that change or record packets keep the CRCs in the engine.
    let (_g, links) = fabric(dir.path(), &[Some("g"), Some("g")]);
    let mut links = links.into_iter();
    let mut fault = FaultLink::new(links.next().unwrap(), FaultSpec::default());
    assert!(!fault.take_crcs());
    let mut capture = CaptureLink::new(links.next().unwrap(), Vec::new()).unwrap();
    assert!(!capture.take_crcs());
}

/// Issue 30: a link whose CRCs were taken lends a long data packet in its
/// ring slot (`Received::lent`, the engine places the payload from there):
/// the stages above get a private copy of its head, the whole reads back as
/// sent. A short packet and a VL15 one are copied whole.
#[test]
fn shm_link_with_crcs_taken_lends_long_data_packets_in_their_slot() {
    use transport::engine::LENT_HEAD;
    let dir = tempfile::tempdir().unwrap();
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h")]);
    assert!(l[0].take_crcs() && l[1].take_crcs());
    let long = without_crcs(ud_packet(1, 2, 1, &[0x5a; 3000]));
    let short = without_crcs(ud_packet(1, 2, 2, b"short"));
    let mut vl15 = long.clone();
    vl15[0] |= 0xf0; // LRH:VL (IBA 7.7.1)
    for p in [&long, &short, &vl15] {
        l[0].send(t(0), p).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    l[1].recv_batch(t(1), 16, &mut |r| {
        got.push((r.packet.to_vec(), r.lent.is_some(), whole(&r)))
    })
    .unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[0], (long[..LENT_HEAD].to_vec(), true, long.clone()));
    assert_eq!(got[1], (short.clone(), false, short.clone()));
    assert_eq!(got[2], (vl15.clone(), false, vl15.clone()));
    assert_eq!(l[1].counters().rx_lent, 1);
}

/// Issue 30: where the CRCs were taken, the link gives the engine a ring
/// slot to build a packet's payload in (`Link::payload_slot`) and publishes
/// the packet around it (`Link::send_slotted`): the peer reads the whole
/// packet as built. A DLID without a ring (or whose ring the first packet
/// to it has not opened yet) gets no slot; a slot not followed
/// by its packet is given back by the next send; a slotted send without a
/// slot is dropped and counted.
#[test]
fn shm_link_builds_a_payload_in_the_peers_ring_slot_and_publishes_the_packet_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_f, mut l) = fabric(dir.path(), &[Some("h"), Some("h"), None]);
    assert!(l[0].take_crcs() && l[1].take_crcs());
    // The payload of a UD SEND starts after LRH, BTH and DETH.
    let payload: Vec<u8> = (0..3000).map(|i| (i * 7) as u8).collect();
    let want = without_crcs(ud_packet(1, 2, 1, &payload));
    let at = 8 + 12 + 8;
    assert_eq!(want[at..at + payload.len()], payload[..]);
    assert!(l[0].payload_slot(3, at, payload.len()).is_none(), "n2: UDP");
    assert!(l[0].payload_slot(1, at, payload.len()).is_none(), "own LID");
    // The first packet to a peer opens its ring (`send`), then slots come.
    assert!(
        l[0].payload_slot(2, at, payload.len()).is_none(),
        "not open"
    );
    let first = without_crcs(ud_packet(1, 2, 0, b"first"));
    l[0].send(t(0), &first).unwrap();
    let room = l[0].payload_slot(2, at, payload.len()).expect("a slot");
    room.copy_from(&payload);
    let mut around = want.clone();
    around[at..at + payload.len()].fill(0xee); // not the packet's bytes
    l[0].send_slotted(t(0), &around).unwrap();
    // A slot asked for and then not used: the next send takes it back.
    let _ = l[0].payload_slot(2, at, 100).expect("a slot");
    let other = without_crcs(ud_packet(1, 2, 2, b"whole"));
    l[0].send(t(0), &other).unwrap();
    l[0].send_slotted(t(0), &around).unwrap();
    let got = drain_vouched(&mut l[1], t(1));
    assert_eq!(
        got,
        vec![
            (first, Some(1), true),
            (want, Some(1), true),
            (other, Some(1), true)
        ],
        "the packet built around its slot, then the whole one; not the unreserved one"
    );
    let c = *l[0].counters();
    assert_eq!((c.tx_packets, c.tx_in_slot, c.drop_tx_slot_lost), (3, 1, 1));
}
