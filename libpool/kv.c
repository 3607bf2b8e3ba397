// SPDX-License-Identifier: MIT
/*
 * libpool/kv.c - the KV tier's client (tidepool/kv.h, docs/kv.md): the
 * handle, its public calls and worker threads. libpool/kv_int.h lists the
 * other files, one concern each.
 *
 * DESIGN
 * A KV handle (struct pool_kv) sits on a pool session and talks to each
 * key's home donor over the session's link to it (pool_link.c opens and keeps
 * links; libpool/kv*.c only ask for them: pool_link_get, _call, _post,
 * _wait). Links are counted: each donor table entry holds a reference
 * to its link, and each lane and batch one more (pool_link_hold) while it
 * uses the link, dropped with pool_link_put when the donor is forgotten
 * (kv_donor_failed, the table freed) or the batch freed, so pool_link.c reaps a
 * failed link no batch is on. The homes: a standalone session has one,
 * its memd; a cluster session knows the donors that are up (DONORS at
 * the registry, kept in a refcounted, immutable table that is fetched
 * again every refresh_ms, and soon after a link to a donor fails) and
 * picks for each key the donor with the highest score XXH3-64(key,
 * seed = XXH3-64(name)):
 * rendezvous hashing, so a key's home moves only when its donor leaves
 * or a donor with a higher score joins. A donor whose link failed is not
 * tried again for KV_RETRY_MS: its keys are misses (get) or -ENOTCONN
 * (put) at once.
 *
 * One operation (struct pool_kv_op, a batch of keys of one kind) runs
 * in one thread: the caller's for the synchronous calls, a "pool-kv"
 * worker's for the asynchronous ones. It groups the keys by home and
 * cuts each group into wire batches of at most WIRE_KV_BATCH keys. The
 * batches go out in rounds: a round sends the next request to every
 * donor at once (pool_link_send, in ascending order of link address),
 * then takes the replies (pool_link_recv), so a batch's round trips to
 * different donors overlap (struct kv_lane: one donor's part of a pass).
 *
 *   put     per batch KV_RESERVE (XXH3-64 of the values computed while
 *           the round's requests are out), then the RMA
 *           writes of every chunk (a 64-byte header from the batch's
 *           header buffer, the payload straight from the caller's value,
 *           in pieces of at most the session's xfer size), all posted
 *           before the next batch's reserve; then wait for everything and
 *           KV_COMMIT, per batch, the keys whose writes all succeeded.
 *   get     per batch KV_LOOKUP (read leases), then the RMA reads of
 *           every chunk's header into the batch's header buffer and of
 *           its payload straight into the caller's buffer, posted before
 *           the next batch's lookup; then wait, verify every header
 *           (magic, tenant, key, generation, length, chunk, nchunks,
 *           checksum), XXH3-64 of the value and the lease's deadline, and
 *           KV_DONE per batch. Anything wrong is a miss. A piece that
 *           completed as it was posted (the same-host path reads the
 *           slab's file in pool_link_post) is hashed right then, while
 *           its bytes are in cache; the check compares that sum later.
 *   exists  KV_EXISTS per batch, in key order within a home; the answer
 *           is the smallest index of a key some home said is missing.
 *   delete, pin, unpin: one request per batch, the statuses as memd
 *           gives them.
 *
 * Replicas (opts.replicas 2, two donors or more up): a key's second
 * copy lives on its second choice, the donor that ranks second. Each op
 * then runs a second pass over the second choices (groups made by
 * kv_group_by, batches flagged replica): put reserves and writes there
 * after the home's reservation (a copy already there is deleted and
 * reserved again), commits the replica before the home and deletes it
 * again if the home does not commit; get reads there the keys the home
 * missed; exists alternates home and replica passes; delete goes to the
 * replica first and keeps the home copy when that fails. The rule: a
 * replica holds its home's bytes, the bytes the home is about to
 * commit, or nothing (docs/kv.md, "Replicas").
 *
 * The model hint (opts, else LIBPOOL_KV_PREFILL_TOKENS_PER_S and
 * LIBPOOL_KV_BYTES_PER_TOKEN; docs/capacity.md) goes to a memd as one
 * KV_MODEL call when the handle takes a link to it (kv_donor_link, or the
 * standalone link at open), before any batch is sent on it, and only on
 * links that negotiated protocol 3. A refusal is logged; it only changes
 * memd's reports.
 *
 * A reply's location list is bounded (WIRE_KV_MAX_LOCS); keys that did
 * not fit (-ENOBUFS) go into the next batch. Posted fab_ops live in their
 * batch until the whole op has waited for them; a transfer that times out
 * fails its link (pool_link.c closes the endpoint, which completes it), so no
 * buffer is touched after the operation returns.
 *
 * Threads: any number of callers; kv->lock guards the donor table
 * pointer and the op list; kv->qlock the work queue and completions;
 * refresh_lock makes one thread at a time fetch DONORS. Links are found
 * through the table's atomic link pointers (a link lives until
 * pool_close, so a stale pointer is never dangling: at worst lost).
 */
