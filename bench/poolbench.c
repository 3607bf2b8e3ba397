// SPDX-License-Identifier: MIT
/*
 * bench/poolbench.c - the core data-path benchmark of libpool.
 *
 *   poolbench [run]   read/write throughput and latency against a memd,
 *                     sizes x depths, one result line per point
 *   poolbench demo    write a pattern over a region, read it back, verify
 *                     every byte, say how fast (the README's first command)
 *   poolbench memcpy  the local memcpy baseline at the same sizes
 *
 * run keeps `depth` operations in flight from one thread with
 * pool_read_async/pool_write_async + pool_wait (bench/benchutil.c drives
 * the ring), or with --threads N runs N threads of sync pool_read/
 * pool_write. Offsets cycle over one region (--region) so the remote side
 * is not one hot cache line. Result lines are documented in
 * bench/README.md.
 *
 * Threads: main; with --threads, N measuring threads ("poolbench-N"), each
 * with its own buffer and latency recorder, sharing the session (libpool
 * sessions are thread-safe).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "libpool/internal.h"
#include "tidepool/pool.h"

#define DEFAULT_ADDR "127.0.0.1:7470" /* libpool's own default */
#define DEMO_DEFAULT_SIZE (256ull << 20)
#define DEMO_CHUNK (64ull << 20) /* local buffer of the demo */
#define THREADS_MAX 64

enum cmd { CMD_RUN, CMD_DEMO, CMD_MEMCPY };

struct cfg {
	enum cmd cmd;
	const char *addr; /* NULL: libpool's default */
	struct bench_points pts;
	unsigned threads; /* 0: async from one thread */
	uint64_t demo_size;
	unsigned max_inflight;
	int server_pid; /* 0: no server CPU on the result lines */
};

static void usage(FILE *f)
{
	fputs("usage: poolbench [run] [options]  libpool reads and writes\n"
	      "       poolbench demo [--addr A] [--size SIZE]\n"
	      "                                  write, read back, verify\n"
	      "       poolbench memcpy [options] local memcpy baseline\n"
	      "options:\n"
	      "  -a, --addr HOST:PORT  memd control address (default:\n"
	      "                        $LIBPOOL_ADDR, else " DEFAULT_ADDR ")\n"
	      "  -s, --sizes LIST      bytes per op (default 4K,64K,1M,4M)\n"
	      "  -d, --depths LIST     ops in flight, async from one thread\n"
	      "                        (default 1,4,16)\n"
	      "  -t, --threads N       instead: N threads of sync calls\n"
	      "      --rw LIST         read, write or read,write (default)\n"
	      "  -T, --seconds S       measured seconds per point (2)\n"
	      "  -n, --ops N           measure N ops per point instead\n"
	      "  -w, --warmup S        unmeasured seconds first (0.2)\n"
	      "  -r, --region SIZE     remote bytes offsets cycle over (256M)\n"
	      "      --max-inflight N  libpool RMA pieces in flight\n"
	      "                        (default: the library's, 64)\n"
	      "      --server-pid PID  also report that process's CPU time\n"
	      "                        (/proc/PID/stat) over each point:\n"
	      "                        srv_cpu_us per op, srv_cpu_s_per_GB\n"
	      "      --size SIZE       demo: region size (default 256M)\n"
	      "  -h, --help            this text\n"
	      "Sizes take K, M, G suffixes (binary). One line per point:\n"
	      "  poolbench op=read size=4096 depth=16 threads=1 api=async\n"
	      "  ops=.. secs=.. ops_s=.. MBps=.. p50_us=.. p99_us=.. ...\n"
	      "See bench/README.md.\n",
	      f);
}

static int bad_arg(const char *opt, const char *val, const char *want)
{
	return bench_bad_arg("poolbench", opt, val, want);
}

