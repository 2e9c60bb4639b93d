// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * vhca.ko: PCI probe and remove, device bring-up (vhca_abi.h "BAR0 rules"),
 * and registration with ib_core as vhca%d.
 *
 * Bring-up: map BAR0, RESET and wait for READY, check MAGIC and ABI_VERSION,
 * read CAP_*, map BAR2 (doorbell pages), take MSI-X vectors, give the device
 * DRIVER_ABI, the command ring and EQ 0's ring, arm EQ 0 through its doorbell
 * slot, ENABLE and wait for ENABLED or FATAL. Then a NOP proves the command
 * queue, QUERY_DEVICE / QUERY_PORT fill the attributes, completion EQs go on
 * vectors 1.., and the ib_device is registered with the PCI function as
 * parent (rdma-core's VERBS_PCI_MATCH reads .../device/modalias).
 *
 * Remove: ib_unregister_device first (ULPs and user contexts let go of every
 * object through the verbs below), then the EQs, RESET (the device forgets
 * everything and stops touching memory), interrupts and rings.
 */

#include <linux/delay.h>
#include <linux/etherdevice.h>
#include <linux/module.h>

#include "vhca.h"

MODULE_AUTHOR("vhca");
MODULE_DESCRIPTION("vhca: virtual PCIe InfiniBand / RoCEv2 HCA");
MODULE_LICENSE("Dual MIT/GPL");

static unsigned int status_timeout_ms = 5000;
module_param(status_timeout_ms, uint, 0644);
MODULE_PARM_DESC(status_timeout_ms,
		 "Time RESET and ENABLE may take (ms, default 5000)");

static const struct pci_device_id vhca_pci_tbl[] = {
	{ PCI_DEVICE(VHCA_PCI_VENDOR_ID, VHCA_PCI_DEVICE_ID) },
	{}
};
MODULE_DEVICE_TABLE(pci, vhca_pci_tbl);

static const char *vhca_fatal_str(u32 syndrome)
{
	switch (syndrome) {
	case VHCA_FATAL_NONE:			return "none";
	case VHCA_FATAL_ABI_MISMATCH:		return "ABI mismatch";
	case VHCA_FATAL_CMDQ_BAD_CONFIG:	return "bad command queue configuration";
	case VHCA_FATAL_CMDQ_NOT_OWNED:		return "command slot not owned by the device";
	case VHCA_FATAL_EQ0_BAD_CONFIG:		return "bad EQ 0 configuration";
	case VHCA_FATAL_EQ0_OVERFLOW:		return "EQ 0 overflow";
	case VHCA_FATAL_UAR0_UNAVAILABLE:	return "UAR 0 unavailable";
	case VHCA_FATAL_INTERNAL:		return "internal device error";
	default:				return "unknown";
	}
}

/* Polls DEV_STATUS (each read is a trapped BAR0 access) until done(). */
static int vhca_wait_status(struct vhca_dev *dev,
			    bool (*done)(u32 status), u32 *status)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(status_timeout_ms);

	for (;;) {
		*status = vhca_rd(dev, VHCA_REG_DEV_STATUS);
		if (done(*status))
			return 0;
		if (time_after(jiffies, deadline))
			return -ETIMEDOUT;
		usleep_range(500, 1000);
	}
}

static bool vhca_reset_done(u32 st)
{
	return (st & VHCA_DEV_STATUS_READY) && !(st & VHCA_DEV_STATUS_ENABLED);
}

static bool vhca_enable_done(u32 st)
{
	return st & (VHCA_DEV_STATUS_ENABLED | VHCA_DEV_STATUS_FATAL);
}

static int vhca_reset(struct vhca_dev *dev)
{
	u32 st;
	int ret;

	vhca_wr(dev, VHCA_REG_DEV_CTRL, VHCA_DEV_CTRL_RESET);
	ret = vhca_wait_status(dev, vhca_reset_done, &st);
	if (ret)
		dev_err(&dev->pdev->dev,
			"RESET: no READY within %u ms (DEV_STATUS %#x)\n",
			status_timeout_ms, st);
	return ret;
}

