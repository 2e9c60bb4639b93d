// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * debugfs: /sys/kernel/debug/vhca/<pci address>/
 *
 *   qp cq srq mr eq   write a number (QPN, CQN, SRQN, MR key index, EQN),
 *                     read the device's live context entry through the BAR0
 *                     window (CTX_TABLE / CTX_INDEX / CTX_WINDOW, ARCHITECTURE.md
 *                     §4), decoded field by field, then as raw words
 *   regs              BAR0 status and capability registers, command queue
 *                     and EQ counters
 *   objects           the QPNs, CQNs and SRQNs the driver holds
 *   odp               on-demand paging: faults, mappings, invalidations,
 *                     prefetches (odp.c)
 *
 * Every window read is a few dozen trapped BAR0 reads (~100 us each): fine
 * for a person, not for a loop.
 */

#include <linux/debugfs.h>
#include <linux/seq_file.h>
#include <linux/uaccess.h>

#include "vhca.h"

static struct dentry *vhca_debugfs_root;

struct vhca_ctx_field {
	const char *name;
	u16 off;
	u8 size;
};

#define FIELD(t, f) { #f, offsetof(struct t, f), sizeof_field(struct t, f) }
#define PBL_FIELDS(t, p)                                                      \
	FIELD(t, p.addr), FIELD(t, p.npages), FIELD(t, p.page_shift),         \
	FIELD(t, p.levels)

static const struct vhca_ctx_field vhca_qpc_fields[] = {
	FIELD(vhca_qp_context, qpn), FIELD(vhca_qp_context, qp_type),
	FIELD(vhca_qp_context, state), FIELD(vhca_qp_context, pdn),
	FIELD(vhca_qp_context, send_cqn), FIELD(vhca_qp_context, recv_cqn),
	FIELD(vhca_qp_context, srqn), FIELD(vhca_qp_context, dest_qpn),
	FIELD(vhca_qp_context, qkey), FIELD(vhca_qp_context, access),
	FIELD(vhca_qp_context, sq_psn), FIELD(vhca_qp_context, sq_una_psn),
	FIELD(vhca_qp_context, rq_psn), FIELD(vhca_qp_context, sq_pi),
	FIELD(vhca_qp_context, sq_ci), FIELD(vhca_qp_context, sq_done),
	FIELD(vhca_qp_context, rq_pi), FIELD(vhca_qp_context, rq_ci),
	FIELD(vhca_qp_context, uar), FIELD(vhca_qp_context, db_slot),
	FIELD(vhca_qp_context, pkey_index), FIELD(vhca_qp_context, path_mtu),
	FIELD(vhca_qp_context, port), FIELD(vhca_qp_context, log2_sq_size),
	FIELD(vhca_qp_context, log2_rq_size),
	FIELD(vhca_qp_context, sq_wqe_shift),
	FIELD(vhca_qp_context, rq_wqe_shift), FIELD(vhca_qp_context, timeout),
	FIELD(vhca_qp_context, retry_cnt), FIELD(vhca_qp_context, rnr_retry),
	FIELD(vhca_qp_context, min_rnr_timer),
	FIELD(vhca_qp_context, max_rd_atomic),
	FIELD(vhca_qp_context, max_dest_rd_atomic),
	FIELD(vhca_qp_context, sq_sig_all),
	FIELD(vhca_qp_context, av.dgid), FIELD(vhca_qp_context, av.flow_label),
	FIELD(vhca_qp_context, av.dlid), FIELD(vhca_qp_context, av.sl),
	FIELD(vhca_qp_context, av.src_path_bits),
	FIELD(vhca_qp_context, av.static_rate),
	FIELD(vhca_qp_context, av.is_global),
	FIELD(vhca_qp_context, av.sgid_index),
	FIELD(vhca_qp_context, av.hop_limit),
	FIELD(vhca_qp_context, av.traffic_class),
	FIELD(vhca_qp_context, av.port_num),
	FIELD(vhca_qp_context, tx_packets), FIELD(vhca_qp_context, rx_packets),
	FIELD(vhca_qp_context, retransmits), FIELD(vhca_qp_context, rnr_naks),
	PBL_FIELDS(vhca_qp_context, sq), PBL_FIELDS(vhca_qp_context, rq),
};

