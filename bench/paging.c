// SPDX-License-Identifier: MIT
/*
 * bench/paging.c - transparent paging (pool_map) against all-local memory:
 * three workloads at 100/75/50/25% of their working set resident, and the
 * same workloads on plain anonymous memory, in one run. Results:
 * docs/bench/paging.md.
 *
 *   paging ADDR [MiB] [runs] [work] [pct]
 *
 * ADDR is a running memd ("127.0.0.1:7470"); MiB the working set (default
 * 32); runs the repetitions per point (default 5, medians reported); work
 * one workload (seq, rand or qsort; default all three); pct one budget
 * (100, 75, 50 or 25; default all four). all-local always runs.
 *
 * Each workload runs as a program would, from a fresh range (first-touch
 * faults are part of both the pooled and the all-local time):
 *   seq    fill the array, then 4 sequential passes of 8-byte loads
 *   rand   fill the array, then one 8-byte load at each of 4x npages
 *          pseudo-random pages
 *   qsort  fill with pseudo-random 64-bit keys, then quicksort them
 *          (checked sorted afterwards, untimed)
 * The all-local range has 4 KiB pages (MADV_NOHUGEPAGE), as pool_map's.
 * The pooled variant maps a new region each run (a fresh pool_map of a
 * new region reads as zero, like anonymous memory). One result line per
 * workload and budget: median seconds, the slowdown against all-local
 * (ratio of medians), and the paging counters of the median run (faults,
 * fetches, pages fetched, read-ahead pages per fetch, evictions,
 * write-backs, faults per second), the first run's seconds (the
 * session's first pooled run also pays its first transfer: libfabric's
 * connection and buffer pools), pages installed ahead and WP faults.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "libpool/paging.h"
#include "tidepool/pool.h"
#include "tidepool/pool_map.h"

#define PG 4096u
#define MAX_RUNS 15
#define SEQ_PASSES 4
#define RAND_PER_PAGE 4

enum { W_SEQ, W_RAND, W_QSORT, NWORK };
enum { NPCT = 4 };
static const int pct[NPCT] = { 100, 75, 50, 25 };
static const char *const wname[NWORK] = { "seq", "rand", "qsort" };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t xorshift(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void fill(uint64_t *a, size_t n)
{
	uint64_t x = 88172645463325252ull;

	for (size_t i = 0; i < n; i++)
		a[i] = xorshift(&x);
}

static uint64_t seq(const uint64_t *a, size_t n)
{
	uint64_t s = 0;

	for (int p = 0; p < SEQ_PASSES; p++)
		for (size_t i = 0; i < n; i++)
			s += a[i];
	return s;
}

static uint64_t rand_pages(const uint64_t *a, size_t n)
{
	size_t npages = n * 8 / PG;
	uint64_t x = 0x2545f4914f6cdd1dull, s = 0;

	for (size_t i = 0; i < npages * RAND_PER_PAGE; i++) {
		uint64_t r = xorshift(&x);

		s += a[(r % npages) * (PG / 8) + (r >> 55)];
	}
	return s;
}

static void swap(uint64_t *a, uint64_t *b)
{
	uint64_t t = *a;

	*a = *b;
	*b = t;
}

/* Quicksort: Hoare partition around a median of three, the smaller side
 * recursed into, insertion sort below 16 keys. */
static void quicksort(uint64_t *a, size_t n)
{
	while (n > 16) {
		size_t m = n / 2, i = 0, j = n - 1;
		uint64_t pivot;

		if (a[m] < a[0])
			swap(&a[m], &a[0]);
		if (a[n - 1] < a[0])
			swap(&a[n - 1], &a[0]);
		if (a[n - 1] < a[m])
			swap(&a[n - 1], &a[m]);
		pivot = a[m];
		for (;;) {
			while (a[i] < pivot)
				i++;
			while (a[j] > pivot)
				j--;
			if (i >= j)
				break;
			swap(&a[i++], &a[j--]);
		}
		if (j + 1 < n - j - 1) {
			quicksort(a, j + 1);
			a += j + 1;
			n -= j + 1;
		} else {
			quicksort(a + j + 1, n - j - 1);
			n = j + 1;
		}
	}
	for (size_t i = 1; i < n; i++)
		for (size_t k = i; k > 0 && a[k] < a[k - 1]; k--)
			swap(&a[k], &a[k - 1]);
}

