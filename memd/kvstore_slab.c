// SPDX-License-Identifier: MIT
/*
 * memd/kvstore_slab.c - the KV store's geometry (size classes, chunks)
 * and its slabs and blocks: slabs borrowed from the owner, cut into
 * blocks of one class, handed back when empty; which entry holds each
 * block (held_by), and memd_kv_check.
 */
#include "memd/kvstore_int.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "fabric/dlist.h"

/* ---- geometry ---- */

static uint64_t class_bytes(const struct memd_kv *kv, uint32_t cls)
{
	return kv->class_bytes[cls];
}

/* The smallest class whose blocks hold bytes (header included); the top
 * class (the whole slab) holds any chunk. */
static uint32_t class_for(const struct memd_kv *kv, uint64_t bytes)
{
	uint32_t lo = 0, hi = kv->nclasses - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (kv->class_bytes[mid] >= bytes)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * Fills kv's class table for its slab size: payload classes grow by a
 * quarter of their power of two (jemalloc's spacing: a block wastes under
 * 20% of itself to rounding), each block is payload + header (so a value
 * of exactly 1 MiB takes 1 MiB + 64 bytes, not 2 MiB), and classes stop
 * while two blocks still fit a slab: a larger block would be alone in
 * its slab anyway, so the top class is the whole slab (payload_max).
 */
void kvs_classes_init(struct memd_kv *kv)
{
	uint64_t S = kv->o.slab_bytes;
	uint32_t n = 0;

	for (uint32_t k = 0; n < NCLASS_MAX - 1; k++) {
		uint64_t base = (uint64_t)MEMD_KV_CLASS_MIN_BYTES << k;
		uint32_t i;

		for (i = 0; i < CLASS_STEPS; i++) {
			uint64_t b = base + base / CLASS_STEPS * i +
				     MEMD_KV_HEADER_BYTES;

			if (2 * b > S)
				break;
			kv->class_bytes[n++] = b;
		}
		if (i < CLASS_STEPS)
			break;
	}
	kv->class_bytes[n++] = S;
	kv->nclasses = n;
}

uint32_t kvs_nchunks_for(const struct memd_kv *kv, uint64_t len)
{
	return (uint32_t)((len + kv->payload_max - 1) / kv->payload_max);
}

/* Payload bytes of chunk i of a len-byte value. */
uint64_t kvs_chunk_part(const struct memd_kv *kv, uint64_t len, uint32_t i)
{
	uint64_t off = (uint64_t)i * kv->payload_max;
	uint64_t left = len - off;

	return left < kv->payload_max ? left : kv->payload_max;
}

uint32_t kvs_slab_blocks_max(const struct memd_kv *kv)
{
	return (uint32_t)(kv->o.slab_bytes / MEMD_KV_CLASS_MIN_BYTES);
}

int memd_kv_nchunks(const struct memd_kv *kv, uint64_t value_len)
{
	if (value_len == 0)
		return -EINVAL;
	if (value_len > kv->o.value_max_bytes)
		return -EMSGSIZE;
	return (int)kvs_nchunks_for(kv, value_len);
}

uint8_t *kvs_chunk_block(const struct kv_chunk *c)
{
	return c->slab->base + (uint64_t)c->block * c->slab->block_bytes;
}

/* ---- slabs and blocks ---- */

static void slab_unlink(struct kv_tenant *t, struct kv_slab *s)
{
	struct kv_slab **head = s->list == L_PARTIAL ? &t->partial[s->cls]
				: s->list == L_EMPTY ? &t->empty
						     : NULL;

	if (!head)
		return;
	TP_DLIST_REMOVE(*head, s, prev, next);
	s->list = L_FULL;
}

static void slab_link(struct kv_tenant *t, struct kv_slab *s,
		      enum slab_list list)
{
	struct kv_slab **head =
		list == L_PARTIAL ? &t->partial[s->cls] : &t->empty;

	s->list = list;
	TP_DLIST_PUSH(*head, s, prev, next);
}

/* Borrows a slab from the owner onto the tenant's empty list. */
static int slab_acquire(struct memd_kv *kv, struct kv_tenant *t)
{
	uint32_t id = 0;
	uint8_t *base = NULL;
	struct kv_slab *s;
	int r;

	if (t->nslabs == t->slabs_cap) {
		uint32_t cap = t->slabs_cap ? t->slabs_cap * 2 : 8;
		struct kv_slab **v = realloc(t->slabs, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->slabs = v;
		t->slabs_cap = cap;
	}
	r = kv->o.slab_get(kv->o.slab_arg, t->id, &id, &base);
	if (r)
		return r < 0 ? r : -EIO;
	if (!base) {
		kv->o.slab_put(kv->o.slab_arg, id);
		return -EFAULT;
	}
	s = calloc(1, sizeof(*s));
	if (s) {
		s->free = malloc(kvs_slab_blocks_max(kv) * sizeof(*s->free));
		s->held_by =
			calloc(kvs_slab_blocks_max(kv), sizeof(*s->held_by));
	}
	if (!s || !s->free || !s->held_by) {
		if (s) {
			free(s->free);
			free(s->held_by);
		}
		free(s);
		kv->o.slab_put(kv->o.slab_arg, id);
		return -ENOMEM;
	}
	s->id = id;
	s->base = base;
	s->idx = t->nslabs;
	t->slabs[t->nslabs++] = s;
	slab_link(t, s, L_EMPTY);
	return 0;
}

/* Cuts an empty slab into blocks of cls; block 0 is handed out first. */
static void slab_cut(struct memd_kv *kv, struct kv_tenant *t, struct kv_slab *s,
		     uint32_t cls)
{
	slab_unlink(t, s);
	s->cls = cls;
	s->block_bytes = class_bytes(kv, cls);
	s->nblocks = (uint32_t)(kv->o.slab_bytes / s->block_bytes);
	for (uint32_t i = 0; i < s->nblocks; i++) {
		assert(!s->held_by[i]);
		s->free[i] = s->nblocks - 1 - i;
	}
	s->nfree = s->nblocks;
	slab_link(t, s, L_PARTIAL);
}

void kvs_slab_release(struct memd_kv *kv, struct kv_tenant *t,
		      struct kv_slab *s)
{
	slab_unlink(t, s);
	t->slabs[s->idx] = t->slabs[--t->nslabs];
	t->slabs[s->idx]->idx = s->idx;
	kv->o.slab_put(kv->o.slab_arg, s->id);
	free(s->free);
	free(s->held_by);
	free(s);
}

void kvs_tenant_release_empty(struct memd_kv *kv, struct kv_tenant *t)
{
	while (t->empty)
		kvs_slab_release(kv, t, t->empty);
}

/*
 * The end of an operation: empty slabs go back to the owner, all but one
 * (KV_SPARE_SLABS), kept for the tenant's next allocation. A slab handed
 * back is closed, quiesced and zeroed before memd leases it again, so a
 * tenant that puts and deletes keys of a class that is otherwise empty
 * would otherwise take a fresh slab (and registration) every time and,
 * faster than the reclaimer zeroes, run the donor out of free slabs
 * (ENOSPC). The spare counts in the tenant's slabs; memd_kv_trim hands
 * it back like any other.
 */
#define KV_SPARE_SLABS 1u

void kvs_tenant_release_spare(struct memd_kv *kv, struct kv_tenant *t)
{
	uint32_t kept = 0;
	struct kv_slab *s = t->empty;

	while (s) {
		struct kv_slab *next = s->next;

		if (kept < KV_SPARE_SLABS)
			kept++;
		else
			kvs_slab_release(kv, t, s);
		s = next;
	}
}

static void block_free(struct kv_tenant *t, const struct kv_chunk *c)
{
	struct kv_slab *s = c->slab;

	s->held_by[c->block] = NULL;
	s->free[s->nfree++] = c->block;
	if (s->nfree == s->nblocks) {
		slab_unlink(t, s);
		slab_link(t, s, L_EMPTY);
	} else if (s->nfree == 1) {
		slab_link(t, s, L_PARTIAL);
	}
}

/*
 * A block of cls for e, held by e from here on: a free one of its
 * tenant's, else an empty slab re-cut, else a new slab from the owner,
 * else (defer) -EAGAIN when the owner has none now but is zeroing one the
 * tenant, under its share, may have soon (slab_soon): its entries stay,
 * the put is asked again. Else evictions (kvs_evict_for: at most about a
 * slab's entries) until one of those appears; with nothing left to
 * evict, -ENOSPC.
 */
static int block_alloc(struct memd_kv *kv, struct kv_entry *e, uint32_t cls,
		       uint64_t now_ms, bool defer, struct kv_chunk *c)
{
	struct kv_tenant *t = e->t;
	uint32_t misses = 0;

	for (;;) {
		struct kv_slab *s = t->partial[cls];
		int r;

		if (s) {
			c->slab = s;
			c->block = s->free[--s->nfree];
			s->held_by[c->block] = e;
			if (s->nfree == 0)
				slab_unlink(t, s);
			return 0;
		}
		if (t->empty) {
			slab_cut(kv, t, t->empty, cls);
			continue;
		}
		r = slab_acquire(kv, t);
		if (r == 0)
			continue;
		if (r != -ENOSPC)
			return r;
		if (defer && kv->o.slab_soon &&
		    kv->o.slab_soon(kv->o.slab_arg, t->id))
			return -EAGAIN;
		if (!kvs_evict_for(kv, t, cls, &misses, now_ms))
			return -ENOSPC;
	}
}

void kvs_entry_free_blocks(struct kv_entry *e)
{
	struct kv_tenant *t = e->t;

	for (uint32_t i = 0; i < e->nchunks; i++)
		block_free(t, &e->chunks[i]);
	t->bytes_used -= e->bytes;
	if (e->chunks != &e->one)
		free(e->chunks);
	e->chunks = NULL;
	e->nchunks = 0;
	e->bytes = 0;
}

/* Gives e blocks for a len-byte value. e must be on no FIFO. defer: a
 * put's, which may be answered -EAGAIN (block_alloc). */
int kvs_entry_alloc_blocks(struct memd_kv *kv, struct kv_entry *e, uint64_t len,
			   uint64_t now_ms, bool defer)
{
	uint32_t n = kvs_nchunks_for(kv, len);
	struct kv_chunk *c = n == 1 ? &e->one : calloc(n, sizeof(*c));
	uint64_t bytes = 0;

	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t cls = class_for(
			kv, MEMD_KV_HEADER_BYTES + kvs_chunk_part(kv, len, i));
		int r = block_alloc(kv, e, cls, now_ms, defer, &c[i]);

		if (r) {
			while (i--)
				block_free(e->t, &c[i]);
			if (c != &e->one)
				free(c);
			return r;
		}
		bytes += class_bytes(kv, cls);
	}
	e->chunks = c;
	e->nchunks = n;
	e->bytes = bytes;
	e->t->bytes_used += bytes;
	return 0;
}

/* ---- consistency (memd_kv_check) ---- */

/* Whether e holds block b of s through one of its chunks. */
static bool entry_holds(const struct kv_entry *e, const struct kv_slab *s,
			uint32_t b)
{
	for (uint32_t i = 0; i < e->nchunks; i++)
		if (e->chunks[i].slab == s && e->chunks[i].block == b)
			return true;
	return false;
}

/* e's chunks, each held by e in a slab of its tenant's; *nblocks grows by
 * their number. */
static bool entry_is_consistent(const struct kv_entry *e, uint64_t *nblocks)
{
	for (uint32_t i = 0; i < e->nchunks; i++) {
		const struct kv_chunk *c = &e->chunks[i];

		if (c->slab->idx >= e->t->nslabs ||
		    e->t->slabs[c->slab->idx] != c->slab ||
		    c->block >= c->slab->nblocks ||
		    c->slab->held_by[c->block] != e)
			return false;
	}
	*nblocks += e->nchunks;
	return true;
}

/* One FIFO: its entries' queue, tenant, count, and qseq rising from the
 * tail to the head. */
static bool fifo_is_consistent(const struct kv_tenant *t,
			       const struct kv_fifo *f, uint8_t q)
{
	uint64_t n = 0, last = 0;

	for (const struct kv_entry *e = f->tail; e; e = e->qprev, n++) {
		if (e->queue != q || e->t != t || (n && e->qseq <= last) ||
		    e->qseq > t->qseq)
			return false;
		last = e->qseq;
	}
	return n == f->count;
}

static bool tenant_is_consistent(const struct memd_kv *kv,
				 const struct kv_tenant *t)
{
	const struct kv_fifo *fifos[] = { &t->small, &t->main, &t->ghost,
					  &t->reserved, &t->deleting };
	const uint8_t qs[] = { Q_SMALL, Q_MAIN, Q_GHOST, Q_RESERVED,
			       Q_DELETING };
	uint64_t held = 0, chunks = 0;

	for (uint32_t i = 0; i < t->nslabs; i++) {
		const struct kv_slab *s = t->slabs[i];
		uint32_t n = 0;

		if (s->idx != i || s->nfree > s->nblocks)
			return false;
		for (uint32_t b = 0; b < kvs_slab_blocks_max(kv); b++) {
			const struct kv_entry *e = s->held_by[b];

			if (!e)
				continue;
			if (b >= s->nblocks || e->t != t ||
			    !entry_holds(e, s, b))
				return false;
			n++;
		}
		for (uint32_t j = 0; j < s->nfree; j++)
			if (s->free[j] >= s->nblocks || s->held_by[s->free[j]])
				return false;
		if (n != s->nblocks - s->nfree)
			return false;
		held += n;
	}
	for (uint32_t b = 0; b < t->nbuckets; b++)
		for (const struct kv_entry *e = t->bucket[b]; e; e = e->hnext)
			if (!entry_is_consistent(e, &chunks))
				return false;
	for (const struct kv_entry *e = t->deleting.head; e; e = e->qnext)
		if (!entry_is_consistent(e, &chunks))
			return false;
	for (size_t i = 0; i < sizeof(qs); i++)
		if (!fifo_is_consistent(t, fifos[i], qs[i]))
			return false;
	/* no block held by an entry the store cannot reach */
	return held == chunks;
}

int memd_kv_check(struct memd_kv *kv)
{
	int r = 0;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants && !r; i++)
		if (!tenant_is_consistent(kv, kv->tenants[i]))
			r = -EFAULT;
	pthread_mutex_unlock(&kv->lock);
	return r;
}