static int vhca_check_identity(struct vhca_dev *dev)
{
	u32 magic = vhca_rd(dev, VHCA_REG_MAGIC);
	u32 abi = vhca_rd(dev, VHCA_REG_ABI_VERSION);

	if (magic != VHCA_MAGIC) {
		dev_err(&dev->pdev->dev, "MAGIC %#x, expected %#x\n", magic,
			VHCA_MAGIC);
		return -ENODEV;
	}
	/* Same major, and a minor at least ours (vhca_abi.h). */
	if ((abi >> 16) != (VHCA_ABI_VERSION >> 16) ||
	    (abi & 0xffff) < (VHCA_ABI_VERSION & 0xffff)) {
		dev_err(&dev->pdev->dev,
			"device ABI %u.%u, driver ABI %u.%u\n", abi >> 16,
			abi & 0xffff, VHCA_ABI_VERSION >> 16,
			VHCA_ABI_VERSION & 0xffff);
		return -ENODEV;
	}
	return 0;
}

static void vhca_read_caps(struct vhca_dev *dev)
{
	struct vhca_caps *c = &dev->caps;

	c->max_qp = vhca_rd(dev, VHCA_REG_CAP_MAX_QP);
	c->max_cq = vhca_rd(dev, VHCA_REG_CAP_MAX_CQ);
	c->max_srq = vhca_rd(dev, VHCA_REG_CAP_MAX_SRQ);
	c->max_mr = vhca_rd(dev, VHCA_REG_CAP_MAX_MR);
	c->max_pd = vhca_rd(dev, VHCA_REG_CAP_MAX_PD);
	c->max_eq = vhca_rd(dev, VHCA_REG_CAP_MAX_EQ);
	c->max_qp_wr = vhca_rd(dev, VHCA_REG_CAP_MAX_QP_WR);
	c->max_sge = vhca_rd(dev, VHCA_REG_CAP_MAX_SGE);
	c->max_cqe = vhca_rd(dev, VHCA_REG_CAP_MAX_CQE);
	c->max_inline = vhca_rd(dev, VHCA_REG_CAP_MAX_INLINE);
	c->num_uars = vhca_rd(dev, VHCA_REG_CAP_NUM_UARS);
	c->msix_vectors = vhca_rd(dev, VHCA_REG_CAP_MSIX_VECTORS);
	c->max_cmdq_log2 = vhca_rd(dev, VHCA_REG_CAP_MAX_CMDQ_LOG2);
	c->max_eq_log2 = vhca_rd(dev, VHCA_REG_CAP_MAX_EQ_LOG2);
	c->max_srq_wr = vhca_rd(dev, VHCA_REG_CAP_MAX_SRQ_WR);
	c->num_ports = vhca_rd(dev, VHCA_REG_CAP_NUM_PORTS);
	c->flags = vhca_rd(dev, VHCA_REG_CAP_FLAGS);
	/* 0 on a device before device memory (an unassigned register). */
	c->dm_size = vhca_rd(dev, VHCA_REG_CAP_DM_SIZE);
}

/* Configuration registers, EQ 0 armed, ENABLE; then ENABLED or FATAL. */
static int vhca_enable(struct vhca_dev *dev)
{
	u32 st;
	int ret;

	vhca_wr(dev, VHCA_REG_DRIVER_ABI, VHCA_ABI_VERSION);
	vhca_wr(dev, VHCA_REG_CMDQ_BASE_LO, lower_32_bits(dev->cmdq.ring_dma));
	vhca_wr(dev, VHCA_REG_CMDQ_BASE_HI, upper_32_bits(dev->cmdq.ring_dma));
	vhca_wr(dev, VHCA_REG_CMDQ_LOG2_SIZE, dev->cmdq.log2);
	vhca_wr(dev, VHCA_REG_EQ0_BASE_LO, lower_32_bits(dev->eq0.ring_dma));
	vhca_wr(dev, VHCA_REG_EQ0_BASE_HI, upper_32_bits(dev->eq0.ring_dma));
	vhca_wr(dev, VHCA_REG_EQ0_LOG2_SIZE, dev->eq0.log2);
	ret = vhca_eq0_start(dev);
	if (ret)
		return ret;
	vhca_wr(dev, VHCA_REG_DEV_CTRL, VHCA_DEV_CTRL_ENABLE);
	ret = vhca_wait_status(dev, vhca_enable_done, &st);
	if (ret) {
		dev_err(&dev->pdev->dev,
			"ENABLE: neither ENABLED nor FATAL within %u ms (DEV_STATUS %#x)\n",
			status_timeout_ms, st);
	} else if (st & VHCA_DEV_STATUS_FATAL) {
		u32 syn = vhca_rd(dev, VHCA_REG_FATAL_SYNDROME);

		dev_err(&dev->pdev->dev, "ENABLE: FATAL, syndrome %u (%s)\n",
			syn, vhca_fatal_str(syn));
		ret = -EIO;
	}
	if (ret)
		vhca_eq0_stop(dev);
	return ret;
}

