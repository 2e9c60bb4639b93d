//! Config space, region descriptions and BAR accesses as QEMU sees them.

mod common;

use common::*;
use pci::vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS,
    VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use pci::vm_memory::{Bytes, MmapRegion, VolatileMemory};

#[test]
fn config_space_reports_ids_class_and_capabilities() {
    let h = start(hca_like());
    let mut c = h.connect();

    // QEMU reads the whole space in one message at realize.
    let all = cfg_read(&mut c, 0, 4096);
    assert_eq!(all.len(), 4096);
    assert_eq!(cfg_u16(&mut c, 0x00), 0x1234);
    assert_eq!(cfg_u16(&mut c, 0x02), 0x11c6);
    assert_eq!(cfg_u8(&mut c, 0x08), 2);
    assert_eq!(&all[0x09..0x0c], &[0x00, 0x06, 0x0c]);
    assert_eq!(cfg_u8(&mut c, 0x0e), 0, "type 0 header, single function");
    assert_eq!(cfg_u16(&mut c, 0x2c), 0x1234);
    assert_eq!(cfg_u16(&mut c, 0x2e), 0x0001);
    assert_eq!(cfg_u8(&mut c, 0x3d), 0, "no INTx pin");
    assert_ne!(cfg_u16(&mut c, 0x06) & 0x10, 0, "capability list bit");

    let caps = capabilities(&mut c);
    let ids: Vec<u8> = caps.iter().map(|&(id, _)| id).collect();
    assert_eq!(ids, vec![0x10, 0x01, 0x11], "PCIe, PM, MSI-X");
    assert!(caps.iter().all(|&(_, at)| at >= 0x40 && at % 4 == 0));

    let pcie = capability(&mut c, 0x10);
    assert_eq!(cfg_u16(&mut c, pcie + 2), 0x0002, "version 2, endpoint");

    let pm = capability(&mut c, 0x01);
    assert_eq!(cfg_u16(&mut c, pm + 2) & 7, 3, "PM 1.2");

    let msix = capability(&mut c, 0x11);
    assert_eq!(cfg_u16(&mut c, msix + 2), VECTORS - 1);
    assert_eq!(
        cfg_u32(&mut c, msix + 4),
        MSIX_TABLE as u32,
        "table in BAR0"
    );
    assert_eq!(cfg_u32(&mut c, msix + 8), MSIX_PBA as u32, "PBA in BAR0");

    assert_eq!(cfg_u32(&mut c, 0x100), 0, "no extended capabilities");
    assert!(all[0x100..].iter().all(|&b| b == 0));
}

#[test]
fn bar_sizing_reads_back_the_size_mask() {
    let h = start(hca_like());
    let mut c = h.connect();

    assert_eq!(cfg_u32(&mut c, 0x10), 0x0000_0004, "64-bit memory BAR");
    cfg_write(&mut c, 0x10, &[0xff; 8]);
    assert_eq!(cfg_u32(&mut c, 0x10), 0xffff_0004);
    assert_eq!(cfg_u32(&mut c, 0x14), 0xffff_ffff);

    cfg_write(&mut c, 0x18, &0xfebc_0000u32.to_le_bytes());
    cfg_write(&mut c, 0x1c, &0x0000_0001u32.to_le_bytes());
    assert_eq!(cfg_u32(&mut c, 0x18), 0xfebc_0004);
    assert_eq!(cfg_u32(&mut c, 0x1c), 1);

    // An address below the BAR's size is truncated to its alignment.
    cfg_write(&mut c, 0x18, &0x1234_5678u32.to_le_bytes());
    assert_eq!(cfg_u32(&mut c, 0x18), 0x1234_0004);

    // Absent BARs and the expansion ROM size to zero.
    for reg in [0x20, 0x24, 0x30] {
        cfg_write(&mut c, reg, &[0xff; 4]);
        assert_eq!(cfg_u32(&mut c, reg), 0, "register 0x{reg:x}");
    }
}

