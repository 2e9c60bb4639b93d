/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR MIT) */
/*
 * vhca-abi-user.h: the private uverbs ABI between vhca.ko and the rdma-core
 * provider libvhca (the udata of the verbs below). The provider keeps a copy
 * under rdma-core's kernel-headers/rdma/ and includes it as
 * <rdma/vhca-abi-user.h>.
 *
 * Everything the device defines (WQE, CQE and doorbell layouts, the wake
 * protocol) is in vhca_abi.h; this file only says how the kernel hands the
 * provider its resources:
 *
 * - alloc_ucontext: the context gets its own UAR page (BAR2 page index >= 1).
 *   The provider maps it with mmap(NULL, uar_page_size, PROT_READ |
 *   PROT_WRITE, MAP_SHARED, cmd_fd, uar_mmap_offset); it is uncached device
 *   memory. The page's header (asleep word) is at byte 0, the doorbell summary
 *   (one bit per slot, set with an atomic OR after a producer index or a CQ
 *   arm word) at byte 64, slot s at s * 8.
 * - The WAKE page (BAR4, vhca_abi.h VHCA_WAKE_BAR_INDEX), shared by every
 *   context: mmap(NULL, wake_page_size, PROT_WRITE, MAP_SHARED, cmd_fd,
 *   wake_mmap_offset). After storing a producer index the provider fences and
 *   loads its page's asleep word; if set, a 32-bit store of any value to the
 *   WAKE page wakes the device (the doorbell protocol of vhca_abi.h), with no
 *   system call. wake_page_size is 0 when the device has no WAKE page: the
 *   device then finds the doorbell at its next periodic rescan.
 * - create_cq / create_qp / create_srq: the provider allocates the rings
 *   itself (page-aligned, zeroed, 2^log2 entries of the stride it chose) and
 *   passes their user addresses; the kernel pins them (ib_umem), builds the
 *   page lists, picks a free doorbell slot in the context's UAR page and
 *   returns it. No mmap is needed for queue buffers.
 * - resize_cq / modify_srq (IB_SRQ_MAX_WR): the same for the new ring; on
 *   success the kernel unpins the old one.
 * - Kernel checks: every ring must start on a page boundary, be at least
 *   (entries << stride_shift) bytes, and use a stride the device allows
 *   (vhca_abi.h VHCA_*_WQE_SHIFT).
 *
 * uverbs ABI version (ib_device.ops.uverbs_abi_ver): VHCA_IB_UVERBS_ABI_VERSION.
 * The provider's match range must include it. A change to any struct here
 * that is not a pure append bumps it.
 */

#ifndef VHCA_ABI_USER_H
#define VHCA_ABI_USER_H

#include <linux/types.h>
#include <rdma/ib_user_ioctl_cmds.h>

#define VHCA_IB_UVERBS_ABI_VERSION 1

/* mmap() offsets, in pages (vm_pgoff). */
/* The context's UAR page (BAR2). */
#define VHCA_IB_MMAP_UAR  0
/* The device's WAKE page (BAR4), write-only. */
#define VHCA_IB_MMAP_WAKE 1
/* Device memory allocations: each its own offset, from this one up. */
#define VHCA_IB_MMAP_DM_FIRST 0x100

/*
 * Device memory (ibv_alloc_dm; vhca_abi.h VHCA_REG_CAP_DM_SIZE): the kernel
 * allocates whole pages of the device's DM bytes, zeroed, and returns the
 * allocation's mmap() offset in a driver attribute of UVERBS_METHOD_DM_ALLOC;
 * the provider maps ALIGN(length, page size) bytes there (uncached device
 * memory, only this allocation's pages). ibv_import_dm asks the kernel for
 * the offset and length of a DM handle with VHCA_IB_METHOD_DM_QUERY. The
 * pages return to the allocator once the DM is freed and every mapping of
 * it is gone. ibv_reg_dm_mr registers a range of a DM (zero-based).
 */
enum vhca_ib_dm_alloc_attrs {
	VHCA_IB_ATTR_ALLOC_DM_RESP_MMAP_OFFSET = (1U << UVERBS_ID_NS_SHIFT),
};

enum vhca_ib_dm_methods {
	VHCA_IB_METHOD_DM_QUERY = (1U << UVERBS_ID_NS_SHIFT),
};

enum vhca_ib_dm_query_attrs {
	VHCA_IB_ATTR_QUERY_DM_REQ_HANDLE = (1U << UVERBS_ID_NS_SHIFT),
	VHCA_IB_ATTR_QUERY_DM_RESP_MMAP_OFFSET,
	VHCA_IB_ATTR_QUERY_DM_RESP_LENGTH,
};

/* alloc_ucontext: no input. */
struct vhca_ib_alloc_ucontext_resp {
	/* The context's UAR page (BAR2 page index), >= 1. */
	__u32 uar_index;
	/* VHCA_DEV_CAP_* (what the device supports). */
	__u32 cap_flags;
	/* Offset to pass to mmap() for the UAR page. */
	__aligned_u64 uar_mmap_offset;
	/* Bytes of the UAR page to map (VHCA_UAR_PAGE_SIZE). */
	__u32 uar_page_size;
	/* Doorbell slots per page (VHCA_UAR_SLOTS), header included. */
	__u32 uar_slots;
	/* Device limits, as in QUERY_DEVICE. */
	__u32 max_qp_wr;
	__u32 max_sge;
	__u32 max_cqe;
	__u32 max_inline;
	__u32 max_srq_wr;
	__u32 reserved;
	/* Offset to pass to mmap() for the WAKE page (appended). */
	__aligned_u64 wake_mmap_offset;
	/* Bytes of the WAKE page to map; 0: the device has none. */
	__u32 wake_page_size;
	__u32 reserved2;
};

