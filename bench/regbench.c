// SPDX-License-Identifier: MIT
/*
 * bench/regbench.c - the cluster control plane under load: how fast a
 * registry allocates and frees, what heartbeats of many sessions cost the
 * donor, and the floors to compare them with (docs/bench/registry.md).
 *
 *   regbench alloc      PLACE at the registry + LEASE_GRANT + RELEASE at
 *                       the donor, 1 slab, per thread in a loop ("cycle")
 *   regbench place      PLACE alone, the tickets never redeemed: a phantom
 *                       donor (this process, as "@donor") joins with a
 *                       huge free count so that capacity never runs out,
 *                       and rejoins with a new epoch after each point,
 *                       which drops its grants (docs/cluster.md)
 *   regbench status     STATUS round trips (an empty RPC: the floor)
 *   regbench heartbeat  N tenant sessions on the donor, each holding one
 *                       lease and sending HEARTBEAT2 every ttl/3, from a
 *                       few threads; memd's CPU and RSS from /proc
 *   regbench redis      INCR+DECR pairs on one key of a redis-server (a
 *                       tiny RESP client over TCP): the metadata-service
 *                       baseline
 *
 * Each point prints one line in bench_print's format (bench/README.md),
 * bench name "regbench"; with --memd-pid, memd's CPU time per operation
 * (from /proc/PID/stat) is appended as memd_cpu_us.
 *
 * Threads: main (arguments, set-up, the result), one measuring thread per
 * client (each owns its connections and latency recorders), and in
 * "place" regbench-phantom, which sends the phantom donor's reports.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/benchutil.h"
#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/wire.h"

#define TMO_MS 10000
#define MAX_THREADS 256
#define PHANTOM_NAME "regbench-phantom"
#define PHANTOM_SLABS (1u << 30)
#define RETRY_SLEEP_NS 1000000 /* after ENOSPC / EDQUOT / EAGAIN */
/* EAGAIN: an etcd registry that just took over, while donors rejoin
 * (docs/cluster.md, "The etcd backend"): place again, as for ENOSPC */
#define PLACE_AGAIN(r) ((r) == -ENOSPC || (r) == -EDQUOT || (r) == -EAGAIN)

struct cfg {
	const char *cmd;
	const char *addr;	    /* registry HOST:PORT */
	const char *tenant;	    /* tenant name */
	const char *secret;	    /* tenant secret file */
	const char *cluster_secret; /* place: the phantom donor's key */
	const char *redis;	    /* redis HOST:PORT */
	unsigned threads[BENCH_LIST_MAX];
	unsigned nthreads;
	unsigned sessions;   /* heartbeat */
	unsigned hb_threads; /* heartbeat */
	double seconds, warmup;
	pid_t memd_pid;
};

