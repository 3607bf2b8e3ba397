// SPDX-License-Identifier: MIT
/*
 * memd/kvstore.c - the donor's per-tenant KV block store (see kvstore.h
 * for the contract, the eviction policy and the spill format).
 *
 * Threads: none of its own. Every entry point takes the store's mutex;
 * memd's control thread is the expected caller. The slab callbacks and
 * spill file I/O run under the mutex.
 *
 * Objects:
 * - a tenant: a hash index of entries (chained, keyed by SipHash of the
 *   32-byte key with a random per-store key, so a tenant cannot flood a
 *   bucket), its slabs, and its FIFOs: small S, main M, ghost G, reserved
 *   R and deleting D (entries off the index, freed when their leases end);
 * - a slab: one size class while it has blocks in use, a stack of free
 *   block numbers, on its tenant's partial list of the class (some block
 *   free), on the tenant's empty list (all free, about to go back to the
 *   owner or to be re-cut), or on no list (full);
 * - an entry: a key's state in memory (mem), its place in one FIFO
 *   (queue), whether a spill file exists (spilled; the store-wide spill
 *   FIFO orders those files oldest first).
 *
 * Invariants:
 * - mem COMMITTED <=> queue S or M; RESERVED <=> queue R; DELETING <=>
 *   queue D and off the index; mem NONE => queue G or none, no blocks.
 * - An entry with mem NONE, no queue, no spill file and not busy is freed
 *   (entry_maybe_free); busy marks the one entry an operation is filling,
 *   so evictions it causes (ghost and spill trimming) cannot free it.
 * - An entry is on its tenant's leased list iff leases > 0.
 * - A slab on the empty list has nfree == nblocks and is handed back at
 *   the end of the operation (tenant_release_empty) unless an allocation
 *   re-cuts it first.
 */
#include "memd/kvstore.h"
#include "memd/mrc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	uint32_t *free;	 /* free block numbers, nfree of them */
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
	char *spill_dir;
	uint32_t nclasses;
	uint64_t class_bytes[NCLASS_MAX]; /* block bytes, header included */
	uint64_t payload_max;		  /* slab_bytes - header */
	uint64_t next_gen;
	uint8_t hkey[crypto_shorthash_KEYBYTES];
	struct kv_tenant **tenants;
	size_t ntenants, tenants_cap;
	struct kv_entry *spill_head, *spill_tail; /* head: oldest */
	uint64_t spill_used;
	/* <spill_dir>/membership as last read or written (0: none) */
	uint64_t spill_membership;
};

/* ---- little-endian ---- */

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* ---- geometry ---- */

static uint64_t class_bytes(const struct memd_kv *kv, uint32_t cls)
{
	return kv->class_bytes[cls];
}

/* The smallest class whose blocks hold bytes (header included); the top
 * class (the whole slab) holds any chunk. */
