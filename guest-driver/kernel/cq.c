// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Completion queues (CQ-01..03). A kernel CQ's ring is coherent memory; a user
 * CQ's ring is the provider's buffer, pinned (ib_umem) and described by a
 * page list. Each CQ owns a doorbell slot (ci, arm) in its UAR page.
 *
 * poll_cq (kernel CQs) reads CQEs by the owner-bit convention, turns the
 * device's numbers into ib_core's (they differ for wc_flags) and gives the
 * entries back through ci. Kernel send and receive WQEs carry their ring index
 * as wr_id (qp.c), so a CQE also says how far its queue has been retired,
 * unsignaled WQEs included; the caller's wr_id comes from the QP's shadow.
 *
 * resize_cq (CQ-04): the device copies the CQEs not consumed into the new ring
 * at the same free-running indices and stamps the rest (vhca_abi.h
 * "Resizing"), so the driver only swaps rings and keeps ci. A kernel poller
 * running during RESIZE_CQ is harmless: it reads the old ring, which holds
 * the same entries at the same indices, and the device writes nothing more
 * there; it then continues in the new ring from its ci.
 */

#include <linux/etherdevice.h>
#include <rdma/uverbs_ioctl.h>

#include "vhca.h"

static struct vhca_cqe *vhca_cqe_peek(struct vhca_cq *cq, u32 index)
{
	struct vhca_cqe *cqe = (struct vhca_cqe *)cq->ring.buf +
			       (index & ((1U << cq->log2) - 1));
	u8 want = ((index >> cq->log2) & 1) ? 0 : VHCA_OWNER_BIT;

	if ((READ_ONCE(cqe->owner) & VHCA_OWNER_BIT) != want)
		return NULL;
	dma_rmb();
	return cqe;
}

static void vhca_cq_put(struct vhca_cq *cq)
{
	if (refcount_dec_and_test(&cq->ref))
		complete(&cq->freed);
}

/* EQ handlers (hard IRQ): a COMPLETION or CQ_ERR event for CQN `cqn`. */
void vhca_cq_event(struct vhca_dev *dev, u32 cqn, u8 kind)
{
	struct vhca_cq *cq;

	xa_lock(&dev->cq_xa);
	cq = xa_load(&dev->cq_xa, cqn);
	if (cq)
		refcount_inc(&cq->ref);
	xa_unlock(&dev->cq_xa);
	if (!cq)
		return;

	if (kind == VHCA_EQE_COMPLETION) {
		if (cq->ibcq.comp_handler)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	} else if (cq->ibcq.event_handler) {
		struct ib_event ev = {
			.device = &dev->ibdev,
			.event = IB_EVENT_CQ_ERR,
			.element.cq = &cq->ibcq,
		};

		cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
	}
	vhca_cq_put(cq);
}

