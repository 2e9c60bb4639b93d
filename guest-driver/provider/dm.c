// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * Device memory (ibv_alloc_dm; issue 29 item 2): vhca.ko allocates whole
 * pages of the device's DM bytes (BAR4) and gives each allocation its own
 * mmap() offset (vhca-abi-user.h); the provider maps them and copies in and
 * out of the mapping. ibv_reg_dm_mr registers a range (zero-based) that
 * the device reads and writes for RDMA, atomics and SGEs like any MR.
 */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/cmd_ioctl.h>

#include "vhca.h"

struct vhca_dm {
	struct verbs_dm verbs_dm;
	_Atomic(uint32_t) *va;	/* the mapping */
	size_t map_len;		/* bytes mapped: whole pages */
	uint64_t length;	/* bytes allocated, as asked */
};

static struct vhca_dm *to_vdm(struct ibv_dm *dm)
{
	return container_of(dm, struct vhca_dm, verbs_dm.dm);
}

/*
 * The rule rdma-core's DM copies follow (its tests check it): dm_offset and
 * length multiples of 4 bytes (EINVAL), the range inside the allocation
 * (EFAULT). Copied a 32-bit word at a time, each one load or store of the
 * device's memory, so the device never sees a torn word; the host side may
 * be at any alignment.
 */
static int vhca_dm_copy(struct ibv_dm *ibdm, uint64_t off, void *host,
			size_t len, bool to_dm)
{
	struct vhca_dm *dm = to_vdm(ibdm);
	_Atomic(uint32_t) *w;
	uint8_t *h = host;
	uint32_t v;
	size_t i;

	if (off > dm->length || len > dm->length - off)
		return EFAULT;
	if ((off | len) & 3)
		return EINVAL;
	w = dm->va + off / 4;
	for (i = 0; i < len / 4; i++, h += 4) {
		if (to_dm) {
			memcpy(&v, h, 4);
			atomic_store_explicit(&w[i], v, memory_order_relaxed);
		} else {
			v = atomic_load_explicit(&w[i], memory_order_relaxed);
			memcpy(h, &v, 4);
		}
	}
	return 0;
}

static int vhca_memcpy_to_dm(struct ibv_dm *dm, uint64_t dm_offset,
			     const void *host_addr, size_t length)
{
	return vhca_dm_copy(dm, dm_offset, (void *)host_addr, length, true);
}

static int vhca_memcpy_from_dm(void *host_addr, struct ibv_dm *dm,
			       uint64_t dm_offset, size_t length)
{
	return vhca_dm_copy(dm, dm_offset, host_addr, length, false);
}

/* Maps `length` bytes of a DM at the kernel's mmap offset. */
static int vhca_dm_map(struct ibv_context *context, struct vhca_dm *dm,
		       uint64_t offset, uint64_t length)
{
	size_t page = sysconf(_SC_PAGESIZE);
	void *va;

	dm->length = length;
	dm->map_len = (length + page - 1) & ~(page - 1);
	va = mmap(NULL, dm->map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		  context->cmd_fd, offset);
	if (va == MAP_FAILED)
		return errno;
	dm->va = va;
	dm->verbs_dm.dm.memcpy_to_dm = vhca_memcpy_to_dm;
	dm->verbs_dm.dm.memcpy_from_dm = vhca_memcpy_from_dm;
	return 0;
}

struct ibv_dm *vhca_alloc_dm(struct ibv_context *context,
			     struct ibv_alloc_dm_attr *attr)
{
	DECLARE_COMMAND_BUFFER(cmdb, UVERBS_OBJECT_DM, UVERBS_METHOD_DM_ALLOC,
			       1);
	struct vhca_dm *dm;
	uint64_t offset;
	int ret;

	if (attr->comp_mask || !attr->length) {
		errno = EINVAL;
		return NULL;
	}
	dm = calloc(1, sizeof(*dm));
	if (!dm) {
		errno = ENOMEM;
		return NULL;
	}
	fill_attr_out_ptr(cmdb, VHCA_IB_ATTR_ALLOC_DM_RESP_MMAP_OFFSET,
			  &offset);
	ret = ibv_cmd_alloc_dm(context, attr, &dm->verbs_dm, cmdb);
	if (ret)
		goto err_free;
	ret = vhca_dm_map(context, dm, offset, attr->length);
	if (ret) {
		ibv_cmd_free_dm(&dm->verbs_dm);
		goto err_free;
	}
	return &dm->verbs_dm.dm;

err_free:
	free(dm);
	errno = ret;
	return NULL;
}

int vhca_free_dm(struct ibv_dm *ibdm)
{
	struct vhca_dm *dm = to_vdm(ibdm);
	int ret = ibv_cmd_free_dm(&dm->verbs_dm);

	if (ret)
		return ret;
	munmap((void *)dm->va, dm->map_len);
	free(dm);
	return 0;
}

/* ibv_import_dm: a DM of this context's file by handle (another context on
 * a duplicate of the same file). */
struct ibv_dm *vhca_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	DECLARE_COMMAND_BUFFER(cmdb, UVERBS_OBJECT_DM, VHCA_IB_METHOD_DM_QUERY,
			       3);
	uint64_t offset, length;
	struct vhca_dm *dm;
	int ret;

	dm = calloc(1, sizeof(*dm));
	if (!dm) {
		errno = ENOMEM;
		return NULL;
	}
	fill_attr_in_obj(cmdb, VHCA_IB_ATTR_QUERY_DM_REQ_HANDLE, dm_handle);
	fill_attr_out_ptr(cmdb, VHCA_IB_ATTR_QUERY_DM_RESP_MMAP_OFFSET,
			  &offset);
	fill_attr_out_ptr(cmdb, VHCA_IB_ATTR_QUERY_DM_RESP_LENGTH, &length);
	ret = execute_ioctl(context, cmdb);
	if (ret)
		goto err_free;
	ret = vhca_dm_map(context, dm, offset, length);
	if (ret)
		goto err_free;
	dm->verbs_dm.dm.context = context;
	dm->verbs_dm.dm.comp_mask = IBV_DM_MASK_HANDLE;
	dm->verbs_dm.handle = dm->verbs_dm.dm.handle = dm_handle;
	return &dm->verbs_dm.dm;

err_free:
	free(dm);
	errno = ret;
	return NULL;
}

/* The imported DM goes from this process only; its owner still frees it. */
void vhca_unimport_dm(struct ibv_dm *ibdm)
{
	struct vhca_dm *dm = to_vdm(ibdm);

	munmap((void *)dm->va, dm->map_len);
	free(dm);
}

struct ibv_mr *vhca_reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *ibdm,
			      uint64_t dm_offset, size_t length,
			      unsigned int access)
{
	struct vhca_dm *dm = to_vdm(ibdm);
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr) {
		errno = ENOMEM;
		return NULL;
	}
	ret = ibv_cmd_reg_dm_mr(pd, &dm->verbs_dm, dm_offset, length, access,
				vmr, NULL);
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}
