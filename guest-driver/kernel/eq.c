// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Event queues (vhca_abi.h "Completion and event queue entries"): EQ 0 on
 * vector 0 carries COMMAND_DONE and every asynchronous event; completion EQs,
 * one per further MSI-X vector, carry COMPLETION events of the CQs bound to
 * them. EQEs use the owner-bit convention; after an interrupt the driver
 * consumes the EQEs, stores ci, stores a new arm word, and looks once more
 * (an EQE written between the last look and the arm would otherwise wait for
 * the next interrupt).
 */

#include <linux/interrupt.h>

#include "vhca.h"

static bool vhca_eq_peek(struct vhca_eq *eq, struct vhca_eqe **out)
{
	u32 mask = (1U << eq->log2) - 1;
	struct vhca_eqe *e = &eq->ring[eq->ci & mask];
	/* Pass p over the ring writes owner = 1 - (p mod 2). */
	u8 want = ((eq->ci >> eq->log2) & 1) ? 0 : VHCA_OWNER_BIT;

	if ((READ_ONCE(e->owner) & VHCA_OWNER_BIT) != want)
		return false;
	/* The owner byte first, then the rest (device writes it last). */
	dma_rmb();
	*out = e;
	return true;
}

static void vhca_eq_arm(struct vhca_eq *eq)
{
	eq->arm_sn++;
	writel(eq->arm_sn, eq->db + offsetof(struct vhca_eq_doorbell, arm));
}

static void vhca_eq_set_ci(struct vhca_eq *eq)
{
	writel(eq->ci, eq->db + offsetof(struct vhca_eq_doorbell, ci));
}

static void vhca_eq0_dispatch(struct vhca_dev *dev, const struct vhca_eqe *e)
{
	switch (e->kind) {
	case VHCA_EQE_COMMAND_DONE:
		vhca_cmdq_event(dev, e->object);
		break;
	case VHCA_EQE_COMPLETION:
	case VHCA_EQE_CQ_ERR:
		vhca_cq_event(dev, e->object, e->kind);
		break;
	case VHCA_EQE_QP_FATAL:
	case VHCA_EQE_QP_REQ_ERR:
	case VHCA_EQE_QP_ACCESS_ERR:
	case VHCA_EQE_COMM_EST:
	case VHCA_EQE_SQ_DRAINED:
	case VHCA_EQE_PATH_MIG:
	case VHCA_EQE_PATH_MIG_ERR:
	case VHCA_EQE_QP_LAST_WQE_REACHED:
	case VHCA_EQE_WQ_FATAL:
		vhca_qp_event(dev, e->object, e->kind);
		break;
	case VHCA_EQE_SRQ_ERR:
	case VHCA_EQE_SRQ_LIMIT_REACHED:
		vhca_srq_event(dev, e->object, e->kind);
		break;
	case VHCA_EQE_PAGE_FAULT:
		vhca_odp_eqe(dev, e);
		break;
	case VHCA_EQE_DEVICE_FATAL:
		vhca_cmdq_kill(dev, "DEVICE_FATAL event");
		fallthrough;
	case VHCA_EQE_PORT_ACTIVE:
	case VHCA_EQE_PORT_ERR:
	case VHCA_EQE_LID_CHANGE:
	case VHCA_EQE_PKEY_CHANGE:
	case VHCA_EQE_SM_CHANGE:
	case VHCA_EQE_CLIENT_REREGISTER:
	case VHCA_EQE_GID_CHANGE:
		/* QUERY_PORT sleeps: refresh the cache, then dispatch. */
		set_bit(e->kind, &dev->port_events);
		schedule_work(&dev->port_work);
		break;
	default:
		dev_warn_ratelimited(&dev->pdev->dev,
				     "EQ 0: unknown EQE kind %#x object %u\n",
				     e->kind, e->object);
	}
}

static void vhca_ceq_dispatch(struct vhca_eq *eq, const struct vhca_eqe *e)
{
	if (e->kind == VHCA_EQE_COMPLETION)
		vhca_cq_event(eq->dev, e->object, e->kind);
	else
		dev_warn_ratelimited(&eq->dev->pdev->dev,
				     "EQ %u: unexpected EQE kind %#x object %u\n",
				     eq->eqn, e->kind, e->object);
}

