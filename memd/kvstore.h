/* SPDX-License-Identifier: MIT */
/*
 * memd/kvstore.h - the donor's KV store: per tenant, an index of 32-byte
 * keys over blocks cut from slabs of memory that the owner (memd's server)
 * lends it (docs/kv.md).
 *
 * Pure bookkeeping: no sockets, no fabric, no clock reads (callers pass a
 * monotonic now_ms). The one exception is the optional spill directory,
 * which the store reads and writes itself, under its lock (see Spill). One
 * mutex inside makes every call safe from any thread; the slab callbacks
 * run under it and must not call back into the store.
 *
 * Memory. The store asks its owner for slabs (slab_get, per tenant; the
 * owner says -ENOSPC when the tenant's share or the donor is full) and
 * gives a slab back (slab_put) as soon as it holds no block. A slab
 * belongs to one tenant and one size class. A block is a 64-byte header
 * (struct wire_kv_header, written by the client over RMA, or by the store
 * when it reloads a spilled entry) followed by payload, and a class is
 * sized payload + header: payload classes of 64 KiB * {1, 1.25, 1.5,
 * 1.75} * 2^k (64, 80, 96, 112, 128, 160 KiB ...), each block 64 bytes
 * more, for as long as two blocks fit a slab; the top class is the whole
 * slab (payload slab_bytes - 64). So a value of exactly 1 MiB takes a
 * block of 1 MiB + 64 bytes (63 of them in a 64 MiB slab), and rounding
 * wastes less than a fifth of a block (docs/kv.md, "Size classes").
 *
 * Values and chunks. A value of L bytes (1 .. value_max_bytes) whose
 * payload fits one block of the largest class (L <= slab_bytes - 64) lives
 * in one block of the smallest class that holds 64 + L bytes. A larger
 * value is chunked: with P = slab_bytes - 64, chunk i holds value bytes
 * [i * P, min(L, (i + 1) * P)); every chunk but the last is a block of the
 * largest class, the last a block of the smallest class that fits its
 * part. Each chunk's header carries the whole value's length, its chunk
 * number and the chunk count.
 *
 * Entries. key -> RESERVED (blocks allocated, waiting for the client's
 * RMA write and commit, dropped at its deadline) -> COMMITTED (served).
 * Every reservation, and every reload from spill, gets a fresh generation:
 * a counter seeded from the caller's 64-bit epoch (memd's random boot
 * epoch), so a (key, generation) pair names one incarnation of one value.
 * The checksum is the client's, kept and returned, never interpreted.
 *
 * Read leases. A lookup takes a read lease on each entry it returns, until
 * now + lease_ms; eviction skips an entry with a live lease, and a delete
 * of such an entry is deferred (the key disappears at once, its blocks are
 * freed when the leases end). Leases are counted per entry with the
 * latest deadline: done() ends one, expire() ends them all once the
 * latest deadline has passed. Since leases are not told apart, a late
 * done() for a lapsed lease can end a newer reader's lease early; the
 * client's header and checksum checks turn any reuse under that reader
 * into a miss, never into wrong bytes.
 *
 * Eviction: S3-FIFO (Yang et al., SOSP '23) per tenant, over COMMITTED
 * entries, run when the tenant needs a block of some class, has no free
 * block of that class and no empty slab, and slab_get says -ENOSPC:
 *  - a committed entry enters the small FIFO S, or the main FIFO M when
 *    its key is in the ghost FIFO G (it was evicted from S recently) or
 *    when it is reloaded from spill;
 *  - a hit (lookup) raises the entry's 2-bit frequency (0..3);
 *  - to evict: when S holds at least 10% of the bytes of S + M, take S's
 *    oldest entry: with frequency >= 1 it moves to M's head (a second
 *    life), else it is evicted and its key enters G. Otherwise take M's
 *    oldest entry: with frequency >= 1 it goes back to M's head with its
 *    frequency decremented, else it is evicted (its key is not ghosted);
 *  - G remembers at most as many keys as the tenant has resident entries,
 *    oldest forgotten first;
 *  - pinned entries and entries with live read leases are skipped (moved
 *    to the head of their FIFO); if the policy's walk finds no victim, any
 *    evictable entry is taken; if there is none, the put gets -ENOSPC.
 *    A put evicts nothing while slab_soon says a slab is on its way back
 *    for the tenant, under its share: it gets -EAGAIN (try again).
 * One-shot keys pass through S without pushing reused ones out of M: the
 * policy is scan-resistant. Evictions continue until a block of the
 * needed class is free or a slab is empty (which is re-cut for the class
 * needed), so a tenant whose memory is cut for other classes may lose
 * several entries for one block. Tenants never evict each other: a
 * tenant's eviction only looks at its own entries.
 *
 * Spill (optional: spill_dir and spill_bytes set). An evicted entry is
 * written to <spill_dir>/<tenant>/<key hex> (temp file, fsync, rename,
 * fsync of the directory) unless a spill file for it already exists; the
 * oldest spill files are deleted to keep their total under spill_bytes. A
 * file is a header (chunk 0, the generation at spill time, the client's
 * checksum), the value, and an 8-byte integrity tag: BLAKE2b (libsodium's
 * crypto_generichash at its minimum 16-byte output, first 8 bytes kept)
 * over header and value. The store computes the tag only when it writes
 * or reads a spill file, never on the hot path. A lookup (or pin) of a
 * key that is not in memory but has a spill file loads it back into fresh
 * blocks (evicting as needed), writes the headers with a new generation
 * and serves it; the file stays, so evicting it again costs no write.
 * memd_kv_scan_spill() at start verifies every file and deletes what
 * fails, so a restarted memd serves spilled keys again (warm restart).
 *
 * Binding. A spill file ends with a second tag, BLAKE2b keyed with its
 * tenant's binding (memd_kv_bind_tenant: memd derives it from the pool's
 * and the tenant's identity) over header and integrity tag. A file is
 * served only to a tenant bound to the same binding: when a tenant is
 * first bound, its files from an earlier run that carry another binding
 * (another pool, or another tenant under a recycled id) are deleted, and
 * every reload checks the tag again. A tenant never bound has the
 * all-zero binding.
 * Spill I/O runs under the store's lock.
 */
