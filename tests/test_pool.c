// SPDX-License-Identifier: MIT
/*
 * tests/test_pool.c - libpool against real memd processes on loopback:
 * bytes written come back exactly, regions over several slabs, packing,
 * threads, async, bounds, exhaustion, killed clients and a killed memd,
 * a memd whose FI_OFI_RXM_BUFFER_SIZE differs (-EPROTO, not a
 * timeout), and one that answers FABRIC with ERROR (the session goes on
 * without the comparison).
 */
#include <check.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fab.h"
#include "fabric/hostport.h"
#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"

#define MiB (1024u * 1024u)
#define SLAB (16 * MiB) /* testutil's memd: 256M donated, 16M slabs */

static struct tu_memd md;

static void start_memd(const char *extra)
{
	tu_memd_start_ok(&md, extra);
}

static void stop_memd(void)
{
	tu_memd_stop_ok(&md);
}

static struct pool *connect_memd(void)
{
	return tu_pool_connect(&md);
}

/* Raw STATUS through the control protocol, as an operator tool would. */
static struct wire_status_ok memd_status(void)
{
	struct rpc *c;
	struct wire_msg req = { .type = WIRE_HELLO }, rep;
	int r;

	r = rpc_connect(md.addr, 5000, &c, NULL, 0);
	ck_assert_int_eq(r, 0);
	req.u.hello.proto_min = req.u.hello.proto_max = WIRE_PROTO_MAX;
	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_HELLO_OK, 5000, NULL, 0),
			 0);
	memset(&req, 0, sizeof(req));
	req.type = WIRE_STATUS;
	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_STATUS_OK, 5000, NULL, 0),
			 0);
	rpc_close(c);
	return rep.u.status_ok;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void write_read_check(struct pool *p, struct pool_region *r,
			     uint64_t off, size_t len, uint64_t seed)
{
	uint8_t *w = malloc(len), *b = malloc(len);
	ssize_t bad;
	int ret;

	ck_assert_ptr_nonnull(w);
	ck_assert_ptr_nonnull(b);
	tu_pattern_fill(w, len, seed, off);
	ret = pool_write(p, r, off, w, len);
	ck_assert_msg(ret == 0, "write off=%lu len=%zu: %s", (unsigned long)off,
		      len, pool_strerror(ret));
	memset(b, 0xee, len);
	ret = pool_read(p, r, off, b, len);
	ck_assert_msg(ret == 0, "read: %s", pool_strerror(ret));
	bad = tu_pattern_check(b, len, seed, off);
	ck_assert_msg(bad < 0, "wrong byte at %ld of off=%lu len=%zu",
		      (long)bad, (unsigned long)off, len);
	free(w);
	free(b);
}

START_TEST(roundtrip_sizes)
{
	static const size_t sizes[] = { 1, 7, 4096, 65536 + 3, MiB, 4 * MiB };
	struct pool *p;
	struct pool_region *r;

	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	ck_assert_uint_eq(pool_region_size(r), SLAB);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		write_read_check(p, r, 0, sizes[i], 11 + i);
		write_read_check(p, r, SLAB - sizes[i], sizes[i], 21 + i);
		write_read_check(p, r, (SLAB - sizes[i]) / 3, sizes[i], 31);
	}
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
	stop_memd();
}
END_TEST

START_TEST(region_spans_slabs)
{
	struct pool *p;
	struct pool_region *r, *r2;
	struct pool_stats st;
	size_t len = 2 * SLAB + SLAB / 2 + 12345; /* -> 3 whole slabs */
	uint8_t *w, *b;

	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, len, &r), 0);
	ck_assert_uint_eq(pool_region_nextents(r), 3);
	/* 1 slab + a small tail: the tail is packed. */
	ck_assert_int_eq(pool_alloc(p, SLAB + 5000, &r2), 0);
	ck_assert_uint_eq(pool_region_nextents(r2), 2);
	pool_get_stats(p, &st);
	ck_assert_uint_eq(st.slabs_held, 5);
	w = malloc(len);
	b = malloc(len);
	tu_pattern_fill(w, len, 99, 0);
	ck_assert_int_eq(pool_write(p, r, 0, w, len), 0);
	memset(b, 0, len);
	ck_assert_int_eq(pool_read(p, r, 0, b, len), 0);
	ck_assert_int_eq(tu_pattern_check(b, len, 99, 0), -1);
	/* Pieces that straddle slab boundaries. */
	ck_assert_int_eq(pool_read(p, r, SLAB - 100, b, 200), 0);
	ck_assert_int_eq(tu_pattern_check(b, 200, 99, SLAB - 100), -1);
	write_read_check(p, r2, SLAB - 10, 5010, 5);
	ck_assert_int_eq(pool_free(p, r), 0);
	ck_assert_int_eq(pool_free(p, r2), 0);
	pool_get_stats(p, &st);
	ck_assert_uint_eq(st.slabs_held, 0);
	free(w);
	free(b);
	pool_close(p);
	stop_memd();
}
END_TEST

