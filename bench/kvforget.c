// SPDX-License-Identifier: MIT
/*
 * bench/kvforget.c - how long the KV store's forget pass holds the
 * store's mutex (memd_kv_forget_unless, docs/kv.md, "Donors that come and
 * go", 6.): memd-ctl runs it at each new membership sequence with the
 * ranking memd/server_kv.c uses (fabric/rendezvous.h: an entry is kept
 * while fewer than two listed donors rank above this one), and every KV
 * request waits meanwhile. No network: one store, ENTRIES committed keys
 * of one tenant (64 KiB blocks in 64 MiB slabs mapped MAP_NORESERVE and
 * never written), then, per round:
 *   keep   a list of DONORS donors in which this donor ranks first or
 *          second for every key (itself and one other when DONORS is 2,
 *          else a list none of whose others ranks above it): nothing is
 *          forgotten; the pass is a hash per entry and donor
 *   forget the same list with DONORS donors: about 1 - 2/DONORS of the
 *          entries are forgotten (their blocks go back), and the store
 *          is filled again before the next round
 *   steps  the forget pass as memd-ctl runs it, in steps of 4096
 *          entries (memd_kv_forget_step) with the mutex dropped between
 *          them: the longest step, which is how long a request waits
 * Wall time of each pass (the time the mutex is held), medians of RUNS.
 *
 * usage: kvforget [ENTRIES] [DONORS] [RUNS] (defaults 100000, 8, 5)
 * Output: one "KVFORGET key=value ..." line.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/benchutil.h"
#include "fabric/rendezvous.h"
#include "memd/kvstore.h"

#define SLAB (64ull << 20)
#define VALUE 60000u /* the smallest class: 64 KiB + 64 */
#define MAXD 64

struct rank {
	uint32_t n;
	uint64_t seed[MAXD];
	char names[MAXD][16];
	bool keep_all; /* the "keep" list: count the work, keep everything */
};

