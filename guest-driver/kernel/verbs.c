// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device-wide verbs: device and port attributes, P_Key and GID tables,
 * user contexts and their doorbell page, protection domains, address
 * handles.
 *
 * Port: link layer InfiniBand, LID and GUID from the device (QUERY_PORT),
 * GID 0 = subnet prefix : port GUID, P_Key table as the device reports it
 * (ARCHITECTURE.md §7). QUERY_PORT is re-run by query_port and after every port
 * event; the P_Key and GID callbacks read that cache, since ib_core calls
 * them for every table entry.
 *
 * Or, when QUERY_PORT says Ethernet, a RoCEv2 port (WF-10): state and MTU
 * from the paired NIC, GID table kept by ib_core (roce.c), address vectors
 * with the destination MAC ib_core resolved.
 */

#include <linux/etherdevice.h>
#include <linux/mm.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>
#define UVERBS_MODULE_NAME vhca_ib
#include <rdma/uverbs_named_ioctl.h>

#include "vhca.h"

int vhca_query_device_cmd(struct vhca_dev *dev)
{
	return vhca_cmd(dev, VHCA_CMD_QUERY_DEVICE, NULL, 0, &dev->attr,
			sizeof(dev->attr), NULL);
}

int vhca_refresh_port(struct vhca_dev *dev)
{
	struct vhca_query_port_in in = { .port = VHCA_PORT };
	struct vhca_port_attr *pa;
	unsigned long flags;
	int ret;

	pa = kzalloc(sizeof(*pa), GFP_KERNEL);
	if (!pa)
		return -ENOMEM;
	ret = vhca_cmd(dev, VHCA_CMD_QUERY_PORT, &in, sizeof(in), pa,
		       sizeof(*pa), NULL);
	if (!ret) {
		spin_lock_irqsave(&dev->port.lock, flags);
		dev->port.attr = *pa;
		spin_unlock_irqrestore(&dev->port.lock, flags);
	}
	kfree(pa);
	return ret;
}

static void vhca_port_snapshot(struct vhca_dev *dev, struct vhca_port_attr *pa)
{
	unsigned long flags;

	spin_lock_irqsave(&dev->port.lock, flags);
	*pa = dev->port.attr;
	spin_unlock_irqrestore(&dev->port.lock, flags);
}

static enum ib_event_type vhca_port_event_type(unsigned int kind)
{
	switch (kind) {
	case VHCA_EQE_PORT_ACTIVE:		return IB_EVENT_PORT_ACTIVE;
	case VHCA_EQE_PORT_ERR:			return IB_EVENT_PORT_ERR;
	case VHCA_EQE_LID_CHANGE:		return IB_EVENT_LID_CHANGE;
	case VHCA_EQE_PKEY_CHANGE:		return IB_EVENT_PKEY_CHANGE;
	case VHCA_EQE_SM_CHANGE:		return IB_EVENT_SM_CHANGE;
	case VHCA_EQE_CLIENT_REREGISTER:	return IB_EVENT_CLIENT_REREGISTER;
	case VHCA_EQE_GID_CHANGE:		return IB_EVENT_GID_CHANGE;
	default:				return IB_EVENT_DEVICE_FATAL;
	}
}

/* Port and device events from EQ 0: refresh the port cache, then tell ib_core. */
void vhca_port_work(struct work_struct *work)
{
	struct vhca_dev *dev = container_of(work, struct vhca_dev, port_work);
	unsigned long pending = xchg(&dev->port_events, 0);
	unsigned int kind;

	if (!(pending & BIT(VHCA_EQE_DEVICE_FATAL)))
		vhca_refresh_port(dev);
	if (!READ_ONCE(dev->registered))
		return;
	/*
	 * A RoCE port is as up as the NIC it shares the link with: roce.c
	 * reports PORT_ACTIVE/PORT_ERR from the netdev (AE-01), not these.
	 */
	if (dev->roce)
		pending &= ~(BIT(VHCA_EQE_PORT_ACTIVE) | BIT(VHCA_EQE_PORT_ERR));
	for_each_set_bit(kind, &pending, BITS_PER_LONG) {
		struct ib_event ev = {
			.device = &dev->ibdev,
			.event = vhca_port_event_type(kind),
			.element.port_num = VHCA_PORT,
		};

		ib_dispatch_event(&ev);
	}
}