START_TEST(status_is_the_memd_s_answer)
{
	struct pool_memd_status st[2];
	struct wire_status_ok raw;
	struct pool_region *r;
	struct pool *p;

	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, 3 * SLAB, &r), 0);
	memset(st, 0xa5, sizeof(st));
	ck_assert_int_eq(pool_get_status(p, st, 2), 1);
	raw = memd_status();
	ck_assert_int_eq(st[0].err, 0);
	ck_assert_str_eq(st[0].name, "");
	ck_assert_str_eq(st[0].addr, md.addr);
	ck_assert_uint_eq(st[0].epoch, raw.epoch);
	ck_assert_uint_eq(st[0].donated_bytes, raw.donated_bytes);
	ck_assert_uint_eq(st[0].slab_bytes, SLAB);
	ck_assert_uint_eq(st[0].slabs_total, raw.slabs_total);
	ck_assert_uint_eq(st[0].slabs_leased, 3);
	ck_assert_uint_eq(st[0].slabs_free + st[0].slabs_leased +
				  st[0].slabs_reclaiming,
			  st[0].slabs_total);
	ck_assert_uint_ge(st[0].sessions, 1);
	ck_assert_int_eq(st[0].draining, 0);
	ck_assert_int_eq(pool_get_status(p, NULL, 0), 1);
	ck_assert_int_eq(pool_get_status(NULL, st, 1), -EINVAL);
	ck_assert_int_eq(pool_get_status(p, NULL, 1), -EINVAL);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
	stop_memd();
}
END_TEST

START_TEST(small_regions_pack_without_overlap)
{
	enum { N = 200 };
	struct pool *p;
	struct pool_region *r[N];
	struct pool_stats st;
	uint8_t buf[20000];

	start_memd(NULL);
	p = connect_memd();
	for (int i = 0; i < N; i++) {
		size_t len = 1 + (size_t)i * 97 % 19999;

		ck_assert_int_eq(pool_alloc(p, len, &r[i]), 0);
		tu_pattern_fill(buf, len, 1000 + i, 0);
		ck_assert_int_eq(pool_write(p, r[i], 0, buf, len), 0);
	}
	pool_get_stats(p, &st);
	ck_assert_uint_eq(st.slabs_held, 1); /* ~2 MiB fit one slab */
	for (int i = 0; i < N; i += 2)
		ck_assert_int_eq(pool_free(p, r[i]), 0);
	for (int i = 1; i < N; i += 2) {
		size_t len = pool_region_size(r[i]);

		memset(buf, 0, sizeof(buf));
		ck_assert_int_eq(pool_read(p, r[i], 0, buf, len), 0);
		ck_assert_int_eq(tu_pattern_check(buf, len, 1000 + i, 0), -1);
		ck_assert_int_eq(pool_free(p, r[i]), 0);
	}
	pool_get_stats(p, &st);
	ck_assert_uint_eq(st.slabs_held, 0);
	ck_assert_uint_eq(st.regions, 0);
	pool_close(p);
	stop_memd();
}
END_TEST

START_TEST(bad_arguments)
{
	struct pool *p, *q = (void *)1;
	struct pool_region *r, *r2 = NULL;
	struct pool_opts bad = { .addr = "no-port-here" };
	struct pool_op *op = NULL;
	char b[16];

	ck_assert_int_eq(pool_connect(&bad, &q), -EINVAL);
	ck_assert_ptr_null(q);
	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, 0, &r), -EINVAL);
	ck_assert_int_eq(pool_alloc(p, 100, &r), 0);
	ck_assert_int_eq(pool_read(p, r, 90, b, 11), -ERANGE);
	ck_assert_int_eq(pool_write(p, r, 101, b, 0), -ERANGE);
	ck_assert_int_eq(pool_read(p, r, UINT64_MAX, b, 2), -ERANGE);
	ck_assert_int_eq(pool_read(p, r, 100, b, 0), 0);
	ck_assert_int_eq(pool_read(p, r, 0, NULL, 5), -EINVAL);
	ck_assert_int_eq(pool_read_async(p, r, 99, b, 2, &op), -ERANGE);
	ck_assert_ptr_null(op);
	/* The whole donation is 16 slabs. */
	ck_assert_int_eq(pool_alloc(p, 17 * (size_t)SLAB, &r2), -ENOSPC);
	ck_assert_ptr_null(r2);
	ck_assert_int_eq(pool_alloc(p, 15 * (size_t)SLAB, &r2), 0);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), -ENOSPC);
	ck_assert_int_eq(pool_free(p, r2), 0);
	ck_assert_int_eq(pool_free(p, NULL), 0);
	ck_assert_str_eq(pool_strerror(-ENOSPC), "no free memory in the pool");
	pool_close(p);
	stop_memd();
}
END_TEST

START_TEST(async_many_in_flight)
{
	enum { N = 300, LEN = 8192 };
	struct pool *p;
	struct pool_region *r;
	struct pool_op *op[N];
	static uint8_t bufs[N][LEN];

	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, (size_t)N * LEN, &r), 0);
	for (int i = 0; i < N; i++) {
		tu_pattern_fill(bufs[i], LEN, 7, (uint64_t)i * LEN);
		ck_assert_int_eq(pool_write_async(p, r, (uint64_t)i * LEN,
						  bufs[i], LEN, &op[i]),
				 0);
	}
	for (int i = N - 1; i >= 0; i--)
		ck_assert_int_eq(pool_wait(p, op[i], -1), 0);
	memset(bufs, 0, sizeof(bufs));
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(pool_read_async(p, r, (uint64_t)i * LEN,
						 bufs[i], LEN, &op[i]),
				 0);
	for (int i = 0; i < N; i++) {
		while (!pool_test(p, op[i]))
			;
		ck_assert_int_eq(pool_wait(p, op[i], 0), 0);
		ck_assert_int_eq(
			tu_pattern_check(bufs[i], LEN, 7, (uint64_t)i * LEN),
			-1);
	}
	pool_free(p, r);
	pool_close(p);
	stop_memd();
}
END_TEST