static const struct vhca_ctx_field vhca_cqc_fields[] = {
	FIELD(vhca_cq_context, cqn), FIELD(vhca_cq_context, eqn),
	FIELD(vhca_cq_context, uar), FIELD(vhca_cq_context, db_slot),
	FIELD(vhca_cq_context, log2_entries), FIELD(vhca_cq_context, flags),
	FIELD(vhca_cq_context, pi), FIELD(vhca_cq_context, ci),
	FIELD(vhca_cq_context, arm), FIELD(vhca_cq_context, users),
	FIELD(vhca_cq_context, events), PBL_FIELDS(vhca_cq_context, ring),
};

static const struct vhca_ctx_field vhca_srqc_fields[] = {
	FIELD(vhca_srq_context, srqn), FIELD(vhca_srq_context, pdn),
	FIELD(vhca_srq_context, max_wr), FIELD(vhca_srq_context, max_sge),
	FIELD(vhca_srq_context, srq_limit), FIELD(vhca_srq_context, pi),
	FIELD(vhca_srq_context, ci), FIELD(vhca_srq_context, uar),
	FIELD(vhca_srq_context, db_slot),
	FIELD(vhca_srq_context, log2_entries),
	FIELD(vhca_srq_context, wqe_shift), FIELD(vhca_srq_context, users),
	FIELD(vhca_srq_context, flags), PBL_FIELDS(vhca_srq_context, ring),
};

static const struct vhca_ctx_field vhca_mpt_fields[] = {
	FIELD(vhca_mr_context, key), FIELD(vhca_mr_context, pdn),
	FIELD(vhca_mr_context, access), FIELD(vhca_mr_context, npages),
	FIELD(vhca_mr_context, iova), FIELD(vhca_mr_context, length),
	FIELD(vhca_mr_context, first_page), FIELD(vhca_mr_context, page_shift),
	FIELD(vhca_mr_context, flags),
};

static const struct vhca_ctx_field vhca_eqc_fields[] = {
	FIELD(vhca_eq_context, eqn), FIELD(vhca_eq_context, uar),
	FIELD(vhca_eq_context, db_slot), FIELD(vhca_eq_context, vector),
	FIELD(vhca_eq_context, log2_entries), FIELD(vhca_eq_context, flags),
	FIELD(vhca_eq_context, pi), FIELD(vhca_eq_context, ci),
	FIELD(vhca_eq_context, arm), FIELD(vhca_eq_context, interrupts),
	PBL_FIELDS(vhca_eq_context, ring),
};

static const struct {
	const char *name;
	size_t size;
	const struct vhca_ctx_field *fields;
	size_t nfields;
} vhca_ctx_tables[] = {
	[VHCA_CTX_QPC] = { "qp", sizeof(struct vhca_qp_context),
			   vhca_qpc_fields, ARRAY_SIZE(vhca_qpc_fields) },
	[VHCA_CTX_CQC] = { "cq", sizeof(struct vhca_cq_context),
			   vhca_cqc_fields, ARRAY_SIZE(vhca_cqc_fields) },
	[VHCA_CTX_SRQC] = { "srq", sizeof(struct vhca_srq_context),
			    vhca_srqc_fields, ARRAY_SIZE(vhca_srqc_fields) },
	[VHCA_CTX_MPT] = { "mr", sizeof(struct vhca_mr_context),
			   vhca_mpt_fields, ARRAY_SIZE(vhca_mpt_fields) },
	[VHCA_CTX_EQC] = { "eq", sizeof(struct vhca_eq_context),
			   vhca_eqc_fields, ARRAY_SIZE(vhca_eqc_fields) },
};

static void vhca_ctx_show_field(struct seq_file *m, const u8 *rec,
				const struct vhca_ctx_field *f)
{
	const u8 *p = rec + f->off;

	switch (f->size) {
	case 1:
		seq_printf(m, "%-20s %u\n", f->name, *p);
		break;
	case 2:
		seq_printf(m, "%-20s %u\n", f->name, get_unaligned_le16(p));
		break;
	case 4:
		seq_printf(m, "%-20s %u (%#x)\n", f->name,
			   get_unaligned_le32(p), get_unaligned_le32(p));
		break;
	case 8:
		seq_printf(m, "%-20s %llu (%#llx)\n", f->name,
			   get_unaligned_le64(p), get_unaligned_le64(p));
		break;
	case 16:
		seq_printf(m, "%-20s %pI6\n", f->name, p);
		break;
	}
}