/* QUERY_DEVICE, as ib_core wants it; capabilities only where CAP_FLAGS says. */
int vhca_query_device(struct ib_device *ibdev, struct ib_device_attr *a,
		      struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	const struct vhca_device_attr *d = &dev->attr;
	u32 caps = d->cap_flags;

	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;

	memset(a, 0, sizeof(*a));
	a->fw_ver = d->fw_ver;
	a->sys_image_guid = cpu_to_be64(d->sys_image_guid);
	a->max_mr_size = d->max_mr_size;
	a->page_size_cap = d->page_size_cap;
	a->vendor_id = d->vendor_id;
	a->vendor_part_id = d->vendor_part_id;
	a->hw_ver = d->hw_ver;
	a->max_qp = d->max_qp;
	a->max_qp_wr = d->max_qp_wr;
	a->device_cap_flags = IB_DEVICE_SYS_IMAGE_GUID |
			      IB_DEVICE_PORT_ACTIVE_EVENT |
			      IB_DEVICE_CURR_QP_STATE_MOD;
	/* SR-02: XRC domains, XRC SRQs, XRC_INI and XRC_TGT QPs. */
	if (caps & VHCA_DEV_CAP_XRC)
		a->device_cap_flags |= IB_DEVICE_XRC;
	if (caps & VHCA_DEV_CAP_RC)
		a->device_cap_flags |= IB_DEVICE_RC_RNR_NAK_GEN;
	/*
	 * AD-10: alternate paths, migration states and their events; not on a
	 * RoCE port, where ib_core refuses IB_QP_ALT_PATH (the device's RoCE
	 * APM has no guest verbs path).
	 */
	if ((caps & VHCA_DEV_CAP_APM) && !dev->roce)
		a->device_cap_flags |= IB_DEVICE_AUTO_PATH_MIG;
	/*
	 * Memory windows (MP-06, MP-07): ibverbs reads MEM_WINDOW as "type 1"
	 * and TYPE_2B for type 2; a window is counted against the MR keys.
	 */
	if (caps & (VHCA_DEV_CAP_MW_TYPE1 | VHCA_DEV_CAP_MW_TYPE2)) {
		if (caps & VHCA_DEV_CAP_MW_TYPE1)
			a->device_cap_flags |= IB_DEVICE_MEM_WINDOW;
		if (caps & VHCA_DEV_CAP_MW_TYPE2)
			a->device_cap_flags |= IB_DEVICE_MEM_WINDOW_TYPE_2B;
		a->max_mw = d->max_mr;
	}
	/*
	 * IBA 1.5 Memory Placement Extensions on RC. FLUSH to global
	 * visibility only: guest memory is ordinary RAM, so the device cannot
	 * claim persistence and never advertises IB_DEVICE_FLUSH_PERSISTENT
	 * (ib_check_mr_access then refuses IB_ACCESS_FLUSH_PERSISTENT).
	 */
	if (caps & VHCA_DEV_CAP_FLUSH_GLOBAL)
		a->device_cap_flags |= IB_DEVICE_FLUSH_GLOBAL;
	if (caps & VHCA_DEV_CAP_ATOMIC_WRITE)
		a->device_cap_flags |= IB_DEVICE_ATOMIC_WRITE;
	/*
	 * Fast registration (MP-08): alloc_mr, IB_WR_REG_MR, IB_WR_LOCAL_INV
	 * and remote invalidation of MR keys, what kernel ULPs (nvme-rdma,
	 * iSER, NFS/RDMA) ask for.
	 */
	if (caps & VHCA_DEV_CAP_FAST_REG_MR) {
		a->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
		a->max_fast_reg_page_list_len = d->max_fast_reg_pages;
	}
	/* On-demand paging: the transports and operations the device says. */
	vhca_odp_query_device(dev, a);
	a->max_send_sge = d->max_sge;
	a->max_recv_sge = d->max_sge;
	a->max_sge_rd = d->max_sge;
	a->max_cq = d->max_cq;
	a->max_cqe = d->max_cqe;
	a->max_mr = d->max_mr;
	a->max_pd = d->max_pd;
	a->max_qp_rd_atom = d->max_qp_rd_atom;
	a->max_qp_init_rd_atom = d->max_qp_init_rd_atom;
	a->max_res_rd_atom = d->max_res_rd_atom;
	if (caps & VHCA_DEV_CAP_ATOMIC)
		a->atomic_cap = d->atomic_cap == VHCA_ATOMIC_GLOB ?
					IB_ATOMIC_GLOB : IB_ATOMIC_HCA;
	else
		a->atomic_cap = IB_ATOMIC_NONE;
	/* Masked atomics are not IBA operations: the device has none. */
	a->masked_atomic_cap = IB_ATOMIC_NONE;
	/*
	 * max_ee and max_rdd stay 0 (memset): Reliable Datagram (AD-11) has no
	 * Linux verbs, so no EE context or RDD is exposed to ib_core.
	 */
	/* Address handles live in the driver: bounded by memory only. */
	a->max_ah = (caps & VHCA_DEV_CAP_UD) ? INT_MAX : 0;
	if (caps & VHCA_DEV_CAP_SRQ) {
		a->max_srq = d->max_srq;
		a->max_srq_wr = d->max_srq_wr;
		a->max_srq_sge = d->max_srq_sge;
		if (caps & VHCA_DEV_CAP_RESIZE_SRQ)
			a->device_cap_flags |= IB_DEVICE_SRQ_RESIZE;
	}
	/* Device memory (dm.c): what ibv_devinfo -v shows as max_dm_size. */
	a->max_dm_size = (u64)dev->dm.npages * PAGE_SIZE;
	a->max_pkeys = d->max_pkeys;
	a->local_ca_ack_delay = d->local_ca_ack_delay;
	/* UD multicast (AD-08): the device's bounds, enforced by ATTACH_MCAST. */
	if (caps & VHCA_DEV_CAP_UD) {
		a->max_mcast_grp = d->max_mcast_grp;
		a->max_mcast_qp_attach = d->max_mcast_qp_attach;
		a->max_total_mcast_qp_attach = d->max_total_mcast_qp_attach;
	}
	return 0;
}

