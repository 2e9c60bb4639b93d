use super::*;
use crate::memory::{MemError, Memory, VecMemory};
use crate::verbs::{MwBind, MwType, Sge, WcStatus};
use crate::wire::NakCode;
use proptest::prelude::*;

const PS: u64 = 4096;
const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const ALL: Access = Access(RW.0 | Access::REMOTE_ATOMIC.0);

fn table() -> (MrTable, Handle) {
    let mut t = MrTable::new(4, 8);
    let pd = t.alloc_pd().unwrap();
    (t, pd)
}

/// An MR of `len` bytes at `iova` over consecutive 4 KiB pages from `pa`.
fn reg(t: &mut MrTable, pd: Handle, iova: u64, len: u64, access: Access, pa: u64) -> u32 {
    let n = if len == 0 {
        0
    } else {
        ((iova % PS) + len).div_ceil(PS)
    };
    let pages = (0..n).map(|i| pa + i * PS).collect();
    t.reg_mr(pd, iova, len, access, PS, pages).unwrap()
}

// ---- MP-06, MP-07: memory windows ----

const BIND: Access = Access(ALL.0 | Access::MW_BIND.0);

fn bind(mw: u32, new: u32, mr: u32, addr: u64, length: u64, access: Access) -> MwBind {
    MwBind {
        mw_rkey: mw,
        new_rkey: new,
        mr_lkey: mr,
        addr,
        length,
        access,
    }
}

fn bumped(k: u32) -> u32 {
    (k & !0xff) | (k.wrapping_add(1) & 0xff)
}

#[test]
fn mp_06_alloc_mw_takes_a_key_index_and_a_pd_reference() {
    let mut t = MrTable::new(4, 3);
    let pd = t.alloc_pd().unwrap();
    assert_eq!(t.alloc_mw(99, MwType::Type1), Err(VerbError::InvalidPd));
    let w = t.alloc_mw(pd, MwType::Type1).unwrap();
    let k = reg(&mut t, pd, 0x1000, 0x1000, BIND, 0x10_0000);
    assert_ne!(key_index(w), key_index(k));
    let w2 = t.alloc_mw(pd, MwType::Type2).unwrap();
    // Windows and MRs share max_mr.
    assert_eq!(
        t.alloc_mw(pd, MwType::Type2),
        Err(VerbError::InsufficientResources)
    );
    assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
    // A window key is no L_Key, an MR key no window.
    assert_eq!(
        t.check_local(pd, w, 0x1000, 1, LocalAccess::Read).err(),
        Some(AccessError::NoSuchKey)
    );
    assert_eq!(t.dealloc_mw(k), Err(VerbError::InvalidHandle));
    // Named by index: another key byte of the same window frees it.
    t.dealloc_mw(bumped(w)).unwrap();
    assert_eq!(t.dealloc_mw(w), Err(VerbError::InvalidHandle));
    t.dealloc_mw(w2).unwrap();
    t.dereg_mr(k).unwrap();
    t.dealloc_pd(pd).unwrap();
}

#[test]
fn mp_06_mp_07_bind_rules() {
    let (mut t, pd) = table();
    let pd2 = t.alloc_pd().unwrap();
    let k = reg(&mut t, pd, 0x1000, 0x2000, BIND, 0x10_0000);
    let nobind = reg(&mut t, pd, 0x1000, 0x2000, ALL, 0x20_0000);
    let ro = reg(
        &mut t,
        pd,
        0x1000,
        0x2000,
        Access(Access::MW_BIND.0),
        0x30_0000,
    );
    let other = reg(&mut t, pd2, 0x1000, 0x2000, BIND, 0x40_0000);
    let w = t.alloc_mw(pd, MwType::Type2).unwrap();
    let n = bumped(w);
    let wr = Access::REMOTE_WRITE;
    let cases = [
        (bind(w + 0x100, n, k, 0x1000, 16, wr), MwError::NoSuchWindow),
        (bind(w, n + 0x100, k, 0x1000, 16, wr), MwError::BadNewKey),
        (bind(w, n, 0x7700, 0x1000, 16, wr), MwError::NoSuchMr),
        (bind(w, n, nobind, 0x1000, 16, wr), MwError::NoBindRight),
        (bind(w, n, other, 0x1000, 16, wr), MwError::PdMismatch),
        (bind(w, n, k, 0x2ff8, 16, wr), MwError::OutOfBounds),
        (bind(w, n, k, u64::MAX, 2, wr), MwError::OutOfBounds),
        (bind(w, n, ro, 0x1000, 16, wr), MwError::NoLocalWrite),
        (
            bind(w, n, ro, 0x1000, 16, Access::REMOTE_ATOMIC),
            MwError::NoLocalWrite,
        ),
        (
            bind(w, n, k, 0x1000, 16, Access(1 << 5)),
            MwError::BadAccess,
        ),
        (bind(w, n, k, 0x1000, 0, wr), MwError::ZeroLength),
    ];
    for (b, e) in cases {
        assert_eq!(t.bind_mw(pd, 5, &b), Err(e), "{b:?}");
    }
    assert_eq!(
        t.bind_mw(pd2, 5, &bind(w, n, k, 0x1000, 16, wr)),
        Err(MwError::PdMismatch)
    );
    // Nothing changed.
    assert_eq!(t.mw(w).unwrap().binding(), None);
    assert_eq!(t.mr(k).unwrap().windows(), 0);
    // A read-only window on an MR without LOCAL_WRITE is fine.
    t.bind_mw(pd, 5, &bind(w, n, ro, 0x1000, 16, Access::REMOTE_READ))
        .unwrap();
    assert!(t.mw(w).is_none());
    assert_eq!(t.mw(n).unwrap().binding().unwrap().qpn, Some(5));
    // Type 2: not free any more, a second bind fails (invalidate first).
    assert_eq!(
        t.bind_mw(pd, 5, &bind(n, bumped(n), k, 0x1000, 16, wr)),
        Err(MwError::NotFree)
    );
    assert_eq!(t.dereg_mr(ro), Err(VerbError::Busy));
    assert_eq!(t.rereg_mr(ro, Rereg::default()), Err(VerbError::Busy));
    // DEALLOC_MW of a bound window unbinds it.
    t.dealloc_mw(n).unwrap();
    t.dereg_mr(ro).unwrap();
}

