// SPDX-License-Identifier: MIT
/*
 * tests/test_kv.c - the KV tier's client (tidepool/kv.h) against real
 * memd processes: prefix keys, round trips of 1 B .. 64 MiB, exists,
 * delete, pin, async ops and the eventfd, bad arguments and a closed
 * handle, a stress run of several processes and threads over a store
 * small enough to evict all the time (zero wrong bytes over more than
 * 100,000 key operations), a warm restart from the spill directory, and
 * in a registry pool of three donors: two tenants that never share keys,
 * eviction that stays within the tenant, a tenant whose KV memory stays
 * within its registry quota (puts evict its own blocks, a lowered quota
 * trims it, other tenants unaffected), a donor SIGKILLed while puts
 * and gets run (misses and errors, never wrong bytes), and two
 * replicas: a killed home's keys read exactly from their replicas (one
 * copy: misses), deletes remove both copies, and a replica never serves
 * a value older than the home's; and the capacity report of a tenant
 * whose keys are on three donors, merged by poolctl against the registry
 * (counters summed, curves merged, quota suggest, the tenant's own cost
 * model).
 *
 * Values derive from their keys (length and bytes), so a wrong, stale,
 * torn or foreign value fails the test.
 */
#include <check.h>
#include <dlfcn.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <limits.h>

#include <jansson.h>
#include <sodium.h>

#include "fabric/auth.h"
#include "fabric/rpc.h"
#include "fabric/rendezvous.h"
#include "fabric/wire.h"
#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/kv.h"
#include "tidepool/pool.h"

#define MIB (1ull << 20)

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void make_key(struct pool_kv_key *k, uint64_t set, uint64_t i)
{
	tu_pattern_fill(k->b, sizeof(k->b), set * 1000003 + i, 0);
}

static uint64_t key_seed(const struct pool_kv_key *k)
{
	uint64_t v;

	memcpy(&v, k->b, sizeof(v));
	return v ^ 0x5eedull;
}

/* A value of len bytes derived from key k. */
static uint8_t *make_value(const struct pool_kv_key *k, size_t len)
{
	uint8_t *v = malloc(len);

	ck_assert_ptr_nonnull(v);
	tu_pattern_fill(v, len, key_seed(k), 0);
	return v;
}

static struct tu_memd md;

/* A standalone memd with 2 MiB slabs; lease: its kv_read_lease. */
static void start_standalone_lease(const char *conf, const char *donate,
				   const char *lease)
{
	char set_lease[64];
	const char *args[] = { "--set", "slab_size=2M", "--donate", donate,
			       "--set", set_lease,	NULL };
	int r;

	snprintf(set_lease, sizeof(set_lease), "kv_read_lease=%s", lease);
	r = tu_memd_start_args(&md, conf, args);

	if (r == -ENOENT)
		tu_skip("no memd binary (TP_MEMD)");
	ck_assert_msg(r == 0, "memd: %s (log in %s)", strerror(-r), md.dir);
}

static void start_standalone(const char *conf, const char *donate)
{
	start_standalone_lease(conf, donate, "2s");
}

/* A handle whose read leases last lease_ms (memd's kv_read_lease). */
static struct pool_kv *kv_open_lease(struct pool *p, unsigned lease_ms)
{
	struct pool_kv_opts o = { .lease_ms = lease_ms };
	struct pool_kv *kv = NULL;
	int r = pool_kv_open(p, &o, &kv);

	ck_assert_msg(r == 0, "pool_kv_open: %s", pool_strerror(r));
	return kv;
}

static struct pool_kv *kv_open(struct pool *p)
{
	struct pool_kv *kv = NULL;
	int r = pool_kv_open(p, NULL, &kv);

	ck_assert_msg(r == 0, "pool_kv_open: %s", pool_strerror(r));
	return kv;
}

/* Puts one key's derived value of len bytes; returns its status. */
static int put1(struct pool_kv *kv, const struct pool_kv_key *k, size_t len)
{
	uint8_t *v = make_value(k, len);
	const void *vals[1] = { v };
	int st = 1;
	ssize_t n = pool_kv_put(kv, 1, k, vals, &len, &st);

	free(v);
	ck_assert_int_eq(n, st == 0 || st == -EEXIST ? 1 : 0);
	return st;
}

/* Gets one key: its length when the bytes are exactly k's value of
 * want bytes, -ENOENT on a miss; wrong bytes fail the test. */
static ssize_t get1(struct pool_kv *kv, const struct pool_kv_key *k,
		    size_t want)
{
	size_t cap = want ? want : 1, len = 7;
	uint8_t *b = malloc(cap);
	void *bufs[1] = { b };
	int st = 1;
	ssize_t n;

	ck_assert_ptr_nonnull(b);
	n = pool_kv_get(kv, 1, k, bufs, &cap, &len, &st);
	ck_assert_int_eq(n, st == 0 ? 1 : 0);
	if (st == 0) {
		ck_assert_uint_eq(len, want);
		ck_assert_int_eq(tu_pattern_check(b, len, key_seed(k), 0), -1);
	}
	free(b);
	return st ? st : (ssize_t)len;
}

/* ---- keys ------------------------------------------------------------ */

START_TEST(prefix_keys)
{
	uint32_t tok[1000];
	struct pool_kv_key a[4], b[4], c[4], d[4];
	uint8_t salt[32], want[32];
	crypto_generichash_state st;
	uint8_t le[4];

	for (int i = 0; i < 1000; i++)
		tok[i] = (uint32_t)(i * 7919 + 13);
	/* 1000 tokens: 3 whole chunks of 256; the tail has no key */
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 1000, 0, a, 4), 3);
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 1000, 256, b, 4),
			 3);
	ck_assert_mem_eq(a, b, 3 * sizeof(a[0]));
	/* the same prefix gives the same keys: 600 tokens, 2 chunks */
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 600, 0, c, 4), 2);
	ck_assert_mem_eq(a, c, 2 * sizeof(a[0]));
	/* max caps the output */
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 1000, 0, c, 1), 1);
	ck_assert_mem_eq(a, c, sizeof(a[0]));
	/* another tenant, another model, a moved boundary: other keys */
	ck_assert_int_eq(pool_kv_prefix_keys("u", "m", tok, 1000, 0, c, 4), 3);
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m2", tok, 1000, 0, d, 4), 3);
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 3; j++) {
			ck_assert_mem_ne(a[i].b, c[j].b, 32);
			ck_assert_mem_ne(a[i].b, d[j].b, 32);
			ck_assert_mem_ne(c[i].b, d[j].b, 32);
		}
	/* "t"+"m2" and "tm"+"2" are not the same salt */
	ck_assert_int_eq(pool_kv_prefix_keys("tm", "2", tok, 256, 0, c, 4), 1);
	ck_assert_mem_ne(c[0].b, d[0].b, 32);
	/* a token changed in chunk 1 changes keys 1 and 2, not 0 */
	tok[300]++;
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 1000, 0, c, 4), 3);
	ck_assert_mem_eq(a[0].b, c[0].b, 32);
	ck_assert_mem_ne(a[1].b, c[1].b, 32);
	ck_assert_mem_ne(a[2].b, c[2].b, 32);
	tok[300]--;
	/* the documented formula (docs/kv.md), chunks of 4 tokens */
	ck_assert_int_eq(sodium_init() >= 0, 1);
	crypto_generichash_init(&st, NULL, 0, 32);
	crypto_generichash_update(&st, (const uint8_t *)"tidepool kv salt v1",
				  19);
	memcpy(le, "\1\0\0\0", 4);
	crypto_generichash_update(&st, le, 4);
	crypto_generichash_update(&st, (const uint8_t *)"t", 1);
	crypto_generichash_update(&st, le, 4);
	crypto_generichash_update(&st, (const uint8_t *)"m", 1);
	crypto_generichash_final(&st, salt, 32);
	crypto_generichash_init(&st, NULL, 0, 32);
	crypto_generichash_update(&st, salt, 32);
	for (int i = 0; i < 4; i++) {
		for (int j = 0; j < 4; j++)
			le[j] = (uint8_t)(tok[i] >> (8 * j));
		crypto_generichash_update(&st, le, 4);
	}
	crypto_generichash_final(&st, want, 32);
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 9, 4, c, 4), 2);
	ck_assert_mem_eq(c[0].b, want, 32);
	/* bad arguments; nothing to do is 0 keys */
	ck_assert_int_eq(pool_kv_prefix_keys(NULL, "m", tok, 256, 0, c, 4),
			 -EINVAL);
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", NULL, 256, 0, c, 4),
			 -EINVAL);
	ck_assert_int_eq(pool_kv_prefix_keys("t", "m", tok, 255, 0, c, 4), 0);
}
END_TEST

/* ---- one memd -------------------------------------------------------- */

