// SPDX-License-Identifier: MIT
/*
 * tests/test_numa_memd.c - memd with numa_nodes, and libpool's node-aware
 * allocation, on whatever host this is (one node is enough): leases and
 * endpoints say their node, a region says its node, a node memd does not
 * serve is refused with memd's reason, "all" works, a node the host lacks
 * stops memd with exit status 78, bytes stay exact through the per-node
 * endpoint, and without numa_nodes every node is -1. memd's memory lives
 * in another process, so its placement is read from the kernel
 * (/proc/PID/numa_maps), not taken from memd's word.
 *
 * Also memd/nodes.c on its own: node lists against synthetic and recorded
 * topologies, interface addresses, and how an endpoint's address is
 * chosen.
 *
 * The binding across two real nodes is tests/test_numa_memd_bind.c: it
 * needs two nodes and skips (77) elsewhere, which would hide these checks
 * if they lived in the same executable.
 *
 * Single-threaded, except the libpool sessions' own threads.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/wire.h"
#include "fabric/rpc.h"
#include "libpool/internal.h"
#include "memd/arena.h"
#include "memd/config.h"
#include "memd/log.h"
#include "memd/nodes.h"
#include "memd/server.h"
#include "numa/place.h"
#include "tests/testutil.h"
#include "tidepool/pool.h"

#define MiB (1024u * 1024u)
#define SLAB (16 * MiB) /* testutil's memd: 256M donated, 16M slabs */
#define NSLABS 16

static struct tu_memd md;
static int host_node[PLACE_NODE_MAX]; /* this host's nodes, increasing */
static int nhost;

static void start(const char *conf, const char *const *args)
{
	int r = tu_memd_start_args(&md, conf, args);

	ck_assert_msg(r == 0, "memd (%s) did not start: %s", conf ? conf : "",
		      strerror(-r));
}

static void stop(void)
{
	int st = tu_memd_stop(&md, SIGTERM);

	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
		      "memd exit status %d", st);
}

static struct pool *connect_memd(void)
{
	return tu_pool_connect(&md);
}

/* A raw control session: HELLO_OK into *hello. */
static struct rpc *raw_session(struct wire_hello_ok *hello)
{
	return tu_raw_hello(md.addr, hello);
}

static struct wire_status_ok raw_status(struct rpc *c)
{
	struct wire_msg req = { .type = WIRE_STATUS }, rep;

	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_STATUS_OK, 5000, NULL, 0),
			 0);
	return rep.u.status_ok;
}

static struct wire_status_ok memd_status(void)
{
	struct wire_hello_ok h;
	struct rpc *c = raw_session(&h);
	struct wire_status_ok st = raw_status(c);

	rpc_close(c);
	return st;
}