static const struct ib_device_ops vhca_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = VHCA_IB_UVERBS_ABI_VERSION,

	.alloc_hw_device_stats = vhca_alloc_hw_device_stats,
	.alloc_hw_port_stats = vhca_alloc_hw_port_stats,
	.alloc_dm = vhca_alloc_dm,
	.alloc_mr = vhca_alloc_mr,
	.alloc_mw = vhca_alloc_mw,
	.alloc_pd = vhca_alloc_pd,
	.alloc_ucontext = vhca_alloc_ucontext,
	.alloc_xrcd = vhca_alloc_xrcd,
	.add_gid = vhca_add_gid,
	VHCA_ADVISE_MR_OP
	.attach_mcast = vhca_attach_mcast,
	.create_ah = vhca_create_ah,
	.create_cq = vhca_create_cq,
	VHCA_CREATE_USER_CQ_OP(vhca_create_cq)
	.create_qp = vhca_create_qp,
	.create_srq = vhca_create_srq,
	.create_user_ah = vhca_create_ah,
	.dealloc_dm = vhca_dealloc_dm,
	.dealloc_mw = vhca_dealloc_mw,
	.dealloc_pd = vhca_dealloc_pd,
	.dealloc_ucontext = vhca_dealloc_ucontext,
	.dealloc_xrcd = vhca_dealloc_xrcd,
	.del_gid = vhca_del_gid,
	.dereg_mr = vhca_dereg_mr,
	.destroy_ah = vhca_destroy_ah,
	.destroy_cq = vhca_destroy_cq,
	.destroy_qp = vhca_destroy_qp,
	.destroy_srq = vhca_destroy_srq,
	.detach_mcast = vhca_detach_mcast,
	.disassociate_ucontext = vhca_disassociate_ucontext,
	.get_dev_fw_str = vhca_get_dev_fw_str,
	.get_dma_mr = vhca_get_dma_mr,
	.get_hw_stats = vhca_get_hw_stats,
	.get_link_layer = vhca_get_link_layer,
	.get_port_immutable = vhca_get_port_immutable,
	.map_mr_sg = vhca_map_mr_sg,
	.mmap = vhca_mmap,
	.mmap_free = vhca_mmap_free,
	.modify_device = vhca_modify_device,
	.modify_port = vhca_modify_port,
	.modify_qp = vhca_modify_qp,
	.modify_srq = vhca_modify_srq,
	.poll_cq = vhca_poll_cq,
	.post_recv = vhca_post_recv,
	.post_send = vhca_post_send,
	.post_srq_recv = vhca_post_srq_recv,
	.process_mad = vhca_process_mad,
	.query_ah = vhca_query_ah,
	.query_device = vhca_query_device,
	.query_gid = vhca_query_gid,
	.query_pkey = vhca_query_pkey,
	.query_port = vhca_query_port,
	.query_qp = vhca_query_qp,
	.query_srq = vhca_query_srq,
	.query_ucontext = vhca_query_ucontext,
	.reg_dm_mr = vhca_reg_dm_mr,
	.reg_user_mr = vhca_reg_user_mr,
	.rereg_user_mr = vhca_rereg_user_mr,
	.req_notify_cq = vhca_req_notify_cq,
	.VHCA_RESIZE_CQ_OP = vhca_resize_cq,

	INIT_RDMA_OBJ_SIZE(ib_ah, vhca_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, vhca_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_mw, vhca_mw, ibmw),
	INIT_RDMA_OBJ_SIZE(ib_pd, vhca_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, vhca_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, vhca_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, vhca_ucontext, ibuctx),
	INIT_RDMA_OBJ_SIZE(ib_xrcd, vhca_xrcd, ibxrcd),
};

