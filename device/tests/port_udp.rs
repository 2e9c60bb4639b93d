//! Two ports (engine + ib-udp link) over real UDP sockets on loopback: the glue of
//! ARCHITECTURE.md §2 steps 3-4 without PCI. With faults on both links, RC WRITEs and
//! SENDs of every size arrive byte-exact, exactly once (RL-01..RL-03 over a real
//! socket; the engine's own simulation covers the protocol in depth). The same
//! over the shared-memory link of two nodes on one host (issue 30 item 1):
//! faults at the link, rings under it.

use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use device::fabric::{FabricFile, FaultLink, FaultSpec, Link, Node, ShmLink, UdpLink};
use device::port::Port;
use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::VecMemory;
use transport::verbs::{
    Access, AddressVector, AttrMask, Mtu, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, SendData,
    SendFlags, SendWr, Sge, WcStatus, WrOpcode,
};

const BASE: u64 = 0x1000_0000;
const MEM: usize = 8 << 20;

struct Side {
    port: Port,
    mem: VecMemory,
    key: u32,
    qp: u32,
    cq: u32,
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Two nodes on 127.0.0.1; with `shm`, both on one host, rings in that folder.
fn fabric(shm: Option<&std::path::Path>) -> (FabricFile, UdpSocket, UdpSocket) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.1:0").unwrap();
    let nodes = vec![
        Node {
            name: "a".into(),
            lid: 1,
            guid: 0x0002_c903_0000_0001,
            address: a.local_addr().unwrap(),
        },
        Node {
            name: "b".into(),
            lid: 2,
            guid: 0x0002_c903_0000_0002,
            address: b.local_addr().unwrap(),
        },
    ];
    let f = FabricFile::from_nodes(nodes).unwrap();
    let f = match shm {
        Some(dir) => f.with_hosts(vec![Some("h".into()); 2], Some(dir.into())),
        None => f,
    };
    (f, a, b)
}

