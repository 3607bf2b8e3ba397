// SPDX-License-Identifier: MIT
/*
 * bench/mcbench.c - memcached GET/SET of fixed-size values, the peer that
 * run_poolbench.sh sets beside redis-benchmark (Debian 12 has no
 * memtier_benchmark, and libmemcached-tools has no load generator to rely
 * on).
 *
 * Semantics of redis-benchmark as run_poolbench.sh runs it: depth
 * connections, each with one request in flight (-c depth -P 1), from one
 * thread that polls over the connections; fixed-size values; the keys
 * are set before a size's points (unless --no-preset). Text protocol:
 *   get KEY                  VALUE KEY FLAGS BYTES / data / END
 *   set KEY 0 0 BYTES / data STORED
 * Every GET reply's value length is checked against the size, and the
 * bytes of every --verify-every'th one against what was set; a miss, a
 * wrong length, wrong bytes or an error reply fails the point (exit 1).
 *
 * The depth driver and the result lines are bench/benchutil's, as for
 * poolbench: op=get and op=set, api=text, and with --server-pid the
 * server's CPU time per op and per GB (srv_cpu_us, srv_cpu_s_per_GB).
 * Replies are reaped in start order (a reply that came early waits for
 * its turn, as poolbench's pool_wait does), but every poll reads whatever
 * any connection has, so no connection's reply waits in the kernel.
 *
 * Keys: "mcbench:SIZE:K" for K in 0 .. --keys-1; key K's value is the
 * bytes of a fixed pseudo-random stream from offset K (so neighbouring
 * keys differ and a value read back under the wrong key is caught).
 *
 * Threads: main only.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench/benchutil.h"

#define DEFAULT_ADDR "127.0.0.1:11211"
#define KEYS_MAX 4096
#define HDR_MAX 128 /* "VALUE key flags bytes\r\n" and "END\r\n" fit */

struct cfg {
	const char *addr;
	struct bench_points pts;
	unsigned nkeys;
	unsigned verify_every; /* 0: lengths only */
	bool preset;
	int server_pid;
};

/* One connection, one request in flight. */
struct conn {
	int fd;
	uint8_t *rb; /* the reply being read */
	size_t rlen, rcap;
	bool busy;  /* a request is in flight */
	bool done;  /* its reply is complete (result says how it went) */
	bool write; /* the request is a set */
	bool check; /* compare the value's bytes */
	unsigned key;
	size_t size;
	int result;
};

struct mc {
	const struct cfg *c;
	struct conn *conns;
	unsigned nconns;
	uint8_t *pattern; /* maxsize + nkeys bytes */
	uint64_t gets;	  /* for --verify-every */
	uint64_t verified;
	struct pollfd *pfd;
};

static void usage(FILE *f)
{
	fputs("usage: mcbench [options]   memcached GET/SET, one request in\n"
	      "                           flight on each of depth connections\n"
	      "options:\n"
	      "  -a, --addr HOST:PORT    memcached (default " DEFAULT_ADDR ")\n"
	      "  -s, --sizes LIST        value bytes (default 4K,64K,1M,4M)\n"
	      "  -d, --depths LIST       connections (default 1,4,16)\n"
	      "      --rw LIST           read (GET), write (SET) or both\n"
	      "  -T, --seconds S         measured seconds per point (2)\n"
	      "  -n, --ops N             measure N ops per point instead\n"
	      "  -w, --warmup S          unmeasured seconds first (0.2)\n"
	      "  -k, --keys N            keys a size cycles over (16)\n"
	      "      --verify-every N    compare the bytes of every Nth GET\n"
	      "                          (default 64; 0: lengths only)\n"
	      "      --no-preset         do not set the keys first (they\n"
	      "                          must hold values of the size)\n"
	      "      --server-pid PID    also report that process's CPU\n"
	      "                          time over each point\n"
	      "  -h, --help              this text\n"
	      "Sizes take K, M, G suffixes (binary). One line per point:\n"
	      "  memcached op=get size=4096 depth=16 threads=1 api=text\n"
	      "  ops=.. secs=.. ops_s=.. MBps=.. p50_us=.. p99_us=.. ...\n"
	      "See bench/README.md.\n",
	      f);
}

