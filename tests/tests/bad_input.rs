//! (c) Bad guest input (ARCHITECTURE.md §9): 100 000 random command slots and 100 000
//! random WQEs (random bytes and lengths, addresses outside guest memory,
//! producer indices past the ring's end). Every command gets an error status,
//! every bad WQE an error completion or a QP error, the process never dies, and
//! afterwards a clean QP moves data. Then guest memory unmapped under a running
//! transfer: an error completion, the process alive.
//!
//! Seeds are printed; `VHCA_TEST_SEED` replays one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use vhca_tests::abi::bar0::dev_cap;
use vhca_tests::abi::cmd::{cmd_owner, commands, Opcode, Status};
use vhca_tests::abi::counters::CounterSet;
use vhca_tests::abi::cqe::Cqe;
use vhca_tests::abi::verbs::{send_flags, QpState, QpType, WcStatus, WrOpcode};
use vhca_tests::abi::wqe::{RaddrSeg, SendCtrl, Sge};
use vhca_tests::fixture::{
    assert_success, clean_transfer, connect_loopback, connect_pair, wait_n, Node, Region,
    ALL_ACCESS,
};
use vhca_tests::guest::PAGE;
use vhca_tests::util::{assert_bytes, pattern, Rng};
use vhca_tests::verbs::{encode_recv, encode_send, wc_status};
use vhca_tests::{
    Build, ConnOpts, CqH, GuestOptions, Hca, HcaConfig, Layout, Mr, Options, PblKind, QpH, QpInit,
    RecvWr, SendWr, Vhca,
};

const N_CMDS: usize = 100_000;
const N_SQ_WQES: usize = 90_000;
const N_RQ_WQES: usize = 5_000;
const N_SRQ_WQES: usize = 5_000;

/// A guest address outside guest RAM `[base, base + size)`: random, or an edge
/// (just below, straddling the end, the top of the address space).
fn outside(rng: &mut Rng, base: u64, size: u64) -> u64 {
    match rng.below(6) {
        0 => base + size - 16,
        1 => base.wrapping_sub(PAGE),
        2 => u64::MAX - 7,
        3 => rng.below(base),
        _ => loop {
            let a = rng.next_u64();
            if a < base || a >= base + size {
                return a;
            }
        },
    }
}

