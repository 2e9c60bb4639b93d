//! The command queue (ARCHITECTURE.md §4; abi::cmd COMMAND_PROTOCOL), driven as the
//! guest driver drives it: commands in a ring in guest memory (a `VecMemory`),
//! parameters inline or in mailboxes, rings named by page lists, doorbell pages
//! in a vector. Every command completes with a status and changes all or
//! nothing; no input, however random, panics the device (ARCHITECTURE.md §9).

use std::net::UdpSocket;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use device::abi::bar0::{dev_cap, CtxStatus, CtxTable, Fatal};
use device::abi::cmd::{
    cmd_flags, cmd_owner, mad_ifc_flag, pbl_const, port_cap, reg_mr_flags, rereg, AllocMwIn,
    AllocMwOut, AllocPdOut, Cmd, CreateCqIn, CreateCqOut, CreateEqIn, CreateEqOut, CreateQpIn,
    CreateQpOut, CreateSrqIn, CreateSrqOut, DeallocMwIn, DeallocPdIn, DeregMrIn, DestroyCqIn,
    DestroyEqIn, DestroyQpIn, DestroySrqIn, DeviceAttr, MadIfcIn, MadIfcOut, ModifyQpIn,
    ModifySrqIn, Opcode, Pbl, PortAttr, QpAttr, QpCap, QueryCountersIn, QueryCountersOut,
    QueryPortIn, QueryQpIn, QueryQpOut, QuerySrqIn, QuerySrqOut, RegMrIn, RegMrOut, ReregMrIn,
    ResizeCqIn, ResizeCqOut, ResizeSrqIn, ResizeSrqOut, SetGidIn, SetNodeDescIn, SetPortCapsIn,
    SetPortCapsOut, Status,
};
use device::abi::context::{ctx_flags, CqContext, EqContext, MrContext, QpContext, SrqContext};
use device::abi::counters::CounterSet;
use device::abi::layout::{AbiStruct, Field};
use device::abi::uar::uar;
use device::abi::verbs::{access, num, qp_attr_mask as m, srq_attr_mask, Mtu, QpState, QpType};
use device::cmdq::{
    execute_pending, execute_staged, Budget, CmdDone, CmdQueue, Syndrome, MAX_COMMANDS_PER_CALL,
};
use device::context::snapshot;
use device::context::snapshot_with_doorbells;
use device::fabric::{FabricFile, Node, UdpLink};
use device::glue::VecDoorbells;
use device::hca::{DbSlot, Doorbells, Eq, Hca, SlotOwner};
use device::port::Port;
use device::ring::Ring;
use transport::engine::{Engine, Limits, PortConfig};
use transport::memory::{Memory, VecMemory};
use transport::verbs as tv;

const BASE: u64 = 0x10_0000;
const MEM: usize = 16 << 20;
/// 128 command slots: two pages.
const CMDQ: u64 = BASE;
const CMDQ_LOG2: u32 = 7;
const IN_MB: u64 = BASE + 0x2000;
const OUT_MB: u64 = BASE + 0x3000;
const EQ0_RING: u64 = BASE + 0x4000;
const HEAP: u64 = BASE + 0x10_0000;
const LID: u16 = 7;
const GUID: u64 = 0x0002_c903_0000_0007;

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// A port on a one-node fabric: packets to its own LID loop back (AD-04).
fn port() -> Port {
    port_with(PortConfig::new(LID, GUID))
}

/// [`port`] with the port configured as `cfg` (its LID and GUID must be
/// [`LID`] and [`GUID`]).
fn port_with(cfg: PortConfig) -> Port {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let node = Node {
        name: "a".into(),
        lid: LID,
        guid: GUID,
        address: sock.local_addr().unwrap(),
    };
    let fabric = FabricFile::from_nodes(vec![node]).unwrap();
    let link = UdpLink::from_socket(&fabric, "a", sock).unwrap();
    // Static subnet, as the fabric file's default: the port is Active with its
    // LID and its SMA answers MAD_IFC (issue 26).
    let mgmt = device::mgmt::Mgmt::new(&cfg, "a", device::mgmt::SubnetMode::Static);
    Port::with_mgmt(Engine::new(cfg, Limits::default()), Box::new(link), mgmt)
}

fn bytes<T: Field>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    v.put(&mut b);
    b
}

/// A completed command as the driver reads its slot.
#[derive(Debug)]
struct Done {
    status: Status,
    syndrome: u32,
    out: Vec<u8>,
}

/// The device and the guest side of a driver: memory, doorbell pages, the
/// command ring and a bump allocator for rings and page lists.
struct Dev {
    hca: Hca,
    q: CmdQueue,
    mem: VecMemory,
    db: VecDoorbells,
    pi: u32,
    heap: u64,
    next_slot: u32,
    /// Steps taken by heavy commands (staging on: `Dev::staged`).
    steps: u32,
    /// Called between the steps of a staged command, with the step number.
    between: Option<fn(&mut Dev, u32)>,
}

impl Dev {
    /// A device whose heavy commands run in steps, as the running device's
    /// (cmdq::staged; issue 13, MMIO stall).
    fn staged() -> Dev {
        let mut d = Dev::new();
        d.q.set_staged(true);
        d
    }

    fn new() -> Dev {
        Dev::with_uars(4)
    }

    fn with_uars(uars: usize) -> Dev {
        Dev::with_port(uars, port())
    }

    fn with_port(uars: usize, port: Port) -> Dev {
        let mem = VecMemory::new(BASE, MEM);
        let q = CmdQueue::new(&mem, CMDQ, CMDQ_LOG2, 10).unwrap();
        let mut hca = Hca::new(port);
        // EQ 0, as BAR0's ENABLE installs it.
        let pbl = Pbl {
            addr: EQ0_RING,
            npages: 1,
            page_shift: 12,
            levels: pbl_const::CONTIGUOUS as u8,
            rsvd: 0,
        };
        let ring = Ring::new(&mem, vec![EQ0_RING], 12, 4, 6, 16).unwrap();
        let slot = DbSlot {
            uar: 0,
            slot: uar::EQ0_SLOT as u16,
        };
        hca.eqs.insert(
            0,
            Eq {
                ring,
                vector: 0,
                db: slot,
                pi: 0,
                last_arm: 0,
                users: 0,
                overflows: 0,
                pbl,
            },
        );
        hca.slots.insert(slot, SlotOwner::Eq(0));
        Dev {
            hca,
            q,
            mem,
            db: VecDoorbells::new(uars),
            pi: 0,
            heap: HEAP,
            next_slot: 0,
            steps: 0,
            between: None,
        }
    }

    fn alloc(&mut self, pages: u64) -> u64 {
        let a = self.heap;
        self.heap += pages * 4096;
        assert!(self.heap <= BASE + MEM as u64, "test heap exhausted");
        a
    }

    /// Physically contiguous pages for `bytes`.
    fn contiguous(&mut self, bytes: u64) -> Pbl {
        let n = bytes.div_ceil(4096).max(1);
        Pbl {
            addr: self.alloc(n),
            npages: n as u32,
            page_shift: 12,
            levels: pbl_const::CONTIGUOUS as u8,
            rsvd: 0,
        }
    }

    /// A one-level list of `pages` fresh pages, the pages in reverse order.
    fn one_level(&mut self, pages: u64) -> (Pbl, Vec<u64>) {
        let list = self.alloc(1);
        let data: Vec<u64> = (0..pages).map(|_| self.alloc(1)).rev().collect();
        for (i, p) in data.iter().enumerate() {
            self.mem
                .write(list + i as u64 * 8, &p.to_le_bytes())
                .unwrap();
        }
        let pbl = Pbl {
            addr: list,
            npages: pages as u32,
            page_shift: 12,
            levels: pbl_const::ONE_LEVEL as u8,
            rsvd: 0,
        };
        (pbl, data)
    }

    /// A fresh doorbell slot in UAR 1.
    fn slot(&mut self) -> u16 {
        self.next_slot += 1;
        (uar::FIRST_SLOT + self.next_slot) as u16
    }

    /// Writes `cmd` into the next slot, owner set last, and bumps the PI.
    fn post(&mut self, mut cmd: Cmd) {
        let at = self.slot_addr(self.pi);
        cmd.owner = 0;
        self.mem.write(at, &cmd.to_bytes()).unwrap();
        self.mem.write(at + 6, &[cmd_owner::DEVICE]).unwrap();
        self.pi = self.pi.wrapping_add(1);
    }

    fn slot_addr(&self, i: u32) -> u64 {
        CMDQ + u64::from(i % (1 << CMDQ_LOG2)) * Cmd::SIZE as u64
    }

    fn read_slot(&self, i: u32) -> Cmd {
        let mut b = [0u8; Cmd::SIZE];
        self.mem.read(self.slot_addr(i), &mut b).unwrap();
        Cmd::from_bytes(&b)
    }

    /// One batch, without preparing what waits.
    fn run_step_once(&mut self) {
        execute_staged(
            &mut self.hca,
            &mut self.q,
            self.pi,
            &mut self.mem,
            &self.db,
            now(),
            Budget::default(),
            None,
        )
        .unwrap();
    }

    /// Runs the posted commands; a command in progress (staging on) is
    /// prepared as the data path would, off the lock, and run again.
    fn run(&mut self) -> Result<Vec<CmdDone>, Fatal> {
        let mut pre = None;
        let mut done = Vec::new();
        loop {
            done.extend(execute_staged(
                &mut self.hca,
                &mut self.q,
                self.pi,
                &mut self.mem,
                &self.db,
                now(),
                Budget::default(),
                pre.take(),
            )?);
            let Some(t) = self.q.take_waiting() else {
                return Ok(done);
            };
            // In progress: still the device's, CI at it.
            assert_eq!(t.ci(), self.q.ci());
            assert_eq!(self.read_slot(t.ci()).owner, cmd_owner::DEVICE);
            self.steps += 1;
            if let Some(f) = self.between {
                f(self, self.steps);
            }
            pre = Some(t.prepare(&mut self.mem));
        }
    }

    /// A command slot for `op` with `input` inline or in the input mailbox and
    /// room for `out` bytes of output.
    fn cmd(op: u16, input: &[u8], out: usize) -> Cmd {
        let mut c = Cmd {
            opcode: op,
            ..Cmd::default()
        };
        if input.len() <= c.data.len() {
            c.data[..input.len()].copy_from_slice(input);
        } else {
            c.in_mailbox = IN_MB;
            c.in_len = input.len() as u16;
        }
        if out > c.data.len() {
            c.out_mailbox = OUT_MB;
            c.out_len = out as u16;
        }
        c
    }

    /// Runs one command and reads its completion.
    fn submit(&mut self, cmd: Cmd, input: &[u8], out: usize) -> Done {
        if cmd.in_len > 0 && cmd.in_mailbox == IN_MB {
            self.mem.write(IN_MB, input).unwrap();
        }
        let i = self.pi;
        self.post(cmd);
        self.run().unwrap();
        assert_eq!(self.q.ci(), self.pi);
        let s = self.read_slot(i);
        assert_eq!(s.owner, 0, "owner cleared");
        let out = if out <= s.data.len() {
            s.data[..out].to_vec()
        } else {
            let mut b = vec![0u8; out];
            self.mem.read(OUT_MB, &mut b).unwrap();
            b
        };
        Done {
            status: Status::from_raw(s.status).expect("a known status"),
            syndrome: s.syndrome,
            out,
        }
    }

    fn exec(&mut self, op: Opcode, input: &[u8], out: usize) -> Done {
        self.submit(Dev::cmd(op.raw(), input, out), input, out)
    }

    fn call<I: AbiStruct, O: AbiStruct>(&mut self, op: Opcode, i: &I) -> Result<O, Status> {
        let d = self.exec(op, &bytes(i), O::SIZE);
        match d.status {
            Status::Ok => Ok(O::get(&d.out)),
            s => Err(s),
        }
    }

    fn call_in<I: AbiStruct>(&mut self, op: Opcode, i: &I) -> Result<(), Status> {
        match self.exec(op, &bytes(i), 0).status {
            Status::Ok => Ok(()),
            s => Err(s),
        }
    }

    /// Status and syndrome of a command expected to fail.
    fn refuse<I: AbiStruct>(&mut self, op: Opcode, i: &I) -> (Status, u32) {
        let d = self.exec(op, &bytes(i), 4096);
        (d.status, d.syndrome)
    }

    fn pd(&mut self) -> u32 {
        let d = self.exec(Opcode::AllocPd, &[], AllocPdOut::SIZE);
        assert_eq!(d.status, Status::Ok);
        AllocPdOut::get(&d.out).pdn
    }

    fn eq_in(&mut self) -> CreateEqIn {
        self.next_slot += 1;
        CreateEqIn {
            ring: self.contiguous(16 << 4),
            uar: 0,
            db_slot: (uar::EQ0_SLOT + self.next_slot) as u16,
            vector: 1,
            log2_entries: 4,
            rsvd: [0; 7],
        }
    }

    fn eq(&mut self) -> u32 {
        let i = self.eq_in();
        self.call::<_, CreateEqOut>(Opcode::CreateEq, &i)
            .unwrap()
            .eqn
    }

    fn cq_in(&mut self, eqn: u32) -> CreateCqIn {
        CreateCqIn {
            ring: self.contiguous(64 << 4),
            eqn,
            uar: 1,
            db_slot: self.slot(),
            log2_entries: 4,
            rsvd: [0; 5],
        }
    }

    fn cq(&mut self, eqn: u32) -> u32 {
        let i = self.cq_in(eqn);
        self.call::<_, CreateCqOut>(Opcode::CreateCq, &i)
            .unwrap()
            .cqn
    }

    fn srq_in(&mut self, pdn: u32) -> CreateSrqIn {
        CreateSrqIn {
            srq_type: 0,
            rsvd: [0; 3],
            xrcdn: 0,
            cqn: 0,
            rsvd2: 0,
            pdn,
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
            uar: 1,
            db_slot: self.slot(),
            log2_entries: 4,
            wqe_shift: 5,
            ring: self.contiguous(32 << 4),
        }
    }

    fn srq(&mut self, pdn: u32) -> u32 {
        let i = self.srq_in(pdn);
        self.call::<_, CreateSrqOut>(Opcode::CreateSrq, &i)
            .unwrap()
            .srqn
    }

    fn qp_in(&mut self, t: QpType, pdn: u32, cqn: u32, srqn: Option<u32>) -> CreateQpIn {
        CreateQpIn {
            qp_type: t.raw(),
            sq_sig_all: 0,
            // UD headers fill 64 bytes: 128 for an SGE.
            sq_wqe_shift: if matches!(t, QpType::Rc | QpType::Uc) {
                6
            } else {
                7
            },
            rq_wqe_shift: 5,
            log2_sq_size: 4,
            log2_rq_size: if srqn.is_some() { 0 } else { 4 },
            port: 1,
            rsvd0: 0,
            pdn,
            send_cqn: cqn,
            recv_cqn: cqn,
            srqn: srqn.unwrap_or(num::NONE),
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: if srqn.is_some() { 0 } else { 16 },
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            uar: 1,
            db_slot: self.slot(),
            rsvd1: [0; 2],
            xrcdn: 0,
            sq: self.contiguous(128 << 4),
            rq: if srqn.is_some() {
                Pbl::default()
            } else {
                self.contiguous(32 << 4)
            },
        }
    }

    fn qp(&mut self, t: QpType, pdn: u32, cqn: u32, srqn: Option<u32>) -> u32 {
        let i = self.qp_in(t, pdn, cqn, srqn);
        self.call::<_, CreateQpOut>(Opcode::CreateQp, &i)
            .unwrap()
            .qpn
    }

    fn modify(&mut self, qpn: u32, attr_mask: u32, attr: QpAttr) -> Result<(), Status> {
        self.call_in(
            Opcode::ModifyQp,
            &ModifyQpIn {
                qpn,
                attr_mask,
                attr,
                alt: device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]),
            },
        )
    }

    fn query_qp(&mut self, qpn: u32) -> Result<QueryQpOut, Status> {
        self.call(Opcode::QueryQp, &QueryQpIn { qpn })
    }

    fn state(&mut self, qpn: u32) -> QpState {
        QpState::from_raw(self.query_qp(qpn).unwrap().attr.qp_state).unwrap()
    }

    /// Reset -> Init -> RTR -> RTS, an RC QP to `dest` on this port's LID.
    fn connect_rc(&mut self, qpn: u32, dest: u32) -> Result<(), Status> {
        self.modify(
            qpn,
            m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
            init_attr(),
        )?;
        self.modify(qpn, RTR_MASK, rtr_attr(dest))?;
        self.modify(qpn, RTS_MASK, rts_attr())
    }

    fn reg_mr_in(&mut self, pdn: u32, pages: u64) -> (RegMrIn, Vec<u64>) {
        let (pbl, data) = self.one_level(pages);
        let i = RegMrIn {
            pdn,
            access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            iova: 0x7000_0000,
            length: pages * 4096,
            flags: 0,
            rsvd: 0,
            pbl,
        };
        (i, data)
    }

    fn mr(&mut self, pdn: u32, pages: u64) -> u32 {
        let (i, _) = self.reg_mr_in(pdn, pages);
        self.call::<_, RegMrOut>(Opcode::RegMr, &i).unwrap().lkey
    }

    fn ctx<T: AbiStruct>(&self, table: CtxTable, index: u32) -> T {
        let (status, b) = snapshot_with_doorbells(&self.hca, &self.db, table, index);
        assert_eq!(status, CtxStatus::Ok, "{table:?} {index}");
        assert_eq!(b.len(), T::SIZE);
        T::get(&b)
    }
}

