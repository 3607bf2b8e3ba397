// SPDX-License-Identifier: MIT
/*
 * memd/kvstore_evict.c - the KV store's FIFOs and eviction: S3-FIFO (or
 * plain FIFO) per tenant (see kvstore.h), and memd_kv_trim.
 */
#include "memd/kvstore_int.h"

#include <errno.h>
#include <pthread.h>

#include "fabric/dlist.h"

/* ---- FIFOs ---- */

static struct kv_fifo *fifo_of(struct kv_tenant *t, uint8_t q)
{
	switch (q) {
	case Q_SMALL:
		return &t->small;
	case Q_MAIN:
		return &t->main;
	case Q_GHOST:
		return &t->ghost;
	case Q_RESERVED:
		return &t->reserved;
	case Q_DELETING:
		return &t->deleting;
	}
	return NULL;
}

void kvs_queue_push(struct kv_entry *e, uint8_t q)
{
	struct kv_fifo *f = fifo_of(e->t, q);

	e->queue = q;
	e->qseq = ++e->t->qseq;
	TP_DLIST_PREPEND(f->head, f->tail, e, qprev, qnext);
	f->count++;
	f->bytes += e->bytes;
}

void kvs_queue_remove(struct kv_entry *e)
{
	struct kv_fifo *f = fifo_of(e->t, e->queue);

	if (!f)
		return;
	TP_DLIST_UNLINK(f->head, f->tail, e, qprev, qnext);
	f->count--;
	f->bytes -= e->bytes;
	e->queue = Q_NONE;
}

static void queue_move(struct kv_entry *e, uint8_t q)
{
	kvs_queue_remove(e);
	kvs_queue_push(e, q);
}

void kvs_queue_committed(struct memd_kv *kv, struct kv_entry *e)
{
	bool main = kv->o.policy == MEMD_KV_POLICY_S3FIFO && e->to_main;

	e->to_main = false;
	e->freq = 0;
	kvs_queue_push(e, main ? Q_MAIN : Q_SMALL);
}

/* ---- eviction ---- */

static bool is_evictable(const struct kv_entry *e, uint64_t now_ms)
{
	return e->pins == 0 && !kvs_lease_is_live(e, now_ms);
}

static void ghost_trim(struct memd_kv *kv, struct kv_tenant *t)
{
	uint64_t cap = t->small.count + t->main.count;

	if (cap == 0)
		cap = 1;
	while (t->ghost.count > cap) {
		struct kv_entry *g = t->ghost.tail;

		kvs_queue_remove(g);
		kvs_entry_maybe_free(kv, g);
	}
}

/* Evicts e (COMMITTED, evictable): spill, free its blocks, maybe ghost. */
static void evict_entry(struct memd_kv *kv, struct kv_entry *e, bool ghost)
{
	struct kv_tenant *t = e->t;

	if (kv->spill_dir && !e->spilled) {
		if (kvs_spill_write(kv, e) == 0)
			t->st.spills++;
		else
			t->st.spill_errors++;
	}
	if (!e->read) { /* put, never read: the put was waste */
		t->st.oneshot++;
		t->st.oneshot_bytes += e->value_len;
		t->st.oneshot_put_ms += e->put_ms;
	}
	e->read = false;
	kvs_queue_remove(e);
	kvs_lease_clear(e); /* lapsed ones only: live ones are not evicted */
	kvs_entry_free_blocks(e);
	e->mem = MEM_NONE;
	e->generation = 0;
	e->freq = 0;
	e->pins = 0;
	t->st.evictions++;
	if (ghost && kv->o.policy == MEMD_KV_POLICY_S3FIFO) {
		kvs_queue_push(e, Q_GHOST);
		ghost_trim(kv, t);
	}
	kvs_entry_maybe_free(kv, e);
}

static uint32_t in_use(const struct kv_slab *s)
{
	return s->nblocks - s->nfree;
}

/*
 * Sorts the k victims at v by order, stably, through tmp (as long as v):
 * a least-significant-digit radix sort over the bytes in which the
 * orders differ (usually the FIFO bit and the low bytes of qseq), O(k) a
 * byte; none when the blocks' order is the FIFOs' already (a slab filled
 * by puts in a row, none moved since). Returns v or tmp, whichever holds
 * them sorted. (qsort cost about 220 instructions a victim.)
 */
