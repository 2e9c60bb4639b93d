// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Completion queues (CQ-01..03). The ring is 2^log2 CQEs of 64 bytes in this
 * process's memory; the device writes entry k with owner bit 1 - (k / N) % 2,
 * owner byte last (vhca_abi.h "Owner bit"). poll_cq reads the owner byte,
 * then the rest after a read barrier, and gives entries back by storing the
 * consumer index into the CQ's doorbell slot. req_notify_cq stores a new arm
 * word (sequence number | SOLICITED) into the same slot: neither makes a
 * system call; the event itself arrives through the completion channel.
 *
 * A CQE carries no WQE counter: send and RQ WQEs carry their ring index as
 * wr_id (qp.c), so a CQE retires its queue up to that WQE, unsignaled ones
 * included, and the caller's wr_id comes from the queue's shadow array. SRQ
 * WQEs carry the caller's wr_id; the SRQ counts receive completions instead.
 *
 * resize_cq (CQ-04): under the CQ lock (no poll meanwhile), store ci, let the
 * kernel's RESIZE_CQ move the CQ to a new buffer (the device copies the CQEs
 * not yet polled to the same free-running indices and stamps the other
 * slots, vhca_abi.h "Resizing"), then swap buffers and keep ci.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vhca.h"

/* log2 of the ring for `cqe` entries; EINVAL if the device has no room. */
static int vhca_cq_log2(struct vhca_context *ctx, int cqe, uint32_t *out)
{
	uint32_t log2;

	if (cqe < 1 || (uint32_t)cqe > ctx->max_cqe)
		return EINVAL;
	log2 = vhca_log2_up(cqe);
	if ((1U << log2) > ctx->max_cqe)
		return EINVAL;
	/* The ring takes a page anyway: fill it. */
	while ((VHCA_CQE_SIZE << log2) < VHCA_UAR_PAGE_SIZE &&
	       (2U << log2) <= ctx->max_cqe)
		log2++;
	*out = log2;
	return 0;
}

struct ibv_cq *vhca_create_cq(struct ibv_context *context, int cqe,
			      struct ibv_comp_channel *channel,
			      int comp_vector)
{
	struct vhca_context *ctx = to_vctx(context);
	struct vhca_cmd_create_cq_resp resp = {};
	struct vhca_cmd_create_cq cmd = {};
	struct vhca_cq *cq;
	uint32_t log2;
	int ret;

	ret = vhca_cq_log2(ctx, cqe, &log2);
	if (ret) {
		errno = ret;
		return NULL;
	}

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->log2 = log2;
	ret = vhca_alloc_buf(&cq->buf, (size_t)VHCA_CQE_SIZE << log2);
	if (ret)
		goto err_free;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);

	cmd.buf_addr = (uintptr_t)cq->buf.buf;
	cmd.buf_size = cq->buf.length;
	cmd.log2_entries = log2;
	ret = ibv_cmd_create_cq(context, cqe, channel, comp_vector, &cq->ibv_cq,
				&cmd.ibv_cmd, sizeof(cmd), &resp.ibv_resp,
				sizeof(resp));
	if (ret)
		goto err_buf;
	if (resp.uar_index != ctx->uar_index ||
	    resp.db_slot < VHCA_UAR_FIRST_SLOT ||
	    resp.db_slot >= VHCA_UAR_SLOTS) {
		ibv_cmd_destroy_cq(&cq->ibv_cq);
		ret = EPROTO;
		goto err_buf;
	}
	cq->cqn = resp.cqn;
	cq->db = vhca_slot(ctx, resp.db_slot);
	return &cq->ibv_cq;

err_buf:
	pthread_spin_destroy(&cq->lock);
	vhca_free_buf(&cq->buf);
err_free:
	free(cq);
	errno = ret;
	return NULL;
}