#[test]
fn mp_06_mp_07_remote_access_through_windows() {
    let (mut t, pd) = table();
    let pd2 = t.alloc_pd().unwrap();
    let mut mem = VecMemory::new(0x10_0000, 0x4000);
    let k = reg(&mut t, pd, 0x1000, 0x2000, BIND, 0x10_0000);
    let w2 = t.alloc_mw(pd, MwType::Type2).unwrap();
    let w1 = t.alloc_mw(pd, MwType::Type1).unwrap();
    let (n2, n1) = (bumped(w2), bumped(w1));
    // Free window: no access.
    assert_eq!(
        t.check_remote_at(pd, Some(5), w2, 0x1800, 8, RemoteAccess::Read)
            .err(),
        Some(AccessError::WindowNotBound)
    );
    t.bind_mw(pd, 5, &bind(w2, n2, k, 0x1800, 0x100, Access::REMOTE_WRITE))
        .unwrap();
    t.bind_mw(
        pd,
        6,
        &bind(w1, n1, k, 0x2000, 0x100, Access::REMOTE_ATOMIC),
    )
    .unwrap();
    assert_eq!(t.mr(k).unwrap().windows(), 2);
    // Type 2B: its QP and PD only.
    let r = t
        .check_remote_at(pd, Some(5), n2, 0x1810, 4, RemoteAccess::Write)
        .unwrap();
    r.write(&mut mem, b"abcd").unwrap();
    assert_eq!(&mem.bytes[0x810..0x814], b"abcd");
    fn at(
        t: &MrTable,
        pd: Handle,
        q: Option<u32>,
        key: u32,
        va: u64,
        len: u64,
        need: RemoteAccess,
    ) -> Option<AccessError> {
        t.check_remote_at(pd, q, key, va, len, need).err()
    }
    assert_eq!(
        at(&t, pd, Some(6), n2, 0x1810, 4, RemoteAccess::Write),
        Some(AccessError::WindowWrongQp)
    );
    assert_eq!(
        at(&t, pd2, Some(5), n2, 0x1810, 4, RemoteAccess::Write),
        Some(AccessError::PdMismatch)
    );
    assert_eq!(
        at(&t, pd, Some(5), w2, 0x1810, 4, RemoteAccess::Write),
        Some(AccessError::KeyMismatch)
    );
    assert_eq!(
        at(&t, pd, Some(5), n2, 0x1810, 4, RemoteAccess::Read),
        Some(AccessError::NoRemoteRead)
    );
    assert_eq!(
        at(&t, pd, Some(5), n2, 0x18fe, 4, RemoteAccess::Write),
        Some(AccessError::OutOfBounds)
    );
    assert_eq!(
        at(&t, pd, Some(5), n2, 0x17fe, 4, RemoteAccess::Write),
        Some(AccessError::OutOfBounds)
    );
    // Type 1: any QP of the PD; its own rights (atomic only here).
    assert!(t.check_atomic_at(pd, Some(9), n1, 0x2008).is_ok());
    assert_eq!(
        t.check_atomic_at(pd, Some(9), n1, 0x2100).err(),
        Some(AccessError::OutOfBounds)
    );
    assert_eq!(
        at(&t, pd, Some(9), n1, 0x2000, 8, RemoteAccess::Write),
        Some(AccessError::NoRemoteWrite)
    );
    // Type 1 rebind moves the window; zero length unbinds it.
    let m1 = bumped(n1);
    t.bind_mw(pd, 9, &bind(n1, m1, k, 0x1000, 0x10, Access::REMOTE_READ))
        .unwrap();
    assert_eq!(
        at(&t, pd, Some(9), n1, 0x2000, 8, RemoteAccess::Read),
        Some(AccessError::KeyMismatch)
    );
    assert!(t
        .check_remote_at(pd, None, m1, 0x1000, 8, RemoteAccess::Read)
        .is_ok());
    let u1 = bumped(m1);
    t.bind_mw(pd, 9, &bind(m1, u1, 0, 0, 0, Access(0))).unwrap();
    assert_eq!(t.mr(k).unwrap().windows(), 1);
    assert_eq!(
        at(&t, pd, None, u1, 0x1000, 0, RemoteAccess::Read),
        Some(AccessError::WindowNotBound)
    );
}

#[test]
fn mp_07_o9_5_2_2_invalidate_rules() {
    let (mut t, pd) = table();
    let pd2 = t.alloc_pd().unwrap();
    let k = reg(&mut t, pd, 0x1000, 0x2000, BIND, 0x10_0000);
    let w2 = t.alloc_mw(pd, MwType::Type2).unwrap();
    let w1 = t.alloc_mw(pd, MwType::Type1).unwrap();
    let (n2, n1) = (bumped(w2), bumped(w1));
    t.bind_mw(pd, 5, &bind(w2, n2, k, 0x1000, 0x100, Access::REMOTE_READ))
        .unwrap();
    t.bind_mw(pd, 5, &bind(w1, n1, k, 0x1000, 0x100, Access::REMOTE_READ))
        .unwrap();
    // 3) an MR key, 6) a type 1 window, 1) a stale key, 5/8) another PD or
    // QP: refused, nothing changes.
    assert_eq!(t.invalidate(pd, 5, k), Err(MwError::NotInvalidatable));
    assert_eq!(t.invalidate(pd, 5, n1), Err(MwError::NotInvalidatable));
    assert_eq!(t.invalidate(pd, 5, w2), Err(MwError::NoSuchWindow));
    assert_eq!(t.invalidate(pd2, 5, n2), Err(MwError::PdMismatch));
    assert_eq!(t.invalidate(pd, 6, n2), Err(MwError::WrongQp));
    assert!(t.mw(n2).unwrap().binding().is_some());
    assert_eq!(MwError::WrongQp.status(false), WcStatus::LocProtErr);
    assert_eq!(MwError::NotFree.status(true), WcStatus::MwBindErr);
    t.invalidate(pd, 5, n2).unwrap();
    assert!(t.mw(n2).unwrap().binding().is_none());
    assert_eq!(t.mr(k).unwrap().windows(), 1);
    // Free, same PD: nothing to do (o9-5.2.2 note); another PD: 9).
    t.invalidate(pd, 7, n2).unwrap();
    assert_eq!(t.invalidate(pd2, 7, n2), Err(MwError::PdMismatch));
    // A free type 2 window is bound again with a new key.
    let m2 = bumped(n2);
    t.bind_mw(pd, 7, &bind(n2, m2, k, 0x1000, 0x10, Access::REMOTE_READ))
        .unwrap();
    assert_eq!(t.unbind_qp_windows(7), 1);
    assert_eq!(t.unbind_qp_windows(5), 0);
    assert_eq!(t.mr(k).unwrap().windows(), 1);
}

// ---- MP-01: protection domains ----

#[test]
fn mp_01_pd_alloc_dealloc_and_capacity() {
    let mut t = MrTable::new(2, 8);
    let a = t.alloc_pd().unwrap();
    let b = t.alloc_pd().unwrap();
    assert_ne!(a, 0);
    assert_ne!(a, b);
    assert_eq!(t.alloc_pd(), Err(VerbError::InsufficientResources));
    assert!(t.pd_exists(a));
    t.dealloc_pd(a).unwrap();
    assert!(!t.pd_exists(a));
    assert_eq!(t.dealloc_pd(a), Err(VerbError::InvalidPd));
    let c = t.alloc_pd().unwrap();
    assert_ne!(c, a, "a handle is not reused at once");
    assert_eq!(t.pd_count(), 2);
}

#[test]
fn mp_01_dealloc_pd_with_mr_or_user_is_busy() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0x1000, 16, Access::default(), 0);
    assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
    t.dereg_mr(k).unwrap();
    t.pd_ref(pd).unwrap();
    t.pd_ref(pd).unwrap();
    assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
    t.pd_unref(pd).unwrap();
    assert_eq!(t.dealloc_pd(pd), Err(VerbError::Busy));
    t.pd_unref(pd).unwrap();
    assert_eq!(t.pd_unref(pd), Err(VerbError::InvalidHandle), "unbalanced");
    t.dealloc_pd(pd).unwrap();
    assert_eq!(t.pd_ref(pd), Err(VerbError::InvalidPd));
    assert_eq!(t.pd_unref(pd), Err(VerbError::InvalidPd));
}

