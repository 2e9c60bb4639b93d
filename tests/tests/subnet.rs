//! A subnet manager on QP0 between real `vhca` processes (issue 26; AD-09): the
//! fabric file says `subnet = "sm"`, so both ports wait in Init; a test "SM" on
//! node 0's QP0 reads node 1's NodeInfo and PortInfo from its SMA (LID-routed
//! SubnGet), then sets its LMC, SM LID and SL and moves it Init -> Armed -> Active
//! (SubnSet). Node 1's guest side sees the LID change, SM change and port active
//! events on EQ 0 and QUERY_PORT's new values; node 0's own port, which no SM set,
//! stays in Init. Every value is read from the SMPs that crossed the wire.

use std::collections::HashMap;
use std::time::Duration;

use transport::mad::attr::NodeInfoRepr;
use transport::mad::portinfo::{phys_state, port_state};
use transport::mad::{attr_id, method, status, PortInfoRepr, Smp, SmpRepr, SmpRoute, MAD_LEN};
use vhca_tests::abi::cqe::EqeType;
use vhca_tests::abi::verbs::QpType;
use vhca_tests::fixture::{assert_success, wait_n, Node, Region};
use vhca_tests::verbs::ud_dest;
use vhca_tests::{ConnOpts, Layout, Options, QpH, QpInit, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(20);
const LID_SM: u16 = 0x10;
const LID_B: u16 = 0x20;
/// Receive slots on the SM's QP0: the GRH room, then the MAD.
const SLOT: usize = 512;

struct Sm {
    node: Node,
    qp0: QpH,
    buf: Region,
    posted: u64,
}

impl Sm {
    fn new(mut node: Node) -> Sm {
        let qp0 = node
            .hca
            .create_qp(&QpInit::new(QpType::Smi, node.pd, node.cq))
            .expect("QP0");
        assert_eq!(qp0.qpn, 0, "the SMI's QP is QP0");
        node.hca
            .qp_to_rts_from_reset(qp0, None, &ConnOpts::default())
            .expect("QP0 to RTS");
        let buf = node.region(16 * SLOT + MAD_LEN, Layout::Contiguous, 0);
        let mut sm = Sm {
            node,
            qp0,
            buf,
            posted: 0,
        };
        for _ in 0..8 {
            sm.post_recv();
        }
        sm
    }

    fn post_recv(&mut self) {
        let slot = (self.posted % 8) as usize;
        let sge = self.buf.mr.sge(&self.buf.buf, SLOT + slot * SLOT, SLOT);
        self.node
            .hca
            .post_recv(self.qp0, &RecvWr::new(self.posted, vec![sge]))
            .unwrap();
        self.posted += 1;
    }

    /// Sends `smp` LID-routed to `dlid` from QP0 and returns the one answer.
    fn ask(&mut self, smp: &SmpRepr, dlid: u16) -> SmpRepr {
        self.node.write(&self.buf, 0, &smp.to_bytes());
        let w = SendWr::send(0x5e)
            .sge(self.buf.mr.sge(&self.buf.buf, 0, MAD_LEN))
            .ud(ud_dest(dlid, 0, 0));
        self.node.hca.post_send(self.qp0, &w).unwrap();
        // The send's completion and the answer's, in either order.
        let c = wait_n(&mut self.node.hca, self.node.cq, 2, T);
        assert_success(&c);
        let recv = c.iter().find(|c| c.wr_id != 0x5e).expect("an answer");
        assert_eq!((recv.src_qp, recv.slid), (0, dlid), "from the SMA's QP0");
        let slot = (recv.wr_id % 8) as usize;
        let b = self.node.read(&self.buf, SLOT + slot * SLOT + 40, MAD_LEN);
        self.post_recv();
        let v = Smp::new_checked(&b[..]).unwrap();
        SmpRepr::parse(&v).unwrap()
    }
}

fn smp(m: u8, attr: u16, data: [u8; 64]) -> SmpRepr {
    SmpRepr {
        base_version: 1,
        class_version: 1,
        method: m,
        status: 0,
        tid: 0x2600_0000_0001,
        attr_id: attr,
        attr_mod: 0,
        mkey: 0,
        route: SmpRoute::Lid,
        data,
    }
}

#[test]
fn ad_09_an_sm_on_qp0_reads_and_activates_a_port_of_an_sm_mode_fabric() {
    let opts = Options {
        lids: HashMap::from([(0, LID_SM), (1, LID_B)]),
        ..Options::nodes(2)
    }
    .fabric_header("subnet = \"sm\"");
    let v = Vhca::spawn(opts);
    let mut sm = Sm::new(Node::connect(&v, 0));
    let mut b = Node::connect(&v, 1);
    // No SM has seen either port: Init, the link up.
    for h in [&mut sm.node.hca, &mut b.hca] {
        let p = h.query_port(1).unwrap();
        assert_eq!((p.state, p.phys_state), (2, 5), "Init, LinkUp");
    }

    let r = sm.ask(&smp(method::GET, attr_id::NODE_INFO, [0; 64]), LID_B);
    assert_eq!((r.method, r.status), (method::GET_RESP, status::OK));
    let ni = NodeInfoRepr::parse(&r.data).unwrap();
    assert_eq!((ni.node_type, ni.num_ports), (1, 1), "a CA with one port");
    assert_eq!(ni.port_guid, v.guid(1));
    let r = sm.ask(&smp(method::GET, attr_id::PORT_INFO, [0; 64]), LID_B);
    let mut pi = PortInfoRepr::parse(&r.data).unwrap();
    assert_eq!((pi.lid, pi.lmc, pi.master_sm_lid), (LID_B, 0, 0));
    assert_eq!(pi.port_state, port_state::INIT);

    // The SM's sweep: LMC 1, itself as SM at SL 1, then Armed and Active.
    b.hca.take_events();
    pi.lmc = 1;
    pi.master_sm_lid = LID_SM;
    pi.master_sm_sl = 1;
    pi.port_physical_state = phys_state::NO_CHANGE;
    let mut data = [0u8; 64];
    for st in [port_state::ARMED, port_state::ACTIVE] {
        pi.port_state = st;
        pi.emit(&mut data).unwrap();
        let r = sm.ask(&smp(method::SET, attr_id::PORT_INFO, data), LID_B);
        assert_eq!(r.status, status::OK);
        let got = PortInfoRepr::parse(&r.data).unwrap();
        assert_eq!(
            (got.lmc, got.master_sm_lid, got.master_sm_sl, got.port_state),
            (1, LID_SM, 1, st)
        );
    }
    for kind in [EqeType::LidChange, EqeType::SmChange, EqeType::PortActive] {
        let e = b.hca.wait_async_event(T, |e| e.kind == kind.raw());
        assert_eq!(e.map(|e| e.object), Some(1), "{kind:?} for port 1");
    }
    let p = b.hca.query_port(1).unwrap();
    assert_eq!(
        (p.state, p.lid, p.lmc, p.sm_lid, p.sm_sl),
        (4, LID_B, 1, LID_SM, 1)
    );
    // The SM's own port was set by nobody: still Init.
    assert_eq!(sm.node.hca.query_port(1).unwrap().state, 2);
}
