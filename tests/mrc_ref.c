// SPDX-License-Identifier: MIT
/*
 * tests/mrc_ref.c - memd/mrc.c as of git ac827d8, frozen, under ref_mrc_*
 * names (tests/mrc_ref.h): test_mrc's same_as_reference feeds the same
 * traces to it and to memd/mrc.c and requires every output to be
 * bit-for-bit the same, so a change that is meant to make the curve
 * cheaper cannot change what it computes. Do not edit below the names:
 * a change meant to alter the curve replaces this file with the new
 * memd/mrc.c in the same commit.
 */
#define memd_mrc ref_mrc
#define memd_mrc_access ref_mrc_access
#define memd_mrc_bytes ref_mrc_bytes
#define memd_mrc_create ref_mrc_create
#define memd_mrc_destroy ref_mrc_destroy
#define memd_mrc_forget ref_mrc_forget
#define memd_mrc_get_info ref_mrc_get_info
#define memd_mrc_hit_ratio ref_mrc_hit_ratio
#define memd_mrc_lru_hit_ratio ref_mrc_lru_hit_ratio
#define memd_mrc_lru_points ref_mrc_lru_points
#define memd_mrc_points ref_mrc_points
#define memd_mrc_sim_hit_ratio ref_mrc_sim_hit_ratio
#define memd_mrc_sim_size ref_mrc_sim_size
#include "tests/mrc_ref.h"

#include "memd/mrc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

struct mrc_entry {
	uint64_t h;
	uint64_t bytes;
	uint32_t slot, heap, hnext, pad;
};

/* a key's queue in a miniature store */
enum { SQ_NONE, SQ_SMALL, SQ_MAIN, SQ_GHOST };

struct mrc_sim {
	double cap;		   /* grid size x R, bytes */
	uint64_t used;		   /* bytes of small + main */
	uint32_t head[4], tail[4]; /* by SQ_*; head: newest */
	uint32_t count[4];
	uint64_t qbytes[4];
	double hits[2]; /* weight of requests hit, per window */
};

struct memd_mrc {
	uint32_t sample_max, nslots, nbuckets_h; /* nbuckets_h: power of 2 */
	uint32_t tracked, next_slot, nfree;
	uint64_t window_refs;
	uint64_t thr; /* sampled iff h <= thr */
	uint64_t total_bytes;
	struct mrc_entry *e;
	uint32_t *hhead; /* hash table heads */
	uint32_t *heap;	 /* entry indices, max-heap by h */
	uint32_t *freel; /* free entry indices */
	uint32_t *slot_entry;
	uint64_t *fen; /* 1-based Fenwick tree over slots */
	int cur;       /* the current histogram: hist[cur] */
	uint64_t samples[2];
	uint64_t refs[2]; /* every counted reference, sampled or not */
	double cold[2];
	double hist[2][MEMD_MRC_NBUCKETS];
	/* the miniature S3-FIFO stores, one per grid size; per key and
	 * store: queue links and state, at [k * sample_max + entry] */
	struct mrc_sim sim[MEMD_MRC_SIM_N];
	/* stores 0 .. live are simulated; every store above live has never
	 * evicted, holds exactly what store live holds and is not kept:
	 * its links, queues and bytes are copied from live's when live
	 * first has to evict (sim_split), only its hits are counted */
	unsigned live;
	uint32_t *sprev, *snext;
	uint8_t *sst; /* queue (SQ_*) | freq << 2 */
};

/* ---- histogram buckets ---- */

static unsigned msb(uint64_t x)
{
	return 63u - (unsigned)__builtin_clzll(x);
}

/* Bucket i holds the distances d with d - 1 in [lo, hi) of
 * bucket_edges(i): (lo, hi] up to the integer, so a distance of exactly
 * C hits at C. */
static uint32_t bucket_of(uint64_t d)
{
	unsigned k, b;
	uint32_t j;

	if (d <= MEMD_MRC_MIN_BYTES)
		return 0;
	d--;
	b = msb(d);
	k = b - 12; /* MEMD_MRC_MIN_BYTES is 2^12 */
	if (k >= MEMD_MRC_DOUBLINGS)
		return MEMD_MRC_NBUCKETS - 1;
	j = (uint32_t)(d >> (b - 5)) & (MEMD_MRC_SUB - 1);
	return 1 + k * MEMD_MRC_SUB + j;
}

