//! (a) A real `vhca` as QEMU and the guest driver first see it: PCI identity and
//! regions, bring-up by abi::bar0's rules, QUERY_DEVICE and QUERY_PORT with sane
//! values, command completion events, RESET, and the fatal configurations.

use std::mem::offset_of;
use std::time::{Duration, Instant};

use vhca_tests::abi::bar0::{dev_ctrl, dev_status, reg, CtxStatus, CtxTable, Fatal};
use vhca_tests::abi::cmd::{Opcode, Status};
use vhca_tests::abi::context::QpContext;
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::cqe::EqeType;
use vhca_tests::abi::ident::{bar, ident};
use vhca_tests::abi::uar::uar;
use vhca_tests::abi::verbs::{PortState, QpType};
use vhca_tests::fixture::{assert_success, connect_loopback, connect_pair, Node};
use vhca_tests::{
    ConnOpts, Guest, GuestOptions, Hca, HcaConfig, Layout, Options, QpInit, RecvWr, SendWr, Vhca,
};

const PCIE_CAP: u8 = 0x10;
const MSIX_CAP: u8 = 0x11;

#[test]
fn pci_identity_regions_and_vectors() {
    let v = Vhca::spawn(Options::nodes(1));
    let mut g = Guest::connect(v.socket(0), GuestOptions::default()).expect("connect");

    let ids = g.ids().unwrap();
    assert_eq!(u32::from(ids.vendor), ident::PCI_VENDOR_ID);
    assert_eq!(u32::from(ids.device), ident::PCI_DEVICE_ID);
    assert_eq!(
        u32::from(ids.subsystem_vendor),
        ident::PCI_SUBSYSTEM_VENDOR_ID
    );
    assert_eq!(u32::from(ids.subsystem), ident::PCI_SUBSYSTEM_ID);
    assert_eq!(ids.class, ident::PCI_CLASS);
    assert_eq!(u32::from(ids.revision), ident::PCI_REVISION);
    assert_eq!(ids.header_type & 0x7f, 0, "type 0 header");

    let caps = g.capabilities().unwrap();
    let ids_found: Vec<u8> = caps.iter().map(|c| c.0).collect();
    assert!(
        ids_found.contains(&PCIE_CAP),
        "PCIe capability (QEMU needs it): {ids_found:x?}"
    );
    assert!(
        ids_found.contains(&MSIX_CAP),
        "MSI-X capability: {ids_found:x?}"
    );
    let msix = g.msix_capability().unwrap();
    let table = g.cfg_u32(msix + 4).unwrap();
    let pba = g.cfg_u32(msix + 8).unwrap();
    assert_eq!(table & 7, bar::BAR0_INDEX, "MSI-X table in BAR0");
    assert_eq!(table & !7, bar::MSIX_TABLE_OFFSET);
    assert_eq!(pba & 7, bar::BAR0_INDEX, "PBA in BAR0");
    assert_eq!(pba & !7, bar::MSIX_PBA_OFFSET);
    let table_size = u32::from(g.cfg_u16(msix + 2).unwrap() & 0x7ff) + 1;
    assert_eq!(table_size, g.msix_count(), "table size = SET_IRQS vectors");
    assert!(
        (bar::MSIX_MIN_VECTORS..=bar::MSIX_MAX_VECTORS).contains(&g.msix_count()),
        "{} vectors",
        g.msix_count()
    );

    let (size0, _) = g.region_info(0).unwrap();
    assert_eq!(size0, u64::from(bar::BAR0_SIZE));
    let (size2, flags2) = g.region_info(2).unwrap();
    assert!(size2 >= u64::from(uar::PAGE_SIZE) && size2.is_power_of_two());
    assert_ne!(
        flags2 & vfio_bindings::bindings::vfio::VFIO_REGION_INFO_FLAG_MMAP,
        0,
        "BAR2 mappable"
    );
    assert!(g.bar2_mapped(), "BAR2 mapped from the server's memfd");
    let covered: u64 = g.sparse_areas(2).iter().map(|a| a.1).sum();
    assert_eq!(
        covered,
        size2,
        "every doorbell page is mapped: {:?}",
        g.sparse_areas(2)
    );
    let (cfg_size, _) = g.region_info(7).unwrap();
    assert_eq!(cfg_size, 4096, "PCIe config space");
    assert!(
        g.reset_supported(),
        "DEVICE_RESET offered (crate's flag corrected)"
    );

    let h = Hca::bring_up(g).expect("bring-up");
    let caps = h.caps();
    assert_eq!(h.abi_version(), ident::ABI_VERSION);
    assert_eq!(
        caps.msix_vectors,
        h.guest().msix_count(),
        "CAP_MSIX_VECTORS"
    );
    assert_eq!(
        u64::from(caps.num_uars) * u64::from(uar::PAGE_SIZE),
        size2,
        "BAR2 = CAP_NUM_UARS pages"
    );
}

