/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * libvhca: the rdma-core provider of the vhca virtual HCA (ARCHITECTURE.md §7).
 *
 * The device interface is vhca_abi.h (generated from device/src/abi); how the
 * kernel hands out resources is vhca-abi-user.h. Rings (SQ, RQ, SRQ, CQ) live
 * in this process's memory, pinned by vhca.ko; each queue has a doorbell slot
 * in the context's UAR page (BAR2), mapped here. Posting and polling touch
 * only those: no system call. Files: main (device match, context, UAR and
 * WAKE mappings), verbs (device, port, PD, MR, AH), cq, qp, srq.
 */

#ifndef VHCA_PROVIDER_H
#define VHCA_PROVIDER_H

#include <endian.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/driver.h>
#include <util/mmio.h>
#include <util/udma_barrier.h>

#include "compat.h"
#include "vhca_abi.h"
#include "vhca-abi.h"

struct vhca_device {
	struct verbs_device ibv_dev;
};

/* QPN -> QP for poll_cq: two levels of 4096 entries cover 24-bit QPNs. */
#define VHCA_QPT_SHIFT 12
#define VHCA_QPT_SIZE  (1U << VHCA_QPT_SHIFT)
#define VHCA_QPT_MASK  (VHCA_QPT_SIZE - 1)

struct vhca_context {
	struct verbs_context ibv_ctx;
	void *uar;		/* this context's doorbell page (BAR2) */
	void *wake;		/* the WAKE page (BAR4), or NULL */
	uint32_t uar_index;
	uint32_t cap_flags;	/* VHCA_DEV_CAP_* */
	uint32_t max_qp_wr;
	uint32_t max_sge;
	uint32_t max_cqe;
	uint32_t max_inline;
	uint32_t max_srq_wr;
	/* Link layer Ethernet (RoCEv2, WF-10): AHs go through the kernel. */
	bool roce;
	pthread_mutex_t qp_table_lock;	/* writers; poll_cq reads without it */
	struct vhca_qp **qp_table[VHCA_QPT_SIZE];
	/*
	 * XRC SRQs by number (SR-02): their receive CQEs name an XRC_TGT QP
	 * this process does not map, and the SRQ in `srqn`. Under
	 * qp_table_lock for writers.
	 */
	struct vhca_srq **xsrq_table[VHCA_QPT_SIZE];
};

/*
 * A PD, or a parent domain (ibv_alloc_parent_domain): same kernel handle as
 * its protection domain, plus the caller's ring allocators. QPs and SRQs
 * created on a parent domain take their rings from alloc() (resource types
 * VHCA_RES_TYPE_*) unless it answers IBV_ALLOCATOR_USE_DEFAULT.
 */
struct vhca_pd {
	struct ibv_pd ibv_pd;
	struct vhca_pd *protection_domain;	/* NULL: a plain PD */
	atomic_int refcount;	/* 1 + parent domains (PD) or rings (parent) */
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size,
		       size_t alignment, uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr,
		     uint64_t resource_type);
	void *pd_context;
};

#define VHCA_RES_TYPE_QP  1ULL	/* SQ and RQ rings */
#define VHCA_RES_TYPE_SRQ 2ULL

static inline struct vhca_pd *to_vpd(struct ibv_pd *p)
{
	return container_of(p, struct vhca_pd, ibv_pd);
}

/*
 * A ring: page-aligned, zeroed; in anonymous memory not inherited by fork,
 * or from a parent domain's allocator (`pd` set).
 */
struct vhca_buf {
	void *buf;
	size_t length;
	struct vhca_pd *pd;	/* parent domain whose alloc() gave buf */
	uint64_t type;
};