struct thr {
	struct pool *p;
	int id;
	int errors;
};

static void *thread_main(void *arg)
{
	struct thr *t = arg;
	struct pool_region *r;
	size_t len = MiB + (size_t)t->id * 4099;
	uint8_t *b = malloc(len);

	if (!b || pool_alloc(t->p, len, &r)) {
		t->errors++;
		free(b);
		return NULL;
	}
	for (int round = 0; round < 20; round++) {
		uint64_t seed = (uint64_t)t->id << 32 | (uint64_t)round;
		uint64_t off = (uint64_t)round * 4093 % (len / 2);
		size_t n = len - off;

		tu_pattern_fill(b, n, seed, off);
		if (pool_write(t->p, r, off, b, n))
			t->errors++;
		memset(b, 0, n);
		if (pool_read(t->p, r, off, b, n) ||
		    tu_pattern_check(b, n, seed, off) >= 0)
			t->errors++;
	}
	if (pool_free(t->p, r))
		t->errors++;
	free(b);
	return NULL;
}

START_TEST(eight_threads_one_session)
{
	pthread_t th[8];
	struct thr t[8];
	struct pool *p;

	start_memd(NULL);
	p = connect_memd();
	for (int i = 0; i < 8; i++) {
		t[i] = (struct thr){ .p = p, .id = i };
		ck_assert_int_eq(
			pthread_create(&th[i], NULL, thread_main, &t[i]), 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(t[i].errors == 0, "thread %d: %d errors", i,
			      t[i].errors);
	}
	pool_close(p);
	stop_memd();
}
END_TEST

/* A raw fabric endpoint of our own, to try keys libpool gave up. */
static int raw_read(const struct wire_lease *l, uint64_t off, void *buf,
		    size_t len, struct pool *p)
{
	const char *prov;
	const uint8_t *addr;
	uint16_t alen;
	struct fab_opts fo = { 0 };
	struct fab_domain *d;
	struct fab_ep *ep;
	struct fab_op op = { 0 };
	uint64_t peer;
	int r;

	pool_session_fabric(p, &prov, &addr, &alen);
	fo.provider = prov;
	fo.node = "127.0.0.1";
	ck_assert_int_eq(fab_domain_open(&fo, &d), 0);
	ck_assert_int_eq(fab_ep_open(d, 4, &ep), 0);
	ck_assert_int_eq(fab_ep_av_insert(ep, addr, alen, &peer), 0);
	r = fab_ep_read(ep, buf, len, NULL, peer, l->base + off, l->key, &op,
			5000);
	if (r == 0)
		r = fab_op_wait(ep, &op, 10000);
	fab_ep_close(ep);
	fab_domain_close(d);
	return r;
}

START_TEST(freed_lease_key_no_longer_reads)
{
	struct pool *p;
	struct pool_region *r;
	struct wire_lease l;
	uint64_t off, len;
	uint8_t b[4096];

	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pattern_fill(b, sizeof(b), 3, 0);
	ck_assert_int_eq(pool_write(p, r, 0, b, sizeof(b)), 0);
	ck_assert_int_eq(pool_region_extent(r, 0, &l, &off, &len), 0);
	/* While leased, the key reads (proves the raw path works)... */
	memset(b, 0, sizeof(b));
	ck_assert_int_eq(raw_read(&l, 0, b, sizeof(b), p), 0);
	ck_assert_int_eq(tu_pattern_check(b, sizeof(b), 3, 0), -1);
	ck_assert_int_eq(pool_free(p, r), 0);
	/* ...and once freed it no longer does. */
	memset(b, 0, sizeof(b));
	ck_assert_int_lt(raw_read(&l, 0, b, sizeof(b), p), 0);
	ck_assert_int_ge(tu_pattern_check(b, sizeof(b), 3, 0), 0);
	pool_close(p);
	stop_memd();
}
END_TEST

START_TEST(killed_client_slabs_reclaimed_and_zeroed)
{
	struct wire_status_ok st;
	struct pool *p;
	struct pool_region *r;
	int pipefd[2], status;
	pid_t child;
	uint8_t *b, *z;
	char c;

	start_memd("lease_ttl = 2s\nlease_grace = 200ms\nquiesce = 50ms");
	ck_assert_int_eq(pipe(pipefd), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* The whole donation, a pattern in every slab, then wait to
		 * be killed. */
		struct pool *cp = NULL;
		struct pool_region *cr;
		uint8_t *w = malloc(MiB);
		struct pool_opts o = { .addr = md.addr };

		if (pool_connect(&o, &cp) ||
		    pool_alloc(cp, 16 * (size_t)SLAB, &cr))
			_exit(1);
		for (int i = 0; i < 16; i++) {
			uint64_t off = (uint64_t)i * SLAB + (uint64_t)i * MiB;

			tu_pattern_fill(w, MiB, 77, off);
			if (pool_write(cp, cr, off, w, MiB))
				_exit(2);
		}
		if (write(pipefd[1], "k", 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	close(pipefd[1]);
	ck_assert_int_eq(read(pipefd[0], &c, 1), 1);
	close(pipefd[0]);
	st = memd_status();
	ck_assert_uint_eq(st.slabs_leased, 16);
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	/* Reclaimed after the TTL: poll, with a generous hang guard. */
	for (int i = 0; i < 3000; i++) {
		st = memd_status();
		if (st.slabs_free == st.slabs_total)
			break;
		sleep_ms(10);
	}
	ck_assert_uint_eq(st.slabs_free, st.slabs_total);
	ck_assert_uint_eq(st.leases_expired, 16);
	/* Every byte the killed client wrote is zero for the next one. */
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, 16 * (size_t)SLAB, &r), 0);
	b = malloc(SLAB);
	z = calloc(1, SLAB);
	for (int i = 0; i < 16; i++) {
		memset(b, 0xab, SLAB);
		ck_assert_int_eq(pool_read(p, r, (uint64_t)i * SLAB, b, SLAB),
				 0);
		ck_assert_msg(memcmp(b, z, SLAB) == 0, "slab %d not zeroed", i);
	}
	free(z);
	free(b);
	pool_close(p);
	stop_memd();
}
END_TEST

/*
 * Fabric on demand (pool_set_fabric_background, the preload shim's
 * mode): leases work with no fabric; the first transfer sets it up and
 * moves the right bytes; so does pool_fabric_prepare, from another
 * thread than the one that waits; a memd killed before any transfer
 * fails the first one with an error, never a hang.
 */
START_TEST(fabric_on_demand)
{
	struct pool *p, *p2;
	struct pool_region *r, *r2;
	uint8_t b[4096];
	int ret;

	start_memd(NULL);
	/* the fabric's set-up: off the same-host path, which needs none */
	setenv("LIBPOOL_SHM", "off", 1);
	pool_set_fabric_background(true);
	p = connect_memd();
	p2 = connect_memd();
	pool_set_fabric_background(false);
	ck_assert(pool_fabric_is_pending(p));
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	ck_assert(pool_fabric_is_pending(p)); /* a lease needs no fabric */
	write_read_check(p, r, 100, 3 * 4096 + 5, 41);
	ck_assert(!pool_fabric_is_pending(p));
	/* prepare, then settle: up without a transfer */
	ck_assert(pool_fabric_is_pending(p2));
	ck_assert(pool_fabric_prepare(p2));
	pool_fabric_settle(p2);
	ck_assert(!pool_fabric_is_pending(p2));
	ck_assert_int_eq(pool_alloc(p2, SLAB, &r2), 0);
	write_read_check(p2, r2, 0, MiB, 42);
	ck_assert_int_eq(pool_free(p2, r2), 0);
	pool_close(p2);
	/* prepare, then exit's cancel: a transfer after it still sets the
	 * fabric up and moves the right bytes */
	pool_set_fabric_background(true);
	p2 = connect_memd();
	pool_set_fabric_background(false);
	ck_assert(pool_fabric_prepare(p2));
	pool_fabric_exit(p2);
	ck_assert_int_eq(pool_alloc(p2, SLAB, &r2), 0);
	write_read_check(p2, r2, 0, MiB, 43);
	ck_assert(!pool_fabric_is_pending(p2));
	ck_assert_int_eq(pool_free(p2, r2), 0);
	pool_close(p2);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
	/* memd gone before the fabric was ever set up */
	pool_set_fabric_background(true);
	p = connect_memd();
	pool_set_fabric_background(false);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	kill(md.pid, SIGKILL);
	waitpid(md.pid, NULL, 0);
	md.pid = 0;
	ret = pool_read(p, r, 0, b, sizeof(b));
	ck_assert_msg(ret == -ENOTCONN || ret == -EIO || ret == -ECONNRESET ||
			      ret == -ETIMEDOUT || ret == -ECONNREFUSED,
		      "read after memd death: %d %s", ret, pool_strerror(ret));
	pool_close(p);
	tu_memd_stop(&md, SIGKILL);
	unsetenv("LIBPOOL_SHM");
}
END_TEST

START_TEST(memd_killed_gives_errors_not_hangs)
{
	struct pool *p;
	struct pool_region *r;
	struct pool_op *op;
	uint8_t b[65536];
	int ret = 0, i;

	start_memd("lease_ttl = 2s\nlease_grace = 200ms");
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	write_read_check(p, r, 0, sizeof(b), 1);
	kill(md.pid, SIGKILL);
	waitpid(md.pid, NULL, 0);
	md.pid = 0;
	/* Every call returns (no hang), and errors arrive: within about
	 * one TTL at the latest; 30 s is a hang guard, not a timing goal. */
	for (i = 0; i < 3000; i++) {
		ret = pool_read(p, r, 0, b, sizeof(b));
		if (ret)
			break;
		sleep_ms(10);
	}
	ck_assert_msg(ret == -ENOTCONN || ret == -EIO || ret == -ECONNRESET ||
			      ret == -ETIMEDOUT || ret == -ECONNREFUSED,
		      "read after memd death: %d %s", ret, pool_strerror(ret));
	/* Once lost, always lost, and fast. */
	ck_assert_int_eq(pool_write(p, r, 0, b, 10), -ENOTCONN);
	ck_assert_int_eq(pool_read_async(p, r, 0, b, 10, &op), -ENOTCONN);
	ck_assert_int_eq(pool_alloc(p, 10, &r), -ENOTCONN);
	pool_close(p);
	tu_memd_stop(&md, SIGKILL);
}
END_TEST

START_TEST(sigterm_exits_cleanly_with_clients)
{
	struct pool *p;
	struct pool_region *r;
	int st;

	start_memd(NULL);
	p = connect_memd();
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	st = tu_memd_stop(&md, SIGTERM);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 0);
	pool_close(p); /* its memd is gone: still returns */
}
END_TEST

/* A secret file in dir with mode; returns its path (static buffer). */
static const char *secret_file(const char *dir, const char *name, int mode)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("a tenant secret of enough bytes\n", f);
	fclose(f);
	ck_assert_int_eq(chmod(path, (mode_t)mode), 0);
	return path;
}

