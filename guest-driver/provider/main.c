// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * libvhca: device matching, the context (its UAR page and the WAKE page,
 * both mapped from the uverbs file), ring buffers and the QPN table.
 *
 * Matching: by PCI ID through /sys/class/infiniband/<dev>/device/modalias
 * (vhca.ko parents its ib_device to the PCI function); the kernel's uverbs
 * ABI version must be VHCA_IB_UVERBS_ABI_VERSION (vhca-abi-user.h).
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/cmd_ioctl.h>
#include <rdma/ib_user_ioctl_cmds.h>

#include "vhca.h"

static void vhca_free_context(struct ibv_context *ibctx);

static const struct verbs_context_ops vhca_ctx_ops = {
	.free_context = vhca_free_context,
	.query_device_ex = vhca_query_device,
	.query_port = vhca_query_port,
	.alloc_pd = vhca_alloc_pd,
	.dealloc_pd = vhca_dealloc_pd,
	.alloc_parent_domain = vhca_alloc_parent_domain,
	.reg_mr = vhca_reg_mr,
	.dereg_mr = vhca_dereg_mr,
	.import_mr = vhca_import_mr,
	.import_pd = vhca_import_pd,
	.unimport_mr = vhca_unimport_mr,
	.unimport_pd = vhca_unimport_pd,
	.alloc_mw = vhca_alloc_mw,
	.dealloc_mw = vhca_dealloc_mw,
	.bind_mw = vhca_bind_mw,
	.rereg_mr = vhca_rereg_mr,
	.alloc_dm = vhca_alloc_dm,
	.free_dm = vhca_free_dm,
	.import_dm = vhca_import_dm,
	.unimport_dm = vhca_unimport_dm,
	.reg_dm_mr = vhca_reg_dm_mr,
	.advise_mr = vhca_advise_mr,
	.create_ah = vhca_create_ah,
	.destroy_ah = vhca_destroy_ah,

	.create_cq = vhca_create_cq,
	.create_cq_ex = vhca_create_cq_ex,
	.destroy_cq = vhca_destroy_cq,
	.poll_cq = vhca_poll_cq,
	.req_notify_cq = vhca_req_notify_cq,
	.resize_cq = vhca_resize_cq,

	.create_qp = vhca_create_qp,
	.create_qp_ex = vhca_create_qp_ex,
	.query_qp = vhca_query_qp,
	.modify_qp = vhca_modify_qp,
	.destroy_qp = vhca_destroy_qp,
	.post_send = vhca_post_send,
	.post_recv = vhca_post_recv,

	.create_srq = vhca_create_srq,
	.modify_srq = vhca_modify_srq,
	.query_srq = vhca_query_srq,
	.destroy_srq = vhca_destroy_srq,
	.post_srq_recv = vhca_post_srq_recv,

	/* UD multicast (AD-08): the kernel's ATTACH_MCAST / DETACH_MCAST. */
	.attach_mcast = ibv_cmd_attach_mcast,
	.detach_mcast = ibv_cmd_detach_mcast,
	.open_xrcd = vhca_open_xrcd,
	.close_xrcd = vhca_close_xrcd,
	.create_srq_ex = vhca_create_srq_ex,
	.get_srq_num = vhca_get_srq_num,
};

int vhca_alloc_buf(struct vhca_buf *b, size_t bytes)
{
	size_t page = sysconf(_SC_PAGESIZE);

	b->length = (bytes + page - 1) & ~(page - 1);
	b->buf = mmap(NULL, b->length, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->buf == MAP_FAILED) {
		b->buf = NULL;
		return errno;
	}
	/* The device keeps reading the pinned pages: a fork must not split them. */
	if (ibv_dontfork_range(b->buf, b->length)) {
		munmap(b->buf, b->length);
		b->buf = NULL;
		return ENOMEM;
	}
	return 0;
}

/* A ring for a QP or SRQ on `pd`: from its parent domain's allocator if any. */
int vhca_alloc_buf_pd(struct vhca_buf *b, size_t bytes, struct ibv_pd *pd,
		      uint64_t type)
{
	struct vhca_pd *parent = to_vpd(pd);
	size_t page = sysconf(_SC_PAGESIZE);
	void *p;

	b->pd = NULL;
	if (!parent->protection_domain || !parent->alloc)
		return vhca_alloc_buf(b, bytes);
	b->length = (bytes + page - 1) & ~(page - 1);
	p = parent->alloc(pd, parent->pd_context, b->length, page, type);
	if (p == IBV_ALLOCATOR_USE_DEFAULT)
		return vhca_alloc_buf(b, bytes);
	if (!p)
		return ENOMEM;
	memset(p, 0, b->length);
	b->buf = p;
	b->pd = parent;
	b->type = type;
	atomic_fetch_add(&parent->refcount, 1);
	return 0;
}

