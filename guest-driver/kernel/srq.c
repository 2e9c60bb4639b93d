// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Shared receive queues (SR-01). A kernel SRQ is a coherent ring of receive
 * WQEs carrying the caller's wr_id (SRQ completions come back out of order,
 * so no index trick): room is counted as WQEs posted minus receive
 * completions seen by poll_cq for QPs on the SRQ (cq.c). A user SRQ's ring is
 * the provider's.
 *
 * Resize (modify_srq with IB_SRQ_MAX_WR) is for user SRQs: the provider
 * passes a new ring and posts nothing during the call; RESIZE_SRQ copies the
 * WQEs the device has not fetched into it at the same indices (vhca_abi.h
 * "Resizing"). A kernel SRQ is posted to under a spinlock from any context,
 * with nothing to hold posters off while the command sleeps: not resizable.
 */

#include <rdma/uverbs_ioctl.h>

#include "vhca.h"

static void vhca_srq_put(struct vhca_srq *srq)
{
	if (refcount_dec_and_test(&srq->ref))
		complete(&srq->freed);
}

/* EQ 0 handler (hard IRQ). */
void vhca_srq_event(struct vhca_dev *dev, u32 srqn, u8 kind)
{
	struct vhca_srq *srq;

	xa_lock(&dev->srq_xa);
	srq = xa_load(&dev->srq_xa, srqn);
	if (srq)
		refcount_inc(&srq->ref);
	xa_unlock(&dev->srq_xa);
	if (!srq)
		return;
	if (srq->ibsrq.event_handler) {
		struct ib_event ev = {
			.device = &dev->ibdev,
			.event = kind == VHCA_EQE_SRQ_LIMIT_REACHED ?
					 IB_EVENT_SRQ_LIMIT_REACHED :
					 IB_EVENT_SRQ_ERR,
			.element.srq = &srq->ibsrq,
		};

		srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
	}
	vhca_srq_put(srq);
}

static void vhca_srq_free_ring(struct vhca_dev *dev, struct vhca_srq *srq)
{
	vhca_wq_free(dev, &srq->wq);
	vhca_pbl_free(dev, &srq->pbl);
	if (srq->umem)
		ib_umem_release(srq->umem);
	srq->umem = NULL;
}