START_TEST(round_trips)
{
	static const size_t sizes[] = {
		1,	 100,	       65472,	     65473,
		MIB,	 2 * MIB - 64, 2 * MIB - 63, 5 * MIB + 3,
		64 * MIB
	};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	struct pool_kv_key keys[N + 1];
	const void *vals[N];
	void *bufs[N];
	size_t lens[N], caps[N], got[N];
	int st[N];
	struct pool_kv_stats ks;
	struct pool_kv *kv;
	struct pool *p;

	/* 128 slabs of 2 MiB, half of them for the tenant. The one-batch
	 * get reads 72 MiB: under a sanitizer on a loaded machine that can
	 * outlive the default 2 s lease (a miss), so this test's lease is
	 * long; what it checks is the bytes. */
	start_standalone_lease(NULL, "256M", "30s");
	p = tu_pool_connect(&md);
	kv = kv_open_lease(p, 30000);
	for (int i = 0; i < N; i++) {
		make_key(&keys[i], 1, (uint64_t)i);
		lens[i] = sizes[i];
		vals[i] = make_value(&keys[i], sizes[i]);
	}
	make_key(&keys[N], 1, N); /* never stored */
	ck_assert_int_eq(pool_kv_put(kv, N, keys, vals, lens, st), N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(st[i], 0);
	/* again: present, idempotent */
	ck_assert_int_eq(pool_kv_put(kv, N, keys, vals, lens, st), N);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(st[i], -EEXIST);
	/* one batch back, every byte checked */
	for (int i = 0; i < N; i++) {
		caps[i] = sizes[i];
		bufs[i] = calloc(1, sizes[i]);
	}
	ck_assert_int_eq(pool_kv_get(kv, N, keys, bufs, caps, got, st), N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(st[i], 0);
		ck_assert_uint_eq(got[i], sizes[i]);
		ck_assert_int_eq(tu_pattern_check(bufs[i], got[i],
						  key_seed(&keys[i]), 0),
				 -1);
	}
	/* one at a time too */
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(get1(kv, &keys[i], sizes[i]),
				 (ssize_t)sizes[i]);
	/* a buffer too small: -ENOBUFS with the length; a miss: -ENOENT */
	caps[0] = MIB - 1;
	ck_assert_int_eq(pool_kv_get(kv, 1, &keys[4], bufs, caps, got, st), 0);
	ck_assert_int_eq(st[0], -ENOBUFS);
	ck_assert_uint_eq(got[0], MIB);
	ck_assert_int_eq(get1(kv, &keys[N], 10), -ENOENT);
	/* values of no bytes or over the maximum */
	lens[0] = 0;
	lens[1] = POOL_KV_VALUE_MAX + 1ull;
	ck_assert_int_eq(pool_kv_put(kv, 2, &keys[N], vals, lens, st), 0);
	ck_assert_int_eq(st[0], -EINVAL);
	ck_assert_int_eq(st[1], -EMSGSIZE);
	ck_assert_int_eq(get1(kv, &keys[N], 10), -ENOENT);

	ck_assert_int_eq(pool_kv_get_stats(kv, &ks), 0);
	ck_assert_uint_eq(ks.puts, N);
	ck_assert_uint_eq(ks.bad_reads, 0);
	ck_assert_uint_eq(ks.ndonors, 1);
	for (int i = 0; i < N; i++) {
		free((void *)vals[i]);
		free(bufs[i]);
	}
	pool_kv_close(kv);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/*
 * pool_kv_get_to's sink: the destination is asked for at the moment of
 * the copy and never written after end. Each begin hands out a fresh
 * mapping (so the address cannot have been known before), end makes it
 * read-only (a later write by libpool faults the test, or fails the
 * transfer over tcp, and the bytes then differ), begin and end pair up
 * and never nest. Loop 0: the same-host path (bytes through memd's
 * files, copied once); 1: LIBPOOL_SHM=off (read over tcp into libpool's
 * memory, checked, then delivered).
 */
struct sink_log {
	size_t n;
	void **to;   /* per key: what begin returned (NULL: not asked) */
	size_t *len; /* per key: begin's len */
	unsigned *begins, *ends;
	bool inside;	/* between a begin and its end */
	size_t decline; /* this key's begin returns NULL */
	bool order_ok;
};

static void *sink_begin(void *arg, size_t i, size_t len)
{
	struct sink_log *l = arg;
	void *m;

	if (l->inside || i >= l->n)
		l->order_ok = false;
	l->begins[i]++;
	if (i == l->decline)
		return NULL;
	l->inside = true;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	if (l->to[i]) /* asked again (an op re-run): the last one counts */
		munmap(l->to[i], l->len[i]);
	l->to[i] = m;
	l->len[i] = len;
	return m;
}

static void sink_end(void *arg, size_t i)
{
	struct sink_log *l = arg;

	if (!l->inside || i >= l->n || !l->to[i])
		l->order_ok = false;
	l->inside = false;
	l->ends[i]++;
	ck_assert_int_eq(mprotect(l->to[i], l->len[i], PROT_READ), 0);
}

START_TEST(get_to_delivers_through_a_sink)
{
	static const size_t sizes[] = { 1,   100,	   65473,
					MIB, 2 * MIB - 63, 5 * MIB + 3,
					777 };
	enum { N = sizeof(sizes) / sizeof(sizes[0]), M = N + 2 };
	struct pool_kv_key keys[M];
	const void *vals[N];
	size_t lens[M], caps[M], got[M];
	int st[M];
	void *to[M] = { 0 };
	size_t tlen[M] = { 0 };
	unsigned begins[M] = { 0 }, ends[M] = { 0 };
	struct sink_log l = { .n = M,
			      .to = to,
			      .len = tlen,
			      .begins = begins,
			      .ends = ends,
			      .decline = 2,
			      .order_ok = true };
	struct pool_kv_sink sink = { sink_begin, sink_end, &l, 0 };
	struct pool_kv_sink half = { sink_begin, NULL, &l, 0 };
	struct pool_kv_stats ks;
	uint64_t shm0;
	struct pool_kv *kv;
	struct pool *p;

	start_standalone_lease(NULL, "256M", "30s");
	if (_i == 1)
		setenv("LIBPOOL_SHM", "off", 1);
	p = tu_pool_connect(&md);
	unsetenv("LIBPOOL_SHM");
	kv = kv_open_lease(p, 30000);
	for (int i = 0; i < M; i++) {
		make_key(&keys[i], 7, (uint64_t)i);
		caps[i] = i < N ? sizes[i] : MIB;
	}
	for (int i = 0; i < N; i++) {
		lens[i] = sizes[i];
		vals[i] = make_value(&keys[i], sizes[i]);
	}
	ck_assert_int_eq(pool_kv_put(kv, N, keys, vals, lens, st), N);
	caps[N - 1] = sizes[N - 1] - 1; /* too small: -ENOBUFS */
	/* keys[N], keys[N + 1]: never stored */

	shm0 = pool_shm_bytes(p);
	ck_assert_int_eq(pool_kv_get_to(kv, M, keys, &sink, caps, got, st),
			 N - 2);
	ck_assert_msg(l.order_ok, "begin and end out of order");
	for (int i = 0; i < M; i++) {
		if (i == 2) {
			ck_assert_int_eq(st[i], -ECANCELED);
			ck_assert_uint_ge(begins[i], 1);
			ck_assert_uint_eq(ends[i], 0);
		} else if (i == N - 1) {
			ck_assert_int_eq(st[i], -ENOBUFS);
			ck_assert_uint_eq(got[i], sizes[i]);
		} else if (i >= N) {
			ck_assert_int_eq(st[i], -ENOENT);
		} else {
			ck_assert_msg(st[i] == 0, "key %d: %d", i, st[i]);
			ck_assert_uint_eq(got[i], sizes[i]);
			ck_assert_uint_eq(begins[i], ends[i]);
			ck_assert_uint_eq(tlen[i], sizes[i]);
			ck_assert_int_eq(tu_pattern_check(to[i], got[i],
							  key_seed(&keys[i]),
							  0),
					 -1);
		}
		/* asked only for values that are there and fit */
		if (i >= N - 1)
			ck_assert_uint_eq(begins[i], 0);
	}
	/* same host: the bytes came through memd's files, copied once;
	 * over tcp none, every delivered value out of libpool's memory */
	if (_i == 0) {
		ck_assert_uint_ge(pool_shm_bytes(p) - shm0, 5 * MIB);
		ck_assert_uint_eq(sink.staged, 0);
	} else {
		ck_assert_uint_eq(pool_shm_bytes(p) - shm0, 0);
		ck_assert_uint_eq(sink.staged, N - 2);
	}
	ck_assert_int_eq(pool_kv_get_stats(kv, &ks), 0);
	ck_assert_uint_eq(ks.bad_reads, 0);

	/* bad arguments, nothing asked of the sink */
	memset(begins, 0, sizeof(begins));
	ck_assert_int_eq(pool_kv_get_to(kv, 1, keys, NULL, caps, got, st),
			 -EINVAL);
	ck_assert_int_eq(pool_kv_get_to(kv, 1, keys, &half, caps, got, st),
			 -EINVAL);
	ck_assert_int_eq(pool_kv_get_to(kv, 1, keys, &sink, NULL, got, st),
			 -EINVAL);
	ck_assert_int_eq(pool_kv_get_to(kv, 0, keys, &sink, caps, got, st),
			 -EINVAL);
	ck_assert_uint_eq(begins[0], 0);

	for (int i = 0; i < M; i++)
		if (to[i])
			munmap(to[i], tlen[i]);
	for (int i = 0; i < N; i++)
		free((void *)vals[i]);
	pool_kv_close(kv);
	ck_assert_int_eq(pool_kv_get_to(kv, 1, keys, &sink, caps, got, st),
			 -EBADF);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

START_TEST(exists_delete_pin_async)
{
	struct pool_kv_key keys[10];
	struct pool_kv_op *op, *op2;
	int st[10];
	struct pool_kv *kv;
	struct pool *p;
	struct pollfd pfd;
	uint64_t cnt;
	size_t len = 3000, cap = 3000, got;
	uint8_t *b = malloc(cap);
	void *bufs[1] = { b };
	const void *vals[1];

	start_standalone(NULL, "64M");
	p = tu_pool_connect(&md);
	kv = kv_open(p);
	for (int i = 0; i < 10; i++)
		make_key(&keys[i], 2, (uint64_t)i);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(put1(kv, &keys[i], 1000 + 100 * (size_t)i), 0);
	ck_assert_int_eq(pool_kv_exists(kv, 10, keys), 6);
	ck_assert_int_eq(pool_kv_exists(kv, 4, keys + 6), 0);
	ck_assert_int_eq(pool_kv_exists(kv, 3, keys), 3);

	/* delete: gone, and a second delete says so */
	ck_assert_int_eq(pool_kv_delete(kv, 1, &keys[3], st), 1);
	ck_assert_int_eq(st[0], 0);
	ck_assert_int_eq(get1(kv, &keys[3], 1300), -ENOENT);
	ck_assert_int_eq(pool_kv_delete(kv, 2, &keys[3], st), 1);
	ck_assert_int_eq(st[0], -ENOENT);
	ck_assert_int_eq(st[1], 0);
	ck_assert_int_eq(pool_kv_exists(kv, 10, keys), 3);

	/* pin present keys only; unpin once per pin */
	ck_assert_int_eq(pool_kv_pin(kv, 3, &keys[1], st), 2);
	ck_assert_int_eq(st[0], 0);
	ck_assert_int_eq(st[1], 0);
	ck_assert_int_eq(st[2], -ENOENT);
	ck_assert_int_eq(pool_kv_unpin(kv, 1, &keys[1], st), 1);
	ck_assert_int_eq(pool_kv_unpin(kv, 1, &keys[1], st), 0);
	ck_assert_int_eq(st[0], -EINVAL);
	ck_assert_int_eq(get1(kv, &keys[2], 1200), 1200);

	/* async: put, then get and exists; the eventfd says when */
	vals[0] = make_value(&keys[7], len);
	ck_assert_int_eq(
		pool_kv_put_async(kv, 1, &keys[7], vals, &len, st, &op), 0);
	ck_assert_int_eq(pool_kv_op_wait(kv, op, -1), 1);
	ck_assert_int_eq(st[0], 0);
	free((void *)vals[0]);
	pfd.fd = pool_kv_eventfd(kv);
	pfd.events = POLLIN;
	ck_assert_int_ge(pfd.fd, 0);
	while (read(pfd.fd, &cnt, sizeof(cnt)) == sizeof(cnt))
		;
	ck_assert_int_eq(
		pool_kv_get_async(kv, 1, &keys[7], bufs, &cap, &got, st, &op),
		0);
	ck_assert_int_eq(pool_kv_exists_async(kv, 10, keys, &op2), 0);
	ck_assert_int_eq(poll(&pfd, 1, 10000), 1);
	ck_assert_int_eq(read(pfd.fd, &cnt, sizeof(cnt)), sizeof(cnt));
	ck_assert_uint_ge(cnt, 1);
	while (pool_kv_op_test(kv, op) == 0)
		sleep_ms(1);
	ck_assert_int_eq(pool_kv_op_test(kv, op), 1);
	ck_assert_int_eq(pool_kv_op_wait(kv, op, 0), 1);
	ck_assert_int_eq(st[0], 0);
	ck_assert_uint_eq(got, len);
	ck_assert_int_eq(tu_pattern_check(b, len, key_seed(&keys[7]), 0), -1);
	ck_assert_int_eq(pool_kv_op_wait(kv, op2, -1), 3);
	ck_assert_int_eq(pool_kv_delete_async(kv, 1, &keys[7], st, &op), 0);
	ck_assert_int_eq(pool_kv_op_wait(kv, op, -1), 1);
	ck_assert_int_eq(pool_kv_pin_async(kv, 1, &keys[0], st, &op), 0);
	ck_assert_int_eq(pool_kv_op_wait(kv, op, -1), 1);
	ck_assert_int_eq(pool_kv_unpin_async(kv, 1, &keys[0], st, &op), 0);
	ck_assert_int_eq(pool_kv_op_wait(kv, op, -1), 1);
	free(b);
	pool_kv_close(kv);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* Reads keys[0 .. CLR_N) over and over until stop: every hit must be
 * exactly its key's bytes (bad counts those that are not). */
enum { CLR_N = 12 };
struct clear_reader {
	struct pool_kv *kv;
	const struct pool_kv_key *keys;
	int stop; /* atomic */
	long hits, misses, bad;
};

static size_t clr_len(int i)
{
	return 70000 + 4099 * (size_t)i;
}

static void *clear_reader_thread(void *arg)
{
	struct clear_reader *a = arg;
	size_t cap = clr_len(CLR_N), len;
	uint8_t *b = malloc(cap);

	while (b && !__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE))
		for (int i = 0; i < CLR_N; i++) {
			void *bufs[1] = { b };
			int st = 1;

			len = 0;
			pool_kv_get(a->kv, 1, &a->keys[i], bufs, &cap, &len,
				    &st);
			if (st == -ENOENT)
				a->misses++;
			else if (st == 0 && len == clr_len(i) &&
				 tu_pattern_check(b, len, key_seed(&a->keys[i]),
						  0) == -1)
				a->hits++;
			else
				a->bad++;
		}
	free(b);
	return NULL;
}

/* pool_kv_clear on a standalone memd: every key goes, pinned ones too,
 * and the store takes puts again at once; gets racing clears read exact
 * bytes or miss. */
START_TEST(clear_empties_the_store)
{
	struct pool_kv_key keys[CLR_N];
	struct clear_reader rd = { 0 };
	pthread_t th;
	struct pool_kv *kv, *kv2;
	struct pool *p;
	int st[CLR_N];
	long stored = 0;

	start_standalone(NULL, "256M");
	p = tu_pool_connect(&md);
	kv = kv_open(p);
	kv2 = kv_open(p);
	for (int i = 0; i < CLR_N; i++) {
		make_key(&keys[i], 21, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &keys[i], clr_len(i)), 0);
	}
	ck_assert_int_eq(pool_kv_pin(kv, 2, keys, st), 2);
	ck_assert_int_eq(pool_kv_exists(kv, CLR_N, keys), CLR_N);
	/* another handle of the tenant's clears what kv put */
	ck_assert_int_eq(pool_kv_clear(kv2), 0);
	ck_assert_int_eq(pool_kv_exists(kv, CLR_N, keys), 0);
	for (int i = 0; i < CLR_N; i++)
		ck_assert_int_eq(get1(kv, &keys[i], clr_len(i)), -ENOENT);
	/* the pins went with their keys */
	ck_assert_int_eq(pool_kv_unpin(kv, 1, keys, st), 0);
	ck_assert_int_eq(st[0], -ENOENT);
	/* an empty store clears too */
	ck_assert_int_eq(pool_kv_clear(kv), 0);
	/* puts again at once */
	for (int i = 0; i < CLR_N; i++)
		ck_assert_int_eq(put1(kv, &keys[i], clr_len(i)), 0);
	ck_assert_int_eq(get1(kv2, &keys[3], clr_len(3)), (ssize_t)clr_len(3));

	/* gets racing clears (and puts): exact bytes or a miss. A put may
	 * find no room (-ENOSPC) while the slabs a clear gave back are
	 * reclaimed, as after deletes. */
	rd.kv = kv2;
	rd.keys = keys;
	ck_assert_int_eq(pthread_create(&th, NULL, clear_reader_thread, &rd),
			 0);
	for (int round = 0; round < 40; round++) {
		for (int i = 0; i < CLR_N; i++) {
			int r = put1(kv, &keys[i], clr_len(i));

			ck_assert_msg(r == 0 || r == -EEXIST || r == -ENOSPC,
				      "put: %s", strerror(-r));
			stored += r == 0;
		}
		ck_assert_int_eq(pool_kv_clear(kv), 0);
	}
	__atomic_store_n(&rd.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	ck_assert_int_eq(rd.bad, 0);
	ck_assert_int_gt(rd.hits + rd.misses, 0);
	ck_assert_int_gt(stored, 0);
	ck_assert_int_eq(pool_kv_exists(kv, CLR_N, keys), 0);

	pool_kv_close(kv);
	ck_assert_int_eq(pool_kv_clear(kv), -EBADF);
	ck_assert_int_eq(pool_kv_clear(NULL), -EINVAL);
	pool_kv_close(kv2);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

START_TEST(bad_arguments_and_closed_handle)
{
	struct pool_kv_key keys[2];
	struct pool_kv *kv, *kv2;
	struct pool_kv_op *op;
	struct pool_kv_opts o = { .nthreads = 65 };
	struct pool_kv_stats ks;
	size_t len = 10, cap = 10, got;
	uint8_t buf[10] = { 0 };
	const void *vals[1] = { buf };
	void *bufs[1] = { buf };
	int st[2];
	struct pool *p;

	start_standalone(NULL, "64M");
	p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_kv_open(p, &o, &kv), -EINVAL);
	ck_assert_ptr_null(kv);
	ck_assert_int_eq(pool_kv_open(NULL, NULL, &kv), -EINVAL);
	o = (struct pool_kv_opts){ .replicas = 3 };
	ck_assert_int_eq(pool_kv_open(p, &o, &kv), -EINVAL);
	ck_assert_ptr_null(kv);
	o.replicas = UINT32_MAX;
	ck_assert_int_eq(pool_kv_open(p, &o, &kv), -EINVAL);
	/* two replicas with one memd: one copy, and it works */
	o.replicas = 2;
	ck_assert_int_eq(pool_kv_open(p, &o, &kv), 0);
	make_key(&keys[0], 3, 7);
	ck_assert_int_eq(put1(kv, &keys[0], 3000), 0);
	ck_assert_int_eq(get1(kv, &keys[0], 3000), 3000);
	ck_assert_int_eq(pool_kv_exists(kv, 1, keys), 1);
	ck_assert_int_eq(pool_kv_delete(kv, 1, keys, st), 1);
	ck_assert_int_eq(st[0], 0);
	ck_assert_int_eq(get1(kv, &keys[0], 3000), -ENOENT);
	pool_kv_close(kv);
	kv = kv_open(p);
	kv2 = kv_open(p);
	make_key(&keys[0], 3, 0);
	make_key(&keys[1], 3, 1);
	/* bad counts and arrays */
	ck_assert_int_eq(pool_kv_put(kv, 0, keys, vals, &len, st), -EINVAL);
	ck_assert_int_eq(
		pool_kv_put(kv, POOL_KV_BATCH_MAX + 1, keys, vals, &len, st),
		-EINVAL);
	ck_assert_int_eq(pool_kv_put(kv, 1, NULL, vals, &len, st), -EINVAL);
	ck_assert_int_eq(pool_kv_put(kv, 1, keys, NULL, &len, st), -EINVAL);
	ck_assert_int_eq(pool_kv_get(kv, 1, keys, bufs, &cap, &got, NULL),
			 -EINVAL);
	ck_assert_int_eq(pool_kv_exists(kv, 0, keys), -EINVAL);
	ck_assert_int_eq(pool_kv_delete(NULL, 1, keys, st), -EINVAL);
	ck_assert_int_eq(
		pool_kv_get_async(kv, 1, keys, bufs, &cap, &got, st, NULL),
		-EINVAL);
	/* an op waited on another handle */
	ck_assert_int_eq(pool_kv_put_async(kv, 1, keys, vals, &len, st, &op),
			 0);
	ck_assert_int_eq(pool_kv_op_wait(kv2, op, -1), -EINVAL);
	ck_assert_int_eq(pool_kv_op_wait(kv, op, -1), 1);
	ck_assert_int_eq(pool_kv_exists(kv2, 1, keys), 1);

	/* a closed handle: -EBADF everywhere; closing twice is harmless */
	ck_assert_int_eq(
		pool_kv_put_async(kv, 1, &keys[1], vals, &len, st, &op), 0);
	pool_kv_close(kv); /* waits for it, frees it */
	pool_kv_close(kv);
	ck_assert_int_eq(pool_kv_put(kv, 1, keys, vals, &len, st), -EBADF);
	ck_assert_int_eq(pool_kv_get(kv, 1, keys, bufs, &cap, &got, st),
			 -EBADF);
	ck_assert_int_eq(pool_kv_exists(kv, 1, keys), -EBADF);
	ck_assert_int_eq(pool_kv_delete(kv, 1, keys, st), -EBADF);
	ck_assert_int_eq(pool_kv_pin(kv, 1, keys, st), -EBADF);
	ck_assert_int_eq(pool_kv_eventfd(kv), -EBADF);
	ck_assert_int_eq(pool_kv_get_stats(kv, &ks), -EBADF);
	ck_assert_int_eq(
		pool_kv_get_async(kv, 1, keys, bufs, &cap, &got, st, &op),
		-EBADF);
	/* the other handle is unaffected, and saw the second put */
	ck_assert_int_eq(pool_kv_exists(kv2, 2, keys), 2);
	ck_assert_int_eq(pool_kv_get_stats(kv2, &ks), 0);
	/* pool_close closes kv2 and frees both */
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* ---- stress: processes x threads, eviction all the time --------------- */

#define ST_PROCS 4
#define ST_THREADS 2
#define ST_OPS 13000 /* key operations per thread */
#define ST_KEYS 1024
#define ST_BATCH 16

struct st_counts {
	uint64_t ops, hits, misses, puts, wrong, unexpected;
};

struct st_arg {
	struct pool_kv *kv;
	unsigned seed;
	bool async;
	struct st_counts c;
};

static size_t st_len(const struct pool_kv_key *k)
{
	return 1 + key_seed(k) % (16 << 10);
}

static void *st_thread(void *arg)
{
	struct st_arg *a = arg;
	struct pool_kv_key keys[ST_BATCH];
	const void *vals[ST_BATCH];
	void *bufs[ST_BATCH];
	size_t lens[ST_BATCH], caps[ST_BATCH], got[ST_BATCH];
	int st[ST_BATCH];
	int efd = pool_kv_eventfd(a->kv);

	for (int i = 0; i < ST_BATCH; i++) {
		bufs[i] = malloc(16 << 10);
		caps[i] = 16 << 10;
	}
	while (a->c.ops < ST_OPS) {
		unsigned n = 1 + (unsigned)rand_r(&a->seed) % ST_BATCH;
		unsigned what = (unsigned)rand_r(&a->seed) % 10;

		for (unsigned i = 0; i < n; i++) {
			make_key(&keys[i], 9,
				 (uint64_t)rand_r(&a->seed) % ST_KEYS);
			lens[i] = st_len(&keys[i]);
		}
		if (what < 4) {
			for (unsigned i = 0; i < n; i++)
				vals[i] = make_value(&keys[i], lens[i]);
			pool_kv_put(a->kv, n, keys, vals, lens, st);
			for (unsigned i = 0; i < n; i++) {
				free((void *)vals[i]);
				if (!st[i])
					a->c.puts++;
				else if (st[i] != -EEXIST && st[i] != -EBUSY &&
					 st[i] != -ENOSPC) {
					a->c.unexpected++;
				}
			}
		} else if (what < 9) {
			ssize_t r;

			if (a->async) {
				struct pool_kv_op *op;
				struct pollfd pfd = { .fd = efd,
						      .events = POLLIN };

				if (pool_kv_get_async(a->kv, n, keys, bufs,
						      caps, got, st, &op)) {
					a->c.unexpected++;
					break;
				}
				while (!pool_kv_op_test(a->kv, op))
					poll(&pfd, 1, 100);
				r = pool_kv_op_wait(a->kv, op, -1);
			} else {
				r = pool_kv_get(a->kv, n, keys, bufs, caps, got,
						st);
			}
			if (r < 0)
				a->c.unexpected++;
			for (unsigned i = 0; i < n; i++) {
				if (st[i] == -ENOENT) {
					a->c.misses++;
					continue;
				}
				if (st[i]) {
					a->c.unexpected++;
					continue;
				}
				a->c.hits++;
				if (got[i] != lens[i] ||
				    tu_pattern_check(bufs[i], got[i],
						     key_seed(&keys[i]),
						     0) != -1)
					a->c.wrong++;
			}
		} else {
			pool_kv_delete(a->kv, n, keys, st);
			for (unsigned i = 0; i < n; i++)
				if (st[i] && st[i] != -ENOENT &&
				    st[i] != -EBUSY)
					a->c.unexpected++;
		}
		a->c.ops += n;
	}
	for (int i = 0; i < ST_BATCH; i++)
		free(bufs[i]);
	return NULL;
}

/* One client process: a session, a handle, ST_THREADS threads (one of
 * them asynchronous); its counts go to fd. */
static void st_child(int fd, unsigned seed)
{
	struct pool_opts o = { .addr = md.addr };
	struct st_arg a[ST_THREADS];
	pthread_t th[ST_THREADS];
	struct st_counts sum = { 0 };
	struct pool_kv *kv = NULL;
	struct pool *p = NULL;

	if (pool_connect(&o, &p) || pool_kv_open(p, NULL, &kv))
		_exit(3);
	for (int i = 0; i < ST_THREADS; i++) {
		memset(&a[i], 0, sizeof(a[i]));
		a[i].kv = kv;
		a[i].seed = seed * 31 + (unsigned)i;
		a[i].async = i == 1;
		pthread_create(&th[i], NULL, st_thread, &a[i]);
	}
	for (int i = 0; i < ST_THREADS; i++) {
		pthread_join(th[i], NULL);
		sum.ops += a[i].c.ops;
		sum.hits += a[i].c.hits;
		sum.misses += a[i].c.misses;
		sum.puts += a[i].c.puts;
		sum.wrong += a[i].c.wrong;
		sum.unexpected += a[i].c.unexpected;
	}
	pool_close(p);
	if (write(fd, &sum, sizeof(sum)) != sizeof(sum))
		_exit(4);
	_exit(0);
}

START_TEST(stress_processes_and_threads)
{
	struct st_counts total = { 0 };
	pid_t pid[ST_PROCS];
	int fds[2];

	/* 32 slabs of 2 MiB, a quarter for the tenant: 128 blocks of 64 KiB
	 * for 1024 keys, so puts evict all the time */
	start_standalone("kv_share = 25\n", "64M");
	ck_assert_int_eq(pipe(fds), 0);
	for (int i = 0; i < ST_PROCS; i++) {
		pid[i] = fork();
		ck_assert_int_ge(pid[i], 0);
		if (pid[i] == 0) {
			close(fds[0]);
			st_child(fds[1], (unsigned)i + 1);
		}
	}
	close(fds[1]);
	for (int i = 0; i < ST_PROCS; i++) {
		struct st_counts c;
		int ws;

		ck_assert_int_eq(waitpid(pid[i], &ws, 0), pid[i]);
		ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
			      "client %d: status %#x", i, ws);
		ck_assert_int_eq(read(fds[0], &c, sizeof(c)), sizeof(c));
		total.ops += c.ops;
		total.hits += c.hits;
		total.misses += c.misses;
		total.puts += c.puts;
		total.wrong += c.wrong;
		total.unexpected += c.unexpected;
	}
	close(fds[0]);
	fprintf(stderr,
		"stress: %llu key ops, %llu puts, %llu hits, %llu misses, "
		"%llu wrong, %llu unexpected\n",
		(unsigned long long)total.ops, (unsigned long long)total.puts,
		(unsigned long long)total.hits,
		(unsigned long long)total.misses,
		(unsigned long long)total.wrong,
		(unsigned long long)total.unexpected);
	ck_assert_uint_ge(total.ops, 100000);
	ck_assert_uint_eq(total.wrong, 0);
	ck_assert_uint_eq(total.unexpected, 0);
	ck_assert_uint_gt(total.hits, 0);
	ck_assert_uint_gt(total.misses, 0);
	/* more stored than fits: eviction happened */
	ck_assert_uint_gt(total.puts, 128);
	tu_memd_stop_ok(&md);
}
END_TEST

START_TEST(warm_restart)
{
	char spill[64], conf[256];
	struct pool_kv_key key;
	struct pool_kv *kv;
	struct pool *p;
	int hits = 0;

	ck_assert_int_eq(tu_scratch_dir(spill, sizeof(spill), "kvspill"), 0);
	/* a quarter of 32 slabs: 8 blocks of 2 MiB; 16 values evict 8 */
	snprintf(conf, sizeof(conf),
		 "kv_share = 25\nkv_spill_dir = %s\nkv_spill_size = 256M\n",
		 spill);
	start_standalone(conf, "64M");
	p = tu_pool_connect(&md);
	kv = kv_open(p);
	for (int i = 0; i < 16; i++) {
		make_key(&key, 7, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &key, MIB + (size_t)i), 0);
		ck_assert_int_eq(get1(kv, &key, MIB + (size_t)i),
				 (ssize_t)(MIB + (size_t)i));
	}
	pool_close(p); /* closes kv too */
	tu_memd_stop_ok(&md);

	start_standalone(conf, "64M");
	p = tu_pool_connect(&md);
	kv = kv_open(p);
	for (int i = 0; i < 16; i++) {
		ssize_t n;

		make_key(&key, 7, (uint64_t)i);
		n = get1(kv, &key, MIB + (size_t)i);
		if (n == -ENOENT)
			continue;
		ck_assert_int_eq(n, (ssize_t)(MIB + (size_t)i));
		hits++;
	}
	/* the 8 evicted (spilled) values came back */
	ck_assert_int_eq(hits, 8);
	pool_kv_close(kv);
	pool_close(p);
	tu_memd_stop_ok(&md);
	tu_sh("rm -rf %s", spill);
}
END_TEST

/* ---- a registry pool: r0 (registry, donates too), d1, d2 -------------- */

static struct tu_memd reg, don[2];
static char dir[64], cluster[256], sec_a[256], sec_b[256], sec_q[256];
#define QSLAB (2 * MIB) /* the pool's slab_size */
#define Q_QUOTA (8 * QSLAB)

/* The registry lists donor name as up (its own "state" follows its
 * "name" in the donors reply). */
static bool donor_is_up(const char *name)
{
	char out[16384], want[64];
	const char *at;

	if (tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}", out,
		     sizeof(out)))
		return false;
	snprintf(want, sizeof(want), "\"name\":\"%s\"", name);
	at = strstr(out, want);
	if (at)
		at = strstr(at, "\"state\":\"");
	return at && !strncmp(at, "\"state\":\"up\"", 12);
}

