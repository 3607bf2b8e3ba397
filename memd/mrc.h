/* SPDX-License-Identifier: MIT */
/*
 * memd/mrc.h - a tenant's miss-ratio curve for memd's S3-FIFO store,
 * estimated online with miniature simulations (Waldspurger et al., ATC
 * '17) over a fixed-size SHARDS sample (FAST '15), byte-weighted, over a
 * sliding window (docs/capacity.md). The sample's LRU curve is kept as a
 * reference (memd_mrc_lru_*).
 *
 * The caller feeds every reference to a key as its 64-bit spatial hash
 * (a keyed hash of the key, uniform over 0 .. 2^64 - 1) and the bytes the
 * key takes in the cache (its blocks). Only keys whose hash is below a
 * threshold T are tracked (the sampling rate is R = T / 2^64); the first
 * sample_max keys seen set no threshold, then each new key below T pushes
 * out the tracked key with the largest hash and T drops to that hash
 * (the fixed-size variant: memory bounded, rate adapts to the number of
 * distinct keys).
 *
 * For a tracked key referenced again, its reuse distance is the bytes of
 * the distinct tracked keys referenced since its previous reference,
 * scaled by 1 / R, plus its own bytes: under LRU with a capacity of C
 * bytes the reference hits exactly when that distance is <= C. A
 * counted reference (a request: a lookup, an exists) adds weight 1 / R at
 * its distance to the histogram (first references: at infinity); an
 * uncounted one (a put) only moves the key to the top of the stack with
 * its new size, as inserting it into an LRU cache does. Stack positions
 * are timestamps in a Fenwick tree of bytes; distance = bytes at later
 * timestamps, O(log sample_max) per reference, compacted (O(slots)) when
 * the timestamps run out, amortized O(1).
 *
 * Miniature simulations: MEMD_MRC_SIM_N stores, one per size S on a
 * grid (2 per doubling, 1 MiB .. 16 TiB), each evicting as
 * memd/kvstore_evict.c does (S3-FIFO: a small queue of 10 % of the
 * bytes, main, ghosts as many as resident keys, frequency up to 3) over
 * the tracked keys only, with a
 * capacity of S x R bytes (a key counts its full bytes). A counted
 * reference to a resident key is a hit (weight 1 / R); a miss, or a put
 * of an absent key, inserts it when its size is known (a first request
 * of a key never put waits for the put). When R drops, the key pushed
 * out leaves every store and the capacities shrink to S x R (evicting).
 * O(MEMD_MRC_SIM_N) per sampled reference, but the stores above the
 * smallest one that never evicted are not simulated: they hold what it
 * holds (the same keys in the same queues), so only their hits are
 * counted, until it first evicts and the next one takes a copy of its
 * queues (results bit-identical to simulating every store).
 *
 * Sliding window: two histograms; when the current one holds window_refs
 * sampled counted references it becomes the previous one and a fresh one
 * starts; the curve is their sum (the last window_refs .. 2 window_refs
 * sampled requests), and the same for each store's hits. Tracked keys,
 * their stack positions and the stores' contents persist.
 *
 * Histogram: [0, MEMD_MRC_MIN_BYTES), then MEMD_MRC_SUB equal buckets
 * per doubling (HDR-style: at most 1/32 = 3.1 % wide); the hit ratio at C
 * interpolates linearly inside C's bucket.
 *
 * Memory: memd_mrc_bytes(); at most MEMD_MRC_FIXED_BYTES + sample_max *
 * (MEMD_MRC_BYTES_PER_SAMPLE + MEMD_MRC_SIM_BYTES_PER_SAMPLE), all
 * allocated by memd_mrc_create (8192 samples: 4.04 MiB).
 *
 * Not thread-safe: the owner (memd's KV store) calls it under its lock.
 */
#ifndef TP_MEMD_MRC_H
#define TP_MEMD_MRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEMD_MRC_SUB 32		   /* histogram buckets per doubling */
#define MEMD_MRC_MIN_BYTES 4096ull /* first bucket: [0, 4 KiB) */
#define MEMD_MRC_DOUBLINGS 48	   /* then 4 KiB .. 2^60 bytes */
#define MEMD_MRC_NBUCKETS (MEMD_MRC_SUB * MEMD_MRC_DOUBLINGS + 1)
#define MEMD_MRC_SAMPLE_MAX (1u << 20) /* cap on sample_max */
/* per tracked key: its entry (32), hash-table head (8), heap slot (4),
 * free-list slot (4), two timestamps (2 x (4 + 8)) */
