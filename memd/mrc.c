// SPDX-License-Identifier: MIT
/*
 * memd/mrc.c - fixed-size, byte-weighted SHARDS over a sliding window, and
 * miniature S3-FIFO stores over its sample: a tenant's miss-ratio curve
 * for memd's eviction (and LRU's, as a reference) from a bounded sample
 * of its keys (memd/mrc.h says what it computes, docs/capacity.md why and
 * how well).
 *
 * Owns, per curve: up to sample_max tracked keys (an entry each, in a
 * chained hash table keyed by the 64-bit spatial hash, in a max-heap by
 * hash for the fixed-size threshold, at one timestamp slot each), a
 * Fenwick tree of bytes over 2 * sample_max timestamp slots, two
 * histograms, and MEMD_MRC_SIM_N miniature stores, with per key and
 * store two queue links (store-major: sim_link) and a state byte
 * (key-major: SI). No thread of its own; its owner serializes the calls.
 *
 * Invariants: every tracked key has h <= thr (the threshold; sampled iff
 * h <= thr) and occupies exactly one slot, the slot of its latest
 * reference; fen sums, over slots, the bytes of the key in each;
 * total_bytes is their sum. rate is rate_of(m). Only tracked keys are in
 * the stores, and only with their size known (bytes > 0); each store's
 * used is the bytes of its small and main queues, at most its capacity
 * after every call. Stores live + 1 .. MEMD_MRC_SIM_N - 1 have never
 * evicted: a store that never evicted holds every key inserted and not
 * forgotten, the same keys in the same order as any larger one that never
 * evicted (the same references, the same decisions), so they are not
 * simulated: they are store live, until it first has to evict.
 */
#include "memd/mrc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

struct mrc_entry {
	uint64_t h;
	uint64_t bytes;
	uint32_t slot, heap, hnext;
	uint32_t sti; /* SI(0, its index): its states, next to its bytes */
};

/* a key's queue in a miniature store */
enum { SQ_NONE, SQ_SMALL, SQ_MAIN, SQ_GHOST };

/* a key's links in a store's queue */
struct mrc_link {
	uint32_t prev, next; /* circular: the head's prev is the oldest */
};