#[test]
fn mr_at_finds_the_mr_of_a_key_index_whatever_its_key_byte() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0x1000, 16, Access::default(), 0);
    assert_eq!(t.mr_at(key_index(k)).map(Mr::key), Some(k));
    assert!(t.mr_at(0).is_none());
    assert!(t.mr_at(key_index(k) + 1).is_none());
    assert!(t.mr_at(u32::MAX).is_none());
    t.dereg_mr(k).unwrap();
    assert!(t.mr_at(key_index(k)).is_none());
}

#[test]
fn mp_01_reg_mr_on_unknown_pd_is_invalid_pd() {
    let (mut t, pd) = table();
    assert_eq!(
        t.reg_mr(pd + 1, 0, 0, Access::default(), PS, vec![]),
        Err(VerbError::InvalidPd)
    );
    assert_eq!(t.mr_count(), 0);
}

#[test]
fn mp_01_key_of_another_pd_is_rejected() {
    let (mut t, pd) = table();
    let other = t.alloc_pd().unwrap();
    let k = reg(&mut t, pd, 0x1000, 64, ALL, 0);
    assert!(t.check_local(pd, k, 0x1000, 8, LocalAccess::Read).is_ok());
    let e = t.check_local(other, k, 0x1000, 8, LocalAccess::Read);
    assert_eq!(e.unwrap_err(), AccessError::PdMismatch);
    let e = t.check_remote(other, k, 0x1000, 8, RemoteAccess::Write);
    assert_eq!(e.unwrap_err(), AccessError::PdMismatch);
    assert_eq!(
        t.check_atomic(other, k, 0x1000),
        Err(AccessError::PdMismatch)
    );
}

// ---- MP-02: keys ----

#[test]
fn mp_02_key_is_index_and_key_byte() {
    let (mut t, pd) = table();
    let a = reg(&mut t, pd, 0, 1, Access::default(), 0);
    let b = reg(&mut t, pd, 0, 1, Access::default(), 0);
    assert_eq!(key_index(a), 1, "index 0 is reserved");
    assert_eq!(key_index(b), 2);
    assert_eq!(a & 0xff, u32::from(key_byte(a)));
    assert_eq!(t.mr(a).unwrap().key(), a);
    assert_eq!(t.mr(0), None);
}

/// MP-02: a register/deregister loop on one MR never hands out a key it
/// handed out before within 256 x KEY_QUARANTINE registrations (without the
/// quarantine the same index came back at once and its 8-bit key byte
/// repeated after 256 loops, reviving a stale R_Key).
#[test]
fn mp_02_reregistering_in_a_loop_does_not_revive_a_stale_key() {
    let mut t = MrTable::new(1, 1 << 16);
    let pd = t.alloc_pd().unwrap();
    let mut seen = std::collections::HashSet::new();
    for i in 0..100_000 {
        let k = reg(&mut t, pd, 0x1000, 64, ALL, 0);
        assert!(seen.insert(k), "key {k:#x} handed out twice (loop {i})");
        t.dereg_mr(k).unwrap();
    }
    assert!(
        t.slots.len() <= KEY_QUARANTINE + 1,
        "the table grew only by the quarantine"
    );
}

#[test]
fn mp_02_stale_key_byte_is_rejected() {
    let mut t = MrTable::new(1, 1);
    let pd = t.alloc_pd().unwrap();
    let old = reg(&mut t, pd, 0x1000, 64, ALL, 0);
    t.dereg_mr(old).unwrap();
    assert_eq!(
        t.check_local(pd, old, 0x1000, 1, LocalAccess::Read)
            .unwrap_err(),
        AccessError::NoSuchKey
    );
    // The index comes back after the quarantine.
    let new = loop {
        let k = reg(&mut t, pd, 0x1000, 64, ALL, 0);
        if key_index(k) == key_index(old) {
            break k;
        }
        t.dereg_mr(k).unwrap();
    };
    assert_ne!(key_byte(new), key_byte(old));
    for e in [
        t.check_local(pd, old, 0x1000, 1, LocalAccess::Read).err(),
        t.check_remote(pd, old, 0x1000, 1, RemoteAccess::Read).err(),
        t.check_atomic(pd, old, 0x1000).err(),
    ] {
        assert_eq!(e, Some(AccessError::KeyMismatch));
    }
    assert_eq!(t.dereg_mr(old), Err(VerbError::InvalidHandle));
    assert!(t.check_local(pd, new, 0x1000, 1, LocalAccess::Read).is_ok());
}

#[test]
fn mp_02_key_byte_cycles_through_all_256_values() {
    let mut t = MrTable::new(1, 1);
    let pd = t.alloc_pd().unwrap();
    let mut seen = std::collections::HashSet::new();
    // Index 1 comes back once every KEY_QUARANTINE registrations.
    for _ in 0..256 * KEY_QUARANTINE {
        let k = reg(&mut t, pd, 0, 0, Access::default(), 0);
        if key_index(k) == 1 {
            assert!(seen.insert(key_byte(k)));
        }
        t.dereg_mr(k).unwrap();
    }
    assert_eq!(seen.len(), 256);
}

#[test]
fn mp_02_unknown_index_is_rejected() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0, 8, Access::default(), 0);
    for bad in [0, 0xff, k + (1 << 8), u32::MAX, (9 << 8) | 1] {
        assert_eq!(
            t.check_local(pd, bad, 0, 1, LocalAccess::Read).unwrap_err(),
            AccessError::NoSuchKey,
            "{bad:#x}"
        );
    }
}

// ---- MP-03: registration and translation ----

#[test]
fn mp_03_page_list_must_cover_exactly_the_span() {
    let (mut t, pd) = table();
    let a = Access::default();
    // [0xff0, 0x1010) spans two 4 KiB pages.
    assert!(t
        .reg_mr(pd, 0xff0, 0x20, a, PS, vec![0x5000, 0x9000])
        .is_ok());
    let bad: [Vec<u64>; 3] = [vec![0x5000], vec![0x5000, 0x9000, 0xa000], vec![]];
    for pages in bad {
        assert_eq!(
            t.reg_mr(pd, 0xff0, 0x20, a, PS, pages),
            Err(VerbError::InvalidAttr)
        );
    }
    // Exactly one page, ending on its last byte.
    assert!(t.reg_mr(pd, 0x1001, 0xfff, a, PS, vec![0]).is_ok());
    assert_eq!(
        t.reg_mr(pd, 0x1001, 0x1000, a, PS, vec![0]),
        Err(VerbError::InvalidAttr)
    );
}

