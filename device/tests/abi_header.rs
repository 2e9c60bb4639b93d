//! The device ABI (ARCHITECTURE.md §4): the committed C header is the generated one, a C
//! compiler agrees with the Rust layouts, every struct round-trips through its
//! bytes, sizes are the documented ones, and the numbers shared with ibverbs are
//! the engine's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use device::abi::bar0::{reg, CtxTable};
use device::abi::cmd::{
    cmd_const, commands, travels_inline, Cmd, Opcode, Pbl, QueryCountersOut, Status,
};
use device::abi::context::{CqContext, EqContext, MrContext, QpContext, SrqContext};
use device::abi::counters::CounterSet;
use device::abi::cqe::{entry_const, owner_bit, Cqe, Eqe, EqeType};
use device::abi::header::{HEADER_PATH, REGENERATE};
use device::abi::layout::{AbiStruct, StructLayout, Ty};
use device::abi::uar::{uar, CqDoorbell, EqDoorbell, QpDoorbell, SrqDoorbell, UarHeader};
use device::abi::verbs::{self, access, flush, qp_attr_mask, send_flags, wc_flags};
use device::abi::wqe::{wqe_const, AtomicSeg, RaddrSeg, RecvCtrl, SendCtrl, Sge, UdSeg};
use device::abi::{c_header, structs};
use device::hca::HcaCounters;
use transport::engine::Counters;
use transport::verbs as tv;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn layouts() -> Vec<StructLayout> {
    structs().iter().map(|s| (s.layout)()).collect()
}

// ---------------------------------------------------------------- (a) staleness

#[test]
fn committed_header_is_the_generated_one() {
    let path = workspace().join(HEADER_PATH);
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == c_header(),
        "{HEADER_PATH} is stale or missing; regenerate it from the workspace root with:\n    \
         {REGENERATE}"
    );
}

/// The provider's patch series (guest-driver/provider/patches/) carries copies
/// of the provider's sources, the ABI header and vhca.ko's uverbs header as new
/// files; `package.sh` refuses a series whose copies differ, but only when a
/// package is built (the VM stages). Checked here too, so a header change
/// without `package.sh --update-patches` fails `cargo test`.
#[test]
fn provider_patch_series_carries_the_current_files() {
    let ws = workspace();
    let dir = ws.join("guest-driver/provider/patches");
    let mut files = std::collections::BTreeMap::<String, String>::new();
    for e in std::fs::read_dir(&dir).expect("patches/") {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        // A new file: "+++ b/PATH", "@@ -0,0 +1,N @@", then N lines of "+".
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            let Some(path) = l.strip_prefix("+++ b/") else {
                continue;
            };
            let Some(hunk) = lines.next() else { break };
            if !hunk.starts_with("@@ -0,0 +1") {
                continue;
            }
            let n: usize = hunk
                .trim_start_matches("@@ -0,0 +1")
                .trim_start_matches(',')
                .split_whitespace()
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let body: Vec<&str> = lines
                .by_ref()
                .take(n)
                .map(|l| l.strip_prefix('+').unwrap_or(l))
                .collect();
            files.insert(path.to_string(), body.join("\n") + "\n");
        }
    }
    let ours = |name: &str| -> Option<PathBuf> {
        match name {
            "kernel-headers/rdma/vhca-abi-user.h" => {
                Some(ws.join("guest-driver/kernel/vhca-abi-user.h"))
            }
            "providers/vhca/vhca_abi.h" => Some(ws.join(HEADER_PATH)),
            n => n
                .strip_prefix("providers/vhca/")
                .map(|f| ws.join("guest-driver/provider").join(f)),
        }
    };
    let mut checked = 0;
    for (name, body) in &files {
        let Some(path) = ours(name) else { continue };
        let now = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{name} in the series, {}: {e}", path.display()));
        assert!(
            now == *body,
            "guest-driver/provider/patches/ carries an old {name}: run \
             guest-driver/provider/package.sh --update-patches"
        );
        checked += 1;
    }
    assert!(
        files.contains_key("providers/vhca/vhca_abi.h") && checked >= 5,
        "the series carries the provider: {:?}",
        files.keys().collect::<Vec<_>>()
    );
}

