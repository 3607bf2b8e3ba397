// SPDX-License-Identifier: MIT
/*
 * tests/test_fab.c - the libfabric data plane (fabric/fab*.c): pure helpers,
 * then real RMA over loopback between a "target" and a "client" endpoint in
 * one process, on tcp (offset addressing) and, where it works here, shm
 * (virtual addressing).
 *
 * Threads: each RMA test runs a target progress thread ("tfab-target")
 * calling fab_ep_progress(ep, 100) until stopped; it can be parked (pause)
 * so that requests sit unserved. The concurrency test adds four client
 * threads. Every wait has a timeout; nothing asserts on timing.
 *
 * The target buffer starts as the pattern of its own MR key, and every
 * write uses a pattern seeded by its size, so any wrong, shifted or stale
 * byte is caught, both in the bytes read back and in the target memory
 * itself.
 */
#include "fabric/fab.h"
#include "tests/testutil.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#define TGT_LEN (16u << 20) /* target MR: room for 8 MiB near its end */
#define WAIT_MS 20000	    /* "never" for an op that should complete */
#define FAIL_WAIT_MS 10000  /* bound for an op that should fail */

struct target {
	struct fab_domain *d;
	struct fab_ep *ep;
	uint8_t *buf;
	struct fab_mr *mr;
	uint64_t key;
	uint64_t base;
	pthread_t thr;
	bool thr_started;
	atomic_int stop;
	atomic_int pause;
	atomic_int parked;
	atomic_int err;		   /* first negative fab_ep_serve result */
	struct fab_serve_stats st; /* the progress thread's (atomics) */
};

struct client {
	struct fab_domain *d;
	struct fab_ep *ep;
	uint64_t peer;
};

/* The pair under test (one per forked test). */
static struct target tgt;
static struct client cli;
static const char *fx_provider; /* provider of the running tcase */
static unsigned fx_busy_us;	/* busy_us of the target's fab_ep_serve */

/* Not a Check assertion: also used by the probe, outside any test. */
static uint64_t random_key(void)
{
	uint64_t k = 0;

	if (getrandom(&k, sizeof(k), 0) != (ssize_t)sizeof(k))
		abort();
	return k;
}

static void *target_progress_main(void *arg)
{
	struct target *t = arg;
	int r;

	pthread_setname_np(pthread_self(), "tfab-target");
	while (!atomic_load(&t->stop)) {
		if (atomic_load(&t->pause)) {
			atomic_store(&t->parked, 1);
			while (atomic_load(&t->pause) && !atomic_load(&t->stop))
				usleep(1000);
			atomic_store(&t->parked, 0);
			continue;
		}
		/* as memd-fab0 does */
		r = fab_ep_serve(t->ep, fx_busy_us, 100, &t->st);
		if (r < 0) {
			int zero = 0;

			atomic_compare_exchange_strong(&t->err, &zero, r);
		}
	}
	return NULL;
}

/* Parks the target's progress thread; returns once it is parked. */
static void target_pause(struct target *t)
{
	int i;

	atomic_store(&t->pause, 1);
	for (i = 0; i < 10000 && !atomic_load(&t->parked); i++)
		usleep(1000);
	ck_assert_msg(atomic_load(&t->parked), "target did not park");
}

static void target_resume(struct target *t)
{
	atomic_store(&t->pause, 0);
}

static int domain_open(const char *prov, struct fab_domain **d)
{
	struct fab_opts o = { .provider = prov };

	/* tcp binds to loopback; shm has no IP address. */
	if (!strcmp(prov, "tcp") || !strcmp(prov, "net"))
		o.node = "127.0.0.1";
	return fab_domain_open(&o, d);
}

/*
 * Opens target and client on prov, registers the target buffer (filled
 * with the pattern of its key) and starts the progress thread. Returns 0
 * or the first -errno, leaving what was opened for pair_close.
 */
static int pair_open(const char *prov, unsigned client_inflight)
{
	uint8_t addr[FAB_ADDR_MAX];
	size_t alen = sizeof(addr);
	int ret;

	memset(&tgt, 0, sizeof(tgt));
	memset(&cli, 0, sizeof(cli));
	ret = domain_open(prov, &tgt.d);
	if (!ret)
		ret = fab_ep_open(tgt.d, 0, &tgt.ep);
	if (ret)
		return ret;
	tgt.buf = aligned_alloc(4096, TGT_LEN);
	if (!tgt.buf)
		return -ENOMEM;
	tgt.key = random_key();
	tu_pattern_fill(tgt.buf, TGT_LEN, tgt.key, 0);
	ret = fab_mr_reg(tgt.d, tgt.ep, tgt.buf, TGT_LEN, FAB_ACCESS_REMOTE,
			 tgt.key, &tgt.mr);
	if (ret)
		return ret;
	/* A provider that picks keys (FAB_MR_PROV_KEY) ignored ours: the
	 * pattern is named by the key it gave. */
	if (fab_mr_key(tgt.mr) != tgt.key) {
		tgt.key = fab_mr_key(tgt.mr);
		tu_pattern_fill(tgt.buf, TGT_LEN, tgt.key, 0);
	}
	tgt.base = fab_mr_remote_base(tgt.mr);
	ret = -pthread_create(&tgt.thr, NULL, target_progress_main, &tgt);
	if (ret)
		return ret;
	tgt.thr_started = true;

	ret = domain_open(prov, &cli.d);
	if (!ret)
		ret = fab_ep_open(cli.d, client_inflight, &cli.ep);
	if (!ret)
		ret = fab_ep_name(tgt.ep, addr, &alen);
	if (!ret)
		ret = fab_ep_av_insert(cli.ep, addr, alen, &cli.peer);
	return ret;
}

