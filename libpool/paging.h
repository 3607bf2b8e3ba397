/* SPDX-License-Identifier: MIT */
/*
 * libpool/paging.h - project-internal view of the paging engine
 * (libpool/paging.c, tidepool/pool_map.h): counters for tests, benchmarks
 * and the preload shim. Not exported from libpool.so.
 */
#ifndef TP_LIBPOOL_PAGING_H
#define TP_LIBPOOL_PAGING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tidepool/pool_map.h"

struct pool_map_stats {
	uint64_t faults;     /* missing-page faults served */
	uint64_t wp_faults;  /* first writes to write-protected pages */
	uint64_t zero_fills; /* pages served as zeros without a network trip */
	uint64_t fetches;    /* pool_read calls made to serve faults */
	uint64_t pages_fetched; /* pages they brought in (read-ahead incl.) */
	uint64_t evictions;	/* pages dropped from the resident set */
	uint64_t writebacks;	/* pages written back to the region */
	uint64_t sigbus;   /* faults answered with SIGBUS (mapping failed) */
	uint64_t resident; /* pages resident now */
	uint64_t max_resident;	/* the local budget, pages */
	uint64_t resident_peak; /* most pages ever resident at once */
	uint64_t ahead_pages;	/* fetched pages installed ahead of a stream */
	uint64_t warmups; /* warm-up reads started (first map of a session) */
	uint64_t page_bytes;	 /* the unit paged: 4096, or 2 MiB huge pages */
	uint64_t huge_short;	 /* huge-page installs that found the kernel's
			      * pool empty and evicted one of ours first */
	uint64_t second_chances; /* 4 KiB CLOCK: marked pages the hand spared */
	uint64_t refaults;  /* pages fetched again soon after their eviction */
	uint64_t discarded; /* pages dropped unwritten: pool_map_discard() */
	uint64_t
		batches; /* fetch_batch(): faults of threads fetched together */
	uint64_t behind_evictions;   /* 4 KiB pages evicted behind a stream
				    * (LIBPOOL_PAGING_BEHIND) */
	uint64_t clock_fifo_windows; /* adaptive CLOCK: windows of a budget's
				      * pages evicted oldest first */
	uint64_t uffd_retries; /* page-table ioctls retried after EAGAIN */
	uint64_t fork_fetched; /* pages fetched before a fork() for the child:
				* see docs/paging.md, "fork()" */
	bool user_mode_only;   /* UFFD_USER_MODE_ONLY: kernel accesses EFAULT */
	int failed;	       /* 0, or the -errno that failed the mapping */
};

/*
 * Counters of the mapping that contains addr. Any thread; the values are
 * read one by one (each exact, the set not a snapshot). Returns 0 or
 * -EINVAL (addr is not inside a mapping, st is NULL).
 */
int pool_map_get_stats(const void *addr, struct pool_map_stats *st);

/*
 * A growable mapping (the preload shim's heap): max_bytes of address space
 * (rounded down to whole segments) paged like pool_map() in 4 KiB pages
 * under a budget of local_bytes (0: $LIBPOOL_LOCAL_BYTES or 256 MiB),
 * backed by regions of seg_bytes each (a power of two) that
 * pool_map_grow() appends in address order. Pages of segments not
 * appended yet must not be touched. Ends with pool_unmap(); the regions
 * stay the caller's. Returns 0 and *addr, or pool_map()'s errors
 * (-EINVAL also for a seg_bytes that is not a power of two of at least
 * a page, or max_bytes under seg_bytes).
 */
int pool_map_reserve(struct pool *p, size_t max_bytes, size_t seg_bytes,
		     size_t local_bytes, void **addr);

/*
 * Appends region r (at least the segment size) as the next segment of the
 * growable mapping at addr. Any thread. Returns 0, -ENOSPC (every segment
 * is appended) or -EINVAL (addr is no growable mapping, r too small).
 */
int pool_map_grow(void *addr, struct pool_region *r);

/*
 * Drops pages [start, start + len) of the mapping at addr (page-aligned):
 * they read as zero afterwards and nothing of them is written back (the
 * preload shim's heap: memory jemalloc purges). The caller must not touch
 * the range meanwhile. Any thread; waits for the faults being served.
 * Returns 0, -EINVAL (no such mapping, range outside it or not aligned)
 * or madvise()'s -errno (the pages then read as zero all the same once
 * dropped later: their state says so).
 */
