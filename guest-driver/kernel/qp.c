// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Queue pairs: RC, UC, UD, the GSI QP (QS-01..09) and, from a device with
 * a subnet management agent, the SMI QP (QP0, AD-09; mad.c), and the
 * kernel's post_send / post_recv.
 *
 * A kernel QP's SQ and RQ are coherent rings of fixed-stride WQEs laid out as
 * vhca_abi.h "Work queue entries" says; posting writes WQEs at the producer
 * index and stores the new index into the QP's doorbell slot with the
 * asleep/WAKE protocol (uar.c). The WQE's wr_id field carries the ring index
 * and the caller's wr_id stays in a shadow array: a CQE then tells how far
 * its queue has been retired, unsignaled WQEs included, which is how the
 * driver knows the SQ has room.
 *
 * A user QP's rings are the provider's (ib_umem + page lists); the provider
 * posts and rings the doorbell itself.
 */

#include <rdma/uverbs_ioctl.h>

#include "vhca.h"

static void vhca_qp_put(struct vhca_qp *qp)
{
	if (refcount_dec_and_test(&qp->ref))
		complete(&qp->freed);
}

static enum ib_event_type vhca_qp_event_type(u8 kind)
{
	switch (kind) {
	case VHCA_EQE_QP_FATAL:		   return IB_EVENT_QP_FATAL;
	case VHCA_EQE_QP_REQ_ERR:	   return IB_EVENT_QP_REQ_ERR;
	case VHCA_EQE_QP_ACCESS_ERR:	   return IB_EVENT_QP_ACCESS_ERR;
	case VHCA_EQE_COMM_EST:		   return IB_EVENT_COMM_EST;
	case VHCA_EQE_SQ_DRAINED:	   return IB_EVENT_SQ_DRAINED;
	case VHCA_EQE_PATH_MIG:		   return IB_EVENT_PATH_MIG;
	case VHCA_EQE_PATH_MIG_ERR:	   return IB_EVENT_PATH_MIG_ERR;
	case VHCA_EQE_QP_LAST_WQE_REACHED: return IB_EVENT_QP_LAST_WQE_REACHED;
	default:			   return IB_EVENT_QP_FATAL;
	}
}

/* EQ 0 handler (hard IRQ): an asynchronous event of QP `qpn`. */
void vhca_qp_event(struct vhca_dev *dev, u32 qpn, u8 kind)
{
	struct vhca_qp *qp;

	xa_lock(&dev->qp_xa);
	qp = xa_load(&dev->qp_xa, qpn);
	if (qp)
		refcount_inc(&qp->ref);
	xa_unlock(&dev->qp_xa);
	if (!qp)
		return;
	if (qp->ibqp.event_handler) {
		struct ib_event ev = {
			.device = &dev->ibdev,
			.event = vhca_qp_event_type(kind),
			.element.qp = &qp->ibqp,
		};

		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
	}
	vhca_qp_put(qp);
}

/*
 * Bytes before the data of a send WQE, at most: the control segment, then the
 * UD segment or the remote-address (+ atomic) segments.
 */