static void pair_close(void)
{
	fab_ep_close(cli.ep);
	fab_domain_close(cli.d);
	if (tgt.thr_started) {
		atomic_store(&tgt.stop, 1);
		pthread_join(tgt.thr, NULL);
	}
	ck_assert_int_eq(fab_mr_close(tgt.mr), 0);
	fab_ep_close(tgt.ep);
	fab_domain_close(tgt.d);
	free(tgt.buf);
	ck_assert_int_eq(atomic_load(&tgt.err), 0);
	memset(&tgt, 0, sizeof(tgt));
	memset(&cli, 0, sizeof(cli));
}

static void setup_pair(unsigned client_inflight)
{
	int ret = pair_open(fx_provider, client_inflight);

	ck_assert_msg(ret == 0, "%s pair: %s", fx_provider, strerror(-ret));
}

/* The provider of the "rma" case: tcp, or $TP_FAB_PROVIDER (net, verbs;
 * ofi_rxm...) to run the same checks on another one. */
static const char *rma_provider(void)
{
	const char *p = getenv("TP_FAB_PROVIDER");

	return p && p[0] ? p : "tcp";
}

static void setup_rma(void)
{
	fx_provider = rma_provider();
	setup_pair(16);
}

/* The same, with the target polling 500 us after each wake-up. */
static void setup_rma_busy(void)
{
	fx_busy_us = 500;
	setup_rma();
}

static void setup_shm(void)
{
	fx_provider = "shm";
	setup_pair(16);
}

/* A client buffer, registered when the provider needs local MRs. */
struct lbuf {
	uint8_t *p;
	size_t len;
	struct fab_mr *mr;
	void *desc;
};

/* Returns 0 or -errno; no Check assertions (the probe uses it). */
static int lbuf_open(struct lbuf *b, size_t len)
{
	int ret;

	b->len = len;
	b->mr = NULL;
	b->desc = NULL;
	b->p = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	if (!b->p)
		return -ENOMEM;
	if (fab_domain_mr_mode(cli.d) & FAB_MR_LOCAL) {
		ret = fab_mr_reg(cli.d, cli.ep, b->p, len, FAB_ACCESS_LOCAL,
				 random_key(), &b->mr);
		if (ret) {
			free(b->p);
			return ret;
		}
		b->desc = fab_mr_desc(b->mr);
	}
	return 0;
}

static void lbuf_get(struct lbuf *b, size_t len)
{
	ck_assert_int_eq(lbuf_open(b, len), 0);
}

static void lbuf_put(struct lbuf *b)
{
	ck_assert_int_eq(fab_mr_close(b->mr), 0);
	free(b->p);
}

static int rma_sync(bool write, void *buf, size_t len, void *desc,
		    uint64_t raddr, uint64_t key, int timeout_ms)
{
	struct fab_op op = { 0 };
	int ret;

	if (write)
		ret = fab_ep_write(cli.ep, buf, len, desc, cli.peer, raddr, key,
				   &op, timeout_ms);
	else
		ret = fab_ep_read(cli.ep, buf, len, desc, cli.peer, raddr, key,
				  &op, timeout_ms);
	if (ret)
		return ret;
	ret = fab_op_wait(cli.ep, &op, timeout_ms);
	if (ret == 0 && op.len != len)
		ret = -EBADMSG;
	return ret;
}

/* ---- pure ---------------------------------------------------------- */

START_TEST(t_base_for_mode)
{
	static char buf[64];
	unsigned offset_modes[] = { 0, FAB_MR_PROV_KEY | FAB_MR_LOCAL,
				    FAB_MR_ALLOCATED | FAB_MR_ENDPOINT };
	size_t i;

	for (i = 0; i < sizeof(offset_modes) / sizeof(*offset_modes); i++) {
		ck_assert_uint_eq(fab_mr_base_for_mode(offset_modes[i], buf),
				  0);
		ck_assert_uint_eq(
			fab_mr_base_for_mode(offset_modes[i] | FAB_MR_VIRT_ADDR,
					     buf + 3),
			(uint64_t)(uintptr_t)(buf + 3));
	}
	ck_assert_uint_eq(fab_mr_base_for_mode(FAB_MR_VIRT_ADDR, NULL), 0);
}
END_TEST

START_TEST(t_errno)
{
	ck_assert_int_eq(fab_errno(0), 0);
	/* Plain errno values pass through, either sign. */
	ck_assert_int_eq(fab_errno(-ECONNRESET), -ECONNRESET);
	ck_assert_int_eq(fab_errno(ECONNRESET), -ECONNRESET);
	ck_assert_int_eq(fab_errno(-EIO), -EIO);
	ck_assert_int_eq(fab_errno(EIO), -EIO);
	ck_assert_int_eq(fab_errno(-EAGAIN), -EAGAIN);
	ck_assert_int_eq(fab_errno(-ECANCELED), -ECANCELED);
	ck_assert_int_eq(fab_errno(-ENODATA), -ENODATA);
	/* libfabric's own codes (fi_errno.h: FI_ERRNO_OFFSET = 256). */
	ck_assert_int_eq(fab_errno(-256), -EIO);      /* FI_EOTHER */
	ck_assert_int_eq(fab_errno(-257), -ENOSPC);   /* FI_ETOOSMALL */
	ck_assert_int_eq(fab_errno(-259), -EIO);      /* FI_EAVAIL */
	ck_assert_int_eq(fab_errno(-263), -EINVAL);   /* FI_ENOCQ */
	ck_assert_int_eq(fab_errno(264), -EBADMSG);   /* FI_ECRC */
	ck_assert_int_eq(fab_errno(-265), -EMSGSIZE); /* FI_ETRUNC */
	ck_assert_int_eq(fab_errno(-266), -ENOKEY);   /* FI_ENOKEY */
	ck_assert_int_eq(fab_errno(266), -ENOKEY);
	ck_assert_int_eq(fab_errno(-268), -EOVERFLOW); /* FI_EOVERRUN */
	ck_assert_int_eq(fab_errno(-100000), -EIO);
	ck_assert_int_eq(fab_errno(INT32_MIN), -EIO);
}
END_TEST

