// SPDX-License-Identifier: MIT
/*
 * tests/test_gpu.c - GPU prefetch (tidepool/pool_gpu.h) against real memd
 * processes on loopback, through the host backend: the same pipeline as on
 * a GPU (staging ring, RMA, copies on a copy stream, events), with host
 * memory as "device" memory. Bytes come back exactly at every size and
 * offset, many transfers queue, the fabric and the copies overlap
 * (counted, not timed), stream ordering holds, cancellation and a dead or
 * frozen memd give errors rather than hangs, bad arguments are refused.
 * The CUDA backend is checked for its no-device errors here, and runs a
 * round trip when a device is present.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "libpool/gpu.h"
#include "libpool/internal.h"
#include "numa/place.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"
#include "tidepool/pool_gpu.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define SLAB (16 * MiB) /* testutil's memd: 256M donated, 16M slabs */
#define BIG (64 * MiB)
#define REGION (BIG + 2 * MiB + 3) /* 4 whole slabs + a packed tail */

static struct tu_memd md;
static char topo_dir[PATH_MAX]; /* tests/data, "" if absent */

static struct pool_gpu *open_host(struct pool *p, size_t staging,
				  unsigned count, int timeout_ms)
{
	struct pool_gpu_opts o;
	struct pool_gpu *g = NULL;
	int r;

	pool_gpu_opts_init(&o);
	o.backend = POOL_GPU_HOST;
	o.staging_bytes = staging;
	o.staging_count = count;
	o.timeout_ms = timeout_ms;
	r = pool_gpu_open(p, &o, &g);
	ck_assert_msg(r == 0, "pool_gpu_open host: %s", pool_strerror(r));
	return g;
}

static void *dev_alloc(struct pool_gpu *g, size_t len)
{
	void *d = NULL;

	ck_assert_int_eq(pool_gpu_dev_alloc(g, len, &d), 0);
	ck_assert_ptr_nonnull(d);
	return d;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* Waits for x with a hang guard: every wait must end. */
static int wait_guarded(struct pool_gpu_xfer *x, int guard_ms)
{
	for (int t = 0; t < guard_ms; t += 100) {
		int r = pool_gpu_xfer_wait(x, 100);

		if (r != -ETIMEDOUT)
			return r;
	}
	ck_abort_msg("transfer still running after %d ms: a hang", guard_ms);
	return 0;
}

/* Store [off, off+len) from a patterned device buffer, read it back with
 * pool_read; fetch a patterned range into a device buffer with guard
 * bytes on both sides. */
/* Starts md, connects, allocates a region of size bytes (in *r) and
 * opens a host engine on it (open_host()). */
static struct pool_gpu *gpu_up(size_t size, struct pool **p,
			       struct pool_region **r, size_t staging,
			       unsigned count, int timeout_ms)
{
	tu_memd_start_ok(&md, NULL);
	*p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_alloc(*p, size, r), 0);
	return open_host(*p, staging, count, timeout_ms);
}

/* Closes what gpu_up() opened and stops md. */
static void gpu_down(struct pool *p, struct pool_region *r, struct pool_gpu *g)
{
	pool_gpu_close(g);
	pool_free(p, r);
	pool_close(p);
	tu_memd_stop_ok(&md);
}

/* dev's first n bytes, holding the pattern of seed, stored at r's offset
 * 0, dev zeroed and fetched back: the same bytes (each transfer waited
 * for up to timeout_ms). */
static void dev_round_trip(struct pool_gpu *g, struct pool_region *r,
			   uint8_t *dev, size_t n, uint64_t seed,
			   int timeout_ms)
{
	struct pool_gpu_xfer *x;

	ck_assert_int_eq(pool_gpu_store(g, r, 0, dev, n, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, timeout_ms), 0);
	memset(dev, 0, n);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, n, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, timeout_ms), 0);
	ck_assert_int_eq(tu_pattern_check(dev, n, seed, 0), -1);
}

static void store_then_fetch(struct pool *p, struct pool_gpu *g,
			     struct pool_region *r, uint64_t off, size_t len,
			     uint64_t seed)
{
	uint8_t *dev = dev_alloc(g, len + 2), *host = malloc(len);
	struct pool_gpu_xfer *x;
	ssize_t bad;
	int ret;

	ck_assert_ptr_nonnull(host);
	tu_pattern_fill(dev, len, seed, off);
	ret = pool_gpu_store(g, r, off, dev, len, NULL, &x);
	ck_assert_msg(ret == 0, "store: %s", pool_strerror(ret));
	ret = wait_guarded(x, 60000);
	ck_assert_msg(ret == 0, "store off=%lu len=%zu: %s", (unsigned long)off,
		      len, pool_strerror(ret));
	memset(host, 0xee, len);
	ck_assert_int_eq(pool_read(p, r, off, host, len), 0);
	bad = tu_pattern_check(host, len, seed, off);
	ck_assert_msg(bad < 0, "store: wrong byte at %ld of off=%lu len=%zu",
		      (long)bad, (unsigned long)off, len);

	tu_pattern_fill(host, len, seed + 1, off);
	ck_assert_int_eq(pool_write(p, r, off, host, len), 0);
	memset(dev, 0x5a, len + 2);
	ret = pool_gpu_fetch(g, r, off, dev + 1, len, NULL, &x);
	ck_assert_msg(ret == 0, "fetch: %s", pool_strerror(ret));
	ret = wait_guarded(x, 60000);
	ck_assert_msg(ret == 0, "fetch off=%lu len=%zu: %s", (unsigned long)off,
		      len, pool_strerror(ret));
	bad = tu_pattern_check(dev + 1, len, seed + 1, off);
	ck_assert_msg(bad < 0, "fetch: wrong byte at %ld of off=%lu len=%zu",
		      (long)bad, (unsigned long)off, len);
	ck_assert_msg(dev[0] == 0x5a && dev[len + 1] == 0x5a,
		      "fetch wrote outside [dev_ptr, dev_ptr+len)");
	pool_gpu_dev_free(g, dev);
	free(host);
}

START_TEST(bytes_exact_at_every_size)
{
	static const size_t sizes[] = { 1, 4 * KiB, MiB + 3 };
	static const struct {
		size_t staging;
		unsigned count;
	} rings[] = { { 0, 0 }, { MiB, 3 }, { 4 * KiB, 2 } };
	struct pool *p;
	struct pool_region *r;

	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_alloc(p, REGION, &r), 0);
	for (size_t k = 0; k < sizeof(rings) / sizeof(rings[0]); k++) {
		struct pool_gpu *g =
			open_host(p, rings[k].staging, rings[k].count, 0);

		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			size_t n = sizes[i];
			uint64_t seed = 100 * k + 10 * i;

			store_then_fetch(p, g, r, 0, n, seed);
			store_then_fetch(p, g, r, 7, n, seed + 2);
			/* straddles the first slab boundary */
			store_then_fetch(p, g, r, SLAB - 5, n, seed + 4);
			store_then_fetch(p, g, r, REGION - n, n, seed + 6);
		}
		/* 64 MiB over five slabs at an odd offset, with the default
		 * ring (the others would only take longer). */
		if (k == 0)
			store_then_fetch(p, g, r, MiB + 7, BIG, 1000 + k);
		pool_gpu_close(g);
	}
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

