// SPDX-License-Identifier: MIT
/*
 * libpool/pool.c - sessions, regions and RMA (tidepool/pool.h).
 *
 * DESIGN
 * A session (struct pool) holds one or more donor links (struct plink).
 * A link is everything we have with one memd: its control connection
 * (fabric/rpc), a fabric domain and endpoint whose address vector holds
 * every endpoint that memd announced (one per NUMA node it serves), its
 * session id, epoch and lease TTL, and its own heartbeat thread. A
 * standalone session is one link to the memd at pool_opts.addr, opened
 * at connect. Every slab belongs to one link and remembers the memd
 * endpoint that serves it (its lease says which) and the node it is on;
 * RMA to a slab goes to that endpoint of that link. Regions of half a
 * slab or more take whole slabs; the rest of a region, and small regions,
 * are packed into "packed" slabs in 4 KiB chunks (first fit over a
 * bitmap), and a packed slab is shared only by regions that asked for the
 * same node (pool_alloc_node), so a region asked for on node n never
 * lands in a slab leased for "any". A region is a list of extents (slab,
 * offset, length); I/O splits a byte range over extents and into pieces
 * of at most xfer_bytes, posts them all (each link's endpoint bounds how
 * many are in flight) and waits. Every posted piece carries its link in
 * fab_op.arg.
 *
 * Threads:
 *   callers   alloc/free take p->lock (links, slabs, regions, RPCs); I/O
 *             takes a link's ep_rw shared while it posts to or waits on
 *             that link, never p->lock, and holds one link's ep_rw at a
 *             time.
 *   pool-hb   one per link: renews the link's leases every ttl/3 and
 *             fails the link when its memd is gone.
 * Failing a link (link_fail) records the error, then takes its ep_rw
 * exclusively and closes its endpoint: every operation still in flight
 * there completes with an error and no buffer is touched afterwards. A
 * caller never holds a link's ep_rw when it fails that link. A failed
 * link stays failed: regions with slabs on it get -ENOTCONN for ranges
 * there; other links are not affected. Links live until pool_close.
 *
 * Lease validity: memd never reclaims before last renewal + ttl + grace;
 * we stop using a link's leases at heartbeat send time + ttl - margin
 * (valid_until_ms), so a silent memd costs errors, never wrong bytes.
 */
#include "tidepool/pool.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fab.h"
#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "libpool/log.h"

#define CHUNK_BYTES 4096u /* packing granularity */
#define DEFAULT_ADDR "127.0.0.1:7470"
#define DEFAULT_TIMEOUT_MS 5000
#define DEFAULT_INFLIGHT 64
#define DEFAULT_XFER (1u << 20) /* largest single RMA we post */
#define INLINE_OPS 4

struct pool;

/* One memd we hold a session with. Fields above `next` are set before
 * the link is published in p->links and never change afterwards. */
struct plink {
	struct pool *p;
	char addr[WIRE_HOSTPORT_MAX];
	uint32_t donor_id; /* 0: standalone */
	uint64_t donor_epoch;
	uint16_t proto; /* negotiated protocol version */
	struct rpc *ctl;
	struct fab_domain *fd;
	unsigned mr_mode;
	uint64_t session_id, epoch;
	uint32_t ttl_ms, margin_ms;
	char provider[WIRE_PROV_MAX];
	/* memd's endpoints as HELLO_OK gave them; peer: our AV's handle */
	struct wire_endpoint mep[WIRE_MAX_ENDPOINTS];
	uint64_t peer[WIRE_MAX_ENDPOINTS];
	uint16_t nendpoints;

	struct plink *next; /* p->links, under p->lock */
	uint64_t nslabs;    /* under p->lock */

	struct fab_ep *ep; /* NULL once the link failed; under ep_rw */
	pthread_rwlock_t ep_rw;
	uint64_t valid_until_ms; /* atomic */
	int lost; /* atomic: 0, or the -errno that ended the link */

	pthread_t hb;
	bool hb_started;
	pthread_mutex_t hb_lock;
	pthread_cond_t hb_cond;
	bool hb_stop;
	uint64_t st_heartbeats; /* atomic */
};

struct slab {
	struct wire_lease l; /* l.endpoint < link->nendpoints, checked */
	struct plink *link;
	int want_node; /* node the slab was leased for; -1: any */
	bool packed;
	uint32_t nchunks, used; /* packed slabs */
	uint64_t *bits;		/* packed: 1 = chunk in use */
	struct slab *next, *prev;
};

struct extent {
	struct slab *slab;
	uint64_t off; /* within the slab */
	uint64_t len;
};

struct pool_region {
	size_t size;
	int node; /* of every extent's slab; -1: unknown or mixed */
	struct pool_region *next, *prev;
	uint32_t nextents;
	struct extent ext[];
};

/* A local registration of an op's buffer in one link's domain. */
struct op_mr {
	struct plink *link;
	struct fab_mr *mr;
};

struct pool_op {
	struct pool *p;
	size_t n;
	struct fab_op *ops; /* ops[i].arg: the piece's struct plink */
	struct fab_op inline_ops[INLINE_OPS];
	/* FAB_MR_LOCAL: the buffer registered in each link's domain, the
	 * first link's in lmr, others' in xmr[0 .. nxmr-1] */
	struct op_mr lmr;
	struct op_mr *xmr;
	unsigned nxmr;
	void *buf;
	uint64_t bytes;
	bool write;
	bool heap; /* pool_op itself was malloc'd */
};

struct pool {
	char addr[WIRE_HOSTPORT_MAX];
	char client[WIRE_NAME_MAX];
	int timeout_ms;
	unsigned max_inflight;
	size_t xfer_bytes; /* atomic: only ever lowered */
	uint64_t slab_bytes;

	pthread_mutex_t lock; /* links, slabs, regions */
	struct plink *links;  /* in the order they were opened */
	struct slab *slabs;
	uint64_t nslabs, nregions;
	struct pool_region *regions;

