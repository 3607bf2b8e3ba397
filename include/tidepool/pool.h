/* SPDX-License-Identifier: MIT */
/*
 * tidepool/pool.h - libpool, the client of a tidepool memory pool.
 *
 * A pool session (struct pool) leases slabs of donors' DRAM and reads and
 * writes them with one-sided RMA. A standalone session talks to one memd.
 * A cluster session (pool_opts.tenant) authenticates as a tenant at the
 * pool's registry, which places allocations on donor memds; the session
 * then holds one link (control connection, fabric endpoint, heartbeat)
 * per donor it uses. Regions (struct pool_region) are byte ranges of any
 * size backed by one or more slabs, possibly on several donors, and with
 * POOL_ALLOC_REPLICA a second copy of each slab on another donor. Every function returns 0 (or a count) on success and a negative
 * errno on failure; pool_strerror() turns it into text.
 *
 * Threads: a struct pool and its regions may be used from any number of
 * threads at once. A region must not be freed while operations on it are
 * in flight (as with free(3)). A struct pool_op belongs to the thread that
 * waits on it. The library runs one thread of its own per memd link
 * ("pool-hb") that renews leases; it prints nothing unless LIBPOOL_LOG is
 * set (err, warning, info, debug: messages go to stderr).
 *
 * Failure: a lost memd turns into errors within a bounded time, never a
 * hang. A failed heartbeat, a transport error on any transfer or a
 * transfer that outlives the session timeout ends that memd's link: its
 * fabric endpoint is closed (so no buffer is touched after the error
 * returns), operations in flight there complete with -ENOTCONN, and every
 * later call that touches memory on that memd fails fast with -ENOTCONN.
 * In a standalone session that is the whole session: close it and connect
 * again. In a cluster session only ranges on the lost donor fail (a
 * replica serves them where one was asked for); other regions keep
 * working and new allocations go to donors that are up. While a lease
 * renewal is overdue (but the link not yet ended) calls on that link also
 * return -ENOTCONN; they work again if the renewal then succeeds.
 *
 * See libpool(3).
 */
#ifndef TIDEPOOL_POOL_H
#define TIDEPOOL_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libpool.so (built with hidden visibility). */
#if defined(__GNUC__)
#define POOL_API __attribute__((visibility("default")))
#else
#define POOL_API
#endif

struct pool;
struct pool_region;
struct pool_op;

struct pool_opts {
	/* memd control address "host:port"; NULL: $LIBPOOL_ADDR, else
	 * "127.0.0.1:7470". */
	const char *addr;
	/* Free-form name shown in memd's logs; NULL: program name + pid. */
	const char *client_name;
	/* Per-operation timeout for RPCs and RMA, ms; 0: 5000. */
	int timeout_ms;
	/* Posted RMA operations in flight per memd link; 0: 64. */
	unsigned max_inflight;
	/* Tenant name for a cluster session; NULL: $LIBPOOL_TENANT; unset
	 * or empty: a standalone session (no authentication). */
	const char *tenant;
	/* File with the tenant's secret (mode 0600 or stricter); NULL:
	 * $LIBPOOL_SECRET_FILE. Needed with a tenant. */
	const char *secret_file;
};

/*
 * Connects to memd and opens a session. opts may be NULL (defaults).
 * Without a tenant the session is standalone: addr is the one memd. With
 * a tenant, addr is the pool's registry: the session authenticates there
 * (challenge-response with the key derived from the secret file; the
 * secret never leaves this host) and checks that the registry knows the
 * key too. Returns 0 and *out, or
 *   -ECONNREFUSED / -EHOSTUNREACH / -ETIMEDOUT  memd not reachable
 *   -ENOTCONN  memd closed the connection without answering
 *   -EBUSY     memd is draining or has too many clients
 *   -EPROTONOSUPPORT  memd speaks no protocol version we do
 *   -EPROTO    memd's reply made no sense
 *   -ENODATA   memd's fabric provider is not available here
 *   -EINVAL    malformed address or options, a tenant without a secret
 *              file or with a bad name, a tenant session at a donor
 *   -EACCES    wrong secret or unknown tenant; the registry could not
 *              prove it knows the tenant's key; without a tenant, a memd
 *              that requires one (set LIBPOOL_TENANT, LIBPOOL_SECRET_FILE)
 *   -EOPNOTSUPP a tenant was given but memd is standalone (no tenants)
 *   -ENOENT / -EPERM  the secret file is missing / readable by others
 *   -ENOMEM    out of memory
 */
