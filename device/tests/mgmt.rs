//! The port's management plane on the wire (issue 26 items 1, 2, 4; AD-09, AD-12):
//! two ports (engine + SMA + link) joined by a back-to-back cable, a test "SM" on
//! node A's QP0 sending SMPs to node B's SMA, the answers and traps read from A's
//! QP0 receive queue. Time is virtual; every assertion is on the bytes that
//! crossed the cable or landed in A's memory, or on B's counters.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use device::fabric::{Link, LinkError, Received};
use device::mgmt::{Mgmt, PortEvent, SubnetMode};
use device::port::Port;
use transport::engine::{Engine, Limits, PortConfig};
use transport::mad::attr::{trap144_change, NodeInfoRepr};
use transport::mad::dr::{hca_send, HcaSend};
use transport::mad::portinfo::{cap, phys_state, port_state};
use transport::mad::{
    attr_id, method, status, DrFields, NodeDescription, NoticeRepr, PortInfoRepr, SmpRepr,
    SmpRoute, Trap144Details, MAD_LEN, PERMISSIVE_LID,
};
use transport::memory::{Memory, VecMemory};
use transport::verbs::{
    Access, AddressVector, AttrMask, Event, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr,
    SendData, SendFlags, SendWr, Sge, UdDest, WcStatus, WrOpcode,
};
use transport::wire::PacketRepr;

const BASE: u64 = 0x1000_0000;
const MEM: usize = 1 << 20;
const SEND_AT: u64 = BASE;
const RECV_AT: u64 = BASE + 0x1_0000;
const RECV_SLOT: u64 = 0x200;
const RECVS: u64 = 64;
const GUID_A: u64 = 0x0002_c903_0000_0001;
const GUID_B: u64 = 0x0002_c903_0000_0002;

/// One end of a back-to-back cable: what one end sends the other receives,
/// whatever the DLID (directed route and permissive LIDs included).
struct CableEnd {
    wires: Wires,
    up: Arc<Mutex<bool>>,
    /// Which ends the SM disabled (`Link::set_disabled`): a disabled end
    /// sends and takes nothing, and the cable is down at both ends (the
    /// partner's liveness timeout, without the wait).
    disabled: Arc<Mutex<[bool; 2]>>,
    me: usize,
    /// Every packet sent from this end.
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
}

type Wires = Arc<Mutex<[VecDeque<Vec<u8>>; 2]>>;

fn cable() -> (CableEnd, CableEnd, Arc<Mutex<bool>>, Wires) {
    let wires = Arc::new(Mutex::new([VecDeque::new(), VecDeque::new()]));
    let up = Arc::new(Mutex::new(true));
    let disabled = Arc::new(Mutex::new([false; 2]));
    let end = |me| CableEnd {
        wires: Arc::clone(&wires),
        up: Arc::clone(&up),
        disabled: Arc::clone(&disabled),
        me,
        sent: Arc::default(),
    };
    (end(0), end(1), up, wires.clone())
}