int vhca_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		    struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibsrq->device);
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct ib_srq_attr *attr = &init->attr;
	struct vhca_create_srq_in in = {};
	struct vhca_create_srq_out out;
	int slot, ret;

	if (!(dev->attr.cap_flags & VHCA_DEV_CAP_SRQ))
		return -EOPNOTSUPP;
	switch (init->srq_type) {
	case IB_SRQT_BASIC:
		break;
	case IB_SRQT_XRC:
		/* SR-02: in an XRC domain, with the CQ its receives go to. */
		if (!(dev->attr.cap_flags & VHCA_DEV_CAP_XRC))
			return -EOPNOTSUPP;
		in.srq_type = VHCA_SRQT_XRC;
		in.xrcdn = to_vxrcd(init->ext.xrc.xrcd)->xrcdn;
		in.cqn = to_vcq(init->ext.cq)->cqn;
		break;
	default:
		return -EOPNOTSUPP;
	}
	if (!attr->max_wr || attr->max_wr > dev->attr.max_srq_wr ||
	    attr->max_sge > dev->attr.max_srq_sge ||
	    attr->srq_limit > attr->max_wr)
		return -EINVAL;
	refcount_set(&srq->ref, 1);
	init_completion(&srq->freed);
	spin_lock_init(&srq->wq.lock);
	mutex_init(&srq->resize_lock);
	srq->user = !!udata;
	srq->uar = vhca_uar_of(dev, udata);

	if (udata) {
		struct vhca_ib_create_srq ucmd;

		if (udata->inlen < sizeof(ucmd))
			return -EINVAL;
		ret = ib_copy_from_udata(&ucmd, udata, sizeof(ucmd));
		if (ret)
			return ret;
		if (ucmd.wqe_shift < VHCA_RQ_MIN_WQE_SHIFT ||
		    ucmd.wqe_shift > VHCA_MAX_WQE_SHIFT ||
		    ucmd.log2_entries > 24 ||
		    (1U << ucmd.log2_entries) < attr->max_wr)
			return -EINVAL;
		srq->umem = vhca_umem_ring(dev, ucmd.buf_addr, ucmd.buf_size,
					   (size_t)1 << (ucmd.log2_entries +
							 ucmd.wqe_shift),
					   &srq->pbl);
		if (IS_ERR(srq->umem)) {
			ret = PTR_ERR(srq->umem);
			srq->umem = NULL;
			return ret;
		}
		in.ring = srq->pbl.desc;
		in.log2_entries = ucmd.log2_entries;
		in.wqe_shift = ucmd.wqe_shift;
		/* For resize: the ring's geometry (no kernel ring). */
		srq->wq.log2 = ucmd.log2_entries;
		srq->wq.shift = ucmd.wqe_shift;
	} else {
		u32 bytes = sizeof(struct vhca_recv_ctrl) +
			    max(attr->max_sge, 1U) * sizeof(struct vhca_sge);
		u32 shift = max_t(u32, VHCA_RQ_MIN_WQE_SHIFT,
				  order_base_2(bytes));

		if (shift > VHCA_MAX_WQE_SHIFT)
			return -EINVAL;
		ret = vhca_wq_alloc(dev, &srq->wq, attr->max_wr, shift,
				    &in.ring);
		if (ret)
			return ret;
		srq->wq.max_sge = ((1U << shift) -
				   sizeof(struct vhca_recv_ctrl)) /
				  sizeof(struct vhca_sge);
		in.log2_entries = srq->wq.log2;
		in.wqe_shift = shift;
	}

	slot = vhca_slot_alloc(srq->uar);
	if (slot < 0) {
		ret = -ENOMEM;
		goto err_ring;
	}
	srq->slot = slot;
	srq->db = vhca_slot_addr(dev, srq->uar->index, slot);
	writel(0, srq->db + offsetof(struct vhca_srq_doorbell, pi));

	in.pdn = to_vpd(ibsrq->pd)->pdn;
	in.max_wr = attr->max_wr;
	in.max_sge = attr->max_sge;
	in.srq_limit = attr->srq_limit;
	in.uar = srq->uar->index;
	in.db_slot = srq->slot;
	ret = vhca_cmd(dev, VHCA_CMD_CREATE_SRQ, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret)
		goto err_slot;
	srq->srqn = out.srqn;
	srq->limit = attr->srq_limit;
	/* The number XRCETH names (ibv_get_srq_num). */
	if (init->srq_type == IB_SRQT_XRC)
		ibsrq->ext.xrc.srq_num = srq->srqn;
	attr->max_wr = out.max_wr;
	attr->max_sge = out.max_sge;
	if (!udata)
		srq->wq.max_sge = min(srq->wq.max_sge, out.max_sge);

	ret = xa_insert_irq(&dev->srq_xa, srq->srqn, srq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	if (udata) {
		struct vhca_ib_create_srq_resp resp = {
			.srqn = srq->srqn,
			.uar_index = srq->uar->index,
			.db_slot = srq->slot,
		};

		ret = ib_copy_to_udata(udata, &resp,
				       min(udata->outlen, sizeof(resp)));
		if (ret)
			goto err_xa;
	}
	return 0;

err_xa:
	xa_erase_irq(&dev->srq_xa, srq->srqn);
err_destroy:
	{
		struct vhca_destroy_srq_in din = { .srqn = srq->srqn };

		vhca_cmd(dev, VHCA_CMD_DESTROY_SRQ, &din, sizeof(din), NULL,
			 0, NULL);
	}
err_slot:
	vhca_slot_free(srq->uar, srq->slot);
err_ring:
	vhca_srq_free_ring(dev, srq);
	return ret;
}

