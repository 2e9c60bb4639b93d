// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Queue pairs (RC, UC, UD): rings in this process's memory, WQEs written
 * exactly as vhca_abi.h "Work queue entries" lays them out, producer indices
 * stored into the QP's doorbell slot with the asleep/WAKE protocol (vhca.h
 * vhca_db_produce).
 *
 * Send and RQ WQEs carry their free-running ring index as wr_id; the caller's
 * wr_id waits in a shadow array until a CQE names the index (cq.c). A ring
 * slot is free again once a CQE at or past it has been polled, so the SQ has
 * room while pi - ci < size, as with any HCA whose unsignaled WQEs complete
 * silently.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vhca.h"

static void vhca_qp_ex_free(struct vhca_qp *qp);

/* Bytes before the data of a send WQE (vhca_abi.h "Send WQE"), at most. */
static uint32_t vhca_sq_headers(uint8_t type)
{
	switch (type) {
	case VHCA_QPT_UD:
		return VHCA_UD_HEADERS_SIZE;
	case VHCA_QPT_UC:
		return sizeof(struct vhca_send_ctrl) +
		       sizeof(struct vhca_raddr_seg);
	case VHCA_QPT_XRC_INI:
		return sizeof(struct vhca_send_ctrl) +
		       sizeof(struct vhca_xrc_seg) +
		       sizeof(struct vhca_raddr_seg) +
		       sizeof(struct vhca_atomic_seg);
	default:
		return sizeof(struct vhca_send_ctrl) +
		       sizeof(struct vhca_raddr_seg) +
		       sizeof(struct vhca_atomic_seg);
	}
}

static int vhca_qp_type(struct vhca_context *ctx, enum ibv_qp_type t,
			uint8_t *out)
{
	switch (t) {
	case IBV_QPT_RC:
		*out = VHCA_QPT_RC;
		return (ctx->cap_flags & VHCA_DEV_CAP_RC) ? 0 : EOPNOTSUPP;
	case IBV_QPT_UC:
		*out = VHCA_QPT_UC;
		return (ctx->cap_flags & VHCA_DEV_CAP_UC) ? 0 : EOPNOTSUPP;
	case IBV_QPT_UD:
		*out = VHCA_QPT_UD;
		return (ctx->cap_flags & VHCA_DEV_CAP_UD) ? 0 : EOPNOTSUPP;
	case IBV_QPT_XRC_SEND:
		*out = VHCA_QPT_XRC_INI;
		return (ctx->cap_flags & VHCA_DEV_CAP_XRC) ? 0 : EOPNOTSUPP;
	case IBV_QPT_XRC_RECV:
		*out = VHCA_QPT_XRC_TGT;
		return (ctx->cap_flags & VHCA_DEV_CAP_XRC) ? 0 : EOPNOTSUPP;
	default:
		return EOPNOTSUPP;
	}
}