/* A work queue: SQ, RQ or SRQ ring of fixed-stride WQEs. */
struct vhca_wq {
	struct vhca_buf buf;
	pthread_spinlock_t lock;	/* posters */
	uint32_t log2;		/* 2^log2 WQEs */
	uint32_t shift;		/* log2 of the stride */
	uint32_t pi;		/* WQEs posted (free-running) */
	uint32_t ci;		/* SQ, RQ: WQEs retired, written by poll_cq */
	uint32_t max_sge;
	uint32_t max_inline;	/* SQ */
	uint64_t *wrid;		/* SQ, RQ: the caller's wr_id per ring slot */
	void *db;		/* the producer-index word in the UAR page */
};

struct vhca_cq {
	union {
		struct ibv_cq ibv_cq;
		struct verbs_cq vcq;	/* ibv_cq_ex (ibv_create_cq_ex) */
	};
	struct ibv_wc ex_wc;	/* ibv_cq_ex: the completion start/next_poll took */
	struct vhca_buf buf;
	pthread_spinlock_t lock;
	uint32_t cqn;
	uint32_t log2;
	uint32_t ci;		/* CQEs consumed (free-running) */
	uint32_t arm_sn;	/* last arm sequence number */
	void *db;		/* struct vhca_cq_doorbell */
};

struct vhca_srq {
	union {
		struct ibv_srq ibv_srq;
		struct verbs_srq vsrq;	/* ibv_create_srq_ex (XRC, SR-02) */
	};
	struct vhca_wq wq;
	/* Receive completions seen on any CQ: room is pi - done. */
	atomic_uint done;
	uint32_t srqn;
};

/* Staging of one ibv_wr_*() work request until the next builder or wr_complete. */
struct vhca_qp_ex_state {
	struct ibv_send_wr wr;
	struct ibv_sge *sge;	/* sq.max_sge (at least 1) entries */
	uint8_t *inl;		/* sq.max_inline bytes: inline data copied at set time */
	uint32_t pi;		/* next ring index while between wr_start and wr_complete */
	int err;
	bool pending;
};

struct vhca_qp {
	union {
		struct ibv_qp ibv_qp;
		struct verbs_qp vqp;	/* ibv_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS */
	};
	struct vhca_qp_ex_state *ex;	/* NULL unless created as an extended QP */
	enum ibv_qp_state state;	/* last state set by modify_qp */
	struct vhca_wq sq;
	struct vhca_wq rq;	/* unused with an SRQ */
	struct vhca_srq *srq;
	uint8_t type;		/* enum vhca_qp_type */
	void *db;		/* struct vhca_qp_doorbell */
};

struct vhca_ah {
	struct ibv_ah ibv_ah;
	struct vhca_av av;
	bool kernel;	/* RoCE: created by vhca.ko, which resolved av.dmac */
};

static inline struct vhca_context *to_vctx(struct ibv_context *c)
{
	return container_of(c, struct vhca_context, ibv_ctx.context);
}

static inline struct vhca_cq *to_vcq(struct ibv_cq *c)
{
	return container_of(c, struct vhca_cq, ibv_cq);
}

static inline struct vhca_qp *to_vqp(struct ibv_qp *q)
{
	return container_of(q, struct vhca_qp, ibv_qp);
}

static inline struct vhca_srq *to_vsrq(struct ibv_srq *s)
{
	return container_of(s, struct vhca_srq, ibv_srq);
}

static inline struct vhca_ah *to_vah(struct ibv_ah *a)
{
	return container_of(a, struct vhca_ah, ibv_ah);
}

/* log2 of the smallest power of two >= v (0 for v <= 1). */
static inline uint32_t vhca_log2_up(uint32_t v)
{
	return v <= 1 ? 0 : 32 - __builtin_clz(v - 1);
}

static inline void *vhca_wqe(struct vhca_wq *wq, uint32_t index)
{
	return (uint8_t *)wq->buf.buf +
	       ((size_t)(index & ((1U << wq->log2) - 1)) << wq->shift);
}

static inline void *vhca_slot(struct vhca_context *ctx, uint16_t slot)
{
	return (uint8_t *)ctx->uar + (size_t)slot * VHCA_UAR_SLOT_SIZE;
}

