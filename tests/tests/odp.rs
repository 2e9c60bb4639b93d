//! On-demand paging between two `vhca` processes on UDP loopback (issue 29):
//! ODP MRs registered with no pages, the device's PAGE_FAULT EQEs on EQ 0,
//! and this test's "driver" answering each with MAP_ODP of the buffer's pages,
//! as vhca.ko does. RC WRITE, READ and SEND between ODP MRs arrive byte-exact;
//! an UNMAP_ODP in the middle of a stream leaves the old pages untouched;
//! ODP_FAULT_FAIL fails the waiting work; bad ODP commands are refused; with
//! `vhca --no-odp` nothing of it is offered.

use std::time::{Duration, Instant};

use vhca_tests::abi::cmd::{odp_cap, odp_transport, reg_mr_flags, Pbl, RegMrIn, Status};
use vhca_tests::abi::cqe::{page_fault_flags, Cqe, EqePageFault, EqeType};
use vhca_tests::abi::verbs::{QpType, WcOpcode, WcStatus};
use vhca_tests::fixture::{connect_pair, Node, ALL_ACCESS};
use vhca_tests::guest::Buf;
use vhca_tests::hca::Mr;
use vhca_tests::util::pattern;
use vhca_tests::{Layout, Options, RecvWr, SendWr, Vhca};

const T: Duration = Duration::from_secs(30);

/// A buffer of scattered pages behind an ODP MR (no page mapped yet).
struct OdpBuf {
    buf: Buf,
    mr: Mr,
}

fn odp_buf(n: &mut Node, len: usize, first_off: usize) -> OdpBuf {
    let buf = n
        .hca
        .guest_mut()
        .alloc_buf(len, Layout::Scattered, first_off);
    let mr = n
        .hca
        .reg_odp_mr(n.pd, buf.va, len as u64, ALL_ACCESS)
        .expect("REG_MR with ODP");
    OdpBuf { buf, mr }
}

/// The test's driver: answers every PAGE_FAULT EQE of `n` with MAP_ODP of
/// the pages of the buffer behind its key (`pages_of` picks the physical
/// pages: the buffer's own, or others); returns the faults seen.
fn serve(n: &mut Node, bufs: &[(&OdpBuf, &[u64])]) -> Vec<EqePageFault> {
    let mut seen = Vec::new();
    for e in n.hca.take_events() {
        if e.kind != EqeType::PageFault.raw() {
            continue;
        }
        let f = EqePageFault::from_bytes(&e.to_bytes());
        let (b, pages) = bufs
            .iter()
            .find(|(b, _)| b.mr.lkey == f.key)
            .unwrap_or_else(|| panic!("fault for an unknown key: {f:?}"));
        let vpn = u64::from(f.vpn_lo) | u64::from(f.vpn_hi) << 32;
        let first = (vpn << 12) - (b.buf.va & !0xfff);
        let i = (first >> 12) as usize;
        let n_pages = usize::from(f.npages).min(pages.len() - i);
        n.hca
            .map_odp(f.key, vpn << 12, &pages[i..i + n_pages])
            .expect("MAP_ODP");
        seen.push(f);
    }
    seen
}

/// Polls node `n`'s CQ for `want` CQEs while both drivers serve faults.
fn run(
    a: &mut Node,
    abufs: &[(&OdpBuf, &[u64])],
    b: &mut Node,
    bbufs: &[(&OdpBuf, &[u64])],
    on_a: bool,
    want: usize,
) -> (Vec<Cqe>, Vec<EqePageFault>, Vec<EqePageFault>) {
    let deadline = Instant::now() + T;
    let (mut got, mut fa, mut fb) = (Vec::new(), Vec::new(), Vec::new());
    while got.len() < want {
        assert!(
            Instant::now() < deadline,
            "CQEs {got:?}, faults {fa:?} {fb:?}"
        );
        fa.extend(serve(a, abufs));
        fb.extend(serve(b, bbufs));
        let n = if on_a { &mut *a } else { &mut *b };
        let cq = n.cq;
        let c = n.hca.poll_cq(cq, want - got.len());
        if c.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
        got.extend(c);
    }
    (got, fa, fb)
}

fn ok(c: &Cqe, id: u64, op: WcOpcode) {
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (id, WcStatus::Success.raw(), op.raw()),
        "{c:?}"
    );
}

fn two() -> (Vhca, Node, Node) {
    let v = Vhca::spawn(Options::nodes(2));
    let a = Node::connect(&v, 0);
    let b = Node::connect(&v, 1);
    (v, a, b)
}