static int vhca_wq_alloc(struct vhca_wq *wq, uint32_t log2, uint32_t shift,
			 bool shadow, struct ibv_pd *pd)
{
	int ret;

	wq->log2 = log2;
	wq->shift = shift;
	ret = vhca_alloc_buf_pd(&wq->buf, (size_t)1 << (log2 + shift), pd,
				VHCA_RES_TYPE_QP);
	if (ret)
		return ret;
	if (shadow) {
		wq->wrid = calloc(1U << log2, sizeof(*wq->wrid));
		if (!wq->wrid) {
			vhca_free_buf(&wq->buf);
			return ENOMEM;
		}
	}
	pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

static void vhca_wq_free(struct vhca_wq *wq)
{
	if (!wq->buf.buf)
		return;
	pthread_spin_destroy(&wq->lock);
	vhca_free_buf(&wq->buf);
	free(wq->wrid);
	wq->wrid = NULL;
}

/* Receive WQE stride for `sge` SGEs: control segment + SGEs, power of two. */
static uint32_t vhca_recv_shift(uint32_t sge)
{
	uint32_t bytes = sizeof(struct vhca_recv_ctrl) +
			 (sge ? sge : 1) * sizeof(struct vhca_sge);
	uint32_t shift = vhca_log2_up(bytes);

	return shift < VHCA_RQ_MIN_WQE_SHIFT ? VHCA_RQ_MIN_WQE_SHIFT : shift;
}

static struct ibv_qp *vhca_qp_create(struct ibv_pd *pd,
				     struct ibv_qp_init_attr *attr,
				     struct ibv_qp_init_attr_ex *ex);

struct ibv_qp *vhca_create_qp(struct ibv_pd *pd,
			      struct ibv_qp_init_attr *attr)
{
	return vhca_qp_create(pd, attr, NULL);
}

/*
 * With `ex`, through ibv_cmd_create_qp_ex (an XRC_INI QP, SR-02: no RQ, the
 * XRC domain's QP type). An XRC_TGT QP has no rings: xrc.c.
 */
static struct ibv_qp *vhca_qp_create(struct ibv_pd *pd,
				     struct ibv_qp_init_attr *attr,
				     struct ibv_qp_init_attr_ex *ex)
{
	struct vhca_context *ctx = to_vctx(pd->context);
	struct vhca_cmd_create_qp_resp resp = {};
	struct vhca_cmd_create_qp cmd = {};
	struct ibv_qp_cap *cap = &attr->cap;
	uint32_t hdr, bytes, sq_shift, rq_shift = 0, room;
	struct vhca_qp *qp;
	uint8_t type;
	bool norq;
	int ret;

	ret = vhca_qp_type(ctx, attr->qp_type, &type);
	if (ret)
		goto err;
	if (type == VHCA_QPT_XRC_TGT) {
		ret = EINVAL;
		goto err;
	}
	norq = attr->srq || type == VHCA_QPT_XRC_INI;
	if (cap->max_send_wr > ctx->max_qp_wr ||
	    cap->max_send_sge > ctx->max_sge ||
	    cap->max_inline_data > ctx->max_inline ||
	    (!norq && (cap->max_recv_wr > ctx->max_qp_wr ||
			    cap->max_recv_sge > ctx->max_sge))) {
		ret = EINVAL;
		goto err;
	}
	hdr = vhca_sq_headers(type);
	bytes = hdr + (cap->max_send_sge * sizeof(struct vhca_sge) >
				       cap->max_inline_data ?
			       cap->max_send_sge * sizeof(struct vhca_sge) :
			       cap->max_inline_data);
	sq_shift = vhca_log2_up(bytes);
	if (sq_shift < VHCA_SQ_MIN_WQE_SHIFT)
		sq_shift = VHCA_SQ_MIN_WQE_SHIFT;
	if (!norq)
		rq_shift = vhca_recv_shift(cap->max_recv_sge);
	if (sq_shift > VHCA_MAX_WQE_SHIFT || rq_shift > VHCA_MAX_WQE_SHIFT) {
		ret = EINVAL;
		goto err;
	}

	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		ret = ENOMEM;
		goto err;
	}
	qp->type = type;
	qp->srq = attr->srq ? to_vsrq(attr->srq) : NULL;
	ret = vhca_wq_alloc(&qp->sq, vhca_log2_up(cap->max_send_wr ?: 1),
			    sq_shift, true, pd);
	if (ret)
		goto err_qp;
	if (!norq) {
		ret = vhca_wq_alloc(&qp->rq,
				    vhca_log2_up(cap->max_recv_wr ?: 1),
				    rq_shift, true, pd);
		if (ret)
			goto err_sq;
	}

	cmd.sq_buf_addr = (uintptr_t)qp->sq.buf.buf;
	cmd.sq_buf_size = qp->sq.buf.length;
	cmd.log2_sq_size = qp->sq.log2;
	cmd.sq_wqe_shift = qp->sq.shift;
	if (!norq) {
		cmd.rq_buf_addr = (uintptr_t)qp->rq.buf.buf;
		cmd.rq_buf_size = qp->rq.buf.length;
		cmd.log2_rq_size = qp->rq.log2;
		cmd.rq_wqe_shift = qp->rq.shift;
	}
	if (ex)
		ret = ibv_cmd_create_qp_ex(pd->context, &qp->vqp, ex,
					   &cmd.ibv_cmd, sizeof(cmd),
					   &resp.ibv_resp, sizeof(resp));
	else
		ret = ibv_cmd_create_qp(pd, &qp->ibv_qp, attr, &cmd.ibv_cmd,
					sizeof(cmd), &resp.ibv_resp,
					sizeof(resp));
	if (ret)
		goto err_rq;
	if (resp.uar_index != ctx->uar_index ||
	    resp.db_slot < VHCA_UAR_FIRST_SLOT ||
	    resp.db_slot >= VHCA_UAR_SLOTS) {
		ret = EPROTO;
		goto err_destroy;
	}
	qp->db = vhca_slot(ctx, resp.db_slot);
	qp->sq.db = (uint8_t *)qp->db + offsetof(struct vhca_qp_doorbell, sq_pi);
	qp->rq.db = (uint8_t *)qp->db + offsetof(struct vhca_qp_doorbell, rq_pi);

	/*
	 * What the device granted (the kernel passed it back in attr->cap),
	 * within what the rings hold.
	 */
	room = (1U << sq_shift) - hdr;
	qp->sq.max_sge = room / sizeof(struct vhca_sge);
	if (qp->sq.max_sge > cap->max_send_sge && cap->max_send_sge)
		qp->sq.max_sge = cap->max_send_sge;
	qp->sq.max_inline = room;
	if (qp->sq.max_inline > cap->max_inline_data)
		qp->sq.max_inline = cap->max_inline_data;
	cap->max_send_sge = qp->sq.max_sge;
	cap->max_inline_data = qp->sq.max_inline;
	if (cap->max_send_wr > (1U << qp->sq.log2))
		cap->max_send_wr = 1U << qp->sq.log2;
	if (norq) {
		cap->max_recv_wr = 0;
		cap->max_recv_sge = 0;
	} else {
		qp->rq.max_sge = ((1U << rq_shift) -
				  sizeof(struct vhca_recv_ctrl)) /
				 sizeof(struct vhca_sge);
		if (qp->rq.max_sge > cap->max_recv_sge && cap->max_recv_sge)
			qp->rq.max_sge = cap->max_recv_sge;
		cap->max_recv_sge = qp->rq.max_sge;
		if (cap->max_recv_wr > (1U << qp->rq.log2))
			cap->max_recv_wr = 1U << qp->rq.log2;
	}

	ret = vhca_qp_table_insert(ctx, qp);
	if (ret)
		goto err_destroy;
	return &qp->ibv_qp;

err_destroy:
	ibv_cmd_destroy_qp(&qp->ibv_qp);
err_rq:
	vhca_wq_free(&qp->rq);
err_sq:
	vhca_wq_free(&qp->sq);
err_qp:
	free(qp);
err:
	errno = ret;
	return NULL;
}

int vhca_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
		  struct ibv_qp_init_attr *init_attr)
{
	struct vhca_qp *qp = to_vqp(ibqp);
	struct ibv_query_qp cmd = {};
	int ret;

