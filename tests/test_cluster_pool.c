// SPDX-License-Identifier: MIT
/*
 * tests/test_cluster_pool.c - libpool as a cluster client (docs/cluster.md,
 * "Client (libpool)"): a registry memd (r0, which donates too) and two
 * donor memds (d1, d2) on loopback, tenants added through ADMIN. Regions
 * are striped over donors and read back exactly; a replicated region
 * survives a donor SIGKILLed with exact reads, while a region without a
 * replica there fails with -ENOTCONN and regions elsewhere keep working;
 * quotas give -EDQUOT; a wrong secret is -EACCES. A client that sees a
 * donor killed and restarted again and again reaps the failed links (no
 * growth of links or threads); with a short pass_ttl a client renews its
 * donor pass and keeps allocating past several TTLs; a client whose
 * registry was SIGKILLed and restarted (same port and state_dir)
 * allocates again once it is back. A donor with another
 * FI_OFI_RXM_BUFFER_SIZE gives -EPROTO for its ranges over the fabric
 * while a replica elsewhere serves and its link lives on.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define SLAB (16ull << 20) /* testutil's memd slab size */

static struct tu_memd reg, don[2];
static char dir[64], cluster[256], sec_a[256], sec_b[256], sec_q[256];
static char state[128];
/* extra registry config of the running test case ("" or pass_ttl) */
static const char *reg_conf = "";

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/*
 * The usage reports the registry has taken from a donor: at points into
 * the donor's entry of an ADMIN "donors" reply, before its "reports" key.
 * -1 when at is NULL or no count follows.
 */
static long long reports_at(const char *at)
{
	at = at ? strstr(at, "\"reports\":") : NULL;
	return at ? strtoll(at + strlen("\"reports\":"), NULL, 10) : -1;
}

/*
 * Waits until the registry lists every name in names as up and has taken
 * a report from each: placement uses a donor only once it has reported
 * (memd/registry_place.c), a little after its join shows it up.
 */
static int wait_up(const char *const *names, int n)
{
	char out[16384];

	for (int i = 0; i < 1500; i++) {
		int ok = 0;

		if (!tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}", out,
			      sizeof(out)))
			for (int k = 0; k < n; k++) {
				char want[64];
				const char *at;

				snprintf(want, sizeof(want), "\"%s\"",
					 names[k]);
				at = strstr(out, want);
				ok += at &&
				      strstr(at, "\"state\":\"up\"") != NULL &&
				      reports_at(at) > 0;
			}
		if (ok == n)
			return 0;
		sleep_ms(20);
	}
	fprintf(stderr, "donors never came up: %s\n", out);
	return -ETIMEDOUT;
}

/*
 * Waits until the registry lists a donor at addr as up (a restarted
 * donor: its new incarnation, not the old one) and has taken a report
 * from it since: "up" comes with the join, and until the first report
 * that follows placement passes the donor over, so a region allocated
 * at once could never land there. The reports count is the donor
 * name's over its incarnations: one more than when the new one was
 * first seen up is one of the new one's.
 */
static int wait_up_at(const char *addr)
{
	char out[16384], want[128];
	long long seen = -1;

	snprintf(want, sizeof(want), "\"addr\":\"%s\",\"state\":\"up\"", addr);
	for (int i = 0; i < 1500; i++) {
		const char *at = NULL;

		if (!tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}", out,
			      sizeof(out)))
			at = strstr(out, want);
		if (at && seen < 0)
			seen = reports_at(at);
		else if (at && reports_at(at) > seen)
			return 0;
		sleep_ms(20);
	}
	fprintf(stderr, "donor at %s never came up and reported: %s\n", addr,
		out);
	return -ETIMEDOUT;
}