#[test]
fn odp_rc_write_read_and_send_between_odp_mrs_arrive_byte_exact() {
    let (_v, mut a, mut b) = two();
    let d = b.hca.query_device().unwrap();
    let rc = odp_transport::SEND
        | odp_transport::RECV
        | odp_transport::WRITE
        | odp_transport::READ
        | odp_transport::ATOMIC
        | odp_transport::SRQ_RECV;
    let (ud, xrc) = (
        odp_transport::SEND,
        odp_transport::SEND | odp_transport::SRQ_RECV,
    );
    assert_eq!(
        d.odp_caps,
        odp_cap::SUPPORT
            | odp_cap::IMPLICIT
            | rc << odp_cap::RC_SHIFT
            | ud << odp_cap::UD_SHIFT
            | xrc << odp_cap::XRC_SHIFT
    );
    let len = 5 * 4096 - 0x300;
    let src = odp_buf(&mut a, len, 0x100);
    let back = odp_buf(&mut a, len, 0x40);
    let dst = odp_buf(&mut b, len, 0x200);
    let (qa, qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let data = pattern(3, len);
    a.hca.guest().buf_write(&src.buf, 0, &data);
    let (sp, bp, dp) = (
        src.buf.pages.clone(),
        back.buf.pages.clone(),
        dst.buf.pages.clone(),
    );
    let abufs: [(&OdpBuf, &[u64]); 2] = [(&src, &sp), (&back, &bp)];
    let bbufs: [(&OdpBuf, &[u64]); 1] = [(&dst, &dp)];

    // WRITE: A's gather faults (requester), B's target faults (responder).
    a.hca
        .post_send(
            qa,
            &SendWr::write(1, dst.buf.va, dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len)),
        )
        .unwrap();
    let (c, fa, fb) = run(&mut a, &abufs, &mut b, &bbufs, true, 1);
    ok(&c[0], 1, WcOpcode::RdmaWrite);
    assert_eq!(b.hca.guest().buf_read(&dst.buf, 0, len), data);
    assert!(!fa.is_empty() && fa.iter().all(|f| f.flags == 0), "{fa:?}");
    assert!(
        !fb.is_empty()
            && fb
                .iter()
                .all(|f| f.flags == page_fault_flags::WRITE | page_fault_flags::RESPONDER),
        "{fb:?}"
    );

    // READ it back into another ODP buffer of A: the response scatter faults.
    a.hca
        .post_send(
            qa,
            &SendWr::read(2, dst.buf.va, dst.mr.rkey).sge(back.mr.sge(&back.buf, 0, len)),
        )
        .unwrap();
    let (c, fa, _) = run(&mut a, &abufs, &mut b, &bbufs, true, 1);
    ok(&c[0], 2, WcOpcode::RdmaRead);
    assert_eq!(a.hca.guest().buf_read(&back.buf, 0, len), data);
    assert!(
        fa.iter().any(|f| f.flags == page_fault_flags::WRITE),
        "{fa:?}"
    );

    // SEND from the read-back buffer into a fresh ODP receive buffer of B.
    let rbuf = odp_buf(&mut b, len, 0);
    let rp = rbuf.buf.pages.clone();
    b.hca
        .post_recv(qb, &RecvWr::new(3, vec![rbuf.mr.sge(&rbuf.buf, 0, len)]))
        .unwrap();
    a.hca
        .post_send(qa, &SendWr::send(4).sge(back.mr.sge(&back.buf, 0, len)))
        .unwrap();
    let bbufs2: [(&OdpBuf, &[u64]); 2] = [(&dst, &dp), (&rbuf, &rp)];
    let (c, _, _) = run(&mut a, &abufs, &mut b, &bbufs2, false, 1);
    ok(&c[0], 3, WcOpcode::Recv);
    assert_eq!(b.hca.guest().buf_read(&rbuf.buf, 0, len), data);
    let c = a.cqes(1, T);
    ok(&c[0], 4, WcOpcode::Send);
}

#[test]
fn odp_unmap_in_the_middle_of_a_write_stream_leaves_the_old_pages_alone() {
    let (_v, mut a, mut b) = two();
    let len = 3 * 4096;
    let src = a.region(len, Layout::Scattered, 0);
    let dst = odp_buf(&mut b, len, 0);
    let (qa, _qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    let old = dst.buf.pages.clone();
    // Pages the driver maps after the UNMAP (the guest moved the memory).
    let new = b.hca.guest_mut().alloc_scattered(old.len());
    let write = |a: &mut Node, id: u64| {
        a.hca
            .post_send(
                qa,
                &SendWr::write(id, dst.buf.va, dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, len)),
            )
            .unwrap();
    };
    let first = pattern(1, len);
    a.write(&src, 0, &first);
    for id in 0..4 {
        write(&mut a, id);
    }
    let (c, _, fb) = run(&mut a, &[], &mut b, &[(&dst, &old)], true, 4);
    assert!(
        c.iter().all(|c| c.status == WcStatus::Success.raw()),
        "{c:?}"
    );
    assert!(!fb.is_empty());
    assert_eq!(b.hca.guest().buf_read(&dst.buf, 0, len), first);
    // UNMAP, then the old pages are the guest's again: a sentinel in them.
    b.hca
        .unmap_odp(dst.mr.lkey, dst.buf.va, len as u64)
        .expect("UNMAP_ODP");
    let sentinel = vec![0xee; 4096];
    for p in &old {
        b.hca.guest().write(*p, &sentinel);
    }
    let second = pattern(2, len);
    a.write(&src, 0, &second);
    for id in 10..14 {
        write(&mut a, id);
    }
    let (c, _, fb) = run(&mut a, &[], &mut b, &[(&dst, &new)], true, 4);
    assert!(
        c.iter().all(|c| c.status == WcStatus::Success.raw()),
        "{c:?}"
    );
    assert!(!fb.is_empty(), "the stream faulted again after the UNMAP");
    for p in &old {
        let mut got = vec![0u8; 4096];
        b.hca.guest().read(*p, &mut got);
        assert_eq!(got, sentinel, "a write reached an unmapped page");
    }
    let landed: Vec<u8> = new
        .iter()
        .flat_map(|p| {
            let mut v = vec![0u8; 4096];
            b.hca.guest().read(*p, &mut v);
            v
        })
        .collect();
    assert_eq!(landed, second);
}

