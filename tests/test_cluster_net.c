// SPDX-License-Identifier: MIT
/*
 * tests/test_cluster_net.c - one pool over several hosts (docs/cluster.md),
 * each host its own network namespace on a bridge (tests/testutil.h
 * tu_net_*): a registry, three donors and a client.
 *
 * One scenario, in order, as an operator would live it:
 *   striped regions read back exactly; quota exhaustion is EDQUOT; a
 *   donor SIGKILLed: its ranges fail, a replica serves, the rest of the
 *   pool keeps serving, the registry marks it down; it restarts and
 *   rejoins with a new epoch; the registry SIGKILLed and restarted:
 *   quotas intact, usage equal to what donors report, regions readable
 *   throughout; an iptables partition between the client and a donor
 *   heals without any slab granted twice.
 *
 * Needs root (namespaces, veth, iptables): skips with 77 otherwise.
 */
#include <check.h>

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fabric/auth.h"
#include "libpool/internal.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define SLAB (16ull << 20)
#define REG 0 /* host numbers */
#define CLIENT 4
#define NDONORS 3

static struct tu_net net;
static struct tu_memd reg, donor[NDONORS + 1];
static char dir[64], cluster[256], sec_a[256], sec_b[256], state[300];
static char regaddr[64];

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static int start_registry(void)
{
	char a1[300], a2[400], listen[64];
	const char *args[] = {
		"--listen",	 listen,  "--set",
		"registry=yes",	 "--set", a1,
		"--set",	 a2,	  "--set",
		"donor_name=r0", "--set", "report_interval=200ms",
		"--donate",	 "64M",	  NULL
	};

	snprintf(listen, sizeof(listen), "%s:7470", net.ip[REG]);
	snprintf(a1, sizeof(a1), "cluster_secret_file=%s", cluster);
	snprintf(a2, sizeof(a2), "state_dir=%s", state);
	return tu_memd_start_ns(&reg, net.ns[REG], net.ip[REG],
				"lease_ttl = 3s\n"
				"lease_grace = 1s",
				args);
}

static int start_donor(int i)
{
	char a1[300], a2[128], a3[64];
	const char *args[] = {
		"--set",    a2,	    "--set", a1,
		"--set",    a3,	    "--set", "report_interval=200ms",
		"--donate", "160M", NULL
	};

	snprintf(a2, sizeof(a2), "registry=%s", regaddr);
	snprintf(a1, sizeof(a1), "cluster_secret_file=%s", cluster);
	snprintf(a3, sizeof(a3), "donor_name=d%d", i);
	return tu_memd_start_ns(&donor[i], net.ns[i], net.ip[i],
				"lease_ttl = 3s\n"
				"lease_grace = 1s",
				args);
}

/* The registry's donors JSON, parsed (caller decrefs), or NULL. */
static json_t *donors(void)
{
	static char out[65536];

	if (tu_admin(regaddr, cluster, "{\"cmd\":\"donors\"}", out,
		     sizeof(out)))
		return NULL;
	return json_loads(out, 0, NULL);
}

/* The donor entry called name (borrowed from root), or NULL. */
static json_t *donor_entry(json_t *root, const char *name)
{
	size_t i;
	json_t *d;

	json_array_foreach(
		json_object_get(root, "donors"), i,
		d) if (!strcmp(json_string_value(json_object_get(d, "name")),
			       name)) return d;
	return NULL;
}

/* Waits until donor name is in state (and, if epoch != 0, has another
 * epoch than that). Returns its epoch. */
static const char *wait_state(const char *name, const char *st,
			      const char *not_epoch)
{
	static char epoch[40];

	for (int i = 0; i < 1500; i++) {
		json_t *root = donors(),
		       *d = root ? donor_entry(root, name) : NULL;
		const char *s =
			d ? json_string_value(json_object_get(d, "state"))
			  : NULL;
		const char *e =
			d ? json_string_value(json_object_get(d, "epoch"))
			  : NULL;

		if (s && !strcmp(s, st) && e &&
		    (!not_epoch || strcmp(e, not_epoch))) {
			snprintf(epoch, sizeof(epoch), "%s", e);
			json_decref(root);
			return epoch;
		}
		json_decref(root);
		sleep_ms(20);
	}
	ck_abort_msg("donor %s never reached state %s", name, st);
	return NULL;
}

