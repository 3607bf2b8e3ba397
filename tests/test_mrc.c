// SPDX-License-Identifier: MIT
/*
 * tests/test_mrc.c - memd/mrc.c: the miniature S3-FIFO curve against an
 * exact S3-FIFO simulation, and the SHARDS LRU curve against an exact
 * byte-capacity LRU simulation, of the same trace, at the sizes poolctl
 * reports (1/4, 1/2, 1, 2, 4 x a capacity), on generated
 * traces shaped like the KV tier's (shared prefixes, one-shot prompts,
 * multi-turn sessions, Zipf, a scan over a hot set); the memory bound;
 * the sliding window; forget.
 *
 * A request is what memd records: a counted reference (a lookup or an
 * exists) and, when the key was absent from the cache being served (here
 * the capacity C0), an uncounted one (the put that follows the miss). The
 * exact simulation of size C serves every request from its own LRU of C
 * bytes and inserts on a miss, which is the same stack. Seeds are fixed.
 * What memd reports, the miniature S3-FIFO stores, is checked against
 * tests/mrc_ref.c's exact S3-FIFO of each size (memd's policy, as
 * memd/kvstore_evict.c evicts; written from the definition, sharing no code
 * with memd/mrc.c) fed the same calls: within a bound at sampling rates
 * below 1, exactly at a rate of 1 (every store, on every trace, with
 * resizes and forgets), where the LRU curve is also checked against the
 * exact byte-weighted reuse distances; docs/capacity.md has the tables.
 */
#include <check.h>

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "memd/mrc.h"
#include "tests/mrc_ref.h"
#include "tests/testutil.h"

/* the sizes poolctl reports, as multiples of a capacity */
static const double mult[] = { 0.25, 0.5, 1, 2, 4 };
#define NMULT (sizeof(mult) / sizeof(mult[0]))

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define BLK (64 * KIB + 64) /* the smallest class's block */
#define SAMPLES 8192u
#define TOL 0.02
/* the bound with few samples (256 .. 2048: worst seen 0.034; 64: 0.114) */
#define TOL_FEW 0.05
#define TOL_64 0.2

/* the spatial hash of key k (memd: a keyed SipHash of the 32-byte key) */
static uint64_t khash(uint64_t k)
{
	uint64_t s = k * 0x2545f4914f6cdd1dull + 7;

	return tu_splitmix(&s);
}

/* ---- a trace ---- */

struct ref {
	uint64_t key, bytes;
};

struct trace {
	struct ref *r;
	size_t n, cap;
};

static void push(struct trace *t, uint64_t key, uint64_t bytes)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 1 << 16;
		t->r = realloc(t->r, t->cap * sizeof(*t->r));
		ck_assert_ptr_nonnull(t->r);
	}
	t->r[t->n].key = key;
	t->r[t->n].bytes = bytes;
	t->n++;
}

/* ---- exact LRU of C bytes: a hash map and a doubly linked list ---- */

struct lnode {
	uint64_t key, bytes;
	struct lnode *prev, *next, *hnext;
};

struct lru {
	uint64_t cap, used;
	struct lnode *head, *tail; /* head: most recent */
	struct lnode **tab;
	size_t ntab;
	struct lnode *spare; /* evicted nodes, reused (malloc is slow
			      * under the sanitizers) */
};

static struct lnode **lru_slot(struct lru *l, uint64_t key)
{
	struct lnode **p = &l->tab[khash(key) & (l->ntab - 1)];

	while (*p && (*p)->key != key)
		p = &(*p)->hnext;
	return p;
}

static void lru_unlink(struct lru *l, struct lnode *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
}

static void lru_front(struct lru *l, struct lnode *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	l->head = n;
	if (!l->tail)
		l->tail = n;
}