static void die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fputs("regbench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n, sz);

	if (!p)
		die("out of memory");
	return p;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000u),
			       (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- memd's CPU and memory, from /proc ---------------------------------- */

/* utime + stime of pid in ns; 0 when unreadable. */
static uint64_t proc_cpu_ns(pid_t pid)
{
	char path[64], buf[2048], *p;
	unsigned long long ut, st;
	long hz = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	if (pid <= 0 || hz <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the name in parentheses may hold blanks: fields after the last ')' */
	p = strrchr(buf, ')');
	if (!p ||
	    sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
		   &st) != 2)
		return 0;
	return (ut + st) * (1000000000ull / (uint64_t)hz);
}

/* A "Vm...:" or "Rss...:" line of /proc/PID/status in KiB; 0 if absent. */
static uint64_t proc_status_kib(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t klen = strlen(key);
	uint64_t v = 0;
	FILE *f;

	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, klen) && line[klen] == ':') {
			v = strtoull(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* ---- sessions ------------------------------------------------------------ */

struct tenant_keys {
	uint8_t key[AUTH_KEY_LEN]; /* tenant key */
};

/* One connection with its reusable request/reply messages (a wire_msg is
 * tens of KiB: not on thread stacks). */
struct sess {
	struct rpc *c;
	struct wire_hello_ok hello;
	struct wire_msg *req, *rep;
};

static void sess_init_msgs(struct sess *s)
{
	s->req = xcalloc(1, sizeof(*s->req));
	s->rep = xcalloc(1, sizeof(*s->rep));
}

static void sess_close(struct sess *s)
{
	if (s->c)
		rpc_close(s->c);
	free(s->req);
	free(s->rep);
	memset(s, 0, sizeof(*s));
}

static int sess_connect(struct sess *s, const char *addr, char *err,
			size_t errlen)
{
	char local[64];
	int r;

	if (!s->req)
		sess_init_msgs(s);
	r = rpc_connect(addr, TMO_MS, &s->c, local, sizeof(local));
	if (r) {
		snprintf(err, errlen, "connect %s: %s", addr, strerror(-r));
		return r;
	}
	r = rpc_hello(s->c, "regbench", 2, TMO_MS, &s->hello, err, errlen);
	if (r)
		return r;
	if (s->hello.proto < 2) {
		snprintf(err, errlen, "%s speaks protocol %u, not 2", addr,
			 s->hello.proto);
		return -EPROTONOSUPPORT;
	}
	return 0;
}

static void key_from_file(const char *path, bool tenant,
			  uint8_t key[AUTH_KEY_LEN],
			  struct auth_cluster_keys *ck)
{
	uint8_t secret[AUTH_SECRET_MAX];
	char err[300];
	int n = auth_read_secret_file(path, secret, err, sizeof(err));

	if (n < 0)
		die("%s", err);
	if (tenant)
		auth_tenant_key(secret, (size_t)n, key);
	else
		auth_cluster_keys(secret, (size_t)n, ck);
	memset(secret, 0, sizeof(secret));
}

/* What a registry session gives a tenant: a pass for donor sessions. */
struct pass {
	uint8_t pass[WIRE_PASS_MAX];
	uint16_t pass_len;
	uint8_t key[AUTH_KEY_LEN];
};

/* A tenant session at the registry; *p (may be NULL) gets its pass. */
static int registry_session(struct sess *s, const struct cfg *cfg,
			    const uint8_t tkey[AUTH_KEY_LEN], struct pass *p,
			    char *err, size_t errlen)
{
	struct wire_auth_ok ok;
	uint8_t skey[AUTH_KEY_LEN];
	int r = sess_connect(s, cfg->addr, err, errlen);

	if (r)
		return r;
	r = rpc_auth(s->c, &s->hello, cfg->tenant, tkey, NULL, 0, TMO_MS, &ok,
		     skey, err, errlen);
	if (r)
		return r;
	if (!(ok.flags & WIRE_AUTH_REGISTRY) || !ok.pass_len) {
		snprintf(err, errlen, "%s is not a registry (no donor pass)",
			 cfg->addr);
		return -EINVAL;
	}
	if (p) {
		memcpy(p->pass, ok.pass, ok.pass_len);
		p->pass_len = ok.pass_len;
		r = auth_open(skey, ok.box, ok.box_len, p->key, sizeof(p->key));
		if (r != AUTH_KEY_LEN) {
			snprintf(err, errlen, "pass key: cannot open its box");
			return -EBADMSG;
		}
	}
	return 0;
}

/* A tenant session at a donor, with a pass. */
static int donor_session(struct sess *s, const char *addr, const char *tenant,
			 const struct pass *p, char *err, size_t errlen)
{
	struct wire_auth_ok ok;
	uint8_t skey[AUTH_KEY_LEN];
	int r = sess_connect(s, addr, err, errlen);

	if (r)
		return r;
	return rpc_auth(s->c, &s->hello, tenant, p->key, p->pass, p->pass_len,
			TMO_MS, &ok, skey, err, errlen);
}

static int do_place(struct sess *s, char *err, size_t errlen)
{
	memset(s->req, 0, sizeof(*s->req));
	s->req->type = WIRE_PLACE;
	s->req->u.place.nslabs = 1;
	s->req->u.place.node = WIRE_NODE_ANY;
	return rpc_call(s->c, s->req, s->rep, WIRE_PLACE_OK, TMO_MS, err,
			errlen);
}

/* LEASE_GRANT of t; *l gets the lease. */
static int do_grant(struct sess *s, const struct wire_ticket *t,
		    struct wire_lease *l, char *err, size_t errlen)
{
	int r;

	memset(s->req, 0, sizeof(*s->req));
	s->req->type = WIRE_LEASE_GRANT;
	s->req->u.lease_grant.ticket = *t;
	r = rpc_call(s->c, s->req, s->rep, WIRE_LEASE_GRANT_OK, TMO_MS, err,
		     errlen);
	if (r)
		return r;
	if (s->rep->u.lease_ok.count != 1) {
		snprintf(err, errlen, "LEASE_GRANT_OK with %u leases, not 1",
			 s->rep->u.lease_ok.count);
		return -EPROTO;
	}
	*l = s->rep->u.lease_ok.lease[0];
	return 0;
}

static int do_release(struct sess *s, const struct wire_lease *l, char *err,
		      size_t errlen)
{
	int r;

	memset(s->req, 0, sizeof(*s->req));
	s->req->type = WIRE_RELEASE;
	s->req->u.release.count = 1;
	s->req->u.release.ref[0] = (struct wire_lease_ref){
		.epoch = l->epoch, .slab = l->slab, .generation = l->generation
	};
	r = rpc_call(s->c, s->req, s->rep, WIRE_RELEASE_OK, TMO_MS, err,
		     errlen);
	if (!r && s->rep->u.release_ok.released != 1) {
		snprintf(err, errlen, "RELEASE_OK released %u, not 1",
			 s->rep->u.release_ok.released);
		return -EPROTO;
	}
	return r;
}

/* ---- the thread driver --------------------------------------------------- */

enum mode { M_CYCLE, M_PLACE, M_STATUS, M_REDIS, M_HEARTBEAT };

struct worker {
	pthread_t th;
	const struct cfg *cfg;
	enum mode mode;
	unsigned idx;
	pthread_barrier_t *ready, *go;
	const struct tenant_keys *tk;
	/* results */
	int rc;
	char err[WIRE_MSG_MAX + 64];
	uint64_t ops, retries, elapsed_ns;
	uint64_t placed; /* place: tickets issued, warm-up included */
	struct bench_lat lat, step[3]; /* step: place, grant, release */
	/* connections */
	struct sess reg, don;
	struct pass pass;
	char donor_addr[WIRE_HOSTPORT_MAX]; /* cycle: where don is */
	int fd;				    /* redis */
};

/* A redis connection: TCP to host:port, no delay. */
static int redis_connect(const char *hostport, char *err, size_t errlen)
{
	char host[128];
	const char *colon = strrchr(hostport, ':');
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM },
			*ai;
	int fd, one = 1, r;

	if (!colon || colon == hostport ||
	    (size_t)(colon - hostport) >= sizeof(host)) {
		snprintf(err, errlen, "--redis wants HOST:PORT, got '%s'",
			 hostport);
		return -EINVAL;
	}
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	r = getaddrinfo(host, colon + 1, &hints, &ai);
	if (r) {
		snprintf(err, errlen, "%s: %s", hostport, gai_strerror(r));
		return -EINVAL;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen)) {
		r = -errno;
		snprintf(err, errlen, "connect %s: %s", hostport, strerror(-r));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return r;
	}
	freeaddrinfo(ai);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* Sends a RESP command and reads its integer reply (":N\r\n"). */
static int redis_int_cmd(int fd, const char *cmd, size_t len, long long *v,
			 char *err, size_t errlen)
{
	char buf[128];
	size_t n = 0;

	while (len) {
		ssize_t w = write(fd, cmd, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			snprintf(err, errlen, "redis write: %s",
				 strerror(errno));
			return -EIO;
		}
		cmd += w;
		len -= (size_t)w;
	}
	for (;;) {
		ssize_t rd = read(fd, buf + n, sizeof(buf) - 1 - n);

		if (rd < 0 && errno == EINTR)
			continue;
		if (rd <= 0) {
			snprintf(err, errlen, "redis read: %s",
				 rd ? strerror(errno) : "connection closed");
			return -EIO;
		}
		n += (size_t)rd;
		buf[n] = '\0';
		if (n >= 2 && buf[n - 2] == '\r' && buf[n - 1] == '\n')
			break;
		if (n == sizeof(buf) - 1) {
			snprintf(err, errlen, "redis: reply too long");
			return -EPROTO;
		}
	}
	if (buf[0] != ':') {
		snprintf(err, errlen, "redis replied '%.*s'", (int)n - 2, buf);
		return -EPROTO;
	}
	*v = strtoll(buf + 1, NULL, 10);
	return 0;
}

static const char INCR[] = "*2\r\n$4\r\nINCR\r\n$14\r\nregbench:quota\r\n";
static const char DECR[] = "*2\r\n$4\r\nDECR\r\n$14\r\nregbench:quota\r\n";

/* Connections of worker w for its mode. */
static int worker_setup(struct worker *w)
{
	const struct cfg *cfg = w->cfg;
	struct wire_lease l;
	struct wire_ticket t;
	int r;

	if (w->mode == M_REDIS) {
		w->fd = redis_connect(cfg->redis, w->err, sizeof(w->err));
		return w->fd < 0 ? w->fd : 0;
	}
	r = registry_session(&w->reg, cfg, w->tk->key, &w->pass, w->err,
			     sizeof(w->err));
	if (r || w->mode != M_CYCLE)
		return r;
	/* the donor's address comes with the first placement; capacity
	 * may still be held by the last point's reservations */
	for (int i = 0; i < 30000; i++) {
		r = do_place(&w->reg, w->err, sizeof(w->err));
		if (!PLACE_AGAIN(r))
			break;
		sleep_ns(RETRY_SLEEP_NS);
	}
	if (r)
		return r;
	t = w->reg.rep->u.place_ok.grant[0].ticket;
	memcpy(w->donor_addr, w->reg.rep->u.place_ok.grant[0].addr,
	       sizeof(w->donor_addr));
	r = donor_session(&w->don, w->donor_addr, cfg->tenant, &w->pass, w->err,
			  sizeof(w->err));
	if (!r)
		r = do_grant(&w->don, &t, &l, w->err, sizeof(w->err));
	if (!r)
		r = do_release(&w->don, &l, w->err, sizeof(w->err));
	return r;
}

/* One operation of the worker's mode; latency samples go to lat/step. */
static int worker_op(struct worker *w, bool record)
{
	uint64_t t0 = bench_now_ns(), t1, t2, t3;
	struct wire_lease l;
	struct wire_ticket t;
	long long v;
	int r;

	switch (w->mode) {
	case M_STATUS:
		memset(w->reg.req, 0, sizeof(*w->reg.req));
		w->reg.req->type = WIRE_STATUS;
		r = rpc_call(w->reg.c, w->reg.req, w->reg.rep, WIRE_STATUS_OK,
			     TMO_MS, w->err, sizeof(w->err));
		break;
	case M_REDIS:
		r = redis_int_cmd(w->fd, INCR, sizeof(INCR) - 1, &v, w->err,
				  sizeof(w->err));
		if (!r)
			r = redis_int_cmd(w->fd, DECR, sizeof(DECR) - 1, &v,
					  w->err, sizeof(w->err));
		break;
	case M_PLACE:
		r = do_place(&w->reg, w->err, sizeof(w->err));
		if (!r &&
		    strcmp(w->reg.rep->u.place_ok.grant[0].addr, "phantom:9")) {
			snprintf(w->err, sizeof(w->err),
				 "PLACE went to %s, not the phantom donor",
				 w->reg.rep->u.place_ok.grant[0].addr);
			return -EPROTO;
		}
		if (!r)
			w->placed++;
		break;
	case M_CYCLE:
		r = do_place(&w->reg, w->err, sizeof(w->err));
		if (r)
			break;
		if (w->reg.rep->u.place_ok.ngrants != 1 ||
		    strcmp(w->reg.rep->u.place_ok.grant[0].addr,
			   w->donor_addr)) {
			snprintf(w->err, sizeof(w->err),
				 "PLACE of 1 slab gave %u grants, the first "
				 "at %s, not the donor %s",
				 w->reg.rep->u.place_ok.ngrants,
				 w->reg.rep->u.place_ok.grant[0].addr,
				 w->donor_addr);
			return -EPROTO;
		}
		t = w->reg.rep->u.place_ok.grant[0].ticket;
		t1 = bench_now_ns();
		r = do_grant(&w->don, &t, &l, w->err, sizeof(w->err));
		if (r)
			return r; /* the ticket was ours: any refusal is real */
		t2 = bench_now_ns();
		r = do_release(&w->don, &l, w->err, sizeof(w->err));
		if (r)
			return r;
		t3 = bench_now_ns();
		if (record) {
			bench_lat_add(&w->step[0], t1 - t0);
			bench_lat_add(&w->step[1], t2 - t1);
			bench_lat_add(&w->step[2], t3 - t2);
		}
		break;
	default:
		return -EINVAL;
	}
	if (PLACE_AGAIN(r)) {
		/* capacity or quota held by reservations that the donor's
		 * next report releases: wait a little, try again */
		w->retries++;
		sleep_ns(RETRY_SLEEP_NS);
		return 1;
	}
	if (!r && record) {
		bench_lat_add(&w->lat, bench_now_ns() - t0);
		w->ops++;
	}
	return r;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t start, warm_end, end, now;
	char name[16];
	int r;

	snprintf(name, sizeof(name), "regbench-%u", w->idx);
	pthread_setname_np(pthread_self(), name);
	w->rc = worker_setup(w);
	pthread_barrier_wait(w->ready);
	pthread_barrier_wait(w->go); /* main checked every set-up */
	if (w->rc)
		return NULL;
	start = bench_now_ns();
	warm_end = start + (uint64_t)(w->cfg->warmup * 1e9);
	end = warm_end + (uint64_t)(w->cfg->seconds * 1e9);
	while ((now = bench_now_ns()) < warm_end) {
		r = worker_op(w, false);
		if (r < 0) {
			w->rc = r;
			return NULL;
		}
	}
	w->retries = 0;
	while ((now = bench_now_ns()) < end) {
		r = worker_op(w, true);
		if (r < 0) {
			w->rc = r;
			break;
		}
	}
	w->elapsed_ns = bench_now_ns() - warm_end;
	return NULL;
}

static const char *mode_name(enum mode m)
{
	static const char *const names[] = { "cycle", "place", "status",
					     "incr_decr" };

	return names[m];
}

/* One point: n threads of mode. Returns 0 or the first worker error. */
static int run_point(const struct cfg *cfg, enum mode mode, unsigned n,
		     const struct tenant_keys *tk)
{
	struct worker *w = xcalloc(n, sizeof(*w));
	pthread_barrier_t ready, go;
	struct bench_result res = { 0 };
	struct bench_lat step[3];
	uint64_t cpu0 = 0, cpu1, retries = 0, placed = 0;
	char extra[512];
	size_t el = 0;
	int rc = 0;

	pthread_barrier_init(&ready, NULL, n + 1);
	pthread_barrier_init(&go, NULL, n + 1);
	bench_lat_init(&res.lat);
	for (int k = 0; k < 3; k++)
		bench_lat_init(&step[k]);
	for (unsigned i = 0; i < n; i++) {
		w[i] = (struct worker){ .cfg = cfg,
					.mode = mode,
					.idx = i,
					.ready = &ready,
					.go = &go,
					.tk = tk,
					.fd = -1 };
		bench_lat_init(&w[i].lat);
		for (int k = 0; k < 3; k++)
			bench_lat_init(&w[i].step[k]);
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i]))
			die("pthread_create failed");
	}
	pthread_barrier_wait(&ready);
	for (unsigned i = 0; i < n && !rc; i++)
		if (w[i].rc) {
			fprintf(stderr, "regbench: %s, thread %u set-up: %s\n",
				mode_name(mode), i, w[i].err);
			rc = w[i].rc;
		}
	/* memd's CPU over the measured phase: taken after the warm-up */
	pthread_barrier_wait(&go);
	if (!rc && cfg->memd_pid > 0) {
		sleep_ns((uint64_t)(cfg->warmup * 1e9));
		cpu0 = proc_cpu_ns(cfg->memd_pid);
	}
	for (unsigned i = 0; i < n; i++) {
		pthread_join(w[i].th, NULL);
		if (!rc && w[i].rc) {
			fprintf(stderr, "regbench: %s, thread %u: %s (%s)\n",
				mode_name(mode), i, w[i].err,
				strerror(-w[i].rc));
			rc = w[i].rc;
		}
	}
	cpu1 = proc_cpu_ns(cfg->memd_pid);
	for (unsigned i = 0; i < n && !rc; i++) {
		res.ops += w[i].ops;
		retries += w[i].retries;
		placed += w[i].placed;
		if (w[i].elapsed_ns > res.elapsed_ns)
			res.elapsed_ns = w[i].elapsed_ns;
		if (bench_lat_merge(&res.lat, &w[i].lat))
			die("out of memory");
		for (int k = 0; k < 3; k++)
			if (bench_lat_merge(&step[k], &w[i].step[k]))
				die("out of memory");
	}
	if (!rc) {
		extra[0] = '\0';
		if (mode == M_CYCLE)
			el += (size_t)snprintf(
				extra + el, sizeof(extra) - el,
				"place_p50_us=%.1f place_p99_us=%.1f "
				"grant_p50_us=%.1f grant_p99_us=%.1f "
				"release_p50_us=%.1f release_p99_us=%.1f ",
				bench_lat_pct(&step[0], 50) / 1e3,
				bench_lat_pct(&step[0], 99) / 1e3,
				bench_lat_pct(&step[1], 50) / 1e3,
				bench_lat_pct(&step[1], 99) / 1e3,
				bench_lat_pct(&step[2], 50) / 1e3,
				bench_lat_pct(&step[2], 99) / 1e3);
		if (mode == M_CYCLE || mode == M_PLACE)
			el += (size_t)snprintf(extra + el, sizeof(extra) - el,
					       "retries=%" PRIu64 " ", retries);
		if (cfg->memd_pid > 0 && cpu0 && cpu1 >= cpu0 && res.ops)
			el += (size_t)snprintf(
				extra + el, sizeof(extra) - el,
				"memd_cpu_us=%.2f memd_cpu_pct=%.1f ",
				(double)(cpu1 - cpu0) / 1e3 / (double)res.ops,
				100.0 * (double)(cpu1 - cpu0) /
					(double)res.elapsed_ns);
		if (mode == M_PLACE) /* unredeemed at the end of the point */
			el += (size_t)snprintf(extra + el, sizeof(extra) - el,
					       "grants_end=%" PRIu64 " ",
					       placed);
		if (el && extra[el - 1] == ' ')
			extra[el - 1] = '\0';
		bench_print(stdout, "regbench", mode_name(mode), 0, 1, n,
			    mode == M_REDIS ? "resp" : "rpc", &res,
			    el ? extra : NULL);
	}
	for (unsigned i = 0; i < n; i++) {
		sess_close(&w[i].reg);
		sess_close(&w[i].don);
		if (w[i].fd >= 0)
			close(w[i].fd);
		bench_lat_fini(&w[i].lat);
		for (int k = 0; k < 3; k++)
			bench_lat_fini(&w[i].step[k]);
	}
	bench_lat_fini(&res.lat);
	for (int k = 0; k < 3; k++)
		bench_lat_fini(&step[k]);
	pthread_barrier_destroy(&ready);
	pthread_barrier_destroy(&go);
	free(w);
	return rc;
}