int vhca_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct vhca_context *ctx = to_vctx(ibcq->context);
	struct vhca_cq *cq = to_vcq(ibcq);
	struct ib_uverbs_resize_cq_resp resp = {};
	struct vhca_cmd_resize_cq cmd = {};
	struct vhca_buf buf = {}, old;
	uint32_t log2;
	int ret;

	if (!(ctx->cap_flags & VHCA_DEV_CAP_RESIZE_CQ))
		return EOPNOTSUPP;
	ret = vhca_cq_log2(ctx, cqe, &log2);
	if (ret)
		return ret;
	/* Need not be zeroed: the device fills the new ring. */
	ret = vhca_alloc_buf(&buf, (size_t)VHCA_CQE_SIZE << log2);
	if (ret)
		return ret;
	cmd.buf_addr = (uintptr_t)buf.buf;
	cmd.buf_size = buf.length;
	cmd.log2_entries = log2;

	pthread_spin_lock(&cq->lock);
	/* The device takes [ci, pi) as the CQEs to keep. */
	mmio_write32_le((uint8_t *)cq->db +
				offsetof(struct vhca_cq_doorbell, ci),
			htole32(cq->ci));
	ret = ibv_cmd_resize_cq(ibcq, cqe, &cmd.ibv_cmd, sizeof(cmd), &resp,
				sizeof(resp));
	if (!ret) {
		old = cq->buf;
		cq->buf = buf;
		cq->log2 = log2;
		buf = old;
	}
	pthread_spin_unlock(&cq->lock);
	vhca_free_buf(&buf);	/* the old ring, or the unused new one */
	return ret;
}

int vhca_destroy_cq(struct ibv_cq *ibcq)
{
	struct vhca_cq *cq = to_vcq(ibcq);
	int ret;

	ret = ibv_cmd_destroy_cq(ibcq);
	if (ret)
		return ret;
	pthread_spin_destroy(&cq->lock);
	vhca_free_buf(&cq->buf);
	free(cq);
	return 0;
}

/* The CQE at free-running index i if the device has written it, else NULL. */
static struct vhca_cqe *vhca_cqe_peek(struct vhca_cq *cq, uint32_t i)
{
	struct vhca_cqe *cqe = (struct vhca_cqe *)cq->buf.buf +
			       (i & ((1U << cq->log2) - 1));
	uint8_t want = ((i >> cq->log2) & 1) ? 0 : VHCA_OWNER_BIT;

	if ((__atomic_load_n(&cqe->owner, __ATOMIC_RELAXED) & VHCA_OWNER_BIT) !=
	    want)
		return NULL;
	/* The owner byte before the rest of the entry. */
	udma_from_device_barrier();
	return cqe;
}

/* Retires an SQ or RQ up to the WQE whose ring index the CQE carries. */
static uint64_t vhca_wq_retire(struct vhca_wq *wq, uint64_t cqe_wr_id)
{
	uint32_t idx = (uint32_t)cqe_wr_id;
	uint32_t ci = __atomic_load_n(&wq->ci, __ATOMIC_RELAXED);
	uint32_t pi = __atomic_load_n(&wq->pi, __ATOMIC_ACQUIRE);

	/* Not an outstanding WQE: a device bug; hand the value on as is. */
	if ((uint32_t)(idx - ci) >= (uint32_t)(pi - ci))
		return cqe_wr_id;
	__atomic_store_n(&wq->ci, idx + 1, __ATOMIC_RELEASE);
	return wq->wrid[idx & ((1U << wq->log2) - 1)];
}

/* One CQE into one ibv_wc; false if its QP is gone (the CQE is dropped). */
static bool vhca_cqe_to_wc(struct vhca_context *ctx,
			   const struct vhca_cqe *cqe, struct ibv_wc *wc)
{
	bool recv = cqe->opcode & VHCA_WC_OP_RECV;
	struct vhca_srq *xsrq;
	struct vhca_qp *qp;

	/*
	 * SR-02: a receive into an XRC SRQ names it; its QP is an XRC_TGT QP
	 * this process does not map.
	 */
	if (recv && cqe->srqn && cqe->qp_num != VHCA_NONE) {
		xsrq = vhca_xsrq_lookup(ctx, cqe->srqn);
		if (!xsrq)
			return false;
		wc->wr_id = cqe->wr_id;
		atomic_fetch_add_explicit(&xsrq->done, 1, memory_order_release);
		goto fill;
	}
	qp = cqe->qp_num != VHCA_NONE ? vhca_qp_lookup(ctx, cqe->qp_num) :
					NULL;
	if (!qp)
		return false;

	if (recv && qp->srq) {
		wc->wr_id = cqe->wr_id;
		atomic_fetch_add_explicit(&qp->srq->done, 1,
					  memory_order_release);
	} else {
		wc->wr_id = vhca_wq_retire(recv ? &qp->rq : &qp->sq,
					   cqe->wr_id);
	}
fill:
	/* Status and opcode numbers are ibverbs' (vhca_abi.h). */
	wc->status = cqe->status <= IBV_WC_GENERAL_ERR ?
			     (enum ibv_wc_status)cqe->status :
			     IBV_WC_GENERAL_ERR;
	wc->opcode = (enum ibv_wc_opcode)cqe->opcode;
	wc->vendor_err = cqe->vendor_err;
	wc->byte_len = cqe->byte_len;
	wc->qp_num = cqe->qp_num;
	wc->src_qp = cqe->src_qp;
	/*
	 * Only the ibv bits: SMAC and NETWORK_HDR_TYPE are the kernel's
	 * (ib_core reads them on RoCE); in ibv numbering they would read as
	 * tag-matching flags.
	 */
	wc->wc_flags = cqe->wc_flags & (VHCA_WC_FLAG_GRH |
					VHCA_WC_FLAG_WITH_IMM |
					VHCA_WC_FLAG_WITH_INV);
	if (cqe->wc_flags & VHCA_WC_FLAG_WITH_IMM)
		wc->imm_data = htobe32(cqe->imm_or_inv);
	else if (cqe->wc_flags & VHCA_WC_FLAG_WITH_INV)
		wc->invalidated_rkey = cqe->imm_or_inv;
	else
		wc->imm_data = 0;
	wc->pkey_index = cqe->pkey_index;
	wc->slid = cqe->slid;
	wc->sl = cqe->sl;
	wc->dlid_path_bits = cqe->dlid_path_bits;
	return true;
}

