// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * On-demand paging (issue 29 item 1): MRs whose pages are not pinned. The
 * device starts with no translation for an ODP MR (REG_MR with
 * VHCA_REG_MR_F_ODP); when a QP meets a page it has none for, it waits and
 * raises a PageFault EQE on EQ 0. The driver faults the pages in through the
 * owning process's mm (ib_umem_odp_map_dma_and_lock) and hands them over with
 * MAP_ODP, or gives up with ODP_FAULT_FAIL. When the kernel takes pages away
 * (munmap, MADV_DONTNEED, migration, reclaim), the MR's mmu interval notifier
 * runs: UNMAP_ODP, which returns only once no device access uses the
 * translation any more, then the DMA mappings are dropped. Nothing is freed
 * before the device let go of it.
 *
 * An implicit MR (start 0, length U64_MAX) covers the whole address space:
 * the device keeps one sparse translation under its key, the driver a child
 * umem per VHCA_IMR_CHILD_SHIFT-aligned chunk, made on the first fault there
 * (ib_umem_odp_alloc_child) and kept until the MR goes, at most
 * VHCA_IMR_MAX_CHILDREN of them.
 *
 * The device translates in 4 KiB pages (MAP_ODP's list has page_shift 12), so
 * a umem page (PAGE_SIZE; IB_ACCESS_HUGETLB is not passed to ib_umem_odp_get,
 * as the list has no bigger pages) is 1 << (PAGE_SHIFT - 12) list entries.
 * The list has no per-page permission: the device writes through any page of
 * a writable MR, so every page of a writable MR is faulted in for writing
 * (breaking copy-on-write sharing, as mlx5 does), and a page found present
 * but read-only (PREFETCH_NO_FAULT) is not handed over.
 *
 * Locks, outermost first: the umem's umem_mutex (ib_core takes it in the
 * invalidation, which can run in reclaim: nothing below allocates), the
 * MAP_ODP list's mutex, the command queue's.
 */

#include <linux/debugfs.h>
#include <linux/mmu_notifier.h>
#include <linux/seq_file.h>
#include <rdma/ib_umem_odp.h>

#include "vhca.h"

/* The device's ODP page (MAP_ODP pbl page_shift, EQE vpn unit). */
#define VHCA_ODP_SHIFT		VHCA_ODP_PAGE_SHIFT
#define VHCA_ODP_PAGE		(1ULL << VHCA_ODP_SHIFT)
/* Pages per MAP_ODP: one 4 KiB list. */
#define VHCA_ODP_MAP_MAX	VHCA_ODP_MAX_MAP_PAGES
/* An implicit MR's child umem covers 64 MiB (16384 pages' lists each). */
#define VHCA_IMR_CHILD_SHIFT	26
#define VHCA_IMR_MAX_CHILDREN	256
/*
 * PageFault EQEs queued for the work queue and not yet handled: the device
 * has at most one outstanding per QP side (requester, responder) and raises
 * none again before MAP_ODP or ODP_FAULT_FAIL, so 2 per QP, and some slack
 * for the faults of destroyed QPs still queued, never drop one.
 */
#define VHCA_ODP_FAULT_SLACK	1024
/* Asynchronous advise_mr requests queued. */
#define VHCA_ODP_MAX_PREFETCH	64
/* One transport's byte of odp_caps (VHCA_ODP_TRANSPORT_*). */
#define VHCA_ODP_TRANSPORTS	0x3f

/* A PageFault EQE, copied out of EQ 0 for the work queue. */
struct vhca_odp_fault {
	struct work_struct work;
	struct vhca_dev *dev;
	u64 vpn;
	u32 key;
	u16 npages;
	u8 flags;
};

/* An asynchronous advise_mr: its MRs are held until the work ran. */
struct vhca_odp_prefetch {
	struct work_struct work;
	struct vhca_dev *dev;
	bool fault;
	u32 n;
	struct {
		struct vhca_mr *mr;
		u64 va;
		u32 len;
	} sge[];
};