static void bucket_edges(uint32_t i, double *lo, double *hi)
{
	uint64_t base, step;

	if (i == 0) {
		*lo = 0;
		*hi = (double)MEMD_MRC_MIN_BYTES;
		return;
	}
	base = MEMD_MRC_MIN_BYTES << ((i - 1) / MEMD_MRC_SUB);
	step = base / MEMD_MRC_SUB;
	*lo = (double)(base + step * ((i - 1) % MEMD_MRC_SUB));
	*hi = *lo + (double)step;
}

/* ---- Fenwick tree of bytes over timestamp slots ---- */

static void fen_add(struct memd_mrc *m, uint32_t slot, int64_t v)
{
	for (uint32_t i = slot + 1; i <= m->nslots; i += i & -i)
		m->fen[i] += (uint64_t)v;
	m->total_bytes += (uint64_t)v;
}

/* bytes in slots 0 .. slot */
static uint64_t fen_prefix(const struct memd_mrc *m, uint32_t slot)
{
	uint64_t s = 0;

	for (uint32_t i = slot + 1; i; i -= i & -i)
		s += m->fen[i];
	return s;
}

/* Renumbers the live slots 0 .. tracked - 1 in order, rebuilds fen. */
static void slots_compact(struct memd_mrc *m)
{
	uint32_t n = 0;

	for (uint32_t s = 0; s < m->nslots; s++) {
		uint32_t x = m->slot_entry[s];

		if (x == NONE)
			continue;
		m->slot_entry[s] = NONE;
		m->slot_entry[n] = x;
		m->e[x].slot = n++;
	}
	memset(m->fen, 0, (m->nslots + 1) * sizeof(*m->fen));
	for (uint32_t s = 0; s < n; s++) {
		uint32_t i = s + 1, p = i + (i & -i);

		m->fen[i] += m->e[m->slot_entry[s]].bytes;
		if (p <= m->nslots)
			m->fen[p] += m->fen[i];
	}
	m->next_slot = n;
}

static void slot_take(struct memd_mrc *m, uint32_t x)
{
	if (m->next_slot == m->nslots)
		slots_compact(m);
	m->e[x].slot = m->next_slot++;
	m->slot_entry[m->e[x].slot] = x;
	fen_add(m, m->e[x].slot, (int64_t)m->e[x].bytes);
}

static void slot_drop(struct memd_mrc *m, uint32_t x)
{
	fen_add(m, m->e[x].slot, -(int64_t)m->e[x].bytes);
	m->slot_entry[m->e[x].slot] = NONE;
}

/* ---- the max-heap of tracked keys by hash ---- */

static void heap_set(struct memd_mrc *m, uint32_t i, uint32_t x)
{
	m->heap[i] = x;
	m->e[x].heap = i;
}

static void heap_up(struct memd_mrc *m, uint32_t i)
{
	uint32_t x = m->heap[i];

	while (i) {
		uint32_t p = (i - 1) / 2;

		if (m->e[m->heap[p]].h >= m->e[x].h)
			break;
		heap_set(m, i, m->heap[p]);
		i = p;
	}
	heap_set(m, i, x);
}

static void heap_down(struct memd_mrc *m, uint32_t i)
{
	uint32_t x = m->heap[i], n = m->tracked;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && m->e[m->heap[c + 1]].h > m->e[m->heap[c]].h)
			c++;
		if (m->e[m->heap[c]].h <= m->e[x].h)
			break;
		heap_set(m, i, m->heap[c]);
		i = c;
	}
	heap_set(m, i, x);
}

static void heap_remove(struct memd_mrc *m, uint32_t x)
{
	uint32_t i = m->e[x].heap, last = m->heap[m->tracked - 1];

	m->tracked--;
	if (i == m->tracked)
		return;
	heap_set(m, i, last);
	heap_up(m, i);
	heap_down(m, m->e[last].heap);
}

/* ---- the hash table of tracked keys ---- */

static uint32_t *hchain(struct memd_mrc *m, uint64_t h)
{
	/* the low bits of a uniform hash; the threshold only cuts high
	 * values, so the low ones stay uniform */
	return &m->hhead[h & (m->nbuckets_h - 1)];
}