/* Returns 0, or the exit status for a usage error (2) or help (-1). */
static int parse_args(int argc, char **argv, struct cfg *c)
{
	enum { OPT_SIZE = 256, OPT_MAX_INFLIGHT, OPT_SERVER_PID };
	static const struct option longopts[] = {
		{ "addr", required_argument, NULL, 'a' },
		BENCH_POINTS_LONGOPTS,
		{ "threads", required_argument, NULL, 't' },
		{ "max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT },
		{ "size", required_argument, NULL, OPT_SIZE },
		{ "server-pid", required_argument, NULL, OPT_SERVER_PID },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	memset(c, 0, sizeof(*c));
	c->cmd = CMD_RUN;
	bench_points_init(&c->pts);
	c->demo_size = DEMO_DEFAULT_SIZE;

	if (argc > 1 && argv[1][0] != '-') {
		if (!strcmp(argv[1], "run")) {
			c->cmd = CMD_RUN;
		} else if (!strcmp(argv[1], "demo")) {
			c->cmd = CMD_DEMO;
		} else if (!strcmp(argv[1], "memcpy")) {
			c->cmd = CMD_MEMCPY;
		} else if (!strcmp(argv[1], "help")) {
			usage(stdout);
			return -1;
		} else {
			fprintf(stderr,
				"poolbench: unknown command '%s' (run, demo, "
				"memcpy)\n",
				argv[1]);
			return 2;
		}
		argv++;
		argc--;
	}

	while ((opt = bench_points_getopt(&c->pts, argc, argv,
					  "a:t:h" BENCH_POINTS_SHORTOPTS,
					  longopts, "poolbench")) != -1) {
		switch (opt) {
		case 'a':
			c->addr = optarg;
			break;
		case 't':
			if (bench_parse_count("poolbench", "--threads", optarg,
					      THREADS_MAX, &c->threads))
				return 2;
			break;
		case OPT_MAX_INFLIGHT:
			if (bench_parse_count("poolbench", "--max-inflight",
					      optarg, 65536, &c->max_inflight))
				return 2;
			break;
		case OPT_SERVER_PID:
			if (bench_parse_server_pid(optarg, "poolbench",
						   &c->server_pid))
				return 2;
			break;
		case OPT_SIZE:
			if (bench_parse_size(optarg, &c->demo_size))
				return bad_arg("--size", optarg,
					       "want a size like 256M");
			break;
		default:
			return bench_opt_other(opt, usage, "poolbench");
		}
	}
	return bench_points_end(&c->pts, argc, argv, "poolbench");
}

static const char *effective_addr(const struct cfg *c)
{
	const char *env = getenv("LIBPOOL_ADDR");

	if (c->addr)
		return c->addr;
	return env && *env ? env : DEFAULT_ADDR;
}

/* Connects, or explains why not on stderr. */
static int connect_pool(const struct cfg *c, struct pool **p)
{
	struct pool_opts o = { .addr = c->addr,
			       .client_name = "poolbench",
			       .max_inflight = c->max_inflight };
	const char *addr = effective_addr(c);
	int r;

	/* libpool's error lines name what went wrong (FI_OFI_RXM_BUFFER_SIZE
	 * against memd's, a refused authentication): a tool for people
	 * shows them unless LIBPOOL_LOG says otherwise. */
	setenv("LIBPOOL_LOG", "err", 0);
	r = pool_connect(&o, p);

	if (!r)
		return 0;
	fprintf(stderr, "poolbench: cannot connect to memd at %s: %s\n", addr,
		pool_strerror(r));
	if (r == -ECONNREFUSED || r == -EHOSTUNREACH || r == -ETIMEDOUT ||
	    r == -ENOTCONN)
		fprintf(stderr,
			"poolbench: is memd running there? Start one with\n"
			"  memd --listen %s --donate 1G\n"
			"or point --addr (or LIBPOOL_ADDR) at a running memd."
			"\n",
			addr);
	else if (r == -EINVAL)
		fprintf(stderr, "poolbench: --addr wants HOST:PORT, e.g. "
				"127.0.0.1:7470\n");
	return r;
}

static int alloc_region(struct pool *p, uint64_t len, struct pool_region **r)
{
	char s[32];
	int ret = pool_alloc(p, len, r);

	if (!ret)
		return 0;
	bench_fmt_size(s, sizeof(s), len);
	fprintf(stderr, "poolbench: cannot allocate a %s region: %s\n", s,
		pool_strerror(ret));
	if (ret == -ENOSPC)
		fprintf(stderr, "poolbench: memd has no room for it; start "
				"memd with a larger --donate or use a smaller "
				"size\n");
	return ret;
}

/* ---- run: async from one thread ------------------------------------ */

struct pool_eng {
	struct pool *p;
	struct pool_region *r;
	uint8_t *bufs; /* depth buffers of size bytes */
	size_t size;
	struct pool_op *ops[BENCH_DEPTH_MAX];
	int result; /* sync mode: result of the call made by start */
};

static int async_start(void *ctx, unsigned slot, uint64_t off, size_t len,
		       bool write)
{
	struct pool_eng *e = ctx;
	uint8_t *buf = e->bufs + (size_t)slot * e->size;

	return write ? pool_write_async(e->p, e->r, off, buf, len,
					&e->ops[slot])
		     : pool_read_async(e->p, e->r, off, buf, len,
				       &e->ops[slot]);
}

static int async_finish(void *ctx, unsigned slot)
{
	struct pool_eng *e = ctx;
	struct pool_op *op = e->ops[slot];
	int r;

	e->ops[slot] = NULL;
	/* -ETIMEDOUT from pool_wait leaves the op running: a benchmark
	 * cannot usefully go on, but the buffer must outlive it, so wait
	 * until it is settled (the session fails it in bounded time). */
	while ((r = pool_wait(e->p, op, -1)) == -ETIMEDOUT)
		;
	return r;
}

/* ---- run: sync from N threads -------------------------------------- */

static int sync_start(void *ctx, unsigned slot, uint64_t off, size_t len,
		      bool write)
{
	struct pool_eng *e = ctx;

	(void)slot;
	e->result = write ? pool_write(e->p, e->r, off, e->bufs, len)
			  : pool_read(e->p, e->r, off, e->bufs, len);
	return 0;
}

static int sync_finish(void *ctx, unsigned slot)
{
	struct pool_eng *e = ctx;

	(void)slot;
	return e->result;
}

/* Releases the measuring threads together, or tells them to quit. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0 wait, 1 go, -1 quit */
};

struct worker {
	pthread_t tid;
	struct pool_eng eng;
	struct bench_spec spec;
	struct bench_result res;
	struct gate *gate;
	int err;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct bench_engine e = { sync_start, sync_finish, &w->eng };
	char name[16];
	int state;

	snprintf(name, sizeof(name), "poolbench-%u", w->spec.lane);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&w->gate->mu);
	while (!(state = w->gate->state))
		pthread_cond_wait(&w->gate->cv, &w->gate->mu);
	pthread_mutex_unlock(&w->gate->mu);
	w->err = state > 0 ? bench_run(&e, &w->spec, &w->res) : -ECANCELED;
	return NULL;
}