/* A request: true on a hit; a miss inserts (evicting the LRU end). */
static bool lru_ref(struct lru *l, uint64_t key, uint64_t bytes)
{
	struct lnode **p = lru_slot(l, key), *n = *p;

	if (n) {
		lru_unlink(l, n);
		lru_front(l, n);
		return true;
	}
	if (bytes > l->cap)
		return false;
	if (l->spare) {
		n = l->spare;
		l->spare = n->hnext;
	} else {
		n = malloc(sizeof(*n));
		ck_assert_ptr_nonnull(n);
	}
	n->hnext = NULL;
	n->key = key;
	n->bytes = bytes;
	*p = n;
	lru_front(l, n);
	l->used += bytes;
	while (l->used > l->cap) {
		struct lnode *v = l->tail, **q = lru_slot(l, v->key);

		*q = v->hnext;
		lru_unlink(l, v);
		l->used -= v->bytes;
		v->hnext = l->spare;
		l->spare = v;
	}
	return false;
}

static void lru_free(struct lru *l)
{
	for (struct lnode *n = l->head, *x; n; n = x) {
		x = n->next;
		free(n);
	}
	for (struct lnode *n = l->spare, *x; n; n = x) {
		x = n->hnext;
		free(n);
	}
	free(l->tab);
}

static double exact_hit(const struct trace *t, uint64_t cap)
{
	struct lru l = { .cap = cap, .ntab = 1 << 18 };
	size_t hits = 0;

	l.tab = calloc(l.ntab, sizeof(*l.tab));
	ck_assert_ptr_nonnull(l.tab);
	for (size_t i = 0; i < t->n; i++)
		hits += lru_ref(&l, t->r[i].key, t->r[i].bytes);
	lru_free(&l);
	return (double)hits / (double)t->n;
}

/*
 * Feeds trace t to curve m as memd does with a cache of c0 bytes: each
 * reference a request, and a put after each miss of an LRU of c0 (whose
 * hits and misses decide the calls); records the calls into rt for the
 * references. resize: every 7th reference's key takes twice its bytes (a
 * grown key, then shrunk back); every 997th reference's key is forgotten
 * first.
 */
static void feed(struct memd_mrc *m, struct ref_trace *rt,
		 const struct trace *t, uint64_t c0, bool resize)
{
	struct lru l0 = { .cap = c0, .ntab = 1 << 18 };

	l0.tab = calloc(l0.ntab, sizeof(*l0.tab));
	ck_assert_ptr_nonnull(l0.tab);
	for (size_t i = 0; i < t->n; i++) {
		uint64_t h = khash(t->r[i].key), bytes = t->r[i].bytes;
		bool hit = lru_ref(&l0, t->r[i].key, t->r[i].bytes);

		if (resize && i % 7 == 0)
			bytes *= 2;
		if (resize && i % 997 == 0) {
			memd_mrc_forget(m, h);
			ref_trace_add(rt, REF_FORGET, h, 0);
		}
		memd_mrc_access(m, h, hit ? bytes : 0, true);
		ref_trace_add(rt, REF_REQUEST, h, hit ? bytes : 0);
		if (!hit) {
			memd_mrc_access(m, h, bytes, false);
			ref_trace_add(rt, REF_PUT, h, bytes);
		}
	}
	lru_free(&l0);
}

/*
 * Feeds the trace to a curve as memd would with a cache of c0 bytes
 * and checks it against the exact simulations at 1/4, 1/2, 1, 2 and 4 x
 * c0 (what poolctl reports).
 */
