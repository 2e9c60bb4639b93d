// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Doorbell pages (BAR2, vhca_abi.h "Doorbell pages"): a slot allocator per
 * UAR page, and the producer-index store with the asleep/WAKE protocol
 * (WAKE through the BAR4 page, or BAR0 on a device without one).
 *
 * UAR 0 is the kernel's (its QPs, CQs, SRQs and every EQ); each user context
 * gets one page of its own (verbs.c). Slots below VHCA_UAR_FIRST_SLOT are the
 * device-written header and the doorbell summary (struct vhca_uar_summary);
 * slot VHCA_UAR_EQ0_SLOT of UAR 0 is EQ 0's.
 */

#include "vhca.h"

void vhca_uar_init(struct vhca_uar *uar, u32 index)
{
	uar->index = index;
	spin_lock_init(&uar->lock);
	bitmap_zero(uar->used, VHCA_UAR_SLOTS);
	bitmap_set(uar->used, 0, VHCA_UAR_FIRST_SLOT);
	if (index == VHCA_UAR_KERNEL_UAR)
		set_bit(VHCA_UAR_EQ0_SLOT, uar->used);
}

/* A free slot of the page, or -ENOSPC (at most 496 objects per page). */
int vhca_slot_alloc(struct vhca_uar *uar)
{
	unsigned long slot;

	spin_lock(&uar->lock);
	slot = find_first_zero_bit(uar->used, VHCA_UAR_SLOTS);
	if (slot < VHCA_UAR_SLOTS)
		set_bit(slot, uar->used);
	spin_unlock(&uar->lock);
	return slot < VHCA_UAR_SLOTS ? (int)slot : -ENOSPC;
}

void vhca_slot_free(struct vhca_uar *uar, u16 slot)
{
	if (WARN_ON(slot < VHCA_UAR_FIRST_SLOT || slot >= VHCA_UAR_SLOTS))
		return;
	spin_lock(&uar->lock);
	clear_bit(slot, uar->used);
	spin_unlock(&uar->lock);
}

/* The kernel's mapping of a slot's first word (any UAR page). */
void __iomem *vhca_slot_addr(struct vhca_dev *dev, u32 uar, u16 slot)
{
	return dev->bar2 + (size_t)uar * VHCA_UAR_PAGE_SIZE +
	       (size_t)slot * VHCA_UAR_SLOT_SIZE;
}

/*
 * Sets slot `slot`'s bit in UAR page `uar`'s doorbell summary, after the word
 * it announces (a producer index, a CQ arm word) was stored: the device reads
 * a slot only when it takes its bit (vhca_abi.h "Doorbell pages").
 */
void vhca_db_flag(struct vhca_dev *dev, u32 uar, u16 slot)
{
	void __iomem *page = dev->bar2 + (size_t)uar * VHCA_UAR_PAGE_SIZE;

	/*
	 * The word before the bit: the device loads the slot after taking the
	 * bit, so it must not see the bit without the word.
	 */
	smp_mb__before_atomic();
	/*
	 * set_bit is x86's lock bts. BAR2 is mapped with pci_iomap (main.c), an
	 * uncached (UC-) ioremap, not write-combining: a locked read-modify-write
	 * is atomic on UC memory (bus lock, Intel SDM vol. 3A "Bus locking"),
	 * whereas on WC memory it would not be guaranteed. Behind the BAR is the
	 * device's memfd, ordinary host RAM, so under KVM the access is a
	 * cache-locked one. It must be atomic: other CPUs set bits of the same
	 * word, and the device swaps the word to zero concurrently. The bitmap
	 * numbering of set_bit on little-endian (bit s % 8 of byte s / 8) is the
	 * ABI's. __force: the bit ops take a plain pointer; this one is iomem.
	 */
	set_bit(slot, (unsigned long __force *)(page + VHCA_UAR_SUMMARY_OFFSET));
}

/*
 * Stores a new producer index into `word` (a QP's sq_pi or rq_pi, an SRQ's
 * pi) of UAR page `uar`, sets the slot's summary bit, then wakes the device
 * if it sleeps. Dekker (see vhca_abi.h "Doorbell pages"): store the index, set
 * the bit, full fence, load the page's asleep word; the device stores asleep,
 * fences, rescans the summaries. One of the two sees the other.
 */
void vhca_db_produce(struct vhca_dev *dev, u32 uar, void __iomem *word, u32 pi)
{
	void __iomem *page = dev->bar2 + (size_t)uar * VHCA_UAR_PAGE_SIZE;

	/* writel: the WQEs (coherent memory) are visible before the index. */
	writel(pi, word);
	vhca_db_flag(dev, uar, ((u8 __iomem *)word - (u8 __iomem *)page) /
				       VHCA_UAR_SLOT_SIZE);
	/* The index and the bit visible before the asleep load (Dekker). */
	mb();
	if (readl(page + offsetof(struct vhca_uar_header, asleep)) !=
	    VHCA_UAR_AWAKE)
		vhca_wake(dev);
}

/*
 * WAKE: the BAR4 page when the device has one (served without the device's
 * register lock, which its data path holds while it works), else BAR0.
 */
void vhca_wake(struct vhca_dev *dev)
{
	if (dev->wake)
		writel(1, dev->wake);
	else
		vhca_wr(dev, VHCA_REG_WAKE, 1);
}