impl Link for CableEnd {
    fn send(&mut self, _now: Duration, packet: &[u8]) -> Result<(), LinkError> {
        if self.disabled.lock().unwrap()[self.me] {
            return Ok(());
        }
        self.sent.lock().unwrap().push(packet.to_vec());
        if self.is_up() {
            self.wires.lock().unwrap()[1 - self.me].push_back(packet.to_vec());
        }
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
            let Some(p) = self.wires.lock().unwrap()[self.me].pop_front() else {
                break;
            };
            if self.disabled.lock().unwrap()[self.me] {
                continue;
            }
            deliver(Received {
                packet: &p,
                lent: None,
                src_lid: None,
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
    fn is_up(&self) -> bool {
        *self.up.lock().unwrap() && *self.disabled.lock().unwrap() == [false; 2]
    }
    fn set_disabled(&mut self, disabled: bool) {
        self.disabled.lock().unwrap()[self.me] = disabled;
    }
}

struct Node {
    port: Port,
    mem: VecMemory,
    key: u32,
    cq: u32,
    /// A UD data QP (Q_Key 0x11).
    ud: u32,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    next_recv: u64,
}

fn qp_init(pd: u32, cq: u32) -> QpInit {
    QpInit {
        qp_type: QpType::Ud,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 64,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    }
}

fn to_rts(e: &mut Engine, qpn: u32, qkey: u32) {
    let t = transport::verbs::Time(0);
    let mut a = QpAttr {
        state: Some(QpState::Init),
        qkey,
        port_num: 1,
        ..QpAttr::default()
    };
    let m = AttrMask::STATE | AttrMask::PKEY_INDEX | AttrMask::QKEY;
    let m = if qpn > 1 { m | AttrMask::PORT } else { m };
    e.modify_qp(qpn, &a, m, t).unwrap();
    a.state = Some(QpState::Rtr);
    e.modify_qp(qpn, &a, AttrMask::STATE, t).unwrap();
    a.state = Some(QpState::Rts);
    e.modify_qp(qpn, &a, AttrMask::STATE | AttrMask::SQ_PSN, t)
        .unwrap();
}

/// A node whose port has LID `lid` (0: none yet), in subnet mode `mode`, with
/// QP0 (`smi`) and a UD data QP.
fn node(end: CableEnd, lid: u16, guid: u64, mode: SubnetMode, smi: bool) -> Node {
    let cfg = PortConfig::new(lid, guid);
    let mut e = Engine::new(cfg.clone(), Limits::default());
    let pd = e.mrs().alloc_pd().unwrap();
    let pages = (0..(MEM as u64 / 4096)).map(|i| BASE + i * 4096).collect();
    let key = e
        .mrs()
        .reg_mr(pd, BASE, MEM as u64, Access(15), 4096, pages)
        .unwrap();
    let cq = e.create_cq().unwrap();
    if smi {
        assert_eq!(e.create_smi_qp(qp_init(pd, cq)), Ok(0));
        to_rts(&mut e, 0, 0);
        for i in 0..RECVS {
            let r = RecvWr {
                wr_id: i,
                sges: vec![Sge {
                    addr: RECV_AT + i * RECV_SLOT,
                    length: RECV_SLOT as u32,
                    lkey: key,
                }],
            };
            e.post_recv(0, r).unwrap();
        }
    }
    let ud = e.create_qp(qp_init(pd, cq)).unwrap();
    to_rts(&mut e, ud, 0x11);
    let sent = Arc::clone(&end.sent);
    let name = if guid == GUID_A { "a" } else { "b" };
    let mgmt = Mgmt::new(&cfg, name, mode);
    Node {
        port: Port::with_mgmt(e, Box::new(end), mgmt),
        mem: VecMemory::new(BASE, MEM),
        key,
        cq,
        ud,
        sent,
        next_recv: 0,
    }
}

struct Bench {
    a: Node,
    b: Node,
    now: Duration,
    /// The cable's state (both ends).
    up: Arc<Mutex<bool>>,
    wires: Wires,
}

impl Bench {
    fn new(lid_b: u16, mode_b: SubnetMode) -> Bench {
        let (ea, eb, up, wires) = cable();
        Bench {
            a: node(ea, 1, GUID_A, SubnetMode::Static, true),
            b: node(eb, lid_b, GUID_B, mode_b, false),
            now: Duration::from_secs(1),
            up,
            wires,
        }
    }

    /// Runs both ports for `ms` virtual milliseconds, a round every 100 us.
    fn run(&mut self, ms: u64) {
        for _ in 0..ms * 10 {
            self.now += Duration::from_micros(100);
            self.a.port.run_once(&mut self.a.mem, self.now);
            self.b.port.run_once(&mut self.b.mem, self.now);
        }
    }

    /// A's QP0 sends `smp` to `dlid` (the LRH DLID; permissive for directed
    /// route).
    fn sm_send(&mut self, smp: &SmpRepr, dlid: u16) {
        let bytes = smp.to_bytes();
        self.a.mem.write(SEND_AT, &bytes).unwrap();
        let mut wr = send(0x5e, SEND_AT, MAD_LEN as u32, self.a.key);
        wr.ud = Some(UdDest {
            av: AddressVector {
                dlid,
                ..AddressVector::default()
            },
            remote_qpn: 0,
            remote_qkey: 0,
            pkey_index: None,
        });
        self.a.port.engine_mut().post_send(0, wr).unwrap();
    }

    /// The MADs A's QP0 received since the last call.
    fn sm_received(&mut self) -> Vec<SmpRepr> {
        let mut out = Vec::new();
        while let Some(c) = self.a.port.engine_mut().poll_cq(self.a.cq) {
            if c.qp_num != 0 || c.opcode != transport::verbs::WcOpcode::Recv {
                continue;
            }
            assert_eq!(c.status, WcStatus::Success);
            assert_eq!(c.byte_len, 40 + MAD_LEN as u32, "GRH room + one MAD");
            let at = RECV_AT + c.wr_id * RECV_SLOT + 40;
            let mut b = [0u8; MAD_LEN];
            self.a.mem.read(at, &mut b).unwrap();
            let view = transport::mad::Smp::new_checked(&b[..]).unwrap();
            out.push(SmpRepr::parse(&view).unwrap());
            self.a.next_recv += 1;
        }
        out
    }

    /// A's request, its one answer.
    fn ask(&mut self, smp: &SmpRepr, dlid: u16) -> SmpRepr {
        self.sm_send(smp, dlid);
        self.run(2);
        let mut got = self.sm_received();
        assert_eq!(got.len(), 1, "one answer: {got:?}");
        got.remove(0)
    }
}

fn send(id: u64, addr: u64, length: u32, lkey: u32) -> SendWr {
    SendWr {
        wr_id: id,
        opcode: WrOpcode::Send,
        flags: SendFlags::SIGNALED,
        data: SendData::Sges(vec![Sge { addr, length, lkey }]),
        imm_or_inv: 0,
        remote_addr: 0,
        rkey: 0,
        compare: 0,
        swap_add: 0,
        ud: None,
    }
}

fn smp(m: u8, attr: u16, mkey: u64, data: [u8; 64]) -> SmpRepr {
    SmpRepr {
        base_version: 1,
        class_version: 1,
        method: m,
        status: 0,
        tid: 0x0000_0001_0000_0042,
        attr_id: attr,
        attr_mod: 0,
        mkey,
        route: SmpRoute::Lid,
        data,
    }
}

/// Directed route, one hop out of A's port 1: B; the hop pointer moved as
/// ib_core's SMI moves it before the SMP leaves (smi.c, C14-9:1).
fn dr(mut s: SmpRepr) -> SmpRepr {
    let mut d = DrFields::outgoing(&[1]).unwrap();
    assert_eq!(hca_send(&mut d, 1), Ok(HcaSend::Port));
    s.route = SmpRoute::Directed(d);
    s
}

fn port_info(s: &SmpRepr) -> PortInfoRepr {
    PortInfoRepr::parse(&s.data).unwrap()
}

fn events(p: &mut Port) -> (Vec<PortEvent>, Vec<Event>) {
    let pe = std::iter::from_fn(|| p.poll_port_event()).collect();
    let ee = std::iter::from_fn(|| p.engine_mut().poll_event()).collect();
    (pe, ee)
}

#[test]
fn ad_09_sm_gets_nodeinfo_and_portinfo_lid_routed() {
    let mut t = Bench::new(2, SubnetMode::Static);
    let r = t.ask(&smp(method::GET, attr_id::NODE_INFO, 0, [0; 64]), 2);
    assert_eq!((r.method, r.status), (method::GET_RESP, status::OK));
    let ni = NodeInfoRepr::parse(&r.data).unwrap();
    assert_eq!(
        (ni.node_guid, ni.port_guid, ni.node_type),
        (GUID_B, GUID_B, 1)
    );
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2);
    let pi = port_info(&r);
    assert_eq!(pi.lid, 2);
    assert_eq!(pi.port_state, port_state::ACTIVE, "static: Active");
    assert_eq!(pi.port_physical_state, phys_state::LINK_UP);
    let r = t.ask(&smp(method::GET, attr_id::NODE_DESCRIPTION, 0, [0; 64]), 2);
    assert!(r.data.starts_with(b"vhca b"));
    // On the wire: B's answers went LID-routed to A on VL15, from QP0.
    let sent = t.b.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    for p in &sent {
        let p = PacketRepr::parse(p).unwrap();
        assert_eq!((p.lrh.vl, p.lrh.dlid, p.lrh.slid), (15, 1, 2));
        assert_eq!(p.transport.bth.dest_qp, 0);
        assert_eq!(p.transport.ext.deth.unwrap().src_qp, 0);
    }
    let c = t.b.port.mgmt().unwrap().counters();
    assert_eq!((c.smp_rx, c.smp_tx), (3, 3));
    // The port's packet counters (QUERY_COUNTERS' Port set) count them too.
    let e = t.b.port.engine().counters();
    assert_eq!((e.rx_packets, e.tx_packets), (3, 3));
    // A's: three sent by its QP0, three answers received once each.
    let e = t.a.port.engine().counters();
    assert_eq!((e.rx_packets, e.tx_packets), (3, 3));
}

#[test]
fn ad_09_directed_route_response_reaches_a_port_that_is_not_an_sm() {
    // A has no IsSM (ibnetdiscover's case): B's DR GetResp still reaches A's QP0.
    let mut t = Bench::new(2, SubnetMode::Static);
    let r = t.ask(
        &dr(smp(method::GET, attr_id::NODE_INFO, 0, [0; 64])),
        PERMISSIVE_LID,
    );
    assert_eq!(r.method, method::GET_RESP);
    assert_eq!(NodeInfoRepr::parse(&r.data).unwrap().node_guid, GUID_B);
    let SmpRoute::Directed(d) = r.route else {
        panic!("{r:?}")
    };
    assert!(d.direction);
    assert_eq!((d.hop_ptr, d.hop_cnt, d.return_path[1]), (0, 1, 1));
    let first = t.b.sent.lock().unwrap()[0].clone();
    let p = PacketRepr::parse(&first).unwrap();
    assert_eq!((p.lrh.dlid, p.lrh.slid), (PERMISSIVE_LID, PERMISSIVE_LID));
}

#[test]
fn ad_09_sm_mode_port_waits_in_init_and_refuses_data_until_the_sm_activates_it() {
    // B in subnet = "sm" with no LID yet: Init, no data either way.
    let mut t = Bench::new(0, SubnetMode::Sm);
    let mb = t.b.port.mgmt().unwrap();
    assert_eq!(mb.port_state(), port_state::INIT);
    let wr = |key| {
        let mut w = send(9, SEND_AT, 8, key);
        w.ud = Some(UdDest {
            av: AddressVector {
                dlid: 1,
                ..AddressVector::default()
            },
            remote_qpn: 0x1234,
            remote_qkey: 0x11,
            pkey_index: None,
        });
        w
    };
    let (bkey, bud) = (t.b.key, t.b.ud);
    t.b.port.engine_mut().post_send(bud, wr(bkey)).unwrap();
    t.run(2);
    assert!(t.b.sent.lock().unwrap().is_empty(), "nothing left B");
    assert_eq!(t.b.port.mgmt().unwrap().counters().tx_data_not_active, 1);
    // A data packet from A to B is dropped by B's port, counted.
    let (akey, aud) = (t.a.key, t.a.ud);
    let mut w = wr(akey);
    w.ud.as_mut().unwrap().av.dlid = PERMISSIVE_LID;
    t.a.port.engine_mut().post_send(aud, w).unwrap();
    t.run(2);
    assert_eq!(t.b.port.mgmt().unwrap().counters().rx_data_not_active, 1);
    // Counted as received by the port, never seen by the engine (which would
    // have dropped it for its unknown QP).
    let e = t.b.port.engine().counters();
    assert_eq!(e.rx_packets, 1);
    assert_eq!(e.dropped(transport::engine::RxDrop::UnknownQp), 0);

    // The SM (A) reads B's PortInfo by directed route and sets LID 2, SM LID 1,
    // SM SL 3, Armed.
    let r = t.ask(
        &dr(smp(method::GET, attr_id::PORT_INFO, 0, [0; 64])),
        PERMISSIVE_LID,
    );
    let mut pi = port_info(&r);
    assert_eq!((pi.lid, pi.port_state), (0, port_state::INIT));
    pi.lid = 2;
    pi.master_sm_lid = 1;
    pi.master_sm_sl = 3;
    pi.port_state = port_state::ARMED;
    pi.port_physical_state = phys_state::NO_CHANGE;
    let mut data = [0u8; 64];
    pi.emit(&mut data).unwrap();
    let r = t.ask(
        &dr(smp(method::SET, attr_id::PORT_INFO, 0, data)),
        PERMISSIVE_LID,
    );
    assert_eq!(r.status, status::OK);
    let got = port_info(&r);
    assert_eq!(
        (got.lid, got.master_sm_lid, got.master_sm_sl, got.port_state),
        (2, 1, 3, port_state::ARMED)
    );
    let (pe, ee) = events(&mut t.b.port);
    assert!(pe.contains(&PortEvent::LidChange), "{pe:?}");
    assert!(pe.contains(&PortEvent::SmChange), "{pe:?}");
    assert!(ee.is_empty(), "not Active yet: {ee:?}");
    assert_eq!(t.b.port.engine().port().lid, 2);
    // Armed: still no data out, but data in is taken and makes the port Active
    // (IBA 7.2).
    assert!(!t.b.port.mgmt().unwrap().sends_data());
    let mut w = wr(akey);
    w.ud.as_mut().unwrap().av.dlid = 2;
    t.a.port.engine_mut().post_send(aud, w).unwrap();
    t.run(2);
    assert_eq!(t.b.port.mgmt().unwrap().port_state(), port_state::ACTIVE);
    assert!(t.b.port.mgmt().unwrap().sends_data());
    let (_, ee) = events(&mut t.b.port);
    assert_eq!(ee, vec![Event::PortActive]);
    // Now B's data goes out.
    let n = t.b.sent.lock().unwrap().len();
    t.b.port.engine_mut().post_send(bud, wr(bkey)).unwrap();
    t.run(2);
    assert_eq!(t.b.sent.lock().unwrap().len(), n + 1);
    // The SM takes it Down: port error.
    pi.port_state = port_state::DOWN;
    pi.emit(&mut data).unwrap();
    let r = t.ask(
        &dr(smp(method::SET, attr_id::PORT_INFO, 0, data)),
        PERMISSIVE_LID,
    );
    assert_eq!(port_info(&r).port_state, port_state::DOWN);
    let (_, ee) = events(&mut t.b.port);
    assert_eq!(ee, vec![Event::PortError]);
}

#[test]
fn ad_09_sm_activates_by_set_and_static_mode_needs_no_sm() {
    let mut t = Bench::new(2, SubnetMode::Sm);
    activate_b(&mut t);
    let (_, ee) = events(&mut t.b.port);
    assert_eq!(ee, vec![Event::PortActive]);
    // Static: Active from the start, no SM needed.
    let t = Bench::new(2, SubnetMode::Static);
    assert_eq!(t.b.port.mgmt().unwrap().port_state(), port_state::ACTIVE);
}

#[test]
fn ad_12_mkey_protected_get_with_a_wrong_key_gets_no_answer_and_a_trap() {
    let mut t = Bench::new(2, SubnetMode::Static);
    // The SM sets M_Key 0x77, protect level 2, and itself (LID 1) as SM.
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2);
    let mut pi = port_info(&r);
    pi.mkey = 0x77;
    pi.mkey_protect_bits = 2;
    pi.master_sm_lid = 1;
    pi.port_state = port_state::NO_CHANGE;
    pi.port_physical_state = phys_state::NO_CHANGE;
    let mut data = [0u8; 64];
    pi.emit(&mut data).unwrap();
    let r = t.ask(&smp(method::SET, attr_id::PORT_INFO, 0, data), 2);
    assert_eq!(r.status, status::OK);
    // A wrong key: no GetResp; B counts the violation and traps to the SM
    // (trap 256, Bad M_Key) until repressed.
    t.sm_send(&smp(method::GET, attr_id::NODE_INFO, 0x66, [0; 64]), 2);
    t.run(2);
    let got = t.sm_received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].method, method::TRAP, "a trap, no GetResp");
    assert_eq!(got[0].attr_id, attr_id::NOTICE);
    let notice = transport::mad::NoticeRepr::parse(&got[0].data).unwrap();
    assert_eq!(notice.trap_number, 256);
    assert_eq!(notice.issuer_lid, 2);
    assert_eq!(
        t.b.port.mgmt().unwrap().sma().port().info.mkey_violations,
        1
    );
    // The right key reads M_KeyViolations on the wire.
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0x77, [0; 64]), 2);
    assert_eq!(port_info(&r).mkey_violations, 1);
    // Unrepressed, the trap is sent again (SubnetTimeOut 18: about 1 s).
    t.run(1500);
    let again = t.sm_received();
    assert!(!again.is_empty(), "resent");
    assert!(again
        .iter()
        .all(|s| s.tid == got[0].tid && s.method == method::TRAP));
    // TrapRepress (with the M_Key) stops it.
    let mut rep = got[0];
    rep.method = method::TRAP_REPRESS;
    rep.mkey = 0x77;
    t.sm_send(&rep, 2);
    t.run(3000);
    assert!(t.sm_received().is_empty(), "no more resends");
    let s = t.b.port.mgmt().unwrap().sma();
    assert_eq!(s.pending_traps(), 0);
    assert_eq!(s.counters().traps_repressed, 1);
    // Exported with the device's counters.
    assert_exported(
        &t.b.port,
        &[
            ("sma_drop_bad_mkey", 1),
            ("mkey_violations", 1),
            ("sma_traps_repressed", 1),
        ],
    );
}