bool vhca_odp_enabled(struct vhca_dev *dev)
{
	return dev->odp.wq && (dev->attr.odp_caps & VHCA_ODP_CAP_SUPPORT);
}

static struct vhca_mr *vhca_odp_get_mr(struct vhca_dev *dev, u32 key)
{
	struct vhca_mr *mr;

	xa_lock(&dev->odp.mrs);
	mr = xa_load(&dev->odp.mrs, key >> 8);
	if (mr && (mr->ibmr.lkey != key ||
		   !refcount_inc_not_zero(&mr->odp_ref)))
		mr = NULL;
	xa_unlock(&dev->odp.mrs);
	return mr;
}

static void vhca_odp_put_mr(struct vhca_mr *mr)
{
	if (refcount_dec_and_test(&mr->odp_ref))
		complete(&mr->odp_idle);
}

/*
 * The device's address (the MR's iova space) of a user address in `odp`:
 * an explicit MR is registered at iova `virt` for the user range at
 * umem.address (same offset in the page, ib_uverbs checks); an implicit MR's
 * iova is the user address.
 */
static u64 vhca_odp_delta(struct vhca_mr *mr)
{
	return mr->odp_implicit ? 0 : mr->odp_iova - mr->odp->umem.address;
}

/* Sends [*fill] list entries for device pages from `va` on, if any. */
static int vhca_odp_flush(struct vhca_dev *dev, struct vhca_mr *mr, u64 va,
			  u32 *fill)
{
	struct vhca_map_odp_in in = {
		.lkey = mr->ibmr.lkey,
		.va = va,
		.pbl = {
			.addr = dev->odp.list_dma,
			.npages = *fill,
			.page_shift = VHCA_ODP_SHIFT,
			.levels = VHCA_PBL_ONE_LEVEL,
		},
	};
	int ret;

	if (!*fill)
		return 0;
	ret = vhca_cmd(dev, VHCA_CMD_MAP_ODP, &in, sizeof(in), NULL, 0, NULL);
	if (!ret)
		atomic64_add(*fill, &dev->odp.pages_mapped);
	*fill = 0;
	return ret;
}

/*
 * Hands pages [idx, idx + n) of `odp` (umem_mutex held: mapped by
 * ib_umem_odp_map_dma_and_lock) to the device, MAP_ODP per run of present
 * pages of at most VHCA_ODP_MAP_MAX device pages. Returns the number of umem
 * pages not handed over (absent, read-only in a writable MR, not mappable)
 * or a command's -errno.
 */
static long vhca_odp_push(struct vhca_dev *dev, struct vhca_mr *mr,
			  struct ib_umem_odp *odp, size_t idx, size_t n)
{
	u32 sub = 1U << (odp->page_shift - VHCA_ODP_SHIFT);
	u64 delta = vhca_odp_delta(mr);
	bool need_write = odp->umem.writable;
	long missing = 0;
	u64 run_va = 0;
	u32 fill = 0, s;
	size_t i;
	int ret = 0;

	lockdep_assert_held(&odp->umem_mutex);
	mutex_lock(&dev->odp.list_lock);
	for (i = idx; i < idx + n && !ret; i++) {
		u64 va = ib_umem_start(odp) + ((u64)i << odp->page_shift) +
			 delta;
		dma_addr_t addr;

		if (!vhca_odp_dma_addr(&dev->pdev->dev, odp, i, need_write,
				       &addr)) {
			missing++;
			ret = vhca_odp_flush(dev, mr, run_va, &fill);
			continue;
		}
		for (s = 0; s < sub && !ret; s++) {
			if (fill == VHCA_ODP_MAP_MAX)
				ret = vhca_odp_flush(dev, mr, run_va, &fill);
			if (!fill)
				run_va = va + s * VHCA_ODP_PAGE;
			dev->odp.list[fill++] =
				cpu_to_le64(addr + s * VHCA_ODP_PAGE);
		}
	}
	if (!ret)
		ret = vhca_odp_flush(dev, mr, run_va, &fill);
	mutex_unlock(&dev->odp.list_lock);
	return ret ? ret : missing;
}

