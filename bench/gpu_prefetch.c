// SPDX-License-Identifier: MIT
/*
 * bench/gpu_prefetch.c - pool -> device (fetch) and device -> pool
 * (store) through the GPU prefetch pipeline (tidepool/pool_gpu.h),
 * against its two limits, measured in the same run:
 *
 *   fabric    the fabric alone: the same chunks (staging size, count in
 *             flight) RMA'd between the region and pinned host buffers
 *             with pool_read_async/pool_write_async, no copies
 *   bulk      the fabric alone, one pool_read/pool_write of the whole size
 *             into pinned memory (every piece in flight: its best case)
 *   copy      the copy alone: one memcpy_async of the whole size between
 *             pinned host memory and the device (CUDA: cudaMemcpyAsync,
 *             the PCIe peak; host backend: a memcpy on a stream thread)
 *   pipeline  pool_gpu_fetch / pool_gpu_store of the whole size
 *
 * and reports for the pipeline its throughput, vs_copy (pipeline / copy
 * throughput: the target is >= 0.9 when the fabric is not the limit) and
 * overlap = pipeline time / max(fabric time, copy time) (target <= 1.1;
 * 1.0 is perfect overlap, no_overlap = (fabric + copy) / max(...) is
 * none), from the medians, and overlap_rep, the median of that ratio
 * taken per rep. Each rep runs all four in turn; results are medians over
 * the reps. One machine-readable line per result:
 *
 *   gpu_prefetch backend=host dir=fetch what=pipeline size=.. staging=..
 *     count=.. reps=.. secs=.. MBps=.. [min_MBps=.. max_MBps=..] ...
 *
 * With --backend host the "device" is host memory: those figures measure
 * the pipeline's logic and overheads on this machine, not a GPU, and every
 * line says backend=host.
 *
 * Threads: main only (plus the engine's own: pool-gpu, pool-gpu-hs).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/benchutil.h"
#include "tidepool/pool.h"
#include "tidepool/pool_gpu.h"

#define DEFAULT_SIZE (256ull << 20)
#define DEFAULT_REPS 5
#define REPS_MAX 101

enum what { W_FABRIC, W_BULK, W_COPY, W_PIPE, W_N };
static const char *const what_name[W_N] = { "fabric", "bulk", "copy",
					    "pipeline" };

struct cfg {
	const char *addr;
	enum pool_gpu_backend backend;
	int device;
	uint64_t size;
	uint64_t staging;
	unsigned count;
	unsigned reps;
	bool fetch, store;
	bool verify;
};

struct ctx {
	struct cfg c;
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	void *dev;   /* size bytes of device memory */
	void *pin;   /* size bytes of pinned host memory */
	void **ring; /* count x staging pinned buffers (fabric alone) */
	void *stream;
	const char *backend;
};

static void usage(FILE *f)
{
	fputs("usage: gpu_prefetch [options]\n"
	      "  -a, --addr HOST:PORT   memd control address (default "
	      "$LIBPOOL_ADDR, else 127.0.0.1:7470)\n"
	      "  -b, --backend B        cuda, host or auto (default auto: "
	      "cuda when a\n"
	      "                         device is usable, else host)\n"
	      "      --device N         CUDA device ordinal (default 0)\n"
	      "  -s, --size SIZE        bytes per transfer (default 256M)\n"
	      "  -S, --staging SIZE     bytes per staging buffer (default 4M)\n"
	      "  -c, --count N          staging buffers (default 4)\n"
	      "  -r, --reps N           measured runs, medians (default 5)\n"
	      "      --dir LIST         fetch, store or fetch,store (default "
	      "both)\n"
	      "      --no-verify        skip the byte check of the first run\n"
	      "  -h, --help             this text\n"
	      "One line per result: gpu_prefetch backend=.. dir=.. what=.. "
	      "MBps=..\n",
	      f);
}

static int bad_arg(const char *opt, const char *val, const char *want)
{
	return bench_bad_arg("gpu_prefetch", opt, val, want);
}

