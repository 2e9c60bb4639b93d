// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Memory regions (MP-01..04): the identity DMA MR for kernel verbs, user
 * MRs pinned through ib_umem (or paged on demand: odp.c) and
 * fast-registration MRs (MP-08). The device keeps the translation (MTT) itself,
 * so an MR's page list is freed as soon as REG_MR has read it.
 */

#include <linux/sizes.h>

#include "vhca.h"

/* REG_MR of any kind (also dm.c's device-memory MRs). */
struct ib_mr *vhca_reg_mr(struct vhca_dev *dev, struct vhca_mr *mr,
			  struct vhca_reg_mr_in *in)
{
	struct vhca_reg_mr_out out;
	u8 status;
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_REG_MR, in, sizeof(*in), &out,
		       sizeof(out), &status);
	if (ret) {
		if ((in->flags & VHCA_REG_MR_F_DMA) &&
		    status == VHCA_STATUS_NOT_SUPPORTED)
			dev_info_once(&dev->pdev->dev,
				      "the device has no DMA MR: kernel verbs (MAD, ULPs) cannot allocate PDs\n");
		return ERR_PTR(ret);
	}
	mr->ibmr.lkey = out.lkey;
	mr->ibmr.rkey = out.rkey;
	return &mr->ibmr;
}

/*
 * get_dma_mr: REG_MR with VHCA_REG_MR_F_DMA (iova 0, all of memory). Kernel
 * DMA addresses are guest-physical (no IOMMU in the guest), which is what the
 * identity MR translates.
 */
struct ib_mr *vhca_get_dma_mr(struct ib_pd *pd, int access)
{
	struct vhca_dev *dev = to_vdev(pd->device);
	struct vhca_reg_mr_in in = {
		.pdn = to_vpd(pd)->pdn,
		.access = vhca_access_to_dev(access),
		.iova = 0,
		.length = U64_MAX,
		.flags = VHCA_REG_MR_F_DMA,
	};
	struct vhca_mr *mr;
	struct ib_mr *ret;

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	ret = vhca_reg_mr(dev, mr, &in);
	if (IS_ERR(ret))
		kfree(mr);
	return ret;
}

struct ib_mr *vhca_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
			       u64 virt, int access, VHCA_REG_MR_DMAH
			       struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(pd->device);
	struct vhca_reg_mr_in in = {
		.pdn = to_vpd(pd)->pdn,
		.access = vhca_access_to_dev(access),
		.iova = virt,
		.length = length,
	};
	unsigned long pgsz_bitmap, pgsz;
	struct vhca_pbl_buf pbl;
	struct vhca_mr *mr;
	struct ib_mr *ret;
	int err;

	/* On-demand paging: nothing pinned, pages by fault (odp.c). */
	if (access & IB_ACCESS_ON_DEMAND)
		return vhca_reg_odp_mr(pd, start, length, virt, access);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->umem = ib_umem_get(pd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		ret = ERR_CAST(mr->umem);
		goto err_free;
	}
	/* The largest page the device takes that fits the mapping (MP-03). */
	pgsz_bitmap = dev->attr.page_size_cap &
		      GENMASK_ULL(VHCA_PBL_MAX_PAGE_SHIFT,
				  VHCA_PBL_MIN_PAGE_SHIFT);
	if (!pgsz_bitmap)
		pgsz_bitmap = SZ_4K;
	pgsz = ib_umem_find_best_pgsz(mr->umem, pgsz_bitmap, virt);
	if (!pgsz) {
		ret = ERR_PTR(-EINVAL);
		goto err_umem;
	}
	err = vhca_pbl_from_umem(dev, mr->umem, pgsz, &pbl);
	if (err) {
		ret = ERR_PTR(err);
		goto err_umem;
	}
	in.pbl = pbl.desc;
	mr->access = access;
	ret = vhca_reg_mr(dev, mr, &in);
	vhca_pbl_free(dev, &pbl);
	if (IS_ERR(ret))
		goto err_umem;
	return ret;

err_umem:
	ib_umem_release(mr->umem);
err_free:
	kfree(mr);
	return ret;
}

/*
 * rereg_user_mr, in place (REREG_MR: the keys stay the same, as ibverbs
 * users expect): a new translation pins the new range first and releases the
 * old pages only once the device has taken the new list. Returns NULL (the
 * same MR); ib_uverbs updates pd, iova and length.
 */