static void check_trace(const char *name, const struct trace *t, uint64_t c0)
{
	struct ref_trace rt = { 0 };
	struct memd_mrc *m;
	struct memd_mrc_info info;
	double worst = 0, worst_s3 = 0;

	ck_assert_int_eq(memd_mrc_create(SAMPLES, UINT64_MAX / 2, &m), 0);
	feed(m, &rt, t, c0, false);
	memd_mrc_get_info(m, &info);
	for (size_t k = 0; k < NMULT; k++) {
		uint64_t c = (uint64_t)(mult[k] * (double)c0);
		double ex = exact_hit(t, c), est = memd_mrc_lru_hit_ratio(m, c);
		double s3 = ref_s3fifo_hit_ratio(&rt, c);
		double sim = memd_mrc_hit_ratio(m, c);

		printf("%-10s C=%6.3fx %8.1f MiB lru exact %.4f shards %.4f "
		       "err %+.4f | s3fifo exact %.4f minisim %.4f err %+.4f\n",
		       name, mult[k], (double)c / MIB, ex, est, est - ex, s3,
		       sim, sim - s3);
		if (fabs(est - ex) > worst)
			worst = fabs(est - ex);
		if (fabs(sim - s3) > worst_s3)
			worst_s3 = fabs(sim - s3);
		ck_assert_msg(fabs(est - ex) <= TOL,
			      "%s at %.3fx: shards %.4f, exact %.4f", name,
			      mult[k], est, ex);
		ck_assert_msg(fabs(sim - s3) <= TOL,
			      "%s at %.3fx: minisim %.4f, exact s3fifo %.4f",
			      name, mult[k], sim, s3);
	}
	printf("%-10s refs %zu rate %.4f tracked %u bytes %" PRIu64
	       " worst lru %.4f s3fifo %.4f\n",
	       name, t->n, info.rate, info.tracked, info.bytes, worst,
	       worst_s3);
	/* the documented memory bound */
	ck_assert_uint_le(info.tracked, SAMPLES);
	ck_assert_uint_le(info.bytes,
			  MEMD_MRC_FIXED_BYTES +
				  (uint64_t)SAMPLES *
					  (MEMD_MRC_BYTES_PER_SAMPLE +
					   MEMD_MRC_SIM_BYTES_PER_SAMPLE));
	memd_mrc_destroy(m);
	ref_trace_free(&rt);
}

/* ---- the traces: keys are (kind << 56 | id) ---- */

/* Prompts of npre shared prefixes of plen chunks and a unique tail. */
static void gen_shared(struct trace *t, uint64_t *s, unsigned nprompts,
		       unsigned npre, unsigned plen, unsigned tail,
		       double oneshot, uint64_t *uniq)
{
	for (unsigned p = 0; p < nprompts; p++) {
		if (tu_splitmix(s) % 1000 < oneshot * 1000) {
			for (unsigned c = 0; c < plen + tail; c++)
				push(t, (2ull << 56) | (*uniq)++, BLK);
			continue;
		}
		uint64_t pre = tu_splitmix(s) % npre;

		for (unsigned c = 0; c < plen; c++)
			push(t, (1ull << 56) | (pre << 20) | c, BLK);
		for (unsigned c = 0; c < tail; c++)
			push(t, (2ull << 56) | (*uniq)++, BLK);
	}
}

/* Multi-turn sessions. */
static void gen_multiturn(struct trace *t)
{
	uint64_t s = 3;
	const unsigned sessions = 300, turns = 6;
	unsigned order[300];

	/* sessions start in waves; turn t of a session reads its previous
	 * turns' chunks (8 + 2 t) and adds 2; other sessions run between */
	for (unsigned w = 0; w < 4; w++) {
		for (unsigned i = 0; i < sessions; i++)
			order[i] = i;
		for (unsigned turn = 0; turn < turns; turn++) {
			for (unsigned i = sessions - 1; i > 0; i--) {
				unsigned j =
					(unsigned)(tu_splitmix(&s) % (i + 1));
				unsigned x = order[i];

				order[i] = order[j];
				order[j] = x;
			}
			for (unsigned i = 0; i < sessions; i++) {
				uint64_t sid =
					(uint64_t)w * sessions + order[i];

				for (unsigned c = 0; c < 8 + 2 * turn; c++)
					push(t, (3ull << 56) | (sid << 20) | c,
					     c % 3 ? BLK : 2 * BLK);
			}
		}
	}
}