/* Returns 0, or the exit status for a usage error (2) or help (-1). */
static int parse_args(int argc, char **argv, struct cfg *c)
{
	enum { OPT_DIR = 256, OPT_DEVICE, OPT_NO_VERIFY };
	static const struct option longopts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "backend", required_argument, NULL, 'b' },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "size", required_argument, NULL, 's' },
		{ "staging", required_argument, NULL, 'S' },
		{ "count", required_argument, NULL, 'c' },
		{ "reps", required_argument, NULL, 'r' },
		{ "dir", required_argument, NULL, OPT_DIR },
		{ "no-verify", no_argument, NULL, OPT_NO_VERIFY },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned v[1], n;
	int opt;

	memset(c, 0, sizeof(*c));
	c->backend = POOL_GPU_AUTO;
	c->size = DEFAULT_SIZE;
	c->staging = 4u << 20;
	c->count = 4;
	c->reps = DEFAULT_REPS;
	c->fetch = c->store = true;
	c->verify = true;
	while ((opt = getopt_long(argc, argv, "a:b:s:S:c:r:h", longopts,
				  NULL)) != -1) {
		switch (opt) {
		case 'a':
			c->addr = optarg;
			break;
		case 'b':
			if (!strcmp(optarg, "cuda"))
				c->backend = POOL_GPU_CUDA;
			else if (!strcmp(optarg, "host"))
				c->backend = POOL_GPU_HOST;
			else if (!strcmp(optarg, "auto"))
				c->backend = POOL_GPU_AUTO;
			else
				return bad_arg("--backend", optarg,
					       "want cuda, host or auto");
			break;
		case OPT_DEVICE: {
			char *end;
			long d = strtol(optarg, &end, 10);

			if (end == optarg || *end || d < 0 || d > 1024)
				return bad_arg("--device", optarg,
					       "want a device ordinal");
			c->device = (int)d;
			break;
		}
		case 's':
			if (bench_parse_size(optarg, &c->size))
				return bad_arg("--size", optarg,
					       "want a size like 256M");
			break;
		case 'S':
			if (bench_parse_size(optarg, &c->staging) ||
			    c->staging < POOL_GPU_STAGING_MIN ||
			    c->staging > POOL_GPU_STAGING_MAX)
				return bad_arg("--staging", optarg,
					       "want 4K .. 1G");
			break;
		case 'c':
			if (bench_parse_uints(optarg, POOL_GPU_COUNT_MAX, v, 1,
					      &n) ||
			    v[0] < POOL_GPU_COUNT_MIN)
				return bad_arg("--count", optarg,
					       "want 2 .. 64 buffers");
			c->count = v[0];
			break;
		case 'r':
			if (bench_parse_uints(optarg, REPS_MAX, v, 1, &n))
				return bad_arg("--reps", optarg,
					       "want 1 .. 101 runs");
			c->reps = v[0];
			break;
		case OPT_DIR:
			/* bench_parse_rw reads "read"/"write"; say ours */
			c->fetch = strstr(optarg, "fetch") != NULL;
			c->store = strstr(optarg, "store") != NULL;
			if (!c->fetch && !c->store)
				return bad_arg("--dir", optarg,
					       "want fetch, store or both");
			break;
		case OPT_NO_VERIFY:
			c->verify = false;
			break;
		case 'h':
			usage(stdout);
			return -1;
		default:
			usage(stderr);
			return 2;
		}
	}
	return bench_args_left("gpu_prefetch", optind, argc, argv);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint8_t pat(uint64_t off)
{
	uint64_t x = (off >> 3) * 0x9e3779b97f4a7c15ull + 0x51;

	x ^= x >> 29;
	return (uint8_t)(x >> ((off & 7) * 8));
}

/* Fabric alone: count chunks of staging bytes in flight, as the
 * pipeline keeps them, into/from pinned buffers. */