START_TEST(t_domain_bad_opts)
{
	struct fab_opts o = { .provider = "" };
	struct fab_domain *d = (void *)1;

	ck_assert_int_eq(fab_domain_open(&o, &d), -EINVAL);
	ck_assert_ptr_null(d);
	o.provider = "no-such-provider";
	ck_assert_int_eq(fab_domain_open(&o, &d), -ENODATA);
	ck_assert_ptr_null(d);
	ck_assert_int_eq(fab_domain_open(&o, NULL), -EINVAL);
	fab_domain_close(NULL);
	fab_ep_close(NULL);
	ck_assert_int_eq(fab_mr_close(NULL), 0);
}
END_TEST

/* FI_HMEM: tcp (libfabric 1.17) cannot move device memory, so asking for
 * it finds no provider, and a plain domain says it has none; host memory
 * registers through the HMEM call as through fab_mr_reg(). */
START_TEST(t_hmem_tcp)
{
	struct fab_opts o = { .provider = "tcp", .node = "127.0.0.1" };
	struct fab_domain *d = (void *)1;
	struct fab_mr *m = (void *)1;
	uint8_t *buf = aligned_alloc(4096, 65536);

	ck_assert_ptr_nonnull(buf);
	o.hmem = 0x80;
	ck_assert_int_eq(fab_domain_open(&o, &d), -EINVAL);
	ck_assert_ptr_null(d);
	o.hmem = FAB_HMEM_CUDA;
	ck_assert_int_eq(fab_domain_open(&o, &d), -ENODATA);
	ck_assert_ptr_null(d);
	o.hmem = 0;
	ck_assert_int_eq(fab_domain_open(&o, &d), 0);
	ck_assert(!fab_domain_has_hmem(d, FAB_HMEM_CUDA));
	ck_assert(fab_domain_has_hmem(d, 0));
	ck_assert(!fab_domain_has_hmem(NULL, 0));
	ck_assert_int_eq(fab_mr_reg_hmem(d, NULL, buf, 65536, FAB_ACCESS_LOCAL,
					 FAB_HMEM_CUDA, 0, 7, &m),
			 -EOPNOTSUPP);
	ck_assert_ptr_null(m);
	ck_assert_int_eq(fab_mr_reg_hmem(d, NULL, buf, 65536, FAB_ACCESS_LOCAL,
					 0x40, 0, 7, &m),
			 -EINVAL);
	ck_assert_int_eq(fab_mr_reg_hmem(d, NULL, buf, 65536, FAB_ACCESS_LOCAL,
					 0, -1, 7, &m),
			 -EINVAL);
	ck_assert_int_eq(fab_mr_reg_hmem(d, NULL, NULL, 65536, FAB_ACCESS_LOCAL,
					 0, 0, 7, &m),
			 -EINVAL);
	ck_assert_int_eq(fab_mr_reg_hmem(d, NULL, buf, 65536, FAB_ACCESS_LOCAL,
					 0, 0, 7, NULL),
			 -EINVAL);
	ck_assert_int_eq(fab_mr_reg_hmem(d, NULL, buf, 65536,
					 FAB_ACCESS_LOCAL | FAB_ACCESS_REMOTE,
					 0, 0, 7, &m),
			 0);
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(fab_mr_remote_base(m),
			  fab_mr_base_for_mode(fab_domain_mr_mode(d), buf));
	ck_assert_int_eq(fab_mr_close(m), 0);
	fab_domain_close(d);
	free(buf);
}
END_TEST

/* A target buffer registered through fab_mr_reg_hmem() (host memory) is
 * reachable by RMA with its key, like one from fab_mr_reg(). */
START_TEST(t_hmem_system_rma)
{
	uint8_t *buf = aligned_alloc(4096, 65536);
	struct fab_mr *m = NULL;
	struct lbuf b;
	uint64_t key = random_key();

	ck_assert_ptr_nonnull(buf);
	tu_pattern_fill(buf, 65536, key, 0);
	ck_assert_int_eq(fab_mr_reg_hmem(tgt.d, tgt.ep, buf, 65536,
					 FAB_ACCESS_REMOTE, 0, 0, key, &m),
			 0);
	lbuf_get(&b, 65536);
	ck_assert_int_eq(rma_sync(false, b.p, 65536, b.desc,
				  fab_mr_remote_base(m), fab_mr_key(m),
				  WAIT_MS),
			 0);
	ck_assert_int_eq(tu_pattern_check(b.p, 65536, key, 0), -1);
	lbuf_put(&b);
	target_pause(&tgt);
	ck_assert_int_eq(fab_mr_close(m), 0);
	target_resume(&tgt);
	free(buf);
}
END_TEST

/* ---- RMA on one provider ------------------------------------------- */

/* The domain reports the mode the header promises for this provider. */
START_TEST(t_mode)
{
	unsigned mode = fab_domain_mr_mode(tgt.d);

	ck_assert_uint_eq(tgt.base, fab_mr_base_for_mode(mode, tgt.buf));
	if (!strcmp(fx_provider, "tcp")) {
		ck_assert_msg(strstr(fab_domain_provider(tgt.d), "tcp"),
			      "provider %s", fab_domain_provider(tgt.d));
		ck_assert_uint_eq(mode & FAB_MR_VIRT_ADDR, 0);
		ck_assert_uint_eq(tgt.base, 0);
	}
	if (!strcmp(fx_provider, "shm")) {
		ck_assert_uint_ne(mode & FAB_MR_VIRT_ADDR, 0);
		ck_assert_uint_eq(tgt.base, (uint64_t)(uintptr_t)tgt.buf);
	}
	ck_assert_uint_ge(fab_domain_key_size(tgt.d), 1);
	ck_assert_uint_le(fab_domain_key_size(tgt.d), 8);
	ck_assert_uint_ge(fab_domain_max_msg(tgt.d), 8u << 20);
}
END_TEST

