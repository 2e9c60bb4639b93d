// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * mw-edge: memory windows through libvhca against the first device, two RC
 * QPs of one device connected to each other: capabilities, a wrong type,
 * type 1 bind (ibv_bind_mw) and an RDMA WRITE through it, refusals at post
 * time (other key index, no MR, no MW, ZERO_BASED, NULL bind_info) and by the
 * device (MR without MW_BIND: MW_BIND_ERR), type 2 bind through ibv_wr_bind_mw,
 * SEND_WITH_INV received with WITH_INV and the invalidated R_Key (extended
 * CQ), rebind after invalidation, LOCAL_INV, and deallocating bound windows
 * (then the MR and PD go too).
 *
 * Build (in the host root):
 *   VHCA_BIND=/tmp/ov images/in-root.sh gcc -O1 -Wall \
 *       -o /tmp/ov/usr/bin/mw-edge guest-driver/provider/test/mw-edge.c -libverbs
 * Run:  images/vm-pair.sh --ready '' --overlay /tmp/ov mw-edge true
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int fails;
#define EXPECT(c, ...) do { if (!(c)) { fails++; printf("FAIL %s:%d: ", __func__, __LINE__); printf(__VA_ARGS__); printf("\n"); } else printf("ok   %s\n", #c); } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq_ex *cqx;
static struct ibv_qp *qa, *qb;
static uint16_t lid;

static struct ibv_qp *mkqp(void)
{
	struct ibv_qp_init_attr_ex a = {
		.send_cq = ibv_cq_ex_to_cq(cqx), .recv_cq = ibv_cq_ex_to_cq(cqx),
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC, .pd = pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
				  IBV_QP_EX_WITH_SEND_WITH_INV,
	};
	struct ibv_qp *q = ibv_create_qp_ex(ctx, &a);
	if (!q) { perror("create_qp_ex"); exit(1); }
	return q;
}

static void connect(struct ibv_qp *q, uint32_t dqpn)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) exit(2);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dqpn;
	a.rq_psn = 0; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
	a.ah_attr.dlid = lid; a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) exit(3);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 0; a.max_rd_atomic = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) exit(4);
}

static struct ibv_wc poll1(void)
{
	struct ibv_wc wc;
	int n;
	for (long i = 0; i < 200000000L; i++) {
		n = ibv_poll_cq(ibv_cq_ex_to_cq(cqx), 1, &wc);
		if (n) return wc;
	}
	printf("FAIL poll timeout\n");
	exit(5);
}

