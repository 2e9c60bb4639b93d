/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * What the images/vt/ tools share (vm-tests.sh builds each one from its .c
 * alone, with gcc -Wall -Wextra -Werror: everything here is static, the
 * functions inline so a tool need not use them all): failing with a message
 * under the tool's role, the TCP side channel, and the verbs bring-up of
 * device, PD, CQ and one registered buffer.
 */
#ifndef VHCA_VT_H
#define VHCA_VT_H

#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The tool's name in its messages; main sets it first. */
static const char *role;

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static uint8_t *buf;

static inline __attribute__((noreturn)) void die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", role, what, strerror(errno));
	exit(1);
}

static inline __attribute__((noreturn)) void fail(const char *what)
{
	fprintf(stderr, "%s: FAIL %s\n", role, what);
	exit(1);
}

static inline double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static inline void xfer(int fd, void *p, size_t len, int out)
{
	ssize_t r = out ? write(fd, p, len) : read(fd, p, len);

	if (r != (ssize_t)len)
		fail(out ? "tcp write" : "tcp read");
}

/* Opens device `dev` (the first one when NULL) into ctx; port 1's
 * attributes into *pa. */
static inline void vt_open(const char *dev, struct ibv_port_attr *pa)
{
	struct ibv_device **l = ibv_get_device_list(NULL);
	int i;

	for (i = 0; l && l[i]; i++)
		if (!dev || !strcmp(ibv_get_device_name(l[i]), dev))
			break;
	if (!l || !l[i])
		fail("no such device");
	ctx = ibv_open_device(l[i]);
	if (!ctx || ibv_query_port(ctx, 1, pa))
		die("open");
}

/* A PD, a CQ of `cqe` entries and a zeroed buffer of `len` bytes
 * registered with `access`, into pd, cq, buf and mr. */
static inline void vt_alloc(int cqe, size_t len, int access)
{
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, cqe, NULL, NULL, 0);
	buf = calloc(1, len);
	if (!pd || !cq || !buf)
		die("pd/cq/buffer");
	mr = ibv_reg_mr(pd, buf, len, access);
	if (!mr)
		die("ibv_reg_mr");
}

/* The server's TCP socket, listening on `port`. */
static inline int vt_listen(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port) };
	int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1))
		die("listen");
	return fd;
}

/* The one client's connection on listening socket `fd`. */
static inline int vt_accept(int fd)
{
	int s = accept(fd, NULL, NULL);

	if (s < 0)
		die("accept");
	return s;
}

/* The client's TCP connection to `ip`:`port`; exits 1 when the server is
 * not there. */
static inline int vt_connect(const char *ip, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
		fail("bad server address");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		fprintf(stderr, "%s: couldn't connect: %s\n", role,
			strerror(errno));
		exit(1);
	}
	return fd;
}

#endif
