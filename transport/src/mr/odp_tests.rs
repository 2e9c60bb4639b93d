//! ODP MRs (issue 29): the sparse translation, the page fault as a result of its
//! own, MAP / UNMAP / FAULT_FAIL and their bounds.

use super::super::*;
use crate::memory::{Memory, VecMemory};
use crate::verbs::{Access, Sge, VerbError};

const PS: u64 = 4096;
const RW: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

fn table() -> (MrTable, crate::verbs::Handle) {
    let mut t = MrTable::new(4, 8);
    let pd = t.alloc_pd().unwrap();
    (t, pd)
}

#[test]
fn a_missing_page_is_a_page_fault_not_an_access_error() {
    let (mut t, pd) = table();
    let k = t.reg_odp_mr(pd, 0x10_0800, 3 * PS, RW).unwrap();
    let mut mem = VecMemory::new(0, 0x40_0000);
    // Checks pass (rights and bounds are the MR's); the copy faults.
    let r = t
        .check_remote(pd, k, 0x10_1000, 16, RemoteAccess::Write)
        .unwrap();
    let e = r.write(&mut mem, &[7; 16]).unwrap_err();
    assert_eq!(
        e,
        CopyError::PageFault(OdpFault {
            key: k,
            vpn: 0x101,
            npages: 1,
            write: true,
        })
    );
    // A read across pages 0x100..=0x102: the first missing run is named.
    let r = t
        .check_remote(pd, k, 0x10_0800, 2 * PS, RemoteAccess::Read)
        .unwrap();
    let mut buf = vec![0; 2 * PS as usize];
    match r.read(&mem, &mut buf) {
        Err(CopyError::PageFault(f)) => {
            assert_eq!((f.vpn, f.npages, f.write), (0x100, 3, false));
        }
        other => panic!("{other:?}"),
    }
    // Still an access error where the MR says so.
    assert_eq!(
        t.check_remote(pd, k, 0x10_0000, 16, RemoteAccess::Write)
            .err(),
        Some(AccessError::OutOfBounds)
    );
}

#[test]
fn map_installs_pages_and_copies_land_in_them() {
    let (mut t, pd) = table();
    let k = t.reg_odp_mr(pd, 0x10_0800, 3 * PS, RW).unwrap();
    let mut mem = VecMemory::new(0, 0x40_0000);
    // vpns 0x100..=0x103 span the MR; map 0x101 and 0x102 to scattered pages.
    t.odp_map(k, 0x10_1000, &[0x30_0000, 0x20_0000]).unwrap();
    let r = t
        .check_remote(pd, k, 0x10_1ff8, 16, RemoteAccess::Write)
        .unwrap();
    r.write(&mut mem, &(0..16).collect::<Vec<u8>>()).unwrap();
    let mut a = [0u8; 8];
    mem.read(0x30_0ff8, &mut a).unwrap();
    assert_eq!(a, [0, 1, 2, 3, 4, 5, 6, 7]);
    mem.read(0x20_0000, &mut a).unwrap();
    assert_eq!(a, [8, 9, 10, 11, 12, 13, 14, 15]);
    assert_eq!(t.odp_entries(), 2);
    // The page before is still missing.
    let r = t
        .check_remote(pd, k, 0x10_0ff0, 32, RemoteAccess::Read)
        .unwrap();
    let mut b = [0u8; 32];
    assert!(matches!(
        r.read(&mem, &mut b),
        Err(CopyError::PageFault(OdpFault {
            vpn: 0x100,
            npages: 1,
            ..
        }))
    ));
}