static int run_fabric(struct ctx *x, bool store)
{
	struct pool_op **ops = calloc(x->c.count, sizeof(*ops));
	uint64_t issued = 0, reaped = 0, size = x->c.size;
	unsigned head = 0, tail = 0;
	int r = 0;

	if (!ops)
		return -ENOMEM;
	while (reaped < size) {
		while (!r && issued < size && head - tail < x->c.count) {
			uint64_t n = size - issued < x->c.staging
					     ? size - issued
					     : x->c.staging;
			void *b = x->ring[head % x->c.count];

			r = store ? pool_write_async(x->p, x->r, issued, b, n,
						     &ops[head % x->c.count])
				  : pool_read_async(x->p, x->r, issued, b, n,
						    &ops[head % x->c.count]);
			if (!r) {
				issued += n;
				head++;
			}
		}
		if (tail == head)
			break;
		{
			uint64_t n = size - reaped < x->c.staging
					     ? size - reaped
					     : x->c.staging;
			int w;

			do
				w = pool_wait(x->p, ops[tail % x->c.count], -1);
			while (w == -ETIMEDOUT);
			if (w && !r)
				r = w;
			tail++;
			reaped += n;
		}
	}
	free(ops);
	return r;
}

static int run_bulk(struct ctx *x, bool store)
{
	return store ? pool_write(x->p, x->r, 0, x->pin, x->c.size)
		     : pool_read(x->p, x->r, 0, x->pin, x->c.size);
}

static int run_copy(struct ctx *x, bool store)
{
	int r = store ? pool_gpu_memcpy_async(x->g, x->pin, x->dev, x->c.size,
					      x->stream)
		      : pool_gpu_memcpy_async(x->g, x->dev, x->pin, x->c.size,
					      x->stream);

	return r ? r : pool_gpu_stream_sync(x->g, x->stream, -1);
}

static int run_pipe(struct ctx *x, bool store)
{
	struct pool_gpu_xfer *t;
	int r = store ? pool_gpu_store(x->g, x->r, 0, x->dev, x->c.size,
				       x->stream, &t)
		      : pool_gpu_fetch(x->g, x->r, 0, x->dev, x->c.size,
				       x->stream, &t);

	if (r)
		return r;
	do
		r = pool_gpu_xfer_wait(t, -1);
	while (r == -ETIMEDOUT);
	return r;
}

static int run_one(struct ctx *x, enum what w, bool store, uint64_t *ns)
{
	uint64_t t0 = bench_now_ns();
	int r;

	switch (w) {
	case W_FABRIC:
		r = run_fabric(x, store);
		break;
	case W_BULK:
		r = run_bulk(x, store);
		break;
	case W_COPY:
		r = run_copy(x, store);
		break;
	default:
		r = run_pipe(x, store);
		break;
	}
	*ns = bench_now_ns() - t0;
	if (r)
		fprintf(stderr, "gpu_prefetch: %s %s: %s\n",
			store ? "store" : "fetch", what_name[w],
			pool_strerror(r));
	return r;
}

/* The pipeline moved the right bytes: fetch checks the device copy,
 * store checks the region. Uses pin as scratch. */
static int verify(struct ctx *x, bool store)
{
	uint8_t *b = x->pin;
	uint64_t i;
	int r;

	if (store) {
		r = pool_read(x->p, x->r, 0, b, x->c.size);
	} else {
		r = pool_gpu_memcpy_async(x->g, b, x->dev, x->c.size,
					  x->stream);
		if (!r)
			r = pool_gpu_stream_sync(x->g, x->stream, -1);
	}
	if (r)
		return r;
	for (i = 0; i < x->c.size; i++)
		if (b[i] != pat(i)) {
			fprintf(stderr,
				"gpu_prefetch: %s: wrong byte at %" PRIu64
				": %#x, want %#x\n",
				store ? "store" : "fetch", i, b[i], pat(i));
			return -EIO;
		}
	return 0;
}

/* Puts the pattern where the first pipeline run reads it from. */
static int prepare(struct ctx *x, bool store)
{
	uint8_t *b = x->pin;
	int r;

	for (uint64_t i = 0; i < x->c.size; i++)
		b[i] = pat(i);
	if (!store)
		return pool_write(x->p, x->r, 0, b, x->c.size);
	r = pool_gpu_memcpy_async(x->g, x->dev, b, x->c.size, x->stream);
	return r ? r : pool_gpu_stream_sync(x->g, x->stream, -1);
}