fn side(f: &FabricFile, name: &str, sock: UdpSocket, faults: Option<FaultSpec>) -> Side {
    let node = f.by_name(name).unwrap().clone();
    let udp = UdpLink::from_socket(f, name, sock).unwrap();
    let udp: Box<dyn Link + Send> = if f.hosts().host(0).is_some() {
        Box::new(ShmLink::new(udp).unwrap())
    } else {
        Box::new(udp)
    };
    let link: Box<dyn Link + Send> = match faults {
        Some(spec) => Box::new(FaultLink::new(udp, spec)),
        None => udp,
    };
    let mut e = Engine::new(PortConfig::new(node.lid, node.guid), Limits::default());
    let pd = e.mrs().alloc_pd().unwrap();
    let pages = (0..(MEM as u64 / 4096)).map(|i| BASE + i * 4096).collect();
    let key = e
        .mrs()
        .reg_mr(pd, BASE, MEM as u64, Access(15), 4096, pages)
        .unwrap();
    let cq = e.create_cq().unwrap();
    let qp = e
        .create_qp(QpInit {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 256,
                max_recv_wr: 256,
                max_send_sge: 2,
                max_recv_sge: 2,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    Side {
        port: Port::new(e, link),
        mem: VecMemory::new(BASE, MEM),
        key,
        qp,
        cq,
    }
}

fn connect(s: &mut Side, rlid: u16, rqp: u32, sq_psn: u32, rq_psn: u32) {
    let e = s.port.engine_mut();
    let t = transport::verbs::Time(now().as_nanos() as u64);
    let mut a = QpAttr {
        state: Some(QpState::Init),
        port_num: 1,
        access: Access(15),
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::PORT | AttrMask::ACCESS_FLAGS;
    e.modify_qp(s.qp, &a, m, t).unwrap();
    a.state = Some(QpState::Rtr);
    a.path_mtu = Mtu::M1024;
    a.dest_qp_num = rqp;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.av = AddressVector {
        dlid: rlid,
        ..AddressVector::default()
    };
    let m = AttrMask::STATE
        | AttrMask::AV
        | AttrMask::PATH_MTU
        | AttrMask::DEST_QPN
        | AttrMask::RQ_PSN
        | AttrMask::MAX_DEST_RD_ATOMIC
        | AttrMask::MIN_RNR_TIMER;
    e.modify_qp(s.qp, &a, m, t).unwrap();
    a.state = Some(QpState::Rts);
    a.sq_psn = sq_psn;
    a.timeout = 8; // ~1 ms: loss recovery by timeout stays quick
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let m = AttrMask::STATE
        | AttrMask::TIMEOUT
        | AttrMask::RETRY_CNT
        | AttrMask::RNR_RETRY
        | AttrMask::SQ_PSN
        | AttrMask::MAX_QP_RD_ATOMIC;
    e.modify_qp(s.qp, &a, m, t).unwrap();
}

fn pair(faults: Option<FaultSpec>, shm: Option<&std::path::Path>) -> (Side, Side) {
    let (f, sa, sb) = fabric(shm);
    let fb = faults.map(|s| FaultSpec {
        seed: s.seed ^ 0x5555,
        ..s
    });
    let mut a = side(&f, "a", sa, faults);
    let mut b = side(&f, "b", sb, fb);
    let (qa, qb) = (a.qp, b.qp);
    connect(&mut a, 2, qb, 0xff_fff0, 0xff_ff00);
    connect(&mut b, 1, qa, 0xff_ff00, 0xff_fff0);
    (a, b)
}

/// Runs both ports until `done` holds or the deadline passes.
fn run_until(
    a: &mut Side,
    b: &mut Side,
    secs: u64,
    mut done: impl FnMut(&mut Side, &mut Side) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !done(a, b) {
        assert!(Instant::now() < end, "no progress within {secs} s");
        let t = now();
        let n = a.port.run_once(&mut a.mem, t) + b.port.run_once(&mut b.mem, t);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

fn pattern(mem: &mut VecMemory, off: usize, len: usize, seed: u8) {
    for (i, x) in mem.bytes[off..off + len].iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8;
    }
}

fn wr(id: u64, op: WrOpcode, addr: u64, len: u32, lkey: u32) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: op,
        flags: SendFlags::SIGNALED,
        data: SendData::Sges(vec![Sge {
            addr,
            length: len,
            lkey,
        }]),
        imm_or_inv: 0,
        remote_addr: 0,
        rkey: 0,
        compare: 0,
        swap_add: 0,
        ud: None,
    }
}

fn transfer_all_sizes(faults: Option<FaultSpec>, shm: Option<&std::path::Path>) {
    let (mut a, mut b) = pair(faults, shm);
    let sizes = [0u32, 1, 1023, 1024, 1025, 4096, 65_537, 1 << 20, 3 << 20];
    for (i, &len) in sizes.iter().enumerate() {
        let seed = i as u8;
        pattern(&mut a.mem, 0, len as usize, seed);
        // WRITE into b at 4 MiB.
        let mut w = wr(i as u64, WrOpcode::RdmaWrite, BASE, len, a.key);
        w.remote_addr = BASE + (4 << 20);
        w.rkey = b.key;
        a.port.engine_mut().post_send(a.qp, w).unwrap();
        let mut got = None;
        run_until(&mut a, &mut b, 60, |a, _| {
            got = got.or_else(|| a.port.engine_mut().poll_cq(a.cq));
            got.is_some()
        });
        let c = got.unwrap();
        assert_eq!(
            (c.wr_id, c.status),
            (i as u64, WcStatus::Success),
            "WRITE {len}"
        );
        let off = 4 << 20;
        assert!(
            b.mem.bytes[off..off + len as usize] == a.mem.bytes[..len as usize],
            "WRITE of {len} bytes arrived corrupted"
        );
        // SEND of the same bytes from b back to a.
        a.port
            .engine_mut()
            .post_recv(
                a.qp,
                RecvWr {
                    wr_id: 100 + i as u64,
                    sges: vec![Sge {
                        addr: BASE + (4 << 20),
                        length: 4 << 20,
                        lkey: a.key,
                    }],
                },
            )
            .unwrap();
        let w = wr(200 + i as u64, WrOpcode::Send, BASE + (4 << 20), len, b.key);
        b.port.engine_mut().post_send(b.qp, w).unwrap();
        let (mut rc, mut sc) = (None, None);
        run_until(&mut a, &mut b, 60, |a, b| {
            rc = rc.or_else(|| a.port.engine_mut().poll_cq(a.cq));
            sc = sc.or_else(|| b.port.engine_mut().poll_cq(b.cq));
            rc.is_some() && sc.is_some()
        });
        let (rc, sc) = (rc.unwrap(), sc.unwrap());
        assert_eq!((sc.wr_id, sc.status), (200 + i as u64, WcStatus::Success));
        assert_eq!(
            (rc.wr_id, rc.status, rc.byte_len),
            (100 + i as u64, WcStatus::Success, len)
        );
        assert!(
            a.mem.bytes[off..off + len as usize] == a.mem.bytes[..len as usize],
            "SEND of {len} bytes arrived corrupted"
        );
    }
    assert_eq!(
        a.port.counters().link_errors + b.port.counters().link_errors,
        0
    );
    if shm.is_some() {
        // The rings carried the traffic, not the sockets.
        for s in [&a, &b] {
            let r = s.port.link().report().unwrap();
            let ring_tx = r
                .split("\nshm ")
                .nth(1)
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|n| n.parse::<u64>().ok());
            assert!(ring_tx.is_some_and(|n| n > 1000), "{r}");
            assert!(r.starts_with("udp ") && r.contains(": tx 0 "), "{r}");
        }
    }
}

#[test]
fn port_udp_rl_01_rc_write_and_send_over_sockets() {
    transfer_all_sizes(None, None);
}

#[test]
fn port_udp_rl_03_rc_over_lossy_sockets_is_exactly_once() {
    let spec: FaultSpec = "drop=0.05,dup=0.02,reorder=0.02,corrupt=0.005,seed=11"
        .parse()
        .unwrap();
    transfer_all_sizes(Some(spec), None);
}

#[test]
fn port_shm_rl_01_rc_write_and_send_over_shared_memory_rings() {
    let dir = tempfile::tempdir().unwrap();
    transfer_all_sizes(None, Some(dir.path()));
}

#[test]
fn port_shm_rl_03_rc_over_lossy_rings_is_exactly_once() {
    // Drop, duplicate, reorder and corrupt at the link, over the rings.
    let spec: FaultSpec = "drop=0.05,dup=0.02,reorder=0.02,corrupt=0.005,seed=11"
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    transfer_all_sizes(Some(spec), Some(dir.path()));
}