#[test]
fn mp_03_page_size_and_alignment_are_checked() {
    let (mut t, pd) = table();
    let a = Access::default();
    for ps in [0, 1, 2048, 4095, 6144, 1 << 31, u64::MAX] {
        assert_eq!(
            t.reg_mr(pd, 0, 1, a, ps, vec![0]),
            Err(VerbError::InvalidAttr),
            "{ps}"
        );
    }
    for ps in [4096, 1 << 21, 1 << 30] {
        assert!(t.reg_mr(pd, ps - 1, 2, a, ps, vec![0, ps]).is_ok(), "{ps}");
    }
    assert_eq!(
        t.reg_mr(pd, 0, 1, a, PS, vec![0x800]),
        Err(VerbError::InvalidAttr)
    );
    // A page whose end is past 2^64.
    let top = u64::MAX - PS + 1;
    assert_eq!(
        t.reg_mr(pd, 0, 1, a, PS, vec![top]),
        Err(VerbError::InvalidAttr)
    );
    assert!(t.reg_mr(pd, 0, 1, a, PS, vec![top - PS]).is_ok());
}

#[test]
fn mp_03_zero_length_mr() {
    let (mut t, pd) = table();
    let k = t.reg_mr(pd, 0x1234, 0, RW, PS, vec![]).unwrap();
    assert_eq!(
        t.reg_mr(pd, 0x1234, 0, RW, PS, vec![0]),
        Err(VerbError::InvalidAttr)
    );
    let r = t
        .check_remote(pd, k, 0x1234, 0, RemoteAccess::Write)
        .unwrap();
    assert!(r.is_empty());
    assert_eq!(r.segments().count(), 0);
    let mut mem = VecMemory::new(0, 16);
    r.write(&mut mem, &[]).unwrap();
    assert_eq!(r.write(&mut mem, &[1]), Err(CopyError::Length));
    assert_eq!(
        t.check_remote(pd, k, 0x1234, 1, RemoteAccess::Write)
            .unwrap_err(),
        AccessError::OutOfBounds
    );
    assert_eq!(
        t.check_remote(pd, k, 0x1235, 0, RemoteAccess::Write)
            .unwrap_err(),
        AccessError::OutOfBounds
    );
}

#[test]
fn mp_03_iova_plus_length_overflow_is_invalid() {
    let (mut t, pd) = table();
    let a = Access::default();
    assert_eq!(
        t.reg_mr(pd, u64::MAX, 1, a, PS, vec![0]),
        Err(VerbError::InvalidAttr)
    );
    assert_eq!(
        t.reg_mr(pd, 1, u64::MAX, a, PS, vec![]),
        Err(VerbError::InvalidAttr)
    );
    // The last byte below 2^64 is addressable: [2^64 - 2, 2^64 - 1).
    let k = t.reg_mr(pd, u64::MAX - 1, 1, a, PS, vec![0x3000]).unwrap();
    let r = t
        .check_local(pd, k, u64::MAX - 1, 1, LocalAccess::Read)
        .unwrap();
    assert_eq!(r.segments().collect::<Vec<_>>(), vec![(0x3ffe, 1)]);
    // A whole-address-space length asks for 2^52 pages: refused, no allocation.
    assert_eq!(
        t.reg_mr(pd, 0, u64::MAX, a, PS, vec![0]),
        Err(VerbError::InvalidAttr)
    );
}

#[test]
fn mp_03_mr_capacity_is_bounded() {
    let mut t = MrTable::new(1, 3);
    let pd = t.alloc_pd().unwrap();
    let keys: Vec<u32> = (0..3)
        .map(|_| reg(&mut t, pd, 0, 1, Access::default(), 0))
        .collect();
    assert_eq!(
        t.reg_mr(pd, 0, 1, Access::default(), PS, vec![0]),
        Err(VerbError::InsufficientResources)
    );
    assert_eq!(t.mr_count(), 3);
    t.dereg_mr(keys[1]).unwrap();
    let k = reg(&mut t, pd, 0, 1, Access::default(), 0);
    // Even at a full table the freed index waits in quarantine (issue 13).
    assert_ne!(key_index(k), key_index(keys[1]));
    assert_eq!(t.mr_count(), 3);
    assert_eq!(MrTable::new(1, u32::MAX).max_mr, MAX_MR_INDEX);
    assert_eq!(MrTable::new(1, u32::MAX).index_limit(), MAX_MR_INDEX);
}

#[test]
fn mp_03_freed_indices_are_reused_oldest_first() {
    let mut t = MrTable::new(1, 3);
    let pd = t.alloc_pd().unwrap();
    let k: Vec<u32> = (0..3)
        .map(|_| reg(&mut t, pd, 0, 1, Access::default(), 0))
        .collect();
    t.dereg_mr(k[2]).unwrap();
    t.dereg_mr(k[0]).unwrap();
    // New indices (each freed at once) until the quarantine is full; then
    // the oldest freed come back first.
    let mut reused = Vec::new();
    for _ in 0..2 * KEY_QUARANTINE {
        let n = reg(&mut t, pd, 0, 1, Access::default(), 0);
        if key_index(n) <= 3 {
            reused.push(key_index(n));
            if reused.len() == 2 {
                break;
            }
        } else {
            t.dereg_mr(n).unwrap();
        }
    }
    assert_eq!(reused, [3, 1]);
}

#[test]
fn mp_03_dereg_unknown_key_is_invalid_handle() {
    let (mut t, pd) = table();
    assert_eq!(t.dereg_mr(0), Err(VerbError::InvalidHandle));
    assert_eq!(t.dereg_mr(0x100), Err(VerbError::InvalidHandle));
    let k = reg(&mut t, pd, 0, 1, Access::default(), 0);
    assert_eq!(t.dereg_mr(k ^ 1), Err(VerbError::InvalidHandle));
    t.dereg_mr(k).unwrap();
    assert_eq!(t.dereg_mr(k), Err(VerbError::InvalidHandle));
    assert_eq!(t.mr_count(), 0);
    t.dealloc_pd(pd).unwrap();
}

#[test]
fn mp_03_rereg_changes_access_pd_and_translation_keeping_the_key() {
    let (mut t, pd) = table();
    let pd2 = t.alloc_pd().unwrap();
    let k = reg(&mut t, pd, 0x1000, 0x100, Access::default(), 0x4000);
    assert_eq!(
        t.check_remote(pd, k, 0x1000, 1, RemoteAccess::Read)
            .unwrap_err(),
        AccessError::NoRemoteRead
    );
    let ch = Rereg {
        access: Some(RW),
        ..Rereg::default()
    };
    assert_eq!(t.rereg_mr(k, ch), Ok(k));
    assert!(t.check_remote(pd, k, 0x1000, 1, RemoteAccess::Read).is_ok());

    let ch = Rereg {
        pd: Some(pd2),
        ..Rereg::default()
    };
    assert_eq!(t.rereg_mr(k, ch), Ok(k));
    assert_eq!(
        t.check_local(pd, k, 0x1000, 1, LocalAccess::Read)
            .unwrap_err(),
        AccessError::PdMismatch
    );
    t.dealloc_pd(pd).unwrap();
    assert_eq!(t.dealloc_pd(pd2), Err(VerbError::Busy));

    let ch = Rereg {
        translation: Some(Translation {
            iova: 0x7ff8,
            length: 16,
            page_size: PS,
            pages: vec![0x9000, 0x2000],
        }),
        ..Rereg::default()
    };
    assert_eq!(t.rereg_mr(k, ch), Ok(k));
    let r = t
        .check_local(pd2, k, 0x7ffc, 8, LocalAccess::Write)
        .unwrap();
    assert_eq!(
        r.segments().collect::<Vec<_>>(),
        vec![(0x9ffc, 4), (0x2000, 4)]
    );
    assert_eq!(
        t.check_local(pd2, k, 0x1000, 1, LocalAccess::Read)
            .unwrap_err(),
        AccessError::OutOfBounds
    );
}