	ret = ibv_cmd_query_qp(ibqp, attr, attr_mask, init_attr, &cmd,
			       sizeof(cmd));
	if (ret)
		return ret;
	/* The sizes this provider's rings hold. */
	init_attr->cap.max_send_wr = 1U << qp->sq.log2;
	init_attr->cap.max_send_sge = qp->sq.max_sge;
	init_attr->cap.max_inline_data = qp->sq.max_inline;
	if (!qp->srq) {
		init_attr->cap.max_recv_wr = 1U << qp->rq.log2;
		init_attr->cap.max_recv_sge = qp->rq.max_sge;
	}
	attr->cap = init_attr->cap;
	return 0;
}

/* The receive CQ; an XRC_SEND QP has none (SR-02): its send CQ then. */
static struct vhca_cq *vhca_rcq(struct ibv_qp *qp)
{
	return to_vcq(qp->recv_cq ? qp->recv_cq : qp->send_cq);
}

static void vhca_lock_cqs(struct ibv_qp *qp)
{
	struct vhca_cq *scq = to_vcq(qp->send_cq), *rcq = vhca_rcq(qp);

	if (scq == rcq) {
		pthread_spin_lock(&scq->lock);
	} else if (scq->cqn < rcq->cqn) {
		pthread_spin_lock(&scq->lock);
		pthread_spin_lock(&rcq->lock);
	} else {
		pthread_spin_lock(&rcq->lock);
		pthread_spin_lock(&scq->lock);
	}
}

static void vhca_unlock_cqs(struct ibv_qp *qp)
{
	struct vhca_cq *scq = to_vcq(qp->send_cq), *rcq = vhca_rcq(qp);

	pthread_spin_unlock(&scq->lock);
	if (rcq != scq)
		pthread_spin_unlock(&rcq->lock);
}

/* The QP's CQEs still queued are dropped (cq.c); the caller holds both locks. */
static void vhca_qp_clean_cqs(struct vhca_qp *qp)
{
	struct vhca_cq *scq = to_vcq(qp->ibv_qp.send_cq);
	struct vhca_cq *rcq = vhca_rcq(&qp->ibv_qp);

	vhca_cq_clean(rcq, qp->ibv_qp.qp_num, qp->srq);
	if (scq != rcq)
		vhca_cq_clean(scq, qp->ibv_qp.qp_num, NULL);
}

int vhca_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		   int attr_mask)
{
	struct vhca_qp *qp = to_vqp(ibqp);
	struct ibv_modify_qp cmd = {};
	int ret;

	ret = ibv_cmd_modify_qp(ibqp, attr, attr_mask, &cmd, sizeof(cmd));
	if (ret)
		return ret;
	if (attr_mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	/* An XRC_TGT QP has no queues (SR-02). */
	if (qp->type == VHCA_QPT_XRC_TGT)
		return 0;
	/*
	 * Back to RESET: the device takes the producer indices now in the
	 * doorbell slot as the point from which WQEs are new (vhca_abi.h
	 * MODIFY_QP), so the indices keep running and only what was outstanding
	 * is forgotten, with its CQEs.
	 */
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
		vhca_lock_cqs(ibqp);
		vhca_qp_clean_cqs(qp);
		pthread_spin_lock(&qp->sq.lock);
		__atomic_store_n(&qp->sq.ci, qp->sq.pi, __ATOMIC_RELEASE);
		pthread_spin_unlock(&qp->sq.lock);
		if (!qp->srq) {
			pthread_spin_lock(&qp->rq.lock);
			__atomic_store_n(&qp->rq.ci, qp->rq.pi,
					 __ATOMIC_RELEASE);
			pthread_spin_unlock(&qp->rq.lock);
		}
		vhca_unlock_cqs(ibqp);
	}
	return 0;
}

int vhca_destroy_qp(struct ibv_qp *ibqp)
{
	struct vhca_context *ctx = to_vctx(ibqp->context);
	struct vhca_qp *qp = to_vqp(ibqp);
	int ret;

	ret = ibv_cmd_destroy_qp(ibqp);
	if (ret)
		return ret;
	/* An XRC_TGT QP has no CQs, rings or table entry (SR-02). */
	if (qp->type == VHCA_QPT_XRC_TGT) {
		free(qp);
		return 0;
	}
	/* With both CQ locks held no poll_cq is between lookup and use. */
	vhca_lock_cqs(ibqp);
	vhca_qp_clean_cqs(qp);
	vhca_qp_table_remove(ctx, ibqp->qp_num);
	vhca_unlock_cqs(ibqp);
	vhca_wq_free(&qp->sq);
	vhca_wq_free(&qp->rq);
	vhca_qp_ex_free(qp);
	free(qp);
	return 0;
}