/* Usage reports the registry has taken from donor name (-1: none). */
static long long donor_reports(const char *name)
{
	char out[16384], want[64];
	const char *at;

	if (tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}", out,
		     sizeof(out)))
		return -1;
	snprintf(want, sizeof(want), "\"name\":\"%s\"", name);
	at = strstr(out, want);
	if (at)
		at = strstr(at, "\"reports\":");
	return at ? strtoll(at + strlen("\"reports\":"), NULL, 10) : -1;
}

/* Waits until every donor has made two more reports than now: the reply
 * to the first carries allowances computed after this call, and the
 * donor applies a reply before it sends its next report. */
static void donors_have_allowances(void)
{
	static const char *const names[] = { "r0", "d1", "d2" };
	long long base[3];

	for (int d = 0; d < 3; d++)
		base[d] = donor_reports(names[d]);
	for (int d = 0; d < 3; d++) {
		int i = 0;

		while (donor_reports(names[d]) < base[d] + 2 && i++ < 1000)
			sleep_ms(20);
		ck_assert_msg(i <= 1000, "donor %s made no reports for 20 s",
			      names[d]);
	}
}

static struct tu_memd extra[2]; /* d3, d4: donors that join later */

/* Donor name as m; with spill (not NULL) spilling KV to that directory. */
static void start_donor_as(struct tu_memd *m, const char *name,
			   const char *spill)
{
	char a1[300], a2[300], a3[64], a4[300];
	const char *args[] = { "--set",	   NULL,
			       "--set",	   NULL,
			       "--set",	   NULL,
			       "--donate", "128M",
			       "--set",	   "report_interval=100ms",
			       "--set",	   "slab_size=2M",
			       NULL,	   NULL,
			       NULL,	   NULL,
			       NULL };

	snprintf(a1, sizeof(a1), "registry=%s", reg.addr);
	snprintf(a2, sizeof(a2), "cluster_secret_file=%s", cluster);
	snprintf(a3, sizeof(a3), "donor_name=%s", name);
	args[1] = a1;
	args[3] = a2;
	args[5] = a3;
	if (spill) {
		snprintf(a4, sizeof(a4), "kv_spill_dir=%s", spill);
		args[12] = "--set";
		args[13] = a4;
		args[14] = "--set";
		args[15] = "kv_spill_size=256M";
	}
	ck_assert_int_eq(tu_memd_start_args(m,
					    "lease_ttl = 2s\nlease_grace = "
					    "500ms\nkv_share = 25\n"
					    "kv_reserve_ttl = 2s\n",
					    args),
			 0);
}

/* Donor d<i+1>; with spill (not NULL) spilling KV to that directory. */
static void start_donor_spill(int i, const char *spill)
{
	char name[16];

	snprintf(name, sizeof(name), "d%d", i + 1);
	start_donor_as(&don[i], name, spill);
}

static void start_donor(int i)
{
	start_donor_spill(i, NULL);
}

/*
 * The registry's report interval (its donors report at the interval its
 * JOIN_OK says): "pool_slow" sets 30 s. 300 ms, not less: a donor is
 * marked down after 3 intervals without a report, and one whose last
 * REPORT_OK is 2.5 intervals old refuses KV requests (EAGAIN) while it
 * is out of touch (docs/kv.md, "Donors that come and go"). A TSan build
 * on a loaded 2-core host stalls a memd for 300 ms and more (its log:
 * "registry: did not run for 331 ms"; a donor "marked down (no report
 * for 314 ms)" and emptied of its KV entries as it joined again): at
 * 100 ms, puts failed -EAGAIN and gets missed in tests that mean to
 * check eviction and replicas. As test_cluster_etcd.c does.
 */
#define REPORT_INTERVAL "report_interval=300ms"
static const char *reg_report = REPORT_INTERVAL;

/* The registry (r0, which donates too) on listen (NULL: a free port),
 * with its state in dir/state. */
static void start_registry(const char *listen)
{
	const char *args[] = {
		"--set",    "registry=yes", "--set", NULL,
		"--set",    NULL,	    "--set", "donor_name=r0",
		"--set",    NULL,	    "--set", "slab_size=2M",
		"--donate", "128M",	    NULL,    NULL,
		NULL
	};
	char a1[300], a2[300], l[64];

	snprintf(a1, sizeof(a1), "cluster_secret_file=%s", cluster);
	snprintf(a2, sizeof(a2), "state_dir=%s/state", dir);
	args[3] = a1;
	args[5] = a2;
	args[9] = reg_report;
	if (listen) {
		snprintf(l, sizeof(l), "%s", listen);
		args[14] = "--listen";
		args[15] = l;
	}
	ck_assert_int_eq(tu_memd_start_args(&reg,
					    "lease_ttl = 2s\nlease_grace = "
					    "500ms\nkv_share = 25\n"
					    "kv_reserve_ttl = 2s\n",
					    args),
			 0);
}

/* Waits (30 s at most) until the donor list clients are given names n
 * donors: the registry gives a new list out once every donor has
 * confirmed it (docs/kv.md), a little after the joins. */
static void clients_list_donors(uint32_t n)
{
	struct pool_opts o = { .addr = reg.addr,
			       .tenant = "a",
			       .secret_file = sec_a };
	struct pool_kv_opts ko = { .refresh_ms = 20 };
	struct pool_kv_stats ks = { 0 };
	struct pool_kv_key k;
	struct pool_kv *kv = NULL;
	struct pool *p = NULL;
	char home[64];
	int i;

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_kv_open(p, &ko, &kv), 0);
	make_key(&k, 1, 1);
	for (i = 0; i < 1500; i++) {
		(void)pool_kv_home(kv, &k, home, sizeof(home)); /* refresh */
		ck_assert_int_eq(pool_kv_get_stats(kv, &ks), 0);
		if (ks.ndonors == n)
			break;
		sleep_ms(20);
	}
	ck_assert_msg(i < 1500, "clients' list names %u donors, not %u",
		      (unsigned)ks.ndonors, n);
	pool_close(p);
}

static void cluster_setup(void)
{
	char state[128];
	int i;

	auth_init();
	ck_assert_int_eq(tu_pool_dir_secrets(dir, sizeof(dir), "kvc", state,
					     sizeof(state), cluster, "a.secret",
					     sec_a, "b.secret", sec_b,
					     "q.secret", sec_q, NULL),
			 0);
	start_registry(NULL);
	start_donor(0);
	start_donor(1);
	for (i = 0; i < 1500; i++) {
		if (donor_is_up("r0") && donor_is_up("d1") && donor_is_up("d2"))
			break;
		sleep_ms(20);
	}
	ck_assert_int_lt(i, 1500);
	ck_assert_int_eq(
		tu_tenant_add(reg.addr, cluster, "a", sec_a, 1024 * MIB), 0);
	ck_assert_int_eq(
		tu_tenant_add(reg.addr, cluster, "b", sec_b, 1024 * MIB), 0);
	ck_assert_int_eq(tu_tenant_add(reg.addr, cluster, "q", sec_q, Q_QUOTA),
			 0);
	clients_list_donors(3);
}

static void cluster_teardown(void)
{
	for (int i = 0; i < 2; i++) {
		if (don[i].pid > 0)
			tu_memd_stop(&don[i], SIGTERM);
		if (extra[i].pid > 0)
			tu_memd_stop(&extra[i], SIGTERM);
		extra[i].pid = 0;
	}
	if (reg.pid > 0)
		tu_memd_stop(&reg, SIGTERM);
	tu_sh("rm -rf %s", dir);
}

static struct pool *connect_as(const char *tenant, const char *secret)
{
	return tu_pool_connect_as(reg.addr, tenant, secret, 0);
}

START_TEST(tenants_never_share)
{
	struct pool *pa = connect_as("a", sec_a), *pb = connect_as("b", sec_b);
	struct pool_kv *a = kv_open(pa), *b = kv_open(pb);
	struct pool_kv_key keys[32];
	uint8_t *vb;
	size_t lb = 3 * MIB + 1, cap = lb, got;
	const void *vals[1];
	void *bufs[1];
	struct pool_kv_stats ks;
	char ha[64], hb[64];
	int st, homes = 0;

	ck_assert_int_eq(pool_kv_get_stats(a, &ks), 0);
	ck_assert_uint_eq(ks.ndonors, 3);
	/* keys spread over the donors; both tenants agree on homes */
	for (int i = 0; i < 32; i++) {
		make_key(&keys[i], 6, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(a, &keys[i], ha, sizeof(ha)), 0);
		ck_assert_int_eq(pool_kv_home(b, &keys[i], hb, sizeof(hb)), 0);
		ck_assert_str_eq(ha, hb);
		homes |= ha[0] == 'r' ? 1 : ha[1] == '1' ? 2 : 4;
		ck_assert_int_eq(put1(a, &keys[i], 5000 + (size_t)i), 0);
	}
	ck_assert_int_eq(homes, 7);
	/* b sees none of a's keys */
	ck_assert_int_eq(pool_kv_exists(b, 32, keys), 0);
	for (int i = 0; i < 32; i++)
		ck_assert_int_eq(get1(b, &keys[i], 5000 + (size_t)i), -ENOENT);
	ck_assert_int_eq(pool_kv_exists(a, 32, keys), 32);
	/* the same key, another value for b: each gets its own */
	vb = malloc(lb);
	tu_pattern_fill(vb, lb, key_seed(&keys[0]) + 1, 0);
	vals[0] = vb;
	ck_assert_int_eq(pool_kv_put(b, 1, keys, vals, &lb, &st), 1);
	ck_assert_int_eq(st, 0);
	memset(vb, 0, lb);
	bufs[0] = vb;
	ck_assert_int_eq(pool_kv_get(b, 1, keys, bufs, &cap, &got, &st), 1);
	ck_assert_uint_eq(got, lb);
	ck_assert_int_eq(tu_pattern_check(vb, lb, key_seed(&keys[0]) + 1, 0),
			 -1);
	ck_assert_int_eq(get1(a, &keys[0], 5000), 5000);
	/* b deletes its key; a's stays */
	ck_assert_int_eq(pool_kv_delete(b, 1, keys, &st), 1);
	ck_assert_int_eq(get1(b, &keys[0], lb), -ENOENT);
	ck_assert_int_eq(get1(a, &keys[0], 5000), 5000);
	free(vb);
	pool_close(pa);
	pool_close(pb);
}
END_TEST