int vhca_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		   vhca_cq_attrs *attrs)
{
	struct ib_udata *udata = vhca_cq_udata(attrs);
	struct vhca_dev *dev = to_vdev(ibcq->device);
	struct vhca_cq *cq = to_vcq(ibcq);
	struct vhca_create_cq_in in = {};
	struct vhca_create_cq_out out;
	u32 log2;
	int slot, ret;

	if (attr->flags)
		return -EOPNOTSUPP;
	if (attr->cqe < 1 || attr->cqe > dev->attr.max_cqe ||
	    attr->comp_vector >= dev->ibdev.num_comp_vectors)
		return -EINVAL;
	spin_lock_init(&cq->lock);
	mutex_init(&cq->resize_lock);
	refcount_set(&cq->ref, 1);
	init_completion(&cq->freed);
	cq->uar = vhca_uar_of(dev, udata);

	if (udata) {
		struct vhca_ib_create_cq ucmd;

		if (udata->inlen < sizeof(ucmd))
			return -EINVAL;
		ret = ib_copy_from_udata(&ucmd, udata, sizeof(ucmd));
		if (ret)
			return ret;
		log2 = ucmd.log2_entries;
		if (log2 > 24 || (1U << log2) < attr->cqe ||
		    (1U << log2) > dev->attr.max_cqe)
			return -EINVAL;
		cq->umem = vhca_umem_ring(dev, ucmd.buf_addr, ucmd.buf_size,
					  (size_t)VHCA_CQE_SIZE << log2,
					  &cq->pbl);
		if (IS_ERR(cq->umem)) {
			ret = PTR_ERR(cq->umem);
			cq->umem = NULL;
			return ret;
		}
		in.ring = cq->pbl.desc;
	} else {
		log2 = order_base_2(attr->cqe);
		if ((1U << log2) > dev->attr.max_cqe)
			return -EINVAL;
		if ((1U << VHCA_KCQ_MIN_LOG2) <= dev->attr.max_cqe)
			log2 = max_t(u32, log2, VHCA_KCQ_MIN_LOG2);
		ret = vhca_kring_alloc(dev, &cq->ring,
				       (size_t)VHCA_CQE_SIZE << log2, &in.ring);
		if (ret)
			return ret;
	}
	cq->log2 = log2;

	slot = vhca_slot_alloc(cq->uar);
	if (slot < 0) {
		ret = -ENOMEM;
		goto err_ring;
	}
	cq->slot = slot;
	cq->db = vhca_slot_addr(dev, cq->uar->index, slot);
	/* A fresh slot: ci 0, arm word 0 (a previous owner may have left any). */
	writel(0, cq->db + offsetof(struct vhca_cq_doorbell, ci));
	writel(0, cq->db + offsetof(struct vhca_cq_doorbell, arm));

	in.eqn = vhca_comp_eqn(dev, attr->comp_vector);
	in.uar = cq->uar->index;
	in.db_slot = slot;
	in.log2_entries = log2;
	ret = vhca_cmd(dev, VHCA_CMD_CREATE_CQ, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret)
		goto err_slot;
	cq->cqn = out.cqn;
	ibcq->cqe = out.entries;

	ret = xa_insert_irq(&dev->cq_xa, cq->cqn, cq, GFP_KERNEL);
	if (ret)
		goto err_destroy;

	if (udata) {
		struct vhca_ib_create_cq_resp resp = {
			.cqn = cq->cqn,
			.entries = out.entries,
			.uar_index = cq->uar->index,
			.db_slot = cq->slot,
		};

		ret = ib_copy_to_udata(udata, &resp,
				       min(udata->outlen, sizeof(resp)));
		if (ret)
			goto err_xa;
	}
	return 0;

err_xa:
	xa_erase_irq(&dev->cq_xa, cq->cqn);
err_destroy:
	{
		struct vhca_destroy_cq_in din = { .cqn = cq->cqn };

		vhca_cmd(dev, VHCA_CMD_DESTROY_CQ, &din, sizeof(din), NULL, 0,
			 NULL);
	}
err_slot:
	vhca_slot_free(cq->uar, cq->slot);
err_ring:
	vhca_kring_free(dev, &cq->ring);
	vhca_pbl_free(dev, &cq->pbl);
	if (cq->umem)
		ib_umem_release(cq->umem);
	return ret;
}

int vhca_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibcq->device);
	struct vhca_cq *cq = to_vcq(ibcq);
	struct vhca_destroy_cq_in in = { .cqn = cq->cqn };
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_DESTROY_CQ, &in, sizeof(in), NULL, 0,
		       NULL);
	if (ret == -EBUSY)
		return ret;	/* a QP still uses it */
	if (ret)
		dev_warn(&dev->pdev->dev, "DESTROY_CQ %u: %d\n", cq->cqn, ret);

	xa_erase_irq(&dev->cq_xa, cq->cqn);
	vhca_cq_put(cq);
	wait_for_completion(&cq->freed);

	vhca_slot_free(cq->uar, cq->slot);
	vhca_kring_free(dev, &cq->ring);
	vhca_pbl_free(dev, &cq->pbl);
	if (cq->umem)
		ib_umem_release(cq->umem);
	return 0;
}