fn init_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Init.raw(),
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttr::default()
    }
}

const RTR_MASK: u32 = m::STATE
    | m::AV
    | m::PATH_MTU
    | m::DEST_QPN
    | m::RQ_PSN
    | m::MAX_DEST_RD_ATOMIC
    | m::MIN_RNR_TIMER;

fn rtr_attr(dest: u32) -> QpAttr {
    let mut a = QpAttr {
        qp_state: QpState::Rtr.raw(),
        path_mtu: Mtu::M4096.raw(),
        dest_qp_num: dest,
        rq_psn: 100,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    a.ah_attr.dlid = LID;
    a
}

const RTS_MASK: u32 =
    m::STATE | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC;

fn rts_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts.raw(),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: 100,
        max_rd_atomic: 4,
        ..QpAttr::default()
    }
}

// ---------------------------------------------------------------- lifecycle

#[test]
fn objects_live_from_pd_to_connected_qps_over_loopback_and_are_destroyed() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let eqn = d.eq();
    assert_ne!(eqn, 0);
    let cqn = d.cq(eqn);
    let (mr_in, pages) = d.reg_mr_in(pdn, 2);
    let key = d.call::<_, RegMrOut>(Opcode::RegMr, &mr_in).unwrap().lkey;
    let srqn = d.srq(pdn);

    // Two RC QPs of this HCA, connected to each other through the port's own
    // LID, and a UD QP on the SRQ.
    let a = d.qp(QpType::Rc, pdn, cqn, None);
    let b = d.qp(QpType::Rc, pdn, cqn, None);
    let ud = d.qp(QpType::Ud, pdn, cqn, Some(srqn));
    assert_eq!(
        d.hca.port.engine().cq_users(cqn).unwrap(),
        6,
        "send and receive roles of three QPs"
    );
    assert_eq!(d.hca.port.engine().srq_users(srqn).unwrap(), 1);
    assert_eq!(d.hca.eqs[&eqn].users, 1);
    d.connect_rc(a, b).unwrap();
    d.connect_rc(b, a).unwrap();
    assert_eq!(d.state(a), QpState::Rts);
    let q = d.query_qp(b).unwrap();
    assert_eq!(
        (q.attr.dest_qp_num, q.attr.ah_attr.dlid, q.attr.path_mtu),
        (a, LID, Mtu::M4096.raw())
    );
    assert_eq!((q.attr.sq_psn, q.attr.rq_psn), (100, 100));
    assert_eq!(q.attr.cap.max_send_wr, 16);
    assert_eq!((q.pdn, q.send_cqn, q.srqn), (pdn, cqn, num::NONE));
    assert_eq!(q.qp_type, QpType::Rc.raw());

    // The QPs work: a SEND from a to b through the engine and the loopback.
    let e = d.hca.port.engine_mut();
    e.post_recv(
        b,
        tv::RecvWr {
            wr_id: 2,
            sges: vec![tv::Sge {
                addr: 0x7000_1000,
                length: 4096,
                lkey: key,
            }],
        },
    )
    .unwrap();
    d.mem.write(pages[0], b"hello over loopback").unwrap();
    let send = tv::SendWr {
        wr_id: 1,
        opcode: tv::WrOpcode::Send,
        flags: tv::SendFlags::SIGNALED,
        data: tv::SendData::Sges(vec![tv::Sge {
            addr: 0x7000_0000,
            length: 19,
            lkey: key,
        }]),
        imm_or_inv: 0,
        remote_addr: 0,
        rkey: 0,
        compare: 0,
        swap_add: 0,
        ud: None,
    };
    d.hca.port.engine_mut().post_send(a, send).unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < 2 && t0.elapsed() < Duration::from_secs(5) {
        d.hca.port.run_once(&mut d.mem, now());
        while let Some(c) = d.hca.port.engine_mut().poll_cq(cqn) {
            got.push(c);
        }
    }
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got.iter().all(|c| c.status == tv::WcStatus::Success),
        "{got:?}"
    );
    let mut b19 = [0u8; 19];
    d.mem.read(pages[1], &mut b19).unwrap();
    assert_eq!(&b19, b"hello over loopback");

    // Destroy in an order that meets every BUSY rule.
    assert_eq!(
        d.call_in(Opcode::DeallocPd, &DeallocPdIn { pdn }),
        Err(Status::Busy)
    );
    for qpn in [a, b, ud] {
        d.call_in(Opcode::DestroyQp, &DestroyQpIn { qpn }).unwrap();
    }
    assert_eq!(d.hca.port.engine().cq_users(cqn).unwrap(), 0);
    d.call_in(Opcode::DestroySrq, &DestroySrqIn { srqn })
        .unwrap();
    d.call_in(Opcode::DeregMr, &DeregMrIn { lkey: key })
        .unwrap();
    d.call_in(Opcode::DestroyCq, &DestroyCqIn { cqn }).unwrap();
    d.call_in(Opcode::DestroyEq, &DestroyEqIn { eqn }).unwrap();
    d.call_in(Opcode::DeallocPd, &DeallocPdIn { pdn }).unwrap();
    assert!(d.hca.qps.is_empty() && d.hca.cqs.is_empty() && d.hca.srqs.is_empty());
    assert_eq!(d.hca.eqs.len(), 1, "EQ 0 stays");
    assert_eq!(d.hca.slots.len(), 1, "only EQ 0's slot is held");
}

/// WF-10: a RoCE port reports link layer Ethernet, its MAC, the GID table and the
/// path MTU its Ethernet MTU allows; SET_GID fills and clears entries, all or
/// nothing, and is refused on an InfiniBand port.
#[test]
fn set_gid_mirrors_the_roce_gid_table() {
    const MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
    let mut d = Dev::new();
    let mut gid = [0u8; 16];
    gid[10..12].copy_from_slice(&[0xff, 0xff]);
    gid[12..].copy_from_slice(&[10, 99, 0, 1]);
    let set = |index: u16, valid: u8, gid_type: u8, gid: [u8; 16]| SetGidIn {
        index,
        port: 1,
        valid,
        gid_type,
        rsvd: [0; 3],
        gid,
    };
    assert_eq!(
        d.refuse(Opcode::SetGid, &set(0, 1, 2, gid)),
        (Status::NotSupported, Syndrome::Unsupported as u32),
        "InfiniBand port"
    );
    let q = QueryPortIn {
        port: 1,
        rsvd: [0; 3],
    };
    // AD-06: an InfiniBand port has 8 data VLs (VLCap 4: VL0-7).
    let p: PortAttr = d.call(Opcode::QueryPort, &q).unwrap();
    assert_eq!(p.max_vl_num, 4, "VL0-7");
    d.hca.port.set_engine(
        Engine::new(
            PortConfig::ethernet(MAC).with_ethernet_mtu(1500),
            Limits::default(),
        ),
        now(),
    );
    let p: PortAttr = d.call(Opcode::QueryPort, &q).unwrap();
    assert_eq!(p.link_layer, 2, "IBV_LINK_LAYER_ETHERNET");
    assert_eq!(p.max_vl_num, 1, "RoCE: VL0 only");
    assert_eq!(p.mac, MAC);
    assert_eq!(
        p.gid_tbl_len as usize,
        transport::engine::ROCE_GID_TABLE_LEN
    );
    assert_eq!(p.active_mtu, Mtu::M1024.raw(), "1500-byte Ethernet MTU");
    let r = d.exec(Opcode::QueryDevice, &[], DeviceAttr::SIZE);
    assert_eq!(r.status, Status::Ok);
    let dev = DeviceAttr::get(&r.out);
    // The port GUID is the MAC's EUI-64.
    assert_eq!(dev.node_guid, 0x5054_00ff_fe12_3456);

    d.call_in(Opcode::SetGid, &set(3, 1, 2, gid)).unwrap();
    assert_eq!(d.hca.port.engine().port().roce_gids[3], Some(gid));
    for (bad, why) in [
        (set(32, 1, 2, gid), "index past the table"),
        (set(4, 1, 1, gid), "RoCEv1"),
        (set(4, 1, 2, [0; 16]), "zero GID"),
        (set(4, 2, 2, gid), "valid is 0 or 1"),
        (set(3, 0, 2, [0; 16]), "a clear carries no type"),
    ] {
        assert_eq!(d.refuse(Opcode::SetGid, &bad).0, Status::BadParam, "{why}");
    }
    assert_eq!(
        d.hca.port.engine().port().roce_gids[3],
        Some(gid),
        "unchanged"
    );
    assert_eq!(d.hca.port.engine().port().roce_gids[4], None, "unchanged");
    d.call_in(Opcode::SetGid, &set(3, 0, 0, [0; 16])).unwrap();
    assert_eq!(d.hca.port.engine().port().roce_gids[3], None);
}

#[test]
fn query_device_port_and_counters_report_the_caps_and_the_port() {
    let mut d = Dev::new();
    let caps = d.hca.caps;
    let r = d.exec(Opcode::QueryDevice, &[], DeviceAttr::SIZE);
    assert_eq!(r.status, Status::Ok);
    let dev = DeviceAttr::get(&r.out);
    assert_eq!(dev.max_qp, caps.max_qp);
    assert_eq!(dev.max_qp_wr, Limits::default().max_qp_wr);
    assert_eq!(dev.max_sge, Limits::default().max_sge);
    assert_eq!(dev.max_cqe, Limits::default().max_cqe);
    assert_eq!(dev.max_mr, caps.max_mr);
    assert_eq!(dev.node_guid, GUID);
    assert_eq!(dev.max_msg_sz, 1 << 31);
    assert_eq!(dev.phys_port_cnt, 1);
    assert_ne!(dev.cap_flags & dev_cap::GSI, 0);
    assert_ne!(dev.page_size_cap & 4096, 0);
    assert_eq!(dev.page_size_cap & 2048, 0);

    let p: PortAttr = d
        .call(
            Opcode::QueryPort,
            &QueryPortIn {
                port: 1,
                rsvd: [0; 3],
            },
        )
        .unwrap();
    assert_eq!((p.lid, p.port_guid), (LID, GUID));
    assert_eq!(p.state, 4, "ACTIVE");
    assert_eq!(p.active_mtu, Mtu::M4096.raw());
    assert_eq!((p.pkey_tbl_len, p.pkeys[0]), (1, 0xffff));
    assert_eq!(&p.gid0[..8], &0xfe80_0000_0000_0000u64.to_be_bytes());
    assert_eq!(&p.gid0[8..], &GUID.to_be_bytes());
    assert_eq!(
        d.refuse(
            Opcode::QueryPort,
            &QueryPortIn {
                port: 2,
                rsvd: [0; 3]
            }
        ),
        (Status::BadParam, Syndrome::Port as u32)
    );

    d.hca.counters.cqes = 42;
    for &set in CounterSet::ALL {
        let c: QueryCountersOut = d
            .call(
                Opcode::QueryCounters,
                &QueryCountersIn {
                    port: 1,
                    set: set.raw(),
                    rsvd: 0,
                },
            )
            .unwrap();
        assert_eq!(c.count as usize, set.names().len(), "{set:?}");
    }
    let c: QueryCountersOut = d
        .call(
            Opcode::QueryCounters,
            &QueryCountersIn {
                port: 1,
                set: CounterSet::Device.raw(),
                rsvd: 0,
            },
        )
        .unwrap();
    let at = CounterSet::Device
        .names()
        .iter()
        .position(|n| n == "cqes")
        .unwrap();
    assert_eq!(c.values[at], 42);
    assert_eq!(
        d.refuse(
            Opcode::QueryCounters,
            &QueryCountersIn {
                port: 1,
                set: 99,
                rsvd: 0
            }
        ),
        (Status::BadParam, Syndrome::CounterSet as u32)
    );
}

// ---------------------------------------------------------------- protocol

#[test]
fn commands_complete_in_order_with_owner_cleared_last_and_events_asked_for() {
    let mut d = Dev::new();
    let mut nop = Dev::cmd(Opcode::Nop.raw(), &[], 0);
    nop.flags = cmd_flags::EVENT;
    nop.token = 0x1111;
    d.post(nop);
    // ALLOC_PD over garbage in `data`: the output is written over it, padded.
    let mut alloc = Dev::cmd(Opcode::AllocPd.raw(), &[0xee; 32], 0);
    alloc.token = 0x2222;
    d.post(alloc);
    let mut bad = Dev::cmd(0xbeef, &[], 0);
    bad.flags = cmd_flags::EVENT;
    bad.token = 0x3333;
    d.post(bad);
    let done = d.run().unwrap();
    assert_eq!(d.q.ci(), 3);
    assert_eq!(
        done,
        vec![
            CmdDone {
                token: 0x1111,
                status: Status::Ok
            },
            CmdDone {
                token: 0x3333,
                status: Status::BadOpcode
            }
        ]
    );
    assert_eq!(u32::from(Status::BadOpcode), 1);
    let s = d.read_slot(1);
    assert_eq!((s.status, s.owner, s.syndrome), (0, 0, 0));
    assert_ne!(u32::from_le_bytes(s.data[..4].try_into().unwrap()), 0);
    assert_eq!(s.data[4..], [0u8; 28]);
    let s = d.read_slot(2);
    assert_eq!(s.status, Status::BadOpcode.raw());
    assert_eq!(s.syndrome, Syndrome::Opcode as u32);
    assert_eq!(
        d.exec(Opcode::Nop, &[], 0).status,
        Status::Ok,
        "the queue goes on"
    );
    assert_eq!(d.exec_raw_status(0), Status::BadOpcode);
}

impl Dev {
    fn exec_raw_status(&mut self, op: u16) -> Status {
        self.submit(Dev::cmd(op, &[], 0), &[], 0).status
    }
}

#[test]
fn a_slot_the_device_does_not_own_stops_the_queue() {
    let mut d = Dev::new();
    d.post(Dev::cmd(Opcode::Nop.raw(), &[], 0));
    // The driver bumps PI past a slot it never handed over.
    let at = d.slot_addr(d.pi);
    d.mem
        .write(at, &Dev::cmd(Opcode::Nop.raw(), &[], 0).to_bytes())
        .unwrap();
    d.pi += 1;
    assert_eq!(d.run(), Err(Fatal::CmdqNotOwned));
    assert_eq!(d.q.ci(), 1, "CI stops at the slot");
    assert_eq!(d.read_slot(0).owner, 0);

    // A PI more than a ring ahead.
    let mut d = Dev::new();
    let pi = d.q.ci() + d.q.slots() + 1;
    assert_eq!(
        execute_pending(
            &mut d.hca,
            &mut d.q,
            pi,
            &mut d.mem,
            &d.db,
            now(),
            Budget::default()
        ),
        Err(Fatal::CmdqNotOwned)
    );
    assert_eq!(d.q.ci(), 0);
}

/// Issue 13, MMIO stall: a budget bounds one call by commands and by time (at
/// least one command runs, so the queue always moves).
#[test]
fn a_budget_bounds_one_call_by_commands_and_by_time() {
    let mut d = Dev::new();
    for _ in 0..20 {
        d.post(Dev::cmd(Opcode::Nop.raw(), &[], 0));
    }
    let mut call = |budget| {
        let before = d.q.ci();
        execute_pending(&mut d.hca, &mut d.q, d.pi, &mut d.mem, &d.db, now(), budget).unwrap();
        d.q.ci() - before
    };
    let five = Budget {
        commands: 5,
        time: None,
    };
    assert_eq!(call(five), 5);
    let no_time = Budget {
        commands: 64,
        time: Some(Duration::ZERO),
    };
    assert_eq!(call(no_time), 1, "the time is up after the first command");
    let none = Budget {
        commands: 0,
        time: None,
    };
    assert_eq!(call(none), 1, "at least one");
    assert_eq!(call(Budget::default()), 13);
}

#[test]
fn one_call_executes_a_bounded_batch() {
    let mut d = Dev::new();
    for _ in 0..100 {
        d.post(Dev::cmd(Opcode::Nop.raw(), &[], 0));
    }
    d.run().unwrap();
    assert_eq!(d.q.ci(), MAX_COMMANDS_PER_CALL);
    d.run().unwrap();
    assert_eq!(d.q.ci(), 100);
    // Free-running indices wrap.
    let mut d = Dev::new();
    d.q = CmdQueue::new(&d.mem, CMDQ, CMDQ_LOG2, 10).unwrap();
    assert_eq!(d.q.base(), CMDQ);
    assert_eq!(d.q.log2_size(), CMDQ_LOG2);
    for _ in 0..300 {
        d.post(Dev::cmd(Opcode::Nop.raw(), &[], 0));
        if d.pi - d.q.ci() == d.q.slots() {
            d.run().unwrap();
        }
    }
    while d.q.ci() != d.pi {
        d.run().unwrap();
    }
    assert_eq!(d.q.ci(), 300);
}

#[test]
fn command_queue_configuration_is_checked() {
    let mem = VecMemory::new(BASE, 64 << 10);
    assert!(CmdQueue::new(&mem, BASE, 6, 10).is_ok());
    for (base, log2, max) in [
        (BASE + 64, 6, 10),         // unaligned
        (BASE, 0, 10),              // empty
        (BASE, 11, 10),             // above CAP_MAX_CMDQ_LOG2
        (BASE, 40, 60),             // absurd
        (BASE + (60 << 10), 8, 10), // runs past memory
        (0x9000_0000, 6, 10),       // outside memory
        (!0xfffu64, 6, 10),         // wraps
    ] {
        assert_eq!(
            CmdQueue::new(&mem, base, log2, max).map(|_| ()),
            Err(Fatal::CmdqBadConfig),
            "{base:#x} {log2} {max}"
        );
    }
}

