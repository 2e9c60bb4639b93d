// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device memory (issue 29 item 2; ibv_alloc_dm): CAP_DM_SIZE bytes of BAR4
 * at VHCA_DM_OFFSET (vhca_abi.h), memory the device reads and writes for
 * the MRs registered over it (REG_MR VHCA_REG_MR_F_DM).
 *
 * The device keeps no record of allocations; this file does: a bitmap of
 * the DM's pages, an allocation being whole pages (so that one mapping
 * never shows another process's bytes), zeroed before it is handed out.
 * Each allocation is an rdma_user_mmap_entry of its context, the provider
 * maps exactly its pages, and they return to the bitmap only in mmap_free:
 * after the DM is freed and the last mapping of it is gone
 * (vhca-abi-user.h).
 */

#include <linux/bitmap.h>
#include <linux/io.h>
#include <rdma/uverbs_ioctl.h>
#include <rdma/uverbs_std_types.h>

#define UVERBS_MODULE_NAME vhca_ib
#include <rdma/uverbs_named_ioctl.h>

#include "vhca.h"

struct vhca_dm_entry {
	struct rdma_user_mmap_entry rdma;
	struct vhca_dev *dev;
	u32 first;		/* first DM page */
	u32 npages;
};

struct vhca_dm {
	struct ib_dm ibdm;
	struct vhca_dm_entry *entry;
};

static struct vhca_dm *to_vdm(struct ib_dm *ibdm)
{
	return container_of(ibdm, struct vhca_dm, ibdm);
}

/*
 * At probe, after BAR4's WAKE page: the DM the device offers, if BAR4 holds
 * it whole and it is whole pages of this kernel; else none (max_dm_size 0).
 */
void vhca_dm_init(struct vhca_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;
	u32 size = dev->caps.dm_size;
	struct vhca_dm_region *dm = &dev->dm;

	spin_lock_init(&dm->lock);
	if (!size)
		return;
	if (!dev->wake || size % PAGE_SIZE || size > VHCA_DM_MAX_SIZE ||
	    pci_resource_len(pdev, VHCA_WAKE_BAR_INDEX) <
		    (resource_size_t)VHCA_DM_OFFSET + size) {
		dev_warn(&pdev->dev,
			 "CAP_DM_SIZE %u does not fit BAR4 or the page size: no device memory\n",
			 size);
		return;
	}
	dm->used = bitmap_zalloc(size / PAGE_SIZE, GFP_KERNEL);
	dm->mem = pci_iomap_range(pdev, VHCA_WAKE_BAR_INDEX, VHCA_DM_OFFSET,
				  size);
	if (!dm->used || !dm->mem) {
		vhca_dm_fini(dev);
		return;
	}
	dm->start = pci_resource_start(pdev, VHCA_WAKE_BAR_INDEX) +
		    VHCA_DM_OFFSET;
	dm->npages = size / PAGE_SIZE;
}

void vhca_dm_fini(struct vhca_dev *dev)
{
	struct vhca_dm_region *dm = &dev->dm;
	unsigned long *used;

	if (dm->mem)
		pci_iounmap(dev->pdev, dm->mem);
	spin_lock(&dm->lock);
	used = dm->used;
	dm->used = NULL;
	dm->npages = 0;
	spin_unlock(&dm->lock);
	bitmap_free(used);
	dm->mem = NULL;
}

/* The allocation's pages go back: the DM is freed and no mapping is left. */
void vhca_mmap_free(struct rdma_user_mmap_entry *rdma)
{
	struct vhca_dm_entry *e = container_of(rdma, struct vhca_dm_entry, rdma);
	struct vhca_dm_region *dm = &e->dev->dm;

	/*
	 * ib_unregister_device drops every mapping's reference before
	 * vhca_dm_fini; the check keeps a late one from a freed bitmap.
	 */
	spin_lock(&dm->lock);
	if (dm->used)
		bitmap_clear(dm->used, e->first, e->npages);
	spin_unlock(&dm->lock);
	kfree(e);
}