/* pool_kv_clear in a pool: a's keys go from every donor, b's stay. */
START_TEST(clear_empties_only_the_tenant)
{
	struct pool *pa = connect_as("a", sec_a), *pb = connect_as("b", sec_b);
	struct pool_kv *a = kv_open(pa), *b = kv_open(pb), *a2 = kv_open(pa);
	struct pool_kv_key keys[32];
	char ha[64];
	int st, homes = 0;

	for (int i = 0; i < 32; i++) {
		make_key(&keys[i], 22, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(a, &keys[i], ha, sizeof(ha)), 0);
		homes |= ha[0] == 'r' ? 1 : ha[1] == '1' ? 2 : 4;
		ck_assert_int_eq(put1(a, &keys[i], 5000 + (size_t)i), 0);
		ck_assert_int_eq(put1(b, &keys[i], 5000 + (size_t)i), 0);
	}
	ck_assert_int_eq(homes, 7); /* on every donor */
	ck_assert_int_eq(pool_kv_pin(a, 1, keys, &st), 1);
	ck_assert_int_eq(pool_kv_exists(a, 32, keys), 32);
	/* another handle of a's clears them all */
	ck_assert_int_eq(pool_kv_clear(a2), 0);
	for (int i = 0; i < 32; i++) {
		ck_assert_int_eq(pool_kv_exists(a, 1, &keys[i]), 0);
		ck_assert_int_eq(get1(a, &keys[i], 5000 + (size_t)i), -ENOENT);
		ck_assert_int_eq(get1(b, &keys[i], 5000 + (size_t)i), 5000 + i);
	}
	ck_assert_int_eq(pool_kv_exists(b, 32, keys), 32);
	/* a puts again */
	ck_assert_int_eq(put1(a, &keys[5], 5005), 0);
	ck_assert_int_eq(get1(a, &keys[5], 5005), 5005);
	pool_kv_close(a2);
	pool_close(pa);
	pool_close(pb);
}
END_TEST

/* The registry's usage of tenant name (quota-get's used_bytes). */
static uint64_t used_bytes(const char *name)
{
	char req[128], out[1024];
	const char *at;

	snprintf(req, sizeof(req), "{\"cmd\":\"quota-get\",\"name\":\"%s\"}",
		 name);
	ck_assert_int_eq(tu_admin(reg.addr, cluster, req, out, sizeof(out)), 0);
	at = strstr(out, "\"used_bytes\":");
	ck_assert_msg(at != NULL, "quota-get: %s", out);
	return strtoull(at + strlen("\"used_bytes\":"), NULL, 10);
}

/*
 * q's quota is 8 slabs, far below the KV memory kv_share would give it
 * on three donors (48 slabs). Every put of 60 values of 1 MiB (a slab
 * each) succeeds by evicting q's older blocks; the registry's usage for q
 * never passes the quota (docs/cluster.md, "KV memory and quotas": no
 * PLACE of q's overlaps, and every donor has its allowance before q's
 * first put); b, with a large quota, keeps all of its 12 blocks, more
 * than q's whole quota. Lowering q's quota to 4 slabs trims its stores.
 */
START_TEST(kv_stays_within_the_quota)
{
	struct pool *pq = connect_as("q", sec_q), *pb = connect_as("b", sec_b);
	struct pool_kv *q = kv_open(pq), *b = kv_open(pb);
	struct pool_kv_key k;
	uint64_t max_used = 0, u;
	int hits = 0, last_hits = 0;
	char req[128], out[256];

	donors_have_allowances(); /* every donor has heard of q */
	for (int i = 0; i < 12; i++) {
		make_key(&k, 30, (uint64_t)i);
		ck_assert_int_eq(put1(b, &k, MIB), 0);
	}
	for (int i = 0; i < 60; i++) {
		make_key(&k, 31, (uint64_t)i);
		ck_assert_int_eq(put1(q, &k, MIB), 0);
		u = used_bytes("q");
		max_used = u > max_used ? u : max_used;
	}
	donors_have_allowances(); /* and have reported their usage */
	u = used_bytes("q");
	max_used = u > max_used ? u : max_used;
	ck_assert_msg(max_used <= Q_QUOTA, "q used %llu of a %llu quota",
		      (unsigned long long)max_used,
		      (unsigned long long)Q_QUOTA);
	ck_assert_uint_ge(u, 3 * QSLAB); /* its KV memory is usage */
	for (int i = 0; i < 60; i++) {
		make_key(&k, 31, (uint64_t)i);
		if (get1(q, &k, MIB) == (ssize_t)MIB) {
			hits++;
			last_hits += i >= 57;
		}
	}
	ck_assert_int_ge(hits, 3);
	ck_assert_int_le(hits, 8);
	ck_assert_int_ge(last_hits, 1); /* the newest are there */
	/* b was not held to q's quota, and lost nothing to q */
	for (int i = 0; i < 12; i++) {
		make_key(&k, 30, (uint64_t)i);
		ck_assert_int_eq(get1(b, &k, MIB), (ssize_t)MIB);
	}
	ck_assert_uint_ge(used_bytes("b"), 12 * QSLAB);

	/* a lower quota: the donors evict q's blocks down to it */
	snprintf(req, sizeof(req),
		 "{\"cmd\":\"quota-set\",\"name\":\"q\",\"quota_bytes\":%llu}",
		 (unsigned long long)(4 * QSLAB));
	ck_assert_int_eq(tu_admin(reg.addr, cluster, req, out, sizeof(out)), 0);
	for (int i = 0; i < 100 && used_bytes("q") > 4 * QSLAB; i++)
		sleep_ms(50);
	ck_assert_uint_le(used_bytes("q"), 4 * QSLAB);
	donors_have_allowances(); /* every donor has its new allowance */
	for (int i = 0; i < 20; i++) {
		make_key(&k, 32, (uint64_t)i);
		ck_assert_int_eq(put1(q, &k, MIB), 0);
		ck_assert_uint_le(used_bytes("q"), 4 * QSLAB);
	}
	pool_close(pq);
	pool_close(pb);
}
END_TEST

/*
 * q's KV memory fills its quota (every donor has its allowance, and q
 * puts far more than its quota); a region of 3 slabs is then placed
 * within pool_alloc's time: the registry answers PLACE with EAGAIN and
 * lowers q's KV allowances, the donors evict q's blocks down to them,
 * and libpool places again (docs/cluster.md, "KV memory and quotas").
 * q's values read back exactly or miss. A region the quota does not
 * allow even with no KV memory left is EDQUOT, without waiting.
 */
START_TEST(kv_yields_to_a_place)
{
	struct pool *pq = connect_as("q", sec_q);
	struct pool_kv *q = kv_open(pq);
	struct pool_region *rg = NULL, *big = NULL;
	struct pool_kv_key k;
	int hits = 0;

	donors_have_allowances();
	for (int i = 0; i < 40; i++) {
		make_key(&k, 33, (uint64_t)i);
		ck_assert_int_eq(put1(q, &k, MIB), 0);
	}
	donors_have_allowances(); /* they have reported what they hold */
	ck_assert_uint_gt(used_bytes("q") + 3 * QSLAB, Q_QUOTA);
	ck_assert_int_eq(pool_alloc(pq, 3 * QSLAB, &rg), 0);
	ck_assert_int_eq(pool_write(pq, rg, 0, "yield", 5), 0);
	for (int i = 0; i < 40; i++) {
		make_key(&k, 33, (uint64_t)i);
		if (get1(q, &k, MIB) == (ssize_t)MIB)
			hits++;
	}
	ck_assert_int_le(hits, 5); /* 8 slabs of quota, 3 taken */
	/* 3 + 6 slabs: past the quota with no KV memory at all */
	ck_assert_int_eq(pool_alloc(pq, 6 * QSLAB, &big), -EDQUOT);
	ck_assert_ptr_null(big);
	ck_assert_int_eq(pool_free(pq, rg), 0);
	pool_close(pq);
}
END_TEST

/* k's home donor by kv's list (for messages; static storage). */
static const char *home_of(struct pool_kv *kv, const struct pool_kv_key *k)
{
	static char home[64];

	if (pool_kv_home(kv, k, home, sizeof(home)))
		snprintf(home, sizeof(home), "?");
	return home;
}

START_TEST(eviction_stays_within_the_tenant)
{
	struct pool *pa = connect_as("a", sec_a), *pb = connect_as("b", sec_b);
	struct pool_kv *a = kv_open(pa), *b = kv_open(pb);
	struct pool_kv_key k;
	int hits = 0;

	/* b: 12 values of 1 MiB (2 MiB blocks); each donor holds 16 of
	 * b's blocks (a quarter of 128 MiB) */
	for (int i = 0; i < 12; i++) {
		make_key(&k, 10, (uint64_t)i);
		ck_assert_int_eq(put1(b, &k, MIB), 0);
	}
	/* a: 150 of them, far more than its share on all three donors */
	for (int i = 0; i < 150; i++) {
		int st;

		make_key(&k, 11, (uint64_t)i);
		st = put1(a, &k, MIB);
		ck_assert_msg(st == 0, "a's put %d (home %s): %s", i,
			      home_of(a, &k), strerror(-st));
	}
	for (int i = 0; i < 150; i++) {
		make_key(&k, 11, (uint64_t)i);
		hits += get1(a, &k, MIB) == (ssize_t)MIB;
	}
	/* a evicted its own ... */
	ck_assert_int_gt(hits, 0);
	ck_assert_int_le(hits, 48);
	/* ... and none of b's */
	for (int i = 0; i < 12; i++) {
		ssize_t n;

		make_key(&k, 10, (uint64_t)i);
		n = get1(b, &k, MIB);
		ck_assert_msg(n == (ssize_t)MIB, "b's key %d (home %s): %s", i,
			      home_of(b, &k), n < 0 ? strerror((int)-n) : "?");
	}
	pool_close(pa);
	pool_close(pb);
}
END_TEST

#define KILL_KEYS 24

struct kill_arg {
	struct pool_kv *kv;
	bool put;     /* else get */
	bool stop;    /* atomic: set by the main thread */
	uint64_t ops; /* atomic: read by the main thread while it runs */
	uint64_t hits, errors, wrong; /* read after the join */
};

static uint64_t ops_of(struct kill_arg *a)
{
	return __atomic_load_n(&a->ops, __ATOMIC_RELAXED);
}

/* 400 KiB and more: blocks of 512 KiB; the 48 keys of the test fit a
 * tenant's share (32 MiB) even on one donor, so nothing is evicted */
static size_t kill_len(int i)
{
	return (400 << 10) + (size_t)i * 1024;
}

static void *kill_thread(void *arg)
{
	struct kill_arg *a = arg;
	size_t cap = kill_len(KILL_KEYS);
	uint8_t *buf = malloc(cap);

	for (uint64_t it = 0; !__atomic_load_n(&a->stop, __ATOMIC_RELAXED);
	     it++) {
		struct pool_kv_key k;
		int i = (int)(it % KILL_KEYS), st;
		size_t len = kill_len(i), got;

		if (a->put) {
			const void *v[1] = { buf };

			/* keys of set 13 are put over and over: deleted
			 * first so each put moves bytes */
			make_key(&k, 13, (uint64_t)i);
			tu_pattern_fill(buf, len, key_seed(&k), 0);
			pool_kv_delete(a->kv, 1, &k, &st);
			pool_kv_put(a->kv, 1, &k, v, &len, &st);
			if (st && st != -EEXIST)
				a->errors++;
		} else {
			void *b[1] = { buf };

			make_key(&k, 12, (uint64_t)i);
			pool_kv_get(a->kv, 1, &k, b, &cap, &got, &st);
			if (!st) {
				a->hits++;
				if (got != len ||
				    tu_pattern_check(buf, got, key_seed(&k),
						     0) != -1)
					a->wrong++;
			} else if (st != -ENOENT) {
				a->errors++;
			}
		}
		__atomic_add_fetch(&a->ops, 1, __ATOMIC_RELAXED);
	}
	free(buf);
	return NULL;
}

START_TEST(donor_killed_mid_put_and_get)
{
	struct pool_opts o = { .addr = reg.addr,
			       .tenant = "a",
			       .secret_file = sec_a,
			       .timeout_ms = 2000 };
	struct pool_kv_opts ko = { .refresh_ms = 200 };
	struct kill_arg g = { 0 }, pu = { 0 };
	struct pool_kv_key k;
	struct pool_kv *kv;
	pthread_t tg, tp;
	struct pool *p;
	char home[64];
	bool on_d1[KILL_KEYS];
	int i, nd1 = 0;

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_kv_open(p, &ko, &kv), 0);
	for (i = 0; i < KILL_KEYS; i++) {
		make_key(&k, 12, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &k, kill_len(i)), 0);
		ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
		on_d1[i] = !strcmp(home, "d1");
		nd1 += on_d1[i];
	}
	ck_assert_int_gt(nd1, 0);
	ck_assert_int_lt(nd1, KILL_KEYS);
	g.kv = pu.kv = kv;
	pu.put = true;
	pthread_create(&tg, NULL, kill_thread, &g);
	pthread_create(&tp, NULL, kill_thread, &pu);
	while (ops_of(&g) < 2 * KILL_KEYS || ops_of(&pu) < KILL_KEYS)
		sleep_ms(10);
	/* d1 dies while both run */
	ck_assert_int_ne(tu_memd_stop(&don[0], SIGKILL), 0);
	don[0].pid = 0;
	for (i = 0; i < 3000 && donor_is_up("d1"); i++)
		sleep_ms(10);
	ck_assert_int_lt(i, 3000);
	{
		uint64_t g0 = ops_of(&g), p0 = ops_of(&pu);

		while (ops_of(&g) < g0 + 2 * KILL_KEYS ||
		       ops_of(&pu) < p0 + KILL_KEYS)
			sleep_ms(10);
	}
	__atomic_store_n(&g.stop, true, __ATOMIC_RELAXED);
	__atomic_store_n(&pu.stop, true, __ATOMIC_RELAXED);
	pthread_join(tg, NULL);
	pthread_join(tp, NULL);
	fprintf(stderr,
		"kill: gets %llu hits %llu errors %llu wrong %llu; puts %llu "
		"errors %llu\n",
		(unsigned long long)g.ops, (unsigned long long)g.hits,
		(unsigned long long)g.errors, (unsigned long long)g.wrong,
		(unsigned long long)pu.ops, (unsigned long long)pu.errors);
	ck_assert_uint_eq(g.wrong, 0);
	ck_assert_uint_eq(g.errors, 0); /* loss is a miss, not an error */
	/* The client drops d1 at its next donor-list refresh (refresh_ms
	 * 200, due at the first call after it): the ops above can all end
	 * before that. Wait for it, bounded (5 s): a d1 home after that
	 * fails below. */
	for (int w = 0, left = 1; left && w < 100; w++) {
		left = 0;
		for (i = 0; i < KILL_KEYS; i++) {
			make_key(&k, 12, (uint64_t)i);
			ck_assert_int_eq(
				pool_kv_home(kv, &k, home, sizeof(home)), 0);
			left += !strcmp(home, "d1");
		}
		if (left)
			sleep_ms(50);
	}
	/* d1's keys are misses now; every other key is still exactly
	 * there (rendezvous: their homes did not move) */
	for (i = 0; i < KILL_KEYS; i++) {
		make_key(&k, 12, (uint64_t)i);
		ck_assert_int_eq(get1(kv, &k, kill_len(i)),
				 on_d1[i] ? -ENOENT : (ssize_t)kill_len(i));
		ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
		ck_assert_str_ne(home, "d1");
	}
	/* what the put thread stored reads back exactly or misses */
	for (i = 0; i < KILL_KEYS; i++) {
		ssize_t n;

		make_key(&k, 13, (uint64_t)i);
		n = get1(kv, &k, kill_len(i));
		ck_assert(n == -ENOENT || n == (ssize_t)kill_len(i));
	}
	pool_close(p);
}
END_TEST