#[test]
fn mailboxes_are_checked_before_anything_runs() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let qi = d.qp_in(QpType::Rc, pdn, cqn, None);
    let input = bytes(&qi);
    let n = CreateQpIn::SIZE as u16;
    let cases: [(u64, u16, Status, Syndrome); 6] = [
        (IN_MB, n - 1, Status::BadParam, Syndrome::InMailboxLength),
        (IN_MB, 4097, Status::BadParam, Syndrome::InMailboxLength),
        (IN_MB, 0, Status::BadParam, Syndrome::InMailboxLength),
        (
            IN_MB + 4096 - 40,
            n,
            Status::BadParam,
            Syndrome::InMailboxPage,
        ),
        (
            0x9000_0000,
            n,
            Status::BadAddress,
            Syndrome::InMailboxAddress,
        ),
        (
            u64::MAX - 8,
            n,
            Status::BadAddress,
            Syndrome::InMailboxAddress,
        ),
    ];
    for (addr, len, status, syndrome) in cases {
        d.mem.write(IN_MB, &input).unwrap();
        let mut c = Dev::cmd(Opcode::CreateQp.raw(), &input, 0);
        c.in_mailbox = addr;
        c.in_len = len;
        let r = d.submit(c, &[], 0);
        assert_eq!(
            (r.status, r.syndrome),
            (status, syndrome as u32),
            "{addr:#x} {len}"
        );
    }
    assert!(d.hca.qps.is_empty());
    // A longer mailbox is fine: the device reads the struct's size.
    let mut c = Dev::cmd(Opcode::CreateQp.raw(), &input, 0);
    c.in_len = 4096;
    assert_eq!(d.submit(c, &input, 0).status, Status::Ok);

    let n = DeviceAttr::SIZE as u16;
    let cases: [(u64, u16, Status, Syndrome); 4] = [
        (OUT_MB, n - 1, Status::BadParam, Syndrome::OutMailboxLength),
        (OUT_MB, 8192, Status::BadParam, Syndrome::OutMailboxLength),
        (OUT_MB + 4000, n, Status::BadParam, Syndrome::OutMailboxPage),
        (
            0x9000_0000,
            n,
            Status::BadAddress,
            Syndrome::OutMailboxAddress,
        ),
    ];
    for (addr, len, status, syndrome) in cases {
        let mut c = Dev::cmd(Opcode::QueryDevice.raw(), &[], 0);
        c.out_mailbox = addr;
        c.out_len = len;
        let r = d.submit(c, &[], 0);
        assert_eq!(
            (r.status, r.syndrome),
            (status, syndrome as u32),
            "{addr:#x} {len}"
        );
    }
    // A mailbox ending exactly at a page end is within it.
    let mut c = Dev::cmd(Opcode::QueryDevice.raw(), &[], 0);
    c.out_mailbox = OUT_MB + 4096 - u64::from(n);
    c.out_len = n;
    assert_eq!(d.submit(c, &[], 0).status, Status::Ok);
}

// ---------------------------------------------------------------- page lists

#[test]
fn rings_take_page_lists_in_every_form() {
    let mut d = Dev::new();
    // 64 CQEs of 64 bytes: one page, in each form.
    let (one, pages) = d.one_level(1);
    let mut i = d.cq_in(0);
    i.ring = one;
    let cqn = d
        .call::<_, CreateCqOut>(
            Opcode::CreateCq,
            &CreateCqIn {
                log2_entries: 6,
                ..i
            },
        )
        .unwrap()
        .cqn;
    assert_eq!(d.hca.cqs[&cqn].ring.entry_addr(1), pages[0] + 64);

    // Two levels: 1024 CQEs over 16 pages through one table.
    let dir = d.alloc(1);
    let table = d.alloc(1);
    let data: Vec<u64> = (0..16).map(|_| d.alloc(1)).collect();
    d.mem.write(dir, &table.to_le_bytes()).unwrap();
    for (k, p) in data.iter().enumerate() {
        d.mem.write(table + 8 * k as u64, &p.to_le_bytes()).unwrap();
    }
    let mut i = d.cq_in(0);
    i.log2_entries = 10;
    i.ring = Pbl {
        addr: dir,
        npages: 16,
        page_shift: 12,
        levels: pbl_const::TWO_LEVEL as u8,
        rsvd: 0,
    };
    let out: CreateCqOut = d.call(Opcode::CreateCq, &i).unwrap();
    assert_eq!(out.entries, 1024);
    assert_eq!(d.hca.cqs[&out.cqn].ring.entry_addr(64 * 15), data[15]);
    assert_eq!(d.hca.cqs[&out.cqn].pbl, i.ring);
}

#[test]
fn bad_page_lists_create_nothing() {
    let mut d = Dev::new();
    let good = d.cq_in(0);
    let (list, _) = d.one_level(1);
    let cqs = d.hca.cqs.len();
    let bad = |f: &dyn Fn(&mut Pbl)| {
        let mut p = good.ring;
        f(&mut p);
        p
    };
    let unaligned_list = {
        let l = d.alloc(1);
        d.mem.write(l, &(d.heap + 8).to_le_bytes()).unwrap();
        Pbl {
            addr: l,
            npages: 1,
            page_shift: 12,
            levels: pbl_const::ONE_LEVEL as u8,
            rsvd: 0,
        }
    };
    let unaligned_table = {
        let dir = d.alloc(1);
        d.mem.write(dir, &(d.heap + 8).to_le_bytes()).unwrap();
        Pbl {
            addr: dir,
            npages: 1,
            page_shift: 12,
            levels: pbl_const::TWO_LEVEL as u8,
            rsvd: 0,
        }
    };
    let page_outside = {
        let l = d.alloc(1);
        d.mem.write(l, &0x9000_0000u64.to_le_bytes()).unwrap();
        Pbl {
            addr: l,
            npages: 1,
            page_shift: 12,
            levels: pbl_const::ONE_LEVEL as u8,
            rsvd: 0,
        }
    };
    let cases: Vec<(Pbl, Status, Syndrome)> = vec![
        (bad(&|p| p.levels = 3), Status::BadParam, Syndrome::PageList),
        (
            bad(&|p| p.page_shift = 11),
            Status::BadParam,
            Syndrome::PageList,
        ),
        (
            bad(&|p| p.page_shift = 31),
            Status::BadParam,
            Syndrome::PageList,
        ),
        (
            bad(&|p| p.page_shift = 255),
            Status::BadParam,
            Syndrome::PageList,
        ),
        (bad(&|p| p.rsvd = 1), Status::BadParam, Syndrome::PageList),
        (
            bad(&|p| p.npages = pbl_const::MAX_PAGES + 1),
            Status::BadParam,
            Syndrome::PageList,
        ),
        (bad(&|p| p.npages = 0), Status::BadParam, Syndrome::PageList),
        (
            bad(&|p| p.addr += 64),
            Status::BadParam,
            Syndrome::PageUnaligned,
        ),
        (
            bad(&|p| p.addr = 0x9000_0000),
            Status::BadAddress,
            Syndrome::PageListAddress,
        ),
        (
            bad(&|p| p.addr = !0xfffu64),
            Status::BadAddress,
            Syndrome::PageListAddress,
        ),
        (unaligned_list, Status::BadParam, Syndrome::PageUnaligned),
        (unaligned_table, Status::BadParam, Syndrome::PageUnaligned),
        (
            Pbl {
                addr: list.addr + 4,
                ..list
            },
            Status::BadParam,
            Syndrome::PageUnaligned,
        ),
        (
            Pbl {
                addr: 0x9000_0000,
                ..list
            },
            Status::BadAddress,
            Syndrome::PageListAddress,
        ),
        (page_outside, Status::BadAddress, Syndrome::PageListAddress),
    ];
    for (ring, status, syndrome) in cases {
        let i = CreateCqIn { ring, ..good };
        assert_eq!(
            d.refuse(Opcode::CreateCq, &i),
            (status, syndrome as u32),
            "{ring:?}"
        );
    }
    // A ring larger than its pages.
    let i = CreateCqIn {
        log2_entries: 7,
        ..good
    };
    assert_eq!(
        d.refuse(Opcode::CreateCq, &i),
        (Status::BadParam, Syndrome::PageList as u32)
    );
    assert_eq!(d.hca.cqs.len(), cqs);
    assert_eq!(d.hca.eqs[&0].users, 0);
    // The same slot and ring work once the list is right.
    assert!(d.call::<_, CreateCqOut>(Opcode::CreateCq, &good).is_ok());
}

// ---------------------------------------------------------------- slots

#[test]
fn doorbell_slots_must_be_free_in_range_and_not_eq0s() {
    let mut d = Dev::new();
    let i = d.cq_in(0);
    d.call::<_, CreateCqOut>(Opcode::CreateCq, &i).unwrap();
    let again = CreateCqIn {
        ring: d.contiguous(1024),
        ..i
    };
    let cases = [
        (i.uar, i.db_slot, Status::Busy, Syndrome::SlotBusy),
        (4, 100, Status::BadParam, Syndrome::SlotRange),
        (u32::MAX, 100, Status::BadParam, Syndrome::SlotRange),
        (1, 7, Status::BadParam, Syndrome::SlotRange),
        (1, 512, Status::BadParam, Syndrome::SlotRange),
        (
            0,
            uar::EQ0_SLOT as u16,
            Status::Permission,
            Syndrome::SlotReserved,
        ),
    ];
    for (u, s, status, syndrome) in cases {
        let c = CreateCqIn {
            uar: u,
            db_slot: s,
            ..again
        };
        assert_eq!(
            d.refuse(Opcode::CreateCq, &c),
            (status, syndrome as u32),
            "uar {u} slot {s}"
        );
    }
    assert_eq!(d.hca.cqs.len(), 1);
    // The last slot of the last page is fine.
    let c = CreateCqIn {
        uar: 3,
        db_slot: 511,
        ..again
    };
    assert!(d.call::<_, CreateCqOut>(Opcode::CreateCq, &c).is_ok());

    // EQs: UAR 0 only, never EQ 0's slot.
    let e = d.eq_in();
    for (u, s, status) in [
        (1, 100, Status::BadParam),
        (0, uar::EQ0_SLOT as u16, Status::Permission),
        (0, i.db_slot, Status::Ok), // UAR 0 slot of that number is free
    ] {
        let c = CreateEqIn {
            uar: u,
            db_slot: s,
            ..e
        };
        assert_eq!(d.exec(Opcode::CreateEq, &bytes(&c), 4).status, status);
    }
}

// ---------------------------------------------------------------- numbers

#[test]
fn unknown_numbers_are_refused_for_their_kind() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let srqn = d.srq(pdn);
    let other_pd = d.pd();

    let i = d.cq_in(77);
    assert_eq!(
        d.refuse(Opcode::CreateCq, &i),
        (Status::NotFound, Syndrome::NoEq as u32)
    );
    let i = d.qp_in(QpType::Rc, 999, cqn, None);
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::BadPd);
    let mut i = d.qp_in(QpType::Rc, pdn, cqn, None);
    i.recv_cqn = 999;
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::BadCq);
    let i = d.qp_in(QpType::Rc, pdn, cqn, Some(999));
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::BadSrq);
    // An SRQ of another PD (QS-09).
    let i = d.qp_in(QpType::Rc, other_pd, cqn, Some(srqn));
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::BadSrq);
    // A CQN where an SRQN is needed and the other way round.
    let i = d.qp_in(QpType::Rc, pdn, srqn, None);
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::BadCq);
    let i = d.srq_in(999);
    assert_eq!(d.refuse(Opcode::CreateSrq, &i).0, Status::BadPd);
    let (mut i, _) = d.reg_mr_in(999, 1);
    assert_eq!(d.refuse(Opcode::RegMr, &i).0, Status::BadPd);
    i.pdn = pdn;

    for (op, input) in [
        (Opcode::DestroyQp, bytes(&DestroyQpIn { qpn: 999 })),
        (Opcode::QueryQp, bytes(&QueryQpIn { qpn: 999 })),
        (Opcode::DestroyCq, bytes(&DestroyCqIn { cqn: srqn })),
        (Opcode::DestroySrq, bytes(&DestroySrqIn { srqn: cqn })),
        (Opcode::QuerySrq, bytes(&QuerySrqIn { srqn: 999 })),
        (Opcode::DestroyEq, bytes(&DestroyEqIn { eqn: 9 })),
        (Opcode::DeregMr, bytes(&DeregMrIn { lkey: 0x100 })),
    ] {
        assert_eq!(d.exec(op, &input, 4096).status, Status::NotFound, "{op:?}");
    }
    let m = ModifyQpIn {
        qpn: 999,
        attr_mask: m::STATE,
        attr: init_attr(),
        alt: device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]),
    };
    assert_eq!(d.refuse(Opcode::ModifyQp, &m).0, Status::NotFound);
    let s = ModifySrqIn {
        srqn: 999,
        attr_mask: srq_attr_mask::LIMIT,
        max_wr: 0,
        srq_limit: 1,
    };
    assert_eq!(d.refuse(Opcode::ModifySrq, &s).0, Status::NotFound);
    assert_eq!(
        d.refuse(Opcode::DeallocPd, &DeallocPdIn { pdn: 999 }).0,
        Status::BadPd
    );
    assert_eq!(
        d.refuse(Opcode::DestroyEq, &DestroyEqIn { eqn: 0 }),
        (Status::Permission, Syndrome::Eq0 as u32)
    );
    // A stale key after deregistration.
    let key = d.call::<_, RegMrOut>(Opcode::RegMr, &i).unwrap().lkey;
    d.call_in(Opcode::DeregMr, &DeregMrIn { lkey: key })
        .unwrap();
    assert_eq!(
        d.refuse(Opcode::DeregMr, &DeregMrIn { lkey: key }).0,
        Status::NotFound
    );
}

#[test]
fn objects_in_use_are_busy() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let eqn = d.eq();
    let cqn = d.cq(eqn);
    let srqn = d.srq(pdn);
    let key = d.mr(pdn, 1);
    let qpn = d.qp(QpType::Ud, pdn, cqn, Some(srqn));
    let busy = |d: &mut Dev| {
        [
            (Opcode::DeallocPd, bytes(&DeallocPdIn { pdn })),
            (Opcode::DestroyEq, bytes(&DestroyEqIn { eqn })),
            (Opcode::DestroyCq, bytes(&DestroyCqIn { cqn })),
            (Opcode::DestroySrq, bytes(&DestroySrqIn { srqn })),
        ]
        .into_iter()
        .map(|(op, i)| d.exec(op, &i, 0).status)
        .collect::<Vec<_>>()
    };
    assert_eq!(busy(&mut d), [Status::Busy; 4]);
    d.call_in(Opcode::DestroyQp, &DestroyQpIn { qpn }).unwrap();
    // The QP's users are gone; the MR still holds the PD, the CQ the EQ.
    assert_eq!(
        busy(&mut d),
        [Status::Busy, Status::Busy, Status::Ok, Status::Ok]
    );
    assert_eq!(
        busy(&mut d),
        [Status::Busy, Status::Ok, Status::NotFound, Status::NotFound]
    );
    d.call_in(Opcode::DeregMr, &DeregMrIn { lkey: key })
        .unwrap();
    assert_eq!(busy(&mut d)[0], Status::Ok);
}

// ---------------------------------------------------------------- QPs