/* Runs workload w on a; returns seconds. Exits on a wrong result. */
static double work(int w, uint64_t *a, size_t n, uint64_t *sink)
{
	double t = now_s(), dt;

	fill(a, n);
	if (w == W_SEQ)
		*sink += seq(a, n);
	else if (w == W_RAND)
		*sink += rand_pages(a, n);
	else
		quicksort(a, n);
	dt = now_s() - t;
	if (w == W_QSORT) {
		for (size_t i = 1; i < n; i++) {
			if (a[i - 1] > a[i]) {
				fprintf(stderr, "qsort: not sorted at %zu\n",
					i);
				exit(1);
			}
		}
	}
	return dt;
}

/* Workload w on len bytes of fresh anonymous memory with madvise advice
 * (the all-local runs). Seconds, or -1 when the memory cannot be had. */
static double local_run(int w, size_t len, int advice, uint64_t *sink)
{
	uint64_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double dt;

	if (a == MAP_FAILED) {
		perror("mmap");
		return -1;
	}
	madvise(a, len, advice);
	dt = work(w, a, len / 8, sink);
	munmap(a, len);
	return dt;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Index of the median of v (by value). */
static int median_idx(const double *v, int n)
{
	double s[MAX_RUNS];

	memcpy(s, v, sizeof(*v) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), cmp_d);
	for (int i = 0; i < n; i++)
		if (v[i] == s[n / 2])
			return i;
	return 0;
}

