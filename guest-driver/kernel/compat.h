/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * compat.h: every difference between the kernels vhca.ko builds on, in one
 * place (issue 17; guest-driver/README.md states the range). Minimum: 6.1
 * (Debian 12); checked against Debian's 6.1, 6.12 and sid's newest by
 * images/kmod-matrix.sh. Each shim is keyed on LINUX_VERSION_CODE, so a
 * distribution kernel that backports an API change needs its own line here.
 * The .c files use only the names defined below where the kernels differ.
 */

#ifndef VHCA_COMPAT_H
#define VHCA_COMPAT_H

#include <linux/mm.h>
#include <linux/netdevice.h>
#include <linux/rcupdate.h>
#include <linux/version.h>
#include <rdma/ib_umem_odp.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 1, 0)
#error "vhca.ko needs Linux 6.1 or newer (guest-driver/README.md)"
#endif

/*
 * <asm/unaligned.h> moved to <linux/unaligned.h> in 6.12 (the old name is
 * gone there).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
#include <linux/unaligned.h>
#else
#include <asm/unaligned.h>
#endif

/*
 * ib_device_ops.create_cq takes the whole uverbs_attr_bundle since 6.11
 * (before: the driver's ib_udata). vhca_cq_attrs is what the op receives,
 * vhca_cq_udata() the driver udata in it (NULL for a kernel CQ either way).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
typedef struct uverbs_attr_bundle vhca_cq_attrs;
static inline struct ib_udata *vhca_cq_udata(vhca_cq_attrs *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}
#else
typedef struct ib_udata vhca_cq_attrs;
static inline struct ib_udata *vhca_cq_udata(vhca_cq_attrs *udata)
{
	return udata;
}
#endif

/*
 * IBA 1.5's Memory Placement Extensions (FLUSH, ATOMIC WRITE) reached ib_core
 * in 6.2. Before, no consumer can ask for them: the capability and access
 * bits are 0, so verbs.c neither advertises them nor maps them.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
#define IB_DEVICE_FLUSH_GLOBAL 0
#define IB_DEVICE_ATOMIC_WRITE 0
#define IB_ACCESS_FLUSH_GLOBAL 0
#define IB_ACCESS_FLUSH_PERSISTENT 0
#endif

/* vm_flags became read-only behind vm_flags_set() in 6.3. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void vm_flags_set(struct vm_area_struct *vma, unsigned long flags)
{
	vma->vm_flags |= flags;
}
#endif

/*
 * ib_device_get_netdev() is ib_core-internal before 6.12 (the oldest kernel
 * checked with it exported). There, the RoCE port's readers take the
 * driver's own pointer to the netdev it paired (struct vhca_dev.ndev, set
 * and cleared under RTNL by roce.c) and a reference on it inside an RCU
 * read section: unregister_netdevice waits for RCU after its notifiers (one
 * of which clears the pointer) and then for every reference, the pattern of
 * dev_get_by_index_rcu(). A macro, because struct vhca_dev is defined after
 * this header; the caller passes &dev->ibdev.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 12, 0)
#define ib_device_get_netdev(ibd, port)                                        \
	({                                                                     \
		struct net_device *vhca_nd__;                                  \
		rcu_read_lock();                                               \
		vhca_nd__ = READ_ONCE(                                         \
			container_of(ibd, struct vhca_dev, ibdev)->ndev);      \
		if (vhca_nd__)                                                 \
			dev_hold(vhca_nd__);                                   \
		rcu_read_unlock();                                             \
		(void)(port);                                                  \
		vhca_nd__;                                                     \
	})
#endif

/*
 * Changes after 6.12. The kernels between 6.12 and sid's 7.2 are not built
 * by images/kmod-matrix.sh: each cut-off below is the release the rdma
 * tree's history puts the change in, checked only as far as "7.2 has it,
 * 6.12 has not".
 */

