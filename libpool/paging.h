/* SPDX-License-Identifier: MIT */
/*
 * libpool/paging.h - project-internal view of the paging engine
 * (libpool/paging.c, tidepool/pool_map.h): counters for tests, benchmarks
 * and the preload shim. Not exported from libpool.so.
 */
#ifndef TP_LIBPOOL_PAGING_H
#define TP_LIBPOOL_PAGING_H

#include <stdbool.h>
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
	uint64_t page_bytes; /* the unit paged: 4096, or 2 MiB huge pages */
	uint64_t huge_short; /* huge-page installs that found the kernel's
			      * pool empty and evicted one of ours first */
	bool user_mode_only; /* UFFD_USER_MODE_ONLY: kernel accesses EFAULT */
	int failed;	     /* 0, or the -errno that failed the mapping */
};

/*
 * Counters of the mapping that contains addr. Any thread; the values are
 * read one by one (each exact, the set not a snapshot). Returns 0 or
 * -EINVAL (addr is not inside a mapping, st is NULL).
 */
int pool_map_get_stats(const void *addr, struct pool_map_stats *st);

/*
 * Whether the calling thread is a paging engine thread (pool-uffd). The
 * preload shim sends such a thread's allocations to libc: memory the
 * engine (or libfabric under it) allocates must never be pooled memory
 * that the engine itself would have to fault in.
 */
bool pool_paging_is_engine_thread(void);

#endif