static uint32_t class_for(const struct memd_kv *kv, uint64_t bytes)
{
	uint32_t lo = 0, hi = kv->nclasses - 1;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (kv->class_bytes[mid] >= bytes)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * Fills kv's class table for its slab size: payload classes grow by a
 * quarter of their power of two (jemalloc's spacing: a block wastes under
 * 20% of itself to rounding), each block is payload + header (so a value
 * of exactly 1 MiB takes 1 MiB + 64 bytes, not 2 MiB), and classes stop
 * while two blocks still fit a slab: a larger block would be alone in
 * its slab anyway, so the top class is the whole slab (payload_max).
 */
static void classes_init(struct memd_kv *kv)
{
	uint64_t S = kv->o.slab_bytes;
	uint32_t n = 0;

	for (uint32_t k = 0; n < NCLASS_MAX - 1; k++) {
		uint64_t base = (uint64_t)MEMD_KV_CLASS_MIN_BYTES << k;
		uint32_t i;

		for (i = 0; i < CLASS_STEPS; i++) {
			uint64_t b = base + base / CLASS_STEPS * i +
				     MEMD_KV_HEADER_BYTES;

			if (2 * b > S)
				break;
			kv->class_bytes[n++] = b;
		}
		if (i < CLASS_STEPS)
			break;
	}
	kv->class_bytes[n++] = S;
	kv->nclasses = n;
}

static uint32_t nchunks_for(const struct memd_kv *kv, uint64_t len)
{
	return (uint32_t)((len + kv->payload_max - 1) / kv->payload_max);
}

/* Payload bytes of chunk i of a len-byte value. */
static uint64_t chunk_part(const struct memd_kv *kv, uint64_t len, uint32_t i)
{
	uint64_t off = (uint64_t)i * kv->payload_max;
	uint64_t left = len - off;

	return left < kv->payload_max ? left : kv->payload_max;
}

int memd_kv_nchunks(const struct memd_kv *kv, uint64_t value_len)
{
	if (value_len == 0)
		return -EINVAL;
	if (value_len > kv->o.value_max_bytes)
		return -EMSGSIZE;
	return (int)nchunks_for(kv, value_len);
}

static uint8_t *chunk_block(const struct kv_chunk *c)
{
	return c->slab->base + (uint64_t)c->block * c->slab->block_bytes;
}

/* ---- FIFOs ---- */

static struct kv_fifo *fifo_of(struct kv_tenant *t, uint8_t q)
{
	switch (q) {
	case Q_SMALL:
		return &t->small;
	case Q_MAIN:
		return &t->main;
	case Q_GHOST:
		return &t->ghost;
	case Q_RESERVED:
		return &t->reserved;
	case Q_DELETING:
		return &t->deleting;
	}
	return NULL;
}

static void queue_push(struct kv_entry *e, uint8_t q)
{
	struct kv_fifo *f = fifo_of(e->t, q);

	e->queue = q;
	e->qprev = NULL;
	e->qnext = f->head;
	if (f->head)
		f->head->qprev = e;
	else
		f->tail = e;
	f->head = e;
	f->count++;
	f->bytes += e->bytes;
}

static void queue_remove(struct kv_entry *e)
{
	struct kv_fifo *f = fifo_of(e->t, e->queue);

	if (!f)
		return;
	if (e->qprev)
		e->qprev->qnext = e->qnext;
	else
		f->head = e->qnext;
	if (e->qnext)
		e->qnext->qprev = e->qprev;
	else
		f->tail = e->qprev;
	f->count--;
	f->bytes -= e->bytes;
	e->qprev = e->qnext = NULL;
	e->queue = Q_NONE;
}

static void queue_move(struct kv_entry *e, uint8_t q)
{
	queue_remove(e);
	queue_push(e, q);
}

/* ---- index ---- */

static uint64_t key_hash(const struct memd_kv *kv, const uint8_t *key)
{
	uint8_t h[crypto_shorthash_BYTES];

	crypto_shorthash(h, key, MEMD_KV_KEY_BYTES, kv->hkey);
	return get_le64(h);
}

static struct kv_entry *index_find(const struct memd_kv *kv,
				   const struct kv_tenant *t,
				   const uint8_t *key)
{
	struct kv_entry *e = t->bucket[key_hash(kv, key) & (t->nbuckets - 1)];

	while (e && memcmp(e->key, key, MEMD_KV_KEY_BYTES))
		e = e->hnext;
	return e;
}

static void index_grow(const struct memd_kv *kv, struct kv_tenant *t)
{
	uint32_t n = t->nbuckets * 2;
	struct kv_entry **b;

	if (n == 0 || !(b = calloc(n, sizeof(*b))))
		return; /* a longer chain is slower, not wrong */
	for (uint32_t i = 0; i < t->nbuckets; i++) {
		struct kv_entry *e = t->bucket[i], *next;

		for (; e; e = next) {
			uint64_t h = key_hash(kv, e->key) & (n - 1);

			next = e->hnext;
			e->hnext = b[h];
			b[h] = e;
		}
	}
	free(t->bucket);
	t->bucket = b;
	t->nbuckets = n;
}

static void index_insert(const struct memd_kv *kv, struct kv_tenant *t,
			 struct kv_entry *e)
{
	uint64_t h;

	if (t->nhashed >= t->nbuckets)
		index_grow(kv, t);
	h = key_hash(kv, e->key) & (t->nbuckets - 1);
	e->hnext = t->bucket[h];
	t->bucket[h] = e;
	e->hashed = true;
	t->nhashed++;
}

static void index_remove(const struct memd_kv *kv, struct kv_tenant *t,
			 struct kv_entry *e)
{
	struct kv_entry **pp =
		&t->bucket[key_hash(kv, e->key) & (t->nbuckets - 1)];

	if (!e->hashed)
		return;
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	e->hnext = NULL;
	e->hashed = false;
	t->nhashed--;
}

/* ---- slabs and blocks ---- */

static void slab_unlink(struct kv_tenant *t, struct kv_slab *s)
{
	struct kv_slab **head = s->list == L_PARTIAL ? &t->partial[s->cls]
				: s->list == L_EMPTY ? &t->empty
						     : NULL;

	if (!head)
		return;
	if (s->prev)
		s->prev->next = s->next;
	else
		*head = s->next;
	if (s->next)
		s->next->prev = s->prev;
	s->prev = s->next = NULL;
	s->list = L_FULL;
}

static void slab_link(struct kv_tenant *t, struct kv_slab *s,
		      enum slab_list list)
{
	struct kv_slab **head =
		list == L_PARTIAL ? &t->partial[s->cls] : &t->empty;

	s->list = list;
	s->prev = NULL;
	s->next = *head;
	if (*head)
		(*head)->prev = s;
	*head = s;
}

/* Borrows a slab from the owner onto the tenant's empty list. */
static int slab_acquire(struct memd_kv *kv, struct kv_tenant *t)
{
	uint32_t id = 0;
	uint8_t *base = NULL;
	struct kv_slab *s;
	int r;

	if (t->nslabs == t->slabs_cap) {
		uint32_t cap = t->slabs_cap ? t->slabs_cap * 2 : 8;
		struct kv_slab **v = realloc(t->slabs, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->slabs = v;
		t->slabs_cap = cap;
	}
	r = kv->o.slab_get(kv->o.slab_arg, t->id, &id, &base);
	if (r)
		return r < 0 ? r : -EIO;
	if (!base) {
		kv->o.slab_put(kv->o.slab_arg, id);
		return -EFAULT;
	}
	s = calloc(1, sizeof(*s));
	if (s)
		s->free = malloc((kv->o.slab_bytes / MEMD_KV_CLASS_MIN_BYTES) *
				 sizeof(uint32_t));
	if (!s || !s->free) {
		free(s);
		kv->o.slab_put(kv->o.slab_arg, id);
		return -ENOMEM;
	}
	s->id = id;
	s->base = base;
	s->idx = t->nslabs;
	t->slabs[t->nslabs++] = s;
	slab_link(t, s, L_EMPTY);
	return 0;
}

/* Cuts an empty slab into blocks of cls; block 0 is handed out first. */
static void slab_cut(struct memd_kv *kv, struct kv_tenant *t, struct kv_slab *s,
		     uint32_t cls)
{
	slab_unlink(t, s);
	s->cls = cls;
	s->block_bytes = class_bytes(kv, cls);
	s->nblocks = (uint32_t)(kv->o.slab_bytes / s->block_bytes);
	for (uint32_t i = 0; i < s->nblocks; i++)
		s->free[i] = s->nblocks - 1 - i;
	s->nfree = s->nblocks;
	slab_link(t, s, L_PARTIAL);
}

static void slab_release(struct memd_kv *kv, struct kv_tenant *t,
			 struct kv_slab *s)
{
	slab_unlink(t, s);
	t->slabs[s->idx] = t->slabs[--t->nslabs];
	t->slabs[s->idx]->idx = s->idx;
	kv->o.slab_put(kv->o.slab_arg, s->id);
	free(s->free);
	free(s);
}

static void tenant_release_empty(struct memd_kv *kv, struct kv_tenant *t)
{
	while (t->empty)
		slab_release(kv, t, t->empty);
}

/*
 * The end of an operation: empty slabs go back to the owner, all but one
 * (KV_SPARE_SLABS), kept for the tenant's next allocation. A slab handed
 * back is closed, quiesced and zeroed before memd leases it again, so a
 * tenant that puts and deletes keys of a class that is otherwise empty
 * would otherwise take a fresh slab (and registration) every time and,
 * faster than the reclaimer zeroes, run the donor out of free slabs
 * (ENOSPC). The spare counts in the tenant's slabs; memd_kv_trim hands
 * it back like any other.
 */
#define KV_SPARE_SLABS 1u

static void tenant_release_spare(struct memd_kv *kv, struct kv_tenant *t)
{
	uint32_t kept = 0;
	struct kv_slab *s = t->empty;

	while (s) {
		struct kv_slab *next = s->next;

		if (kept < KV_SPARE_SLABS)
			kept++;
		else
			slab_release(kv, t, s);
		s = next;
	}
}

static void block_free(struct kv_tenant *t, const struct kv_chunk *c)
{
	struct kv_slab *s = c->slab;

	s->free[s->nfree++] = c->block;
	if (s->nfree == s->nblocks) {
		slab_unlink(t, s);
		slab_link(t, s, L_EMPTY);
	} else if (s->nfree == 1) {
		slab_link(t, s, L_PARTIAL);
	}
}

static bool evict_one(struct memd_kv *kv, struct kv_tenant *t, uint64_t now_ms);

/* ---- capacity statistics (docs/capacity.md) ---- */

/*
 * The spatial hash the curve samples by: the key's four words folded,
 * salted with the store's random index key, through the splitmix64
 * finalizer. Cheaper than the index's SipHash (it runs on every
 * request); a client that picks keys to collide only skews its own
 * tenant's curve, whose memory stays bounded either way.
 */
static uint64_t sample_hash(const struct memd_kv *kv, const uint8_t *key)
{
	uint64_t x = get_le64(kv->hkey) ^ get_le64(key) ^
		     (get_le64(key + 8) * 0x9e3779b97f4a7c15ull) ^
		     (get_le64(key + 16) * 0xc2b2ae3d27d4eb4full) ^
		     (get_le64(key + 24) * 0x165667b19e3779f9ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * A reference to key for the tenant's miss-ratio curve: counted (a
 * request) or a touch (a put), with the bytes of its blocks (0: not
 * known here). The curve is created at the tenant's first reference.
 */
static void reference(struct memd_kv *kv, struct kv_tenant *t,
		      const uint8_t *key, uint64_t bytes, bool counted)
{
	if (!kv->o.mrc_samples || t->mrc_failed)
		return;
	if (!t->mrc &&
	    memd_mrc_create(kv->o.mrc_samples, kv->o.mrc_window, &t->mrc)) {
		t->mrc_failed = true;
		return;
	}
	memd_mrc_access(t->mrc, sample_hash(kv, key), bytes, counted);
}

/* A request (exists, or a lookup that no exists answered just before)
 * for key: counted with its outcome, and a reference for the curve. */
static void request(struct memd_kv *kv, struct kv_tenant *t, const uint8_t *key,
		    uint64_t bytes, bool hit, bool counted)
{
	if (counted) {
		t->st.requests++;
		t->st.request_hits += hit;
	}
	reference(kv, t, key, bytes, counted);
}

/*
 * A block of cls for t: a free one, else an empty slab re-cut, else a new
 * slab from the owner, else evictions until one of those appears.
 */
static int block_alloc(struct memd_kv *kv, struct kv_tenant *t, uint32_t cls,
		       uint64_t now_ms, struct kv_chunk *c)
{
	for (;;) {
		struct kv_slab *s = t->partial[cls];
		int r;

		if (s) {
			c->slab = s;
			c->block = s->free[--s->nfree];
			if (s->nfree == 0)
				slab_unlink(t, s);
			return 0;
		}
		if (t->empty) {
			slab_cut(kv, t, t->empty, cls);
			continue;
		}
		r = slab_acquire(kv, t);
		if (r == 0)
			continue;
		if (r != -ENOSPC)
			return r;
		if (!evict_one(kv, t, now_ms))
			return -ENOSPC;
	}
}

static void entry_free_blocks(struct kv_entry *e)
{
	struct kv_tenant *t = e->t;

	for (uint32_t i = 0; i < e->nchunks; i++)
		block_free(t, &e->chunks[i]);
	t->bytes_used -= e->bytes;
	if (e->chunks != &e->one)
		free(e->chunks);
	e->chunks = NULL;
	e->nchunks = 0;
	e->bytes = 0;
}

/* Gives e blocks for a len-byte value. e must be on no FIFO. */
static int entry_alloc_blocks(struct memd_kv *kv, struct kv_entry *e,
			      uint64_t len, uint64_t now_ms)
{
	uint32_t n = nchunks_for(kv, len);
	struct kv_chunk *c = n == 1 ? &e->one : calloc(n, sizeof(*c));
	uint64_t bytes = 0;

	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t cls = class_for(kv, MEMD_KV_HEADER_BYTES +
						     chunk_part(kv, len, i));
		int r = block_alloc(kv, e->t, cls, now_ms, &c[i]);

		if (r) {
			while (i--)
				block_free(e->t, &c[i]);
			if (c != &e->one)
				free(c);
			return r;
		}
		bytes += class_bytes(kv, cls);
	}
	e->chunks = c;
	e->nchunks = n;
	e->bytes = bytes;
	e->t->bytes_used += bytes;
	return 0;
}

/* ---- entries ---- */

static struct kv_entry *entry_new(struct memd_kv *kv, struct kv_tenant *t,
				  const uint8_t *key)
{
	struct kv_entry *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->t = t;
	memcpy(e->key, key, MEMD_KV_KEY_BYTES);
	index_insert(kv, t, e);
	return e;
}

static void lease_clear(struct kv_entry *e)
{
	struct kv_tenant *t = e->t;

	if (!e->leases)
		return;
	if (e->lprev)
		e->lprev->lnext = e->lnext;
	else
		t->leased = e->lnext;
	if (e->lnext)
		e->lnext->lprev = e->lprev;
	e->lprev = e->lnext = NULL;
	e->leases = 0;
}

static void lease_take(struct memd_kv *kv, struct kv_entry *e, uint64_t now_ms)
{
	uint64_t until = now_ms + kv->o.lease_ms;

	if (e->leases++ == 0) {
		e->lprev = NULL;
		e->lnext = e->t->leased;
		if (e->t->leased)
			e->t->leased->lprev = e;
		e->t->leased = e;
		e->lease_until_ms = until;
	} else if (until > e->lease_until_ms) {
		e->lease_until_ms = until;
	}
}

static bool lease_is_live(const struct kv_entry *e, uint64_t now_ms)
{
	return e->leases && now_ms < e->lease_until_ms;
}

static void entry_maybe_free(struct memd_kv *kv, struct kv_entry *e)
{
	if (e->busy || e->mem != MEM_NONE || e->queue != Q_NONE || e->spilled)
		return;
	index_remove(kv, e->t, e);
	free(e);
}

static uint64_t next_generation(struct memd_kv *kv)
{
	uint64_t g = kv->next_gen++;

	if (g == 0)
		g = kv->next_gen++;
	return g;
}

/* ---- spill files ---- */

static void key_hex(const uint8_t *key, char out[HEX_KEY_CHARS + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 0; i < MEMD_KV_KEY_BYTES; i++) {
		out[2 * i] = digits[key[i] >> 4];
		out[2 * i + 1] = digits[key[i] & 15];
	}
	out[HEX_KEY_CHARS] = 0;
}

static bool key_unhex(const char *s, uint8_t key[MEMD_KV_KEY_BYTES])
{
	if (strlen(s) != HEX_KEY_CHARS)
		return false;
	for (int i = 0; i < HEX_KEY_CHARS; i++) {
		int c = s[i], v;

		if (c >= '0' && c <= '9')
			v = c - '0';
		else if (c >= 'a' && c <= 'f')
			v = c - 'a' + 10;
		else
			return false;
		if (i % 2 == 0)
			key[i / 2] = (uint8_t)(v << 4);
		else
			key[i / 2] |= (uint8_t)v;
	}
	return true;
}

static int spill_path(const struct memd_kv *kv, uint32_t tenant,
		      const uint8_t *key, bool tmp, char *out, size_t size)
{
	char hex[HEX_KEY_CHARS + 1];
	int n;

	if (!key) {
		n = snprintf(out, size, "%s/%u", kv->spill_dir, tenant);
	} else {
		key_hex(key, hex);
		n = snprintf(out, size, "%s/%u/%s%s%s", kv->spill_dir, tenant,
			     tmp ? "." : "", hex, tmp ? ".tmp" : "");
	}
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static void tag_final(crypto_generichash_state *st, uint8_t tag[TAG_BYTES])
{
	uint8_t h[TAG_HASH_BYTES];

	crypto_generichash_final(st, h, sizeof(h));
	memcpy(tag, h, TAG_BYTES);
}

/*
 * The binding tag of a spill file: BLAKE2b keyed with the tenant's
 * binding over the header and the integrity tag (which covers the
 * value), so checking whose a file is reads 80 bytes, not the value.
 */
static void spill_bind_tag(const struct kv_tenant *t,
			   const uint8_t hb[MEMD_KV_HEADER_BYTES],
			   const uint8_t tag[TAG_BYTES], uint8_t out[TAG_BYTES])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, t->bind, sizeof(t->bind), TAG_HASH_BYTES);
	crypto_generichash_update(&st, hb, MEMD_KV_HEADER_BYTES);
	crypto_generichash_update(&st, tag, TAG_BYTES);
	tag_final(&st, out);
}

static int write_all(int fd, const uint8_t *p, uint64_t len)
{
	while (len) {
		size_t n = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		len -= (uint64_t)w;
	}
	return 0;
}

static int pread_all(int fd, uint8_t *p, uint64_t len, uint64_t off)
{
	while (len) {
		size_t n = len > (1u << 30) ? (1u << 30) : (size_t)len;
		ssize_t r = pread(fd, p, n, (off_t)off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		p += r;
		len -= (uint64_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

/* Removes e's spill file from the FIFO (and the disk, with unlink_file). */
static void spill_forget(struct memd_kv *kv, struct kv_entry *e,
			 bool unlink_file)
{
	char path[PATH_MAX];

	if (!e->spilled)
		return;
	if (e->sprev)
		e->sprev->snext = e->snext;
	else
		kv->spill_head = e->snext;
	if (e->snext)
		e->snext->sprev = e->sprev;
	else
		kv->spill_tail = e->sprev;
	e->sprev = e->snext = NULL;
	kv->spill_used -= e->spill_file_bytes;
	e->t->spilled--;
	e->t->spill_bytes -= e->spill_file_bytes;
	e->spilled = false;
	if (unlink_file &&
	    spill_path(kv, e->t->id, e->key, false, path, sizeof(path)) == 0)
		unlink(path);
}

static void spill_append(struct memd_kv *kv, struct kv_entry *e,
			 uint64_t file_bytes)
{
	e->spilled = true;
	e->spill_file_bytes = file_bytes;
	e->snext = NULL;
	e->sprev = kv->spill_tail;
	if (kv->spill_tail)
		kv->spill_tail->snext = e;
	else
		kv->spill_head = e;
	kv->spill_tail = e;
	kv->spill_used += file_bytes;
	e->t->spilled++;
	e->t->spill_bytes += file_bytes;
}

/* Deletes the oldest spill files until need more bytes fit the cap. */
static uint64_t spill_trim(struct memd_kv *kv, uint64_t need)
{
	uint64_t n = 0;

	while (kv->spill_head && kv->spill_used + need > kv->o.spill_bytes) {
		struct kv_entry *e = kv->spill_head;

		spill_forget(kv, e, true);
		entry_maybe_free(kv, e);
		n++;
	}
	return n;
}

static int fsync_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd))
		r = -errno;
	close(fd);
	return r;
}

/*
 * <spill_dir>/membership: the membership sequence the spill files were
 * written under, as decimal text and a newline. 0 when it is missing,
 * unreadable or malformed (unknown).
 */
#define SPILL_MEMBERSHIP_FILE "membership"

static uint64_t spill_membership_read(const struct memd_kv *kv)
{
	char path[PATH_MAX], buf[32], *end;
	unsigned long long v;
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "%s/" SPILL_MEMBERSHIP_FILE,
		     kv->spill_dir) >= (int)sizeof(path))
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 1 || buf[n - 1] != '\n' || buf[0] < '1' || buf[0] > '9')
		return 0;
	buf[n - 1] = '\0';
	errno = 0;
	v = strtoull(buf, &end, 10);
	if (errno || *end)
		return 0;
	return (uint64_t)v;
}