int vhca_resize_cq(struct ib_cq *ibcq, vhca_cqe_count entries,
		   struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibcq->device);
	struct vhca_cq *cq = to_vcq(ibcq);
	struct vhca_resize_cq_in in = { .cqn = cq->cqn };
	struct vhca_resize_cq_out out;
	struct vhca_kring ring = {}, old_ring;
	struct vhca_pbl_buf pbl = {}, old_pbl;
	struct ib_umem *umem = NULL, *old_umem;
	unsigned long flags;
	u32 log2;
	int ret;

	if (!(dev->attr.cap_flags & VHCA_DEV_CAP_RESIZE_CQ))
		return -EOPNOTSUPP;
	if (entries < 1 || entries > dev->attr.max_cqe)
		return -EINVAL;
	mutex_lock(&cq->resize_lock);
	if (cq->umem) {
		struct vhca_ib_resize_cq ucmd;

		ret = -EOPNOTSUPP;	/* a provider without resize */
		if (!udata || udata->inlen < sizeof(ucmd))
			goto out;
		ret = ib_copy_from_udata(&ucmd, udata, sizeof(ucmd));
		if (ret)
			goto out;
		log2 = ucmd.log2_entries;
		ret = -EINVAL;
		if (log2 > 24 || (1U << log2) < entries ||
		    (1U << log2) > dev->attr.max_cqe)
			goto out;
		umem = vhca_umem_ring(dev, ucmd.buf_addr, ucmd.buf_size,
				      (size_t)VHCA_CQE_SIZE << log2, &pbl);
		if (IS_ERR(umem)) {
			ret = PTR_ERR(umem);
			goto out;
		}
		in.ring = pbl.desc;
	} else {
		log2 = order_base_2(entries);
		if ((1U << VHCA_KCQ_MIN_LOG2) <= dev->attr.max_cqe)
			log2 = max_t(u32, log2, VHCA_KCQ_MIN_LOG2);
		ret = vhca_kring_alloc(dev, &ring, (size_t)VHCA_CQE_SIZE << log2,
				       &in.ring);
		if (ret)
			goto out;
	}
	in.log2_entries = log2;
	/*
	 * The device reads ci from the slot: every poll stored it, and one
	 * running now only moves it forward over entries the device copied.
	 */
	ret = vhca_cmd(dev, VHCA_CMD_RESIZE_CQ, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret) {
		vhca_kring_free(dev, &ring);
		vhca_pbl_free(dev, &pbl);
		if (umem)
			ib_umem_release(umem);
		goto out;
	}

	spin_lock_irqsave(&cq->lock, flags);
	old_ring = cq->ring;
	old_pbl = cq->pbl;
	old_umem = cq->umem;
	cq->ring = ring;
	cq->pbl = pbl;
	cq->umem = umem;
	cq->log2 = log2;
	ibcq->cqe = out.entries;
	spin_unlock_irqrestore(&cq->lock, flags);

	vhca_kring_free(dev, &old_ring);
	vhca_pbl_free(dev, &old_pbl);
	if (old_umem)
		ib_umem_release(old_umem);
out:
	mutex_unlock(&cq->resize_lock);
	return ret;
}

static enum ib_wc_opcode vhca_wc_opcode(u8 op)
{
	switch (op) {
	case VHCA_WC_OP_SEND:			return IB_WC_SEND;
	case VHCA_WC_OP_RDMA_WRITE:		return IB_WC_RDMA_WRITE;
	case VHCA_WC_OP_RDMA_READ:		return IB_WC_RDMA_READ;
	case VHCA_WC_OP_COMP_SWAP:		return IB_WC_COMP_SWAP;
	case VHCA_WC_OP_FETCH_ADD:		return IB_WC_FETCH_ADD;
	case VHCA_WC_OP_BIND_MW:		return IB_WC_BIND_MW;
	case VHCA_WC_OP_LOCAL_INV:		return IB_WC_LOCAL_INV;
	case VHCA_WC_OP_REG_MR:			return IB_WC_REG_MR;
	case VHCA_WC_OP_RECV:			return IB_WC_RECV;
	case VHCA_WC_OP_RECV_RDMA_WITH_IMM:	return IB_WC_RECV_RDMA_WITH_IMM;
	default:				return IB_WC_SEND;
	}
}

