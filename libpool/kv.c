// SPDX-License-Identifier: MIT
/*
 * libpool/kv.c - the KV tier's client (tidepool/kv.h, docs/kv.md).
 *
 * DESIGN
 * A KV handle (struct pool_kv) sits on a pool session and talks to each
 * key's home donor over the session's link to it (pool_link.c opens and keeps
 * links; this file only asks for them: pool_link_get, _call, _post,
 * _wait). Links are counted: each donor table entry holds a reference
 * to its link, and each lane and batch one more (pool_link_hold) while it
 * uses the link, dropped with pool_link_put when the donor is forgotten
 * (donor_failed, the table freed) or the batch freed, so pool_link.c reaps a
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
 * group_by, batches flagged replica): put reserves and writes there
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
 * KV_MODEL call when the handle takes a link to it (donor_link, or the
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
#include "tidepool/kv.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <xxhash.h>
#ifdef TP_HAVE_XXH_DISPATCH
/* XXH3_64bits and _update become the library's x86 dispatch: the same
 * sums at AVX2/AVX-512 width (libpool/CMakeLists.txt) */
#include <xxh_x86dispatch.h>
#endif

#include "fabric/fab.h"
#include "fabric/rendezvous.h"
#include "fabric/wire.h"
#include "libpool/internal.h"
#include "libpool/log.h"
#include "libpool/thread_role.h"

#define KV_OPEN 0x6b76706fu   /* "opvk" */
#define KV_CLOSED 0x6b766364u /* "dcvk" */
#define KV_DEFAULT_THREADS 2
#define KV_MAX_THREADS 64
#define KV_DEFAULT_REFRESH_MS 5000
#define KV_DEFAULT_LEASE_MS 2000
#define KV_RETRY_MS 1000 /* no new link to a failed donor before this */
#define KV_MAX_REPLICAS 2
#define NO_DONOR UINT32_MAX
#define KV_HDR WIRE_KV_HEADER_LEN

static const char kv_salt_tag[] = "tidepool kv salt v1";

enum kv_kind { KV_PUT, KV_GET, KV_EXISTS, KV_DELETE, KV_PIN, KV_UNPIN };
enum kv_copy { COPY_BOTH, COPY_HOME, COPY_SECOND };

struct kv_donor {
	uint32_t id;
	uint64_t epoch;
	uint64_t seed; /* XXH3-64 of name: the rendezvous seed */
	char name[WIRE_NAME_MAX];
	char addr[WIRE_HOSTPORT_MAX];
	/* NULL: none yet, or lost; under kv->lock (read lock-free only to
	 * compare). The table holds a reference on it (pool_link_put). */
	struct plink *link;
	uint64_t retry_ms; /* atomic: no new link before (monotonic) */
};

/* Immutable but for each donor's link and retry_ms; refs under kv->lock. */
struct kv_donors {
	unsigned refs;
	/* the registry's membership sequence of this list (MEMBERS_OK,
	 * protocol 5); 0: none (an older registry, or standalone) */
	uint64_t membership;
	uint32_t n;
	struct kv_donor d[];
};

struct pool_kv_op {
	struct pool_kv *kv;
	enum kv_kind kind;
	size_t n;
	const struct pool_kv_key *keys;
	const void *const *values; /* put */
	const size_t *lens;	   /* put */
	void *const *bufs;	   /* get */
	const size_t *caps;	   /* get */
	size_t *out_lens;	   /* get */
	int *status;		   /* may be NULL but for get */
	int copy;		   /* delete: COPY_BOTH, or one copy (tests) */
	ssize_t result;
	bool done; /* under kv->qlock */
	struct pool_kv_op *qnext;
	struct pool_kv_op *prev, *next; /* kv->ops, under kv->lock */
};

struct pool_kv {
	struct pool_attached att; /* on the session: pool_close frees us */
	uint32_t magic;		  /* atomic: KV_OPEN or KV_CLOSED */
	struct pool *p;
	bool cluster;
	unsigned refresh_ms, lease_ms, replicas;
	/* the model hint sent to every memd (KV_MODEL); 0: none */
	uint32_t hint_tps;
	uint64_t hint_bpt;

	pthread_mutex_t lock;
	struct kv_donors *donors;
	struct pool_kv_op *ops; /* every async op not yet waited for */
	pthread_mutex_t refresh_lock;
	uint64_t refresh_at_ms; /* atomic */

	pthread_mutex_t qlock;
	pthread_cond_t qcond;	 /* work queued, or stop */
	pthread_cond_t donecond; /* an op completed */
	struct pool_kv_op *qhead, *qtail;
	bool stop;
	int efd;
	unsigned nthreads;
	pthread_t *threads;

	/* atomics */
	uint64_t st_puts, st_put_bytes, st_gets, st_hits, st_get_bytes;
	uint64_t st_bad, st_refresh, st_replica_hits;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void count(uint64_t *c, uint64_t v)
{
	__atomic_add_fetch(c, v, __ATOMIC_RELAXED);
}

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
static void rank_of(const struct kv_donors *t, const uint8_t *key,
		    uint32_t *home, uint32_t *second)
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
static void donors_put_locked(struct kv_donors *t)
{
	if (t && --t->refs == 0) {
		for (uint32_t i = 0; i < t->n; i++)
			pool_link_put(t->d[i].link);
		free(t);
	}
}

static void donors_put(struct pool_kv *kv, struct kv_donors *t)
{
	pthread_mutex_lock(&kv->lock);
	donors_put_locked(t);
	pthread_mutex_unlock(&kv->lock);
}

/* Fetches DONORS and installs a new table, keeping the links of donor
 * incarnations that stay. */
static int donors_refresh(struct pool_kv *kv)
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
	donors_put_locked(old);
	pthread_mutex_unlock(&kv->lock);
	count(&kv->st_refresh, 1);
	pool_log(LOG_DEBUG, "kv: %u donors up membership=%" PRIu64, t->n,
		 t->membership);
out:
	free(rep);
	return r;
}

/* The current table, with a reference; fetched again first when due. */
static struct kv_donors *donors_get(struct pool_kv *kv)
{
	struct kv_donors *t;