static int vhca_ib_register(struct vhca_dev *dev)
{
	struct ib_device *ibdev = &dev->ibdev;
	int ret;

	ibdev->node_type = RDMA_NODE_IB_CA;
	vhca_sma_init_node_desc(dev);
	ibdev->node_guid = cpu_to_be64(dev->attr.node_guid);
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = max_t(u32, dev->nceqs, 1);
	/* /sys/class/infiniband/vhcaN/device -> the PCI function. */
	ibdev->dev.parent = &dev->pdev->dev;
	ib_set_device_ops(ibdev, &vhca_dev_ops);
	/* The driver's uverbs attributes and methods (verbs.c, dm.c). */
	ibdev->driver_def = vhca_uapi_defs;
	/* A NIC already there is paired before registration fills the GIDs. */
	if (dev->roce) {
		ret = vhca_roce_init(dev);
		if (ret)
			return ret;
	}
	ret = ib_register_device(ibdev, "vhca%d", &dev->pdev->dev);
	if (ret) {
		if (dev->roce)
			vhca_roce_fini(dev);
		return ret;
	}
	WRITE_ONCE(dev->registered, true);
	return 0;
}

/* Stops the device and frees what bring-up set up (after the ib_device). */
static void vhca_hw_down(struct vhca_dev *dev)
{
	vhca_ceqs_destroy(dev);
	vhca_reset(dev);
	vhca_eq0_stop(dev);
	cancel_work_sync(&dev->port_work);
	/* EQ 0 is quiet: queued page faults run out (no MR is left). */
	vhca_odp_fini(dev);
	vhca_eq0_free(dev);
	vhca_cmdq_free(dev);
}

static int vhca_hw_up(struct vhca_dev *dev)
{
	int ret;

	ret = vhca_cmdq_init(dev);
	if (ret)
		return ret;
	ret = vhca_eq0_alloc(dev);
	if (ret)
		goto err_cmdq;
	ret = vhca_enable(dev);
	if (ret)
		goto err_eq0;
	ret = vhca_cmd(dev, VHCA_CMD_NOP, NULL, 0, NULL, 0, NULL);
	if (ret) {
		dev_err(&dev->pdev->dev, "NOP command: %d\n", ret);
		goto err_down;
	}
	ret = vhca_query_device_cmd(dev);
	if (ret) {
		dev_err(&dev->pdev->dev, "QUERY_DEVICE: %d\n", ret);
		goto err_down;
	}
	ret = vhca_refresh_port(dev);
	if (ret) {
		dev_err(&dev->pdev->dev, "QUERY_PORT: %d\n", ret);
		goto err_down;
	}
	/* The link layer is the device's configuration, fixed until reset. */
	switch (dev->port.attr.link_layer) {
	case VHCA_LINK_LAYER_IB:
		dev->roce = false;
		break;
	case VHCA_LINK_LAYER_ETHERNET:
		dev->roce = true;
		ether_addr_copy(dev->mac, dev->port.attr.mac);
		if (!is_valid_ether_addr(dev->mac)) {
			dev_err(&dev->pdev->dev,
				"Ethernet port with MAC %pM: not a unicast address\n",
				dev->mac);
			ret = -EINVAL;
			goto err_down;
		}
		break;
	default:
		dev_err(&dev->pdev->dev, "QUERY_PORT: unknown link layer %u\n",
			dev->port.attr.link_layer);
		ret = -EINVAL;
		goto err_down;
	}
	/* Before ib_register_device: it reads the port's SMI capability. */
	vhca_sma_probe(dev);
	ret = vhca_ceqs_create(dev);
	if (ret)
		goto err_down;
	vhca_odp_init(dev);
	return 0;

err_down:
	vhca_reset(dev);
	vhca_eq0_stop(dev);
	cancel_work_sync(&dev->port_work);
err_eq0:
	vhca_eq0_free(dev);
err_cmdq:
	vhca_cmdq_free(dev);
	return ret;
}

static int vhca_map_bars(struct vhca_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;

	if (!(pci_resource_flags(pdev, VHCA_BAR0_INDEX) & IORESOURCE_MEM) ||
	    pci_resource_len(pdev, VHCA_BAR0_INDEX) < VHCA_BAR0_SIZE ||
	    !(pci_resource_flags(pdev, VHCA_BAR2_INDEX) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "BAR0 or BAR2 missing or too small\n");
		return -ENODEV;
	}
	dev->bar0 = pci_iomap(pdev, VHCA_BAR0_INDEX, VHCA_BAR0_SIZE);
	if (!dev->bar0)
		return -ENOMEM;
	return 0;
}