static int vhca_ctx_show(struct seq_file *m, void *unused)
{
	struct vhca_dbg_ctx *c = m->private;
	struct vhca_dev *dev = c->dev;
	size_t size = vhca_ctx_tables[c->table].size;
	static const char *const statuses[] = {
		[VHCA_CTX_STATUS_OK] = "ok",
		[VHCA_CTX_STATUS_NO_OBJECT] = "no such object",
		[VHCA_CTX_STATUS_BAD_TABLE] = "bad table",
	};
	u32 rec[VHCA_REG_CTX_WINDOW_SIZE / 4];
	u32 status, i;

	BUILD_BUG_ON(sizeof(struct vhca_qp_context) > VHCA_REG_CTX_WINDOW_SIZE);
	mutex_lock(&dev->ctx_lock);
	vhca_wr(dev, VHCA_REG_CTX_TABLE, c->table);
	/* Writing the index takes the snapshot. */
	vhca_wr(dev, VHCA_REG_CTX_INDEX, c->index);
	status = vhca_rd(dev, VHCA_REG_CTX_STATUS);
	for (i = 0; i < size / 4; i++)
		rec[i] = vhca_rd(dev, VHCA_REG_CTX_WINDOW + i * 4);
	mutex_unlock(&dev->ctx_lock);

	seq_printf(m, "%s %u: %s (CTX_STATUS %u)\n", vhca_ctx_tables[c->table].name,
		   c->index,
		   status < ARRAY_SIZE(statuses) ? statuses[status] : "?",
		   status);
	if (status != VHCA_CTX_STATUS_OK)
		return 0;
	for (i = 0; i < vhca_ctx_tables[c->table].nfields; i++)
		vhca_ctx_show_field(m, (const u8 *)rec,
				    &vhca_ctx_tables[c->table].fields[i]);
	seq_puts(m, "raw:");
	for (i = 0; i < size / 4; i++)
		seq_printf(m, "%s%08x", (i % 8) ? " " : "\n  ", rec[i]);
	seq_putc(m, '\n');
	return 0;
}

static int vhca_ctx_open(struct inode *inode, struct file *file)
{
	return single_open(file, vhca_ctx_show, inode->i_private);
}

static ssize_t vhca_ctx_write(struct file *file, const char __user *buf,
			      size_t len, loff_t *pos)
{
	struct vhca_dbg_ctx *c = ((struct seq_file *)file->private_data)->private;
	u32 index;
	int ret;

	ret = kstrtou32_from_user(buf, len, 0, &index);
	if (ret)
		return ret;
	WRITE_ONCE(c->index, index);
	return len;
}

static const struct file_operations vhca_ctx_fops = {
	.owner = THIS_MODULE,
	.open = vhca_ctx_open,
	.read = seq_read,
	.write = vhca_ctx_write,
	.llseek = seq_lseek,
	.release = single_release,
};

