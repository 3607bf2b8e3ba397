// SPDX-License-Identifier: MIT
/*
 * bench/kvmixed.c - the KV store's eviction when a put needs a block of
 * a size class the tenant's spent share has no free block of (docs/kv.md,
 * "Eviction", "A slab for a class the share has no room for"), under a
 * mixed-size trace. No network: one store, one tenant whose share (a
 * third of the trace's working set, in whole slabs) is smaller than what
 * it reuses, slabs mapped MAP_NORESERVE and never written (the store's
 * own work). Each request of the trace is a lookup (and done) of a key
 * and, on a miss, a reserve and commit of its value (a put). Traces,
 * seeded and deterministic:
 *   lmcache  LMCache-like: a request is a document's 8 chunks (a shared
 *            prefix; documents drawn Zipf 0.9 from 256) and 2 chunks of
 *            its own (one-shot); a chunk is 4 keys: a 64-byte metadata
 *            value and pieces of 1 MiB, 256 KiB and 128 KiB, looked up
 *            in that order (10 000 requests)
 *   lmtail   lmcache, but a request's last chunk is partial (LMCache
 *            stores the tail of a prompt that fills no chunk): its
 *            pieces are 1 .. 255 / 256 of their size, of many classes
 *            that the share holds few values of (the share is
 *            lmcache's)
 *   drift    values of 1 MiB, then 512 KiB, then 2 MiB (three phases of
 *            100 000 requests, each with keys of its own drawn Zipf 0.9
 *            from as many as make the same working set): each new
 *            class appears after the share is full. RAMP (0 .. 1): the
 *            first RAMP of a phase still sends a share of the requests,
 *            falling from all to none, to the previous phase's keys
 *   single   all values 1 MiB, keys Zipf 0.9 (300 000 requests): the
 *            control, one class only
 * Results are the same every run; the time of each put (reserve and
 * commit, wall clock) is measured, medians over RUNS fresh stores.
 *
 * usage: kvmixed TRACE [SLAB [RUNS [RAMP]]] (defaults 16M, 5, 0.25)
 * Output: one "KVMIXED key=value ..." line:
 *   hit_ratio       units served whole / units asked (a unit: a chunk's
 *                   4 keys for lmcache and lmtail, a key otherwise)
 *   key_hit_ratio   keys / keys asked; byte_hit_ratio: value bytes
 *   evictions_per_put, evict_max (most entries one put evicted)
 *   entries         committed entries at the end; used: bytes of blocks
 *                   in use / bytes of the share, at the end
 *   put_ns          mean time of a put; put_p99_us, put_max_us
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench/benchutil.h"
#include "memd/kvstore.h"

#define MIB (1ull << 20)
#define KIB (1ull << 10)
#define BLOCK_HDR 64ull
#define WS_BYTES (3ull << 30) /* drift, single: the working set */
#define ZIPF 0.9

enum trace { T_LMCACHE, T_LMTAIL, T_DRIFT, T_SINGLE };

/* lmcache */
#define DOCS 256u
#define DOC_CHUNKS 8u
#define OWN_CHUNKS 2u
#define LM_REQUESTS 10000u
static const uint64_t piece_bytes[] = { 64, MIB, 256 * KIB, 128 * KIB };
#define PIECES (sizeof(piece_bytes) / sizeof(piece_bytes[0]))
/* drift, single */
#define PHASE_REQUESTS 100000u
static const uint64_t phase_bytes[] = { MIB, 512 * KIB, 2 * MIB };
#define PHASES (sizeof(phase_bytes) / sizeof(phase_bytes[0]))

static uint64_t rng;
static uint64_t rnd(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return rng >> 11;
}

static double rnd_unit(void)
{
	return (double)rnd() / (double)(1ull << 53);
}

/* Zipf(ZIPF) over ranks 0 .. n-1: its cumulative distribution. */
struct zipf {
	double *cdf;
	uint32_t n;
};

static int zipf_init(struct zipf *z, uint32_t n)
{
	double sum = 0;

	z->cdf = malloc(n * sizeof(*z->cdf));
	if (!z->cdf)
		return -ENOMEM;
	z->n = n;
	for (uint32_t i = 0; i < n; i++) {
		sum += 1.0 / pow((double)(i + 1), ZIPF);
		z->cdf[i] = sum;
	}
	for (uint32_t i = 0; i < n; i++)
		z->cdf[i] /= sum;
	return 0;
}

