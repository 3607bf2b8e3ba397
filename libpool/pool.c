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
 * there; other links are not affected.
 *
 * Reaping (cluster sessions): a failed link wakes its pool-hb thread,
 * which ends. links_reap_locked (at allocation and free) joins ended
 * threads and closes and frees a failed link once nothing refers to it:
 * no slab (lk->nslabs: regions, packed slabs, I/O on them) and no
 * reference another module holds (lk->refs: pool_link_get takes one,
 * pool_link_put drops it and reaps then; kv.c holds one per donor table
 * slot and one per lane and batch using the link, so a link an in-flight
 * batch uses is never freed under it). A standalone session's one link is
 * never reaped. So a session that sees donors come and go holds links
 * for the donors it uses now, not for every incarnation it ever met.
 *
 * Cluster sessions (docs/cluster.md): pool_connect authenticates as the
 * tenant at the registry (p->reg, no fabric, no heartbeat: it is not on
 * the data path) and keeps the donor pass and its key. An allocation is
 * PLACEd at the registry; each grant is redeemed with LEASE_GRANT on the
 * link to that donor incarnation (donor_id + donor_epoch, not lost),
 * opened on first use with AUTH(tenant, pass); the slabs are assembled by
 * PLACE_OK.layout. Replicated regions have a second slab per extent (a
 * packed pair for small ones): writes post to both copies and succeed if
 * one live copy was written; reads use the first live copy; an op that
 * lost a copy is started again on the live ones (io_restart).
 *
 * Lease validity: memd never reclaims before last renewal + ttl + grace;
 * we stop using a link's leases at heartbeat send time + ttl - margin
 * (valid_until_ms), so a silent memd costs errors, never wrong bytes.
 */
#include "tidepool/pool.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "fabric/auth.h"
#include "fabric/fab.h"
#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "libpool/log.h"
#include "libpool/paging.h"

#define CHUNK_BYTES 4096u /* packing granularity */
#define DEFAULT_ADDR "127.0.0.1:7470"
#define DEFAULT_TIMEOUT_MS 5000
#define ADDR_LIST_MAX 1024
/* A call to the registries keeps trying them (one after another, 100 ms
 * apart once all failed) for this long (LIBPOOL_REGISTRY_FAILOVER_MS
 * overrides it), or timeout_ms if longer: an etcd registry's standby
 * takes over within its lease plus the donors' rejoining
 * (docs/cluster.md, "Failure model"). */
#define REG_FAILOVER_MS 20000
#define REG_RETRY_MS 100
#define DEFAULT_INFLIGHT 64
#define DEFAULT_XFER (1u << 20) /* largest single RMA we post */
#define INLINE_OPS 4
#define IO_TRIES 3 /* starts of one replicated op: one per copy lost, +1 */
/* Get a new donor pass when less than this is left of the old one. */
#define PASS_RENEW_MS 10000

struct pool;

/* One memd we hold a session with. Fields above `next` are set before
 * the link is published in p->links and never change afterwards, except
 * the fabric's (fd, mr_mode, peer) on a link whose fabric is set up in
 * the background (fab_pending, docs/paging.md "Start-up"): its heartbeat
 * thread sets them, and nobody reads them before link_fabric_wait(). */
/* KV slab files a same-host link keeps (struct plink kvshm) */
#define KVSHM_MAX 128

struct plink {
	struct pool *p;
	char addr[WIRE_HOSTPORT_MAX];
	uint32_t donor_id; /* 0: standalone */
	uint64_t donor_epoch;
	uint16_t proto;	    /* negotiated protocol version */
	uint32_t tenant_id; /* AUTH_OK.tenant_id at this memd; 0 standalone */
	/* HEARTBEAT2 (with our RMA counters) instead of HEARTBEAT: links
	 * that negotiated protocol 2 */
	bool hb2;
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
	/* atomic: the fabric (fd, ep, peer) is not set up yet; the
	 * heartbeat thread does it once fab_go (under hb_lock) is set,
	 * and waiters sleep on fab_cond under hb_lock */
	bool fab_pending;
	bool fab_go;
	/* hb_lock: the heartbeat thread is setting the fabric up (busy);
	 * threads in link_fabric_wait() (waiters); the process is exiting
	 * and nobody waits (cancel: pool_fabric_exit()) */
	bool fab_busy, fab_cancel;
	unsigned fab_waiters;
	/* memd's FI_OFI_RXM_BUFFER_SIZE (FABRIC_OK, protocol 3; 0: not rxm,
	 * or not asked); fab_err: -EPROTO where ours differs, and the
	 * fabric is then never set up (link_fabric). Written before the
	 * fabric is marked set up, read after (as fd and ep). */
	uint32_t memd_rxm;
	int fab_err;
	bool fab_err_said; /* the err line for fab_err is out (atomic) */
	char local[64];	   /* where the control connection goes out */

	struct plink *next; /* p->links, under p->lock */
	uint64_t nslabs;    /* under p->lock */
	uint64_t refs;	    /* under p->lock: pool_link_get/_hold - _put */

	/* Same-host path (docs/design.md, "Co-located clients over shm"):
	 * the socket memd passes slab memfds over, bound to this session;
	 * -1: every slab of the link over the fabric. Set before the link
	 * is published, closed only by link_close; requests on it under
	 * p->lock; I/O polls it for memd's hang-up. shm_broken (under
	 * p->lock): out of step with memd, asked no more. */
	int shm_sock;
	bool shm_broken;
	/* one request at a time on shm_sock (slab fds under p->lock, KV
	 * files from any thread) */
	pthread_mutex_t shm_mu;
	/* The KV tier's same-host path (pool_link_post): the files of the
	 * KV slabs behind (endpoint, rkey) locations memd gave this
	 * session (WIRE_SHM_KV); fd -1: memd refused it, that key stays on
	 * the fabric. Under kvshm_rw: transfers hold it for reading, so an
	 * entry is never closed (or unmapped) under a pread or a copy
	 * (map: KV gets, kvshm_map). kvshm_broken: out of step with memd,
	 * asked no more. */
	struct kvshm {
		uint64_t rkey, base;
		const uint8_t *map; /* read-only mapping of fd, or NULL */
		int fd;
		uint16_t endpoint;
		bool used, ro;
	} kvshm[KVSHM_MAX];
	uint32_t kvshm_next;
	bool kvshm_broken;
	pthread_rwlock_t kvshm_rw;

	struct fab_ep *ep; /* NULL once the link failed; under ep_rw */
	pthread_rwlock_t ep_rw;
	uint64_t valid_until_ms; /* atomic */
	int lost; /* atomic: 0, or the -errno that ended the link */

	pthread_t hb;
	bool hb_started;
	pthread_mutex_t hb_lock;
	pthread_cond_t hb_cond;
	pthread_cond_t fab_cond;
	bool hb_stop;
	uint64_t st_heartbeats; /* atomic */
};

struct slab {
	struct wire_lease l; /* l.endpoint < link->nendpoints, checked */
	struct plink *link;
	/* the slab's memfd (same-host link), written with pwrite; -1: RMA
	 * over the fabric. map: a read-only shared mapping of it that reads
	 * copy from (NULL: pread) */
	int fd;
	const uint8_t *map;
	/* fd is read-only (memd's shm_dir slabs, which take no seals):
	 * reads through it, writes over the fabric */
	bool fd_ro;
	int want_node; /* node the slab was leased for; -1: any */
	bool packed;
	/* packed slabs of replicated regions come in pairs: the primary
	 * (bits, used) and its mirror, a slab on another donor where every
	 * chunk has the same offset; the mirror is never packed into */
	struct slab *mirror;
	bool is_mirror;
	uint32_t nchunks, used; /* packed slabs */
	uint64_t *bits;		/* packed: 1 = chunk in use */
	struct slab *next, *prev;
};

struct extent {
	struct slab *slab;
	struct slab *replica; /* the second copy, same offset; or NULL */
	uint64_t off;	      /* within the slab */
	uint64_t len;
};

struct pool_region {
	size_t size;
	int node;	 /* of every extent's slab; -1: unknown or mixed */
	bool replicated; /* every extent has a replica */
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
	struct pool_region *r;
	uint64_t off;
	size_t n;
	/* ops[i].arg: the piece's struct plink. A paired op (a write to a
	 * replicated region) has two pieces per range, ops[2i] to the
	 * primary and ops[2i+1] to the replica; a dead copy's piece is
	 * complete with -ENOTCONN from the start. */
	struct fab_op *ops;
	struct fab_op inline_ops[INLINE_OPS];
	/* FAB_MR_LOCAL: the buffer registered in each link's domain, the
	 * first link's in lmr, others' in xmr[0 .. nxmr-1] */
	struct op_mr lmr;
	struct op_mr *xmr;
	unsigned nxmr;
	void *buf;
	uint64_t bytes;
	bool write;
	bool paired;
	bool heap;	/* pool_op itself was malloc'd */
	unsigned tries; /* starts so far (replicated regions retry) */
};

struct pool {
	char addr[ADDR_LIST_MAX]; /* a cluster's: "host:port[,host:port...]" */
	char client[WIRE_NAME_MAX];
	int timeout_ms;
	bool shm;     /* LIBPOOL_SHM: same-host links may use slab memfds */
	bool shm_map; /* LIBPOOL_SHM=map: reads through read-only mappings */
	bool kv_map;  /* LIBPOOL_KV_MAP: KV gets copy from mappings */
	unsigned max_inflight;
	size_t xfer_bytes; /* atomic: only ever lowered */
	uint64_t slab_bytes;

	/* Cluster sessions (docs/cluster.md): the registry connection, our
	 * tenant's key and the donor pass; all under lock. */
	bool cluster;
	struct rpc *reg;
	char reg_addr[WIRE_HOSTPORT_MAX]; /* the registry of p->reg */
	uint32_t failover_ms;		  /* LIBPOOL_REGISTRY_FAILOVER_MS */
	int reg_next;			  /* index in p->addr tried first */
	struct wire_hello_ok reg_hello;
	char tenant[WIRE_NAME_MAX];
	uint8_t tenant_key[AUTH_KEY_LEN];
	uint8_t pass[WIRE_PASS_MAX];
	uint16_t pass_len;
	uint8_t pass_key[AUTH_KEY_LEN];
	uint64_t pass_until_ms; /* monotonic */
	uint32_t pass_ttl_ms;
	/* what the pass had left when the last donor link opened with it */
	int64_t pass_left_at_open_ms;

	/* links set up their fabric in the background (link_fabric_
	 * background): pool_set_fabric_background() before pool_connect */
	bool fabric_background;

	pthread_mutex_t lock; /* links, slabs, regions, registry */
	struct plink *links;  /* in the order they were opened */
	struct slab *slabs;
	uint64_t nslabs, nregions;
	struct pool_region *regions;
	/* links reaped so far, and their heartbeats (pool_get_stats) */
	uint64_t links_reaped, hb_reaped;

	/* objects that live on the session (KV handles), under lock */
	struct pool_attached *attached;

	/* atomics */
	uint64_t st_read, st_written, st_ops, st_errors;
	uint64_t st_shm_bytes; /* of those, moved through slab memfds */
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
		/* fabric/fab.c, "Closing mid-read" */
		bool kept = fab_ep_close(lk->ep);

		lk->ep = NULL;
		if (kept)
			pool_log(LOG_WARNING,
				 "session: endpoint of session=%" PRIx64
				 " memd=%s kept open until exit: a read was "
				 "in flight and libfabric <1.18's tcp "
				 "provider crashes closing it then",
				 lk->session_id, lk->addr);
	}
	pthread_rwlock_unlock(&lk->ep_rw);
	/* Its heartbeat thread has nothing left to do: let it end now, so
	 * that links_reap_locked can join it. A fabric not set up yet never
	 * will be: its waiters go on (and find the link lost). */
	pthread_mutex_lock(&lk->hb_lock);
	pthread_cond_broadcast(&lk->hb_cond);
	if (!lk->fab_go) {
		__atomic_store_n(&lk->fab_pending, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&lk->fab_cond);
	}
	pthread_mutex_unlock(&lk->hb_lock);
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
static void link_fabric_wait(struct plink *lk);

/* The same without the fabric: the same-host path needs none, so it
 * does not make the first transfer wait for one. */