/* ---- the phantom donor (place) ------------------------------------------- */

struct phantom {
	struct sess s;
	uint32_t donor_id, report_ms;
	uint64_t epoch;
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	int rc;
	char err[WIRE_MSG_MAX + 64];
};

/* Joins with a fresh epoch (which drops the grants of the last one) and
 * reports a huge free count. Callers hold no lock: rpc is thread-safe and
 * the reporter only reads donor_id/epoch under ph->lock. */
static int phantom_join(struct phantom *ph)
{
	struct wire_msg *req = xcalloc(1, sizeof(*req));
	struct wire_msg *rep = xcalloc(1, sizeof(*rep));
	uint64_t epoch;
	int r;

	auth_random(&epoch, sizeof(epoch));
	req->type = WIRE_DONOR_JOIN;
	snprintf(req->u.donor_join.name, WIRE_NAME_MAX, "%s", PHANTOM_NAME);
	snprintf(req->u.donor_join.addr, WIRE_HOSTPORT_MAX, "phantom:9");
	req->u.donor_join.epoch = epoch;
	req->u.donor_join.slab_bytes = ph->s.hello.slab_bytes;
	req->u.donor_join.slabs_total = PHANTOM_SLABS;
	r = rpc_call(ph->s.c, req, rep, WIRE_DONOR_JOIN_OK, TMO_MS, ph->err,
		     sizeof(ph->err));
	if (!r) {
		pthread_mutex_lock(&ph->lock);
		ph->donor_id = rep->u.donor_join_ok.donor_id;
		ph->report_ms = rep->u.donor_join_ok.report_ms;
		ph->epoch = epoch;
		pthread_mutex_unlock(&ph->lock);
		memset(req, 0, sizeof(*req));
		req->type = WIRE_DONOR_REPORT;
		req->u.donor_report.donor_id = ph->donor_id;
		req->u.donor_report.epoch = epoch;
		req->u.donor_report.slabs_free = PHANTOM_SLABS;
		r = rpc_call(ph->s.c, req, rep, WIRE_DONOR_REPORT_OK, TMO_MS,
			     ph->err, sizeof(ph->err));
	}
	free(req);
	free(rep);
	return r;
}

