// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * UD multicast (AD-08, PV-07): ib_attach_mcast / ib_detach_mcast, which
 * ibv_attach_mcast, IPoIB and rdma_cm's joins reach. The device keeps the
 * groups and their bounds (QUERY_DEVICE's max_mcast_*) and delivers a
 * group's packets to every attached QP; there is no subnet manager, so the
 * fabric carries them to every node and each device keeps what its QPs
 * joined (ARCHITECTURE.md §6).
 */

#include "vhca.h"

static int vhca_mcast_cmd(struct ib_qp *ibqp, union ib_gid *gid, u16 lid,
			  u16 opcode)
{
	struct vhca_dev *dev = to_vdev(ibqp->device);
	struct vhca_mcast_in in = {
		.qpn = to_vqp(ibqp)->qpn,
		/* RoCE has no multicast LID; the device ignores it there. */
		.mlid = rdma_protocol_ib(ibqp->device, VHCA_PORT) ? lid : 0,
	};

	memcpy(in.gid, gid->raw, sizeof(in.gid));
	return vhca_cmd(dev, opcode, &in, sizeof(in), NULL, 0, NULL);
}

int vhca_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return vhca_mcast_cmd(ibqp, gid, lid, VHCA_CMD_ATTACH_MCAST);
}

int vhca_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return vhca_mcast_cmd(ibqp, gid, lid, VHCA_CMD_DETACH_MCAST);
}