START_TEST(standalone_alloc_ex_and_tenant_errors)
{
	struct pool_opts o = { 0 };
	struct pool_region *r = NULL;
	struct wire_lease l;
	uint64_t off, len;
	struct pool *p, *q;
	uint32_t donor;
	const char *addr;
	char b[64], c[64], none[256];

	start_memd(NULL);
	p = connect_memd();
	ck_assert(!pool_session_is_cluster(p));
	ck_assert_int_eq(pool_alloc_ex(p, 4096, -1, POOL_ALLOC_REPLICA, &r),
			 -EOPNOTSUPP);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(pool_alloc_ex(p, 4096, -1, 0x2, &r), -EINVAL);
	ck_assert_int_eq(pool_alloc_ex(p, 2 * (size_t)SLAB + 100, -1, 0, &r),
			 0);
	for (unsigned i = 0; i < sizeof(b); i++)
		b[i] = (char)(i * 13 + 1);
	ck_assert_int_eq(pool_write(p, r, 2 * (uint64_t)SLAB, b, sizeof(b)), 0);
	ck_assert_int_eq(pool_read(p, r, 2 * (uint64_t)SLAB, c, sizeof(c)), 0);
	ck_assert_mem_eq(b, c, sizeof(b));
	/* Every piece is on the one memd, with no second copy. */
	for (uint32_t i = 0; i < pool_region_nextents(r); i++) {
		ck_assert_int_eq(pool_region_extent(r, i, &l, &off, &len), 0);
		ck_assert_int_eq(pool_region_copy(r, i, 0, &donor, &addr), 0);
		ck_assert_uint_eq(donor, 0);
		ck_assert_str_eq(addr, md.addr);
		ck_assert_int_eq(pool_region_copy(r, i, 1, &donor, &addr),
				 -ENOENT);
	}
	ck_assert_uint_eq(pool_session_nlinks(p), 1);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);

	/* A tenant is checked before anything goes on the wire. */
	o.addr = md.addr;
	o.tenant = "bad name";
	o.secret_file = secret_file(md.dir, "ok.secret", 0600);
	ck_assert_int_eq(pool_connect(&o, &q), -EINVAL);
	o.tenant = "acme";
	o.secret_file = "";
	unsetenv("LIBPOOL_SECRET_FILE");
	ck_assert_int_eq(pool_connect(&o, &q), -EINVAL);
	snprintf(none, sizeof(none), "%s/none.secret", md.dir);
	o.secret_file = none;
	ck_assert_int_eq(pool_connect(&o, &q), -ENOENT);
	o.secret_file = secret_file(md.dir, "open.secret", 0644);
	ck_assert_int_eq(pool_connect(&o, &q), -EPERM);
	ck_assert_ptr_null(q);
	/* The environment names the tenant when opts do not. */
	setenv("LIBPOOL_TENANT", "bad/name", 1);
	o.tenant = NULL;
	ck_assert_int_eq(pool_connect(&o, &q), -EINVAL);
	unsetenv("LIBPOOL_TENANT");
	ck_assert_str_eq(pool_strerror(-EDQUOT),
			 "the tenant's quota does not allow this allocation");
	stop_memd();
}
END_TEST

