//! Linear translations (device memory, issue 29 item 2): an MR whose bytes are
//! one physical range, `pa = base + (va - iova)`, bounded by the MR.

use super::*;
use crate::memory::{Memory, VecMemory};
use crate::verbs::Sge;

const RW: Access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);
const ALL: Access = Access(RW.0 | Access::REMOTE_ATOMIC.0);

/// Where the tests put the "device memory": a range far from address 0, as
/// the device's DM window is.
const BASE: u64 = 1 << 62;

fn setup() -> (MrTable, Handle, VecMemory) {
    let mut t = MrTable::new(4, 8);
    let pd = t.alloc_pd().unwrap();
    (t, pd, VecMemory::new(BASE, 0x4000))
}

/// A zero-based MR (IOVA 0) over `[BASE + 0x1000, BASE + 0x1100)`: a local
/// write and a remote read land at `base + (va - iova)`, byte-exact, and
/// one segment covers a range across a 4 KiB boundary of the physical side.
#[test]
fn linear_mr_translates_va_to_base_plus_offset() {
    let (mut t, pd, mut mem) = setup();
    let key = t.reg_linear_mr(pd, 0, 0x100, RW, BASE + 0x1000).unwrap();
    let mr = t.mr(key).unwrap();
    assert_eq!(mr.linear(), Some(BASE + 0x1000));
    assert!(!mr.is_identity());
    let sge = Sge {
        addr: 0x10,
        length: 4,
        lkey: key,
    };
    t.scatter(&mut mem, pd, &[sge], 0, b"wxyz").unwrap();
    let mut raw = [0u8; 4];
    mem.read(BASE + 0x1010, &mut raw).unwrap();
    assert_eq!(&raw, b"wxyz");
    let r = t
        .check_remote(pd, key, 0x10, 4, RemoteAccess::Read)
        .unwrap();
    assert_eq!(r.segments().collect::<Vec<_>>(), vec![(BASE + 0x1010, 4)]);
    let mut back = [0u8; 4];
    r.read(&mem, &mut back).unwrap();
    assert_eq!(&back, b"wxyz");

    // A non-zero IOVA shifts the virtual side only.
    let k2 = t
        .reg_linear_mr(pd, 0x7000, 0x2000, RW, BASE + 0x1ff0)
        .unwrap();
    let r = t
        .check_remote(pd, k2, 0x7008, 0x20, RemoteAccess::Write)
        .unwrap();
    assert_eq!(
        r.segments().collect::<Vec<_>>(),
        vec![(BASE + 0x1ff8, 0x20)]
    );
}

/// The MR's bounds are the DM range's: a local or remote access one byte past
/// the end or before the start is refused (MP-04), so nothing outside
/// `[base, base + length)` is reached through the key.
#[test]
fn linear_mr_refuses_access_outside_its_range() {
    let (mut t, pd, mut mem) = setup();
    let key = t.reg_linear_mr(pd, 0, 0x100, RW, BASE + 0x1000).unwrap();
    let past = Sge {
        addr: 0xfd,
        length: 4,
        lkey: key,
    };
    assert!(t.scatter(&mut mem, pd, &[past], 0, b"abcd").is_err());
    let mut b = [0u8; 4];
    mem.read(BASE + 0x1100, &mut b).unwrap();
    assert_eq!(b, [0; 4], "nothing written past the MR");
    assert_eq!(
        t.check_remote(pd, key, 0x100, 1, RemoteAccess::Write).err(),
        Some(AccessError::OutOfBounds)
    );
    let k2 = t.reg_linear_mr(pd, 0x1000, 0x100, RW, BASE).unwrap();
    assert_eq!(
        t.check_remote(pd, k2, 0xfff, 2, RemoteAccess::Read).err(),
        Some(AccessError::OutOfBounds)
    );
}

/// An atomic on a linear MR reaches the word at `base + offset`.
#[test]
fn linear_mr_atomics_reach_the_word_at_its_offset() {
    let (mut t, pd, mut mem) = setup();
    let key = t.reg_linear_mr(pd, 0, 0x40, ALL, BASE + 0x2000).unwrap();
    let w = t.check_atomic(pd, key, 0x18).unwrap();
    assert_eq!(w.pa(), BASE + 0x2018);
    assert_eq!(w.fetch_add(&mut mem, 5).unwrap(), 0);
    assert_eq!(w.compare_swap(&mut mem, 5, 9).unwrap(), 5);
    let mut b = [0u8; 8];
    mem.read(BASE + 0x2018, &mut b).unwrap();
    assert_eq!(u64::from_le_bytes(b), 9);
    assert!(t.check_atomic(pd, key, 0x40).is_err(), "past the end");
}

/// Registration refuses a range that wraps past 2^64 on either side, and the
/// PD and rights checks of every MR apply (MP-01, MP-04). A translation
/// change by REREG_MR replaces the linear translation by the page list.
#[test]
fn linear_mr_registration_checks_and_rereg() {
    let (mut t, pd, _) = setup();
    assert_eq!(
        t.reg_linear_mr(pd, 0, 0x100, RW, u64::MAX - 0x10),
        Err(VerbError::InvalidAttr)
    );
    assert_eq!(
        t.reg_linear_mr(pd, u64::MAX - 0x10, 0x100, RW, BASE),
        Err(VerbError::InvalidAttr)
    );
    assert_eq!(
        t.reg_linear_mr(pd, 0, 0x100, Access::REMOTE_WRITE, BASE),
        Err(VerbError::InvalidAttr)
    );
    assert_eq!(
        t.reg_linear_mr(pd + 7, 0, 0x100, RW, BASE),
        Err(VerbError::InvalidPd)
    );
    let key = t.reg_linear_mr(pd, 0, 0x100, RW, BASE).unwrap();
    let change = Rereg {
        translation: Some(Translation {
            iova: 0x1000,
            length: 0x10,
            page_size: 4096,
            pages: vec![0x5000],
        }),
        ..Rereg::default()
    };
    t.rereg_mr(key, change).unwrap();
    let mr = t.mr(key).unwrap();
    assert_eq!(mr.linear(), None);
    let r = t
        .check_remote(pd, key, 0x1004, 4, RemoteAccess::Read)
        .unwrap();
    assert_eq!(r.segments().collect::<Vec<_>>(), vec![(0x5004, 4)]);
}
