/* SPDX-License-Identifier: MIT */
/*
 * bench/benchutil.h - what poolbench and rawfab share: argument parsing
 * (sizes, lists, the options of a sweep of points), a latency recorder
 * with percentiles, the depth driver that keeps N operations in flight
 * from one thread, the sweep over sizes x depths x read/write, and the
 * one-line result format the scripts parse; and the slabs kvsample and
 * kvforget hand to a memd KV store.
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

/* CLOCK_MONOTONIC in nanoseconds; bench_now_us in microseconds. */
uint64_t bench_now_ns(void);
double bench_now_us(void);

/* Sorts v[0 .. n) ascending (for percentiles: v[n / 2] is the median). */
void bench_sort_doubles(double *v, size_t n);

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
	/* Not 0: the server process whose CPU time (bench_proc_cpu_ns) is
	 * read at the start and the end of the measured phase. */
	int srv_pid;
};

struct bench_result {
	uint64_t ops; /* completed in the measured phase */
	uint64_t elapsed_ns;
	uint64_t cpu_ns;      /* CPU time of the calling thread in that phase */
	struct bench_lat lat; /* post to completion, per op */
	/* The server's CPU time over the measured phase (spec->srv_pid);
	 * srv_cpu_valid false when not asked for or not readable. */
	uint64_t srv_cpu_ns;
	bool srv_cpu_valid;
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
 * CPU time (utime + stime of /proc/PID/stat, every thread of the
 * process; clock-tick resolution, 10 ms where CLK_TCK is 100) of process
 * pid into *ns. Returns 0, or -errno: -ENOENT (no such process), -EIO
 * (a stat line it cannot parse).
 */
int bench_proc_cpu_ns(int pid, uint64_t *ns);

/*
 * Takes the argument of a --server-pid option: a process id whose
 * /proc/PID/stat bench_proc_cpu_ns can read, into *pid. Returns 0, or 2
 * after a bench_bad_arg line saying what is wrong.
 */
int bench_parse_server_pid(const char *arg, const char *prog, int *pid);

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

struct iovec;

/*
 * A TCP connection to HOST:PORT (split at the last ':'), TCP_NODELAY and
 * close-on-exec set, into *fd (-1 on failure). Returns 0, -EINVAL (not
 * HOST:PORT, or a host or port that does not resolve) or connect's
 * -errno. The peers' clients (kvbench's redis and memcached tiers,
 * mcbench) use it.
 */
int bench_tcp_connect(const char *hostport, int *fd);

/* Writes iov[0 .. n) to the blocking fd whole, going on after short
 * writes (iov is consumed). Returns 0 or -EIO. */
int bench_writev_all(int fd, struct iovec *iov, int n);

/* Page-aligned, pre-faulted buffer of len bytes, or NULL. free() it. */
void *bench_buf_alloc(size_t len);

/*
 * Usage errors of a benchmark's command line; each says so on stderr and
 * returns 2, the exit status of a usage error. bench_try_help prints
 * "prog: try 'prog --help'" (after getopt_long's own complaint);
 * bench_bad_arg "prog: OPT 'VAL': WANT" first. bench_args_left returns 0
 * when getopt_long took every argument (optind == argc), else 2 with
 * "prog: unexpected argument 'ARG'".
 */
int bench_try_help(const char *prog);
int bench_bad_arg(const char *prog, const char *opt, const char *val,
		  const char *want);
int bench_args_left(const char *prog, int first, int argc, char **argv);

/* A count option: 0 with *out in 1 .. max, else 2 after a bench_bad_arg
 * line "prog: OPT 'ARG': want a count 1..MAX". */
int bench_parse_count(const char *prog, const char *opt, const char *arg,
		      unsigned max, unsigned *out);

/*
 * What a usage() (FILE *) -> void prints, and the option codes a
 * command line's switch leaves to bench_opt_other: -h/--help prints
 * usage on stdout and returns -1; BENCH_OPT_BAD (a usage error already
 * said) returns 2; any other code (getopt_long's '?') returns
 * bench_try_help's 2.
 */
#define BENCH_OPT_BAD (-2)
int bench_opt_other(int opt, void (*usage)(FILE *f), const char *prog);

/*
 * The points a sweep measures, and the options that set them (poolbench
 * and rawfab take the same ones): -s/--sizes, -d/--depths, --rw,
 * -T/--seconds, -n/--ops, -w/--warmup, -r/--region. Put
 * BENCH_POINTS_SHORTOPTS in getopt_long's short options and
 * BENCH_POINTS_LONGOPTS in its table; a program's own long-only option
 * codes stay below BENCH_OPT_RW.
 */
struct bench_points {
	uint64_t sizes[BENCH_LIST_MAX]; /* bytes per operation */
	unsigned nsizes;
	unsigned depths[BENCH_LIST_MAX]; /* operations in flight */
	unsigned ndepths;
	bool read, write;
	double seconds;	 /* measured per point ... */
	uint64_t count;	 /* ... or this many ops when not 0 */
	double warmup;	 /* unmeasured seconds first, 0 for none */
	uint64_t region; /* bytes the offsets cycle over */
};

#define BENCH_OPT_RW 0x1000
#define BENCH_POINTS_SHORTOPTS "s:d:T:n:w:r:"
/* clang-format off */
#define BENCH_POINTS_LONGOPTS                                    \
	{ "sizes", required_argument, NULL, 's' },               \
	{ "depths", required_argument, NULL, 'd' },              \
	{ "rw", required_argument, NULL, BENCH_OPT_RW },         \
	{ "seconds", required_argument, NULL, 'T' },             \
	{ "ops", required_argument, NULL, 'n' },                 \
	{ "warmup", required_argument, NULL, 'w' },              \
	{ "region", required_argument, NULL, 'r' }
/* clang-format on */

/* The defaults: sizes 4K,64K,1M,4M; depths 1,4,16; read and write; 2 s
 * a point after 0.2 s of warm-up; a 256 MiB region. */
void bench_points_init(struct bench_points *p);

/*
 * Takes getopt_long's opt and optarg when opt is one of the points
 * options. Returns 1 (taken), 0 (not one of them: the caller's), or 2
 * after a bench_bad_arg line naming what arg should be.
 */
int bench_points_opt(struct bench_points *p, int opt, const char *arg,
		     const char *prog);

/* After the options: 0, or 2 with a usage error on stderr when a size is
 * larger than the region. */
int bench_points_check(const struct bench_points *p, const char *prog);

/*
 * getopt_long over a sweep's command line: takes the points options
 * into p and returns the next option that is the caller's, -1 at the
 * end, or BENCH_OPT_BAD after the usage error of a points option.
 * bench_points_end, after the loop: bench_args_left, then
 * bench_points_check.
 */
struct option;
int bench_points_getopt(struct bench_points *p, int argc, char **argv,
			const char *shortopts, const struct option *longopts,
			const char *prog);
int bench_points_end(const struct bench_points *p, int argc, char **argv,
		     const char *prog);

/* The largest size and the largest depth of p. */
void bench_points_max(const struct bench_points *p, uint64_t *size,
		      unsigned *depth);

/*
 * How a sweep runs its points and names them. A point runs with
 * bench_run over engine, or through run when it is set (a driver of the
 * caller's own, e.g. N threads; it fills res as bench_run does, and may
 * leave earlier samples in res->lat: the sweep resets it between points).
 */
struct bench_sweep {
	const char *prog;  /* "prog: read size=N depth=D failed: ..." */
	const char *bench; /* the result lines' first word */
	const char *api;   /* their api= */
	unsigned threads;  /* their threads= */
	unsigned depth;	   /* not 0: one point a size, at this depth,
			    * instead of one a depth of p->depths */
	const struct bench_engine *engine;
	int (*run)(void *arg, const struct bench_spec *s,
		   struct bench_result *res);
	/* Optional, before the points of each size: 0 or -errno (then the
	 * sweep stops; size_begin said why). */
	int (*size_begin)(void *arg, uint64_t size);
	/* Optional: text appended to each result line, or NULL. */
	const char *(*extra)(void *arg);
	/* Text of a point's -errno; NULL: strerror. */
	const char *(*strerror)(int err);
	void *arg;
	/* Not 0: every point's spec->srv_pid (its server's CPU time on
	 * the result lines). */
	int srv_pid;
	/* The op= names of reads and writes; NULL: "read" and "write". */
	const char *op_read, *op_write;
};

/*
 * Runs the points of p: the reads (if p->read), then the writes (if
 * p->write); for each, every size in order, and for each size every
 * depth (or sw->depth). Prints one bench_print line a point on stdout;
 * the first failing point is reported on stderr and ends the sweep.
 * Returns 0, that point's -errno, or size_begin's.
 */
int bench_sweep_run(const struct bench_points *p, const struct bench_sweep *sw);

/*
 * The slabs a benchmark hands to a memd KV store: bench_slab_get and
 * bench_slab_put are its memd_kv_options.slab_get and slab_put, with the
 * struct bench_slabs as slab_arg. The caller allocates mem[0 .. n) and a
 * zeroed used[0 .. n); get hands out the first slab not in use, or
 * returns -ENOSPC when every one is.
 */
struct bench_slabs {
	uint8_t **mem;
	uint8_t *used;
	uint32_t n;
};

int bench_slab_get(void *arg, uint32_t tenant, uint32_t *slab, uint8_t **base);
void bench_slab_put(void *arg, uint32_t slab);

#endif