/*
 * A KV handle that keeps putting and getting while d1 is killed and
 * restarted ROUNDS times meets ROUNDS + 1 incarnations of d1; the links
 * to the dead ones are dropped by the handle (pool_link_put) and reaped,
 * so the session's links do not grow with the restarts (they did while
 * kv.c kept every link it was handed until pool_close).
 */
START_TEST(donor_restarts_do_not_grow_kv_links)
{
	enum { ROUNDS = 4 };
	struct pool_opts o = { .addr = reg.addr,
			       .tenant = "a",
			       .secret_file = sec_a,
			       .timeout_ms = 2000 };
	struct pool_kv_opts ko = { .refresh_ms = 200 };
	struct kill_arg g = { 0 }, pu = { 0 };
	struct pool_region *rg;
	struct pool_kv_key k;
	struct pool_kv *kv;
	uint32_t links0, links1;
	pthread_t tg, tp;
	struct pool *p;
	int i;

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_kv_open(p, &ko, &kv), 0);
	for (i = 0; i < KILL_KEYS; i++) {
		make_key(&k, 12, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &k, kill_len(i)), 0);
	}
	links0 = pool_session_nlinks(p);
	g.kv = pu.kv = kv;
	pu.put = true;
	pthread_create(&tg, NULL, kill_thread, &g);
	pthread_create(&tp, NULL, kill_thread, &pu);
	for (int round = 0; round < ROUNDS; round++) {
		uint64_t g0 = ops_of(&g), p0 = ops_of(&pu);

		while (ops_of(&g) < g0 + KILL_KEYS ||
		       ops_of(&pu) < p0 + KILL_KEYS)
			sleep_ms(10);
		ck_assert_int_ne(tu_memd_stop(&don[0], SIGKILL), 0);
		don[0].pid = 0;
		for (i = 0; i < 3000 && donor_is_up("d1"); i++)
			sleep_ms(10);
		ck_assert_int_lt(i, 3000);
		g0 = ops_of(&g);
		p0 = ops_of(&pu);
		while (ops_of(&g) < g0 + KILL_KEYS ||
		       ops_of(&pu) < p0 + KILL_KEYS)
			sleep_ms(10);
		start_donor(0);
		for (i = 0; i < 3000 && !donor_is_up("d1"); i++)
			sleep_ms(10);
		ck_assert_int_lt(i, 3000);
		/* a refresh or two: the handle uses the new incarnation */
		sleep_ms(500);
	}
	{
		uint64_t g0 = ops_of(&g), p0 = ops_of(&pu);

		while (ops_of(&g) < g0 + 2 * KILL_KEYS ||
		       ops_of(&pu) < p0 + 2 * KILL_KEYS)
			sleep_ms(10);
	}
	__atomic_store_n(&g.stop, true, __ATOMIC_RELAXED);
	__atomic_store_n(&pu.stop, true, __ATOMIC_RELAXED);
	pthread_join(tg, NULL);
	pthread_join(tp, NULL);
	/* an allocation reaps what the last drop could not (a heartbeat
	 * thread still ending then) */
	ck_assert_int_eq(pool_alloc(p, QSLAB, &rg), 0);
	ck_assert_int_eq(pool_free(p, rg), 0);
	links1 = pool_session_nlinks(p);
	fprintf(stderr,
		"kv restarts: links %u -> %u (reaped %llu); gets %llu hits "
		"%llu errors %llu wrong %llu; puts %llu errors %llu\n",
		links0, links1,
		(unsigned long long)pool_session_links_reaped(p),
		(unsigned long long)g.ops, (unsigned long long)g.hits,
		(unsigned long long)g.errors, (unsigned long long)g.wrong,
		(unsigned long long)pu.ops, (unsigned long long)pu.errors);
	ck_assert_uint_eq(g.wrong, 0);
	ck_assert_uint_eq(g.errors, 0); /* loss is a miss, not an error */
	/* Without dropping: links0 + ROUNDS. */
	ck_assert_uint_le(links1, links0 + 1);
	ck_assert_uint_ge(pool_session_links_reaped(p), ROUNDS - 1);
	/* what the put thread stored reads back exactly or misses */
	for (i = 0; i < KILL_KEYS; i++) {
		ssize_t n;

		make_key(&k, 13, (uint64_t)i);
		n = get1(kv, &k, kill_len(i));
		ck_assert(n == -ENOENT || n == (ssize_t)kill_len(i));
	}
	pool_kv_close(kv);
	pool_close(p);
}
END_TEST

/* ---- replicas ------------------------------------------------------- */

static struct pool_kv *kv_open_replicas(struct pool *p, unsigned replicas,
					unsigned refresh_ms)
{
	struct pool_kv_opts o = { .refresh_ms = refresh_ms,
				  .replicas = replicas };
	struct pool_kv *kv = NULL;

	ck_assert_int_eq(pool_kv_open(p, &o, &kv), 0);
	return kv;
}

/* A value for key k that is not k's derived value: another seed. */
static int put_other(struct pool_kv *kv, const struct pool_kv_key *k,
		     size_t len)
{
	uint8_t *v = malloc(len);
	const void *vals[1] = { v };
	int st = 1;

	ck_assert_ptr_nonnull(v);
	tu_pattern_fill(v, len, key_seed(k) + 1, 0);
	pool_kv_put(kv, 1, k, vals, &len, &st);
	free(v);
	return st;
}

/* 1 when the get returns exactly the other value, -ENOENT on a miss;
 * any other bytes fail the test. */
static int get_other(struct pool_kv *kv, const struct pool_kv_key *k,
		     size_t len)
{
	size_t cap = len, got = 0;
	uint8_t *b = malloc(len);
	void *bufs[1] = { b };
	int st = 1;

	ck_assert_ptr_nonnull(b);
	pool_kv_get(kv, 1, k, bufs, &cap, &got, &st);
	if (!st) {
		ck_assert_uint_eq(got, len);
		ck_assert_msg(tu_pattern_check(b, len, key_seed(k) + 1, 0) ==
				      -1,
			      "a get returned other bytes than the last "
			      "value committed to the home");
	}
	free(b);
	return st ? st : 1;
}

START_TEST(replica_is_never_stale)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 2, 0);
	struct pool_kv_stats ks;
	struct pool_kv_key k;
	char home[64], second[64];
	size_t len = 100000;
	int st;

	for (int i = 0; i < 8; i++) {
		make_key(&k, 20, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
		ck_assert_int_eq(pool_kv_second(kv, &k, second, sizeof(second)),
				 0);
		ck_assert_str_ne(home, second);
		/* value 1 on both; the home loses it: the replica answers */
		ck_assert_int_eq(put1(kv, &k, len), 0);
		ck_assert_int_eq(pool_kv_delete_copy(kv, &k, false), 0);
		ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);
		ck_assert_int_eq(pool_kv_exists(kv, 1, &k), 1);
		/* value 2 (other bytes) goes to the home, and replaces
		 * value 1 at the replica before the home commits */
		ck_assert_int_eq(put_other(kv, &k, len), 0);
		ck_assert_int_eq(get_other(kv, &k, len), 1);
		/* the home loses value 2: the replica has value 2, never 1 */
		ck_assert_int_eq(pool_kv_delete_copy(kv, &k, false), 0);
		ck_assert_int_eq(get_other(kv, &k, len), 1);
		/* a delete removes both copies */
		ck_assert_int_eq(put_other(kv, &k, len), 0);
		ck_assert_int_eq(pool_kv_delete(kv, 1, &k, &st), 1);
		ck_assert_int_eq(st, 0);
		ck_assert_int_eq(get_other(kv, &k, len), -ENOENT);
		ck_assert_int_eq(pool_kv_exists(kv, 1, &k), 0);
		ck_assert_int_eq(pool_kv_delete_copy(kv, &k, false), -ENOENT);
		ck_assert_int_eq(pool_kv_delete_copy(kv, &k, true), -ENOENT);
	}
	ck_assert_int_eq(pool_kv_get_stats(kv, &ks), 0);
	ck_assert_uint_ge(ks.replica_hits, 16);
	pool_close(p);
}
END_TEST

/* A put whose home lost the key while a pin holds its replica leaves the
 * pinned copy alone and fails -EEXIST (docs/kv.md, "Replicas"): the
 * chaos run found pinned keys deleted by another client's put whose
 * replica step deleted the copy it found there. */
START_TEST(put_leaves_a_pinned_replica)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 2, 0);
	struct pool_kv_key k;
	size_t len = 20000;
	int st;

	for (int i = 0; i < 4; i++) {
		make_key(&k, 21, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &k, len), 0);
		/* the home loses it (as to an eviction); the pin holds the
		 * replica (status 0: the home missed, the replica pinned) */
		ck_assert_int_eq(pool_kv_delete_copy(kv, &k, false), 0);
		ck_assert_int_eq(pool_kv_pin(kv, 1, &k, &st), 1);
		ck_assert_int_eq(st, 0);
		/* other bytes: refused, the pinned value stays */
		ck_assert_int_eq(put_other(kv, &k, len), -EEXIST);
		ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);
		/* again: -EBUSY while the refused put's home reservation
		 * holds, -EEXIST after; the pinned value stays either way */
		st = put_other(kv, &k, len);
		ck_assert_msg(st == -EBUSY || st == -EEXIST, "put: %d", st);
		ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);
		/* unpinned: a put replaces the replica, as before */
		ck_assert_int_eq(pool_kv_unpin(kv, 1, &k, &st), 1);
		ck_assert_int_eq(st, 0);
		st = put_other(kv, &k, len);
		/* the refused put's home reservation holds the key until
		 * it lapses unused (kv_reserve_ttl, 2 s here): -EBUSY */
		for (int t = 0; st == -EBUSY && t < 100; t++) {
			usleep(50000);
			st = put_other(kv, &k, len);
		}
		ck_assert_int_eq(st, 0);
		ck_assert_int_eq(get_other(kv, &k, len), 1);
		ck_assert_int_eq(pool_kv_delete(kv, 1, &k, &st), 1);
	}
	pool_close(p);
}
END_TEST

#define REP_KEYS 24

START_TEST(replica_serves_when_home_killed)
{
	struct pool_opts o = { .addr = reg.addr,
			       .tenant = "a",
			       .secret_file = sec_a,
			       .timeout_ms = 2000 };
	struct pool_kv *kv1, *kv2;
	struct pool_kv_stats ks;
	struct pool_kv_key k;
	struct pool *p;
	char home[64], second[64];
	bool on_d1[3][REP_KEYS];
	int n_d1[3] = { 0 }, st, i, set;

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	kv1 = kv_open_replicas(p, 1, 200);
	/* kv2 fetches the donor list again only after a link fails: its
	 * first get of a key of d1 finds the home lost and reads the
	 * replica, whether or not the registry has noticed yet */
	kv2 = kv_open_replicas(p, 2, 60000);
	/* set 0: two copies; set 1: one copy; set 2: two copies, deleted */
	for (set = 0; set < 3; set++)
		for (i = 0; i < REP_KEYS; i++) {
			make_key(&k, 30 + (uint64_t)set, (uint64_t)i);
			st = put1(set == 1 ? kv1 : kv2, &k, kill_len(i));
			ck_assert_msg(st == 0, "set %d put %d (home %s): %s",
				      set, i, home_of(kv2, &k), strerror(-st));
			ck_assert_int_eq(
				pool_kv_home(kv2, &k, home, sizeof(home)), 0);
			ck_assert_int_eq(
				pool_kv_second(kv2, &k, second, sizeof(second)),
				0);
			ck_assert_str_ne(home, second);
			on_d1[set][i] = !strcmp(home, "d1");
			n_d1[set] += on_d1[set][i];
		}
	for (i = 0; i < REP_KEYS; i++) {
		make_key(&k, 32, (uint64_t)i);
		ck_assert_int_eq(pool_kv_delete(kv2, 1, &k, &st), 1);
		ck_assert_int_eq(st, 0);
	}
	for (set = 0; set < 3; set++) {
		ck_assert_int_gt(n_d1[set], 0);
		ck_assert_int_lt(n_d1[set], REP_KEYS);
	}
	/* d1 dies; at once (the registry still lists it) and after it is
	 * gone from the donor list */
	ck_assert_int_ne(tu_memd_stop(&don[0], SIGKILL), 0);
	don[0].pid = 0;
	for (int round = 0; round < 2; round++) {
		if (round == 1) {
			for (i = 0; i < 3000 && donor_is_up("d1"); i++)
				sleep_ms(10);
			ck_assert_int_lt(i, 3000);
			sleep_ms(500); /* past refresh_ms: homes moved */
		}
		/* two copies: every key, exactly (first, so that kv2
		 * meets the dead home before anything else) */
		for (i = 0; i < REP_KEYS; i++) {
			make_key(&k, 30, (uint64_t)i);
			ck_assert_int_eq(get1(kv2, &k, kill_len(i)),
					 (ssize_t)kill_len(i));
		}
		ck_assert_int_eq(pool_kv_get_stats(kv2, &ks), 0);
		/* kv2 read d1's keys at their replicas, or (protocol 5) a
		 * replica's donor that has heard of d1's loss refused kv2's
		 * stale list (ESTALE), and kv2 read them at their new homes,
		 * the same donors, after fetching the list again */
		ck_assert_uint_gt(ks.replica_hits + ks.donor_refreshes, 1);
		for (i = 0; i < REP_KEYS; i++) {
			ssize_t want = (ssize_t)kill_len(i), n;

			make_key(&k, 30, (uint64_t)i);
			/* kv1 reads one copy, the home's: d1's keys miss
			 * while d1 is listed, then their new home has the
			 * replica kv2 put */
			n = get1(kv1, &k, kill_len(i));
			ck_assert(n == want || (n == -ENOENT && !round));
			/* one copy: d1's keys are misses */
			make_key(&k, 31, (uint64_t)i);
			ck_assert_int_eq(get1(kv2, &k, kill_len(i)),
					 on_d1[1][i] ? -ENOENT : want);
			ck_assert_int_eq(get1(kv1, &k, kill_len(i)),
					 on_d1[1][i] ? -ENOENT : want);
			/* deleted: neither copy answers */
			make_key(&k, 32, (uint64_t)i);
			ck_assert_int_eq(get1(kv2, &k, kill_len(i)), -ENOENT);
		}
		{
			struct pool_kv_key keys[REP_KEYS];

			for (i = 0; i < REP_KEYS; i++)
				make_key(&keys[i], 30, (uint64_t)i);
			ck_assert_int_eq(pool_kv_exists(kv2, REP_KEYS, keys),
					 REP_KEYS);
		}
	}
	for (i = 0; i < REP_KEYS; i++) {
		make_key(&k, 30, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(kv2, &k, home, sizeof(home)), 0);
		ck_assert_str_ne(home, "d1");
	}
	pool_close(p);
}
END_TEST

static void drain_donor(const char *name, bool on)
{
	char req[256], out[4096];

	snprintf(req, sizeof(req),
		 "{\"cmd\":\"drain\",\"donor\":\"%s\",\"drain\":%s}", name,
		 on ? "true" : "false");
	ck_assert_int_eq(tu_admin(reg.addr, cluster, req, out, sizeof(out)), 0);
}

/* Waits (10 s at most) until k's home is (is_home) or is not name. */
static void home_becomes(struct pool_kv *kv, const struct pool_kv_key *k,
			 const char *name, bool is_home)
{
	char home[64] = "";
	int i;

	for (i = 0; i < 500; i++) {
		if (pool_kv_home(kv, k, home, sizeof(home)) == 0 &&
		    !strcmp(home, name) == is_home)
			break;
		sleep_ms(20);
	}
	ck_assert_msg(i < 500, "the key's home is still %s", home);
}

/* A drain makes a donor forget its KV entries (docs/kv.md, "Drain"):
 * while drained it is out of the donors clients hash keys over, so a
 * delete cannot reach it, and after an undrain it must not answer with
 * what it held. The chaos run found the deleted value served again after
 * drain, delete, undrain. */
START_TEST(undrained_donor_serves_nothing_stale)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 1, 100);
	struct pool_kv_key k;
	char home[64], log[300];
	size_t len = 20000;
	int i, st;

	for (i = 0; i < 256; i++) { /* a key whose home is d1 */
		make_key(&k, 23, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
		if (!strcmp(home, "d1"))
			break;
	}
	ck_assert_int_lt(i, 256);
	ck_assert_int_eq(put1(kv, &k, len), 0);
	ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);

	drain_donor("d1", true);
	snprintf(log, sizeof(log), "%s/memd.log", don[0].dir);
	for (i = 0; i < 500 && !tu_file_has(log, "kv: draining: entries="); i++)
		sleep_ms(20);
	ck_assert_msg(i < 500, "d1 did not forget its KV entries: %s", log);
	home_becomes(kv, &k, "d1", false);
	/* the delete goes to the key's home now, not to d1 (a miss) */
	ck_assert_int_ge(pool_kv_delete(kv, 1, &k, &st), 0);

	drain_donor("d1", false);
	home_becomes(kv, &k, "d1", true);
	ck_assert_int_eq(get1(kv, &k, len), -ENOENT);
	ck_assert_int_eq(pool_kv_exists(kv, 1, &k), 0);
	/* and it takes puts again */
	ck_assert_int_eq(put1(kv, &k, len), 0);
	ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);
	pool_close(p);
}
END_TEST

