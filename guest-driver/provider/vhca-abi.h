/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The uverbs commands of libvhca: the core command or response, then the
 * driver's part from vhca-abi-user.h (the kernel's private ABI, copied to
 * rdma-core's kernel-headers/rdma/). kernel-abi/vhca-abi-user.h is generated
 * from it by rdma-core's build (make_abi_structs.py).
 */

#ifndef VHCA_PROVIDER_ABI_H
#define VHCA_PROVIDER_ABI_H

#include <infiniband/kern-abi.h>
#include <rdma/vhca-abi-user.h>
#include <kernel-abi/vhca-abi-user.h>

DECLARE_DRV_CMD(vhca_cmd_get_context, IB_USER_VERBS_CMD_GET_CONTEXT,
		empty, vhca_ib_alloc_ucontext_resp);
DECLARE_DRV_CMD(vhca_cmd_alloc_pd, IB_USER_VERBS_CMD_ALLOC_PD,
		empty, vhca_ib_alloc_pd_resp);
DECLARE_DRV_CMD(vhca_cmd_create_cq, IB_USER_VERBS_CMD_CREATE_CQ,
		vhca_ib_create_cq, vhca_ib_create_cq_resp);
DECLARE_DRV_CMD(vhca_cmd_create_qp, IB_USER_VERBS_CMD_CREATE_QP,
		vhca_ib_create_qp, vhca_ib_create_qp_resp);
DECLARE_DRV_CMD(vhca_cmd_create_srq, IB_USER_VERBS_CMD_CREATE_SRQ,
		vhca_ib_create_srq, vhca_ib_create_srq_resp);
DECLARE_DRV_CMD(vhca_cmd_create_xsrq, IB_USER_VERBS_CMD_CREATE_XSRQ,
		vhca_ib_create_srq, vhca_ib_create_srq_resp);
DECLARE_DRV_CMD(vhca_cmd_resize_cq, IB_USER_VERBS_CMD_RESIZE_CQ,
		vhca_ib_resize_cq, empty);
DECLARE_DRV_CMD(vhca_cmd_modify_srq, IB_USER_VERBS_CMD_MODIFY_SRQ,
		vhca_ib_modify_srq, empty);
DECLARE_DRV_CMD(vhca_cmd_create_ah, IB_USER_VERBS_CMD_CREATE_AH,
		empty, vhca_ib_create_ah_resp);

#endif /* VHCA_PROVIDER_ABI_H */
