/* SPDX-License-Identifier: MIT */
/*
 * bench/benchutil.h - what poolbench and rawfab share: argument parsing
 * (sizes, lists), a latency recorder with percentiles, the depth driver
 * that keeps N operations in flight from one thread, and the one-line
 * result format the scripts parse.
 *
 * Nothing here is thread-safe unless said so: each measuring thread owns
 * its own struct bench_lat and struct bench_engine.
 */
#ifndef TP_BENCH_BENCHUTIL_H
#define TP_BENCH_BENCHUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Most entries a --sizes or --depths list may have. */
#define BENCH_LIST_MAX 16
/* Largest depth (operations in flight) we drive. */
#define BENCH_DEPTH_MAX 256

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t bench_now_ns(void);

/*
 * Parses a byte size: digits with an optional binary suffix K, M, G, T
 * (optionally followed by "iB" or "B"; case-insensitive): "4096", "4K",
 * "64KiB", "1M", "256M". Returns 0 and *out, or -EINVAL (not a size, or 0)
 * or -ERANGE (overflows 64 bits).
 */
int bench_parse_size(const char *s, uint64_t *out);
/* Comma-separated sizes; at most max of them. Returns 0, -EINVAL or
 * -E2BIG (too many). */
int bench_parse_sizes(const char *s, uint64_t *v, unsigned max, unsigned *n);
/* Comma-separated positive integers up to lim. Same returns. */
int bench_parse_uints(const char *s, unsigned lim, unsigned *v, unsigned max,
		      unsigned *n);
/* Positive decimal seconds ("2", "0.5"). Returns 0 or -EINVAL. */
int bench_parse_seconds(const char *s, double *out);
/* "read", "write" or "read,write" into two flags. Returns 0 or -EINVAL. */
int bench_parse_rw(const char *s, bool *read, bool *write);

/* Human size: "4 KiB", "256 MiB", "1.5 GiB", "100 B". */
void bench_fmt_size(char *buf, size_t len, uint64_t bytes);

/*
 * Latencies of one measured point, in nanoseconds. Grows as needed; when
 * memory runs out further samples are dropped and counted, so a long run
 * never fails for want of a percentile.
 */
struct bench_lat {
	uint64_t *ns;
	size_t n, cap;
	uint64_t dropped;
	bool sorted;
};

void bench_lat_init(struct bench_lat *l);
void bench_lat_fini(struct bench_lat *l);
void bench_lat_reset(struct bench_lat *l);
void bench_lat_add(struct bench_lat *l, uint64_t ns);
/* Appends every sample of src to dst. Returns 0 or -ENOMEM. */
int bench_lat_merge(struct bench_lat *dst, const struct bench_lat *src);
/* The p-th percentile (0 < p <= 100, nearest rank) in ns; 0 when empty. */
uint64_t bench_lat_pct(struct bench_lat *l, double p);
/* Mean in ns; 0 when empty. */
uint64_t bench_lat_mean(const struct bench_lat *l);

/*
 * What the depth driver drives. start begins the operation of a slot
 * (0 .. depth-1) on [off, off+len) of the target, reading the target
 * into the slot's buffer or writing the slot's buffer to it; finish waits
 * for that slot's operation and returns its result. Both return 0 or
 * -errno. A slot is started again only after it was finished. Slots are
 * finished in the order they were started.
 */
struct bench_engine {
	int (*start)(void *ctx, unsigned slot, uint64_t off, size_t len,
		     bool write);
	int (*finish)(void *ctx, unsigned slot);
	void *ctx;
};

struct bench_spec {
	uint64_t size;	 /* bytes per operation */
	uint64_t region; /* target bytes the offsets cycle over */
	unsigned depth;	 /* operations in flight, 1 .. BENCH_DEPTH_MAX */
	bool write;
	double seconds; /* measure this long ... */
	uint64_t count; /* ... or this many ops when not 0 */
	double warmup;	/* unmeasured seconds first (at full depth) */
	/* Lanes split the region's offsets between threads: lane i of n
	 * uses the offsets of operations i, i+n, i+2n, ... */
	unsigned lane, nlanes;
};

struct bench_result {
	uint64_t ops; /* completed in the measured phase */
	uint64_t elapsed_ns;
	uint64_t cpu_ns;      /* CPU time of the calling thread in that phase */
	struct bench_lat lat; /* post to completion, per op */
};

/*
 * Runs one point: warm-up, then the measured phase, keeping spec->depth
 * operations in flight; each op's latency is from its start call to the
 * return of its finish call. res->lat must be initialised; it is reset.
 * Returns 0, or the first -errno of start/finish (every op in flight is
 * finished before returning), or -EINVAL for a bad spec.
 */
int bench_run(const struct bench_engine *e, const struct bench_spec *spec,
	      struct bench_result *res);

/* CPU time (user + system) the calling thread has used, in ns. */
uint64_t bench_thread_cpu_ns(void);

/*
 * Prints the machine-readable line of a point:
 *   BENCH op=read size=4096 depth=16 threads=1 api=async ops=N secs=S
 *   ops_s=.. MBps=.. p50_us=.. p99_us=.. mean_us=.. p90_us=.. p999_us=..
 *   cpu_us=..
 * MBps is 10^6 bytes per second; cpu_us is the measuring threads' CPU
 * time per operation. extra (may be NULL) is appended as is.
 */
void bench_print(FILE *f, const char *bench, const char *op, uint64_t size,
		 unsigned depth, unsigned threads, const char *api,
		 struct bench_result *res, const char *extra);

/* Page-aligned, pre-faulted buffer of len bytes, or NULL. free() it. */
void *bench_buf_alloc(size_t len);

#endif