START_TEST(t_name_and_poll)
{
	uint8_t addr[FAB_ADDR_MAX];
	size_t len = 1;

	ck_assert_int_eq(fab_ep_name(cli.ep, addr, &len), -ENOSPC);
	len = sizeof(addr);
	ck_assert_int_eq(fab_ep_name(cli.ep, addr, &len), 0);
	ck_assert_uint_gt(len, 0);
	/* Nothing posted: polling completes nothing. */
	ck_assert_int_eq(fab_ep_progress(cli.ep, 0), 0);
	ck_assert_int_eq(fab_ep_progress(cli.ep, 1), 0);
}
END_TEST

/* Write then read back sizes 1 B .. 8 MiB at offsets at the very end of
 * the MR, checking the target memory itself in between. */
START_TEST(t_rma_sizes)
{
	static const size_t sizes[] = { 1, 4096, 1u << 20, 8u << 20 };
	size_t i, j;

	for (i = 0; i < sizeof(sizes) / sizeof(*sizes); i++) {
		size_t len = sizes[i];
		/* The last bytes of the MR, then an unaligned spot. */
		uint64_t offs[2] = { TGT_LEN - len, TGT_LEN - len - 4093 };
		struct lbuf b;

		lbuf_get(&b, len);
		for (j = 0; j < 2; j++) {
			uint64_t off = offs[j];
			uint64_t seed = len * 31 + j;

			/* What the target held: its key's pattern. */
			memset(b.p, 0, len);
			ck_assert_int_eq(rma_sync(false, b.p, len, b.desc,
						  tgt.base + off, tgt.key,
						  WAIT_MS),
					 0);
			ck_assert_int_eq(
				tu_pattern_check(b.p, len, tgt.key, off), -1);

			tu_pattern_fill(b.p, len, seed, off);
			ck_assert_int_eq(rma_sync(true, b.p, len, b.desc,
						  tgt.base + off, tgt.key,
						  WAIT_MS),
					 0);
			/* The target thread is parked while we look at its
			 * memory: the completion alone is no happens-before
			 * edge that TSan can see. */
			target_pause(&tgt);
			ck_assert_int_eq(
				tu_pattern_check(tgt.buf + off, len, seed, off),
				-1);
			/* Neighbours untouched. */
			if (off + len < TGT_LEN)
				ck_assert_int_eq(
					tgt.buf[off + len],
					tu_pattern_byte(tgt.key, off + len));
			ck_assert_int_eq(tgt.buf[off - 1],
					 tu_pattern_byte(tgt.key, off - 1));
			target_resume(&tgt);

			memset(b.p, 0, len);
			ck_assert_int_eq(rma_sync(false, b.p, len, b.desc,
						  tgt.base + off, tgt.key,
						  WAIT_MS),
					 0);
			ck_assert_int_eq(tu_pattern_check(b.p, len, seed, off),
					 -1);
			/* Restore for the next round's first read. */
			target_pause(&tgt);
			tu_pattern_fill(tgt.buf + off, len, tgt.key, off);
			target_resume(&tgt);
		}
		lbuf_put(&b);
	}
}
END_TEST

struct done_count {
	atomic_int n;
};

static void count_done(struct fab_op *op)
{
	struct done_count *dc = op->arg;

	atomic_fetch_add(&dc->n, 1);
}

/* 500 x 4 KiB in flight through a window of 16: writes, then reads. */
START_TEST(t_many_inflight)
{
	enum { N = 500, SZ = 4096 };
	struct fab_ep_stats st;
	struct done_count dc = { 0 };
	struct fab_op *ops = calloc(N, sizeof(*ops));
	struct lbuf b;
	int i;

	ck_assert_ptr_nonnull(ops);
	lbuf_get(&b, (size_t)N * SZ);
	/* Odd stride: ops straddle pages. */
	for (i = 0; i < N; i++)
		tu_pattern_fill(b.p + (size_t)i * SZ, SZ, 7,
				(uint64_t)i * (SZ + 3));
	for (i = 0; i < N; i++) {
		ops[i].done = count_done;
		ops[i].arg = &dc;
		ck_assert_int_eq(fab_ep_write(cli.ep, b.p + (size_t)i * SZ, SZ,
					      b.desc, cli.peer,
					      tgt.base + (uint64_t)i * (SZ + 3),
					      tgt.key, &ops[i], WAIT_MS),
				 0);
		fab_ep_get_stats(cli.ep, &st);
		ck_assert_uint_le(st.inflight, 16);
	}
	for (i = 0; i < N; i++)
		ck_assert_int_eq(fab_op_wait(cli.ep, &ops[i], WAIT_MS), 0);
	ck_assert_int_eq(atomic_load(&dc.n), N);
	target_pause(&tgt);
	for (i = 0; i < N; i++)
		ck_assert_int_eq(
			tu_pattern_check(tgt.buf + (size_t)i * (SZ + 3), SZ, 7,
					 (uint64_t)i * (SZ + 3)),
			-1);
	target_resume(&tgt);

	memset(b.p, 0, (size_t)N * SZ);
	memset(ops, 0, N * sizeof(*ops));
	for (i = 0; i < N; i++)
		ck_assert_int_eq(fab_ep_read(cli.ep, b.p + (size_t)i * SZ, SZ,
					     b.desc, cli.peer,
					     tgt.base + (uint64_t)i * (SZ + 3),
					     tgt.key, &ops[i], WAIT_MS),
				 0);
	/* Wait in reverse: completions arrive in any order. */
	for (i = N - 1; i >= 0; i--)
		ck_assert_int_eq(fab_op_wait(cli.ep, &ops[i], WAIT_MS), 0);
	for (i = 0; i < N; i++)
		ck_assert_int_eq(tu_pattern_check(b.p + (size_t)i * SZ, SZ, 7,
						  (uint64_t)i * (SZ + 3)),
				 -1);

	fab_ep_get_stats(cli.ep, &st);
	ck_assert_uint_eq(st.writes, N);
	ck_assert_uint_eq(st.reads, N);
	ck_assert_uint_eq(st.write_bytes, (uint64_t)N * SZ);
	ck_assert_uint_eq(st.read_bytes, (uint64_t)N * SZ);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.inflight, 0);
	lbuf_put(&b);
	free(ops);
}
END_TEST