	if (kv->cluster &&
	    now_ms() >= __atomic_load_n(&kv->refresh_at_ms, __ATOMIC_RELAXED) &&
	    !pthread_mutex_trylock(&kv->refresh_lock)) {
		uint64_t now = now_ms();

		if (now >=
		    __atomic_load_n(&kv->refresh_at_ms, __ATOMIC_RELAXED)) {
			int r = donors_refresh(kv);
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
static void donor_failed(struct pool_kv *kv, struct kv_donor *d,
			 struct plink *lk)
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
static void kv_send_model(struct pool_kv *kv, struct plink *lk,
			  const char *donor)
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
static int donor_link(struct pool_kv *kv, struct kv_donor *d,
		      struct plink **out)
{
	struct plink *lk = donor_link_hold(kv, d), *old;
	int r;

	*out = NULL;
	if (lk && !pool_link_is_lost(lk)) {
		*out = lk;
		return 0;
	}
	if (lk) {
		donor_failed(kv, d, lk);
		pool_link_put(lk);
	}
	if (now_ms() < __atomic_load_n(&d->retry_ms, __ATOMIC_RELAXED))
		return -ENOTCONN;
	r = pool_link_get(kv->p, d->id, d->epoch, d->addr, &lk);
	if (r) {
		pool_log(LOG_WARNING, "kv: donor=%s addr=%s unreachable err=%s",
			 d->name, d->addr, strerror(-r));
		donor_failed(kv, d, NULL);
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

/* ------------------------------------------------------------------ */
/* batches                                                              */

/* One wire batch on one link, and what it posted. */
struct kv_batch {
	struct kv_batch *next;
	struct plink *lk;
	struct kv_donor *donor;
	bool replica; /* at keys' second choices, not their homes */
	uint32_t nkeys;
	uint32_t key[WIRE_KV_BATCH]; /* indices into the op's keys */
	int st[WIRE_KV_BATCH];	     /* 0 while fine so far */
	uint64_t gen[WIRE_KV_BATCH];
	uint64_t csum[WIRE_KV_BATCH];
	uint64_t vlen[WIRE_KV_BATCH];
	uint32_t nch[WIRE_KV_BATCH];
	bool leased[WIRE_KV_BATCH];	      /* get: DONE owed */
	uint32_t op_first[WIRE_KV_BATCH + 1]; /* ops[] range of each key */
	uint32_t nposted[WIRE_KV_BATCH];      /* of that range, posted */
	uint32_t hdr_first[WIRE_KV_BATCH];
	uint64_t t0_ms; /* get: when the lookup was sent */
	/* get: XXH3-64 of the value as read, taken by post_key right
	 * after each piece completed (the same-host path completes them
	 * as they are posted): hashed while the bytes are in cache */
	uint64_t sum[WIRE_KV_BATCH];
	bool summed[WIRE_KV_BATCH];
	struct fab_op *ops;
	uint8_t *hdr; /* 64 bytes per chunk */
	struct fab_mr *hdr_mr;
	struct fab_mr *val_mr[WIRE_KV_BATCH];
};

static void batch_free(struct kv_batch *b)
{
	if (!b)
		return;
	fab_mr_close(b->hdr_mr);
	for (uint32_t i = 0; i < b->nkeys; i++)
		fab_mr_close(b->val_mr[i]);
	free(b->ops);
	free(b->hdr);
	pool_link_put(b->lk); /* after its MRs: they are on its domain */
	free(b);
}

/* Keys grouped by donor: order[gstart[h] .. gstart[h + 1]) are the
 * indices of donor h's keys, ascending. */
struct kv_groups {
	uint32_t *order;
	uint32_t *gstart; /* t->n + 1 bounds */
};

/* Per-run state of one op. */
struct kv_run {
	struct pool_kv *kv;
	struct pool_kv_op *op;
	struct kv_donors *t;
	int *status;	     /* op->status or our own */
	uint32_t *home;	     /* per key, index into t (NO_DONOR: none) */
	uint32_t *second;    /* per key, its replica's donor (NO_DONOR: none) */
	bool replicate;	     /* two copies: replicas 2 and two donors up */
	struct kv_groups hg; /* the keys by home */
	uint64_t *csum;	     /* put with replicas: XXH3-64 per key */
	struct wire_msg *req, *rep;
	uint64_t payload; /* P: value bytes per chunk */
	size_t xfer;
	XXH3_state_t *xs; /* get: post_key's running checksum, or NULL */
	int timeout_ms;
	bool stale; /* a donor answered ESTALE: t is older than its list */
	struct kv_batch *batches, **tail;
};

static void groups_free(struct kv_groups *g)
{
	free(g->order);
	free(g->gstart);
	g->order = g->gstart = NULL;
}

/* Groups the op's keys by dof[k], the index of key k's donor in r->t;
 * keys with NO_DONOR are left out. */
static int group_by(const struct kv_run *r, const uint32_t *dof,
		    struct kv_groups *g)
{
	size_t n = r->op->n;
	uint32_t nd = r->t ? r->t->n : 0, *at;

	groups_free(g);
	g->order = malloc(n * sizeof(*g->order));
	g->gstart = calloc((size_t)nd + 1, sizeof(*g->gstart));
	at = calloc((size_t)nd + 1, sizeof(*at));
	if (!g->order || !g->gstart || !at) {
		free(at);
		return -ENOMEM;
	}
	for (size_t k = 0; k < n; k++)
		if (dof[k] < nd)
			g->gstart[dof[k] + 1]++;
	for (uint32_t h = 0; h < nd; h++)
		g->gstart[h + 1] += g->gstart[h];
	for (size_t k = 0; k < n; k++)
		if (dof[k] < nd)
			g->order[g->gstart[dof[k]] + at[dof[k]]++] =
				(uint32_t)k;
	free(at);
	return 0;
}

/* Finds each key's home (and second choice, with replicas) and groups
 * the keys by home. */
static int run_group(struct kv_run *r)
{
	size_t n = r->op->n;
	uint32_t nd = r->t ? r->t->n : 0;

	r->replicate = r->kv->replicas > 1 && nd > 1;
	r->home = malloc(n * sizeof(*r->home));
	r->second = malloc(n * sizeof(*r->second));
	if (!r->home || !r->second)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++) {
		if (nd)
			rank_of(r->t, r->op->keys[k].b, &r->home[k],
				&r->second[k]);
		else
			r->home[k] = r->second[k] = NO_DONOR;
	}
	return group_by(r, r->home, &r->hg);
}

/* A per-key array of n donor indices, all NO_DONOR. */
static uint32_t *dof_new(const struct kv_run *r)
{
	uint32_t *dof = malloc(r->op->n * sizeof(*dof));

	for (size_t k = 0; dof && k < r->op->n; k++)
		dof[k] = NO_DONOR;
	return dof;
}

/* Fills the request's items with the batch's keys. */
static void req_keys(struct kv_run *r, uint8_t type, uint32_t flags,
		     const uint32_t *idx, uint32_t n)
{
	struct wire_msg *q = r->req;

	q->type = type;
	q->flags = 0;
	q->u.kv.membership = 0;
	q->u.kv.flags = flags;
	q->u.kv.count = (uint16_t)n;
	q->u.kv.nlocs = 0;
	for (uint32_t i = 0; i < n; i++) {
		memset(&q->u.kv.item[i], 0, sizeof(q->u.kv.item[i]));
		memcpy(q->u.kv.item[i].key, r->op->keys[idx[i]].b,
		       WIRE_KV_KEY_LEN);
	}
}

/*
 * Protocol 5 (docs/kv.md, "Donors that come and go"): on a link that
 * negotiated it, a request that has an _AT form goes as that form with
 * the membership of the table it was routed by, so that a donor whose
 * list is another refuses it (ESTALE) instead of serving a stale
 * routing. The reply type to expect.
 */
static int kv_route(const struct kv_run *r, struct plink *lk,
		    struct wire_msg *q)
{
	uint8_t at = wire_kv_at(q->type);

	if (at && r->t && r->t->membership && pool_link_proto(lk) >= 5) {
		q->type = at;
		q->u.kv.membership = r->t->membership;
	}
	return q->type | 0x80;
}

/* After a call of n keys to donor d: a lost donor is noted; a reply with
 * the wrong item count is -EPROTO. */
static int call_checked(struct kv_run *r, struct kv_donor *d,
			const struct wire_msg *rep, uint8_t type, uint32_t n,
			int rc)
{
	if (rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -EPROTO)
		donor_failed(r->kv, d, NULL);
	if (rc == -ESTALE)
		r->stale = true;
	if (!rc && type != WIRE_KV_EXISTS && rep->u.kv.count != n)
		rc = -EPROTO;
	return rc;
}

/* ------------------------------------------------------------------ */
/* rounds: the next request to every donor, all out at once             */

/* One donor's part of a pass: its keys g[0 .. gn), of which at are
 * taken; the next batch idx[0 .. n) (keys carried over from the last
 * reply first) and its reply. lk NULL: the donor is lost. */
struct kv_lane {
	struct kv_donor *d;
	struct plink *lk;
	const uint32_t *g;
	uint32_t gn, at;
	uint32_t n, ncarry;
	uint32_t idx[WIRE_KV_BATCH];
	uint32_t carry[WIRE_KV_BATCH];
	struct wire_msg *rep;
	int rc;
	int expect;	/* the reply type (kv_route) */
	uint64_t t0_ms; /* when the request went out */
};

struct kv_lanes {
	struct kv_lane *l;
	struct kv_lane **ord; /* a round's lanes by link address */
	uint32_t n, nord;
};

static void lanes_close(struct kv_lanes *ls)
{
	for (uint32_t i = 0; ls->l && i < ls->n; i++) {
		free(ls->l[i].rep);
		pool_link_put(ls->l[i].lk);
	}
	free(ls->l);
	free(ls->ord);
	memset(ls, 0, sizeof(*ls));
}

/* A lane for each donor of gr with keys, its link opened. */
static int lanes_open(struct kv_run *r, const struct kv_groups *gr,
		      struct kv_lanes *ls)
{
	uint32_t nd = r->t ? r->t->n : 0;

	memset(ls, 0, sizeof(*ls));
	ls->l = calloc(nd ? nd : 1, sizeof(*ls->l));
	ls->ord = calloc(nd ? nd : 1, sizeof(*ls->ord));
	if (!ls->l || !ls->ord)
		return -ENOMEM;
	for (uint32_t h = 0; h < nd; h++) {
		uint32_t gn = gr->gstart[h + 1] - gr->gstart[h];
		struct kv_lane *l;

		if (!gn)
			continue;
		l = &ls->l[ls->n++];
		l->d = &r->t->d[h];
		l->g = gr->order + gr->gstart[h];
		l->gn = gn;
		if (donor_link(r->kv, l->d, &l->lk))
			l->lk = NULL;
		else if (!(l->rep = malloc(sizeof(*l->rep))))
			return -ENOMEM;
	}
	return 0;
}

/* l's next batch: the carried keys, then untaken keys for which take(r,
 * k) is true (NULL: all). The batch's size. */
static uint32_t lane_fill(struct kv_run *r, struct kv_lane *l,
			  bool (*take)(struct kv_run *, uint32_t))
{
	memcpy(l->idx, l->carry, l->ncarry * sizeof(*l->carry));
	l->n = l->ncarry;
	l->ncarry = 0;
	while (l->lk && l->n < WIRE_KV_BATCH && l->at < l->gn) {
		uint32_t k = l->g[l->at++];

		if (!take || take(r, k))
			l->idx[l->n++] = k;
	}
	return l->n;
}

static int lane_cmp(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)(*(struct kv_lane *const *)a)->lk;
	uintptr_t y = (uintptr_t)(*(struct kv_lane *const *)b)->lk;

	return x < y ? -1 : x > y;
}

/*
 * Sends the request of every lane with a batch, in ascending order of
 * link address (pool_link_send: a thread holds each link's control
 * connection from its send to its receive, and one global order keeps
 * two such threads from waiting on each other). round_recv then takes
 * the replies in the same order: the round trips to all donors overlap.
 */
static void round_send(struct kv_run *r, struct kv_lanes *ls, uint8_t type,
		       uint32_t flags)
{
	ls->nord = 0;
	for (uint32_t i = 0; i < ls->n; i++)
		if (ls->l[i].lk && ls->l[i].n)
			ls->ord[ls->nord++] = &ls->l[i];
	qsort(ls->ord, ls->nord, sizeof(*ls->ord), lane_cmp);
	for (uint32_t i = 0; i < ls->nord; i++) {
		struct kv_lane *l = ls->ord[i];

		req_keys(r, type, flags, l->idx, l->n);
		if (type == WIRE_KV_RESERVE)
			for (uint32_t j = 0; j < l->n; j++)
				r->req->u.kv.item[j].value_len =
					r->op->lens[l->idx[j]];
		l->expect = kv_route(r, l->lk, r->req);
		l->t0_ms = now_ms();
		l->rc = pool_link_send(l->lk, r->req);
	}
}

static void round_recv(struct kv_run *r, struct kv_lanes *ls, uint8_t type)
{
	for (uint32_t i = 0; i < ls->nord; i++) {
		struct kv_lane *l = ls->ord[i];

		if (!l->rc)
			l->rc = pool_link_recv(l->lk, l->rep, l->expect, NULL,
					       0);
		l->rc = call_checked(r, l->d, l->rep, type, l->n, l->rc);
	}
}

/* Location range of reply item it, checked. */
static const struct wire_kv_loc *item_locs(const struct wire_msg *rep,
					   const struct wire_kv_item *it,
					   uint32_t want)
{
	if (it->nchunks != want || it->first_loc > rep->u.kv.nlocs ||
	    it->nchunks > rep->u.kv.nlocs - it->first_loc)
		return NULL;
	return &rep->u.kv.loc[it->first_loc];
}

static uint32_t chunks_of(const struct kv_run *r, uint64_t len)
{
	return len <= r->payload
		       ? 1
		       : (uint32_t)((len + r->payload - 1) / r->payload);
}

/*
 * A get's payload pieces on a same-host link: post_key hashes each piece
 * right after its copy, and a piece of 64 KiB is still in L1/L2 then
 * (copy and hash together ran about 20% faster than in 1 MiB pieces:
 * docs/bench/kv.md, change 3). Pieces over the fabric and puts' pieces
 * are the session's xfer size.
 */
#define KV_HOT_PIECE ((size_t)64 << 10)

static size_t piece_bytes(const struct kv_run *r, const struct kv_batch *b)
{
	return r->op->kind == KV_GET && r->xfer > KV_HOT_PIECE &&
			       pool_link_is_same_host(b->lk)
		       ? KV_HOT_PIECE
		       : r->xfer;
}

/* The transfers of a chunk of part payload bytes: its header and its
 * payload's pieces. */
static uint32_t pieces_of(const struct kv_run *r, const struct kv_batch *b,
			  uint64_t part)
{
	size_t x = piece_bytes(r, b);

	return 1 + (uint32_t)((part + x - 1) / x);
}

static uint64_t part_of(const struct kv_run *r, uint64_t len, uint32_t c)
{
	uint64_t off = (uint64_t)c * r->payload;

	return len - off < r->payload ? len - off : r->payload;
}

/* Whether transfer f has already completed without an error. */
static bool piece_is_done(struct fab_op *f)
{
	return __atomic_load_n(&f->complete, __ATOMIC_ACQUIRE) && !f->status;
}

/*
 * Posts the header and payload transfers of key j of b (reserve or
 * lookup reply item it with locations loc). write: put, from the value;
 * else get, into the caller's buffer. Sets b->st[j] on failure.
 */
static void post_key(struct kv_run *r, struct kv_batch *b, uint32_t j,
		     const struct wire_kv_loc *loc, bool write)
{
	uint32_t k = b->key[j], nch = b->nch[j];
	struct fab_op *ops = b->ops + b->op_first[j];
	uint8_t *val = write ? (uint8_t *)r->op->values[k] : r->op->bufs[k];
	uint64_t len = b->vlen[j];
	size_t xfer = piece_bytes(r, b);
	void *hdesc = b->hdr_mr ? fab_mr_desc(b->hdr_mr) : NULL, *vdesc = NULL;
	/* get: hash each piece that completed as it was posted, in order */
	bool sum = !write && r->xs && !XXH3_64bits_reset(r->xs);
	int rc;

	rc = pool_link_mr(b->lk, val, len, &b->val_mr[j]);
	if (rc)
		goto fail;
	vdesc = b->val_mr[j] ? fab_mr_desc(b->val_mr[j]) : NULL;
	for (uint32_t c = 0; c < nch; c++) {
		uint64_t part = part_of(r, len, c), off = c * r->payload;
		uint8_t *h = b->hdr + (size_t)(b->hdr_first[j] + c) * KV_HDR;

		if (loc[c].block_bytes < KV_HDR + part ||
		    loc[c].endpoint >= pool_link_nendpoints(b->lk)) {
			rc = -EPROTO;
			goto fail;
		}
		if (write) {
			struct wire_kv_header hd = {
				.magic = WIRE_KV_MAGIC,
				.tenant_id = pool_link_tenant_id(b->lk),
				.generation = b->gen[j],
				.value_len = (uint32_t)len,
				.chunk = (uint16_t)c,
				.nchunks = (uint16_t)nch,
				.checksum = b->csum[j],
			};

			memcpy(hd.key, r->op->keys[k].b, WIRE_KV_KEY_LEN);
			wire_kv_header_encode(&hd, h);
		}
		rc = pool_link_post(b->lk, write, h, KV_HDR, hdesc,
				    loc[c].endpoint, loc[c].raddr, loc[c].rkey,
				    &ops[b->nposted[j]]);
		if (rc)
			goto fail;
		b->nposted[j]++;
		for (uint64_t done = 0; done < part;) {
			uint64_t n = part - done < xfer ? part - done : xfer;

			rc = pool_link_post(b->lk, write, val + off + done, n,
					    vdesc, loc[c].endpoint,
					    loc[c].raddr + KV_HDR + done,
					    loc[c].rkey, &ops[b->nposted[j]]);
			if (rc)
				goto fail;
			sum = sum && piece_is_done(&ops[b->nposted[j]]) &&
			      !XXH3_64bits_update(r->xs, val + off + done, n);
			b->nposted[j]++;
			done += n;
		}
	}
	if (sum) {
		b->sum[j] = XXH3_64bits_digest(r->xs);
		b->summed[j] = true;
	}
	return;
fail:
	b->st[j] = rc == -EPROTO ? -EPROTO : -ENOTCONN;
	if (rc == -ENOTCONN)
		donor_failed(r->kv, b->donor, b->lk);
}

/*
 * After a reserve or lookup reply: sizes b's transfer arrays for the
 * keys whose item status is 0 and that pass the checks (set by the
 * caller in b->nch / b->vlen; b->st[j] != 0 skips a key).
 */
static int batch_alloc(struct kv_run *r, struct kv_batch *b)
{
	uint32_t nops = 0, nhdr = 0;

	for (uint32_t j = 0; j < b->nkeys; j++) {
		b->op_first[j] = nops;
		b->hdr_first[j] = nhdr;
		if (b->st[j])
			continue;
		for (uint32_t c = 0; c < b->nch[j]; c++)
			nops += pieces_of(r, b, part_of(r, b->vlen[j], c));
		nhdr += b->nch[j];
	}
	b->op_first[b->nkeys] = nops;
	if (!nops)
		return 0;
	b->ops = calloc(nops, sizeof(*b->ops));
	b->hdr = aligned_alloc(64, (size_t)nhdr * KV_HDR);
	if (!b->ops || !b->hdr)
		return -ENOMEM;
	return pool_link_mr(b->lk, b->hdr, (size_t)nhdr * KV_HDR, &b->hdr_mr);
}

/* Waits for every transfer b posted; a failed transfer fails its key. */
static void batch_wait(struct kv_run *r, struct kv_batch *b)
{
	uint64_t deadline = now_ms() + (uint64_t)r->timeout_ms;

	for (uint32_t j = 0; j < b->nkeys; j++) {
		for (uint32_t i = b->op_first[j];
		     i < b->op_first[j] + b->nposted[j]; i++) {
			uint64_t now = now_ms();
			int s = pool_link_wait(
				b->lk, &b->ops[i],
				now >= deadline ? 0 : (int)(deadline - now));

			if (s && !b->st[j])
				b->st[j] = s == -EIO ? -EIO : -ENOTCONN;
		}
		/* posts that never happened (a post failed midway) */
		if (!b->st[j] &&
		    b->op_first[j + 1] - b->op_first[j] > b->nposted[j])
			b->st[j] = -ENOTCONN;
	}
	if (pool_link_is_lost(b->lk))
		donor_failed(r->kv, b->donor, b->lk);
}

static struct kv_batch *batch_new(struct kv_run *r, struct kv_donor *d,
				  struct plink *lk, bool replica)
{
	struct kv_batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->lk = lk; /* the batch's reference: batch_free drops it */
	pool_link_hold(lk);
	b->donor = d;
	b->replica = replica;
	*r->tail = b;
	r->tail = &b->next;
	return b;
}

/* ------------------------------------------------------------------ */
/* put                                                                  */

/* After lane l's reserve reply (in r->rep): posts the writes of the keys
 * reserved; keys that did not fit the reply are carried. */
static int put_batch(struct kv_run *r, struct kv_lane *l, bool replica)
{
	struct kv_batch *b = batch_new(r, l->d, l->lk, replica);
	const uint32_t *g = l->idx;
	uint32_t n = l->n;
	int rc = l->rc;

	if (!b)
		return -ENOMEM;
	b->nkeys = n;
	memcpy(b->key, g, n * sizeof(*g));
	for (uint32_t j = 0; j < n; j++) {
		b->vlen[j] = r->op->lens[g[j]];
		b->csum[j] = r->csum[g[j]];
	}
	for (uint32_t j = 0; j < n; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];

		b->st[j] = rc ? rc : it->status;
		if (!rc && it->status == -ENOBUFS && j > 0) {
			l->carry[l->ncarry++] = g[j];
			b->st[j] = 1; /* not this batch's */
			continue;
		}
		if (b->st[j] == -ENOBUFS)
			b->st[j] = -EMSGSIZE; /* alone, still too many */
		if (b->st[j])
			continue;
		b->gen[j] = it->generation;
		b->nch[j] = chunks_of(r, b->vlen[j]);
		if (!item_locs(r->rep, it, b->nch[j]))
			b->st[j] = -EPROTO;
	}
	if (rc)
		return 0;
	rc = batch_alloc(r, b);
	if (rc)
		return rc;
	for (uint32_t j = 0; j < n; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];

		if (!b->st[j])
			post_key(r, b, j, &r->rep->u.kv.loc[it->first_loc],
				 true);
	}
	return 0;
}

/* Commits the keys of b whose writes all succeeded. */
static void put_commit(struct kv_run *r, struct kv_batch *b)
{
	uint32_t idx[WIRE_KV_BATCH], pos[WIRE_KV_BATCH], m = 0;
	int rc;

	for (uint32_t j = 0; j < b->nkeys; j++)
		if (!b->st[j]) {
			idx[m] = b->key[j];
			pos[m++] = j;
		}
	if (!m)
		return;
	req_keys(r, WIRE_KV_COMMIT, 0, idx, m);
	for (uint32_t i = 0; i < m; i++) {
		r->req->u.kv.item[i].generation = b->gen[pos[i]];
		r->req->u.kv.item[i].checksum = b->csum[pos[i]];
	}
	rc = pool_link_call(b->lk, r->req, r->rep, kv_route(r, b->lk, r->req),
			    NULL, 0);
	if (!rc && r->rep->u.kv.count != m)
		rc = -EPROTO;
	if (rc == -ESTALE)
		r->stale = true;
	if (rc == -ENOTCONN || rc == -ETIMEDOUT || rc == -EPROTO)
		donor_failed(r->kv, b->donor, b->lk);
	for (uint32_t i = 0; i < m; i++) {
		int s = rc ? rc : r->rep->u.kv.item[i].status;

		if (s == -EALREADY)
			s = 0; /* committed already: stored */
		else if (s == -ENOENT)
			s = -ETIMEDOUT; /* the reservation was dropped */
		b->st[pos[i]] = s;
	}
}

/* What a put of key k cannot store whatever the donor says. */
static int put_check(const struct pool_kv_op *op, uint32_t k)
{
	if (!op->values[k] || !op->lens[k])
		return -EINVAL;
	if (op->lens[k] > POOL_KV_VALUE_MAX)
		return -EMSGSIZE;
	return 0;
}

static bool put_take(struct kv_run *r, uint32_t k)
{
	r->status[k] = put_check(r->op, k);
	return !r->status[k];
}

/*
 * Reserves and posts the keys of gr at their donors: their homes, or
 * (replica) their second choices; one round of reserves to all donors
 * at once, the checksums of the round's values computed while the
 * requests are out, then the writes. Keys that did not fit a reply go
 * into the next round. The home pass sets the statuses of keys that
 * cannot be stored or whose home is lost; a replica pass sets none.
 */
static int put_pass(struct kv_run *r, const struct kv_groups *gr, bool replica)
{
	struct wire_msg *own = r->rep;
	struct kv_lanes ls;
	int rc = lanes_open(r, gr, &ls);

	for (uint32_t i = 0; !rc && !replica && i < ls.n; i++)
		for (uint32_t j = 0; !ls.l[i].lk && j < ls.l[i].gn; j++) {
			uint32_t k = ls.l[i].g[j];
			int bad = put_check(r->op, k);

			r->status[k] = bad ? bad : -ENOTCONN;
		}
	while (!rc) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++)
			any |= lane_fill(r, &ls.l[i],
					 replica ? NULL : put_take) > 0;
		if (!any)
			break;
		round_send(r, &ls, WIRE_KV_RESERVE, 0);
		for (uint32_t i = 0; !replica && i < ls.nord; i++)
			for (uint32_t j = 0; j < ls.ord[i]->n; j++) {
				uint32_t k = ls.ord[i]->idx[j];

				r->csum[k] = XXH3_64bits(r->op->values[k],
							 r->op->lens[k]);
			}
		round_recv(r, &ls, WIRE_KV_RESERVE);
		for (uint32_t i = 0; i < ls.nord && !rc; i++) {
			r->rep = ls.ord[i]->rep;
			rc = put_batch(r, ls.ord[i], replica);
			r->rep = own;
		}
	}
	r->rep = own;
	lanes_close(&ls);
	return rc;
}