START_TEST(zero_length)
{
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x;
	struct pool_gpu_stats st;
	uint8_t b[1];
	void *ev = NULL;

	g = gpu_up(100, &p, &r, 0, 0, 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 100, NULL, 0, NULL, &x), 0);
	ck_assert_int_eq(pool_gpu_xfer_event(x, -1, &ev), 0);
	ck_assert_ptr_nonnull(ev);
	ck_assert_int_eq(wait_guarded(x, 10000), 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 0, b, 0, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, 10000), 0);
	pool_gpu_get_stats(g, &st);
	ck_assert_uint_eq(st.xfers, 2);
	ck_assert_uint_eq(st.errors, 0);
	gpu_down(p, r, g);
}
END_TEST

/* Transfer i of the queue: its own range, size and direction. */
#define NQ 48
static size_t q_len(int i)
{
	return (size_t)(i % 7) * 37 * KiB + (size_t)i * 3 + 1;
}

START_TEST(many_queued_transfers)
{
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x[NQ];
	uint8_t *dev[NQ];
	uint64_t off[NQ], at = 0;
	struct pool_gpu_stats st;

	g = gpu_up(16 * MiB, &p, &r, 64 * KiB, 3, 0);
	/* Odd ones are fetched: put their bytes in the pool first. */
	for (int i = 0; i < NQ; i++) {
		size_t n = q_len(i);

		off[i] = at;
		at += n + 13;
		dev[i] = dev_alloc(g, n);
		if (i % 2) {
			uint8_t *b = malloc(n);

			tu_pattern_fill(b, n, 500 + i, off[i]);
			ck_assert_int_eq(pool_write(p, r, off[i], b, n), 0);
			memset(dev[i], 0, n);
			free(b);
		} else {
			tu_pattern_fill(dev[i], n, 500 + i, off[i]);
		}
	}
	for (int i = 0; i < NQ; i++) {
		int ret = i % 2 ? pool_gpu_fetch(g, r, off[i], dev[i], q_len(i),
						 NULL, &x[i])
				: pool_gpu_store(g, r, off[i], dev[i], q_len(i),
						 NULL, &x[i]);

		ck_assert_int_eq(ret, 0);
	}
	for (int i = NQ - 1; i >= 0; i--)
		ck_assert_int_eq(wait_guarded(x[i], 60000), 0);
	for (int i = 0; i < NQ; i++) {
		size_t n = q_len(i);
		uint8_t *b = malloc(n);

		if (i % 2) {
			ck_assert_int_eq(
				tu_pattern_check(dev[i], n, 500 + i, off[i]),
				-1);
		} else {
			ck_assert_int_eq(pool_read(p, r, off[i], b, n), 0);
			ck_assert_int_eq(
				tu_pattern_check(b, n, 500 + i, off[i]), -1);
		}
		free(b);
		pool_gpu_dev_free(g, dev[i]);
	}
	pool_gpu_get_stats(g, &st);
	ck_assert_uint_eq(st.xfers, NQ);
	ck_assert_uint_eq(st.errors, 0);
	gpu_down(p, r, g);
}
END_TEST

struct thr {
	struct pool *p;
	struct pool_gpu *g;
	struct pool_region *r;
	int id;
	int errors;
};

/* Each thread: its own 1 MiB range, 8 rounds of store + fetch. */
static void *thread_main(void *arg)
{
	struct thr *t = arg;
	uint64_t base = (uint64_t)t->id * MiB;
	size_t n = MiB - (size_t)t->id * 4099;
	uint8_t *d = NULL;

	if (pool_gpu_dev_alloc(t->g, n, (void **)&d)) {
		t->errors++;
		return NULL;
	}
	for (int round = 0; round < 8; round++) {
		uint64_t seed = (uint64_t)t->id << 32 | (uint64_t)round;
		struct pool_gpu_xfer *x;

		tu_pattern_fill(d, n, seed, base);
		if (pool_gpu_store(t->g, t->r, base, d, n, NULL, &x) ||
		    pool_gpu_xfer_wait(x, -1))
			t->errors++;
		memset(d, 0, n);
		if (pool_gpu_fetch(t->g, t->r, base, d, n, NULL, &x) ||
		    pool_gpu_xfer_wait(x, -1) ||
		    tu_pattern_check(d, n, seed, base) >= 0)
			t->errors++;
	}
	pool_gpu_dev_free(t->g, d);
	return NULL;
}

START_TEST(four_threads_one_engine)
{
	pthread_t th[4];
	struct thr t[4];
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;

	g = gpu_up(4 * MiB, &p, &r, 256 * KiB, 4, 0);
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){ .p = p, .g = g, .r = r, .id = i };
		ck_assert_int_eq(
			pthread_create(&th[i], NULL, thread_main, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert_msg(t[i].errors == 0, "thread %d: %d errors", i,
			      t[i].errors);
	}
	gpu_down(p, r, g);
}
END_TEST

/*
 * The point of the ring: while one chunk is being copied another is on
 * the fabric. Asserted from the engine's own accounting (a stage seen
 * ending while another chunk was confirmed still in the other stage),
 * never from timing.
 */
START_TEST(fabric_and_copies_overlap)
{
	const size_t n = 32 * MiB;
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_stats st;
	uint8_t *dev;

	g = gpu_up(n, &p, &r, MiB, 4, 0);
	dev = dev_alloc(g, n);
	tu_pattern_fill(dev, n, 77, 0);
	dev_round_trip(g, r, dev, n, 77, 60000);
	pool_gpu_get_stats(g, &st);
	ck_assert_uint_eq(st.chunks, 2 * n / MiB);
	ck_assert_uint_gt(st.fabric_max, 0);
	ck_assert_uint_gt(st.copy_max, 0);
	ck_assert_uint_le(st.fabric_max, 4);
	ck_assert_uint_le(st.copy_max, 4);
	ck_assert_msg(st.overlapped > 0,
		      "no stage ended while the other was busy: fabric_max=%u "
		      "copy_max=%u chunks=%lu",
		      st.fabric_max, st.copy_max, (unsigned long)st.chunks);
	ck_assert_uint_eq(st.bytes_fetched, n);
	ck_assert_uint_eq(st.bytes_stored, n);
	pool_gpu_dev_free(g, dev);
	gpu_down(p, r, g);
}
END_TEST

/* Stream work the tests enqueue: optionally a pause (to give a broken
 * ordering the chance to show), then fill or check a buffer. */
struct work {
	uint8_t *buf;
	size_t len;
	uint64_t seed, off;
	int fill; /* 1: pattern, 2: memset(0xaa), 0: check */
	long pause_ms;
	int bad; /* check: -1 all good, else first wrong byte */
};

static void work_fn(void *arg)
{
	struct work *w = arg;

	if (w->pause_ms)
		sleep_ms(w->pause_ms);
	if (w->fill == 1)
		tu_pattern_fill(w->buf, w->len, w->seed, w->off);
	else if (w->fill == 2)
		memset(w->buf, 0xaa, w->len);
	else
		w->bad = (int)tu_pattern_check(w->buf, w->len, w->seed, w->off);
}