#[test]
fn mp_03_failed_rereg_changes_nothing() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0x1000, 0x100, RW, 0x4000);
    let before = t.mr(k).unwrap().clone();
    let bad = [
        Rereg {
            pd: Some(99),
            access: Some(Access::default()),
            ..Rereg::default()
        },
        Rereg {
            access: Some(Access::REMOTE_WRITE),
            ..Rereg::default()
        },
        Rereg {
            access: Some(Access::default()),
            translation: Some(Translation {
                iova: 0,
                length: 1,
                page_size: PS,
                pages: vec![1],
            }),
            ..Rereg::default()
        },
    ];
    let want = [
        VerbError::InvalidPd,
        VerbError::InvalidAttr,
        VerbError::InvalidAttr,
    ];
    for (ch, e) in bad.into_iter().zip(want) {
        assert_eq!(t.rereg_mr(k, ch), Err(e));
        assert_eq!(t.mr(k), Some(&before));
    }
    assert_eq!(
        t.rereg_mr(k ^ 0x80, Rereg::default()),
        Err(VerbError::InvalidHandle)
    );
}

#[test]
fn mp_03_translation_crosses_pages_at_odd_alignment() {
    let (mut t, pd) = table();
    // [0x10_0ffd, 0x10_3000) spans three pages, out of order in physical memory.
    let pages = vec![0x3000, 0x1000, 0x2000];
    let k = t.reg_mr(pd, 0x10_0ffd, 0x2003, RW, PS, pages).unwrap();
    let r = t
        .check_local(pd, k, 0x10_0ffe, 0x2001, LocalAccess::Write)
        .unwrap();
    assert_eq!(
        r.segments().collect::<Vec<_>>(),
        vec![(0x3ffe, 2), (0x1000, 0x1000), (0x2000, 0xfff)]
    );
    let mut mem = VecMemory::new(0x1000, 0x3000);
    let data: Vec<u8> = (0..0x2001u32).map(|i| (i * 7 + 3) as u8).collect();
    r.write(&mut mem, &data).unwrap();
    assert_eq!(&mem.bytes[0x2ffe..0x3000], &data[..2]);
    assert_eq!(&mem.bytes[..0x1000], &data[2..0x1002]);
    assert_eq!(&mem.bytes[0x1000..0x1fff], &data[0x1002..]);
    let mut back = vec![0; 0x2001];
    r.read(&mem, &mut back).unwrap();
    assert_eq!(back, data);
    let mut short = vec![0; 5];
    r.read(&mem, &mut short).unwrap();
    assert_eq!(short, data[..5]);
    let mut long = vec![0; 0x2002];
    assert_eq!(r.read(&mem, &mut long), Err(CopyError::Length));
}

#[test]
fn mp_03_page_outside_memory_is_mem_error() {
    let (mut t, pd) = table();
    let k = t
        .reg_mr(pd, 0xff8, 16, RW | ALL, PS, vec![0x1000, 0x8000])
        .unwrap();
    let mut mem = VecMemory::new(0x1000, 0x1000);
    let r = t.check_local(pd, k, 0xff8, 16, LocalAccess::Write).unwrap();
    assert_eq!(
        r.write(&mut mem, &[1; 16]),
        Err(CopyError::Mem(MemError {
            addr: 0x8000,
            len: 8
        }))
    );
    let a = t.check_atomic(pd, k, 0x1000).unwrap();
    assert_eq!(a.pa(), 0x8000);
    assert_eq!(
        a.fetch_add(&mut mem, 1),
        Err(MemError {
            addr: 0x8000,
            len: 8
        })
    );
}

// ---- MP-04: rights and bounds ----

#[test]
fn mp_04_remote_write_or_atomic_requires_local_write() {
    let (mut t, pd) = table();
    for a in [
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
        Access::REMOTE_WRITE | Access::REMOTE_READ,
    ] {
        assert_eq!(
            t.reg_mr(pd, 0, 1, a, PS, vec![0]),
            Err(VerbError::InvalidAttr)
        );
        assert!(t
            .reg_mr(pd, 0, 1, a | Access::LOCAL_WRITE, PS, vec![0])
            .is_ok());
    }
    // Remote read alone needs nothing else.
    assert!(t.reg_mr(pd, 0, 1, Access::REMOTE_READ, PS, vec![0]).is_ok());
    assert_eq!(
        t.reg_mr(pd, 0, 1, Access(1 << 5), PS, vec![0]),
        Err(VerbError::NotSupported)
    );
}

#[test]
fn mp_04_local_read_always_local_write_needs_flag() {
    let (mut t, pd) = table();
    let ro = reg(&mut t, pd, 0x1000, 64, Access::default(), 0);
    let rw = reg(&mut t, pd, 0x1000, 64, Access::LOCAL_WRITE, 0);
    assert!(t.check_local(pd, ro, 0x1000, 64, LocalAccess::Read).is_ok());
    assert_eq!(
        t.check_local(pd, ro, 0x1000, 64, LocalAccess::Write)
            .unwrap_err(),
        AccessError::NoLocalWrite
    );
    assert!(t
        .check_local(pd, rw, 0x1000, 64, LocalAccess::Write)
        .is_ok());
    assert_eq!(
        AccessError::NoLocalWrite.local_status(),
        WcStatus::LocProtErr
    );
}

#[test]
fn mp_04_remote_rights_are_checked_per_operation() {
    let (mut t, pd) = table();
    let none = reg(&mut t, pd, 0x1000, 64, Access::LOCAL_WRITE, 0);
    let read = reg(&mut t, pd, 0x1000, 64, Access::REMOTE_READ, 0);
    let write = reg(
        &mut t,
        pd,
        0x1000,
        64,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        0,
    );
    let atomic = reg(
        &mut t,
        pd,
        0x1000,
        64,
        Access::LOCAL_WRITE | Access::REMOTE_ATOMIC,
        0,
    );
    let rd = |k| t.check_remote(pd, k, 0x1000, 8, RemoteAccess::Read).err();
    let wr = |k| t.check_remote(pd, k, 0x1000, 8, RemoteAccess::Write).err();
    let at = |k| t.check_atomic(pd, k, 0x1000).err();
    assert_eq!(rd(none), Some(AccessError::NoRemoteRead));
    assert_eq!(wr(none), Some(AccessError::NoRemoteWrite));
    assert_eq!(at(none), Some(AccessError::NoRemoteAtomic));
    assert_eq!(
        (rd(read), wr(read), at(read).is_some()),
        (None, Some(AccessError::NoRemoteWrite), true)
    );
    assert_eq!(
        (rd(write).is_some(), wr(write), at(write).is_some()),
        (true, None, true)
    );
    assert_eq!(
        (rd(atomic).is_some(), wr(atomic).is_some(), at(atomic)),
        (true, true, None)
    );
    assert_eq!(
        AccessError::NoRemoteWrite.remote_nak(),
        NakCode::RemoteAccessError
    );
}

