// SPDX-License-Identifier: MIT
/*
 * bench/rawfab.c - the raw libfabric baseline of poolbench.
 *
 * The same reads and writes at the same sizes and depths as poolbench,
 * through fabric/fab.h only: no memd, no session, no leases. A target
 * domain + endpoint in this process registers a buffer and is progressed
 * by a thread of its own exactly as memd-fab0 progresses memd's endpoint
 * (fab_ep_serve in a loop, 100 ms turns, memd's default busy_poll_us 0);
 * a client domain + endpoint posts fi_read/fi_write to it over the provider (tcp on loopback by
 * default) and waits with fab_op_wait. What poolbench measures above this
 * is what libpool (and memd's control plane, which is idle during I/O)
 * costs.
 *
 * By default an operation is one RMA of its full size, as a hand-written
 * libfabric program would post it; --xfer BYTES splits it the way libpool
 * splits (LIBPOOL_XFER_BYTES, 1 MiB by default) to compare like with like.
 *
 * --target-process puts the target in a child process instead, as memd
 * lives apart from its clients: on a small VM a switch between processes
 * costs more than one between threads, and that cost is not libpool's.
 *
 * Threads: main (set-up, the client, the measurement) and rawfab-target
 * (progresses the target endpoint until told to stop), in this process or
 * in the child.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "fabric/fab.h"

#define DEFAULT_INFLIGHT 64 /* libpool's default window */
#define OP_TIMEOUT_MS 5000  /* libpool's default operation timeout */
#define TARGET_TURN_MS 100  /* memd-fab0's progress turn */
#define TARGET_KEY 0x7261776661620001ull

struct cfg {
	const char *provider;
	const char *node;
	struct bench_points pts;
	uint64_t xfer; /* 0: one RMA per operation */
	unsigned max_inflight;
	bool target_process; /* target in a child process, not a thread */
};

/* What a client needs to reach the target (crosses a pipe as is). */
struct target_info {
	uint8_t addr[FAB_ADDR_MAX];
	uint64_t addr_len;
	uint64_t base, key;
	int32_t status; /* 0, or -errno of the target's set-up */
};

struct target {
	struct target_info info;
	/* in the process that runs the target: */
	struct fab_domain *d;
	struct fab_ep *ep;
	struct fab_mr *mr;
	uint8_t *buf;
	pthread_t tid;
	bool started;
	int stop; /* atomic */
	int err;  /* the progress thread's last error */
	/* --target-process, in the parent: */
	pid_t child;
	int ctl_fd; /* closing it stops the child */
};

struct client {
	struct fab_domain *d;
	struct fab_ep *ep;
	struct fab_mr *lmr; /* FAB_MR_LOCAL providers */
	void *desc;
	uint64_t peer, raddr, key;
	uint8_t *bufs; /* depth buffers of size bytes */
	size_t size, xfer, npieces;
	struct fab_op *ops; /* depth * npieces */
	size_t *posted;	    /* per slot: pieces posted */
};

static void usage(FILE *f)
{
	fputs("usage: rawfab [options]  raw libfabric RMA, in-process target\n"
	      "options:\n"
	      "  -p, --provider NAME   libfabric provider (default tcp)\n"
	      "      --node ADDR       local address both endpoints bind\n"
	      "                        (default 127.0.0.1; none for shm)\n"
	      "  -s, --sizes LIST      bytes per op (default 4K,64K,1M,4M)\n"
	      "  -d, --depths LIST     ops in flight (default 1,4,16)\n"
	      "      --rw LIST         read, write or read,write (default)\n"
	      "  -T, --seconds S       measured seconds per point (2)\n"
	      "  -n, --ops N           measure N ops per point instead\n"
	      "  -w, --warmup S        unmeasured seconds first (0.2)\n"
	      "  -r, --region SIZE     target bytes offsets cycle over (256M)\n"
	      "  -x, --xfer SIZE       split ops into RMAs of at most SIZE\n"
	      "                        (default: one RMA per op)\n"
	      "      --max-inflight N  RMAs in flight on the client (64)\n"
	      "      --target-process  run the target in a child process (as\n"
	      "                        memd runs apart from its clients)\n"
	      "  -h, --help            this text\n"
	      "One line per point, as poolbench's (see bench/README.md):\n"
	      "  rawfab op=read size=4096 depth=1 threads=1 api=fab ops=..\n"
	      "  secs=.. ops_s=.. MBps=.. p50_us=.. p99_us=.. ...\n",
	      f);
}