#[test]
fn random_command_slots_all_fail_and_the_device_survives() {
    let mut v = Vhca::spawn(Options::nodes(1).build(Build::Optimized));
    let g = vhca_tests::Guest::connect(v.socket(0), GuestOptions::default()).expect("connect");
    let (base, size) = (g.ram_base(), g.ram_size());
    let cfg = HcaConfig {
        cmdq_log2: 8,
        ..HcaConfig::default()
    };
    let mut h = Hca::bring_up_with(g, cfg).expect("bring-up");
    let mut rng = Rng::from_env("command fuzz");
    // Opcodes that succeed whatever their parameters are left out: NOP,
    // QUERY_DEVICE, ALLOC_PD, ALLOC_XRCD and ALLOC_RDD take no input.
    let specs: Vec<_> = commands()
        .into_iter()
        .filter(|c| {
            !matches!(
                c.opcode,
                Opcode::Nop
                    | Opcode::QueryDevice
                    | Opcode::AllocPd
                    | Opcode::AllocXrcd
                    | Opcode::AllocRdd
            )
        })
        .collect();
    let size_of =
        |e: Option<vhca_tests::abi::layout::StructEntry>| e.map_or(0, |e| (e.layout)().size);
    let batch = h.cmdq_slots() as usize;
    let started = Instant::now();
    let mut statuses: HashMap<u8, usize> = HashMap::new();
    let mut done = 0;
    while done < N_CMDS {
        let n = batch.min(N_CMDS - done);
        let mut slots = Vec::with_capacity(n);
        let mut unknown = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = [0u8; 64];
            rng.fill(&mut s);
            let bad_opcode = rng.below(3) == 0;
            let opcode = if bad_opcode {
                loop {
                    let o = rng.next_u32() as u16;
                    if Opcode::from_raw(o).is_none() {
                        break o;
                    }
                }
            } else {
                let spec = rng.pick(&specs);
                let (ins, outs) = (size_of(spec.input), size_of(spec.output));
                // Lengths: the struct's, a random one, or a page.
                let len = |rng: &mut Rng, sz: usize| match rng.below(4) {
                    0 => rng.next_u32() as u16,
                    1 => 4096,
                    _ => sz as u16,
                };
                let in_len = len(&mut rng, ins);
                let out_len = len(&mut rng, outs);
                s[12..14].copy_from_slice(&in_len.to_le_bytes());
                s[14..16].copy_from_slice(&out_len.to_le_bytes());
                s[16..24].copy_from_slice(&outside(&mut rng, base, size).to_le_bytes());
                s[24..32].copy_from_slice(&outside(&mut rng, base, size).to_le_bytes());
                spec.opcode.raw()
            };
            s[0..2].copy_from_slice(&opcode.to_le_bytes());
            s[6] = cmd_owner::DEVICE;
            slots.push(s);
            unknown.push(bad_opcode);
        }
        let out = h.post_raw_cmds(&slots).unwrap_or_else(|e| {
            panic!(
                "after {done} random commands: {e}; stderr:\n{}",
                v.stderr_tail(0, 4000)
            )
        });
        for (k, o) in out.iter().enumerate() {
            let op = u16::from_le_bytes([o[0], o[1]]);
            let status = o[5];
            *statuses.entry(status).or_default() += 1;
            assert_eq!(o[6] & cmd_owner::DEVICE, 0, "owner cleared");
            assert!(
                Status::from_raw(status).is_some(),
                "unknown status {status} for {op:#x}"
            );
            if unknown[k] {
                assert_eq!(
                    status,
                    Status::BadOpcode.raw(),
                    "unknown opcode {op:#x}: {o:02x?}"
                );
            } else {
                assert_ne!(
                    status,
                    Status::Ok.raw(),
                    "{:?} with random parameters and mailboxes outside memory succeeded: {:02x?}",
                    Opcode::from_raw(op),
                    &slots[k]
                );
            }
        }
        done += n;
        if done % 20_000 < batch {
            v.assert_alive(0);
        }
    }
    eprintln!(
        "{N_CMDS} random commands in {:.1} s; statuses {statuses:?}",
        started.elapsed().as_secs_f64()
    );
    v.assert_alive(0);
    assert_eq!(h.fatal().unwrap(), None, "the queue never stopped");
    h.nop().expect("NOP after the fuzzing");
    h.query_device().expect("QUERY_DEVICE after the fuzzing");
    let mut n = Node::from_hca(h);
    clean_transfer(&mut n);
    v.assert_alive(0);
}

/// What the reference decoder of a WQE says: whether it could complete with
/// success (a zero-length RDMA WRITE or READ needs no key checked).
fn may_succeed(wqe: &[u8], max_sge: u32) -> bool {
    let c = SendCtrl::from_prefix(wqe).expect("ctrl");
    let known =
        send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED | send_flags::INLINE;
    if c.flags & !known != 0 {
        return false;
    }
    if c.opcode != WrOpcode::RdmaWrite.raw() && c.opcode != WrOpcode::RdmaRead.raw() {
        return false;
    }
    let at = SendCtrl::SIZE + RaddrSeg::SIZE;
    if c.flags & send_flags::INLINE != 0 {
        return c.len == 0;
    }
    if u32::from(c.len) > max_sge || at + usize::from(c.len) * Sge::SIZE > wqe.len() {
        return false;
    }
    (0..usize::from(c.len))
        .all(|i| Sge::from_prefix(&wqe[at + i * Sge::SIZE..]).is_some_and(|s| s.length == 0))
}

/// The fuzzed QP, its loopback peer, their CQs.
struct Victim {
    qp: QpH,
    peer: QpH,
    cq: CqH,
    peer_cq: CqH,
    opts: ConnOpts,
}

impl Victim {
    fn reconnect(&self, h: &mut Hca) {
        self.reconnect_with(h, &self.opts);
    }

    fn reconnect_with(&self, h: &mut Hca, o: &ConnOpts) {
        h.poll_cq(self.cq, 4096);
        h.poll_cq(self.peer_cq, 4096);
        for q in [self.qp, self.peer] {
            h.set_qp_state(q, QpState::Reset)
                .unwrap_or_else(|e| panic!("QP {} to Reset: {e}", q.qpn));
        }
        connect_loopback(h, self.qp, self.peer, o);
    }
}