/* Threads of this process. */
static int nthreads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void start_donor(int i)
{
	char a1[300], a2[300], a3[64];
	const char *args[] = {
		"--set", NULL,	     "--set", NULL,    "--set",
		NULL,	 "--donate", "128M",  "--set", "report_interval=100ms",
		NULL
	};

	snprintf(a1, sizeof(a1), "registry=%s", reg.addr);
	snprintf(a2, sizeof(a2), "cluster_secret_file=%s", cluster);
	snprintf(a3, sizeof(a3), "donor_name=d%d", i + 1);
	args[1] = a1;
	args[3] = a2;
	args[5] = a3;
	ck_assert_int_eq(
		tu_memd_start_args(&don[i],
				   "lease_ttl = 2s\nlease_grace = 500ms", args),
		0);
}

/* Starts the registry (r0); listen: its address, or NULL for a new port. */
static int start_registry(const char *listen)
{
	const char *args[] = { "--set",	   "report_interval=100ms",
			       "--donate", "128M",
			       NULL,	   NULL,
			       NULL };
	char l[64], conf[256];

	if (listen) {
		snprintf(l, sizeof(l), "%s", listen);
		args[4] = "--listen";
		args[5] = l;
	}
	snprintf(conf, sizeof(conf), "lease_ttl = 2s\nlease_grace = 500ms\n%s",
		 reg_conf);
	return tu_registry_start(&reg, cluster, state, conf, args);
}

static void setup(void)
{
	static const char *const names[] = { "r0", "d1", "d2" };

	ck_assert_int_eq(tu_pool_dir_secrets(dir, sizeof(dir), "cpool", state,
					     sizeof(state), cluster, "a.secret",
					     sec_a, "b.secret", sec_b,
					     "q.secret", sec_q, NULL),
			 0);
	ck_assert_int_eq(start_registry(NULL), 0);
	start_donor(0);
	start_donor(1);
	ck_assert_int_eq(wait_up(names, 3), 0);
	ck_assert_int_eq(
		tu_tenant_add(reg.addr, cluster, "a", sec_a, 64 * SLAB), 0);
	ck_assert_int_eq(tu_tenant_add(reg.addr, cluster, "q", sec_q, 2 * SLAB),
			 0);
}

static void setup_short_pass(void)
{
	reg_conf = "pass_ttl = 10s";
	setup();
}

static void teardown(void)
{
	for (int i = 0; i < 2; i++)
		if (don[i].pid > 0)
			tu_memd_stop(&don[i], SIGTERM);
	tu_memd_stop(&reg, SIGTERM);
	tu_sh("rm -rf %s", dir);
}

static struct pool *connect_as(const char *tenant, const char *secret, int *err)
{
	struct pool_opts o = { .addr = reg.addr,
			       .tenant = tenant,
			       .secret_file = secret };
	struct pool *p = NULL;

	*err = pool_connect(&o, &p);
	return p;
}

/* Writes the pattern seed over all of r, in 1 MiB pieces. */
static void fill(struct pool *p, struct pool_region *r, uint64_t seed)
{
	size_t len = pool_region_size(r), step = 1 << 20;
	uint8_t *b = malloc(step);

	for (size_t off = 0; off < len; off += step) {
		size_t n = len - off < step ? len - off : step;

		tu_pattern_fill(b, n, seed, off);
		ck_assert_int_eq(pool_write(p, r, off, b, n), 0);
	}
	free(b);
}

/* Reads all of r back; 0 when every byte is seed's pattern, else the
 * first error. */
static int check(struct pool *p, struct pool_region *r, uint64_t seed)
{
	size_t len = pool_region_size(r), step = 1 << 20;
	uint8_t *b = malloc(step);
	int ret = 0;

	for (size_t off = 0; off < len && !ret; off += step) {
		size_t n = len - off < step ? len - off : step;

		memset(b, 0, n);
		ret = pool_read(p, r, off, b, n);
		if (!ret)
			ck_assert_int_eq(tu_pattern_check(b, n, seed, off), -1);
	}
	free(b);
	return ret;
}

/* Writes seed's pattern to the first and the last 64 KiB of r and reads
 * them back: 0, or the first error. Cheaper than fill + check where a
 * test does I/O many times (sanitizer builds). */