static int bad_arg(const char *opt, const char *val, const char *want)
{
	return bench_bad_arg("rawfab", opt, val, want);
}

/* Returns 0, or the exit status for a usage error (2) or help (-1). */
static int parse_args(int argc, char **argv, struct cfg *c)
{
	enum { OPT_NODE = 256, OPT_MAX_INFLIGHT, OPT_TARGET_PROCESS };
	static const struct option longopts[] = {
		{ "provider", required_argument, NULL, 'p' },
		{ "node", required_argument, NULL, OPT_NODE },
		BENCH_POINTS_LONGOPTS,
		{ "xfer", required_argument, NULL, 'x' },
		{ "max-inflight", required_argument, NULL, OPT_MAX_INFLIGHT },
		{ "target-process", no_argument, NULL, OPT_TARGET_PROCESS },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	memset(c, 0, sizeof(*c));
	c->provider = "tcp";
	c->node = NULL; /* see open_domain */
	bench_points_init(&c->pts);
	c->max_inflight = DEFAULT_INFLIGHT;

	while ((opt = bench_points_getopt(&c->pts, argc, argv,
					  "p:x:h" BENCH_POINTS_SHORTOPTS,
					  longopts, "rawfab")) != -1) {
		switch (opt) {
		case 'p':
			c->provider = optarg;
			break;
		case OPT_NODE:
			c->node = optarg;
			break;
		case 'x':
			if (bench_parse_size(optarg, &c->xfer))
				return bad_arg("--xfer", optarg,
					       "want a size like 1M");
			break;
		case OPT_MAX_INFLIGHT:
			if (bench_parse_count("rawfab", "--max-inflight",
					      optarg, 65536, &c->max_inflight))
				return 2;
			break;
		case OPT_TARGET_PROCESS:
			c->target_process = true;
			break;
		default:
			return bench_opt_other(opt, usage, "rawfab");
		}
	}
	return bench_points_end(&c->pts, argc, argv, "rawfab");
}

/*
 * Opens the provider bound to --node, by default loopback; shm takes no
 * node (it would become the endpoint's name, the same for target and
 * client, and the second one to open it gets -EBUSY).
 */
static int open_domain(const struct cfg *c, struct fab_domain **d)
{
	struct fab_opts fo = { .provider = c->provider, .node = c->node };
	int r;

	if (!fo.node && strcmp(c->provider, "shm"))
		fo.node = "127.0.0.1";
	r = fab_domain_open(&fo, d);
	if (r)
		fprintf(stderr, "rawfab: provider '%s' on %s: %s%s\n",
			c->provider, fo.node ? fo.node : "(no node)",
			strerror(-r),
			r == -ENODATA ? " (fi_info -l lists the providers here)"
				      : "");
	return r;
}

/* ---- target -------------------------------------------------------- */

static void *target_main(void *arg)
{
	struct target *t = arg;

	pthread_setname_np(pthread_self(), "rawfab-target");
	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		int r = fab_ep_serve(t->ep, 0, TARGET_TURN_MS, NULL);

		if (r < 0 && r != -ETIMEDOUT && r != -EAGAIN) {
			/* What memd does: report once, do not spin. */
			if (!t->err)
				fprintf(stderr, "rawfab: target progress: %s\n",
					strerror(-r));
			t->err = r;
			break;
		}
	}
	return NULL;
}