/*
 * FI_OFI_RXM_BUFFER_SIZE against memd's (docs/protocol.md, FABRIC).
 * libfabric reads the variable once per process, so each client runs in
 * a process of its own: this executable again (/proc/self/exe
 * --rxm-client), with the environment the case gives it, whatever
 * Check's fork mode. The client connects, allocates one slab, writes a
 * pattern and reads it back, and prints what each step returned.
 */
struct rxm_result {
	int connect, alloc, write, read, match;
};

static int rxm_client(const char *addr)
{
	struct pool_opts o = { .addr = addr, .timeout_ms = 5000 };
	struct rxm_result res = { 0 };
	struct pool_region *r = NULL;
	struct pool *p = NULL;
	static uint8_t w[65536], b[65536];

	tu_pattern_fill(w, sizeof(w), 77, 0);
	res.connect = pool_connect(&o, &p);
	if (!res.connect)
		res.alloc = pool_alloc(p, SLAB, &r);
	if (!res.connect && !res.alloc) {
		res.write = pool_write(p, r, 0, w, sizeof(w));
		res.read = pool_read(p, r, 0, b, sizeof(b));
		res.match = !memcmp(w, b, sizeof(w));
		pool_free(p, r);
	}
	pool_close(p);
	printf("connect=%d alloc=%d write=%d read=%d match=%d\n", res.connect,
	       res.alloc, res.write, res.read, res.match);
	return 0;
}

/* Runs rxm_client against md with FI_OFI_RXM_BUFFER_SIZE=rxm (NULL:
 * unset) and LIBPOOL_SHM=shm. */