static int touch(struct pool *p, struct pool_region *r, uint64_t seed)
{
	size_t len = pool_region_size(r), n = 64 << 10;
	size_t at[2] = { 0, len > n ? len - n : 0 };
	uint8_t *b = malloc(n);
	int ret = 0;

	n = len < n ? len : n;
	for (int i = 0; i < 2 && !ret; i++) {
		tu_pattern_fill(b, n, seed, at[i]);
		ret = pool_write(p, r, at[i], b, n);
		memset(b, 0, n);
		if (!ret)
			ret = pool_read(p, r, at[i], b, n);
		if (!ret)
			ck_assert_int_eq(tu_pattern_check(b, n, seed, at[i]),
					 -1);
	}
	free(b);
	return ret;
}

/* Bitmask of copy `copy`'s donors over r's pieces (bit = donor id). */
static uint32_t donors_of(const struct pool_region *r, unsigned copy)
{
	uint32_t mask = 0, id;
	const char *addr;

	for (uint32_t i = 0; i < pool_region_nextents(r); i++)
		if (!pool_region_copy(r, i, copy, &id, &addr)) {
			ck_assert_uint_lt(id, 32);
			mask |= 1u << id;
		}
	return mask;
}

START_TEST(striped_regions_read_back_exactly)
{
	struct pool_region *big, *small;
	struct pool_stats st;
	struct pool *p;
	int err;

	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	ck_assert(pool_session_is_cluster(p));
	/* 6 slabs over 3 donors of 8: the registry spreads them. */
	ck_assert_int_eq(pool_alloc(p, 6 * SLAB - 12345, &big), 0);
	ck_assert_int_eq(pool_alloc(p, 3000, &small), 0);
	ck_assert_int_ge(__builtin_popcount(donors_of(big, 0)), 2);
	ck_assert_int_eq(donors_of(big, 1), 0);
	ck_assert_uint_ge(pool_session_nlinks(p), 2);
	fill(p, big, 11);
	fill(p, small, 12);
	ck_assert_int_eq(check(p, big, 11), 0);
	ck_assert_int_eq(check(p, small, 12), 0);
	ck_assert_int_eq(pool_get_stats(p, &st), 0);
	ck_assert_uint_eq(st.regions, 2);
	ck_assert_uint_eq(st.slab_bytes, SLAB);
	ck_assert_uint_ge(st.slabs_held, 7);
	ck_assert_int_eq(pool_free(p, big), 0);
	ck_assert_int_eq(pool_free(p, small), 0);
	pool_close(p);
}
END_TEST

START_TEST(status_asks_every_donor)
{
	struct pool_memd_status st[8];
	struct pool_region *big;
	uint32_t leased = 0, names = 0;
	struct pool *p;
	ssize_t n;
	int err;

	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	ck_assert_int_eq(pool_alloc(p, 6 * SLAB, &big), 0);
	n = pool_get_status(p, st, 8);
	ck_assert_int_eq(n, 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_msg(st[i].err == 0, "%s: %s", st[i].name,
			      pool_strerror(st[i].err));
		ck_assert_uint_eq(st[i].slab_bytes, SLAB);
		ck_assert_uint_ge(st[i].slabs_total, st[i].slabs_leased);
		ck_assert_uint_ne(st[i].epoch, 0);
		ck_assert_str_ne(st[i].addr, "");
		leased += st[i].slabs_leased;
		if (!strcmp(st[i].name, "r0"))
			names |= 1;
		else if (!strcmp(st[i].name, "d1"))
			names |= 2;
		else if (!strcmp(st[i].name, "d2"))
			names |= 4;
	}
	ck_assert_uint_eq(names, 7);
	ck_assert_uint_ge(leased, 6);
	/* fewer entries than donors: the count, the first max filled */
	ck_assert_int_eq(pool_get_status(p, st, 1), 3);
	ck_assert_int_eq(pool_get_status(p, NULL, 0), 3);
	/* a donor that is gone is reported, not an error of the call */
	tu_memd_stop(&don[1], SIGKILL);
	n = pool_get_status(p, st, 8);
	ck_assert_int_ge(n, 2);
	for (int i = 0; i < n; i++)
		if (!strcmp(st[i].name, "d2"))
			ck_assert_int_ne(st[i].err, 0);
	ck_assert_int_eq(pool_free(p, big), 0);
	pool_close(p);
}
END_TEST