static ssize_t simple_pass(struct kv_run *r, const struct kv_groups *gr,
			   uint8_t type, uint32_t flags, int *st);

/*
 * The replicas of a put (docs/kv.md, "Replicas"): every key whose home
 * reservation succeeded is reserved and written at its second choice
 * too, while the home's reservation keeps other puts and deletes of the
 * key away from the home. A second choice that already holds the key
 * (bytes of a value that may have been deleted since) has that copy
 * deleted and is reserved again, so a replica never keeps other bytes
 * than those the home is about to commit; unless that copy is pinned
 * (the home lost the key, not its pin): then it stays, and the put of
 * the key fails with -EEXIST (pinned[k]), as it would at a home that
 * held the key.
 */
static int put_replicas(struct kv_run *r, bool *pinned)
{
	struct kv_batch **mark = r->tail;
	struct kv_groups g = { 0 };
	uint32_t *dof = dof_new(r);
	int *st = malloc(r->op->n * sizeof(*st));
	size_t again = 0;
	int rc = -ENOMEM;

	if (!dof || !st)
		goto out;
	for (struct kv_batch *b = r->batches; b; b = b->next)
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (!b->st[j])
				dof[b->key[j]] = r->second[b->key[j]];
	rc = group_by(r, dof, &g);
	if (!rc)
		rc = put_pass(r, &g, true);
	if (rc)
		goto out;
	for (size_t k = 0; k < r->op->n; k++)
		dof[k] = NO_DONOR;
	for (struct kv_batch *b = *mark; b; b = b->next)
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (b->st[j] == -EEXIST) {
				dof[b->key[j]] = r->second[b->key[j]];
				again++;
			}
	if (!again)
		goto out;
	rc = group_by(r, dof, &g);
	if (rc)
		goto out;
	/* KV_PIN with DROP: a delete that leaves a pinned key alone */
	simple_pass(r, &g, WIRE_KV_PIN, WIRE_KV_DROP, st);
	for (size_t k = 0; k < r->op->n; k++)
		if (dof[k] != NO_DONOR && st[k] && st[k] != -ENOENT) {
			pinned[k] = st[k] == -EEXIST;
			dof[k] = NO_DONOR; /* stays as it is: see kv.md */
		}
	rc = group_by(r, dof, &g);
	if (!rc)
		rc = put_pass(r, &g, true);
out:
	groups_free(&g);
	free(dof);
	free(st);
	return rc;
}

