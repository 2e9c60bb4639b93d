// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device-wide verbs: device and port attributes (from the kernel, which asks
 * the device), protection domains, memory regions (pinned and registered by
 * the kernel), and address handles.
 *
 * A UD send WQE carries the whole address vector (vhca_abi.h struct
 * vhca_ud_seg), so an AH is the vector, built here once and copied into each
 * WQE. On an InfiniBand port it never reaches the kernel; on a RoCE port the
 * kernel creates it too, for the destination MAC ib_core resolves.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vhca.h"

int vhca_query_device(struct ibv_context *context,
		      const struct ibv_query_device_ex_input *input,
		      struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t v;
	int ret;

	ret = ibv_cmd_query_device_any(context, input, attr, attr_size, &resp,
				       &resp_size);
	if (ret)
		return ret;
	/* As vhca.ko shows it: three 16-bit fields. */
	v = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver),
		 "%u.%u.%u", (unsigned int)(v >> 32) & 0xffff,
		 (unsigned int)(v >> 16) & 0xffff, (unsigned int)v & 0xffff);
	return 0;
}

int vhca_query_port(struct ibv_context *context, uint8_t port,
		    struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd = {};

	return ibv_cmd_query_port(context, port, attr, &cmd, sizeof(cmd));
}

struct ibv_pd *vhca_alloc_pd(struct ibv_context *context)
{
	struct vhca_cmd_alloc_pd_resp resp = {};
	struct ibv_alloc_pd cmd = {};
	struct vhca_pd *pd;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	if (ibv_cmd_alloc_pd(context, &pd->ibv_pd, &cmd, sizeof(cmd),
			     &resp.ibv_resp, sizeof(resp))) {
		free(pd);
		return NULL;
	}
	atomic_init(&pd->refcount, 1);
	return &pd->ibv_pd;
}

/*
 * A parent domain: the kernel never sees it (its handle is its protection
 * domain's, ibv_initialize_parent_domain); no thread domains.
 */
struct ibv_pd *vhca_alloc_parent_domain(struct ibv_context *context,
					struct ibv_parent_domain_init_attr *attr)
{
	struct vhca_pd *parent, *pd;

	if (ibv_check_alloc_parent_domain(attr))
		return NULL;
	if (attr->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
					  IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->td) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	pd = to_vpd(attr->pd);
	if (pd->protection_domain || attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	if ((attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) &&
	    (!attr->alloc || !attr->free)) {
		errno = EINVAL;
		return NULL;
	}
	parent = calloc(1, sizeof(*parent));
	if (!parent) {
		errno = ENOMEM;
		return NULL;
	}
	parent->protection_domain = pd;
	atomic_init(&parent->refcount, 1);
	atomic_fetch_add(&pd->refcount, 1);
	ibv_initialize_parent_domain(&parent->ibv_pd, &pd->ibv_pd);
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		parent->alloc = attr->alloc;
		parent->free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		parent->pd_context = attr->pd_context;
	return &parent->ibv_pd;
}

int vhca_dealloc_pd(struct ibv_pd *ibpd)
{
	struct vhca_pd *pd = to_vpd(ibpd);
	int ret;

	if (atomic_load(&pd->refcount) > 1)
		return EBUSY;
	if (pd->protection_domain) {
		atomic_fetch_sub(&pd->protection_domain->refcount, 1);
		free(pd);
		return 0;
	}
	ret = ibv_cmd_dealloc_pd(ibpd);
	if (ret)
		return ret;
	free(pd);
	return 0;
}

/*
 * ibv_import_pd: a PD of the kernel context an imported context shares
 * (vhca_import_context). The provider keeps nothing of a PD but its handle;
 * the kernel checks the handle when an object is created on it.
 */
struct ibv_pd *vhca_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	struct vhca_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return NULL;
	pd->ibv_pd.context = context;
	pd->ibv_pd.handle = pd_handle;
	atomic_init(&pd->refcount, 1);
	return &pd->ibv_pd;
}

/* The importer lets go; the PD stays the kernel context's. */
void vhca_unimport_pd(struct ibv_pd *ibpd)
{
	free(to_vpd(ibpd));
}

/* ibv_import_mr: its keys, address and length from the kernel (QUERY_MR). */
struct ibv_mr *vhca_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	struct verbs_mr *vmr = calloc(1, sizeof(*vmr));

	if (!vmr)
		return NULL;
	if (ibv_cmd_query_mr(pd, vmr, mr_handle)) {
		free(vmr);
		return NULL;
	}
	return &vmr->ibv_mr;
}

void vhca_unimport_mr(struct ibv_mr *mr)
{
	free(verbs_get_mr(mr));
}