START_TEST(replica_survives_a_killed_donor)
{
	struct pool_region *rep, *rsmall, *plain[4];
	uint32_t id, victim_id = 0;
	int err, victim = -1;
	const char *addr;
	struct pool *p;

	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	ck_assert_int_eq(
		pool_alloc_ex(p, 3 * SLAB, -1, POOL_ALLOC_REPLICA, &rep), 0);
	ck_assert_int_eq(
		pool_alloc_ex(p, 5000, -1, POOL_ALLOC_REPLICA, &rsmall), 0);
	/* Every piece has two copies, on different donors. */
	for (uint32_t i = 0; i < pool_region_nextents(rep); i++) {
		uint32_t a, b;

		ck_assert_int_eq(pool_region_copy(rep, i, 0, &a, &addr), 0);
		ck_assert_int_eq(pool_region_copy(rep, i, 1, &b, &addr), 0);
		ck_assert_uint_ne(a, b);
	}
	ck_assert_int_eq(pool_region_copy(rsmall, 0, 1, &id, &addr), 0);
	/* Plain regions of one slab each, until one sits on each donor. */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pool_alloc(p, SLAB, &plain[i]), 0);
	fill(p, rep, 21);
	fill(p, rsmall, 22);
	for (int i = 0; i < 4; i++)
		fill(p, plain[i], 30 + (uint64_t)i);

	/* The victim: a donor (not the registry) holding a copy of rep. */
	for (int k = 0; k < 2 && victim < 0; k++)
		for (uint32_t i = 0; i < pool_region_nextents(rep); i++)
			for (unsigned c = 0; c < 2; c++)
				if (!pool_region_copy(rep, i, c, &id, &addr) &&
				    !strcmp(addr, don[k].addr)) {
					victim = k;
					victim_id = id;
				}
	ck_assert_int_ge(victim, 0);
	ck_assert_int_eq(tu_memd_stop(&don[victim], SIGKILL) != 0, 1);
	don[victim].pid = 0;

	/* Replicated regions read back exactly, and take new bytes. */
	ck_assert_int_eq(check(p, rep, 21), 0);
	ck_assert_int_eq(check(p, rsmall, 22), 0);
	fill(p, rep, 23);
	ck_assert_int_eq(check(p, rep, 23), 0);
	/* Plain regions: on the victim -ENOTCONN, elsewhere exact. */
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(pool_region_copy(plain[i], 0, 0, &id, &addr),
				 0);
		if (id == victim_id)
			ck_assert_int_eq(check(p, plain[i], 30 + (uint64_t)i),
					 -ENOTCONN);
		else
			ck_assert_int_eq(check(p, plain[i], 30 + (uint64_t)i),
					 0);
	}
	/* New allocations go to donors that are up. */
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(pool_free(p, plain[i]), 0);
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB, &plain[0]), 0);
	ck_assert_uint_eq(donors_of(plain[0], 0) & (1u << victim_id), 0);
	fill(p, plain[0], 40);
	ck_assert_int_eq(check(p, plain[0], 40), 0);
	ck_assert_int_eq(pool_free(p, plain[0]), 0);
	ck_assert_int_eq(pool_free(p, rep), 0);
	ck_assert_int_eq(pool_free(p, rsmall), 0);
	pool_close(p);
}
END_TEST