#ifdef TP_LIBPOOL_SHARED
/* libpool.so: pool_kv_open is pool_kv_open@@LIBPOOL_0.2 (see "ABI" at
 * pool_kv_open_0_1); the object defines no plain pool_kv_open. */
#define pool_kv_open pool_kv_open_0_2
#endif
#include "libpool/kv_int.h"

#include <stdio.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <sodium.h>

#include "fabric/dlist.h"
#include "libpool/deadline.h"
#include "libpool/thread_role.h"

static const char kv_salt_tag[] = "tidepool kv salt v1";

/* ------------------------------------------------------------------ */
/* keys                                                                 */

static void le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Hashes n tokens, little-endian u32 each, into st. */
static void hash_tokens(crypto_generichash_state *st, const uint32_t *tok,
			size_t n)
{
	uint8_t buf[1024];
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		le32_put(buf + k, tok[i]);
		k += 4;
		if (k == sizeof(buf)) {
			crypto_generichash_update(st, buf, k);
			k = 0;
		}
	}
	if (k)
		crypto_generichash_update(st, buf, k);
}

ssize_t pool_kv_prefix_keys(const char *tenant, const char *model,
			    const uint32_t *tokens, size_t ntokens,
			    size_t chunk_tokens, struct pool_kv_key *keys,
			    size_t max)
{
	uint8_t prev[POOL_KV_KEY_BYTES], len[4];
	crypto_generichash_state st;
	size_t nchunks, i;

	if (!chunk_tokens)
		chunk_tokens = POOL_KV_CHUNK_TOKENS;
	nchunks = ntokens / chunk_tokens;
	if (nchunks > max)
		nchunks = max;
	if (!nchunks)
		return 0;
	if (!tenant || !model || !tokens || !keys)
		return -EINVAL;
	if (sodium_init() < 0)
		return -ENOMEM;
	crypto_generichash_init(&st, NULL, 0, sizeof(prev));
	crypto_generichash_update(&st, (const uint8_t *)kv_salt_tag,
				  sizeof(kv_salt_tag) - 1);
	le32_put(len, (uint32_t)strlen(tenant));
	crypto_generichash_update(&st, len, 4);
	crypto_generichash_update(&st, (const uint8_t *)tenant, strlen(tenant));
	le32_put(len, (uint32_t)strlen(model));
	crypto_generichash_update(&st, len, 4);
	crypto_generichash_update(&st, (const uint8_t *)model, strlen(model));
	crypto_generichash_final(&st, prev, sizeof(prev));
	for (i = 0; i < nchunks; i++) {
		crypto_generichash_init(&st, NULL, 0, sizeof(prev));
		crypto_generichash_update(&st, prev, sizeof(prev));
		hash_tokens(&st, tokens + i * chunk_tokens, chunk_tokens);
		crypto_generichash_final(&st, keys[i].b, POOL_KV_KEY_BYTES);
		memcpy(prev, keys[i].b, sizeof(prev));
	}
	return (ssize_t)nchunks;
}