#ifndef TP_MEMD_KVSTORE_H
#define TP_MEMD_KVSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fabric/wire.h"
#include "memd/mrc.h"

#define MEMD_KV_KEY_BYTES 32
#define MEMD_KV_HEADER_BYTES WIRE_KV_HEADER_LEN
#define MEMD_KV_MAGIC WIRE_KV_MAGIC	    /* "TKv1" as little-endian bytes */
#define MEMD_KV_CLASS_MIN_BYTES (64u << 10) /* smallest class's payload */
#define MEMD_KV_SLAB_MAX_BYTES (4ull << 30)
#define MEMD_KV_VALUE_MAX_BYTES (1u << 30) /* hard cap on value_max */
#define MEMD_KV_VALUE_DEFAULT_MAX_BYTES (64u << 20)
#define MEMD_KV_BIND_BYTES 32 /* a tenant's spill binding */

/* The block header (struct wire_kv_header, 64 bytes, little-endian) and
 * its codec live in fabric/wire.h: clients write and verify the same
 * bytes over RMA. */

enum memd_kv_policy {
	MEMD_KV_POLICY_S3FIFO = 0,
	MEMD_KV_POLICY_FIFO, /* plain FIFO: a baseline for tests and benches */
};

struct memd_kv_options {
	uint64_t slab_bytes;	  /* power of two, 64 KiB .. 4 GiB */
	uint64_t epoch;		  /* seeds generations; memd's boot epoch */
	uint32_t reserve_ms;	  /* RESERVED lifetime; 0: 10000 */
	uint32_t lease_ms;	  /* read lease; 0: 2000 */
	uint32_t value_max_bytes; /* 0: 64 MiB; at most 1 GiB */
	uint32_t max_reserved;	  /* RESERVED entries per tenant; 0: no cap */
	/*
	 * Lends the store a slab for tenant: 0 with *slab (the owner's id)
	 * and *base (slab_bytes of writable memory, until slab_put), or
	 * -ENOSPC when the tenant's share or the donor is full; any other
	 * negative errno fails the operation that needed memory.
	 */
	int (*slab_get)(void *arg, uint32_t tenant, uint32_t *slab,
			uint8_t **base);
	/* Takes back a slab the store no longer uses (its blocks are free). */
	void (*slab_put)(void *arg, uint32_t slab);
	/*
	 * Optional; must not block. Called when slab_get said -ENOSPC for a
	 * put: true when a slab is on its way back to free (given back,
	 * being quiesced and zeroed) and due soon, with the tenant's share
	 * not full. The put is then answered -EAGAIN (try again shortly)
	 * rather than evict the tenant's entries or fail -ENOSPC for memory
	 * that is free a moment later.
	 */
	bool (*slab_soon)(void *arg, uint32_t tenant);
	void *slab_arg;
	const char *spill_dir; /* NULL: no spill; copied */
	uint64_t spill_bytes;  /* cap on the spill files' total size */
	enum memd_kv_policy policy;
	/* capacity statistics (docs/capacity.md): keys each tenant's
	 * miss-ratio curve samples at most (0: no curve; 16 .. 2^20), and
	 * its window in sampled requests (0: 4 x mrc_samples) */
	uint32_t mrc_samples;
	uint64_t mrc_window;
};