POOL_API int pool_connect(const struct pool_opts *opts, struct pool **out);

/*
 * Releases every region's leases (best effort), stops the session's thread
 * and frees it. Regions still allocated are freed. NULL is a no-op.
 * Not thread-safe against other calls on the same pool.
 */
POOL_API void pool_close(struct pool *p);

/*
 * Allocates a region of len bytes (any size > 0). Sizes of half a slab and
 * more get whole slabs of their own; smaller ones are packed into slabs the
 * session already holds. Contents of a new region are unspecified but never
 * another session's data (memd zeroes slabs before leasing them).
 * Returns 0 and *out, or
 *   -EINVAL    len is 0
 *   -ENOSPC    the donor has too few free slabs
 *   -EBUSY     memd is draining
 *   -ENOMEM    local bookkeeping failed
 *   -ENOTCONN  the session is lost
 *   -ETIMEDOUT memd did not answer within the session timeout
 */
POOL_API int pool_alloc(struct pool *p, size_t len, struct pool_region **out);

/*
 * pool_alloc() with the memory on NUMA node `node` of the donor host (the
 * operating system's node number, as numactl shows it), for a memd that
 * splits its donation over nodes (memd.conf(5), numa_nodes); node -1 means
 * any node, and pool_alloc(p, len, out) is pool_alloc_node(p, len, -1,
 * out). Small regions are packed only into slabs leased for the same
 * node argument. Each of memd's nodes is served by its own fabric
 * endpoint, and a region's transfers go to the endpoint of its slabs.
 * Returns 0 and *out, the errors of pool_alloc(), and
 *   -EINVAL    node is below -1 or above 1023, or memd does not serve that
 *              node (memd's reason is logged at level warning, see
 *              LIBPOOL_LOG)
 *   -ENOSPC    that node has too few free slabs (others may have some)
 * Thread-safety: as pool_alloc().
 */
POOL_API int pool_alloc_node(struct pool *p, size_t len, int node,
			     struct pool_region **out);

/*
 * pool_alloc_node() with flags: POOL_ALLOC_REPLICA keeps a second copy of
 * every slab on another donor (cluster sessions only). Writes go to both
 * copies and succeed when at least one live copy was written; a copy
 * whose donor is lost is dead for good, and reads come from the first
 * live copy (falling back to the other when a donor is lost during the
 * read). Quotas count both copies. pool_alloc_node(p, len, node, out) is
 * pool_alloc_ex(p, len, node, 0, out).
 * Returns 0 and *out, the errors of pool_alloc_node(), and
 *   -EINVAL     unknown flags
 *   -EOPNOTSUPP POOL_ALLOC_REPLICA in a standalone session
 *   -EDQUOT     the tenant's quota does not allow len more bytes, even
 *               with none of its KV memory left (the registry's text is
 *               logged at level info); KV memory in the way is evicted
 *               and the allocation placed once it is
 *   -EAGAIN     the registry still asked to place again when the session
 *               stopped retrying it (LIBPOOL_REGISTRY_FAILOVER_MS or the
 *               timeout): a takeover, or KV memory not yet evicted
 *   -ENOSPC     no donor (for a replica: no two donors) has room
 *   -EACCES     a donor refused the session or the grant
 *   -ESTALE     a donor restarted while we placed: try again
 * Thread-safety: as pool_alloc().
 */
#define POOL_ALLOC_REPLICA 0x1u
POOL_API int pool_alloc_ex(struct pool *p, size_t len, int node, unsigned flags,
			   struct pool_region **out);

/* Frees a region; its slabs are released once nothing else lives in them.
 * NULL is a no-op. Returns 0 or -errno (the region is freed regardless). */
POOL_API int pool_free(struct pool *p, struct pool_region *r);

/* Size in bytes the region was allocated with. */
POOL_API size_t pool_region_size(const struct pool_region *r);

/*
 * The NUMA node of the donor host that holds all of r's memory, as memd
 * reported it when it leased the slabs, or -1 when that is not known (memd
 * does no NUMA placement, r is NULL) or r spans slabs on several nodes
 * (possible only for regions from pool_alloc_node(..., -1, ...)). Does not
 * block; any thread.
 */
POOL_API int pool_region_node(const struct pool_region *r);

