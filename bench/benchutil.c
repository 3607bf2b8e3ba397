// SPDX-License-Identifier: MIT
/*
 * bench/benchutil.c - parsing, latency percentiles, the depth driver, the
 * sweep of points and the result line shared by the benchmarks
 * (bench/benchutil.h).
 *
 * The depth driver keeps a ring of depth slots: it starts every slot, then
 * finishes the oldest and at once starts it again, so exactly depth
 * operations are in flight until the phase ends; then it drains. Ops are
 * reaped in start order, so an op that completed early behind a slower
 * older one is counted as done when its turn comes: at depth > 1 the
 * latency is what a caller waiting in order sees, not the wire time.
 */
#include "bench/benchutil.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double bench_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void bench_sort_doubles(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

uint64_t bench_thread_cpu_ns(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru))
		return 0;
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
		       1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
		       1000u;
}

int bench_proc_cpu_ns(int pid, uint64_t *ns)
{
	unsigned long long ut, st;
	char path[64], buf[1024], *p;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields count from the last
	 * ')'; utime and stime are fields 14 and 15, the 12th and 13th
	 * after it. */
	p = strrchr(buf, ')');
	if (!p || hz <= 0 ||
	    sscanf(p + 1,
		   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
		   &ut, &st) != 2)
		return -EIO;
	*ns = (uint64_t)(ut + st) * (1000000000u / (uint64_t)hz);
	return 0;
}

/* ---- parsing ------------------------------------------------------- */

int bench_parse_server_pid(const char *arg, const char *prog, int *pid)
{
	unsigned v[1], n;
	uint64_t ns;

	if (bench_parse_uints(arg, 1u << 30, v, 1, &n))
		return bench_bad_arg(prog, "--server-pid", arg,
				     "want a process id");
	if (bench_proc_cpu_ns((int)v[0], &ns))
		return bench_bad_arg(prog, "--server-pid", arg,
				     "no such process (or its /proc/PID/stat "
				     "is unreadable)");
	*pid = (int)v[0];
	return 0;
}

int bench_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	switch (toupper((unsigned char)*end)) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		break;
	}
	if (shift) {
		end++;
		if (toupper((unsigned char)end[0]) == 'I' &&
		    toupper((unsigned char)end[1]) == 'B')
			end += 2;
		else if (toupper((unsigned char)end[0]) == 'B')
			end++;
	} else if (toupper((unsigned char)*end) == 'B') {
		end++;
	}
	if (*end || v == 0)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Splits s at commas into at most max pieces; calls one per piece. */
static int parse_list(const char *s, unsigned max, unsigned *n,
		      int (*one)(const char *tok, unsigned i, void *arg),
		      void *arg)
{
	char *copy, *tok, *save = NULL;
	unsigned k = 0;
	int r = 0;

	if (!s || !*s)
		return -EINVAL;
	copy = strdup(s);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (k == max) {
			r = -E2BIG;
			break;
		}
		r = one(tok, k, arg);
		if (r)
			break;
		k++;
	}
	free(copy);
	if (!r && !k)
		r = -EINVAL;
	if (!r)
		*n = k;
	return r;
}

static int one_size(const char *tok, unsigned i, void *arg)
{
	return bench_parse_size(tok, (uint64_t *)arg + i);
}

int bench_parse_sizes(const char *s, uint64_t *v, unsigned max, unsigned *n)
{
	return parse_list(s, max, n, one_size, v);
}

struct uints_arg {
	unsigned *v;
	unsigned lim;
};

static int one_uint(const char *tok, unsigned i, void *arg)
{
	struct uints_arg *a = arg;
	unsigned long x;
	char *end;

	if (!isdigit((unsigned char)*tok))
		return -EINVAL;
	errno = 0;
	x = strtoul(tok, &end, 10);
	if (errno || *end || x == 0 || x > a->lim)
		return -EINVAL;
	a->v[i] = (unsigned)x;
	return 0;
}

int bench_parse_uints(const char *s, unsigned lim, unsigned *v, unsigned max,
		      unsigned *n)
{
	struct uints_arg a = { v, lim };

	return parse_list(s, max, n, one_uint, &a);
}

int bench_parse_seconds(const char *s, double *out)
{
	char *end;
	double v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !(v > 0) || v > 86400)
		return -EINVAL;
	*out = v;
	return 0;
}

