// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * uverbs-smoke: drives vhca.ko's user verbs through the raw uverbs write()
 * ABI, without a provider library: get_context (UAR index), mmap of the UAR
 * page, alloc_pd, reg_mr, create_cq and create_qp with rings in this
 * process's memory, RC loopback to its own LID (RESET -> INIT -> RTR -> RTS),
 * (numbers from vhca_abi.h: they are ibverbs'), one RECV and one SEND written as vhca_abi.h WQEs, doorbells stored into the
 * UAR page, and both CQEs read back from the CQ ring by the owner bit; then
 * an RDMA WRITE into the last bytes of a 4 MiB MR of 4 KiB pages (a
 * TWO_LEVEL page list); then an SRQ and a second QP that receives from it.
 *
 * Build (static, for the guest's initramfs), in the host root:
 *   gcc -O2 -static -I guest-driver/include -o uverbs-smoke \
 *       guest-driver/kernel/test/uverbs-smoke.c
 * Run in the guest:  uverbs-smoke [LID] [hold]
 *   hold: keep every object and the mapping and sleep, so that rmmod vhca
 *   can be tried with a user context open (disassociate).
 */

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>

#include "vhca_abi.h"
#include "../vhca-abi-user.h"

static int fd;

#define CHECK(x)                                                              \
	do {                                                                  \
		int _r = (x);                                                 \
		if (_r) {                                                     \
			fprintf(stderr, "FAIL %s: %s\n", #x, strerror(-_r));  \
			exit(1);                                              \
		}                                                             \
	} while (0)

/* One write()-ABI command: header, the core struct + driver input. */
static int cmd(uint32_t command, const void *req, size_t req_len,
	       size_t resp_len)
{
	struct {
		struct ib_uverbs_cmd_hdr hdr;
		char body[512];
	} m;

	m.hdr.command = command;
	m.hdr.in_words = (sizeof(m.hdr) + req_len) / 4;
	m.hdr.out_words = resp_len / 4;
	memcpy(m.body, req, req_len);
	if (write(fd, &m, sizeof(m.hdr) + req_len) < 0)
		return -errno;
	return 0;
}

static void *page_alloc(size_t bytes)
{
	void *p;

	if (posix_memalign(&p, 4096, bytes))
		exit(1);
	memset(p, 0, bytes);
	return p;
}

static void modify(uint32_t qp_handle, uint32_t mask,
		   struct ib_uverbs_modify_qp *m)
{
	m->qp_handle = qp_handle;
	m->attr_mask = mask;
	CHECK(cmd(IB_USER_VERBS_CMD_MODIFY_QP, m, sizeof(*m), 0));
}

/*
 * Sets slot `slot`'s bit in the page's doorbell summary after its producer
 * index was stored (vhca_abi.h "Doorbell pages"): the device reads only the
 * slots whose bits it takes. Atomic: the device swaps the word to zero.
 */
static void flag_slot(uint8_t *page, unsigned int slot)
{
	_Atomic uint32_t *summary =
		(_Atomic uint32_t *)(page + VHCA_UAR_SUMMARY_OFFSET) + slot / 32;

	atomic_fetch_or(summary, UINT32_C(1) << (slot % 32));
}

static uint8_t *cq_ring;
static volatile uint32_t *cq_db;

/* Waits for CQE number n (first pass: owner bit 1) and prints it. */
static volatile struct vhca_cqe *wait_cqe(int n)
{
	volatile struct vhca_cqe *e = (void *)(cq_ring + n * 64);
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!(e->owner & VHCA_OWNER_BIT)) {
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if (t1.tv_sec - t0.tv_sec > 5) {
			printf("FAIL: no CQE %d after 5 s\n", n);
			exit(1);
		}
		usleep(1000);
	}
	atomic_thread_fence(memory_order_acquire);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("cqe %d: wr_id %#llx status %u opcode %u byte_len %u qp %u (%.1f ms)\n",
	       n, (unsigned long long)e->wr_id, e->status, e->opcode,
	       e->byte_len, e->qp_num,
	       (t1.tv_sec - t0.tv_sec) * 1e3 +
		       (t1.tv_nsec - t0.tv_nsec) / 1e6);
	cq_db[0] = n + 1;	/* ci */
	return e;
}

/* RESET -> INIT -> RTR -> RTS, connected to itself through LID `lid`. */
static void connect_self(uint32_t handle, uint32_t qpn, unsigned int lid)
{
	struct ib_uverbs_modify_qp m1 = { .qp_state = VHCA_QPS_INIT,
		.pkey_index = 0, .port_num = 1,
		.qp_access_flags = VHCA_ACCESS_REMOTE_WRITE };
	struct ib_uverbs_modify_qp m2 = { .qp_state = VHCA_QPS_RTR,
		.path_mtu = VHCA_MTU_M1024, .dest_qp_num = qpn,
		.rq_psn = 0, .max_dest_rd_atomic = 1, .min_rnr_timer = 12 };
	struct ib_uverbs_modify_qp m3 = { .qp_state = VHCA_QPS_RTS,
		.timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
		.sq_psn = 0, .max_rd_atomic = 1 };

	modify(handle, VHCA_QP_ATTR_STATE | VHCA_QP_ATTR_PKEY_INDEX |
	       VHCA_QP_ATTR_PORT | VHCA_QP_ATTR_ACCESS_FLAGS, &m1);
	m2.dest.dlid = lid;
	m2.dest.port_num = 1;
	modify(handle, VHCA_QP_ATTR_STATE | VHCA_QP_ATTR_AV |
	       VHCA_QP_ATTR_PATH_MTU | VHCA_QP_ATTR_DEST_QPN |
	       VHCA_QP_ATTR_RQ_PSN | VHCA_QP_ATTR_MAX_DEST_RD_ATOMIC |
	       VHCA_QP_ATTR_MIN_RNR_TIMER, &m2);
	modify(handle, VHCA_QP_ATTR_STATE | VHCA_QP_ATTR_TIMEOUT |
	       VHCA_QP_ATTR_RETRY_CNT | VHCA_QP_ATTR_RNR_RETRY |
	       VHCA_QP_ATTR_SQ_PSN | VHCA_QP_ATTR_MAX_QP_RD_ATOMIC, &m3);
}

int main(int argc, char **argv)
{
	unsigned int lid = argc > 1 ? strtoul(argv[1], NULL, 0) : 1;
	int hold = argc > 2 && !strcmp(argv[2], "hold");
	struct {
		struct ib_uverbs_get_context_resp core;
		struct vhca_ib_alloc_ucontext_resp drv;
	} ctx = { 0 };
	struct {
		struct ib_uverbs_alloc_pd_resp core;
		struct vhca_ib_alloc_pd_resp drv;
	} pd = { 0 };
	struct ib_uverbs_reg_mr_resp mr = { 0 };
	struct {
		struct ib_uverbs_create_cq_resp core;
		struct vhca_ib_create_cq_resp drv;
	} cq = { 0 };
	struct {
		struct ib_uverbs_create_qp_resp core;
		struct vhca_ib_create_qp_resp drv;
	} qp = { 0 };
	uint8_t *uar, *cqr, *sqr, *rqr, *buf;
	volatile uint32_t *qpdb, *cqdb;
	int i;

	fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("uverbs0");
		return 1;
	}

	{
		struct ib_uverbs_get_context c = { .response = (uintptr_t)&ctx };

		CHECK(cmd(IB_USER_VERBS_CMD_GET_CONTEXT, &c, sizeof(c),
			  sizeof(ctx)));
	}
	printf("context: uar %u mmap offset %#llx page %u slots %u caps %#x max_qp_wr %u max_sge %u max_cqe %u comp vectors %u\n",
	       ctx.drv.uar_index, (unsigned long long)ctx.drv.uar_mmap_offset,
	       ctx.drv.uar_page_size, ctx.drv.uar_slots, ctx.drv.cap_flags,
	       ctx.drv.max_qp_wr, ctx.drv.max_sge, ctx.drv.max_cqe,
	       ctx.core.num_comp_vectors);
	uar = mmap(NULL, ctx.drv.uar_page_size, PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, ctx.drv.uar_mmap_offset);
	if (uar == MAP_FAILED) {
		perror("mmap UAR");
		return 1;
	}
	printf("uar: asleep word %u\n",
	       ((volatile struct vhca_uar_header *)uar)->asleep);

	{
		struct ib_uverbs_alloc_pd c = { .response = (uintptr_t)&pd };

		CHECK(cmd(IB_USER_VERBS_CMD_ALLOC_PD, &c, sizeof(c),
			  sizeof(pd)));
	}
	printf("pd: handle %u pdn %u\n", pd.core.pd_handle, pd.drv.pdn);

	buf = page_alloc(3 * 4096);	/* an MR over three pages, offset 100 */
	{
		struct ib_uverbs_reg_mr c = {
			.response = (uintptr_t)&mr,
			.start = (uintptr_t)buf + 100,
			.length = 3 * 4096 - 200,
			.hca_va = (uintptr_t)buf + 100,
			.pd_handle = pd.core.pd_handle,
			.access_flags = VHCA_ACCESS_LOCAL_WRITE |
					VHCA_ACCESS_REMOTE_WRITE |
					VHCA_ACCESS_REMOTE_READ,
		};

		CHECK(cmd(IB_USER_VERBS_CMD_REG_MR, &c, sizeof(c),
			  sizeof(mr)));
	}
	printf("mr: lkey %#x rkey %#x\n", mr.lkey, mr.rkey);

	cqr = page_alloc(2 * 4096);	/* 128 CQEs: a two-page ring */
	{
		struct {
			struct ib_uverbs_create_cq core;
			struct vhca_ib_create_cq drv;
		} c = {
			.core = { .response = (uintptr_t)&cq, .cqe = 100,
				  .comp_channel = -1 },
			.drv = { .buf_addr = (uintptr_t)cqr,
				 .buf_size = 2 * 4096, .log2_entries = 7 },
		};

		CHECK(cmd(IB_USER_VERBS_CMD_CREATE_CQ, &c, sizeof(c),
			  sizeof(cq)));
	}
	printf("cq: handle %u cqn %u entries %u uar %u slot %u\n",
	       cq.core.cq_handle, cq.drv.cqn, cq.drv.entries,
	       cq.drv.uar_index, cq.drv.db_slot);

	sqr = page_alloc(4096);		/* 16 x 64-byte send WQEs */
	rqr = page_alloc(4096);		/* 16 x 32-byte receive WQEs */
	{
		struct {
			struct ib_uverbs_create_qp core;
			struct vhca_ib_create_qp drv;
		} c = {
			.core = {
				.response = (uintptr_t)&qp,
				.pd_handle = pd.core.pd_handle,
				.send_cq_handle = cq.core.cq_handle,
				.recv_cq_handle = cq.core.cq_handle,
				.max_send_wr = 16, .max_recv_wr = 16,
				.max_send_sge = 1, .max_recv_sge = 1,
				.qp_type = VHCA_QPT_RC,
			},
			.drv = {
				.sq_buf_addr = (uintptr_t)sqr,
				.rq_buf_addr = (uintptr_t)rqr,
				.sq_buf_size = 4096, .rq_buf_size = 4096,
				.log2_sq_size = 4, .log2_rq_size = 4,
				.sq_wqe_shift = 6, .rq_wqe_shift = 5,
			},
		};

		CHECK(cmd(IB_USER_VERBS_CMD_CREATE_QP, &c, sizeof(c),
			  sizeof(qp)));
	}
	printf("qp: handle %u qpn %u uar %u slot %u caps wr %u/%u sge %u/%u inline %u\n",
	       qp.core.qp_handle, qp.drv.qpn, qp.drv.uar_index,
	       qp.drv.db_slot, qp.core.max_send_wr, qp.core.max_recv_wr,
	       qp.core.max_send_sge, qp.core.max_recv_sge,
	       qp.core.max_inline_data);

	connect_self(qp.core.qp_handle, qp.drv.qpn, lid);
	printf("qp: RTS, loopback to LID %u\n", lid);

	/* One RECV (buf + 2048) and one SEND of 16 bytes from buf + 100. */
	{
		struct vhca_recv_ctrl *rc = (void *)rqr;
		struct vhca_sge *rs = (void *)(rc + 1);
		struct vhca_send_ctrl *sc = (void *)sqr;
		struct vhca_sge *ss = (void *)(sc + 1);

		rc->wr_id = 0x1111;
		rc->num_sge = 1;
		rs->addr = (uintptr_t)buf + 2048;
		rs->length = 1024;
		rs->lkey = mr.lkey;
		sc->wr_id = 0x2222;
		sc->opcode = VHCA_WR_SEND;
		sc->flags = VHCA_SEND_SIGNALED;
		sc->len = 1;
		ss->addr = (uintptr_t)buf + 100;
		ss->length = 16;
		ss->lkey = mr.lkey;
		memcpy(buf + 100, "vhca uverbs smoke", 16);
	}
	qpdb = (volatile uint32_t *)(uar + qp.drv.db_slot * VHCA_UAR_SLOT_SIZE);
	cqdb = (volatile uint32_t *)(uar + cq.drv.db_slot * VHCA_UAR_SLOT_SIZE);
	atomic_thread_fence(memory_order_seq_cst);
	qpdb[1] = 1;	/* rq_pi */
	qpdb[0] = 1;	/* sq_pi */
	flag_slot(uar, qp.drv.db_slot);
	atomic_thread_fence(memory_order_seq_cst);
	/*
	 * The wake protocol wants a BAR0 WAKE store here when asleep is set;
	 * user space has no way to do it (see guest-driver/README.md): the
	 * device finds the doorbells at its next periodic rescan.
	 */
	printf("doorbells stored; asleep word %u\n",
	       ((volatile struct vhca_uar_header *)uar)->asleep);

	cq_ring = cqr;
	cq_db = cqdb;
	wait_cqe(0);
	wait_cqe(1);
	printf("received \"%.16s\"\n", buf + 2048);
	i = memcmp(buf + 2048, buf + 100, 16);
	if (i) {
		printf("FAIL: data differs\n");
		return 1;
	}

	/* RDMA WRITE into the end of a 1024-page MR (TWO_LEVEL list). */
	{
		size_t big_len = 4 << 20;
		uint8_t *big = mmap(NULL, big_len, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		struct ib_uverbs_reg_mr_resp bmr = { 0 };
		struct ib_uverbs_reg_mr c = {
			.response = (uintptr_t)&bmr,
			.start = (uintptr_t)big,
			.length = big_len,
			.hca_va = (uintptr_t)big,
			.access_flags = VHCA_ACCESS_LOCAL_WRITE |
					VHCA_ACCESS_REMOTE_WRITE,
		};
		uint8_t *w = sqr + 64;
		struct vhca_send_ctrl *sc = (void *)w;
		struct vhca_raddr_seg *ra = (void *)(w + 16);
		struct vhca_sge *ss = (void *)(w + 32);
		volatile struct vhca_cqe *e;

		if (big == MAP_FAILED)
			return 1;
		madvise(big, big_len, MADV_NOHUGEPAGE);
		memset(big, 0, big_len);
		c.pd_handle = pd.core.pd_handle;
		CHECK(cmd(IB_USER_VERBS_CMD_REG_MR, &c, sizeof(c),
			  sizeof(bmr)));
		printf("big mr: 4 MiB, rkey %#x\n", bmr.rkey);
		sc->wr_id = 0x3333;
		sc->opcode = VHCA_WR_RDMA_WRITE;
		sc->flags = VHCA_SEND_SIGNALED;
		sc->len = 1;
		ra->remote_addr = (uintptr_t)big + big_len - 64;
		ra->rkey = bmr.rkey;
		ss->addr = (uintptr_t)buf + 100;
		ss->length = 16;
		ss->lkey = mr.lkey;
		atomic_thread_fence(memory_order_seq_cst);
		qpdb[0] = 2;	/* sq_pi */
		flag_slot(uar, qp.drv.db_slot);
		e = wait_cqe(2);
		i = e->status || memcmp(big + big_len - 64, buf + 100, 16);
	}
	if (i) {
		printf("FAIL: RDMA WRITE\n");
		return 1;
	}

	/* A user SRQ, and a second RC QP receiving from it. */
	{
		struct {
			struct ib_uverbs_create_srq_resp core;
			struct vhca_ib_create_srq_resp drv;
		} srq = { 0 };
		struct {
			struct ib_uverbs_create_srq core;
			struct vhca_ib_create_srq drv;
		} sc = {
			.core = { .response = (uintptr_t)&srq,
				  .pd_handle = pd.core.pd_handle, .max_wr = 16,
				  .max_sge = 1 },
			.drv = { .buf_size = 4096, .log2_entries = 4,
				 .wqe_shift = 5 },
		};
		struct {
			struct ib_uverbs_create_qp_resp core;
			struct vhca_ib_create_qp_resp drv;
		} qp2 = { 0 };
		struct {
			struct ib_uverbs_create_qp core;
			struct vhca_ib_create_qp drv;
		} qc = {
			.core = {
				.response = (uintptr_t)&qp2,
				.pd_handle = pd.core.pd_handle,
				.send_cq_handle = cq.core.cq_handle,
				.recv_cq_handle = cq.core.cq_handle,
				.max_send_wr = 16, .max_send_sge = 1,
				.qp_type = VHCA_QPT_RC, .is_srq = 1,
			},
			.drv = { .sq_buf_size = 4096, .log2_sq_size = 4,
				 .sq_wqe_shift = 6 },
		};
		uint8_t *srqr = page_alloc(4096), *sq2 = page_alloc(4096);
		struct vhca_recv_ctrl *rc = (void *)srqr;
		struct vhca_sge *rs = (void *)(rc + 1);
		struct vhca_send_ctrl *snd = (void *)sq2;
		struct vhca_sge *ss = (void *)(snd + 1);
		volatile uint32_t *sdb, *q2db;
		volatile struct vhca_cqe *e;

		sc.drv.buf_addr = (uintptr_t)srqr;
		CHECK(cmd(IB_USER_VERBS_CMD_CREATE_SRQ, &sc, sizeof(sc),
			  sizeof(srq)));
		printf("srq: srqn %u max_wr %u uar %u slot %u\n", srq.drv.srqn,
		       srq.core.max_wr, srq.drv.uar_index, srq.drv.db_slot);
		qc.core.srq_handle = srq.core.srq_handle;
		qc.drv.sq_buf_addr = (uintptr_t)sq2;
		CHECK(cmd(IB_USER_VERBS_CMD_CREATE_QP, &qc, sizeof(qc),
			  sizeof(qp2)));
		printf("qp2: qpn %u (SRQ) slot %u\n", qp2.drv.qpn,
		       qp2.drv.db_slot);
		connect_self(qp2.core.qp_handle, qp2.drv.qpn, lid);

		rc->wr_id = 0x4444;
		rc->num_sge = 1;
		rs->addr = (uintptr_t)buf + 3072;
		rs->length = 512;
		rs->lkey = mr.lkey;
		snd->wr_id = 0x5555;
		snd->opcode = VHCA_WR_SEND;
		snd->flags = VHCA_SEND_SIGNALED;
		snd->len = 1;
		ss->addr = (uintptr_t)buf + 100;
		ss->length = 16;
		ss->lkey = mr.lkey;
		sdb = (volatile uint32_t *)(uar + srq.drv.db_slot * 8);
		q2db = (volatile uint32_t *)(uar + qp2.drv.db_slot * 8);
		atomic_thread_fence(memory_order_seq_cst);
		sdb[0] = 1;	/* SRQ pi */
		q2db[0] = 1;	/* sq_pi */
		flag_slot(uar, srq.drv.db_slot);
		flag_slot(uar, qp2.drv.db_slot);
		e = wait_cqe(3);
		i = e->wr_id != 0x4444 || e->status;
		e = wait_cqe(4);
		i |= e->wr_id != 0x5555 || e->status;
		i |= memcmp(buf + 3072, buf + 100, 16);
	}
	printf("%s\n", i ? "FAIL: SRQ" : "PASS");
	if (hold) {
		printf("holding the context open\n");
		fflush(stdout);
		pause();
	}
	return i ? 1 : 0;	/* close(fd) destroys every object */
}
