// SPDX-License-Identifier: MIT
/*
 * memd/kvstore.c - the donor's per-tenant KV block store (see kvstore.h
 * for the contract, the eviction policy and the spill format;
 * kvstore_int.h for its files): the store's life, the index, entries
 * and their leases, tenants.
 */
#include "memd/kvstore_int.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric/dlist.h"

/* ---- index ---- */

static uint64_t key_hash(const struct memd_kv *kv, const uint8_t *key)
{
	uint8_t h[crypto_shorthash_BYTES];

	crypto_shorthash(h, key, MEMD_KV_KEY_BYTES, kv->hkey);
	return kvs_get_le64(h);
}

struct kv_entry *kvs_index_find(const struct memd_kv *kv,
				const struct kv_tenant *t, const uint8_t *key)
{
	struct kv_entry *e = t->bucket[key_hash(kv, key) & (t->nbuckets - 1)];

	while (e && memcmp(e->key, key, MEMD_KV_KEY_BYTES))
		e = e->hnext;
	return e;
}

static void index_grow(const struct memd_kv *kv, struct kv_tenant *t)
{
	uint32_t n = t->nbuckets * 2;
	struct kv_entry **b;

	if (n == 0 || !(b = calloc(n, sizeof(*b))))
		return; /* a longer chain is slower, not wrong */
	for (uint32_t i = 0; i < t->nbuckets; i++) {
		struct kv_entry *e = t->bucket[i], *next;

		for (; e; e = next) {
			uint64_t h = key_hash(kv, e->key) & (n - 1);

			next = e->hnext;
			e->hnext = b[h];
			b[h] = e;
		}
	}
	free(t->bucket);
	t->bucket = b;
	t->nbuckets = n;
}

static void index_insert(const struct memd_kv *kv, struct kv_tenant *t,
			 struct kv_entry *e)
{
	uint64_t h;

	if (t->nhashed >= t->nbuckets)
		index_grow(kv, t);
	h = key_hash(kv, e->key) & (t->nbuckets - 1);
	e->hnext = t->bucket[h];
	t->bucket[h] = e;
	e->hashed = true;
	t->nhashed++;
}

void kvs_index_remove(const struct memd_kv *kv, struct kv_tenant *t,
		      struct kv_entry *e)
{
	struct kv_entry **pp =
		&t->bucket[key_hash(kv, e->key) & (t->nbuckets - 1)];

	if (!e->hashed)
		return;
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	e->hnext = NULL;
	e->hashed = false;
	t->nhashed--;
}

/* ---- entries ---- */

struct kv_entry *kvs_entry_new(struct memd_kv *kv, struct kv_tenant *t,
			       const uint8_t *key)
{
	struct kv_entry *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->t = t;
	memcpy(e->key, key, MEMD_KV_KEY_BYTES);
	index_insert(kv, t, e);
	if (kv->pass_keep && !kv->pass_keep(key, kv->pass_arg))
		kv->pass_restart = true; /* maybe behind the cursor */
	return e;
}

void kvs_lease_clear(struct kv_entry *e)
{
	struct kv_tenant *t = e->t;

	if (!e->leases)
		return;
	TP_DLIST_REMOVE(t->leased, e, lprev, lnext);
	e->leases = 0;
}

void kvs_lease_take(struct memd_kv *kv, struct kv_entry *e, uint64_t now_ms)
{
	uint64_t until = now_ms + kv->o.lease_ms;

	if (e->leases++ == 0) {
		TP_DLIST_PUSH(e->t->leased, e, lprev, lnext);
		e->lease_until_ms = until;
	} else if (until > e->lease_until_ms) {
		e->lease_until_ms = until;
	}
}

bool kvs_lease_is_live(const struct kv_entry *e, uint64_t now_ms)
{
	return e->leases && now_ms < e->lease_until_ms;
}

void kvs_entry_maybe_free(struct memd_kv *kv, struct kv_entry *e)
{
	if (e->busy || e->mem != MEM_NONE || e->queue != Q_NONE || e->spilled)
		return;
	kvs_index_remove(kv, e->t, e);
	free(e);
}

uint64_t kvs_next_generation(struct memd_kv *kv)
{
	uint64_t g = kv->next_gen++;

	if (g == 0)
		g = kv->next_gen++;
	return g;
}

/* ---- tenants ---- */