/* A Zipf (0.9) trace over 40 000 keys of 64, 128 or 256 KiB. */
static void gen_zipf(struct trace *t)
{
	const unsigned n = 40000;
	double *cdf = malloc(n * sizeof(*cdf)), sum = 0;
	uint64_t s = 4;

	ck_assert_ptr_nonnull(cdf);
	for (unsigned i = 0; i < n; i++)
		cdf[i] = sum += 1.0 / pow(i + 1, 0.9);
	for (unsigned i = 0; i < 300000; i++) {
		double u = (double)(tu_splitmix(&s) >> 11) / 0x1p53 * sum;
		unsigned lo = 0, hi = n - 1;

		while (lo < hi) {
			unsigned mid = (lo + hi) / 2;

			if (cdf[mid] < u)
				lo = mid + 1;
			else
				hi = mid;
		}
		/* sizes differ by key: 64, 128 or 256 KiB blocks */
		push(t, (4ull << 56) | lo, BLK << (khash(lo) % 3));
	}
	free(cdf);
}

/* a hot set of 2000 keys (125 MiB) read 60 % of the time, and a cyclic
 * scan over 20000 keys (1.25 GiB) */
static void gen_scan(struct trace *t)
{
	uint64_t s = 5, pos = 0;

	for (unsigned i = 0; i < 400000; i++) {
		if (tu_splitmix(&s) % 100 < 60)
			push(t, (5ull << 56) | (tu_splitmix(&s) % 2000), BLK);
		else
			push(t, (6ull << 56) | (pos++ % 20000), BLK);
	}
}

/* 400 prefixes of 60 chunks (1.5 GiB), 4-chunk tails */
static void gen_shared_prefix(struct trace *t)
{
	uint64_t s = 1, uniq = 0;

	gen_shared(t, &s, 6000, 400, 60, 4, 0, &uniq);
}

/* half the prompts are one-shot: they pass through and push out */
static void gen_oneshot(struct trace *t)
{
	uint64_t s = 2, uniq = 0;

	gen_shared(t, &s, 6000, 200, 60, 4, 0.5, &uniq);
}

/*
 * The accuracy traces: the cache memd serves (c0), a sample count of at
 * least the trace's keys (a sampling rate of 1; 0: too many keys for
 * one) and a small one with its error bound.
 */
static const struct kind {
	const char *name;
	void (*gen)(struct trace *t);
	uint64_t c0;
	uint32_t all, few;
	double tol_few;
} kinds[] = {
	{ "shared", gen_shared_prefix, 512 * MIB, 1 << 16, 512, TOL_FEW },
	{ "oneshot", gen_oneshot, 512 * MIB, 0, 1024, TOL_FEW },
	{ "multiturn", gen_multiturn, 256 * MIB, 1 << 15, 256, TOL_FEW },
	{ "zipf", gen_zipf, 512 * MIB, 1 << 16, 2048, TOL_FEW },
	{ "scan", gen_scan, 384 * MIB, 1 << 15, 64, TOL_64 },
};
#define NKINDS (int)(sizeof(kinds) / sizeof(kinds[0]))

/* trace _i at SAMPLES against the exact simulations (check_trace) */
START_TEST(accuracy)
{
	struct trace t = { 0 };

	kinds[_i].gen(&t);
	check_trace(kinds[_i].name, &t, kinds[_i].c0);
	free(t.r);
}
END_TEST

/*
 * At a sampling rate of 1 (no more keys than samples) every miniature
 * store is memd's S3-FIFO at its size: it hits exactly as the exact
 * reference (tests/mrc_ref.c) does on the same calls, up to max_bytes;
 * the curve at a grid size is that store's, between two between theirs.
 * With LRU distances (d, nd: the exact ones), the LRU curve at C lies
 * between the exact hit ratios at C -/+ 1/16 (the histogram's buckets
 * are at most 1/32 of a doubling wide). Returns the stores checked.
 */
