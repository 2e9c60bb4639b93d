// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * XRC (SR-02): XRC domains, XRC SRQs and XRC_TGT QPs. An XRC SRQ is an SRQ
 * (srq.c) created through ibv_cmd_create_srq_ex with its domain and CQ; its
 * number is what initiators name (ibv_get_srq_num, XRCETH). Its receive
 * CQEs carry an XRC_TGT QP this process never maps and the SRQ's number
 * (struct vhca_cqe srqn), so poll_cq finds the SRQ by number (xsrq_table).
 * An XRC_TGT QP has no rings, doorbell or CQs: vhca.ko creates and modifies
 * it; here it is only its handle. An XRC_INI QP is a QP without an RQ whose
 * send WQEs carry struct vhca_xrc_seg (qp.c).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vhca.h"

struct ibv_xrcd *vhca_open_xrcd(struct ibv_context *context,
				struct ibv_xrcd_init_attr *attr)
{
	struct ib_uverbs_open_xrcd_resp resp = {};
	struct ibv_open_xrcd cmd = {};
	struct verbs_xrcd *x;
	int ret;

	if (!(to_vctx(context)->cap_flags & VHCA_DEV_CAP_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_open_xrcd(context, x, sizeof(*x), attr, &cmd,
				sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(x);
		errno = ret;
		return NULL;
	}
	return &x->xrcd;
}

int vhca_close_xrcd(struct ibv_xrcd *xrcd)
{
	struct verbs_xrcd *x = container_of(xrcd, struct verbs_xrcd, xrcd);
	int ret;

	ret = ibv_cmd_close_xrcd(x);
	if (ret)
		return ret;
	free(x);
	return 0;
}

struct ibv_srq *vhca_create_srq_ex(struct ibv_context *context,
				   struct ibv_srq_init_attr_ex *attr)
{
	struct vhca_context *ctx = to_vctx(context);
	struct ibv_srq_init_attr init = {};
	struct ibv_srq *ibsrq;
	uint32_t need = IBV_SRQ_INIT_ATTR_PD;
	bool xrc;

	xrc = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
	      attr->srq_type == IBV_SRQT_XRC;
	if (xrc)
		need |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	if ((attr->comp_mask & need) != need ||
	    (attr->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_TYPE |
					   IBV_SRQ_INIT_ATTR_PD |
					   IBV_SRQ_INIT_ATTR_XRCD |
					   IBV_SRQ_INIT_ATTR_CQ)) ||
	    ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) &&
	     attr->srq_type != IBV_SRQT_BASIC && !xrc)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	init.srq_context = attr->srq_context;
	init.attr = attr->attr;
	if (!xrc) {
		ibsrq = vhca_srq_create(attr->pd, &init, NULL);
		if (ibsrq)
			attr->attr = init.attr;
		return ibsrq;
	}
	if (!(ctx->cap_flags & VHCA_DEV_CAP_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	ibsrq = vhca_srq_create(attr->pd, &init, attr);
	if (!ibsrq)
		return NULL;
	attr->attr = init.attr;
	if (vhca_xsrq_table_insert(ctx, to_vsrq(ibsrq))) {
		vhca_destroy_srq(ibsrq);
		errno = ENOMEM;
		return NULL;
	}
	return ibsrq;
}

int vhca_get_srq_num(struct ibv_srq *ibsrq, uint32_t *srq_num)
{
	struct vhca_srq *srq = to_vsrq(ibsrq);

	if (srq->vsrq.srq_type != IBV_SRQT_XRC)
		return EINVAL;
	*srq_num = srq->srqn;
	return 0;
}

struct ibv_qp *vhca_create_xrc_tgt(struct ibv_context *context,
				   struct ibv_qp_init_attr_ex *attr)
{
	struct ib_uverbs_create_qp_resp resp = {};
	struct ibv_create_qp cmd = {};
	struct vhca_qp *qp;
	int ret;

	if (!(to_vctx(context)->cap_flags & VHCA_DEV_CAP_XRC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) ||
	    (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_XRCD |
					   IBV_QP_INIT_ATTR_PD))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		errno = ENOMEM;
		return NULL;
	}
	qp->type = VHCA_QPT_XRC_TGT;
	ret = ibv_cmd_create_qp_ex(context, &qp->vqp, attr, &cmd, sizeof(cmd),
				   &resp, sizeof(resp));
	if (ret) {
		free(qp);
		errno = ret;
		return NULL;
	}
	return &qp->ibv_qp;
}

int vhca_xsrq_table_insert(struct vhca_context *ctx, struct vhca_srq *srq)
{
	uint32_t n = srq->srqn;
	uint32_t i = (n >> VHCA_QPT_SHIFT) & VHCA_QPT_MASK;
	struct vhca_srq **l2;

	pthread_mutex_lock(&ctx->qp_table_lock);
	l2 = ctx->xsrq_table[i];
	if (!l2) {
		l2 = calloc(VHCA_QPT_SIZE, sizeof(*l2));
		if (!l2) {
			pthread_mutex_unlock(&ctx->qp_table_lock);
			return ENOMEM;
		}
		__atomic_store_n(&ctx->xsrq_table[i], l2, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&l2[n & VHCA_QPT_MASK], srq, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
	return 0;
}

void vhca_xsrq_table_remove(struct vhca_context *ctx, uint32_t srqn)
{
	struct vhca_srq **l2;

	pthread_mutex_lock(&ctx->qp_table_lock);
	l2 = ctx->xsrq_table[(srqn >> VHCA_QPT_SHIFT) & VHCA_QPT_MASK];
	if (l2 && l2[srqn & VHCA_QPT_MASK] &&
	    l2[srqn & VHCA_QPT_MASK]->srqn == srqn)
		__atomic_store_n(&l2[srqn & VHCA_QPT_MASK], NULL,
				 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
}

/* The XRC SRQ of a receive CQE; NULL if this process has none of that number. */
struct vhca_srq *vhca_xsrq_lookup(struct vhca_context *ctx, uint32_t srqn)
{
	struct vhca_srq **l2 = __atomic_load_n(
		&ctx->xsrq_table[(srqn >> VHCA_QPT_SHIFT) & VHCA_QPT_MASK],
		__ATOMIC_ACQUIRE);
	struct vhca_srq *s;

	if (!l2)
		return NULL;
	s = __atomic_load_n(&l2[srqn & VHCA_QPT_MASK], __ATOMIC_ACQUIRE);
	return s && s->srqn == srqn ? s : NULL;
}