static int vhca_wc_flags(u32 f)
{
	/* ibverbs numbering in the CQE; ib_core's differs (WITH_INVALIDATE). */
	return ((f & VHCA_WC_FLAG_GRH) ? IB_WC_GRH : 0) |
	       ((f & VHCA_WC_FLAG_WITH_IMM) ? IB_WC_WITH_IMM : 0) |
	       ((f & VHCA_WC_FLAG_WITH_INV) ? IB_WC_WITH_INVALIDATE : 0) |
	       ((f & VHCA_WC_FLAG_WITH_SMAC) ? IB_WC_WITH_SMAC : 0) |
	       ((f & VHCA_WC_FLAG_WITH_NETWORK_HDR_TYPE) ?
			IB_WC_WITH_NETWORK_HDR_TYPE : 0);
}

/*
 * What the 40 bytes before a RoCE UD payload hold (ib_init_ah_attr_from_wc
 * reads the GIDs from there); an unknown value from the device is dropped
 * rather than passed on as a header type it is not.
 */
static bool vhca_network_hdr(u8 t, u8 *out)
{
	switch (t) {
	case VHCA_NETWORK_HDR_IB:	*out = RDMA_NETWORK_IB; return true;
	case VHCA_NETWORK_HDR_IPV4:	*out = RDMA_NETWORK_IPV4; return true;
	case VHCA_NETWORK_HDR_IPV6:	*out = RDMA_NETWORK_IPV6; return true;
	default:			return false;
	}
}

/* Retires a kernel SQ or RQ up to the WQE whose index the CQE carries. */
static u64 vhca_wq_retire(struct vhca_wq *wq, u64 cqe_wr_id)
{
	u32 idx = (u32)cqe_wr_id;
	u32 ci = wq->ci;

	if ((u32)(idx - ci) >= (u32)(READ_ONCE(wq->pi) - ci)) {
		/* Not an outstanding WQE: a device bug; report it as is. */
		pr_warn_ratelimited("vhca: CQE for WQE index %u outside [%u, %u)\n",
				    idx, ci, READ_ONCE(wq->pi));
		return cqe_wr_id;
	}
	WRITE_ONCE(wq->ci, idx + 1);
	return wq->wrid[idx & ((1U << wq->log2) - 1)];
}

/* One CQE into one ib_wc; false if its QP is gone (the CQE is dropped). */
static bool vhca_cqe_to_wc(struct vhca_dev *dev, const struct vhca_cqe *cqe,
			   struct ib_wc *wc)
{
	struct vhca_qp *qp;
	bool recv = cqe->opcode & VHCA_WC_OP_RECV;

	/* destroy_qp erases the QP, then takes this CQ's lock: it stays. */
	qp = xa_load(&dev->qp_xa, cqe->qp_num);
	if (!qp || qp->user)
		return false;