#[test]
fn create_qp_checks_sizes_and_strides_and_leaves_nothing_on_failure() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let base = d.qp_in(QpType::Rc, pdn, cqn, None);
    let caps = d.hca.caps;
    type Edit = fn(&mut CreateQpIn);
    let cases: [(Edit, Status); 15] = [
        (|i| i.qp_type = 9, Status::BadParam),
        (|i| i.port = 2, Status::BadParam),
        (|i| i.rsvd1[0] = 1, Status::BadParam),
        (|i| i.cap.max_send_wr = 1 << 20, Status::LimitExceeded),
        (|i| i.cap.max_recv_sge = 33, Status::LimitExceeded),
        (|i| i.cap.max_inline_data = 4096, Status::LimitExceeded),
        (|i| i.cap.max_send_wr = 17, Status::BadParam), // ring of 16
        (|i| i.cap.max_recv_wr = 17, Status::BadParam),
        (|i| i.log2_sq_size = 15, Status::LimitExceeded), // above max_qp_wr
        (|i| i.sq_wqe_shift = 5, Status::BadParam),
        (|i| i.rq_wqe_shift = 13, Status::BadParam),
        (|i| i.cap.max_send_sge = 3, Status::BadParam), // 64-byte stride: 2
        (|i| i.cap.max_recv_sge = 2, Status::BadParam), // 32-byte stride: 1
        (|i| i.cap.max_inline_data = 33, Status::BadParam),
        // A bad RQ after a good SQ: nothing of the SQ stays.
        (|i| i.rq.addr = 0x9000_0000, Status::BadAddress),
    ];
    for (k, (edit, status)) in cases.into_iter().enumerate() {
        let mut i = base;
        edit(&mut i);
        assert_eq!(d.refuse(Opcode::CreateQp, &i).0, status, "case {k}");
    }
    assert!(d.hca.qps.is_empty());
    assert_eq!(d.hca.port.engine().cq_users(cqn).unwrap(), 0);
    assert_eq!(d.hca.slots.len(), 2, "EQ 0 and the CQ");
    assert_eq!(caps.max_sge, 32);
    // An SRQ QP names no RQ.
    let srqn = d.srq(pdn);
    let mut i = d.qp_in(QpType::Rc, pdn, cqn, Some(srqn));
    i.rq = d.contiguous(4096);
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::BadParam);
    assert_eq!(d.hca.port.engine().srq_users(srqn).unwrap(), 0);

    // Granted sizes: the rings' WQE counts, what the strides hold.
    let mut i = base;
    i.sq_wqe_shift = 8;
    i.cap.max_send_wr = 10;
    let out: CreateQpOut = d.call(Opcode::CreateQp, &i).unwrap();
    assert_eq!(out.cap.max_send_wr, 16);
    assert_eq!(out.cap.max_recv_wr, 16);
    assert_eq!(out.cap.max_send_sge, (256 - 32) / 16);
    assert_eq!(out.cap.max_recv_sge, 1);
    assert_eq!(out.cap.max_inline_data, 256 - 32);
    assert_eq!(d.hca.qps[&out.qpn].cap.max_send_sge, 14);
    // The slot is now the QP's.
    assert_eq!(d.refuse(Opcode::CreateQp, &i).0, Status::Busy);

    // GSI: QP 1, once (ARCHITECTURE.md §7).
    let g = d.qp_in(QpType::Gsi, pdn, cqn, None);
    let out: CreateQpOut = d.call(Opcode::CreateQp, &g).unwrap();
    assert_eq!(out.qpn, num::GSI_QPN);
    assert_eq!(out.cap.max_send_sge, 4, "128-byte stride: 64 of UD headers");
    let mut g = d.qp_in(QpType::Ud, pdn, cqn, None);
    g.sq_wqe_shift = 6;
    assert_eq!(
        d.refuse(Opcode::CreateQp, &g),
        (Status::BadParam, Syndrome::Stride as u32),
        "64-byte UD stride: no room for an SGE"
    );
    let g = d.qp_in(QpType::Gsi, pdn, cqn, None);
    assert_eq!(d.refuse(Opcode::CreateQp, &g).0, Status::Busy);
    assert_eq!(d.hca.qps.len(), 2);
    // SMI (AD-09): QP 0, once.
    let s = d.qp_in(QpType::Smi, pdn, cqn, None);
    let out: CreateQpOut = d.call(Opcode::CreateQp, &s).unwrap();
    assert_eq!(out.qpn, 0);
    let s = d.qp_in(QpType::Smi, pdn, cqn, None);
    assert_eq!(d.refuse(Opcode::CreateQp, &s).0, Status::Busy);
    assert_eq!(d.hca.qps.len(), 3);
}

#[test]
fn a_refused_modify_leaves_the_qp_as_it_was() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let qpn = d.qp(QpType::Rc, pdn, cqn, None);
    // Reset -> RTR is no transition (QS-02).
    assert_eq!(d.modify(qpn, RTR_MASK, rtr_attr(5)), Err(Status::BadState));
    assert_eq!(d.state(qpn), QpState::Reset);
    // Reset -> Init without the port.
    assert_eq!(
        d.modify(qpn, m::STATE | m::PKEY_INDEX | m::ACCESS_FLAGS, init_attr()),
        Err(Status::BadState)
    );
    assert_eq!(d.state(qpn), QpState::Reset);
    d.modify(
        qpn,
        m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
        init_attr(),
    )
    .unwrap();
    let before = d.query_qp(qpn).unwrap();
    let mut sl = rtr_attr(5);
    sl.ah_attr.sl = 16;
    let mut global = rtr_attr(5);
    global.ah_attr.is_global = 1;
    global.ah_attr.flow_label = 1 << 20;
    let mut mtu = rtr_attr(5);
    mtu.path_mtu = 6;
    let mut psn = rtr_attr(5);
    psn.rq_psn = 1 << 24;
    let mut state = rtr_attr(5);
    state.qp_state = 7;
    let mut acc = rtr_attr(5);
    acc.qp_access_flags = 1 << 7;
    let cases = [
        (RTR_MASK, sl, Status::BadParam),
        (RTR_MASK, global, Status::BadParam),
        (RTR_MASK, mtu, Status::BadParam),
        (RTR_MASK, psn, Status::BadParam),
        (RTR_MASK, state, Status::BadParam),
        (RTR_MASK | m::ACCESS_FLAGS, acc, Status::BadParam),
        (RTR_MASK | 1 << 25, rtr_attr(5), Status::BadParam),
        // A zeroed alternate path names port 0 (AD-10).
        (RTR_MASK | m::ALT_PATH, rtr_attr(5), Status::BadParam),
        (RTR_MASK | m::CAP, rtr_attr(5), Status::NotSupported),
        (RTR_MASK | m::SQ_PSN, rtr_attr(5), Status::BadState),
        (RTR_MASK & !m::DEST_QPN, rtr_attr(5), Status::BadState),
    ];
    for (k, (mask, attr, status)) in cases.into_iter().enumerate() {
        assert_eq!(d.modify(qpn, mask, attr), Err(status), "case {k}");
        assert_eq!(d.query_qp(qpn).unwrap(), before, "case {k}");
    }
    // The right one goes through.
    d.modify(qpn, RTR_MASK, rtr_attr(5)).unwrap();
    assert_eq!(d.state(qpn), QpState::Rtr);
}

#[test]
fn ad_10_modify_qp_takes_the_alternate_path_and_query_qp_reports_it() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let qpn = d.qp(QpType::Rc, pdn, cqn, None);
    d.connect_rc(qpn, qpn).unwrap();
    let mut alt = device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]);
    alt.ah_attr.dlid = LID;
    alt.ah_attr.sl = 3;
    alt.port_num = 1;
    alt.timeout = 12;
    let arm = QpAttr {
        path_mig_state: 1, // Rearm: the device arms it at once
        ..QpAttr::default()
    };
    let modify = |mask: u32, attr: QpAttr, alt| ModifyQpIn {
        qpn,
        attr_mask: mask,
        attr,
        alt,
    };
    // Arming without an alternate path, a bad migration state: refused.
    let zero = device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]);
    let r = d.call_in(Opcode::ModifyQp, &modify(m::PATH_MIG_STATE, arm, zero));
    assert_eq!(r, Err(Status::BadParam));
    let bad = QpAttr {
        path_mig_state: 3,
        ..QpAttr::default()
    };
    let r = d.call_in(
        Opcode::ModifyQp,
        &modify(m::PATH_MIG_STATE | m::ALT_PATH, bad, alt),
    );
    assert_eq!(r, Err(Status::BadParam));
    d.call_in(
        Opcode::ModifyQp,
        &modify(m::PATH_MIG_STATE | m::ALT_PATH, arm, alt),
    )
    .unwrap();
    let q = d.query_qp(qpn).unwrap();
    assert_eq!(q.attr.path_mig_state, 2, "Armed");
    assert_eq!(q.alt.ah_attr.sl, 3);
    assert_eq!(q.alt.ah_attr.dlid, LID);
    assert_eq!((q.alt.port_num, q.alt.timeout), (1, 12));
}

#[test]
fn a_transition_to_reset_takes_the_doorbell_indices_as_the_new_start() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let i = d.qp_in(QpType::Ud, pdn, cqn, None);
    let slot = DbSlot {
        uar: i.uar,
        slot: i.db_slot,
    };
    // Indices the driver left in a reused slot count from there.
    d.db.store(slot.offset(), 7);
    d.db.store(slot.offset() + 4, 9);
    let qpn = d.call::<_, CreateQpOut>(Opcode::CreateQp, &i).unwrap().qpn;
    assert_eq!(
        (d.hca.qps[&qpn].sq_fetched, d.hca.qps[&qpn].rq_fetched),
        (7, 9)
    );
    let mut a = init_attr();
    a.qkey = 0x1111;
    d.modify(qpn, m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY, a)
        .unwrap();
    d.db.store(slot.offset(), 20);
    d.db.store(slot.offset() + 4, 30);
    // Error keeps what the device fetched; Reset starts again from the slot.
    let err = QpAttr {
        qp_state: QpState::Error.raw(),
        ..QpAttr::default()
    };
    d.modify(qpn, m::STATE, err).unwrap();
    assert_eq!(d.hca.qps[&qpn].sq_fetched, 7);
    let reset = QpAttr {
        qp_state: QpState::Reset.raw(),
        ..QpAttr::default()
    };
    d.modify(qpn, m::STATE, reset).unwrap();
    assert_eq!(
        (d.hca.qps[&qpn].sq_fetched, d.hca.qps[&qpn].rq_fetched),
        (20, 30)
    );
    assert_eq!(d.state(qpn), QpState::Reset);
}

// ---------------------------------------------------------------- SRQs, MRs

#[test]
fn srqs_are_sized_limited_modified_and_queried() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let base = d.srq_in(pdn);
    type Edit = fn(&mut CreateSrqIn);
    let cases: [(Edit, Status); 7] = [
        (|i| i.max_wr = 0, Status::LimitExceeded),
        (|i| i.max_wr = 1 << 20, Status::LimitExceeded),
        (|i| i.max_sge = 33, Status::LimitExceeded),
        (|i| i.srq_limit = 17, Status::BadParam),
        (|i| i.max_wr = 17, Status::BadParam), // ring of 16
        (|i| i.wqe_shift = 4, Status::BadParam),
        (|i| i.max_sge = 2, Status::BadParam), // 32-byte stride: 1 SGE
    ];
    for (k, (edit, status)) in cases.into_iter().enumerate() {
        let mut i = base;
        edit(&mut i);
        assert_eq!(d.refuse(Opcode::CreateSrq, &i).0, status, "case {k}");
    }
    assert!(d.hca.srqs.is_empty());
    let out: CreateSrqOut = d
        .call(
            Opcode::CreateSrq,
            &CreateSrqIn {
                srq_type: 0,
                rsvd: [0; 3],
                xrcdn: 0,
                cqn: 0,
                rsvd2: 0,
                max_wr: 10,
                srq_limit: 3,
                ..base
            },
        )
        .unwrap();
    assert_eq!((out.max_wr, out.max_sge), (16, 1));
    let q: QuerySrqOut = d
        .call(Opcode::QuerySrq, &QuerySrqIn { srqn: out.srqn })
        .unwrap();
    assert_eq!((q.max_wr, q.srq_limit, q.wqe_count), (16, 3, 0));
    let modify = |mask, limit| ModifySrqIn {
        srqn: out.srqn,
        attr_mask: mask,
        max_wr: 32,
        srq_limit: limit,
    };
    d.call_in(Opcode::ModifySrq, &modify(srq_attr_mask::LIMIT, 5))
        .unwrap();
    assert_eq!(
        d.call_in(Opcode::ModifySrq, &modify(srq_attr_mask::LIMIT, 17)),
        Err(Status::BadParam)
    );
    assert_eq!(
        d.call_in(Opcode::ModifySrq, &modify(srq_attr_mask::MAX_WR, 0)),
        Err(Status::NotSupported)
    );
    assert_eq!(
        d.call_in(Opcode::ModifySrq, &modify(1 << 5, 0)),
        Err(Status::BadParam)
    );
    let q: QuerySrqOut = d
        .call(Opcode::QuerySrq, &QuerySrqIn { srqn: out.srqn })
        .unwrap();
    assert_eq!(q.srq_limit, 5);
}

/// MP-06, MP-07: ALLOC_MW / DEALLOC_MW; the caps report the window types
/// (1, 2B, 2A) and SEND with Invalidate (OP-03); a window keeps its PD busy.
#[test]
fn mp_06_mp_07_memory_windows_are_allocated_and_deallocated() {
    let mut d = Dev::new();
    let r = d.exec(Opcode::QueryDevice, &[], DeviceAttr::SIZE);
    let dev = DeviceAttr::get(&r.out);
    let want = dev_cap::MW_TYPE1 | dev_cap::MW_TYPE2 | dev_cap::MW_TYPE2A | dev_cap::SEND_WITH_INV;
    assert_eq!(dev.cap_flags & want, want);
    let pdn = d.pd();
    let alloc = |pdn, t| AllocMwIn { pdn, mw_type: t };
    let k1 = d
        .call::<_, AllocMwOut>(Opcode::AllocMw, &alloc(pdn, 1))
        .unwrap()
        .rkey;
    let k2 = d
        .call::<_, AllocMwOut>(Opcode::AllocMw, &alloc(pdn, 2))
        .unwrap()
        .rkey;
    assert_ne!(k1 >> 8, k2 >> 8);
    let k2a = d
        .call::<_, AllocMwOut>(Opcode::AllocMw, &alloc(pdn, 3))
        .unwrap()
        .rkey;
    assert_ne!(k2a >> 8, k2 >> 8);
    d.call_in(Opcode::DeallocMw, &DeallocMwIn { rkey: k2a })
        .unwrap();
    assert_eq!(
        d.call::<_, AllocMwOut>(Opcode::AllocMw, &alloc(pdn, 4))
            .map(|o| o.rkey),
        Err(Status::BadParam)
    );
    assert_eq!(
        d.call::<_, AllocMwOut>(Opcode::AllocMw, &alloc(999, 1))
            .map(|o| o.rkey),
        Err(Status::BadPd)
    );
    assert_eq!(
        d.call_in(Opcode::DeallocPd, &DeallocPdIn { pdn }),
        Err(Status::Busy)
    );
    d.call_in(Opcode::DeallocMw, &DeallocMwIn { rkey: k1 })
        .unwrap();
    assert_eq!(
        d.call_in(Opcode::DeallocMw, &DeallocMwIn { rkey: k1 }),
        Err(Status::NotFound)
    );
    // An MR key is not a window.
    let (i, _) = d.reg_mr_in(pdn, 1);
    let key = d.call::<_, RegMrOut>(Opcode::RegMr, &i).unwrap().lkey;
    assert_eq!(
        d.call_in(Opcode::DeallocMw, &DeallocMwIn { rkey: key }),
        Err(Status::NotFound)
    );
    d.call_in(Opcode::DeallocMw, &DeallocMwIn { rkey: k2 })
        .unwrap();
    d.call_in(Opcode::DeregMr, &DeregMrIn { lkey: key })
        .unwrap();
    d.call_in(Opcode::DeallocPd, &DeallocPdIn { pdn }).unwrap();
}

struct NoIrq;
impl device::hca::Interrupts for NoIrq {
    fn trigger(&self, _vector: u16) {}
}

/// RESIZE_CQ input over a fresh contiguous ring, filled with garbage whose
/// owner bits are set (the device must initialise every slot).
fn resize_cq_in(d: &mut Dev, cqn: u32, log2: u8) -> ResizeCqIn {
    let ring = d.contiguous(64 << log2);
    d.mem
        .write(ring.addr, &vec![0xa5; 64usize << log2])
        .unwrap();
    ResizeCqIn {
        cqn,
        log2_entries: log2,
        rsvd: [0; 3],
        ring,
    }
}

#[test]
fn cq_04_resize_cq_copies_unconsumed_cqes_with_new_owner_bits_and_stamps_the_rest() {
    use device::abi::cqe::{owner_bit, Cqe};
    let mut d = Dev::new();
    let cqn = d.cq(0);
    let (ring, db) = {
        let c = &d.hca.cqs[&cqn];
        (c.ring.clone(), c.db)
    };
    // As if the device had written CQEs 0..21 into the 16-entry ring (the
    // second lap up to 21) and the driver consumed up to 14.
    for k in 5u32..21 {
        let e = Cqe {
            wr_id: u64::from(k),
            owner: owner_bit(k, 4),
            ..Cqe::default()
        };
        ring.write(&mut d.mem, k, &e.to_bytes()).unwrap();
    }
    d.hca.cqs.get_mut(&cqn).unwrap().pi = 21;
    d.db.store(db.offset(), 14);

    // 7 pending: not into 4, nor with a consumer index past pi.
    let small = resize_cq_in(&mut d, cqn, 2);
    assert_eq!(d.refuse(Opcode::ResizeCq, &small).0, Status::BadParam);
    d.db.store(db.offset(), 22);
    let i = resize_cq_in(&mut d, cqn, 3);
    assert_eq!(d.refuse(Opcode::ResizeCq, &i).0, Status::BadParam);
    assert_eq!(d.hca.cqs[&cqn].ring, ring, "nothing changed");
    d.db.store(db.offset(), 14);

    let out: ResizeCqOut = d.call(Opcode::ResizeCq, &i).unwrap();
    assert_eq!(out.entries, 8);
    let c = &d.hca.cqs[&cqn];
    assert_eq!((c.ring.len(), c.pi, c.pbl), (8, 21, i.ring));
    // Slot by slot of the new ring, from the consumer's point of view.
    for k in 14u32..22 {
        let mut b = [0u8; 64];
        c.ring.read(&d.mem, k, &mut b).unwrap();
        let e = Cqe::from_bytes(&b);
        if k < 21 {
            assert_eq!(e.wr_id, u64::from(k), "CQE {k} copied");
            assert_eq!(e.owner, owner_bit(k, 3), "CQE {k}: owned at its index");
        } else {
            assert_ne!(e.owner & 1, owner_bit(k, 3), "index {k} not yet written");
        }
    }
    // The next CQE the device writes lands at 21 with the new ring's phase.
    assert_eq!(d.hca.cqs[&cqn].ring.entry_addr(21), i.ring.addr + 5 * 64);

    // An overflowed CQ cannot be resized.
    d.hca.cqs.get_mut(&cqn).unwrap().overflowed = true;
    let i = resize_cq_in(&mut d, cqn, 4);
    assert_eq!(d.refuse(Opcode::ResizeCq, &i).0, Status::BadState);
}