/// Random send WQE bytes of one of several kinds; `good` is a real MR.
fn random_send_wqe(
    rng: &mut Rng,
    stride: usize,
    good: &Region,
    dma: Option<&Mr>,
    base: u64,
    size: u64,
) -> Vec<u8> {
    let ops = [0u8, 1, 2, 3, 4, 5, 6, 9];
    match rng.below(10) {
        // Random bytes, random length.
        0..=3 => {
            let n = rng.range(8, stride as u64) as usize;
            rng.bytes(n)
        }
        // Plausible headers, SGEs outside the MR or outside guest memory.
        4..=6 => {
            let op = WrOpcode::from_raw(*rng.pick(&ops)).unwrap();
            let nsge = rng.range(1, 4) as usize;
            let sges = (0..nsge)
                .map(|_| {
                    let len = rng.range(1, 1 << 20) as u32;
                    match (rng.below(3), dma) {
                        (0, Some(d)) => Sge {
                            addr: outside(rng, base, size),
                            length: len,
                            lkey: d.lkey,
                        },
                        (1, _) => Sge {
                            addr: rng.next_u64(),
                            length: len,
                            lkey: rng.next_u32(),
                        },
                        _ => Sge {
                            // Past the end of the MR (or before it).
                            addr: if rng.chance(0.5) {
                                good.mr.iova + good.mr.length - u64::from(len) / 2
                            } else {
                                good.mr.iova.wrapping_sub(u64::from(len))
                            },
                            length: len,
                            lkey: good.mr.lkey,
                        },
                    }
                })
                .collect();
            let mut w = SendWr::new(op, rng.next_u64())
                .sges(sges)
                .flags(send_flags::SIGNALED);
            w.remote = Some((rng.next_u64(), rng.next_u32()));
            w.atomic = Some((rng.next_u64(), rng.next_u64()));
            encode_send(&w, QpType::Rc).expect("encodes")
        }
        // Inline data longer than allowed, or a length past the stride.
        7 => {
            let w = SendWr::send(rng.next_u64()).inline(&rng.bytes(16));
            let mut b = encode_send(&w, QpType::Rc).expect("encodes");
            let len = rng.range(stride as u64, u64::from(u16::MAX)) as u16;
            b[12..14].copy_from_slice(&len.to_le_bytes());
            b
        }
        // Well-formed local side, wrong R_Key (or a SEND the peer has no
        // receive for): a remote error.
        _ => {
            let op = WrOpcode::from_raw(*rng.pick(&[0u8, 1, 2, 3, 4, 5, 6])).unwrap();
            let len = if matches!(op, WrOpcode::AtomicCmpSwap | WrOpcode::AtomicFetchAdd) {
                8
            } else {
                rng.range(1, 4096) as usize
            };
            let mut rkey = rng.next_u32();
            if rkey == good.mr.rkey {
                rkey ^= 0x100;
            }
            let mut w = SendWr::new(op, rng.next_u64()).sge(good.mr.sge(&good.buf, 0, len));
            w.remote = Some((good.buf.va(0), rkey));
            w.atomic = Some((1, 2));
            encode_send(&w, QpType::Rc).expect("encodes")
        }
    }
}

