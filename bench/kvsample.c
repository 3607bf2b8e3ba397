// SPDX-License-Identifier: MIT
/*
 * bench/kvsample.c - the cost of the capacity statistics (memd/mrc.c,
 * docs/capacity.md) on the KV store's hot path, without the network: the
 * same engine-shaped operations on two stores, one with kv_mrc_samples
 * = 0 (baseline) and one with 8192, alternated in the same run, thread
 * CPU time per operation; medians of --runs rounds.
 *
 * The operations are a shared-prefix workload as kvbench drives memd:
 * per prompt, exists over its 8 keys (a prefix of 7 chunks from 400, a
 * unique last one), a lookup and done of the present prefix, a reserve
 * and commit of the rest, 1 MiB values in 64 MiB slabs, a store of 16
 * slabs. Lookups read nothing (no RMA): this is the store's own work,
 * which is where sampling adds to memd's, so the ratio is an upper bound
 * of memd's.
 *
 * usage: kvsample [RUNS] [PROMPTS] [PREFIXES] [VALUE_BYTES] [SAMPLES]
 * (defaults 5, 20000, 400, 1048576, 8192). More prefixes give the tenant
 * more distinct keys than samples (the realistic case: most references
 * are not sampled); under valgrind --tool=callgrind, memd_mrc_access's
 * inclusive instructions over its calls are the curve's cost per key
 * reference (docs/bench/kv.md, "Sampling overhead").
 *
 * Output: one "KVSAMPLE key=value ..." line.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/benchutil.h"
#include "memd/kvstore.h"

#define SLAB (64ull << 20)
#define NSLABS 16
#define PLEN 7

/* prefixes to draw from (distinct keys: 7 a prefix, plus a unique key a
 * prompt) and the value of a key, in bytes: argv[3] and argv[4] */
static uint64_t npre = 400;
static uint32_t val = 1u << 20;

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng = 1;
static uint64_t rnd(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return rng >> 11;
}

static void key(uint8_t k[MEMD_KV_KEY_BYTES], uint64_t a, uint64_t b)
{
	memset(k, 0, MEMD_KV_KEY_BYTES);
	memcpy(k, &a, 8);
	memcpy(k + 8, &b, 8);
}

/* prompts operations on kv; returns the CPU seconds they took */
static double run(struct memd_kv *kv, unsigned prompts, uint64_t *uniq,
		  uint64_t *ops)
{
	static struct memd_kv_loc locs[WIRE_KV_MAX_LOCS];
	uint8_t keys[PLEN + 1][MEMD_KV_KEY_BYTES];
	struct memd_kv_item it[PLEN + 1];
	double t0 = cpu_s();
	uint64_t now = 1;

	for (unsigned p = 0; p < prompts; p++, now++) {
		uint64_t pre = rnd() % npre;
		ssize_t have;
		size_t n = 0;

		for (unsigned k = 0; k < PLEN; k++)
			key(keys[k], pre + 1, k);
		key(keys[PLEN], 0, ++*uniq);
		have = memd_kv_exists(kv, 1,
				      (const uint8_t(*)[MEMD_KV_KEY_BYTES])keys,
				      PLEN + 1);
		memset(it, 0, sizeof(it));
		for (ssize_t k = 0; k < have; k++)
			memcpy(it[k].key, keys[k], MEMD_KV_KEY_BYTES);
		if (have > 0) {
			memd_kv_lookup(kv, 1, it, (size_t)have, locs,
				       WIRE_KV_MAX_LOCS, now);
			memd_kv_done(kv, 1, it, (size_t)have, now);
		}
		memset(it, 0, sizeof(it));
		for (size_t k = (size_t)have; k <= PLEN; k++, n++) {
			memcpy(it[n].key, keys[k], MEMD_KV_KEY_BYTES);
			it[n].value_len = val;
		}
		memd_kv_reserve(kv, 1, it, n, locs, WIRE_KV_MAX_LOCS, now);
		memd_kv_commit(kv, 1, it, n, now);
		*ops += 1 + 2 * (have > 0) + 2;
	}
	return cpu_s() - t0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	unsigned runs = argc > 1 ? (unsigned)atoi(argv[1]) : 5;
	unsigned prompts = argc > 2 ? (unsigned)atoi(argv[2]) : 20000;
	long long pre_arg = argc > 3 ? atoll(argv[3]) : 400;
	long long val_arg = argc > 4 ? atoll(argv[4]) : 1 << 20;
	long long samples = argc > 5 ? atoll(argv[5]) : 8192;
	uint8_t *mem[2][NSLABS], used[2][NSLABS];
	struct bench_slabs own[2];
	struct memd_kv *kv[2];
	double t[2][64];
	uint64_t uniq[2] = { 0, 0 }, ops[2] = { 0, 0 };
	struct memd_kv_stats st;

	if (runs < 1 || runs > 64 || prompts < 1 || pre_arg < 1 ||
	    pre_arg > (1ll << 32) || val_arg < 1 || val_arg > (long long)SLAB ||
	    samples < 1 || samples > (1ll << 24)) {
		fprintf(stderr,
			"usage: kvsample [RUNS 1..64] [PROMPTS >= 1] "
			"[PREFIXES 1..2^32] [VALUE_BYTES 1..%llu] "
			"[SAMPLES 1..2^24]\n",
			SLAB);
		return 64;
	}
	npre = (uint64_t)pre_arg;
	val = (uint32_t)val_arg;
	for (int s = 0; s < 2; s++) {
		struct memd_kv_options o = {
			.slab_bytes = SLAB,
			.epoch = 7,
			.slab_get = bench_slab_get,
			.slab_put = bench_slab_put,
			.slab_arg = &own[s],
			.mrc_samples = s ? (uint32_t)samples : 0,
		};

		memset(used[s], 0, sizeof(used[s]));
		own[s] = (struct bench_slabs){ mem[s], used[s], NSLABS };
		for (int i = 0; i < NSLABS; i++) {
			/* left untouched: nothing writes a block here */
			mem[s][i] = malloc(SLAB);
			if (!mem[s][i])
				return 71;
		}
		if (memd_kv_create(&o, &kv[s]))
			return 70;
		run(kv[s], prompts / 4, &uniq[s], &ops[s]); /* warm up */
	}
	for (unsigned r = 0; r < runs; r++)
		for (int s = 0; s < 2; s++) {
			uint64_t n = 0;

			rng = 1000 + r; /* the same prompts for both */
			t[s][r] = run(kv[s], prompts, &uniq[s], &n) / (double)n;
			ops[s] += n;
		}
	qsort(t[0], runs, sizeof(double), cmp);
	qsort(t[1], runs, sizeof(double), cmp);
	memd_kv_get_stats(kv[1], 1, &st);
	printf("KVSAMPLE runs=%u prompts=%u prefixes=%llu value=%u "
	       "samples=%lld base_ns_per_op=%.1f "
	       "sampled_ns_per_op=%.1f cpu_overhead_pct=%.2f "
	       "hit_ratio=%.3f\n",
	       runs, prompts, (unsigned long long)npre, val, samples,
	       t[0][runs / 2] * 1e9, t[1][runs / 2] * 1e9,
	       (t[1][runs / 2] / t[0][runs / 2] - 1) * 100,
	       st.requests ? (double)st.request_hits / (double)st.requests : 0);
	for (int s = 0; s < 2; s++) {
		memd_kv_destroy(kv[s]);
		for (int i = 0; i < NSLABS; i++)
			free(mem[s][i]);
	}
	return 0;
}
