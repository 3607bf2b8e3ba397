// SPDX-License-Identifier: MIT
/*
 * bench/regfailover.c - how long allocation stops when a registry dies
 * (docs/bench/registry.md, "Failover"): a libpool tenant session given a
 * list of registries allocates and frees one region of --len bytes in a
 * loop, and prints one line for every gap between two successful
 * allocations longer than --gap-ms, with the CLOCK_MONOTONIC time (ms) of
 * the allocation that ended it (a failover, when
 * bench/run_regbench_etcd.sh kills the leading registry), until SIGINT or
 * SIGTERM, then a summary line "regfailover gaps=N ...". Allocations that
 * fail (libpool gave up after LIBPOOL_REGISTRY_FAILOVER_MS) are counted.
 *
 *   regfailover --addr A,B --tenant NAME --secret FILE [--len BYTES]
 *               [--gap-ms MS]
 *
 * Threads: main only (libpool's own).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tidepool/pool.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static unsigned long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a;
	unsigned long long y = *(const unsigned long long *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "tenant", required_argument, NULL, 't' },
		{ "secret", required_argument, NULL, 's' },
		{ "len", required_argument, NULL, 'l' },
		{ "gap-ms", required_argument, NULL, 'g' },
		{ NULL, 0, NULL, 0 },
	};
	struct pool_opts po = { 0 };
	unsigned long long gap_ms = 300, last, gaps[4096], ok = 0, failed = 0;
	size_t len = 16u << 20, ngaps = 0;
	struct sigaction sa = { .sa_handler = on_signal };
	struct pool *p;
	int o, r;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			po.addr = optarg;
			break;
		case 't':
			po.tenant = optarg;
			break;
		case 's':
			po.secret_file = optarg;
			break;
		case 'l':
			len = strtoull(optarg, NULL, 0);
			break;
		case 'g':
			gap_ms = strtoull(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr,
				"usage: regfailover --addr A,B --tenant "
				"NAME --secret FILE [--len BYTES] "
				"[--gap-ms MS]\n");
			return 64;
		}
	}
	if (!po.addr || !po.tenant || !po.secret_file || !len) {
		fprintf(stderr, "regfailover: --addr, --tenant and --secret "
				"are required\n");
		return 64;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	r = pool_connect(&po, &p);
	if (r) {
		fprintf(stderr, "regfailover: pool_connect: %s\n",
			pool_strerror(r));
		return 1;
	}
	printf("# regfailover addr=%s len=%zu gap_ms=%llu\n", po.addr, len,
	       gap_ms);
	fflush(stdout);
	last = now_ms();
	while (!stop) {
		struct pool_region *reg;
		unsigned long long t;

		r = pool_alloc(p, len, &reg);
		t = now_ms();
		if (r) {
			failed++;
			fprintf(stderr, "regfailover: pool_alloc: %s\n",
				pool_strerror(r));
			continue;
		}
		ok++;
		if (t - last > gap_ms) {
			printf("gap_ms=%llu end_ms=%llu\n", t - last, t);
			fflush(stdout);
			if (ngaps < sizeof(gaps) / sizeof(gaps[0]))
				gaps[ngaps++] = t - last;
		}
		last = t;
		pool_free(p, reg);
	}
	qsort(gaps, ngaps, sizeof(gaps[0]), cmp_ull);
	printf("regfailover gaps=%zu p50_ms=%llu max_ms=%llu allocs=%llu "
	       "failed=%llu\n",
	       ngaps, ngaps ? gaps[ngaps / 2] : 0, ngaps ? gaps[ngaps - 1] : 0,
	       ok, failed);
	pool_close(p);
	return 0;
}
