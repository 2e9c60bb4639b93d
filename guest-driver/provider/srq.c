// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Shared receive queues (SR-01). The ring is the provider's; WQEs carry the
 * caller's wr_id, since the QPs on an SRQ complete its WQEs out of ring
 * order. The device fetches SRQ WQEs in ring order and a WQE is complete only
 * after it was fetched, so a slot is free again once as many receive
 * completions have been polled (on any CQ) as WQEs were posted before it:
 * room = size - (pi - done).
 *
 * Resize (ibv_modify_srq with IBV_SRQ_MAX_WR): under the SRQ lock (no post
 * meanwhile) the kernel's RESIZE_SRQ moves the SRQ to a new ring, the device
 * copying the WQEs it has not fetched to the same free-running indices
 * (vhca_abi.h "Resizing"); then the rings are swapped, pi kept. A size
 * below the WQEs posted and not completed (pi - done) is EINVAL.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vhca.h"

struct ibv_srq *vhca_create_srq(struct ibv_pd *pd,
				struct ibv_srq_init_attr *attr)
{
	return vhca_srq_create(pd, attr, NULL);
}

/* With `ex`, through ibv_cmd_create_srq_ex: an XRC SRQ (SR-02, xrc.c). */
struct ibv_srq *vhca_srq_create(struct ibv_pd *pd,
				struct ibv_srq_init_attr *attr,
				struct ibv_srq_init_attr_ex *ex)
{
	struct vhca_context *ctx = to_vctx(pd->context);
	struct vhca_cmd_create_srq_resp resp = {};
	struct vhca_cmd_create_srq cmd = {};
	struct vhca_cmd_create_xsrq xcmd = {};
	struct ibv_srq_attr *a = &attr->attr;
	uint32_t bytes, shift, log2;
	struct vhca_srq *srq;
	int ret;

	if (!(ctx->cap_flags & VHCA_DEV_CAP_SRQ)) {
		ret = EOPNOTSUPP;
		goto err;
	}
	if (!a->max_wr || a->max_wr > ctx->max_srq_wr ||
	    a->max_sge > ctx->max_sge || a->srq_limit > a->max_wr) {
		ret = EINVAL;
		goto err;
	}
	bytes = sizeof(struct vhca_recv_ctrl) +
		(a->max_sge ? a->max_sge : 1) * sizeof(struct vhca_sge);
	shift = vhca_log2_up(bytes);
	if (shift < VHCA_RQ_MIN_WQE_SHIFT)
		shift = VHCA_RQ_MIN_WQE_SHIFT;
	if (shift > VHCA_MAX_WQE_SHIFT) {
		ret = EINVAL;
		goto err;
	}
	log2 = vhca_log2_up(a->max_wr);

	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		ret = ENOMEM;
		goto err;
	}
	srq->wq.log2 = log2;
	srq->wq.shift = shift;
	ret = vhca_alloc_buf_pd(&srq->wq.buf, (size_t)1 << (log2 + shift), pd,
				VHCA_RES_TYPE_SRQ);
	if (ret)
		goto err_srq;
	pthread_spin_init(&srq->wq.lock, PTHREAD_PROCESS_PRIVATE);
	atomic_init(&srq->done, 0);

	cmd.buf_addr = (uintptr_t)srq->wq.buf.buf;
	cmd.buf_size = srq->wq.buf.length;
	cmd.log2_entries = log2;
	cmd.wqe_shift = shift;
	if (ex) {
		xcmd.buf_addr = cmd.buf_addr;
		xcmd.buf_size = cmd.buf_size;
		xcmd.log2_entries = cmd.log2_entries;
		xcmd.wqe_shift = cmd.wqe_shift;
		ret = ibv_cmd_create_srq_ex(pd->context, &srq->vsrq, ex,
					    &xcmd.ibv_cmd, sizeof(xcmd),
					    &resp.ibv_resp, sizeof(resp));
	} else {
		ret = ibv_cmd_create_srq(pd, &srq->ibv_srq, attr,
					 &cmd.ibv_cmd, sizeof(cmd),
					 &resp.ibv_resp, sizeof(resp));
	}
	if (ret)
		goto err_buf;
	if (resp.uar_index != ctx->uar_index ||
	    resp.db_slot < VHCA_UAR_FIRST_SLOT ||
	    resp.db_slot >= VHCA_UAR_SLOTS) {
		ibv_cmd_destroy_srq(&srq->ibv_srq);
		ret = EPROTO;
		goto err_buf;
	}
	srq->srqn = resp.srqn;
	srq->wq.db = (uint8_t *)vhca_slot(ctx, resp.db_slot) +
		     offsetof(struct vhca_srq_doorbell, pi);
	/* What the device granted (in attr now), within the ring. */
	srq->wq.max_sge = ((1U << shift) - sizeof(struct vhca_recv_ctrl)) /
			  sizeof(struct vhca_sge);
	if (a->max_sge && srq->wq.max_sge > a->max_sge)
		srq->wq.max_sge = a->max_sge;
	a->max_sge = srq->wq.max_sge;
	if (a->max_wr > (1U << log2))
		a->max_wr = 1U << log2;
	return &srq->ibv_srq;