#[test]
fn random_wqes_complete_with_errors_and_the_device_survives() {
    let mut v = Vhca::spawn(Options::nodes(1).build(Build::Optimized));
    let mut n = Node::connect(&v, 0);
    let (base, size) = (n.hca.guest().ram_base(), n.hca.guest().ram_size());
    let mut rng = Rng::from_env("WQE fuzz");
    let h = &mut n.hca;
    let cq = h.create_cq(12, 0).unwrap();
    let peer_cq = h.create_cq(12, 0).unwrap();
    let init = QpInit::rc(n.pd, cq)
        .wr(256, 64)
        .sge(4, 4)
        .inline(64)
        .sig_all();
    let qp = h.create_qp(&init).unwrap();
    let peer = h
        .create_qp(&QpInit::rc(n.pd, peer_cq).wr(256, 64).sig_all())
        .unwrap();
    // Fail fast: no RNR or transport retries, 1 ms ACK timeout.
    let opts = ConnOpts {
        timeout: 8,
        retry_cnt: 1,
        rnr_retry: 0,
        ..ConnOpts::default()
    };
    let victim = Victim {
        qp,
        peer,
        cq,
        peer_cq,
        opts,
    };
    connect_loopback(h, qp, peer, &opts);
    let good = n.region(64 << 10, Layout::Scattered, 0);
    let h = &mut n.hca;
    let dma = if h.caps().flags & dev_cap::DMA_MR != 0 {
        Some(h.reg_dma_mr(n.pd, ALL_ACCESS).expect("DMA MR"))
    } else {
        None
    };
    let cap = h.qp_cap(qp);
    let (entries, stride, _) = h.sq_geometry(qp);
    let started = Instant::now();
    let mut fed = 0usize;
    let mut stats: HashMap<String, usize> = HashMap::new();
    let mut overruns = 0;
    while fed < N_SQ_WQES {
        let count = (rng.range(1, u64::from(entries)) as usize).min(N_SQ_WQES - fed);
        let (_, _, pi) = h.sq_geometry(qp);
        let mut wqes = Vec::with_capacity(count);
        for k in 0..count {
            let w = random_send_wqe(&mut rng, stride, &good, dma.as_ref(), base, size);
            h.write_sq_raw(qp, pi.wrapping_add(k as u32), &w);
            let mut full = w;
            full.resize(stride, 0);
            full.truncate(stride);
            wqes.push(full);
        }
        let overrun = rng.below(8) == 0;
        if overrun {
            overruns += 1;
            // Past the ring's end: by more than a ring, or "behind" (wrapped).
            let ahead = if rng.chance(0.5) {
                entries.wrapping_add(rng.range(1, 1 << 20) as u32)
            } else {
                u32::MAX - rng.below(16) as u32
            };
            h.ring_sq_raw(qp, pi.wrapping_add(ahead)).unwrap();
            // A QP error: the device cannot know which WQEs are real.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let st = h.qp_state(qp).unwrap_or_else(|e| panic!("QUERY_QP: {e}"));
                if st == Some(QpState::Error) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "producer index {ahead} past the ring: QP still {st:?}"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            *stats.entry("overrun: QP error".into()).or_default() += 1;
            // Whatever completions came (flushes of nothing) are drained.
            h.poll_cq(cq, 4096);
        } else {
            h.ring_sq_raw(qp, pi.wrapping_add(count as u32)).unwrap();
            let got = h.wait_cqes(cq, count, Duration::from_secs(30));
            if got.len() != count {
                v.assert_alive(0);
                panic!(
                    "{count} random WQEs gave {} completions in 30 s (after {fed}); QP state {:?}",
                    got.len(),
                    h.qp_state(qp)
                );
            }
            check_fuzz_completions(&got, &wqes, qp, cap.max_send_sge, &mut stats);
        }
        h.poll_cq(peer_cq, 4096);
        victim.reconnect(h);
        fed += count;
        if fed % 10_000 < count {
            v.assert_alive(0);
        }
    }
    eprintln!(
        "{N_SQ_WQES} random send WQEs ({overruns} overrun batches) in {:.1} s: {stats:?}",
        started.elapsed().as_secs_f64()
    );
    v.assert_alive(0);

    // Receive WQEs: random ones, then messages to consume them. No assertion
    // per WQE (a receive WQE is only checked when a message lands); the device
    // must stay up and both QPs must end in a known state.
    let bad_before = device_bad(h);
    let (rq_entries, rq_stride, _) = h.rq_geometry(qp).expect("RQ");
    let mut rq_fed = 0;
    while rq_fed < N_RQ_WQES {
        let count = (rng.range(1, u64::from(rq_entries)) as usize).min(N_RQ_WQES - rq_fed);
        let (_, _, pi) = h.rq_geometry(qp).unwrap();
        for k in 0..count {
            let w = if rng.chance(0.5) {
                let len = rng.range(1, rq_stride as u64) as usize;
                rng.bytes(len)
            } else {
                let sges = (0..rng.range(0, 6))
                    .map(|_| Sge {
                        addr: outside(&mut rng, base, size),
                        length: rng.range(1, 1 << 16) as u32,
                        lkey: if rng.chance(0.5) {
                            good.mr.lkey
                        } else {
                            rng.next_u32()
                        },
                    })
                    .collect();
                encode_recv(&RecvWr::new(rng.next_u64(), sges))
            };
            h.write_rq_raw(qp, pi.wrapping_add(k as u32), &w);
        }
        let ahead = if rng.below(8) == 0 {
            rq_entries + rng.range(1, 1000) as u32
        } else {
            count as u32
        };
        h.ring_rq_raw(qp, pi.wrapping_add(ahead)).unwrap();
        let sends: Vec<SendWr> = (0..count.min(32))
            .map(|k| SendWr::send(k as u64).sge(good.mr.sge(&good.buf, 0, 64)))
            .collect();
        h.post_send_batch(peer, &sends).unwrap();
        let got = h.wait_cqes(peer_cq, sends.len(), Duration::from_secs(30));
        assert_eq!(
            got.len(),
            sends.len(),
            "every SEND toward the fuzzed RQ completes (somehow)"
        );
        h.poll_cq(cq, 4096);
        victim.reconnect(h);
        rq_fed += count;
    }
    v.assert_alive(0);
    let bad_after_rq = device_bad(h);
    assert!(
        bad_after_rq > bad_before,
        "bad receive WQEs and overruns are counted"
    );

    // SRQ WQEs: random bytes and producer indices; no QP to fail, so the
    // device counts them, stays up, and the SRQ answers.
    let srq = h.create_srq(n.pd, 256, 4, 0).expect("CREATE_SRQ");
    let mut srq_fed = 0;
    let mut srq_pi = 0u32;
    while srq_fed < N_SRQ_WQES {
        let count = (rng.range(1, 256) as usize).min(N_SRQ_WQES - srq_fed);
        for k in 0..count {
            let len = rng.range(1, 128) as usize;
            let w = rng.bytes(len);
            h.write_srq_raw(srq, srq_pi.wrapping_add(k as u32), &w);
        }
        srq_pi = if rng.below(8) == 0 {
            srq_pi.wrapping_add(rng.next_u32())
        } else {
            srq_pi.wrapping_add(count as u32)
        };
        h.ring_srq_raw(srq, srq_pi).unwrap();
        srq_fed += count;
        if srq_fed % 1000 < count {
            h.query_srq(srq).expect("QUERY_SRQ during SRQ fuzzing");
        }
    }
    h.query_srq(srq).expect("QUERY_SRQ after fuzzing");
    assert!(
        device_bad(h) > bad_after_rq,
        "bad SRQ WQEs and overruns are counted"
    );
    h.destroy_srq(srq).expect("DESTROY_SRQ after fuzzing");
    v.assert_alive(0);
    assert_eq!(h.fatal().unwrap(), None);

    // The fuzzed QP itself works again after a reset (with ordinary timeouts),
    // and so does a new one.
    victim.reconnect_with(h, &ConnOpts::default());
    let dst = n.region(4096, Layout::Contiguous, 0);
    let h = &mut n.hca;
    h.post_send(
        qp,
        &SendWr::write(1, dst.buf.va(0), dst.mr.rkey).inline(b"after fuzzing"),
    )
    .unwrap();
    assert_success(&wait_n(h, cq, 1, Duration::from_secs(10)));
    assert_eq!(n.read(&dst, 0, 13), b"after fuzzing");
    clean_transfer(&mut n);
    v.assert_alive(0);
}

