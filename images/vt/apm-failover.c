// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * vhca-apm-failover: automatic path migration between two guests (AD-10,
 * IBA 17.2.8), for images/vm-tests.sh. rdma-core and perftest have no APM
 * test; this one uses libibverbs alone.
 *
 *   server: vhca-apm-failover [-d DEV] [-n N] [-s SIZE] [-U] [-S] -p PORT
 *   client: vhca-apm-failover [-d DEV] [-n N] [-s SIZE] [-U] [-S] -p PORT SERVER_IP
 *
 * The two ports need two paths between them: at least one of them has
 * LMC > 0 (AD-01), so it owns its base LID and base LID + 1. Path 1 ends at
 * the LIDs with path bits 1 (where a port has them), path 0 at the base
 * LIDs. The RC QP pair is connected on path 1 (the primary) with path 0 as
 * the alternate, and armed: REARM at RTR -> RTS, which the device reports as
 * ARMED (query_qp). The server then streams N messages (RDMA WRITEs and
 * SENDs in turn, SIZE bytes each, all signaled, 16 in flight) to the client.
 * vm-tests.sh runs it with a vhca fault that kills path 1 in the server's
 * direction after some of the stream went through (`--fault
 * drop_dlid=3,drop_dlid_after=K`): the server's QP times out on the dead
 * path, migrates and resends on path 0 with MigReq; the client's QP follows.
 *
 * Asserted on both sides: every completion is a success, in order; the data
 * is byte-exact (the client checks every SEND it received and every WRITE's
 * bytes); IBV_EVENT_PATH_MIG arrives for the QP on ibv_get_async_event and no
 * other event does (IBV_EVENT_PATH_MIG_ERR, QP fatal ...); query_qp then
 * reports IBV_MIG_MIGRATED and the former alternate path's DLID as the path.
 * Exit 0 on success.
 *
 * Negative checks (each must make the tool fail, images/vm-tests.sh):
 *   -U  the alternate path is loaded but not armed: the dead path exhausts
 *       the retries (IBV_WC_RETRY_EXC_ERR), no migration;
 *   -S  the paths swapped (the primary is the one the fault does not touch):
 *       nothing fails, no migration, no event.
 */
#include <fcntl.h>
#include <poll.h>

#include "vt.h"

#define MAXN 4096
#define INFLIGHT 16
/* Local ACK Timeout 4.096 us * 2^16 = 268 ms: far above the TCG hosts'
 * scheduling hiccups, so no migration happens before the fault. */
#define ACK_TIMEOUT 16

/* What the two sides exchange over TCP (both guests are x86-64). */
struct info {
	uint16_t lid;
	uint8_t lmc;
	uint8_t rsvd;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
};

static struct ibv_qp *qp;
static int n = 64;
static size_t size = 65536;

static uint8_t pattern(int msg, size_t i)
{
	return (uint8_t)(msg * 131 + i * 7 + (i >> 8));
}

/* One path: to the peer's LID with path bits `bits` (where it has them),
 * from this port's LID with path bits `bits` (where it has them). */
static struct ibv_ah_attr path(const struct ibv_port_attr *me,
			       const struct info *peer, int bits)
{
	struct ibv_ah_attr a = {
		.dlid = peer->lid | (peer->lmc ? bits : 0),
		.src_path_bits = me->lmc ? bits : 0,
		.port_num = 1,
	};

	return a;
}

static void connect_qp(const struct ibv_port_attr *me, const struct info *mine,
		       const struct info *peer, int arm, int swap)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr = path(me, peer, swap ? 0 : 1);
	a.alt_ah_attr = path(me, peer, swap ? 1 : 0);
	a.alt_port_num = 1;
	a.alt_pkey_index = 0;
	a.alt_timeout = ACK_TIMEOUT;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER |
			  IBV_QP_ALT_PATH))
		die("modify to RTR with the alternate path");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = mine->psn;
	a.timeout = ACK_TIMEOUT;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	a.path_mig_state = IBV_MIG_REARM;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
			  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC |
			  (arm ? IBV_QP_PATH_MIG_STATE : 0)))
		die("modify to RTS");
	if (ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_PATH_MIG_STATE |
			 IBV_QP_AV | IBV_QP_ALT_PATH, &qi))
		die("ibv_query_qp");
	printf("%s: QP %#x: path to LID %#x, alternate to LID %#x, path_mig_state %d\n",
	       role, qp->qp_num, q.ah_attr.dlid, q.alt_ah_attr.dlid,
	       q.path_mig_state);
	if (q.ah_attr.dlid == q.alt_ah_attr.dlid &&
	    q.ah_attr.src_path_bits == q.alt_ah_attr.src_path_bits)
		fail("one path only: neither port has LMC > 0");
	if (arm && q.path_mig_state != IBV_MIG_ARMED)
		fail("REARM did not arm the alternate path");
	if (!arm && q.path_mig_state != IBV_MIG_MIGRATED)
		fail("not armed, yet path_mig_state is not MIGRATED");
}