struct kv_tenant *kvs_tenant_find(struct memd_kv *kv, uint32_t id)
{
	for (size_t i = 0; i < kv->ntenants; i++)
		if (kv->tenants[i]->id == id)
			return kv->tenants[i];
	return NULL;
}

struct kv_tenant *kvs_tenant_get(struct memd_kv *kv, uint32_t id)
{
	struct kv_tenant *t = kvs_tenant_find(kv, id);

	if (t)
		return t;
	if (kv->ntenants == kv->tenants_cap) {
		size_t cap = kv->tenants_cap ? kv->tenants_cap * 2 : 4;
		struct kv_tenant **v = realloc(kv->tenants, cap * sizeof(*v));

		if (!v)
			return NULL;
		kv->tenants = v;
		kv->tenants_cap = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->nbuckets = 64;
	t->bucket = calloc(t->nbuckets, sizeof(*t->bucket));
	if (!t->bucket) {
		free(t);
		return NULL;
	}
	t->id = id;
	kv->tenants[kv->ntenants++] = t;
	return t;
}

void kvs_entry_destroy(struct kv_entry *e)
{
	if (e->chunks)
		kvs_entry_free_blocks(e);
	free(e);
}

static void tenant_destroy(struct memd_kv *kv, struct kv_tenant *t)
{
	struct kv_entry *e, *next;

	for (uint32_t i = 0; i < t->nbuckets; i++) {
		for (e = t->bucket[i]; e; e = next) {
			next = e->hnext;
			kvs_entry_destroy(e);
		}
	}
	for (e = t->deleting.head; e; e = next) {
		next = e->qnext;
		kvs_entry_destroy(e);
	}
	while (t->nslabs)
		kvs_slab_release(kv, t, t->slabs[t->nslabs - 1]);
	free(t->slabs);
	free(t->bucket);
	memd_mrc_destroy(t->mrc);
	free(t);
}

/* ---- create / destroy ---- */

int memd_kv_create(const struct memd_kv_options *o, struct memd_kv **out)
{
	struct memd_kv *kv;
	int r;

	*out = NULL;
	if (!o || !o->slab_get || !o->slab_put ||
	    o->slab_bytes < MEMD_KV_CLASS_MIN_BYTES ||
	    o->slab_bytes > MEMD_KV_SLAB_MAX_BYTES ||
	    (o->slab_bytes & (o->slab_bytes - 1)) ||
	    o->value_max_bytes > MEMD_KV_VALUE_MAX_BYTES ||
	    (o->spill_dir && !o->spill_dir[0]) ||
	    !o->spill_dir != !o->spill_bytes ||
	    (o->policy != MEMD_KV_POLICY_S3FIFO &&
	     o->policy != MEMD_KV_POLICY_FIFO))
		return -EINVAL;
	if (sodium_init() < 0)
		return -EIO;
	kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->o = *o;
	if (!kv->o.reserve_ms)
		kv->o.reserve_ms = 10000;
	if (!kv->o.lease_ms)
		kv->o.lease_ms = 2000;
	if (!kv->o.value_max_bytes)
		kv->o.value_max_bytes = MEMD_KV_VALUE_DEFAULT_MAX_BYTES;
	kv->o.spill_dir = NULL;
	if (o->spill_dir) {
		kv->spill_dir = strdup(o->spill_dir);
		if (!kv->spill_dir) {
			free(kv);
			return -ENOMEM;
		}
		if (mkdir(kv->spill_dir, 0700) && errno != EEXIST) {
			r = -errno;
			free(kv->spill_dir);
			free(kv);
			return r;
		}
	}
	kvs_classes_init(kv);
	kv->payload_max = o->slab_bytes - MEMD_KV_HEADER_BYTES;
	kv->victims =
		malloc(2 * kvs_slab_blocks_max(kv) * sizeof(*kv->victims));
	if (!kv->victims) {
		free(kv->spill_dir);
		free(kv);
		return -ENOMEM;
	}
	kv->next_gen = o->epoch;
	crypto_shorthash_keygen(kv->hkey);
	r = pthread_mutex_init(&kv->lock, NULL);
	if (r) {
		free(kv->victims);
		free(kv->spill_dir);
		free(kv);
		return -r;
	}
	*out = kv;
	return 0;
}

void memd_kv_destroy(struct memd_kv *kv)
{
	if (!kv)
		return;
	for (size_t i = 0; i < kv->ntenants; i++)
		tenant_destroy(kv, kv->tenants[i]);
	free(kv->tenants);
	pthread_mutex_destroy(&kv->lock);
	free(kv->victims);
	free(kv->spill_dir);
	free(kv);
}

/* ---- binding and forgetting tenants ---- */

/*
 * Forgets e of t whatever its state: a reservation dropped, a ghost or a
 * spilled value (its file deleted) unlinked, a value deleted (it goes
 * when its read leases end). Returns 1 when e held a value or a
 * reservation, else 0. kv->lock held.
 */
static int entry_forget(struct memd_kv *kv, struct kv_tenant *t,
			struct kv_entry *e, uint64_t now_ms)
{
	struct memd_kv_item it = { .status = 0 };
	int held;

