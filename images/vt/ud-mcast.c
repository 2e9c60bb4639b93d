// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * vhca-ud-mcast: UD multicast between two guests (AD-08, PV-07), for
 * images/vm-tests.sh. rdma-core has no multicast pingpong, perftest's --mcg
 * and rdma_cm's IB joins need a subnet manager; this needs none: the group
 * is a fixed MGID/MLID both sides know, and ibv_attach_mcast alone joins.
 *
 *   server: vhca-ud-mcast [-d DEV] [-n N] -p PORT
 *   client: vhca-ud-mcast [-d DEV] [-n N] -p PORT SERVER_IP
 *
 * The server attaches two UD QPs to the group and keeps a third one
 * unattached, then accepts the client on TCP PORT (the only out-of-band
 * exchange: the client's QPN and three sync bytes). The client sends N
 * SENDs to DestQP 0xFFFFFF with a GRH to the MGID; each attached QP must
 * receive all N (GRH flag, sender's QPN, data), the unattached one none.
 * Then the server detaches its second QP and the client sends N more: only
 * the first QP receives them. Exit 0 on success.
 */
#include "vt.h"

#define QKEY 0x11111111u
#define GRH 40
#define MSG 64
#define SLOT (GRH + MSG)
#define MAXN 256

static union ibv_gid mgid;
static uint16_t mlid;

static struct ibv_qp *ud_qp(void)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 64, .max_recv_wr = 2 * MAXN + 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = QKEY };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		die("ibv_create_qp");
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_QKEY))
		die("modify to INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("modify to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify to RTS");
	return qp;
}

/* Receive slot k of QP index q lives at buf + ((q * 2 * MAXN) + k) * SLOT. */
static void post_recv(struct ibv_qp *qp, int q, int k)
{
	uint8_t *at = buf + (size_t)(q * 2 * MAXN + k) * SLOT;
	struct ibv_sge s = { (uintptr_t)at, SLOT, mr->lkey };
	struct ibv_recv_wr w = { .wr_id = (uint64_t)q << 32 | k, .sg_list = &s,
				 .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &w, &bad))
		die("ibv_post_recv");
}

/* Waits for `want` receives on QP index 0 (and the same on 1 if `both`);
 * fails on any receive for another QP, a bad one, or a timeout. */
static void expect(int want, int both, uint32_t src, int round)
{
	int got[3] = { 0, 0, 0 };
	double end = now() + 20, quiet = 0;

	while (now() < end) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		uint8_t *p;
		int q, k, i;

		if (n < 0)
			die("ibv_poll_cq");
		if (!n) {
			if (got[0] == want && got[1] == (both ? want : 0)) {
				if (!quiet)
					quiet = now() + 1; /* strays show */
				else if (now() > quiet)
					return;
			}
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV)
			fail("completion status");
		q = wc.wr_id >> 32;
		k = wc.wr_id & 0xffffffff;
		got[q]++;
		if (q == 2)
			fail("the unattached QP received");
		if (q == 1 && !both)
			fail("the detached QP received");
		if (wc.src_qp != src || !(wc.wc_flags & IBV_WC_GRH) ||
		    wc.byte_len != SLOT)
			fail("source QPN, GRH flag or length");
		p = buf + (size_t)(q * 2 * MAXN + k) * SLOT;
		if (memcmp(p + 24, mgid.raw, 16))
			fail("the GRH's DGID is not the MGID");
		for (i = 0; i < MSG; i++)
			if (p[GRH + i] != (uint8_t)(round * 31 + i))
				fail("payload");
		if (got[q] > want)
			fail("too many receives");
	}
	fprintf(stderr, "ud-mcast: got %d %d %d of %d\n", got[0], got[1],
		got[2], want);
	fail("timeout");
}