static u32 vhca_sq_headers(u8 type)
{
	switch (type) {
	case VHCA_QPT_UD:
	case VHCA_QPT_SMI:
	case VHCA_QPT_GSI:
		return sizeof(struct vhca_send_ctrl) + sizeof(struct vhca_ud_seg);
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

int vhca_wq_alloc(struct vhca_dev *dev, struct vhca_wq *wq,
			 u32 entries, u32 shift, struct vhca_pbl *desc)
{
	int ret;

	spin_lock_init(&wq->lock);
	wq->log2 = order_base_2(max(entries, 1U));
	wq->shift = shift;
	wq->pi = 0;
	wq->ci = 0;
	atomic_set(&wq->done, 0);
	ret = vhca_kring_alloc(dev, &wq->ring, (size_t)1 << (wq->log2 + shift),
			       desc);
	if (ret)
		return ret;
	wq->wrid = kvcalloc(1U << wq->log2, sizeof(u64), GFP_KERNEL);
	if (!wq->wrid) {
		vhca_kring_free(dev, &wq->ring);
		return -ENOMEM;
	}
	return 0;
}

void vhca_wq_free(struct vhca_dev *dev, struct vhca_wq *wq)
{
	vhca_kring_free(dev, &wq->ring);
	kvfree(wq->wrid);
	wq->wrid = NULL;
}

static void vhca_qp_free_rings(struct vhca_dev *dev, struct vhca_qp *qp)
{
	vhca_wq_free(dev, &qp->sq);
	vhca_wq_free(dev, &qp->rq);
	vhca_pbl_free(dev, &qp->sq_pbl);
	vhca_pbl_free(dev, &qp->rq_pbl);
	if (qp->sq_umem)
		ib_umem_release(qp->sq_umem);
	if (qp->rq_umem)
		ib_umem_release(qp->rq_umem);
	qp->sq_umem = NULL;
	qp->rq_umem = NULL;
}

/* Kernel rings: strides from the caps asked for, each a power of two. */
static int vhca_qp_kernel_rings(struct vhca_dev *dev, struct vhca_qp *qp,
				struct ib_qp_init_attr *init,
				struct vhca_create_qp_in *in)
{
	struct ib_qp_cap *cap = &init->cap;
	u32 hdr = vhca_sq_headers(qp->type);
	u32 sq_bytes, rq_bytes;
	int ret;

	sq_bytes = hdr + max(cap->max_send_sge * (u32)sizeof(struct vhca_sge),
			     cap->max_inline_data);
	in->sq_wqe_shift = max_t(u32, VHCA_SQ_MIN_WQE_SHIFT,
				 order_base_2(sq_bytes));
	rq_bytes = sizeof(struct vhca_recv_ctrl) +
		   max(cap->max_recv_sge, 1U) * sizeof(struct vhca_sge);
	in->rq_wqe_shift = max_t(u32, VHCA_RQ_MIN_WQE_SHIFT,
				 order_base_2(rq_bytes));
	if (in->sq_wqe_shift > VHCA_MAX_WQE_SHIFT ||
	    in->rq_wqe_shift > VHCA_MAX_WQE_SHIFT)
		return -EINVAL;

	ret = vhca_wq_alloc(dev, &qp->sq, cap->max_send_wr, in->sq_wqe_shift,
			    &in->sq);
	if (ret)
		return ret;
	qp->sq.max_sge = ((1U << in->sq_wqe_shift) - hdr) /
			 sizeof(struct vhca_sge);
	qp->sq.max_inline = (1U << in->sq_wqe_shift) - hdr;
	in->log2_sq_size = qp->sq.log2;

	if (init->srq) {
		in->rq_wqe_shift = VHCA_RQ_MIN_WQE_SHIFT;
		return 0;
	}
	ret = vhca_wq_alloc(dev, &qp->rq, cap->max_recv_wr, in->rq_wqe_shift,
			    &in->rq);
	if (ret)
		return ret;
	qp->rq.max_sge = ((1U << in->rq_wqe_shift) -
			  sizeof(struct vhca_recv_ctrl)) /
			 sizeof(struct vhca_sge);
	in->log2_rq_size = qp->rq.log2;
	return 0;
}

/* User rings: the provider chose the geometry; check it and pin the rings. */
static int vhca_qp_user_rings(struct vhca_dev *dev, struct vhca_qp *qp,
			      struct ib_qp_init_attr *init,
			      struct ib_udata *udata,
			      struct vhca_create_qp_in *in)
{
	struct ib_qp_cap *cap = &init->cap;
	struct vhca_ib_create_qp ucmd;
	int ret;

	if (udata->inlen < sizeof(ucmd))
		return -EINVAL;
	ret = ib_copy_from_udata(&ucmd, udata, sizeof(ucmd));
	if (ret)
		return ret;
	if (ucmd.sq_wqe_shift < VHCA_SQ_MIN_WQE_SHIFT ||
	    ucmd.sq_wqe_shift > VHCA_MAX_WQE_SHIFT ||
	    ucmd.log2_sq_size > 24 ||
	    (1U << ucmd.log2_sq_size) < cap->max_send_wr)
		return -EINVAL;
	in->sq_wqe_shift = ucmd.sq_wqe_shift;
	in->log2_sq_size = ucmd.log2_sq_size;
	qp->sq_umem = vhca_umem_ring(dev, ucmd.sq_buf_addr, ucmd.sq_buf_size,
				     (size_t)1 << (ucmd.log2_sq_size +
						   ucmd.sq_wqe_shift),
				     &qp->sq_pbl);
	if (IS_ERR(qp->sq_umem)) {
		ret = PTR_ERR(qp->sq_umem);
		qp->sq_umem = NULL;
		return ret;
	}
	in->sq = qp->sq_pbl.desc;

	/* An SRQ, or an XRC_INI QP (SR-02): no RQ. */
	if (init->srq || init->qp_type == IB_QPT_XRC_INI) {
		in->rq_wqe_shift = VHCA_RQ_MIN_WQE_SHIFT;
		return 0;
	}
	if (ucmd.rq_wqe_shift < VHCA_RQ_MIN_WQE_SHIFT ||
	    ucmd.rq_wqe_shift > VHCA_MAX_WQE_SHIFT ||
	    ucmd.log2_rq_size > 24 ||
	    (1U << ucmd.log2_rq_size) < cap->max_recv_wr)
		return -EINVAL;
	in->rq_wqe_shift = ucmd.rq_wqe_shift;
	in->log2_rq_size = ucmd.log2_rq_size;
	qp->rq_umem = vhca_umem_ring(dev, ucmd.rq_buf_addr, ucmd.rq_buf_size,
				     (size_t)1 << (ucmd.log2_rq_size +
						   ucmd.rq_wqe_shift),
				     &qp->rq_pbl);
	if (IS_ERR(qp->rq_umem)) {
		ret = PTR_ERR(qp->rq_umem);
		qp->rq_umem = NULL;
		return ret;
	}
	in->rq = qp->rq_pbl.desc;
	return 0;
}

static int vhca_qp_type(struct vhca_dev *dev, enum ib_qp_type t, u8 *out)
{
	u32 caps = dev->attr.cap_flags;

	switch (t) {
	case IB_QPT_RC:
		*out = VHCA_QPT_RC;
		return (caps & VHCA_DEV_CAP_RC) ? 0 : -EOPNOTSUPP;
	case IB_QPT_UC:
		*out = VHCA_QPT_UC;
		return (caps & VHCA_DEV_CAP_UC) ? 0 : -EOPNOTSUPP;
	case IB_QPT_UD:
		*out = VHCA_QPT_UD;
		return (caps & VHCA_DEV_CAP_UD) ? 0 : -EOPNOTSUPP;
	case IB_QPT_SMI:
		/*
		 * QP0 (AD-09): only from a device with an SMA (mad.c), the one
		 * case where the port claims SMI and ib_mad asks for it.
		 */
		*out = VHCA_QPT_SMI;
		return dev->sma ? 0 : -EOPNOTSUPP;
	case IB_QPT_GSI:
		/* Asked of the device even without CAP_GSI (ARCHITECTURE.md §7). */
		*out = VHCA_QPT_GSI;
		return 0;
	case IB_QPT_XRC_INI:
		*out = VHCA_QPT_XRC_INI;
		return (caps & VHCA_DEV_CAP_XRC) ? 0 : -EOPNOTSUPP;
	case IB_QPT_XRC_TGT:
		*out = VHCA_QPT_XRC_TGT;
		return (caps & VHCA_DEV_CAP_XRC) ? 0 : -EOPNOTSUPP;
	default:
		/* Raw packet QPs: not supported. */
		return -EOPNOTSUPP;
	}
}

int vhca_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		   struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_create_qp_in *in;
	struct vhca_create_qp_out out;
	struct ib_qp_cap *cap = &init->cap;
	u8 status;
	int slot, ret;

	ret = vhca_qp_type(dev, init->qp_type, &qp->type);
	if (ret)
		return ret;
	if (init->create_flags)
		return -EOPNOTSUPP;
	/* QP0 is the port's own: ib_mad names the port (one per device). */
	if (init->qp_type == IB_QPT_SMI && init->port_num != VHCA_PORT)
		return -EINVAL;
	/*
	 * SR-02: a TGT QP has no rings (ib_core creates it for user space as a
	 * kernel QP); an INI QP sends from user space only (no kernel user of
	 * XRC sends exists).
	 */
	if (init->qp_type == IB_QPT_XRC_TGT)
		return vhca_create_xrc_tgt(dev, qp, init);
	if (init->qp_type == IB_QPT_XRC_INI && !udata)
		return -EOPNOTSUPP;
	if (cap->max_send_wr > dev->attr.max_qp_wr ||
	    cap->max_recv_wr > dev->attr.max_qp_wr ||
	    cap->max_send_sge > dev->attr.max_sge ||
	    cap->max_recv_sge > dev->attr.max_sge ||
	    cap->max_inline_data > dev->attr.max_inline_data)
		return -EINVAL;

	in = kzalloc(sizeof(*in), GFP_KERNEL);
	if (!in)
		return -ENOMEM;
	refcount_set(&qp->ref, 1);
	init_completion(&qp->freed);
	spin_lock_init(&qp->sq.lock);
	spin_lock_init(&qp->rq.lock);
	qp->user = !!udata;
	qp->state = IB_QPS_RESET;
	qp->port = init->port_num ? init->port_num : VHCA_PORT;
	qp->uar = vhca_uar_of(dev, udata);

	ret = udata ? vhca_qp_user_rings(dev, qp, init, udata, in) :
		      vhca_qp_kernel_rings(dev, qp, init, in);
	if (ret)
		goto err_rings;

	slot = vhca_slot_alloc(qp->uar);
	if (slot < 0) {
		ret = -ENOMEM;
		goto err_rings;
	}
	qp->slot = slot;
	qp->db = vhca_slot_addr(dev, qp->uar->index, slot);
	writel(0, qp->db + offsetof(struct vhca_qp_doorbell, sq_pi));
	writel(0, qp->db + offsetof(struct vhca_qp_doorbell, rq_pi));

	in->qp_type = qp->type;
	in->sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	in->port = qp->port;
	in->pdn = to_vpd(ibqp->pd)->pdn;
	in->send_cqn = to_vcq(init->send_cq)->cqn;
	/* An XRC_INI QP has no receive CQ: the device takes the send CQ's. */
	in->recv_cqn = init->recv_cq ? to_vcq(init->recv_cq)->cqn :
				       in->send_cqn;
	in->srqn = init->srq ? to_vsrq(init->srq)->srqn : VHCA_NONE;
	in->cap.max_send_wr = cap->max_send_wr;
	in->cap.max_recv_wr = init->srq || !init->recv_cq ? 0 :
							  cap->max_recv_wr;
	in->cap.max_send_sge = cap->max_send_sge;
	in->cap.max_recv_sge = init->srq || !init->recv_cq ? 0 :
							   cap->max_recv_sge;
	in->cap.max_inline_data = cap->max_inline_data;
	in->uar = qp->uar->index;
	in->db_slot = qp->slot;
	ret = vhca_cmd(dev, VHCA_CMD_CREATE_QP, in, sizeof(*in), &out,
		       sizeof(out), &status);
	if (ret) {
		if (status == VHCA_STATUS_NOT_SUPPORTED)
			dev_info(&dev->pdev->dev,
				 "the device does not support QP type %u (ib %d)\n",
				 qp->type, init->qp_type);
		goto err_slot;
	}
	qp->qpn = out.qpn;
	ibqp->qp_num = out.qpn;

	/* What the device granted, within what the kernel rings hold. */
	cap->max_send_wr = out.cap.max_send_wr;
	cap->max_send_sge = out.cap.max_send_sge;
	cap->max_inline_data = out.cap.max_inline_data;
	cap->max_recv_wr = init->srq ? 0 : out.cap.max_recv_wr;
	cap->max_recv_sge = init->srq ? 0 : out.cap.max_recv_sge;
	if (!udata) {
		cap->max_send_wr = min(cap->max_send_wr, 1U << qp->sq.log2);
		cap->max_send_sge = min(cap->max_send_sge, qp->sq.max_sge);
		cap->max_inline_data = min(cap->max_inline_data,
					   qp->sq.max_inline);
		qp->sq.max_sge = cap->max_send_sge;
		qp->sq.max_inline = cap->max_inline_data;
		if (!init->srq) {
			cap->max_recv_wr = min(cap->max_recv_wr,
					       1U << qp->rq.log2);
			cap->max_recv_sge = min(cap->max_recv_sge,
						qp->rq.max_sge);
			qp->rq.max_sge = cap->max_recv_sge;
		}
	}

	ret = xa_insert_irq(&dev->qp_xa, qp->qpn, qp, GFP_KERNEL);
	if (ret)
		goto err_destroy;

	if (udata) {
		struct vhca_ib_create_qp_resp resp = {
			.qpn = qp->qpn,
			.uar_index = qp->uar->index,
			.db_slot = qp->slot,
		};

		ret = ib_copy_to_udata(udata, &resp,
				       min(udata->outlen, sizeof(resp)));
		if (ret)
			goto err_xa;
	}
	kfree(in);
	return 0;

err_xa:
	xa_erase_irq(&dev->qp_xa, qp->qpn);
err_destroy:
	{
		struct vhca_destroy_qp_in din = { .qpn = qp->qpn };

		vhca_cmd(dev, VHCA_CMD_DESTROY_QP, &din, sizeof(din), NULL, 0,
			 NULL);
	}
err_slot:
	vhca_slot_free(qp->uar, qp->slot);
err_rings:
	vhca_qp_free_rings(dev, qp);
	kfree(in);
	return ret;
}

/* ib_qp_attr_mask bits the device knows (the same numbers as its own). */
#define VHCA_IB_QP_MASK                                                      \
	(IB_QP_STATE | IB_QP_CUR_STATE | IB_QP_EN_SQD_ASYNC_NOTIFY |         \
	 IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY |   \
	 IB_QP_AV | IB_QP_PATH_MTU | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |       \
	 IB_QP_RNR_RETRY | IB_QP_RQ_PSN | IB_QP_MAX_QP_RD_ATOMIC |           \
	 IB_QP_ALT_PATH | IB_QP_MIN_RNR_TIMER | IB_QP_SQ_PSN |               \
	 IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_PATH_MIG_STATE | IB_QP_CAP |       \
	 IB_QP_DEST_QPN)

static u32 vhca_qp_mask_to_dev(int m)
{
	static const struct { int ib; u32 dev; } map[] = {
		{ IB_QP_STATE, VHCA_QP_ATTR_STATE },
		{ IB_QP_CUR_STATE, VHCA_QP_ATTR_CUR_STATE },
		{ IB_QP_EN_SQD_ASYNC_NOTIFY, VHCA_QP_ATTR_EN_SQD_ASYNC_NOTIFY },
		{ IB_QP_ACCESS_FLAGS, VHCA_QP_ATTR_ACCESS_FLAGS },
		{ IB_QP_PKEY_INDEX, VHCA_QP_ATTR_PKEY_INDEX },
		{ IB_QP_PORT, VHCA_QP_ATTR_PORT },
		{ IB_QP_QKEY, VHCA_QP_ATTR_QKEY },
		{ IB_QP_AV, VHCA_QP_ATTR_AV },
		{ IB_QP_PATH_MTU, VHCA_QP_ATTR_PATH_MTU },
		{ IB_QP_TIMEOUT, VHCA_QP_ATTR_TIMEOUT },
		{ IB_QP_RETRY_CNT, VHCA_QP_ATTR_RETRY_CNT },
		{ IB_QP_RNR_RETRY, VHCA_QP_ATTR_RNR_RETRY },
		{ IB_QP_RQ_PSN, VHCA_QP_ATTR_RQ_PSN },
		{ IB_QP_MAX_QP_RD_ATOMIC, VHCA_QP_ATTR_MAX_QP_RD_ATOMIC },
		{ IB_QP_ALT_PATH, VHCA_QP_ATTR_ALT_PATH },
		{ IB_QP_MIN_RNR_TIMER, VHCA_QP_ATTR_MIN_RNR_TIMER },
		{ IB_QP_SQ_PSN, VHCA_QP_ATTR_SQ_PSN },
		{ IB_QP_MAX_DEST_RD_ATOMIC, VHCA_QP_ATTR_MAX_DEST_RD_ATOMIC },
		{ IB_QP_PATH_MIG_STATE, VHCA_QP_ATTR_PATH_MIG_STATE },
		{ IB_QP_CAP, VHCA_QP_ATTR_CAP },
		{ IB_QP_DEST_QPN, VHCA_QP_ATTR_DEST_QPN },
	};
	u32 out = 0;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(map); i++)
		if (m & map[i].ib)
			out |= map[i].dev;
	return out;
}