START_TEST(stream_ordering)
{
	const size_t n = 3 * MiB + 5;
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x;
	void *s1, *s2, *ev;
	uint8_t *dev, *host = malloc(n);
	struct work before = { 0 }, after = { 0 };

	g = gpu_up(n, &p, &r, MiB, 2, 0);
	dev = dev_alloc(g, n);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s1), 0);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s2), 0);
	tu_pattern_fill(host, n, 9, 0);
	ck_assert_int_eq(pool_write(p, r, 0, host, n), 0);

	/* A fetch starts after the work enqueued on its stream before it:
	 * were it to copy first, the 0xaa fill would win. */
	before = (struct work){
		.buf = dev, .len = n, .fill = 2, .pause_ms = 100
	};
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s1, work_fn, &before), 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, n, s1, &x), 0);
	/* Work that waits on its event sees every byte. */
	ck_assert_int_eq(pool_gpu_xfer_event(x, -1, &ev), 0);
	ck_assert_int_eq(pool_gpu_stream_wait_event(g, s2, ev), 0);
	after = (struct work){ .buf = dev, .len = n, .seed = 9, .bad = -2 };
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s2, work_fn, &after), 0);
	ck_assert_int_eq(pool_gpu_stream_sync(g, s2, 60000), 0);
	ck_assert_msg(after.bad == -1,
		      "stream work after the event saw byte "
		      "%d wrong",
		      after.bad);
	ck_assert_int_eq(wait_guarded(x, 60000), 0);
	ck_assert_int_eq(tu_pattern_check(dev, n, 9, 0), -1);

	/* A store copies what the work before it on its stream wrote. */
	before = (struct work){
		.buf = dev, .len = n, .fill = 1, .seed = 10, .pause_ms = 100
	};
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s1, work_fn, &before), 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 0, dev, n, s1, &x), 0);
	/* Its event: the device bytes are copied out, dev may be reused. */
	ck_assert_int_eq(pool_gpu_xfer_event(x, -1, &ev), 0);
	ck_assert_int_eq(pool_gpu_stream_wait_event(g, s2, ev), 0);
	after = (struct work){ .buf = dev, .len = n, .fill = 2 };
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s2, work_fn, &after), 0);
	ck_assert_int_eq(wait_guarded(x, 60000), 0);
	ck_assert_int_eq(pool_gpu_stream_sync(g, s2, 60000), 0);
	memset(host, 0, n);
	ck_assert_int_eq(pool_read(p, r, 0, host, n), 0);
	ck_assert_int_eq(tu_pattern_check(host, n, 10, 0), -1);

	/* The memory helpers and the NULL (default) stream. */
	tu_pattern_fill(host, n, 11, 0);
	ck_assert_int_eq(pool_gpu_memcpy_async(g, dev, host, n, NULL), 0);
	ck_assert_int_eq(pool_gpu_stream_sync(g, NULL, 60000), 0);
	ck_assert_int_eq(tu_pattern_check(dev, n, 11, 0), -1);

	pool_gpu_stream_destroy(g, s1);
	pool_gpu_stream_destroy(g, s2);
	pool_gpu_dev_free(g, dev);
	free(host);
	gpu_down(p, r, g);
}
END_TEST

/* Holds a stream until opened: what a long kernel would do. */
struct gate {
	pthread_mutex_t m;
	pthread_cond_t c;
	bool open;
};

static void gate_fn(void *arg)
{
	struct gate *gt = arg;

	pthread_mutex_lock(&gt->m);
	while (!gt->open)
		pthread_cond_wait(&gt->c, &gt->m);
	pthread_mutex_unlock(&gt->m);
}

static void gate_init(struct gate *gt)
{
	pthread_mutex_init(&gt->m, NULL);
	pthread_cond_init(&gt->c, NULL);
	gt->open = false;
}

static void gate_open(struct gate *gt)
{
	pthread_mutex_lock(&gt->m);
	gt->open = true;
	pthread_cond_broadcast(&gt->c);
	pthread_mutex_unlock(&gt->m);
}

START_TEST(cancel_mid_transfer)
{
	const size_t n = 16 * MiB; /* 64 chunks of 256 KiB */
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x, *xs, *x2, *x3;
	struct pool_gpu_stats st;
	struct gate gt;
	void *s, *ev = (void *)1;
	uint8_t *dev, *small;

	g = gpu_up(n, &p, &r, 256 * KiB, 2, 0);
	dev = dev_alloc(g, n);
	small = dev_alloc(g, MiB);
	tu_pattern_fill(small, MiB, 3, 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 0, small, MiB, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, 60000), 0);

	/* Its stream is held, so the fetch fills the ring from the fabric
	 * and then cannot copy: mid-transfer, deterministically. */
	gate_init(&gt);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s), 0);
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s, gate_fn, &gt), 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, n, s, &x), 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 0, dev, n, s, &xs), 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, small, MiB, NULL, &x2), 0);
	sleep_ms(50);
	ck_assert_int_eq(pool_gpu_xfer_test(x), 0);
	ck_assert_int_eq(pool_gpu_xfer_wait(x, 0), -ETIMEDOUT);
	ck_assert_int_eq(pool_gpu_xfer_event(x, 0, &ev), -ETIMEDOUT);
	ck_assert_ptr_null(ev);
	/* Cancelled while its stream is still held: no wait on it. */
	ck_assert_int_eq(pool_gpu_xfer_cancel(x), 0);
	ck_assert_int_eq(pool_gpu_xfer_cancel(x), -EALREADY);
	ck_assert_int_eq(pool_gpu_xfer_event(x, -1, &ev), -ECANCELED);
	ck_assert_int_eq(wait_guarded(x, 30000), -ECANCELED);
	ck_assert_int_eq(pool_gpu_xfer_cancel(xs), 0); /* queued, not started */
	ck_assert_int_eq(wait_guarded(xs, 30000), -ECANCELED);
	/* The transfer queued behind them goes on. */
	ck_assert_int_eq(wait_guarded(x2, 30000), 0);
	ck_assert_int_eq(tu_pattern_check(small, MiB, 3, 0), -1);
	gate_open(&gt);

	/* Too late to cancel a finished transfer. */
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, small, MiB, NULL, &x3), 0);
	for (int i = 0; i < 3000 && !pool_gpu_xfer_test(x3); i++)
		sleep_ms(10);
	ck_assert_int_eq(pool_gpu_xfer_cancel(x3), -EALREADY);
	ck_assert_int_eq(wait_guarded(x3, 1000), 0);

	/* The engine works on: a whole round trip. */
	tu_pattern_fill(dev, n, 4, 0);
	dev_round_trip(g, r, dev, n, 4, 60000);
	pool_gpu_get_stats(g, &st);
	ck_assert_uint_eq(st.cancelled, 2);
	ck_assert_uint_eq(st.errors, 0);
	pool_gpu_stream_destroy(g, s);
	pool_gpu_dev_free(g, dev);
	pool_gpu_dev_free(g, small);
	gpu_down(p, r, g);
}
END_TEST