int vhca_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct vhca_context *ctx = to_vctx(ibcq->context);
	struct vhca_cq *cq = to_vcq(ibcq);
	struct vhca_cqe *cqe;
	uint32_t start;
	int n = 0;

	pthread_spin_lock(&cq->lock);
	start = cq->ci;
	while (n < num && (cqe = vhca_cqe_peek(cq, cq->ci))) {
		cq->ci++;
		if (vhca_cqe_to_wc(ctx, cqe, &wc[n]))
			n++;
	}
	/* Give the entries back: the device never writes past ci + size. */
	if (cq->ci != start)
		mmio_write32_le((uint8_t *)cq->db +
					offsetof(struct vhca_cq_doorbell, ci),
				htole32(cq->ci));
	pthread_spin_unlock(&cq->lock);
	return n;
}

/*
 * Extended CQs (ibv_create_cq_ex): start_poll takes the CQ lock and one
 * completion into cq->ex_wc, next_poll the next one, end_poll gives the
 * entries back and unlocks; the read_* callbacks read ex_wc.
 */
static inline struct vhca_cq *cqx_to_vcq(struct ibv_cq_ex *cqx)
{
	return container_of(cqx, struct vhca_cq, vcq.cq_ex);
}

static int vhca_cqx_next(struct vhca_cq *cq)
{
	struct vhca_context *ctx = to_vctx(cq->ibv_cq.context);
	struct vhca_cqe *cqe;

	while ((cqe = vhca_cqe_peek(cq, cq->ci))) {
		cq->ci++;
		if (vhca_cqe_to_wc(ctx, cqe, &cq->ex_wc)) {
			cq->vcq.cq_ex.wr_id = cq->ex_wc.wr_id;
			cq->vcq.cq_ex.status = cq->ex_wc.status;
			return 0;
		}
	}
	return ENOENT;
}

static void vhca_cqx_give_back(struct vhca_cq *cq)
{
	mmio_write32_le((uint8_t *)cq->db +
				offsetof(struct vhca_cq_doorbell, ci),
			htole32(cq->ci));
}

static int vhca_cqx_start_poll(struct ibv_cq_ex *cqx,
			       struct ibv_poll_cq_attr *attr)
{
	struct vhca_cq *cq = cqx_to_vcq(cqx);
	uint32_t start;
	int ret;

	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	start = cq->ci;
	ret = vhca_cqx_next(cq);
	if (ret) {
		/* No end_poll follows ENOENT. */
		if (cq->ci != start)
			vhca_cqx_give_back(cq);
		pthread_spin_unlock(&cq->lock);
	}
	return ret;
}

static int vhca_cqx_next_poll(struct ibv_cq_ex *cqx)
{
	return vhca_cqx_next(cqx_to_vcq(cqx));
}

static void vhca_cqx_end_poll(struct ibv_cq_ex *cqx)
{
	struct vhca_cq *cq = cqx_to_vcq(cqx);

	vhca_cqx_give_back(cq);
	pthread_spin_unlock(&cq->lock);
}

static enum ibv_wc_opcode vhca_cqx_read_opcode(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.opcode;
}

static uint32_t vhca_cqx_read_vendor_err(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.vendor_err;
}

static uint32_t vhca_cqx_read_byte_len(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.byte_len;
}

static __be32 vhca_cqx_read_imm_data(struct ibv_cq_ex *cqx)
{
	/* imm_data and invalidated_rkey share the field, as in ibv_wc. */
	return cqx_to_vcq(cqx)->ex_wc.imm_data;
}

