/* SPDX-License-Identifier: MIT */
/*
 * tidepool/kv.h - the KV tier: a tenant-scoped store of KV-cache blocks
 * in pooled DRAM, keyed by 32-byte keys, shared by every process of a
 * tenant (docs/kv.md, pool_kv(3)).
 *
 * The contract: a get returns exactly the committed bytes for (tenant,
 * key), or a miss. Never torn, stale, another key's or another tenant's
 * bytes. Loss (a donor killed, an eviction without spill) is a miss, not
 * an error.
 *
 * A KV handle (struct pool_kv) lives on a pool session (pool_connect).
 * In a standalone session every key lives on the one memd; in a cluster
 * session a key's home is the donor with the highest rendezvous score
 * XXH3-64(key, seed = XXH3-64(donor name)) among the donors that are up.
 *
 * Calls are batch-first: n keys per call, a status per key, a call-level
 * result (a count, or a negative errno when the call as a whole could not
 * run). Every call has an asynchronous variant that returns an op handle;
 * completions are announced on pool_kv_eventfd(). The synchronous calls
 * run the same operation in the calling thread.
 *
 * Threads: a struct pool_kv may be used from any number of threads at
 * once. An op handle belongs to the thread that waits on it. The handle
 * runs its own worker threads ("pool-kv") for asynchronous operations.
 */
#ifndef TIDEPOOL_KV_H
#define TIDEPOOL_KV_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tidepool/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define POOL_KV_KEY_BYTES 32
/* Largest value a put accepts (memd's default value_max). */
#define POOL_KV_VALUE_MAX (64u << 20)
/* Most keys in one call. */
#define POOL_KV_BATCH_MAX 65536u
/* Default tokens per chunk of pool_kv_prefix_keys (vLLM/LMCache). */
#define POOL_KV_CHUNK_TOKENS 256u

struct pool_kv;
struct pool_kv_op;

struct pool_kv_key {
	uint8_t b[POOL_KV_KEY_BYTES];
};

/*
 * The chained prefix keys of a token sequence (docs/kv.md, "Keys"): salt
 * = BLAKE2b-256("tidepool kv salt v1" | le32 len | tenant | le32 len |
 * model); key 0 = BLAKE2b-256(salt | tokens of chunk 0), key i =
 * BLAKE2b-256(key i-1 | tokens of chunk i), tokens as little-endian u32.
 * Only whole chunks get keys (a trailing partial chunk has none). The
 * same (tenant, model, prefix) gives the same keys in every process;
 * another tenant or model gives other keys. chunk_tokens 0 means 256.
 * tenant and model may be "" but not NULL.
 * Returns the number of keys written to keys[] (at most max: the first
 * max chunks), or -EINVAL (NULL arguments with work to do). Pure; any
 * thread.
 */
POOL_API ssize_t pool_kv_prefix_keys(const char *tenant, const char *model,
				     const uint32_t *tokens, size_t ntokens,
				     size_t chunk_tokens,
				     struct pool_kv_key *keys, size_t max);

struct pool_kv_opts {
	/* Worker threads for the asynchronous calls; 0: 2. At most 64. */
	unsigned nthreads;
	/* Cluster sessions: how often the donor list (DONORS) is fetched
	 * again, ms; 0: 5000. It is also fetched again soon after a donor
	 * link fails. */
	unsigned refresh_ms;
	/* How long memd keeps a read lease (its kv_read_lease); a get
	 * whose reads finish later counts the key as a miss. 0: 2000. */
	unsigned lease_ms;
	/* Copies of each key: 1 (the home only) or 2 (the home and a
	 * replica on the donor with the second-highest rendezvous score);
	 * 0: 1. Cluster sessions with two donors or more up; otherwise one
	 * copy. Every handle of a tenant should use the same number
	 * (pool_kv(3), "Replicas"). */
	unsigned replicas;
	/* The client's model, a hint for memd's capacity reports
	 * (docs/capacity.md): tokens per second its GPU prefills, and KV
	 * bytes per token. Both or neither: 0 and 0 take
	 * LIBPOOL_KV_PREFILL_TOKENS_PER_S and LIBPOOL_KV_BYTES_PER_TOKEN
	 * from the environment, and with those unset send no hint (memd
	 * then uses the tenant's registry model or memd.conf's). At most
	 * POOL_KV_PREFILL_TOKENS_PER_S_MAX and POOL_KV_BYTES_PER_TOKEN_MAX.
	 * Sent to each memd the handle talks to (KV_MODEL, protocol 3;
	 * an older memd gets none). */
	unsigned prefill_tokens_per_s;
	uint64_t bytes_per_token;
};