#[test]
fn header_is_deterministic() {
    assert_eq!(c_header(), c_header());
}

// ---------------------------------------------------------------- (b) C compiler

fn have_gcc() -> bool {
    Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compiles a file that includes the header, so that its `_Static_assert`s (size
/// and offset of every field) are checked by a C compiler.
fn compile(dir: &Path, extra: &[&str]) {
    let src = dir.join("use_abi.c");
    std::fs::write(
        &src,
        "#include \"vhca_abi.h\"\n\
         int use_abi(void);\n\
         int use_abi(void)\n{\n\
         \tstruct vhca_cmd c = { .opcode = VHCA_CMD_NOP, .owner = VHCA_CMD_OWNER_DEVICE };\n\
         \tstruct vhca_cqe e = { .owner = VHCA_OWNER_BIT };\n\
         \treturn vhca_status_errno(c.status) + (int)sizeof(e) - VHCA_CQE_SIZE;\n}\n",
    )
    .unwrap();
    let include = workspace().join("guest-driver/include");
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-c"])
        .args(extra)
        .arg(format!("-I{}", include.display()))
        .arg(&src)
        .arg("-o")
        .arg(dir.join("use_abi.o"))
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc {extra:?} rejected the header:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn c_compiler_checks_the_static_asserts() {
    if !have_gcc() {
        eprintln!("gcc not found: C layout check skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Linux userspace (the rdma-core provider): <linux/types.h>.
    compile(dir.path(), &["-std=c11", "-pedantic"]);
    // Elsewhere: <stdint.h> typedefs.
    compile(
        dir.path(),
        &[
            "-std=c11",
            "-pedantic",
            "-U__linux__",
            "-U__linux",
            "-Ulinux",
            "-U__gnu_linux__",
        ],
    );
    // The kernel branch, against stand-ins for the three kernel headers it names.
    let k = dir.path().join("kinc/linux");
    std::fs::create_dir_all(&k).unwrap();
    std::fs::write(
        k.join("types.h"),
        "#include <stdint.h>\ntypedef uint8_t __u8;\ntypedef uint16_t __u16;\n\
         typedef uint32_t __u32;\ntypedef uint64_t __u64;\n",
    )
    .unwrap();
    std::fs::write(k.join("stddef.h"), "#include <stddef.h>\n").unwrap();
    std::fs::write(k.join("errno.h"), "#include <asm-generic/errno.h>\n").unwrap();
    let kinc = format!("-I{}", dir.path().join("kinc").display());
    compile(dir.path(), &["-D__KERNEL__", &kinc]);
}

// ---------------------------------------------------------------- (c) round trips

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn every_struct_round_trips_through_its_bytes() {
    for s in structs() {
        let l = (s.layout)();
        for seed in [0u8, 1, 0x5a, 0xff] {
            let b = pattern(l.size, seed);
            assert_eq!((s.roundtrip)(&b), b, "{} (seed {seed})", l.name);
        }
        assert_eq!(
            (s.roundtrip)(&vec![0; l.size]),
            vec![0; l.size],
            "{}",
            l.name
        );
    }
}

#[test]
fn fields_are_little_endian_at_their_offsets() {
    let c = Cmd {
        opcode: Opcode::CreateQp.raw(),
        token: 0xbeef,
        in_mailbox: 0x0102_0304_0506_0708,
        ..Cmd::default()
    };
    let b = c.to_bytes();
    assert_eq!(&b[0..2], &[0x40, 0x00]);
    assert_eq!(&b[2..4], &[0xef, 0xbe]);
    assert_eq!(&b[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(Cmd::from_bytes(&b), c);

    let mut e = [0u8; 64];
    e[63] = 1;
    e[36] = tv::WcStatus::RetryExcErr as u8;
    let cqe = Cqe::from_bytes(&e);
    assert_eq!(cqe.owner, 1);
    assert_eq!(cqe.status, 12);
    assert_eq!(Cqe::from_prefix(&e[..63]), None);
    assert_eq!(Cqe::from_prefix(&e), Some(cqe));
}

// ---------------------------------------------------------------- (d) sizes

#[test]
fn sizes_are_the_documented_ones() {
    assert_eq!(Cmd::SIZE, 64);
    assert_eq!(Cmd::SIZE, cmd_const::SLOT_SIZE as usize);
    assert_eq!(Cqe::SIZE, 64);
    assert_eq!(Cqe::SIZE, entry_const::CQE_SIZE as usize);
    assert_eq!(Eqe::SIZE, 16);
    assert_eq!(Eqe::SIZE, entry_const::EQE_SIZE as usize);
    assert_eq!(UarHeader::SIZE, uar::HEADER_SIZE as usize);
    for s in [
        QpDoorbell::SIZE,
        SrqDoorbell::SIZE,
        CqDoorbell::SIZE,
        EqDoorbell::SIZE,
    ] {
        assert_eq!(s, uar::SLOT_SIZE as usize);
    }
    for s in [
        SendCtrl::SIZE,
        RaddrSeg::SIZE,
        AtomicSeg::SIZE,
        Sge::SIZE,
        RecvCtrl::SIZE,
        Pbl::SIZE,
    ] {
        assert_eq!(s, 16);
    }
    // A UD send's headers are one 64-byte basic block, the smallest send stride.
    assert_eq!(
        SendCtrl::SIZE + UdSeg::SIZE,
        wqe_const::UD_HEADERS_SIZE as usize
    );
    assert_eq!(1 << wqe_const::SQ_MIN_WQE_SHIFT, 64);
    // The smallest receive stride holds one SGE.
    assert_eq!(RecvCtrl::SIZE + Sge::SIZE, 1 << wqe_const::RQ_MIN_WQE_SHIFT);
    // The largest stride holds an RC atomic with 32 SGEs, or a UD send with 256
    // bytes inline.
    let max = 1usize << wqe_const::MAX_WQE_SHIFT;
    assert!(SendCtrl::SIZE + RaddrSeg::SIZE + AtomicSeg::SIZE + 32 * Sge::SIZE <= max);
    assert!(wqe_const::UD_HEADERS_SIZE as usize + 256 <= max);
}

#[test]
fn every_field_is_naturally_aligned_and_nothing_is_padding() {
    for l in layouts() {
        let mut end = 0;
        for f in &l.fields {
            assert_eq!(f.offset % f.align, 0, "{}.{} misaligned", l.name, f.name);
            assert_eq!(f.offset, end, "{}.{}: gap before it", l.name, f.name);
            end = f.offset + f.size;
        }
        assert_eq!(end, l.size, "{}: padding at the end", l.name);
        assert_eq!(l.size % l.align, 0, "{}", l.name);
    }
}

#[test]
fn nested_structs_come_before_their_users() {
    let mut seen = BTreeSet::new();
    for l in layouts() {
        for f in &l.fields {
            if let Some(inner) = f.ty.struct_name() {
                assert!(seen.contains(inner), "{} uses {inner} before it", l.name);
            }
        }
        assert!(seen.insert(l.name), "{} registered twice", l.name);
    }
    assert_eq!(
        Ty::Array(Box::new(Ty::U16), 64).c_decl("pkeys"),
        "__u16 pkeys[64]"
    );
}

#[test]
fn every_opcode_has_its_parameters_and_they_fit() {
    let cmds = commands();
    let ops: Vec<Opcode> = cmds.iter().map(|c| c.opcode).collect();
    assert_eq!(ops, Opcode::ALL);
    assert_eq!(Opcode::from_raw(0), None, "a zeroed slot is no command");
    for c in cmds {
        for s in [c.input, c.output].into_iter().flatten() {
            let l = (s.layout)();
            let limit = if travels_inline(&l) {
                cmd_const::INLINE_SIZE
            } else {
                cmd_const::MAILBOX_MAX
            };
            assert!(l.size <= limit as usize, "{:?}: {}", c.opcode, l.name);
        }
    }
    assert_eq!(Cmd::SIZE - cmd_const::INLINE_SIZE as usize, 32);
}

#[test]
fn context_records_fit_the_window() {
    for (t, size) in [
        (CtxTable::Qpc, QpContext::SIZE),
        (CtxTable::Cqc, CqContext::SIZE),
        (CtxTable::Srqc, SrqContext::SIZE),
        (CtxTable::Mpt, MrContext::SIZE),
        (CtxTable::Eqc, EqContext::SIZE),
    ] {
        assert!(size <= reg::CTX_WINDOW_SIZE as usize, "{t:?}");
    }
}

#[test]
fn bar0_regions_do_not_overlap() {
    let regs = reg::layout();
    let mut offsets = BTreeSet::new();
    for i in &regs.items {
        if i.name.starts_with("CTX_WINDOW") {
            continue;
        }
        assert_eq!(i.value % 4, 0, "{}", i.name);
        assert!(i.value < u64::from(reg::CTX_WINDOW), "{}", i.name);
        assert!(offsets.insert(i.value), "{} reuses an offset", i.name);
    }
}

#[test]
fn doorbell_page_geometry_adds_up() {
    assert_eq!(uar::SLOTS * uar::SLOT_SIZE, uar::PAGE_SIZE);
    assert_eq!(uar::SUMMARY_OFFSET, uar::HEADER_SIZE);
    assert_eq!(
        uar::SUMMARY_SIZE * 8,
        uar::SLOTS,
        "one summary bit per slot"
    );
    assert_eq!(
        uar::FIRST_SLOT * uar::SLOT_SIZE,
        uar::SUMMARY_OFFSET + uar::SUMMARY_SIZE
    );
    assert!((uar::FIRST_SLOT..uar::SLOTS).contains(&uar::EQ0_SLOT));
}

#[test]
fn counter_sets_fit_one_mailbox() {
    let c = Counters::default();
    for &set in CounterSet::ALL {
        let names = set.names();
        assert_eq!(
            set.values(&c, &HcaCounters::default()).len(),
            names.len(),
            "{set:?}"
        );
        assert!(
            names.len() <= QueryCountersOut::default().values.len(),
            "{set:?}"
        );
        let unique: BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{set:?}: duplicate names");
    }
}

// ---------------------------------------------------------------- numbering

#[test]
fn owner_bit_is_one_on_the_first_pass() {
    // A zeroed ring holds no valid entry on the first pass.
    assert_eq!(owner_bit(0, 3), 1);
    assert_eq!(owner_bit(7, 3), 1);
    assert_eq!(owner_bit(8, 3), 0);
    assert_eq!(owner_bit(16, 3), 1);
    assert_eq!(owner_bit(u32::MAX, 31), 0);
    assert_eq!(owner_bit(5, 32), 1);
}

#[test]
fn verbs_numbers_are_the_engines() {
    use tv::{Mtu, QpState, WcOpcode, WcStatus, WrOpcode};
    let qps = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Error,
    ];
    same(&qps, |s| *s as u8, verbs::QpState::ALL, |a| a.raw());
    let mtus = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];
    same(&mtus, |m| *m as u8, verbs::Mtu::ALL, |a| a.raw());
    let wrs = [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpSwap,
        WrOpcode::AtomicFetchAdd,
        WrOpcode::LocalInv,
        WrOpcode::BindMw,
        WrOpcode::SendWithInv,
        WrOpcode::Flush,
        WrOpcode::AtomicWrite,
        WrOpcode::RegMr,
    ];
    same(&wrs, |w| *w as u8, verbs::WrOpcode::ALL, |a| a.raw());
    let wcs: Vec<WcStatus> = (0..=255u8).filter_map(wc_status).collect();
    same(&wcs, |w| *w as u8, verbs::WcStatus::ALL, |a| a.raw());
    let ops = [
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::CompSwap,
        WcOpcode::FetchAdd,
        WcOpcode::BindMw,
        WcOpcode::LocalInv,
        WcOpcode::Flush,
        WcOpcode::AtomicWrite,
        WcOpcode::RegMr,
        WcOpcode::Recv,
        WcOpcode::RecvRdmaWithImm,
    ];
    same(&ops, |o| *o as u8, verbs::WcOpcode::ALL, |a| a.raw());
    for t in [tv::QpType::Rc, tv::QpType::Uc, tv::QpType::Ud] {
        let name = format!("{t:?}");
        assert!(verbs::QpType::ALL.iter().any(|a| format!("{a:?}") == name));
    }
}

/// The engine's `WcStatus` numbered `v`, found through an exhaustive match so that
/// a status added to the engine fails to compile here until the ABI has it.
fn wc_status(v: u8) -> Option<tv::WcStatus> {
    use tv::WcStatus::*;
    let all = [
        Success,
        LocLenErr,
        LocQpOpErr,
        LocEecOpErr,
        LocProtErr,
        WrFlushErr,
        MwBindErr,
        BadRespErr,
        LocAccessErr,
        RemInvReqErr,
        RemAccessErr,
        RemOpErr,
        RetryExcErr,
        RnrRetryExcErr,
        LocRddViolErr,
        RemInvRdReqErr,
        RemAbortErr,
        InvEecnErr,
        InvEecStateErr,
        FatalErr,
        RespTimeoutErr,
        GeneralErr,
    ];
    all.into_iter().find(|s| {
        let listed = match s {
            Success | LocLenErr | LocQpOpErr | LocEecOpErr | LocProtErr | WrFlushErr
            | MwBindErr | BadRespErr | LocAccessErr | RemInvReqErr | RemAccessErr | RemOpErr
            | RetryExcErr | RnrRetryExcErr | LocRddViolErr | RemInvRdReqErr | RemAbortErr
            | InvEecnErr | InvEecStateErr | FatalErr | RespTimeoutErr | GeneralErr => true,
        };
        listed && *s as u8 == v
    })
}

/// The engine's and the ABI's enums have the same variants, by name and number.
fn same<T: std::fmt::Debug, A: std::fmt::Debug + Copy>(
    engine: &[T],
    tnum: impl Fn(&T) -> u8,
    abi: &[A],
    anum: impl Fn(&A) -> u8,
) {
    let e: Vec<(String, u8)> = engine.iter().map(|t| (format!("{t:?}"), tnum(t))).collect();
    let a: Vec<(String, u8)> = abi.iter().map(|x| (format!("{x:?}"), anum(x))).collect();
    assert_eq!(e, a);
}

#[test]
fn flag_bits_are_the_engines() {
    assert_eq!(access::LOCAL_WRITE, tv::Access::LOCAL_WRITE.0);
    assert_eq!(access::REMOTE_WRITE, tv::Access::REMOTE_WRITE.0);
    assert_eq!(access::REMOTE_READ, tv::Access::REMOTE_READ.0);
    assert_eq!(access::REMOTE_ATOMIC, tv::Access::REMOTE_ATOMIC.0);
    assert_eq!(access::MW_BIND, tv::Access::MW_BIND.0);
    assert_eq!(access::FLUSH_GLOBAL, tv::Access::FLUSH_GLOBAL.0);
    assert_eq!(access::FLUSH_PERSISTENT, tv::Access::FLUSH_PERSISTENT.0);
    assert_eq!(flush::GLOBAL, u32::from(tv::FlushSpec::TYPE_GLOBAL));
    assert_eq!(flush::PERSISTENT, u32::from(tv::FlushSpec::TYPE_PERSISTENT));
    assert_eq!(flush::LEVEL_RANGE, u32::from(tv::FlushSpec::LEVEL_RANGE));
    assert_eq!(flush::LEVEL_MR, u32::from(tv::FlushSpec::LEVEL_MR));
    assert_eq!(u32::from(send_flags::FENCE), tv::SendFlags::FENCE.0);
    assert_eq!(u32::from(send_flags::SIGNALED), tv::SendFlags::SIGNALED.0);
    assert_eq!(u32::from(send_flags::SOLICITED), tv::SendFlags::SOLICITED.0);
    assert_eq!(u32::from(send_flags::INLINE), tv::SendFlags::INLINE.0);
    assert_eq!(wc_flags::GRH, tv::WcFlags::GRH.0);
    assert_eq!(wc_flags::WITH_IMM, tv::WcFlags::WITH_IMM.0);
    assert_eq!(wc_flags::WITH_INV, tv::WcFlags::WITH_INV.0);
    let m = tv::AttrMask::default;
    let pairs = [
        (qp_attr_mask::STATE, tv::AttrMask::STATE),
        (qp_attr_mask::CUR_STATE, tv::AttrMask::CUR_STATE),
        (
            qp_attr_mask::EN_SQD_ASYNC_NOTIFY,
            tv::AttrMask::EN_SQD_ASYNC_NOTIFY,
        ),
        (qp_attr_mask::ACCESS_FLAGS, tv::AttrMask::ACCESS_FLAGS),
        (qp_attr_mask::PKEY_INDEX, tv::AttrMask::PKEY_INDEX),
        (qp_attr_mask::PORT, tv::AttrMask::PORT),
        (qp_attr_mask::QKEY, tv::AttrMask::QKEY),
        (qp_attr_mask::AV, tv::AttrMask::AV),
        (qp_attr_mask::PATH_MTU, tv::AttrMask::PATH_MTU),
        (qp_attr_mask::TIMEOUT, tv::AttrMask::TIMEOUT),
        (qp_attr_mask::RETRY_CNT, tv::AttrMask::RETRY_CNT),
        (qp_attr_mask::RNR_RETRY, tv::AttrMask::RNR_RETRY),
        (qp_attr_mask::RQ_PSN, tv::AttrMask::RQ_PSN),
        (
            qp_attr_mask::MAX_QP_RD_ATOMIC,
            tv::AttrMask::MAX_QP_RD_ATOMIC,
        ),
        (qp_attr_mask::ALT_PATH, tv::AttrMask::ALT_PATH),
        (qp_attr_mask::MIN_RNR_TIMER, tv::AttrMask::MIN_RNR_TIMER),
        (qp_attr_mask::SQ_PSN, tv::AttrMask::SQ_PSN),
        (
            qp_attr_mask::MAX_DEST_RD_ATOMIC,
            tv::AttrMask::MAX_DEST_RD_ATOMIC,
        ),
        (qp_attr_mask::PATH_MIG_STATE, tv::AttrMask::PATH_MIG_STATE),
        (qp_attr_mask::CAP, tv::AttrMask::CAP),
        (qp_attr_mask::DEST_QPN, tv::AttrMask::DEST_QPN),
    ];
    let mut all = m();
    for (abi, engine) in pairs {
        assert_eq!(abi, engine.0);
        all = all | engine;
    }
    assert_eq!(
        all.0,
        (1 << 21) - 1,
        "every ibv_qp_attr_mask bit the engine knows"
    );
}

#[test]
fn event_types_are_ibverbs_numbers() {
    // enum ibv_event_type runs 0..=19 with no gaps; notifications sit above.
    let asyncs: Vec<u8> = EqeType::ALL
        .iter()
        .map(|t| t.raw())
        .filter(|&v| v < 0x80)
        .collect();
    assert_eq!(asyncs, (0..=19).collect::<Vec<u8>>());
    assert_eq!(EqeType::CqErr.raw(), 0);
    assert_eq!(EqeType::SrqLimitReached.raw(), 15);
    assert_eq!(
        EqeType::of_event(&tv::Event::PortActive),
        EqeType::PortActive
    );
    assert_eq!(
        EqeType::of_event(&tv::Event::SrqLimitReached { srq: 3 }),
        EqeType::SrqLimitReached
    );
}

#[test]
fn every_status_maps_to_one_errno() {
    for &s in Status::ALL {
        assert_eq!(s.errno().is_none(), s == Status::Ok, "{s:?}");
    }
    assert_eq!(
        Status::from(tv::VerbError::InvalidAttr)
            .errno()
            .map(|e| e.name()),
        Some("EINVAL".to_string())
    );
    assert_eq!(
        Status::from(tv::VerbError::InsufficientResources),
        Status::NoResources
    );
    assert_eq!(
        Status::from(tv::VerbError::Busy).errno().map(|e| e.name()),
        Some("EBUSY".into())
    );
    assert!(c_header().contains("case VHCA_STATUS_BAD_ADDRESS:\n\t\treturn -EFAULT;"));
}

// ---------------------------------------------------------------- C names

#[test]
fn c_names_are_unique_and_every_reference_is_defined() {
    let h = c_header();
    let mut names = BTreeSet::new();
    let mut tags = BTreeSet::new();
    for line in h.lines() {
        let t = line.trim_start();
        let name = if let Some(rest) = t.strip_prefix("#define ") {
            rest.split([' ', '(']).next()
        } else if t.starts_with("VHCA_") && t.contains(" = ") {
            t.split(' ').next()
        } else {
            None
        };
        if let Some(n) = name {
            assert!(names.insert(n.to_string()), "{n} defined twice");
        }
        for kw in ["struct ", "enum "] {
            if let Some(rest) = t.strip_prefix(kw) {
                if let Some(tag) = rest.strip_suffix(" {") {
                    assert!(tags.insert(format!("{kw}{tag}")), "{kw}{tag} defined twice");
                }
            }
        }
    }
    // Every `struct vhca_x` / `enum vhca_x` the text mentions exists (the header's
    // prose is written by hand; this keeps it honest).
    for kw in ["struct ", "enum "] {
        for (i, _) in h.match_indices(&format!("{kw}vhca_")) {
            let tag: String = h[i + kw.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if tag.ends_with('_') {
                continue; // a pattern such as `struct vhca_*_context`
            }
            assert!(
                tags.contains(&format!("{kw}{tag}")),
                "{kw}{tag} is not defined"
            );
        }
    }
    // Likewise every `VHCA_NAME` it mentions (patterns such as `VHCA_DEV_CTRL_*`
    // and `VHCA_COUNTERS_<SET>_NAMES` aside).
    let bytes = h.as_bytes();
    for (i, _) in h.match_indices("VHCA_") {
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            continue;
        }
        let name: String = h[i..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        let next = h[i + name.len()..].chars().next();
        if name.ends_with('_') || matches!(next, Some('*' | '<')) || name == "VHCA_ABI_H" {
            continue;
        }
        assert!(names.contains(&name), "{name} is mentioned but not defined");
    }
    assert!(h.starts_with("/* SPDX-License-Identifier"));
    assert!(h.contains("#ifndef VHCA_ABI_H\n#define VHCA_ABI_H\n"));
    assert!(h.ends_with("#endif /* VHCA_ABI_H */\n"));
}

#[test]
fn layouts_describe_the_rust_types() {
    let l = <Cqe as AbiStruct>::layout();
    assert_eq!(l.name, "Cqe");
    assert_eq!(
        l.fields.last().map(|f| (f.name, f.offset)),
        Some(("owner", 63))
    );
    assert_eq!(
        Opcode::from_raw(Opcode::QueryQp.raw()),
        Some(Opcode::QueryQp)
    );
}