static char *read_file(const char *path)
{
	static char buf[1 << 16];
	FILE *f = fopen(path, "r");
	size_t n;

	ck_assert_msg(f, "cannot read %s", path);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static bool memd_log_has(const char *needle)
{
	char path[300];

	snprintf(path, sizeof(path), "%s/memd.log", md.dir);
	return strstr(read_file(path), needle) != NULL;
}

/* Every extent of r is on node, served by endpoint ep. */
static void assert_extents(const struct pool_region *r, int node, int ep)
{
	for (uint32_t i = 0; i < pool_region_nextents(r); i++) {
		struct wire_lease l;
		uint64_t off, len;

		ck_assert_int_eq(pool_region_extent(r, i, &l, &off, &len), 0);
		ck_assert_int_eq(l.node, node);
		ck_assert_int_eq(l.endpoint, ep);
	}
}

/* The slab behind extent i of r. */
static uint32_t extent_slab(const struct pool_region *r, uint32_t i)
{
	struct wire_lease l;
	uint64_t off, len;

	ck_assert_int_eq(pool_region_extent(r, i, &l, &off, &len), 0);
	return l.slab;
}

/* Runs memd with args; output (both streams) into out. Exit status. */
static int run_memd(const char *const *args, const char *env, char *out,
		    size_t outlen)
{
	char path[] = "/tmp/tp-numa-out-XXXXXX";
	const char *argv[24];
	int st, fd = mkstemp(path);
	pid_t pid;

	ck_assert_int_ge(fd, 0);
	tu_argv(argv, 24, tu_memd_path(), args);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		if (env)
			putenv((char *)env);
		execv(argv[0], (char **)argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	close(fd);
	{
		const char *text = read_file(path);
		size_t len = strnlen(text, outlen - 1);

		/* The log may be longer than out: keep its head. */
		memcpy(out, text, len);
		out[len] = '\0';
	}
	unlink(path);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* --- memd/nodes.c on its own ------------------------------------------ */

START_TEST(resolve_node_lists)
{
	struct place_topo *t;
	struct memd_config c;
	char err[512];
	int nodes[MEMD_NUMA_NODES_MAX];

	memd_config_defaults(&c);
	/* No numa_nodes: no topology needed, no nodes. */
	ck_assert_int_eq(
		memd_nodes_resolve(NULL, &c, nodes, 8, err, sizeof(err)), 0);

	ck_assert_int_eq(
		place_topo_open_synthetic("pack:2 numa:1 core:1 pu:1", &t), 0);
	ck_assert_int_eq(
		memd_config_set(&c, "numa_nodes", "all", err, sizeof(err)), 0);
	ck_assert_int_eq(memd_nodes_resolve(t, &c, nodes, 8, err, sizeof(err)),
			 2);
	ck_assert_int_eq(nodes[0], 0);
	ck_assert_int_eq(nodes[1], 1);
	ck_assert_int_eq(
		memd_config_set(&c, "numa_nodes", "1", err, sizeof(err)), 0);
	ck_assert_int_eq(memd_nodes_resolve(t, &c, nodes, 8, err, sizeof(err)),
			 1);
	ck_assert_int_eq(nodes[0], 1);
	ck_assert_int_eq(
		memd_config_set(&c, "numa_nodes", "0,5", err, sizeof(err)), 0);
	ck_assert_int_eq(memd_nodes_resolve(t, &c, nodes, 8, err, sizeof(err)),
			 -ENXIO);
	ck_assert_str_eq(err, "key 'numa_nodes': node 5 is not a NUMA node "
			      "of this host (it has nodes 0,1)");
	place_topo_close(t);

	/* More nodes than memd has endpoints for. */
	ck_assert_int_eq(
		place_topo_open_synthetic("pack:10 numa:1 core:1 pu:1", &t), 0);
	ck_assert_int_eq(
		memd_config_set(&c, "numa_nodes", "all", err, sizeof(err)), 0);
	ck_assert_int_eq(memd_nodes_resolve(t, &c, nodes, 8, err, sizeof(err)),
			 -E2BIG);
	ck_assert_msg(strstr(err, "'all' is 10 nodes on this host "
				  "(0,1,2,3,4,5,6,7,8,9)"),
		      "%s", err);
	ck_assert_int_eq(
		memd_config_set(&c, "numa_nodes", "2-9", err, sizeof(err)), 0);
	ck_assert_int_eq(memd_nodes_resolve(t, &c, nodes, 8, err, sizeof(err)),
			 8);
	ck_assert_int_eq(nodes[7], 9);
	place_topo_close(t);
}
END_TEST

START_TEST(interface_addresses)
{
	char a[MEMD_BIND_MAX];

	ck_assert_int_eq(memd_nodes_ifaddr("lo", AF_INET, a, sizeof(a)), 0);
	ck_assert_str_eq(a, "127.0.0.1");
	ck_assert_int_eq(memd_nodes_ifaddr("lo", AF_UNSPEC, a, sizeof(a)), 0);
	ck_assert_str_eq(a, "127.0.0.1");
	if (memd_nodes_ifaddr("lo", AF_INET6, a, sizeof(a)) == 0)
		ck_assert_str_eq(a, "::1");
	ck_assert_int_eq(memd_nodes_ifaddr("lo", AF_INET, a, 5), -ENOSPC);
	ck_assert_int_eq(
		memd_nodes_ifaddr("no-such-if0", AF_UNSPEC, a, sizeof(a)),
		-ENOENT);

	ck_assert(memd_nodes_is_loopback("127.0.0.1"));
	ck_assert(memd_nodes_is_loopback("127.3.2.1"));
	ck_assert(memd_nodes_is_loopback("::1"));
	ck_assert(memd_nodes_is_loopback("::ffff:127.0.0.1"));
	ck_assert(memd_nodes_is_loopback("localhost"));
	ck_assert(!memd_nodes_is_loopback("0.0.0.0"));
	ck_assert(!memd_nodes_is_loopback("::"));
	ck_assert(!memd_nodes_is_loopback("10.0.0.1"));
	ck_assert(!memd_nodes_is_loopback("memd-1.example"));
}
END_TEST

START_TEST(bind_address_choice)
{
	char a[MEMD_BIND_MAX], why[160];
	struct place_topo *t;

	/* The operator's fabric_node wins everywhere. */
	ck_assert_int_eq(memd_nodes_bind_addr(NULL, 0, "tcp", "10.9.8.7",
					      "10.1.1.1", a, sizeof(a), why,
					      sizeof(why)),
			 0);
	ck_assert_str_eq(a, "10.1.1.1");
	ck_assert_str_eq(why, "fabric_node is set");
	/* Loopback listener: the listen host, as without NUMA. */
	ck_assert_int_eq(memd_nodes_bind_addr(NULL, 0, "tcp", "127.0.0.1", "",
					      a, sizeof(a), why, sizeof(why)),
			 0);
	ck_assert_str_eq(a, "127.0.0.1");
	ck_assert_str_eq(why, "control listener on loopback");
	/* No placement. */
	ck_assert_int_eq(memd_nodes_bind_addr(NULL, -1, "tcp", "10.9.8.7", "",
					      a, sizeof(a), why, sizeof(why)),
			 0);
	ck_assert_str_eq(a, "10.9.8.7");
	ck_assert_str_eq(why, "no NUMA placement");
	/* A topology without NICs. */
	ck_assert_int_eq(
		place_topo_open_synthetic("pack:2 numa:1 core:1 pu:1", &t), 0);
	ck_assert_int_eq(memd_nodes_bind_addr(t, 1, "tcp", "10.9.8.7", NULL, a,
					      sizeof(a), why, sizeof(why)),
			 0);
	ck_assert_str_eq(a, "10.9.8.7");
	ck_assert_str_eq(why, "no NIC known near node 1");
	ck_assert_int_eq(memd_nodes_bind_addr(t, 1, "tcp", "10.9.8.7", NULL, a,
					      4, why, sizeof(why)),
			 -ENOSPC);
	place_topo_close(t);
}
END_TEST

/*
 * The recorded topology of a 4-node machine: tests/data (the repository's
 * copy), else $TP_TOPOLOGY_DIR, the checkout's shared/ or the one beside
 * it; NULL when none has it.
 */
static const char *recorded_topology(void)
{
	static char path[PATH_MAX];
	const char *src = getenv("TP_SOURCE_DIR"),
		   *env = getenv("TP_TOPOLOGY_DIR");
	const char *dirs[4];
	struct stat st;
	int n = 0;

	if (!src || !*src)
		src = ".";
	dirs[n++] = "tests/data";
	if (env && *env)
		dirs[n++] = env;
	dirs[n++] = "shared/topologies";
	dirs[n++] = "../shared/topologies";
	for (int i = 0; i < n; i++) {
		if (dirs[i][0] == '/')
			snprintf(path, sizeof(path),
				 "%s/96em64t-4n4d3ca2co-pci.xml", dirs[i]);
		else
			snprintf(path, sizeof(path),
				 "%s/%s/96em64t-4n4d3ca2co-pci.xml", src,
				 dirs[i]);
		if (!stat(path, &st))
			return path;
	}
	return NULL;
}

/*
 * A recorded 4-node machine with eth(2k), eth(2k+1) on node k
 * (docs/numa.md): node 0's nearest NIC is eth0, node 1's eth2. On this
 * host eth0 may exist (then its address is the answer) and eth2 most
 * likely does not (then the listen host is). Run by `test_numa_memd
 * --recorded` (ctest test_numa_memd_recorded), which skips (77) where the
 * recorded topology is missing.
 */
START_TEST(recorded_machine_nic_choice)
{
	const char *path = recorded_topology();
	char a[MEMD_BIND_MAX], why[160], eth0[MEMD_BIND_MAX];
	struct place_topo *t;

	ck_assert_ptr_nonnull(path);
	ck_assert_int_eq(place_topo_open(path, &t), 0);
	ck_assert_int_eq(memd_nodes_bind_addr(t, 0, "tcp", "0.0.0.0", "", a,
					      sizeof(a), why, sizeof(why)),
			 0);
	if (memd_nodes_ifaddr("eth0", AF_INET, eth0, sizeof(eth0)) == 0) {
		ck_assert_str_eq(a, eth0);
		ck_assert_str_eq(why, "nearest NIC eth0 (eth0, node 0)");
	} else {
		ck_assert_str_eq(a, "0.0.0.0");
		ck_assert_str_eq(why, "nearest NIC eth0 has no usable address "
				      "here");
	}
	if (memd_nodes_ifaddr("eth2", AF_UNSPEC, eth0, sizeof(eth0))) {
		ck_assert_int_eq(memd_nodes_bind_addr(
					 t, 1, "verbs;ofi_rxm", "10.9.8.7", "",
					 a, sizeof(a), why, sizeof(why)),
				 0);
		ck_assert_str_eq(a, "10.9.8.7");
		ck_assert_str_eq(why, "nearest NIC eth2 has no usable address "
				      "here");
	}
	/* An override moves the NIC: eth0 is now node 3's nearest. */
	ck_assert_int_eq(place_topo_set_nic_node(t, "eth0", 3), 0);
	ck_assert_int_eq(memd_nodes_bind_addr(t, 3, "tcp", "0.0.0.0", "", a,
					      sizeof(a), why, sizeof(why)),
			 0);
	ck_assert_msg(strstr(why, "nearest NIC eth0"), "%s", why);
	place_topo_close(t);
}
END_TEST

/* --- memd without numa_nodes: node -1 everywhere ------------------------ */

START_TEST(without_numa_nodes_nodes_are_minus_one)
{
	struct wire_hello_ok h;
	struct wire_status_ok st;
	struct rpc *c;
	struct pool *p;
	struct pool_region *r, *small;

	start(NULL, NULL);
	c = raw_session(&h);
	ck_assert_int_eq(h.nendpoints, 1);
	ck_assert_int_eq(h.ep[0].node, WIRE_NODE_ANY);
	ck_assert_int_gt(h.ep[0].addr_len, 0);
	st = raw_status(c);
	ck_assert_int_eq(st.nnodes, 1);
	ck_assert_int_eq(st.node[0].node, WIRE_NODE_ANY);
	ck_assert_uint_eq(st.node[0].slabs_total, NSLABS);
	ck_assert_uint_eq(st.node[0].slabs_free, NSLABS);
	rpc_close(c);

	p = connect_memd();
	ck_assert_int_eq(pool_session_nendpoints(p), 1);
	ck_assert_int_eq(pool_alloc(p, 2 * SLAB + 100, &r), 0);
	ck_assert_int_eq(pool_region_node(r), -1);
	assert_extents(r, -1, 0);
	tu_pool_write_read_check(p, r, SLAB - 7, SLAB + 50, 41);
	ck_assert_int_eq(pool_alloc_node(p, 100, -1, &small), 0);
	ck_assert_int_eq(pool_region_node(small), -1);
	/* A node, from a memd that places nothing: refused, not ignored. */
	ck_assert_int_eq(pool_alloc_node(p, 100, 0, &small), -EINVAL);
	ck_assert_ptr_null(small);
	ck_assert(memd_log_has("node=0 why=node not served"));
	st = memd_status();
	ck_assert_uint_eq(st.node[0].slabs_free, NSLABS - 3);
	ck_assert_int_eq(pool_region_node(NULL), -1);
	pool_close(p);
	/* No NUMA binding: memd's memory has the default policy. */
	ck_assert_uint_eq(tu_bound_to(md.pid, host_node[0]).mapped, 0);
	stop();
}
END_TEST

/* --- memd with numa_nodes = <first node> -------------------------------- */

START_TEST(one_node_leases_say_their_node)
{
	char conf[64];
	int n0 = host_node[0];
	struct wire_hello_ok h;
	struct wire_status_ok st;
	struct rpc *c;
	struct pool *p;
	struct pool_region *whole, *any, *a0, *b0, *a_any;

	snprintf(conf, sizeof(conf), "numa_nodes = %d", n0);
	start(conf, NULL);
	c = raw_session(&h);
	ck_assert_int_eq(h.nendpoints, 1);
	ck_assert_int_eq(h.ep[0].node, n0);
	st = raw_status(c);
	ck_assert_int_eq(st.nnodes, 1);
	ck_assert_int_eq(st.node[0].node, n0);
	ck_assert_uint_eq(st.node[0].slabs_total, NSLABS);
	ck_assert_uint_eq(st.slabs_total, NSLABS);
	rpc_close(c);
	/* The kernel, not memd, says where the donation is: all of it
	 * bound to the node and present there (locked and prefaulted). */
	tu_assert_arena_on(md.pid, n0, NSLABS * (uint64_t)SLAB);
	ck_assert(memd_log_has("bind=127.0.0.1 why=control listener on "
			       "loopback"));

	p = connect_memd();
	ck_assert_int_eq(pool_alloc_node(p, 3 * SLAB, n0, &whole), 0);
	ck_assert_int_eq(pool_region_node(whole), n0);
	assert_extents(whole, n0, 0);
	tu_pool_write_read_check(p, whole, 0, 3 * SLAB, 77);
	tu_pool_write_read_check(p, whole, SLAB - 3, 2 * SLAB, 78);
	/* Any node lands on the only one. */
	ck_assert_int_eq(pool_alloc(p, SLAB + 4096, &any), 0);
	ck_assert_int_eq(pool_region_node(any), n0);
	tu_pool_write_read_check(p, any, 0, SLAB + 4096, 79);

	/* Small regions share a packed slab only with the same node
	 * argument: two on n0 together, one on "any" elsewhere. */
	ck_assert_int_eq(pool_alloc_node(p, 5000, n0, &a0), 0);
	ck_assert_int_eq(pool_alloc_node(p, 5000, n0, &b0), 0);
	ck_assert_int_eq(pool_alloc_node(p, 5000, -1, &a_any), 0);
	ck_assert_uint_eq(pool_region_nextents(any), 2);
	ck_assert_uint_eq(extent_slab(a0, 0), extent_slab(b0, 0));
	ck_assert_uint_ne(extent_slab(a0, 0), extent_slab(a_any, 0));
	ck_assert_uint_ne(extent_slab(a0, 0), extent_slab(any, 1));
	ck_assert_uint_eq(extent_slab(a_any, 0), extent_slab(any, 1));
	ck_assert_int_eq(pool_region_node(a0), n0);
	ck_assert_int_eq(pool_region_node(a_any), n0);
	tu_pool_write_read_check(p, a0, 0, 5000, 80);
	tu_pool_write_read_check(p, b0, 0, 5000, 81);
	tu_pool_write_read_check(p, a_any, 0, 5000, 82);

	st = memd_status();
	/* 3 + 1 and a packed "any" slab + 1 packed n0 slab */
	ck_assert_uint_eq(st.node[0].slabs_free, NSLABS - 6);
	ck_assert_uint_eq(st.slabs_free, NSLABS - 6);
	/* More than the node has left. */
	ck_assert_int_eq(pool_alloc_node(p, 11 * SLAB, n0, &whole), -ENOSPC);
	pool_close(p);
	stop();
}
END_TEST

START_TEST(unserved_node_is_einval_with_memds_reason)
{
	char conf[64], logpath[] = "/tmp/tp-numa-log-XXXXXX", want[128];
	int n0 = host_node[0], absent = host_node[nhost - 1] + 1;
	struct wire_hello_ok h;
	struct wire_status_ok st;
	struct wire_msg req = { .type = WIRE_LEASE }, rep;
	struct rpc *c;
	struct pool_region *r = (void *)1;
	struct pool *p;
	char text[WIRE_MSG_MAX];
	int fd, saved;

	snprintf(conf, sizeof(conf), "numa_nodes = %d", n0);
	start(conf, NULL);
	p = connect_memd();
	/* Bounds the library checks itself. */
	ck_assert_int_eq(pool_alloc_node(p, 10, -2, &r), -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(pool_alloc_node(p, 10, WIRE_NODE_MAX, &r), -EINVAL);
	ck_assert_int_eq(pool_alloc_node(p, 0, n0, &r), -EINVAL);

	/* A node memd does not serve: memd's reason lands in our log. */
	fd = mkstemp(logpath);
	ck_assert_int_ge(fd, 0);
	saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	r = (void *)1;
	ck_assert_int_eq(pool_alloc_node(p, SLAB, absent, &r), -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_int_eq(pool_alloc_node(p, 100, absent, &r), -EINVAL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fd);
	snprintf(want, sizeof(want),
		 "node %d is not served by this memd (numa_nodes: %d)", absent,
		 n0);
	ck_assert_msg(strstr(read_file(logpath), want), "log: %s",
		      read_file(logpath));
	unlink(logpath);
	/* The session goes on. */
	ck_assert_int_eq(pool_alloc_node(p, 100, n0, &r), 0);
	tu_pool_write_read_check(p, r, 0, 100, 5);
	pool_close(p);

	/* On the wire: ERROR EINVAL, and the connection stays open. */
	c = raw_session(&h);
	req.u.lease.nslabs = 1;
	req.u.lease.node = absent;
	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_LEASE_OK, 5000, text,
				  sizeof(text)),
			 -EINVAL);
	ck_assert_msg(strstr(text, want), "%s", text);
	req.u.lease.node = n0;
	ck_assert_int_eq(rpc_call(c, &req, &rep, WIRE_LEASE_OK, 5000, NULL, 0),
			 0);
	ck_assert_int_eq(rep.u.lease_ok.lease[0].node, n0);
	ck_assert_int_eq(rep.u.lease_ok.lease[0].endpoint, 0);
	/* (the closed session's slab may still be being zeroed) */
	st = raw_status(c);
	ck_assert_uint_eq(st.slabs_leased, 1);
	ck_assert_uint_eq(st.node[0].slabs_free,
			  NSLABS - 1 - st.slabs_reclaiming);
	rpc_close(c);
	stop();
}
END_TEST

/* --- numa_nodes = all ---------------------------------------------------- */

START_TEST(all_nodes)
{
	int n = nhost < MEMD_NUMA_NODES_MAX ? nhost : MEMD_NUMA_NODES_MAX;
	char donate[32];
	const char *args[] = { "--donate", donate, NULL };
	struct wire_hello_ok h;
	struct wire_status_ok st;
	struct rpc *c;
	struct pool *p;

	if (nhost > MEMD_NUMA_NODES_MAX) {
		printf("NOTE: %d nodes: 'all' is refused here (more than %d); "
		       "checked by resolve_node_lists\n",
		       nhost, MEMD_NUMA_NODES_MAX);
		return;
	}
	/* Two slabs per node. */
	snprintf(donate, sizeof(donate), "%dM", 2 * 16 * n);
	start("numa_nodes = all", args);
	c = raw_session(&h);
	ck_assert_int_eq(h.nendpoints, n);
	st = raw_status(c);
	ck_assert_int_eq(st.nnodes, n);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(h.ep[i].node, host_node[i]);
		ck_assert_int_eq(st.node[i].node, host_node[i]);
		ck_assert_uint_eq(st.node[i].slabs_total, 2);
	}
	rpc_close(c);
	p = connect_memd();
	ck_assert_int_eq(pool_session_nendpoints(p), n);
	for (int i = 0; i < n; i++) {
		struct pool_region *r;

		ck_assert_int_eq(pool_alloc_node(p, SLAB + 1, host_node[i], &r),
				 0);
		ck_assert_int_eq(pool_region_node(r), host_node[i]);
		assert_extents(r, host_node[i], i);
		tu_pool_write_read_check(p, r, SLAB - 100, 101, 90 + i);
		tu_assert_arena_on(md.pid, host_node[i], 2 * (uint64_t)SLAB);
	}
	pool_close(p);
	stop();
}
END_TEST

/* --- start-up errors ----------------------------------------------------- */

START_TEST(bad_nodes_stop_memd)
{
	char out[8192], nodes[64], want[128];
	int absent = host_node[nhost - 1] + 1;
	const char *base[] = { "--listen", "127.0.0.1:0", "--donate",
			       "64M",	   "--slab-size", "16M",
			       "--set",	   nodes,	  NULL };
	const char *check[] = { "--donate", "64M", "--slab-size",    "16M",
				"--set",    nodes, "--check-config", NULL };
	const char *plain[] = { "--donate",	  "64M", "--slab-size", "16M",
				"--check-config", NULL };

	/* A node this host does not have: 78, naming it. */
	snprintf(nodes, sizeof(nodes), "numa_nodes=%d,%d", host_node[0],
		 absent);
	snprintf(want, sizeof(want),
		 "key 'numa_nodes': node %d is not a NUMA node of this host",
		 absent);
	ck_assert_int_eq(run_memd(base, NULL, out, sizeof(out)), 78);
	ck_assert_msg(strstr(out, want), "%s", out);
	/* --check-config finds it too. */
	ck_assert_int_eq(run_memd(check, NULL, out, sizeof(out)), 78);
	ck_assert_msg(strstr(out, want), "%s", out);

	/* A donation that does not split into whole slabs per node. */
	snprintf(nodes, sizeof(nodes), "numa_nodes=0-2");
	ck_assert_int_eq(run_memd(base, NULL, out, sizeof(out)), 78);
	ck_assert_msg(strstr(out, "does not split into whole slabs over 3 "
				  "nodes"),
		      "%s", out);
	/* More nodes than endpoints, and bad syntax. */
	snprintf(nodes, sizeof(nodes), "numa_nodes=0-8");
	ck_assert_int_eq(run_memd(base, NULL, out, sizeof(out)), 78);
	ck_assert_msg(strstr(out, "names 9 nodes"), "%s", out);
	snprintf(nodes, sizeof(nodes), "numa_nodes=zero");
	ck_assert_int_eq(run_memd(base, NULL, out, sizeof(out)), 78);
	ck_assert_msg(strstr(out, "'zero' is not a node list"), "%s", out);

	/* A bad override in the environment: 78, naming the variable. */
	snprintf(nodes, sizeof(nodes), "numa_nodes=%d", host_node[0]);
	ck_assert_int_eq(
		run_memd(base, "TIDEPOOL_NIC_NODE=eth0=x", out, sizeof(out)),
		78);
	ck_assert_msg(strstr(out, "TIDEPOOL_NIC_NODE"), "%s", out);
	ck_assert_int_eq(
		run_memd(check, "TIDEPOOL_NIC_NODE=9999", out, sizeof(out)),
		78);
	ck_assert_msg(strstr(out, "TIDEPOOL_NIC_NODE"), "%s", out);
	/* Without numa_nodes the variables are not read at all. */
	ck_assert_int_eq(
		run_memd(plain, "TIDEPOOL_NIC_NODE=bad", out, sizeof(out)), 0);
}
END_TEST

/* --- two arenas in one memd, in this process ----------------------------- */

static void *server_main(void *arg)
{
	return (void *)(intptr_t)memd_server_run(arg);
}

/*
 * What a two-node memd does, on a host with one node: the server gets two
 * arenas, the first bound to this host's node, the second labelled node
 * n0 + 1 (its pages are not bound: there is no such node here), and no
 * topology (so no NIC choice and no pinning, which the two-node test
 * covers). Everything else is the real thing: two fabric domains and
 * endpoints, two progress threads, the grant policy, the lease fields,
 * STATUS, and a client that must send each transfer to the endpoint of
 * its slab (a key registered on one domain opens nothing through the
 * other endpoint, so a wrong route fails instead of reading zeroes).
 */
START_TEST(two_arenas_in_process)
{
	static struct memd_arena ar[2];
	char dir[] = "/tmp/tp-numa-srv-XXXXXX", ready[64], err[512];
	char addr[64] = "";
	int na = host_node[0], nb = host_node[nhost - 1] + 1;
	struct pool_opts o = { .addr = addr, .timeout_ms = 5000 };
	struct pool_region *ra, *rb, *any, *spread, *small;
	struct memd_server *srv;
	struct memd_config cfg;
	struct wire_hello_ok h;
	struct wire_status_ok st;
	struct rpc *c;
	struct pool *p;
	pthread_t th;
	sigset_t mask;
	void *ret;
	FILE *f;
	int node;
	const uint8_t *ea;
	uint16_t ealen;

	/* memd takes its signals through a signalfd: block them in every
	 * thread, which all start after this. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	ck_assert_int_eq(pthread_sigmask(SIG_BLOCK, &mask, NULL), 0);
	memd_log_level = LOG_WARNING;

	memd_config_defaults(&cfg);
	ck_assert_int_eq(memd_config_set(&cfg, "listen", "127.0.0.1:0", err,
					 sizeof(err)),
			 0);
	ck_assert_int_eq(
		memd_config_set(&cfg, "slab_size", "16M", err, sizeof(err)), 0);
	ck_assert_int_eq(
		memd_config_set(&cfg, "donate", "128M", err, sizeof(err)), 0);
	ck_assert_int_eq(
		memd_config_set(&cfg, "quiesce", "0ms", err, sizeof(err)), 0);
	ck_assert_int_eq(memd_arena_create(64 * MiB, MEMD_HUGEPAGES_NO, na,
					   &ar[0], err, sizeof(err)),
			 0);
	ck_assert_int_eq(memd_arena_create(64 * MiB, MEMD_HUGEPAGES_NO, -1,
					   &ar[1], err, sizeof(err)),
			 0);
	ck_assert_int_eq(ar[0].node, na);
	ar[1].node = nb; /* the label a second node's arena would carry */
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(ready, sizeof(ready), "%s/ready", dir);
	/* 2 arenas x 8 endpoints do not fit in HELLO_OK: refused, named */
	ck_assert_int_eq(memd_config_set(&cfg, "progress_threads", "8", err,
					 sizeof(err)),
			 0);
	ck_assert_int_eq(memd_server_create(&cfg, ar, 2, NULL, NULL, NULL,
					    ready, &srv, err, sizeof(err)),
			 -EINVAL);
	ck_assert_ptr_null(srv);
	ck_assert_msg(strstr(err, "progress_threads = 8 with 2 arenas is 16 "
				  "endpoints; at most 8"),
		      "%s", err);
	ck_assert_int_eq(memd_config_set(&cfg, "progress_threads", "1", err,
					 sizeof(err)),
			 0);
	ck_assert_msg(memd_server_create(&cfg, ar, 2, NULL, NULL, NULL, ready,
					 &srv, err, sizeof(err)) == 0,
		      "%s", err);
	f = fopen(ready, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%63s", addr), 1);
	fclose(f);
	unlink(ready);
	rmdir(dir);
	ck_assert_int_eq(pthread_create(&th, NULL, server_main, srv), 0);
	snprintf(md.addr, sizeof(md.addr), "%s", addr);

	c = raw_session(&h);
	ck_assert_int_eq(h.nendpoints, 2);
	ck_assert_int_eq(h.ep[0].node, na);
	ck_assert_int_eq(h.ep[1].node, nb);
	ck_assert(h.ep[0].addr_len != h.ep[1].addr_len ||
		  memcmp(h.ep[0].addr, h.ep[1].addr, h.ep[0].addr_len));
	st = raw_status(c);
	ck_assert_int_eq(st.nnodes, 2);
	ck_assert_uint_eq(st.slabs_total, 8);
	ck_assert_uint_eq(st.donated_bytes, 128 * MiB);
	ck_assert_int_eq(st.node[1].node, nb);
	ck_assert_uint_eq(st.node[1].slabs_total, 4);
	ck_assert_uint_eq(st.node[1].slabs_free, 4);
	rpc_close(c);

	ck_assert_int_eq(pool_connect(&o, &p), 0);
	ck_assert_int_eq(pool_session_nendpoints(p), 2);
	ck_assert_int_eq(pool_session_endpoint(p, 1, &node, &ea, &ealen), 0);
	ck_assert_int_eq(node, nb);
	ck_assert_int_eq(pool_session_endpoint(p, 2, &node, &ea, &ealen),
			 -ERANGE);
	/* On the second node: its slabs (4 .. 7), its endpoint. */
	ck_assert_int_eq(pool_alloc_node(p, 2 * SLAB, nb, &rb), 0);
	ck_assert_int_eq(pool_region_node(rb), nb);
	assert_extents(rb, nb, 1);
	ck_assert_uint_eq(extent_slab(rb, 0), 4);
	ck_assert_uint_eq(extent_slab(rb, 1), 5);
	ck_assert_int_eq(pool_alloc_node(p, SLAB, na, &ra), 0);
	ck_assert_int_eq(pool_region_node(ra), na);
	assert_extents(ra, na, 0);
	ck_assert_uint_eq(extent_slab(ra, 0), 0);
	tu_pool_write_read_check(p, rb, 0, 2 * SLAB, 100);
	tu_pool_write_read_check(p, ra, 0, SLAB, 101);
	tu_pool_write_read_check(p, rb, SLAB - 99, 198, 102);
	/* A packed region on nb shares nothing with na's slabs. */
	ck_assert_int_eq(pool_alloc_node(p, 300, nb, &small), 0);
	assert_extents(small, nb, 1);
	tu_pool_write_read_check(p, small, 0, 300, 103);
	/* Any: the fullest arena (na: 3 free, nb: 1). */
	ck_assert_int_eq(pool_alloc(p, SLAB, &any), 0);
	ck_assert_int_eq(pool_region_node(any), na);
	ck_assert_int_eq(pool_free(p, any), 0);
	for (int i = 0; i < 500 && memd_status().slabs_free < 4; i++)
		usleep(10000); /* zeroed, then free again */
	/* More than one arena has: spread, node -1. */
	ck_assert_int_eq(pool_alloc(p, 4 * SLAB, &spread), 0);
	ck_assert_int_eq(pool_region_node(spread), -1);
	tu_pool_write_read_check(p, spread, 0, 4 * SLAB, 104);
	st = memd_status();
	ck_assert_uint_eq(st.slabs_free, 0);
	ck_assert_uint_eq(st.node[0].slabs_free, 0);
	ck_assert_uint_eq(st.node[1].slabs_free, 0);
	ck_assert_int_eq(pool_alloc_node(p, 1, na, &any), -ENOSPC);
	ck_assert_int_eq(pool_free(p, spread), 0);
	ck_assert_int_eq(pool_free(p, rb), 0);
	/* Freed slabs of both arenas are zeroed and come back. */
	for (int i = 0; i < 500; i++) {
		st = memd_status();
		if (st.slabs_free == 6)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(st.slabs_free, 6);
	ck_assert_int_eq(pool_alloc_node(p, 2 * SLAB, nb, &rb), 0);
	{
		uint8_t z[4096], b[4096];

		memset(z, 0, sizeof(z));
		ck_assert_int_eq(pool_read(p, rb, SLAB - 4096, b, sizeof(b)),
				 0);
		ck_assert_int_eq(memcmp(b, z, sizeof(b)), 0);
	}
	pool_close(p);

	ck_assert_int_eq(kill(getpid(), SIGTERM), 0);
	ck_assert_int_eq(pthread_join(th, &ret), 0);
	ck_assert_ptr_null(ret);
	memd_server_destroy(srv);
	memd_arena_destroy(&ar[1]);
	memd_arena_destroy(&ar[0]);
	md.addr[0] = '\0';
}
END_TEST

int main(int argc, char **argv)
{
	struct place_topo *t;
	Suite *s = suite_create("numa_memd");
	TCase *unit = tcase_create("nodes");
	TCase *tc;
	int r;

	if (argc > 1 && !strcmp(argv[1], "--recorded")) {
		/* only the recorded machine, and a skip without it */
		if (!recorded_topology())
			tu_skip("recorded topology 96em64t-4n4d3ca2co-pci.xml "
				"not found (TP_TOPOLOGY_DIR, shared/topologies "
				"in or beside the source tree)");
		tcase_add_test(unit, recorded_machine_nic_choice);
		suite_add_tcase(s, unit);
		return tu_run_suite(s);
	}
	tc = tcase_create("memd");
	if (!tu_memd_path())
		tu_skip("TP_MEMD is not set (run through ctest)");
	r = place_topo_open(NULL, &t);
	if (r)
		tu_skip("cannot read this host's topology: %s", strerror(-r));
	nhost = place_topo_nnodes(t);
	for (int i = 0; i < nhost; i++)
		host_node[i] = place_topo_node_id(t, i);
	place_topo_close(t);
	if (access("/proc/self/numa_maps", R_OK))
		tu_skip("no /proc/self/numa_maps: kernel without NUMA");
	/* Warnings (memd's refusals among them) go to stderr. */
	setenv("LIBPOOL_LOG", "warning", 1);
	signal(SIGPIPE, SIG_IGN);

	tcase_add_test(unit, resolve_node_lists);
	tcase_add_test(unit, interface_addresses);
	tcase_add_test(unit, bind_address_choice);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, without_numa_nodes_nodes_are_minus_one);
	tcase_add_test(tc, one_node_leases_say_their_node);
	tcase_add_test(tc, unserved_node_is_einval_with_memds_reason);
	tcase_add_test(tc, all_nodes);
	tcase_add_test(tc, bad_nodes_stop_memd);
	tcase_add_test(tc, two_arenas_in_process);
	suite_add_tcase(s, unit);
	suite_add_tcase(s, tc);
	return tu_run_suite(s);
}