static irqreturn_t vhca_eq_irq(int irq, void *data)
{
	struct vhca_eq *eq = data;
	struct vhca_dev *dev = eq->dev;
	struct vhca_eqe *e;
	unsigned int n = 0;

	eq->interrupts++;
	for (;;) {
		while (vhca_eq_peek(eq, &e)) {
			if (eq == &dev->eq0)
				vhca_eq0_dispatch(dev, e);
			else
				vhca_ceq_dispatch(eq, e);
			eq->ci++;
			eq->eqes++;
			/* Give entries back as we go: EQ 0 overflow is fatal. */
			if (!(++n & 63))
				vhca_eq_set_ci(eq);
		}
		vhca_eq_set_ci(eq);
		vhca_eq_arm(eq);
		/* The arm store before the last look (the device's mirror). */
		mb();
		if (!vhca_eq_peek(eq, &e))
			break;
	}
	return IRQ_HANDLED;
}

static int vhca_eq_ring_alloc(struct vhca_dev *dev, struct vhca_eq *eq,
			      u32 log2)
{
	eq->dev = dev;
	eq->log2 = log2;
	eq->ring_bytes = PAGE_ALIGN((size_t)VHCA_EQE_SIZE << log2);
	eq->ring = dma_alloc_coherent(&dev->pdev->dev, eq->ring_bytes,
				      &eq->ring_dma, GFP_KERNEL);
	if (!eq->ring)
		return -ENOMEM;
	memset(eq->ring, 0, eq->ring_bytes);
	eq->ci = 0;
	eq->arm_sn = 0;
	return 0;
}

static void vhca_eq_ring_free(struct vhca_dev *dev, struct vhca_eq *eq)
{
	if (eq->ring)
		dma_free_coherent(&dev->pdev->dev, eq->ring_bytes, eq->ring,
				  eq->ring_dma);
	eq->ring = NULL;
}

static int vhca_eq_request_irq(struct vhca_dev *dev, struct vhca_eq *eq)
{
	int ret;

	eq->irq = pci_irq_vector(dev->pdev, eq->vector);
	if (eq->irq < 0)
		return eq->irq;
	ret = request_irq(eq->irq, vhca_eq_irq, 0, eq->name, eq);
	if (!ret)
		eq->irq_requested = true;
	return ret;
}

static void vhca_eq_free_irq(struct vhca_eq *eq)
{
	if (eq->irq_requested)
		free_irq(eq->irq, eq);
	eq->irq_requested = false;
}

/* EQ 0's ring, before its address goes into BAR0. */
int vhca_eq0_alloc(struct vhca_dev *dev)
{
	struct vhca_eq *eq = &dev->eq0;
	u32 log2 = min_t(u32, VHCA_EQ0_LOG2, dev->caps.max_eq_log2);

	if (!log2)
		return -EINVAL;
	eq->eqn = VHCA_ASYNC_EQN;
	eq->vector = VHCA_MSIX_VECTOR_ASYNC;
	eq->slot = VHCA_UAR_EQ0_SLOT;
	eq->db = vhca_slot_addr(dev, VHCA_UAR_KERNEL_UAR, VHCA_UAR_EQ0_SLOT);
	snprintf(eq->name, sizeof(eq->name), "vhca-async@%s",
		 pci_name(dev->pdev));
	return vhca_eq_ring_alloc(dev, eq, log2);
}

/* Vector 0's handler, then the arm (bring-up step before ENABLE). */
int vhca_eq0_start(struct vhca_dev *dev)
{
	struct vhca_eq *eq = &dev->eq0;
	int ret;

	ret = vhca_eq_request_irq(dev, eq);
	if (ret)
		return ret;
	vhca_eq_set_ci(eq);
	vhca_eq_arm(eq);
	return 0;
}

void vhca_eq0_stop(struct vhca_dev *dev)
{
	vhca_eq_free_irq(&dev->eq0);
}

void vhca_eq0_free(struct vhca_dev *dev)
{
	vhca_eq_ring_free(dev, &dev->eq0);
}

static int vhca_ceq_create(struct vhca_dev *dev, struct vhca_eq *eq,
			   u16 vector)
{
	u32 log2 = min_t(u32, VHCA_CEQ_LOG2, dev->caps.max_eq_log2);
	struct vhca_create_eq_in in = {};
	struct vhca_create_eq_out out;
	int slot, ret;

	eq->vector = vector;
	snprintf(eq->name, sizeof(eq->name), "vhca-comp%u@%s", vector - 1,
		 pci_name(dev->pdev));
	ret = vhca_eq_ring_alloc(dev, eq, log2);
	if (ret)
		return ret;
	slot = vhca_slot_alloc(&dev->kuar);
	if (slot < 0) {
		ret = slot;
		goto err_ring;
	}
	eq->slot = slot;
	eq->db = vhca_slot_addr(dev, VHCA_UAR_KERNEL_UAR, slot);
	writel(0, eq->db + offsetof(struct vhca_eq_doorbell, ci));
	writel(0, eq->db + offsetof(struct vhca_eq_doorbell, arm));
	ret = vhca_eq_request_irq(dev, eq);
	if (ret)
		goto err_slot;

	in.ring.addr = eq->ring_dma;
	in.ring.npages = eq->ring_bytes >> VHCA_PBL_MIN_PAGE_SHIFT;
	in.ring.page_shift = VHCA_PBL_MIN_PAGE_SHIFT;
	in.ring.levels = VHCA_PBL_CONTIGUOUS;
	in.uar = VHCA_UAR_KERNEL_UAR;
	in.db_slot = eq->slot;
	in.vector = vector;
	in.log2_entries = log2;
	ret = vhca_cmd(dev, VHCA_CMD_CREATE_EQ, &in, sizeof(in), &out,
		       sizeof(out), NULL);
	if (ret)
		goto err_irq;
	eq->eqn = out.eqn;
	eq->created = true;
	vhca_eq_arm(eq);
	return 0;

err_irq:
	vhca_eq_free_irq(eq);
err_slot:
	vhca_slot_free(&dev->kuar, eq->slot);
err_ring:
	vhca_eq_ring_free(dev, eq);
	return ret;
}

/*
 * One completion EQ per vector after 0. If none can be made, CQs use EQ 0
 * (eqn 0, allowed by CREATE_CQ) and the device has one completion vector.
 */
int vhca_ceqs_create(struct vhca_dev *dev)
{
	u32 want = dev->nvec > 1 ? dev->nvec - 1 : 0;
	u32 i;
	int ret;

	if (dev->caps.max_eq > 1)
		want = min(want, dev->caps.max_eq - 1);
	else
		want = 0;
	dev->nceqs = 0;
	if (!want)
		return 0;
	dev->ceqs = kcalloc(want, sizeof(*dev->ceqs), GFP_KERNEL);
	if (!dev->ceqs)
		return -ENOMEM;
	for (i = 0; i < want; i++) {
		ret = vhca_ceq_create(dev, &dev->ceqs[i],
				      VHCA_MSIX_VECTOR_FIRST_COMP + i);
		if (ret) {
			dev_warn(&dev->pdev->dev,
				 "completion EQ on vector %u: %d; using %u\n",
				 VHCA_MSIX_VECTOR_FIRST_COMP + i, ret, i);
			break;
		}
		dev->nceqs++;
	}
	return 0;
}

/* DESTROY_EQ (best effort), interrupts off, rings freed. */
void vhca_ceqs_destroy(struct vhca_dev *dev)
{
	u32 i;

	for (i = 0; i < dev->nceqs; i++) {
		struct vhca_eq *eq = &dev->ceqs[i];
		struct vhca_destroy_eq_in in = { .eqn = eq->eqn };

		if (eq->created &&
		    vhca_cmd(dev, VHCA_CMD_DESTROY_EQ, &in, sizeof(in), NULL, 0,
			     NULL))
			dev_warn(&dev->pdev->dev, "DESTROY_EQ %u failed\n",
				 eq->eqn);
		eq->created = false;
		vhca_eq_free_irq(eq);
		vhca_slot_free(&dev->kuar, eq->slot);
		vhca_eq_ring_free(dev, eq);
	}
	kfree(dev->ceqs);
	dev->ceqs = NULL;
	dev->nceqs = 0;
}

u32 vhca_comp_eqn(struct vhca_dev *dev, int comp_vector)
{
	if (!dev->nceqs)
		return VHCA_ASYNC_EQN;
	return dev->ceqs[(u32)comp_vector % dev->nceqs].eqn;
}