/*
 * A stopped donor, as a partitioned one (docs/kv.md, "Donors that come
 * and go"): while the registry counts it down, clients hash its keys to
 * other donors, so a delete cannot reach it; when it is back it must not
 * answer with what it held. The chaos run measured 55,445 gets of
 * versions older than a delete or a newer put within such fault windows.
 */
START_TEST(stopped_donor_serves_nothing_stale)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 1, 100);
	struct pool_kv_key k;
	char home[64], log[300];
	size_t len = 20000;
	int i, st;

	for (i = 0; i < 256; i++) { /* a key whose home is d1 */
		make_key(&k, 29, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
		if (!strcmp(home, "d1"))
			break;
	}
	ck_assert_int_lt(i, 256);
	ck_assert_int_eq(put1(kv, &k, len), 0);
	ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);

	ck_assert_int_eq(kill(don[0].pid, SIGSTOP), 0);
	home_becomes(kv, &k, "d1", false); /* the registry: d1 is down */
	/* the delete goes to the key's home now, not to d1 (a miss) */
	ck_assert_int_ge(pool_kv_delete(kv, 1, &k, &st), 0);
	ck_assert_int_eq(kill(don[0].pid, SIGCONT), 0);
	home_becomes(kv, &k, "d1", true);
	ck_assert_int_eq(get1(kv, &k, len), -ENOENT);
	ck_assert_int_eq(pool_kv_exists(kv, 1, &k), 0);
	snprintf(log, sizeof(log), "%s/memd.log", don[0].dir);
	ck_assert_msg(tu_file_has(log, "kv: new membership joins="),
		      "no membership line in %s", log);
	/* and it takes puts again */
	ck_assert_int_eq(put1(kv, &k, len), 0);
	ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);
	pool_close(p);
}
END_TEST

/*
 * A get's reads are aged by the time they ended, not by the KV_DONE
 * round trips of other donors' batches (docs/kv.md, "Get"). Two keys at
 * two donors, a client lease of 400 ms and every KV_DONE held back
 * 600 ms (TP_TEST_KV_DONE_DELAY_MS, as a donor slow to answer it): both
 * keys hit. Before, each batch was timed after the KV_DONE of the one
 * before it, and the second donor's key, read long before, missed.
 */
START_TEST(slow_done_ages_no_other_donors_reads)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv_opts o = { .lease_ms = 400 };
	struct pool_kv *kv = NULL;
	struct pool_kv_key keys[2];
	const char *want[2] = { "d1", "d2" };
	size_t len = 20000, caps[2] = { len, len }, lens[2];
	uint8_t *b[2];
	void *bufs[2];
	int st[2];

	ck_assert_int_eq(pool_kv_open(p, &o, &kv), 0);
	for (int w = 0; w < 2; w++) {
		char home[64];
		int i;

		for (i = 0; i < 256; i++) {
			make_key(&keys[w], 47, (uint64_t)(w * 256 + i));
			ck_assert_int_eq(
				pool_kv_home(kv, &keys[w], home, sizeof(home)),
				0);
			if (!strcmp(home, want[w]))
				break;
		}
		ck_assert_int_lt(i, 256);
		ck_assert_int_eq(put1(kv, &keys[w], len), 0);
		b[w] = malloc(len);
		ck_assert_ptr_nonnull(b[w]);
		bufs[w] = b[w];
	}
	setenv("TP_TEST_KV_DONE_DELAY_MS", "600", 1);
	ck_assert_int_eq(pool_kv_get(kv, 2, keys, bufs, caps, lens, st), 2);
	unsetenv("TP_TEST_KV_DONE_DELAY_MS");
	for (int w = 0; w < 2; w++) {
		ck_assert_int_eq(st[w], 0);
		ck_assert_uint_eq(lens[w], len);
		ck_assert_int_eq(
			tu_pattern_check(b[w], len, key_seed(&keys[w]), 0), -1);
		free(b[w]);
	}
	pool_kv_close(kv);
	pool_close(p);
}
END_TEST
/*
 * A client whose donor list is older than a change (refresh_ms away)
 * must not read a version another client has since replaced and deleted
 * at the key's new home (docs/kv.md, "Donors that come and go"). The
 * stale list here has r0 alone (d1 and d2 drained); on the new list, with
 * d1 and d2 back, the key ranks r0 third, so neither the newer put nor
 * the delete (home, then second choice) reaches r0, which still holds
 * the first value. Protocol 5: r0 refuses the stale list's lookup
 * (ESTALE), the client fetches the list again and misses at the new
 * home. Without it the stale client read the deleted value at r0.
 */
START_TEST(stale_list_reads_nothing_deleted)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *fresh = kv_open_replicas(p, 1, 100), *stale;
	struct pool_kv_key k;
	char home[64], second[64];
	size_t len = 30000;
	int i, st;

	for (i = 0; i < 512; i++) { /* r0 third of three */
		make_key(&k, 41, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(fresh, &k, home, sizeof(home)),
				 0);
		ck_assert_int_eq(
			pool_kv_second(fresh, &k, second, sizeof(second)), 0);
		if (strcmp(home, "r0") && strcmp(second, "r0"))
			break;
	}
	ck_assert_int_lt(i, 512);
	drain_donor("d1", true);
	drain_donor("d2", true);
	home_becomes(fresh, &k, "r0", true);	/* both out of the list */
	stale = kv_open_replicas(p, 1, 600000); /* its list: r0 alone */
	ck_assert_int_eq(pool_kv_home(stale, &k, home, sizeof(home)), 0);
	ck_assert_str_eq(home, "r0");
	ck_assert_int_eq(put1(stale, &k, len), 0);
	ck_assert_int_eq(get1(stale, &k, len), (ssize_t)len);

	drain_donor("d1", false);
	drain_donor("d2", false);
	for (i = 0; i < 500; i++) { /* both back in fresh's list */
		int r;

		ck_assert_int_eq(pool_kv_home(fresh, &k, home, sizeof(home)),
				 0);
		/* -ENOENT: no second choice while r0 is still alone in
		 * fresh's list (its refresh has not seen d1 and d2 yet) */
		r = pool_kv_second(fresh, &k, second, sizeof(second));
		ck_assert_msg(r == 0 || r == -ENOENT, "second: %d", r);
		if (!r && strcmp(home, "r0") && strcmp(second, "r0"))
			break;
		sleep_ms(20);
	}
	ck_assert_int_lt(i, 500);
	/* every donor, r0 included, has had a report answered since */
	donors_have_allowances();
	/* a newer value at the new home replaces it, then a delete */
	ck_assert_int_eq(put_other(fresh, &k, len), 0);
	ck_assert_int_eq(get_other(fresh, &k, len), 1);
	ck_assert_int_eq(pool_kv_delete(fresh, 1, &k, &st), 1);
	ck_assert_int_eq(st, 0);
	ck_assert_int_eq(get1(fresh, &k, len), -ENOENT);

	/* the stale client: neither value, and it now routes as fresh */
	ck_assert_int_eq(pool_kv_home(stale, &k, home, sizeof(home)), 0);
	ck_assert_str_eq(home, "r0"); /* still the old list */
	ck_assert_int_eq(get1(stale, &k, len), -ENOENT);
	ck_assert_int_eq(pool_kv_home(stale, &k, home, sizeof(home)), 0);
	ck_assert_str_ne(home, "r0");
	ck_assert_int_eq(pool_kv_exists(stale, 1, &k), 0);
	/* and a put there goes to the new home */
	ck_assert_int_eq(put1(stale, &k, len), 0);
	ck_assert_int_eq(get1(fresh, &k, len), (ssize_t)len);
	pool_close(p);
}
END_TEST

/* Whether k has a spill file in spill (any tenant's directory). */
static bool spill_file_of(const char *spill, const struct pool_kv_key *k)
{
	char path[400], hex[2 * sizeof(k->b) + 1];

	for (size_t j = 0; j < sizeof(k->b); j++)
		snprintf(hex + 2 * j, 3, "%02x", k->b[j]);
	for (int t = 1; t <= 3; t++) {
		snprintf(path, sizeof(path), "%s/%d/%s", spill, t, hex);
		if (!access(path, F_OK))
			return true;
	}
	return false;
}

/*
 * A donor's spill directory outlives the donor (docs/kv.md, "Donors that
 * come and go"): while d1 is down the registry counts it down, clients
 * hash its keys elsewhere, and a newer put and a delete of keys it has
 * spilled go there. Restarted on the same directory it must serve
 * neither old value: its files were written under a membership that has
 * ended (the directory records which). Before, the process's first
 * membership kept whatever the directory brought, and d1 served both.
 */
#define SD_KEYS 24

START_TEST(restarted_donor_spill_serves_nothing_stale)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 1, 100);
	struct pool_kv_key k[SD_KEYS];
	char spill[300], home[64], log[300];
	size_t len = MIB;
	int n = 0, ns = 0, sp[2], i, st;

	snprintf(spill, sizeof(spill), "%s/d1-spill", dir);
	tu_memd_stop(&don[0], SIGTERM);
	don[0].pid = 0;
	start_donor_spill(0, spill);
	for (i = 0; i < 1500 && !donor_is_up("d1"); i++)
		sleep_ms(20);
	ck_assert_int_lt(i, 1500);
	donors_have_allowances(); /* and in kv's list (refresh_ms 100) */
	for (i = 0; i < 4096 && n < SD_KEYS; i++) { /* keys homed at d1 */
		int j = 0;

		make_key(&k[n], 47, (uint64_t)i);
		ck_assert_int_eq(pool_kv_home(kv, &k[n], home, sizeof(home)),
				 0);
		if (strcmp(home, "d1"))
			continue;
		/* d1 refuses (EAGAIN) until its first report is answered;
		 * a new tenant holds one slab until its allowance */
		while ((st = put1(kv, &k[n], len)) != 0 && j++ < 500)
			sleep_ms(20);
		ck_assert_msg(st == 0, "put at d1: %s", strerror(-st));
		n++;
	}
	ck_assert_int_eq(n, SD_KEYS);
	for (i = 0; i < n && ns < 2; i++)
		if (spill_file_of(spill, &k[i]))
			sp[ns++] = i;
	ck_assert_msg(ns == 2, "d1 spilled %d of %d 1 MiB values", ns, n);

	ck_assert_int_ne(tu_memd_stop(&don[0], SIGKILL), 0);
	don[0].pid = 0;
	home_becomes(kv, &k[sp[0]], "d1", false); /* the registry: d1 is down */
	home_becomes(kv, &k[sp[1]], "d1", false);
	/* a newer value of one, and a delete of the other, elsewhere */
	ck_assert_int_eq(put_other(kv, &k[sp[0]], len), 0);
	ck_assert_int_eq(get_other(kv, &k[sp[0]], len), 1);
	ck_assert_int_ge(pool_kv_delete(kv, 1, &k[sp[1]], &st), 0);
	ck_assert_int_eq(get1(kv, &k[sp[1]], len), -ENOENT);

	start_donor_spill(0, spill); /* its spill files still there */
	home_becomes(kv, &k[sp[0]], "d1", true);
	home_becomes(kv, &k[sp[1]], "d1", true);
	donors_have_allowances(); /* d1 serves KV again */
	/* get_other fails the test on the first value's bytes */
	st = get_other(kv, &k[sp[0]], len);
	ck_assert(st == -ENOENT || st == 1);
	ck_assert_int_eq(get1(kv, &k[sp[1]], len), -ENOENT);
	ck_assert_int_eq(pool_kv_exists(kv, 1, &k[sp[1]]), 0);
	ck_assert(!spill_file_of(spill, &k[sp[0]]));
	ck_assert(!spill_file_of(spill, &k[sp[1]]));
	snprintf(log, sizeof(log), "%s/memd.log", don[0].dir);
	ck_assert_msg(tu_file_has(log, "kv: first membership="),
		      "no membership line in %s", log);
	pool_close(p);
}
END_TEST

/* The donors of the two tests below: r0, d1 and d2 run, d3 and d4 join. */
static const char *const joins_names[] = { "r0", "d1", "d2", "d3", "d4" };

/*
 * Makes *k the first key of set tag whose home among r0, d1 and d2 both
 * d3 and d4 rank above (rendezvous, fabric/rendezvous.h), so that once
 * they join the old home is third. Returns that home's index in
 * joins_names, or -1 when none of 2048 keys qualifies.
 */
static int key_homed_below_two_joins(struct pool_kv_key *k, uint64_t tag)
{
	const char *const *names = joins_names;

	for (uint64_t i = 0; i < 2048; i++) {
		uint64_t sc[5];
		int h = 0;

		make_key(k, tag, i);
		for (int d = 0; d < 5; d++)
			sc[d] = tp_rendezvous_score(
				tp_rendezvous_seed(names[d]), k->b);
		for (int d = 1; d < 3; d++)
			if (tp_rendezvous_above(sc[d], names[d], sc[h],
						names[h]))
				h = d;
		if (tp_rendezvous_above(sc[3], names[3], sc[h], names[h]) &&
		    tp_rendezvous_above(sc[4], names[4], sc[h], names[h]))
			return h;
	}
	return -1;
}

/*
 * Homes that move without the donor leaving (docs/kv.md, "Donors that
 * come and go"): d3 and d4 join and both rank above a key's home; the
 * old home is third, where deletes (home, then second choice) no longer
 * reach it. A delete through the new list, both leave again: the old
 * home is the home once more and must not serve the deleted value. It
 * forgets the entries of keys it no longer ranks first or second for
 * when it learns the new list. Before, it served the deleted value.
 */
START_TEST(homes_moved_by_two_joins_serve_nothing_deleted)
{
	const char *const *names = joins_names;
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 1, 100);
	struct pool_kv_key k;
	char home[64], second[64], log[300];
	size_t len = 30000;
	int i, st, old = -1;

	old = key_homed_below_two_joins(&k, 53);
	ck_assert_int_ge(old, 0);
	ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
	ck_assert_str_eq(home, names[old]); /* the client ranks alike */
	ck_assert_int_eq(put1(kv, &k, len), 0);
	ck_assert_int_eq(get1(kv, &k, len), (ssize_t)len);

	start_donor_as(&extra[0], "d3", NULL);
	start_donor_as(&extra[1], "d4", NULL);
	for (i = 0; i < 500; i++) { /* both in kv's list: old is third */
		ck_assert_int_eq(pool_kv_home(kv, &k, home, sizeof(home)), 0);
		ck_assert_int_eq(pool_kv_second(kv, &k, second, sizeof(second)),
				 0);
		if (strcmp(home, names[old]) && strcmp(second, names[old]))
			break;
		sleep_ms(20);
	}
	ck_assert_int_lt(i, 500);
	snprintf(log, sizeof(log), "%s/memd.log",
		 old ? don[old - 1].dir : reg.dir);
	for (i = 0; i < 500 && !tu_file_has(log, "no longer ranks first"); i++)
		sleep_ms(20);
	ck_assert_msg(i < 500, "%s kept the key: %s", names[old], log);
	ck_assert_int_ge(pool_kv_delete(kv, 1, &k, &st), 0);

	for (int d = 0; d < 2; d++) {
		ck_assert_int_eq(tu_memd_stop(&extra[d], SIGTERM), 0);
		extra[d].pid = 0;
	}
	home_becomes(kv, &k, names[old], true);
	ck_assert_int_eq(get1(kv, &k, len), -ENOENT);
	ck_assert_int_eq(pool_kv_exists(kv, 1, &k), 0);
	pool_close(p);
}
END_TEST

/*
 * A change is told to every donor before clients get it (docs/kv.md,
 * "Donors that come and go"): with reports 30 s apart, d3 and d4 join
 * and both rank above a key's home h, which is third on the new list
 * (deletes, to home and second choice, miss it). A client that fetched
 * the new list deletes the key; a client still on the old list reads it
 * at h at once. h must refuse that lookup (its membership is the new
 * one: ESTALE), so the client fetches the list again and misses. Before,
 * h learned of the change at its next report, up to 30 s later, and
 * served the deleted value meanwhile.
 */