static uint32_t find(struct memd_mrc *m, uint64_t h)
{
	uint32_t x = *hchain(m, h);

	while (x != NONE && m->e[x].h != h)
		x = m->e[x].hnext;
	return x;
}

/* ---- the miniature S3-FIFO stores (Waldspurger et al., ATC '17) ----
 * Each mirrors memd/kvstore.c's eviction at one grid size, over the
 * sampled keys only, at a capacity of the size times the sampling rate.
 * Per key and store: links and a state byte, at SI(store, key's entry).
 */

/* Where key x's links and state in store k are: a key's states in all
 * the stores share a cache line or two (a hit touches only those). */
#define SI(k, x) ((size_t)(x)*MEMD_MRC_SIM_N + (k))

static double sim_size(unsigned k)
{
	return __builtin_exp2((double)MEMD_MRC_SIM_LO_SHIFT +
			      (double)k / MEMD_MRC_SIM_PER_DOUBLING);
}

static unsigned sq_of(const struct memd_mrc *m, unsigned k, uint32_t x)
{
	return m->sst[SI(k, x)] & 3u;
}

static unsigned freq_of(const struct memd_mrc *m, unsigned k, uint32_t x)
{
	return m->sst[SI(k, x)] >> 2;
}

static void st_set(struct memd_mrc *m, unsigned k, uint32_t x, unsigned q,
		   unsigned freq)
{
	m->sst[SI(k, x)] = (uint8_t)(q | freq << 2);
}

/* always inlined: sim_evict and sims_ref call them in their inner
 * loops, and the calls were a sixth of the curve's instructions (gcc -O2
 * does not inline them by itself) */
static inline __attribute__((always_inline)) void
sim_unlink(struct memd_mrc *m, unsigned k, uint32_t x)
{
	struct mrc_sim *s = &m->sim[k];
	unsigned q = sq_of(m, k, x);
	uint32_t p = m->sprev[SI(k, x)], n = m->snext[SI(k, x)];

	if (p != NONE)
		m->snext[SI(k, p)] = n;
	else
		s->head[q] = n;
	if (n != NONE)
		m->sprev[SI(k, n)] = p;
	else
		s->tail[q] = p;
	s->count[q]--;
	s->qbytes[q] -= m->e[x].bytes;
	st_set(m, k, x, SQ_NONE, freq_of(m, k, x));
}

static inline __attribute__((always_inline)) void
sim_push(struct memd_mrc *m, unsigned k, uint32_t x, unsigned q, unsigned freq)
{
	struct mrc_sim *s = &m->sim[k];

	m->sprev[SI(k, x)] = NONE;
	m->snext[SI(k, x)] = s->head[q];
	if (s->head[q] != NONE)
		m->sprev[SI(k, s->head[q])] = x;
	s->head[q] = x;
	if (s->tail[q] == NONE)
		s->tail[q] = x;
	s->count[q]++;
	s->qbytes[q] += m->e[x].bytes;
	st_set(m, k, x, q, freq);
}

/* One eviction, as kvstore.c's: from small while it holds at least 10 %
 * of the bytes (its oldest to main when read since, else out and a
 * ghost), else from main (oldest back to main's head with freq - 1, or
 * out). Ghosts: at most as many as resident keys. */
static void sim_evict(struct memd_mrc *m, unsigned k)
{
	struct mrc_sim *s = &m->sim[k];

	for (;;) {
		bool small = s->count[SQ_SMALL] &&
			     (s->count[SQ_MAIN] == 0 ||
			      s->qbytes[SQ_SMALL] * 10 >=
				      s->qbytes[SQ_SMALL] + s->qbytes[SQ_MAIN]);
		uint32_t x = small ? s->tail[SQ_SMALL] : s->tail[SQ_MAIN];
		unsigned f = freq_of(m, k, x);

		sim_unlink(m, k, x);
		if (f >= 1) {
			sim_push(m, k, x, SQ_MAIN, small ? f : f - 1);
			continue;
		}
		s->used -= m->e[x].bytes;
		if (!small)
			return; /* not ghosted */
		sim_push(m, k, x, SQ_GHOST, 0);
		while (s->count[SQ_GHOST] >
		       s->count[SQ_SMALL] + s->count[SQ_MAIN])
			sim_unlink(m, k, s->tail[SQ_GHOST]);
		return;
	}
}