	/* atomics */
	uint64_t st_read, st_written, st_ops, st_errors;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void extend_validity(struct plink *lk, uint64_t sent_ms)
{
	uint64_t v = sent_ms + lk->ttl_ms - lk->margin_ms;
	uint64_t cur = __atomic_load_n(&lk->valid_until_ms, __ATOMIC_RELAXED);

	while (v > cur &&
	       !__atomic_compare_exchange_n(&lk->valid_until_ms, &cur, v, false,
					    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

static bool link_is_lost(struct plink *lk)
{
	return __atomic_load_n(&lk->lost, __ATOMIC_ACQUIRE) != 0;
}

/* Ends the link: from now on every use of it fails with -ENOTCONN. */
static void link_fail(struct plink *lk, int err, const char *why)
{
	int expected = 0;

	if (__atomic_compare_exchange_n(&lk->lost, &expected, err, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		pool_log(LOG_ERR,
			 "session: lost session=%" PRIx64 " memd=%s donor=%u "
			 "err=%s why=%s",
			 lk->session_id, lk->addr, lk->donor_id, strerror(-err),
			 why);
	pthread_rwlock_wrlock(&lk->ep_rw);
	if (lk->ep) {
		fab_ep_close(lk->ep);
		lk->ep = NULL;
	}
	pthread_rwlock_unlock(&lk->ep_rw);
}

/* The control connection's reports, into the library's log. */
static void rpc_log(void *arg, int level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	(void)arg;
	if (level > pool_log_threshold())
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pool_log_emit(level, "%s", line);
}

/* 0 when lk's leases may be used now, else -ENOTCONN. *now caches the
 * clock over one operation (0: not read yet). */
static int link_usable(struct plink *lk, uint64_t *now)
{
	if (__atomic_load_n(&lk->lost, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (!*now)
		*now = mono_ms();
	if (*now >= __atomic_load_n(&lk->valid_until_ms, __ATOMIC_ACQUIRE))
		return -ENOTCONN; /* renewal overdue: leases may be gone */
	return 0;
}

/* ------------------------------------------------------------------ */
/* heartbeat                                                            */

static void *hb_main(void *arg)
{
	struct plink *lk = arg;
	uint32_t period = lk->ttl_ms / 3;

	pthread_setname_np(pthread_self(), "pool-hb");
	for (;;) {
		struct wire_msg req = { .type = WIRE_HEARTBEAT };
		struct wire_msg rep;
		struct timespec ts;
		uint64_t sent;
		int r, tmo;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += period / 1000;
		ts.tv_nsec += (long)(period % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&lk->hb_lock);
		while (!lk->hb_stop &&
		       pthread_cond_timedwait(&lk->hb_cond, &lk->hb_lock,
					      &ts) != ETIMEDOUT)
			;
		if (lk->hb_stop) {
			pthread_mutex_unlock(&lk->hb_lock);
			break;
		}
		pthread_mutex_unlock(&lk->hb_lock);
		if (link_is_lost(lk))
			break;

		sent = mono_ms();
		/* A reply is useful until the leases it renews would lapse
		 * anyway; a slow memd is not a dead one. */
		tmo = (int)(lk->ttl_ms - lk->margin_ms);
		r = rpc_call(lk->ctl, &req, &rep, WIRE_HEARTBEAT_OK, tmo, NULL,
			     0);
		if (r == 0 && rep.u.heartbeat_ok.epoch != lk->epoch)
			r = -ESTALE; /* a restarted memd: old leases are gone */
		if (r) {
			link_fail(lk, r == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN,
				  r == -ESTALE ? "memd expired or restarted"
					       : "heartbeat failed");
			break;
		}
		extend_validity(lk, sent);
		__atomic_add_fetch(&lk->st_heartbeats, 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* ------------------------------------------------------------------ */
/* links                                                                */

/* Stops lk's heartbeat thread (idempotent). */
static void link_stop_hb(struct plink *lk)
{
	if (!lk->hb_started)
		return;
	pthread_mutex_lock(&lk->hb_lock);
	lk->hb_stop = true;
	pthread_cond_signal(&lk->hb_cond);
	pthread_mutex_unlock(&lk->hb_lock);
	pthread_join(lk->hb, NULL);
	lk->hb_started = false;
}

/*
 * Closes lk and frees it. The endpoint goes first: no RMA of ours may
 * still be running when BYE releases the leases (protocol.md); a lost
 * memd reclaims them by itself when their TTL runs out. NULL is a no-op.
 */
static void link_close(struct plink *lk)
{
	if (!lk)
		return;
	link_stop_hb(lk);
	if (lk->ep) {
		fab_ep_close(lk->ep);
		lk->ep = NULL;
	}
	if (lk->ctl && lk->session_id && !link_is_lost(lk)) {
		struct wire_msg req = { .type = WIRE_BYE }, rep;

		rpc_call(lk->ctl, &req, &rep, WIRE_BYE_OK, lk->p->timeout_ms,
			 NULL, 0);
	}
	fab_domain_close(lk->fd);
	rpc_close(lk->ctl);
	pthread_rwlock_destroy(&lk->ep_rw);
	pthread_cond_destroy(&lk->hb_cond);
	pthread_mutex_destroy(&lk->hb_lock);
	free(lk);
}

static struct plink *link_new(struct pool *p, const char *addr)
{
	struct plink *lk = calloc(1, sizeof(*lk));
	pthread_condattr_t ca;
	pthread_rwlockattr_t ra;

	if (!lk)
		return NULL;
	lk->p = p;
	/* Callers pass at most WIRE_HOSTPORT_MAX - 1 bytes. */
	memcpy(lk->addr, addr, strnlen(addr, sizeof(lk->addr) - 1));
	pthread_mutex_init(&lk->hb_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&lk->hb_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&lk->ep_rw, &ra);
	pthread_rwlockattr_destroy(&ra);
	return lk;
}

/* HELLO on lk->ctl; fills the link's session fields from HELLO_OK. */
static int link_hello(struct plink *lk)
{
	struct pool *p = lk->p;
	struct wire_msg req = { .type = WIRE_HELLO }, rep;
	char text[WIRE_MSG_MAX];
	int r;

	req.u.hello.proto_min = WIRE_PROTO_MIN;
	req.u.hello.proto_max = WIRE_PROTO_MAX;
	memcpy(req.u.hello.client, p->client, sizeof(req.u.hello.client));
	r = rpc_call(lk->ctl, &req, &rep, WIRE_HELLO_OK, p->timeout_ms, text,
		     sizeof(text));
	if (r) {
		pool_log(LOG_WARNING, "session: hello memd=%s err=%s %s",
			 lk->addr, strerror(-r), text);
		return r;
	}
	if (rep.u.hello_ok.proto < WIRE_PROTO_MIN ||
	    rep.u.hello_ok.proto > WIRE_PROTO_MAX)
		return -EPROTONOSUPPORT;
	lk->proto = rep.u.hello_ok.proto;
	lk->session_id = rep.u.hello_ok.session_id;
	lk->epoch = rep.u.hello_ok.epoch;
	lk->ttl_ms = rep.u.hello_ok.ttl_ms;
	if (lk->ttl_ms < 30 || rep.u.hello_ok.slab_bytes < CHUNK_BYTES ||
	    rep.u.hello_ok.slab_bytes % CHUNK_BYTES)
		return -EPROTO;
	if (!p->slab_bytes)
		p->slab_bytes = rep.u.hello_ok.slab_bytes;
	if (rep.u.hello_ok.slab_bytes != p->slab_bytes) {
		pool_log(LOG_ERR,
			 "session: memd=%s slab=%" PRIu64 " but the pool's "
			 "is %" PRIu64,
			 lk->addr, rep.u.hello_ok.slab_bytes, p->slab_bytes);
		return -EPROTO;
	}
	/* Stop using leases a tenth of the TTL (at most 1 s) early. */
	lk->margin_ms = lk->ttl_ms / 10 < 1000 ? lk->ttl_ms / 10 : 1000;
	memcpy(lk->provider, rep.u.hello_ok.provider, sizeof(lk->provider));
	lk->nendpoints = rep.u.hello_ok.nendpoints;
	memcpy(lk->mep, rep.u.hello_ok.ep, lk->nendpoints * sizeof(lk->mep[0]));
	return 0;
}

/* The fabric side of lk (domain bound where local is, endpoint, AV). */
static int link_fabric(struct plink *lk, const char *local)
{
	struct pool *p = lk->p;
	struct fab_opts fo = { 0 };
	size_t max, cur;
	int r;

	/* Bind the fabric where the control connection goes out; providers
	 * without IP addressing (shm) take no node. */
	fo.provider = lk->provider;
	/* shm names endpoints by the node string: memd's name would clash. */
	fo.node = strncmp(lk->provider, "shm", 3) ? local : NULL;
	r = fab_domain_open(&fo, &lk->fd);
	if (r == -ENODATA) {
		fo.node = NULL;
		r = fab_domain_open(&fo, &lk->fd);
	}
	if (r) {
		pool_log(LOG_WARNING, "session: fabric provider=%s err=%s",
			 lk->provider, strerror(-r));
		return r;
	}
	lk->mr_mode = fab_domain_mr_mode(lk->fd);
	/* Pieces are cut to p->xfer_bytes before the link is chosen: it is
	 * the smallest maximum of all links, lowered before a link with a
	 * smaller one gets slabs. */
	max = fab_domain_max_msg(lk->fd);
	cur = __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
	while (max < cur &&
	       !__atomic_compare_exchange_n(&p->xfer_bytes, &cur, max, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	r = fab_ep_open(lk->fd, p->max_inflight, &lk->ep);
	for (uint16_t i = 0; !r && i < lk->nendpoints; i++) {
		r = fab_ep_av_insert(lk->ep, lk->mep[i].addr,
				     lk->mep[i].addr_len, &lk->peer[i]);
		if (!r)
			pool_log(LOG_DEBUG,
				 "session: memd=%s endpoint=%u node=%d",
				 lk->addr, i, lk->mep[i].node);
	}
	if (r)
		pool_log(LOG_WARNING, "session: fabric endpoint err=%s",
			 strerror(-r));
	return r;
}

/*
 * Opens a link to the memd at addr: control connection, HELLO, fabric,
 * heartbeat. Does not publish it. Returns 0 and *out, or -errno.
 */
static int link_open(struct pool *p, const char *addr, struct plink **out)
{
	char local[64];
	struct plink *lk;
	int r;

	*out = NULL;
	lk = link_new(p, addr);
	if (!lk)
		return -ENOMEM;
	r = rpc_connect(addr, p->timeout_ms, &lk->ctl, local, sizeof(local));
	if (r) {
		pool_log(LOG_WARNING, "session: connect memd=%s err=%s", addr,
			 strerror(-r));
		goto fail;
	}
	rpc_set_log(lk->ctl, rpc_log, NULL);
	r = link_hello(lk);
	if (r)
		goto fail;
	extend_validity(lk, mono_ms());
	r = link_fabric(lk, local);
	if (r)
		goto fail;
	r = pthread_create(&lk->hb, NULL, hb_main, lk);
	if (r) {
		r = -r;
		goto fail;
	}
	lk->hb_started = true;
	pool_log(LOG_INFO,
		 "session: open session=%" PRIx64 " memd=%s provider=%s "
		 "slab=%" PRIu64 " ttl_ms=%u endpoints=%u proto=%u",
		 lk->session_id, lk->addr, lk->provider, p->slab_bytes,
		 lk->ttl_ms, lk->nendpoints, lk->proto);
	*out = lk;
	return 0;
fail:
	link_close(lk);
	return r;
}

/* Appends lk to p->links. Caller holds lock (or owns p alone). */
static void link_publish_locked(struct pool *p, struct plink *lk)
{
	struct plink **at = &p->links;

	while (*at)
		at = &(*at)->next;
	*at = lk;
}

/* ------------------------------------------------------------------ */
/* leases and packing                                                   */

static void slab_free(struct slab *s)
{
	if (s) {
		free(s->bits);
		free(s);
	}
}

/*
 * A lease as memd sent it is usable when its endpoint is one HELLO_OK
 * announced, its length is the pool's slab size and, for a lease asked
 * on a node, it is on that node.
 */
static bool lease_is_usable(const struct plink *lk, const struct wire_lease *l,
			    int node)
{
	return l->endpoint < lk->nendpoints &&
	       l->len_bytes == lk->p->slab_bytes &&
	       (node == WIRE_NODE_ANY || l->node == node);
}

/* Tracks a new slab of lk; appends it to p->slabs. Caller holds lock. */
static struct slab *slab_add_locked(struct pool *p, struct plink *lk,
				    const struct wire_lease *l, bool packed,
				    int node)
{
	struct slab *s = calloc(1, sizeof(*s));

	if (s && packed) {
		s->nchunks = (uint32_t)(l->len_bytes / CHUNK_BYTES);
		s->bits = calloc((s->nchunks + 63) / 64, 8);
	}
	if (!s || (packed && !s->bits)) {
		/* Not tracked means not released by us: memd reclaims it
		 * when the session ends. */
		slab_free(s);
		return NULL;
	}
	s->l = *l;
	s->link = lk;
	s->want_node = node;
	s->packed = packed;
	s->next = p->slabs;
	if (p->slabs)
		p->slabs->prev = s;
	p->slabs = s;
	p->nslabs++;
	lk->nslabs++;
	return s;
}

/*
 * Checks and tracks the leases of one LEASE_OK / LEASE_GRANT_OK: k slabs
 * asked on node, stored to out[0 .. k-1]. Returns 0, -EPROTO (a lease we
 * cannot use; nothing tracked) or -ENOMEM (out[] has NULL holes).
 */
static int leases_take_locked(struct pool *p, struct plink *lk,
			      const struct wire_lease_ok *ok, uint32_t k,
			      bool packed, int node, struct slab **out)
{
	int r = 0;

	if (ok->count != k)
		return -EPROTO;
	for (uint32_t i = 0; i < k; i++) {
		if (!lease_is_usable(lk, &ok->lease[i], node)) {
			pool_log(LOG_ERR,
				 "alloc: memd=%s sent a lease on endpoint %u "
				 "node %d len %" PRIu64 " for node %d (%u "
				 "endpoints)",
				 lk->addr, ok->lease[i].endpoint,
				 ok->lease[i].node, ok->lease[i].len_bytes,
				 node, lk->nendpoints);
			return -EPROTO;
		}
	}
	for (uint32_t i = 0; i < k; i++) {
		out[i] = slab_add_locked(p, lk, &ok->lease[i], packed, node);
		if (!out[i])
			r = -ENOMEM;
	}
	return r;
}

/*
 * Leases n slabs on node (-1: any) from lk with LEASE; appends them to
 * p->slabs and out[] (which the caller zeroed: a slab that could not be
 * tracked leaves a NULL). Caller holds lock.
 */
static int lease_locked(struct pool *p, struct plink *lk, uint32_t n,
			bool packed, int node, struct slab **out)
{
	static const uint32_t max = WIRE_MAX_LEASES;
	struct wire_msg *req, *rep;
	uint32_t got = 0;
	int r = 0;

	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep) {
		free(req);
		free(rep);
		return -ENOMEM;
	}
	while (got < n) {
		uint32_t k = n - got < max ? n - got : max;
		uint64_t sent = mono_ms();
		char text[WIRE_MSG_MAX];

		memset(req, 0, sizeof(*req));
		req->type = WIRE_LEASE;
		req->u.lease.nslabs = k;
		req->u.lease.node = node;
		text[0] = '\0';
		r = rpc_call(lk->ctl, req, rep, WIRE_LEASE_OK, p->timeout_ms,
			     text, sizeof(text));
		if (r) {
			if (r == -ENOSPC)
				pool_log(LOG_INFO, "alloc: %s", text);
			else if (text[0])
				pool_log(LOG_WARNING,
					 "alloc: node=%d refused by memd: %s",
					 node, text);
			break;
		}
		r = leases_take_locked(p, lk, &rep->u.lease_ok, k, packed, node,
				       out + got);
		if (r == -EPROTO)
			break;
		extend_validity(lk, sent);
		got += k;
		if (r)
			break;
	}
	free(req);
	free(rep);
	return r;
}

/* Leases n slabs for a region of the session. Caller holds lock. */
static int lease_any_locked(struct pool *p, uint32_t n, bool packed, int node,
			    struct slab **out)
{
	return lease_locked(p, p->links, n, packed, node, out);
}

/* One RELEASE of k refs to lk; a lost link's leases are memd's to
 * reclaim, which is not our error. */
static int release_send(struct pool *p, struct plink *lk, struct wire_msg *req,
			struct wire_msg *rep, uint32_t k)
{
	int r;

	if (link_is_lost(lk))
		return 0;
	req->type = WIRE_RELEASE;
	req->u.release.count = k;
	r = rpc_call(lk->ctl, req, rep, WIRE_RELEASE_OK, p->timeout_ms, NULL,
		     0);
	return r == -ENOTCONN ? 0 : r;
}

/*
 * Releases slabs (already unlinked by the caller), in RELEASE batches per
 * link, and frees them. Caller holds lock.
 */
static int release_locked(struct pool *p, struct slab **v, uint32_t n)
{
	struct wire_msg *req, *rep;
	int first = 0, r;

	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep)
		first = -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct plink *lk;
		uint32_t k = 0;

		if (!v[i])
			continue;
		lk = v[i]->link;
		for (uint32_t j = i; j < n; j++) {
			if (!v[j] || v[j]->link != lk)
				continue;
			if (req && rep) {
				if (!k)
					memset(req, 0, sizeof(*req));
				req->u.release.ref[k].epoch = v[j]->l.epoch;
				req->u.release.ref[k].slab = v[j]->l.slab;
				req->u.release.ref[k].generation =
					v[j]->l.generation;
				k++;
			}
			lk->nslabs--;
			slab_free(v[j]);
			v[j] = NULL;
			if (k == WIRE_MAX_LEASES) {
				r = release_send(p, lk, req, rep, k);
				first = first ? first : r;
				k = 0;
			}
		}
		if (k) {
			r = release_send(p, lk, req, rep, k);
			first = first ? first : r;
		}
	}
	free(req);
	free(rep);
	return first;
}

static void unlink_slab_locked(struct pool *p, struct slab *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		p->slabs = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->next = s->prev = NULL;
	p->nslabs--;
}

static bool bit_get(const uint64_t *b, uint32_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static void bits_set(uint64_t *b, uint32_t from, uint32_t n, bool v)
{
	for (uint32_t i = from; i < from + n; i++) {
		if (v)
			b[i / 64] |= 1ull << (i % 64);
		else
			b[i / 64] &= ~(1ull << (i % 64));
	}
}

/* First fit of n free chunks; returns the first chunk or UINT32_MAX. */
static uint32_t first_fit(const struct slab *s, uint32_t n)
{
	uint32_t run = 0;

	for (uint32_t i = 0; i < s->nchunks; i++) {
		if (!(i % 64) && s->bits[i / 64] == ~0ull) {
			run = 0;
			i += 63;
			continue;
		}
		run = bit_get(s->bits, i) ? 0 : run + 1;
		if (run == n)
			return i + 1 - n;
	}
	return UINT32_MAX;
}

/* Packs len bytes into a packed slab of a live link leased for the same
 * node. */
static int pack_locked(struct pool *p, uint64_t len, int node, struct extent *e)
{
	uint32_t n = (uint32_t)((len + CHUNK_BYTES - 1) / CHUNK_BYTES);
	struct slab *s, *fresh = NULL;
	uint32_t at = UINT32_MAX;
	int r;

	for (s = p->slabs; s; s = s->next) {
		if (!s->packed || s->want_node != node ||
		    s->nchunks - s->used < n || link_is_lost(s->link))
			continue;
		at = first_fit(s, n);
		if (at != UINT32_MAX)
			break;
	}
	if (!s) {
		r = lease_any_locked(p, 1, true, node, &fresh);
		if (r)
			return r;
		s = fresh;
		at = 0;
	}
	bits_set(s->bits, at, n, true);
	s->used += n;
	e->slab = s;
	e->off = (uint64_t)at * CHUNK_BYTES;
	e->len = len;
	return 0;
}

/* Frees one extent's space; a slab left empty goes into *dead. */
static void unpack_locked(struct pool *p, struct extent *e, struct slab **dead,
			  uint32_t *ndead)
{
	struct slab *s = e->slab;

	if (s->packed) {
		uint32_t n =
			(uint32_t)((e->len + CHUNK_BYTES - 1) / CHUNK_BYTES);

		bits_set(s->bits, (uint32_t)(e->off / CHUNK_BYTES), n, false);
		s->used -= n;
		if (s->used)
			return;
	}
	unlink_slab_locked(p, s);
	dead[(*ndead)++] = s;
}

/* ------------------------------------------------------------------ */
/* public: sessions                                                     */

int pool_connect(const struct pool_opts *opts, struct pool **out)
{
	struct pool_opts o = { 0 };
	struct plink *lk;
	const char *env;
	struct pool *p;
	int r;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (opts)
		o = *opts;
	if (!o.addr)
		o.addr = getenv("LIBPOOL_ADDR");
	if (!o.addr || !*o.addr)
		o.addr = DEFAULT_ADDR;
	if (o.timeout_ms < 0)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	if (snprintf(p->addr, sizeof(p->addr), "%s", o.addr) >=
	    (int)sizeof(p->addr)) {
		free(p);
		return -EINVAL;
	}
	p->timeout_ms = o.timeout_ms ? o.timeout_ms : DEFAULT_TIMEOUT_MS;
	p->max_inflight = o.max_inflight ? o.max_inflight : DEFAULT_INFLIGHT;
	p->xfer_bytes = DEFAULT_XFER;
	env = getenv("LIBPOOL_XFER_BYTES");
	if (env && strtoull(env, NULL, 0) >= 4096)
		p->xfer_bytes = strtoull(env, NULL, 0);
	if (o.client_name)
		snprintf(p->client, sizeof(p->client), "%s", o.client_name);
	else
		snprintf(p->client, sizeof(p->client), "%s pid %d",
			 program_invocation_short_name, (int)getpid());
	/* Printable bytes only: the name ends up in memd's log lines. */
	for (char *c = p->client; *c; c++)
		if (*c < 0x20 || *c > 0x7e)
			*c = '?';
	pthread_mutex_init(&p->lock, NULL);

	r = link_open(p, p->addr, &lk);
	if (r)
		goto fail;
	link_publish_locked(p, lk);
	*out = p;
	return 0;
fail:
	pool_close(p);
	return r;
}

void pool_close(struct pool *p)
{
	if (!p)
		return;
	for (struct plink *lk = p->links; lk; lk = lk->next)
		link_stop_hb(lk);
	while (p->links) {
		struct plink *lk = p->links;

		p->links = lk->next;
		link_close(lk);
	}
	while (p->regions) {
		struct pool_region *r = p->regions;

		p->regions = r->next;
		free(r);
	}
	while (p->slabs) {
		struct slab *s = p->slabs;

		p->slabs = s->next;
		slab_free(s);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* ------------------------------------------------------------------ */
/* public: regions                                                      */

int pool_alloc(struct pool *p, size_t len, struct pool_region **out)
{
	return pool_alloc_node(p, len, WIRE_NODE_ANY, out);
}

/* The node all of reg's slabs are on, or -1 (none known, or several). */
static int region_node(const struct pool_region *reg)
{
	int node = reg->nextents ? reg->ext[0].slab->l.node : WIRE_NODE_ANY;

	for (uint32_t i = 1; i < reg->nextents; i++)
		if (reg->ext[i].slab->l.node != node)
			return WIRE_NODE_ANY;
	return node;
}

/* Unlinks and releases the non-NULL slabs of got[0 .. n-1]. */
static void drop_slabs_locked(struct pool *p, struct slab **got, uint64_t n)
{
	uint32_t k = 0;

	for (uint64_t i = 0; i < n; i++)
		if (got[i]) {
			unlink_slab_locked(p, got[i]);
			got[k++] = got[i];
		}
	release_locked(p, got, k);
}

int pool_alloc_node(struct pool *p, size_t len, int node,
		    struct pool_region **out)
{
	uint64_t full, rem;
	struct pool_region *reg;
	struct slab **got = NULL;
	uint32_t n;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	*out = NULL;
	if (len == 0 || node < WIRE_NODE_ANY || node >= WIRE_NODE_MAX)
		return -EINVAL;
	/* Only a lost session stops an allocation: the grant itself renews
	 * the session's leases. */
	if (link_is_lost(p->links))
		return -ENOTCONN;
	full = len / p->slab_bytes;
	rem = len % p->slab_bytes;
	if (rem >= p->slab_bytes / 2) {
		full++;
		rem = 0;
	}
	if (full > UINT32_MAX - 1)
		return -ENOSPC;
	n = (uint32_t)full + (rem ? 1 : 0);
	reg = calloc(1, sizeof(*reg) + n * sizeof(reg->ext[0]));
	if (full)
		got = calloc(full, sizeof(*got));
	if (!reg || (full && !got)) {
		free(reg);
		free(got);
		return -ENOMEM;
	}
	reg->size = len;
	reg->nextents = n;
	pthread_mutex_lock(&p->lock);
	if (full) {
		r = lease_any_locked(p, (uint32_t)full, false, node, got);
		if (r) {
			/* What was tracked before the failure goes back. */
			drop_slabs_locked(p, got, full);
			goto unlock;
		}
		for (uint64_t i = 0; i < full; i++) {
			reg->ext[i].slab = got[i];
			reg->ext[i].off = 0;
			reg->ext[i].len = p->slab_bytes;
		}
		/* Without a packed tail the last whole slab may be only
		 * partly used (a region of 1.6 slabs takes 2). */
		if (!rem)
			reg->ext[full - 1].len =
				len - (full - 1) * p->slab_bytes;
	}
	if (rem) {
		r = pack_locked(p, rem, node, &reg->ext[full]);
		if (r && full)
			drop_slabs_locked(p, got, full);
	}
unlock:
	if (!r) {
		reg->node = region_node(reg);
		reg->next = p->regions;
		if (p->regions)
			p->regions->prev = reg;
		p->regions = reg;
		p->nregions++;
	}
	pthread_mutex_unlock(&p->lock);
	free(got);
	if (r) {
		free(reg);
		pool_log(LOG_INFO, "alloc: len=%zu node=%d err=%s", len, node,
			 strerror(-r));
		return r;
	}
	*out = reg;
	return 0;
}

int pool_free(struct pool *p, struct pool_region *reg)
{
	struct slab *dead_inline[8], **dead = dead_inline;
	uint32_t ndead = 0;
	int r = 0;

	if (!reg)
		return 0;
	if (!p)
		return -EINVAL;
	if (reg->nextents > 8) {
		dead = calloc(reg->nextents, sizeof(*dead));
		if (!dead)
			return -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < reg->nextents; i++)
		unpack_locked(p, &reg->ext[i], dead, &ndead);
	if (ndead)
		r = release_locked(p, dead, ndead);
	if (reg->prev)
		reg->prev->next = reg->next;
	else
		p->regions = reg->next;
	if (reg->next)
		reg->next->prev = reg->prev;
	p->nregions--;
	pthread_mutex_unlock(&p->lock);
	if (dead != dead_inline)
		free(dead);
	free(reg);
	return r;
}

size_t pool_region_size(const struct pool_region *r)
{
	return r ? r->size : 0;
}

int pool_region_node(const struct pool_region *r)
{
	return r ? r->node : WIRE_NODE_ANY;
}

/* ------------------------------------------------------------------ */
/* public: I/O                                                          */

/* Number of RMA pieces [off, off+len) of r splits into. */
static size_t count_pieces(const struct pool_region *r, uint64_t off,
			   uint64_t len, size_t xfer)
{
	size_t n = 0;

	for (uint32_t i = 0; i < r->nextents && len; i++) {
		const struct extent *e = &r->ext[i];
		uint64_t take;

		if (off >= e->len) {
			off -= e->len;
			continue;
		}
		take = e->len - off < len ? e->len - off : len;
		n += (take + xfer - 1) / xfer;
		len -= take;
		off = 0;
	}
	return n;
}

static int map_status(int s)
{
	/* -ETIMEDOUT from pool_wait means "still running, wait again"; a
	 * transfer the provider timed out is -ETIME. */
	return s == -ECANCELED ? -ENOTCONN : s == -ETIMEDOUT ? -ETIME : s;
}

static __attribute__((noinline)) void op_release_mrs(struct pool_op *op)
{
	if (op->lmr.mr)
		fab_mr_close(op->lmr.mr);
	for (unsigned i = 0; i < op->nxmr; i++)
		fab_mr_close(op->xmr[i].mr);
	if (op->nxmr)
		free(op->xmr);
}

static void op_release(struct pool_op *op)
{
	if (__builtin_expect(op->lmr.mr || op->nxmr, 0))
		op_release_mrs(op);
	if (op->ops != op->inline_ops)
		free(op->ops);
	if (op->heap)
		free(op);
}

/*
 * The local descriptor of op's buffer for RMA on lk: NULL unless lk's
 * provider wants local registrations (FAB_MR_LOCAL), then a registration
 * in lk's domain made on first use. Caller holds lk->ep_rw with lk->ep
 * open.
 */
static int op_desc(struct pool_op *op, struct plink *lk, void **desc)
{
	struct op_mr *m;
	int r;

	*desc = NULL;
	if (!(lk->mr_mode & FAB_MR_LOCAL))
		return 0;
	if (op->lmr.mr && op->lmr.link == lk) {
		*desc = fab_mr_desc(op->lmr.mr);
		return 0;
	}
	for (unsigned i = 0; i < op->nxmr; i++)
		if (op->xmr[i].link == lk) {
			*desc = fab_mr_desc(op->xmr[i].mr);
			return 0;
		}
	if (op->lmr.mr) {
		m = realloc(op->nxmr ? op->xmr : NULL,
			    (op->nxmr + 1) * sizeof(*m));
		if (!m)
			return -ENOMEM;
		op->xmr = m;
		m = &op->xmr[op->nxmr];
	} else {
		m = &op->lmr;
	}
	r = fab_mr_reg(lk->fd, lk->ep, op->buf, op->bytes, FAB_ACCESS_LOCAL, 0,
		       &m->mr);
	if (r)
		return r;
	m->link = lk;
	if (m != &op->lmr)
		op->nxmr++;
	*desc = fab_mr_desc(m->mr);
	return 0;
}

/*
 * Waits for every piece of op. Returns 0 when all completed (results in
 * the pieces), -ETIMEDOUT when one is still running at the deadline.
 */
static int op_wait_all(struct pool_op *op, int timeout_ms)
{
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
	struct plink *cur = NULL;
	int ret = 0;

	for (size_t i = 0; i < op->n; i++) {
		struct fab_op *f = &op->ops[i];
		struct plink *lk = f->arg;
		uint64_t now;
		int r;

		if (__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
			continue;
		if (lk != cur) {
			if (cur)
				pthread_rwlock_unlock(&cur->ep_rw);
			pthread_rwlock_rdlock(&lk->ep_rw);
			cur = lk;
		}
		if (!lk->ep)
			continue; /* closed: fab_ep_close completed it */
		now = mono_ms();
		r = fab_op_wait(lk->ep, f,
				now >= deadline ? 0 : (int)(deadline - now));
		if (r == -ETIMEDOUT &&
		    !__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE)) {
			ret = -ETIMEDOUT;
			break;
		}
	}
	if (cur)
		pthread_rwlock_unlock(&cur->ep_rw);
	return ret;
}

/* Fails every link that still has a piece of op in flight: closing the
 * endpoint is what guarantees the provider will not touch the buffer
 * after we return. */
static void op_fail_pending(struct pool_op *op, const char *why)
{
	for (size_t i = 0; i < op->n; i++)
		if (!__atomic_load_n(&op->ops[i].complete, __ATOMIC_ACQUIRE))
			link_fail(op->ops[i].arg, -ETIMEDOUT, why);
}

/* Errors that say the path to memd is gone, not just this transfer. */
static bool is_transport_error(int err)
{
	switch (err) {
	case -ECONNRESET:
	case -ENOTCONN:
	case -ECONNREFUSED:
	case -ECONNABORTED:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EPIPE:
	case -ESHUTDOWN:
		return true;
	default:
		return false;
	}
}

static int io_start(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op *op)
{
	struct plink *cur = NULL;
	uint8_t *b = buf;
	void *desc = NULL;
	uint64_t now = 0;
	size_t k = 0, n, xfer;
	int ret;

	op->p = p;
	op->heap = false;
	op->write = write;
	op->buf = buf;
	op->bytes = len;
	op->ops = op->inline_ops;
	op->n = 0;
	op->lmr.mr = NULL; /* lmr.link is valid only with lmr.mr */
	op->nxmr = 0;	   /* xmr is valid only with nxmr */
	if (!p || !r || (!buf && len))
		return -EINVAL;
	if (off > r->size || len > r->size - off)
		return -ERANGE;
	if (len == 0)
		return link_usable(r->ext[0].slab->link, &now);
	xfer = __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
	n = count_pieces(r, off, len, xfer);
	if (n > INLINE_OPS) {
		op->ops = calloc(n, sizeof(*op->ops));
		if (!op->ops) {
			op->ops = op->inline_ops;
			return -ENOMEM;
		}
	} else {
		memset(op->inline_ops, 0, sizeof(op->inline_ops));
	}

	for (uint32_t i = 0; i < r->nextents && len; i++) {
		const struct extent *e = &r->ext[i];
		const struct slab *s = e->slab;
		uint64_t take, at;

		if (off >= e->len) {
			off -= e->len;
			continue;
		}
		if (s->link != cur) {
			if (cur)
				pthread_rwlock_unlock(&cur->ep_rw);
			cur = s->link;
			ret = link_usable(cur, &now);
			if (ret) {
				cur = NULL;
				goto unlock;
			}
			pthread_rwlock_rdlock(&cur->ep_rw);
			if (!cur->ep) {
				ret = -ENOTCONN;
				goto unlock;
			}
			ret = op_desc(op, cur, &desc);
			if (ret)
				goto unlock;
		}
		take = e->len - off < len ? e->len - off : len;
		at = e->off + off;
		for (uint64_t done = 0; done < take;) {
			uint64_t piece =
				take - done < xfer ? take - done : xfer;
			uint64_t raddr = s->l.base + at + done;
			uint64_t peer = cur->peer[s->l.endpoint];
			struct fab_op *f = &op->ops[k];

			f->arg = cur;
			ret = write ? fab_ep_write(cur->ep, b, piece, desc,
						   peer, raddr, s->l.key, f,
						   p->timeout_ms)
				    : fab_ep_read(cur->ep, b, piece, desc, peer,
						  raddr, s->l.key, f,
						  p->timeout_ms);
			if (ret)
				goto unlock;
			k++;
			op->n = k;
			b += piece;
			done += piece;
		}
		len -= take;
		off = 0;
	}
	ret = 0;
unlock:
	if (cur)
		pthread_rwlock_unlock(&cur->ep_rw);
	if (ret && op->n) {
		/* Pieces already posted still own buf: settle them first. */
		if (op_wait_all(op, p->timeout_ms) == -ETIMEDOUT)
			op_fail_pending(op, "transfer timed out");
	}
	if (ret)
		op_release(op);
	if (is_transport_error(ret)) {
		if (cur)
			link_fail(cur, -ENOTCONN, "posting a transfer failed");
		ret = -ENOTCONN;
	}
	return ret;
}

/* Completes op (waited or failed): result, stats, resources. */
static int io_finish(struct pool *p, struct pool_op *op)
{
	int r = 0;

	for (size_t i = 0; i < op->n; i++) {
		int s = op->ops[i].status;

		if (!s)
			continue;
		s = map_status(s);
		if (is_transport_error(s)) {
			struct plink *lk = op->ops[i].arg;

			/* Every later call on that link must fail fast too,
			 * not only the ones that reach the dead connection. */
			if (!link_is_lost(lk))
				link_fail(lk, -ENOTCONN, "transfer failed");
			s = -ENOTCONN;
		}
		if (!r)
			r = s;
	}
	if (r == -ENOTCONN)
		pool_log(LOG_WARNING, "io: transfer err=%s", strerror(-r));

	__atomic_add_fetch(&p->st_ops, 1, __ATOMIC_RELAXED);
	if (r)
		__atomic_add_fetch(&p->st_errors, 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(op->write ? &p->st_written : &p->st_read,
				   op->bytes, __ATOMIC_RELAXED);
	op_release(op);
	return r;
}

static int io_sync(struct pool *p, struct pool_region *r, uint64_t off,
		   void *buf, size_t len, bool write)
{
	struct pool_op op;
	int ret = io_start(p, r, off, buf, len, write, &op);

	if (ret)
		return ret;
	if (op_wait_all(&op, p->timeout_ms) == -ETIMEDOUT) {
		op_fail_pending(&op, "transfer timed out");
		io_finish(p, &op);
		return -ETIMEDOUT;
	}
	return io_finish(p, &op);
}

int pool_read(struct pool *p, struct pool_region *r, uint64_t off, void *buf,
	      size_t len)
{
	return io_sync(p, r, off, buf, len, false);
}

int pool_write(struct pool *p, struct pool_region *r, uint64_t off,
	       const void *buf, size_t len)
{
	return io_sync(p, r, off, (void *)buf, len, true);
}

static int io_async(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op **out)
{
	struct pool_op *op;
	int ret;

	if (!out)
		return -EINVAL;
	*out = NULL;
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	ret = io_start(p, r, off, buf, len, write, op);
	if (ret) {
		free(op);
		return ret;
	}
	op->heap = true;
	*out = op;
	return 0;
}

int pool_read_async(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, struct pool_op **op)
{
	return io_async(p, r, off, buf, len, false, op);
}

int pool_write_async(struct pool *p, struct pool_region *r, uint64_t off,
		     const void *buf, size_t len, struct pool_op **op)
{
	return io_async(p, r, off, (void *)buf, len, true, op);
}

int pool_wait(struct pool *p, struct pool_op *op, int timeout_ms)
{
	if (!p || !op || op->p != p)
		return -EINVAL;
	if (timeout_ms < 0)
		timeout_ms = p->timeout_ms;
	if (op_wait_all(op, timeout_ms) == -ETIMEDOUT)
		return -ETIMEDOUT;
	return io_finish(p, op);
}

int pool_test(struct pool *p, struct pool_op *op)
{
	bool progressed = false;

	if (!p || !op || op->p != p)
		return -EINVAL;
	for (size_t i = 0; i < op->n; i++) {
		struct plink *lk = op->ops[i].arg;

		if (__atomic_load_n(&op->ops[i].complete, __ATOMIC_ACQUIRE))
			continue;
		if (progressed)
			return 0;
		/* Nobody else may be progressing: do it once here. */
		pthread_rwlock_rdlock(&lk->ep_rw);
		if (lk->ep)
			fab_ep_progress(lk->ep, 0);
		pthread_rwlock_unlock(&lk->ep_rw);
		progressed = true;
		i--; /* look at this piece again */
	}
	return 1;
}

int pool_get_stats(struct pool *p, struct pool_stats *st)
{
	if (!p || !st)
		return -EINVAL;
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&p->lock);
	st->slabs_held = p->nslabs;
	st->regions = p->nregions;
	for (struct plink *lk = p->links; lk; lk = lk->next)
		st->heartbeats +=
			__atomic_load_n(&lk->st_heartbeats, __ATOMIC_RELAXED);
	st->epoch = p->links ? p->links->epoch : 0;
	pthread_mutex_unlock(&p->lock);
	st->slab_bytes = p->slab_bytes;
	st->bytes_read = __atomic_load_n(&p->st_read, __ATOMIC_RELAXED);
	st->bytes_written = __atomic_load_n(&p->st_written, __ATOMIC_RELAXED);
	st->ops = __atomic_load_n(&p->st_ops, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&p->st_errors, __ATOMIC_RELAXED);
	return 0;
}

const char *pool_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -ENOTCONN:
		return "pool session lost (memd unreachable or leases "
		       "expired)";
	case -ENOSPC:
		return "no free memory in the pool";
	case -ERANGE:
		return "offset or length outside the region";
	case -EPROTONOSUPPORT:
		return "memd speaks no protocol version this library does";
	case -ENODATA:
		return "memd's fabric provider is not available on this host";
	case -ESTALE:
		return "stale lease (memd restarted or lease expired)";
	case -EPROTO:
		return "protocol error talking to memd";
	default:
		return err < 0 ? strerror(-err) : "not an error code";
	}
}

/* ------------------------------------------------------------------ */
/* internal views                                                       */

uint32_t pool_region_nextents(const struct pool_region *r)
{
	return r->nextents;
}

int pool_region_extent(const struct pool_region *r, uint32_t i,
		       struct wire_lease *lease, uint64_t *slab_off,
		       uint64_t *len)
{
	if (i >= r->nextents)
		return -ERANGE;
	*lease = r->ext[i].slab->l;
	*slab_off = r->ext[i].off;
	*len = r->ext[i].len;
	return 0;
}

int pool_session_fabric(struct pool *p, const char **provider,
			const uint8_t **addr, uint16_t *addr_len)
{
	if (!p->links)
		return -ENOTCONN;
	*provider = p->links->provider;
	*addr = p->links->mep[0].addr;
	*addr_len = p->links->mep[0].addr_len;
	return 0;
}

uint16_t pool_session_nendpoints(const struct pool *p)
{
	return p->links ? p->links->nendpoints : 0;
}

int pool_session_endpoint(const struct pool *p, uint16_t i, int *node,
			  const uint8_t **addr, uint16_t *addr_len)
{
	if (!p->links || i >= p->links->nendpoints)
		return -ERANGE;
	*node = p->links->mep[i].node;
	*addr = p->links->mep[i].addr;
	*addr_len = p->links->mep[i].addr_len;
	return 0;
}
