// SPDX-License-Identifier: MIT
/*
 * memd/kvstore_ops.c - the KV store's batch operations: reserve,
 * commit, lookup, done, exists, delete, drop, pin, unpin, expire.
 */
#include "memd/kvstore_int.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* ---- batch operations ---- */

static int batch_check(const struct memd_kv *kv, const void *items, size_t n,
		       const struct memd_kv_loc *locs, size_t max_locs)
{
	if (!kv || !items || n == 0 || (!locs && max_locs))
		return -EINVAL;
	return 0;
}

/*
 * A batch whose keys need no locations: under the lock, items[i].status =
 * one(kv, t, &items[i], now_ms, arg) for the tenant's store t, -ENOENT
 * for each when the tenant has none; then the tenant's spare slabs go
 * back. The number of items with status 0, or -EINVAL.
 */
static ssize_t kv_batch(struct memd_kv *kv, uint32_t tenant,
			struct memd_kv_item *items, size_t n, uint64_t now_ms,
			int (*one)(struct memd_kv *kv, struct kv_tenant *t,
				   struct memd_kv_item *it, uint64_t now_ms,
				   bool arg),
			bool arg)
{
	struct kv_tenant *t;
	ssize_t ok = 0;
	int r = batch_check(kv, items, n, NULL, 0);

	if (r)
		return r;
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_find(kv, tenant);
	for (size_t i = 0; i < n; i++) {
		items[i].status =
			t ? one(kv, t, &items[i], now_ms, arg) : -ENOENT;
		ok += items[i].status == 0;
	}
	if (t)
		kvs_tenant_release_spare(kv, t);
	pthread_mutex_unlock(&kv->lock);
	return ok;
}

static void fill_locs(const struct kv_entry *e, struct memd_kv_item *it,
		      struct memd_kv_loc *locs, size_t *nl)
{
	it->first_loc = (uint32_t)*nl;
	it->nchunks = e->nchunks;
	for (uint32_t i = 0; i < e->nchunks; i++) {
		const struct kv_chunk *c = &e->chunks[i];
		uint64_t bb = c->slab->block_bytes;

		locs[*nl] = (struct memd_kv_loc){
			.slab = c->slab->id,
			.chunk = i,
			.offset = (uint64_t)c->block * bb,
			.block_bytes = bb,
		};
		(*nl)++;
	}
}

/*
 * A batch whose keys get locations: under the lock, items[i].status =
 * one(kv, t, &items[i], locs, max_locs, &nl, now_ms) for the tenant's
 * store t (made if it has none; -ENOMEM for each where that fails), each
 * item's locations appended at locs[nl]; then the tenant's spare slabs
 * go back. The number of items with status 0, or -EINVAL.
 */
static ssize_t
kv_loc_batch(struct memd_kv *kv, uint32_t tenant, struct memd_kv_item *items,
	     size_t n, struct memd_kv_loc *locs, size_t max_locs,
	     uint64_t now_ms,
	     int (*one)(struct memd_kv *kv, struct kv_tenant *t,
			struct memd_kv_item *it, struct memd_kv_loc *locs,
			size_t max_locs, size_t *nl, uint64_t now_ms))
{
	struct kv_tenant *t;
	size_t nl = 0;
	ssize_t ok = 0;
	int r = batch_check(kv, items, n, locs, max_locs);

	if (r)
		return r;
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_get(kv, tenant);
	for (size_t i = 0; i < n; i++) {
		struct memd_kv_item *it = &items[i];

		it->first_loc = (uint32_t)nl;
		it->nchunks = 0;
		it->status = t ? one(kv, t, it, locs, max_locs, &nl, now_ms)
			       : -ENOMEM;
		ok += it->status == 0;
	}
	if (t)
		kvs_tenant_release_spare(kv, t);
	pthread_mutex_unlock(&kv->lock);
	return ok;
}

void kvs_drop_reserved(struct memd_kv *kv, struct kv_entry *e)
{
	kvs_queue_remove(e);
	kvs_entry_free_blocks(e);
	e->mem = MEM_NONE;
	e->generation = 0;
	e->to_main = false;
	e->t->st.expired++;
	kvs_entry_maybe_free(kv, e);
}