static void gate_open(struct gate *g, int state)
{
	pthread_mutex_lock(&g->mu);
	g->state = state;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

/*
 * One point with n threads of sync calls. Fills res: every thread's ops,
 * CPU time and samples, and the slowest thread's elapsed time.
 */
static int run_threads(struct pool *p, struct pool_region *r,
		       const struct bench_spec *spec, unsigned n,
		       struct bench_result *res)
{
	struct gate gate = { PTHREAD_MUTEX_INITIALIZER,
			     PTHREAD_COND_INITIALIZER, 0 };
	struct worker *w;
	unsigned started = 0;
	int err = 0;

	res->ops = 0;
	res->elapsed_ns = 0;
	res->cpu_ns = 0;
	res->srv_cpu_valid = false;
	w = calloc(n, sizeof(*w));
	if (!w)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		w[i].eng.p = p;
		w[i].eng.r = r;
		w[i].eng.size = spec->size;
		w[i].spec = *spec;
		w[i].spec.depth = 1;
		w[i].spec.lane = i;
		w[i].spec.nlanes = n;
		/* the first thread's measured phase stands for the point's */
		w[i].spec.srv_pid = i ? 0 : spec->srv_pid;
		bench_lat_init(&w[i].res.lat);
		w[i].gate = &gate;
		w[i].eng.bufs = bench_buf_alloc(spec->size);
		if (!w[i].eng.bufs)
			err = -ENOMEM;
	}
	for (unsigned i = 0; !err && i < n; i++) {
		err = -pthread_create(&w[i].tid, NULL, worker_main, &w[i]);
		if (!err)
			started++;
	}
	gate_open(&gate, err ? -1 : 1);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(w[i].tid, NULL);
		if (err)
			continue;
		if (w[i].err)
			err = w[i].err;
		res->ops += w[i].res.ops;
		res->cpu_ns += w[i].res.cpu_ns;
		if (!i) {
			res->srv_cpu_ns = w[i].res.srv_cpu_ns;
			res->srv_cpu_valid = w[i].res.srv_cpu_valid;
		}
		if (w[i].res.elapsed_ns > res->elapsed_ns)
			res->elapsed_ns = w[i].res.elapsed_ns;
		if (!err && bench_lat_merge(&res->lat, &w[i].res.lat))
			err = -ENOMEM;
	}
	for (unsigned i = 0; i < n; i++) {
		free(w[i].eng.bufs);
		bench_lat_fini(&w[i].res.lat);
	}
	free(w);
	return err;
}