#define MEMD_MRC_BYTES_PER_SAMPLE 72u
/* the two histograms and the structure itself */
/* the miniature S3-FIFO stores: sizes 2^(LO_SHIFT + k / PER_DOUBLING)
 * for k in 0 .. SIM_N - 1, 1 MiB .. 16 TiB */
#define MEMD_MRC_SIM_LO_SHIFT 20
#define MEMD_MRC_SIM_PER_DOUBLING 2
#define MEMD_MRC_SIM_N 49
/* per tracked key and store: two links (2 x 4) and a state byte */
#define MEMD_MRC_SIM_BYTES_PER_SAMPLE (MEMD_MRC_SIM_N * 9u)
/* the two histograms, the stores' heads and the structure itself */
#define MEMD_MRC_FIXED_BYTES                                                   \
	(2u * MEMD_MRC_NBUCKETS * 8u + MEMD_MRC_SIM_N * 112u + 512u)

struct memd_mrc;

/*
 * Creates a curve tracking at most sample_max keys (16 .. 2^20),
 * rotating its window every window_refs sampled requests (0: 4 *
 * sample_max). Returns 0, -EINVAL, -ENOMEM.
 */
int memd_mrc_create(uint32_t sample_max, uint64_t window_refs,
		    struct memd_mrc **out);
/* NULL is a no-op. */
void memd_mrc_destroy(struct memd_mrc *m);

/*
 * One reference to the key of spatial hash h, which takes bytes in the
 * cache (0: unknown, e.g. a miss of a key never put: keeps the size last
 * seen). counted: a request (its distance goes to the histogram); else a
 * touch (a put). Returns true when the key is tracked (sampled).
 */
bool memd_mrc_access(struct memd_mrc *m, uint64_t h, uint64_t bytes,
		     bool counted);
/* Forgets the key (deleted): a later reference is a first one. */
void memd_mrc_forget(struct memd_mrc *m, uint64_t h);

/*
 * The estimated hit ratio (0 .. 1) of requests with memd's S3-FIFO store
 * of cache_bytes, over the window, from the miniature stores: between
 * two grid sizes, linear in log2 of the size; below the first, linear
 * from 0; above the last, the last's. 0 when nothing is recorded.
 */
double memd_mrc_hit_ratio(const struct memd_mrc *m, uint64_t cache_bytes);
/* The same for an LRU cache, from the SHARDS histogram (a reference:
 * memd does not evict with LRU). */
double memd_mrc_lru_hit_ratio(const struct memd_mrc *m, uint64_t cache_bytes);
/* Miniature store k (0 .. MEMD_MRC_SIM_N - 1): its size in bytes, and
 * its hit ratio over the window. */
uint64_t memd_mrc_sim_size(unsigned k);
double memd_mrc_sim_hit_ratio(const struct memd_mrc *m, unsigned k);

struct memd_mrc_info {
	double rate;		 /* sampling rate R, 0 .. 1 */
	uint32_t sample_max;	 /* tracked keys at most */
	uint32_t tracked;	 /* tracked keys now */
	uint64_t window_samples; /* sampled requests in the window */
	double window_requests;	 /* their weight: estimated requests */
	uint64_t window_refs;	 /* requests seen in the window, all */
	uint64_t bytes;		 /* memory held, memd_mrc_bytes */
};
void memd_mrc_get_info(const struct memd_mrc *m, struct memd_mrc_info *i);
/* Memory this curve holds, in bytes. */
size_t memd_mrc_bytes(const struct memd_mrc *m);

/*
 * The S3-FIFO curve as points on a geometric grid of per_doubling
 * (1 .. 64) steps per doubling, from the lower edge of the smallest
 * recorded LRU distance to 4 x the upper edge of the largest finite one
 * (at most the last store's size): sizes in bytes and the hit ratio at
 * each (memd_mrc_hit_ratio; not necessarily non-decreasing: S3-FIFO is
 * not a stack algorithm). At most max points; returns the number written
 * (0 when nothing finite is recorded).
 */
size_t memd_mrc_points(const struct memd_mrc *m, unsigned per_doubling,
		       uint64_t *bytes, double *hit, size_t max);
/* The same for the LRU curve, up to the largest distance (non-decreasing). */
size_t memd_mrc_lru_points(const struct memd_mrc *m, unsigned per_doubling,
			   uint64_t *bytes, double *hit, size_t max);

#endif
