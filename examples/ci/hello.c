/* examples/ci/hello.c — a program of yours, built on the host, run in both
 * guests of `scripts/vhca-vm run --share examples/ci -- sh ci.sh`: an RC
 * connection over rdma_cm between VHCA_SERVER_IP and VHCA_CLIENT_IP, a SEND
 * each way and a 64 KiB RDMA WRITE that the server checks byte by byte.
 *
 * Build (on the host; the binary must link against a glibc no newer than
 * the guests' Debian trixie, e.g. in vhca's tool root):
 *   images/in-root.sh gcc -O2 -Wall -o examples/ci/hello examples/ci/hello.c -lrdmacm -libverbs
 * Run:  hello server IP PORT   |   hello client IP PORT
 * Exit status 0 when the bytes arrived intact; a line on stderr otherwise.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define LEN (64 * 1024)

struct info { uint64_t addr; uint32_t rkey; uint32_t len; };

static int die(const char *what)
{
	fprintf(stderr, "hello: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint8_t pattern(size_t i) { return (uint8_t)(i * 7 + (i >> 8) + 1); }

static struct rdma_addrinfo *resolve(const char *ip, const char *port, int passive)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(ip, port, &hints, &res))
		die("rdma_getaddrinfo");
	return res;
}

static void wait_comp(struct rdma_cm_id *id, int recv, const char *what)
{
	struct ibv_wc wc;
	int n = recv ? rdma_get_recv_comp(id, &wc) : rdma_get_send_comp(id, &wc);
	if (n <= 0)
		die(what);
	if (wc.status != IBV_WC_SUCCESS) {
		fprintf(stderr, "hello: %s: completion status %s\n", what, ibv_wc_status_str(wc.status));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 4, .max_recv_wr = 4,
		.max_send_sge = 1, .max_recv_sge = 1 }, .sq_sig_all = 1 };
	struct rdma_cm_id *id = NULL, *listen_id;
	static uint8_t data[LEN];
	static char msg[64], reply[64];
	struct info info;
	struct ibv_mr *mr_data, *mr_msg, *mr_reply, *mr_info;
	int server, tries;

	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: hello server|client IP PORT\n");
		return 2;
	}
	server = !strcmp(argv[1], "server");
	alarm(120); /* never hang a CI job: a lost peer ends the run */

	if (server) {
		struct rdma_addrinfo *res = resolve(argv[2], argv[3], 1);
		if (rdma_create_ep(&listen_id, res, NULL, &attr))
			die("rdma_create_ep");
		if (rdma_listen(listen_id, 1))
			die("rdma_listen");
		printf("hello: server listening on %s:%s\n", argv[2], argv[3]);
		fflush(stdout);
		if (rdma_get_request(listen_id, &id))
			die("rdma_get_request");
		mr_data = ibv_reg_mr(id->pd, data, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		mr_msg = rdma_reg_msgs(id, msg, sizeof(msg));
		mr_info = rdma_reg_msgs(id, &info, sizeof(info));
		if (!mr_data || !mr_msg || !mr_info)
			die("register");
		if (rdma_post_recv(id, NULL, msg, sizeof(msg), mr_msg))
			die("rdma_post_recv");
		if (rdma_accept(id, NULL))
			die("rdma_accept");
		info = (struct info){ (uintptr_t)data, mr_data->rkey, LEN };
		if (rdma_post_send(id, NULL, &info, sizeof(info), mr_info, 0))
			die("rdma_post_send");
		wait_comp(id, 0, "send info");
		wait_comp(id, 1, "recv done");
		for (size_t i = 0; i < LEN; i++)
			if (data[i] != pattern(i)) {
				fprintf(stderr, "hello: server: byte %zu is %u, not %u\n", i, data[i], pattern(i));
				snprintf(msg, sizeof(msg), "mismatch");
				rdma_post_send(id, NULL, msg, sizeof(msg), mr_msg, 0);
				return 1;
			}
		snprintf(msg, sizeof(msg), "verified %d bytes", LEN);
		if (rdma_post_send(id, NULL, msg, sizeof(msg), mr_msg, 0))
			die("rdma_post_send");
		wait_comp(id, 0, "send verdict");
		printf("hello: server: %d bytes written by the client, all intact\n", LEN);
		rdma_disconnect(id);
		return 0;
	}

	/* The client: the server may not listen yet, and the route to it may
	 * not resolve at once; retry for 30 s, saying why. */
	for (tries = 0;; tries++) {
		struct rdma_addrinfo *res = resolve(argv[2], argv[3], 0);
		/* A fresh copy each try: rdma_create_ep writes the CQs it made
		 * into the attributes, and those die with a failed try's id. */
		struct ibv_qp_init_attr a = attr;
		int rc = rdma_create_ep(&id, res, NULL, &a);
		rdma_freeaddrinfo(res);
		if (rc) {
			if (tries >= 30)
				die("rdma_create_ep");
			fprintf(stderr, "hello: rdma_create_ep: %s; retrying\n", strerror(errno));
			sleep(1);
			continue;
		}
		mr_data = rdma_reg_write(id, data, LEN);
		mr_reply = rdma_reg_msgs(id, reply, sizeof(reply));
		mr_info = rdma_reg_msgs(id, &info, sizeof(info));
		if (!mr_data || !mr_reply || !mr_info)
			die("register");
		if (rdma_post_recv(id, NULL, &info, sizeof(info), mr_info))
			die("rdma_post_recv");
		if (!rdma_connect(id, NULL))
			break;
		if (tries >= 30)
			die("rdma_connect");
		fprintf(stderr, "hello: rdma_connect: %s; retrying\n", strerror(errno));
		rdma_dereg_mr(mr_data);
		rdma_dereg_mr(mr_reply);
		rdma_dereg_mr(mr_info);
		rdma_destroy_ep(id);
		sleep(1);
	}
	wait_comp(id, 1, "recv info");
	for (size_t i = 0; i < LEN; i++)
		data[i] = pattern(i);
	if (rdma_post_recv(id, NULL, reply, sizeof(reply), mr_reply))
		die("rdma_post_recv");
	if (rdma_post_write(id, NULL, data, LEN, mr_data, 0, info.addr, info.rkey))
		die("rdma_post_write");
	wait_comp(id, 0, "rdma write");
	snprintf(msg, sizeof(msg), "done");
	mr_msg = rdma_reg_msgs(id, msg, sizeof(msg));
	if (!mr_msg || rdma_post_send(id, NULL, msg, sizeof(msg), mr_msg, 0))
		die("rdma_post_send");
	wait_comp(id, 0, "send done");
	wait_comp(id, 1, "recv verdict");
	printf("hello: client: the server says \"%s\"\n", reply);
	rdma_disconnect(id);
	return strncmp(reply, "verified", 8) != 0;
}