static enum ib_mtu vhca_mtu_to_ib(u8 mtu)
{
	return (mtu >= VHCA_MTU_M256 && mtu <= VHCA_MTU_M4096) ?
		       (enum ib_mtu)mtu : IB_MTU_256;
}

int vhca_query_port(struct ib_device *ibdev, u32 port,
		    struct ib_port_attr *a)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	struct vhca_port_attr *pa;
	unsigned long flags;
	int ret;

	if (port != VHCA_PORT)
		return -EINVAL;
	/* Fresh state (QUERY_PORT); fall back to the cache if the device is gone. */
	ret = vhca_refresh_port(dev);
	if (ret)
		dev_dbg(&dev->pdev->dev, "QUERY_PORT: %d, using the cache\n",
			ret);
	pa = kmalloc(sizeof(*pa), GFP_KERNEL);
	if (!pa)
		return -ENOMEM;
	vhca_port_snapshot(dev, pa);

	memset(a, 0, sizeof(*a));
	a->subnet_prefix = pa->gid_prefix;
	a->state = (enum ib_port_state)pa->state;
	a->max_mtu = vhca_mtu_to_ib(pa->max_mtu);
	a->active_mtu = vhca_mtu_to_ib(pa->active_mtu);
	a->phys_mtu = ib_mtu_enum_to_int(a->max_mtu);
	/* ib_core reads every entry of both tables: only what we can serve. */
	a->gid_tbl_len = clamp_t(u16, pa->gid_tbl_len, 1, VHCA_GID_TBL_MAX);
	a->pkey_tbl_len = clamp_t(u16, pa->pkey_tbl_len, 1,
				  ARRAY_SIZE(pa->pkeys));
	/* The GSI QP is what ib_cm needs (ARCHITECTURE.md §7). */
	if (dev->attr.cap_flags & VHCA_DEV_CAP_GSI)
		a->port_cap_flags = IB_PORT_CM_SUP;
	/*
	 * AD-10: the port takes alternate paths (IBA PortInfo:CapabilityMask
	 * IsAutomaticMigrationSupported); InfiniBand only, as above.
	 */
	if ((dev->attr.cap_flags & VHCA_DEV_CAP_APM) && !dev->roce)
		a->port_cap_flags |= IB_PORT_AUTO_MIGR_SUP;
	spin_lock_irqsave(&dev->port.lock, flags);
	a->port_cap_flags |= dev->port.sw_cap_flags;
	spin_unlock_irqrestore(&dev->port.lock, flags);
	a->max_msg_sz = pa->max_msg_sz;
	a->lid = pa->lid;
	a->sm_lid = pa->sm_lid;
	a->lmc = pa->lmc;
	a->sm_sl = pa->sm_sl;
	/* AD-06: the device's data VLs (0 from a device without them: VL0). */
	a->max_vl_num = pa->max_vl_num ? pa->max_vl_num : 1;
	a->active_width = pa->active_width;
	a->active_speed = pa->active_speed;
	a->phys_state = pa->phys_state;
	kfree(pa);
	if (dev->roce) {
		a->subnet_prefix = 0;
		vhca_roce_query_port(dev, a);
	}
	return 0;
}