static void *phantom_main(void *arg)
{
	struct phantom *ph = arg;
	struct wire_msg *req = xcalloc(1, sizeof(*req));
	struct wire_msg *rep = xcalloc(1, sizeof(*rep));

	pthread_setname_np(pthread_self(), "regbench-phantom");
	pthread_mutex_lock(&ph->lock);
	while (!ph->stop) {
		struct timespec ts;
		uint64_t ns;

		clock_gettime(CLOCK_REALTIME, &ts);
		ns = (uint64_t)ts.tv_nsec + (uint64_t)ph->report_ms * 500000u;
		ts.tv_sec += (time_t)(ns / 1000000000u);
		ts.tv_nsec = (long)(ns % 1000000000u);
		pthread_cond_timedwait(&ph->cond, &ph->lock, &ts);
		if (ph->stop)
			break;
		memset(req, 0, sizeof(*req));
		req->type = WIRE_DONOR_REPORT;
		req->u.donor_report.donor_id = ph->donor_id;
		req->u.donor_report.epoch = ph->epoch;
		req->u.donor_report.slabs_free = PHANTOM_SLABS;
		pthread_mutex_unlock(&ph->lock);
		ph->rc = rpc_call(ph->s.c, req, rep, WIRE_DONOR_REPORT_OK,
				  TMO_MS, ph->err, sizeof(ph->err));
		pthread_mutex_lock(&ph->lock);
		/* ESTALE: a rejoin raced this report; the next one is good */
		if (ph->rc && ph->rc != -ESTALE)
			break;
	}
	pthread_mutex_unlock(&ph->lock);
	free(req);
	free(rep);
	return NULL;
}

