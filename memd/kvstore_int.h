// SPDX-License-Identifier: MIT
/*
 * memd/kvstore_int.h - what the files of the donor's KV block store share:
 * its limits, its structures, and the functions one file calls in
 * another. Private to memd/kvstore*.c; memd/kvstore.h is the API (the
 * contract, the eviction policy and the spill format). One concern a
 * file:
 *
 * memd/kvstore.c        the store's life (create, destroy), the per-tenant
 *                       index, entries and their read leases, tenants
 *                       (binding, forgetting, removing, listing)
 * memd/kvstore_slab.c   geometry (size classes, chunks), slabs borrowed
 *                       from the owner and the blocks cut from them
 * memd/kvstore_evict.c  the FIFOs and eviction (S3-FIFO or FIFO), trim
 * memd/kvstore_spill.c  spill files (write, load, binding, membership)
 *                       and the warm-restart scan of the spill directory
 * memd/kvstore_ops.c    the batch operations: reserve, commit, lookup,
 *                       done, exists, delete, drop, pin, unpin, expire
 * memd/kvstore_stats.c  capacity statistics: requests, the miss-ratio
 *                       curve's references, stats and curve snapshots
 *
 * Threads: none of its own. Every entry point takes the store's mutex;
 * memd's control thread is the expected caller. The slab callbacks and
 * spill file I/O run under the mutex; every function declared here is
 * called with it held.
 *
 * Objects:
 * - a tenant: a hash index of entries (chained, keyed by SipHash of the
 *   32-byte key with a random per-store key, so a tenant cannot flood a
 *   bucket), its slabs, and its FIFOs: small S, main M, ghost G, reserved
 *   R and deleting D (entries off the index, freed when their leases end);
 * - a slab: one size class while it has blocks in use, a stack of free
 *   block numbers, each block's entry (held_by), on its tenant's partial
 *   list of the class (some block free), on the tenant's empty list (all
 *   free, about to go back to the owner or to be re-cut), or on no list
 *   (full);
 * - an entry: a key's state in memory (mem), its place in one FIFO
 *   (queue, and qseq: when it was pushed there), whether a spill file
 *   exists (spilled; the store-wide spill FIFO orders those files oldest
 *   first).
 *
 * Invariants:
 * - mem COMMITTED <=> queue S or M; RESERVED <=> queue R; DELETING <=>
 *   queue D and off the index; mem NONE => queue G or none, no blocks.
 * - An entry with mem NONE, no queue, no spill file and not busy is freed
 *   (kvs_entry_maybe_free); busy marks the one entry an operation is filling,
 *   so evictions it causes (ghost and spill trimming) cannot free it.
 * - An entry is on its tenant's leased list iff leases > 0.
 * - A slab on the empty list has nfree == nblocks and is handed back at
 *   the end of the operation (kvs_tenant_release_empty) unless an allocation
 *   re-cuts it first.
 * - A block is free (in its slab's stack) <=> its held_by is NULL; a
 *   block in use is held by the one entry whose chunks (or, while
 *   kvs_entry_alloc_blocks runs, whose chunks to be) name it. Only
 *   kvs_entry_alloc_blocks hands blocks out and only block_free takes
 *   them back (kvstore_slab.c), so held_by stays exact by construction;
 *   memd_kv_check verifies it for the tests.
 * - Within a FIFO, qseq grows from tail (oldest) to head: an entry's qseq
 *   is its tenant's count of pushes when it was pushed, and every move
 *   is a push at the head.
 */
#ifndef MEMD_KVSTORE_INT_H
#define MEMD_KVSTORE_INT_H

#include "memd/kvstore.h"

#include <pthread.h>
#include <sodium.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Size classes (see kvstore.h): payloads of 64 KiB * {1, 1.25, 1.5, 1.75}
 * * 2^k, each plus the header, while two blocks fit a slab, then the whole
 * slab. A 4 GiB slab has 15 doublings (64 KiB .. 1.75 GiB) and the top.
 */
#define CLASS_STEPS 4
#define NCLASS_MAX (15 * CLASS_STEPS + 1)
#define TAG_BYTES 8
#define TAG_HASH_BYTES 16 /* crypto_generichash's minimum output */
/* header, value, integrity tag, binding tag (see spill_bind_tag) */
#define SPILL_OVERHEAD (MEMD_KV_HEADER_BYTES + 2 * TAG_BYTES)
#define HEX_KEY_CHARS (2 * MEMD_KV_KEY_BYTES)

_Static_assert(TAG_HASH_BYTES >= crypto_generichash_BYTES_MIN,
	       "libsodium's BLAKE2b output floor");