#[test]
fn mp_04_bounds_are_checked_without_overflow() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0x1000, 0x100, ALL, 0);
    let chk = |va, len| t.check_remote(pd, k, va, len, RemoteAccess::Read).err();
    assert_eq!(chk(0x1000, 0x100), None);
    assert_eq!(chk(0x10ff, 1), None);
    assert_eq!(chk(0x1100, 0), None);
    assert_eq!(chk(0xfff, 1), Some(AccessError::OutOfBounds));
    assert_eq!(chk(0x1000, 0x101), Some(AccessError::OutOfBounds));
    assert_eq!(chk(0x1100, 1), Some(AccessError::OutOfBounds));
    assert_eq!(chk(0x1001, u64::MAX), Some(AccessError::OutOfBounds));
    assert_eq!(chk(u64::MAX, u64::MAX), Some(AccessError::OutOfBounds));
    assert_eq!(chk(0, u64::MAX), Some(AccessError::OutOfBounds));
    assert_eq!(t.check_atomic(pd, k, 0x10f8).err(), None);
    assert_eq!(
        t.check_atomic(pd, k, 0x1100).err(),
        Some(AccessError::OutOfBounds)
    );
    assert_eq!(
        t.check_atomic(pd, k, u64::MAX - 7).err(),
        Some(AccessError::OutOfBounds)
    );
}

#[test]
fn op_07_misaligned_atomic_is_invalid_request() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0x1003, 0x100, ALL, 0x2000);
    for va in [0x1004, 0x1009, 0x100f] {
        let e = t.check_atomic(pd, k, va).unwrap_err();
        assert_eq!(e, AccessError::MisalignedAtomic);
        assert_eq!(e.remote_nak(), NakCode::InvalidRequest);
    }
    // Aligned VA inside an MR whose IOVA is not aligned: aligned PA.
    let a = t.check_atomic(pd, k, 0x1008).unwrap();
    assert_eq!(a.pa(), 0x2008);
    // The word must lie wholly inside the MR.
    assert_eq!(t.check_atomic(pd, k, 0x1000), Err(AccessError::OutOfBounds));
    assert_eq!(t.check_atomic(pd, k, 0x1100), Err(AccessError::OutOfBounds));
}

#[test]
fn op_07_atomics_go_to_the_translated_word() {
    let (mut t, pd) = table();
    let k = t
        .reg_mr(pd, 0x7000, 0x2000, ALL, PS, vec![0x2000, 0x1000])
        .unwrap();
    let mut mem = VecMemory::new(0x1000, 0x2000);
    let a = t.check_atomic(pd, k, 0x8010).unwrap();
    assert_eq!(a.pa(), 0x1010);
    assert_eq!(a.fetch_add(&mut mem, 5).unwrap(), 0);
    assert_eq!(a.compare_swap(&mut mem, 5, 9).unwrap(), 5);
    assert_eq!(a.compare_swap(&mut mem, 5, 1).unwrap(), 9);
    assert_eq!(&mem.bytes[0x10..0x18], &9u64.to_le_bytes());
}

// ---- MP-05: gather / scatter over SGE lists ----

fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

#[test]
fn mp_05_sge_total_len_is_overflow_safe() {
    assert_eq!(sge_total_len(&[]), Some(0));
    assert_eq!(
        sge_total_len(&[sge(0, u32::MAX, 0), sge(0, 1, 0)]),
        Some(1 << 32)
    );
    let (t, pd) = table();
    assert_eq!(t.check_sges(pd, &[sge(0, 0, 0)], LocalAccess::Write), Ok(0));
}

#[test]
fn mp_05_gather_and_scatter_at_running_offsets() {
    let (mut t, pd) = table();
    let a = t
        .reg_mr(pd, 0x1ffe, 0x10, RW, PS, vec![0x3000, 0x1000])
        .unwrap();
    let b = t.reg_mr(pd, 0x500, 0x10, RW, PS, vec![0x2000]).unwrap();
    let sges = [
        sge(0x1ffe, 5, a),
        sge(0x1234, 0, 0xdead),
        sge(0x508, 6, b),
        sge(0x2003, 3, a),
    ];
    assert_eq!(t.check_sges(pd, &sges, LocalAccess::Write), Ok(14));
    let mut mem = VecMemory::new(0x1000, 0x3000);
    let data: Vec<u8> = (1..=14).collect();
    // Place the message in three packets of 4, 4 and 6 bytes.
    t.scatter(&mut mem, pd, &sges, 0, &data[..4]).unwrap();
    t.scatter(&mut mem, pd, &sges, 4, &data[4..8]).unwrap();
    t.scatter(&mut mem, pd, &sges, 8, &data[8..]).unwrap();
    assert_eq!(&mem.bytes[0x2ffe..0x3000], &[1, 2]);
    assert_eq!(&mem.bytes[0..3], &[3, 4, 5]);
    assert_eq!(&mem.bytes[0x1508..0x150e], &[6, 7, 8, 9, 10, 11]);
    assert_eq!(&mem.bytes[3..6], &[12, 13, 14]);
    for (off, n) in [(0, 14), (3, 7), (13, 1), (14, 0), (5, 0)] {
        let mut out = vec![0; n];
        t.gather(&mem, pd, &sges, off as u64, &mut out).unwrap();
        assert_eq!(out, data[off..off + n], "{off}+{n}");
    }
}

#[test]
fn mp_05_scatter_past_the_list_is_length_error_and_writes_nothing() {
    let (mut t, pd) = table();
    let k = reg(&mut t, pd, 0x1000, 8, RW, 0x1000);
    let sges = [sge(0x1000, 8, k)];
    let mut mem = VecMemory::new(0x1000, 0x1000);
    assert_eq!(
        t.scatter(&mut mem, pd, &sges, 4, &[9; 5]),
        Err(CopyError::Length)
    );
    assert_eq!(
        t.scatter(&mut mem, pd, &sges, u64::MAX, &[9]),
        Err(CopyError::Length)
    );
    assert_eq!(
        t.gather(&mem, pd, &sges, 9, &mut []),
        Err(CopyError::Length)
    );
    assert_eq!(t.gather(&mem, pd, &sges, 8, &mut []), Ok(()));
    assert!(mem.bytes.iter().all(|&b| b == 0));
    t.scatter(&mut mem, pd, &sges, 4, &[9; 4]).unwrap();
    assert_eq!(&mem.bytes[..8], &[0, 0, 0, 0, 9, 9, 9, 9]);
}