/* Replaces the client endpoint with a fresh one (a new address). */
static void reopen_client(void)
{
	uint8_t addr[FAB_ADDR_MAX];
	size_t alen = sizeof(addr);

	fab_ep_close(cli.ep);
	cli.ep = NULL;
	ck_assert_int_eq(fab_ep_open(cli.d, 16, &cli.ep), 0);
	ck_assert_int_eq(fab_ep_name(tgt.ep, addr, &alen), 0);
	ck_assert_int_eq(fab_ep_av_insert(cli.ep, addr, alen, &cli.peer), 0);
}

/* One warm-up read, so that later tests do not time out on connecting. */
static void warm_up(void)
{
	uint8_t byte = 0;
	struct lbuf b;

	lbuf_get(&b, 64);
	ck_assert_int_eq(
		rma_sync(false, b.p, 64, b.desc, tgt.base, tgt.key, WAIT_MS),
		0);
	byte = b.p[63];
	ck_assert_int_eq(byte, tu_pattern_byte(tgt.key, 63));
	lbuf_put(&b);
}

static void expect_rma_error(uint64_t raddr, uint64_t key, const char *what)
{
	struct fab_ep_stats st;
	struct lbuf b;
	int ret;

	lbuf_get(&b, 4096);
	ret = rma_sync(false, b.p, 4096, b.desc, raddr, key, FAIL_WAIT_MS);
	ck_assert_msg(ret < 0 && ret != -ETIMEDOUT,
		      "%s on %s: %d (%s), want a prompt error", what,
		      fx_provider, ret, strerror(-ret));
	fprintf(stderr, "test_fab: %s on %s fails with %d (%s)\n", what,
		fx_provider, ret, strerror(-ret));
	fab_ep_get_stats(cli.ep, &st);
	ck_assert_uint_ge(st.errors, 1);
	lbuf_put(&b);
}

START_TEST(t_wrong_key)
{
	uint64_t mask =
		fab_domain_key_size(tgt.d) >= 8
			? UINT64_MAX
			: (1ull << (8 * fab_domain_key_size(tgt.d))) - 1;

	warm_up();
	expect_rma_error(tgt.base + 4096, (tgt.key ^ 0x5a5a) & mask,
			 "read with a wrong key");
	/* The target survives: a fresh client endpoint reaches it (on
	 * libfabric 1.17 tcp the old one's connection stays broken). */
	reopen_client();
	warm_up();
}
END_TEST

START_TEST(t_after_mr_close)
{
	warm_up();
	ck_assert_int_eq(fab_mr_close(tgt.mr), 0);
	tgt.mr = NULL;
	expect_rma_error(tgt.base + 4096, tgt.key, "read after fab_mr_close");
}
END_TEST

/* The other addressing scheme than the provider's must fail: proof that
 * fab_mr_remote_base matters (a vaddr on tcp, an offset on shm). */
START_TEST(t_wrong_addressing)
{
	uint64_t wrong;

	warm_up();
	if (fab_domain_mr_mode(tgt.d) & FAB_MR_VIRT_ADDR)
		wrong = 4096;
	else
		wrong = (uint64_t)(uintptr_t)tgt.buf + 4096;
	expect_rma_error(wrong, tgt.key,
			 (fab_domain_mr_mode(tgt.d) & FAB_MR_VIRT_ADDR)
				 ? "an offset under virt-addr mode"
				 : "a virtual address under offset mode");
}
END_TEST

/* A peer whose endpoint is gone yields a prompt error, not a hang. */
START_TEST(t_dead_peer)
{
	warm_up();
	atomic_store(&tgt.stop, 1);
	pthread_join(tgt.thr, NULL);
	tgt.thr_started = false;
	ck_assert_int_eq(fab_mr_close(tgt.mr), 0);
	tgt.mr = NULL;
	fab_ep_close(tgt.ep);
	tgt.ep = NULL;
	expect_rma_error(4096, tgt.key, "read from a closed endpoint");
}
END_TEST

/* A removed peer is forgotten; inserting it again works. */
START_TEST(t_av_remove)
{
	uint8_t addr[FAB_ADDR_MAX];
	size_t alen = sizeof(addr);

	warm_up();
	ck_assert_int_eq(fab_ep_av_remove(cli.ep, cli.peer), 0);
	ck_assert_int_eq(fab_ep_name(tgt.ep, addr, &alen), 0);
	ck_assert_int_eq(fab_ep_av_insert(cli.ep, addr, alen, &cli.peer), 0);
	warm_up();
}
END_TEST

/*
 * Where we pick keys, a key in use is refused (-ENOKEY) and another one
 * works. Where the provider picks them (FAB_MR_PROV_KEY: verbs, efa, cxi;
 * TP_TEST_FAB_PROV_KEY=1 emulates one on tcp), asking for a live key must
 * not alias it: the registration gets a key of its own, which reads the
 * new buffer and not the old one, and stops working once closed.
 */