int main(int argc, char **argv)
{
	struct pool_opts o = { 0 };
	size_t mib = 32, len, n;
	uint64_t sink = 0;
	struct pool *p;
	int runs = 5, only_w = -1, only_pct = -1, ret;

	if (argc < 2) {
		fprintf(stderr, "usage: %s ADDR [MiB] [runs] [work] [pct]\n",
			argv[0]);
		return 2;
	}
	o.addr = argv[1];
	if (argc > 2)
		mib = strtoul(argv[2], NULL, 0);
	if (argc > 3)
		runs = atoi(argv[3]);
	if (argc > 4) {
		for (int w = 0; w < NWORK; w++)
			if (!strcmp(argv[4], wname[w]))
				only_w = w;
		if (only_w < 0) {
			fprintf(stderr, "paging: work is seq, rand or qsort\n");
			return 2;
		}
	}
	if (argc > 5) {
		for (int c = 0; c < NPCT; c++)
			if (atoi(argv[5]) == pct[c])
				only_pct = c;
		if (only_pct < 0) {
			fprintf(stderr, "paging: pct is 100, 75, 50 or 25\n");
			return 2;
		}
	}
	if (runs < 1 || runs > MAX_RUNS || mib < 1) {
		fprintf(stderr, "paging: MiB >= 1, 1 <= runs <= %d\n",
			MAX_RUNS);
		return 2;
	}
	len = mib << 20;
	n = len / 8;
	ret = pool_connect(&o, &p);
	if (ret) {
		fprintf(stderr, "pool_connect %s: %s\n", o.addr,
			pool_strerror(ret));
		return 1;
	}
	printf("# paging bytes=%zu runs=%d seq_passes=%d rand_loads=%zu\n", len,
	       runs, SEQ_PASSES, len / PG * RAND_PER_PAGE);

	/*
	 * Run k of every configuration of a workload back to back (all-local
	 * first), so a change of load on a shared machine hits them alike.
	 */
	for (int w = 0; w < NWORK; w++) {
		struct pool_map_stats st[NPCT][MAX_RUNS];
		double base[MAX_RUNS], thp[MAX_RUNS], t[NPCT][MAX_RUNS], b, bt,
			lo, hi;

		if (only_w >= 0 && w != only_w)
			continue;
		for (int k = 0; k < runs; k++) {
			uint64_t *a;

			/* 4 KiB pages, as pool_map has by default: like with
			 * like; and transparent huge pages, the baseline for
			 * pool_map's huge pages (LIBPOOL_HUGE_PAGES=1). */
			base[k] = local_run(w, len, MADV_NOHUGEPAGE, &sink);
			thp[k] = local_run(w, len, MADV_HUGEPAGE, &sink);
			if (base[k] < 0 || thp[k] < 0)
				return 1;
			for (int c = 0; c < NPCT; c++) {
				if (only_pct >= 0 && c != only_pct)
					continue;
				/* Whole pages, rounded up: 100% must hold
				 * the whole set (one page short, a FIFO
				 * misses every page of every pass). */
				size_t budget =
					(len * (size_t)pct[c] / 100 + PG - 1) /
					PG * PG;
				struct pool_region *r;

				ret = pool_alloc(p, len, &r);
				if (ret == 0)
					ret = pool_map(p, r, budget, 0,
						       (void **)&a);
				if (ret) {
					fprintf(stderr, "pool_alloc/map: %s\n",
						pool_strerror(ret));
					return 1;
				}
				t[c][k] = work(w, a, n, &sink);
				pool_map_get_stats(a, &st[c][k]);
				pool_unmap(p, a, POOL_UNMAP_DISCARD);
				pool_free(p, r);
			}
		}
		b = base[median_idx(base, runs)];
		lo = hi = base[0];
		for (int k = 1; k < runs; k++) {
			lo = base[k] < lo ? base[k] : lo;
			hi = base[k] > hi ? base[k] : hi;
		}
		printf("paging work=%s local=all-local s=%.4f slowdown=1.00 "
		       "min_s=%.4f max_s=%.4f\n",
		       wname[w], b, lo, hi);
		bt = thp[median_idx(thp, runs)];
		printf("paging work=%s local=all-local-thp s=%.4f "
		       "slowdown=%.2f\n",
		       wname[w], bt, bt / b);
		for (int c = 0; c < NPCT; c++) {
			int mi;
			const struct pool_map_stats *m;

			if (only_pct >= 0 && c != only_pct)
				continue;
			mi = median_idx(t[c], runs);
			m = &st[c][mi];
			lo = hi = t[c][0];
			for (int k = 1; k < runs; k++) {
				lo = t[c][k] < lo ? t[c][k] : lo;
				hi = t[c][k] > hi ? t[c][k] : hi;
			}
			printf("paging work=%s local=%d%% s=%.4f "
			       "slowdown=%.2f faults=%llu fetches=%llu "
			       "pages_fetched=%llu ra_pages=%.1f "
			       "evictions=%llu writebacks=%llu "
			       "faults_per_s=%.0f min_s=%.4f max_s=%.4f "
			       "first_s=%.4f ahead=%llu wp_faults=%llu "
			       "page=%llu slowdown_thp=%.2f\n",
			       wname[w], pct[c], t[c][mi], t[c][mi] / b,
			       (unsigned long long)m->faults,
			       (unsigned long long)m->fetches,
			       (unsigned long long)m->pages_fetched,
			       m->fetches ? (double)m->pages_fetched /
						    (double)m->fetches
					  : 0.0,
			       (unsigned long long)m->evictions,
			       (unsigned long long)m->writebacks,
			       (double)m->faults / t[c][mi], lo, hi, t[c][0],
			       (unsigned long long)m->ahead_pages,
			       (unsigned long long)m->wp_faults,
			       (unsigned long long)m->page_bytes,
			       t[c][mi] / bt);
		}
		fflush(stdout);
	}
	fprintf(stderr, "(sink %llu)\n", (unsigned long long)sink);
	pool_close(p);
	return 0;
}