/* ------------------------------------------------------------------ */
/* workers                                                              */

static void *kv_worker(void *arg)
{
	struct pool_kv *kv = arg;

	pthread_setname_np(pthread_self(), "pool-kv");
	pool_thread_mark_internal();
	pthread_mutex_lock(&kv->qlock);
	for (;;) {
		struct pool_kv_op *op = kv->qhead;
		uint64_t one = 1;
		ssize_t res;

		if (!op) {
			if (kv->stop)
				break;
			pthread_cond_wait(&kv->qcond, &kv->qlock);
			continue;
		}
		kv->qhead = op->qnext;
		if (!kv->qhead)
			kv->qtail = NULL;
		pthread_mutex_unlock(&kv->qlock);
		res = kv_run_op(kv, op);
		pthread_mutex_lock(&kv->qlock);
		op->result = res;
		op->done = true;
		pthread_cond_broadcast(&kv->donecond);
		if (write(kv->efd, &one, sizeof(one)) < 0) {
			/* the counter is far from full: cannot happen */
		}
	}
	pthread_mutex_unlock(&kv->qlock);
	return NULL;
}

static void kv_stop_workers(struct pool_kv *kv)
{
	pthread_mutex_lock(&kv->qlock);
	kv->stop = true;
	pthread_cond_broadcast(&kv->qcond);
	pthread_mutex_unlock(&kv->qlock);
	for (unsigned i = 0; i < kv->nthreads; i++)
		pthread_join(kv->threads[i], NULL);
	kv->nthreads = 0;
}

static bool kv_is_open(const struct pool_kv *kv)
{
	return kv && __atomic_load_n(&kv->magic, __ATOMIC_ACQUIRE) == KV_OPEN;
}

static void kv_release(struct pool_kv *kv)
{
	if (!kv_is_open(kv))
		return;
	__atomic_store_n(&kv->magic, KV_CLOSED, __ATOMIC_RELEASE);
	kv_stop_workers(kv);
	free(kv->threads);
	kv->threads = NULL;
	while (kv->ops) {
		struct pool_kv_op *op = kv->ops;

		kv->ops = op->next;
		free(op);
	}
	if (kv->efd >= 0)
		close(kv->efd);
	kv->efd = -1;
	kv_donors_put_locked(kv->donors);
	kv->donors = NULL;
	pthread_cond_destroy(&kv->qcond);
	pthread_cond_destroy(&kv->donecond);
	pthread_mutex_destroy(&kv->qlock);
	pthread_mutex_destroy(&kv->refresh_lock);
	pthread_mutex_destroy(&kv->lock);
}

static void kv_destroy(struct pool_attached *a)
{
	struct pool_kv *kv = (struct pool_kv *)a;

	kv_release(kv);
	free(kv);
}

/* ------------------------------------------------------------------ */
/* public                                                               */

/* One field of the model hint from the environment: 0 unset (or empty),
 * 1 set into *v, -EINVAL (logged) not a number in 1 .. max. */
static int hint_env(const char *name, uint64_t max, uint64_t *v)
{
	const char *env = getenv(name);
	char *end;

	if (!env || !*env)
		return 0;
	errno = 0;
	*v = strtoull(env, &end, 10);
	if (errno || *end || *env == '-' || *v < 1 || *v > max) {
		pool_log(LOG_ERR, "kv: %s='%s' is not 1 to %" PRIu64, name, env,
			 max);
		return -EINVAL;
	}
	return 1;
}