/// Bad WQEs plus doorbell overruns, as the device counts them.
fn device_bad(h: &mut Hca) -> u64 {
    let c = |h: &mut Hca, name| {
        h.counter(CounterSet::Device, name)
            .expect("QUERY_COUNTERS")
            .unwrap_or_else(|| panic!("no device counter {name}"))
    };
    c(h, "bad_wqes") + c(h, "doorbell_overruns")
}

fn check_fuzz_completions(
    got: &[Cqe],
    wqes: &[Vec<u8>],
    qp: QpH,
    max_sge: u32,
    stats: &mut HashMap<String, usize>,
) {
    for (k, (c, w)) in got.iter().zip(wqes).enumerate() {
        let wr_id = u64::from_le_bytes(w[..8].try_into().unwrap());
        assert_eq!(c.qp_num, qp.qpn, "completion of another QP: {c:?}");
        assert_eq!(
            c.wr_id,
            wr_id,
            "completion {k} out of order or with a wrong wr_id: {c:?}, WQE {:02x?}",
            &w[..32]
        );
        let st = wc_status(c);
        assert!(st.is_some(), "unknown completion status {}", c.status);
        if st == Some(WcStatus::Success) {
            assert!(
                may_succeed(w, max_sge),
                "bad WQE {k} of {} completed successfully: {c:?}, WQE {:02x?}; batch statuses {:?}",
                got.len(),
                &w[..64.min(w.len())],
                got.iter().map(|c| c.status).collect::<Vec<_>>()
            );
        }
        *stats.entry(format!("{:?}", st.unwrap())).or_default() += 1;
    }
}

