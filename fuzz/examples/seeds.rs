//! Writes the seed corpora of fuzz/corpus/ (fuzz/README.md) from the project's own
//! encoders, so that the fuzzers start from valid inputs: native packets of the
//! transport's codec corpus (every opcode, WF-01..WF-09) and RoCEv2 frames around
//! them, WQEs of every opcode (abi::wqe), a command sequence that brings up PDs,
//! EQ, CQ, SRQ, MR and connected QPs and moves a WRITE and a SEND (abi::cmd, run
//! against the real command queue so that every number in it is the device's
//! answer), TAP frames, a fabric file, fault specs and command lines.
//!
//! Run: `cargo run --manifest-path fuzz/Cargo.toml --example seeds` (no fuzzing
//! flags needed). Existing seed files are overwritten; nothing else is touched.

use std::fs;
use std::path::Path;

use device::abi::cmd::{
    pbl_const, AllocPdOut, AllocRddOut, AllocXrcdOut, CreateCqIn, CreateCqOut, CreateEecIn,
    CreateEecOut, CreateEqIn, CreateEqOut, CreateQpIn, CreateQpOut, CreateSrqIn, CreateSrqOut,
    DeallocRddIn, DeallocXrcdIn, DestroyEecIn, EecAttr, McastIn, ModifyEecIn, ModifyQpIn, Opcode,
    Pbl, QpAttr, QpCap, QueryEecIn, QueryQpIn, RegMrIn, RegMrOut,
};
use device::abi::layout::{AbiStruct, Field};
use device::abi::uar::uar;
use device::abi::verbs::{access, num, qp_attr_mask as m, Mtu, QpState, QpType};
use device::abi::wqe::{AtomicSeg, BindSeg, RaddrSeg, RecvCtrl, SendCtrl, Sge, UdSeg};
use transport::memory::Memory;
use vhca_fuzz::cmdq::{Dev, Ops, OPCODES};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn bytes<T: Field>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; T::SIZE];
    v.put(&mut b);
    b
}

// ------------------------------------------------------------------ wire

fn wire() {
    let corpus = transport::wire::corpus::corpus();
    // A spread of the codec corpus: every 7th packet (all opcodes appear with
    // and without GRH across it), as native packets (mode 0) and as the
    // transport part alone (mode 3).
    for (i, p) in corpus.iter().enumerate().step_by(7) {
        if p.bytes.len() > 1200 {
            continue;
        }
        let mut b = vec![0u8];
        b.extend_from_slice(&p.bytes);
        write("wire_parse", &format!("native-{i:03}"), &b);
        let has_grh = p.bytes[1] & 3 == 3;
        let t = &p.bytes[if has_grh { 48 } else { 8 }..p.bytes.len() - 6];
        let mut b = vec![3u8];
        b.extend_from_slice(t);
        write("wire_parse", &format!("transport-{i:03}"), &b);
        if i % 21 == 0 {
            let v4 = i % 42 == 0;
            let gid = |n: u8| {
                if v4 {
                    std::net::Ipv4Addr::new(10, 0, 0, n)
                        .to_ipv6_mapped()
                        .octets()
                } else {
                    std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, n.into()).octets()
                }
            };
            let f = vhca_fuzz::roce_frame(
                [2, 0, 0, 0, 0, 2],
                [2, 0, 0, 0, 0, 1],
                gid(2),
                gid(1),
                0xc000,
                t,
            );
            let mut b = vec![0u8];
            b.extend_from_slice(&f);
            write("wire_parse", &format!("roce-{i:03}"), &b);
        }
    }
}

// ------------------------------------------------------------------ WQEs