static inline __attribute__((always_inline)) int
link_leases_usable(struct plink *lk, uint64_t *now)
{
	if (__atomic_load_n(&lk->lost, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (!*now)
		*now = mono_ms();
	if (*now >= __atomic_load_n(&lk->valid_until_ms, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	return 0;
}

static inline __attribute__((always_inline)) int link_usable(struct plink *lk,
							     uint64_t *now)
{
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		link_fabric_wait(lk);
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

static int link_fabric(struct plink *lk, const char *local);

/*
 * A link opened with a deferred fabric (p->fabric_background) is usable
 * for control messages (leases) at once. Its fabric (fi_getinfo, domain,
 * endpoint: 0.3-0.6 s with Debian's libfabric 1.17, nearly all of it
 * libfabric's own start-up) is set up by its heartbeat thread once
 * somebody asks for it: the first transfer (link_fabric_wait(), which
 * then waits) or pool_fabric_prepare() (no wait; the paging engine's
 * warm-up, before evictions need it). A program that never moves a byte
 * never pays for it. A fabric that cannot be set up ends the link like a
 * lost memd (-ENOTCONN).
 */
static void link_fabric_background(struct plink *lk)
{
	int r;

	/* libfabric's load first (0.2 s with Debian's 1.17): an exit that
	 * comes meanwhile with nobody waiting for the fabric
	 * (pool_fabric_exit()) stops the set-up there, before any
	 * libfabric call that exit's destructors could undo under us. */
	fab_load();
	pthread_mutex_lock(&lk->hb_lock);
	if (lk->fab_cancel && !lk->fab_waiters) {
		lk->fab_go = false;
		lk->fab_busy = false;
		pthread_cond_broadcast(&lk->fab_cond);
		pthread_mutex_unlock(&lk->hb_lock);
		return;
	}
	pthread_mutex_unlock(&lk->hb_lock);
	r = link_fabric(lk, lk->local);
	pthread_mutex_lock(&lk->hb_lock);
	lk->fab_busy = false;
	__atomic_store_n(&lk->fab_pending, false, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&lk->fab_cond);
	pthread_mutex_unlock(&lk->hb_lock);
	/* refused by link_fabric_check() (fab_err): the link lives on
	 * without a fabric, as in link_open */
	if (r && !lk->fab_err)
		link_fail(lk, -ENOTCONN, "fabric set-up failed");
}

/* Asks lk's heartbeat thread for the fabric; caller holds hb_lock. */
static void link_fabric_go_locked(struct plink *lk)
{
	if (!lk->fab_go) {
		lk->fab_go = true;
		pthread_cond_broadcast(&lk->hb_cond);
	}
}

/* Sleeps until lk's fabric is set up (or failed): see above. */
static void __attribute__((noinline)) link_fabric_wait(struct plink *lk)
{
	pthread_mutex_lock(&lk->hb_lock);
	lk->fab_waiters++;
	lk->fab_cancel = false; /* needed after all, exit or not */
	link_fabric_go_locked(lk);
	while (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&lk->fab_cond, &lk->hb_lock);
	lk->fab_waiters--;
	pthread_mutex_unlock(&lk->hb_lock);
}

static void *hb_main(void *arg)
{
	struct plink *lk = arg;
	uint32_t period = lk->ttl_ms / 3;

	pthread_setname_np(pthread_self(), "pool-hb");
	pool_paging_mark_engine_thread();
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
		while (!lk->hb_stop && !link_is_lost(lk) &&
		       !(lk->fab_go && lk->fab_pending) &&
		       pthread_cond_timedwait(&lk->hb_cond, &lk->hb_lock,
					      &ts) != ETIMEDOUT)
			;
		if (lk->hb_stop) {
			pthread_mutex_unlock(&lk->hb_lock);
			break;
		}
		if (lk->fab_go && lk->fab_pending) {
			lk->fab_busy = true;
			pthread_mutex_unlock(&lk->hb_lock);
			link_fabric_background(lk);
			continue; /* the heartbeat's turn comes next */
		}
		pthread_mutex_unlock(&lk->hb_lock);
		if (link_is_lost(lk))
			break;

		if (lk->hb2) {
			/* HEARTBEAT2 tells memd what RMA we did (its
			 * /metrics): the endpoint's own counters. */
			struct fab_ep_stats es = { 0 };

			pthread_rwlock_rdlock(&lk->ep_rw);
			if (lk->ep)
				fab_ep_get_stats(lk->ep, &es);
			pthread_rwlock_unlock(&lk->ep_rw);
			req.type = WIRE_HEARTBEAT2;
			req.u.heartbeat2.bytes_read = es.read_bytes;
			req.u.heartbeat2.bytes_written = es.write_bytes;
			req.u.heartbeat2.ops = es.reads + es.writes;
		}
		sent = mono_ms();
		/* A reply is useful until the leases it renews would lapse
		 * anyway; a slow memd is not a dead one. */
		tmo = (int)(lk->ttl_ms - lk->margin_ms);
		r = rpc_call(lk->ctl, &req, &rep,
			     lk->hb2 ? WIRE_HEARTBEAT2_OK : WIRE_HEARTBEAT_OK,
			     tmo, NULL, 0);
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
	/* Nobody will set the fabric up now: release its waiters (they
	 * find the link lost or closing). */
	pthread_mutex_lock(&lk->hb_lock);
	if (lk->fab_pending) {
		__atomic_store_n(&lk->fab_pending, false, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&lk->fab_cond);
	}
	pthread_mutex_unlock(&lk->hb_lock);
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

static void kvshm_drop(struct plink *lk, struct kvshm *e);

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
	if (lk->shm_sock >= 0)
		close(lk->shm_sock);
	for (uint32_t i = 0; i < KVSHM_MAX; i++)
		kvshm_drop(lk, &lk->kvshm[i]);
	pthread_rwlock_destroy(&lk->kvshm_rw);
	pthread_mutex_destroy(&lk->shm_mu);
	pthread_rwlock_destroy(&lk->ep_rw);
	pthread_cond_destroy(&lk->fab_cond);
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
	pthread_cond_init(&lk->fab_cond, NULL);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&lk->ep_rw, &ra);
	pthread_rwlock_init(&lk->kvshm_rw, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&lk->shm_mu, NULL);
	lk->shm_sock = -1;
	return lk;
}

/* One request on the same-host socket and its reply (and descriptor). */
static int shm_call(struct plink *lk, const struct wire_shm_req *q,
		    struct wire_shm_rep *rep, int *fd)
{
	uint8_t buf[WIRE_SHM_REQ_LEN], in[WIRE_SHM_REP_MAX + 1];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct iovec iov = { .iov_base = in, .iov_len = sizeof(in) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cm.b,
			     .msg_controllen = sizeof(cm.b) };
	struct timeval tv = { .tv_sec = lk->p->timeout_ms / 1000,
			      .tv_usec = (lk->p->timeout_ms % 1000) * 1000 };
	struct cmsghdr *h;
	ssize_t n;
	int got = -1;

	*fd = -1;
	if (wire_shm_req_encode(q, buf) != WIRE_SHM_REQ_LEN)
		return -EINVAL;
	pthread_mutex_lock(&lk->shm_mu);
	(void)setsockopt(lk->shm_sock, SOL_SOCKET, SO_RCVTIMEO, &tv,
			 sizeof(tv));
	if (send(lk->shm_sock, buf, sizeof(buf), MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(buf)) {
		n = errno ? -errno : -EIO;
		pthread_mutex_unlock(&lk->shm_mu);
		return (int)n;
	}
	n = recvmsg(lk->shm_sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		n = -errno;
	pthread_mutex_unlock(&lk->shm_mu);
	if (n < 0)
		return (int)n;
	for (h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h))
		if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
		    h->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(&got, CMSG_DATA(h), sizeof(int));
	if (wire_shm_rep_decode(in, (size_t)n, rep) || rep->op != q->op ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (got >= 0)
			close(got);
		return -EPROTO;
	}
	*fd = got;
	return 0;
}

/*
 * Same-host path: when LIBPOOL_SHM allows it and memd answers SHM with
 * SHM_OK (same boot id, shm on), connects to memd's socket and binds it
 * to this session. Any failure leaves the link on the fabric (logged),
 * which is the contract of auto.
 */
static void link_shm_open(struct plink *lk)
{
	struct wire_msg *req, *rep;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct wire_shm_req q = { .op = WIRE_SHM_BIND };
	struct wire_shm_rep sr;
	char text[WIRE_MSG_MAX] = "";
	socklen_t sl;
	size_t nl;
	int r, fd = -1, ign;

	if (!lk->p->shm || lk->proto < 2)
		return;
	req = calloc(1, sizeof(*req));
	rep = calloc(1, sizeof(*rep));
	if (!req || !rep) {
		r = -ENOMEM;
		goto out;
	}
	req->type = WIRE_SHM;
	r = wire_boot_id_read(WIRE_BOOT_ID_PATH, req->u.shm.boot_id);
	if (r) {
		snprintf(text, sizeof(text), "no boot id");
		goto out;
	}
	r = rpc_call(lk->ctl, req, rep, WIRE_SHM_OK, lk->p->timeout_ms, text,
		     sizeof(text));
	if (r)
		goto out;
	nl = strnlen(rep->u.shm_ok.socket, sizeof(rep->u.shm_ok.socket));
	memcpy(sa.sun_path + 1, rep->u.shm_ok.socket, nl);
	sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sl)) {
		r = -errno;
		snprintf(text, sizeof(text), "socket @%s unreachable",
			 rep->u.shm_ok.socket);
		goto out;
	}
	lk->shm_sock = fd;
	q.session_id = lk->session_id;
	memcpy(q.nonce, rep->u.shm_ok.nonce, WIRE_NONCE_LEN);
	r = shm_call(lk, &q, &sr, &ign);
	explicit_bzero(&q, sizeof(q));
	if (ign >= 0)
		close(ign);
	if (!r && sr.err)
		r = -sr.err;
	if (r) {
		snprintf(text, sizeof(text), "bind refused");
		lk->shm_sock = -1;
		goto out;
	}
	fd = -1;
	pool_log(LOG_INFO, "session: shm session=%" PRIx64 " memd=%s",
		 lk->session_id, lk->addr);
out:
	if (r)
		pool_log(LOG_INFO,
			 "session: fabric session=%" PRIx64 " memd=%s "
			 "why=no same-host path (%s: %s)",
			 lk->session_id, lk->addr, strerror(-r), text);
	if (fd >= 0)
		close(fd);
	if (rep)
		explicit_bzero(rep, sizeof(*rep));
	free(req);
	free(rep);
}

#define SHM_HUGE_BYTES ((uint64_t)2 << 20)

/*
 * A read-only shared mapping of len bytes of fd at an address aligned
 * to 2 MiB, or NULL. memd puts its memfd slabs on 2 MiB pages where the
 * kernel lets it (memd.conf(5) hugepages); the kernel maps such a page
 * with one page-table entry, one fault, only where the address is as
 * aligned as the file offset, and mmap(NULL) of a memfd is only 4 KiB
 * aligned. A copy from a mapping at a misaligned address faults per 16
 * pages (about half the speed: docs/bench/kv.md, "Huge pages for
 * memfd slabs"). munmap(m, len) undoes it: the slack is unmapped here.
 */
static void *shm_map_aligned(int fd, uint64_t len)
{
	uint8_t *r, *at;
	void *m;
	size_t head, tail;

	r = mmap(NULL, len + SHM_HUGE_BYTES, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return NULL;
	at = (uint8_t *)(((uintptr_t)r + SHM_HUGE_BYTES - 1) &
			 ~(uintptr_t)(SHM_HUGE_BYTES - 1));
	m = mmap(at, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
	if (m == MAP_FAILED) {
		munmap(r, len + SHM_HUGE_BYTES);
		return NULL;
	}
	head = (size_t)(at - r);
	tail = (size_t)(SHM_HUGE_BYTES - head);
	if (head)
		munmap(r, head);
	if (tail)
		munmap(at + len, tail);
	return m;
}

/*
 * LIBPOOL_SHM=map: a read-only shared mapping of a slab's memfd, through
 * a read-only descriptor of the same file: no VM_MAYWRITE, so memd can
 * still write-seal the file at revocation. Reads copy from it (the
 * kernel's pread of shmem costs about 0.7 us per 4 KiB page here, 4x a
 * memcpy: docs/bench/poolbench.md). After revocation the mapping shows
 * the punched-out old file: zeros, never the next tenant's bytes. Not
 * the default: every page read stays mapped and counts in the client's
 * RSS (RssShmem), which the OOM killer and the paging engine's budget
 * checks see. The KV path maps through here too (kvshm_map).
 *
 * Only a file sealed against shrinking (F_SEAL_SHRINK: nobody can
 * truncate it under the mapping) that holds len bytes is mapped: a copy
 * from anything else could fault with SIGBUS past the file's end. A
 * shm_dir file (no seals) or a short one is read with pread instead,
 * whose short read is -ESTALE (shm_piece). A writable descriptor is
 * reopened read-only through /proc/self/fd, which the file's mode 0400
 * allows only to memd's uid (and root): another uid's client reads with
 * pread. NULL: reads use pread.
 */
static const uint8_t *shm_map_ro(int fd, uint64_t len)
{
	char path[64];
	struct stat st;
	uint8_t *m;
	int ro, seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return NULL;
	if (fstat(fd, &st) || st.st_size < 0 || (uint64_t)st.st_size < len)
		return NULL;
	if ((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDONLY)
		return shm_map_aligned(fd, len);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro < 0)
		return NULL;
	m = shm_map_aligned(ro, len);
	close(ro);
	return m;
}

/* The memfd of lease l of a same-host link, or -1 (fabric for it). */
static int link_shm_slab_fd(struct plink *lk, const struct wire_lease *l)
{
	struct wire_shm_req q = { .op = WIRE_SHM_SLAB,
				  .session_id = lk->session_id,
				  .slab = l->slab,
				  .generation = l->generation };
	struct wire_shm_rep rep;
	int fd, r;

	if (lk->shm_sock < 0 || lk->shm_broken)
		return -1;
	r = shm_call(lk, &q, &rep, &fd);
	if (!r && (rep.err || rep.slab != l->slab ||
		   rep.generation != l->generation || fd < 0))
		r = rep.err ? -rep.err : -EPROTO;
	if (r) {
		if (fd >= 0)
			close(fd);
		pool_log(LOG_WARNING,
			 "alloc: slab=%u of memd=%s over the fabric: its "
			 "memfd was refused (%s)",
			 l->slab, lk->addr, strerror(-r));
		if (r != -ESTALE && r != -EPERM)
			lk->shm_broken = true; /* out of step: ask no more */
		return -1;
	}
	return fd;
}

/* Takes the session fields of lk from its HELLO_OK. */
static int link_take_hello(struct plink *lk, const struct wire_hello_ok *ok)
{
	struct pool *p = lk->p;

	lk->proto = ok->proto;
	lk->session_id = ok->session_id;
	lk->epoch = ok->epoch;
	lk->ttl_ms = ok->ttl_ms;
	if (lk->ttl_ms < 30 || ok->slab_bytes < CHUNK_BYTES ||
	    ok->slab_bytes % CHUNK_BYTES || ok->nendpoints < 1 ||
	    ok->nendpoints > WIRE_MAX_ENDPOINTS)
		return -EPROTO;
	if (!p->slab_bytes)
		p->slab_bytes = ok->slab_bytes;
	if (ok->slab_bytes != p->slab_bytes) {
		pool_log(LOG_ERR,
			 "session: memd=%s slab=%" PRIu64 " but the pool's "
			 "is %" PRIu64,
			 lk->addr, ok->slab_bytes, p->slab_bytes);
		return -EPROTO;
	}
	/* Stop using leases a tenth of the TTL (at most 1 s) early. */
	lk->margin_ms = lk->ttl_ms / 10 < 1000 ? lk->ttl_ms / 10 : 1000;
	memcpy(lk->provider, ok->provider, sizeof(lk->provider));
	lk->nendpoints = ok->nendpoints;
	memcpy(lk->mep, ok->ep, lk->nendpoints * sizeof(lk->mep[0]));
	return 0;
}

/*
 * A memd in cluster mode refuses every request before AUTH (EACCES). A
 * session without a tenant finds out here, at connect, with one STATUS,
 * rather than at its first allocation.
 */
static int link_probe_open(struct plink *lk)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *rep = malloc(sizeof(*rep));
	int r = -ENOMEM;

	if (req && rep) {
		req->type = WIRE_STATUS;
		r = rpc_call(lk->ctl, req, rep, WIRE_STATUS_OK,
			     lk->p->timeout_ms, NULL, 0);
	}
	free(req);
	free(rep);
	if (r == -EACCES)
		pool_log(LOG_ERR,
			 "session: memd=%s requires authentication: set "
			 "LIBPOOL_TENANT and LIBPOOL_SECRET_FILE (or "
			 "pool_opts.tenant and secret_file)",
			 lk->addr);
	return r;
}

static bool is_transport_error(int err);

/*
 * Protocol 3: asks memd (FABRIC) for the FI_OFI_RXM_BUFFER_SIZE its
 * provider uses, telling it ours (for its log). tcp;ofi_rxm refuses a
 * connection between ends that differ without a word to either (the
 * RMA just times out), so link_fabric() compares first. A memd that
 * does not answer leaves the check off (logged); only a broken
 * control connection is an error.
 */
static int link_fabric_ask(struct plink *lk)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *rep = malloc(sizeof(*rep));
	char text[WIRE_MSG_MAX] = "";
	int r = -ENOMEM;

	if (req && rep) {
		req->type = WIRE_FABRIC;
		req->u.fabric.rxm_buffer_size =
			fab_provider_is_rxm(lk->provider)
				? fab_rxm_buffer_size()
				: 0;
		r = rpc_call(lk->ctl, req, rep, WIRE_FABRIC_OK,
			     lk->p->timeout_ms, text, sizeof(text));
	}
	if (!r)
		lk->memd_rxm = rep->u.fabric.rxm_buffer_size;
	free(req);
	free(rep);
	/* -EPROTO is also rpc_call's "unexpected reply, connection
	 * dropped": fatal, as the others it keeps */
	if (r && r != -ENOMEM && r != -ETIMEDOUT && r != -EPROTO &&
	    !is_transport_error(r)) {
		pool_log(LOG_NOTICE,
			 "session: memd=%s refused FABRIC (%s %s): "
			 "FI_OFI_RXM_BUFFER_SIZE not compared",
			 lk->addr, strerror(-r), text);
		r = 0;
	}
	return r;
}

/*
 * -EPROTO (with one line at error) when lk's memd uses another
 * FI_OFI_RXM_BUFFER_SIZE than this process: its provider would refuse
 * our connection, and every transfer would time out. Else 0.
 */
static int link_fabric_check(struct plink *lk)
{
	uint32_t mine;

	if (!lk->memd_rxm || !fab_provider_is_rxm(lk->provider))
		return 0;
	mine = fab_rxm_buffer_size();
	if (!mine || mine == lk->memd_rxm)
		return 0;
	/* notice only: a same-host session may never need the fabric;
	 * the first transfer that does says it at err (link_no_ep_err) */
	pool_log(LOG_NOTICE,
		 "session: no fabric to memd=%s: its "
		 "FI_OFI_RXM_BUFFER_SIZE=%" PRIu32 ", this process %" PRIu32
		 " (transfers over the fabric fail with EPROTO)",
		 lk->addr, lk->memd_rxm, mine);
	lk->fab_err = -EPROTO;
	return -EPROTO;
}

/* Why lk has no endpoint: its fabric refused (fab_err, -EPROTO; the
 * first time, one line at err names both values and the fix), else the
 * link failed (-ENOTCONN). */
static int link_no_ep_err(struct plink *lk)
{
	if (!lk->fab_err)
		return -ENOTCONN;
	if (!__atomic_exchange_n(&lk->fab_err_said, true, __ATOMIC_RELAXED))
		pool_log(LOG_ERR,
			 "session: memd at %s uses "
			 "FI_OFI_RXM_BUFFER_SIZE=%" PRIu32
			 ", this process %" PRIu32
			 ": set FI_OFI_RXM_BUFFER_SIZE=%" PRIu32
			 " here, or the same value for memd",
			 lk->addr, lk->memd_rxm, fab_rxm_buffer_size(),
			 lk->memd_rxm);
	return lk->fab_err;
}

/* The fabric side of lk (domain bound where local is, endpoint, AV). */
static int link_fabric(struct plink *lk, const char *local)
{
	struct pool *p = lk->p;
	struct fab_opts fo = { 0 };
	size_t max, cur;
	int r;

	r = link_fabric_check(lk);
	if (r)
		return r;
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

/* How a link authenticates; NULL: it does not (standalone memd). */
struct link_auth {
	const char *principal;
	const uint8_t *key; /* AUTH_KEY_LEN bytes */
	const uint8_t *pass;
	uint16_t pass_len;
	uint32_t donor_id;
	uint64_t donor_epoch;
};

/*
 * Handshake retries. memd may close a connection still in its handshake
 * (HELLO, AUTH) for reasons that say nothing about the client: displaced
 * by newer connections while its table or an address's handshake
 * allowance is full (a churn of half-open connections does that), its
 * handshake_timeout on a loaded host, a restart. The client sees
 * -ENOTCONN (or a reset) from HELLO or AUTH; a fresh connection usually
 * gets in. So a handshake whose connection was lost is retried on a new
 * connection, after 10, 20, 40 ... 320 ms, while the call's timeout
 * lasts; a refusal memd answers (an ERROR: EACCES, EAGAIN, a full
 * table's "too many clients") and every other error are final.
 */
static bool handshake_lost(int r)
{
	return r == -ENOTCONN || r == -ECONNRESET || r == -EPIPE;
}

/* Milliseconds left until deadline, at least 1 (the rpc_* calls take 0
 * as no time at all). */
static int ms_left(uint64_t deadline)
{
	uint64_t now = mono_ms();

	return now + 1 >= deadline	  ? 1
	       : deadline - now > INT_MAX ? INT_MAX
					  : (int)(deadline - now);
}

/* Waits before retry attempt (1, 2, ...) of a lost handshake with what
 * at addr; false, without waiting, when the wait would pass deadline. */
static bool handshake_retry_wait(uint64_t deadline, unsigned attempt,
				 const char *what, const char *addr, int r)
{
	uint64_t wait_ms = 10u << (attempt - 1 < 5 ? attempt - 1 : 5);
	struct timespec ts;

	if (mono_ms() + wait_ms >= deadline)
		return false;
	pool_log(LOG_NOTICE,
		 "session: %s=%s closed the connection during the handshake "
		 "err=%s; retrying attempt=%u in_ms=%" PRIu64,
		 what, addr, strerror(-r), attempt, wait_ms);
	ts.tv_sec = (time_t)(wait_ms / 1000);
	ts.tv_nsec = (long)(wait_ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	return true;
}

/*
 * Opens a link to the memd at addr: control connection, HELLO, AUTH when
 * au is given (else a check that memd does not want it), fabric,
 * heartbeat. Does not publish it. A connection lost during HELLO or AUTH
 * is retried within p->timeout_ms (handshake_lost above). Returns 0 and
 * *out, or -errno.
 */
static int link_open(struct pool *p, const char *addr,
		     const struct link_auth *au, struct plink **out)
{
	struct wire_hello_ok *hok = NULL;
	char local[64], text[WIRE_MSG_MAX];
	uint64_t deadline = mono_ms() + (uint64_t)p->timeout_ms;
	struct plink *lk;
	int r;

	*out = NULL;
	lk = link_new(p, addr);
	hok = malloc(sizeof(*hok));
	if (!lk || !hok) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned attempt = 1;; attempt++) {
		bool authing = false;

		r = rpc_connect(addr, ms_left(deadline), &lk->ctl, local,
				sizeof(local));
		if (r) {
			pool_log(LOG_WARNING, "session: connect memd=%s err=%s",
				 addr, strerror(-r));
			goto fail;
		}
		rpc_set_log(lk->ctl, rpc_log, NULL);
		text[0] = '\0';
		r = rpc_hello(lk->ctl, p->client, WIRE_PROTO_MIN,
			      ms_left(deadline), hok, text, sizeof(text));
		if (!r)
			r = link_take_hello(lk, hok);
		if (!r && au) {
			struct wire_auth_ok *aok = malloc(sizeof(*aok));
			uint8_t sk[AUTH_KEY_LEN];

			authing = true;
			r = aok ? rpc_auth(lk->ctl, hok, au->principal, au->key,
					   au->pass, au->pass_len,
					   ms_left(deadline), aok, sk, text,
					   sizeof(text))
				: -ENOMEM;
			explicit_bzero(sk, sizeof(sk));
			if (!r)
				lk->tenant_id = aok->tenant_id;
			free(aok);
		}
		if (!r)
			break;
		if (!handshake_lost(r) ||
		    !handshake_retry_wait(deadline, attempt, "memd", addr, r)) {
			if (authing)
				pool_log(LOG_ERR,
					 "session: authentication at donor=%u "
					 "memd=%s err=%s %s",
					 au->donor_id, addr, strerror(-r),
					 text);
			else
				pool_log(LOG_WARNING,
					 "session: hello memd=%s err=%s %s",
					 addr, strerror(-r), text);
			goto fail;
		}
		rpc_close(lk->ctl);
		lk->ctl = NULL;
	}
	lk->hb2 = lk->proto >= 2;
	if (au) {
		lk->donor_id = au->donor_id;
		lk->donor_epoch = au->donor_epoch;
	} else if (lk->proto >= 2) {
		r = link_probe_open(lk);
		if (r)
			goto fail;
	}
	if (lk->proto >= 3) {
		r = link_fabric_ask(lk);
		if (r)
			goto fail;
	}
	extend_validity(lk, mono_ms());
	if (p->fabric_background) {
		memcpy(lk->local, local, sizeof(lk->local));
		__atomic_store_n(&lk->fab_pending, true, __ATOMIC_RELEASE);
	} else {
		/* fab_err: memd's fabric would refuse ours; the link stays
		 * for what needs no fabric (leases, the same-host path) and
		 * its transfers over the fabric fail with it. Any other
		 * error (an -EPROTO from the provider included) fails it. */
		r = link_fabric(lk, local);
		if (r && !lk->fab_err)
			goto fail;
	}
	/* the same-host path needs no fabric (docs/design.md) */
	link_shm_open(lk);
	r = pthread_create(&lk->hb, NULL, hb_main, lk);
	if (r) {
		lk->fab_pending = false;
		r = -r;
		goto fail;
	}
	lk->hb_started = true;
	pool_log(LOG_INFO,
		 "session: open session=%" PRIx64 " memd=%s donor=%u "
		 "provider=%s slab=%" PRIu64 " ttl_ms=%u endpoints=%u "
		 "proto=%u shm=%d",
		 lk->session_id, lk->addr, lk->donor_id, lk->provider,
		 p->slab_bytes, lk->ttl_ms, lk->nendpoints, lk->proto,
		 lk->shm_sock >= 0);
	free(hok);
	*out = lk;
	return 0;
fail:
	free(hok);
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

/*
 * Joins the heartbeat threads of failed links that have ended, and
 * closes and frees failed links nothing refers to (DESIGN: reaping).
 * Never blocks on a thread: one still in its last RPC is joined at a
 * later call. Caller holds lock.
 */
static void links_reap_locked(struct pool *p)
{
	struct plink **at = &p->links;

	if (!p->cluster)
		return;
	while (*at) {
		struct plink *lk = *at;

		if (!link_is_lost(lk)) {
			at = &lk->next;
			continue;
		}
		if (lk->hb_started) {
			pthread_mutex_lock(&lk->hb_lock);
			lk->hb_stop = true;
			pthread_cond_broadcast(&lk->hb_cond);
			pthread_mutex_unlock(&lk->hb_lock);
			if (pthread_tryjoin_np(lk->hb, NULL)) {
				at = &lk->next;
				continue;
			}
			lk->hb_started = false;
		}
		if (lk->nslabs || lk->refs) {
			at = &lk->next;
			continue;
		}
		*at = lk->next;
		p->links_reaped++;
		p->hb_reaped +=
			__atomic_load_n(&lk->st_heartbeats, __ATOMIC_RELAXED);
		pool_log(LOG_DEBUG,
			 "session: reaped session=%" PRIx64 " memd=%s donor=%u",
			 lk->session_id, lk->addr, lk->donor_id);
		link_close(lk);
	}
}

/* ------------------------------------------------------------------ */
/* leases and packing                                                   */

static void slab_free(struct slab *s)
{
	if (s) {
		if (s->map)
			munmap((void *)s->map, s->l.len_bytes);
		if (s->fd >= 0)
			close(s->fd);
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
	s->fd = link_shm_slab_fd(lk, l);
	s->fd_ro =
		s->fd >= 0 && (fcntl(s->fd, F_GETFL) & O_ACCMODE) == O_RDONLY;
	s->map = s->fd >= 0 && p->shm_map ? shm_map_ro(s->fd, l->len_bytes)
					  : NULL;
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

/* ------------------------------------------------------------------ */
/* cluster sessions: the registry, donor links, placement               */

/*
 * (Re)connects to the registry at addr: HELLO, AUTH as the tenant,
 * and takes the donor pass and its key from AUTH_OK. Replaces p->reg.
 * Caller holds lock (or owns p alone).
 */
static int reg_connect_one_locked(struct pool *p, const char *addr)
{
	struct wire_auth_ok *aok = malloc(sizeof(*aok));
	struct wire_hello_ok *hok = malloc(sizeof(*hok));
	uint8_t sk[AUTH_KEY_LEN], pk[AUTH_KEY_LEN];
	char text[WIRE_MSG_MAX];
	struct rpc *c = NULL;
	uint64_t sent = mono_ms();
	uint64_t deadline = sent + (uint64_t)p->timeout_ms;
	int r;

	if (!aok || !hok) {
		r = -ENOMEM;
		goto out;
	}
	for (unsigned attempt = 1;; attempt++) {
		r = rpc_connect(addr, ms_left(deadline), &c, NULL, 0);
		if (r) {
			pool_log(LOG_WARNING,
				 "session: connect registry=%s err=%s", addr,
				 strerror(-r));
			goto out;
		}
		rpc_set_log(c, rpc_log, NULL);
		text[0] = '\0';
		r = rpc_hello(c, p->client, WIRE_PROTO_MIN, ms_left(deadline),
			      hok, text, sizeof(text));
		if (!r && hok->proto < 2) {
			snprintf(text, sizeof(text),
				 "memd speaks protocol %u, which has no "
				 "tenants",
				 hok->proto);
			r = -EOPNOTSUPP;
		}
		if (!r)
			r = rpc_auth(c, hok, p->tenant, p->tenant_key, NULL, 0,
				     ms_left(deadline), aok, sk, text,
				     sizeof(text));
		if (!handshake_lost(r) ||
		    !handshake_retry_wait(deadline, attempt, "registry", addr,
					  r))
			break;
		rpc_close(c);
		c = NULL;
	}
	if (r == -EOPNOTSUPP) {
		pool_log(LOG_ERR,
			 "session: memd=%s is standalone: it has no tenants "
			 "(unset LIBPOOL_TENANT / pool_opts.tenant): %s",
			 addr, text);
		goto out;
	}
	if (r) {
		pool_log(r == -EAGAIN ? LOG_INFO : LOG_ERR,
			 "session: authentication as tenant=%s at memd=%s "
			 "err=%s %s",
			 p->tenant, addr, strerror(-r), text);
		goto out;
	}
	if (!(aok->flags & WIRE_AUTH_REGISTRY) ||
	    aok->role != WIRE_ROLE_TENANT) {
		pool_log(LOG_ERR,
			 "session: memd=%s is not the registry: connect to "
			 "the registry of the pool",
			 addr);
		r = -EINVAL;
		goto out;
	}
	if (!aok->pass_len || !aok->pass_ttl_ms ||
	    auth_open(sk, aok->box, aok->box_len, pk, sizeof(pk)) !=
		    AUTH_KEY_LEN) {
		pool_log(LOG_ERR,
			 "session: registry=%s sent no usable donor pass",
			 addr);
		r = -EPROTO;
		goto out;
	}
	if (hok->slab_bytes < CHUNK_BYTES || hok->slab_bytes % CHUNK_BYTES ||
	    (p->slab_bytes && hok->slab_bytes != p->slab_bytes)) {
		r = -EPROTO;
		goto out;
	}
	p->slab_bytes = hok->slab_bytes;
	p->reg_hello = *hok;
	memcpy(p->pass, aok->pass, aok->pass_len);
	p->pass_len = aok->pass_len;
	memcpy(p->pass_key, pk, sizeof(pk));
	p->pass_ttl_ms = aok->pass_ttl_ms;
	p->pass_until_ms = sent + aok->pass_ttl_ms;
	rpc_close(p->reg);
	p->reg = c;
	c = NULL;
	snprintf(p->reg_addr, sizeof(p->reg_addr), "%s", addr);
	pool_log(LOG_INFO,
		 "session: registry=%s tenant=%s tenant_id=%u pass_ttl_ms=%u",
		 addr, p->tenant, aok->tenant_id, aok->pass_ttl_ms);
out:
	explicit_bzero(sk, sizeof(sk));
	explicit_bzero(pk, sizeof(pk));
	if (aok)
		explicit_bzero(aok, sizeof(*aok));
	free(aok);
	free(hok);
	rpc_close(c);
	return r;
}

/*
 * Connects to one of the registries in p->addr, trying each once from
 * p->reg_next on (the one that answered last is first next time). 0, or
 * the error of the last one tried (-EAGAIN: reached, but none serves now).
 * Caller holds lock.
 */
static int reg_connect_locked(struct pool *p)
{
	char one[WIRE_HOSTPORT_MAX];
	const char *a[16];
	int n = 0, r = -EINVAL;

	for (const char *q = p->addr; *q && n < 16;) {
		a[n++] = q;
		q += strcspn(q, ",");
		if (*q)
			q++;
	}
	for (int k = 0; k < n; k++) {
		int i = (p->reg_next + k) % n;
		size_t len = strcspn(a[i], ",");

		if (!len || len >= sizeof(one))
			continue;
		memcpy(one, a[i], len);
		one[len] = '\0';
		r = reg_connect_one_locked(p, one);
		if (!r) {
			p->reg_next = i;
			return 0;
		}
	}
	return r;
}

/*
 * A call to the registries: with a list, a broken connection, a registry
 * that died or one that does not serve now is failed over to the next in
 * p->addr (and round again) for up to p->failover_ms; with one registry,
 * a broken connection is opened again once, as before lists. Caller holds
 * lock.
 */
static int reg_call_locked(struct pool *p, struct wire_msg *req,
			   struct wire_msg *rep, int expect, char *text,
			   size_t textlen)
{
	uint64_t until = mono_ms() + ((uint32_t)p->timeout_ms > p->failover_ms
					      ? (uint64_t)p->timeout_ms
					      : p->failover_ms);
	int r = -ENOTCONN;

	if (!strchr(p->addr, ',')) {
		/* One registry: a broken connection (it restarted) is opened
		 * again, once; EAGAIN (an etcd registry taking over) is
		 * asked again until the failover time is over; other
		 * refusals are final. */
		for (int i = 0; i < 2 && (r == -ENOTCONN || r == -EAGAIN);) {
			if (!p->reg || rpc_is_broken(p->reg)) {
				r = reg_connect_locked(p);
				if (r)
					return r;
			}
			r = rpc_call(p->reg, req, rep, expect, p->timeout_ms,
				     text, textlen);
			if (r != -EAGAIN)
				i++;
			else if (mono_ms() >= until)
				break;
			else
				usleep(REG_RETRY_MS * 1000);
		}
		return r;
	}
	for (;;) {
		if (!p->reg || rpc_is_broken(p->reg)) {
			r = reg_connect_locked(p);
			if (r) {
				snprintf(text, textlen,
					 "no registry of %.160s answered: %s",
					 p->addr, strerror(-r));
				goto retry;
			}
		}
		r = rpc_call(p->reg, req, rep, expect, p->timeout_ms, text,
			     textlen);
		/* Sent and not answered (the registry died), or refused by
		 * one that does not serve now (an etcd standby, a leader
		 * unsure of its lease, one that just took over): another
		 * registry, or this one again, places afresh. A PLACE that
		 * was never answered reserved nothing that will be used:
		 * its ticket never reached us, and donors refuse tickets of
		 * an epoch they left (docs/cluster.md). */
		if (r != -ENOTCONN && r != -EAGAIN && r != -ETIMEDOUT &&
		    r != -ECONNRESET && r != -EPIPE)
			return r;
		pool_log(LOG_INFO,
			 "session: registry=%s err=%s %s; failing over",
			 p->reg_addr, strerror(-r), text);
		rpc_close(p->reg);
		p->reg = NULL;
		p->reg_next++;
	retry:
		if (mono_ms() >= until)
			return r;
		usleep(REG_RETRY_MS * 1000);
	}
}

/* The link to a donor incarnation (donor_id, epoch at addr): one we have
 * and that is not lost, else a new one (with a fresh pass when ours runs
 * out soon). Caller holds lock. */
static int donor_link_open_locked(struct pool *p, uint32_t donor_id,
				  uint64_t epoch, const char *addr,
				  struct plink **out)
{
	uint32_t renew = p->pass_ttl_ms / 4 < PASS_RENEW_MS ? p->pass_ttl_ms / 4
							    : PASS_RENEW_MS;
	struct link_auth au;
	struct plink *lk;
	int r;

	links_reap_locked(p);
	for (lk = p->links; lk; lk = lk->next)
		if (lk->donor_id == donor_id && lk->donor_epoch == epoch &&
		    !link_is_lost(lk)) {
			*out = lk;
			return 0;
		}
	if (mono_ms() + renew >= p->pass_until_ms) {
		r = reg_connect_locked(p);
		/* The registry is away: the old pass serves until it ends. */
		if (r && mono_ms() >= p->pass_until_ms)
			return r;
	}
	p->pass_left_at_open_ms =
		(int64_t)p->pass_until_ms - (int64_t)mono_ms();
	au = (struct link_auth){ .principal = p->tenant,
				 .key = p->pass_key,
				 .pass = p->pass,
				 .pass_len = p->pass_len,
				 .donor_id = donor_id,
				 .donor_epoch = epoch };
	r = link_open(p, addr, &au, &lk);
	if (r)
		return r;
	link_publish_locked(p, lk);
	*out = lk;
	return 0;
}

/* The link to a granted donor incarnation. Caller holds lock. */
static int donor_link_locked(struct pool *p, const struct wire_grant *g,
			     struct plink **out)
{
	return donor_link_open_locked(p, g->donor_id, g->donor_epoch, g->addr,
				      out);
}

/* PLACE_OK makes sense for k slabs (replica: with a second copy on
 * another donor each). */
static bool place_ok_is_sane(const struct wire_place_ok *ok, uint32_t k,
			     bool replica)
{
	uint32_t uses[WIRE_MAX_GRANTS] = { 0 };

	if (ok->ngrants < 1 || ok->ngrants > WIRE_MAX_GRANTS || ok->nslabs != k)
		return false;
	for (uint32_t i = 0; i < k; i++) {
		const struct wire_layout *l = &ok->layout[i];

		if (l->primary >= ok->ngrants)
			return false;
		uses[l->primary]++;
		if (!replica) {
			if (l->replica != WIRE_NO_GRANT)
				return false;
			continue;
		}
		if (l->replica >= ok->ngrants ||
		    ok->grant[l->replica].donor_id ==
			    ok->grant[l->primary].donor_id)
			return false;
		uses[l->replica]++;
	}
	for (uint16_t g = 0; g < ok->ngrants; g++)
		if (uses[g] != ok->grant[g].ticket.nslabs)
			return false;
	return true;
}

/*
 * One PLACE of k (<= WIRE_MAX_LEASES) slabs at the registry, redeemed at
 * the donors it names; slab i goes to out[i] (and its copy to rep[i]).
 * On failure nothing stays tracked. Caller holds lock.
 */
static int place_once_locked(struct pool *p, uint32_t k, bool packed, int node,
			     bool replica, struct slab **out, struct slab **rep)
{
	struct wire_msg *req = calloc(1, sizeof(*req));
	struct wire_msg *ok = malloc(sizeof(*ok));
	struct wire_msg *lr = malloc(sizeof(*lr));
	struct slab **gs = calloc(2 * (size_t)k, sizeof(*gs));
	uint32_t base[WIRE_MAX_GRANTS], next[WIRE_MAX_GRANTS] = { 0 };
	const struct wire_place_ok *po;
	char text[WIRE_MSG_MAX];
	uint32_t total = 0;
	int r;

	if (!req || !ok || !lr || !gs) {
		r = -ENOMEM;
		goto out;
	}
	req->type = WIRE_PLACE;
	req->u.place.nslabs = k;
	req->u.place.flags = replica ? WIRE_PLACE_REPLICA : 0;
	req->u.place.node = node;
	r = reg_call_locked(p, req, ok, WIRE_PLACE_OK, text, sizeof(text));
	if (r) {
		if (r == -EDQUOT || r == -ENOSPC)
			pool_log(LOG_INFO, "alloc: registry: %s", text);
		else if (text[0])
			pool_log(LOG_WARNING,
				 "alloc: node=%d refused by registry: %s", node,
				 text);
		goto out;
	}
	po = &ok->u.place_ok;
	if (!place_ok_is_sane(po, k, replica)) {
		pool_log(LOG_ERR, "alloc: registry=%s sent a bad placement",
			 p->reg_addr);
		r = -EPROTO;
		goto out;
	}
	for (uint16_t g = 0; g < po->ngrants; g++) {
		const struct wire_grant *gr = &po->grant[g];
		uint32_t n = gr->ticket.nslabs;
		struct plink *lk;
		uint64_t sent;

		base[g] = total;
		total += n;
		r = donor_link_locked(p, gr, &lk);
		if (r)
			goto out;
		memset(req, 0, sizeof(*req));
		req->type = WIRE_LEASE_GRANT;
		req->u.lease_grant.ticket = gr->ticket;
		sent = mono_ms();
		r = rpc_call(lk->ctl, req, lr, WIRE_LEASE_GRANT_OK,
			     p->timeout_ms, text, sizeof(text));
		if (r) {
			pool_log(r == -ENOSPC || r == -ESTALE ? LOG_INFO
							      : LOG_WARNING,
				 "alloc: donor=%u memd=%s refused a grant "
				 "err=%s %s",
				 gr->donor_id, lk->addr, strerror(-r), text);
			goto out;
		}
		r = leases_take_locked(p, lk, &lr->u.lease_ok, n, packed, node,
				       gs + base[g]);
		if (r)
			goto out;
		extend_validity(lk, sent);
	}
	for (uint32_t i = 0; i < k; i++) {
		const struct wire_layout *l = &po->layout[i];

		out[i] = gs[base[l->primary] + next[l->primary]++];
		if (replica)
			rep[i] = gs[base[l->replica] + next[l->replica]++];
	}
	r = 0;
out:
	if (r && gs) {
		uint32_t m = 0;

		for (uint32_t i = 0; i < total; i++)
			if (gs[i]) {
				unlink_slab_locked(p, gs[i]);
				gs[m++] = gs[i];
			}
		release_locked(p, gs, m);
	}
	free(gs);
	free(lr);
	free(ok);
	free(req);
	return r;
}

/* PLACE of n slabs in batches the protocol allows; a grant that went
 * stale (a donor restarted, a ticket expired) is placed again, once. */
static int place_locked(struct pool *p, uint32_t n, bool packed, int node,
			bool replica, struct slab **out, struct slab **rep)
{
	bool retried = false;

	for (uint32_t done = 0; done < n;) {
		uint32_t k =
			n - done < WIRE_MAX_LEASES ? n - done : WIRE_MAX_LEASES;
		int r = place_once_locked(p, k, packed, node, replica,
					  out + done, rep ? rep + done : NULL);

		if (r == -ESTALE && !retried) {
			retried = true;
			continue;
		}
		if (r)
			return r;
		done += k;
	}
	return 0;
}

/*
 * Leases n slabs for a region of the session (and with replica a second
 * copy of each, on another donor, in rep[]). out[] and rep[] are zeroed
 * by the caller; on failure what is non-NULL there is tracked and the
 * caller drops it. Caller holds lock.
 */
static int lease_any_locked(struct pool *p, uint32_t n, bool packed, int node,
			    bool replica, struct slab **out, struct slab **rep)
{
	if (p->cluster)
		return place_locked(p, n, packed, node, replica, out, rep);
	if (replica)
		return -EOPNOTSUPP;
	return lease_locked(p, p->links, n, packed, node, out);
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

/* s can take n more chunks for a region on node (replica: with a mirror). */
static bool slab_can_pack(struct slab *s, uint32_t n, int node, bool replica)
{
	return s->packed && !s->is_mirror && s->want_node == node &&
	       (s->mirror != NULL) == replica && s->nchunks - s->used >= n &&
	       !link_is_lost(s->link) &&
	       !(s->mirror && link_is_lost(s->mirror->link));
}

/*
 * Packs len bytes into a packed slab of a live link leased for the same
 * node (replica: a slab pair whose both links are live).
 */
static int pack_locked(struct pool *p, uint64_t len, int node, bool replica,
		       struct extent *e)
{
	uint32_t n = (uint32_t)((len + CHUNK_BYTES - 1) / CHUNK_BYTES);
	struct slab *s, *fresh = NULL, *mirror = NULL;
	uint32_t at = UINT32_MAX;
	int r;

	for (s = p->slabs; s; s = s->next) {
		if (!slab_can_pack(s, n, node, replica))
			continue;
		at = first_fit(s, n);
		if (at != UINT32_MAX)
			break;
	}
	if (!s) {
		r = lease_any_locked(p, 1, true, node, replica, &fresh,
				     replica ? &mirror : NULL);
		if (r) {
			struct slab *v[2] = { fresh, mirror };

			drop_slabs_locked(p, v, 2);
			return r;
		}
		s = fresh;
		s->mirror = mirror;
		if (mirror)
			mirror->is_mirror = true;
		at = 0;
	}
	bits_set(s->bits, at, n, true);
	s->used += n;
	e->slab = s;
	e->replica = s->mirror;
	e->off = (uint64_t)at * CHUNK_BYTES;
	e->len = len;
	return 0;
}

/* Frees one extent's space; slabs left empty go into *dead. */
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
	if (e->replica) {
		unlink_slab_locked(p, e->replica);
		dead[(*ndead)++] = e->replica;
	}
}

/* ------------------------------------------------------------------ */
/* public: sessions                                                     */

/* The tenant's name and key (from its secret file). */
static int tenant_init(struct pool *p, const char *tenant, const char *file)
{
	uint8_t *secret;
	char err[256];
	size_t len = strlen(tenant);
	int r;

	for (size_t i = 0; i < len; i++) {
		char c = tenant[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '.' ||
		      c == '-'))
			len = 0; /* not a tenant name */
	}
	if (len == 0 || len >= WIRE_NAME_MAX) {
		pool_log(LOG_ERR,
			 "session: tenant name must be 1-63 of A-Z a-z 0-9 _ "
			 ". -");
		return -EINVAL;
	}
	if (!file || !*file) {
		pool_log(LOG_ERR,
			 "session: tenant=%s needs a secret file "
			 "(LIBPOOL_SECRET_FILE or "
			 "pool_opts.secret_file)",
			 tenant);
		return -EINVAL;
	}
	r = auth_init();
	if (r)
		return r;
	secret = malloc(AUTH_SECRET_MAX);
	if (!secret)
		return -ENOMEM;
	r = auth_read_secret_file(file, secret, err, sizeof(err));
	if (r < 0) {
		pool_log(LOG_ERR, "session: tenant=%s: %s", tenant, err);
		free(secret);
		return r;
	}
	auth_tenant_key(secret, (size_t)r, p->tenant_key);
	explicit_bzero(secret, AUTH_SECRET_MAX);
	free(secret);
	memcpy(p->tenant, tenant, len + 1);
	return 0;
}

static bool fabric_background_default;

void pool_set_fabric_background(bool on)
{
	__atomic_store_n(&fabric_background_default, on, __ATOMIC_RELAXED);
}

bool pool_fabric_is_pending(struct pool *p)
{
	bool pending = false;

	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk && !pending; lk = lk->next)
		pending = __atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE);
	pthread_mutex_unlock(&p->lock);
	return pending;
}

bool pool_fabric_prepare(struct pool *p)
{
	if (pthread_mutex_trylock(&p->lock))
		return false;
	for (struct plink *lk = p->links; lk; lk = lk->next) {
		if (!__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
			continue;
		/* A same-host link moves bytes through slab memfds: its
		 * transfers need no fabric (a slab without a memfd asks
		 * for it when it is used: link_usable()). */
		if (lk->shm_sock >= 0 && !lk->shm_broken)
			continue;
		pthread_mutex_lock(&lk->hb_lock);
		if (!lk->fab_cancel) /* not after pool_fabric_exit() */
			link_fabric_go_locked(lk);
		pthread_mutex_unlock(&lk->hb_lock);
	}
	pthread_mutex_unlock(&p->lock);
	return true;
}

/* Waits for lk's fabric set-up, cancelling it first where nobody waits
 * for it (cancel); p->lock held. */
static void link_fabric_settle(struct plink *lk, bool cancel)
{
	pthread_mutex_lock(&lk->hb_lock);
	/* Asked for ahead of need (pool_fabric_prepare()) and nobody waits
	 * for it: not begun, it never will be; begun, it stops once
	 * libfabric is loaded. */
	if (cancel && !lk->fab_waiters) {
		lk->fab_cancel = true;
		if (!lk->fab_busy)
			lk->fab_go = false;
	}
	while (lk->fab_go && lk->hb_started &&
	       __atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&lk->fab_cond, &lk->hb_lock);
	pthread_mutex_unlock(&lk->hb_lock);
}

void pool_fabric_settle(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk; lk = lk->next)
		link_fabric_settle(lk, false);
	pthread_mutex_unlock(&p->lock);
}

void pool_fabric_exit(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk; lk = lk->next)
		link_fabric_settle(lk, true);
	pthread_mutex_unlock(&p->lock);
}

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
	p->fabric_background =
		__atomic_load_n(&fabric_background_default, __ATOMIC_RELAXED);
	p->failover_ms = REG_FAILOVER_MS;
	env = getenv("LIBPOOL_REGISTRY_FAILOVER_MS");
	if (env && *env) {
		char *end;
		unsigned long v = strtoul(env, &end, 10);

		if (*end || v > 3600000) {
			pool_log(
				LOG_ERR,
				"session: LIBPOOL_REGISTRY_FAILOVER_MS='%s' is "
				"not 0 to 3600000 (ms)",
				env);
			free(p);
			return -EINVAL;
		}
		p->failover_ms = (uint32_t)v;
	}
	p->shm = true;
	env = getenv("LIBPOOL_SHM");
	if (env && *env) {
		if (!strcmp(env, "off")) {
			p->shm = false;
		} else if (!strcmp(env, "map")) {
			p->shm_map = true;
		} else if (strcmp(env, "auto")) {
			pool_log(
				LOG_ERR,
				"session: LIBPOOL_SHM='%s' is not auto, map or "
				"off",
				env);
			free(p);
			return -EINVAL;
		}
	}
	/* Off by default beside the preload shim (its exported mark): the
	 * mappings' pages would count in the RSS it bounds (docs/kv.md). */
	p->kv_map = !dlsym(RTLD_DEFAULT, "tidepool_preload");
	env = getenv("LIBPOOL_KV_MAP");
	if (env && *env) {
		if (!strcmp(env, "off") || !strcmp(env, "0")) {
			p->kv_map = false;
		} else if (!strcmp(env, "on") || !strcmp(env, "1")) {
			p->kv_map = true;
		} else {
			pool_log(
				LOG_ERR,
				"session: LIBPOOL_KV_MAP='%s' is not on or off",
				env);
			free(p);
			return -EINVAL;
		}
	}
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

	if (!o.tenant)
		o.tenant = getenv("LIBPOOL_TENANT");
	if (!o.secret_file)
		o.secret_file = getenv("LIBPOOL_SECRET_FILE");
	if (o.tenant && *o.tenant) {
		r = tenant_init(p, o.tenant, o.secret_file);
		if (!r)
			r = reg_connect_locked(p);
		if (r)
			goto fail;
		p->cluster = true;
	} else {
		if (strchr(p->addr, ',')) {
			pool_log(LOG_ERR,
				 "session: %s is a list of registries; a "
				 "session without a tenant takes one memd",
				 p->addr);
			r = -EINVAL;
			goto fail;
		}
		r = link_open(p, p->addr, NULL, &lk);
		if (r)
			goto fail;
		link_publish_locked(p, lk);
	}
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
	/* Attached objects (KV handles) go first: they use the links. */
	while (p->attached) {
		struct pool_attached *a = p->attached;

		p->attached = a->next;
		a->destroy(a);
	}
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
	rpc_close(p->reg);
	explicit_bzero(p->tenant_key, sizeof(p->tenant_key));
	explicit_bzero(p->pass_key, sizeof(p->pass_key));
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
	return pool_alloc_ex(p, len, node, 0, out);
}

int pool_alloc_ex(struct pool *p, size_t len, int node, unsigned flags,
		  struct pool_region **out)
{
	bool replica = flags & POOL_ALLOC_REPLICA;
	struct slab **got = NULL, **rgot = NULL;
	struct pool_region *reg;
	uint64_t full, rem;
	uint32_t n;
	int r = 0;

	if (!p || !out)
		return -EINVAL;
	*out = NULL;
	if (len == 0 || node < WIRE_NODE_ANY || node >= WIRE_NODE_MAX ||
	    (flags & ~POOL_ALLOC_REPLICA))
		return -EINVAL;
	if (replica && !p->cluster)
		return -EOPNOTSUPP; /* one memd: no second donor */
	/* Only a lost session stops an allocation: the grant itself renews
	 * the session's leases. A cluster session places on donors that
	 * are up, whatever happened to others. */
	if (!p->cluster && link_is_lost(p->links))
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
	if (full) {
		got = calloc(full, sizeof(*got));
		if (replica)
			rgot = calloc(full, sizeof(*rgot));
	}
	if (!reg || (full && !got) || (full && replica && !rgot)) {
		free(reg);
		free(got);
		free(rgot);
		return -ENOMEM;
	}
	reg->size = len;
	reg->nextents = n;
	reg->replicated = replica;
	pthread_mutex_lock(&p->lock);
	if (full) {
		r = lease_any_locked(p, (uint32_t)full, false, node, replica,
				     got, rgot);
		if (r) {
			/* What was tracked before the failure goes back. */
			drop_slabs_locked(p, got, full);
			if (rgot)
				drop_slabs_locked(p, rgot, full);
			goto unlock;
		}
		for (uint64_t i = 0; i < full; i++) {
			reg->ext[i].slab = got[i];
			reg->ext[i].replica = rgot ? rgot[i] : NULL;
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
		r = pack_locked(p, rem, node, replica, &reg->ext[full]);
		if (r && full) {
			drop_slabs_locked(p, got, full);
			if (rgot)
				drop_slabs_locked(p, rgot, full);
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
	free(rgot);
	if (r) {
		free(reg);
		pool_log(LOG_INFO, "alloc: len=%zu node=%d flags=%#x err=%s",
			 len, node, flags, strerror(-r));
		return r;
	}
	*out = reg;
	return 0;
}

int pool_free(struct pool *p, struct pool_region *reg)
{
	struct slab *dead_inline[16], **dead = dead_inline;
	uint32_t ndead = 0;
	int r = 0;

	if (!reg)
		return 0;
	if (!p)
		return -EINVAL;
	if (reg->nextents > 8) {
		dead = calloc(2 * (size_t)reg->nextents, sizeof(*dead));
		if (!dead)
			return -ENOMEM;
	}
	pthread_mutex_lock(&p->lock);
	for (uint32_t i = 0; i < reg->nextents; i++)
		unpack_locked(p, &reg->ext[i], dead, &ndead);
	if (ndead) {
		r = release_locked(p, dead, ndead);
		links_reap_locked(p);
	}
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

/*
 * One piece through the slab's memfd (same-host link): copied before
 * this returns, so the piece is complete at once. A revoked slab's old
 * file reads zeros and refuses writes (EPERM): -ESTALE; but the lease's
 * validity is checked first, as for RMA, so a revoked lease is not read.
 */
static int shm_piece(struct pool *p, struct fab_op *f, const struct slab *s,
		     uint64_t at, uint8_t *b, uint64_t len, bool write,
		     uint64_t *now)
{
	struct pollfd pfd = { .fd = s->link->shm_sock, .events = POLLRDHUP };
	int r = link_leases_usable(s->link, now);

	if (r)
		return r;
	/* Over the fabric a dead memd fails the next transfer; here
	 * nothing would: its socket's hang-up is what says so. */
	if (poll(&pfd, 1, 0) > 0) {
		link_fail(s->link, -ENOTCONN,
			  "memd closed its same-host socket");
		return -ENOTCONN;
	}
	if (!write && s->map)
		memcpy(b, s->map + at, len);
	for (uint64_t done = !write && s->map ? len : 0; done < len;) {
		ssize_t n = write ? pwrite(s->fd, b + done, len - done,
					   (off_t)(at + done))
				  : pread(s->fd, b + done, len - done,
					  (off_t)(at + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n == 0 || errno == EPERM ? -ESTALE : -errno;
			break;
		}
		done += (uint64_t)n;
	}
	if (!r)
		__atomic_add_fetch(&p->st_shm_bytes, len, __ATOMIC_RELAXED);
	f->arg = s->link;
	f->status = r;
	__atomic_store_n(&f->complete, 1, __ATOMIC_RELEASE);
	return 0;
}

/*
 * Posts one piece of a paired op to slab s (at its offset at) as op's
 * next piece. The caller holds *cur's ep_rw (or *cur is NULL); a piece on
 * another link switches to that link's, checking the link first. (The
 * one-copy path in io_start does the same inline.)
 */
static __attribute__((noinline)) int
post_piece(struct pool *p, struct pool_op *op, struct plink **cur, void **desc,
	   uint64_t *now, const struct slab *s, uint64_t at, uint8_t *b,
	   uint64_t len)
{
	struct plink *lk = s->link;
	struct fab_op *f = &op->ops[op->n];
	uint64_t peer, raddr = s->l.base + at;
	int r;

	if (s->fd >= 0 && !(op->write && s->fd_ro)) {
		r = shm_piece(p, f, s, at, b, len, op->write, now);
		if (!r)
			op->n++;
		return r;
	}
	if (lk != *cur) {
		if (*cur)
			pthread_rwlock_unlock(&(*cur)->ep_rw);
		*cur = NULL;
		r = link_usable(lk, now);
		if (r)
			return r;
		pthread_rwlock_rdlock(&lk->ep_rw);
		*cur = lk;
		if (!lk->ep)
			return link_no_ep_err(lk);
		r = op_desc(op, lk, desc);
		if (r)
			return r;
	}
	peer = lk->peer[s->l.endpoint];
	f->arg = lk;
	r = op->write ? fab_ep_write(lk->ep, b, len, *desc, peer, raddr,
				     s->l.key, f, p->timeout_ms)
		      : fab_ep_read(lk->ep, b, len, *desc, peer, raddr,
				    s->l.key, f, p->timeout_ms);
	if (r)
		return r;
	op->n++;
	return 0;
}

/* A piece for a copy that is dead for good: complete, -ENOTCONN. It
 * names no link for piece_status() to fail: the link is lost already,
 * or its fabric was refused, which must not end it (its leases and the
 * same-host path live on, and its other transfers say EPROTO). */
static void dead_piece(struct pool_op *op)
{
	struct fab_op *f = &op->ops[op->n++];

	f->arg = NULL;
	f->status = -ENOTCONN;
	f->complete = 1;
}

/*
 * Whether s can never be reached by this process: its link's fabric was
 * refused (fab_err: FI_OFI_RXM_BUFFER_SIZE differs) and the same-host
 * path does not serve this transfer. For a replicated region that copy
 * is as good as dead: the other one serves (one err line per link).
 */
static bool copy_refused(const struct slab *s, bool write)
{
	struct plink *lk = s->link;

	if (s->fd >= 0 && !(write && s->fd_ro))
		return false;
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		link_fabric_wait(lk);
	return lk->fab_err && link_no_ep_err(lk);
}

/* The copy of e to read: the first whose link is usable and whose
 * fabric was not refused. */
static const struct slab *read_copy(const struct extent *e, uint64_t *now)
{
	if (e->replica &&
	    (link_usable(e->slab->link, now) || copy_refused(e->slab, false)) &&
	    !link_usable(e->replica->link, now) &&
	    !copy_refused(e->replica, false))
		return e->replica;
	return e->slab;
}

static int io_start(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op *op)
{
	struct plink *cur = NULL;
	uint8_t *b = buf;
	void *desc = NULL;
	uint64_t now = 0;
	size_t n, xfer;
	int ret;

	op->p = p;
	op->r = r;
	op->off = off;
	op->heap = false;
	op->write = write;
	op->paired = false;
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
		return link_usable(read_copy(&r->ext[0], &now)->link, &now);
	op->paired = write && r->replicated;
	xfer = __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
	n = count_pieces(r, off, len, xfer) << op->paired;
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
		if (!write && e->replica)
			s = read_copy(e, &now);
		take = e->len - off < len ? e->len - off : len;
		at = e->off + off;
		for (uint64_t done = 0; done < take;) {
			uint64_t piece =
				take - done < xfer ? take - done : xfer;

			if (!op->paired) {
				/* The common case, kept lean: one copy. */
				struct fab_op *f = &op->ops[op->n];
				uint64_t raddr = s->l.base + at + done;

				if (s->fd >= 0 && !(write && s->fd_ro)) {
					ret = shm_piece(p, f, s, at + done, b,
							piece, write, &now);
					if (ret)
						goto unlock;
					op->n++;
					b += piece;
					done += piece;
					continue;
				}
				if (s->link != cur) {
					if (cur)
						pthread_rwlock_unlock(
							&cur->ep_rw);
					cur = NULL;
					ret = link_usable(s->link, &now);
					if (ret)
						goto unlock;
					cur = s->link;
					pthread_rwlock_rdlock(&cur->ep_rw);
					if (!cur->ep) {
						ret = link_no_ep_err(cur);
						goto unlock;
					}
					ret = op_desc(op, cur, &desc);
					if (ret)
						goto unlock;
				}
				f->arg = cur;
				ret = write ? fab_ep_write(
						      cur->ep, b, piece, desc,
						      cur->peer[s->l.endpoint],
						      raddr, s->l.key, f,
						      p->timeout_ms)
					    : fab_ep_read(
						      cur->ep, b, piece, desc,
						      cur->peer[s->l.endpoint],
						      raddr, s->l.key, f,
						      p->timeout_ms);
				if (ret)
					goto unlock;
				op->n++;
			} else {
				for (int c = 0; c < 2; c++) {
					const struct slab *cs =
						c ? e->replica : e->slab;

					if (link_is_lost(cs->link) ||
					    copy_refused(cs, true)) {
						dead_piece(op);
						continue;
					}
					ret = post_piece(p, op, &cur, &desc,
							 &now, cs, at + done, b,
							 piece);
					if (ret)
						goto unlock;
				}
			}
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

/* The status of one piece; a transport error fails its link. */
static int piece_status(struct fab_op *f)
{
	int s = f->status;

	if (!s)
		return 0;
	s = map_status(s);
	if (is_transport_error(s)) {
		struct plink *lk = f->arg;

		/* Every later call on that link must fail fast too, not
		 * only the ones that reach the dead connection. */
		if (lk && !link_is_lost(lk))
			link_fail(lk, -ENOTCONN, "transfer failed");
		s = -ENOTCONN;
	}
	return s;
}

/*
 * The result of a completed op. A paired range is written when one copy
 * was and the other is dead for good (its link failed, or its fabric was
 * refused: copy_refused(); both -ENOTCONN); any other failure of a copy
 * is the op's error, as the copies may differ.
 */
static int op_settle(struct pool_op *op)
{
	int r = 0;

	if (!op->paired) {
		for (size_t i = 0; i < op->n; i++) {
			int s = piece_status(&op->ops[i]);

			if (s && !r)
				r = s;
		}
		return r;
	}
	for (size_t i = 0; i + 1 < op->n; i += 2) {
		int a = piece_status(&op->ops[i]);
		int b = piece_status(&op->ops[i + 1]);
		int e;

		if (!a && !b)
			continue;
		if ((!a && b == -ENOTCONN) || (!b && a == -ENOTCONN))
			continue;
		e = a && a != -ENOTCONN	  ? a
		    : b && b != -ENOTCONN ? b
					  : -ENOTCONN;
		if (!r)
			r = e;
	}
	return r;
}

/*
 * Starts op again after a copy of a replicated region was lost: the
 * start picks the live copies. Returns 0 (op in flight again) or the
 * error; op->heap is kept. At most IO_TRIES starts in all.
 */
static int io_restart(struct pool *p, struct pool_op *op)
{
	bool heap = op->heap;
	int r = -ENOTCONN;

	while (r == -ENOTCONN && op->tries < IO_TRIES) {
		unsigned tries = op->tries + 1;

		r = io_start(p, op->r, op->off, op->buf, op->bytes, op->write,
			     op);
		op->tries = tries;
	}
	op->heap = heap;
	return r;
}

static void io_count(struct pool *p, const struct pool_op *op, int r)
{
	__atomic_add_fetch(&p->st_ops, 1, __ATOMIC_RELAXED);
	if (r)
		__atomic_add_fetch(&p->st_errors, 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(op->write ? &p->st_written : &p->st_read,
				   op->bytes, __ATOMIC_RELAXED);
}

/*
 * Completes op (waited or failed): result, stats, resources. With again
 * (a caller that can wait once more), a replicated region's op that lost
 * a copy starts again on the live ones: then *again is true and op is in
 * flight.
 */
static __attribute__((noinline)) int
io_finish_restart(struct pool *p, struct pool_op *op, bool *again)
{
	bool heap = op->heap;
	int r;

	op->heap = false;
	op_release(op);
	op->heap = heap;
	r = io_restart(p, op);
	if (!r) {
		*again = true;
		return 0;
	}
	/* Nothing in flight, nothing held: io_start released it. */
	io_count(p, op, r);
	if (heap)
		free(op);
	return r;
}

static int io_finish(struct pool *p, struct pool_op *op, bool *again)
{
	int r = op_settle(op);

	if (__builtin_expect(r == -ENOTCONN, 0)) {
		pool_log(LOG_WARNING, "io: transfer err=%s", strerror(-r));
		if (again && op->r->replicated && op->tries < IO_TRIES)
			return io_finish_restart(p, op, again);
	}
	io_count(p, op, r);
	op_release(op);
	return r;
}

/* Starts an op; a replicated region retries on its live copies. */
static int io_begin(struct pool *p, struct pool_region *r, uint64_t off,
		    void *buf, size_t len, bool write, struct pool_op *op)
{
	int ret;

	op->tries = 1;
	ret = io_start(p, r, off, buf, len, write, op);
	if (ret == -ENOTCONN && r && r->replicated)
		ret = io_restart(p, op);
	return ret;
}

/* Waits for op and finishes it, restarting as io_finish says. */
static int io_wait(struct pool *p, struct pool_op *op, int timeout_ms)
{
	for (;;) {
		bool again = false;
		int r;

		if (op_wait_all(op, timeout_ms) == -ETIMEDOUT)
			return -ETIMEDOUT;
		r = io_finish(p, op, &again);
		if (!again)
			return r;
	}
}

static int io_sync(struct pool *p, struct pool_region *r, uint64_t off,
		   void *buf, size_t len, bool write)
{
	struct pool_op op;
	int ret = io_begin(p, r, off, buf, len, write, &op);

	if (ret)
		return ret;
	for (;;) {
		bool again = false;

		ret = io_wait(p, &op, p->timeout_ms);
		if (ret != -ETIMEDOUT)
			return ret;
		/* Closing the stuck links' endpoints completes the op; a
		 * replicated region then goes on from its live copies. */
		op_fail_pending(&op, "transfer timed out");
		ret = io_finish(p, &op, &again);
		if (!again)
			return ret == -ENOTCONN ? -ETIMEDOUT : ret;
	}
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
	ret = io_begin(p, r, off, buf, len, write, op);
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
	return io_wait(p, op, timeout_ms);
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
	st->heartbeats = p->hb_reaped;
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
		return "protocol error talking to memd, or memd's fabric "
		       "refuses this process (FI_OFI_RXM_BUFFER_SIZE differs: "
		       "LIBPOOL_LOG=err names both values)";
	case -EACCES:
		return "authentication failed or not allowed (tenant, secret)";
	case -EDQUOT:
		return "the tenant's quota does not allow this allocation";
	case -EOPNOTSUPP:
		return "not supported by this session (replicas need a "
		       "cluster)";
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

bool pool_session_is_cluster(const struct pool *p)
{
	return p->cluster;
}

int pool_region_copy(const struct pool_region *r, uint32_t i, unsigned copy,
		     uint32_t *donor_id, const char **addr)
{
	const struct slab *s;

	if (i >= r->nextents || copy > 1)
		return -ERANGE;
	s = copy ? r->ext[i].replica : r->ext[i].slab;
	if (!s)
		return -ENOENT;
	*donor_id = s->link->donor_id;
	*addr = s->link->addr;
	return 0;
}

uint32_t pool_session_nlinks(struct pool *p)
{
	uint32_t n = 0;

	pthread_mutex_lock(&p->lock);
	for (struct plink *lk = p->links; lk; lk = lk->next)
		n++;
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t pool_session_links_reaped(struct pool *p)
{
	uint64_t n;

	pthread_mutex_lock(&p->lock);
	n = p->links_reaped;
	pthread_mutex_unlock(&p->lock);
	return n;
}

int64_t pool_session_pass_left_ms(struct pool *p, bool at_last_open)
{
	int64_t left;

	pthread_mutex_lock(&p->lock);
	left = at_last_open ? p->pass_left_at_open_ms
			    : (int64_t)p->pass_until_ms - (int64_t)mono_ms();
	pthread_mutex_unlock(&p->lock);
	return left;
}

/* ------------------------------------------------------------------ */
/* links for other modules of libpool (the KV tier)                     */

void pool_attach(struct pool *p, struct pool_attached *a)
{
	pthread_mutex_lock(&p->lock);
	a->next = p->attached;
	p->attached = a;
	pthread_mutex_unlock(&p->lock);
}

int pool_timeout_ms(const struct pool *p)
{
	return p->timeout_ms;
}

uint64_t pool_slab_bytes(const struct pool *p)
{
	return p->slab_bytes;
}

size_t pool_xfer_bytes(struct pool *p)
{
	return __atomic_load_n(&p->xfer_bytes, __ATOMIC_RELAXED);
}

int pool_donors(struct pool *p, struct wire_msg *rep)
{
	struct wire_msg *req;
	char text[WIRE_MSG_MAX];
	int r;

	if (!p->cluster)
		return -EOPNOTSUPP;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	text[0] = '\0';
	pthread_mutex_lock(&p->lock);
	/* protocol 5: the list with its membership sequence (docs/kv.md);
	 * a registry failed over to that speaks less refuses it once
	 * (EPROTO), and the next call asks as that one's HELLO_OK says */
	req->type = p->reg_hello.proto >= 5 ? WIRE_MEMBERS : WIRE_DONORS;
	r = reg_call_locked(p, req, rep, req->type | 0x80, text, sizeof(text));
	pthread_mutex_unlock(&p->lock);
	if (r)
		pool_log(LOG_WARNING, "kv: %s at registry=%s err=%s %s",
			 wire_type_name(req->type), p->addr, strerror(-r),
			 text);
	free(req);
	return r;
}

/* STATUS over lk into *st (name and addr already set). */
static void link_status(struct plink *lk, struct wire_msg *req,
			struct wire_msg *rep, struct pool_memd_status *st)
{
	const struct wire_status_ok *ok = &rep->u.status_ok;

	memset(req, 0, sizeof(*req));
	req->type = WIRE_STATUS;
	st->err = pool_link_call(lk, req, rep, WIRE_STATUS_OK, NULL, 0);
	if (st->err)
		return;
	st->epoch = ok->epoch;
	st->uptime_ms = ok->uptime_ms;
	st->donated_bytes = ok->donated_bytes;
	st->slab_bytes = ok->slab_bytes;
	st->slabs_total = ok->slabs_total;
	st->slabs_free = ok->slabs_free;
	st->slabs_leased = ok->slabs_leased;
	st->slabs_reclaiming = ok->slabs_reclaiming;
	st->sessions = ok->sessions;
	st->draining = !!(ok->flags & WIRE_STATUS_DRAINING);
	st->hugepages = !!(ok->flags & WIRE_STATUS_HUGEPAGES);
}

ssize_t pool_get_status(struct pool *p, struct pool_memd_status *st, size_t max)
{
	struct wire_msg *req, *rep, *don = NULL;
	struct plink *lk;
	ssize_t n = 1;
	int r;

	if (!p || (!st && max))
		return -EINVAL;
	req = malloc(sizeof(*req));
	rep = malloc(sizeof(*rep));
	if (!req || !rep) {
		n = -ENOMEM;
		goto out;
	}
	if (!p->cluster) {
		r = pool_link_get(p, 0, 0, NULL, &lk);
		if (r) {
			n = r;
			goto out;
		}
		if (max) {
			memset(st, 0, sizeof(*st));
			snprintf(st->addr, sizeof(st->addr), "%s",
				 pool_link_addr(lk));
			link_status(lk, req, rep, st);
		}
		pool_link_put(lk);
		goto out;
	}
	don = malloc(sizeof(*don));
	if (!don) {
		n = -ENOMEM;
		goto out;
	}
	r = pool_donors(p, don);
	if (r) {
		n = r;
		goto out;
	}
	n = don->u.donors_ok.count;
	for (size_t i = 0; i < (size_t)n && i < max; i++) {
		const struct wire_donor_entry *d = &don->u.donors_ok.donor[i];

		memset(&st[i], 0, sizeof(st[i]));
		snprintf(st[i].name, sizeof(st[i].name), "%s", d->name);
		snprintf(st[i].addr, sizeof(st[i].addr), "%s", d->addr);
		r = pool_link_get(p, d->donor_id, d->epoch, d->addr, &lk);
		if (r) {
			st[i].err = r;
			continue;
		}
		link_status(lk, req, rep, &st[i]);
		pool_link_put(lk);
	}
out:
	free(don);
	free(req);
	free(rep);
	return n;
}

int pool_link_get(struct pool *p, uint32_t donor_id, uint64_t epoch,
		  const char *addr, struct plink **out)
{
	int r;

	*out = NULL;
	pthread_mutex_lock(&p->lock);
	if (!p->cluster) {
		r = link_is_lost(p->links) ? -ENOTCONN : 0;
		if (!r)
			*out = p->links;
	} else {
		r = donor_link_open_locked(p, donor_id, epoch, addr, out);
	}
	if (!r)
		(*out)->refs++; /* the caller's, until pool_link_put */
	pthread_mutex_unlock(&p->lock);
	return r;
}

void pool_link_hold(struct plink *lk)
{
	struct pool *p = lk->p;

	pthread_mutex_lock(&p->lock);
	lk->refs++;
	pthread_mutex_unlock(&p->lock);
}

void pool_link_put(struct plink *lk)
{
	struct pool *p;

	if (!lk)
		return;
	p = lk->p;
	pthread_mutex_lock(&p->lock);
	if (lk->refs == 0)
		pool_log(LOG_ERR, "session: link memd=%s put with no reference",
			 lk->addr);
	else if (--lk->refs == 0 && link_is_lost(lk))
		links_reap_locked(p); /* may free lk */
	pthread_mutex_unlock(&p->lock);
}

bool pool_link_is_lost(struct plink *lk)
{
	return link_is_lost(lk);
}

void pool_link_fail(struct plink *lk, int err, const char *why)
{
	link_fail(lk, err, why);
}

uint32_t pool_link_tenant_id(const struct plink *lk)
{
	return lk->tenant_id;
}

uint16_t pool_link_nendpoints(const struct plink *lk)
{
	return lk->nendpoints;
}

bool pool_link_is_same_host(const struct plink *lk)
{
	return lk->shm_sock >= 0;
}

uint16_t pool_link_proto(const struct plink *lk)
{
	return lk->proto;
}

const char *pool_link_addr(const struct plink *lk)
{
	return lk->addr;
}

int pool_link_call(struct plink *lk, struct wire_msg *req, struct wire_msg *rep,
		   int expect, char *text, size_t textlen)
{
	int r;

	if (link_is_lost(lk))
		return -ENOTCONN;
	r = rpc_call(lk->ctl, req, rep, expect, lk->p->timeout_ms, text,
		     textlen);
	if (r == -ENOTCONN || r == -EPROTO)
		link_fail(lk, -ENOTCONN, "control connection lost");
	else if (r == -ETIMEDOUT)
		link_fail(lk, -ETIMEDOUT, "request timed out");
	return r;
}

/* What a failed call does to its link. */
static int link_call_failed(struct plink *lk, int r)
{
	if (r == -ENOTCONN || r == -EPROTO)
		link_fail(lk, -ENOTCONN, "control connection lost");
	else if (r == -ETIMEDOUT)
		link_fail(lk, -ETIMEDOUT, "request timed out");
	return r;
}

int pool_link_send(struct plink *lk, struct wire_msg *req)
{
	if (link_is_lost(lk))
		return -ENOTCONN;
	return link_call_failed(lk, rpc_send(lk->ctl, req, lk->p->timeout_ms));
}

int pool_link_recv(struct plink *lk, struct wire_msg *rep, int expect,
		   char *text, size_t textlen)
{
	return link_call_failed(lk,
				rpc_recv(lk->ctl, rep, expect, text, textlen));
}

int pool_link_mr(struct plink *lk, void *buf, size_t len, struct fab_mr **mr)
{
	int r = -ENOTCONN;

	*mr = NULL;
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		link_fabric_wait(lk);
	if (!(lk->mr_mode & FAB_MR_LOCAL))
		return 0;
	pthread_rwlock_rdlock(&lk->ep_rw);
	if (lk->ep)
		r = fab_mr_reg(lk->fd, lk->ep, buf, len, FAB_ACCESS_LOCAL, 0,
			       mr);
	else
		r = link_no_ep_err(lk);
	pthread_rwlock_unlock(&lk->ep_rw);
	return r;
}

/*
 * The read-only mapping KV gets copy from (LIBPOOL_KV_MAP, on by
 * default), or NULL: pread. Why a mapping here when pool_read's default
 * is pread: docs/kv.md, "Gets through a mapping". Only what shm_map_ro
 * maps: a memfd slab of the slab's size (sealed against shrinking, so a
 * copy never faults with SIGBUS); a shm_dir file is neither sealed nor
 * slow to pread (2 MiB pages). After the store gives the slab back,
 * memd's punch leaves zeros in the mapping, which fail the block's
 * checks: a miss, as with the kept descriptor.
 */
static const uint8_t *kvshm_map(struct plink *lk, int fd)
{
	if (fd < 0 || !lk->p->kv_map ||
	    (fcntl(fd, F_GETFL) & O_ACCMODE) != O_RDONLY)
		return NULL; /* a reservation's file: writes only */
	return shm_map_ro(fd, lk->p->slab_bytes);
}

/* Closes KV file entry e (its mapping, its descriptor). Caller holds
 * kvshm_rw for writing, or is link_close. */
static void kvshm_drop(struct plink *lk, struct kvshm *e)
{
	if (e->used && e->map)
		munmap((void *)e->map, lk->p->slab_bytes);
	if (e->used && e->fd >= 0)
		close(e->fd);
	e->used = false;
	e->map = NULL;
}

/* The KV file entry of (endpoint, rkey), or NULL. Caller holds
 * kvshm_rw. */
static struct kvshm *kvshm_find(struct plink *lk, uint16_t endpoint,
				uint64_t rkey)
{
	for (uint32_t i = 0; i < KVSHM_MAX; i++) {
		struct kvshm *e = &lk->kvshm[i];

		if (e->used && e->rkey == rkey && e->endpoint == endpoint)
			return e;
	}
	return NULL;
}

/* Asks memd for the file of the KV slab behind (endpoint, rkey) and
 * keeps it (or its refusal). Caller holds kvshm_rw for writing. */
static void kvshm_fetch_locked(struct plink *lk, uint16_t endpoint,
			       uint64_t rkey)
{
	struct wire_shm_req q = { .op = WIRE_SHM_KV,
				  .session_id = lk->session_id,
				  .rkey = rkey,
				  .endpoint = endpoint };
	struct wire_shm_rep rep;
	struct kvshm *e;
	int fd = -1, r;

	if (lk->kvshm_broken || kvshm_find(lk, endpoint, rkey))
		return;
	r = shm_call(lk, &q, &rep, &fd);
	if (!r && (rep.err || fd < 0)) {
		if (fd >= 0)
			close(fd);
		fd = -1;
		pool_log(LOG_DEBUG,
			 "kv: memd=%s endpoint=%u over the fabric: the KV "
			 "slab's file was refused (%s)",
			 lk->addr, endpoint,
			 strerror(rep.err ? rep.err : EPROTO));
	}
	if (r) {
		lk->kvshm_broken = true; /* out of step: ask no more */
		pool_log(LOG_WARNING,
			 "kv: memd=%s KV over the fabric: same-host socket "
			 "failed (%s)",
			 lk->addr, strerror(-r));
		return;
	}
	e = &lk->kvshm[lk->kvshm_next];
	lk->kvshm_next = (lk->kvshm_next + 1) % KVSHM_MAX;
	kvshm_drop(lk, e);
	*e = (struct kvshm){ .rkey = rkey,
			     .map = kvshm_map(lk, fd),
			     .base = rep.base,
			     .fd = fd,
			     .endpoint = endpoint,
			     .used = true,
			     .ro = fd >= 0 && (fcntl(fd, F_GETFL) &
					       O_ACCMODE) == O_RDONLY };
}

void pool_link_kv_shm_forget(struct plink *lk)
{
	pthread_rwlock_wrlock(&lk->kvshm_rw);
	for (uint32_t i = 0; i < KVSHM_MAX; i++)
		kvshm_drop(lk, &lk->kvshm[i]);
	pthread_rwlock_unlock(&lk->kvshm_rw);
}

/*
 * A KV transfer through the KV slab's file (same-host link): done
 * before this returns, as shm_piece does for leases. 1: not on this
 * path (no same-host socket, memd refused the key, a write through a
 * read-only file): the caller posts it over the fabric. The location
 * stays memd's to check: only a key it gave this session's tenant
 * yields a file, and the block's header and checksum are verified after
 * the read exactly as after RMA.
 */
static int kv_shm_xfer(struct plink *lk, bool write, void *buf, size_t len,
		       uint16_t endpoint, uint64_t raddr, uint64_t rkey,
		       struct fab_op *f)
{
	struct pollfd pfd = { .fd = lk->shm_sock, .events = POLLRDHUP };
	const struct kvshm *e;
	uint64_t off, slab = lk->p->slab_bytes;
	int r = 0;

	pthread_rwlock_rdlock(&lk->kvshm_rw);
	e = kvshm_find(lk, endpoint, rkey);
	if (!e) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		pthread_rwlock_wrlock(&lk->kvshm_rw);
		kvshm_fetch_locked(lk, endpoint, rkey);
		pthread_rwlock_unlock(&lk->kvshm_rw);
		pthread_rwlock_rdlock(&lk->kvshm_rw);
		e = kvshm_find(lk, endpoint, rkey);
	}
	if (!e || e->fd < 0 || (write && e->ro)) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		return 1;
	}
	off = raddr - e->base;
	if (raddr < e->base || off > slab || len > slab - off) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		return -EPROTO;
	}
	/* memd's death closes the socket; a pread would not notice */
	if (poll(&pfd, 1, 0) > 0) {
		pthread_rwlock_unlock(&lk->kvshm_rw);
		link_fail(lk, -ENOTCONN, "memd closed its same-host socket");
		return -ENOTCONN;
	}
	/* A copy from a mapping (kvshm_map) may race memd's punch or a
	 * block's reuse: zeros or other bytes, which the get's checks
	 * refuse, as they refuse those of a pread. */
	if (!write && e->map)
		memcpy(buf, e->map + off, len);
	for (size_t done = !write && e->map ? len : 0; done < len;) {
		ssize_t n = write ? pwrite(e->fd, (uint8_t *)buf + done,
					   len - done, (off_t)(off + done))
				  : pread(e->fd, (uint8_t *)buf + done,
					  len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n == 0 || errno == EPERM ? -ESTALE : -errno;
			break;
		}
		done += (size_t)n;
	}
	pthread_rwlock_unlock(&lk->kvshm_rw);
	if (!r)
		__atomic_add_fetch(&lk->p->st_shm_bytes, len, __ATOMIC_RELAXED);
	f->status = r;
	__atomic_store_n(&f->complete, 1, __ATOMIC_RELEASE);
	return 0;
}

int pool_link_post(struct plink *lk, bool write, void *buf, size_t len,
		   void *desc, uint16_t endpoint, uint64_t raddr, uint64_t rkey,
		   struct fab_op *f)
{
	int r = -ENOTCONN;

	f->arg = lk;
	if (endpoint >= lk->nendpoints)
		return -EPROTO;
	if (lk->shm_sock >= 0) {
		if (link_is_lost(lk))
			return -ENOTCONN;
		r = kv_shm_xfer(lk, write, buf, len, endpoint, raddr, rkey, f);
		if (r != 1)
			return r;
		r = -ENOTCONN;
	}
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		link_fabric_wait(lk);
	if (link_is_lost(lk))
		return -ENOTCONN;
	pthread_rwlock_rdlock(&lk->ep_rw);
	if (lk->ep)
		r = write ? fab_ep_write(lk->ep, buf, len, desc,
					 lk->peer[endpoint], raddr, rkey, f,
					 lk->p->timeout_ms)
			  : fab_ep_read(lk->ep, buf, len, desc,
					lk->peer[endpoint], raddr, rkey, f,
					lk->p->timeout_ms);
	else
		r = link_no_ep_err(lk);
	pthread_rwlock_unlock(&lk->ep_rw);
	if (is_transport_error(r)) {
		link_fail(lk, -ENOTCONN, "posting a transfer failed");
		r = -ENOTCONN;
	}
	return r;
}

int pool_link_wait(struct plink *lk, struct fab_op *f, int timeout_ms)
{
	int r = 0;

	if (!__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE)) {
		pthread_rwlock_rdlock(&lk->ep_rw);
		if (lk->ep)
			r = fab_op_wait(lk->ep, f, timeout_ms);
		pthread_rwlock_unlock(&lk->ep_rw);
		if (r == -ETIMEDOUT &&
		    !__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
			/* Closing the endpoint completes f: the provider
			 * no longer touches its buffer. */
			link_fail(lk, -ETIMEDOUT, "transfer timed out");
	}
	/* closed meanwhile: fab_ep_close completed it */
	if (!__atomic_load_n(&f->complete, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	return piece_status(f);
}