/// These values are among the port's exported management counters.
fn assert_exported(p: &Port, want: &[(&str, u64)]) {
    let pairs = p.mgmt().unwrap().counter_pairs();
    for w in want {
        assert!(pairs.contains(w), "{w:?} in {pairs:?}");
    }
}

/// The SM (A) moves B from Init to Armed to Active by SubnSet(PortInfo),
/// LID-routed to LID 2.
fn activate_b(t: &mut Bench) {
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2);
    let mut pi = port_info(&r);
    assert_eq!(pi.port_state, port_state::INIT);
    pi.port_physical_state = phys_state::NO_CHANGE;
    let mut data = [0u8; 64];
    for st in [port_state::ARMED, port_state::ACTIVE] {
        pi.port_state = st;
        pi.emit(&mut data).unwrap();
        let r = t.ask(&smp(method::SET, attr_id::PORT_INFO, 0, data), 2);
        assert_eq!(port_info(&r).port_state, st);
    }
}

#[test]
fn ad_09_nothing_reaches_a_guest_without_qp0_and_vl15_junk_is_counted() {
    let mut t = Bench::new(2, SubnetMode::Static);
    // B has no QP0: a response for B's node is dropped, counted.
    let resp = smp(method::GET_RESP, attr_id::NODE_INFO, 0, [0; 64]);
    t.sm_send(&resp, 2);
    t.run(2);
    let c = *t.b.port.mgmt().unwrap().counters();
    assert_eq!(c.drop_no_qp0, 1);
    // A VL15 packet for a QP other than 0, and one for another LID.
    let mad = smp(method::GET, attr_id::NODE_INFO, 0, [0; 64]).to_bytes();
    let lrh = transport::wire::LrhRepr {
        vl: 15,
        sl: 0,
        dlid: 2,
        slid: 1,
    };
    let mut p = transport::mad::smp_packet(lrh, 0xffff, 0, &mad).unwrap();
    let other_lid =
        transport::mad::smp_packet(transport::wire::LrhRepr { dlid: 9, ..lrh }, 0xffff, 0, &mad)
            .unwrap();
    // DestQP 5, CRCs redone.
    let mut r = PacketRepr::parse(&p).unwrap();
    r.transport.bth.dest_qp = 5;
    let mut q = vec![0u8; r.buffer_len()];
    let n = r.emit(&mut q).unwrap();
    q.truncate(n);
    p = q;
    // Onto the cable towards B, as if A had sent them.
    {
        let mut w = t.wires.lock().unwrap();
        w[1].push_back(p);
        w[1].push_back(other_lid);
    }
    t.run(1);
    let c = *t.b.port.mgmt().unwrap().counters();
    assert_eq!(c.drop_not_smp, 1);
    assert_eq!(c.drop_bad_dlid, 1);
    assert_eq!(c.smp_tx, 0, "no answer to either");
    assert_exported(
        &t.b.port,
        &[
            ("drop_no_qp0", 1),
            ("drop_not_smp", 1),
            ("drop_bad_dlid", 1),
        ],
    );
}