START_TEST(t_dup_key)
{
	struct fab_mr *mr = NULL;
	static uint8_t other[4096];
	struct lbuf b;
	uint64_t key, base;
	int ret;

	if (fab_domain_mr_mode(tgt.d) & FAB_MR_PROV_KEY) {
		tu_pattern_fill(other, sizeof(other), 99, 0);
		ck_assert_int_eq(fab_mr_reg(tgt.d, tgt.ep, other, sizeof(other),
					    FAB_ACCESS_REMOTE, tgt.key, &mr),
				 0);
		key = fab_mr_key(mr);
		ck_assert_uint_ne(key, tgt.key);
		lbuf_get(&b, sizeof(other));
		ck_assert_int_eq(rma_sync(false, b.p, sizeof(other), b.desc,
					  fab_mr_remote_base(mr), key, WAIT_MS),
				 0);
		ck_assert_int_eq(tu_pattern_check(b.p, sizeof(other), 99, 0),
				 -1);
		/* the target's own key still reads the target's bytes */
		ck_assert_int_eq(rma_sync(false, b.p, 4096, b.desc,
					  tgt.base + 4096, tgt.key, WAIT_MS),
				 0);
		ck_assert_int_eq(tu_pattern_check(b.p, 4096, tgt.key, 4096),
				 -1);
		lbuf_put(&b);
		base = fab_mr_remote_base(mr);
		ck_assert_int_eq(fab_mr_close(mr), 0);
		expect_rma_error(base, key,
				 "read through a closed provider key");
		return;
	}
	ret = fab_mr_reg(tgt.d, tgt.ep, other, sizeof(other), FAB_ACCESS_REMOTE,
			 tgt.key, &mr);
	ck_assert_int_eq(ret, -ENOKEY);
	ck_assert_ptr_null(mr);
	ret = fab_mr_reg(tgt.d, tgt.ep, other, sizeof(other), FAB_ACCESS_REMOTE,
			 tgt.key + 1, &mr);
	ck_assert_int_eq(ret, 0);
	ck_assert_int_eq(fab_mr_close(mr), 0);
}
END_TEST

/* An unserved op times out, stays in flight, and completes once the
 * target progresses again. */
START_TEST(t_wait_timeout)
{
	struct fab_op op = { 0 };
	struct lbuf b;
	int ret;

	warm_up();
	lbuf_get(&b, 4096);
	target_pause(&tgt);
	ck_assert_int_eq(fab_ep_read(cli.ep, b.p, 4096, b.desc, cli.peer,
				     tgt.base + 8192, tgt.key, &op, WAIT_MS),
			 0);
	ret = fab_op_wait(cli.ep, &op, 200);
	ck_assert_int_eq(ret, -ETIMEDOUT);
	ck_assert_int_eq(__atomic_load_n(&op.complete, __ATOMIC_ACQUIRE), 0);
	ck_assert_int_eq(fab_op_wait(cli.ep, &op, 0), -ETIMEDOUT);
	target_resume(&tgt);
	ck_assert_int_eq(fab_op_wait(cli.ep, &op, WAIT_MS), 0);
	ck_assert_int_eq(tu_pattern_check(b.p, 4096, tgt.key, 8192), -1);
	lbuf_put(&b);
}
END_TEST

/* Closing the client with ops in flight completes them with -ECANCELED,
 * callbacks included. */
START_TEST(t_close_inflight)
{
	enum { N = 8 };
	struct done_count dc = { 0 };
	struct fab_op ops[N];
	struct lbuf b;
	int i;

	warm_up();
	lbuf_get(&b, N * 4096);
	memset(ops, 0, sizeof(ops));
	target_pause(&tgt);
	for (i = 0; i < N; i++) {
		ops[i].done = count_done;
		ops[i].arg = &dc;
		ck_assert_int_eq(fab_ep_read(cli.ep, b.p + i * 4096, 4096,
					     b.desc, cli.peer,
					     tgt.base + (uint64_t)i * 4096,
					     tgt.key, &ops[i], WAIT_MS),
				 0);
	}
	/* Local MRs belong to the endpoint's domain, not the endpoint:
	 * close them after. */
	fab_ep_close(cli.ep);
	cli.ep = NULL;
	ck_assert_int_eq(atomic_load(&dc.n), N);
	for (i = 0; i < N; i++) {
		ck_assert_int_eq(ops[i].complete, 1);
		ck_assert_int_eq(ops[i].status, -ECANCELED);
		ck_assert_ptr_null(ops[i].next_live);
	}
	target_resume(&tgt);
	ck_assert_int_eq(fab_mr_close(b.mr), 0);
	free(b.p);
}
END_TEST

/*
 * Closing the client while a read's response is partly received (fabric/
 * fab.c, "Closing mid-read"): libfabric 1.17's tcp completes the read twice
 * and ofi_rxm crashed on the second, a NULL context, inside fi_close. The
 * response is made larger than the loopback sockets hold (tcp_rmem max is
 * 32 MiB here), the target is parked once the first bytes arrived and the
 * client takes in what the sockets hold: the read is then stuck half-way.
 * The close must complete it with -ECANCELED, not crash, and nothing may
 * be written into the buffer afterwards, even with the target serving the
 * rest.
 */
static uint8_t *mid_read_big;