/* Store k is about to evict: when it is the last one simulated, the next
 * one, which has never evicted and so holds exactly what k holds now,
 * becomes simulated, with a copy of k's queues (O(sample_max), once per
 * store). */
static void sim_split(struct memd_mrc *m, unsigned k)
{
	struct mrc_sim *s, *n;
	double cap, hits[2];

	if (k != m->live || k + 1 == MEMD_MRC_SIM_N)
		return;
	s = &m->sim[k];
	n = &m->sim[k + 1];
	cap = n->cap;
	memcpy(hits, n->hits, sizeof(hits));
	*n = *s;
	n->cap = cap;
	memcpy(n->hits, hits, sizeof(hits));
	for (uint32_t x = 0; x < m->sample_max; x++) {
		m->sprev[SI(k + 1, x)] = m->sprev[SI(k, x)];
		m->snext[SI(k + 1, x)] = m->snext[SI(k, x)];
		m->sst[SI(k + 1, x)] = m->sst[SI(k, x)];
	}
	m->live = k + 1;
}

/* A reference to tracked key x (its bytes already set; 0: unknown) in
 * every store: a request hits when the key is resident (its frequency
 * rises, at most 3) and adds w to the hits; a miss, or a put of an
 * absent key, inserts it when its size is known (a ghost into main). */
static void sims_ref(struct memd_mrc *m, uint32_t x, bool counted, double w)
{
	uint64_t bytes = m->e[x].bytes;
	bool hit = false;

	/* m->live may grow in the loop (sim_split) */
	for (unsigned k = 0; k <= m->live; k++) {
		struct mrc_sim *s = &m->sim[k];
		unsigned q = sq_of(m, k, x), f = freq_of(m, k, x);

		hit = false;
		if (q == SQ_SMALL || q == SQ_MAIN) {
			if (counted) {
				hit = true;
				s->hits[m->cur] += w;
				if (f < 3)
					st_set(m, k, x, q, f + 1);
			}
			continue;
		}
		if (!bytes)
			continue;
		/* a key too large for k may fit a larger store: then
		 * those differ from k from now on (split, as for an
		 * eviction) */
		if ((double)(s->used + bytes) > s->cap)
			sim_split(m, k); /* before k changes */
		if ((double)bytes > s->cap)
			continue;
		if (q == SQ_GHOST)
			sim_unlink(m, k, x);
		while ((double)(s->used + bytes) > s->cap)
			sim_evict(m, k);
		sim_push(m, k, x, q == SQ_GHOST ? SQ_MAIN : SQ_SMALL, 0);
		s->used += bytes;
	}
	/* the stores above live hold what live holds: the same outcome */
	if (hit)
		for (unsigned k = m->live + 1; k < MEMD_MRC_SIM_N; k++)
			m->sim[k].hits[m->cur] += w;
}

/* Key x's size changes to bytes: resident copies count the new size. */
static void sims_resize(struct memd_mrc *m, uint32_t x, uint64_t bytes)
{
	for (unsigned k = 0; k <= m->live; k++) {
		struct mrc_sim *s = &m->sim[k];
		unsigned q = sq_of(m, k, x);

		if (q == SQ_NONE)
			continue;
		s->qbytes[q] = s->qbytes[q] - m->e[x].bytes + bytes;
		if (q != SQ_GHOST)
			s->used = s->used - m->e[x].bytes + bytes;
	}
}

/* Key x stops being tracked: out of every store. */
static void sims_forget(struct memd_mrc *m, uint32_t x)
{
	for (unsigned k = 0; k <= m->live; k++) {
		unsigned q = sq_of(m, k, x);

		if (q == SQ_NONE)
			continue;
		if (q != SQ_GHOST)
			m->sim[k].used -= m->e[x].bytes;
		sim_unlink(m, k, x);
		st_set(m, k, x, SQ_NONE, 0);
	}
}

/* The rate changed: each store's capacity is its size times R; evicts
 * down to it. */
