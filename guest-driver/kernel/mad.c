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
 * A SubnGet of `attr`, LID-routed, from the permissive LID as ib_core's own
 * SMI would hand it over: it changes nothing in the SMA. *out holds the
 * command's output; *status the device's raw status.
 */
static int vhca_sma_get(struct vhca_dev *dev, __be16 attr, u64 tid,
			struct vhca_mad_ifc_out *out, u8 *status)
{
	struct ib_smp *smp;
	int ret;

	*status = 0xff;
	smp = kzalloc(sizeof(struct ib_mad), GFP_KERNEL);
	if (!smp)
		return -ENOMEM;
	smp->base_version = IB_MGMT_BASE_VERSION;
	smp->mgmt_class = IB_MGMT_CLASS_SUBN_LID_ROUTED;
	smp->class_version = 1;
	smp->method = IB_MGMT_METHOD_GET;
	smp->attr_id = attr;
	smp->tid = cpu_to_be64(tid);
	ret = vhca_mad_ifc(dev, be16_to_cpu(IB_LID_PERMISSIVE), smp, out,
			   status);
	kfree(smp);
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
	u8 status = 0xff;
	int ret;

	dev->sma = false;
	if (dev->roce)
		return;
	out = kzalloc(sizeof(*out), GFP_KERNEL);
	if (!out) {
		ret = -ENOMEM;
		goto out;
	}
	/*
	 * SubnGet(NodeInfo): an SMA answers it (or, at M_Key protection level
	 * 3, drops it: also a successful command, IBA 14.2.4.1).
	 */
	ret = vhca_sma_get(dev, IB_SMP_ATTR_NODE_INFO, 1, out, &status);
	if (!ret)
		dev->sma = true;
out:
	if (dev->sma)
		dev_dbg(&dev->pdev->dev, "subnet management agent: yes\n");
	else if (status == VHCA_STATUS_NOT_SUPPORTED)
		dev_info(&dev->pdev->dev,
			 "the device has no subnet management agent (MAD_IFC not supported): no QP0, ib_mad on QP1 only\n");
	else
		dev_warn(&dev->pdev->dev,
			 "MAD_IFC probe failed (%d, status %u): no QP0\n", ret,
			 status);
	kfree(out);
}

/*
 * An SMP for the SMA (the mlx4/mlx5 rule): a request, SubnGet, SubnSet or
 * SubnTrapRepress, of the LID-routed or directed-route class. Responses and
 * traps (an SM on this node hears them on QP0) go on to the MAD layer, and
 * so does SMInfo, which is the SM's attribute, not the SMA's (IBA 14.4.1;
 * mlx4's ib_process_mad leaves it out alike). An SMP the MAD layer got on
 * a QP other than 0 is not the SMA's either (ib_mad's validate_mad drops
 * those already).
 */
static bool vhca_smp_for_sma(const struct ib_wc *in_wc,
			     const struct ib_mad *in)
{
	const struct ib_mad_hdr *h = &in->mad_hdr;

	if (h->method != IB_MGMT_METHOD_GET && h->method != IB_MGMT_METHOD_SET &&
	    h->method != IB_MGMT_METHOD_TRAP_REPRESS)
		return false;
	if (h->attr_id == IB_SMP_ATTR_SM_INFO)
		return false;
	return !in_wc || !in_wc->qp || in_wc->qp->qp_num == 0;
}

/*
 * An SMP for the port's SMA, through MAD_IFC. ib_mad calls process_mad from
 * its completion work (the CQ is polled on a workqueue) and, for an SMP
 * this node's SMI sends to itself, from ib_post_send_mad in the sender's
 * process context (handle_outgoing_dr_smp): both may sleep, as vhca_cmd
 * does (mlx4 and mlx5 sleep on their MAD_IFC command there too).
 */