/* npages free pages, the first a multiple of 2^align_order pages. */
static int vhca_dm_take(struct vhca_dm_region *dm, u32 npages,
			u32 align_order, u32 *first)
{
	unsigned long at;

	spin_lock(&dm->lock);
	at = bitmap_find_next_zero_area(dm->used, dm->npages, 0, npages,
					(1UL << align_order) - 1);
	if (at < dm->npages)
		bitmap_set(dm->used, at, npages);
	spin_unlock(&dm->lock);
	if (at >= dm->npages)
		return -ENOMEM;
	*first = at;
	return 0;
}

struct ib_dm *vhca_alloc_dm(struct ib_device *ibdev, struct ib_ucontext *uctx,
			    struct ib_dm_alloc_attr *attr,
			    struct uverbs_attr_bundle *attrs)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	struct vhca_dm_region *region = &dev->dm;
	u32 align_order = 0, npages, first;
	struct vhca_dm_entry *e;
	struct vhca_dm *dm;
	u64 offset;
	int ret;

	if (!region->npages)
		return ERR_PTR(-EOPNOTSUPP);
	if (!attr->length || attr->length > (u64)region->npages * PAGE_SIZE)
		return ERR_PTR(-EINVAL);
	/* alignment is log2 of bytes; a page is aligned to PAGE_SHIFT. */
	if (attr->alignment > PAGE_SHIFT)
		align_order = attr->alignment - PAGE_SHIFT;
	if (align_order >= 32)
		return ERR_PTR(-EINVAL);
	npages = DIV_ROUND_UP(attr->length, PAGE_SIZE);
	dm = kzalloc(sizeof(*dm), GFP_KERNEL);
	e = kzalloc(sizeof(*e), GFP_KERNEL);
	if (!dm || !e) {
		ret = -ENOMEM;
		goto err_free;
	}
	ret = vhca_dm_take(region, npages, align_order, &first);
	if (ret)
		goto err_free;
	/* No bytes of an earlier owner reach the new one. */
	memset_io(region->mem + (size_t)first * PAGE_SIZE, 0,
		  (size_t)npages * PAGE_SIZE);
	e->dev = dev;
	e->first = first;
	e->npages = npages;
	ret = rdma_user_mmap_entry_insert_range(uctx, &e->rdma,
						(size_t)npages * PAGE_SIZE,
						VHCA_IB_MMAP_DM_FIRST, U32_MAX);
	if (ret) {
		spin_lock(&region->lock);
		bitmap_clear(region->used, first, npages);
		spin_unlock(&region->lock);
		goto err_free;
	}
	dm->entry = e;
	offset = rdma_user_mmap_get_offset(&e->rdma);
	ret = uverbs_copy_to(attrs, VHCA_IB_ATTR_ALLOC_DM_RESP_MMAP_OFFSET,
			     &offset, sizeof(offset));
	if (ret) {
		/* mmap_free gives the pages back and frees the entry. */
		rdma_user_mmap_entry_remove(&e->rdma);
		kfree(dm);
		return ERR_PTR(ret);
	}
	return &dm->ibdm;

err_free:
	kfree(e);
	kfree(dm);
	return ERR_PTR(ret);
}

int vhca_dealloc_dm(struct ib_dm *ibdm, struct uverbs_attr_bundle *attrs)
{
	struct vhca_dm *dm = to_vdm(ibdm);

	rdma_user_mmap_entry_remove(&dm->entry->rdma);
	kfree(dm);
	return 0;
}

/*
 * An allocation's pages, uncached as the UAR page: the device reads and
 * writes the same bytes, and a store must not wait in a write-combining
 * buffer past the doorbell that makes the device read it.
 */
int vhca_dm_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *rdma;
	struct vhca_dm_entry *e;
	unsigned long pfn;
	int ret;

	/* NULL unless the offset is an entry and the length is all of it. */
	rdma = rdma_user_mmap_entry_get(uctx, vma);
	if (!rdma)
		return -EINVAL;
	e = container_of(rdma, struct vhca_dm_entry, rdma);
	pfn = (e->dev->dm.start >> PAGE_SHIFT) + e->first;
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	ret = rdma_user_mmap_io(uctx, vma, pfn, (size_t)e->npages * PAGE_SIZE,
				pgprot_noncached(vma->vm_page_prot), rdma);
	rdma_user_mmap_entry_put(rdma);
	return ret;
}