int pool_map_discard(void *addr, void *start, size_t len);

/* Bytes of the growable mapping at addr that segments back (0: none). */
size_t pool_map_grown_bytes(const void *addr);

/*
 * The process budget: bytes resident in all mappings together (every
 * mapping also keeps its own, pool_map()'s local_bytes). Default: set
 * by LIBPOOL_LOCAL_BYTES when the engine starts (the first mapping),
 * else none. SIZE_MAX: none. Returns 0 or -EINVAL (under 256 KiB).
 */
int pool_paging_set_process_budget(size_t bytes);

/* The engine's steps that pool_paging_get_engine_stats() times; the
 * names of pool_paging_phase_name() are the shim's stats line's. */
enum pool_paging_phase {
	POOL_PHASE_WAIT,      /* poll/spin for the next message */
	POOL_PHASE_LOCK,      /* taking pg_eng.lock */
	POOL_PHASE_READ,      /* read() of the userfaultfd's messages */
	POOL_PHASE_SERVE,     /* serving one batch of messages */
	POOL_PHASE_FETCH,     /* pool_read() of a fault's run */
	POOL_PHASE_INSTALL,   /* UFFDIO_COPY of a fetched run (and wake,
			       * but see POOL_PHASE_WAKE) */
	POOL_PHASE_ZERO,      /* zero fills and zero pages */
	POOL_PHASE_ROOM,      /* make_room(): eviction on the fault path */
	POOL_PHASE_PROTECT,   /* write-protect of dirty victims */
	POOL_PHASE_COPYOUT,   /* copying dirty victims to stage_out */
	POOL_PHASE_WRITEBACK, /* their pool_write_async() and waits */
	POOL_PHASE_DROP,      /* MADV_DONTNEED of the victims */
	POOL_PHASE_WP,	      /* WP faults (unprotect and wake) */
	POOL_PHASE_AHEAD,     /* install-ahead between faults */
	POOL_PHASE_WAKE,      /* with LIBPOOL_PAGING_WAKE_SPLIT=1 only: the
			       * UFFDIO_WAKE of a fetch's faulting thread,
			       * out of install (a measurement) */
	POOL_PHASE_LATE,      /* a fetch's victims dropped after its thread
			       * was woken (LIBPOOL_PAGING_LATE_DROP):
			       * in serve, not in the fault's service */
	POOL_PHASE_N
};
const char *pool_paging_phase_name(unsigned phase);

/*
 * The engine's waiting for faults (process-wide, since the process
 * started; docs/paging.md, "Waiting for faults"): spin_cap_ns the cap of
 * the spin window (LIBPOOL_PAGING_SPIN_US; 0: pool-uffd never spins),
 * waits the times pool-uffd waited for a fault with spinning on,
 * spin_hits those a spin caught, spin_misses spins that ended in a
 * sleep, spin_ns the time spent spinning (CPU that pool-uffd burnt).
 */
struct pool_paging_engine_stats {
	uint64_t spin_cap_ns, waits, spin_hits, spin_misses, spin_ns;
	/* Where pool-uffd's time went, per step (POOL_PHASE_*): nanoseconds
	 * and times taken, summed since the process started (CLOCK_MONOTONIC
	 * stamps around each step; docs/bench/paging.md, "Where a fault's
	 * time goes"). Steps nest: serve holds the rest but wait, lock and
	 * read; room holds protect, copyout, writeback and drop. */
	uint64_t phase_ns[POOL_PHASE_N], phase_n[POOL_PHASE_N];
	/* Pages fetched without a read: installed straight from the
	 * same-host path's mapping of their slab (LIBPOOL_SHM=map;
	 * LIBPOOL_PAGING_DIRECT=0 turns it off). */
	uint64_t direct_pages;
};
void pool_paging_get_engine_stats(struct pool_paging_engine_stats *st);

/* Reads the "Key:" fields of a /proc status file (path, e.g.
 * /proc/self/status) without stdio or malloc, so that a fault handler
 * or the preload shim may call it: vals[i] = the number after keys[i]
 * in base (0 where the file lacks it). Returns 0, or -errno where path
 * cannot be opened (vals untouched). */
int pool_proc_status_fields(const char *path, const char *const *keys,
			    size_t nkeys, int base, unsigned long long *vals);

#endif