static void sims_rescale(struct memd_mrc *m, double r)
{
	for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++)
		m->sim[k].cap = sim_size(k) * r;
	/* m->live may grow in the loop (sim_split) */
	for (unsigned k = 0; k <= m->live; k++) {
		struct mrc_sim *s = &m->sim[k];

		if ((double)s->used > s->cap)
			sim_split(m, k);
		while ((double)s->used > s->cap)
			sim_evict(m, k);
	}
}

static void untrack(struct memd_mrc *m, uint32_t x)
{
	uint32_t *p = hchain(m, m->e[x].h);

	while (*p != x)
		p = &m->e[*p].hnext;
	*p = m->e[x].hnext;
	sims_forget(m, x);
	slot_drop(m, x);
	heap_remove(m, x);
	m->freel[m->nfree++] = x;
}

static uint32_t track(struct memd_mrc *m, uint64_t h, uint64_t bytes)
{
	uint32_t x = m->freel[--m->nfree];
	uint32_t *p = hchain(m, h);

	m->e[x].h = h;
	m->e[x].bytes = bytes;
	m->e[x].hnext = *p;
	*p = x;
	heap_set(m, m->tracked++, x);
	heap_up(m, m->tracked - 1);
	slot_take(m, x);
	return x;
}

/* ---- the curve ---- */

int memd_mrc_create(uint32_t sample_max, uint64_t window_refs,
		    struct memd_mrc **out)
{
	struct memd_mrc *m;
	uint32_t nb = 1;

	*out = NULL;
	if (sample_max < 16 || sample_max > MEMD_MRC_SAMPLE_MAX)
		return -EINVAL;
	while (nb < sample_max)
		nb <<= 1;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->sample_max = sample_max;
	m->nslots = 2 * sample_max;
	m->nbuckets_h = nb;
	m->window_refs = window_refs ? window_refs : 4ull * sample_max;
	m->thr = UINT64_MAX;
	m->e = calloc(sample_max, sizeof(*m->e));
	m->hhead = malloc(nb * sizeof(*m->hhead));
	m->heap = malloc(sample_max * sizeof(*m->heap));
	m->freel = malloc(sample_max * sizeof(*m->freel));
	m->slot_entry = malloc(m->nslots * sizeof(*m->slot_entry));
	m->fen = calloc(m->nslots + 1, sizeof(*m->fen));
	m->sprev =
		malloc((size_t)MEMD_MRC_SIM_N * sample_max * sizeof(*m->sprev));
	m->snext =
		malloc((size_t)MEMD_MRC_SIM_N * sample_max * sizeof(*m->snext));
	m->sst = calloc((size_t)MEMD_MRC_SIM_N * sample_max, sizeof(*m->sst));
	if (!m->e || !m->hhead || !m->heap || !m->freel || !m->slot_entry ||
	    !m->fen || !m->sprev || !m->snext || !m->sst) {
		memd_mrc_destroy(m);
		return -ENOMEM;
	}
	memset(m->hhead, 0xff, nb * sizeof(*m->hhead));
	memset(m->slot_entry, 0xff, m->nslots * sizeof(*m->slot_entry));
	for (uint32_t i = 0; i < sample_max; i++)
		m->freel[i] = sample_max - 1 - i;
	m->nfree = sample_max;
	for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++) {
		memset(m->sim[k].head, 0xff, sizeof(m->sim[k].head));
		memset(m->sim[k].tail, 0xff, sizeof(m->sim[k].tail));
		m->sim[k].cap = sim_size(k);
	}
	*out = m;
	return 0;
}

void memd_mrc_destroy(struct memd_mrc *m)
{
	if (!m)
		return;
	free(m->e);
	free(m->hhead);
	free(m->heap);
	free(m->freel);
	free(m->slot_entry);
	free(m->fen);
	free(m->sprev);
	free(m->snext);
	free(m->sst);
	free(m);
}

static double rate_of(const struct memd_mrc *m)
{
	/* (thr + 1) / 2^64 */
	return ((double)m->thr + 1.0) / 18446744073709551616.0;
}

static void record(struct memd_mrc *m, bool cold, uint64_t d, double w)
{
	int c = m->cur;

	if (cold)
		m->cold[c] += w;
	else
		m->hist[c][bucket_of(d)] += w;
	if (++m->samples[c] >= m->window_refs) {
		c = m->cur = !c;
		m->samples[c] = 0;
		m->refs[c] = 0;
		m->cold[c] = 0;
		memset(m->hist[c], 0, sizeof(m->hist[c]));
		for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++)
			m->sim[k].hits[c] = 0;
	}
}