/* The model hint: opts' fields, else the environment's. 0 or -EINVAL. */
static int hint_of(const struct pool_kv_opts *o, uint32_t *tps, uint64_t *bpt)
{
	uint64_t t = o->prefill_tokens_per_s, b = o->bytes_per_token;
	int rt, rb;

	if (!t && !b) {
		rt = hint_env("LIBPOOL_KV_PREFILL_TOKENS_PER_S",
			      POOL_KV_PREFILL_TOKENS_PER_S_MAX, &t);
		rb = hint_env("LIBPOOL_KV_BYTES_PER_TOKEN",
			      POOL_KV_BYTES_PER_TOKEN_MAX, &b);
		if (rt < 0 || rb < 0)
			return -EINVAL;
		if (rt != rb) {
			pool_log(LOG_ERR,
				 "kv: set both LIBPOOL_KV_PREFILL_TOKENS_PER_S "
				 "and LIBPOOL_KV_BYTES_PER_TOKEN, or neither");
			return -EINVAL;
		}
	} else if (!t || !b || t > POOL_KV_PREFILL_TOKENS_PER_S_MAX ||
		   b > POOL_KV_BYTES_PER_TOKEN_MAX) {
		pool_log(LOG_ERR,
			 "kv: model hint prefill_tokens_per_s=%" PRIu64
			 " bytes_per_token=%" PRIu64
			 ": give both, 1 to %u and 1 to %llu",
			 t, b, POOL_KV_PREFILL_TOKENS_PER_S_MAX,
			 POOL_KV_BYTES_PER_TOKEN_MAX);
		return -EINVAL;
	}
	*tps = (uint32_t)t;
	*bpt = b;
	return 0;
}

_Static_assert(POOL_KV_PREFILL_TOKENS_PER_S_MAX == WIRE_KV_TPS_MAX &&
		       POOL_KV_BYTES_PER_TOKEN_MAX == WIRE_KV_BPT_MAX,
	       "the hint's bounds are memd's");

int pool_kv_open(struct pool *p, const struct pool_kv_opts *opts,
		 struct pool_kv **out)
{
	struct pool_kv_opts o = { 0 };
	pthread_condattr_t ca;
	struct pool_kv *kv;
	uint32_t hint_tps = 0;
	uint64_t hint_bpt = 0;
	int r;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!p)
		return -EINVAL;
	if (opts)
		o = *opts;
	if (o.nthreads > KV_MAX_THREADS || o.replicas > KV_MAX_REPLICAS)
		return -EINVAL;
	if (hint_of(&o, &hint_tps, &hint_bpt))
		return -EINVAL;
	if (sodium_init() < 0)
		return -ENOMEM;
	kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->p = p;
	kv->cluster = pool_session_is_cluster(p);
	kv->refresh_ms = o.refresh_ms ? o.refresh_ms : KV_DEFAULT_REFRESH_MS;
	kv->lease_ms = o.lease_ms ? o.lease_ms : KV_DEFAULT_LEASE_MS;
	kv->replicas = o.replicas ? o.replicas : 1;
	kv->hint_tps = hint_tps;
	kv->hint_bpt = hint_bpt;
	kv->efd = -1;
	kv->att.destroy = kv_destroy;
	pthread_mutex_init(&kv->lock, NULL);
	pthread_mutex_init(&kv->refresh_lock, NULL);
	pthread_mutex_init(&kv->qlock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&kv->qcond, &ca);
	pthread_cond_init(&kv->donecond, &ca);
	pthread_condattr_destroy(&ca);
	kv->magic = KV_OPEN;

	if (kv->cluster) {
		r = kv_donors_refresh(kv);
		if (r)
			goto fail;
		kv->refresh_at_ms = now_ms() + kv->refresh_ms;
	} else {
		struct plink *lk;

		r = pool_link_get(p, 0, 0, NULL, &lk);
		if (r)
			goto fail;
		kv->donors = calloc(1, sizeof(*kv->donors) +
					       sizeof(kv->donors->d[0]));
		if (!kv->donors) {
			pool_link_put(lk);
			r = -ENOMEM;
			goto fail;
		}
		kv->donors->refs = 1;
		kv->donors->n = 1;
		kv->donors->d[0].link = lk;
		snprintf(kv->donors->d[0].name, sizeof(kv->donors->d[0].name),
			 "standalone");
		snprintf(kv->donors->d[0].addr, sizeof(kv->donors->d[0].addr),
			 "%s", pool_link_addr(lk));
		kv_send_model(kv, lk, "standalone");
	}
	kv->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (kv->efd < 0) {
		r = -errno;
		goto fail;
	}
	o.nthreads = o.nthreads ? o.nthreads : KV_DEFAULT_THREADS;
	kv->threads = calloc(o.nthreads, sizeof(*kv->threads));
	if (!kv->threads) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < o.nthreads; i++) {
		r = pthread_create(&kv->threads[i], NULL, kv_worker, kv);
		if (r) {
			r = -r;
			goto fail;
		}
		kv->nthreads++;
	}
	pool_attach(p, &kv->att);
	*out = kv;
	return 0;