/* Which opcodes a service allows (o9-3: UD sends only; UC no READ/ATOMIC). */
static bool vhca_opcode_ok(struct vhca_context *ctx, uint8_t type,
			   enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return true;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return type != VHCA_QPT_UD;
	case IBV_WR_RDMA_READ:
		return type == VHCA_QPT_RC || type == VHCA_QPT_XRC_INI;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return (type == VHCA_QPT_RC || type == VHCA_QPT_XRC_INI) &&
		       (ctx->cap_flags & VHCA_DEV_CAP_ATOMIC);
	case IBV_WR_SEND_WITH_INV:
		return (type == VHCA_QPT_RC || type == VHCA_QPT_XRC_INI) &&
		       (ctx->cap_flags & VHCA_DEV_CAP_SEND_WITH_INV);
	/* Memory windows: BIND_MW on RC and UC (MP-06), LOCAL_INV on any (MP-07). */
	case IBV_WR_BIND_MW:
		return type != VHCA_QPT_UD &&
		       (ctx->cap_flags &
			(VHCA_DEV_CAP_MW_TYPE1 | VHCA_DEV_CAP_MW_TYPE2));
	case IBV_WR_LOCAL_INV:
		return ctx->cap_flags & VHCA_DEV_CAP_MW_TYPE2;
#if VHCA_HAVE_IBV_MPE
	/* IBA 1.5 Memory Placement Extensions: RC only (extended QP API). */
	case IBV_WR_FLUSH:
		return type == VHCA_QPT_RC &&
		       (ctx->cap_flags & VHCA_DEV_CAP_FLUSH_GLOBAL);
	case IBV_WR_ATOMIC_WRITE:
		return type == VHCA_QPT_RC &&
		       (ctx->cap_flags & VHCA_DEV_CAP_ATOMIC_WRITE);
#endif
	default:
		return false;
	}
}

/*
 * The bind segment of a BIND_MW WQE (vhca_abi.h struct vhca_bind_seg). The
 * window is named by its current R_Key (ctrl.imm_or_inv); the new one keeps
 * its index (ibv_inc_rkey). A window grants remote rights only: LOCAL_WRITE
 * and MW_BIND are ignored, anything else (ZERO_BASED, ...) is refused.
 */
static int vhca_write_bind(struct vhca_context *ctx,
			   struct vhca_send_ctrl *ctrl,
			   struct vhca_bind_seg *b, struct ibv_send_wr *wr)
{
	const struct ibv_mw_bind_info *info = &wr->bind_mw.bind_info;
	struct ibv_mw *mw = wr->bind_mw.mw;
	const unsigned int remote = IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC;
	const unsigned int ignored = IBV_ACCESS_LOCAL_WRITE |
				     IBV_ACCESS_MW_BIND;

	if (!mw || mw->context != &ctx->ibv_ctx.context)
		return EINVAL;
	switch (mw->type) {
	case IBV_MW_TYPE_1:
		if (!(ctx->cap_flags & VHCA_DEV_CAP_MW_TYPE1))
			return EINVAL;
		break;
	case IBV_MW_TYPE_2:
		if (!(ctx->cap_flags & VHCA_DEV_CAP_MW_TYPE2))
			return EINVAL;
		/* A type 2 window is bound to a region, never unbound by bind. */
		if (!info->mr || !info->length)
			return EINVAL;
		break;
	default:
		return EINVAL;
	}
	if (info->mw_access_flags & ~(remote | ignored))
		return EINVAL;
	if ((wr->bind_mw.rkey >> 8) != (mw->rkey >> 8))
		return EINVAL;
	if (!info->mr && (info->addr || info->length))
		return EINVAL;
	if (info->mr && info->mr->context != mw->context)
		return EINVAL;
	ctrl->imm_or_inv = mw->rkey;
	ctrl->len = 0;
	b->addr = info->addr;
	b->length = info->length;
	b->mr_lkey = info->mr ? info->mr->lkey : 0;
	b->new_rkey = wr->bind_mw.rkey;
	b->access = info->mw_access_flags & remote;
	b->rsvd = 0;
	return 0;
}

/*
 * A window's rkey follows its posted binds, whatever verb posted them (type
 * 2 through ibv_post_send or ibv_wr_bind_mw too): the device names a window
 * by its current R_Key. The caller undoes it on an error completion, as for
 * ibv_bind_mw.
 */
static void vhca_posted(struct ibv_send_wr *wr)
{
	if (wr->opcode == IBV_WR_BIND_MW)
		wr->bind_mw.mw->rkey = wr->bind_mw.rkey;
}

/* One send WQE for `wr` at ring index `index` (vhca_abi.h "Send WQE"). */

/*
 * The remote-address segment and the atomic segment that follows it (atomics,
 * and FLUSH / ATOMIC WRITE, whose compare_add carries the length or the 8
 * bytes; vhca_abi.h WQE layout). Returns the bytes written.
 */
static size_t vhca_write_atomic_segs(uint8_t *at, const struct ibv_send_wr *wr,
				     uint64_t swap)
{
	struct vhca_raddr_seg *r = (struct vhca_raddr_seg *)at;
	struct vhca_atomic_seg *a = (struct vhca_atomic_seg *)(at + sizeof(*r));

	r->remote_addr = wr->wr.atomic.remote_addr;
	r->rkey = wr->wr.atomic.rkey;
	r->rsvd = 0;
	a->compare_add = wr->wr.atomic.compare_add;
	a->swap = swap;
	return sizeof(*r) + sizeof(*a);
}

static int vhca_write_send(struct vhca_context *ctx, struct vhca_qp *qp,
			   struct ibv_send_wr *wr, uint32_t index)
{
	uint8_t *w = vhca_wqe(&qp->sq, index);
	struct vhca_send_ctrl *ctrl = (struct vhca_send_ctrl *)w;
	uint32_t off = sizeof(*ctrl);
	int i;