/* Bounds of pool_kv_opts' model hint (those of memd.conf's keys). */
#define POOL_KV_PREFILL_TOKENS_PER_S_MAX 1000000000u
#define POOL_KV_BYTES_PER_TOKEN_MAX (1ull << 30)

/*
 * Opens a KV handle on session p (opts may be NULL: defaults). In a
 * cluster session it fetches the donor list from the registry. Returns 0
 * and *out, or
 *   -EINVAL     p or out NULL, nthreads over 64, replicas over 2, a
 *               model hint with one of its two fields 0 or either over
 *               its bound (opts or the environment: the library logs
 *               which at LIBPOOL_LOG=err)
 *   -ENOTCONN   the session is lost
 *   -EOPNOTSUPP the registry does not serve DONORS
 *   -ENOMEM     out of memory
 *   and the errors of a registry call (pool_connect(3)).
 * The handle is closed by pool_kv_close, or by pool_close(p).
 */
POOL_API int pool_kv_open(struct pool *p, const struct pool_kv_opts *opts,
			  struct pool_kv **out);

/*
 * Closes kv: waits for its operations in flight, stops its workers and
 * releases what it holds. Later calls on kv return -EBADF (the small
 * handle itself is freed by pool_close of its session). Ops not yet
 * waited for are freed. NULL or an already closed handle: no-op. Not
 * thread-safe against other calls on kv.
 */
POOL_API void pool_kv_close(struct pool_kv *kv);

/*
 * The handle's completion file descriptor (an eventfd, non-blocking,
 * close-on-exec): readable once an asynchronous op has completed since
 * it was last read. read(2) its 8-byte counter to clear it, then test or
 * wait the ops. Owned by kv; do not close it. -EBADF on a closed handle.
 */
POOL_API int pool_kv_eventfd(struct pool_kv *kv);

/*
 * Stores values[i] (lens[i] bytes, 1 .. POOL_KV_VALUE_MAX) under keys[i],
 * for i < n (1 .. POOL_KV_BATCH_MAX). Two-phase on each key's home
 * donor: reserve, RMA write of header + value, commit with XXH3-64 of
 * the value. With two replicas the replica is written and committed
 * before the home commits; status[i] is the home's (pool_kv(3),
 * "Replicas"). status[i] (may be NULL):
 *   0          stored
 *   -EEXIST    already present (puts are idempotent: a key names one
 *              value); counts as stored
 *   -EINVAL    lens[i] is 0 or values[i] NULL
 *   -EMSGSIZE  lens[i] over POOL_KV_VALUE_MAX (or memd's value_max)
 *   -EBUSY     another put of this key is under way
 *   -ENOSPC    the tenant's share on the home donor is full and nothing
 *              can be evicted (all pinned or being read)
 *   -EAGAIN    try again later: the home's memory for it is still
 *              being zeroed (tried again until the handle's timeout),
 *              or the home is out of touch with its registry
 *   -ENOTCONN  the home donor is lost or unreachable
 *   -ETIMEDOUT the put outlived its reservation (memd's kv_reserve_ttl)
 *   -EOPNOTSUPP the KV tier is off on the home donor (kv_share = 0)
 *   -EIO, -EPROTO  a transfer or reply failed
 * Returns how many keys are stored (status 0 or -EEXIST), or
 *   -EBADF   kv is closed
 *   -EINVAL  kv, keys, values or lens NULL; n is 0 or over
 *            POOL_KV_BATCH_MAX
 *   -ENOMEM  out of memory
 */
POOL_API ssize_t pool_kv_put(struct pool_kv *kv, size_t n,
			     const struct pool_kv_key *keys,
			     const void *const *values, const size_t *lens,
			     int *status);