static int vhca_regs_show(struct seq_file *m, void *unused)
{
	struct vhca_dev *dev = m->private;
	static const struct { const char *name; u32 reg; } regs[] = {
		{ "MAGIC", VHCA_REG_MAGIC },
		{ "ABI_VERSION", VHCA_REG_ABI_VERSION },
		{ "DRIVER_ABI", VHCA_REG_DRIVER_ABI },
		{ "DEV_CTRL", VHCA_REG_DEV_CTRL },
		{ "DEV_STATUS", VHCA_REG_DEV_STATUS },
		{ "FATAL_SYNDROME", VHCA_REG_FATAL_SYNDROME },
		{ "IGNORED_WRITES", VHCA_REG_IGNORED_WRITES },
		{ "CMDQ_CI", VHCA_REG_CMDQ_CI },
		{ "CAP_MAX_QP", VHCA_REG_CAP_MAX_QP },
		{ "CAP_MAX_CQ", VHCA_REG_CAP_MAX_CQ },
		{ "CAP_MAX_SRQ", VHCA_REG_CAP_MAX_SRQ },
		{ "CAP_MAX_MR", VHCA_REG_CAP_MAX_MR },
		{ "CAP_MAX_PD", VHCA_REG_CAP_MAX_PD },
		{ "CAP_MAX_EQ", VHCA_REG_CAP_MAX_EQ },
		{ "CAP_MAX_QP_WR", VHCA_REG_CAP_MAX_QP_WR },
		{ "CAP_MAX_SGE", VHCA_REG_CAP_MAX_SGE },
		{ "CAP_MAX_CQE", VHCA_REG_CAP_MAX_CQE },
		{ "CAP_MAX_INLINE", VHCA_REG_CAP_MAX_INLINE },
		{ "CAP_NUM_UARS", VHCA_REG_CAP_NUM_UARS },
		{ "CAP_MSIX_VECTORS", VHCA_REG_CAP_MSIX_VECTORS },
		{ "CAP_MAX_CMDQ_LOG2", VHCA_REG_CAP_MAX_CMDQ_LOG2 },
		{ "CAP_MAX_EQ_LOG2", VHCA_REG_CAP_MAX_EQ_LOG2 },
		{ "CAP_MAX_SRQ_WR", VHCA_REG_CAP_MAX_SRQ_WR },
		{ "CAP_NUM_PORTS", VHCA_REG_CAP_NUM_PORTS },
		{ "CAP_FLAGS", VHCA_REG_CAP_FLAGS },
	};
	struct vhca_cmdq *q = &dev->cmdq;
	u32 i;

	for (i = 0; i < ARRAY_SIZE(regs); i++)
		seq_printf(m, "%-18s %#x\n", regs[i].name,
			   vhca_rd(dev, regs[i].reg));
	seq_printf(m, "cmdq: pi %u posted %llu failed %llu dead %d events %d last failure opcode %#x status %u syndrome %#x\n",
		   q->pi, q->posted, q->failed, READ_ONCE(q->dead), q->events,
		   q->last_fail_opcode, q->last_fail_status,
		   q->last_fail_syndrome);
	seq_printf(m, "eq 0: vector 0 ci %u eqes %llu interrupts %llu\n",
		   dev->eq0.ci, dev->eq0.eqes, dev->eq0.interrupts);
	for (i = 0; i < dev->nceqs; i++)
		seq_printf(m, "eq %u: vector %u slot %u ci %u eqes %llu interrupts %llu\n",
			   dev->ceqs[i].eqn, dev->ceqs[i].vector,
			   dev->ceqs[i].slot, dev->ceqs[i].ci,
			   dev->ceqs[i].eqes, dev->ceqs[i].interrupts);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(vhca_regs);

static void vhca_show_xa(struct seq_file *m, const char *name,
			 struct xarray *xa)
{
	unsigned long index;
	void *entry;

	seq_printf(m, "%s:", name);
	xa_lock_irq(xa);
	xa_for_each(xa, index, entry)
		seq_printf(m, " %lu", index);
	xa_unlock_irq(xa);
	seq_putc(m, '\n');
}

static int vhca_objects_show(struct seq_file *m, void *unused)
{
	struct vhca_dev *dev = m->private;

	vhca_show_xa(m, "qpn", &dev->qp_xa);
	vhca_show_xa(m, "cqn", &dev->cq_xa);
	vhca_show_xa(m, "srqn", &dev->srq_xa);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(vhca_objects);

void vhca_debugfs_add(struct vhca_dev *dev)
{
	u32 t;

	if (IS_ERR_OR_NULL(vhca_debugfs_root))
		return;
	dev->debugfs = debugfs_create_dir(pci_name(dev->pdev),
					  vhca_debugfs_root);
	for (t = VHCA_CTX_QPC; t <= VHCA_CTX_EQC; t++) {
		struct vhca_dbg_ctx *c = &dev->dbg_ctx[t];

		c->dev = dev;
		c->table = t;
		c->index = t == VHCA_CTX_QPC ? VHCA_GSI_QPN : 0;
		debugfs_create_file(vhca_ctx_tables[t].name, 0600,
				    dev->debugfs, c, &vhca_ctx_fops);
	}
	debugfs_create_file("regs", 0400, dev->debugfs, dev, &vhca_regs_fops);
	debugfs_create_file("objects", 0400, dev->debugfs, dev,
			    &vhca_objects_fops);
	vhca_odp_debugfs_add(dev);
}

void vhca_debugfs_remove(struct vhca_dev *dev)
{
	debugfs_remove_recursive(dev->debugfs);
	dev->debugfs = NULL;
}

void vhca_debugfs_init(void)
{
	vhca_debugfs_root = debugfs_create_dir(VHCA_DRV_NAME, NULL);
}

void vhca_debugfs_exit(void)
{
	debugfs_remove_recursive(vhca_debugfs_root);
	vhca_debugfs_root = NULL;
}