/*
 * reg_user_mr takes a DMA handle since 6.17. Only a device with an
 * alloc_dmah op has handles, and vhca has none, so ib_core passes NULL;
 * VHCA_REG_MR_DMAH is the parameter where the kernel has it.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 17, 0)
#define VHCA_REG_MR_DMAH struct ib_dmah *dmah,
#else
#define VHCA_REG_MR_DMAH
#endif

/*
 * 7.1 split the CQ ops: create_user_cq for uverbs (ib_core falls back to
 * create_cq only while drivers move, so vhca sets both: vhca_create_cq
 * serves kernel and user CQs by udata), and resize_cq became
 * resize_user_cq with an unsigned CQE count.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 1, 0)
#define VHCA_CREATE_USER_CQ_OP(fn) .create_user_cq = (fn),
#define VHCA_RESIZE_CQ_OP resize_user_cq
typedef unsigned int vhca_cqe_count;
#else
#define VHCA_CREATE_USER_CQ_OP(fn)
#define VHCA_RESIZE_CQ_OP resize_cq
typedef int vhca_cqe_count;
#endif

/*
 * An ODP umem's pages (odp.c). Up to 6.15, ib_umem_odp_map_dma_and_lock maps
 * each page for DMA itself and keeps dma_list[i] = DMA address | the
 * ODP_READ/WRITE_ALLOWED_BIT it was mapped with (0: absent). 6.16 turned
 * that into an hmm_dma_map: pfn_list[i] carries HMM_PFN_* flags (the access
 * mask asks with HMM_PFN_WRITE), the driver maps a valid page for DMA with
 * hmm_dma_map_pfn (HMM_PFN_DMA_MAPPED from then on) and counts it in npages,
 * which ib_umem_odp_unmap_dma_pages counts down. With either:
 *   VHCA_ODP_ACCESS_READ/WRITE   the access mask to fault with;
 *   vhca_odp_dma_present()       page idx was handed out (may be in use);
 *   vhca_odp_dma_addr()          page idx's DMA address, if it is valid and,
 *                                with need_write, writable.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
#include <linux/hmm.h>
#include <linux/hmm-dma.h>
#include <linux/pci-p2pdma.h>
#define VHCA_ODP_ACCESS_READ 0
#define VHCA_ODP_ACCESS_WRITE HMM_PFN_WRITE
static inline bool vhca_odp_dma_present(struct ib_umem_odp *odp, size_t idx)
{
	return odp->map.pfn_list[idx] & HMM_PFN_DMA_MAPPED;
}

static inline bool vhca_odp_dma_addr(struct device *dma, struct ib_umem_odp *odp,
				     size_t idx, bool need_write,
				     dma_addr_t *addr)
{
	struct pci_p2pdma_map_state p2p = {};
	unsigned long pfn = odp->map.pfn_list[idx];
	dma_addr_t a;

	if (!(pfn & HMM_PFN_VALID) || (need_write && !(pfn & HMM_PFN_WRITE)))
		return false;
	a = hmm_dma_map_pfn(dma, &odp->map, idx, &p2p);
	if (dma_mapping_error(dma, a))
		return false;
	if (!(pfn & HMM_PFN_DMA_MAPPED))
		odp->npages++;
	*addr = a;
	return true;
}
#else
#define VHCA_ODP_ACCESS_READ ODP_READ_ALLOWED_BIT
#define VHCA_ODP_ACCESS_WRITE ODP_WRITE_ALLOWED_BIT
static inline bool vhca_odp_dma_present(struct ib_umem_odp *odp, size_t idx)
{
	return odp->dma_list[idx];
}

static inline bool vhca_odp_dma_addr(struct device *dma, struct ib_umem_odp *odp,
				     size_t idx, bool need_write,
				     dma_addr_t *addr)
{
	dma_addr_t a = odp->dma_list[idx];

	if (!a || (need_write && !(a & ODP_WRITE_ALLOWED_BIT)))
		return false;
	*addr = a & ODP_DMA_ADDR_MASK;
	return true;
}
#endif

/* ib_umem_get() is ib_umem_get_va() since 7.2 (same arguments). */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 2, 0)
#define ib_umem_get ib_umem_get_va
#endif

#endif /* VHCA_COMPAT_H */