static int reserve_one(struct memd_kv *kv, struct kv_tenant *t,
		       struct memd_kv_item *it, struct memd_kv_loc *locs,
		       size_t max_locs, size_t *nl, uint64_t now_ms)
{
	struct kv_entry *e;
	int nc, r;

	it->generation = 0;
	nc = memd_kv_nchunks(kv, it->value_len);
	if (nc < 0)
		return nc;
	e = kvs_index_find(kv, t, it->key);
	if (e && e->mem == MEM_RESERVED && now_ms >= e->deadline_ms) {
		kvs_drop_reserved(kv, e);
		e = kvs_index_find(kv, t, it->key);
	}
	if (e && e->mem == MEM_COMMITTED) {
		it->generation = e->generation;
		kvs_reference(kv, t, it->key, e->bytes, false);
		return -EEXIST;
	}
	if (e && e->mem == MEM_RESERVED)
		return -EBUSY;
	if (e && e->spilled) {
		kvs_reference(kv, t, it->key, 0, false);
		return -EEXIST;
	}
	/* One tenant's open puts cannot pin the store's memory without
	 * bound; expired ones are dropped first (oldest at the tail). */
	while (kv->o.max_reserved && t->reserved.count >= kv->o.max_reserved &&
	       t->reserved.tail && now_ms >= t->reserved.tail->deadline_ms)
		kvs_drop_reserved(kv, t->reserved.tail);
	if (kv->o.max_reserved && t->reserved.count >= kv->o.max_reserved)
		return -EDQUOT;
	if (*nl + (size_t)nc > max_locs)
		return -ENOBUFS;
	/* a forget pass under way (memd_kv_forget_begin): a new key it
	 * would forget is refused, so that none lands behind its cursor */
	if (!e && kv->pass_keep && !kv->pass_keep(it->key, kv->pass_arg))
		return -EAGAIN;
	if (!e && !(e = kvs_entry_new(kv, t, it->key)))
		return -ENOMEM;
	if (e->queue == Q_GHOST) {
		kvs_queue_remove(e);
		e->to_main = true;
	}
	e->busy = true;
	r = kvs_entry_alloc_blocks(kv, e, it->value_len, now_ms, true);
	e->busy = false;
	if (r) {
		e->to_main = false;
		kvs_entry_maybe_free(kv, e);
		return r;
	}
	e->mem = MEM_RESERVED;
	e->generation = kvs_next_generation(kv);
	e->value_len = it->value_len;
	e->checksum = 0;
	e->deadline_ms = now_ms + kv->o.reserve_ms;
	e->read = e->probed = false;
	kvs_queue_push(e, Q_RESERVED);
	kvs_reference(kv, t, it->key, e->bytes, false);
	it->generation = e->generation;
	fill_locs(e, it, locs, nl);
	return 0;
}

ssize_t memd_kv_reserve(struct memd_kv *kv, uint32_t tenant,
			struct memd_kv_item *items, size_t n,
			struct memd_kv_loc *locs, size_t max_locs,
			uint64_t now_ms)
{
	return kv_loc_batch(kv, tenant, items, n, locs, max_locs, now_ms,
			    reserve_one);
}

static int commit_one(struct memd_kv *kv, struct kv_tenant *t,
		      struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);

	if (!e || (e->mem != MEM_RESERVED && e->mem != MEM_COMMITTED))
		return -ENOENT;
	if (e->generation != it->generation)
		return -ESTALE;
	if (e->mem == MEM_COMMITTED)
		return -EALREADY;
	if (now_ms >= e->deadline_ms) {
		kvs_drop_reserved(kv, e);
		return -ETIMEDOUT;
	}
	kvs_queue_remove(e);
	e->mem = MEM_COMMITTED;
	e->checksum = it->checksum;
	e->put_ms = (uint32_t)(now_ms + kv->o.reserve_ms - e->deadline_ms);
	kvs_queue_committed(kv, e);
	return 0;
}

ssize_t memd_kv_commit(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, commit_one, false);
}

static int unreserve_one(struct memd_kv *kv, struct kv_tenant *t,
			 struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);

	(void)now_ms;
	(void)unused;
	if (!e || e->mem != MEM_RESERVED || e->generation != it->generation)
		return -ENOENT;
	kvs_drop_reserved(kv, e);
	return 0;
}