static unsigned check_exact(const char *name, const struct memd_mrc *m,
			    const struct ref_trace *rt, uint64_t max_bytes,
			    const uint64_t *d, size_t nd)
{
	struct memd_mrc_info info;
	unsigned k;

	memd_mrc_get_info(m, &info);
	ck_assert_msg(info.rate == 1.0, "%s: rate %f", name, info.rate);
	for (k = 0; k < MEMD_MRC_SIM_N; k++) {
		uint64_t c = memd_mrc_sim_size(k);
		double ex, sim = memd_mrc_sim_hit_ratio(m, k);

		if (c > max_bytes)
			break;
		ex = ref_s3fifo_hit_ratio(rt, c);
		ck_assert_msg(fabs(sim - ex) < 1e-9,
			      "%s: store %u (%" PRIu64 " B) hits %.9f, "
			      "exact S3-FIFO %.9f",
			      name, k, c, sim, ex);
		ck_assert(fabs(memd_mrc_hit_ratio(m, c) - sim) < 1e-6);
		if (k) {
			double a = memd_mrc_sim_hit_ratio(m, k - 1),
			       mid = memd_mrc_hit_ratio(
				       m, (uint64_t)((double)c / 1.19));

			ck_assert(mid >= fmin(a, sim) - 1e-9);
			ck_assert(mid <= fmax(a, sim) + 1e-9);
		}
	}
	for (unsigned i = 0; d && i < 8 * 30; i++) {
		uint64_t c = (uint64_t)__builtin_exp2(16 + i / 8.0);
		double est = memd_mrc_lru_hit_ratio(m, c);
		double lo = ref_lru_hit_ratio(d, nd, c - c / 16);
		double hi = ref_lru_hit_ratio(d, nd, c + c / 16);

		ck_assert_msg(est >= lo - 1e-9 && est <= hi + 1e-9,
			      "%s: LRU at %" PRIu64 " B %.6f, exact %.6f .. "
			      "%.6f",
			      name, c, est, lo, hi);
	}
	return k;
}

/* A key of 64 KiB .. 1 MiB, a hot third read 70 % of the time, with a
 * request (its size unknown on a miss of a key never put) and a put
 * each; a forgotten key is a miss. */
START_TEST(minisim_exact_at_full_rate)
{
	struct ref_trace rt = { 0 };
	struct memd_mrc *m;
	struct memd_mrc_info info;
	uint64_t s = 6, *d;
	size_t nd;

	ck_assert_int_eq(memd_mrc_create(4096, UINT64_MAX / 2, &m), 0);
	for (unsigned i = 0; i < 60000; i++) {
		uint64_t k = tu_splitmix(&s) % 100 < 70
				     ? tu_splitmix(&s) % 1000
				     : tu_splitmix(&s) % 3000;
		uint64_t h = khash(k), bytes = (64 * KIB) << (khash(k) % 5);

		memd_mrc_access(m, h, 0, true);
		ref_trace_add(&rt, REF_REQUEST, h, 0);
		memd_mrc_access(m, h, bytes, false);
		ref_trace_add(&rt, REF_PUT, h, bytes);
	}
	nd = ref_lru_distances(&rt, &d);
	ck_assert_uint_ge(check_exact("hot3000", m, &rt, 4 * 3000 * MIB, d, nd),
			  20);
	free(d);
	/* a forgotten key misses everywhere, then is back */
	ck_assert(memd_mrc_hit_ratio(m, 1ull << 40) > 0.9);
	memd_mrc_forget(m, khash(1));
	ref_trace_add(&rt, REF_FORGET, khash(1), 0);
	memd_mrc_access(m, khash(1), 0, true);
	ref_trace_add(&rt, REF_REQUEST, khash(1), 0);
	memd_mrc_get_info(m, &info);
	ck_assert_uint_eq(info.window_samples, 60001);
	ck_assert(fabs(memd_mrc_sim_hit_ratio(m, MEMD_MRC_SIM_N - 1) -
		       ref_s3fifo_hit_ratio(&rt, 1ull << 43)) < 1e-9);
	memd_mrc_destroy(m);
	ref_trace_free(&rt);
}
END_TEST