#[test]
fn ad_09_the_link_drives_the_port_state_static_back_to_active_sm_mode_to_init() {
    for mode in [SubnetMode::Static, SubnetMode::Sm] {
        let mut t = Bench::new(2, mode);
        if mode == SubnetMode::Sm {
            // An SM activated B once.
            activate_b(&mut t);
            events(&mut t.b.port);
        }
        *t.up.lock().unwrap() = false;
        t.run(1);
        let m = t.b.port.mgmt().unwrap();
        assert_eq!(m.port_state(), port_state::DOWN, "{mode:?}");
        assert_eq!(m.phys_state(), phys_state::POLLING);
        assert_eq!(events(&mut t.b.port).1, vec![Event::PortError], "{mode:?}");
        *t.up.lock().unwrap() = true;
        t.run(1);
        let (want_state, want_events) = match mode {
            SubnetMode::Static => (port_state::ACTIVE, vec![Event::PortActive]),
            SubnetMode::Sm => (port_state::INIT, vec![]),
        };
        assert_eq!(t.b.port.mgmt().unwrap().port_state(), want_state);
        assert_eq!(events(&mut t.b.port).1, want_events, "{mode:?}");
    }
}

/// The SM (A, LID 1) takes B (LID 2) over: MasterSMLID 1, so B's traps go to A.
fn sm_takes_b_over(t: &mut Bench) {
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2);
    let mut pi = port_info(&r);
    pi.master_sm_lid = 1;
    pi.port_state = port_state::NO_CHANGE;
    pi.port_physical_state = phys_state::NO_CHANGE;
    let mut data = [0u8; 64];
    pi.emit(&mut data).unwrap();
    let r = t.ask(&smp(method::SET, attr_id::PORT_INFO, 0, data), 2);
    assert_eq!(r.status, status::OK);
}