/*
 * The capability bits ib_core's agents announce for the port: ib_cm sets
 * IB_PORT_CM_SUP on every port it serves and gives the device up when it
 * cannot (cm_add_one), ib_umad's issm sets IB_PORT_SM while an SM holds it
 * open. ib_core fakes success only on a RoCE port; on an InfiniBand port
 * without this op both fail (EOPNOTSUPP). With an SMA the device takes them
 * first (SET_PORT_CAPS, mad.c), as mlx4's firmware does with SET_PORT, so
 * that the subnet sees IsSM; a bit the device does not let the host set is
 * -EINVAL and changes nothing. The bits are also kept here and shown by
 * query_port (a RoCE port keeps them here only). Shutting the port down, its
 * init type and resetting the Q_Key violation counter are not the driver's
 * to do.
 */
int vhca_modify_port(struct ib_device *ibdev, u32 port, int mask,
		     struct ib_port_modify *props)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	unsigned long flags;
	int ret = 0;

	if (port != VHCA_PORT)
		return -EINVAL;
	if (mask)
		return -EOPNOTSUPP;
	mutex_lock(&dev->sma_lock);
	if (dev->sma)
		ret = vhca_sma_set_port_caps(dev, props->set_port_cap_mask,
					     props->clr_port_cap_mask);
	if (!ret) {
		spin_lock_irqsave(&dev->port.lock, flags);
		dev->port.sw_cap_flags = (dev->port.sw_cap_flags |
					  props->set_port_cap_mask) &
					 ~props->clr_port_cap_mask;
		spin_unlock_irqrestore(&dev->port.lock, flags);
	}
	mutex_unlock(&dev->sma_lock);
	return ret;
}

/*
 * Claim in core_cap_flags only what the device does (ARCHITECTURE.md §7). ib_mad
 * gives up the whole port, QP1 included, when it cannot create QP0 for a
 * port that claims SMI (ib_mad_port_open): so SMI (QP0, AD-09) only from a
 * device whose SMA answered MAD_IFC at probe (mad.c); MAD, CM and SA only
 * with the GSI QP.
 */
int vhca_get_port_immutable(struct ib_device *ibdev, u32 port,
			    struct ib_port_immutable *imm)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	struct ib_port_attr attr;
	int ret;

	ret = vhca_query_port(ibdev, port, &attr);
	if (ret)
		return ret;
	imm->pkey_tbl_len = attr.pkey_tbl_len;
	imm->gid_tbl_len = attr.gid_tbl_len;
	imm->max_mad_size = IB_MGMT_MAD_SIZE;
	if (dev->roce) {
		/*
		 * RoCEv2 only (WF-10): ib_core keeps the GID table through
		 * add_gid/del_gid; QP1 carries ib_cm's MADs (A17.2).
		 */
		imm->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
		if (!(dev->attr.cap_flags & VHCA_DEV_CAP_GSI))
			imm->core_cap_flags &= ~(RDMA_CORE_CAP_IB_MAD |
						 RDMA_CORE_CAP_IB_CM);
		return 0;
	}
	imm->core_cap_flags = RDMA_CORE_CAP_PROT_IB | RDMA_CORE_CAP_AF_IB;
	if (dev->attr.cap_flags & VHCA_DEV_CAP_GSI) {
		imm->core_cap_flags |= RDMA_CORE_PORT_IBA_IB;
		if (!dev->sma)
			imm->core_cap_flags &= ~RDMA_CORE_CAP_IB_SMI;
	}
	return 0;
}

