// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * vhca-odp-stream: RDMA WRITEs between implicit on-demand-paging MRs while
 * the memory under them comes and goes (issue 29 item 1), for
 * images/vm-tests.sh.
 *
 *   server: vhca-odp-stream [-d DEV] [-n ROUNDS] [-s SIZE] -p PORT
 *   client: vhca-odp-stream [-d DEV] [-n ROUNDS] [-s SIZE] -p PORT SERVER_IP
 *
 * Both sides register one implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX,
 * IBV_ACCESS_ON_DEMAND | ...): the whole address space, no page pinned) and
 * connect an RC QP pair. Each round, the client (the target) gives its
 * buffer back to the kernel one of three ways, in turn: munmap and a fresh
 * mmap at the same address (MAP_FIXED: new pages, same address), madvise
 * MADV_DONTNEED (the pages dropped, zero-filled on the next touch), or
 * munmap and mmap wherever the kernel likes; then it tells the server the
 * address. The server (the source) does the same to its own buffer, fills
 * it with the round's pattern and streams it to the client in RDMA WRITEs
 * of SIZE / CHUNKS bytes, all signaled. Every page the device touches was
 * either never mapped for it or taken away since: the device must fault it
 * in again (PAGE_FAULT EQE, MAP_ODP) and must not write through a
 * translation the kernel removed (UNMAP_ODP), or the client's check of
 * every byte fails (a WRITE into the old page leaves the new one zero).
 * Exit 0 on success.
 */
#include <sys/mman.h>

#include "vt.h"

#define CHUNKS 8

/* What the two sides exchange over TCP (both guests are x86-64). */
struct info {
	uint16_t lid;
	uint16_t rsvd;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
};

static struct ibv_qp *qp;
static int rounds = 24;
static size_t size = 262144;

static uint8_t pattern(int round, size_t i)
{
	return (uint8_t)(round * 131 + i * 7 + (i >> 8) + 1);
}

/* Gives `*p` (size bytes) back to the kernel the round's way; the new
 * buffer is in *p. */
static void churn(uint8_t **p, int round)
{
	void *q;

	switch (round % 3) {
	case 0:
		q = mmap(*p, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
		break;
	case 1:
		if (madvise(*p, size, MADV_DONTNEED))
			die("madvise");
		q = *p;
		break;
	default:
		if (munmap(*p, size))
			die("munmap");
		q = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		break;
	}
	if (q == MAP_FAILED)
		die("mmap");
	*p = q;
}

static void connect_qp(const struct info *mine, const struct info *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
	};

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	/* RNR NAKs while the responder faults its pages in: short and many. */
	a.min_rnr_timer = 1;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = mine->psn;
	a.timeout = 16;
	a.retry_cnt = 7;
	a.rnr_retry = 7; /* infinite */
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
			  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

/* The server's round: the source churned and filled, the stream to
 * `addr`, every WRITE completed. */
static void stream(uint8_t **src, int round, uint64_t addr, uint32_t rkey)
{
	size_t chunk = size / CHUNKS, k;
	struct ibv_wc wc;
	int i, done = 0, r;

	churn(src, round);
	for (k = 0; k < size; k++)
		(*src)[k] = pattern(round, k);
	for (i = 0; i < CHUNKS; i++) {
		struct ibv_sge sge = {
			.addr = (uintptr_t)*src + i * chunk,
			.length = chunk, .lkey = mr->lkey,
		};
		struct ibv_send_wr wr = {
			.wr_id = i, .sg_list = &sge, .num_sge = 1,
			.opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED,
			.wr.rdma = { .remote_addr = addr + i * chunk,
				     .rkey = rkey },
		}, *bad;

		if (ibv_post_send(qp, &wr, &bad))
			die("ibv_post_send");
	}
	while (done < CHUNKS) {
		r = ibv_poll_cq(cq, 1, &wc);
		if (r < 0)
			fail("ibv_poll_cq");
		if (!r)
			continue;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "%s: round %d WRITE %llu: %s\n", role,
				round, (unsigned long long)wc.wr_id,
				ibv_wc_status_str(wc.status));
			fail("WRITE completion");
		}
		done++;
	}
}