/*
 * Faults in (or, !fault, takes what is present of) user range [uva, uva +
 * len) of `odp` and hands it to the device before any invalidation can run.
 */
static int vhca_odp_map_umem(struct vhca_dev *dev, struct vhca_mr *mr,
			     struct ib_umem_odp *odp, u64 uva, u64 len,
			     bool fault)
{
	u64 access = VHCA_ODP_ACCESS_READ |
		     (odp->umem.writable ? VHCA_ODP_ACCESS_WRITE : 0);
	size_t idx;
	long left;
	int np;

	np = ib_umem_odp_map_dma_and_lock(odp, uva, len, access, fault);
	if (np < 0)
		return np;
	idx = (ALIGN_DOWN(uva, 1UL << odp->page_shift) - ib_umem_start(odp)) >>
	      odp->page_shift;
	left = vhca_odp_push(dev, mr, odp, idx, np);
	mutex_unlock(&odp->umem_mutex);
	if (left < 0)
		return left;
	/* A fault must cover every page: the device waits for all of them. */
	return fault && left ? -EFAULT : 0;
}

/* The child umem of an implicit MR that holds `va`, made on first use. */
static struct ib_umem_odp *vhca_odp_child(struct vhca_dev *dev,
					  struct vhca_mr *mr, u64 va)
{
	unsigned long idx = va >> VHCA_IMR_CHILD_SHIFT;
	struct ib_umem_odp *child;
	int err;

	if (va >= TASK_SIZE)
		return ERR_PTR(-EFAULT);
	/* Children go only at dereg, which waits for our reference. */
	child = xa_load(&mr->odp_children, idx);
	if (child)
		return child;
	mutex_lock(&mr->odp_child_lock);
	child = xa_load(&mr->odp_children, idx);
	if (child)
		goto out;
	if (mr->odp_nchildren >= VHCA_IMR_MAX_CHILDREN) {
		atomic64_inc(&dev->odp.children_refused);
		child = ERR_PTR(-ENOSPC);
		goto out;
	}
	child = ib_umem_odp_alloc_child(mr->odp, idx << VHCA_IMR_CHILD_SHIFT,
					1UL << VHCA_IMR_CHILD_SHIFT,
					&vhca_odp_mn_ops);
	if (IS_ERR(child))
		goto out;
	child->private = mr;
	err = xa_err(xa_store(&mr->odp_children, idx, child, GFP_KERNEL));
	if (err) {
		ib_umem_odp_release(child);
		child = ERR_PTR(err);
		goto out;
	}
	mr->odp_nchildren++;
out:
	mutex_unlock(&mr->odp_child_lock);
	return child;
}

/*
 * Faults in [va, va + len) of the MR (its iova space) and hands the pages to
 * the device; !fault: only pages already present (PREFETCH_NO_FAULT).
 */
static int vhca_odp_map_range(struct vhca_dev *dev, struct vhca_mr *mr,
			      u64 va, u64 len, bool fault)
{
	int ret;

	if (!len || va + len < va)
		return len ? -EFAULT : 0;
	while (len) {
		struct ib_umem_odp *odp;
		u64 uva, n;

		if (mr->odp_implicit) {
			odp = vhca_odp_child(dev, mr, va);
			if (IS_ERR(odp))
				return PTR_ERR(odp);
			uva = va;
		} else {
			odp = mr->odp;
			if (va < ALIGN_DOWN(mr->odp_iova, PAGE_SIZE))
				return -EFAULT;
			uva = va - vhca_odp_delta(mr);
			if (uva < ib_umem_start(odp) ||
			    uva >= ib_umem_end(odp))
				return -EFAULT;
		}
		n = min_t(u64, len, ib_umem_end(odp) - uva);
		ret = vhca_odp_map_umem(dev, mr, odp, uva, n, fault);
		if (ret)
			return ret;
		va += n;
		len -= n;
	}
	return 0;
}