static void print_line(struct ctx *x, bool store, enum what w, uint64_t *ns,
		       const char *extra)
{
	uint64_t v[REPS_MAX], med, lo = UINT64_MAX, hi = 0;
	double mbps;

	memcpy(v, ns, x->c.reps * sizeof(*v));
	for (unsigned i = 0; i < x->c.reps; i++) {
		lo = v[i] < lo ? v[i] : lo;
		hi = v[i] > hi ? v[i] : hi;
	}
	med = median(v, x->c.reps);
	mbps = (double)x->c.size * 1e3 / (double)med;
	printf("gpu_prefetch backend=%s dir=%s what=%s size=%" PRIu64
	       " staging=%" PRIu64 " count=%u reps=%u secs=%.6f MBps=%.1f "
	       "min_MBps=%.1f max_MBps=%.1f%s%s\n",
	       x->backend, store ? "store" : "fetch", what_name[w], x->c.size,
	       x->c.staging, x->c.count, x->c.reps, (double)med / 1e9, mbps,
	       (double)x->c.size * 1e3 / (double)hi,
	       (double)x->c.size * 1e3 / (double)lo, extra ? " " : "",
	       extra ? extra : "");
}

static int run_dir(struct ctx *x, bool store)
{
	uint64_t ns[W_N][REPS_MAX], med[W_N], tmp[REPS_MAX], warm, rep_overlap;
	struct pool_gpu_stats before, after;
	char extra[256];
	double lim;
	int r;

	r = prepare(x, store);
	if (r) {
		fprintf(stderr, "gpu_prefetch: preparing %s: %s\n",
			store ? "store" : "fetch", pool_strerror(r));
		return r;
	}
	/* Unmeasured: first-use costs (fabric connection, page faults),
	 * and the byte check of the pipeline. */
	r = run_one(x, W_PIPE, store, &warm);
	if (!r && x->c.verify)
		r = verify(x, store);
	for (int w = 0; !r && w < W_PIPE; w++)
		r = run_one(x, w, store, &warm);
	if (r)
		return r;
	pool_gpu_get_stats(x->g, &before);
	for (unsigned i = 0; i < x->c.reps; i++)
		for (int w = 0; w < W_N; w++) {
			r = run_one(x, w, store, &ns[w][i]);
			if (r)
				return r;
		}
	pool_gpu_get_stats(x->g, &after);
	/* The same ratio per rep (all four ran back to back), then its
	 * median: steadier than a ratio of medians on a busy machine. */
	for (unsigned i = 0; i < x->c.reps; i++) {
		uint64_t m = ns[W_FABRIC][i] > ns[W_COPY][i] ? ns[W_FABRIC][i]
							     : ns[W_COPY][i];

		tmp[i] = ns[W_PIPE][i] * 1000 / (m ? m : 1);
	}
	rep_overlap = median(tmp, x->c.reps);
	for (int w = 0; w < W_N; w++) {
		memcpy(tmp, ns[w], x->c.reps * sizeof(*tmp));
		med[w] = median(tmp, x->c.reps);
	}
	for (int w = 0; w < W_PIPE; w++)
		print_line(x, store, w, ns[w], NULL);
	lim = (double)(med[W_FABRIC] > med[W_COPY] ? med[W_FABRIC]
						   : med[W_COPY]);
	snprintf(extra, sizeof(extra),
		 "vs_copy=%.3f vs_fabric=%.3f overlap=%.3f overlap_rep=%.3f "
		 "no_overlap=%.3f limit=%s overlapped=%" PRIu64
		 " chunks=%" PRIu64,
		 (double)med[W_COPY] / (double)med[W_PIPE],
		 (double)med[W_FABRIC] / (double)med[W_PIPE],
		 (double)med[W_PIPE] / lim, (double)rep_overlap / 1000.0,
		 (double)(med[W_FABRIC] + med[W_COPY]) / lim,
		 med[W_FABRIC] > med[W_COPY] ? "fabric" : "copy",
		 after.overlapped - before.overlapped,
		 after.chunks - before.chunks);
	print_line(x, store, W_PIPE, ns[W_PIPE], extra);
	return 0;
}