static struct rxm_result rxm_run(const char *rxm, const char *shm)
{
	struct rxm_result res = { -1, -1, -1, -1, -1 };
	char line[256] = "";
	int fds[2], st;
	ssize_t n;
	pid_t pid;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char *argv[] = { "test_pool", "--rxm-client", md.addr, NULL };

		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		if (rxm)
			setenv("FI_OFI_RXM_BUFFER_SIZE", rxm, 1);
		else
			unsetenv("FI_OFI_RXM_BUFFER_SIZE");
		setenv("LIBPOOL_SHM", shm, 1);
		setenv("LIBPOOL_LOG", "err", 1);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	close(fds[1]);
	n = read(fds[0], line, sizeof(line) - 1);
	close(fds[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "rxm client: status %d", st);
	ck_assert_msg(n > 0 && sscanf(line,
				      "connect=%d alloc=%d write=%d read=%d "
				      "match=%d",
				      &res.connect, &res.alloc, &res.write,
				      &res.read, &res.match) == 5,
		      "rxm client said '%s'", line);
	return res;
}

/* rxm_run(): every step worked and the bytes came back. */
static void rxm_run_works(const char *rxm, const char *shm)
{
	struct rxm_result res = rxm_run(rxm, shm);

	ck_assert_int_eq(res.connect, 0);
	ck_assert_int_eq(res.alloc, 0);
	ck_assert_int_eq(res.write, 0);
	ck_assert_int_eq(res.read, 0);
	ck_assert_int_eq(res.match, 1);
}

/* md with FI_OFI_RXM_BUFFER_SIZE=16384 (an older memd's, libfabric's
 * default) in its environment. */
static void start_memd_rxm16k(const char *extra)
{
	const char *had = getenv("FI_OFI_RXM_BUFFER_SIZE");
	char *keep = had ? strdup(had) : NULL;

	setenv("FI_OFI_RXM_BUFFER_SIZE", "16384", 1);
	start_memd(extra);
	if (keep)
		setenv("FI_OFI_RXM_BUFFER_SIZE", keep, 1);
	else
		unsetenv("FI_OFI_RXM_BUFFER_SIZE");
	free(keep);
}

/* A client with the default (1024) beside it: over the fabric, every
 * transfer fails at once with -EPROTO (not a timeout), memd logs the
 * mismatch; the same client with 16384 works. */
START_TEST(rxm_mismatch_is_eproto)
{
	struct rxm_result res;
	char log[256];

	start_memd_rxm16k(NULL);
	res = rxm_run(NULL, "off");
	ck_assert_int_eq(res.connect, 0);
	ck_assert_int_eq(res.alloc, 0);
	ck_assert_int_eq(res.write, -EPROTO);
	ck_assert_int_eq(res.read, -EPROTO);
	/* a value of the user's that differs, said the same way */
	res = rxm_run("4096", "off");
	ck_assert_int_eq(res.write, -EPROTO);
	ck_assert_int_eq(res.read, -EPROTO);
	snprintf(log, sizeof(log), "%s/memd.log", md.dir);
	ck_assert_msg(tu_file_has(log, "fabric mismatch"),
		      "memd logged no mismatch (%s)", log);
	ck_assert_msg(tu_file_has(log, "client_rxm_buffer_size=1024 "
				       "rxm_buffer_size=16384"),
		      "memd's mismatch line names no values (%s)", log);
	rxm_run_works("16384", "off");
	tu_memd_stop_ok(&md);
}
END_TEST

/* The same mismatch with the fabric set up on demand (the preload
 * shim's way, pool_set_fabric_background): the first transfer gets
 * -EPROTO, so do the asynchronous and KV paths, and the session stays
 * for what needs no fabric. */
/*
 * A control-connection proxy to md that answers FABRIC itself with
 * ERROR (EOPNOTSUPP), as a memd that does not know the request would
 * (unless pass_fabric), and forwards every other frame both ways, whole.
 * While shed is above 0 it closes a client's connection at its HELLO
 * instead, as a memd shedding connections in their handshake does. RMA
 * goes to md directly (HELLO_OK carries md's fabric address).
 */
struct fproxy {
	int lfd, port;
	int stop;	  /* atomic */
	int refused;	  /* atomic: FABRIC requests answered with ERROR */
	int shed;	  /* atomic: HELLOs still to answer with a close */
	bool pass_fabric; /* forward FABRIC too; set before clients come */
	pthread_t th;
};

/* Writes all of buf to fd; 0 or -1. */
static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len) {
		ssize_t n = write(fd, b, len);

		if (n <= 0)
			return -1;
		b += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Moves the whole frames at the head of in (*have bytes) from one side
 * to the other; a FABRIC from the client is answered to it instead. */
static int fproxy_frames(struct fproxy *px, uint8_t *in, size_t *have, int to,
			 int back, bool from_client, struct wire_msg *m)
{
	for (;;) {
		ssize_t k = wire_decode(in, *have, m);

		if (k == -EAGAIN)
			return 0;
		if (k <= 0)
			return -1;
		if (from_client && m->type == WIRE_HELLO &&
		    __atomic_load_n(&px->shed, __ATOMIC_RELAXED) > 0) {
			__atomic_sub_fetch(&px->shed, 1, __ATOMIC_RELAXED);
			return -1; /* closes both sides */
		}
		if (from_client && m->type == WIRE_FABRIC && !px->pass_fabric) {
			uint8_t out[WIRE_MAX_FRAME];
			uint64_t seq = m->seq;
			ssize_t n;

			memset(m, 0, sizeof(*m));
			m->type = WIRE_ERROR;
			m->seq = seq;
			m->u.error.err = EOPNOTSUPP;
			snprintf(m->u.error.msg, sizeof(m->u.error.msg),
				 "FABRIC: unknown request");
			n = wire_encode(m, out, sizeof(out));
			if (n <= 0 || write_all(back, out, (size_t)n))
				return -1;
			__atomic_add_fetch(&px->refused, 1, __ATOMIC_RELAXED);
		} else if (write_all(to, in, (size_t)k)) {
			return -1;
		}
		memmove(in, in + k, *have - (size_t)k);
		*have -= (size_t)k;
	}
}

/* Reads what side from has into in (*have of cap bytes) and moves its
 * whole frames on to side to. 0, or -1 when from closed or failed. */
static int fproxy_read(struct fproxy *px, int from, int to, uint8_t *in,
		       size_t *have, size_t cap, bool from_client,
		       struct wire_msg *m)
{
	ssize_t n = read(from, in + *have, cap - *have);

	if (n <= 0)
		return -1;
	*have += (size_t)n;
	return fproxy_frames(px, in, have, to, from, from_client, m);
}

struct fproxy_conn {
	struct fproxy *px;
	int c;
};

static void *fproxy_conn_main(void *arg)
{
	struct fproxy_conn *pc = arg;
	struct fproxy *px = pc->px;
	struct sockaddr_in a = { .sin_family = AF_INET };
	const size_t cap = WIRE_MAX_FRAME * 2;
	uint8_t *bc = malloc(cap), *bm = malloc(cap);
	struct wire_msg *m = malloc(sizeof(*m));
	size_t hc = 0, hm = 0;
	char host[64];
	uint16_t port;
	int c = pc->c, s = socket(AF_INET, SOCK_STREAM, 0);

	free(pc);
	if (!m || !bc || !bm || s < 0 ||
	    wire_split_hostport(md.addr, host, sizeof(host), &port))
		goto out;
	a.sin_port = htons(port);
	inet_pton(AF_INET, host, &a.sin_addr);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)))
		goto out;
	while (!__atomic_load_n(&px->stop, __ATOMIC_RELAXED)) {
		struct pollfd pf[2] = { { .fd = c, .events = POLLIN },
					{ .fd = s, .events = POLLIN } };

		if (poll(pf, 2, 100) <= 0)
			continue;
		if ((pf[0].revents &&
		     fproxy_read(px, c, s, bc, &hc, cap, true, m)) ||
		    (pf[1].revents &&
		     fproxy_read(px, s, c, bm, &hm, cap, false, m)))
			break;
	}