#[test]
fn unmap_removes_translations_and_nothing_reaches_the_old_page() {
    let (mut t, pd) = table();
    let k = t.reg_odp_mr(pd, 0x1000, 2 * PS, RW).unwrap();
    let mut mem = VecMemory::new(0, 0x40_0000);
    t.odp_map(k, 0x1000, &[0x10_0000, 0x11_0000]).unwrap();
    assert_eq!(t.odp_unmap(k, 0x1800, 0x10), Ok((1, 1)), "rounded out");
    assert_eq!(
        t.odp_unmap(k, 0x1fff, 2),
        Ok((1, 2)),
        "rounded out across pages"
    );
    t.odp_map(k, 0x2000, &[0x11_0000]).unwrap();
    assert_eq!(t.odp_entries(), 1);
    let r = t
        .check_remote(pd, k, 0x1000, 8, RemoteAccess::Write)
        .unwrap();
    assert!(matches!(
        r.write(&mut mem, &[1; 8]),
        Err(CopyError::PageFault(_))
    ));
    // The segments of an unmapped page end: no stale address.
    assert_eq!(r.segments().count(), 0);
    let mut b = [0u8; 8];
    mem.read(0x10_0000, &mut b).unwrap();
    assert_eq!(b, [0; 8], "the old page was not written");
    // Page 2 is still there.
    let r = t
        .check_remote(pd, k, 0x2000, 8, RemoteAccess::Write)
        .unwrap();
    r.write(&mut mem, &[2; 8]).unwrap();
}

#[test]
fn fault_fail_makes_pages_an_access_error_until_mapped() {
    let (mut t, pd) = table();
    let k = t.reg_odp_mr(pd, 0x1000, 4 * PS, RW).unwrap();
    t.odp_fail(k, 0x2000, PS).unwrap();
    assert_eq!(
        t.check_remote(pd, k, 0x2ff8, 16, RemoteAccess::Write).err(),
        Some(AccessError::OdpFailed)
    );
    assert_eq!(
        t.check_local(pd, k, 0x2000, 1, LocalAccess::Read).err(),
        Some(AccessError::OdpFailed)
    );
    assert_eq!(
        t.check_atomic(pd, k, 0x2008).err(),
        Some(AccessError::OdpFailed)
    );
    // Other pages fault as before.
    let a = t.check_atomic(pd, k, 0x1008).unwrap();
    assert_eq!(a.odp_fault().map(|f| f.vpn), Some(1));
    let mut mem = VecMemory::new(0, 0x40_0000);
    assert!(
        a.fetch_add(&mut mem, 1).is_err(),
        "nothing runs on a missing page"
    );
    // A MAP clears the mark.
    t.odp_map(k, 0x2000, &[0x10_0000]).unwrap();
    let a = t.check_atomic(pd, k, 0x2008).unwrap();
    assert_eq!(a.odp_fault(), None);
    assert_eq!(a.fetch_add(&mut mem, 5).unwrap(), 0);
    assert_eq!(a.fetch_add(&mut mem, 0).unwrap(), 5);
}

#[test]
fn map_unmap_fail_refuse_what_is_not_an_odp_mr_or_outside_it() {
    let (mut t, pd) = table();
    let plain = t.reg_mr(pd, 0x1000, PS, RW, PS, vec![0x10_0000]).unwrap();
    let k = t.reg_odp_mr(pd, 0x1000, 2 * PS, RW).unwrap();
    assert_eq!(
        t.odp_map(plain, 0x1000, &[0]),
        Err(VerbError::InvalidHandle)
    );
    assert_eq!(
        t.odp_map(k ^ 1, 0x1000, &[0]),
        Err(VerbError::InvalidHandle)
    );
    assert_eq!(t.odp_map(k, 0x1800, &[0]), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_map(k, 0x1000, &[0x123]), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_map(k, 0x1000, &[]), Err(VerbError::InvalidAttr));
    assert_eq!(
        t.odp_map(k, 0x2000, &[0, 0x1000]),
        Err(VerbError::InvalidAttr),
        "past the MR's last page"
    );
    assert_eq!(t.odp_map(k, 0, &[0]), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_map(k, 0x1000, &[!0xfff]), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_unmap(k, 0x1000, 0), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_unmap(k, u64::MAX, 2), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_fail(k, 0x3000, 1), Err(VerbError::InvalidAttr));
    assert_eq!(t.odp_entries(), 0, "nothing changed");
    // An ODP MR is not reregistered.
    assert_eq!(
        t.rereg_mr(k, Rereg::default()),
        Err(VerbError::NotSupported)
    );
}