static bool is_transport_error(int r)
{
	return r == -ENOTCONN || r == -EIO || r == -ECONNRESET || r == -ETIME ||
	       r == -ECONNREFUSED || r == -ESHUTDOWN;
}

START_TEST(memd_killed_mid_transfer)
{
	const size_t n = 16 * MiB; /* 64 chunks of 256 KiB */
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x, *y;
	struct gate gt;
	void *s;
	uint8_t *dev;
	int ret;

	tu_memd_start_ok(&md, "lease_ttl = 2s\nlease_grace = 200ms");
	p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_alloc(p, n, &r), 0);
	g = open_host(p, 256 * KiB, 4, 0);
	dev = dev_alloc(g, n);
	gate_init(&gt);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s), 0);
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s, gate_fn, &gt), 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, n, s, &x), 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 0, dev, n, NULL, &y), 0);
	sleep_ms(100); /* the ring fills; 60 of 64 chunks still to come */
	kill(md.pid, SIGKILL);
	waitpid(md.pid, NULL, 0);
	md.pid = 0;
	gate_open(&gt);
	/* Errors, not hangs: within about one TTL; 60 s is a hang guard. */
	ret = wait_guarded(x, 60000);
	ck_assert_msg(is_transport_error(ret), "fetch after memd death: %d %s",
		      ret, pool_strerror(ret));
	ret = wait_guarded(y, 60000);
	ck_assert_msg(is_transport_error(ret), "store after memd death: %d %s",
		      ret, pool_strerror(ret));
	/* Once the session is lost, new transfers fail fast. */
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, MiB, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, 10000), -ENOTCONN);
	pool_gpu_stream_destroy(g, s);
	pool_gpu_dev_free(g, dev);
	pool_gpu_close(g);
	pool_close(p);
	tu_memd_stop(&md, SIGKILL);
}
END_TEST

/*
 * A frozen memd (SIGSTOP) completes nothing: stages time out, the
 * transfer fails with -ETIME after the engine timeout, the next one
 * fails as fast, and once memd runs again the stuck stages end and the
 * engine works as before.
 */
START_TEST(frozen_memd_times_out_then_recovers)
{
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x;
	struct pool_gpu_stats st;
	uint8_t *dev;
	int ret, st_wait;

	tu_memd_start_ok(&md,
			 NULL); /* TTL 10 s: the session outlives the freeze */
	/* Over the fabric: a same-host session (shm = auto) reads the
	 * slab's memfd itself, which a frozen memd does not stop. */
	setenv("LIBPOOL_SHM", "off", 1);
	p = tu_pool_connect(&md);
	unsetenv("LIBPOOL_SHM");
	ck_assert_int_eq(pool_alloc(p, 8 * MiB, &r), 0);
	g = open_host(p, MiB, 2, 300);
	dev = dev_alloc(g, 8 * MiB);
	/* A round trip first: the fabric connects on first use, and posting
	 * to a frozen peer that is not yet connected blocks (for up to the
	 * session timeout) instead. */
	tu_pattern_fill(dev, 8 * MiB, 12, 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 0, dev, 8 * MiB, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, 30000), 0);
	kill(md.pid, SIGSTOP);
	/* Stopped for good, every thread of it: a busy memd can otherwise
	 * serve a few more reads before the stop takes effect. */
	ck_assert_int_eq(waitpid(md.pid, &st_wait, WUNTRACED), md.pid);
	ck_assert(WIFSTOPPED(st_wait));
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, 8 * MiB, NULL, &x), 0);
	ret = wait_guarded(x, 30000);
	ck_assert_int_eq(ret, -ETIME);
	pool_gpu_get_stats(g, &st);
	ck_assert_uint_gt(st.abandoned, 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, 8 * MiB, NULL, &x), 0);
	ck_assert_int_eq(wait_guarded(x, 30000), -ETIME);
	kill(md.pid, SIGCONT);
	for (int i = 0; i < 3000; i++) {
		pool_gpu_get_stats(g, &st);
		if (!st.abandoned)
			break;
		sleep_ms(10);
	}
	ck_assert_uint_eq(st.abandoned, 0);
	dev_round_trip(g, r, dev, 8 * MiB, 12, 30000);
	pool_gpu_dev_free(g, dev);
	gpu_down(p, r, g);
}
END_TEST

static void *open_later(void *arg)
{
	sleep_ms(200);
	gate_open(arg);
	return NULL;
}

START_TEST(close_with_transfers_in_flight)
{
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x[6];
	struct gate gt;
	pthread_t th;
	void *s;
	/* With the host backend any host memory serves as device memory. */
	uint8_t *dev = malloc(16 * MiB);

	g = gpu_up(16 * MiB, &p, &r, MiB, 3, 0);
	gate_init(&gt);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s), 0);
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s, gate_fn, &gt), 0);
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(i % 2 ? pool_gpu_fetch(g, r, 0, dev, 16 * MiB,
							i == 3 ? s : NULL,
							&x[i])
				       : pool_gpu_store(g, r, 0, dev, 16 * MiB,
							NULL, &x[i]),
				 0);
	/* Nothing waited for: close cancels and settles them all. (The host
	 * backend's close also drains its streams, hence the gate opening
	 * from another thread.) */
	pool_gpu_stream_destroy(g, s); /* returns at once, as CUDA's */
	ck_assert_int_eq(pthread_create(&th, NULL, open_later, &gt), 0);
	pool_gpu_close(g);
	pthread_join(th, NULL);
	free(dev);
	pool_free(p, r);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