static uint32_t zipf_draw(const struct zipf *z)
{
	double u = rnd_unit();
	uint32_t lo = 0, hi = z->n - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (z->cdf[mid] >= u)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The block bytes of a value (one block: every value here fits one). */
static uint64_t block_bytes_of(uint64_t len)
{
	return len + BLOCK_HDR;
}

struct tally {
	uint64_t units, unit_hits, keys, key_hits, bytes, hit_bytes;
	uint64_t puts, put_fail, evict_max;
	struct bench_lat put;
};

struct run {
	struct memd_kv *kv;
	struct tally *ta;
	uint64_t now;
};

static void key_of(uint8_t k[MEMD_KV_KEY_BYTES], uint64_t ns, uint64_t id,
		   uint64_t piece)
{
	memset(k, 0, MEMD_KV_KEY_BYTES);
	memcpy(k, &ns, 8);
	memcpy(k + 8, &id, 8);
	memcpy(k + 16, &piece, 8);
	k[31] = 0x5a;
}

static uint64_t evictions(struct memd_kv *kv)
{
	struct memd_kv_stats st;

	memd_kv_get_stats(kv, 1, &st);
	return st.evictions;
}

/* A lookup of key (and done); on a miss, a put of len bytes. True: hit. */
static bool request(struct run *r, const uint8_t *key, uint64_t len)
{
	static struct memd_kv_loc locs[WIRE_KV_MAX_LOCS];
	struct memd_kv_item it;
	struct tally *ta = r->ta;
	uint64_t t0, ev;
	ssize_t n;

	r->now++;
	memset(&it, 0, sizeof(it));
	memcpy(it.key, key, MEMD_KV_KEY_BYTES);
	ta->keys++;
	ta->bytes += len;
	if (memd_kv_lookup(r->kv, 1, &it, 1, locs, WIRE_KV_MAX_LOCS, r->now) ==
	    1) {
		memd_kv_done(r->kv, 1, &it, 1, r->now);
		ta->key_hits++;
		ta->hit_bytes += len;
		return true;
	}
	memset(&it, 0, sizeof(it));
	memcpy(it.key, key, MEMD_KV_KEY_BYTES);
	it.value_len = len;
	ev = evictions(r->kv);
	t0 = bench_now_ns();
	n = memd_kv_reserve(r->kv, 1, &it, 1, locs, WIRE_KV_MAX_LOCS, r->now);
	if (n == 1)
		n = memd_kv_commit(r->kv, 1, &it, 1, r->now);
	bench_lat_add(&ta->put, bench_now_ns() - t0);
	ev = evictions(r->kv) - ev;
	if (ev > ta->evict_max)
		ta->evict_max = ev;
	ta->puts++;
	ta->put_fail += n != 1;
	return false;
}

/* lmcache; tail: the last chunk of a request partial */
static void run_lmcache(struct run *r, bool tail)
{
	struct zipf z;
	uint64_t own = 0;

	if (zipf_init(&z, DOCS))
		exit(71);
	for (uint32_t q = 0; q < LM_REQUESTS; q++) {
		uint32_t doc = zipf_draw(&z);

		for (uint32_t c = 0; c < DOC_CHUNKS + OWN_CHUNKS; c++) {
			/* namespace 1: documents' chunks; 2: one-shot */
			uint64_t ns = c < DOC_CHUNKS ? 1 : 2;
			uint64_t id = c < DOC_CHUNKS
					      ? (uint64_t)doc * DOC_CHUNKS + c
					      : own++;
			uint64_t part = 256;
			bool whole = true;

			if (tail && c == DOC_CHUNKS + OWN_CHUNKS - 1)
				part = 1 + rnd() % 255;
			for (uint64_t p = 0; p < PIECES; p++) {
				uint8_t k[MEMD_KV_KEY_BYTES];
				uint64_t len = piece_bytes[p];

				if (p >
				    0) /* the metadata value stays 64 bytes */
					len = len * part / 256;
				key_of(k, ns, id, p);
				whole &= request(r, k, len);
			}
			r->ta->units++;
			r->ta->unit_hits += whole;
		}
	}
	free(z.cdf);
}

/* drift (ramp: the share of a phase during which requests move over from
 * the previous phase's keys) and single (one phase of 1 MiB, as long). */
static void run_phases(struct run *r, bool drift, double ramp)
{
	struct zipf z[PHASES];
	uint32_t nphases = drift ? PHASES : 1;
	uint32_t per = drift ? PHASE_REQUESTS : PHASE_REQUESTS * PHASES;

	for (uint32_t p = 0; p < nphases; p++)
		if (zipf_init(&z[p],
			      (uint32_t)(WS_BYTES /
					 block_bytes_of(phase_bytes[p]))))
			exit(71);
	for (uint32_t p = 0; p < nphases; p++) {
		for (uint32_t q = 0; q < per; q++) {
			double left = ramp > 0 ? 1.0 - q / (ramp * per) : 0;
			uint32_t ph = p > 0 && rnd_unit() < left ? p - 1 : p;
			uint8_t k[MEMD_KV_KEY_BYTES];
			bool hit;

			key_of(k, 10 + ph, zipf_draw(&z[ph]), 0);
			hit = request(r, k, phase_bytes[ph]);
			r->ta->units++;
			r->ta->unit_hits += hit;
		}
	}
	for (uint32_t p = 0; p < nphases; p++)
		free(z[p].cdf);
}

/* The working set the share is a third of, in bytes of blocks. */
static uint64_t working_set(enum trace tr)
{
	uint64_t chunk = 0;

	if (tr == T_DRIFT || tr == T_SINGLE)
		return WS_BYTES;
	for (size_t p = 0; p < PIECES; p++) {
		uint64_t b = block_bytes_of(piece_bytes[p]);

		/* the smallest class is 64 KiB of payload */
		chunk += b < 64 * KIB + BLOCK_HDR ? 64 * KIB + BLOCK_HDR : b;
	}
	return (uint64_t)DOCS * DOC_CHUNKS * chunk;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median_u64(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

static void usage(void)
{
	fprintf(stderr, "usage: kvmixed lmcache|lmtail|drift|single "
			"[SLAB 1M..1G [RUNS 1..64 [RAMP 0..1]]]\n");
}

int main(int argc, char **argv)
{
	uint64_t slab = 16 * MIB, put_ns[64], put_p99[64], put_max[64];
	const char *names[] = { "lmcache", "lmtail", "drift", "single" };
	double ramp = argc > 4 ? atof(argv[4]) : 0.25;
	int runs = argc > 3 ? atoi(argv[3]) : 5;
	struct tally first = { 0 };
	struct memd_kv_stats st = { 0 };
	struct bench_slabs own;
	enum trace tr = T_LMCACHE;
	uint32_t share;
	int i;

	for (i = 0; argc > 1 && i < 4; i++)
		if (!strcmp(argv[1], names[i]))
			break;
	if (argc < 2 || argc > 5 || i == 4 ||
	    (argc > 2 && bench_parse_size(argv[2], &slab)) || slab < MIB ||
	    slab > (1ull << 30) || (slab & (slab - 1)) || runs < 1 ||
	    runs > 64 || ramp < 0 || ramp > 1) {
		usage();
		return 64;
	}
	tr = (enum trace)i;
	share = (uint32_t)(working_set(tr) / 3 / slab);
	if (share < 2) {
		usage();
		return 64;
	}
	own.n = share;
	own.mem = calloc(own.n, sizeof(*own.mem));
	own.used = calloc(own.n, 1);
	if (!own.mem || !own.used)
		return 71;
	for (uint32_t s = 0; s < own.n; s++) {
		own.mem[s] = mmap(NULL, slab, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
				  -1, 0);
		if (own.mem[s] == MAP_FAILED)
			return 71;
	}
	for (int r = 0; r < runs; r++) {
		struct memd_kv_options o = {
			.slab_bytes = slab,
			.epoch = 7,
			.slab_get = bench_slab_get,
			.slab_put = bench_slab_put,
			.slab_arg = &own,
		};
		struct tally ta = { 0 };
		struct run ru = { .ta = &ta };

		bench_lat_init(&ta.put);
		if (memd_kv_create(&o, &ru.kv))
			return 70;
		rng = 42;
		if (tr == T_LMCACHE || tr == T_LMTAIL)
			run_lmcache(&ru, tr == T_LMTAIL);
		else
			run_phases(&ru, tr == T_DRIFT, ramp);
		put_ns[r] = bench_lat_mean(&ta.put);
		put_p99[r] = bench_lat_pct(&ta.put, 99);
		put_max[r] = bench_lat_pct(&ta.put, 100);
		if (r == 0) {
			memd_kv_get_stats(ru.kv, 1, &st);
			first = ta;
		} else if (ta.unit_hits != first.unit_hits ||
			   ta.key_hits != first.key_hits ||
			   ta.puts != first.puts) {
			fprintf(stderr, "kvmixed: run %d differs from run 0\n",
				r);
			return 70;
		}
		bench_lat_fini(&ta.put);
		memd_kv_destroy(ru.kv);
	}
	printf("KVMIXED trace=%s slab_mib=%llu share_slabs=%u ws_mib=%llu "
	       "ramp=%.2f runs=%d units=%llu hit_ratio=%.4f "
	       "key_hit_ratio=%.4f byte_hit_ratio=%.4f puts=%llu "
	       "put_fail=%llu evictions=%llu evictions_per_put=%.3f "
	       "evict_max=%llu entries=%llu used=%.3f put_ns=%llu "
	       "put_p99_us=%.1f put_max_us=%.1f\n",
	       names[tr], (unsigned long long)(slab / MIB), share,
	       (unsigned long long)(working_set(tr) / MIB),
	       tr == T_DRIFT ? ramp : 0.0, runs,
	       (unsigned long long)first.units,
	       (double)first.unit_hits / (double)first.units,
	       (double)first.key_hits / (double)first.keys,
	       (double)first.hit_bytes / (double)first.bytes,
	       (unsigned long long)first.puts,
	       (unsigned long long)first.put_fail,
	       (unsigned long long)st.evictions,
	       (double)st.evictions / (double)first.puts,
	       (unsigned long long)first.evict_max,
	       (unsigned long long)st.entries,
	       (double)st.bytes_used / (double)(share * slab),
	       (unsigned long long)median_u64(put_ns, runs),
	       (double)median_u64(put_p99, runs) / 1e3,
	       (double)median_u64(put_max, runs) / 1e3);
	return 0;
}