/*
 * Drops the CQEs of a kernel QP still queued in its CQs (mlx4's cq_clean).
 * Taking each CQ's lock also means poll_cq holds no pointer to the QP after.
 */
static void vhca_qp_clean_cqs(struct vhca_qp *qp)
{
	struct vhca_srq *srq = qp->ibqp.srq ? to_vsrq(qp->ibqp.srq) : NULL;
	struct vhca_cq *scq = to_vcq(qp->ibqp.send_cq);
	struct vhca_cq *rcq = to_vcq(qp->ibqp.recv_cq);

	vhca_cq_clean(scq, qp->qpn, rcq == scq ? srq : NULL);
	if (rcq != scq)
		vhca_cq_clean(rcq, qp->qpn, srq);
}

/*
 * Back to RESET empties a kernel QP's queues. The device takes the producer
 * indices now in the doorbell slot as the point from which WQEs are new (as
 * CREATE_QP does; vhca_abi.h MODIFY_QP), so the indices keep running: the
 * driver only forgets what was outstanding, and the CQEs still queued for it.
 */
static void vhca_qp_reset_queues(struct vhca_qp *qp)
{
	unsigned long flags;

	/* The device writes no more CQEs for it: drop the queued ones first. */
	vhca_qp_clean_cqs(qp);
	spin_lock_irqsave(&qp->sq.lock, flags);
	WRITE_ONCE(qp->sq.ci, qp->sq.pi);
	spin_unlock_irqrestore(&qp->sq.lock, flags);
	spin_lock_irqsave(&qp->rq.lock, flags);
	WRITE_ONCE(qp->rq.ci, qp->rq.pi);
	spin_unlock_irqrestore(&qp->rq.lock, flags);
}