static int vhca_sma_process_mad(struct vhca_dev *dev,
				const struct ib_wc *in_wc,
				const struct ib_mad *in, struct ib_mad *out,
				size_t *out_mad_size)
{
	struct vhca_mad_ifc_out *o;
	/* The requester's LID; permissive when ib_core's own SMI hands it over. */
	u16 slid = in_wc ? ib_lid_cpu16(in_wc->slid) :
			   be16_to_cpu(IB_LID_PERMISSIVE);
	u8 status, flags;
	int ret;

	might_sleep();
	o = kmalloc(sizeof(*o), GFP_KERNEL);
	if (!o)
		return IB_MAD_RESULT_FAILURE;
	ret = vhca_mad_ifc(dev, slid, in, o, &status);
	if (ret) {
		kfree(o);
		/* A device that stopped answering MAD_IFC: as with no SMA. */
		if (status == VHCA_STATUS_NOT_SUPPORTED) {
			if (!READ_ONCE(dev->sma_gone_logged)) {
				WRITE_ONCE(dev->sma_gone_logged, true);
				dev_warn(&dev->pdev->dev,
					 "MAD_IFC not supported any more: SMPs go to the MAD layer unanswered\n");
			}
			return IB_MAD_RESULT_SUCCESS;
		}
		dev_dbg_ratelimited(&dev->pdev->dev,
				    "MAD_IFC (class %#x method %#x attr %#x): %d status %u\n",
				    in->mad_hdr.mgmt_class, in->mad_hdr.method,
				    be16_to_cpu(in->mad_hdr.attr_id), ret, status);
		/* No answer, as an SMA that cannot be reached (mlx4 alike). */
		return IB_MAD_RESULT_FAILURE;
	}
	flags = o->flags;
	if (flags & VHCA_MAD_IFC_F_REPLY) {
		if (*out_mad_size < sizeof(o->mad)) {
			kfree(o);
			return IB_MAD_RESULT_FAILURE;
		}
		memcpy(out, o->mad, sizeof(o->mad));
		kfree(o);
		/*
		 * A directed-route response travels the return path: the D bit
		 * (IBA 14.2.2.1, ib_smi.h IB_SMP_DIRECTION) is set, by the SMA
		 * or here, as mlx4 sets it on its firmware's responses; ib_mad's
		 * SMI then walks the hops back (smi_handle_dr_smp_send).
		 */
		if (in->mad_hdr.mgmt_class == IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE)
			out->mad_hdr.status |= IB_SMP_DIRECTION;
		return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
	}
	kfree(o);
	if (flags & VHCA_MAD_IFC_F_CONSUMED)
		return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_CONSUMED;
	return IB_MAD_RESULT_SUCCESS;
}

/*
 * ib_core's process_mad: subnet-management requests to the device's SMA
 * (above), baseboard-management requests to its BMA, congestion-control
 * requests to its CC agent, everything else to the
 * PMA (counters.c), which answers PerfMgt Gets and leaves the rest to the
 * MAD layer.
 */
int vhca_process_mad(struct ib_device *ibdev, int mad_flags, u32 port,
		     const struct ib_wc *in_wc, const struct ib_grh *in_grh,
		     const struct ib_mad *in, struct ib_mad *out,
		     size_t *out_mad_size, u16 *out_mad_pkey_index)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	u8 class = in->mad_hdr.mgmt_class;

	if (class == IB_MGMT_CLASS_SUBN_LID_ROUTED ||
	    class == IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE) {
		if (!dev->sma || port != VHCA_PORT ||
		    !vhca_smp_for_sma(in_wc, in))
			return IB_MAD_RESULT_SUCCESS;
		return vhca_sma_process_mad(dev, in_wc, in, out, out_mad_size);
	}
	/*
	 * Baseboard management requests (class 0x05, on QP1) to the device's
	 * BMA, which checks the B_Key (AD-12) and answers BKeyInfo through the
	 * same MAD_IFC command; responses (ib_response_mad: the response bit,
	 * or a BMSend with attribute modifier bit 0) go on to the MAD layer.
	 */
	if (class == IB_MGMT_CLASS_BM) {
		if (!dev->sma || port != VHCA_PORT || ib_response_mad(&in->mad_hdr))
			return IB_MAD_RESULT_SUCCESS;
		return vhca_sma_process_mad(dev, in_wc, in, out, out_mad_size);
	}
	/*
	 * Congestion control requests (class 0x21, IBA Annex A10.4: what
	 * OpenSM's CC manager Sets) to the device's CC agent, which checks the
	 * CC_Key the same way; responses go on to the MAD layer.
	 */
	if (class == IB_MGMT_CLASS_CONG_MGMT) {
		if (!dev->sma || port != VHCA_PORT || ib_response_mad(&in->mad_hdr))
			return IB_MAD_RESULT_SUCCESS;
		return vhca_sma_process_mad(dev, in_wc, in, out, out_mad_size);
	}
	return vhca_pma_process_mad(dev, port, in, out, out_mad_size);
}

/*
 * The agents ib_core announces for the port (modify_port's set and clear
 * masks: IB_PORT_SM while ib_umad's issm is open, IB_PORT_CM_SUP from ib_cm)
 * to the SMA's PortInfo:CapabilityMask, as mlx4 passes them to its firmware
 * with SET_PORT: `smpquery portinfo` and other SMs see IsSM, and the SM hears
 * of a change through trap 144. The kernel's IB_PORT_* bits are PortInfo's;
 * the device takes VHCA_PORT_CAP_HOST_SETTABLE (BAD_PARAM, -EINVAL, for any
 * other). Called under dev->sma_lock.
 */