START_TEST(quota_is_edquot)
{
	struct pool_region *r = NULL, *r2 = NULL;
	struct pool *p;
	int err;

	p = connect_as("q", sec_q, &err);
	ck_assert_int_eq(err, 0);
	ck_assert_int_eq(pool_alloc(p, 3 * SLAB, &r), -EDQUOT);
	ck_assert_ptr_null(r);
	/* Both copies count: 2 slabs with replicas are 4. */
	ck_assert_int_eq(pool_alloc_ex(p, 2 * SLAB, -1, POOL_ALLOC_REPLICA, &r),
			 -EDQUOT);
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB, &r), 0);
	ck_assert_int_eq(pool_alloc(p, 100, &r2), -EDQUOT);
	fill(p, r, 50);
	ck_assert_int_eq(check(p, r, 50), 0);
	ck_assert_int_eq(pool_free(p, r), 0);
	pool_close(p);
}
END_TEST

START_TEST(wrong_secret_and_no_tenant_are_eacces)
{
	struct pool_opts o = { .addr = reg.addr };
	struct pool *p = (void *)1;
	int err;

	p = connect_as("a", sec_b, &err); /* b's secret is not a's */
	ck_assert_int_eq(err, -EACCES);
	ck_assert_ptr_null(p);
	p = connect_as("nobody", sec_a, &err);
	ck_assert_int_eq(err, -EACCES);
	unsetenv("LIBPOOL_TENANT");
	ck_assert_int_eq(pool_connect(&o, &p), -EACCES);
	ck_assert_ptr_null(p);
	o.addr = don[0].addr; /* a donor wants authentication as well */
	ck_assert_int_eq(pool_connect(&o, &p), -EACCES);
	/* The pool still serves tenant a. */
	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	pool_close(p);
}
END_TEST

/* Allocates one-slab regions until one lands on the donor at addr; the
 * others are freed. NULL when none does in 8 tries (where they went,
 * and the registry's donors, on stderr). */
static struct pool_region *alloc_on(struct pool *p, const char *addr)
{
	struct pool_region *r[8], *hit = NULL;
	char went[8 * 64] = "", out[16384];
	int n = 0;

	for (; n < 8 && !hit; n++) {
		uint32_t id;
		const char *a;
		size_t l = strlen(went);

		ck_assert_int_eq(pool_alloc(p, SLAB, &r[n]), 0);
		ck_assert_int_eq(pool_region_copy(r[n], 0, 0, &id, &a), 0);
		if (!strcmp(a, addr))
			hit = r[n];
		snprintf(went + l, sizeof(went) - l, " %s", a);
	}
	if (!hit && !tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}", out,
			      sizeof(out)))
		fprintf(stderr, "no region on %s; they went to%s; donors: %s\n",
			addr, went, out);
	for (int i = 0; i < n; i++)
		if (r[i] != hit)
			ck_assert_int_eq(pool_free(p, r[i]), 0);
	return hit;
}

START_TEST(donor_restarts_do_not_grow_links)
{
	enum { ROUNDS = 5 };
	struct pool_region *r, *keep;
	int err, threads0, threads1;
	uint32_t links0, links1;
	struct pool *p;

	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	/* A region on d2 the whole time, and links to every donor. */
	keep = alloc_on(p, don[1].addr);
	ck_assert_ptr_nonnull(keep);
	fill(p, keep, 60);
	r = alloc_on(p, reg.addr);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(pool_free(p, r), 0);
	r = alloc_on(p, don[0].addr);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(pool_free(p, r), 0);
	links0 = pool_session_nlinks(p);
	threads0 = nthreads();
	ck_assert_uint_eq(links0, 3);

	for (int i = 0; i < ROUNDS; i++) {
		/* d1's incarnation i holds r; it dies; r fails there. */
		r = alloc_on(p, don[0].addr);
		ck_assert_ptr_nonnull(r);
		fill(p, r, 70 + (uint64_t)i);
		ck_assert_int_eq(check(p, r, 70 + (uint64_t)i), 0);
		ck_assert_int_ne(tu_memd_stop(&don[0], SIGKILL), 0);
		ck_assert_int_eq(check(p, r, 70 + (uint64_t)i), -ENOTCONN);
		ck_assert_int_eq(pool_free(p, r), 0);
		start_donor(0);
		ck_assert_int_eq(wait_up_at(don[0].addr), 0);
		ck_assert_int_eq(check(p, keep, 60), 0);
	}
	/* One more region on the last incarnation: a link to it, and the
	 * allocation reaps what the last free could not. */
	r = alloc_on(p, don[0].addr);
	ck_assert_ptr_nonnull(r);
	fill(p, r, 80);
	ck_assert_int_eq(check(p, r, 80), 0);
	ck_assert_int_eq(pool_free(p, r), 0);
	links1 = pool_session_nlinks(p);
	threads1 = nthreads();
	fprintf(stderr,
		"donor restarts: links %u -> %u (reaped %llu), threads %d -> "
		"%d\n",
		links0, links1,
		(unsigned long long)pool_session_links_reaped(p), threads0,
		threads1);
	/* Without reaping: links0 + ROUNDS. One failed link whose thread
	 * was still in its last heartbeat may be left for a later call. */
	ck_assert_uint_le(links1, links0 + 1);
	ck_assert_uint_ge(pool_session_links_reaped(p), ROUNDS - 1);
	ck_assert_int_le(threads1, threads0 + 1);
	ck_assert_int_eq(check(p, keep, 60), 0);
	ck_assert_int_eq(pool_free(p, keep), 0);
	pool_close(p);
}
END_TEST

