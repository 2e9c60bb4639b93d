/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * compat.h: the differences between the rdma-core releases libvhca builds
 * in (issue 17: Debian 12's 44.0 and trixie's 56.1; package.sh). rdma-core
 * has no version macro, so CMakeLists.txt passes what its PACKAGE_VERSION
 * says; built any other way, the newest API is assumed.
 */

#ifndef VHCA_PROVIDER_COMPAT_H
#define VHCA_PROVIDER_COMPAT_H

/*
 * IBA 1.5's Memory Placement Extensions in the extended QP API
 * (IBV_WR_FLUSH, IBV_WR_ATOMIC_WRITE, ibv_qp_ex.wr_flush/wr_atomic_write,
 * IBV_QP_EX_WITH_FLUSH/ATOMIC_WRITE): rdma-core 45 and newer. Without them
 * the provider offers neither (create_qp_ex refuses the send ops, as for a
 * device without the capability).
 */
#ifndef VHCA_HAVE_IBV_MPE
#define VHCA_HAVE_IBV_MPE 1
#endif

#endif /* VHCA_PROVIDER_COMPAT_H */