static struct kv_victim *victims_sort(struct kv_victim *v,
				      struct kv_victim *tmp, uint32_t k)
{
	uint64_t all = ~0ull, any = 0;
	bool sorted = true;

	for (uint32_t i = 0; i < k; i++) {
		all &= v[i].order;
		any |= v[i].order;
		sorted = sorted && (i == 0 || v[i - 1].order <= v[i].order);
	}
	if (sorted)
		return v;
	for (unsigned shift = 0; shift < 64; shift += 8) {
		uint32_t at[256] = { 0 }, sum = 0;
		struct kv_victim *swap;

		if (!(((all ^ any) >> shift) & 0xff))
			continue; /* the same byte in every order */
		for (uint32_t i = 0; i < k; i++)
			at[(v[i].order >> shift) & 0xff]++;
		for (unsigned b = 0; b < 256; b++) {
			uint32_t n = at[b];

			at[b] = sum;
			sum += n;
		}
		for (uint32_t i = 0; i < k; i++)
			tmp[at[(v[i].order >> shift) & 0xff]++] = v[i];
		swap = v;
		v = tmp;
		tmp = swap;
	}
	return v;
}

/*
 * Evicts the evictable committed entries with a block in slab sl, in the
 * order of a walk of the small FIFO and then the main one, oldest first
 * (the order the ghost FIFO and the spill files get them in). They are
 * found through sl's held_by, not by that walk: O(blocks of sl + k)
 * for k such entries, where the walk was O(entries of t) when sl's last
 * block was near the FIFOs' heads or stayed held (pinned, leased,
 * reserved). Returns how many it evicted.
 */
static uint64_t evict_in_slab(struct memd_kv *kv, const struct kv_slab *sl,
			      uint64_t now_ms)
{
	struct kv_victim *v = kv->victims;
	uint32_t k = 0, seen = 0;
	uint64_t n = 0;

	/* blocks go out lowest first: the held ones are mostly at the front */
	for (uint32_t b = 0; b < sl->nblocks && seen < in_use(sl); b++) {
		struct kv_entry *e = sl->held_by[b];

		if (!e)
			continue;
		seen++;
		if ((e->queue == Q_SMALL || e->queue == Q_MAIN) &&
		    is_evictable(e, now_ms))
			v[k++] = (struct kv_victim){
				.order = (uint64_t)(e->queue == Q_MAIN) << 63 |
					 e->qseq,
				.e = e,
			};
	}
	if (k > 1)
		v = victims_sort(v, kv->victims + kvs_slab_blocks_max(kv), k);
	for (uint32_t i = 0; i < k; i++) {
		/* an entry with two blocks here is listed twice; orders
		 * are compared, not entries (an evicted one may be freed) */
		if (i && v[i].order == v[i - 1].order)
			continue;
		evict_entry(kv, v[i].e, !(v[i].order >> 63));
		n++;
	}
	return n;
}

/* evict_entry, noting in *slab a slab e has a block in (its first
 * chunk's): it stays the tenant's, on a list, until the op ends. */
static void evict_noting(struct memd_kv *kv, struct kv_entry *e, bool ghost,
			 struct kv_slab **slab)
{
	*slab = e->nchunks ? e->chunks[0].slab : NULL;
	evict_entry(kv, e, ghost);
}

static bool evict_any(struct memd_kv *kv, struct kv_fifo *f, bool ghost,
		      uint64_t now_ms, struct kv_slab **slab)
{
	for (struct kv_entry *e = f->tail; e; e = e->qprev) {
		if (is_evictable(e, now_ms)) {
			evict_noting(kv, e, ghost, slab);
			return true;
		}
	}
	return false;
}

/* One S3-FIFO eviction in t (see kvstore.h); *slab: a slab the victim
 * had a block in. False: nothing evictable. */
static bool evict_one(struct memd_kv *kv, struct kv_tenant *t, uint64_t now_ms,
		      struct kv_slab **slab)
{
	uint64_t budget;