struct ib_mr *vhca_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				 u64 length, u64 virt, int access,
				 struct ib_pd *pd, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibmr->device);
	struct vhca_mr *mr = to_vmr(ibmr);
	struct vhca_rereg_mr_in in = { .lkey = ibmr->lkey };
	struct ib_umem *umem = NULL;
	struct vhca_pbl_buf pbl = {};
	unsigned long pgsz_bitmap, pgsz;
	bool trans = flags & IB_MR_REREG_TRANS;
	int err;

	if (flags & ~(IB_MR_REREG_TRANS | IB_MR_REREG_PD | IB_MR_REREG_ACCESS))
		return ERR_PTR(-EOPNOTSUPP);
	/* Not an ODP MR either: its pages are the notifier's (odp.c). */
	if (!mr->umem || mr->odp)
		return ERR_PTR(-EOPNOTSUPP);
	if (!(flags & IB_MR_REREG_ACCESS))
		access = mr->access;
	if (access & IB_ACCESS_ON_DEMAND)
		return ERR_PTR(-EOPNOTSUPP);
	/* Pages pinned read-only cannot become writable: pin them again. */
	if (!trans && !mr->umem->writable && ib_access_writable(access)) {
		trans = true;
		start = mr->umem->address;
		length = mr->umem->length;
		virt = ibmr->iova;
	}
	if (trans) {
		umem = ib_umem_get(ibmr->device, start, length, access);
		if (IS_ERR(umem))
			return ERR_CAST(umem);
		pgsz_bitmap = dev->attr.page_size_cap &
			      GENMASK_ULL(VHCA_PBL_MAX_PAGE_SHIFT,
					  VHCA_PBL_MIN_PAGE_SHIFT);
		if (!pgsz_bitmap)
			pgsz_bitmap = SZ_4K;
		pgsz = ib_umem_find_best_pgsz(umem, pgsz_bitmap, virt);
		if (!pgsz) {
			err = -EINVAL;
			goto err_umem;
		}
		err = vhca_pbl_from_umem(dev, umem, pgsz, &pbl);
		if (err)
			goto err_umem;
		in.change |= VHCA_REREG_CHANGE_TRANSLATION;
		in.iova = virt;
		in.length = length;
		in.pbl = pbl.desc;
	}
	if (flags & IB_MR_REREG_PD) {
		in.change |= VHCA_REREG_CHANGE_PD;
		in.pdn = to_vpd(pd)->pdn;
	}
	if (flags & IB_MR_REREG_ACCESS) {
		in.change |= VHCA_REREG_CHANGE_ACCESS;
		in.access = vhca_access_to_dev(access);
	}
	err = vhca_cmd(dev, VHCA_CMD_REREG_MR, &in, sizeof(in), NULL, 0, NULL);
	if (trans)
		vhca_pbl_free(dev, &pbl);
	if (err)
		goto err_umem;
	mr->access = access;
	if (trans) {
		ib_umem_release(mr->umem);
		mr->umem = umem;
	}
	return NULL;

err_umem:
	if (umem)
		ib_umem_release(umem);
	return ERR_PTR(err);
}

/*
 * alloc_mr (MP-08): REG_MR with VHCA_REG_MR_F_FAST gives a free MR with room
 * for max_num_sg pages; REG_MR WQEs (post_send, IB_WR_REG_MR) register it
 * from the page list map_mr_sg builds, LOCAL_INV and SEND with Invalidate
 * make it free again. The list is the MR's: the device reads it when the WQE
 * runs, and a consumer maps the MR again only once it is invalidated.
 */
struct ib_mr *vhca_alloc_mr(struct ib_pd *pd, enum ib_mr_type mr_type,
			   u32 max_num_sg)
{
	struct vhca_dev *dev = to_vdev(pd->device);
	struct vhca_reg_mr_in in = {
		.pdn = to_vpd(pd)->pdn,
		.flags = VHCA_REG_MR_F_FAST,
		.pbl = { .npages = max_num_sg },
	};
	struct vhca_mr *mr;
	struct ib_mr *ret;

	if (mr_type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EINVAL);
	if (!(dev->attr.cap_flags & VHCA_DEV_CAP_FAST_REG_MR))
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > dev->attr.max_fast_reg_pages)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->max_pages = max_num_sg;
	mr->pages = dma_alloc_coherent(&dev->pdev->dev,
				       max_num_sg * sizeof(*mr->pages),
				       &mr->pages_dma, GFP_KERNEL);
	if (!mr->pages) {
		kfree(mr);
		return ERR_PTR(-ENOMEM);
	}
	ret = vhca_reg_mr(dev, mr, &in);
	if (IS_ERR(ret)) {
		dma_free_coherent(&dev->pdev->dev,
				  max_num_sg * sizeof(*mr->pages), mr->pages,
				  mr->pages_dma);
		kfree(mr);
	}
	return ret;
}