static uint32_t vhca_cqx_read_qp_num(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.qp_num;
}

static uint32_t vhca_cqx_read_src_qp(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.src_qp;
}

static unsigned int vhca_cqx_read_wc_flags(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.wc_flags;
}

static uint32_t vhca_cqx_read_slid(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.slid;
}

static uint8_t vhca_cqx_read_sl(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.sl;
}

static uint8_t vhca_cqx_read_dlid_path_bits(struct ibv_cq_ex *cqx)
{
	return cqx_to_vcq(cqx)->ex_wc.dlid_path_bits;
}

#define VHCA_CQ_EX_WC_FLAGS                                                  \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |                      \
	 IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |                     \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |                           \
	 IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *vhca_create_cq_ex(struct ibv_context *context,
				    struct ibv_cq_init_attr_ex *attr)
{
	struct ibv_cq_ex *cqx;
	struct ibv_cq *ibcq;

	/* No timestamps, CVLAN, flow tags, TM info; no CQ flags. */
	if ((attr->wc_flags & ~(uint64_t)VHCA_CQ_EX_WC_FLAGS) ||
	    (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS |
					   IBV_CQ_INIT_ATTR_MASK_PD)) ||
	    ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && attr->flags)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/*
	 * A parent domain for the CQ must be one of this context's; the CQ ring
	 * is our own memory (its allocators serve QP and SRQ rings).
	 */
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) &&
	    (!attr->parent_domain || attr->parent_domain->context != context ||
	     !to_vpd(attr->parent_domain)->protection_domain)) {
		errno = EINVAL;
		return NULL;
	}
	ibcq = vhca_create_cq(context, attr->cqe, attr->channel,
			      attr->comp_vector);
	if (!ibcq)
		return NULL;
	cqx = &to_vcq(ibcq)->vcq.cq_ex;
	cqx->start_poll = vhca_cqx_start_poll;
	cqx->next_poll = vhca_cqx_next_poll;
	cqx->end_poll = vhca_cqx_end_poll;
	cqx->read_opcode = vhca_cqx_read_opcode;
	cqx->read_vendor_err = vhca_cqx_read_vendor_err;
	cqx->read_wc_flags = vhca_cqx_read_wc_flags;
	cqx->read_byte_len = vhca_cqx_read_byte_len;
	cqx->read_imm_data = vhca_cqx_read_imm_data;
	cqx->read_qp_num = vhca_cqx_read_qp_num;
	cqx->read_src_qp = vhca_cqx_read_src_qp;
	cqx->read_slid = vhca_cqx_read_slid;
	cqx->read_sl = vhca_cqx_read_sl;
	cqx->read_dlid_path_bits = vhca_cqx_read_dlid_path_bits;
	return cqx;
}

/*
 * A new arm word is one request for an event (CQ-02): the next completion, or
 * the next solicited one, announced by the slot's summary bit. The device reads
 * the word when it takes the bit, before it writes the next CQE, and it is
 * awake then: no WAKE (vhca_abi.h "Arming").
 */
int vhca_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct vhca_cq *cq = to_vcq(ibcq);
	uint32_t word;

	pthread_spin_lock(&cq->lock);
	cq->arm_sn = (cq->arm_sn + 1) & VHCA_CQ_ARM_SN_MASK;
	word = cq->arm_sn | (solicited_only ? VHCA_CQ_ARM_SOLICITED : 0);
	mmio_write32_le((uint8_t *)cq->db +
				offsetof(struct vhca_cq_doorbell, arm),
			htole32(word));
	vhca_db_flag(to_vctx(ibcq->context), cq->db);
	pthread_spin_unlock(&cq->lock);
	return 0;
}

/*
 * A QP going away (destroy, or back to RESET): its CQEs not yet polled lose
 * their QP number, so that they are skipped, and a new QP given the same
 * number never sees them. A receive that took an SRQ WQE still frees room in
 * the SRQ. The caller holds the CQ's lock.
 */
void vhca_cq_clean(struct vhca_cq *cq, uint32_t qpn, struct vhca_srq *srq)
{
	struct vhca_cqe *cqe;
	uint32_t i;

	for (i = cq->ci; i - cq->ci < (1U << cq->log2) &&
			 (cqe = vhca_cqe_peek(cq, i)); i++) {
		if (cqe->qp_num != qpn)
			continue;
		if (srq && (cqe->opcode & VHCA_WC_OP_RECV))
			atomic_fetch_add_explicit(&srq->done, 1,
						  memory_order_release);
		cqe->qp_num = VHCA_NONE;
	}
}