static void vhca_odp_fault_work(struct work_struct *work)
{
	struct vhca_odp_fault *f = container_of(work, struct vhca_odp_fault,
						work);
	struct vhca_dev *dev = f->dev;
	u64 va = f->vpn << VHCA_ODP_SHIFT;
	u64 len = (u64)f->npages << VHCA_ODP_SHIFT;
	struct vhca_mr *mr;
	int ret;

	mr = vhca_odp_get_mr(dev, f->key);
	if (!mr) {
		/* Deregistered since: the device fails the access itself. */
		atomic64_inc(&dev->odp.faults_no_mr);
		goto out;
	}
	if ((f->flags & VHCA_PAGE_FAULT_WRITE) && !mr->odp->umem.writable)
		ret = -EACCES;
	else
		ret = vhca_odp_map_range(dev, mr, va, len, true);
	if (ret) {
		struct vhca_odp_fault_fail_in in = {
			.lkey = f->key,
			.va = va,
			.length = len,
		};

		atomic64_inc(&dev->odp.faults_failed);
		dev_dbg_ratelimited(&dev->pdev->dev,
				    "ODP fault key %#x va %#llx pages %u: %d\n",
				    f->key, va, f->npages, ret);
		if (vhca_cmd(dev, VHCA_CMD_ODP_FAULT_FAIL, &in, sizeof(in),
			     NULL, 0, NULL))
			dev_warn_ratelimited(&dev->pdev->dev,
					     "ODP_FAULT_FAIL key %#x va %#llx failed\n",
					     f->key, va);
	} else {
		atomic64_inc(&dev->odp.faults_resolved);
	}
	vhca_odp_put_mr(mr);
out:
	atomic_dec(&dev->odp.faults_queued);
	kfree(f);
}

/* EQ 0 handler (hard IRQ): a PageFault EQE, handled in process context. */
void vhca_odp_eqe(struct vhca_dev *dev, const struct vhca_eqe *e)
{
	const struct vhca_eqe_page_fault *pf = (const void *)e;
	struct vhca_odp_fault *f;

	BUILD_BUG_ON(sizeof(*pf) != sizeof(*e));
	atomic64_inc(&dev->odp.faults);
	if (!vhca_odp_enabled(dev) || !pf->npages)
		goto drop;
	/* Bounded (max_faults, vhca_odp_init); a drop leaves the QP waiting. */
	if (atomic_inc_return(&dev->odp.faults_queued) > dev->odp.max_faults)
		goto drop_queued;
	f = kmalloc(sizeof(*f), GFP_ATOMIC);
	if (!f)
		goto drop_queued;
	f->dev = dev;
	f->key = pf->key;
	f->vpn = pf->vpn_lo | ((u64)pf->vpn_hi << 32);
	f->npages = pf->npages;
	f->flags = pf->flags;
	INIT_WORK(&f->work, vhca_odp_fault_work);
	queue_work(dev->odp.wq, &f->work);
	return;

drop_queued:
	atomic_dec(&dev->odp.faults_queued);
drop:
	atomic64_inc(&dev->odp.faults_dropped);
	dev_warn_ratelimited(&dev->pdev->dev,
			     "PageFault key %#x dropped (ODP %s, %d queued)\n",
			     pf->key, vhca_odp_enabled(dev) ? "on" : "off",
			     atomic_read(&dev->odp.faults_queued));
}

/*
 * The kernel takes pages of `odp` away: the device stops using them
 * (UNMAP_ODP, synchronous) before their DMA mappings go.
 */