/* Stops the progress thread and closes the target (in this process). */
static void target_close(struct target *t)
{
	if (t->started) {
		__atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
		pthread_join(t->tid, NULL);
		t->started = false;
	}
	fab_mr_close(t->mr);
	fab_ep_close(t->ep);
	fab_domain_close(t->d);
	free(t->buf);
	t->mr = NULL;
	t->ep = NULL;
	t->d = NULL;
	t->buf = NULL;
}

/*
 * Opens, registers and starts progressing the target in this process;
 * fills t->info. Explains failures on stderr.
 */
static int target_open(const struct cfg *c, struct target *t)
{
	size_t len = sizeof(t->info.addr);
	int r;

	r = open_domain(c, &t->d);
	if (r)
		return r;
	r = fab_ep_open(t->d, 0, &t->ep);
	if (r) {
		fprintf(stderr, "rawfab: target endpoint: %s\n", strerror(-r));
		goto fail;
	}
	r = fab_ep_name(t->ep, t->info.addr, &len);
	if (r) {
		fprintf(stderr, "rawfab: target address: %s\n", strerror(-r));
		goto fail;
	}
	t->info.addr_len = len;
	t->buf = bench_buf_alloc(c->pts.region);
	if (!t->buf) {
		r = -ENOMEM;
		fprintf(stderr,
			"rawfab: out of memory for the target region\n");
		goto fail;
	}
	r = fab_mr_reg(t->d, t->ep, t->buf, c->pts.region,
		       FAB_ACCESS_REMOTE | FAB_ACCESS_LOCAL, TARGET_KEY,
		       &t->mr);
	if (r) {
		fprintf(stderr, "rawfab: registering the target region: %s\n",
			strerror(-r));
		goto fail;
	}
	t->info.base = fab_mr_remote_base(t->mr);
	t->info.key = fab_mr_key(t->mr);
	r = -pthread_create(&t->tid, NULL, target_main, t);
	if (r) {
		fprintf(stderr, "rawfab: target thread: %s\n", strerror(-r));
		goto fail;
	}
	t->started = true;
	return 0;
fail:
	target_close(t);
	return r;
}