START_TEST(pass_is_renewed_past_its_ttl)
{
	/* pass_ttl is 10 s here: a session of 3.5 passes' lifetimes (at
	 * least) that opens a session on a restarted donor every 8 s, four
	 * times. Donors accept a pass up to 60 s past its end (clock skew),
	 * so what the pass had left when the session opened the new donor
	 * session is what shows a renewal that did not happen. */
	struct pool_region *keep, *r;
	int err, victim;
	uint32_t id;
	const char *a;
	struct pool *p;
	time_t t0, last;
	int restarts = 0;

	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	ck_assert_int_gt(pool_session_pass_left_ms(p, false), 5000);
	ck_assert_int_le(pool_session_pass_left_ms(p, false), 10000);
	ck_assert_int_eq(pool_alloc(p, SLAB, &keep), 0);
	ck_assert_int_eq(pool_region_copy(keep, 0, 0, &id, &a), 0);
	victim = strcmp(a, don[0].addr) ? 0 : 1; /* not keep's donor */
	t0 = last = time(NULL);
	for (int round = 0; restarts < 4 || time(NULL) - t0 < 35; round++) {
		if (time(NULL) - last >= 8) {
			/* a new incarnation: a new session, with the pass */
			ck_assert_int_ne(tu_memd_stop(&don[victim], SIGKILL),
					 0);
			start_donor(victim);
			ck_assert_int_eq(wait_up_at(don[victim].addr), 0);
			r = alloc_on(p, don[victim].addr);
			ck_assert_ptr_nonnull(r);
			ck_assert_int_gt(pool_session_pass_left_ms(p, true), 0);
			last = time(NULL);
			restarts++;
		} else {
			ck_assert_int_eq(pool_alloc(p, 3 * SLAB / 2, &r), 0);
		}
		ck_assert_int_eq(touch(p, r, 100 + (uint64_t)round), 0);
		ck_assert_int_eq(pool_free(p, r), 0);
		ck_assert_int_eq(touch(p, keep, 90 + (uint64_t)round), 0);
		sleep_ms(1000);
	}
	ck_assert_int_eq(pool_free(p, keep), 0);
	pool_close(p);
}
END_TEST

START_TEST(client_reconnects_to_a_restarted_registry)
{
	struct pool_region *r[3], *fresh = NULL;
	char addr[64];
	struct pool *p;
	int err = 0;

	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	/* One slab on each donor (r0 dies with the registry). */
	r[0] = alloc_on(p, don[0].addr);
	r[1] = alloc_on(p, don[1].addr);
	r[2] = alloc_on(p, reg.addr);
	for (int i = 0; i < 3; i++) {
		ck_assert_ptr_nonnull(r[i]);
		fill(p, r[i], 110 + (uint64_t)i);
	}
	snprintf(addr, sizeof(addr), "%s", reg.addr);
	ck_assert_int_ne(tu_memd_stop(&reg, SIGKILL), 0);
	/* The registry is not on the data path. */
	ck_assert_int_eq(check(p, r[0], 110), 0);
	ck_assert_int_eq(check(p, r[1], 111), 0);
	err = pool_alloc(p, SLAB, &fresh);
	ck_assert_msg(err < 0, "pool_alloc without a registry: %d", err);
	ck_assert_ptr_null(fresh);
	ck_assert_int_eq(start_registry(addr), 0);
	ck_assert_str_eq(reg.addr, addr);
	/* Until the donors have rejoined the new incarnation there is no
	 * room (ENOSPC); then the same session allocates again. */
	for (int i = 0; i < 300; i++) {
		err = pool_alloc(p, 2 * SLAB, &fresh);
		if (err != -ENOSPC)
			break;
		sleep_ms(100);
	}
	ck_assert_int_eq(err, 0);
	fill(p, fresh, 120);
	ck_assert_int_eq(check(p, fresh, 120), 0);
	ck_assert_int_eq(check(p, r[0], 110), 0);
	ck_assert_int_eq(check(p, r[1], 111), 0);
	ck_assert_int_eq(check(p, r[2], 112), -ENOTCONN);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pool_free(p, r[i]), 0);
	ck_assert_int_eq(pool_free(p, fresh), 0);
	pool_close(p);
}
END_TEST

/* The "since_unix_ms" of donor name in a donors reply, or -1. */
/* Whether the first copy (the one reads go to) of some piece of r sits
 * on the donor at addr. */
static bool primary_on(const struct pool_region *r, const char *addr)
{
	uint32_t id;
	const char *a;

	for (uint32_t e = 0; e < pool_region_nextents(r); e++)
		if (!pool_region_copy(r, e, 0, &id, &a) && !strcmp(a, addr))
			return true;
	return false;
}

/*
 * A donor whose FI_OFI_RXM_BUFFER_SIZE differs from the client's (an
 * older memd beside a newer client, docs/protocol.md, FABRIC): over the
 * fabric, the client's transfers to that donor fail at once with
 * -EPROTO while the other donors serve it, a replicated region with a
 * copy there writes and reads through its other copy, and the
 * same-host path, which needs no fabric, reaches the donor as before.
 */
START_TEST(rxm_mismatch_on_one_donor)
{
	static const char *const names[] = { "r0", "d1", "d2" };
	struct pool_region *bad, *good, *rep = NULL;
	const char *had = getenv("FI_OFI_RXM_BUFFER_SIZE");
	int err;
	struct pool *p;
	uint8_t b[4096];

	ck_assert_ptr_null(had);
	tu_memd_stop(&don[1], SIGTERM);
	setenv("FI_OFI_RXM_BUFFER_SIZE", "16384", 1);
	start_donor(1);
	unsetenv("FI_OFI_RXM_BUFFER_SIZE");
	ck_assert_int_eq(wait_up_at(don[1].addr), 0);
	ck_assert_int_eq(wait_up(names, 3), 0);

	setenv("LIBPOOL_SHM", "off", 1);
	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	bad = alloc_on(p, don[1].addr);
	good = alloc_on(p, don[0].addr);
	ck_assert_ptr_nonnull(bad);
	ck_assert_ptr_nonnull(good);
	memset(b, 7, sizeof(b));
	ck_assert_int_eq(pool_write(p, bad, 0, b, sizeof(b)), -EPROTO);
	ck_assert_int_eq(pool_read(p, bad, 0, b, sizeof(b)), -EPROTO);
	ck_assert_int_eq(touch(p, good, 51), 0);
	/* A replicated region whose reads would go to d2 first. */
	for (int i = 0; i < 16 && !rep; i++) {
		ck_assert_int_eq(pool_alloc_ex(p, 2 * SLAB, -1,
					       POOL_ALLOC_REPLICA, &rep),
				 0);
		if (!primary_on(rep, don[1].addr)) {
			ck_assert_int_eq(pool_free(p, rep), 0);
			rep = NULL;
		}
	}
	ck_assert_ptr_nonnull(rep);
	fill(p, rep, 52);
	ck_assert_int_eq(check(p, rep, 52), 0);
	ck_assert_int_eq(pool_free(p, rep), 0);
	/* ... without ending the link to d2: still EPROTO, not ENOTCONN */
	ck_assert_int_eq(pool_read(p, bad, 0, b, sizeof(b)), -EPROTO);
	ck_assert_int_eq(pool_free(p, bad), 0);
	ck_assert_int_eq(pool_free(p, good), 0);
	pool_close(p);

	/* The same-host path reaches d2 without its fabric. */
	setenv("LIBPOOL_SHM", "auto", 1);
	p = connect_as("a", sec_a, &err);
	ck_assert_int_eq(err, 0);
	bad = alloc_on(p, don[1].addr);
	ck_assert_ptr_nonnull(bad);
	ck_assert_int_eq(touch(p, bad, 53), 0);
	ck_assert_int_eq(pool_free(p, bad), 0);
	pool_close(p);
	unsetenv("LIBPOOL_SHM");
}
END_TEST

static long long donor_since(const char *json, const char *name)
{
	char want[64];
	const char *at;

	snprintf(want, sizeof(want), "\"name\":\"%s\"", name);
	at = strstr(json, want);
	at = at ? strstr(at, "\"since_unix_ms\":") : NULL;
	return at ? strtoll(at + strlen("\"since_unix_ms\":"), NULL, 10) : -1;
}

/*
 * A registry that does not run for a while (SIGSTOP here; a paused VM or
 * a swap storm in life) did not hear its donors because it did not
 * listen: on resuming it must read the reports that waited meanwhile
 * instead of marking every donor down at once (found by the chaos run,
 * tests/chaos: "no report for 5843 ms" for all donors in one millisecond,
 * then all joining again).
 */
START_TEST(stalled_registry_keeps_its_donors_up)
{
	static const char *const names[] = { "r0", "d1", "d2" };
	static char before[16384], after[16384];

	ck_assert_int_eq(tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}",
				  before, sizeof(before)),
			 0);
	ck_assert_int_eq(kill(reg.pid, SIGSTOP), 0);
	sleep_ms(1500); /* 15 report intervals */
	ck_assert_int_eq(kill(reg.pid, SIGCONT), 0);
	sleep_ms(500);
	ck_assert_int_eq(wait_up(names, 3), 0);
	ck_assert_int_eq(tu_admin(reg.addr, cluster, "{\"cmd\":\"donors\"}",
				  after, sizeof(after)),
			 0);
	for (int i = 0; i < 3; i++) {
		long long a = donor_since(before, names[i]),
			  b = donor_since(after, names[i]);

		ck_assert_msg(a > 0 && a == b,
			      "donor %s changed state during the registry's "
			      "stall (since %lld -> %lld): %s",
			      names[i], a, b, after);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cluster_pool");
	TCase *tc = tu_tcase(s, "cluster", 120);
	TCase *tp = tu_tcase(s, "short_pass", 0);

	tu_need_memd();
	tcase_add_checked_fixture(tc, setup, teardown);
	TU_ADD_TESTS(tc, striped_regions_read_back_exactly,
		     status_asks_every_donor, replica_survives_a_killed_donor,
		     quota_is_edquot, wrong_secret_and_no_tenant_are_eacces,
		     donor_restarts_do_not_grow_links,
		     client_reconnects_to_a_restarted_registry,
		     stalled_registry_keeps_its_donors_up,
		     rxm_mismatch_on_one_donor);
	tcase_set_timeout(tp, 300); /* 35 s or more by design */
	tcase_add_checked_fixture(tp, setup_short_pass, teardown);
	tcase_add_test(tp, pass_is_renewed_past_its_ttl);
	return tu_run_suite(s);
}