/*
 * Sets the summary bit of the slot `word` lies in, after that word (a producer
 * index, a CQ arm word) was stored: the device reads a slot only when it takes
 * its bit (vhca_abi.h "Doorbell pages").
 */
static inline void vhca_db_flag(struct vhca_context *ctx, void *word)
{
	size_t slot = ((uint8_t *)word - (uint8_t *)ctx->uar) /
		      VHCA_UAR_SLOT_SIZE;
	_Atomic uint32_t *summary =
		(_Atomic uint32_t *)((uint8_t *)ctx->uar +
				     VHCA_UAR_SUMMARY_OFFSET) +
		slot / 32;

	/*
	 * An atomic OR (x86: lock or): other threads of this context set bits of
	 * the same word and the device swaps it to zero concurrently, so a plain
	 * read-modify-write could drop a bit. The page is mapped uncached
	 * (vhca-abi-user.h), where a locked instruction is still atomic (a bus
	 * lock; under KVM the memfd behind BAR2 is cached host RAM). seq_cst:
	 * ordered after the word's store (the device loads the slot after taking
	 * the bit). The ABI is little-endian: bit s % 32 of word s / 32.
	 */
	atomic_fetch_or_explicit(summary, htole32(UINT32_C(1) << (slot % 32)),
				 memory_order_seq_cst);
}

/*
 * The doorbell protocol of vhca_abi.h for a producer index (QP sq_pi / rq_pi,
 * SRQ pi): store the index, set the slot's summary bit, full fence, load the
 * page's asleep word, and if the device sleeps, store to the WAKE page (a
 * trapped MMIO store, still no system call). The device stores asleep, fences
 * and rescans the summaries, so one of the two sides always sees the other
 * (Dekker).
 */
static inline void vhca_db_produce(struct vhca_context *ctx, void *word,
				   uint32_t pi)
{
	/* The WQEs (ordinary memory) before the index (device memory). */
	udma_to_device_barrier();
	mmio_write32_le(word, htole32(pi));
	vhca_db_flag(ctx, word);
	atomic_thread_fence(memory_order_seq_cst);
	if (le32toh(mmio_read32_le((uint8_t *)ctx->uar +
				   offsetof(struct vhca_uar_header, asleep))) !=
		    VHCA_UAR_AWAKE &&
	    ctx->wake)
		mmio_write32_le(ctx->wake, htole32(1));
}

/* main.c */
int vhca_alloc_buf(struct vhca_buf *b, size_t bytes);
int vhca_alloc_buf_pd(struct vhca_buf *b, size_t bytes, struct ibv_pd *pd,
		      uint64_t type);
void vhca_free_buf(struct vhca_buf *b);
int vhca_qp_table_insert(struct vhca_context *ctx, struct vhca_qp *qp);
void vhca_qp_table_remove(struct vhca_context *ctx, uint32_t qpn);

static inline struct vhca_qp *vhca_qp_lookup(struct vhca_context *ctx,
					     uint32_t qpn)
{
	struct vhca_qp **l2 = __atomic_load_n(
		&ctx->qp_table[(qpn >> VHCA_QPT_SHIFT) & VHCA_QPT_MASK],
		__ATOMIC_ACQUIRE);

	return l2 ? __atomic_load_n(&l2[qpn & VHCA_QPT_MASK], __ATOMIC_ACQUIRE) :
		    NULL;
}

/* xrc.c (SR-02) */
struct ibv_xrcd *vhca_open_xrcd(struct ibv_context *context,
				struct ibv_xrcd_init_attr *attr);
int vhca_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_srq *vhca_create_srq_ex(struct ibv_context *context,
				   struct ibv_srq_init_attr_ex *attr);
int vhca_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_qp *vhca_create_xrc_tgt(struct ibv_context *context,
				   struct ibv_qp_init_attr_ex *attr);
