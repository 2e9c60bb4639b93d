//! Link flow control on real sockets (issue 27 item 4; IBA 7.9;
//! `fabric::FlowLink`): two HCAs cabled back to back, each port's link
//! wrapped in the flow-control stage. A sender has no credit before its
//! partner's first FC packet, queues (bounded, `tx_room` false when full)
//! what it may not send, and sends it as the receiver frees its buffer;
//! everything arrives, in order, and no socket drops; VL15 passes without
//! credit. And the fabric file's `flow_control` and `rx_buffer` keys.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{loopback_sockets, ud_packet};
use device::fabric::{Charge, FabricFile, FlowLink, Link, UdpLink, HCA_QUEUE_BLOCKS};
use transport::flow::FlowConfig;

const T0: Duration = Duration::from_secs(1_700_000_000);

fn back_to_back(a: SocketAddr, b: SocketAddr, top: &str) -> FabricFile {
    let text = format!(
        "{top}[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"{a}\"\n\
         [[node]]\nname = \"b\"\nlid = 2\nguid = 2\naddress = \"{b}\"\n\
         [[link]]\nends = [\"a\", \"b\"]\n"
    );
    FabricFile::parse("b2b.toml", &text).expect("a valid fabric")
}

/// a and b back to back, each granting `grant` blocks on VL0.
fn pair(grant: u32) -> (FlowLink<UdpLink>, FlowLink<UdpLink>) {
    let mut s = loopback_sockets(2);
    let f = back_to_back(s[0].1, s[1].1, "");
    assert!(f.flow_control(), "on by default in a cabled fabric");
    let (sb, _) = s.pop().unwrap();
    let (sa, _) = s.pop().unwrap();
    let mut a = UdpLink::from_socket(&f, "a", sa).unwrap();
    let mut b = UdpLink::from_socket(&f, "b", sb).unwrap();
    a.set_liveness(None);
    b.set_liveness(None);
    let cfg = FlowConfig::split(grant, 1);
    (
        FlowLink::new(a, cfg, HCA_QUEUE_BLOCKS, true),
        FlowLink::new(b, cfg, HCA_QUEUE_BLOCKS, true),
    )
}

/// What `l` delivers within a short wait.
fn take(l: &mut FlowLink<UdpLink>, now: Duration) -> Vec<Vec<u8>> {
    std::thread::sleep(Duration::from_millis(20));
    let mut out = Vec::new();
    loop {
        let n = l
            .recv_batch(now, 64, &mut |r| out.push(r.packet.to_vec()))
            .unwrap();
        if n == 0 {
            return out;
        }
    }
}

#[test]
fn a_sender_waits_for_credit_and_everything_arrives_in_order_with_no_socket_drops() {
    let (mut a, mut b) = pair(100);
    let pkts: Vec<Vec<u8>> = (0..150u32)
        .map(|i| ud_packet(1, 2, i, &vec![i as u8; 1000]))
        .collect();
    // Before b's first FC packet a has no credit: everything waits, up to
    // the queue's bound, and then the producer is told to stop.
    let mut next = 0;
    while next < pkts.len() && a.tx_room(T0) {
        a.send(T0, &pkts[next]).unwrap();
        next += 1;
    }
    assert!(next < pkts.len(), "the queue is bounded");
    assert!(next > 10, "but holds a few packets: {next}");
    assert!(take(&mut b, T0).is_empty(), "7.9.2: no data before credit");
    let mut got = Vec::new();
    let mut now = T0;
    for _ in 0..400 {
        now += Duration::from_micros(100);
        // b's FC packets (Init at first, then as it frees) reach a, which
        // sends what the credit allows and keeps producing while it has room.
        b.handle_timeout(now).unwrap();
        a.handle_timeout(now).unwrap();
        take(&mut a, now);
        while next < pkts.len() && a.tx_room(now) {
            a.send(now, &pkts[next]).unwrap();
            next += 1;
        }
        got.extend(take(&mut b, now));
        if got.len() == pkts.len() {
            break;
        }
    }
    assert_eq!(got, pkts, "all of them, in order");
    let fa = a.flow_counters().unwrap();
    let fb = b.flow_counters().unwrap();
    assert!(fa.stalls() > 0, "{fa:?}");
    assert_eq!((fb.rx_overrun, fb.fc_dropped()), (0, 0), "{fb:?}");
    assert!(fb.fc_sent > 0 && fa.fc_received > 0);
    assert_eq!(a.counters().drop_tx_queue_full, 0);
    let report = b.report().unwrap();
    assert!(report.contains("rx_kernel_drops 0"), "{report}");
    assert!(report.contains("\nflow: fc_tx "), "{report}");
}