	if (kv->o.policy == MEMD_KV_POLICY_FIFO)
		return evict_any(kv, &t->small, false, now_ms, slab);
	budget = 4 * (t->small.count + t->main.count) + 4;
	while (budget-- && (t->small.count || t->main.count)) {
		struct kv_fifo *s = &t->small, *m = &t->main;
		bool from_small =
			s->count &&
			(m->count == 0 || s->bytes * 10 >= s->bytes + m->bytes);
		struct kv_entry *e = from_small ? s->tail : m->tail;

		if (!is_evictable(e, now_ms)) {
			queue_move(e, e->queue);
		} else if (from_small && e->freq >= 1) {
			queue_move(e, Q_MAIN);
		} else if (!from_small && e->freq >= 1) {
			e->freq--;
			queue_move(e, Q_MAIN);
		} else {
			evict_noting(kv, e, from_small, slab);
			return true;
		}
	}
	/* the walk only met pinned or leased entries: take any other one */
	return evict_any(kv, &t->small, true, now_ms, slab) ||
	       evict_any(kv, &t->main, false, now_ms, slab);
}

/* Whether t has a slab cut for cls with every block in use (one with a
 * free block is on t->partial[cls]). */
static bool class_full_slab(const struct kv_tenant *t, uint32_t cls)
{
	for (uint32_t i = 0; i < t->nslabs; i++)
		if (t->slabs[i]->list == L_FULL && t->slabs[i]->cls == cls)
			return true;
	return false;
}

/* t's slab with the fewest blocks in use (t has one). */
static struct kv_slab *fewest_in_use(const struct kv_tenant *t)
{
	struct kv_slab *best = t->slabs[0];

	for (uint32_t i = 1; i < t->nslabs; i++)
		if (in_use(t->slabs[i]) < in_use(best))
			best = t->slabs[i];
	return best;
}

/*
 * Room in t, whose share is spent, for a block of class cls: one S3-FIFO
 * eviction. When that freed neither a block of cls nor a whole slab, and
 * no eviction in S3-FIFO order can (t has no slab of cls), or *misses
 * such evictions have not in as many tries as the victim's slab has
 * blocks, a slab is emptied and re-cut for cls: the one with the fewest
 * blocks in use when that is fewer than the victim's slab holds, else
 * (or when that one keeps a pinned, leased or reserved block) the
 * victim's. Evicting in S3-FIFO order until some slab empties by chance
 * took most of a store whose slabs each hold old and new values; always
 * the victim's slab took a slab of metadata blocks for a tail value that
 * a slab of one value could have made room for (docs/kv.md, "Eviction";
 * docs/bench/kv.md, "New size classes at the share"). False: nothing
 * evictable.
 */
bool kvs_evict_for(struct memd_kv *kv, struct kv_tenant *t, uint32_t cls,
		   uint32_t *misses, uint64_t now_ms)
{
	struct kv_slab *sl = NULL;

	if (!evict_one(kv, t, now_ms, &sl))
		return false;
	if (!sl || t->partial[cls] || t->empty)
		return true;
	if (!class_full_slab(t, cls) || ++*misses >= sl->nblocks) {
		struct kv_slab *few = fewest_in_use(t);
		uint64_t n = 0;

		*misses = 0;
		if (few != sl && in_use(few) < in_use(sl))
			n = evict_in_slab(kv, few, now_ms);
		if (!t->empty)
			n += evict_in_slab(kv, sl, now_ms);
		t->st.recut_evictions += n;
		t->st.recuts += t->empty != NULL;
	}
	return true;
}

ssize_t memd_kv_trim(struct memd_kv *kv, uint32_t tenant, uint32_t max_slabs,
		     uint64_t now_ms)
{
	struct kv_tenant *t;
	uint64_t n = 0;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_find(kv, tenant);
	if (t)
		kvs_tenant_release_empty(kv, t);
	for (uint32_t i = 0; t && i < t->nslabs; i++)
		t->slabs[i]->trim_tried = false;
	while (t && t->nslabs > max_slabs) {
		struct kv_slab *best = NULL;

		/* the slab with the fewest blocks in use costs least */
		for (uint32_t i = 0; i < t->nslabs; i++) {
			struct kv_slab *x = t->slabs[i];

			if (!x->trim_tried &&
			    (!best || x->nblocks - x->nfree <
					      best->nblocks - best->nfree))
				best = x;
		}
		if (!best)
			break; /* pinned, leased or reserved blocks everywhere */
		n += evict_in_slab(kv, best, now_ms);
		if (best->list != L_EMPTY)
			best->trim_tried = true;
		kvs_tenant_release_empty(kv, t);
	}
	pthread_mutex_unlock(&kv->lock);
	return (ssize_t)n;
}