/* server_kv.c's kv_ranked_first_or_second, self = names[0] */
static bool keep(const uint8_t *key, void *arg)
{
	const struct rank *rk = arg;
	uint64_t own = tp_rendezvous_score(rk->seed[0], key);
	int above = 0;

	for (uint32_t i = 1; i < rk->n && above < 2; i++)
		above += tp_rendezvous_above(
			tp_rendezvous_score(rk->seed[i], key), rk->names[i],
			own, rk->names[0]);
	return rk->keep_all || above < 2;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void key_of(uint8_t k[MEMD_KV_KEY_BYTES], uint64_t i)
{
	memset(k, 0, MEMD_KV_KEY_BYTES);
	memcpy(k, &i, 8);
	k[31] = 0x5a;
}

/* Puts keys 0 .. n-1 that are absent. -errno on failure. */
static int fill(struct memd_kv *kv, uint64_t n)
{
	static struct memd_kv_loc locs[WIRE_KV_MAX_LOCS];
	static struct memd_kv_item it[WIRE_KV_BATCH];
	uint8_t keys[WIRE_KV_BATCH][MEMD_KV_KEY_BYTES];

	for (uint64_t i = 0; i < n; i += WIRE_KV_BATCH) {
		size_t m =
			n - i < WIRE_KV_BATCH ? (size_t)(n - i) : WIRE_KV_BATCH;
		ssize_t r;

		for (size_t j = 0; j < m; j++)
			key_of(keys[j], i + j);
		memset(it, 0, sizeof(it));
		for (size_t j = 0; j < m; j++) {
			memcpy(it[j].key, keys[j], MEMD_KV_KEY_BYTES);
			it[j].value_len = VALUE;
		}
		r = memd_kv_reserve(kv, 1, it, m, locs, WIRE_KV_MAX_LOCS, 1);
		if (r < 0)
			return (int)r;
		r = memd_kv_commit(kv, 1, it, m, 1);
		if (r < 0)
			return (int)r;
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	long long entries = argc > 1 ? atoll(argv[1]) : 100000;
	int donors = argc > 2 ? atoi(argv[2]) : 8;
	int runs = argc > 3 ? atoi(argv[3]) : 5;
	double tk[64], tf[64], ts[64];
	uint64_t gone = 0;
	struct bench_slabs own;
	struct memd_kv *kv;
	struct rank rk;

	if (entries < 1 || entries > 4000000 || donors < 2 || donors > MAXD ||
	    runs < 1 || runs > 64) {
		fprintf(stderr, "usage: kvforget [ENTRIES 1..4000000] "
				"[DONORS 2..64] [RUNS 1..64]\n");
		return 64;
	}
	own.n = (uint32_t)((uint64_t)entries / (SLAB / (64 * 1024 + 64)) + 2);
	own.mem = calloc(own.n, sizeof(*own.mem));
	own.used = calloc(own.n, 1);
	if (!own.mem || !own.used)
		return 71;
	for (uint32_t i = 0; i < own.n; i++) {
		own.mem[i] = mmap(NULL, SLAB, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				  -1, 0);
		if (own.mem[i] == MAP_FAILED)
			return 71;
	}
	{
		struct memd_kv_options o = {
			.slab_bytes = SLAB,
			.epoch = 7,
			.slab_get = bench_slab_get,
			.slab_put = bench_slab_put,
			.slab_arg = &own,
			.reserve_ms = 600000,
		};

		if (memd_kv_create(&o, &kv))
			return 70;
	}
	memset(&rk, 0, sizeof(rk));
	rk.n = (uint32_t)donors;
	for (int i = 0; i < donors; i++) {
		snprintf(rk.names[i], sizeof(rk.names[i]), "donor%d", i);
		rk.seed[i] = tp_rendezvous_seed(rk.names[i]);
	}
	if (fill(kv, (uint64_t)entries)) {
		fprintf(stderr, "kvforget: fill failed\n");
		return 70;
	}
	for (int r = 0; r < runs; r++) {
		double t0;
		ssize_t n;

		rk.keep_all = true;
		t0 = now_s();
		n = memd_kv_forget_unless(kv, keep, &rk, 2);
		tk[r] = now_s() - t0;
		if (n != 0)
			return 70;
		rk.keep_all = false;
		t0 = now_s();
		n = memd_kv_forget_unless(kv, keep, &rk, 2);
		tf[r] = now_s() - t0;
		if (n < 0)
			return 70;
		gone += (uint64_t)n;
		if (fill(kv, (uint64_t)entries)) {
			fprintf(stderr, "kvforget: refill failed\n");
			return 70;
		}
		ts[r] = 0;
		memd_kv_forget_begin(kv, keep, &rk);
		for (bool done = false; !done;) {
			t0 = now_s();
			if (memd_kv_forget_step(kv, 4096, 2, &done) < 0)
				return 70;
			if (now_s() - t0 > ts[r])
				ts[r] = now_s() - t0;
		}
		if (fill(kv, (uint64_t)entries)) {
			fprintf(stderr, "kvforget: refill failed\n");
			return 70;
		}
	}
	qsort(tk, (size_t)runs, sizeof(double), cmp);
	qsort(tf, (size_t)runs, sizeof(double), cmp);
	qsort(ts, (size_t)runs, sizeof(double), cmp);
	printf("KVFORGET entries=%lld donors=%d runs=%d keep_ms=%.2f "
	       "forget_ms=%.2f step_max_ms=%.2f forgotten_per_pass=%.0f "
	       "keep_ns_per_entry=%.1f forget_ns_per_entry=%.1f\n",
	       entries, donors, runs, tk[runs / 2] * 1e3, tf[runs / 2] * 1e3,
	       ts[runs / 2] * 1e3, (double)gone / runs,
	       tk[runs / 2] * 1e9 / (double)entries,
	       tf[runs / 2] * 1e9 / (double)entries);
	memd_kv_destroy(kv);
	return 0;
}