/*
 * Reads keys[i] into bufs[i] (room for caps[i] bytes) for i < n. status[i]:
 *   0        hit: bufs[i] holds exactly the committed value, lens[i] its
 *            length
 *   -ENOENT  miss: absent, evicted, its home donor lost, or any check
 *            failed (header, generation, checksum, a read slower than the
 *            lease); with two replicas, on both copies. The bytes of
 *            bufs[i] are then unspecified (a miss may have been read into
 *            them before a check failed)
 *   -ENOBUFS caps[i] is too small: lens[i] is the value's length
 * Returns the number of hits, or -EBADF / -EINVAL (as put; bufs, caps,
 * lens and status must not be NULL) / -ENOMEM.
 */
POOL_API ssize_t pool_kv_get(struct pool_kv *kv, size_t n,
			     const struct pool_kv_key *keys, void *const *bufs,
			     const size_t *caps, size_t *lens, int *status);

/*
 * Where pool_kv_get_to delivers each value: memory whose address may
 * change until the moment of the copy (a managed runtime's buffers: a
 * Python tensor that another thread may resize), or that the caller
 * must guard while it is written.
 *
 *   begin(arg, i, len)  the address of room for len bytes of keys[i]'s
 *                       value, asked right before libpool copies them
 *                       there; NULL declines the value (status
 *                       -ECANCELED, nothing written).
 *   end(arg, i)         after the copy; called once for every begin that
 *                       did not return NULL, in the same thread, before
 *                       the next begin.
 *
 * Both run in the thread that called pool_kv_get_to, never two at once,
 * and libpool writes the address begin returned only between the two
 * calls: a caller may take a lock (a runtime's global lock) in begin and
 * release it in end. They must not call into kv.
 */
struct pool_kv_sink {
	void *(*begin)(void *arg, size_t i, size_t len);
	void (*end)(void *arg, size_t i);
	void *arg;
	/* out: pool_kv_get_to adds the number of values it delivered out of
	 * its own memory (read over the fabric: one copy more) */
	size_t staged;
};

/*
 * pool_kv_get, but each hit is copied to where sink->begin says at that
 * moment, never written afterwards (caps[i]: the most bytes keys[i] may
 * have; -ENOBUFS above). On a same-host link (docs/kv.md, "The same-host
 * path") the value is copied from memd's mapped slab to its destination
 * once, hashed as it is copied, and checked (headers, checksum, lease)
 * after end: a value that fails a check is a miss, its destination's
 * bytes then unspecified, as with pool_kv_get. Over the fabric the value
 * is read and checked into libpool's own memory first, then copied
 * between begin and end (one copy more). Statuses as pool_kv_get's, and
 * -ECANCELED: begin declined. Returns the number of hits, or -EBADF /
 * -EINVAL (sink, its begin or end, caps, lens or status NULL) / -ENOMEM.
 * Synchronous only.
 */
POOL_API ssize_t pool_kv_get_to(struct pool_kv *kv, size_t n,
				const struct pool_kv_key *keys,
				struct pool_kv_sink *sink, const size_t *caps,
				size_t *lens, int *status);

/*
 * The length of the longest prefix keys[0 .. k) whose every key is
 * present (committed, in memory or spilled; with two replicas, in either
 * copy), one round trip to all home donors at once per 64 keys each. A
 * key on a lost donor is absent. Returns
 * k (0 .. n), or -EBADF / -EINVAL / -ENOMEM. A present key may still miss
 * at a later get (evicted meanwhile).
 */
POOL_API ssize_t pool_kv_exists(struct pool_kv *kv, size_t n,
				const struct pool_kv_key *keys);

/*
 * Deletes keys. status[i] (may be NULL): 0 deleted, -ENOENT absent,
 * -EBUSY a put of it is under way, -ENOTCONN its home is lost. A key being
 * read disappears at once; its memory is freed when the reads end. With
 * two replicas the replica goes first, and a key whose replica could not
 * be deleted (-ENOTCONN, -EBUSY) keeps its home copy too (pool_kv(3),
 * "Replicas").
 * Returns the number deleted, or -EBADF / -EINVAL / -ENOMEM.
 */
POOL_API ssize_t pool_kv_delete(struct pool_kv *kv, size_t n,
				const struct pool_kv_key *keys, int *status);