int vhca_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		   struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_modify_qp_in *in;
	struct vhca_qp_attr *a;
	int ret;

	if (mask & ~VHCA_IB_QP_MASK)
		return -EOPNOTSUPP;
	in = kzalloc(sizeof(*in), GFP_KERNEL);
	if (!in)
		return -ENOMEM;
	a = &in->attr;
	in->qpn = qp->qpn;
	in->attr_mask = vhca_qp_mask_to_dev(mask);
	a->qp_state = attr->qp_state;
	a->cur_qp_state = attr->cur_qp_state;
	a->path_mtu = attr->path_mtu;
	a->path_mig_state = attr->path_mig_state;
	a->qkey = attr->qkey;
	a->rq_psn = attr->rq_psn;
	a->sq_psn = attr->sq_psn;
	a->dest_qp_num = attr->dest_qp_num;
	a->qp_access_flags = vhca_access_to_dev(attr->qp_access_flags);
	a->pkey_index = attr->pkey_index;
	a->port_num = attr->port_num;
	a->en_sqd_async_notify = attr->en_sqd_async_notify;
	a->max_rd_atomic = attr->max_rd_atomic;
	a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	a->min_rnr_timer = attr->min_rnr_timer;
	a->timeout = attr->timeout;
	a->retry_cnt = attr->retry_cnt;
	a->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_AV) {
		ret = vhca_ah_to_av(dev, &attr->ah_attr, &a->ah_attr);
		if (ret) {
			kfree(in);
			return ret;
		}
	}
	/* AD-10: the alternate path, in the mailbox after the attributes. */
	if (mask & IB_QP_ALT_PATH) {
		ret = vhca_ah_to_av(dev, &attr->alt_ah_attr, &in->alt.ah_attr);
		if (ret) {
			kfree(in);
			return ret;
		}
		in->alt.pkey_index = attr->alt_pkey_index;
		in->alt.port_num = attr->alt_port_num;
		in->alt.timeout = attr->alt_timeout;
	}
	if (mask & IB_QP_CAP) {
		a->cap.max_send_wr = attr->cap.max_send_wr;
		a->cap.max_recv_wr = attr->cap.max_recv_wr;
		a->cap.max_send_sge = attr->cap.max_send_sge;
		a->cap.max_recv_sge = attr->cap.max_recv_sge;
		a->cap.max_inline_data = attr->cap.max_inline_data;
	}
	ret = vhca_cmd(dev, VHCA_CMD_MODIFY_QP, in, sizeof(*in), NULL, 0,
		       NULL);
	kfree(in);
	if (ret)
		return ret;
	if (mask & IB_QP_STATE) {
		if (attr->qp_state == IB_QPS_RESET && !qp->user &&
		    qp->type != VHCA_QPT_XRC_TGT && qp->state != IB_QPS_RESET)
			vhca_qp_reset_queues(qp);
		WRITE_ONCE(qp->state, attr->qp_state);
	}
	if (mask & IB_QP_PORT)
		qp->port = attr->port_num;
	return 0;
}