/* Before the homes commit: commits the replicas of the keys whose home
 * writes all succeeded (hs[k] 0); notes in ok[k] which did. */
static void put_commit_replicas(struct kv_run *r, const int *hs, bool *ok)
{
	for (struct kv_batch *b = r->batches; b; b = b->next) {
		if (!b->replica)
			continue;
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (!b->st[j] && hs[b->key[j]])
				b->st[j] = -ECANCELED; /* lapses unused */
		put_commit(r, b);
		for (uint32_t j = 0; j < b->nkeys; j++)
			if (!b->st[j])
				ok[b->key[j]] = true;
	}
}

/* After the homes commit: a replica whose home did not commit is deleted
 * (best effort), so that no copy holds a value its home never held. */
static void put_undo_replicas(struct kv_run *r, const bool *ok)
{
	struct kv_groups g = { 0 };
	uint32_t *dof = dof_new(r);
	int *st = malloc(r->op->n * sizeof(*st));
	bool any = false;

	for (size_t k = 0; dof && k < r->op->n; k++)
		if (ok[k] && r->status[k]) {
			dof[k] = r->second[k];
			any = true;
		}
	if (any && st && !group_by(r, dof, &g))
		simple_pass(r, &g, WIRE_KV_DELETE, 0, st);
	groups_free(&g);
	free(dof);
	free(st);
}