#[test]
fn bring_up_and_query_device_and_port() {
    let v = Vhca::spawn(Options::nodes(2));
    let g = Guest::connect(v.socket(1), GuestOptions::default()).expect("connect");
    let mut h = Hca::bring_up(g).expect("bring-up");
    let caps = h.caps();
    assert_eq!(caps.num_ports, 1);
    assert!(caps.max_qp >= 2 && caps.max_cq >= 1 && caps.max_pd >= 1 && caps.max_mr >= 1);
    assert!(caps.max_eq >= 2, "EQ 0 and at least one completion EQ");
    assert!(caps.max_qp_wr >= 16 && caps.max_sge >= 1 && caps.max_cqe >= 16);
    assert!(caps.max_cmdq_log2 >= 1 && caps.max_eq_log2 >= 1);
    use vhca_tests::abi::bar0::dev_cap;
    for (bit, name) in [
        (dev_cap::RC, "RC"),
        (dev_cap::UC, "UC"),
        (dev_cap::UD, "UD"),
        (dev_cap::SRQ, "SRQ"),
        (dev_cap::ATOMIC, "ATOMIC"),
    ] {
        assert_ne!(
            caps.flags & bit,
            0,
            "CAP_FLAGS lacks {name}: {:#x}",
            caps.flags
        );
    }

    let d = h.query_device().expect("QUERY_DEVICE");
    assert_eq!(d.vendor_id, ident::PCI_VENDOR_ID);
    assert_eq!(d.vendor_part_id, ident::PCI_DEVICE_ID);
    assert_eq!(
        d.cap_flags, caps.flags,
        "QUERY_DEVICE cap_flags = CAP_FLAGS"
    );
    assert_eq!(d.max_qp, caps.max_qp);
    assert_eq!(d.max_cq, caps.max_cq);
    assert_eq!(d.max_srq, caps.max_srq);
    assert_eq!(d.max_mr, caps.max_mr);
    assert_eq!(d.max_pd, caps.max_pd);
    assert_eq!(d.max_eq, caps.max_eq);
    assert_eq!(d.max_qp_wr, caps.max_qp_wr);
    assert_eq!(d.max_sge, caps.max_sge);
    assert_eq!(d.max_cqe, caps.max_cqe);
    assert_eq!(d.max_inline_data, caps.max_inline);
    assert_eq!(d.max_srq_wr, caps.max_srq_wr);
    assert_eq!(d.num_uars, caps.num_uars);
    assert_eq!(u32::from(d.msix_vectors), caps.msix_vectors);
    assert_eq!(d.phys_port_cnt, 1);
    assert_eq!(d.max_msg_sz, 1 << 31, "C9-10");
    assert!(d.max_pkeys >= 1);
    assert_ne!(d.node_guid, 0);
    assert!(
        d.page_size_cap & (1 << 12) != 0,
        "4 KiB pages: {:#x}",
        d.page_size_cap
    );
    assert!(d.max_qp_rd_atom >= 1 && d.max_qp_init_rd_atom >= 1);
    assert!(d.atomic_cap >= 1, "atomics supported (CAP_FLAGS.ATOMIC)");
    assert!(d.max_mr_size >= 1 << 30);

    let p = h.query_port(1).expect("QUERY_PORT");
    assert_eq!(p.lid, v.lid(1), "LID from the fabric file");
    assert_eq!(p.port_guid, v.guid(1), "port GUID from the fabric file");
    let mut gid0 = [0u8; 16];
    gid0[0] = 0xfe;
    gid0[1] = 0x80;
    gid0[8..].copy_from_slice(&v.guid(1).to_be_bytes());
    assert_eq!(p.gid0, gid0, "GID 0 = fe80:: + port GUID, network order");
    assert_eq!(
        p.gid_prefix, 0xfe80_0000_0000_0000,
        "subnet prefix as a number"
    );
    assert_eq!(p.state, PortState::Active.raw());
    assert_eq!(p.phys_state, 5, "LinkUp");
    assert_eq!(p.link_layer, 1, "InfiniBand");
    assert!(p.pkey_tbl_len >= 1 && p.gid_tbl_len >= 1);
    assert_eq!(p.pkeys[0], 0xffff, "default P_Key at index 0");
    assert!((1..=5).contains(&p.active_mtu) && p.active_mtu <= p.max_mtu);
    assert_eq!(p.max_msg_sz, 1 << 31);
    assert_eq!(p.lmc, 0);

    // Only port 1 exists.
    for port in [0u8, 2, 255] {
        let e = h.query_port(port).expect_err("a port that does not exist");
        assert_eq!(e.status(), Some(Status::BadParam), "port {port}: {e}");
    }
    // Counters: at least the names the ABI gives.
    for set in CounterSet::ALL {
        let v = h.query_counters(*set).expect("QUERY_COUNTERS");
        assert!(
            v.len() >= set.names().len(),
            "{set:?}: {} < {}",
            v.len(),
            set.names().len()
        );
    }
    // An unknown opcode.
    let e = h.cmd_bytes(0x7777, &[], 0).expect_err("unknown opcode");
    assert_eq!(e.status(), Some(Status::BadOpcode), "{e}");
    h.nop().expect("the queue goes on");
}