/// The one trap 144 A's SM received, its data details' bytes checked at
/// OpenSM's `ntc_144` offsets (Notice bytes 10.. are the details: LIDADDR at
/// 2, OtherLocalChanges in byte 5's low bit, CapabilityMask at 6, ChangeFlags
/// at 10), then repressed.
fn trap_144(t: &mut Bench) -> Trap144Details {
    t.run(2);
    let got = t.sm_received();
    assert_eq!(got.len(), 1, "{got:?}");
    let s = got[0];
    assert_eq!((s.method, s.attr_id), (method::TRAP, attr_id::NOTICE));
    let n = NoticeRepr::parse(&s.data).unwrap();
    // Generic, Informational (IBA 13.4.8.2), from a CA, LID 2.
    assert!(n.is_generic);
    assert_eq!(
        (n.notice_type, n.producer_type, n.trap_number, n.issuer_lid),
        (4, 1, 144, 2)
    );
    let d = Trap144Details::parse(&n.data_details);
    assert_eq!(u16::from_be_bytes([s.data[12], s.data[13]]), d.lid);
    assert_eq!(s.data[15] & 1 != 0, d.other_local_changes);
    assert_eq!(
        u32::from_be_bytes(s.data[16..20].try_into().unwrap()),
        d.capability_mask
    );
    assert_eq!(u16::from_be_bytes([s.data[20], s.data[21]]), d.change_flags);
    let mut rep = s;
    rep.method = method::TRAP_REPRESS;
    t.sm_send(&rep, 2);
    t.run(2);
    assert!(t.sm_received().is_empty());
    d
}