static int setup(struct ctx *x)
{
	struct pool_opts po = { .addr = x->c.addr };
	struct pool_gpu_opts go;
	struct pool_gpu_stats st;
	int r;

	r = pool_connect(&po, &x->p);
	if (r) {
		fprintf(stderr,
			"gpu_prefetch: cannot connect to memd at %s: "
			"%s\n",
			x->c.addr ? x->c.addr : "(default)", pool_strerror(r));
		return r;
	}
	r = pool_alloc(x->p, x->c.size, &x->r);
	if (r) {
		fprintf(stderr,
			"gpu_prefetch: cannot allocate %" PRIu64
			" bytes in the pool: %s\n",
			x->c.size, pool_strerror(r));
		return r;
	}
	pool_gpu_opts_init(&go);
	go.backend = x->c.backend;
	go.device = x->c.device;
	go.staging_bytes = x->c.staging;
	go.staging_count = x->c.count;
	if (go.backend == POOL_GPU_AUTO && pool_gpu_probe(POOL_GPU_AUTO) < 0) {
		fprintf(stderr,
			"gpu_prefetch: no usable CUDA device (%s): "
			"using the host backend\n",
			pool_strerror(pool_gpu_probe(POOL_GPU_CUDA)));
		go.backend = POOL_GPU_HOST;
	}
	r = pool_gpu_open(x->p, &go, &x->g);
	if (r) {
		fprintf(stderr, "gpu_prefetch: pool_gpu_open: %s\n",
			pool_strerror(r));
		return r;
	}
	pool_gpu_get_stats(x->g, &st);
	x->backend = st.backend == POOL_GPU_CUDA ? "cuda" : "host";
	r = pool_gpu_dev_alloc(x->g, x->c.size, &x->dev);
	if (!r)
		r = pool_gpu_pinned_alloc(x->g, x->c.size, &x->pin);
	if (!r)
		r = pool_gpu_stream_create(x->g, &x->stream);
	x->ring = calloc(x->c.count, sizeof(*x->ring));
	if (!r && !x->ring)
		r = -ENOMEM;
	for (unsigned i = 0; !r && i < x->c.count; i++)
		r = pool_gpu_pinned_alloc(x->g, x->c.staging, &x->ring[i]);
	if (r) {
		fprintf(stderr,
			"gpu_prefetch: buffers of %" PRIu64 " bytes: %s\n",
			x->c.size, pool_strerror(r));
		return r;
	}
	printf("# gpu_prefetch backend=%s device=%d pci=%s numa_node=%d "
	       "numa_cpus=%s numa_applied=%d direct=%d size=%" PRIu64
	       " staging=%" PRIu64 " count=%u reps=%u%s\n",
	       x->backend, st.device, st.pci_bus_id[0] ? st.pci_bus_id : "-",
	       st.numa_node, st.numa_cpus[0] ? st.numa_cpus : "-",
	       st.numa_applied, st.direct, x->c.size, x->c.staging, x->c.count,
	       x->c.reps,
	       st.backend == POOL_GPU_HOST
		       ? " (host backend: host memory stands in for the GPU; "
			 "these are not GPU figures)"
		       : "");
	return 0;
}

static void teardown(struct ctx *x)
{
	if (x->g) {
		for (unsigned i = 0; x->ring && i < x->c.count; i++)
			pool_gpu_pinned_free(x->g, x->ring[i]);
		if (x->stream)
			pool_gpu_stream_destroy(x->g, x->stream);
		pool_gpu_pinned_free(x->g, x->pin);
		pool_gpu_dev_free(x->g, x->dev);
		pool_gpu_close(x->g);
	}
	free(x->ring);
	if (x->r)
		pool_free(x->p, x->r);
	pool_close(x->p);
}

int main(int argc, char **argv)
{
	struct ctx x = { 0 };
	int r = parse_args(argc, argv, &x.c);

	if (r)
		return r < 0 ? 0 : r;
	r = setup(&x);
	if (!r && x.c.fetch)
		r = run_dir(&x, false);
	if (!r && x.c.store)
		r = run_dir(&x, true);
	fflush(stdout);
	teardown(&x);
	return r ? 1 : 0;
}
