// SPDX-License-Identifier: MIT
/*
 * libpool/kv_run.c - the KV tier's client: running one op, a run over
 * the current donor table and the retry when a donor answered ESTALE.
 *
 * libpool/kv.c's top comment has the design.
 */
#include "libpool/kv_int.h"

/* ------------------------------------------------------------------ */
/* running an op                                                        */

static ssize_t kv_run_once(struct pool_kv *kv, struct pool_kv_op *op,
			   uint64_t *stale)
{
	struct kv_run r = { .kv = kv, .op = op };
	ssize_t ret;
	int *own = NULL;

	r.tail = &r.batches;
	r.status = op->status;
	if (op->again)
		memset(op->again, 0, op->n * sizeof(*op->again));
	if (!r.status && op->kind != KV_EXISTS) {
		r.status = own = malloc(op->n * sizeof(*own));
		if (!own)
			return -ENOMEM;
	}
	r.req = calloc(1, sizeof(*r.req));
	r.rep = malloc(sizeof(*r.rep));
	r.t = kv_donors_get(kv);
	r.payload = pool_slab_bytes(kv->p) - KV_HDR;
	r.xfer = pool_xfer_bytes(kv->p);
	r.timeout_ms = pool_timeout_ms(kv->p);
	/* without it, gets hash the values after their reads, as over RMA */
	if (op->kind == KV_GET)
		r.xs = XXH3_createState();
	if (!r.req || !r.rep) {
		ret = -ENOMEM;
		goto out;
	}
	ret = kv_run_group(&r);
	if (ret)
		goto out;
	if (r.status)
		for (size_t i = 0; i < op->n; i++)
			r.status[i] = op->kind == KV_PUT   ? -ENOTCONN
				      : op->kind == KV_GET ? -ENOENT
							   : -ENOTCONN;
	if (op->kind == KV_GET)
		for (size_t i = 0; i < op->n; i++)
			op->out_lens[i] = 0;
	switch (op->kind) {
	case KV_PUT:
		ret = kv_run_put(&r);
		break;
	case KV_GET:
		ret = kv_run_get(&r);
		break;
	case KV_EXISTS:
		ret = kv_run_exists(&r);
		break;
	default:
		ret = kv_run_simple(&r);
		break;
	}
	if (ret == -ENOMEM) {
		/* Batches already posted settle before we return. */
		for (struct kv_batch *b = r.batches; b; b = b->next)
			kv_batch_wait(&r, b);
	}
out:
	while (r.batches) {
		struct kv_batch *b = r.batches;

		r.batches = b->next;
		kv_batch_free(b);
	}
	/* the membership the op was routed by, when a donor refused it */
	*stale = r.stale && r.t ? r.t->membership : 0;
	if (r.t)
		kv_donors_put(kv, r.t);
	free(r.home);
	free(r.second);
	kv_groups_free(&r.hg);
	free(r.csum);
	XXH3_freeState(r.xs);
	free(r.req);
	free(r.rep);
	free(own);
	return ret;
}

/*
 * A donor answered ESTALE (protocol 5): the table the op was routed by
 * is older than the donor's list. Fetch the list again (unless another
 * thread already did) and run the op once more on it: gets, exists and
 * puts (idempotent) as a whole, a key that the first run stored staying
 * stored (0) when the second finds it present; deletes as a whole too, a
 * key that the first run deleted staying deleted (0) when the second
 * finds it absent;
 * pins and unpins only for the keys refused. The list is fetched again
 * until it is newer than the refused one (the registry gives a new list
 * out only once every donor has confirmed it), KV_STALE_WAIT_MS at most.
 * A second refusal leaves those keys -EAGAIN (try again): gets miss. docs/kv.md, "Donors that come and go".
 */
static ssize_t kv_run_fresh(struct pool_kv *kv, struct pool_kv_op *op)
{
	uint64_t stale = 0, again = 0;
	int *first = NULL, *own = NULL;
	struct pool_kv_op sub;
	ssize_t ret;

	if (kv->cluster && op->kind != KV_EXISTS && !op->status) {
		/* the retry below needs the statuses */
		op->status = own = malloc(op->n * sizeof(*own));
		if (!own)
			return -ENOMEM;
	}
	ret = kv_run_once(kv, op, &stale);
	if (!stale || ret < 0)
		goto out;
	pthread_mutex_lock(&kv->refresh_lock);
	/* The donor has heard of a newer list, which the registry gives
	 * out once every donor has (protocol 6): ask again until it does,
	 * KV_STALE_WAIT_MS at most (a donor out of touch holds it up to 3
	 * report intervals; then the keys are -EAGAIN, as below). */
	for (uint64_t until = now_ms() + KV_STALE_WAIT_MS;;) {
		struct timespec ts = { 0, 10 * 1000000L };

		pthread_mutex_lock(&kv->lock);
		again = kv->donors ? kv->donors->membership : 0;
		pthread_mutex_unlock(&kv->lock);
		if (again != stale || now_ms() >= until)
			break;
		if (!kv_donors_refresh(kv)) {
			__atomic_store_n(&kv->refresh_at_ms,
					 now_ms() + kv->refresh_ms,
					 __ATOMIC_RELAXED);
			pthread_mutex_lock(&kv->lock);
			again = kv->donors ? kv->donors->membership : 0;
			pthread_mutex_unlock(&kv->lock);
			if (again != stale)
				break;
		}
		nanosleep(&ts, NULL);
	}
	pthread_mutex_unlock(&kv->refresh_lock);
	pool_log(LOG_INFO,
		 "kv: donor list membership=%" PRIu64
		 " was stale: fetched again, op retried",
		 stale);
	if (op->kind == KV_PIN || op->kind == KV_UNPIN) {
		struct pool_kv_key *ks = malloc(op->n * sizeof(*ks));
		size_t *at = malloc(op->n * sizeof(*at)), m = 0;

		first = malloc(op->n * sizeof(*first));
		for (size_t i = 0; ks && at && first && i < op->n; i++)
			if (op->status[i] == -ESTALE) {
				ks[m] = op->keys[i];
				at[m++] = i;
			}
		sub = *op;
		sub.n = m;
		sub.keys = ks;
		sub.status = first;
		if (m && kv_run_once(kv, &sub, &again) >= 0)
			for (size_t i = 0; i < m; i++)
				op->status[at[i]] = first[i];
		free(ks);
		free(at);
		ret = 0;
		for (size_t i = 0; i < op->n; i++)
			ret += !op->status[i];
		goto out;
	}
	if (op->kind == KV_DELETE || op->kind == KV_PUT) {
		first = malloc(op->n * sizeof(*first));
		if (!first)
			goto out;
		memcpy(first, op->status, op->n * sizeof(*first));
	}
	ret = kv_run_once(kv, op, &again);
	if (ret >= 0 && first) {
		/* what the first run did stays done: deleted (the second
		 * finds the key absent), or stored (present) */
		int done = op->kind == KV_DELETE ? -ENOENT : -EEXIST;

		ret = 0;
		for (size_t i = 0; i < op->n; i++) {
			if (op->status[i] == done && !first[i])
				op->status[i] = 0;
			ret += !op->status[i] ||
			       (op->kind == KV_PUT && op->status[i] == -EEXIST);
		}
	}
out:
	for (size_t i = 0; op->status && op->kind != KV_EXISTS && i < op->n;
	     i++)
		if (op->status[i] == -ESTALE)
			op->status[i] = -EAGAIN;
	if (own)
		op->status = NULL;
	free(own);
	free(first);
	return ret;
}

/* The first pause before a put's keys answered -EAGAIN are tried again;
 * it doubles each time, up to KV_AGAIN_MAX_MS. */
#define KV_AGAIN_MS 2
#define KV_AGAIN_MAX_MS 128

/*
 * Runs op (kv_run_fresh). A put's keys whose home answered -EAGAIN in
 * the reserve (memd has no free slab for them yet, but one is being
 * zeroed: docs/kv.md) are put again, just those, after 2, 4, 8 ...
 * ms, until the handle's timeout from the op's start; those still
 * refused then stay -EAGAIN. memd does not wait for the slab itself: its
 * control thread serves every client.
 */
ssize_t kv_run_op(struct pool_kv *kv, struct pool_kv_op *op)
{
	uint64_t until = now_ms() + (uint64_t)pool_timeout_ms(kv->p);
	struct pool_kv_op sub;
	struct pool_kv_key *ks = NULL;
	const void **vs = NULL;
	size_t *ls = NULL, *at = NULL;
	int *own = NULL, *st = NULL;
	bool *again = NULL, *sa = NULL;
	long pause = KV_AGAIN_MS;
	ssize_t ret;

	if (op->kind != KV_PUT)
		return kv_run_fresh(kv, op);
	if (!op->status)
		op->status = own = malloc(op->n * sizeof(*own));
	again = calloc(op->n, sizeof(*again));
	if (!op->status || !again) {
		ret = -ENOMEM;
		goto out;
	}
	op->again = again;
	ret = kv_run_fresh(kv, op);
	op->again = NULL;
	while (ret >= 0) {
		size_t m = 0;
		struct timespec ts = { 0, pause * 1000000L };

		for (size_t i = 0; i < op->n; i++)
			m += again[i] && op->status[i] == -EAGAIN;
		if (!m || now_ms() + (uint64_t)pause >= until)
			break;
		if (!ks) {
			ks = malloc(op->n * sizeof(*ks));
			vs = malloc(op->n * sizeof(*vs));
			ls = malloc(op->n * sizeof(*ls));
			at = malloc(op->n * sizeof(*at));
			st = malloc(op->n * sizeof(*st));
			sa = malloc(op->n * sizeof(*sa));
			if (!ks || !vs || !ls || !at || !st || !sa)
				break; /* they stay -EAGAIN */
		}
		m = 0;
		for (size_t i = 0; i < op->n; i++)
			if (again[i] && op->status[i] == -EAGAIN) {
				ks[m] = op->keys[i];
				vs[m] = op->values[i];
				ls[m] = op->lens[i];
				at[m++] = i;
			}
		nanosleep(&ts, NULL);
		if (pause < KV_AGAIN_MAX_MS)
			pause *= 2;
		sub = *op;
		sub.n = m;
		sub.keys = ks;
		sub.values = vs;
		sub.lens = ls;
		sub.status = st;
		sub.again = sa;
		if (kv_run_fresh(kv, &sub) < 0)
			break; /* they stay -EAGAIN */
		for (size_t j = 0; j < m; j++) {
			op->status[at[j]] = st[j];
			again[at[j]] = sa[j];
		}
	}
	if (ret >= 0) {
		ret = 0;
		for (size_t i = 0; i < op->n; i++)
			ret += !op->status[i] || op->status[i] == -EEXIST;
	}
out:
	if (own)
		op->status = NULL;
	free(own);
	free(again);
	free(ks);
	free(vs);
	free(ls);
	free(at);
	free(st);
	free(sa);
	return ret;
}