int vhca_sma_set_port_caps(struct vhca_dev *dev, u32 set, u32 clear)
{
	struct vhca_set_port_caps_in in = {
		.port = VHCA_PORT,
		.set = set,
		.clear = clear,
	};
	struct vhca_set_port_caps_out out;
	u8 status;
	int ret;

	BUILD_BUG_ON(VHCA_PORT_CAP_IS_SM != IB_PORT_SM);
	BUILD_BUG_ON(VHCA_PORT_CAP_IS_CM != IB_PORT_CM_SUP);
	lockdep_assert_held(&dev->sma_lock);
	ret = vhca_cmd(dev, VHCA_CMD_SET_PORT_CAPS, &in, sizeof(in), &out,
		       sizeof(out), &status);
	if (ret)
		dev_dbg(&dev->pdev->dev,
			"SET_PORT_CAPS set %#x clear %#x: %d status %u\n", set,
			clear, ret, status);
	else
		dev_dbg(&dev->pdev->dev, "SMA CapabilityMask %#x\n",
			out.capability_mask);
	return ret;
}

/*
 * The node description (sysfs node_desc, written by rdma-ndd) to the SMA's
 * NodeDescription, as mlx4 passes it to its firmware with SET_NODE "so it
 * can generate a 144 trap": ibnetdiscover and smpquery nodedesc show it and
 * the SM re-reads it. ib_core's node_desc is 64 bytes, NUL padded when
 * shorter (IBA 14.2.5.2); the device wants exactly that, with its length.
 * Called under dev->sma_lock.
 */
static int vhca_sma_set_node_desc(struct vhca_dev *dev, const char *desc)
{
	struct vhca_set_node_desc_in *in;
	size_t len = strnlen(desc, IB_DEVICE_NODE_DESC_MAX);
	u8 status;
	int ret;

	BUILD_BUG_ON(sizeof(in->desc) != IB_DEVICE_NODE_DESC_MAX);
	lockdep_assert_held(&dev->sma_lock);
	in = kzalloc(sizeof(*in), GFP_KERNEL);
	if (!in)
		return -ENOMEM;
	in->len = len;
	memcpy(in->desc, desc, len);
	ret = vhca_cmd(dev, VHCA_CMD_SET_NODE_DESC, in, sizeof(*in), NULL, 0,
		       &status);
	if (ret)
		dev_dbg(&dev->pdev->dev, "SET_NODE_DESC: %d status %u\n", ret,
			status);
	kfree(in);
	return ret;
}

/*
 * ib_core's modify_device: only the node description (the system image GUID
 * is the device's, as mlx4 refuses it too). With an SMA the device takes it
 * first, so that what the guest shows and what the subnet reads agree; a
 * RoCE port (no SMA) keeps it here only, as rxe does.
 */
int vhca_modify_device(struct ib_device *ibdev, int mask,
		       struct ib_device_modify *props)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	int ret = 0;

	if (mask & ~IB_DEVICE_MODIFY_NODE_DESC)
		return -EOPNOTSUPP;
	if (!(mask & IB_DEVICE_MODIFY_NODE_DESC))
		return 0;
	mutex_lock(&dev->sma_lock);
	if (dev->sma)
		ret = vhca_sma_set_node_desc(dev, props->node_desc);
	if (!ret)
		memcpy(ibdev->node_desc, props->node_desc,
		       IB_DEVICE_NODE_DESC_MAX);
	mutex_unlock(&dev->sma_lock);
	return ret;
}

/*
 * The node description the guest starts with: the SMA's (NodeDescription,
 * "vhca <node>" from the fabric file), read through MAD_IFC as mlx4 reads
 * its firmware's at probe (init_node_data), so that sysfs node_desc and the
 * subnet agree before rdma-ndd sets one; "vhca" without an SMA.
 */
void vhca_sma_init_node_desc(struct vhca_dev *dev)
{
	struct vhca_mad_ifc_out *out;
	u8 status;

	strscpy(dev->ibdev.node_desc, "vhca", sizeof(dev->ibdev.node_desc));
	if (!dev->sma)
		return;
	out = kzalloc(sizeof(*out), GFP_KERNEL);
	if (!out)
		return;
	/* M_Key level 3 drops the Get (CONSUMED, no reply): keep "vhca". */
	if (!vhca_sma_get(dev, IB_SMP_ATTR_NODE_DESC, 2, out, &status) &&
	    (out->flags & VHCA_MAD_IFC_F_REPLY)) {
		struct ib_smp *r = (struct ib_smp *)out->mad;

		if (!r->status)
			memcpy(dev->ibdev.node_desc, r->data,
			       IB_DEVICE_NODE_DESC_MAX);
	}
	kfree(out);
}