#[test]
fn ad_09_the_guests_is_sm_reaches_portinfo_and_the_sm_hears_trap_144() {
    let mut t = Bench::new(2, SubnetMode::Static);
    let before = port_info(&t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2));
    assert_eq!(before.capability_mask & cap::IS_SM, 0);
    // The port says it sends trap 144 for both kinds of change.
    let notices =
        cap::IS_CAPABILITY_MASK_NOTICE_SUPPORTED | cap::IS_OTHER_LOCAL_CHANGES_NOTICE_SUPPORTED;
    assert_eq!(before.capability_mask & notices, notices);
    // OpenSM opens issm on B before any SM has the subnet: IsSM shows on the
    // wire; the trap has no SM to go to (dropped, counted).
    let now = t.now;
    let mask = t.b.port.set_port_caps(cap::IS_SM, 0, now).unwrap().unwrap();
    assert_eq!(mask, before.capability_mask | cap::IS_SM);
    t.run(2);
    assert!(t.sm_received().is_empty());
    assert_exported(&t.b.port, &[("sma_drop_no_sm_lid", 1)]);
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2);
    let wire = u32::from_be_bytes(r.data[20..24].try_into().unwrap());
    assert_eq!(wire, before.capability_mask | cap::IS_SM, "IsSM at bit 1");
    // With A as the SM, B's SM stopping (issm closed) traps to A.
    sm_takes_b_over(&mut t);
    let now = t.now;
    t.b.port.set_port_caps(0, cap::IS_SM, now).unwrap().unwrap();
    let d = trap_144(&mut t);
    assert_eq!(
        d,
        Trap144Details {
            lid: 2,
            other_local_changes: false,
            capability_mask: before.capability_mask,
            change_flags: 0,
            capability_mask2: before.capability_mask2,
        }
    );
    // Clearing it again changes nothing: no trap.
    let now = t.now;
    t.b.port.set_port_caps(0, cap::IS_SM, now).unwrap().unwrap();
    t.run(2);
    assert!(t.sm_received().is_empty());
    // A bit that is the SMA's own is refused, and nothing changes.
    let now = t.now;
    assert!(t
        .b
        .port
        .set_port_caps(cap::IS_TRAP_SUPPORTED, 0, now)
        .unwrap()
        .is_err());
    let r = t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2);
    assert_eq!(port_info(&r).capability_mask, before.capability_mask);
}