fail:
	kv_release(kv);
	free(kv);
	return r;
}

#ifdef TP_LIBPOOL_SHARED
/*
 * ABI. Up to 0.1.0 struct pool_kv_opts held four unsigned (nthreads,
 * refresh_ms, lease_ms, replicas); 0.2.0 appended the model hint. A
 * program linked against 0.1 calls pool_kv_open@LIBPOOL_0.1 with the
 * short struct: this reads only those fields (no hint; the environment's
 * LIBPOOL_KV_* still apply). pool_kv_open@@LIBPOOL_0.2 is pool_kv_open
 * above, named pool_kv_open_0_2 in this object (top of file); libpool.map
 * lists the name in both nodes.
 */
struct pool_kv_opts_0_1 {
	unsigned nthreads, refresh_ms, lease_ms, replicas;
};

POOL_API int pool_kv_open_0_1(struct pool *p,
			      const struct pool_kv_opts_0_1 *opts,
			      struct pool_kv **out);
__asm__(".symver pool_kv_open_0_1,pool_kv_open@LIBPOOL_0.1");
__asm__(".symver pool_kv_open_0_2,pool_kv_open@@LIBPOOL_0.2");

int pool_kv_open_0_1(struct pool *p, const struct pool_kv_opts_0_1 *opts,
		     struct pool_kv **out)
{
	struct pool_kv_opts o = { 0 };

	if (!opts)
		return pool_kv_open(p, NULL, out);
	o.nthreads = opts->nthreads;
	o.refresh_ms = opts->refresh_ms;
	o.lease_ms = opts->lease_ms;
	o.replicas = opts->replicas;
	return pool_kv_open(p, &o, out);
}
#endif

void pool_kv_close(struct pool_kv *kv)
{
	kv_release(kv);
}

int pool_kv_eventfd(struct pool_kv *kv)
{
	if (!kv_is_open(kv))
		return kv ? -EBADF : -EINVAL;
	return kv->efd;
}

/* Checks what every call needs; 0 or the call-level error. */
static int check_call(const struct pool_kv *kv, size_t n,
		      const struct pool_kv_key *keys)
{
	if (!kv)
		return -EINVAL;
	if (!kv_is_open(kv))
		return -EBADF;
	if (!keys || n == 0 || n > POOL_KV_BATCH_MAX)
		return -EINVAL;
	return 0;
}

static ssize_t run_sync(struct pool_kv_op *op)
{
	int r = check_call(op->kv, op->n, op->keys);

	if (r)
		return r;
	return kv_run_op(op->kv, op);
}

static int submit(const struct pool_kv_op *tmpl, struct pool_kv_op **out)
{
	struct pool_kv *kv = tmpl->kv;
	struct pool_kv_op *op;
	int r;

	if (!out)
		return -EINVAL;
	*out = NULL;
	r = check_call(kv, tmpl->n, tmpl->keys);
	if (r)
		return r;
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = *tmpl;
	pthread_mutex_lock(&kv->lock);
	TP_DLIST_PUSH(kv->ops, op, prev, next);
	pthread_mutex_unlock(&kv->lock);
	pthread_mutex_lock(&kv->qlock);
	TP_QUEUE_APPEND(kv->qhead, kv->qtail, op, qnext);
	pthread_cond_signal(&kv->qcond);
	pthread_mutex_unlock(&kv->qlock);
	*out = op;
	return 0;
}