START_TEST(bad_arguments)
{
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g, *g2 = (void *)1;
	struct pool_gpu_xfer *x = (void *)1;
	struct pool_gpu_opts o;
	struct pool_gpu_stats st;
	uint8_t b[16];
	void *v = (void *)1;

	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_alloc(p, 100, &r), 0);

	pool_gpu_opts_init(&o);
	ck_assert_int_eq(o.numa_node, -1);
	ck_assert_int_eq(o.backend, POOL_GPU_AUTO);
	o.backend = POOL_GPU_HOST;
	ck_assert_int_eq(pool_gpu_open(NULL, &o, &g2), -EINVAL);
	ck_assert_ptr_null(g2);
	ck_assert_int_eq(pool_gpu_open(p, &o, NULL), -EINVAL);
	o.staging_count = 1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.staging_count = POOL_GPU_COUNT_MAX + 1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.staging_count = 0;
	o.staging_bytes = POOL_GPU_STAGING_MIN - 1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.staging_bytes = (size_t)POOL_GPU_STAGING_MAX + 1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.staging_bytes = 0;
	o.numa_node = -3; /* -2 is POOL_GPU_NUMA_OFF */
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.numa_node = -1;
	memset(o.pci_bus_id, '0', sizeof(o.pci_bus_id)); /* unterminated */
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	snprintf(o.pci_bus_id, sizeof(o.pci_bus_id), "0000:3b:00");
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.pci_bus_id[0] = '\0';
	o.timeout_ms = -1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.timeout_ms = 0;
	o.device = -1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	o.device = 1; /* the host backend has device 0 only */
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -ENODEV);
	o.device = 0;
	o.backend = (enum pool_gpu_backend)7;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g2), -EINVAL);
	ck_assert_int_eq(pool_gpu_probe((enum pool_gpu_backend)7), -EINVAL);
	ck_assert_int_eq(pool_gpu_probe(POOL_GPU_HOST), 1);
	ck_assert_ptr_null(g2);

	o.backend = POOL_GPU_HOST;
	o.numa_node = POOL_GPU_NUMA_OFF; /* placement: numa_* tests */
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), 0);
	ck_assert_int_eq(pool_gpu_fetch(NULL, r, 0, b, 1, NULL, &x), -EINVAL);
	ck_assert_ptr_null(x);
	ck_assert_int_eq(pool_gpu_fetch(g, NULL, 0, b, 1, NULL, &x), -EINVAL);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, NULL, 1, NULL, &x), -EINVAL);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, b, 1, NULL, NULL), -EINVAL);
	ck_assert_int_eq(
		pool_gpu_fetch(g, r, 0, (void *)(UINTPTR_MAX - 3), 8, NULL, &x),
		-EINVAL);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 90, b, 11, NULL, &x), -ERANGE);
	ck_assert_int_eq(pool_gpu_store(g, r, 101, b, 0, NULL, &x), -ERANGE);
	ck_assert_int_eq(pool_gpu_store(g, r, UINT64_MAX, b, 2, NULL, &x),
			 -ERANGE);
	ck_assert_ptr_null(x);
	ck_assert_int_eq(pool_gpu_xfer_wait(NULL, 0), -EINVAL);
	ck_assert_int_eq(pool_gpu_xfer_test(NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_xfer_cancel(NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_xfer_event(NULL, 0, &v), -EINVAL);
	ck_assert_int_eq(pool_gpu_dev_alloc(g, 0, &v), -EINVAL);
	ck_assert_ptr_null(v);
	ck_assert_int_eq(pool_gpu_dev_alloc(NULL, 1, &v), -EINVAL);
	ck_assert_int_eq(pool_gpu_pinned_alloc(g, 0, &v), -EINVAL);
	ck_assert_int_eq(pool_gpu_stream_create(g, NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_stream_wait_event(g, NULL, NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, NULL, NULL, NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_memcpy_async(g, NULL, b, 1, NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_memcpy_async(g, NULL, NULL, 0, NULL), 0);
	ck_assert_int_eq(pool_gpu_get_stats(g, NULL), -EINVAL);
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_int_eq(st.backend, POOL_GPU_HOST);
	ck_assert_int_eq(st.numa_node, -1);
	ck_assert_int_eq(st.numa_applied, 0);
	ck_assert_str_eq(st.numa_cpus, "");
	ck_assert_int_eq(st.direct, 0);
	ck_assert_uint_eq(st.staging_bytes, 4 * MiB);
	ck_assert_uint_eq(st.staging_count, 4);
	ck_assert_uint_eq(st.xfers, 0);
	pool_gpu_close(g);
	pool_gpu_close(NULL);
	pool_gpu_opts_init(NULL);
	pool_free(p, r);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* pool_gpu_probe(POOL_GPU_CUDA) in a new process with LIBPOOL_CUDART set
 * to lib; returns the errno it reported (0 for devices found). */
static int probe_in_child(const char *lib)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		setenv("LIBPOOL_CUDART", lib, 1);
		/* what the CUDA runtime keeps at exit is not ours to judge */
		setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
		execl("/proc/self/exe", "test_gpu", "--probe-cuda",
		      (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/*
 * The CUDA backend on a host without a usable device: clear errors, and
 * AUTO refuses rather than falling back to the host backend.
 */
START_TEST(cuda_without_device)
{
	const char *rt = "/usr/local/cuda/lib64/libcudart.so.13";
	struct pool *p;
	struct pool_gpu *g = (void *)1;
	struct pool_gpu_opts o;
	int probe = pool_gpu_probe(POOL_GPU_CUDA);

	if (probe > 0) {
		printf("SKIP cuda_without_device: %d CUDA device(s) here\n",
		       probe);
		return;
	}
	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	ck_assert_msg(probe == -ENODEV || probe == -ENOENT ||
			      probe == -EOPNOTSUPP,
		      "probe CUDA: %d %s", probe, pool_strerror(probe));
	pool_gpu_opts_init(&o);
	o.backend = POOL_GPU_CUDA;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), probe);
	ck_assert_ptr_null(g);
	o.backend = POOL_GPU_AUTO;
	ck_assert_int_eq(pool_gpu_probe(POOL_GPU_AUTO), -ENODEV);
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), -ENODEV);
	ck_assert_ptr_null(g);
	/* The runtime is loaded once per process: ask fresh ones. */
	if (probe != -EOPNOTSUPP && access(rt, R_OK) == 0) {
		/* It loads, and says there is no device (no driver). */
		ck_assert_int_eq(probe_in_child(rt), ENODEV);
	}
	if (probe != -EOPNOTSUPP)
		ck_assert_int_eq(probe_in_child("/nonexistent/libcudart.so"),
				 ENOENT);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* Runs only where a CUDA device is usable (the GPU machine). */
START_TEST(cuda_round_trip)
{
	const size_t n = 24 * MiB + 3;
	struct pool *p;
	struct pool_region *r;
	struct pool_gpu *g;
	struct pool_gpu_opts o;
	struct pool_gpu_xfer *x;
	struct pool_gpu_stats st;
	uint8_t *dev, *pin;
	void *s, *ev;

	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_alloc(p, n + 4096, &r), 0);
	pool_gpu_opts_init(&o);
	o.backend = POOL_GPU_AUTO;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), 0);
	pool_gpu_get_stats(g, &st);
	ck_assert_int_eq(st.backend, POOL_GPU_CUDA);
	printf("cuda_round_trip: device %d pci %s\n", st.device, st.pci_bus_id);
	ck_assert_int_eq(pool_gpu_dev_alloc(g, n, (void **)&dev), 0);
	ck_assert_int_eq(pool_gpu_pinned_alloc(g, n, (void **)&pin), 0);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s), 0);

	/* store: pinned -> device (helper), device -> pool (engine) */
	tu_pattern_fill(pin, n, 21, 7);
	ck_assert_int_eq(pool_gpu_memcpy_async(g, dev, pin, n, s), 0);
	ck_assert_int_eq(pool_gpu_store(g, r, 7, dev, n, s, &x), 0);
	ck_assert_int_eq(wait_guarded(x, 60000), 0);
	memset(pin, 0, n);
	ck_assert_int_eq(pool_read(p, r, 7, pin, n), 0);
	ck_assert_int_eq(tu_pattern_check(pin, n, 21, 7), -1);

	/* fetch, then a D2H copy ordered after it by its event only */
	tu_pattern_fill(pin, n, 22, 7);
	ck_assert_int_eq(pool_write(p, r, 7, pin, n), 0);
	memset(pin, 0, n);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 7, dev, n, NULL, &x), 0);
	ck_assert_int_eq(pool_gpu_xfer_event(x, -1, &ev), 0);
	ck_assert_int_eq(pool_gpu_stream_wait_event(g, s, ev), 0);
	ck_assert_int_eq(pool_gpu_memcpy_async(g, pin, dev, n, s), 0);
	ck_assert_int_eq(pool_gpu_stream_sync(g, s, 60000), 0);
	ck_assert_int_eq(tu_pattern_check(pin, n, 22, 7), -1);
	ck_assert_int_eq(wait_guarded(x, 60000), 0);

	pool_gpu_get_stats(g, &st);
	printf("cuda_round_trip: chunks=%lu overlapped=%lu fabric_max=%u "
	       "copy_max=%u\n",
	       (unsigned long)st.chunks, (unsigned long)st.overlapped,
	       st.fabric_max, st.copy_max);
	ck_assert_uint_eq(st.errors, 0);
	pool_gpu_stream_destroy(g, s);
	pool_gpu_pinned_free(g, pin);
	pool_gpu_dev_free(g, dev);
	gpu_down(p, r, g);
}
END_TEST

