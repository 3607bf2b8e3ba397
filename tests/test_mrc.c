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
 * What memd reports, the miniature S3-FIFO stores, is checked the same
 * way against an exact S3-FIFO of each size (memd's policy, as
 * memd/kvstore.c evicts), and exactly at a sampling rate of 1;
 * docs/capacity.md has the tables.
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

#define KIB 1024ull
#define MIB (1024ull * 1024)
#define BLK (64 * KIB + 64) /* the smallest class's block */
#define SAMPLES 8192u
#define TOL 0.02

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* the spatial hash of key k (memd: a keyed SipHash of the 32-byte key) */
static uint64_t khash(uint64_t k)
{
	uint64_t s = k * 0x2545f4914f6cdd1dull + 7;

	return splitmix(&s);
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
 * ---- exact S3-FIFO of C bytes, as memd/kvstore.c evicts ----
 * A miss makes room first (evict until the new key fits), then inserts
 * into the small FIFO, or into main when its key is a ghost; a hit raises
 * the key's frequency (at most 3). To evict: from small when it holds at
 * least 10 % of the bytes (its oldest: to main with frequency >= 1, else
 * out and ghosted), else from main (oldest: back to main's head with
 * frequency - 1, or out). Ghosts: at most as many as resident keys.
 */
enum { QS, QM, QG };

struct snode {
	uint64_t key, bytes;
	int q, freq;
	struct snode *prev, *next, *hnext;
};

struct sq {
	struct snode *head, *tail;
	uint64_t count, bytes;
};

struct s3 {
	uint64_t cap, used;
	struct sq q[3];
	struct snode **tab;
	size_t ntab;
	struct snode *spare;
};

static struct snode **s3_slot(struct s3 *c, uint64_t key)
{
	struct snode **p = &c->tab[khash(key) & (c->ntab - 1)];

	while (*p && (*p)->key != key)
		p = &(*p)->hnext;
	return p;
}

static void sq_unlink(struct s3 *c, struct snode *n)
{
	struct sq *q = &c->q[n->q];

	if (n->prev)
		n->prev->next = n->next;
	else
		q->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		q->tail = n->prev;
	q->count--;
	q->bytes -= n->bytes;
}

static void sq_push(struct s3 *c, struct snode *n, int qi)
{
	struct sq *q = &c->q[qi];

	n->q = qi;
	n->prev = NULL;
	n->next = q->head;
	if (q->head)
		q->head->prev = n;
	q->head = n;
	if (!q->tail)
		q->tail = n;
	q->count++;
	q->bytes += n->bytes;
}

static void s3_drop(struct s3 *c, struct snode *n)
{
	struct snode **p = s3_slot(c, n->key);

	*p = n->hnext;
	sq_unlink(c, n);
	n->hnext = c->spare;
	c->spare = n;
}

static void s3_evict(struct s3 *c)
{
	for (;;) {
		struct sq *s = &c->q[QS], *m = &c->q[QM];
		bool from_small =
			s->count &&
			(m->count == 0 || s->bytes * 10 >= s->bytes + m->bytes);
		struct snode *e = from_small ? s->tail : m->tail;

		sq_unlink(c, e);
		if (e->freq >= 1) {
			if (!from_small)
				e->freq--;
			sq_push(c, e, QM);
			continue;
		}
		c->used -= e->bytes;
		if (from_small) {
			sq_push(c, e, QG);
			while (c->q[QG].count > c->q[QS].count + c->q[QM].count)
				s3_drop(c, c->q[QG].tail);
		} else {
			sq_push(c, e, QG); /* not ghosted: dropped at once */
			s3_drop(c, e);
		}
		return;
	}
}

static bool s3_ref(struct s3 *c, uint64_t key, uint64_t bytes)
{
	struct snode **p = s3_slot(c, key), *n = *p;
	int q = QS;

	if (n && n->q != QG) {
		if (n->freq < 3)
			n->freq++;
		return true;
	}
	if (bytes > c->cap)
		return false;
	if (n) { /* a ghost comes back into main */
		s3_drop(c, n);
		q = QM;
	}
	while (c->used + bytes > c->cap)
		s3_evict(c);
	p = s3_slot(c, key);
	if (c->spare) {
		n = c->spare;
		c->spare = n->hnext;
	} else {
		n = malloc(sizeof(*n));
		ck_assert_ptr_nonnull(n);
	}
	memset(n, 0, sizeof(*n));
	n->key = key;
	n->bytes = bytes;
	n->hnext = *p;
	*p = n;
	sq_push(c, n, q);
	c->used += bytes;
	return false;
}

static double s3fifo_hit(const struct trace *t, uint64_t cap)
{
	struct s3 c = { .cap = cap, .ntab = 1 << 18 };
	size_t hits = 0;

	c.tab = calloc(c.ntab, sizeof(*c.tab));
	ck_assert_ptr_nonnull(c.tab);
	for (size_t i = 0; i < t->n; i++)
		hits += s3_ref(&c, t->r[i].key, t->r[i].bytes);
	for (int q = 0; q < 3; q++)
		for (struct snode *n = c.q[q].head, *x; n; n = x) {
			x = n->next;
			free(n);
		}
	for (struct snode *n = c.spare, *x; n; n = x) {
		x = n->hnext;
		free(n);
	}
	free(c.tab);
	return (double)hits / (double)t->n;
}

/*
 * Feeds the trace to a curve as memd would with a cache of c0 bytes
 * (uncounted put after each miss of that cache) and checks it against the
 * exact simulation at 1/4, 1/2, 1, 2 and 4 x c0 (what poolctl reports).
 */
static void check_trace(const char *name, const struct trace *t, uint64_t c0)
{
	static const double mult[] = { 0.25, 0.5, 1, 2, 4 };
	struct lru l0 = { .cap = c0, .ntab = 1 << 18 };
	struct memd_mrc *m;
	struct memd_mrc_info info;
	double worst = 0, worst_s3 = 0;

	ck_assert_int_eq(memd_mrc_create(SAMPLES, UINT64_MAX / 2, &m), 0);
	l0.tab = calloc(l0.ntab, sizeof(*l0.tab));
	ck_assert_ptr_nonnull(l0.tab);
	for (size_t i = 0; i < t->n; i++) {
		uint64_t h = khash(t->r[i].key);
		bool hit = lru_ref(&l0, t->r[i].key, t->r[i].bytes);

		memd_mrc_access(m, h, hit ? t->r[i].bytes : 0, true);
		if (!hit)
			memd_mrc_access(m, h, t->r[i].bytes, false);
	}
	lru_free(&l0);
	memd_mrc_get_info(m, &info);
	for (size_t k = 0; k < sizeof(mult) / sizeof(mult[0]); k++) {
		uint64_t c = (uint64_t)(mult[k] * (double)c0);
		double ex = exact_hit(t, c), est = memd_mrc_lru_hit_ratio(m, c);
		double s3 = s3fifo_hit(t, c), sim = memd_mrc_hit_ratio(m, c);

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
}

/* ---- the traces: keys are (kind << 56 | id) ---- */

/* Prompts of npre shared prefixes of plen chunks and a unique tail. */
static void gen_shared(struct trace *t, uint64_t *s, unsigned nprompts,
		       unsigned npre, unsigned plen, unsigned tail,
		       double oneshot, uint64_t *uniq)
{
	for (unsigned p = 0; p < nprompts; p++) {
		if (splitmix(s) % 1000 < oneshot * 1000) {
			for (unsigned c = 0; c < plen + tail; c++)
				push(t, (2ull << 56) | (*uniq)++, BLK);
			continue;
		}
		uint64_t pre = splitmix(s) % npre;

		for (unsigned c = 0; c < plen; c++)
			push(t, (1ull << 56) | (pre << 20) | c, BLK);
		for (unsigned c = 0; c < tail; c++)
			push(t, (2ull << 56) | (*uniq)++, BLK);
	}
}

START_TEST(shared_prefix)
{
	struct trace t = { 0 };
	uint64_t s = 1, uniq = 0;

	/* 400 prefixes of 60 chunks (1.5 GiB), 4-chunk tails */
	gen_shared(&t, &s, 6000, 400, 60, 4, 0, &uniq);
	check_trace("shared", &t, 512 * MIB);
	free(t.r);
}
END_TEST

START_TEST(oneshot_mix)
{
	struct trace t = { 0 };
	uint64_t s = 2, uniq = 0;

	/* half the prompts are one-shot: they pass through and push out */
	gen_shared(&t, &s, 6000, 200, 60, 4, 0.5, &uniq);
	check_trace("oneshot", &t, 512 * MIB);
	free(t.r);
}
END_TEST

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
				unsigned j = (unsigned)(splitmix(&s) % (i + 1));
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

START_TEST(multiturn)
{
	struct trace t = { 0 };

	gen_multiturn(&t);
	check_trace("multiturn", &t, 256 * MIB);
	free(t.r);
}
END_TEST

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
		double u = (double)(splitmix(&s) >> 11) / 0x1p53 * sum;
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

START_TEST(zipf)
{
	struct trace t = { 0 };

	gen_zipf(&t);
	check_trace("zipf", &t, 512 * MIB);
	free(t.r);
}
END_TEST

/* a hot set of 2000 keys (125 MiB) read 60 % of the time, and a cyclic
 * scan over 20000 keys (1.25 GiB) */
static void gen_scan(struct trace *t)
{
	uint64_t s = 5, pos = 0;

	for (unsigned i = 0; i < 400000; i++) {
		if (splitmix(&s) % 100 < 60)
			push(t, (5ull << 56) | (splitmix(&s) % 2000), BLK);
		else
			push(t, (6ull << 56) | (pos++ % 20000), BLK);
	}
}

START_TEST(scan)
{
	struct trace t = { 0 };

	gen_scan(&t);
	check_trace("scan", &t, 384 * MIB);
	free(t.r);
}
END_TEST

/* At a sampling rate of 1 (fewer keys than samples) each miniature store
 * is memd's S3-FIFO at its size: it hits exactly as the reference
 * simulation does, whatever the sizes; a forgotten key is a miss. */
START_TEST(minisim_exact_at_full_rate)
{
	struct trace t = { 0 };
	struct memd_mrc *m;
	struct memd_mrc_info info;
	uint64_t s = 6;
	unsigned checked = 0;

	/* 3000 keys of 64 KiB .. 1 MiB, a hot third read 70 % of the time */
	for (unsigned i = 0; i < 60000; i++) {
		uint64_t k = splitmix(&s) % 100 < 70 ? splitmix(&s) % 1000
						     : splitmix(&s) % 3000;

		push(&t, k, (64 * KIB) << (khash(k) % 5));
	}
	ck_assert_int_eq(memd_mrc_create(4096, UINT64_MAX / 2, &m), 0);
	for (size_t i = 0; i < t.n; i++) {
		uint64_t h = khash(t.r[i].key);

		/* memd: the request (size unknown on a miss of a key never
		 * put here), then the put */
		memd_mrc_access(m, h, 0, true);
		memd_mrc_access(m, h, t.r[i].bytes, false);
	}
	memd_mrc_get_info(m, &info);
	ck_assert(info.rate == 1.0);
	for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++) {
		uint64_t c = memd_mrc_sim_size(k);
		double ex, sim = memd_mrc_sim_hit_ratio(m, k);

		if (c > 4 * 3000 * MIB)
			break;
		ex = s3fifo_hit(&t, c);
		ck_assert_msg(fabs(sim - ex) < 1e-9, "%" PRIu64 " B: %f vs %f",
			      c, sim, ex);
		/* at a grid size its value; between two, between theirs */
		ck_assert(fabs(memd_mrc_hit_ratio(m, c) - sim) < 1e-6);
		if (k) {
			double a = memd_mrc_sim_hit_ratio(m, k - 1),
			       mid = memd_mrc_hit_ratio(
				       m, (uint64_t)((double)c / 1.19));

			ck_assert(mid >= fmin(a, sim) - 1e-9);
			ck_assert(mid <= fmax(a, sim) + 1e-9);
		}
		checked++;
	}
	ck_assert_uint_ge(checked, 20);
	/* a forgotten key misses everywhere, then is back */
	ck_assert(memd_mrc_hit_ratio(m, 1ull << 40) > 0.9);
	memd_mrc_forget(m, khash(1));
	memd_mrc_access(m, khash(1), 0, true);
	memd_mrc_get_info(m, &info);
	ck_assert_uint_eq(info.window_samples, t.n + 1);
	ck_assert(fabs(memd_mrc_sim_hit_ratio(m, MEMD_MRC_SIM_N - 1) -
		       s3fifo_hit(&t, 1ull << 43) * (double)t.n /
			       (double)(t.n + 1)) < 1e-9);
	memd_mrc_destroy(m);
	free(t.r);
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

/* ---- the same outputs as the frozen reference (tests/mrc_ref.c) ----
 * memd/mrc.c is made cheaper without changing what it computes: every
 * output, bit for bit, as the reference's on the same calls. */

#define NPTS 4096

static bool same_bits(double a, double b)
{
	return memcmp(&a, &b, sizeof(a)) == 0;
}

/* Every output of m and r, which have seen the same calls. */
static void check_same(const struct memd_mrc *m, const struct ref_mrc *r,
		       const char *name, size_t at)
{
	static uint64_t ba[NPTS], bb[NPTS];
	static double ha[NPTS], hb[NPTS];
	static const unsigned pd[] = { 1, 4, 64 };
	struct memd_mrc_info a, b;

	memd_mrc_get_info(m, &a);
	ref_mrc_get_info(r, &b);
	ck_assert_msg(same_bits(a.rate, b.rate) &&
			      a.sample_max == b.sample_max &&
			      a.tracked == b.tracked &&
			      a.window_samples == b.window_samples &&
			      same_bits(a.window_requests, b.window_requests) &&
			      a.window_refs == b.window_refs,
		      "%s after %zu calls: info differs", name, at);
	for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++) {
		double x = memd_mrc_sim_hit_ratio(m, k);
		double y = ref_mrc_sim_hit_ratio(r, k);

		ck_assert_msg(same_bits(x, y),
			      "%s after %zu calls: store %u hits %.17g, "
			      "reference %.17g",
			      name, at, k, x, y);
		ck_assert_uint_eq(memd_mrc_sim_size(k), ref_mrc_sim_size(k));
	}
	/* sizes between and beyond the grid's, 8 a doubling */
	for (unsigned i = 0; i < 8 * 36; i++) {
		uint64_t c = (uint64_t)__builtin_exp2(14 + i / 8.0);

		ck_assert_msg(same_bits(memd_mrc_hit_ratio(m, c),
					ref_mrc_hit_ratio(r, c)) &&
				      same_bits(memd_mrc_lru_hit_ratio(m, c),
						ref_mrc_lru_hit_ratio(r, c)),
			      "%s after %zu calls: hit ratio at %" PRIu64
			      " differs",
			      name, at, c);
	}
	for (size_t i = 0; i < sizeof(pd) / sizeof(pd[0]); i++) {
		size_t n = memd_mrc_points(m, pd[i], ba, ha, NPTS);

		ck_assert_uint_eq(n, ref_mrc_points(r, pd[i], bb, hb, NPTS));
		ck_assert(!memcmp(ba, bb, n * sizeof(*ba)));
		ck_assert(!memcmp(ha, hb, n * sizeof(*ha)));
		n = memd_mrc_lru_points(m, pd[i], ba, ha, NPTS);
		ck_assert_uint_eq(n,
				  ref_mrc_lru_points(r, pd[i], bb, hb, NPTS));
		ck_assert(!memcmp(ba, bb, n * sizeof(*ba)));
		ck_assert(!memcmp(ha, hb, n * sizeof(*ha)));
	}
}

/*
 * Feeds trace t to a curve and to the reference as check_trace does
 * (a counted reference, and a put after each miss of an LRU of c0),
 * comparing the calls' results and, every `every` references and at the
 * end, every output. resize: every 7th reference's key takes twice its
 * bytes (a grown key, then shrunk back); forget: every 997th reference's
 * key is forgotten first.
 */
static void same_on(const char *name, const struct trace *t, uint64_t c0,
		    uint32_t samples, uint64_t window, bool resize,
		    size_t every)
{
	struct lru l0 = { .cap = c0, .ntab = 1 << 18 };
	struct memd_mrc *m;
	struct ref_mrc *r;
	size_t calls = 0;

	ck_assert_int_eq(memd_mrc_create(samples, window, &m), 0);
	ck_assert_int_eq(ref_mrc_create(samples, window, &r), 0);
	l0.tab = calloc(l0.ntab, sizeof(*l0.tab));
	ck_assert_ptr_nonnull(l0.tab);
	for (size_t i = 0; i < t->n; i++) {
		uint64_t h = khash(t->r[i].key), bytes = t->r[i].bytes;
		bool hit = lru_ref(&l0, t->r[i].key, t->r[i].bytes), x, y;

		if (resize && i % 7 == 0)
			bytes *= 2;
		if (resize && i % 997 == 0) {
			memd_mrc_forget(m, h);
			ref_mrc_forget(r, h);
		}
		x = memd_mrc_access(m, h, hit ? bytes : 0, true);
		y = ref_mrc_access(r, h, hit ? bytes : 0, true);
		ck_assert_msg(x == y, "%s: call %zu differs", name, calls);
		calls++;
		if (!hit) {
			x = memd_mrc_access(m, h, bytes, false);
			y = ref_mrc_access(r, h, bytes, false);
			ck_assert_msg(x == y, "%s: call %zu differs", name,
				      calls);
			calls++;
		}
		if (i % every == every - 1)
			check_same(m, r, name, calls);
	}
	check_same(m, r, name, calls);
	lru_free(&l0);
	memd_mrc_destroy(m);
	ref_mrc_destroy(r);
}

/* The five accuracy traces and a kvsample-shaped one (bench/kvsample's
 * worst case: 400 prefixes of 7 keys of 1 MiB and a unique key a
 * prompt, every reference sampled), each at the default sample count
 * (a sampling rate of 1 for most) and at small ones (the rate falls,
 * keys are dropped, the stores shrink; short windows rotate), with
 * resizes and forgets. */
START_TEST(same_as_reference)
{
	struct trace t = { 0 };
	uint64_t s = 1, uniq = 0;

	gen_shared(&t, &s, 6000, 400, 60, 4, 0, &uniq);
	same_on("shared", &t, 512 * MIB, SAMPLES, UINT64_MAX / 2, false, 50000);
	same_on("shared/512", &t, 512 * MIB, 512, 0, true, 50000);
	t.n = 0;
	s = 2;
	uniq = 0;
	gen_shared(&t, &s, 6000, 200, 60, 4, 0.5, &uniq);
	same_on("oneshot", &t, 512 * MIB, SAMPLES, UINT64_MAX / 2, false,
		50000);
	same_on("oneshot/1024", &t, 512 * MIB, 1024, 3000, true, 50000);
	t.n = 0;
	gen_multiturn(&t);
	same_on("multiturn", &t, 256 * MIB, SAMPLES, UINT64_MAX / 2, false,
		20000);
	same_on("multiturn/256", &t, 256 * MIB, 256, 0, true, 20000);
	t.n = 0;
	gen_zipf(&t);
	same_on("zipf", &t, 512 * MIB, SAMPLES, UINT64_MAX / 2, false, 50000);
	same_on("zipf/2048", &t, 512 * MIB, 2048, 10000, true, 50000);
	t.n = 0;
	gen_scan(&t);
	same_on("scan", &t, 384 * MIB, SAMPLES, UINT64_MAX / 2, false, 50000);
	same_on("scan/64", &t, 384 * MIB, 64, 1000, true, 50000);
	t.n = 0;
	s = 7;
	uniq = 0;
	gen_shared(&t, &s, 3000, 400, 7, 1, 0, &uniq);
	for (size_t i = 0; i < t.n; i++)
		t.r[i].bytes = MIB;
	same_on("kvsample", &t, 16 * 64 * MIB, SAMPLES, 0, false, 4000);
	free(t.r);
}
END_TEST

static Suite *mrc_suite(void)
{
	Suite *s = suite_create("mrc");
	TCase *tc = tcase_create("mrc");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, byte_distances);
	tcase_add_test(tc, window_slides);
	tcase_add_test(tc, minisim_exact_at_full_rate);
	tcase_add_test(tc, shared_prefix);
	tcase_add_test(tc, oneshot_mix);
	tcase_add_test(tc, multiturn);
	tcase_add_test(tc, zipf);
	tcase_add_test(tc, scan);
	tcase_add_test(tc, same_as_reference);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(mrc_suite());
	int nf;

	srunner_run_all(sr, CK_NORMAL);
	nf = srunner_ntests_failed(sr);
	srunner_free(sr);
	return nf ? EXIT_FAILURE : EXIT_SUCCESS;
}