#define PUT_OP(kv_, n_, keys_, values_, lens_, status_)                        \
	{                                                                      \
		.kv = (kv_), .kind = KV_PUT, .n = (n_), .keys = (keys_),       \
		.values = (values_), .lens = (lens_), .status = (status_)      \
	}
#define GET_OP(kv_, n_, keys_, bufs_, caps_, lens_, status_)                   \
	{                                                                      \
		.kv = (kv_), .kind = KV_GET, .n = (n_), .keys = (keys_),       \
		.bufs = (bufs_), .caps = (caps_), .out_lens = (lens_),         \
		.status = (status_)                                            \
	}
#define KEY_OP(kv_, kind_, n_, keys_, status_)                                 \
	{                                                                      \
		.kv = (kv_), .kind = (kind_), .n = (n_), .keys = (keys_),      \
		.status = (status_)                                            \
	}

static bool put_args_ok(const void *const *values, const size_t *lens)
{
	return values && lens;
}

static bool get_args_ok(void *const *bufs, const size_t *caps, size_t *lens,
			int *status)
{
	return bufs && caps && lens && status;
}

ssize_t pool_kv_put(struct pool_kv *kv, size_t n,
		    const struct pool_kv_key *keys, const void *const *values,
		    const size_t *lens, int *status)
{
	struct pool_kv_op op = PUT_OP(kv, n, keys, values, lens, status);

	if (!put_args_ok(values, lens))
		return kv && !kv_is_open(kv) ? -EBADF : -EINVAL;
	return run_sync(&op);
}

int pool_kv_put_async(struct pool_kv *kv, size_t n,
		      const struct pool_kv_key *keys, const void *const *values,
		      const size_t *lens, int *status, struct pool_kv_op **out)
{
	struct pool_kv_op op = PUT_OP(kv, n, keys, values, lens, status);

	if (!put_args_ok(values, lens))
		return kv && !kv_is_open(kv) ? -EBADF : -EINVAL;
	return submit(&op, out);
}

ssize_t pool_kv_get(struct pool_kv *kv, size_t n,
		    const struct pool_kv_key *keys, void *const *bufs,
		    const size_t *caps, size_t *lens, int *status)
{
	struct pool_kv_op op = GET_OP(kv, n, keys, bufs, caps, lens, status);

	if (!get_args_ok(bufs, caps, lens, status))
		return kv && !kv_is_open(kv) ? -EBADF : -EINVAL;
	return run_sync(&op);
}

ssize_t pool_kv_get_to(struct pool_kv *kv, size_t n,
		       const struct pool_kv_key *keys,
		       struct pool_kv_sink *sink, const size_t *caps,
		       size_t *lens, int *status)
{
	struct pool_kv_op op = GET_OP(kv, n, keys, NULL, caps, lens, status);

	if (!sink || !sink->begin || !sink->end || !caps || !lens || !status)
		return kv && !kv_is_open(kv) ? -EBADF : -EINVAL;
	op.sink = sink;
	return run_sync(&op);
}

int pool_kv_get_async(struct pool_kv *kv, size_t n,
		      const struct pool_kv_key *keys, void *const *bufs,
		      const size_t *caps, size_t *lens, int *status,
		      struct pool_kv_op **out)
{
	struct pool_kv_op op = GET_OP(kv, n, keys, bufs, caps, lens, status);

	if (!get_args_ok(bufs, caps, lens, status))
		return kv && !kv_is_open(kv) ? -EBADF : -EINVAL;
	return submit(&op, out);
}

ssize_t pool_kv_exists(struct pool_kv *kv, size_t n,
		       const struct pool_kv_key *keys)
{
	struct pool_kv_op op = KEY_OP(kv, KV_EXISTS, n, keys, NULL);

	return run_sync(&op);
}

int pool_kv_exists_async(struct pool_kv *kv, size_t n,
			 const struct pool_kv_key *keys,
			 struct pool_kv_op **out)
{
	struct pool_kv_op op = KEY_OP(kv, KV_EXISTS, n, keys, NULL);

	return submit(&op, out);
}

