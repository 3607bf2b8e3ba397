// SPDX-License-Identifier: MIT
/*
 * libpool/pool_int.h - what the files of libpool's core (tidepool/pool.h)
 * share: the session, link, slab, region and op structures, their
 * limits, and the functions one file calls in another (prefix pl_).
 * Private to libpool/pool*.c; libpool/internal.h is what other modules
 * of libpool, tests and benchmarks see. One concern a file:
 *
 * libpool/pool.c          sessions: connect, close, settings, stats,
 *                         pool_strerror, memd status, session views
 * libpool/pool_link.c     links: open (handshake, AUTH), fabric (also in
 *                         the background), heartbeat, fail, close, reap;
 *                         pool_link_* for the KV tier
 * libpool/pool_shm.c      the same-host path: slab memfds and their
 *                         mappings, the KV tier's files
 * libpool/pool_region.c   leases, packing, alloc and free, region views
 * libpool/pool_cluster.c  cluster sessions: the registry and its
 *                         failover, donor links, placement
 * libpool/pool_io.c       region I/O: pieces, posting, waiting, settling,
 *                         replicated restarts; sync and async
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
 * Failing a link (pl_link_fail) records the error, then takes its ep_rw
 * exclusively and closes its endpoint: every operation still in flight
 * there completes with an error and no buffer is touched afterwards. A
 * caller never holds a link's ep_rw when it fails that link. A failed
 * link stays failed: regions with slabs on it get -ENOTCONN for ranges
 * there; other links are not affected.
 *
 * Reaping (cluster sessions): a failed link wakes its pool-hb thread,
 * which ends. pl_links_reap_locked (at allocation and free) joins ended
 * threads and closes and frees a failed link once nothing refers to it:
 * no slab (lk->nslabs: regions, packed slabs, I/O on them) and no
 * reference another module holds (lk->refs: pool_link_get takes one,
 * pool_link_put drops it and reaps then; kv*.c hold one per donor table
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
#ifndef TP_LIBPOOL_POOL_INT_H
#define TP_LIBPOOL_POOL_INT_H

#include "tidepool/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "fabric/fab.h"
#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "libpool/log.h"
#include "libpool/thread_role.h"

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
#define DEFAULT_KV_STREAMS 1	/* docs/bench/kv.md, "Striped gets" */
#define INLINE_OPS 4
#define IO_TRIES 3 /* starts of one replicated op: one per copy lost, +1 */
/* Get a new donor pass when less than this is left of the old one. */
#define PASS_RENEW_MS 10000

struct pool;

/* One memd we hold a session with. Fields above `next` are set before
 * the link is published in p->links and never change afterwards, except
 * the fabric's (fd, mr_mode, peer) on a link whose fabric is set up in
 * the background (fab_pending, docs/paging.md "Start-up"): its heartbeat
 * thread sets them, and nobody reads them before pl_link_fabric_wait(). */
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
	 * threads in pl_link_fabric_wait() (waiters); the process is exiting
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
	 * is published, closed only by pl_link_close; requests on it under
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
	/* The KV tier's extra streams (LIBPOOL_KV_STREAMS; docs/kv.md,
	 * "Striped gets over tcp"): stream s >= 1 is endpoint xep[s - 1] on
	 * fd, with its own AV (xpeer[s - 1]) and so its own connection to
	 * each memd endpoint. Opened on first use by pool_link_streams
	 * (xtried set then, under ep_rw held exclusively), closed with ep;
	 * read under ep_rw like it. nxep: how many opened. */
	struct fab_ep *xep[POOL_STREAMS_MAX - 1];
	uint64_t xpeer[POOL_STREAMS_MAX - 1][WIRE_MAX_ENDPOINTS];
	unsigned nxep;
	bool xtried;
	/* what closed streams had moved (HEARTBEAT2's totals keep it) */
	struct fab_ep_stats xgone;
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
	/* LIBPOOL_KV_STREAMS: endpoints a KV get stripes a donor's
	 * transfers over on a fabric link (1 .. POOL_STREAMS_MAX) */
	unsigned kv_streams;
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

/* How a link authenticates; NULL: it does not (standalone memd). */
struct link_auth {
	const char *principal;
	const uint8_t *key; /* AUTH_KEY_LEN bytes */
	const uint8_t *pass;
	uint16_t pass_len;
	uint32_t donor_id;
	uint64_t donor_epoch;
};

/* ------------------------------------------------------------------ */
/* small helpers every file uses, inline (the I/O path calls them)      */

static inline uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Copies len bytes between buf and bytes [off, off + len) of a same-host
 * file fd (a slab's memfd, a KV block's): a read from map, the file's
 * read-only mapping, when there is one; else pread/pwrite until done. A
 * revoked file ends early (a read of 0 bytes) or refuses writes (EPERM):
 * -ESTALE; other errors -errno.
 */
