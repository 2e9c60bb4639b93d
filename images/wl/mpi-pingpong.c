/*
 * images/wl/mpi-pingpong.c — the MPI check of images/roce-tests.sh's workload
 * pairs (issue 15): two ranks, one per guest.
 *   1. ping-pong of 8 bytes and of 64 KiB (MPI_Send/MPI_Recv), every message's
 *      bytes checked, the half round-trip time and the 64 KiB bandwidth printed;
 *   2. MPI_Allreduce (sum) of a 64 Ki-element vector of doubles whose expected
 *      result is known per element, checked;
 *   3. MPI_Barrier.
 * Prints "mpi-pingpong: PASS ..." and exits 0 only if every check holds.
 * Usage: mpi-pingpong [ITERATIONS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_pattern(const unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)(i * 31 + seed))
			return 0;
	return 1;
}

static void fill_pattern(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 31 + seed);
}

/* Ping-pong of n bytes, iters round trips; returns the half round trip in us,
 * or a negative value if a message arrived wrong. */
static double pingpong(int rank, size_t n, int iters, unsigned char *buf)
{
	int peer = 1 - rank, ok = 1;
	double t0 = 0;

	MPI_Barrier(MPI_COMM_WORLD);
	for (int i = -1; i < iters; i++) {
		if (i == 0)
			t0 = MPI_Wtime(); /* iteration -1 warms up */
		unsigned seed = (unsigned)i * 7 + (unsigned)n;
		if (rank == 0) {
			fill_pattern(buf, n, seed);
			MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			ok &= check_pattern(buf, n, seed + 1);
		} else {
			MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			ok &= check_pattern(buf, n, seed);
			fill_pattern(buf, n, seed + 1);
			MPI_Send(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
		}
	}
	double us = (MPI_Wtime() - t0) * 1e6 / iters / 2;
	int all_ok = 0;
	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	return all_ok ? us : -1;
}

int main(int argc, char **argv)
{
	int rank, size, iters = argc > 1 ? atoi(argv[1]) : 200;
	enum { BIG = 65536, N = 65536 };

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2 || iters < 1) {
		if (rank == 0)
			fprintf(stderr, "mpi-pingpong: needs 2 ranks (has %d) and ITERATIONS >= 1\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	char host[MPI_MAX_PROCESSOR_NAME];
	int len;
	MPI_Get_processor_name(host, &len);
	printf("mpi-pingpong: rank %d of %d on %s\n", rank, size, host);
	fflush(stdout);

	unsigned char *buf = malloc(BIG);
	double *v = malloc(N * sizeof(double)), *r = malloc(N * sizeof(double));
	if (!buf || !v || !r)
		MPI_Abort(MPI_COMM_WORLD, 3);

	double lat = pingpong(rank, 8, iters, buf);
	double big = pingpong(rank, BIG, iters, buf);

	/* Allreduce: element i of rank k is i + k * 0.5; the sum is 2i + 0.5. */
	for (int i = 0; i < N; i++)
		v[i] = i + rank * 0.5;
	MPI_Allreduce(v, r, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	int ok = 1;
	for (int i = 0; i < N; i++)
		if (r[i] != 2.0 * i + 0.5)
			ok = 0;
	int all_ok = 0;
	MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);

	int pass = lat >= 0 && big >= 0 && all_ok;
	if (rank == 0) {
		printf("mpi-pingpong: 8 B half round trip %.1f us, 64 KiB %.1f us (%.1f MB/s), "
		       "allreduce of %d doubles %s\n",
		       lat, big, big > 0 ? BIG / big : 0.0, N, all_ok ? "correct" : "WRONG");
		printf("mpi-pingpong: %s\n", pass ? "PASS" : "FAIL");
	}
	free(buf);
	free(v);
	free(r);
	MPI_Finalize();
	return pass ? 0 : 1;
}