static void phantom_start(struct phantom *ph, const struct cfg *cfg)
{
	struct auth_cluster_keys ck;
	struct wire_auth_ok ok;
	uint8_t skey[AUTH_KEY_LEN];
	int r;

	if (!cfg->cluster_secret)
		die("place needs --cluster-secret (the phantom donor joins as "
		    "@donor)");
	key_from_file(cfg->cluster_secret, false, NULL, &ck);
	pthread_mutex_init(&ph->lock, NULL);
	pthread_cond_init(&ph->cond, NULL);
	r = sess_connect(&ph->s, cfg->addr, ph->err, sizeof(ph->err));
	if (!r)
		r = rpc_auth(ph->s.c, &ph->s.hello, "@donor", ck.donor, NULL, 0,
			     TMO_MS, &ok, skey, ph->err, sizeof(ph->err));
	memset(&ck, 0, sizeof(ck));
	if (!r)
		r = phantom_join(ph);
	if (r)
		die("phantom donor: %s (%s)", ph->err, strerror(-r));
	if (pthread_create(&ph->th, NULL, phantom_main, ph))
		die("pthread_create failed");
}

static void phantom_stop(struct phantom *ph)
{
	pthread_mutex_lock(&ph->lock);
	ph->stop = true;
	pthread_cond_signal(&ph->cond);
	pthread_mutex_unlock(&ph->lock);
	pthread_join(ph->th, NULL);
	/* a last new epoch gives the tenant its reservations back; closing
	 * the link then marks the phantom down: nothing more is placed on
	 * it */
	(void)phantom_join(ph);
	sess_close(&ph->s);
}