static bool io_full(int fd, void *buf, size_t len, bool wr)
{
	uint8_t *b = buf;

	while (len) {
		ssize_t n = wr ? write(fd, b, len) : read(fd, b, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		b += n;
		len -= (size_t)n;
	}
	return true;
}

/*
 * --target-process: the target lives in a child process, as memd does in
 * its own. The child sends its target_info up one pipe and runs until the
 * other pipe reaches EOF (we closed it, or we died).
 */
static int target_fork(const struct cfg *c, struct target *t)
{
	int info[2], ctl[2];
	pid_t pid;

	if (pipe(info))
		return -errno;
	if (pipe(ctl)) {
		close(info[0]);
		close(info[1]);
		return -errno;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int e = errno;

		fprintf(stderr, "rawfab: fork: %s\n", strerror(e));
		close(info[0]);
		close(info[1]);
		close(ctl[0]);
		close(ctl[1]);
		return -e;
	}
	if (pid == 0) {
		char b;
		int r;

		close(info[0]);
		close(ctl[1]);
		r = target_open(c, t);
		t->info.status = r;
		io_full(info[1], &t->info, sizeof(t->info), true);
		close(info[1]);
		if (!r) {
			while (read(ctl[0], &b, 1) < 0 && errno == EINTR)
				;
			target_close(t);
		}
		_exit(r ? 1 : 0);
	}
	close(info[1]);
	close(ctl[0]);
	t->child = pid;
	t->ctl_fd = ctl[1];
	if (!io_full(info[0], &t->info, sizeof(t->info), false))
		t->info.status = -ECHILD;
	close(info[0]);
	if (t->info.status) {
		if (t->info.status == -ECHILD)
			fprintf(stderr, "rawfab: the target process died\n");
		return t->info.status;
	}
	return 0;
}

static void target_stop(struct target *t)
{
	if (!t->child) {
		target_close(t);
		return;
	}
	if (t->ctl_fd >= 0)
		close(t->ctl_fd);
	t->ctl_fd = -1;
	while (waitpid(t->child, NULL, 0) < 0 && errno == EINTR)
		;
	t->child = 0;
}

static int target_start(const struct cfg *c, struct target *t)
{
	int r;

	memset(t, 0, sizeof(*t));
	t->ctl_fd = -1;
	if (!c->target_process)
		return target_open(c, t);
	r = target_fork(c, t);
	if (r)
		target_stop(t);
	return r;
}

/* ---- client -------------------------------------------------------- */

static void client_close(struct client *cl)
{
	/* Reverse order of creation (fab.h): the MR, then the endpoint,
	 * which settles anything still in flight, then the domain; the
	 * buffers only after all of them. */
	fab_mr_close(cl->lmr);
	fab_ep_close(cl->ep);
	fab_domain_close(cl->d);
	free(cl->bufs);
	free(cl->ops);
	free(cl->posted);
}

static int client_open(const struct cfg *c, const struct target *t,
		       size_t bufs_len, struct client *cl)
{
	int r;

	memset(cl, 0, sizeof(*cl));
	r = open_domain(c, &cl->d);
	if (r)
		return r;
	r = fab_ep_open(cl->d, c->max_inflight, &cl->ep);
	if (!r)
		r = fab_ep_av_insert(cl->ep, t->info.addr,
				     (size_t)t->info.addr_len, &cl->peer);
	if (r) {
		fprintf(stderr, "rawfab: client endpoint: %s\n", strerror(-r));
		goto fail;
	}
	cl->bufs = bench_buf_alloc(bufs_len);
	if (!cl->bufs) {
		r = -ENOMEM;
		fprintf(stderr, "rawfab: out of memory for client buffers\n");
		goto fail;
	}
	if (fab_domain_mr_mode(cl->d) & FAB_MR_LOCAL) {
		r = fab_mr_reg(cl->d, cl->ep, cl->bufs, bufs_len,
			       FAB_ACCESS_LOCAL, 0, &cl->lmr);
		if (r) {
			fprintf(stderr,
				"rawfab: registering client buffers: %s\n",
				strerror(-r));
			goto fail;
		}
		cl->desc = fab_mr_desc(cl->lmr);
	}
	cl->raddr = t->info.base;
	cl->key = t->info.key;
	return 0;
fail:
	client_close(cl);
	return r;
}

/* Waits for the first n pieces of a slot; returns the first error. */
static int slot_wait(struct client *cl, unsigned slot, size_t n)
{
	struct fab_op *ops = cl->ops + (size_t)slot * cl->npieces;
	int first = 0;

	for (size_t k = 0; k < n; k++) {
		int r = fab_op_wait(cl->ep, &ops[k], OP_TIMEOUT_MS);

		if (r && !first)
			first = r;
	}
	return first;
}

static int rma_start(void *ctx, unsigned slot, uint64_t off, size_t len,
		     bool write)
{
	struct client *cl = ctx;
	uint8_t *buf = cl->bufs + (size_t)slot * cl->size;
	struct fab_op *ops = cl->ops + (size_t)slot * cl->npieces;
	size_t k = 0;
	int r = 0;

	for (size_t done = 0; done < len; done += cl->xfer, k++) {
		size_t piece = len - done < cl->xfer ? len - done : cl->xfer;
		uint64_t raddr = cl->raddr + off + done;

		memset(&ops[k], 0, sizeof(ops[k]));
		r = write ? fab_ep_write(cl->ep, buf + done, piece, cl->desc,
					 cl->peer, raddr, cl->key, &ops[k],
					 OP_TIMEOUT_MS)
			  : fab_ep_read(cl->ep, buf + done, piece, cl->desc,
					cl->peer, raddr, cl->key, &ops[k],
					OP_TIMEOUT_MS);
		if (r)
			break;
	}
	if (r) {
		/* Posted pieces still own the buffer: settle them. */
		slot_wait(cl, slot, k);
		return r;
	}
	cl->posted[slot] = k;
	return 0;
}

static int rma_finish(void *ctx, unsigned slot)
{
	struct client *cl = ctx;

	return slot_wait(cl, slot, cl->posted[slot]);
}

/* ---- main ---------------------------------------------------------- */

/* Sets the client up for operations of size bytes at up to depth. */
static int client_shape(struct client *cl, size_t size, uint64_t xfer,
			unsigned depth)
{
	size_t max_msg = fab_domain_max_msg(cl->d);

	cl->size = size;
	cl->xfer = xfer && xfer < size ? xfer : size;
	if (cl->xfer > max_msg)
		cl->xfer = max_msg;
	cl->npieces = (size + cl->xfer - 1) / cl->xfer;
	free(cl->ops);
	free(cl->posted);
	cl->ops = calloc((size_t)depth * cl->npieces, sizeof(*cl->ops));
	cl->posted = calloc(depth, sizeof(*cl->posted));
	if (!cl->ops || !cl->posted) {
		fprintf(stderr, "rawfab: out of memory\n");
		return -ENOMEM;
	}
	return 0;
}

/* The sweep's hooks: a client shaped for each size, the line's extra. */
struct sweep_ctx {
	const struct cfg *c;
	struct client *cl;
	unsigned maxdepth;
	char extra[48];
};

static int sweep_size(void *arg, uint64_t size)
{
	struct sweep_ctx *x = arg;

	return client_shape(x->cl, size, x->c->xfer, x->maxdepth);
}

static const char *sweep_extra(void *arg)
{
	struct sweep_ctx *x = arg;

	snprintf(x->extra, sizeof(x->extra), "pieces=%zu target=%s",
		 x->cl->npieces, x->c->target_process ? "process" : "thread");
	return x->extra;
}

static int run_points(const struct cfg *c, struct client *cl, unsigned maxdepth)
{
	struct bench_engine e = { rma_start, rma_finish, cl };
	struct sweep_ctx x = { .c = c, .cl = cl, .maxdepth = maxdepth };
	struct bench_sweep sw = {
		.prog = "rawfab",
		.bench = "rawfab",
		.api = "fab",
		.threads = 1,
		.engine = &e,
		.size_begin = sweep_size,
		.extra = sweep_extra,
		.arg = &x,
	};

	return bench_sweep_run(&c->pts, &sw);
}

int main(int argc, char **argv)
{
	struct target t;
	struct client cl;
	struct cfg c;
	uint64_t maxsize, connect_ns;
	unsigned maxdepth;
	char rs[32];
	int r;

	r = parse_args(argc, argv, &c);
	if (r)
		return r < 0 ? 0 : r;
	bench_points_max(&c.pts, &maxsize, &maxdepth);
	if (target_start(&c, &t))
		return 1;
	if (client_open(&c, &t, maxsize * maxdepth, &cl)) {
		target_stop(&t);
		return 1;
	}
	/* The first RMA sets up the connection: report it, do not let the
	 * first point pay for it. */
	connect_ns = bench_now_ns();
	r = client_shape(&cl, 1, 0, 1);
	if (!r)
		r = rma_start(&cl, 0, 0, 1, false);
	if (!r)
		r = rma_finish(&cl, 0);
	connect_ns = bench_now_ns() - connect_ns;
	if (r) {
		fprintf(stderr, "rawfab: first read failed: %s\n",
			strerror(-r));
		goto out;
	}
	bench_fmt_size(rs, sizeof(rs), c.pts.region);
	printf("# rawfab provider=%s mr_mode=0x%x max_msg=%zu region=%s "
	       "seconds=%g warmup=%g xfer=%" PRIu64 " target=%s "
	       "connect_ms=%.1f\n",
	       fab_domain_provider(cl.d), fab_domain_mr_mode(cl.d),
	       fab_domain_max_msg(cl.d), rs, c.pts.seconds, c.pts.warmup,
	       c.xfer, c.target_process ? "process" : "thread",
	       (double)connect_ns / 1e6);
	r = run_points(&c, &cl, maxdepth);
out:
	client_close(&cl);
	target_stop(&t);
	return r ? 1 : 0;
}