out:
	free(m);
	free(bc);
	free(bm);
	if (s >= 0)
		close(s);
	close(c);
	return NULL;
}

static void *fproxy_main(void *arg)
{
	struct fproxy *px = arg;

	while (!__atomic_load_n(&px->stop, __ATOMIC_RELAXED)) {
		struct pollfd pf = { .fd = px->lfd, .events = POLLIN };
		struct fproxy_conn *pc;
		pthread_t th;
		int c;

		if (poll(&pf, 1, 100) <= 0)
			continue;
		c = accept(px->lfd, NULL, NULL);
		if (c < 0)
			continue;
		pc = malloc(sizeof(*pc));
		if (!pc) {
			close(c);
			continue;
		}
		pc->px = px;
		pc->c = c;
		if (pthread_create(&th, NULL, fproxy_conn_main, pc)) {
			free(pc);
			close(c);
			continue;
		}
		pthread_detach(th);
	}
	return NULL;
}

/* Starts px in front of md: pass_fabric and shed as in struct fproxy. */
static void fproxy_start(struct fproxy *px, bool pass_fabric, int shed)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);

	memset(px, 0, sizeof(*px));
	px->pass_fabric = pass_fabric;
	px->shed = shed;
	px->lfd = socket(AF_INET, SOCK_STREAM, 0);
	ck_assert_int_ge(px->lfd, 0);
	ck_assert_int_eq(bind(px->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(px->lfd, 8), 0);
	ck_assert_int_eq(getsockname(px->lfd, (struct sockaddr *)&a, &al), 0);
	px->port = ntohs(a.sin_port);
	ck_assert_int_eq(pthread_create(&px->th, NULL, fproxy_main, px), 0);
}

static void fproxy_stop(struct fproxy *px)
{
	__atomic_store_n(&px->stop, 1, __ATOMIC_RELAXED);
	pthread_join(px->th, NULL);
	close(px->lfd);
}

/* Starts md and px in front of it (fproxy_start()): a session through px
 * (LIBPOOL_SHM=off: the proxy sees every request). */
static struct pool *proxied_connect(struct fproxy *px, bool pass_fabric,
				    int shed, int timeout_ms)
{
	char addr[64];
	struct pool_opts o = { .addr = addr, .timeout_ms = timeout_ms };
	struct pool *p;

	start_memd(NULL);
	fproxy_start(px, pass_fabric, shed);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", px->port);
	setenv("LIBPOOL_SHM", "off", 1);
	ck_assert_int_eq(pool_connect(&o, &p), 0);
	return p;
}

/* 64 KiB of seed's pattern through p's fabric, read back; then the
 * session, the proxy and memd stopped. */
static void proxied_round_trip_and_stop(struct pool *p, struct fproxy *px,
					uint64_t seed)
{
	struct pool_region *r;

	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	tu_pool_write_read_check(p, r, 4096, 65536, seed);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
	unsetenv("LIBPOOL_SHM");
	fproxy_stop(px);
	tu_memd_stop_ok(&md);
}

/* A memd that answers FABRIC with ERROR (one that does not know the
 * request): the session goes on without the comparison (a notice in
 * the log), and its transfers over the fabric work. */