START_TEST(t_close_mid_read)
{
	const size_t len = 96u << 20;
	struct done_count dc = { 0 };
	struct fab_op op = { 0 };
	struct fab_mr *bigmr = NULL;
	uint8_t *big, *snap;
	unsigned q0 = fab_quarantined_eps();
	bool hazard = fab_domain_close_hazard(cli.d);
	struct lbuf b;
	int i;

	warm_up();
	big = aligned_alloc(4096, len);
	snap = malloc(len);
	ck_assert(big && snap);
	memset(big, 0xa5, len);
	ck_assert_int_eq(fab_mr_reg(tgt.d, tgt.ep, big, len, FAB_ACCESS_REMOTE,
				    random_key(), &bigmr),
			 0);
	lbuf_get(&b, len);
	memset(b.p, 0, len);
	op.done = count_done;
	op.arg = &dc;
	ck_assert_int_eq(fab_ep_read(cli.ep, b.p, len, b.desc, cli.peer,
				     fab_mr_remote_base(bigmr),
				     fab_mr_key(bigmr), &op, WAIT_MS),
			 0);
	for (i = 0; i < 2000 && b.p[0] != 0xa5 && !op.complete; i++)
		(void)fab_op_wait(cli.ep, &op, 5);
	ck_assert_msg(b.p[0] == 0xa5, "no byte of the response arrived");
	target_pause(&tgt);
	for (i = 0; i < 100 && !op.complete; i++)
		(void)fab_op_wait(cli.ep, &op, 2);
	ck_assert_msg(!op.complete,
		      "a %zu MiB read completed with its target parked: the "
		      "sockets hold more than it (raise len)",
		      len >> 20);

	ck_assert_int_eq(fab_ep_close(cli.ep), hazard);
	cli.ep = NULL;
	ck_assert_int_eq(atomic_load(&dc.n), 1);
	ck_assert_int_eq(op.complete, 1);
	ck_assert_int_eq(op.status, -ECANCELED);
	ck_assert_uint_eq(fab_quarantined_eps(), q0 + (hazard ? 1 : 0));

	/* The rest of the response goes nowhere. */
	memcpy(snap, b.p, len);
	target_resume(&tgt);
	usleep(200 * 1000);
	ck_assert_int_eq(memcmp(snap, b.p, len), 0);
	ck_assert_int_eq(fab_mr_close(b.mr), 0);
	free(b.p);
	ck_assert_int_eq(fab_mr_close(bigmr), 0);
	/* The target may still be sending from big until pair_close closes
	 * its endpoint; the forked test's exit frees it. */
	mid_read_big = big;
	free(snap);
}
END_TEST

struct reader {
	pthread_t thr;
	int idx;
	int failures;
};

/* Each thread writes its own stripe and reads it back, 4 ops at a time,
 * then reads a shared range. */
static void *reader_main(void *arg)
{
	enum { ITERS = 100, DEPTH = 4, SZ = 4096 };
	struct reader *r = arg;
	struct fab_op ops[DEPTH];
	uint64_t stripe = (uint64_t)r->idx * (2u << 20);
	uint8_t *buf = aligned_alloc(4096, DEPTH * SZ);
	void *desc = NULL;
	struct fab_mr *mr = NULL;
	int it, k;

	pthread_setname_np(pthread_self(), "tfab-reader");
	if (!buf)
		return (void *)1;
	if (fab_domain_mr_mode(cli.d) & FAB_MR_LOCAL) {
		if (fab_mr_reg(cli.d, cli.ep, buf, DEPTH * SZ, FAB_ACCESS_LOCAL,
			       random_key(), &mr))
			return (void *)1;
		desc = fab_mr_desc(mr);
	}
	for (it = 0; it < ITERS; it++) {
		bool write = it % 2 == 0;
		uint64_t seed = (uint64_t)r->idx << 32 | (uint64_t)(it & ~1);

		memset(ops, 0, sizeof(ops));
		for (k = 0; k < DEPTH; k++) {
			uint64_t off = stripe + (uint64_t)k * SZ * 3;
			uint8_t *p = buf + k * SZ;
			int ret;

			if (write)
				tu_pattern_fill(p, SZ, seed, off);
			else
				memset(p, 0, SZ);
			ret = write ? fab_ep_write(cli.ep, p, SZ, desc,
						   cli.peer, tgt.base + off,
						   tgt.key, &ops[k], WAIT_MS)
				    : fab_ep_read(cli.ep, p, SZ, desc, cli.peer,
						  tgt.base + off, tgt.key,
						  &ops[k], WAIT_MS);
			if (ret)
				r->failures++;
		}
		for (k = 0; k < DEPTH; k++) {
			if (fab_op_wait(cli.ep, &ops[k], WAIT_MS))
				r->failures++;
			else if (!write &&
				 tu_pattern_check(buf + k * SZ, SZ, seed,
						  stripe + (uint64_t)k * SZ *
								   3) != -1)
				r->failures++;
		}
	}
	fab_mr_close(mr);
	free(buf);
	return NULL;
}

START_TEST(t_threads)
{
	enum { NT = 4 };
	struct reader rs[NT];
	struct fab_ep_stats st;
	void *res;
	int i;

	memset(rs, 0, sizeof(rs));
	for (i = 0; i < NT; i++) {
		rs[i].idx = i;
		ck_assert_int_eq(
			pthread_create(&rs[i].thr, NULL, reader_main, &rs[i]),
			0);
	}
	for (i = 0; i < NT; i++) {
		ck_assert_int_eq(pthread_join(rs[i].thr, &res), 0);
		ck_assert_ptr_null(res);
		ck_assert_int_eq(rs[i].failures, 0);
	}
	fab_ep_get_stats(cli.ep, &st);
	ck_assert_uint_eq(st.reads + st.writes, NT * 100 * 4);
	ck_assert_uint_eq(st.errors, 0);
	ck_assert_uint_eq(st.inflight, 0);
}
END_TEST

/* ---- suite --------------------------------------------------------- */

/*
 * Whether a pair on prov can move bytes here, tried in a child so that a
 * provider that hangs or crashes cannot take the runner with it. Writes the
 * reason into why when not.
 */
static bool provider_works(const char *prov, char *why, size_t why_len)
{
	int status = 0;
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		snprintf(why, why_len, "fork: %s", strerror(errno));
		return false;
	}
	if (pid == 0) {
		struct lbuf b;
		int ret;

		alarm(30);
		ret = pair_open(prov, 16);
		if (!ret)
			ret = lbuf_open(&b, 4096);
		if (!ret) {
			ret = rma_sync(false, b.p, 4096, b.desc,
				       tgt.base + 4096, tgt.key, 5000);
			if (!ret &&
			    tu_pattern_check(b.p, 4096, tgt.key, 4096) != -1)
				ret = -EBADMSG;
		}
		/* No teardown: the process ends here. */
		_exit(ret < 0 ? -ret : 0);
	}
	if (waitpid(pid, &status, 0) != pid) {
		snprintf(why, why_len, "waitpid: %s", strerror(errno));
		return false;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return true;
	if (WIFEXITED(status))
		snprintf(why, why_len, "a loopback read fails: %s",
			 strerror(WEXITSTATUS(status)));
	else
		snprintf(why, why_len, "the probe died (signal %d)",
			 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return false;
}

/*
 * fab_ep_wake ends a fab_ep_serve call that sleeps in poll(2) on the CQ's
 * wait fd: memd's reclaimer needs that for its progress fence. The call
 * would otherwise sleep its whole 20 s.
 */
struct serve_call {
	int ret;
	int64_t took_ms;
};

static void *serve_main(void *arg)
{
	struct serve_call *c = arg;
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	c->ret = fab_ep_serve(tgt.ep, 0, 20000, NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	c->took_ms = (b.tv_sec - a.tv_sec) * 1000 +
		     (b.tv_nsec - a.tv_nsec) / 1000000;
	return NULL;
}

START_TEST(t_serve_wake)
{
	struct serve_call c = { 0 };
	pthread_t th;

	target_pause(&tgt); /* the serve call below is the only one */
	ck_assert_int_eq(pthread_create(&th, NULL, serve_main, &c), 0);
	usleep(100000);
	ck_assert_int_eq(fab_ep_wake(tgt.ep), 0);
	pthread_join(th, NULL);
	ck_assert_int_ge(c.ret, 0);
	ck_assert_msg(c.took_ms < 10000, "serve took %lld ms after a wake",
		      (long long)c.took_ms);
	target_resume(&tgt);
}
END_TEST

/*
 * With busy_us the target serves reads right and says it polled: reads
 * land in the window the first one opened.
 */
START_TEST(t_serve_busy_counts)
{
	struct lbuf b;

	lbuf_get(&b, 4096);
	for (int i = 0; i < 50; i++) {
		uint64_t off = (uint64_t)i * 4096;

		ck_assert_int_eq(rma_sync(false, b.p, 4096, b.desc,
					  tgt.base + off, tgt.key, WAIT_MS),
				 0);
		ck_assert_int_eq(tu_pattern_check(b.p, 4096, tgt.key, off), -1);
	}
	ck_assert_uint_ge(__atomic_load_n(&tgt.st.wakeups, __ATOMIC_RELAXED),
			  1);
	ck_assert_uint_gt(__atomic_load_n(&tgt.st.busy_ns, __ATOMIC_RELAXED),
			  0);
	lbuf_put(&b);
}
END_TEST

static void add_rma_tests(TCase *tc)
{
	TU_ADD_TESTS(tc, t_mode, t_name_and_poll, t_rma_sizes, t_many_inflight,
		     t_wrong_key, t_after_mr_close, t_wrong_addressing,
		     t_dup_key, t_av_remove, t_dead_peer, t_wait_timeout,
		     t_close_inflight, t_close_mid_read, t_threads,
		     t_hmem_system_rma, t_serve_wake);
}

static Suite *fab_suite(bool with_shm)
{
	Suite *s = suite_create("fab");
	TCase *tc;

	tc = tcase_create("pure");
	TU_ADD_TESTS(tc, t_base_for_mode, t_errno, t_domain_bad_opts,
		     t_hmem_tcp);
	suite_add_tcase(s, tc);

	tc = tcase_create("rma");
	tcase_add_checked_fixture(tc, setup_rma, pair_close);
	tcase_set_timeout(tc, 120);
	add_rma_tests(tc);
	suite_add_tcase(s, tc);

	/* The target busy-polls after each wake-up (memd's busy_poll_us). */
	tc = tcase_create("rma-busy");
	tcase_add_checked_fixture(tc, setup_rma_busy, pair_close);
	tcase_set_timeout(tc, 120);
	TU_ADD_TESTS(tc, t_rma_sizes, t_many_inflight, t_threads,
		     t_serve_busy_counts);
	suite_add_tcase(s, tc);

	/*
	 * shm gets the data tests only. Its fast RMA path (libfabric 1.17,
	 * virtual addressing) copies with process_vm_readv/writev from the
	 * initiator: it checks no key (a closed MR stays readable), needs no
	 * target progress (nothing to pause), and reports a bad address as an
	 * error completion without a context, so the op never completes.
	 */
	if (with_shm) {
		tc = tcase_create("shm");
		tcase_add_checked_fixture(tc, setup_shm, pair_close);
		tcase_set_timeout(tc, 120);
		TU_ADD_TESTS(tc, t_mode, t_name_and_poll, t_rma_sizes,
			     t_many_inflight, t_threads);
		suite_add_tcase(s, tc);
	}
	return s;
}

int main(void)
{
	char why[256] = "";
	bool with_shm;

	if (!provider_works(rma_provider(), why, sizeof(why)))
		tu_skip("test_fab: libfabric %s provider unusable here: %s",
			rma_provider(), why);
	with_shm = provider_works("shm", why, sizeof(why));
	if (!with_shm)
		fprintf(stderr,
			"test_fab: skipping the shm cases: shm provider "
			"unusable here: %s\n",
			why);

	return tu_run_suite(fab_suite(with_shm));
}