static struct pool *connect_tenant(const char *name, const char *secret)
{
	/* 20 s: sanitizer builds are slow */
	return tu_pool_connect_as(regaddr, name, secret, 20000);
}

static void write_pattern(struct pool *p, struct pool_region *r, uint64_t seed)
{
	size_t len = pool_region_size(r);
	uint8_t *b = malloc(len);

	tu_pattern_fill(b, len, seed, 0);
	ck_assert_int_eq(pool_write(p, r, 0, b, len), 0);
	free(b);
}

/* Reads r slab by slab: returns how many slab-sized pieces failed (with
 * -ENOTCONN); every piece that succeeds must be exact. */
static int read_pieces(struct pool *p, struct pool_region *r, uint64_t seed)
{
	size_t len = pool_region_size(r);
	uint8_t *b = malloc(SLAB);
	int failed = 0;

	for (uint64_t off = 0; off < len; off += SLAB) {
		size_t n = len - off < SLAB ? len - off : SLAB;
		int e = pool_read(p, r, off, b, n);

		if (e) {
			ck_assert_msg(e == -ENOTCONN, "read at %llu: %s",
				      (unsigned long long)off,
				      pool_strerror(e));
			failed++;
			continue;
		}
		ck_assert_msg(tu_pattern_check(b, n, seed, off) < 0,
			      "wrong byte in piece at %llu",
			      (unsigned long long)off);
	}
	free(b);
	return failed;
}

/* Leases of tenant id on a donor, from its own memd; -1 on failure. Fails
 * the test if a slab appears twice. */
static int donor_leases(const char *addr, json_int_t tenant_id)
{
	static char out[65536];
	char seen[4096] = { 0 };
	json_t *root, *l;
	size_t i;
	int n = 0;

	if (tu_admin(addr, cluster, "{\"cmd\":\"leases\"}", out, sizeof(out)))
		return -1;
	root = json_loads(out, 0, NULL);
	ck_assert_ptr_nonnull(root);
	json_array_foreach(json_object_get(root, "leases"), i, l)
	{
		json_int_t slab =
			json_integer_value(json_object_get(l, "slab"));

		ck_assert(slab >= 0 && slab < 4096);
		ck_assert_msg(!seen[slab], "slab %lld leased twice on %s",
			      (long long)slab, addr);
		seen[slab] = 1;
		if (json_integer_value(json_object_get(l, "tenant_id")) ==
		    tenant_id)
			n++;
	}
	json_decref(root);
	return n;
}

static json_int_t tenant_id(const char *name)
{
	static char out[8192];
	json_t *root, *t;
	json_int_t id = -1;
	size_t i;

	ck_assert_int_eq(tu_admin(regaddr, cluster, "{\"cmd\":\"tenants\"}",
				  out, sizeof(out)),
			 0);
	root = json_loads(out, 0, NULL);
	json_array_foreach(
		json_object_get(root, "tenants"), i,
		t) if (!strcmp(json_string_value(json_object_get(t, "name")),
			       name)) id =
		json_integer_value(json_object_get(t, "id"));
	json_decref(root);
	return id;
}

static json_int_t tenant_field(const char *name, const char *field)
{
	static char out[8192];
	json_t *root, *t;
	json_int_t v = -1;
	size_t i;

	if (tu_admin(regaddr, cluster, "{\"cmd\":\"tenants\"}", out,
		     sizeof(out)))
		return -1;
	root = json_loads(out, 0, NULL);
	json_array_foreach(
		json_object_get(root, "tenants"), i,
		t) if (!strcmp(json_string_value(json_object_get(t, "name")),
			       name)) v =
		json_integer_value(json_object_get(t, field));
	json_decref(root);
	return v;
}

static const char *donor_addr(int i)
{
	return donor[i].addr;
}

/* Slabs of r (whole-slab pieces) whose primary copy is on the donor at
 * addr. */
static int pieces_at(const struct pool_region *r, const char *addr)
{
	const char *a;
	uint32_t id;
	int n = 0;

	for (uint32_t i = 0; i < pool_region_nextents(r); i++)
		if (!pool_region_copy(r, i, 0, &id, &a) && !strcmp(a, addr))
			n++;
	return n;
}