#[test]
fn vl15_passes_without_credit() {
    let (mut a, mut b) = pair(100);
    let mut smp = ud_packet(1, 2, 0, b"smp");
    smp[0] = 0xf0 | (smp[0] & 0x0f); // VL15
    a.send(T0, &smp).unwrap();
    let data = ud_packet(1, 2, 1, b"data");
    a.send(T0, &data).unwrap();
    assert_eq!(take(&mut b, T0), vec![smp], "VL15 at once, data waits");
}

#[test]
fn a_link_going_down_drops_what_waits_for_credit_and_releases_its_charges() {
    // A switch's egress port whose partner is gone must not keep its
    // ingress ports' buffers charged (they would stop granting credit).
    let (mut a, _b) = pair(100);
    let c = Charge {
        port: 3,
        vl: 0,
        len: 1026,
    };
    for i in 0..4 {
        a.send_charged(T0, &ud_packet(1, 2, i, &[0; 1000]), Some(c))
            .unwrap();
    }
    let mut released = Vec::new();
    a.take_released(&mut released);
    assert!(released.is_empty(), "waiting: still charged");
    a.set_disabled(true); // the SM disables the port: the link is down
    assert!(!a.is_up());
    a.take_released(&mut released);
    assert_eq!(released, vec![c; 4]);
    assert_eq!(a.counters().drop_tx_link_down, 4);
    assert!(a.tx_room(T0));
}

#[test]
fn a_packet_stuck_at_the_head_past_the_hoq_lifetime_is_discarded_and_its_charge_released() {
    // IBA 18.2.5.4: a switch egress whose partner never grants credit (b
    // stays silent: a dead switch whose link is not down yet) holds its
    // packets, and its ingress ports' buffers, for the HOQ lifetime only.
    let (mut a, _b) = pair(100);
    a.set_hoq_life(Some(Duration::from_millis(268)));
    let c = Charge {
        port: 2,
        vl: 0,
        len: 1026,
    };
    for i in 0..3 {
        a.send_charged(T0, &ud_packet(1, 2, i, &[0; 1000]), Some(c))
            .unwrap();
    }
    let mut released = Vec::new();
    a.handle_timeout(T0 + Duration::from_millis(200)).unwrap();
    a.take_released(&mut released);
    assert!(released.is_empty(), "within the lifetime: still waiting");
    // The link asks to be woken when the head's lifetime runs out.
    let wake = a.poll_timeout().expect("a deadline for the head");
    assert!(wake <= T0 + Duration::from_millis(269), "{wake:?}");
    a.handle_timeout(T0 + Duration::from_millis(300)).unwrap();
    a.take_released(&mut released);
    assert_eq!(released, vec![c; 3], "each discarded head frees its charge");
    assert_eq!(a.counters().drop_tx_hoq, 3);
    assert!(a.is_up(), "the link itself stays up");
    assert!(a.report().unwrap().contains("drop_tx_hoq 3"));
}

#[test]
fn flow_control_and_rx_buffer_keys() {
    let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
    let f = back_to_back(a, b, "flow_control = false\nrx_buffer = 262144\n");
    assert!(!f.flow_control());
    assert_eq!(f.rx_buffer(), Some(262_144));
    // A size as the command line's options take it (issue 28 item 5).
    let f = back_to_back(a, b, "rx_buffer = \"256K\"\n");
    assert_eq!(f.rx_buffer(), Some(262_144));
    for (top, why) in [
        (
            "flow_control = \"yes\"\n",
            "flow_control: must be true or false",
        ),
        ("rx_buffer = 12\n", "rx_buffer: must be a byte count"),
        ("rx_buffer = \"2G\"\n", "from 4K to 1G"),
        ("rx_buffer = \"lots\"\n", "rx_buffer: must be a byte count"),
    ] {
        let text = format!("{top}[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"{a}\"\n");
        let e = FabricFile::parse("f", &text).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
    // No cables, no link partner: off whatever the file says.
    let text = format!("[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"{a}\"\n");
    assert!(!FabricFile::parse("f", &text).unwrap().flow_control());
}
