// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * vhca-odp-stream: RDMA WRITEs and READs over implicit on-demand-paging MRs
 * while both guests swap the buffers out, drop them and map new pages in
 * their place (issue 29: "an RC WRITE stream over implicit ODP with the guest
 * swapping pages out and in, byte-exact"), for images/vm-tests.sh.
 *
 *   server: vhca-odp-stream [-d DEV] [-n ROUNDS] [-s SIZE] -p PORT
 *   client: vhca-odp-stream [-d DEV] [-n ROUNDS] [-s SIZE] -p PORT SERVER_IP
 *
 * Each side registers one implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX,
 * IBV_ACCESS_ON_DEMAND ...)): no page is pinned, the device learns each
 * translation from a page fault and forgets it when the guest's MMU notifier
 * says so. In round r the client fills its source with pattern(r), RDMA
 * WRITEs it into the server's target, RDMA READs the target back into a
 * second buffer and checks it; the server checks its target. Between rounds
 * each side does to its buffers one of (r mod 4):
 *   0: nothing (the translations stay: no fault);
 *   1: MADV_PAGEOUT (swapped out to the swap device the caller set up; the
 *      device's next access faults the pages back in from swap);
 *   2: munmap and mmap MAP_FIXED at the same address (new pages; a device
 *      that kept the old translation would write into freed pages and the
 *      server would see its new pages unchanged);
 *   3: MADV_DONTNEED (the pages are dropped and read back as zero).
 * Asserted: every completion succeeds, every byte of every round on both
 * sides, and that MADV_PAGEOUT really swapped pages out (mincore reports them
 * not resident before the device touches them): without swap the tool fails.
 * Exit 0 on success.
 */
#include <sys/mman.h>

#include "vt.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

/* What the two sides exchange over TCP (both guests are x86-64). */
struct info {
	uint16_t lid;
	uint16_t rsvd;
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint64_t addr;
};

static struct ibv_qp *qp;
static size_t size = 256 * 1024;
static long pagesz;

static uint8_t pattern(int round, size_t i)
{
	return (uint8_t)(round * 37 + i * 13 + (i >> 12) + 1);
}

static uint8_t *map_at(void *where)
{
	void *p = mmap(where, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | (where ? MAP_FIXED : 0),
		       -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* Pages of [p, p + size) not resident. */
static size_t not_resident(uint8_t *p)
{
	size_t n = size / pagesz, i, out = 0;
	unsigned char v[n];

	if (mincore(p, size, v))
		die("mincore");
	for (i = 0; i < n; i++)
		out += !(v[i] & 1);
	return out;
}

/* Does action `a` to buffer *p (which may move: it does not, MAP_FIXED);
 * returns the pages swapped out by it (action 1). */
static size_t churn(uint8_t *p, int a)
{
	switch (a) {
	case 1:
		if (madvise(p, size, MADV_PAGEOUT))
			die("madvise(MADV_PAGEOUT)");
		return not_resident(p);
	case 2:
		if (munmap(p, size))
			die("munmap");
		map_at(p);
		return 0;
	case 3:
		if (madvise(p, size, MADV_DONTNEED))
			die("madvise(MADV_DONTNEED)");
		return 0;
	}
	return 0;
}

static void connect_qp(const struct info *mine, const struct info *peer)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
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
	/* 0.64 ms: a responder's page fault answers with an RNR NAK. */
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = mine->psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7; /* infinite: faults take as long as they take */
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN |
			  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

static void rdma(enum ibv_wr_opcode op, uint8_t *local,
		 const struct info *peer)
{
	struct ibv_sge s = { (uintptr_t)local, (uint32_t)size, mr->lkey };
	struct ibv_send_wr w = {
		.wr_id = op, .sg_list = &s, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = peer->addr, .rkey = peer->rkey },
	}, *bad;
	double end = now() + 60;
	struct ibv_wc wc;
	int r;

	if (ibv_post_send(qp, &w, &bad))
		die("ibv_post_send");
	while (!(r = ibv_poll_cq(cq, 1, &wc)))
		if (now() > end)
			fail(op == IBV_WR_RDMA_WRITE ? "WRITE timed out" :
						       "READ timed out");
	if (r < 0)
		die("ibv_poll_cq");
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "%s: %s: %s\n", role,
			op == IBV_WR_RDMA_WRITE ? "WRITE" : "READ",
			ibv_wc_status_str(wc.status));
		fail("completion status");
	}
}

static void check(const uint8_t *p, int round, const char *what)
{
	size_t i;

	for (i = 0; i < size; i++)
		if (p[i] != pattern(round, i)) {
			fprintf(stderr, "%s: round %d: %s byte %zu is %#x, not %#x\n",
				role, round, what, i, p[i], pattern(round, i));
			fail(what);
		}
}

int main(int argc, char **argv)
{
	struct ibv_device_attr_ex dx;
	const char *dev = NULL;
	int port = 0, rounds = 16, c, fd, r;
	struct ibv_port_attr pa;
	struct info mine, peer;
	uint8_t *a, *b;
	size_t swapped = 0, i;
	char ok;

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
	pagesz = sysconf(_SC_PAGESIZE);
	if (!port || rounds < 4 || rounds > 4096 || size < (size_t)pagesz ||
	    size > (64 << 20) || size % pagesz)
		return 2;
	role = optind == argc ? "odp-stream server" : "odp-stream client";
	vt_open(dev, &pa);
	if (ibv_query_device_ex(ctx, NULL, &dx))
		die("ibv_query_device_ex");
	if (!(dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT))
		fail("the device does not report IBV_ODP_SUPPORT_IMPLICIT");
	if ((dx.odp_caps.per_transport_caps.rc_odp_caps &
	     (IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ)) !=
	    (IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ))
		fail("the device does not report RC WRITE and READ over ODP");
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!pd || !cq)
		die("pd/cq");
	mr = ibv_reg_mr(pd, NULL, SIZE_MAX,
			IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
				IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		die("ibv_reg_mr(implicit ODP)");
	{
		struct ibv_qp_init_attr ia = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 2, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};

		qp = ibv_create_qp(pd, &ia);
		if (!qp)
			die("ibv_create_qp");
	}
	a = map_at(NULL); /* client: source; server: target */
	b = map_at(NULL); /* client: where READs land */
	srand48(getpid() * 2654435761u);
	mine = (struct info){ .lid = pa.lid, .qpn = qp->qp_num,
			      .psn = lrand48() & 0xffffff, .rkey = mr->rkey,
			      .addr = (uintptr_t)a };

	if (optind == argc) { /* server: the target, checked each round */
		int s;

		fd = vt_listen(port);
		printf("Waiting for client on port %d (LID %#x, QP %#x)\n",
		       port, pa.lid, qp->qp_num);
		fflush(stdout);
		s = vt_accept(fd);
		xfer(s, &mine, sizeof(mine), 1);
		xfer(s, &peer, sizeof(peer), 0);
		connect_qp(&mine, &peer);
		for (r = 0; r < rounds; r++) {
			xfer(s, &ok, 1, 0); /* the client's WRITE and READ completed */
			if (ok != 'W')
				fail("the client failed");
			check(a, r, "target after the WRITE");
			swapped += churn(a, (r + 1) % 4);
			xfer(s, "N", 1, 1);
		}
		xfer(s, &swapped, sizeof(swapped), 1);
		printf("%s: %d rounds of %zu bytes byte-exact; %zu target pages swapped out\n",
		       role, rounds, size, swapped);
		if (!swapped)
			fail("MADV_PAGEOUT swapped nothing out (is swap on?)");
		printf("%s: PASS\n", role);
		return 0;
	}
	fd = vt_connect(argv[optind], port);
	xfer(fd, &peer, sizeof(peer), 0);
	xfer(fd, &mine, sizeof(mine), 1);
	connect_qp(&mine, &peer);
	for (r = 0; r < rounds; r++) {
		int act = r % 4;

		for (i = 0; i < size; i++)
			a[i] = pattern(r, i);
		/* Swapped out after it was written: the device's gather
		 * faults it back in from swap. */
		swapped += churn(a, act == 1 ? 1 : 0);
		rdma(IBV_WR_RDMA_WRITE, a, &peer);
		memset(b, 0, size);
		swapped += churn(b, act);
		rdma(IBV_WR_RDMA_READ, b, &peer);
		check(b, r, "READ back");
		check(a, r, "source after the WRITE");
		xfer(fd, "W", 1, 1);
		xfer(fd, &ok, 1, 0);
		if (ok != 'N')
			fail("the server failed");
		churn(a, act == 2 ? 2 : act == 3 ? 3 : 0);
	}
	{
		size_t theirs;

		xfer(fd, &theirs, sizeof(theirs), 0);
		printf("%s: %d rounds of %zu bytes byte-exact; pages swapped out: %zu here, %zu at the server\n",
		       role, rounds, size, swapped, theirs);
	}
	if (!swapped)
		fail("MADV_PAGEOUT swapped nothing out (is swap on?)");
	printf("%s: PASS\n", role);
	return 0;
}