static inline int pl_shm_copy(int fd, const uint8_t *map, void *buf,
			      uint64_t len, uint64_t off, bool write)
{
	uint8_t *b = buf;

	if (!write && map) {
		memcpy(b, map + off, len);
		return 0;
	}
	for (uint64_t done = 0; done < len;) {
		ssize_t n = write ? pwrite(fd, b + done, len - done,
					   (off_t)(off + done))
				  : pread(fd, b + done, len - done,
					  (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 || errno == EPERM ? -ESTALE : -errno;
		done += (uint64_t)n;
	}
	return 0;
}

static inline void extend_validity(struct plink *lk, uint64_t sent_ms)
{
	uint64_t v = sent_ms + lk->ttl_ms - lk->margin_ms;
	uint64_t cur = __atomic_load_n(&lk->valid_until_ms, __ATOMIC_RELAXED);

	while (v > cur &&
	       !__atomic_compare_exchange_n(&lk->valid_until_ms, &cur, v, false,
					    __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

static inline bool link_is_lost(struct plink *lk)
{
	return __atomic_load_n(&lk->lost, __ATOMIC_ACQUIRE) != 0;
}

/* Errors that say the path to memd is gone, not just this transfer. */
static inline bool is_transport_error(int err)
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

/* pool_link.c: sleeps until lk's fabric is set up (or failed) */
void pl_link_fabric_wait(struct plink *lk);

/* 0 when lk's leases may be used now, else -ENOTCONN. *now caches the
 * clock over one operation (0: not read yet). */
static inline __attribute__((always_inline)) int link_usable(struct plink *lk,
							     uint64_t *now)
{
	if (__atomic_load_n(&lk->fab_pending, __ATOMIC_ACQUIRE))
		pl_link_fabric_wait(lk);
	if (__atomic_load_n(&lk->lost, __ATOMIC_ACQUIRE))
		return -ENOTCONN;
	if (!*now)
		*now = mono_ms();
	if (*now >= __atomic_load_n(&lk->valid_until_ms, __ATOMIC_ACQUIRE))
		return -ENOTCONN; /* renewal overdue: leases may be gone */
	return 0;
}

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

/* ------------------------------------------------------------------ */
/* pool_link.c                                                          */

void pl_link_fail(struct plink *lk, int err, const char *why);
void pl_rpc_log(void *arg, int level, const char *fmt, ...);
void pl_link_stop_hb(struct plink *lk);
void pl_link_close(struct plink *lk);
int pl_link_no_ep_err(struct plink *lk);
bool pl_handshake_lost(int r);
int pl_ms_left(uint64_t deadline);
bool pl_handshake_retry_wait(uint64_t deadline, unsigned attempt,
			     const char *what, const char *addr, int r);
int pl_link_open(struct pool *p, const char *addr, const struct link_auth *au,
		 struct plink **out);
void pl_link_publish_locked(struct pool *p, struct plink *lk);
void pl_links_reap_locked(struct pool *p);

/* pool_shm.c */
void pl_link_shm_open(struct plink *lk);
const uint8_t *pl_shm_map_ro(int fd, uint64_t len);
int pl_link_shm_slab_fd(struct plink *lk, const struct wire_lease *l);
void pl_kvshm_drop(struct plink *lk, struct kvshm *e);
int pl_kv_shm_xfer(struct plink *lk, bool write, void *buf, size_t len,
		   uint16_t endpoint, uint64_t raddr, uint64_t rkey,
		   struct fab_op *f);

/* pool_region.c */
void pl_slab_free(struct slab *s);
int pl_leases_take_locked(struct pool *p, struct plink *lk,
			  const struct wire_lease_ok *ok, uint32_t k,
			  bool packed, int node, struct slab **out);
int pl_release_locked(struct pool *p, struct slab **v, uint32_t n);
void pl_unlink_slab_locked(struct pool *p, struct slab *s);
/* Unlinks and releases the non-NULL slabs of got[0 .. n-1]. */
void pl_drop_slabs_locked(struct pool *p, struct slab **got, uint64_t n);

/* pool_cluster.c */
int pl_reg_connect_locked(struct pool *p);
int pl_donor_link_open_locked(struct pool *p, uint32_t donor_id, uint64_t epoch,
			      const char *addr, struct plink **out);
int pl_place_locked(struct pool *p, uint32_t n, bool packed, int node,
		    bool replica, struct slab **out, struct slab **rep);

/* pool_io.c */
int pl_piece_status(struct fab_op *f);

#endif