#[test]
fn ad_09_the_guests_node_description_is_what_the_sm_reads_after_trap_144() {
    let mut t = Bench::new(2, SubnetMode::Static);
    sm_takes_b_over(&mut t);
    let r = t.ask(&smp(method::GET, attr_id::NODE_DESCRIPTION, 0, [0; 64]), 2);
    assert_eq!(&r.data[..7], b"vhca b\0");
    let mask =
        port_info(&t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2)).capability_mask;
    // rdma-ndd on B writes "<host> <device>" (sysfs node_desc).
    let now = t.now;
    let nd = NodeDescription::from_text("guest-b vhca0");
    assert_eq!(t.b.port.set_node_description(nd, now), Some(true));
    // Trap 144 with OtherLocalChanges and NodeDescriptionChange, the mask as
    // it is (OpenSM re-reads NodeDescription without a heavy sweep).
    let d = trap_144(&mut t);
    assert!(d.other_local_changes);
    assert_eq!(d.change_flags, trap144_change::NODE_DESCRIPTION);
    assert_eq!((d.lid, d.capability_mask), (2, mask));
    // What the SM reads now, LID-routed and by directed route.
    let r = t.ask(&smp(method::GET, attr_id::NODE_DESCRIPTION, 0, [0; 64]), 2);
    assert_eq!(r.data, nd.0);
    let r = t.ask(
        &dr(smp(method::GET, attr_id::NODE_DESCRIPTION, 0, [0; 64])),
        PERMISSIVE_LID,
    );
    assert_eq!(r.data, nd.0);
    // The same description again: no change, no trap.
    let now = t.now;
    assert_eq!(t.b.port.set_node_description(nd, now), Some(false));
    t.run(2);
    assert!(t.sm_received().is_empty());
}

/// B's own SM (OpenSM in B's guest, no wire needed) sends SubnSet(PortInfo)
/// with `data` to its port through MAD_IFC, which answers it.
fn b_own_sm_sets_port_info(t: &mut Bench, data: [u8; 64]) {
    let mut set = smp(method::SET, attr_id::PORT_INFO, 0, data);
    set.route = SmpRoute::Lid;
    let mad: [u8; MAD_LEN] = set.to_bytes()[..].try_into().unwrap();
    let now = t.now;
    assert!(matches!(
        t.b.port.mad_ifc(&mad, 2, now),
        Some(device::mgmt::MadIfcResult::Reply(_))
    ));
}

/// B's PortInfo with PortPhysicalState `phys`, the rest as `pi`.
fn with_phys(mut pi: PortInfoRepr, phys: u8) -> [u8; 64] {
    pi.port_state = port_state::NO_CHANGE;
    pi.port_physical_state = phys;
    let mut data = [0u8; 64];
    pi.emit(&mut data).unwrap();
    data
}