/* rw[0]: "read" named, rw[1]: "write" */
static int one_rw(const char *tok, unsigned i, void *arg)
{
	bool *rw = arg;

	if (!strcmp(tok, "read"))
		rw[0] = true;
	else if (!strcmp(tok, "write"))
		rw[1] = true;
	else
		return -EINVAL;
	return 0;
}

int bench_parse_rw(const char *s, bool *read, bool *write)
{
	bool rw[2] = { false, false };
	unsigned n;

	if (parse_list(s, UINT_MAX, &n, one_rw, rw))
		return -EINVAL;
	*read = rw[0];
	*write = rw[1];
	return 0;
}

void bench_fmt_size(char *buf, size_t len, uint64_t bytes)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;
	double v = (double)bytes;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0 || v == (double)(uint64_t)v)
		snprintf(buf, len, "%.0f %s", v, unit[u]);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
}

/* ---- latency ------------------------------------------------------- */

void bench_lat_init(struct bench_lat *l)
{
	memset(l, 0, sizeof(*l));
}

void bench_lat_fini(struct bench_lat *l)
{
	free(l->ns);
	memset(l, 0, sizeof(*l));
}

void bench_lat_reset(struct bench_lat *l)
{
	l->n = 0;
	l->dropped = 0;
	l->sorted = false;
}

static int lat_reserve(struct bench_lat *l, size_t want)
{
	size_t cap = l->cap ? l->cap : 4096;
	uint64_t *ns;

	if (want <= l->cap)
		return 0;
	while (cap < want)
		cap *= 2;
	ns = realloc(l->ns, cap * sizeof(*ns));
	if (!ns)
		return -ENOMEM;
	l->ns = ns;
	l->cap = cap;
	return 0;
}

void bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n == l->cap && lat_reserve(l, l->n + 1)) {
		l->dropped++;
		return;
	}
	l->ns[l->n++] = ns;
	l->sorted = false;
}

