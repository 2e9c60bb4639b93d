// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Subnet management on the InfiniBand port (AD-09, issue 26 item 2): the
 * device's Subnet Management Agent (SMA) behind the MAD_IFC command, as
 * mlx4/mlx5 have theirs in firmware.
 *
 * At probe one harmless SubnGet(NodeInfo) through MAD_IFC tells whether the
 * device has an SMA (vhca_abi.h adds no capability bit for it): any answer
 * but a failed command means yes. Only then does the port claim
 * RDMA_CORE_CAP_IB_SMI and create_qp accept IB_QPT_SMI, because ib_mad
 * gives up the whole port, QP1 included, when a port that claims SMI
 * cannot create QP0 (ib_mad_port_open). A device without one (MAD_IFC
 * answers NOT_SUPPORTED) keeps the port as before: GSI only, no QP0.
 */

#include <rdma/ib_mad.h>
#include <rdma/ib_smi.h>

#include "vhca.h"

/*
 * One MAD_IFC for port 1: `mad` (256 bytes, network order) from `slid`.
 * Returns 0 with *out filled, or the errno of the command; *status gets the
 * device's raw status.
 */
static int vhca_mad_ifc(struct vhca_dev *dev, u16 slid, const void *mad,
			struct vhca_mad_ifc_out *out, u8 *status)
{
	struct vhca_mad_ifc_in *in;
	int ret;

	BUILD_BUG_ON(sizeof(in->mad) != sizeof(struct ib_mad));
	BUILD_BUG_ON(sizeof(out->mad) != sizeof(struct ib_mad));
	in = kzalloc(sizeof(*in), GFP_KERNEL);
	if (!in) {
		*status = 0xff;
		return -ENOMEM;
	}
	in->port = VHCA_PORT;
	in->slid = slid;
	memcpy(in->mad, mad, sizeof(in->mad));
	ret = vhca_cmd(dev, VHCA_CMD_MAD_IFC, in, sizeof(*in), out,
		       sizeof(*out), status);
	kfree(in);
	return ret;
}

/*
 * Does the device have an SMA? Asked once, before ib_register_device (which
 * reads the port's capabilities through get_port_immutable). A RoCE port
 * has no subnet management (IBA A17: no QP0, no SMPs).
 */
void vhca_sma_probe(struct vhca_dev *dev)
{
	struct vhca_mad_ifc_out *out;
	struct ib_smp *smp;
	u8 status = 0xff;
	int ret;

	dev->sma = false;
	if (dev->roce)
		return;
	smp = kzalloc(sizeof(struct ib_mad), GFP_KERNEL);
	out = kzalloc(sizeof(*out), GFP_KERNEL);
	if (!smp || !out) {
		ret = -ENOMEM;
		goto out;
	}
	/*
	 * SubnGet(NodeInfo), LID-routed, from the permissive LID as ib_core's
	 * own SMI would hand it over: it changes nothing in the SMA, and an
	 * SMA answers it (or, at M_Key protection level 3, drops it: also a
	 * successful command, IBA 14.2.4.1).
	 */
	smp->base_version = IB_MGMT_BASE_VERSION;
	smp->mgmt_class = IB_MGMT_CLASS_SUBN_LID_ROUTED;
	smp->class_version = 1;
	smp->method = IB_MGMT_METHOD_GET;
	smp->attr_id = IB_SMP_ATTR_NODE_INFO;
	smp->tid = cpu_to_be64(1);
	ret = vhca_mad_ifc(dev, be16_to_cpu(IB_LID_PERMISSIVE), smp, out,
			   &status);
	if (!ret)
		dev->sma = true;
out:
	if (dev->sma)
		dev_dbg(&dev->pdev->dev, "subnet management agent: yes\n");
	else if (status == VHCA_STATUS_NOT_SUPPORTED)
		dev_info(&dev->pdev->dev,
			 "the device has no subnet management agent (MAD_IFC not supported): no QP0, the port is not SM-managed\n");
	else
		dev_warn(&dev->pdev->dev,
			 "MAD_IFC probe failed (%d, status %u): no QP0\n", ret,
			 status);
	kfree(out);
	kfree(smp);
}