/* Waits for IBV_EVENT_PATH_MIG of our QP; any other event fails. Then the
 * QP must be MIGRATED and on path `want` (the former alternate). */
static void expect_migrated(const struct ibv_ah_attr *want)
{
	double end = now() + 20;
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr qi;
	int flags = fcntl(ctx->async_fd, F_GETFL);

	if (flags < 0 || fcntl(ctx->async_fd, F_SETFL, flags | O_NONBLOCK))
		die("async_fd non-blocking");
	for (;;) {
		struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
		struct ibv_async_event ev;
		int left = (int)((end - now()) * 1000);

		if (left <= 0)
			fail("no IBV_EVENT_PATH_MIG within 20 s");
		if (poll(&p, 1, left) < 0)
			die("poll async_fd");
		if (ibv_get_async_event(ctx, &ev))
			continue;
		printf("%s: async event %s\n", role, ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
		if (ev.event_type != IBV_EVENT_PATH_MIG)
			fail("an async event other than IBV_EVENT_PATH_MIG");
		if (ev.element.qp != qp)
			fail("IBV_EVENT_PATH_MIG for another QP");
		break;
	}
	if (ibv_query_qp(qp, &q, IBV_QP_PATH_MIG_STATE | IBV_QP_AV, &qi))
		die("ibv_query_qp");
	printf("%s: after the event: path to LID %#x path bits %d, path_mig_state %d\n",
	       role, q.ah_attr.dlid, q.ah_attr.src_path_bits, q.path_mig_state);
	if (q.path_mig_state != IBV_MIG_MIGRATED)
		fail("path_mig_state is not MIGRATED after the event");
	if (q.ah_attr.dlid != want->dlid ||
	    q.ah_attr.src_path_bits != want->src_path_bits)
		fail("the QP's path is not the former alternate path");
}

static void post_recv(int msg)
{
	struct ibv_sge s = { (uintptr_t)(buf + msg * size), (uint32_t)size,
			     mr->lkey };
	struct ibv_recv_wr w = { .wr_id = msg, .sg_list = &s, .num_sge = 1 },
			   *bad;

	if (ibv_post_recv(qp, &w, &bad))
		die("ibv_post_recv");
}

static void post_send(int msg, const struct info *peer)
{
	struct ibv_sge s = { (uintptr_t)(buf + msg * size), (uint32_t)size,
			     mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = msg, .sg_list = &s, .num_sge = 1,
		.opcode = (msg & 1) ? IBV_WR_SEND : IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = peer->addr + msg * size,
			     .rkey = peer->rkey },
	}, *bad;

	if (ibv_post_send(qp, &w, &bad))
		die("ibv_post_send");
}

/* Polls `want` completions, in wr_id order from `first` by `step`; calls
 * `more` after each; fails when the peer closed TCP socket `sock` (it failed:
 * no reason to wait for the time limit). */
static void complete(int want, int first, int step, enum ibv_wc_opcode op,
		     void (*more)(void), int sock)
{
	double end = now() + 60;
	int got = 0;

	while (got < want) {
		struct ibv_wc wc;
		int r = ibv_poll_cq(cq, 1, &wc);

		if (r < 0)
			die("ibv_poll_cq");
		if (!r) {
			char c;

			if (recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
				fail("the peer closed the connection (it failed)");
			if (now() > end) {
				fprintf(stderr, "%s: %d of %d completions\n",
					role, got, want);
				fail("timeout waiting for completions");
			}
			continue;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s: wr %llu: %s\n", role,
				(unsigned long long)wc.wr_id,
				ibv_wc_status_str(wc.status));
			fail("completion status");
		}
		if ((int)wc.wr_id != first + got * step)
			fail("completion out of order");
		if (op == IBV_WC_RECV && (wc.opcode != IBV_WC_RECV ||
					  wc.byte_len != size))
			fail("receive opcode or length");
		got++;
		if (more)
			more();
	}
}

static const struct info *peer_info;
static int next_msg;