/* Writes (membership 0: deletes) <spill_dir>/membership: temp file,
 * fsync, rename, fsync of the directory. kv->lock held. */
static int spill_membership_write(const struct memd_kv *kv, uint64_t membership)
{
	char path[PATH_MAX], tmp[PATH_MAX], buf[32];
	int fd, n, r = 0;

	if (snprintf(path, sizeof(path), "%s/" SPILL_MEMBERSHIP_FILE,
		     kv->spill_dir) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/" SPILL_MEMBERSHIP_FILE ".tmp",
		     kv->spill_dir) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	if (!membership) {
		if (unlink(path) && errno != ENOENT)
			return -errno;
		return fsync_dir(kv->spill_dir);
	}
	n = snprintf(buf, sizeof(buf), "%llu\n",
		     (unsigned long long)membership);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
		  0600);
	if (fd < 0)
		return -errno;
	r = write_all(fd, (const uint8_t *)buf, (uint64_t)n);
	if (!r && fsync(fd))
		r = -errno;
	close(fd);
	if (!r && rename(tmp, path))
		r = -errno;
	if (r) {
		unlink(tmp);
		return r;
	}
	return fsync_dir(kv->spill_dir);
}

/* Writes e (COMMITTED, in memory) to its spill file. */
static int spill_write(struct memd_kv *kv, struct kv_entry *e)
{
	struct kv_tenant *t = e->t;
	uint64_t file_bytes = e->value_len + SPILL_OVERHEAD;
	char dir[PATH_MAX], tmp[PATH_MAX], path[PATH_MAX];
	uint8_t hb[MEMD_KV_HEADER_BYTES], tag[TAG_BYTES];
	struct wire_kv_header h = {
		.magic = MEMD_KV_MAGIC,
		.tenant_id = t->id,
		.generation = e->generation,
		.value_len = (uint32_t)e->value_len,
		.chunk = 0,
		.nchunks = (uint16_t)e->nchunks,
		.checksum = e->checksum,
	};
	crypto_generichash_state st;
	int fd, r;

	if (file_bytes > kv->o.spill_bytes)
		return -EFBIG;
	if ((r = spill_path(kv, t->id, NULL, false, dir, sizeof(dir))) ||
	    (r = spill_path(kv, t->id, e->key, true, tmp, sizeof(tmp))) ||
	    (r = spill_path(kv, t->id, e->key, false, path, sizeof(path))))
		return r;
	spill_trim(kv, file_bytes);
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	memcpy(h.key, e->key, MEMD_KV_KEY_BYTES);
	wire_kv_header_encode(&h, hb);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
	crypto_generichash_update(&st, hb, sizeof(hb));
	r = write_all(fd, hb, sizeof(hb));
	for (uint32_t i = 0; r == 0 && i < e->nchunks; i++) {
		const uint8_t *p =
			chunk_block(&e->chunks[i]) + MEMD_KV_HEADER_BYTES;
		uint64_t part = chunk_part(kv, e->value_len, i);

		crypto_generichash_update(&st, p, part);
		r = write_all(fd, p, part);
	}
	if (r == 0) {
		uint8_t btag[TAG_BYTES];

		tag_final(&st, tag);
		spill_bind_tag(t, hb, tag, btag);
		r = write_all(fd, tag, sizeof(tag));
		if (r == 0)
			r = write_all(fd, btag, sizeof(btag));
	}
	if (r == 0 && fsync(fd))
		r = -errno;
	if (close(fd) && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path))
		r = -errno;
	if (r) {
		unlink(tmp);
		return r;
	}
	fsync_dir(dir); /* the rename is done; a failed sync risks only it */
	spill_append(kv, e, file_bytes);
	return 0;
}