START_TEST(change_told_before_clients_read_nothing_deleted)
{
	const char *const *names = joins_names;
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *stale = kv_open_replicas(p, 1, 600000), *fresh;
	struct pool_kv_key k;
	char home[64], second[64];
	size_t len = 30000;
	int i, st, old = -1;

	old = key_homed_below_two_joins(&k, 59);
	ck_assert_int_ge(old, 0);
	ck_assert_int_eq(pool_kv_home(stale, &k, home, sizeof(home)), 0);
	ck_assert_str_eq(home, names[old]);
	ck_assert_int_eq(put1(stale, &k, len), 0);
	ck_assert_int_eq(get1(stale, &k, len), (ssize_t)len);

	fresh = kv_open_replicas(p, 1, 100);
	start_donor_as(&extra[0], "d3", NULL);
	start_donor_as(&extra[1], "d4", NULL);
	for (i = 0; i < 1000; i++) { /* both in fresh's list */
		int r;

		ck_assert_int_eq(pool_kv_home(fresh, &k, home, sizeof(home)),
				 0);
		r = pool_kv_second(fresh, &k, second, sizeof(second));
		ck_assert_msg(r == 0 || r == -ENOENT, "second: %d", r);
		if (!r && strcmp(home, names[old]) &&
		    strcmp(second, names[old]))
			break;
		sleep_ms(20);
	}
	ck_assert_int_lt(i, 1000);
	ck_assert_int_ge(pool_kv_delete(fresh, 1, &k, &st), 0);
	ck_assert_int_eq(get1(fresh, &k, len), -ENOENT);

	/* the stale client, within the report interval */
	ck_assert_int_eq(pool_kv_home(stale, &k, home, sizeof(home)), 0);
	ck_assert_str_eq(home, names[old]); /* still the old list */
	ck_assert_int_eq(get1(stale, &k, len), -ENOENT);
	ck_assert_int_eq(pool_kv_home(stale, &k, home, sizeof(home)), 0);
	ck_assert_str_ne(home, names[old]); /* and now the new one */
	ck_assert_int_eq(pool_kv_exists(stale, 1, &k), 0);
	pool_close(p);
}
END_TEST

static void slow_setup(void)
{
	reg_report = "report_interval=30s";
	cluster_setup();
}

static void slow_teardown(void)
{
	cluster_teardown();
	reg_report = REPORT_INTERVAL;
}

/*
 * A registry restart with no donor coming or going does not empty the
 * KV tier (docs/kv.md): the registry keeps its membership sequence and
 * list in its state, waits for those donors to join again, and answers
 * their joins with the same sequence, under which each keeps its
 * entries. r0 restarts with the registry (its keys are lost: a miss);
 * d1's and d2's read back exactly. Before protocol 5 every donor forgot
 * its entries at its join to the restarted registry.
 */
#define RR_KEYS 24

START_TEST(registry_restart_keeps_kv)
{
	struct pool *p = connect_as("a", sec_a);
	struct pool_kv *kv = kv_open_replicas(p, 1, 100);
	struct pool_kv_key k;
	char home[RR_KEYS][64], addr[64], log[300];
	int n_d = 0, n_r0 = 0, i;

	for (i = 0; i < RR_KEYS; i++) {
		make_key(&k, 43, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &k, kill_len(i)), 0);
		ck_assert_int_eq(pool_kv_home(kv, &k, home[i], sizeof(home[i])),
				 0);
		n_r0 += !strcmp(home[i], "r0");
	}
	n_d = RR_KEYS - n_r0;
	ck_assert_int_gt(n_d, 0);
	snprintf(addr, sizeof(addr), "%s", reg.addr);
	ck_assert_int_ne(tu_memd_stop(&reg, SIGKILL), 0);
	reg.pid = 0;
	start_registry(addr);
	ck_assert_str_eq(reg.addr, addr);
	for (i = 0; i < 1500; i++) {
		if (donor_is_up("r0") && donor_is_up("d1") && donor_is_up("d2"))
			break;
		sleep_ms(20);
	}
	ck_assert_int_lt(i, 1500);
	for (i = 0; i < RR_KEYS; i++) {
		ssize_t n;

		make_key(&k, 43, (uint64_t)i);
		n = get1(kv, &k, kill_len(i));
		/* A donor that the host stalls past 2.5 report intervals
		 * after its join serves no KV until its next report (out of
		 * touch, EAGAIN: a get misses; seen under TSan): ask again,
		 * 5 s at most. A key the donor forgot stays a miss. */
		for (int t = 0;
		     strcmp(home[i], "r0") && n == -ENOENT && t < 250; t++) {
			sleep_ms(20);
			n = get1(kv, &k, kill_len(i));
		}
		if (!strcmp(home[i], "r0"))
			ck_assert_int_eq(n, -ENOENT); /* restarted with it */
		else
			ck_assert_msg(n == (ssize_t)kill_len(i),
				      "key %d at %s: %zd after the registry "
				      "restarted",
				      i, home[i], n);
	}
	for (int d = 0; d < 2; d++) {
		snprintf(log, sizeof(log), "%s/memd.log", don[d].dir);
		ck_assert_msg(tu_file_has(log, "(continued)"),
			      "no continued membership in %s", log);
	}
	pool_close(p);
}
END_TEST

/* ---- capacity reports of a pool: the donors' curves merged ------------ */

/* poolctl (TP_POOLCTL) -a the registry -s its cluster secret, then args;
 * its stdout in out, its exit status returned. */
/* poolctl -a addr (-s secret) args; its standard output in out. */
static int poolctl_at(const char *addr, const char *secret, char *out,
		      size_t cap, const char *const *args)
{
	const char *pc = getenv("TP_POOLCTL");
	char cmd[1024];
	size_t n;
	FILE *f;
	int st;

	if (!pc || !*pc)
		tu_skip("TP_POOLCTL is not set");
	n = (size_t)snprintf(cmd, sizeof(cmd), "%s -a %s", pc, addr);
	if (secret)
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " -s %s",
				      secret);
	for (; *args; args++)
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, " %s", *args);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	n = fread(out, 1, cap - 1, f);
	out[n] = '\0';
	st = pclose(f);
	ck_assert_msg(WIFEXITED(st), "poolctl died: %s", cmd);
	return WEXITSTATUS(st);
}

/* poolctl against the registry, as the cluster's admin. */
static int poolctl_run(char *out, size_t cap, const char *const *args)
{
	return poolctl_at(reg.addr, cluster, out, cap, args);
}

static double jnum(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	ck_assert_msg(json_is_number(v), "no number '%s'", key);
	return json_number_value(v);
}

/* One donor's curve from its kv_report: the points, linear between,
 * from (0, 0) to the first, flat after the last (what poolctl reads). */
static double donor_curve_at(const json_t *pts, double x)
{
	size_t n = json_array_size(pts);
	double x0, h0, x1, h1;

	ck_assert_uint_gt(n, 0);
	x0 = json_number_value(json_array_get(json_array_get(pts, 0), 0));
	h0 = json_number_value(json_array_get(json_array_get(pts, 0), 1));
	if (x <= x0)
		return x0 > 0 ? h0 * x / x0 : h0;
	for (size_t i = 1; i < n; i++) {
		x1 = json_number_value(
			json_array_get(json_array_get(pts, i), 0));
		h1 = json_number_value(
			json_array_get(json_array_get(pts, i), 1));
		if (x < x1)
			return h0 + (h1 - h0) * (x - x0) / (x1 - x0);
		x0 = x1;
		h0 = h1;
	}
	return h0;
}

/* The pool's hit ratio at x bytes from the donors' reports: each donor
 * holds x * its share of the tenant's KV capacity, and its curve counts
 * for the requests in its window (docs/capacity.md, "A pool"). */
static double merged_at(json_t *const *rep, int nrep, double x)
{
	double cap = 0, w = 0, h = 0;

	for (int d = 0; d < nrep; d++)
		cap += jnum(rep[d], "cap_bytes");
	for (int d = 0; d < nrep; d++) {
		const json_t *cv = json_object_get(rep[d], "curve");
		double wd = jnum(cv, "window_requests");

		w += wd;
		h += wd * donor_curve_at(json_object_get(cv, "points"),
					 x * jnum(rep[d], "cap_bytes") / cap);
	}
	return w > 0 ? h / w : 0;
}

/*
 * Tenant a's keys spread over the three donors (r0, d1, d2); gets of
 * present keys (skewed) and of absent ones. Against the registry,
 * poolctl tenant report sums the donors' counters (equal to what the
 * client did), merges their curves (equal, at every size it reports, to
 * the merge computed here from each donor's own kv_report), and at the
 * pool's capacity (every key fits) predicts exactly the hit ratio the
 * pool measured; quota suggest answers from the merged curve, and says
 * when a target is out of reach. The tenant's own cost model (tenant
 * set) replaces the donors' in the saved time.
 */
START_TEST(capacity_report_merges_donors)
{
	enum { NKEYS = 120, LEN = 20000, NGETS = 720 };
	struct pool *pa = connect_as("a", sec_a);
	struct pool_kv *a = kv_open(pa);
	static struct pool_kv_key keys[NKEYS];
	static char out[1 << 17];
	json_t *rep[3], *pc, *j, *at;
	const char *addrs[3] = { reg.addr, don[0].addr, don[1].addr };
	uint64_t rng = 7, asked = 0, hits = 0, sum_req = 0, sum_hits = 0,
		 sum_hit_bytes = 0, tid;
	double x, want, hit_bytes;
	size_t i;
	int r, tries;

	for (int k = 0; k < NKEYS; k++) {
		make_key(&keys[k], 16, (uint64_t)k);
		/* a new tenant may wait for its first KV allowance */
		for (tries = 0;
		     (r = put1(a, &keys[k], LEN)) == -ENOSPC && tries < 250;
		     tries++)
			sleep_ms(20);
		ck_assert_int_eq(r, 0);
	}
	for (int g = 0; g < NGETS; g++) {
		struct pool_kv_key absent;
		uint64_t idx;
		ssize_t n;

		rng = rng * 6364136223846793005ull + 1442695040888963407ull;
		idx = (rng >> 33) % NKEYS;
		idx = idx * idx / NKEYS; /* skewed to the first keys */
		if (g % 6 == 5) {
			make_key(&absent, 17, (uint64_t)g);
			ck_assert_int_eq(get1(a, &absent, LEN), -ENOENT);
		} else {
			n = get1(a, &keys[idx], LEN);
			ck_assert_int_eq(n, LEN);
			hits++;
		}
		asked++;
	}

	/* poolctl against the registry: the pool's figures */
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "--json", "tenant",
						       "report", "a", NULL }),
			 0);
	pc = json_loads(out, 0, NULL);
	ck_assert_msg(pc, "%s", out);
	ck_assert_int_eq((int)jnum(pc, "donors"), 3);
	tid = (uint64_t)jnum(pc, "tenant_id");
	/* each donor's own report */
	for (int d = 0; d < 3; d++) {
		char req[128];

		snprintf(req, sizeof(req),
			 "{\"cmd\":\"kv_report\",\"tenant_id\":%llu}",
			 (unsigned long long)tid);
		ck_assert_int_eq(
			tu_admin(addrs[d], cluster, req, out, sizeof(out)), 0);
		j = json_loads(out, 0, NULL);
		ck_assert_msg(j, "%s", out);
		rep[d] = json_incref(
			json_array_get(json_object_get(j, "tenants"), 0));
		json_decref(j);
		ck_assert_ptr_nonnull(rep[d]);
		j = json_object_get(rep[d], "stats");
		/* keys spread: every donor served some of the requests */
		ck_assert_double_gt(jnum(j, "requests"), 0);
		sum_req += (uint64_t)jnum(j, "requests");
		sum_hits += (uint64_t)jnum(j, "request_hits");
		sum_hit_bytes += (uint64_t)jnum(j, "hit_bytes");
		ck_assert_ptr_nonnull(json_object_get(
			json_object_get(rep[d], "curve"), "points"));
	}
	/* counters: the donors' sum, and what the client did */
	j = json_object_get(pc, "stats");
	ck_assert_uint_eq(sum_req, asked);
	ck_assert_uint_eq(sum_hits, hits);
	ck_assert_uint_eq(sum_hit_bytes, hits * LEN);
	ck_assert_uint_eq((uint64_t)jnum(j, "requests"), sum_req);
	ck_assert_uint_eq((uint64_t)jnum(j, "request_hits"), sum_hits);
	ck_assert_uint_eq((uint64_t)jnum(j, "hit_bytes"), sum_hit_bytes);
	ck_assert_double_eq_tol(jnum(pc, "cap_bytes"),
				jnum(rep[0], "cap_bytes") +
					jnum(rep[1], "cap_bytes") +
					jnum(rep[2], "cap_bytes"),
				1);
	/* the merged curve: at the reported sizes and at every point */
	json_array_foreach(json_object_get(json_object_get(pc, "curve"), "at"),
			   i, at)
	{
		x = jnum(at, "bytes");
		ck_assert_double_eq_tol(jnum(at, "hit"), merged_at(rep, 3, x),
					1e-9);
	}
	json_array_foreach(
		json_object_get(json_object_get(pc, "curve"), "points"), i, at)
	{
		x = json_number_value(json_array_get(at, 0));
		ck_assert_double_eq_tol(
			json_number_value(json_array_get(at, 1)),
			merged_at(rep, 3, x), 1e-9);
	}
	/* every key fits the pool's capacity: what the curve predicts
	 * there is what the pool measured (every sampled: rate 1) */
	want = (double)hits / (double)asked;
	ck_assert_double_eq_tol(merged_at(rep, 3, jnum(pc, "cap_bytes")), want,
				0.01);

	/* quota suggest against the registry, from the merged curve */
	ck_assert_int_eq(
		poolctl_run(out, sizeof(out),
			    (const char *[]){ "--json", "quota", "suggest", "a",
					      "--hit", "0.5", NULL }),
		0);
	j = json_loads(out, 0, NULL);
	ck_assert_msg(j, "%s", out);
	x = jnum(j, "kv_bytes");
	ck_assert_double_ge(merged_at(rep, 3, x), 0.5 - 1e-9);
	ck_assert_double_lt(merged_at(rep, 3, x * 0.97), 0.5);
	ck_assert_double_ge(jnum(j, "hit_at_quota"), 0.5);
	json_decref(j);
	/* out of reach: 1 in 6 requests is for a key never put */
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "quota", "suggest", "a",
						       "--hit", "0.95", NULL }),
			 3);

	/* the tenant's cost model: saved time from its hit bytes */
	hit_bytes = (double)sum_hit_bytes;
	ck_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(pc, "model"), "from")),
			 "memd");
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){
					     "tenant", "set", "a",
					     "--prefill-tokens-per-s", "5000",
					     "--bytes-per-token", "1K", NULL }),
			 0);
	json_decref(pc);
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "--json", "tenant",
						       "report", "a", NULL }),
			 0);
	pc = json_loads(out, 0, NULL);
	ck_assert_msg(pc, "%s", out);
	j = json_object_get(pc, "model");
	ck_assert_str_eq(json_string_value(json_object_get(j, "from")),
			 "tenant");
	ck_assert_int_eq((int)jnum(j, "prefill_tokens_per_s"), 5000);
	ck_assert_int_eq((int)jnum(j, "bytes_per_token"), 1024);
	ck_assert_double_eq_tol(jnum(pc, "saved_s"), hit_bytes / 1024 / 5000,
				1e-6 * hit_bytes / 1024 / 5000);
	/* bad input: a clear refusal, nothing changed */
	ck_assert_int_eq(
		poolctl_run(out, sizeof(out),
			    (const char *[]){ "tenant", "set", "a", NULL }),
		64);
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "tenant", "set", "a",
						       "--prefill-tokens-per-s",
						       "fast", NULL }),
			 65);
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "tenant", "set", "zz",
						       "--bytes-per-token",
						       "1K", NULL }),
			 1);
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "--json", "tenant",
						       "report", "a", NULL }),
			 0);
	ck_assert_msg(strstr(out, "\"prefill_tokens_per_s\": 5000"), "%s", out);
	json_decref(pc);
	for (int d = 0; d < 3; d++)
		json_decref(rep[d]);
	pool_kv_close(a);
	pool_close(pa);
}
END_TEST

/* ---- the client's cost model hint (docs/capacity.md) ----------------- */

/* poolctl --json tenant report NAME at addr: its "model" and saved_s. */
static json_t *report_json(const char *addr, const char *secret,
			   const char *tenant)
{
	static char out[1 << 17];
	json_t *j;

	ck_assert_int_eq(poolctl_at(addr, secret, out, sizeof(out),
				    (const char *[]){ "--json", "tenant",
						      "report", tenant, NULL }),
			 0);
	j = json_loads(out, 0, NULL);
	ck_assert_msg(j, "%s", out);
	return j;
}

/* j's "model" is (tps, bpt) from from, and saved_s is hit_bytes in it. */
static void model_is(const json_t *j, double tps, double bpt, const char *from,
		     double hit_bytes)
{
	const json_t *m = json_object_get(j, "model");
	double want = hit_bytes / bpt / tps;

	ck_assert_msg(json_is_object(m), "no model");
	ck_assert_str_eq(json_string_value(json_object_get(m, "from")), from);
	ck_assert_double_eq(jnum(m, "prefill_tokens_per_s"), tps);
	ck_assert_double_eq(jnum(m, "bytes_per_token"), bpt);
	ck_assert_double_eq_tol(jnum(j, "saved_s"), want, 1e-9 * want);
}

