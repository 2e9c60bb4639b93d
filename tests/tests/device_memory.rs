//! Device memory end to end (issue 29 item 2; `ibv_alloc_dm`): `--dm-size`
//! bytes of BAR4 after the WAKE page, mapped into the guest; MRs registered
//! over them (REG_MR `VHCA_REG_MR_F_DM`, zero-based) are the target of RDMA
//! WRITE, READ and atomics from a peer and an SGE of the local QP, byte-exact,
//! and never reach outside their range or the DM bytes.

use std::time::Duration;

use vhca_tests::abi::bar0::reg;
use vhca_tests::abi::cmd::{reg_mr_flags, Pbl, RegMrIn, Status};
use vhca_tests::abi::ident::bar;
use vhca_tests::abi::verbs::{QpType, WcOpcode, WcStatus};
use vhca_tests::fixture::{connect_pair, wait_n, Node, ALL_ACCESS};
use vhca_tests::hca::{CmdError, Mr};
use vhca_tests::util::pattern;
use vhca_tests::{Layout, Options, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);
/// The default `--dm-size`.
const DM: u64 = 256 << 10;

fn nodes(extra: &[&str]) -> (Vhca, Node, Node) {
    let mut o = Options::nodes(2);
    o.extra_args = extra.iter().map(|s| s.to_string()).collect();
    let v = Vhca::spawn(o);
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

/// REG_MR with DM: `length` bytes from DM byte `offset`, zero-based.
fn reg_dm(n: &mut Node, offset: u64, length: u64, access: u32) -> Result<Mr, CmdError> {
    let input = RegMrIn {
        pdn: n.pd.0,
        access,
        iova: 0,
        length,
        flags: reg_mr_flags::DM,
        rsvd: 0,
        pbl: Pbl {
            addr: offset,
            ..Pbl::default()
        },
    };
    n.hca.reg_mr_raw(&input, Vec::new())
}

/// Bytes of device memory at DM byte `offset`, through BAR4 as the guest
/// sees it.
fn dm_read(n: &mut Node, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    let at = u64::from(bar::DM_OFFSET) + offset;
    let r = n
        .hca
        .guest_mut()
        .client()
        .region_read(bar::WAKE_BAR_INDEX, at, &mut b);
    r.expect("BAR4 read");
    b
}

fn dm_write(n: &mut Node, offset: u64, data: &[u8]) {
    let at = u64::from(bar::DM_OFFSET) + offset;
    let r = n
        .hca
        .guest_mut()
        .client()
        .region_write(bar::WAKE_BAR_INDEX, at, data);
    r.expect("BAR4 write");
}

fn one(n: &mut Node) -> (u64, u8, u8) {
    let c = wait_n(&mut n.hca, n.cq, 1, T)[0];
    (c.wr_id, c.status, c.opcode)
}

/// The device's DM as the guest finds it: CAP_DM_SIZE, BAR4 big enough for
/// the WAKE page and the DM bytes, and the DM bytes a sparse mmap area (so
/// the guest maps them as memory).
#[test]
fn dm_size_is_in_cap_dm_size_and_bar4_maps_it() {
    let (_v, mut a, _b) = nodes(&[]);
    assert_eq!(u64::from(a.hca.read_reg(reg::CAP_DM_SIZE).unwrap()), DM);
    let g = a.hca.guest();
    let (size, _) = g.region_info(bar::WAKE_BAR_INDEX).expect("BAR4");
    assert_eq!(size, (u64::from(bar::DM_OFFSET) + DM).next_power_of_two());
    let off = u64::from(bar::DM_OFFSET);
    assert!(
        g.sparse_areas(bar::WAKE_BAR_INDEX).contains(&(off, DM)),
        "{:?}",
        g.sparse_areas(bar::WAKE_BAR_INDEX)
    );
}

/// A peer's RDMA WRITE into a DM MR lands in the DM bytes at the MR's
/// offset, byte-exact; its RDMA READ and atomics read and update them; a DM
/// MR as the local SGE of an RDMA WRITE sends the DM bytes.
#[test]
fn rdma_write_read_and_atomics_on_a_dm_mr_are_byte_exact() {
    let (_v, mut a, mut b) = nodes(&[]);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let src = a.region(8192, Layout::Scattered, 0);
    let dst = a.region(8192, Layout::Scattered, 0);
    // B's DM MR: 8 KiB from DM byte 0x3000.
    let dm = reg_dm(&mut b, 0x3000, 8192, ALL_ACCESS).expect("REG_MR DM");
    assert_eq!(dm.iova, 0);

    // WRITE 5000 bytes at va 100: DM bytes 0x3000 + 100.. hold them.
    let data = pattern(3, 5000);
    a.write(&src, 0, &data);
    let wr = SendWr::write(1, 100, dm.rkey).sge(src.mr.sge(&src.buf, 0, 5000));
    a.hca.post_send(qa, &wr).unwrap();
    assert_eq!(
        one(&mut a),
        (1, WcStatus::Success.raw(), WcOpcode::RdmaWrite.raw())
    );
    assert_eq!(dm_read(&mut b, 0x3000 + 100, 5000), data);
    assert_eq!(
        dm_read(&mut b, 0x3000 + 96, 4),
        [0; 4],
        "nothing before va 100"
    );

    // What B's process stores into its DM, A READs back.
    let mine = pattern(9, 6000);
    dm_write(&mut b, 0x3000 + 1000, &mine);
    let wr = SendWr::read(2, 1000, dm.rkey).sge(dst.mr.sge(&dst.buf, 0, 6000));
    a.hca.post_send(qa, &wr).unwrap();
    assert_eq!(
        one(&mut a),
        (2, WcStatus::Success.raw(), WcOpcode::RdmaRead.raw())
    );
    assert_eq!(a.read(&dst, 0, 6000), mine);

    // FETCH_ADD and CMP_SWAP on the word at va 8192 - 8.
    dm_write(&mut b, 0x3000 + 8184, &40u64.to_le_bytes());
    let wr = SendWr::fetch_add(3, 8184, dm.rkey, 2).sge(dst.mr.sge(&dst.buf, 0, 8));
    a.hca.post_send(qa, &wr).unwrap();
    assert_eq!(
        one(&mut a),
        (3, WcStatus::Success.raw(), WcOpcode::FetchAdd.raw())
    );
    assert_eq!(a.read(&dst, 0, 8), 40u64.to_le_bytes());
    let wr = SendWr::cmp_swap(4, 8184, dm.rkey, 42, 7).sge(dst.mr.sge(&dst.buf, 8, 8));
    a.hca.post_send(qa, &wr).unwrap();
    assert_eq!(
        one(&mut a),
        (4, WcStatus::Success.raw(), WcOpcode::CompSwap.raw())
    );
    assert_eq!(a.read(&dst, 8, 8), 42u64.to_le_bytes());
    assert_eq!(dm_read(&mut b, 0x3000 + 8184, 8), 7u64.to_le_bytes());

    // A DM MR of A's as the SGE: its bytes go out (DM as a local buffer).
    let local = reg_dm(&mut a, 0, 4096, ALL_ACCESS).expect("A's REG_MR DM");
    let out = pattern(5, 3000);
    dm_write(&mut a, 0, &out);
    let back = b.region(4096, Layout::Contiguous, 0);
    let sge = vhca_tests::abi::wqe::Sge {
        addr: 0,
        length: 3000,
        lkey: local.lkey,
    };
    let wr = SendWr::write(5, back.buf.va(0), back.mr.rkey).sge(sge);
    a.hca.post_send(qa, &wr).unwrap();
    assert_eq!(
        one(&mut a),
        (5, WcStatus::Success.raw(), WcOpcode::RdmaWrite.raw())
    );
    assert_eq!(b.read(&back, 0, 3000), out);
    let _ = qb;
}

/// Bounds: a WRITE one byte past the DM MR's end is NAKed (Remote Access
/// Error) and writes nothing past it; REG_MR over a range that leaves the
/// DM bytes (or wraps), or with a page list, is BAD_PARAM, as is DM with
/// another kind flag.
#[test]
fn dm_mr_bounds_are_refused() {
    let (_v, mut a, mut b) = nodes(&[]);
    let (qa, _qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let src = a.region(4096, Layout::Contiguous, 0);
    let dm = reg_dm(&mut b, 0x1000, 256, ALL_ACCESS).expect("REG_MR DM");
    let wr = SendWr::write(1, 200, dm.rkey).sge(src.mr.sge(&src.buf, 0, 57));
    a.write(&src, 0, &[0xee; 64]);
    a.hca.post_send(qa, &wr).unwrap();
    let (_, status, _) = one(&mut a);
    assert_eq!(status, WcStatus::RemAccessErr.raw());
    assert_eq!(
        dm_read(&mut b, 0x1000 + 200, 64),
        [0; 64],
        "nothing written"
    );

    let bad = |r: Result<Mr, CmdError>| r.map(|_| ()).unwrap_err().status();
    assert_eq!(
        bad(reg_dm(&mut b, DM - 4096, 4097, 0)),
        Some(Status::BadParam)
    );
    assert_eq!(bad(reg_dm(&mut b, DM, 1, 0)), Some(Status::BadParam));
    assert_eq!(bad(reg_dm(&mut b, u64::MAX, 2, 0)), Some(Status::BadParam));
    let mut input = RegMrIn {
        pdn: b.pd.0,
        access: 0,
        iova: 0,
        length: 64,
        flags: reg_mr_flags::DM,
        rsvd: 0,
        pbl: Pbl {
            npages: 1,
            ..Pbl::default()
        },
    };
    let raw = |b: &mut Node, i: &RegMrIn| b.hca.reg_mr_raw(i, Vec::new());
    assert_eq!(
        bad(raw(&mut b, &input)),
        Some(Status::BadParam),
        "a page list"
    );
    input.pbl = Pbl::default();
    input.flags = reg_mr_flags::DM | reg_mr_flags::DMA;
    assert_eq!(bad(raw(&mut b, &input)), Some(Status::BadParam), "DM | DMA");
    // The whole DM is one valid MR.
    reg_dm(&mut b, 0, DM, ALL_ACCESS).expect("all of DM");
}

/// `--dm-size 0`: no DM bytes (CAP_DM_SIZE 0, BAR4 only the WAKE page), and
/// every REG_MR with DM is BAD_PARAM.
#[test]
fn dm_size_0_refuses_dm() {
    let (_v, mut a, _b) = nodes(&["--dm-size", "0"]);
    assert_eq!(a.hca.read_reg(reg::CAP_DM_SIZE).unwrap(), 0);
    let (size, _) = a
        .hca
        .guest()
        .region_info(bar::WAKE_BAR_INDEX)
        .expect("BAR4");
    assert_eq!(size, u64::from(bar::WAKE_BAR_SIZE));
    let r = reg_dm(&mut a, 0, 64, ALL_ACCESS);
    assert_eq!(r.map(|_| ()).unwrap_err().status(), Some(Status::BadParam));
}