	if (!vhca_opcode_ok(ctx, qp->type, wr->opcode))
		return EINVAL;
	/* ibv_wr_opcode and ibv_send_flags numbers are the device's. */
	ctrl->wr_id = index;
	ctrl->opcode = wr->opcode;
	ctrl->flags = wr->send_flags & (VHCA_SEND_FENCE | VHCA_SEND_SIGNALED |
					VHCA_SEND_SOLICITED | VHCA_SEND_INLINE);
	ctrl->imm_or_inv = 0;
	if (wr->opcode == IBV_WR_SEND_WITH_IMM ||
	    wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		ctrl->imm_or_inv = be32toh(wr->imm_data);
	else if (wr->opcode == IBV_WR_SEND_WITH_INV)
		ctrl->imm_or_inv = wr->invalidate_rkey;
	/* SR-02: every XRC_INI WQE names the target's XRC SRQ next. */
	if (qp->type == VHCA_QPT_XRC_INI) {
		struct vhca_xrc_seg *x = (struct vhca_xrc_seg *)(w + off);

		memset(x, 0, sizeof(*x));
		x->remote_srqn = wr->qp_type.xrc.remote_srqn & 0xffffff;
		off += sizeof(*x);
	}

	/* BIND_MW and LOCAL_INV carry no data (ctrl.len = 0). */
	if (wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV) {
		ctrl->flags &= ~VHCA_SEND_INLINE;
		ctrl->len = 0;
		if (wr->opcode == IBV_WR_LOCAL_INV) {
			ctrl->imm_or_inv = wr->invalidate_rkey;
			return 0;
		}
		return vhca_write_bind(ctx, ctrl,
				       (struct vhca_bind_seg *)(w + off), wr);
	}

	if (qp->type == VHCA_QPT_UD) {
		struct vhca_ud_seg *ud = (struct vhca_ud_seg *)(w + off);

		if (!wr->wr.ud.ah)
			return EINVAL;
		ud->remote_qpn = wr->wr.ud.remote_qpn;
		ud->remote_qkey = wr->wr.ud.remote_qkey;
		ud->av = to_vah(wr->wr.ud.ah)->av;
		off += sizeof(*ud);
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ: {
		struct vhca_raddr_seg *r = (struct vhca_raddr_seg *)(w + off);

		r->remote_addr = wr->wr.rdma.remote_addr;
		r->rkey = wr->wr.rdma.rkey;
		r->rsvd = 0;
		off += sizeof(*r);
		break;
	}
#if VHCA_HAVE_IBV_MPE
	case IBV_WR_FLUSH:
	case IBV_WR_ATOMIC_WRITE: {
		/*
		 * No data: raddr, then the atomic segment with the FLUSH length
		 * or the ATOMIC WRITE's 8 bytes (staged by wr_flush and
		 * wr_atomic_write in wr.atomic; vhca_abi.h WQE layout).
		 */
		vhca_write_atomic_segs(w + off, wr, 0);
		if (wr->opcode == IBV_WR_FLUSH)
			ctrl->imm_or_inv = (uint32_t)wr->wr.atomic.swap;
		ctrl->flags &= ~VHCA_SEND_INLINE;
		ctrl->len = 0;
		return 0;
	}
#endif
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD: {
		off += vhca_write_atomic_segs(w + off, wr, wr->wr.atomic.swap);
		break;
	}
	default:
		break;
	}

	if (wr->send_flags & IBV_SEND_INLINE) {
		uint32_t len = 0;

		if (wr->opcode == IBV_WR_RDMA_READ ||
		    wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		    wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			return EINVAL;
		for (i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (len > qp->sq.max_inline ||
		    off + len > (1U << qp->sq.shift))
			return EINVAL;
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(w + off,
			       (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		ctrl->len = len;
	} else {
		struct vhca_sge *sge = (struct vhca_sge *)(w + off);

		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->sq.max_sge ||
		    off + wr->num_sge * sizeof(*sge) > (1U << qp->sq.shift))
			return EINVAL;
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
		}
		ctrl->len = wr->num_sge;
	}
	return 0;
}

int vhca_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad_wr)
{
	struct vhca_context *ctx = to_vctx(ibqp->context);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_wq *sq = &qp->sq;
	uint32_t pi, start;
	int ret = 0;

	/* o10-4.2.1: no posting to the SQ before RTS. */
	if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_INIT ||
	    qp->state == IBV_QPS_RTR) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&sq->lock);
	start = pi = sq->pi;
	for (; wr; wr = wr->next) {
		if (pi - __atomic_load_n(&sq->ci, __ATOMIC_ACQUIRE) >=
		    (1U << sq->log2)) {
			ret = ENOMEM;
			break;
		}
		ret = vhca_write_send(ctx, qp, wr, pi);
		if (ret)
			break;
		vhca_posted(wr);
		sq->wrid[pi & ((1U << sq->log2) - 1)] = wr->wr_id;
		pi++;
	}
	if (pi != start) {
		__atomic_store_n(&sq->pi, pi, __ATOMIC_RELEASE);
		vhca_db_produce(ctx, sq->db, pi);
	}
	pthread_spin_unlock(&sq->lock);
	if (ret)
		*bad_wr = wr;
	return ret;
}

/*
 * ibv_bind_mw (type 1): a BIND_MW WQE with the next key byte; once it is
 * posted the window's rkey is the new one (the caller undoes it on an error
 * completion), as every provider does.
 */
int vhca_bind_mw(struct ibv_qp *ibqp, struct ibv_mw *mw,
		 struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr = {}, *bad_wr = NULL;
	int ret;

	if (!mw || mw->type != IBV_MW_TYPE_1 || ibqp->context != mw->context) {
		errno = EINVAL;
		return EINVAL;
	}
	wr.opcode = IBV_WR_BIND_MW;
	wr.wr_id = mw_bind->wr_id;
	wr.send_flags = mw_bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mw_bind->bind_info;
	ret = vhca_post_send(ibqp, &wr, &bad_wr);
	if (ret) {
		errno = ret;
		return ret;
	}
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}

