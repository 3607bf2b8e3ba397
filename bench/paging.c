// SPDX-License-Identifier: MIT
/*
 * bench/paging.c - preview of bench/paging: a sequential scan and random
 * page reads over a pool_map() mapping with 100/50/25% of it resident,
 * against the same loops over plain local memory (the baseline, same
 * run). One result line per configuration, medians of --runs runs.
 *
 *   paging-bench ADDR [MiB] [runs]
 *
 * ADDR is a running memd ("127.0.0.1:7470"). Uses the public API only.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tidepool/pool.h"
#include "tidepool/pool_map.h"

#define PG 4096u

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

/* One pass over every 8 bytes; the sum keeps the loads. */
static uint64_t scan(const uint8_t *a, size_t len)
{
	const uint64_t *w = (const uint64_t *)a;
	uint64_t s = 0;

	for (size_t i = 0; i < len / 8; i++)
		s += w[i];
	return s;
}

/* n reads at pseudo-random pages (one 8-byte load each). */
static uint64_t random_pages(const uint8_t *a, size_t npages, size_t n)
{
	uint64_t x = 88172645463325252ull, s = 0;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		s += *(const uint64_t *)(a + (x % npages) * PG +
					 (x >> 52) * 8 % PG);
	}
	return s;
}

int main(int argc, char **argv)
{
	static const int pct[] = { 100, 50, 25 };
	struct pool_opts o = { 0 };
	size_t mib = 32, len, npages, nrand;
	struct pool_region *r;
	int runs = 3, ret;
	uint8_t *local;
	struct pool *p;
	uint64_t sink = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s ADDR [MiB] [runs]\n", argv[0]);
		return 2;
	}
	o.addr = argv[1];
	if (argc > 2)
		mib = strtoul(argv[2], NULL, 0);
	if (argc > 3)
		runs = atoi(argv[3]);
	if (runs < 1 || runs > 15 || mib < 1)
		return 2;
	len = mib << 20;
	npages = len / PG;
	nrand = npages;

	ret = pool_connect(&o, &p);
	if (ret) {
		fprintf(stderr, "pool_connect %s: %s\n", o.addr,
			pool_strerror(ret));
		return 1;
	}
	ret = pool_alloc(p, len, &r);
	if (ret) {
		fprintf(stderr, "pool_alloc: %s\n", pool_strerror(ret));
		return 1;
	}
	local = malloc(len);
	if (!local)
		return 1;
	for (size_t i = 0; i < len; i++)
		local[i] = (uint8_t)(i * 131 + (i >> 12));
	ret = pool_write(p, r, 0, local, len);
	if (ret) {
		fprintf(stderr, "pool_write: %s\n", pool_strerror(ret));
		return 1;
	}

	/* Baseline: the same loops on local memory. */
	{
		double seq[15], rnd[15];

		for (int k = 0; k < runs; k++) {
			double t = now_s();

			sink += scan(local, len);
			seq[k] = now_s() - t;
			t = now_s();
			sink += random_pages(local, npages, nrand);
			rnd[k] = now_s() - t;
		}
		printf("paging local=all-local bytes=%zu seq_MBps=%.0f "
		       "rand_ns=%.0f runs=%d\n",
		       len, (double)len / median(seq, runs) / 1e6,
		       median(rnd, runs) * 1e9 / (double)nrand, runs);
	}
	for (size_t c = 0; c < sizeof(pct) / sizeof(pct[0]); c++) {
		size_t budget = len / 100 * (size_t)pct[c];
		double seq[15], rnd[15];

		for (int k = 0; k < runs; k++) {
			uint8_t *a;
			double t;

			/* A fresh mapping each run: the scan starts cold
			 * (every page fetched once, read-ahead on). */
			ret = pool_map(p, r, budget, POOL_MAP_EXISTING,
				       (void **)&a);
			if (ret) {
				fprintf(stderr, "pool_map: %s\n",
					pool_strerror(ret));
				return 1;
			}
			t = now_s();
			sink += scan(a, len);
			seq[k] = now_s() - t;
			t = now_s();
			sink += random_pages(a, npages, nrand);
			rnd[k] = now_s() - t;
			if (memcmp(a, local, PG)) {
				fprintf(stderr, "wrong bytes\n");
				return 1;
			}
			pool_unmap(p, a, POOL_UNMAP_DISCARD);
		}
		printf("paging local=%d%% bytes=%zu seq_MBps=%.0f "
		       "rand_ns=%.0f runs=%d\n",
		       pct[c], len, (double)len / median(seq, runs) / 1e6,
		       median(rnd, runs) * 1e9 / (double)nrand, runs);
	}
	fprintf(stderr, "(sink %llu)\n", (unsigned long long)sink);
	free(local);
	pool_free(p, r);
	pool_close(p);
	return 0;
}