static void queue_committed(struct memd_kv *kv, struct kv_entry *e)
{
	bool main = kv->o.policy == MEMD_KV_POLICY_S3FIFO && e->to_main;

	e->to_main = false;
	e->freq = 0;
	queue_push(e, main ? Q_MAIN : Q_SMALL);
}

/*
 * Loads a spilled entry (mem NONE) back into fresh blocks with a new
 * generation. -ENOENT when the file is gone or fails verification (it is
 * deleted), -ENOSPC when no room can be made, other -errno from I/O.
 */
static int entry_load(struct memd_kv *kv, struct kv_entry *e, uint64_t now_ms)
{
	struct kv_tenant *t = e->t;
	char path[PATH_MAX];
	uint8_t hb[MEMD_KV_HEADER_BYTES], tag[TAG_BYTES], want[TAG_BYTES];
	struct wire_kv_header h;
	crypto_generichash_state st;
	struct stat sb;
	uint64_t gen;
	int fd, r;

	if ((r = spill_path(kv, t->id, e->key, false, path, sizeof(path))))
		return r;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		spill_forget(kv, e, false);
		return -ENOENT;
	}
	r = fstat(fd, &sb) ? -errno : pread_all(fd, hb, sizeof(hb), 0);
	if (r == 0) {
		wire_kv_header_decode(hb, &h);
		if (h.magic != MEMD_KV_MAGIC || h.tenant_id != t->id ||
		    memcmp(h.key, e->key, MEMD_KV_KEY_BYTES) || h.chunk != 0 ||
		    h.value_len == 0 || h.value_len > kv->o.value_max_bytes ||
		    (uint64_t)sb.st_size != h.value_len + SPILL_OVERHEAD)
			r = -EBADMSG;
	}
	if (r)
		goto bad_file;
	e->busy = true; /* evictions below may trim its spill file */
	r = entry_alloc_blocks(kv, e, h.value_len, now_ms);
	if (r) {
		e->busy = false;
		close(fd);
		return r;
	}
	crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
	crypto_generichash_update(&st, hb, sizeof(hb));
	for (uint32_t i = 0; r == 0 && i < e->nchunks; i++) {
		uint8_t *p = chunk_block(&e->chunks[i]) + MEMD_KV_HEADER_BYTES;
		uint64_t part = chunk_part(kv, h.value_len, i);

		r = pread_all(fd, p, part,
			      MEMD_KV_HEADER_BYTES +
				      (uint64_t)i * kv->payload_max);
		crypto_generichash_update(&st, p, part);
	}
	if (r == 0)
		r = pread_all(fd, tag, sizeof(tag),
			      MEMD_KV_HEADER_BYTES + h.value_len);
	tag_final(&st, want);
	if (r == 0 && sodium_memcmp(tag, want, sizeof(tag)))
		r = -EBADMSG;
	if (r == 0) { /* another pool's or tenant's file is never served */
		uint8_t btag[TAG_BYTES];

		r = pread_all(fd, btag, sizeof(btag),
			      MEMD_KV_HEADER_BYTES + h.value_len + TAG_BYTES);
		spill_bind_tag(t, hb, tag, want);
		if (r == 0 && sodium_memcmp(btag, want, sizeof(btag)))
			r = -EBADMSG;
	}
	e->busy = false;
	if (r) {
		entry_free_blocks(e);
		goto bad_file;
	}
	close(fd);
	gen = next_generation(kv);
	for (uint32_t i = 0; i < e->nchunks; i++) {
		struct wire_kv_header ch = h;

		ch.generation = gen;
		ch.chunk = (uint16_t)i;
		ch.nchunks = (uint16_t)e->nchunks;
		wire_kv_header_encode(&ch, chunk_block(&e->chunks[i]));
	}
	e->mem = MEM_COMMITTED;
	e->generation = gen;
	e->value_len = h.value_len;
	e->checksum = h.checksum;
	if (e->queue == Q_GHOST)
		queue_remove(e);
	e->to_main = true; /* asked for again after its eviction */
	queue_committed(kv, e);
	t->st.reloads++;
	return 0;

bad_file:
	close(fd);
	/* corrupt or unreadable: never served, so no reason to keep it */
	if (e->spilled)
		spill_forget(kv, e, true);
	return -ENOENT;
}

/* ---- eviction ---- */

static bool is_evictable(const struct kv_entry *e, uint64_t now_ms)
{
	return e->pins == 0 && !lease_is_live(e, now_ms);
}

static void ghost_trim(struct memd_kv *kv, struct kv_tenant *t)
{
	uint64_t cap = t->small.count + t->main.count;

	if (cap == 0)
		cap = 1;
	while (t->ghost.count > cap) {
		struct kv_entry *g = t->ghost.tail;

		queue_remove(g);
		entry_maybe_free(kv, g);
	}
}

/* Evicts e (COMMITTED, evictable): spill, free its blocks, maybe ghost. */
static void evict_entry(struct memd_kv *kv, struct kv_entry *e, bool ghost)
{
	struct kv_tenant *t = e->t;

	if (kv->spill_dir && !e->spilled) {
		if (spill_write(kv, e) == 0)
			t->st.spills++;
		else
			t->st.spill_errors++;
	}
	if (!e->read) { /* put, never read: the put was waste */
		t->st.oneshot++;
		t->st.oneshot_bytes += e->value_len;
		t->st.oneshot_put_ms += e->put_ms;
	}
	e->read = false;
	queue_remove(e);
	lease_clear(e); /* lapsed ones only: live ones are not evicted */
	entry_free_blocks(e);
	e->mem = MEM_NONE;
	e->generation = 0;
	e->freq = 0;
	e->pins = 0;
	t->st.evictions++;
	if (ghost && kv->o.policy == MEMD_KV_POLICY_S3FIFO) {
		queue_push(e, Q_GHOST);
		ghost_trim(kv, t);
	}
	entry_maybe_free(kv, e);
}

static bool evict_any(struct memd_kv *kv, struct kv_fifo *f, bool ghost,
		      uint64_t now_ms)
{
	for (struct kv_entry *e = f->tail; e; e = e->qprev) {
		if (is_evictable(e, now_ms)) {
			evict_entry(kv, e, ghost);
			return true;
		}
	}
	return false;
}

/* One S3-FIFO eviction in t (see kvstore.h). False: nothing evictable. */
static bool evict_one(struct memd_kv *kv, struct kv_tenant *t, uint64_t now_ms)
{
	uint64_t budget;

	if (kv->o.policy == MEMD_KV_POLICY_FIFO)
		return evict_any(kv, &t->small, false, now_ms);
	budget = 4 * (t->small.count + t->main.count) + 4;
	while (budget-- && (t->small.count || t->main.count)) {
		struct kv_fifo *s = &t->small, *m = &t->main;
		bool from_small =
			s->count &&
			(m->count == 0 || s->bytes * 10 >= s->bytes + m->bytes);
		struct kv_entry *e = from_small ? s->tail : m->tail;

		if (!is_evictable(e, now_ms)) {
			queue_move(e, e->queue);
		} else if (from_small && e->freq >= 1) {
			queue_move(e, Q_MAIN);
		} else if (!from_small && e->freq >= 1) {
			e->freq--;
			queue_move(e, Q_MAIN);
		} else {
			evict_entry(kv, e, from_small);
			return true;
		}
	}
	/* the walk only met pinned or leased entries: take any other one */
	return evict_any(kv, &t->small, true, now_ms) ||
	       evict_any(kv, &t->main, false, now_ms);
}

/* ---- tenants ---- */

static struct kv_tenant *tenant_find(struct memd_kv *kv, uint32_t id)
{
	for (size_t i = 0; i < kv->ntenants; i++)
		if (kv->tenants[i]->id == id)
			return kv->tenants[i];
	return NULL;
}

static struct kv_tenant *tenant_get(struct memd_kv *kv, uint32_t id)
{
	struct kv_tenant *t = tenant_find(kv, id);