_Static_assert(((uint64_t)MEMD_KV_CLASS_MIN_BYTES << 15) ==
		       MEMD_KV_SLAB_MAX_BYTES / 2,
	       "NCLASS_MAX covers the largest slab");

enum mem_state { MEM_NONE, MEM_RESERVED, MEM_COMMITTED, MEM_DELETING };
enum queue_id { Q_NONE, Q_SMALL, Q_MAIN, Q_GHOST, Q_RESERVED, Q_DELETING };
enum slab_list { L_FULL, L_PARTIAL, L_EMPTY };

struct kv_slab {
	uint32_t id;
	uint32_t cls;
	uint64_t block_bytes; /* class_bytes(cls), while cut for cls */
	uint8_t *base;
	uint32_t nblocks, nfree;
	uint32_t *free; /* free block numbers, nfree of them */
	/* per block, the entry it holds a chunk of (NULL: free); as long as
	 * free[], one pointer per 64 KiB of the slab: evict_in_slab finds
	 * the slab's entries here, not by a walk of the FIFOs */
	struct kv_entry **held_by;
	uint32_t idx;	 /* in tenant->slabs[] */
	bool trim_tried; /* memd_kv_trim could not empty it this call */
	enum slab_list list;
	struct kv_slab *prev, *next;
};

struct kv_chunk {
	struct kv_slab *slab;
	uint32_t block;
};

struct kv_entry;

/* An entry of a slab evict_in_slab empties, and its place in the walk of
 * the FIFOs it replaces: (queue is main) << 63 | qseq. */
struct kv_victim {
	uint64_t order;
	struct kv_entry *e;
};

struct kv_fifo {
	struct kv_entry *head, *tail; /* head: newest */
	uint64_t count, bytes;
};

struct kv_tenant;
struct kv_entry {
	struct kv_entry *hnext;
	struct kv_entry *qprev, *qnext; /* in queue */
	struct kv_entry *lprev, *lnext; /* tenant's leased list */
	struct kv_entry *sprev, *snext; /* store's spill FIFO */
	struct kv_tenant *t;
	uint8_t key[MEMD_KV_KEY_BYTES];
	uint8_t mem, queue, freq;
	bool busy, hashed, to_main, spilled;
	bool read;	 /* served by a lookup since its put (else one-shot) */
	bool probed;	 /* found by exists; the lookup that follows is the
		      * same request (not counted again) */
	uint32_t put_ms; /* reserve to commit */
	uint32_t pins, leases;
	uint32_t nchunks;
	uint64_t generation, value_len, checksum;
	uint64_t bytes; /* of its blocks */
	uint64_t qseq;	/* t->qseq at its last push: its place in its FIFO */
	uint64_t deadline_ms, lease_until_ms;
	uint64_t spill_file_bytes;
	struct kv_chunk *chunks; /* &one when nchunks == 1 */
	struct kv_chunk one;
};

struct kv_tenant {
	uint32_t id;
	struct kv_entry **bucket;
	uint32_t nbuckets; /* power of two */
	uint64_t nhashed;
	struct kv_slab **slabs;
	uint32_t nslabs, slabs_cap;
	struct kv_slab *partial[NCLASS_MAX];
	struct kv_slab *empty;
	struct kv_fifo small, main, ghost, reserved, deleting;
	uint64_t qseq; /* pushes onto its FIFOs so far */
	struct kv_entry *leased;
	uint64_t bytes_used, spilled, spill_bytes;
	struct memd_kv_stats st; /* the counters; gauges are computed */
	struct memd_mrc *mrc;	 /* NULL until its first request, or off */
	bool mrc_failed;	 /* could not allocate it: stays off */
	/* memd_kv_bind_tenant: whose files its spill files are (all zero
	 * until bound); bound once a caller has said so */
	uint8_t bind[MEMD_KV_BIND_BYTES];
	bool bound;
	bool removed; /* memd_kv_remove_tenant: not listed any more */
};

