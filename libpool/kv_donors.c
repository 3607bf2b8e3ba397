// SPDX-License-Identifier: MIT
/*
 * libpool/kv_donors.c - the KV tier's client: homes, the donor table
 * and a key's ranking.
 *
 * A standalone session has one home, its memd; a cluster session keeps
 * the donors that are up (DONORS, refetched every refresh_ms) and ranks
 * them per key by rendezvous hashing. A donor's link is opened on first
 * use and forgotten when it fails (not retried for KV_RETRY_MS); a new
 * link is told the handle's model hint (KV_MODEL). libpool/kv.c's top
 * comment has the design.
 */
#include "libpool/kv_int.h"

#include "fabric/rendezvous.h"

/* ------------------------------------------------------------------ */
/* homes                                                                */

_Static_assert(POOL_KV_KEY_BYTES == TP_RENDEZVOUS_KEY_BYTES,
	       "the donors rank the keys the client hashes");

static uint64_t home_score(const struct kv_donor *d, const uint8_t *key)
{
	return tp_rendezvous_score(d->seed, key);
}

/* Donor i with score s ranks above donor j with score sj: the higher
 * score, ties to the greater name (fabric/rendezvous.h). */
static bool ranks_above(const struct kv_donors *t, uint32_t i, uint64_t s,
			uint32_t j, uint64_t sj)
{
	return tp_rendezvous_above(s, t->d[i].name, sj, t->d[j].name);
}

/* Indices in t (t->n >= 1) of key's home, the donor that ranks first,
 * and of its second choice, the one that ranks second (the replica's
 * donor; NO_DONOR with one donor). */
void kv_rank_of(const struct kv_donors *t, const uint8_t *key, uint32_t *home,
		uint32_t *second)
{
	uint32_t best = 0, next = NO_DONOR;
	uint64_t bs = home_score(&t->d[0], key), ns = 0;

	for (uint32_t i = 1; i < t->n; i++) {
		uint64_t s = home_score(&t->d[i], key);

		if (ranks_above(t, i, s, best, bs)) {
			next = best;
			ns = bs;
			best = i;
			bs = s;
		} else if (next == NO_DONOR || ranks_above(t, i, s, next, ns)) {
			next = i;
			ns = s;
		}
	}
	*home = best;
	*second = next;
}

/* Drops a reference to t; the last one drops the table's links. */
void kv_donors_put_locked(struct kv_donors *t)
{
	if (t && --t->refs == 0) {
		for (uint32_t i = 0; i < t->n; i++)
			pool_link_put(t->d[i].link);
		free(t);
	}
}

void kv_donors_put(struct pool_kv *kv, struct kv_donors *t)
{
	pthread_mutex_lock(&kv->lock);
	kv_donors_put_locked(t);
	pthread_mutex_unlock(&kv->lock);
}

/* Fetches DONORS and installs a new table, keeping the links of donor
 * incarnations that stay. */
int kv_donors_refresh(struct pool_kv *kv)
{
	struct wire_msg *rep = malloc(sizeof(*rep));
	const struct wire_donors_ok *ok;
	struct kv_donors *t = NULL, *old;
	int r;

	if (!rep)
		return -ENOMEM;
	r = pool_donors(kv->p, rep);
	if (r)
		goto out;
	ok = &rep->u.donors_ok;
	t = calloc(1, sizeof(*t) + ok->count * sizeof(t->d[0]));
	if (!t) {
		r = -ENOMEM;
		goto out;
	}
	t->refs = 1;
	t->membership = ok->membership;
	t->n = ok->count;
	for (uint32_t i = 0; i < t->n; i++) {
		struct kv_donor *d = &t->d[i];

		d->id = ok->donor[i].donor_id;
		d->epoch = ok->donor[i].epoch;
		memcpy(d->name, ok->donor[i].name, sizeof(d->name));
		memcpy(d->addr, ok->donor[i].addr, sizeof(d->addr));
		d->name[sizeof(d->name) - 1] = '\0';
		d->addr[sizeof(d->addr) - 1] = '\0';
		d->seed = tp_rendezvous_seed(d->name);
	}
	pthread_mutex_lock(&kv->lock);
	old = kv->donors;
	for (uint32_t i = 0; old && i < t->n; i++)
		for (uint32_t j = 0; j < old->n; j++)
			if (old->d[j].id == t->d[i].id &&
			    old->d[j].epoch == t->d[i].epoch) {
				t->d[i].link = old->d[j].link;
				if (t->d[i].link)
					pool_link_hold(t->d[i].link);
				t->d[i].retry_ms = __atomic_load_n(
					&old->d[j].retry_ms, __ATOMIC_RELAXED);
			}
	kv->donors = t;
	kv_donors_put_locked(old);
	pthread_mutex_unlock(&kv->lock);
	count(&kv->st_refresh, 1);
	pool_log(LOG_DEBUG, "kv: %u donors up membership=%" PRIu64, t->n,
		 t->membership);
out:
	free(rep);
	return r;
}