int vhca_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		  struct ib_qp_init_attr *init)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_query_qp_in in = { .qpn = qp->qpn };
	struct vhca_query_qp_out *out;
	struct vhca_qp_attr *a;
	int ret;

	out = kzalloc(sizeof(*out), GFP_KERNEL);
	if (!out)
		return -ENOMEM;
	ret = vhca_cmd(dev, VHCA_CMD_QUERY_QP, &in, sizeof(in), out,
		       sizeof(*out), NULL);
	if (ret)
		goto out;
	a = &out->attr;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a->qp_state;
	attr->cur_qp_state = a->qp_state;
	attr->path_mtu = a->path_mtu;
	attr->path_mig_state = a->path_mig_state; /* AD-10: ib_mig_state numbers */
	attr->qkey = a->qkey;
	attr->rq_psn = a->rq_psn;
	attr->sq_psn = a->sq_psn;
	attr->dest_qp_num = a->dest_qp_num;
	attr->qp_access_flags = vhca_access_to_ib(a->qp_access_flags);
	attr->cap.max_send_wr = a->cap.max_send_wr;
	attr->cap.max_recv_wr = a->cap.max_recv_wr;
	attr->cap.max_send_sge = a->cap.max_send_sge;
	attr->cap.max_recv_sge = a->cap.max_recv_sge;
	attr->cap.max_inline_data = a->cap.max_inline_data;
	if (qp->type == VHCA_QPT_RC || qp->type == VHCA_QPT_UC ||
	    qp->type == VHCA_QPT_XRC_INI || qp->type == VHCA_QPT_XRC_TGT) {
		vhca_av_to_ah(dev, &a->ah_attr, &attr->ah_attr);
		/* AD-10: after a migration, the former primary path. */
		vhca_av_to_ah(dev, &out->alt.ah_attr, &attr->alt_ah_attr);
		attr->alt_pkey_index = out->alt.pkey_index;
		attr->alt_port_num = out->alt.port_num;
		attr->alt_timeout = out->alt.timeout;
	}
	attr->pkey_index = a->pkey_index;
	attr->port_num = a->port_num;
	attr->en_sqd_async_notify = a->en_sqd_async_notify;
	attr->sq_draining = a->sq_draining;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	attr->min_rnr_timer = a->min_rnr_timer;
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;

	memset(init, 0, sizeof(*init));
	init->event_handler = ibqp->event_handler;
	init->qp_context = ibqp->qp_context;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->qp_type = ibqp->qp_type;
	init->cap = attr->cap;
	init->sq_sig_type = out->sq_sig_all ? IB_SIGNAL_ALL_WR :
					      IB_SIGNAL_REQ_WR;
	init->port_num = qp->port;