static bool vhca_odp_invalidate(struct mmu_interval_notifier *mni,
				const struct mmu_notifier_range *range,
				unsigned long cur_seq)
{
	struct ib_umem_odp *odp = container_of(mni, struct ib_umem_odp,
					       notifier);
	struct vhca_mr *mr = odp->private;
	size_t idx, first = SIZE_MAX, last = 0;
	u64 start, end;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&odp->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	start = max_t(u64, ib_umem_start(odp), range->start);
	end = min_t(u64, ib_umem_end(odp), range->end);
	/* Only the span the device was given pages of (npages counts them). */
	if (mr && odp->npages > 0 && start < end) {
		for (idx = (start - ib_umem_start(odp)) >> odp->page_shift;
		     idx < (end - ib_umem_start(odp)) >> odp->page_shift; idx++) {
			if (!vhca_odp_dma_present(odp, idx))
				continue;
			first = min(first, idx);
			last = idx;
		}
	}
	if (first != SIZE_MAX) {
		struct vhca_dev *dev = to_vdev(odp->umem.ibdev);
		struct vhca_unmap_odp_in in = {
			.lkey = mr->ibmr.lkey,
			.va = ib_umem_start(odp) +
			      ((u64)first << odp->page_shift) +
			      vhca_odp_delta(mr),
			.length = (u64)(last - first + 1) << odp->page_shift,
		};

		atomic64_inc(&dev->odp.invalidations);
		/* After DEREG_MR the key is gone and the device idle. */
		if (vhca_cmd(dev, VHCA_CMD_UNMAP_ODP, &in, sizeof(in), NULL, 0,
			     NULL) &&
		    !READ_ONCE(mr->odp_dead))
			dev_warn_ratelimited(&dev->pdev->dev,
					     "UNMAP_ODP key %#x va %#llx failed\n",
					     in.lkey, in.va);
	}
	ib_umem_odp_unmap_dma_pages(odp, start, end);
	mutex_unlock(&odp->umem_mutex);
	return true;
}

const struct mmu_interval_notifier_ops vhca_odp_mn_ops = {
	.invalidate = vhca_odp_invalidate,
};

/*
 * reg_user_mr with IB_ACCESS_ON_DEMAND: REG_MR with VHCA_REG_MR_F_ODP and no
 * pages; the whole address space when start is 0 and length U64_MAX.
 */
struct ib_mr *vhca_reg_odp_mr(struct ib_pd *pd, u64 start, u64 length,
			      u64 virt, int access)
{
	struct vhca_dev *dev = to_vdev(pd->device);
	struct vhca_reg_mr_in in = {
		.pdn = to_vpd(pd)->pdn,
		.access = vhca_access_to_dev(access),
		.iova = virt,
		.length = length,
		.flags = VHCA_REG_MR_F_ODP,
	};
	bool implicit = !start && length == U64_MAX;
	struct ib_umem_odp *odp;
	struct vhca_mr *mr;
	struct ib_mr *ret;
	int err;

	if (!vhca_odp_enabled(dev))
		return ERR_PTR(-EOPNOTSUPP);
	if (implicit && (virt ||
			 !(dev->attr.odp_caps & VHCA_ODP_CAP_IMPLICIT)))
		return ERR_PTR(-EOPNOTSUPP);
	/* The device's pages are 4 KiB whatever backs them (top of file). */
	access &= ~IB_ACCESS_HUGETLB;
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	refcount_set(&mr->odp_ref, 1);
	init_completion(&mr->odp_idle);
	mutex_init(&mr->odp_child_lock);
	xa_init(&mr->odp_children);
	mr->odp_implicit = implicit;
	mr->odp_iova = virt;
	mr->access = access;
	if (implicit)
		odp = ib_umem_odp_alloc_implicit(pd->device, access);
	else
		odp = ib_umem_odp_get(pd->device, start, length, access,
				      &vhca_odp_mn_ops);
	if (IS_ERR(odp)) {
		kfree(mr);
		return ERR_CAST(odp);
	}
	odp->private = mr;
	mr->odp = odp;
	mr->umem = &odp->umem;
	ret = vhca_reg_mr(dev, mr, &in);
	if (IS_ERR(ret))
		goto err_umem;
	err = xa_insert(&dev->odp.mrs, mr->ibmr.lkey >> 8, mr, GFP_KERNEL);
	if (err) {
		struct vhca_dereg_mr_in din = { .lkey = mr->ibmr.lkey };

		vhca_cmd(dev, VHCA_CMD_DEREG_MR, &din, sizeof(din), NULL, 0,
			 NULL);
		ret = ERR_PTR(err);
		goto err_umem;
	}
	return ret;

err_umem:
	ib_umem_release(mr->umem);
	kfree(mr);
	return ret;
}