enum rdma_link_layer vhca_get_link_layer(struct ib_device *ibdev, u32 port)
{
	return to_vdev(ibdev)->roce ? IB_LINK_LAYER_ETHERNET :
				      IB_LINK_LAYER_INFINIBAND;
}

int vhca_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	unsigned long flags;
	int ret = 0;

	spin_lock_irqsave(&dev->port.lock, flags);
	if (index < ARRAY_SIZE(dev->port.attr.pkeys))
		*pkey = index < dev->port.attr.pkey_tbl_len ?
				dev->port.attr.pkeys[index] : 0;
	else
		ret = -EINVAL;
	spin_unlock_irqrestore(&dev->port.lock, flags);
	return ret;
}

/*
 * GID 0 is the port's (subnet prefix : port GUID); the others are empty.
 * ib_core never asks a RoCE port: its table is ib_core's own (roce.c).
 */
int vhca_query_gid(struct ib_device *ibdev, u32 port, int index,
		   union ib_gid *gid)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	unsigned long flags;
	int ret = 0;

	spin_lock_irqsave(&dev->port.lock, flags);
	if (index < 0 || index >= VHCA_GID_TBL_MAX)
		ret = -EINVAL;
	else if (index == 0)
		memcpy(gid->raw, dev->port.attr.gid0, sizeof(gid->raw));
	else
		memset(gid->raw, 0, sizeof(gid->raw));
	spin_unlock_irqrestore(&dev->port.lock, flags);
	return ret;
}

/* fw_ver: shown as three 16-bit fields (the ABI leaves its format open). */
void vhca_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u64 v = to_vdev(ibdev)->attr.fw_ver;

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u.%u",
		 (u32)(v >> 32) & 0xffff, (u32)(v >> 16) & 0xffff,
		 (u32)v & 0xffff);
}

/* The doorbell page of a verb's caller: its context's, or UAR 0. */
struct vhca_uar *vhca_uar_of(struct vhca_dev *dev, struct ib_udata *udata)
{
	struct vhca_ucontext *uctx =
		rdma_udata_to_drv_context(udata, struct vhca_ucontext, ibuctx);

	return uctx ? &uctx->uar : &dev->kuar;
}

/* What the provider needs of a context (vhca-abi-user.h). */
static void vhca_ucontext_resp(struct vhca_dev *dev, struct vhca_ucontext *uctx,
			       struct vhca_ib_alloc_ucontext_resp *resp)
{
	resp->uar_index = uctx->uar.index;
	resp->cap_flags = dev->attr.cap_flags;
	resp->uar_mmap_offset = (u64)VHCA_IB_MMAP_UAR << PAGE_SHIFT;
	resp->uar_page_size = VHCA_UAR_PAGE_SIZE;
	resp->uar_slots = VHCA_UAR_SLOTS;
	resp->max_qp_wr = dev->attr.max_qp_wr;
	resp->max_sge = dev->attr.max_sge;
	resp->max_cqe = dev->attr.max_cqe;
	resp->max_inline = dev->attr.max_inline_data;
	resp->max_srq_wr = dev->attr.max_srq_wr;
	if (dev->wake) {
		resp->wake_mmap_offset = (u64)VHCA_IB_MMAP_WAKE << PAGE_SHIFT;
		resp->wake_page_size = VHCA_WAKE_BAR_SIZE;
	}
}