/* --- NUMA placement ------------------------------------------------------ */

/* Opens a host engine placed by opts; returns pool_gpu_open()'s result
 * and, on success, the stats in *st (the engine is closed again). */
static int open_placed(struct pool *p, const char *xml, const char *bus,
		       int node, struct pool_gpu_stats *st)
{
	char path[PATH_MAX + 64];
	struct pool_gpu_opts o;
	struct pool_gpu *g = NULL;
	int r;

	pool_gpu_opts_init(&o);
	o.backend = POOL_GPU_HOST;
	o.staging_bytes = 64 * KiB;
	o.staging_count = 2;
	o.numa_node = node;
	if (bus)
		snprintf(o.pci_bus_id, sizeof(o.pci_bus_id), "%s", bus);
	if (xml) {
		snprintf(path, sizeof(path), "%s/%s", topo_dir, xml);
		o.topology_xml = path;
	}
	memset(st, 0x7f, sizeof(*st));
	r = pool_gpu_open(p, &o, &g);
	if (r) {
		ck_assert_ptr_null(g);
		return r;
	}
	ck_assert_int_eq(pool_gpu_get_stats(g, st), 0);
	pool_gpu_close(g);
	return 0;
}

static void expect_placed(struct pool *p, const char *xml, const char *bus,
			  int node, int want_node, const char *want_cpus)
{
	struct pool_gpu_stats st;
	int r = open_placed(p, xml, bus, node, &st);

	ck_assert_msg(r == 0, "%s bus=%s node=%d: %s", xml, bus, node,
		      pool_strerror(r));
	ck_assert_msg(st.numa_node == want_node, "%s bus=%s: node %d, want %d",
		      xml, bus, st.numa_node, want_node);
	ck_assert_str_eq(st.numa_cpus, want_cpus);
	/* Another machine's topology: computed, never applied. */
	ck_assert_int_eq(st.numa_applied, 0);
}

/* The node and CPUs chosen for a GPU bus id on recorded machines: the
 * DGX-2 (nvml0-7 on node 0, CPUs 0-1; nvml8-15 on node 1, CPUs 24-25)
 * and the POWER8 (domains 2,3 on node 0; a,b on node 1). */
START_TEST(numa_from_topology)
{
	struct pool_gpu_stats st;
	struct pool *p;

	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	expect_placed(p, "nvidiaDGX2.xml", "0000:34:00.0", -1, 0, "0-1");
	expect_placed(p, "nvidiaDGX2.xml", "0000:5e:00.0", -1, 0, "0-1");
	expect_placed(p, "nvidiaDGX2.xml", "0000:b7:00.0", -1, 1, "24-25");
	expect_placed(p, "nvidiaDGX2.xml", "00000000:E7:00.0", -1, 1, "24-25");
	expect_placed(p, "power8gpudistances.xml", "0002:01:00.0", -1, 0,
		      "0-1,8-9,16-17,24-25");
	expect_placed(p, "power8gpudistances.xml", "000a:01:00.0", -1, 1,
		      "80-81,88-89,96-97,104-105");
	/* Unknown device, no bus id, placement off: nothing chosen, the
	 * engine still opens (as without NUMA). */
	expect_placed(p, "nvidiaDGX2.xml", "0000:01:00.0", -1, -1, "");
	expect_placed(p, "nvidiaDGX2.xml", NULL, -1, -1, "");
	expect_placed(p, "nvidiaDGX2.xml", "0000:b7:00.0", POOL_GPU_NUMA_OFF,
		      -1, "");
	/* The explicit override beats the topology. */
	expect_placed(p, "nvidiaDGX2.xml", "0000:b7:00.0", 0, 0, "0-1");
	expect_placed(p, "nvidiaDGX2.xml", "0000:34:00.0", 1, 1, "24-25");
	ck_assert_int_eq(
		open_placed(p, "nvidiaDGX2.xml", "0000:34:00.0", 2, &st),
		-ENXIO);
	/* So does TIDEPOOL_GPU_NODE, per bus id or for every GPU. */
	setenv("TIDEPOOL_GPU_NODE", "0000:b7:00.0=0", 1);
	expect_placed(p, "nvidiaDGX2.xml", "0000:b7:00.0", -1, 0, "0-1");
	expect_placed(p, "nvidiaDGX2.xml", "0000:5e:00.0", -1, 0, "0-1");
	setenv("TIDEPOOL_GPU_NODE", "1", 1);
	expect_placed(p, "nvidiaDGX2.xml", "0000:34:00.0", -1, 1, "24-25");
	expect_placed(p, "nvidiaDGX2.xml", "0000:01:00.0", -1, 1, "24-25");
	setenv("TIDEPOOL_GPU_NODE", "9", 1);
	ck_assert_int_eq(
		open_placed(p, "nvidiaDGX2.xml", "0000:34:00.0", -1, &st),
		-ENXIO);
	setenv("TIDEPOOL_GPU_NODE", "0000:34:00.0=", 1);
	ck_assert_int_eq(
		open_placed(p, "nvidiaDGX2.xml", "0000:34:00.0", -1, &st),
		-EINVAL);
	unsetenv("TIDEPOOL_GPU_NODE");
	/* Bad requests. */
	ck_assert_int_eq(open_placed(p, "no-such.xml", "0000:34:00.0", -1, &st),
			 -ENOENT);
	ck_assert_int_eq(open_placed(p, "nvidiaDGX2.xml", "34:00.9", -1, &st),
			 -EINVAL);
	ck_assert_int_eq(open_placed(p, "nvidiaDGX2.xml", "b7:00.0", -3, &st),
			 -EINVAL);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* The first or the last node of this host. */
static int host_node(bool last)
{
	struct place_topo *t = NULL;
	int n;

	ck_assert_int_eq(place_topo_open(NULL, &t), 0);
	n = place_topo_node_id(t, last ? place_topo_nnodes(t) - 1 : 0);
	place_topo_close(t);
	return n;
}

/* The numa_maps line of the mapping that holds addr (numa_maps names a
 * mapping by its start only, and the kernel merges neighbours with the
 * same policy: find the start in /proc/self/maps). */
static bool numa_maps_line(const void *addr, char *line, size_t len)
{
	unsigned long a = (unsigned long)(uintptr_t)addr, lo, hi, start = 0;
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	ck_assert_ptr_nonnull(f);
	while (!start && fgets(line, (int)len, f))
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi)
			start = lo;
	fclose(f);
	if (!start)
		return false;
	f = fopen("/proc/self/numa_maps", "r");
	ck_assert_ptr_nonnull(f);
	while (!found && fgets(line, (int)len, f))
		found = strtoul(line, NULL, 16) == start;
	fclose(f);
	return found;
}