/* ---- heartbeat ----------------------------------------------------------- */

struct hb_sess {
	struct sess s;
	uint64_t due_ns;
};

struct hb_thread {
	pthread_t th;
	unsigned idx;
	struct hb_sess *ss; /* sessions idx, idx + nth, ... */
	unsigned n;
	uint64_t interval_ns, end_ns;
	struct bench_lat rtt;
	uint64_t sent, late, bad;
	int rc;
	char err[WIRE_MSG_MAX + 64];
};

/* Sends each session's HEARTBEAT2 when due, in due order, until end_ns.
 * late counts heartbeats sent more than a tenth of the interval after
 * they were due (the client could not keep up). */
static void *hb_main(void *arg)
{
	struct hb_thread *t = arg;
	char name[16];

	snprintf(name, sizeof(name), "regbench-hb%u", t->idx);
	pthread_setname_np(pthread_self(), name);
	for (;;) {
		struct hb_sess *h = NULL;
		uint64_t now, t0;

		for (unsigned i = 0; i < t->n; i++)
			if (!h || t->ss[i].due_ns < h->due_ns)
				h = &t->ss[i];
		if (!h || h->due_ns >= t->end_ns)
			break;
		now = bench_now_ns();
		if (now < h->due_ns)
			sleep_ns(h->due_ns - now);
		t0 = bench_now_ns();
		if (t0 > h->due_ns + t->interval_ns / 10)
			t->late++;
		memset(h->s.req, 0, sizeof(*h->s.req));
		h->s.req->type = WIRE_HEARTBEAT2;
		h->s.req->u.heartbeat2.ops = t->sent;
		t->rc = rpc_call(h->s.c, h->s.req, h->s.rep, WIRE_HEARTBEAT2_OK,
				 TMO_MS, t->err, sizeof(t->err));
		if (t->rc)
			break;
		bench_lat_add(&t->rtt, bench_now_ns() - t0);
		t->sent++;
		if (h->s.rep->u.heartbeat_ok.nleases != 1)
			t->bad++; /* every session holds exactly one lease */
		h->due_ns += t->interval_ns;
	}
	return NULL;
}

static void raise_nofile(unsigned need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		die("getrlimit: %s", strerror(errno));
	if (rl.rlim_cur < need) {
		rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need
				      ? need
				      : rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < need)
		die("%u file descriptors needed, RLIMIT_NOFILE allows %llu "
		    "(raise the hard limit: ulimit -Hn)",
		    need, (unsigned long long)rl.rlim_cur);
}