bool memd_mrc_access(struct memd_mrc *m, uint64_t h, uint64_t bytes,
		     bool counted)
{
	double r;
	uint32_t x;

	if (counted)
		m->refs[m->cur]++;
	if (h > m->thr)
		return false;
	r = rate_of(m);
	x = find(m, h);
	if (x != NONE) {
		if (counted) {
			uint64_t own = bytes ? bytes : m->e[x].bytes;
			uint64_t above =
				m->total_bytes - fen_prefix(m, m->e[x].slot);
			double d = (double)above / r + (double)own;

			/* the stores count their hits in the window the
			 * request goes to: before record() rotates */
			sims_ref(m, x, true, 1.0 / r);
			record(m, false,
			       d > 0x1p62 ? (1ull << 62) : (uint64_t)d,
			       1.0 / r);
		}
		slot_drop(m, x);
		if (bytes && bytes != m->e[x].bytes) {
			sims_resize(m, x, bytes);
			m->e[x].bytes = bytes;
			sims_rescale(m, r); /* a grown key: evicts to fit */
		}
		slot_take(m, x);
		if (!counted)
			sims_ref(m, x, false, 0);
		return true;
	}
	if (counted)
		record(m, true, 0, 1.0 / r);
	if (m->tracked == m->sample_max) {
		uint32_t top = m->heap[0];

		if (m->e[top].h < h) {
			m->thr = h - 1; /* the newcomer is the largest */
			sims_rescale(m, rate_of(m));
			return false;
		}
		m->thr = m->e[top].h - 1;
		untrack(m, top);
		sims_rescale(m, rate_of(m));
	}
	/* a first reference misses in every store: in with its size */
	sims_ref(m, track(m, h, bytes), false, 0);
	return true;
}

void memd_mrc_forget(struct memd_mrc *m, uint64_t h)
{
	uint32_t x;

	if (h > m->thr || (x = find(m, h)) == NONE)
		return;
	untrack(m, x);
}

double memd_mrc_lru_hit_ratio(const struct memd_mrc *m, uint64_t cache_bytes)
{
	double total = m->cold[0] + m->cold[1], hits = 0,
	       c = (double)cache_bytes;

	for (uint32_t i = 0; i < MEMD_MRC_NBUCKETS; i++) {
		double w = m->hist[0][i] + m->hist[1][i], lo, hi;

		if (w == 0)
			continue;
		total += w;
		bucket_edges(i, &lo, &hi);
		if (hi <= c)
			hits += w;
		else if (lo < c)
			hits += w * (c - lo) / (hi - lo);
	}
	return total > 0 ? hits / total : 0;
}

void memd_mrc_get_info(const struct memd_mrc *m, struct memd_mrc_info *i)
{
	double w = m->cold[0] + m->cold[1];

	for (uint32_t b = 0; b < MEMD_MRC_NBUCKETS; b++)
		w += m->hist[0][b] + m->hist[1][b];
	i->rate = rate_of(m);
	i->sample_max = m->sample_max;
	i->tracked = m->tracked;
	i->window_samples = m->samples[0] + m->samples[1];
	i->window_refs = m->refs[0] + m->refs[1];
	i->window_requests = w;
	i->bytes = memd_mrc_bytes(m);
}

size_t memd_mrc_bytes(const struct memd_mrc *m)
{
	return sizeof(*m) +
	       m->sample_max *
		       (sizeof(*m->e) + sizeof(*m->heap) + sizeof(*m->freel)) +
	       m->nbuckets_h * sizeof(*m->hhead) +
	       m->nslots * sizeof(*m->slot_entry) +
	       (m->nslots + 1) * sizeof(*m->fen) +
	       (size_t)MEMD_MRC_SIM_N * m->sample_max *
		       (sizeof(*m->sprev) + sizeof(*m->snext) +
			sizeof(*m->sst));
}

/* The grid of sizes the LRU histogram has recorded: the lower edge of
 * the smallest distance (*lo) and the upper edge of the largest finite
 * one (*hi). False when nothing finite is recorded. */
