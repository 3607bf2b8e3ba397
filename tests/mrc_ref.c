// SPDX-License-Identifier: MIT
/*
 * tests/mrc_ref.c - the exact references test_mrc checks memd/mrc.c
 * against (tests/mrc_ref.h). Written from the definitions, plainly and
 * slowly, sharing no code with memd/mrc.c: a bug there shows as a
 * difference here.
 *
 * S3-FIFO (Yang et al., SOSP '23), byte-weighted, as memd/kvstore_evict.c
 * evicts and memd/mrc.h defines its miniature stores: a small FIFO, a
 * main FIFO and a ghost FIFO of keys only. A request to a resident key
 * hits and raises its frequency (at most 3). A key not resident goes in
 * on a request or a put when its size is known (a ghost into main, else
 * into small, frequency 0; a key larger than the cache stays out), after
 * evicting until it fits. To evict: from small when main is empty or
 * small holds at least 10 % of the resident bytes (its oldest key moves
 * to main's head, keeping its frequency, when it was read there; else it
 * leaves and becomes the newest ghost, and the oldest ghosts leave while
 * there are more ghosts than resident keys), else from main (its oldest
 * key goes back to main's head with its frequency less 1 while that is
 * not 0; else it leaves, not ghosted). A size given for a key is its size
 * from then on (after the request's own outcome); a resident key that
 * grew makes the cache evict down to its capacity. A forgotten key is
 * out of every queue and its next reference is a first one; a first
 * reference misses and puts the key in when its size is given.
 *
 * LRU: a request's distance is the bytes of the distinct keys referenced
 * since its key's previous reference (at their sizes now) plus its own;
 * a cache of C bytes hits it iff the distance is <= C.
 */
#include "tests/mrc_ref.h"

#include <stdio.h>
#include <stdlib.h>

#define NIL SIZE_MAX

static void oom(void)
{
	fprintf(stderr, "mrc_ref: out of memory\n");
	abort();
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p)
		oom();
	return p;
}

void ref_trace_add(struct ref_trace *t, int op, uint64_t key, uint64_t bytes)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 1 << 16;
		t->c = xrealloc(t->c, t->cap * sizeof(*t->c));
	}
	t->c[t->n].key = key;
	t->c[t->n].bytes = bytes;
	t->c[t->n].op = op;
	t->n++;
}

void ref_trace_free(struct ref_trace *t)
{
	free(t->c);
	t->c = NULL;
	t->n = t->cap = 0;
}

/* ---- keys: a linear-probing map from key to a record index ---- */

enum { Q_NONE, Q_SMALL, Q_MAIN, Q_GHOST };

struct rec {
	uint64_t key, bytes;
	bool known; /* referenced and not forgotten since */
	int q, freq;
	size_t prev, next; /* in queue q, or in the LRU stack */
};

struct keys {
	struct rec *r;
	size_t n, cap;
	size_t *slot; /* record index + 1; 0: empty */
	size_t nslot; /* a power of 2, at least twice n */
};

static uint64_t mix(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return k;
}

static size_t key_find(struct keys *k, uint64_t key)
{
	size_t i;

	if (2 * (k->n + 1) > k->nslot) {
		size_t *old = k->slot, nold = k->nslot;

		k->nslot = k->nslot ? 2 * k->nslot : 1024;
		k->slot = calloc(k->nslot, sizeof(*k->slot));
		if (!k->slot)
			oom();
		for (size_t j = 0; j < nold; j++) {
			if (!old[j])
				continue;
			i = mix(k->r[old[j] - 1].key) & (k->nslot - 1);
			while (k->slot[i])
				i = (i + 1) & (k->nslot - 1);
			k->slot[i] = old[j];
		}
		free(old);
	}
	i = mix(key) & (k->nslot - 1);
	for (; k->slot[i]; i = (i + 1) & (k->nslot - 1))
		if (k->r[k->slot[i] - 1].key == key)
			return k->slot[i] - 1;
	if (k->n == k->cap) {
		k->cap = k->cap ? 2 * k->cap : 1024;
		k->r = xrealloc(k->r, k->cap * sizeof(*k->r));
	}
	k->r[k->n] = (struct rec){ .key = key, .prev = NIL, .next = NIL };
	k->slot[i] = ++k->n;
	return k->n - 1;
}

static void keys_free(struct keys *k)
{
	free(k->r);
	free(k->slot);
}

/* ---- a FIFO of records: head newest, tail oldest ---- */

struct fifo {
	size_t head, tail, count;
	uint64_t bytes;
};

static void fifo_push(struct fifo *f, struct rec *r, size_t x)
{
	r[x].prev = NIL;
	r[x].next = f->head;
	if (f->head != NIL)
		r[f->head].prev = x;
	f->head = x;
	if (f->tail == NIL)
		f->tail = x;
	f->count++;
	f->bytes += r[x].bytes;
}

static void fifo_unlink(struct fifo *f, struct rec *r, size_t x)
{
	if (r[x].prev != NIL)
		r[r[x].prev].next = r[x].next;
	else
		f->head = r[x].next;
	if (r[x].next != NIL)
		r[r[x].next].prev = r[x].prev;
	else
		f->tail = r[x].prev;
	f->count--;
	f->bytes -= r[x].bytes;
}

/* ---- S3-FIFO ---- */

struct s3 {
	uint64_t cap;
	struct keys k;
	struct fifo q[4]; /* by Q_*; q[Q_NONE] unused */
};