int main(int argc, char **argv)
{
	int access = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
		     IBV_ACCESS_REMOTE_WRITE;
	struct ibv_device_attr_ex dx;
	const char *dev = NULL;
	int port = 0, c, fd, round;
	struct ibv_port_attr pa;
	struct info mine, peer;
	uint8_t *p;
	uint64_t addr;
	size_t k;
	char b;

	role = "odp-stream";
	while ((c = getopt(argc, argv, "d:n:p:s:")) != -1) {
		if (c == 'd')
			dev = optarg;
		else if (c == 'n')
			rounds = atoi(optarg);
		else if (c == 'p')
			port = atoi(optarg);
		else if (c == 's')
			size = strtoul(optarg, NULL, 0);
		else
			return 2;
	}
	if (!port || rounds < 3 || size < 4096 * CHUNKS || size > (16 << 20) ||
	    size % (4096 * CHUNKS))
		return 2;
	role = optind == argc ? "odp-stream server" : "odp-stream client";
	vt_open(dev, &pa);
	if (ibv_query_device_ex(ctx, NULL, &dx))
		die("ibv_query_device_ex");
	if (!(dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) ||
	    !(dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE))
		fail("the device reports no implicit ODP with RC RDMA WRITE");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 2 * CHUNKS, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");
	mr = ibv_reg_mr(pd, NULL, SIZE_MAX, access);
	if (!mr)
		die("ibv_reg_mr (implicit ODP)");
	{
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = CHUNKS, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};

		qp = ibv_create_qp(pd, &ia);
		if (!qp)
			die("ibv_create_qp");
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	srand48(getpid() * 2654435761u);
	mine = (struct info){ .lid = pa.lid, .qpn = qp->qp_num,
			      .psn = lrand48() & 0xffffff, .rkey = mr->rkey };

	if (optind == argc) { /* server: the source */
		int s;

		fd = vt_listen(port);
		printf("Waiting for client on port %d (LID %#x, QP %#x)\n",
		       port, pa.lid, qp->qp_num);
		fflush(stdout);
		s = vt_accept(fd);
		xfer(s, &mine, sizeof(mine), 1);
		xfer(s, &peer, sizeof(peer), 0);
		connect_qp(&mine, &peer);
		for (round = 0; round < rounds; round++) {
			xfer(s, &addr, sizeof(addr), 0);
			stream(&p, round, addr, peer.rkey);
			xfer(s, "D", 1, 1);
			xfer(s, &b, 1, 0);
			if (b != 'K')
				fail("the client found the data wrong");
		}
		printf("%s: PASS: %d rounds of %zu bytes\n", role, rounds,
		       size);
		return 0;
	}
	/* client: the target */
	fd = vt_connect(argv[optind], port);
	xfer(fd, &peer, sizeof(peer), 0);
	xfer(fd, &mine, sizeof(mine), 1);
	connect_qp(&mine, &peer);
	for (round = 0; round < rounds; round++) {
		churn(&p, round);
		addr = (uintptr_t)p;
		xfer(fd, &addr, sizeof(addr), 1);
		xfer(fd, &b, 1, 0); /* every WRITE completed at the server */
		for (k = 0; k < size; k++)
			if (p[k] != pattern(round, k)) {
				fprintf(stderr,
					"%s: round %d byte %zu: %#x, not %#x\n",
					role, round, k, p[k],
					pattern(round, k));
				xfer(fd, "F", 1, 1);
				fail("data");
			}
		xfer(fd, "K", 1, 1);
	}
	printf("%s: PASS: %d rounds byte-exact\n", role, rounds);
	return 0;
}