static bool lru_range(const struct memd_mrc *m, double *lo, double *hi)
{
	uint32_t first = NONE, last = NONE;
	double a, b;

	for (uint32_t i = 0; i < MEMD_MRC_NBUCKETS; i++)
		if (m->hist[0][i] + m->hist[1][i] > 0) {
			if (first == NONE)
				first = i;
			last = i;
		}
	if (first == NONE)
		return false;
	bucket_edges(first, &a, &b);
	*lo = a > 0 ? a : (double)MEMD_MRC_MIN_BYTES / 2;
	bucket_edges(last, &a, hi);
	return true;
}

static double window_weight(const struct memd_mrc *m)
{
	double w = m->cold[0] + m->cold[1];

	for (uint32_t b = 0; b < MEMD_MRC_NBUCKETS; b++)
		w += m->hist[0][b] + m->hist[1][b];
	return w;
}

/* Bytes mini cache k hit over the window (both halves). */
static double sim_hits(const struct memd_mrc *m, unsigned k)
{
	return m->sim[k].hits[0] + m->sim[k].hits[1];
}

double memd_mrc_sim_hit_ratio(const struct memd_mrc *m, unsigned k)
{
	double w = window_weight(m);

	if (k >= MEMD_MRC_SIM_N || w <= 0)
		return 0;
	return sim_hits(m, k) / w;
}

uint64_t memd_mrc_sim_size(unsigned k)
{
	return (uint64_t)sim_size(k);
}

double memd_mrc_hit_ratio(const struct memd_mrc *m, uint64_t cache_bytes)
{
	double w = window_weight(m), c = (double)cache_bytes, kf, fr, a, b;
	unsigned k;

	if (w <= 0)
		return 0;
	if (c <= sim_size(0))
		return sim_hits(m, 0) / w * c / sim_size(0);
	if (c >= sim_size(MEMD_MRC_SIM_N - 1))
		return sim_hits(m, MEMD_MRC_SIM_N - 1) / w;
	kf = (__builtin_log2(c) - MEMD_MRC_SIM_LO_SHIFT) *
	     MEMD_MRC_SIM_PER_DOUBLING;
	k = (unsigned)kf;
	if (k >= MEMD_MRC_SIM_N - 1)
		k = MEMD_MRC_SIM_N - 2;
	fr = kf - k;
	a = sim_hits(m, k) / w;
	b = sim_hits(m, k + 1) / w;
	return a + (b - a) * fr;
}

/* Sizes from x on, per_doubling of them to a doubling, up to the first
 * at or past end, each with fn's hit ratio; at most max. */
static size_t points_from(const struct memd_mrc *m, double x, double end,
			  unsigned per_doubling,
			  double (*fn)(const struct memd_mrc *, uint64_t),
			  uint64_t *bytes, double *hit, size_t max)
{
	double step = __builtin_exp2((double)1 / per_doubling);
	size_t n = 0;

	while (n < max) {
		bytes[n] = (uint64_t)(x + 0.5);
		hit[n] = fn(m, bytes[n]);
		n++;
		if (x >= end)
			break;
		x *= step;
	}
	return n;
}

size_t memd_mrc_points(const struct memd_mrc *m, unsigned per_doubling,
		       uint64_t *bytes, double *hit, size_t max)
{
	double x, hi, end;

	if (per_doubling < 1 || per_doubling > 64 || !lru_range(m, &x, &hi))
		return 0;
	/* S3-FIFO is not a stack algorithm: a larger store may still gain
	 * past the largest LRU distance; the points go 4 x further, to the
	 * end of the grid at most */
	end = 4 * hi;
	if (end > sim_size(MEMD_MRC_SIM_N - 1))
		end = sim_size(MEMD_MRC_SIM_N - 1);
	if (x > end)
		x = end;
	return points_from(m, x, end, per_doubling, memd_mrc_hit_ratio, bytes,
			   hit, max);
}

size_t memd_mrc_lru_points(const struct memd_mrc *m, unsigned per_doubling,
			   uint64_t *bytes, double *hit, size_t max)
{
	double x, hi;

	if (per_doubling < 1 || per_doubling > 64 || !lru_range(m, &x, &hi))
		return 0;
	return points_from(m, x, hi, per_doubling, memd_mrc_lru_hit_ratio,
			   bytes, hit, max);
}