struct memd_kv;

/*
 * Creates a store. Returns 0, -EINVAL (slab_bytes not a power of two in
 * range, a callback missing, value_max_bytes over the cap, spill_dir
 * without spill_bytes or the reverse, an unknown policy), -ENOMEM. The
 * spill directory is created if missing (-errno from mkdir). Call
 * memd_kv_scan_spill() before serving to pick up an earlier run's files.
 */
int memd_kv_create(const struct memd_kv_options *o, struct memd_kv **out);
/* Gives every slab back (slab_put) and frees the store; spill files stay.
 * NULL is a no-op. */
void memd_kv_destroy(struct memd_kv *kv);

/*
 * The number of chunks a value of value_len bytes takes, or -EINVAL (0),
 * -EMSGSIZE (over value_max_bytes).
 */
int memd_kv_nchunks(const struct memd_kv *kv, uint64_t value_len);

/* Where one chunk lives: slab (the owner's id), block offset (the header's
 * first byte) within the slab, block size (header + payload room). */
struct memd_kv_loc {
	uint32_t slab;
	uint32_t chunk;
	uint64_t offset;
	uint64_t block_bytes;
};

/*
 * One key of a batch. Which fields are read (in) and written (out)
 * depends on the call; status is always written.
 */
struct memd_kv_item {
	uint8_t key[MEMD_KV_KEY_BYTES]; /* in */
	uint64_t value_len;		/* reserve: in; lookup: out */
	uint64_t generation; /* commit, done: in; reserve, lookup: out */
	uint64_t checksum;   /* commit: in; lookup: out */
	uint32_t first_loc, nchunks; /* reserve, lookup: out: locs[] */
	int status;		     /* out: 0 or -errno, per call */
};

/*
 * Batch calls. Every one returns the number of items whose status is 0,
 * or -EINVAL for the whole batch (n == 0, items NULL, locs NULL with
 * max_locs > 0) with nothing done. Per-key outcomes are in status.
 */

/*
 * Reserves blocks for each (key, value_len): a RESERVED entry with a fresh
 * generation and a deadline of now + reserve_ms, its chunks' locations in
 * locs[first_loc .. first_loc + nchunks). status:
 *  0         reserved: write every chunk (header + payload), then commit;
 *  -EEXIST   the key is present (committed, in memory or spilled): puts
 *            are idempotent, nothing to write (generation: the committed
 *            one, 0 when only spilled);
 *  -EBUSY    another put holds the key RESERVED (a key deleted under read
 *            leases is off the index at once: it can be put again);
 *  -ENOSPC   the tenant's share is full and nothing can be evicted;
 *  -EAGAIN   a forget pass under way would forget this new key
 *            (memd_kv_forget_begin), or the share is not full but the
 *            slab needed is still being zeroed (slab_soon): try again
 *            shortly;
 *  -EDQUOT   the tenant already has max_reserved reservations pending
 *            (commit them or let them expire);
 *  -EINVAL   value_len 0;  -EMSGSIZE  value_len over value_max_bytes;
 *  -ENOBUFS  locs[] has no room for this key's chunks;
 *  other     the slab_get callback's error.
 */
ssize_t memd_kv_reserve(struct memd_kv *kv, uint32_t tenant,
			struct memd_kv_item *items, size_t n,
			struct memd_kv_loc *locs, size_t max_locs,
			uint64_t now_ms);
/*
 * Commits (key, generation) with the client's checksum: RESERVED ->
 * COMMITTED. status: 0; -ENOENT (no such key: never reserved, dropped,
 * deleted); -ESTALE (the key has another generation: the reservation was
 * replaced); -EALREADY (this generation is already committed);
 * -ETIMEDOUT (the reservation's deadline has passed: it is dropped now).
 */