/* Cpus_allowed_list of this process's thread called comm. */
static bool thread_cpus(const char *comm, char *out, size_t len)
{
	char path[64], buf[256];
	bool found = false;
	pid_t tid;
	FILE *f;

	if (tu_threads_named(comm, &tid) < 1)
		return false;
	snprintf(path, sizeof(path), "/proc/self/task/%d/status", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	while (fgets(buf, sizeof(buf), f))
		if (!strncmp(buf, "Cpus_allowed_list:", 18)) {
			char *v = buf + 18;

			v += strspn(v, " \t");
			v[strcspn(v, "\n")] = '\0';
			snprintf(out, len, "%s", v);
			found = true;
		}
	fclose(f);
	return found;
}

/* The CPUs of node that this process may use, as a set of numbers. */
static void node_cpus_allowed(int node, bool *set, size_t max)
{
	struct place_topo *t = NULL;
	int cpus[PLACE_NODE_MAX];
	cpu_set_t mine;
	ssize_t n;

	memset(set, 0, max);
	ck_assert_int_eq(place_topo_open(NULL, &t), 0);
	n = place_node_cpus(t, node, cpus, PLACE_NODE_MAX);
	place_topo_close(t);
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(mine), &mine), 0);
	for (ssize_t i = 0; i < n && i < PLACE_NODE_MAX; i++)
		if ((size_t)cpus[i] < max && CPU_ISSET(cpus[i], &mine))
			set[cpus[i]] = true;
}

/*
 * Opens an engine placed on node (explicitly, or through
 * TIDEPOOL_GPU_NODE for a made-up bus id when via_env), and checks on
 * this host: the staging buffers' policy in numa_maps is bind:node, their
 * pages are on node, the worker's CPUs are the node's, and bytes still
 * come back exactly.
 */
static void check_bound(struct pool *p, int node, bool via_env)
{
	struct pool_gpu_opts o;
	struct pool_gpu_stats st;
	struct pool_gpu *g = NULL;
	struct pool_region *r;
	char line[4096], want[32], cpus[256];
	bool expect[PLACE_NODE_MAX], got[PLACE_NODE_MAX] = { false };
	int nodes[PLACE_NODE_MAX];
	ssize_t n;
	bool all;

	pool_gpu_opts_init(&o);
	o.backend = POOL_GPU_HOST;
	o.staging_bytes = 256 * KiB;
	o.staging_count = 3;
	if (via_env) {
		char v[64];

		snprintf(o.pci_bus_id, sizeof(o.pci_bus_id), "0000:7e:1f.7");
		snprintf(v, sizeof(v), "0000:7e:1f.7=%d", node);
		setenv("TIDEPOOL_GPU_NODE", v, 1);
	} else {
		o.numa_node = node;
	}
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), 0);
	unsetenv("TIDEPOOL_GPU_NODE");
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_int_eq(st.numa_node, node);
	ck_assert_int_eq(st.numa_applied, 1);
	snprintf(want, sizeof(want), " bind:%d ", node);
	for (unsigned i = 0; i < 3; i++) {
		void *buf = gpu_test_staging_buf(g, i);

		ck_assert_ptr_nonnull(buf);
		ck_assert_msg(numa_maps_line(buf, line, sizeof(line)),
			      "staging %u not in numa_maps", i);
		ck_assert_msg(strstr(line, want), "staging %u: %s", i, line);
		ck_assert_int_eq(place_memory_node(buf), node);
		ck_assert_int_eq(
			place_memory_node((uint8_t *)buf + 256 * KiB - 1),
			node);
	}
	ck_assert_ptr_null(gpu_test_staging_buf(g, 3));
	/* The worker runs on the node's CPUs (those this process may use). */
	ck_assert(thread_cpus("pool-gpu", cpus, sizeof(cpus)));
	n = place_parse_nodelist(cpus, &all, nodes, PLACE_NODE_MAX);
	ck_assert_msg(n > 0, "Cpus_allowed_list %s", cpus);
	for (ssize_t i = 0; i < n; i++)
		got[nodes[i]] = true;
	node_cpus_allowed(node, expect, PLACE_NODE_MAX);
	ck_assert_msg(!memcmp(got, expect, sizeof(got)),
		      "worker CPUs %s are not node %d's (stats: %s)", cpus,
		      node, st.numa_cpus);
	ck_assert_int_eq(pool_alloc(p, 3 * MiB + 5, &r), 0);
	store_then_fetch(p, g, r, 1, 3 * MiB + 3, 61);
	pool_free(p, r);
	pool_gpu_close(g);
}

/* Real binding on this host's first node: runs on any host, one node
 * included (the node asked for by number). */
START_TEST(numa_binds_staging)
{
	struct pool *p;

	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	check_bound(p, host_node(false), false);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* --bind: on the last node of a host with several, explicitly and by the
 * device's bus id (TIDEPOOL_GPU_NODE). */
START_TEST(numa_binds_other_node)
{
	struct pool *p;

	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	check_bound(p, host_node(true), false);
	check_bound(p, host_node(true), true);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* --- the direct path (FI_HMEM) ------------------------------------------ */

/* tcp reports no FI_HMEM: staged, and DIRECT_ON is refused. */
START_TEST(direct_not_on_tcp)
{
	struct pool_gpu_opts o;
	struct pool_gpu_stats st;
	struct pool_gpu *g;
	struct pool_region *r;
	struct pool *p;

	g = gpu_up(2 * MiB, &p, &r, 256 * KiB, 2, 0);
	store_then_fetch(p, g, r, 0, 2 * MiB, 71);
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_int_eq(st.direct, 0);
	ck_assert_uint_eq(st.direct_xfers, 0);
	ck_assert_uint_eq(st.chunks, 16); /* 2 x 8 through the ring */
	pool_gpu_close(g);
	pool_gpu_opts_init(&o);
	o.backend = POOL_GPU_HOST;
	o.direct = POOL_GPU_DIRECT_ON;
	g = (void *)1;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), -EOPNOTSUPP);
	ck_assert_ptr_null(g);
	o.direct = 3;
	ck_assert_int_eq(pool_gpu_open(p, &o, &g), -EINVAL);
	pool_free(p, r);
	pool_close(p);
	tu_memd_stop_ok(&md);
}
END_TEST