/* What run's points run on: the async engine, or N threads. */
struct run_ctx {
	const struct cfg *c;
	struct pool *p;
	struct pool_region *r;
	struct pool_eng eng;
	struct bench_engine e;
};

static int run_point(void *arg, const struct bench_spec *s,
		     struct bench_result *res)
{
	struct run_ctx *x = arg;

	if (x->c->threads)
		return run_threads(x->p, x->r, s, x->c->threads, res);
	x->eng.size = s->size;
	return bench_run(&x->e, s, res);
}

static int cmd_run(const struct cfg *c)
{
	struct run_ctx x = { .c = c, .e = { async_start, async_finish, NULL } };
	struct bench_sweep sw = {
		.prog = "poolbench",
		.bench = "poolbench",
		.api = c->threads ? "sync" : "async",
		.threads = c->threads ? c->threads : 1,
		.depth = c->threads, /* threads: one point a size */
		.run = run_point,
		.strerror = pool_strerror,
		.arg = &x,
		.srv_pid = c->server_pid,
	};
	const char *prov = "?";
	const uint8_t *fa;
	uint16_t falen;
	uint64_t maxsize, connect_ns;
	unsigned maxdepth;
	char rs[32];
	int ret;

	x.e.ctx = &x.eng;
	if (connect_pool(c, &x.p))
		return 1;
	if (alloc_region(x.p, c->pts.region, &x.r)) {
		pool_close(x.p);
		return 1;
	}
	pool_session_fabric(x.p, &prov, &fa, &falen);
	/* The first RMA sets up the fabric connection; keep it out of the
	 * first point and report it. */
	{
		uint8_t one[4096];
		uint64_t t = bench_now_ns();

		ret = pool_read(x.p, x.r, 0, one, sizeof(one));
		if (ret) {
			fprintf(stderr, "poolbench: first read failed: %s\n",
				pool_strerror(ret));
			goto out;
		}
		connect_ns = bench_now_ns() - t;
	}
	bench_fmt_size(rs, sizeof(rs), c->pts.region);
	printf("# poolbench memd=%s provider=%s region=%s mode=%s "
	       "seconds=%g warmup=%g xfer=%s connect_ms=%.1f\n",
	       effective_addr(c), prov, rs,
	       c->threads ? "sync-threads" : "async", c->pts.seconds,
	       c->pts.warmup,
	       getenv("LIBPOOL_XFER_BYTES") ? getenv("LIBPOOL_XFER_BYTES")
					    : "default",
	       (double)connect_ns / 1e6);

	bench_points_max(&c->pts, &maxsize, &maxdepth);
	if (!c->threads) {
		x.eng.p = x.p;
		x.eng.r = x.r;
		x.eng.bufs = bench_buf_alloc(maxsize * maxdepth);
		if (!x.eng.bufs) {
			fprintf(stderr,
				"poolbench: out of memory for %u buffers\n",
				maxdepth);
			ret = -ENOMEM;
			goto out;
		}
	}
	ret = bench_sweep_run(&c->pts, &sw);
out:
	free(x.eng.bufs);
	pool_free(x.p, x.r);
	pool_close(x.p);
	return ret ? 1 : 0;
}

/* ---- demo ---------------------------------------------------------- */

/* The 8 bytes at offset off (a multiple of 8) of the stream seed. */
static uint64_t pattern_word(uint64_t seed, uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull + seed;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 32;
	return x;
}

static uint8_t pattern_byte(uint64_t seed, uint64_t off)
{
	return (uint8_t)(pattern_word(seed, off & ~7ull) >> ((off & 7) * 8));
}