/*
 * Empties the tenant's KV store: sends KV_CLEAR to every donor of the
 * session (in a pool every donor the registry lists as up, fetched anew;
 * standalone the one memd), each of which drops every key of the
 * tenant's as pool_kv_delete would (a get under way returns its exact
 * bytes or a miss; a put under way fails or its key is gone), pinned
 * keys included, and deletes the tenant's spill files. Other tenants'
 * keys stay. Keys that another thread puts meanwhile may survive.
 * Thread-safe, as every call on a handle; synchronous.
 * Returns 0, or the first -errno of the donors (it still asks the
 * others): -EOPNOTSUPP a memd older than protocol 4, or with the KV tier
 * off; -ENOTCONN a donor unreachable; -EACCES, -EAGAIN as memd answers;
 * -EBADF / -EINVAL (kv closed or NULL), -ENOMEM.
 */
POOL_API int pool_kv_clear(struct pool_kv *kv);

/*
 * Pins keys (pool_kv_pin): a pinned key is never evicted, until each pin
 * is removed (pool_kv_unpin). status[i] (may be NULL): 0, -ENOENT
 * absent, -ENOSPC spilled and no room to load it back, -EINVAL (unpin)
 * not pinned, -ENOTCONN home lost. Pins belong to the tenant, not to the
 * handle: closing kv does not unpin. Returns the number that succeeded,
 * or -EBADF / -EINVAL / -ENOMEM.
 */
POOL_API ssize_t pool_kv_pin(struct pool_kv *kv, size_t n,
			     const struct pool_kv_key *keys, int *status);
POOL_API ssize_t pool_kv_unpin(struct pool_kv *kv, size_t n,
			       const struct pool_kv_key *keys, int *status);

/*
 * Asynchronous variants: check the arguments, queue the operation to the
 * handle's workers and return 0 with *op, or the call-level error of the
 * synchronous call (then no op is created). Every array passed (keys,
 * values, lens, bufs, caps, status) and every buffer must stay valid and
 * untouched until the op completes. Each op must be waited for
 * (pool_kv_op_wait) until it returns a result other than -ETIMEDOUT.
 */
POOL_API int pool_kv_put_async(struct pool_kv *kv, size_t n,
			       const struct pool_kv_key *keys,
			       const void *const *values, const size_t *lens,
			       int *status, struct pool_kv_op **op);
POOL_API int pool_kv_get_async(struct pool_kv *kv, size_t n,
			       const struct pool_kv_key *keys,
			       void *const *bufs, const size_t *caps,
			       size_t *lens, int *status,
			       struct pool_kv_op **op);
POOL_API int pool_kv_exists_async(struct pool_kv *kv, size_t n,
				  const struct pool_kv_key *keys,
				  struct pool_kv_op **op);
POOL_API int pool_kv_delete_async(struct pool_kv *kv, size_t n,
				  const struct pool_kv_key *keys, int *status,
				  struct pool_kv_op **op);
POOL_API int pool_kv_pin_async(struct pool_kv *kv, size_t n,
			       const struct pool_kv_key *keys, int *status,
			       struct pool_kv_op **op);
POOL_API int pool_kv_unpin_async(struct pool_kv *kv, size_t n,
				 const struct pool_kv_key *keys, int *status,
				 struct pool_kv_op **op);

/*
 * Waits up to timeout_ms (-1: as long as it takes) for op. Returns what
 * the synchronous call would have returned and frees op, or -ETIMEDOUT
 * while it still runs (op stays valid: wait again), -EINVAL (NULL, or op
 * of another handle), -EBADF (kv closed).
 */
POOL_API ssize_t pool_kv_op_wait(struct pool_kv *kv, struct pool_kv_op *op,
				 int timeout_ms);
/* 1 when op has completed (pool_kv_op_wait then returns at once), 0 while
 * it runs; -EINVAL, -EBADF as pool_kv_op_wait. Never blocks. */
POOL_API int pool_kv_op_test(struct pool_kv *kv, struct pool_kv_op *op);

struct pool_kv_stats {
	uint64_t puts, put_bytes; /* keys stored by this handle, bytes */
	uint64_t gets, hits;	  /* keys asked, keys returned */
	uint64_t get_bytes;	  /* bytes returned */
	uint64_t bad_reads;	  /* reads that failed a check (misses) */
	uint64_t donor_refreshes; /* DONORS fetched */
	uint64_t ndonors;	  /* homes known now */
	uint64_t replica_hits;	  /* hits read from a replica (of hits) */
};
/* A snapshot of kv's counters. 0, -EINVAL or -EBADF. */
POOL_API int pool_kv_get_stats(struct pool_kv *kv, struct pool_kv_stats *st);

#ifdef __cplusplus
}
#endif
#endif