/*
 * pool_kv_delete, pool_kv_pin and pool_kv_unpin and their _async forms
 * (include/tidepool/kv.h): the keys and a status each, one KEY_OP run to
 * completion or submitted.
 */
#define KV_KEYS_VERB(verb, kind)                                               \
	ssize_t pool_kv_##verb(struct pool_kv *kv, size_t n,                   \
			       const struct pool_kv_key *keys, int *status)    \
	{                                                                      \
		struct pool_kv_op op = KEY_OP(kv, kind, n, keys, status);      \
                                                                               \
		return run_sync(&op);                                          \
	}                                                                      \
                                                                               \
	int pool_kv_##verb##_async(struct pool_kv *kv, size_t n,               \
				   const struct pool_kv_key *keys,             \
				   int *status, struct pool_kv_op **out)       \
	{                                                                      \
		struct pool_kv_op op = KEY_OP(kv, kind, n, keys, status);      \
                                                                               \
		return submit(&op, out);                                       \
	}
KV_KEYS_VERB(delete, KV_DELETE)
KV_KEYS_VERB(pin, KV_PIN)
KV_KEYS_VERB(unpin, KV_UNPIN)
#undef KV_KEYS_VERB

static int op_check(struct pool_kv *kv, struct pool_kv_op *op)
{
	if (!kv || !op)
		return -EINVAL;
	if (!kv_is_open(kv))
		return -EBADF;
	if (op->kv != kv)
		return -EINVAL;
	return 0;
}

ssize_t pool_kv_op_wait(struct pool_kv *kv, struct pool_kv_op *op,
			int timeout_ms)
{
	struct timespec ts;
	ssize_t res;
	int r = op_check(kv, op);

	if (r)
		return r;
	ts = pool_deadline_ms(timeout_ms >= 0 ? timeout_ms : 0);
	pthread_mutex_lock(&kv->qlock);
	while (!op->done) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&kv->donecond, &kv->qlock);
		} else if (pthread_cond_timedwait(&kv->donecond, &kv->qlock,
						  &ts) == ETIMEDOUT &&
			   !op->done) {
			pthread_mutex_unlock(&kv->qlock);
			return -ETIMEDOUT;
		}
	}
	res = op->result;
	pthread_mutex_unlock(&kv->qlock);
	pthread_mutex_lock(&kv->lock);
	TP_DLIST_REMOVE(kv->ops, op, prev, next);
	pthread_mutex_unlock(&kv->lock);
	free(op);
	return res;
}

int pool_kv_op_test(struct pool_kv *kv, struct pool_kv_op *op)
{
	int r = op_check(kv, op);
	bool done;

	if (r)
		return r;
	pthread_mutex_lock(&kv->qlock);
	done = op->done;
	pthread_mutex_unlock(&kv->qlock);
	return done ? 1 : 0;
}

/* KV_CLEAR on donor d's memd: 0 or -errno (-EOPNOTSUPP: its memd
 * speaks no protocol 4). */
static int donor_clear(struct pool_kv *kv, struct kv_donor *d)
{
	struct wire_msg *req, *rep;
	char text[WIRE_MSG_MAX] = "";
	struct plink *lk;
	int r = kv_donor_link(kv, d, &lk);

	if (r)
		return r;
	if (pool_link_proto(lk) < 4) {
		pool_log(LOG_WARNING,
			 "kv: donor=%s speaks protocol %u: no KV_CLEAR (a "
			 "memd of protocol 4 empties a store)",
			 d->name, pool_link_proto(lk));
		pool_link_put(lk);
		return -EOPNOTSUPP;
	}
	req = calloc(1, sizeof(*req));
	rep = calloc(1, sizeof(*rep));
	if (!req || !rep) {
		r = -ENOMEM;
		goto out;
	}
	req->type = WIRE_KV_CLEAR;
	r = pool_link_call(lk, req, rep, WIRE_KV_CLEAR_OK, text, sizeof(text));
	if (r) {
		pool_log(LOG_WARNING,
			 "kv: donor=%s refused KV_CLEAR err=%s (%s)", d->name,
			 strerror(-r), text);
		if (pool_link_is_lost(lk))
			kv_donor_failed(kv, d, lk);
	}
out:
	free(req);
	free(rep);
	pool_link_put(lk);
	return r;
}