#[test]
fn implicit_mr_spans_everything_and_the_engine_cap_bounds_it() {
    let (mut t, pd) = table();
    t.set_max_odp_entries(4);
    let k = t.reg_odp_mr(pd, 0, u64::MAX, RW).unwrap();
    assert!(t.mr(k).unwrap().is_implicit_odp());
    let mut mem = VecMemory::new(0, 0x40_0000);
    // Anywhere in the address space: a fault, never out of bounds.
    let r = t
        .check_local(pd, k, 0xffff_ffff_f000, 8, LocalAccess::Write)
        .unwrap();
    assert!(
        matches!(r.write(&mut mem, &[0; 8]), Err(CopyError::PageFault(f)) if f.vpn == 0xf_ffff_ffff)
    );
    t.odp_map(k, 0xffff_ffff_f000, &[0x1000]).unwrap();
    t.odp_map(k, 0x7000_0000, &[0x2000, 0x3000, 0x4000])
        .unwrap();
    assert_eq!(t.odp_entries(), 4);
    // Past the cap: refused whole, nothing installed.
    assert_eq!(
        t.odp_map(k, 0x8000_0000, &[0x5000]),
        Err(VerbError::InsufficientResources)
    );
    // Replacing present pages adds nothing.
    t.odp_map(k, 0x7000_1000, &[0x6000]).unwrap();
    assert_eq!(t.odp_entries(), 4);
    let r = t
        .check_local(pd, k, 0x7000_1000, 8, LocalAccess::Write)
        .unwrap();
    r.write(&mut mem, &[9; 8]).unwrap();
    let mut b = [0u8; 8];
    mem.read(0x6000, &mut b).unwrap();
    assert_eq!(b, [9; 8]);
    // Deregistering gives the entries back.
    t.dereg_mr(k).unwrap();
    assert_eq!(t.odp_entries(), 0);
}

#[test]
fn an_odp_mr_never_holds_more_entries_than_its_pages() {
    let (mut t, pd) = table();
    let k = t.reg_odp_mr(pd, 0x1000, 2 * PS, RW).unwrap();
    for _ in 0..10 {
        t.odp_map(k, 0x1000, &[0x10_0000, 0x11_0000]).unwrap();
    }
    assert_eq!(t.mr(k).unwrap().odp_pages().unwrap().len(), 2);
    assert_eq!(t.odp_entries(), 2);
}

#[test]
fn failed_ranges_are_bounded_per_mr() {
    let (mut t, pd) = table();
    let k = t.reg_odp_mr(pd, 0, u64::MAX, RW).unwrap();
    for i in 0..MAX_FAILED_RANGES as u64 {
        t.odp_fail(k, i * 2 * PS, 1).unwrap();
    }
    assert_eq!(
        t.odp_fail(k, 1 << 40, 1),
        Err(VerbError::InsufficientResources)
    );
    // Adjacent or overlapping marks merge, so a fail next to one is no new range
    // only when the table has room; a MAP splits and clears.
    t.odp_map(k, 0, &[0x1000]).unwrap();
    t.odp_fail(k, 1 << 40, 1).unwrap();
}

#[test]
fn gather_and_scatter_fault_before_touching_any_sge() {
    let (mut t, pd) = table();
    let plain = t.reg_mr(pd, 0x1000, PS, RW, PS, vec![0x10_0000]).unwrap();
    let k = t.reg_odp_mr(pd, 0x8000, PS, RW).unwrap();
    let mut mem = VecMemory::new(0, 0x40_0000);
    let sges = [
        Sge {
            addr: 0x1000,
            length: 8,
            lkey: plain,
        },
        Sge {
            addr: 0x8000,
            length: 8,
            lkey: k,
        },
    ];
    let e = t.scatter(&mut mem, pd, &sges, 0, &[5; 16]).unwrap_err();
    assert!(matches!(e, CopyError::PageFault(f) if f.key == k && f.write));
    let mut b = [0u8; 8];
    mem.read(0x10_0000, &mut b).unwrap();
    assert_eq!(b, [0; 8], "the first SGE was not written either");
    let mut out = [0u8; 16];
    assert!(matches!(
        t.gather(&mem, pd, &sges, 0, &mut out),
        Err(CopyError::PageFault(f)) if !f.write
    ));
    t.odp_map(k, 0x8000, &[0x20_0000]).unwrap();
    t.scatter(&mut mem, pd, &sges, 0, &[5; 16]).unwrap();
    t.gather(&mem, pd, &sges, 0, &mut out).unwrap();
    assert_eq!(out, [5; 16]);
}