/// The CQEs of the resize scenarios: the device wrote `from..to` into the
/// CQ's ring (owner bits of a 16-entry ring) and its pi is `to`.
fn write_cqes(d: &mut Dev, cqn: u32, from: u32, to: u32) {
    use device::abi::cqe::{owner_bit, Cqe};
    let ring = d.hca.cqs[&cqn].ring.clone();
    let log2 = ring.log_entries();
    for k in from..to {
        let e = Cqe {
            wr_id: u64::from(k),
            owner: owner_bit(k, log2),
            ..Cqe::default()
        };
        ring.write(&mut d.mem, k, &e.to_bytes()).unwrap();
    }
    d.hca.cqs.get_mut(&cqn).unwrap().pi = to;
}

/// Heavy commands (issue 13: big page lists, a big CQ ring to blank) and
/// what they answered; `moved` is called where a staged device's data path
/// could write CQEs (before the first RESIZE_CQ's blank is prepared).
fn heavy_scenario(d: &mut Dev, moved: fn(&mut Dev, u32)) -> Vec<String> {
    let mut log = Vec::new();
    let pdn = d.pd();
    let cqn = d.cq(0);
    let db = d.hca.cqs[&cqn].db;
    // CQEs 5..21 written, 14 consumed.
    write_cqes(d, cqn, 5, 21);
    d.db.store(db.offset(), 14);
    // 2^13 CQEs: a ring of 128 pages and a blank of 8192 entries, each a
    // heavy piece.
    let i = resize_cq_in(d, cqn, 13);
    d.between = Some(moved);
    log.push(format!(
        "{:?}",
        d.call::<_, ResizeCqOut>(Opcode::ResizeCq, &i)
    ));
    d.between = None;
    // An MR of 100 pages, and one whose last page is outside guest memory.
    let (mr, _) = d.reg_mr_in(pdn, 100);
    log.push(format!(
        "{:?}",
        d.call::<_, RegMrOut>(Opcode::RegMr, &mr).map(|o| o.lkey)
    ));
    let (bad, _) = d.reg_mr_in(pdn, 100);
    d.mem
        .write(bad.pbl.addr + 99 * 8, &(BASE + MEM as u64).to_le_bytes())
        .unwrap();
    log.push(format!("{:?}", d.refuse(Opcode::RegMr, &bad)));
    // Resized again, to 2^14, with the CQEs still pending.
    let i = resize_cq_in(d, cqn, 14);
    log.push(format!(
        "{:?}",
        d.call::<_, ResizeCqOut>(Opcode::ResizeCq, &i)
    ));
    let c = &d.hca.cqs[&cqn];
    log.push(format!("cq pi {} ring {:?}", c.pi, c.pbl));
    // A QP with two rings of 128 pages (two heavy pieces), an SRQ with one.
    let mut q = d.qp_in(QpType::Rc, pdn, cqn, None);
    q.log2_sq_size = 13;
    q.sq = d.contiguous(64 << 13);
    q.log2_rq_size = 14;
    q.rq = d.contiguous(32 << 14);
    log.push(format!(
        "{:?}",
        d.call::<_, CreateQpOut>(Opcode::CreateQp, &q)
    ));
    let mut r = d.srq_in(pdn);
    r.log2_entries = 14;
    r.ring = d.contiguous(32 << 14);
    log.push(format!(
        "{:?}",
        d.call::<_, CreateSrqOut>(Opcode::CreateSrq, &r)
    ));
    log
}

fn guest_ram(d: &Dev) -> Vec<u8> {
    let mut b = vec![0u8; MEM];
    d.mem.read(BASE, &mut b).unwrap();
    b
}

/// Issue 13, MMIO stall: with staging (as the running device) a heavy command
/// stops at each heavy piece, in progress in its slot, and the piece is done
/// off the core lock; the outcome, every byte of guest memory included, is
/// the one of the command run whole.
#[test]
fn heavy_commands_in_steps_end_as_the_whole_commands() {
    fn nothing(_: &mut Dev, _: u32) {}
    let mut whole = Dev::new();
    let a = heavy_scenario(&mut whole, nothing);
    let mut staged = Dev::staged();
    let b = heavy_scenario(&mut staged, nothing);
    println!("{a:#?}\nsteps: {}", staged.steps);
    assert_eq!(whole.steps, 0);
    assert_eq!(a, b);
    assert!(a[0].starts_with("Ok") && a[1].starts_with("Ok") && a[3].starts_with("Ok"));
    assert!(a[5].starts_with("Ok") && a[6].starts_with("Ok"), "{a:?}");
    assert!(a[2].contains("BadAddress"));
    assert!(
        guest_ram(&whole) == guest_ram(&staged),
        "guest memory differs"
    );
    // RESIZE_CQ: the ring, then the blank; REG_MR: the page list (twice);
    // RESIZE_CQ again: ring and blank; CREATE_QP: SQ, then RQ; CREATE_SRQ.
    assert_eq!(staged.steps, 9);
}

/// The data path writes CQEs while the blank of a RESIZE_CQ is prepared (it
/// is asked for in one round and done after that round's CQEs), and the
/// driver consumes some: the step that completes the command blanks again the
/// slots the consumed CQEs free, and the new ring is the one of the whole
/// command run after those CQEs.
#[test]
fn cq_04_cqes_written_between_the_steps_of_resize_cq_are_copied() {
    fn moved(d: &mut Dev, step: u32) {
        if step == 2 {
            let (&cqn, c) = d.hca.cqs.iter().next().unwrap();
            let db = c.db;
            write_cqes(d, cqn, 21, 25);
            d.db.store(db.offset(), 23);
        }
    }
    fn before(_: &mut Dev, step: u32) {
        assert_eq!(step, 0, "whole: no steps");
    }
    let mut staged = Dev::staged();
    let b = heavy_scenario(&mut staged, moved);
    // The same CQEs before the whole command.
    let mut whole = Dev::new();
    whole.pd();
    let cqn = whole.cq(0);
    let db = whole.hca.cqs[&cqn].db;
    write_cqes(&mut whole, cqn, 5, 25);
    whole.db.store(db.offset(), 23);
    let i = resize_cq_in(&mut whole, cqn, 13);
    whole.between = Some(before);
    let a = whole.call::<_, ResizeCqOut>(Opcode::ResizeCq, &i);
    assert_eq!(format!("{a:?}"), b[0]);
    // The first resize's new ring, slot by slot (the second resize copied
    // from it, so its bytes are compared through the whole scenario's RAM
    // only up to that point: compare the ring itself).
    let ring = &whole.hca.cqs[&cqn].ring;
    let mut x = vec![0u8; 64];
    let mut y = vec![0u8; 64];
    for k in 23u32..23 + ring.len() {
        ring.read(&whole.mem, k, &mut x).unwrap();
        ring.read(&staged.mem, k, &mut y).unwrap();
        assert_eq!(x, y, "index {k}");
    }
}

/// Prepared pieces of a queue that went (a reset, a new queue) are stale:
/// the command now at that CI runs as it is, not as the old one.
#[test]
fn prepared_pieces_of_an_old_queue_are_dropped() {
    let mut d = Dev::staged();
    let pdn = d.pd();
    let (mr, _) = d.reg_mr_in(pdn, 100);
    d.mem.write(IN_MB, &bytes(&mr)).unwrap();
    let at = d.pi;
    d.post(Dev::cmd(Opcode::RegMr.raw(), &bytes(&mr), RegMrOut::SIZE));
    d.run_step_once();
    let t = d.q.take_waiting().expect("REG_MR waits for its page list");
    let pre = t.prepare(&mut d.mem);
    // A new queue over the same ring, ALLOC_PD in the slot at the same CI.
    d.q = CmdQueue::new(&d.mem, CMDQ, CMDQ_LOG2, 10).unwrap();
    d.q.set_staged(true);
    d.pi = 0;
    for _ in 0..at {
        d.post(Dev::cmd(Opcode::Nop.raw(), &[], 0));
    }
    d.post(Dev::cmd(Opcode::AllocPd.raw(), &[], AllocPdOut::SIZE));
    execute_staged(
        &mut d.hca,
        &mut d.q,
        d.pi,
        &mut d.mem,
        &d.db,
        now(),
        Budget::default(),
        Some(pre),
    )
    .unwrap();
    let s = d.read_slot(at);
    assert_eq!((s.owner, s.opcode, s.status), (0, Opcode::AllocPd.raw(), 0));
    assert_ne!(AllocPdOut::get(&s.data).pdn, pdn, "a new PD, not an MR");
    assert_eq!(d.q.ci(), d.pi);
}

#[test]
fn resize_srq_copies_the_wqes_not_fetched_and_the_device_reads_the_new_ring() {
    use device::abi::wqe::{RecvCtrl, Sge};
    let mut d = Dev::new();
    let pdn = d.pd();
    let srqn = d.srq(pdn);
    let (ring, db) = {
        let s = &d.hca.srqs[&srqn];
        (s.ring.clone(), s.db)
    };
    let mr = d.mr(pdn, 1);
    let wqe = |k: u32| {
        let mut b = RecvCtrl {
            wr_id: 1000 + u64::from(k),
            num_sge: 1,
            rsvd: 0,
        }
        .to_bytes()
        .to_vec();
        b.extend(
            Sge {
                addr: 0,
                length: 64,
                lkey: mr,
            }
            .to_bytes(),
        );
        b
    };
    // 12 posted from index 10 (wrapping the 16-entry ring), none fetched.
    d.hca.srqs.get_mut(&srqn).unwrap().fetched = 10;
    for k in 10u32..22 {
        ring.write(&mut d.mem, k, &wqe(k)).unwrap();
    }
    d.db.store(db.offset(), 22);

    let resize = |d: &mut Dev, max_wr: u32, log2: u8| ResizeSrqIn {
        srqn,
        max_wr,
        log2_entries: log2,
        rsvd: [0; 7],
        ring: d.contiguous(32 << log2),
    };
    let i = resize(&mut d, 8, 3);
    assert_eq!(d.refuse(Opcode::ResizeSrq, &i).0, Status::BadParam);
    let i = resize(&mut d, 17, 4);
    assert_eq!(d.refuse(Opcode::ResizeSrq, &i).0, Status::BadParam);
    let i = resize(&mut d, 0, 4);
    assert_eq!(d.refuse(Opcode::ResizeSrq, &i).0, Status::LimitExceeded);
    let i = ResizeSrqIn {
        log2_entries: 20,
        ..resize(&mut d, 8, 3)
    };
    assert_eq!(d.refuse(Opcode::ResizeSrq, &i).0, Status::LimitExceeded);
    assert_eq!(d.hca.srqs[&srqn].ring, ring, "nothing changed");

    let i = resize(&mut d, 20, 5);
    let out: ResizeSrqOut = d.call(Opcode::ResizeSrq, &i).unwrap();
    assert_eq!(out.max_wr, 32);
    let q: QuerySrqOut = d.call(Opcode::QuerySrq, &QuerySrqIn { srqn }).unwrap();
    // QUERY_SRQ counts the 12 posted, fetched or not.
    assert_eq!((q.max_wr, q.wqe_count), (32, 12));
    // The data path fetches all 12 from the new ring.
    d.hca.run_once(&mut d.mem, &d.db, &NoIrq, now());
    let q: QuerySrqOut = d.call(Opcode::QuerySrq, &QuerySrqIn { srqn }).unwrap();
    assert_eq!(q.wqe_count, 12);
    assert_eq!(d.hca.counters.bad_wqes, 0);
    // Holding 12: not below that.
    let i = resize(&mut d, 8, 3);
    assert_eq!(d.refuse(Opcode::ResizeSrq, &i).0, Status::BadParam);
    let i = resize(&mut d, 12, 4);
    d.call::<_, ResizeSrqOut>(Opcode::ResizeSrq, &i).unwrap();
}

#[test]
fn memory_regions_are_registered_reregistered_and_deregistered() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let pd2 = d.pd();
    let (i, pages) = d.reg_mr_in(pdn, 3);
    let key = d.call::<_, RegMrOut>(Opcode::RegMr, &i).unwrap().lkey;
    let mr = d.hca.port.engine_mut().mrs().mr(key).unwrap().clone();
    assert_eq!(mr.pages(), &pages[..]);
    assert_eq!((mr.iova(), mr.length()), (0x7000_0000, 3 * 4096));

    let (base, _) = d.reg_mr_in(pdn, 1);
    type Edit = fn(&mut RegMrIn);
    let cases: [(Edit, Status); 8] = [
        (|i| i.flags = 1 << 4, Status::BadParam),
        (|i| i.access = 1 << 9, Status::BadParam),
        (|i| i.access = access::REMOTE_WRITE, Status::BadParam), // MP-04
        (|i| i.rsvd = 1, Status::BadParam),
        (|i| i.length = 2 * 4096, Status::BadParam), // one page for two
        (|i| i.pbl.addr += 4, Status::BadParam),
        (|i| i.pbl.levels = 7, Status::BadParam),
        (|i| i.pbl.addr = 0x9000_0000, Status::BadAddress),
    ];
    let count = d.hca.port.engine_mut().mrs().mr_count();
    for (k, (edit, status)) in cases.into_iter().enumerate() {
        let mut i = base;
        edit(&mut i);
        assert_eq!(d.refuse(Opcode::RegMr, &i).0, status, "case {k}");
    }
    // A page outside guest memory.
    let mut i = base;
    d.mem
        .write(i.pbl.addr, &0x9000_0000u64.to_le_bytes())
        .unwrap();
    assert_eq!(
        d.refuse(Opcode::RegMr, &i),
        (Status::BadAddress, Syndrome::PageListAddress as u32)
    );
    // Pages in the guest's memory but not aligned.
    d.mem
        .write(i.pbl.addr, &(BASE + 0x800).to_le_bytes())
        .unwrap();
    assert_eq!(d.refuse(Opcode::RegMr, &i).0, Status::BadParam);
    assert_eq!(d.hca.port.engine_mut().mrs().mr_count(), count);

    // The identity MR of kernel verbs.
    i.flags = reg_mr_flags::DMA;
    let dma = d.call::<_, RegMrOut>(Opcode::RegMr, &i).unwrap();
    assert_eq!(dma.lkey, dma.rkey);
    assert!(d
        .hca
        .port
        .engine_mut()
        .mrs()
        .mr(dma.lkey)
        .unwrap()
        .is_identity());

    // Rereg: access, then PD, then translation; the key stays (MP-02).
    let (t, tpages) = d.one_level(1);
    let rr = |change, pdn, access, pbl| ReregMrIn {
        lkey: key,
        change,
        pdn,
        access,
        iova: 0x5000,
        length: 100,
        pbl,
    };
    let out: RegMrOut = d
        .call(
            Opcode::ReregMr,
            &rr(rereg::CHANGE_ACCESS, 0, access::LOCAL_WRITE, t),
        )
        .unwrap();
    assert_eq!(out.lkey, key);
    assert_eq!(
        d.call::<_, RegMrOut>(Opcode::ReregMr, &rr(rereg::CHANGE_PD, 999, 0, t)),
        Err(Status::BadPd)
    );
    d.call::<_, RegMrOut>(Opcode::ReregMr, &rr(rereg::CHANGE_PD, pd2, 0, t))
        .unwrap();
    d.call::<_, RegMrOut>(Opcode::ReregMr, &rr(rereg::CHANGE_TRANSLATION, 0, 0, t))
        .unwrap();
    let mr = d.hca.port.engine_mut().mrs().mr(key).unwrap().clone();
    assert_eq!(
        (mr.pd(), mr.access().0, mr.iova(), mr.pages()),
        (pd2, access::LOCAL_WRITE, 0x5000, &tpages[..])
    );
    for change in [0, 1 << 3] {
        assert_eq!(
            d.call::<_, RegMrOut>(Opcode::ReregMr, &rr(change, 0, 0, t)),
            Err(Status::BadParam)
        );
    }
    let stale = ReregMrIn {
        lkey: key ^ 1,
        ..rr(rereg::CHANGE_ACCESS, 0, 0, t)
    };
    assert_eq!(
        d.call::<_, RegMrOut>(Opcode::ReregMr, &stale),
        Err(Status::NotFound)
    );
    // The MR moved to pd2: pd2 is busy, pdn is not (its DMA MR aside).
    assert_eq!(
        d.call_in(Opcode::DeallocPd, &DeallocPdIn { pdn: pd2 }),
        Err(Status::Busy)
    );
    d.call_in(Opcode::DeregMr, &DeregMrIn { lkey: dma.lkey })
        .unwrap();
    d.call_in(Opcode::DeallocPd, &DeallocPdIn { pdn }).unwrap();
}

// ---------------------------------------------------------------- context window

