// SPDX-License-Identifier: MIT
/*
 * bench/paging_threads.c - several threads faulting on one pool_map() at
 * once: random 4 KiB reads of a mapping 32 times its budget (every read
 * a remote fault), with the engine's batched fetches (fetch_batch():
 * the faults read together from the userfaultfd are fetched with their
 * reads in flight at once) and without (LIBPOOL_PAGING_BATCH=0: one
 * fetch at a time), and, as the baseline in the same run, synchronous
 * 4 KiB pool_read()s from one thread. Results: docs/bench/paging.md.
 *
 *   paging_threads ADDR [runs]
 *
 * Each configuration runs in a child process of its own (the engine reads
 * LIBPOOL_PAGING_BATCH when it starts); medians of runs (default 3).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpool/paging.h"
#include "tidepool/pool.h"
#include "tidepool/pool_map.h"

#define PG 4096u
#define SIZE (256ul << 20)
#define LOCAL (8ul << 20)
#define READS 3000 /* per thread */
#define MAX_RUNS 9

static const uint8_t *mem;
static volatile uint64_t sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *reader(void *arg)
{
	uint64_t x = (uint64_t)(uintptr_t)arg * 2654435761u + 1, s = 0;

	for (int i = 0; i < READS; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		s += mem[((x >> 24) % (SIZE / PG)) * PG];
	}
	sink += s;
	return NULL;
}

/* One run: threads reading; prints "faults_per_s batches". */
static int run_threads(const char *addr, int nthreads)
{
	struct pool_opts o = { .addr = addr };
	struct pool_map_stats st;
	struct pool_region *r;
	pthread_t th[16];
	struct pool *p;
	double t0, t;
	void *a;

	int ret;

	if ((ret = pool_connect(&o, &p)) || (ret = pool_alloc(p, SIZE, &r)) ||
	    (ret = pool_map(p, r, LOCAL, 0, &a))) {
		fprintf(stderr, "paging_threads: %s\n", pool_strerror(ret));
		return 1;
	}
	memset(a, 1, SIZE); /* all but the budget written back */
	mem = a;
	t0 = now_s();
	for (int i = 0; i < nthreads; i++)
		pthread_create(&th[i], NULL, reader, (void *)(uintptr_t)i);
	for (int i = 0; i < nthreads; i++)
		pthread_join(th[i], NULL);
	t = now_s() - t0;
	pool_map_get_stats(a, &st);
	printf("%.0f %llu\n", nthreads * READS / t,
	       (unsigned long long)st.batches);
	pool_unmap(p, a, POOL_UNMAP_DISCARD);
	pool_free(p, r);
	pool_close(p);
	return 0;
}

/* The baseline: synchronous 4 KiB pool_read()s at random offsets. */
static int run_reads(const char *addr)
{
	struct pool_opts o = { .addr = addr };
	struct pool_region *r;
	struct pool *p;
	uint8_t buf[PG];
	uint64_t x = 7;
	double t0, t;

	int ret;

	if ((ret = pool_connect(&o, &p)) || (ret = pool_alloc(p, SIZE, &r))) {
		fprintf(stderr, "paging_threads: %s\n", pool_strerror(ret));
		return 1;
	}
	pool_read(p, r, 0, buf, PG); /* connects the data path */
	t0 = now_s();
	for (int i = 0; i < READS; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		if (pool_read(p, r, ((x >> 24) % (SIZE / PG)) * PG, buf, PG))
			return 1;
	}
	t = now_s() - t0;
	printf("%.0f 0\n", READS / t);
	pool_free(p, r);
	pool_close(p);
	return 0;
}

/* Runs one configuration in a child; its rate, or -1. */
static double child(const char *addr, int nthreads, const char *batch)
{
	int fd[2], st;
	char out[128] = "";
	pid_t pid;
	ssize_t n;

	if (pipe(fd))
		return -1;
	fflush(stdout); /* else the child inherits what is buffered */
	pid = fork();
	if (pid == 0) {
		dup2(fd[1], STDOUT_FILENO);
		close(fd[0]);
		setenv("LIBPOOL_PAGING_BATCH", batch, 1);
		int rc = nthreads ? run_threads(addr, nthreads)
				  : run_reads(addr);

		fflush(stdout);
		_exit(rc);
	}
	close(fd[1]);
	n = read(fd[0], out, sizeof(out) - 1);
	close(fd[0]);
	waitpid(pid, &st, 0);
	if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return -1;
	return atof(out);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(const char *addr, int nthreads, const char *batch,
		     int runs)
{
	double v[MAX_RUNS];

	for (int i = 0; i < runs; i++)
		v[i] = child(addr, nthreads, batch);
	qsort(v, (size_t)runs, sizeof(v[0]), cmp);
	return v[runs / 2];
}

int main(int argc, char **argv)
{
	static const int threads[] = { 1, 2, 4, 8 };
	int runs = argc > 2 ? atoi(argv[2]) : 3;
	double base;

	if (argc < 2 || runs < 1 || runs > MAX_RUNS) {
		fprintf(stderr, "usage: paging_threads ADDR [runs 1..%d]\n",
			MAX_RUNS);
		return 64;
	}
	base = median(argv[1], 0, "1", runs);
	printf("baseline: pool_read 4 KiB, 1 thread: %.0f/s (median of %d)\n",
	       base, runs);
	printf("%-8s %14s %14s %8s %10s\n", "threads", "batched/s",
	       "one-at-once/s", "ratio", "vs read");
	for (size_t i = 0; i < sizeof(threads) / sizeof(threads[0]); i++) {
		double b = median(argv[1], threads[i], "1", runs);
		double s = median(argv[1], threads[i], "0", runs);

		printf("%-8d %14.0f %14.0f %7.2fx %9.2fx\n", threads[i], b, s,
		       s > 0 ? b / s : 0, base > 0 ? b / base : 0);
	}
	return 0;
}