static int cmd_heartbeat(const struct cfg *cfg, const struct tenant_keys *tk)
{
	unsigned n = cfg->sessions, nth = cfg->hb_threads;
	struct hb_sess *hs = xcalloc(n ? n : 1, sizeof(*hs));
	struct hb_thread *th = xcalloc(nth, sizeof(*th));
	struct sess reg = { 0 };
	struct pass pass;
	struct bench_lat rtt;
	uint64_t rss0, rss1, hwm, cpu0, cpu1, t_set0, t_set1, start, ttl_ns;
	uint64_t interval_ns = 0, sent = 0, late = 0, bad = 0;
	double secs, set_s;
	char err[WIRE_MSG_MAX + 64];
	unsigned per;
	int r;

	if (cfg->memd_pid <= 0)
		die("heartbeat needs --memd-pid (memd's CPU and RSS are what "
		    "it measures)");
	raise_nofile(n + 64);
	rss0 = proc_status_kib(cfg->memd_pid, "VmRSS");
	r = registry_session(&reg, cfg, tk->key, &pass, err, sizeof(err));
	if (r)
		die("registry session: %s (%s)", err, strerror(-r));
	/* n sessions at the donor, one lease each: PLACE at the registry,
	 * LEASE_GRANT on the session */
	t_set0 = bench_now_ns();
	for (unsigned i = 0; i < n; i++) {
		struct wire_ticket t;
		struct wire_lease l;
		char addr[WIRE_HOSTPORT_MAX];

		do {
			r = do_place(&reg, err, sizeof(err));
			if (PLACE_AGAIN(r))
				sleep_ns(10 * RETRY_SLEEP_NS);
		} while (PLACE_AGAIN(r));
		if (r)
			die("session %u: PLACE: %s (%s)", i, err, strerror(-r));
		t = reg.rep->u.place_ok.grant[0].ticket;
		memcpy(addr, reg.rep->u.place_ok.grant[0].addr, sizeof(addr));
		r = donor_session(&hs[i].s, addr, cfg->tenant, &pass, err,
				  sizeof(err));
		if (!r)
			r = do_grant(&hs[i].s, &t, &l, err, sizeof(err));
		if (r)
			die("session %u at %s: %s (%s)", i, addr, err,
			    strerror(-r));
		ttl_ns = (uint64_t)hs[i].s.hello.ttl_ms * 1000000u;
		interval_ns = ttl_ns / 3;
	}
	t_set1 = bench_now_ns();
	set_s = (double)(t_set1 - t_set0) / 1e9;
	sess_close(&reg);
	if (!n) {
		/* idle memd: what it costs with no sessions at all */
		interval_ns = 1;
	}
	rss1 = proc_status_kib(cfg->memd_pid, "VmRSS");
	/* spread the sessions' heartbeats evenly over one interval, each
	 * thread taking every nth-th session */
	start = bench_now_ns() + 50000000u;
	for (unsigned i = 0; i < n; i++)
		hs[i].due_ns = start + interval_ns * i / n;
	per = (n + nth - 1) / nth;
	bench_lat_init(&rtt);
	cpu0 = proc_cpu_ns(cfg->memd_pid);
	for (unsigned k = 0; k < nth; k++) {
		th[k].idx = k;
		th[k].interval_ns = interval_ns;
		th[k].end_ns = start + (uint64_t)(cfg->seconds * 1e9);
		th[k].ss = calloc(per ? per : 1, sizeof(*th[k].ss));
		if (!th[k].ss)
			die("out of memory");
		bench_lat_init(&th[k].rtt);
	}
	/* thread k owns sessions k, k + nth, ...: copies of their state
	 * (the connection handles are shared by value, used by k only) */
	for (unsigned i = 0; i < n; i++)
		th[i % nth].ss[th[i % nth].n++] = hs[i];
	for (unsigned k = 0; k < nth; k++)
		if (pthread_create(&th[k].th, NULL, hb_main, &th[k]))
			die("pthread_create failed");
	for (unsigned k = 0; k < nth; k++)
		pthread_join(th[k].th, NULL);
	if (!n)
		sleep_ns((uint64_t)(cfg->seconds * 1e9) + 50000000u);
	cpu1 = proc_cpu_ns(cfg->memd_pid);
	secs = (double)(bench_now_ns() - start) / 1e9;
	hwm = proc_status_kib(cfg->memd_pid, "VmRSS");
	r = 0;
	for (unsigned k = 0; k < nth; k++) {
		if (th[k].rc && !r) {
			fprintf(stderr,
				"regbench: heartbeat thread %u: %s (%s)\n", k,
				th[k].err, strerror(-th[k].rc));
			r = th[k].rc;
		}
		sent += th[k].sent;
		late += th[k].late;
		bad += th[k].bad;
		if (bench_lat_merge(&rtt, &th[k].rtt))
			die("out of memory");
	}
	if (!r && bad) {
		fprintf(stderr,
			"regbench: %" PRIu64 " heartbeats found a session "
			"without its lease\n",
			bad);
		r = -EPROTO;
	}
	if (!r) {
		/* expected heartbeats in the window, for a sanity check */
		double expect =
			n ? cfg->seconds * 1e9 / (double)interval_ns * (double)n
			  : 0;

		printf("regbench op=heartbeat sessions=%u threads=%u secs=%.3f "
		       "interval_ms=%.0f hb=%" PRIu64 " hb_expected=%.0f "
		       "hb_s=%.1f late=%" PRIu64 " rtt_p50_us=%.1f "
		       "rtt_p99_us=%.1f rtt_p999_us=%.1f memd_cpu_pct=%.2f "
		       "memd_rss_kib=%" PRIu64 " memd_rss_before_kib=%" PRIu64
		       " memd_rss_sessions_kib=%" PRIu64
		       " setup_s=%.2f setup_sessions_s=%.0f\n",
		       n, nth, secs, n ? (double)interval_ns / 1e6 : 0.0, sent,
		       expect, (double)sent / secs, late,
		       bench_lat_pct(&rtt, 50) / 1e3,
		       bench_lat_pct(&rtt, 99) / 1e3,
		       bench_lat_pct(&rtt, 99.9) / 1e3,
		       100.0 * (double)(cpu1 - cpu0) / (secs * 1e9), hwm, rss0,
		       rss1 > rss0 ? rss1 - rss0 : 0, set_s,
		       set_s > 0 ? (double)n / set_s : 0.0);
		fflush(stdout);
	}
	for (unsigned k = 0; k < nth; k++) {
		bench_lat_fini(&th[k].rtt);
		free(th[k].ss);
	}
	for (unsigned i = 0; i < n; i++)
		sess_close(&hs[i].s);
	bench_lat_fini(&rtt);
	free(th);
	free(hs);
	return r;
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
	fputs("usage: regbench alloc|place|status|heartbeat --addr HOST:PORT "
	      "--tenant NAME --secret FILE [options]\n"
	      "       regbench redis --redis HOST:PORT [options]\n"
	      "  alloc      PLACE + LEASE_GRANT + RELEASE of 1 slab, in a "
	      "loop per thread\n"
	      "  place      PLACE alone (a phantom donor takes the tickets; "
	      "needs --cluster-secret)\n"
	      "  status     STATUS round trips at the registry (empty RPC)\n"
	      "  heartbeat  --sessions N tenant sessions on the donor, one "
	      "lease each,\n"
	      "             HEARTBEAT2 every ttl/3 (needs --memd-pid)\n"
	      "  redis      INCR+DECR pairs on one key of a redis-server\n"
	      "options:\n"
	      "  --threads LIST        client threads per point (1,4,16)\n"
	      "  --seconds S           measured time per point (2; "
	      "heartbeat 30)\n"
	      "  --warmup S            unmeasured time first (0.2)\n"
	      "  --sessions N          heartbeat: sessions (1000)\n"
	      "  --hb-threads N        heartbeat: client threads (4)\n"
	      "  --memd-pid PID        memd's CPU (and RSS) from /proc\n"
	      "  --cluster-secret F    place: the pool's cluster secret\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "tenant", required_argument, NULL, 't' },
		{ "secret", required_argument, NULL, 's' },
		{ "cluster-secret", required_argument, NULL, 'c' },
		{ "redis", required_argument, NULL, 'R' },
		{ "threads", required_argument, NULL, 'T' },
		{ "seconds", required_argument, NULL, 'S' },
		{ "warmup", required_argument, NULL, 'W' },
		{ "sessions", required_argument, NULL, 'N' },
		{ "hb-threads", required_argument, NULL, 'H' },
		{ "memd-pid", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct cfg cfg = {
		.seconds = 0, .warmup = 0.2, .sessions = 1000, .hb_threads = 4
	};
	struct tenant_keys tk;
	enum mode mode;
	char *end;
	unsigned v;
	int o, rc = 0;

	cfg.threads[0] = 1, cfg.threads[1] = 4, cfg.threads[2] = 16;
	cfg.nthreads = 3;
	if (argc < 2 || argv[1][0] == '-') {
		if (argc >= 2 && !strcmp(argv[1], "--help")) {
			usage(stdout);
			return 0;
		}
		usage(stderr);
		return 2;
	}
	cfg.cmd = argv[1];
	optind = 2;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'a':
			cfg.addr = optarg;
			break;
		case 't':
			cfg.tenant = optarg;
			break;
		case 's':
			cfg.secret = optarg;
			break;
		case 'c':
			cfg.cluster_secret = optarg;
			break;
		case 'R':
			cfg.redis = optarg;
			break;
		case 'T':
			if (bench_parse_uints(optarg, MAX_THREADS, cfg.threads,
					      BENCH_LIST_MAX, &cfg.nthreads))
				die("--threads: '%s' is not a list of 1..%d",
				    optarg, MAX_THREADS);
			break;
		case 'S':
			if (bench_parse_seconds(optarg, &cfg.seconds))
				die("--seconds: '%s' is not a positive "
				    "number",
				    optarg);
			break;
		case 'W':
			if (!strcmp(optarg, "0"))
				cfg.warmup = 0;
			else if (bench_parse_seconds(optarg, &cfg.warmup))
				die("--warmup: '%s' is not a number", optarg);
			break;
		case 'N':
			errno = 0;
			v = (unsigned)strtoul(optarg, &end, 10);
			if (errno || *end || !*optarg || v > 60000)
				die("--sessions: '%s' is not 0..60000", optarg);
			cfg.sessions = v;
			break;
		case 'H':
			if (bench_parse_uints(optarg, MAX_THREADS, &v, 1,
					      &(unsigned){ 0 }))
				die("--hb-threads: '%s' is not 1..%d", optarg,
				    MAX_THREADS);
			cfg.hb_threads = v;
			break;
		case 'p':
			errno = 0;
			cfg.memd_pid = (pid_t)strtol(optarg, &end, 10);
			if (errno || *end || cfg.memd_pid <= 0)
				die("--memd-pid: '%s' is not a pid", optarg);
			if (!proc_cpu_ns(cfg.memd_pid))
				die("--memd-pid: cannot read /proc/%s/stat",
				    optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc)
		die("unexpected argument '%s'", argv[optind]);
	if (!strcmp(cfg.cmd, "alloc"))
		mode = M_CYCLE;
	else if (!strcmp(cfg.cmd, "place"))
		mode = M_PLACE;
	else if (!strcmp(cfg.cmd, "status"))
		mode = M_STATUS;
	else if (!strcmp(cfg.cmd, "redis"))
		mode = M_REDIS;
	else if (!strcmp(cfg.cmd, "heartbeat"))
		mode = M_HEARTBEAT;
	else {
		usage(stderr);
		die("unknown command '%s'", cfg.cmd);
	}
	if (!cfg.seconds)
		cfg.seconds = mode == M_HEARTBEAT ? 30 : 2;
	if (mode == M_REDIS) {
		if (!cfg.redis)
			die("redis needs --redis HOST:PORT");
	} else if (!cfg.addr || !cfg.tenant || !cfg.secret) {
		die("%s needs --addr, --tenant and --secret", cfg.cmd);
	}
	if (auth_init())
		die("libsodium did not initialise");
	if (mode != M_REDIS)
		key_from_file(cfg.secret, true, tk.key, NULL);
	if (mode == M_HEARTBEAT)
		return cmd_heartbeat(&cfg, &tk) ? 1 : 0;
	raise_nofile(2 * MAX_THREADS + 64);
	for (unsigned i = 0; i < cfg.nthreads && !rc; i++) {
		struct phantom ph = { 0 };

		if (mode == M_PLACE)
			phantom_start(&ph, &cfg);
		rc = run_point(&cfg, mode, cfg.threads[i], &tk);
		if (mode == M_PLACE)
			phantom_stop(&ph);
	}
	return rc ? 1 : 0;
}