static ssize_t run_put(struct kv_run *r)
{
	ssize_t stored = 0;
	int *hs = NULL, rc;
	bool *rok = NULL, *pinned = NULL;

	r->csum = malloc(r->op->n * sizeof(*r->csum));
	if (!r->csum)
		return -ENOMEM;
	if (r->replicate) {
		hs = malloc(r->op->n * sizeof(*hs));
		rok = calloc(r->op->n, sizeof(*rok));
		pinned = calloc(r->op->n, sizeof(*pinned));
		if (!hs || !rok || !pinned) {
			free(hs);
			free(rok);
			free(pinned);
			return -ENOMEM;
		}
	}
	rc = put_pass(r, &r->hg, false);
	if (!rc && r->replicate)
		rc = put_replicas(r, pinned);
	for (struct kv_batch *b = r->batches; b; b = b->next)
		batch_wait(r, b);
	if (r->replicate) {
		/* a key pinned at its second choice: the home's reservation
		 * lapses unused */
		for (struct kv_batch *b = r->batches; b; b = b->next)
			for (uint32_t j = 0; j < b->nkeys && !b->replica; j++)
				if (pinned[b->key[j]] && !b->st[j])
					b->st[j] = -EEXIST;
		for (size_t k = 0; k < r->op->n; k++)
			hs[k] = 1;
		for (struct kv_batch *b = r->batches; b; b = b->next)
			for (uint32_t j = 0; j < b->nkeys && !b->replica; j++)
				if (b->st[j] != 1)
					hs[b->key[j]] = b->st[j];
		put_commit_replicas(r, hs, rok);
	}
	for (struct kv_batch *b = r->batches; b; b = b->next) {
		if (b->replica)
			continue;
		put_commit(r, b);
		for (uint32_t j = 0; j < b->nkeys; j++) {
			uint32_t k = b->key[j];

			if (b->st[j] == 1)
				continue; /* retried in a later batch */
			r->status[k] = b->st[j];
			if (!b->st[j] || b->st[j] == -EEXIST) {
				stored++;
				if (!b->st[j]) {
					count(&r->kv->st_puts, 1);
					count(&r->kv->st_put_bytes,
					      r->op->lens[k]);
				}
			}
		}
	}
	if (r->replicate)
		put_undo_replicas(r, rok);
	free(hs);
	free(rok);
	free(pinned);
	return rc ? rc : stored;
}