ssize_t memd_kv_unreserve(struct memd_kv *kv, uint32_t tenant,
			  struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, unreserve_one, false);
}

/* Makes a spilled entry resident. 0, or -ENOENT / -ENOSPC / -errno. */
static int ensure_resident(struct memd_kv *kv, struct kv_entry *e,
			   uint64_t now_ms)
{
	int r;

	if (e->mem == MEM_COMMITTED)
		return 0;
	if (e->mem != MEM_NONE || !e->spilled)
		return -ENOENT;
	r = kvs_entry_load(kv, e, now_ms);
	if (r)
		kvs_entry_maybe_free(kv, e);
	return r;
}

static int lookup_one(struct memd_kv *kv, struct kv_tenant *t,
		      struct memd_kv_item *it, struct memd_kv_loc *locs,
		      size_t max_locs, size_t *nl, uint64_t now_ms)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);
	bool counted = !(e && e->probed);
	uint64_t need;

	if (e)
		e->probed = false;
	if (!e ||
	    !(e->mem == MEM_COMMITTED || (e->mem == MEM_NONE && e->spilled))) {
		kvs_request(kv, t, it->key, 0, false, counted);
		return -ENOENT;
	}
	need = e->mem == MEM_COMMITTED
		       ? e->nchunks
		       : kvs_nchunks_for(kv,
					 e->spill_file_bytes - SPILL_OVERHEAD);
	if (*nl + need > max_locs)
		return -ENOBUFS;
	if (ensure_resident(kv, e, now_ms)) {
		kvs_request(kv, t, it->key, 0, false, counted);
		return -ENOENT;
	}
	kvs_request(kv, t, it->key, e->bytes, true, counted);
	e->read = true;
	t->st.hit_bytes += e->value_len;
	if (e->freq < 3)
		e->freq++;
	kvs_lease_take(kv, e, now_ms);
	it->value_len = e->value_len;
	it->generation = e->generation;
	it->checksum = e->checksum;
	fill_locs(e, it, locs, nl);
	return 0;
}

/* lookup_one, counted as a hit or a miss. */
static int lookup_counted(struct memd_kv *kv, struct kv_tenant *t,
			  struct memd_kv_item *it, struct memd_kv_loc *locs,
			  size_t max_locs, size_t *nl, uint64_t now_ms)
{
	int r = lookup_one(kv, t, it, locs, max_locs, nl, now_ms);

	if (r == 0)
		t->st.hits++;
	else if (r == -ENOENT)
		t->st.misses++;
	return r;
}

ssize_t memd_kv_lookup(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n,
		       struct memd_kv_loc *locs, size_t max_locs,
		       uint64_t now_ms)
{
	return kv_loc_batch(kv, tenant, items, n, locs, max_locs, now_ms,
			    lookup_counted);
}

/* Frees a DELETING entry whose last lease has ended. */
static void deleting_free(struct kv_entry *e)
{
	kvs_queue_remove(e);
	kvs_lease_clear(e);
	kvs_entry_destroy(e);
}

static int done_one(struct memd_kv *kv, struct kv_tenant *t,
		    struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);

	if (!e || e->mem != MEM_COMMITTED || e->generation != it->generation) {
		struct kv_entry *d = t->deleting.head;

		while (d && (memcmp(d->key, it->key, MEMD_KV_KEY_BYTES) ||
			     d->generation != it->generation))
			d = d->qnext;
		if (d)
			e = d;
		else if (!e || e->mem != MEM_COMMITTED)
			return -ENOENT;
		else
			return -ESTALE;
	}
	if (!e->leases)
		return -EALREADY;
	if (e->leases > 1) {
		e->leases--;
		return 0;
	}
	kvs_lease_clear(e);
	if (e->mem == MEM_DELETING)
		deleting_free(e);
	return 0;
}

ssize_t memd_kv_done(struct memd_kv *kv, uint32_t tenant,
		     struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, done_one, false);
}