int vhca_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibuctx->device);
	struct vhca_ucontext *uctx = to_vuctx(ibuctx);
	struct vhca_ib_alloc_ucontext_resp resp = {};
	int index, ret;

	if (dev->caps.num_uars < 2)
		return -ENOMEM;
	index = ida_alloc_range(&dev->uar_ida, 1, dev->caps.num_uars - 1,
				GFP_KERNEL);
	if (index < 0)
		return index == -ENOSPC ? -ENOMEM : index;
	vhca_uar_init(&uctx->uar, index);

	vhca_ucontext_resp(dev, uctx, &resp);
	ret = ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
	if (ret) {
		ida_free(&dev->uar_ida, index);
		return ret;
	}
	return 0;
}

/*
 * ibv_import_device: the context's alloc_ucontext response again, in the
 * driver attribute that vhca_uapi_defs declares (vhca-abi-user.h).
 */
int vhca_query_ucontext(struct ib_ucontext *ibuctx,
			struct uverbs_attr_bundle *attrs)
{
	struct vhca_ib_alloc_ucontext_resp resp = {};

	vhca_ucontext_resp(to_vdev(ibuctx->device), to_vuctx(ibuctx), &resp);
	return uverbs_copy_to(attrs, VHCA_IB_ATTR_QUERY_CONTEXT_RESP_UCTX,
			      &resp, sizeof(resp));
}

ADD_UVERBS_ATTRIBUTES_SIMPLE(
	vhca_query_context, UVERBS_OBJECT_DEVICE, UVERBS_METHOD_QUERY_CONTEXT,
	UVERBS_ATTR_PTR_OUT(VHCA_IB_ATTR_QUERY_CONTEXT_RESP_UCTX,
			    UVERBS_ATTR_STRUCT(struct vhca_ib_alloc_ucontext_resp,
					       reserved2)));

/* The driver's uverbs attributes (ib_device.driver_def). */
const struct uapi_definition vhca_uapi_defs[] = {
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_DEVICE, &vhca_query_context),
	/* Device memory's allocation attributes and query method. */
	UAPI_DEF_CHAIN(vhca_dm_defs),
	{},
};

void vhca_dealloc_ucontext(struct ib_ucontext *ibuctx)
{
	struct vhca_dev *dev = to_vdev(ibuctx->device);

	ida_free(&dev->uar_ida, to_vuctx(ibuctx)->uar.index);
}

/*
 * Present so that ib_unregister_device can take user contexts away (it zaps
 * the UAR mappings made with rdma_user_mmap_io and destroys the objects)
 * instead of waiting for every process to close its device file.
 */
void vhca_disassociate_ucontext(struct ib_ucontext *ibuctx)
{
}

/*
 * mmap offsets (vhca-abi-user.h): the context's UAR page, and the WAKE page
 * (BAR4), both uncached device memory; device memory allocations (dm.c). The WAKE page holds nothing to read;
 * the device ignores what is stored, only that a store happened.
 */
int vhca_mmap(struct ib_ucontext *ibuctx, struct vm_area_struct *vma)
{
	struct vhca_dev *dev = to_vdev(ibuctx->device);
	struct vhca_ucontext *uctx = to_vuctx(ibuctx);
	unsigned long pfn;

	BUILD_BUG_ON(VHCA_UAR_PAGE_SIZE != PAGE_SIZE);
	BUILD_BUG_ON(VHCA_WAKE_BAR_SIZE != PAGE_SIZE);
	if (vma->vm_pgoff >= VHCA_IB_MMAP_DM_FIRST)
		return vhca_dm_mmap(ibuctx, vma);
	if (vma->vm_end - vma->vm_start != PAGE_SIZE)
		return -EINVAL;
	switch (vma->vm_pgoff) {
	case VHCA_IB_MMAP_UAR:
		pfn = (dev->bar2_start + (resource_size_t)uctx->uar.index *
					 VHCA_UAR_PAGE_SIZE) >> PAGE_SHIFT;
		break;
	case VHCA_IB_MMAP_WAKE:
		if (!dev->wake)
			return -EINVAL;
		pfn = dev->wake_start >> PAGE_SHIFT;
		break;
	default:
		return -EINVAL;
	}
	vm_flags_set(vma, VM_DONTEXPAND | VM_DONTDUMP);
	return rdma_user_mmap_io(ibuctx, vma, pfn, PAGE_SIZE,
				 pgprot_noncached(vma->vm_page_prot), NULL);
}