struct memd_kv {
	pthread_mutex_t lock;
	struct memd_kv_options o;
	/* A forget pass in steps (memd_kv_forget_begin): its ranking (NULL:
	 * none under way), its cursor (tenant, bucket), and restart: a key it
	 * would forget was indexed meanwhile (not by a reserve: those it
	 * refuses), possibly behind the cursor, so the pass starts over. */
	bool (*pass_keep)(const uint8_t *key, void *arg);
	void *pass_arg;
	size_t pass_tenant;
	uint32_t pass_bucket;
	bool pass_restart;
	char *spill_dir;
	uint32_t nclasses;
	uint64_t class_bytes[NCLASS_MAX]; /* block bytes, header included */
	uint64_t payload_max;		  /* slab_bytes - header */
	/* evict_in_slab's scratch: a slab's entries, and as many again to
	 * sort them into FIFO order; each as many as a slab has blocks at
	 * most (slab_bytes / 64 KiB) */
	struct kv_victim *victims;
	uint64_t next_gen;
	uint8_t hkey[crypto_shorthash_KEYBYTES];
	struct kv_tenant **tenants;
	size_t ntenants, tenants_cap;
	struct kv_entry *spill_head, *spill_tail; /* head: oldest */
	uint64_t spill_used;
	/* <spill_dir>/membership as last read or written (0: none) */
	uint64_t spill_membership;
};

static inline uint64_t kvs_get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* kvstore.c */
struct kv_entry *kvs_index_find(const struct memd_kv *kv,
				const struct kv_tenant *t, const uint8_t *key);
void kvs_index_remove(const struct memd_kv *kv, struct kv_tenant *t,
		      struct kv_entry *e);
struct kv_entry *kvs_entry_new(struct memd_kv *kv, struct kv_tenant *t,
			       const uint8_t *key);
void kvs_lease_clear(struct kv_entry *e);
void kvs_lease_take(struct memd_kv *kv, struct kv_entry *e, uint64_t now_ms);
bool kvs_lease_is_live(const struct kv_entry *e, uint64_t now_ms);
void kvs_entry_maybe_free(struct memd_kv *kv, struct kv_entry *e);
uint64_t kvs_next_generation(struct memd_kv *kv);
struct kv_tenant *kvs_tenant_find(struct memd_kv *kv, uint32_t id);
struct kv_tenant *kvs_tenant_get(struct memd_kv *kv, uint32_t id);
void kvs_entry_destroy(struct kv_entry *e);

/* kvstore_slab.c */
void kvs_classes_init(struct memd_kv *kv);
uint32_t kvs_nchunks_for(const struct memd_kv *kv, uint64_t len);
uint64_t kvs_chunk_part(const struct memd_kv *kv, uint64_t len, uint32_t i);
uint32_t kvs_slab_blocks_max(const struct memd_kv *kv);
uint8_t *kvs_chunk_block(const struct kv_chunk *c);
void kvs_slab_release(struct memd_kv *kv, struct kv_tenant *t,
		      struct kv_slab *s);
void kvs_tenant_release_empty(struct memd_kv *kv, struct kv_tenant *t);
void kvs_tenant_release_spare(struct memd_kv *kv, struct kv_tenant *t);
void kvs_entry_free_blocks(struct kv_entry *e);
int kvs_entry_alloc_blocks(struct memd_kv *kv, struct kv_entry *e, uint64_t len,
			   uint64_t now_ms, bool defer);

/* kvstore_evict.c */
void kvs_queue_push(struct kv_entry *e, uint8_t q);
void kvs_queue_remove(struct kv_entry *e);
void kvs_queue_committed(struct memd_kv *kv, struct kv_entry *e);
bool kvs_evict_for(struct memd_kv *kv, struct kv_tenant *t, uint32_t cls,
		   uint32_t *misses, uint64_t now_ms);

/* kvstore_spill.c */
int kvs_spill_path(const struct memd_kv *kv, uint32_t tenant,
		   const uint8_t *key, bool tmp, char *out, size_t size);
void kvs_spill_forget(struct memd_kv *kv, struct kv_entry *e, bool unlink_file);
int kvs_spill_write(struct memd_kv *kv, struct kv_entry *e);
int kvs_entry_load(struct memd_kv *kv, struct kv_entry *e, uint64_t now_ms);
int kvs_spill_check_bind(struct memd_kv *kv, struct kv_entry *e);

/* kvstore_ops.c */
void kvs_drop_reserved(struct memd_kv *kv, struct kv_entry *e);
int kvs_delete_one(struct memd_kv *kv, struct kv_tenant *t,
		   struct memd_kv_item *it, uint64_t now_ms, bool keep_pinned);

/* kvstore_stats.c */
uint64_t kvs_sample_hash(const struct memd_kv *kv, const uint8_t *key);
void kvs_reference(struct memd_kv *kv, struct kv_tenant *t, const uint8_t *key,
		   uint64_t bytes, bool counted);
void kvs_request(struct memd_kv *kv, struct kv_tenant *t, const uint8_t *key,
		 uint64_t bytes, bool hit, bool counted);

#endif /* MEMD_KVSTORE_INT_H */