/* One receive WQE at `wq`'s producer index (caller: lock held, room checked). */
int vhca_write_recv(struct vhca_wq *wq, struct ibv_recv_wr *wr, uint64_t wr_id)
{
	uint8_t *w = vhca_wqe(wq, wq->pi);
	struct vhca_recv_ctrl *ctrl = (struct vhca_recv_ctrl *)w;
	struct vhca_sge *sge = (struct vhca_sge *)(ctrl + 1);
	int i;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > wq->max_sge)
		return EINVAL;
	ctrl->wr_id = wr_id;
	ctrl->num_sge = wr->num_sge;
	ctrl->rsvd = 0;
	for (i = 0; i < wr->num_sge; i++) {
		sge[i].addr = wr->sg_list[i].addr;
		sge[i].length = wr->sg_list[i].length;
		sge[i].lkey = wr->sg_list[i].lkey;
	}
	return 0;
}

int vhca_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad_wr)
{
	struct vhca_context *ctx = to_vctx(ibqp->context);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_wq *rq = &qp->rq;
	uint32_t start;
	int ret = 0;

	if (qp->srq || qp->state == IBV_QPS_RESET) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&rq->lock);
	start = rq->pi;
	for (; wr; wr = wr->next) {
		if (rq->pi - __atomic_load_n(&rq->ci, __ATOMIC_ACQUIRE) >=
		    (1U << rq->log2)) {
			ret = ENOMEM;
			break;
		}
		/* The ring index as wr_id; the caller's in the shadow. */
		ret = vhca_write_recv(rq, wr, rq->pi);
		if (ret)
			break;
		rq->wrid[rq->pi & ((1U << rq->log2) - 1)] = wr->wr_id;
		__atomic_store_n(&rq->pi, rq->pi + 1, __ATOMIC_RELEASE);
	}
	if (rq->pi != start)
		vhca_db_produce(ctx, rq->db, rq->pi);
	pthread_spin_unlock(&rq->lock);
	if (ret)
		*bad_wr = wr;
	return ret;
}

/*
 * Extended QPs (ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS): the
 * ibv_wr_*() builders stage one ibv_send_wr at a time, written into the ring
 * by vhca_write_send at the next builder or at wr_complete; the producer index
 * is published (and the doorbell rung) only by wr_complete, so wr_abort and a
 * failed WR drop the whole batch. The SQ lock is held from wr_start to
 * wr_complete/wr_abort.
 */
static inline struct vhca_qp *qpx_to_vqp(struct ibv_qp_ex *qpx)
{
	return container_of(&qpx->qp_base, struct vhca_qp, ibv_qp);
}

static void vhca_qp_ex_free(struct vhca_qp *qp)
{
	if (!qp->ex)
		return;
	free(qp->ex->sge);
	free(qp->ex->inl);
	free(qp->ex);
	qp->ex = NULL;
}

/* Writes the staged WR (if any) into the ring at ex->pi. */
static void vhca_qpx_flush(struct vhca_qp *qp)
{
	struct vhca_qp_ex_state *ex = qp->ex;
	struct vhca_wq *sq = &qp->sq;
	int ret;

	if (!ex->pending)
		return;
	ex->pending = false;
	if (ex->err)
		return;
	if (ex->pi - __atomic_load_n(&sq->ci, __ATOMIC_ACQUIRE) >=
	    (1U << sq->log2)) {
		ex->err = ENOMEM;
		return;
	}
	ret = vhca_write_send(to_vctx(qp->ibv_qp.context), qp, &ex->wr, ex->pi);
	if (ret) {
		ex->err = ret;
		return;
	}
	vhca_posted(&ex->wr);
	sq->wrid[ex->pi & ((1U << sq->log2) - 1)] = ex->wr.wr_id;
	ex->pi++;
}

static struct ibv_send_wr *vhca_qpx_new(struct ibv_qp_ex *qpx,
					enum ibv_wr_opcode op)
{
	struct vhca_qp *qp = qpx_to_vqp(qpx);
	struct vhca_qp_ex_state *ex = qp->ex;

	vhca_qpx_flush(qp);
	memset(&ex->wr, 0, sizeof(ex->wr));
	ex->wr.wr_id = qpx->wr_id;
	ex->wr.send_flags = qpx->wr_flags;
	ex->wr.opcode = op;
	ex->wr.sg_list = ex->sge;
	ex->pending = true;
	return &ex->wr;
}

static void vhca_wr_start(struct ibv_qp_ex *qpx)
{
	struct vhca_qp *qp = qpx_to_vqp(qpx);

	pthread_spin_lock(&qp->sq.lock);
	qp->ex->pi = qp->sq.pi;
	qp->ex->pending = false;
	qp->ex->err = (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_INIT ||
		       qp->state == IBV_QPS_RTR) ? EINVAL : 0;
}

static int vhca_wr_complete(struct ibv_qp_ex *qpx)
{
	struct vhca_qp *qp = qpx_to_vqp(qpx);
	struct vhca_wq *sq = &qp->sq;
	int err;

	vhca_qpx_flush(qp);
	err = qp->ex->err;
	if (!err && qp->ex->pi != sq->pi) {
		__atomic_store_n(&sq->pi, qp->ex->pi, __ATOMIC_RELEASE);
		vhca_db_produce(to_vctx(qp->ibv_qp.context), sq->db, sq->pi);
	}
	pthread_spin_unlock(&sq->lock);
	return err;
}