/*
 * dereg_mr of an ODP MR: no new fault finds it, the work that holds it ends,
 * DEREG_MR, and only then do its umems (and their DMA mappings) go.
 */
int vhca_dereg_odp_mr(struct vhca_dev *dev, struct vhca_mr *mr)
{
	struct vhca_dereg_mr_in in = { .lkey = mr->ibmr.lkey };
	struct ib_umem_odp *child;
	unsigned long idx;
	int ret;

	xa_erase(&dev->odp.mrs, mr->ibmr.lkey >> 8);
	vhca_odp_put_mr(mr);
	wait_for_completion(&mr->odp_idle);
	ret = vhca_cmd(dev, VHCA_CMD_DEREG_MR, &in, sizeof(in), NULL, 0, NULL);
	if (ret)
		dev_warn(&dev->pdev->dev, "DEREG_MR %#x: %d\n", in.lkey, ret);
	WRITE_ONCE(mr->odp_dead, true);
	xa_for_each(&mr->odp_children, idx, child) {
		xa_erase(&mr->odp_children, idx);
		ib_umem_odp_release(child);
	}
	xa_destroy(&mr->odp_children);
	ib_umem_release(mr->umem);
	kfree(mr);
	return 0;
}

static int vhca_odp_prefetch_sge(struct vhca_dev *dev, struct vhca_mr *mr,
				 u64 va, u32 len, bool fault)
{
	int ret = vhca_odp_map_range(dev, mr, va, len, fault);

	atomic64_inc(&dev->odp.prefetches);
	if (ret)
		atomic64_inc(&dev->odp.prefetches_failed);
	return ret;
}

static void vhca_odp_prefetch_work(struct work_struct *work)
{
	struct vhca_odp_prefetch *p = container_of(work,
						   struct vhca_odp_prefetch,
						   work);
	u32 i;

	/* Advice: a page that cannot be had is faulted on later. */
	for (i = 0; i < p->n; i++) {
		vhca_odp_prefetch_sge(p->dev, p->sge[i].mr, p->sge[i].va,
				      p->sge[i].len, p->fault);
		vhca_odp_put_mr(p->sge[i].mr);
	}
	atomic_dec(&p->dev->odp.prefetch_queued);
	kfree(p);
}

/* The ODP MR `lkey` of `pd`, held; -ENOENT, -EINVAL or -EPERM otherwise. */
static struct vhca_mr *vhca_odp_advise_mr_of(struct vhca_dev *dev,
					     struct ib_pd *pd, u32 lkey,
					     bool write)
{
	struct vhca_mr *mr = vhca_odp_get_mr(dev, lkey);
	int err = 0;

	if (!mr)
		return ERR_PTR(-ENOENT);
	if (mr->ibmr.pd != pd)
		err = -EINVAL;
	else if (write && !mr->odp->umem.writable)
		err = -EPERM;
	if (err) {
		vhca_odp_put_mr(mr);
		return ERR_PTR(err);
	}
	return mr;
}

/*
 * advise_mr: PREFETCH, PREFETCH_WRITE (the same here: a writable MR's pages
 * are always faulted in for writing) and PREFETCH_NO_FAULT (only pages
 * already present). With IB_UVERBS_ADVISE_MR_FLAG_FLUSH the pages are the
 * device's when the call returns; otherwise a work item does it.
 */