#[test]
fn ad_09_an_hca_port_the_sm_disables_takes_its_link_down_until_polling() {
    let mut t = Bench::new(2, SubnetMode::Static);
    let pi = port_info(&t.ask(
        &dr(smp(method::GET, attr_id::PORT_INFO, 0, [0; 64])),
        PERMISSIVE_LID,
    ));
    events(&mut t.b.port);
    events(&mut t.a.port);
    // ibportstate on B's port: Disabled. The answer still leaves B (a port
    // answers, then its PHY goes off).
    let r = t.ask(
        &dr(smp(
            method::SET,
            attr_id::PORT_INFO,
            0,
            with_phys(pi, phys_state::DISABLED),
        )),
        PERMISSIVE_LID,
    );
    assert_eq!(r.status, status::OK);
    assert_eq!(
        (port_info(&r).port_state, port_info(&r).port_physical_state),
        (port_state::DOWN, phys_state::DISABLED)
    );
    t.run(1);
    let m = t.b.port.mgmt().unwrap();
    assert_eq!(
        (m.port_state(), m.phys_state()),
        (port_state::DOWN, phys_state::DISABLED)
    );
    assert_eq!(events(&mut t.b.port).1, vec![Event::PortError]);
    // The link is down at both ends: A, the partner, goes Down too.
    assert!(!t.b.port.link().is_up());
    assert_eq!(t.a.port.mgmt().unwrap().port_state(), port_state::DOWN);
    assert_eq!(events(&mut t.a.port).1, vec![Event::PortError]);
    // Nothing leaves B: an SMP from A gets no answer.
    let sent = t.b.sent.lock().unwrap().len();
    t.sm_send(
        &dr(smp(method::GET, attr_id::NODE_INFO, 0, [0; 64])),
        PERMISSIVE_LID,
    );
    t.run(2);
    assert!(t.sm_received().is_empty());
    assert_eq!(t.b.sent.lock().unwrap().len(), sent);

    // B's own SM (MAD_IFC, no wire needed) sets Polling: the link trains,
    // both ports come back (static mode: Active with no SM to wait for).
    b_own_sm_sets_port_info(&mut t, with_phys(pi, phys_state::POLLING));
    t.run(1);
    assert!(t.b.port.link().is_up());
    let m = t.b.port.mgmt().unwrap();
    assert_eq!(
        (m.port_state(), m.phys_state()),
        (port_state::ACTIVE, phys_state::LINK_UP)
    );
    assert_eq!(events(&mut t.b.port).1, vec![Event::PortActive]);
    assert_eq!(t.a.port.mgmt().unwrap().port_state(), port_state::ACTIVE);
    let r = t.ask(
        &dr(smp(method::GET, attr_id::PORT_INFO, 0, [0; 64])),
        PERMISSIVE_LID,
    );
    assert_eq!(port_info(&r).port_state, port_state::ACTIVE);
}

#[test]
fn ad_09_an_sm_set_down_retrains_the_link_and_the_port_waits_in_init_for_the_sm() {
    // B came up Active on the fabric file's values (static mode); an SM (A)
    // takes it over and sets it Down, as OpenSM does to a port it takes over.
    let mut t = Bench::new(2, SubnetMode::Static);
    sm_takes_b_over(&mut t);
    events(&mut t.b.port);
    let mut pi = port_info(&t.ask(&smp(method::GET, attr_id::PORT_INFO, 0, [0; 64]), 2));
    assert_eq!(pi.port_state, port_state::ACTIVE);
    pi.port_state = port_state::DOWN;
    pi.port_physical_state = phys_state::NO_CHANGE;
    let mut data = [0u8; 64];
    pi.emit(&mut data).unwrap();
    let r = t.ask(&smp(method::SET, attr_id::PORT_INFO, 0, data), 2);
    assert_eq!(port_info(&r).port_state, port_state::DOWN, "the answer");
    // The link retrained: Init, LinkUp, the SM's to activate (not Active by
    // itself: the port has an SM now).
    t.run(1);
    let m = t.b.port.mgmt().unwrap();
    assert_eq!(
        (m.port_state(), m.phys_state()),
        (port_state::INIT, phys_state::LINK_UP)
    );
    assert_eq!(events(&mut t.b.port).1, vec![Event::PortError]);
    activate_b(&mut t);
    assert_eq!(events(&mut t.b.port).1, vec![Event::PortActive]);

    // The same by B's own SM through MAD_IFC (OpenSM in B's guest).
    b_own_sm_sets_port_info(&mut t, data);
    t.run(1);
    assert_eq!(t.b.port.mgmt().unwrap().port_state(), port_state::INIT);
    assert_eq!(events(&mut t.b.port).1, vec![Event::PortError]);
}
