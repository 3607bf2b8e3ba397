// SPDX-License-Identifier: MIT
/*
 * libpool/pool.c - sessions, regions and RMA (tidepool/pool.h).
 *
 * DESIGN
 * A session is a control connection to one memd (libpool/ctl.c), a fabric
 * endpoint whose address vector holds every endpoint memd announced (one
 * per NUMA node memd serves), the slabs it leased, and the regions cut
 * from them. Every slab remembers the memd endpoint that serves it (its
 * lease says which) and the node it is on; RMA to a slab goes to that
 * endpoint. Regions of half a slab or more take whole slabs; the rest of
 * a region, and small regions, are packed into "packed" slabs in 4 KiB
 * chunks (first fit over a bitmap), and a packed slab is shared only by
 * regions that asked for the same node (pool_alloc_node), so a region
 * asked for on node n never lands in a slab leased for "any". A region is
 * a list of extents (slab, offset, length); I/O splits a byte range over
 * extents and into chunks of at most chunk_bytes, posts them all (the
 * endpoint bounds how many are in flight) and waits.
 *
 * Threads:
 *   callers   alloc/free take p->lock (slabs, regions, RPCs); I/O takes
 *             p->ep_rw shared while it posts or waits, never p->lock.
 *   pool-hb   renews the session's leases every ttl/3 and fails the
 *             session when memd is gone.
 * Failing a session (session_fail) records the error, then takes ep_rw
 * exclusively and closes the endpoint: every operation still in flight
 * completes with an error and no buffer is touched afterwards. A caller
 * never holds ep_rw when it fails the session.
 *
 * Lease validity: memd never reclaims before last renewal + ttl + grace;
 * we stop using leases at heartbeat send time + ttl - margin
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

struct slab {
	struct wire_lease l; /* l.endpoint < p->nendpoints, checked */
	int want_node;	     /* node the slab was leased for; -1: any */
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

struct pool_op {
	struct pool *p;
	size_t n;
	struct fab_op *ops;
	struct fab_op inline_ops[INLINE_OPS];
	struct fab_mr *lmr; /* local registration (FAB_MR_LOCAL) */
	uint64_t bytes;
	bool write;
	bool heap; /* pool_op itself was malloc'd */
};

struct pool {
	char addr[256];
	int timeout_ms;
	unsigned max_inflight;
	size_t xfer_bytes;

	struct rpc *ctl;
	struct fab_domain *fd;
	struct fab_ep *ep; /* NULL once the session failed */
	pthread_rwlock_t ep_rw;
	unsigned mr_mode;

	uint64_t session_id, epoch, slab_bytes;
	uint32_t ttl_ms, margin_ms;
	char provider[WIRE_PROV_MAX];
	/* memd's endpoints as HELLO_OK gave them; peer: our AV's handle */
	struct wire_endpoint mep[WIRE_MAX_ENDPOINTS];
	uint64_t peer[WIRE_MAX_ENDPOINTS];
	uint16_t nendpoints;

	pthread_mutex_t lock; /* slabs, regions */
	struct slab *slabs;
	uint64_t nslabs, nregions;
	struct pool_region *regions;

	uint64_t valid_until_ms; /* atomic */
	int lost; /* atomic: 0, or the -errno that ended the session */

	pthread_t hb;
	bool hb_started;
	pthread_mutex_t hb_lock;
	pthread_cond_t hb_cond;
	bool hb_stop;