/* ------------------------------------------------------------------ */
/* get                                                                  */

/* After lane l's lookup reply (in r->rep): posts the reads of the keys
 * found; keys that did not fit the reply are carried. */
static int get_batch(struct kv_run *r, struct kv_lane *l, bool replica)
{
	struct kv_batch *b = batch_new(r, l->d, l->lk, replica);
	const uint32_t *g = l->idx;
	uint32_t n = l->n;
	int rc = l->rc;

	if (!b)
		return -ENOMEM;
	b->nkeys = n;
	memcpy(b->key, g, n * sizeof(*g));
	b->t0_ms = l->t0_ms;
	for (uint32_t j = 0; j < n; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];
		uint32_t k = g[j];

		b->st[j] = rc ? -ENOENT : it->status;
		if (rc)
			continue;
		if (it->status == -ENOBUFS && j > 0) {
			l->carry[l->ncarry++] = k;
			b->st[j] = 1;
			continue;
		}
		if (it->status) {
			b->st[j] = -ENOENT;
			continue;
		}
		b->leased[j] = true;
		b->gen[j] = it->generation;
		b->csum[j] = it->checksum;
		b->vlen[j] = it->value_len;
		r->op->out_lens[k] = it->value_len;
		if (!it->value_len || it->value_len > UINT32_MAX) {
			b->st[j] = -ENOENT;
			count(&r->kv->st_bad, 1);
			continue;
		}
		if (it->value_len > r->op->caps[k]) {
			b->st[j] = -ENOBUFS;
			continue;
		}
		b->nch[j] = chunks_of(r, b->vlen[j]);
		if (!item_locs(r->rep, it, b->nch[j])) {
			b->st[j] = -ENOENT;
			count(&r->kv->st_bad, 1);
		}
	}
	if (rc)
		return 0;
	rc = batch_alloc(r, b);
	if (rc)
		return rc;
	for (uint32_t j = 0; j < n; j++) {
		const struct wire_kv_item *it = &r->rep->u.kv.item[j];

		if (!b->st[j])
			post_key(r, b, j, &r->rep->u.kv.loc[it->first_loc],
				 false);
	}
	return 0;
}

/* Checks key j of b after its reads: every header, the checksum, the
 * lease. */
static int get_verify(struct kv_run *r, struct kv_batch *b, uint32_t j,
		      uint64_t done_ms)
{
	uint32_t k = b->key[j];

	if (done_ms > b->t0_ms + r->kv->lease_ms)
		return -ENOENT; /* read outlived the lease: space may be reused */
	for (uint32_t c = 0; c < b->nch[j]; c++) {
		struct wire_kv_header h;

		wire_kv_header_decode(
			b->hdr + (size_t)(b->hdr_first[j] + c) * KV_HDR, &h);
		if (h.magic != WIRE_KV_MAGIC ||
		    h.tenant_id != pool_link_tenant_id(b->lk) ||
		    memcmp(h.key, r->op->keys[k].b, WIRE_KV_KEY_LEN) ||
		    h.generation != b->gen[j] || h.value_len != b->vlen[j] ||
		    h.chunk != c || h.nchunks != b->nch[j] ||
		    h.checksum != b->csum[j])
			return -EBADMSG;
	}
	if ((b->summed[j]
		     ? b->sum[j]
		     : XXH3_64bits(r->op->bufs[k], b->vlen[j])) != b->csum[j])
		return -EBADMSG;
	return 0;
}

/* Ends b's read leases. */
static void get_done(struct kv_run *r, struct kv_batch *b)
{
	uint32_t idx[WIRE_KV_BATCH], pos[WIRE_KV_BATCH], m = 0;

	for (uint32_t j = 0; j < b->nkeys; j++)
		if (b->leased[j]) {
			idx[m] = b->key[j];
			pos[m++] = j;
		}
	if (!m || pool_link_is_lost(b->lk))
		return;
	req_keys(r, WIRE_KV_DONE, 0, idx, m);
	for (uint32_t i = 0; i < m; i++)
		r->req->u.kv.item[i].generation = b->gen[pos[i]];
	/* The leases lapse anyway: the statuses do not matter. */
	if (pool_link_call(b->lk, r->req, r->rep, WIRE_KV_DONE_OK, NULL, 0) ==
	    -ENOTCONN)
		donor_failed(r->kv, b->donor, b->lk);
}

/* Looks up, reads and checks the keys of gr at their donors (homes, or
 * replica: second choices); sets their statuses. The hits, or -ENOMEM. */
