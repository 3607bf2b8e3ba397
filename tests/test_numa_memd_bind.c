// SPDX-License-Identifier: MIT
/*
 * tests/test_numa_memd_bind.c - memd serving two real NUMA nodes: each
 * arena's pages are bound to and present on its own node (read from the
 * kernel's /proc/PID/numa_maps), each node has its own endpoint, a region
 * asked on a node is on that node and its bytes come back exact through
 * that node's endpoint, "any" fills the fullest node first, and memd's
 * progress threads run on their node's CPUs.
 *
 * Needs a host with at least two NUMA nodes (both with memory and CPUs
 * usable by this process); elsewhere it exits 77 saying why. It is its
 * own executable so that skip never hides tests/test_numa_memd.c.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "numa/place.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define MiB (1024u * 1024u)
#define SLAB (16 * MiB) /* testutil's memd: 256M donated, 16M slabs */
#define PER_NODE 8

static struct tu_memd md;
static struct place_topo *topo;
static int n0, n1; /* the two nodes under test */

/*
 * What the kernel says about pid's memory with policy "bind:NODE"
 * (/proc/PID/numa_maps, sizes from /proc/PID/maps): how many bytes of
 * mappings carry it, how many of their pages are present on the node,
 * and how many are present anywhere else (which MPOL_BIND forbids).
 */
struct bound {
	uint64_t mapped, on_node, elsewhere;
};

static uint64_t vma_bytes(pid_t pid, unsigned long long start)
{
	char path[64], line[512];
	unsigned long long a, b;
	uint64_t len = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	ck_assert_msg(f, "cannot read %s", path);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%llx-%llx", &a, &b) == 2 && a == start)
			len = b - a;
	fclose(f);
	return len;
}

static struct bound bound_to(pid_t pid, int node)
{
	char path[64], line[4096], policy[32];
	struct bound r = { 0, 0, 0 };
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/numa_maps", (int)pid);
	f = fopen(path, "r");
	ck_assert_msg(f, "cannot read %s", path);
	snprintf(policy, sizeof(policy), "bind:%d", node);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long start, kib = 4;
		const char *k = strstr(line, "kernelpagesize_kB=");
		char pol[64], *tok, *save = NULL;

		/* "7f0f95c00000 bind:0 anon=... N0=..." (no pages: no more) */
		if (sscanf(line, "%llx %63s", &start, pol) != 2 ||
		    strcmp(pol, policy))
			continue;
		if (k)
			kib = strtoull(k + 18, NULL, 10);
		r.mapped += vma_bytes(pid, start);
		for (tok = strtok_r(line, " \n", &save); tok;
		     tok = strtok_r(NULL, " \n", &save)) {
			int n;
			unsigned long long pages;

			if (sscanf(tok, "N%d=%llu", &n, &pages) != 2)
				continue;
			if (n == node)
				r.on_node += pages * kib * 1024;
			else
				r.elsewhere += pages * kib * 1024;
		}
	}
	fclose(f);
	return r;
}

/*
 * memd's arena for node: bound to it in full, nothing of it elsewhere,
 * and (mlock prefaults) all of it present there. The sanitizers' mlock is
 * a no-op, so under ASan and TSan only what was touched is present.
 */
static void assert_arena_on(pid_t pid, int node, uint64_t bytes)
{
	struct bound b = bound_to(pid, node);

	ck_assert_msg(
		b.mapped >= bytes, "%llu bytes bound to node %d, want %llu",
		(unsigned long long)b.mapped, node, (unsigned long long)bytes);
	ck_assert_uint_eq(b.elsewhere, 0);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
	ck_assert_msg(
		b.on_node >= bytes, "%llu bytes present on node %d, want %llu",
		(unsigned long long)b.on_node, node, (unsigned long long)bytes);
#endif
}

/* The CPUs thread `name` of pid may run on are all on node. */
static bool thread_on_node(pid_t pid, const char *name, int node)
{
	char path[300], comm[64];
	bool found = false, ok = true;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		char line[4096];
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid,
			 de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		fclose(f);
		comm[strcspn(comm, "\n")] = '\0';
		if (strcmp(comm, name))
			continue;
		found = true;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status",
			 (int)pid, de->d_name);
		f = fopen(path, "r");
		ck_assert_ptr_nonnull(f);
		while (fgets(line, sizeof(line), f)) {
			char *list;

			if (strncmp(line, "Cpus_allowed_list:", 18))
				continue;
			/* every CPU of the list must be on node */
			for (list = strtok(line + 18, ", \t\n"); list;
			     list = strtok(NULL, ", \t\n")) {
				int a, b;

				if (sscanf(list, "%d-%d", &a, &b) != 2)
					b = a = atoi(list);
				for (int c = a; c <= b; c++)
					if (place_cpu_node(topo, c) != node)
						ok = false;
			}
		}
		fclose(f);
	}
	closedir(d);
	return found && ok;
}