out:
	kfree(out);
	return ret;
}

int vhca_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_destroy_qp_in in = { .qpn = qp->qpn };
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_DESTROY_QP, &in, sizeof(in), NULL, 0,
		       NULL);
	if (ret)
		dev_warn(&dev->pdev->dev, "DESTROY_QP %u: %d\n", qp->qpn, ret);

	xa_erase_irq(&dev->qp_xa, qp->qpn);
	vhca_qp_put(qp);
	wait_for_completion(&qp->freed);
	/* An XRC_TGT QP has no CQs, slot or rings (SR-02). */
	if (qp->type == VHCA_QPT_XRC_TGT)
		return 0;
	if (!qp->user)
		vhca_qp_clean_cqs(qp);
	vhca_slot_free(qp->uar, qp->slot);
	vhca_qp_free_rings(dev, qp);
	return 0;
}

static int vhca_wr_opcode(enum ib_wr_opcode op, u8 *out)
{
	switch (op) {
	case IB_WR_RDMA_WRITE:		*out = VHCA_WR_RDMA_WRITE; break;
	case IB_WR_RDMA_WRITE_WITH_IMM:	*out = VHCA_WR_RDMA_WRITE_WITH_IMM; break;
	case IB_WR_SEND:		*out = VHCA_WR_SEND; break;
	case IB_WR_SEND_WITH_IMM:	*out = VHCA_WR_SEND_WITH_IMM; break;
	case IB_WR_RDMA_READ:		*out = VHCA_WR_RDMA_READ; break;
	case IB_WR_ATOMIC_CMP_AND_SWP:	*out = VHCA_WR_ATOMIC_CMP_SWAP; break;
	case IB_WR_ATOMIC_FETCH_AND_ADD: *out = VHCA_WR_ATOMIC_FETCH_ADD; break;
	case IB_WR_SEND_WITH_INV:	*out = VHCA_WR_SEND_WITH_INV; break;
	case IB_WR_LOCAL_INV:		*out = VHCA_WR_LOCAL_INV; break;
	case IB_WR_REG_MR:		*out = VHCA_WR_REG_MR; break;
	default:			return -EINVAL;
	}
	return 0;
}