ssize_t memd_kv_commit(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n, uint64_t now_ms);
/*
 * Drops the reservations (key, generation: a reserve's) of a put that
 * will not commit them: memd's refusal of a COMMIT_AT routed by an older
 * membership, whose client puts again under the new list, maybe here
 * (it would find its own reservation: -EBUSY until the deadline).
 * status: 0 dropped (counted as expired); -ENOENT no such reservation
 * (committed, dropped, or another generation's).
 */
ssize_t memd_kv_unreserve(struct memd_kv *kv, uint32_t tenant,
			  struct memd_kv_item *items, size_t n,
			  uint64_t now_ms);
/*
 * Looks keys up, loading spilled ones back; each hit takes a read lease
 * until now + lease_ms and fills value_len, generation, checksum and its
 * chunks' locations. status: 0 hit; -ENOENT miss (absent, RESERVED, or a
 * spill file that failed verification or found no room); -ENOBUFS locs[]
 * has no room (no lease taken). Counts hits and misses, the bytes served
 * (hit_bytes), and a request unless exists found the key just before.
 */
ssize_t memd_kv_lookup(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n,
		       struct memd_kv_loc *locs, size_t max_locs,
		       uint64_t now_ms);
/*
 * Ends one read lease per (key, generation). status: 0; -ENOENT (no such
 * key); -ESTALE (another generation); -EALREADY (no lease left: lapsed).
 * An entry deleted while leased is freed when its last lease ends.
 */
ssize_t memd_kv_done(struct memd_kv *kv, uint32_t tenant,
		     struct memd_kv_item *items, size_t n, uint64_t now_ms);
/*
 * The number of leading keys of keys[0 .. n) that are present (committed
 * in memory, or spilled). No leases, no reload. Every key, also past the
 * first missing one, is a request for the capacity statistics (requests,
 * request_hits, the curve); a lookup of a key this call found is the
 * same request and not counted again. -EINVAL for n == 0 or keys NULL.
 */
ssize_t memd_kv_exists(struct memd_kv *kv, uint32_t tenant,
		       const uint8_t (*keys)[MEMD_KV_KEY_BYTES], size_t n);
/*
 * Deletes keys (and their spill files). status: 0 (deleted; freed later
 * if read leases are live); -ENOENT (also for a reservation past its
 * deadline, which it drops, as a reserve does); -EBUSY (RESERVED: a put
 * is under way). Pins do not prevent a delete.
 */
ssize_t memd_kv_delete(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n, uint64_t now_ms);
/*
 * Deletes keys as memd_kv_delete does, except pinned ones: their status
 * is -EEXIST and they stay (with their pins). A client's put uses it on a
 * key's second copy that holds other bytes (docs/kv.md, "Replicas"), so
 * that a put never removes a key that is pinned.
 */
ssize_t memd_kv_drop(struct memd_kv *kv, uint32_t tenant,
		     struct memd_kv_item *items, size_t n, uint64_t now_ms);
/*
 * Pins keys (loading spilled ones back): a pinned entry is never evicted.
 * Pins nest. status: 0; -ENOENT (not present, or a spill file that failed
 * verification); -ENOSPC (spilled, and no room to load it); other errors
 * of slab_get.
 */
ssize_t memd_kv_pin(struct memd_kv *kv, uint32_t tenant,
		    struct memd_kv_item *items, size_t n, uint64_t now_ms);
/* Removes one pin per key. status: 0; -ENOENT; -EINVAL (not pinned). */
ssize_t memd_kv_unpin(struct memd_kv *kv, uint32_t tenant,
		      struct memd_kv_item *items, size_t n);

/*
 * Drops RESERVED entries whose deadline is <= now_ms, ends read leases
 * whose latest deadline is <= now_ms, frees deleted entries whose leases
 * are over, gives empty slabs back. Returns how many of those it did.
 */
size_t memd_kv_expire(struct memd_kv *kv, uint64_t now_ms);

/*
 * Makes tenant's store hold at most max_slabs slabs: evicts (and spills,
 * as eviction does) its evictable committed entries, slab by slab, the
 * slab with the fewest blocks in use first, every entry with a block in
 * it, and gives the emptied slabs back. Slabs with pinned, leased or
 * reserved blocks stay (the store may end above max_slabs). Later
 * allocations are not limited by it: the owner's slab_get is. Returns the
 * number of entries evicted, or -EINVAL (kv NULL).
 */
ssize_t memd_kv_trim(struct memd_kv *kv, uint32_t tenant, uint32_t max_slabs,
		     uint64_t now_ms);