ssize_t memd_kv_exists(struct memd_kv *kv, uint32_t tenant,
		       const uint8_t (*keys)[MEMD_KV_KEY_BYTES], size_t n)
{
	struct kv_tenant *t;
	ssize_t prefix = -1;

	if (!kv || !keys || n == 0)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_find(kv, tenant);
	/* every key is a request (capacity statistics), also past the
	 * first missing one: a larger store might have held it */
	for (size_t i = 0; t && i < n; i++) {
		struct kv_entry *e = kvs_index_find(kv, t, keys[i]);
		bool here = e && (e->mem == MEM_COMMITTED ||
				  (e->mem == MEM_NONE && e->spilled));

		if (here)
			e->probed = true;
		else if (prefix < 0)
			prefix = (ssize_t)i;
		kvs_request(kv, t, keys[i],
			    here && e->mem == MEM_COMMITTED ? e->bytes : 0,
			    here, true);
	}
	pthread_mutex_unlock(&kv->lock);
	return !t ? 0 : prefix < 0 ? (ssize_t)n : prefix;
}

int kvs_delete_one(struct memd_kv *kv, struct kv_tenant *t,
		   struct memd_kv_item *it, uint64_t now_ms, bool keep_pinned)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);

	/* a reservation past its deadline is no put under way (reserve_one
	 * drops it too): the key is as if never put */
	if (e && e->mem == MEM_RESERVED && now_ms >= e->deadline_ms) {
		kvs_drop_reserved(kv, e);
		e = kvs_index_find(kv, t, it->key);
	}
	if (!e)
		return -ENOENT;
	if (e->mem == MEM_RESERVED)
		return -EBUSY;
	if (keep_pinned && e->mem == MEM_COMMITTED && e->pins)
		return -EEXIST; /* pinned: it stays */
	if (e->mem == MEM_NONE && !e->spilled)
		return -ENOENT; /* only a ghost */
	if (t->mrc)
		memd_mrc_forget(t->mrc, kvs_sample_hash(kv, it->key));
	kvs_spill_forget(kv, e, true);
	if (e->mem == MEM_NONE) {
		kvs_queue_remove(e); /* ghost */
		kvs_entry_maybe_free(kv, e);
		return 0;
	}
	kvs_queue_remove(e);
	kvs_index_remove(kv, t, e);
	e->pins = 0;
	if (kvs_lease_is_live(e, now_ms)) {
		e->mem = MEM_DELETING;
		kvs_queue_push(e, Q_DELETING);
		return 0;
	}
	kvs_lease_clear(e);
	kvs_entry_destroy(e);
	return 0;
}

ssize_t memd_kv_delete(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, kvs_delete_one, false);
}

ssize_t memd_kv_drop(struct memd_kv *kv, uint32_t tenant,
		     struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, kvs_delete_one, true);
}

static int pin_one(struct memd_kv *kv, struct kv_tenant *t,
		   struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);
	int s = e ? ensure_resident(kv, e, now_ms) : -ENOENT;

	if (s == 0)
		e->pins++;
	return s;
}

ssize_t memd_kv_pin(struct memd_kv *kv, uint32_t tenant,
		    struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, pin_one, false);
}

static int unpin_one(struct memd_kv *kv, struct kv_tenant *t,
		     struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = kvs_index_find(kv, t, it->key);

	if (!e || e->mem != MEM_COMMITTED)
		return -ENOENT;
	if (!e->pins)
		return -EINVAL;
	e->pins--;
	return 0;
}

/* Ends, like every batch, by handing back spare slabs; an unpin frees
 * none itself. */
ssize_t memd_kv_unpin(struct memd_kv *kv, uint32_t tenant,
		      struct memd_kv_item *items, size_t n)
{
	return kv_batch(kv, tenant, items, n, 0, unpin_one, false);
}

size_t memd_kv_expire(struct memd_kv *kv, uint64_t now_ms)
{
	size_t n = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants; i++) {
		struct kv_tenant *t = kv->tenants[i];
		struct kv_entry *e, *next;

		for (e = t->reserved.head; e; e = next) {
			next = e->qnext;
			if (now_ms >= e->deadline_ms) {
				kvs_drop_reserved(kv, e);
				n++;
			}
		}
		for (e = t->leased; e; e = next) {
			next = e->lnext;
			if (now_ms < e->lease_until_ms)
				continue;
			n++;
			if (e->mem == MEM_DELETING)
				deleting_free(e);
			else
				kvs_lease_clear(e);
		}
		kvs_tenant_release_spare(kv, t);
	}
	pthread_mutex_unlock(&kv->lock);
	return n;
}