/* One send WQE at the SQ's producer index (vhca_abi.h "Send WQE"). */
static int vhca_build_send(struct vhca_qp *qp, const struct ib_send_wr *wr)
{
	struct vhca_wq *sq = &qp->sq;
	u32 stride = 1U << sq->shift;
	u8 *w = (u8 *)sq->ring.buf + ((sq->pi & ((1U << sq->log2) - 1)) << sq->shift);
	struct vhca_send_ctrl *ctrl = (struct vhca_send_ctrl *)w;
	u32 off = sizeof(*ctrl);
	u8 op;
	int i;

	if (vhca_wr_opcode(wr->opcode, &op))
		return -EINVAL;
	memset(w, 0, stride);
	ctrl->wr_id = sq->pi;	/* the ring index; the caller's is in wrid[] */
	ctrl->opcode = op;
	ctrl->flags = ((wr->send_flags & IB_SEND_FENCE) ? VHCA_SEND_FENCE : 0) |
		      ((wr->send_flags & IB_SEND_SIGNALED) ? VHCA_SEND_SIGNALED : 0) |
		      ((wr->send_flags & IB_SEND_SOLICITED) ? VHCA_SEND_SOLICITED : 0) |
		      ((wr->send_flags & IB_SEND_INLINE) ? VHCA_SEND_INLINE : 0);
	if (op == VHCA_WR_SEND_WITH_IMM || op == VHCA_WR_RDMA_WRITE_WITH_IMM)
		ctrl->imm_or_inv = be32_to_cpu(wr->ex.imm_data);
	else if (op == VHCA_WR_SEND_WITH_INV || op == VHCA_WR_LOCAL_INV)
		ctrl->imm_or_inv = wr->ex.invalidate_rkey;
	/* LOCAL_INV: the control segment only (ctrl.len = 0). */
	if (op == VHCA_WR_LOCAL_INV)
		return 0;
	/*
	 * REG_MR (MP-08): ctrl.imm_or_inv = the MR's key afterwards, then the
	 * registration from what map_mr_sg left in the MR; ctrl.len = 0.
	 */
	if (op == VHCA_WR_REG_MR) {
		const struct ib_reg_wr *rw = reg_wr(wr);
		struct vhca_mr *mr = to_vmr(rw->mr);
		struct vhca_reg_mr_seg *seg = (struct vhca_reg_mr_seg *)(w + off);

		if (!mr->pages || off + sizeof(*seg) > stride ||
		    !is_power_of_2(rw->mr->page_size))
			return -EINVAL;
		ctrl->imm_or_inv = rw->key;
		seg->iova = rw->mr->iova;
		seg->length = rw->mr->length;
		seg->page_list = mr->pages_dma;
		seg->npages = mr->npages;
		seg->access = vhca_access_to_dev(rw->access);
		seg->page_shift = ilog2(rw->mr->page_size);
		return 0;
	}

	/*
	 * QP0 sends as QP1 does (AD-09): the UD segment names the SMP's
	 * destination (a permissive DLID for a directed-route SMP); the device
	 * puts it on VL15 and checks no P_Key or Q_Key for QP0.
	 */
	if (qp->type == VHCA_QPT_UD || qp->type == VHCA_QPT_GSI ||
	    qp->type == VHCA_QPT_SMI) {
		const struct ib_ud_wr *ud = ud_wr(wr);
		struct vhca_ud_seg *seg = (struct vhca_ud_seg *)(w + off);

		seg->remote_qpn = ud->remote_qpn;
		seg->remote_qkey = ud->remote_qkey;
		seg->av = to_vah(ud->ah)->av;
		/*
		 * AD-05, PV-03: a GSI (or SMI) send carries the P_Key of the
		 * entry the MAD layer names (the partition the request came in,
		 * from the receive's wc.pkey_index); other UD QPs send their
		 * own.
		 */
		if (qp->type == VHCA_QPT_GSI || qp->type == VHCA_QPT_SMI)
			seg->av.pkey_index = ud->pkey_index;
		off += sizeof(*seg);
	}
	switch (op) {
	case VHCA_WR_RDMA_WRITE:
	case VHCA_WR_RDMA_WRITE_WITH_IMM:
	case VHCA_WR_RDMA_READ: {
		struct vhca_raddr_seg *r = (struct vhca_raddr_seg *)(w + off);

		r->remote_addr = rdma_wr(wr)->remote_addr;
		r->rkey = rdma_wr(wr)->rkey;
		off += sizeof(*r);
		break;
	}
	case VHCA_WR_ATOMIC_CMP_SWAP:
	case VHCA_WR_ATOMIC_FETCH_ADD: {
		struct vhca_raddr_seg *r = (struct vhca_raddr_seg *)(w + off);
		struct vhca_atomic_seg *at =
			(struct vhca_atomic_seg *)(w + off + sizeof(*r));

		r->remote_addr = atomic_wr(wr)->remote_addr;
		r->rkey = atomic_wr(wr)->rkey;
		at->compare_add = atomic_wr(wr)->compare_add;
		at->swap = atomic_wr(wr)->swap;
		off += sizeof(*r) + sizeof(*at);
		break;
	}
	default:
		break;
	}

	if (wr->send_flags & IB_SEND_INLINE) {
		u32 len = 0;

		for (i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (len > sq->max_inline || off + len > stride)
			return -EINVAL;
		/* Kernel inline data: sge.addr is a kernel virtual address. */
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(w + off,
			       (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
		ctrl->len = len;
	} else {
		struct vhca_sge *sge = (struct vhca_sge *)(w + off);

		if (wr->num_sge > sq->max_sge ||
		    off + wr->num_sge * sizeof(*sge) > stride)
			return -EINVAL;
		for (i = 0; i < wr->num_sge; i++) {
			sge[i].addr = wr->sg_list[i].addr;
			sge[i].length = wr->sg_list[i].length;
			sge[i].lkey = wr->sg_list[i].lkey;
		}
		ctrl->len = wr->num_sge;
	}
	return 0;
}

int vhca_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		   const struct ib_send_wr **bad_wr)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_wq *sq = &qp->sq;
	unsigned long flags;
	u8 state = READ_ONCE(qp->state);
	u32 start;
	int ret = 0;

	if (qp->user)
		return -EINVAL;
	/* o10-8.2: no sends before RTS (ERR is allowed: it flushes). */
	if (state == IB_QPS_RESET || state == IB_QPS_INIT ||
	    state == IB_QPS_RTR) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&sq->lock, flags);
	start = sq->pi;
	for (; wr; wr = wr->next) {
		if (sq->pi - READ_ONCE(sq->ci) >= (1U << sq->log2)) {
			ret = -ENOMEM;
			break;
		}
		ret = vhca_build_send(qp, wr);
		if (ret)
			break;
		sq->wrid[sq->pi & ((1U << sq->log2) - 1)] = wr->wr_id;
		WRITE_ONCE(sq->pi, sq->pi + 1);
	}
	if (sq->pi != start)
		vhca_db_produce(dev, qp->uar->index,
				qp->db + offsetof(struct vhca_qp_doorbell, sq_pi),
				sq->pi);
	spin_unlock_irqrestore(&sq->lock, flags);
	if (ret)
		*bad_wr = wr;
	return ret;
}