/* RESIZE_SRQ of a user SRQ onto the ring the provider passed. */
static int vhca_srq_resize(struct vhca_dev *dev, struct vhca_srq *srq,
			   u32 max_wr, struct ib_udata *udata)
{
	struct vhca_resize_srq_in in = { .srqn = srq->srqn, .max_wr = max_wr };
	struct vhca_resize_srq_out out;
	struct vhca_ib_modify_srq ucmd;
	struct vhca_pbl_buf pbl = {}, old_pbl;
	struct ib_umem *umem, *old_umem;
	int ret;

	if (!(dev->attr.cap_flags & VHCA_DEV_CAP_RESIZE_SRQ) || !srq->user)
		return -EOPNOTSUPP;
	/* A provider without resize passes no ring. */
	if (!udata || udata->inlen < sizeof(ucmd))
		return -EOPNOTSUPP;
	ret = ib_copy_from_udata(&ucmd, udata, sizeof(ucmd));
	if (ret)
		return ret;
	if (!max_wr || max_wr > dev->attr.max_srq_wr ||
	    ucmd.log2_entries > 24 || (1U << ucmd.log2_entries) < max_wr)
		return -EINVAL;
	umem = vhca_umem_ring(dev, ucmd.buf_addr, ucmd.buf_size,
			      (size_t)1 << (ucmd.log2_entries + srq->wq.shift),
			      &pbl);
	if (IS_ERR(umem))
		return PTR_ERR(umem);
	in.log2_entries = ucmd.log2_entries;
	in.ring = pbl.desc;
	ret = vhca_cmd(dev, VHCA_CMD_RESIZE_SRQ, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret) {
		vhca_pbl_free(dev, &pbl);
		ib_umem_release(umem);
		return ret;
	}
	old_pbl = srq->pbl;
	old_umem = srq->umem;
	srq->pbl = pbl;
	srq->umem = umem;
	srq->wq.log2 = ucmd.log2_entries;
	vhca_pbl_free(dev, &old_pbl);
	ib_umem_release(old_umem);
	return 0;
}

int vhca_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		    enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibsrq->device);
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct vhca_modify_srq_in in = { .srqn = srq->srqn };
	int ret = 0;

	if (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT))
		return -EINVAL;
	mutex_lock(&srq->resize_lock);
	if (mask & IB_SRQ_MAX_WR) {
		/* The limit must fit the new size; checked before anything. */
		if ((mask & IB_SRQ_LIMIT) && attr->srq_limit > attr->max_wr) {
			ret = -EINVAL;
			goto out;
		}
		ret = vhca_srq_resize(dev, srq, attr->max_wr, udata);
		if (ret)
			goto out;
	}
	if (mask & IB_SRQ_LIMIT) {
		in.attr_mask = VHCA_SRQ_ATTR_LIMIT;
		in.srq_limit = attr->srq_limit;
		ret = vhca_cmd(dev, VHCA_CMD_MODIFY_SRQ, &in, sizeof(in), NULL,
			       0, NULL);
		if (!ret)
			srq->limit = attr->srq_limit;
	}
out:
	mutex_unlock(&srq->resize_lock);
	return ret;
}

int vhca_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct vhca_dev *dev = to_vdev(ibsrq->device);
	struct vhca_query_srq_in in = { .srqn = to_vsrq(ibsrq)->srqn };
	struct vhca_query_srq_out out;
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_QUERY_SRQ, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret)
		return ret;
	attr->max_wr = out.max_wr;
	attr->max_sge = out.max_sge;
	attr->srq_limit = out.srq_limit;
	return 0;
}

int vhca_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibsrq->device);
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct vhca_destroy_srq_in in = { .srqn = srq->srqn };
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_DESTROY_SRQ, &in, sizeof(in), NULL, 0,
		       NULL);
	if (ret == -EBUSY)
		return ret;	/* a QP still uses it */
	if (ret)
		dev_warn(&dev->pdev->dev, "DESTROY_SRQ %u: %d\n", srq->srqn,
			 ret);
	xa_erase_irq(&dev->srq_xa, srq->srqn);
	vhca_srq_put(srq);
	wait_for_completion(&srq->freed);
	vhca_slot_free(srq->uar, srq->slot);
	vhca_srq_free_ring(dev, srq);
	return 0;
}

int vhca_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
		       const struct ib_recv_wr **bad_wr)
{
	struct vhca_dev *dev = to_vdev(ibsrq->device);
	struct vhca_srq *srq = to_vsrq(ibsrq);
	struct vhca_wq *wq = &srq->wq;
	unsigned long flags;
	u32 start;
	int ret = 0;

	if (srq->user) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&wq->lock, flags);
	start = wq->pi;
	for (; wr; wr = wr->next) {
		if (wq->pi - (u32)atomic_read(&wq->done) >= (1U << wq->log2)) {
			ret = -ENOMEM;
			break;
		}
		ret = vhca_wq_post_recv(dev, wq, wr, false);
		if (ret)
			break;
	}
	if (wq->pi != start)
		vhca_db_produce(dev, srq->uar->index,
				srq->db + offsetof(struct vhca_srq_doorbell, pi),
				wq->pi);
	spin_unlock_irqrestore(&wq->lock, flags);
	if (ret)
		*bad_wr = wr;
	return ret;
}