#[test]
fn commands_complete_with_events_on_vector_0() {
    let v = Vhca::spawn(Options::nodes(1));
    let g = Guest::connect(v.socket(0), GuestOptions::default()).expect("connect");
    let cfg = HcaConfig {
        cmd_events: true,
        ..HcaConfig::default()
    };
    let mut h = Hca::bring_up_with(g, cfg).expect("bring-up with command events");
    // bring_up_with checked a COMMAND_DONE EQE (token, status) for each command;
    // a failing one carries its status too.
    for _ in 0..20 {
        h.nop().unwrap();
    }
    let e = h.query_port(9).expect_err("bad port");
    assert_eq!(e.status(), Some(Status::BadParam));
    let pd = h.alloc_pd().unwrap();
    h.dealloc_pd(pd).unwrap();
    assert!(h
        .take_events()
        .iter()
        .all(|e| e.kind != EqeType::CommandDone.raw()));
}

/// `sq_psn` and `sq_una_psn` of a QP in the context window.
fn window_psns(h: &mut Hca, qpn: u32) -> (u32, u32) {
    let (st, w) = h.read_context(CtxTable::Qpc, qpn).unwrap();
    assert_eq!(st, CtxStatus::Ok.raw(), "QP {qpn} in the window");
    let at = |off: usize| u32::from_le_bytes(w[off..off + 4].try_into().unwrap());
    (
        at(offset_of!(QpContext, sq_psn)),
        at(offset_of!(QpContext, sq_una_psn)),
    )
}