err_buf:
	pthread_spin_destroy(&srq->wq.lock);
	vhca_free_buf(&srq->wq.buf);
err_srq:
	free(srq);
err:
	errno = ret;
	return NULL;
}

int vhca_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
		    int attr_mask)
{
	struct vhca_context *ctx = to_vctx(ibsrq->context);
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct vhca_cmd_modify_srq cmd = {};
	struct vhca_buf buf = {}, old;
	uint32_t log2 = 0;
	int ret;

	if (!(attr_mask & IBV_SRQ_MAX_WR))
		return ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &cmd.ibv_cmd,
					  sizeof(cmd));
	if (!(ctx->cap_flags & VHCA_DEV_CAP_RESIZE_SRQ))
		return EOPNOTSUPP;
	if (!attr->max_wr || attr->max_wr > ctx->max_srq_wr ||
	    ((attr_mask & IBV_SRQ_LIMIT) && attr->srq_limit > attr->max_wr))
		return EINVAL;
	log2 = vhca_log2_up(attr->max_wr);
	ret = vhca_alloc_buf_pd(&buf, (size_t)1 << (log2 + srq->wq.shift),
				ibsrq->pd, VHCA_RES_TYPE_SRQ);
	if (ret)
		return ret;
	cmd.buf_addr = (uintptr_t)buf.buf;
	cmd.buf_size = buf.length;
	cmd.log2_entries = log2;

	pthread_spin_lock(&srq->wq.lock);
	if (srq->wq.pi - atomic_load_explicit(&srq->done,
					      memory_order_acquire) >
	    (1U << log2)) {
		ret = EINVAL;	/* fewer slots than WQEs outstanding */
	} else {
		ret = ibv_cmd_modify_srq(ibsrq, attr, attr_mask,
					 &cmd.ibv_cmd, sizeof(cmd));
	}
	if (!ret) {
		old = srq->wq.buf;
		srq->wq.buf = buf;
		srq->wq.log2 = log2;
		buf = old;
	}
	pthread_spin_unlock(&srq->wq.lock);
	vhca_free_buf(&buf);	/* the old ring, or the unused new one */
	if (!ret && attr->max_wr < (1U << log2))
		attr->max_wr = 1U << log2;
	return ret;
}

int vhca_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct ibv_query_srq cmd = {};
	int ret;

	ret = ibv_cmd_query_srq(ibsrq, attr, &cmd, sizeof(cmd));
	if (ret)
		return ret;
	if (attr->max_wr > (1U << srq->wq.log2))
		attr->max_wr = 1U << srq->wq.log2;
	if (attr->max_sge > srq->wq.max_sge)
		attr->max_sge = srq->wq.max_sge;
	return 0;
}

int vhca_destroy_srq(struct ibv_srq *ibsrq)
{
	struct vhca_srq *srq = to_vsrq(ibsrq);
	int ret;

	ret = ibv_cmd_destroy_srq(ibsrq);
	if (ret)
		return ret;
	if (srq->vsrq.srq_type == IBV_SRQT_XRC)
		vhca_xsrq_table_remove(to_vctx(ibsrq->context), srq->srqn);
	pthread_spin_destroy(&srq->wq.lock);
	vhca_free_buf(&srq->wq.buf);
	free(srq);
	return 0;
}

int vhca_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr)
{
	struct vhca_context *ctx = to_vctx(ibsrq->context);
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct vhca_wq *wq = &srq->wq;
	uint32_t start;
	int ret = 0;

	pthread_spin_lock(&wq->lock);
	start = wq->pi;
	for (; wr; wr = wr->next) {
		if (wq->pi - atomic_load_explicit(&srq->done,
						  memory_order_acquire) >=
		    (1U << wq->log2)) {
			ret = ENOMEM;
			break;
		}
		ret = vhca_write_recv(wq, wr, wr->wr_id);
		if (ret)
			break;
		wq->pi++;
	}
	if (wq->pi != start)
		vhca_db_produce(ctx, wq->db, wq->pi);
	pthread_spin_unlock(&wq->lock);
	if (ret)
		*bad_wr = wr;
	return ret;
}