#[test]
fn mp_05_bad_sge_is_local_protection_error_before_any_write() {
    let (mut t, pd) = table();
    let other = t.alloc_pd().unwrap();
    let good = reg(&mut t, pd, 0x1000, 8, RW, 0x1000);
    let ro = reg(&mut t, pd, 0x1000, 8, Access::default(), 0x1000);
    let foreign = reg(&mut t, other, 0x1000, 8, RW, 0x1000);
    let mut mem = VecMemory::new(0x1000, 0x1000);
    let cases = [
        (sge(0x1000, 8, ro), AccessError::NoLocalWrite),
        (sge(0x1000, 8, foreign), AccessError::PdMismatch),
        (sge(0x1001, 8, good), AccessError::OutOfBounds),
        (sge(u64::MAX, 8, good), AccessError::OutOfBounds),
        (sge(0x1000, 8, good ^ 0x40), AccessError::KeyMismatch),
        (sge(0x1000, 8, 0), AccessError::NoSuchKey),
    ];
    for (bad, why) in cases {
        let sges = [sge(0x1000, 8, good), bad];
        assert_eq!(
            t.scatter(&mut mem, pd, &sges, 0, &[7; 16]),
            Err(CopyError::Access(why))
        );
        assert_eq!(
            t.check_sges(pd, &sges, LocalAccess::Write),
            Err(CopyError::Access(why))
        );
        assert!(mem.bytes.iter().all(|&b| b == 0), "{why:?}");
        // The bad SGE is not touched by a copy that ends before it.
        t.scatter(&mut mem, pd, &sges, 0, &[0; 8]).unwrap();
    }
    // Gather needs only local read.
    let mut out = [0; 8];
    t.gather(&mem, pd, &[sge(0x1000, 8, ro)], 0, &mut out)
        .unwrap();
}

// ---- properties ----

/// An MR over shuffled pages of a small memory, with random bytes, and its flat
/// virtual view built byte by byte.
fn fixture(
    iova: u64,
    len: u64,
    shift: u32,
    perm: &[usize],
    seed: u8,
) -> (MrTable, Handle, u32, VecMemory, Vec<u8>) {
    let ps = 1u64 << shift;
    let n = if len == 0 {
        0
    } else {
        ((iova % ps) + len).div_ceil(ps)
    } as usize;
    let base = 0x10_0000u64;
    let pages: Vec<u64> = (0..n).map(|i| base + perm[i] as u64 * ps).collect();
    let mut mem = VecMemory::new(base, perm.len() << shift);
    for (i, b) in mem.bytes.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
    let mut t = MrTable::new(1, 4);
    let pd = t.alloc_pd().unwrap();
    let k = t.reg_mr(pd, iova, len, ALL, ps, pages.clone()).unwrap();
    let flat = flat_view(&mem, iova, len, ps, &pages);
    (t, pd, k, mem, flat)
}

fn flat_view(mem: &VecMemory, iova: u64, len: u64, ps: u64, pages: &[u64]) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let v = iova % ps + i;
            let pa = pages[(v / ps) as usize] + v % ps;
            mem.bytes[(pa - mem.base) as usize]
        })
        .collect()
}

proptest! {
    #[test]
    fn mp_03_translation_matches_flat_reference(
        iova in prop_oneof![0u64..0x3_0000, (u64::MAX - 0x3_0000)..u64::MAX - 0x8000],
        len in 0u64..0x5000,
        shift in 12u32..14,
        perm in Just((0..8usize).collect::<Vec<_>>()).prop_shuffle(),
        a in 0u64..0x5000,
        b in 0u64..0x5000,
        seed: u8,
    ) {
        let (t, pd, k, mut mem, mut flat) = fixture(iova, len, shift, &perm, seed);
        let (lo, hi) = (a.min(b) % (len + 1), a.max(b) % (len + 1));
        let (lo, hi) = (lo.min(hi), lo.max(hi));
        let n = (hi - lo) as usize;
        let r = t.check_local(pd, k, iova + lo, hi - lo, LocalAccess::Write).unwrap();
        // The segments are contiguous in VA and stay inside pages.
        let total: u64 = r.segments().map(|(_, l)| l).sum();
        prop_assert_eq!(total, hi - lo);
        for (pa, l) in r.segments() {
            prop_assert!(l > 0 && (pa % (1 << shift)) + l <= 1 << shift);
        }
        let mut out = vec![0; n];
        r.read(&mem, &mut out).unwrap();
        prop_assert_eq!(&out[..], &flat[lo as usize..hi as usize]);
        let data: Vec<u8> = (0..n).map(|i| (i as u8) ^ seed ^ 0x5a).collect();
        r.write(&mut mem, &data).unwrap();
        flat[lo as usize..hi as usize].copy_from_slice(&data);
        let pages = t.mr(k).unwrap().pages().to_vec();
        prop_assert_eq!(flat_view(&mem, iova, len, 1 << shift, &pages), flat);
    }

    #[test]
    fn mp_05_gather_scatter_match_concatenated_reference(
        cuts in proptest::collection::vec((0u64..0x2400, 0u32..0x900), 0..6),
        off in 0u64..0x3000,
        n in 0usize..0x2000,
        seed: u8,
    ) {
        let (t, pd, k, mut mem, mut flat) =
            fixture(0x7ff, 0x2400, 12, &[3, 0, 2, 1, 4, 5, 6, 7], seed);
        let sges: Vec<Sge> = cuts
            .iter()
            .map(|&(start, l)| sge(0x7ff + start, l.min((0x2400 - start) as u32), k))
            .collect();
        // The reference: the SGEs' bytes concatenated.
        let concat = |flat: &[u8]| -> Vec<u8> {
            sges.iter()
                .flat_map(|s| flat[(s.addr - 0x7ff) as usize..][..s.length as usize].to_vec())
                .collect()
        };
        let total = sge_total_len(&sges).unwrap();
        let mut out = vec![0; n];
        let fits = off + n as u64 <= total;
        let res = t.gather(&mem, pd, &sges, off, &mut out);
        if fits {
            prop_assert_eq!(res, Ok(()));
            prop_assert_eq!(&out[..], &concat(&flat)[off as usize..][..n]);
        } else {
            prop_assert_eq!(res, Err(CopyError::Length));
        }
        let data: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect();
        let res = t.scatter(&mut mem, pd, &sges, off, &data);
        if fits {
            prop_assert_eq!(res, Ok(()));
            // Apply the same placement to the flat view, SGE by SGE.
            let mut pos = 0u64;
            for s in &sges {
                for j in 0..u64::from(s.length) {
                    if pos >= off && pos < off + n as u64 {
                        flat[(s.addr - 0x7ff + j) as usize] = data[(pos - off) as usize];
                    }
                    pos += 1;
                }
            }
        } else {
            prop_assert_eq!(res, Err(CopyError::Length));
        }
        let pages = t.mr(k).unwrap().pages().to_vec();
        prop_assert_eq!(flat_view(&mem, 0x7ff, 0x2400, PS, &pages), flat);
    }

    #[test]
    fn mp_04_checks_never_panic(
        regs in proptest::collection::vec(
            (any::<u64>(), prop_oneof![any::<u64>(), 0u64..0x3000], any::<u32>(),
             prop_oneof![Just(4096u64), any::<u64>()],
             proptest::collection::vec(any::<u64>(), 0..4)),
            0..6),
        ops in proptest::collection::vec(
            (0u8..8, any::<u32>(), any::<u64>(), any::<u64>(), 1u32..4), 0..32),
    ) {
        let mut t = MrTable::new(3, 4);
        let pds: Vec<Handle> = (0..3).map(|_| t.alloc_pd().unwrap()).collect();
        let mut keys = vec![0u32];
        let mut mem = VecMemory::new(0, 0x4000);
        for (i, (iova, len, access, ps, pages)) in regs.into_iter().enumerate() {
            // Half the time, a page list that fits, to reach the data path.
            let pages = if i % 2 == 0 && len < 0x3000 {
                let n = if len == 0 { 0 } else { ((iova % 4096) + len).div_ceil(4096) };
                (0..n).map(|j| (j % 4) * 4096).collect()
            } else {
                pages
            };
            let access = Access(access & 0x1f);
            if let Ok(k) = t.reg_mr(pds[i % 3], iova, len, access, ps, pages) {
                keys.push(k);
            }
        }
        for (op, key, va, len, pd) in ops {
            let key = if key % 2 == 0 { keys[key as usize % keys.len()] } else { key };
            let pd = pd as Handle;
            match op {
                0 => {
                    let r = t.check_local(pd, key, va, len, LocalAccess::Write);
                    let _ = r.map(|r| r.segments().count());
                }
                1 => { let _ = t.check_remote(pd, key, va, len, RemoteAccess::Read); }
                2 => { let _ = t.check_remote(pd, key, va, len, RemoteAccess::Write); }
                3 => {
                    if let Ok(a) = t.check_atomic(pd, key, va) {
                        let _ = a.fetch_add(&mut mem, 1);
                    }
                }
                4 => {
                    let sges = [sge(va, len as u32, key), sge(len, va as u32 & 0xfff, key)];
                    let mut out = vec![0; (len % 0x2000) as usize];
                    let _ = t.gather(&mem, pd, &sges, va % 0x3000, &mut out);
                    let _ = t.scatter(&mut mem, pd, &sges, len, &out);
                    let _ = t.check_sges(pd, &sges, LocalAccess::Read);
                }
                5 => {
                    let len = len % 0x1_0000;
                    if let Ok(r) = t.check_local(pd, key, va, len, LocalAccess::Read) {
                        let mut out = vec![0; r.len() as usize];
                        let _ = r.read(&mem, &mut out);
                    }
                }
                6 => {
                    let access = Some(Access(len as u32 & 0x1f));
                    let ch = Rereg { pd: Some(pd), access, translation: None };
                    let _ = t.rereg_mr(key, ch);
                }
                _ => { let _ = t.dereg_mr(key); }
            }
        }
    }
}