/// The QP context window's `sq_una_psn` is the requester's oldest
/// unacknowledged PSN (ARCHITECTURE.md §4; roce-tests' stall diagnostics read
/// it): `sq_psn` once a SEND is acknowledged, the SEND's own PSN while node 1
/// receives it and every ACK it sends is lost (`--fault drop=1`).
#[test]
fn context_window_sq_una_psn() {
    let mut o = Options::nodes(2);
    o.faults.insert(1, "drop=1".into());
    let v = Vhca::spawn(o);
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let src = a.region(4096, Layout::Scattered, 0);
    // Acknowledged: a loopback pair on node 0.
    let (q1, q2) = (a.qp(QpType::Rc), a.qp(QpType::Rc));
    connect_loopback(&mut a.hca, q1, q2, &ConnOpts::default());
    let p1 = window_psns(&mut a.hca, q1.qpn).0;
    a.hca
        .post_recv(q2, &RecvWr::new(1, vec![src.mr.sge(&src.buf, 0, 64)]))
        .unwrap();
    a.hca
        .post_send(q1, &SendWr::send(2).sge(src.mr.sge(&src.buf, 64, 64)))
        .unwrap();
    assert_success(&a.cqes(2, Duration::from_secs(10)));
    let next = (p1 + 1) & 0xff_ffff;
    assert_eq!(
        window_psns(&mut a.hca, q1.qpn),
        (next, next),
        "acknowledged"
    );
    // Outstanding: node 1 takes the SEND; its ACKs never arrive.
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let pa = window_psns(&mut a.hca, qa.qpn).0;
    let next = (pa + 1) & 0xff_ffff;
    let dst = b.region(4096, Layout::Scattered, 0);
    b.hca
        .post_recv(qb, &RecvWr::new(3, vec![dst.mr.sge(&dst.buf, 0, 64)]))
        .unwrap();
    a.hca
        .post_send(qa, &SendWr::send(4).sge(src.mr.sge(&src.buf, 0, 64)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let sent = loop {
        let p = window_psns(&mut a.hca, qa.qpn);
        if p.0 == next {
            break p;
        }
        assert!(Instant::now() < deadline, "the SEND never left node 0");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(sent, (next, pa), "sent, not acknowledged");
    assert_success(&b.cqes(1, Duration::from_secs(10)));
    // Still unacknowledged after ACK timeouts (4.096 us * 2^14 each) and resends.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(window_psns(&mut a.hca, qa.qpn).1, pa, "still outstanding");
}

#[test]
fn context_window_and_ignored_writes() {
    let v = Vhca::spawn(Options::nodes(1));
    let mut n = Node::connect(&v, 0);
    let h = &mut n.hca;
    // EQ 0 is an EQ.
    let (st, w) = h.read_context(CtxTable::Eqc, 0).unwrap();
    assert_eq!(st, CtxStatus::Ok.raw(), "EQ 0 in the window");
    assert_eq!(u32::from_le_bytes(w[0..4].try_into().unwrap()), 0, "eqn");
    // A QP shows up with its number and state; a missing one does not.
    let qp = h.create_qp(&QpInit::rc(n.pd, n.cq)).unwrap();
    let (st, w) = h.read_context(CtxTable::Qpc, qp.qpn).unwrap();
    assert_eq!(st, CtxStatus::Ok.raw());
    assert_eq!(u32::from_le_bytes(w[0..4].try_into().unwrap()), qp.qpn);
    let (st, w) = h.read_context(CtxTable::Qpc, 0x00ab_cdef).unwrap();
    assert_eq!(st, CtxStatus::NoObject.raw());
    assert!(w.iter().all(|&b| b == 0), "no object: zeros");
    let (st, _) = h.read_context(CtxTable::None, 0).unwrap();
    assert_ne!(st, CtxStatus::Ok.raw());
    // Writes to the window, to read-only registers and to configuration while
    // enabled are ignored and counted.
    let before = h.read_reg(reg::IGNORED_WRITES).unwrap();
    let base = h.read_reg(reg::CMDQ_BASE_LO).unwrap();
    h.write_reg(reg::CTX_WINDOW, 0xdead_beef).unwrap();
    h.write_reg(reg::MAGIC, 0).unwrap();
    h.write_reg(reg::CMDQ_BASE_LO, 0x1000).unwrap();
    assert_eq!(h.read_reg(reg::IGNORED_WRITES).unwrap(), before + 3);
    assert_eq!(h.read_reg(reg::MAGIC).unwrap(), ident::MAGIC);
    assert_eq!(h.read_reg(reg::CMDQ_BASE_LO).unwrap(), base);
    h.nop().expect("still serving");
    // Unassigned offsets read 0.
    assert_eq!(h.read_reg(0x0ffc).unwrap(), 0);
    assert_eq!(h.query_qp(qp).unwrap().qp_type, QpType::Rc.raw());
}

/// Configures BAR0 by hand up to ENABLE with a DRIVER_ABI of `driver_abi`.
fn manual_enable(g: &mut Guest, driver_abi: u32, cmdq: u64, eq0: u64) -> u32 {
    g.bar0_write32(reg::DEV_CTRL, dev_ctrl::RESET).unwrap();
    wait(g, |s| {
        s & dev_status::READY != 0 && s & dev_status::ENABLED == 0
    });
    g.bar0_write32(reg::DRIVER_ABI, driver_abi).unwrap();
    g.bar0_write32(reg::CMDQ_BASE_LO, cmdq as u32).unwrap();
    g.bar0_write32(reg::CMDQ_BASE_HI, (cmdq >> 32) as u32)
        .unwrap();
    g.bar0_write32(reg::CMDQ_LOG2_SIZE, 4).unwrap();
    g.bar0_write32(reg::EQ0_BASE_LO, eq0 as u32).unwrap();
    g.bar0_write32(reg::EQ0_BASE_HI, (eq0 >> 32) as u32)
        .unwrap();
    g.bar0_write32(reg::EQ0_LOG2_SIZE, 6).unwrap();
    g.bar2_store32(u64::from(uar::EQ0_SLOT) * 8 + 4, 1).unwrap();
    g.bar0_write32(reg::DEV_CTRL, dev_ctrl::ENABLE).unwrap();
    wait(g, |s| s & (dev_status::ENABLED | dev_status::FATAL) != 0)
}

fn wait(g: &mut Guest, ok: impl Fn(u32) -> bool) -> u32 {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let s = g.bar0_read32(reg::DEV_STATUS).unwrap();
        if ok(s) {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "DEV_STATUS stuck at {s:#x}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn bad_configurations_are_fatal_until_reset() {
    let v = Vhca::spawn(Options::nodes(1));
    let mut g = Guest::connect(v.socket(0), GuestOptions::default()).expect("connect");
    let cmdq = g.alloc_pages(1, 1);
    let eq0 = g.alloc_pages(1, 1);
    let fatal = |g: &mut Guest| g.bar0_read32(reg::FATAL_SYNDROME).unwrap();

    // A different ABI major.
    let s = manual_enable(&mut g, ident::ABI_VERSION + (1 << 16), cmdq, eq0);
    assert_ne!(s & dev_status::FATAL, 0, "ENABLE with a foreign ABI major");
    assert_eq!(s & dev_status::ENABLED, 0);
    assert_eq!(fatal(&mut g), Fatal::AbiMismatch.raw());
    // A higher minor than the device's.
    let s = manual_enable(&mut g, ident::ABI_VERSION + 1, cmdq, eq0);
    assert_ne!(s & dev_status::FATAL, 0, "ENABLE with a newer minor");
    // A command ring outside guest memory, and one not 4 KiB aligned.
    let s = manual_enable(&mut g, ident::ABI_VERSION, 0x7_0000_0000, eq0);
    assert_ne!(s & dev_status::FATAL, 0, "command ring outside memory");
    assert_eq!(fatal(&mut g), Fatal::CmdqBadConfig.raw());
    let s = manual_enable(&mut g, ident::ABI_VERSION, cmdq + 64, eq0);
    assert_ne!(s & dev_status::FATAL, 0, "unaligned command ring");
    assert_eq!(fatal(&mut g), Fatal::CmdqBadConfig.raw());
    // EQ 0 outside guest memory.
    let s = manual_enable(&mut g, ident::ABI_VERSION, cmdq, 0x7_0000_0000);
    assert_ne!(s & dev_status::FATAL, 0, "EQ 0 outside memory");
    assert_eq!(fatal(&mut g), Fatal::Eq0BadConfig.raw());
    // A good configuration after RESET works (bring_up resets first).
    let s = manual_enable(&mut g, ident::ABI_VERSION, cmdq, eq0);
    assert_eq!(s & dev_status::FATAL, 0);
    assert_ne!(s & dev_status::ENABLED, 0);
    let mut h = Hca::bring_up(g).expect("bring-up after fatal states");
    h.nop().unwrap();
}

#[test]
fn slot_not_owned_stops_the_queue() {
    let v = Vhca::spawn(Options::nodes(1));
    let g = Guest::connect(v.socket(0), GuestOptions::default()).expect("connect");
    let mut h = Hca::bring_up(g).expect("bring-up");
    // A slot between CI and PI without OWNER: FATAL, CMDQ_NOT_OWNED.
    let mut slot = [0u8; 64];
    slot[0..2].copy_from_slice(&Opcode::Nop.raw().to_le_bytes());
    let r = h.post_raw_cmds(&[slot]);
    assert!(r.is_ok(), "nothing to wait for");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while h.fatal().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no FATAL for an unowned slot"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(h.fatal().unwrap(), Some(Fatal::CmdqNotOwned.raw()));
    assert!(matches!(
        h.nop(),
        Err(vhca_tests::CmdError::Fatal { .. }) | Err(vhca_tests::CmdError::Timeout { .. })
    ));
    // RESET and bring-up again.
    let g = h.into_guest();
    let mut h = Hca::bring_up(g).expect("bring-up after RESET");
    h.nop().unwrap();
}

#[test]
fn reset_drops_every_object_and_pci_reset_too() {
    let v = Vhca::spawn(Options::nodes(1));
    let mut n = Node::connect(&v, 0);
    let qp = n.qp(QpType::Rc);
    let cq = n.cq;
    // DEV_CTRL.RESET, then bring-up: nothing of before exists.
    let g = n.hca.into_guest();
    let mut h = Hca::bring_up(g).expect("bring-up after RESET");
    assert_eq!(h.query_qp(qp).unwrap_err().status(), Some(Status::NotFound));
    assert!(!h.context_exists(CtxTable::Cqc, cq.cqn).unwrap());
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(6, 0).unwrap();
    let qp = h.create_qp(&QpInit::rc(pd, cq)).unwrap();
    // vfio-user DEVICE_RESET (a guest reboot): the same, and DMA maps stay.
    let mut g = h.into_guest();
    g.pci_reset().unwrap();
    let s = g.bar0_read32(reg::DEV_STATUS).unwrap();
    assert_eq!(s & dev_status::ENABLED, 0, "not enabled after a PCI reset");
    // A PCI reset also disables MSI-X and bus mastering: enable them again.
    let cmd = g.cfg_u16(4).unwrap();
    g.cfg_write(4, &(cmd | 6).to_le_bytes()).unwrap();
    g.set_msix_control(true, false).unwrap();
    for vec in 0..g.msix_count() {
        g.wire(vec).unwrap();
    }
    let mut h = Hca::bring_up(g).expect("bring-up after DEVICE_RESET (RAM still mapped)");
    assert_eq!(h.query_qp(qp).unwrap_err().status(), Some(Status::NotFound));
    h.nop().unwrap();
}

/// The harness, not the device: a node whose UDP port another process took
/// between the choice and the bind (the race `free_udp_ports` leaves; once
/// seen in CI as `Address already in use`) is started again on new ports,
/// and its peers with it, instead of failing the test.
#[test]
fn a_taken_udp_port_gets_the_fabric_new_ports_not_a_failed_spawn() {
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let free = vhca_tests::process::free_udp_ports(1).unwrap()[0];
    let v = Vhca::spawn(Options {
        first_ports: vec![port, free],
        ..Options::nodes(2)
    });
    assert_ne!(v.node(0).udp_port, port);
    // Both nodes run on the new fabric file and reach each other.
    let mut a = Node::connect(&v, 0);
    let mut b = Node::connect(&v, 1);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let rb = b.region(4096, Layout::Contiguous, 0);
    b.hca
        .post_recv(qb, &RecvWr::new(1, vec![rb.mr.sge(&rb.buf, 0, 64)]))
        .unwrap();
    let sa = a.region(4096, Layout::Contiguous, 0);
    a.hca
        .post_send(qa, &SendWr::send(2).sges(vec![sa.mr.sge(&sa.buf, 0, 8)]))
        .unwrap();
    assert_success(&b.hca.wait_cqes(b.cq, 1, Duration::from_secs(10)));
    drop(taken);
}