/*
 * One receive WQE at `wq`'s producer index (caller holds wq->lock and checks
 * room). RQ WQEs carry their ring index as wr_id; SRQ WQEs the caller's
 * (they complete out of order, and an SRQ has no shadow).
 */
int vhca_wq_post_recv(struct vhca_dev *dev, struct vhca_wq *wq,
		      const struct ib_recv_wr *wr, bool use_index)
{
	u32 slot = wq->pi & ((1U << wq->log2) - 1);
	u8 *w = (u8 *)wq->ring.buf + (slot << wq->shift);
	struct vhca_recv_ctrl *ctrl = (struct vhca_recv_ctrl *)w;
	struct vhca_sge *sge = (struct vhca_sge *)(ctrl + 1);
	int i;

	if (wr->num_sge > wq->max_sge)
		return -EINVAL;
	memset(w, 0, 1U << wq->shift);
	ctrl->wr_id = use_index ? wq->pi : wr->wr_id;
	ctrl->num_sge = wr->num_sge;
	for (i = 0; i < wr->num_sge; i++) {
		sge[i].addr = wr->sg_list[i].addr;
		sge[i].length = wr->sg_list[i].length;
		sge[i].lkey = wr->sg_list[i].lkey;
	}
	if (use_index)
		wq->wrid[slot] = wr->wr_id;
	WRITE_ONCE(wq->pi, wq->pi + 1);
	return 0;
}

int vhca_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		   const struct ib_recv_wr **bad_wr)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_qp *qp = to_vqp(ibqp);
	struct vhca_wq *rq = &qp->rq;
	unsigned long flags;
	u32 start;
	int ret = 0;

	if (qp->user || ibqp->srq || READ_ONCE(qp->state) == IB_QPS_RESET) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&rq->lock, flags);
	start = rq->pi;
	for (; wr; wr = wr->next) {
		if (rq->pi - READ_ONCE(rq->ci) >= (1U << rq->log2)) {
			ret = -ENOMEM;
			break;
		}
		ret = vhca_wq_post_recv(dev, rq, wr, true);
		if (ret)
			break;
	}
	if (rq->pi != start)
		vhca_db_produce(dev, qp->uar->index,
				qp->db + offsetof(struct vhca_qp_doorbell, rq_pi),
				rq->pi);
	spin_unlock_irqrestore(&rq->lock, flags);
	if (ret)
		*bad_wr = wr;
	return ret;
}