void vhca_free_buf(struct vhca_buf *b)
{
	if (!b->buf)
		return;
	if (b->pd) {
		b->pd->free(&b->pd->ibv_pd, b->pd->pd_context, b->buf, b->type);
		atomic_fetch_sub(&b->pd->refcount, 1);
		b->pd = NULL;
		b->buf = NULL;
		return;
	}
	ibv_dofork_range(b->buf, b->length);
	munmap(b->buf, b->length);
	b->buf = NULL;
}

int vhca_qp_table_insert(struct vhca_context *ctx, struct vhca_qp *qp)
{
	uint32_t qpn = qp->ibv_qp.qp_num;
	uint32_t i = (qpn >> VHCA_QPT_SHIFT) & VHCA_QPT_MASK;
	struct vhca_qp **l2;

	pthread_mutex_lock(&ctx->qp_table_lock);
	l2 = ctx->qp_table[i];
	if (!l2) {
		l2 = calloc(VHCA_QPT_SIZE, sizeof(*l2));
		if (!l2) {
			pthread_mutex_unlock(&ctx->qp_table_lock);
			return ENOMEM;
		}
		__atomic_store_n(&ctx->qp_table[i], l2, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&l2[qpn & VHCA_QPT_MASK], qp, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
	return 0;
}

void vhca_qp_table_remove(struct vhca_context *ctx, uint32_t qpn)
{
	struct vhca_qp **l2;

	pthread_mutex_lock(&ctx->qp_table_lock);
	l2 = ctx->qp_table[(qpn >> VHCA_QPT_SHIFT) & VHCA_QPT_MASK];
	if (l2)
		__atomic_store_n(&l2[qpn & VHCA_QPT_MASK], NULL,
				 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
}

/*
 * The port's link layer is the device's configuration: asked once. On an
 * Ethernet port an AH needs the next hop's MAC, which only the kernel can
 * resolve (verbs.c).
 */
static int vhca_init_link_layer(struct vhca_context *ctx)
{
	struct ibv_query_port cmd = {};
	struct ibv_port_attr attr = {};
	int ret;

	ret = ibv_cmd_query_port(&ctx->ibv_ctx.context, VHCA_PORT, &attr, &cmd,
				 sizeof(cmd));
	if (ret) {
		verbs_err(&ctx->ibv_ctx, "vhca: query_port: %s\n",
			  strerror(ret));
		errno = ret;
		return ret;
	}
	ctx->roce = attr.link_layer == IBV_LINK_LAYER_ETHERNET;
	return 0;
}

/*
 * The context's resources from its alloc_ucontext response (a new context's,
 * or an imported one's from QUERY_CONTEXT): limits, the UAR and WAKE pages.
 */
static int vhca_setup_context(struct vhca_context *ctx, int cmd_fd,
			      const struct vhca_ib_alloc_ucontext_resp *resp)
{
	if (resp->uar_page_size != VHCA_UAR_PAGE_SIZE) {
		verbs_err(&ctx->ibv_ctx, "vhca: UAR page of %u bytes\n",
			  resp->uar_page_size);
		errno = EINVAL;
		return -1;
	}
	ctx->uar_index = resp->uar_index;
	ctx->cap_flags = resp->cap_flags;
	ctx->max_qp_wr = resp->max_qp_wr;
	ctx->max_sge = resp->max_sge;
	ctx->max_cqe = resp->max_cqe;
	ctx->max_inline = resp->max_inline;
	ctx->max_srq_wr = resp->max_srq_wr;
	if (vhca_init_link_layer(ctx))
		return -1;

	ctx->uar = mmap(NULL, resp->uar_page_size, PROT_READ | PROT_WRITE,
			MAP_SHARED, cmd_fd, resp->uar_mmap_offset);
	if (ctx->uar == MAP_FAILED) {
		ctx->uar = NULL;
		return -1;
	}
	/*
	 * Without a WAKE page (an older kernel or device) a doorbell stored
	 * while the device sleeps waits for the device's periodic rescan.
	 */
	if (resp->wake_page_size == VHCA_WAKE_BAR_SIZE) {
		ctx->wake = mmap(NULL, resp->wake_page_size, PROT_WRITE,
				 MAP_SHARED, cmd_fd, resp->wake_mmap_offset);
		if (ctx->wake == MAP_FAILED) {
			ctx->wake = NULL;
			return -1;
		}
	} else {
		verbs_warn(&ctx->ibv_ctx,
			   "vhca: no WAKE page; doorbells may wait for the device's rescan\n");
	}

	verbs_set_ops(&ctx->ibv_ctx, &vhca_ctx_ops);
	return 0;
}

static struct vhca_context *vhca_new_context(struct ibv_device *ibdev,
					     int cmd_fd)
{
	struct vhca_context *ctx;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx,
					   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	pthread_mutex_init(&ctx->qp_table_lock, NULL);
	return ctx;
}

static void vhca_drop_context(struct vhca_context *ctx)
{
	if (ctx->uar)
		munmap(ctx->uar, VHCA_UAR_PAGE_SIZE);
	pthread_mutex_destroy(&ctx->qp_table_lock);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static struct verbs_context *vhca_alloc_context(struct ibv_device *ibdev,
						int cmd_fd, void *private_data)
{
	struct vhca_cmd_get_context_resp resp = {};
	struct ibv_get_context cmd = {};
	struct vhca_context *ctx = vhca_new_context(ibdev, cmd_fd);

	if (!ctx)
		return NULL;
	if (ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp)) ||
	    vhca_setup_context(ctx, cmd_fd, &resp.drv_payload)) {
		vhca_drop_context(ctx);
		return NULL;
	}
	return &ctx->ibv_ctx;
}

/*
 * ibv_import_device: another context on the same kernel context (a
 * duplicate of its command FD), with the same UAR page; its objects are the
 * kernel context's, shared with ibv_import_pd and ibv_import_mr.
 */
static struct verbs_context *vhca_import_context(struct ibv_device *ibdev,
						 int cmd_fd)
{
	struct vhca_ib_alloc_ucontext_resp resp = {};
	DECLARE_COMMAND_BUFFER_LINK(driver_attr, UVERBS_OBJECT_DEVICE,
				    UVERBS_METHOD_QUERY_CONTEXT, 1, NULL);
	struct vhca_context *ctx = vhca_new_context(ibdev, cmd_fd);

	if (!ctx)
		return NULL;
	fill_attr_out_ptr(driver_attr, VHCA_IB_ATTR_QUERY_CONTEXT_RESP_UCTX,
			  &resp);
	if (ibv_cmd_query_context(&ctx->ibv_ctx.context, driver_attr) ||
	    vhca_setup_context(ctx, cmd_fd, &resp)) {
		vhca_drop_context(ctx);
		return NULL;
	}
	return &ctx->ibv_ctx;
}

static void vhca_free_context(struct ibv_context *ibctx)
{
	struct vhca_context *ctx = to_vctx(ibctx);
	uint32_t i;

	if (ctx->wake)
		munmap(ctx->wake, VHCA_WAKE_BAR_SIZE);
	munmap(ctx->uar, VHCA_UAR_PAGE_SIZE);
	for (i = 0; i < VHCA_QPT_SIZE; i++)
		free(ctx->qp_table[i]);
	for (i = 0; i < VHCA_QPT_SIZE; i++)
		free(ctx->xsrq_table[i]);
	pthread_mutex_destroy(&ctx->qp_table_lock);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static struct verbs_device *vhca_device_alloc(struct verbs_sysfs_dev *sysfs)
{
	struct vhca_device *dev = calloc(1, sizeof(*dev));

	return dev ? &dev->ibv_dev : NULL;
}

static void vhca_uninit_device(struct verbs_device *vdev)
{
	free(container_of(vdev, struct vhca_device, ibv_dev));
}

static const struct verbs_match_ent vhca_match_table[] = {
	VERBS_PCI_MATCH(VHCA_PCI_VENDOR_ID, VHCA_PCI_DEVICE_ID, NULL),
	{}
};

static const struct verbs_device_ops vhca_dev_ops = {
	.name = "vhca",
	.match_min_abi_version = VHCA_IB_UVERBS_ABI_VERSION,
	.match_max_abi_version = VHCA_IB_UVERBS_ABI_VERSION,
	.match_table = vhca_match_table,
	.alloc_device = vhca_device_alloc,
	.uninit_device = vhca_uninit_device,
	.alloc_context = vhca_alloc_context,
	.import_context = vhca_import_context,
};
PROVIDER_DRIVER(vhca, vhca_dev_ops);