/* Keeps INFLIGHT messages posted while the stream lasts. */
static void refill(void)
{
	if (next_msg < n)
		post_send(next_msg++, peer_info);
}

static void check_data(int first, int step, const char *what)
{
	int m;
	size_t i;

	for (m = first; m < n; m += step)
		for (i = 0; i < size; i++)
			if (buf[m * size + i] != pattern(m, i)) {
				fprintf(stderr, "%s: message %d byte %zu\n",
					role, m, i);
				fail(what);
			}
}

int main(int argc, char **argv)
{
	const char *dev = NULL;
	int port = 0, c, fd, i, arm = 1, swap = 0;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct info mine, peer;
	struct ibv_ah_attr alt;
	char b;

	role = "apm-failover";
	while ((c = getopt(argc, argv, "d:n:p:s:SU")) != -1) {
		if (c == 'd')
			dev = optarg;
		else if (c == 'n')
			n = atoi(optarg);
		else if (c == 'p')
			port = atoi(optarg);
		else if (c == 's')
			size = strtoul(optarg, NULL, 0);
		else if (c == 'S')
			swap = 1;
		else if (c == 'U')
			arm = 0;
		else
			return 2;
	}
	if (!port || n < 2 || n > MAXN || size < 1 || size > (1 << 20))
		return 2;
	role = optind == argc ? "apm-failover server" : "apm-failover client";
	vt_open(dev, &pa);
	if (ibv_query_device(ctx, &da))
		die("open");
	if (!(da.device_cap_flags & IBV_DEVICE_AUTO_PATH_MIG))
		fail("the device does not report IBV_DEVICE_AUTO_PATH_MIG");
	if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND)
		fail("not an InfiniBand port");
	vt_alloc(2 * INFLIGHT + 8 + n, n * size,
		 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	{
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = INFLIGHT, .max_recv_wr = n,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};

		qp = ibv_create_qp(pd, &ia);
		if (!qp)
			die("ibv_create_qp");
	}
	srand48(getpid() * 2654435761u);
	mine = (struct info){ .lid = pa.lid, .lmc = pa.lmc, .qpn = qp->qp_num,
			      .psn = lrand48() & 0xffffff, .rkey = mr->rkey,
			      .addr = (uintptr_t)buf };

	if (optind == argc) { /* server: the requester */
		int s;
		size_t k;

		fd = vt_listen(port);
		printf("Waiting for client on port %d (LID %#x LMC %d, QP %#x)\n",
		       port, pa.lid, pa.lmc, qp->qp_num);
		fflush(stdout);
		s = vt_accept(fd);
		xfer(s, &mine, sizeof(mine), 1);
		xfer(s, &peer, sizeof(peer), 0);
		connect_qp(&pa, &mine, &peer, arm, swap);
		alt = path(&pa, &peer, swap ? 1 : 0);
		for (i = 0; i < n; i++)
			for (k = 0; k < size; k++)
				buf[i * size + k] = pattern(i, k);
		xfer(s, &b, 1, 0); /* the client's receives are posted */
		peer_info = &peer;
		for (next_msg = 0; next_msg < INFLIGHT && next_msg < n;)
			post_send(next_msg++, &peer);
		complete(n, 0, 1, IBV_WC_SEND, refill, s);
		printf("%s: %d messages of %zu bytes completed\n", role, n, size);
		xfer(s, "W", 1, 1);
		expect_migrated(&alt);
		xfer(s, &b, 1, 0);
		if (b != 'K')
			fail("the client failed");
		printf("%s: PASS: migrated to LID %#x, nothing lost\n", role,
		       alt.dlid);
		return 0;
	} else { /* client: the responder */
		fd = vt_connect(argv[optind], port);
		xfer(fd, &peer, sizeof(peer), 0);
		xfer(fd, &mine, sizeof(mine), 1);
		connect_qp(&pa, &mine, &peer, arm, swap);
		alt = path(&pa, &peer, swap ? 1 : 0);
		for (i = 1; i < n; i += 2)
			post_recv(i);
		xfer(fd, "R", 1, 1);
		complete(n / 2, 1, 2, IBV_WC_RECV, NULL, fd);
		check_data(1, 2, "SEND data");
		xfer(fd, &b, 1, 0); /* every WRITE completed at the server */
		check_data(0, 2, "RDMA WRITE data");
		printf("%s: %d SENDs and %d WRITEs byte-exact\n", role, n / 2,
		       n - n / 2);
		expect_migrated(&alt);
		xfer(fd, "K", 1, 1);
		printf("%s: PASS\n", role);
		return 0;
	}
}