	memset(wc, 0, sizeof(*wc));
	if (recv && qp->ibqp.srq) {
		wc->wr_id = cqe->wr_id;
		atomic_inc(&to_vsrq(qp->ibqp.srq)->wq.done);
	} else {
		wc->wr_id = vhca_wq_retire(recv ? &qp->rq : &qp->sq,
					   cqe->wr_id);
	}
	wc->status = cqe->status <= IB_WC_GENERAL_ERR ?
			     (enum ib_wc_status)cqe->status : IB_WC_GENERAL_ERR;
	wc->opcode = vhca_wc_opcode(cqe->opcode);
	wc->vendor_err = cqe->vendor_err;
	wc->byte_len = cqe->byte_len;
	wc->qp = &qp->ibqp;
	wc->wc_flags = vhca_wc_flags(cqe->wc_flags);
	if (cqe->wc_flags & VHCA_WC_FLAG_WITH_IMM)
		wc->ex.imm_data = cpu_to_be32(cqe->imm_or_inv);
	else if (cqe->wc_flags & VHCA_WC_FLAG_WITH_INV)
		wc->ex.invalidate_rkey = cqe->imm_or_inv;
	wc->src_qp = cqe->src_qp;
	wc->slid = cqe->slid;
	wc->pkey_index = cqe->pkey_index;
	wc->sl = cqe->sl;
	wc->dlid_path_bits = cqe->dlid_path_bits;
	wc->port_num = VHCA_PORT;
	/* RoCE receives (A17.4.5.2): who sent it, and over which IP version. */
	if (wc->wc_flags & IB_WC_WITH_SMAC)
		ether_addr_copy(wc->smac, cqe->smac);
	if ((wc->wc_flags & IB_WC_WITH_NETWORK_HDR_TYPE) &&
	    !vhca_network_hdr(cqe->network_hdr_type, &wc->network_hdr_type))
		wc->wc_flags &= ~IB_WC_WITH_NETWORK_HDR_TYPE;
	return true;
}

int vhca_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc)
{
	struct vhca_dev *dev = to_vdev(ibcq->device);
	struct vhca_cq *cq = to_vcq(ibcq);
	struct vhca_cqe *cqe;
	unsigned long flags;
	u32 start;
	int n = 0;

	if (cq->umem)
		return -EINVAL;	/* user CQs are polled by the provider */
	spin_lock_irqsave(&cq->lock, flags);
	start = cq->ci;
	while (n < num && (cqe = vhca_cqe_peek(cq, cq->ci))) {
		cq->ci++;
		if (vhca_cqe_to_wc(dev, cqe, &wc[n]))
			n++;
	}
	/* Give the entries back: the device never writes past ci + size. */
	if (cq->ci != start)
		writel(cq->ci, cq->db + offsetof(struct vhca_cq_doorbell, ci));
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

int vhca_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct vhca_cq *cq = to_vcq(ibcq);
	unsigned long irqflags;
	u32 word;
	int ret = 0;

	spin_lock_irqsave(&cq->lock, irqflags);
	/* A changed word is one request (CQ-02); solicited narrows it. */
	cq->arm_sn = (cq->arm_sn + 1) & VHCA_CQ_ARM_SN_MASK;
	word = cq->arm_sn;
	if ((flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED)
		word |= VHCA_CQ_ARM_SOLICITED;
	writel(word, cq->db + offsetof(struct vhca_cq_doorbell, arm));
	/* The device reads the arm word when it takes the slot's summary bit. */
	vhca_db_flag(to_vdev(ibcq->device), cq->uar->index, cq->slot);
	if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && cq->ring.buf) {
		mb();	/* the arm store before the look */
		ret = vhca_cqe_peek(cq, cq->ci) ? 1 : 0;
	}
	spin_unlock_irqrestore(&cq->lock, irqflags);
	return ret;
}

/*
 * destroy_qp of a kernel QP: its CQEs not yet polled lose their QP number,
 * so that a new QP given the same number never sees them (mlx4's cq_clean).
 * A receive that consumed an SRQ WQE still counts as done for the SRQ.
 */
void vhca_cq_clean(struct vhca_cq *cq, u32 qpn, struct vhca_srq *srq)
{
	struct vhca_cqe *cqe;
	unsigned long flags;
	u32 i;

	spin_lock_irqsave(&cq->lock, flags);
	if (cq->ring.buf) {
		for (i = cq->ci; i - cq->ci < (1U << cq->log2) &&
				 (cqe = vhca_cqe_peek(cq, i)); i++) {
			if (cqe->qp_num != qpn)
				continue;
			if (srq && (cqe->opcode & VHCA_WC_OP_RECV))
				atomic_inc(&srq->wq.done);
			cqe->qp_num = VHCA_NONE;
		}
	}
	spin_unlock_irqrestore(&cq->lock, flags);
}