#[test]
fn the_context_window_shows_live_objects() {
    let mut d = Dev::new();
    let pdn = d.pd();
    let eqn = d.eq();
    let cqn = d.cq(eqn);
    let srqn = d.srq(pdn);
    let key = d.mr(pdn, 2);
    let a = d.qp(QpType::Rc, pdn, cqn, None);
    let b = d.qp(QpType::Rc, pdn, cqn, Some(srqn));
    d.connect_rc(a, b).unwrap();

    let q: QpContext = d.ctx(CtxTable::Qpc, a);
    assert_eq!((q.qpn, q.pdn, q.send_cqn, q.srqn), (a, pdn, cqn, num::NONE));
    assert_eq!((q.state, q.qp_type), (QpState::Rts.raw(), QpType::Rc.raw()));
    assert_eq!(
        (q.dest_qpn, q.av.dlid, q.sq_psn, q.rq_psn),
        (b, LID, 100, 100)
    );
    assert_eq!((q.log2_sq_size, q.sq_wqe_shift, q.rq_wqe_shift), (4, 6, 5));
    assert_eq!(q.sq, d.hca.qps[&a].sq_pbl);
    let qpn_slot = d.hca.qps[&a].db;
    d.db.store(qpn_slot.offset(), 3);
    let q: QpContext = d.ctx(CtxTable::Qpc, a);
    assert_eq!((q.sq_pi, q.sq_ci), (3, 0));
    let q: QpContext = d.ctx(CtxTable::Qpc, b);
    assert_eq!((q.srqn, q.log2_rq_size, q.rq), (srqn, 0, Pbl::default()));

    let c: CqContext = d.ctx(CtxTable::Cqc, cqn);
    assert_eq!((c.cqn, c.eqn, c.users, c.log2_entries), (cqn, eqn, 4, 4));
    assert_eq!(c.flags, 0);
    let slot = d.hca.cqs[&cqn].db;
    d.db.store(slot.offset() + 4, 1 | device::abi::uar::cq_arm::SOLICITED);
    let c: CqContext = d.ctx(CtxTable::Cqc, cqn);
    assert_eq!(c.flags, ctx_flags::ARMED | ctx_flags::SOLICITED);

    let s: SrqContext = d.ctx(CtxTable::Srqc, srqn);
    assert_eq!(
        (s.srqn, s.pdn, s.max_wr, s.users, s.wqe_shift),
        (srqn, pdn, 16, 1, 5)
    );

    let mr: MrContext = d.ctx(CtxTable::Mpt, key >> 8);
    assert_eq!((mr.key, mr.pdn, mr.npages, mr.length), (key, pdn, 2, 8192));

    let e: EqContext = d.ctx(CtxTable::Eqc, eqn);
    assert_eq!((e.eqn, e.vector, e.log2_entries, e.uar), (eqn, 1, 4, 0));
    let e: EqContext = d.ctx(CtxTable::Eqc, 0);
    assert_eq!((e.db_slot, e.ring.addr), (uar::EQ0_SLOT as u16, EQ0_RING));

    // Without the doorbell pages: the same record, no doorbell words.
    let (st, raw) = snapshot(&d.hca, CtxTable::Cqc, cqn);
    assert_eq!(st, CtxStatus::Ok);
    let c = CqContext::from_prefix(&raw).unwrap();
    assert_eq!((c.cqn, c.flags), (cqn, 0));

    for (table, index) in [
        (CtxTable::Qpc, 999),
        (CtxTable::Cqc, srqn),
        (CtxTable::Srqc, cqn),
        (CtxTable::Mpt, 0),
        (CtxTable::Mpt, 999),
        (CtxTable::Eqc, 9),
    ] {
        assert_eq!(
            snapshot(&d.hca, table, index),
            (CtxStatus::NoObject, Vec::new()),
            "{table:?} {index}"
        );
    }
    assert_eq!(snapshot(&d.hca, CtxTable::None, 1).0, CtxStatus::BadTable);
}

// ---------------------------------------------------------------- fuzz

/// xorshift64*: a seeded generator for the fuzz test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Rings and page lists of the fuzz, shared by every object (nothing runs the
/// data path): 16 contiguous pages, a one-level list of them, and a two-level
/// directory naming that list as its table.
const FUZZ_RING: u64 = BASE + 0x1_0000;
const FUZZ_LIST: u64 = BASE + 0x5000;
const FUZZ_DIR: u64 = BASE + 0x7000;
/// 256 bytes of input mailbox per slot of a batch (128 slots: 8 pages).
const FUZZ_MB: u64 = BASE + 0x8000;

fn fuzz_pbl(r: &mut Rng) -> Pbl {
    let levels = r.below(3) as u8;
    let addr = [FUZZ_RING, FUZZ_LIST, FUZZ_DIR][usize::from(levels)];
    Pbl {
        addr,
        npages: 1 + r.below(16) as u32,
        page_shift: 12,
        levels,
        rsvd: 0,
    }
}

/// Numbers of live objects, so that commands name them often.
#[derive(Default)]
struct Live {
    pds: Vec<u32>,
    eqs: Vec<u32>,
    cqs: Vec<u32>,
    srqs: Vec<u32>,
    qps: Vec<u32>,
    keys: Vec<u32>,
    /// Memory window R_Keys (MP-06, MP-07).
    mws: Vec<u32>,
    /// QPs a successful ATTACH_MCAST named (AD-08).
    attached: Vec<u32>,
    /// RD domains and EE contexts (AD-11).
    rdds: Vec<u32>,
    eecs: Vec<u32>,
}

impl Live {
    /// A live number of `list` most of the time, else a small one.
    fn pick(r: &mut Rng, list: &[u32]) -> u32 {
        if !list.is_empty() && r.chance(85) {
            list[r.below(list.len() as u64) as usize]
        } else {
            r.below(40) as u32
        }
    }

    /// Records the object a successful command created.
    fn created(&mut self, op: Opcode, out: &[u8]) {
        let n = u32::from_le_bytes(out[..4].try_into().unwrap());
        match op {
            Opcode::AllocPd => self.pds.push(n),
            Opcode::CreateEq => self.eqs.push(n),
            Opcode::CreateCq => self.cqs.push(n),
            Opcode::CreateSrq => self.srqs.push(n),
            Opcode::CreateQp => self.qps.push(n),
            Opcode::RegMr => self.keys.push(n),
            Opcode::AllocMw => self.mws.push(n),
            Opcode::AllocRdd => self.rdds.push(n),
            Opcode::CreateEec => self.eecs.push(n),
            _ => {}
        }
    }

    /// Forgets what was destroyed.
    fn prune(&mut self, hca: &mut Hca) {
        let mrs = hca.port.engine_mut().mrs();
        self.pds.retain(|p| mrs.pd_exists(*p));
        self.keys.retain(|k| mrs.mr(*k).is_some());
        self.mws.retain(|k| mrs.mw(*k).is_some());
        self.eqs.retain(|n| hca.eqs.contains_key(n));
        self.cqs.retain(|n| hca.cqs.contains_key(n));
        self.srqs.retain(|n| hca.srqs.contains_key(n));
        self.qps.retain(|n| hca.qps.contains_key(n));
        // The main group's members, from the engine (ATTACH_MCAST returns
        // nothing to record).
        let mut mgid = [0u8; 16];
        mgid[0] = 0xff;
        self.attached = hca.port.engine_mut().mcast_members(&mgid);
        let e = hca.port.engine();
        self.rdds.retain(|d| e.query_rdd(*d).is_some());
        self.eecs.retain(|n| e.query_eec(*n).is_ok());
    }
}

/// An MR's iova and length spanning exactly `npages` 4 KiB pages.
fn mr_span(r: &mut Rng, npages: u32) -> (u64, u64) {
    let offset = r.below(4096);
    let iova = (r.next() & 0xffff_f000) + offset;
    let length = u64::from(npages) * 4096 - offset - r.below(4096 - offset);
    (iova, length)
}

/// A plausible input for `op`: right sizes, mostly valid values, numbers of
/// live objects; the caller then mutates some bytes.
fn template(op: Opcode, r: &mut Rng, live: &Live) -> Vec<u8> {
    let slot = |r: &mut Rng| 8 + r.below(520) as u16;
    let uar = |r: &mut Rng| r.below(18) as u32;
    let acc = |r: &mut Rng| {
        [
            access::LOCAL_WRITE,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            access::LOCAL_WRITE | access::REMOTE_ATOMIC,
            0,
            r.below(64) as u32,
        ][r.below(5) as usize]
    };
    let pick = Live::pick;
    match op {
        Opcode::Nop
        | Opcode::QueryDevice
        | Opcode::AllocPd
        | Opcode::AllocXrcd
        | Opcode::AllocRdd => Vec::new(),
        // AD-11: RD domain and EE context numbers of a few, attributes
        // mostly in range.
        Opcode::DeallocRdd => bytes(&device::abi::cmd::DeallocRddIn {
            rddn: pick(r, &live.rdds),
        }),
        Opcode::CreateEec => bytes(&device::abi::cmd::CreateEecIn {
            rddn: pick(r, &live.rdds),
        }),
        Opcode::QueryEec => bytes(&device::abi::cmd::QueryEecIn {
            eecn: pick(r, &live.eecs),
        }),
        Opcode::DestroyEec => bytes(&device::abi::cmd::DestroyEecIn {
            eecn: pick(r, &live.eecs),
        }),
        Opcode::ModifyEec => bytes(&device::abi::cmd::ModifyEecIn {
            eecn: pick(r, &live.eecs),
            rsvd: 0,
            attr: device::abi::cmd::EecAttr {
                // Mostly the next state of Reset -> Init -> RTR -> RTS.
                state: [1, 2, 3, 1, 2, 3, 0, 6, r.below(8) as u8][r.below(9) as usize],
                path_mtu: 1 + r.below(5) as u8,
                min_rnr_timer: r.below(32) as u8,
                timeout: r.below(20) as u8,
                retry_cnt: r.below(9) as u8,
                rnr_retry: r.below(9) as u8,
                pkey_index: u16::from(r.below(8) == 0),
                remote_eecn: pick(r, &live.eecs),
                rq_psn: r.next() as u32,
                sq_psn: r.next() as u32,
                rsvd: 0,
                av: device::abi::cmd::Av {
                    dlid: 1 + r.below(3) as u16,
                    port_num: 1,
                    ..Default::default()
                },
            },
        }),
        // An XRC domain number of a few (SR-02).
        Opcode::DeallocXrcd => bytes(&device::abi::cmd::DeallocXrcdIn {
            xrcdn: r.below(4) as u32,
        }),
        Opcode::QueryPort => bytes(&QueryPortIn {
            port: 1,
            rsvd: [0; 3],
        }),
        Opcode::QueryCounters => bytes(&QueryCountersIn {
            port: 1,
            set: r.below(6) as u8,
            rsvd: 0,
        }),
        Opcode::DeallocPd => bytes(&DeallocPdIn {
            pdn: pick(r, &live.pds),
        }),
        Opcode::SetGid => {
            let mut gid = [0u8; 16];
            gid[10] = 0xff;
            gid[11] = 0xff;
            gid[12..].copy_from_slice(&(r.next() as u32).to_be_bytes());
            bytes(&SetGidIn {
                index: r.below(40) as u16,
                port: 1,
                valid: r.below(2) as u8,
                gid_type: 2,
                rsvd: [0; 3],
                gid,
            })
        }
        Opcode::CreateEq => bytes(&CreateEqIn {
            ring: fuzz_pbl(r),
            uar: 0,
            db_slot: slot(r),
            vector: r.below(20) as u16,
            log2_entries: r.below(9) as u8,
            rsvd: [0; 7],
        }),
        Opcode::DestroyEq => bytes(&DestroyEqIn {
            eqn: pick(r, &live.eqs),
        }),
        Opcode::CreateCq => bytes(&CreateCqIn {
            ring: fuzz_pbl(r),
            eqn: if r.chance(50) { 0 } else { pick(r, &live.eqs) },
            uar: uar(r),
            db_slot: slot(r),
            log2_entries: r.below(11) as u8,
            rsvd: [0; 5],
        }),
        Opcode::DestroyCq => bytes(&DestroyCqIn {
            cqn: pick(r, &live.cqs),
        }),
        Opcode::ResizeCq => bytes(&ResizeCqIn {
            cqn: pick(r, &live.cqs),
            log2_entries: r.below(11) as u8,
            rsvd: [0; 3],
            ring: fuzz_pbl(r),
        }),
        Opcode::ResizeSrq => {
            let log2 = 1 + r.below(6) as u8;
            bytes(&ResizeSrqIn {
                srqn: pick(r, &live.srqs),
                max_wr: 1 + r.below(1 << log2) as u32,
                log2_entries: log2,
                rsvd: [0; 7],
                ring: fuzz_pbl(r),
            })
        }
        Opcode::CreateSrq => {
            let log2 = 1 + r.below(6) as u8;
            bytes(&CreateSrqIn {
                srq_type: 0,
                rsvd: [0; 3],
                xrcdn: 0,
                cqn: 0,
                rsvd2: 0,
                pdn: pick(r, &live.pds),
                max_wr: 1 + r.below(1 << log2) as u32,
                max_sge: r.below(3) as u32,
                srq_limit: r.below(3) as u32,
                uar: uar(r),
                db_slot: slot(r),
                log2_entries: log2,
                wqe_shift: 5 + r.below(3) as u8,
                ring: fuzz_pbl(r),
            })
        }
        Opcode::ModifySrq => bytes(&ModifySrqIn {
            srqn: pick(r, &live.srqs),
            attr_mask: r.below(4) as u32,
            max_wr: r.below(40) as u32,
            srq_limit: r.below(20) as u32,
        }),
        Opcode::QuerySrq => bytes(&QuerySrqIn {
            srqn: pick(r, &live.srqs),
        }),
        Opcode::DestroySrq => bytes(&DestroySrqIn {
            srqn: pick(r, &live.srqs),
        }),
        Opcode::CreateQp => {
            let srq = r.chance(30);
            // AD-11: some RD QPs, in a live RD domain, without an SRQ.
            let rd = r.chance(10);
            let srq = srq && !rd;
            let qp_type = if rd {
                QpType::Rd.raw()
            } else if r.chance(80) {
                [QpType::Rc, QpType::Uc, QpType::Ud][r.below(3) as usize].raw()
            } else {
                r.below(6) as u8
            };
            let (sq_log2, rq_log2) = (r.below(7) as u8, r.below(7) as u8);
            bytes(&CreateQpIn {
                qp_type,
                sq_sig_all: r.below(2) as u8,
                sq_wqe_shift: 6 + r.below(3) as u8,
                rq_wqe_shift: 5 + r.below(2) as u8,
                log2_sq_size: sq_log2,
                log2_rq_size: if srq { 0 } else { rq_log2 },
                port: 1,
                rsvd0: 0,
                pdn: pick(r, &live.pds),
                send_cqn: pick(r, &live.cqs),
                recv_cqn: pick(r, &live.cqs),
                srqn: if srq {
                    pick(r, &live.srqs)
                } else if rd {
                    device::abi::verbs::num::NONE
                } else {
                    0
                },
                cap: QpCap {
                    max_send_wr: r.below((1 << sq_log2) + 1) as u32,
                    max_recv_wr: if srq {
                        0
                    } else {
                        r.below((1 << rq_log2) + 1) as u32
                    },
                    max_send_sge: r.below(2) as u32,
                    max_recv_sge: r.below(2) as u32,
                    max_inline_data: r.below(32) as u32,
                },
                uar: uar(r),
                db_slot: slot(r),
                rsvd1: [0; 2],
                xrcdn: if rd { pick(r, &live.rdds) } else { 0 },
                sq: fuzz_pbl(r),
                rq: if srq { Pbl::default() } else { fuzz_pbl(r) },
            })
        }
        Opcode::ModifyQp => {
            let mut ud_init = init_attr();
            ud_init.qkey = r.next() as u32;
            let (mask, attr) = match r.below(9) {
                0 => (
                    m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
                    init_attr(),
                ),
                1 => (m::STATE | m::PKEY_INDEX | m::PORT | m::QKEY, ud_init),
                2 => (RTR_MASK, rtr_attr(Live::pick(r, &live.qps))),
                3 => (RTR_MASK & !(m::MAX_DEST_RD_ATOMIC | m::MIN_RNR_TIMER), {
                    rtr_attr(Live::pick(r, &live.qps))
                }),
                4 => (
                    m::STATE,
                    QpAttr {
                        qp_state: QpState::Rtr.raw(),
                        ..QpAttr::default()
                    },
                ),
                5 => (RTS_MASK, rts_attr()),
                6 => (m::STATE | m::SQ_PSN, rts_attr()),
                7 => (
                    m::STATE,
                    QpAttr {
                        qp_state: r.below(8) as u8,
                        ..QpAttr::default()
                    },
                ),
                _ => (
                    r.next() as u32,
                    QpAttr::from_prefix(&r.bytes(QpAttr::SIZE)).unwrap(),
                ),
            };
            bytes(&ModifyQpIn {
                qpn: pick(r, &live.qps),
                attr_mask: mask,
                attr,
                alt: device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]),
            })
        }
        Opcode::QueryQp => bytes(&QueryQpIn {
            qpn: pick(r, &live.qps),
        }),
        Opcode::DestroyQp => bytes(&DestroyQpIn {
            qpn: pick(r, &live.qps),
        }),
        Opcode::RegMr => {
            let mut pbl = fuzz_pbl(r);
            let (mut iova, mut length) = mr_span(r, pbl.npages);
            let mut flags = u32::from(r.chance(10));
            // Issue 29: sometimes an ODP MR (no page list), half of them
            // implicit.
            if r.chance(15) {
                flags = device::abi::cmd::reg_mr_flags::ODP;
                pbl = Pbl::default();
                if r.chance(50) {
                    (iova, length) = (0, u64::MAX);
                }
            }
            bytes(&RegMrIn {
                pdn: pick(r, &live.pds),
                access: acc(r),
                iova,
                length,
                flags,
                rsvd: 0,
                pbl,
            })
        }
        Opcode::ReregMr => {
            let pbl = fuzz_pbl(r);
            let (iova, length) = mr_span(r, pbl.npages);
            bytes(&ReregMrIn {
                lkey: pick(r, &live.keys),
                change: r.below(8) as u32,
                pdn: pick(r, &live.pds),
                access: acc(r),
                iova,
                length,
                pbl,
            })
        }
        Opcode::DeregMr => bytes(&DeregMrIn {
            lkey: pick(r, &live.keys),
        }),
        // Issue 29: a key of a few, a page-aligned va mostly, a small page list.
        Opcode::MapOdp => bytes(&device::abi::cmd::MapOdpIn {
            lkey: pick(r, &live.keys),
            rsvd: 0,
            va: (r.below(64) << 12) | if r.chance(10) { r.below(4096) } else { 0 },
            pbl: fuzz_pbl(r),
        }),
        Opcode::UnmapOdp => bytes(&device::abi::cmd::UnmapOdpIn {
            lkey: pick(r, &live.keys),
            rsvd: 0,
            va: r.below(64 << 12),
            length: r.below(16 << 12),
        }),
        Opcode::OdpFaultFail => bytes(&device::abi::cmd::OdpFaultFailIn {
            lkey: pick(r, &live.keys),
            rsvd: 0,
            va: r.below(64 << 12),
            length: r.below(16 << 12),
        }),
        Opcode::AllocMw => bytes(&AllocMwIn {
            pdn: pick(r, &live.pds),
            mw_type: r.below(4) as u32,
        }),
        Opcode::DeallocMw => bytes(&DeallocMwIn {
            rkey: pick(r, &live.mws),
        }),
        Opcode::AttachMcast | Opcode::DetachMcast => {
            // Mostly one group; a detach names a QP attached to it (QPs do
            // not live long here), so that detaches find attachments.
            let mut gid = [0u8; 16];
            gid[0] = 0xff;
            let (qpn, mlid) = if op == Opcode::DetachMcast && !live.attached.is_empty() {
                (
                    live.attached[r.below(live.attached.len() as u64) as usize],
                    0xc000,
                )
            } else {
                gid[0] = if r.chance(90) { 0xff } else { r.next() as u8 };
                gid[15] = (r.below(16) == 0) as u8;
                let mlid = if r.chance(90) {
                    0xc000
                } else {
                    r.next() as u16
                };
                (pick(r, &live.qps), mlid)
            };
            bytes(&device::abi::cmd::McastIn {
                qpn,
                mlid,
                rsvd: 0,
                gid,
            })
        }
        // Mostly an SMP request the SMA answers (a Get or Set of a known
        // attribute, LID-routed or hop-count-0 directed route), sometimes any
        // 256 bytes: the MAD's own checks are the SMA's.
        Opcode::MadIfc => {
            let mut mad = [0u8; 256];
            if r.chance(80) {
                const ATTRS: [u16; 8] = [0x10, 0x11, 0x14, 0x15, 0x16, 0x17, 0x18, 0x20];
                let mut smp = transport::mad::SmpRepr {
                    base_version: 1,
                    class_version: 1,
                    method: if r.chance(70) { 0x01 } else { 0x02 },
                    status: 0,
                    tid: r.next(),
                    attr_id: ATTRS[r.below(8) as usize],
                    attr_mod: r.below(4) as u32,
                    mkey: 0,
                    route: transport::mad::SmpRoute::Lid,
                    data: [0; 64],
                };
                for b in smp.data.iter_mut() {
                    *b = r.next() as u8;
                }
                if r.chance(50) {
                    let mut d = transport::mad::DrFields::outgoing(&[]).unwrap();
                    d.hop_ptr = 1;
                    smp.route = transport::mad::SmpRoute::Directed(d);
                }
                mad = smp.to_bytes();
            } else {
                mad.copy_from_slice(&r.bytes(256));
            }
            bytes(&MadIfcIn {
                port: 1,
                rsvd0: 0,
                slid: r.next() as u16,
                rsvd1: [0; 12],
                mad,
            })
        }
        // Mostly host-settable bits, sometimes any (BAD_PARAM).
        Opcode::SetPortCaps => {
            let bits = |r: &mut Rng| {
                let b = r.next() as u32;
                if r.chance(80) {
                    b & port_cap::HOST_SETTABLE
                } else {
                    b
                }
            };
            let (set, clear) = (bits(r), bits(r));
            bytes(&SetPortCapsIn {
                port: 1,
                rsvd0: [0; 3],
                set,
                clear: if r.chance(70) { clear & !set } else { clear },
                rsvd1: 0,
            })
        }
        // A description of any length up to past 64, mostly NUL padded.
        Opcode::SetNodeDesc => {
            let len = r.below(70) as u8;
            let mut desc = [0u8; 64];
            for b in desc.iter_mut().take(usize::from(len)) {
                *b = 1 + r.below(255) as u8;
            }
            if r.chance(20) {
                desc[r.below(64) as usize] = r.next() as u8;
            }
            bytes(&SetNodeDescIn {
                len,
                rsvd: [0; 7],
                desc,
            })
        }
    }
}