/*
 * Copies len bytes at offset off of region r into buf (pool_read) or from
 * buf (pool_write). Blocks until done. Returns 0, or
 *   -ERANGE    [off, off+len) is outside the region
 *   -EINVAL    buf is NULL with len > 0
 *   -ENOTCONN  the session is lost (memd gone, a transport error, or the
 *              lease renewal is overdue)
 *   -EIO       the provider failed this transfer (the session goes on)
 *   -ETIMEDOUT the transfer did not finish within the session timeout
 *              (the session is ended: see Failure above)
 */
POOL_API int pool_read(struct pool *p, struct pool_region *r, uint64_t off,
		       void *buf, size_t len);
POOL_API int pool_write(struct pool *p, struct pool_region *r, uint64_t off,
			const void *buf, size_t len);

/*
 * Asynchronous variants: start the transfer and return with a handle in
 * *op; they block only while the session's in-flight window
 * (max_inflight) is full. buf must stay valid until pool_wait() returns a
 * result other than -ETIMEDOUT. Errors at start are returned directly
 * (then no op is created). Each started op must be waited for until it
 * returns such a result, and before pool_close().
 */
POOL_API int pool_read_async(struct pool *p, struct pool_region *r,
			     uint64_t off, void *buf, size_t len,
			     struct pool_op **op);
POOL_API int pool_write_async(struct pool *p, struct pool_region *r,
			      uint64_t off, const void *buf, size_t len,
			      struct pool_op **op);

/*
 * Waits up to timeout_ms (-1: the session timeout) for op. Returns the
 * op's result (0 or -errno as for pool_read; a transfer the provider timed
 * out is -ETIME) and frees op, or -ETIMEDOUT only when it is still running
 * (op stays valid: wait again). A session
 * failure completes every op with an error, so waiting ends.
 */
POOL_API int pool_wait(struct pool *p, struct pool_op *op, int timeout_ms);

/* Non-blocking check: 1 when op is done (then pool_wait returns at once),
 * 0 when still running. */
POOL_API int pool_test(struct pool *p, struct pool_op *op);

struct pool_stats {
	uint64_t slabs_held; /* leased by this session now */
	uint64_t slab_bytes;
	uint64_t regions;
	uint64_t bytes_read, bytes_written;
	uint64_t ops, errors;
	uint64_t heartbeats; /* successful lease renewals, all links */
	uint64_t epoch;	     /* boot epoch of the first memd linked (0: none) */
};
/* Fills *st (a consistent-enough snapshot). Returns 0 or -EINVAL. */
POOL_API int pool_get_stats(struct pool *p, struct pool_stats *st);

/*
 * What one memd answered to STATUS (pool_get_status).
 */
struct pool_memd_status {
	char name[64];	/* donor name ("" for a standalone memd) */
	char addr[128]; /* its control address, "host:port" */
	/* 0: the fields below are its answer; else why it could not be
	 * asked (-ENOTCONN, -ETIMEDOUT, -EACCES, ...): the rest is zero */
	int err;
	uint64_t epoch; /* boot epoch */
	uint64_t uptime_ms;
	uint64_t donated_bytes; /* its whole donation */
	uint64_t slab_bytes;
	uint32_t slabs_total, slabs_free, slabs_leased;
	uint32_t slabs_reclaiming; /* revoked, waiting to be zeroed */
	uint32_t sessions;	   /* client sessions it holds */
	int draining;		   /* 1: takes no new leases */
	int hugepages;		   /* 1: donation on hugetlbfs pages */
};

/*
 * The pool as this session sees it: one entry per memd. A standalone
 * session asks its memd; a cluster session asks the registry for the
 * donors that are up (DONORS) and then each donor, over this session's
 * own link to it (opened, with the donor pass, on first use, as an
 * allocation would). Fills st[0 .. min(count, max)) and returns the
 * count of memds (which may exceed max), or
 *   -EINVAL     p or st NULL with max > 0
 *   -ENOTCONN   the standalone memd is lost; the registry is unreachable
 *   -ENOMEM     out of memory
 *   and the errors of a registry call (pool_connect(3)).
 * A donor that cannot be asked has its err set; it does not fail the
 * call. Blocks for up to the session timeout per memd. Thread-safe.
 */
POOL_API ssize_t pool_get_status(struct pool *p, struct pool_memd_status *st,
				 size_t max);

/* Static text for a negative errno returned by this library. */
POOL_API const char *pool_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif
