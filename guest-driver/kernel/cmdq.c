// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The command queue (vhca_abi.h "Command queue"): a ring of 64-byte slots in
 * coherent memory, parameters inline or in a one-page mailbox, the owner byte
 * handed to the device last and given back by it last.
 *
 * Commands run one at a time under a mutex: every verb that needs one sleeps
 * anyway, and the device executes strictly in order, so a deeper queue would
 * buy nothing but bookkeeping. The driver waits either for the COMMAND_DONE
 * event on EQ 0 (VHCA_CMD_F_EVENT, vector 0) or, with cmd_events=0, by polling
 * the owner byte.
 */

#include <linux/delay.h>
#include <linux/jiffies.h>
#include <linux/module.h>

#include "vhca.h"

static unsigned int cmd_timeout_ms = 10000;
module_param(cmd_timeout_ms, uint, 0644);
MODULE_PARM_DESC(cmd_timeout_ms,
		 "Time a device command may take before the queue is declared dead (ms, default 10000)");

static bool cmd_events = true;
module_param(cmd_events, bool, 0444);
MODULE_PARM_DESC(cmd_events,
		 "Sleep on COMMAND_DONE events instead of polling the owner byte (default 1)");

int vhca_cmdq_init(struct vhca_dev *dev)
{
	struct vhca_cmdq *q = &dev->cmdq;
	struct device *d = &dev->pdev->dev;

	q->log2 = min_t(u32, VHCA_CMDQ_LOG2, dev->caps.max_cmdq_log2);
	if (!q->log2)
		return -EINVAL;
	/* dma_alloc_coherent memory is page aligned: the 4 KiB rule holds. */
	q->ring = dma_alloc_coherent(d, max_t(size_t, PAGE_SIZE,
					      VHCA_CMD_SLOT_SIZE << q->log2),
				     &q->ring_dma, GFP_KERNEL);
	q->in_mb = dma_alloc_coherent(d, VHCA_CMD_MAILBOX_MAX, &q->in_mb_dma,
				      GFP_KERNEL);
	q->out_mb = dma_alloc_coherent(d, VHCA_CMD_MAILBOX_MAX, &q->out_mb_dma,
				       GFP_KERNEL);
	if (!q->ring || !q->in_mb || !q->out_mb) {
		vhca_cmdq_free(dev);
		return -ENOMEM;
	}
	q->pi = 0;
	q->events = cmd_events;
	mutex_init(&q->lock);
	init_completion(&q->done);
	return 0;
}

void vhca_cmdq_free(struct vhca_dev *dev)
{
	struct vhca_cmdq *q = &dev->cmdq;
	struct device *d = &dev->pdev->dev;

	if (q->ring)
		dma_free_coherent(d, max_t(size_t, PAGE_SIZE,
					   VHCA_CMD_SLOT_SIZE << q->log2),
				  q->ring, q->ring_dma);
	if (q->in_mb)
		dma_free_coherent(d, VHCA_CMD_MAILBOX_MAX, q->in_mb,
				  q->in_mb_dma);
	if (q->out_mb)
		dma_free_coherent(d, VHCA_CMD_MAILBOX_MAX, q->out_mb,
				  q->out_mb_dma);
	q->ring = NULL;
	q->in_mb = NULL;
	q->out_mb = NULL;
}

/* EQ 0 handler: a COMMAND_DONE event (hard IRQ context). */
void vhca_cmdq_event(struct vhca_dev *dev, u16 token)
{
	struct vhca_cmdq *q = &dev->cmdq;

	if (token == READ_ONCE(q->wait_token))
		complete(&q->done);
}

/*
 * The device stopped answering (or reported FATAL): fail every later command
 * at once instead of waiting a timeout each. The state is kept for debugfs.
 */
void vhca_cmdq_kill(struct vhca_dev *dev, const char *why)
{
	if (!READ_ONCE(dev->cmdq.dead))
		dev_err(&dev->pdev->dev,
			"command queue dead (%s): DEV_STATUS %#x FATAL_SYNDROME %u CMDQ_CI %u\n",
			why, vhca_rd(dev, VHCA_REG_DEV_STATUS),
			vhca_rd(dev, VHCA_REG_FATAL_SYNDROME),
			vhca_rd(dev, VHCA_REG_CMDQ_CI));
	WRITE_ONCE(dev->cmdq.dead, true);
}

static bool vhca_cmd_owned_by_device(struct vhca_cmd *slot)
{
	return READ_ONCE(slot->owner) & VHCA_CMD_OWNER_DEVICE;
}

static int vhca_cmd_poll(struct vhca_dev *dev, struct vhca_cmd *slot)
{
	unsigned long deadline = jiffies + msecs_to_jiffies(cmd_timeout_ms);
	unsigned int us = 10;

	while (vhca_cmd_owned_by_device(slot)) {
		if (time_after(jiffies, deadline))
			return -ETIMEDOUT;
		usleep_range(us, 2 * us);
		us = min(us * 2, 1000U);
	}
	return 0;
}

static int vhca_cmd_wait(struct vhca_dev *dev, struct vhca_cmd *slot,
			 bool event)
{
	struct vhca_cmdq *q = &dev->cmdq;

	if (!event)
		return vhca_cmd_poll(dev, slot);
	if (wait_for_completion_timeout(&q->done,
					msecs_to_jiffies(cmd_timeout_ms)))
		return 0;
	if (vhca_cmd_owned_by_device(slot))
		return -ETIMEDOUT;
	/* Done but no event: interrupts do not reach us. Poll from now on. */
	dev_warn(&dev->pdev->dev,
		 "command done without a COMMAND_DONE event; polling from now on\n");
	q->events = false;
	return 0;
}

/*
 * Runs one command: `in` (in_len bytes, inline when it fits, else in the in
 * mailbox) and, on success, copies out_len bytes of output to `out`. Returns
 * 0 or the errno of the device's status (vhca_status_errno); `status`, if
 * given, gets the raw status (VHCA_STATUS_AGAIN etc.), 0xff if the command
 * never completed.
 */
int vhca_cmd(struct vhca_dev *dev, u16 opcode, const void *in, size_t in_len,
	     void *out, size_t out_len, u8 *status)
{
	struct vhca_cmdq *q = &dev->cmdq;
	struct vhca_cmd *slot;
	bool event;
	int ret;

	if (status)
		*status = 0xff;
	if (WARN_ON(in_len > VHCA_CMD_MAILBOX_MAX ||
		    out_len > VHCA_CMD_MAILBOX_MAX))
		return -EINVAL;

	mutex_lock(&q->lock);
	if (READ_ONCE(q->dead)) {
		ret = -EIO;
		goto out;
	}

	slot = &q->ring[q->pi & ((1U << q->log2) - 1)];
	/* Free-running indices and one command at a time: the slot is ours. */
	if (WARN_ON_ONCE(vhca_cmd_owned_by_device(slot))) {
		vhca_cmdq_kill(dev, "slot still owned by the device");
		ret = -EIO;
		goto out;
	}
	memset(slot, 0, sizeof(*slot));
	slot->opcode = opcode;
	if (!++q->token)	/* 0 means "not waiting" (wait_token) */
		q->token = 1;
	slot->token = q->token;
	if (in_len > VHCA_CMD_INLINE_SIZE) {
		memcpy(q->in_mb, in, in_len);
		slot->in_mailbox = q->in_mb_dma;
		slot->in_len = in_len;
	} else if (in_len) {
		memcpy(slot->data, in, in_len);
	}
	if (out_len > VHCA_CMD_INLINE_SIZE) {
		memset(q->out_mb, 0, out_len);
		slot->out_mailbox = q->out_mb_dma;
		slot->out_len = out_len;
	}
	event = q->events;
	if (event) {
		slot->flags = VHCA_CMD_F_EVENT;
		reinit_completion(&q->done);
		WRITE_ONCE(q->wait_token, slot->token);
	}
	/* Everything else in the slot before the owner byte (vhca_abi.h). */
	dma_wmb();
	WRITE_ONCE(slot->owner, VHCA_CMD_OWNER_DEVICE);
	q->pi++;
	q->posted++;
	/* writel orders the slot's stores before the doorbell. */
	vhca_wr(dev, VHCA_REG_CMDQ_PI, q->pi);

	ret = vhca_cmd_wait(dev, slot, event);
	WRITE_ONCE(q->wait_token, 0);
	if (ret) {
		dev_err(&dev->pdev->dev, "command %#x (token %u) timed out\n",
			opcode, slot->token);
		vhca_cmdq_kill(dev, "timeout");
		ret = -EIO;
		goto out;
	}
	/* The device wrote the outputs before clearing owner (release). */
	dma_rmb();
	if (status)
		*status = slot->status;
	ret = vhca_status_errno(slot->status);
	if (ret) {
		q->failed++;
		q->last_fail_opcode = opcode;
		q->last_fail_status = slot->status;
		q->last_fail_syndrome = slot->syndrome;
		dev_dbg(&dev->pdev->dev,
			"command %#x failed: status %u syndrome %#x\n", opcode,
			slot->status, slot->syndrome);
		goto out;
	}
	if (out_len > VHCA_CMD_INLINE_SIZE)
		memcpy(out, q->out_mb, out_len);
	else if (out_len)
		memcpy(out, slot->data, out_len);
out:
	mutex_unlock(&q->lock);
	return ret;
}