/* The current table, with a reference; fetched again first when due. */
struct kv_donors *kv_donors_get(struct pool_kv *kv)
{
	struct kv_donors *t;

	if (kv->cluster &&
	    now_ms() >= __atomic_load_n(&kv->refresh_at_ms, __ATOMIC_RELAXED) &&
	    !pthread_mutex_trylock(&kv->refresh_lock)) {
		uint64_t now = now_ms();

		if (now >=
		    __atomic_load_n(&kv->refresh_at_ms, __ATOMIC_RELAXED)) {
			int r = kv_donors_refresh(kv);
			uint64_t wait = r && kv->refresh_ms > KV_RETRY_MS
						? KV_RETRY_MS
						: kv->refresh_ms;

			__atomic_store_n(&kv->refresh_at_ms, now_ms() + wait,
					 __ATOMIC_RELAXED);
		}
		pthread_mutex_unlock(&kv->refresh_lock);
	}
	pthread_mutex_lock(&kv->lock);
	t = kv->donors;
	if (t)
		t->refs++;
	pthread_mutex_unlock(&kv->lock);
	return t;
}

/*
 * A donor's link failed: fetch the donor list again soon, and forget the
 * link (dropping the table's reference) if it is still failed link lk
 * (NULL: whatever link d has).
 */
void kv_donor_failed(struct pool_kv *kv, struct kv_donor *d, struct plink *lk)
{
	uint64_t now = now_ms();
	struct plink *old = NULL;

	__atomic_store_n(&d->retry_ms, now + KV_RETRY_MS, __ATOMIC_RELAXED);
	pthread_mutex_lock(&kv->lock);
	if (!lk || d->link == lk) {
		old = d->link;
		d->link = NULL;
	}
	pthread_mutex_unlock(&kv->lock);
	pool_link_put(old);
	if (kv->cluster)
		__atomic_store_n(&kv->refresh_at_ms, now, __ATOMIC_RELAXED);
}

/* d's link with a reference for the caller, or NULL. */
static struct plink *donor_link_hold(struct pool_kv *kv, struct kv_donor *d)
{
	struct plink *lk;

	pthread_mutex_lock(&kv->lock);
	lk = d->link;
	if (lk)
		pool_link_hold(lk);
	pthread_mutex_unlock(&kv->lock);
	return lk;
}

/*
 * Tells lk's memd the handle's model hint (KV_MODEL), if it has one and
 * the memd speaks protocol 3. A refusal is logged, not an error: the
 * hint only changes memd's reports. The caller holds no link's control
 * connection.
 */
void kv_send_model(struct pool_kv *kv, struct plink *lk, const char *donor)
{
	struct wire_msg *req, *rep;
	char text[WIRE_MSG_MAX] = "";
	int r;

	if (!kv->hint_tps)
		return;
	if (pool_link_proto(lk) < 3) {
		pool_log(LOG_NOTICE,
			 "kv: donor=%s speaks protocol %u: no model hint "
			 "(memd.conf's model applies)",
			 donor, pool_link_proto(lk));
		return;
	}
	req = calloc(1, sizeof(*req));
	rep = calloc(1, sizeof(*rep));
	if (!req || !rep) {
		free(req);
		free(rep);
		return;
	}
	req->type = WIRE_KV_MODEL;
	req->u.kv_model.prefill_tokens_per_s = kv->hint_tps;
	req->u.kv_model.bytes_per_token = kv->hint_bpt;
	r = pool_link_call(lk, req, rep, WIRE_KV_MODEL_OK, text, sizeof(text));
	if (r)
		pool_log(LOG_WARNING,
			 "kv: donor=%s refused the model hint err=%s (%s)",
			 donor, strerror(-r), text);
	free(req);
	free(rep);
}

/* The link to donor d, opened on first use, with a reference for the
 * caller (pool_link_put). 0 or -ENOTCONN. */
int kv_donor_link(struct pool_kv *kv, struct kv_donor *d, struct plink **out)
{
	struct plink *lk = donor_link_hold(kv, d), *old;
	int r;

	*out = NULL;
	if (lk && !pool_link_is_lost(lk)) {
		*out = lk;
		return 0;
	}
	if (lk) {
		kv_donor_failed(kv, d, lk);
		pool_link_put(lk);
	}
	if (now_ms() < __atomic_load_n(&d->retry_ms, __ATOMIC_RELAXED))
		return -ENOTCONN;
	r = pool_link_get(kv->p, d->id, d->epoch, d->addr, &lk);
	if (r) {
		pool_log(LOG_WARNING, "kv: donor=%s addr=%s unreachable err=%s",
			 d->name, d->addr, strerror(-r));
		kv_donor_failed(kv, d, NULL);
		return -ENOTCONN;
	}
	/* pool_link_get's reference goes to the table, one more to us */
	pool_link_hold(lk);
	pthread_mutex_lock(&kv->lock);
	old = d->link;
	d->link = lk;
	pthread_mutex_unlock(&kv->lock);
	pool_link_put(old);
	kv_send_model(kv, lk, d->name);
	*out = lk;
	return 0;
}