/*
 * ibv_reg_dm_mr: REG_MR with DM over [dm offset + attr->offset, + length),
 * zero-based. ib_uverbs checked IB_ZERO_BASED and that the range lies in the
 * DM's length; the device checks it against its DM bytes again.
 */
struct ib_mr *vhca_reg_dm_mr(struct ib_pd *pd, struct ib_dm *ibdm,
			     struct ib_dm_mr_attr *attr,
			     struct uverbs_attr_bundle *attrs)
{
	struct vhca_dev *dev = to_vdev(pd->device);
	struct vhca_dm *dm = to_vdm(ibdm);
	struct vhca_reg_mr_in in = {
		.pdn = to_vpd(pd)->pdn,
		.access = vhca_access_to_dev(attr->access_flags),
		.iova = 0,
		.length = attr->length,
		.flags = VHCA_REG_MR_F_DM,
		.pbl.addr = (u64)dm->entry->first * PAGE_SIZE + attr->offset,
	};
	struct vhca_mr *mr;
	struct ib_mr *ret;

	if (attr->access_flags & ~(IB_ACCESS_LOCAL_WRITE |
				   IB_ACCESS_REMOTE_WRITE |
				   IB_ACCESS_REMOTE_READ |
				   IB_ACCESS_REMOTE_ATOMIC | IB_ZERO_BASED))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->access = attr->access_flags;
	ret = vhca_reg_mr(dev, mr, &in);
	if (IS_ERR(ret))
		kfree(mr);
	return ret;
}

/* VHCA_IB_METHOD_DM_QUERY (ibv_import_dm): a DM's mmap offset and length. */
static int UVERBS_HANDLER(VHCA_IB_METHOD_DM_QUERY)(
	struct uverbs_attr_bundle *attrs)
{
	struct ib_dm *ibdm =
		uverbs_attr_get_obj(attrs, VHCA_IB_ATTR_QUERY_DM_REQ_HANDLE);
	struct vhca_dm *dm = to_vdm(ibdm);
	u64 offset = rdma_user_mmap_get_offset(&dm->entry->rdma);
	u64 length = ibdm->length;
	int ret;

	ret = uverbs_copy_to(attrs, VHCA_IB_ATTR_QUERY_DM_RESP_MMAP_OFFSET,
			     &offset, sizeof(offset));
	if (ret)
		return ret;
	return uverbs_copy_to(attrs, VHCA_IB_ATTR_QUERY_DM_RESP_LENGTH,
			      &length, sizeof(length));
}

DECLARE_UVERBS_NAMED_METHOD(
	VHCA_IB_METHOD_DM_QUERY,
	UVERBS_ATTR_IDR(VHCA_IB_ATTR_QUERY_DM_REQ_HANDLE, UVERBS_OBJECT_DM,
			UVERBS_ACCESS_READ, UA_MANDATORY),
	UVERBS_ATTR_PTR_OUT(VHCA_IB_ATTR_QUERY_DM_RESP_MMAP_OFFSET,
			    UVERBS_ATTR_TYPE(u64), UA_MANDATORY),
	UVERBS_ATTR_PTR_OUT(VHCA_IB_ATTR_QUERY_DM_RESP_LENGTH,
			    UVERBS_ATTR_TYPE(u64), UA_MANDATORY));

ADD_UVERBS_ATTRIBUTES_SIMPLE(
	vhca_ib_dm_alloc, UVERBS_OBJECT_DM, UVERBS_METHOD_DM_ALLOC,
	UVERBS_ATTR_PTR_OUT(VHCA_IB_ATTR_ALLOC_DM_RESP_MMAP_OFFSET,
			    UVERBS_ATTR_TYPE(u64), UA_MANDATORY));

ADD_UVERBS_METHODS(vhca_ib_dm_methods, UVERBS_OBJECT_DM,
		   &UVERBS_METHOD(VHCA_IB_METHOD_DM_QUERY));

const struct uapi_definition vhca_dm_defs[] = {
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_DM, &vhca_ib_dm_alloc),
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_DM, &vhca_ib_dm_methods),
	{},
};
