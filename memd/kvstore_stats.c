// SPDX-License-Identifier: MIT
/*
 * memd/kvstore_stats.c - the KV store's capacity statistics
 * (docs/capacity.md): requests and the references its miss-ratio curves
 * sample, and the stats and curve snapshots.
 */
#include "memd/kvstore_int.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

/* ---- capacity statistics (docs/capacity.md) ---- */

/*
 * The spatial hash the curve samples by: the key's four words folded,
 * salted with the store's random index key, through the splitmix64
 * finalizer. Cheaper than the index's SipHash (it runs on every
 * request); a client that picks keys to collide only skews its own
 * tenant's curve, whose memory stays bounded either way.
 */
uint64_t kvs_sample_hash(const struct memd_kv *kv, const uint8_t *key)
{
	uint64_t x = kvs_get_le64(kv->hkey) ^ kvs_get_le64(key) ^
		     (kvs_get_le64(key + 8) * 0x9e3779b97f4a7c15ull) ^
		     (kvs_get_le64(key + 16) * 0xc2b2ae3d27d4eb4full) ^
		     (kvs_get_le64(key + 24) * 0x165667b19e3779f9ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * A reference to key for the tenant's miss-ratio curve: counted (a
 * request) or a touch (a put), with the bytes of its blocks (0: not
 * known here). The curve is created at the tenant's first reference.
 */
void kvs_reference(struct memd_kv *kv, struct kv_tenant *t, const uint8_t *key,
		   uint64_t bytes, bool counted)
{
	if (!kv->o.mrc_samples || t->mrc_failed)
		return;
	if (!t->mrc &&
	    memd_mrc_create(kv->o.mrc_samples, kv->o.mrc_window, &t->mrc)) {
		t->mrc_failed = true;
		return;
	}
	memd_mrc_access(t->mrc, kvs_sample_hash(kv, key), bytes, counted);
}

/* A request (exists, or a lookup that no exists answered just before)
 * for key: counted with its outcome, and a reference for the curve. */
void kvs_request(struct memd_kv *kv, struct kv_tenant *t, const uint8_t *key,
		 uint64_t bytes, bool hit, bool counted)
{
	if (counted) {
		t->st.requests++;
		t->st.request_hits += hit;
	}
	kvs_reference(kv, t, key, bytes, counted);
}

void memd_kv_get_stats(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_stats *st)
{
	struct kv_tenant *t;

	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_find(kv, tenant);
	if (t) {
		*st = t->st;
		st->slabs = t->nslabs;
		st->bytes_held = (uint64_t)t->nslabs * kv->o.slab_bytes;
		st->bytes_used = t->bytes_used;
		st->entries = t->small.count + t->main.count;
		st->reserved = t->reserved.count;
		st->spilled = t->spilled;
		st->spill_bytes = t->spill_bytes;
	}
	pthread_mutex_unlock(&kv->lock);
}

int memd_kv_curve(struct memd_kv *kv, uint32_t tenant, const uint64_t *sizes,
		  double *at, size_t nsizes, struct memd_kv_curve *c)
{
	struct kv_tenant *t;
	int r = -ENOENT;

	memset(c, 0, sizeof(*c));
	pthread_mutex_lock(&kv->lock);
	t = kvs_tenant_find(kv, tenant);
	if (t && t->mrc) {
		memd_mrc_get_info(t->mrc, &c->info);
		c->npoints = memd_mrc_points(t->mrc, 8, c->bytes, c->hit,
					     MEMD_KV_CURVE_POINTS);
		for (size_t i = 0; i < nsizes; i++)
			at[i] = memd_mrc_hit_ratio(t->mrc, sizes[i]);
		r = 0;
	}
	pthread_mutex_unlock(&kv->lock);
	return r;
}