static uint64_t s3_used(const struct s3 *c)
{
	return c->q[Q_SMALL].bytes + c->q[Q_MAIN].bytes;
}

static bool s3_resident(const struct rec *x)
{
	return x->q == Q_SMALL || x->q == Q_MAIN;
}

static void s3_move(struct s3 *c, size_t x, int q)
{
	struct rec *r = c->k.r;

	if (r[x].q != Q_NONE)
		fifo_unlink(&c->q[r[x].q], r, x);
	r[x].q = q;
	if (q != Q_NONE)
		fifo_push(&c->q[q], r, x);
}

/* One step of eviction: one key moves or leaves. */
static void s3_evict_step(struct s3 *c)
{
	struct fifo *s = &c->q[Q_SMALL], *m = &c->q[Q_MAIN];
	struct rec *r = c->k.r;
	size_t y;

	if (s->count && (!m->count || s->bytes * 10 >= s->bytes + m->bytes)) {
		y = s->tail;
		if (r[y].freq >= 1) {
			s3_move(c, y, Q_MAIN);
			return;
		}
		s3_move(c, y, Q_GHOST);
		while (c->q[Q_GHOST].count > s->count + m->count)
			s3_move(c, c->q[Q_GHOST].tail, Q_NONE);
		return;
	}
	y = m->tail;
	if (r[y].freq >= 1) {
		r[y].freq--;
		s3_move(c, y, Q_MAIN);
	} else {
		s3_move(c, y, Q_NONE);
	}
}

static void s3_insert(struct s3 *c, size_t x)
{
	struct rec *r = c->k.r;
	int q = r[x].q == Q_GHOST ? Q_MAIN : Q_SMALL;

	if (r[x].bytes > c->cap)
		return;
	if (r[x].q == Q_GHOST)
		s3_move(c, x, Q_NONE);
	while (s3_used(c) + r[x].bytes > c->cap)
		s3_evict_step(c);
	r[x].freq = 0;
	s3_move(c, x, q);
}

/* One call; true on a request that hits. */
static bool s3_call(struct s3 *c, const struct ref_call *call)
{
	size_t x = key_find(&c->k, call->key);
	struct rec *r = c->k.r;
	bool hit = false;

	if (call->op == REF_FORGET) {
		s3_move(c, x, Q_NONE);
		r[x].known = false;
		r[x].bytes = 0;
		return false;
	}
	if (!r[x].known) { /* a first reference */
		r[x].known = true;
		r[x].bytes = call->bytes;
		if (r[x].bytes)
			s3_insert(c, x);
		return false;
	}
	if (call->op == REF_REQUEST) {
		if (s3_resident(&r[x])) {
			hit = true;
			if (r[x].freq < 3)
				r[x].freq++;
		} else if (r[x].bytes) {
			s3_insert(c, x);
		}
	}
	if (call->bytes && call->bytes != r[x].bytes) {
		if (s3_resident(&r[x])) {
			c->q[r[x].q].bytes -= r[x].bytes;
			c->q[r[x].q].bytes += call->bytes;
		}
		r[x].bytes = call->bytes;
		while (s3_used(c) > c->cap)
			s3_evict_step(c);
	}
	if (call->op == REF_PUT && !s3_resident(&r[x]) && r[x].bytes)
		s3_insert(c, x);
	return hit;
}

double ref_s3fifo_hit_ratio(const struct ref_trace *t, uint64_t cap_bytes)
{
	struct s3 c = { .cap = cap_bytes };
	size_t hits = 0, requests = 0;

	for (int q = 0; q < 4; q++)
		c.q[q] = (struct fifo){ .head = NIL, .tail = NIL };
	for (size_t i = 0; i < t->n; i++) {
		hits += s3_call(&c, &t->c[i]);
		requests += t->c[i].op == REF_REQUEST;
	}
	keys_free(&c.k);
	return requests ? (double)hits / (double)requests : 0;
}

/* ---- LRU stack distances ---- */

size_t ref_lru_distances(const struct ref_trace *t, uint64_t **out)
{
	struct keys k = { 0 };
	struct fifo stack = { .head = NIL, .tail = NIL }; /* head: newest */
	uint64_t *d = xrealloc(NULL, (t->n + 1) * sizeof(*d));
	size_t n = 0;

	for (size_t i = 0; i < t->n; i++) {
		const struct ref_call *call = &t->c[i];
		size_t x = key_find(&k, call->key);
		struct rec *r = k.r;

		if (call->op == REF_FORGET) {
			if (r[x].known)
				fifo_unlink(&stack, r, x);
			r[x].known = false;
			continue;
		}
		if (call->op == REF_REQUEST) {
			uint64_t above = 0;

			if (r[x].known) {
				for (size_t y = stack.head; y != x;
				     y = r[y].next)
					above += r[y].bytes;
				d[n] = above +
				       (call->bytes ? call->bytes : r[x].bytes);
			} else {
				d[n] = UINT64_MAX;
			}
			n++;
		}
		if (r[x].known) {
			fifo_unlink(&stack, r, x);
			if (call->bytes)
				r[x].bytes = call->bytes;
		} else {
			r[x].known = true;
			r[x].bytes = call->bytes;
		}
		fifo_push(&stack, r, x);
	}
	keys_free(&k);
	*out = d;
	return n;
}

double ref_lru_hit_ratio(const uint64_t *d, size_t n, uint64_t cap_bytes)
{
	size_t hits = 0;

	for (size_t i = 0; i < n; i++)
		hits += d[i] <= cap_bytes;
	return n ? (double)hits / (double)n : 0;
}