/*
 * ibv_import_device (UVERBS_METHOD_QUERY_CONTEXT): a process handed a
 * duplicate of the command FD (ibv_import_device, then ibv_import_pd and
 * ibv_import_mr for the objects it shares) gets the context's
 * alloc_ucontext response again, struct vhca_ib_alloc_ucontext_resp in this
 * driver attribute, and maps the same UAR and WAKE pages.
 */
enum vhca_ib_query_context_attrs {
	VHCA_IB_ATTR_QUERY_CONTEXT_RESP_UCTX = (1U << UVERBS_ID_NS_SHIFT),
};

/* alloc_pd: no input. */
struct vhca_ib_alloc_pd_resp {
	__u32 pdn;
	__u32 reserved;
};

/*
 * create_ah response (appended in ABI 1). libvhca asks the kernel for an AH
 * only on a RoCE port (link layer Ethernet, WF-10): ib_core resolves the
 * next hop's MAC for the AH's dgid (ARP/ND through the paired netdev) and
 * vhca.ko returns it; the provider puts it in the AV it copies into each UD
 * WQE (vhca_abi.h struct vhca_av.dmac). An InfiniBand AH stays in the
 * provider, with no system call.
 */
struct vhca_ib_create_ah_resp {
	__u8 dmac[6];
	__u8 reserved[2];
};

/* create_cq input. */
struct vhca_ib_create_cq {
	/* The ring: 2^log2_entries CQEs of VHCA_CQE_SIZE bytes, zeroed. */
	__aligned_u64 buf_addr;
	/* Bytes at buf_addr (at least VHCA_CQE_SIZE << log2_entries). */
	__u32 buf_size;
	__u8 log2_entries;
	__u8 reserved[3];
};

struct vhca_ib_create_cq_resp {
	__u32 cqn;
	/* Usable entries (the whole ring). */
	__u32 entries;
	/* UAR page and slot of the CQ's doorbell (struct vhca_cq_doorbell). */
	__u32 uar_index;
	__u16 db_slot;
	__u16 reserved;
};

/*
 * resize_cq input (appended in ABI 1; no driver response: the new size comes
 * back in the core response's cqe). The new ring need not be zeroed: the
 * device fills it (vhca_abi.h "Resizing"). The provider holds its CQ lock
 * across the call, after storing its consumer index in the doorbell slot,
 * and on success switches to the new ring keeping that index.
 */
struct vhca_ib_resize_cq {
	/* The new ring: 2^log2_entries CQEs of VHCA_CQE_SIZE bytes. */
	__aligned_u64 buf_addr;
	__u32 buf_size;
	__u8 log2_entries;
	__u8 reserved[3];
};

/* create_qp input. */
struct vhca_ib_create_qp {
	/* SQ ring: 2^log2_sq_size WQEs of 2^sq_wqe_shift bytes. */
	__aligned_u64 sq_buf_addr;
	/* RQ ring: 2^log2_rq_size WQEs of 2^rq_wqe_shift bytes; 0 with an SRQ. */
	__aligned_u64 rq_buf_addr;
	__u32 sq_buf_size;
	__u32 rq_buf_size;
	__u8 log2_sq_size;
	__u8 log2_rq_size;
	__u8 sq_wqe_shift;
	__u8 rq_wqe_shift;
	__u32 reserved;
};

struct vhca_ib_create_qp_resp {
	__u32 qpn;
	/* UAR page and slot of the QP's doorbell (struct vhca_qp_doorbell). */
	__u32 uar_index;
	__u16 db_slot;
	__u16 reserved0;
	__u32 reserved1;
};

/* create_srq input. */
struct vhca_ib_create_srq {
	/* The ring: 2^log2_entries WQEs of 2^wqe_shift bytes. */
	__aligned_u64 buf_addr;
	__u32 buf_size;
	__u8 log2_entries;
	__u8 wqe_shift;
	__u16 reserved;
};

/*
 * modify_srq input (appended in ABI 1), read only with IB_SRQ_MAX_WR: the new
 * ring, of the stride given at create_srq, 2^log2_entries >= max_wr WQEs. The
 * provider posts nothing during the call (it holds its SRQ lock) and on
 * success switches to the new ring keeping its producer index (vhca_abi.h
 * "Resizing").
 */
struct vhca_ib_modify_srq {
	__aligned_u64 buf_addr;
	__u32 buf_size;
	__u8 log2_entries;
	__u8 reserved[3];
};

struct vhca_ib_create_srq_resp {
	__u32 srqn;
	/* UAR page and slot of the SRQ's doorbell (struct vhca_srq_doorbell). */
	__u32 uar_index;
	__u16 db_slot;
	__u16 reserved0;
	__u32 reserved1;
};

#endif /* VHCA_ABI_USER_H */