static ssize_t get_pass(struct kv_run *r, const struct kv_groups *gr,
			bool replica)
{
	struct kv_batch **mark = r->tail;
	struct wire_msg *own = r->rep;
	struct kv_lanes ls;
	ssize_t hits = 0;
	int rc = lanes_open(r, gr, &ls);

	for (uint32_t i = 0; !rc && i < ls.n; i++)
		for (uint32_t j = 0; !ls.l[i].lk && j < ls.l[i].gn; j++)
			r->status[ls.l[i].g[j]] = -ENOENT; /* loss: a miss */
	while (!rc) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++)
			any |= lane_fill(r, &ls.l[i], NULL) > 0;
		if (!any)
			break;
		round_send(r, &ls, WIRE_KV_LOOKUP, 0);
		round_recv(r, &ls, WIRE_KV_LOOKUP);
		for (uint32_t i = 0; i < ls.nord && !rc; i++) {
			r->rep = ls.ord[i]->rep;
			rc = get_batch(r, ls.ord[i], replica);
			r->rep = own;
		}
	}
	r->rep = own;
	lanes_close(&ls);
	for (struct kv_batch *b = *mark; b; b = b->next) {
		uint64_t done_ms;

		batch_wait(r, b);
		done_ms = now_ms();
		for (uint32_t j = 0; j < b->nkeys; j++) {
			uint32_t k = b->key[j];
			int s = b->st[j];

			if (s == 1)
				continue;
			if (!s) {
				s = get_verify(r, b, j, done_ms);
				if (s == -EBADMSG) {
					count(&r->kv->st_bad, 1);
					pool_link_kv_shm_forget(b->lk);
					pool_log(LOG_WARNING,
						 "kv: a block failed its "
						 "checks (a miss) donor=%s",
						 b->donor->name);
				}
			}
			if (s && s != -ENOBUFS)
				s = -ENOENT; /* anything wrong: a miss */
			r->status[k] = s;
			if (!s) {
				hits++;
				count(&r->kv->st_get_bytes, b->vlen[j]);
			}
		}
		get_done(r, b);
	}
	return rc ? rc : hits;
}

/* Gets from the homes; with replicas, a key the home missed (absent,
 * failed a check, or the home is lost) is read from its replica. */
static ssize_t run_get(struct kv_run *r)
{
	ssize_t hits = get_pass(r, &r->hg, false);

	if (hits >= 0 && r->replicate) {
		struct kv_groups g = { 0 };
		uint32_t *dof = dof_new(r);
		bool any = false;
		ssize_t more;

		for (size_t k = 0; dof && k < r->op->n; k++)
			if (r->status[k] == -ENOENT) {
				dof[k] = r->second[k];
				any = true;
			}
		if (!dof) {
			hits = -ENOMEM;
		} else if (any) {
			more = group_by(r, dof, &g);
			if (!more)
				more = get_pass(r, &g, true);
			if (more < 0) {
				hits = more;
			} else {
				hits += more;
				count(&r->kv->st_replica_hits, (uint64_t)more);
			}
		}
		groups_free(&g);
		free(dof);
	}
	count(&r->kv->st_gets, r->op->n);
	if (hits > 0)
		count(&r->kv->st_hits, (uint64_t)hits);
	return hits;
}

/* ------------------------------------------------------------------ */
/* exists, delete, pin                                                  */

/* The smallest index >= lo of a key that the donors of gr (homes, or
 * second choices) do not hold, or n: KV_EXISTS per batch, in key order
 * within a donor. A lost donor holds nothing. */
static ssize_t exists_from(struct kv_run *r, const struct kv_groups *gr,
			   size_t lo)
{
	size_t first_missing = r->op->n;
	struct kv_lanes ls;

	if (lanes_open(r, gr, &ls)) {
		lanes_close(&ls);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ls.n; i++) {
		struct kv_lane *l = &ls.l[i];

		while (l->at < l->gn && l->g[l->at] < lo)
			l->at++;
		if (!l->lk && l->at < l->gn && l->g[l->at] < first_missing)
			first_missing = l->g[l->at];
	}
	for (;;) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++) {
			struct kv_lane *l = &ls.l[i];

			l->n = 0;
			if (!l->lk || l->at == l->gn ||
			    l->g[l->at] >= first_missing)
				continue;
			l->n = l->gn - l->at < WIRE_KV_BATCH ? l->gn - l->at
							     : WIRE_KV_BATCH;
			memcpy(l->idx, l->g + l->at, l->n * sizeof(*l->idx));
			any = true;
		}
		if (!any)
			break;
		round_send(r, &ls, WIRE_KV_EXISTS, 0);
		round_recv(r, &ls, WIRE_KV_EXISTS);
		for (uint32_t i = 0; i < ls.nord; i++) {
			struct kv_lane *l = ls.ord[i];
			uint32_t c = l->rc ? 0 : l->rep->u.kv.count;

			if (c < l->n) {
				if (l->idx[c] < first_missing)
					first_missing = l->idx[c];
				l->at = l->gn; /* this donor is done */
			} else {
				l->at += l->n;
			}
		}
	}
	lanes_close(&ls);
	return (ssize_t)first_missing;
}

/* With replicas a key is present when either copy is: the homes answer
 * up to their first missing key m, the replicas from m on up to theirs,
 * the homes again from there, until both miss the same key. */
static ssize_t run_exists(struct kv_run *r)
{
	struct kv_groups g = { 0 };
	ssize_t lo = 0, m;

	if (!r->t || !r->t->n)
		return 0; /* no donor up: nothing is present */
	for (;;) {
		m = exists_from(r, &r->hg, (size_t)lo);
		if (m < 0 || m == (ssize_t)r->op->n || !r->replicate)
			break;
		if (!g.order && group_by(r, r->second, &g)) {
			m = -ENOMEM;
			break;
		}
		lo = exists_from(r, &g, (size_t)m);
		if (lo < 0)
			m = lo;
		if (lo <= m)
			break;
	}
	groups_free(&g);
	return m;
}

/* One request per batch of the keys of gr at their donors, a round to
 * all donors at once; st[k] gets each key's status (-ENOTCONN for a
 * lost donor). The count of 0s. */
static ssize_t simple_pass(struct kv_run *r, const struct kv_groups *gr,
			   uint8_t type, uint32_t flags, int *st)
{
	struct kv_lanes ls;
	ssize_t ok = 0;

	if (lanes_open(r, gr, &ls)) {
		lanes_close(&ls);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ls.n; i++)
		for (uint32_t j = 0; !ls.l[i].lk && j < ls.l[i].gn; j++)
			st[ls.l[i].g[j]] = -ENOTCONN;
	for (;;) {
		bool any = false;

		for (uint32_t i = 0; i < ls.n; i++)
			any |= lane_fill(r, &ls.l[i], NULL) > 0;
		if (!any)
			break;
		round_send(r, &ls, type, flags);
		round_recv(r, &ls, type);
		for (uint32_t i = 0; i < ls.nord; i++) {
			struct kv_lane *l = ls.ord[i];

			for (uint32_t j = 0; j < l->n; j++) {
				int s = l->rc ? l->rc
					      : l->rep->u.kv.item[j].status;

				st[l->idx[j]] = s;
				ok += !s;
			}
		}
	}
	lanes_close(&ls);
	return ok;
}

/*
 * delete, pin, unpin. Without a second donor: at the homes. Otherwise a
 * delete goes to the second choice first (whatever the handle's
 * replicas: a replica left by another handle goes too), then to the
 * home; with replicas 2 a key whose replica could not be deleted (its
 * donor lost, a put under way) keeps its home copy and that status, so
 * a value's replica never outlives its home. Pins go to both copies
 * with replicas 2. A key's status is its home's, or 0 when the home
 * missed it but the replica did it.
 */