int bench_lat_merge(struct bench_lat *dst, const struct bench_lat *src)
{
	if (lat_reserve(dst, dst->n + src->n))
		return -ENOMEM;
	if (src->n) /* an empty recorder may have no array at all */
		memcpy(dst->ns + dst->n, src->ns, src->n * sizeof(*src->ns));
	dst->n += src->n;
	dst->dropped += src->dropped;
	dst->sorted = false;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t bench_lat_pct(struct bench_lat *l, double p)
{
	size_t rank;

	if (!l->n)
		return 0;
	if (!l->sorted) {
		qsort(l->ns, l->n, sizeof(*l->ns), cmp_u64);
		l->sorted = true;
	}
	/* Nearest rank: the smallest sample with at least p% at or below. */
	rank = (size_t)((p / 100.0) * (double)l->n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > l->n)
		rank = l->n;
	return l->ns[rank - 1];
}

uint64_t bench_lat_mean(const struct bench_lat *l)
{
	long double sum = 0;

	if (!l->n)
		return 0;
	for (size_t i = 0; i < l->n; i++)
		sum += l->ns[i];
	return (uint64_t)(sum / l->n);
}

/* ---- the depth driver ---------------------------------------------- */

struct phase {
	const struct bench_engine *e;
	const struct bench_spec *s;
	uint64_t nslots; /* distinct offsets in the region */
	uint64_t seq;	 /* next op's sequence number, for its offset */
	uint64_t start_ns[BENCH_DEPTH_MAX];
};

static int phase_start(struct phase *ph, unsigned slot)
{
	const struct bench_spec *s = ph->s;
	uint64_t idx = (ph->seq * s->nlanes + s->lane) % ph->nslots;
	int r;

	ph->seq++;
	ph->start_ns[slot] = bench_now_ns();
	r = ph->e->start(ph->e->ctx, slot, idx * s->size, s->size, s->write);
	return r;
}

/*
 * One phase: runs for seconds or count ops at full depth, then drains.
 * lat may be NULL (warm-up). Returns 0 or the first error; on error every
 * op still in flight has been finished.
 */
static int run_phase(struct phase *ph, double seconds, uint64_t count,
		     struct bench_lat *lat, uint64_t *ops, uint64_t *elapsed)
{
	const struct bench_engine *e = ph->e;
	unsigned depth = ph->s->depth;
	uint64_t t0 = bench_now_ns(), t = t0;
	uint64_t limit_ns = (uint64_t)(seconds * 1e9);
	uint64_t posted = 0, done = 0;
	int err = 0;

	while (posted - done < depth && (count ? posted < count : true)) {
		err = phase_start(ph, (unsigned)(posted % depth));
		if (err)
			break;
		posted++;
	}
	while (done < posted) {
		unsigned slot = (unsigned)(done % depth);
		int r = e->finish(e->ctx, slot);

		t = bench_now_ns();
		done++;
		if (r && !err)
			err = r;
		if (!r && lat)
			bench_lat_add(lat, t - ph->start_ns[slot]);
		if (err)
			continue; /* drain what is in flight */
		if (count ? posted < count : t - t0 < limit_ns) {
			err = phase_start(ph, slot);
			if (!err)
				posted++;
		}
	}
	*ops = done;
	*elapsed = t - t0;
	return err;
}

int bench_run(const struct bench_engine *e, const struct bench_spec *spec,
	      struct bench_result *res)
{
	struct phase *ph;
	uint64_t ops, ns, cpu;
	int r = 0;

	if (!e || !spec || !res || !spec->size || !spec->depth ||
	    spec->depth > BENCH_DEPTH_MAX || spec->region < spec->size ||
	    !spec->nlanes || spec->lane >= spec->nlanes ||
	    (!spec->count && !(spec->seconds > 0)))
		return -EINVAL;
	ph = calloc(1, sizeof(*ph));
	if (!ph)
		return -ENOMEM;
	ph->e = e;
	ph->s = spec;
	ph->nslots = spec->region / spec->size;
	bench_lat_reset(&res->lat);
	res->ops = 0;
	res->elapsed_ns = 0;
	res->cpu_ns = 0;
	if (spec->warmup > 0)
		r = run_phase(ph, spec->warmup, 0, NULL, &ops, &ns);
	res->srv_cpu_valid = false;
	if (!r) {
		uint64_t srv0 = 0, srv1 = 0;
		bool srv = spec->srv_pid &&
			   !bench_proc_cpu_ns(spec->srv_pid, &srv0);

		cpu = bench_thread_cpu_ns();
		r = run_phase(ph, spec->seconds, spec->count, &res->lat,
			      &res->ops, &res->elapsed_ns);
		res->cpu_ns = bench_thread_cpu_ns() - cpu;
		if (srv && !bench_proc_cpu_ns(spec->srv_pid, &srv1)) {
			res->srv_cpu_ns = srv1 - srv0;
			res->srv_cpu_valid = true;
		}
	}
	free(ph);
	return r;
}

void bench_print(FILE *f, const char *bench, const char *op, uint64_t size,
		 unsigned depth, unsigned threads, const char *api,
		 struct bench_result *res, const char *extra)
{
	double secs = (double)res->elapsed_ns / 1e9;
	double ops_s = secs > 0 ? (double)res->ops / secs : 0;
	double cpu_us =
		res->ops ? (double)res->cpu_ns / 1e3 / (double)res->ops : 0;
	char srv[96] = "";

	if (res->srv_cpu_valid && res->ops && size)
		snprintf(srv, sizeof(srv),
			 " srv_cpu_us=%.2f srv_cpu_s_per_GB=%.4f",
			 (double)res->srv_cpu_ns / 1e3 / (double)res->ops,
			 (double)res->srv_cpu_ns / 1e9 /
				 ((double)res->ops * (double)size / 1e9));

	fprintf(f,
		"%s op=%s size=%" PRIu64 " depth=%u threads=%u api=%s "
		"ops=%" PRIu64 " secs=%.3f ops_s=%.0f MBps=%.1f "
		"p50_us=%.1f p99_us=%.1f mean_us=%.1f p90_us=%.1f "
		"p999_us=%.1f cpu_us=%.2f%s%s%s\n",
		bench, op, size, depth, threads, api, res->ops, secs, ops_s,
		ops_s * (double)size / 1e6,
		(double)bench_lat_pct(&res->lat, 50) / 1e3,
		(double)bench_lat_pct(&res->lat, 99) / 1e3,
		(double)bench_lat_mean(&res->lat) / 1e3,
		(double)bench_lat_pct(&res->lat, 90) / 1e3,
		(double)bench_lat_pct(&res->lat, 99.9) / 1e3, cpu_us, srv,
		extra ? " " : "", extra ? extra : "");
	fflush(f);
}

int bench_tcp_connect(const char *hostport, int *fd)
{
	char host[256];
	const char *colon = hostport ? strrchr(hostport, ':') : NULL;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int one = 1, r = 0;

	*fd = -1;
	if (!colon || (size_t)(colon - hostport) >= sizeof(host))
		return -EINVAL;
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		return -EINVAL;
	*fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*fd < 0 || connect(*fd, ai->ai_addr, ai->ai_addrlen)) {
		r = -errno;
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	freeaddrinfo(ai);
	if (!r)
		setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return r;
}

int bench_writev_all(int fd, struct iovec *iov, int n)
{
	while (n) {
		ssize_t w = writev(fd, iov, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -EIO;
		while (n && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n) {
			iov->iov_base = (uint8_t *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

void *bench_buf_alloc(size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	void *p;

	if (page <= 0)
		page = 4096;
	if (posix_memalign(&p, (size_t)page, len ? len : 1))
		return NULL;
	/* Fault every page in now, not inside a measurement; ask for huge
	 * pages where the kernel allows so big buffers cost fewer TLB
	 * misses, as memd's donation does. */
	madvise(p, len, MADV_HUGEPAGE);
	memset(p, 0xa5, len);
	return p;
}

int bench_try_help(const char *prog)
{
	fprintf(stderr, "%s: try '%s --help'\n", prog, prog);
	return 2;
}

int bench_bad_arg(const char *prog, const char *opt, const char *val,
		  const char *want)
{
	fprintf(stderr, "%s: %s '%s': %s\n", prog, opt, val, want);
	return bench_try_help(prog);
}

int bench_args_left(const char *prog, int first, int argc, char **argv)
{
	if (first >= argc)
		return 0;
	fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[first]);
	return 2;
}

int bench_parse_count(const char *prog, const char *opt, const char *arg,
		      unsigned max, unsigned *out)
{
	char want[48];
	unsigned v[1], n;

	if (!bench_parse_uints(arg, max, v, 1, &n)) {
		*out = v[0];
		return 0;
	}
	snprintf(want, sizeof(want), "want a count 1..%u", max);
	return bench_bad_arg(prog, opt, arg, want);
}

int bench_opt_other(int opt, void (*usage)(FILE *f), const char *prog)
{
	if (opt == BENCH_OPT_BAD)
		return 2;
	if (opt == 'h') {
		usage(stdout);
		return -1;
	}
	return bench_try_help(prog);
}

/* ---- a sweep of points --------------------------------------------- */

void bench_points_init(struct bench_points *p)
{
	memset(p, 0, sizeof(*p));
	p->sizes[0] = 4u << 10;
	p->sizes[1] = 64u << 10;
	p->sizes[2] = 1u << 20;
	p->sizes[3] = 4u << 20;
	p->nsizes = 4;
	p->depths[0] = 1;
	p->depths[1] = 4;
	p->depths[2] = 16;
	p->ndepths = 3;
	p->read = p->write = true;
	p->seconds = 2.0;
	p->warmup = 0.2;
	p->region = 256ull << 20;
}

int bench_points_opt(struct bench_points *p, int opt, const char *arg,
		     const char *prog)
{
	switch (opt) {
	case 's':
		if (bench_parse_sizes(arg, p->sizes, BENCH_LIST_MAX,
				      &p->nsizes))
			return bench_bad_arg(prog, "--sizes", arg,
					     "want sizes like 4K,64K,1M");
		return 1;
	case 'd':
		if (bench_parse_uints(arg, BENCH_DEPTH_MAX, p->depths,
				      BENCH_LIST_MAX, &p->ndepths))
			return bench_bad_arg(prog, "--depths", arg,
					     "want depths 1..256 like 1,4,16");
		return 1;
	case BENCH_OPT_RW:
		if (bench_parse_rw(arg, &p->read, &p->write))
			return bench_bad_arg(prog, "--rw", arg,
					     "want read, write or read,write");
		return 1;
	case 'T':
		if (bench_parse_seconds(arg, &p->seconds))
			return bench_bad_arg(prog, "--seconds", arg,
					     "want positive seconds");
		return 1;
	case 'n':
		if (bench_parse_size(arg, &p->count))
			return bench_bad_arg(prog, "--ops", arg,
					     "want a positive count");
		return 1;
	case 'w':
		if (!strcmp(arg, "0"))
			p->warmup = 0;
		else if (bench_parse_seconds(arg, &p->warmup))
			return bench_bad_arg(prog, "--warmup", arg,
					     "want seconds (0 for none)");
		return 1;
	case 'r':
		if (bench_parse_size(arg, &p->region))
			return bench_bad_arg(prog, "--region", arg,
					     "want a size like 256M");
		return 1;
	default:
		return 0;
	}
}

int bench_points_check(const struct bench_points *p, const char *prog)
{
	for (unsigned i = 0; i < p->nsizes; i++) {
		char s[32], r[32];

		if (p->sizes[i] <= p->region)
			continue;
		bench_fmt_size(s, sizeof(s), p->sizes[i]);
		bench_fmt_size(r, sizeof(r), p->region);
		fprintf(stderr,
			"%s: size %s is larger than the region (%s); raise "
			"--region\n",
			prog, s, r);
		return 2;
	}
	return 0;
}

int bench_points_getopt(struct bench_points *p, int argc, char **argv,
			const char *shortopts, const struct option *longopts,
			const char *prog)
{
	int opt, r;

	while ((opt = getopt_long(argc, argv, shortopts, longopts, NULL)) !=
	       -1) {
		r = bench_points_opt(p, opt, optarg, prog);
		if (r == 2)
			return BENCH_OPT_BAD;
		if (!r)
			return opt;
	}
	return -1;
}

int bench_points_end(const struct bench_points *p, int argc, char **argv,
		     const char *prog)
{
	if (bench_args_left(prog, optind, argc, argv))
		return 2;
	return bench_points_check(p, prog);
}

void bench_points_max(const struct bench_points *p, uint64_t *size,
		      unsigned *depth)
{
	*size = 0;
	*depth = 0;
	for (unsigned i = 0; i < p->nsizes; i++)
		if (p->sizes[i] > *size)
			*size = p->sizes[i];
	for (unsigned i = 0; i < p->ndepths; i++)
		if (p->depths[i] > *depth)
			*depth = p->depths[i];
}

static int sweep_point(const struct bench_sweep *sw, const char *op,
		       const struct bench_spec *s, struct bench_result *res)
{
	int r = sw->run ? sw->run(sw->arg, s, res)
			: bench_run(sw->engine, s, res);

	if (r) {
		fprintf(stderr, "%s: %s size=%" PRIu64 " depth=%u failed: %s\n",
			sw->prog, op, s->size, s->depth,
			sw->strerror ? sw->strerror(r) : strerror(-r));
		return r;
	}
	bench_print(stdout, sw->bench, op, s->size, s->depth, sw->threads,
		    sw->api, res, sw->extra ? sw->extra(sw->arg) : NULL);
	bench_lat_reset(&res->lat);
	return 0;
}

int bench_sweep_run(const struct bench_points *p, const struct bench_sweep *sw)
{
	unsigned nd = sw->depth ? 1 : p->ndepths;
	struct bench_result res;
	int r = 0;

	memset(&res, 0, sizeof(res));
	bench_lat_init(&res.lat);
	for (int w = 0; w < 2 && !r; w++) {
		const char *op = w ? (sw->op_write ? sw->op_write : "write")
				   : (sw->op_read ? sw->op_read : "read");

		if ((w && !p->write) || (!w && !p->read))
			continue;
		for (unsigned i = 0; i < p->nsizes && !r; i++) {
			if (sw->size_begin)
				r = sw->size_begin(sw->arg, p->sizes[i]);
			for (unsigned j = 0; j < nd && !r; j++) {
				struct bench_spec s = {
					.size = p->sizes[i],
					.region = p->region,
					.depth = sw->depth ? sw->depth
							   : p->depths[j],
					.write = w,
					.seconds = p->seconds,
					.count = p->count,
					.warmup = p->warmup,
					.lane = 0,
					.nlanes = 1,
					.srv_pid = sw->srv_pid,
				};

				r = sweep_point(sw, op, &s, &res);
			}
		}
	}
	bench_lat_fini(&res.lat);
	return r;
}

int bench_slab_get(void *arg, uint32_t tenant, uint32_t *slab, uint8_t **base)
{
	struct bench_slabs *o = arg;

	(void)tenant;
	for (uint32_t i = 0; i < o->n; i++)
		if (!o->used[i]) {
			o->used[i] = 1;
			*slab = i;
			*base = o->mem[i];
			return 0;
		}
	return -ENOSPC;
}

void bench_slab_put(void *arg, uint32_t slab)
{
	((struct bench_slabs *)arg)->used[slab] = 0;
}
