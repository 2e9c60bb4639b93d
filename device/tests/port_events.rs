//! The port's state follows its ib-udp link (AE-01): two ports (engine + UDP
//! link) on loopback hear each other's keepalives; when one goes silent the
//! other's port goes down with a port error event, and comes back with a port
//! active event when it is heard again.

use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use device::fabric::{FabricFile, Node, UdpLink};
use device::port::Port;
use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::VecMemory;
use transport::verbs::Event;

const BEAT: Duration = Duration::from_millis(20);
const DEAD: Duration = Duration::from_millis(100);

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

fn port(f: &FabricFile, name: &str, sock: UdpSocket) -> Port {
    let node = f.by_name(name).unwrap().clone();
    let mut udp = UdpLink::from_socket(f, name, sock).unwrap();
    udp.set_liveness(Some((BEAT, DEAD)));
    let e = Engine::new(PortConfig::new(node.lid, node.guid), Limits::default());
    Port::new(e, Box::new(udp))
}

/// Runs the ports for `d`, returning the events of the first.
fn run(ports: &mut [&mut Port], d: Duration) -> Vec<Event> {
    let mut mem = VecMemory::new(0, 4096);
    let end = Instant::now() + d;
    let mut ev = Vec::new();
    while Instant::now() < end {
        for p in ports.iter_mut() {
            p.run_once(&mut mem, now());
        }
        ev.extend(std::iter::from_fn(|| ports[0].engine_mut().poll_event()));
        std::thread::sleep(Duration::from_millis(2));
    }
    ev
}

#[test]
fn ae_01_port_error_when_the_peer_goes_silent_port_active_when_it_is_back() {
    let sa = UdpSocket::bind("127.0.0.1:0").unwrap();
    let sb = UdpSocket::bind("127.0.0.1:0").unwrap();
    let node = |name: &str, lid: u16, s: &UdpSocket| Node {
        name: name.into(),
        lid,
        guid: 0x1000 + u64::from(lid),
        address: s.local_addr().unwrap(),
    };
    let f = FabricFile::from_nodes(vec![node("a", 1, &sa), node("b", 2, &sb)]).unwrap();
    let b_addr = sb.local_addr().unwrap();
    let mut a = port(&f, "a", sa);
    let mut b = port(&f, "b", sb);
    // Both alive: keepalives both ways, no event, both up.
    assert!(run(&mut [&mut a, &mut b], 5 * DEAD).is_empty());
    assert!(a.is_up() && b.is_up());
    let r = a.link().report().unwrap();
    assert!(r.contains("port_down 0"), "{r}");
    // b stops (its process gone): a's port goes down once, after DEAD.
    drop(b);
    let t0 = Instant::now();
    let mut ev = Vec::new();
    while ev.is_empty() && t0.elapsed() < 20 * DEAD {
        ev = run(&mut [&mut a], BEAT);
    }
    let took = t0.elapsed();
    assert_eq!(ev, vec![Event::PortError]);
    assert!(took >= DEAD / 2 && took < 10 * DEAD, "{took:?}");
    assert!(!a.is_up());
    assert_eq!(a.counters().link_down, 1);
    assert!(
        run(&mut [&mut a], 3 * DEAD).is_empty(),
        "one event per change"
    );
    // b is back at its address: a hears it and its port is active again.
    let sb = UdpSocket::bind(b_addr).unwrap();
    let mut b = port(&f, "b", sb);
    let ev = run(&mut [&mut a, &mut b], 3 * BEAT);
    assert_eq!(ev, vec![Event::PortActive]);
    assert!(a.is_up());
    assert_eq!((a.counters().link_down, a.counters().link_up), (1, 1));
    let r = a.link().report().unwrap();
    assert!(r.contains("port_down 1 port_up 1"), "{r}");
    // Down and up again with nobody taking events (a disabled device): the
    // engine holds the latest state's event alone.
    drop(b);
    let mut mem = VecMemory::new(0, 4096);
    let t0 = Instant::now();
    while a.is_up() && t0.elapsed() < 20 * DEAD {
        a.run_once(&mut mem, now());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!a.is_up());
    let sb = UdpSocket::bind(b_addr).unwrap();
    let mut b = port(&f, "b", sb);
    while !a.is_up() && t0.elapsed() < 40 * DEAD {
        b.run_once(&mut mem, now());
        a.run_once(&mut mem, now());
        std::thread::sleep(Duration::from_millis(2));
    }
    let ev: Vec<Event> = std::iter::from_fn(|| a.engine_mut().poll_event()).collect();
    assert_eq!(ev, vec![Event::PortActive]);
}

#[test]
fn ae_01_a_node_alone_in_its_fabric_stays_up() {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let f = FabricFile::from_nodes(vec![Node {
        name: "solo".into(),
        lid: 1,
        guid: 0x1001,
        address: s.local_addr().unwrap(),
    }])
    .unwrap();
    let mut p = port(&f, "solo", s);
    assert!(run(&mut [&mut p], 3 * DEAD).is_empty());
    assert!(p.is_up());
    assert_eq!(p.link().poll_timeout(), None, "no keepalive timer");
}