static int vhca_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct vhca_mr *mr = to_vmr(ibmr);

	if (mr->npages == mr->max_pages)
		return -ENOMEM;
	mr->pages[mr->npages++] = cpu_to_le64(addr);
	return 0;
}

/*
 * map_mr_sg: the DMA addresses of `sg` as pages of ibmr->page_size (set by
 * ib_map_mr_sg); ib_sg_to_pages sets iova and length.
 */
int vhca_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		   unsigned int *sg_offset)
{
	struct vhca_mr *mr = to_vmr(ibmr);

	mr->npages = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, vhca_set_page);
}

int vhca_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibmr->device);
	struct vhca_mr *mr = to_vmr(ibmr);
	struct vhca_dereg_mr_in in = { .lkey = ibmr->lkey };
	int ret;

	if (mr->odp)
		return vhca_dereg_odp_mr(dev, mr);
	ret = vhca_cmd(dev, VHCA_CMD_DEREG_MR, &in, sizeof(in), NULL, 0,
		       NULL);
	if (ret)
		dev_warn(&dev->pdev->dev, "DEREG_MR %#x: %d\n", ibmr->lkey,
			 ret);
	if (mr->umem)
		ib_umem_release(mr->umem);
	if (mr->pages)
		dma_free_coherent(&dev->pdev->dev,
				  mr->max_pages * sizeof(*mr->pages),
				  mr->pages, mr->pages_dma);
	kfree(mr);
	return 0;
}

/*
 * Memory windows (MP-06 type 1, MP-07 type 2B), for user verbs: ALLOC_MW
 * gives the first R_Key; binds, LOCAL_INV and SEND_WITH_INV are WQEs the
 * provider posts. Only the types the device reports (DEV_CAP_MW_TYPE*).
 */
int vhca_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibmw->device);
	struct vhca_alloc_mw_in in = { .pdn = to_vpd(ibmw->pd)->pdn };
	struct vhca_alloc_mw_out out = {};
	u32 caps = dev->attr.cap_flags;
	int ret;

	switch (ibmw->type) {
	case IB_MW_TYPE_1:
		if (!(caps & VHCA_DEV_CAP_MW_TYPE1))
			return -EOPNOTSUPP;
		in.mw_type = VHCA_MW_TYPE1;
		break;
	case IB_MW_TYPE_2:
		if (!(caps & VHCA_DEV_CAP_MW_TYPE2))
			return -EOPNOTSUPP;
		in.mw_type = VHCA_MW_TYPE2;
		break;
	default:
		return -EINVAL;
	}
	ret = vhca_cmd(dev, VHCA_CMD_ALLOC_MW, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret)
		return ret;
	ibmw->rkey = out.rkey;
	return 0;
}

/*
 * ib_core frees the object whatever this returns. DEALLOC_MW names the window
 * by its current R_Key, but binds happen in user space (BIND_MW WQEs): ALLOC_MW's
 * key is only where to start. The key index stays the window's until DEALLOC_MW
 * succeeds, so trying the key bytes in bind order (ibv_inc_rkey) while the
 * device answers NOT_FOUND reaches only this window; any other answer ends it.
 */
int vhca_dealloc_mw(struct ib_mw *ibmw)
{
	struct vhca_dev *dev = to_vdev(ibmw->device);
	struct vhca_dealloc_mw_in in = { .rkey = ibmw->rkey };
	u8 status = VHCA_STATUS_OK;
	int ret;

	/* The device names the window by its index: binds in user space change
	 * the key byte, which the kernel never sees. */
	ret = vhca_cmd(dev, VHCA_CMD_DEALLOC_MW, &in, sizeof(in), NULL, 0,
		       &status);
	if (ret)
		dev_warn(&dev->pdev->dev, "DEALLOC_MW %#x: %d\n", ibmw->rkey,
			 ret);
	return 0;
}