static void send_n(struct ibv_qp *qp, struct ibv_ah *ah, int n, int round)
{
	int i;

	for (i = 0; i < MSG; i++)
		buf[i] = (uint8_t)(round * 31 + i);
	for (i = 0; i < n; i++) {
		struct ibv_sge s = { (uintptr_t)buf, MSG, mr->lkey };
		struct ibv_send_wr w = {
			.sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.ud = { .ah = ah, .remote_qpn = 0xffffff,
				   .remote_qkey = QKEY },
		}, *bad;
		struct ibv_wc wc;
		int r;

		if (ibv_post_send(qp, &w, &bad))
			die("ibv_post_send");
		while (!(r = ibv_poll_cq(cq, 1, &wc)))
			;
		if (r < 0 || wc.status != IBV_WC_SUCCESS)
			fail("send completion");
		/* UD has no flow control: give the TCG guests time. */
		usleep(20000);
	}
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	int n = 20, port = 0, c, fd, i;
	struct ibv_port_attr pa;

	role = "ud-mcast";
	while ((c = getopt(argc, argv, "d:n:p:")) != -1) {
		if (c == 'd')
			dev = optarg;
		else if (c == 'n')
			n = atoi(optarg);
		else if (c == 'p')
			port = atoi(optarg);
		else
			return 2;
	}
	if (!port || n < 1 || n > MAXN / 2)
		return 2;
	vt_open(dev, &pa);
	vt_alloc(4 * MAXN, 3 * 2 * MAXN * SLOT, IBV_ACCESS_LOCAL_WRITE);
	/* The group: an IBA MGID and MLID (InfiniBand only: vm-tests.sh's
	 * fabric; on RoCE rdma_cm's joins need no SM, see mckey). */
	if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND)
		fail("not an InfiniBand port");
	{
		uint8_t g[16] = { 0xff, 0x12, 0x40, 0x1b, [14] = port >> 8,
				  [15] = port & 0xff };
		memcpy(mgid.raw, g, 16);
		mlid = 0xc000 | (port & 0x3fff);
	}

	if (optind == argc) { /* server */
		struct ibv_qp *q[3];
		uint32_t src;
		int s;

		for (i = 0; i < 3; i++) {
			int k;

			q[i] = ud_qp();
			for (k = 0; k < 2 * n; k++)
				post_recv(q[i], i, k);
		}
		for (i = 0; i < 2; i++)
			if (ibv_attach_mcast(q[i], &mgid, mlid))
				die("ibv_attach_mcast");
		fd = vt_listen(port);
		printf("Waiting for client on port %d (QPs %#x %#x, unattached %#x)\n",
		       port, q[0]->qp_num, q[1]->qp_num, q[2]->qp_num);
		fflush(stdout);
		s = vt_accept(fd);
		xfer(s, &src, 4, 0);
		xfer(s, "R", 1, 1);
		expect(n, 1, src, 1);
		if (ibv_detach_mcast(q[1], &mgid, mlid))
			die("ibv_detach_mcast");
		xfer(s, "D", 1, 1);
		expect(n, 0, src, 2);
		xfer(s, "K", 1, 1);
		printf("ud-mcast: %d + %d multicast SENDs received as expected\n", n, n);
		return 0;
	} else { /* client */
		struct ibv_ah_attr aa = {
			.dlid = mlid, .is_global = 1, .port_num = 1,
			.grh = { .dgid = mgid, .sgid_index = 0, .hop_limit = 1 },
		};
		struct ibv_qp *qp = ud_qp();
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);
		uint32_t me = qp->qp_num;
		char b;

		if (!ah)
			die("ibv_create_ah");
		fd = vt_connect(argv[optind], port);
		xfer(fd, &me, 4, 1);
		xfer(fd, &b, 1, 0);
		send_n(qp, ah, n, 1);
		xfer(fd, &b, 1, 0);
		send_n(qp, ah, n, 2);
		xfer(fd, &b, 1, 0);
		printf("ud-mcast: sent %d + %d multicast SENDs\n", n, n);
		return 0;
	}
}