#[test]
fn guest_writes_change_only_writable_bits() {
    let h = start(hca_like());
    let mut c = h.connect();
    let before = cfg_read(&mut c, 0, 4096);

    // All ones over the whole space, as a hostile or buggy guest might.
    cfg_write(&mut c, 0, &[0xff; 4096]);
    let after = cfg_read(&mut c, 0, 4096);

    assert_eq!(&after[0x00..0x04], &before[0x00..0x04], "IDs");
    assert_eq!(&after[0x08..0x0c], &before[0x08..0x0c], "revision, class");
    assert_eq!(&after[0x2c..0x30], &before[0x2c..0x30], "subsystem");
    assert_eq!(after[0x34], before[0x34], "capability pointer");
    assert_eq!(
        &after[0x06..0x08],
        &before[0x06..0x08],
        "status: RO and W1C"
    );
    assert_eq!(&after[0x100..], &before[0x100..], "extended space");
    let msix = capability(&mut c, 0x11) as usize;
    assert_eq!(&after[msix + 4..msix + 12], &before[msix + 4..msix + 12]);
    for (id, at) in capabilities(&mut c) {
        let at = at as usize;
        assert_eq!(after[at], id);
        assert_eq!(after[at + 1], before[at + 1], "next pointer of 0x{id:x}");
    }

    // What is writable took the write.
    assert_eq!(u16::from_le_bytes([after[4], after[5]]), 0x0546, "command");
    assert_eq!(after[0x0c], 0xff, "cache line size");
    assert_eq!(after[0x3c], 0xff, "interrupt line");
    assert_eq!(
        u16::from_le_bytes([after[msix + 2], after[msix + 3]]),
        0xc000 | (VECTORS - 1)
    );
    assert!(h.handle.memory_enabled());
    assert!(h.handle.bus_master_enabled());

    cfg_write(&mut c, 0x04, &0x0002u16.to_le_bytes());
    assert!(h.handle.memory_enabled());
    assert!(!h.handle.bus_master_enabled());
}

#[test]
fn region_info_describes_nine_regions_and_five_irqs() {
    let h = start(hca_like());
    let mut c = h.connect();
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;

    for index in 0..VFIO_PCI_NUM_REGIONS {
        let r = c.region(index).expect("every region is described");
        let (size, mapped) = match index {
            0 => (BAR_SIZE, false),
            2 => (BAR_SIZE, true),
            7 => (4096, false),
            _ => (0, false),
        };
        assert_eq!(r.size, size, "region {index}");
        if size != 0 {
            assert_eq!(r.flags & rw, rw, "region {index}");
        }
        assert_eq!(
            r.flags & VFIO_REGION_INFO_FLAG_MMAP != 0,
            mapped,
            "region {index}"
        );
        assert_eq!(r.file_offset.is_some(), mapped, "region {index}");
    }
    let bar2 = c.region(2).unwrap();
    let areas: Vec<(u64, u64)> = bar2
        .sparse_areas
        .iter()
        .map(|a| (a.offset, a.size))
        .collect();
    assert_eq!(areas, vec![(0x1000, BAR_SIZE - 0x1000)]);

    for index in 0..VFIO_PCI_NUM_IRQS {
        let irq = c.get_irq_info(index).unwrap();
        assert_eq!(irq.index, index);
        let count = match index {
            VFIO_PCI_MSIX_IRQ_INDEX => VECTORS.into(),
            VFIO_PCI_ERR_IRQ_INDEX => 1,
            _ => 0,
        };
        assert_eq!(irq.count, count, "irq index {index}");
        assert_eq!(irq.flags & VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_EVENTFD);
    }
}

