// SPDX-License-Identifier: MIT
/*
 * libpool/kv_int.h - what the files of the KV tier's client share: the
 * handle (struct pool_kv), the donor table, an op and its run, the
 * batches and lanes, and the functions one file calls in another.
 * Private to libpool/kv*.c; tidepool/kv.h is the API. One concern a file:
 *
 * libpool/kv.c         the handle: open, close, the public calls, the
 *                      worker threads, stats, clear, prefix keys, the
 *                      internal views (pool_kv_home ...)
 * libpool/kv_donors.c  homes: the donor table (DONORS), rendezvous
 *                      ranking, a donor's link and its failure, KV_MODEL
 * libpool/kv_batch.c   grouping keys by donor, wire batches and their
 *                      RMA transfers, rounds of requests over lanes
 * libpool/kv_put.c     put: reserve, write, commit; its replicas
 * libpool/kv_get.c     get: lookup, read, verify, done; replica reads
 * libpool/kv_keyops.c  exists, delete, pin and unpin
 * libpool/kv_run.c     running an op: one run, the retry after ESTALE
 *
 * The design and the invariants are libpool/kv.c's (its top comment).
 */
#ifndef TP_LIBPOOL_KV_INT_H
#define TP_LIBPOOL_KV_INT_H

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <xxhash.h>
#ifdef TP_HAVE_XXH_DISPATCH
/* XXH3_64bits and _update become the library's x86 dispatch: the same
 * sums at AVX2/AVX-512 width (libpool/CMakeLists.txt) */
#include <xxh_x86dispatch.h>
#endif

#include "fabric/fab.h"
#include "fabric/wire.h"
#include "libpool/internal.h"
#include "libpool/log.h"
#include "tidepool/kv.h"

#define KV_OPEN 0x6b76706fu   /* "opvk" */
#define KV_CLOSED 0x6b766364u /* "dcvk" */
#define KV_DEFAULT_THREADS 2
#define KV_MAX_THREADS 64
#define KV_DEFAULT_REFRESH_MS 5000
#define KV_DEFAULT_LEASE_MS 2000
#define KV_RETRY_MS 1000 /* no new link to a failed donor before this */
/* ESTALE: how long to ask for a list newer than the refused one (the
 * registry gives it out once every donor has confirmed it) */
#define KV_STALE_WAIT_MS 2000
#define KV_MAX_REPLICAS 2
#define NO_DONOR UINT32_MAX
#define KV_HDR WIRE_KV_HEADER_LEN

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
	void *const *bufs;	   /* get (NULL with a sink) */
	/* get: pool_kv_get_to's sink (kv_post_key, get_pass), or NULL */
	struct pool_kv_sink *sink;
	const size_t *caps; /* get */
	size_t *out_lens;   /* get */
	int *status;	    /* may be NULL but for get */
	/* put: per key, set when its home's reserve answered -EAGAIN (a
	 * slab on its way back to the donor): kv_run_op tries it again */
	bool *again;
	int copy; /* delete: COPY_BOTH, or one copy (tests) */
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

static inline uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static inline void count(uint64_t *c, uint64_t v)
{
	__atomic_add_fetch(c, v, __ATOMIC_RELAXED);
}

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
	uint64_t t0_ms;	  /* when the lane's request went out (a get's lease) */
	uint64_t done_ms; /* get: when its reads had all ended */
	/* get: XXH3-64 of the value as read, taken by kv_post_key right
	 * after each piece completed (the same-host path completes them
	 * as they are posted): hashed while the bytes are in cache */
	uint64_t sum[WIRE_KV_BATCH];
	bool summed[WIRE_KV_BATCH];
	struct fab_op *ops;
	/* get over the fabric: the stream each of ops was posted on
	 * (pool_link_post_on), NULL: all on stream 0; nstreams: how many
	 * the link had (1: no striping), rr: the next piece's turn */
	uint8_t *stream;
	unsigned nstreams, rr;
	uint8_t *hdr; /* 64 bytes per chunk */
	struct fab_mr *hdr_mr;
	struct fab_mr *val_mr[WIRE_KV_BATCH];
	/* get with a sink (pool_kv_get_to): the value read over the
	 * fabric into libpool's memory, delivered after its checks; NULL:
	 * delivered as it was read (same host), or not read */
	uint8_t *stage[WIRE_KV_BATCH];
};

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
	XXH3_state_t *xs; /* get: kv_post_key's running checksum, or NULL */
	int timeout_ms;
	bool stale; /* a donor answered ESTALE: t is older than its list */
	struct kv_batch *batches, **tail;
};

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