int vhca_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibpd->device);
	struct vhca_pd *pd = to_vpd(ibpd);
	struct vhca_alloc_pd_out out;
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_ALLOC_PD, NULL, 0, &out, sizeof(out),
		       NULL);
	if (ret)
		return ret;
	pd->pdn = out.pdn;
	if (udata && udata->outlen) {
		struct vhca_ib_alloc_pd_resp resp = { .pdn = pd->pdn };

		ret = ib_copy_to_udata(udata, &resp,
				       min(udata->outlen, sizeof(resp)));
		if (ret) {
			struct vhca_dealloc_pd_in in = { .pdn = pd->pdn };

			vhca_cmd(dev, VHCA_CMD_DEALLOC_PD, &in, sizeof(in),
				 NULL, 0, NULL);
			return ret;
		}
	}
	return 0;
}

int vhca_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibpd->device);
	struct vhca_dealloc_pd_in in = { .pdn = to_vpd(ibpd)->pdn };
	int ret;

	ret = vhca_cmd(dev, VHCA_CMD_DEALLOC_PD, &in, sizeof(in), NULL, 0,
		       NULL);
	/* BUSY is the caller's bug, worth telling; a dead device is not. */
	return ret == -EBUSY ? ret : 0;
}

/*
 * rdma_ah_attr -> struct vhca_av (AD-02). On a RoCE port every packet is
 * routed (A17.4.5.1): the GRH fields become the IP header, and the
 * destination MAC is the one ib_core resolved for dgid (roce.dmac; for user
 * AHs and QPs ib_core does it before calling the driver, kernel callers
 * bring it resolved).
 */
int vhca_ah_to_av(struct vhca_dev *dev, const struct rdma_ah_attr *ah,
		  struct vhca_av *av)
{
	const struct ib_global_route *grh;

	memset(av, 0, sizeof(*av));
	if (dev->roce) {
		if (ah->type != RDMA_AH_ATTR_TYPE_ROCE ||
		    !(rdma_ah_get_ah_flags(ah) & IB_AH_GRH))
			return -EINVAL;
		if (is_zero_ether_addr(ah->roce.dmac)) {
			ibdev_warn_ratelimited(&dev->ibdev,
					       "RoCE address without a destination MAC\n");
			return -EINVAL;
		}
		ether_addr_copy(av->dmac, ah->roce.dmac);
	} else {
		if (ah->type != RDMA_AH_ATTR_TYPE_IB)
			return -EINVAL;
		av->dlid = rdma_ah_get_dlid(ah);
		av->src_path_bits = rdma_ah_get_path_bits(ah);
	}
	av->sl = rdma_ah_get_sl(ah);
	av->static_rate = rdma_ah_get_static_rate(ah);
	av->port_num = rdma_ah_get_port_num(ah);
	if (rdma_ah_get_ah_flags(ah) & IB_AH_GRH) {
		grh = rdma_ah_read_grh(ah);
		av->is_global = 1;
		memcpy(av->dgid, grh->dgid.raw, sizeof(av->dgid));
		/*
		 * The GRH's FlowLabel is 20 bits (IBA ch. 8, the GRH); the verbs field
		 * is wider and consumers put hints above it (UCX stores
		 * ~path_index for RoCE source-port spreading), which real HCAs
		 * drop. Keep the 20 bits: the device refuses anything wider.
		 */
		av->flow_label = grh->flow_label & IB_GRH_FLOWLABEL_MASK;
		av->sgid_index = grh->sgid_index;
		av->hop_limit = grh->hop_limit;
		av->traffic_class = grh->traffic_class;
	}
	return 0;
}