/* The window: after a phase of reuse within 16 keys, a cycle over 200
 * others: once two windows of samples have passed, the curve says 0 at 64
 * blocks, where the first phase hit. */
START_TEST(window_slides)
{
	struct memd_mrc *m;
	struct memd_mrc_info info;

	ck_assert_int_eq(memd_mrc_create(64, 1000, &m), 0);
	for (unsigned i = 0; i < 5000; i++)
		memd_mrc_access(m, khash(i % 16), BLK, true);
	ck_assert(memd_mrc_lru_hit_ratio(m, 64 * BLK) > 0.99);
	for (unsigned i = 0; i < 1500; i++)
		memd_mrc_access(m, khash(1000 + i % 200), BLK, true);
	/* within the window of the first phase: a mix */
	ck_assert(memd_mrc_lru_hit_ratio(m, 64 * BLK) > 0.1);
	ck_assert(memd_mrc_lru_hit_ratio(m, 64 * BLK) < 0.9);
	for (unsigned i = 1500; i < 30000; i++)
		memd_mrc_access(m, khash(1000 + i % 200), BLK, true);
	ck_assert(memd_mrc_lru_hit_ratio(m, 64 * BLK) < 0.01);
	ck_assert(memd_mrc_lru_hit_ratio(m, 400 * BLK) > 0.95);
	memd_mrc_get_info(m, &info);
	ck_assert_uint_lt(info.window_samples, 2000);
	ck_assert_uint_ge(info.window_samples, 1000);
	ck_assert(info.rate < 0.5); /* 216 keys, 64 samples */
	ck_assert_uint_eq(info.tracked, 64);
	memd_mrc_destroy(m);
}
END_TEST

/* Sizes: a reuse distance counts the bytes of the keys between and the
 * key's own; a size changed by a put counts from then on. */
START_TEST(byte_distances)
{
	struct memd_mrc *m;
	uint64_t b[64];
	double h[64];
	size_t n;

	ck_assert_int_eq(memd_mrc_create(16, 0, &m), 0);
	/* a (1 MiB), b (3 MiB), a: a's distance is 3 + 1 = 4 MiB */
	memd_mrc_access(m, 1, 0, true);
	memd_mrc_access(m, 1, MIB, false);
	memd_mrc_access(m, 2, 3 * MIB, false);
	memd_mrc_access(m, 1, 0, true);
	ck_assert(fabs(memd_mrc_lru_hit_ratio(m, 4 * MIB) - 0.5) < 1e-9);
	ck_assert(memd_mrc_lru_hit_ratio(m, 4 * MIB - 200 * KIB) < 1e-9);
	/* b grows to 7 MiB: a's next distance is 8 MiB */
	memd_mrc_access(m, 2, 7 * MIB, false);
	memd_mrc_access(m, 1, 0, true);
	ck_assert(fabs(memd_mrc_lru_hit_ratio(m, 4 * MIB) - 1.0 / 3) < 1e-9);
	ck_assert(fabs(memd_mrc_lru_hit_ratio(m, 8 * MIB) - 2.0 / 3) < 1e-9);
	/* forgotten: the next reference is a first one */
	memd_mrc_forget(m, 1);
	memd_mrc_access(m, 1, MIB, true);
	ck_assert(fabs(memd_mrc_lru_hit_ratio(m, 1ull << 40) - 0.5) < 1e-9);
	n = memd_mrc_lru_points(m, 4, b, h, 64);
	ck_assert_uint_gt(n, 2);
	for (size_t i = 1; i < n; i++) {
		ck_assert_uint_gt(b[i], b[i - 1]);
		ck_assert(h[i] >= h[i - 1]);
	}
	ck_assert(fabs(h[n - 1] - 0.5) < 1e-9);
	memd_mrc_destroy(m);
	ck_assert_int_eq(memd_mrc_create(15, 0, &m), -22);
	ck_assert_ptr_null(m);
	memd_mrc_destroy(NULL);
}
END_TEST