fn wqe_decode() {
    let ctrl = |op: u8, flags: u8, len: u16| SendCtrl {
        wr_id: 0x1122_3344_5566_7788,
        opcode: op,
        flags,
        len,
        imm_or_inv: 0xdead_beef,
    };
    let sge = Sge {
        addr: 0x11_4000,
        length: 64,
        lkey: 0x100,
    };
    let raddr = RaddrSeg {
        remote_addr: 0x11_8000,
        rkey: 0x100,
        rsvd: 0,
    };
    let atomic = AtomicSeg {
        compare_add: 1,
        swap: 2,
    };
    // Selector byte: QP type in bits 0..3 (0 RC, 1 UC, 2 UD), max_sge 16,
    // max_inline 64, bit 7: post to the engine.
    let sel = |t: u8| 0x80 | (2 << 3) | (1 << 5) | t;
    let signaled = 2;
    let cases: Vec<(&str, u8, Vec<u8>)> = vec![
        (
            "rc-write",
            0,
            [bytes(&ctrl(0, signaled, 1)), bytes(&raddr), bytes(&sge)].concat(),
        ),
        (
            "rc-write-imm",
            0,
            [bytes(&ctrl(1, signaled, 1)), bytes(&raddr), bytes(&sge)].concat(),
        ),
        (
            "rc-send",
            0,
            [bytes(&ctrl(2, signaled, 2)), bytes(&sge), bytes(&sge)].concat(),
        ),
        (
            "rc-send-inline",
            0,
            [bytes(&ctrl(3, signaled | 8, 8)), b"abcdefgh".to_vec()].concat(),
        ),
        (
            "rc-read",
            0,
            [bytes(&ctrl(4, signaled, 1)), bytes(&raddr), bytes(&sge)].concat(),
        ),
        (
            "rc-cas",
            0,
            [
                bytes(&ctrl(5, signaled, 1)),
                bytes(&raddr),
                bytes(&atomic),
                bytes(&sge),
            ]
            .concat(),
        ),
        (
            "rc-faa",
            0,
            [
                bytes(&ctrl(6, signaled, 1)),
                bytes(&raddr),
                bytes(&atomic),
                bytes(&sge),
            ]
            .concat(),
        ),
        ("rc-local-inv", 0, bytes(&ctrl(7, signaled, 0))),
        (
            "uc-bind",
            1,
            [
                bytes(&ctrl(8, signaled, 0)),
                bytes(&BindSeg {
                    addr: 0x11_4000,
                    length: 4096,
                    mr_lkey: 0x100,
                    new_rkey: 0x201,
                    access: access::REMOTE_WRITE,
                    rsvd: 0,
                }),
            ]
            .concat(),
        ),
        (
            "rc-send-inv",
            0,
            [bytes(&ctrl(9, signaled, 1)), bytes(&sge)].concat(),
        ),
        (
            "rc-flush",
            0,
            [bytes(&ctrl(14, signaled, 0)), bytes(&raddr), bytes(&atomic)].concat(),
        ),
        (
            "rc-atomic-write",
            0,
            [bytes(&ctrl(15, signaled, 0)), bytes(&raddr), bytes(&atomic)].concat(),
        ),
        (
            "uc-write",
            1,
            [bytes(&ctrl(0, signaled, 1)), bytes(&raddr), bytes(&sge)].concat(),
        ),
        (
            "ud-send",
            2,
            [
                bytes(&ctrl(2, signaled, 1)),
                bytes(&UdSeg {
                    remote_qpn: 0x100,
                    remote_qkey: 0x1111_1111,
                    av: device::abi::cmd::Av {
                        dlid: 2,
                        ..Default::default()
                    },
                }),
                bytes(&sge),
            ]
            .concat(),
        ),
        (
            "recv",
            0,
            [
                bytes(&RecvCtrl {
                    wr_id: 7,
                    num_sge: 2,
                    rsvd: 0,
                }),
                bytes(&sge),
                bytes(&sge),
            ]
            .concat(),
        ),
    ];
    for (name, t, w) in cases {
        let mut b = vec![sel(t)];
        b.extend_from_slice(&w);
        write("wqe_decode", name, &b);
    }
}

// ------------------------------------------------------------------ commands

/// Records for the cmdq target, run against a real device as they are written
/// so that numbers (PDN, CQN, QPN, keys) are the device's.
struct Script {
    dev: Dev,
    out: Vec<u8>,
}

impl Script {
    fn run(&mut self, rec: Vec<u8>) {
        for op in Ops(&rec) {
            assert!(self.dev.apply(op), "the seed drove the queue fatal");
        }
        self.out.extend_from_slice(&rec);
    }

    fn cmd_out<I: AbiStruct>(&mut self, op: Opcode, input: &I) -> [u8; 32] {
        let tag = OPCODES.iter().position(|o| *o == op).unwrap() as u8;
        let input = bytes(input);
        let mut r = vec![tag, 0];
        r.extend_from_slice(&32u16.to_le_bytes());
        r.extend_from_slice(&(input.len() as u16).to_le_bytes());
        r.extend_from_slice(&input);
        self.run(r);
        assert_eq!(self.dev.last_status(), 0, "{op:?} failed in the seed");
        self.dev.last_out()
    }