	/* atomics */
	uint64_t st_read, st_written, st_ops, st_errors, st_heartbeats;
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void extend_validity(struct pool *p, uint64_t sent_ms)
{
	uint64_t v = sent_ms + p->ttl_ms - p->margin_ms;
	uint64_t cur = __atomic_load_n(&p->valid_until_ms, __ATOMIC_RELAXED);

	while (v > cur &&
	       !__atomic_compare_exchange_n(&p->valid_until_ms, &cur, v, false,
					    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

/* Ends the session: from now on every call fails with -ENOTCONN. */
static void session_fail(struct pool *p, int err, const char *why)
{
	int expected = 0;

	if (__atomic_compare_exchange_n(&p->lost, &expected, err, false,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		pool_log(LOG_ERR,
			 "session: lost session=%" PRIx64 " memd=%s err=%s "
			 "why=%s",
			 p->session_id, p->addr, strerror(-err), why);
	pthread_rwlock_wrlock(&p->ep_rw);
	if (p->ep) {
		fab_ep_close(p->ep);
		p->ep = NULL;
	}
	pthread_rwlock_unlock(&p->ep_rw);
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

/* 0 when leases may be used now, else -ENOTCONN. */
static int session_usable(struct pool *p)
{
	if (__atomic_load_n(&p->lost, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (mono_ms() >= __atomic_load_n(&p->valid_until_ms, __ATOMIC_ACQUIRE))
		return -ENOTCONN; /* renewal overdue: leases may be gone */
	return 0;
}

/* ------------------------------------------------------------------ */
/* heartbeat                                                            */

static void *hb_main(void *arg)
{
	struct pool *p = arg;
	uint32_t period = p->ttl_ms / 3;

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
		pthread_mutex_lock(&p->hb_lock);
		while (!p->hb_stop &&
		       pthread_cond_timedwait(&p->hb_cond, &p->hb_lock, &ts) !=
			       ETIMEDOUT)
			;
		if (p->hb_stop) {
			pthread_mutex_unlock(&p->hb_lock);
			break;
		}
		pthread_mutex_unlock(&p->hb_lock);
		if (__atomic_load_n(&p->lost, __ATOMIC_ACQUIRE))
			break;

		sent = mono_ms();
		/* A reply is useful until the leases it renews would lapse
		 * anyway; a slow memd is not a dead one. */
		tmo = (int)(p->ttl_ms - p->margin_ms);
		r = rpc_call(p->ctl, &req, &rep, WIRE_HEARTBEAT_OK, tmo, NULL,
			     0);
		if (r == 0 && rep.u.heartbeat_ok.epoch != p->epoch)
			r = -ESTALE; /* a restarted memd: old leases are gone */
		if (r) {
			session_fail(p,
				     r == -ETIMEDOUT ? -ETIMEDOUT : -ENOTCONN,
				     r == -ESTALE ? "memd expired or restarted"
						  : "heartbeat failed");
			break;
		}
		extend_validity(p, sent);
		__atomic_add_fetch(&p->st_heartbeats, 1, __ATOMIC_RELAXED);
	}
	return NULL;
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
 * announced and, for a lease asked on a node, it is on that node.
 */
static bool lease_is_usable(const struct pool *p, const struct wire_lease *l,
			    int node)
{
	return l->endpoint < p->nendpoints &&
	       (node == WIRE_NODE_ANY || l->node == node);
}

/*
 * Leases n slabs on node (-1: any); appends them to p->slabs and out[].
 * Caller holds lock.
 */
static int lease_locked(struct pool *p, uint32_t n, bool packed, int node,
			struct slab **out)
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
		r = rpc_call(p->ctl, req, rep, WIRE_LEASE_OK, p->timeout_ms,
			     text, sizeof(text));
		if (r == 0 && rep->u.lease_ok.count != k)
			r = -EPROTO;
		for (uint32_t i = 0; r == 0 && i < k; i++) {
			if (!lease_is_usable(p, &rep->u.lease_ok.lease[i],
					     node)) {
				pool_log(LOG_ERR,
					 "alloc: memd sent a lease on endpoint "
					 "%u node %d for node %d (%u "
					 "endpoints)",
					 rep->u.lease_ok.lease[i].endpoint,
					 rep->u.lease_ok.lease[i].node, node,
					 p->nendpoints);
				r = -EPROTO;
			}
		}
		if (r) {
			if (r == -ENOSPC)
				pool_log(LOG_INFO, "alloc: %s", text);
			else if (text[0])
				pool_log(LOG_WARNING,
					 "alloc: node=%d refused by memd: %s",
					 node, text);
			break;
		}
		extend_validity(p, sent);
		for (uint32_t i = 0; i < k; i++) {
			struct slab *s = calloc(1, sizeof(*s));
			const struct wire_lease *l = &rep->u.lease_ok.lease[i];

			if (s && packed) {
				s->nchunks =
					(uint32_t)(l->len_bytes / CHUNK_BYTES);
				s->bits = calloc((s->nchunks + 63) / 64, 8);
			}
			if (!s || (packed && !s->bits)) {
				/* Not tracked means not released by us:
				 * memd reclaims it when the session ends. */
				slab_free(s);
				r = -ENOMEM;
				continue;
			}
			s->l = *l;
			s->want_node = node;
			s->packed = packed;
			s->next = p->slabs;
			if (p->slabs)
				p->slabs->prev = s;
			p->slabs = s;
			p->nslabs++;
			out[got + i] = s;
		}
		got += k;
		if (r)
			break;
	}
	free(req);
	free(rep);
	return r;
}

/* Releases slabs (already unlinked by the caller). Caller holds lock. */
static int release_locked(struct pool *p, struct slab **v, uint32_t n)
{
	struct wire_msg *req, *rep;
	int first = 0;

	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	for (uint32_t done = 0; req && rep && done < n;) {
		uint32_t k =
			n - done < WIRE_MAX_LEASES ? n - done : WIRE_MAX_LEASES;
		int r;

		memset(req, 0, sizeof(*req));
		req->type = WIRE_RELEASE;
		req->u.release.count = k;
		for (uint32_t i = 0; i < k; i++) {
			req->u.release.ref[i].epoch = v[done + i]->l.epoch;
			req->u.release.ref[i].slab = v[done + i]->l.slab;
			req->u.release.ref[i].generation =
				v[done + i]->l.generation;
		}
		r = __atomic_load_n(&p->lost, __ATOMIC_ACQUIRE)
			    ? -ENOTCONN
			    : rpc_call(p->ctl, req, rep, WIRE_RELEASE_OK,
				       p->timeout_ms, NULL, 0);
		if (r && !first)
			first = r;
		done += k;
	}
	if (!req || !rep)
		first = -ENOMEM;
	free(req);
	free(rep);
	for (uint32_t i = 0; i < n; i++)
		slab_free(v[i]);
	/* A lost session's leases are memd's to reclaim: not our error. */
	return first == -ENOTCONN ? 0 : first;
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

/* Packs len bytes into a packed slab leased for the same node. */
static int pack_locked(struct pool *p, uint64_t len, int node, struct extent *e)
{
	uint32_t n = (uint32_t)((len + CHUNK_BYTES - 1) / CHUNK_BYTES);
	struct slab *s, *fresh;
	uint32_t at = UINT32_MAX;
	int r;

	for (s = p->slabs; s; s = s->next) {
		if (!s->packed || s->want_node != node ||
		    s->nchunks - s->used < n)
			continue;
		at = first_fit(s, n);
		if (at != UINT32_MAX)
			break;
	}
	if (!s) {
		r = lease_locked(p, 1, true, node, &fresh);
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
	struct wire_msg req = { .type = WIRE_HELLO }, rep;
	struct fab_opts fo = { 0 };
	char local[64], text[WIRE_MSG_MAX];
	const char *env;
	struct pool *p;
	pthread_condattr_t ca;
	pthread_rwlockattr_t ra;
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
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->hb_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->hb_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&p->ep_rw, &ra);
	pthread_rwlockattr_destroy(&ra);

	r = rpc_connect(p->addr, p->timeout_ms, &p->ctl, local, sizeof(local));
	if (r) {
		pool_log(LOG_WARNING, "session: connect memd=%s err=%s",
			 p->addr, strerror(-r));
		goto fail;
	}
	rpc_set_log(p->ctl, rpc_log, NULL);
	req.u.hello.proto_min = WIRE_PROTO_MIN;
	req.u.hello.proto_max = WIRE_PROTO_MAX;
	if (o.client_name)
		snprintf(req.u.hello.client, sizeof(req.u.hello.client), "%s",
			 o.client_name);
	else
		snprintf(req.u.hello.client, sizeof(req.u.hello.client),
			 "%s pid %d", program_invocation_short_name,
			 (int)getpid());
	/* Printable bytes only: the name ends up in memd's log lines. */
	for (char *c = req.u.hello.client; *c; c++)
		if (*c < 0x20 || *c > 0x7e)
			*c = '?';
	r = rpc_call(p->ctl, &req, &rep, WIRE_HELLO_OK, p->timeout_ms, text,
		     sizeof(text));
	if (r) {
		pool_log(LOG_WARNING, "session: hello memd=%s err=%s %s",
			 p->addr, strerror(-r), text);
		goto fail;
	}
	if (rep.u.hello_ok.proto < WIRE_PROTO_MIN ||
	    rep.u.hello_ok.proto > WIRE_PROTO_MAX) {
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	p->session_id = rep.u.hello_ok.session_id;
	p->epoch = rep.u.hello_ok.epoch;
	p->ttl_ms = rep.u.hello_ok.ttl_ms;
	p->slab_bytes = rep.u.hello_ok.slab_bytes;
	if (p->ttl_ms < 30 || p->slab_bytes < CHUNK_BYTES ||
	    p->slab_bytes % CHUNK_BYTES) {
		r = -EPROTO;
		goto fail;
	}
	/* Stop using leases a tenth of the TTL (at most 1 s) early. */
	p->margin_ms = p->ttl_ms / 10 < 1000 ? p->ttl_ms / 10 : 1000;
	extend_validity(p, mono_ms());
	memcpy(p->provider, rep.u.hello_ok.provider, sizeof(p->provider));
	p->nendpoints = rep.u.hello_ok.nendpoints;
	memcpy(p->mep, rep.u.hello_ok.ep, p->nendpoints * sizeof(p->mep[0]));

	/* Bind the fabric where the control connection goes out; providers
	 * without IP addressing (shm) take no node. */
	fo.provider = p->provider;
	/* shm names endpoints by the node string: memd's name would clash. */
	fo.node = strncmp(p->provider, "shm", 3) ? local : NULL;
	r = fab_domain_open(&fo, &p->fd);
	if (r == -ENODATA) {
		fo.node = NULL;
		r = fab_domain_open(&fo, &p->fd);
	}
	if (r) {
		pool_log(LOG_WARNING, "session: fabric provider=%s err=%s",
			 p->provider, strerror(-r));
		goto fail;
	}
	p->mr_mode = fab_domain_mr_mode(p->fd);
	if (fab_domain_max_msg(p->fd) < p->xfer_bytes)
		p->xfer_bytes = fab_domain_max_msg(p->fd);
	r = fab_ep_open(p->fd, p->max_inflight, &p->ep);
	for (uint16_t i = 0; !r && i < p->nendpoints; i++) {
		r = fab_ep_av_insert(p->ep, p->mep[i].addr, p->mep[i].addr_len,
				     &p->peer[i]);
		if (!r)
			pool_log(LOG_DEBUG, "session: memd endpoint=%u node=%d",
				 i, p->mep[i].node);
	}
	if (r) {
		pool_log(LOG_WARNING, "session: fabric endpoint err=%s",
			 strerror(-r));
		goto fail;
	}
	r = pthread_create(&p->hb, NULL, hb_main, p);
	if (r) {
		r = -r;
		goto fail;
	}
	p->hb_started = true;
	pool_log(LOG_INFO,
		 "session: open session=%" PRIx64 " memd=%s provider=%s "
		 "slab=%" PRIu64 " ttl_ms=%u endpoints=%u",
		 p->session_id, p->addr, p->provider, p->slab_bytes, p->ttl_ms,
		 p->nendpoints);
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
	if (p->hb_started) {
		pthread_mutex_lock(&p->hb_lock);
		p->hb_stop = true;
		pthread_cond_signal(&p->hb_cond);
		pthread_mutex_unlock(&p->hb_lock);
		pthread_join(p->hb, NULL);
	}
	/* The endpoint goes first: no RMA of ours may still be running when
	 * BYE releases the leases (protocol.md). */
	if (p->ep) {
		fab_ep_close(p->ep);
		p->ep = NULL;
	}
	/* BYE releases every lease at once; a lost memd reclaims them by
	 * itself when their TTL runs out. */
	if (p->ctl && p->session_id &&
	    !__atomic_load_n(&p->lost, __ATOMIC_ACQUIRE)) {
		struct wire_msg req = { .type = WIRE_BYE }, rep;

		rpc_call(p->ctl, &req, &rep, WIRE_BYE_OK, p->timeout_ms, NULL,
			 0);
	}
	fab_domain_close(p->fd);
	rpc_close(p->ctl);
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
	pthread_rwlock_destroy(&p->ep_rw);
	pthread_cond_destroy(&p->hb_cond);
	pthread_mutex_destroy(&p->hb_lock);
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

int pool_alloc_node(struct pool *p, size_t len, int node,
		    struct pool_region **out)
{
	uint64_t full, rem;
	struct pool_region *reg;
	struct slab **got = NULL;
	uint32_t n;
	int r;

	if (!p || !out)
		return -EINVAL;
	*out = NULL;
	if (len == 0 || node < WIRE_NODE_ANY || node >= WIRE_NODE_MAX)
		return -EINVAL;
	/* Only a lost session stops an allocation: the grant itself renews
	 * the session's leases. */
	if (__atomic_load_n(&p->lost, __ATOMIC_ACQUIRE))
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
		r = lease_locked(p, (uint32_t)full, false, node, got);
		if (r) {
			/* lease_locked tracked what it got before failing. */
			uint32_t k = 0;

			for (uint64_t i = 0; i < full; i++)
				if (got[i]) {
					unlink_slab_locked(p, got[i]);
					got[k++] = got[i];
				}
			release_locked(p, got, k);
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
		if (r && full) {
			for (uint64_t i = 0; i < full; i++)
				unlink_slab_locked(p, got[i]);
			release_locked(p, got, (uint32_t)full);
		}
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
static size_t count_pieces(const struct pool *p, const struct pool_region *r,
			   uint64_t off, uint64_t len)
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
		n += (take + p->xfer_bytes - 1) / p->xfer_bytes;
		len -= take;
		off = 0;
	}
	return n;
}

static int op_result(struct pool_op *op)
{
	int r = 0;

	for (size_t i = 0; i < op->n; i++) {
		int s = op->ops[i].status;

		/* -ETIMEDOUT from pool_wait means "still running, wait
		 * again"; a transfer the provider timed out is -ETIME. */
		if (s && !r)
			r = s == -ECANCELED   ? -ENOTCONN
			    : s == -ETIMEDOUT ? -ETIME
					      : s;
	}
	return r;
}

static void op_release(struct pool_op *op)
{
	if (op->lmr)
		fab_mr_close(op->lmr);
	if (op->ops != op->inline_ops)
		free(op->ops);
	if (op->heap)
		free(op);
}

/*
 * Waits for every piece of op. Returns 0 when all completed (results in
 * the pieces), -ETIMEDOUT when one is still running at the deadline.
 */
static int op_wait_all(struct pool *p, struct pool_op *op, int timeout_ms)
{
	uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;

	pthread_rwlock_rdlock(&p->ep_rw);
	for (size_t i = 0; i < op->n; i++) {
		struct fab_op *f = &op->ops[i];
		uint64_t now;
		int r;

		if (__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
			continue;
		if (!p->ep)
			break; /* closed: fab_ep_close completed everything */
		now = mono_ms();
		r = fab_op_wait(p->ep, f,
				now >= deadline ? 0 : (int)(deadline - now));
		if (r == -ETIMEDOUT &&
		    !__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE)) {
			pthread_rwlock_unlock(&p->ep_rw);
			return -ETIMEDOUT;
		}
	}
	pthread_rwlock_unlock(&p->ep_rw);
	return 0;
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
	uint8_t *b = buf;
	void *desc = NULL;
	size_t k = 0, n;
	int ret;

	op->p = p;
	op->heap = false;
	op->write = write;
	op->bytes = len;
	op->ops = op->inline_ops;
	op->n = 0;
	op->lmr = NULL;
	if (!p || !r || (!buf && len))
		return -EINVAL;
	if (off > r->size || len > r->size - off)
		return -ERANGE;
	ret = session_usable(p);
	if (ret)
		return ret;
	if (len == 0)
		return 0;
	n = count_pieces(p, r, off, len);
	if (n > INLINE_OPS) {
		op->ops = calloc(n, sizeof(*op->ops));
		if (!op->ops) {
			op->ops = op->inline_ops;
			return -ENOMEM;
		}
	} else {
		memset(op->inline_ops, 0, sizeof(op->inline_ops));
	}

	pthread_rwlock_rdlock(&p->ep_rw);
	if (!p->ep) {
		ret = -ENOTCONN;
		goto unlock;
	}
	if (p->mr_mode & FAB_MR_LOCAL) {
		ret = fab_mr_reg(p->fd, p->ep, buf, len, FAB_ACCESS_LOCAL, 0,
				 &op->lmr);
		if (ret)
			goto unlock;
		desc = fab_mr_desc(op->lmr);
	}
	for (uint32_t i = 0; i < r->nextents && len; i++) {
		const struct extent *e = &r->ext[i];
		uint64_t take, at;

		if (off >= e->len) {
			off -= e->len;
			continue;
		}
		take = e->len - off < len ? e->len - off : len;
		at = e->off + off;
		for (uint64_t done = 0; done < take;) {
			uint64_t piece = take - done < p->xfer_bytes
						 ? take - done
						 : p->xfer_bytes;
			uint64_t raddr = e->slab->l.base + at + done;
			uint64_t peer = p->peer[e->slab->l.endpoint];
			struct fab_op *f = &op->ops[k];

			ret = write ? fab_ep_write(p->ep, b, piece, desc, peer,
						   raddr, e->slab->l.key, f,
						   p->timeout_ms)
				    : fab_ep_read(p->ep, b, piece, desc, peer,
						  raddr, e->slab->l.key, f,
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
	pthread_rwlock_unlock(&p->ep_rw);
	if (ret && op->n) {
		/* Pieces already posted still own buf: settle them first. */
		if (op_wait_all(p, op, p->timeout_ms) == -ETIMEDOUT)
			session_fail(p, -ETIMEDOUT, "transfer timed out");
	}
	if (ret)
		op_release(op);
	if (is_transport_error(ret)) {
		session_fail(p, -ENOTCONN, "posting a transfer failed");
		ret = -ENOTCONN;
	}
	return ret;
}

/* Completes op (waited or failed): result, stats, resources. */
static int io_finish(struct pool *p, struct pool_op *op)
{
	int r = op_result(op);

	if (is_transport_error(r)) {
		/* Every later call must fail fast too, not only the ones
		 * that happen to reach the dead connection. */
		session_fail(p, -ENOTCONN, "transfer failed");
		pool_log(LOG_WARNING, "io: transfer err=%s", strerror(-r));
		r = -ENOTCONN;
	}

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
	if (op_wait_all(p, &op, p->timeout_ms) == -ETIMEDOUT) {
		/* Closing the endpoint is what guarantees the provider
		 * will not write into buf after we return. */
		session_fail(p, -ETIMEDOUT, "transfer timed out");
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
	if (op_wait_all(p, op, timeout_ms) == -ETIMEDOUT)
		return -ETIMEDOUT;
	return io_finish(p, op);
}

int pool_test(struct pool *p, struct pool_op *op)
{
	bool progressed = false;

	if (!p || !op || op->p != p)
		return -EINVAL;
	for (size_t i = 0; i < op->n; i++) {
		if (__atomic_load_n(&op->ops[i].complete, __ATOMIC_ACQUIRE))
			continue;
		if (progressed)
			return 0;
		/* Nobody else may be progressing: do it once here. */
		pthread_rwlock_rdlock(&p->ep_rw);
		if (p->ep)
			fab_ep_progress(p->ep, 0);
		pthread_rwlock_unlock(&p->ep_rw);
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
	pthread_mutex_unlock(&p->lock);
	st->slab_bytes = p->slab_bytes;
	st->bytes_read = __atomic_load_n(&p->st_read, __ATOMIC_RELAXED);
	st->bytes_written = __atomic_load_n(&p->st_written, __ATOMIC_RELAXED);
	st->ops = __atomic_load_n(&p->st_ops, __ATOMIC_RELAXED);
	st->errors = __atomic_load_n(&p->st_errors, __ATOMIC_RELAXED);
	st->heartbeats = __atomic_load_n(&p->st_heartbeats, __ATOMIC_RELAXED);
	st->epoch = p->epoch;
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
	*provider = p->provider;
	*addr = p->mep[0].addr;
	*addr_len = p->mep[0].addr_len;
	return 0;
}

uint16_t pool_session_nendpoints(const struct pool *p)
{
	return p->nendpoints;
}

int pool_session_endpoint(const struct pool *p, uint16_t i, int *node,
			  const uint8_t **addr, uint16_t *addr_len)
{
	if (i >= p->nendpoints)
		return -ERANGE;
	*node = p->mep[i].node;
	*addr = p->mep[i].addr;
	*addr_len = p->mep[i].addr_len;
	return 0;
}