int main(void)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;
	struct ibv_device_attr da;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	struct ibv_mw *m1, *m2;
	char *buf = aligned_alloc(4096, 8192), *dst = aligned_alloc(4096, 4096);
	struct ibv_mr *mr, *mr_nobind, *dmr;
	struct ibv_sge sge;
	struct ibv_cq_init_attr_ex cqa = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS };

	ctx = ibv_open_device(l[0]);
	pd = ibv_alloc_pd(ctx);
	ibv_query_port(ctx, 1, &pa); lid = pa.lid;
	ibv_query_device(ctx, &da);
	EXPECT(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW, "no MEM_WINDOW");
	EXPECT(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, "no TYPE_2B");
	EXPECT(da.max_mw > 0, "max_mw %d", da.max_mw);
	cqx = ibv_create_cq_ex(ctx, &cqa);
	qa = mkqp(); qb = mkqp();
	connect(qa, qb->qp_num); connect(qb, qa->qp_num);
	mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	mr_nobind = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	dmr = ibv_reg_mr(pd, dst, 4096, IBV_ACCESS_LOCAL_WRITE);

	errno = 0;
	EXPECT(!ibv_alloc_mw(pd, 3) && errno == EINVAL, "type 3: errno %d", errno);
	m1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	m2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	EXPECT(m1 && m2, "alloc");

	/* type 1 bind, then RDMA WRITE through it */
	struct ibv_mw_bind mb = { .wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)buf + 100, .length = 1000,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	uint32_t k0 = m1->rkey;
	EXPECT(ibv_bind_mw(qa, m1, &mb) == 0, "bind1");
	EXPECT(m1->rkey == ibv_inc_rkey(k0), "rkey %x", m1->rkey);
	wc = poll1();
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 1, "bind wc st %d op %d", wc.status, wc.opcode);

	mb.bind_info.mw_access_flags = IBV_ACCESS_ZERO_BASED;
	EXPECT(ibv_bind_mw(qa, m1, &mb) == EINVAL, "zero based");
	mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	EXPECT(ibv_bind_mw(qa, m2, &mb) == EINVAL, "type2 via bind_mw");

	/* bad type-2 post_sends */
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_BIND_MW; wr.send_flags = IBV_SEND_SIGNALED; wr.wr_id = 2;
	wr.bind_mw.mw = m2; wr.bind_mw.rkey = m2->rkey + 0x100;
	wr.bind_mw.bind_info = mb.bind_info;
	EXPECT(ibv_post_send(qa, &wr, &bad) == EINVAL && bad == &wr, "other index");
	wr.bind_mw.rkey = ibv_inc_rkey(m2->rkey);
	wr.bind_mw.bind_info.mr = NULL;
	EXPECT(ibv_post_send(qa, &wr, &bad) == EINVAL, "no mr");
	wr.bind_mw.mw = NULL;
	EXPECT(ibv_post_send(qa, &wr, &bad) == EINVAL, "no mw");
	/* device-side refusal: MR without MW_BIND -> MW_BIND_ERR CQE */
	wr.bind_mw.mw = m2; wr.bind_mw.bind_info.mr = mr_nobind;
	uint32_t k2 = m2->rkey;
	EXPECT(ibv_post_send(qa, &wr, &bad) == 0, "post nobind");
	wc = poll1();
	EXPECT(wc.status == IBV_WC_MW_BIND_ERR, "nobind st %d", wc.status);
	/* QP a is in error now; use qb for the rest after resetting qa */
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
		ibv_modify_qp(qa, &a, IBV_QP_STATE);
		ibv_modify_qp(qb, &a, IBV_QP_STATE);
		connect(qa, qb->qp_num); connect(qb, qa->qp_num);
		m2->rkey = k2; /* undo, as the caller must */
	}
	/* type 1 window still bound (device state survives QP reset): write through it */
	strcpy(dst, "hello-mw");
	sge.addr = (uintptr_t)dst; sge.length = 9; sge.lkey = dmr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE; wr.send_flags = IBV_SEND_SIGNALED; wr.wr_id = 3;
	wr.sg_list = &sge; wr.num_sge = 1;
	wr.wr.rdma.remote_addr = (uintptr_t)buf + 100; wr.wr.rdma.rkey = m1->rkey;
	EXPECT(ibv_post_send(qb, &wr, &bad) == 0, "post write");
	wc = poll1();
	EXPECT(wc.status == IBV_WC_SUCCESS && !strcmp(buf + 100, "hello-mw"), "write st %d", wc.status);

	/* type 2 through the extended API, then SEND_WITH_INV from the peer */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qa);
	struct ibv_mw_bind_info bi = { .mr = mr, .addr = (uintptr_t)buf, .length = 4096,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE };
	uint32_t nk = ibv_inc_rkey(m2->rkey);
	ibv_wr_start(x); x->wr_id = 4; x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, m2, nk, NULL);
	EXPECT(ibv_wr_complete(x) == EINVAL, "null bind_info");
	ibv_wr_start(x); x->wr_id = 4; x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, m2, nk, &bi);
	EXPECT(ibv_wr_complete(x) == 0, "wr_bind_mw");
	wc = poll1();
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "bind2 st %d op %d", wc.status, wc.opcode);
	struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = NULL, .num_sge = 0 }, *rbad;
	EXPECT(ibv_post_recv(qa, &rw, &rbad) == 0, "recv");
	struct ibv_qp_ex *xb = ibv_qp_to_qp_ex(qb);
	ibv_wr_start(xb); xb->wr_id = 6; xb->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(xb, nk);
	ibv_wr_set_sge_list(xb, 0, NULL);
	EXPECT(ibv_wr_complete(xb) == 0, "send_inv");
	{
		struct ibv_poll_cq_attr pa2 = {};
		int got = 0, seen_recv = 0;
		while (got < 2) {
			int r = ibv_start_poll(cqx, &pa2);
			if (r == ENOENT) continue;
			do {
				got++;
				if (ibv_wc_read_opcode(cqx) == IBV_WC_RECV) {
					seen_recv = 1;
					EXPECT(cqx->status == IBV_WC_SUCCESS &&
					       (ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_INV) &&
					       ibv_wc_read_invalidated_rkey(cqx) == nk,
					       "recv inv st %d flags %x rkey %x", cqx->status,
					       ibv_wc_read_wc_flags(cqx), ibv_wc_read_invalidated_rkey(cqx));
				} else {
					EXPECT(cqx->status == IBV_WC_SUCCESS, "send st %d", cqx->status);
				}
			} while (got < 2 && ibv_next_poll(cqx) == 0);
			ibv_end_poll(cqx);
		}
		EXPECT(seen_recv, "recv cqe");
	}
	/* rebind after invalidate (named by mw->rkey), then LOCAL_INV */
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_BIND_MW; wr.send_flags = IBV_SEND_SIGNALED; wr.wr_id = 7;
	wr.bind_mw.mw = m2; wr.bind_mw.rkey = ibv_inc_rkey(m2->rkey); wr.bind_mw.bind_info = bi;
	EXPECT(ibv_post_send(qa, &wr, &bad) == 0, "rebind");
	wc = poll1();
	EXPECT(wc.status == IBV_WC_SUCCESS, "rebind st %d", wc.status);
	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_LOCAL_INV; wr.send_flags = IBV_SEND_SIGNALED; wr.wr_id = 8;
	wr.invalidate_rkey = m2->rkey;
	EXPECT(ibv_post_send(qa, &wr, &bad) == 0, "local inv");
	wc = poll1();
	EXPECT(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "linv st %d op %d", wc.status, wc.opcode);

	/* teardown: dealloc bound windows (stale kernel key), then the MR and PD */
	EXPECT(ibv_bind_mw(qa, m1, &mb) == 0, "bind1 again");
	wc = poll1();
	EXPECT(ibv_dealloc_mw(m1) == 0, "dealloc1");
	EXPECT(ibv_dealloc_mw(m2) == 0, "dealloc2");
	EXPECT(ibv_dereg_mr(mr) == 0, "dereg mr (no window left)");
	ibv_dereg_mr(mr_nobind); ibv_dereg_mr(dmr);
	ibv_destroy_qp(qa); ibv_destroy_qp(qb);
	ibv_destroy_cq(ibv_cq_ex_to_cq(cqx));
	EXPECT(ibv_dealloc_pd(pd) == 0, "dealloc pd");
	printf("mw-edge: %s (%d failures)\n", fails ? "FAILED" : "PASSED", fails);
	return fails != 0;
}