/* Gets every key once (all hits); the bytes served. */
static double get_all(struct pool_kv *kv, const struct pool_kv_key *keys, int n,
		      size_t len)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(get1(kv, &keys[i], len), (ssize_t)len);
	return (double)n * (double)len;
}

/* A pool_kv_open with this hint (and the environment) is refused. */
static void hint_refused(struct pool *p, unsigned tps, uint64_t bpt)
{
	struct pool_kv_opts o = { .prefill_tokens_per_s = tps,
				  .bytes_per_token = bpt };
	struct pool_kv *kv = (struct pool_kv *)&o;

	ck_assert_int_eq(pool_kv_open(p, &o, &kv), -EINVAL);
	ck_assert_ptr_null(kv);
}

/* KV_MODEL by hand on c: 0 or -errno, ERROR's text in text. */
static int kv_model_call(struct rpc *c, uint32_t tps, uint64_t bpt, char *text,
			 size_t cap)
{
	static struct wire_msg q, a;

	memset(&q, 0, sizeof(q));
	q.type = WIRE_KV_MODEL;
	q.u.kv_model.prefill_tokens_per_s = tps;
	q.u.kv_model.bytes_per_token = bpt;
	text[0] = '\0';
	return rpc_call(c, &q, &a, WIRE_KV_MODEL_OK, 5000, text, cap);
}

/*
 * A standalone memd: the report is in memd.conf's model until a client
 * hints its own (pool_kv_opts, else LIBPOOL_KV_*), then in the last
 * hint, for every byte served; /metrics agrees; bad hints are refused by
 * libpool (-EINVAL) and by memd (ERROR EINVAL, the session stays).
 */
START_TEST(model_hint_standalone)
{
	enum { NKEYS = 16 };
	const size_t len = MIB;
	const char *tps_env = "LIBPOOL_KV_PREFILL_TOKENS_PER_S",
		   *bpt_env = "LIBPOOL_KV_BYTES_PER_TOKEN";
	struct pool_kv_opts o = { .prefill_tokens_per_s = 1024,
				  .bytes_per_token = 4096 };
	struct pool_kv_key keys[NKEYS];
	struct pool_kv *kv, *kv2;
	struct wire_hello_ok hok;
	char text[WIRE_MSG_MAX], local[64];
	struct rpc *c;
	struct pool *p;
	double hit;
	json_t *j;

	start_standalone("kv_share = 50\nmetrics_listen = 127.0.0.1:0\n",
			 "128M");
	p = tu_pool_connect(&md);
	unsetenv(tps_env);
	unsetenv(bpt_env);

	/* libpool refuses bad hints: one field alone, over the bounds */
	hint_refused(p, 0, 4096);
	hint_refused(p, 1000, 0);
	hint_refused(p, POOL_KV_PREFILL_TOKENS_PER_S_MAX + 1, 4096);
	hint_refused(p, 1000, POOL_KV_BYTES_PER_TOKEN_MAX + 1);
	hint_refused(p, 1000, UINT64_MAX);
	setenv(tps_env, "fast", 1);
	setenv(bpt_env, "4096", 1);
	hint_refused(p, 0, 0);
	setenv(tps_env, "0", 1);
	hint_refused(p, 0, 0);
	setenv(tps_env, "-5", 1);
	hint_refused(p, 0, 0);
	setenv(tps_env, "1000", 1);
	setenv(bpt_env, "2G", 1);
	hint_refused(p, 0, 0);
	unsetenv(bpt_env); /* one alone */
	hint_refused(p, 0, 0);
	unsetenv(tps_env);

	/* no hint: memd.conf's model (10000 tokens/s, 128K a token) */
	kv = kv_open(p);
	for (int i = 0; i < NKEYS; i++) {
		make_key(&keys[i], 40, (uint64_t)i);
		ck_assert_int_eq(put1(kv, &keys[i], len), 0);
	}
	hit = get_all(kv, keys, NKEYS, len);
	j = report_json(md.addr, NULL, "default");
	model_is(j, 10000, 128 * 1024, "memd", hit);
	json_decref(j);
	pool_kv_close(kv);

	/* the client's hint, for every byte served so far: 8 s */
	kv = NULL;
	ck_assert_int_eq(pool_kv_open(p, &o, &kv), 0);
	hit += get_all(kv, keys, NKEYS, len);
	ck_assert_double_eq(hit, 32.0 * MIB);
	j = report_json(md.addr, NULL, "default");
	model_is(j, 1024, 4096, "client", hit);
	json_decref(j);
	ck_assert_int_eq(tu_metric(&md, "tidepool_memd_kv_tenant_saved_"
					"seconds{tenant_id=\"0\"}"),
			 8);

	/* the environment, for a program that sets no options; the last
	 * hint holds */
	setenv(tps_env, "2048", 1);
	setenv(bpt_env, "8192", 1);
	kv2 = kv_open(p);
	j = report_json(md.addr, NULL, "default");
	model_is(j, 2048, 8192, "client", hit);
	json_decref(j);
	ck_assert_int_eq(tu_metric(&md, "tidepool_memd_kv_tenant_saved_"
					"seconds{tenant_id=\"0\"}"),
			 2);
	pool_kv_close(kv2);
	/* options take precedence over the environment */
	kv2 = NULL;
	ck_assert_int_eq(pool_kv_open(p, &o, &kv2), 0);
	j = report_json(md.addr, NULL, "default");
	model_is(j, 1024, 4096, "client", hit);
	json_decref(j);
	pool_kv_close(kv2);
	unsetenv(tps_env);
	unsetenv(bpt_env);

	/* memd refuses a bad KV_MODEL with a clear error; the session
	 * stays, and the hint before it holds */
	ck_assert_int_eq(rpc_connect(md.addr, 5000, &c, local, sizeof(local)),
			 0);
	ck_assert_int_eq(
		rpc_hello(c, "test_kv", 1, 5000, &hok, text, sizeof(text)), 0);
	ck_assert_uint_eq(hok.proto, WIRE_PROTO_MAX);
	ck_assert_int_eq(kv_model_call(c, 0, 4096, text, sizeof(text)),
			 -EINVAL);
	ck_assert_msg(strstr(text, "prefill_tokens_per_s 0 is not 1 to"), "%s",
		      text);
	ck_assert_int_eq(
		kv_model_call(c, WIRE_KV_TPS_MAX + 1, 4096, text, sizeof(text)),
		-EINVAL);
	ck_assert_int_eq(kv_model_call(c, 1000, 0, text, sizeof(text)),
			 -EINVAL);
	ck_assert_msg(strstr(text, "bytes_per_token 0 is not 1 to"), "%s",
		      text);
	ck_assert_int_eq(
		kv_model_call(c, 1000, WIRE_KV_BPT_MAX + 1, text, sizeof(text)),
		-EINVAL);
	j = report_json(md.addr, NULL, "default");
	model_is(j, 1024, 4096, "client", hit);
	json_decref(j);
	ck_assert_int_eq(kv_model_call(c, 4096, 4096, text, sizeof(text)), 0);
	rpc_close(c);
	j = report_json(md.addr, NULL, "default");
	model_is(j, 4096, 4096, "client", hit);
	json_decref(j);

	pool_kv_close(kv);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/*
 * In a pool: each donor a key of the tenant lives on reports in the
 * client's hint; poolctl's merged report too, until the registry's
 * tenant model (tenant set) overrides it field by field. Donors keep
 * reporting the hint (they do not learn the tenant's model).
 */
START_TEST(model_hint_in_a_pool)
{
	enum { NKEYS = 48, LEN = 20000 };
	struct pool_kv_opts o = { .prefill_tokens_per_s = 4000,
				  .bytes_per_token = 2048 };
	const char *addrs[3] = { reg.addr, don[0].addr, don[1].addr };
	static struct pool_kv_key keys[NKEYS];
	static char out[1 << 17];
	struct pool *pa = connect_as("a", sec_a);
	struct pool_kv *a = NULL;
	double hit;
	json_t *j;
	int r, tries;

	ck_assert_int_eq(pool_kv_open(pa, &o, &a), 0);
	for (int k = 0; k < NKEYS; k++) {
		make_key(&keys[k], 41, (uint64_t)k);
		/* a new tenant may wait for its first KV allowance */
		for (tries = 0;
		     (r = put1(a, &keys[k], LEN)) == -ENOSPC && tries < 250;
		     tries++)
			sleep_ms(20);
		ck_assert_int_eq(r, 0);
	}
	hit = get_all(a, keys, NKEYS, LEN);

	j = report_json(reg.addr, cluster, "a");
	ck_assert_int_eq((int)jnum(j, "donors"), 3);
	model_is(j, 4000, 2048, "client", hit);
	json_decref(j);
	/* each donor's own report: the hint, for its part of the bytes */
	for (int d = 0; d < 3; d++) {
		json_t *t;

		ck_assert_int_eq(tu_admin(addrs[d], cluster,
					  "{\"cmd\":\"kv_report\"}", out,
					  sizeof(out)),
				 0);
		j = json_loads(out, 0, NULL);
		ck_assert_msg(j, "%s", out);
		t = json_array_get(json_object_get(j, "tenants"), 0);
		ck_assert_msg(t, "%s", out);
		model_is(t, 4000, 2048, "client",
			 jnum(json_object_get(t, "stats"), "hit_bytes"));
		json_decref(j);
	}

	/* the registry's tenant model wins, per field */
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "tenant", "set", "a",
						       "--prefill-tokens-per-s",
						       "5000", NULL }),
			 0);
	j = report_json(reg.addr, cluster, "a");
	model_is(j, 5000, 2048, "tenant", hit);
	json_decref(j);
	ck_assert_int_eq(poolctl_run(out, sizeof(out),
				     (const char *[]){ "tenant", "set", "a",
						       "--bytes-per-token",
						       "1K", NULL }),
			 0);
	j = report_json(reg.addr, cluster, "a");
	model_is(j, 5000, 1024, "tenant", hit);
	json_decref(j);
	ck_assert_int_eq(
		poolctl_run(out, sizeof(out),
			    (const char *[]){ "tenant", "report", "a", NULL }),
		0);
	ck_assert_msg(strstr(out, "the tenant's: poolctl tenant set"), "%s",
		      out);
	/* back to the hint */
	ck_assert_int_eq(
		poolctl_run(out, sizeof(out),
			    (const char *[]){ "tenant", "set", "a",
					      "--prefill-tokens-per-s", "0",
					      "--bytes-per-token", "0", NULL }),
		0);
	j = report_json(reg.addr, cluster, "a");
	model_is(j, 4000, 2048, "client", hit);
	json_decref(j);
	ck_assert_int_eq(
		poolctl_run(out, sizeof(out),
			    (const char *[]){ "tenant", "report", "a", NULL }),
		0);
	ck_assert_msg(strstr(out, "the client's hint"), "%s", out);
	pool_kv_close(a);
	pool_close(pa);
}
END_TEST

/*
 * ABI (libpool/kv.c, "ABI"): a program linked against libpool 0.1 passes
 * the 4-field struct pool_kv_opts to pool_kv_open@LIBPOOL_0.1, which must
 * not read past it; pool_kv_open@@LIBPOOL_0.2 reads the model hint that
 * follows. The built libpool.so is loaded next to the linked objects and
 * both versions are called with a 0.1 struct followed by bytes that, read
 * as a hint, are out of bounds.
 */
START_TEST(kv_open_abi_0_1)
{
	typedef int (*connect_fn)(const struct pool_opts *, struct pool **);
	typedef int (*open_fn)(struct pool *, const void *, struct pool_kv **);
	struct {
		unsigned f
			[4]; /* 0.1: nthreads, refresh_ms, lease_ms, replicas */
		unsigned char tail[32];
	} old;
	struct pool_opts po = { .timeout_ms = 5000 };
	const char *bdir = getenv("TP_BUILD_DIR");
	void (*kclose)(struct pool_kv *);
	void (*pclose)(struct pool *);
	open_fn open01, open02;
	struct pool_kv *kv = NULL;
	struct pool *p = NULL;
	char path[PATH_MAX];
	connect_fn conn;
	void *h;

	ck_assert_msg(bdir, "TP_BUILD_DIR is not set (run through ctest)");
	snprintf(path, sizeof(path), "%s/libpool/libpool.so.0", bdir);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen %s: %s", path, dlerror());
	conn = (connect_fn)dlsym(h, "pool_connect");
	open01 = (open_fn)dlvsym(h, "pool_kv_open", "LIBPOOL_0.1");
	open02 = (open_fn)dlvsym(h, "pool_kv_open", "LIBPOOL_0.2");
	kclose = (void (*)(struct pool_kv *))dlsym(h, "pool_kv_close");
	pclose = (void (*)(struct pool *))dlsym(h, "pool_close");
	ck_assert(conn && open01 && open02 && kclose && pclose);
	ck_assert_ptr_ne(open01, open02);
	ck_assert_ptr_eq(open02, (open_fn)dlsym(h, "pool_kv_open"));

	start_standalone("", "64M");
	unsetenv("LIBPOOL_KV_PREFILL_TOKENS_PER_S");
	unsetenv("LIBPOOL_KV_BYTES_PER_TOKEN");
	po.addr = md.addr;
	ck_assert_int_eq(conn(&po, &p), 0);
	memset(&old, 0xff, sizeof(old));
	memset(old.f, 0, sizeof(old.f));
	ck_assert_int_eq(open02(p, &old, &kv), -EINVAL);
	ck_assert_ptr_null(kv);
	ck_assert_int_eq(open01(p, &old, &kv), 0);
	ck_assert_ptr_nonnull(kv);
	kclose(kv);
	ck_assert_int_eq(open01(p, NULL, &kv), 0);
	kclose(kv);
	pclose(p);
	dlclose(h);
}
END_TEST

static Suite *kv_suite(void)
{
	Suite *s = suite_create("kv");
	TCase *tc = tcase_create("standalone");
	TCase *tp = tcase_create("pool");
	TCase *ty = tcase_create("pool_yield"); /* CK_RUN_CASE=pool_yield */
	TCase *tw = tcase_create("pool_slow");	/* reports 30 s apart */

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, prefix_keys);
	tcase_add_test(tc, round_trips);
	tcase_add_loop_test(tc, get_to_delivers_through_a_sink, 0, 2);
	tcase_add_test(tc, exists_delete_pin_async);
	tcase_add_test(tc, bad_arguments_and_closed_handle);
	tcase_add_test(tc, clear_empties_the_store);
	tcase_add_test(tc, stress_processes_and_threads);
	tcase_add_test(tc, warm_restart);
	tcase_add_test(tc, model_hint_standalone);
	tcase_add_test(tc, kv_open_abi_0_1);
	suite_add_tcase(s, tc);
	tcase_set_timeout(tp, 300);
	tcase_add_checked_fixture(tp, cluster_setup, cluster_teardown);
	tcase_add_test(tp, tenants_never_share);
	tcase_add_test(tp, clear_empties_only_the_tenant);
	tcase_add_test(tp, eviction_stays_within_the_tenant);
	tcase_add_test(tp, kv_stays_within_the_quota);
	tcase_add_test(tp, donor_killed_mid_put_and_get);
	tcase_add_test(tp, donor_restarts_do_not_grow_kv_links);
	tcase_add_test(tp, replica_is_never_stale);
	tcase_add_test(tp, put_leaves_a_pinned_replica);
	tcase_add_test(tp, replica_serves_when_home_killed);
	tcase_add_test(tp, undrained_donor_serves_nothing_stale);
	tcase_add_test(tp, stopped_donor_serves_nothing_stale);
	tcase_add_test(tp, slow_done_ages_no_other_donors_reads);
	tcase_add_test(tp, stale_list_reads_nothing_deleted);
	tcase_add_test(tp, registry_restart_keeps_kv);
	tcase_add_test(tp, restarted_donor_spill_serves_nothing_stale);
	tcase_add_test(tp, homes_moved_by_two_joins_serve_nothing_deleted);
	tcase_add_test(tp, capacity_report_merges_donors);
	tcase_add_test(tp, model_hint_in_a_pool);
	suite_add_tcase(s, tp);
	tcase_set_timeout(ty, 300);
	tcase_add_checked_fixture(ty, cluster_setup, cluster_teardown);
	tcase_add_test(ty, kv_yields_to_a_place);
	suite_add_tcase(s, ty);
	tcase_set_timeout(tw, 300);
	tcase_add_checked_fixture(tw, slow_setup, slow_teardown);
	tcase_add_test(tw, change_told_before_clients_read_nothing_deleted);
	suite_add_tcase(s, tw);
	return s;
}

int main(void)
{
	if (!tu_memd_path())
		tu_skip("TP_MEMD is not set");
	return tu_run_suite(kv_suite());
}