/*
 * Whether key j of lane l's reserve or lookup reply (in r->rep) did not
 * fit that reply (-ENOBUFS after its first key): then it is carried to
 * the lane's next request and is not b's (b->st[j] = 1).
 */
static inline bool kv_batch_carried(const struct kv_run *r, struct kv_lane *l,
				    struct kv_batch *b, uint32_t j)
{
	if (l->rc || !j || r->rep->u.kv.item[j].status != -ENOBUFS)
		return false;
	l->carry[l->ncarry++] = l->idx[j];
	b->st[j] = 1; /* not this batch's */
	return true;
}

/* homes (kv_donors.c) */
void kv_rank_of(const struct kv_donors *t, const uint8_t *key, uint32_t *home,
		uint32_t *second);
void kv_donors_put_locked(struct kv_donors *t);
void kv_donors_put(struct pool_kv *kv, struct kv_donors *t);
int kv_donors_refresh(struct pool_kv *kv);
struct kv_donors *kv_donors_get(struct pool_kv *kv);
void kv_donor_failed(struct pool_kv *kv, struct kv_donor *d, struct plink *lk);
void kv_send_model(struct pool_kv *kv, struct plink *lk, const char *donor);
int kv_donor_link(struct pool_kv *kv, struct kv_donor *d, struct plink **out);

/* batches and rounds (kv_batch.c) */
void kv_batch_free(struct kv_batch *b);
void kv_groups_free(struct kv_groups *g);
int kv_group_by(const struct kv_run *r, const uint32_t *dof,
		struct kv_groups *g);
int kv_run_group(struct kv_run *r);
uint32_t *kv_dof_new(const struct kv_run *r);
void kv_req_keys(struct kv_run *r, uint8_t type, uint32_t flags,
		 const uint32_t *idx, uint32_t n);
int kv_route(const struct kv_run *r, struct plink *lk, struct wire_msg *q);
void kv_lanes_close(struct kv_lanes *ls);
int kv_lanes_open(struct kv_run *r, const struct kv_groups *gr,
		  struct kv_lanes *ls);
uint32_t kv_lane_fill(struct kv_run *r, struct kv_lane *l,
		      bool (*take)(struct kv_run *, uint32_t));
void kv_round_send(struct kv_run *r, struct kv_lanes *ls, uint8_t type,
		   uint32_t flags);
void kv_round_recv(struct kv_run *r, struct kv_lanes *ls, uint8_t type);
const struct wire_kv_loc *kv_item_locs(const struct wire_msg *rep,
				       const struct wire_kv_item *it,
				       uint32_t want);
uint32_t kv_chunks_of(const struct kv_run *r, uint64_t len);
void kv_post_key(struct kv_run *r, struct kv_batch *b, uint32_t j,
		 const struct wire_kv_loc *loc, bool write);
int kv_batch_alloc(struct kv_run *r, struct kv_batch *b);
int kv_batch_post(struct kv_run *r, struct kv_batch *b, bool write);
void kv_batch_wait(struct kv_run *r, struct kv_batch *b);
struct kv_batch *kv_batch_new(struct kv_run *r, const struct kv_lane *l,
			      bool replica);

/* put (kv_put.c) */
ssize_t kv_run_put(struct kv_run *r);

/* get (kv_get.c) */
ssize_t kv_run_get(struct kv_run *r);

/* exists, delete, pin (kv_keyops.c) */
ssize_t kv_run_exists(struct kv_run *r);
ssize_t kv_simple_pass(struct kv_run *r, const struct kv_groups *gr,
		       uint8_t type, uint32_t flags, int *st);
ssize_t kv_run_simple(struct kv_run *r);

/* running an op (kv_run.c) */
ssize_t kv_run_op(struct pool_kv *kv, struct pool_kv_op *op);

#endif