	if (e->mem == MEM_RESERVED) {
		kvs_drop_reserved(kv, e);
		return 1;
	}
	if (e->mem == MEM_NONE) {
		held = e->spilled;
		kvs_spill_forget(kv, e, true);
		kvs_queue_remove(e);
		kvs_entry_maybe_free(kv, e);
		return held;
	}
	memcpy(it.key, e->key, MEMD_KV_KEY_BYTES);
	return kvs_delete_one(kv, t, &it, now_ms, false) == 0;
}

/* Forgets every entry of t, in memory and spilled (files deleted);
 * entries under read leases go when the leases end. Returns how many. */
static uint64_t tenant_purge(struct memd_kv *kv, struct kv_tenant *t,
			     uint64_t now_ms)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < t->nbuckets; b++) {
		struct kv_entry *e = t->bucket[b], *next;

		for (; e; e = next) {
			next = e->hnext;
			n++;
			entry_forget(kv, t, e, now_ms);
		}
	}
	kvs_tenant_release_spare(kv, t);
	return n;
}

ssize_t memd_kv_bind_tenant(struct memd_kv *kv, uint32_t tenant,
			    const uint8_t bind[MEMD_KV_BIND_BYTES],
			    uint64_t now_ms)
{
	struct kv_tenant *t;
	ssize_t rc = 0;

	if (!kv || !bind)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_get(kv, tenant);
	if (!t) {
		rc = -ENOMEM;
		goto out;
	}
	if (t->bound && !memcmp(t->bind, bind, sizeof(t->bind)))
		goto out;
	if (t->bound) {
		/* Another tenant under the same id (a new registry): nothing
		 * of the old one may reach it. */
		rc = (ssize_t)tenant_purge(kv, t, now_ms);
		memcpy(t->bind, bind, sizeof(t->bind));
		goto out;
	}
	memcpy(t->bind, bind, sizeof(t->bind));
	t->bound = true;
	/* Files found at start (memd_kv_scan_spill) are served only if
	 * they carry this binding. */
	for (struct kv_entry *e = kv->spill_head, *next; e; e = next) {
		next = e->snext;
		if (e->t != t || kvs_spill_check_bind(kv, e) != -EBADMSG)
			continue;
		kvs_spill_forget(kv, e, true);
		rc++;
		if (e->mem == MEM_NONE) {
			kvs_queue_remove(e);
			kvs_entry_maybe_free(kv, e);
		}
	}
out:
	pthread_mutex_unlock(&kv->lock);
	return rc;
}

/* Forgets tenant's entries and deletes its spill files; removed: the
 * tenant is gone for good (memd_kv_remove_tenant), else it stays, with
 * nothing (memd_kv_forget_all). kv->lock held. */
static ssize_t tenant_forget_locked(struct memd_kv *kv, uint32_t tenant,
				    uint64_t now_ms, bool removed)
{
	char dir[PATH_MAX];
	struct kv_tenant *t;
	ssize_t n = 0;

	t = kvs_tenant_find(kv, tenant);
	if (t) {
		n = (ssize_t)tenant_purge(kv, t, now_ms);
		t->removed = t->removed || removed;
	}
	/* files of the tenant's that were never indexed go too */
	if (kv->spill_dir &&
	    kvs_spill_path(kv, tenant, NULL, false, dir, sizeof(dir)) == 0) {
		DIR *d = opendir(dir);
		struct dirent *de;

		if (d) {
			while ((de = readdir(d)))
				if (de->d_name[0] != '.' ||
				    strstr(de->d_name, ".tmp"))
					unlinkat(dirfd(d), de->d_name, 0);
			closedir(d);
			rmdir(dir);
		}
	}
	return n;
}