#[test]
fn odp_fault_fail_completes_the_write_with_remote_access_error() {
    let (_v, mut a, mut b) = two();
    let src = a.region(4096, Layout::Scattered, 0);
    let dst = odp_buf(&mut b, 4096, 0);
    let (qa, _qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    a.hca
        .post_send(
            qa,
            &SendWr::write(1, dst.buf.va, dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, 64)),
        )
        .unwrap();
    let e = b
        .hca
        .wait_async_event(T, |e| e.kind == EqeType::PageFault.raw())
        .expect("PAGE_FAULT");
    let f = EqePageFault::from_bytes(&e.to_bytes());
    assert_eq!((f.key, f.npages), (dst.mr.lkey, 1));
    b.hca
        .odp_fault_fail(dst.mr.lkey, dst.buf.va, 64)
        .expect("ODP_FAULT_FAIL");
    let c = a.cqes(1, T);
    assert_eq!(c[0].status, WcStatus::RemAccessErr.raw(), "{c:?}");
}

#[test]
fn odp_commands_refuse_bad_keys_ranges_and_flag_mixes() {
    let (_v, mut a, _b) = two();
    let plain = a.region(4096, Layout::Scattered, 0);
    let o = odp_buf(&mut a, 2 * 4096, 0);
    let bad = |r: Result<(), vhca_tests::hca::CmdError>| r.unwrap_err().status();
    let page = o.buf.pages[0];
    // Not an ODP MR, a va outside it, unaligned, an empty range.
    assert_eq!(
        bad(a.hca.map_odp(plain.mr.lkey, plain.buf.va, &[page])),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(a.hca.map_odp(o.mr.lkey, o.buf.va + 0x4000, &[page])),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(a.hca.map_odp(o.mr.lkey, o.buf.va + 8, &[page])),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(a.hca.unmap_odp(o.mr.lkey, o.buf.va, 0)),
        Some(Status::BadParam)
    );
    assert_eq!(
        bad(a.hca.odp_fault_fail(0x1234_5601, o.buf.va, 8)),
        Some(Status::BadParam)
    );
    a.hca
        .map_odp(o.mr.lkey, o.buf.va, &o.buf.pages)
        .expect("MAP_ODP");
    a.hca
        .unmap_odp(o.mr.lkey, o.buf.va, 8192)
        .expect("UNMAP_ODP");
    // ODP with FAST or DMA, or with a page list.
    for flags in [
        reg_mr_flags::ODP | reg_mr_flags::FAST,
        reg_mr_flags::ODP | reg_mr_flags::DMA,
    ] {
        let i = RegMrIn {
            pdn: a.pd.0,
            access: ALL_ACCESS,
            iova: 0x1000,
            length: 4096,
            flags,
            rsvd: 0,
            pbl: Pbl::default(),
        };
        assert_eq!(
            a.hca.reg_mr_raw(&i, Vec::new()).unwrap_err().status(),
            Some(Status::BadParam)
        );
    }
    let i = RegMrIn {
        pdn: a.pd.0,
        access: ALL_ACCESS,
        iova: 0x1000,
        length: 4096,
        flags: reg_mr_flags::ODP,
        rsvd: 0,
        pbl: Pbl {
            addr: page,
            npages: 1,
            page_shift: 12,
            levels: 0,
            rsvd: 0,
        },
    };
    assert_eq!(
        a.hca.reg_mr_raw(&i, Vec::new()).unwrap_err().status(),
        Some(Status::BadParam)
    );
    // An implicit MR takes any page of the address space.
    let imp = a
        .hca
        .reg_odp_mr(a.pd, 0, u64::MAX, ALL_ACCESS)
        .expect("implicit");
    a.hca
        .map_odp(imp.lkey, 0x7fff_0000_0000, &[page])
        .expect("MAP_ODP anywhere");
}

#[test]
fn odp_is_not_offered_with_no_odp() {
    let mut o = Options::nodes(1);
    o.extra_args.push("--no-odp".into());
    let v = Vhca::spawn(o);
    let mut a = Node::connect(&v, 0);
    assert_eq!(a.hca.query_device().unwrap().odp_caps, 0);
    let e = a
        .hca
        .reg_odp_mr(a.pd, 0x1000, 4096, ALL_ACCESS)
        .unwrap_err();
    assert_eq!(e.status(), Some(Status::NotSupported));
    let e = a.hca.unmap_odp(0x101, 0x1000, 8).unwrap_err();
    assert_eq!(e.status(), Some(Status::NotSupported));
}