/* A store; 64 bytes (an index is a shift). Queues are indexed by SQ_* - 1. */
struct mrc_sim {
	uint64_t capb;	    /* evicts while used > capb: cap_bytes(size x R) */
	uint64_t qbytes[2]; /* small's and main's: used is their sum */
	uint32_t head[3];   /* the newest; circular (q_push) */
	uint32_t nsmall, nres, nghost; /* keys in small, small + main, ghost */
	double hits[2];		       /* weight of requests hit, per window */
};
_Static_assert(sizeof(struct mrc_sim) == 64, "a store is 64 bytes");

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
	 * store: queue links (sim_link) and state (SI) */
	struct mrc_sim sim[MEMD_MRC_SIM_N];
	/* stores 0 .. live are simulated; every store above live has never
	 * evicted, holds exactly what store live holds and is not kept:
	 * its links, queues and bytes are copied from live's when live
	 * first has to evict (sim_split). They all hit alike, the same
	 * additions in the same order: their hits are above_hits, copied
	 * to the one that becomes simulated */
	unsigned live;
	double above_hits[2];
	double rate; /* rate_of(m), kept: the R the stores' capb are for */
	double sizes[MEMD_MRC_SIM_N]; /* the stores' sizes, sim_size(k) */
	struct mrc_link *slink;
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
	for (uint32_t s = 0; s < n; s++)
		m->fen[s + 1] = m->e[m->slot_entry[s]].bytes;
	/* every node, the empty slots' too: a node past n sums the ones
	 * below it, which may hold bytes */
	for (uint32_t i = 1; i <= m->nslots; i++) {
		uint32_t p = i + (i & -i);

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

/* slot_drop and slot_take with the same bytes, in one walk: the nodes on
 * both update paths (a common tail) would get -bytes and +bytes, so they
 * are left alone; total_bytes does not change. The same sums. */
static void slot_move(struct memd_mrc *m, uint32_t x)
{
	uint32_t i, j, n = m->nslots;
	uint64_t b = m->e[x].bytes;

	if (m->next_slot == m->nslots) {
		slot_drop(m, x);
		slot_take(m, x); /* compacts */
		return;
	}
	i = m->e[x].slot + 1;
	m->slot_entry[m->e[x].slot] = NONE;
	m->e[x].slot = m->next_slot++;
	m->slot_entry[m->e[x].slot] = x;
	j = m->e[x].slot + 1;
	while (i != j) {
		if (i < j) {
			if (i > n)
				break; /* and j > n */
			m->fen[i] -= b;
			i += i & -i;
		} else {
			if (j > n)
				break;
			m->fen[j] += b;
			j += j & -j;
		}
	}
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
 * Each mirrors memd/kvstore_evict.c's eviction at one grid size, over the
 * sampled keys only, at a capacity of the size times the sampling rate.
 * Per key and store: two queue links and a state byte.
 *
 * This is the curve's hot path when every reference is sampled (a
 * tenant with fewer distinct keys than samples: each reference is an
 * insert and an eviction in most of the stores), so it is written for
 * instructions, computing exactly what a plain S3-FIFO does (test_mrc
 * holds it to tests/mrc_ref.c, an exact S3-FIFO written independently):
 *
 * - The queues are circular, head the newest, its prev the oldest: main's
 *   second chance (oldest back to the head) is one step of the head, not
 *   an unlink and a push, and the oldest ghost can be replaced in place
 *   by a newer one when a push would trim it at once.
 * - Links are store-major (a store's links of all keys together, indexed
 *   by entry: one indexed load; the keys an eviction touches are random
 *   anyway); state bytes are key-major (a key's states in all the stores
 *   share a cache line or two, and a hit touches only those).
 * - Capacities are byte counts (capb), not doubles: no conversion per
 *   test. A store's used bytes are its small and main queues' (not kept
 *   apart); counts are kept only as the decisions need them.
 */

/* Where key x's state in store k is. */
#define SI(k, x) ((size_t)(x)*MEMD_MRC_SIM_N + (k))

/* Store k's queue links, by key entry. */
static inline struct mrc_link *sim_link(const struct memd_mrc *m, unsigned k)
{
	return m->slink + (size_t)k * m->sample_max;
}

#define QI(q) ((q)-1u) /* a queue's index in head and qbytes */

static double sim_size(unsigned k)
{
	return __builtin_exp2((double)MEMD_MRC_SIM_LO_SHIFT +
			      (double)k / MEMD_MRC_SIM_PER_DOUBLING);
}

/* The largest byte count u with (double)u <= cap: (double)u > cap, the
 * test the stores evicted by, is u > cap_bytes(cap), exactly. */
static uint64_t cap_bytes(double cap)
{
	uint64_t u;

	if (cap >= 0x1p64)
		return UINT64_MAX;
	u = (uint64_t)cap;
	if (cap < 0x1p53)
		return u; /* every integer up to 2^53 is a double */
	while (u < UINT64_MAX && (double)(u + 1) <= cap)
		u++; /* rounds down to cap: within half a unit of it */
	return u;
}

static inline uint64_t sim_used(const struct mrc_sim *s)
{
	return s->qbytes[QI(SQ_SMALL)] + s->qbytes[QI(SQ_MAIN)];
}

/* The queue primitives take a queue's head by value (the caller's locals
 * stay in registers: a store to a state byte, a char type, would
 * otherwise make the compiler reload anything taken by address) and
 * touch neither counts, bytes nor states. */

/* Puts x at the head of the queue whose head is h; x is the new head. */
static inline __attribute__((always_inline)) void
q_push(uint32_t h, struct mrc_link *l, uint32_t x)
{
	if (h == NONE) {
		l[x].prev = x;
		l[x].next = x;
	} else {
		uint32_t t = l[h].prev;

		l[x].next = h;
		l[x].prev = t;
		l[h].prev = x;
		l[t].next = x;
	}
}

/* Unlinks and returns the oldest key of the queue whose head is h (not
 * empty); when that is h, the queue is empty now. */
static inline __attribute__((always_inline)) uint32_t q_pop(uint32_t h,
							    struct mrc_link *l)
{
	uint32_t x = l[h].prev;

	if (x != h) {
		uint32_t p = l[x].prev;

		l[p].next = h;
		l[h].prev = p;
	}
	return x;
}

/* Unlinks x from the queue whose head is h; returns the new head. */
static inline __attribute__((always_inline)) uint32_t
q_unlink(uint32_t h, struct mrc_link *l, uint32_t x)
{
	uint32_t p = l[x].prev, n = l[x].next;

	if (n == x)
		return NONE;
	l[p].next = n;
	l[n].prev = p;
	return h == x ? n : h;
}

/*
 * Store k (simulated) evicts until bytes more fit (used + bytes <= capb),
 * then, when x is not NONE, takes key x of those bytes, from queue q (none,
 * or a ghost: into main). Evictions as kvstore_evict.c's: from small while it
 * holds at least 10 % of the bytes (its oldest to main when read since,
 * else out and a ghost), else from main (oldest back to main's head with
 * freq - 1, or out). Ghosts: at most as many as resident keys, the
 * oldest out first. full: used + bytes > capb (the caller has tested).
 */
static inline __attribute__((always_inline)) void
sim_fit(struct memd_mrc *m, unsigned k, uint64_t bytes, uint32_t x, unsigned q,
	bool full)
{
	struct mrc_sim *s = &m->sim[k];
	struct mrc_link *l = sim_link(m, k);
	uint8_t *st = m->sst + k;
	const struct mrc_entry *e = m->e;

	if (q == SQ_GHOST) {
		s->head[QI(SQ_GHOST)] = q_unlink(s->head[QI(SQ_GHOST)], l, x);
		s->nghost--;
	}
	for (; full; full = sim_used(s) + bytes > s->capb) {
		uint32_t y, z, h;
		uint8_t *sy;
		uint64_t b;
		unsigned f;

		if (s->nsmall &&
		    (s->nsmall == s->nres ||
		     s->qbytes[QI(SQ_SMALL)] * 10 >= sim_used(s))) {
			h = s->head[QI(SQ_SMALL)];
			y = q_pop(h, l);
			if (y == h)
				s->head[QI(SQ_SMALL)] = NONE;
			s->nsmall--;
			b = e[y].bytes;
			sy = st + e[y].sti;
			s->qbytes[QI(SQ_SMALL)] -= b;
			f = *sy >> 2;
			if (f >= 1) {
				q_push(s->head[QI(SQ_MAIN)], l, y);
				s->head[QI(SQ_MAIN)] = y;
				s->qbytes[QI(SQ_MAIN)] += b;
				*sy = (uint8_t)(SQ_MAIN | f << 2);
				continue; /* not out yet: the next */
			}
			/* out, a ghost; then the ghosts are trimmed to the
			 * resident keys, oldest first */
			s->nres--;
			h = s->head[QI(SQ_GHOST)];
			if (s->nghost < s->nres) {
				q_push(h, l, y);
				s->head[QI(SQ_GHOST)] = y;
				s->nghost++;
				*sy = SQ_GHOST;
				continue;
			}
			if (h == NONE) {
				*sy = SQ_NONE; /* in and out */
				continue;
			}
			/* pushing y would trim the oldest, z: z goes,
			 * y becomes the head (the count stays) */
			z = q_pop(h, l);
			st[SI(0, z)] = SQ_NONE;
			*sy = SQ_GHOST;
			q_push(z == h ? NONE : h, l, y);
			s->head[QI(SQ_GHOST)] = y;
			while (s->nghost > s->nres) {
				h = s->head[QI(SQ_GHOST)];
				z = q_pop(h, l);
				if (z == h)
					s->head[QI(SQ_GHOST)] = NONE;
				st[SI(0, z)] = SQ_NONE;
				s->nghost--;
			}
			continue;
		}
		/* from main: the queues' bytes do not change until one
		 * leaves, so small stays out of turn */
		h = s->head[QI(SQ_MAIN)];
		for (;;) {
			y = l[h].prev;
			f = st[SI(0, y)] >> 2;
			if (!f)
				break;
			h = y; /* oldest to newest: one step */
			st[SI(0, y)] = (uint8_t)(SQ_MAIN | (f - 1) << 2);
		}
		s->head[QI(SQ_MAIN)] = q_pop(h, l) == h ? NONE : h;
		s->nres--;
		s->qbytes[QI(SQ_MAIN)] -= e[y].bytes; /* not ghosted */
		st[SI(0, y)] = SQ_NONE;
	}
	if (x == NONE)
		return;
	s->nres++;
	if (q == SQ_GHOST) {
		q_push(s->head[QI(SQ_MAIN)], l, x);
		s->head[QI(SQ_MAIN)] = x;
		s->qbytes[QI(SQ_MAIN)] += bytes;
		st[SI(0, x)] = SQ_MAIN;
	} else {
		q_push(s->head[QI(SQ_SMALL)], l, x);
		s->head[QI(SQ_SMALL)] = x;
		s->nsmall++;
		s->qbytes[QI(SQ_SMALL)] += bytes;
		st[SI(0, x)] = SQ_SMALL;
	}
}

/* Store k evicts down to its capacity (not inlined: rare). */
static __attribute__((noinline)) void sim_shrink(struct memd_mrc *m, unsigned k)
{
	sim_fit(m, k, 0, NONE, SQ_NONE, sim_used(&m->sim[k]) > m->sim[k].capb);
}

/* Store k is about to evict: when it is the last one simulated, the next
 * one, which has never evicted and so holds exactly what k holds now,
 * becomes simulated, with a copy of k's queues (O(sample_max), once per
 * store). */
static void sim_split(struct memd_mrc *m, unsigned k)
{
	struct mrc_sim *s, *n;
	uint64_t capb;

	if (k != m->live || k + 1 == MEMD_MRC_SIM_N)
		return;
	s = &m->sim[k];
	n = &m->sim[k + 1];
	capb = n->capb;
	*n = *s;
	n->capb = capb;
	memcpy(n->hits, m->above_hits, sizeof(n->hits));
	memcpy(sim_link(m, k + 1), sim_link(m, k),
	       m->sample_max * sizeof(*m->slink));
	/* an entry not tracked is in no store (sims_forget) */
	for (uint32_t i = 0; i < m->tracked; i++)
		m->sst[SI(k + 1, m->heap[i])] = m->sst[SI(k, m->heap[i])];
	m->live = k + 1;
}

/* Key x, not resident in simulated store k (queue q: none or a ghost),
 * of bytes (known): in when it fits; a key too large for k may fit a
 * larger store: then those differ from k from now on (split, as for an
 * eviction). */
static inline __attribute__((always_inline)) void
sim_miss(struct memd_mrc *m, unsigned k, uint32_t x, unsigned q, uint64_t bytes)
{
	struct mrc_sim *s = &m->sim[k];
	bool full = sim_used(s) + bytes > s->capb;

	if (full && k == m->live)
		sim_split(m, k); /* before k changes */
	if (x == NONE)
		__builtin_unreachable(); /* a tracked key: sim_fit puts it in */
	if (bytes <= s->capb)
		sim_fit(m, k, bytes, x, q, full);
}

#define BYTE_ONES 0x0101010101010101ull

/*
 * A reference to tracked key x (its bytes already set; 0: unknown) in
 * every store: a request hits when the key is resident (its frequency
 * rises, at most 3) and adds w to the hits; a miss, or a put of an
 * absent key, inserts it when its size is known (a ghost into main).
 *
 * x's states in stores 0 .. live are read 8 at a time (the array has 8
 * bytes of slack at its end): bit 0 of each byte of res is "resident"
 * (queue small or main: the two bits of the queue differ), and the
 * frequencies rise in the word, which is written back before any insert
 * (an insert changes other keys' states, which the word may overlap: the
 * next entry's first ones). Stores are independent, so only the split
 * orders them: a store split off in the loop is done after it.
 */
static void sims_ref(struct memd_mrc *m, uint32_t x, bool counted, double w)
{
	uint64_t bytes = m->e[x].bytes;
	uint8_t *st = &m->sst[SI(0, x)];
	unsigned live = m->live, cur = (unsigned)m->cur;
	unsigned ql = st[live] & 3u;
	bool hit = counted && (ql == SQ_SMALL || ql == SQ_MAIN);

	for (unsigned k0 = 0; k0 <= live; k0 += 8) {
		uint64_t v, res, in, mask = ~0ull;

		if (live - k0 < 7)
			mask = (1ull << 8 * (live - k0 + 1)) - 1;
		memcpy(&v, st + k0, sizeof(v));
		res = (v ^ v >> 1) & BYTE_ONES & mask;
		in = bytes ? ~res & BYTE_ONES & mask : 0;
		if (counted && res) {
			uint64_t up = res & ~(v >> 2 & v >> 3);

			memcpy(st + k0, &(uint64_t){ v + (up << 2) },
			       sizeof(v));
			for (uint64_t r = res; r; r &= r - 1)
				m->sim[k0 + __builtin_ctzll(r) / 8].hits[cur] +=
					w;
		}
		for (; in; in &= in - 1) {
			unsigned b = (unsigned)__builtin_ctzll(in);

			sim_miss(m, k0 + b / 8, x, (unsigned)(v >> b) & 3u,
				 bytes);
		}
	}
	if (m->live != live) {
		/* split off in the loop: x's state is k's before x went
		 * in, so absent, and the last is not a hit */
		hit = false;
		for (unsigned k = live + 1; k <= m->live; k++)
			sim_miss(m, k, x, st[k] & 3u, bytes);
		live = m->live;
	}
	/* the stores above live hold what live holds: the same outcome */
	if (hit)
		m->above_hits[cur] += w;
}

/* Key x's size changes to bytes: resident copies count the new size. */
static void sims_resize(struct memd_mrc *m, uint32_t x, uint64_t bytes)
{
	for (unsigned k = 0; k <= m->live; k++) {
		struct mrc_sim *s = &m->sim[k];
		unsigned q = m->sst[SI(k, x)] & 3u;

		if (q == SQ_SMALL || q == SQ_MAIN)
			s->qbytes[QI(q)] =
				s->qbytes[QI(q)] - m->e[x].bytes + bytes;
	}
}

/* Key x stops being tracked: out of every store. */
static void sims_forget(struct memd_mrc *m, uint32_t x)
{
	for (unsigned k = 0; k <= m->live; k++) {
		struct mrc_sim *s = &m->sim[k];
		unsigned q = m->sst[SI(k, x)] & 3u;

		if (q == SQ_NONE)
			continue;
		if (q == SQ_GHOST) {
			s->nghost--;
		} else {
			s->qbytes[QI(q)] -= m->e[x].bytes;
			s->nres--;
			s->nsmall -= q == SQ_SMALL;
		}
		s->head[QI(q)] = q_unlink(s->head[QI(q)], sim_link(m, k), x);
		m->sst[SI(k, x)] = SQ_NONE;
	}
}

/* The rate changed (or a key grew): each store's capacity is its size
 * times R; evicts down to it. */
static void sims_rescale(struct memd_mrc *m, double r)
{
	if (r != m->rate) {
		for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++)
			m->sim[k].capb = cap_bytes(m->sizes[k] * r);
		m->rate = r;
	}
	/* m->live may grow in the loop (sim_split) */
	for (unsigned k = 0; k <= m->live; k++) {
		if (sim_used(&m->sim[k]) <= m->sim[k].capb)
			continue;
		sim_split(m, k);
		sim_shrink(m, k);
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
	m->slink =
		malloc((size_t)MEMD_MRC_SIM_N * sample_max * sizeof(*m->slink));
	/* 8 bytes of slack: sims_ref reads a key's states 8 at a time */
	m->sst = calloc((size_t)MEMD_MRC_SIM_N * sample_max + 8,
			sizeof(*m->sst));
	if (!m->e || !m->hhead || !m->heap || !m->freel || !m->slot_entry ||
	    !m->fen || !m->slink || !m->sst) {
		memd_mrc_destroy(m);
		return -ENOMEM;
	}
	memset(m->hhead, 0xff, nb * sizeof(*m->hhead));
	memset(m->slot_entry, 0xff, m->nslots * sizeof(*m->slot_entry));
	for (uint32_t i = 0; i < sample_max; i++)
		m->freel[i] = sample_max - 1 - i;
	for (uint32_t i = 0; i < sample_max; i++)
		m->e[i].sti = (uint32_t)SI(0, i);
	m->nfree = sample_max;
	for (unsigned k = 0; k < MEMD_MRC_SIM_N; k++) {
		memset(m->sim[k].head, 0xff, sizeof(m->sim[k].head));
		m->sizes[k] = sim_size(k);
		m->sim[k].capb = cap_bytes(m->sizes[k]);
	}
	m->rate = 1; /* rate_of(m) while thr is UINT64_MAX */
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
	free(m->slink);
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
		m->above_hits[c] = 0;
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
	r = m->rate; /* rate_of(m): sims_rescale follows every change */
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
		if (bytes && bytes != m->e[x].bytes) {
			/* a key of unknown size (0) was put in no store:
			 * nothing to resize, nothing grew */
			bool in = m->e[x].bytes != 0;

			slot_drop(m, x);
			if (in)
				sims_resize(m, x, bytes);
			m->e[x].bytes = bytes;
			if (in)
				sims_rescale(m, r); /* grown: evicts to fit */
			slot_take(m, x);
		} else {
			slot_move(m, x);
		}
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
		       (sizeof(*m->slink) + sizeof(*m->sst));
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
	const double *h = k > m->live ? m->above_hits : m->sim[k].hits;

	return h[0] + h[1];
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