struct memd_kv_scan_result {
	uint64_t files, bytes; /* indexed */
	uint64_t deleted;      /* failed verification, or stale temp files */
	uint64_t dropped;      /* valid but over spill_bytes (oldest) */
	uint64_t membership;   /* memd_kv_spill_membership() */
};
/*
 * Indexes the spill directory: verifies every <tenant>/<key hex> file
 * (name, size, header, integrity tag) and deletes what fails, and
 * leftover temp files; then deletes the oldest files (by mtime) beyond
 * spill_bytes. Keys already known to the store are left alone. Returns 0
 * (also when no spill directory is configured), or -errno when the
 * directory cannot be read.
 */
int memd_kv_scan_spill(struct memd_kv *kv, struct memd_kv_scan_result *r);

/*
 * The membership the spill files are valid under (docs/kv.md, "Donors
 * that come and go"): the registry's membership sequence, kept in
 * <spill_dir>/membership (decimal). memd_kv_scan_spill() reads it; 0:
 * no such file (a spill directory of a standalone memd, or of a memd
 * before the file existed), or one that cannot be read: unknown.
 *
 * memd_kv_spill_membership_set() records a new one (temp file, fsync,
 * rename, fsync of the directory; 0 deletes the file) when it differs
 * from the last one read or recorded. The caller records a sequence
 * only while every spill file is valid under it: after it forgot the
 * files of an earlier membership, or when its membership went on under
 * a new sequence. Returns 0 (also without a spill directory) or -errno
 * (the file may then still name an older sequence, which never comes
 * again).
 */
uint64_t memd_kv_spill_membership(struct memd_kv *kv);
int memd_kv_spill_membership_set(struct memd_kv *kv, uint64_t membership);

/*
 * Says whose the tenant's spill files must be. The first call for a
 * tenant deletes its files from an earlier run that carry another
 * binding; a later call with a different binding (another tenant under
 * the same id) forgets everything of the tenant, in memory and spilled.
 * The same binding again costs a compare. Returns how many entries or
 * files it dropped, or -EINVAL, -ENOMEM.
 */
ssize_t memd_kv_bind_tenant(struct memd_kv *kv, uint32_t tenant,
			    const uint8_t bind[MEMD_KV_BIND_BYTES],
			    uint64_t now_ms);
/*
 * The tenant is gone for good (removed from the pool): forgets its
 * entries (those under read leases when the leases end) and deletes all
 * of its spill files and its spill directory. Returns how many entries
 * it forgot, or -EINVAL.
 */
ssize_t memd_kv_remove_tenant(struct memd_kv *kv, uint32_t tenant,
			      uint64_t now_ms);
/*
 * Like memd_kv_remove_tenant for every tenant, but the tenants stay: their
 * entries are forgotten and their spill files deleted, and they may put
 * again at once (spill bindings are kept). For a donor being drained:
 * what it held must not come back after an undrain (docs/kv.md,
 * "Drain"). Returns how many entries it forgot, or -EINVAL.
 */
ssize_t memd_kv_forget_all(struct memd_kv *kv, uint64_t now_ms);
/*
 * Forgets, of every tenant, the entries (in memory, reserved or spilled)
 * of the keys keep() says no to, as a delete does. For a donor that no
 * longer ranks first or second for a key (docs/kv.md, "Donors that come
 * and go"): deletes go to those two, so it could not see them. keep runs
 * under the store's mutex. Returns how many entries it forgot, or
 * -EINVAL.
 */
ssize_t memd_kv_forget_unless(struct memd_kv *kv,
			      bool (*keep)(const uint8_t *key, void *arg),
			      void *arg, uint64_t now_ms);
/*
 * The same pass in steps, so that its caller can serve between them
 * (docs/bench/kv.md, "The forget pass"): begin sets keep (with arg, which
 * must live until the pass ends) and the cursor to the start; each step
 * visits about budget entries from the cursor, forgets as above, and
 * sets *done once the pass has covered every tenant (and forgets keep).
 * Meanwhile a reserve of a new key keep says no to is refused (-EAGAIN),
 * and any other new entry keep says no to starts the pass over, so that
 * no such key escapes it behind the cursor. A begin replaces a pass
 * under way. A step returns how many entries it forgot, or -EINVAL.
 */
void memd_kv_forget_begin(struct memd_kv *kv,
			  bool (*keep)(const uint8_t *key, void *arg),
			  void *arg);
ssize_t memd_kv_forget_step(struct memd_kv *kv, size_t budget, uint64_t now_ms,
			    bool *done);