void vhca_av_to_ah(struct vhca_dev *dev, const struct vhca_av *av,
		   struct rdma_ah_attr *ah)
{
	memset(ah, 0, sizeof(*ah));
	if (dev->roce) {
		ah->type = RDMA_AH_ATTR_TYPE_ROCE;
		ether_addr_copy(ah->roce.dmac, av->dmac);
	} else {
		ah->type = RDMA_AH_ATTR_TYPE_IB;
		rdma_ah_set_dlid(ah, av->dlid);
		rdma_ah_set_path_bits(ah, av->src_path_bits);
	}
	rdma_ah_set_sl(ah, av->sl);
	rdma_ah_set_static_rate(ah, av->static_rate);
	rdma_ah_set_port_num(ah, av->port_num ? av->port_num : VHCA_PORT);
	if (av->is_global) {
		union ib_gid dgid;

		memcpy(dgid.raw, av->dgid, sizeof(dgid.raw));
		rdma_ah_set_grh(ah, &dgid, av->flow_label, av->sgid_index,
				av->hop_limit, av->traffic_class);
	}
}

/*
 * UD address handles stay in the driver: post_send copies the AV. A user
 * AH comes here only on a RoCE port, where libvhca needs the destination
 * MAC ib_core resolved (vhca-abi-user.h); an InfiniBand AH never reaches
 * the kernel.
 */
int vhca_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		   struct ib_udata *udata)
{
	struct vhca_dev *dev = to_vdev(ibah->device);
	struct vhca_ah *ah = to_vah(ibah);
	int ret;

	ret = vhca_ah_to_av(dev, init->ah_attr, &ah->av);
	if (ret)
		return ret;
	if (udata && udata->outlen) {
		struct vhca_ib_create_ah_resp resp = {};

		ether_addr_copy(resp.dmac, ah->av.dmac);
		ret = ib_copy_to_udata(udata, &resp,
				       min(udata->outlen, sizeof(resp)));
	}
	return ret;
}

/*
 * ib_mad matches a response to its request by the request's AH
 * (rcv_has_same_gid): without query_ah every GSI response would be dropped.
 */
int vhca_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr)
{
	vhca_av_to_ah(to_vdev(ibah->device), &to_vah(ibah)->av, attr);
	return 0;
}

int vhca_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}

/* enum ib_access_flags <-> VHCA_ACCESS_* (MP-04). */
u32 vhca_access_to_dev(int ib)
{
	return ((ib & IB_ACCESS_LOCAL_WRITE) ? VHCA_ACCESS_LOCAL_WRITE : 0) |
	       ((ib & IB_ACCESS_REMOTE_WRITE) ? VHCA_ACCESS_REMOTE_WRITE : 0) |
	       ((ib & IB_ACCESS_REMOTE_READ) ? VHCA_ACCESS_REMOTE_READ : 0) |
	       ((ib & IB_ACCESS_REMOTE_ATOMIC) ? VHCA_ACCESS_REMOTE_ATOMIC : 0) |
	       ((ib & IB_ACCESS_MW_BIND) ? VHCA_ACCESS_MW_BIND : 0) |
	       ((ib & IB_ACCESS_FLUSH_GLOBAL) ? VHCA_ACCESS_FLUSH_GLOBAL : 0) |
	       ((ib & IB_ACCESS_FLUSH_PERSISTENT) ?
			VHCA_ACCESS_FLUSH_PERSISTENT : 0);
}

int vhca_access_to_ib(u32 a)
{
	return ((a & VHCA_ACCESS_LOCAL_WRITE) ? IB_ACCESS_LOCAL_WRITE : 0) |
	       ((a & VHCA_ACCESS_REMOTE_WRITE) ? IB_ACCESS_REMOTE_WRITE : 0) |
	       ((a & VHCA_ACCESS_REMOTE_READ) ? IB_ACCESS_REMOTE_READ : 0) |
	       ((a & VHCA_ACCESS_REMOTE_ATOMIC) ? IB_ACCESS_REMOTE_ATOMIC : 0) |
	       ((a & VHCA_ACCESS_MW_BIND) ? IB_ACCESS_MW_BIND : 0) |
	       ((a & VHCA_ACCESS_FLUSH_GLOBAL) ? IB_ACCESS_FLUSH_GLOBAL : 0) |
	       ((a & VHCA_ACCESS_FLUSH_PERSISTENT) ?
			IB_ACCESS_FLUSH_PERSISTENT : 0);
}