static ssize_t run_simple(struct kv_run *r)
{
	uint8_t type = r->op->kind == KV_DELETE ? WIRE_KV_DELETE : WIRE_KV_PIN;
	uint32_t flags = r->op->kind == KV_UNPIN ? WIRE_KV_UNPIN : 0;
	bool second = r->t && r->t->n > 1 &&
		      (r->replicate || r->op->kind == KV_DELETE);
	struct kv_groups g = { 0 };
	uint32_t *dof = NULL;
	int *rs = NULL;
	ssize_t ok = 0;

	if (r->op->copy == COPY_SECOND) {
		if (!r->t || r->t->n < 2)
			return 0;
		ok = group_by(r, r->second, &g);
		if (!ok)
			ok = simple_pass(r, &g, type, flags, r->status);
		groups_free(&g);
		return ok;
	}
	if (!second || r->op->copy == COPY_HOME)
		return simple_pass(r, &r->hg, type, flags, r->status);
	rs = malloc(r->op->n * sizeof(*rs));
	dof = malloc(r->op->n * sizeof(*dof));
	if (!rs || !dof || group_by(r, r->second, &g)) {
		ok = -ENOMEM;
		goto out;
	}
	simple_pass(r, &g, type, flags, rs);
	memcpy(dof, r->home, r->op->n * sizeof(*dof));
	for (size_t k = 0; k < r->op->n; k++)
		if (type == WIRE_KV_DELETE && r->replicate && rs[k] &&
		    rs[k] != -ENOENT) {
			dof[k] = NO_DONOR;
			r->status[k] = rs[k];
		}
	if (group_by(r, dof, &g)) {
		ok = -ENOMEM;
		goto out;
	}
	simple_pass(r, &g, type, flags, r->status);
	for (size_t k = 0; k < r->op->n; k++) {
		if (dof[k] != NO_DONOR && r->replicate && r->status[k] &&
		    !rs[k] &&
		    (type != WIRE_KV_DELETE || r->status[k] == -ENOENT))
			r->status[k] = 0;
		ok += !r->status[k];
	}
out:
	groups_free(&g);
	free(dof);
	free(rs);
	return ok;
}

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
	if (!r.status && op->kind != KV_EXISTS) {
		r.status = own = malloc(op->n * sizeof(*own));
		if (!own)
			return -ENOMEM;
	}
	r.req = calloc(1, sizeof(*r.req));
	r.rep = malloc(sizeof(*r.rep));
	r.t = donors_get(kv);
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
	ret = run_group(&r);
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
		ret = run_put(&r);
		break;
	case KV_GET:
		ret = run_get(&r);
		break;
	case KV_EXISTS:
		ret = run_exists(&r);
		break;
	default:
		ret = run_simple(&r);
		break;
	}
	if (ret == -ENOMEM) {
		/* Batches already posted settle before we return. */
		for (struct kv_batch *b = r.batches; b; b = b->next)
			batch_wait(&r, b);
	}
out:
	while (r.batches) {
		struct kv_batch *b = r.batches;

		r.batches = b->next;
		batch_free(b);
	}
	/* the membership the op was routed by, when a donor refused it */
	*stale = r.stale && r.t ? r.t->membership : 0;
	if (r.t)
		donors_put(kv, r.t);
	free(r.home);
	free(r.second);
	groups_free(&r.hg);
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
 * pins and unpins only for the keys refused. A second refusal (the
 * donor has not heard of the registry's list yet) leaves those keys
 * -EAGAIN (try again): gets miss. docs/kv.md, "Donors that come and go".
 */
static ssize_t kv_run_op(struct pool_kv *kv, struct pool_kv_op *op)
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
	pthread_mutex_lock(&kv->lock);
	again = kv->donors ? kv->donors->membership : 0;
	pthread_mutex_unlock(&kv->lock);
	if (again == stale && !donors_refresh(kv))
		__atomic_store_n(&kv->refresh_at_ms, now_ms() + kv->refresh_ms,
				 __ATOMIC_RELAXED);
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
	donors_put_locked(kv->donors);
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
		r = donors_refresh(kv);
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
	op->prev = NULL;
	op->next = kv->ops;
	if (kv->ops)
		kv->ops->prev = op;
	kv->ops = op;
	pthread_mutex_unlock(&kv->lock);
	pthread_mutex_lock(&kv->qlock);
	if (kv->qtail)
		kv->qtail->qnext = op;
	else
		kv->qhead = op;
	kv->qtail = op;
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

ssize_t pool_kv_delete(struct pool_kv *kv, size_t n,
		       const struct pool_kv_key *keys, int *status)
{
	struct pool_kv_op op = KEY_OP(kv, KV_DELETE, n, keys, status);

	return run_sync(&op);
}

int pool_kv_delete_async(struct pool_kv *kv, size_t n,
			 const struct pool_kv_key *keys, int *status,
			 struct pool_kv_op **out)
{
	struct pool_kv_op op = KEY_OP(kv, KV_DELETE, n, keys, status);

	return submit(&op, out);
}

ssize_t pool_kv_pin(struct pool_kv *kv, size_t n,
		    const struct pool_kv_key *keys, int *status)
{
	struct pool_kv_op op = KEY_OP(kv, KV_PIN, n, keys, status);

	return run_sync(&op);
}

int pool_kv_pin_async(struct pool_kv *kv, size_t n,
		      const struct pool_kv_key *keys, int *status,
		      struct pool_kv_op **out)
{
	struct pool_kv_op op = KEY_OP(kv, KV_PIN, n, keys, status);

	return submit(&op, out);
}

ssize_t pool_kv_unpin(struct pool_kv *kv, size_t n,
		      const struct pool_kv_key *keys, int *status)
{
	struct pool_kv_op op = KEY_OP(kv, KV_UNPIN, n, keys, status);

	return run_sync(&op);
}

int pool_kv_unpin_async(struct pool_kv *kv, size_t n,
			const struct pool_kv_key *keys, int *status,
			struct pool_kv_op **out)
{
	struct pool_kv_op op = KEY_OP(kv, KV_UNPIN, n, keys, status);

	return submit(&op, out);
}

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
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (timeout_ms >= 0) {
		ts.tv_sec += timeout_ms / 1000;
		ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
	}
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
	if (op->prev)
		op->prev->next = op->next;
	else
		kv->ops = op->next;
	if (op->next)
		op->next->prev = op->prev;
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
	int r = donor_link(kv, d, &lk);

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
			donor_failed(kv, d, lk);
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
		r = donors_refresh(kv);
		if (!r)
			__atomic_store_n(&kv->refresh_at_ms,
					 now_ms() + kv->refresh_ms,
					 __ATOMIC_RELAXED);
		pthread_mutex_unlock(&kv->refresh_lock);
		if (r)
			return r;
	}
	t = donors_get(kv);
	for (uint32_t i = 0; t && i < t->n; i++) {
		int r = donor_clear(kv, &t->d[i]);

		if (r && !first)
			first = r;
	}
	if (t)
		donors_put(kv, t);
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
	t = donors_get(kv);
	if (t && t->n) {
		uint32_t h, s2;

		rank_of(t, key->b, &h, &s2);
		if (second)
			h = s2;
		if (h != NO_DONOR) {
			snprintf(name, cap, "%s", t->d[h].name);
			r = 0;
		}
	}
	if (t)
		donors_put(kv, t);
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