static void vhca_wr_abort(struct ibv_qp_ex *qpx)
{
	struct vhca_qp *qp = qpx_to_vqp(qpx);

	qp->ex->pending = false;
	pthread_spin_unlock(&qp->sq.lock);
}

static void vhca_wr_send(struct ibv_qp_ex *qpx)
{
	vhca_qpx_new(qpx, IBV_WR_SEND);
}

static void vhca_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
	vhca_qpx_new(qpx, IBV_WR_SEND_WITH_IMM)->imm_data = imm;
}

static void vhca_wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	vhca_qpx_new(qpx, IBV_WR_SEND_WITH_INV)->invalidate_rkey = rkey;
}

static void vhca_wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw,
			    uint32_t rkey,
			    const struct ibv_mw_bind_info *bind_info)
{
	struct ibv_send_wr *wr = vhca_qpx_new(qpx, IBV_WR_BIND_MW);

	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	if (bind_info)
		wr->bind_mw.bind_info = *bind_info;
	else
		qpx_to_vqp(qpx)->ex->err = EINVAL;
}

static void vhca_wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
	vhca_qpx_new(qpx, IBV_WR_LOCAL_INV)->invalidate_rkey = rkey;
}

static void vhca_wr_rdma(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op,
			 uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *wr = vhca_qpx_new(qpx, op);

	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
}

static void vhca_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
			       uint64_t addr)
{
	vhca_wr_rdma(qpx, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void vhca_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
				   uint64_t addr, __be32 imm)
{
	vhca_wr_rdma(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	qpx_to_vqp(qpx)->ex->wr.imm_data = imm;
}

static void vhca_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
			      uint64_t addr)
{
	vhca_wr_rdma(qpx, IBV_WR_RDMA_READ, rkey, addr);
}

static void vhca_wr_atomic(struct ibv_qp_ex *qpx, enum ibv_wr_opcode op,
			   uint32_t rkey, uint64_t addr, uint64_t cmp_add,
			   uint64_t swap)
{
	struct ibv_send_wr *wr = vhca_qpx_new(qpx, op);

	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = cmp_add;
	wr->wr.atomic.swap = swap;
}

static void vhca_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey,
				   uint64_t addr, uint64_t compare,
				   uint64_t swap)
{
	vhca_wr_atomic(qpx, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare,
		       swap);
}

static void vhca_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
				     uint64_t addr, uint64_t add)
{
	vhca_wr_atomic(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

#if VHCA_HAVE_IBV_MPE
/* RDMA FLUSH: len in compare_add, type | level << 4 (FETH) in swap. */
static void vhca_wr_flush(struct ibv_qp_ex *qpx, uint32_t rkey,
			  uint64_t addr, size_t len, uint8_t type,
			  uint8_t level)
{
	struct ibv_send_wr *wr = vhca_qpx_new(qpx, IBV_WR_FLUSH);

	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = len;
	wr->wr.atomic.swap = (uint64_t)(type & 0xf) | ((uint64_t)(level & 3) << 4);
	if (type == 0 || (type & ~(IBV_FLUSH_GLOBAL | IBV_FLUSH_PERSISTENT)) ||
	    level > IBV_FLUSH_MR || len > UINT32_MAX)
		qpx_to_vqp(qpx)->ex->err = EINVAL;
}

/* RDMA ATOMIC WRITE: the 8 bytes at atomic_wr, copied as they are. */
static void vhca_wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey,
				 uint64_t addr, const void *atomic_wr)
{
	struct ibv_send_wr *wr = vhca_qpx_new(qpx, IBV_WR_ATOMIC_WRITE);

	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	memcpy(&wr->wr.atomic.compare_add, atomic_wr, 8);
}
#endif

static void vhca_wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah,
				uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct vhca_qp_ex_state *ex = qpx_to_vqp(qpx)->ex;

	ex->wr.wr.ud.ah = ah;
	ex->wr.wr.ud.remote_qpn = remote_qpn;
	ex->wr.wr.ud.remote_qkey = remote_qkey;
}

/* SR-02: the target's XRC SRQ of an XRC_INI work request. */
static void vhca_wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
	qpx_to_vqp(qpx)->ex->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

static void vhca_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num,
				 const struct ibv_sge *sg)
{
	struct vhca_qp *qp = qpx_to_vqp(qpx);
	struct vhca_qp_ex_state *ex = qp->ex;

	if (!ex->pending)
		return;
	if (num > (qp->sq.max_sge ?: 1)) {
		ex->err = EINVAL;
		return;
	}
	memcpy(ex->sge, sg, num * sizeof(*sg));
	ex->wr.sg_list = ex->sge;
	ex->wr.num_sge = num;
}

static void vhca_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey,
			    uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	vhca_wr_set_sge_list(qpx, 1, &sge);
}

static void vhca_wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num,
					 const struct ibv_data_buf *buf)
{
	struct vhca_qp *qp = qpx_to_vqp(qpx);
	struct vhca_qp_ex_state *ex = qp->ex;
	size_t i, len = 0;

	if (!ex->pending)
		return;
	for (i = 0; i < num; i++) {
		if (len + buf[i].length > qp->sq.max_inline) {
			ex->err = EINVAL;
			return;
		}
		memcpy(ex->inl + len, buf[i].addr, buf[i].length);
		len += buf[i].length;
	}
	ex->sge[0].addr = (uintptr_t)ex->inl;
	ex->sge[0].length = len;
	ex->sge[0].lkey = 0;
	ex->wr.sg_list = ex->sge;
	ex->wr.num_sge = 1;
	ex->wr.send_flags |= IBV_SEND_INLINE;
}