	if (t)
		return t;
	if (kv->ntenants == kv->tenants_cap) {
		size_t cap = kv->tenants_cap ? kv->tenants_cap * 2 : 4;
		struct kv_tenant **v = realloc(kv->tenants, cap * sizeof(*v));

		if (!v)
			return NULL;
		kv->tenants = v;
		kv->tenants_cap = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->nbuckets = 64;
	t->bucket = calloc(t->nbuckets, sizeof(*t->bucket));
	if (!t->bucket) {
		free(t);
		return NULL;
	}
	t->id = id;
	kv->tenants[kv->ntenants++] = t;
	return t;
}

static void entry_destroy(struct kv_entry *e)
{
	if (e->chunks)
		entry_free_blocks(e);
	free(e);
}

static void tenant_destroy(struct memd_kv *kv, struct kv_tenant *t)
{
	struct kv_entry *e, *next;

	for (uint32_t i = 0; i < t->nbuckets; i++) {
		for (e = t->bucket[i]; e; e = next) {
			next = e->hnext;
			entry_destroy(e);
		}
	}
	for (e = t->deleting.head; e; e = next) {
		next = e->qnext;
		entry_destroy(e);
	}
	while (t->nslabs)
		slab_release(kv, t, t->slabs[t->nslabs - 1]);
	free(t->slabs);
	free(t->bucket);
	memd_mrc_destroy(t->mrc);
	free(t);
}

/* ---- create / destroy ---- */

int memd_kv_create(const struct memd_kv_options *o, struct memd_kv **out)
{
	struct memd_kv *kv;
	int r;

	*out = NULL;
	if (!o || !o->slab_get || !o->slab_put ||
	    o->slab_bytes < MEMD_KV_CLASS_MIN_BYTES ||
	    o->slab_bytes > MEMD_KV_SLAB_MAX_BYTES ||
	    (o->slab_bytes & (o->slab_bytes - 1)) ||
	    o->value_max_bytes > MEMD_KV_VALUE_MAX_BYTES ||
	    (o->spill_dir && !o->spill_dir[0]) ||
	    !o->spill_dir != !o->spill_bytes ||
	    (o->policy != MEMD_KV_POLICY_S3FIFO &&
	     o->policy != MEMD_KV_POLICY_FIFO))
		return -EINVAL;
	if (sodium_init() < 0)
		return -EIO;
	kv = calloc(1, sizeof(*kv));
	if (!kv)
		return -ENOMEM;
	kv->o = *o;
	if (!kv->o.reserve_ms)
		kv->o.reserve_ms = 10000;
	if (!kv->o.lease_ms)
		kv->o.lease_ms = 2000;
	if (!kv->o.value_max_bytes)
		kv->o.value_max_bytes = MEMD_KV_VALUE_DEFAULT_MAX_BYTES;
	kv->o.spill_dir = NULL;
	if (o->spill_dir) {
		kv->spill_dir = strdup(o->spill_dir);
		if (!kv->spill_dir) {
			free(kv);
			return -ENOMEM;
		}
		if (mkdir(kv->spill_dir, 0700) && errno != EEXIST) {
			r = -errno;
			free(kv->spill_dir);
			free(kv);
			return r;
		}
	}
	classes_init(kv);
	kv->payload_max = o->slab_bytes - MEMD_KV_HEADER_BYTES;
	kv->next_gen = o->epoch;
	crypto_shorthash_keygen(kv->hkey);
	r = pthread_mutex_init(&kv->lock, NULL);
	if (r) {
		free(kv->spill_dir);
		free(kv);
		return -r;
	}
	*out = kv;
	return 0;
}

void memd_kv_destroy(struct memd_kv *kv)
{
	if (!kv)
		return;
	for (size_t i = 0; i < kv->ntenants; i++)
		tenant_destroy(kv, kv->tenants[i]);
	free(kv->tenants);
	pthread_mutex_destroy(&kv->lock);
	free(kv->spill_dir);
	free(kv);
}

/* ---- batch operations ---- */

static int batch_check(const struct memd_kv *kv, const void *items, size_t n,
		       const struct memd_kv_loc *locs, size_t max_locs)
{
	if (!kv || !items || n == 0 || (!locs && max_locs))
		return -EINVAL;
	return 0;
}

/*
 * A batch whose keys need no locations: under the lock, items[i].status =
 * one(kv, t, &items[i], now_ms, arg) for the tenant's store t, -ENOENT
 * for each when the tenant has none; then the tenant's spare slabs go
 * back. The number of items with status 0, or -EINVAL.
 */
static ssize_t kv_batch(struct memd_kv *kv, uint32_t tenant,
			struct memd_kv_item *items, size_t n, uint64_t now_ms,
			int (*one)(struct memd_kv *kv, struct kv_tenant *t,
				   struct memd_kv_item *it, uint64_t now_ms,
				   bool arg),
			bool arg)
{
	struct kv_tenant *t;
	ssize_t ok = 0;
	int r = batch_check(kv, items, n, NULL, 0);

	if (r)
		return r;
	pthread_mutex_lock(&kv->lock);
	t = tenant_find(kv, tenant);
	for (size_t i = 0; i < n; i++) {
		items[i].status =
			t ? one(kv, t, &items[i], now_ms, arg) : -ENOENT;
		ok += items[i].status == 0;
	}
	if (t)
		tenant_release_spare(kv, t);
	pthread_mutex_unlock(&kv->lock);
	return ok;
}

static void fill_locs(const struct kv_entry *e, struct memd_kv_item *it,
		      struct memd_kv_loc *locs, size_t *nl)
{
	it->first_loc = (uint32_t)*nl;
	it->nchunks = e->nchunks;
	for (uint32_t i = 0; i < e->nchunks; i++) {
		const struct kv_chunk *c = &e->chunks[i];
		uint64_t bb = c->slab->block_bytes;

		locs[*nl] = (struct memd_kv_loc){
			.slab = c->slab->id,
			.chunk = i,
			.offset = (uint64_t)c->block * bb,
			.block_bytes = bb,
		};
		(*nl)++;
	}
}

static void drop_reserved(struct memd_kv *kv, struct kv_entry *e)
{
	queue_remove(e);
	entry_free_blocks(e);
	e->mem = MEM_NONE;
	e->generation = 0;
	e->to_main = false;
	e->t->st.expired++;
	entry_maybe_free(kv, e);
}

static int reserve_one(struct memd_kv *kv, struct kv_tenant *t,
		       struct memd_kv_item *it, struct memd_kv_loc *locs,
		       size_t max_locs, size_t *nl, uint64_t now_ms)
{
	struct kv_entry *e;
	int nc, r;

	nc = memd_kv_nchunks(kv, it->value_len);
	if (nc < 0)
		return nc;
	e = index_find(kv, t, it->key);
	if (e && e->mem == MEM_RESERVED && now_ms >= e->deadline_ms) {
		drop_reserved(kv, e);
		e = index_find(kv, t, it->key);
	}
	if (e && e->mem == MEM_COMMITTED) {
		it->generation = e->generation;
		reference(kv, t, it->key, e->bytes, false);
		return -EEXIST;
	}
	if (e && e->mem == MEM_RESERVED)
		return -EBUSY;
	if (e && e->spilled) {
		reference(kv, t, it->key, 0, false);
		return -EEXIST;
	}
	/* One tenant's open puts cannot pin the store's memory without
	 * bound; expired ones are dropped first (oldest at the tail). */
	while (kv->o.max_reserved && t->reserved.count >= kv->o.max_reserved &&
	       t->reserved.tail && now_ms >= t->reserved.tail->deadline_ms)
		drop_reserved(kv, t->reserved.tail);
	if (kv->o.max_reserved && t->reserved.count >= kv->o.max_reserved)
		return -EDQUOT;
	if (*nl + (size_t)nc > max_locs)
		return -ENOBUFS;
	if (!e && !(e = entry_new(kv, t, it->key)))
		return -ENOMEM;
	if (e->queue == Q_GHOST) {
		queue_remove(e);
		e->to_main = true;
	}
	e->busy = true;
	r = entry_alloc_blocks(kv, e, it->value_len, now_ms);
	e->busy = false;
	if (r) {
		e->to_main = false;
		entry_maybe_free(kv, e);
		return r;
	}
	e->mem = MEM_RESERVED;
	e->generation = next_generation(kv);
	e->value_len = it->value_len;
	e->checksum = 0;
	e->deadline_ms = now_ms + kv->o.reserve_ms;
	e->read = e->probed = false;
	queue_push(e, Q_RESERVED);
	reference(kv, t, it->key, e->bytes, false);
	it->generation = e->generation;
	fill_locs(e, it, locs, nl);
	return 0;
}

ssize_t memd_kv_reserve(struct memd_kv *kv, uint32_t tenant,
			struct memd_kv_item *items, size_t n,
			struct memd_kv_loc *locs, size_t max_locs,
			uint64_t now_ms)
{
	struct kv_tenant *t;
	size_t nl = 0;
	ssize_t ok = 0;
	int r = batch_check(kv, items, n, locs, max_locs);

	if (r)
		return r;
	pthread_mutex_lock(&kv->lock);
	t = tenant_get(kv, tenant);
	for (size_t i = 0; i < n; i++) {
		struct memd_kv_item *it = &items[i];

		it->first_loc = (uint32_t)nl;
		it->nchunks = 0;
		it->generation = 0;
		it->status =
			t ? reserve_one(kv, t, it, locs, max_locs, &nl, now_ms)
			  : -ENOMEM;
		ok += it->status == 0;
	}
	if (t)
		tenant_release_spare(kv, t);
	pthread_mutex_unlock(&kv->lock);
	return ok;
}

static int commit_one(struct memd_kv *kv, struct kv_tenant *t,
		      struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = index_find(kv, t, it->key);

	if (!e || (e->mem != MEM_RESERVED && e->mem != MEM_COMMITTED))
		return -ENOENT;
	if (e->generation != it->generation)
		return -ESTALE;
	if (e->mem == MEM_COMMITTED)
		return -EALREADY;
	if (now_ms >= e->deadline_ms) {
		drop_reserved(kv, e);
		return -ETIMEDOUT;
	}
	queue_remove(e);
	e->mem = MEM_COMMITTED;
	e->checksum = it->checksum;
	e->put_ms = (uint32_t)(now_ms + kv->o.reserve_ms - e->deadline_ms);
	queue_committed(kv, e);
	return 0;
}

ssize_t memd_kv_commit(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, commit_one, false);
}