/* Fills buf with the bytes at [off, off+len) of the stream. */
static void pattern_fill(uint8_t *buf, size_t len, uint64_t seed, uint64_t off)
{
	size_t i = 0;

	for (; i < len && ((off + i) & 7); i++)
		buf[i] = pattern_byte(seed, off + i);
	for (; i + 8 <= len; i += 8) {
		uint64_t x = pattern_word(seed, off + i);

		for (unsigned k = 0; k < 8; k++)
			buf[i + k] = (uint8_t)(x >> (k * 8));
	}
	for (; i < len; i++)
		buf[i] = pattern_byte(seed, off + i);
}

/* Counts wrong bytes of buf against the stream; the first in *first. */
static uint64_t pattern_check(const uint8_t *buf, size_t len, uint64_t seed,
			      uint64_t off, int64_t *first)
{
	uint64_t bad = 0;
	size_t i = 0;

	*first = -1;
	for (; i + 8 <= len && !((off + i) & 7); i += 8) {
		uint64_t x = pattern_word(seed, off + i);

		for (unsigned k = 0; k < 8; k++) {
			if (buf[i + k] == (uint8_t)(x >> (k * 8)))
				continue;
			if (*first < 0)
				*first = (int64_t)(i + k);
			bad++;
		}
	}
	for (; i < len; i++) {
		if (buf[i] == pattern_byte(seed, off + i))
			continue;
		if (*first < 0)
			*first = (int64_t)i;
		bad++;
	}
	return bad;
}

static void print_rate(const char *what, uint64_t bytes, uint64_t ns)
{
	double secs = (double)ns / 1e9;
	double rate = secs > 0 ? (double)bytes / secs : 0;
	char s[32];

	bench_fmt_size(s, sizeof(s), bytes);
	if (rate >= 1e9)
		printf("  %-6s %s in %.3f s: %.2f GB/s\n", what, s, secs,
		       rate / 1e9);
	else
		printf("  %-6s %s in %.3f s: %.1f MB/s\n", what, s, secs,
		       rate / 1e6);
}

static int cmd_demo(const struct cfg *c)
{
	uint64_t size = c->demo_size, chunk, seed, bad = 0, t, wns = 0, rns = 0;
	int64_t first_bad = -1;
	struct pool *p = NULL;
	struct pool_region *r = NULL;
	struct pool_stats st;
	const char *prov = "?";
	const uint8_t *fa;
	uint16_t falen;
	uint8_t *buf;
	char s[32], ss[32];
	int ret = 0;

	chunk = size < DEMO_CHUNK ? size : DEMO_CHUNK;
	buf = bench_buf_alloc(chunk);
	if (!buf) {
		fprintf(stderr,
			"poolbench: out of memory for a local buffer\n");
		return 1;
	}
	if (connect_pool(c, &p)) {
		free(buf);
		return 1;
	}
	pool_session_fabric(p, &prov, &fa, &falen);
	pool_get_stats(p, &st);
	bench_fmt_size(ss, sizeof(ss), st.slab_bytes);
	printf("poolbench demo: connected to memd at %s (provider %s, "
	       "%s slabs)\n",
	       effective_addr(c), prov, ss);
	if (alloc_region(p, size, &r)) {
		ret = 1;
		goto out;
	}
	pool_get_stats(p, &st);
	bench_fmt_size(s, sizeof(s), size);
	printf("  region %s allocated (%" PRIu64 " slab%s held)\n", s,
	       st.slabs_held, st.slabs_held == 1 ? "" : "s");

	/* The first RMA sets up the fabric connection to memd: say what
	 * that costs rather than hide it in the write rate. */
	t = bench_now_ns();
	ret = pool_read(p, r, 0, buf, size < 4096 ? size : 4096);
	if (ret) {
		fprintf(stderr, "poolbench: first read failed: %s\n",
			pool_strerror(ret));
		goto out;
	}
	printf("  fabric connection up in %.1f ms (first RMA)\n",
	       (double)(bench_now_ns() - t) / 1e6);

	/* A fresh stream every run: bytes left by an earlier run, or the
	 * zeroes of a fresh slab, cannot pass for this one's. */
	seed = bench_now_ns() ^ ((uint64_t)getpid() << 32);
	for (uint64_t off = 0; off < size && !ret; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;

		pattern_fill(buf, n, seed, off);
		t = bench_now_ns();
		ret = pool_write(p, r, off, buf, n);
		wns += bench_now_ns() - t;
		if (ret)
			fprintf(stderr,
				"poolbench: write at offset %" PRIu64
				" failed: %s\n",
				off, pool_strerror(ret));
	}
	if (ret)
		goto out;
	print_rate("write", size, wns);

	for (uint64_t off = 0; off < size && !ret; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;
		int64_t f;
		uint64_t b;

		memset(buf, 0, n);
		t = bench_now_ns();
		ret = pool_read(p, r, off, buf, n);
		rns += bench_now_ns() - t;
		if (ret) {
			fprintf(stderr,
				"poolbench: read at offset %" PRIu64
				" failed: %s\n",
				off, pool_strerror(ret));
			break;
		}
		b = pattern_check(buf, n, seed, off, &f);
		if (b && first_bad < 0) {
			first_bad = (int64_t)off + f;
			fprintf(stderr,
				"poolbench: wrong byte at offset %" PRId64
				": expected 0x%02x, read 0x%02x\n",
				first_bad,
				pattern_byte(seed, (uint64_t)first_bad),
				buf[f]);
		}
		bad += b;
	}
	if (ret)
		goto out;
	print_rate("read", size, rns);
	if (bad) {
		printf("  verify FAILED: %" PRIu64 " of %" PRIu64
		       " bytes wrong (first at offset %" PRId64 ")\n",
		       bad, size, first_bad);
		ret = 1;
	} else {
		printf("  verify %" PRIu64 " bytes: every byte correct\n",
		       size);
	}
out:
	free(buf);
	if (r) {
		int fr = pool_free(p, r);

		if (fr)
			fprintf(stderr, "poolbench: freeing the region: %s\n",
				pool_strerror(fr));
	}
	pool_close(p);
	return ret ? 1 : 0;
}