START_TEST(pool_over_namespaces)
{
	struct pool_region *striped, *repl, *plain, *more, *rb;
	struct pool *pa, *pb;
	int plain_on_d1;
	json_int_t ida;
	const char *e1;
	char old_e1[40];
	int failed, total;
	char j[256];

	/* The client lives on host CLIENT from here on. */
	ck_assert_int_eq(tu_net_enter(&net, CLIENT), 0);
	for (int i = 1; i <= NDONORS; i++) {
		char name[8];

		snprintf(name, sizeof(name), "d%d", i);
		wait_state(name, "up", NULL);
	}
	wait_state("r0", "up", NULL);
	/* The registry's own donation stays out of the way: drain it. */
	ck_assert_int_eq(tu_admin(regaddr, cluster,
				  "{\"cmd\":\"drain\",\"donor\":\"r0\","
				  "\"drain\":true}",
				  j, sizeof(j)),
			 0);
	ck_assert_int_eq(tu_tenant_add(regaddr, cluster, "a", sec_a, 40 * SLAB),
			 0);
	ck_assert_int_eq(tu_tenant_add(regaddr, cluster, "b", sec_b, 4 * SLAB),
			 0);
	ida = tenant_id("a");

	/* Striping: 6 slabs spread 2/2/2 over three equal donors. */
	pa = connect_tenant("a", sec_a);
	ck_assert_int_eq(pool_alloc(pa, 6 * SLAB, &striped), 0);
	write_pattern(pa, striped, 1);
	ck_assert_int_eq(read_pieces(pa, striped, 1), 0);
	for (int i = 1; i <= NDONORS; i++)
		ck_assert_int_eq(donor_leases(donor_addr(i), ida), 2);

	/* Quota: b has 4 slabs. */
	pb = connect_tenant("b", sec_b);
	ck_assert_int_eq(pool_alloc(pb, 4 * SLAB, &rb), 0);
	ck_assert_int_eq(pool_alloc(pb, SLAB, &more), -EDQUOT);

	/* A replicated region and a plain one over all donors. */
	ck_assert_int_eq(
		pool_alloc_ex(pa, 3 * SLAB, -1, POOL_ALLOC_REPLICA, &repl), 0);
	write_pattern(pa, repl, 2);
	ck_assert_int_eq(pool_alloc(pa, 3 * SLAB, &plain), 0);
	write_pattern(pa, plain, 3);

	/* Placement fills the donors with the most free slabs first, and
	 * what each has free depends on when its last report came: count
	 * where the plain region's slabs went rather than assume 1/1/1. */
	ck_assert_int_eq(pieces_at(striped, donor_addr(1)), 2); /* as seen */
	plain_on_d1 = pieces_at(plain, donor_addr(1));
	ck_assert_int_eq(pool_region_nextents(plain), 3);

	/* Donor 1 dies. */
	snprintf(old_e1, sizeof(old_e1), "%s", wait_state("d1", "up", NULL));
	tu_memd_stop(&donor[1], SIGKILL);
	wait_state("d1", "down", NULL);
	ck_assert_int_eq(read_pieces(pa, repl, 2), 0); /* replicas serve */
	/* Exactly the pieces on d1 fail: 2 of the striped region (2 per
	 * donor, checked above) and those of the plain one placed there. */
	failed = read_pieces(pa, striped, 1);
	ck_assert_int_eq(failed, 2);
	failed = read_pieces(pa, plain, 3);
	ck_assert_int_eq(failed, plain_on_d1);
	/* The rest of the pool keeps serving new allocations. */
	ck_assert_int_eq(pool_alloc(pa, 2 * SLAB, &more), 0);
	write_pattern(pa, more, 4);
	ck_assert_int_eq(read_pieces(pa, more, 4), 0);
	/* Writes to the replicated region go on to the live copy. */
	write_pattern(pa, repl, 5);
	ck_assert_int_eq(read_pieces(pa, repl, 5), 0);

	/* It comes back with a new epoch. */
	ck_assert_int_eq(start_donor(1), 0);
	e1 = wait_state("d1", "up", old_e1);
	ck_assert_str_ne(e1, old_e1);

	/* The registry dies: regions stay readable and writable. */
	tu_memd_stop(&reg, SIGKILL);
	ck_assert_int_eq(read_pieces(pa, repl, 5), 0);
	ck_assert_int_eq(read_pieces(pa, more, 4), 0);
	write_pattern(pa, more, 6);
	ck_assert_int_eq(read_pieces(pa, more, 6), 0);
	sleep_ms(1500); /* more than a heartbeat period of the donors */
	ck_assert_int_eq(read_pieces(pa, more, 6), 0);
	ck_assert_int_eq(start_registry(), 0);
	for (int i = 1; i <= NDONORS; i++) {
		char name[8];

		snprintf(name, sizeof(name), "d%d", i);
		wait_state(name, "up", NULL);
	}
	/* Quotas are durable. */
	ck_assert_int_eq(tenant_field("a", "quota_bytes"), 40 * SLAB);
	ck_assert_int_eq(tenant_field("b", "quota_bytes"), 4 * SLAB);
	/* Usage is what donors report. */
	for (int tries = 0;; tries++) {
		total = 0;
		for (int i = 1; i <= NDONORS; i++)
			total += donor_leases(donor_addr(i), ida);
		if (tenant_field("a", "used_bytes") ==
		    (json_int_t)(total * SLAB))
			break;
		ck_assert_msg(
			tries < 200, "registry usage %lld != donors' %d slabs",
			(long long)tenant_field("a", "used_bytes"), total);
		sleep_ms(50);
	}

	/* A partition between the client and donor 2, longer than the lease
	 * TTL + grace: the client's leases there die, d2 reclaims them, and
	 * after the heal nothing is granted twice. */
	ck_assert_int_eq(tu_net_partition(&net, CLIENT, 2, true), 0);
	sleep_ms(6000);
	ck_assert_int_eq(tu_net_partition(&net, CLIENT, 2, false), 0);
	/* What lived on d2 is gone for this session (errors, never bytes);
	 * a replicated slab whose other copy was on d1, killed before, is
	 * gone too: two losses are more than one replica covers. */
	failed = read_pieces(pa, more, 6);
	ck_assert_int_le(failed, 2);
	ck_assert_int_le(read_pieces(pa, repl, 5), 3);
	ck_assert_int_ge(donor_leases(donor_addr(2), ida), 0);
	ck_assert_int_eq(pool_alloc(pa, 3 * SLAB, &more), 0);
	write_pattern(pa, more, 7);
	ck_assert_int_eq(read_pieces(pa, more, 7), 0);
	for (int i = 1; i <= NDONORS; i++)
		ck_assert_int_ge(donor_leases(donor_addr(i), ida), 0);

	pool_close(pa);
	pool_close(pb);
}
END_TEST