/* Makes a spilled entry resident. 0, or -ENOENT / -ENOSPC / -errno. */
static int ensure_resident(struct memd_kv *kv, struct kv_entry *e,
			   uint64_t now_ms)
{
	int r;

	if (e->mem == MEM_COMMITTED)
		return 0;
	if (e->mem != MEM_NONE || !e->spilled)
		return -ENOENT;
	r = entry_load(kv, e, now_ms);
	if (r)
		entry_maybe_free(kv, e);
	return r;
}

static int lookup_one(struct memd_kv *kv, struct kv_tenant *t,
		      struct memd_kv_item *it, struct memd_kv_loc *locs,
		      size_t max_locs, size_t *nl, uint64_t now_ms)
{
	struct kv_entry *e = index_find(kv, t, it->key);
	bool counted = !(e && e->probed);
	uint64_t need;

	if (e)
		e->probed = false;
	if (!e ||
	    !(e->mem == MEM_COMMITTED || (e->mem == MEM_NONE && e->spilled))) {
		request(kv, t, it->key, 0, false, counted);
		return -ENOENT;
	}
	need = e->mem == MEM_COMMITTED
		       ? e->nchunks
		       : nchunks_for(kv, e->spill_file_bytes - SPILL_OVERHEAD);
	if (*nl + need > max_locs)
		return -ENOBUFS;
	if (ensure_resident(kv, e, now_ms)) {
		request(kv, t, it->key, 0, false, counted);
		return -ENOENT;
	}
	request(kv, t, it->key, e->bytes, true, counted);
	e->read = true;
	t->st.hit_bytes += e->value_len;
	if (e->freq < 3)
		e->freq++;
	lease_take(kv, e, now_ms);
	it->value_len = e->value_len;
	it->generation = e->generation;
	it->checksum = e->checksum;
	fill_locs(e, it, locs, nl);
	return 0;
}

ssize_t memd_kv_lookup(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n,
		       struct memd_kv_loc *locs, size_t max_locs,
		       uint64_t now_ms)
{
	struct kv_tenant *t;
	size_t nl = 0;
	ssize_t ok = 0;
	int r = batch_check(kv, items, n, locs, max_locs);

	if (r)
		return r;
	pthread_mutex_lock(&kv->lock);
	t = tenant_get(kv, tenant);
	for (size_t i = 0; i < n; i++) {
		struct memd_kv_item *it = &items[i];

		it->first_loc = (uint32_t)nl;
		it->nchunks = 0;
		it->status =
			t ? lookup_one(kv, t, it, locs, max_locs, &nl, now_ms)
			  : -ENOMEM;
		if (t && it->status == 0)
			t->st.hits++;
		else if (t && it->status == -ENOENT)
			t->st.misses++;
		ok += it->status == 0;
	}
	if (t)
		tenant_release_spare(kv, t);
	pthread_mutex_unlock(&kv->lock);
	return ok;
}

/* Frees a DELETING entry whose last lease has ended. */
static void deleting_free(struct kv_entry *e)
{
	queue_remove(e);
	lease_clear(e);
	entry_destroy(e);
}

static int done_one(struct memd_kv *kv, struct kv_tenant *t,
		    struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = index_find(kv, t, it->key);

	if (!e || e->mem != MEM_COMMITTED || e->generation != it->generation) {
		struct kv_entry *d = t->deleting.head;

		while (d && (memcmp(d->key, it->key, MEMD_KV_KEY_BYTES) ||
			     d->generation != it->generation))
			d = d->qnext;
		if (d)
			e = d;
		else if (!e || e->mem != MEM_COMMITTED)
			return -ENOENT;
		else
			return -ESTALE;
	}
	if (!e->leases)
		return -EALREADY;
	if (e->leases > 1) {
		e->leases--;
		return 0;
	}
	lease_clear(e);
	if (e->mem == MEM_DELETING)
		deleting_free(e);
	return 0;
}

ssize_t memd_kv_done(struct memd_kv *kv, uint32_t tenant,
		     struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, done_one, false);
}

ssize_t memd_kv_exists(struct memd_kv *kv, uint32_t tenant,
		       const uint8_t (*keys)[MEMD_KV_KEY_BYTES], size_t n)
{
	struct kv_tenant *t;
	ssize_t prefix = -1;

	if (!kv || !keys || n == 0)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	t = tenant_find(kv, tenant);
	/* every key is a request (capacity statistics), also past the
	 * first missing one: a larger store might have held it */
	for (size_t i = 0; t && i < n; i++) {
		struct kv_entry *e = index_find(kv, t, keys[i]);
		bool here = e && (e->mem == MEM_COMMITTED ||
				  (e->mem == MEM_NONE && e->spilled));

		if (here)
			e->probed = true;
		else if (prefix < 0)
			prefix = (ssize_t)i;
		request(kv, t, keys[i],
			here && e->mem == MEM_COMMITTED ? e->bytes : 0, here,
			true);
	}
	pthread_mutex_unlock(&kv->lock);
	return !t ? 0 : prefix < 0 ? (ssize_t)n : prefix;
}

static int delete_one(struct memd_kv *kv, struct kv_tenant *t,
		      struct memd_kv_item *it, uint64_t now_ms,
		      bool keep_pinned)
{
	struct kv_entry *e = index_find(kv, t, it->key);

	if (!e)
		return -ENOENT;
	if (e->mem == MEM_RESERVED)
		return -EBUSY;
	if (keep_pinned && e->mem == MEM_COMMITTED && e->pins)
		return -EEXIST; /* pinned: it stays */
	if (e->mem == MEM_NONE && !e->spilled)
		return -ENOENT; /* only a ghost */
	if (t->mrc)
		memd_mrc_forget(t->mrc, sample_hash(kv, it->key));
	spill_forget(kv, e, true);
	if (e->mem == MEM_NONE) {
		queue_remove(e); /* ghost */
		entry_maybe_free(kv, e);
		return 0;
	}
	queue_remove(e);
	index_remove(kv, t, e);
	e->pins = 0;
	if (lease_is_live(e, now_ms)) {
		e->mem = MEM_DELETING;
		queue_push(e, Q_DELETING);
		return 0;
	}
	lease_clear(e);
	entry_destroy(e);
	return 0;
}

ssize_t memd_kv_delete(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, delete_one, false);
}

ssize_t memd_kv_drop(struct memd_kv *kv, uint32_t tenant,
		     struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, delete_one, true);
}

static int pin_one(struct memd_kv *kv, struct kv_tenant *t,
		   struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = index_find(kv, t, it->key);
	int s = e ? ensure_resident(kv, e, now_ms) : -ENOENT;

	if (s == 0)
		e->pins++;
	return s;
}

ssize_t memd_kv_pin(struct memd_kv *kv, uint32_t tenant,
		    struct memd_kv_item *items, size_t n, uint64_t now_ms)
{
	return kv_batch(kv, tenant, items, n, now_ms, pin_one, false);
}

static int unpin_one(struct memd_kv *kv, struct kv_tenant *t,
		     struct memd_kv_item *it, uint64_t now_ms, bool unused)
{
	struct kv_entry *e = index_find(kv, t, it->key);

	if (!e || e->mem != MEM_COMMITTED)
		return -ENOENT;
	if (!e->pins)
		return -EINVAL;
	e->pins--;
	return 0;
}

/* Ends, like every batch, by handing back spare slabs; an unpin frees
 * none itself. */
ssize_t memd_kv_unpin(struct memd_kv *kv, uint32_t tenant,
		      struct memd_kv_item *items, size_t n)
{
	return kv_batch(kv, tenant, items, n, 0, unpin_one, false);
}

size_t memd_kv_expire(struct memd_kv *kv, uint64_t now_ms)
{
	size_t n = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants; i++) {
		struct kv_tenant *t = kv->tenants[i];
		struct kv_entry *e, *next;

		for (e = t->reserved.head; e; e = next) {
			next = e->qnext;
			if (now_ms >= e->deadline_ms) {
				drop_reserved(kv, e);
				n++;
			}
		}
		for (e = t->leased; e; e = next) {
			next = e->lnext;
			if (now_ms < e->lease_until_ms)
				continue;
			n++;
			if (e->mem == MEM_DELETING)
				deleting_free(e);
			else
				lease_clear(e);
		}
		tenant_release_spare(kv, t);
	}
	pthread_mutex_unlock(&kv->lock);
	return n;
}