static void write_read_check(struct pool *p, struct pool_region *r,
			     uint64_t off, size_t len, uint64_t seed)
{
	uint8_t *w = malloc(len), *b = malloc(len);

	ck_assert_ptr_nonnull(w);
	ck_assert_ptr_nonnull(b);
	tu_pattern_fill(w, len, seed, off);
	ck_assert_int_eq(pool_write(p, r, off, w, len), 0);
	memset(b, 0, len);
	ck_assert_int_eq(pool_read(p, r, off, b, len), 0);
	ck_assert_int_eq(tu_pattern_check(b, len, seed, off), -1);
	free(w);
	free(b);
}

START_TEST(two_nodes_two_arenas_two_endpoints)
{
	char conf[64];
	struct wire_msg req = { .type = WIRE_HELLO }, rep;
	struct pool_opts o = { .timeout_ms = 5000 };
	struct pool_region *r0, *r1, *any;
	struct rpc *c;
	struct pool *p;
	struct wire_lease l;
	uint64_t off, len;

	snprintf(conf, sizeof(conf), "numa_nodes = %d,%d", n0, n1);
	ck_assert_int_eq(tu_memd_start(&md, conf), 0);

	/* The kernel's view: each half bound to and present on its node. */
	assert_arena_on(md.pid, n0, PER_NODE * (uint64_t)SLAB);
	assert_arena_on(md.pid, n1, PER_NODE * (uint64_t)SLAB);
	ck_assert(thread_on_node(md.pid, "memd-fab0", n0));
	ck_assert(thread_on_node(md.pid, "memd-fab1", n1));

	ck_assert_int_eq(rpc_connect(md.addr, 5000, &c, NULL, 0), 0);
	req.u.hello.proto_min = req.u.hello.proto_max = WIRE_PROTO_MAX;
	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_HELLO_OK, 5000, NULL, 0),
			 0);
	ck_assert_int_eq(rep.u.hello_ok.nendpoints, 2);
	ck_assert_int_eq(rep.u.hello_ok.ep[0].node, n0);
	ck_assert_int_eq(rep.u.hello_ok.ep[1].node, n1);
	rpc_close(c);

	o.addr = md.addr;
	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_alloc_node(p, 3 * SLAB, n1, &r1), 0);
	ck_assert_int_eq(pool_region_node(r1), n1);
	for (uint32_t i = 0; i < pool_region_nextents(r1); i++) {
		ck_assert_int_eq(pool_region_extent(r1, i, &l, &off, &len), 0);
		ck_assert_int_eq(l.node, n1);
		ck_assert_int_eq(l.endpoint, 1);
		ck_assert_uint_ge(l.slab, PER_NODE);
	}
	ck_assert_int_eq(pool_alloc_node(p, SLAB, n0, &r0), 0);
	ck_assert_int_eq(pool_region_node(r0), n0);
	write_read_check(p, r1, SLAB - 5, 2 * SLAB, 1);
	write_read_check(p, r0, 0, SLAB, 2);
	/* Any: node 0 has 7 free, node 1 has 5: it takes node 0's. */
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB, &any), 0);
	ck_assert_int_eq(pool_region_node(any), n0);
	/* 5 + 5 more cannot stay on one node: spread, and says so. */
	ck_assert_int_eq(pool_free(p, any), 0);
	ck_assert_int_eq(pool_alloc(p, 10 * SLAB, &any), 0);
	ck_assert_int_eq(pool_region_node(any), -1);
	write_read_check(p, any, 0, 10 * SLAB, 3);
	pool_close(p);
	ck_assert_int_eq(tu_memd_stop(&md, SIGTERM), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("numa_memd_bind");
	TCase *tc = tcase_create("two nodes");
	SRunner *sr;
	int failed, r, usable = 0;

	if (!tu_memd_path())
		tu_skip("TP_MEMD is not set (run through ctest)");
	r = place_topo_open(NULL, &topo);
	if (r)
		tu_skip("cannot read this host's topology: %s", strerror(-r));
	if (place_topo_nnodes(topo) < 2)
		tu_skip("needs two NUMA nodes; this host has %d",
			place_topo_nnodes(topo));
	/* The first two nodes with memory and CPUs. */
	for (int i = 0; i < place_topo_nnodes(topo) && usable < 2; i++) {
		int node = place_topo_node_id(topo, i);

		if (place_node_mem_bytes(topo, node) < 512ull * MiB ||
		    place_node_cpus(topo, node, NULL, 0) <= 0)
			continue;
		if (usable++ == 0)
			n0 = node;
		else
			n1 = node;
	}
	if (usable < 2)
		tu_skip("needs two NUMA nodes with memory and CPUs");
	if (access("/proc/self/numa_maps", R_OK))
		tu_skip("no /proc/self/numa_maps");
	signal(SIGPIPE, SIG_IGN);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, two_nodes_two_arenas_two_endpoints);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	place_topo_close(topo);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