#[cfg(test)]
mod dma_mr_tests {
    use super::*;
    use crate::memory::VecMemory;

    /// A DMA MR (get_dma_mr): virtual = physical over the whole address space;
    /// the memory, not the MR, refuses what is not mapped. Deregistration and a
    /// translation change end the identity mapping.
    #[test]
    fn mp_02_dma_mr_is_an_identity_mapping_checked_by_memory() {
        let mut t = MrTable::new(4, 8);
        let pd = t.alloc_pd().unwrap();
        let key = t.reg_dma_mr(pd, Access::LOCAL_WRITE).unwrap();
        let mr = t.mr(key).unwrap();
        assert!(mr.is_identity());
        assert_eq!((mr.iova(), mr.length()), (0, u64::MAX));
        let mut mem = VecMemory::new(0x10_0000, 0x4000);
        mem.write(0x10_1ffe, b"abcd").unwrap();
        let sge = Sge {
            addr: 0x10_1ffe,
            length: 4,
            lkey: key,
        };
        let mut buf = [0u8; 4];
        t.gather(&mem, pd, &[sge], 0, &mut buf).unwrap();
        assert_eq!(&buf, b"abcd");
        // Outside the memory: an error, not a read elsewhere.
        let far = Sge {
            addr: 0x90_0000,
            ..sge
        };
        assert!(t.gather(&mem, pd, &[far], 0, &mut buf).is_err());
        // Past 2^64: refused by the bounds check.
        let wrap = Sge {
            addr: u64::MAX - 1,
            ..sge
        };
        assert!(t.gather(&mem, pd, &[wrap], 0, &mut buf).is_err());
        // Other PD: refused.
        let pd2 = t.alloc_pd().unwrap();
        assert!(t.gather(&mem, pd2, &[sge], 0, &mut buf).is_err());
        // Remote write without local write: refused as for any MR (MP-04).
        assert_eq!(
            t.reg_dma_mr(pd, Access::REMOTE_WRITE),
            Err(VerbError::InvalidAttr)
        );
        t.dereg_mr(key).unwrap();
        assert!(t.gather(&mem, pd, &[sge], 0, &mut buf).is_err());
    }
}

/// MP-02, issue 13: a register/deregister loop does not get a key it had
/// before, where the old code reused the freed index at once and its 8-bit
/// key byte came round after 256 loops (a peer holding the old R_Key would
/// reach the new MR). MWs take keys from the same table.
#[test]
fn mp_02_a_register_deregister_loop_never_revives_a_key() {
    let mut t = MrTable::new(4, 1 << 16);
    let pd = t.alloc_pd().unwrap();
    let mut seen = std::collections::HashSet::new();
    for round in 0..4 * 256 {
        let k = if round % 2 == 0 {
            reg(&mut t, pd, 0x1000, 4096, RW, 0x10_0000)
        } else {
            t.alloc_mw(pd, MwType::Type2).unwrap()
        };
        assert!(seen.insert(k), "round {round}: key {k:#x} handed out again");
        if round % 2 == 0 {
            t.dereg_mr(k).unwrap();
        } else {
            t.dealloc_mw(k).unwrap();
        }
    }
}

/// MP-02, issue 13: a guest that fills the table (every MR it may have) and
/// then registers and deregisters in a loop must not defeat the quarantine:
/// the table's indices go `KEY_QUARANTINE` past `max_mr` (the live count
/// stays capped at `max_mr`), so a freed index still waits behind at least
/// that many others, and no key comes back within 256 x KEY_QUARANTINE
/// registrations (before: a full table had one free index, reused at once,
/// and its key byte came round after 256 loops).
#[test]
fn mp_02_a_full_table_does_not_defeat_the_quarantine() {
    let max_mr = 8;
    let mut t = MrTable::new(1, max_mr);
    let pd = t.alloc_pd().unwrap();
    let mut seen = std::collections::HashSet::new();
    let live: Vec<u32> = (0..max_mr - 1)
        .map(|_| reg(&mut t, pd, 0x1000, 64, ALL, 0))
        .collect();
    for &k in &live {
        seen.insert(k);
    }
    for i in 0..256 * KEY_QUARANTINE as u32 {
        let k = reg(&mut t, pd, 0x1000, 64, ALL, 0);
        // The table is full: one more is refused (the live cap holds).
        if i == 0 {
            assert_eq!(
                t.reg_dma_mr(pd, Access::LOCAL_WRITE),
                Err(VerbError::InsufficientResources)
            );
        }
        assert!(seen.insert(k), "key {k:#x} handed out again (loop {i})");
        t.dereg_mr(k).unwrap();
    }
    assert!(t.slots.len() <= max_mr as usize + KEY_QUARANTINE);
    for k in live {
        assert!(t.mr(k).is_some());
    }
}