static int bad_arg(const char *opt, const char *val, const char *want)
{
	return bench_bad_arg("mcbench", opt, val, want);
}

/* Returns 0, or the exit status for a usage error (2) or help (-1). */
static int parse_args(int argc, char **argv, struct cfg *c)
{
	enum { OPT_VERIFY = 256, OPT_NO_PRESET, OPT_SERVER_PID };
	static const struct option longopts[] = {
		{ "addr", required_argument, NULL, 'a' },
		BENCH_POINTS_LONGOPTS,
		{ "keys", required_argument, NULL, 'k' },
		{ "verify-every", required_argument, NULL, OPT_VERIFY },
		{ "no-preset", no_argument, NULL, OPT_NO_PRESET },
		{ "server-pid", required_argument, NULL, OPT_SERVER_PID },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	unsigned one[1], n;
	int opt;

	memset(c, 0, sizeof(*c));
	bench_points_init(&c->pts);
	c->addr = DEFAULT_ADDR;
	c->nkeys = 16;
	c->verify_every = 64;
	c->preset = true;
	while ((opt = bench_points_getopt(&c->pts, argc, argv,
					  "a:k:h" BENCH_POINTS_SHORTOPTS,
					  longopts, "mcbench")) != -1) {
		switch (opt) {
		case 'a':
			if (!strrchr(optarg, ':'))
				return bad_arg("--addr", optarg,
					       "want HOST:PORT");
			c->addr = optarg;
			break;
		case 'k':
			if (bench_parse_count("mcbench", "--keys", optarg,
					      KEYS_MAX, &c->nkeys))
				return 2;
			break;
		case OPT_VERIFY:
			if (!strcmp(optarg, "0"))
				c->verify_every = 0;
			else if (bench_parse_uints(optarg, 1u << 30, one, 1,
						   &n))
				return bad_arg("--verify-every", optarg,
					       "want a count (0: none)");
			else
				c->verify_every = one[0];
			break;
		case OPT_NO_PRESET:
			c->preset = false;
			break;
		case OPT_SERVER_PID:
			if (bench_parse_server_pid(optarg, "mcbench",
						   &c->server_pid))
				return 2;
			break;
		default:
			return bench_opt_other(opt, usage, "mcbench");
		}
	}
	if (bench_args_left("mcbench", optind, argc, argv))
		return 2;
	/* memcached's item size limit is -I (at most 1 GiB) */
	for (unsigned i = 0; i < c->pts.nsizes; i++)
		if (c->pts.sizes[i] > (1u << 30)) {
			fprintf(stderr,
				"mcbench: size %" PRIu64 " is over "
				"memcached's largest item (1 GiB)\n",
				c->pts.sizes[i]);
			return 2;
		}
	return bench_points_check(&c->pts, "mcbench");
}

static int conn_open(const char *hostport, struct conn *k, size_t rcap)
{
	int r = bench_tcp_connect(hostport, &k->fd);

	if (r)
		return r;
	k->rcap = rcap;
	k->rb = malloc(rcap);
	return k->rb ? 0 : -ENOMEM;
}

static int key_name(char *out, size_t cap, size_t size, unsigned key)
{
	return snprintf(out, cap, "mcbench:%zu:%u", size, key);
}

/* Sends the request of k (key, size, write already set). */
static int conn_send(struct mc *m, struct conn *k)
{
	char h[HDR_MAX], key[64];
	struct iovec iov[3];
	int n;

	key_name(key, sizeof(key), k->size, k->key);
	if (k->write) {
		n = snprintf(h, sizeof(h), "set %s 0 0 %zu\r\n", key, k->size);
		iov[0] = (struct iovec){ h, (size_t)n };
		iov[1] = (struct iovec){ m->pattern + k->key, k->size };
		iov[2] = (struct iovec){ (void *)"\r\n", 2 };
	} else {
		n = snprintf(h, sizeof(h), "get %s\r\n", key);
		iov[0] = (struct iovec){ h, (size_t)n };
	}
	k->rlen = 0;
	k->busy = true;
	k->done = false;
	k->result = 0;
	return bench_writev_all(k->fd, iov, k->write ? 3 : 1);
}

static void fail(struct conn *k, const char *what, const char *line)
{
	char key[64];

	key_name(key, sizeof(key), k->size, k->key);
	fprintf(stderr, "mcbench: %s %s: %s%s%s\n", k->write ? "set" : "get",
		key, what, line ? ": " : "", line ? line : "");
	k->result = -EBADMSG;
	k->done = true;
}

/* The first reply line of rb, without CRLF, into line; its length with
 * the CRLF, or 0 while it is incomplete. */
static size_t first_line(const struct conn *k, char *line, size_t cap)
{
	const uint8_t *nl = memchr(k->rb, '\n', k->rlen);
	size_t n;

	if (!nl)
		return 0;
	n = (size_t)(nl - k->rb);
	if (n && k->rb[n - 1] == '\r')
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(line, k->rb, n);
	line[n] = '\0';
	return (size_t)(nl - k->rb) + 1;
}

/* Parses what k has read; sets done (and result) once the reply is whole. */
static void conn_parse(struct mc *m, struct conn *k)
{
	char line[HDR_MAX], key[64];
	size_t hl = first_line(k, line, sizeof(line));
	unsigned long long len;
	unsigned flags;
	char rkey[64];

	if (!hl) {
		if (k->rlen >= HDR_MAX)
			fail(k, "reply line too long", NULL);
		return;
	}
	if (k->write) {
		if (strcmp(line, "STORED"))
			fail(k, "not stored", line);
		else
			k->done = true;
		return;
	}
	if (!strcmp(line, "END")) {
		fail(k, "miss (was the key set? see --no-preset)", NULL);
		return;
	}
	if (sscanf(line, "VALUE %63s %u %llu", rkey, &flags, &len) != 3) {
		fail(k, "unexpected reply", line);
		return;
	}
	key_name(key, sizeof(key), k->size, k->key);
	if (strcmp(rkey, key)) {
		fail(k, "reply for another key", line);
		return;
	}
	if (len != k->size) {
		char msg[96];

		snprintf(msg, sizeof(msg), "value of %llu bytes, expected %zu",
			 len, k->size);
		fail(k, msg, NULL);
		return;
	}
	if (k->rlen < hl + len + 2 + 5)
		return;
	if (memcmp(k->rb + hl + len, "\r\nEND\r\n", 7)) {
		fail(k, "value not followed by END", NULL);
		return;
	}
	if (k->check) {
		m->verified++;
		if (memcmp(k->rb + hl, m->pattern + k->key, len)) {
			fail(k, "wrong bytes in the value", NULL);
			return;
		}
	}
	k->done = true;
}

/* Reads what every busy connection has, waiting for at least one. */
static int poll_once(struct mc *m)
{
	unsigned idx[BENCH_DEPTH_MAX], n = 0;
	int r;

	for (unsigned i = 0; i < m->nconns; i++) {
		if (!m->conns[i].busy || m->conns[i].done)
			continue;
		m->pfd[n] = (struct pollfd){ .fd = m->conns[i].fd,
					     .events = POLLIN };
		idx[n++] = i;
	}
	do
		r = poll(m->pfd, n, 30000);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (!r) {
		fprintf(stderr, "mcbench: no reply in 30 s\n");
		return -ETIMEDOUT;
	}
	for (unsigned j = 0; j < n; j++) {
		struct conn *k = &m->conns[idx[j]];
		ssize_t g;

		if (!m->pfd[j].revents)
			continue;
		g = recv(k->fd, k->rb + k->rlen, k->rcap - k->rlen,
			 MSG_DONTWAIT);
		if (g < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (g <= 0) {
			fprintf(stderr,
				"mcbench: memcached closed the connection\n");
			k->result = -ECONNRESET;
			k->done = true;
			continue;
		}
		k->rlen += (size_t)g;
		conn_parse(m, k);
		if (!k->done && k->rlen == k->rcap)
			fail(k, "reply longer than expected", NULL);
	}
	return 0;
}

static int mc_start(void *ctx, unsigned slot, uint64_t off, size_t len,
		    bool write)
{
	struct mc *m = ctx;
	struct conn *k = &m->conns[slot];

	k->key = (unsigned)((off / len) % m->c->nkeys);
	k->size = len;
	k->write = write;
	k->check = !write && m->c->verify_every &&
		   m->gets++ % m->c->verify_every == 0;
	return conn_send(m, k);
}

static int mc_finish(void *ctx, unsigned slot)
{
	struct mc *m = ctx;
	struct conn *k = &m->conns[slot];

	while (!k->done) {
		int r = poll_once(m);

		if (r)
			return r;
	}
	k->busy = false;
	return k->result;
}

/* Sets every key of the size on the first connection. */
static int mc_size_begin(void *arg, uint64_t size)
{
	struct mc *m = arg;
	struct conn *k = &m->conns[0];

	m->gets = 0;
	if (!m->c->preset)
		return 0;
	for (unsigned i = 0; i < m->c->nkeys; i++) {
		int r;

		k->key = i;
		k->size = (size_t)size;
		k->write = true;
		k->check = false;
		r = conn_send(m, k);
		while (!r && !k->done)
			r = poll_once(m);
		k->busy = false;
		if (!r)
			r = k->result;
		if (r) {
			fprintf(stderr,
				"mcbench: setting the keys of size "
				"%" PRIu64 " failed\n",
				size);
			return r;
		}
	}
	return 0;
}

static const char *mc_strerror(int err)
{
	if (err == -EBADMSG)
		return "bad reply (see above)";
	return strerror(-err);
}

int main(int argc, char **argv)
{
	struct cfg c;
	struct mc m = { .c = &c };
	struct bench_engine e = { mc_start, mc_finish, &m };
	struct bench_sweep sw = {
		.prog = "mcbench",
		.bench = "memcached",
		.api = "text",
		.threads = 1,
		.engine = &e,
		.size_begin = mc_size_begin,
		.strerror = mc_strerror,
		.arg = &m,
		.op_read = "get",
		.op_write = "set",
	};
	uint64_t maxsize;
	unsigned maxdepth;
	int r = parse_args(argc, argv, &c), ret = 1;

	if (r)
		return r < 0 ? 0 : r;
	sw.srv_pid = c.server_pid;
	bench_points_max(&c.pts, &maxsize, &maxdepth);
	m.nconns = maxdepth;
	m.conns = calloc(maxdepth, sizeof(*m.conns));
	m.pfd = calloc(maxdepth, sizeof(*m.pfd));
	m.pattern = bench_buf_alloc(maxsize + c.nkeys);
	if (!m.conns || !m.pfd || !m.pattern) {
		fprintf(stderr, "mcbench: out of memory\n");
		goto out;
	}
	{
		uint64_t x = 0x9e3779b97f4a7c15ull;

		for (uint64_t i = 0; i < maxsize + c.nkeys; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			m.pattern[i] = (uint8_t)x;
		}
	}
	for (unsigned i = 0; i < maxdepth; i++)
		m.conns[i].fd = -1;
	for (unsigned i = 0; i < maxdepth; i++) {
		r = conn_open(c.addr, &m.conns[i], maxsize + HDR_MAX + 16);
		if (r) {
			fprintf(stderr,
				"mcbench: cannot connect to memcached at %s: "
				"%s\n",
				c.addr, strerror(-r));
			goto out;
		}
	}
	printf("# mcbench memcached=%s keys=%u verify_every=%u preset=%d "
	       "seconds=%g warmup=%g\n",
	       c.addr, c.nkeys, c.verify_every, c.preset, c.pts.seconds,
	       c.pts.warmup);
	r = bench_sweep_run(&c.pts, &sw);
	if (!r)
		printf("# mcbench verified_values=%" PRIu64 "\n", m.verified);
	ret = r ? 1 : 0;
out:
	for (unsigned i = 0; m.conns && i < m.nconns; i++) {
		if (m.conns[i].fd >= 0)
			close(m.conns[i].fd);
		free(m.conns[i].rb);
	}
	free(m.conns);
	free(m.pfd);
	free(m.pattern);
	return ret;
}