/*
 * Empties one tenant's store (KV_CLEAR): as memd_kv_delete of every key
 * of the tenant's, pinned ones included (their pins go with them),
 * entries under read leases freed when the leases end (a reader gets its
 * exact bytes), reservations dropped as a drain drops them (their commit
 * then finds no entry: -ENOENT), and every spill file of the tenant's
 * deleted. Other tenants are not touched; the tenant stays and may put
 * again at once (its spill binding is kept). Returns how many entries it
 * forgot, or -EINVAL.
 */
ssize_t memd_kv_clear(struct memd_kv *kv, uint32_t tenant, uint64_t now_ms);
/* The ids of the tenants the store knows (those with entries, spill files
 * found at start, or bound), but removed ones; at most max. */
size_t memd_kv_tenant_ids(struct memd_kv *kv, uint32_t *ids, size_t max);

/*
 * For tests: verifies the store's bookkeeping of blocks and FIFOs (every
 * tenant's): each block in use is held by exactly the entry whose chunk
 * names it, a free block by none, every entry's chunk is so held, and
 * each FIFO is in push order (what memd_kv_trim and a slab re-cut for a
 * new class rely on to find a slab's entries without walking the FIFOs).
 * O(entries + blocks) under the lock. Returns 0, -EFAULT when something
 * disagrees, or -EINVAL (kv NULL).
 */
int memd_kv_check(struct memd_kv *kv);

/* Per-tenant statistics (an X-macro, so exporters never drift). */
#define MEMD_KV_STATS(X)                                                       \
	X(slabs, "slabs held")                                                 \
	X(bytes_held, "bytes of slabs held")                                   \
	X(bytes_used, "bytes of blocks in use (reserved + committed)")         \
	X(entries, "committed entries in memory")                              \
	X(reserved, "reserved entries")                                        \
	X(spilled, "spill files")                                              \
	X(spill_bytes, "bytes of spill files")                                 \
	X(hits, "lookups served")                                              \
	X(misses, "lookups missed")                                            \
	X(evictions, "entries evicted from memory")                            \
	X(spills, "spill files written")                                       \
	X(spill_errors, "spill files that could not be written")               \
	X(reloads, "entries loaded back from spill")                           \
	X(expired, "reservations dropped at their deadline")                   \
	X(requests, "keys asked for (exists, and lookups not after one)")      \
	X(request_hits, "keys asked for that were present")                    \
	X(hit_bytes, "value bytes served by lookups")                          \
	X(oneshot, "entries evicted without a lookup since their put")         \
	X(oneshot_bytes, "value bytes of those entries")                       \
	X(oneshot_put_ms, "milliseconds their puts took, reserve to commit")   \
	X(recuts, "slabs emptied to be re-cut for a class the share lacked")   \
	X(recut_evictions, "entries evicted to empty those slabs")

struct memd_kv_stats {
#define MEMD_KV_STAT_FIELD(name, help) uint64_t name;
	MEMD_KV_STATS(MEMD_KV_STAT_FIELD)
#undef MEMD_KV_STAT_FIELD
};

/* The tenant's statistics (all zero for a tenant the store has never
 * seen). One consistent snapshot. */
void memd_kv_get_stats(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_stats *st);

/*
 * Capacity statistics (docs/capacity.md). Requests are the keys clients
 * ask for: each key of an exists, and each lookup that no exists found
 * just before (requests, request_hits). An entry evicted with no lookup
 * since its put is one-shot: its put was waste (oneshot, oneshot_bytes,
 * oneshot_put_ms). Each tenant's requests (and puts, as references that
 * move a key to the top) feed its miss-ratio curve (memd/mrc.h), with
 * sizes the bytes of the key's blocks: the hit ratio an LRU store of any
 * size would have had.
 */
#define MEMD_KV_CURVE_POINTS 400
struct memd_kv_curve {
	struct memd_mrc_info info;
	size_t npoints; /* on a grid of 8 per doubling */
	uint64_t bytes[MEMD_KV_CURVE_POINTS];
	double hit[MEMD_KV_CURVE_POINTS];
};
/*
 * The tenant's curve, and the hit ratio at each of sizes[0 .. nsizes)
 * into at[]. Returns 0, or -ENOENT: no curve (a tenant never seen or
 * without a request yet, curves off, or no memory for one).
 */
int memd_kv_curve(struct memd_kv *kv, uint32_t tenant, const uint64_t *sizes,
		  double *at, size_t nsizes, struct memd_kv_curve *c);

#endif