/* Evicts t's evictable committed entries with a block in slab sl. */
static uint64_t evict_in_slab(struct memd_kv *kv, struct kv_tenant *t,
			      const struct kv_slab *sl, uint64_t now_ms)
{
	struct kv_fifo *fifos[2] = { &t->small, &t->main };
	uint64_t n = 0;

	for (int f = 0; f < 2; f++) {
		struct kv_entry *e, *next;

		for (e = fifos[f]->tail; e; e = next) {
			bool here = false;

			next = e->qprev;
			for (uint32_t i = 0; i < e->nchunks && !here; i++)
				here = e->chunks[i].slab == sl;
			if (here && is_evictable(e, now_ms)) {
				evict_entry(kv, e, f == 0);
				n++;
			}
		}
	}
	return n;
}

ssize_t memd_kv_trim(struct memd_kv *kv, uint32_t tenant, uint32_t max_slabs,
		     uint64_t now_ms)
{
	struct kv_tenant *t;
	uint64_t n = 0;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	t = tenant_find(kv, tenant);
	if (t)
		tenant_release_empty(kv, t);
	for (uint32_t i = 0; t && i < t->nslabs; i++)
		t->slabs[i]->trim_tried = false;
	while (t && t->nslabs > max_slabs) {
		struct kv_slab *best = NULL;

		/* the slab with the fewest blocks in use costs least */
		for (uint32_t i = 0; i < t->nslabs; i++) {
			struct kv_slab *x = t->slabs[i];

			if (!x->trim_tried &&
			    (!best || x->nblocks - x->nfree <
					      best->nblocks - best->nfree))
				best = x;
		}
		if (!best)
			break; /* pinned, leased or reserved blocks everywhere */
		n += evict_in_slab(kv, t, best, now_ms);
		if (best->list != L_EMPTY)
			best->trim_tried = true;
		tenant_release_empty(kv, t);
	}
	pthread_mutex_unlock(&kv->lock);
	return (ssize_t)n;
}

/* ---- warm restart ---- */

struct scan_file {
	uint32_t tenant;
	uint8_t key[MEMD_KV_KEY_BYTES];
	uint64_t bytes;
	struct timespec mtime;
};

static int scan_file_cmp(const void *a, const void *b)
{
	const struct scan_file *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return 0;
}

/* Verifies one spill file: 0 (valid, *bytes), -EBADMSG, or -errno. */
static int scan_verify(const struct memd_kv *kv, int dirfd, const char *name,
		       uint32_t tenant, const uint8_t *key, uint8_t *buf,
		       size_t bufsize, struct scan_file *f)
{
	uint8_t hb[MEMD_KV_HEADER_BYTES], tag[TAG_BYTES], want[TAG_BYTES];
	struct wire_kv_header h;
	crypto_generichash_state st;
	struct stat sb;
	uint64_t off = 0, left;
	int fd, r;

	memset(want, 0, sizeof(want));

	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return errno == ELOOP ? -EBADMSG : -errno;
	r = fstat(fd, &sb) ? -errno : 0;
	if (r == 0 &&
	    (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size < SPILL_OVERHEAD + 1))
		r = -EBADMSG;
	if (r == 0)
		r = pread_all(fd, hb, sizeof(hb), 0);
	if (r == 0) {
		wire_kv_header_decode(hb, &h);
		if (h.magic != MEMD_KV_MAGIC || h.tenant_id != tenant ||
		    memcmp(h.key, key, MEMD_KV_KEY_BYTES) || h.chunk != 0 ||
		    h.value_len == 0 || h.value_len > kv->o.value_max_bytes ||
		    (uint64_t)sb.st_size != h.value_len + SPILL_OVERHEAD)
			r = -EBADMSG;
	}
	if (r == 0) {
		crypto_generichash_init(&st, NULL, 0, TAG_HASH_BYTES);
		crypto_generichash_update(&st, hb, sizeof(hb));
		off = MEMD_KV_HEADER_BYTES;
		left = h.value_len;
		while (r == 0 && left) {
			size_t n = left < bufsize ? (size_t)left : bufsize;

			r = pread_all(fd, buf, n, off);
			crypto_generichash_update(&st, buf, n);
			off += n;
			left -= n;
		}
		tag_final(&st, want);
	}
	if (r == 0)
		r = pread_all(fd, tag, sizeof(tag), off);
	if (r == 0 && sodium_memcmp(tag, want, sizeof(tag)))
		r = -EBADMSG;
	if (r == -EIO) /* short: the file changed size under us */
		r = -EBADMSG;
	close(fd);
	if (r == 0) {
		f->tenant = tenant;
		memcpy(f->key, key, MEMD_KV_KEY_BYTES);
		f->bytes = (uint64_t)sb.st_size;
		f->mtime = sb.st_mtim;
	}
	return r;
}