static int vhca_map_uars(struct vhca_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;
	resource_size_t need = (resource_size_t)dev->caps.num_uars *
			       VHCA_UAR_PAGE_SIZE;

	dev->bar2_start = pci_resource_start(pdev, VHCA_BAR2_INDEX);
	dev->bar2_len = pci_resource_len(pdev, VHCA_BAR2_INDEX);
	if (!dev->caps.num_uars || need > dev->bar2_len) {
		dev_err(&pdev->dev, "CAP_NUM_UARS %u does not fit BAR2 (%pa bytes)\n",
			dev->caps.num_uars, &dev->bar2_len);
		return -ENODEV;
	}
	/* Uncached: the device polls these pages (ARCHITECTURE.md §4). */
	dev->bar2 = pci_iomap(pdev, VHCA_BAR2_INDEX, need);
	return dev->bar2 ? 0 : -ENOMEM;
}

/*
 * BAR4, the WAKE page (vhca_abi.h VHCA_WAKE_BAR_INDEX): the kernel rings WAKE
 * there too, since the device serves it without the lock a BAR0 access takes,
 * and user contexts map it (verbs.c). A device without it still works: the
 * kernel rings BAR0 WAKE and user doorbells wait for the device's rescan.
 */
static void vhca_map_wake(struct vhca_dev *dev)
{
	struct pci_dev *pdev = dev->pdev;

	if (!(pci_resource_flags(pdev, VHCA_WAKE_BAR_INDEX) & IORESOURCE_MEM) ||
	    pci_resource_len(pdev, VHCA_WAKE_BAR_INDEX) < VHCA_WAKE_BAR_SIZE) {
		dev_info(&pdev->dev,
			 "no WAKE page (BAR4): user doorbells rely on the device's rescan\n");
		return;
	}
	dev->wake_start = pci_resource_start(pdev, VHCA_WAKE_BAR_INDEX);
	dev->wake = pci_iomap(pdev, VHCA_WAKE_BAR_INDEX, VHCA_WAKE_BAR_SIZE);
}

static int vhca_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct vhca_dev *dev;
	int ret, nvec;

	dev = ib_alloc_device(vhca_dev, ibdev);
	if (!dev)
		return -ENOMEM;
	dev->pdev = pdev;
	pci_set_drvdata(pdev, dev);
	xa_init_flags(&dev->qp_xa, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->cq_xa, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->srq_xa, XA_FLAGS_LOCK_IRQ);
	xa_init(&dev->odp.mrs);
	mutex_init(&dev->odp.list_lock);
	ida_init(&dev->uar_ida);
	spin_lock_init(&dev->port.lock);
	INIT_WORK(&dev->port_work, vhca_port_work);
	mutex_init(&dev->ctx_lock);
	mutex_init(&dev->sma_lock);
	vhca_counters_dev_init(dev);
	vhca_uar_init(&dev->kuar, VHCA_UAR_KERNEL_UAR);

	ret = pci_enable_device(pdev);
	if (ret)
		goto err_dealloc;
	ret = pci_request_regions(pdev, VHCA_DRV_NAME);
	if (ret)
		goto err_disable;
	pci_set_master(pdev);
	ret = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (ret)
		goto err_regions;
	ret = vhca_map_bars(dev);
	if (ret)
		goto err_regions;

	/* A BAR that is not ours fails here, before any write. */
	ret = vhca_check_identity(dev);
	if (ret)
		goto err_bar0;
	ret = vhca_reset(dev);
	if (ret)
		goto err_bar0;
	ret = vhca_check_identity(dev);
	if (ret)
		goto err_bar0;
	vhca_read_caps(dev);
	ret = vhca_map_uars(dev);
	if (ret)
		goto err_bar0;
	vhca_map_wake(dev);
	vhca_dm_init(dev);

	nvec = min_t(u32, dev->caps.msix_vectors, num_online_cpus() + 1);
	nvec = pci_alloc_irq_vectors(pdev, 1, max(nvec, 1), PCI_IRQ_MSIX);
	if (nvec < 0) {
		ret = nvec;
		dev_err(&pdev->dev, "MSI-X: %d\n", ret);
		goto err_bar2;
	}
	dev->nvec = nvec;

	ret = vhca_hw_up(dev);
	if (ret)
		goto err_vectors;
	ret = vhca_ib_register(dev);
	if (ret) {
		dev_err(&pdev->dev, "ib_register_device: %d\n", ret);
		goto err_hw;
	}
	vhca_debugfs_add(dev);
	if (dev->roce)
		dev_info(&pdev->dev,
			 "%s: ABI %u.%u, %u UARs, %d MSI-X vectors (%u completion EQs), caps %#x, RoCEv2 port MAC %pM\n",
			 dev_name(&dev->ibdev.dev), VHCA_ABI_VERSION >> 16,
			 VHCA_ABI_VERSION & 0xffff, dev->caps.num_uars,
			 dev->nvec, dev->nceqs, dev->attr.cap_flags, dev->mac);
	else
		dev_info(&pdev->dev,
			 "%s: ABI %u.%u, %u UARs, %d MSI-X vectors (%u completion EQs), caps %#x, port LID %u state %u, %s\n",
			 dev_name(&dev->ibdev.dev), VHCA_ABI_VERSION >> 16,
			 VHCA_ABI_VERSION & 0xffff, dev->caps.num_uars,
			 dev->nvec, dev->nceqs, dev->attr.cap_flags,
			 dev->port.attr.lid, dev->port.attr.state,
			 dev->sma ? "SMA and QP0" : "no SMA");
	return 0;