#[test]
fn mapped_bar_pages_are_shared_with_the_embedder() {
    let h = start(hca_like());
    let mut c = h.connect();
    let bar = h.handle.bar_memory(2).expect("BAR2 has memory");
    assert!(h.handle.bar_memory(0).is_none(), "BAR0 is wholly trapped");

    // Map the memfd as QEMU does, and store into a doorbell page.
    let fo = c.region(2).unwrap().file_offset.clone().unwrap();
    let qemu = MmapRegion::<()>::from_file(fo, BAR_SIZE as usize).unwrap();
    let guest = qemu.as_volatile_slice();
    guest.write_obj(0xdead_beefu32, 0x1000).unwrap();
    assert_eq!(bar.load_u32(0x1000), Ok(0xdead_beef));

    bar.store_u32(0x2008, 42).unwrap();
    assert_eq!(guest.read_obj::<u32>(0x2008).unwrap(), 42);

    // If QEMU sends a message for a mapped page anyway, it sees the same bytes.
    let mut data = [0u8; 4];
    c.region_read(2, 0x1000, &mut data).unwrap();
    assert_eq!(u32::from_le_bytes(data), 0xdead_beef);
    c.region_write(2, 0x3000, &7u32.to_le_bytes()).unwrap();
    assert_eq!(bar.load_u32(0x3000), Ok(7));

    // The first page of BAR2 is trapped: it reaches the embedder.
    c.region_write(2, 0x10, &[9, 8]).unwrap();
    assert!(h
        .events
        .lock()
        .unwrap()
        .writes
        .contains(&(2, 0x10, vec![9, 8])));
    assert!(h.events.lock().unwrap().writes.iter().all(|w| w.1 < 0x1000));
}

#[test]
fn trapped_bar_accesses_reach_the_embedder() {
    let h = start(hca_like());
    let mut c = h.connect();

    c.region_write(0, 0x100, &[1, 2, 3, 4]).unwrap();
    let mut data = [0u8; 4];
    c.region_read(0, 0x100, &mut data).unwrap();
    assert_eq!(data, [1, 2, 3, 4]);
    {
        let ev = h.events.lock().unwrap();
        assert_eq!(ev.writes, vec![(0, 0x100, vec![1, 2, 3, 4])]);
        assert_eq!(ev.reads, vec![(0, 0x100, 4)]);
    }

    // Past the end of the BAR: all ones, the embedder is not asked.
    let mut data = [0u8; 4];
    c.region_read(0, BAR_SIZE - 2, &mut data).unwrap();
    assert_eq!(data, [0xff; 4]);
    c.region_write(0, BAR_SIZE, &[1]).unwrap();
    // A BAR that does not exist.
    c.region_read(4, 0, &mut data).unwrap();
    assert_eq!(data, [0xff; 4]);
    assert_eq!(h.events.lock().unwrap().reads.len(), 1);
    assert_eq!(h.handle.counters().bad_accesses, 3);
}

#[test]
fn msix_table_and_pba_are_answered_by_the_function() {
    let h = start(hca_like());
    let mut c = h.connect();

    let mut control = [0u8; 4];
    c.region_read(0, MSIX_TABLE + 3 * 16 + 12, &mut control)
        .unwrap();
    assert_eq!(control, [1, 0, 0, 0], "vectors start masked");

    let entry: Vec<u8> = (0..16).collect();
    c.region_write(0, MSIX_TABLE + 16, &entry).unwrap();
    let mut back = [0u8; 16];
    c.region_read(0, MSIX_TABLE + 16, &mut back).unwrap();
    assert_eq!(&back[..12], &entry[..12]);
    assert_eq!(
        &back[12..],
        &[0, 0, 0, 0],
        "only the mask bit of vector control"
    );

    let mut pba = [0xffu8; 8];
    c.region_read(0, MSIX_PBA, &mut pba).unwrap();
    assert_eq!(pba, [0; 8]);
    c.region_write(0, MSIX_PBA, &[0xff; 8]).unwrap();
    c.region_read(0, MSIX_PBA, &mut pba).unwrap();
    assert_eq!(pba, [0; 8], "the PBA is read-only");

    let ev = h.events.lock().unwrap();
    assert!(
        ev.reads.is_empty() && ev.writes.is_empty(),
        "the embedder saw none of it"
    );
}