/* ---- memcpy baseline ----------------------------------------------- */

struct copy_eng {
	uint8_t *region;
	uint8_t *buf;
};

static int copy_start(void *ctx, unsigned slot, uint64_t off, size_t len,
		      bool write)
{
	struct copy_eng *e = ctx;

	(void)slot;
	if (write)
		memcpy(e->region + off, e->buf, len);
	else
		memcpy(e->buf, e->region + off, len);
	/* Keep the copy: the compiler must not drop it as dead. */
	__asm__ volatile("" : : "r"(e->buf), "r"(e->region) : "memory");
	return 0;
}

static int copy_finish(void *ctx, unsigned slot)
{
	(void)ctx;
	(void)slot;
	return 0;
}

static int cmd_memcpy(const struct cfg *c)
{
	struct copy_eng eng = { 0 };
	struct bench_engine e = { copy_start, copy_finish, &eng };
	struct bench_sweep sw = {
		.prog = "poolbench",
		.bench = "memcpy",
		.api = "memcpy",
		.threads = 1,
		.depth = 1,
		.engine = &e,
	};
	uint64_t maxsize;
	unsigned maxdepth;
	char rs[32];
	int ret;

	bench_points_max(&c->pts, &maxsize, &maxdepth);
	eng.region = bench_buf_alloc(c->pts.region);
	eng.buf = bench_buf_alloc(maxsize);
	if (!eng.region || !eng.buf) {
		fprintf(stderr, "poolbench: out of memory for the memcpy "
				"region\n");
		free(eng.region);
		free(eng.buf);
		return 1;
	}
	bench_fmt_size(rs, sizeof(rs), c->pts.region);
	printf("# memcpy region=%s seconds=%g warmup=%g\n", rs, c->pts.seconds,
	       c->pts.warmup);
	ret = bench_sweep_run(&c->pts, &sw);
	free(eng.region);
	free(eng.buf);
	return ret ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct cfg c;
	int r = parse_args(argc, argv, &c);

	if (r)
		return r < 0 ? 0 : r;
	switch (c.cmd) {
	case CMD_DEMO:
		return cmd_demo(&c);
	case CMD_MEMCPY:
		return cmd_memcpy(&c);
	case CMD_RUN:
	default:
		return cmd_run(&c);
	}
}