START_TEST(fabric_refused_leaves_check_off)
{
	/* static: the proxy's threads outlive no frame of ours */
	static struct fproxy px;
	struct pool *p;

	p = proxied_connect(&px, false, 0, 5000);
	ck_assert_int_ge(__atomic_load_n(&px.refused, __ATOMIC_RELAXED), 1);
	proxied_round_trip_and_stop(p, &px, 79);
}
END_TEST

/*
 * A memd (here the proxy in front of it) that closes the connection at
 * HELLO, twice, as one shedding connections in their handshake under a
 * churn does: pool_connect retries on fresh connections within its
 * timeout, and the session works.
 */
START_TEST(handshake_lost_is_retried)
{
	/* static: the proxy's threads outlive no frame of ours */
	static struct fproxy px;
	struct pool *p;

	p = proxied_connect(&px, true, 2, 10000);
	ck_assert_int_eq(__atomic_load_n(&px.shed, __ATOMIC_RELAXED), 0);
	ck_assert_int_eq(__atomic_load_n(&px.refused, __ATOMIC_RELAXED), 0);
	proxied_round_trip_and_stop(p, &px, 83);
}
END_TEST

START_TEST(rxm_mismatch_on_demand)
{
	struct pool_region *r;
	struct pool_stats st;
	struct pool_kv_key key;
	struct pool_kv *kv;
	struct pool_op *op;
	struct pool *p;
	uint8_t b[4096];
	const void *val;
	void *buf = b;
	size_t len = sizeof(b), got = 0;
	int rc, st_kv = 0;

	start_memd_rxm16k(NULL);
	/* tidepool's default, whatever the runner's environment says (Check
	 * runs each test in a process of its own, before its fabric) */
	setenv("FI_OFI_RXM_BUFFER_SIZE", FAB_RXM_BUFFER_SIZE, 1);
	ck_assert_uint_eq(fab_rxm_buffer_size(), 1024);
	setenv("LIBPOOL_SHM", "off", 1);
	pool_set_fabric_background(true);
	p = connect_memd();
	pool_set_fabric_background(false);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	ck_assert_int_eq(pool_read(p, r, 0, b, sizeof(b)), -EPROTO);
	ck_assert(!pool_fabric_is_pending(p));
	ck_assert_int_eq(pool_write(p, r, 0, b, sizeof(b)), -EPROTO);
	/* the asynchronous path says the same, at start or at the wait */
	rc = pool_read_async(p, r, 0, b, sizeof(b), &op);
	if (rc == 0)
		rc = pool_wait(p, op, -1);
	ck_assert_int_eq(rc, -EPROTO);
	rc = pool_write_async(p, r, 0, b, sizeof(b), &op);
	if (rc == 0)
		rc = pool_wait(p, op, -1);
	ck_assert_int_eq(rc, -EPROTO);
	/* and the KV tier: a put fails with -EPROTO (not stored, not a
	 * timeout), a get of it misses, the handle stays usable */
	ck_assert_int_eq(pool_kv_open(p, NULL, &kv), 0);
	memset(&key, 0, sizeof(key));
	key.b[0] = 7;
	val = b;
	ck_assert_int_eq(pool_kv_put(kv, 1, &key, &val, &len, &st_kv), 0);
	ck_assert_int_eq(st_kv, -EPROTO);
	ck_assert_int_eq(pool_kv_get(kv, 1, &key, &buf, &len, &got, &st_kv), 0);
	ck_assert_int_eq(st_kv, -ENOENT);
	pool_kv_close(kv);
	/* leases and heartbeats go on: the session is not lost */
	sleep_ms(100);
	ck_assert_int_eq(pool_get_stats(p, &st), 0);
	ck_assert_uint_eq(st.slabs_held, 1);
	ck_assert_int_eq(pool_free(p, r), 0);
	ck_assert_int_eq(pool_alloc(p, SLAB, &r), 0);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
	unsetenv("LIBPOOL_SHM");
	unsetenv("FI_OFI_RXM_BUFFER_SIZE");
	tu_memd_stop_ok(&md);
}
END_TEST

/* A same-host session needs no fabric: it reads and writes through the
 * slab's memfd whatever the two values are. */
START_TEST(rxm_mismatch_same_host_works)
{
	start_memd_rxm16k("metrics_listen = 127.0.0.1:0");
	ck_assert_int_eq(tu_metric(&md, "tidepool_memd_shm_enabled"), 1);
	rxm_run_works(NULL, "auto");
	ck_assert_int_ge(tu_metric(&md, "tidepool_memd_shm_fds_passed_total"),
			 1);
	tu_memd_stop_ok(&md);
}
END_TEST

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc;

	if (argc == 3 && !strcmp(argv[1], "--rxm-client"))
		return rxm_client(argv[2]);
	s = suite_create("pool");
	tc = tcase_create("memd");
	tu_need_memd();
	tcase_set_timeout(tc, 120);
	TU_ADD_TESTS(tc, roundtrip_sizes, region_spans_slabs,
		     status_is_the_memd_s_answer,
		     small_regions_pack_without_overlap, bad_arguments,
		     async_many_in_flight, eight_threads_one_session,
		     freed_lease_key_no_longer_reads, fabric_on_demand,
		     rxm_mismatch_is_eproto, rxm_mismatch_on_demand,
		     fabric_refused_leaves_check_off, handshake_lost_is_retried,
		     rxm_mismatch_same_host_works,
		     killed_client_slabs_reclaimed_and_zeroed,
		     memd_killed_gives_errors_not_hangs,
		     sigterm_exits_cleanly_with_clients,
		     standalone_alloc_ex_and_tenant_errors);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
