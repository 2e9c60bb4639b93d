// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Where rings and MRs live in guest-physical memory (vhca_abi.h struct
 * vhca_pbl): kernel rings are one coherent allocation (CONTIGUOUS); user
 * memory pinned through ib_umem becomes a page list: CONTIGUOUS when the
 * pages happen to follow each other, ONE_LEVEL up to one 4 KiB list, else
 * TWO_LEVEL (a directory of 4 KiB tables, so no large contiguous allocation
 * is needed, as pvrdma's page directory).
 *
 * Page lists are kept until the object is destroyed, even where the device
 * copies them at creation: the ABI does not promise it never reads them again.
 */

#include <rdma/ib_umem.h>
#include <rdma/iter.h>

#include "vhca.h"

/* A zeroed, page-aligned ring in coherent memory, described as CONTIGUOUS. */
int vhca_kring_alloc(struct vhca_dev *dev, struct vhca_kring *r, size_t bytes,
		     struct vhca_pbl *desc)
{
	r->bytes = PAGE_ALIGN(bytes);
	r->buf = dma_alloc_coherent(&dev->pdev->dev, r->bytes, &r->dma,
				    GFP_KERNEL);
	if (!r->buf)
		return -ENOMEM;
	memset(r->buf, 0, r->bytes);
	memset(desc, 0, sizeof(*desc));
	desc->addr = r->dma;
	desc->npages = r->bytes >> VHCA_PBL_MIN_PAGE_SHIFT;
	desc->page_shift = VHCA_PBL_MIN_PAGE_SHIFT;
	desc->levels = VHCA_PBL_CONTIGUOUS;
	return 0;
}

void vhca_kring_free(struct vhca_dev *dev, struct vhca_kring *r)
{
	if (r->buf)
		dma_free_coherent(&dev->pdev->dev, r->bytes, r->buf, r->dma);
	r->buf = NULL;
}

void vhca_pbl_free(struct vhca_dev *dev, struct vhca_pbl_buf *pbl)
{
	struct device *d = &dev->pdev->dev;
	u32 i;

	if (pbl->tables) {
		for (i = 0; i < pbl->ntables; i++)
			if (pbl->tables[i])
				dma_free_coherent(d, VHCA_PBL_TABLE_SIZE,
						  pbl->tables[i],
						  pbl->tables_dma[i]);
		kfree(pbl->tables);
		kfree(pbl->tables_dma);
	}
	if (pbl->dir)
		dma_free_coherent(d, pbl->dir_bytes, pbl->dir, pbl->dir_dma);
	memset(pbl, 0, sizeof(*pbl));
}

static int vhca_pbl_fill(struct vhca_dev *dev, const u64 *pages, u32 n,
			 struct vhca_pbl_buf *pbl)
{
	struct device *d = &dev->pdev->dev;
	u32 i, t;

	if (n <= VHCA_PBL_TABLE_ENTRIES) {
		pbl->dir_bytes = PAGE_ALIGN(n * sizeof(u64));
		pbl->dir = dma_alloc_coherent(d, pbl->dir_bytes, &pbl->dir_dma,
					      GFP_KERNEL);
		if (!pbl->dir)
			return -ENOMEM;
		for (i = 0; i < n; i++)
			pbl->dir[i] = cpu_to_le64(pages[i]);
		pbl->desc.levels = VHCA_PBL_ONE_LEVEL;
		pbl->desc.addr = pbl->dir_dma;
		return 0;
	}

	pbl->ntables = DIV_ROUND_UP(n, VHCA_PBL_TABLE_ENTRIES);
	pbl->dir_bytes = PAGE_ALIGN(pbl->ntables * sizeof(u64));
	pbl->dir = dma_alloc_coherent(d, pbl->dir_bytes, &pbl->dir_dma,
				      GFP_KERNEL);
	pbl->tables = kcalloc(pbl->ntables, sizeof(*pbl->tables), GFP_KERNEL);
	pbl->tables_dma = kcalloc(pbl->ntables, sizeof(*pbl->tables_dma),
				  GFP_KERNEL);
	if (!pbl->dir || !pbl->tables || !pbl->tables_dma)
		return -ENOMEM;
	for (t = 0; t < pbl->ntables; t++) {
		u32 first = t * VHCA_PBL_TABLE_ENTRIES;
		u32 cnt = min_t(u32, VHCA_PBL_TABLE_ENTRIES, n - first);

		pbl->tables[t] = dma_alloc_coherent(d, VHCA_PBL_TABLE_SIZE,
						    &pbl->tables_dma[t],
						    GFP_KERNEL);
		if (!pbl->tables[t])
			return -ENOMEM;
		for (i = 0; i < cnt; i++)
			pbl->tables[t][i] = cpu_to_le64(pages[first + i]);
		pbl->dir[t] = cpu_to_le64(pbl->tables_dma[t]);
	}
	pbl->desc.levels = VHCA_PBL_TWO_LEVEL;
	pbl->desc.addr = pbl->dir_dma;
	return 0;
}

/*
 * The page list of a pinned user buffer in blocks of `pgsz` bytes (a power of
 * two from 4 KiB to 1 GiB; for an MR, the one ib_umem_find_best_pgsz chose).
 */
int vhca_pbl_from_umem(struct vhca_dev *dev, struct ib_umem *umem,
		       unsigned long pgsz, struct vhca_pbl_buf *pbl)
{
	struct ib_block_iter biter;
	size_t n = ib_umem_num_dma_blocks(umem, pgsz);
	bool contiguous = true;
	u64 *pages;
	u32 i = 0;
	int ret;

	memset(pbl, 0, sizeof(*pbl));
	if (!n || n > VHCA_PBL_MAX_PAGES)
		return -EINVAL;
	pages = kvmalloc_array(n, sizeof(u64), GFP_KERNEL);
	if (!pages)
		return -ENOMEM;
	rdma_umem_for_each_dma_block(umem, &biter, pgsz) {
		pages[i] = rdma_block_iter_dma_address(&biter);
		if (i && pages[i] != pages[0] + (u64)i * pgsz)
			contiguous = false;
		i++;
	}
	pbl->desc.npages = n;
	pbl->desc.page_shift = ilog2(pgsz);
	if (contiguous) {
		pbl->desc.levels = VHCA_PBL_CONTIGUOUS;
		pbl->desc.addr = pages[0];
		ret = 0;
	} else {
		ret = vhca_pbl_fill(dev, pages, n, pbl);
		if (ret)
			vhca_pbl_free(dev, pbl);
	}
	kvfree(pages);
	return ret;
}

/*
 * Pins a user ring of `need` bytes at `addr` (the provider said it has
 * `buf_size`) and describes it with 4 KiB pages. Rings start on a page
 * boundary (vhca_abi.h: "a ring starts at the first byte of its first page").
 */
struct ib_umem *vhca_umem_ring(struct vhca_dev *dev, u64 addr, u32 buf_size,
			       size_t need, struct vhca_pbl_buf *pbl)
{
	struct ib_umem *umem;
	int ret;

	if (!addr || !PAGE_ALIGNED(addr) || buf_size < need)
		return ERR_PTR(-EINVAL);
	/*
	 * LOCAL_WRITE even for rings the device only reads: a writable pin
	 * keeps the page the process writes and the page the device reads the
	 * same (no copy-on-write split after a fork).
	 */
	umem = ib_umem_get(&dev->ibdev, addr, need, IB_ACCESS_LOCAL_WRITE);
	if (IS_ERR(umem))
		return umem;
	ret = vhca_pbl_from_umem(dev, umem, PAGE_SIZE, pbl);
	if (ret) {
		ib_umem_release(umem);
		return ERR_PTR(ret);
	}
	return umem;
}