static void setup(void)
{
	int r;

	auth_init();
	r = tu_net_create(&net, 5);
	if (r == -EPERM)
		tu_skip("needs root for network namespaces");
	if (r)
		tu_skip("network namespaces, veth or bridges unavailable: %s",
			strerror(-r));
	if (tu_pool_dir(dir, sizeof(dir), "cnet", state, sizeof(state),
			cluster) ||
	    tu_secret_file(dir, "a.secret", sec_a) ||
	    tu_secret_file(dir, "b.secret", sec_b))
		abort();
	snprintf(regaddr, sizeof(regaddr), "%s:7470", net.ip[REG]);
	if (start_registry())
		abort();
	for (int i = 1; i <= NDONORS; i++)
		if (start_donor(i))
			abort();
}

static void teardown(void)
{
	for (int i = 1; i <= NDONORS; i++)
		tu_memd_stop(&donor[i], SIGKILL);
	tu_memd_stop(&reg, SIGKILL);
	tu_net_destroy(&net);
	tu_sh("rm -rf %s", dir);
}

int main(void)
{
	Suite *s = suite_create("cluster_net");
	TCase *tc = tu_tcase(s, "net", 300);
	int failed;

	tu_need_memd();
	if (geteuid() != 0)
		tu_skip("needs root for network namespaces");
	setup();
	tcase_add_test(tc, pool_over_namespaces);
	failed = tu_run_suite(s);
	teardown();
	return failed;
}