#[test]
fn dma_unmap_under_an_active_transfer_is_an_error_completion() {
    let mut v = Vhca::spawn(Options::nodes(2));
    let chunk = 64u64 << 20;
    let go = GuestOptions {
        dma_chunk: Some(chunk),
        ..GuestOptions::default()
    };
    let mut a = Node::connect_with(&v, 0, go, HcaConfig::default());
    let mut b = Node::connect(&v, 1);
    let (qa, _qb) = connect_pair(&mut a, &mut b, QpType::Rc);
    // The source lives alone in the last DMA map.
    let last = a.hca.guest().ram_base() + a.hca.guest().ram_size() - chunk;
    let total = 48usize << 20;
    let buf = a.hca.guest_mut().alloc_buf_at(last, total);
    let mr = a
        .hca
        .reg_mr(a.pd, &buf, ALL_ACCESS, PblKind::TwoLevel)
        .expect("REG_MR in the last map");
    let src = Region { buf, mr };
    let dst = b.region(total, Layout::Scattered, 0);
    let piece = 4usize << 20;
    let wrs: Vec<SendWr> = (0..total / piece)
        .map(|i| {
            SendWr::write(i as u64, dst.buf.va(i * piece), dst.mr.rkey).sge(src.mr.sge(
                &src.buf,
                i * piece,
                piece,
            ))
        })
        .collect();
    let mut sent = 0;
    let t0 = Instant::now();
    for w in wrs.chunks(8) {
        a.hca.post_send_batch(qa, w).unwrap();
        sent += w.len();
    }
    // QEMU removes the memory (a hot-unplug, a balloon) while the device reads it.
    a.hca.guest_mut().dma_unmap(last, chunk).expect("DMA_UNMAP");
    let unmapped_after = t0.elapsed();
    let got = a.hca.wait_cqes(a.cq, sent, Duration::from_secs(60));
    assert_eq!(got.len(), sent, "every WQE completes after the unmap");
    let errors: Vec<_> = got
        .iter()
        .filter(|c| c.status != WcStatus::Success.raw())
        .collect();
    assert!(
        !errors.is_empty(),
        "{} MiB completed without error though its memory was unmapped {unmapped_after:?} after posting",
        total >> 20
    );
    eprintln!(
        "unmap {unmapped_after:?} after posting: {} of {sent} WQEs failed, first {:?}",
        errors.len(),
        wc_status(errors[0])
    );
    v.assert_alive(0);
    v.assert_alive(1);
    assert_eq!(a.hca.fatal().unwrap(), None);
    // Memory back; a new QP moves data again.
    a.hca
        .guest_mut()
        .dma_map(last, chunk)
        .expect("DMA_MAP again");
    let (qa2, _) = connect_pair(&mut a, &mut b, QpType::Rc);
    let d = pattern(42, piece);
    a.write(&src, 0, &d);
    a.hca
        .post_send(
            qa2,
            &SendWr::write(99, dst.buf.va(0), dst.mr.rkey).sge(src.mr.sge(&src.buf, 0, piece)),
        )
        .unwrap();
    assert_success(&wait_n(&mut a.hca, a.cq, 1, Duration::from_secs(30)));
    assert_bytes(&b.read(&dst, 0, piece), &d, "after remapping");
}