int vhca_advise_mr(struct ib_pd *pd, enum ib_uverbs_advise_mr_advice advice,
		   u32 flags, struct ib_sge *sg_list, u32 num_sge,
		   struct uverbs_attr_bundle *attrs)
{
	struct vhca_dev *dev = to_vdev(pd->device);
	bool write = advice == IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	bool fault = advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
	struct vhca_odp_prefetch *p;
	struct vhca_mr *mr;
	u32 i;
	int ret = 0;

	if (advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return -EOPNOTSUPP;
	if (flags & ~IB_UVERBS_ADVISE_MR_FLAG_FLUSH || !vhca_odp_enabled(dev))
		return -EOPNOTSUPP;

	if (flags & IB_UVERBS_ADVISE_MR_FLAG_FLUSH) {
		for (i = 0; i < num_sge && !ret; i++) {
			mr = vhca_odp_advise_mr_of(dev, pd, sg_list[i].lkey,
						   write);
			if (IS_ERR(mr))
				return PTR_ERR(mr);
			ret = vhca_odp_prefetch_sge(dev, mr, sg_list[i].addr,
						    sg_list[i].length, fault);
			vhca_odp_put_mr(mr);
		}
		return ret;
	}

	if (atomic_inc_return(&dev->odp.prefetch_queued) >
	    VHCA_ODP_MAX_PREFETCH) {
		/* Advice only: the pages come by faults instead. */
		atomic_dec(&dev->odp.prefetch_queued);
		atomic64_inc(&dev->odp.prefetches_dropped);
		return 0;
	}
	p = kzalloc(struct_size(p, sge, num_sge), GFP_KERNEL);
	if (!p) {
		atomic_dec(&dev->odp.prefetch_queued);
		return -ENOMEM;
	}
	p->dev = dev;
	p->fault = fault;
	for (i = 0; i < num_sge; i++) {
		mr = vhca_odp_advise_mr_of(dev, pd, sg_list[i].lkey, write);
		if (IS_ERR(mr)) {
			ret = PTR_ERR(mr);
			goto err;
		}
		p->sge[p->n].mr = mr;
		p->sge[p->n].va = sg_list[i].addr;
		p->sge[p->n].len = sg_list[i].length;
		p->n++;
	}
	INIT_WORK(&p->work, vhca_odp_prefetch_work);
	queue_work(dev->odp.wq, &p->work);
	return 0;

err:
	for (i = 0; i < p->n; i++)
		vhca_odp_put_mr(p->sge[i].mr);
	kfree(p);
	atomic_dec(&dev->odp.prefetch_queued);
	return ret;
}

/* query_device: the device's ODP capabilities, as ib_core spells them. */
void vhca_odp_query_device(struct vhca_dev *dev, struct ib_device_attr *a)
{
	u32 caps = dev->attr.odp_caps;

	if (!vhca_odp_enabled(dev))
		return;
	/* The ABI's bits are ibverbs' (and ib_core's) values. */
	BUILD_BUG_ON(IB_ODP_SUPPORT != VHCA_ODP_CAP_SUPPORT ||
		     IB_ODP_SUPPORT_IMPLICIT != VHCA_ODP_CAP_IMPLICIT);
	BUILD_BUG_ON(IB_ODP_SUPPORT_SEND != VHCA_ODP_TRANSPORT_SEND ||
		     IB_ODP_SUPPORT_RECV != VHCA_ODP_TRANSPORT_RECV ||
		     IB_ODP_SUPPORT_WRITE != VHCA_ODP_TRANSPORT_WRITE ||
		     IB_ODP_SUPPORT_READ != VHCA_ODP_TRANSPORT_READ ||
		     IB_ODP_SUPPORT_ATOMIC != VHCA_ODP_TRANSPORT_ATOMIC ||
		     IB_ODP_SUPPORT_SRQ_RECV != VHCA_ODP_TRANSPORT_SRQ_RECV);
	a->kernel_cap_flags |= IBK_ON_DEMAND_PAGING;
	a->odp_caps.general_caps = caps & (IB_ODP_SUPPORT |
					   IB_ODP_SUPPORT_IMPLICIT);
	a->odp_caps.per_transport_caps.rc_odp_caps =
		(caps >> VHCA_ODP_CAP_RC_SHIFT) & VHCA_ODP_TRANSPORTS;
	a->odp_caps.per_transport_caps.ud_odp_caps =
		(caps >> VHCA_ODP_CAP_UD_SHIFT) & VHCA_ODP_TRANSPORTS;
	a->odp_caps.per_transport_caps.xrc_odp_caps =
		(caps >> VHCA_ODP_CAP_XRC_SHIFT) & VHCA_ODP_TRANSPORTS;
}

static int vhca_odp_show(struct seq_file *m, void *unused)
{
	struct vhca_dev *dev = m->private;
	struct vhca_odp *o = &dev->odp;

	seq_printf(m, "enabled %d caps %#x\n", vhca_odp_enabled(dev),
		   dev->attr.odp_caps);
	seq_printf(m, "faults %lld resolved %lld failed %lld no_mr %lld dropped %lld queued %d\n",
		   atomic64_read(&o->faults), atomic64_read(&o->faults_resolved),
		   atomic64_read(&o->faults_failed),
		   atomic64_read(&o->faults_no_mr),
		   atomic64_read(&o->faults_dropped),
		   atomic_read(&o->faults_queued));
	seq_printf(m, "pages_mapped %lld invalidations %lld children_refused %lld\n",
		   atomic64_read(&o->pages_mapped),
		   atomic64_read(&o->invalidations),
		   atomic64_read(&o->children_refused));
	seq_printf(m, "prefetches %lld failed %lld dropped %lld queued %d\n",
		   atomic64_read(&o->prefetches),
		   atomic64_read(&o->prefetches_failed),
		   atomic64_read(&o->prefetches_dropped),
		   atomic_read(&o->prefetch_queued));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(vhca_odp);

void vhca_odp_debugfs_add(struct vhca_dev *dev)
{
	debugfs_create_file("odp", 0400, dev->debugfs, dev, &vhca_odp_fops);
}

/* After QUERY_DEVICE: the work queue and the MAP_ODP list, if ODP is on. */
void vhca_odp_init(struct vhca_dev *dev)
{
	BUILD_BUG_ON(VHCA_ODP_MAP_MAX * sizeof(__le64) > VHCA_ODP_PAGE);
	if (!(dev->attr.odp_caps & VHCA_ODP_CAP_SUPPORT))
		return;
	dev->odp.list = dma_alloc_coherent(&dev->pdev->dev, VHCA_ODP_PAGE,
					   &dev->odp.list_dma, GFP_KERNEL);
	if (!dev->odp.list)
		goto fail;
	dev->odp.max_faults = min_t(u64, 2ULL * dev->attr.max_qp +
					 VHCA_ODP_FAULT_SLACK, 1U << 20);
	dev->odp.wq = alloc_workqueue("vhca-odp/%s", WQ_UNBOUND, 0,
				      pci_name(dev->pdev));
	if (!dev->odp.wq)
		goto fail;
	return;

fail:
	dev_warn(&dev->pdev->dev, "no memory for ODP: ODP MRs refused\n");
	vhca_odp_fini(dev);
}

/* After every MR is gone and EQ 0 is quiet: queued faults run out first. */
void vhca_odp_fini(struct vhca_dev *dev)
{
	if (dev->odp.wq)
		destroy_workqueue(dev->odp.wq);
	dev->odp.wq = NULL;
	if (dev->odp.list)
		dma_free_coherent(&dev->pdev->dev, VHCA_ODP_PAGE, dev->odp.list,
				  dev->odp.list_dma);
	dev->odp.list = NULL;
	WARN_ON(!xa_empty(&dev->odp.mrs));
	xa_destroy(&dev->odp.mrs);
}