static void vhca_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
				    size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	vhca_wr_set_inline_data_list(qpx, 1, &buf);
}

struct ibv_qp *vhca_create_qp_ex(struct ibv_context *context,
				 struct ibv_qp_init_attr_ex *attr)
{
	struct vhca_context *ctx = to_vctx(context);
	uint64_t ops = 0, ok;
	struct ibv_qp_init_attr init = {};
	struct ibv_qp_ex *qpx;
	struct vhca_qp *qp;
	struct ibv_qp *ibqp;
	uint8_t type;
	int ret;

	/* SR-02: an XRC_TGT QP has no rings, PD or CQs. */
	if (attr->qp_type == IBV_QPT_XRC_RECV)
		return vhca_create_xrc_tgt(context, attr);
	/* No create flags, no TSO: accepted when asked for nothing. */
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD |
					   IBV_QP_INIT_ATTR_XRCD |
					   IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
					   IBV_QP_INIT_ATTR_CREATE_FLAGS |
					   IBV_QP_INIT_ATTR_MAX_TSO_HEADER)) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     attr->create_flags) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) &&
	     attr->max_tso_header)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	ret = vhca_qp_type(ctx, attr->qp_type, &type);
	if (ret) {
		errno = ret;
		return NULL;
	}
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = attr->send_ops_flags;
		ok = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
		if (type != VHCA_QPT_UD)
			ok |= IBV_QP_EX_WITH_RDMA_WRITE |
			      IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
		if (type == VHCA_QPT_RC || type == VHCA_QPT_XRC_INI) {
			ok |= IBV_QP_EX_WITH_RDMA_READ;
			if (ctx->cap_flags & VHCA_DEV_CAP_ATOMIC)
				ok |= IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				      IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
			if (ctx->cap_flags & VHCA_DEV_CAP_SEND_WITH_INV)
				ok |= IBV_QP_EX_WITH_SEND_WITH_INV;
#if VHCA_HAVE_IBV_MPE
			if (ctx->cap_flags & VHCA_DEV_CAP_FLUSH_GLOBAL)
				ok |= IBV_QP_EX_WITH_FLUSH;
			if (ctx->cap_flags & VHCA_DEV_CAP_ATOMIC_WRITE)
				ok |= IBV_QP_EX_WITH_ATOMIC_WRITE;
#endif
		}
		if (type != VHCA_QPT_UD &&
		    (ctx->cap_flags & (VHCA_DEV_CAP_MW_TYPE1 |
				       VHCA_DEV_CAP_MW_TYPE2)))
			ok |= IBV_QP_EX_WITH_BIND_MW;
		if (ctx->cap_flags & VHCA_DEV_CAP_MW_TYPE2)
			ok |= IBV_QP_EX_WITH_LOCAL_INV;
		if (ops & ~ok) {
			errno = EOPNOTSUPP;
			return NULL;
		}
	}

	init.qp_context = attr->qp_context;
	init.send_cq = attr->send_cq;
	init.recv_cq = attr->recv_cq;
	init.srq = attr->srq;
	init.cap = attr->cap;
	init.qp_type = attr->qp_type;
	init.sq_sig_all = attr->sq_sig_all;
	ibqp = vhca_qp_create(attr->pd, &init,
			      type == VHCA_QPT_XRC_INI ? attr : NULL);
	if (!ibqp)
		return NULL;
	attr->cap = init.cap;
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return ibqp;

	qp = to_vqp(ibqp);
	qp->ex = calloc(1, sizeof(*qp->ex));
	if (!qp->ex)
		goto err;
	qp->ex->sge = calloc(qp->sq.max_sge ?: 1, sizeof(struct ibv_sge));
	qp->ex->inl = malloc(qp->sq.max_inline ?: 1);
	if (!qp->ex->sge || !qp->ex->inl)
		goto err;

	qpx = &qp->vqp.qp_ex;
	qpx->wr_start = vhca_wr_start;
	qpx->wr_complete = vhca_wr_complete;
	qpx->wr_abort = vhca_wr_abort;
	qpx->wr_send = vhca_wr_send;
	qpx->wr_send_imm = vhca_wr_send_imm;
	qpx->wr_send_inv = vhca_wr_send_inv;
	qpx->wr_bind_mw = vhca_wr_bind_mw;
	qpx->wr_local_inv = vhca_wr_local_inv;
	qpx->wr_rdma_write = vhca_wr_rdma_write;
	qpx->wr_rdma_write_imm = vhca_wr_rdma_write_imm;
	qpx->wr_rdma_read = vhca_wr_rdma_read;
	qpx->wr_atomic_cmp_swp = vhca_wr_atomic_cmp_swp;
	qpx->wr_atomic_fetch_add = vhca_wr_atomic_fetch_add;
#if VHCA_HAVE_IBV_MPE
	qpx->wr_flush = vhca_wr_flush;
	qpx->wr_atomic_write = vhca_wr_atomic_write;
#endif
	qpx->wr_set_ud_addr = vhca_wr_set_ud_addr;
	qpx->wr_set_xrc_srqn = vhca_wr_set_xrc_srqn;
	qpx->wr_set_sge = vhca_wr_set_sge;
	qpx->wr_set_sge_list = vhca_wr_set_sge_list;
	qpx->wr_set_inline_data = vhca_wr_set_inline_data;
	qpx->wr_set_inline_data_list = vhca_wr_set_inline_data_list;
	qp->vqp.comp_mask |= VERBS_QP_EX;
	return ibqp;

err:
	vhca_destroy_qp(ibqp);
	errno = ENOMEM;
	return NULL;
}