/// A mailbox address: mostly the mailbox page, sometimes anywhere.
fn fuzz_addr(r: &mut Rng, page: u64) -> u64 {
    match r.below(16) {
        0 => r.next(),
        1 => 0,
        2 => BASE + MEM as u64 - r.below(256),
        3 => page + r.below(4096),
        _ => page,
    }
}

fn fuzz_len(r: &mut Rng, exact: usize) -> u16 {
    match r.below(10) {
        0 => r.next() as u16,
        1 => r.below(200) as u16,
        2 => 4096,
        _ => exact as u16,
    }
}

#[test]
fn random_commands_never_panic_and_leave_the_device_usable() {
    let mut d = Dev::with_uars(18);
    for k in 0..16u64 {
        d.mem
            .write(FUZZ_LIST + 8 * k, &(FUZZ_RING + 4096 * k).to_le_bytes())
            .unwrap();
    }
    d.mem.write(FUZZ_DIR, &FUZZ_LIST.to_le_bytes()).unwrap();
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut live = Live::default();

    let total = 100_000u32;
    let mut posted = 0u32;
    let mut statuses = [0u32; 16];
    let mut ok_by_op = std::collections::BTreeMap::<u16, u32>::new();
    while posted < total {
        let batch = (1 + r.below(u64::from(d.q.slots()))).min(u64::from(total - posted)) as u32;
        let first = d.pi;
        let mut events = 0;
        for k in 0..batch {
            let op = if r.chance(90) {
                Opcode::ALL[r.below(Opcode::ALL.len() as u64) as usize].raw()
            } else {
                r.next() as u16
            };
            let mut input = match Opcode::from_raw(op) {
                Some(o) if r.chance(85) => template(o, &mut r, &live),
                _ => {
                    let n = r.below(160) as usize;
                    r.bytes(n)
                }
            };
            if r.chance(50) {
                for _ in 0..=r.below(3) {
                    if !input.is_empty() {
                        let at = r.below(input.len() as u64) as usize;
                        input[at] = r.next() as u8;
                    }
                }
            }
            // The input goes inline and into a mailbox of its own.
            let mbox = FUZZ_MB + u64::from(k) * 256;
            let mut c = Dev::cmd(op, &input, 0);
            c.data = r.bytes(32).try_into().unwrap();
            let n = input.len().min(32);
            c.data[..n].copy_from_slice(&input[..n]);
            d.mem.write(mbox, &input).unwrap();
            c.in_mailbox = fuzz_addr(&mut r, mbox);
            c.in_len = fuzz_len(&mut r, input.len());
            c.out_mailbox = fuzz_addr(&mut r, OUT_MB);
            c.out_len = fuzz_len(&mut r, 4096);
            c.flags = r.next() as u8;
            c.token = r.next() as u16;
            c.status = r.next() as u8;
            c.syndrome = r.next() as u32;
            events += u32::from(c.flags & cmd_flags::EVENT != 0);
            d.post(c);
        }
        let mut done = Vec::new();
        while d.q.ci() != d.pi {
            done.extend(d.run().expect("no fatal error from any command"));
        }
        assert_eq!(done.len() as u32, events);
        for i in first..d.pi {
            let s = d.read_slot(i);
            assert_eq!(s.owner, 0);
            let status = Status::from_raw(s.status).expect("a status");
            statuses[status.raw() as usize] += 1;
            if status == Status::Ok {
                *ok_by_op.entry(s.opcode).or_default() += 1;
                if let Some(op) = Opcode::from_raw(s.opcode) {
                    live.created(op, &s.data);
                }
            }
        }
        posted += batch;
        live.prune(&mut d.hca);
    }
    eprintln!("statuses: {statuses:?}");
    eprintln!("successes by opcode: {ok_by_op:x?}");
    // Every opcode succeeded sometimes (DETACH_MCAST, which needs a live
    // attachment, about ten times), and most statuses occurred.
    // SET_GID is for RoCE ports; this device's port is InfiniBand
    // (`set_gid_mirrors_the_roce_gid_table` covers it).
    for op in Opcode::ALL.iter().filter(|&&op| op != Opcode::SetGid) {
        assert!(ok_by_op.get(&op.raw()).is_some_and(|&n| n >= 5), "{op:?}");
    }
    assert!(!ok_by_op.contains_key(&Opcode::SetGid.raw()));
    assert!(statuses.iter().filter(|&&n| n > 0).count() >= 12);

    // Still usable: a fresh PD, CQ and QP on free slots, to RTS.
    let used: Vec<DbSlot> = d.hca.slots.keys().copied().collect();
    let mut free = (1..18u32)
        .flat_map(|u| (uar::FIRST_SLOT..uar::SLOTS).map(move |s| (u, s as u16)))
        .filter(|&(u, s)| !used.contains(&DbSlot { uar: u, slot: s }));
    let pdn = d.pd();
    let mut ci = d.cq_in(0);
    (ci.uar, ci.db_slot) = free.next().unwrap();
    let cqn = d.call::<_, CreateCqOut>(Opcode::CreateCq, &ci).unwrap().cqn;
    let mut qi = d.qp_in(QpType::Rc, pdn, cqn, None);
    (qi.uar, qi.db_slot) = free.next().unwrap();
    let qpn = d.call::<_, CreateQpOut>(Opcode::CreateQp, &qi).unwrap().qpn;
    d.connect_rc(qpn, qpn).unwrap();
    assert_eq!(d.state(qpn), QpState::Rts);
}

// ---------------------------------------------------------------- MAD_IFC

/// A hop-count-0 directed-route SMP from the local SM, as ib_core hands it to
/// `process_mad` (`handle_outgoing_dr_smp` after `smi_handle_dr_smp_send`:
/// C14-9:3 moved the hop pointer to 1).
fn local_dr_smp(m: u8, attr: u16, data: [u8; 64]) -> [u8; 256] {
    use transport::mad::dr::{hca_send, HcaSend};
    let mut d = transport::mad::DrFields::outgoing(&[]).unwrap();
    assert_eq!(hca_send(&mut d, 1), Ok(HcaSend::Local));
    transport::mad::SmpRepr {
        base_version: 1,
        class_version: 1,
        method: m,
        status: 0,
        tid: 0x1234,
        attr_id: attr,
        attr_mod: 0,
        mkey: 0,
        route: transport::mad::SmpRoute::Directed(d),
        data,
    }
    .to_bytes()
}

fn mad_ifc(d: &mut Dev, mad: [u8; 256]) -> MadIfcOut {
    let i = MadIfcIn {
        port: 1,
        rsvd0: 0,
        slid: 0xffff,
        rsvd1: [0; 12],
        mad,
    };
    d.call(Opcode::MadIfc, &i).unwrap()
}

fn parse_smp(b: &[u8; 256]) -> transport::mad::SmpRepr {
    let v = transport::mad::Smp::new_checked(&b[..]).unwrap();
    transport::mad::SmpRepr::parse(&v).unwrap()
}

#[test]
fn ad_09_mad_ifc_hop_count_0_dr_get_nodeinfo_returns_reply_with_the_nodes_values() {
    use transport::mad::{attr::NodeInfoRepr, attr_id, method, SmpRoute};
    let mut d = Dev::new();
    let out = mad_ifc(
        &mut d,
        local_dr_smp(method::GET, attr_id::NODE_INFO, [0; 64]),
    );
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    let r = parse_smp(&out.mad);
    assert_eq!((r.method, r.status, r.tid), (method::GET_RESP, 0, 0x1234));
    let ni = NodeInfoRepr::parse(&r.data).unwrap();
    assert_eq!(
        (ni.node_guid, ni.port_guid, ni.node_type, ni.num_ports),
        (GUID, GUID, 1, 1)
    );
    // The response is the SM's: D set, the hop pointer back at 0 (C14-13:3).
    let SmpRoute::Directed(dr) = r.route else {
        panic!("{r:?}")
    };
    assert!(dr.direction);
    assert_eq!((dr.hop_ptr, dr.hop_cnt), (0, 0));
    // PortInfo: the fabric file's LID, Active (static subnet).
    let out = mad_ifc(
        &mut d,
        local_dr_smp(method::GET, attr_id::PORT_INFO, [0; 64]),
    );
    let pi = transport::mad::PortInfoRepr::parse(&parse_smp(&out.mad).data).unwrap();
    assert_eq!((pi.lid, pi.port_state), (LID, 4));
}

#[test]
fn ad_09_mad_ifc_flags_consumed_and_not_handled() {
    use transport::mad::{attr_id, method};
    let mut d = Dev::new();
    // A TrapRepress the SMA takes without an answer.
    let out = mad_ifc(
        &mut d,
        local_dr_smp(method::TRAP_REPRESS, attr_id::NOTICE, [0; 64]),
    );
    assert_eq!(out.flags, mad_ifc_flag::CONSUMED);
    // A response, and a MAD of another class (PerfMgt, 0x04): ib_core's own.
    let mut resp = local_dr_smp(method::GET, attr_id::NODE_INFO, [0; 64]);
    resp[3] = method::GET_RESP;
    assert_eq!(mad_ifc(&mut d, resp).flags, 0);
    let mut pma = [0u8; 256];
    pma[..4].copy_from_slice(&[1, 0x04, 1, method::GET]);
    assert_eq!(mad_ifc(&mut d, pma).flags, 0);
    // A bad port or reserved bytes are refused before the SMA.
    let i = MadIfcIn {
        port: 2,
        rsvd0: 0,
        slid: 0,
        rsvd1: [0; 12],
        mad: pma,
    };
    assert_eq!(d.refuse(Opcode::MadIfc, &i).0, Status::BadParam);
    let i = MadIfcIn {
        port: 1,
        rsvd1: [1; 12],
        ..i
    };
    assert_eq!(d.refuse(Opcode::MadIfc, &i).0, Status::BadParam);
    assert_eq!(d.hca.port.mgmt().unwrap().counters().mad_ifc, 3);
}

/// A baseboard management MAD (class 0x05) from QP1: the B_Key at 24, the
/// attribute data at 64 (libibmad's layout).
fn bm_mad(m: u8, attr: u16, attr_mod: u32, bkey: u64, data: &[u8]) -> [u8; 256] {
    let mut mad = [0u8; 256];
    mad[..4].copy_from_slice(&[1, 0x05, 1, m]);
    mad[8..16].copy_from_slice(&0x77u64.to_be_bytes());
    mad[16..18].copy_from_slice(&attr.to_be_bytes());
    mad[20..24].copy_from_slice(&attr_mod.to_be_bytes());
    mad[24..32].copy_from_slice(&bkey.to_be_bytes());
    mad[64..64 + data.len()].copy_from_slice(data);
    mad
}

/// MAD_IFC hands the baseboard management class to the device's BMA (AD-12):
/// BKeyInfo Set and Get come back as REPLY with the bytes, a request with the
/// wrong B_Key is CONSUMED (no answer from anyone) and counted, a BM response
/// is ib_core's (not handled).
#[test]
fn ad_12_mad_ifc_baseboard_management_bkeyinfo_and_bkey() {
    let mut d = Dev::new();
    let key = 0x0b0b_0000_0000_0099u64;
    let mut info = [0u8; 14];
    info[..8].copy_from_slice(&key.to_be_bytes());
    info[8] = 0x80;
    info[10..12].copy_from_slice(&30u16.to_be_bytes());
    let out = mad_ifc(&mut d, bm_mad(0x02, 0x0010, 0, 0, &info));
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    assert_eq!(&out.mad[..4], &[1, 0x05, 1, 0x81]);
    assert_eq!(&out.mad[4..6], &[0, 0]);
    assert_eq!(&out.mad[64..78], &info);
    // Without the key: a Get reads B_Key 0, a Set is consumed unanswered.
    let out = mad_ifc(&mut d, bm_mad(0x01, 0x0010, 0, 1, &[]));
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    assert_eq!(&out.mad[64..72], &[0; 8]);
    let out = mad_ifc(&mut d, bm_mad(0x02, 0x0010, 0, 1, &[0; 14]));
    assert_eq!(out.flags, mad_ifc_flag::CONSUMED);
    let out = mad_ifc(&mut d, bm_mad(0x01, 0x0010, 0, key, &[]));
    assert_eq!(&out.mad[76..78], &1u16.to_be_bytes(), "B_KeyViolations");
    // A baseboard command: a BMSend response with UNSUPPORTED_METHOD_ATTR.
    let out = mad_ifc(&mut d, bm_mad(0x03, 0x0021, 0, key, &[]));
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    assert_eq!((out.mad[3], out.mad[23]), (0x03, 1));
    assert_eq!(&out.mad[4..6], &[0, 0x0c]);
    // Responses (GetResp, a BMSend response) go on to ib_core.
    assert_eq!(mad_ifc(&mut d, bm_mad(0x81, 0x0010, 0, 0, &[])).flags, 0);
    assert_eq!(mad_ifc(&mut d, bm_mad(0x03, 0x0021, 1, 0, &[])).flags, 0);
    let pairs = d.hca.port.mgmt().unwrap().counter_pairs();
    for want in [("bma_drop_bad_bkey", 1), ("bkey_violations", 1)] {
        assert!(pairs.contains(&want), "{want:?} in {pairs:?}");
    }
}