struct ibv_mr *vhca_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			   uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;
	if (ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd,
			   sizeof(cmd), &resp, sizeof(resp))) {
		free(vmr);
		return NULL;
	}
	return &vmr->ibv_mr;
}

/*
 * On-demand paging (issue 29): ibv_advise_mr's prefetch advice goes to
 * vhca.ko, which faults the pages in and hands them to the device
 * (synchronously with IBV_ADVISE_MR_FLAG_FLUSH). ODP MRs themselves need
 * nothing here: reg_mr passes IBV_ACCESS_ON_DEMAND, and the implicit form
 * (NULL, SIZE_MAX), through.
 */
int vhca_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		   uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sges)
{
	return ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sges);
}

/* vhca.ko registers a new MR (new keys) and drops the old one. */
int vhca_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd,
		  void *addr, size_t length, int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct ibv_rereg_mr cmd;

	return ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr,
				access, pd, &cmd, sizeof(cmd), &resp,
				sizeof(resp));
}

int vhca_dereg_mr(struct verbs_mr *vmr)
{
	int ret = ibv_cmd_dereg_mr(vmr);

	if (ret)
		return ret;
	free(vmr);
	return 0;
}

/*
 * Memory windows (MP-06 type 1, MP-07 type 2B): vhca.ko allocates them
 * (ALLOC_MW); binds and invalidations are send WQEs (qp.c). Only the types
 * the device reports; an unknown type is EINVAL.
 */
struct ibv_mw *vhca_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct vhca_context *ctx = to_vctx(pd->context);
	struct ib_uverbs_alloc_mw_resp resp = {};
	struct ibv_alloc_mw cmd = {};
	struct ibv_mw *mw;
	int ret;

	switch (type) {
	case IBV_MW_TYPE_1:
		ret = (ctx->cap_flags & VHCA_DEV_CAP_MW_TYPE1) ? 0 : EOPNOTSUPP;
		break;
	case IBV_MW_TYPE_2:
		ret = (ctx->cap_flags & VHCA_DEV_CAP_MW_TYPE2) ? 0 : EOPNOTSUPP;
		break;
	default:
		ret = EINVAL;
		break;
	}
	if (ret) {
		errno = ret;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_alloc_mw(pd, type, mw, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(mw);
		errno = ret;
		return NULL;
	}
	return mw;
}

int vhca_dealloc_mw(struct ibv_mw *mw)
{
	int ret = ibv_cmd_dealloc_mw(mw);

	if (ret)
		return ret;
	free(mw);
	return 0;
}

/* struct ibv_ah_attr -> struct vhca_av (AD-02), as vhca.ko's vhca_ah_to_av. */
struct ibv_ah *vhca_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct vhca_context *ctx = to_vctx(pd->context);
	struct vhca_cmd_create_ah_resp resp = {};
	struct vhca_ah *ah;
	struct vhca_av *av;
	int ret;

	if (!(ctx->cap_flags & VHCA_DEV_CAP_UD)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* RoCE: every packet is routed, the GRH becomes the IP header (A17.4). */
	if (attr->port_num > VHCA_PORT || (ctx->roce && !attr->is_global)) {
		errno = EINVAL;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	av = &ah->av;
	av->sl = attr->sl;
	av->static_rate = attr->static_rate;
	av->port_num = attr->port_num;
	if (attr->is_global) {
		av->is_global = 1;
		memcpy(av->dgid, attr->grh.dgid.raw, sizeof(av->dgid));
		/* 20 bits on the wire (IBA ch. 8, the GRH); see vhca_ah_to_av in vhca.ko. */
		av->flow_label = attr->grh.flow_label & 0xfffff;
		av->sgid_index = attr->grh.sgid_index;
		av->hop_limit = attr->grh.hop_limit;
		av->traffic_class = attr->grh.traffic_class;
	}
	if (!ctx->roce) {
		av->dlid = attr->dlid;
		av->src_path_bits = attr->src_path_bits;
		return &ah->ibv_ah;
	}

	/* The kernel resolves dgid to the next hop's MAC (ARP/ND). */
	ret = ibv_cmd_create_ah(pd, &ah->ibv_ah, attr, &resp.ibv_resp,
				sizeof(resp));
	if (ret) {
		free(ah);
		errno = ret;
		return NULL;
	}
	memcpy(av->dmac, resp.dmac, sizeof(av->dmac));
	ah->kernel = true;
	return &ah->ibv_ah;
}

int vhca_destroy_ah(struct ibv_ah *ibah)
{
	struct vhca_ah *ah = to_vah(ibah);
	int ret;

	if (ah->kernel) {
		ret = ibv_cmd_destroy_ah(ibah);
		if (ret)
			return ret;
	}
	free(ah);
	return 0;
}