int pool_kv_clear(struct pool_kv *kv)
{
	struct kv_donors *t;
	int first = 0;

	if (!kv)
		return -EINVAL;
	if (!kv_is_open(kv))
		return -EBADF;
	if (kv->cluster) {
		/* every donor up now, not the table of the last refresh */
		int r;

		pthread_mutex_lock(&kv->refresh_lock);
		r = kv_donors_refresh(kv);
		if (!r)
			__atomic_store_n(&kv->refresh_at_ms,
					 now_ms() + kv->refresh_ms,
					 __ATOMIC_RELAXED);
		pthread_mutex_unlock(&kv->refresh_lock);
		if (r)
			return r;
	}
	t = kv_donors_get(kv);
	for (uint32_t i = 0; t && i < t->n; i++) {
		int r = donor_clear(kv, &t->d[i]);

		if (r && !first)
			first = r;
	}
	if (t)
		kv_donors_put(kv, t);
	return first;
}

int pool_kv_get_stats(struct pool_kv *kv, struct pool_kv_stats *st)
{
	if (!kv || !st)
		return -EINVAL;
	if (!kv_is_open(kv))
		return -EBADF;
	memset(st, 0, sizeof(*st));
	st->puts = __atomic_load_n(&kv->st_puts, __ATOMIC_RELAXED);
	st->put_bytes = __atomic_load_n(&kv->st_put_bytes, __ATOMIC_RELAXED);
	st->gets = __atomic_load_n(&kv->st_gets, __ATOMIC_RELAXED);
	st->hits = __atomic_load_n(&kv->st_hits, __ATOMIC_RELAXED);
	st->get_bytes = __atomic_load_n(&kv->st_get_bytes, __ATOMIC_RELAXED);
	st->bad_reads = __atomic_load_n(&kv->st_bad, __ATOMIC_RELAXED);
	st->donor_refreshes =
		__atomic_load_n(&kv->st_refresh, __ATOMIC_RELAXED);
	st->replica_hits =
		__atomic_load_n(&kv->st_replica_hits, __ATOMIC_RELAXED);
	pthread_mutex_lock(&kv->lock);
	st->ndonors = kv->donors ? kv->donors->n : 0;
	pthread_mutex_unlock(&kv->lock);
	return 0;
}

/* ------------------------------------------------------------------ */
/* internal views                                                       */

static int kv_rank_name(struct pool_kv *kv, const struct pool_kv_key *key,
			bool second, char *name, size_t cap)
{
	struct kv_donors *t;
	int r = -ENOENT;

	if (!kv_is_open(kv))
		return -EBADF;
	t = kv_donors_get(kv);
	if (t && t->n) {
		uint32_t h, s2;

		kv_rank_of(t, key->b, &h, &s2);
		if (second)
			h = s2;
		if (h != NO_DONOR) {
			snprintf(name, cap, "%s", t->d[h].name);
			r = 0;
		}
	}
	if (t)
		kv_donors_put(kv, t);
	return r;
}

int pool_kv_home(struct pool_kv *kv, const struct pool_kv_key *key, char *name,
		 size_t cap)
{
	return kv_rank_name(kv, key, false, name, cap);
}

int pool_kv_second(struct pool_kv *kv, const struct pool_kv_key *key,
		   char *name, size_t cap)
{
	return kv_rank_name(kv, key, true, name, cap);
}

int pool_kv_delete_copy(struct pool_kv *kv, const struct pool_kv_key *key,
			bool second)
{
	struct pool_kv_op op = KEY_OP(kv, KV_DELETE, 1, key, NULL);
	int st = -ENOENT;
	ssize_t r;

	op.status = &st;
	op.copy = second ? COPY_SECOND : COPY_HOME;
	r = run_sync(&op);
	return r < 0 ? (int)r : st;
}
