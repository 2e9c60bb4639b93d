// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * XRC (SR-02): XRC domains and XRC_TGT QPs. An XRC SRQ is an SRQ with a
 * domain and a CQ (srq.c); an XRC_INI QP is a user QP without an RQ whose
 * send WQEs carry struct vhca_xrc_seg (qp.c, the provider). An XRC_TGT QP
 * has no rings, doorbell slot, PD or CQ: each request names the XRC SRQ of
 * its domain it lands in (PV-08), and its completions go to that SRQ's CQ,
 * with the SRQ's number in the CQE (vhca_abi.h struct vhca_cqe srqn). ib_core
 * creates it as a kernel QP even for user space, and modifies it through
 * ib_modify_qp; nothing of it is mapped.
 */

#include "vhca.h"

int vhca_alloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibxrcd->device);
	struct vhca_alloc_xrcd_out out;
	int ret;

	if (!(dev->attr.cap_flags & VHCA_DEV_CAP_XRC))
		return -EOPNOTSUPP;
	ret = vhca_cmd(dev, VHCA_CMD_ALLOC_XRCD, NULL, 0, &out, sizeof(out),
		       NULL);
	if (ret)
		return ret;
	to_vxrcd(ibxrcd)->xrcdn = out.xrcdn;
	return 0;
}

int vhca_dealloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibxrcd->device);
	struct vhca_dealloc_xrcd_in in = { .xrcdn = to_vxrcd(ibxrcd)->xrcdn };

	return vhca_cmd(dev, VHCA_CMD_DEALLOC_XRCD, &in, sizeof(in), NULL, 0,
			NULL);
}

/* CREATE_QP of an XRC_TGT QP: only its domain and port. */
int vhca_create_xrc_tgt(struct vhca_dev *dev, struct vhca_qp *qp,
			struct ib_qp_init_attr *init)
{
	struct vhca_create_qp_in *in;
	struct vhca_create_qp_out out;
	int ret;

	if (!init->xrcd)
		return -EINVAL;
	in = kzalloc(sizeof(*in), GFP_KERNEL);
	if (!in)
		return -ENOMEM;
	refcount_set(&qp->ref, 1);
	init_completion(&qp->freed);
	spin_lock_init(&qp->sq.lock);
	spin_lock_init(&qp->rq.lock);
	qp->user = false;
	qp->state = IB_QPS_RESET;
	qp->port = init->port_num ? init->port_num : VHCA_PORT;
	qp->uar = NULL;

	in->qp_type = VHCA_QPT_XRC_TGT;
	in->port = qp->port;
	in->pdn = VHCA_NONE;
	in->send_cqn = VHCA_NONE;
	in->recv_cqn = VHCA_NONE;
	in->srqn = VHCA_NONE;
	in->xrcdn = to_vxrcd(init->xrcd)->xrcdn;
	ret = vhca_cmd(dev, VHCA_CMD_CREATE_QP, in, sizeof(*in), &out,
		       sizeof(out), NULL);
	kfree(in);
	if (ret)
		return ret;
	qp->qpn = out.qpn;
	qp->ibqp.qp_num = out.qpn;
	memset(&init->cap, 0, sizeof(init->cap));
	ret = xa_insert_irq(&dev->qp_xa, qp->qpn, qp, GFP_KERNEL);
	if (ret) {
		struct vhca_destroy_qp_in din = { .qpn = qp->qpn };

		vhca_cmd(dev, VHCA_CMD_DESTROY_QP, &din, sizeof(din), NULL, 0,
			 NULL);
	}
	return ret;
}