/// MAD_IFC hands the congestion control class (0x21, IBA A10.4) to the port's
/// CC agent (issue 31 item 2), as OpenSM's CC manager reaches it on QP1: a
/// CACongestionSetting Set comes back as REPLY and is what the port's agent
/// holds, and the engine's CCA runs with; a Set with the wrong CC_Key once
/// the key is protected is CONSUMED
/// and counted; a CC response is ib_core's.
#[test]
fn a10_4_mad_ifc_congestion_control_sets_the_ports_cc_agent() {
    let cc_mad = |m: u8, attr: u16, key: u64, data: &[u8]| {
        let mut mad = [0u8; 256];
        mad[..4].copy_from_slice(&[1, 0x21, 2, m]);
        mad[8..16].copy_from_slice(&0x7a93u64.to_be_bytes());
        mad[16..18].copy_from_slice(&attr.to_be_bytes());
        mad[24..32].copy_from_slice(&key.to_be_bytes());
        mad[64..64 + data.len()].copy_from_slice(data);
        mad
    };
    let mut d = Dev::new();
    // CACongestionSetting: SL/port based, SL 0 only: CCTI_Timer 150,
    // CCTI_Increase 1, Trigger_Threshold 0, CCTI_Min 0.
    let mut s = [0u8; 12];
    s[..4].copy_from_slice(&[0, 1, 0, 1]);
    s[4..9].copy_from_slice(&[0, 150, 1, 0, 0]);
    let out = mad_ifc(&mut d, cc_mad(0x02, 0x0016, 0, &s));
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    assert_eq!(&out.mad[..6], &[1, 0x21, 2, 0x81, 0, 0]);
    assert_eq!(&out.mad[64..76], &s);
    let agent = d.hca.port.mgmt().unwrap().cc_agent();
    assert_eq!(agent.ca_setting().entries[0].ccti_timer, 150);
    // The engine runs the IBA CCA with it from now on.
    let iba = d.hca.port.engine().port().cc.iba.clone().expect("CCA on");
    assert_eq!(iba.sl[0].ccti_timer, 150);
    // The manager protects its CC_Key; a Set without it goes unanswered.
    let key = 0x0c0c_0000_0000_0021u64;
    let mut k = [0u8; 14];
    k[..8].copy_from_slice(&key.to_be_bytes());
    k[8] = 0x80;
    assert_eq!(
        mad_ifc(&mut d, cc_mad(0x02, 0x0012, 0, &k)).flags,
        mad_ifc_flag::REPLY
    );
    let out = mad_ifc(&mut d, cc_mad(0x02, 0x0016, 1, &[0; 12]));
    assert_eq!(out.flags, mad_ifc_flag::CONSUMED);
    assert_eq!(mad_ifc(&mut d, cc_mad(0x81, 0x0016, 0, &[])).flags, 0);
    let pairs = d.hca.port.mgmt().unwrap().counter_pairs();
    for want in [("cca_drop_bad_cc_key", 1), ("cc_key_violations", 1)] {
        assert!(pairs.contains(&want), "{want:?} in {pairs:?}");
    }
}

#[test]
fn ad_09_local_sm_sets_its_port_query_port_reports_it_and_eqes_follow() {
    use device::abi::cqe::{Eqe, EqeType};
    use transport::mad::{attr_id, method, PortInfoRepr};
    let mut d = Dev::new();
    let out = mad_ifc(
        &mut d,
        local_dr_smp(method::GET, attr_id::PORT_INFO, [0; 64]),
    );
    let mut pi = PortInfoRepr::parse(&parse_smp(&out.mad).data).unwrap();
    // The SM on this node takes the port over: LID 0x33 (LMC 1), itself as SM at
    // SL 2, a new P_Key in entry 0 follows through P_KeyTable below.
    pi.lid = 0x33;
    pi.lmc = 1;
    pi.master_sm_lid = 0x33;
    pi.master_sm_sl = 2;
    pi.client_reregister = true;
    pi.port_state = 0;
    pi.port_physical_state = 0;
    let mut data = [0u8; 64];
    pi.emit(&mut data).unwrap();
    let out = mad_ifc(&mut d, local_dr_smp(method::SET, attr_id::PORT_INFO, data));
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    assert_eq!(parse_smp(&out.mad).status, 0);
    let mut pk = [0u8; 64];
    pk[..2].copy_from_slice(&0x8001u16.to_be_bytes());
    let out = mad_ifc(&mut d, local_dr_smp(method::SET, attr_id::P_KEY_TABLE, pk));
    assert_eq!(parse_smp(&out.mad).status, 0);
    let q = QueryPortIn {
        port: 1,
        rsvd: [0; 3],
    };
    let p: PortAttr = d.call(Opcode::QueryPort, &q).unwrap();
    assert_eq!(
        (p.lid, p.lmc, p.sm_lid, p.sm_sl, p.state, p.pkeys[0]),
        (0x33, 1, 0x33, 2, 4, 0x8001)
    );
    // The data path raises the events on EQ 0, object = port 1.
    d.hca.run_once(&mut d.mem, &d.db, &NoIrq, now());
    let mut kinds = Vec::new();
    for k in 0..64u64 {
        let mut b = [0u8; 16];
        d.mem.read(EQ0_RING + 16 * k, &mut b).unwrap();
        let e = Eqe::from_bytes(&b);
        if e.object == 1 && e.kind >= EqeType::PortActive.raw() {
            kinds.push(e.kind);
        }
    }
    for want in [
        EqeType::LidChange,
        EqeType::SmChange,
        EqeType::ClientReregister,
        EqeType::PkeyChange,
    ] {
        assert!(kinds.contains(&want.raw()), "{want:?} in {kinds:?}");
    }
    // The engine takes packets for the new LIDs now.
    assert_eq!(d.hca.port.engine().port().lid, 0x33);
    assert_eq!(d.hca.port.engine().port().pkeys[0], 0x8001);
}

#[test]
fn ad_12_hostile_mad_ifc_inputs_never_panic() {
    // Every byte of the MAD random (and then mostly an SMP class, so the SMA's
    // deeper checks run): always a completed command, never a panic.
    let mut d = Dev::new();
    let mut r = Rng(0x5eed_0026);
    for k in 0..20_000u32 {
        let mut mad = [0u8; 256];
        mad.copy_from_slice(&r.bytes(256));
        if k % 2 == 0 {
            mad[0] = 1;
            mad[1] = if r.chance(50) { 0x01 } else { 0x81 };
            mad[2] = 1;
        }
        let out = mad_ifc(&mut d, mad);
        assert!(out.flags <= mad_ifc_flag::CONSUMED, "{}", out.flags);
    }
    let p: PortAttr = d
        .call(
            Opcode::QueryPort,
            &QueryPortIn {
                port: 1,
                rsvd: [0; 3],
            },
        )
        .unwrap();
    assert!(p.state <= 4);
}

// ------------------------------------------------- SET_PORT_CAPS, SET_NODE_DESC

/// PortInfo:CapabilityMask as the SMA answers SubnGet(PortInfo): bytes 20..24
/// of the attribute (IBA 14.2.5.6; libibmad's IB_PORT_CAPMASK_F at bit 160).
fn sma_capability_mask(d: &mut Dev) -> u32 {
    use transport::mad::{attr_id, method};
    let out = mad_ifc(d, local_dr_smp(method::GET, attr_id::PORT_INFO, [0; 64]));
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    let r = parse_smp(&out.mad);
    assert_eq!(r.status, 0);
    u32::from_be_bytes(r.data[20..24].try_into().unwrap())
}

/// NodeDescription's 64 bytes as the SMA answers SubnGet(NodeDescription).
fn sma_node_description(d: &mut Dev) -> [u8; 64] {
    use transport::mad::{attr_id, method};
    let out = mad_ifc(
        d,
        local_dr_smp(method::GET, attr_id::NODE_DESCRIPTION, [0; 64]),
    );
    assert_eq!(out.flags, mad_ifc_flag::REPLY);
    let r = parse_smp(&out.mad);
    assert_eq!(r.status, 0);
    r.data
}

fn caps_in(set: u32, clear: u32) -> SetPortCapsIn {
    SetPortCapsIn {
        port: 1,
        rsvd0: [0; 3],
        set,
        clear,
        rsvd1: 0,
    }
}

fn desc_in(text: &[u8]) -> SetNodeDescIn {
    let mut desc = [0u8; 64];
    desc[..text.len()].copy_from_slice(text);
    SetNodeDescIn {
        len: text.len() as u8,
        rsvd: [0; 7],
        desc,
    }
}

#[test]
fn ad_09_set_port_caps_is_sm_reaches_the_smas_portinfo_capability_mask() {
    let mut d = Dev::new();
    let before = sma_capability_mask(&mut d);
    assert_eq!(before & port_cap::IS_SM, 0, "{before:#x}");
    // ib_umad's issm open: set_port_cap_mask = IB_PORT_SM.
    let out: SetPortCapsOut = d
        .call(Opcode::SetPortCaps, &caps_in(port_cap::IS_SM, 0))
        .unwrap();
    assert_eq!(out.capability_mask, before | port_cap::IS_SM);
    assert_eq!(sma_capability_mask(&mut d), before | port_cap::IS_SM);
    // ib_cm gone (clear IsCM) and an agent of the vendor class at once.
    let out: SetPortCapsOut = d
        .call(
            Opcode::SetPortCaps,
            &caps_in(port_cap::IS_VENDOR_CLASS, port_cap::IS_CM),
        )
        .unwrap();
    let want = (before | port_cap::IS_SM | port_cap::IS_VENDOR_CLASS) & !port_cap::IS_CM;
    assert_eq!(out.capability_mask, want);
    assert_eq!(sma_capability_mask(&mut d), want);
    // issm closed: IsSM goes; nothing else moves.
    let _: SetPortCapsOut = d
        .call(Opcode::SetPortCaps, &caps_in(0, port_cap::IS_SM))
        .unwrap();
    assert_eq!(sma_capability_mask(&mut d), want & !port_cap::IS_SM);
}

#[test]
fn ad_09_set_port_caps_refuses_bits_that_are_not_the_hosts_and_changes_nothing() {
    use device::cmdq::Syndrome;
    let mut d = Dev::new();
    let before = sma_capability_mask(&mut d);
    let bad = |s| (Status::BadParam, s as u32);
    // IsTrapSupported (bit 3) is the SMA's, not the host's; so is bit 31.
    for (set, clear) in [(1 << 3, 0), (0, 1 << 3), (port_cap::IS_SM | 1 << 31, 0)] {
        assert_eq!(
            d.refuse(Opcode::SetPortCaps, &caps_in(set, clear)),
            bad(Syndrome::PortCaps),
            "{set:#x} {clear:#x}"
        );
    }
    // A bit both set and cleared.
    assert_eq!(
        d.refuse(
            Opcode::SetPortCaps,
            &caps_in(port_cap::IS_SM, port_cap::IS_SM)
        ),
        bad(Syndrome::PortCaps)
    );
    // Port 2, reserved bytes.
    let i = SetPortCapsIn {
        port: 2,
        ..caps_in(port_cap::IS_SM, 0)
    };
    assert_eq!(d.refuse(Opcode::SetPortCaps, &i), bad(Syndrome::Port));
    let i = SetPortCapsIn {
        rsvd1: 1,
        ..caps_in(port_cap::IS_SM, 0)
    };
    assert_eq!(d.refuse(Opcode::SetPortCaps, &i), bad(Syndrome::Reserved));
    assert_eq!(sma_capability_mask(&mut d), before);
}

#[test]
fn ad_09_set_node_desc_is_what_nodedescription_answers() {
    let mut d = Dev::new();
    // The device's own until the guest sets one: "vhca <node name>".
    let own = sma_node_description(&mut d);
    assert_eq!(&own[..7], b"vhca a\0");
    // rdma-ndd's "<hostname> <device>".
    let text = b"guest-a vhca0";
    d.call_in(Opcode::SetNodeDesc, &desc_in(text)).unwrap();
    let nd = sma_node_description(&mut d);
    assert_eq!(&nd[..text.len()], text);
    assert!(nd[text.len()..].iter().all(|&b| b == 0), "{nd:?}");
    // 64 bytes fill the attribute: no NUL at all (IBA 14.2.5.2).
    let full = [b'x'; 64];
    d.call_in(Opcode::SetNodeDesc, &desc_in(&full)).unwrap();
    assert_eq!(sma_node_description(&mut d), full);
    // The empty description.
    d.call_in(Opcode::SetNodeDesc, &desc_in(b"")).unwrap();
    assert_eq!(sma_node_description(&mut d), [0; 64]);
}

#[test]
fn ad_09_set_node_desc_refuses_a_bad_length_or_padding_and_changes_nothing() {
    use device::cmdq::Syndrome;
    let mut d = Dev::new();
    d.call_in(Opcode::SetNodeDesc, &desc_in(b"kept")).unwrap();
    let bad = (Status::BadParam, Syndrome::NodeDesc as u32);
    // A length past 64.
    let mut i = desc_in(&[b'y'; 64]);
    i.len = 65;
    assert_eq!(d.refuse(Opcode::SetNodeDesc, &i), bad);
    i.len = 255;
    assert_eq!(d.refuse(Opcode::SetNodeDesc, &i), bad);
    // Not NUL-terminated: a byte after the length.
    let mut i = desc_in(b"abc");
    i.desc[10] = b'z';
    assert_eq!(d.refuse(Opcode::SetNodeDesc, &i), bad);
    let mut i = desc_in(b"abc");
    i.desc[3] = b'd';
    assert_eq!(d.refuse(Opcode::SetNodeDesc, &i), bad);
    // A NUL within the length.
    let i = desc_in(b"ab\0cd");
    assert_eq!(d.refuse(Opcode::SetNodeDesc, &i), bad);
    // Reserved bytes.
    let mut i = desc_in(b"abc");
    i.rsvd[6] = 1;
    assert_eq!(
        d.refuse(Opcode::SetNodeDesc, &i),
        (Status::BadParam, Syndrome::Reserved as u32)
    );
    assert_eq!(&sma_node_description(&mut d)[..5], b"kept\0");
}

#[test]
fn ad_09_a_device_reset_forgets_the_guests_caps_and_description() {
    let mut d = Dev::new();
    let before = sma_capability_mask(&mut d);
    let own = sma_node_description(&mut d);
    let _: SetPortCapsOut = d
        .call(
            Opcode::SetPortCaps,
            &caps_in(port_cap::IS_SM, port_cap::IS_CM),
        )
        .unwrap();
    d.call_in(Opcode::SetNodeDesc, &desc_in(b"guest-a"))
        .unwrap();
    assert_ne!(sma_capability_mask(&mut d), before);
    // The driver goes (DEV_CTRL.RESET, a new client): its SM and its
    // description with it.
    d.hca.reset(
        Engine::new(PortConfig::new(LID, GUID), Limits::default()),
        now(),
    );
    assert_eq!(sma_capability_mask(&mut d), before);
    assert_eq!(sma_node_description(&mut d), own);
}

/// Issue 27 item 3: a port whose underlay carries IB MTU 1024 (the device
/// sets `PortConfig::max_mtu` from it) reports MTUCap 1024 to the SM, and
/// NeighborMTU 1024 until an SM sets it: QUERY_PORT (what `ibv_devinfo`
/// shows) has max_mtu 1024 and active_mtu the SM's NeighborMTU; an SM's
/// NeighborMTU above MTUCap is refused (IBA 14.2.5.6).
#[test]
fn query_port_mtu_is_the_underlays_and_active_mtu_the_sms_neighbor_mtu() {
    use transport::mad::{attr_id, method, PortInfoRepr};
    let cfg = PortConfig {
        max_mtu: tv::Mtu::M1024,
        ..PortConfig::new(LID, GUID)
    };
    let mut d = Dev::with_port(4, port_with(cfg));
    let q = QueryPortIn {
        port: 1,
        rsvd: [0; 3],
    };
    let p: PortAttr = d.call(Opcode::QueryPort, &q).unwrap();
    assert_eq!(
        (p.max_mtu, p.active_mtu),
        (Mtu::M1024.raw(), Mtu::M1024.raw())
    );
    let get = |d: &mut Dev| {
        let out = mad_ifc(d, local_dr_smp(method::GET, attr_id::PORT_INFO, [0; 64]));
        PortInfoRepr::parse(&parse_smp(&out.mad).data).unwrap()
    };
    let pi = get(&mut d);
    assert_eq!(
        (pi.mtu_cap, pi.neighbor_mtu),
        (3, 3),
        "MTUCap and NeighborMTU 1024"
    );
    let set = |d: &mut Dev, neighbor: u8| {
        let mut pi = get(d);
        pi.neighbor_mtu = neighbor;
        let mut data = [0u8; 64];
        pi.emit(&mut data).unwrap();
        parse_smp(&mad_ifc(d, local_dr_smp(method::SET, attr_id::PORT_INFO, data)).mad).status
    };
    assert_ne!(set(&mut d, 4), 0, "NeighborMTU 2048 above MTUCap 1024");
    assert_eq!(get(&mut d).neighbor_mtu, 3, "unchanged");
    assert_eq!(set(&mut d, 2), 0, "NeighborMTU 512");
    let p: PortAttr = d.call(Opcode::QueryPort, &q).unwrap();
    assert_eq!(
        (p.max_mtu, p.active_mtu),
        (Mtu::M1024.raw(), Mtu::M512.raw())
    );
}
