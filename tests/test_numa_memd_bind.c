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

START_TEST(two_nodes_two_arenas_two_endpoints)
{
	char conf[64];
	struct wire_hello_ok hello;
	struct pool_opts o = { .timeout_ms = 5000 };
	struct pool_region *r0, *r1, *any;
	struct rpc *c;
	struct pool *p;
	struct wire_lease l;
	uint64_t off, len;

	snprintf(conf, sizeof(conf), "numa_nodes = %d,%d", n0, n1);
	ck_assert_int_eq(tu_memd_start(&md, conf), 0);

	/* The kernel's view: each half bound to and present on its node. */
	tu_assert_arena_on(md.pid, n0, PER_NODE * (uint64_t)SLAB);
	tu_assert_arena_on(md.pid, n1, PER_NODE * (uint64_t)SLAB);
	ck_assert(thread_on_node(md.pid, "memd-fab0", n0));
	ck_assert(thread_on_node(md.pid, "memd-fab1", n1));

	c = tu_raw_hello(md.addr, &hello);
	ck_assert_int_eq(hello.nendpoints, 2);
	ck_assert_int_eq(hello.ep[0].node, n0);
	ck_assert_int_eq(hello.ep[1].node, n1);
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
	tu_pool_write_read_check(p, r1, SLAB - 5, 2 * SLAB, 1);
	tu_pool_write_read_check(p, r0, 0, SLAB, 2);
	/* Any: node 0 has 7 free, node 1 has 5: it takes node 0's. */
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB, &any), 0);
	ck_assert_int_eq(pool_region_node(any), n0);
	/* 5 + 5 more cannot stay on one node: spread, and says so. */
	ck_assert_int_eq(pool_free(p, any), 0);
	ck_assert_int_eq(pool_alloc(p, 10 * SLAB, &any), 0);
	ck_assert_int_eq(pool_region_node(any), -1);
	tu_pool_write_read_check(p, any, 0, 10 * SLAB, 3);
	pool_close(p);
	ck_assert_int_eq(tu_memd_stop(&md, SIGTERM), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("numa_memd_bind");
	TCase *tc = tcase_create("two nodes");
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
	failed = tu_run_suite(s);
	place_topo_close(topo);
	return failed;
}