int vhca_xsrq_table_insert(struct vhca_context *ctx, struct vhca_srq *srq);
void vhca_xsrq_table_remove(struct vhca_context *ctx, uint32_t srqn);
struct vhca_srq *vhca_xsrq_lookup(struct vhca_context *ctx, uint32_t srqn);

/* verbs.c */
int vhca_query_device(struct ibv_context *context,
		      const struct ibv_query_device_ex_input *input,
		      struct ibv_device_attr_ex *attr, size_t attr_size);
int vhca_query_port(struct ibv_context *context, uint8_t port,
		    struct ibv_port_attr *attr);
struct ibv_pd *vhca_alloc_pd(struct ibv_context *context);
int vhca_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *vhca_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			   uint64_t hca_va, int access);
int vhca_dereg_mr(struct verbs_mr *vmr);
struct ibv_pd *vhca_import_pd(struct ibv_context *context, uint32_t pd_handle);
void vhca_unimport_pd(struct ibv_pd *pd);
struct ibv_mr *vhca_import_mr(struct ibv_pd *pd, uint32_t mr_handle);
void vhca_unimport_mr(struct ibv_mr *mr);
int vhca_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		   uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sges);
struct ibv_pd *vhca_alloc_parent_domain(struct ibv_context *context,
					struct ibv_parent_domain_init_attr *attr);
int vhca_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd,
		  void *addr, size_t length, int access);
struct ibv_mw *vhca_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int vhca_dealloc_mw(struct ibv_mw *mw);
struct ibv_ah *vhca_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int vhca_destroy_ah(struct ibv_ah *ah);

/* cq.c */
struct ibv_cq *vhca_create_cq(struct ibv_context *context, int cqe,
			      struct ibv_comp_channel *channel,
			      int comp_vector);
struct ibv_cq_ex *vhca_create_cq_ex(struct ibv_context *context,
				    struct ibv_cq_init_attr_ex *attr);
int vhca_destroy_cq(struct ibv_cq *cq);
int vhca_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);
int vhca_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int vhca_resize_cq(struct ibv_cq *cq, int cqe);
void vhca_cq_clean(struct vhca_cq *cq, uint32_t qpn, struct vhca_srq *srq);

/* qp.c */
struct ibv_qp *vhca_create_qp(struct ibv_pd *pd,
			      struct ibv_qp_init_attr *attr);
int vhca_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		  struct ibv_qp_init_attr *init_attr);
int vhca_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		   int attr_mask);
int vhca_destroy_qp(struct ibv_qp *qp);
struct ibv_qp *vhca_create_qp_ex(struct ibv_context *context,
				 struct ibv_qp_init_attr_ex *attr);
int vhca_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad_wr);
int vhca_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		 struct ibv_mw_bind *mw_bind);
int vhca_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad_wr);
int vhca_write_recv(struct vhca_wq *wq, struct ibv_recv_wr *wr,
		    uint64_t wr_id);

/* srq.c */
struct ibv_srq *vhca_srq_create(struct ibv_pd *pd,
				struct ibv_srq_init_attr *attr,
				struct ibv_srq_init_attr_ex *ex);
struct ibv_srq *vhca_create_srq(struct ibv_pd *pd,
				struct ibv_srq_init_attr *attr);
int vhca_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
		    int attr_mask);
int vhca_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int vhca_destroy_srq(struct ibv_srq *srq);
int vhca_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr);

/* dm.c: device memory (issue 29 item 2). */
struct ibv_dm *vhca_alloc_dm(struct ibv_context *context,
			     struct ibv_alloc_dm_attr *attr);
int vhca_free_dm(struct ibv_dm *dm);
struct ibv_dm *vhca_import_dm(struct ibv_context *context, uint32_t dm_handle);
void vhca_unimport_dm(struct ibv_dm *dm);
struct ibv_mr *vhca_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *dm,
			      uint64_t dm_offset, size_t length,
			      unsigned int access);

#endif /* VHCA_PROVIDER_H */