    fn poke(&mut self, addr: u32, data: &[u8]) {
        let mut r = vec![0x82];
        r.extend_from_slice(&addr.to_le_bytes());
        r.extend_from_slice(&(data.len() as u16).to_le_bytes());
        r.extend_from_slice(data);
        self.run(r);
    }

    fn doorbell(&mut self, uar_page: u8, word: u16, value: u32) {
        let mut r = vec![0x83, uar_page];
        r.extend_from_slice(&word.to_le_bytes());
        r.extend_from_slice(&value.to_le_bytes());
        self.run(r);
    }

    fn rounds(&mut self, n: u8) {
        self.run(vec![0x84, n]);
    }
}

fn contiguous(addr: u64, npages: u32) -> Pbl {
    Pbl {
        addr,
        npages,
        page_shift: 12,
        levels: pbl_const::CONTIGUOUS as u8,
        rsvd: 0,
    }
}

fn get<T: AbiStruct>(out: &[u8; 32]) -> T {
    T::get(&out[..T::SIZE])
}

fn cmdq() {
    let mut s = Script {
        dev: Dev::new(),
        out: Vec::new(),
    };
    let tag = |op: Opcode| OPCODES.iter().position(|o| *o == op).unwrap() as u8;
    s.run(vec![tag(Opcode::AllocPd), 0, 32, 0, 0, 0]);
    assert_eq!(s.dev.last_status(), 0);
    let pdn = get::<AllocPdOut>(&s.dev.last_out()).pdn;
    let eqn = get::<CreateEqOut>(&s.cmd_out(
        Opcode::CreateEq,
        &CreateEqIn {
            ring: contiguous(0x10000, 1),
            uar: 0,
            db_slot: uar::EQ0_SLOT as u16 + 1,
            vector: 1,
            log2_entries: 4,
            rsvd: [0; 7],
        },
    ))
    .eqn;
    let cqn = get::<CreateCqOut>(&s.cmd_out(
        Opcode::CreateCq,
        &CreateCqIn {
            ring: contiguous(0x11000, 1),
            eqn,
            uar: 1,
            db_slot: uar::FIRST_SLOT as u16,
            log2_entries: 4,
            rsvd: [0; 5],
        },
    ))
    .cqn;
    let srqn = get::<CreateSrqOut>(&s.cmd_out(
        Opcode::CreateSrq,
        &CreateSrqIn {
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
            db_slot: uar::FIRST_SLOT as u16 + 1,
            log2_entries: 4,
            wqe_shift: 5,
            ring: contiguous(0x12000, 1),
        },
    ))
    .srqn;
    // An MR over two data pages named by a one-level page list.
    let mut list = Vec::new();
    for p in [0x20000u64, 0x21000] {
        list.extend_from_slice(&p.to_le_bytes());
    }
    s.poke(0x13000, &list);
    let key = get::<RegMrOut>(&s.cmd_out(
        Opcode::RegMr,
        &RegMrIn {
            pdn,
            access: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            iova: 0x7000_0000,
            length: 8192,
            flags: 0,
            rsvd: 0,
            pbl: Pbl {
                addr: 0x13000,
                npages: 2,
                page_shift: 12,
                levels: pbl_const::ONE_LEVEL as u8,
                rsvd: 0,
            },
        },
    ))
    .lkey;
    let qp_in = |t: QpType, sq: u64, rq: Option<u64>, slot: u16| CreateQpIn {
        qp_type: t.raw(),
        sq_sig_all: 0,
        sq_wqe_shift: if t == QpType::Ud { 7 } else { 6 },
        rq_wqe_shift: 5,
        log2_sq_size: 4,
        log2_rq_size: if rq.is_some() { 4 } else { 0 },
        port: 1,
        rsvd0: 0,
        pdn,
        send_cqn: cqn,
        recv_cqn: cqn,
        srqn: if rq.is_some() { num::NONE } else { srqn },
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: if rq.is_some() { 16 } else { 0 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        uar: 1,
        db_slot: slot,
        rsvd1: [0; 2],
        xrcdn: 0,
        sq: contiguous(sq, 1),
        rq: rq.map_or(Pbl::default(), |a| contiguous(a, 1)),
    };
    let first = uar::FIRST_SLOT as u16;
    let a = get::<CreateQpOut>(&s.cmd_out(
        Opcode::CreateQp,
        &qp_in(QpType::Rc, 0x14000, Some(0x15000), first + 2),
    ))
    .qpn;
    let b = get::<CreateQpOut>(&s.cmd_out(
        Opcode::CreateQp,
        &qp_in(QpType::Rc, 0x16000, Some(0x17000), first + 3),
    ))
    .qpn;
    let _ud = get::<CreateQpOut>(&s.cmd_out(
        Opcode::CreateQp,
        &qp_in(QpType::Ud, 0x18000, None, first + 4),
    ))
    .qpn;
    for (q, dest) in [(a, b), (b, a)] {
        let modify = |mask: u32, attr: QpAttr| ModifyQpIn {
            qpn: q,
            attr_mask: mask,
            attr,
            alt: device::abi::cmd::AltPath::from_bytes(&[0; device::abi::cmd::AltPath::SIZE]),
        };
        let init = QpAttr {
            qp_state: QpState::Init.raw(),
            port_num: 1,
            qp_access_flags: access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
            ..QpAttr::default()
        };
        s.cmd_out(
            Opcode::ModifyQp,
            &modify(m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS, init),
        );
        let mut rtr = QpAttr {
            qp_state: QpState::Rtr.raw(),
            path_mtu: Mtu::M1024.raw(),
            dest_qp_num: dest,
            rq_psn: 100,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ..QpAttr::default()
        };
        rtr.ah_attr.dlid = 7;
        s.cmd_out(
            Opcode::ModifyQp,
            &modify(
                m::STATE
                    | m::AV
                    | m::PATH_MTU
                    | m::DEST_QPN
                    | m::RQ_PSN
                    | m::MAX_DEST_RD_ATOMIC
                    | m::MIN_RNR_TIMER,
                rtr,
            ),
        );
        let rts = QpAttr {
            qp_state: QpState::Rts.raw(),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            sq_psn: 100,
            max_rd_atomic: 4,
            ..QpAttr::default()
        };
        s.cmd_out(
            Opcode::ModifyQp,
            &modify(
                m::STATE
                    | m::TIMEOUT
                    | m::RETRY_CNT
                    | m::RNR_RETRY
                    | m::SQ_PSN
                    | m::MAX_QP_RD_ATOMIC,
                rts,
            ),
        );
    }
    write("cmdq", "bring-up", &s.out);
    // A WRITE from a to b, then a receive on b and a SEND from a.
    let sge = Sge {
        addr: 0x7000_0000,
        length: 256,
        lkey: key,
    };
    let w = [
        bytes(&SendCtrl {
            wr_id: 1,
            opcode: 0,
            flags: 2,
            len: 1,
            imm_or_inv: 0,
        }),
        bytes(&RaddrSeg {
            remote_addr: 0x7000_1000,
            rkey: key,
            rsvd: 0,
        }),
        bytes(&sge),
    ]
    .concat();
    s.poke(0x14000, &w);
    let pattern: Vec<u8> = (0..=255u8).collect();
    s.poke(0x20000, &pattern);
    // QP a's doorbell slot: UAR 1, slot first + 2 (sq_pi, rq_pi words).
    let word = (first + 2) * 2;
    s.doorbell(1, word, 1);
    s.rounds(4);
    let mut landed = vec![0u8; 256];
    s.dev.mem.read(0x21000, &mut landed).unwrap();
    assert_eq!(landed, pattern, "the seed's WRITE reached the target page");
    let r = [
        bytes(&RecvCtrl {
            wr_id: 2,
            num_sge: 1,
            rsvd: 0,
        }),
        bytes(&Sge {
            addr: 0x7000_1000,
            length: 1024,
            lkey: key,
        }),
    ]
    .concat();
    s.poke(0x17000, &r);
    s.doorbell(1, (first + 3) * 2 + 1, 1);
    let send = [
        bytes(&SendCtrl {
            wr_id: 3,
            opcode: 2,
            flags: 2,
            len: 1,
            imm_or_inv: 0,
        }),
        bytes(&sge),
    ]
    .concat();
    s.poke(0x14000 + 64, &send);
    s.doorbell(1, word, 2);
    s.rounds(7);
    // QUERY_QP answers more than fits inline: the output mailbox.
    let mut r = vec![tag(Opcode::QueryQp), 0];
    r.extend_from_slice(&4096u16.to_le_bytes());
    r.extend_from_slice(&4u16.to_le_bytes());
    r.extend_from_slice(&bytes(&QueryQpIn { qpn: a }));
    s.run(r);
    assert_eq!(s.dev.last_status(), 0, "QUERY_QP");
    // Context window reads of every table.
    for t in 1..=5u8 {
        let mut r = vec![0x85, t];
        r.extend_from_slice(&1u32.to_le_bytes());
        s.run(r);
    }
    write("cmdq", "bring-up-write-send", &s.out);
    // The device reset target: the same records, reset at a few points
    // (during the bring-up, between the posts, after the doorbells).
    let n = Ops(&s.out).count();
    for at in [3, n / 2, n - 6, n - 2] {
        let mut r = vec![at as u8];
        r.extend_from_slice(&s.out);
        write(
            "device_reset",
            &format!("bring-up-write-send-reset-at-{at}"),
            &r,
        );
    }
    later_objects();
    let mut q = vec![];
    for op in [Opcode::QueryDevice, Opcode::Nop] {
        q.extend_from_slice(&[tag(op), 0, 32, 0, 0, 0]);
    }
    write("cmdq", "queries", &q);
}

/// The commands issue 25 item 7 added to the cmdq target, each once with a
/// good input: XRC and RD domains, an EE context through Init, RTR and RTS,
/// a multicast attach and detach of a UD QP; and the staged path: staging on
/// (the guest rewriting the slot between steps), then a REG_MR whose page list
/// is past what runs inline, so that it takes a step.
fn later_objects() {
    let mut s = Script {
        dev: Dev::new(),
        out: Vec::new(),
    };
    let tag = |op: Opcode| OPCODES.iter().position(|o| *o == op).unwrap() as u8;
    s.run(vec![tag(Opcode::AllocPd), 0, 32, 0, 0, 0]);
    let pdn = get::<AllocPdOut>(&s.dev.last_out()).pdn;
    s.run(vec![tag(Opcode::AllocXrcd), 0, 32, 0, 0, 0]);
    assert_eq!(s.dev.last_status(), 0, "ALLOC_XRCD");
    let xrcdn = get::<AllocXrcdOut>(&s.dev.last_out()).xrcdn;
    s.cmd_out(Opcode::DeallocXrcd, &DeallocXrcdIn { xrcdn });
    s.run(vec![tag(Opcode::AllocRdd), 0, 32, 0, 0, 0]);
    assert_eq!(s.dev.last_status(), 0, "ALLOC_RDD");
    let rddn = get::<AllocRddOut>(&s.dev.last_out()).rddn;
    let eecn = get::<CreateEecOut>(&s.cmd_out(Opcode::CreateEec, &CreateEecIn { rddn })).eecn;
    for (state, st) in [(QpState::Init, 0), (QpState::Rtr, 1), (QpState::Rts, 2)] {
        let mut attr = EecAttr {
            state: state.raw(),
            path_mtu: Mtu::M1024.raw(),
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            remote_eecn: eecn,
            rq_psn: 100 + st,
            sq_psn: 100,
            ..EecAttr::default()
        };
        attr.av.dlid = 7;
        attr.av.port_num = 1;
        s.cmd_out(
            Opcode::ModifyEec,
            &ModifyEecIn {
                eecn,
                rsvd: 0,
                attr,
            },
        );
    }
    let mut r = vec![tag(Opcode::QueryEec), 0];
    r.extend_from_slice(&4096u16.to_le_bytes());
    r.extend_from_slice(&4u16.to_le_bytes());
    r.extend_from_slice(&bytes(&QueryEecIn { eecn }));
    s.run(r);
    assert_eq!(s.dev.last_status(), 0, "QUERY_EEC");
    s.cmd_out(Opcode::DestroyEec, &DestroyEecIn { eecn });
    s.cmd_out(Opcode::DeallocRdd, &DeallocRddIn { rddn });
    // A UD QP in a multicast group and out again.
    let cqn = get::<CreateCqOut>(&s.cmd_out(
        Opcode::CreateCq,
        &CreateCqIn {
            ring: contiguous(0x11000, 1),
            eqn: 0,
            uar: 1,
            db_slot: uar::FIRST_SLOT as u16,
            log2_entries: 4,
            rsvd: [0; 5],
        },
    ))
    .cqn;
    let ud = get::<CreateQpOut>(&s.cmd_out(
        Opcode::CreateQp,
        &CreateQpIn {
            qp_type: QpType::Ud.raw(),
            sq_sig_all: 0,
            sq_wqe_shift: 7,
            rq_wqe_shift: 5,
            log2_sq_size: 4,
            log2_rq_size: 4,
            port: 1,
            rsvd0: 0,
            pdn,
            send_cqn: cqn,
            recv_cqn: cqn,
            srqn: num::NONE,
            cap: QpCap {
                max_send_wr: 16,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            uar: 1,
            db_slot: uar::FIRST_SLOT as u16 + 1,
            rsvd1: [0; 2],
            xrcdn: 0,
            sq: contiguous(0x14000, 1),
            rq: contiguous(0x15000, 1),
        },
    ))
    .qpn;
    let mut gid = [0u8; 16];
    gid[..4].copy_from_slice(&[0xff, 0x12, 0x40, 0x1b]);
    gid[15] = 1;
    let g = McastIn {
        qpn: ud,
        mlid: 0xc001,
        rsvd: 0,
        gid,
    };
    s.cmd_out(Opcode::AttachMcast, &g);
    s.cmd_out(Opcode::DetachMcast, &g);
    // Staging on, the slot rewritten between steps; a REG_MR of 80 pages
    // (more than run inline) over a contiguous page list.
    s.run(vec![0x86, 3]);
    let steps = s.dev.steps;
    s.cmd_out(
        Opcode::RegMr,
        &RegMrIn {
            pdn,
            access: access::LOCAL_WRITE,
            iova: 0x7000_0000,
            length: 80 * 4096,
            flags: 0,
            rsvd: 0,
            pbl: contiguous(0x20000, 80),
        },
    );
    assert!(s.dev.steps > steps, "the REG_MR took no step");
    write("cmdq", "later-objects-staged", &s.out);
}

// ------------------------------------------------------------------ device text and frames

fn fabric_frames() {
    write(
        "fabric_frames",
        "fabric-file",
        b"\x02[[node]]\nname = \"a\"\nlid = 1\nguid = \"0x0002c90300000001\"\naddress = \"127.0.0.1:4791\"\n\n[[node]]\nname = \"b\"\nlid = 2\nguid = 0x0002c90300000002\naddress = \"127.0.0.1:4792\"\n",
    );
    // A cabled fabric (issue 26): two nodes on a switch, a list of port
    // addresses, a switch LID.
    write(
        "fabric_frames",
        "fabric-file-cabled",
        b"\x02[[node]]\nname = \"a\"\nlid = 1\nguid = 1\naddress = \"127.0.0.1:4791\"\n[[node]]\nname = \"b\"\nlid = 2\nguid = 2\naddress = \"127.0.0.1:4792\"\n[[switch]]\nname = \"sw0\"\nguid = 0x100\nports = 3\naddress = [\"127.0.0.1:4800\", \"127.0.0.1:4801\", \"127.0.0.1:4805\"]\nlid = 9\n[[link]]\nends = [\"a\", \"sw0:1\"]\n[[link]]\nends = [\"sw0:3\", \"b\"]\n",
    );
    write(
        "fabric_frames",
        "fault-spec",
        b"\x03drop=0.01,dup=0.001,reorder=0.01,corrupt=0.0001,delay_rate=0.1,delay=10us,seed=7",
    );
    write(
        "fabric_frames",
        "cli-udp",
        b"\x04--socket\x00/tmp/vhca.sock\x00--fabric\x00/tmp/fabric.toml\x00--node\x00a\x00--fault\x00drop=0.1,seed=3\x00--counters-every\x005",
    );
    write(
        "fabric_frames",
        "cli-roce",
        b"\x04--socket\x00/tmp/vhca.sock\x00--tap\x00tap0\x00--mac\x0052:54:00:12:34:56\x00--vhost-user-net\x00/tmp/net.sock",
    );
    // A TAP read: vnet header (10 zero bytes), then a RoCEv2 frame for the
    // port's MAC and an ARP broadcast for the guest.
    let v4 = |n: u8| {
        std::net::Ipv4Addr::new(10, 0, 0, n)
            .to_ipv6_mapped()
            .octets()
    };
    let t = {
        let mut t = vec![0x04, 0, 0xff, 0xff, 0, 0, 0, 2, 0, 0, 0, 0];
        t.extend_from_slice(&[0u8; 16]);
        t
    };
    let roce = vhca_fuzz::roce_frame(
        [0x52, 0x54, 0, 0x65, 0x43, 0x21],
        [0x52, 0x54, 0, 0x12, 0x34, 0x56],
        v4(2),
        v4(1),
        0xc000,
        &t,
    );
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[0x52, 0x54, 0, 0x65, 0x43, 0x21, 0x08, 0x06]);
    arp.extend_from_slice(&[0u8; 28]);
    let mut b = vec![0u8, 1];
    for f in [&roce, &arp] {
        let n = (f.len() + 10) as u16;
        b.extend_from_slice(&n.to_le_bytes());
        b.extend_from_slice(&[0u8; 10]);
        b.extend_from_slice(f);
    }
    write("fabric_frames", "tap-roce-and-arp", &b);
    let mut c = vec![1u8];
    c.extend_from_slice(&roce);
    write("fabric_frames", "classify-roce", &c);
    // virtio-net (mode 6): a TX chain (vnet header, then the frame, at 0x20000)
    // and two writable RX buffers for a mergeable 2000-byte frame.
    let desc = |addr: u64, len: u32, flags: u16, next: u16| {
        let mut d = addr.to_le_bytes().to_vec();
        d.extend_from_slice(&len.to_le_bytes());
        d.extend_from_slice(&flags.to_le_bytes());
        d.extend_from_slice(&next.to_le_bytes());
        d
    };
    let mut tx = vec![6u8, 1, 2];
    tx.extend(desc(0x2_0000, 10, 1, 1));
    tx.extend(desc(0x2_000a, arp.len() as u32, 0, 0));
    tx.extend([1, 0, 0]);
    tx.extend_from_slice(&[0u8; 10]);
    tx.extend_from_slice(&arp);
    write("fabric_frames", "virtio-tx", &tx);
    let mut rx = vec![6u8, 2 | 4, 2];
    rx.extend(desc(0x3_0000, 1500, 2, 0));
    rx.extend(desc(0x3_1000, 1500, 2, 0));
    rx.extend([2, 0, 0, 1, 0]);
    rx.extend_from_slice(&[0u8; 10]);
    rx.extend((0..2000).map(|i| (i % 251) as u8));
    write("fabric_frames", "virtio-rx-mergeable", &rx);
}

// ------------------------------------------------------------------ vfio-user

fn vfio_user() {
    // Records: command u16, flags u8, len u16, payload (the target writes the
    // headers). Config space reads and writes (region 7), BAR0 accesses, a DMA
    // map of the memfd, the device reading guest memory through it, MSI-X
    // setup, SET_IRQS, reset, unmap.
    let rec = |cmd: u16, payload: &[u8]| {
        let mut r = cmd.to_le_bytes().to_vec();
        r.push(0);
        r.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        r.extend_from_slice(payload);
        r
    };
    let access = |off: u64, region: u32, count: u32, data: &[u8]| {
        let mut p = off.to_le_bytes().to_vec();
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        p.extend_from_slice(data);
        p
    };
    let mut s = Vec::new();
    s.extend(rec(4, &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
    s.extend(rec(9, &access(0, 7, 64, &[])));
    s.extend(rec(10, &access(4, 7, 2, &[0x06, 0x00]))); // memory + bus master
    s.extend(rec(10, &access(0x10, 7, 4, &[0xff; 4]))); // BAR0 sizing
    s.extend(rec(9, &access(0x10, 7, 4, &[])));
    let mut map = 32u32.to_le_bytes().to_vec();
    map.extend_from_slice(&3u32.to_le_bytes()); // read | write
    map.extend_from_slice(&0u64.to_le_bytes()); // offset in the fd
    map.extend_from_slice(&0x1000_0000u64.to_le_bytes()); // guest address
    map.extend_from_slice(&(1u64 << 20).to_le_bytes());
    s.extend(rec(2, &map));
    s.extend(rec(10, &access(0x100, 0, 8, &0x1000_0040u64.to_le_bytes())));
    s.extend(rec(9, &access(0x8000, 0, 16, &[]))); // MSI-X table entry 0
    let mut irq = 20u32.to_le_bytes().to_vec();
    irq.extend_from_slice(&(1u32 | 0x20).to_le_bytes()); // DATA_NONE | ACTION_TRIGGER
    irq.extend_from_slice(&2u32.to_le_bytes()); // MSI-X
    irq.extend_from_slice(&0u32.to_le_bytes());
    irq.extend_from_slice(&1u32.to_le_bytes());
    s.extend(rec(8, &irq));
    s.extend(rec(7, &[16, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]));
    s.extend(rec(13, &[]));
    let mut unmap = 24u32.to_le_bytes().to_vec();
    unmap.extend_from_slice(&0u32.to_le_bytes());
    unmap.extend_from_slice(&0x1000_0000u64.to_le_bytes());
    unmap.extend_from_slice(&(1u64 << 20).to_le_bytes());
    s.extend(rec(3, &unmap));
    write("vfio_user", "session", &s);
}

// ------------------------------------------------------------------ mad_plane

/// Seeds of `mad_plane`: SubnGet/SubnSet of each attribute to the SMA, LID-routed
/// and directed route, with link and time steps between; and directed-route
/// SMPs into a switch, out a port and back (the target's record format is in
/// fuzz_targets/mad_plane.rs).
fn mad_plane() {
    use transport::mad::attr::attr_id;
    use transport::mad::{method, DrFields, SmpRepr, SmpRoute};
    let smp = |m: u8, attr: u16, modifier: u32, route: SmpRoute| {
        SmpRepr {
            base_version: 1,
            class_version: 1,
            method: m,
            status: 0,
            tid: 0x42,
            attr_id: attr,
            attr_mod: modifier,
            mkey: 0,
            route,
            data: [0u8; 64],
        }
        .to_bytes()
    };
    let attrs = [
        attr_id::NODE_DESCRIPTION,
        attr_id::NODE_INFO,
        attr_id::GUID_INFO,
        attr_id::PORT_INFO,
        attr_id::P_KEY_TABLE,
        attr_id::SL_TO_VL_TABLE,
        attr_id::VL_ARBITRATION,
        attr_id::SM_INFO,
        attr_id::SWITCH_INFO,
        attr_id::LINEAR_FORWARDING_TABLE,
        attr_id::MULTICAST_FORWARDING_TABLE,
    ];
    let local = SmpRoute::Directed(DrFields::outgoing(&[]).unwrap());
    let out1 = SmpRoute::Directed(DrFields::outgoing(&[1]).unwrap());
    // SMA: mode byte 0, records op 0 (in_port, slid, 256 bytes).
    let mut all = vec![0u8];
    for (i, &a) in attrs.iter().enumerate() {
        for (m, route) in [(method::GET, SmpRoute::Lid), (method::SET, local)] {
            let mut one = vec![0u8, 0, 1, 0, 1];
            one.extend_from_slice(&smp(m, a, 1, route));
            write("mad_plane", &format!("sma-{m}-{a:04x}"), &one);
            if i % 2 == 0 {
                all.extend_from_slice(&one[1..]);
                // time passes (op 1), events drained (op 3), traps (op 2)
                all.extend_from_slice(&[1, 0, 0, 0x10, 0, 3, 2]);
            }
        }
    }
    all.extend_from_slice(&[4 | 0x40, 2, 4, 2, 5]);
    write("mad_plane", "sma-sequence", &all);
    // Switch: mode byte 1, 4 ports; op 1|0x80: in_port, len, body, dlid, slid,
    // CRCs fixed.
    let mut sw = vec![1u8, 3];
    for (a, route) in [
        (attr_id::NODE_INFO, local),
        (attr_id::SWITCH_INFO, local),
        (attr_id::PORT_INFO, out1),
        (attr_id::LINEAR_FORWARDING_TABLE, local),
    ] {
        let body = smp(method::GET, a, 1, route);
        sw.extend_from_slice(&[0x81, 1, 1, 0]);
        sw.extend_from_slice(&body);
        sw.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    }
    sw.extend_from_slice(&[2 | 0x40, 2, 3]);
    write("mad_plane", "switch-sequence", &sw);
}

fn main() {
    mad_plane();
    wire();
    wqe_decode();
    cmdq();
    fabric_frames();
    vfio_user();
    println!("seeds written under {}/corpus", env!("CARGO_MANIFEST_DIR"));
}