static bool parse_tenant(const char *s, uint32_t *out)
{
	unsigned long v;
	char *end;

	if (*s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

/* Scans one tenant directory, appending valid files to *files. */
static int scan_tenant_dir(struct memd_kv *kv, int topfd, const char *name,
			   uint32_t tenant, struct scan_file **files,
			   size_t *nfiles, size_t *cap, uint8_t *buf,
			   size_t bufsize, struct memd_kv_scan_result *res)
{
	int fd = openat(topfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct dirent *d;
	DIR *dir;
	int r = 0;

	if (fd < 0)
		return -errno;
	dir = fdopendir(fd);
	if (!dir) {
		r = -errno;
		close(fd);
		return r;
	}
	while ((d = readdir(dir))) {
		uint8_t key[MEMD_KV_KEY_BYTES];
		struct scan_file f;
		int v;

		if (!strcmp(d->d_name, ".") || !strcmp(d->d_name, ".."))
			continue;
		if (d->d_type == DT_DIR)
			continue;
		if (!key_unhex(d->d_name, key)) {
			/* a temp file of a spill cut short, or a stranger */
			if (unlinkat(fd, d->d_name, 0) == 0)
				res->deleted++;
			continue;
		}
		v = scan_verify(kv, fd, d->d_name, tenant, key, buf, bufsize,
				&f);
		if (v == -EBADMSG) {
			if (unlinkat(fd, d->d_name, 0) == 0)
				res->deleted++;
			continue;
		}
		if (v)
			continue; /* unreadable now (EMFILE...): left alone */
		if (*nfiles == *cap) {
			size_t c = *cap ? *cap * 2 : 64;
			struct scan_file *p = realloc(*files, c * sizeof(*p));

			if (!p) {
				r = -ENOMEM;
				break;
			}
			*files = p;
			*cap = c;
		}
		(*files)[(*nfiles)++] = f;
	}
	closedir(dir);
	return r;
}

int memd_kv_scan_spill(struct memd_kv *kv, struct memd_kv_scan_result *res)
{
	struct memd_kv_scan_result local;
	struct scan_file *files = NULL;
	size_t nfiles = 0, cap = 0;
	const size_t bufsize = 1u << 20;
	uint8_t *buf;
	struct dirent *d;
	DIR *top;
	int r = 0;

	if (!res)
		res = &local;
	memset(res, 0, sizeof(*res));
	if (!kv)
		return -EINVAL;
	if (!kv->spill_dir)
		return 0;
	buf = malloc(bufsize);
	if (!buf)
		return -ENOMEM;
	pthread_mutex_lock(&kv->lock);
	kv->spill_membership = spill_membership_read(kv);
	res->membership = kv->spill_membership;
	top = opendir(kv->spill_dir);
	if (!top) {
		r = -errno;
		goto out;
	}
	while (r == 0 && (d = readdir(top))) {
		uint32_t tenant;

		if (d->d_type != DT_DIR && d->d_type != DT_UNKNOWN)
			continue;
		if (!parse_tenant(d->d_name, &tenant))
			continue;
		r = scan_tenant_dir(kv, dirfd(top), d->d_name, tenant, &files,
				    &nfiles, &cap, buf, bufsize, res);
		if (r == -ENOTDIR)
			r = 0;
	}
	closedir(top);
	if (r)
		goto out;
	if (nfiles) /* qsort(NULL, 0, ...) is undefined behaviour */
		qsort(files, nfiles, sizeof(*files), scan_file_cmp);
	for (size_t i = 0; i < nfiles; i++) {
		struct kv_tenant *t = tenant_get(kv, files[i].tenant);
		struct kv_entry *e;

		if (!t) {
			r = -ENOMEM;
			break;
		}
		e = index_find(kv, t, files[i].key);
		if (e && e->spilled)
			continue;
		if (!e && !(e = entry_new(kv, t, files[i].key))) {
			r = -ENOMEM;
			break;
		}
		spill_append(kv, e, files[i].bytes);
		res->files++;
		res->bytes += files[i].bytes;
	}
	if (r == 0) {
		uint64_t before = kv->spill_used;

		res->dropped = spill_trim(kv, 0);
		res->files -= res->dropped;
		res->bytes -= before - kv->spill_used;
	}
out:
	pthread_mutex_unlock(&kv->lock);
	free(files);
	free(buf);
	return r;
}

uint64_t memd_kv_spill_membership(struct memd_kv *kv)
{
	uint64_t m;

	pthread_mutex_lock(&kv->lock);
	m = kv->spill_membership;
	pthread_mutex_unlock(&kv->lock);
	return m;
}

int memd_kv_spill_membership_set(struct memd_kv *kv, uint64_t membership)
{
	int r = 0;

	if (!kv)
		return -EINVAL;
	if (!kv->spill_dir)
		return 0;
	pthread_mutex_lock(&kv->lock);
	if (membership != kv->spill_membership) {
		/* whatever happens, it no longer names what is on disk
		 * (a failed write may have left the old file: that one is
		 * older than membership, so names no later list) */
		kv->spill_membership = membership;
		r = spill_membership_write(kv, membership);
	}
	pthread_mutex_unlock(&kv->lock);
	return r;
}

void memd_kv_get_stats(struct memd_kv *kv, uint32_t tenant,
		       struct memd_kv_stats *st)
{
	struct kv_tenant *t;

	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&kv->lock);
	t = tenant_find(kv, tenant);
	if (t) {
		*st = t->st;
		st->slabs = t->nslabs;
		st->bytes_held = (uint64_t)t->nslabs * kv->o.slab_bytes;
		st->bytes_used = t->bytes_used;
		st->entries = t->small.count + t->main.count;
		st->reserved = t->reserved.count;
		st->spilled = t->spilled;
		st->spill_bytes = t->spill_bytes;
	}
	pthread_mutex_unlock(&kv->lock);
}

int memd_kv_curve(struct memd_kv *kv, uint32_t tenant, const uint64_t *sizes,
		  double *at, size_t nsizes, struct memd_kv_curve *c)
{
	struct kv_tenant *t;
	int r = -ENOENT;

	memset(c, 0, sizeof(*c));
	pthread_mutex_lock(&kv->lock);
	t = tenant_find(kv, tenant);
	if (t && t->mrc) {
		memd_mrc_get_info(t->mrc, &c->info);
		c->npoints = memd_mrc_points(t->mrc, 8, c->bytes, c->hit,
					     MEMD_KV_CURVE_POINTS);
		for (size_t i = 0; i < nsizes; i++)
			at[i] = memd_mrc_hit_ratio(t->mrc, sizes[i]);
		r = 0;
	}
	pthread_mutex_unlock(&kv->lock);
	return r;
}

/* Whether e's spill file carries t's binding (0), another (-EBADMSG), or
 * cannot be read now (-errno). */
static int spill_check_bind(struct memd_kv *kv, struct kv_entry *e)
{
	uint8_t hb[MEMD_KV_HEADER_BYTES], tags[2 * TAG_BYTES], want[TAG_BYTES];
	char path[PATH_MAX];
	uint64_t vlen;
	int fd, r;

	if ((r = spill_path(kv, e->t->id, e->key, false, path, sizeof(path))))
		return r;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -EBADMSG : -errno;
	vlen = e->spill_file_bytes - SPILL_OVERHEAD;
	r = pread_all(fd, hb, sizeof(hb), 0);
	if (r == 0)
		r = pread_all(fd, tags, sizeof(tags),
			      MEMD_KV_HEADER_BYTES + vlen);
	close(fd);
	if (r == -EIO)
		r = -EBADMSG; /* shorter than indexed */
	if (r)
		return r;
	spill_bind_tag(e->t, hb, tags, want);
	return sodium_memcmp(tags + TAG_BYTES, want, TAG_BYTES) ? -EBADMSG : 0;
}

/* Forgets every entry of t, in memory and spilled (files deleted);
 * entries under read leases go when the leases end. Returns how many. */
static uint64_t tenant_purge(struct memd_kv *kv, struct kv_tenant *t,
			     uint64_t now_ms)
{
	uint64_t n = 0;

	for (uint32_t b = 0; b < t->nbuckets; b++) {
		struct kv_entry *e = t->bucket[b], *next;

		for (; e; e = next) {
			next = e->hnext;
			n++;
			if (e->mem == MEM_RESERVED)
				drop_reserved(kv, e);
			else if (e->mem == MEM_NONE) {
				spill_forget(kv, e, true);
				queue_remove(e);
				entry_maybe_free(kv, e);
			} else {
				struct memd_kv_item it = { .status = 0 };

				memcpy(it.key, e->key, MEMD_KV_KEY_BYTES);
				delete_one(kv, t, &it, now_ms, false);
			}
		}
	}
	tenant_release_spare(kv, t);
	return n;
}

ssize_t memd_kv_bind_tenant(struct memd_kv *kv, uint32_t tenant,
			    const uint8_t bind[MEMD_KV_BIND_BYTES],
			    uint64_t now_ms)
{
	struct kv_tenant *t;
	ssize_t rc = 0;

	if (!kv || !bind)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	t = tenant_get(kv, tenant);
	if (!t) {
		rc = -ENOMEM;
		goto out;
	}
	if (t->bound && !memcmp(t->bind, bind, sizeof(t->bind)))
		goto out;
	if (t->bound) {
		/* Another tenant under the same id (a new registry): nothing
		 * of the old one may reach it. */
		rc = (ssize_t)tenant_purge(kv, t, now_ms);
		memcpy(t->bind, bind, sizeof(t->bind));
		goto out;
	}
	memcpy(t->bind, bind, sizeof(t->bind));
	t->bound = true;
	/* Files found at start (memd_kv_scan_spill) are served only if
	 * they carry this binding. */
	for (struct kv_entry *e = kv->spill_head, *next; e; e = next) {
		next = e->snext;
		if (e->t != t || spill_check_bind(kv, e) != -EBADMSG)
			continue;
		spill_forget(kv, e, true);
		rc++;
		if (e->mem == MEM_NONE) {
			queue_remove(e);
			entry_maybe_free(kv, e);
		}
	}
out:
	pthread_mutex_unlock(&kv->lock);
	return rc;
}

/* Forgets tenant's entries and deletes its spill files; removed: the
 * tenant is gone for good (memd_kv_remove_tenant), else it stays, with
 * nothing (memd_kv_forget_all). kv->lock held. */
static ssize_t tenant_forget_locked(struct memd_kv *kv, uint32_t tenant,
				    uint64_t now_ms, bool removed)
{
	char dir[PATH_MAX];
	struct kv_tenant *t;
	ssize_t n = 0;

	t = tenant_find(kv, tenant);
	if (t) {
		n = (ssize_t)tenant_purge(kv, t, now_ms);
		t->removed = t->removed || removed;
	}
	/* files of the tenant's that were never indexed go too */
	if (kv->spill_dir &&
	    spill_path(kv, tenant, NULL, false, dir, sizeof(dir)) == 0) {
		DIR *d = opendir(dir);
		struct dirent *de;

		if (d) {
			while ((de = readdir(d)))
				if (de->d_name[0] != '.' ||
				    strstr(de->d_name, ".tmp"))
					unlinkat(dirfd(d), de->d_name, 0);
			closedir(d);
			rmdir(dir);
		}
	}
	return n;
}

ssize_t memd_kv_remove_tenant(struct memd_kv *kv, uint32_t tenant,
			      uint64_t now_ms)
{
	ssize_t n;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	n = tenant_forget_locked(kv, tenant, now_ms, true);
	pthread_mutex_unlock(&kv->lock);
	return n;
}

ssize_t memd_kv_forget_all(struct memd_kv *kv, uint64_t now_ms)
{
	ssize_t n = 0;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants; i++)
		if (!kv->tenants[i]->removed)
			n += tenant_forget_locked(kv, kv->tenants[i]->id,
						  now_ms, false);
	pthread_mutex_unlock(&kv->lock);
	return n;
}

ssize_t memd_kv_forget_unless(struct memd_kv *kv,
			      bool (*keep)(const uint8_t *key, void *arg),
			      void *arg, uint64_t now_ms)
{
	ssize_t n = 0;

	if (!kv || !keep)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants; i++) {
		struct kv_tenant *t = kv->tenants[i];

		for (uint32_t b = 0; b < t->nbuckets; b++) {
			struct kv_entry *e = t->bucket[b], *next;

			for (; e; e = next) {
				next = e->hnext;
				if (e->busy || keep(e->key, arg))
					continue;
				if (e->mem == MEM_RESERVED) {
					drop_reserved(kv, e);
					n++;
				} else if (e->mem == MEM_NONE) {
					n += e->spilled;
					spill_forget(kv, e, true);
					queue_remove(e);
					entry_maybe_free(kv, e);
				} else {
					struct memd_kv_item it = { .status =
									   0 };

					memcpy(it.key, e->key,
					       MEMD_KV_KEY_BYTES);
					n += delete_one(kv, t, &it, now_ms,
							false) == 0;
				}
			}
		}
		tenant_release_spare(kv, t);
	}
	pthread_mutex_unlock(&kv->lock);
	return n;
}

ssize_t memd_kv_clear(struct memd_kv *kv, uint32_t tenant, uint64_t now_ms)
{
	ssize_t n;

	if (!kv)
		return -EINVAL;
	pthread_mutex_lock(&kv->lock);
	n = tenant_forget_locked(kv, tenant, now_ms, false);
	pthread_mutex_unlock(&kv->lock);
	return n;
}

size_t memd_kv_tenant_ids(struct memd_kv *kv, uint32_t *ids, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&kv->lock);
	for (size_t i = 0; i < kv->ntenants && n < max; i++)
		if (!kv->tenants[i]->removed)
			ids[n++] = kv->tenants[i]->id;
	pthread_mutex_unlock(&kv->lock);
	return n;
}