err_hw:
	vhca_hw_down(dev);
err_vectors:
	pci_free_irq_vectors(pdev);
err_bar2:
	vhca_dm_fini(dev);
	if (dev->wake)
		pci_iounmap(pdev, dev->wake);
	pci_iounmap(pdev, dev->bar2);
err_bar0:
	pci_iounmap(pdev, dev->bar0);
err_regions:
	pci_release_regions(pdev);
err_disable:
	pci_disable_device(pdev);
err_dealloc:
	ida_destroy(&dev->uar_ida);
	ib_dealloc_device(&dev->ibdev);
	return ret;
}

static void vhca_remove(struct pci_dev *pdev)
{
	struct vhca_dev *dev = pci_get_drvdata(pdev);

	vhca_debugfs_remove(dev);
	WRITE_ONCE(dev->registered, false);
	/* Let go of the NIC first: its removal must never wait on ours. */
	if (dev->roce)
		vhca_roce_fini(dev);
	ib_unregister_device(&dev->ibdev);
	vhca_hw_down(dev);
	pci_free_irq_vectors(pdev);
	vhca_dm_fini(dev);
	if (dev->wake)
		pci_iounmap(pdev, dev->wake);
	pci_iounmap(pdev, dev->bar2);
	pci_iounmap(pdev, dev->bar0);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
	WARN_ON(!xa_empty(&dev->qp_xa) || !xa_empty(&dev->cq_xa) ||
		!xa_empty(&dev->srq_xa));
	xa_destroy(&dev->qp_xa);
	xa_destroy(&dev->cq_xa);
	xa_destroy(&dev->srq_xa);
	ida_destroy(&dev->uar_ida);
	ib_dealloc_device(&dev->ibdev);
}

/* Reboot / kexec: the device must stop writing guest memory. */
static void vhca_shutdown(struct pci_dev *pdev)
{
	struct vhca_dev *dev = pci_get_drvdata(pdev);

	if (dev && dev->bar0)
		vhca_wr(dev, VHCA_REG_DEV_CTRL, VHCA_DEV_CTRL_RESET);
}

static struct pci_driver vhca_pci_driver = {
	.name = VHCA_DRV_NAME,
	.id_table = vhca_pci_tbl,
	.probe = vhca_probe,
	.remove = vhca_remove,
	.shutdown = vhca_shutdown,
};

static int __init vhca_init(void)
{
	int ret;

	ret = vhca_counters_init();
	if (ret)
		return ret;
	vhca_debugfs_init();
	ret = pci_register_driver(&vhca_pci_driver);
	if (ret) {
		vhca_debugfs_exit();
		vhca_counters_exit();
	}
	return ret;
}

static void __exit vhca_exit(void)
{
	pci_unregister_driver(&vhca_pci_driver);
	vhca_debugfs_exit();
	vhca_counters_exit();
}

module_init(vhca_init);
module_exit(vhca_exit);