/* ---- the exact references on the accuracy traces ----
 *
 * Each trace fed as check_trace does, with resizes and forgets: with as
 * many samples as keys (a sampling rate of 1) every store is checked
 * exactly (check_exact); with few (the rate falls, keys are dropped, the
 * stores shrink) the curve is checked at 1/4 .. 4 x c0 against a bound
 * on its error, tol, looser than check_trace's at SAMPLES. lru: check
 * the LRU curve too (the exact distances cost O(keys) a request). */
static void exact_on(const char *name, const struct trace *t, uint64_t c0,
		     uint32_t samples, double tol, bool lru)
{
	struct ref_trace rt = { 0 };
	struct memd_mrc *m;
	uint64_t *d = NULL, all = 0;
	size_t nd = 0;

	ck_assert_int_eq(memd_mrc_create(samples, UINT64_MAX / 2, &m), 0);
	feed(m, &rt, t, c0, true);
	for (size_t i = 0; i < t->n; i++)
		all += 2 * t->r[i].bytes;
	if (tol == 0) {
		if (lru)
			nd = ref_lru_distances(&rt, &d);
		check_exact(name, m, &rt, all, d, nd);
		free(d);
	}
	for (size_t k = 0; tol > 0 && k < NMULT; k++) {
		uint64_t c = (uint64_t)(mult[k] * (double)c0);
		double ex = ref_s3fifo_hit_ratio(&rt, c);
		double sim = memd_mrc_hit_ratio(m, c);

		printf("%-14s C=%6.3fx s3fifo exact %.4f minisim %.4f err "
		       "%+.4f\n",
		       name, mult[k], ex, sim, sim - ex);
		ck_assert_msg(fabs(sim - ex) <= tol,
			      "%s at %.3fx: minisim %.4f, exact s3fifo %.4f",
			      name, mult[k], sim, ex);
	}
	memd_mrc_destroy(m);
	ref_trace_free(&rt);
}

START_TEST(exact_on_traces)
{
	const struct kind *k = &kinds[_i];
	struct trace t = { 0 };
	char name[32];

	k->gen(&t);
	if (k->all)
		exact_on(k->name, &t, k->c0, k->all, 0, false);
	snprintf(name, sizeof(name), "%s/%u", k->name, k->few);
	exact_on(name, &t, k->c0, k->few, k->tol_few, false);
	free(t.r);
}
END_TEST

/* bench/kvsample's worst case: 400 prefixes of 7 keys of 1 MiB and a
 * unique key a prompt, every reference sampled; LRU checked too */
START_TEST(exact_kvsample)
{
	struct trace t = { 0 };
	uint64_t s = 7, uniq = 0;

	gen_shared(&t, &s, 3000, 400, 7, 1, 0, &uniq);
	for (size_t i = 0; i < t.n; i++)
		t.r[i].bytes = MIB;
	exact_on("kvsample", &t, 16 * 64 * MIB, SAMPLES, 0, true);
	free(t.r);
}
END_TEST

static Suite *mrc_suite(void)
{
	Suite *s = suite_create("mrc");
	TCase *tc = tu_tcase(s, "mrc", 300);

	TU_ADD_TESTS(tc, byte_distances, window_slides,
		     minisim_exact_at_full_rate);
	tcase_add_loop_test(tc, accuracy, 0, NKINDS);
	tcase_add_loop_test(tc, exact_on_traces, 0, NKINDS);
	tcase_add_test(tc, exact_kvsample);
	return s;
}

int main(void)
{
	return tu_run_suite(mrc_suite());
}