/* tenant_forget_locked under kv->lock. */
static ssize_t tenant_forget(struct memd_kv *kv, uint32_t tenant,
			     uint64_t now_ms, bool removed)
{
	ssize_t n;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	n = tenant_forget_locked(kv, tenant, now_ms, removed);
	pthread_mutex_unlock(&kv->lock);
	return n;
}

ssize_t memd_kv_remove_tenant(struct memd_kv *kv, uint32_t tenant,
			      uint64_t now_ms)
{
	return tenant_forget(kv, tenant, now_ms, true);
}

ssize_t memd_kv_forget_all(struct memd_kv *kv, uint64_t now_ms)
{
	ssize_t n = 0;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants; i++)
		if (!kv->tenants[i]->removed)
			n += tenant_forget_locked(kv, kv->tenants[i]->id,
						  now_ms, false);
	pthread_mutex_unlock(&kv->lock);
	return n;
}

/* The pass over one bucket of t: forgets the entries keep refuses.
 * Returns how many it visited; *gone grows by those forgotten. kv->lock
 * held. */
static size_t forget_bucket_locked(struct memd_kv *kv, struct kv_tenant *t,
				   uint32_t b,
				   bool (*keep)(const uint8_t *key, void *arg),
				   void *arg, uint64_t now_ms, ssize_t *gone)
{
	struct kv_entry *e = t->bucket[b], *next;
	size_t seen = 0;

	for (; e; e = next) {
		next = e->hnext;
		seen++;
		if (e->busy || keep(e->key, arg))
			continue;
		*gone += entry_forget(kv, t, e, now_ms);
	}
	return seen;
}

void memd_kv_forget_begin(struct memd_kv *kv,
			  bool (*keep)(const uint8_t *key, void *arg),
			  void *arg)
{
	if (!kv)
		return;
	pthread_mutex_lock(&kv->lock);
	kv->pass_keep = keep;
	kv->pass_arg = arg;
	kv->pass_tenant = 0;
	kv->pass_bucket = 0;
	kv->pass_restart = false;
	pthread_mutex_unlock(&kv->lock);
}

ssize_t memd_kv_forget_step(struct memd_kv *kv, size_t budget, uint64_t now_ms,
			    bool *done)
{
	size_t seen = 0;
	ssize_t n = 0;

	*done = true;
	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	if (!kv->pass_keep)
		goto out;
	if (kv->pass_restart) {
		kv->pass_tenant = 0;
		kv->pass_bucket = 0;
		kv->pass_restart = false;
	}
	for (; kv->pass_tenant < kv->ntenants; kv->pass_tenant++) {
		struct kv_tenant *t = kv->tenants[kv->pass_tenant];

		/* a bucket index past the end: the index did not shrink
		 * (it only grows), so this is the tenant's end */
		for (; kv->pass_bucket < t->nbuckets; kv->pass_bucket++) {
			if (seen >= budget) {
				*done = false;
				goto out;
			}
			seen += forget_bucket_locked(kv, t, kv->pass_bucket,
						     kv->pass_keep,
						     kv->pass_arg, now_ms, &n);
		}
		kvs_tenant_release_spare(kv, t);
		kv->pass_bucket = 0;
	}
	kv->pass_keep = NULL;
	kv->pass_arg = NULL;
out:
	pthread_mutex_unlock(&kv->lock);
	return n;
}

ssize_t memd_kv_forget_unless(struct memd_kv *kv,
			      bool (*keep)(const uint8_t *key, void *arg),
			      void *arg, uint64_t now_ms)
{
	bool done;

	if (!kv || !keep)
		return -EINVAL;
	memd_kv_forget_begin(kv, keep, arg);
	return memd_kv_forget_step(kv, SIZE_MAX, now_ms, &done);
}

ssize_t memd_kv_clear(struct memd_kv *kv, uint32_t tenant, uint64_t now_ms)
{
	return tenant_forget(kv, tenant, now_ms, false);
}

size_t memd_kv_tenant_ids(struct memd_kv *kv, uint32_t *ids, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants && n < max; i++)
		if (!kv->tenants[i]->removed)
			ids[n++] = kv->tenants[i]->id;
	pthread_mutex_unlock(&kv->lock);
	return n;
}