/* Region offset where the extent holding off ends. */
static uint64_t extent_end(struct pool_region *r, uint64_t off)
{
	uint64_t at = 0, slab_off, len;
	struct wire_lease l;

	for (uint32_t i = 0; pool_region_extent(r, i, &l, &slab_off, &len) == 0;
	     i++) {
		if (off < at + len)
			return at + len;
		at += len;
	}
	ck_abort_msg("offset %lu beyond the extents", (unsigned long)off);
	return 0;
}

/*
 * With "the provider has FI_HMEM" forced, transfers go straight between
 * the leases and the (host) device memory: bytes exact across lease
 * boundaries, chunks cut at those boundaries (so counted differently from
 * the staged path), the stream still gates the RMA, cancellation works.
 */
START_TEST(direct_forced)
{
	const size_t stage = 4 * MiB;
	struct pool_gpu_stats st;
	struct pool_gpu *g;
	struct pool_gpu_xfer *x;
	struct pool_region *r;
	struct pool *p;
	struct gate gt;
	uint64_t b, chunks;
	uint8_t *dev;
	void *s, *ev;

	gpu_test_force_hmem(1);
	tu_memd_start_ok(&md, NULL);
	p = tu_pool_connect(&md);
	ck_assert_int_eq(pool_alloc(p, REGION, &r), 0);
	ck_assert_uint_gt(pool_region_nextents(r), 1);
	g = open_host(p, stage, 3, 0);
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_int_eq(st.direct, 1);

	store_then_fetch(p, g, r, 0, REGION, 81);
	store_then_fetch(p, g, r, 5, 1, 82);
	b = extent_end(r, 0);
	store_then_fetch(p, g, r, b - 100, 200, 83);
	store_then_fetch(p, g, r, b - 3 * MiB, 6 * MiB + 1, 84);
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_uint_eq(st.direct_xfers, 8);
	ck_assert_uint_eq(st.errors, 0);
	/* A 200-byte transfer across a lease boundary is two chunks here
	 * (one in the ring): the RMA went to the leases directly. */
	chunks = st.chunks;
	store_then_fetch(p, g, r, b - 100, 200, 85);
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_uint_eq(st.chunks - chunks, 4);

	/* The fetch's RMA waits for the work before it on its stream. */
	dev = dev_alloc(g, 2 * MiB);
	tu_pattern_fill(dev, 2 * MiB, 90, b - MiB);
	ck_assert_int_eq(pool_write(p, r, b - MiB, dev, 2 * MiB), 0);
	memset(dev, 0x33, 2 * MiB);
	gate_init(&gt);
	ck_assert_int_eq(pool_gpu_stream_create(g, &s), 0);
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s, gate_fn, &gt), 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, b - MiB, dev, 2 * MiB, s, &x), 0);
	sleep_ms(300);
	ck_assert_int_eq(pool_gpu_xfer_test(x), 0);
	for (size_t i = 0; i < 2 * MiB; i += 4093)
		ck_assert_uint_eq(dev[i], 0x33);
	gate_open(&gt);
	ck_assert_int_eq(pool_gpu_xfer_event(x, 60000, &ev), 0);
	ck_assert_ptr_nonnull(ev);
	ck_assert_int_eq(pool_gpu_stream_wait_event(g, s, ev), 0);
	ck_assert_int_eq(wait_guarded(x, 60000), 0);
	ck_assert_int_eq(tu_pattern_check(dev, 2 * MiB, 90, b - MiB), -1);

	/* Cancelled while its stream is held: nothing lands. */
	gate_init(&gt);
	memset(dev, 0x44, 2 * MiB);
	ck_assert_int_eq(pool_gpu_stream_host_fn(g, s, gate_fn, &gt), 0);
	ck_assert_int_eq(pool_gpu_fetch(g, r, 0, dev, 2 * MiB, s, &x), 0);
	ck_assert_int_eq(pool_gpu_xfer_cancel(x), 0);
	ck_assert_int_eq(wait_guarded(x, 60000), -ECANCELED);
	gate_open(&gt);
	ck_assert_int_eq(pool_gpu_stream_sync(g, s, 60000), 0);
	for (size_t i = 0; i < 2 * MiB; i += 4093)
		ck_assert_uint_eq(dev[i], 0x44);
	pool_gpu_stream_destroy(g, s);
	pool_gpu_dev_free(g, dev);
	ck_assert_int_eq(pool_gpu_get_stats(g, &st), 0);
	ck_assert_uint_eq(st.cancelled, 1);
	gpu_down(p, r, g);
}
END_TEST

/* $TP_SOURCE_DIR/tests/data, when it holds the DGX-2 export. */
static void topologies_find(void)
{
	const char *src = getenv("TP_SOURCE_DIR");
	char probe[PATH_MAX + 32];

	topo_dir[0] = '\0';
	if (!src)
		return;
	snprintf(topo_dir, sizeof(topo_dir), "%s/tests/data", src);
	snprintf(probe, sizeof(probe), "%s/nvidiaDGX2.xml", topo_dir);
	if (access(probe, R_OK))
		topo_dir[0] = '\0';
}

/* test_gpu --bind (ctest test_gpu_bind): placement on another node than
 * the first; needs two NUMA nodes, exits 77 saying why on smaller hosts. */
static int run_bind(void)
{
	Suite *s;
	TCase *tc;

	unsetenv("TIDEPOOL_GPU_NODE");
	tu_need_numa_nodes(2, "placing the staging ring on another node",
			   "test_gpu ran the same checks on node 0 "
			   "(numa_binds_staging)");
	s = suite_create("gpu-bind");
	tc = tcase_create("bind");
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, numa_binds_other_node);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc, *cu;

	if (argc == 2 && !strcmp(argv[1], "--probe-cuda")) {
		int r = pool_gpu_probe(POOL_GPU_CUDA);

		return r < 0 ? -r : 0; /* for probe_in_child() */
	}
	tu_need_memd();
	if (argc == 2 && !strcmp(argv[1], "--bind"))
		return run_bind();
	topologies_find();
	s = suite_create("gpu");
	tc = tcase_create("host");
	cu = tcase_create("cuda");
	tcase_set_timeout(tc, 300);
	TU_ADD_TESTS(tc, bytes_exact_at_every_size, zero_length,
		     many_queued_transfers, four_threads_one_engine,
		     fabric_and_copies_overlap, stream_ordering,
		     cancel_mid_transfer, memd_killed_mid_transfer,
		     frozen_memd_times_out_then_recovers,
		     close_with_transfers_in_flight, bad_arguments,
		     numa_binds_staging, direct_not_on_tcp, direct_forced);
	if (topo_dir[0])
		tcase_add_test(tc, numa_from_topology);
	else
		printf("SKIP numa_from_topology: no recorded topologies in "
		       "$TP_SOURCE_DIR/tests/data\n");
	suite_add_tcase(s, tc);
	tcase_set_timeout(cu, 300);
	tcase_add_test(cu, cuda_without_device);
	if (pool_gpu_probe(POOL_GPU_CUDA) > 0)
		tcase_add_test(cu, cuda_round_trip);
	else
		printf("SKIP cuda_round_trip: no usable CUDA device (%s)\n",
		       pool_strerror(pool_gpu_probe(POOL_GPU_CUDA)));
	suite_add_tcase(s, cu);
	return tu_run_suite(s);
}
